#!/usr/bin/env bash
# bench_scaleout.sh — `make bench-scaleout`: the router of deploy/nginx, measured.
#
# On a 2-core machine, 1 vs 3 daemons is one CPU-bound machine either way and
# says nothing about scaling out, so this measures what the router itself
# costs and how it spreads characters:
#  1. overhead per request: bench_server (build/bench, the load generator of
#     make bench-server) against one daemon directly and through nginx (the
#     shipped nginx.conf with every upstream pointing at that same daemon),
#     alternating REPS times in the same run, small model "tiny" (120
#     vertices), HTTP binary and socket, 1 connection (latency) and 16
#     (throughput); nginx's own CPU time per request from /proc (one nginx
#     process: master_process off);
#  2. balance: N (default 1000) character names routed through nginx in front
#     of three daemons, over HTTP and the socket protocol: characters per
#     daemon and max/mean share; then daemon 1 killed: characters moved (ideal:
#     its share, about 1/3, and no other); then daemon 1 removed from the
#     upstream list (nginx reload): moved, consistent hash vs plain hash.
#     Ring positions depend on the daemons' addresses (random ports here), so
#     the balance is measured on ROUNDS port sets.
# Output: the figures on stdout and in build/bench/scaleout_results.txt.
# Environment: SECS (3), REPS (3), N (1000), ROUNDS (3), PARTS ("overhead
# balance": either alone runs one part).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
BIN=${BIN:-bin}
SECS=${SECS:-3}
REPS=${REPS:-3}
N=${N:-1000}
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-overhead balance}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
NGINX=/usr/sbin/nginx
OUT=$B/bench/scaleout_results.txt
LG=$B/bench/bench_server
SREPO=$B/bench/server_repo
mkdir -p "$B/bench"
[ -x "$NGINX" ] || { echo "bench-scaleout: needs nginx, libnginx-mod-stream(-js) (tools/deps.sh --test)"; exit 1; }
[ -f "$SREPO/tiny/1/model.safetensors" ] || "$LG" mkrepo "$SREPO" >/dev/null || exit 1
T=$(mktemp -d /tmp/df-bench-scaleout.XXXXXX)
mkdir -p "$T/repo" && cp -r "$SREPO/tiny" "$T/repo/"
PIDS=()
NGPID=
cleanup() {
    [ -n "$NGPID" ] && kill "$NGPID" 2>/dev/null
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HP=() SP=()
start_d() { # start_d I
    "$BIN/deformd" --repository "$T/repo" --host 127.0.0.1 --http-port "${HP[$1]}" \
        --socket-port "${SP[$1]}" >"$T/d$1.log" 2>&1 &
    PIDS[$1]=$!
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:${HP[$1]}/v2/health/ready" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "daemon $1 not ready"; cat "$T/d$1.log"; exit 1
}
RH=$(free_port); RS=$(free_port)
start_ng() { # start_ng HTTP-PORTS SOCK-PORTS [--plain]
    "$PY" bench/bench_scaleout.py conf --dst "$T/ng/nginx.conf" --ng "$T/ng" --listen-http "$RH" \
        --listen-sock "$RS" --http "$1" --sock "$2" ${3:-} || exit 1
    [ -n "$NGPID" ] && { kill "$NGPID"; wait "$NGPID" 2>/dev/null; }
    "$NGINX" -p "$T/ng" -c "$T/ng/nginx.conf" -e "$T/ng/error.log" -g 'daemon off; master_process off;' &
    NGPID=$!
    for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$RH/router/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "nginx did not start"; cat "$T/ng/error.log"; exit 1
}
mkdir -p "$T/ng"
cp deploy/nginx/deformd-*.conf deploy/nginx/deformd_route.js "$T/ng/"
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "n/a" }'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

exec > >(tee "$OUT") 2>&1
echo "# bench-scaleout: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); $($NGINX -v 2>&1)"
echo "# load average at start (other work on the machine): $(cut -d' ' -f1-3 /proc/loadavg)"
# ---------------------------------------------------------------- overhead
if [[ " $PARTS " == *" overhead "* ]]; then
for i in 0 1 2; do HP[$i]=$(free_port); SP[$i]=$(free_port); done
start_d 0
start_ng "${HP[0]},${HP[0]},${HP[0]}" "${SP[0]},${SP[0]},${SP[0]}"
echo "## 1. router overhead: tiny (120 vertices), one daemon, direct vs through nginx, $SECS s each, $REPS rounds"
for proto in bin sock; do
    for conns in 1 16; do
        dl=() rl=() dr=() rr=() nc=() dc=()
        for r in $(seq 1 "$REPS"); do
            dp=${HP[0]}; rp=$RH
            [ $proto = sock ] && { dp=${SP[0]}; rp=$RS; }
            d=$("$LG" run --port "$dp" --proto $proto --conns $conns --secs "$SECS" --chars tiny_a,tiny_b --weights 4 --pid "${PIDS[0]}")
            n=$("$LG" run --port "$rp" --proto $proto --conns $conns --secs "$SECS" --chars tiny_a,tiny_b --weights 4 --pid "$NGPID")
            echo "round $r $proto conns=$conns direct: $d"
            echo "round $r $proto conns=$conns router: $n"
            dl+=("$(field p50 "$d")"); rl+=("$(field p50 "$n")")
            dr+=("$(field rps "$d")"); rr+=("$(field rps "$n")")
            dc+=("$(field cpu_us_per_req "$d")"); nc+=("$(field cpu_us_per_req "$n")")
        done
        name=$([ $proto = bin ] && echo "HTTP binary" || echo "socket")
        echo "OVERHEAD $name, $conns connection(s): p50 latency direct $(median "${dl[@]}") us, through nginx $(median "${rl[@]}") us; req/s direct $(median "${dr[@]}"), through nginx $(median "${rr[@]}"); nginx CPU $(median "${nc[@]}") us per request (the daemon's own: $(median "${dc[@]}") us)"
    done
done
kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null
fi

# ---------------------------------------------------------------- balance
[[ " $PARTS " == *" balance "* ]] || exit 0
echo "## 2. balance: $N characters, three daemons, $ROUNDS sets of ports"
for r in $(seq 1 "$ROUNDS"); do
    for i in 0 1 2; do HP[$i]=$(free_port); SP[$i]=$(free_port); done
    for i in 0 1 2; do start_d $i; done
    H3="${HP[0]},${HP[1]},${HP[2]}"; S3="${SP[0]},${SP[1]},${SP[2]}"
    H2="${HP[0]},${HP[2]}"; S2="${SP[0]},${SP[2]}"
    : >"$T/ng/http.log"; : >"$T/ng/stream.log"
    start_ng "$H3" "$S3"
    "$PY" bench/bench_scaleout.py route --http "$RH" --sock "$RS" --n "$N" --tag all
    kill -9 "${PIDS[1]}"; wait "${PIDS[1]}" 2>/dev/null
    "$PY" bench/bench_scaleout.py route --http "$RH" --sock "$RS" --n "$N" --tag killed
    start_ng "$H2" "$S2"
    "$PY" bench/bench_scaleout.py route --http "$RH" --sock "$RS" --n "$N" --tag removed-consistent
    start_d 1
    start_ng "$H3" "$S3" --plain
    "$PY" bench/bench_scaleout.py route --http "$RH" --sock "$RS" --n "$N" --tag all-plain
    kill -9 "${PIDS[1]}"; wait "${PIDS[1]}" 2>/dev/null
    "$PY" bench/bench_scaleout.py route --http "$RH" --sock "$RS" --n "$N" --tag killed-plain
    start_ng "$H2" "$S2" --plain
    "$PY" bench/bench_scaleout.py route --http "$RH" --sock "$RS" --n "$N" --tag removed-plain
    echo "round $r (daemon ports http $H3, socket $S3):"
    "$PY" bench/bench_scaleout.py table --http-log "$T/ng/http.log" --stream-log "$T/ng/stream.log" \
        --ports-http "$H3" --ports-sock "$S3" --killed 1 --n "$N" | sed 's/^/  /'
    for i in 0 2; do kill "${PIDS[$i]}"; wait "${PIDS[$i]}" 2>/dev/null; done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# bench_server.sh — `make bench-server`: deformd against minimal fixed-reply
# servers, side by side in one run (shared machine: only ratios from the same
# run mean anything).
#
#  1. heavy model ("face": Wuson mesh, 256 morph targets), 64 connections,
#     HTTP binary, batching on vs off (--no-batching), throughput ratio;
#     also the socket front when it is built;
#  2. small model ("tiny", 120 vertices), 16 connections: HTTP JSON, HTTP
#     binary, socket, vs fixed_mhd / fixed_uv answering the same number of
#     bytes, as ratios; server CPU µs per request from /proc/PID/stat.
# Output: a table on stdout and build/bench/server_results.txt.
# Environment: SECS (default 5), CONNS_HEAVY (64), CONNS_SMALL (16).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
BIN=${BIN:-bin}
SECS=${SECS:-5}
CH=${CONNS_HEAVY:-64}
CS=${CONNS_SMALL:-16}
OUT=$B/bench/server_results.txt
REPO=$B/bench/server_repo
LG=$B/bench/bench_server
mkdir -p "$B/bench"
[ -f "$REPO/head/1/model.safetensors" ] || "$LG" mkrepo "$REPO" || exit 1
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

start_deformd() { # $1 tag, rest: extra args
    local tag=$1; shift
    rm -f "$B/bench/$tag.ready"
    "$BIN/deformd" --repository "$REPO" --http-port 0 --socket-port 0 \
        --ready-file "$B/bench/$tag.ready" "$@" 2>"$B/bench/$tag.log" &
    DPID=$!
    pids+=("$DPID")
    for _ in $(seq 200); do [ -s "$B/bench/$tag.ready" ] && break; sleep 0.05; done
    HP=$(sed -n 's/.*http=\([-0-9]*\).*/\1/p' "$B/bench/$tag.ready")
    SP=$(sed -n 's/.*socket=\([-0-9]*\).*/\1/p' "$B/bench/$tag.ready")
}
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
rps() { sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

{
echo "# deformd bench-server $(date -u +%FT%TZ) on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
heavy() { # $1 model label, $2 characters, $3 weights, $4 its max_queue_delay_us
    echo "## heavy model: $1, $CH connections, ${SECS}s each"
    start_deformd heavy_on
    on=$("$LG" run --port "$HP" --proto bin --conns "$CH" --secs "$SECS" --chars "$2" --weights "$3" --pid "$DPID")
    echo "batching on : $on"
    on_s=""; off_s=""
    if [ "${SP:--1}" -gt 0 ]; then
        on_s=$("$LG" run --port "$SP" --proto sock --conns "$CH" --secs "$SECS" --chars "$2" --weights "$3" --pid "$DPID")
        echo "batching on : $on_s"
    fi
    met=$(curl -s "http://127.0.0.1:$HP/metrics" | grep -E "^deformd_(batches_total|batches_mixed_total|batch_size_sum|batch_size_count|compute_us_total|requests_total)\\{model=\"${1%% *}\"")
    sed 's/^/    /' <<<"$met"
    # issue 4 target: p99 <= max_queue_delay + 2 x one batch's compute time
    # (compute per batch = compute_us_total / requests: each request counts
    # its batch's time, so this is the batch time a request sees)
    cb=$(awk '/compute_us_total/ {c=$2} /status="success"/ {r=$2} END { if (r > 0) printf "%.0f", c / r; else print 0 }' <<<"$met")
    bound=$(( $4 + 2 * cb ))
    for line in "$on" "$on_s"; do
        [ -n "$line" ] || continue
        p99=$(sed -n 's/.*p99=\([0-9]*\).*/\1/p' <<<"$line")
        echo "P99 CHECK ($(awk '{print $1}' <<<"$line"), ${1%% *}): p99 $p99 us vs max_queue_delay $4 + 2 x batch compute $cb = $bound us: $(awk -v a="$p99" -v b="$bound" 'BEGIN { print (a <= b) ? "met" : "not met" }')"
    done
    stop "$DPID"
    start_deformd heavy_off --no-batching
    off=$("$LG" run --port "$HP" --proto bin --conns "$CH" --secs "$SECS" --chars "$2" --weights "$3" --pid "$DPID")
    echo "batching off: $off"
    if [ -n "$on_s" ]; then
        off_s=$("$LG" run --port "$SP" --proto sock --conns "$CH" --secs "$SECS" --chars "$2" --weights "$3" --pid "$DPID")
        echo "batching off: $off_s"
    fi
    stop "$DPID"
    echo "RATIO batching on/off (HTTP binary, $1): $(ratio "$(rps "$on")" "$(rps "$off")")"
    [ -n "$on_s" ] && echo "RATIO batching on/off (socket, $1): $(ratio "$(rps "$on_s")" "$(rps "$off_s")")"
}
echo "## evaluation alone (one thread, no transport): what batching can give"
"$LG" evalbench "$REPO/bigface/1/model.safetensors"
heavy "face (2117 vertices, 256 morph targets)" face_a,face_b 256 1000
heavy "bigface (2117 vertices, 1024 morph targets)" big_a,big_b 1024 2000

echo "## small model: tiny (120 vertices), $CS connections, ${SECS}s each"
start_deformd small
j=$("$LG" run --port "$HP" --proto json --conns "$CS" --secs "$SECS" --chars tiny_a,tiny_b --weights 4 --pid "$DPID")
b=$("$LG" run --port "$HP" --proto bin --conns "$CS" --secs "$SECS" --chars tiny_a,tiny_b --weights 4 --pid "$DPID")
s=""
[ "${SP:--1}" -gt 0 ] && s=$("$LG" run --port "$SP" --proto sock --conns "$CS" --secs "$SECS" --chars tiny_a,tiny_b --weights 4 --pid "$DPID")
# reply sizes of the real answers, for the fixed servers
stop "$DPID"
"$B/bench/fixed_mhd" 0 1900 >"$B/bench/fixed_mhd.port" & FM=$!; pids+=("$FM")
"$B/bench/fixed_uv" 0 1600 >"$B/bench/fixed_uv.port" & FU=$!; pids+=("$FU")
sleep 0.3
fm=$("$LG" run --port "$(sed 's/port=//' "$B/bench/fixed_mhd.port")" --proto fixed-http --conns "$CS" --secs "$SECS" --chars tiny_a --weights 4 --pid "$FM")
fu=$("$LG" run --port "$(sed 's/port=//' "$B/bench/fixed_uv.port")" --proto fixed-sock --conns "$CS" --secs "$SECS" --chars tiny_a --weights 4 --pid "$FU")
stop "$FM"; stop "$FU"
echo "deformd     : $j"
echo "deformd     : $b"
[ -n "$s" ] && echo "deformd     : $s"
echo "fixed MHD   : $fm"
echo "fixed libuv : $fu"
echo "RATIO HTTP JSON / fixed MHD:   $(ratio "$(rps "$j")" "$(rps "$fm")")"
echo "RATIO HTTP binary / fixed MHD: $(ratio "$(rps "$b")" "$(rps "$fm")")"
[ -n "$s" ] && echo "RATIO socket / fixed libuv:    $(ratio "$(rps "$s")" "$(rps "$fu")")"
} | tee "$OUT"

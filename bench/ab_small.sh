#!/usr/bin/env bash
# ab_small.sh — paired A/B of two deformd builds on the small model (`tiny`,
# 16 connections): HTTP JSON, HTTP binary and the socket, each build with its
# own defaults, alternating every round, then the fixed-reply servers (MHD
# with 1 and 2 threads, libuv) in the same round. Prints one line per cell
# and, at the end, medians and per-round ratios. Session 5 used it to compare
# the session-start daemon with the new one (docs/performance.md).
#
#   bench/ab_small.sh OLD_DEFORMD NEW_DEFORMD        (REPS=5 SECS=3)
#   e.g. git worktree add /tmp/old <commit> && make -C /tmp/old bin/deformd
#        bench/ab_small.sh /tmp/old/bin/deformd bin/deformd
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
OLD=$1 NEW=$2
SECS=${SECS:-3} REPS=${REPS:-5}
LG=$B/bench/bench_server
REPO=$B/bench/server_repo
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -f "$REPO/tiny/1/model.safetensors" ] || "$LG" mkrepo "$REPO" >/dev/null || exit 1
start() { # $1 binary
    rm -f "$T/ready"
    "$1" --repository "$REPO" --http-port 0 --socket-port 0 --ready-file "$T/ready" 2>"$T/log" &
    DPID=$!
    for _ in $(seq 200); do [ -s "$T/ready" ] && break; sleep 0.05; done
    HP=$(sed -n 's/.*http=\([-0-9]*\).*/\1/p' "$T/ready")
    SP=$(sed -n 's/.*socket=\([-0-9]*\).*/\1/p' "$T/ready")
}
cell() { # label, then bench_server run arguments
    local label=$1; shift
    echo "$label $("$LG" run --conns 16 --secs "$SECS" --weights 4 "$@" |
        awk '{for (i = 1; i <= NF; i++) if ($i ~ /^(rps|cpu_us_per_req)=/) printf "%s ", $i}')"
}
{
for r in $(seq "$REPS"); do
    for v in old new; do
        bin=$OLD; [ $v = new ] && bin=$NEW
        start "$bin"
        for p in json bin; do cell "r$r $v-$p" --port "$HP" --proto $p --chars tiny_a,tiny_b --pid "$DPID"; done
        cell "r$r $v-sock" --port "$SP" --proto sock --chars tiny_a,tiny_b --pid "$DPID"
        kill "$DPID"; wait "$DPID" 2>/dev/null
    done
    for spec in "json 4964 1" "json 4964 2" "bin 1744 1"; do
        set -- $spec
        "$B/bench/fixed_mhd" 0 "$2" "$3" >"$T/port" & F=$!; sleep 0.3
        cell "r$r fixed-mhd-$1-t$3" --port "$(sed 's/port=//' "$T/port")" --proto fixed-http --chars tiny_a --pid "$F"
        kill "$F"; wait "$F" 2>/dev/null
    done
    "$B/bench/fixed_uv" 0 1480 >"$T/port" & F=$!; sleep 0.3
    cell "r$r fixed-uv" --port "$(sed 's/port=//' "$T/port")" --proto fixed-sock --chars tiny_a --pid "$F"
    kill "$F"; wait "$F" 2>/dev/null
done
} | tee "$T/cells"
python3 - "$T/cells" <<'PY'
import statistics as st, sys
d = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4: continue
    d.setdefault(f[1], {})[int(f[0][1:])] = (float(f[2].split('=')[1]), float(f[3].split('=')[1]))
for k, v in d.items():
    print(f"{k:18} median {st.median(x[0] for x in v.values()):9.0f} req/s  {st.median(x[1] for x in v.values()):5.1f} us CPU/request")
for a, b in [('old-json', 'fixed-mhd-json-t1'), ('new-json', 'fixed-mhd-json-t1'), ('new-json', 'fixed-mhd-json-t2'),
             ('old-bin', 'fixed-mhd-bin-t1'), ('new-bin', 'fixed-mhd-bin-t1'), ('old-sock', 'fixed-uv'), ('new-sock', 'fixed-uv')]:
    rs = [d[a][i][0] / d[b][i][0] for i in sorted(d[a]) if i in d[b]]
    print(f"RATIO {a} / {b}: median {st.median(rs):.2f} (rounds: {' '.join(f'{x:.2f}' for x in rs)})")
PY

#!/usr/bin/env bash
# bench/bench_decompose.sh — `make bench-decompose`: fitting time and ERMS per
# iteration of `deform decompose`, the time of each iteration split into the
# weights step and the transforms step, on 1 and 2 threads, for
#   walk   Testwuson Wuson_Walk baked at 24 fps (87 frames x 3205 vertices,
#          the issue's target sequence), and
#   sydney MD2 sydney, every keyframe (198 frames x 2037 vertices: the
#          largest dev sequence by vertex-frames).
# 16 proxy bones, 6 influences, 30 iterations (no early stop). Shared machine:
# read the numbers side by side, not as absolutes. Never run by `make test`.
set -eu
cd "$(dirname "$0")/.."
TIMEFORMAT="%R %U %S"   # wall, user, sys of each run (CPU time shows the parallel
                        # overhead even when other processes take the cores)
BIN=${BIN:-bin}
PY=/usr/bin/python3
OUT=${BENCH_OUT:-build/bench-decompose}
BONES=${BONES:-16}
mkdir -p "$OUT"
rm -rf "$OUT/repo"
"$BIN/deform" import /usr/share/assimp/models/X/Testwuson.X --repository "$OUT/repo" --name wuson >/dev/null
declare -A SRC=([walk]="$OUT/repo/wuson --clip Wuson_Walk --fps 24"
                [sydney]="/usr/share/assimp/models/MD2/sydney.md2")
for seq in walk sydney; do
    for t in 1 2; do
        # shellcheck disable=SC2086
        { time nice "$BIN/deform" decompose ${SRC[$seq]} --bones "$BONES" --iters 30 --tol 0 --threads "$t" \
            --repository "$OUT/repo" --name "fit-$seq-$t" --metrics-json "$OUT/$seq-$t.json" --quiet \
            >"$OUT/$seq-$t.log"; } 2>"$OUT/$seq-$t.time"
    done
done
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
for seq in ("walk", "sydney"):
    r = {t: json.load(open("%s/%s-%d.json" % (out, seq, t))) for t in (1, 2)}
    a = r[1]
    print("\n== %s: %d frames x %d vertices (%d welded), %d bones, %d influences" %
          (seq, a["frames"], a["vertices"], a["welded"], a["bones"], a["influences"]))
    print("%-5s %12s %12s | %10s %10s | %10s %10s" % ("iter", "ERMS% 1thr", "ERMS% 2thr",
          "w-step 1t", "t-step 1t", "w-step 2t", "t-step 2t"))
    n = min(len(r[1]["erms_history_pct"]), len(r[2]["erms_history_pct"]))
    for i in range(n):
        lab = "init" if i == 0 else str(i)
        w1, t1 = r[1]["weight_seconds_history"][i], r[1]["transform_seconds_history"][i]
        w2, t2 = r[2]["weight_seconds_history"][i], r[2]["transform_seconds_history"][i]
        print("%-5s %12.5f %12.5f | %10.4f %10.4f | %10.4f %10.4f" % (lab, r[1]["erms_history_pct"][i],
              r[2]["erms_history_pct"][i], w1, t1, w2, t2))
    for t in (1, 2):
        m = r[t]
        it = max(1, m["iterations"])
        print("%d thread(s): total %.3f s (init %.3f, weights %.3f = %.2f ms/iter, transforms %.3f = %.2f ms/iter); "
              "final ERMS %.4f%% MaxAvgDist %.4f%% DisPer %.3f NormDistort %.4f" %
              (t, m["seconds"], m["init_seconds"], m["weight_seconds"], 1e3 * m["weight_seconds"] / it,
               m["transform_seconds"], 1e3 * m["transform_seconds"] / it, m["erms_pct"],
               m["max_avg_dist_pct"], m["disper"], m["norm_distort"]))
    for t in (1, 2):
        wall, usr, sy = (float(x) for x in open("%s/%s-%d.time" % (out, seq, t)).read().split())
        print("%d thread(s): process wall %.2f s, CPU %.2f s (user %.2f + sys %.2f), CPU/wall %.2f" %
              (t, wall, usr + sy, usr, sy, (usr + sy) / wall))
    print("speed-up 2 threads: %.2fx total, %.2fx weights step, %.2fx transforms step" %
          (r[1]["seconds"] / r[2]["seconds"], r[1]["weight_seconds"] / r[2]["weight_seconds"],
           r[1]["transform_seconds"] / r[2]["transform_seconds"]))
PYEOF

#!/usr/bin/env bash
# bench/bench_decompose_table.sh — the quality tables of docs/decompose.md:
# the four metrics and the fitting time against the bone count, for the raw
# sequence (automatic welding, the default), the raw sequence with welding
# off (--no-weld), and a hand-welded copy (bench_decompose_weld.py merges
# vertices with identical trajectories). Dev sequences:
#   walk, run  Testwuson (.X) Wuson_Walk / Wuson_Run baked at 24 fps through
#              the rigged kind (deform import + clip evaluation); rig 37 bones
#   fbx        FBX/animation_with_skeleton.fbx baked at 24 fps; rig 14 bones
#   sydney     MD2/sydney.md2, all 198 keyframes (per-vertex animation)
#   morphcube  glTF2 AnimatedMorphCube (morph-target animation, 127 keys)
# Usage: bench/bench_decompose_table.sh [OUT_DIR]   (prints markdown)
set -eu
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
PY=/usr/bin/python3
OUT=${1:-build/bench-decompose-table}
M=/usr/share/assimp/models
mkdir -p "$OUT"
rm -rf "$OUT/repo"
D="$BIN/deform"
"$D" import "$M/X/Testwuson.X" --repository "$OUT/repo" --name wuson >/dev/null
"$D" import "$M/FBX/animation_with_skeleton.fbx" --repository "$OUT/repo" --name fbx >/dev/null
declare -A SRC=([walk]="$OUT/repo/wuson --clip Wuson_Walk --fps 24"
                [run]="$OUT/repo/wuson --clip Wuson_Run --fps 24"
                [fbx]="$OUT/repo/fbx --fps 24"
                [sydney]="$M/MD2/sydney.md2"
                [morphcube]="$M/glTF2/glTF-Sample-Models/AnimatedMorphCube-glTF/AnimatedMorphCube.gltf")
declare -A BONES=([walk]="8 16 24 32 37" [run]="8 16 24 32 37" [fbx]="8 14 16 24 32"
                  [sydney]="8 16 24 32" [morphcube]="2 4 8")
for s in walk run fbx sydney morphcube; do
    # shellcheck disable=SC2086
    "$D" decompose ${SRC[$s]} --bones 1 --iters 0 --quiet --repository "$OUT/repo" --name tmp \
        --save-sequence "$OUT/$s.safetensors" >/dev/null
    "$PY" bench/bench_decompose_weld.py "$OUT/$s.safetensors" "$OUT/$s-welded.safetensors" >"$OUT/$s-weld.txt"
    for b in ${BONES[$s]}; do
        for v in raw noweld welded; do
            in=$OUT/$s.safetensors; extra=
            [ $v = noweld ] && extra=--no-weld
            [ $v = welded ] && in=$OUT/$s-welded.safetensors
            # shellcheck disable=SC2086
            nice "$D" decompose "$in" --bones "$b" $extra --quiet --repository "$OUT/repo" \
                --name "$s-$b-$v" --metrics-json "$OUT/$s-$b-$v.json" >/dev/null
        done
    done
done
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
B = {"walk": [8, 16, 24, 32, 37], "run": [8, 16, 24, 32, 37], "fbx": [8, 14, 16, 24, 32],
     "sydney": [8, 16, 24, 32], "morphcube": [2, 4, 8]}
for s, bs in B.items():
    w = open("%s/%s-weld.txt" % (out, s)).read().strip()
    m0 = json.load(open("%s/%s-%d-raw.json" % (out, s, bs[0])))
    print("\n### %s: %d frames x %d vertices (automatic weld: %d; hand-welded copy: %s)\n" %
          (s, m0["frames"], m0["vertices"], m0["welded"], w))
    print("| B | input | DisPer | ERMS % diag | MaxAvgDist % diag | NormDistort | iters | time s |")
    print("|---|---|---|---|---|---|---|---|")
    for b in bs:
        for v, lab in (("raw", "raw (auto weld)"), ("noweld", "raw, --no-weld"), ("welded", "hand-welded copy")):
            m = json.load(open("%s/%s-%d-%s.json" % (out, s, b, v)))
            print("| %d | %s | %.3g | %.3g | %.3g | %.3g | %d | %.2f |" % (b, lab, m["disper"], m["erms_pct"],
                  m["max_avg_dist_pct"], m["norm_distort"], m["iterations"], m["seconds"]))
PYEOF

#!/usr/bin/env bash
# tests/e2e/rigapprox_blender.sh — the Blender exporter (tools/blender/rig_dataset.py) against
# our own LBS: a Blender bake is the independent reference for the dataset conventions.
#
#  1. Testwuson (.X) -> glb with assimp; Blender builds the demonstration rig and bakes 8 random
#     poses with shape keys and Corrective Smooth muted (--lbs-only). `deform train --variant lbs`
#     on that dataset must reproduce Blender's positions within 1e-5 x height: joint matrices,
#     inverse binds, weights and positions are in the conventions the trainer assumes.
#  2. The full rig (drivers on, Corrective Smooth on) is genuinely nonlinear: LBS alone is off by
#     more than 0.3 % of the height on average, and the dataset validates.
# Skipped (no lines) when blender is not installed.
. "$(dirname "$0")/product_common.sh"
command -v blender >/dev/null || { echo "blender not installed: skipped"; exit 0; }

assimp export /usr/share/assimp/models/X/Testwuson.X "$T/wuson.glb" -f glb2 >"$T/assimp.log" 2>&1 \
    && ok rab-glb || { cat "$T/assimp.log"; fail rab-glb; finish; exit 1; }
blender -b -P tools/blender/rig_dataset.py -- --in "$T/wuson.glb" --out "$T/lbs.st" --samples 8 --lbs-only \
    >"$T/bl1.log" 2>&1 && ok rab-bake-lbs || { tail -20 "$T/bl1.log"; fail rab-bake-lbs; finish; exit 1; }
blender -b -P tools/blender/rig_dataset.py -- --in "$T/wuson.glb" --out "$T/full.st" --samples 8 \
    >"$T/bl2.log" 2>&1 && ok rab-bake-full || { tail -20 "$T/bl2.log"; fail rab-bake-full; }
"$BIN/deform" train "$T/lbs.st" --out "$T/repo/lbs" --variant lbs --quiet >"$T/train.log" 2>&1 \
    || { cat "$T/train.log"; fail rab-train-lbs; finish; exit 1; }
"$BIN/deform" train --evaluate "$T/repo/lbs" "$T/lbs.st" >"$T/e1.txt" 2>&1 || cat "$T/e1.txt"
"$BIN/deform" train --evaluate "$T/repo/lbs" "$T/full.st" >"$T/e2.txt" 2>&1 || cat "$T/e2.txt"
# "mean A (P %)  max B (Q %)"
max_pct=$(awk '/^mean/{gsub(/[()%]/,""); print $6}' "$T/e1.txt")
mean_pct=$(awk '/^mean/{gsub(/[()%]/,""); print $3}' "$T/e2.txt")
awk -v m="$max_pct" 'BEGIN{exit !(m != "" && m <= 0.001)}' && ok rab-blender-lbs-equals-ours \
    || fail rab-blender-lbs-equals-ours "max error $max_pct % of height (want <= 0.001 %)"
awk -v m="$mean_pct" 'BEGIN{exit !(m != "" && m > 0.3)}' && ok rab-full-rig-is-nonlinear \
    || fail rab-full-rig-is-nonlinear "LBS mean error on the full rig $mean_pct %"
finish

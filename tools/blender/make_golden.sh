#!/usr/bin/env bash
# make_golden.sh — regenerate tests/data/golden/ from Blender (the independent reference).
#
#   tools/blender/make_golden.sh [OUT_DIR]      (default tests/data/golden)
#   GOLDEN_FRAMES=1000 tools/blender/make_golden.sh /tmp/all   (every key frame, for docs/import.md)
#
# For each asset: (X files are first converted to .glb by `assimp export`, since Blender has no
# .X importer; FBX goes straight into Blender's own FBX importer) bake every clip at its key
# frames with tools/blender/bake.py, import the asset with bin/deform, write our rest mesh, and
# let tools/blender/golden.py match vertices and keep a few frames per clip.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-tests/data/golden}
M=/usr/share/assimp/models
PY=/usr/bin/python3
DEFORM=${BIN:-bin}/deform
W=$(mktemp -d /tmp/df-golden.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT"
golden() { # REL_ASSET BLENDER_INPUT NAME FRAMES [dqs]
    local rel=$1 in=$2 name=$3 frames=$4 dqs=${5:-}
    blender -b --factory-startup --python tools/blender/bake.py -- "$in" "$W/bake_$name" --frames keys \
        2>&1 | grep -E '^bake' || { echo "bake of $in failed" >&2; exit 1; }
    "$DEFORM" import "$M/$rel" --repository "$W/repo" --name "$name" >/dev/null
    "$DEFORM" eval "$W/repo/$name" --bind --out "$W/rest_$name.npy" >/dev/null
    mkdir -p "$W/f0_$name"
    local first clips
    clips=$("$DEFORM" info "$W/repo/$name" | sed -n '/^clips:/,$p' | tail -n +2 | awk '{print $1}' | paste -sd, -)
    # frame 0 of Blender's first clip, evaluated by us, for the fallback matching
    first=$($PY -c "import json,sys; i=json.load(open('$W/bake_$name/index.json')); print(i['clips'][0]['file'])")
    fclip=$($PY -c "import json; m=json.load(open('$W/bake_$name/$first.json')); c=m['clip']; n='$clips'.split(','); print(next((x for x in n if x==c or c.endswith('|'+x)), n[0]))")
    ftime=$($PY -c "import json; print(json.load(open('$W/bake_$name/$first.json'))['times'][0])")
    "$DEFORM" eval "$W/repo/$name" --clip "$fclip" --times "$ftime" --out "$W/f0_$name/$first.npy" >/dev/null
    $PY tools/blender/golden.py "$W/bake_$name" "$W/rest_$name.npy" "$W/f0_$name" "$OUT" \
        --asset "$rel" --frames "$frames" --prefix "$name" --clip-names "$clips" --save-perm "$W/perm_$name.npy"
    if [ -n "$dqs" ]; then   # Blender's dual-quaternion skinning ("Preserve Volume")
        blender -b --factory-startup --python tools/blender/bake.py -- "$in" "$W/bakedq_$name" --frames keys --dqs \
            2>&1 | grep -E '^bake' || { echo "dqs bake of $in failed" >&2; exit 1; }
        $PY tools/blender/golden.py "$W/bakedq_$name" "$W/rest_$name.npy" "$W/f0_$name" "$OUT" \
            --asset "$rel" --frames "$frames" --prefix "$name" --clip-names "$clips" \
            --load-perm "$W/perm_$name.npy" --skinning dqs
    fi
}
assimp export "$M/X/Testwuson.X" "$W/wuson.glb" -fglb2 >/dev/null
golden X/Testwuson.X "$W/wuson.glb" Testwuson "${GOLDEN_FRAMES:-6}" dqs
golden FBX/animation_with_skeleton.fbx "$M/FBX/animation_with_skeleton.fbx" animation_with_skeleton "${GOLDEN_FRAMES:-6}" dqs
assimp export "$M/X/BCN_Epileptic.X" "$W/bcn.glb" -fglb2 >/dev/null
golden X/BCN_Epileptic.X "$W/bcn.glb" BCN_Epileptic "${GOLDEN_FRAMES:-6}"
golden FBX/huesitos.fbx "$M/FBX/huesitos.fbx" huesitos "${GOLDEN_FRAMES:-6}"
# Scaled bones on top of the Walk clip, Blender's DQS ("Preserve Volume"): a uniform scale on a
# joint with children (Neck) and non-uniform scales on two leaves (Mouth, HindLeg_L_04), where
# Blender's rotation/scale split and ours (docs/rigged.md) agree exactly. Written beside OUT.
SC=${GOLDEN_SCALED_OUT:-$(dirname "$OUT")/golden_scaled}
mkdir -p "$SC"
"$DEFORM" eval "$W/repo/Testwuson" --clip Wuson_Walk --times 0 --skinning dqs --out "$W/wuson_walk0.npy" >/dev/null
blender -b --factory-startup --python tools/blender/bake.py -- "$W/wuson.glb" "$W/sc_plain" --frames keys \
    --max-frames 6 --clips Wuson_Walk --dqs 2>&1 | grep -E '^bake' || { echo "bake failed" >&2; exit 1; }
blender -b --factory-startup --python tools/blender/bake.py -- "$W/wuson.glb" "$W/sc_scaled" --frames keys \
    --max-frames 6 --clips Wuson_Walk --dqs --skin-matrices --pose-scale Neck=1.5,1.5,1.5 \
    --pose-scale Mouth=1,1.8,0.6 --pose-scale HindLeg_L_04=1.6,0.7,1.3 2>&1 | grep -E '^bake' \
    || { echo "bake failed" >&2; exit 1; }
$PY tools/blender/golden_skin.py "$W/sc_plain" "$W/sc_scaled" "$W/wuson_walk0.npy" "$SC" \
    --asset X/Testwuson.X --clip Wuson_Walk --prefix Testwuson --skinning dqs
du -sh "$OUT"

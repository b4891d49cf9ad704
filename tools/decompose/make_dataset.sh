#!/usr/bin/env bash
# tools/decompose/make_dataset.sh — the sequences the decomposition's initialisation network is
# trained and tested on (docs/decompose.md, "Network initialisation"): every skinned, animated
# asset of Debian's assimp-testmodels that `deform import` reads, each clip sampled at 24 fps with
# the true bone of each vertex (`deform decompose ... --save-sequence F --sequence-only`), and,
# when tools/decompose's Blender script can reach them, the 39 actions of the Red Eclipse male
# player (RE_Player_male.blend from redeclipse-data, unpacked under build/ext/redeclipse by
# bench/bench_rigapprox_eval.sh; nothing is downloaded here), and SYNTH (200) random articulated
# characters of tools/decompose/synth_rigs.py (seed 1).
#
#   [SYNTH=200] tools/decompose/make_dataset.sh [OUT_DIR (build/decompose-init/seq)]
#
# Writes OUT_DIR/train/*.safetensors and OUT_DIR/test/*.safetensors. The split is by character:
# Testwuson and BCN_Epileptic (the characters docs/decompose.md measures) are test characters;
# everything else trains. Progress on stderr; prints the list of sequences.
set -eu
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
B=${B:-build}
OUT=${1:-$B/decompose-init/seq}
M=/usr/share/assimp/models
RE=$B/ext/redeclipse/root/usr/share/games/redeclipse/data/actors/player/male/RE_Player_male.blend
mkdir -p "$OUT/train" "$OUT/test"
[ -d "$M" ] || { echo "make_dataset: $M missing (apt-get install assimp-testmodels)" >&2; exit 1; }

seq() { # SPLIT ASSET CLIP NAME
    local split=$1 asset=$2 clip=$3 name=$4
    if [ ! -f "$M/$asset" ]; then echo "make_dataset: $M/$asset missing, skipped" >&2; return; fi
    echo "make_dataset: $asset ${clip:-(first clip)} -> $split/$name" >&2
    "$BIN/deform" decompose "$M/$asset" ${clip:+--clip "$clip"} --fps 24 \
        --save-sequence "$OUT/$split/$name.safetensors" --sequence-only >/dev/null
}
# test characters
seq test X/Testwuson.X Wuson_Walk wuson_walk
seq test X/Testwuson.X Wuson_Run wuson_run
seq test X/BCN_Epileptic.X "" bcn_epileptic
# training characters
seq train FBX/animation_with_skeleton.fbx "" fbx_skeleton
seq train FBX/huesitos.fbx "" huesitos
seq train X/anim_test.x "" cylinder
seq train Collada/anims_with_full_rotations_between_keys.DAE "" collada_rotations
seq train glTF2/simple_skin/simple_skin.gltf "" simple_skin
if [ -f "$RE" ] && command -v blender >/dev/null; then
    echo "make_dataset: Red Eclipse male player, every action (Blender)" >&2
    blender -b --factory-startup -noaudio "$RE" -P tools/decompose/blend_actions.py -- \
        --out-dir "$OUT/train" --name re_male >"$OUT/re_male.log" 2>&1 \
        || { cat "$OUT/re_male.log" >&2; exit 1; }
else
    echo "make_dataset: no $RE (or no blender): Red Eclipse skipped" >&2
fi
if [ "${SYNTH:-200}" -gt 0 ]; then
    echo "make_dataset: ${SYNTH:-200} synthetic characters" >&2
    /usr/bin/python3 tools/decompose/synth_rigs.py --out-dir "$OUT/train" --count "${SYNTH:-200}" --seed 1 >&2
fi
ls "$OUT"/train/*.safetensors "$OUT"/test/*.safetensors

#!/usr/bin/env bash
# core_golden.sh — our import + evaluation against Blender, the independent reference.
#
# tests/data/golden/<model>__<clip>.npy holds a few frames per clip baked by Blender
# (tools/blender/make_golden.sh: Blender's glTF importer on assimp's .glb export of the .X
# file, Blender's own FBX importer on the .fbx), reordered to our vertex order. For each one
# this imports the asset from /usr/share/assimp/models into a temporary repository with
# bin/deform import, evaluates the clip at the golden times with bin/deform eval, and compares
# with bin/deform compare: max vertex error <= tolerance_rel (1e-4) x rest bbox diagonal.
# Prints "ok golden <model> <clip>" / "FAIL ..." per clip.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
PY=/usr/bin/python3
M=/usr/share/assimp/models
G=${DF_GOLDEN_DIR:-tests/data/golden}   # DF_GOLDEN_DIR: e.g. a full bake from make_golden.sh
W=$(mktemp -d "${TMPDIR:-/tmp}/df-core-golden.XXXXXX")
trap 'rm -rf "$W"' EXIT
fails=0
n=0
run_dir() { # DIR LABEL
local G=$1 label=$2 j base file model asset clip times tol name out rc
for j in "$G"/*__*.json; do
    [ -e "$j" ] || continue
    base=${j%.json}
    file=$(basename "$base")
    model=${file%%__*}
    read -r asset clip times tol skin < <($PY -c "
import json,sys; m=json.load(open(sys.argv[1]))
print(m['asset'], m['clip'].replace(' ','\\\\ '), ','.join('%.9g' % t for t in m['times']), m['tolerance_rel'], m.get('skinning', 'lbs'))" "$j")
    name="$label $model $clip"
    [ "$skin" = lbs ] || name="$name ($skin)"
    if [ ! -f "$M/$asset" ]; then echo "FAIL $name (asset $M/$asset missing)"; fails=$((fails+1)); continue; fi
    if [ ! -d "$W/repo/$model" ]; then
        if ! "$BIN/deform" import "$M/$asset" --repository "$W/repo" --name "$model" >"$W/import_$model.log" 2>&1; then
            cat "$W/import_$model.log"
            echo "FAIL $name (import)"; fails=$((fails+1)); continue
        fi
    fi
    if ! "$BIN/deform" eval "$W/repo/$model" --clip "$clip" --times "$times" --skinning "$skin" --out "$W/$file.npy" >"$W/eval.log" 2>&1; then
        cat "$W/eval.log"; echo "FAIL $name (eval)"; fails=$((fails+1)); continue
    fi
    out=$("$BIN/deform" compare "$W/$file.npy" "$base.npy" --rest "$W/repo/$model" --tol "$tol" 2>&1)
    rc=$?
    echo "$out" | sed 's/^/    /'
    n=$((n+1))
    if [ $rc -eq 0 ]; then echo "ok $name ($(echo "$out" | grep -o 'max_rel=[^ ]*'))"
    else echo "FAIL $name"; fails=$((fails+1)); fi
done
}
# Scaled bones (tests/data/golden_scaled, tools/blender/golden_skin.py): Blender's pose with some
# bones scaled on top of the clip, fed to us as joint_matrices (per-bone maps from Blender,
# tools/blender/scaled_joint_matrices.py), evaluated with the case's skinning.
run_scaled() { # DIR LABEL
local G=$1 label=$2 j base file model asset skin tol name out rc
for j in "$G"/*_scaled.json; do
    [ -e "$j" ] || continue
    base=${j%.json}
    file=$(basename "$base")
    model=${file%%__*}
    read -r asset skin tol < <($PY -c "
import json,sys; m=json.load(open(sys.argv[1])); print(m['asset'], m['skinning'], m['tolerance_rel'])" "$j")
    name="$label $model $file"
    if [ ! -d "$W/repo/$model" ] && ! "$BIN/deform" import "$M/$asset" --repository "$W/repo" --name "$model" >"$W/import_$model.log" 2>&1; then
        cat "$W/import_$model.log"; echo "FAIL $name (import)"; fails=$((fails+1)); continue
    fi
    if ! { "$BIN/deform" eval "$W/repo/$model" --bind --out "$W/bind_$model.npy" \
           && $PY tools/blender/scaled_joint_matrices.py "$j" "$W/repo/$model/1/model.safetensors" "$W/bind_$model.npy" "$W/jm_$file.npy" \
           && "$BIN/deform" eval "$W/repo/$model" --input "joint_matrices=$W/jm_$file.npy" --skinning "$skin" --out "$W/$file.npy"; } >"$W/eval.log" 2>&1; then
        cat "$W/eval.log"; echo "FAIL $name (eval)"; fails=$((fails+1)); continue
    fi
    out=$("$BIN/deform" compare "$W/$file.npy" "$base.npy" --rest "$W/repo/$model" --tol "$tol" 2>&1)
    rc=$?
    echo "$out" | sed 's/^/    /'
    if [ $rc -eq 0 ]; then echo "ok $name ($(echo "$out" | grep -o 'max_rel=[^ ]*'))"
    else echo "FAIL $name"; fails=$((fails+1)); fi
done
}
run_dir "$G" golden
[ $n -gt 0 ] || { echo "FAIL golden (no golden files in $G)"; exit 1; }
# deform eval --input refuses what it cannot use, naming it
if [ -d "$W/repo/Testwuson" ]; then
    $PY -c "import numpy as np; np.save('$W/bad_shape.npy', np.zeros((2, 5), np.float32)); a = np.zeros((2, 39, 12), np.float32); a[1, 3, 4] = np.nan; np.save('$W/bad_nan.npy', a)"
    for c in "nosuch=$W/bad_shape.npy|no input 'nosuch'; inputs: joint_rotations" \
             "joint_matrices=$W/bad_shape.npy|468 values per frame" \
             "joint_matrices=$W/bad_nan.npy|not finite" "joint_matrices|NAME=FILE.npy"; do
        arg=${c%%|*} want=${c#*|}
        if out=$("$BIN/deform" eval "$W/repo/Testwuson" --input "$arg" --out "$W/x.npy" 2>&1); then
            echo "FAIL eval-input-refused $arg (accepted)"; fails=$((fails+1))
        elif echo "$out" | grep -qF "$want"; then echo "ok eval-input-refused $want"
        else echo "$out"; echo "FAIL eval-input-refused $arg (message)"; fails=$((fails+1)); fi
    done
fi
GS=${DF_GOLDEN_SCALED_DIR:-tests/data/golden_scaled}
run_scaled "$GS" golden_scaled
ls "$GS"/*_scaled.json >/dev/null 2>&1 || { echo "FAIL golden_scaled (no cases in $GS)"; fails=$((fails+1)); }
# With Blender installed, bake again now (every key frame of every clip) and compare all of
# them too: checks that the committed reference is reproducible and covers the frames the
# small committed subset leaves out (~15 s).
if command -v blender >/dev/null 2>&1 && [ -z "${DF_GOLDEN_DIR:-}" ]; then
    if GOLDEN_FRAMES=100000 tools/blender/make_golden.sh "$W/full" >"$W/bake.log" 2>&1; then
        run_dir "$W/full" golden_allkeys
        run_scaled "$W/golden_scaled" golden_scaled_rebaked
    else
        cat "$W/bake.log"; echo "FAIL golden_allkeys (bake)"; fails=$((fails+1))
    fi
else
    echo "# golden_allkeys skipped: no blender on PATH"
fi
[ $fails -eq 0 ]

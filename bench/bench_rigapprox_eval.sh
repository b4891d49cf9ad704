#!/usr/bin/env bash
# bench/bench_rigapprox_eval.sh — `make eval-rigapprox`: the rig-approximation workflow on two rigs
# the method was not tuned on, as a user runs it (docs/rigapprox.md, "Results on unseen rigs"):
#
#   demo : the demonstration rig (tools/blender/demo_rig.py on Testwuson, a .blend);
#   re   : the Red Eclipse male player (RE_Player_male.blend from Debian's redeclipse-data,
#          CC-BY-SA; a Rigify rig: 77 deforming bones, all roots, among 322, 39 actions, the
#          Armature modifier with Preserve Volume), with the demonstration rig's deformers added
#          by tools/blender/demo_rig.py (8 custom-property shape keys, products, 6 correctives,
#          Corrective Smooth after its own modifiers). Fetched here when missing: the package
#          (860 MB) is downloaded with apt-get download into $B/ext/redeclipse and only the
#          player directory is unpacked; nothing is installed or committed.
#
# Per rig: rig_export.py writes N random training poses (--jobs JOBS shards), a held-out set of
# TEST random poses (another seed) and the frames of the character's actions; each variant is
# trained with the recipe below and evaluated on both sets. Printed: the table of
# docs/rigapprox.md. Long (hours at N = 10000): run it under nice on a shared machine.
#
#   RIGS="demo re" N=10000 TEST=300 JOBS=2 EPOCHS=60 PCA=0.10 bench/bench_rigapprox_eval.sh
#
# The Red Eclipse rig's Rigify switches (IK/FK, isolate, follow: custom properties read by
# drivers) keep their values from the file (--ranges, re_ranges.json below): the actions never
# change them, and sampling them would train the model on IK/FK blends no animation uses. Its
# deform skeleton is flat (every DEF bone a root): --hierarchy chains gives the joint features a
# parent frame (the joint each one hangs from).
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
BIN=${BIN:-bin}
OUT=${OUT:-$B/eval-rigapprox}
RIGS=${RIGS:-demo re}
N=${N:-10000}
TEST=${TEST:-300}
JOBS=${JOBS:-2}
EPOCHS=${EPOCHS:-60}
PCA=${PCA:-0.10}
VARIANTS=${VARIANTS:-ours local pcalr lbs}
TRAIN_ARGS=${TRAIN_ARGS:-}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
mkdir -p "$OUT"
command -v blender >/dev/null || { echo "eval-rigapprox: needs blender (apt-get install blender)"; exit 1; }
EXPORT=(blender -b --factory-startup -noaudio -P tools/blender/rig_export.py --)

RE_DIR=usr/share/games/redeclipse/data/actors/player/male
fetch_re() {
    if [ -f "/$RE_DIR/RE_Player_male.blend" ]; then RE_BLEND=/$RE_DIR/RE_Player_male.blend; return; fi
    local d=$B/ext/redeclipse
    RE_BLEND=$d/root/$RE_DIR/RE_Player_male.blend
    [ -f "$RE_BLEND" ] && return
    mkdir -p "$d/root"
    ls "$d"/redeclipse-data_*_all.deb >/dev/null 2>&1 || (cd "$d" && apt-get download redeclipse-data)
    dpkg-deb --fsys-tarfile "$d"/redeclipse-data_*_all.deb |
        tar -x -C "$d/root" ./usr/share/games/redeclipse/data/actors/player/ ./usr/share/doc/redeclipse-data/copyright
    [ -f "$RE_BLEND" ] || { echo "eval-rigapprox: no RE_Player_male.blend in redeclipse-data"; exit 1; }
}

export_rig() { # NAME BLEND [extra exporter options...]
    local name=$1 blend=$2; shift 2
    local o=$OUT/$name
    mkdir -p "$o"
    if ! ls "$o"/train-*of"$JOBS".st >/dev/null 2>&1 && ! { [ "$JOBS" = 1 ] && [ -f "$o/train.st" ]; }; then
        echo "== $name: exporting $N training poses ($JOBS jobs)"
        "${EXPORT[@]}" --in "$blend" --out "$o/train.st" --samples "$N" --seed 1 --jobs "$JOBS" "$@" 2>&1 |
            grep --line-buffered -v "^Blender\|^Read\|^$\|quit\|^ERROR (bke"
    fi
    [ -f "$o/test.st" ] || "${EXPORT[@]}" --in "$blend" --out "$o/test.st" --samples "$TEST" --seed 77 \
        --influence-poses 0 --quiet "$@" 2>&1 | grep "rig_export.py: error" || true
    [ -f "$o/actions.st" ] || "${EXPORT[@]}" --in "$blend" --out "$o/actions.st" --actions --quiet "$@" 2>&1 |
        grep "rig_export.py: error" || true
}

for rig in $RIGS; do
    case $rig in
    demo)
        if [ ! -f "$OUT/demo.blend" ]; then
            assimp export /usr/share/assimp/models/X/Testwuson.X "$OUT/wuson.glb" -f glb2 >/dev/null
            blender -b --factory-startup -noaudio -P tools/blender/demo_rig.py -- --in "$OUT/wuson.glb" \
                --out "$OUT/demo.blend" 2>&1 | grep "demo_rig"
        fi
        export_rig demo "$OUT/demo.blend"
        ;;
    re)
        fetch_re
        cat >"$OUT/re_ranges.json" <<'EOF'
{"foot_ik.R[\"ikfk_switch\"]": null, "foot_ik.L[\"ikfk_switch\"]": null, "hand_ik.L[\"ikfk_switch\"]": null,
 "hand_ik.R[\"ikfk_switch\"]": null, "ribs[\"pivot_slide\"]": null, "ribs[\"bend_spine\"]": null,
 "ribs[\"isolate\"]": null, "upper_arm.L[\"isolate\"]": null, "upper_arm.R[\"isolate\"]": null,
 "head[\"inf_extent\"]": null, "head[\"neck_follow\"]": null}
EOF
        [ -f "$OUT/re.blend" ] || blender -b --factory-startup -noaudio -P tools/blender/demo_rig.py -- \
            --in "$RE_BLEND" --out "$OUT/re.blend" 2>&1 | grep "demo_rig"
        export_rig re "$OUT/re.blend" --ranges "$OUT/re_ranges.json" --hierarchy chains
        ;;
    *) echo "eval-rigapprox: unknown rig '$rig' (demo, re)"; exit 2 ;;
    esac
    o=$OUT/$rig
    train=("$o"/train*.st)
    for v in $VARIANTS; do
        [ -f "$o/repo/$v/1/model.safetensors" ] && continue
        echo "== $rig: training $v"
        # shellcheck disable=SC2086
        "$BIN/deform" train "${train[@]}" --out "$o/repo/$v" --variant "$v" --pca "$PCA" --epochs "$EPOCHS" \
            --batch 32 --patience 15 $TRAIN_ARGS 2>&1 | grep -E "^train:|trained in|refit" || true
    done
    echo
    nf=$("$BIN/deform" train --evaluate "$o/repo/lbs" "$o/actions.st" 2>/dev/null | awk '/^model/{print $(NF-5)}')
    echo "$rig: mean / max vertex error, % of the height ($N training poses; $TEST random test poses;" \
        "${nf:-?} frames of the actions)"
    printf "| %-6s | %-12s | %-12s | %-12s | %-12s |\n" variant "random mean" "random max" "actions mean" "actions max"
    for v in $VARIANTS; do
        r=$("$BIN/deform" train --evaluate "$o/repo/$v" "$o/test.st" | awk '/^mean/{gsub(/[()%]/,""); print $3, $6}')
        a=$("$BIN/deform" train --evaluate "$o/repo/$v" "$o/actions.st" | awk '/^mean/{gsub(/[()%]/,""); print $3, $6}')
        printf "| %-6s | %-12s | %-12s | %-12s | %-12s |\n" "$v" ${r:-? ?} ${a:-? ?}
    done
done

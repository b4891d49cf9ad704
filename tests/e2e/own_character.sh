#!/usr/bin/env bash
# own_character.sh — docs/own-character.md, step by step, as a user would run it.
#
# "Your character" is a .blend made here from assimp's Testwuson (exported to glb by assimp,
# imported into Blender, its walk action renamed "walk", saved); "your Maya FBX" is assimp's
# FBX/animation_with_skeleton.fbx (centimetres). Then the guide's commands: Blender's glTF
# export, deform import (plain, --units cm, and --units/--scale/--up checked against the
# unconverted import in numpy), info/eval, characters in config.json, a running daemon picking
# the model up by SIGHUP and by the repository API, metadata and an infer of the clip.
# Needs blender (installed by make test); without it the Blender steps are skipped.
. "$(dirname "$0")/product_common.sh"
M=/usr/share/assimp/models
D="$BIN/deform"
cd "$T"

# every command line of the guide appears in this script (kept in step with the page)
# (each command of the page, with its options, is run below: a new option on the page without a
# line here fails)
"$PY" - "$ROOT/docs/own-character.md" "$ROOT/tests/e2e/own_character.sh" <<'PYEOF' && ok guide-commands-covered || fail guide-commands-covered
import re, sys
page, me = open(sys.argv[1]).read(), open(sys.argv[2]).read()
cmds = [l for l in page.splitlines() if re.match(r"(bin/deform|blender|curl|kill) ", l)]
missing = [(l, w) for l in cmds for w in re.findall(r"(?<![\w-])(--[a-z-]+|export_[a-z]+=\w+|-HUP|-X POST)", l) if w not in me]
print(len(cmds), "commands on the page;", "not run here:", missing)
sys.exit(0 if len(cmds) >= 8 and not missing else 1)
PYEOF

# ---------------------------------------------------------------- 1. export
if command -v blender >/dev/null 2>&1; then
    assimp export "$M/X/Testwuson.X" "$T/wuson.glb" -fglb2 >/dev/null
    blender -b --factory-startup --python-expr "
import numpy as np; np.bool = bool
import bpy
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.import_scene.gltf(filepath='$T/wuson.glb')
for a in bpy.data.actions:
    if a.name.startswith('Wuson_Walk'): a.name = 'walk'
    elif not a.name.startswith('walk'): a.use_fake_user = False; bpy.data.actions.remove(a)
for o in bpy.data.objects:
    if o.animation_data:
        for t in list(o.animation_data.nla_tracks): o.animation_data.nla_tracks.remove(t)
        o.animation_data.action = bpy.data.actions.get('walk') if o.type == 'ARMATURE' else None
bpy.ops.wm.save_as_mainfile(filepath='$T/mychar.blend')
" >"$T/mkblend.log" 2>&1 && [ -f mychar.blend ] && ok user-blend-made || { tail -20 "$T/mkblend.log"; fail user-blend-made; }
    # the guide's export command, verbatim (numpy fix only for Debian's Blender 3.4)
    blender -b mychar.blend --python-expr "import numpy as np; np.bool = bool; import bpy; bpy.ops.export_scene.gltf(filepath='mychar.glb', export_format='GLB', export_skins=True, export_morph=True, export_animations=True, export_yup=True)" >"$T/export.log" 2>&1 \
        && [ -s mychar.glb ] && ok blender-export || { tail -20 "$T/export.log"; fail blender-export; }
    HAVE_GLB=1
else
    echo "# blender not on PATH: Blender steps skipped"
    HAVE_GLB=
fi
cp "$M/FBX/animation_with_skeleton.fbx" mychar.fbx

# ---------------------------------------------------------------- 2. import
if [ -n "$HAVE_GLB" ]; then
    "$D" import mychar.glb --repository models --name mychar >"$T/imp.log" 2>&1 \
        && grep -q "next: a running deformd" "$T/imp.log" && grep -q "walk" "$T/imp.log" \
        && ok import-glb || { cat "$T/imp.log"; fail import-glb; }
fi
"$D" import mychar.fbx --repository models --name mychar_maya --units cm >"$T/impf.log" 2>&1 \
    && ok import-fbx-cm || { cat "$T/impf.log"; fail import-fbx-cm; }
"$D" import mychar.fbx --repository raw --name mychar_maya >/dev/null 2>&1 || fail import-fbx-raw

# the conversion is one similarity: every pose = X * the unconverted pose
conv_check() { # NAME ARGS... : import Testwuson with ARGS, compare a clip (LBS and DQS) in numpy
    local name=$1; shift
    "$D" import "$M/X/Testwuson.X" --repository conv --name "$name" "$@" >/dev/null 2>&1 || { fail "convert-$name" import; return; }
    local sk
    for sk in lbs dqs; do
        "$D" eval conv/"$name" --clip Wuson_Walk --fps 5 --skinning $sk --out "$T/c_$name.npy" --normals "$T/cn_$name.npy" >/dev/null \
            && "$D" eval conv/plain --clip Wuson_Walk --fps 5 --skinning $sk --out "$T/c_plain.npy" --normals "$T/cn_plain.npy" >/dev/null \
            && "$PY" - "$T/c_plain.npy" "$T/c_$name.npy" "$T/cn_plain.npy" "$T/cn_$name.npy" "$@" <<'PYEOF' \
            && ok "convert-$name-$sk" || fail "convert-$name-$sk"
import sys
import numpy as np
a, b = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
an, bn = np.load(sys.argv[3]).astype(np.float64), np.load(sys.argv[4]).astype(np.float64)
args = sys.argv[5:]
s = 1.0
A = np.eye(3)
units = {"m": 1, "cm": 0.01, "mm": 0.001, "km": 1000, "in": 0.0254, "ft": 0.3048}
# the rotation taking each up axis to +Y, written out independently of import_xform.c
ups = {"y": np.eye(3), "z": [[1, 0, 0], [0, 0, 1], [0, -1, 0]], "-z": [[1, 0, 0], [0, 0, -1], [0, 1, 0]],
       "x": [[0, -1, 0], [1, 0, 0], [0, 0, 1]], "-x": [[0, 1, 0], [-1, 0, 0], [0, 0, 1]],
       "-y": [[1, 0, 0], [0, -1, 0], [0, 0, -1]]}
for k, v in zip(args[::2], args[1::2]):
    if k == "--units": s *= units[v]
    if k == "--scale": s *= float(v)
    if k == "--up": A = np.array(ups[v], dtype=np.float64)
up = np.array([0.0, 1.0, 0.0])
x = s * a @ A.T
D = np.linalg.norm(x[0].max(0) - x[0].min(0))
e, en = np.abs(x - b).max() / D, np.abs(an @ A.T - bn).max()
print("positions %.3g of the diagonal, normals %.3g" % (e, en))
sys.exit(0 if e < 1e-5 and en < 1e-5 and D > 0 else 1)
PYEOF
    done
}
"$D" import "$M/X/Testwuson.X" --repository conv --name plain >/dev/null 2>&1
conv_check zup --up z
conv_check xcm --up x --units cm --scale 2.5
conv_check myup --up -y --units in
# refused
for bad in "--units parsec" "--up w" "--scale -1" "--scale 0" "--scale nan"; do
    if "$D" import "$M/X/Testwuson.X" --repository bad --name b $bad >"$T/bad.log" 2>&1; then fail "refuse $bad"
    else grep -q "must be" "$T/bad.log" && ok "refuse $bad" || { cat "$T/bad.log"; fail "refuse $bad" message; }; fi
done
[ ! -e bad/b ] && ok refuse-wrote-nothing || fail refuse-wrote-nothing
# FBX in centimetres: served in metres, 1/100 of the raw numbers
"$PY" - <<PYEOF && ok fbx-in-metres || fail fbx-in-metres
import subprocess, sys
import numpy as np
def rest(m):
    subprocess.run(["$D", "eval", m, "--rest", "--out", "$T/r.npy"], check=True, stdout=subprocess.DEVNULL)
    return np.load("$T/r.npy")[0].astype(np.float64)
a, b = rest("raw/mychar_maya"), rest("models/mychar_maya")
ext = b.max(0) - b.min(0)
print("raw extent", a.max(0) - a.min(0), "converted", ext)
sys.exit(0 if np.allclose(b, a * 0.01, atol=1e-6 * np.abs(a).max()) and ext.max() < 100 else 1)
PYEOF

# check offline (the guide's step 2 commands)
if [ -n "$HAVE_GLB" ]; then
    "$D" info models/mychar >"$T/info.log" 2>&1 && grep -q "walk" "$T/info.log" && ok info || { cat "$T/info.log"; fail info; }
    "$D" eval models/mychar --clip walk --fps 30 --out walk.npy >"$T/ev.log" 2>&1 && [ -s walk.npy ] \
        && ok eval-walk || { cat "$T/ev.log"; fail eval-walk; }
fi

# ---------------------------------------------------------------- 3-5. serve
mkdir -p served
echo "deformd-test-token-123" >token
start_daemon "$T/served" --token-file "$T/token" || { fail daemon-start; finish; exit; }
if [ -n "$HAVE_GLB" ]; then
    cp -r models/mychar served/
    cat >served/mychar/config.json <<'JSON'
{ "kind": "rigged", "max_batch_size": 32, "max_queue_delay_us": 500,
  "characters": { "mychar": {}, "mychar_dqs": { "skinning": "dqs" },
                  "mychar_vr": { "encoding": "float16" } } }
JSON
    kill -HUP "$DPID"   # the guide: kill -HUP $(pidof deformd)
    for _ in $(seq 1 50); do curl -sf "$URL/v2/models/mychar/ready" >/dev/null && break; sleep 0.1; done
    curl -s "$URL/v2/models/mychar" | grep -q '"name":"mychar"' && ok sighup-picks-up || fail sighup-picks-up
    for c in mychar mychar_dqs mychar_vr; do
        curl -s "$URL/v2/models/$c/infer" -d '{"parameters":{"clip":"walk","time":0.5},"outputs":[{"name":"positions"}]}' >"$T/inf_$c.json"
    done
    "$PY" - "$T" <<'PYEOF' && ok infer-characters || fail infer-characters
import json, sys
import numpy as np
T = sys.argv[1]
a = {c: json.load(open("%s/inf_%s.json" % (T, c))) for c in ("mychar", "mychar_dqs", "mychar_vr")}
for c, r in a.items():
    assert "outputs" in r, (c, r)
p = {c: np.array(r["outputs"][0]["data"], dtype=np.float64) for c, r in a.items()}
d = np.ptp(p["mychar"].reshape(-1, 3), axis=0).max()
print("datatypes", [r["outputs"][0]["datatype"] for r in a.values()],
      "dqs-lbs %.3g, f16-f32 %.3g of the extent" % (np.abs(p["mychar_dqs"] - p["mychar"]).max() / d,
                                                      np.abs(p["mychar_vr"] - p["mychar"]).max() / d))
assert a["mychar_vr"]["outputs"][0]["datatype"] == "FP16"
assert 0 < np.abs(p["mychar_dqs"] - p["mychar"]).max() / d < 0.2
assert np.abs(p["mychar_vr"] - p["mychar"]).max() / d < 1e-3
PYEOF
fi
cp -r models/mychar_maya served/
code=$(curl -s -o "$T/load.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $(cat token)" "$URL/v2/repository/models/mychar_maya/load")
[ "$code" = 200 ] && curl -s "$URL/v2/models/mychar_maya" | grep -q '"name":"mychar_maya"' \
    && ok api-load || { echo "$code"; cat "$T/load.json"; fail api-load; }
curl -sf "$URL/viewer/" >/dev/null && ok viewer-served || fail viewer-served
finish

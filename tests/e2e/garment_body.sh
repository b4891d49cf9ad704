#!/usr/bin/env bash
# tests/e2e/garment_body.sh — the garment body model (tools/garment) against Blender, the
# independent reference: Blender builds the body from assimp's HUMAN.blend (shape keys on the
# cage, bone-heat weights), `garment.py body-model` writes it as a `rigged` model with shape
# blend shapes, and for random shapes and retargeted CMU poses Blender's own shape-key mix +
# Armature modifier must equal `deform eval --input shape=... --input joint_rotations=...`
# within 1e-5 m (float round-off on a 1.75 m body). Also: joints move linearly with the shape
# (the file's shape directions reproduce the joints Blender's rig gets at a shape), the
# retargeted clip is served by the model, and a wrong shape length is refused.
# Skipped (no lines) when blender is not installed. About 25 s.
. "$(dirname "$0")/product_common.sh"
command -v blender >/dev/null || { echo "blender not installed: skipped"; exit 0; }
GT="$ROOT/tools/garment"
D=$T/db
mkdir -p "$D/body"
blender -b --factory-startup --python "$GT/build_body.py" -- "$D/body" >"$T/b1.log" 2>&1 \
    && grep -q "^build_body: 4282 vertices" "$T/b1.log" && ok gb-build-body \
    || { tail -20 "$T/b1.log"; fail gb-build-body; finish; exit 1; }
blender -b --factory-startup --python "$GT/retarget.py" -- --body "$D/body" \
    --bvh /usr/share/assimp/models/BVH/01_01.bvh --out "$D/poses.npz" --stride 40 >"$T/b2.log" 2>&1 \
    && ok gb-retarget || { tail -20 "$T/b2.log"; fail gb-retarget; finish; exit 1; }
"$PY" "$GT/garment.py" body-model "$D" --out "$T/body.safetensors" >"$T/b3.log" 2>&1 \
    && ok gb-body-model || { cat "$T/b3.log"; fail gb-body-model; finish; exit 1; }
# 6 cases: random shapes in [-2, 2] (the first at 0), poses from the clip
"$PY" - "$D" "$T" <<'PYEOF' || fail gb-cases
import sys, numpy as np
d, t = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(7)
p = np.load(d + '/poses.npz')['rotations']
shape = rng.uniform(-2, 2, (6, 4)).astype(np.float32); shape[0] = 0
rot = p[rng.choice(len(p), 6, replace=False)].astype(np.float32)
np.savez(t + '/cases.npz', shape=shape, rotations=rot)
np.save(t + '/shape.npy', shape); np.save(t + '/rot.npy', rot)
np.save(t + '/shape5.npy', np.zeros((6, 5), np.float32))
PYEOF
blender -b --factory-startup --python "$GT/bake_body.py" -- "$D/body" "$T/cases.npz" "$T/blender.npy" \
    >"$T/b4.log" 2>&1 || { tail -20 "$T/b4.log"; fail gb-bake; finish; exit 1; }
"$BIN/deform" eval "$T/body.safetensors" --input shape="$T/shape.npy" --input joint_rotations="$T/rot.npy" \
    --out "$T/ours.npy" >"$T/e1.log" 2>&1 || { cat "$T/e1.log"; fail gb-eval; }
"$BIN/deform" eval "$T/body.safetensors" --input joint_rotations="$T/rot.npy" --out "$T/noshape.npy" \
    >"$T/e2.log" 2>&1 || cat "$T/e2.log"
"$PY" - "$T" <<'PYEOF' && ok gb-blender-equals-ours || fail gb-blender-equals-ours
import sys, numpy as np
t = sys.argv[1]
a, b, c = (np.load(t + f) for f in ('/blender.npy', '/ours.npy', '/noshape.npy'))
e = np.abs(a - b).max(); e0 = np.abs(a[1:] - c[1:]).max(axis=(1, 2)).min()
print('max |blender - ours| = %.2e m; without the shape input the least-off case is %.3f m off' % (e, e0))
sys.exit(0 if e < 1e-5 and e0 > 0.01 else 1)
PYEOF
# joints linear in beta: Blender's rest bones at a shape vs the file's J0 + sum beta dJ
"$PY" - "$D" "$T" <<'PYEOF' && ok gb-joints-linear || fail gb-joints-linear
import sys, json, numpy as np
sys.path.insert(0, 'tools/garment'); import stfile
d, t = sys.argv[1], sys.argv[2]
T, meta = stfile.read(t + '/body.safetensors')
z = np.load(d + '/body/body.npz')
par = T['joint_parents']; J = len(par)
def heads(beta):  # FK of the file's translations with shape directions (identity rest rotations)
    tr = T['joint_rest_translations'] + np.tensordot(beta, T['joint_rest_translation_shapedirs'], 1)
    h = np.zeros((J, 3))
    for j in range(J): h[j] = tr[j] + (h[par[j]] if par[j] >= 0 else 0)
    return h
b = np.array([1.3, -0.7, 2.0, 0.5])
want = z['joint_positions'] + np.tensordot(b, z['joint_shape_deltas'], 1)
e = np.abs(heads(b) - want).max()
print('joints of the file vs the builder at beta=%s: %.2e m' % (b, e))
sys.exit(0 if e < 1e-5 and json.loads(meta['shape_names']) == ['height', 'weight', 'shoulders', 'hips'] else 1)
PYEOF
"$BIN/deform" eval "$T/body.safetensors" --clip 01_01 --frames 0:3 --out "$T/clip.npy" >"$T/e3.log" 2>&1 \
    && ok gb-clip || { cat "$T/e3.log"; fail gb-clip; }
if "$BIN/deform" eval "$T/body.safetensors" --input shape="$T/shape5.npy" --out "$T/x.npy" >"$T/e4.log" 2>&1; then
    fail gb-wrong-shape-length "accepted a [6,5] shape for a 4-shape body"
else
    grep -q "shape" "$T/e4.log" && ok gb-wrong-shape-length || { cat "$T/e4.log"; fail gb-wrong-shape-length; }
fi
finish

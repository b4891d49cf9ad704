#!/usr/bin/env bash
# tools/make_demo.sh — build the demo model repository from real assets.
#
#   tools/make_demo.sh [REPO]       (default: $DF_DEMO_REPO or ./demo-repo)
#
# Sources: Debian's assimp-testmodels (/usr/share/assimp/models, made by
# others, not by us):
#   wuson      X/Testwuson.X — skinned character with its animation clips;
#              served as two characters sharing one model (one queue, one
#              batch): "wuson" (linear blend skinning) and "wuson_dqs"
#              (dual-quaternion skinning).
#   morphcube  glTF2 AnimatedMorphCube — morph targets and a weights clip;
#              characters "morphcube" (all weights 0 by default) and
#              "morphcube_half" (every weight 0.5 by default).
#   ict_face   the ICT face rig (tests/data/ict, MIT, ICT-FaceKit): 55 ARKit-style
#              expression shapes, served as a `rigged` model (the source);
#   ict_to_t1  a `retarget` model: the same 55 source controls (or 68 landmark
#              markers) drive target T1, another identity with its own 25
#              shapes, through the cloning matrix (docs/retarget.md).
#   shirt      the committed fitted garment model (tests/data/garment/
#              shirt.safetensors, made by tools/garment from assimp's
#              BLEND/HUMAN.blend and BVH/01_01.bvh; docs/garment.md): a `garment`
#              model (shape input, joint_rotations, the body's clip 01_01) whose
#              answers carry the garment and the body it is on;
#   body       the same file's body as a `rigged` model with a `shape` input (its
#              top-level tensors, the garment's dropped): the triangles the viewer
#              draws the garment model's body_positions with, and the bare body.
#              Both are turned from the tools' Z-up to the served Y-up (x, y, z) ->
#              (x, z, -y): positions, directions, joint frames, clip and example
#              rotations (q -> R q R^-1) and the garment's per-axis DOF weights,
#              so the served shirt is the committed one rotated, exactly.
# Each asset goes through `bin/deform import`; this script then adds the
# "characters" section to REPO/<model>/config.json (format: core/df.h,
# df_repo_read_config; docs/model-format.md).
#
# Idempotent and fast when already built: REPO/.demo-stamp records a hash of
# bin/deform, this script and the assets; when it matches nothing is done.
# The repository is built in a temporary directory and moved into place, so
# an interrupted run never leaves half a repository.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/bin}
case "$BIN" in /*) ;; *) BIN=$ROOT/$BIN ;; esac
REPO=${1:-${DF_DEMO_REPO:-$ROOT/demo-repo}}
MODELS=${DF_ASSIMP_MODELS:-/usr/share/assimp/models}
WUSON=$MODELS/X/Testwuson.X
MORPH=$MODELS/glTF2/glTF-Sample-Models/AnimatedMorphCube-glTF/AnimatedMorphCube.gltf
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for f in "$BIN/deform" "$WUSON" "$MORPH"; do
    if [ ! -e "$f" ]; then
        echo "make_demo: missing $f (run 'make' and tools/deps.sh first)" >&2
        exit 1
    fi
done

ICT=$ROOT/tests/data/ict
SHIRT=$ROOT/tests/data/garment/shirt.safetensors
[ -f "$SHIRT" ] || { echo "make_demo: missing $SHIRT" >&2; exit 1; }
stamp=$(cat "$BIN/deform" "$0" "$WUSON" "$MORPH" "${MORPH%.gltf}.bin" "$ICT"/* \
    "$ROOT/tools/retarget/make_data.py" "$SHIRT" "$ROOT/tools/garment/stfile.py" | sha256sum | cut -c1-64)
if [ -f "$REPO/.demo-stamp" ] && [ "$(cat "$REPO/.demo-stamp")" = "$stamp" ]; then
    echo "make_demo: $REPO is up to date"
    exit 0
fi

mkdir -p "$(dirname "$REPO")"
TMP=$(mktemp -d "$(dirname "$REPO")/.demo-repo.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "make_demo: building $REPO from $MODELS"
"$BIN/deform" import "$WUSON" --repository "$TMP" --name wuson
"$BIN/deform" import "$MORPH" --repository "$TMP" --name morphcube
# the face: source rig and source -> T1 retarget model (rigs made by
# tools/retarget/make_data.py from the committed reduced ICT copy)
ICTW=$(mktemp -d "$(dirname "$REPO")/.demo-ict.XXXXXX")
trap 'rm -rf "$TMP" "$ICTW"' EXIT
"$PY" "$ROOT/tools/retarget/make_data.py" build --data "$ICT" --out "$ICTW" --frames 1
mkdir -p "$TMP/ict_face/1"
cp "$ICTW/source.safetensors" "$TMP/ict_face/1/model.safetensors"
echo '{"kind": "rigged"}' >"$TMP/ict_face/config.json"
"$BIN/deform" retarget build --source "$ICTW/source.safetensors" --target "$ICTW/t1.safetensors" \
    --repository "$TMP" --name ict_to_t1 --map clone --poses "$ICT/clone_source.npy" \
    "$ICT/clone_target.npy" --markers "$ICTW/landmarks68.txt"
rm -rf "$ICTW"
# the garment and its body, Y-up (see the header)
"$PY" - "$SHIRT" "$TMP" "$ROOT/tools/garment" <<'EOF'
import json, os, sys
import numpy as np
src, repo = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import stfile
T, meta = stfile.read(src)
if meta.get("kind") != "garment":
    sys.exit("make_demo: %s is not a garment model (kind %r)" % (src, meta.get("kind")))
R = np.array([[1, 0, 0], [0, 0, 1], [0, -1, 0]], np.float64)  # Z-up -> Y-up, det +1
R4 = np.eye(4); R4[:3, :3] = R

def vec(a):   # [..., 3] positions and directions
    return (np.asarray(a, np.float64) @ R.T).astype(np.float32)

def quat(a):  # [..., 4] x,y,z,w: R q R^-1 turns the axis
    a = np.asarray(a, np.float32)
    return np.concatenate([vec(a[..., :3]), a[..., 3:]], axis=-1)

out = {}
for k, a in T.items():
    if k in ("positions", "normals", "shape_deltas", "shape_normal_deltas", "joint_rest_translations",
             "joint_rest_translation_shapedirs", "garment/positions", "garment/anchor_base",
             "garment/pose_examples", "garment/anchor_basis"):
        a = vec(a)
    elif k in ("joint_rest_rotations", "garment/anchor_rotations", "garment/pose_rotations") \
            or (k.startswith("clip/") and k.endswith("/rotations")):
        a = quat(a)
    elif k == "joint_rest_scales":
        a = np.ascontiguousarray(a[:, [0, 2, 1]])
    elif k == "inverse_bind_matrices":
        a = (R4 @ a.astype(np.float64) @ R4.T).astype(np.float32)
    elif k == "garment/dof_weights":  # weights of |r_x|, |r_y|, |r_z| per joint -> x, z, y
        J = a.shape[1] // 3
        a = np.ascontiguousarray(a.reshape(a.shape[0], J, 3)[:, :, [0, 2, 1]].reshape(a.shape))
    elif k.startswith("clip/") and not k.endswith("/times"):
        sys.exit("make_demo: %s: clip tensor %s not handled" % (src, k))
    out[k] = a
for name, kind, tensors, md in (
        ("shirt", "garment", out, meta),
        ("body", "rigged", {k: v for k, v in out.items() if not k.startswith("garment/")},
         dict({k: v for k, v in meta.items() if not k.startswith("garment_")}, kind="rigged"))):
    os.makedirs(os.path.join(repo, name, "1"))
    stfile.write(os.path.join(repo, name, "1", "model.safetensors"), tensors, md)
    with open(os.path.join(repo, name, "config.json"), "w") as f:
        json.dump({"kind": kind}, f)
        f.write("\n")
print("make_demo: shirt (garment, %d vertices on a %d-vertex body), body (rigged, %d shapes), "
      "clips %s, Y-up" % (len(out["garment/positions"]), len(out["positions"]),
                          len(out["shape_deltas"]), meta.get("clips")))
EOF

# Characters. The number of morph targets comes from the model file itself
# (safetensors header: 8-byte little-endian length, then JSON).
"$PY" - "$TMP" <<'EOF'
import json, os, struct, sys
repo = sys.argv[1]

def header(name):
    d = os.path.join(repo, name)
    v = max(int(x) for x in os.listdir(d) if x.isdigit())
    with open(os.path.join(d, str(v), "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))

def add_characters(name, chars):
    p = os.path.join(repo, name, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    cfg["characters"] = chars
    with open(p + ".tmp", "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(p + ".tmp", p)

add_characters("wuson", {"wuson": {"skinning": "lbs"},
                         "wuson_dqs": {"skinning": "dqs"}})
h = header("morphcube")
m = h["morph_deltas"]["shape"][0] if "morph_deltas" in h else 0
if m == 0:
    sys.exit("make_demo: morphcube has no morph targets (import problem?)")
add_characters("morphcube", {"morphcube": {},
                             "morphcube_half": {"defaults": {"weights": [0.5] * m}}})
print("make_demo: characters wuson, wuson_dqs (model wuson); "
      "morphcube, morphcube_half (model morphcube, %d morph targets)" % m)

# An example request (README, run_demo.sh): wuson's rest rotations with the
# neck, the tail and the left foreleg turned about their local z axis
# (q = q_rest * q_z(angle)). REPO/requests has no config.json, so the
# repository does not take it for a model.
import math
h = header("wuson")
names = json.loads(h["__metadata__"]["joint_names"])
rr = h["joint_rest_rotations"]
d = os.path.join(repo, "wuson")
v = max(int(x) for x in os.listdir(d) if x.isdigit())
with open(os.path.join(d, str(v), "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + rr["data_offsets"][0])
    J = rr["shape"][0]
    q = list(struct.unpack("<%df" % (4 * J), f.read(16 * J)))
turn = {"Neck": 35.0, "Tail01": 30.0, "ForeLeg_L_01": -40.0, "HindLeg_R_01": 30.0}
def qmul(a, b):
    ax, ay, az, aw = a; bx, by, bz, bw = b
    return [aw*bx + ax*bw + ay*bz - az*by, aw*by - ax*bz + ay*bw + az*bx,
            aw*bz + ax*by - ay*bx + az*bw, aw*bw - ax*bx - ay*by - az*bz]
hit = 0
for j, nm in enumerate(names):
    if nm in turn:
        a = math.radians(turn[nm]) / 2
        q[4*j:4*j+4] = qmul(q[4*j:4*j+4], [0.0, 0.0, math.sin(a), math.cos(a)])
        hit += 1
if hit == 0:
    sys.exit("make_demo: none of %s among wuson's joints %s" % (list(turn), names))
os.makedirs(os.path.join(repo, "requests"), exist_ok=True)
with open(os.path.join(repo, "requests", "wuson_pose.json"), "w") as f:
    json.dump({"inputs": [{"name": "joint_rotations", "shape": [J, 4], "datatype": "FP32",
                           "data": [round(x, 7) for x in q]}],
               "outputs": [{"name": "positions"}]}, f)
    f.write("\n")
print("make_demo: example request requests/wuson_pose.json (%d joints, %d turned)" % (J, hit))
EOF

echo "$stamp" > "$TMP/.demo-stamp"
rm -rf "$REPO"
mv "$TMP" "$REPO"
trap - EXIT
echo "make_demo: demo repository ready in $REPO"

#!/usr/bin/env bash
# tests/e2e/decompose_glb.sh — `deform decompose --export-glb`: the fitted
# skeleton as a glTF binary that other software plays.
#
# References, independent of the writer:
#  - assimp: the .glb re-imported by `deform import` (assimp's glTF 2
#    importer, its own skin and animation code) and replayed by `deform
#    eval` must match `deform eval` of the servable fit at every key
#    (<= 1e-5 of the rest bbox diagonal, computed here in numpy);
#  - Blender: tools/blender/bake.py imports the .glb with Blender's own
#    glTF importer and bakes the armature at every key (same bound);
#  - the fit itself against the sequence generated here from a known
#    rigid chain (so the glb plays the input, not just itself).
# For trs fits the glb carries scale channels; affine fits are refused.
. "$(dirname "$0")/product_common.sh"
D="$BIN/deform"
REPO=$T/repo

"$PY" - "$T" <<'EOF' || { fail glb-generate; finish; exit 1; }
import json, struct, sys
import numpy as np
T = sys.argv[1]
rng = np.random.default_rng(3)
def save(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        dt = {np.float32: "F32", np.int32: "I32"}[arr.dtype.type]
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)
def rot(axis, ang):
    a = axis / np.linalg.norm(axis); K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(ang) * K + (1 - np.cos(ang)) * K @ K
# a tube of 5 bones chained by ball joints at y = 0.4 k; bone k turns about
# its joint relative to bone k-1; `scale` adds a uniform scale per bone
rings, seg, B, F = 40, 12, 5, 16
y = np.repeat(np.linspace(0, 2, rings), seg); a = np.tile(np.arange(seg) * 2 * np.pi / seg, rings)
rest = np.stack([0.25 * np.cos(a), y, 0.25 * np.sin(a)], 1)
c = 2 * (np.arange(B) + 0.5) / B
W = np.maximum(0, 1 - np.abs(y[:, None] - c[None]) / (1.5 / B)); W /= W.sum(1, keepdims=True)
tris = []
for r in range(rings - 1):
    for k in range(seg):
        p, q = r * seg + k, r * seg + (k + 1) % seg
        tris += [[p, p + seg, q], [q, p + seg, q + seg]]
tris = np.array(tris, np.int32)
for name, scale in (("chain", 0.0), ("scaled", 0.15)):
    frames = np.zeros((F, len(rest), 3))
    for f in range(F):
        M = []
        for j in range(B):
            R = rot(rng.normal(size=3), 0 if f == 0 else 0.6 * rng.random())
            s = 1 if f == 0 else 1 + scale * (2 * rng.random() - 1)
            cj = np.array([0, 2.0 * j / B if j else 0.2, 0])
            L = np.eye(4); L[:3, :3] = s * R; L[:3, 3] = cj - s * R @ cj
            if j == 0 and f: L[:3, 3] += 0.3 * (rng.random(3) - 0.5)
            M.append(L if j == 0 else M[-1] @ L)
        for j in range(B):
            frames[f] += W[:, j:j + 1] * (rest @ M[j][:3, :3].T + M[j][:3, 3])
    frames = frames.astype(np.float32)
    np.save(f"{T}/{name}.npy", frames)
    save(f"{T}/{name}.safetensors", {"frames": frames, "triangles": tris,
                                     "times": (np.arange(F) / 24.0).astype(np.float32)})
EOF
ok glb-generate

# cmp.py A.npy B.npy: max |A - B| / diag(B frame 0), as one number
cat >"$T/cmp.py" <<'EOF'
import sys, numpy as np
a, b = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
if a.shape != b.shape:
    print("shapes differ", a.shape, b.shape); sys.exit(1)
diag = np.linalg.norm(b[0].max(0) - b[0].min(0))
print("%.3g" % (np.abs(a - b).max() / diag))
EOF
below() { "$PY" -c "import sys; sys.exit(0 if float('$1') <= $2 else 1)" 2>/dev/null; }

# one input: fit, glb, re-import, eval, compare; Blender if installed
run_case() { # NAME INPUT TRANSFORMS BONES [extra decompose args]
    local n=$1 in=$2 tf=$3 b=$4 clip=${CLIP:-fit}; shift 4
    "$D" decompose "$in" --bones "$b" --transforms "$tf" --export-glb "$T/$n.glb" \
        --repository "$REPO" --name "$n" --metrics-json "$T/$n.json" "$@" >"$T/$n.log" 2>&1 \
        && "$D" eval "$REPO/$n" --clip "$clip" --out "$T/$n-fit.npy" >>"$T/$n.log" 2>&1 \
        && ok "glb-$n-written" || { cat "$T/$n.log"; fail "glb-$n-written"; return; }
    "$D" import "$T/$n.glb" --repository "$T/re" --name "$n" >>"$T/$n.log" 2>&1 \
        && "$D" eval "$T/re/$n" --clip "$clip" --out "$T/$n-glb.npy" >>"$T/$n.log" 2>&1 \
        || { cat "$T/$n.log"; fail "glb-$n-assimp"; return; }
    local e
    e=$("$PY" "$T/cmp.py" "$T/$n-glb.npy" "$T/$n-fit.npy")
    echo "$n: assimp re-import vs fit: max $e of diag"
    below "$e" 1e-5 && ok "glb-$n-assimp" || fail "glb-$n-assimp" "max error $e of diag"
    if command -v blender >/dev/null; then
        blender -b --factory-startup --python tools/blender/bake.py -- "$T/$n.glb" "$T/bake-$n" \
            >"$T/bake-$n.log" 2>&1 || { tail -20 "$T/bake-$n.log"; fail "glb-$n-blender"; return; }
        e=$("$PY" "$T/cmp.py" "$T/bake-$n/$clip.npy" "$T/$n-fit.npy")
        echo "$n: Blender bake vs fit: max $e of diag"
        below "$e" 1e-5 && ok "glb-$n-blender" || fail "glb-$n-blender" "max error $e of diag"
    else
        echo "blender not installed: Blender check of $n skipped"
    fi
}

run_case chain "$T/chain.safetensors" rigid 5 --iters 60
e=$("$PY" "$T/cmp.py" "$T/chain-fit.npy" "$T/chain.npy")
echo "chain: fit vs the generated sequence: max $e of diag"
below "$e" 1e-3 && ok glb-chain-fits-input || fail glb-chain-fits-input "max error $e of diag"
grep -q 'skeleton: 5 joints (tree)' "$T/chain.log" && ok glb-chain-skeleton \
    || { cat "$T/chain.log"; fail glb-chain-skeleton; }
run_case scaled "$T/scaled.safetensors" trs 5 --iters 60
"$PY" - "$T/scaled.glb" <<'EOF' && ok glb-scaled-has-scale || fail glb-scaled-has-scale
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
magic, ver, total, jl, jt = struct.unpack("<5I", raw[:20])
doc = json.loads(raw[20:20 + jl])
paths = {c["target"]["path"] for c in doc["animations"][0]["channels"]}
print("channels:", sorted(paths), "joints", len(doc["skins"][0]["joints"]))
sys.exit(0 if magic == 0x46546C67 and ver == 2 and total == len(raw) and paths == {"translation", "rotation", "scale"} else 1)
EOF

WUSON=/usr/share/assimp/models/X/Testwuson.X
if [ -f "$WUSON" ]; then
    "$D" import "$WUSON" --repository "$REPO" --name wuson >"$T/wuson.log" 2>&1 \
        || { cat "$T/wuson.log"; fail glb-wuson-import; }
    CLIP=Wuson_Walk run_case walk "$REPO/wuson" rigid 16 --clip Wuson_Walk --fps 24
fi

# refused: affine bones are not a skeleton
"$D" decompose "$T/chain.safetensors" --bones 5 --transforms affine --export-glb "$T/no.glb" \
    --repository "$REPO" --name no >"$T/no.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "needs --transforms rigid or trs" "$T/no.log" && [ ! -e "$T/no.glb" ] \
    && ok glb-refuse-affine || { cat "$T/no.log"; fail glb-refuse-affine "exit $rc"; }
finish

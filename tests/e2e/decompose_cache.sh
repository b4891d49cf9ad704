#!/usr/bin/env bash
# tests/e2e/decompose_cache.sh — point caches (MDD, PC2) as `deform decompose`
# input, with the topology from --mesh or none.
#
# References, independent of the reader:
#  - caches written here with Python's struct from known frames: what the
#    tool read (--save-sequence) must be those frames bit for bit, with the
#    times the formats define;
#  - an MDD written by Blender's own exporter (tools/blender/export_mdd.py on
#    Testwuson exported to glTF by assimp) against Blender's evaluated
#    positions of the same frames (tools/blender/bake.py --frames all, Y-up
#    there, Z-up in the cache): <= 1e-5 of the diagonal; then decomposed.
# Malformed caches must exit 1 naming the problem.
. "$(dirname "$0")/product_common.sh"
D="$BIN/deform"
REPO=$T/repo

"$PY" - "$T" <<'EOF' || { fail cache-generate; finish; exit 1; }
import json, struct, sys
import numpy as np
T = sys.argv[1]
rng = np.random.default_rng(11)
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
rings, seg, B, F = 30, 10, 4, 12
y = np.repeat(np.linspace(0, 2, rings), seg); a = np.tile(np.arange(seg) * 2 * np.pi / seg, rings)
rest = np.stack([0.3 * np.cos(a), y, 0.3 * np.sin(a)], 1)
c = 2 * (np.arange(B) + 0.5) / B
W = np.maximum(0, 1 - np.abs(y[:, None] - c[None]) / (1.5 / B)); W /= W.sum(1, keepdims=True)
tris = np.array([[r * seg + k, (r + 1) * seg + k, r * seg + (k + 1) % seg] for r in range(rings - 1) for k in range(seg)] +
                [[r * seg + (k + 1) % seg, (r + 1) * seg + k, (r + 1) * seg + (k + 1) % seg] for r in range(rings - 1) for k in range(seg)], np.int32)
frames = np.zeros((F, len(rest), 3))
for f in range(F):
    for j in range(B):
        R = rot(rng.normal(size=3), 0 if f == 0 else 0.7 * rng.random())
        t = 0 if f == 0 else 0.3 * (rng.random(3) - 0.5)
        frames[f] += W[:, j:j + 1] * (rest @ R.T + t)
frames = frames.astype(np.float32)
N = len(rest)
np.save(f"{T}/frames.npy", frames)
save(f"{T}/mesh.safetensors", {"positions": rest.astype(np.float32), "triangles": tris})
save(f"{T}/short_mesh.safetensors", {"positions": rest[:-1].astype(np.float32), "triangles": tris[:10]})
times = (np.arange(F) * 0.05 + 0.5).astype(np.float32)
def mdd(path, fr, tm, nf=None, nv=None, cut=0):
    b = struct.pack(">2i", nf if nf is not None else len(fr), nv if nv is not None else fr.shape[1])
    b += struct.pack(">%df" % len(tm), *tm) + fr.astype(">f4").tobytes()
    open(path, "wb").write(b[:len(b) - cut])
def pc2(path, fr, start=3.0, rate=2.0, ver=1, magic=b"POINTCACHE2\0", cut=0):
    b = magic + struct.pack("<iiffi", ver, fr.shape[1], start, rate, len(fr)) + fr.astype("<f4").tobytes()
    open(path, "wb").write(b[:len(b) - cut])
mdd(f"{T}/seq.mdd", frames, times)
pc2(f"{T}/seq.pc2", frames)
mdd(f"{T}/zero_times.mdd", frames, np.zeros(F, np.float32))
mdd(f"{T}/truncated.mdd", frames, times, cut=7)
mdd(f"{T}/counts.mdd", frames, times, nf=F + 1)
pc2(f"{T}/truncated.pc2", frames, cut=100)
pc2(f"{T}/magic.pc2", frames, magic=b"POINTCACHE3\0")
pc2(f"{T}/version.pc2", frames, ver=2)
bad = frames.copy(); bad[5, 17, 1] = np.nan
pc2(f"{T}/nan.pc2", bad)
open(f"{T}/empty.mdd", "wb").write(b"\0\0")
EOF
ok cache-generate

# read-back: --save-sequence writes what the tool read
readback() { # NAME CACHE EXPECTED_TIMES_EXPR [args]
    local n=$1 c=$2 texpr=$3; shift 3
    "$D" decompose "$c" --bones 4 --max-influences 4 --iters 40 --tol 1e-5 --repository "$REPO" --name "$n" \
        --save-sequence "$T/$n-read.safetensors" --metrics-json "$T/$n.json" "$@" >"$T/$n.log" 2>&1 \
        || { cat "$T/$n.log"; fail "cache-$n"; return; }
    "$PY" - "$T/$n-read.safetensors" "$T/frames.npy" "$T/$n.json" "$texpr" <<'EOF' && ok "cache-$n" || { cat "$T/$n.log"; fail "cache-$n"; }
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
def t(k, dt):
    a, b = h[k]["data_offsets"]; return np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(h[k]["shape"])
fr, tm = t("frames", np.float32), t("times", np.float32)
ref = np.load(sys.argv[2]); F = len(ref)
want = eval(sys.argv[4], {"np": np, "F": F}).astype(np.float32)
m = json.load(open(sys.argv[3]))
print("read %s, times %s..%s, triangles %s, fit ERMS %.3g%%" % (fr.shape, tm[0], tm[-1], h["triangles"]["shape"], m["erms_pct"]))
sys.exit(0 if np.array_equal(fr, ref) and np.allclose(tm, want, rtol=0, atol=1e-6) and m["erms_pct"] < 0.01 else 1)
EOF
}
readback mdd "$T/seq.mdd" "np.arange(F) * 0.05 + 0.5" --mesh "$T/mesh.safetensors"
readback pc2 "$T/seq.pc2" "(3 + 2 * np.arange(F)) / 30.0" --mesh "$T/mesh.safetensors" --fps 30
readback pc2-nomesh "$T/seq.pc2" "(3 + 2 * np.arange(F)) / 24.0"
readback mdd-zero-times "$T/zero_times.mdd" "np.arange(F) / 24.0"
grep -q "triangles.*\[0, 3\]\|no triangles" "$T/pc2-nomesh.log" && ok cache-positions-only \
    || { cat "$T/pc2-nomesh.log"; fail cache-positions-only; }

refuse() { # NAME PATTERN ARGS...
    local name=$1 pat=$2; shift 2
    "$D" decompose "$@" --bones 2 --repository "$REPO" --name bad >"$T/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 1 ] && grep -q -- "$pat" "$T/$name.log"; then ok "$name"
    else cat "$T/$name.log"; fail "$name" "exit $rc, wanted 1 and '$pat'"; fi
}
refuse cache-refuse-truncated-mdd "truncated MDD: 12 frames of 300 points need" "$T/truncated.mdd"
refuse cache-refuse-counts-mdd "truncated MDD: 13 frames" "$T/counts.mdd"
refuse cache-refuse-empty "truncated MDD: 2 bytes" "$T/empty.mdd"
refuse cache-refuse-truncated-pc2 "truncated PC2" "$T/truncated.pc2"
refuse cache-refuse-magic "not a PC2 file" "$T/magic.pc2"
refuse cache-refuse-version "PC2 version 2" "$T/version.pc2"
refuse cache-refuse-nan "frame 5, point 17, coordinate y is not finite" "$T/nan.pc2"
refuse cache-refuse-mesh-count "has 300 points but the mesh .* has 299 vertices" "$T/seq.mdd" --mesh "$T/short_mesh.safetensors"
[ ! -e "$REPO/bad" ] && ok cache-refuse-wrote-nothing || fail cache-refuse-wrote-nothing

# Blender's own MDD exporter
if command -v blender >/dev/null && [ -f /usr/share/assimp/models/X/Testwuson.X ]; then
    assimp export /usr/share/assimp/models/X/Testwuson.X "$T/wuson.glb" -f glb2 >"$T/assimp.log" 2>&1 \
        && blender -b --factory-startup --python tools/blender/export_mdd.py -- "$T/wuson.glb" "$T/walk.mdd" \
            --clip Wuson_Walk --mesh-out "$T/walk_mesh.safetensors" >"$T/mdd.log" 2>&1 \
        && blender -b --factory-startup --python tools/blender/bake.py -- "$T/wuson.glb" "$T/bake" \
            --frames all --clips Wuson_Walk >"$T/bake.log" 2>&1 \
        && ok cache-blender-export || { tail -20 "$T/mdd.log" "$T/bake.log"; fail cache-blender-export; }
    "$D" decompose "$T/walk.mdd" --mesh "$T/walk_mesh.safetensors" --bones 16 --repository "$REPO" \
        --name walkmdd --save-sequence "$T/walk-read.safetensors" --metrics-json "$T/walkmdd.json" \
        >"$T/walkmdd.log" 2>&1 && ok cache-blender-decompose || { cat "$T/walkmdd.log"; fail cache-blender-decompose; }
    "$PY" - "$T/walk-read.safetensors" "$T/bake/Wuson_Walk.npy" "$T/walkmdd.json" <<'EOF' \
        && ok cache-blender-mdd-matches || fail cache-blender-mdd-matches
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
a, b = h["frames"]["data_offsets"]
fr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(h["frames"]["shape"]).astype(np.float64)
yup = np.stack([fr[..., 0], fr[..., 2], -fr[..., 1]], -1)      # Blender Z-up -> Y-up
bake = np.load(sys.argv[2]).astype(np.float64)
m = json.load(open(sys.argv[3]))
diag = np.linalg.norm(bake[0].max(0) - bake[0].min(0))
e = np.abs(yup - bake).max() / diag if yup.shape == bake.shape else np.inf
print("MDD %s vs Blender bake %s: max %.3g of diag; fit ERMS %.4f%%, %d triangles" %
      (fr.shape, bake.shape, e, m["erms_pct"], h["triangles"]["shape"][0]))
sys.exit(0 if e <= 1e-5 and m["erms_pct"] <= 0.1 and h["triangles"]["shape"][0] > 3000 else 1)
EOF
else
    echo "blender or Testwuson not installed: Blender MDD check skipped"
fi
finish

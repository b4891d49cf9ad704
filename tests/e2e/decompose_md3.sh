#!/usr/bin/env bash
# tests/e2e/decompose_md3.sh — id Tech 3 MD3 files read directly (every
# frame; assimp gives only the first) by `deform decompose`.
#
# Reference: MD3 files written here with Python's struct from a known
# animated tube split into two surfaces. What the tool read
# (--save-sequence) must be the stored int16 values / 64 bit for bit, the
# triangles of the second surface offset by the first's vertex count, times
# p / fps; the sequence then decomposes. Malformed files exit 1 naming the
# problem. (Real MD3 players: `make eval-decompose`, from Debian's
# openarena-data; not part of `make test`.)
. "$(dirname "$0")/product_common.sh"
D="$BIN/deform"
REPO=$T/repo

"$PY" - "$T" <<'EOF' || { fail md3-generate; finish; exit 1; }
import struct, sys
import numpy as np
T = sys.argv[1]
rng = np.random.default_rng(5)
def rot(axis, ang):
    a = axis / np.linalg.norm(axis); K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(ang) * K + (1 - np.cos(ang)) * K @ K
rings, seg, B, F = 24, 10, 3, 10
y = np.repeat(np.linspace(0, 60, rings), seg); a = np.tile(np.arange(seg) * 2 * np.pi / seg, rings)
rest = np.stack([8 * np.cos(a), y, 8 * np.sin(a)], 1)
c = 60 * (np.arange(B) + 0.5) / B
W = np.maximum(0, 1 - np.abs(y[:, None] - c[None]) / (45 / B)); W /= W.sum(1, keepdims=True)
frames = np.zeros((F, len(rest), 3))
for f in range(F):
    for j in range(B):
        R = rot(rng.normal(size=3), 0 if f == 0 else 0.6 * rng.random())
        frames[f] += W[:, j:j + 1] * (rest @ R.T + (0 if f == 0 else 6 * (rng.random(3) - 0.5)))
q = np.round(frames * 64).astype(np.int16)                  # MD3 stores 1/64 units
half = rings // 2 * seg                                     # surface 0: rings 0..11, surface 1: 12..23
def tris(r0, r1, base):
    t = []
    for r in range(r0, r1 - 1):
        for k in range(seg):
            p, s = r * seg + k, r * seg + (k + 1) % seg
            t += [[p - base, p + seg - base, s - base], [s - base, p + seg - base, s + seg - base]]
    return np.array(t, np.int32)
surfs = [(0, half, tris(0, rings // 2, 0)), (half, len(rest), tris(rings // 2, rings, half))]
np.save(f"{T}/md3_frames.npy", q.astype(np.float32) / 64)
np.save(f"{T}/md3_tris.npy", np.concatenate([surfs[0][2], surfs[1][2] + half]))
def md3(path, nf_surf1=F, bad_tri=False, cut=0, ident=b"IDP3"):
    body, blobs = b"", []
    ofs_surf = 108 + 56 * F
    for si, (v0, v1, t) in enumerate(surfs):
        nv = v1 - v0
        tt = t.copy()
        if bad_tri and si == 1: tt[3, 2] = nv + 5
        nfs = nf_surf1 if si == 1 else F
        xyz = np.zeros((F, nv, 4), np.int16); xyz[:, :, :3] = q[:, v0:v1]
        o_tri = 108; o_sh = o_tri + 12 * len(t); o_st = o_sh; o_xyz = o_st + 8 * nv
        o_end = o_xyz + 8 * nv * F
        h = b"IDP3" + ("surf%d" % si).encode().ljust(64, b"\0")
        h += struct.pack("<10i", 0, nfs, 0, nv, len(t), o_tri, o_sh, o_st, o_xyz, o_end)
        blobs.append(h + tt.astype("<i4").tobytes() + np.zeros(2 * nv, "<f4").tobytes() + xyz.astype("<i2").tobytes())
    frames_blob = b"".join(struct.pack("<10f", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1) + b"f".ljust(16, b"\0") for _ in range(F))
    total = ofs_surf + sum(len(x) for x in blobs)
    hdr = ident + struct.pack("<i", 15) + b"tube".ljust(64, b"\0")
    hdr += struct.pack("<9i", 0, F, 0, len(surfs), 0, 108, 108 + 56 * F, ofs_surf, total)
    data = hdr + frames_blob + b"".join(blobs)
    open(path, "wb").write(data[:len(data) - cut])
md3(f"{T}/tube.md3")
md3(f"{T}/truncated.md3", cut=40)
md3(f"{T}/frames.md3", nf_surf1=F - 1)
md3(f"{T}/badtri.md3", bad_tri=True)
md3(f"{T}/ident.md3", ident=b"IDP2")
EOF
ok md3-generate

"$D" decompose "$T/tube.md3" --bones 3 --max-influences 4 --iters 40 --tol 1e-5 --fps 20 --repository "$REPO" \
    --name tube --save-sequence "$T/tube-read.safetensors" --metrics-json "$T/tube.json" >"$T/tube.log" 2>&1 \
    && ok md3-decompose || { cat "$T/tube.log"; fail md3-decompose; }
"$PY" - "$T" <<'EOF' && ok md3-read-back || { cat "$T/tube.log"; fail md3-read-back; }
import json, struct, sys
import numpy as np
T = sys.argv[1]
raw = open(f"{T}/tube-read.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
def t(k, dt):
    a, b = h[k]["data_offsets"]; return np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(h[k]["shape"])
fr, tr, tm = t("frames", np.float32), t("triangles", np.int32), t("times", np.float32)
ref, rt = np.load(f"{T}/md3_frames.npy"), np.load(f"{T}/md3_tris.npy")
m = json.load(open(f"{T}/tube.json"))
print("read %s frames, %d triangles, times %g..%g; fit ERMS %.3g%%" % (fr.shape, len(tr), tm[0], tm[-1], m["erms_pct"]))
ok = np.array_equal(fr, ref) and np.array_equal(tr, rt) and np.allclose(tm, np.arange(len(ref)) / 20.0)
sys.exit(0 if ok and m["erms_pct"] < 0.05 else 1)
EOF

refuse() { # NAME PATTERN ARGS...
    local name=$1 pat=$2; shift 2
    "$D" decompose "$@" --bones 2 --repository "$REPO" --name bad >"$T/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 1 ] && grep -q -- "$pat" "$T/$name.log"; then ok "$name"
    else cat "$T/$name.log"; fail "$name" "exit $rc, wanted 1 and '$pat'"; fi
}
refuse md3-refuse-truncated "surface 1 ('surf1').*truncated or damaged" "$T/truncated.md3"
refuse md3-refuse-frames "surface 1 ('surf1') has 9 frames but the header says 10" "$T/frames.md3"
refuse md3-refuse-triangle "surface 1 ('surf1'): triangle 3 references vertex 125 of 120" "$T/badtri.md3"
refuse md3-refuse-ident "not an MD3 file" "$T/ident.md3"
[ ! -e "$REPO/bad" ] && ok md3-refuse-wrote-nothing || fail md3-refuse-wrote-nothing
finish

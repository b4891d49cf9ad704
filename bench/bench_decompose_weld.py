#!/usr/bin/python3
"""bench_decompose_weld.py — the "welded copy" of a raw decomposition sequence.

usage: bench_decompose_weld.py IN.safetensors OUT.safetensors

Reads the raw format of docs/decompose.md (frames [F,N,3] F32, triangles [T,3]
I32, optional times/rest) and merges vertices whose whole trajectories are
bitwise identical (a seam or a split piece duplicated by the exporter), remaps
the triangles and drops those that collapse. This is the hand welding the
decomposition must not need: docs/decompose.md compares fits of both.
Prints "N -> W vertices, T -> T' triangles".
"""
import json, struct, sys
import numpy as np

def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, h in hdr.items():
        if k == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[h["dtype"]]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(h["shape"])
    return out

def save(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        dt = {np.float32: "F32", np.int32: "I32"}[arr.dtype.type]
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)

t = load(sys.argv[1])
fr, tri = t["frames"], t["triangles"]
F, N, _ = fr.shape
traj = np.ascontiguousarray(fr.transpose(1, 0, 2).reshape(N, -1))
keys = traj.view(np.dtype((np.void, traj.dtype.itemsize * traj.shape[1]))).ravel()
_, first, inv = np.unique(keys, return_index=True, return_inverse=True)
order = np.argsort(first)             # keep the first occurrence order
remap = np.empty_like(order)
remap[order] = np.arange(len(order))
new_id = remap[inv]
keep = np.sort(first)
tri2 = new_id[tri]
ok = (tri2[:, 0] != tri2[:, 1]) & (tri2[:, 1] != tri2[:, 2]) & (tri2[:, 0] != tri2[:, 2])
out = {"frames": np.ascontiguousarray(fr[:, keep]), "triangles": tri2[ok].astype(np.int32)}
if "times" in t:
    out["times"] = t["times"]
if "rest" in t:
    out["rest"] = np.ascontiguousarray(t["rest"][keep])
save(sys.argv[2], out)
print("%d -> %d vertices, %d -> %d triangles" % (N, len(keep), len(tri), ok.sum()))

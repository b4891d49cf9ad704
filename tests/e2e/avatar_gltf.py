#!/usr/bin/python3
"""avatar_gltf.py OUT.gltf [DELTAS.npz] — a small avatar as exporters write them: a head (two
primitives, as a mesh of two materials is written), teeth and eyes in three meshes whose
morph targets share ARKit names (the head's primitives and the teeth all carry `jawOpen`; the eyes carry `eyeBlink_L` twice, a repeated name within one mesh), on nodes
with their own transforms, and two clips of morph weights per node: `talk` (the head's and
the teeth's `jawOpen` curves equal) and `mumble` (the teeth's `jawOpen` curve differs).
Read by tests/e2e/import_assets.sh and tests/e2e/retarget.sh; the numbers are arbitrary
but fixed (no randomness). DELTAS.npz: for each target name, its displacement of every
vertex (the meshes in node order, primitives in order: head, chin, teeth, eye; a repeated
name summed), and
eyeBlink_L_first, the eye's first eyeBlink_L alone (the control that keeps the name; the
repeat becomes eyeBlink_L.1): what one weight of that name must move."""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gltf_buffer import Buffer  # noqa: E402

buf = Buffer()
add = buf.add
def grid(nx, ny, w, h, z):
    P = [[x, y, z] for y in np.linspace(-h / 2, h / 2, ny) for x in np.linspace(-w / 2, w / 2, nx)]
    T = []
    for j in range(ny - 1):
        for i in range(nx - 1):
            a = j * nx + i
            T += [[a, a + 1, a + nx], [a + 1, a + nx + 1, a + nx]]
    return np.array(P, np.float32), np.array(T, np.uint16)
def prim(P, T, targets):
    return {"attributes": {"POSITION": add(P, "f", "VEC3", 5126)},
            "indices": add(T.ravel(), "H", "SCALAR", 5123),
            "targets": [{"POSITION": add(d.astype(np.float32), "f", "VEC3", 5126)}
                        for _, d in targets]}
def mesh(P, T, targets):
    return {"primitives": [prim(P, T, targets)], "extras": {"targetNames": [n for n, _ in targets]}}
def head_targets(P):
    low = np.clip(-P[:, 1] / 0.11, 0, 1)[:, None]
    return [("jawOpen", low * np.array([0, -0.02, 0.004])),
            ("mouthSmile_L", np.clip(P[:, 0] / 0.08, 0, 1)[:, None] * low * np.array([0.006, 0.004, 0]))]
# the head: two primitives (two materials, as exporters split a mesh), the same targets
hp, ht = grid(6, 7, 0.16, 0.22, 0.0)
hp2, ht2 = grid(6, 3, 0.16, 0.06, 0.0)
hp2 = hp2 + np.array([0, -0.145, 0.002], np.float32)   # the chin, below
jaw_h, smile = [d for _, d in head_targets(hp)]
jaw_h2, smile2 = [d for _, d in head_targets(hp2)]
tp, tt = grid(4, 2, 0.04, 0.01, 0.01)                 # lower teeth
jaw_t = np.tile([0, -0.018, 0.002], (len(tp), 1))
ep, et = grid(3, 3, 0.02, 0.02, 0.005)                # an eye lid
blink = np.clip(ep[:, 1] / 0.01 + 1, 0, 2)[:, None] * np.array([0, -0.004, 0])
blink2 = np.tile([0.0, 0.0, 0.002], (len(ep), 1))
meshes = [{"primitives": [prim(hp, ht, head_targets(hp)), prim(hp2, ht2, head_targets(hp2))],
           "extras": {"targetNames": ["jawOpen", "mouthSmile_L"]}},
          mesh(tp, tt, [("jawOpen", jaw_t)]),
          mesh(ep, et, [("eyeBlink_L", blink), ("eyeBlink_L", blink2)])]
kt = np.array([0, 0.5, 1.0, 2.0], np.float32)
jaw = np.array([0, 1, 0.3, 0.8], np.float32)
smi = np.array([0, 0.2, 1, 0], np.float32)
bl1 = np.array([1, 0, 0.5, 0], np.float32)
bl2 = np.array([0, 0.4, 0.1, 1], np.float32)
t_acc = add(kt, "f", "SCALAR", 5126)
def clip(name, teeth_jaw):
    out = [np.c_[jaw, smi].ravel(), teeth_jaw, np.c_[bl1, bl2].ravel()]
    return {"name": name,
            "channels": [{"sampler": k, "target": {"node": k + 1, "path": "weights"}} for k in range(3)],
            "samplers": [{"input": t_acc, "output": add(o.astype(np.float32), "f", "SCALAR", 5126),
                          "interpolation": "LINEAR"} for o in out]}
g = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}],
     "nodes": [{"name": "avatar", "children": [1, 2, 3], "translation": [0, 1.6, 0]},
               {"name": "head", "mesh": 0},
               {"name": "teeth", "mesh": 1, "translation": [0, -0.06, 0.012]},
               {"name": "eye_L", "mesh": 2, "translation": [0.03, 0.03, 0.02]}],
     "meshes": meshes,
     "animations": [clip("talk", jaw), clip("mumble", jaw[::-1].copy())],
     **buf.gltf_fields()}
json.dump(g, open(sys.argv[1], "w"))
if len(sys.argv) > 2:
    parts = [(hp, [("jawOpen", jaw_h), ("mouthSmile_L", smile)]),
             (hp2, [("jawOpen", jaw_h2), ("mouthSmile_L", smile2)]), (tp, [("jawOpen", jaw_t)]),
             (ep, [("eyeBlink_L", blink), ("eyeBlink_L", blink2)])]
    out = {n: np.concatenate([sum((d for m, d in tg if m == n), np.zeros((len(P), 3)))
                              for P, tg in parts])
           for n in sorted({n for _, tg in parts for n, _ in tg})}
    out["eyeBlink_L_first"] = np.concatenate([np.zeros((len(hp) + len(hp2) + len(tp), 3)), blink])
    np.savez(sys.argv[2], **out)

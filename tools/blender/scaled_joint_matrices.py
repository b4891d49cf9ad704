#!/usr/bin/python3
"""scaled_joint_matrices.py — our `joint_matrices` input from a golden_skin.py case.

    scaled_joint_matrices.py CASE.json MODEL.safetensors OURS_BIND.npy OUT.npy

The case holds, per frame and Blender bone, the map G from the mesh's local coordinates to
deformed world positions, and those local coordinates in our vertex order. Our bind-space
positions (OURS_BIND.npy, `deform eval --bind`) map to them by one affine M0 (fitted here by
least squares; the fit must be exact to 1e-6 of the diagonal). Joint j's skin matrix is then
G_j M0, so its world matrix is G_j M0 inverse(inverse_bind_j). Joints without a Blender bone (an
importer's extra roots) keep their bind frame. Written: float32 [F,J,12].
"""
import json
import struct
import sys

import numpy as np

case_path, model_path, bind_path, out_path = sys.argv[1:5]
case = json.load(open(case_path))
base = case_path[:-len(".json")]
G = np.load(base + "_skin.npy").astype(np.float64)
local = np.load(base + "_local.npy").astype(np.float64)
raw = open(model_path, "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + hl])
a, b = hdr["inverse_bind_matrices"]["data_offsets"]
ibm = np.frombuffer(raw[8 + hl + a:8 + hl + b], dtype="<f4").reshape(-1, 4, 4).astype(np.float64)
names = json.loads(hdr["__metadata__"]["joint_names"])
bind = np.load(bind_path).reshape(-1, 3).astype(np.float64)
diag = float(np.linalg.norm(bind.max(0) - bind.min(0)))
X = np.hstack([bind, np.ones((len(bind), 1))])
M, *_ = np.linalg.lstsq(X, local, rcond=None)
resid = np.abs(X @ M - local).max() / diag
if resid > 1e-6:
    sys.exit("scaled_joint_matrices: our bind mesh is not an affine image of Blender's "
             "(residual %.3g of the diagonal)" % resid)
M0 = np.eye(4)
M0[:3, :] = M.T
F = G.shape[0]
bones = case["bones"]
jm = np.zeros((F, len(names), 12), dtype=np.float32)
for j, n in enumerate(names):
    B = np.linalg.inv(ibm[j])
    for k in range(F):
        if n in bones:
            S = np.eye(4)
            S[:3, :] = G[k, bones.index(n)].reshape(3, 4)
            jm[k, j] = (S @ M0 @ B)[:3, :].reshape(12)
        else:
            jm[k, j] = B[:3, :].reshape(12)
np.save(out_path, jm)

#!/usr/bin/python3
"""golden_skin.py — a Blender bake with scaled bones (bake.py --pose-scale --skin-matrices) as a
golden case in *our* vertex order.

    golden_skin.py PLAIN_BAKE SCALED_BAKE OURS_FRAME0.npy OUT_DIR --asset REL --clip CLIP
                   --prefix NAME [--skinning dqs|lbs]

Vertices are matched by nearest neighbour between our evaluation of the clip's first baked
frame (OURS_FRAME0.npy, `deform eval --times t0`) and the plain bake's (no scaled bones) first
frame; every match must be closer than 1e-6 x bbox diagonal. Written to OUT_DIR:
  NAME__CLIP__<skinning>_scaled.npy        float32 [F,N,3] Blender's positions, our order
  NAME__CLIP__<skinning>_scaled_skin.npy   float32 [F,J,12] per bone: mesh-local -> world map
  NAME__CLIP__<skinning>_scaled_local.npy  float32 [N,3] the mesh's local coordinates, our order
  NAME__CLIP__<skinning>_scaled.json       asset, clip, times, bones, pose_scale, tolerance_rel
tests/e2e/core_golden.sh feeds the bone maps to `deform eval --input joint_matrices=...` (see
there for how they become our joint matrices) and compares with the positions.
Only numpy and the standard library: runs with Debian's /usr/bin/python3.
"""
import argparse
import json
import os

import numpy as np


def nearest(src, dst):
    """index into dst of the nearest point for every src point, and the distances"""
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    c = dst.mean(0)
    src, dst = src - c, dst - c
    idx = np.empty(len(src), dtype=np.int64)
    d2 = (dst * dst).sum(1)
    for s in range(0, len(src), 512):
        a = src[s:s + 512]
        idx[s:s + 512] = ((a * a).sum(1)[:, None] - 2 * a @ dst.T + d2[None, :]).argmin(1)
    return idx, np.linalg.norm(src - dst[idx], axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plain")
    ap.add_argument("scaled")
    ap.add_argument("ours_frame0")
    ap.add_argument("out")
    ap.add_argument("--asset", required=True)
    ap.add_argument("--clip", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--skinning", default="dqs")
    a = ap.parse_args()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in a.clip)
    plain0 = np.load(os.path.join(a.plain, safe + ".npy"))[0]
    ours0 = np.load(a.ours_frame0).reshape(-1, 3)
    diag = float(np.linalg.norm(ours0.max(0) - ours0.min(0)))
    idx, dist = nearest(ours0, plain0)
    if dist.max() > 1e-6 * diag:
        raise SystemExit("golden_skin: vertex matching failed (max distance %.3g of the diagonal)"
                         % (dist.max() / diag))
    meta = json.load(open(os.path.join(a.scaled, safe + ".json")))
    pos = np.load(os.path.join(a.scaled, safe + ".npy"))[:, idx]
    skin = np.load(os.path.join(a.scaled, safe + "_skin.npy"))
    local = np.load(os.path.join(a.scaled, "rest_local.npy"))[idx]
    base = os.path.join(a.out, "%s__%s__%s_scaled" % (a.prefix, safe, a.skinning))
    np.save(base + ".npy", pos.astype(np.float32))
    np.save(base + "_skin.npy", skin.astype(np.float32))
    np.save(base + "_local.npy", local.astype(np.float32))
    with open(base + ".json", "w") as fh:
        json.dump({"asset": a.asset, "clip": a.clip, "times": meta["times"],
                   "blender_frames": meta["frames"], "skinning": a.skinning,
                   "pose_scale": meta["pose_scale"], "bones": meta["bones"],
                   "n_vertices": int(pos.shape[1]), "match_max_rel": float(dist.max() / diag),
                   "tolerance_rel": 1e-5}, fh, indent=1)
    print("golden_skin: %s: %d frames, %d vertices, %d bones" % (base, pos.shape[0], pos.shape[1],
                                                              skin.shape[1]))


main()

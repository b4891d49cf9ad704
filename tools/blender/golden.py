#!/usr/bin/python3
"""golden.py — turn a Blender bake (bake.py) into golden frames in *our* vertex order.

    golden.py BAKE_DIR OURS_REST.npy OURS_FRAME0_DIR OUT_DIR --asset REL_PATH [--frames K]
              [--prefix NAME]

Blender's importers order (and merge) vertices differently from assimp, so each of our
vertices is matched to a Blender vertex by nearest neighbour:
  1. on the bind pose: OURS_REST.npy (`deform eval MODEL --bind`) against BAKE_DIR/rest.npy;
     accepted when every match is closer than 1e-6 x bbox diagonal;
  2. otherwise on the first baked frame of the first clip: OURS_FRAME0_DIR/<clip>.npy (our
     `deform eval --times <that frame's time>` output) against Blender's frame. The matching
     distance of that frame is then part of what is tested, so it is recorded
     ("match_max_rel"); every other frame is an independent comparison.
A --dqs bake (Blender's "Preserve Volume") reuses the matching of the plain bake (--load-perm)
and is written as <prefix>__<clip>__dqs with "skinning": "dqs".
Then K frames per clip (evenly spaced among the baked key frames, first and last included) are
written as OUT_DIR/<prefix>__<clip>.npy (float32 [K,N,3]) with a JSON beside it:
  {"asset", "clip", "times" (s since the clip's first key), "blender_frames", "fps",
   "match", "match_max_rel", "n_vertices", "blender_vertices", "tolerance_rel"}.
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
    c = dst.mean(0)  # centre first: |a|^2 - 2ab + |b|^2 cancels badly far from the origin
    src, dst = src - c, dst - c
    idx = np.empty(len(src), dtype=np.int64)
    d2 = (dst * dst).sum(1)
    for s in range(0, len(src), 512):
        a = src[s:s + 512]
        dd = (a * a).sum(1)[:, None] - 2 * a @ dst.T + d2[None, :]
        idx[s:s + 512] = dd.argmin(1)
    dist = np.linalg.norm(src - dst[idx], axis=1)  # exact distances of the chosen pairs
    return idx, dist


def diag(p):
    return float(np.linalg.norm(p.max(0) - p.min(0)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bake")
    ap.add_argument("ours_rest")
    ap.add_argument("ours_frame0_dir")
    ap.add_argument("out")
    ap.add_argument("--asset", required=True)
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--prefix", default=None)
    ap.add_argument("--skinning", default="lbs",
                    help="what the bake used (bake.py --dqs: dqs); stored in the JSON")
    ap.add_argument("--save-perm", help="write the vertex matching here (.npy)")
    ap.add_argument("--load-perm", help="reuse a matching (a --dqs bake of the same asset)")
    ap.add_argument("--clip-names", default="",
                    help="our clip names (comma separated); Blender's FBX importer calls an "
                         "action OBJECT|TAKE where assimp says TAKE")
    a = ap.parse_args()
    idx = json.load(open(os.path.join(a.bake, "index.json")))
    prefix = a.prefix or os.path.splitext(os.path.basename(a.asset))[0]
    os.makedirs(a.out, exist_ok=True)
    ours_rest = np.load(a.ours_rest)
    ours_rest = ours_rest.reshape(-1, 3)
    brest = np.load(os.path.join(a.bake, "rest.npy"))
    D = diag(ours_rest)
    perm, dist = nearest(ours_rest, brest)
    method = "rest"
    mrel = float(dist.max() / D)
    if a.load_perm:
        perm = np.load(a.load_perm)  # matched on the plain bake; its distance is recorded there
        method = "reused:" + os.path.basename(a.load_perm)
        mrel = None
    elif mrel > 1e-6:
        c0 = idx["clips"][0]["file"]
        b0 = np.load(os.path.join(a.bake, c0 + ".npy"))[0]
        o0 = np.load(os.path.join(a.ours_frame0_dir, c0 + ".npy")).reshape(-1, 3)
        perm, dist = nearest(o0, b0)
        method = "frame0:" + idx["clips"][0]["clip"]
        mrel = float(dist.max() / D)
    if len(perm) == len(brest) and not a.load_perm:
        # Coincident vertices (seams) can carry different skins: when Blender kept our order,
        # prefer the vertex with the same index among equally near candidates.
        ref = ours_rest if method == "rest" else o0
        bref = brest if method == "rest" else b0
        same = np.linalg.norm(ref.astype(np.float64) - bref, axis=1)
        keep = same <= np.maximum(dist, 1e-6 * D)
        perm[keep] = np.arange(len(perm))[keep]
        dist[keep] = same[keep]
        mrel = float(dist.max() / D)
        print("%s: %d of %d vertices keep their index" % (prefix, int(keep.sum()), len(perm)))
    if a.save_perm:
        np.save(a.save_perm, perm)
    print("%s: matched %d of our vertices to %d Blender vertices on %s%s"
          % (prefix, len(perm), len(brest), method,
             ", max distance %.3g x diag" % mrel if mrel is not None else ""))
    for c in idx["clips"]:
        meta = json.load(open(os.path.join(a.bake, c["file"] + ".json")))
        pos = np.load(os.path.join(a.bake, c["file"] + ".npy"))
        n = pos.shape[0]
        sel = np.unique(np.round(np.linspace(0, n - 1, min(a.frames, n))).astype(int))
        g = pos[sel][:, perm, :].astype(np.float32)
        ours = meta["clip"]
        for cn in [x for x in a.clip_names.split(",") if x]:
            if cn == meta["clip"] or meta["clip"].endswith("|" + cn):
                ours = cn
                break
        name = "%s__%s" % (prefix, c["file"]) + ("__dqs" if a.skinning == "dqs" else "")
        np.save(os.path.join(a.out, name + ".npy"), g)
        out = {"asset": a.asset, "clip": ours, "blender_clip": meta["clip"],
               "times": [meta["times"][i] for i in sel],
               "blender_frames": [meta["frames"][i] for i in sel], "fps": meta["fps"],
               "match": method, "match_max_rel": mrel, "skinning": a.skinning, "n_vertices": int(len(perm)),
               "blender_vertices": int(pos.shape[1]), "tolerance_rel": 1e-4,
               "blender_import": meta.get("import")}
        with open(os.path.join(a.out, name + ".json"), "w") as fh:
            json.dump(out, fh, indent=1)
        print("  %s: %d frames -> %s.npy" % (meta["clip"], len(sel), name))


main()

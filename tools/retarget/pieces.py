#!/usr/bin/python3
"""pieces.py — a face target with separate pieces, as an avatar's mesh has them.

    tools/retarget/pieces.py --target T2.safetensors --landmarks T2_LANDMARKS.txt
                             --out T2P.safetensors [--segments 16]

DESIGN
An avatar's head mesh carries pieces apart from its skin: eyeballs behind
the lids, rows of teeth behind the lips. `deform retarget transfer` gives a
piece the motion of the skin nearest to it unless `--pieces` / `--piece`
say otherwise; this builds a target to show and test that. It appends to
the target's positions and triangles (nothing else is kept: a transfer reads
only those) two closed pieces placed from the target's 68 landmarks (the
iBUG order of tests/data/ict: 36..41 the right eye's lids, 65..67 the inner
lower lip), each a UV sphere of --segments segments around and
--segments * 5/8 rings:
  piece 1  an eyeball: radius half the eye's corner-to-corner width, its
           front at the lids' mean position (so the lids' blink is the skin
           nearest to it);
  piece 2  a row of lower teeth: the sphere flattened to 2 x 0.4 x 0.5 of
           the mouth's half width, behind the inner lower lip.
Pieces are numbered by their first vertex, so the target's own mesh (one
piece) stays piece 0 and these are 1 and 2. Prints their vertex counts.
Needs Debian's python3 and python3-numpy.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "garment"))
import stfile  # noqa: E402


def uv_sphere(centre, radius, nu):
    """A closed UV sphere: nu segments around, nv = nu * 5 / 8 rings."""
    nv = max(3, nu * 5 // 8)
    vs = [[0.0, 0.0, 1.0]]
    for i in range(1, nv):
        th = np.pi * i / nv
        for j in range(nu):
            ph = 2 * np.pi * j / nu
            vs.append([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)])
    vs.append([0.0, 0.0, -1.0])
    last = len(vs) - 1
    fs = [[0, 1 + j, 1 + (j + 1) % nu] for j in range(nu)]
    for i in range(nv - 2):
        for j in range(nu):
            a, b = 1 + i * nu + j, 1 + i * nu + (j + 1) % nu
            fs += [[a, a + nu, b], [b, a + nu, b + nu]]
    base = 1 + (nv - 2) * nu
    fs += [[last, base + (j + 1) % nu, base + j] for j in range(nu)]
    return np.asarray(vs) * radius + centre, np.asarray(fs, np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--landmarks", required=True, help="68 target vertex indices (iBUG order)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--segments", type=int, default=16)
    a = ap.parse_args()
    if a.segments < 4:
        sys.exit("pieces.py: --segments must be at least 4")
    t, _ = stfile.read(a.target)
    P = np.asarray(t["positions"], np.float64)
    T = np.asarray(t["triangles"], np.int64)
    lm = np.loadtxt(a.landmarks, dtype=np.int64).reshape(-1)
    if len(lm) != 68:
        sys.exit("pieces.py: %s has %d landmarks (68 in iBUG order needed)" % (a.landmarks, len(lm)))
    eye = P[lm[36:42]]
    r_eye = 0.5 * np.linalg.norm(eye[3] - eye[0])
    front = eye.mean(0)
    ve, fe = uv_sphere(front - np.array([0.0, 0.0, r_eye]), r_eye, a.segments)
    lip = P[lm[65:68]].mean(0)
    half = 0.5 * np.linalg.norm(P[lm[54]] - P[lm[48]])
    vt, ft = uv_sphere(np.zeros(3), 1.0, a.segments)
    vt = vt * (half * np.array([1.0, 0.2, 0.25])) + lip - np.array([0.0, 0.3 * half, 0.6 * half])
    n0, n1 = len(P), len(P) + len(ve)
    out = {
        "positions": np.concatenate([P, ve, vt]).astype(np.float32),
        "triangles": np.concatenate([T, fe + n0, ft + n1]).astype(np.int32),
    }
    stfile.write(a.out, out)
    print("pieces: %s: the target's %d vertices (piece 0), an eyeball of %d (piece 1), lower "
          "teeth of %d (piece 2)" % (a.out, n0, len(ve), len(vt)))


if __name__ == "__main__":
    main()

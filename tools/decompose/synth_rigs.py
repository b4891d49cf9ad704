"""synth_rigs.py — random articulated characters as extra training data for the decomposition's
initialisation network (docs/decompose.md, "Network initialisation").

    python3 tools/decompose/synth_rigs.py --out-dir DIR [--count 200] [--seed 1] [--frames 40]

Each character: a random skeleton (a root bone and 2..6 limbs of 1..4 bones leaving it in random
directions, random lengths), a mesh of tubes around the bones (8-sided rings, radius 4..15 % of
the bone's length, joined at the joints), linear blend skinning weights that blend over the
joints (a smooth step along each bone near its ends) and one clip: every joint turns about its
own random axis by a sum of two sinusoids (random amplitudes up to 70 degrees, frequencies 1..3
cycles per clip, phases), the root also translates and turns. Writes DIR/synth_K.safetensors in
the raw sequence format of `deform decompose` with `bones` (each vertex's strongest bone) and
metadata `character` = synth_K. Deterministic for a seed. Needs numpy.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "garment"))
import stfile  # noqa: E402


def save(path, tensors, meta):
    """The safetensors writer of the tools (tools/garment/stfile.py)."""
    stfile.write(path, tensors, meta)


def rot(axis, ang):
    axis = axis / np.linalg.norm(axis)
    x, y, z = axis
    c, s = np.cos(ang), np.sin(ang)
    t = 1 - c
    return np.array([[t * x * x + c, t * x * y - s * z, t * x * z + s * y],
                     [t * x * y + s * z, t * y * y + c, t * y * z - s * x],
                     [t * x * z - s * y, t * y * z + s * x, t * z * z + c]])


def unit(v):
    return v / np.linalg.norm(v)


def frame_of(d):
    """Two unit vectors perpendicular to d."""
    a = np.array([1.0, 0, 0]) if abs(d[0]) < 0.9 else np.array([0, 1.0, 0])
    u = unit(np.cross(d, a))
    return u, np.cross(d, u)


def character(rng, F):
    # bones: (parent, head, tail); bone 0 is the root (a torso)
    bones = [(-1, np.zeros(3), np.array([0, rng.uniform(0.6, 1.4), 0]))]
    for _ in range(rng.integers(2, 7)):
        p = 0
        start = bones[0][1] + rng.uniform(0, 1) * (bones[0][2] - bones[0][1])
        d = unit(rng.normal(size=3))
        for _ in range(rng.integers(1, 5)):
            L = rng.uniform(0.25, 0.8)
            bones.append((p, start, start + L * d))
            p = len(bones) - 1
            start = bones[p][2]
            d = unit(d + rng.normal(scale=0.6, size=3))
    J = len(bones)
    # mesh: a tube per bone
    pos, tri, wts = [], [], []
    for j, (par, h, t) in enumerate(bones):
        d = t - h
        L = np.linalg.norm(d)
        u, v = frame_of(d / L)
        r = rng.uniform(0.04, 0.15) * L + 0.02
        rings = max(4, int(L / 0.05))
        base = len(pos)
        for a in range(rings):
            s = a / (rings - 1)
            for q in range(8):
                th = 2 * np.pi * q / 8
                pos.append(h + s * d + r * (np.cos(th) * u + np.sin(th) * v))
                # blend with the parent near the head (smooth step over the first 25 %)
                w = np.zeros(J)
                b = 1.0 if par < 0 else min(1.0, s / 0.25) ** 2 * (3 - 2 * min(1.0, s / 0.25))
                w[j] = 0.5 + 0.5 * b if par >= 0 else 1.0
                if par >= 0:
                    w[par] = 1 - w[j]
                wts.append(w)
        for a in range(rings - 1):
            for q in range(8):
                i0, i1 = base + a * 8 + q, base + a * 8 + (q + 1) % 8
                tri += [[i0, i1, i0 + 8], [i1, i1 + 8, i0 + 8]]
    pos, wts = np.array(pos), np.array(wts)
    # animation: local rotations about each bone's head, composed down the tree
    axes = [unit(rng.normal(size=3)) for _ in range(J)]
    amp = rng.uniform(0.1, 1.2, size=(J, 2))
    freq = rng.integers(1, 4, size=(J, 2))
    ph = rng.uniform(0, 2 * np.pi, size=(J, 2))
    root_t = rng.normal(scale=0.3, size=3)
    frames = np.empty((F, len(pos), 3))
    for p in range(F):
        x = p / F
        M = []
        for j, (par, h, t) in enumerate(bones):
            ang = sum(amp[j, k] * np.sin(2 * np.pi * freq[j, k] * x + ph[j, k]) for k in range(2))
            R = rot(axes[j], ang)
            A = np.eye(4)
            A[:3, :3] = R
            A[:3, 3] = h - R @ h  # about the head
            if par < 0:
                A[:3, 3] += root_t * np.sin(2 * np.pi * x)
                M.append(A)
            else:
                M.append(M[par] @ A)
        M = np.array(M)
        hom = np.concatenate([pos, np.ones((len(pos), 1))], 1)
        per = np.einsum("jab,vb->vja", M[:, :3], hom)
        frames[p] = np.einsum("vj,vja->va", wts, per)
    return frames.astype(np.float32), np.array(tri, np.int32), wts.argmax(1).astype(np.int32), J


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--frames", type=int, default=40)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    for k in range(a.count):
        fr, tri, lab, J = character(rng, a.frames)
        save("%s/synth_%03d.safetensors" % (a.out_dir, k),
             {"frames": fr, "triangles": tri, "times": (np.arange(a.frames) / 24.0).astype(np.float32),
              "bones": lab}, {"character": "synth_%03d" % k, "clip": "random", "producer": "synth_rigs.py"})
    print("synth_rigs.py: %d characters in %s" % (a.count, a.out_dir))


if __name__ == "__main__":
    main()

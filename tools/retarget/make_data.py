#!/usr/bin/python3
"""make_data.py — the retargeting data: rigs, targets and performances.

DESIGN
Two stages, both deterministic (fixed seeds, numpy's PCG64):

  reduce --ict DIR --out tests/data/ict
      Reads the ICT face model's light subset (neutral.npy, expressions.npy,
      identities.npy, quads.npy, expression_names.txt, landmarks68.txt,
      LICENSE) and writes the reduced copy the repository commits:
        source_neutral.npy  f32 [N,3]     the generic ICT neutral (the actor)
        source_deltas.npy   f16 [55,N,3]  the 55 expression deltas
        source_names.txt                  their names
        quads.npy           i32 [Q,4]     polygons
        landmarks68.txt                   68 landmark vertex indices
        t1_neutral.npy      f32 [N,3]     target T1: another identity
        t1_deltas.npy       f16 [25,N,3]  T1's own 25 artist-style shapes
        t1_names.txt
        t1_style.npy        f32 [55,2]    T1's style of each source shape
                                          (gain s, asymmetry a), the truth
        clone_source.npy    f32 [P,55]    P corresponding poses: source
        clone_target.npy    f32 [P,25]    ... and T1 weights
        t2_neutral.npy      f32 [N2,3]    target T2: a third identity remeshed
        t2_triangles.npy    i32 [T2,3]    (Blender's Decimate, collapse, 0.45;
                                          --blender BIN), each vertex moved
                                          onto the original surface
        t2_bary.npy         f32 [N2,4]    its original triangle (index) and
                                          barycentric coordinates: the truth
        t2_landmarks68.txt                the 68 landmarks on T2 (nearest T2
                                          vertex, each used once)
        LICENSE                           the ICT licence (MIT), unchanged
      float16 deltas keep 1e-3 cm (0.01 mm) of the float32 originals.

  build --data tests/data/ict --out DIR [--frames F]
      From the reduced copy: the rigs as `rigged` model files
      (source.safetensors, t1.safetensors), the performances
      (perf_{train,test}_weights.npy [F,55], perf_*_head.npy [F,12] the
      rigid head motion as row-major 3x4, perf_*_markers_<n>mm.npy
      [F,68,3] the landmark tracks with marker noise n = 0, 0.5, 1, 2 mm)
      and face_height.txt (cm: the vertical extent of T1's 68 landmarks,
      chin to brows, the denominator of "% of face height"). Another actor:
      perf_test_actor_markers_<n>mm.npy (n = 0, 1), the held-out performance
      (same weights and head motion) on another face (the source neutral +
      ACTOR_IDENTITY x T1's identity offset), and actor_neutral_markers_<n>mm
      .npy [10,68,3], ten neutral frames of that actor (deform retarget
      build --marker-rest). An expressive actor (the same face, expressions
      that move the markers otherwise: expressive_deltas):
      actorx_rom_markers_<n>mm.npy (n = 0, 1) [2640,68,3], a range of motion
      (each control raised to full and released over 48 frames, with head
      motion; its weights actorx_rom_weights.npy [2640,55]: deform retarget
      build --adapt [--adapt-weights]) and perf_test_actorx_markers_<n>mm.npy,
      the held-out performance.

  keyshapes --data tests/data/ict --weights W.npy --frames F.txt --out O
      T1 with one shape per key frame (Chuang & Bregler's target basis, made
      by an artist): T1's own rig posed to match the frame's truth (bounded
      fit on the face area), as a `rigged` file with shapes named kf<frame>.

The truth of T1. A source expression delta d_j becomes, on T1, the styled
delta d'_j(v) = d_j(v) * s_j * (1 + a_j * tanh(x_v / 2.5)) (x_v: the source
neutral's x; a != 0 makes a shape asymmetric). T1's rig shapes are fixed
combinations of the styled deltas (left/right merged, combined shapes, one
exaggerated asymmetric "smirk"), so T1's 25 shapes correspond one to one to
none of the 55 source shapes except the 8 kept names. The truth for source
weights w is T1 neutral + sum_j w_j d'_j, which T1's rig can only
approximate. make_t1 makes a T1 from identity coefficients and a rig
recipe: "a" (the committed T1) or "b" (another artist's: other kept names,
merges, combinations and style shapes; tools/retarget/evaluate.py
--t1-rig b). The corresponding poses of the cloning method are what an
artist would make: for each source pose (every shape alone, then random
sparse combinations) the T1 weights in [0,1] whose mesh best fits the
truth on the face area (bounded least squares, FISTA to convergence).

Units: the ICT model's centimetres; +Y up, face looking down +Z.
Needs Debian's python3 and python3-numpy only.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "garment"))
import stfile  # noqa: E402  (the safetensors writer the tools share)

FACE_VERTS = 9409  # ICT: vertices 0..9408 are the face area
NOISE_MM = (0, 0.5, 1, 2)
# the expressive actor's range of motion: frames a control (0.8 s at 60 Hz)
ROM_FRAMES = 48

# T1: identity coefficients (on the first ICT identity modes)
T1_IDENTITY = [1.8, -1.2, 1.0, 0.6, -0.8, 0.5, -0.4, 0.3]

# the other actor of the held-out performance: this multiple of T1's identity
# offset from the source neutral (another face of the ICT identity space)
ACTOR_IDENTITY = -0.8

# T2: a third identity, remeshed by Blender's Decimate (collapse) to this
# fraction of the triangles
T2_IDENTITY = [-1.6, 1.3, -1.1, 0.8, 0.7, -0.6, 0.5, -0.4]
T2_RATIO = 0.45

# T1's style of each source shape: name prefix -> (gain, asymmetry)
T1_STYLE = [
    ("mouthSmile_", (1.3, 0.35)),  # asymmetric, exaggerated smile
    ("mouth", (1.2, 0.0)),         # exaggerated mouth
    ("jaw", (1.2, 0.0)),
    ("brow", (0.8, 0.0)),          # subdued brows
]

# T1's rig: target name -> {source name: coefficient} on the styled deltas
T1_KEPT = ["jawOpen", "eyeBlink_L", "eyeBlink_R", "mouthPucker",
           "mouthFunnel", "jawLeft", "jawRight", "mouthClose"]
T1_MERGED = ["browDown", "browInnerUp", "browOuterUp", "cheekPuff",
             "cheekSquint", "eyeSquint", "eyeWide", "mouthFrown",
             "mouthStretch", "mouthLowerDown", "mouthUpperUp", "noseSneer"]
T1_COMBOS = {
    "smile": {"mouthSmile_L": 1, "mouthSmile_R": 1, "cheekRaiser_L": 0.5,
              "cheekRaiser_R": 0.5},
    "surprise": {"browInnerUp_L": 1, "browInnerUp_R": 1, "browOuterUp_L": 1,
                 "browOuterUp_R": 1, "eyeWide_L": 1, "eyeWide_R": 1,
                 "jawOpen": 0.35},
    "lookLeft": {"eyeLookOut_L": 1, "eyeLookIn_R": 1},
    "lookRight": {"eyeLookIn_L": 1, "eyeLookOut_R": 1},
    # the deliberately exaggerated, asymmetric style shape
    "smirk_L": {"mouthSmile_L": 1.4, "cheekRaiser_L": 0.84,
                "mouthDimple_L": 0.42, "noseSneer_L": 0.28},
}

# Another artist's T1 (recipe "b": tools/retarget/evaluate.py --t1-rig b),
# for checking the methods on a rig they were not built on: other kept
# names, other merges, other combinations (some source controls have no
# counterpart at all: eye look in/out, dimples, stretch), an exaggerated
# asymmetric frown and snarl, subdued cheeks, a weaker jaw.
T1B_STYLE = [
    ("mouthFrown_", (1.4, -0.4)),  # asymmetric, exaggerated frown
    ("cheek", (0.7, 0.0)),         # subdued cheeks
    ("eye", (1.1, 0.0)),
    ("jaw", (0.9, 0.0)),
]
T1B_KEPT = ["jawOpen", "jawForward", "mouthClose", "mouthFunnel",
            "mouthPucker", "mouthRollLower", "mouthRollUpper",
            "mouthShrugUpper"]
T1B_MERGED = ["eyeBlink", "eyeSquint", "eyeWide", "browDown", "browOuterUp",
              "mouthSmile", "mouthPress", "mouthLowerDown", "mouthUpperUp"]
T1B_COMBOS = {
    "browRaise": {"browInnerUp_L": 1, "browInnerUp_R": 1,
                  "browOuterUp_L": 0.5, "browOuterUp_R": 0.5},
    "mouthSide_L": {"mouthLeft": 1, "jawLeft": 0.3},
    "mouthSide_R": {"mouthRight": 1, "jawRight": 0.3},
    "disgust": {"noseSneer_L": 1, "noseSneer_R": 1, "mouthUpperUp_L": 0.6,
                "mouthUpperUp_R": 0.6, "cheekSquint_L": 0.3,
                "cheekSquint_R": 0.3},
    "puff": {"cheekPuff_L": 1, "cheekPuff_R": 1, "mouthClose": 0.3},
    "sad": {"mouthFrown_L": 1, "mouthFrown_R": 1, "browInnerUp_L": 0.6,
            "browInnerUp_R": 0.6, "mouthShrugLower": 0.5},
    "lookUp": {"eyeLookUp_L": 1, "eyeLookUp_R": 1},
    "lookDown": {"eyeLookDown_L": 1, "eyeLookDown_R": 1},
    # the exaggerated asymmetric style shape
    "snarl_R": {"noseSneer_R": 1.5, "mouthUpperUp_R": 1.2,
                "mouthStretch_R": 0.6, "cheekSquint_R": 0.5},
}
T1_RECIPES = {"a": (T1_STYLE, T1_KEPT, T1_MERGED, T1_COMBOS),
              "b": (T1B_STYLE, T1B_KEPT, T1B_MERGED, T1B_COMBOS)}


def log(*a):
    print("make_data:", *a, file=sys.stderr)


def read_names(path):
    with open(path) as f:
        return f.read().split()


def t1_rig(names, recipe="a"):
    """T1's shape names and its combination matrix C [n,55]."""
    _, kept, merged, combos = T1_RECIPES[recipe]
    idx = {n: i for i, n in enumerate(names)}
    rows, tn = [], []
    for n in kept:
        c = np.zeros(len(names))
        c[idx[n]] = 1
        rows.append(c)
        tn.append(n)
    for n in merged:
        c = np.zeros(len(names))
        c[idx[n + "_L"]] = 1
        c[idx[n + "_R"]] = 1
        rows.append(c)
        tn.append(n)
    for n, comb in combos.items():
        c = np.zeros(len(names))
        for s, k in comb.items():
            c[idx[s]] = k
        rows.append(c)
        tn.append(n)
    return tn, np.array(rows)


def t1_style(names, recipe="a"):
    st = np.zeros((len(names), 2), np.float32)
    for i, n in enumerate(names):
        st[i] = (1.0, 0.0)
        for pre, (s, a) in T1_RECIPES[recipe][0]:
            if n.startswith(pre):
                st[i] = (s, a)
                break
    return st


def styled_deltas(deltas, style, x):
    """d'_j(v) = d_j(v) * s_j * (1 + a_j tanh(x_v / 2.5)); deltas [M,N,3]."""
    g = style[:, :1] * (1.0 + style[:, 1:2] * np.tanh(x[None, :] / 2.5))
    return deltas * g[:, :, None]


def expressive_deltas(deltas, neutral, rng):
    """Another performer's expressions [M,N,3]: d_j(v) * g_j * (1 + a_j xn_v)
    * (1 + 0.2 sin(2 pi (k_j . (xn_v, yn_v)) + ph_j)), with xn, yn the face's
    coordinates scaled to [-1, 1], gains g_j in 0.75..1.35, asymmetries a_j
    in -0.2..0.2, one wave of 0.5..1.5 cycles across the face a control."""
    m = len(deltas)
    lo, hi = neutral[:, :2].min(0), neutral[:, :2].max(0)
    xy = 2 * (neutral[:, :2] - lo) / (hi - lo) - 1
    g = rng.uniform(0.75, 1.35, m)
    a = rng.uniform(-0.2, 0.2, m)
    ang = rng.uniform(0, 2 * np.pi, m)
    k = rng.uniform(0.5, 1.5, m)[:, None] * np.stack([np.cos(ang), np.sin(ang)], 1)
    ph = rng.uniform(0, 2 * np.pi, m)
    field = (g[:, None] * (1 + a[:, None] * xy[None, :, 0]) *
             (1 + 0.2 * np.sin(2 * np.pi * (k @ xy.T) + ph[:, None])))
    return (deltas * field[:, :, None]).astype(np.float32)


def bounded_ls(G, b, lo=0.0, hi=1.0, iters=4000):
    """min 1/2 w'Gw - b'w, lo <= w <= hi, by FISTA (G small and SPD)."""
    L = np.linalg.eigvalsh(G).max()
    w = np.zeros(len(b))
    y, t = w.copy(), 1.0
    for _ in range(iters):
        wn = np.clip(y - (G @ y - b) / L, lo, hi)
        tn = (1 + np.sqrt(1 + 4 * t * t)) / 2
        y = wn + (t - 1) / tn * (wn - w)
        w, t = wn, tn
    return w


def corresponding_poses(names, src_d, t1_d, style, x, rng, extra=25):
    """P source poses (each shape alone, then sparse combinations) and the T1
    weights that best fit T1's truth of each on the face area."""
    m = len(names)
    V = [np.eye(m)[i] for i in range(m)]
    for _ in range(extra):
        v = np.zeros(m)
        k = rng.choice(m, size=rng.integers(2, 4), replace=False)
        v[k] = rng.uniform(0.4, 1.0, size=len(k))
        V.append(v)
    V = np.array(V)
    sd = styled_deltas(src_d[:, :FACE_VERTS], style, x[:FACE_VERTS])
    A = t1_d[:, :FACE_VERTS].reshape(len(t1_d), -1).astype(np.float64).T
    G = A.T @ A
    W = []
    for v in V:
        truth = np.tensordot(v, sd, axes=1).reshape(-1)
        W.append(bounded_ls(G, A.T @ truth))
    return V.astype(np.float32), np.array(W, np.float32)


def make_t1(neutral, ident, src_d, names, out, identity, recipe, seed):
    """T1 (t1_*.npy, clone_*.npy into out): the identity coefficients on the
    ICT identity modes, the rig and style of the recipe, corresponding poses
    drawn with the seed. Returns the source poses."""
    o = lambda n: os.path.join(out, n)
    a = np.zeros(ident.shape[0], np.float32)
    a[:len(identity)] = identity
    t1_neutral = neutral + np.tensordot(a, ident, axes=1)
    np.save(o("t1_neutral.npy"), t1_neutral.astype(np.float32))
    tn, C = t1_rig(names, recipe)
    style = t1_style(names, recipe)
    x = neutral[:, 0]
    sd = styled_deltas(src_d, style, x)
    t1_d = np.tensordot(C, sd, axes=1).astype(np.float16)
    np.save(o("t1_deltas.npy"), t1_d)
    with open(o("t1_names.txt"), "w") as f:
        f.write("\n".join(tn) + "\n")
    np.save(o("t1_style.npy"), style)
    rng = np.random.default_rng(seed)
    V, W = corresponding_poses(names, src_d, t1_d.astype(np.float32), style,
                               x, rng)
    np.save(o("clone_source.npy"), V)
    np.save(o("clone_target.npy"), W)
    return V


def cmd_reduce(args):
    d = args.ict
    neutral = np.load(os.path.join(d, "neutral.npy")).astype(np.float32)
    expr = np.load(os.path.join(d, "expressions.npy")).astype(np.float32)
    ident = np.load(os.path.join(d, "identities.npy")).astype(np.float32)
    quads = np.load(os.path.join(d, "quads.npy")).astype(np.int32)
    names = read_names(os.path.join(d, "expression_names.txt"))
    lm = read_names(os.path.join(d, "landmarks68.txt"))
    if expr.shape[0] != len(names) or len(lm) != 68:
        sys.exit("make_data: unexpected ICT data (%d names, %d landmarks)" %
                 (len(names), len(lm)))
    os.makedirs(args.out, exist_ok=True)
    o = lambda n: os.path.join(args.out, n)
    # the source: the generic neutral and its expressions
    np.save(o("source_neutral.npy"), neutral)
    src16 = expr.astype(np.float16)
    np.save(o("source_deltas.npy"), src16)
    src_d = src16.astype(np.float32)  # what everyone downstream sees
    with open(o("source_names.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    np.save(o("quads.npy"), quads)
    with open(o("landmarks68.txt"), "w") as f:
        f.write("\n".join(lm) + "\n")
    shutil.copyfile(os.path.join(d, "LICENSE"), o("LICENSE"))
    V = make_t1(neutral, ident, src_d, names, args.out, T1_IDENTITY, "a", 18)
    make_t2(neutral, ident, quads, [int(i) for i in lm], args.out, args.blender)
    log("wrote %s: source %d shapes, %d corresponding poses" %
        (args.out, len(names), len(V)))


# ------------------------------------------------------------------- T2

BLENDER_DECIMATE = """
import bpy, sys
argv = sys.argv[sys.argv.index("--") + 1:]
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.wm.obj_import(filepath=argv[0])
ob = bpy.context.selected_objects[0]
bpy.context.view_layer.objects.active = ob
mod = ob.modifiers.new("dec", "DECIMATE")
mod.decimate_type = "COLLAPSE"
mod.ratio = float(argv[2])
mod.use_collapse_triangulate = True
bpy.ops.object.modifier_apply(modifier="dec")
bpy.ops.wm.obj_export(filepath=argv[1], export_selected_objects=True, export_materials=False,
                      export_normals=False, export_uv=False, export_triangulated_mesh=True)
"""


def write_obj(path, v, f):
    with open(path, "w") as o:
        for p in v:
            o.write("v %.6f %.6f %.6f\n" % tuple(p))
        for t in f:
            o.write("f %d %d %d\n" % tuple(t + 1))


def read_obj(path):
    v, f = [], []
    for line in open(path):
        p = line.split()
        if not p:
            continue
        if p[0] == "v":
            v.append([float(x) for x in p[1:4]])
        elif p[0] == "f":
            f.append([int(x.split("/")[0]) - 1 for x in p[1:4]])
    return np.array(v, np.float64), np.array(f, np.int64)


def closest_on_triangles(p, a, b, c):
    """Closest points to p [n,3] on triangles (a, b, c) [n,3]: barycentric
    coordinates [n,3] (Ericson, Real-Time Collision Detection 5.1.5)."""
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = (ab * ap).sum(1), (ac * ap).sum(1)
    bp = p - b
    d3, d4 = (ab * bp).sum(1), (ac * bp).sum(1)
    cp = p - c
    d5, d6 = (ab * cp).sum(1), (ac * cp).sum(1)
    va = d3 * d6 - d5 * d4
    vb = d5 * d2 - d1 * d6
    vc = d1 * d4 - d3 * d2
    den = va + vb + vc
    den = np.where(np.abs(den) < 1e-30, 1e-30, den)
    v, w = vb / den, vc / den
    bary = np.stack([1 - v - w, v, w], 1)
    # regions outside the face: clamp to edges / vertices
    def edge(t, i, j):
        r = np.zeros((len(t), 3))
        r[:, i], r[:, j] = 1 - t, t
        return r
    with np.errstate(divide="ignore", invalid="ignore"):
        cases = [
            (d1 <= 0) & (d2 <= 0), edge(np.zeros(len(p)), 0, 1),
            (d3 >= 0) & (d4 <= d3), edge(np.ones(len(p)), 0, 1),
            (vc <= 0) & (d1 >= 0) & (d3 <= 0), edge(d1 / (d1 - d3), 0, 1),
            (d6 >= 0) & (d5 <= d6), edge(np.ones(len(p)), 0, 2),
            (vb <= 0) & (d2 >= 0) & (d6 <= 0), edge(d2 / (d2 - d6), 0, 2),
            (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0),
            edge((d4 - d3) / ((d4 - d3) + (d5 - d6)), 1, 2),
        ]
    done = np.zeros(len(p), bool)
    for k in range(0, len(cases), 2):
        m = cases[k] & ~done
        bary[m] = cases[k + 1][m]
        done |= m
    return bary


def project_to_surface(pts, verts, tris, k=12):
    """For each point: the triangle of (verts, tris) holding its closest
    point and the barycentric coordinates there. Candidates: the triangles
    around the k nearest vertices."""
    inc = [[] for _ in range(len(verts))]
    for t, f in enumerate(tris):
        for v in f:
            inc[v].append(t)
    out_t = np.zeros(len(pts), np.int64)
    out_b = np.zeros((len(pts), 3))
    for i0 in range(0, len(pts), 256):
        P = pts[i0:i0 + 256]
        d = ((P[:, None, :] - verts[None, :, :]) ** 2).sum(2)
        near = np.argpartition(d, k, axis=1)[:, :k]
        for r, p in enumerate(P):
            cand = np.unique(np.concatenate([inc[v] for v in near[r]]))
            tri = tris[cand]
            bb = closest_on_triangles(np.repeat(p[None], len(cand), 0), verts[tri[:, 0]],
                                      verts[tri[:, 1]], verts[tri[:, 2]])
            q = (bb[:, :, None] * verts[tri]).sum(1)
            j = ((q - p) ** 2).sum(1).argmin()
            out_t[i0 + r], out_b[i0 + r] = cand[j], bb[j]
    return out_t, out_b


def make_t2(neutral, ident, quads, lm, out, blender):
    """T2: the third identity remeshed by Blender's Decimate, each new vertex
    moved onto the original surface (closest point), which gives the truth
    of every expression by barycentric interpolation."""
    import subprocess
    import tempfile
    a = np.zeros(ident.shape[0], np.float32)
    a[:len(T2_IDENTITY)] = T2_IDENTITY
    full = (neutral + np.tensordot(a, ident, axes=1)).astype(np.float64)
    tris = triangles(quads).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst, script = (os.path.join(tmp, n) for n in ("in.obj", "out.obj", "dec.py"))
        write_obj(src, full, tris)
        with open(script, "w") as f:
            f.write(BLENDER_DECIMATE)
        r = subprocess.run([blender, "-b", "--factory-startup", "--python", script, "--",
                            src, dst, str(T2_RATIO)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode or not os.path.exists(dst):
            sys.exit("make_data: blender decimate failed:\n" + r.stdout[-2000:])
        v2, f2 = read_obj(dst)
    # drop vertices no triangle uses, then put every vertex on the surface
    used = np.unique(f2)
    remap = -np.ones(len(v2), np.int64)
    remap[used] = np.arange(len(used))
    v2, f2 = v2[used], remap[f2]
    t, b = project_to_surface(v2, full, tris)
    v2 = (b[:, :, None] * full[tris[t]]).sum(1)
    # landmarks: the nearest T2 vertex to each landmark, each used once
    lm2, taken = [], set()
    for v in lm:
        order = np.argsort(((v2 - full[v]) ** 2).sum(1))
        j = next(int(j) for j in order if int(j) not in taken)
        taken.add(j)
        lm2.append(j)
    np.save(os.path.join(out, "t2_neutral.npy"), v2.astype(np.float32))
    np.save(os.path.join(out, "t2_triangles.npy"), f2.astype(np.int32))
    np.save(os.path.join(out, "t2_bary.npy"),
            np.concatenate([t[:, None].astype(np.float32), b.astype(np.float32)], 1))
    with open(os.path.join(out, "t2_landmarks68.txt"), "w") as f:
        f.write("\n".join(str(j) for j in lm2) + "\n")
    log("T2: %d vertices, %d triangles (the source: %d, %d)" % (len(v2), len(f2),
                                                               len(full), len(tris)))


def t2_truth_deltas(D):
    """The source deltas carried onto T2's vertices by their barycentric
    coordinates on the original surface [55,N2,3]."""
    tb = D["t2_bary"]
    t, b = tb[:, 0].astype(np.int64), tb[:, 1:].astype(np.float32)
    tri = triangles(D["quads"])[t]
    return (D["deltas"][:, tri, :] * b[None, :, :, None]).sum(2)


# ---------------------------------------------------------------- build

def triangles(quads):
    return np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]]).astype(
        np.int32)


def load_reduced(d):
    r = lambda n: os.path.join(d, n)
    D = {
        "neutral": np.load(r("source_neutral.npy")).astype(np.float32),
        "deltas": np.load(r("source_deltas.npy")).astype(np.float32),
        "names": read_names(r("source_names.txt")),
        "quads": np.load(r("quads.npy")),
        "landmarks": np.array([int(i) for i in read_names(r("landmarks68.txt"))]),
        "t1_neutral": np.load(r("t1_neutral.npy")).astype(np.float32),
        "t1_deltas": np.load(r("t1_deltas.npy")).astype(np.float32),
        "t1_names": read_names(r("t1_names.txt")),
        "t1_style": np.load(r("t1_style.npy")),
        "t2_neutral": np.load(r("t2_neutral.npy")),
        "t2_triangles": np.load(r("t2_triangles.npy")),
        "t2_bary": np.load(r("t2_bary.npy")),
        "t2_landmarks": np.array([int(i) for i in read_names(r("t2_landmarks68.txt"))]),
    }
    return D


def rigged_file(path, neutral, tris, deltas, names):
    stfile.write(path, {"positions": neutral, "triangles": tris, "morph_deltas": deltas},
                 {"kind": "rigged", "format_version": "1", "morph_names": json.dumps(names)})


def envelope(n):
    return np.sin(np.pi * (np.arange(n) + 0.5) / n) ** 2


def performance(m, frames, rng):
    """Smooth sparse weights [F,m]: events of 1-2 shapes (a left/right pair
    now and then), amplitude 0.4..1, raised-cosine envelopes of 30-90
    frames, a new event every 20-45 frames; at most a few shapes active."""
    w = np.zeros((frames, m))
    t = 0
    while t < frames:
        k = rng.choice(m, size=rng.integers(1, 3), replace=False)
        dur = int(rng.integers(30, 91))
        e = envelope(dur)[: frames - t]
        for j in k:
            w[t:t + len(e), j] += rng.uniform(0.4, 1.0) * e
        t += int(rng.integers(20, 46))
    return np.clip(w, 0, 1).astype(np.float32)


def rot(yaw, pitch, roll):
    cy, sy, cp, sp, cr, sr = (np.cos(yaw), np.sin(yaw), np.cos(pitch),
                              np.sin(pitch), np.cos(roll), np.sin(roll))
    Ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    Rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    Rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]])
    return Ry @ Rx @ Rz


def head_motion(frames, rng, center):
    """Smooth rigid head motion [F,3,4]: up to ~10 deg yaw, 6 pitch, 4 roll,
    1 cm translation, about the head's centre."""
    t = np.arange(frames) / 60.0
    ph = rng.uniform(0, 2 * np.pi, size=6)
    f = rng.uniform(0.1, 0.4, size=6)
    ang = [np.radians(a) * np.sin(2 * np.pi * f[i] * t + ph[i])
           for i, a in enumerate((10, 6, 4))]
    tr = [1.0 * np.sin(2 * np.pi * f[3 + i] * t + ph[3 + i]) for i in range(3)]
    H = np.zeros((frames, 3, 4))
    for i in range(frames):
        R = rot(ang[0][i], ang[1][i], ang[2][i])
        H[i, :, :3] = R
        H[i, :, 3] = center - R @ center + np.array([tr[0][i], tr[1][i],
                                                     tr[2][i]])
    return H.astype(np.float32)


def marker_tracks(neutral, deltas, W, H, lm):
    """[F,k,3] the landmarks lm of the rig (neutral [N,3], deltas [M,N,3]) at
    weights W [F,M], moved by the rigid head motion H [F,3,4]"""
    P = neutral[lm][None] + np.tensordot(W, deltas[:, lm], axes=1)
    return np.einsum("fij,fkj->fki", H[:, :, :3], P) + H[:, None, :, 3]


def cmd_build(args):
    D = load_reduced(args.data)
    os.makedirs(args.out, exist_ok=True)
    o = lambda n: os.path.join(args.out, n)
    tris = triangles(D["quads"])
    rigged_file(o("source.safetensors"), D["neutral"], tris, D["deltas"],
                D["names"])
    rigged_file(o("t1.safetensors"), D["t1_neutral"], tris, D["t1_deltas"],
                D["t1_names"])
    stfile.write(o("t2.safetensors"), {"positions": D["t2_neutral"],
                                       "triangles": D["t2_triangles"]},
                 {"kind": "rigged", "format_version": "1"})
    with open(o("t2_landmarks68.txt"), "w") as f:
        f.write("\n".join(str(i) for i in D["t2_landmarks"]) + "\n")
    # face height: vertical extent of T1's 68 landmarks (chin to brows)
    lmk = D["t1_neutral"][D["landmarks"]]
    height = float(lmk[:, 1].max() - lmk[:, 1].min())
    with open(o("face_height.txt"), "w") as f:
        f.write("%.4f\n" % height)
    with open(o("landmarks68.txt"), "w") as f:
        f.write("\n".join(str(i) for i in D["landmarks"]) + "\n")
    lm = D["landmarks"]
    m = len(D["names"])
    center = D["neutral"].mean(axis=0)
    for name, seed in (("train", 1), ("test", 2)):
        rng = np.random.default_rng(1800 + seed)
        W = performance(m, args.frames, rng)
        H = head_motion(args.frames, rng, center)
        np.save(o("perf_%s_weights.npy" % name), W)
        np.save(o("perf_%s_head.npy" % name), H.reshape(len(H), 12))
        # landmark positions of the posed source mesh, moved rigidly
        P = marker_tracks(D["neutral"], D["deltas"], W, H, lm)
        for n in NOISE_MM:
            noise = rng.normal(0, n / 10.0, size=P.shape) if n else 0
            np.save(o("perf_%s_markers_%gmm.npy" % (name, n)),
                    (P + noise).astype(np.float32))
    # another actor: the held-out performance on another face of the ICT
    # identity space (ACTOR_IDENTITY times T1's identity offset), its expression
    # displacements the source's (ICT's are the same for every identity), and
    # ten neutral frames of that actor with head motion for calibration
    actor = D["neutral"] + ACTOR_IDENTITY * (D["t1_neutral"] - D["neutral"])
    rng = np.random.default_rng(1900)
    W = np.load(o("perf_test_weights.npy"))
    H = np.load(o("perf_test_head.npy")).reshape(-1, 3, 4)
    P = marker_tracks(actor, D["deltas"], W, H, lm)
    Hn = head_motion(10, rng, center)
    N0 = marker_tracks(actor, D["deltas"], np.zeros((10, m), np.float32), Hn, lm)
    for n in (0, 1):
        noise = rng.normal(0, n / 10.0, size=P.shape) if n else 0
        np.save(o("perf_test_actor_markers_%gmm.npy" % n), (P + noise).astype(np.float32))
        noise = rng.normal(0, n / 10.0, size=N0.shape) if n else 0
        np.save(o("actor_neutral_markers_%gmm.npy" % n), (N0 + noise).astype(np.float32))
    # an expressive actor (the same face): expressions that move the markers
    # otherwise than the source rig's: each control's displacements scaled
    # by its own gain, left/right asymmetry and a smooth gain field across
    # the face (Choe & Ko's case for adapting the basis, --adapt).
    actor_d = expressive_deltas(D["deltas"], D["neutral"], np.random.default_rng(1950))
    # A range of motion (the calibration session a capture stage records:
    # each control on cue, raised to full and released over ROM_FRAMES, with
    # head motion) and the held-out performance.
    rom = np.zeros((ROM_FRAMES * m, m), np.float32)
    for j in range(m):
        rom[ROM_FRAMES * j:ROM_FRAMES * (j + 1), j] = np.sin(
            np.pi * np.arange(1, ROM_FRAMES + 1) / (ROM_FRAMES + 1))
    np.save(o("actorx_rom_weights.npy"), rom)
    rng = np.random.default_rng(1951)
    tracks = {"actorx_rom": (rom, head_motion(len(rom), rng, center)),
              "perf_test_actorx": (np.load(o("perf_test_weights.npy")),
                                   np.load(o("perf_test_head.npy")).reshape(-1, 3, 4))}
    for name, (W, H) in tracks.items():
        P = marker_tracks(actor, actor_d, W, H, lm)
        for n in (0, 1):
            noise = rng.normal(0, n / 10.0, size=P.shape) if n else 0
            np.save(o("%s_markers_%gmm.npy" % (name, n)), (P + noise).astype(np.float32))
    log("wrote %s: rigs, performances of %d frames (noise %s mm), face "
        "height %.2f cm" % (args.out, args.frames,
                            ", ".join("%g" % n for n in NOISE_MM), height))


def t1_truth_deltas(D):
    """The styled source deltas on T1 [55,N,3]: the truth of a retarget."""
    return styled_deltas(D["deltas"], D["t1_style"], D["neutral"][:, 0])


def cmd_keyshapes(args):
    """T1 shapes made for given performance frames (Chuang & Bregler's
    target basis): T1's rig posed to match each frame's truth."""
    D = load_reduced(args.data)
    W = np.load(args.weights)
    frames = [int(f) for f in read_names(args.frames)]
    if not frames or min(frames) < 0 or max(frames) >= len(W):
        sys.exit("make_data: frame indices outside the %d frames of %s" %
                 (len(W), args.weights))
    # the artist poses T1's own rig to match each key frame: the bounded fit
    # of T1's shapes to the frame's truth on the face area (as for the
    # corresponding poses), not the truth itself
    sd = t1_truth_deltas(D)[:, :FACE_VERTS].reshape(len(D["names"]), -1)
    A = D["t1_deltas"][:, :FACE_VERTS].reshape(len(D["t1_names"]), -1).astype(np.float64).T
    G = A.T @ A
    fit = [bounded_ls(G, A.T @ (W[f] @ sd)) for f in frames]
    shapes = np.tensordot(np.array(fit), D["t1_deltas"], axes=1)
    rigged_file(args.out, D["t1_neutral"], triangles(D["quads"]),
                shapes.astype(np.float32), ["kf%d" % f for f in frames])
    log("wrote %s: T1 with %d key-frame shapes" % (args.out, len(frames)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reduce", help="ICT data -> the reduced copy")
    r.add_argument("--ict", required=True, help="the ICT face data directory")
    r.add_argument("--out", required=True)
    r.add_argument("--blender", default="blender", help="Blender (T2's decimation)")
    b = sub.add_parser("build", help="reduced copy -> rigs + performances")
    b.add_argument("--data", required=True, help="the reduced copy")
    b.add_argument("--out", required=True)
    b.add_argument("--frames", type=int, default=1000)
    k = sub.add_parser("keyshapes", help="T1 shapes for key frames (truth)")
    k.add_argument("--data", required=True, help="the reduced copy")
    k.add_argument("--weights", required=True, help="the performance's weights")
    k.add_argument("--frames", required=True, help="key frame indices (text)")
    k.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "build" and not 1 <= a.frames <= 100000:
        sys.exit("make_data: --frames must be in 1..100000")
    {"reduce": cmd_reduce, "build": cmd_build, "keyshapes": cmd_keyshapes}[a.cmd](a)


if __name__ == "__main__":
    main()

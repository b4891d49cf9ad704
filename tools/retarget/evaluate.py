#!/usr/bin/python3
"""evaluate.py — the retargeting results of docs/retarget.md, reproducibly.

    tools/retarget/evaluate.py --work DIR [--bin bin] [--data tests/data/ict]
                               [--frames 1000] [--only all|t1|t2]
                               [--ict DIR [--t2-identity C1,..,C8]
                                [--t2-ratio R] [--blender BIN]
                                [--t1-identity C1,..,C8] [--t1-rig a|b]]

DESIGN
Builds everything from the committed reduced ICT copy into DIR (the rigs and
performances with make_data.py build; the models with `deform retarget
build`; Chuang & Bregler's basis with `deform retarget keyframes` on the
training performance and make_data.py keyshapes), evaluates the held-out
performance (perf_test_*, a different seed from the training one) with
`deform retarget apply` and compares with the truth:
  - source weights: the performance's own;
  - T1 vertices: T1 neutral + sum_j w_j d'_j, the styled source deltas
    (make_data.py's truth; T1's rig can only approximate it).
Vertex error: per frame the mean and the max over the 11248 vertices of the
distance to the truth; the tables give the mean over frames of the
per-frame mean, and the max over every frame and vertex, in mm and in % of
the face height (face_height.txt). Weight error: |w - w_true| over frames
and controls (mean, max). Another actor: the held-out performance's
markers on another face (make_data.py build), solved by the model as built
and by models whose rest markers are calibrated to that actor's neutral
frames (deform retarget build --marker-rest). An expressive actor (its
own expression displacements, make_data.py's expressive_deltas): the
held-out performance solved by the model as built, calibrated to the
neutral frames, and adapted to the actor's range of motion (deform
retarget build --adapt, with the range's markers at 0 and 1 mm and three
--adapt-lambda). Another source rig: T1's own
shapes as the marker solve's basis (a performance of T1's weights, its
landmark tracks with the same noise levels), served onto T1 itself. Prints markdown tables on
stdout.

T2 (another topology): `deform retarget transfer` with the landmark warp
alone (--refine 0) and with its refinement (--refine 5), served with the
names map; the correspondence itself (--correspondence-out) against T2's
exact one (t2_bary: the distance between the two source points); the max
without the "seam vertices", those whose true source triangle faces more
than 60 degrees away from the vertex's own normal (decimation left them on
the other lip: no correspondence that respects T2's surface can find their
truth); the methods' formulas applied with the exact correspondence.
--only t1 / t2 prints the T1 / T2 tables alone.

Targets the methods were not built on: --ict DIR (the ICT-FaceKit light
subset make_data.py reduce reads) makes a copy of --data under DIR/data
with other targets and evaluates those. With --t1-identity or --t1-rig:
another T1 (those identity coefficients, make_data.py's rig recipe "a" or
another artist's "b": other kept names, merges, combinations and style
shapes), its corresponding poses drawn anew. Unless --only t1: another T2
(make_data.py's T2 recipe with --t2-identity and --t2-ratio; Blender).
Needs Debian's python3 and python3-numpy only (and Blender for a new T2).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_data  # noqa: E402
from make_data import stfile  # noqa: E402  (the safetensors reader and writer)

NOISE = make_data.NOISE_MM


def run(*cmd):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        sys.exit("evaluate: %s failed:\n%s" % (" ".join(map(str, cmd)), r.stdout))
    return r.stdout


# ------------------------------------------- T2 with the exact correspondence

def vertex_normals(V, T):
    """area-weighted vertex normals (zero where no area)"""
    N = np.zeros_like(V)
    fn = np.cross(V[T[:, 1]] - V[T[:, 0]], V[T[:, 2]] - V[T[:, 0]])
    for k in range(3):
        np.add.at(N, T[:, k], fn)
    n = np.linalg.norm(N, axis=1, keepdims=True)
    return np.where(n > 0, N / np.where(n > 0, n, 1), 0)


def rotations_between(a, b):
    """per row, the rotation taking unit a onto unit b (Rodrigues)"""
    v, c = np.cross(a, b), (a * b).sum(1)
    K = np.zeros((len(a), 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -v[:, 2], v[:, 1], -v[:, 0]
    K[:, 1, 0], K[:, 2, 0], K[:, 2, 1] = v[:, 2], -v[:, 1], v[:, 0]
    return np.eye(3)[None] + K + K @ K / (1 + c)[:, None, None]


def rbf_warp(P, Q, X):
    """the transfer's landmark warp (phi(r) = r plus affine) through P -> Q,
    evaluated at X with its Jacobian"""
    L = len(P)
    A = np.zeros((L + 4, L + 4))
    A[:L, :L] = np.linalg.norm(P[:, None] - P[None], axis=2)
    A[:L, L], A[:L, L + 1:], A[L, :L], A[L + 1:, :L] = 1, P, 1, P.T
    rhs = np.zeros((L + 4, 3))
    rhs[:L] = Q
    c = np.linalg.solve(A, rhs)
    r = np.linalg.norm(X[:, None] - P[None], axis=2)
    e = (X[:, None] - P[None]) / np.where(r > 1e-12, r, np.inf)[:, :, None]
    J = np.einsum('nlk,ld->ndk', e, c[:L]) + c[L + 1:].T[None]
    return r @ c[:L] + c[L] + X @ c[L + 1:], J


def t2_exact(D):
    """The two methods' formulas (as rt_transfer.c) applied with the exact
    correspondence of T2's vertices (t2_bary, what the truth is made of)
    instead of the landmark warp's: what each method makes of this truth when
    its correspondence is perfect. Returns {label: deltas [55, N2, 3]}."""
    tris = make_data.triangles(D["quads"]).astype(np.int64)
    src, dS = D["neutral"].astype(np.float64), D["deltas"].astype(np.float64)
    V2, T2 = D["t2_neutral"].astype(np.float64), D["t2_triangles"].astype(np.int64)
    t, b = D["t2_bary"][:, 0].astype(np.int64), D["t2_bary"][:, 1:].astype(np.float64)
    m, n = len(dS), len(V2)
    P = (b[:, :, None] * src[tris[t]]).sum(1)            # corresponding source points
    d = (dS[:, tris[t], :] * b[None, :, :, None]).sum(2)  # their displacements
    _, J = rbf_warp(src[D["landmarks"]], V2[D["t2_landmarks"]], P)
    sc = np.cbrt(np.abs(np.linalg.det(J)))
    sc = np.where((sc > 0.1) & (sc < 10), sc, 1)
    R = rotations_between(vertex_normals(P, T2), vertex_normals(V2, T2))
    out = {"cloning, the paper's frames": np.einsum('vij,mvj->mvi', sc[:, None, None] * R, d),
           "cloning, the normals' turn only": np.einsum('vij,mvj->mvi', R, d),
           "cloning, the warp's scale only": sc[None, :, None] * d}
    # the paper's scale: the ratio of the bounding boxes of the triangles
    # sharing the vertex, per axis of the local frame (tangents as
    # rt_transfer.c's, the normal); the source's ring is T2's 1-ring at its
    # corresponding points, turned into the target's frame. Along the normal
    # a ring's extent is its curvature, not its size: also with the tangent
    # ratios' geometric mean there, and the isotropic ratio of the tangent
    # boxes' diagonals.
    Nt = vertex_normals(V2, T2)
    ring = [{v} for v in range(n)]
    for f in T2:
        for v in f:
            ring[v].update(f.tolist())
    Fr, S3, Sn, iso = np.zeros((n, 3, 3)), np.ones((n, 3)), np.ones((n, 3)), np.ones(n)
    for v in range(n):
        a = np.array([1.0, 0, 0]) if abs(Nt[v, 0]) <= 0.9 else np.array([0, 1.0, 0])
        t1 = np.cross(Nt[v], a)
        t1 /= np.linalg.norm(t1)
        Fr[v] = t1, np.cross(Nt[v], t1), Nt[v]
        r = np.array(sorted(ring[v]))
        et = np.ptp((V2[r] - V2[v]) @ Fr[v].T, axis=0)
        es = np.ptp((P[r] - P[v]) @ R[v].T @ Fr[v].T, axis=0)
        if (es > 0).all():
            Sn[v] = et / es
            S3[v, :2] = et[:2] / es[:2]
            S3[v, 2] = np.sqrt(S3[v, 0] * S3[v, 1])
            iso[v] = np.sqrt((et[:2] ** 2).sum() / (es[:2] ** 2).sum())
    turned = out["cloning, the normals' turn only"]
    # the warp's frames: each displaced source point through the landmark
    # warp (w(P + d) - w(P)); the similarity: J's polar rotation and its scale
    w0, _ = rbf_warp(src[D["landmarks"]], V2[D["t2_landmarks"]], P)
    out["cloning, the warp's frames"] = np.stack([
        rbf_warp(src[D["landmarks"]], V2[D["t2_landmarks"]], P + d[j])[0] - w0
        for j in range(m)])
    U, _, Vt = np.linalg.svd(J)
    out["cloning, the warp's turn and scale"] = np.einsum(
        'vij,mvj->mvi', sc[:, None, None] * (U @ Vt), d)
    out["cloning, the paper's scale (1-ring boxes, per axis, the normal's own)"] = np.einsum(
        'vji,mvj->mvi', Fr, np.einsum('vij,mvj->mvi', Fr, turned) * Sn[None])
    out["cloning, the paper's scale (1-ring boxes, per axis)"] = np.einsum(
        'vji,mvj->mvi', Fr, np.einsum('vij,mvj->mvi', Fr, turned) * S3[None])
    out["cloning, the paper's scale (1-ring boxes, isotropic)"] = iso[None, :, None] * turned
    # deformation transfer: the target triangles' gradients from the source
    # triangles spanned by their corners' points; cotangent system, the
    # vertices over source surface no shape moves held (as rt_transfer.c)
    a0, b0, c0 = V2[T2[:, 0]], V2[T2[:, 1]], V2[T2[:, 2]]
    nrm = np.cross(b0 - a0, c0 - a0)
    ln = np.linalg.norm(nrm, axis=1)
    Ar, nh = ln / 2, nrm / ln[:, None]
    g = np.stack([np.cross(nh, c0 - b0), np.cross(nh, a0 - c0), np.cross(nh, b0 - a0)],
                 1) / ln[:, None, None]
    K = np.zeros((n, n))
    for p in range(3):
        for q in range(3):
            np.add.at(K, (T2[:, p], T2[:, q]), Ar * (g[:, p] * g[:, q]).sum(1))
    ext = np.abs(src).max()
    pin = np.abs(dS[:, tris[t], :]).max(axis=(0, 2, 3)) <= 1e-5 * ext
    anc = np.where(pin, 1e3, 1e-6) * np.trace(K) / n
    K[np.arange(n), np.arange(n)] += anc

    def frame(x0, x1, x2):
        e1, e2 = x1 - x0, x2 - x0
        c = np.cross(e1, e2)
        c = c / np.sqrt(np.linalg.norm(c, axis=1, keepdims=True))
        return np.stack([e1, e2, c], 2)
    F0i = np.linalg.inv(frame(P[T2[:, 0]], P[T2[:, 1]], P[T2[:, 2]]))
    J0 = np.einsum('tkr,tkq->trq', V2[T2], g)
    rhs = np.zeros((n, 3 * m))
    for j in range(m):
        Pw = P + d[j]
        QJ = frame(Pw[T2[:, 0]], Pw[T2[:, 1]], Pw[T2[:, 2]]) @ F0i @ J0
        for k in range(3):
            np.add.at(rhs[:, 3 * j:3 * j + 3], T2[:, k],
                      Ar[:, None] * np.einsum('tq,tcq->tc', g[:, k], QJ))
    rhs += anc[:, None] * np.tile(V2, (1, m))
    L = np.linalg.cholesky(K)
    x = np.linalg.solve(L.T, np.linalg.solve(L, rhs))
    out["deformation transfer"] = x.reshape(n, m, 3).transpose(1, 0, 2) - V2[None]
    out["carried unturned"] = d
    return out, sc, R, d


def make_variant(a, out):
    """a copy of --data with another T1 (--t1-identity, --t1-rig) and, unless
    --only t1, another T2 (--t2-identity, --t2-ratio): make_data.py's
    recipes"""
    new_t1 = a.t1_identity is not None or a.t1_rig is not None
    new_t2 = a.only != "t1"
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(a.data):
        if not ((new_t2 and f.startswith("t2_")) or
                (new_t1 and (f.startswith("t1_") or f.startswith("clone_")))):
            shutil.copy(os.path.join(a.data, f), out)
    neutral = np.load(os.path.join(a.ict, "neutral.npy")).astype(np.float32)
    ident = np.load(os.path.join(a.ict, "identities.npy")).astype(np.float32)
    if new_t1:
        coef = (make_data.T1_IDENTITY if a.t1_identity is None else
                [float(x) for x in a.t1_identity.split(",")])
        names = make_data.read_names(os.path.join(a.ict, "expression_names.txt"))
        expr = np.load(os.path.join(a.ict, "expressions.npy")).astype(np.float16)
        make_data.make_t1(neutral, ident, expr.astype(np.float32), names, out, coef,
                          a.t1_rig or "a", 18)
    if new_t2:
        quads = np.load(os.path.join(a.ict, "quads.npy")).astype(np.int32)
        lm = [int(i) for i in make_data.read_names(os.path.join(a.ict, "landmarks68.txt"))]
        make_data.T2_IDENTITY = [float(x) for x in a.t2_identity.split(",")]
        make_data.T2_RATIO = a.t2_ratio
        make_data.make_t2(neutral, ident, quads, lm, out, a.blender)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", default="bin")
    ap.add_argument("--data", default="tests/data/ict")
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--components", type=int, default=20)
    ap.add_argument("--only", choices=("all", "t1", "t2"), default="all")
    ap.add_argument("--ict", help="ICT-FaceKit light subset: make other targets from it")
    ap.add_argument("--t2-identity", default="1.2,1.5,-0.9,-1.0,0.6,0.8,-0.5,0.3")
    ap.add_argument("--t2-ratio", type=float, default=0.3)
    ap.add_argument("--blender", default="blender")
    ap.add_argument("--t1-identity", help="another T1: its identity coefficients (with --ict)")
    ap.add_argument("--t1-rig", choices=("a", "b"), help="another T1: its rig recipe (with --ict)")
    a = ap.parse_args()
    if (a.t1_identity or a.t1_rig) and not a.ict:
        ap.error("--t1-identity and --t1-rig need --ict")
    W_ = a.work
    dform = os.path.join(a.bin, "deform")
    w = lambda n: os.path.join(W_, n)
    os.makedirs(W_, exist_ok=True)
    if a.ict:
        make_variant(a, w("data"))
        a.data = w("data")
    run(sys.executable, os.path.join(HERE, "make_data.py"), "build", "--data", a.data,
        "--out", W_, "--frames", a.frames)
    R = w("repo")
    shutil.rmtree(R, ignore_errors=True)  # fresh models: version 1 each
    src, t1, lm = w("source.safetensors"), w("t1.safetensors"), w("landmarks68.txt")
    poses = [os.path.join(a.data, "clone_source.npy"), os.path.join(a.data, "clone_target.npy")]

    def build(name, *extra):
        run(dform, "retarget", "build", "--repository", R, "--name", name, *extra)
        return os.path.join(R, name)

    D = make_data.load_reduced(a.data)
    Wt = np.load(w("perf_test_weights.npy"))
    height_mm = 10 * float(open(w("face_height.txt")).read())

    def apply(model, inp_kind, inp, params=None):
        cmd = [dform, "retarget", "apply", model, "--" + inp_kind, inp, "--positions",
               w("p.npy"), "--target-weights", w("tw.npy"), "--solved", w("sw.npy")]
        if params:
            cmd += ["--params", params]
        run(*cmd)
        return np.load(w("p.npy")), np.load(w("tw.npy")), np.load(w("sw.npy"))

    if a.only != "t2":
        t1_tables(a, D, W_, dform, build, apply, src, t1, lm, poses, Wt, height_mm)
    if a.only != "t1":
        t2_tables(D, w, dform, build, apply, src, lm, Wt, height_mm)


def t1_tables(a, D, W_, dform, build, apply, src, t1, lm, poses, Wt, height_mm):
    w = lambda n: os.path.join(W_, n)
    R = w("repo")
    F = len(Wt)
    names_out = run(dform, "retarget", "build", "--repository", R, "--name", "names",
                    "--source", src, "--target", t1, "--markers", lm)
    m_names = os.path.join(R, "names")
    m_clone = build("clone", "--source", src, "--target", t1, "--map", "clone", "--poses",
                    *poses, "--markers", lm)
    m_clonenn = build("clone_nn", "--source", src, "--target", t1, "--map", "clone-nn",
                      "--poses", *poses, "--markers", lm)
    kf_out = run(dform, "retarget", "keyframes", "--source", src, "--markers", lm,
                 "--performance", w("perf_train_markers_0mm.npy"), "--components",
                 a.components, "--out", w("kf_basis.safetensors"), "--frames-out",
                 w("kf_frames.txt"))
    run(sys.executable, os.path.join(HERE, "make_data.py"), "keyshapes", "--data", a.data,
        "--weights", w("perf_train_weights.npy"), "--frames", w("kf_frames.txt"),
        "--out", w("t1_kf.safetensors"))
    kf_common = ["--source", w("kf_basis.safetensors"), "--target", w("t1_kf.safetensors"),
                 "--markers", "all", "--clamp", "none", "--marker-lambda", "1e-6"]
    m_kf = build("kf_nnls", *kf_common, "--bounds", "nonneg")
    m_kfls = build("kf_ls", *kf_common, "--bounds", "none")

    sd = make_data.t1_truth_deltas(D).reshape(len(D["names"]), -1)
    truth = (D["t1_neutral"].reshape(-1)[None] + Wt @ sd).reshape(F, -1, 3)

    def verr(P):
        d = np.linalg.norm(P.reshape(F, -1, 3) - truth, axis=2) * 10  # mm
        return d.mean(), d.max()

    def row(label, P, sw=None):
        mn, mx = verr(P)
        s = "| %s | %.3f | %.2f | %.3f | %.2f |" % (label, mn, mx, 100 * mn / height_mm,
                                                   100 * mx / height_mm)
        if sw is not None:
            e = np.abs(sw - Wt)
            s += " %.4f | %.3f |" % (e.mean(), e.max())
        return s

    print("Held-out performance: %d frames (seed 2), face height %.1f mm, target T1 "
          "(%d vertices, %d shapes).\n" % (F, height_mm, len(D["t1_neutral"]),
                                           len(D["t1_names"])))
    print(names_out.strip().splitlines()[0] + "\n")
    print("### Known source weights -> T1\n")
    print("| method | mean mm | max mm | mean % | max % |")
    print("|---|---|---|---|---|")
    wfile = w("perf_test_weights.npy")
    for label, m in (("1. parallel blendshapes (names)", m_names),
                     ("4. cloning matrix (least squares)", m_clone),
                     ("4. cloning matrix (non-negative)", m_clonenn)):
        P, _, _ = apply(m, "weights", wfile)
        print(row(label, P))
    # the best T1 can do: each frame's truth projected on T1's rig in [0,1]
    A = D["t1_deltas"].reshape(len(D["t1_names"]), -1).astype(np.float64).T
    G = A.T @ A
    best = np.stack([make_data.bounded_ls(G, A.T @ (truth[f].reshape(-1) -
                                                     D["t1_neutral"].reshape(-1)), iters=1500)
                     for f in range(F)])
    print(row("(T1's rig at its best: bounded fit to the truth)",
              (D["t1_neutral"].reshape(-1)[None] + best @ A.T).astype(np.float32)))

    print("\n### Markers (68 landmarks, rigid head motion) -> source weights -> T1\n")
    print("Choe & Ko marker solve, then the cloning matrix (least squares). Weight error: "
          "the solved 55 source weights against the performance's.\n")
    print("| noise | solve | mean mm | max mm | mean % | max % | weight mean | weight max |")
    print("|---|---|---|---|---|---|---|---|")
    for n in NOISE:
        x = w("perf_test_markers_%gmm.npy" % n)
        for label, params in (("bounded 0..1", None), ("plain least squares", '{"bounds": "none"}')):
            P, _, sw = apply(m_clone, "markers", x, params)
            print(row("%g mm | %s" % (n, label), P, sw))

    # the marker solve on another source rig: T1's own shapes (combinations,
    # merged pairs, a style shape) as the source, served onto T1 itself (the
    # names map is the identity), a performance of T1's weights
    print("\n### Markers -> T1's own weights (T1 as the source rig)\n")
    print("| noise | solve | mean mm | max mm | mean % | max % | weight mean | weight max |")
    print("|---|---|---|---|---|---|---|---|")
    m_self = build("t1_self", "--source", t1, "--target", t1, "--markers", lm)
    n1, lmi = len(D["t1_names"]), D["landmarks"]
    rng = np.random.default_rng(1818)
    W1 = make_data.performance(n1, F, rng)
    H = make_data.head_motion(F, rng, D["neutral"].mean(axis=0))
    P1 = make_data.marker_tracks(D["t1_neutral"], D["t1_deltas"], W1, H, lmi)
    truth1 = (D["t1_neutral"].reshape(-1)[None] + W1 @ D["t1_deltas"].reshape(n1, -1)).reshape(F, -1, 3)
    for n in NOISE:
        x = w("perf_t1self_markers_%gmm.npy" % n)
        np.save(x, (P1 + (rng.normal(0, n / 10.0, size=P1.shape) if n else 0)).astype(np.float32))
        for label, params in (("bounded 0..1", None), ("plain least squares", '{"bounds": "none"}')):
            P, _, sw = apply(m_self, "markers", x, params)
            d = np.linalg.norm(P.reshape(F, -1, 3) - truth1, axis=2) * 10
            e = np.abs(sw - W1)
            print("| %g mm | %s | %.3f | %.2f | %.3f | %.2f | %.4f | %.3f |" % (
                n, label, d.mean(), d.max(), 100 * d.mean() / height_mm,
                100 * d.max() / height_mm, e.mean(), e.max()))

    print("\n### Another actor: markers of another face, rest markers calibrated "
          "(--marker-rest)\n")
    print("| model | actor's markers | mean mm | max mm | mean % | max % | weight mean | "
          "weight max |")
    print("|---|---|---|---|---|---|---|---|")
    m_cal = {}
    for c in (0, 1):
        m_cal[c] = build("clone_actor%d" % c, "--source", src, "--target", t1, "--map", "clone",
                         "--poses", *poses, "--markers", lm, "--marker-rest",
                         w("actor_neutral_markers_%dmm.npy" % c))
    for label, m in (("the source's rest markers", m_clone),
                     ("calibrated: 10 neutral frames, 0 mm", m_cal[0]),
                     ("calibrated: 10 neutral frames, 1 mm noise", m_cal[1])):
        for n in (0, 1):
            P, _, sw = apply(m, "markers", w("perf_test_actor_markers_%dmm.npy" % n))
            print(row("%s | %d mm" % (label, n), P, sw))

    print("\n### An expressive actor: the marker basis adapted to its range of motion "
          "(--adapt)\n")
    print("| model | actor's markers | mean mm | max mm | mean % | max % | weight mean | "
          "weight max |")
    print("|---|---|---|---|---|---|---|---|")
    rom_w = w("actorx_rom_weights.npy")
    variants = [("the source's rest markers and basis", m_clone),
                ("calibrated: 10 neutral frames, 0 mm (`--marker-rest`)", m_cal[0])]
    for c, lam in ((0, None), (1, None), (1, "0.01"), (1, "1")):
        extra = ["--adapt-lambda", lam] if lam else []
        mdl = build("clone_adapt%d_%s" % (c, lam or "default"), "--source", src, "--target", t1,
                    "--map", "clone", "--poses", *poses, "--markers", lm, "--adapt",
                    w("actorx_rom_markers_%dmm.npy" % c), "--adapt-weights", rom_w, *extra)
        variants.append(("adapted: range of motion, %d mm%s" % (
            c, ", `--adapt-lambda %s`" % lam if lam else " (default `--adapt-lambda 0.1`)"), mdl))
    for label, mdl in variants:
        for n in (0, 1):
            P, _, sw = apply(mdl, "markers", w("perf_test_actorx_markers_%dmm.npy" % n))
            print(row("%s | %d mm" % (label, n), P, sw))

    print("\n### Chuang & Bregler: key-frame basis, NNLS vs plain least squares\n")
    print(kf_out.strip().splitlines()[1] + "\n")
    print("| noise | solve | mean mm | max mm | mean % | max % | most negative weight | "
          "mean sum of negative weights |")
    print("|---|---|---|---|---|---|---|---|")
    for n in NOISE:
        x = w("perf_test_markers_%gmm.npy" % n)
        for label, m in (("NNLS", m_kf), ("plain least squares", m_kfls)):
            P, _, sw = apply(m, "markers", x)
            mn, mx = verr(P)
            neg = np.minimum(sw, 0)
            print("| %g mm | %s | %.3f | %.2f | %.3f | %.2f | %.3f | %.3f |" % (
                n, label, mn, mx, 100 * mn / height_mm, 100 * mx / height_mm, neg.min(),
                neg.sum(1).mean()))


def seam_vertices(D):
    """T2's vertices whose true source triangle faces more than 60 degrees away
    from the vertex's own normal"""
    src = D["neutral"].astype(np.float64)
    tris = make_data.triangles(D["quads"]).astype(np.int64)
    fs = np.cross(src[tris[:, 1]] - src[tris[:, 0]], src[tris[:, 2]] - src[tris[:, 0]])
    fs /= np.linalg.norm(fs, axis=1, keepdims=True)
    N = vertex_normals(D["t2_neutral"].astype(np.float64), D["t2_triangles"].astype(np.int64))
    return (fs[D["t2_bary"][:, 0].astype(np.int64)] * N).sum(1) < 0.5


def t2_tables(D, w, dform, build, apply, src, lm, Wt, height_mm):
    F, m = len(Wt), len(D["names"])
    t2d = make_data.t2_truth_deltas(D)
    t2_truth = (D["t2_neutral"].reshape(-1)[None] + Wt @ t2d.reshape(m, -1)).reshape(F, -1, 3)
    tris = make_data.triangles(D["quads"]).astype(np.int64)
    srcp = D["neutral"].astype(np.float64)

    def points(tb):  # source points of [N,4] (triangle, barycentrics)
        return (tb[:, 1:, None].astype(np.float64) * srcp[tris[tb[:, 0].astype(np.int64)]]).sum(1)
    exact_pts = points(D["t2_bary"])
    seam = seam_vertices(D)
    print("\n### T2 (another topology): source shapes carried onto a remeshed identity\n")
    print("T2: %d vertices, %d triangles.\n" % (len(D["t2_neutral"]), len(D["t2_triangles"])))
    print("| method | mean mm | max mm | mean % | max % | transfer time |")
    print("|---|---|---|---|---|---|")
    rows, corr = [], {}
    for label, meth, frames, refine, align in (
            ("naive copy (nearest vertex)", "naive", "warp", None, "auto"),
            ("naive copy (nearest point of the surface)", "naive-point", "warp", None, "auto"),
            ("naive copy (nearest point), after the landmarks' rigid alignment (`--align rigid`)",
             "naive-point", "warp", None, "rigid"),
            ("expression cloning, landmark warp alone (`--refine 0`)", "clone", "warp", 0,
             "auto"),
            ("expression cloning (the warp's frames, `--refine 5`: the defaults)", "clone",
             "warp", 5, "auto"),
            ("expression cloning, the paper's frames (`--local-frames normals --refine 0`)",
             "clone", "normals", 0, "auto"),
            ("expression cloning, the paper's frames (`--local-frames normals`)", "clone",
             "normals", 5, "auto"),
            ("expression cloning, the warp's turn and scale (`--local-frames similarity`)",
             "clone", "similarity", 5, "auto"),
            ("expression cloning, displacements unturned (`--local-frames off --refine 0`)",
             "clone", "off", 0, "auto"),
            ("expression cloning, displacements unturned (`--local-frames off`)", "clone", "off",
             5, "auto"),
            ("deformation transfer (`--refine 0`, the default)", "dt", "warp", 0, "auto"),
            ("deformation transfer, refined (`--refine 5`)", "dt", "warp", 5, "auto")):
        tag = "t2_%s_%s_%s_%s" % (meth, frames, refine, align)
        cmd = [dform, "retarget", "transfer", "--source", src, "--target", w("t2.safetensors"),
               "--source-landmarks", lm, "--target-landmarks", w("t2_landmarks68.txt"),
               "--method", meth, "--local-frames", frames, "--align", align,
               "--out", w(tag + ".safetensors")]
        if refine is not None:
            cmd += ["--refine", refine, "--correspondence-out", w(tag + "_corr.npy")]
        out = run(*cmd)
        secs = re.search(r"target vertices in ([0-9.]+)s;", out).group(1)
        if refine is not None and refine not in corr:
            corr[refine] = np.linalg.norm(points(np.load(w(tag + "_corr.npy"))) - exact_pts,
                                          axis=1) * 10
        mdl = build(tag, "--source", src, "--target", w(tag + ".safetensors"))
        P, _, _ = apply(mdl, "weights", w("perf_test_weights.npy"))
        d = np.linalg.norm(P.reshape(F, -1, 3) - t2_truth, axis=2) * 10
        rows.append((label, d.max(), d[:, ~seam].max(), d.mean(), d[:, ~seam].mean()))
        print("| %s | %.3f | %.2f | %.3f | %.2f | %s s |" % (label, d.mean(), d.max(),
              100 * d.mean() / height_mm, 100 * d.max() / height_mm, secs))

    print("\nThe correspondence: distance from each T2 vertex's source point to its exact "
          "one (t2_bary), mm:\n")
    print("| correspondence | mean | median | 90th percentile | max |")
    print("|---|---|---|---|---|")
    for refine, label in ((0, "landmark warp alone (`--refine 0`)"),
                          (5, "refined (`--refine 5`)")):
        e = corr[refine]
        print("| %s | %.2f | %.2f | %.2f | %.2f |" % (label, e.mean(), np.median(e),
                                                     np.percentile(e, 90), e.max()))

    print("\nThe worst vertices: %d of T2's vertices (seam vertices) have a true source "
          "triangle facing more than 60 deg away from their own normal; max error over all "
          "vertices and without them, mm (and the mean, with the ratios of the naive copies' "
          "to it: nearest point / nearest vertex):\n" % seam.sum())
    print("| method | max, all vertices | max, without the seam vertices | mean, all (naive "
          "point / it, naive vertex / it) | mean, without the seam vertices (the same) |")
    print("|---|---|---|---|---|")
    for label, mx, mx_ns, mn, mn_ns in rows:
        print("| %s | %.2f | %.2f | %.3f (%.2f× / %.2f×) | %.3f (%.2f× / %.2f×) |" % (
            label, mx, mx_ns, mn, rows[1][3] / mn, rows[0][3] / mn, mn_ns, rows[1][4] / mn_ns,
            rows[0][4] / mn_ns))

    print("\nThe same formulas with the exact correspondence (T2's t2_bary, the truth's own; "
          "evaluate.py's implementation of rt_transfer.c's local frames and deformation "
          "transfer):\n")
    ex, sc, R, dx = t2_exact(D)
    ang = np.degrees(np.arccos(np.clip((R[:, [0, 1, 2], [0, 1, 2]].sum(1) - 1) / 2, -1, 1)))
    mv = np.linalg.norm(dx, axis=2).mean(0)
    print("warp scale at T2's vertices: mean %.4f; normals' angle: mean %.2f deg, "
          "motion-weighted %.2f deg\n" % (sc.mean(), ang.mean(), (ang * mv).sum() / mv.sum()))
    print("| method | mean mm | max mm | mean % | max % |")
    print("|---|---|---|---|---|")
    for label in ("carried unturned", "cloning, the warp's frames",
                  "cloning, the warp's turn and scale", "cloning, the normals' turn only",
                  "cloning, the warp's scale only", "cloning, the paper's frames",
                  "cloning, the paper's scale (1-ring boxes, per axis, the normal's own)",
                  "cloning, the paper's scale (1-ring boxes, per axis)",
                  "cloning, the paper's scale (1-ring boxes, isotropic)",
                  "deformation transfer"):
        d = np.linalg.norm((Wt @ (ex[label] - t2d.reshape(ex[label].shape)).reshape(
            m, -1)).reshape(F, -1, 3), axis=2) * 10
        print("| %s | %.3f | %.2f | %.3f | %.2f |" % (label, d.mean(), d.max(),
              100 * d.mean() / height_mm, 100 * d.max() / height_mm))

    # T2 in another frame: its axes permuted (a Z-up export facing +X) and moved; the truth
    # turned with it
    print("\nT2 in another frame (axes permuted: turned 120 deg, and moved), mean / max mm:\n")
    Q = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0]], np.float64)
    tq, meta = stfile.read(w("t2.safetensors"))
    tq["positions"] = (tq["positions"].astype(np.float64) @ Q.T + [40.0, -12.0, 7.0]).astype(
        np.float32)
    stfile.write(w("t2_turned.safetensors"), tq, meta)
    print("| method | as given (`--align none`) | aligned (`--align auto`, the default) |")
    print("|---|---|---|")
    for label, meth, frames in (("expression cloning (the warp's frames)", "clone", "warp"),
                                ("expression cloning, `--local-frames normals`", "clone",
                                 "normals"),
                                ("expression cloning, `--local-frames off`", "clone", "off"),
                                ("deformation transfer", "dt", "warp"),
                                ("naive copy (nearest point)", "naive-point", "warp")):
        cells = []
        for align in ("none", "auto"):
            tag = "t2q_%s_%s_%s" % (meth, frames, align)
            run(dform, "retarget", "transfer", "--source", src, "--target",
                w("t2_turned.safetensors"), "--source-landmarks", lm, "--target-landmarks",
                w("t2_landmarks68.txt"), "--method", meth, "--local-frames", frames, "--align",
                align, "--out", w(tag + ".safetensors"))
            S = stfile.read(w(tag + ".safetensors"))[0]["morph_deltas"].astype(np.float64)
            d = np.linalg.norm((Wt @ (S - t2d.reshape(S.shape) @ Q.T).reshape(m, -1)).reshape(
                F, -1, 3), axis=2) * 10
            cells.append("%.3f / %.2f" % (d.mean(), d.max()))
        print("| %s | %s |" % (label, " | ".join(cells)))

    # stylised targets: a smooth non-linear map f (wider at the brow than at the jaw, bent,
    # deeper, a curved profile; k its strength) applied to a target and to its truth, so the
    # truth's displacements are f(x + d) - f(x): what a character with other proportions
    # needs. f(source): the source's own mesh stylised (the adaptation alone); f(T2): T2
    # stylised (T2's unadapted identity change as well)
    print("\nStylised targets (a smooth map f with strength k applied to the target and its "
          "truth), mean / max mm:\n")
    variants = (("naive copy (nearest point)", "naive-point", "warp"),
                ("expression cloning (the warp's frames, the default)", "clone", "warp"),
                ("expression cloning, `--local-frames normals`", "clone", "normals"),
                ("expression cloning, `--local-frames similarity`", "clone", "similarity"),
                ("expression cloning, `--local-frames off`", "clone", "off"),
                ("deformation transfer", "dt", "warp"))
    src_t = stfile.read(src)[0]
    t2_t = stfile.read(w("t2.safetensors"))[0]
    cases = []
    for name, tens, truth_d, tlm in (
            ("f(source)", src_t, src_t["morph_deltas"].astype(np.float64), lm),
            ("f(T2)", t2_t, t2d.reshape(m, -1, 3), w("t2_landmarks68.txt"))):
        base = tens["positions"].astype(np.float64)
        c, ext = base.mean(0), np.ptp(base, 0)

        def fmap(X, k):
            Y = (X - c) / ext
            o = np.empty_like(X)
            o[..., 0] = Y[..., 0] * (1 + 0.4 * k * Y[..., 1])
            o[..., 1] = Y[..., 1] + 0.15 * k * Y[..., 0] ** 2
            o[..., 2] = Y[..., 2] * (1 + 0.3 * k) + 0.2 * k * Y[..., 1] ** 2
            return o * ext + c
        for k in (0.5, 1.0):
            V = fmap(base, k)
            truth = fmap(base[None] + truth_d, k) - V[None]
            path = w("styl_%s_%g.safetensors" % (name[2:-1], k))
            stfile.write(path, {"positions": V.astype(np.float32),
                                "triangles": tens["triangles"]}, {})
            cells = []
            for _, meth, frames in variants:
                run(dform, "retarget", "transfer", "--source", src, "--target", path,
                    "--source-landmarks", lm, "--target-landmarks", tlm, "--method", meth,
                    "--local-frames", frames, "--out", w("styl.safetensors"))
                S = stfile.read(w("styl.safetensors"))[0]["morph_deltas"].astype(np.float64)
                d = np.linalg.norm((Wt @ (S - truth).reshape(m, -1)).reshape(F, -1, 3),
                                   axis=2) * 10
                cells.append("%.3f / %.2f" % (d.mean(), d.max()))
            cases.append(("%s, k = %g" % (name, k), cells))
    print("| method | " + " | ".join(c[0] for c in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for i, (label, _, _) in enumerate(variants):
        print("| %s | %s |" % (label, " | ".join(c[1][i] for c in cases)))

    # fewer landmarks (what a user picks by hand on an own mesh): subsets of the 68 in the
    # Multi-PIE 68-point numbering, cloning (refined and not) and deformation transfer
    print("\nFewer landmarks (subsets of the 68, Multi-PIE numbering), mean mm over the held-out "
          "performance:\n")
    print("| landmarks | expression cloning, `--refine 0` | expression cloning, `--refine 5` | "
          "deformation transfer | naive copy (nearest point) |")
    print("|---|---|---|---|---|")
    src_lm = open(lm).read().split()
    tgt_lm = open(w("t2_landmarks68.txt")).read().split()
    subsets = (("68", list(range(68))),
               ("12: eye corners, nose bridge and tip, nostril base, mouth corners, lip middles, "
                "chin", [36, 39, 42, 45, 27, 30, 33, 48, 54, 51, 57, 8]),
               ("8: eye corners, nose tip, mouth corners, chin", [36, 39, 42, 45, 30, 48, 54, 8]),
               ("5: outer eye corners, nose tip, mouth corners", [36, 45, 30, 48, 54]))
    naive = rows[1][3]  # the nearest point's copy: the stronger baseline
    for label, idx in subsets:
        with open(w("lm_sub_src.txt"), "w") as f:
            f.write(" ".join(src_lm[i] for i in idx) + "\n")
        with open(w("lm_sub_tgt.txt"), "w") as f:
            f.write(" ".join(tgt_lm[i] for i in idx) + "\n")
        cells = []
        for meth, refine in (("clone", "0"), ("clone", "5"), ("dt", "0")):
            tag = "t2_sub%d_%s_%s" % (len(idx), meth, refine)
            run(dform, "retarget", "transfer", "--source", src, "--target", w("t2.safetensors"),
                "--source-landmarks", w("lm_sub_src.txt"), "--target-landmarks",
                w("lm_sub_tgt.txt"), "--method", meth, "--refine", refine,
                "--out", w(tag + ".safetensors"))
            mdl = build(tag, "--source", src, "--target", w(tag + ".safetensors"))
            P, _, _ = apply(mdl, "weights", w("perf_test_weights.npy"))
            d = np.linalg.norm(P.reshape(F, -1, 3) - t2_truth, axis=2) * 10
            cells.append("%.3f (%.2f×)" % (d.mean(), naive / d.mean()))
        print("| %s | %s | %.3f |" % (label, " | ".join(cells), naive))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""evaluate.py — the retargeting results of docs/retarget.md, reproducibly.

    tools/retarget/evaluate.py --work DIR [--bin bin] [--data tests/data/ict]
                               [--frames 1000]

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
and controls (mean, max). Prints markdown tables on stdout.
Needs Debian's python3 and python3-numpy only.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_data  # noqa: E402

NOISE = make_data.NOISE_MM


def run(*cmd):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        sys.exit("evaluate: %s failed:\n%s" % (" ".join(map(str, cmd)), r.stdout))
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", default="bin")
    ap.add_argument("--data", default="tests/data/ict")
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--components", type=int, default=20)
    a = ap.parse_args()
    W_ = a.work
    dform = os.path.join(a.bin, "deform")
    w = lambda n: os.path.join(W_, n)
    os.makedirs(W_, exist_ok=True)
    run(sys.executable, os.path.join(HERE, "make_data.py"), "build", "--data", a.data,
        "--out", W_, "--frames", a.frames)
    R = w("repo")
    shutil.rmtree(R, ignore_errors=True)  # fresh models: version 1 each
    src, t1, lm = w("source.safetensors"), w("t1.safetensors"), w("landmarks68.txt")
    poses = [os.path.join(a.data, "clone_source.npy"), os.path.join(a.data, "clone_target.npy")]

    def build(name, *extra):
        out = run(dform, "retarget", "build", "--repository", R, "--name", name, *extra)
        return os.path.join(R, name)
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

    D = make_data.load_reduced(a.data)
    sd = make_data.t1_truth_deltas(D).reshape(len(D["names"]), -1)
    Wt = np.load(w("perf_test_weights.npy"))
    F = len(Wt)
    truth = (D["t1_neutral"].reshape(-1)[None] + Wt @ sd).reshape(F, -1, 3)
    height_mm = 10 * float(open(w("face_height.txt")).read())

    def verr(P):
        d = np.linalg.norm(P.reshape(F, -1, 3) - truth, axis=2) * 10  # mm
        return d.mean(), d.max()

    def apply(model, inp_kind, inp, params=None):
        cmd = [dform, "retarget", "apply", model, "--" + inp_kind, inp, "--positions",
               w("p.npy"), "--target-weights", w("tw.npy"), "--solved", w("sw.npy")]
        if params:
            cmd += ["--params", params]
        run(*cmd)
        return np.load(w("p.npy")), np.load(w("tw.npy")), np.load(w("sw.npy"))

    def row(label, P, sw=None):
        mn, mx = verr(P)
        s = "| %s | %.3f | %.2f | %.3f | %.2f |" % (label, mn, mx, 100 * mn / height_mm,
                                                   100 * mx / height_mm)
        if sw is not None:
            e = np.abs(sw - Wt)
            s += " %.4f | %.3f |" % (e.mean(), e.max())
        return s

    print("Held-out performance: %d frames (seed 2), face height %.1f mm, target T1 "
          "(11248 vertices, 25 shapes).\n" % (F, height_mm))
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

    print("\n### T2 (another topology): source shapes carried onto a remeshed identity\n")
    t2_truth = (D["t2_neutral"].reshape(-1)[None] + Wt @ make_data.t2_truth_deltas(D).reshape(
        len(D["names"]), -1)).reshape(F, -1, 3)
    print("| method | mean mm | max mm | mean % | max % | transfer time |")
    print("|---|---|---|---|---|---|")
    for label, meth, frames in (("naive copy (nearest vertex)", "naive", "on"),
                                ("expression cloning", "clone", "on"),
                                ("expression cloning, displacements unturned", "clone", "off"),
                                ("deformation transfer", "dt", "on")):
        rig = w("t2_%s_%s.safetensors" % (meth, frames))
        out = run(dform, "retarget", "transfer", "--source", src, "--target", w("t2.safetensors"),
                  "--source-landmarks", lm, "--target-landmarks", w("t2_landmarks68.txt"),
                  "--method", meth, "--local-frames", frames, "--out", rig)
        secs = out.split(" in ")[1].split("s;")[0]
        m = build("t2_%s_%s" % (meth, frames), "--source", src, "--target", rig)
        P, _, _ = apply(m, "weights", wfile)
        d = np.linalg.norm(P.reshape(F, -1, 3) - t2_truth, axis=2) * 10
        print("| %s | %.3f | %.2f | %.3f | %.2f | %s s |" % (label, d.mean(), d.max(),
              100 * d.mean() / height_mm, 100 * d.max() / height_mm, secs))

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


if __name__ == "__main__":
    main()

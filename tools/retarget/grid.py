#!/usr/bin/python3
"""grid.py — the picture of docs/retarget.md: source | truth | ours, a few frames.

    tools/retarget/grid.py --out docs/retarget_grid.png [--work DIR] [--bin bin]
                           [--data tests/data/ict] [--rows 4] [--noise 1]
                           [--blender blender] [--size 180]

DESIGN
Builds what it shows from the committed reduced ICT copy into --work (default
a temporary directory): make_data.py build (the rigs and the held-out
performance, 1000 frames), a markers -> T1 model (`deform retarget build
--map clone --markers`) and T2's cloned rig (`deform retarget transfer
--method clone`, its defaults, served with the names map). It picks --rows
frames of the held-out performance, the most expressive ones at least 60
frames apart (largest mean source displacement), and runs them through
`deform retarget apply`: T1 from the frame's landmarks with --noise mm of
noise (the performance's own noisy tracks), T2 from the frame's source
weights. Each row is one frame:

    source | T1 truth | T1 ours (markers) | T2 truth | T2 ours (expression cloning)

the "ours" cells coloured by each vertex's distance to the truth (white 0,
red at --scale mm and above), the others plain. Rendered headless by Blender
(Workbench, orthographic, front view) with tools/retarget/render_grid.py.
Prints each row's frame and mean / max error (mm).
Needs Debian's python3, python3-numpy and blender.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_data  # noqa: E402


def run(*cmd):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        sys.exit("grid.py: %s failed:\n%s%s" % (" ".join(str(c) for c in cmd), r.stdout, r.stderr))
    return r.stdout


def pick_frames(W, deltas, rows, gap=60):
    """The most expressive frames (mean source displacement), gap apart."""
    mag = np.linalg.norm(np.tensordot(W, deltas, axes=1), axis=2).mean(1)
    chosen = []
    for f in np.argsort(-mag):
        if all(abs(int(f) - c) >= gap for c in chosen):
            chosen.append(int(f))
        if len(chosen) == rows:
            break
    return sorted(chosen)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work")
    ap.add_argument("--bin", default="bin")
    ap.add_argument("--data", default="tests/data/ict")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--noise", type=float, default=1.0, choices=make_data.NOISE_MM)
    ap.add_argument("--scale", type=float, default=3.0, help="mm shown fully red")
    ap.add_argument("--blender", default=os.environ.get("BLENDER", "blender"))
    ap.add_argument("--size", type=int, default=180)
    a = ap.parse_args()
    if not 1 <= a.rows <= 12:
        sys.exit("grid.py: --rows must be 1..12")
    W_ = a.work or tempfile.mkdtemp(prefix="rt-grid-")
    os.makedirs(W_, exist_ok=True)
    w = lambda n: os.path.join(W_, n)
    dform = os.path.join(a.bin, "deform")
    if not os.path.exists(w("perf_test_weights.npy")):
        run(sys.executable, os.path.join(HERE, "make_data.py"), "build", "--data", a.data,
            "--out", W_, "--frames", 1000)
    R = w("repo")
    src, t1, lm = w("source.safetensors"), w("t1.safetensors"), w("landmarks68.txt")
    if not os.path.isdir(os.path.join(R, "clone")):
        run(dform, "retarget", "build", "--repository", R, "--name", "clone", "--source", src,
            "--target", t1, "--map", "clone", "--poses", os.path.join(a.data, "clone_source.npy"),
            os.path.join(a.data, "clone_target.npy"), "--markers", lm)
    if not os.path.isdir(os.path.join(R, "t2_clone")):
        run(dform, "retarget", "transfer", "--source", src, "--target", w("t2.safetensors"),
            "--source-landmarks", lm, "--target-landmarks", w("t2_landmarks68.txt"),
            "--method", "clone", "--out", w("t2_clone.safetensors"))
        run(dform, "retarget", "build", "--repository", R, "--name", "t2_clone", "--source", src,
            "--target", w("t2_clone.safetensors"))

    D = make_data.load_reduced(a.data)
    Wt = np.load(w("perf_test_weights.npy"))
    frames = pick_frames(Wt, D["deltas"].astype(np.float64), a.rows)
    X = np.load(w("perf_test_markers_%gmm.npy" % a.noise))[frames]
    np.save(w("grid_markers.npy"), X.astype(np.float32))
    np.save(w("grid_weights.npy"), Wt[frames].astype(np.float32))
    run(dform, "retarget", "apply", os.path.join(R, "clone"), "--markers", w("grid_markers.npy"),
        "--positions", w("grid_t1.npy"))
    run(dform, "retarget", "apply", os.path.join(R, "t2_clone"), "--weights",
        w("grid_weights.npy"), "--positions", w("grid_t2.npy"))
    ours1 = np.load(w("grid_t1.npy")).reshape(len(frames), -1, 3)
    ours2 = np.load(w("grid_t2.npy")).reshape(len(frames), -1, 3)

    Wf = Wt[frames]
    src_pos = D["neutral"][None] + np.tensordot(Wf, D["deltas"], axes=1)
    t1_truth = D["t1_neutral"][None] + np.tensordot(Wf, make_data.t1_truth_deltas(D), axes=1)
    t2_truth = D["t2_neutral"][None] + np.tensordot(Wf, make_data.t2_truth_deltas(D), axes=1)
    e1 = np.linalg.norm(ours1 - t1_truth, axis=2) * 10  # mm
    e2 = np.linalg.norm(ours2 - t2_truth, axis=2) * 10
    for i, f in enumerate(frames):
        print("frame %4d: T1 from %g mm markers: mean %.3f max %.2f mm; T2 cloning: mean %.3f "
              "max %.2f mm" % (f, a.noise, e1[i].mean(), e1[i].max(), e2[i].mean(), e2[i].max()))

    tri = make_data.triangles(D["quads"])
    meshes, tris, errs = [], [], []
    for i in range(len(frames)):
        for P, T, E in ((src_pos[i], 0, None), (t1_truth[i], 0, None), (ours1[i], 0, e1[i]),
                        (t2_truth[i], 1, None), (ours2[i], 1, e2[i])):
            meshes.append(np.asarray(P, np.float32))
            tris.append(T)
            errs.append(np.full(len(P), -1.0, np.float32) if E is None else E.astype(np.float32))
    scene = w("grid_scene.npz")
    labels = ["source", "T1 truth", "T1 ours (%g mm markers)" % a.noise, "T2 truth",
              "T2 ours (cloning)"]
    np.savez(scene, cols=5, scale=a.scale, labels=np.array(labels), tri0=tri.astype(np.int32),
             tri1=D["t2_triangles"].astype(np.int32), which=np.array(tris),
             **{"v%d" % k: m for k, m in enumerate(meshes)}, **{"e%d" % k: e for k, e in enumerate(errs)})
    run(a.blender, "-b", "--factory-startup", "--python", os.path.join(HERE, "render_grid.py"), "--",
        scene, os.path.abspath(a.out), "--size", a.size)
    print("wrote %s (rows: frames %s; columns: source | T1 truth | T1 ours from %g mm markers | "
          "T2 truth | T2 expression cloning; ours white to red at %g mm)" % (
              a.out, ", ".join(str(f) for f in frames), a.noise, a.scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())

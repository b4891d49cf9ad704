# gfit.py — fit a `garment` model from a simulated database, and evaluate it
# against held-out simulations and baselines. Commands of garment.py:
#
#   garment.py fit DB --out MODEL.safetensors [--k 5] [--ridge 0.2] [--features auto|linear|quadratic]
#                     [--anchors a,b,..] [--allow-missing] [--max-inside 5]
#   garment.py evaluate DB --model MODEL.safetensors [--deform bin/deform] [--json OUT] [--png OUT]
#
# DESIGN (the method: Wu et al., docs/garment.md)
# Per anchor pose s, the clothing shape model: PCA of the garment over the
# training shapes (k components), a ridge-regularised linear map from
# features of beta (beta, or beta and beta^2) to the PCA coefficients, kept
# as U_s [k,G,3] and W_s [k,F]: the garment at shape beta is
# f(beta0, theta_s) + U_s W_s (feat(beta) - feat(0)), with f(beta0, theta_s)
# the simulated example on the template body. The clothing pose model is
# the template body's examples (every beta0 simulation: the anchors' and the
# pose set's), blended by the same sensitivity distance. The binding
# (skin weights of the nearest body vertex), the regions (bone groups) and
# Q (Eq. 7) come from the plan's sensitivities. Everything is written with
# the body's own `rigged` tensors in one safetensors file of kind `garment`;
# core/garment validates it on load.
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gdb  # noqa: E402
import gmath  # noqa: E402
import stfile  # noqa: E402

# Bones grouped into regions (the paper: 7 regions chosen by hand).
REGIONS = [('lower', ['pelvis', 'spine', 'thigh.L', 'thigh.R', 'shin.L', 'shin.R', 'foot.L', 'foot.R']),
           ('chest', ['chest']), ('head', ['neck', 'head']),
           ('arm.L', ['clavicle.L', 'upperarm.L']), ('forearm.L', ['forearm.L', 'hand.L']),
           ('arm.R', ['clavicle.R', 'upperarm.R']), ('forearm.R', ['forearm.R', 'hand.R'])]
MAX_INFLUENCES = 4
PENETRATION_CANDIDATES = 12


def die(msg):
    print('garment: ' + msg, file=sys.stderr)
    sys.exit(1)


def load_results(db, man, allow_missing, max_inside):
    """name -> garment [G,3] for every usable job; refuses (naming them) or
    drops missing / failed / suspect simulations."""
    res, bad = {}, []
    fit_jobs = [j for j in man['jobs'] if j['role'] != 'test']  # held-out pairs are not fitted
    for j in fit_jobs:
        s, info = gdb.job_state(db, j)
        p = os.path.join(db, 'sims', j['name'] + '.npy')
        if s != 'ok' or not os.path.exists(p):
            bad.append('%s (%s)' % (j['name'], 'not simulated' if s == 'pending' else (info or {}).get('error', 'failed')))
            continue
        if info.get('inside_pct_quick', 0) > max_inside:
            bad.append('%s (%.1f%% of the garment inside the body > --max-inside %g)'
                       % (j['name'], info['inside_pct_quick'], max_inside))
            continue
        res[j['name']] = np.load(p).astype(np.float64)
    if bad and not allow_missing:
        die('%d of the %d simulations the fit uses are not usable:\n  %s\n(run `garment.py run DB` to '
            'finish them, or pass --allow-missing to fit without them)' % (len(bad), len(fit_jobs), '\n  '.join(bad)))
    for b in bad:
        print('fit: left out ' + b)
    return res


def penetration_candidates(bm, G0, res, jobs, rot):
    """Body vertices each garment vertex is checked against at run time: the
    nearest at the template rest, then those most often among the 2 nearest
    in the simulated examples (where the arm presses the torso, a sleeve
    slides along the arm...), PENETRATION_CANDIDATES in all."""
    G = len(G0)
    count = np.zeros((G, bm.N), np.int32)
    rest = gmath.nearest_vertices(G0, bm.V0, PENETRATION_CANDIDATES)
    for name, Y in res.items():
        j = jobs[name]
        near = gmath.nearest_vertices(Y, bm.posed(j['beta'], rot[j['pose']]), 2)
        np.add.at(count, (np.repeat(np.arange(G), 2), near.ravel()), 1)
    count[np.arange(G), rest[:, 0]] = np.iinfo(np.int32).max  # always first
    count[np.arange(G)[:, None], rest] += 1                    # then the rest neighbours break ties
    return np.argsort(-count, axis=1, kind='stable')[:, :PENETRATION_CANDIDATES]


def features(B, kind):
    B = np.atleast_2d(B)
    return np.concatenate([B, B * B], 1) if kind == 'quadratic' else B


def cmd_fit(a):
    db = os.path.abspath(a.db)
    man = json.load(open(os.path.join(db, 'manifest.json')))
    pz = np.load(os.path.join(db, 'poses.npz'))
    plan = np.load(os.path.join(db, 'plan.npz'))
    gz = np.load(os.path.join(db, 'garment.npz'))
    bm = gmath.BodyModel(os.path.join(db, 'body', 'body.npz'))
    res = load_results(db, man, a.allow_missing, a.max_inside)
    rot = pz['rotations']
    jobs = {j['name']: j for j in man['jobs']}
    shapes = np.array(man['shapes'])
    use = range(len(man['grid'])) if not a.anchors else [int(x) for x in a.anchors.split(',')]
    t0 = time.time()

    # ---- anchors: clothing shape models
    A_rot, A_base, A_U, A_W, kept = [], [], [], [], []
    nshape = len(shapes)
    kind = a.features
    if kind == 'auto':  # beta^2 needs two non-zero values per axis to be told apart from beta
        kind = 'quadratic' if len(set(man['shape_values'])) >= 2 else 'linear'
    for s in use:
        names = man['grid'][s]
        base = names[0]
        if base not in res:
            print('fit: anchor %d dropped: its template-shape example %s is missing' % (s, base))
            continue
        have = [i for i, n in enumerate(names) if n in res]
        X = np.array([res[names[i]].ravel() for i in have])          # [n, 3G]
        Bv = shapes[have]
        u = X.mean(0)
        _, sv, Vt = np.linalg.svd(X - u, full_matrices=False)
        k = min(a.k, len(have) - 1)
        U = Vt[:k]                                                   # [k, 3G]
        phi = (X - u) @ U.T                                          # [n, k]
        Fm = np.concatenate([features(Bv, kind), np.ones((len(have), 1))], 1)
        reg = a.ridge * np.eye(Fm.shape[1])
        reg[-1, -1] = 0.0                                            # the intercept is not shrunk
        W = np.linalg.solve(Fm.T @ Fm + reg, Fm.T @ phi).T           # [k, F+1]
        var = (sv[:k] ** 2).sum() / max((sv ** 2).sum(), 1e-30)
        A_rot.append(rot[jobs[base]['pose']])
        A_base.append(res[base].reshape(-1, 3))
        A_U.append(U.reshape(k, len(u) // 3, 3))
        A_W.append(W[:, :-1])
        kept.append(s)
        print('fit: anchor %d (pose %d): %d shapes, k=%d, %.1f%% of the variance' % (
            s, jobs[base]['pose'], len(have), k, 100 * var))
    if not kept:
        die('no anchor has its template-shape example: nothing to fit')
    kmax = max(U.shape[0] for U in A_U)
    G = A_base[0].shape[0]
    Fdim = A_W[0].shape[1]
    basis = np.zeros((len(kept), kmax, G, 3))
    cmap = np.zeros((len(kept), kmax, Fdim))
    for i, (U, W) in enumerate(zip(A_U, A_W)):
        basis[i, :len(U)] = U
        cmap[i, :len(W)] = W

    # ---- clothing pose model: every template-shape example
    pose_names = [g[0] for g in man['grid']] + list(man['pose_jobs'])
    pose_names = [n for n in dict.fromkeys(pose_names) if n in res]
    P_rot = np.array([rot[jobs[n]['pose']] for n in pose_names])
    P_ex = np.array([res[n] for n in pose_names])

    # ---- binding, regions, Q, penetration data
    Wg = plan['binding_weights']
    order = np.argsort(-Wg, 1)[:, :MAX_INFLUENCES]
    sw = np.take_along_axis(Wg, order, 1)
    sw /= sw.sum(1, keepdims=True)
    names = bm.names
    R = np.zeros((G, len(REGIONS)))
    for g, (_, bones) in enumerate(REGIONS):
        for b in bones:
            R[:, g] += Wg[:, names.index(b)]
    R /= R.sum(1, keepdims=True)
    Q = R.T @ plan['sbar']                                           # Eq. 7: [regions, 3J]
    Q[:, np.repeat(bm.parents < 0, 3)] = 0.0                         # root: rigid, see gdb.plan
    G0 = gz['positions'].astype(np.float64)
    Vn = gmath.vertex_normals(bm.V0, bm.tris)
    cand = penetration_candidates(bm, G0, res, jobs, rot)
    clear = np.einsum('nd,nd->n', G0 - bm.V0[cand[:, 0]], Vn[cand[:, 0]])

    import garment as gtool
    T, meta = gtool.body_tensors(db)
    T.update({
        'garment/positions': G0.astype(np.float32),
        'garment/triangles': gz['triangles'].astype(np.int32),
        'garment/skin_joints': order.astype(np.int32),
        'garment/skin_weights': sw.astype(np.float32),
        'garment/regions': R.astype(np.float32),
        'garment/dof_weights': (Q / max(Q.max(), 1e-30)).astype(np.float32),
        'garment/body_vertices': cand.astype(np.int32),
        'garment/clearance': clear.astype(np.float32),
        'garment/pose_rotations': P_rot.astype(np.float32),
        'garment/pose_examples': P_ex.astype(np.float32),
        'garment/anchor_rotations': np.array(A_rot).astype(np.float32),
        'garment/anchor_base': np.array(A_base).astype(np.float32),
        'garment/anchor_basis': basis.astype(np.float32),
        'garment/anchor_map': cmap.astype(np.float32),
    })
    meta['kind'] = 'garment'
    meta['garment_features'] = kind
    meta['garment_regions'] = json.dumps([r[0] for r in REGIONS])
    meta['garment_damping'] = str(a.damping)
    meta['garment_margin'] = str(a.margin)
    meta['garment_top'] = str(a.top)
    meta['garment_power'] = str(a.power)
    meta['garment_anchor_jobs'] = json.dumps([man['grid'][s][0] for s in kept])
    meta['garment_pose_jobs'] = json.dumps(pose_names)
    out = a.out
    if a.repository:
        vdir = os.path.join(a.repository, a.name or 'garment')
        vers = [int(v) for v in os.listdir(vdir) if v.isdigit()] if os.path.isdir(vdir) else []
        vdir2 = os.path.join(vdir, str(max(vers, default=0) + 1))
        os.makedirs(vdir2, exist_ok=True)
        out = os.path.join(vdir2, 'model.safetensors')
        cfg = os.path.join(vdir, 'config.json')
        if not os.path.exists(cfg):
            with open(cfg, 'w') as f:
                json.dump({'kind': 'garment'}, f)
    if not out:
        die('fit: --out FILE or --repository DIR needed')
    stfile.write(out, T, meta)
    print('fit: %d anchors, %d pose examples, %d garment vertices, features %s, %.1f MB in %.1fs -> %s'
          % (len(kept), len(pose_names), G, kind, os.path.getsize(out) / 1e6, time.time() - t0, out))


def add_commands(sub):
    p = sub.add_parser('fit', help='fit a garment model from a simulated database')
    p.add_argument('db')
    p.add_argument('--out')
    p.add_argument('--repository', help='write REPO/NAME/<next version>/model.safetensors instead')
    p.add_argument('--name', default='garment')
    p.add_argument('--k', type=int, default=5, help='PCA components per clothing shape model')
    p.add_argument('--ridge', type=float, default=0.2, help='L2 weight of the beta -> coefficients map')
    p.add_argument('--features', default='auto', choices=['auto', 'linear', 'quadratic'])
    p.add_argument('--anchors', help='use only these anchors (indices into the plan), e.g. for Fig. 14')
    p.add_argument('--damping', type=float, default=0.5, help='Eq. 9 eta (0: none)')
    p.add_argument('--margin', type=float, default=0.005, help='penetration margin (m)')
    p.add_argument('--top', type=int, default=5, help='examples blended per region')
    p.add_argument('--power', type=float, default=3.0, help='k of W = 1/(D+eps)^k')
    p.add_argument('--allow-missing', action='store_true')
    p.add_argument('--max-inside', type=float, default=5.0,
                   help='leave out simulations with more than this %% of the garment inside the body')
    p.set_defaults(fn=cmd_fit)
    try:
        import geval
        geval.add_commands(sub)
    except ImportError:
        pass


def fit_args(db, out, **kw):
    """The arguments of `garment.py fit DB --out OUT` with defaults, for callers in Python."""
    import argparse
    sub = argparse.ArgumentParser().add_subparsers()
    add_commands(sub)
    a = sub.choices['fit'].parse_args([db, '--out', out])
    for k, v in kw.items():
        setattr(a, k, v)
    return a

# geval.py — held-out evaluation of a `garment` model (garment.py evaluate).
#
#   garment.py evaluate DB --model MODEL.safetensors [--deform bin/deform] [--json OUT.json]
#                          [--png OUT.png] [--anchor-counts 2,4,8] [--no-inside]
#
# For every held-out test job of DB (a (shape, pose) pair simulated by the
# same Blender setup, never used by the fit) it compares with the simulation:
#   ours                  the model, evaluated by bin/deform (the C runtime)
#   ours, no shape model  the same with parameters {"shape_model": false}
#   ours, no resolution   the same with {"resolve_penetration": false}
#   LBS of the rest garment   the shirt placed on the shaped body at rest,
#                         skinned to the pose with the binding weights
#   nearest example + LBS the database example nearest in pose (the plan's
#                         Eq. 11 metric), of the nearest training shape,
#                         skinned from its (shape, pose) to the query's
# and reports mean / max vertex error (cm) and the share of garment vertices
# inside the body (generalised winding number, exact for the closed body).
# It also re-evaluates ours in numpy (numpy_eval: the formula written out
# with dense matrices) and reports the largest difference from the C
# runtime, and with --anchor-counts refits with the first n anchors (the
# paper's Fig. 14).
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gdb  # noqa: E402
import gmath  # noqa: E402
import stfile  # noqa: E402


PASSES = 2

# ------------------------------------------------------------ numpy reference of the runtime
def numpy_eval(T, meta, beta, q, state=None, shape_model=True, resolve=True):
    """Eq. 4 + penetration, written out from the file's tensors (float64):
    dense per-vertex weights, explicit LBS matrices, a Python walk over the
    body's neighbours (docs/garment.md, "The runtime")."""
    J = len(T['joint_parents'])
    par = T['joint_parents']
    S = T['shape_deltas'].shape[0] if 'shape_deltas' in T else 0
    beta = np.zeros(S) if beta is None else np.asarray(beta, float)
    rest_t = T['joint_rest_translations'].astype(float)
    sd = T['joint_rest_translation_shapedirs'].astype(float) if S else np.zeros((0, J, 3))

    def skins(rot, b):
        """S_j = W_j(rot, b) T(-c_j(b)) ibm_j with identity rest rotations and unit scales
        (the garment body's convention; the file's rest rotations are checked)."""
        tr = rest_t + np.tensordot(b, sd, 1)
        R = gmath.quat_to_mat(rot)
        Wr, Wt = np.zeros((J, 3, 3)), np.zeros((J, 3))
        H = np.zeros((J, 3))  # shaped rest joint positions
        for j in range(J):
            if par[j] < 0:
                Wr[j], Wt[j], H[j] = R[j], tr[j], tr[j]
            else:
                Wr[j] = Wr[par[j]] @ R[j]
                Wt[j] = Wt[par[j]] + Wr[par[j]] @ tr[j]
                H[j] = H[par[j]] + tr[j]
        M = np.zeros((J, 3, 4))
        M[:, :, :3] = Wr
        M[:, :, 3] = Wt - np.einsum('jab,jb->ja', Wr, H)
        return M

    assert np.allclose(T['joint_rest_rotations'], [0, 0, 0, 1]) and np.allclose(T['joint_rest_scales'], 1)
    G = T['garment/positions'].shape[0]
    Wd = np.zeros((G, J))
    np.add.at(Wd, (np.arange(G)[:, None], T['garment/skin_joints']), T['garment/skin_weights'])
    Wd /= Wd.sum(1, keepdims=True)
    reg = T['garment/regions'].astype(float)
    reg /= reg.sum(1, keepdims=True)
    Q = T['garment/dof_weights'].astype(float)
    rv = gmath.quat_to_rotvec(q).ravel()
    Prot, Arot = T['garment/pose_rotations'], T['garment/anchor_rotations']
    P, A = len(Prot), len(Arot)
    rve = np.concatenate([gmath.quat_to_rotvec(Prot).reshape(P, -1), gmath.quat_to_rotvec(Arot).reshape(A, -1)])
    D = np.abs(rv[None] - rve) @ Q.T            # [P+A, R]
    D = D.T                                      # [R, P+A]
    eta = float(meta.get('garment_damping', 0.5))
    if state is not None and state.ravel()[0] >= 0 and eta > 0:
        D = eta * state.reshape(D.shape) + (1 - eta) * D
    top, power = int(float(meta.get('garment_top', 5))), float(meta.get('garment_power', 3))

    def weights(off, n):
        Wn = np.zeros((D.shape[0], n))
        for r in range(D.shape[0]):
            d = D[r, off:off + n]
            idx = np.argsort(d, kind='stable')[:min(top, n)]
            w = 1.0 / (d[idx] + 1e-6) ** power
            Wn[r, idx] = w / w.sum()
        return reg @ Wn                          # [G, n] per-vertex weights (Eq. 8)

    rest_rot = np.tile([0.0, 0.0, 0.0, 1.0], (J, 1))
    shaped = S > 0 and np.any(beta != 0)
    S0 = skins(q, np.zeros(S))
    Sb = skins(q, beta) if shaped else S0

    def rel(Sq, Se):
        out = np.zeros_like(Sq)
        for j in range(J):
            Ri = np.linalg.inv(Se[j, :, :3])
            out[j, :, :3] = Sq[j, :, :3] @ Ri
            out[j, :, 3] = Sq[j, :, 3] - out[j, :, :3] @ Se[j, :, 3]
        return out

    v = weights(0, P)
    f = np.zeros((G, 3))
    for p in range(P):
        if not v[:, p].any():
            continue
        f += v[:, p:p + 1] * gmath.lbs(T['garment/pose_examples'][p].astype(float), Wd, rel(S0, skins(Prot[p], np.zeros(S))))
    if shaped and shape_model and A > 0:
        w = weights(P, A)
        quad = meta.get('garment_features') == 'quadratic'
        feat = np.concatenate([beta, beta * beta]) if quad else beta
        for a in range(A):
            if not w[:, a].any():
                continue
            base = T['garment/anchor_base'][a].astype(float)
            coef = T['garment/anchor_map'][a].astype(float) @ feat
            ys = base + np.tensordot(coef, T['garment/anchor_basis'][a].astype(float), 1)
            t1 = gmath.lbs(ys, Wd, rel(Sb, skins(Arot[a], beta)))
            t0 = gmath.lbs(base, Wd, rel(S0, skins(Arot[a], np.zeros(S))))
            f += w[:, a:a + 1] * (t1 - t0)
    if resolve:
        # the posed body, the same LBS (identity rest rotations: rest -> posed = S)
        Vb = T['positions'].astype(float) + (np.tensordot(beta, T['shape_deltas'], 1) if S else 0)
        Wb = np.zeros((len(Vb), J))
        np.add.at(Wb, (np.arange(len(Vb))[:, None], T['skin_joints']), T['skin_weights'])
        Wb /= Wb.sum(1, keepdims=True)
        Pb = gmath.lbs(Vb, Wb, Sb)
        Nb = gmath.vertex_normals(Pb, T['triangles'].astype(np.int64))
        cand = T['garment/body_vertices']
        nb = body_neighbours(T['triangles'], len(Pb))
        h = np.clip(np.minimum(T['garment/clearance'], float(meta.get('garment_margin', 0.005))), 0, None)
        best = None
        for _ in range(PASSES):  # the second from where the first ended
            if best is None:
                d2 = ((f[:, None, :] - Pb[cand]) ** 2).sum(2)
                best = cand[np.arange(G), d2.argmin(1)]
            best = descend(f, Pb, best, nb)
            d = np.einsum('nd,nd->n', f - Pb[best], Nb[best])
            push = np.where(d < h, h - d, 0.0)
            f = f + push[:, None] * Nb[best]
    return f


def body_neighbours(tris, n):
    nb = [set() for _ in range(n)]
    for t in tris:
        for a in range(3):
            for b in range(3):
                if a != b:
                    nb[t[a]].add(int(t[b]))
    return [sorted(x) for x in nb]


def descend(Y, V, start, nb):
    """From each start vertex, walk to the neighbour nearest to Y while it
    gets nearer: the local nearest body vertex."""
    out = start.copy()
    for i, y in enumerate(Y):
        b = out[i]
        d = ((y - V[b]) ** 2).sum()
        while True:
            nbs = nb[b]
            dn = ((y - V[nbs]) ** 2).sum(1)
            k = int(dn.argmin())
            if dn[k] >= d:
                break
            b, d = nbs[k], dn[k]
        out[i] = b
    return out


# ------------------------------------------------------------ evaluation
def run_deform(deform, model, betas, rots, out, params=None, extra=()):
    with tempfile.TemporaryDirectory() as td:
        np.save(os.path.join(td, 'shape.npy'), betas.astype(np.float32))
        np.save(os.path.join(td, 'rot.npy'), rots.astype(np.float32))
        target = model
        if params is not None:  # a one-model repository with config parameters
            repo = os.path.join(td, 'repo')
            os.makedirs(os.path.join(repo, 'g', '1'))
            os.symlink(os.path.abspath(model), os.path.join(repo, 'g', '1', 'model.safetensors'))
            with open(os.path.join(repo, 'g', 'config.json'), 'w') as f:
                json.dump({'kind': 'garment', 'parameters': params}, f)
            target = os.path.join(repo, 'g')
        cmd = [deform, 'eval', target, '--input', 'shape=' + os.path.join(td, 'shape.npy'),
               '--input', 'joint_rotations=' + os.path.join(td, 'rot.npy'), '--out', out] + list(extra)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError('deform eval failed: ' + r.stdout)
    return np.load(out).astype(np.float64)


def errors(a, b):
    d = np.linalg.norm(a - b, axis=1) * 100.0  # cm
    return float(d.mean()), float(d.max())


def cmd_evaluate(a):
    db = os.path.abspath(a.db)
    man = json.load(open(os.path.join(db, 'manifest.json')))
    pz = np.load(os.path.join(db, 'poses.npz'))
    plan = np.load(os.path.join(db, 'plan.npz'))
    gz = np.load(os.path.join(db, 'garment.npz'))
    bm = gmath.BodyModel(os.path.join(db, 'body', 'body.npz'))
    rot = pz['rotations']
    jobs = {j['name']: j for j in man['jobs']}
    tests = [jobs[n] for n in man['test_jobs'] if gdb.job_state(db, jobs[n])[0] == 'ok']
    if not tests:
        print('garment: no finished test job in %s' % db, file=sys.stderr)
        return 1
    gt = [np.load(os.path.join(db, 'sims', t['name'] + '.npy')).astype(np.float64) for t in tests]
    betas = np.array([t['beta'] for t in tests])
    rots = np.array([rot[t['pose']] for t in tests])
    T, meta = stfile.read(a.model)
    tmp = tempfile.mkdtemp(prefix='garment-eval-')
    ours = run_deform(a.deform, a.model, betas, rots, os.path.join(tmp, 'ours.npy'))
    noshape = run_deform(a.deform, a.model, betas, rots, os.path.join(tmp, 'noshape.npy'), {'shape_model': False})
    nores = run_deform(a.deform, a.model, betas, rots, os.path.join(tmp, 'nores.npy'), {'resolve_penetration': False})
    ref = np.array([numpy_eval(T, meta, b, q) for b, q in zip(betas, rots)])
    c_vs_numpy = float(np.abs(ours - ref).max())

    # baselines
    Wg = plan['binding_weights']
    lbs_rest, nearest = [], []
    ex_names = [n for n in dict.fromkeys(sum(man['grid'], []) + man['pose_jobs'])
                if gdb.job_state(db, jobs[n])[0] == 'ok']
    sL = np.repeat(plan['joint_weights'], 3)
    ex_rv = np.array([gmath.quat_to_rotvec(rot[jobs[n]['pose']]).ravel() for n in ex_names])
    for b, q in zip(betas, rots):
        Y = gdb.garment_at_rest(bm, gz, b)
        lbs_rest.append(gmath.lbs(Y, Wg, bm.transforms(b, q)))
        rv = gmath.quat_to_rotvec(q).ravel()
        dpose = (sL * (ex_rv - rv) ** 2).sum(1)
        cands = np.where(dpose <= dpose.min() + 1e-12)[0]
        e = min(cands, key=lambda i: np.linalg.norm(np.asarray(jobs[ex_names[i]]['beta']) - b))
        je = jobs[ex_names[e]]
        Ye = np.load(os.path.join(db, 'sims', je['name'] + '.npy')).astype(np.float64)
        M = gmath.relative(bm.transforms(b, q), bm.transforms(je['beta'], rot[je['pose']]))
        nearest.append(gmath.lbs(Ye, Wg, M))
    methods = [('ours', ours), ('ours, no shape model', noshape), ('ours, no penetration resolution', nores),
               ('LBS of the rest garment', np.array(lbs_rest)), ('nearest example + LBS', np.array(nearest))]
    table = []
    for name, X in methods:
        e = np.array([errors(x, g) for x, g in zip(X, gt)])
        table.append(dict(method=name, mean_cm=float(e[:, 0].mean()), max_cm=float(e[:, 1].max()),
                          per_pair_mean_cm=[float(x) for x in e[:, 0]]))
    inside = {}
    if not a.no_inside:
        for name, X in [('simulation', gt)] + methods:
            fr = []
            for x, b, q in zip(X, betas, rots):
                fr.append(gmath.inside(x, bm.posed(b, q), bm.tris).mean())
            inside[name] = float(100 * np.mean(fr))
    counts = []
    if a.anchor_counts:
        import gfit
        for n in [int(x) for x in a.anchor_counts.split(',')]:
            if n > len(man['grid']):
                continue
            mp = os.path.join(tmp, 'a%d.safetensors' % n)
            fa = gfit.fit_args(db, mp, anchors=','.join(str(i) for i in range(n)), allow_missing=True)
            gfit.cmd_fit(fa)
            X = run_deform(a.deform, mp, betas, rots, os.path.join(tmp, 'a%d.npy' % n))
            e = np.array([errors(x, g) for x, g in zip(X, gt)])
            counts.append(dict(anchors=n, mean_cm=float(e[:, 0].mean()), max_cm=float(e[:, 1].max())))
    res = dict(db=db, model=os.path.abspath(a.model), pairs=len(tests), garment_vertices=int(ours.shape[1]),
               c_vs_numpy_m=c_vs_numpy, methods=table, inside_pct=inside, anchor_counts=counts,
               tests=[dict(name=t['name'], beta=t['beta'], pose=t['pose']) for t in tests])
    print('%d held-out pairs, %d garment vertices; C runtime vs numpy formula: %.2e m'
          % (len(tests), ours.shape[1], c_vs_numpy))
    print('%-34s %9s %9s %9s' % ('method', 'mean cm', 'max cm', 'inside %'))
    for r in table:
        print('%-34s %9.2f %9.2f %9s' % (r['method'], r['mean_cm'], r['max_cm'],
                                         '%.2f' % inside[r['method']] if r['method'] in inside else '-'))
    if 'simulation' in inside:
        print('%-34s %9s %9s %9.2f' % ('simulation (ground truth)', '', '', inside['simulation']))
    for c in counts:
        print('anchors %3d: mean %.2f cm, max %.2f cm' % (c['anchors'], c['mean_cm'], c['max_cm']))
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(res, f, indent=1)
    if a.png:
        k = min(len(tests), a.png_pairs)
        bodies, garments = [], []
        for i in range(k):
            B = bm.posed(betas[i], rots[i])
            for X in (gt[i], ours[i], np.array(lbs_rest)[i]):
                bodies.append(B)
                garments.append(X)
        cols = np.tile([[0.3, 0.6, 0.3, 1], [0.25, 0.45, 0.85, 1], [0.8, 0.35, 0.3, 1]], (k, 1))
        sc = os.path.join(tmp, 'scene.npz')
        np.savez(sc, body_triangles=bm.tris, garment_triangles=gz['triangles'], bodies=np.array(bodies),
                 garments=np.array(garments), cols=3, garment_colors=cols)
        subprocess.run([os.environ.get('BLENDER', 'blender'), '-b', '--factory-startup', '--python',
                        os.path.join(HERE, 'render.py'), '--', sc, os.path.abspath(a.png), '--size', '240',
                        '--torso'],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        print('wrote %s (a row per pair: simulation | ours | LBS of the rest garment)' % a.png)
    return 0


def add_commands(sub):
    p = sub.add_parser('evaluate', help='errors on the held-out simulations, against baselines')
    p.add_argument('db')
    p.add_argument('--model', required=True)
    p.add_argument('--deform', default=os.path.join(os.path.dirname(os.path.dirname(HERE)), 'bin', 'deform'))
    p.add_argument('--json')
    p.add_argument('--png')
    p.add_argument('--png-pairs', type=int, default=3)
    p.add_argument('--anchor-counts', help='refit with the first n anchors, e.g. 2,4,8 (Fig. 14)')
    p.add_argument('--no-inside', action='store_true', help='skip the (slow) inside-body measure')
    p.set_defaults(fn=cmd_evaluate)

# gdb.py — the garment database: plan (pose clustering, Eq. 11), the local
# pool that runs the simulations, status, and the Kubernetes Indexed Job.
# Used through tools/garment/garment.py (docs/garment.md has the commands).
#
# DESIGN
# A database directory holds everything a simulation needs and nothing it
# produces is needed to plan again:
#   DB/manifest.json   settings, training shapes, anchor poses, the template
#                      pose set, test pairs and the flat list of jobs
#   DB/body/           body.blend + body.npz (build_body.py)
#   DB/garment.npz     the shirt (build_garment.py)
#   DB/poses.npz       the whole pose pool (retarget.py): jobs index into it
#   DB/plan.npz        garment binding and sensitivities (for the fit)
#   DB/sims/NAME.npy   results, NAME.json written last (status "ok")
#   DB/progress.log    the pool's progress lines with ETA
# Jobs are independent (one Blender process each), so a pool, a cluster or a
# person re-running one job all produce the same files. A job is finished
# when its .json says "ok"; the pool skips those, so it resumes.
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gmath  # noqa: E402


# ------------------------------------------------------------ sensitivity
def binding(bm, G):
    """Garment skin weights [G,J]: those of the nearest body vertex (the
    paper's binding), and that vertex's index."""
    nv = gmath.nearest_vertex(G, bm.V0)
    return bm.W[nv], nv


def garment_at_rest(bm, gz, beta):
    V, _ = bm.shaped(beta)
    return gmath.place(V, bm.tris, gz['emb_tri'], gz['emb_bary'], gz['emb_off'], gz['emb_resid'])


def sensitivity(bm, gz, Wg, shapes, delta=1e-3):
    """s_bar [G, 3J]: mean over the training shapes of |dy/dtheta_m|, the
    displacement of each garment vertex per radian of each joint DOF m
    (joint m // 3, axis m % 3) at the rest pose, by forward differences of
    the garment's LBS (Eq. 7's s_bar; the paper differentiates its cloth
    model, which a database of a few dozen simulations cannot afford)."""
    J = bm.J
    out = np.zeros((len(Wg), 3 * J))
    for beta in shapes:
        Y = garment_at_rest(bm, gz, beta)
        for m in range(3 * J):
            q = np.tile([0.0, 0.0, 0.0, 1.0], (J, 1))
            e = np.zeros(3)
            e[m % 3] = delta
            q[m // 3] = gmath.rotvec_to_quat(e)
            Yd = gmath.lbs(Y, Wg, bm.transforms(beta, q))
            out[:, m] += np.linalg.norm(Yd - Y, axis=1) / delta
    return out / len(shapes)


# ------------------------------------------------------------ clustering
def pose_features(rot):
    """[P, 3J] local rotation vectors: the joint-angle DOFs of Eq. 7/11."""
    return gmath.quat_to_rotvec(rot).reshape(len(rot), -1)


def weighted_kmeans(X, w, k, seed, restarts=5, iters=100):
    """k-means of rows of X under the metric sum_d w_d (x_d - y_d)^2;
    k-means++ seeding, best of `restarts`. Returns (medoid row indices [k],
    labels [P], inertia): each cluster is represented by its member closest
    to the centre, so an anchor is a real captured pose."""
    Xw = X * np.sqrt(w)[None, :]
    rng = np.random.default_rng(seed)
    best = None
    k = min(k, len(X))
    for _ in range(restarts):
        C = [Xw[rng.integers(len(Xw))]]
        for _ in range(1, k):
            d = np.min(((Xw[:, None, :] - np.array(C)[None]) ** 2).sum(2), 1)
            C.append(Xw[rng.choice(len(Xw), p=d / d.sum())] if d.sum() > 0 else Xw[rng.integers(len(Xw))])
        C = np.array(C)
        for _ in range(iters):
            d = ((Xw[:, None, :] - C[None]) ** 2).sum(2)
            lab = d.argmin(1)
            Cn = np.array([Xw[lab == c].mean(0) if (lab == c).any() else C[c] for c in range(k)])
            if np.allclose(Cn, C):
                break
            C = Cn
        inertia = d[np.arange(len(Xw)), lab].sum()
        if best is None or inertia < best[2]:
            best = (C, lab, inertia)
    C, lab, inertia = best
    med = []
    for c in range(k):
        idx = np.where(lab == c)[0]
        if len(idx) == 0:
            continue
        med.append(int(idx[((Xw[idx] - C[c]) ** 2).sum(1).argmin()]))
    return np.array(sorted(set(med))), lab, float(inertia)


# ------------------------------------------------------------ plan
def training_shapes(S, values, axes=None):
    """beta = 0, plus each value on each of the first `axes` (default all S)
    shape axes (the paper: 4 axes x (-2,-1,1,2) + 0 = 17 shapes)."""
    out = [np.zeros(S)]
    for s in range(S if axes is None else min(axes, S)):
        for v in values:
            b = np.zeros(S)
            b[s] = v
            out.append(b)
    return out


def plan(db, anchors, pose_set, values, n_test, seed, settings, axes=None, log=print):
    bm = gmath.BodyModel(os.path.join(db, 'body', 'body.npz'))
    gz = np.load(os.path.join(db, 'garment.npz'))
    pz = np.load(os.path.join(db, 'poses.npz'))
    rot = pz['rotations']
    shapes = training_shapes(bm.S, values, axes)
    Wg, nv = binding(bm, gz['positions'].astype(float))
    t0 = time.time()
    sbar = sensitivity(bm, gz, Wg, shapes)
    sL = sbar.reshape(len(Wg), bm.J, 3).sum((0, 2))  # Eq. 11
    # The root's rotation is the whole character's orientation: a rigid
    # motion that the LBS of Eq. 4 transports exactly, however large its
    # sensitivity; it does not separate poses for the garment.
    sL[bm.parents < 0] = 0.0
    log('plan: sensitivities of %d garment vertices x %d DOFs over %d shapes in %.1fs'
        % (len(Wg), 3 * bm.J, len(shapes), time.time() - t0))
    w = np.repeat(sL / sL.sum() * bm.J, 3)
    X = pose_features(rot)
    anc, lab, inertia = weighted_kmeans(X, w, anchors, seed)
    pset, _, _ = weighted_kmeans(X, w, pose_set, seed + 1) if pose_set > 0 else (np.array([], int), None, 0)
    log('plan: %d poses -> %d anchor poses (weighted k-means, inertia %.3g), pose set %d'
        % (len(X), len(anc), inertia, len(pset)))
    used = set(anc.tolist()) | set(pset.tolist())
    rng = np.random.default_rng(seed + 2)
    far = [i for i in range(len(X)) if all(abs(i - u) > 2 for u in used)]
    tposes = rng.choice(far, size=min(n_test, len(far)), replace=False) if n_test > 0 else []
    vmax = max(abs(v) for v in values) if values else 1.0
    nax = bm.S if axes is None else min(axes, bm.S)
    tests = [(np.concatenate([rng.uniform(-vmax, vmax, nax) * (rng.random(nax) < 0.75), np.zeros(bm.S - nax)]),
              int(p)) for p in tposes]

    jobs, seen = [], {}

    def job(name, role, beta, pose):
        key = (tuple(np.round(beta, 6)), int(pose))
        if key in seen:
            return seen[key]
        jobs.append(dict(index=len(jobs), name=name, role=role, beta=[float(b) for b in beta],
                         pose=int(pose)))
        seen[key] = name
        return name

    grid = [[job('a%03d_s%02d' % (a, k), 'shape', shapes[k], p) for k in range(len(shapes))]
            for a, p in enumerate(anc)]
    pose_jobs = [job('p%03d' % i, 'pose', shapes[0], p) for i, p in enumerate(pset)]
    test_jobs = [job('t%03d' % i, 'test', b, p) for i, (b, p) in enumerate(tests)]
    man = dict(format='deformd-garment-db', version=1, settings=settings,
               shapes=[s.tolist() for s in shapes], shape_values=list(values), shape_axes=nax,
               anchor_poses=anc.tolist(), pose_set=pset.tolist(),
               grid=grid, pose_jobs=pose_jobs, test_jobs=test_jobs, seed=seed, jobs=jobs)
    with open(os.path.join(db, 'manifest.json'), 'w') as f:
        json.dump(man, f, indent=1)
    np.savez(os.path.join(db, 'plan.npz'), binding_weights=Wg, binding_vertex=nv, sbar=sbar,
             joint_weights=sL, pose_labels=lab)
    log('plan: %d jobs (%d anchors x %d shapes, %d template poses, %d tests) -> %s/manifest.json'
        % (len(jobs), len(anc), len(shapes), len(pset), len(tests), db))
    return man


# ------------------------------------------------------------ status, pool
def job_state(db, job):
    p = os.path.join(db, 'sims', job['name'] + '.json')
    if not os.path.exists(p):
        return 'pending', None
    try:
        info = json.load(open(p))
    except (OSError, ValueError):
        return 'pending', None
    return ('ok' if info.get('status') == 'ok' else 'failed'), info


def status(db):
    man = json.load(open(os.path.join(db, 'manifest.json')))
    counts = dict(ok=0, failed=0, pending=0)
    secs, failed = [], []
    for j in man['jobs']:
        s, info = job_state(db, j)
        counts[s] += 1
        if s == 'ok':
            secs.append(info['seconds'])
        if s == 'failed':
            failed.append('%s (%s)' % (j['name'], info.get('error', '?')))
    return man, counts, secs, failed


def fmt_time(s):
    s = int(round(s))
    return '%dh%02dm' % (s // 3600, s % 3600 // 60) if s >= 3600 else '%dm%02ds' % (s // 60, s % 60)


def run_pool(db, workers=1, niceness=19, blender='blender', batch=1, only=None, log_file=None):
    """Run every unfinished job, `workers` Blender processes at a time (one
    Blender cloth process already keeps about 1.25 cores busy; on 2 cores
    two of them are slower than one), each given `batch` jobs. Progress
    lines with ETA go to stdout and DB/progress.log. Returns the number of
    jobs that failed."""
    man = json.load(open(os.path.join(db, 'manifest.json')))
    todo = [j for j in man['jobs'] if job_state(db, j)[0] != 'ok' and (only is None or j['name'] in only)]
    total = len(man['jobs'])
    done0 = total - len(todo)
    os.makedirs(os.path.join(db, 'sims'), exist_ok=True)
    logf = open(log_file or os.path.join(db, 'progress.log'), 'a')

    def log(msg):
        line = '%s %s' % (time.strftime('%Y-%m-%d %H:%M:%S'), msg)
        print(line, flush=True)
        logf.write(line + '\n')
        logf.flush()

    log('pool: %d jobs, %d finished, %d to run, %d worker(s), nice %d'
        % (total, done0, len(todo), workers, niceness))
    chunks = [todo[i:i + batch] for i in range(0, len(todo), batch)]
    running, t0, finished, failed = [], time.time(), 0, 0
    stop = {'flag': False}

    def on_signal(sig, frm):
        stop['flag'] = True
    old = signal.signal(signal.SIGTERM, on_signal)
    try:
        while chunks or running:
            while chunks and len(running) < workers and not stop['flag']:
                ch = chunks.pop(0)
                cmd = ['nice', '-n', str(niceness), blender, '-b', '--factory-startup', '--python',
                       os.path.join(HERE, 'simulate.py'), '--', db] + [j['name'] for j in ch]
                out = open(os.path.join(db, 'sims', ch[0]['name'] + '.log'), 'w')
                running.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), ch, out))
            if stop['flag']:
                break  # the finally clause stops the running simulations
            time.sleep(0.5)
            for r in list(running):
                p, ch, out = r
                if p.poll() is None:
                    continue
                running.remove(r)
                out.close()
                for j in ch:
                    s, info = job_state(db, j)
                    if s != 'ok':
                        failed += 1
                        s = 'failed'
                    finished += 1
                    el = time.time() - t0
                    left = len(todo) - finished
                    eta = el / finished * left
                    log('[%d/%d] %s %s %s | elapsed %s, ETA %s (%d left)'
                        % (done0 + finished, total, j['name'], s,
                           ('%.1fs sim, inside %.2f%%' % (info['sim_seconds'], info['inside_pct_quick'])
                            if s == 'ok' else (info or {}).get('error', 'no result (see sims/%s.log)' % ch[0]['name'])),
                           fmt_time(el), fmt_time(eta), left))
    except KeyboardInterrupt:
        stop['flag'] = True
    finally:
        signal.signal(signal.SIGTERM, old)
        for p, ch, out in running:
            p.terminate()
            p.wait()
            out.close()
        if stop['flag']:
            log('pool: stopped; %d of %d jobs finished (run again to resume)'
                % (done0 + finished - failed, total))
        logf.close()
    return failed


# ------------------------------------------------------------ kubernetes
def k8s_manifest(db, image, parallelism, claim, db_path, name, cpu):
    man = json.load(open(os.path.join(db, 'manifest.json')))
    n = len(man['jobs'])
    return f"""# Kubernetes Indexed Job: one completion index per garment simulation
# ({n} jobs of {os.path.basename(os.path.abspath(db))}/manifest.json). Generated by
#   tools/garment/garment.py k8s {db} --image {image}
# The database directory (manifest, body, garment, poses) must be on the
# volume '{claim}' at {db_path}; results land in {db_path}/sims/. A job that
# already has an "ok" .json is skipped by the container, so re-applying this
# Job after a partial run only simulates what is missing.
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  completionMode: Indexed
  completions: {n}
  parallelism: {parallelism}
  backoffLimit: {max(6, n // 10)}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: simulate
        image: {image}
        command: ["/bin/sh", "-c"]
        args:
        - >-
          python3 /opt/deformd/tools/garment/garment.py sim {db_path} "$JOB_COMPLETION_INDEX"
        resources:
          requests: {{cpu: "{cpu}", memory: "1Gi"}}
          limits: {{memory: "2Gi"}}
        volumeMounts:
        - {{name: db, mountPath: {os.path.dirname(db_path.rstrip('/')) or '/'}}}
      volumes:
      - name: db
        persistentVolumeClaim: {{claimName: {claim}}}
"""

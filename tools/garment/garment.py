#!/usr/bin/python3
# garment.py — the garment tool chain (docs/garment.md): body model, poses,
# database plan, simulation pool, Kubernetes Job, fit, evaluation.
#
#   tools/garment/garment.py build DB [--cuts 0] [--bvh F.bvh] [--stride 4]
#   tools/garment/garment.py body-model DB --out BODY.safetensors
#   tools/garment/garment.py plan DB [--anchors 8] [--pose-set 12] [--shape-values 1.5] [--test 6]
#   tools/garment/garment.py run DB [--workers 1] [--nice 19] [--batch 1]
#   tools/garment/garment.py status DB
#   tools/garment/garment.py sim DB JOB...
#   tools/garment/garment.py k8s DB --image IMAGE [--parallelism 16] [--claim C] [--path P]
#   tools/garment/garment.py fit DB --out MODEL.safetensors [--k 5] [--allow-missing]
#   tools/garment/garment.py evaluate DB --model MODEL.safetensors [--deform bin/deform]
#
# Runs with Debian's python3 + numpy; Blender (3.4, headless) does the
# geometry that needs it (build_body.py, build_garment.py, retarget.py,
# simulate.py, render.py). Exit status: 0 ok, 1 failure, 2 usage.
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gdb  # noqa: E402
import gmath  # noqa: E402
import stfile  # noqa: E402

BLENDER = os.environ.get('BLENDER', 'blender')
DEFAULT_BVH = '/usr/share/assimp/models/BVH/01_01.bvh'


def die(msg, code=1):
    print('garment: ' + msg, file=sys.stderr)
    sys.exit(code)


def blender(script, *args, quiet=True, strict=True):
    cmd = [BLENDER, '-b', '--factory-startup', '--python', os.path.join(HERE, script), '--'] + [str(a) for a in args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(script.split('.')[0].replace('_', '_') + ':')
             or 'Error' in ln or 'Traceback' in ln]
    if r.returncode != 0 or (strict and any('Traceback' in ln for ln in r.stdout.splitlines())):
        sys.stderr.write(r.stdout[-4000:])
        die('%s failed (exit %d)' % (script, r.returncode))
    for ln in lines:
        if not quiet or not ln.startswith('EGL'):
            print(ln)
    return r.stdout


def need_db(db, what=('manifest.json',)):
    for w in what:
        if not os.path.exists(os.path.join(db, w)):
            die('%s: no %s (run `garment.py %s` first)' % (db, w, 'plan' if w == 'manifest.json' else 'build'))


# ------------------------------------------------------------ build
def cmd_build(a):
    db = os.path.abspath(a.db)
    os.makedirs(os.path.join(db, 'body'), exist_ok=True)
    t = time.time()
    blender('build_body.py', os.path.join(db, 'body'))
    blender('build_garment.py', '--body', os.path.join(db, 'body'), '--out', os.path.join(db, 'garment.npz'),
            '--cuts', a.cuts, '--offset', a.offset)
    parts = []
    for i, bvh in enumerate(a.bvh or [DEFAULT_BVH]):
        if not os.path.exists(bvh):
            die('no such BVH file: ' + bvh)
        out = os.path.join(db, 'poses_%d.npz' % i)
        blender('retarget.py', '--body', os.path.join(db, 'body'), '--bvh', bvh, '--out', out, '--stride', a.stride)
        parts.append(np.load(out))
    rot = np.concatenate([p['rotations'] for p in parts])
    frames = np.concatenate([p['frames'] for p in parts])
    src = np.concatenate([[str(p['source'])] * len(p['frames']) for p in parts])
    np.savez(os.path.join(db, 'poses.npz'), rotations=rot, frames=frames, source=src,
             joint_names=parts[0]['joint_names'], stride=int(a.stride))
    for i in range(len(parts)):
        os.remove(os.path.join(db, 'poses_%d.npz' % i))
    print('build: %s: body, garment, %d poses in %.0fs' % (db, len(rot), time.time() - t))


# ------------------------------------------------------------ body model
def body_tensors(db, clip=True):
    """The body as a `rigged` model with shape blend shapes (docs/rigged.md)."""
    z = np.load(os.path.join(db, 'body', 'body.npz'))
    bm = gmath.BodyModel(os.path.join(db, 'body', 'body.npz'))
    V0, SD, tris = bm.V0, bm.SD, bm.tris
    N0 = gmath.vertex_normals(V0, tris)
    SN = np.array([gmath.vertex_normals(V0 + SD[s], tris) - N0 for s in range(bm.S)])
    par = bm.parents
    H, HD = bm.H0, bm.HD
    J = bm.J
    rest_t = np.array([H[j] - (H[par[j]] if par[j] >= 0 else 0) for j in range(J)])
    sdirs = np.array([[HD[s, j] - (HD[s, par[j]] if par[j] >= 0 else 0) for j in range(J)] for s in range(bm.S)])
    ibm = np.tile(np.eye(4), (J, 1, 1))
    ibm[:, :3, 3] = -H
    T = dict(positions=V0.astype(np.float32), triangles=tris.astype(np.int32), normals=N0.astype(np.float32),
             shape_deltas=SD.astype(np.float32), shape_normal_deltas=SN.astype(np.float32),
             joint_parents=par.astype(np.int32), joint_rest_translations=rest_t.astype(np.float32),
             joint_rest_rotations=np.tile([0, 0, 0, 1], (J, 1)).astype(np.float32),
             joint_rest_scales=np.ones((J, 3), np.float32), inverse_bind_matrices=ibm.astype(np.float32),
             joint_rest_translation_shapedirs=sdirs.astype(np.float32),
             skin_joints=z['skin_joints'].astype(np.int32), skin_weights=z['skin_weights'].astype(np.float32))
    meta = dict(kind='rigged', format_version='1', skinning='lbs', joint_names=json.dumps(bm.names),
                shape_names=json.dumps(bm.shape_names))
    pz = os.path.join(db, 'poses.npz')
    if clip and os.path.exists(pz):
        p = np.load(pz)
        src = p['source']
        src = [str(src)] * len(p['rotations']) if src.ndim == 0 else [str(s) for s in src]
        names = []
        for name in dict.fromkeys(src):
            idx = [i for i, s in enumerate(src) if s == name]
            c = len(names)
            stride = int(p['stride']) if 'stride' in p else 4
            T['clip/%d/times' % c] = (np.arange(len(idx)) * stride / 120.0).astype(np.float32)  # CMU: 120 fps
            T['clip/%d/rotations' % c] = p['rotations'][idx].astype(np.float32)
            names.append(os.path.splitext(name)[0])
        meta['clips'] = json.dumps(names)
    return T, meta


def cmd_body_model(a):
    db = os.path.abspath(a.db)
    need_db(db, ('body/body.npz',))
    T, meta = body_tensors(db, clip=not a.no_clip)
    stfile.write(a.out, T, meta)
    print('body-model: %d vertices, %d shapes, %d joints, clips %s -> %s'
          % (len(T['positions']), len(T['shape_deltas']), len(T['joint_parents']), meta.get('clips', '[]'), a.out))


# ------------------------------------------------------------ plan, run, status, sim, k8s
def cmd_plan(a):
    db = os.path.abspath(a.db)
    need_db(db, ('body/body.npz', 'garment.npz', 'poses.npz'))
    if os.path.exists(os.path.join(db, 'manifest.json')) and not a.force:
        die('%s/manifest.json exists (--force replaces it; results in sims/ are kept and '
            'reused where a job name still means the same job)' % db)
    settings = dict(gdb_defaults())
    for k in ('quality', 'ramp', 'hold', 'rest'):
        v = getattr(a, k)
        if v is not None:
            settings[k] = v
    values = [float(v) for v in a.shape_values.split(',')]
    gdb.plan(db, a.anchors, a.pose_set, values, a.test, a.seed, settings, axes=a.shape_axes)


def gdb_defaults():
    return dict(rest=3, ramp=20, hold=7, quality=10)


def cmd_run(a):
    db = os.path.abspath(a.db)
    need_db(db)
    if shutil.which(BLENDER) is None:
        die('blender not found (apt-get install blender, or BLENDER=/path/to/blender)')
    failed = gdb.run_pool(db, workers=a.workers, niceness=a.nice, blender=BLENDER, batch=a.batch)
    man, counts, secs, fl = gdb.status(db)
    print('run: %(ok)d ok, %(failed)d failed, %(pending)d pending' % counts)
    return 1 if failed else 0


def cmd_status(a):
    db = os.path.abspath(a.db)
    need_db(db)
    man, counts, secs, failed = gdb.status(db)
    n = len(man['jobs'])
    print('%s: %d jobs: %d ok, %d failed, %d pending' % (db, n, counts['ok'], counts['failed'], counts['pending']))
    if secs:
        m = float(np.mean(secs))
        print('per simulation: mean %.1fs, min %.1fs, max %.1fs; remaining at that rate: %s (one process)'
              % (m, min(secs), max(secs), gdb.fmt_time(m * (n - counts['ok']))))
    for f in failed:
        print('failed: ' + f)


def cmd_sim(a):
    """One or more jobs, skipping finished ones (what a cluster's pod runs)."""
    db = os.path.abspath(a.db)
    need_db(db)
    man = json.load(open(os.path.join(db, 'manifest.json')))
    names = []
    for x in a.jobs:
        if x.isdigit():
            if int(x) >= len(man['jobs']):
                die('job index %s out of range [0,%d)' % (x, len(man['jobs'])))
            j = man['jobs'][int(x)]
        else:
            j = next((j for j in man['jobs'] if j['name'] == x), None)
            if j is None:
                die('no job named ' + x)
        if gdb.job_state(db, j)[0] == 'ok':
            print('sim: %s already finished' % j['name'])
            continue
        names.append(j['name'])
    if names:
        out = blender('simulate.py', db, *names, strict=False)
        if any('failed' in ln for ln in out.splitlines() if ln.startswith('simulate:')):
            return 1
    return 0


def cmd_k8s(a):
    db = os.path.abspath(a.db)
    need_db(db)
    sys.stdout.write(gdb.k8s_manifest(db, a.image, a.parallelism, a.claim, a.path, a.name, a.cpu))


def main():
    ap = argparse.ArgumentParser(prog='garment.py', description='garment database and model tools (docs/garment.md)')
    sub = ap.add_subparsers(dest='cmd', required=True)
    p = sub.add_parser('build', help='body, shirt and retargeted poses into DB')
    p.add_argument('db')
    p.add_argument('--cuts', type=int, default=0, help='shirt subdivisions: 0 1290, 1 4974, 2 ~11k vertices')
    p.add_argument('--offset', type=float, default=0.015, help='shirt offset from the body (m)')
    p.add_argument('--bvh', action='append', help='BVH file(s) (default: CMU 01_01 from assimp-testmodels)')
    p.add_argument('--stride', type=int, default=4, help='take every n-th BVH frame')
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser('body-model', help='the body as a rigged model with a shape input')
    p.add_argument('db')
    p.add_argument('--out', required=True)
    p.add_argument('--no-clip', action='store_true', help='leave the retargeted mocap clip out')
    p.set_defaults(fn=cmd_body_model)
    p = sub.add_parser('plan', help='cluster poses, choose anchors and tests, write the manifest')
    p.add_argument('db')
    p.add_argument('--anchors', type=int, default=8)
    p.add_argument('--pose-set', type=int, default=12, help='template-body poses for the clothing pose model')
    p.add_argument('--shape-values', default='1.5', help='values put on each shape axis (paper: -2,-1,1,2)')
    p.add_argument('--shape-axes', type=int, help='vary only the first N shape axes (default: all)')
    p.add_argument('--test', type=int, default=6, help='held-out (shape, pose) pairs')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--quality', type=int)
    p.add_argument('--ramp', type=int)
    p.add_argument('--hold', type=int)
    p.add_argument('--rest', type=int)
    p.add_argument('--force', action='store_true')
    p.set_defaults(fn=cmd_plan)
    p = sub.add_parser('run', help='run unfinished simulations locally (resumes)')
    p.add_argument('db')
    p.add_argument('--workers', type=int, default=1)
    p.add_argument('--nice', type=int, default=19)
    p.add_argument('--batch', type=int, default=1, help='jobs per Blender process')
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser('status', help='finished / failed / pending jobs, time per simulation')
    p.add_argument('db')
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser('sim', help='simulate jobs by index or name (skips finished ones)')
    p.add_argument('db')
    p.add_argument('jobs', nargs='+')
    p.set_defaults(fn=cmd_sim)
    p = sub.add_parser('k8s', help='print a Kubernetes Indexed Job for the manifest')
    p.add_argument('db')
    p.add_argument('--image', required=True)
    p.add_argument('--parallelism', type=int, default=16)
    p.add_argument('--claim', default='garment-db', help='PersistentVolumeClaim holding the database')
    p.add_argument('--path', default='/data/db', help='the database directory inside the container')
    p.add_argument('--name', default='garment-db')
    p.add_argument('--cpu', default='1250m', help='CPU request per pod (Blender cloth uses ~1.25 cores)')
    p.set_defaults(fn=cmd_k8s)
    try:
        import gfit
        gfit.add_commands(sub)
    except ImportError:
        pass
    a = ap.parse_args()
    sys.exit(a.fn(a) or 0)


if __name__ == '__main__':
    main()

# simulate.py — one garment database job (or several) in headless Blender cloth.
#
#   blender -b --factory-startup --python tools/garment/simulate.py -- DB JOB [JOB ...]
#
# JOB is a job index into DB/manifest.json or a job name; "$JOB_COMPLETION_INDEX"
# (a Kubernetes Indexed Job's variable) may be passed as an index. For each job
# it writes DB/sims/<name>.npy (the garment's final frame, [G,3] float32, world
# space of the posed body) and DB/sims/<name>.json (status, seconds, checks),
# the .json last, so a job with a .json whose status is "ok" is finished.
#
# DESIGN
# A job is (shape beta, pose). The body gets shape beta (shape keys, and the
# armature's rest bones at J(beta)); the shirt (DB/garment.npz, one topology)
# is placed on that body at rest through its embedding (gmath.place); the body
# stays at rest for `rest` frames, turns to the pose over `ramp` frames and
# holds it for `hold` frames while Blender's cloth drapes the shirt; the last
# frame is the example. Settings (manifest "settings") default to what works
# on a 5k-vertex shirt: cloth quality 10, mass 0.15, stiffness 15, bending
# 0.5, body collision 5 mm, friction 0.5, no self-collision; quality 5 lets
# a raised arm pass through the sleeve.
# Checks written to the .json: non-finite values (status "failed"); the share
# of garment vertices inside the posed body (nearest-face side test: a quick
# check, docs/garment.md has the exact measure); and the largest distance
# between Blender's posed body and the body model's own LBS of the same
# (beta, pose), which must stay at float round-off: the examples are only
# usable if the runtime poses the body exactly as the simulation did.
import json
import os
import sys
import time
import traceback

import bpy
import numpy as np
from mathutils import Vector
from mathutils.bvhtree import BVHTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmath  # noqa: E402
from bl_util import Body, eval_mesh, script_args  # noqa: E402

DEFAULTS = dict(rest=3, ramp=20, hold=7, quality=10, mass=0.15, stiffness=15.0, bending=0.5,
                friction=0.5, thickness=0.005, distance=0.005, collision_quality=2)


def main():
    a = script_args()
    if len(a) < 2:
        sys.exit('usage: simulate.py -- DB JOB [JOB ...]   (JOB: index or name)')
    db = os.path.abspath(a[0])
    man = json.load(open(os.path.join(db, 'manifest.json')))
    jobs = man['jobs']
    by_name = {j['name']: i for i, j in enumerate(jobs)}
    todo = []
    for x in a[1:]:
        if x.lstrip('-').isdigit():
            i = int(x)
            if not 0 <= i < len(jobs):
                sys.exit('simulate: job index %d out of range [0,%d)' % (i, len(jobs)))
        elif x in by_name:
            i = by_name[x]
        else:
            sys.exit('simulate: no job named %r in %s' % (x, db))
        todo.append(i)
    st = dict(DEFAULTS)
    st.update(man.get('settings', {}))
    body = Body(os.path.join(db, 'body', 'body.blend'), os.path.join(db, 'body', 'body.npz'))
    bmodel = gmath.BodyModel(os.path.join(db, 'body', 'body.npz'))
    gz = np.load(os.path.join(db, 'garment.npz'))
    poses = np.load(os.path.join(db, 'poses.npz'))['rotations']
    os.makedirs(os.path.join(db, 'sims'), exist_ok=True)
    col = body.obj.modifiers.new('Collision', 'COLLISION')  # after the Armature modifier
    body.obj.collision.thickness_outer = st['thickness']
    body.obj.collision.cloth_friction = st['friction']
    for i in todo:
        run_job(db, jobs[i], st, body, bmodel, gz, poses)
    del col


def run_job(db, job, st, body, bmodel, gz, poses):
    name = job['name']
    stem = os.path.join(db, 'sims', name)
    t0 = time.time()
    info = dict(name=name, index=job.get('index'), beta=job['beta'], pose=job['pose'],
                blender=bpy.app.version_string, settings=st)
    try:
        beta = np.asarray(job['beta'], float)
        q = poses[job['pose']]
        sc = bpy.context.scene
        nf = st['rest'] + st['ramp'] + st['hold']
        sc.frame_start, sc.frame_end = 1, nf
        body.set_shape(beta)
        rig = body.rig
        rig.animation_data_clear()
        body.set_pose(None)
        for pb in rig.pose.bones:
            pb.keyframe_insert('rotation_quaternion', frame=1)
            pb.keyframe_insert('rotation_quaternion', frame=st['rest'])
        body.set_pose(q)
        for pb in rig.pose.bones:
            pb.keyframe_insert('rotation_quaternion', frame=st['rest'] + st['ramp'])
        sc.frame_set(1)

        Vb, _ = bmodel.shaped(beta)
        G0 = gmath.place(Vb, bmodel.tris, gz['emb_tri'], gz['emb_bary'], gz['emb_off'],
                         gz['emb_resid'])
        for o in [o for o in bpy.data.objects if o.name.startswith('Garment')]:
            bpy.data.objects.remove(o)
        me = bpy.data.meshes.new('Garment')
        me.from_pydata([tuple(p) for p in G0], [], [tuple(int(k) for k in t) for t in gz['triangles']])
        me.update()
        g = bpy.data.objects.new('Garment', me)
        sc.collection.objects.link(g)
        cm = g.modifiers.new('Cloth', 'CLOTH')
        cs, cc = cm.settings, cm.collision_settings
        cs.quality = int(st['quality'])
        cs.mass = st['mass']
        cs.air_damping = 1.0
        cs.tension_stiffness = cs.compression_stiffness = cs.shear_stiffness = st['stiffness']
        cs.bending_stiffness = st['bending']
        cs.tension_damping = cs.compression_damping = cs.shear_damping = 5.0
        cs.bending_damping = 0.5
        cc.distance_min = st['distance']
        cc.collision_quality = int(st['collision_quality'])
        cc.use_self_collision = False
        cm.point_cache.frame_start, cm.point_cache.frame_end = 1, nf
        ts, cs = time.time(), time.process_time()
        for f in range(1, nf + 1):
            sc.frame_set(f)
        info['sim_seconds'] = round(time.time() - ts, 2)
        info['sim_cpu_seconds'] = round(time.process_time() - cs, 2)  # all threads
        info['load_average'] = os.getloadavg()[0]
        G = eval_mesh(g)
        B = eval_mesh(body.obj)
        info['garment_vertices'] = len(G)
        if not np.isfinite(G).all():
            raise RuntimeError('the simulation produced non-finite positions')
        info['max_move_m'] = float(np.linalg.norm(G - G0, axis=1).max())
        ref = bmodel.posed(beta, q)
        info['body_vs_model_m'] = float(np.abs(B - ref).max())
        tree = BVHTree.FromPolygons([Vector(p) for p in B], [list(map(int, t)) for t in bmodel.tris])
        ins = 0
        for p in G:
            loc, nrm, fi, d = tree.find_nearest(Vector(p))
            ins += (Vector(p) - loc).dot(nrm) < 0
        info['inside_pct_quick'] = round(100.0 * ins / len(G), 3)
        np.save(stem + '.npy', G.astype(np.float32))
        info['status'] = 'ok'
    except Exception as e:  # the job fails, the process goes on with the next one
        info['status'] = 'failed'
        info['error'] = '%s: %s' % (type(e).__name__, e)
        traceback.print_exc()
    info['seconds'] = round(time.time() - t0, 2)
    with open(stem + '.json.tmp', 'w') as f:
        json.dump(info, f, indent=1)
    os.replace(stem + '.json.tmp', stem + '.json')
    print('simulate: %s %s in %.1fs (sim %.1fs) inside %.2f%% body-vs-model %.1e m'
          % (name, info['status'], info['seconds'], info.get('sim_seconds', 0),
             info.get('inside_pct_quick', -1), info.get('body_vs_model_m', -1)), flush=True)


main()

# retarget.py — CMU mocap (BVH) onto the garment body's skeleton.
#
#   blender -b --factory-startup --python tools/garment/retarget.py -- \
#       --body DIR --bvh FILE.bvh --out POSES.npz [--stride 4] [--render PNG --show a,b,..]
#
# Writes POSES.npz: rotations [F,J,4] float32 (local x,y,z,w in the body
# model's convention, bl_util.py), frames [F] (BVH frame numbers, 1-based as
# Blender counts them), source (the BVH path), joint_names [J].
#
# DESIGN
# Bone mapping by role (CMU skeleton names). For each mapped bone the
# source's armature-space delta D_src = R_posed * R_rest^-1 is taken in the
# world, and the target's world delta is D = D_src * C, where C rotates the
# target bone's rest direction onto the source bone's rest direction: the
# CMU rest is a T-pose, the body's an A-pose, so without C the arms would
# stay 40-odd degrees low. Spine, neck and head get no calibration (their
# rest directions agree). The source's heading (yaw of the pelvis) is
# removed so every pose faces -Y; root translation is dropped (the body's
# pelvis stays where it is). Local rotations are then q_j = D_parent^-1 D_j.
# The BVH hand bones have zero length, so hands reuse their forearm's C.
import builtins
import math
import os
import sys

import bpy
import numpy as np
from mathutils import Matrix, Vector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bl_util import Body, quat_to_xyzw, script_args  # noqa: E402

MAP = {'pelvis': 'Hips', 'spine': 'LowerBack', 'chest': 'Spine1', 'neck': 'Neck1', 'head': 'Head'}
for _s, _S in (('L', 'Left'), ('R', 'Right')):
    MAP.update({f'clavicle.{_s}': f'{_S}Shoulder', f'upperarm.{_s}': f'{_S}Arm',
                f'forearm.{_s}': f'{_S}ForeArm', f'hand.{_s}': f'{_S}Hand',
                f'thigh.{_s}': f'{_S}UpLeg', f'shin.{_s}': f'{_S}Leg', f'foot.{_s}': f'{_S}Foot'})
AXIAL = {'pelvis', 'spine', 'chest', 'neck', 'head'}


def arg(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def main():
    a = script_args()
    body_dir, bvh, out = arg(a, '--body'), arg(a, '--bvh'), arg(a, '--out')
    if not (body_dir and bvh and out):
        sys.exit('usage: retarget.py -- --body DIR --bvh FILE --out POSES.npz [--stride 4] '
                 '[--render PNG --show f1,f2,..]')
    stride = int(arg(a, '--stride', '4'))
    body = Body(os.path.join(body_dir, 'body.blend'), os.path.join(body_dir, 'body.npz'))
    rig = body.rig

    # Blender 3.4's BVH importer opens files with mode 'rU', gone in Python 3.11
    import io_anim_bvh.import_bvh as ib
    ib.open = lambda f, mode='r', *x, **k: builtins.open(f, mode.replace('U', ''), *x, **k)
    bpy.ops.import_anim.bvh(filepath=os.path.abspath(bvh), global_scale=1.0, rotate_mode='NATIVE',
                            use_fps_scale=False, update_scene_fps=False, update_scene_duration=True)
    src = [o for o in bpy.context.scene.objects if o.type == 'ARMATURE' and o is not rig][0]
    missing = [b for b in MAP.values() if b not in src.data.bones]
    if missing:
        sys.exit('retarget: the BVH lacks bones %s (CMU skeleton expected)' % missing)
    f0, f1 = (int(x) for x in src.animation_data.action.frame_range)
    Ms = src.matrix_world.to_3x3().normalized()

    # yaw that puts the source's left arm on +X like the body's
    la = Ms @ src.data.bones['LeftArm'].head_local
    yaw = 0.0 if la.x > 0 else math.pi
    if abs(la.x) < abs(la.y):
        yaw = -math.copysign(math.pi / 2, la.y)
    Q = Matrix.Rotation(yaw, 3, 'Z')

    C = {}
    for tb, sb in MAP.items():
        if tb in AXIAL:
            C[tb] = Matrix.Identity(3)
            continue
        bt, bs = rig.data.bones[tb], src.data.bones[sb]
        dt = (bt.tail_local - bt.head_local).normalized()
        ds = Q @ Ms @ (bs.tail_local - bs.head_local)
        C[tb] = dt.rotation_difference(ds.normalized()).to_matrix() if ds.length > 1e-6 else None
    for tb in C:
        if C[tb] is None:  # zero-length source bone (CMU hands): the parent limb's calibration
            C[tb] = C[tb.replace('hand', 'forearm')]

    frames = list(range(f0, f1 + 1, stride))
    names = body.joint_names
    rots = np.zeros((len(frames), len(names), 4), np.float32)
    for i, f in enumerate(frames):
        bpy.context.scene.frame_set(f)
        D = {}
        for tb, sb in MAP.items():
            Rp = Ms @ src.pose.bones[sb].matrix.to_3x3().normalized()
            Rr = Ms @ src.data.bones[sb].matrix_local.to_3x3()
            D[tb] = Q @ Rp @ Rr.inverted() @ Q.inverted() @ C[tb]
        fwd = D['pelvis'] @ Vector((0.0, -1.0, 0.0))
        Y = Matrix.Rotation(-math.atan2(fwd.x, -fwd.y), 3, 'Z')
        D = {k: Y @ v for k, v in D.items()}
        for j, n in enumerate(names):
            p = int(body.parents[j])
            L = D[n] if p < 0 else D[names[p]].inverted() @ D[n]
            rots[i, j] = quat_to_xyzw(L.to_quaternion().normalized())
    np.savez(out, rotations=rots, frames=np.array(frames), source=np.array(os.path.basename(bvh)),
             joint_names=np.array(names), stride=stride)
    print('retarget: %s frames %d..%d stride %d -> %d poses, %s' % (bvh, f0, f1, stride, len(frames), out))

    png = arg(a, '--render')
    if png:
        show = [int(x) for x in arg(a, '--show', '0').split(',')]
        render_poses(body, rots[show], os.path.abspath(png))


def render_poses(body, rots, png):
    """Bodies in the given poses side by side, front view (Workbench)."""
    from bl_util import render_row
    objs = []
    for i, q in enumerate(rots):
        body.set_pose(q)
        dg = bpy.context.evaluated_depsgraph_get()
        dg.update()
        me = bpy.data.meshes.new_from_object(body.obj.evaluated_get(dg))
        o = bpy.data.objects.new('pose%d' % i, me)
        bpy.context.scene.collection.objects.link(o)
        objs.append(o)
    body.obj.hide_render = True
    render_row(objs, png)


main()

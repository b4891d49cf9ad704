# build_body.py — the garment tools' parametric body, built from assimp's
# HUMAN.blend (Debian assimp-testmodels): a skinned mannequin with linear shape
# directions beta whose joints move linearly with beta (SMPL-like).
#
#   blender -b --factory-startup --python tools/garment/build_body.py -- OUT_DIR [--subdiv 2]
#
# Writes OUT_DIR/body.blend (objects Body: shape keys + Armature modifier in
# plain LBS mode; Rig: the armature) and OUT_DIR/body.npz (the arrays below).
# tools/garment/garment.py turns body.npz into a servable `rigged` model.
#
# DESIGN
# HUMAN.blend is a 151-vertex half cage with a Mirror and a Subdivision
# Surface modifier. Everything linear is done on the cage and pushed through
# the modifiers, which are linear in the cage positions, so:
#  - each shape direction is a displacement field on the cage (a shape key);
#    the body's shape_deltas[s] = eval(cage + key_s) - eval(cage): exactly
#    linear in beta;
#  - joints are centroids of cage vertex rings (or fixed combinations of
#    them), so J(beta) = J0 + sum_s beta_s dJ_s is exactly linear too.
# Skin weights come from Blender's bone-heat (ARMATURE_AUTO), keep the 4
# heaviest influences per vertex and are renormalised and written back to the
# vertex groups, so Blender and deformd deform with the very same weights.
# Rest pose: the asset's A-pose; joint frames are world-aligned (rest
# rotations identity), the character faces -Y, Z up, feet at z = 0.
import os
import sys
import time
from collections import Counter

import bpy
import numpy as np
from mathutils import Vector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bl_util import eval_mesh, script_args  # noqa: E402

HEIGHT = 1.75      # metres, soles to crown
MAX_INFLUENCES = 4

# Vertex rings of the half cage (indices of HUMAN.blend's 'Cube' mesh, x >= 0
# side; read off the cage). Torso rings cross the mirror plane.
RINGS = dict(
    hip=[4, 17, 16, 0, 78, 1, 18, 19, 5], waist=[6, 21, 20, 2, 79, 3, 22, 23, 7],
    chest=[9, 26, 27, 11, 10, 25, 24, 8], shoulder=[14, 29, 28, 82, 30, 31, 15, 12, 13],
    neck=[60, 61, 62, 63, 64, 65, 95],
    thigh=[40, 41, 42, 43, 46, 47, 87, 88, 44, 45, 89], knee=[48, 49, 50, 51, 52, 53, 90, 91],
    ankle=[54, 55, 56, 57, 58, 59, 92, 93, 94],
    armroot=[10, 11, 12, 13, 80, 81], elbow=[36, 37, 38, 39, 85, 86], wrist=[32, 33, 34, 35, 83, 84])
TORSO = ('hip', 'waist', 'chest', 'shoulder', 'neck')

# Shape directions: name, and what +1 means.
SHAPES = [('height', '+8 % stature below the neck, the head carried rigidly'),
          ('weight', 'heavier: girth of torso and limbs, belly'),
          ('shoulders', '+3 cm shoulder width per side'),
          ('hips', 'wider pelvis and thighs, fuller buttocks')]

# Bones: name, head joint, tail joint, parent. Joints = bone heads.
BONES = [('pelvis', 'pelvis', 'spine', None), ('spine', 'spine', 'chest', 'pelvis'),
         ('chest', 'chest', 'neck', 'spine'), ('neck', 'neck', 'head', 'chest'),
         ('head', 'head', 'head_top', 'neck')]
for _s in 'LR':
    BONES += [(f'clavicle.{_s}', f'clavicle.{_s}', f'upperarm.{_s}', 'chest'),
              (f'upperarm.{_s}', f'upperarm.{_s}', f'forearm.{_s}', f'clavicle.{_s}'),
              (f'forearm.{_s}', f'forearm.{_s}', f'hand.{_s}', f'upperarm.{_s}'),
              (f'hand.{_s}', f'hand.{_s}', f'hand_end.{_s}', f'forearm.{_s}'),
              (f'thigh.{_s}', f'thigh.{_s}', f'shin.{_s}', 'pelvis'),
              (f'shin.{_s}', f'shin.{_s}', f'foot.{_s}', f'thigh.{_s}'),
              (f'foot.{_s}', f'foot.{_s}', f'toe.{_s}', f'shin.{_s}')]


def main():
    args = script_args()
    if not args or args[0].startswith('-'):
        sys.exit('usage: build_body.py -- OUT_DIR [--subdiv 2]')
    out = os.path.abspath(args[0])
    subdiv = int(args[args.index('--subdiv') + 1]) if '--subdiv' in args else 2
    os.makedirs(out, exist_ok=True)
    t0 = time.time()

    bpy.ops.wm.open_mainfile(filepath='/usr/share/assimp/models/BLEND/HUMAN.blend')
    for n in ('Camera', 'Lamp'):
        if n in bpy.data.objects:
            bpy.data.objects.remove(bpy.data.objects[n])
    cage = bpy.data.objects['Cube']
    cage.name = 'Cage'
    me = cage.data
    for m in cage.modifiers:
        if m.type == 'SUBSURF':
            m.levels = m.render_levels = subdiv

    # ---- normalise: HEIGHT tall, soles at z = 0, centred in y
    C = eval_mesh(cage)
    s = HEIGHT / (C[:, 2].max() - C[:, 2].min())
    for v in me.vertices:
        v.co *= s
    C = eval_mesh(cage)
    off = Vector((0.0, -0.5 * (C[:, 1].max() + C[:, 1].min()), -C[:, 2].min()))
    for v in me.vertices:
        v.co += off
    P = np.array([v.co[:] for v in me.vertices])

    # vertices on the mirror seam (boundary edges) must stay at x = 0
    ec = Counter(k for p in me.polygons for k in p.edge_keys)
    seam = sorted({i for k, c in ec.items() if c == 1 for i in k})

    def centroid(ring, Q):
        idx = RINGS[ring]
        if ring in TORSO:  # the full ring: seam vertices once, the others twice
            w = np.array([1.0 if i in seam else 2.0 for i in idx])
            c = (Q[idx] * w[:, None]).sum(0) / w.sum()
            c[0] = 0.0
            return c
        return Q[idx].mean(0)

    fields = shape_fields(P, lambda r: centroid(r, P))
    for d in fields:
        d[seam, 0] = 0.0

    # ---- joints from the cage, as a function of the cage positions
    def joints(Q):
        c = {r: centroid(r, Q) for r in RINGS}
        J = {}
        J['pelvis'] = 0.5 * (c['hip'] + np.array([0.0, c['thigh'][1], c['thigh'][2]]))
        J['spine'] = c['waist']
        J['chest'] = c['chest']
        J['neck'] = c['neck']
        J['head'] = c['neck'] + np.array([0.0, 0.0, 0.07])
        J['head_top'] = np.array([0.0, c['neck'][1], Q[:, 2].max()])
        sh = c['armroot'] + np.array([-0.01, 0.0, 0.015])
        J['clavicle.L'] = np.array([0.03, c['chest'][1], sh[2] - 0.01])
        J['upperarm.L'] = sh
        J['forearm.L'] = c['elbow']
        J['hand.L'] = c['elbow'] + 0.8 * (c['wrist'] - c['elbow'])
        J['hand_end.L'] = c['wrist'] + 0.02 * (c['wrist'] - c['elbow'])
        J['thigh.L'] = c['thigh'] + np.array([0.0, 0.0, 0.03])
        J['shin.L'] = c['knee']
        J['foot.L'] = c['ankle'] + np.array([0.0, 0.0, 0.07])
        J['toe.L'] = c['ankle'] + np.array([0.0, -0.08, 0.02])
        for k in list(J):
            if k.endswith('.L'):
                J[k[:-2] + '.R'] = J[k] * np.array([-1.0, 1.0, 1.0])
        return J

    # ---- shape keys on the cage; the body mesh is the evaluated cage
    cage.shape_key_add(name='Basis')
    for (name, _), d in zip(SHAPES, fields):
        kb = cage.shape_key_add(name=name, from_mix=False)
        kb.slider_min, kb.slider_max = -3.0, 3.0
        for i in range(len(P)):
            kb.data[i].co = Vector(P[i] + d[i])
    keys = me.shape_keys.key_blocks

    def set_cage_beta(b):
        for k, (name, _) in enumerate(SHAPES):
            keys[name].value = b[k]

    S = len(SHAPES)
    set_cage_beta(np.zeros(S))
    dg = bpy.context.evaluated_depsgraph_get()
    dg.update()
    bme = bpy.data.meshes.new_from_object(cage.evaluated_get(dg))
    body = bpy.data.objects.new('Body', bme)
    bpy.context.scene.collection.objects.link(body)
    V0 = eval_mesh(cage)
    N = len(V0)
    body.shape_key_add(name='Basis')
    shape_deltas = np.zeros((S, N, 3))
    for k, (name, _) in enumerate(SHAPES):
        b = np.zeros(S)
        b[k] = 1.0
        set_cage_beta(b)
        Vk = eval_mesh(cage)
        shape_deltas[k] = Vk - V0
        kb = body.shape_key_add(name=name, from_mix=False)
        kb.slider_min, kb.slider_max = -3.0, 3.0
        kb.data.foreach_set('co', Vk.ravel())
    set_cage_beta(np.zeros(S))
    for p in body.data.polygons:
        p.use_smooth = True

    J0 = joints(P)
    names = [b[0] for b in BONES]
    heads0 = np.array([J0[b[1]] for b in BONES])
    tails0 = np.array([J0[b[2]] for b in BONES])
    dh = np.zeros((S, len(BONES), 3))
    dt = np.zeros((S, len(BONES), 3))
    for k in range(S):
        Jk = joints(P + fields[k])
        dh[k] = np.array([Jk[b[1]] for b in BONES]) - heads0
        dt[k] = np.array([Jk[b[2]] for b in BONES]) - tails0
    parents = np.array([names.index(b[3]) if b[3] else -1 for b in BONES], np.int32)

    # ---- armature (bones not connected: heads are joints of their own)
    arm = bpy.data.armatures.new('Rig')
    rig = bpy.data.objects.new('Rig', arm)
    bpy.context.scene.collection.objects.link(rig)
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode='EDIT')
    for j, b in enumerate(BONES):
        eb = arm.edit_bones.new(b[0])
        eb.head = Vector(heads0[j])
        eb.tail = Vector(tails0[j])
        eb.roll = 0.0
    for j, b in enumerate(BONES):
        if b[3]:
            eb = arm.edit_bones[b[0]]
            eb.parent = arm.edit_bones[b[3]]
            eb.use_connect = False
    bpy.ops.object.mode_set(mode='OBJECT')

    # ---- bone-heat weights, top MAX_INFLUENCES, renormalised, written back
    t1 = time.time()
    bpy.ops.object.select_all(action='DESELECT')
    body.select_set(True)
    rig.select_set(True)
    bpy.context.view_layer.objects.active = rig
    res = bpy.ops.object.parent_set(type='ARMATURE_AUTO')
    if 'FINISHED' not in res:
        sys.exit('build_body: bone-heat weighting failed: %s' % (res,))
    W = np.zeros((N, len(names)))
    gname = {g.index: g.name for g in body.vertex_groups}
    for v in body.data.vertices:
        for g in v.groups:
            n = gname[g.group]
            if n in names:
                W[v.index, names.index(n)] = g.weight
    order = np.argsort(-W, axis=1)[:, :MAX_INFLUENCES]
    sw = np.take_along_axis(W, order, 1)
    if (sw.sum(1) <= 0).any():
        sys.exit('build_body: %d vertices got no weight' % int((sw.sum(1) <= 0).sum()))
    sw /= sw.sum(1, keepdims=True)
    for g in list(body.vertex_groups):
        body.vertex_groups.remove(g)
    groups = [body.vertex_groups.new(name=n) for n in names]
    for v in range(N):
        for k in range(MAX_INFLUENCES):
            if sw[v, k] > 0:
                groups[order[v, k]].add([v], float(sw[v, k]), 'REPLACE')
    for m in body.modifiers:
        if m.type == 'ARMATURE':
            m.use_deform_preserve_volume = False
            m.use_vertex_groups = True
            m.use_bone_envelopes = False
    print('build_body: bone heat %.2fs' % (time.time() - t1))

    faces = np.array([p.vertices[:] for p in body.data.polygons], np.int32)
    if faces.ndim != 2 or faces.shape[1] != 4:
        sys.exit('build_body: expected an all-quad body')
    tris = np.concatenate([faces[:, [0, 1, 2]], faces[:, [0, 2, 3]]]).astype(np.int32)
    cage.hide_render = cage.hide_viewport = True
    bpy.ops.wm.save_as_mainfile(filepath=os.path.join(out, 'body.blend'))
    np.savez(os.path.join(out, 'body.npz'),
             positions=V0.astype(np.float32), shape_deltas=shape_deltas.astype(np.float32),
             quads=faces, triangles=tris,
             skin_joints=order.astype(np.int32), skin_weights=sw.astype(np.float32),
             joint_names=np.array(names), joint_parents=parents,
             joint_positions=heads0, joint_shape_deltas=dh,
             bone_tails=tails0, bone_tail_shape_deltas=dt,
             shape_names=np.array([s[0] for s in SHAPES]),
             shape_doc=np.array([s[1] for s in SHAPES]))
    print('build_body: %d vertices, %d quads, %d joints, %d shapes, height %.3f m, %.1fs'
          % (N, len(faces), len(names), S, V0[:, 2].max() - V0[:, 2].min(), time.time() - t0))


def shape_fields(P, centroid):
    """Cage displacement of each shape direction at beta_s = +1 (list of [n,3])."""
    z_neck = centroid('neck')[2]
    ax = centroid('wrist') - centroid('armroot')
    ax /= np.linalg.norm(ax)
    arm = RINGS['elbow'] + RINGS['wrist'] + [80, 81]

    height = np.zeros_like(P)  # stature below the neck; the head moves with the neck
    height[:, 2] = 0.08 * np.minimum(P[:, 2], z_neck)

    weight = np.zeros_like(P)  # radial growth about each ring's axis
    radial = dict(hip=.16, waist=.22, chest=.14, shoulder=.07, neck=.08, thigh=.18, knee=.10,
                  ankle=.04, elbow=.14, wrist=.07)
    for ring, k in radial.items():
        c = centroid(ring)
        for i in RINGS[ring]:
            r = P[i] - c
            if ring in ('elbow', 'wrist'):  # radial about the arm's axis
                r = r - ax * r.dot(ax)
            else:
                r[2] = 0.0
            weight[i] += k * r
            if ring in ('waist', 'hip') and P[i, 1] < c[1]:  # belly (front is -y)
                weight[i, 1] -= 0.03 if ring == 'waist' else 0.015
    ca = centroid('armroot')
    for i in (80, 81):
        weight[i] += 0.10 * (P[i] - ca) * np.array([1.0, 1.0, 0.0])

    shoulders = np.zeros_like(P)  # the arm moves out rigidly, the shoulder blends
    shoulders[arm, 0] = 0.03
    shoulders[[10, 11, 12, 13], 0] = 0.025
    shoulders[[28, 30, 82], 0] = 0.015
    shoulders[[27, 25], 0] = 0.008

    hips = np.zeros_like(P)
    for i in RINGS['hip'] + RINGS['thigh']:
        hips[i, 0] = 0.12 * P[i, 0]
    for i in RINGS['waist']:
        hips[i, 0] = 0.04 * P[i, 0]
    hips[RINGS['knee'], 0] = 0.012
    hips[RINGS['ankle'], 0] = 0.006
    cb = centroid('hip')
    for i in RINGS['hip'] + RINGS['thigh']:
        if P[i, 1] > cb[1] + 0.03:  # buttocks (back is +y)
            hips[i, 1] += 0.015
    return [height, weight, shoulders, hips]


main()

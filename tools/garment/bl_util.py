# bl_util.py — helpers shared by the garment tools' Blender scripts
# (build_body.py, retarget.py, simulate.py). Runs inside Blender 3.4 only.
#
# DESIGN
# The body model's conventions (docs/garment.md, "Body model"): Z-up metres, the
# character faces -Y, joints are points (rest rotations are identity, so a
# joint's local frame is world-aligned), a pose is one local rotation per
# joint, x,y,z,w, composed parent-first: world_j = world_parent * q_j. Blender's
# bones carry their own axes (Y along the bone), so posing a Blender armature
# with such a pose goes through armature-space deltas: bone b's world delta
# D_b = q_root * ... * q_b rotates the bone about its head; Blender's pose
# rotation is then B = Rr^-1 * D_parent^-1 * D_b * Rr (Rr: the bone's rest
# orientation in armature space). With the Armature modifier in plain LBS
# mode (no preserve volume) Blender then deforms exactly as our rigged kind's
# LBS does with the same weights, which is what makes Blender the independent
# reference of tests/e2e/garment_body.sh.
import math
import os
import sys

import bpy
import numpy as np
from mathutils import Matrix, Quaternion, Vector


def script_args():
    """Arguments after '--' on Blender's command line."""
    return sys.argv[sys.argv.index('--') + 1:] if '--' in sys.argv else []


def eval_mesh(obj, normals=False):
    """Evaluated (modifiers applied) vertex coordinates [n,3] float64 of obj,
    and its vertex normals when asked."""
    dg = bpy.context.evaluated_depsgraph_get()
    dg.update()
    ev = obj.evaluated_get(dg)
    m = ev.to_mesh()
    co = np.empty(len(m.vertices) * 3)
    m.vertices.foreach_get('co', co)
    no = None
    if normals:
        no = np.empty(len(m.vertices) * 3)
        m.vertices.foreach_get('normal', no)
        no = no.reshape(-1, 3)
    ev.to_mesh_clear()
    return (co.reshape(-1, 3), no) if normals else co.reshape(-1, 3)


class Body:
    """The body model as the tools use it in Blender: the Body mesh object
    (shape keys + Armature modifier), the Rig armature and the arrays of
    body.npz (written by build_body.py)."""

    def __init__(self, blend, npz):
        bpy.ops.wm.open_mainfile(filepath=blend)
        self.obj = bpy.data.objects['Body']
        self.rig = bpy.data.objects['Rig']
        self.z = np.load(npz)
        self.joint_names = [str(s) for s in self.z['joint_names']]
        self.parents = self.z['joint_parents']
        self.S = self.z['shape_deltas'].shape[0]

    def joints(self, beta):
        """Joint (bone head) and bone tail positions of shape beta."""
        b = np.zeros(self.S)
        b[:len(beta)] = beta
        h = self.z['joint_positions'] + np.tensordot(b, self.z['joint_shape_deltas'], 1)
        t = self.z['bone_tails'] + np.tensordot(b, self.z['bone_tail_shape_deltas'], 1)
        return h, t

    def set_shape(self, beta):
        """Shape keys to beta and the armature's rest bones to J(beta)."""
        kbs = self.obj.data.shape_keys.key_blocks
        for s in range(self.S):
            kbs[s + 1].value = float(beta[s]) if s < len(beta) else 0.0
        h, t = self.joints(beta)
        prev = bpy.context.view_layer.objects.active
        bpy.context.view_layer.objects.active = self.rig
        bpy.ops.object.mode_set(mode='EDIT')
        for j, name in enumerate(self.joint_names):
            eb = self.rig.data.edit_bones[name]
            eb.head = Vector(h[j])
            eb.tail = Vector(t[j])
            eb.roll = 0.0
        bpy.ops.object.mode_set(mode='OBJECT')
        bpy.context.view_layer.objects.active = prev

    def world_rotations(self, q):
        """World rotations (Matrix 3x3) of the local quaternions q [J,4] xyzw."""
        W = []
        for j in range(len(self.joint_names)):
            x, y, z, w = (float(c) for c in q[j])
            R = Quaternion((w, x, y, z)).normalized().to_matrix()
            p = int(self.parents[j])
            W.append(W[p] @ R if p >= 0 else R)
        return W

    def set_pose(self, q):
        """Pose the armature with local quaternions q [J,4] (None: rest)."""
        if q is None:
            for pb in self.rig.pose.bones:
                pb.rotation_mode = 'QUATERNION'
                pb.rotation_quaternion = (1, 0, 0, 0)
                pb.location = (0, 0, 0)
            return
        D = self.world_rotations(q)
        for j, name in enumerate(self.joint_names):
            pb = self.rig.pose.bones[name]
            Rr = pb.bone.matrix_local.to_3x3()
            p = int(self.parents[j])
            Dp = D[p] if p >= 0 else Matrix.Identity(3)
            B = Rr.inverted() @ Dp.inverted() @ D[j] @ Rr
            pb.rotation_mode = 'QUATERNION'
            pb.rotation_quaternion = B.to_quaternion()
            pb.location = (0, 0, 0)


def quat_to_xyzw(Q):
    return np.array([Q.x, Q.y, Q.z, Q.w])


def ensure_dir(d):
    os.makedirs(d, exist_ok=True)
    return d


def render_row(objs, png, spacing=1.1, colors=None, rows=None, size=360, view='front', pitch=2.0, zc=0.9):
    """Render objects in a grid (rows x len(objs)/rows), each translated to its
    cell (rows `pitch` m apart, the view centred at height `zc`), front (-Y)
    or three-quarter view, orthographic Workbench: a quick look that needs
    no GPU. colors: one RGBA per object or None (grey)."""
    sc = bpy.context.scene
    n = len(objs)
    rows = rows or 1
    cols = (n + rows - 1) // rows
    for i, o in enumerate(objs):
        r, c = divmod(i, cols)
        o.location = (c * spacing, 0.0, -r * pitch)
        o.color = colors[i] if colors else (0.75, 0.75, 0.75, 1.0)
    sc.render.engine = 'BLENDER_WORKBENCH'
    sc.display.shading.light = 'STUDIO'
    sc.display.shading.color_type = 'OBJECT'
    sc.render.resolution_percentage = 100
    sc.render.image_settings.file_format = 'PNG'
    if sc.world is None:
        sc.world = bpy.data.worlds.new('World')
    sc.world.color = (0.9, 0.9, 0.9)
    cam = bpy.data.objects.get('RenderCam')
    if cam is None:
        cam = bpy.data.objects.new('RenderCam', bpy.data.cameras.new('RenderCam'))
        sc.collection.objects.link(cam)
    cam.data.type = 'ORTHO'
    w = cols * spacing
    h = rows * pitch
    cam.data.ortho_scale = max(w, h) * 1.02
    cx, cz = (cols - 1) * spacing / 2, zc - (rows - 1) * pitch / 2
    if view == 'front':
        cam.location = (cx, -8.0, cz)
        cam.rotation_euler = (math.pi / 2, 0.0, 0.0)
    else:
        cam.location = (cx + 8.0 * math.sin(0.6), -8.0 * math.cos(0.6), cz + 1.5)
        d = Vector((cx, 0.0, cz)) - cam.location
        cam.rotation_euler = d.to_track_quat('-Z', 'Y').to_euler()
    sc.render.resolution_x = int(size * w / spacing)
    sc.render.resolution_y = int(size * h / spacing)
    sc.camera = cam
    sc.render.filepath = png
    bpy.ops.render.render(write_still=True)

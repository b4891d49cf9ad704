# render_grid.py — a grid of faces rendered headless (Workbench, orthographic,
# front view), for tools/retarget/grid.py.
#
#   blender -b --factory-startup --python tools/retarget/render_grid.py -- SCENE.npz OUT.png [--size 180]
#
# SCENE.npz: cols; scale (mm shown fully red); tri0, tri1 [T,3] triangle
# lists; which [K] (cell k uses tri<which[k]>); v<k> [N,3] the vertices of
# cell k (ICT convention: centimetres, Y up, the face towards +Z); e<k> [N]
# per-vertex error in mm, or -1 everywhere for a plain cell. Cell k goes to
# row k // cols, column k % cols. Optional labels [cols]: column titles.
import math
import os
import sys

import bpy
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'garment'))
from bl_util import script_args  # noqa: E402  (the Blender tools' shared helpers)


def main():
    a = script_args()
    if len(a) < 2:
        sys.exit('usage: render_grid.py -- SCENE.npz OUT.png [--size 180]')
    z = np.load(a[0])
    size = int(a[a.index('--size') + 1]) if '--size' in a else 180
    cols = int(z['cols'])
    scale = float(z['scale'])
    which = z['which']
    K = len(which)
    rows = (K + cols - 1) // cols
    bpy.ops.wm.read_factory_settings(use_empty=True)
    sc = bpy.context.scene
    # cell size from the first mesh: ICT (x, y, z) -> Blender (x, -z, y)
    V0 = z['v0']
    ext = np.array([np.ptp(z['v%d' % k][:, :2], axis=0) for k in range(K)]).max(0)
    w, h = float(ext[0]) * 1.1, float(ext[1]) * 1.06
    labels = [str(t) for t in z['labels']] if 'labels' in z else []
    top = h * 0.12 if labels else 0.0  # a strip above the first row for the labels
    for k in range(K):
        V = z['v%d' % k].astype(np.float64)
        T = z['tri%d' % int(which[k])]
        E = z['e%d' % k]
        r, c = divmod(k, cols)
        P = np.stack([V[:, 0] + c * w, -V[:, 2], V[:, 1] - r * h], 1)
        me = bpy.data.meshes.new('m%d' % k)
        me.vertices.add(len(P))
        me.vertices.foreach_set('co', P.ravel())
        me.loops.add(3 * len(T))
        me.loops.foreach_set('vertex_index', T.astype(np.int32).ravel())
        me.polygons.add(len(T))
        me.polygons.foreach_set('loop_start', np.arange(0, 3 * len(T), 3, dtype=np.int32))
        me.polygons.foreach_set('loop_total', np.full(len(T), 3, np.int32))
        me.update(calc_edges=True)
        me.polygons.foreach_set('use_smooth', np.ones(len(T), bool))
        # per-vertex colour: skin grey, or white -> red by the error
        col = np.tile([0.78, 0.74, 0.70, 1.0], (len(P), 1))
        if E.max() >= 0:
            t = np.clip(E / scale, 0.0, 1.0)
            col = np.stack([np.ones_like(t), 1.0 - 0.85 * t, 1.0 - 0.85 * t, np.ones_like(t)], 1)
        at = me.color_attributes.new('err', 'FLOAT_COLOR', 'POINT')
        at.data.foreach_set('color', col.astype(np.float32).ravel())
        o = bpy.data.objects.new('o%d' % k, me)
        sc.collection.objects.link(o)
    for c, text in enumerate(labels[:cols]):
        cu = bpy.data.curves.new('l%d' % c, 'FONT')
        cu.body = text
        cu.align_x = 'CENTER'
        cu.size = h * 0.05
        o = bpy.data.objects.new('l%d' % c, cu)
        o.location = (float(V0[:, 0].max() + V0[:, 0].min()) / 2 + c * w, -50.0,
                      float(V0[:, 1].max()) + top * 0.45)
        o.rotation_euler = (math.pi / 2, 0.0, 0.0)
        sc.collection.objects.link(o)
        # as a mesh with a dark colour attribute (the shading is by attribute)
        dg = bpy.context.evaluated_depsgraph_get()
        me = bpy.data.meshes.new_from_object(o.evaluated_get(dg))
        at = me.color_attributes.new('err', 'FLOAT_COLOR', 'POINT')
        at.data.foreach_set('color', np.tile([0.1, 0.1, 0.1, 1.0], len(me.vertices)).astype(np.float32))
        t = bpy.data.objects.new('t%d' % c, me)
        t.matrix_world = o.matrix_world
        sc.collection.objects.link(t)
        bpy.data.objects.remove(o)
    sc.view_settings.view_transform = 'Standard'
    sc.render.engine = 'BLENDER_WORKBENCH'
    sc.display.shading.light = 'STUDIO'
    sc.display.shading.color_type = 'VERTEX'
    sc.render.resolution_percentage = 100
    sc.render.image_settings.file_format = 'PNG'
    sc.render.image_settings.color_mode = 'RGB'
    sc.render.image_settings.compression = 100
    sc.world = bpy.data.worlds.new('World')
    sc.world.color = (1.0, 1.0, 1.0)
    cam = bpy.data.objects.new('Cam', bpy.data.cameras.new('Cam'))
    sc.collection.objects.link(cam)
    cam.data.type = 'ORTHO'
    W, H = cols * w, rows * h + top
    cam.data.ortho_scale = max(W, H)
    ymid = float(V0[:, 1].max() + V0[:, 1].min()) / 2
    xmid = float(V0[:, 0].max() + V0[:, 0].min()) / 2
    cam.location = (xmid + (cols - 1) * w / 2, -200.0, ymid - (rows - 1) * h / 2 + top / 2)
    cam.rotation_euler = (math.pi / 2, 0.0, 0.0)
    cam.data.clip_end = 1000.0
    sc.camera = cam
    sc.render.resolution_x = int(size * cols)
    sc.render.resolution_y = int(size * cols * H / W)
    sc.render.filepath = a[1]
    bpy.ops.render.render(write_still=True)


main()

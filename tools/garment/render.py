# render.py — a grid of bodies wearing garments, rendered headless (Workbench).
#
#   blender -b --factory-startup --python tools/garment/render.py -- SCENE.npz OUT.png [--size 300] [--view front|q34] [--torso]
#
# SCENE.npz: body_triangles [Tb,3], garment_triangles [Tg,3], bodies [K,Nb,3],
# garments [K,G,3] (posed, world space), cols (int); optional garment_colors
# [K,4] RGBA. Cell k goes to row k // cols, column k % cols. --torso frames
# the upper body only (cells 0.9 m tall).
import os
import sys

import bpy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bl_util import render_row, script_args  # noqa: E402


def mesh(name, V, T, color):
    me = bpy.data.meshes.new(name)
    me.from_pydata([tuple(p) for p in V], [], [tuple(int(k) for k in t) for t in T])
    for p in me.polygons:
        p.use_smooth = True
    me.update()
    o = bpy.data.objects.new(name, me)
    bpy.context.scene.collection.objects.link(o)
    o.color = color
    return o


def main():
    a = script_args()
    if len(a) < 2:
        sys.exit('usage: render.py -- SCENE.npz OUT.png [--size 300] [--view front|q34]')
    z = np.load(a[0])
    size = int(a[a.index('--size') + 1]) if '--size' in a else 300
    view = a[a.index('--view') + 1] if '--view' in a else 'front'
    bpy.ops.wm.read_factory_settings(use_empty=True)
    K = len(z['bodies'])
    cols = int(z['cols'])
    gcol = z['garment_colors'] if 'garment_colors' in z else np.tile([0.25, 0.45, 0.85, 1.0], (K, 1))
    objs, colors = [], []
    for k in range(K):
        b = mesh('b%d' % k, z['bodies'][k], z['body_triangles'], (0.8, 0.76, 0.7, 1))
        g = mesh('g%d' % k, z['garments'][k], z['garment_triangles'], tuple(gcol[k]))
        # one object per cell: join garment into body keeps both colours via
        # object colour only, so parent the garment to the body instead
        g.parent = b
        objs.append(b)
        colors.append((0.8, 0.76, 0.7, 1))
    rows = (K + cols - 1) // cols
    out = os.path.abspath(a[1])
    if '--torso' not in a:
        render_row(objs, out, colors=colors, rows=rows, size=size, view=view)
        return
    # upper bodies: each row rendered alone, framed on the torso, stacked
    strips = []
    for r in range(rows):
        row = objs[r * cols:(r + 1) * cols]
        for o in objs:
            hide = o not in row
            o.hide_render = hide
            for ch in o.children:
                ch.hide_render = hide
        tmp = out + '.row%d.png' % r
        render_row(row, tmp, colors=colors[:len(row)], rows=1, size=size, view=view, pitch=0.9, zc=1.2)
        img = bpy.data.images.load(tmp)
        w, h = img.size
        strips.append(np.array(img.pixels[:]).reshape(h, w, 4))
        bpy.data.images.remove(img)
        os.remove(tmp)
    w = max(x.shape[1] for x in strips)
    strips = [np.pad(x, ((0, 0), (0, w - x.shape[1]), (0, 0)), constant_values=1.0) for x in strips]
    px = np.concatenate(strips[::-1], 0)  # Blender's pixel rows run bottom-up
    img = bpy.data.images.new('grid', px.shape[1], px.shape[0], alpha=False)
    img.pixels[:] = px.ravel()
    img.filepath_raw = out
    img.file_format = 'PNG'
    img.save()


main()

"""export_mdd.py — Blender's own MDD exporter on an animated asset: a point cache
as a DCC pipeline would hand it over.

Run headless:
    blender -b --factory-startup --python tools/blender/export_mdd.py -- IN.glb OUT.mdd \
        [--clip NAME] [--mesh-out MESH.safetensors]

Imports IN with Blender's glTF importer, plays the animation NAME (an NLA track of the
importer; default the first by name) on the first mesh object and calls
bpy.ops.export_shape.mdd (the io_shape_mdd add-on shipped with Blender) over the action's
whole frames (floor of the first key to ceil of the last, the scene's fps). Positions are
Blender's world space (Z-up), vertices in Blender's mesh order. --mesh-out also writes that
mesh's topology as a raw safetensors (`positions` F32 [N,3] at the first frame, Blender
Z-up, and `triangles` I32 [T,3] from its loop triangles) for `deform decompose --mesh`.
"""
import json
import struct
import sys

import numpy as np

np.bool = bool  # Debian's numpy is newer than Blender 3.4's glTF importer expects
import addon_utils  # noqa: E402
import bpy  # noqa: E402


def main():
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    if len(argv) < 2:
        sys.exit("usage: blender -b --factory-startup --python export_mdd.py -- IN.glb OUT.mdd "
                 "[--clip NAME] [--mesh-out MESH.safetensors]")
    src, out = argv[0], argv[1]
    opts = dict(zip(argv[2::2], argv[3::2]))
    addon_utils.enable("io_shape_mdd", default_set=True)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    addon_utils.enable("io_shape_mdd", default_set=True)
    bpy.ops.import_scene.gltf(filepath=src)
    meshes = sorted((o for o in bpy.data.objects if o.type == "MESH"), key=lambda o: o.name)
    if not meshes:
        sys.exit("export_mdd.py: no mesh in %s" % src)
    animated = [o for o in bpy.data.objects if o.animation_data is not None]
    tracks = {}
    for o in animated:
        for t in o.animation_data.nla_tracks:
            t.mute = True
            for s in t.strips:
                if s.action:
                    tracks.setdefault(t.name, []).append((o, s.action))
    if not tracks:
        sys.exit("export_mdd.py: %s has no animation" % src)
    name = opts.get("--clip") or sorted(tracks)[0]
    if name not in tracks:
        sys.exit("export_mdd.py: no animation %r (have %s)" % (name, ", ".join(sorted(tracks))))
    for o in animated:
        o.animation_data.action = None
    lo, hi = None, None
    for o, act in tracks[name]:
        o.animation_data.action = act
        a, b = act.frame_range
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    scene = bpy.context.scene
    fps = scene.render.fps / scene.render.fps_base
    first, last = int(np.floor(lo)), int(np.ceil(hi))
    obj = meshes[0]
    bpy.context.view_layer.objects.active = obj
    obj.select_set(True)
    bpy.ops.export_shape.mdd(filepath=out, frame_start=first, frame_end=last, fps=fps)
    if "--mesh-out" in opts:
        scene.frame_set(first)
        dg = bpy.context.evaluated_depsgraph_get()
        me = obj.evaluated_get(dg).to_mesh()
        me.transform(obj.matrix_world)
        me.calc_loop_triangles()
        pos = np.array([c for v in me.vertices for c in v.co], dtype=np.float32).reshape(-1, 3)
        tri = np.array([i for t in me.loop_triangles for i in t.vertices], dtype=np.int32).reshape(-1, 3)
        tensors = {"positions": pos, "triangles": tri}
        hdr, off, blobs = {}, 0, []
        for k, arr in tensors.items():
            b = arr.tobytes()
            hdr[k] = {"dtype": "F32" if arr.dtype == np.float32 else "I32", "shape": list(arr.shape),
                      "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        h = json.dumps(hdr).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(opts["--mesh-out"], "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for b in blobs:
                f.write(b)
    print("export_mdd: %s: clip %r frames %d..%d at %g fps, %d vertices" % (
        out, name, first, last, fps, len(obj.data.vertices)))


main()

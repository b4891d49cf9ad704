"""blend_actions.py — headless Blender: every action of a skinned character as a raw decomposition
sequence with the true bone of each vertex (training and test data of the decomposition's
initialisation network, docs/decompose.md "Network initialisation").

    blender -b --factory-startup -noaudio CHAR.blend -P tools/decompose/blend_actions.py -- \
        --out-dir DIR --name NAME [--actions-from OTHER.blend] [--action PATTERN]... [--frame-step 1]

Writes DIR/NAME__ACTION.safetensors per action that animates the armature, in the raw sequence
format of `deform decompose` (docs/decompose.md, Reference): `frames` F32 [F,N,3] (world space,
what Blender's depsgraph evaluates: every modifier), `triangles` I32 [T,3], `times` F32 [F]
(seconds at the scene's frame rate), and `bones` I32 [N]: the deforming bone with the largest
vertex-group weight of each vertex (-1 when it has none), metadata `bone_names`, `character`,
`clip`. The meshes are those with an Armature modifier on the armature, joined in name order.
--actions-from appends the actions of another file first (a character that shares a rig
without carrying its animations).
"""
import fnmatch
import json
import os
import sys

import bpy
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "garment"))
import stfile  # noqa: E402


def die(msg):
    print("blend_actions.py: " + msg, file=sys.stderr)
    sys.exit(1)


def parse(argv):
    o = {"out_dir": None, "name": None, "actions_from": None, "action": [], "frame_step": 1}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--out-dir", "--name", "--actions-from", "--action", "--frame-step") and i + 1 < len(argv):
            k = a[2:].replace("-", "_")
            v = argv[i + 1]
            if k == "action":
                o[k].append(v)
            elif k == "frame_step":
                o[k] = int(v)
            else:
                o[k] = v
            i += 2
        else:
            die("unknown argument '%s'" % a)
    if not o["out_dir"] or not o["name"] or o["frame_step"] < 1:
        die("usage: ... -- --out-dir DIR --name NAME [--actions-from F.blend] [--action P]... [--frame-step S]")
    return o


def save(path, tensors, meta):
    """The safetensors writer of the tools (tools/garment/stfile.py)."""
    stfile.write(path, tensors, meta)


def main():
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    o = parse(argv)
    if o["actions_from"]:
        with bpy.data.libraries.load(o["actions_from"]) as (src, dst):
            dst.actions = list(src.actions)
    meshes = sorted((ob for ob in bpy.data.objects if ob.type == "MESH" and any(
        m.type == "ARMATURE" and m.object is not None for m in ob.modifiers)), key=lambda ob: ob.name)
    if not meshes:
        die("no mesh with an Armature modifier")
    arm = next(m.object for m in meshes[0].modifiers if m.type == "ARMATURE")
    meshes = [ob for ob in meshes if any(m.type == "ARMATURE" and m.object == arm for m in ob.modifiers)]
    deform = [b.name for b in arm.data.bones if b.use_deform]
    bidx = {n: k for k, n in enumerate(deform)}
    labels, tris, base = [], [], 0
    for ob in meshes:
        groups = {g.index: g.name for g in ob.vertex_groups}
        for v in ob.data.vertices:
            best, bw = -1, 0.0
            for g in v.groups:
                n = groups.get(g.group)
                if n in bidx and g.weight > bw:
                    best, bw = bidx[n], g.weight
            labels.append(best)
        ob.data.calc_loop_triangles()
        for t in ob.data.loop_triangles:
            tris.append([base + t.vertices[0], base + t.vertices[1], base + t.vertices[2]])
        base += len(ob.data.vertices)
    labels = np.array(labels, np.int32)
    tris = np.array(tris, np.int32)
    ad = arm.animation_data or arm.animation_data_create()
    ad.use_nla = False
    acts = [a for a in bpy.data.actions if any(fc.data_path.startswith("pose.bones") for fc in a.fcurves)]
    if o["action"]:
        acts = [a for a in acts if any(fnmatch.fnmatchcase(a.name, p) for p in o["action"])]
    if not acts:
        die("no action animates the armature '%s'" % arm.name)
    sc = bpy.context.scene
    fps = sc.render.fps / sc.render.fps_base
    dg = bpy.context.evaluated_depsgraph_get()
    written = 0
    for a in acts:
        ad.action = a
        f0, f1 = (int(round(x)) for x in a.frame_range)
        frames = []
        for f in range(f0, f1 + 1, o["frame_step"]):
            sc.frame_set(f)
            dg = bpy.context.evaluated_depsgraph_get()
            pos = []
            for ob in meshes:
                ev = ob.evaluated_get(dg)
                me = ev.to_mesh()
                if len(me.vertices) != len(ob.data.vertices):
                    die("%s: modifiers change the vertex count (%d -> %d)" % (ob.name, len(ob.data.vertices), len(me.vertices)))
                co = np.empty(len(me.vertices) * 3, np.float64)
                me.vertices.foreach_get("co", co)
                M = np.array(ev.matrix_world)
                co = co.reshape(-1, 3) @ M[:3, :3].T + M[:3, 3]
                pos.append(co)
                ev.to_mesh_clear()
            frames.append(np.concatenate(pos))
        if len(frames) < 2:
            print("blend_actions.py: %s: %d frame(s), skipped" % (a.name, len(frames)), file=sys.stderr)
            continue
        fr = np.array(frames, np.float32)
        times = (np.arange(len(frames)) * o["frame_step"] / fps).astype(np.float32)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in a.name)
        path = "%s/%s__%s.safetensors" % (o["out_dir"], o["name"], safe)
        save(path, {"frames": fr, "triangles": tris, "times": times, "bones": labels},
             {"bone_names": json.dumps(deform), "character": o["name"], "clip": a.name,
              "producer": "blend_actions.py (blender %s)" % bpy.app.version_string})
        written += 1
        print("%s: %d frames x %d vertices" % (path, fr.shape[0], fr.shape[1]))
    print("blend_actions.py: %d sequences, %d vertices (%d without a deforming bone), %d bones"
          % (written, len(labels), int((labels < 0).sum()), len(deform)))


main()

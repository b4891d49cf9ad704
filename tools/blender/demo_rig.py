"""demo_rig.py — headless Blender: build the demonstration rig of docs/rigapprox.md on a character
and save it as a .blend, to be sampled by tools/blender/rig_export.py like any rig.

    blender -b -P tools/blender/demo_rig.py -- --in CHAR.glb|RIG.blend --out RIG.blend
            [--controls 8] [--seed 1] [--lbs-only]

The rig, built on the character's own armature and skin (a glTF import, or a .blend opened as is:
its skinned mesh with the most vertices, its own modifiers and drivers kept, ours added after):
  * numeric controls ctrl_00.. as custom properties of the armature object (even: [0,1],
    odd: [-1,1], default 0, stored as the properties' min/max), each driving a shape key: a smooth
    bulge of 4 % of the character height, radius 12 %, around a seeded vertex, along its normal;
  * product (combination) shapes driven by ctrl_a * ctrl_b for pairs (0,1), (2,3), ...;
  * correctives driven by bone rotations: a bulge around each of the 6 deforming bones with the most
    skin weight, driven by min((angle / 0.6)^2, 2.5), angle = the bone's pose rotation (quaternion
    W); a bone without a deforming ancestor (a flat deform skeleton, e.g. Rigify's) measures the
    change of its rotational difference to the deforming bone whose tail meets its head;
  * the Armature modifier, then Corrective Smooth (delta mush: simple, 6 iterations, factor 0.5,
    rest = original coordinates).
The character's own animations stay in the file (rig_export.py takes its sampling ranges from them
and --actions exports their frames). --lbs-only mutes the shape keys and Corrective Smooth: the rig
is then plain linear blend skinning (tests/e2e/rigapprox_blender.sh uses it as the reference of the
exporter's conventions).
"""
import os
import sys

import bpy
import numpy as np

if "bool" not in np.__dict__:
    np.bool = bool  # Blender 3.4's glTF importer still uses np.bool (removed in numpy 1.24)


def args():
    a = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    o = {"in": None, "out": None, "seed": 1, "controls": 8, "lbs_only": False}
    i = 0
    while i < len(a):
        k = a[i]
        if k == "--lbs-only":
            o["lbs_only"] = True
        elif k in ("--in", "--out", "--seed", "--controls") and i + 1 < len(a):
            i += 1
            o[k[2:]] = a[i] if k in ("--in", "--out") else int(a[i])
        else:
            raise SystemExit("demo_rig.py: unknown or incomplete option %s" % k)
        i += 1
    if not o["in"] or not o["out"]:
        raise SystemExit("usage: blender -b -P demo_rig.py -- --in CHAR.glb --out RIG.blend "
                         "[--controls 8] [--seed 1] [--lbs-only]")
    if not 0 <= o["controls"] <= 64:
        raise SystemExit("demo_rig.py: --controls 0..64")
    return o


def bulge(rest, centre, radius):
    d2 = ((rest - centre) ** 2).sum(1)
    x = np.clip(1.0 - d2 / (radius * radius), 0.0, None)
    return (x * x)[:, None]


def add_shape(mesh, name, offsets):
    key = mesh.shape_key_add(name=name, from_mix=False)
    co = np.zeros(len(mesh.data.vertices) * 3, dtype=np.float32)
    mesh.data.shape_keys.reference_key.data.foreach_get("co", co)
    key.data.foreach_set("co", (co + offsets.astype(np.float32).ravel()))
    key.slider_min, key.slider_max = -10.0, 10.0
    return key


def drive(key, expr, variables):
    d = key.driver_add("value").driver
    d.type = "SCRIPTED"
    for name, setup in variables:
        v = d.variables.new()
        v.name = name
        setup(v)
    d.expression = expr


def main():
    o = args()
    if o["in"].lower().endswith(".blend"):
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(o["in"]), load_ui=False, use_scripts=True)
    else:
        bpy.ops.wm.read_factory_settings(use_empty=True)
        bpy.ops.import_scene.gltf(filepath=os.path.abspath(o["in"]))
    bpy.context.preferences.filepaths.use_scripts_auto_execute = True
    skinned = [x for x in bpy.context.view_layer.objects if x.type == "MESH" and x.visible_get() and
               any(m.type == "ARMATURE" and m.object for m in x.modifiers)]
    if not skinned:
        raise SystemExit("demo_rig.py: %s has no skinned mesh" % o["in"])
    mesh = max(skinned, key=lambda x: len(x.data.vertices))
    arm = next(m.object for m in mesh.modifiers if m.type == "ARMATURE")
    bones = [b for b in arm.data.bones if b.use_deform]
    names = [b.name for b in bones]
    V = len(mesh.data.vertices)
    rest = np.zeros(V * 3, dtype=np.float32)
    mesh.data.vertices.foreach_get("co", rest)
    rest = rest.reshape(V, 3)
    height = float((rest.max(0) - rest.min(0)).max())
    normals = np.zeros(V * 3, dtype=np.float32)
    mesh.data.vertices.foreach_get("normal", normals)
    normals = normals.reshape(V, 3)
    # skin weight per bone: where the joint correctives go
    gidx = {g.index: names.index(g.name) for g in mesh.vertex_groups if g.name in names}
    wsum = np.zeros(len(bones))
    for v in mesh.data.vertices:
        w = [(g.weight, gidx[g.group]) for g in v.groups if g.group in gidx and g.weight > 0]
        s = sum(x for x, _ in w)
        for x, j in w:
            wsum[j] += x / s
    rng = np.random.default_rng(o["seed"] * 7919 + 3)
    amp, rad = 0.04 * height, 0.12 * height
    if mesh.data.shape_keys is None:
        mesh.shape_key_add(name="Basis", from_mix=False)
    C = o["controls"]
    cnames, centres = [], []
    for c in range(C):
        n = "ctrl_%02d" % c
        lo = -1.0 if c % 2 else 0.0
        arm[n] = 0.0
        arm.id_properties_ui(n).update(min=lo, max=1.0, soft_min=lo, soft_max=1.0, default=0.0)
        cnames.append(n)
        cv = int(rng.integers(V))
        centres.append(cv)
        key = add_shape(mesh, n, amp * bulge(rest, rest[cv], rad) * normals[cv])

        def var(v, n=n):
            v.type = "SINGLE_PROP"
            v.targets[0].id = arm
            v.targets[0].data_path = '["%s"]' % n
        drive(key, "c", [("c", var)])
    for i in range(C // 2):
        a, b = 2 * i, 2 * i + 1
        centre = (rest[centres[a]] + rest[centres[b]]) / 2
        key = add_shape(mesh, "prod_%02d_%02d" % (a, b), -0.8 * amp * bulge(rest, centre, rad) * normals[centres[a]])
        vs = []
        for nm, idx in (("a", a), ("b", b)):
            def var(v, n=cnames[idx]):
                v.type = "SINGLE_PROP"
                v.targets[0].id = arm
                v.targets[0].data_path = '["%s"]' % n
            vs.append((nm, var))
        drive(key, "a * b", vs)
    def deform_parent(b):
        p = b.parent
        while p is not None and not p.use_deform:
            p = p.parent
        return p

    def meets(b):  # flat skeleton: the deforming bone whose tail is at b's head
        d = [((np.array(c.tail_local) - np.array(b.head_local)) ** 2).sum() for c in bones]
        k = int(np.argmin(d)) if d else -1
        return bones[k] if k >= 0 and bones[k] != b and d[k] < (1e-3 * height) ** 2 else None
    to_mesh = np.linalg.inv(np.array(mesh.matrix_world)) @ np.array(arm.matrix_world)
    order = []
    for j in np.argsort(-wsum):
        b = bones[j]
        if len(order) == 6 or wsum[j] <= 0:
            break
        if deform_parent(b) is not None:
            order.append((j, None))
        elif b.parent is not None or meets(b) is not None:
            if meets(b) is not None:
                order.append((j, meets(b)))
    for j, other in order:
        head = (to_mesh @ np.append(np.array(bones[j].head_local), 1.0))[:3]
        key = add_shape(mesh, "corr_" + names[j], 1.2 * amp * bulge(rest, head, rad) * normals)
        if other is None:
            def var(v, bn=names[j]):
                v.type = "TRANSFORMS"
                v.targets[0].id = arm
                v.targets[0].bone_target = bn
                v.targets[0].transform_type = "ROT_W"
                v.targets[0].rotation_mode = "QUATERNION"
                v.targets[0].transform_space = "LOCAL_SPACE"
            drive(key, "min((2 * acos(min(abs(w), 1.0)) / 0.6) ** 2, 2.5)", [("w", var)])
        else:
            r0 = np.array(bones[j].matrix_local)[:3, :3].T @ np.array(other.matrix_local)[:3, :3]
            a0 = float(np.arccos(np.clip((np.trace(r0) - 1) / 2, -1, 1)))

            def var(v, bn=names[j], on=other.name):
                v.type = "ROTATION_DIFF"
                for t, n in zip(v.targets, (bn, on)):
                    t.id, t.bone_target = arm, n
            drive(key, "min(((d - %.6f) / 0.6) ** 2, 2.5)" % a0, [("d", var)])
    cs = mesh.modifiers.new("DemoCorrectiveSmooth", "CORRECTIVE_SMOOTH")
    cs.smooth_type, cs.iterations, cs.factor, cs.rest_source = "SIMPLE", 6, 0.5, "ORCO"
    if o["lbs_only"]:
        cs.show_viewport = cs.show_render = False
        for kb in mesh.data.shape_keys.key_blocks:
            kb.mute = True
    bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(o["out"]))
    print("demo_rig.py: wrote %s: %d vertices, %d bones, %d controls, %d product shapes, %d joint correctives%s"
          % (o["out"], V, len(bones), C, C // 2, len(order), " (muted: plain LBS)" if o["lbs_only"] else ""))


main()

"""rig_dataset.py — headless Blender: build the demonstration rig on a character and sample it
into a rigapprox dataset (docs/rigapprox.md, "Dataset file").

    blender -b -P tools/blender/rig_dataset.py -- --in CHAR.glb --out DATA.safetensors
            [--samples N] [--seed S] [--controls 8] [--lbs-only] [--clips]

The rig, built on the character's own armature and skin (glTF import):
  * numeric controls ctrl_00.. as custom properties of the armature object (even: [0,1],
    odd: [-1,1], default 0), each driving a shape key: a smooth bulge of 4 % of the character
    height, radius 12 %, around a seeded vertex, along its normal;
  * product (combination) shapes driven by ctrl_a * ctrl_b for pairs (0,1), (2,3), ...;
  * correctives driven by bone rotations: a bulge around each of the 6 bones with the most skin
    weight, driven by min((angle / 0.6)^2, 2.5), angle = the bone's pose rotation (quaternion W);
  * the Armature modifier, then Corrective Smooth (delta mush: simple, 6 iterations, factor 0.5,
    rest = original coordinates).
Sampling follows the paper: each control from a truncated Gaussian inside its range, each
non-root bone an axis-angle rotation with components ~ truncated N(0, 0.35 rad) in +-0.8 rad.
--clips samples the character's own animation frames instead (controls then sweep their range).
--lbs-only mutes shape keys and Corrective Smooth: the result must be plain LBS of the dataset's
own matrices and weights, which tests/e2e/rigapprox_blender.sh checks (our reference for the
exporter's conventions).

Conventions written: joint_matrices = armature_world @ pose_bone.matrix (world 3x4),
inverse_bind = bone.matrix_local^-1 @ armature_world^-1 @ mesh_world, rest positions = mesh
local coordinates, positions = evaluated mesh in world space. Blender's armature deform is then
sum_j w_j joint_j invbind_j v (weights normalised, as Blender does).
"""
import json
import math
import struct
import sys

import bpy
import numpy as np

if not hasattr(np, "bool"):
    np.bool = bool  # Blender 3.4's glTF importer still uses np.bool (removed in numpy 1.24)


def args():
    a = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    o = {"in": None, "out": None, "samples": 200, "seed": 1, "controls": 8, "lbs_only": False,
         "clips": False}
    i = 0
    while i < len(a):
        k = a[i]
        if k == "--lbs-only":
            o["lbs_only"] = True
        elif k == "--clips":
            o["clips"] = True
        elif k in ("--in", "--out", "--samples", "--seed", "--controls") and i + 1 < len(a):
            i += 1
            o[k[2:]] = a[i] if k in ("--in", "--out") else int(a[i])
        else:
            raise SystemExit("rig_dataset.py: unknown or incomplete option %s" % k)
        i += 1
    if not o["in"] or not o["out"]:
        raise SystemExit("usage: blender -b -P rig_dataset.py -- --in CHAR.glb --out DATA.safetensors")
    if not (1 <= o["samples"] <= 100000 and 0 <= o["controls"] <= 64):
        raise SystemExit("rig_dataset.py: --samples 1..100000, --controls 0..64")
    return o


def write_safetensors(path, tensors, meta):
    header, off, blobs = {"__metadata__": meta}, 0, []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
        pad = (-off) % 8
        if pad:
            blobs.append(b"\0" * pad)
            off += pad
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    import os
    os.replace(path + ".tmp", path)


def trunc_normal(rng, mu, sigma, lo, hi):
    for _ in range(64):
        x = rng.normal(mu, sigma)
        if lo <= x <= hi:
            return x
    return rng.uniform(lo, hi)


def bulge(rest, centre, radius):
    d2 = ((rest - centre) ** 2).sum(1)
    x = np.clip(1.0 - d2 / (radius * radius), 0.0, None)
    return (x * x)[:, None]


def add_shape(mesh, name, offsets):
    key = mesh.shape_key_add(name=name, from_mix=False)
    co = np.zeros(len(mesh.data.vertices) * 3, dtype=np.float32)
    mesh.data.shape_keys.key_blocks["Basis"].data.foreach_get("co", co)
    key.data.foreach_set("co", (co + offsets.astype(np.float32).ravel()))
    key.slider_min, key.slider_max = -10.0, 10.0
    return key


def drive(mesh, key, expr, variables):
    fc = key.driver_add("value")
    d = fc.driver
    d.type = "SCRIPTED"
    for name, setup in variables:
        v = d.variables.new()
        v.name = name
        setup(v)
    d.expression = expr


def main():
    o = args()
    bpy.context.preferences.filepaths.use_scripts_auto_execute = True
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.context.preferences.filepaths.use_scripts_auto_execute = True
    bpy.ops.import_scene.gltf(filepath=o["in"])
    mesh = next((x for x in bpy.data.objects if x.type == "MESH" and
                 any(m.type == "ARMATURE" and m.object for m in x.modifiers)), None)
    if mesh is None:
        raise SystemExit("rig_dataset.py: %s has no skinned mesh" % o["in"])
    arm = next(m.object for m in mesh.modifiers if m.type == "ARMATURE")
    bones = list(arm.data.bones)
    names = [b.name for b in bones]
    V = len(mesh.data.vertices)
    rest = np.zeros(V * 3, dtype=np.float32)
    mesh.data.vertices.foreach_get("co", rest)
    rest = rest.reshape(V, 3)
    height = float((rest.max(0) - rest.min(0)).max())
    normals = np.zeros(V * 3, dtype=np.float32)
    mesh.data.vertices.foreach_get("normal", normals)
    normals = normals.reshape(V, 3)
    tris = []
    mesh.data.calc_loop_triangles()
    for t in mesh.data.loop_triangles:
        tris.append(list(t.vertices))
    tris = np.array(tris, dtype=np.int32)
    # skin: bone vertex groups, normalised, K = widest vertex (<= 8)
    gidx = {g.index: names.index(g.name) for g in mesh.vertex_groups if g.name in names}
    infl = []
    for v in mesh.data.vertices:
        w = sorted(((g.weight, gidx[g.group]) for g in v.groups if g.group in gidx and g.weight > 0),
                   reverse=True)[:8]
        if not w:
            raise SystemExit("rig_dataset.py: vertex %d has no bone weight" % v.index)
        s = sum(x for x, _ in w)
        infl.append([(x / s, j) for x, j in w])
    K = max(len(w) for w in infl)
    skin_j = np.zeros((V, K), dtype=np.int32)
    skin_w = np.zeros((V, K), dtype=np.float32)
    for i, w in enumerate(infl):
        for k, (x, j) in enumerate(w):
            skin_w[i, k], skin_j[i, k] = x, j
        skin_j[i, len(w):] = w[0][1]
    # controls, product shapes, bone correctives
    rng = np.random.default_rng(o["seed"] * 7919 + 3)
    amp, rad = 0.04 * height, 0.12 * height
    mesh.shape_key_add(name="Basis", from_mix=False)
    C = o["controls"]
    cnames, cr, centres = [], [], []
    for c in range(C):
        n = "ctrl_%02d" % c
        arm[n] = 0.0
        lo = -1.0 if c % 2 else 0.0
        cnames.append(n)
        cr.append([lo, 1.0, 0.0])
        cv = int(rng.integers(V))
        centres.append(cv)
        key = add_shape(mesh, n, amp * bulge(rest, rest[cv], rad) * normals[cv])

        def var(v, n=n):
            v.type = "SINGLE_PROP"
            v.targets[0].id = arm
            v.targets[0].data_path = '["%s"]' % n
        drive(mesh, key, "c", [("c", var)])
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
        drive(mesh, key, "a * b", vs)
    wsum = np.zeros(len(bones))
    np.add.at(wsum, skin_j.ravel(), skin_w.ravel())
    order = [j for j in np.argsort(-wsum) if bones[j].parent is not None][:6]
    mw = np.array(mesh.matrix_world)
    aw = np.array(arm.matrix_world)
    to_mesh = np.linalg.inv(mw) @ aw  # armature space -> mesh local
    for j in order:
        head = (to_mesh @ np.append(np.array(bones[j].head_local), 1.0))[:3]
        key = add_shape(mesh, "corr_" + names[j], 1.2 * amp * bulge(rest, head, rad) * normals)
        arm.pose.bones[names[j]].rotation_mode = "QUATERNION"

        def var(v, bn=names[j]):
            v.type = "TRANSFORMS"
            v.targets[0].id = arm
            v.targets[0].bone_target = bn
            v.targets[0].transform_type = "ROT_W"
            v.targets[0].rotation_mode = "QUATERNION"
            v.targets[0].transform_space = "LOCAL_SPACE"
        drive(mesh, key, "min((2 * acos(min(abs(w), 1.0)) / 0.6) ** 2, 2.5)", [("w", var)])
    cs = mesh.modifiers.new("CorrectiveSmooth", "CORRECTIVE_SMOOTH")
    cs.smooth_type, cs.iterations, cs.factor, cs.rest_source = "SIMPLE", 6, 0.5, "ORCO"
    if o["lbs_only"]:
        cs.show_viewport = cs.show_render = False
        for kb in mesh.data.shape_keys.key_blocks:
            kb.mute = True
    invbind = np.stack([np.linalg.inv(np.array(b.matrix_local)) @ np.linalg.inv(aw) @ mw for b in bones])
    # poses
    frames = []
    if o["clips"]:
        for act in bpy.data.actions:
            f0, f1 = (int(x) for x in act.frame_range)
            frames += [(act, f) for f in range(f0, f1 + 1)]
        if not frames:
            raise SystemExit("rig_dataset.py: %s has no animation" % o["in"])
    N = len(frames) if o["clips"] else o["samples"]
    srng = np.random.default_rng(o["seed"])
    ctl = np.zeros((N, C), dtype=np.float32)
    jm = np.zeros((N, len(bones), 12), dtype=np.float32)
    pos = np.zeros((N, V, 3), dtype=np.float32)
    for pb in arm.pose.bones:
        pb.rotation_mode = "QUATERNION"
    if arm.animation_data is None:
        arm.animation_data_create()
    scene = bpy.context.scene
    buf = np.zeros(V * 3, dtype=np.float32)
    for s in range(N):
        if o["clips"]:
            act, f = frames[s]
            arm.animation_data.action = act
            scene.frame_set(f)
            for c in range(C):
                lo, hi = cr[c][0], cr[c][1]
                ctl[s, c] = lo + (hi - lo) * (0.5 + 0.5 * math.sin(0.15 * f * (1 + 0.37 * c) + c))
        else:
            arm.animation_data.action = None
            for c in range(C):
                ctl[s, c] = trunc_normal(srng, 0.0, 0.5 * (cr[c][1] - cr[c][0]), cr[c][0], cr[c][1])
            for pb in arm.pose.bones:
                if pb.bone.parent is None:
                    pb.rotation_quaternion = (1, 0, 0, 0)
                    continue
                aa = np.array([trunc_normal(srng, 0.0, 0.35, -0.8, 0.8) for _ in range(3)])
                th = float(np.linalg.norm(aa))
                q = (1.0, 0.0, 0.0, 0.0) if th < 1e-9 else \
                    (math.cos(th / 2), *(aa / th * math.sin(th / 2)))
                pb.rotation_quaternion = q
        for c in range(C):
            arm[cnames[c]] = float(ctl[s, c])
        arm.update_tag()
        bpy.context.view_layer.update()
        dg = bpy.context.evaluated_depsgraph_get()
        ev = mesh.evaluated_get(dg)
        me = ev.to_mesh()
        me.vertices.foreach_get("co", buf)
        ev.to_mesh_clear()
        p = buf.reshape(V, 3).astype(np.float64)
        pos[s] = (p @ mw[:3, :3].T + mw[:3, 3]).astype(np.float32)
        for j, b in enumerate(bones):
            jm[s, j] = (aw @ np.array(arm.pose.bones[b.name].matrix))[:3].ravel()
    tensors = {
        "rest_positions": rest, "triangles": tris,
        "inverse_bind_matrices": invbind[:, :3].reshape(len(bones), 12).astype(np.float32),
        "skin_joints": skin_j, "skin_weights": skin_w,
        "joint_matrices": jm, "positions": pos,
    }
    if C:
        tensors["control_ranges"] = np.array(cr, dtype=np.float32)
        tensors["controls"] = ctl
    write_safetensors(o["out"], tensors, {
        "kind": "rigdata", "format_version": "1", "control_names": json.dumps(cnames),
        "joint_names": json.dumps(names), "height": "%.9g" % height, "producer": "blender " + bpy.app.version_string})
    print("rig_dataset.py: wrote %s: %d poses, %d vertices, %d bones, %d controls, K %d"
          % (o["out"], N, V, len(bones), C, K))


main()

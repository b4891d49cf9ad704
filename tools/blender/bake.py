"""bake.py — the independent reference: Blender evaluates an animated, skinned asset.

Run headless:
    blender -b --factory-startup --python tools/blender/bake.py -- IN OUT_DIR \
        [--frames keys|all|a:b] [--max-frames K] [--clips A,B] [--fbx-scale S] [--dqs]
        [--pose-scale BONE=sx,sy,sz ...] [--skin-matrices]

--dqs bakes with the armature modifiers' "Preserve Volume" on: Blender's dual-quaternion skinning.
--pose-scale BONE=sx,sy,sz (repeatable) multiplies that pose bone's scale (in the bone's own
axes) by (sx, sy, sz) on top of the action at every baked frame; its children inherit it.
--skin-matrices (one mesh object) also writes rest_local.npy, the mesh's own vertex coordinates
(Y-up), and per clip <clip>_skin.npy float32 [F,J,12]: for each bone the map G from those
coordinates to deformed world positions that the armature modifier applies with that bone alone,
G = arm.matrix_world @ pose_bone.matrix @ bone.matrix_local^-1 @ arm.matrix_world^-1
    @ mesh.matrix_world (Y-up, row-major 3x4), with the bone names in <clip>.json's "bones".
Another skinning code fed these matrices reproduces the baked positions whatever its own joint
frames.
IN is a .glb/.gltf (Blender's glTF importer) or an .fbx (Blender's own FBX importer, which
shares no code with assimp). For every action (one per animation) and every chosen frame
the script sets the frame, evaluates the depsgraph and reads the *evaluated* vertex positions
of every mesh object (armature modifier applied), in world space (object matrix_world), then
converts Blender's Z-up to glTF/assimp Y-up: (x, y, z)_blender -> (x, z, -y).

Conventions it undoes (see docs/import.md):
  - axes: Blender is Z-up; glTF and assimp's output are Y-up.
  - time: glTF keys at t seconds land on Blender frame t*fps (fractional frames are set with
    subframe); the FBX importer shifts animation by anim_offset (we import with 0) and
    converts FBX time to frames at the scene fps, which the importer sets from the file.
  - units: the FBX importer multiplies by UnitScaleFactor/100 (cm files become metres);
    --fbx-scale (default 1/that) is passed as global_scale so positions stay in file units,
    which is what assimp reports.

Outputs in OUT_DIR:
  rest.npy          float32 [N,3], armature in REST position (bind pose), same vertex order
  <clip>.npy        float32 [F,N,3] positions per chosen frame
  <clip>.json       {"clip", "frames", "times" (seconds since the action's first key), "fps",
                     "first_frame", "source", "objects"}
  index.json        list of clips, vertex count, objects
Vertex order is Blender's (objects sorted by name, vertices in mesh order); matching to another
importer's order is done afterwards by tools/blender/golden.py.
"""
import json
import os
import sys

import numpy as np

np.bool = bool  # Debian's numpy is newer than Blender 3.4's glTF importer expects
import bpy  # noqa: E402


def parse_args():
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    if len(argv) < 2:
        sys.exit("usage: blender -b --factory-startup --python bake.py -- IN OUT_DIR "
                 "[--frames keys|all|a:b] [--max-frames K] [--clips A,B] [--fbx-scale S]")
    a = {"in": argv[0], "out": argv[1], "frames": "keys", "max_frames": 0, "clips": None,
         "fbx_scale": None, "dqs": False, "pose_scale": {}, "skin": False}
    i = 2
    while i < len(argv):
        k = argv[i]
        v = argv[i + 1] if i + 1 < len(argv) else None
        if k == "--frames":
            a["frames"] = v
        elif k == "--max-frames":
            a["max_frames"] = int(v)
        elif k == "--clips":
            a["clips"] = v.split(",")
        elif k == "--fbx-scale":
            a["fbx_scale"] = float(v)
        elif k == "--dqs":  # armature modifiers with "Preserve Volume" (dual quaternions)
            a["dqs"] = True
            i += 1
            continue
        elif k == "--skin-matrices":
            a["skin"] = True
            i += 1
            continue
        elif k == "--pose-scale":
            bone, _, sc = (v or "").partition("=")
            try:
                sv = [float(x) for x in sc.split(",")]
            except ValueError:
                sv = []
            if not bone or len(sv) != 3:
                sys.exit("bake.py: --pose-scale wants BONE=sx,sy,sz, got %r" % v)
            a["pose_scale"][bone] = sv
        else:
            sys.exit("bake.py: unknown option %s" % k)
        i += 2
    return a


def fbx_unit_scale(path):
    """UnitScaleFactor from an FBX file's GlobalSettings (binary or ASCII); 1.0 if absent."""
    data = open(path, "rb").read()
    key = b"UnitScaleFactor"
    i = data.find(key)
    if i < 0:
        return 1.0
    if data[:18] == b"Kaydara FBX Binary":
        # binary property: name, then 'S'-typed strings, then a 'D' (double) value
        j = data.find(b"D", i + len(key) + 1)
        while j > 0 and j < i + 200:
            import struct
            try:
                v = struct.unpack("<d", data[j + 1:j + 9])[0]
                if 1e-6 < v < 1e6:
                    return v
            except struct.error:
                break
            j = data.find(b"D", j + 1)
        return 1.0
    line = data[i:data.find(b"\n", i)].decode("latin1")
    return float(line.split(",")[-1])


def import_asset(a):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    path = os.path.abspath(a["in"])
    ext = os.path.splitext(path)[1].lower()
    if ext in (".glb", ".gltf"):
        bpy.ops.import_scene.gltf(filepath=path, merge_vertices=False)
        return {"importer": "gltf", "scale": 1.0}
    if ext == ".fbx":
        usf = fbx_unit_scale(path)
        # Blender scales by UnitScaleFactor/100 (to metres); undo it to stay in file units.
        scale = a["fbx_scale"] if a["fbx_scale"] is not None else 100.0 / usf
        bpy.ops.import_scene.fbx(filepath=path, global_scale=scale, anim_offset=0.0,
                                 use_anim=True, ignore_leaf_bones=False)
        return {"importer": "fbx", "unit_scale_factor": usf, "global_scale": scale}
    sys.exit("bake.py: unsupported input %s (use .glb, .gltf or .fbx)" % path)


def mesh_objects():
    return sorted([o for o in bpy.data.objects if o.type == "MESH"], key=lambda o: o.name)


def evaluated_positions(objs):
    dg = bpy.context.evaluated_depsgraph_get()
    out = []
    for o in objs:
        oe = o.evaluated_get(dg)
        me = oe.to_mesh()
        co = np.empty(len(me.vertices) * 3, dtype=np.float64)
        me.vertices.foreach_get("co", co)
        co = co.reshape(-1, 3)
        mw = np.array(oe.matrix_world, dtype=np.float64)
        co = co @ mw[:3, :3].T + mw[:3, 3]
        oe.to_mesh_clear()
        out.append(co)
    p = np.concatenate(out, axis=0)
    # Blender Z-up -> glTF Y-up
    return np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1).astype(np.float32)


def action_key_frames(act):
    fr = set()
    for fc in act.fcurves:
        for kp in fc.keyframe_points:
            fr.add(round(float(kp.co[0]), 4))
    return sorted(fr)


def choose_frames(act, mode, max_frames):
    keys = action_key_frames(act)
    if mode == "keys":
        frames = keys
    elif mode == "all":
        frames = [float(f) for f in range(int(np.floor(keys[0])), int(np.ceil(keys[-1])) + 1)]
    else:
        lo, hi = mode.split(":")
        frames = [float(f) for f in range(int(lo), int(hi) + 1)]
    if max_frames and len(frames) > max_frames:
        idx = np.unique(np.round(np.linspace(0, len(frames) - 1, max_frames)).astype(int))
        frames = [frames[i] for i in idx]
    return frames, keys[0]


def set_frame(scene, f, arms=(), pose_scale=None):
    fi = int(np.floor(f))
    scene.frame_set(fi, subframe=float(f - fi))
    if pose_scale:
        for arm in arms:
            for name, sv in pose_scale.items():
                pb = arm.pose.bones.get(name)
                if pb is not None:
                    pb.scale = (pb.scale[0] * sv[0], pb.scale[1] * sv[1], pb.scale[2] * sv[2])
        bpy.context.view_layer.update()


# Blender Z-up -> glTF Y-up as a 4x4: (x, y, z) -> (x, z, -y)
ZUP_TO_YUP = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]], dtype=np.float64)


def skin_matrices(arms, mesh):
    """[J,12] per bone: the map from the mesh's local coordinates to deformed world positions
    (Y-up both, row-major 3x4) that the armature modifier applies with that bone alone,
    G = arm.matrix_world @ pose_bone.matrix @ bone.matrix_local^-1 @ arm.matrix_world^-1
        @ mesh.matrix_world; and the bone names."""
    mats, names = [], []
    dg = bpy.context.evaluated_depsgraph_get()
    mw = np.array(mesh.evaluated_get(dg).matrix_world, dtype=np.float64)
    for arm in arms:
        arm = arm.evaluated_get(dg)  # posed matrices live on the evaluated object
        aw = np.array(arm.matrix_world, dtype=np.float64)
        awi = np.linalg.inv(aw)
        for pb in arm.pose.bones:
            G = aw @ np.array(pb.matrix, dtype=np.float64) @ \
                np.linalg.inv(np.array(pb.bone.matrix_local, dtype=np.float64)) @ awi @ mw
            G = ZUP_TO_YUP @ G @ ZUP_TO_YUP.T
            mats.append(G[:3, :].reshape(12))
            names.append(pb.name)
    return np.array(mats, dtype=np.float32).reshape(len(names), 12), names


def local_rest(mesh):
    """the mesh's own (undeformed) vertex coordinates, Y-up"""
    me = mesh.data
    co = np.empty(len(me.vertices) * 3, dtype=np.float64)
    me.vertices.foreach_get("co", co)
    p = co.reshape(-1, 3)
    return np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1).astype(np.float32)


def main():
    a = parse_args()
    info = import_asset(a)
    os.makedirs(a["out"], exist_ok=True)
    scene = bpy.context.scene
    fps = scene.render.fps / scene.render.fps_base
    objs = mesh_objects()
    arms = [o for o in bpy.data.objects if o.type == "ARMATURE"]
    if not objs:
        sys.exit("bake.py: no mesh in %s" % a["in"])
    for o in objs:
        for md in o.modifiers:
            if md.type == "ARMATURE":
                md.use_deform_preserve_volume = a["dqs"]
    if a["skin"]:
        if len(objs) != 1:
            sys.exit("bake.py: --skin-matrices wants one mesh object, not %d" % len(objs))
        np.save(os.path.join(a["out"], "rest_local.npy"), local_rest(objs[0]))
    for name in a["pose_scale"]:
        if not any(arm.pose.bones.get(name) for arm in arms):
            sys.exit("bake.py: --pose-scale: no bone %r; bones: %s" % (
                name, ", ".join(pb.name for arm in arms for pb in arm.pose.bones)))

    # Bind pose: armatures in REST position.
    for arm in arms:
        arm.data.pose_position = "REST"
    rest = evaluated_positions(objs)
    np.save(os.path.join(a["out"], "rest.npy"), rest)
    for arm in arms:
        arm.data.pose_position = "POSE"

    # Animated objects: every object with animation data (armatures, and objects the glTF
    # importer animates directly). An action is assigned to the object it was made for.
    animated = [o for o in bpy.data.objects if o.animation_data is not None]
    for o in animated:
        for tr in o.animation_data.nla_tracks:
            tr.mute = True
    # One clip per animation. The glTF importer makes one action per (animation, object) and
    # files it in an NLA track named after the animation; the FBX importer makes one action per
    # take and object. Group actions by track name, else by action name.
    groups = {}
    for o in animated:
        for t in o.animation_data.nla_tracks:
            for s in t.strips:
                if s.action:
                    groups.setdefault(t.name, []).append((o, s.action))
        if o.animation_data.action and not o.animation_data.nla_tracks:
            groups.setdefault(o.animation_data.action.name, []).append(
                (o, o.animation_data.action))
    clips = []
    for name in sorted(groups):
        if a["clips"] and name not in a["clips"]:
            continue
        for o in animated:
            o.animation_data.action = None
        for o, act in groups[name]:
            o.animation_data.action = act
        # frames from the action with the most keys (the armature's)
        act = max((act for _, act in groups[name]), key=lambda x: len(action_key_frames(x)))
        owners = [o for o, _ in groups[name]]
        frames, first = choose_frames(act, a["frames"], a["max_frames"])
        pos = np.empty((len(frames), rest.shape[0], 3), dtype=np.float32)
        skins, bones = [], []
        for k, f in enumerate(frames):
            set_frame(scene, f, arms, a["pose_scale"])
            pos[k] = evaluated_positions(objs)
            if a["skin"]:
                m, bones = skin_matrices(arms, objs[0])
                skins.append(m)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        np.save(os.path.join(a["out"], safe + ".npy"), pos)
        if a["skin"]:
            np.save(os.path.join(a["out"], safe + "_skin.npy"), np.stack(skins))
        meta = {"bones": bones, "pose_scale": a["pose_scale"],"clip": name, "frames": frames, "first_frame": first, "fps": fps,
                "times": [(f - first) / fps for f in frames],
                "source": os.path.basename(a["in"]), "objects": [o.name for o in objs],
                "owners": [o.name for o in owners], "import": info}
        with open(os.path.join(a["out"], safe + ".json"), "w") as fh:
            json.dump(meta, fh, indent=1)
        clips.append({"clip": name, "file": safe, "n_frames": len(frames)})
        print("bake: %s: %d frames (keys %g..%g at %g fps), %d vertices"
              % (name, len(frames), frames[0], frames[-1], fps, rest.shape[0]))
    with open(os.path.join(a["out"], "index.json"), "w") as fh:
        json.dump({"source": os.path.basename(a["in"]), "n_vertices": int(rest.shape[0]),
                   "objects": [o.name for o in objs], "clips": clips, "import": info}, fh,
                  indent=1)


main()

"""rig_export.py — headless Blender: sample a character's rig, as authored, into a rigapprox dataset
(docs/rigapprox.md, "Exporting your own rig" and "Dataset file").

    blender -b -P tools/blender/rig_export.py -- --in RIG.blend|CHAR.glb|CHAR.fbx --out DATA.st
            [--samples 1000] [--seed 1] [--actions [--action PATTERN]... [--frame-step 1]]
            [--armature NAME] [--mesh NAME]... [--bones PATTERN]... [--exclude PATTERN]...
            [--collection NAME]... [--ranges FILE.json] [--margin 0.15] [--sigma 0.5]
            [--default-rotation 0.8] [--include-roots] [--influence-poses 20] [--jobs N]
            [--hierarchy armature|chains] [--list] [--quiet]

DESIGN
The file is opened as is (.blend; glTF / FBX imported into an empty scene) and nothing of the rig
is replaced: every sample sets the rig's own controls and reads what Blender's depsgraph evaluates
(constraints, drivers, shape keys, every modifier).
  * Joints: the armature's deforming bones (and bones meshes are parented to), in armature order;
    their hierarchy is the armature's (nearest ancestor that is a joint), whatever it is (a flat
    deform skeleton gives all roots), or with --hierarchy chains a root joint hangs from the joint
    whose tail meets its head, else whose bone passes nearest its head, else from the joint its
    constraint target hangs from: the
    trainer's joint features are then local to it. Written: world matrices per sample, rest
    frames, inverse binds.
  * Controls: the pose channels (rotation per Euler axis, location, scale) of every bone that can
    move a joint (the joints, their ancestors, constraint targets and driver inputs, transitively)
    and the numeric custom properties drivers read. A channel is sampled when it has a range, in
    this order: --ranges FILE, the rig's limits (Limit Rotation / Location / Scale in local space,
    a property's min/max), the range the character's actions use widened by --margin, and, in a
    file without actions, +-default-rotation for rotations. Locked, driven and connected-location
    channels are skipped; so are channels that move nothing at rest (overridden by a constraint).
    Parentless bones with children (the character's placement) are skipped unless --include-roots.
  * Sampling (the paper's scheme): each control independently from a Gaussian centred on its rest
    value (0, scale 1, a property's value in the file), sigma = --sigma x its range, truncated to the
    range; sample s uses its own seed (seed, s), so shards reproduce a single run exactly.
  * Model inputs: `joint_matrices` (the joints' world matrices) and `controls`: the sampled
    properties and the sampled channels of non-deforming bones that drivers read directly (their
    effect is not visible in any joint matrix). Every sampled value is also kept in
    `sample_values`, described by metadata `sample_controls` (name, range, source).
  * Influence (paper 3.2): around --influence-poses random poses, each control is moved by half its
    range; the largest change of each vertex's v_nl is its influence on that control's row (a
    property or driver-read bone) and on the row of every joint whose local matrix it changed.
  * --jobs N: this process finds the controls, writes the plan, starts N-1 more Blender processes
    and samples its own share; each writes a shard (STEM-KofN.st) holding samples [first, first+n)
    of the whole and its share of the influence poses; `deform train` reads the shards together.
    Progress with ETA on stderr every few seconds.
Rest positions are world coordinates of the mesh's basis shape with the armature in rest position;
inverse binds are (armature_world @ bone.matrix_local)^-1, so Blender's armature deform is
sum_j w_j joint_j invbind_j rest (weights of deforming bones, normalised, 8 largest kept).
"""
import fnmatch
import json
import math
import os
import re
import struct
import subprocess
import sys
import threading
import time

import bpy
import numpy as np
from mathutils import Euler, Matrix, Quaternion

if "bool" not in np.__dict__:
    np.bool = bool  # Blender 3.4's glTF importer still uses np.bool (removed in numpy 1.24)

ME = "rig_export.py"
AXES = "xyz"
MAX_SAMPLES = 1000000


class Fail(Exception):
    pass


def die(msg):
    raise Fail(msg)


# ------------------------------------------------------------------ options
def parse_args(argv):
    a = argv[argv.index("--") + 1:] if "--" in argv else []
    o = {"in": None, "out": None, "samples": 1000, "seed": 1, "actions": False, "action": [],
         "frame_step": 1, "armature": None, "mesh": [], "bones": [], "exclude": [], "collection": [],
         "ranges": None, "margin": 0.15, "sigma": 0.5, "default_rotation": 0.8, "include_roots": False,
         "influence_poses": 20, "jobs": 1, "list": False, "quiet": False, "plan": None, "shard": None,
         "hierarchy": "armature"}
    flags = {"--actions": "actions", "--include-roots": "include_roots", "--list": "list", "--quiet": "quiet"}
    single = {"--in": str, "--out": str, "--samples": int, "--seed": int, "--frame-step": int,
              "--armature": str, "--ranges": str, "--margin": float, "--sigma": float,
              "--default-rotation": float, "--influence-poses": int, "--jobs": int, "--plan": str,
              "--shard": str, "--hierarchy": str}
    multi = ("--action", "--mesh", "--bones", "--exclude", "--collection")
    i = 0
    while i < len(a):
        k = a[i]
        if k in flags:
            o[flags[k]] = True
        elif (k in single or k in multi) and i + 1 < len(a):
            i += 1
            key = k[2:].replace("-", "_")
            try:
                if k in multi:
                    o[key].append(a[i])
                else:
                    o[key] = single[k](a[i])
            except ValueError:
                die("%s wants a number, not '%s'" % (k, a[i]))
        else:
            die("unknown or incomplete option '%s' (usage: blender -b -P rig_export.py -- --in RIG.blend "
                "--out DATA.st [options]; see docs/rigapprox.md)" % k)
        i += 1
    if not o["in"] or (not o["out"] and not o["list"]):
        die("usage: blender -b -P tools/blender/rig_export.py -- --in RIG.blend|CHAR.glb|CHAR.fbx "
            "--out DATA.st [--samples N] [--actions] [--jobs N] ... (docs/rigapprox.md)")
    if not 1 <= o["samples"] <= MAX_SAMPLES:
        die("--samples %d: want 1..%d" % (o["samples"], MAX_SAMPLES))
    if not 0 <= o["influence_poses"] <= 10000:
        die("--influence-poses %d: want 0..10000" % o["influence_poses"])
    if not 1 <= o["jobs"] <= 64:
        die("--jobs %d: want 1..64" % o["jobs"])
    if o["hierarchy"] not in ("armature", "chains"):
        die("--hierarchy armature|chains, not '%s'" % o["hierarchy"])
    if not 1 <= o["frame_step"] <= 1000:
        die("--frame-step %d: want 1..1000" % o["frame_step"])
    if not (0 <= o["margin"] <= 10 and 0 < o["sigma"] <= 100 and 0 < o["default_rotation"] <= math.pi):
        die("--margin 0..10, --sigma > 0, --default-rotation in (0, pi]")
    if o["shard"]:
        m = re.fullmatch(r"(\d+)/(\d+)", o["shard"])
        if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
            die("--shard K/N with 0 <= K < N")
        o["shard"] = (int(m.group(1)), int(m.group(2)))
    return o


def say(o, msg):
    if not o["quiet"]:
        print("%s: %s" % (ME, msg), file=sys.stderr, flush=True)


# ------------------------------------------------------------------ loading
def load(path):
    if not os.path.isfile(path):
        die("%s: no such file" % path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".blend":
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(path), load_ui=False, use_scripts=True)
    elif ext in (".glb", ".gltf"):
        bpy.ops.wm.read_factory_settings(use_empty=True)
        bpy.ops.import_scene.gltf(filepath=os.path.abspath(path))
    elif ext == ".fbx":
        bpy.ops.wm.read_factory_settings(use_empty=True)
        bpy.ops.import_scene.fbx(filepath=os.path.abspath(path))
    else:
        die("%s: want a .blend, .glb, .gltf or .fbx file" % path)
    # drivers written as Python expressions are part of the rig
    bpy.context.preferences.filepaths.use_scripts_auto_execute = True


def armature_targets(ob):
    """Armature objects deforming mesh object ob (modifiers) or carrying it (parent)."""
    out = [m.object for m in ob.modifiers if m.type == "ARMATURE" and m.object and m.show_viewport]
    if ob.parent and ob.parent.type == "ARMATURE" and ob.parent_type == "BONE":
        out.append(ob.parent)
    return out


def pick_rig(o):
    objs = list(bpy.context.view_layer.objects)
    arms = [x for x in objs if x.type == "ARMATURE"]
    if o["armature"]:
        arm = bpy.data.objects.get(o["armature"])
        if arm is None or arm.type != "ARMATURE":
            die("--armature %s: no armature object of that name (armatures: %s)"
                % (o["armature"], ", ".join(a.name for a in arms) or "none"))
    else:
        count = {}
        for x in objs:
            if x.type == "MESH":
                for a in armature_targets(x):
                    count[a.name] = count.get(a.name, 0) + len(x.data.vertices)
        if not count:
            die("%s: no mesh is deformed by an armature (an Armature modifier or a bone parent)" % o["in"])
        arm = bpy.data.objects[max(count, key=count.get)]
    if o["mesh"]:
        meshes = []
        for n in o["mesh"]:
            x = bpy.data.objects.get(n)
            if x is None or x.type != "MESH":
                die("--mesh %s: no mesh object of that name" % n)
            if arm not in armature_targets(x):
                die("--mesh %s is not deformed by armature %s" % (n, arm.name))
            meshes.append(x)
    else:
        meshes = [x for x in objs if x.type == "MESH" and arm in armature_targets(x) and x.visible_get()]
    if not meshes:
        die("armature %s deforms no visible mesh (give --mesh NAME)" % arm.name)
    for x in meshes:
        try:
            x.hide_set(False)
        except RuntimeError:
            die("mesh %s is not in the active view layer" % x.name)
        x.hide_viewport = False
    return arm, meshes


# ------------------------------------------------------------------ the rig's static parts
def m4(m):
    return np.array(m, dtype=np.float64)


def chain_parents(arm, joints, parents, height):
    """--hierarchy chains: a joint without a joint ancestor (a flat deform skeleton, as
    Rigify's) hangs from the joint whose tail is at its head (within 1 % of the height),
    else from the joint whose bone passes nearest its head (within 5 %), else from the joint
    its first constraint target hangs from (that target's ancestors, upwards, until a joint or
    another joint's first target). No cycle is made."""
    jidx = {n: i for i, n in enumerate(joints)}
    heads = np.array([arm.data.bones[n].head_local for n in joints])
    tails = np.array([arm.data.bones[n].tail_local for n in joints])
    first = {}
    for j, n in enumerate(joints):
        for c in arm.pose.bones[n].constraints:
            if not c.mute and c.influence > 0 and getattr(c, "target", None) == arm and getattr(c, "subtarget", ""):
                first[j] = c.subtarget
                break
    owner = {}
    for j, t in first.items():
        owner.setdefault(t, j)
    par = list(parents)

    def attach(j, k):
        a = k
        while a >= 0 and a != j:
            a = par[a]
        if a != j:
            par[j] = k
        return a != j
    for j, n in enumerate(joints):
        if par[j] >= 0:
            continue
        d = ((tails - heads[j]) ** 2).sum(1)
        d[j] = np.inf
        k = int(np.argmin(d))
        if d[k] < (1e-2 * height) ** 2 and attach(j, k):
            continue
        # the joint whose bone (head to tail) passes nearest its head, within 5 % of the height
        seg = tails - heads
        u = np.clip(((heads[j] - heads) * seg).sum(1) / np.maximum((seg * seg).sum(1), 1e-30), 0, 1)
        d = ((heads + u[:, None] * seg - heads[j]) ** 2).sum(1)
        d[j] = np.inf
        hit = False
        for k in np.argsort(d):
            if d[k] >= (0.05 * height) ** 2:
                break
            if attach(j, int(k)):
                hit = True
                break
        if hit:
            continue
        b = arm.data.bones.get(first[j]) if j in first else None
        while b is not None:
            k = jidx.get(b.name, owner.get(b.name, -1))
            if k >= 0 and k != j:
                attach(j, k)
                break
            b = b.parent
    return np.array(par, dtype=np.int32)


def rig_static(arm, meshes, hierarchy="armature"):
    """Joints, hierarchy, rest frames, inverse binds, skin, rest positions, triangles."""
    bones = list(arm.data.bones)
    need = {b.name for b in bones if b.use_deform}
    for x in meshes:
        if x.parent == arm and x.parent_type == "BONE" and x.parent_bone in arm.data.bones:
            need.add(x.parent_bone)
    joints = [b.name for b in bones if b.name in need]
    if not joints:
        die("armature %s has no deforming bone" % arm.name)
    jidx = {n: i for i, n in enumerate(joints)}
    parents = []
    for n in joints:
        p = arm.data.bones[n].parent
        while p is not None and p.name not in jidx:
            p = p.parent
        parents.append(-1 if p is None else jidx[p.name])
    if hierarchy == "chains":
        ext = np.array([arm.data.bones[n].head_local for n in joints] + [arm.data.bones[n].tail_local for n in joints])
        parents = chain_parents(arm, joints, parents, float(np.ptp(ext, axis=0).max()) or 1.0)
    aw = m4(arm.matrix_world)
    rest_frames = np.stack([aw @ m4(arm.data.bones[n].matrix_local) for n in joints])
    invbind = np.linalg.inv(rest_frames)
    # rest: the armature in rest position, every mesh's basis shape in world space
    old_pp = arm.data.pose_position
    arm.data.pose_position = "REST"
    bpy.context.view_layer.update()
    rest, tris, skin, offs = [], [], [], []
    v0 = 0
    for x in meshes:
        me = x.data
        n = len(me.vertices)
        co = np.zeros(n * 3)
        if me.shape_keys and me.shape_keys.reference_key:
            me.shape_keys.reference_key.data.foreach_get("co", co)
        else:
            me.vertices.foreach_get("co", co)
        mw = m4(x.matrix_world)
        rest.append(co.reshape(n, 3) @ mw[:3, :3].T + mw[:3, 3])
        me.calc_loop_triangles()
        t = np.zeros(len(me.loop_triangles) * 3, dtype=np.int32)
        me.loop_triangles.foreach_get("vertices", t)
        tris.append(t.reshape(-1, 3) + v0)
        skin.append(mesh_skin(arm, x, jidx))
        offs.append(v0)
        v0 += n
    arm.data.pose_position = old_pp
    bpy.context.view_layer.update()
    rest = np.concatenate(rest)
    tris = np.concatenate(tris)
    if len(tris) == 0:
        die("the meshes have no faces")
    K = max(max(len(w) for w in s) for s in skin)
    V = len(rest)
    skin_j = np.zeros((V, K), dtype=np.int32)
    skin_w = np.zeros((V, K), dtype=np.float32)
    i = 0
    for s in skin:
        for w in s:
            for k, (x, j) in enumerate(w):
                skin_w[i, k], skin_j[i, k] = x, j
            skin_j[i, len(w):] = w[0][1]
            i += 1
    pv = {any(m.use_deform_preserve_volume for m in x.modifiers if m.type == "ARMATURE" and m.object == arm and
              m.show_viewport) for x in meshes if x.parent_type != "BONE" or any(m.type == "ARMATURE" for m in x.modifiers)}
    if len(pv) > 1:
        die("the meshes of %s mix Preserve Volume (dual quaternion) and linear skinning: export them separately "
            "(--mesh)" % arm.name)
    return {"dqs": pv == {True}, "joints": joints, "parents": np.array(parents, dtype=np.int32), "rest_frames": rest_frames,
            "invbind": invbind, "rest": rest, "tris": tris, "skin_j": skin_j, "skin_w": skin_w,
            "offsets": offs, "nverts": [len(x.data.vertices) for x in meshes]}


def mesh_skin(arm, x, jidx):
    """Per vertex [(weight, joint)], normalised, the 8 largest, as Blender's armature deform."""
    mods = [m for m in x.modifiers if m.type == "ARMATURE" and m.object == arm and m.show_viewport]
    if mods and not mods[0].use_vertex_groups:
        die("mesh %s: its Armature modifier uses bone envelopes, not vertex groups (not supported)" % x.name)
    bone_parent = jidx.get(x.parent_bone) if x.parent == arm and x.parent_type == "BONE" else None
    gj = {}
    if mods:
        for g in x.vertex_groups:
            b = arm.data.bones.get(g.name)
            if b is not None and b.use_deform and g.name in jidx:
                gj[g.index] = jidx[g.name]
    out, bad = [], []
    for v in x.data.vertices:
        w = sorted(((g.weight, gj[g.group]) for g in v.groups if g.group in gj and g.weight > 0),
                   reverse=True)[:8]
        if not w:
            if bone_parent is None:
                bad.append(v.index)
                w = [(1.0, 0)]
            else:
                w = [(1.0, bone_parent)]
        s = sum(a for a, _ in w)
        out.append([(a / s, j) for a, j in w])
    if bad:
        die("mesh %s: %d vertices (first: %d) have no weight on a deforming bone of %s: weight them, or "
            "leave the mesh out (--mesh)" % (x.name, len(bad), bad[0], arm.name))
    return out


# ------------------------------------------------------------------ controls
def euler_order(pb):
    return pb.rotation_mode if pb.rotation_mode in ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX") else "XYZ"


def quat_of(pb):
    if pb.rotation_mode == "QUATERNION":
        return Quaternion(pb.rotation_quaternion)
    if pb.rotation_mode == "AXIS_ANGLE":
        a = pb.rotation_axis_angle
        return Quaternion((a[1], a[2], a[3]), a[0])
    return Euler(pb.rotation_euler, pb.rotation_mode).to_quaternion()


def bone_of_path(path):
    m = re.match(r'pose\.bones\["((?:[^"\\]|\\.)*)"\]', path)
    return m.group(1).replace('\\"', '"') if m else None


def prop_of_path(path):
    """'["p"]' -> (None, p); 'pose.bones["B"]["p"]' -> (B, p); else None."""
    m = re.fullmatch(r'\["((?:[^"\\]|\\.)*)"\]', path)
    if m:
        return (None, m.group(1))
    m = re.fullmatch(r'pose\.bones\["((?:[^"\\]|\\.)*)"\]\["((?:[^"\\]|\\.)*)"\]', path)
    if m:
        return (m.group(1), m.group(2))
    return None


def animates(act, arm):
    for fc in act.fcurves:
        b = bone_of_path(fc.data_path)
        if b is not None and b in arm.pose.bones:
            return True
    return False


def rig_actions(arm, o):
    acts = [a for a in bpy.data.actions if animates(a, arm)]
    if o["action"]:
        acts = [a for a in acts if any(fnmatch.fnmatchcase(a.name, p) for p in o["action"])]
    return acts


def action_ranges(arm, acts):
    """{channel name: (min, max)} of every channel the actions move, in the exporter's parameters."""
    rng = {}

    def put(name, vals):
        lo, hi = float(np.min(vals)), float(np.max(vals))
        if name in rng:
            lo, hi = min(lo, rng[name][0]), max(hi, rng[name][1])
        rng[name] = (lo, hi)
    for act in acts:
        f0, f1 = (int(round(x)) for x in act.frame_range)
        frames = range(f0, f1 + 1)
        by = {}
        for fc in act.fcurves:
            by[(fc.data_path, fc.array_index)] = fc
        bones = {bone_of_path(p) for p, _ in by} - {None}
        for bn in bones:
            pb = arm.pose.bones.get(bn)
            if pb is None:
                continue
            base = 'pose.bones["%s"].' % bn.replace('"', '\\"')

            def curve(attr, i, dflt):
                fc = by.get((base + attr, i))
                return (lambda f: fc.evaluate(f)) if fc else (lambda f: dflt)
            order = euler_order(pb)
            if pb.rotation_mode == "QUATERNION":
                cs = [curve("rotation_quaternion", i, d) for i, d in enumerate((1, 0, 0, 0))]
                moved = any((base + "rotation_quaternion", i) in by for i in range(4))
                conv = lambda f: Quaternion([c(f) for c in cs]).normalized()
            elif pb.rotation_mode == "AXIS_ANGLE":
                cs = [curve("rotation_axis_angle", i, d) for i, d in enumerate((0, 0, 1, 0))]
                moved = any((base + "rotation_axis_angle", i) in by for i in range(4))
                conv = lambda f: Quaternion([cs[1](f), cs[2](f), cs[3](f)], cs[0](f))
            else:
                cs = [curve("rotation_euler", i, 0) for i in range(3)]
                moved = any((base + "rotation_euler", i) in by for i in range(3))
                conv = None
            if moved:
                vals, prev = [], None
                for f in frames:
                    if conv is None:
                        e = [c(f) for c in cs]
                    else:
                        q = conv(f)
                        e = q.to_euler(order, prev) if prev is not None else q.to_euler(order)
                        prev = e
                    vals.append(list(e))
                vals = np.array(vals)
                for i in range(3):
                    put("%s/rot_%s" % (bn, AXES[i]), vals[:, i])
            for attr, tag in (("location", "loc"), ("scale", "scale")):
                for i in range(3):
                    fc = by.get((base + attr, i))
                    if fc:
                        put("%s/%s_%s" % (bn, tag, AXES[i]), np.array([fc.evaluate(f) for f in frames]))
        for (p, i), fc in by.items():
            pp = prop_of_path(p)
            if pp:
                put(prop_name(pp[0], pp[1]), np.array([fc.evaluate(f) for f in frames]))
    return rng


def prop_name(bone, prop):
    """A property control's name: PROP on the armature object, BONE["PROP"] on a pose bone."""
    return '%s["%s"]' % (bone, prop) if bone is not None else prop


def all_drivers(ids):
    for idb in ids:
        ad = getattr(idb, "animation_data", None)
        if ad:
            for fc in ad.drivers:
                yield idb, fc


def driver_inputs(fc, arm):
    """(bones of arm read, [(id, bone or None, prop)] properties read) by driver fcurve fc."""
    bones, props = set(), []
    for v in fc.driver.variables:
        for t in v.targets:
            if t.id is None:
                continue
            if v.type == "SINGLE_PROP":
                pp = prop_of_path(t.data_path)
                if pp:
                    props.append((t.id, pp[0], pp[1]))
                elif t.id == arm:
                    b = bone_of_path(t.data_path)
                    if b:
                        bones.add(b)
            elif t.id == arm and t.bone_target:
                bones.add(t.bone_target)
    return bones, props


def in_collection(arm, bn, names):
    b = arm.data.bones[bn]
    for n in names:
        if hasattr(b, "collections") and any(c.name == n for c in b.collections):  # Blender >= 4
            return True
        pb = arm.pose.bones[bn]
        if getattr(pb, "bone_group", None) is not None and pb.bone_group.name == n:  # Blender 3
            return True
        m = re.fullmatch(r"layer:(\d+)", n)
        if m and hasattr(b, "layers") and int(m.group(1)) < 32 and b.layers[int(m.group(1))]:
            return True
    return False


def load_overrides(path):
    if not path:
        return []
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        die("--ranges %s: %s" % (path, e))
    if not isinstance(d, dict):
        die("--ranges %s: want a JSON object {control name or pattern: [lo, hi] | {\"lo\", \"hi\", "
            "\"default\"} | null}" % path)
    out = []
    for k, v in d.items():
        if v is None:
            out.append((k, None))
            continue
        if isinstance(v, list) and len(v) == 2:
            v = {"lo": v[0], "hi": v[1]}
        if not isinstance(v, dict) or not all(isinstance(v.get(x), (int, float)) for x in ("lo", "hi")) \
                or not v["lo"] < v["hi"] or ("default" in v and not isinstance(v["default"], (int, float))):
            die("--ranges %s: '%s': want [lo, hi] with lo < hi, {\"lo\": .., \"hi\": .., \"default\": ..} "
                "or null" % (path, k))
        out.append((k, v))
    return out


def override_for(ovr, name, bone):
    for k, v in ovr:  # exact names first, then patterns in file order
        if k == name:
            return True, v
    for k, v in ovr:
        if fnmatch.fnmatchcase(name, k) or (bone and fnmatch.fnmatchcase(bone, k) and "/" not in k):
            return True, v
    return False, None


def discover(arm, meshes, st, o, height):
    """The plan: every sampled control with its range and source, and what was left out."""
    joints = set(st["joints"])
    acts = rig_actions(arm, o)
    arng = action_ranges(arm, acts)
    ovr = load_overrides(o["ranges"])
    ids = [arm, arm.data] + [x for m in meshes for x in (m, m.data, m.data.shape_keys) if x is not None]
    # bones and properties the mesh side reads (shape keys, modifiers)
    read_bones, props = set(), []
    for idb, fc in all_drivers(ids[2:] + [arm.data]):
        b, p = driver_inputs(fc, arm)
        read_bones |= b
        props += p
    driven = set()  # (bone, attr) channels written by drivers
    arm_drivers = {}
    for idb, fc in all_drivers([arm]):
        b = bone_of_path(fc.data_path)
        if b is not None:
            arm_drivers.setdefault(b, []).append(fc)
            attr = fc.data_path.rsplit(".", 1)[-1]
            if attr.startswith("rotation"):
                driven.add((b, "rot"))
            elif attr in ("location", "scale"):
                driven.add((b, attr[:3] if attr == "location" else "scale", fc.array_index))
        else:
            bb, p = driver_inputs(fc, arm)  # object-level drivers (e.g. constraint influence)
            props += p
    # bones that can move a joint: closure over parents, constraint targets, driver inputs
    need, todo = set(), list(joints | read_bones)
    while todo:
        bn = todo.pop()
        if bn in need or bn not in arm.pose.bones:
            continue
        need.add(bn)
        pb = arm.pose.bones[bn]
        if pb.parent:
            todo.append(pb.parent.name)
        for c in pb.constraints:
            if c.mute:
                continue
            for attr in ("subtarget", "pole_subtarget"):
                if getattr(c, "target" if attr == "subtarget" else "pole_target", None) == arm and getattr(c, attr, ""):
                    todo.append(getattr(c, attr))
            for t in getattr(c, "targets", []) or []:
                if getattr(t, "target", None) == arm and getattr(t, "subtarget", ""):
                    todo.append(t.subtarget)
        for fc in arm_drivers.get(bn, []):
            b, p = driver_inputs(fc, arm)
            todo += list(b)
            props += p
    has_actions = bool(acts)
    # the bone every joint descends from, if any: it only places the character
    tops = set()
    for jn in joints:
        b = arm.data.bones[jn]
        while b.parent is not None:
            b = b.parent
        tops.add(b.name)
    top = tops.pop() if len(tops) == 1 else None
    controls, skipped = [], []

    def skip(name, why):
        skipped.append((name, why))

    def bone_ok(bn, name):
        if o["collection"] and not in_collection(arm, bn, o["collection"]):
            return False
        if o["bones"] and not any(fnmatch.fnmatchcase(bn, p) or fnmatch.fnmatchcase(name, p) for p in o["bones"]):
            return False
        return not any(fnmatch.fnmatchcase(bn, p) or fnmatch.fnmatchcase(name, p) for p in o["exclude"])
    for b in arm.data.bones:
        bn = b.name
        if bn not in need:
            continue
        pb = arm.pose.bones[bn]
        root = b.parent is None and not o["include_roots"]
        if root and b.name == top:
            skip(bn + "/*", "the character's placement (the root of every joint; --include-roots samples it)")
            continue
        lim = {}
        for c in pb.constraints:
            if c.mute or c.influence <= 0 or c.owner_space != "LOCAL":
                continue
            for i, ax in enumerate(AXES):
                if c.type == "LIMIT_ROTATION" and getattr(c, "use_limit_" + ax):
                    lim["rot", i] = (getattr(c, "min_" + ax), getattr(c, "max_" + ax))
                if c.type in ("LIMIT_LOCATION", "LIMIT_SCALE") and getattr(c, "use_min_" + ax) and getattr(c, "use_max_" + ax):
                    lim["loc" if c.type == "LIMIT_LOCATION" else "scale", i] = (getattr(c, "min_" + ax), getattr(c, "max_" + ax))
        for kind in ("rot", "loc", "scale"):
            for i in range(3):
                name = "%s/%s_%s" % (bn, kind, AXES[i])
                if not bone_ok(bn, name):
                    continue
                found, ov = override_for(ovr, name, bn)
                if found and ov is None:
                    skip(name, "--ranges: null")
                    continue
                dflt = 1.0 if kind == "scale" else 0.0
                if found:
                    lo, hi, src = ov["lo"], ov["hi"], "override"
                    dflt = ov.get("default", dflt)
                else:
                    locked = (pb.lock_rotation if kind == "rot" else pb.lock_location if kind == "loc" else pb.lock_scale)[i]
                    if locked:
                        continue
                    if (bn, "rot") in driven and kind == "rot" or (bn, kind, i) in driven or (bn, kind, -1) in driven:
                        skip(name, "driven")
                        continue
                    if kind == "loc" and b.use_connect or kind != "rot" and root:
                        continue  # a root's location / scale moves the character, not its shape
                    if (kind, i) in lim:
                        (lo, hi), src = lim[kind, i], "limit"
                    elif name in arng and arng[name][1] - arng[name][0] > {"rot": 1e-3, "loc": 1e-4 * height,
                                                                             "scale": 1e-4}[kind]:
                        lo, hi = arng[name]
                        unit = {"rot": 0.05, "loc": 0.01 * height, "scale": 0.02}[kind]
                        m = max(o["margin"] * (hi - lo), unit)
                        lo, hi, src = lo - m, hi + m, "actions"
                    elif kind == "rot" and not has_actions:
                        lo, hi, src = -o["default_rotation"], o["default_rotation"], "default"
                    else:
                        if has_actions and kind == "rot":
                            skip(name, "no limit, and the actions do not move it")
                        continue
                if kind == "rot":
                    lo, hi = max(lo, -math.pi), min(hi, math.pi)
                if not lo < hi:
                    skip(name, "empty range")
                    continue
                controls.append({"name": name, "kind": kind, "bone": bn, "axis": i, "order": euler_order(pb),
                                 "lo": float(lo), "hi": float(hi), "default": float(min(max(dflt, lo), hi)),
                                 "source": src, "input": "controls" if (bn in read_bones and bn not in joints)
                                 else "joints"})
    # numeric custom properties read by drivers
    seen = set()
    for idb, bone, prop in props:
        owner = idb.pose.bones.get(bone) if bone is not None and hasattr(idb, "pose") else idb
        if bone is not None and owner is None:
            continue
        name = prop_name(bone, prop) if idb == arm else '%s:%s' % (idb.name, prop)
        if name in seen:
            continue
        seen.add(name)
        try:
            val = owner[prop]
        except (KeyError, TypeError):
            continue
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            skip(name, "not a number")
            continue
        if o["bones"] and not any(fnmatch.fnmatchcase(name, p) for p in o["bones"]):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in o["exclude"]):
            continue
        found, ov = override_for(ovr, name, None)
        if found and ov is None:
            skip(name, "--ranges: null")
            continue
        dflt = float(val)
        if found:
            lo, hi, src = ov["lo"], ov["hi"], "override"
            dflt = ov.get("default", dflt)
        else:
            ui = {}
            try:
                ui = owner.id_properties_ui(prop).as_dict()
            except (TypeError, AttributeError):
                pass
            lo, hi = ui.get("soft_min", -1e38), ui.get("soft_max", 1e38)
            if not (abs(lo) < 1e30 and abs(hi) < 1e30 and lo < hi):
                lo, hi = ui.get("min", -1e38), ui.get("max", 1e38)
            if abs(lo) < 1e30 and abs(hi) < 1e30 and lo < hi:
                src = "property"
            elif name in arng and arng[name][1] - arng[name][0] > 1e-9:
                lo, hi = arng[name]
                m = o["margin"] * (hi - lo)
                lo, hi, src = lo - m, hi + m, "actions"
            else:
                skip(name, "no min/max and the actions do not move it (give a range in --ranges)")
                continue
        controls.append({"name": name, "kind": "prop", "id": idb.name, "idtype": type(idb).__name__,
                         "bone": bone, "prop": prop, "int": isinstance(val, int), "lo": float(lo),
                         "hi": float(hi), "default": float(min(max(dflt, lo), hi)), "source": src,
                         "input": "controls"})
    return controls, skipped, [a.name for a in acts]


# ------------------------------------------------------------------ setting and reading poses
class Rig:
    def __init__(self, arm, meshes, st, controls, o):
        self.arm, self.meshes, self.st, self.o = arm, meshes, st, o
        self.controls = controls
        self.joints = st["joints"]
        self.V = len(st["rest"])
        self.numeric = [i for i, c in enumerate(controls) if c["input"] == "controls"]
        self.by_bone = {}
        for i, c in enumerate(controls):
            if c["kind"] != "prop":
                self.by_bone.setdefault(c["bone"], []).append(i)
        self.owners = []
        for c in controls:
            if c["kind"] == "prop":
                idb = find_id(c["idtype"], c["id"])
                self.owners.append(idb.pose.bones[c["bone"]] if c["bone"] is not None else idb)
            else:
                self.owners.append(None)
        self.tag = {arm} | {x.id_data for x in self.owners if x is not None}
        self.buf = [np.zeros(n * 3, dtype=np.float32) for n in st["nverts"]]
        # the skinning part of v_nl (numpy): S_j = world_j invbind_j, T_i = sum_k w_ik S_j
        self.invbind = st["invbind"]

    def reset_pose(self):
        for pb in self.arm.pose.bones:
            pb.location = (0, 0, 0)
            pb.scale = (1, 1, 1)
            pb.rotation_quaternion = (1, 0, 0, 0)
            pb.rotation_euler = (0, 0, 0)
            pb.rotation_axis_angle = (0, 0, 1, 0)

    def set(self, x):
        for bn, idx in self.by_bone.items():
            pb = self.arm.pose.bones[bn]
            e, loc, sc = [0.0, 0.0, 0.0], list(pb.location), list(pb.scale)
            rot = False
            for i in idx:
                c = self.controls[i]
                if c["kind"] == "rot":
                    e[c["axis"]], rot = float(x[i]), True
                elif c["kind"] == "loc":
                    loc[c["axis"]] = float(x[i])
                else:
                    sc[c["axis"]] = float(x[i])
            if rot:
                eu = Euler(e, self.controls[idx[0]]["order"])
                if pb.rotation_mode == "QUATERNION":
                    pb.rotation_quaternion = eu.to_quaternion()
                elif pb.rotation_mode == "AXIS_ANGLE":
                    ax, an = eu.to_quaternion().to_axis_angle()
                    pb.rotation_axis_angle = (an, ax[0], ax[1], ax[2])
                else:
                    pb.rotation_euler = eu
            pb.location, pb.scale = loc, sc
        for i, c in enumerate(self.controls):
            if c["kind"] == "prop":
                self.owners[i][c["prop"]] = int(round(x[i])) if c["int"] else float(x[i])
        for idb in self.tag:
            idb.update_tag()

    def values(self):
        """The controls' current values (after an action set them)."""
        x = np.zeros(len(self.controls))
        for bn, idx in self.by_bone.items():
            pb = self.arm.pose.bones[bn]
            e = quat_of(pb).to_euler(self.controls[idx[0]]["order"])
            for i in idx:
                c = self.controls[i]
                x[i] = e[c["axis"]] if c["kind"] == "rot" else (pb.location if c["kind"] == "loc" else pb.scale)[c["axis"]]
        for i, c in enumerate(self.controls):
            if c["kind"] == "prop":
                x[i] = float(self.owners[i][c["prop"]])
        return x

    def evaluate(self, need_mesh=True):
        """World joint matrices [J,4,4] and world positions [V,3] of the current state."""
        bpy.context.view_layer.update()
        dg = bpy.context.evaluated_depsgraph_get()
        ae = self.arm.evaluated_get(dg)
        aw = m4(ae.matrix_world)
        W = np.stack([aw @ m4(ae.pose.bones[n].matrix) for n in self.joints])
        if not need_mesh:
            return W, None
        P = []
        for x, buf, n in zip(self.meshes, self.buf, self.st["nverts"]):
            ev = x.evaluated_get(dg)
            me = ev.to_mesh()
            if len(me.vertices) != n:
                ev.to_mesh_clear()
                mods = [m.name for m in x.modifiers if m.show_viewport and m.type in
                        ("SUBSURF", "MULTIRES", "TRIANGULATE", "DECIMATE", "REMESH", "MIRROR", "ARRAY",
                         "SOLIDIFY", "BEVEL", "WELD", "SKIN", "BOOLEAN", "EDGE_SPLIT", "MASK", "BUILD")]
                die("mesh %s: the evaluated mesh has %d vertices, the mesh %d: a modifier changes the topology "
                    "(%s); turn it off in the viewport for the export" % (x.name, len(me.vertices), n,
                                                                            ", ".join(mods) or "?"))
            me.vertices.foreach_get("co", buf)
            ev.to_mesh_clear()
            mw = m4(ev.matrix_world)
            P.append(buf.reshape(n, 3).astype(np.float64) @ mw[:3, :3].T + mw[:3, 3])
        return W, np.concatenate(P)

    def vnl(self, W, P):
        S = W @ self.invbind
        if self.st["dqs"]:
            T = dqs_T(S, self.st["skin_j"], self.st["skin_w"], self.invbind)
        else:
            T = np.einsum("vk,vkab->vab", self.st["skin_w"].astype(np.float64), S[self.st["skin_j"]])
        d = (P - T[:, :3, 3])[..., None]
        try:
            return np.linalg.solve(T[:, :3, :3], d)[..., 0] - self.st["rest"]
        except np.linalg.LinAlgError:
            return np.zeros_like(P)


def dqs_T(S, sj, sw, invbind):
    """Per-vertex transforms of dual quaternion skinning (as core/rigapprox: rigid parts blended
    as dual quaternions, signs relative to the heaviest influence; scale / shear about each
    joint's bind position blended linearly and applied first). S [J,4,4] -> [V,4,4]."""
    J = len(S)
    dq, plin = np.zeros((J, 8)), np.zeros((J, 4, 4))
    for j in range(J):
        L = S[j, :3, :3]
        U, s, Vt = np.linalg.svd(L)
        R = U @ Vt
        if np.linalg.det(R) < 0:
            R, P = np.eye(3), L
        else:
            P = R.T @ L
        c = np.linalg.inv(invbind[j])[:3, 3]
        e = c - P @ c
        t = S[j, :3, 3] - R @ e
        plin[j, :3, :3], plin[j, :3, 3], plin[j, 3, 3] = P, e, 1
        q = Matrix(R.tolist()).to_quaternion()
        qr = np.array([q.x, q.y, q.z, q.w])
        tq = np.array([t[0], t[1], t[2], 0.0])
        # dual part 0.5 * (t, 0) * q  (x, y, z, w layout)
        w1, v1 = tq[3], tq[:3]
        w2, v2 = qr[3], qr[:3]
        dq[j, :4] = qr
        dq[j, 4:7] = 0.5 * (w1 * v2 + w2 * v1 + np.cross(v1, v2))
        dq[j, 7] = 0.5 * (w1 * w2 - v1 @ v2)
    d = dq[sj]  # [V,K,8]
    sgn = np.where((d[:, :, :4] * d[:, :1, :4]).sum(-1) < 0, -1.0, 1.0)
    b = ((sw * sgn)[..., None] * d).sum(1)
    Pb = (sw[..., None, None] * plin[sj]).sum(1)
    r, du = b[:, :4], b[:, 4:]
    n2 = (r * r).sum(1)
    x, y, z, w = r.T
    T = np.zeros((len(b), 4, 4))
    T[:, 0, 0], T[:, 0, 1], T[:, 0, 2] = n2 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)
    T[:, 1, 0], T[:, 1, 1], T[:, 1, 2] = 2 * (x * y + z * w), n2 - 2 * (x * x + z * z), 2 * (y * z - x * w)
    T[:, 2, 0], T[:, 2, 1], T[:, 2, 2] = 2 * (x * z - y * w), 2 * (y * z + x * w), n2 - 2 * (x * x + y * y)
    T[:, :3, :3] /= n2[:, None, None]
    dx, dy, dz, dw = du.T
    T[:, 0, 3] = 2 * (w * dx - dw * x + y * dz - z * dy) / n2
    T[:, 1, 3] = 2 * (w * dy - dw * y + z * dx - x * dz) / n2
    T[:, 2, 3] = 2 * (w * dz - dw * z + x * dy - y * dx) / n2
    T[:, 3, 3] = 1
    return T @ Pb


def find_id(idtype, name):
    coll = {"Object": bpy.data.objects, "Armature": bpy.data.armatures, "Mesh": bpy.data.meshes,
            "Key": bpy.data.shape_keys}.get(idtype)
    if coll is None or name not in coll:
        die("the rig changed: %s %s is gone" % (idtype, name))
    return coll[name]


def local(W, parents):
    L = W.copy()
    for j, p in enumerate(parents):
        if p >= 0:
            L[j] = np.linalg.solve(W[p], W[j])
    return L


def trunc_normal(rng, mu, sig, lo, hi):
    x = rng.normal(mu, sig)
    bad = (x < lo) | (x > hi)
    for _ in range(64):
        if not bad.any():
            break
        x[bad] = rng.normal(mu[bad], sig[bad])
        bad = (x < lo) | (x > hi)
    x[bad] = rng.uniform(lo[bad], hi[bad])
    return x


def draw(controls, seed, s, sigma):
    rng = np.random.default_rng([seed, s])
    lo = np.array([c["lo"] for c in controls])
    hi = np.array([c["hi"] for c in controls])
    mu = np.array([c["default"] for c in controls])
    if not controls:
        return np.zeros(0)
    return trunc_normal(rng, mu, sigma * (hi - lo), lo, hi)


# ------------------------------------------------------------------ progress
class Progress:
    def __init__(self, o, total, label):
        self.o, self.total, self.label = o, total, label
        self.t0 = self.last = time.time()
        self.others = {}  # other jobs' counts
        self.mine = 0

    def step(self, n=1, force=False):
        self.mine += n
        if self.o["shard"] is not None and self.o["plan"]:
            print("@@progress %d" % self.mine, flush=True)  # read by job 0
            return
        now = time.time()
        if force or now - self.last >= max(3.0, (now - self.t0) / 20):
            self.last = now
            done = self.mine + sum(self.others.values())
            el = now - self.t0
            rate = done / el if el > 0 else 0
            eta = (self.total - done) / rate if rate > 0 else float("nan")
            say(self.o, "%s %d/%d (%.0f %%), %.1f/s, %.0f s elapsed, ETA %.0f s"
                % (self.label, done, self.total, 100.0 * done / max(self.total, 1), rate, el, eta))


def share(n, k, N):
    """Contiguous block k of N over range(n)."""
    return range(n * k // N, n * (k + 1) // N)


# ------------------------------------------------------------------ export
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
    os.replace(path + ".tmp", path)


def m34(M):
    return M[..., :3, :].reshape(M.shape[:-2] + (12,)).astype(np.float32)


def shard_path(out, k, N):
    if N == 1:
        return out
    stem, ext = os.path.splitext(out)
    return "%s-%dof%d%s" % (stem, k + 1, N, ext or ".st")


def run_shard(rig, plan, o, k, N, prog):
    """Samples of shard k of N (and its influence poses): the dataset's per-sample arrays."""
    arm, controls = rig.arm, rig.controls
    S = len(controls)
    ad = arm.animation_data or arm.animation_data_create()
    scene = bpy.context.scene
    if o["actions"]:
        frames = [(a, f) for a, f0, f1 in plan["frames"] for f in range(f0, f1 + 1, o["frame_step"])]
        mine = list(share(len(frames), k, N))
    else:
        mine = list(share(o["samples"], k, N))
    n = len(mine)
    J, V = len(rig.joints), rig.V
    jm = np.zeros((n, J, 12), dtype=np.float32)
    pos = np.zeros((n, V, 3), dtype=np.float32)
    sv = np.zeros((n, S), dtype=np.float32)
    ad.use_nla = False
    if not o["actions"]:
        ad.action = None
        rig.reset_pose()
    for r, s in enumerate(mine):
        if o["actions"]:
            act, f = frames[s]
            if ad.action is None or ad.action.name != act:
                ad.action = bpy.data.actions[act]
                rig.reset_pose()
            scene.frame_set(f)
            x = rig.values()
        else:
            x = draw(controls, o["seed"], s, o["sigma"])
            rig.set(x)
        W, P = rig.evaluate()
        jm[r], pos[r], sv[r] = m34(W), P, x
        prog.step()
    infl = None
    if o["influence_poses"] > 0 and not o["actions"]:
        C = len(rig.numeric)
        col = {i: c for c, i in enumerate(rig.numeric)}
        infl = np.zeros((C + J, V), dtype=np.float32)
        par = rig.st["parents"]
        h = max(float(np.ptp(rig.st["rest"], axis=0).max()), 1e-9)
        for p in share(o["influence_poses"], k, N):
            x = draw(controls, o["seed"], MAX_SAMPLES + p, o["sigma"])
            rig.set(x)
            W0, P0 = rig.evaluate()
            n0, L0 = rig.vnl(W0, P0), local(W0, par)
            prog.step()
            for i, c in enumerate(controls):
                x2 = x.copy()
                x2[i] += (0.5 if x[i] < 0.5 * (c["lo"] + c["hi"]) else -0.5) * (c["hi"] - c["lo"])
                rig.set(x2)
                W1, P1 = rig.evaluate()
                d = np.linalg.norm(rig.vnl(W1, P1) - n0, axis=1).astype(np.float32)
                if i in col:
                    infl[col[i]] = np.maximum(infl[col[i]], d)
                dL = np.abs(local(W1, par) - L0)[:, :3, :]
                dL[:, :, 3] /= h
                for j in np.nonzero(dL.reshape(J, -1).max(1) > 1e-6)[0]:
                    infl[C + j] = np.maximum(infl[C + j], d)
                prog.step()
            rig.set(x)
    return mine, jm, pos, sv, infl


def main():
    o = parse_args(sys.argv)
    t0 = time.time()
    load(o["in"])
    arm, meshes = pick_rig(o)
    st = rig_static(arm, meshes, o["hierarchy"])
    height = float(np.ptp(st["rest"], axis=0).max())
    if not height > 0:
        die("the meshes' rest positions are all equal")
    if o["plan"]:
        with open(o["plan"]) as f:
            plan = json.load(f)
    else:
        controls, skipped, acts = discover(arm, meshes, st, o, height)
        frames = []
        for a in acts:
            f0, f1 = (int(round(x)) for x in bpy.data.actions[a].frame_range)
            frames.append((a, f0, f1))
        plan = {"controls": controls, "skipped": skipped, "actions": acts, "frames": frames}
    rig = Rig(arm, meshes, st, plan["controls"], o)
    if not o["plan"]:
        # drop controls that move nothing at rest (overridden by a constraint, IK or a driver)
        ad = arm.animation_data or arm.animation_data_create()
        ad.action, ad.use_nla = None, False
        rig.reset_pose()
        base = np.array([c["default"] for c in rig.controls])
        rig.set(base)
        W0, P0 = rig.evaluate()
        prog = Progress(o, len(rig.controls), "checking controls:")
        keep = []
        for i, c in enumerate(rig.controls):
            x = base.copy()
            x[i] = c["hi"] if c["hi"] - c["default"] >= c["default"] - c["lo"] else c["lo"]
            rig.set(x)
            W1, P1 = rig.evaluate(need_mesh=c["input"] == "controls")
            moved = np.abs((W1 - W0)[:, :3, :3]).max() > 1e-6 or np.abs((W1 - W0)[:, :3, 3]).max() > 1e-6 * height
            if P1 is not None:
                moved = moved or np.abs(P1 - P0).max() > 1e-6 * height
            if moved:
                keep.append(c)
            else:
                plan["skipped"].append((c["name"], "moves nothing at rest (overridden by a constraint, IK or a driver)"))
            prog.step()
        rig.set(base)
        plan["controls"] = keep
        rig = Rig(arm, meshes, st, keep, o)
    controls = rig.controls
    if not o["quiet"] or o["list"]:
        say(dict(o, quiet=False) if o["list"] else o,
            "armature %s: %d joints (%d roots), %d meshes (%s), %d vertices; %d actions; %d controls sampled "
            "(%d model inputs `controls`), %d left out" % (
                arm.name, len(st["joints"]), int((st["parents"] < 0).sum()), len(meshes),
                ", ".join(m.name for m in meshes), len(st["rest"]), len(plan["actions"]), len(controls),
                len(rig.numeric), len(plan["skipped"])))
        if o["list"]:
            for c in controls:
                print("  %-40s %-8s [%9.4g, %9.4g] default %-9.4g %s" % (c["name"], c["source"], c["lo"], c["hi"],
                      c["default"], "(input: controls)" if c["input"] == "controls" else ""))
            groups = {}
            for n, why in plan["skipped"]:
                groups.setdefault((n.split("/")[0] if "/" in n else n, why), []).append(n.split("/")[-1])
            for (b, why), chans in groups.items():
                print("  %-40s not sampled: %s" % (b if chans == [b] else "%s/%s" % (b, ",".join(chans)), why))
            return
    if not controls and not o["actions"]:
        die("nothing to sample: no control of %s has a range (see --list; give ranges with --ranges)" % arm.name)
    if o["actions"] and not plan["frames"]:
        die("--actions: no action animates %s%s" % (arm.name, " matching --action" if o["action"] else ""))
    N = o["jobs"] if o["shard"] is None else o["shard"][1]
    k = 0 if o["shard"] is None else o["shard"][0]
    nframes = sum(len(range(f0, f1 + 1, o["frame_step"])) for _, f0, f1 in plan["frames"])
    total_n = nframes if o["actions"] else o["samples"]
    if N > total_n:
        die("--jobs %d: more jobs than samples (%d)" % (N, total_n))
    P = 0 if o["actions"] else o["influence_poses"]
    work = total_n + P * (len(controls) + 1)
    prog = Progress(o, work, "sampling:" if not P else "sampling + influence:")
    children = []
    if N > 1 and o["shard"] is None:
        plan_path = o["out"] + ".plan.json"
        with open(plan_path, "w") as f:
            json.dump(plan, f)
        blender = bpy.app.binary_path
        for kk in range(1, N):
            cmd = [blender, "-b", "--factory-startup", "-noaudio", "-P", os.path.abspath(__file__), "--"]
            cmd += sys.argv[sys.argv.index("--") + 1:] + ["--plan", plan_path, "--shard", "%d/%d" % (kk, N)]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            children.append(p)
            CHILDREN.append(p)
            tail = []

            def reader(p=p, kk=kk, tail=tail):
                for line in p.stdout:
                    if line.startswith("@@progress "):
                        prog.others[kk] = int(line.split()[1])
            threading.Thread(target=reader, daemon=True).start()

            def ereader(p=p, tail=tail):
                for line in p.stderr:
                    tail.append(line.rstrip())
                    del tail[:-20]
            threading.Thread(target=ereader, daemon=True).start()
            p.tail = tail
        say(o, "started %d more Blender processes (--jobs %d)" % (N - 1, N))
    mine, jm, pos, sv, infl = run_shard(rig, plan, o, k, N, prog)
    names = [c["name"] for c in controls]
    tensors = {
        "rest_positions": st["rest"].astype(np.float32), "triangles": st["tris"].astype(np.int32),
        "inverse_bind_matrices": m34(st["invbind"]), "skin_joints": st["skin_j"], "skin_weights": st["skin_w"],
        "joint_matrices": jm, "positions": pos, "joint_parents": st["parents"],
        "rest_joint_matrices": m34(st["rest_frames"]),
    }
    cn = [names[i] for i in rig.numeric]
    if rig.numeric:
        tensors["control_ranges"] = np.array([[controls[i]["lo"], controls[i]["hi"], controls[i]["default"]]
                                              for i in rig.numeric], dtype=np.float32)
        tensors["controls"] = sv[:, rig.numeric]
    if controls:
        tensors["sample_values"] = sv
    if infl is not None:
        tensors["influence"] = infl
    meta = {"kind": "rigdata", "format_version": "2", "control_names": json.dumps(cn),
            "skinning": "dqs" if st["dqs"] else "lbs",
            "joint_names": json.dumps(st["joints"]), "height": "%.9g" % height,
            "producer": "%s (blender %s) %s" % (ME, bpy.app.version_string, os.path.basename(o["in"])),
            "sample_controls": json.dumps([{x: c[x] for x in ("name", "lo", "hi", "default", "source", "input")}
                                           for c in controls]),
            "first_sample": str(mine[0] if mine else 0), "total_samples": str(total_n),
            "hierarchy": o["hierarchy"],
            "sampling": "actions" if o["actions"] else "random seed %d sigma %g influence-poses %d"
                        % (o["seed"], o["sigma"], o["influence_poses"])}
    out = shard_path(o["out"], k, N)
    write_safetensors(out, tensors, meta)
    for kk, p in enumerate(children, 1):
        while p.poll() is None:
            prog.step(0)
            time.sleep(0.5)
        if p.returncode != 0:
            die("job %d failed (exit %d):\n  %s" % (kk, p.returncode, "\n  ".join(p.tail[-10:])))
    if children:
        try:
            os.remove(o["out"] + ".plan.json")
        except OSError:
            pass
    if o["shard"] is None:
        prog.step(0, force=True)
        files = [shard_path(o["out"], kk, N) for kk in range(N)]
        say(o, "wrote %s: %d %s, %d vertices, %d joints, %d controls (%d inputs), K %d, %.0f s" % (
            " ".join(files), total_n, "action frames" if o["actions"] else "random poses", len(st["rest"]),
            len(st["joints"]), len(controls), len(rig.numeric), st["skin_j"].shape[1], time.time() - t0))
        if N > 1:
            say(o, "train on all shards at once: deform train %s --out REPO/NAME" % " ".join(files))


CHILDREN = []

if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        for p in CHILDREN:
            p.kill()
        print("%s: error: %s" % (ME, e), file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)

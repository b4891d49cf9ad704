"""landmarks.py — a face's landmarks picked in Blender, as points for `deform retarget
transfer --target-landmark-points` (or `--source-landmark-points`).

In Blender, put an empty on each facial feature (Add > Empty > Plain Axes, snapped to a
vertex or the surface), named so that the names sort in the order of the other side's
landmark list: lm.00 on the feature of its first index, lm.01 on the second, ... (numbers
sort as numbers: lm.2 before lm.10). Then, headless:

    blender -b AVATAR.blend --python tools/blender/landmarks.py -- OUT.txt \
        [--prefix lm] [--axes gltf|blender]

writes one line "x y z" per object whose name starts with the prefix, in name order: its
world location in the coordinates of the model `deform import` makes of a glTF exported from
that file (--axes gltf, the default: glTF is Y-up, (x, y, z) in Blender is (x, z, -y) there;
metres, Blender's units at unit scale 1), or Blender's own Z-up coordinates (--axes blender,
for a mesh read by other means in Blender's frame). `deform retarget transfer` snaps each
point to the mesh's nearest vertex and says how far the farthest moved; more than two mean
edges means the points are not in the mesh's frame or unit.
"""
import re
import sys

import bpy


def natural(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def main():
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    if len(argv) < 1 or len(argv) % 2 != 1:
        sys.exit("usage: blender -b FILE.blend --python tools/blender/landmarks.py -- OUT.txt "
                 "[--prefix lm] [--axes gltf|blender]")
    out = argv[0]
    opts = dict(zip(argv[1::2], argv[2::2]))
    unknown = set(opts) - {"--prefix", "--axes"}
    if unknown:
        sys.exit("landmarks.py: unknown option %s" % ", ".join(sorted(unknown)))
    prefix = opts.get("--prefix", "lm")
    axes = opts.get("--axes", "gltf")
    if axes not in ("gltf", "blender"):
        sys.exit("landmarks.py: --axes must be gltf or blender")
    picked = sorted((o for o in bpy.data.objects if o.name.startswith(prefix)),
                    key=lambda o: natural(o.name))
    if len(picked) < 4:
        sys.exit("landmarks.py: %d objects named %s* (want at least 4: the transfer's warp "
                 "needs points spanning 3D)" % (len(picked), prefix))
    with open(out, "w") as f:
        f.write("# %d landmarks from %s (objects %s*, %s axes): %s\n" % (
            len(picked), bpy.data.filepath or "(unsaved)", prefix, axes,
            " ".join(o.name for o in picked)))
        for o in picked:
            x, y, z = o.matrix_world.translation
            p = (x, z, -y) if axes == "gltf" else (x, y, z)
            f.write("%.7g %.7g %.7g\n" % p)
    print("landmarks.py: %d landmarks (%s ... %s) written to %s" % (
        len(picked), picked[0].name, picked[-1].name, out))


main()

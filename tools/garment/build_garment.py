# build_garment.py — a short-sleeved shirt cut from the garment body, with one
# topology for every body shape.
#
#   blender -b --factory-startup --python tools/garment/build_garment.py -- \
#       --body DIR --out GARMENT.npz [--cuts 1] [--offset 0.015] [--hem 0.03] [--sleeve 0.55]
#
# GARMENT.npz: positions [G,3] (on the template body, rest pose), triangles
# [T,3] int32, and the embedding that re-places the shirt on any shape:
# emb_tri [G] (body triangle), emb_bary [G,3], emb_off [G] (offset along the
# interpolated body normal), emb_resid [G,3] (what the embedding misses at the
# template, added back so the template is reproduced exactly); settings.
#
# DESIGN
# The shirt is the part of the template body's surface that is weighted to
# the torso and upper arms (less than half a weight on neck, head, shins and
# feet), sleeves cut at `sleeve` of the upper arm, pushed out `offset` along
# the vertex normals, cut straight at pelvis height + `hem` with a plane
# (selecting faces gives a stair-step hem), the largest connected piece kept,
# subdivided `cuts` times (cuts=1: about 5k vertices, 2: about 11k) and
# triangulated. Every simulation of a database starts from this mesh placed
# on its body shape (gmath.place), so examples are comparable vertex by vertex.
import os
import sys

import bmesh
import bpy
import numpy as np
from mathutils import Vector
from mathutils.bvhtree import BVHTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmath  # noqa: E402
from bl_util import Body, script_args  # noqa: E402


def arg(a, name, default):
    return a[a.index(name) + 1] if name in a else default


def main():
    a = script_args()
    body_dir, out = arg(a, '--body', None), arg(a, '--out', None)
    if not body_dir or not out:
        sys.exit('usage: build_garment.py -- --body DIR --out GARMENT.npz [--cuts 1] '
                 '[--offset 0.015] [--hem 0.03] [--sleeve 0.55]')
    cuts = int(arg(a, '--cuts', '1'))
    offset = float(arg(a, '--offset', '0.015'))
    hem = float(arg(a, '--hem', '0.03'))
    sleeve = float(arg(a, '--sleeve', '0.55'))
    body = Body(os.path.join(body_dir, 'body.blend'), os.path.join(body_dir, 'body.npz'))
    bm_ = gmath.BodyModel(os.path.join(body_dir, 'body.npz'))
    quads = body.z['quads']
    V, W, names = bm_.V0, bm_.W, bm_.names
    Vn = gmath.vertex_normals(V, bm_.tris)
    H = bm_.H0

    def wsum(bones):
        return sum(W[:, names.index(b)] for b in bones)

    other = wsum(['neck', 'head', 'shin.L', 'shin.R', 'foot.L', 'foot.R'])
    z_hem = H[names.index('pelvis'), 2] + hem
    keep = other < 0.5
    for s in 'LR':
        p0, p1 = H[names.index('upperarm.' + s)], H[names.index('forearm.' + s)]
        t = (V - p0) @ (p1 - p0) / np.dot(p1 - p0, p1 - p0)
        onarm = wsum(['upperarm.' + s, 'forearm.' + s, 'hand.' + s]) > 0.5
        keep &= ~(onarm & (t > sleeve))
    fsel = [i for i, f in enumerate(quads) if keep[f].all() and V[f, 2].max() > z_hem]

    used = sorted({int(v) for i in fsel for v in quads[i]})
    remap = {v: k for k, v in enumerate(used)}
    bm = bmesh.new()
    verts = [bm.verts.new(Vector(V[v] + offset * Vn[v])) for v in used]
    for i in fsel:
        bm.faces.new([verts[remap[int(v)]] for v in quads[i]])
    bmesh.ops.bisect_plane(bm, geom=bm.verts[:] + bm.edges[:] + bm.faces[:], dist=1e-4,
                           plane_co=(0, 0, z_hem), plane_no=(0, 0, 1), clear_inner=True)
    # largest connected piece
    bm.faces.ensure_lookup_table()
    comp = {}
    for f0 in bm.faces:
        if f0 in comp:
            continue
        cid, stack = len(set(comp.values())), [f0]
        comp[f0] = cid
        while stack:
            f = stack.pop()
            for e in f.edges:
                for g in e.link_faces:
                    if g not in comp:
                        comp[g] = cid
                        stack.append(g)
    sizes = np.bincount(list(comp.values()))
    big = int(sizes.argmax())
    bmesh.ops.delete(bm, geom=[f for f, c in comp.items() if c != big], context='FACES')
    bmesh.ops.delete(bm, geom=[v for v in bm.verts if not v.link_faces], context='VERTS')
    if cuts > 0:
        bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=cuts, use_grid_fill=True)
    bmesh.ops.triangulate(bm, faces=bm.faces[:])
    bm.verts.index_update()
    G = np.array([v.co[:] for v in bm.verts])
    T = np.array([[v.index for v in f.verts] for f in bm.faces], np.int32)
    bm.free()

    # embedding in the template body: nearest triangle, barycentric, normal offset
    tris = bm_.tris
    tree = BVHTree.FromPolygons([Vector(p) for p in V], [list(map(int, t)) for t in tris])
    et = np.zeros(len(G), np.int32)
    eb = np.zeros((len(G), 3))
    for i, p in enumerate(G):
        loc, nrm, fi, d = tree.find_nearest(Vector(p))
        A, B, C = (V[k] for k in tris[fi])
        v0, v1, v2 = B - A, C - A, np.array(loc) - A
        d00, d01, d11 = v0 @ v0, v0 @ v1, v1 @ v1
        d20, d21 = v2 @ v0, v2 @ v1
        den = d00 * d11 - d01 * d01
        wb = (d11 * d20 - d01 * d21) / den
        wc = (d00 * d21 - d01 * d20) / den
        bary = np.clip(np.array([1.0 - wb - wc, wb, wc]), 0.0, 1.0)
        bary /= bary.sum()
        et[i], eb[i] = fi, bary
    tq = tris[et]
    q = np.einsum('nk,nkd->nd', eb, V[tq])
    nn = np.einsum('nk,nkd->nd', eb, Vn[tq])
    nn /= np.linalg.norm(nn, axis=1, keepdims=True)
    eo = np.einsum('nd,nd->n', G - q, nn)
    resid = G - (q + eo[:, None] * nn)
    back = gmath.place(V, tris, et, eb, eo, resid)
    np.savez(out, positions=G.astype(np.float32), triangles=T, emb_tri=et, emb_bary=eb,
             emb_off=eo, emb_resid=resid, cuts=cuts, offset=offset, hem=hem, sleeve=sleeve)
    print('build_garment: %d vertices, %d triangles, offset %.1f..%.1f mm, residual max %.2f mm, '
          'reconstruction %.1e m -> %s' % (len(G), len(T), 1e3 * eo.min(), 1e3 * eo.max(),
                                           1e3 * np.linalg.norm(resid, axis=1).max(),
                                           np.abs(back - G).max(), out))


main()

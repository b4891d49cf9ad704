# gmath.py — the garment tools' numpy geometry, shared by the Blender
# scripts (Blender's bundled numpy) and garment.py (Debian's python3-numpy).
#
# DESIGN
# One implementation of the body model's conventions (docs/garment.md):
# quaternions x,y,z,w; joints are points with world-aligned rest frames; a
# pose is one local rotation per joint, parents first; a shape beta moves the
# mesh by shape_deltas and the joints by joint_shape_deltas, linearly. The
# skinning transform of joint j for (beta, pose) maps a rest point x to
#     R_j (x - h_j(beta)) + a_j(beta, pose)
# with R_j the world rotation, h_j the rest joint position and a_j the posed
# one: the rigged kind's FK with shape blend shapes (docs/rigged.md) written
# out directly. Everything here is float64 and unoptimised; the runtime is C.
import numpy as np


def quat_to_mat(q):
    """[...,4] xyzw (any norm) -> [...,3,3]."""
    q = np.asarray(q, float)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    R = np.empty(q.shape[:-1] + (3, 3))
    R[..., 0, 0] = 1 - 2 * (y * y + z * z)
    R[..., 0, 1] = 2 * (x * y - z * w)
    R[..., 0, 2] = 2 * (x * z + y * w)
    R[..., 1, 0] = 2 * (x * y + z * w)
    R[..., 1, 1] = 1 - 2 * (x * x + z * z)
    R[..., 1, 2] = 2 * (y * z - x * w)
    R[..., 2, 0] = 2 * (x * z - y * w)
    R[..., 2, 1] = 2 * (y * z + x * w)
    R[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return R


def rotvec_to_quat(v):
    """[...,3] rotation vectors -> [...,4] xyzw."""
    v = np.asarray(v, float)
    a = np.linalg.norm(v, axis=-1, keepdims=True)
    s = np.where(a > 1e-12, np.sin(a / 2) / np.maximum(a, 1e-300), 0.5)
    return np.concatenate([v * s, np.cos(a / 2)], -1)


def quat_to_rotvec(q):
    """[...,4] xyzw -> [...,3] rotation vectors (angle in [0, pi])."""
    q = np.asarray(q, float)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    q = np.where(q[..., 3:4] < 0, -q, q)
    s = np.linalg.norm(q[..., :3], axis=-1, keepdims=True)
    a = 2 * np.arctan2(s, q[..., 3:4])
    k = np.where(s > 1e-12, a / np.maximum(s, 1e-300), 2.0)
    return q[..., :3] * k


class BodyModel:
    """body.npz (build_body.py) as arrays."""

    def __init__(self, npz):
        z = np.load(npz)
        self.V0 = z['positions'].astype(float)
        self.SD = z['shape_deltas'].astype(float)
        self.tris = z['triangles'].astype(np.int64)
        self.sj = z['skin_joints'].astype(np.int64)
        self.sw = z['skin_weights'].astype(float)
        self.parents = z['joint_parents'].astype(np.int64)
        self.names = [str(s) for s in z['joint_names']]
        self.H0 = z['joint_positions'].astype(float)
        self.HD = z['joint_shape_deltas'].astype(float)
        self.shape_names = [str(s) for s in z['shape_names']]
        self.S = self.SD.shape[0]
        self.J = len(self.names)
        self.N = len(self.V0)
        # dense [N,J] weights, convenient for small arrays
        self.W = np.zeros((self.N, self.J))
        np.add.at(self.W, (np.arange(self.N)[:, None], self.sj), self.sw)

    def beta(self, b):
        out = np.zeros(self.S)
        b = np.asarray(b, float).ravel()
        out[:min(len(b), self.S)] = b[:self.S]
        return out

    def shaped(self, b):
        """Rest vertices and joint positions of shape b."""
        b = self.beta(b)
        return (self.V0 + np.tensordot(b, self.SD, 1), self.H0 + np.tensordot(b, self.HD, 1))

    def fk(self, q, H):
        """World rotations [J,3,3] and posed joint positions [J,3]."""
        Rl = quat_to_mat(q)
        R = np.zeros((self.J, 3, 3))
        a = np.zeros((self.J, 3))
        for j in range(self.J):
            p = self.parents[j]
            if p < 0:
                R[j], a[j] = Rl[j], H[j]
            else:
                R[j] = R[p] @ Rl[j]
                a[j] = a[p] + R[p] @ (H[j] - H[p])
        return R, a

    def transforms(self, b, q):
        """Per-joint affine maps [J,3,4] taking rest points of shape b to pose q."""
        _, H = self.shaped(b)
        R, a = self.fk(q, H)
        A = np.zeros((self.J, 3, 4))
        A[:, :, :3] = R
        A[:, :, 3] = a - np.einsum('jab,jb->ja', R, H)
        return A

    def posed(self, b, q):
        V, _ = self.shaped(b)
        return lbs(V, self.W, self.transforms(b, q))


def lbs(X, W, A):
    """Linear blend skinning of points X [n,3] with dense weights W [n,J] and
    joint maps A [J,3,4]."""
    M = np.einsum('nj,jab->nab', W, A)
    return np.einsum('nab,nb->na', M[:, :, :3], X) + M[:, :, 3]


def relative(A_to, A_from):
    """Joint maps taking points posed by A_from to A_to: A_to * A_from^-1."""
    out = np.zeros_like(A_to)
    for j in range(len(A_to)):
        Rf, tf = A_from[j, :, :3], A_from[j, :, 3]
        Ri = np.linalg.inv(Rf)
        out[j, :, :3] = A_to[j, :, :3] @ Ri
        out[j, :, 3] = A_to[j, :, 3] - out[j, :, :3] @ tf
    return out


def vertex_normals(V, tris):
    """Area-weighted unit vertex normals."""
    e1 = V[tris[:, 1]] - V[tris[:, 0]]
    e2 = V[tris[:, 2]] - V[tris[:, 0]]
    fn = np.cross(e1, e2)
    n = np.zeros_like(V)
    for k in range(3):
        np.add.at(n, tris[:, k], fn)
    return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-20)


def place(V, tris, emb_tri, emb_bary, emb_off, resid):
    """Garment vertices embedded in the body surface (triangle, barycentric
    coordinates, offset along the interpolated normal) placed on body V; resid
    is the template's residual (exact reconstruction at the template)."""
    Nv = vertex_normals(V, tris)
    t = tris[emb_tri]
    q = np.einsum('nk,nkd->nd', emb_bary, V[t])
    n = np.einsum('nk,nkd->nd', emb_bary, Nv[t])
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-20)
    return q + emb_off[:, None] * n + resid


def nearest_vertex(P, V, chunk=2048):
    """Index of the nearest row of V for each row of P (brute force)."""
    out = np.empty(len(P), np.int64)
    vv = (V * V).sum(1)
    for i in range(0, len(P), chunk):
        p = P[i:i + chunk]
        d = vv[None, :] - 2 * p @ V.T
        out[i:i + chunk] = d.argmin(1)
    return out


def nearest_vertices(P, V, k, chunk=1024):
    """Indices [len(P), k] of the k nearest rows of V, nearest first."""
    out = np.empty((len(P), k), np.int64)
    vv = (V * V).sum(1)
    for i in range(0, len(P), chunk):
        p = P[i:i + chunk]
        d = vv[None, :] - 2 * p @ V.T
        idx = np.argpartition(d, k - 1, axis=1)[:, :k]
        dd = np.take_along_axis(d, idx, 1)
        out[i:i + chunk] = np.take_along_axis(idx, np.argsort(dd, 1), 1)
    return out


def inside(P, V, tris, chunk=64):
    """Boolean per point of P: inside the closed triangle mesh (V, tris), by
    the generalised winding number (sum of signed solid angles / 4 pi > 1/2:
    exact for a closed, consistently oriented mesh, no sign heuristics near
    edges). Brute force over all triangles, for offline evaluation."""
    A, B, C = V[tris[:, 0]], V[tris[:, 1]], V[tris[:, 2]]
    out = np.empty(len(P), bool)
    for i in range(0, len(P), chunk):
        p = P[i:i + chunk, None, :]
        a, b, c = A[None] - p, B[None] - p, C[None] - p
        la, lb, lc = (np.linalg.norm(x, axis=2) for x in (a, b, c))
        num = np.einsum('ntd,ntd->nt', a, np.cross(b, c))
        den = (la * lb * lc + np.einsum('ntd,ntd->nt', a, b) * lc
               + np.einsum('ntd,ntd->nt', b, c) * la + np.einsum('ntd,ntd->nt', c, a) * lb)
        w = 2 * np.arctan2(num, den).sum(1) / (4 * np.pi)
        out[i:i + chunk] = np.abs(w) > 0.5
    return out

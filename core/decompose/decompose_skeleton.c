/* decompose_skeleton.c — a joint hierarchy from a rigid (or trs) proxy-bone
 * decomposition, the post-processing the Temporal Deep Skinning paper
 * describes after its fit (disjoint clusters, joints from neighbouring
 * clusters, joint locations by geometric constraints, orientations), in
 * the manner of Le & Deng's skeleton extraction from SSDR bones.
 *
 * DESIGN
 *  - Disjoint clusters: every vertex belongs to its strongest bone. Two
 *    bones are neighbours when a triangle edge (or a welded seam: rest
 *    positions within 1e-5 of the diagonal) joins their clusters; the
 *    boundary centroid m_ab is the mean rest position of the vertices on
 *    such edges.
 *  - Joint location between bones a and b: the point that both bones move
 *    alike, q = argmin Σ_p |T_a^p q - T_b^p q|² + λ |q - m_ab|². The data
 *    term pins q where the two bones rotate differently (a ball joint is a
 *    point, a hinge an axis); the small geometric term (λ = 1e-2 of the
 *    data term's mean eigenvalue) places it on the hinge axis nearest the
 *    cluster boundary, i.e. inside the limb. The residual RMS over frames
 *    is the joint's dislocation.
 *  - Hierarchy: a minimum spanning tree (Kruskal) over the neighbour graph
 *    weighted by dislocation; pieces that share no edge are joined by their
 *    nearest clusters (rest centroids). The root is the tree's centre (the
 *    bone of least eccentricity, ties to the larger cluster); joints are
 *    ordered breadth-first so a parent precedes its children.
 *  - Joint frames: the root sits at its cluster's centroid, every other
 *    joint at q of its bone and its parent's. Orientation: +Y towards the
 *    mean of the children's joints (leaves: towards the cluster centroid),
 *    the smallest rotation from world +Y (the convention of Blender's
 *    bones). bind_j = [Q_j | c_j].
 *  - Animation: world_j^p = T_j^p · bind_j, so the skin matrix
 *    world · bind⁻¹ is exactly the fitted T_j^p whatever the placement;
 *    local = world_parent⁻¹ · world_j is rigid (rigid fits) or a similarity
 *    (trs fits), i.e. translation, rotation and one uniform scale: what
 *    glTF and FBX animate. Everything is computed in double.
 */
#include "decompose/decompose.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 3x4 row-major helpers in double */
static void m34_mul(const double *a, const double *b, double *o)
{
    double t[12];
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 4; c++)
            t[4 * r + c] = a[4 * r] * b[c] + a[4 * r + 1] * b[4 + c] + a[4 * r + 2] * b[8 + c];
        t[4 * r + 3] += a[4 * r + 3];
    }
    memcpy(o, t, sizeof t);
}

/* inverse of a similarity [sR | t] (any invertible 3x3 via adjugate) */
static int m34_inv(const double *m, double *o)
{
    double a = m[0], b = m[1], c = m[2], d = m[4], e = m[5], f = m[6], g = m[8], h = m[9],
           i = m[10];
    double C[9] = {e * i - f * h, c * h - b * i, b * f - c * e,
                   f * g - d * i, a * i - c * g, c * d - a * f,
                   d * h - e * g, b * g - a * h, a * e - b * d};
    double det = a * C[0] + b * C[3] + c * C[6];
    if (!(fabs(det) > 1e-300)) return 0;
    double t[12];
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++) t[4 * r + k] = C[3 * r + k] / det;
        t[4 * r + 3] = -(t[4 * r] * m[3] + t[4 * r + 1] * m[7] + t[4 * r + 2] * m[11]);
    }
    memcpy(o, t, sizeof t);
    return 1;
}

/* unit quaternion (x, y, z, w) of a rotation matrix (Shepperd) */
static void quat_from_rot(const double R[9], double q[4])
{
    double tr = R[0] + R[4] + R[8];
    if (tr > 0) {
        double s = 2 * sqrt(tr + 1);
        q[3] = s / 4; q[0] = (R[7] - R[5]) / s; q[1] = (R[2] - R[6]) / s; q[2] = (R[3] - R[1]) / s;
    } else if (R[0] > R[4] && R[0] > R[8]) {
        double s = 2 * sqrt(1 + R[0] - R[4] - R[8]);
        q[3] = (R[7] - R[5]) / s; q[0] = s / 4; q[1] = (R[1] + R[3]) / s; q[2] = (R[2] + R[6]) / s;
    } else if (R[4] > R[8]) {
        double s = 2 * sqrt(1 + R[4] - R[0] - R[8]);
        q[3] = (R[2] - R[6]) / s; q[0] = (R[1] + R[3]) / s; q[1] = s / 4; q[2] = (R[5] + R[7]) / s;
    } else {
        double s = 2 * sqrt(1 + R[8] - R[0] - R[4]);
        q[3] = (R[3] - R[1]) / s; q[0] = (R[2] + R[6]) / s; q[1] = (R[5] + R[7]) / s; q[2] = s / 4;
    }
    double n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    for (int k = 0; k < 4; k++) q[k] /= n;
    if (q[3] < 0) for (int k = 0; k < 4; k++) q[k] = -q[k];
}

/* split a similarity 3x4 into t, unit quaternion and uniform scale */
static void m34_to_trs(const double *m, float t[3], float q[4], float *s)
{
    double L[9] = {m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]};
    double det = L[0] * (L[4] * L[8] - L[5] * L[7]) - L[1] * (L[3] * L[8] - L[5] * L[6]) +
                 L[2] * (L[3] * L[7] - L[4] * L[6]);
    double sc = cbrt(det > 0 ? det : 1e-300);
    for (int k = 0; k < 9; k++) L[k] /= sc;
    double qd[4];
    quat_from_rot(L, qd);
    for (int k = 0; k < 4; k++) q[k] = (float)qd[k];
    for (int r = 0; r < 3; r++) t[r] = (float)m[4 * r + 3];
    *s = (float)sc;
}

static int64_t uf_find(int32_t *par, int32_t a)
{
    while (par[a] != a) { par[a] = par[par[a]]; a = par[a]; }
    return a;
}

typedef struct edge {
    double cost;
    int a, b;
    double q[3];
} edge_t;

static int cmp_edge(const void *x, const void *y)
{
    double a = ((const edge_t *)x)->cost, b = ((const edge_t *)y)->cost;
    return (a > b) - (a < b);
}

/* joint between bones a and b near m (model units): q and its dislocation */
static double fit_joint(const df_decompose_result_t *r, int a, int b, const double m[3],
                        double q[3])
{
    const int B = r->n_bones;
    double A[9] = {0}, rhs[3] = {0};
    for (int64_t p = 0; p < r->n_frames; p++) {
        const float *ta = r->matrices + (p * B + a) * 12, *tb = r->matrices + (p * B + b) * 12;
        double D[12];
        for (int k = 0; k < 12; k++) D[k] = (double)ta[k] - tb[k];
        for (int u = 0; u < 3; u++) {
            for (int v = 0; v < 3; v++)
                for (int k = 0; k < 3; k++) A[3 * u + v] += D[4 * k + u] * D[4 * k + v];
            for (int k = 0; k < 3; k++) rhs[u] -= D[4 * k + u] * D[4 * k + 3];
        }
    }
    double lam = 1e-2 * (A[0] + A[4] + A[8]) / 3 + 1e-12 * r->n_frames;
    for (int u = 0; u < 3; u++) { A[4 * u] += lam; rhs[u] += lam * m[u]; }
    /* 3x3 solve (Cramer; A is symmetric positive definite) */
    double C0 = A[4] * A[8] - A[5] * A[7], C1 = A[5] * A[6] - A[3] * A[8], C2 = A[3] * A[7] - A[4] * A[6];
    double det = A[0] * C0 + A[1] * C1 + A[2] * C2;
    double inv[9] = {C0, A[2] * A[7] - A[1] * A[8], A[1] * A[5] - A[2] * A[4],
                     C1, A[0] * A[8] - A[2] * A[6], A[2] * A[3] - A[0] * A[5],
                     C2, A[1] * A[6] - A[0] * A[7], A[0] * A[4] - A[1] * A[3]};
    for (int u = 0; u < 3; u++)
        q[u] = (inv[3 * u] * rhs[0] + inv[3 * u + 1] * rhs[1] + inv[3 * u + 2] * rhs[2]) / det;
    double e = 0;
    for (int64_t p = 0; p < r->n_frames; p++) {
        const float *ta = r->matrices + (p * B + a) * 12, *tb = r->matrices + (p * B + b) * 12;
        for (int k = 0; k < 3; k++) {
            double d = (double)ta[4 * k + 3] - tb[4 * k + 3];
            for (int u = 0; u < 3; u++) d += ((double)ta[4 * k + u] - tb[4 * k + u]) * q[u];
            e += d * d;
        }
    }
    return sqrt(e / (double)r->n_frames);
}

void df_decompose_skeleton_free(df_decompose_skeleton_t **s)
{
    if (!s || !*s) return;
    df_decompose_skeleton_t *x = *s;
    free(x->parent); free(x->bone); free(x->joint_of_bone); free(x->bind); free(x->world);
    free(x->translation); free(x->rotation); free(x->scale); free(x->rest_translation);
    free(x->rest_rotation); free(x->dislocation);
    free(x);
    *s = NULL;
}

int df_decompose_skeleton(const df_decompose_result_t *r, int64_t T, const uint32_t *tris,
                          int hierarchy, df_decompose_skeleton_t **out, df_error_t *err)
{
    *out = NULL;
    if (!r || (T > 0 && !tris))
        return df_error_set(err, DF_EINVAL, "decompose skeleton: missing result or triangles");
    if (r->transforms == DF_DECOMPOSE_AFFINE)
        return df_error_set(err, DF_EUNSUPPORTED,
                            "decompose skeleton: the fit has affine bones (shear, reflection), "
                            "which no joint can play; fit with --transforms rigid or trs");
    const int B = r->n_bones, K = r->n_influences;
    const int64_t N = r->n_vertices, F = r->n_frames;
    for (int64_t t = 0; t < 3 * T; t++)
        if (tris[t] >= (uint64_t)N)
            return df_error_set(err, DF_EINVAL, "decompose skeleton: triangle %lld references "
                                "vertex %u of %lld", (long long)(t / 3), tris[t], (long long)N);
    df_decompose_skeleton_t *s = calloc(1, sizeof *s);
    int32_t *cl = malloc(sizeof(int32_t) * (N + 1)), *rep = malloc(sizeof(int32_t) * (N + 1));
    int32_t *wrep_cl = NULL, *par = malloc(sizeof(int32_t) * B);
    double *cen = calloc((size_t)B * 4, sizeof(double));
    double *bsum = calloc((size_t)B * B * 4, sizeof(double)); /* boundary sums, n */
    edge_t *edges = NULL;
    int32_t *order = NULL, *depth = NULL;
    int rc = DF_OK;
    if (!s || !cl || !rep || !par || !cen || !bsum) goto nomem;
    s->n_joints = B;
    s->n_frames = F;
    s->parent = malloc(sizeof(int32_t) * B);
    s->bone = malloc(sizeof(int32_t) * B);
    s->joint_of_bone = malloc(sizeof(int32_t) * B);
    s->bind = malloc(sizeof(double) * 12 * B);
    s->world = malloc(sizeof(double) * 12 * (size_t)(F * B));
    s->translation = malloc(sizeof(float) * 3 * (size_t)(F * B));
    s->rotation = malloc(sizeof(float) * 4 * (size_t)(F * B));
    s->scale = malloc(sizeof(float) * (size_t)(F * B));
    s->rest_translation = malloc(sizeof(float) * 3 * B);
    s->rest_rotation = malloc(sizeof(float) * 4 * B);
    s->dislocation = calloc(B, sizeof(double));
    if (!s->parent || !s->bone || !s->joint_of_bone || !s->bind || !s->world ||
        !s->translation || !s->rotation || !s->scale || !s->rest_translation ||
        !s->rest_rotation || !s->dislocation)
        goto nomem;

    /* disjoint clusters and their rest centroids */
    for (int64_t i = 0; i < N; i++) {
        int best = r->skin_joints[i * K];
        float bw = -1;
        for (int k = 0; k < K; k++)
            if (r->skin_weights[i * K + k] > bw) { bw = r->skin_weights[i * K + k]; best = r->skin_joints[i * K + k]; }
        cl[i] = best;
        for (int u = 0; u < 3; u++) cen[4 * best + u] += r->rest[3 * i + u];
        cen[4 * best + 3] += 1;
    }
    for (int j = 0; j < B; j++)
        if (cen[4 * j + 3] > 0)
            for (int u = 0; u < 3; u++) cen[4 * j + u] /= cen[4 * j + 3];

    if (!hierarchy) { /* proxy bones as roots at the origin */
        for (int j = 0; j < B; j++) {
            s->parent[j] = -1;
            s->bone[j] = s->joint_of_bone[j] = j;
            for (int k = 0; k < 12; k++) s->bind[12 * j + k] = (k % 5 == 0);
        }
        s->root = 0;
        goto animate;
    }

    /* neighbours: triangle edges and welded seams between clusters */
    int64_t nw = 0;
    if ((rc = df_decompose_weld(N, r->rest, 1e-5, rep, &nw, err))) goto fail;
    wrep_cl = malloc(sizeof(int32_t) * (nw + 1));
    if (!wrep_cl) goto nomem;
    for (int64_t g = 0; g < nw; g++) wrep_cl[g] = -1;
#define LINK(i, j)                                                                        \
    do {                                                                                  \
        int ca = cl[i], cb = cl[j];                                                       \
        if (ca != cb) {                                                                   \
            double *x = bsum + 4 * ((size_t)(ca < cb ? ca : cb) * B + (ca < cb ? cb : ca)); \
            for (int u = 0; u < 3; u++) x[u] += r->rest[3 * (i) + u] + r->rest[3 * (j) + u]; \
            x[3] += 2;                                                                    \
        }                                                                                 \
    } while (0)
    for (int64_t t = 0; t < T; t++)
        for (int e = 0; e < 3; e++) LINK(tris[3 * t + e], tris[3 * t + (e + 1) % 3]);
    for (int64_t i = 0; i < N; i++) { /* seams: the first vertex of each welded position */
        if (wrep_cl[rep[i]] < 0) wrep_cl[rep[i]] = (int32_t)i;
        else LINK(i, wrep_cl[rep[i]]);
    }
#undef LINK
    int ne = 0;
    edges = malloc(sizeof(edge_t) * ((size_t)B * B + 1));
    if (!edges) goto nomem;
    for (int a = 0; a < B; a++)
        for (int b = a + 1; b < B; b++) {
            const double *x = bsum + 4 * ((size_t)a * B + b);
            if (!(x[3] > 0)) continue;
            double m[3] = {x[0] / x[3], x[1] / x[3], x[2] / x[3]};
            edge_t *e = &edges[ne++];
            e->a = a; e->b = b;
            e->cost = fit_joint(r, a, b, m, e->q);
        }
    qsort(edges, ne, sizeof(edge_t), cmp_edge);
    for (int j = 0; j < B; j++) par[j] = j;
    int nt = 0;
    edge_t *acc = malloc(sizeof(edge_t) * (B + 1));
    if (!acc) goto nomem;
    for (int k = 0; k < ne && nt < B - 1; k++) {
        int64_t x = uf_find(par, edges[k].a), y = uf_find(par, edges[k].b);
        if (x == y) continue;
        par[x] = (int32_t)y;
        acc[nt++] = edges[k];
    }
    /* pieces with no shared edge: join the nearest clusters (rest centroids) */
    while (nt < B - 1) {
        int ba = -1, bb = -1;
        double bd = INFINITY;
        for (int a = 0; a < B; a++)
            for (int b = 0; b < B; b++) {
                if (uf_find(par, a) == uf_find(par, b)) continue;
                double d = 0;
                for (int u = 0; u < 3; u++) d += (cen[4 * a + u] - cen[4 * b + u]) * (cen[4 * a + u] - cen[4 * b + u]);
                if (d < bd) { bd = d; ba = a; bb = b; }
            }
        if (ba < 0) break;
        double m[3];
        for (int u = 0; u < 3; u++) m[u] = 0.5 * (cen[4 * ba + u] + cen[4 * bb + u]);
        edge_t e = {.a = ba, .b = bb};
        e.cost = fit_joint(r, ba, bb, m, e.q);
        par[uf_find(par, ba)] = (int32_t)uf_find(par, bb);
        acc[nt++] = e;
    }
    /* root: least eccentricity in hops, ties to the larger cluster */
    order = malloc(sizeof(int32_t) * B);
    depth = malloc(sizeof(int32_t) * B);
    if (!order || !depth) { free(acc); goto nomem; }
    int root = 0, best_ecc = B + 1;
    for (int c = 0; c < B; c++) {
        for (int j = 0; j < B; j++) depth[j] = -1;
        int head = 0, n = 0, ecc = 0;
        order[n++] = c;
        depth[c] = 0;
        while (head < n) {
            int u = order[head++];
            ecc = depth[u] > ecc ? depth[u] : ecc;
            for (int k = 0; k < nt; k++) {
                int v = acc[k].a == u ? acc[k].b : acc[k].b == u ? acc[k].a : -1;
                if (v >= 0 && depth[v] < 0) { depth[v] = depth[u] + 1; order[n++] = v; }
            }
        }
        if (ecc < best_ecc || (ecc == best_ecc && cen[4 * c + 3] > cen[4 * root + 3])) {
            best_ecc = ecc;
            root = c;
        }
    }
    /* breadth-first from the root: joint k animates bone order[k] */
    int32_t *bpar = par; /* reuse: parent bone of each bone */
    for (int j = 0; j < B; j++) { depth[j] = -1; bpar[j] = -1; }
    int head = 0, n = 0;
    order[n++] = root;
    depth[root] = 0;
    double *pos = malloc(sizeof(double) * 3 * B);
    if (!pos) { free(acc); goto nomem; }
    for (int u = 0; u < 3; u++) pos[3 * root + u] = cen[4 * root + u];
    while (head < n) {
        int u = order[head++];
        for (int k = 0; k < nt; k++) {
            int v = acc[k].a == u ? acc[k].b : acc[k].b == u ? acc[k].a : -1;
            if (v < 0 || depth[v] >= 0) continue;
            depth[v] = depth[u] + 1;
            bpar[v] = u;
            order[n++] = v;
            for (int q = 0; q < 3; q++) pos[3 * v + q] = acc[k].q[q];
            s->dislocation[v] = acc[k].cost;
        }
    }
    free(acc);
    for (int k = 0; k < B; k++) {
        s->bone[k] = order[k];
        s->joint_of_bone[order[k]] = k;
    }
    for (int k = 0; k < B; k++) {
        int b = s->bone[k];
        s->parent[k] = bpar[b] < 0 ? -1 : s->joint_of_bone[bpar[b]];
    }
    s->root = 0;
    /* orientation: +Y towards the children's mean joint (leaves: the cluster) */
    for (int k = 0; k < B; k++) {
        int b = s->bone[k], nc = 0;
        double dir[3] = {0, 0, 0};
        for (int c = k + 1; c < B; c++)
            if (s->parent[c] == k) {
                for (int u = 0; u < 3; u++) dir[u] += pos[3 * s->bone[c] + u];
                nc++;
            }
        for (int u = 0; u < 3; u++)
            dir[u] = (nc ? dir[u] / nc : cen[4 * b + u]) - pos[3 * b + u];
        double l = sqrt(dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]);
        double Q[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
        if (l > 1e-12) {
            double y[3] = {dir[0] / l, dir[1] / l, dir[2] / l};
            double c = y[1]; /* cos of the angle from +Y; axis = Y x dir */
            double ax[3] = {y[2], 0, -y[0]}, sa = sqrt(ax[0] * ax[0] + ax[2] * ax[2]);
            if (sa > 1e-12) {
                for (int u = 0; u < 3; u++) ax[u] /= sa;
                double ang = atan2(sa, c), cs = cos(ang), sn = sin(ang), tt = 1 - cs;
                double x = ax[0], yy = ax[1], z = ax[2];
                double M[9] = {tt * x * x + cs, tt * x * yy - sn * z, tt * x * z + sn * yy,
                               tt * x * yy + sn * z, tt * yy * yy + cs, tt * yy * z - sn * x,
                               tt * x * z - sn * yy, tt * yy * z + sn * x, tt * z * z + cs};
                memcpy(Q, M, sizeof M);
            } else if (c < 0) { /* pointing down: half turn about X */
                double M[9] = {1, 0, 0, 0, -1, 0, 0, 0, -1};
                memcpy(Q, M, sizeof M);
            }
        }
        double *bd = s->bind + 12 * k;
        for (int r3 = 0; r3 < 3; r3++) {
            for (int u = 0; u < 3; u++) bd[4 * r3 + u] = Q[3 * r3 + u];
            bd[4 * r3 + 3] = pos[3 * b + r3];
        }
    }
    free(pos);

animate:
    /* world = T · bind, local = world_parent⁻¹ · world */
    for (int k = 0; k < B; k++) {
        double loc[12];
        if (s->parent[k] < 0) memcpy(loc, s->bind + 12 * k, sizeof loc);
        else {
            double inv[12];
            m34_inv(s->bind + 12 * s->parent[k], inv);
            m34_mul(inv, s->bind + 12 * k, loc);
        }
        float sc;
        m34_to_trs(loc, s->rest_translation + 3 * k, s->rest_rotation + 4 * k, &sc);
    }
    for (int64_t p = 0; p < F; p++) {
        for (int k = 0; k < B; k++) {
            const float *tf = r->matrices + (p * B + s->bone[k]) * 12;
            double Tm[12];
            for (int q = 0; q < 12; q++) Tm[q] = tf[q];
            m34_mul(Tm, s->bind + 12 * k, s->world + 12 * (p * B + k));
        }
        for (int k = 0; k < B; k++) {
            double loc[12];
            const double *w = s->world + 12 * (p * B + k);
            if (s->parent[k] < 0) memcpy(loc, w, sizeof loc);
            else {
                double inv[12];
                if (!m34_inv(s->world + 12 * (p * B + s->parent[k]), inv)) {
                    rc = df_error_set(err, DF_ENUMERIC, "decompose skeleton: joint %d has a "
                                      "singular transform at frame %lld", s->parent[k], (long long)p);
                    goto fail;
                }
                m34_mul(inv, w, loc);
            }
            m34_to_trs(loc, s->translation + 3 * (p * B + k), s->rotation + 4 * (p * B + k),
                       s->scale + p * B + k);
        }
    }
    free(cl); free(rep); free(wrep_cl); free(par); free(cen); free(bsum);
    free(edges); free(order); free(depth);
    *out = s;
    return DF_OK;
nomem:
    rc = df_error_set(err, DF_ENOMEM, "decompose skeleton: out of memory");
fail:
    free(cl); free(rep); free(wrep_cl); free(par); free(cen); free(bsum);
    free(edges); free(order); free(depth);
    df_decompose_skeleton_free(&s);
    return rc;
}

void df_decompose_skeleton_local(const df_decompose_skeleton_t *s, int64_t p, int k,
                                 double m[12])
{
    const float *t = s->translation + 3 * (p * s->n_joints + k);
    const float *q = s->rotation + 4 * (p * s->n_joints + k);
    double sc = s->scale[p * s->n_joints + k];
    double x = q[0], y = q[1], z = q[2], w = q[3];
    double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                   2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                   2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++) m[4 * r + c] = sc * R[3 * r + c];
        m[4 * r + 3] = t[r];
    }
}

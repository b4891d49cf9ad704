/* garment_eval.c — evaluation of a `garment` model for a batch of poses
 * (shape beta, joint rotations theta, optional damping state).
 *
 * DESIGN
 * For a batch of B poses:
 *  1. every pose's inputs are checked first (finite, non-zero quaternions),
 *     so a bad pose fails the batch before any output is written;
 *  2. the body, all B poses in ONE call of the rigged kind (its morph/shape
 *     GEMM and LBS): positions and normals, for the penetration step and
 *     the body outputs;
 *  3. per pose, Eq. 4 of Wu et al. with S(theta, beta) the body's skin
 *     matrices (rest -> posed, the rigged kind's FK with shapes):
 *       f = sum_p v_p LBS[S(theta,b0) S(theta_p,b0)^-1](f(b0, theta_p))     pose model
 *         + sum_s w_s ( LBS[S(theta,b) S(theta_s,b)^-1](f(b, theta_s))
 *                     - LBS[S(theta,b0) S(theta_s,b0)^-1](f(b0, theta_s)) ) shape term
 *     with f(b, theta_s) = f(b0, theta_s) + U_s W_s (feat(b) - feat(0)) (the
 *     clothing shape model) and every LBS the shared kernel of math/skin.h
 *     on the garment's binding. The shape only moves the skeleton's
 *     translations, so both LBS of an anchor share their linear parts and
 *     their difference is ONE LBS of U_s W_s (feat(b) - feat(0)) with the
 *     maps [L | t_b - t_b0]: the anchor's example itself is never read.
 *     Each example is evaluated only on the runs of skin blocks of the
 *     regions where it is among the `top` (load sorted the vertices by
 *     region), sgemv and LBS alike. The weights are per vertex:
 *     v_p(y) = sum_g regions(y, g) Wn_pg (Eq. 8), Wn_pg the normalised
 *     1/(D_pg + eps)^power of the `top` nearest examples of region g under
 *     the sensitivity distance D_pg = sum_m Q_gm |rv_m(theta) - rv_m(theta_p)|
 *     (Eq. 7; rv: the joints' rotation vectors), blended with the previous
 *     frame's distances when a state is given (Eq. 9, damping eta); pose
 *     examples and anchors are ranked separately. The shape term is skipped
 *     when beta = 0 (it is zero there);
 *  4. penetration, twice (the second pass starts where the first ended):
 *     from the nearest of its C candidate body vertices (posed) each garment
 *     vertex walks the body's vertex graph to
 *     the local nearest body vertex; when it is closer to the body than
 *     min(its initial clearance, margin) along that vertex's area-weighted
 *     normal (of the posed triangles: skinned normals are off where LBS
 *     folds the skin), it is pushed out to that clearance (Eq. 10 with one
 *     example);
 *  5. normals (when asked) area-weighted from the triangles.
 * Scratch holds the body's scratch and outputs and one pose's work arrays;
 * nothing is allocated.
 */
#include "garment/garment_internal.h"
#include "math/mathx.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define E(code, ...) df_error_set(err, code, __VA_ARGS__)

extern const df_kind_t df_kind_rigged;

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

static size_t body_stride(const df__garment_t *g) { return al16((size_t)g->Nb * 3 + 4); }

/* floats of one pose's work arrays */
static size_t pose_floats(const df__garment_t *g)
{
    size_t J = (size_t)g->J, ne = (size_t)(g->P + g->A);
    return 5 * al16(J * 12) + al16(J * 16) + al16(J * 3) + 2 * al16((size_t)g->R * ne) +
           al16((size_t)(g->F + g->k)) + 4 * g->gs + al16((size_t)g->G) + al16(ne) +
           al16((size_t)g->nblocks / 4 + 1) + al16((size_t)g->Nb * 3) + al16((size_t)g->G);
}

size_t df__garment_scratch_bytes(const df_model_t *m, int n)
{
    const df__garment_t *g = m->impl;
    size_t body = (df_kind_rigged.scratch_bytes(g->body, n) + 63) & ~(size_t)63;
    return body + ((size_t)n * 2 * body_stride(g) + pose_floats(g)) * sizeof(float) + 128;
}

static const float *pose_in(const df_batch_t *b, int idx, int p)
{
    if (idx < 0 || !b->in[idx]) return NULL;
    return b->in[idx][p];
}

static float *pose_out(const df_batch_t *b, int idx, int p)
{
    if (idx < 0 || !b->out[idx]) return NULL;
    return b->out[idx][p];
}

static int validate(const df__garment_t *g, const df_batch_t *b, df_error_t *err)
{
    for (int p = 0; p < b->n; p++) {
        const float *sh = pose_in(b, g->in_shape, p), *q = pose_in(b, g->in_rot, p),
                    *st = pose_in(b, g->in_state, p);
        for (int64_t i = 0; sh && i < g->S; i++)
            if (!isfinite(sh[i]))
                return E(DF_EINVAL, "pose %d: input 'shape' element %lld is not finite", p,
                         (long long)i);
        for (int64_t j = 0; q && j < g->J; j++) {
            const float *x = q + 4 * j;
            double nn = (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2] +
                        (double)x[3] * x[3];
            if (!isfinite(nn) || !(nn > 1e-12))
                return E(DF_EINVAL, "pose %d: input 'joint_rotations' joint %lld: quaternion "
                                    "%s", p, (long long)j,
                         isfinite(nn) ? "norm must be > 1e-6" : "is not finite");
        }
        for (int64_t i = 0; st && i < g->nstate; i++)
            if (!isfinite(st[i]))
                return E(DF_EINVAL, "pose %d: input 'state' element %lld is not finite", p,
                         (long long)i);
    }
    return DF_OK;
}

/* out[j] = a[j] * b[j] (3x4 affine) packed for the LBS kernel */
static void pack_products(const float *a, const float *b, int64_t J, float *packed)
{
    for (int64_t j = 0; j < J; j++) {
        float m[12];
        df_m34_mul(a + 12 * j, b + 12 * j, m);
        df__skin_pack(m, packed + 16 * j);
    }
}

/* Weights of one example set (n examples, columns off..off+n of the
 * [R, ne] distance table D) into Wn: per region the `top` nearest get
 * 1/(D+eps)^power, normalised; the others 0. active[e] |= used. */
static void region_weights(const df__garment_t *g, const float *D, float *Wn, int64_t off,
                           int64_t n, int32_t *active)
{
    const int64_t ne = g->P + g->A;
    int top = g->top < n ? g->top : (int)n;
    for (int64_t r = 0; r < g->R; r++) {
        const float *d = D + r * ne + off;
        float *w = Wn + r * ne + off;
        int64_t best[DF_GARMENT_MAX_TOP];
        int nb = 0;
        for (int64_t e = 0; e < n; e++) { /* insertion into a sorted short list */
            w[e] = 0.0f;
            if (nb == top && !(d[e] < d[best[nb - 1]])) continue;
            int i = nb < top ? nb++ : nb - 1;
            while (i > 0 && d[e] < d[best[i - 1]]) {
                best[i] = best[i - 1];
                i--;
            }
            best[i] = e;
        }
        double sum = 0;
        for (int i = 0; i < nb; i++) {
            double x = 1.0 / pow((double)d[best[i]] + 1e-6, (double)g->power);
            w[best[i]] = (float)x;
            sum += x;
        }
        for (int i = 0; i < nb; i++) {
            w[best[i]] = (float)(w[best[i]] / sum);
            active[off + best[i]] = 1;
        }
    }
}

/* Blocks where example column e has weight: mark[b] = 1. */
static void mark_blocks(const df__garment_t *g, const float *Wn, int64_t e, uint8_t *mark)
{
    const int64_t ne = g->P + g->A;
    memset(mark, 0, (size_t)g->nblocks);
    for (int64_t r = 0; r < g->R; r++) {
        if (Wn[r * ne + e] == 0.0f) continue;
        for (int64_t i = g->run_off[r]; i < g->run_off[r + 1]; i++)
            memset(mark + g->runs[2 * i], 1, (size_t)(g->runs[2 * i + 1] - g->runs[2 * i]));
    }
}

/* vw[y] = sum_r Wn[r][e] regions(y, r) for y in [v0, v1) */
static void vertex_weights(const df__garment_t *g, const float *Wn, int64_t e, int64_t v0,
                           int64_t v1, float *vw)
{
    const int64_t G = g->G, ne = g->P + g->A;
    memset(vw + v0, 0, (size_t)(v1 - v0) * sizeof(float));
    for (int64_t r = 0; r < g->R; r++) {
        float w = Wn[r * ne + e];
        if (w == 0.0f) continue;
        const float *rg = g->regions_t + r * G;
        for (int64_t y = v0; y < v1; y++) vw[y] += w * rg[y];
    }
}

/* The garment's skinning restricted to blocks [b0, b1): a view of the same
 * influence arrays (block offsets are absolute). */
static df__skin_t skin_view(const df__garment_t *g, int64_t b0, int64_t b1)
{
    df__skin_t v = g->skin;
    int64_t v0 = b0 * DF__SKIN_BLOCK, v1 = b1 * DF__SKIN_BLOCK < g->G ? b1 * DF__SKIN_BLOCK : g->G;
    v.n = v1 - v0;
    v.nblocks = b1 - b0;
    v.off = g->skin.off + b0;
    v.kb = g->skin.kb + b0;
    return v;
}

static inline float dist2(const float *a, const float *b)
{
    float dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
    return dx * dx + dy * dy + dz * dz;
}

static void compute_normals(const float *p, int64_t N, const uint32_t *tri, int64_t T, float *nrm)
{
    memset(nrm, 0, (size_t)N * 3 * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        const float *a = p + 3 * tri[3 * t], *b = p + 3 * tri[3 * t + 1], *c = p + 3 * tri[3 * t + 2];
        float e1[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
        float e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
        float n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                      e1[0] * e2[1] - e1[1] * e2[0]};
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++) nrm[3 * tri[3 * t + k] + d] += n[d];
    }
    for (int64_t i = 0; i < N; i++) {
        float *x = nrm + 3 * i;
        double l = sqrt((double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2]);
        if (l > 1e-20)
            for (int d = 0; d < 3; d++) x[d] = (float)(x[d] / l);
    }
}

int df__garment_evaluate(const df_model_t *m, const df_batch_t *b, void *scratch, df_error_t *err)
{
    const df__garment_t *g = m->impl;
    int rc = validate(g, b, err);
    if (rc) return rc;
    const int B = b->n;
    const int64_t G = g->G, J = g->J, P = g->P, A = g->A, R = g->R, ne = P + A;
    const size_t G3 = (size_t)G * 3, bs = body_stride(g);

    /* carve scratch */
    uintptr_t base = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
    void *bscratch = (void *)base;
    base += (df_kind_rigged.scratch_bytes(g->body, B) + 63) & ~(size_t)63;
    float *s = (float *)base;
    float *bpos = s;
    s += (size_t)B * bs;
    float *bnrm = s;
    s += (size_t)B * bs;
    float *world = s;
    s += al16((size_t)J * 12);
    float *skinB = s;
    s += al16((size_t)J * 12);
    float *skin0 = s;
    s += al16((size_t)J * 12);
    float *skinS = s;
    s += al16((size_t)J * 12);
    float *invS = s;
    s += al16((size_t)J * 12);
    float *mats = s;
    s += al16((size_t)J * 16);
    float *rv = s;
    s += al16((size_t)J * 3);
    float *D = s;
    s += al16((size_t)(R * ne));
    float *Wn = s;
    s += al16((size_t)(R * ne));
    float *fc = s;
    s += al16((size_t)(g->F + g->k));
    float *acc = s;
    s += g->gs;
    float *t1 = s;
    s += g->gs;
    s += g->gs; /* spare */
    float *ys = s;
    s += g->gs;
    float *vw = s;
    s += al16((size_t)G);
    int32_t *active = (int32_t *)s;
    s += al16((size_t)ne);
    uint8_t *mark = (uint8_t *)s;
    s += al16((size_t)g->nblocks / 4 + 1);
    float *anrm = s; /* the posed body's area-weighted normals */
    s += al16((size_t)g->Nb * 3);
    int32_t *near = (int32_t *)s; /* [G] the body vertex each garment vertex ended at */

    /* 2. the body, one batch */
    {
        float *bp[B > 0 ? B : 1], *bn[B > 0 ? B : 1];
        for (int p = 0; p < B; p++) {
            bp[p] = bpos + (size_t)p * bs;
            bn[p] = bnrm + (size_t)p * bs;
        }
        df_batch_t bb;
        memset(&bb, 0, sizeof bb);
        bb.n = B;
        if (g->in_shape >= 0 && g->b_in_shape >= 0) bb.in[g->b_in_shape] = b->in[g->in_shape];
        bb.in[g->b_in_rot] = b->in[g->in_rot];
        bb.out[g->b_out_pos] = bp;
        bb.out[g->b_out_nrm] = bn;
        if ((rc = df_kind_rigged.evaluate(g->body, &bb, bscratch, err))) return rc;
    }

    /* 3-5. per pose */
    const float *rest_rot = df_model_input_default(m, g->in_rot);
    for (int p = 0; p < B; p++) {
        const float *beta = pose_in(b, g->in_shape, p);
        const float *rot = pose_in(b, g->in_rot, p);
        const float *st = pose_in(b, g->in_state, p);
        float *op = pose_out(b, g->out_pos, p), *on = pose_out(b, g->out_nrm, p);
        float *obp = pose_out(b, g->out_bpos, p), *obn = pose_out(b, g->out_bnrm, p);
        float *ost = pose_out(b, g->out_state, p);
        const float *Pb = bpos + (size_t)p * bs, *Nb = bnrm + (size_t)p * bs;
        if (obp) memcpy(obp, Pb, (size_t)g->Nb * 3 * sizeof(float));
        if (obn) memcpy(obn, Nb, (size_t)g->Nb * 3 * sizeof(float));
        if (!rot) rot = rest_rot;
        int shaped = 0;
        for (int64_t i = 0; beta && i < g->S; i++) shaped |= beta[i] != 0.0f;
        if (!shaped) beta = NULL;

        /* distances (Eq. 7), damping (Eq. 9), weights (Eq. 8) */
        df__garment_rotvecs(rot, J, rv);
        for (int64_t r = 0; r < R; r++) {
            const float *q = g->Q + r * 3 * J;
            for (int64_t e = 0; e < ne; e++) {
                const float *rve = e < P ? g->pose_rv + e * 3 * J : g->anc_rv + (e - P) * 3 * J;
                double d = 0;
                for (int64_t k = 0; k < 3 * J; k++) d += q[k] * fabsf(rv[k] - rve[k]);
                D[r * ne + e] = (float)d;
            }
        }
        if (st && st[0] >= 0.0f && g->damping > 0.0f)
            for (int64_t i = 0; i < R * ne; i++)
                D[i] = g->damping * st[i] + (1.0f - g->damping) * D[i];
        if (ost) memcpy(ost, D, (size_t)(R * ne) * sizeof(float));
        if (!op && !on) continue;
        memset(active, 0, (size_t)ne * sizeof(int32_t));
        region_weights(g, D, Wn, 0, P, active);
        if (A > 0 && g->k > 0 && beta && g->shape_model) region_weights(g, D, Wn, P, A, active);

        /* Eq. 4 */
        df__rig_skin_matrices(g->rig, rot, NULL, NULL, world, skin0);
        if (beta) df__rig_skin_matrices_shaped(g->rig, rot, NULL, NULL, beta, world, skinB);
        memset(acc, 0, G3 * sizeof(float));
        for (int64_t e = 0; e < P; e++) { /* pose model */
            if (!active[e]) continue;
            pack_products(skin0, g->pose_inv + e * J * 12, J, mats);
            const float *ex = g->pose_ex + e * g->gs;
            mark_blocks(g, Wn, e, mark);
            for (int64_t b0 = 0, b1; b0 < g->nblocks; b0 = b1) {
                if (!mark[b0]) {
                    b1 = b0 + 1;
                    continue;
                }
                for (b1 = b0 + 1; b1 < g->nblocks && mark[b1]; b1++) {}
                df__skin_t view = skin_view(g, b0, b1);
                int64_t v0 = b0 * DF__SKIN_BLOCK, v1 = v0 + view.n;
                df__skin_lbs(&view, mats, ex + 3 * v0, NULL, t1 + 3 * v0, NULL);
                vertex_weights(g, Wn, e, v0, v1, vw);
                for (int64_t y = v0; y < v1; y++)
                    for (int d = 0; d < 3; d++) acc[3 * y + d] += vw[y] * t1[3 * y + d];
            }
        }
        for (int64_t a = 0; beta && a < A; a++) { /* shape term */
            if (!active[P + a]) continue;
            const int64_t F = g->F, k = g->k;
            for (int64_t i = 0; i < g->S; i++) {
                fc[i] = beta[i];
                if (g->quadratic) fc[g->S + i] = beta[i] * beta[i];
            }
            float *coef = fc + F;
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)k, (int)F, 1.0f, g->map + a * k * F,
                        (int)F, fc, 1, 0.0f, coef, 1);
            /* [L | t(b) - t(b0)] of S(theta,b) S(theta_s,b)^-1 and S(theta,b0) S(theta_s,b0)^-1 */
            df__rig_skin_matrices_shaped(g->rig, g->anc_rot + a * J * 4, NULL, NULL, beta, world,
                                         skinS);
            for (int64_t j = 0; j < J; j++) {
                float mb[12], m0[12];
                if (df_m34_inverse(skinS + 12 * j, invS + 12 * j)) df_m34_identity(invS + 12 * j);
                df_m34_mul(skinB + 12 * j, invS + 12 * j, mb);
                df_m34_mul(skin0 + 12 * j, g->anc_inv0 + (a * J + j) * 12, m0);
                mb[3] -= m0[3], mb[7] -= m0[7], mb[11] -= m0[11];
                df__skin_pack(mb, mats + 16 * j);
            }
            const float *U = g->basis + (size_t)a * k * G3;
            mark_blocks(g, Wn, P + a, mark);
            for (int64_t b0 = 0, b1; b0 < g->nblocks; b0 = b1) {
                if (!mark[b0]) {
                    b1 = b0 + 1;
                    continue;
                }
                for (b1 = b0 + 1; b1 < g->nblocks && mark[b1]; b1++) {}
                df__skin_t view = skin_view(g, b0, b1);
                int64_t v0 = b0 * DF__SKIN_BLOCK, v1 = v0 + view.n;
                /* U_s W_s feat(b) on these rows (column-major 3G x k) */
                cblas_sgemv(CblasColMajor, CblasNoTrans, (int)(3 * (v1 - v0)), (int)k, 1.0f,
                            U + 3 * v0, (int)G3, coef, 1, 0.0f, ys + 3 * v0, 1);
                df__skin_lbs(&view, mats, ys + 3 * v0, NULL, t1 + 3 * v0, NULL);
                vertex_weights(g, Wn, P + a, v0, v1, vw);
                for (int64_t y = v0; y < v1; y++)
                    for (int d = 0; d < 3; d++) acc[3 * y + d] += vw[y] * t1[3 * y + d];
            }
        }

        /* penetration against the posed body: twice, from the nearest
         * candidate down the body's vertex graph to the local nearest body
         * vertex, pushed out along the area-weighted normal there */
        if (g->resolve) {
            compute_normals(Pb, g->Nb, g->btris, g->bT, anrm);
            for (int pass = 0; pass < 2; pass++)
                for (int64_t y = 0; y < G; y++) {
                    float *x = acc + 3 * y;
                    int64_t best;
                    float bd;
                    if (pass == 0) { /* the nearest candidate */
                        const int32_t *c = g->cand + y * g->C;
                        best = c[0];
                        bd = INFINITY;
                        for (int64_t i = 0; i < g->C; i++) {
                            float dd = dist2(x, Pb + 3 * (size_t)c[i]);
                            if (dd < bd) bd = dd, best = c[i];
                        }
                    } else { /* where the first pass ended */
                        best = near[y];
                        bd = dist2(x, Pb + 3 * (size_t)best);
                    }
                    for (;;) { /* descend */
                        int64_t next = best;
                        for (int64_t i = g->nb_off[best]; i < g->nb_off[best + 1]; i++) {
                            float dd = dist2(x, Pb + 3 * (size_t)g->nb[i]);
                            if (dd < bd) bd = dd, next = g->nb[i];
                        }
                        if (next == best) break;
                        best = next;
                    }
                    near[y] = (int32_t)best;
                    const float *q = Pb + 3 * best, *n = anrm + 3 * best;
                    float d = (x[0] - q[0]) * n[0] + (x[1] - q[1]) * n[1] + (x[2] - q[2]) * n[2];
                    float h = g->clear[y] < g->margin ? g->clear[y] : g->margin;
                    if (h < 0) h = 0;
                    if (d < h)
                        for (int k = 0; k < 3; k++) x[k] += (h - d) * n[k];
                }
        }
        /* back to the file's vertex order */
        if (op)
            for (int64_t y = 0; y < G; y++) memcpy(op + 3 * (size_t)g->perm[y], acc + 3 * y, 3 * sizeof(float));
        if (on) {
            compute_normals(acc, G, g->tris, g->T, t1);
            for (int64_t y = 0; y < G; y++) memcpy(on + 3 * (size_t)g->perm[y], t1 + 3 * y, 3 * sizeof(float));
        }
    }
    return DF_OK;
}

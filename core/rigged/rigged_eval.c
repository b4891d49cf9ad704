/* rigged_eval.c — evaluation of a `rigged` model for a batch of poses.
 *
 * DESIGN
 * Order of work for a batch of B poses:
 *  1. validate every pose's inputs and flags first (finite values, non-zero
 *     quaternions, not both LBS and DQS), so a bad pose fails the batch
 *     before any output is written, with the pose and input named;
 *  2. morph targets and shape blend shapes for the whole batch as ONE
 *     GEMM: load laid the [M,N,3] morph deltas and the [S,N,3] shape deltas
 *     out as a column-major 3N x (M+S) matrix and appended the rest
 *     positions as column M+S, so with the weights and shapes of the Bm
 *     poses that have a non-zero one gathered into an (M+S+1) x Bm matrix
 *     (last row 1) one GEMM with beta = 0 yields the morphed positions.
 *     Without a skeleton each pose's column is written straight into its
 *     output buffers (the packed kernel takes a pointer per column): no
 *     copy pass, which at 11k vertices was a third of the evaluation.
 *     Bm == 1 uses sgemv (sgemm at n=1 is several times slower than sgemv;
 *     bench/bench_core.c measures both).
 *     Poses without weights read the rest positions directly;
 *  3. per pose: FK (world_j = world_parent * T R S), skin matrices
 *     S_j = world_j * inverse_bind_j, then the LBS or DQS kernel (skin.c).
 *     LBS normals: the kernel's blended linear part when every joint is a
 *     rotation times a uniform scale; otherwise per-joint normal matrices
 *     (cofactors, normal_matrices) blended by a second kernel pass.
 * Scratch holds everything (morph results, weight matrix, joint data); the
 * function allocates nothing.
 */
#include "math/mathx.h"
#include "math/pgemm.h"
#include "rigged/rigged_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define E(code, ...) df_error_set(err, code, __VA_ARGS__)

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; } /* floats */

static size_t pos_stride(const df__rig_t *r) { return al16((size_t)r->N * 3 + 4); }

size_t df__rig_scratch_bytes(const df_model_t *m, int n)
{
    const df__rig_t *r = m->impl;
    size_t J = (size_t)r->J, B = (size_t)n, C = (size_t)(r->M + r->S);
    size_t fl = 0;
    if (C > 0) fl += B * pos_stride(r) + al16((C + 1) * B);
    if (r->ndeltas) fl += B * pos_stride(r); /* morphed normals */
#ifdef DF_PGEMM
    if (C > 0) fl += al16((C + 1) * B); /* weights regrouped per tile */
#endif
    fl += pos_stride(r);                 /* positions sink */
    fl += al16(J * 12) * 2 + al16(J * 16) * 2 + al16(J * 8);
    fl += al16(B);                       /* morph column of each pose */
    fl += al16(4 * B);                   /* two column pointers per pose */
    return fl * sizeof(float) + 64;
}

void df__rig_skin_matrices(const df__rig_t *r, const float *rot,
                           const float *tr, const float *mat, float *world,
                           float *skin)
{
    df__rig_skin_matrices_shaped(r, rot, tr, mat, NULL, world, skin);
}

void df__rig_skin_matrices_shaped(const df__rig_t *r, const float *rot,
                                  const float *tr, const float *mat,
                                  const float *beta, float *world,
                                  float *skin)
{
    const int64_t J = r->J, S = r->shape_t && beta ? r->S : 0;
    for (int64_t j = 0; j < J; j++) {
        float *wj = world + 12 * j;
        if (mat) {
            memcpy(wj, mat + 12 * j, 12 * sizeof(float));
        } else {
            float q[4], local[12], t[3];
            memcpy(q, rot ? rot + 4 * j : r->rest_q + 4 * j, sizeof q);
            if (rot) df_quat_normalize(q);
            memcpy(t, tr ? tr + 3 * j : r->rest_t + 3 * j, sizeof t);
            for (int64_t s = 0; s < S; s++)
                for (int a = 0; a < 3; a++) t[a] += beta[s] * r->shape_t[(s * J + j) * 3 + a];
            df_m34_from_trs(t, q, r->rest_s + 3 * j, local);
            int32_t p = r->parents[j];
            if (p >= 0)
                df_m34_mul(world + 12 * p, local, wj);
            else
                memcpy(wj, local, sizeof local);
        }
        if (S == 0) {
            df_m34_mul(wj, r->ibm + 12 * j, skin + 12 * j);
        } else { /* T(-c) * ibm: the inverse bind of the shaped rest skeleton */
            float ib[12];
            memcpy(ib, r->ibm + 12 * j, sizeof ib);
            for (int64_t s = 0; s < S; s++)
                for (int a = 0; a < 3; a++) ib[4 * a + 3] -= beta[s] * r->shape_c[(s * J + j) * 3 + a];
            df_m34_mul(wj, ib, skin + 12 * j);
        }
    }
}

static const float *pose_in(const df_batch_t *b, int idx, int p)
{
    if (idx < 0 || !b->in[idx]) return NULL;
    return b->in[idx][p];
}

/* ---- morph GEMM ------------------------------------------------------
 * AVX-512 builds: the deltas packed at load (math/pgemm.h), each pose's
 * column written where it belongs; others: OpenBLAS. */

static int check_finite(const float *x, int64_t n, int p, const char *name,
                        df_error_t *err)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return E(DF_EINVAL, "pose %d: input '%s' element %lld is not "
                                "finite", p, name, (long long)i);
    return DF_OK;
}

static int validate(const df__rig_t *r, const df_batch_t *b, df_error_t *err)
{
    int rc;
    for (int p = 0; p < b->n; p++) {
        uint32_t fl = b->flags ? b->flags[p] : 0;
        if ((fl & DF_POSE_LBS) && (fl & DF_POSE_DQS))
            return E(DF_EINVAL, "pose %d: flags ask for both LBS and DQS", p);
        const float *w = pose_in(b, r->in_w, p);
        const float *sh = pose_in(b, r->in_shape, p);
        const float *q = pose_in(b, r->in_rot, p);
        const float *t = pose_in(b, r->in_tr, p);
        const float *mt = pose_in(b, r->in_mat, p);
        if (w && (rc = check_finite(w, r->M, p, "weights", err))) return rc;
        if (sh && (rc = check_finite(sh, r->S, p, "shape", err))) return rc;
        if (t && (rc = check_finite(t, r->J * 3, p, "joint_translations", err)))
            return rc;
        if (mt && (rc = check_finite(mt, r->J * 12, p, "joint_matrices", err)))
            return rc;
        if (q) {
            if ((rc = check_finite(q, r->J * 4, p, "joint_rotations", err)))
                return rc;
            for (int64_t j = 0; j < r->J; j++) {
                const float *x = q + 4 * j;
                double n = sqrt((double)x[0] * x[0] + (double)x[1] * x[1] +
                                (double)x[2] * x[2] + (double)x[3] * x[3]);
                if (!(n > 1e-6))
                    return E(DF_EINVAL,
                             "pose %d: input 'joint_rotations' joint %lld: "
                             "quaternion norm %g (must be > 1e-6)",
                             p, (long long)j, n);
            }
        }
    }
    return DF_OK;
}

/* DQS inputs for one pose: rigid part as dual quaternions, scale/shear part
 * in skin-matrix layout. Returns 1 when some joint is not rigid.
 *
 * A non-rigid skin matrix S = [L | t] is split as L = R P (polar: R a
 * rotation, P symmetric) with the scale/shear P applied about the joint's
 * bind position c (the translation of inverse(ibm)), as Blender's Preserve
 * Volume does in the bone's own frame:
 *     S x = R (P (x - c) + c) + t',   t' = t - R (c - P c).
 * Scaling about the model-space origin instead would make the result depend
 * on where the character stands (the blended dual quaternions then carry
 * the scale's lever arm). */
static int dqs_prepare(const df__rig_t *r, const float *skin, float *dq,
                       float *lin)
{
    int any = 0;
    static const float ident[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
    for (int64_t j = 0; j < r->J; j++) {
        const float *s = skin + 12 * j;
        float L[9], R[9], P[9], q[4], t[3] = {s[3], s[7], s[11]};
        df_m34_linear(s, L);
        /* rigid when L^T L = I and det > 0 (to float round-off) */
        float dev = 0;
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++) {
                float d = L[a] * L[c] + L[3 + a] * L[3 + c] +
                          L[6 + a] * L[6 + c] - (a == c ? 1.0f : 0.0f);
                dev = fmaxf(dev, fabsf(d));
            }
        if (dev < 1e-5f && df_m33_det(L) > 0) {
            df_quat_from_m33(L, q);
            df__skin_pack(ident, lin + 16 * j);
        } else {
            df_m33_polar(L, R, P); /* mirror/singular: R = I, P = L */
            df_quat_from_m33(R, q);
            /* c: the joint's bind position; ibm is affine, so invertible
             * whenever the loader accepted it */
            float bind[12], c[3] = {0, 0, 0}, e[3];
            if (df_m34_inverse(r->ibm + 12 * j, bind) == 0) {
                c[0] = bind[3];
                c[1] = bind[7];
                c[2] = bind[11];
            }
            for (int a = 0; a < 3; a++)
                e[a] = c[a] - (P[3 * a] * c[0] + P[3 * a + 1] * c[1] + P[3 * a + 2] * c[2]);
            for (int a = 0; a < 3; a++)
                t[a] -= R[3 * a] * e[0] + R[3 * a + 1] * e[1] + R[3 * a + 2] * e[2];
            float pm[12] = {P[0], P[1], P[2], e[0], P[3], P[4],
                            P[5], e[1], P[6], P[7], P[8], e[2]};
            df__skin_pack(pm, lin + 16 * j);
            any = 1;
        }
        df_dq_from_qt(q, t, dq + 8 * j);
    }
    return any;
}

/* Normal matrices of one pose's joints for LBS. Returns 0 when every
 * joint's linear part L is a rotation times a positive uniform scale
 * (L^T L = s^2 I, det > 0, to float round-off): then the blended L turns
 * normals as well as any normal matrix would (for L = sR, cof(L)/|det L|^(1/3)
 * = L), and the skinning kernel blends L for both. Otherwise writes, in
 * skin-matrix layout with a zero translation, N_j = cof(L_j)/|det L_j|^(1/3)
 * = sign(det) |det|^(2/3) L_j^{-T}: the inverse transpose (a face's cross
 * product moves by cof(L), so a reflection flips the normal as it flips the
 * winding), scaled to equal L_j for rotations times a scale so that both
 * paths agree where both apply. Returns 1. */
static int normal_matrices(const df__rig_t *r, const float *skin, float *nm)
{
    int64_t j = 0;
    for (; j < r->J; j++) {
        const float *s = skin + 12 * j;
        float L[9];
        df_m34_linear(s, L);
        float g[9], tr = 0, dev = 0;
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++)
                g[3 * a + c] = L[a] * L[c] + L[3 + a] * L[3 + c] + L[6 + a] * L[6 + c];
        tr = (g[0] + g[4] + g[8]) / 3;
        for (int q = 0; q < 9; q++) dev = fmaxf(dev, fabsf(g[q] - (q % 4 == 0 ? tr : 0.0f)));
        if (!(tr > 0 && dev <= 1e-5f * tr && df_m33_det(L) > 0)) break;
    }
    if (j == r->J) return 0;
    for (j = 0; j < r->J; j++) {
        const float *s = skin + 12 * j;
        double a = s[0], b = s[1], c = s[2], d = s[4], e = s[5], f = s[6], g = s[8], h = s[9],
               i = s[10];
        double C[9] = {e * i - f * h, f * g - d * i, d * h - e * g,
                       c * h - b * i, a * i - c * g, b * g - a * h,
                       b * f - c * e, c * d - a * f, a * e - b * d};
        double det = a * C[0] + b * C[1] + c * C[2];
        double k = fabs(det) > 1e-30 ? 1.0 / cbrt(fabs(det)) : 1.0; /* singular: cof */
        float m[12] = {(float)(C[0] * k), (float)(C[1] * k), (float)(C[2] * k), 0,
                       (float)(C[3] * k), (float)(C[4] * k), (float)(C[5] * k), 0,
                       (float)(C[6] * k), (float)(C[7] * k), (float)(C[8] * k), 0};
        df__skin_pack(m, nm + 16 * j);
    }
    return 1;
}

/* column q of A (3N x M1, the load-time layout) x W (M1 x nm) into cols[q]
 * (3N floats: a pose's output or scratch). The packed kernel writes each
 * column where it belongs; cblas (whose result needs one leading
 * dimension) writes C (column stride ldc) and the columns that belong
 * elsewhere are copied there. Wt: scratch for the packed kernel's
 * regrouped weights. */
static void morph_gemm(const float *A, size_t N3, size_t M1, const float *W, int nm,
                       float *const *cols, float *C, size_t ldc, float *Wt)
{
    if (nm <= 0) return;
#ifdef DF_PGEMM
    (void)C, (void)ldc;
    df_pgemm(A, (int64_t)N3, (int64_t)M1, W, nm, cols, NULL, 0, Wt);
#else
    (void)Wt;
    if (nm == 1) {
        cblas_sgemv(CblasColMajor, CblasNoTrans, (int)N3, (int)M1, 1.0f, A, (int)N3, W, 1,
                    0.0f, cols[0], 1);
        return;
    }
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)N3, nm, (int)M1, 1.0f, A,
                (int)N3, W, (int)M1, 0.0f, C, (int)ldc);
    for (int q = 0; q < nm; q++)
        if (cols[q] != C + (size_t)q * ldc) memcpy(cols[q], C + (size_t)q * ldc, N3 * sizeof(float));
#endif
}

/* Rows of v (n x 3) to unit length; zero rows stay zero. */
static void normalize3(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float *x = v + 3 * i;
        double l = sqrt((double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2]);
        if (l > 1e-20)
            for (int d = 0; d < 3; d++) x[d] = (float)(x[d] / l);
        else
            x[0] = x[1] = x[2] = 0.0f;
    }
}

int df__rig_evaluate(const df_model_t *m, const df_batch_t *b, void *scratch,
                     df_error_t *err)
{
    const df__rig_t *r = m->impl;
    int rc = validate(r, b, err);
    if (rc) return rc;
    const int B = b->n;
    const size_t N3 = (size_t)r->N * 3, J = (size_t)r->J, M = (size_t)r->M;
    const size_t S = (size_t)r->S, Cm = M + S; /* delta columns before the rest */
    const size_t ps = pos_stride(r);

    /* carve scratch (64-byte aligned base, 16-float aligned regions) */
    float *s = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *C = NULL, *Wm = NULL, *Cn = NULL;
    if (Cm > 0) {
        C = s;
        s += (size_t)B * ps;
        if (r->ndeltas) {
            Cn = s;
            s += (size_t)B * ps;
        }
        Wm = s;
        s += al16((Cm + 1) * (size_t)B);
    }
#ifdef DF_PGEMM
    float *Wt = s;
    if (Cm > 0) s += al16((Cm + 1) * (size_t)B);
#else
    float *Wt = NULL; /* cblas needs no regrouped weights */
#endif
    float *sink = s;
    s += ps;
    float *world = s;
    s += al16(J * 12);
    float *skin = s;
    s += al16(J * 12);
    float *packed = s;
    s += al16(J * 16);
    float *lin = s;
    s += al16(J * 16);
    float *dq = s;
    s += al16(J * 8);
    int32_t *col = (int32_t *)s;
    s += al16((size_t)B);
    float **pcol = (float **)s, **pcoln = pcol + B; /* where each morphed column goes */

    /* 1. morph targets: one GEMM for the batch. A has M+1 columns (rest
     * last), each pose's weight column ends with 1, beta = 0. With no
     * skeleton the result is the output: when there is one pose, or the
     * output buffers are evenly spaced (a contiguous batch array), the GEMM
     * writes straight into them. */
    const size_t M1 = Cm + 1;
    int nm = 0;
    for (int p = 0; p < B; p++) {
        col[p] = -1;
        const float *w = pose_in(b, r->in_w, p);
        const float *sh = pose_in(b, r->in_shape, p);
        size_t i = 0, k = 0;
        if (w)
            for (; i < M && w[i] == 0.0f; i++) {}
        if (sh)
            for (; k < S && sh[k] == 0.0f; k++) {}
        if ((!w || i == M) && (!sh || k == S)) continue; /* all zero: rest */
        col[p] = nm;
        float *wc = Wm + (size_t)nm * M1;
        if (w)
            memcpy(wc, w, M * sizeof(float));
        else
            memset(wc, 0, M * sizeof(float));
        if (sh)
            memcpy(wc + M, sh, S * sizeof(float));
        else
            memset(wc + M, 0, S * sizeof(float));
        wc[Cm] = 1.0f;
        nm++;
    }
    /* Where each morphed pose's column goes: with no skeleton the result is
     * the output, so the kernel writes straight into the pose's output
     * buffers (positions, and normals before their normalisation); with
     * one, scratch, which the skinning reads. */
    int morph_n = 0;
    if (Cn && nm > 0 && b->out[1])
        for (int p = 0; p < B && !morph_n; p++) morph_n = col[p] >= 0 && b->out[1][p];
    for (int p = 0; p < B; p++) {
        const int q = col[p];
        if (q < 0) continue;
        float *op = J == 0 && b->out[0] ? b->out[0][p] : NULL;
        float *on = J == 0 && b->out[1] ? b->out[1][p] : NULL;
        pcol[q] = op ? op : C + (size_t)q * ps;
        if (morph_n) pcoln[q] = on ? on : Cn + (size_t)q * ps;
    }
    morph_gemm(r->deltas, N3, M1, Wm, nm, pcol, C, ps, Wt);
    /* the normals of morphed poses: the same GEMM on the normal deltas
     * (rest normals as the last column), when normals are wanted; the
     * skinning normalises what it is given */
    if (morph_n) morph_gemm(r->ndeltas, N3, M1, Wm, nm, pcoln, Cn, ps, Wt);

    /* 2-3. per pose: FK, skin matrices, skinning */
    for (int p = 0; p < B; p++) {
        const float *src = col[p] >= 0 ? pcol[col[p]] : r->rest;
        float *op = b->out[0] ? b->out[0][p] : NULL;
        float *on = b->out[1] ? b->out[1][p] : NULL;
        const float *nin = morph_n && col[p] >= 0 ? pcoln[col[p]] : r->rest_nrm;
        if (J == 0) {
            if (op && op != src) memcpy(op, src, N3 * sizeof(float));
            if (on) {
                if (on != nin) memcpy(on, nin, N3 * sizeof(float));
                if (nin != r->rest_nrm) normalize3(on, (size_t)r->N);
            }
            continue;
        }
        if (!op && !on) continue;
        if (!op) op = sink;
        df__rig_skin_matrices_shaped(r, pose_in(b, r->in_rot, p), pose_in(b, r->in_tr, p),
                                     pose_in(b, r->in_mat, p), pose_in(b, r->in_shape, p),
                                     world, skin);
        uint32_t fl = b->flags ? b->flags[p] : 0;
        int use_dqs = (fl & DF_POSE_DQS) ? 1 : (fl & DF_POSE_LBS) ? 0 : r->dqs;
        if (!on) nin = NULL;
        if (!use_dqs) {
            for (size_t j = 0; j < J; j++)
                df__skin_pack(skin + 12 * j, packed + 16 * j);
            if (on && normal_matrices(r, skin, lin)) {
                /* non-rigid joints: positions with the blended L, normals
                 * with the blended normal matrices (the kernel's "points"
                 * pass, zero translations), then unit length */
                df__skin_lbs(&r->skin, packed, src, NULL, op, NULL);
                df__skin_lbs(&r->skin, lin, nin, NULL, on, NULL);
                normalize3(on, (size_t)r->N);
            } else {
                df__skin_lbs(&r->skin, packed, src, nin, op, on);
            }
        } else {
            int any = dqs_prepare(r, skin, dq, lin);
            df__skin_dqs(&r->skin, dq, any ? lin : NULL, src, nin, op, on);
        }
    }
    return DF_OK;
}

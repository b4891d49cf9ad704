/* kind_rigapprox.c — the `rigapprox` model kind: accurate rig approximation
 * (Song, Shi & Reed 2020) served batch-first.
 *
 * DESIGN
 * Inputs `controls` [C] and `joint_matrices` [J,12] (world 3x4, like the
 * rigged kind; both optional: control defaults / bind pose). Output
 * `positions` [V,3]. A batch of B poses runs as one chain:
 *   features X [B,F] (Eq. 9; joint matrices taken into their parent's frame
 *   with the model's `joint_parents`, the animator's local transforms) ->
 *   differential MLP through its packed copy (nn.h): at B = 1 an own
 *   streaming kernel that reads the weights once at full bandwidth where
 *   sgemv did not, for a batch four poses per weight load (faster than
 *   OpenBLAS sgemm here at every B measured) -> PCA coefficients [B,P];
 *   every anchor mini-network (~3 x 64 wide, a few hundred of them) through
 *   ONE packed array holding the whole bank (nn.h), input gather fused into
 *   the first layer, the poses of a batch reusing each net from L1 (~850
 *   BLAS calls per batch cost more in dispatch than the arithmetic) ->
 *   anchor offsets [A,3B];
 *   reconstruction of the nonlinear offsets v_nl [B,3V], either
 *     dense : v_nl = g0 + coef G^T + (H AP)^T  with G = A^-1 L_s^T U and
 *             H = w^2 A^-1 S^T folded at load (two GEMMs per batch; at
 *             B = 1 sgemv on G and ONE pass over H for the three
 *             coordinates, df_matvec3_add), or
 *     sparse: RHS L_s^T (mean + U coef) + w^2 S^T AP, one forward/back
 *             substitution with 3B right-hand sides (core/math/laplacian.c);
 *   then out_i = T_i (v_i + v_nl,i), T_i = sum_k w_ik world_k invbind_k.
 * The choice is per model: parameter "reconstruction" = "dense" | "sparse" |
 * "auto" (default: dense while the folded matrices stay under
 * dense_max_mb, 256 MB; docs/rigapprox.md has the measured crossover).
 * Variants local / pcalr / lbs (baselines) skip the anchors and the solve.
 * Everything per request lives in the worker's scratch; nothing allocates.
 */
#include "df.h"
#include "math/laplacian.h"
#include "math/mathx.h"
#include "base/model_internal.h"
#include "math/nn.h"
#include "rigapprox/rigapprox.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ra_impl {
    df_ramodel_t m;       /* owned copy (arena): the file closes after load */
    df_lap_t *lap;        /* OURS */
    int dense;
    float *G, *H, *g0;    /* dense folding: [3V,P], [V,A], [3V] */
    float *rest_world;    /* [J,12] default joint matrices */
    size_t max_anc_work;  /* floats per pose of the widest anchor net */
    float *net_pk;        /* the differential (or local / pcalr) net packed, batch 1 */
    float *anc_pk;        /* every anchor net packed (df_mlp_pack), one array */
    size_t *anc_pk_off;   /* [A] offset of anchor a's net in anc_pk */
} ra_impl_t;

static void ra_destroy(void *p)
{
    ra_impl_t *r = p;
    if (!r) return;
    df_ramodel_release(&r->m);
    df_lap_free(&r->lap);
    free(r->G), free(r->H), free(r->g0), free(r->rest_world);
    free(r->net_pk), free(r->anc_pk), free(r->anc_pk_off);
    free(r);
}

static int ra_load(df_model_t *mo, const df_st_t *st_in, const char *params_json,
                   const df_limits_t *lim, df_error_t *err)
{
    ra_impl_t *r = calloc(1, sizeof *r);
    if (!r) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
    mo->impl = r; /* freed by destroy, also on failure */
    /* the file is closed after load: parse (borrowing), then copy */
    df_ramodel_t tmp;
    int rc = df_ramodel_read(st_in, &tmp, err);
    if (rc) return rc;
    rc = df_ramodel_copy(&tmp, &r->m, err);
    df_ramodel_release(&tmp);
    if (rc) return rc;
    df_ramodel_t *m = &r->m;
    if (lim && m->nv > lim->max_vertices)
        return df_error_set(err, DF_ELIMIT, "rigapprox: %lld vertices over the limit %lld",
                            (long long)m->nv, (long long)lim->max_vertices);
    r->rest_world = malloc(sizeof(float) * 12 * m->nj);
    if (!r->rest_world) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
    for (int64_t j = 0; j < m->nj; j++)
        if (df_m34_inverse(m->invbind + j * 12, r->rest_world + j * 12))
            return df_error_set(err, DF_EFORMAT, "rigapprox: inverse_bind_matrices[%lld] is singular",
                                (long long)j);
    /* parameters */
    const char *recon = "auto";
    double dense_max_mb = 256;
    json_t *pj = NULL;
    if (params_json) {
        json_error_t je;
        pj = json_loads(params_json, 0, &je);
        if (!pj || !json_is_object(pj)) {
            json_decref(pj);
            return df_error_set(err, DF_EINVAL, "rigapprox: parameters are not a JSON object");
        }
        json_t *v = json_object_get(pj, "reconstruction");
        if (v && json_is_string(v)) recon = json_string_value(v);
        v = json_object_get(pj, "dense_max_mb");
        if (v && json_is_number(v)) dense_max_mb = json_number_value(v);
    }
    int want = !strcmp(recon, "dense") ? 1 : !strcmp(recon, "sparse") ? 0 : !strcmp(recon, "auto") ? 2 : -1;
    json_decref(pj);
    if (want < 0)
        return df_error_set(err, DF_EINVAL, "rigapprox: parameter reconstruction must be dense, sparse or auto");

    int64_t C = m->nc, J = m->nj, V = m->nv;
    if (C) {
        float *def = malloc(sizeof(float) * C);
        if (!def) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
        for (int64_t c = 0; c < C; c++) def[c] = m->ctrl_range[c * 3 + 2];
        int64_t sc[1] = {C};
        rc = df__model_add_input(mo, "controls", 1, sc, 1, def);
        free(def);
        if (rc)
            return df_error_set(err, rc, "rigapprox: cannot add input 'controls': %s",
                                df_strerror(rc));
    }
    int64_t sj[2] = {J, 12}, sv[2] = {V, 3};
    if ((rc = df__model_add_input(mo, "joint_matrices", 2, sj, 1, r->rest_world)) ||
        (rc = df__model_add_output(mo, "positions", 2, sv)) ||
        (rc = df__model_set_mesh(mo, V, m->rest, m->nt, m->tris)) ||
        (rc = df__model_set_names(mo, "joints", (size_t)J, (const char *const *)m->joint_names)) ||
        (C && (rc = df__model_set_names(mo, "controls", (size_t)C, (const char *const *)m->control_names))))
        return df_error_set(err, rc, "rigapprox: cannot describe the model: %s", df_strerror(rc));

    if (m->net) { /* batch 1 streams the packed copy once (nn.h); batch > 1 runs GEMMs on m->net */
        r->net_pk = aligned_alloc(64, (sizeof(float) * df_mlp_packed_floats(m->net) + 63) / 64 * 64);
        if (!r->net_pk) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
        df_mlp_pack(m->net, r->net_pk);
    }
    if (m->variant == DF_RA_OURS) {
        if ((rc = df_rigapprox_lap(V, m->rest, m->nt, m->tris, m->na, m->anchors, m->omega, &r->lap, err))) return rc;
        size_t pk = 0;
        r->anc_pk_off = malloc(sizeof(size_t) * (m->na + 1));
        if (!r->anc_pk_off) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
        for (int64_t a = 0; a < m->na; a++) {
            size_t wf = df_mlp_work_floats(m->anc_nets[a], 1);
            if (wf > r->max_anc_work) r->max_anc_work = wf;
            r->anc_pk_off[a] = pk;
            pk += df_mlp_packed_floats(m->anc_nets[a]);
        }
        /* the batch-1 anchor bank: every net packed back to back, streamed once per pose */
        r->anc_pk = aligned_alloc(64, (sizeof(float) * pk + 63) / 64 * 64 + 64); /* size: a multiple of 64 */
        if (!r->anc_pk) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
        for (int64_t a = 0; a < m->na; a++) df_mlp_pack(m->anc_nets[a], r->anc_pk + r->anc_pk_off[a]);
        double mb = (3.0 * V * m->P + (double)V * m->na + 3.0 * V) * 4 / 1e6;
        r->dense = want == 1 || (want == 2 && mb <= dense_max_mb);
        if (r->dense) {
            r->G = malloc(sizeof(float) * 3 * V * m->P);
            r->H = malloc(sizeof(float) * V * m->na);
            r->g0 = malloc(sizeof(float) * 3 * V);
            if (!r->G || !r->H || !r->g0)
                return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory for the dense "
                                    "reconstruction (%.0f MB)", mb);
            /* basis [3V,P] is [V,3P] row-major: L_s acts on the vertex index */
            if ((rc = df_lap_fold(r->lap, (int)(3 * m->P), m->basis, r->G, r->H, err)) ||
                (rc = df_lap_fold(r->lap, 3, m->basis_mean, r->g0, NULL, err)))
                return rc;
        }
    }
    return DF_OK;
}

static size_t ra_scratch_bytes(const df_model_t *mo, int n)
{
    const ra_impl_t *r = mo->impl;
    const df_ramodel_t *m = &r->m;
    size_t B = (size_t)n, V = (size_t)m->nv;
    size_t f = B * m->nf + 16;                          /* X */
    if (m->net) f += df_mlp_work_floats(m->net, n) + 16; /* act */
    if (m->lin) f += B * m->P + 16;                      /* coefficients + linear path */
    if (m->alin) f += B * 3 * m->na + 16;                /* the anchors' linear path */
    f += B * 3 * V + 16;                                /* vnl */
    f += (size_t)m->nj * 32 + 16;                       /* skinning matrices (+ DQS parts) */
    size_t d = 0;
    if (m->variant == DF_RA_OURS) {
        f += r->max_anc_work + m->na * 3 * B + 3 * m->na + 48;
        f += 2 * B * 3 * V + 32; /* R and delta */
        if (!r->dense) d = 2 * B * 3 * V;
    }
    return f * sizeof(float) + d * sizeof(double) + 256;
}

static int check_finite(const float *x, int64_t n, int pose, const char *name, df_error_t *err)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return df_error_set(err, DF_EINVAL, "pose %d: input '%s' element %lld is not finite",
                                pose, name, (long long)i);
    return DF_OK;
}

static int ra_evaluate(const df_model_t *mo, const df_batch_t *b, void *scratch,
                       df_error_t *err)
{
    const ra_impl_t *r = mo->impl;
    const df_ramodel_t *m = &r->m;
    int B = b->n;
    int64_t V = m->nv, J = m->nj, C = m->nc, F = m->nf, P = m->P, A = m->na;
    int ic = df_model_find_input(mo, "controls"), ij = df_model_find_input(mo, "joint_matrices");
    int op = df_model_find_output(mo, "positions");
    /* scratch layout (64-byte aligned pieces) */
    char *cur = scratch;
#define TAKE(T, n) ((T *)(cur = (char *)(((uintptr_t)cur + 63) & ~(uintptr_t)63), cur += sizeof(T) * (n), cur - sizeof(T) * (n)))
    float *X = TAKE(float, (size_t)B * F);
    float *act = m->net ? TAKE(float, df_mlp_work_floats(m->net, B)) : NULL;
    float *vnl = TAKE(float, (size_t)B * 3 * V);
    float *skm = TAKE(float, J * 32), *dq = skm + J * 12, *plin = dq + J * 8;
    /* 1. features, validated */
    for (int p = 0; p < B; p++) {
        const float *w = (ij >= 0 && b->in[ij] && b->in[ij][p]) ? b->in[ij][p] : r->rest_world;
        const float *c = (ic >= 0 && b->in[ic] && b->in[ic][p]) ? b->in[ic][p] : mo->input_defaults[ic >= 0 ? ic : 0];
        int rc;
        if (w != r->rest_world && (rc = check_finite(w, J * 12, p, "joint_matrices", err))) return rc;
        if (C && c != mo->input_defaults[ic] && (rc = check_finite(c, C, p, "controls", err))) return rc;
        if ((rc = df_ramodel_features(m, w, C ? c : NULL, X + (size_t)p * F)))
            return df_error_set(err, DF_EINVAL, "pose %d: input 'joint_matrices' row %d (a parent joint) is singular",
                                p, -1 - rc);
    }
    /* 2. networks and v_nl */
    if (m->variant == DF_RA_LBS) {
        memset(vnl, 0, sizeof(float) * B * 3 * V);
    } else {
        const float *coef = df_mlp_forward_packed_batch(m->net, r->net_pk, B, X, act);
        if (m->lin) { /* the linear path: coef += lin x + lin_b */
            float *z = TAKE(float, (size_t)B * P);
            for (int p = 0; p < B; p++)
                for (int64_t q = 0; q < P; q++) z[(size_t)p * P + q] = coef[(size_t)p * P + q] + m->lin_b[q];
            if (B == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)P, (int)F, 1.0f, m->lin, (int)F, X, 1, 1.0f, z, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)P, (int)F, 1.0f, X, (int)F, m->lin, (int)F,
                            1.0f, z, (int)P);
            coef = z;
        }
        if (m->variant != DF_RA_OURS || !r->dense) {
            /* vnl (or delta for OURS sparse) = mean + coef U^T */
            for (int p = 0; p < B; p++) memcpy(vnl + (size_t)p * 3 * V, m->basis_mean, sizeof(float) * 3 * V);
            if (B == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(3 * V), (int)P, 1.0f, m->basis, (int)P, coef, 1, 1.0f, vnl, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)(3 * V), (int)P, 1.0f, coef, (int)P,
                            m->basis, (int)P, 1.0f, vnl, (int)(3 * V));
        }
        if (m->variant == DF_RA_OURS) {
            float *acta = TAKE(float, r->max_anc_work);
            float *AP = TAKE(float, (size_t)A * 3 * B);
            float *R = TAKE(float, (size_t)V * 3 * B);
            /* the packed bank at every batch size, gather fused into the first layer; the poses of
             * a batch reuse each net's weights from L1/L2 (faster than one small GEMM per layer up
             * to B = 32 and equal at 128; four poses per weight load measured no better here:
             * docs/rigapprox.md) */
            for (int64_t a = 0; a < A; a++)
                for (int p = 0; p < B; p++) {
                    const float *o = df_mlp_forward_packed(m->anc_nets[a], r->anc_pk + r->anc_pk_off[a],
                                                           m->anc_idx + m->anc_off[a], X + (size_t)p * F, acta);
                    float *ap = AP + (a * B + p) * 3;
                    ap[0] = o[0], ap[1] = o[1], ap[2] = o[2];
                }
            if (m->alin) { /* the anchors' linear path: AP += alin x + alin_b */
                float *al = TAKE(float, (size_t)B * 3 * A);
                if (B == 1) {
                    memcpy(al, m->alin_b, sizeof(float) * 3 * A);
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(3 * A), (int)F, 1.0f, m->alin, (int)F, X, 1, 1.0f, al, 1);
                } else {
                    for (int p = 0; p < B; p++) memcpy(al + (size_t)p * 3 * A, m->alin_b, sizeof(float) * 3 * A);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)(3 * A), (int)F, 1.0f, X, (int)F, m->alin,
                                (int)F, 1.0f, al, (int)(3 * A));
                }
                for (int64_t a = 0; a < A; a++)
                    for (int p = 0; p < B; p++)
                        for (int c = 0; c < 3; c++) AP[(a * B + p) * 3 + c] += al[(size_t)p * 3 * A + a * 3 + c];
            }
            if (r->dense) {
                for (int p = 0; p < B; p++) memcpy(vnl + (size_t)p * 3 * V, r->g0, sizeof(float) * 3 * V);
                if (B == 1) /* sgemv streams G at the speed of an own kernel (measured) */
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(3 * V), (int)P, 1.0f, r->G, (int)P, coef, 1, 1.0f, vnl, 1);
                else
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)(3 * V), (int)P, 1.0f, coef, (int)P,
                                r->G, (int)P, 1.0f, vnl, (int)(3 * V));
                if (B == 1) { /* one pass over H, three dot products per row (gemm N = 3 repacks H) */
                    df_matvec3_add(V, (int)A, r->H, AP, vnl, R);
                } else {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)V, 3 * B, (int)A, 1.0f, r->H,
                                (int)A, AP, 3 * B, 0.0f, R, 3 * B);
                    for (int64_t v = 0; v < V; v++)
                        for (int p = 0; p < B; p++)
                            for (int c = 0; c < 3; c++) vnl[(size_t)p * 3 * V + v * 3 + c] += R[(v * B + p) * 3 + c];
                }
            } else {
                float *D = TAKE(float, (size_t)V * 3 * B);
                double *dw = TAKE(double, (size_t)2 * V * 3 * B);
                for (int64_t v = 0; v < V; v++)
                    for (int p = 0; p < B; p++)
                        for (int c = 0; c < 3; c++) D[(v * B + p) * 3 + c] = vnl[(size_t)p * 3 * V + v * 3 + c];
                df_lap_reconstruct(r->lap, 3 * B, D, AP, R, dw);
                for (int64_t v = 0; v < V; v++)
                    for (int p = 0; p < B; p++)
                        for (int c = 0; c < 3; c++) vnl[(size_t)p * 3 * V + v * 3 + c] = R[(v * B + p) * 3 + c];
            }
        }
    }
#undef TAKE
    /* 3. linear part and output */
    if (op < 0 || !b->out[op]) return DF_OK;
    for (int p = 0; p < B; p++) {
        float *out = b->out[op][p];
        if (!out) continue;
        const float *w = (ij >= 0 && b->in[ij] && b->in[ij][p]) ? b->in[ij][p] : r->rest_world;
        df__ra_skin_prepare(J, m->invbind, w, m->dqs, skm, dq, plin);
        const float *d = vnl + (size_t)p * 3 * V;
        for (int64_t v = 0; v < V; v++) {
            float T[12];
            df__ra_vertex_T(m->dqs, (int)m->k, m->skin_j + v * m->k, m->skin_w + v * m->k, skm, dq, plin, T);
            float x = m->rest[v * 3] + d[v * 3], y = m->rest[v * 3 + 1] + d[v * 3 + 1],
                  z = m->rest[v * 3 + 2] + d[v * 3 + 2];
            out[v * 3] = T[0] * x + T[1] * y + T[2] * z + T[3];
            out[v * 3 + 1] = T[4] * x + T[5] * y + T[6] * z + T[7];
            out[v * 3 + 2] = T[8] * x + T[9] * y + T[10] * z + T[11];
        }
    }
    return DF_OK;
}

const df_kind_t df_kind_rigapprox = {
    .name = "rigapprox",
    .load = ra_load,
    .destroy = ra_destroy,
    .scratch_bytes = ra_scratch_bytes,
    .evaluate = ra_evaluate,
};

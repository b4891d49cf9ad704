/* rigapprox_ref.h — an independent double-precision evaluation of a
 * rigapprox model file (variant ours), the reference of the rigapprox tests
 * (header-only, static inline; included by test_rigapprox.c and
 * test_rigapprox_serve.c).
 *
 * DESIGN
 * Written from docs/rigapprox.md ("How it works") with plain loops in
 * double; it reads the file's tensors itself (df_st_require) and shares no
 * code with core/rigapprox or core/math (no df_ramodel_*, nn, laplacian,
 * OpenBLAS), so a fault there cannot cancel out. Per pose:
 *   features  x = (f - feature_mean) * feature_scale, f the 12 entries of
 *             each joint's matrix in its parent's frame, world_p^-1 world_j
 *             (a general 3x4 inverse; world_j for a root or a model without
 *             joint_parents), then the controls;
 *   net       ReLU MLP net/<l>/{weight [out,in], bias} (no ReLU on the last
 *             layer), plus net_linear/weight x + net_linear/bias when the
 *             file has them -> PCA coefficients z [P];
 *   delta     pca_mean + pca_basis z, the differential coordinates [V,3];
 *   anchors   anchor/<a>/<l> fed x[anchor_input_index[off_a .. off_a+1)],
 *             plus anchor_linear/weight rows 3a..3a+3 times x and the
 *             bias when the file has them -> the anchor's offset [3];
 *   v_nl      (L^T L + w^2 S^T S) v = L^T delta + w^2 S^T a, one solve per
 *             coordinate by Gaussian elimination with partial pivoting, L =
 *             D - Adj the uniform Laplacian of the triangles' edges, S the
 *             anchor rows, w = omega;
 *   out_i     = sum_k w_ik world_k invbind_k (rest_i + v_nl,i); with
 *             metadata skinning = dqs the transforms world_k invbind_k
 *             (rigid: a non-rigid one is refused) become unit quaternions
 *             q_k (Shepperd) and translations t_k, blended as dual
 *             quaternions (q, t q / 2) with weights negated where
 *             q_k . q_first < 0, normalised, applied to rest_i + v_nl,i.
 * Dense on purpose (V of a few hundred at most). No seam welding: a mesh
 * with two vertices at one rest position is refused (the tiny reference
 * rig never has one). Ownership: raref_t borrows every array from the open
 * file (keep it open) and owns L and L^T L (raref_close).
 */
#ifndef RIGAPPROX_REF_H
#define RIGAPPROX_REF_H

#include "df.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct raref {
    const df_st_t *st;
    int V, J, K, C, F, P, A, net_layers, anc_layers;
    int width;    /* the widest layer, input or feature row */
    double omega; /* the file's */
    const float *rest, *invbind, *skin_w, *fmean, *fscale, *basis, *bmean;
    const float *lin, *lin_b; /* the linear path [P,F], [P], or NULL */
    int dqs;                  /* metadata skinning = dqs */
    const float *alin, *alin_b; /* the anchors' linear path [3A,F], [3A], or NULL */
    const int32_t *skin_j, *parents, *anchors, *anc_off, *anc_idx;
    double *L, *LtL; /* [V,V] each, owned */
} raref_t;

/* Solves A y' = y in place (A [n,n] row-major, destroyed): Gaussian
 * elimination with partial pivoting. -1 when A is singular. */
static inline int raref_dense_solve(int n, double *A, double *y)
{
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(A[(size_t)r * n + c]) > fabs(A[(size_t)piv * n + c])) piv = r;
        if (fabs(A[(size_t)piv * n + c]) < 1e-300) return -1;
        for (int k = 0; k < n; k++) {
            double q = A[(size_t)c * n + k];
            A[(size_t)c * n + k] = A[(size_t)piv * n + k], A[(size_t)piv * n + k] = q;
        }
        double q = y[c];
        y[c] = y[piv], y[piv] = q;
        for (int r = c + 1; r < n; r++) {
            double f = A[(size_t)r * n + c] / A[(size_t)c * n + c];
            for (int k = c; k < n; k++) A[(size_t)r * n + k] -= f * A[(size_t)c * n + k];
            y[r] -= f * y[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        double q = y[c];
        for (int k = c + 1; k < n; k++) q -= A[(size_t)c * n + k] * y[k];
        y[c] = q / A[(size_t)c * n + c];
    }
    return 0;
}

static inline void raref_close(raref_t *r)
{
    free(r->L), free(r->LtL);
    memset(r, 0, sizeof *r);
}

/* Checks the layers <pre>/<l>/{weight,bias} of a network from nin inputs to
 * nout outputs (nout <= 0: any) and widens r->width; *got: its output width. */
static inline int raref__net(raref_t *r, const char *pre, int layers, int nin, int nout, int *got,
                             df_error_t *err)
{
    int n = nin;
    for (int l = 0; l < layers; l++) {
        char nm[96];
        const df_tensor_t *t;
        int64_t sw[2] = {-1, n}, sb[1];
        snprintf(nm, sizeof nm, "%s/%d/weight", pre, l);
        int rc = df_st_require(r->st, nm, DF_DT_F32, 2, sw, 0, &t, err);
        if (rc) return rc;
        sb[0] = t->shape[0], n = (int)t->shape[0];
        snprintf(nm, sizeof nm, "%s/%d/bias", pre, l);
        if ((rc = df_st_require(r->st, nm, DF_DT_F32, 1, sb, 0, &t, err))) return rc;
        if (n > r->width) r->width = n;
    }
    if (nout > 0 && n != nout)
        return df_error_set(err, DF_EFORMAT, "raref: %s gives %d outputs, want %d", pre, n, nout);
    if (got) *got = n;
    return DF_OK;
}

static inline int raref__meta_int(const df_st_t *st, const char *key, int *out, df_error_t *err)
{
    const char *s = df_st_meta(st, key);
    *out = s ? atoi(s) : 0;
    if (*out >= 1 && *out <= 64) return DF_OK;
    return df_error_set(err, DF_EFORMAT, "raref: metadata '%s' is '%s'", key, s ? s : "");
}

/* Reads and checks the model file (st stays open while r is used). */
static inline int raref_open(const df_st_t *st, raref_t *r, df_error_t *err)
{
    memset(r, 0, sizeof *r);
    r->st = st;
    const char *var = df_st_meta(st, "variant"), *om = df_st_meta(st, "omega");
    if (!var || strcmp(var, "ours"))
        return df_error_set(err, DF_EINVAL, "raref: variant '%s', only 'ours' is modelled", var ? var : "");
    r->omega = om ? strtod(om, NULL) : 0;
    const char *sk = df_st_meta(st, "skinning");
    r->dqs = sk && !strcmp(sk, "dqs");
    if (!(r->omega > 0)) return df_error_set(err, DF_EFORMAT, "raref: metadata omega '%s'", om ? om : "");
    const df_tensor_t *t;
    int64_t a3[2] = {-1, 3}, a12[2] = {-1, 12}, any[1] = {-1}, s2[2], s1[1];
    int rc;
#define RAREF_REQ(name, dt, nd, shape, opt) \
    if ((rc = df_st_require(st, name, dt, nd, shape, opt, &t, err))) return rc
    RAREF_REQ("rest_positions", DF_DT_F32, 2, a3, 0);
    r->V = (int)t->shape[0], r->rest = t->data;
    RAREF_REQ("inverse_bind_matrices", DF_DT_F32, 2, a12, 0);
    r->J = (int)t->shape[0], r->invbind = t->data;
    s2[0] = r->V, s2[1] = -1;
    RAREF_REQ("skin_joints", DF_DT_I32, 2, s2, 0);
    r->K = (int)t->shape[1], r->skin_j = t->data;
    s2[1] = r->K;
    RAREF_REQ("skin_weights", DF_DT_F32, 2, s2, 0);
    r->skin_w = t->data;
    RAREF_REQ("control_ranges", DF_DT_F32, 2, a3, 1);
    r->C = t ? (int)t->shape[0] : 0;
    r->F = 12 * r->J + r->C;
    s1[0] = r->F;
    RAREF_REQ("feature_mean", DF_DT_F32, 1, s1, 0);
    r->fmean = t->data;
    RAREF_REQ("feature_scale", DF_DT_F32, 1, s1, 0);
    r->fscale = t->data;
    s1[0] = r->J;
    RAREF_REQ("joint_parents", DF_DT_I32, 1, s1, 1);
    r->parents = t ? t->data : NULL;
    s2[0] = 3 * r->V, s2[1] = -1;
    RAREF_REQ("pca_basis", DF_DT_F32, 2, s2, 0);
    r->P = (int)t->shape[1], r->basis = t->data;
    s1[0] = 3 * r->V;
    RAREF_REQ("pca_mean", DF_DT_F32, 1, s1, 0);
    r->bmean = t->data;
    s2[0] = r->P, s2[1] = r->F;
    RAREF_REQ("net_linear/weight", DF_DT_F32, 2, s2, 1);
    r->lin = t ? t->data : NULL;
    s1[0] = r->P;
    RAREF_REQ("net_linear/bias", DF_DT_F32, 1, s1, r->lin == NULL);
    r->lin_b = t ? t->data : NULL;
    RAREF_REQ("anchor_vertices", DF_DT_I32, 1, any, 0);
    r->A = (int)t->shape[0], r->anchors = t->data;
    s1[0] = r->A + 1;
    RAREF_REQ("anchor_input_offsets", DF_DT_I32, 1, s1, 0);
    r->anc_off = t->data;
    RAREF_REQ("anchor_input_index", DF_DT_I32, 1, any, 0);
    r->anc_idx = t->data;
    int n_idx = (int)t->shape[0];
    s2[0] = 3 * r->A, s2[1] = r->F;
    RAREF_REQ("anchor_linear/weight", DF_DT_F32, 2, s2, 1);
    r->alin = t ? t->data : NULL;
    s1[0] = 3 * r->A;
    RAREF_REQ("anchor_linear/bias", DF_DT_F32, 1, s1, r->alin == NULL);
    r->alin_b = t ? t->data : NULL;
    const df_tensor_t *tr;
    if ((rc = df_st_require(st, "triangles", DF_DT_I32, 2, a3, 0, &tr, err))) return rc;
#undef RAREF_REQ
    for (int64_t i = 0; i < (int64_t)r->V * r->K; i++)
        if (r->skin_j[i] < 0 || r->skin_j[i] >= r->J)
            return df_error_set(err, DF_EFORMAT, "raref: skin joint out of range");
    for (int j = 0; r->parents && j < r->J; j++)
        if (r->parents[j] >= r->J) return df_error_set(err, DF_EFORMAT, "raref: joint parent out of range");
    if (r->anc_off[0] != 0 || r->anc_off[r->A] != n_idx) return df_error_set(err, DF_EFORMAT, "raref: anchor offsets");
    for (int a = 0; a < r->A; a++)
        if (r->anchors[a] < 0 || r->anchors[a] >= r->V || r->anc_off[a + 1] <= r->anc_off[a])
            return df_error_set(err, DF_EFORMAT, "raref: anchor %d", a);
    for (int i = 0; i < n_idx; i++)
        if (r->anc_idx[i] < 0 || r->anc_idx[i] >= r->F)
            return df_error_set(err, DF_EFORMAT, "raref: anchor input index out of range");
    r->width = r->F;
    if ((rc = raref__meta_int(st, "net_layers", &r->net_layers, err)) ||
        (rc = raref__meta_int(st, "anchor_layers", &r->anc_layers, err)) ||
        (rc = raref__net(r, "net", r->net_layers, r->F, r->P, NULL, err)))
        return rc;
    for (int a = 0; a < r->A; a++) {
        char pre[32];
        snprintf(pre, sizeof pre, "anchor/%d", a);
        if ((rc = raref__net(r, pre, r->anc_layers, r->anc_off[a + 1] - r->anc_off[a], 3, NULL, err))) return rc;
    }
    int V = r->V;
    const float *p = r->rest;
    for (int a = 0; a < V; a++)
        for (int b = 0; b < a; b++)
            if (p[a * 3] == p[b * 3] && p[a * 3 + 1] == p[b * 3 + 1] && p[a * 3 + 2] == p[b * 3 + 2])
                return df_error_set(err, DF_EINVAL, "raref: vertices %d and %d share a rest position (no welding)",
                                    b, a);
    r->L = calloc((size_t)V * V, sizeof(double));
    r->LtL = malloc(sizeof(double) * V * V);
    if (!r->L || !r->LtL) {
        raref_close(r);
        return df_error_set(err, DF_ENOMEM, "raref: out of memory");
    }
    const int32_t *tris = tr->data;
    for (int64_t f = 0; f < tr->shape[0]; f++)
        for (int e = 0; e < 3; e++) {
            int32_t i = tris[f * 3 + e], j = tris[f * 3 + (e + 1) % 3];
            if (i < 0 || i >= V || j < 0 || j >= V) {
                raref_close(r);
                return df_error_set(err, DF_EFORMAT, "raref: triangle %lld out of range", (long long)f);
            }
            if (i != j) r->L[(size_t)i * V + j] = r->L[(size_t)j * V + i] = -1;
        }
    for (int i = 0; i < V; i++) {
        double deg = 0;
        for (int j = 0; j < V; j++) deg -= j != i ? r->L[(size_t)i * V + j] : 0;
        r->L[(size_t)i * V + i] = deg;
    }
    for (int i = 0; i < V; i++)
        for (int j = 0; j < V; j++) {
            double m = 0;
            for (int k = 0; k < V; k++) m += r->L[(size_t)k * V + i] * r->L[(size_t)k * V + j];
            r->LtL[(size_t)i * V + j] = m;
        }
    return DF_OK;
}

/* a [width] holds the input (n values) and receives the output; tmp [width] */
static inline int raref__forward(const df_st_t *st, const char *pre, int layers, double *a, int n, double *tmp)
{
    for (int l = 0; l < layers; l++) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s/%d/weight", pre, l);
        const df_tensor_t *w = df_st_find(st, nm);
        snprintf(nm, sizeof nm, "%s/%d/bias", pre, l);
        const float *W = w->data, *b = df_st_find(st, nm)->data;
        int no = (int)w->shape[0];
        for (int o = 0; o < no; o++) {
            double s = b[o];
            for (int i = 0; i < n; i++) s += (double)W[(size_t)o * n + i] * a[i];
            tmp[o] = (l < layers - 1 && s < 0) ? 0 : s;
        }
        memcpy(a, tmp, sizeof(double) * no);
        n = no;
    }
    return n;
}

/* Positions out [V,3] for one pose: world [J,12] (3x4 row-major), controls
 * [C]; omega <= 0: the file's. */
static inline int raref_eval(const raref_t *r, const float *world, const float *ctl, double omega, double *out,
                             df_error_t *err)
{
    int V = r->V, J = r->J, F = r->F, P = r->P, A = r->A, W = r->width;
    double w2 = omega > 0 ? omega * omega : r->omega * r->omega;
    double *f = malloc(sizeof(double) * F), *x = malloc(sizeof(double) * F), *h = malloc(sizeof(double) * 2 * W);
    double *delta = malloc(sizeof(double) * V * 3), *ap = malloc(sizeof(double) * A * 3);
    double *vnl = malloc(sizeof(double) * V * 3), *M = malloc(sizeof(double) * V * V), *y = malloc(sizeof(double) * V);
    int rc = f && x && h && delta && ap && vnl && M && y ? DF_OK : df_error_set(err, DF_ENOMEM, "raref: out of memory");
    /* features: each joint in its parent's frame */
    for (int j = 0; !rc && j < J; j++) {
        const float *Mj = world + j * 12;
        int p = r->parents ? r->parents[j] : -1;
        if (p < 0) {
            for (int e = 0; e < 12; e++) f[j * 12 + e] = Mj[e];
            continue;
        }
        const float *Q = world + p * 12;
        double R[9], inv[9];
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) R[a * 3 + b] = Q[a * 4 + b];
        inv[0] = R[4] * R[8] - R[5] * R[7], inv[1] = R[2] * R[7] - R[1] * R[8], inv[2] = R[1] * R[5] - R[2] * R[4];
        inv[3] = R[5] * R[6] - R[3] * R[8], inv[4] = R[0] * R[8] - R[2] * R[6], inv[5] = R[2] * R[3] - R[0] * R[5];
        inv[6] = R[3] * R[7] - R[4] * R[6], inv[7] = R[1] * R[6] - R[0] * R[7], inv[8] = R[0] * R[4] - R[1] * R[3];
        double det = R[0] * inv[0] + R[1] * inv[3] + R[2] * inv[6];
        if (!(fabs(det) > 1e-12)) {
            rc = df_error_set(err, DF_EINVAL, "raref: joint %d's parent %d is singular", j, p);
            break;
        }
        for (int e = 0; e < 9; e++) inv[e] /= det;
        for (int a = 0; a < 3; a++) { /* [inv | -inv t] [Mj; 0 0 0 1] */
            for (int b = 0; b < 4; b++) {
                double s = b == 3 ? -(inv[a * 3] * Q[3] + inv[a * 3 + 1] * Q[7] + inv[a * 3 + 2] * Q[11]) : 0;
                for (int k = 0; k < 3; k++) s += inv[a * 3 + k] * Mj[k * 4 + b];
                f[j * 12 + a * 4 + b] = s;
            }
        }
    }
    for (int c = 0; !rc && c < r->C; c++) f[12 * J + c] = ctl[c];
    for (int i = 0; !rc && i < F; i++) x[i] = (f[i] - r->fmean[i]) * r->fscale[i];
    /* differential network -> PCA -> differential coordinates */
    if (!rc) {
        memcpy(h, x, sizeof(double) * F);
        raref__forward(r->st, "net", r->net_layers, h, F, h + W);
        for (int q = 0; r->lin && q < P; q++) {
            double s = r->lin_b[q];
            for (int i = 0; i < F; i++) s += (double)r->lin[(size_t)q * F + i] * x[i];
            h[q] += s;
        }
        for (int k = 0; k < 3 * V; k++) {
            double s = r->bmean[k];
            for (int q = 0; q < P; q++) s += (double)r->basis[(size_t)k * P + q] * h[q];
            delta[k] = s;
        }
    }
    /* anchor mini-networks */
    for (int a = 0; !rc && a < A; a++) {
        int n = r->anc_off[a + 1] - r->anc_off[a];
        for (int i = 0; i < n; i++) h[i] = x[r->anc_idx[r->anc_off[a] + i]];
        char pre[32];
        snprintf(pre, sizeof pre, "anchor/%d", a);
        raref__forward(r->st, pre, r->anc_layers, h, n, h + W);
        for (int c = 0; c < 3; c++) ap[a * 3 + c] = h[c];
        for (int c = 0; r->alin && c < 3; c++) {
            double s = r->alin_b[a * 3 + c];
            for (int i = 0; i < F; i++) s += (double)r->alin[(size_t)(a * 3 + c) * F + i] * x[i];
            ap[a * 3 + c] += s;
        }
    }
    /* (L^T L + w^2 S^T S) v = L^T delta + w^2 S^T a, per coordinate */
    for (int c = 0; !rc && c < 3; c++) {
        memcpy(M, r->LtL, sizeof(double) * V * V);
        for (int i = 0; i < V; i++) {
            double q = 0;
            for (int k = 0; k < V; k++) q += r->L[(size_t)k * V + i] * delta[k * 3 + c];
            y[i] = q;
        }
        for (int a = 0; a < A; a++) {
            M[(size_t)r->anchors[a] * V + r->anchors[a]] += w2;
            y[r->anchors[a]] += w2 * ap[a * 3 + c];
        }
        if (raref_dense_solve(V, M, y)) rc = df_error_set(err, DF_EINVAL, "raref: the normal equations are singular");
        for (int i = 0; !rc && i < V; i++) vnl[i * 3 + c] = y[i];
    }
    /* DQS linear part (rigid transforms only) */
    for (int v = 0; !rc && r->dqs && v < V; v++) {
        double q[3], bl[8] = {0}, q0[4] = {0};
        for (int c = 0; c < 3; c++) q[c] = r->rest[v * 3 + c] + vnl[v * 3 + c];
        for (int k = 0; k < r->K; k++) {
            int j = r->skin_j[v * r->K + k];
            const float *I = r->invbind + j * 12, *Mw = world + j * 12;
            double S[12], qk[4], tr;
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 4; b++)
                    S[a * 4 + b] = Mw[a * 4] * I[b] + Mw[a * 4 + 1] * I[4 + b] + Mw[a * 4 + 2] * I[8 + b] + (b == 3 ? Mw[a * 4 + 3] : 0);
            for (int a = 0; a < 3; a++) /* rigid? */
                for (int b = 0; b < 3; b++) {
                    double d = S[a] * S[b] + S[4 + a] * S[4 + b] + S[8 + a] * S[8 + b] - (a == b);
                    if (fabs(d) > 1e-4) rc = df_error_set(err, DF_EINVAL, "raref: joint %d is not rigid (dqs)", j);
                }
            tr = S[0] + S[5] + S[10];
            if (tr > 0) { /* Shepperd: (x, y, z, w) */
                double s = 2 * sqrt(tr + 1);
                qk[3] = s / 4, qk[0] = (S[9] - S[6]) / s, qk[1] = (S[2] - S[8]) / s, qk[2] = (S[4] - S[1]) / s;
            } else if (S[0] > S[5] && S[0] > S[10]) {
                double s = 2 * sqrt(1 + S[0] - S[5] - S[10]);
                qk[3] = (S[9] - S[6]) / s, qk[0] = s / 4, qk[1] = (S[1] + S[4]) / s, qk[2] = (S[2] + S[8]) / s;
            } else if (S[5] > S[10]) {
                double s = 2 * sqrt(1 + S[5] - S[0] - S[10]);
                qk[3] = (S[2] - S[8]) / s, qk[0] = (S[1] + S[4]) / s, qk[1] = s / 4, qk[2] = (S[6] + S[9]) / s;
            } else {
                double s = 2 * sqrt(1 + S[10] - S[0] - S[5]);
                qk[3] = (S[4] - S[1]) / s, qk[0] = (S[2] + S[8]) / s, qk[1] = (S[6] + S[9]) / s, qk[2] = s / 4;
            }
            if (k == 0) memcpy(q0, qk, sizeof q0);
            double wt = r->skin_w[v * r->K + k];
            if (q0[0] * qk[0] + q0[1] * qk[1] + q0[2] * qk[2] + q0[3] * qk[3] < 0) wt = -wt;
            double t[3] = {S[3], S[7], S[11]}, de[4]; /* (t, 0) q / 2 */
            de[0] = 0.5 * (t[0] * qk[3] + t[1] * qk[2] - t[2] * qk[1]);
            de[1] = 0.5 * (t[1] * qk[3] + t[2] * qk[0] - t[0] * qk[2]);
            de[2] = 0.5 * (t[2] * qk[3] + t[0] * qk[1] - t[1] * qk[0]);
            de[3] = -0.5 * (t[0] * qk[0] + t[1] * qk[1] + t[2] * qk[2]);
            for (int e = 0; e < 4; e++) bl[e] += wt * qk[e], bl[4 + e] += wt * de[e];
        }
        double n = sqrt(bl[0] * bl[0] + bl[1] * bl[1] + bl[2] * bl[2] + bl[3] * bl[3]);
        for (int e = 0; e < 8; e++) bl[e] /= n;
        double x = bl[0], y = bl[1], z = bl[2], w = bl[3];
        double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                       2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                       2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)};
        /* t = 2 d conj(r) */
        double dx = bl[4], dy = bl[5], dz = bl[6], dw = bl[7];
        double t[3] = {2 * (w * dx - dw * x + y * dz - z * dy), 2 * (w * dy - dw * y + z * dx - x * dz),
                       2 * (w * dz - dw * z + x * dy - y * dx)};
        for (int c = 0; c < 3; c++) out[v * 3 + c] = R[c * 3] * q[0] + R[c * 3 + 1] * q[1] + R[c * 3 + 2] * q[2] + t[c];
    }
    /* linear part: sum_k w_ik world_k invbind_k (rest_i + v_nl,i) */
    for (int v = 0; !rc && !r->dqs && v < V; v++) {
        double p[3] = {0, 0, 0}, q[3];
        for (int c = 0; c < 3; c++) q[c] = r->rest[v * 3 + c] + vnl[v * 3 + c];
        for (int k = 0; k < r->K; k++) {
            int j = r->skin_j[v * r->K + k];
            double wt = r->skin_w[v * r->K + k], b[3];
            const float *I = r->invbind + j * 12, *Mw = world + j * 12;
            for (int e = 0; e < 3; e++)
                b[e] = I[e * 4] * q[0] + I[e * 4 + 1] * q[1] + I[e * 4 + 2] * q[2] + I[e * 4 + 3];
            for (int e = 0; e < 3; e++)
                p[e] += wt * (Mw[e * 4] * b[0] + Mw[e * 4 + 1] * b[1] + Mw[e * 4 + 2] * b[2] + Mw[e * 4 + 3]);
        }
        for (int c = 0; c < 3; c++) out[v * 3 + c] = p[c];
    }
    free(f), free(x), free(h), free(delta), free(ap), free(vnl), free(M), free(y);
    return rc;
}

#endif

/* test_laplacian.c — uniform Laplacian and anchored reconstruction.
 *
 * References: a known mesh is reconstructed exactly from its own
 * differential coordinates and anchors; the sparse CHOLMOD solve is checked
 * against a dense normal-equation solve (Gaussian elimination written here)
 * for inconsistent right-hand sides; the dense folded reconstruction matrix
 * agrees with the sparse solve to 1e-5.
 */
#include "dftest.h"
#include "df.h"
#include "math/laplacian.h"
#include "math/nn.h"

#include <stdlib.h>
#include <string.h>

/* grid of gx x gy vertices, optionally two separate grids */
static void grid(int gx, int gy, int pieces, int64_t *nv, int64_t *nt,
                 float **pos, uint32_t **tris)
{
    *nv = (int64_t)gx * gy * pieces;
    *nt = (int64_t)(gx - 1) * (gy - 1) * 2 * pieces;
    *pos = malloc(sizeof(float) * 3 * *nv);
    *tris = malloc(sizeof(uint32_t) * 3 * *nt);
    df_rng_t r = {5};
    int64_t t = 0;
    for (int p = 0; p < pieces; p++) {
        uint32_t base = (uint32_t)(p * gx * gy);
        for (int y = 0; y < gy; y++)
            for (int x = 0; x < gx; x++) {
                int64_t v = base + y * gx + x;
                (*pos)[v * 3] = x + 0.1f * (float)df_rng_normal(&r) + 100 * p;
                (*pos)[v * 3 + 1] = y + 0.1f * (float)df_rng_normal(&r);
                (*pos)[v * 3 + 2] = 0.3f * sinf(x * 0.7f) * cosf(y * 0.5f);
            }
        for (int y = 0; y + 1 < gy; y++)
            for (int x = 0; x + 1 < gx; x++) {
                uint32_t a = base + y * gx + x, b = a + 1, c = a + gx, d = c + 1;
                uint32_t *T = *tris + t * 3;
                T[0] = a, T[1] = b, T[2] = d, T[3] = a, T[4] = d, T[5] = c;
                t += 2;
            }
    }
}

static void test_laplacian_rows(void)
{
    int64_t nv, nt;
    float *p;
    uint32_t *t;
    grid(5, 4, 1, &nv, &nt, &p, &t);
    int32_t anc[1] = {0};
    df_lap_t *l = NULL;
    df_error_t err = {0};
    DF_CHECK(df_lap_new(nv, nt, t, 1, anc, 1.0, &l, &err) == 0);
    if (!l) return;
    /* interior vertex of the diagonal-split grid has 6 neighbours, corner 2 or 3 */
    for (int64_t v = 0; v < nv; v++) {
        double s = 0;
        for (int32_t k = l->rp[v]; k < l->rp[v + 1]; k++) s += l->val[k];
        DF_CHECK_NEAR(s, 0, 0);
    }
    int64_t inner = 1 * 5 + 1;
    DF_CHECK_NEAR(l->val[l->rp[inner]], 6, 0);
    DF_CHECK_NEAR(l->val[l->rp[0]], 3, 0);
    df_lap_free(&l);
    free(p), free(t);
}

static void test_exact_reconstruction(void)
{
    int64_t nv, nt;
    float *p;
    uint32_t *t;
    grid(12, 9, 2, &nv, &nt, &p, &t);
    int32_t anc[4] = {3, 50, 108 + 7, 108 + 90};
    df_lap_t *l = NULL;
    df_error_t err = {0};
    int rc = df_lap_new(nv, nt, t, 4, anc, 2.0, &l, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (!l) return;
    float *delta = malloc(sizeof(float) * nv * 3), *out = malloc(sizeof(float) * nv * 3);
    float ap[12];
    double *work = malloc(sizeof(double) * nv * 6);
    df_lap_apply(l, 3, p, delta);
    for (int a = 0; a < 4; a++) memcpy(ap + a * 3, p + anc[a] * 3, 12);
    df_lap_reconstruct(l, 3, delta, ap, out, work);
    double mx = 0, scale = 0;
    for (int64_t i = 0; i < nv * 3; i++) {
        mx = fmax(mx, fabs(out[i] - p[i]));
        scale = fmax(scale, fabs(p[i]));
    }
    /* float32 differential coordinates: relative 1e-5 of the coordinates */
    DF_CHECK_MSG(mx < 1e-5 * scale, "exact reconstruction error %g (scale %g)", mx, scale);
    free(delta), free(out), free(work);
    df_lap_free(&l);
    free(p), free(t);
}

static void test_piece_without_anchor_refused(void)
{
    int64_t nv, nt;
    float *p;
    uint32_t *t;
    grid(4, 4, 2, &nv, &nt, &p, &t);
    int32_t anc[2] = {0, 5};
    df_lap_t *l = NULL;
    df_error_t err = {0};
    int rc = df_lap_new(nv, nt, t, 2, anc, 1.0, &l, &err);
    DF_CHECK(rc == DF_EINVAL && !l);
    DF_CHECK(strstr(err.msg, "no anchor") != NULL);
    int32_t dup[2] = {0, 0};
    DF_CHECK(df_lap_new(nv, nt, t, 2, dup, 1.0, &l, &err) == DF_EINVAL);
    free(p), free(t);
}

/* Dense reference: solve (Lt^T Lt) x = Lt^T rhs by Gaussian elimination. */
static void test_sparse_matches_dense(void)
{
    int64_t nv, nt;
    float *p;
    uint32_t *t;
    grid(7, 6, 1, &nv, &nt, &p, &t);
    int32_t anc[3] = {0, 20, 41};
    double w = 1.5;
    df_lap_t *l = NULL;
    df_error_t err = {0};
    DF_CHECK(df_lap_new(nv, nt, t, 3, anc, w, &l, &err) == 0);
    if (!l) return;
    int n = (int)nv, rows = n + 3;
    double *Lt = calloc((size_t)rows * n, sizeof(double));
    /* dense L_s from the triangle edges, built independently */
    for (int64_t k = 0; k < nt; k++)
        for (int e = 0; e < 3; e++) {
            int a = t[k * 3 + e], b = t[k * 3 + (e + 1) % 3];
            Lt[a * n + b] = -1, Lt[b * n + a] = -1;
        }
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) if (j != i) s -= Lt[i * n + j];
        Lt[i * n + i] = s;
    }
    for (int a = 0; a < 3; a++) Lt[(n + a) * n + anc[a]] = w;
    df_rng_t r = {9};
    float *delta = malloc(sizeof(float) * n * 3), ap[9];
    for (int i = 0; i < n * 3; i++) delta[i] = (float)df_rng_normal(&r);
    for (int i = 0; i < 9; i++) ap[i] = (float)df_rng_normal(&r);
    float *out = malloc(sizeof(float) * n * 3);
    double *work = malloc(sizeof(double) * n * 6);
    df_lap_reconstruct(l, 3, delta, ap, out, work);
    /* normal equations, augmented [N | rhs(3)] */
    double *M = calloc((size_t)n * (n + 3), sizeof(double));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < rows; k++) s += Lt[k * n + i] * Lt[k * n + j];
            M[i * (n + 3) + j] = s;
        }
        for (int c = 0; c < 3; c++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += Lt[k * n + i] * delta[k * 3 + c];
            for (int a = 0; a < 3; a++) s += Lt[(n + a) * n + i] * w * ap[a * 3 + c];
            M[i * (n + 3) + n + c] = s;
        }
    }
    for (int i = 0; i < n; i++) { /* no pivoting needed: SPD */
        for (int k = i + 1; k < n; k++) {
            double f = M[k * (n + 3) + i] / M[i * (n + 3) + i];
            for (int j = i; j < n + 3; j++) M[k * (n + 3) + j] -= f * M[i * (n + 3) + j];
        }
    }
    double mx = 0, scale = 0;
    double *x = calloc((size_t)n * 3, sizeof(double));
    for (int c = 0; c < 3; c++)
        for (int i = n - 1; i >= 0; i--) {
            double s = M[i * (n + 3) + n + c];
            for (int j = i + 1; j < n; j++) s -= M[i * (n + 3) + j] * x[j * 3 + c];
            x[i * 3 + c] = s / M[i * (n + 3) + i];
        }
    for (int i = 0; i < n * 3; i++) {
        mx = fmax(mx, fabs(x[i] - out[i]));
        scale = fmax(scale, fabs(x[i]));
    }
    DF_CHECK_MSG(mx <= 1e-5 * fmax(1, scale), "sparse vs dense %g (scale %g)", mx, scale);
    free(Lt), free(M), free(x), free(delta), free(out), free(work);
    df_lap_free(&l);
    free(p), free(t);
}

static void test_fold_matches_sparse(void)
{
    int64_t nv, nt;
    float *p;
    uint32_t *t;
    grid(15, 11, 1, &nv, &nt, &p, &t);
    int32_t anc[4] = {0, 14, 80, 164};
    df_lap_t *l = NULL;
    df_error_t err = {0};
    DF_CHECK(df_lap_new(nv, nt, t, 4, anc, 1.0, &l, &err) == 0);
    if (!l) return;
    int m = 3 * 6; /* basis of 6 vectors over [V,3] */
    df_rng_t r = {11};
    float *U = malloc(sizeof(float) * nv * m), *G = malloc(sizeof(float) * nv * m);
    float *H = malloc(sizeof(float) * nv * 4);
    for (int64_t i = 0; i < nv * m; i++) U[i] = (float)df_rng_normal(&r) * 0.1f;
    DF_CHECK(df_lap_fold(l, m, U, G, H, &err) == 0);
    float coef[6], ap[12];
    for (int i = 0; i < 6; i++) coef[i] = (float)df_rng_normal(&r);
    for (int i = 0; i < 12; i++) ap[i] = (float)df_rng_normal(&r);
    /* delta[v,c] = sum_k U[v, c*6+k] coef[k] */
    float *delta = malloc(sizeof(float) * nv * 3), *sp = malloc(sizeof(float) * nv * 3);
    double *work = malloc(sizeof(double) * nv * 6);
    for (int64_t v = 0; v < nv; v++)
        for (int c = 0; c < 3; c++) {
            double s = 0;
            for (int k = 0; k < 6; k++) s += U[v * m + c * 6 + k] * coef[k];
            delta[v * 3 + c] = (float)s;
        }
    df_lap_reconstruct(l, 3, delta, ap, sp, work);
    double mx = 0;
    for (int64_t v = 0; v < nv; v++)
        for (int c = 0; c < 3; c++) {
            double s = 0;
            for (int k = 0; k < 6; k++) s += G[v * m + c * 6 + k] * coef[k];
            for (int a = 0; a < 4; a++) s += H[v * 4 + a] * ap[a * 3 + c];
            mx = fmax(mx, fabs(s - sp[v * 3 + c]));
        }
    DF_CHECK_MSG(mx < 1e-5, "dense fold vs sparse %g", mx);
    free(U), free(G), free(H), free(delta), free(sp), free(work);
    df_lap_free(&l);
    free(p), free(t);
}

int main(void)
{
    DF_RUN(test_laplacian_rows);
    DF_RUN(test_exact_reconstruction);
    DF_RUN(test_piece_without_anchor_refused);
    DF_RUN(test_sparse_matches_dense);
    DF_RUN(test_fold_matches_sparse);
    return dftest_exit();
}

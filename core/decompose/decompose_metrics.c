/* decompose_metrics.c — error measures of an approximated mesh sequence
 * (paper §4, formulas in docs/decompose.md).
 *
 * A is the original sequence (3N x P), A' the approximation, A_avg the
 * per-vertex temporal mean repeated in every frame, D the rest bbox
 * diagonal:
 *   DisPer      = 100 ||A - A'||_F / ||A - A_avg||_F
 *   ERMS        = ||A - A'||_F / sqrt(3NP)            (also as % of D)
 *   MaxAvgDist  = (1/P) Σ_p max_i |v_i^p - v'_i^p|    (also as % of D)
 *   NormDistort = mean over frames and faces of |n_f^p x n'_f^p| (unit face
 *                 normals; faces degenerate in either sequence are skipped)
 * Everything is accumulated in double.
 */
#include "decompose/decompose.h"

#include <math.h>
#include <stdlib.h>

static int face_normal(const float *x, const uint32_t *t, double n[3])
{
    const float *a = x + 3 * t[0], *b = x + 3 * t[1], *c = x + 3 * t[2];
    double u[3] = {(double)b[0] - a[0], (double)b[1] - a[1], (double)b[2] - a[2]};
    double v[3] = {(double)c[0] - a[0], (double)c[1] - a[1], (double)c[2] - a[2]};
    n[0] = u[1] * v[2] - u[2] * v[1];
    n[1] = u[2] * v[0] - u[0] * v[2];
    n[2] = u[0] * v[1] - u[1] * v[0];
    double l = sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    if (!(l > 0)) return 0;
    n[0] /= l; n[1] /= l; n[2] /= l;
    return 1;
}

int df_decompose_metrics(int64_t F, int64_t N, const float *orig, const float *approx,
                         int64_t T, const uint32_t *tris, double diag,
                         df_decompose_metrics_t *out, df_error_t *err)
{
    if (F < 1 || N < 1 || !orig || !approx || !out || T < 0 || (T > 0 && !tris))
        return df_error_set(err, DF_EINVAL, "decompose metrics: empty or missing sequence");
    for (int64_t t = 0; t < 3 * T; t++)
        if (tris[t] >= (uint64_t)N)
            return df_error_set(err, DF_EINVAL,
                                "decompose metrics: triangle %lld references vertex %u of %lld",
                                (long long)(t / 3), tris[t], (long long)N);
    if (!(diag > 0)) {
        double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
        for (int64_t i = 0; i < N; i++)
            for (int r = 0; r < 3; r++) {
                lo[r] = fmin(lo[r], orig[3 * i + r]);
                hi[r] = fmax(hi[r], orig[3 * i + r]);
            }
        diag = sqrt((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                    (hi[2] - lo[2]) * (hi[2] - lo[2]));
    }
    double *avg = calloc((size_t)N * 3, sizeof(double));
    if (!avg) return df_error_set(err, DF_ENOMEM, "decompose metrics: out of memory");
    for (int64_t p = 0; p < F; p++)
        for (int64_t q = 0; q < 3 * N; q++) avg[q] += orig[p * 3 * N + q];
    for (int64_t q = 0; q < 3 * N; q++) avg[q] /= (double)F;
    double diff2 = 0, dev2 = 0, maxsum = 0;
    for (int64_t p = 0; p < F; p++) {
        double fmax_d = 0;
        for (int64_t i = 0; i < N; i++) {
            double e2 = 0;
            for (int r = 0; r < 3; r++) {
                int64_t q = p * 3 * N + 3 * i + r;
                double e = (double)orig[q] - approx[q], a = (double)orig[q] - avg[3 * i + r];
                e2 += e * e;
                dev2 += a * a;
            }
            diff2 += e2;
            if (sqrt(e2) > fmax_d) fmax_d = sqrt(e2);
        }
        maxsum += fmax_d;
    }
    free(avg);
    double nsum = 0;
    int64_t ncount = 0;
    for (int64_t p = 0; p < F; p++)
        for (int64_t f = 0; f < T; f++) {
            double a[3], b[3];
            if (!face_normal(orig + p * 3 * N, tris + 3 * f, a) ||
                !face_normal(approx + p * 3 * N, tris + 3 * f, b))
                continue;
            double c[3] = {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                           a[0] * b[1] - a[1] * b[0]};
            nsum += sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
            ncount++;
        }
    out->diag = diag;
    out->disper = dev2 > 0 ? 100 * sqrt(diff2 / dev2) : (diff2 > 0 ? INFINITY : 0);
    out->erms = sqrt(diff2 / (3.0 * (double)N * (double)F));
    out->erms_pct = diag > 0 ? 100 * out->erms / diag : 0;
    out->max_avg_dist = maxsum / (double)F;
    out->max_avg_dist_pct = diag > 0 ? 100 * out->max_avg_dist / diag : 0;
    out->norm_distort = ncount ? nsum / (double)ncount : 0;
    return DF_OK;
}

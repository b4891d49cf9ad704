/* rt_adapt.c — adapting the marker basis to an actor (Choe & Ko 2001:
 * "adapt the generic model to the source"), the least-squares half of the
 * alternation `deform retarget build --adapt` runs.
 *
 * DESIGN
 * The marker solve explains an actor's markers with the source rig's
 * marker displacements A (n3 = 3K rows, one column per control). An actor
 * whose expressions move the markers otherwise (wider smile, other jaw
 * path) gets those differences read as other weights. Given F frames of
 * the actor, aligned into the source's rest frame (displacements D [F,n3]
 * from the rest markers), and their weights W [F,m] (solved with the
 * current basis, or known from a cued range of motion), the basis that
 * explains them best while staying near the source rig's A0, with the
 * frames' common offset c from the rest markers (an actor's rest markers
 * are known to the calibration's accuracy; an offset left out would be
 * absorbed into every column, in proportion to how little it is used), is
 *     [A c] = argmin sum_f |d_f - A w_f - c|^2 + mu |A - A0|^2 + mu |c|^2
 *           = ([D'W D'1] + mu [A0 0]) ([W 1]'[W 1] + mu I)^-1,
 * one (m+1) x (m+1) Cholesky factorisation (double) and n3 solves. A
 * control that no frame uses keeps A0's column. The caller alternates:
 * align the frames with the served model, refit.
 */
#include "retarget/retarget.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int df__rt_adapt_basis(const float *D, const float *W, int64_t F, int64_t n3, int64_t m0,
                       const float *A0, double mu, float *A, float *c, df_error_t *err)
{
    const int64_t m = m0 + 1; /* the controls and the offset */
    if (F < 1 || n3 < 1 || m0 < 1 || !(mu > 0) || !isfinite(mu))
        return df_error_set(err, DF_EINVAL, "adapting the marker basis: want frames, markers "
                                            "and controls, and a regularisation mu > 0");
    double *G = calloc((size_t)(m * m), sizeof(double));
    double *L = malloc((size_t)(m * m) * sizeof(double));
    double *R = calloc((size_t)(n3 * m), sizeof(double)); /* D'W + mu A0, row per marker coordinate */
    if (!G || !L || !R) {
        free(G), free(L), free(R);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    double *w = malloc((size_t)m * sizeof(double));
    if (!w) {
        free(G), free(L), free(R);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    for (int64_t f = 0; f < F; f++) {
        const float *d = D + f * n3;
        for (int64_t i = 0; i < m0; i++) w[i] = W[f * m0 + i];
        w[m0] = 1.0;
        for (int64_t i = 0; i < m; i++) {
            const double wi = w[i];
            if (wi == 0.0) continue;
            for (int64_t j = 0; j < m; j++) G[i * m + j] += wi * w[j];
        }
        for (int64_t k = 0; k < n3; k++) {
            const double dk = d[k];
            double *Rk = R + k * m;
            for (int64_t i = 0; i < m; i++) Rk[i] += dk * w[i];
        }
    }
    free(w);
    for (int64_t i = 0; i < m; i++) G[i * m + i] += mu;
    for (int64_t k = 0; k < n3; k++)
        for (int64_t i = 0; i < m0; i++) R[k * m + i] += mu * (double)A0[i * n3 + k];
    int rc = DF_OK;
    if (df__rt_cholesky(G, m, 0.0, L)) {
        rc = df_error_set(err, DF_ENUMERIC, "adapting the marker basis: W'W + mu I is not "
                                            "positive definite (non-finite weights?)");
    } else {
        for (int64_t k = 0; k < n3; k++) {
            double *Rk = R + k * m;
            df__rt_chol_solve(L, m, Rk);
            for (int64_t i = 0; i < m0; i++) A[i * n3 + k] = (float)Rk[i];
            c[k] = (float)Rk[m0];
        }
    }
    free(G), free(L), free(R);
    return rc;
}

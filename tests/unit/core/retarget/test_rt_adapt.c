/* test_rt_adapt.c — the marker basis adapted to an actor
 * (df__rt_adapt_basis) against references written here: exact frames of a
 * known basis and offset give them back; with a regularisation the answer
 * equals the normal equations solved by Gaussian elimination with partial
 * pivoting (another method than the function's Cholesky); a control no frame
 * uses keeps the source's column; bad arguments and non-finite weights are
 * refused.
 */
#include "retarget/retarget.h"
#include "dftest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

enum { M = 7, N3 = 12, F = 60 };

/* solve A x = B (n x n, nrhs columns, both row-major) by Gaussian
 * elimination with partial pivoting, in place */
static void gauss(double *A, double *B, int n, int nrhs)
{
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(A[r * n + c]) > fabs(A[p * n + c])) p = r;
        for (int e = 0; e < n; e++) {
            double t = A[c * n + e];
            A[c * n + e] = A[p * n + e], A[p * n + e] = t;
        }
        for (int e = 0; e < nrhs; e++) {
            double t = B[c * nrhs + e];
            B[c * nrhs + e] = B[p * nrhs + e], B[p * nrhs + e] = t;
        }
        for (int r = 0; r < n; r++) {
            if (r == c) continue;
            const double f = A[r * n + c] / A[c * n + c];
            for (int e = 0; e < n; e++) A[r * n + e] -= f * A[c * n + e];
            for (int e = 0; e < nrhs; e++) B[r * nrhs + e] -= f * B[c * nrhs + e];
        }
    }
    for (int r = 0; r < n; r++)
        for (int e = 0; e < nrhs; e++) B[r * nrhs + e] /= A[r * n + r];
}

/* W [F,M]: sparse random weights in [0,1]; control `unused` never moves */
static void frames(float *W, int unused)
{
    for (int f = 0; f < F; f++)
        for (int j = 0; j < M; j++)
            W[f * M + j] = (j != unused && urand() < 0.4) ? (float)urand() : 0.0f;
}

static void test_exact(void)
{
    static float W[F * M], D[F * N3], A0[M * N3], At[M * N3], A[M * N3], c[N3], ct[N3];
    frames(W, -1);
    for (int i = 0; i < M * N3; i++) {
        At[i] = (float)(2 * urand() - 1);
        A0[i] = At[i] + (float)(0.3 * (2 * urand() - 1)); /* the source's: off by 30 % */
    }
    for (int k = 0; k < N3; k++) ct[k] = (float)(0.5 * (2 * urand() - 1));
    for (int f = 0; f < F; f++)
        for (int k = 0; k < N3; k++) {
            double d = ct[k];
            for (int j = 0; j < M; j++) d += (double)W[f * M + j] * At[j * N3 + k];
            D[f * N3 + k] = (float)d;
        }
    df_error_t err = {0};
    DF_CHECK(df__rt_adapt_basis(D, W, F, N3, M, A0, 1e-9, A, c, &err) == DF_OK);
    double ea = 0, ec = 0;
    for (int i = 0; i < M * N3; i++) ea = fmax(ea, fabs(A[i] - At[i]));
    for (int k = 0; k < N3; k++) ec = fmax(ec, fabs(c[k] - ct[k]));
    DF_CHECK_MSG(ea < 1e-4 && ec < 1e-4, "basis off by %g, offset by %g", ea, ec);
}

static void test_regularised(void)
{
    static float W[F * M], D[F * N3], A0[M * N3], A[M * N3], c[N3];
    const int unused = 3;
    frames(W, unused);
    for (int i = 0; i < M * N3; i++) A0[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < F * N3; i++) D[i] = (float)(2 * urand() - 1); /* no basis fits */
    const double mu = 0.7;
    df_error_t err = {0};
    DF_CHECK(df__rt_adapt_basis(D, W, F, N3, M, A0, mu, A, c, &err) == DF_OK);
    /* reference: (X'X + mu I) Y = X'D + mu [A0; 0], X = [W 1], Y = [A; c'] */
    enum { n = M + 1 };
    static double G[n * n], B[n * N3];
    memset(G, 0, sizeof G);
    memset(B, 0, sizeof B);
    for (int f = 0; f < F; f++) {
        double x[n];
        for (int j = 0; j < M; j++) x[j] = W[f * M + j];
        x[M] = 1;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) G[i * n + j] += x[i] * x[j];
            for (int k = 0; k < N3; k++) B[i * N3 + k] += x[i] * D[f * N3 + k];
        }
    }
    for (int i = 0; i < n; i++) G[i * n + i] += mu;
    for (int j = 0; j < M; j++)
        for (int k = 0; k < N3; k++) B[j * N3 + k] += mu * A0[j * N3 + k];
    gauss(G, B, n, N3);
    double e = 0;
    for (int j = 0; j < M; j++)
        for (int k = 0; k < N3; k++) e = fmax(e, fabs(A[j * N3 + k] - B[j * N3 + k]));
    for (int k = 0; k < N3; k++) e = fmax(e, fabs(c[k] - B[M * N3 + k]));
    DF_CHECK_MSG(e < 1e-5, "against the normal equations: %g", e);
    /* the control no frame uses keeps the source's column exactly */
    for (int k = 0; k < N3; k++) DF_CHECK(A[unused * N3 + k] == A0[unused * N3 + k]);
}

static void test_refused(void)
{
    static float W[F * M], D[F * N3], A0[M * N3], A[M * N3], c[N3];
    frames(W, -1);
    df_error_t err = {0};
    DF_CHECK(df__rt_adapt_basis(D, W, F, N3, M, A0, 0.0, A, c, &err) == DF_EINVAL);
    DF_CHECK(df__rt_adapt_basis(D, W, 0, N3, M, A0, 1.0, A, c, &err) == DF_EINVAL);
    DF_CHECK(df__rt_adapt_basis(D, W, F, N3, M, A0, NAN, A, c, &err) == DF_EINVAL);
    W[5] = NAN;
    DF_CHECK(df__rt_adapt_basis(D, W, F, N3, M, A0, 1.0, A, c, &err) == DF_ENUMERIC);
    DF_CHECK(strstr(err.msg, "positive definite") != NULL);
}

int main(void)
{
    DF_RUN(test_exact);
    DF_RUN(test_regularised);
    DF_RUN(test_refused);
    return dftest_exit();
}

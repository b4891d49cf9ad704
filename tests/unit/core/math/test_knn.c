/* test_knn.c — the grid's k nearest neighbours against a scan of every point.
 *
 * Reference: for each query, every point's squared distance, the k smallest
 * (distance, index) pairs by selection — the order a scan in index order
 * keeping strictly nearer points produces, ties included. Point sets: a
 * volume, a sphere's surface (most cells empty), a flat square, clusters of
 * duplicated points (ties), a single point, and points 1e6 apart in scale;
 * queries inside, on and far outside the box, k from 1 to more than n.
 */
#include "dftest.h"
#include "math/knn.h"
#include "math/nn.h"

#include <math.h>
#include <stdlib.h>

/* the k smallest (d2, index) of every point: selection, no grid */
static int brute(const double *P, int64_t n, const double *q, int k, int64_t *idx, double *d2)
{
    char *used = calloc((size_t)n, 1);
    int got = 0;
    for (; got < k && got < n; got++) {
        int64_t bi = -1;
        double bd = INFINITY;
        for (int64_t i = 0; i < n; i++) {
            if (used[i]) continue;
            double e0 = P[3 * i] - q[0], e1 = P[3 * i + 1] - q[1], e2 = P[3 * i + 2] - q[2];
            double d = e0 * e0 + e1 * e1 + e2 * e2;
            if (bi < 0 || d < bd) bi = i, bd = d;
        }
        used[bi] = 1, idx[got] = bi, d2[got] = bd;
    }
    free(used);
    return got;
}

/* every query of Q against the reference; returns the mismatches */
static int compare(const double *P, int64_t n, const double *Q, int64_t nq, int k)
{
    df_knn_t *g = NULL;
    DF_CHECK(df_knn_build(P, n, &g) == 0);
    if (!g) return 1;
    int64_t a[64], b[64];
    double da[64], db[64];
    int bad = 0;
    for (int64_t j = 0; j < nq; j++) {
        int na = df_knn_query(g, Q + 3 * j, k, a, da), nb = brute(P, n, Q + 3 * j, k, b, db);
        int same = na == nb;
        for (int i = 0; same && i < na; i++) same = a[i] == b[i] && da[i] == db[i];
        if (!same && bad++ < 3)
            DF_CHECK_MSG(0, "query %lld k %d: %d found, first %lld (%g) vs %lld (%g)",
                         (long long)j, k, na, (long long)(na ? a[0] : -1), na ? da[0] : 0.0,
                         (long long)(nb ? b[0] : -1), nb ? db[0] : 0.0);
    }
    df_knn_free(&g);
    return bad;
}

static double *points(const char *kind, int64_t n, df_rng_t *r)
{
    double *P = malloc(sizeof(double) * (size_t)(3 * n));
    for (int64_t i = 0; i < n; i++) {
        double *p = P + 3 * i;
        if (kind[0] == 'v') { /* volume */
            for (int d = 0; d < 3; d++) p[d] = df_rng_u01(r) * (d + 1);
        } else if (kind[0] == 's') { /* sphere's surface, radius 5 */
            double x = df_rng_normal(r), y = df_rng_normal(r), z = df_rng_normal(r);
            double l = sqrt(x * x + y * y + z * z);
            p[0] = 5 * x / l, p[1] = 5 * y / l, p[2] = 5 * z / l;
        } else if (kind[0] == 'f') { /* flat square */
            p[0] = df_rng_u01(r), p[1] = df_rng_u01(r), p[2] = 0.25;
        } else if (kind[0] == 'd') { /* 10 sites, each point duplicated many times */
            int s = (int)(df_rng_u01(r) * 10);
            p[0] = s, p[1] = s % 3, p[2] = s % 2;
        } else { /* scales 1e-3 .. 1e3 */
            double sc = pow(10.0, -3 + 6 * df_rng_u01(r));
            for (int d = 0; d < 3; d++) p[d] = sc * (df_rng_u01(r) - 0.5);
        }
    }
    return P;
}

static void test_against_scan(void)
{
    df_rng_t r = {11};
    const char *kinds[] = {"volume", "sphere", "flat", "duplicates", "scales"};
    for (int kk = 0; kk < 5; kk++) {
        int64_t n = 3000;
        double *P = points(kinds[kk], n, &r);
        /* queries: 200 near the points, 50 far outside, 20 on points */
        int64_t nq = 270;
        double *Q = malloc(sizeof(double) * (size_t)(3 * nq));
        for (int64_t j = 0; j < nq; j++)
            for (int d = 0; d < 3; d++) {
                double x = P[3 * (j * 7 % n) + d];
                Q[3 * j + d] = j < 200 ? x + 0.3 * df_rng_normal(&r)
                             : j < 250 ? 50 * df_rng_normal(&r) : x;
            }
        int ks[] = {1, 3, 12, 40};
        for (int i = 0; i < 4; i++)
            DF_CHECK_MSG(compare(P, n, Q, nq, ks[i]) == 0, "%s, k %d", kinds[kk], ks[i]);
        free(P), free(Q);
    }
}

static void test_small_sets(void)
{
    df_rng_t r = {3};
    double one[3] = {1, 2, 3}, q[3 * 4] = {1, 2, 3, 0, 0, 0, 1e9, -1e9, 5, 1, 2, 3.5};
    DF_CHECK(compare(one, 1, q, 4, 1) == 0);
    DF_CHECK(compare(one, 1, q, 4, 5) == 0); /* k > n: the one point */
    double *P = points("volume", 7, &r);
    DF_CHECK(compare(P, 7, q, 4, 7) == 0);
    DF_CHECK(compare(P, 7, q, 4, 10) == 0);
    free(P);
}

static void test_refusals(void)
{
    df_knn_t *g = NULL;
    double bad[6] = {0, 0, 0, NAN, 1, 1};
    DF_CHECK(df_knn_build(bad, 2, &g) == -1 && g == NULL);
    DF_CHECK(df_knn_build(bad, 0, &g) == -1 && g == NULL);
    DF_CHECK(df_knn_build(bad, 1, &g) == 0);
    int64_t i;
    double d, qn[3] = {NAN, 0, 0}, q0[3] = {0, 0, 1};
    DF_CHECK(df_knn_query(g, qn, 1, &i, &d) == 0);
    DF_CHECK(df_knn_query(g, q0, 1, &i, &d) == 1 && i == 0 && d == 1.0);
    df_knn_free(&g);
    DF_CHECK(g == NULL);
    df_knn_free(&g); /* twice: harmless */
}

int main(void)
{
    DF_RUN(test_against_scan);
    DF_RUN(test_small_sets);
    DF_RUN(test_refusals);
    return dftest_exit();
}

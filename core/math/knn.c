/* knn.c — exact k-nearest neighbours on a uniform grid (knn.h). */
#include "math/knn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct df_knn {
    double *p;       /* [n,3] */
    int64_t n;
    double lo[3], h; /* grid origin and cell size */
    int64_t dim[3];  /* cells per axis */
    int64_t *start;  /* [cells + 1]: CSR offsets into idx */
    int64_t *idx;    /* [n] point indices by cell */
};

static int64_t cell_of(const df_knn_t *g, const double *q, int d)
{
    double c = floor((q[d] - g->lo[d]) / g->h);
    if (!(c >= 0)) return 0; /* also NaN */
    if (c >= (double)g->dim[d]) return g->dim[d] - 1;
    return (int64_t)c;
}

int df_knn_build(const double *pts, int64_t n, df_knn_t **out)
{
    *out = NULL;
    if (n < 1) return -1;
    df_knn_t *g = calloc(1, sizeof *g);
    if (!g) return -1;
    g->n = n;
    g->p = malloc(sizeof(double) * (size_t)(3 * n));
    if (!g->p) goto fail;
    memcpy(g->p, pts, sizeof(double) * (size_t)(3 * n));
    double hi[3];
    for (int d = 0; d < 3; d++) g->lo[d] = INFINITY, hi[d] = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < 3; d++) {
            double x = pts[3 * i + d];
            if (!isfinite(x)) goto fail;
            g->lo[d] = fmin(g->lo[d], x), hi[d] = fmax(hi[d], x);
        }
    /* about n cells over the box (a flat axis counts as a thousandth of
     * the largest), at most 2^21 per axis and 4n + 64 in all */
    double ext[3], emax = 0;
    for (int d = 0; d < 3; d++) ext[d] = hi[d] - g->lo[d], emax = fmax(emax, ext[d]);
    if (!(emax > 0)) emax = 1;
    double vol = 1;
    for (int d = 0; d < 3; d++) vol *= fmax(ext[d], 1e-3 * emax);
    g->h = cbrt(vol / (double)n);
    for (;;) {
        double cells = 1;
        for (int d = 0; d < 3; d++) {
            double c = floor(ext[d] / g->h) + 1;
            g->dim[d] = (int64_t)fmin(c, 2097152.0);
            cells *= (double)g->dim[d];
        }
        if (cells <= 4.0 * (double)n + 64) break;
        g->h *= 1.25;
    }
    int64_t nc = g->dim[0] * g->dim[1] * g->dim[2];
    g->start = calloc((size_t)nc + 1, sizeof(int64_t));
    g->idx = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *cell = malloc(sizeof(int64_t) * (size_t)n);
    if (!g->start || !g->idx || !cell) {
        free(cell);
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) {
        const double *q = pts + 3 * i;
        cell[i] = (cell_of(g, q, 2) * g->dim[1] + cell_of(g, q, 1)) * g->dim[0] + cell_of(g, q, 0);
        g->start[cell[i] + 1]++;
    }
    for (int64_t c = 0; c < nc; c++) g->start[c + 1] += g->start[c];
    int64_t *fill = calloc((size_t)nc, sizeof(int64_t));
    if (!fill) {
        free(cell);
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) g->idx[g->start[cell[i]] + fill[cell[i]]++] = i;
    free(fill);
    free(cell);
    *out = g;
    return 0;
fail:
    df_knn_free(&g);
    return -1;
}

void df_knn_free(df_knn_t **g)
{
    if (!g || !*g) return;
    free((*g)->p);
    free((*g)->start);
    free((*g)->idx);
    free(*g);
    *g = NULL;
}

/* insert (d, i) into the sorted lists of up to k entries (lexicographic
 * order of distance, index) */
static void insert(double d, int64_t i, int k, int *nn, int64_t *idx, double *d2)
{
    if (*nn == k && (d > d2[k - 1] || (d == d2[k - 1] && i > idx[k - 1]))) return;
    int p = *nn < k ? (*nn)++ : k - 1;
    while (p > 0 && (d2[p - 1] > d || (d2[p - 1] == d && idx[p - 1] > i))) {
        d2[p] = d2[p - 1], idx[p] = idx[p - 1];
        p--;
    }
    d2[p] = d, idx[p] = i;
}

int df_knn_query(const df_knn_t *g, const double q[3], int k, int64_t *idx, double *d2)
{
    if (k < 1 || !isfinite(q[0]) || !isfinite(q[1]) || !isfinite(q[2])) return 0;
    if ((int64_t)k > g->n) k = (int)g->n;
    int64_t c[3], rmax = 0;
    for (int d = 0; d < 3; d++) {
        c[d] = cell_of(g, q, d);
        rmax = c[d] > rmax ? c[d] : rmax;
        rmax = g->dim[d] - 1 - c[d] > rmax ? g->dim[d] - 1 - c[d] : rmax;
    }
    int nn = 0;
    for (int64_t r = 0; r <= rmax; r++) {
        int64_t a[3], b[3];
        for (int d = 0; d < 3; d++) {
            a[d] = c[d] - r < 0 ? 0 : c[d] - r;
            b[d] = c[d] + r >= g->dim[d] ? g->dim[d] - 1 : c[d] + r;
        }
        for (int64_t z = a[2]; z <= b[2]; z++)
            for (int64_t y = a[1]; y <= b[1]; y++) {
                const int edge = llabs(z - c[2]) == r || llabs(y - c[1]) == r;
                for (int64_t x = a[0]; x <= b[0]; x += edge || x == b[0] ? 1 : b[0] - x) {
                    if (!edge && llabs(x - c[0]) != r) continue; /* inside: visited */
                    int64_t cc = (z * g->dim[1] + y) * g->dim[0] + x;
                    for (int64_t j = g->start[cc]; j < g->start[cc + 1]; j++) {
                        int64_t i = g->idx[j];
                        const double *p = g->p + 3 * i;
                        double e0 = p[0] - q[0], e1 = p[1] - q[1], e2 = p[2] - q[2];
                        insert(e0 * e0 + e1 * e1 + e2 * e2, i, k, &nn, idx, d2);
                    }
                }
            }
        if (nn < k) continue;
        /* every point not yet seen lies outside the searched box: beyond
         * its nearest face that has cells behind it */
        double reach = INFINITY;
        for (int d = 0; d < 3; d++) {
            if (c[d] - r > 0) reach = fmin(reach, q[d] - (g->lo[d] + (double)(c[d] - r) * g->h));
            if (c[d] + r < g->dim[d] - 1)
                reach = fmin(reach, g->lo[d] + (double)(c[d] + r + 1) * g->h - q[d]);
        }
        if (reach == INFINITY || (reach > 0 && d2[k - 1] <= reach * reach)) break;
    }
    return nn;
}

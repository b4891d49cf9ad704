/* decompose_reseed.c — moving a weak proxy bone to where the fit is worst.
 *
 * Alternating least squares only refines: a bone spent on a region that
 * two neighbours could share stays there, while a region no bone follows
 * keeps a large error. Between iterations we try one move: the bone with
 * the least total weight is re-seeded as the rigid motion (Horn, per frame)
 * of the welded region around the worst-fitted welded vertex (breadth-first
 * over the welded adjacency up to ~W/(2B) vertices, topped up with the
 * nearest rest positions when the piece is small), the region is bound to
 * it, the bone is removed from every other vertex, and one alternation
 * (weights, transforms) runs. The move is kept only if the error then is
 * below the error before it; otherwise the state is restored exactly.
 */
#include "decompose/decompose_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int df__dc_reseed(df__dc_t *d, double *e, df_error_t *err)
{
    const int64_t N = d->N, W = d->W, F3 = 3 * d->F;
    const int B = d->B, K = d->K, B4 = 4 * B;
    if (B < 2) return 0;
    double *mass = calloc(B, sizeof(double)), *werr = calloc(W, sizeof(double));
    int64_t *queue = malloc(sizeof(int64_t) * W);
    char *seen = calloc(W, 1);
    double *Ys = malloc(sizeof(double) * F3 * B4), *ws = malloc(sizeof(double) * N * K);
    int32_t *is = malloc(sizeof(int32_t) * N * K), *cs = malloc(sizeof(int32_t) * W);
    int rc = 0;
    if (!mass || !werr || !queue || !seen || !Ys || !ws || !is || !cs) {
        rc = df_error_set(err, DF_ENOMEM, "decompose: out of memory (re-seeding)");
        goto done;
    }
    for (int64_t i = 0; i < N; i++) {
        werr[d->rep[i]] += d->verr[i];
        for (int k = 0; k < K; k++)
            if (d->idx[i * K + k] >= 0) mass[d->idx[i * K + k]] += d->w[i * K + k];
    }
    int jw = 0;
    for (int j = 1; j < B; j++)
        if (mass[j] < mass[jw]) jw = j;
    int64_t gw = 0;
    for (int64_t g = 1; g < W; g++)
        if (werr[g] > werr[gw]) gw = g;
    /* region: BFS over the welded adjacency */
    int64_t want = W / (2 * B);
    if (want < 4) want = 4;
    if (want > W) want = W;
    int64_t head = 0, n = 0;
    queue[n++] = gw;
    seen[gw] = 1;
    while (head < n && n < want) {
        int64_t g = queue[head++];
        for (int64_t a = d->adj_off[g]; a < d->adj_off[g + 1] && n < want; a++)
            if (!seen[d->adj[a]]) { seen[d->adj[a]] = 1; queue[n++] = d->adj[a]; }
    }
    while (n < want) { /* small piece: nearest rest positions */
        const double *c = d->V + 4 * d->wfirst[gw];
        int64_t best = -1;
        double bd = INFINITY;
        for (int64_t g = 0; g < W; g++) {
            if (seen[g]) continue;
            const double *v = d->V + 4 * d->wfirst[g];
            double dd = (v[0] - c[0]) * (v[0] - c[0]) + (v[1] - c[1]) * (v[1] - c[1]) +
                        (v[2] - c[2]) * (v[2] - c[2]);
            if (dd < bd) { bd = dd; best = g; }
        }
        if (best < 0) break;
        seen[best] = 1;
        queue[n++] = best;
    }
    memcpy(Ys, d->Y, sizeof(double) * F3 * B4);
    memcpy(ws, d->w, sizeof(double) * N * K);
    memcpy(is, d->idx, sizeof(int32_t) * N * K);
    memcpy(cs, d->cluster, sizeof(int32_t) * W);

    df__dc_fit_rigid_set(d, queue, n, jw);
    for (int64_t i = 0; i < N; i++) {
        int32_t *idx = d->idx + i * K;
        double *w = d->w + i * K, s = 0;
        if (seen[d->rep[i]]) {
            for (int k = 0; k < K; k++) { idx[k] = -1; w[k] = 0; }
            idx[0] = jw;
            w[0] = 1;
            continue;
        }
        for (int k = 0; k < K; k++) {
            if (idx[k] == jw) { idx[k] = -1; w[k] = 0; }
            if (idx[k] >= 0) s += w[k];
        }
        for (int k = 0; k < K; k++)
            if (idx[k] >= 0 && s > 0) w[k] /= s;
    }
    /* the region becomes bone jw's cluster (candidate neighbourhoods); the
     * rest of jw's old cluster goes to each vertex's strongest other bone */
    for (int64_t g = 0; g < W; g++) {
        if (seen[g]) { d->cluster[g] = jw; continue; }
        if (d->cluster[g] != jw) continue;
        const int64_t i = d->wfirst[g];
        double bw = 0;
        for (int k = 0; k < K; k++)
            if (d->idx[i * K + k] >= 0 && d->w[i * K + k] > bw) {
                bw = d->w[i * K + k];
                d->cluster[g] = d->idx[i * K + k];
            }
    }
    df__dc_weights_step(d);
    rc = df__dc_transforms_step(d, err);
    if (rc) goto done;
    double e2 = df__dc_error(d);
    if (e2 < *e) {
        *e = e2;
        rc = 1;
    } else { /* restore */
        memcpy(d->Y, Ys, sizeof(double) * F3 * B4);
        memcpy(d->w, ws, sizeof(double) * N * K);
        memcpy(d->idx, is, sizeof(int32_t) * N * K);
        memcpy(d->cluster, cs, sizeof(int32_t) * W);
        df__dc_error(d); /* verr of the restored state */
        rc = 0;
    }
done:
    free(mass); free(werr); free(queue); free(seen); free(Ys); free(ws); free(is); free(cs);
    return rc;
}

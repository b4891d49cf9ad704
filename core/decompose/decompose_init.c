/* decompose_init.c — initial proxy bones from vertex trajectories.
 *
 * The paper initialises bones and weights with a network trained on 67
 * rigged characters; we have no such data, so we cluster the welded
 * vertices by motion instead (docs/decompose.md measures the result):
 *
 *  1. grow the clusters from one by splitting: at each stage the clusters
 *     with the largest rigid-fit error are split in two, the new half
 *     seeded at the member whose trajectory (3F-vector of positions over
 *     all frames) is farthest from the cluster's mean trajectory (blended
 *     vertices move as convex combinations of their bones, so extreme
 *     trajectories lie in rigid parts) and taking the members nearer to
 *     that seed than to the mean;
 *  2. rigid-cluster refinement (after each stage and at the end): fit one
 *     rigid transform per cluster and
 *     frame (rest -> frame, Horn's closed form: the quaternion is the top
 *     eigenvector of a 4x4 matrix built from the cross covariance, which is
 *     the Kabsch/SVD solution without its reflection case), then move every
 *     vertex to the cluster whose transforms reproduce its trajectory best;
 *     empty clusters are re-seeded at the worst-fitted vertex; repeat until
 *     nothing moves or init_iterations rounds.
 *
 * With opts.init = NETWORK the clusters come instead from k-means of the
 * trajectory network's embeddings (decompose_net.c), followed by the same
 * rigid-cluster refinement (init_iterations rounds; 0 keeps the network's
 * clusters as they are).
 *
 * The result is B rigid bones (Y) and a one-hot weight per input vertex,
 * from which the alternating optimisation starts.
 */
#include "decompose/decompose_internal.h"
#include "decompose/decompose_net.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cyclic Jacobi on a symmetric 4x4 matrix: a is destroyed (its diagonal
 * ends as the eigenvalues), v receives the eigenvectors as columns. */
static void jacobi4(double a[16], double v[16])
{
    for (int i = 0; i < 16; i++) v[i] = (i % 5 == 0);
    for (int sweep = 0; sweep < 50; sweep++) {
        double off = 0, tot = 0;
        for (int p = 0; p < 4; p++)
            for (int q = 0; q < 4; q++) {
                tot += a[p * 4 + q] * a[p * 4 + q];
                if (p != q) off += a[p * 4 + q] * a[p * 4 + q];
            }
        if (off <= 1e-30 * tot || off == 0) break;
        for (int p = 0; p < 3; p++)
            for (int q = p + 1; q < 4; q++) {
                double apq = a[p * 4 + q];
                if (apq == 0) continue;
                double theta = (a[q * 4 + q] - a[p * 4 + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < 4; k++) { /* columns p, q */
                    double akp = a[k * 4 + p], akq = a[k * 4 + q];
                    a[k * 4 + p] = c * akp - s * akq;
                    a[k * 4 + q] = s * akp + c * akq;
                }
                for (int k = 0; k < 4; k++) { /* rows p, q */
                    double apk = a[p * 4 + k], aqk = a[q * 4 + k];
                    a[p * 4 + k] = c * apk - s * aqk;
                    a[q * 4 + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < 4; k++) {
                    double vkp = v[k * 4 + p], vkq = v[k * 4 + q];
                    v[k * 4 + p] = c * vkp - s * vkq;
                    v[k * 4 + q] = s * vkp + c * vkq;
                }
            }
    }
}

void df__dc_best_rotation(const double H[9], double R[9])
{
    const double Sxx = H[0], Sxy = H[1], Sxz = H[2], Syx = H[3], Syy = H[4],
                 Syz = H[5], Szx = H[6], Szy = H[7], Szz = H[8];
    double N[16] = {Sxx + Syy + Szz, Syz - Szy, Szx - Sxz, Sxy - Syx,
                    Syz - Szy, Sxx - Syy - Szz, Sxy + Syx, Szx + Sxz,
                    Szx - Sxz, Sxy + Syx, -Sxx + Syy - Szz, Syz + Szy,
                    Sxy - Syx, Szx + Sxz, Syz + Szy, -Sxx - Syy + Szz};
    double V[16];
    jacobi4(N, V);
    int best = 0;
    for (int k = 1; k < 4; k++)
        if (N[k * 5] > N[best * 5]) best = k;
    double w = V[0 * 4 + best], x = V[1 * 4 + best], y = V[2 * 4 + best],
           z = V[3 * 4 + best];
    double n = sqrt(w * w + x * x + y * y + z * z);
    if (!(n > 0)) { w = 1; x = y = z = 0; n = 1; }
    w /= n; x /= n; y /= n; z /= n;
    R[0] = 1 - 2 * (y * y + z * z); R[1] = 2 * (x * y - w * z); R[2] = 2 * (x * z + w * y);
    R[3] = 2 * (x * y + w * z); R[4] = 1 - 2 * (x * x + z * z); R[5] = 2 * (y * z - w * x);
    R[6] = 2 * (x * z - w * y); R[7] = 2 * (y * z + w * x); R[8] = 1 - 2 * (x * x + y * y);
}

typedef struct kctx {
    df__dc_t *d;
    double *dist;          /* [W] error under the assigned cluster */
    int32_t *assign;       /* [W] */
} kctx_t;

static inline const double *traj(const df__dc_t *d, int64_t g)
{
    return d->X + (size_t)d->wfirst[g] * 3 * d->F;
}

static double sqdist(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t q = 0; q < n; q++) { double t = a[q] - b[q]; s += t * t; }
    return s;
}

/* --------------------------------------------------- rigid refinement */

/* accumulator per cluster: n, Σr[3], then per frame Σq[3] and Σ r qᵀ[9] */
static inline size_t acc_stride(const df__dc_t *d) { return 4 + 12 * (size_t)d->F; }

static void rigid_acc_body(void *arg, int64_t g0, int64_t g1, int worker)
{
    df__dc_t *d = arg;
    double *acc = d->wk[worker].acc;
    const size_t st = acc_stride(d);
    for (int64_t g = g0; g < g1; g++) {
        double *a = acc + (size_t)d->cluster[g] * st;
        const double *r = d->V + 4 * d->wfirst[g];
        const double *x = traj(d, g);
        a[0] += 1;
        a[1] += r[0]; a[2] += r[1]; a[3] += r[2];
        for (int64_t p = 0; p < d->F; p++) {
            double *f = a + 4 + 12 * p;
            const double *q = x + 3 * p;
            f[0] += q[0]; f[1] += q[1]; f[2] += q[2];
            for (int u = 0; u < 3; u++)
                for (int s = 0; s < 3; s++) f[3 + 3 * u + s] += r[u] * q[s];
        }
    }
}

static void fit_rigid(df__dc_t *d)
{
    const size_t st = acc_stride(d);
    const int B4 = 4 * d->B;
    for (int t = 0; t < d->nw; t++) memset(d->wk[t].acc, 0, sizeof(double) * st * d->B);
    df__dc_pfor(d, d->W, rigid_acc_body, d);
    for (int t = 1; t < d->nw; t++)
        for (size_t q = 0; q < st * d->B; q++) d->wk[0].acc[q] += d->wk[t].acc[q];
    for (int j = 0; j < d->B; j++) {
        const double *a = d->wk[0].acc + (size_t)j * st;
        double n = a[0];
        if (!(n > 0)) continue; /* empty: keep previous transforms */
        double rb[3] = {a[1] / n, a[2] / n, a[3] / n};
        for (int64_t p = 0; p < d->F; p++) {
            const double *f = a + 4 + 12 * p;
            double qb[3] = {f[0] / n, f[1] / n, f[2] / n}, H[9], R[9];
            for (int u = 0; u < 3; u++)
                for (int s = 0; s < 3; s++) H[3 * u + s] = f[3 + 3 * u + s] - n * rb[u] * qb[s];
            df__dc_best_rotation(H, R);
            for (int r = 0; r < 3; r++) {
                double *y = d->Y + (size_t)(3 * p + r) * B4 + 4 * j;
                y[0] = R[3 * r]; y[1] = R[3 * r + 1]; y[2] = R[3 * r + 2];
                y[3] = qb[r] - (R[3 * r] * rb[0] + R[3 * r + 1] * rb[1] + R[3 * r + 2] * rb[2]);
            }
        }
    }
}

static void assign_body(void *arg, int64_t g0, int64_t g1, int worker)
{
    kctx_t *k = arg;
    df__dc_t *d = k->d;
    const int B4 = 4 * d->B;
    int64_t moved = 0;
    for (int64_t g = g0; g < g1; g++) {
        int64_t i = d->wfirst[g];
        const double *v = d->V + 4 * i, *z = d->Z + (size_t)i * B4;
        double best = INFINITY;
        int bj = d->cluster[g];
        for (int j = 0; j < d->nb_active; j++) {
            const double *m = d->M + (size_t)(4 * j) * B4 + 4 * j, *zj = z + 4 * j;
            double qd = 0;
            for (int a = 0; a < 4; a++)
                qd += v[a] * (m[(size_t)a * B4] * v[0] + m[(size_t)a * B4 + 1] * v[1] +
                              m[(size_t)a * B4 + 2] * v[2] + m[(size_t)a * B4 + 3] * v[3]);
            double e = qd - 2 * (v[0] * zj[0] + v[1] * zj[1] + v[2] * zj[2] + v[3] * zj[3]);
            if (e < best) { best = e; bj = j; }
        }
        if (bj != d->cluster[g]) moved++;
        k->assign[g] = bj;
        k->dist[g] = best + d->xx[i];
    }
    d->wk[worker].count += moved;
}

/* Rigid-cluster rounds on the active clusters: fit, reassign, re-seed
 * empty clusters at the worst-fitted vertex; stop when nothing moves.
 * Leaves k->dist[g] = vertex g's error under its cluster's transforms. */
static void refine(df__dc_t *d, kctx_t *k, int64_t *cnt, int rounds)
{
    const int64_t W = d->W;
    for (int round = 0; round < rounds; round++) {
        fit_rigid(d);
        df__dc_update_zm(d);
        for (int t = 0; t < d->nw; t++) d->wk[t].count = 0;
        df__dc_pfor(d, W, assign_body, k);
        int64_t moved = 0;
        for (int t = 0; t < d->nw; t++) moved += d->wk[t].count;
        memcpy(d->cluster, k->assign, sizeof(int32_t) * W);
        memset(cnt, 0, sizeof(int64_t) * d->B);
        for (int64_t g = 0; g < W; g++) cnt[d->cluster[g]]++;
        int reseeded = 0;
        for (int b = 0; b < d->nb_active; b++) {
            if (cnt[b]) continue;
            int64_t far = -1;
            for (int64_t g = 0; g < W; g++)
                if (cnt[d->cluster[g]] > 1 && (far < 0 || k->dist[g] > k->dist[far])) far = g;
            if (far < 0) break;
            cnt[d->cluster[far]]--;
            d->cluster[far] = b;
            cnt[b] = 1;
            k->dist[far] = 0;
            reseeded++;
        }
        if (moved == 0 && reseeded == 0) break;
    }
}

int df__dc_init(df__dc_t *d, df_error_t *err)
{
    const int64_t W = d->W, F3 = 3 * d->F;
    const int B = d->B;
    double *dist = malloc(sizeof(double) * W), *cerr = malloc(sizeof(double) * B);
    int32_t *assign = malloc(sizeof(int32_t) * W);
    int64_t *cnt = malloc(sizeof(int64_t) * B), *worst = malloc(sizeof(int64_t) * B);
    double *mean = malloc(sizeof(double) * F3), *ca = malloc(sizeof(double) * F3);
    if (!dist || !assign || !cnt || !cerr || !worst || !mean || !ca) {
        free(dist); free(assign); free(cnt); free(cerr); free(worst); free(mean); free(ca);
        return df_error_set(err, DF_ENOMEM, "decompose: out of memory (initialisation)");
    }
    kctx_t k = {.d = d, .dist = dist, .assign = assign};
    for (int j = 0; j < B; j++) /* identity until a bone is used */
        for (int64_t p = 0; p < d->F; p++)
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 4; s++)
                    d->Y[(size_t)(3 * p + r) * 4 * B + 4 * j + s] = (r == s);

    if (d->o.init == DF_DECOMPOSE_INIT_NETWORK) {
        /* the network's embeddings of the welded vertices, k-means into B */
        const df_decompose_net_t *net = d->o.init_net;
        int D = df_decompose_net_embed_dim(net), rc;
        float *E = malloc(sizeof(float) * (size_t)W * D);
        rc = E ? df_decompose_net_embed(net, W, d->F, d->X, d->V, 4, d->wfirst, E, err)
               : df_error_set(err, DF_ENOMEM, "decompose: out of memory (initialisation)");
        if (!rc) rc = df_decompose_kmeans(W, D, E, B, 1, d->cluster, err);
        free(E);
        if (rc) {
            free(dist); free(assign); free(cnt); free(cerr); free(worst); free(mean); free(ca);
            return rc;
        }
        d->nb_active = B;
        memset(cnt, 0, sizeof(int64_t) * B);
        for (int64_t g = 0; g < W; g++) cnt[d->cluster[g]]++;
        goto done;
    }

    /* grow from one cluster: split the worst clusters (largest summed
     * rigid-fit error) in two, seeding the new half at the member whose
     * trajectory is farthest from the cluster's mean trajectory and taking
     * the members nearer to it than to the mean; then let every vertex move
     * to its best-fitting cluster */
    d->nb_active = 1;
    for (int64_t g = 0; g < W; g++) d->cluster[g] = 0;
    refine(d, &k, cnt, 2);
    while (d->nb_active < B) {
        int c = d->nb_active, n_new = c < B - c ? c : B - c;
        for (int j = 0; j < c; j++) { cerr[j] = 0; worst[j] = -1; }
        for (int64_t g = 0; g < W; g++) {
            int j = d->cluster[g];
            cerr[j] += dist[g];
            if (worst[j] < 0 || dist[g] > dist[worst[j]]) worst[j] = g;
        }
        for (int t = 0; t < n_new; t++) {
            int jb = -1;
            for (int j = 0; j < c; j++)
                if (cnt[j] > 1 && cerr[j] >= 0 && (jb < 0 || cerr[j] > cerr[jb])) jb = j;
            if (jb < 0) break;
            cerr[jb] = -1; /* split each cluster once per stage */
            int nb = d->nb_active++;
            memset(mean, 0, sizeof(double) * F3);
            for (int64_t g = 0; g < W; g++)
                if (d->cluster[g] == jb)
                    for (int64_t q = 0; q < F3; q++) mean[q] += traj(d, g)[q];
            for (int64_t q = 0; q < F3; q++) mean[q] /= (double)cnt[jb];
            /* 2-means on trajectories inside the cluster, seeded at the
             * member farthest from the mean and the member farthest from
             * that one. Blended vertices move as convex combinations of
             * their bones, so extreme trajectories lie in rigid parts. */
            int64_t sa = -1, sb = -1;
            double far = -1;
            for (int64_t g = 0; g < W; g++) {
                if (d->cluster[g] != jb) continue;
                double s2 = sqdist(traj(d, g), mean, F3);
                if (s2 > far) { far = s2; sa = g; }
            }
            far = -1;
            for (int64_t g = 0; g < W; g++) {
                if (d->cluster[g] != jb) continue;
                double s2 = sqdist(traj(d, g), traj(d, sa), F3);
                if (s2 > far) { far = s2; sb = g; }
            }
            memcpy(ca, traj(d, sa), sizeof(double) * F3);
            memcpy(mean, traj(d, sb), sizeof(double) * F3);
            int64_t moved = 0;
            for (int lloyd = 0; lloyd < 8; lloyd++) {
                int64_t na = 0, nbb = 0, changed = 0;
                for (int64_t g = 0; g < W; g++) {
                    if (d->cluster[g] != jb && d->cluster[g] != nb) continue;
                    const double *x = traj(d, g);
                    int to = sqdist(x, ca, F3) < sqdist(x, mean, F3) ? nb : jb;
                    if (to != d->cluster[g]) { d->cluster[g] = to; changed++; }
                }
                if (lloyd > 0 && !changed) break;
                memset(ca, 0, sizeof(double) * F3);
                memset(mean, 0, sizeof(double) * F3);
                for (int64_t g = 0; g < W; g++) {
                    double *c = d->cluster[g] == nb ? ca : d->cluster[g] == jb ? mean : NULL;
                    if (!c) continue;
                    const double *x = traj(d, g);
                    for (int64_t q = 0; q < F3; q++) c[q] += x[q];
                    if (c == ca) na++; else nbb++;
                }
                for (int64_t q = 0; q < F3; q++) {
                    if (na) ca[q] /= (double)na;
                    if (nbb) mean[q] /= (double)nbb;
                }
                if (!na || !nbb) break;
            }
            moved = 0;
            for (int64_t g = 0; g < W; g++) moved += d->cluster[g] == nb;
            cnt[nb] = moved;
            cnt[jb] -= moved;
        }
        if (d->nb_active == c) break; /* nothing left to split */
        refine(d, &k, cnt, 3);
    }
    d->nb_active = B;
done:
    refine(d, &k, cnt, d->o.init_iterations);
    fit_rigid(d);

    /* one-hot weights on the cluster */
    for (int64_t i = 0; i < d->N; i++) {
        for (int kk = 0; kk < d->K; kk++) { d->idx[i * d->K + kk] = -1; d->w[i * d->K + kk] = 0; }
        d->idx[i * d->K] = d->cluster[d->rep[i]];
        d->w[i * d->K] = 1;
    }
    free(dist); free(assign); free(cnt); free(cerr); free(worst); free(mean); free(ca);
    return DF_OK;
}

void df__dc_fit_rigid_set(df__dc_t *d, const int64_t *gs, int64_t n, int j)
{
    const int B4 = 4 * d->B;
    double rb[3] = {0, 0, 0};
    for (int64_t k = 0; k < n; k++)
        for (int r = 0; r < 3; r++) rb[r] += d->V[4 * d->wfirst[gs[k]] + r] / (double)n;
    for (int64_t p = 0; p < d->F; p++) {
        double qb[3] = {0, 0, 0}, H[9] = {0}, R[9];
        for (int64_t k = 0; k < n; k++) {
            const double *q = traj(d, gs[k]) + 3 * p;
            for (int r = 0; r < 3; r++) qb[r] += q[r] / (double)n;
        }
        for (int64_t k = 0; k < n; k++) {
            const double *v = d->V + 4 * d->wfirst[gs[k]], *q = traj(d, gs[k]) + 3 * p;
            for (int u = 0; u < 3; u++)
                for (int s = 0; s < 3; s++) H[3 * u + s] += (v[u] - rb[u]) * (q[s] - qb[s]);
        }
        df__dc_best_rotation(H, R);
        for (int r = 0; r < 3; r++) {
            double *y = d->Y + (size_t)(3 * p + r) * B4 + 4 * j;
            y[0] = R[3 * r]; y[1] = R[3 * r + 1]; y[2] = R[3 * r + 2];
            y[3] = qb[r] - (R[3 * r] * rb[0] + R[3 * r + 1] * rb[1] + R[3 * r + 2] * rb[2]);
        }
    }
}

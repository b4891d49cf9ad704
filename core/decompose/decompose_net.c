/* decompose_net.c — the trajectory network of the decomposition's network
 * initialisation: features, forward/backward (conv1d layers of
 * math/nn_conv.h, mean+max pooling over time, a df_mlp_t head), the
 * prototype loss, training, scoring, k-means, the weights file.
 * Design in decompose_net.h and docs/decompose.md.
 */
#include "base/clock.h"
#include "decompose/decompose_net.h"
#include "math/nn.h"
#include "math/nn_conv.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct df_decompose_net {
    int frames, n_conv;
    df_conv1d_t conv[DF_DCNET_MAX_CONV];
    df_mlp_t *mlp;
};

void df_decompose_net_arch_default(df_decompose_net_arch_t *a)
{
    memset(a, 0, sizeof *a);
    a->frames = 32;
    a->n_conv = 3;
    int c[3][4] = {{32, 5, 1, 2}, {64, 5, 2, 2}, {64, 3, 2, 1}};
    memcpy(a->conv, c, sizeof c);
    a->n_dense = 2;
    a->dense[0] = 128;
    a->dense[1] = 16;
}

void df_decompose_net_free(df_decompose_net_t **pn)
{
    df_decompose_net_t *n = pn ? *pn : NULL;
    if (!n) return;
    for (int l = 0; l < n->n_conv; l++) df_conv1d_free(&n->conv[l]);
    df_mlp_free(&n->mlp);
    free(n);
    *pn = NULL;
}

int df_decompose_net_embed_dim(const df_decompose_net_t *n)
{
    return n->mlp->dims[n->mlp->n_layers];
}

int64_t df_decompose_net_n_params(const df_decompose_net_t *n)
{
    int64_t p = df_mlp_n_params(n->mlp);
    for (int l = 0; l < n->n_conv; l++)
        p += (int64_t)n->conv[l].cout * (n->conv[l].k * n->conv[l].cin + 1);
    return p;
}

void df_decompose_net_get_arch(const df_decompose_net_t *n, df_decompose_net_arch_t *a)
{
    memset(a, 0, sizeof *a);
    a->frames = n->frames;
    a->n_conv = n->n_conv;
    for (int l = 0; l < n->n_conv; l++) {
        a->conv[l][0] = n->conv[l].cout;
        a->conv[l][1] = n->conv[l].k;
        a->conv[l][2] = n->conv[l].stride;
        a->conv[l][3] = n->conv[l].pad;
    }
    a->n_dense = n->mlp->n_layers;
    for (int l = 0; l < a->n_dense; l++) a->dense[l] = n->mlp->dims[l + 1];
}

/* time steps after each conv layer: Tl[0] = frames, Tl[l+1] after layer l */
static int lengths(const df_decompose_net_t *n, int *Tl)
{
    Tl[0] = n->frames;
    for (int l = 0; l < n->n_conv; l++) {
        Tl[l + 1] = df_conv1d_out_len(&n->conv[l], Tl[l]);
        if (Tl[l + 1] < 1) return -1;
    }
    return 0;
}

static int build(const df_decompose_net_arch_t *a, uint64_t seed, df_decompose_net_t **out,
                 df_error_t *err)
{
    *out = NULL;
    if (a->frames < 2 || a->frames > 4096 || a->n_conv < 1 || a->n_conv > DF_DCNET_MAX_CONV ||
        a->n_dense < 1 || a->n_dense > 8)
        return df_error_set(err, DF_EINVAL, "decompose network: bad shape (frames %d, %d conv "
                                            "layers, %d dense layers)", a->frames, a->n_conv,
                            a->n_dense);
    df_decompose_net_t *n = calloc(1, sizeof *n);
    if (!n) return df_error_set(err, DF_ENOMEM, "decompose network: out of memory");
    n->frames = a->frames;
    int cin = DF_DCNET_CHANNELS, rc = DF_OK;
    for (int l = 0; l < a->n_conv && !rc; l++) {
        rc = df_conv1d_new(&n->conv[l], cin, a->conv[l][0], a->conv[l][1], a->conv[l][2],
                           a->conv[l][3], seed ? seed + 101 * (uint64_t)(l + 1) : 0, err);
        if (!rc) n->n_conv = l + 1;
        cin = a->conv[l][0];
    }
    int Tl[DF_DCNET_MAX_CONV + 1];
    if (!rc && lengths(n, Tl))
        rc = df_error_set(err, DF_EINVAL, "decompose network: %d frames are too few for its "
                                          "convolutions", a->frames);
    if (!rc) {
        int dims[9] = {2 * cin};
        for (int l = 0; l < a->n_dense; l++) dims[l + 1] = a->dense[l];
        rc = df_mlp_new(a->n_dense, dims, seed ? seed : 1, &n->mlp, err);
    }
    if (rc) {
        df_decompose_net_free(&n);
        return rc;
    }
    *out = n;
    return DF_OK;
}

int df_decompose_net_new(const df_decompose_net_arch_t *a, uint64_t seed,
                         df_decompose_net_t **out, df_error_t *err)
{
    return build(a, seed ? seed : 1, out, err);
}

/* ------------------------------------------------------------ features */

/* T steps of one trajectory (row of 3F normalised doubles) over the frame
 * window [a, b] (fractional frame indices; b < a plays it backwards),
 * transformed by A (3x3, rotation x scale): [A x(u), A (x(u) - rest)]. */
static void features(const double *x, const double *rest, int64_t F, double a, double b,
                     const double A[9], int T, float *out)
{
    for (int s = 0; s < T; s++) {
        double u = a + (b - a) * s / (T - 1);
        if (u < 0) u = 0;
        if (u > F - 1) u = (double)(F - 1);
        int64_t i0 = (int64_t)floor(u);
        if (i0 >= F - 1) i0 = F - 2;
        if (i0 < 0) i0 = 0;
        double f = F > 1 ? u - (double)i0 : 0, p[3], d[3];
        for (int r = 0; r < 3; r++) {
            p[r] = F > 1 ? (1 - f) * x[3 * i0 + r] + f * x[3 * (i0 + 1) + r] : x[r];
            d[r] = p[r] - rest[r];
        }
        float *o = out + (size_t)s * DF_DCNET_CHANNELS;
        for (int r = 0; r < 3; r++) {
            o[r] = (float)(A[3 * r] * p[0] + A[3 * r + 1] * p[1] + A[3 * r + 2] * p[2]);
            o[3 + r] = (float)(A[3 * r] * d[0] + A[3 * r + 1] * d[1] + A[3 * r + 2] * d[2]);
        }
    }
}

int df_decompose_net_normalise(int64_t F, int64_t N, const float *frames, const float *rest,
                               double *X, double *rest_out, df_error_t *err)
{
    const float *r0 = rest ? rest : frames;
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = 0; i < N; i++)
        for (int r = 0; r < 3; r++) {
            lo[r] = fmin(lo[r], r0[3 * i + r]);
            hi[r] = fmax(hi[r], r0[3 * i + r]);
        }
    double c[3], diag = 0;
    for (int r = 0; r < 3; r++) {
        c[r] = 0.5 * (lo[r] + hi[r]);
        diag += (hi[r] - lo[r]) * (hi[r] - lo[r]);
    }
    diag = sqrt(diag);
    if (!(diag > 0) || !isfinite(diag))
        return df_error_set(err, DF_EINVAL, "all rest positions coincide (bbox diagonal %g)", diag);
    for (int64_t i = 0; i < N; i++) {
        for (int r = 0; r < 3; r++) rest_out[3 * i + r] = (r0[3 * i + r] - c[r]) / diag;
        for (int64_t p = 0; p < F; p++)
            for (int r = 0; r < 3; r++)
                X[(size_t)i * 3 * F + 3 * p + r] = (frames[((size_t)p * N + i) * 3 + r] - c[r]) / diag;
    }
    return DF_OK;
}

/* ------------------------------------------------------ forward/backward */

typedef struct work {
    int nb, Tl[DF_DCNET_MAX_CONV + 1], C;
    float *x;                          /* [nb, T, 6] */
    float *col[DF_DCNET_MAX_CONV];     /* im2col of each layer */
    float *y[DF_DCNET_MAX_CONV];       /* [nb, Tl+1, cout] */
    float *pool;                       /* [nb, 2C] */
    int32_t *amax;                     /* [nb, C] */
    float *act, *tmp;                  /* mlp */
    /* backward */
    float *dy[DF_DCNET_MAX_CONV], *dcol, *dpool, *gw[DF_DCNET_MAX_CONV], *gb[DF_DCNET_MAX_CONV];
    df_mlp_t *gmlp;
} work_t;

static void work_free(work_t *w)
{
    free(w->x);
    free(w->pool);
    free(w->amax);
    free(w->act);
    free(w->tmp);
    free(w->dcol);
    free(w->dpool);
    for (int l = 0; l < DF_DCNET_MAX_CONV; l++) {
        free(w->col[l]);
        free(w->y[l]);
        free(w->dy[l]);
        free(w->gw[l]);
        free(w->gb[l]);
    }
    df_mlp_free(&w->gmlp);
    memset(w, 0, sizeof *w);
}

static int work_new(const df_decompose_net_t *n, int nb, int backward, work_t *w, df_error_t *err)
{
    memset(w, 0, sizeof *w);
    w->nb = nb;
    lengths(n, w->Tl);
    w->C = n->conv[n->n_conv - 1].cout;
    int ok = 1;
    size_t maxcol = 0;
    ok &= !!(w->x = malloc(sizeof(float) * (size_t)nb * n->frames * DF_DCNET_CHANNELS));
    for (int l = 0; l < n->n_conv; l++) {
        size_t cf = df_conv1d_col_floats(&n->conv[l], nb, w->Tl[l]);
        size_t yf = (size_t)nb * w->Tl[l + 1] * n->conv[l].cout;
        maxcol = cf > maxcol ? cf : maxcol;
        ok &= !!(w->col[l] = malloc(sizeof(float) * cf));
        ok &= !!(w->y[l] = malloc(sizeof(float) * yf));
        if (backward) {
            ok &= !!(w->dy[l] = malloc(sizeof(float) * yf));
            ok &= !!(w->gw[l] = calloc((size_t)n->conv[l].cout * n->conv[l].k * n->conv[l].cin,
                                       sizeof(float)));
            ok &= !!(w->gb[l] = calloc((size_t)n->conv[l].cout, sizeof(float)));
        }
    }
    ok &= !!(w->pool = malloc(sizeof(float) * (size_t)nb * 2 * w->C));
    ok &= !!(w->amax = malloc(sizeof(int32_t) * (size_t)nb * w->C));
    size_t mw = df_mlp_work_floats(n->mlp, nb);
    ok &= !!(w->act = malloc(sizeof(float) * mw));
    if (backward) {
        ok &= !!(w->tmp = malloc(sizeof(float) * mw));
        ok &= !!(w->dcol = malloc(sizeof(float) * maxcol));
        ok &= !!(w->dpool = malloc(sizeof(float) * (size_t)nb * 2 * w->C));
        if (ok && df_mlp_new_like(n->mlp, &w->gmlp, err)) ok = 0;
    }
    if (!ok) {
        work_free(w);
        return df_error_set(err, DF_ENOMEM, "decompose network: out of memory (batch %d)", nb);
    }
    return DF_OK;
}

/* Forward w->x (nb rows); returns the embeddings [nb, D] (inside w->act). */
static float *forward(const df_decompose_net_t *n, work_t *w, int nb)
{
    const float *in = w->x;
    for (int l = 0; l < n->n_conv; l++) {
        df_conv1d_forward(&n->conv[l], nb, w->Tl[l], in, w->col[l], w->y[l], 1);
        in = w->y[l];
    }
    const int Tn = w->Tl[n->n_conv], C = w->C;
    for (int s = 0; s < nb; s++) {
        const float *y = in + (size_t)s * Tn * C;
        float *pm = w->pool + (size_t)s * 2 * C, *px = pm + C;
        int32_t *am = w->amax + (size_t)s * C;
        for (int c = 0; c < C; c++) {
            double sum = 0;
            float mx = y[c];
            int32_t at = 0;
            for (int t = 0; t < Tn; t++) {
                float v = y[(size_t)t * C + c];
                sum += v;
                if (v > mx) { mx = v; at = t; }
            }
            pm[c] = (float)(sum / Tn);
            px[c] = mx;
            am[c] = at;
        }
    }
    return df_mlp_forward(n->mlp, nb, w->pool, w->act);
}

/* Backward of the batch just run; dE [nb, D] (overwritten). Gradients
 * accumulate in w->gw/gb/gmlp. */
static void backward(const df_decompose_net_t *n, work_t *w, int nb, float *dE)
{
    df_mlp_backward(n->mlp, nb, w->pool, w->act, dE, w->gmlp, w->dpool, w->tmp);
    const int L = n->n_conv, Tn = w->Tl[L], C = w->C;
    float *dy = w->dy[L - 1];
    for (int s = 0; s < nb; s++) {
        float *d = dy + (size_t)s * Tn * C;
        const float *gp = w->dpool + (size_t)s * 2 * C;
        const int32_t *am = w->amax + (size_t)s * C;
        for (int t = 0; t < Tn; t++)
            for (int c = 0; c < C; c++) d[(size_t)t * C + c] = gp[c] / Tn;
        for (int c = 0; c < C; c++) d[(size_t)am[c] * C + c] += gp[C + c];
    }
    for (int l = L - 1; l >= 0; l--)
        df_conv1d_backward(&n->conv[l], nb, w->Tl[l], w->col[l], w->y[l], w->dy[l], 1, w->gw[l],
                           w->gb[l], l > 0 ? w->dy[l - 1] : NULL, w->dcol);
}

int df_decompose_net_embed(const df_decompose_net_t *net, int64_t n, int64_t F, const double *X,
                           const double *rest, int rest_stride, const int64_t *rows, float *E,
                           df_error_t *err)
{
    const int NB = 256, D = df_decompose_net_embed_dim(net), T = net->frames;
    work_t w;
    int rc = work_new(net, NB, 0, &w, err);
    if (rc) return rc;
    static const double I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    for (int64_t i0 = 0; i0 < n; i0 += NB) {
        int nb = n - i0 < NB ? (int)(n - i0) : NB;
        for (int s = 0; s < nb; s++) {
            int64_t r = rows ? rows[i0 + s] : i0 + s;
            features(X + (size_t)r * 3 * F, rest + (size_t)r * rest_stride, F, 0, (double)(F - 1),
                     I, T, w.x + (size_t)s * T * DF_DCNET_CHANNELS);
        }
        const float *e = forward(net, &w, nb);
        memcpy(E + (size_t)i0 * D, e, sizeof(float) * (size_t)nb * D);
    }
    work_free(&w);
    return DF_OK;
}

/* -------------------------------------------------------- prototype loss */

/* Loss over nb embeddings E [nb, D] with labels lab (>= 0): each vertex's
 * logits are -|e - mu_c|^2 for the prototypes mu_c (batch means) of the
 * bones in the batch; cross-entropy against its own bone, averaged over the
 * vertices whose bone has >= 2 members. dE [nb, D] receives the gradient
 * (zero when no vertex counts). Returns the loss (0 when none). scratch:
 * (nb + 1) * (D + 2) doubles + nb ints. */
static double proto_loss(int nb, int D, const float *E, const int32_t *lab, float *dE,
                         double *mu, double *cnt, double *gmu, double *lg, int32_t *cls)
{
    int nc = 0;
    for (int i = 0; i < nb; i++) { /* classes in order of appearance */
        int c = 0;
        while (c < nc && lab[cls[c]] != lab[i]) c++;
        if (c == nc) cls[nc++] = i;
    }
    /* cls[c] = first member of class c; map vertices to classes */
    int32_t *cof = cls + nb;
    for (int i = 0; i < nb; i++) {
        int c = 0;
        while (lab[cls[c]] != lab[i]) c++;
        cof[i] = c;
    }
    memset(mu, 0, sizeof(double) * (size_t)nc * D);
    memset(cnt, 0, sizeof(double) * (size_t)nc);
    for (int i = 0; i < nb; i++) {
        cnt[cof[i]] += 1;
        for (int d = 0; d < D; d++) mu[(size_t)cof[i] * D + d] += E[(size_t)i * D + d];
    }
    for (int c = 0; c < nc; c++)
        for (int d = 0; d < D; d++) mu[(size_t)c * D + d] /= cnt[c];
    int m = 0;
    for (int i = 0; i < nb; i++) m += cnt[cof[i]] >= 2;
    memset(dE, 0, sizeof(float) * (size_t)nb * D);
    if (m == 0 || nc < 2) return 0;
    memset(gmu, 0, sizeof(double) * (size_t)nc * D);
    double loss = 0;
    for (int i = 0; i < nb; i++) {
        if (cnt[cof[i]] < 2) continue;
        const float *e = E + (size_t)i * D;
        double mx = -INFINITY;
        for (int c = 0; c < nc; c++) {
            double s = 0;
            for (int d = 0; d < D; d++) {
                double t = e[d] - mu[(size_t)c * D + d];
                s += t * t;
            }
            lg[c] = -s;
            mx = fmax(mx, lg[c]);
        }
        double z = 0;
        for (int c = 0; c < nc; c++) z += exp(lg[c] - mx);
        loss += -(lg[cof[i]] - mx - log(z));
        for (int c = 0; c < nc; c++) {
            double g = (exp(lg[c] - mx) / z - (c == cof[i])) / m; /* dL/dlogit */
            for (int d = 0; d < D; d++) {
                double t = e[d] - mu[(size_t)c * D + d];
                dE[(size_t)i * D + d] += (float)(-2 * g * t);
                gmu[(size_t)c * D + d] += 2 * g * t;
            }
        }
    }
    for (int i = 0; i < nb; i++)
        for (int d = 0; d < D; d++)
            dE[(size_t)i * D + d] += (float)(gmu[(size_t)cof[i] * D + d] / cnt[cof[i]]);
    return loss / m;
}

/* ------------------------------------------------------------- training */

void df_decompose_net_train_opts_default(df_decompose_net_train_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->steps = 3000;
    o->batch = 256;
    o->lr = 2e-3f;
    o->seed = 1;
    o->min_window = 0.6;
    o->augment = 1;
    o->report_every = 100;
}

/* uniform random rotation (quaternion of 4 normals), optional reflection,
 * times a scale */
static void random_map(df_rng_t *r, int augment, double A[9])
{
    static const double I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    if (!augment) { memcpy(A, I, sizeof I); return; }
    double q[4], n = 0;
    for (int k = 0; k < 4; k++) { q[k] = df_rng_normal(r); n += q[k] * q[k]; }
    n = sqrt(n);
    double x = q[0] / n, y = q[1] / n, z = q[2] / n, w = q[3] / n;
    double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                   2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                   2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
    double s = 0.85 + 0.3 * df_rng_u01(r), m = df_rng_u01(r) < 0.5 ? -1 : 1;
    for (int k = 0; k < 9; k++) A[k] = s * R[k] * (k % 3 == 0 ? m : 1);
}

int df_decompose_net_train(df_decompose_net_t *net, int n, const df_decompose_net_seq_t *seqs,
                           const df_decompose_net_train_opts_t *o, df_error_t *err)
{
    df_decompose_net_train_opts_t def;
    if (!o) { df_decompose_net_train_opts_default(&def); o = &def; }
    if (o->batch < 4 || o->steps < 1 || !(o->lr > 0))
        return df_error_set(err, DF_EINVAL, "decompose network: batch %d, steps %lld, lr %g",
                            o->batch, (long long)o->steps, o->lr);
    /* usable sequences (>= 2 labelled bones) and their groups */
    int *use = malloc(sizeof(int) * (size_t)(n + 1)), nu = 0, ng = 0;
    int *gid = malloc(sizeof(int) * (size_t)(n + 1)), *gcount = calloc((size_t)n + 1, sizeof(int));
    int64_t **lab_rows = calloc((size_t)n + 1, sizeof(int64_t *));
    int64_t *nlab = calloc((size_t)n + 1, sizeof(int64_t));
    if (!use || !gid || !gcount || !lab_rows || !nlab) {
        free(use); free(gid); free(gcount); free(lab_rows); free(nlab);
        return df_error_set(err, DF_ENOMEM, "decompose network: out of memory");
    }
    int rc = DF_OK;
    for (int s = 0; s < n && !rc; s++) {
        int32_t first = -1, two = 0;
        int64_t c = 0;
        for (int64_t i = 0; i < seqs[s].N; i++) {
            int32_t l = seqs[s].label[i];
            if (l < 0) continue;
            c++;
            if (first < 0) first = l;
            else if (l != first) two = 1;
        }
        if (!two || seqs[s].F < 2) continue;
        if (!(lab_rows[s] = malloc(sizeof(int64_t) * (size_t)c))) { rc = DF_ENOMEM; break; }
        nlab[s] = 0;
        for (int64_t i = 0; i < seqs[s].N; i++)
            if (seqs[s].label[i] >= 0) lab_rows[s][nlab[s]++] = i;
        use[nu++] = s;
    }
    /* groups: distinct seqs[].group values among the usable sequences */
    int *gval = malloc(sizeof(int) * (size_t)(n + 1));
    if (!gval) rc = DF_ENOMEM;
    for (int u = 0; u < nu && !rc; u++) {
        int g = 0, v = seqs[use[u]].group;
        while (g < ng && gval[g] != v) g++;
        if (g == ng) gval[ng++] = v;
        gid[u] = g;
        gcount[g]++;
    }
    if (!rc && nu == 0)
        rc = df_error_set(err, DF_EINVAL, "decompose network: no training sequence with two "
                                          "labelled bones");
    work_t w = {0};
    const int NB = o->batch, D = df_decompose_net_embed_dim(net), T = net->frames;
    double *mu = NULL, *cnt = NULL, *gmu = NULL, *lg = NULL;
    int32_t *cls = NULL, *lab = NULL;
    float *dE = NULL, **m1 = NULL, **m2 = NULL;
    df_mlp_opt_t opt = {0};
    if (!rc) rc = work_new(net, NB, 1, &w, err);
    if (!rc) {
        mu = malloc(sizeof(double) * (size_t)NB * D);
        cnt = malloc(sizeof(double) * (size_t)NB);
        gmu = malloc(sizeof(double) * (size_t)NB * D);
        lg = malloc(sizeof(double) * (size_t)NB);
        cls = malloc(sizeof(int32_t) * 2 * (size_t)NB);
        lab = malloc(sizeof(int32_t) * (size_t)NB);
        dE = malloc(sizeof(float) * (size_t)NB * D);
        m1 = calloc((size_t)2 * net->n_conv, sizeof(float *));
        m2 = calloc((size_t)2 * net->n_conv, sizeof(float *));
        if (!mu || !cnt || !gmu || !lg || !cls || !lab || !dE || !m1 || !m2) rc = DF_ENOMEM;
        for (int l = 0; l < net->n_conv && !rc; l++) {
            size_t nw = (size_t)net->conv[l].cout * net->conv[l].k * net->conv[l].cin;
            size_t nbias = (size_t)net->conv[l].cout;
            if (!(m1[2 * l] = calloc(nw, sizeof(float))) || !(m2[2 * l] = calloc(nw, sizeof(float))) ||
                !(m1[2 * l + 1] = calloc(nbias, sizeof(float))) ||
                !(m2[2 * l + 1] = calloc(nbias, sizeof(float))))
                rc = DF_ENOMEM;
        }
        if (rc) df_error_set(err, rc, "decompose network: out of memory");
        if (!rc) rc = df_mlp_opt_init(&opt, net->mlp, 1, o->lr, err);
    }
    df_rng_t rng = {o->seed * 0x9E3779B97F4A7C15ULL + 7};
    double t0 = df__now_s(), lsum = 0;
    int64_t lcount = 0;
    for (int64_t step = 0; step < o->steps && !rc; step++) {
        /* a character, then one of its sequences */
        int g = (int)(df_rng_u01(&rng) * ng), k = (int)(df_rng_u01(&rng) * gcount[g]), u = 0;
        for (u = 0; u < nu; u++)
            if (gid[u] == g && k-- == 0) break;
        const df_decompose_net_seq_t *s = &seqs[use[u]];
        int64_t nl = nlab[use[u]];
        const int64_t *lrow = lab_rows[use[u]];
        double A[9], a = 0, b = (double)(s->F - 1);
        random_map(&rng, o->augment, A);
        if (o->min_window < 1 && s->F > 2) {
            double len = (o->min_window + (1 - o->min_window) * df_rng_u01(&rng)) * (s->F - 1);
            a = df_rng_u01(&rng) * (s->F - 1 - len);
            b = a + len;
        }
        if (o->augment && df_rng_u01(&rng) < 0.5) { double t = a; a = b; b = t; }
        int nb = nl < NB ? (int)nl : NB;
        for (int q = 0; q < nb; q++) {
            int64_t i = nl <= NB ? lrow[q] : lrow[(int64_t)(df_rng_u01(&rng) * nl)];
            lab[q] = s->label[i];
            features(s->X + (size_t)i * 3 * s->F, s->rest + 3 * i, s->F, a, b, A, T,
                     w.x + (size_t)q * T * DF_DCNET_CHANNELS);
        }
        float *E = forward(net, &w, nb);
        double loss = proto_loss(nb, D, E, lab, dE, mu, cnt, gmu, lg, cls);
        for (int l = 0; l < net->n_conv; l++) {
            memset(w.gw[l], 0, sizeof(float) * net->conv[l].cout * net->conv[l].k * net->conv[l].cin);
            memset(w.gb[l], 0, sizeof(float) * net->conv[l].cout);
        }
        df_mlp_zero(w.gmlp);
        backward(net, &w, nb, dE);
        /* cosine decay to lr/20 */
        float lr = (float)(o->lr * (0.05 + 0.95 * 0.5 * (1 + cos(M_PI * (double)step / o->steps))));
        opt.lr = lr;
        df_mlp_opt_step(&opt, net->mlp, w.gmlp);
        for (int l = 0; l < net->n_conv; l++) {
            df_conv1d_t *c = &net->conv[l];
            df_adam_step(c->w, w.gw[l], m1[2 * l], m2[2 * l], (size_t)c->cout * c->k * c->cin,
                         step + 1, lr, 0.9f, 0.999f, 1e-8f);
            df_adam_step(c->b, w.gb[l], m1[2 * l + 1], m2[2 * l + 1], (size_t)c->cout, step + 1,
                         lr, 0.9f, 0.999f, 1e-8f);
        }
        if (!isfinite(loss)) {
            rc = df_error_set(err, DF_EINVAL, "decompose network: loss not finite at step %lld",
                              (long long)step);
            break;
        }
        lsum += loss;
        lcount++;
        if (o->progress && o->report_every > 0 &&
            ((step + 1) % o->report_every == 0 || step + 1 == o->steps)) {
            double el = df__now_s() - t0;
            df_decompose_net_progress_t p = {step + 1, o->steps, lsum / lcount, el,
                                             el / (step + 1) * (o->steps - step - 1)};
            o->progress(o->progress_user, &p);
            lsum = 0;
            lcount = 0;
        }
    }
    if (rc == DF_ENOMEM && !err->msg[0]) df_error_set(err, rc, "decompose network: out of memory");
    for (int l = 0; m1 && l < 2 * net->n_conv; l++) { free(m1[l]); free(m2[l]); }
    free(m1); free(m2);
    df_mlp_opt_free(&opt);
    work_free(&w);
    free(mu); free(cnt); free(gmu); free(lg); free(cls); free(lab); free(dE);
    for (int s = 0; s < n; s++) free(lab_rows[s]);
    free(lab_rows); free(nlab); free(use); free(gid); free(gcount); free(gval);
    return rc;
}

int df__dcnet_n_tensors(const df_decompose_net_t *n)
{
    return 2 * (n->n_conv + n->mlp->n_layers);
}

float *df__dcnet_tensor(df_decompose_net_t *n, int i, size_t *len)
{
    if (i < 2 * n->n_conv) {
        df_conv1d_t *c = &n->conv[i / 2];
        *len = i % 2 ? (size_t)c->cout : (size_t)c->cout * c->k * c->cin;
        return i % 2 ? c->b : c->w;
    }
    i -= 2 * n->n_conv;
    int l = i / 2;
    *len = i % 2 ? (size_t)n->mlp->dims[l + 1] : (size_t)n->mlp->dims[l + 1] * n->mlp->dims[l];
    return i % 2 ? n->mlp->b[l] : n->mlp->w[l];
}

int df__dcnet_batch_loss(df_decompose_net_t *n, int nb, const float *x, const int32_t *lab,
                         float *const *grads, double *loss, df_error_t *err)
{
    work_t w;
    const int D = df_decompose_net_embed_dim(n);
    int rc = work_new(n, nb, 1, &w, err);
    if (rc) return rc;
    double *mu = malloc(sizeof(double) * (size_t)nb * D), *cnt = malloc(sizeof(double) * nb);
    double *gmu = malloc(sizeof(double) * (size_t)nb * D), *lg = malloc(sizeof(double) * nb);
    int32_t *cls = malloc(sizeof(int32_t) * 2 * (size_t)nb);
    float *dE = malloc(sizeof(float) * (size_t)nb * D);
    if (!mu || !cnt || !gmu || !lg || !cls || !dE) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory");
    } else {
        memcpy(w.x, x, sizeof(float) * (size_t)nb * n->frames * DF_DCNET_CHANNELS);
        float *E = forward(n, &w, nb);
        *loss = proto_loss(nb, D, E, lab, dE, mu, cnt, gmu, lg, cls);
        if (grads) {
            backward(n, &w, nb, dE);
            for (int i = 0; i < df__dcnet_n_tensors(n); i++) {
                size_t len;
                df__dcnet_tensor(n, i, &len);
                int l = i / 2;
                const float *g = i < 2 * n->n_conv
                                     ? (i % 2 ? w.gb[l] : w.gw[l])
                                     : (i % 2 ? w.gmlp->b[l - n->n_conv] : w.gmlp->w[l - n->n_conv]);
                memcpy(grads[i], g, sizeof(float) * len);
            }
        }
    }
    free(mu); free(cnt); free(gmu); free(lg); free(cls); free(dE);
    work_free(&w);
    return rc;
}

/* --------------------------------------------------------------- k-means */

int df_decompose_kmeans(int64_t n, int D, const float *E, int k, uint64_t seed, int32_t *assign,
                        df_error_t *err)
{
    if (k < 1 || k > n)
        return df_error_set(err, DF_EINVAL, "k-means: %d clusters for %lld points", k, (long long)n);
    double *c = malloc(sizeof(double) * (size_t)k * D), *dist = malloc(sizeof(double) * (size_t)n);
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)k);
    if (!c || !dist || !cnt) {
        free(c); free(dist); free(cnt);
        return df_error_set(err, DF_ENOMEM, "k-means: out of memory");
    }
    df_rng_t r = {seed * 0x2545F4914F6CDD1DULL + 3};
    /* k-means++ */
    int64_t first = (int64_t)(df_rng_u01(&r) * n);
    for (int d = 0; d < D; d++) c[d] = E[(size_t)first * D + d];
    for (int64_t i = 0; i < n; i++) dist[i] = INFINITY;
    for (int j = 1; j <= k; j++) {
        double tot = 0;
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int d = 0; d < D; d++) {
                double t = E[(size_t)i * D + d] - c[(size_t)(j - 1) * D + d];
                s += t * t;
            }
            if (s < dist[i]) dist[i] = s;
            tot += dist[i];
        }
        if (j == k) break;
        double u = df_rng_u01(&r) * tot, acc = 0;
        int64_t pick = n - 1;
        for (int64_t i = 0; i < n; i++) {
            acc += dist[i];
            if (acc > u) { pick = i; break; }
        }
        for (int d = 0; d < D; d++) c[(size_t)j * D + d] = E[(size_t)pick * D + d];
    }
    for (int64_t i = 0; i < n; i++) assign[i] = -1;
    for (int round = 0; round < 100; round++) {
        int64_t moved = 0;
        for (int64_t i = 0; i < n; i++) {
            double best = INFINITY;
            int bj = 0;
            for (int j = 0; j < k; j++) {
                double s = 0;
                for (int d = 0; d < D; d++) {
                    double t = E[(size_t)i * D + d] - c[(size_t)j * D + d];
                    s += t * t;
                }
                if (s < best) { best = s; bj = j; }
            }
            dist[i] = best;
            if (assign[i] != bj) { assign[i] = bj; moved++; }
        }
        memset(c, 0, sizeof(double) * (size_t)k * D);
        memset(cnt, 0, sizeof(int64_t) * (size_t)k);
        for (int64_t i = 0; i < n; i++) {
            cnt[assign[i]]++;
            for (int d = 0; d < D; d++) c[(size_t)assign[i] * D + d] += E[(size_t)i * D + d];
        }
        int fixed = 0;
        for (int j = 0; j < k; j++) {
            if (cnt[j]) {
                for (int d = 0; d < D; d++) c[(size_t)j * D + d] /= (double)cnt[j];
                continue;
            }
            int64_t far = -1; /* empty: the worst-fitted point of a cluster with > 1 */
            for (int64_t i = 0; i < n; i++)
                if (cnt[assign[i]] > 1 && (far < 0 || dist[i] > dist[far])) far = i;
            if (far < 0) continue;
            cnt[assign[far]]--;
            assign[far] = j;
            cnt[j] = 1;
            dist[far] = 0;
            for (int d = 0; d < D; d++) c[(size_t)j * D + d] = E[(size_t)far * D + d];
            fixed++;
        }
        if (!moved && !fixed) break;
    }
    free(c); free(dist); free(cnt);
    return DF_OK;
}

/* --------------------------------------------------------------- scoring */

int df_decompose_net_score(const df_decompose_net_t *net, const df_decompose_net_seq_t *s,
                           df_decompose_net_score_t *out, df_error_t *err)
{
    memset(out, 0, sizeof *out);
    int64_t n = 0;
    int32_t lmax = -1;
    for (int64_t i = 0; i < s->N; i++)
        if (s->label[i] >= 0) { n++; if (s->label[i] > lmax) lmax = s->label[i]; }
    if (n == 0) return df_error_set(err, DF_EINVAL, "score: no labelled vertex");
    const int T = net ? net->frames : 32;
    const int D = net ? df_decompose_net_embed_dim(net) : T * DF_DCNET_CHANNELS;
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)n);
    float *E = malloc(sizeof(float) * (size_t)n * D);
    int32_t *map = malloc(sizeof(int32_t) * ((size_t)lmax + 1)), *cl = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *km = malloc(sizeof(int32_t) * (size_t)n);
    if (!rows || !E || !map || !cl || !km) {
        free(rows); free(E); free(map); free(cl); free(km);
        return df_error_set(err, DF_ENOMEM, "score: out of memory");
    }
    for (int32_t l = 0; l <= lmax; l++) map[l] = -1;
    int nc = 0;
    n = 0;
    for (int64_t i = 0; i < s->N; i++) {
        int32_t l = s->label[i];
        if (l < 0) continue;
        if (map[l] < 0) map[l] = nc++;
        cl[n] = map[l];
        rows[n++] = i;
    }
    int rc = DF_OK;
    if (net) {
        rc = df_decompose_net_embed(net, n, s->F, s->X, s->rest, 3, rows, E, err);
    } else {
        static const double I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
        for (int64_t q = 0; q < n; q++)
            features(s->X + (size_t)rows[q] * 3 * s->F, s->rest + 3 * rows[q], s->F, 0,
                     (double)(s->F - 1), I, T, E + (size_t)q * D);
    }
    double *mu = calloc((size_t)nc * D, sizeof(double));
    int64_t *cnt = calloc((size_t)nc, sizeof(int64_t)), *ct = NULL, *ra = NULL, *rb = NULL;
    if (!rc && (!mu || !cnt)) rc = df_error_set(err, DF_ENOMEM, "score: out of memory");
    if (!rc) {
        for (int64_t q = 0; q < n; q++) {
            cnt[cl[q]]++;
            for (int d = 0; d < D; d++) mu[(size_t)cl[q] * D + d] += E[(size_t)q * D + d];
        }
        int64_t big = 0, right = 0;
        for (int c = 0; c < nc; c++) {
            if (cnt[c] > big) big = cnt[c];
            for (int d = 0; d < D; d++) mu[(size_t)c * D + d] /= (double)cnt[c];
        }
        for (int64_t q = 0; q < n; q++) {
            double best = INFINITY;
            int bj = 0;
            for (int c = 0; c < nc; c++) {
                double t2 = 0;
                for (int d = 0; d < D; d++) {
                    double t = E[(size_t)q * D + d] - mu[(size_t)c * D + d];
                    t2 += t * t;
                }
                if (t2 < best) { best = t2; bj = c; }
            }
            right += bj == cl[q];
        }
        out->n_bones = nc;
        out->n_vertices = n;
        out->proto_acc = (double)right / n;
        out->majority = (double)big / n;
        rc = df_decompose_kmeans(n, D, E, nc, 1, km, err);
    }
    if (!rc) { /* adjusted Rand index from the contingency table */
        ct = calloc((size_t)nc * nc, sizeof(int64_t));
        ra = calloc((size_t)nc, sizeof(int64_t));
        rb = calloc((size_t)nc, sizeof(int64_t));
        if (!ct || !ra || !rb) rc = df_error_set(err, DF_ENOMEM, "score: out of memory");
    }
    if (!rc) {
        for (int64_t q = 0; q < n; q++) {
            ct[(size_t)cl[q] * nc + km[q]]++;
            ra[cl[q]]++;
            rb[km[q]]++;
        }
        double sij = 0, sa = 0, sb = 0;
        for (size_t q = 0; q < (size_t)nc * nc; q++) sij += ct[q] * (ct[q] - 1) / 2.0;
        for (int c = 0; c < nc; c++) {
            sa += ra[c] * (ra[c] - 1) / 2.0;
            sb += rb[c] * (rb[c] - 1) / 2.0;
        }
        double tot = n * (n - 1) / 2.0, ex = tot > 0 ? sa * sb / tot : 0, mx = (sa + sb) / 2;
        out->ari = mx - ex != 0 ? (sij - ex) / (mx - ex) : 1.0;
    }
    free(ct); free(ra); free(rb); free(mu); free(cnt);
    free(rows); free(E); free(map); free(cl); free(km);
    return rc;
}

/* ----------------------------------------------------------------- file */

int df_decompose_net_save(const df_decompose_net_t *n, const char *path,
                          const char *const *meta_kv, df_error_t *err)
{
    df_st_writer_t *w = df_st_writer_new();
    if (!w) return df_error_set(err, DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    char name[64], buf[1024];
    int len = snprintf(buf, sizeof buf, "[");
    for (int l = 0; l < n->n_conv && !rc; l++) {
        const df_conv1d_t *c = &n->conv[l];
        int64_t ws[2] = {c->cout, (int64_t)c->k * c->cin}, bs[1] = {c->cout};
        snprintf(name, sizeof name, "conv%d/weight", l);
        rc = df_st_writer_add(w, name, DF_DT_F32, 2, ws, c->w);
        snprintf(name, sizeof name, "conv%d/bias", l);
        if (!rc) rc = df_st_writer_add(w, name, DF_DT_F32, 1, bs, c->b);
        len += snprintf(buf + len, sizeof buf - len, "%s[%d,%d,%d,%d,%d]", l ? "," : "", c->cin,
                        c->cout, c->k, c->stride, c->pad);
    }
    snprintf(buf + len, sizeof buf - len, "]");
    if (!rc) rc = df_st_writer_meta(w, "conv", buf);
    len = snprintf(buf, sizeof buf, "[");
    for (int l = 0; l <= n->mlp->n_layers; l++)
        len += snprintf(buf + len, sizeof buf - len, "%s%d", l ? "," : "", n->mlp->dims[l]);
    snprintf(buf + len, sizeof buf - len, "]");
    if (!rc) rc = df_st_writer_meta(w, "dense", buf);
    for (int l = 0; l < n->mlp->n_layers && !rc; l++) {
        int64_t ws[2] = {n->mlp->dims[l + 1], n->mlp->dims[l]}, bs[1] = {n->mlp->dims[l + 1]};
        snprintf(name, sizeof name, "dense%d/weight", l);
        rc = df_st_writer_add(w, name, DF_DT_F32, 2, ws, n->mlp->w[l]);
        snprintf(name, sizeof name, "dense%d/bias", l);
        if (!rc) rc = df_st_writer_add(w, name, DF_DT_F32, 1, bs, n->mlp->b[l]);
    }
    snprintf(buf, sizeof buf, "%d", n->frames);
    if (!rc) rc = df_st_writer_meta(w, "frames", buf);
    if (!rc) rc = df_st_writer_meta(w, "kind", "decompose_init");
    if (!rc) rc = df_st_writer_meta(w, "format_version", "1");
    for (int q = 0; meta_kv && meta_kv[q] && meta_kv[q + 1] && !rc; q += 2)
        rc = df_st_writer_meta(w, meta_kv[q], meta_kv[q + 1]);
    if (rc) df_error_set(err, rc, "%s: cannot build the weights file", path);
    else rc = df_st_writer_save(w, path, err);
    df_st_writer_free(&w);
    return rc;
}

/* a JSON array of small ints, at most max, into v; returns the count or -1 */
static int int_array(json_t *a, int *v, int max)
{
    if (!json_is_array(a) || (int)json_array_size(a) > max) return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1 << 20))
            return -1;
        v[i] = (int)json_integer_value(x);
    }
    return (int)json_array_size(a);
}

int df_decompose_net_load(const char *path, df_decompose_net_t **out, df_error_t *err)
{
    *out = NULL;
    df_st_t *st = NULL;
    int rc = df_st_open(path, NULL, &st, err);
    if (rc) return rc;
    const char *kind = df_st_meta(st, "kind"), *ver = df_st_meta(st, "format_version");
    const char *fr = df_st_meta(st, "frames"), *cv = df_st_meta(st, "conv"),
               *dn = df_st_meta(st, "dense");
    df_decompose_net_arch_t a = {0};
    int cin[DF_DCNET_MAX_CONV];
    char *end = NULL;
    if (!kind || strcmp(kind, "decompose_init") != 0) {
        rc = df_error_set(err, DF_EFORMAT, "%s: not a decomposition network (metadata kind '%s', "
                                           "want 'decompose_init')", path, kind ? kind : "");
    } else if (!ver || strcmp(ver, "1") != 0) {
        rc = df_error_set(err, DF_EFORMAT, "%s: format_version '%s' (this build reads 1)", path,
                          ver ? ver : "");
    } else if (!fr || !cv || !dn) {
        rc = df_error_set(err, DF_EFORMAT, "%s: metadata needs frames, conv and dense", path);
    } else {
        a.frames = (int)strtol(fr, &end, 10);
        if (*end || a.frames < 2 || a.frames > 4096)
            rc = df_error_set(err, DF_EFORMAT, "%s: metadata frames '%s' (2..4096)", path, fr);
    }
    if (!rc) {
        json_error_t je;
        json_t *jc = json_loads(cv, 0, &je), *jd = json_loads(dn, 0, &je);
        int dims[9];
        a.n_conv = json_is_array(jc) ? (int)json_array_size(jc) : -1;
        if (a.n_conv < 1 || a.n_conv > DF_DCNET_MAX_CONV)
            rc = df_error_set(err, DF_EFORMAT, "%s: metadata conv: 1..%d layers of "
                                               "[cin,cout,k,stride,pad]", path, DF_DCNET_MAX_CONV);
        for (int l = 0; l < a.n_conv && !rc; l++) {
            int v[5];
            if (int_array(json_array_get(jc, (size_t)l), v, 5) != 5)
                rc = df_error_set(err, DF_EFORMAT, "%s: metadata conv layer %d is not "
                                                   "[cin,cout,k,stride,pad]", path, l);
            else {
                cin[l] = v[0];
                a.conv[l][0] = v[1], a.conv[l][1] = v[2], a.conv[l][2] = v[3], a.conv[l][3] = v[4];
                int want = l ? a.conv[l - 1][0] : DF_DCNET_CHANNELS;
                if (cin[l] != want)
                    rc = df_error_set(err, DF_EFORMAT, "%s: conv layer %d has %d input channels, "
                                                       "want %d", path, l, cin[l], want);
            }
        }
        int nd = rc ? -1 : int_array(jd, dims, 9);
        if (!rc && (nd < 2 || dims[0] != 2 * a.conv[a.n_conv - 1][0]))
            rc = df_error_set(err, DF_EFORMAT, "%s: metadata dense must list [in, ..., out] with "
                                               "in = 2 x the last conv layer's channels", path);
        if (!rc) {
            a.n_dense = nd - 1;
            for (int l = 0; l < a.n_dense; l++) a.dense[l] = dims[l + 1];
        }
        json_decref(jc);
        json_decref(jd);
    }
    df_decompose_net_t *n = NULL;
    if (!rc) rc = build(&a, 0, &n, err);
    if (rc && !err->msg[0]) df_error_set(err, rc, "%s: bad network shape", path);
    char name[64];
    for (int l = 0; l < (n ? n->n_conv : 0) && !rc; l++) {
        const df_tensor_t *tw, *tb;
        df_conv1d_t *c = &n->conv[l];
        int64_t ws[2] = {c->cout, (int64_t)c->k * c->cin}, bs[1] = {c->cout};
        snprintf(name, sizeof name, "conv%d/weight", l);
        rc = df_st_require(st, name, DF_DT_F32, 2, ws, 0, &tw, err);
        snprintf(name, sizeof name, "conv%d/bias", l);
        if (!rc) rc = df_st_require(st, name, DF_DT_F32, 1, bs, 0, &tb, err);
        if (!rc) {
            memcpy(c->w, tw->data, tw->nbytes);
            memcpy(c->b, tb->data, tb->nbytes);
        }
    }
    for (int l = 0; n && l < n->mlp->n_layers && !rc; l++) {
        const df_tensor_t *tw, *tb;
        int64_t ws[2] = {n->mlp->dims[l + 1], n->mlp->dims[l]}, bs[1] = {n->mlp->dims[l + 1]};
        snprintf(name, sizeof name, "dense%d/weight", l);
        rc = df_st_require(st, name, DF_DT_F32, 2, ws, 0, &tw, err);
        snprintf(name, sizeof name, "dense%d/bias", l);
        if (!rc) rc = df_st_require(st, name, DF_DT_F32, 1, bs, 0, &tb, err);
        if (!rc) {
            memcpy(n->mlp->w[l], tw->data, tw->nbytes);
            memcpy(n->mlp->b[l], tb->data, tb->nbytes);
        }
    }
    df_st_close(&st);
    if (rc) {
        df_decompose_net_free(&n);
        return rc;
    }
    *out = n;
    return DF_OK;
}

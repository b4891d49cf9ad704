/* rigapprox_anchors.c — error-driven extra anchors for a trained 'ours'
 * model (a departure from the paper; docs/rigapprox.md, "Error-driven
 * anchors").
 *
 * The paper places anchors where the rig's controls act and trains one
 * mini-network per anchor. The largest errors of a trained model sit on a
 * few vertices (Testwuson: spine, mouth, tail spikes) that the spread
 * anchors miss. This pass evaluates the trained model on its training set
 * through the served code path (df_model_evaluate), adds anchors at the
 * vertices with the largest error (none within `radius` of another
 * anchor), trains their mini-networks exactly like the trainer's (inputs
 * chosen by influence, L2 on the standardised v_nl, Adam decaying to
 * 0.1 x, best validation weights), writes the model and repeats for
 * `rounds` rounds. The differential network is not touched: its loss (L1
 * on the differential coordinates) does not depend on the anchors. The
 * model file format is unchanged (more entries in anchor_vertices and
 * anchor/<a>/...). */
#include "base/clock.h"
#include "df.h"
#include "math/nn.h"
#include "rigapprox/rigapprox.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df_raanchor_opts_default(df_raanchor_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->rounds = 4;
    o->radius = 0.01;
    o->epochs = 100;
    o->batch = 32;
    o->lr = 1e-3f;
    o->val_frac = 0.1;
    o->seed = 1;
    o->threads = 1;
    o->verbose = 1;
}

typedef struct {
    const df_rigdata_t *d;
    const df_raanchor_opts_t *o;
    int64_t N, V, D, F, nval;
    int64_t *order; /* row i <- sample order[i]; validation rows first */
    float *X;       /* [N,F] standardised features (the model's) */
    float *NL;      /* [N,D] v_nl of every sample */
    /* the growing anchor set */
    int64_t A;
    int32_t *anchors, *off, *idx;
    df_mlp_t **nets;
    int64_t n_own;  /* nets[A - n_own ..] are ours (freed at the end) */
} aa_t;

static void aa_free(aa_t *t)
{
    free(t->order), free(t->X), free(t->NL), free(t->anchors), free(t->off), free(t->idx);
    for (int64_t a = t->A - t->n_own; t->nets && a < t->A; a++) df_mlp_free(&t->nets[a]);
    free(t->nets);
}

/* Per-vertex max error (and the pose) of the model file at path over
 * every sample, through the served path. Also the mean. */
static int aa_errors(aa_t *t, const char *path, double *vmax, double *mean, double *mx, int64_t *wv, df_error_t *err)
{
    const df_rigdata_t *d = t->d;
    df_model_t *m = NULL;
    int rc = df_model_open(path, "rigapprox", NULL, NULL, &m, err);
    if (rc) return rc;
    enum { BS = 32 };
    int64_t V = t->V;
    float *out = malloc(sizeof(float) * BS * V * 3);
    df_scratch_t *sc = df_scratch_new();
    if (!out || !sc) {
        free(out), df_scratch_free(&sc), df_model_unref(&m);
        return df_error_set(err, DF_ENOMEM, "add-anchors: out of memory");
    }
    for (int64_t v = 0; v < V; v++) vmax[v] = 0;
    double sum = 0;
    *mx = 0, *wv = 0;
    for (int64_t s = 0; s < t->N && !rc; s += BS) {
        int B = (int)(t->N - s < BS ? t->N - s : BS);
        float *po[BS];
        for (int b = 0; b < B; b++) po[b] = out + (size_t)b * V * 3;
        if ((rc = df_rigdata_evaluate(m, d, s, B, po, sc, err))) break;
        for (int b = 0; b < B; b++) {
            const float *gt = d->positions + (s + b) * V * 3, *p = po[b];
            for (int64_t v = 0; v < V; v++) {
                double dx = p[v * 3] - gt[v * 3], dy = p[v * 3 + 1] - gt[v * 3 + 1], dz = p[v * 3 + 2] - gt[v * 3 + 2];
                double e = sqrt(dx * dx + dy * dy + dz * dz);
                sum += e;
                if (e > vmax[v]) vmax[v] = e;
                if (e > *mx) *mx = e, *wv = v;
            }
        }
    }
    *mean = sum / ((double)t->N * V);
    free(out);
    df_scratch_free(&sc);
    df_model_unref(&m);
    return rc;
}

/* Train anchor a's mini-network (already created with random weights) on
 * the training rows; keeps the best validation weights; folds the target
 * standardisation in. */
static int aa_train_one(aa_t *t, int64_t a, df_error_t *err)
{
    const df_raanchor_opts_t *o = t->o;
    df_mlp_t *net = t->nets[a], *g = NULL, *best = NULL;
    df_mlp_opt_t opt;
    memset(&opt, 0, sizeof opt);
    int rc;
    if ((rc = df_mlp_new_like(net, &g, err)) || (rc = df_mlp_new_like(net, &best, err)) ||
        (rc = df_mlp_opt_init(&opt, net, 1, o->lr, err))) {
        df_mlp_free(&g), df_mlp_free(&best);
        return rc;
    }
    df_mlp_copy(best, net);
    int ni = t->off[a + 1] - t->off[a], Bm = o->batch;
    const int32_t *idx = t->idx + t->off[a];
    int32_t v = t->anchors[a];
    float mu[3], sig[3];
    df__ra_anchor_stats(t->NL, t->D, t->nval, t->N, v, mu, sig);
    size_t wf = df_mlp_work_floats(net, Bm);
    float *buf = malloc(sizeof(float) * ((size_t)Bm * (ni + 6) + 2 * wf));
    int64_t ntr = t->N - t->nval;
    int64_t *rows = malloc(sizeof(int64_t) * (ntr > 0 ? ntr : 1));
    if (!buf || !rows) {
        rc = df_error_set(err, DF_ENOMEM, "add-anchors: out of memory");
        goto done;
    }
    float *Xa = buf, *ta = Xa + (size_t)Bm * ni, *ga = ta + (size_t)Bm * 3, *act = ga + (size_t)Bm * 3, *tmp = act + wf;
    df_rng_t rr = {o->seed * 0x2545f4914f6cdd1dULL + (uint64_t)v};
    double best_v = INFINITY;
    for (int e = 0; e < o->epochs; e++) {
        for (int64_t i = 0; i < ntr; i++) rows[i] = t->nval + i;
        for (int64_t i = ntr - 1; i > 0; i--) {
            int64_t j = (int64_t)(df_rng_u64(&rr) % (uint64_t)(i + 1)), x = rows[i];
            rows[i] = rows[j], rows[j] = x;
        }
        opt.lr = o->lr * (float)pow(0.1, (double)e / (o->epochs > 1 ? o->epochs : 1));
        for (int pass = 0; pass < 2; pass++) { /* 0: train, 1: validation */
            int64_t n = pass ? t->nval : ntr;
            double sv = 0;
            for (int64_t s = 0; s < n; s += Bm) {
                int B = (int)(n - s < Bm ? n - s : Bm);
                for (int b = 0; b < B; b++) {
                    int64_t r = pass ? s + b : rows[s + b];
                    const float *xr = t->X + r * t->F;
                    for (int i = 0; i < ni; i++) Xa[(size_t)b * ni + i] = xr[idx[i]];
                    for (int c = 0; c < 3; c++) ta[b * 3 + c] = (t->NL[r * t->D + v * 3 + c] - mu[c]) / sig[c];
                }
                float *y = df_mlp_forward(net, B, Xa, act);
                double l = df_loss_l2((int64_t)B * 3, y, ta, pass ? NULL : ga);
                if (pass) {
                    sv += l * B;
                } else {
                    df_mlp_zero(g);
                    df_mlp_backward(net, B, Xa, act, ga, g, NULL, tmp);
                    df_mlp_opt_step(&opt, net, g);
                }
            }
            if (pass && sv / (double)n < best_v) {
                best_v = sv / (double)n;
                df_mlp_copy(best, net);
            }
        }
    }
    df_mlp_copy(net, best);
    df__ra_anchor_fold(net, mu, sig);
done:
    free(buf), free(rows);
    df_mlp_free(&g), df_mlp_free(&best);
    df_mlp_opt_free(&opt);
    return rc;
}

/* Train anchors [first, A) on o->threads threads: each takes the next
 * untrained anchor; every anchor's training depends only on its own seed. */
typedef struct {
    aa_t *t;
    _Atomic int64_t next;
    int64_t end;
    _Atomic int rc;
    df_error_t err;
    pthread_mutex_t mu;
} aa_pool_t;

static void *aa_thread(void *arg)
{
    aa_pool_t *p = arg;
    for (;;) {
        int64_t a = atomic_fetch_add(&p->next, 1);
        if (a >= p->end || atomic_load(&p->rc)) break;
        df_error_t e = {0};
        int rc = aa_train_one(p->t, a, &e);
        if (rc) {
            pthread_mutex_lock(&p->mu);
            if (!atomic_load(&p->rc)) p->err = e, atomic_store(&p->rc, rc);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int aa_train_range(aa_t *t, int64_t first, df_error_t *err)
{
    aa_pool_t p = {.t = t, .end = t->A};
    atomic_init(&p.next, first);
    atomic_init(&p.rc, 0);
    pthread_mutex_init(&p.mu, NULL);
    int nt = t->o->threads > 1 ? t->o->threads : 1;
    pthread_t th[64];
    int started = 0;
    if (nt > 64) nt = 64;
    for (int k = 1; k < nt; k++)
        if (!pthread_create(&th[started], NULL, aa_thread, &p)) started++;
    aa_thread(&p);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    pthread_mutex_destroy(&p.mu);
    int rc = atomic_load(&p.rc);
    if (rc && err) *err = p.err;
    return rc;
}

int df_rigapprox_add_anchors(const char *model_path, const df_rigdata_t *d, const df_raanchor_opts_t *o,
                             const char *out_path, df_error_t *err)
{
    if (!o || o->add < 1 || o->add > 1000000 || o->rounds < 1 || !(o->radius >= 0) || o->epochs < 1 || o->batch < 1 ||
        o->batch > 65536 || o->threads < 0 || o->threads > 64 || !(o->omega >= 0) || !(o->lr > 0) || !(o->val_frac > 0 && o->val_frac < 1))
        return df_error_set(err, DF_EINVAL, "add-anchors: an option is out of range");
    if (!strcmp(model_path, out_path))
        return df_error_set(err, DF_EINVAL, "add-anchors: write the model to another file than %s", model_path);
    df_st_t *st = NULL;
    df_ramodel_t m;
    int rc = df_st_open(model_path, NULL, &st, err);
    if (rc) return rc;
    if ((rc = df_ramodel_read(st, &m, err))) {
        df_st_close(&st);
        return rc;
    }
    aa_t t;
    memset(&t, 0, sizeof t);
    double *vmax = NULL;
    if (m.variant != DF_RA_OURS) {
        rc = df_error_set(err, DF_EINVAL, "add-anchors: the model is a '%s' model; anchors belong to 'ours'",
                          df_ramodel_variant_name(m.variant));
        goto done;
    }
    if (!m.parents) {
        rc = df_error_set(err, DF_EINVAL, "add-anchors: the model has world-matrix features (format_version 1, "
                                          "--world-features); retrain it with local features");
        goto done;
    }
    if (d->nv != m.nv || d->nj != m.nj || d->nc != m.nc) {
        rc = df_error_set(err, DF_EINVAL,
                          "add-anchors: the dataset (%lld vertices, %lld joints, %lld controls) is not the model's "
                          "(%lld, %lld, %lld)",
                          (long long)d->nv, (long long)d->nj, (long long)d->nc, (long long)m.nv, (long long)m.nj,
                          (long long)m.nc);
        goto done;
    }
    if (!d->influence) {
        rc = df_error_set(err, DF_EINVAL,
                          "add-anchors: the dataset has no influence scores (make it with deform rigdata "
                          "--influence-poses N, N > 0): they choose each new anchor's inputs");
        goto done;
    }
    t.d = d, t.o = o;
    t.N = d->n, t.V = m.nv, t.D = 3 * m.nv, t.F = m.nf;
    t.nval = (int64_t)llround(o->val_frac * t.N);
    if (t.nval < 1) t.nval = 1;
    if (t.N - t.nval < 2) {
        rc = df_error_set(err, DF_EINVAL, "add-anchors: %lld samples are too few", (long long)t.N);
        goto done;
    }
    int64_t A0 = m.na, Amax = m.na + o->add;
    t.order = malloc(sizeof(int64_t) * t.N);
    t.X = malloc(sizeof(float) * t.N * t.F);
    t.NL = malloc(sizeof(float) * t.N * t.D);
    t.anchors = malloc(sizeof(int32_t) * Amax);
    t.off = malloc(sizeof(int32_t) * (Amax + 1));
    t.idx = malloc(sizeof(int32_t) * (m.anc_off[A0] + (size_t)o->add * t.F));
    t.nets = calloc(Amax, sizeof(df_mlp_t *));
    vmax = malloc(sizeof(double) * t.V);
    float *T = malloc(sizeof(float) * 12 * t.V);
    if (!t.order || !t.X || !t.NL || !t.anchors || !t.off || !t.idx || !t.nets || !vmax || !T) {
        free(T);
        rc = df_error_set(err, DF_ENOMEM, "add-anchors: %lld samples x %lld values do not fit in memory",
                          (long long)t.N, (long long)t.D);
        goto done;
    }
    /* the trainer's split for the same seed: a seeded shuffle, validation first */
    df_rng_t r = {o->seed * 0x9e3779b97f4a7c15ULL + 1};
    for (int64_t i = 0; i < t.N; i++) t.order[i] = i;
    for (int64_t i = t.N - 1; i > 0; i--) {
        int64_t j = (int64_t)(df_rng_u64(&r) % (uint64_t)(i + 1)), x = t.order[i];
        t.order[i] = t.order[j], t.order[j] = x;
    }
    for (int64_t i = 0; i < t.N && !rc; i++) {
        int64_t s = t.order[i];
        const float *W = d->joints + s * d->nj * 12;
        if (df_ramodel_features(&m, W, d->nc ? d->controls + s * d->nc : NULL, t.X + i * t.F))
            rc = df_error_set(err, DF_EINVAL, "add-anchors: sample %lld has a singular parent joint matrix", (long long)s);
        df_rigapprox_linear_skin(m.dqs, t.V, d->nj, (int)d->k, d->invbind, d->skin_j, d->skin_w, 1, W, T);
        df_rigapprox_nonlinear(t.V, T, d->rest, d->positions + s * t.D, t.NL + i * t.D);
    }
    free(T);
    if (rc) goto done;
    /* the model's anchors first (their networks borrowed from st) */
    t.A = A0;
    memcpy(t.anchors, m.anchors, sizeof(int32_t) * A0);
    memcpy(t.off, m.anc_off, sizeof(int32_t) * (A0 + 1));
    memcpy(t.idx, m.anc_idx, sizeof(int32_t) * m.anc_off[A0]);
    for (int64_t a = 0; a < A0; a++) t.nets[a] = m.anc_nets[a];
    int dims[DF_MLP_MAX_LAYERS + 1], L;
    if (A0 > 0) { /* the new networks get the shape of the model's */
        L = m.anc_nets[0]->n_layers;
        for (int l = 0; l <= L; l++) dims[l] = m.anc_nets[0]->dims[l];
    } else {
        L = 4;
        for (int l = 1; l < L; l++) dims[l] = 64;
        dims[L] = 3;
    }
    double hgt = d->height > 0 ? d->height : 1, rad = o->radius * hgt, t0 = df__now_s();
    const char *cur = model_path;
    for (int round = 0; round <= o->rounds; round++) {
        double mean = 0, mx = 0;
        int64_t wv = 0;
        if ((rc = aa_errors(&t, cur, vmax, &mean, &mx, &wv, err))) goto done;
        if (o->verbose)
            fprintf(stderr, "add-anchors: %lld anchors: training set mean %.4f %%  max %.3f %% (vertex %lld)  %.0f s\n",
                    (long long)t.A, 100 * mean / hgt, 100 * mx / hgt, (long long)wv, df__now_s() - t0);
        if (round == o->rounds) break;
        int64_t want = (Amax - t.A + (o->rounds - round) - 1) / (o->rounds - round);
        int64_t first = t.A;
        for (int64_t k = 0; k < want; k++) { /* worst vertex not near an anchor */
            int64_t best = -1;
            for (int64_t v = 0; v < t.V; v++)
                if (vmax[v] > 0 && (best < 0 || vmax[v] > vmax[best])) best = v;
            if (best < 0) break;
            const float *p = d->rest + best * 3;
            int near = 0;
            for (int64_t a = 0; a < t.A && !near; a++) {
                const float *q = d->rest + (int64_t)t.anchors[a] * 3;
                double dd = sqrt((p[0] - q[0]) * (p[0] - q[0]) + (p[1] - q[1]) * (p[1] - q[1]) + (p[2] - q[2]) * (p[2] - q[2]));
                near = t.anchors[a] == best || dd <= rad;
            }
            vmax[best] = 0; /* considered */
            if (near) { k--; continue; }
            int64_t a = t.A;
            t.anchors[a] = (int32_t)best;
            t.off[a + 1] = t.off[a] + df__ra_anchor_inputs(d, m.parents, 0, (int32_t)best, t.idx + t.off[a]);
            dims[0] = t.off[a + 1] - t.off[a];
            if ((rc = df_mlp_new(L, dims, o->seed + 7919 + (uint64_t)best, &t.nets[a], err))) goto done;
            t.A++, t.n_own++;
        }
        if ((rc = aa_train_range(&t, first, err))) goto done;
        df_ramodel_t m2 = m;
        m2.na = t.A, m2.anchors = t.anchors, m2.anc_off = t.off, m2.anc_idx = t.idx, m2.anc_nets = t.nets;
        if (o->omega > 0) m2.omega = o->omega;
        float *alin = NULL, *alin_b = NULL;
        if (m.alin) { /* the model's anchors keep their linear path; the new ones have none */
            alin = calloc((size_t)3 * t.A * t.F, sizeof(float)), alin_b = calloc((size_t)3 * t.A, sizeof(float));
            if (!alin || !alin_b) {
                free(alin), free(alin_b);
                rc = df_error_set(err, DF_ENOMEM, "add-anchors: out of memory");
                goto done;
            }
            memcpy(alin, m.alin, sizeof(float) * 3 * A0 * t.F);
            memcpy(alin_b, m.alin_b, sizeof(float) * 3 * A0);
            m2.alin = alin, m2.alin_b = alin_b;
        }
        rc = df_ramodel_write(&m2, out_path, err);
        free(alin), free(alin_b);
        if (rc) goto done;
        cur = out_path;
        if (o->verbose)
            fprintf(stderr, "add-anchors: round %d/%d: %lld anchors added (%lld in all), networks trained  %.0f s\n",
                    round + 1, o->rounds, (long long)(t.A - first), (long long)t.A, df__now_s() - t0);
        if (t.A == first) break; /* no eligible vertex left */
    }
done:
    free(vmax);
    aa_free(&t);
    df_ramodel_release(&m);
    df_st_close(&st);
    return rc;
}

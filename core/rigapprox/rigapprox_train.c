/* rigapprox_train.c — training of rigapprox models (Song et al. 2020, 3.2-3.3)
 * in C with OpenBLAS.
 *
 * DESIGN
 * 1. Features (Eq. 9): 12 floats per world joint matrix + each control.
 *    Rotation entries are centred; all translations share one scale (their
 *    pooled standard deviation); each control is standardised on its own.
 * 2. Labels: v_nl = T_i^-1 p_i - v_i (Eq. 14) with T_i from the dataset's
 *    skin weights and joint matrices (Eq. 11; the paper probes a black box
 *    instead because it lacks the weights, we have them). OURS learns
 *    L_s v_nl (differential coordinates, L1 loss); LOCAL learns v_nl with the
 *    same network; PCALR fits v_nl's PCA coefficients by ridge regression.
 * 3. PCA layer: top P = pca_frac * V components of the training labels
 *    (randomised subspace iteration, GEMMs + a k x k eigenproblem), whitened
 *    so every coefficient has unit variance; the network outputs the
 *    coefficients and the L1 loss is taken on the full reconstructed labels.
 * 4. Anchors: anchor_frac * V vertices chosen by control influence (the
 *    dataset's `influence`, from perturbing each control around random
 *    poses; else the spread of v_nl), greedily spread (score x distance to
 *    the chosen ones), plus one per extra disconnected piece. One
 *    mini-network per anchor, fed only the features of the controls/joints
 *    that move it, L2 loss on its standardised v_nl.
 * 5. Loop: seeded shuffles, minibatches as GEMMs, Adam (or SGD momentum),
 *    learning rate decaying to 0.1x, validation split, best weights kept,
 *    early stopping, a progress line per epoch with ETA, checkpoint/resume
 *    (the data-derived parts are recomputed deterministically from the
 *    seed, the checkpoint holds the networks and optimiser state).
 * 6. Export: standardisation folded into the last layers / basis.
 */
#include "base/clock.h"
#include "math/laplacian.h"
#include "math/nn.h"
#include "rigapprox/rigapprox.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
            double *w, double *work, const int *lwork, int *info);

void df_ratrain_opts_default(df_ratrain_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->variant = DF_RA_OURS;
    o->n_hidden = 3;
    o->hidden = 256;
    o->anchor_hidden_layers = 3;
    o->anchor_width = 64;
    o->pca_frac = 0.05;
    o->anchor_frac = 0.02;
    o->omega = 1.0;
    o->piece_anchors = 3;
    o->epochs = 200;
    o->batch = 128;
    o->lr = 1e-3f;
    o->lr_anchor = 1e-3f;
    o->adam = 1;
    o->val_frac = 0.1;
    o->patience = 20;
    o->seed = 1;
    o->checkpoint_every = 10;
    o->verbose = 1;
}

/* Symmetric eigen-decomposition of k x k (row = column major). Ascending. */
static int eig(int k, double *a, double *w)
{
    int lwork = -1, info = 0;
    double q;
    dsyev_("V", "U", &k, a, &k, w, &q, &lwork, &info);
    lwork = (int)q;
    double *work = malloc(sizeof(double) * (lwork > 1 ? lwork : 1));
    if (!work) return -1;
    dsyev_("V", "U", &k, a, &k, w, work, &lwork, &info);
    free(work);
    return info;
}

/* Orthonormalise the k columns of M [rows,k] (row-major) in place. */
static int orth(int64_t rows, int k, float *M, float *tmp /* rows*k */)
{
    float *G = malloc(sizeof(float) * k * k);
    double *A = malloc(sizeof(double) * k * k), *w = malloc(sizeof(double) * k);
    float *T = malloc(sizeof(float) * k * k);
    int rc = -1;
    if (!G || !A || !w || !T) goto done;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, k, (int)rows, 1.0f, M, k, M, k, 0.0f, G, k);
    for (int i = 0; i < k * k; i++) A[i] = G[i];
    if (eig(k, A, w)) goto done;
    double wmax = w[k - 1] > 0 ? w[k - 1] : 1;
    /* T[i][j] = E[i][j] / sqrt(w_j); E column j is A[j*k + i] */
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
            T[i * k + j] = w[j] > 1e-12 * wmax ? (float)(A[j * k + i] / sqrt(w[j])) : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, k, k, 1.0f, M, k, T, k, 0.0f, tmp, k);
    memcpy(M, tmp, sizeof(float) * rows * k);
    rc = 0;
done:
    free(G), free(A), free(w), free(T);
    return rc;
}

/* PCA of Y [n,D] (centred rows): U [D,P] orthonormal, var [P] descending. */
static int pca(int64_t n, int64_t D, const float *Y, int P, uint64_t seed, float *U, double *var)
{
    int k = P + 10;
    if (k > n) k = (int)n;
    if (k > D) k = (int)D;
    if (P > k) P = k;
    float *Z = malloc(sizeof(float) * D * k), *Q = malloc(sizeof(float) * n * k);
    float *tz = malloc(sizeof(float) * D * k), *tq = malloc(sizeof(float) * n * k);
    double *S = malloc(sizeof(double) * k * k), *w = malloc(sizeof(double) * k);
    float *Sf = malloc(sizeof(float) * k * k);
    int rc = -1;
    if (!Z || !Q || !tz || !tq || !S || !w || !Sf) goto done;
    df_rng_t r = {seed ^ 0x5ca1ab1eULL};
    for (int64_t i = 0; i < D * k; i++) Z[i] = (float)df_rng_normal(&r);
    if (orth(D, k, Z, tz)) goto done;
    for (int it = 0; it < 4; it++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, k, (int)D, 1.0f, Y, (int)D, Z, k, 0.0f, Q, k);
        if (orth(n, k, Q, tq)) goto done;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)D, k, (int)n, 1.0f, Y, (int)D, Q, k, 0.0f, Z, k);
        if (orth(D, k, Z, tz)) goto done;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, k, (int)D, 1.0f, Y, (int)D, Z, k, 0.0f, Q, k);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, k, (int)n, 1.0f, Q, k, Q, k, 0.0f, Sf, k);
    for (int i = 0; i < k * k; i++) S[i] = Sf[i];
    if (eig(k, S, w)) goto done;
    /* U[:, p] = Z E[:, k-1-p] */
    for (int p = 0; p < P; p++) {
        int j = k - 1 - p;
        var[p] = w[j] > 0 ? w[j] / (double)n : 0;
        for (int i = 0; i < k; i++) Sf[i * P + p] = (float)S[j * k + i];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)D, P, k, 1.0f, Z, k, Sf, P, 0.0f, U, P);
    rc = P;
done:
    free(Z), free(Q), free(tz), free(tq), free(S), free(w), free(Sf);
    return rc;
}

/* ------------------------------------------------------------------ state */
typedef struct tr {
    const df_rigdata_t *d;
    const df_ratrain_opts_t *o;
    int64_t N, V, J, C, F, D, nval, ntr;
    int64_t *order;             /* row i <- sample order[i]; val rows first */
    float *X, *fmean, *fscale;  /* [N,F] */
    float *NL;                  /* [N,D] */
    float *Y, *mu;              /* [N,D] centred labels, [D] */
    int64_t P;
    float *Uw;                  /* [D,P] whitened basis */
    float *lin, *lin_b;         /* [P,F], [P] linear path (NULL: none) */
    float *alin, *alin_b;       /* [3A,F], [3A] the anchors' linear path (NULL: none) */
    float *ANL;                 /* [N,3A] anchor targets: v_nl at each anchor minus its linear path */
    int64_t A;
    int32_t *anchors, *aoff, *aidx;
    int32_t *par;               /* [J] inferred joint parents (-1: none) */
    float *amu, *asig;          /* [A,3] */
    df_lap_t *lap;
    df_mlp_t *net, *net_g, *net_best;
    df_mlp_opt_t opt;
    df_mlp_t **an, **an_g, **an_best;
    df_mlp_opt_t *aopt;
    double *a_best;             /* [A] best validation loss per anchor */
    double t_start;             /* df__now_s() at the start of training (time limit) */
} tr_t;

static void tr_free(tr_t *t)
{
    free(t->order), free(t->par), free(t->X), free(t->fmean), free(t->fscale), free(t->NL), free(t->Y), free(t->mu);
    free(t->Uw), free(t->lin), free(t->lin_b), free(t->alin), free(t->alin_b), free(t->ANL), free(t->anchors), free(t->aoff), free(t->aidx), free(t->amu), free(t->asig);
    df_lap_free(&t->lap);
    df_mlp_free(&t->net), df_mlp_free(&t->net_g), df_mlp_free(&t->net_best);
    df_mlp_opt_free(&t->opt);
    for (int64_t a = 0; t->an && a < t->A; a++) {
        df_mlp_free(&t->an[a]), df_mlp_free(&t->an_g[a]), df_mlp_free(&t->an_best[a]);
        df_mlp_opt_free(&t->aopt[a]);
    }
    free(t->an), free(t->an_g), free(t->an_best), free(t->aopt), free(t->a_best);
}

static int prepare_data(tr_t *t, df_error_t *err)
{
    const df_rigdata_t *d = t->d;
    int64_t N = t->N, F = t->F, J = t->J, C = t->C, V = t->V, D = t->D;
    t->order = malloc(sizeof(int64_t) * N);
    t->X = malloc(sizeof(float) * N * F);
    t->fmean = calloc(F, sizeof(float));
    t->fscale = malloc(sizeof(float) * F);
    t->NL = malloc(sizeof(float) * N * D);
    float *T = malloc(sizeof(float) * V * 12);
    if (!t->order || !t->X || !t->fmean || !t->fscale || !t->NL || !T) {
        free(T);
        return df_error_set(err, DF_ENOMEM, "train: %lld samples x %lld values do not fit in memory",
                            (long long)N, (long long)D);
    }
    df_rng_t r = {t->o->seed * 0x9e3779b97f4a7c15ULL + 1};
    for (int64_t i = 0; i < N; i++) t->order[i] = i;
    for (int64_t i = N - 1; i > 0; i--) {
        int64_t j = (int64_t)(df_rng_u64(&r) % (uint64_t)(i + 1)), x = t->order[i];
        t->order[i] = t->order[j], t->order[j] = x;
    }
    int bad = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t s = t->order[i];
        if (t->o->world_features) memcpy(t->X + i * F, d->joints + s * J * 12, sizeof(float) * J * 12);
        else df_rigapprox_local(J, t->par, d->joints + s * J * 12, t->X + i * F);
        if (C) memcpy(t->X + i * F + J * 12, d->controls + s * C, sizeof(float) * C);
        df_rigapprox_linear_skin(d->dqs, V, J, (int)d->k, d->invbind, d->skin_j, d->skin_w, 1, d->joints + s * J * 12, T);
        if (df_rigapprox_nonlinear(V, T, d->rest, d->positions + s * D, t->NL + i * D)) bad++;
    }
    free(T);
    if (bad && t->o->verbose) fprintf(stderr, "train: %d samples have singular T_i somewhere (v_nl set to 0 there)\n", bad);
    /* normalisation from the training rows. A feature that does not vary
     * over the training rows (sd below 1e-5 of its unit: 1 for rotation
     * entries, the height for translations, the range for controls) gets
     * scale 0: the networks cannot learn its effect, and feeding it only
     * passes poses outside the training set (e.g. the root moving in an
     * animation clip when the training poses keep it at rest) as noise. */
    int64_t n0 = t->nval, nt = t->ntr;
    double tsum2 = 0, h = d->height > 0 ? d->height : 1;
    int64_t tcount = 0;
    for (int64_t f = 0; f < F; f++) {
        double s = 0, s2 = 0;
        for (int64_t i = n0; i < N; i++) s += t->X[i * F + f];
        double m = s / nt;
        for (int64_t i = n0; i < N; i++) s2 += (t->X[i * F + f] - m) * (t->X[i * F + f] - m);
        t->fmean[f] = (float)m;
        int is_t = f < J * 12 && (f % 4) == 3;
        double sd = sqrt(s2 / nt), unit = is_t ? h : f < J * 12 ? 1 : (d->ctrl_range[(f - J * 12) * 3 + 1] - d->ctrl_range[(f - J * 12) * 3]);
        int constant = !(sd > 1e-5 * unit);
        if (is_t && !constant) tsum2 += s2, tcount += nt;
        t->fscale[f] = constant ? 0.0f : f < J * 12 ? 1.0f : (float)(1.0 / sd);
    }
    double tsd = tcount ? sqrt(tsum2 / tcount) : 0;
    for (int64_t f = 0; f < J * 12; f++)
        if (f % 4 == 3 && t->fscale[f] != 0) t->fscale[f] = (float)(1.0 / tsd);
    for (int64_t i = 0; i < N; i++)
        for (int64_t f = 0; f < F; f++) t->X[i * F + f] = (t->X[i * F + f] - t->fmean[f]) * t->fscale[f];
    return DF_OK;
}

int df__ra_joint_parents(int64_t ns, int64_t J, const float *joints, double scale, char *const *names,
                         int32_t *par, df_error_t *err)
{
    /* p fits j when j's head is fixed in p's frame: R_p^T (t_j - t_p)
     * constant over the samples. A joint whose head coincides with j's (a
     * sibling growing from the same point) fits too, with a zero offset: it
     * is dropped when a joint with a non-zero offset fits. Two fitting
     * candidates left (e.g. two joints that never move, so everything fits
     * both) make the hierarchy unknowable from the samples: refused. */
    double thr = 1e-8 * (scale * scale + 1e-12);
    int64_t amb_j = -1, amb_a = -1, amb_b = -1;
    for (int64_t j = 0; j < J; j++) {
        par[j] = -1;
        int64_t nz = -1, nz2 = -1, z = -1, z2 = -1;
        for (int64_t p = 0; p < J; p++) {
            if (p == j) continue;
            double m[3] = {0, 0, 0}, m2 = 0;
            for (int64_t n = 0; n < ns; n++) {
                const float *A_ = joints + (n * J + p) * 12, *B_ = joints + (n * J + j) * 12;
                double dt[3] = {B_[3] - A_[3], B_[7] - A_[7], B_[11] - A_[11]};
                for (int c = 0; c < 3; c++) {
                    double q = A_[0 + c] * dt[0] + A_[4 + c] * dt[1] + A_[8 + c] * dt[2];
                    m[c] += q, m2 += q * q;
                }
            }
            double off2 = (m[0] * m[0] + m[1] * m[1] + m[2] * m[2]) / ((double)ns * ns);
            double var = m2 / ns - off2;
            if (!(var < thr)) continue;
            if (off2 > 1e4 * thr) {
                if (nz < 0) nz = p; else if (nz2 < 0) nz2 = p;
            } else {
                if (z < 0) z = p; else if (z2 < 0) z2 = p;
            }
        }
        int64_t a = nz >= 0 ? nz : z, b = nz >= 0 ? nz2 : z2;
        par[j] = (int32_t)a;
        if (b >= 0 && amb_j < 0) amb_j = j, amb_a = a, amb_b = b;
    }
#define JN(j) (names && names[j] ? names[j] : "?")
    if (amb_j >= 0)
        return df_error_set(err, DF_EFORMAT,
                            "train: cannot infer the parent of joint %lld ('%s') from the samples: joints '%s' and '%s' "
                            "both carry it rigidly (joints that never move?). Write the hierarchy into the dataset "
                            "(tensor joint_parents: tools/blender/rig_export.py and deform rigdata write it)",
                            (long long)amb_j, JN(amb_j), JN(amb_a), JN(amb_b));
#undef JN
    int rc = df_rigdata_check_parents(J, par, names, err);
    if (rc) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        return df_error_set(err, DF_EFORMAT,
                            "train: the joint hierarchy inferred from the samples is wrong, %s. Write the hierarchy "
                            "into the dataset (tensor joint_parents: tools/blender/rig_export.py and deform rigdata "
                            "write it)", m);
    }
    return DF_OK;
}

/* Feature indices of the mini-network of anchor vertex v (idx: room for
 * 12 J + C), returns their count: the controls / joints whose influence on
 * v exceeds 1 % of the largest (paper section 3.2), with --world-features
 * also the parents of those joints; every feature when nothing moves v or
 * the dataset has no influence scores. */
int df__ra_anchor_inputs(const df_rigdata_t *d, const int32_t *par, int world_features, int32_t v, int32_t *idx)
{
    int64_t V = d->nv, C = d->nc, J = d->nj, NI = C + J, F = 12 * J + C;
    double mx = 0;
    if (d->influence)
        for (int64_t i = 0; i < NI; i++) mx = fmax(mx, d->influence[i * V + v]);
    int32_t o = 0;
    for (int64_t i = 0; i < NI; i++) {
        int use = !d->influence || (mx > 0 && d->influence[i * V + v] > 0.01 * mx);
        if (!use && i >= C && world_features) /* the parent of a used joint */
            for (int64_t k = 0; k < J && !use; k++)
                if (par[k] == i - C && d->influence[(C + k) * V + v] > 0.01 * mx) use = 1;
        if (!use) continue;
        if (i < C) idx[o++] = (int32_t)(J * 12 + i);
        else
            for (int e = 0; e < 12; e++) idx[o++] = (int32_t)((i - C) * 12 + e);
    }
    if (o == 0) /* nothing moves it: keep every feature */
        for (int64_t f = 0; f < F; f++) idx[o++] = (int32_t)f;
    return o;
}

/* Mean and standard deviation (floor 1e-7) of v_nl at vertex v over rows
 * [r0, r1) of NL [*, D]: the standardisation of an anchor's targets. */
void df__ra_anchor_stats(const float *NL, int64_t D, int64_t r0, int64_t r1, int32_t v, float *mu, float *sig)
{
    for (int c = 0; c < 3; c++) {
        double s = 0, s2 = 0;
        for (int64_t i = r0; i < r1; i++) s += NL[i * D + v * 3 + c];
        double m = s / (double)(r1 - r0);
        for (int64_t i = r0; i < r1; i++) {
            double q = NL[i * D + v * 3 + c] - m;
            s2 += q * q;
        }
        double sd = sqrt(s2 / (double)(r1 - r0));
        mu[c] = (float)m;
        sig[c] = sd > 1e-7 ? (float)sd : 1e-7f;
    }
}

/* Fold an anchor network's target standardisation into its last layer,
 * so it outputs v_nl itself (what the model file stores). */
void df__ra_anchor_fold(df_mlp_t *n, const float *mu, const float *sig)
{
    int L = n->n_layers - 1, ni = n->dims[L];
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < ni; i++) n->w[L][c * ni + i] *= sig[c];
        n->b[L][c] = n->b[L][c] * sig[c] + mu[c];
    }
}

static int choose_anchors(tr_t *t, df_error_t *err)
{
    const df_rigdata_t *d = t->d;
    int64_t V = t->V, NI = t->C + t->J;
    uint32_t *tw = NULL;
    int64_t ntw = 0;
    int rc = df_rigapprox_weld(V, d->rest, d->nt, d->tris, &tw, &ntw, err);
    if (rc) return rc;
    int32_t *comp = malloc(sizeof(int32_t) * V);
    double *score = malloc(sizeof(double) * V), *dist = malloc(sizeof(double) * V);
    int64_t ncomp = comp ? df_lap_components(V, ntw, tw, comp) : -1;
    free(tw);
    int64_t want = (int64_t)llround(t->o->anchor_frac * V);
    if (want < 1) want = 1;
    int64_t kp = t->o->piece_anchors > 1 ? t->o->piece_anchors : 1;
    int64_t *csize = ncomp > 0 ? calloc(ncomp, sizeof(int64_t)) : NULL, *cnt = ncomp > 0 ? calloc(ncomp, sizeof(int64_t)) : NULL;
    double *cw = ncomp > 0 ? calloc(ncomp, sizeof(double)) : NULL, *def = malloc(sizeof(double) * V);
    if (!comp || !score || !dist || ncomp < 1 || !csize || !cnt || !cw || !def) {
        free(comp), free(score), free(dist), free(csize), free(cnt), free(cw), free(def);
        return df_error_set(err, DF_ENOMEM, "train: out of memory (anchors)");
    }
    /* Deformation of each vertex: the summed influence of the controls and
     * joints (the exporter's perturbations, paper 3.2), else the spread of
     * its v_nl over the training poses. */
    double dmax = 0;
    for (int64_t v = 0; v < V; v++) {
        double s = 0;
        if (d->influence) {
            for (int64_t i = 0; i < NI; i++) s += d->influence[i * V + v];
        } else {
            for (int c = 0; c < 3; c++) {
                double m = 0, m2 = 0;
                for (int64_t n = t->nval; n < t->N; n++) {
                    double q = t->NL[n * t->D + v * 3 + c];
                    m += q, m2 += q * q;
                }
                m /= (double)t->ntr;
                s += fmax(0, m2 / (double)t->ntr - m * m);
            }
            s = sqrt(s);
        }
        def[v] = s;
        if (s > dmax) dmax = s;
    }
    for (int64_t v = 0; v < V; v++) {
        def[v] = (dmax > 0 ? def[v] / dmax : 0) + 0.02;
        score[v] = def[v];
    }
    /* Default: plain farthest-point spread within each shell (every score
     * 1). Weighting by influence (the paper's choice, --anchor-influence)
     * crowds the anchors where the rig acts and leaves wide regions where
     * the reconstruction drifts at low frequency: on Testwuson (5k poses)
     * mean error 1.45 % -> 0.84 % with the spread (docs/rigapprox.md). */
    if (!t->o->anchor_influence) for (int64_t v = 0; v < V; v++) score[v] = 1.0;
    /* Anchors per connected shell (seams welded), in proportion to its size
     * x deformation (the sum of def over its vertices): the shell with the
     * largest sum gets `want` (anchor_frac x V), every other one
     * want x its sum / that sum but at least kp (--piece-anchors); none
     * more than its vertex count. One anchor pins a shell's translation only; its
     * rotation against the skinning frame must then come from integrated
     * delta, whose errors grow away from the anchor, so small shells keep
     * three (Testwuson's tail spikes: random max 8.29 -> 6.88 %,
     * docs/rigapprox.md). Several similar shells (a character cut into
     * parts) each get their share instead of one taking them all. */
    for (int64_t v = 0; v < V; v++) csize[comp[v]]++, cw[comp[v]] += def[v];
    int64_t big = 0, total = 0;
    for (int64_t c = 1; c < ncomp; c++) if (cw[c] > cw[big]) big = c;
    for (int64_t c = 0; c < ncomp; c++) {
        int64_t k = c == big ? want : (int64_t)llround((double)want * cw[c] / cw[big]);
        if (c != big && k < kp) k = kp;
        if (k > csize[c]) k = csize[c];
        cnt[c] = k, total += k;
    }
    t->anchors = malloc(sizeof(int32_t) * (total + 1));
    if (!t->anchors) {
        free(comp), free(score), free(dist), free(csize), free(cnt), free(cw), free(def);
        return df_error_set(err, DF_ENOMEM, "train: out of memory (anchors)");
    }
    /* each shell, the heaviest first: its highest-scoring vertex, then by
     * score x distance to the shell's anchors chosen so far */
    int64_t A = 0;
    for (int64_t i = 0; i < ncomp; i++) {
        int64_t c = i == 0 ? big : i <= big ? i - 1 : i;
        for (int64_t v = 0; v < V; v++) dist[v] = INFINITY;
        for (int64_t k = 0; k < cnt[c]; k++) {
            int64_t best = -1;
            double bs = -1;
            for (int64_t v = 0; v < V; v++) {
                if (comp[v] != c) continue;
                double q = score[v] * (isinf(dist[v]) ? 1e30 : dist[v]);
                if (q > bs) bs = q, best = v;
            }
            if (best < 0 || (bs <= 0 && k > 0)) break;
            t->anchors[A++] = (int32_t)best;
            const float *p = d->rest + best * 3;
            for (int64_t v = 0; v < V; v++) {
                if (comp[v] != c) continue;
                const float *q = d->rest + v * 3;
                double dd = sqrt((p[0] - q[0]) * (p[0] - q[0]) + (p[1] - q[1]) * (p[1] - q[1]) + (p[2] - q[2]) * (p[2] - q[2]));
                if (dd < dist[v]) dist[v] = dd;
            }
        }
    }
    if (t->o->verbose && ncomp > 1) {
        int64_t order[4] = {-1, -1, -1, -1};
        for (int64_t c = 0; c < ncomp; c++) /* the four heaviest shells */
            for (int q = 0; q < 4; q++)
                if (order[q] < 0 || cw[c] > cw[order[q]]) {
                    for (int r = 3; r > q; r--) order[r] = order[r - 1];
                    order[q] = c;
                    break;
                }
        fprintf(stderr, "train: %lld anchors over %lld shells; heaviest:", (long long)A, (long long)ncomp);
        for (int q = 0; q < 4 && order[q] >= 0; q++)
            fprintf(stderr, " %lld on %lld vertices (weight %.3g)", (long long)cnt[order[q]], (long long)csize[order[q]],
                    cw[order[q]] / cw[big]);
        fprintf(stderr, "\n");
    }
    free(cnt), free(cw), free(def);
    t->A = A;
    free(csize), free(comp), free(score), free(dist);
    /* World features only (--world-features): v_nl lives in the skinning
     * frame, so a bend at joint j is a function of world_p^-1 world_j; an
     * anchor network fed only world_j (j flagged by influence, its parent p
     * not: moving p carries the skin rigidly) cannot tell the bend from the
     * parent's own motion, so it also gets p's features. With local
     * features (default) world_p^-1 world_j IS joint j's feature and the
     * influence of j (its local rotation perturbed) names it exactly. */
    const int32_t *par = t->par;
    /* inputs per anchor: the controls / joints that move it (+ their parents) */
    t->aoff = malloc(sizeof(int32_t) * (A + 1));
    t->aidx = malloc(sizeof(int32_t) * A * t->F);
    if (!t->aoff || !t->aidx) return df_error_set(err, DF_ENOMEM, "train: out of memory");
    int32_t o = 0;
    for (int64_t a = 0; a < A; a++) {
        t->aoff[a] = o;
        o += df__ra_anchor_inputs(d, par, t->o->world_features, t->anchors[a], t->aidx + o);
    }
    t->aoff[A] = o;
    return df_rigapprox_lap(V, d->rest, d->nt, d->tris, A, t->anchors, t->o->omega, &t->lap, err);
}

static int prepare_labels(tr_t *t, df_error_t *err)
{
    int64_t N = t->N, D = t->D;
    t->Y = malloc(sizeof(float) * N * D);
    t->mu = calloc(D, sizeof(float));
    if (!t->Y || !t->mu) return df_error_set(err, DF_ENOMEM, "train: out of memory (labels)");
    for (int64_t i = 0; i < N; i++) {
        if (t->o->variant == DF_RA_OURS) df_lap_apply(t->lap, 3, t->NL + i * D, t->Y + i * D);
        else memcpy(t->Y + i * D, t->NL + i * D, sizeof(float) * D);
    }
    double *acc = calloc(D, sizeof(double));
    if (!acc) return df_error_set(err, DF_ENOMEM, "train: out of memory");
    for (int64_t i = t->nval; i < N; i++)
        for (int64_t k = 0; k < D; k++) acc[k] += t->Y[i * D + k];
    for (int64_t k = 0; k < D; k++) t->mu[k] = (float)(acc[k] / t->ntr);
    free(acc);
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = 0; k < D; k++) t->Y[i * D + k] -= t->mu[k];
    int64_t P = (int64_t)llround(t->o->pca_frac * t->V);
    if (P < 1) P = 1;
    if (P > t->ntr - 1) P = t->ntr - 1;
    if (P < 1) P = 1;
    float *U = malloc(sizeof(float) * D * P);
    double *var = malloc(sizeof(double) * P);
    if (!U || !var) { free(U), free(var); return df_error_set(err, DF_ENOMEM, "train: out of memory (PCA)"); }
    /* OURS: the basis is either the PCs of the delta labels (the paper) or
     * the PCs of v_nl mapped through L_s. The latter spans the same delta
     * space dimension but keeps the low-frequency modes that the delta PCA
     * ranks low and the reconstruction amplifies (see docs/rigapprox.md). */
    int nl_basis = t->o->variant == DF_RA_OURS && !t->o->pca_delta;
    float *src = t->Y;
    float *numu = NULL;
    if (nl_basis) {
        numu = calloc(D, sizeof(float));
        if (!numu) { free(U), free(var); return df_error_set(err, DF_ENOMEM, "train: out of memory (PCA)"); }
        double *a2 = calloc(D, sizeof(double));
        if (!a2) { free(U), free(var), free(numu); return df_error_set(err, DF_ENOMEM, "train: out of memory"); }
        for (int64_t i = t->nval; i < N; i++)
            for (int64_t k = 0; k < D; k++) a2[k] += t->NL[i * D + k];
        for (int64_t k = 0; k < D; k++) numu[k] = (float)(a2[k] / t->ntr);
        free(a2);
        for (int64_t i = 0; i < N; i++) /* centred in place, restored below */
            for (int64_t k = 0; k < D; k++) t->NL[i * D + k] -= numu[k];
        src = t->NL;
    }
    int got = pca(t->ntr, D, src + t->nval * D, (int)P, t->o->seed, U, var);
    if (nl_basis) {
        for (int64_t i = 0; i < N; i++)
            for (int64_t k = 0; k < D; k++) t->NL[i * D + k] += numu[k];
        free(numu);
    }
    if (got < 1) { free(U), free(var); return df_error_set(err, DF_ENUMERIC, "train: PCA failed"); }
    if (got < P) { /* repack [D,got] */
        for (int64_t k = 0; k < D; k++) memmove(U + k * got, U + k * P, sizeof(float) * got);
        P = got;
    }
    t->P = P;
    t->Uw = U;
    for (int64_t k = 0; k < D; k++)
        for (int64_t p = 0; p < P; p++) U[k * P + p] *= (float)sqrt(var[p] > 1e-30 ? var[p] : 1e-30);
    free(var);
    if (nl_basis) { /* columns u_p -> L_s u_p */
        float *tmp = malloc(sizeof(float) * D * P), *col = malloc(sizeof(float) * D * 2);
        if (!tmp || !col) { free(tmp), free(col); return df_error_set(err, DF_ENOMEM, "train: out of memory (PCA)"); }
        for (int64_t p = 0; p < P; p++) {
            for (int64_t k = 0; k < D; k++) col[k] = U[k * P + p];
            df_lap_apply(t->lap, 3, col, col + D);
            for (int64_t k = 0; k < D; k++) tmp[k * P + p] = col[D + k];
        }
        memcpy(U, tmp, sizeof(float) * D * P);
        free(tmp), free(col);
    }
    return DF_OK;
}

/* Ridge regression of whitened PCA coefficients on the features (PCALR). */
static int fit_pcalr(tr_t *t, df_error_t *err)
{
    int64_t F = t->F, P = t->P, D = t->D, n = t->ntr;
    int64_t F1 = F + 1; /* bias column */
    double *A = calloc(F1 * F1, sizeof(double)), *Bm = calloc(F1 * P, sizeof(double));
    float *Z = malloc(sizeof(float) * n * P), *UtU = malloc(sizeof(float) * P * P);
    if (!A || !Bm || !Z || !UtU) { free(A), free(Bm), free(Z), free(UtU); return df_error_set(err, DF_ENOMEM, "train: out of memory"); }
    /* coefficients z = Y Uw (Uw^T Uw)^-1 ; Uw^T Uw is diagonal (var) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)P, (int)P, (int)D, 1.0f, t->Uw, (int)P, t->Uw, (int)P, 0.0f, UtU, (int)P);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)P, (int)D, 1.0f, t->Y + t->nval * D, (int)D, t->Uw, (int)P, 0.0f, Z, (int)P);
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < P; p++) Z[i * P + p] /= UtU[p * P + p] > 0 ? UtU[p * P + p] : 1;
    for (int64_t i = 0; i < n; i++) {
        const float *x = t->X + (t->nval + i) * F;
        for (int64_t a = 0; a < F1; a++) {
            double xa = a < F ? x[a] : 1.0;
            for (int64_t b = 0; b < F1; b++) A[a * F1 + b] += xa * (b < F ? x[b] : 1.0);
            for (int64_t p = 0; p < P; p++) Bm[a * P + p] += xa * Z[i * P + p];
        }
    }
    double tr = 0;
    for (int64_t a = 0; a < F; a++) tr += A[a * F1 + a];
    for (int64_t a = 0; a < F; a++) A[a * F1 + a] += 1e-4 * tr / F + 1e-9;
    A[F * F1 + F] += 1e-9;
    /* Cholesky solve */
    for (int64_t j = 0; j < F1; j++) {
        double s = A[j * F1 + j];
        for (int64_t k = 0; k < j; k++) s -= A[j * F1 + k] * A[j * F1 + k];
        if (!(s > 0)) { free(A), free(Bm), free(Z), free(UtU); return df_error_set(err, DF_ENUMERIC, "train: ridge system not positive definite"); }
        A[j * F1 + j] = sqrt(s);
        for (int64_t i = j + 1; i < F1; i++) {
            double q = A[i * F1 + j];
            for (int64_t k = 0; k < j; k++) q -= A[i * F1 + k] * A[j * F1 + k];
            A[i * F1 + j] = q / A[j * F1 + j];
        }
    }
    for (int64_t p = 0; p < P; p++) {
        for (int64_t i = 0; i < F1; i++) {
            double q = Bm[i * P + p];
            for (int64_t k = 0; k < i; k++) q -= A[i * F1 + k] * Bm[k * P + p];
            Bm[i * P + p] = q / A[i * F1 + i];
        }
        for (int64_t i = F1 - 1; i >= 0; i--) {
            double q = Bm[i * P + p];
            for (int64_t k = i + 1; k < F1; k++) q -= A[k * F1 + i] * Bm[k * P + p];
            Bm[i * P + p] = q / A[i * F1 + i];
        }
    }
    int dims[2] = {(int)F, (int)P};
    int rc = df_mlp_new(1, dims, t->o->seed, &t->net_best, err);
    if (!rc)
        for (int64_t p = 0; p < P; p++) {
            for (int64_t f = 0; f < F; f++) t->net_best->w[0][p * F + f] = (float)Bm[f * P + p];
            t->net_best->b[0][p] = (float)Bm[F * P + p];
        }
    free(A), free(Bm), free(Z), free(UtU);
    return rc;
}

/* The linear path (OURS, LOCAL; departure from the paper, docs/rigapprox.md):
 * ridge regression of each training row's PCA coefficients z (least squares
 * on the basis: z = (Uw^T Uw)^-1 Uw^T y) on the standardised features with a
 * bias, the fit of PCA + LR; every row's labels then lose what it explains,
 * Y -= Uw (lin x + lin_b), and the network learns the rest. The served
 * coefficients are net(x) + lin x + lin_b. Where the rig is close to linear
 * in its features (narrow sampling ranges) the network no longer has to
 * learn the large linear part from scratch. */
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
void dpotrs_(const char *uplo, const int *n, const int *nrhs, const double *a, const int *lda, double *b,
             const int *ldb, int *info);

static int fit_linear(tr_t *t, df_error_t *err)
{
    int64_t F = t->F, P = t->P, D = t->D, n = t->ntr, N = t->N, F1 = F + 1;
    double *gu = malloc(sizeof(double) * P * P), *Xd = malloc(sizeof(double) * n * F1);
    double *A = malloc(sizeof(double) * F1 * F1), *Bt = malloc(sizeof(double) * F1 * P), *Zd = malloc(sizeof(double) * n * P);
    float *Gf = malloc(sizeof(float) * P * P), *Z = malloc(sizeof(float) * N * P);
    t->lin = malloc(sizeof(float) * P * F), t->lin_b = malloc(sizeof(float) * P);
    int rc = DF_OK, info = 0, np = (int)P, nf1 = (int)F1, nn = (int)n;
    if (!gu || !Xd || !A || !Bt || !Zd || !Gf || !Z || !t->lin || !t->lin_b) {
        rc = df_error_set(err, DF_ENOMEM, "train: out of memory (linear path)");
        goto done;
    }
    /* coefficients of the training rows: Zd = Y Uw (Uw^T Uw)^-1. Row-major
     * Zd [n,P] is column-major [P,n]: dpotrs solves gu X = (Y Uw)^T in place */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)P, (int)P, (int)D, 1.0f, t->Uw, (int)P, t->Uw, (int)P, 0.0f,
                Gf, (int)P);
    for (int64_t k = 0; k < P * P; k++) gu[k] = Gf[k];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nn, (int)P, (int)D, 1.0f, t->Y + t->nval * D, (int)D, t->Uw,
                (int)P, 0.0f, Z, (int)P);
    for (int64_t k = 0; k < n * P; k++) Zd[k] = Z[k];
    double tr = 0;
    for (int64_t p = 0; p < P; p++) tr += gu[p * P + p];
    for (int64_t p = 0; p < P; p++) gu[p * P + p] += 1e-9 * tr / P;
    dpotrf_("U", &np, gu, &np, &info);
    if (!info) dpotrs_("U", &np, &nn, gu, &np, Zd, &np, &info);
    if (info) {
        rc = df_error_set(err, DF_ENUMERIC, "train: the PCA basis is singular (linear path)");
        goto done;
    }
    /* ridge (1e-4 of the mean feature variance, as PCA + LR) with a bias column */
    for (int64_t i = 0; i < n; i++) {
        for (int64_t f = 0; f < F; f++) Xd[i * F1 + f] = t->X[(t->nval + i) * F + f];
        Xd[i * F1 + F] = 1.0;
    }
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)F1, nn, 1.0, Xd, (int)F1, 0.0, A, (int)F1);
    /* Bt [P,F1] = Zd^T Xd: row-major Bt is column-major [F1,P], the right-hand sides of dpotrs */
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)P, (int)F1, nn, 1.0, Zd, (int)P, Xd, (int)F1, 0.0, Bt,
                (int)F1);
    tr = 0;
    for (int64_t f = 0; f < F; f++) tr += A[f * F1 + f];
    for (int64_t f = 0; f < F; f++) A[f * F1 + f] += 1e-4 * tr / F + 1e-9;
    A[F * F1 + F] += 1e-9;
    /* row-major upper = column-major lower */
    dpotrf_("L", &nf1, A, &nf1, &info);
    if (!info) dpotrs_("L", &nf1, &np, A, &nf1, Bt, &nf1, &info);
    if (info) {
        rc = df_error_set(err, DF_ENUMERIC, "train: ridge system not positive definite (linear path)");
        goto done;
    }
    for (int64_t p = 0; p < P; p++) {
        for (int64_t f = 0; f < F; f++) t->lin[p * F + f] = (float)Bt[p * F1 + f];
        t->lin_b[p] = (float)Bt[p * F1 + F];
    }
    /* OURS: the anchors' linear path, the same ridge system for the v_nl of
     * every anchor vertex (3A right-hand sides) */
    if (t->A > 0) {
        int64_t A3 = 3 * t->A;
        int na3 = (int)A3;
        double *Tb = malloc(sizeof(double) * n * A3), *Ct = malloc(sizeof(double) * F1 * A3);
        t->alin = malloc(sizeof(float) * A3 * F), t->alin_b = malloc(sizeof(float) * A3);
        if (!Tb || !Ct || !t->alin || !t->alin_b) {
            free(Tb), free(Ct);
            rc = df_error_set(err, DF_ENOMEM, "train: out of memory (anchors' linear path)");
            goto done;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t a = 0; a < t->A; a++)
                for (int c = 0; c < 3; c++) Tb[i * A3 + a * 3 + c] = t->NL[(t->nval + i) * D + t->anchors[a] * 3 + c];
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, na3, (int)F1, nn, 1.0, Tb, na3, Xd, (int)F1, 0.0, Ct,
                    (int)F1);
        dpotrs_("L", &nf1, &na3, A, &nf1, Ct, &nf1, &info);
        for (int64_t k = 0; k < A3; k++) {
            for (int64_t f = 0; f < F; f++) t->alin[k * F + f] = (float)Ct[k * F1 + f];
            t->alin_b[k] = (float)Ct[k * F1 + F];
        }
        free(Tb), free(Ct);
        if (info) {
            rc = df_error_set(err, DF_ENUMERIC, "train: ridge solve failed (anchors' linear path)");
            goto done;
        }
    }
    /* every row's labels lose the linear path: Y -= (X lin^T + lin_b) Uw^T */
    for (int64_t i = 0; i < N; i++) memcpy(Z + i * P, t->lin_b, sizeof(float) * P);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)P, (int)F, 1.0f, t->X, (int)F, t->lin, (int)F, 1.0f, Z,
                (int)P);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)D, (int)P, -1.0f, Z, (int)P, t->Uw, (int)P, 1.0f, t->Y,
                (int)D);
done:
    if (rc) {
        free(t->lin), free(t->lin_b), free(t->alin), free(t->alin_b);
        t->lin = t->lin_b = t->alin = t->alin_b = NULL;
    }
    free(gu), free(Xd), free(A), free(Bt), free(Zd), free(Gf), free(Z);
    return rc;
}

/* The anchor networks' targets: v_nl at each anchor vertex, minus the
 * anchors' linear path when there is one. */
static int anchor_targets(tr_t *t, df_error_t *err)
{
    int64_t N = t->N, A3 = 3 * t->A, F = t->F, D = t->D;
    t->ANL = malloc(sizeof(float) * N * (A3 ? A3 : 1));
    if (!t->ANL) return df_error_set(err, DF_ENOMEM, "train: out of memory (anchor targets)");
    for (int64_t i = 0; i < N; i++)
        for (int64_t a = 0; a < t->A; a++)
            for (int c = 0; c < 3; c++) t->ANL[i * A3 + a * 3 + c] = t->NL[i * D + t->anchors[a] * 3 + c];
    if (t->alin) {
        for (int64_t i = 0; i < N; i++)
            for (int64_t k = 0; k < A3; k++) t->ANL[i * A3 + k] -= t->alin_b[k];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)A3, (int)F, -1.0f, t->X, (int)F, t->alin, (int)F,
                    1.0f, t->ANL, (int)A3);
    }
    return DF_OK;
}

/* ------------------------------------------------------------ checkpoint */
static int ck_add(df_st_writer_t *w, const char *pre, const df_mlp_t *n)
{
    int rc = 0;
    char nm[96];
    for (int l = 0; l < n->n_layers; l++) {
        int64_t sw[1] = {(int64_t)n->dims[l + 1] * n->dims[l]}, sb[1] = {n->dims[l + 1]};
        snprintf(nm, sizeof nm, "%s/%d/w", pre, l);
        rc |= df_st_writer_add(w, nm, DF_DT_F32, 1, sw, n->w[l]);
        snprintf(nm, sizeof nm, "%s/%d/b", pre, l);
        rc |= df_st_writer_add(w, nm, DF_DT_F32, 1, sb, n->b[l]);
    }
    return rc;
}

static int ck_get(const df_st_t *st, const char *pre, df_mlp_t *n, df_error_t *err)
{
    char nm[96];
    for (int l = 0; l < n->n_layers; l++) {
        const df_tensor_t *t;
        int64_t sw[1] = {(int64_t)n->dims[l + 1] * n->dims[l]}, sb[1] = {n->dims[l + 1]};
        snprintf(nm, sizeof nm, "%s/%d/w", pre, l);
        int rc = df_st_require(st, nm, DF_DT_F32, 1, sw, 0, &t, err);
        if (rc) return rc;
        memcpy(n->w[l], t->data, t->nbytes);
        snprintf(nm, sizeof nm, "%s/%d/b", pre, l);
        if ((rc = df_st_require(st, nm, DF_DT_F32, 1, sb, 0, &t, err))) return rc;
        memcpy(n->b[l], t->data, t->nbytes);
    }
    return DF_OK;
}

typedef struct ck_state {
    int epoch, bad;
    double best_d, best_a;
    uint64_t rng;
} ck_state_t;

static int ck_save(tr_t *t, const ck_state_t *s, df_error_t *err)
{
    df_st_writer_t *w = df_st_writer_new();
    if (!w) return df_error_set(err, DF_ENOMEM, "checkpoint: out of memory");
    char b[256], pre[64];
    int rc = 0;
    snprintf(b, sizeof b, "%d %d %.17g %.17g %llu %lld %lld %lld", s->epoch, s->bad, s->best_d, s->best_a,
             (unsigned long long)s->rng, (long long)t->opt.t, (long long)t->P, (long long)t->A);
    rc |= df_st_writer_meta(w, "state", b);
    if (t->net) {
        rc |= ck_add(w, "net", t->net) | ck_add(w, "net_m1", t->opt.m1) | ck_add(w, "net_best", t->net_best);
        if (t->opt.m2) rc |= ck_add(w, "net_m2", t->opt.m2);
    }
    for (int64_t a = 0; t->an && a < t->A; a++) {
        snprintf(pre, sizeof pre, "a%lld", (long long)a);
        rc |= ck_add(w, pre, t->an[a]);
        snprintf(pre, sizeof pre, "a%lld_m1", (long long)a);
        rc |= ck_add(w, pre, t->aopt[a].m1);
        if (t->aopt[a].m2) {
            snprintf(pre, sizeof pre, "a%lld_m2", (long long)a);
            rc |= ck_add(w, pre, t->aopt[a].m2);
        }
        snprintf(pre, sizeof pre, "a%lld_best", (long long)a);
        rc |= ck_add(w, pre, t->an_best[a]);
        int64_t s1[1] = {1};
        double fb = t->a_best[a];
        snprintf(pre, sizeof pre, "a%lld_bestloss", (long long)a);
        rc |= df_st_writer_add(w, pre, DF_DT_F64, 1, s1, &fb);
    }
    if (rc) { df_st_writer_free(&w); return df_error_set(err, DF_ENOMEM, "checkpoint: out of memory"); }
    rc = df_st_writer_save(w, t->o->checkpoint, err);
    df_st_writer_free(&w);
    return rc;
}

static int ck_load(tr_t *t, ck_state_t *s, df_error_t *err)
{
    df_st_t *st = NULL;
    int rc = df_st_open(t->o->checkpoint, NULL, &st, err);
    if (rc) return rc;
    const char *b = df_st_meta(st, "state");
    unsigned long long rng;
    long long ot, P, A;
    if (!b || sscanf(b, "%d %d %lf %lf %llu %lld %lld %lld", &s->epoch, &s->bad, &s->best_d, &s->best_a, &rng, &ot,
                     &P, &A) != 8 || P != t->P || A != t->A) {
        df_st_close(&st);
        return df_error_set(err, DF_EFORMAT, "checkpoint %s does not match this dataset/options", t->o->checkpoint);
    }
    s->rng = rng;
    char pre[64];
    if (t->net) {
        t->opt.t = ot;
        if ((rc = ck_get(st, "net", t->net, err)) || (rc = ck_get(st, "net_m1", t->opt.m1, err)) ||
            (rc = ck_get(st, "net_best", t->net_best, err)) ||
            (t->opt.m2 && (rc = ck_get(st, "net_m2", t->opt.m2, err))))
            goto done;
    }
    for (int64_t a = 0; t->an && a < t->A; a++) {
        t->aopt[a].t = ot;
        snprintf(pre, sizeof pre, "a%lld", (long long)a);
        if ((rc = ck_get(st, pre, t->an[a], err))) goto done;
        snprintf(pre, sizeof pre, "a%lld_m1", (long long)a);
        if ((rc = ck_get(st, pre, t->aopt[a].m1, err))) goto done;
        if (t->aopt[a].m2) {
            snprintf(pre, sizeof pre, "a%lld_m2", (long long)a);
            if ((rc = ck_get(st, pre, t->aopt[a].m2, err))) goto done;
        }
        snprintf(pre, sizeof pre, "a%lld_best", (long long)a);
        if ((rc = ck_get(st, pre, t->an_best[a], err))) goto done;
        snprintf(pre, sizeof pre, "a%lld_bestloss", (long long)a);
        const df_tensor_t *bt = df_st_find(st, pre);
        t->a_best[a] = bt && bt->dtype == DF_DT_F64 ? ((const double *)bt->data)[0] : INFINITY;
    }
done:
    df_st_close(&st);
    return rc;
}

/* ------------------------------------------------------------ main loop */
static int build_nets(tr_t *t, df_error_t *err)
{
    const df_ratrain_opts_t *o = t->o;
    int rc;
    if (o->variant == DF_RA_OURS || o->variant == DF_RA_LOCAL) {
        int dims[DF_MLP_MAX_LAYERS + 1], L = o->n_hidden + 1;
        dims[0] = (int)t->F;
        for (int l = 1; l < L; l++) dims[l] = o->hidden;
        dims[L] = (int)t->P;
        if ((rc = df_mlp_new(L, dims, o->seed, &t->net, err)) || (rc = df_mlp_new_like(t->net, &t->net_g, err)) ||
            (rc = df_mlp_new_like(t->net, &t->net_best, err)) ||
            (rc = df_mlp_opt_init(&t->opt, t->net, o->adam, o->lr, err)))
            return rc;
        df_mlp_copy(t->net_best, t->net);
    }
    if (o->variant == DF_RA_OURS) {
        int64_t A = t->A;
        t->an = calloc(A, sizeof(df_mlp_t *));
        t->an_g = calloc(A, sizeof(df_mlp_t *));
        t->an_best = calloc(A, sizeof(df_mlp_t *));
        t->aopt = calloc(A, sizeof(df_mlp_opt_t));
        t->a_best = malloc(sizeof(double) * A);
        t->amu = calloc(A * 3, sizeof(float));
        t->asig = malloc(sizeof(float) * A * 3);
        if (!t->an || !t->an_g || !t->an_best || !t->aopt || !t->a_best || !t->amu || !t->asig)
            return df_error_set(err, DF_ENOMEM, "train: out of memory");
        for (int64_t a = 0; a < A; a++) {
            int dims[DF_MLP_MAX_LAYERS + 1], L = o->anchor_hidden_layers + 1;
            dims[0] = t->aoff[a + 1] - t->aoff[a];
            for (int l = 1; l < L; l++) dims[l] = o->anchor_width;
            dims[L] = 3;
            if ((rc = df_mlp_new(L, dims, o->seed + 1000 + (uint64_t)a, &t->an[a], err)) ||
                (rc = df_mlp_new_like(t->an[a], &t->an_g[a], err)) ||
                (rc = df_mlp_new_like(t->an[a], &t->an_best[a], err)) ||
                (rc = df_mlp_opt_init(&t->aopt[a], t->an[a], o->adam, o->lr_anchor, err)))
                return rc;
            df_mlp_copy(t->an_best[a], t->an[a]);
            t->a_best[a] = INFINITY;
            df__ra_anchor_stats(t->ANL, 3 * A, t->nval, t->N, (int32_t)a, t->amu + a * 3, t->asig + a * 3);
        }
    }
    return DF_OK;
}

/* One pass over rows [r0, r0+n) in batches; train when opt != 0.
 * Returns mean diff L1 in *ld and mean anchor L2 in *la. */
static int run_rows(tr_t *t, const int64_t *rows, int64_t n, int train, float lr_scale, double *ld,
                    double *la, float *buf, size_t nbuf)
{
    const df_ratrain_opts_t *o = t->o;
    int64_t F = t->F, D = t->D, P = t->P;
    int Bmax = o->batch;
    float *X = buf, *Yb = X + (size_t)Bmax * F, *pred = Yb + (size_t)Bmax * D, *gz = pred + (size_t)Bmax * D;
    float *act = gz + (size_t)Bmax * P;
    size_t wf = t->net ? df_mlp_work_floats(t->net, Bmax) : 0;
    float *tmp = act + wf;
    float *xa = tmp + wf; /* anchors reuse: Xa [B,F], targets, acts */
    DF_ASSERT((size_t)(xa - buf) + (size_t)Bmax * (F + 6) + 4 * (size_t)Bmax * (o->anchor_width + 3) * (o->anchor_hidden_layers + 1) <= nbuf);
    double sd = 0, sa = 0;
    int64_t nd = 0, na = 0;
    for (int64_t s = 0; s < n; s += Bmax) {
        int B = (int)(n - s < Bmax ? n - s : Bmax);
        for (int b = 0; b < B; b++) memcpy(X + (size_t)b * F, t->X + rows[s + b] * F, sizeof(float) * F);
        if (t->net) {
            for (int b = 0; b < B; b++) memcpy(Yb + (size_t)b * D, t->Y + rows[s + b] * D, sizeof(float) * D);
            float *z = df_mlp_forward(t->net, B, X, act);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)D, (int)P, 1.0f, z, (int)P, t->Uw, (int)P,
                        0.0f, pred, (int)D);
            sd += df_loss_l1((int64_t)B * D, pred, Yb, train ? pred : NULL) * B * D;
            nd += (int64_t)B * D;
            if (train) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, (int)P, (int)D, 1.0f, pred, (int)D, t->Uw,
                            (int)P, 0.0f, gz, (int)P);
                df_mlp_zero(t->net_g);
                df_mlp_backward(t->net, B, X, act, gz, t->net_g, NULL, tmp);
                t->opt.lr = o->lr * lr_scale;
                df_mlp_opt_step(&t->opt, t->net, t->net_g);
            }
        }
        for (int64_t a = 0; t->an && a < t->A; a++) {
            int ni = t->aoff[a + 1] - t->aoff[a];
            const int32_t *idx = t->aidx + t->aoff[a];
            float *Xa = xa, *ta = Xa + (size_t)B * ni, *ga = ta + (size_t)B * 3, *aact = ga + (size_t)B * 3;
            size_t awf = df_mlp_work_floats(t->an[a], B);
            float *atmp = aact + awf;
            for (int b = 0; b < B; b++) {
                const float *xr = t->X + rows[s + b] * F;
                for (int i = 0; i < ni; i++) Xa[(size_t)b * ni + i] = xr[idx[i]];
                for (int c = 0; c < 3; c++)
                    ta[b * 3 + c] = (t->ANL[rows[s + b] * 3 * t->A + a * 3 + c] - t->amu[a * 3 + c]) / t->asig[a * 3 + c];
            }
            float *y = df_mlp_forward(t->an[a], B, Xa, aact);
            sa += df_loss_l2((int64_t)B * 3, y, ta, train ? ga : NULL) * B * 3;
            na += (int64_t)B * 3;
            if (train) {
                df_mlp_zero(t->an_g[a]);
                df_mlp_backward(t->an[a], B, Xa, aact, ga, t->an_g[a], NULL, atmp);
                t->aopt[a].lr = o->lr_anchor * lr_scale;
                df_mlp_opt_step(&t->aopt[a], t->an[a], t->an_g[a]);
            }
        }
    }
    *ld = nd ? sd / nd : 0;
    *la = na ? sa / na : 0;
    return 0;
}

/* Per-anchor validation loss (for keeping each anchor's best weights). */
static void anchor_val(tr_t *t, int64_t a, const int64_t *rows, int64_t n, float *buf, double *out)
{
    int ni = t->aoff[a + 1] - t->aoff[a];
    const int32_t *idx = t->aidx + t->aoff[a];
    int Bmax = t->o->batch;
    float *Xa = buf, *ta = Xa + (size_t)Bmax * ni, *aact = ta + (size_t)Bmax * 3;
    double s = 0;
    for (int64_t q = 0; q < n; q += Bmax) {
        int B = (int)(n - q < Bmax ? n - q : Bmax);
        for (int b = 0; b < B; b++) {
            const float *xr = t->X + rows[q + b] * t->F;
            for (int i = 0; i < ni; i++) Xa[(size_t)b * ni + i] = xr[idx[i]];
            for (int c = 0; c < 3; c++)
                ta[b * 3 + c] = (t->ANL[rows[q + b] * 3 * t->A + a * 3 + c] - t->amu[a * 3 + c]) / t->asig[a * 3 + c];
        }
        float *y = df_mlp_forward(t->an[a], B, Xa, aact);
        s += df_loss_l2((int64_t)B * 3, y, ta, NULL) * B * 3;
    }
    *out = s / (3.0 * n);
}

/* Position-space refit of the differential network's last layer (OURS).
 * The network is trained with the paper's L1 loss on delta, but what is
 * served is the reconstruction v = G z + H a + g0 (G = A^-1 L_s^T U,
 * H = w^2 A^-1 S^T, g0 = A^-1 L_s^T mu), which amplifies low-frequency delta
 * errors and takes the anchors' own errors. With the hidden features h and
 * the predicted anchors a fixed, min sum |G (W h + b) - (v_nl - g0 - H a)|^2
 * over (W, b) is linear least squares; with one design matrix for every
 * output its solution is ridge regression of z* = (G^T G)^-1 G^T r on [h, 1]
 * (the metric G^T G drops out). Kept only if the validation position error
 * (mean per-vertex distance) drops; *before / *after report it. */
int dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda, double *b, const int *ldb,
           int *info);

static void anchors_predict(tr_t *t, int B, const float *X, float *apos /* [A,3] per row: [B,A*3] */, float *buf)
{
    for (int64_t a = 0; a < t->A; a++) {
        int ni = t->aoff[a + 1] - t->aoff[a];
        const int32_t *idx = t->aidx + t->aoff[a];
        float *Xa = buf, *aact = Xa + (size_t)B * ni;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < ni; i++) Xa[(size_t)b * ni + i] = X[(size_t)b * t->F + idx[i]];
        float *y = df_mlp_forward(t->an_best[a], B, Xa, aact);
        for (int b = 0; b < B; b++)
            for (int c = 0; c < 3; c++) {
                float q = y[b * 3 + c] * t->asig[a * 3 + c] + t->amu[a * 3 + c];
                if (t->alin) { /* the anchors' linear path */
                    const float *w = t->alin + (a * 3 + c) * t->F, *x = X + (size_t)b * t->F;
                    float l = t->alin_b[a * 3 + c];
                    for (int64_t f = 0; f < t->F; f++) l += w[f] * x[f];
                    q += l;
                }
                apos[(size_t)b * t->A * 3 + a * 3 + c] = q;
            }
    }
}

/* Streaming normal equations of the refit: rows (h, r) are added in
 * batches; z* = (G^T G + eps)^-1 G^T r per row, then ridge regression of
 * z* on [h, 1] (ridge relative to tr(h^T h) / Hd, not on the bias). */
typedef struct refit_acc {
    int Hd, H1;
    int64_t P, D;
    const float *G;             /* [D,P] */
    double *GtG, *HtH, *HtZ;    /* [P,P], [H1,H1], [H1,P] */
    float *Zs, *hb;             /* [Bm,P], [Bm,H1] */
    int Bm;
} refit_acc_t;

static void refit_end(refit_acc_t *a)
{
    free(a->GtG), free(a->HtH), free(a->HtZ), free(a->Zs), free(a->hb);
    memset(a, 0, sizeof *a);
}

static int refit_begin(refit_acc_t *a, int Hd, int64_t D, int64_t P, const float *G, int Bm, df_error_t *err)
{
    memset(a, 0, sizeof *a);
    a->Hd = Hd, a->H1 = Hd + 1, a->P = P, a->D = D, a->G = G, a->Bm = Bm;
    a->GtG = calloc(P * P, sizeof(double));
    a->HtH = calloc((size_t)a->H1 * a->H1, sizeof(double));
    a->HtZ = calloc((size_t)a->H1 * P, sizeof(double));
    a->Zs = malloc(sizeof(float) * Bm * P);
    a->hb = malloc(sizeof(float) * Bm * a->H1);
    float *Gf = malloc(sizeof(float) * P * P);
    if (!a->GtG || !a->HtH || !a->HtZ || !a->Zs || !a->hb || !Gf) {
        free(Gf), refit_end(a);
        return df_error_set(err, DF_ENOMEM, "train: out of memory (refit)");
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)P, (int)P, (int)D, 1.0f, G, (int)P, G, (int)P, 0.0f, Gf, (int)P);
    for (int64_t i = 0; i < P * P; i++) a->GtG[i] = Gf[i];
    free(Gf);
    double gtr = 0;
    for (int64_t p = 0; p < P; p++) gtr += a->GtG[p * P + p];
    for (int64_t p = 0; p < P; p++) a->GtG[p * P + p] += 1e-6 * gtr / P + 1e-30;
    return DF_OK;
}

/* B <= Bm rows: h [B,Hd], R [B,D]. */
static void refit_add(refit_acc_t *a, int B, const float *h, const float *R)
{
    int Hd = a->Hd, H1 = a->H1;
    int64_t P = a->P;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, (int)P, (int)a->D, 1.0f, R, (int)a->D, a->G, (int)P, 0.0f,
                a->Zs, (int)P);
    for (int b = 0; b < B; b++) {
        memcpy(a->hb + (size_t)b * H1, h + (size_t)b * Hd, sizeof(float) * Hd);
        a->hb[(size_t)b * H1 + Hd] = 1.0f;
    }
    for (int i = 0; i < H1; i++)
        for (int b = 0; b < B; b++) {
            double hv = a->hb[(size_t)b * H1 + i];
            if (hv == 0) continue;
            double *row = a->HtH + (size_t)i * H1;
            const float *hr = a->hb + (size_t)b * H1;
            for (int j = 0; j < H1; j++) row[j] += hv * hr[j];
            double *zr = a->HtZ + (size_t)i * P;
            const float *zs = a->Zs + (size_t)b * P;
            for (int64_t p = 0; p < P; p++) zr[p] += hv * zs[p];
        }
}

/* Solve: W [P,Hd], bias [P]. Consumes the accumulated systems. */
static int refit_solve(refit_acc_t *a, double ridge, float *Wn, float *bn, df_error_t *err)
{
    int Hd = a->Hd, H1 = a->H1;
    int64_t P = a->P;
    /* z* coefficients: HtZ (G^T G)^-1, i.e. solve GtG X^T = HtZ^T */
    int np = (int)P, nr = H1, info = 0;
    double *Tt = malloc(sizeof(double) * P * H1), *T2 = malloc(sizeof(double) * P * H1);
    if (!Tt || !T2) { free(Tt), free(T2); return df_error_set(err, DF_ENOMEM, "train: out of memory (refit)"); }
    memcpy(Tt, a->HtZ, sizeof(double) * P * H1);
    dposv_("U", &np, &nr, a->GtG, &np, Tt, &np, &info); /* column-major: P x H1 columns = rows of Tt */
    if (info) { free(Tt), free(T2); return df_error_set(err, DF_ENUMERIC, "train: refit: G^T G not positive definite"); }
    double htr = 0;
    for (int i = 0; i < Hd; i++) htr += a->HtH[(size_t)i * H1 + i];
    for (int i = 0; i < Hd; i++) a->HtH[(size_t)i * H1 + i] += ridge * htr / (Hd ? Hd : 1) + 1e-9;
    a->HtH[(size_t)Hd * H1 + Hd] += 1e-9;
    for (int i = 0; i < H1; i++) /* column-major [H1, P] */
        for (int64_t p = 0; p < P; p++) T2[(size_t)p * H1 + i] = Tt[(size_t)i * P + p];
    int nh = H1;
    dposv_("U", &nh, &np, a->HtH, &nh, T2, &nh, &info);
    if (info) { free(Tt), free(T2); return df_error_set(err, DF_ENUMERIC, "train: refit: feature system not positive definite"); }
    /* T2 column p (stride H1): weights of output p, bias last */
    for (int64_t p = 0; p < P; p++) {
        for (int j = 0; j < Hd; j++) Wn[p * Hd + j] = (float)T2[(size_t)p * H1 + j];
        bn[p] = (float)T2[(size_t)p * H1 + Hd];
    }
    free(Tt), free(T2);
    return DF_OK;
}

int df__ra_refit_solve(int64_t n, int Hd, const float *h, int64_t D, const float *r, int64_t P,
                       const float *G, double ridge, float *W, float *b, df_error_t *err)
{
    refit_acc_t a;
    int Bm = 64;
    int rc = refit_begin(&a, Hd, D, P, G, Bm, err);
    if (rc) return rc;
    for (int64_t s = 0; s < n; s += Bm) {
        int B = (int)(n - s < Bm ? n - s : Bm);
        refit_add(&a, B, h + s * Hd, r + s * D);
    }
    rc = refit_solve(&a, ridge, W, b, err);
    refit_end(&a);
    return rc;
}

/* The dense fold of the reconstruction (v_nl = G z + H a + g0) for the
 * training basis: G [D,P], Hm [V,A], g0 [D] (caller's arrays). */
static int fold_recon(tr_t *t, float *G, float *Hm, float *g0, df_error_t *err)
{
    int rc = df_lap_fold(t->lap, (int)(3 * t->P), t->Uw, G, Hm, err); /* Uw [3V,P] = [V,3P] */
    return rc ? rc : df_lap_fold(t->lap, 3, t->mu, g0, NULL, err);
}

/* R [B,D] = v_nl of rows s.. - g0 - H a, a = predicted anchors ap [B,A*3]:
 * what G z has to reproduce. */
static void recon_residual(const tr_t *t, int64_t s, int B, const float *G, const float *Hm, const float *g0,
                           const float *ap, float *R)
{
    int64_t D = t->D, V = t->V, A = t->A, P = t->P, F = t->F;
    for (int b = 0; b < B; b++) {
        float *r = R + (size_t)b * D;
        const float *nl = t->NL + (s + b) * D;
        for (int64_t k = 0; k < D; k++) r[k] = nl[k] - g0[k];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)V, 3, (int)A, -1.0f, Hm, (int)A,
                    ap + (size_t)b * A * 3, 3, 1.0f, r, 3);
    }
    if (t->lin) { /* ... minus what the linear path reconstructs: G (lin x + lin_b) */
        float *z = malloc(sizeof(float) * B * P);
        DF_ASSERT(z);
        for (int b = 0; b < B; b++) memcpy(z + (size_t)b * P, t->lin_b, sizeof(float) * P);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)P, (int)F, 1.0f, t->X + s * F, (int)F, t->lin,
                    (int)F, 1.0f, z, (int)P);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)D, (int)P, -1.0f, z, (int)P, G, (int)P, 1.0f, R,
                    (int)D);
        free(z);
    }
}

static int refit_last(tr_t *t, double *before, double *after, df_error_t *err)
{
    df_mlp_t *n = t->net_best;
    int L = n->n_layers, Hd = L >= 2 ? n->dims[L - 1] : n->dims[0];
    int64_t V = t->V, D = t->D, P = t->P, A = t->A, F = t->F;
    int Bm = 128;
    int rc = DF_OK;
    refit_acc_t acc;
    memset(&acc, 0, sizeof acc);
    size_t wf = df_mlp_work_floats(n, Bm), awf = 0;
    for (int64_t a = 0; a < A; a++) {
        size_t q = (size_t)Bm * (t->aoff[a + 1] - t->aoff[a]) + df_mlp_work_floats(t->an_best[a], Bm);
        if (q > awf) awf = q;
    }
    float *G = malloc(sizeof(float) * D * P), *Hm = malloc(sizeof(float) * V * A), *g0 = malloc(sizeof(float) * D);
    float *X = malloc(sizeof(float) * Bm * F), *act = malloc(sizeof(float) * wf), *abuf = malloc(sizeof(float) * awf);
    float *ap = malloc(sizeof(float) * Bm * A * 3), *R = malloc(sizeof(float) * Bm * D);
    float *zz = malloc(sizeof(float) * Bm * P);
    float *Wn = malloc(sizeof(float) * P * Hd), *bn = malloc(sizeof(float) * P);
    if (!G || !Hm || !g0 || !X || !act || !abuf || !ap || !R || !zz || !Wn || !bn) {
        rc = df_error_set(err, DF_ENOMEM, "train: out of memory (refit)");
        goto done;
    }
    if ((rc = fold_recon(t, G, Hm, g0, err))) goto done;
    if ((rc = refit_begin(&acc, Hd, D, P, G, Bm, err))) goto done;
    /* pass 0: accumulate normal equations on the training rows;
     * pass 1 / 2: validation error with the old / new last layer */
    for (int pass = 0; pass < 3; pass++) {
        int64_t r0 = pass ? 0 : t->nval, r1 = pass ? t->nval : t->N;
        double es = 0;
        int64_t ec = 0;
        for (int64_t s = r0; s < r1; s += Bm) {
            int B = (int)(r1 - s < Bm ? r1 - s : Bm);
            memcpy(X, t->X + s * F, sizeof(float) * B * F);
            anchors_predict(t, B, X, ap, abuf);
            float *z = df_mlp_forward(n, B, X, act);
            const float *h = L >= 2 ? z - (size_t)B * Hd : X;
            recon_residual(t, s, B, G, Hm, g0, ap, R);
            if (pass == 0) {
                refit_add(&acc, B, h, R);
            } else {
                if (pass == 2) { /* z with the new layer */
                    for (int b = 0; b < B; b++) memcpy(zz + (size_t)b * P, bn, sizeof(float) * P);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)P, Hd, 1.0f, h, Hd, Wn, Hd, 1.0f, zz, (int)P);
                    z = zz;
                }
                /* R - G z = error */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)D, (int)P, -1.0f, z, (int)P, G, (int)P, 1.0f, R, (int)D);
                for (int64_t k = 0; k < (int64_t)B * V; k++) {
                    const float *e = R + k * 3;
                    es += sqrt((double)e[0] * e[0] + (double)e[1] * e[1] + (double)e[2] * e[2]);
                }
                ec += (int64_t)B * V;
            }
        }
        if (pass == 0) {
            if ((rc = refit_solve(&acc, 1e-4, Wn, bn, err))) goto done;
        } else if (pass == 1) *before = ec ? es / ec : 0;
        else *after = ec ? es / ec : 0;
    }
    if (*after < *before && L >= 2) {
        memcpy(n->w[L - 1], Wn, sizeof(float) * P * Hd);
        memcpy(n->b[L - 1], bn, sizeof(float) * P);
    }
done:
    refit_end(&acc);
    free(G), free(Hm), free(g0), free(X), free(act), free(abuf), free(ap), free(R), free(zz);
    free(Wn), free(bn);
    return rc;
}

/* Position-space fine-tuning of the differential network (OURS; departure
 * from the paper, docs/rigapprox.md). The reconstruction is linear in the
 * network's PCA coefficients z and the anchor offsets a:
 *   v_nl = G z + H a + g0   (G = A^-1 L_s^T U, H = w^2 A^-1 S^T, dense fold),
 * so with the anchor networks fixed (their predictions on each row are
 * computed once), the reconstructed v_nl is an affine function of the
 * network output and the loss can be taken where the user measures the
 * error: the mean Euclidean vertex error sum_v |(G z - R)_v| / V with
 * R = v_nl - g0 - H a (targets computed once per row, stored over the delta
 * labels, which are no longer needed). Gradient wrt z: G^T of the unit
 * error vectors. Adam restarted at pos_lr (0.3 x lr) decaying 10x; best
 * validation mean error kept. *before / *after: validation mean error. */
static int finetune_positions(tr_t *t, double *before, double *after, df_error_t *err)
{
    const df_ratrain_opts_t *o = t->o;
    int64_t V = t->V, D = t->D, P = t->P, A = t->A, F = t->F, N = t->N;
    int Bm = o->batch, rc = DF_OK;
    size_t wf = df_mlp_work_floats(t->net, Bm > 128 ? Bm : 128), awf = 0;
    for (int64_t a = 0; a < A; a++) {
        size_t q = (size_t)128 * (t->aoff[a + 1] - t->aoff[a]) + df_mlp_work_floats(t->an_best[a], 128);
        if (q > awf) awf = q;
    }
    int Bx = Bm > 128 ? Bm : 128;
    float *G = malloc(sizeof(float) * D * P), *Hm = malloc(sizeof(float) * V * A), *g0 = malloc(sizeof(float) * D);
    float *X = malloc(sizeof(float) * Bx * F), *act = malloc(sizeof(float) * wf), *tmp = malloc(sizeof(float) * wf);
    float *abuf = malloc(sizeof(float) * awf), *ap = malloc(sizeof(float) * Bx * A * 3);
    float *E = malloc(sizeof(float) * Bx * D), *gz = malloc(sizeof(float) * Bx * P);
    int64_t *rows = malloc(sizeof(int64_t) * (N ? N : 1));
    df_mlp_opt_t opt;
    memset(&opt, 0, sizeof opt);
    if (!G || !Hm || !g0 || !X || !act || !tmp || !abuf || !ap || !E || !gz || !rows) {
        rc = df_error_set(err, DF_ENOMEM, "train: out of memory (position fine-tuning)");
        goto done;
    }
    if ((rc = fold_recon(t, G, Hm, g0, err))) goto done;
    /* targets R = v_nl - g0 - H a(pred), over the delta labels */
    for (int64_t s = 0; s < N; s += 128) {
        int B = (int)(N - s < 128 ? N - s : 128);
        anchors_predict(t, B, t->X + s * F, ap, abuf);
        recon_residual(t, s, B, G, Hm, g0, ap, t->Y + s * D);
    }
    df_mlp_copy(t->net, t->net_best);
    if ((rc = df_mlp_opt_init(&opt, t->net, o->adam, o->lr, err))) goto done;
    df_rng_t rr = {o->seed * 0x2545f4914f6cdd1dULL + 3};
    for (int64_t i = 0; i < N; i++) rows[i] = i;
    double best = INFINITY, t0 = df__now_s();
    for (int e = 0; e <= o->pos_epochs; e++) {
        /* e = 0: validation only (the starting point) */
        if (e > 0) {
            int64_t *tr_rows = rows + t->nval;
            for (int64_t i = 0; i < t->ntr; i++) tr_rows[i] = t->nval + i;
            for (int64_t i = t->ntr - 1; i > 0; i--) {
                int64_t j = (int64_t)(df_rng_u64(&rr) % (uint64_t)(i + 1)), x = tr_rows[i];
                tr_rows[i] = tr_rows[j], tr_rows[j] = x;
            }
        }
        double es[2] = {0, 0};
        int64_t ec[2] = {0, 0};
        for (int pass = e > 0 ? 0 : 1; pass < 2; pass++) { /* 0: train, 1: validation */
            int64_t r0 = pass ? 0 : t->nval, n = pass ? t->nval : t->ntr;
            int Bs = pass ? Bx : Bm;
            double lr0 = o->pos_lr > 0 ? o->pos_lr : 0.3 * o->lr;
            float lr_scale = (float)(lr0 * pow(0.1, (double)(e - 1) / (o->pos_epochs > 1 ? o->pos_epochs : 1)));
            for (int64_t s = 0; s < n; s += Bs) {
                int B = (int)(n - s < Bs ? n - s : Bs);
                for (int b = 0; b < B; b++) memcpy(X + (size_t)b * F, t->X + rows[r0 + s + b] * F, sizeof(float) * F);
                float *z = df_mlp_forward(t->net, B, X, act);
                for (int b = 0; b < B; b++) memcpy(E + (size_t)b * D, t->Y + rows[r0 + s + b] * D, sizeof(float) * D);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)D, (int)P, 1.0f, z, (int)P, G, (int)P,
                            -1.0f, E, (int)D);
                double sum = 0;
                float scale = 1.0f / (float)((int64_t)B * V);
                for (int64_t k = 0; k < (int64_t)B * V; k++) {
                    float *q = E + k * 3;
                    float l = sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2]);
                    sum += l;
                    float g = l > 1e-12f ? scale / l : 0.0f;
                    q[0] *= g, q[1] *= g, q[2] *= g;
                }
                es[pass] += sum, ec[pass] += (int64_t)B * V;
                if (pass == 0) {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, (int)P, (int)D, 1.0f, E, (int)D, G,
                                (int)P, 0.0f, gz, (int)P);
                    df_mlp_zero(t->net_g);
                    df_mlp_backward(t->net, B, X, act, gz, t->net_g, NULL, tmp);
                    opt.lr = lr_scale;
                    df_mlp_opt_step(&opt, t->net, t->net_g);
                }
            }
        }
        double ve = ec[1] ? es[1] / ec[1] : 0;
        if (e == 0) *before = ve, best = ve;
        else if (ve < best) {
            best = ve;
            df_mlp_copy(t->net_best, t->net);
        }
        if (o->verbose && e > 0) {
            double per = (df__now_s() - t0) / e;
            fprintf(stderr, "position epoch %3d/%d  mean vertex error train %.5g val %.5g (start %.5g)  %.2f s/epoch  ETA %.0f s\n",
                    e, o->pos_epochs, ec[0] ? es[0] / ec[0] : 0, ve, *before, per, per * (o->pos_epochs - e));
        }
        if (o->time_limit_s > 0 && e > 0 && df__now_s() - t->t_start > o->time_limit_s) {
            if (o->verbose) fprintf(stderr, "train: time limit reached (position fine-tuning)\n");
            break;
        }
    }
    *after = best;
done:
    df_mlp_opt_free(&opt);
    free(G), free(Hm), free(g0), free(X), free(act), free(tmp), free(abuf), free(ap), free(E), free(gz), free(rows);
    return rc;
}

static int export_model(tr_t *t, const char *path, df_error_t *err)
{
    const df_rigdata_t *d = t->d;
    df_ramodel_t m;
    memset(&m, 0, sizeof m);
    m.variant = t->o->variant;
    m.nv = t->V, m.nt = d->nt, m.nj = t->J, m.nc = t->C, m.k = d->k;
    m.rest = d->rest, m.tris = d->tris, m.invbind = d->invbind, m.skin_j = d->skin_j, m.skin_w = d->skin_w;
    m.ctrl_range = d->ctrl_range;
    m.control_names = d->control_names, m.joint_names = d->joint_names;
    m.nf = t->F, m.feat_mean = t->fmean, m.feat_scale = t->fscale;
    m.parents = t->o->world_features ? NULL : t->par;
    m.net = t->net_best;
    m.lin = t->lin, m.lin_b = t->lin_b;
    m.alin = t->alin, m.alin_b = t->alin_b;
    m.dqs = d->dqs;
    m.P = t->P, m.basis = t->Uw, m.basis_mean = t->mu;
    m.omega = t->o->omega;
    if (m.variant == DF_RA_OURS) {
        m.na = t->A, m.anchors = t->anchors, m.anc_off = t->aoff, m.anc_idx = t->aidx;
        m.anc_nets = t->an_best;
        /* fold the target standardisation into the last layer */
        for (int64_t a = 0; a < t->A; a++) df__ra_anchor_fold(t->an_best[a], t->amu + a * 3, t->asig + a * 3);
    }
    return df_ramodel_write(&m, path, err);
}

int df_rigapprox_train(const df_rigdata_t *d, const df_ratrain_opts_t *o,
                       const char *out_path, df_ratrain_report_t *rep,
                       df_error_t *err)
{
    double t0 = df__now_s();
    tr_t t;
    memset(&t, 0, sizeof t);
    t.d = d, t.o = o, t.t_start = t0;
    t.N = d->n, t.V = d->nv, t.J = d->nj, t.C = d->nc, t.F = 12 * d->nj + d->nc, t.D = 3 * d->nv;
    if (o->variant < 0 || o->variant > DF_RA_LBS || o->n_hidden < 0 || o->n_hidden > DF_MLP_MAX_LAYERS - 2 ||
        o->hidden < 1 || o->hidden > 65536 || o->anchor_hidden_layers < 0 ||
        o->anchor_hidden_layers > DF_MLP_MAX_LAYERS - 2 || o->anchor_width < 1 || o->anchor_width > 65536 ||
        !(o->pca_frac > 0 && o->pca_frac <= 1) || !(o->anchor_frac > 0 && o->anchor_frac <= 1) ||
        !(o->omega > 0) || o->piece_anchors < 0 || o->piece_anchors > 1000 || o->epochs < 0 || o->pos_epochs < 0 || !(o->pos_lr >= 0) || o->batch < 1 || o->batch > 65536 || !(o->val_frac > 0 && o->val_frac < 1))
        return df_error_set(err, DF_EINVAL, "train: an option is out of range");
    if (o->pos_epochs > 0 && o->variant != DF_RA_OURS)
        return df_error_set(err, DF_EINVAL, "train: position-space fine-tuning (--pos-epochs) is for the 'ours' variant "
                                            "(the %s variant has no reconstruction to train through)",
                            df_ramodel_variant_name(o->variant));
    t.nval = (int64_t)llround(o->val_frac * t.N);
    if (t.nval < 1) t.nval = 1;
    t.ntr = t.N - t.nval;
    if (t.ntr < 2) return df_error_set(err, DF_EINVAL, "train: %lld samples leave %lld for training (need >= 2)",
                                       (long long)t.N, (long long)t.ntr);
    int rc;
    /* Joint parents, inferred from the data (the dataset has none): p is the
     * joint for which R_p^T (t_j - t_p) is constant over the samples (a
     * rigid bone). Features use local matrices world_p^-1 world_j: the
     * paper's Eq. 9 feeds the transformation of each joint control, which
     * in a production rig is the animator's local transform; a bend (what
     * correctives and delta mush respond to) is then one feature instead
     * of a product of two world matrices the networks must learn. */
    t.par = malloc(sizeof(int32_t) * (t.J ? t.J : 1));
    if (!t.par) { rc = df_error_set(err, DF_ENOMEM, "train: out of memory"); goto done; }
    if (d->parents) {
        memcpy(t.par, d->parents, sizeof(int32_t) * t.J); /* validated by df_rigdata_open */
    } else {
        double hs = 0;
        for (int64_t v = 0; v < t.V; v++) hs = fmax(hs, fabs(d->rest[v * 3 + 1]));
        if ((rc = df__ra_joint_parents(t.N < 64 ? t.N : 64, t.J, d->joints, hs, d->joint_names, t.par, err))) goto done;
    }
    if (o->verbose) fprintf(stderr, "train: reading %lld poses ...\n", (long long)t.N);
    if ((rc = prepare_data(&t, err))) goto done;
    {
        int np = 0, nz = 0, njc = 0;
        for (int64_t j = 0; j < t.J; j++) np += t.par[j] >= 0;
        for (int64_t f = 0; f < t.F; f++) nz += t.fscale[f] == 0;
        for (int64_t j = 0; j < t.J; j++) {
            int c = 1;
            for (int e = 0; e < 12; e++) c &= t.fscale[j * 12 + e] == 0;
            njc += c;
        }
        /* What the networks cannot learn is refused here, with its name,
         * rather than trained into a model that ignores it. */
        if (o->variant != DF_RA_LBS && nz == t.F) {
            rc = df_error_set(err, DF_EINVAL,
                              "train: nothing moves in the %lld training poses: every joint matrix and control is the "
                              "same in all of them, so there is nothing to learn (a rig sampled at rest? check the "
                              "exporter's list of sampled controls)", (long long)t.ntr);
            goto done;
        }
        for (int64_t c = 0; o->variant != DF_RA_LBS && c < t.C; c++)
            if (t.fscale[t.J * 12 + c] == 0) {
                rc = df_error_set(err, DF_EINVAL,
                                  "train: control %lld ('%s') never moves in the %lld training poses (always %g): the "
                                  "networks cannot learn what it does. Sample it over its range, or leave it out of "
                                  "the dataset", (long long)c, d->control_names && d->control_names[c] ? d->control_names[c] : "?",
                                  (long long)t.ntr, t.fmean[t.J * 12 + c]);
                goto done;
            }
        if (o->verbose)
            fprintf(stderr, "train: %s joint features, %d of %lld joints with a parent (%s), %d joints and %d features "
                            "constant in training\n",
                    o->world_features ? "world" : "local", np, (long long)t.J, d->parents ? "from the dataset" : "inferred",
                    njc, nz);
    }
    if (o->variant == DF_RA_OURS && (rc = choose_anchors(&t, err))) goto done;
    if (o->variant != DF_RA_LBS && (rc = prepare_labels(&t, err))) goto done;
    if (o->verbose)
        fprintf(stderr, "train: %s, %lld train + %lld validation poses, %lld vertices, %lld features, %lld PCs, %lld anchors (%.1f s)\n",
                df_ramodel_variant_name(o->variant), (long long)t.ntr, (long long)t.nval, (long long)t.V,
                (long long)t.F, (long long)t.P, (long long)t.A, df__now_s() - t0);
    if ((o->variant == DF_RA_OURS || o->variant == DF_RA_LOCAL) && !o->no_linear && (rc = fit_linear(&t, err)))
        goto done;
    if (o->variant == DF_RA_OURS && (rc = anchor_targets(&t, err))) goto done;
    if (o->variant == DF_RA_PCALR) {
        if ((rc = fit_pcalr(&t, err))) goto done;
    } else if (o->variant != DF_RA_LBS) {
        if ((rc = build_nets(&t, err))) goto done;
        size_t nbuf = (size_t)o->batch * (t.F + 2 * t.D + t.P) + 2 * df_mlp_work_floats(t.net, o->batch) +
                      (size_t)o->batch * (t.F + 6) + 4 * (size_t)o->batch * (o->anchor_width + 3) * (o->anchor_hidden_layers + 1) + 64;
        float *buf = malloc(sizeof(float) * nbuf);
        int64_t *rows = malloc(sizeof(int64_t) * t.N);
        if (!buf || !rows) { free(buf), free(rows); rc = df_error_set(err, DF_ENOMEM, "train: out of memory"); goto done; }
        for (int64_t i = 0; i < t.N; i++) rows[i] = i;
        ck_state_t cs = {0, 0, INFINITY, INFINITY, o->seed * 31 + 7};
        if (o->checkpoint && o->resume) {
            FILE *f = fopen(o->checkpoint, "rb");
            if (f) {
                fclose(f);
                if ((rc = ck_load(&t, &cs, err))) { free(buf), free(rows); goto done; }
                if (o->verbose) fprintf(stderr, "train: resumed from %s at epoch %d\n", o->checkpoint, cs.epoch);
            }
        }
        double te = df__now_s();
        int e0 = cs.epoch;
        for (int e = cs.epoch; e < o->epochs; e++) {
            df_rng_t rr = {cs.rng};
            int64_t *tr_rows = rows + t.nval;
            for (int64_t i = 0; i < t.ntr; i++) tr_rows[i] = t.nval + i; /* order = f(rng) only */
            for (int64_t i = t.ntr - 1; i > 0; i--) {
                int64_t j = (int64_t)(df_rng_u64(&rr) % (uint64_t)(i + 1)), x = tr_rows[i];
                tr_rows[i] = tr_rows[j], tr_rows[j] = x;
            }
            cs.rng = rr.s;
            float lr_scale = (float)pow(0.1, (double)e / (o->epochs > 1 ? o->epochs : 1));
            double ld, la, vd, va;
            run_rows(&t, tr_rows, t.ntr, 1, lr_scale, &ld, &la, buf, nbuf);
            run_rows(&t, rows, t.nval, 0, 0, &vd, &va, buf, nbuf);
            int improved = 0;
            if (vd < cs.best_d * (1 - 1e-4)) {
                cs.best_d = vd;
                df_mlp_copy(t.net_best, t.net);
                improved = 1;
                if (rep) rep->best_epoch = e + 1;
            }
            double va_best = 0;
            for (int64_t a = 0; a < t.A; a++) {
                double v;
                anchor_val(&t, a, rows, t.nval, buf, &v);
                if (v < t.a_best[a]) {
                    t.a_best[a] = v;
                    df_mlp_copy(t.an_best[a], t.an[a]);
                }
                va_best += t.a_best[a];
            }
            if (t.A) {
                va_best /= t.A;
                if (va_best < cs.best_a * (1 - 1e-4)) { cs.best_a = va_best; improved = 1; }
            }
            cs.bad = improved ? 0 : cs.bad + 1;
            cs.epoch = e + 1;
            double el = df__now_s() - te, per = el / (e + 1 - e0);
            if (o->verbose)
                fprintf(stderr, "epoch %4d/%d  diff L1 %.4g val %.4g  anchor L2 %.4g val %.4g  %.2f s/epoch  ETA %.0f s\n",
                        e + 1, o->epochs, ld, vd, la, va, per, per * (o->epochs - e - 1));
            if (o->checkpoint && ((e + 1) % (o->checkpoint_every > 0 ? o->checkpoint_every : 10) == 0 || e + 1 == o->epochs))
                if ((rc = ck_save(&t, &cs, err))) { free(buf), free(rows); goto done; }
            if (o->patience > 0 && cs.bad >= o->patience) {
                if (o->verbose) fprintf(stderr, "train: early stop, no validation improvement for %d epochs\n", cs.bad);
                break;
            }
            if (o->time_limit_s > 0 && df__now_s() - t0 > o->time_limit_s) {
                if (o->verbose) fprintf(stderr, "train: time limit reached\n");
                if (o->checkpoint && (rc = ck_save(&t, &cs, err))) { free(buf), free(rows); goto done; }
                break;
            }
        }
        if (rep) {
            rep->epochs_run = cs.epoch;
            rep->val_diff = cs.best_d;
            rep->val_anchor = cs.best_a;
        }
        free(buf), free(rows);
    }
    if (o->variant == DF_RA_OURS && o->pos_epochs > 0 && t.net_best) {
        double eb = 0, ea = 0;
        if ((rc = finetune_positions(&t, &eb, &ea, err))) goto done;
        if (o->verbose)
            fprintf(stderr, "train: position-space fine-tuning: validation mean vertex error %.5g -> %.5g\n", eb, ea);
    }
    if (o->variant == DF_RA_OURS && !o->no_refit && t.net_best && t.net_best->n_layers >= 2) {
        double eb = 0, ea = 0;
        if ((rc = refit_last(&t, &eb, &ea, err))) goto done;
        if (o->verbose)
            fprintf(stderr, "train: position-space refit of the last layer: validation mean error %.5g -> %.5g (%s)\n", eb, ea,
                    ea < eb ? "kept" : "discarded");
    }
    rc = export_model(&t, out_path, err);
    if (rep) {
        rep->seconds = df__now_s() - t0;
        rep->n_train = t.ntr, rep->n_val = t.nval, rep->n_pca = t.P, rep->n_anchors = t.A;
    }
done:
    tr_free(&t);
    return rc;
}

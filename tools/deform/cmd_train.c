/* cmd_train.c — `deform train`: train a rigapprox model from a dataset, and
 * evaluate a trained model against a dataset.
 *
 *   deform train DATA.safetensors... --out REPO/NAME [--variant ours|local|pcalr|lbs]
 *         [--layers 3] [--width 256] [--anchor-layers 3] [--anchor-width 64]
 *         [--pca 0.05] [--anchors 0.02] [--omega 1] [--epochs 200] [--batch 128]
 *         [--lr 1e-3] [--sgd] [--val 0.1] [--patience 20] [--seed 1]
 *         [--checkpoint FILE [--resume]] [--time-limit SECONDS] [--quiet]
 *         [--anchor-influence] [--pca-delta] [--no-refit] [--no-linear]   (paper's choices; see docs)
 *         [--world-features]   (joint features as world matrices, the old default)
 *         [--piece-anchors K]  (anchors on each small disconnected piece, default 3)
 *   deform train --evaluate REPO/NAME DATA.safetensors [--reconstruction dense|sparse]
 *         [--heatmap OUT.ppm --pose I [--heatmap-max PCT]] [--errors OUT.npy] [--positions OUT.npy]
 *   deform train --breakdown MODEL.safetensors DATA.safetensors   (error sources of an 'ours' model)
 *   deform train --add-anchors K --from REPO/NAME DATA.safetensors --out REPO/NAME2
 *         [--rounds 4] [--anchor-radius 0.01] [--epochs 100] [--batch 32] [--lr 1e-3] [--seed 1]
 *         [--omega W]  (the written model's anchor weight; default: the model's)
 *         [--threads N]  (mini-networks trained in parallel; same result)
 *         (error-driven anchors: K more anchors where the trained model's error is largest)
 *
 * DATA may be several files: the shards of one export (rig_export.py
 * --jobs N), read together as one dataset (df_rigdata_open_shards).
 *
 * Training writes REPO/NAME/config.json and REPO/NAME/1/model.safetensors
 * (kind rigapprox; docs/rigapprox.md). Evaluation loads the model through
 * the repository and df_model_evaluate (the served code path), and prints
 * mean / max vertex error, absolute and in % of the character height.
 */
#include "df.h"
#include "math/laplacian.h"
#include "math/nn.h"
#include "rigapprox/rigapprox.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int usage(void)
{
    fprintf(stderr,
            "usage: deform train DATA.safetensors... --out REPO/NAME [--variant ours|local|pcalr|lbs]\n"
            "         [--layers N] [--width W] [--anchor-layers N] [--anchor-width W] [--pca F]\n"
            "         [--anchors F] [--omega W] [--epochs E] [--batch B] [--lr R] [--sgd] [--val F]\n"
            "         [--patience E] [--seed S] [--checkpoint FILE [--resume]] [--time-limit S] [--quiet]\n"
            "         [--anchor-influence] [--pca-delta] [--no-refit] [--no-linear] [--world-features] [--piece-anchors K]\n"
            "         [--pos-epochs N] [--pos-lr LR]  (ours: position-space fine-tuning after training)\n"
            "       deform train --evaluate REPO/NAME DATA.safetensors... [--reconstruction dense|sparse]\n"
            "         [--heatmap OUT.ppm --pose I [--heatmap-max PCT]] [--errors OUT.npy] [--positions OUT.npy]\n"
            "       deform train --breakdown MODEL.safetensors DATA.safetensors...\n"
            "       deform train --add-anchors K --from REPO/NAME DATA.safetensors... --out REPO/NAME2\n"
            "         [--rounds R] [--anchor-radius F] [--epochs E] [--batch B] [--lr R] [--seed S] [--omega W]\n"
            "         [--threads N]\n");
    return 2;
}

static int mkdirs(const char *path)
{
    char b[1400];
    if (snprintf(b, sizeof b, "%s", path) >= (int)sizeof b) return -1; /* too long: refuse */
    for (char *p = b + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(b, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(b, 0755) && errno != EEXIST ? -1 : 0;
}

/* The dataset: one file, or the shards of one export read together. */
static const char *data_paths[DF_RIGDATA_MAX_SHARDS];
static int n_data;

static int open_data(df_rigdata_t *d, df_error_t *err)
{
    return df_rigdata_open_shards(data_paths, n_data, d, err);
}

/* Heat map: orthographic view (x right, y up, largest two extents), each
 * vertex splatted with a blue->red colour for error / emax. */
static int write_heatmap(const char *path, const float *pos, int64_t nv, const float *e, double emax, int x0,
                         int W, int H, unsigned char *img)
{
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t v = 0; v < nv; v++)
        for (int d = 0; d < 3; d++) lo[d] = fminf(lo[d], pos[v * 3 + d]), hi[d] = fmaxf(hi[d], pos[v * 3 + d]);
    int ax[3] = {0, 1, 2};
    /* view axes: the two largest extents; depth = the smallest */
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (hi[ax[j]] - lo[ax[j]] > hi[ax[i]] - lo[ax[i]]) { int t = ax[i]; ax[i] = ax[j]; ax[j] = t; }
    int u = ax[1], vv = ax[0]; /* tallest extent vertical */
    float s = fminf((W - 20) / (hi[u] - lo[u] + 1e-9f), (H - 20) / (hi[vv] - lo[vv] + 1e-9f));
    for (int64_t v = 0; v < nv; v++) {
        int px = x0 + 10 + (int)((pos[v * 3 + u] - lo[u]) * s), py = H - 10 - (int)((pos[v * 3 + vv] - lo[vv]) * s);
        double t = emax > 0 ? fmin(1, e[v] / emax) : 0;
        unsigned char r = (unsigned char)(255 * t), g = (unsigned char)(255 * (1 - fabs(2 * t - 1))),
                      b = (unsigned char)(255 * (1 - t));
        for (int dy = -1; dy <= 1; dy++)
            for (int dx = -1; dx <= 1; dx++) {
                int X = px + dx, Y = py + dy;
                if (X < 0 || Y < 0 || X >= 2 * W || Y >= H) continue;
                unsigned char *p = img + ((size_t)Y * 2 * W + X) * 3;
                p[0] = r, p[1] = g, p[2] = b;
            }
    }
    (void)path;
    return 0;
}

static double heat_max_pct = 2.0; /* --heatmap-max: red = this % of the height */

static int evaluate(const char *model_dir, const char *data, const char *recon, const char *heatmap, int pose,
                    const char *errors_npy, const char *pos_npy)
{
    df_error_t err = {0};
    char repo[1024], name[256];
    snprintf(repo, sizeof repo, "%s", model_dir);
    char *sl = strrchr(repo, '/');
    if (!sl) { fprintf(stderr, "deform train: --evaluate wants REPO/NAME\n"); return 2; }
    *sl = 0;
    snprintf(name, sizeof name, "%s", sl + 1);
    df_model_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    df_model_t *m = NULL;
    int rc;
    if (recon) {
        char path[1400], params[128];
        snprintf(path, sizeof path, "%s/%s/1/model.safetensors", repo, name);
        snprintf(params, sizeof params, "{\"reconstruction\": \"%s\"}", recon);
        rc = df_model_open(path, "rigapprox", params, NULL, &m, &err);
    } else {
        rc = df_repo_load(repo, name, NULL, &m, NULL, NULL, &err);
    }
    if (rc) { fprintf(stderr, "deform train: %s\n", err.msg); return 1; }
    df_rigdata_t d;
    if ((rc = open_data(&d, &err))) {
        fprintf(stderr, "deform train: %s\n", err.msg);
        df_model_unref(&m);
        return 1;
    }
    int64_t V = d.nv;
    if (df_model_n_vertices(m) != V || df_model_find_input(m, "joint_matrices") < 0) {
        fprintf(stderr, "deform train: model and dataset differ (%lld vs %lld vertices)\n",
                (long long)df_model_n_vertices(m), (long long)V);
        df_rigdata_close(&d);
        df_model_unref(&m);
        return 1;
    }
    enum { BS = 32 };
    float *out = malloc(sizeof(float) * BS * V * 3);
    float *verr = calloc(V, sizeof(float)); /* error of the heat-map pose */
    float *all = errors_npy ? malloc(sizeof(float) * d.n * V) : NULL;
    float *allp = pos_npy ? malloc(sizeof(float) * d.n * V * 3) : NULL;
    df_scratch_t *sc = df_scratch_new();
    double sum = 0, mx = 0;
    for (int64_t s = 0; s < d.n && !rc; s += BS) {
        int B = (int)(d.n - s < BS ? d.n - s : BS);
        float *po[BS];
        for (int b = 0; b < B; b++) po[b] = out + (size_t)b * V * 3;
        if ((rc = df_rigdata_evaluate(m, &d, s, B, po, sc, &err))) {
            fprintf(stderr, "deform train: %s\n", err.msg);
            break;
        }
        for (int b = 0; b < B; b++) {
            const float *gt = d.positions + (s + b) * V * 3, *p = po[b];
            if (allp) memcpy(allp + (s + b) * V * 3, p, sizeof(float) * V * 3);
            for (int64_t v = 0; v < V; v++) {
                double e = sqrt((p[v * 3] - gt[v * 3]) * (p[v * 3] - gt[v * 3]) +
                                (p[v * 3 + 1] - gt[v * 3 + 1]) * (p[v * 3 + 1] - gt[v * 3 + 1]) +
                                (p[v * 3 + 2] - gt[v * 3 + 2]) * (p[v * 3 + 2] - gt[v * 3 + 2]));
                sum += e;
                if (e > mx) mx = e;
                if (s + b == pose) verr[v] = (float)e;
                if (all) all[(s + b) * V + v] = (float)e;
            }
        }
    }
    if (!rc) {
        double mean = sum / ((double)d.n * V);
        printf("model %s (%s) on %s%s: %lld poses, %lld vertices, height %.4g\n", model_dir,
               df_model_kind(m), data, n_data > 1 ? " (+ its other shards)" : "", (long long)d.n, (long long)V, d.height);
        printf("mean %.6g (%.4f %%)  max %.6g (%.3f %%)\n", mean, 100 * mean / d.height, mx, 100 * mx / d.height);
        if (all) {
            int64_t sh[2] = {d.n, V};
            if (df_npy_write_f32(errors_npy, 2, sh, all, &err)) fprintf(stderr, "deform train: %s\n", err.msg);
        }
        if (allp) {
            int64_t sh[3] = {d.n, V, 3};
            if (df_npy_write_f32(pos_npy, 3, sh, allp, &err)) fprintf(stderr, "deform train: %s\n", err.msg);
        }
        if (heatmap && pose >= 0 && pose < d.n) {
            /* ground truth coloured by error; scale: heat_max_pct % of height */
            int W = 400, H = 600;
            unsigned char *img = calloc((size_t)2 * W * H * 3, 1);
            memset(img, 255, (size_t)2 * W * H * 3);
            write_heatmap(heatmap, d.positions + (int64_t)pose * V * 3, V, verr, heat_max_pct / 100 * d.height, 0, W, H, img);
            FILE *f = fopen(heatmap, "wb");
            if (f) {
                fprintf(f, "P6\n%d %d\n255\n", W, H);
                for (int y = 0; y < H; y++) fwrite(img + (size_t)y * 2 * W * 3, 3, W, f);
                fclose(f);
            }
            free(img);
        }
    }
    df_scratch_free(&sc);
    free(out), free(verr), free(all), free(allp);
    df_rigdata_close(&d);
    df_model_unref(&m);
    return rc ? 1 : 0;
}

/* Error breakdown of an OURS model (docs/rigapprox.md): reconstruct with the
 * true or the predicted differential coordinates / anchors, the truth
 * computed from the dataset's meshes (Eq. 14 and L_s). */
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
void dpotrs_(const char *uplo, const int *n, const int *nrhs, const double *a, const int *lda, double *b,
             const int *ldb, int *info);

static int breakdown(const char *model_file, const char *data)
{
    df_error_t e = {0};
    df_st_t *st = NULL;
    df_ramodel_t m;
    df_rigdata_t d;
    if (df_st_open(model_file, NULL, &st, &e) || df_ramodel_read(st, &m, &e)) {
        fprintf(stderr, "deform train: %s\n", e.msg);
        df_st_close(&st);
        return 1;
    }
    (void)data;
    if (m.variant != DF_RA_OURS || open_data(&d, &e) || d.nv != m.nv || d.nj != m.nj || d.nc != m.nc) {
        fprintf(stderr, "deform train: --breakdown needs an 'ours' model and its kind of dataset %s\n", e.msg);
        df_ramodel_release(&m);
        df_st_close(&st);
        return 1;
    }
    int64_t V = m.nv, D = 3 * V, P = m.P, A = m.na;
    df_lap_t *lap = NULL;
    if (df_rigapprox_lap(V, m.rest, m.nt, m.tris, A, m.anchors, m.omega, &lap, &e)) {
        fprintf(stderr, "deform train: %s\n", e.msg);
        return 1;
    }
    float *T = malloc(sizeof(float) * 12 * V), *nl = malloc(sizeof(float) * D), *dt = malloc(sizeof(float) * D);
    float *dp = malloc(sizeof(float) * D), *dj = malloc(sizeof(float) * D), *apt = malloc(sizeof(float) * 3 * A);
    float *app = malloc(sizeof(float) * 3 * A), *x = malloc(sizeof(float) * m.nf), *out = malloc(sizeof(float) * D);
    float *pos = malloc(sizeof(float) * D), *act = malloc(sizeof(float) * df_mlp_work_floats(m.net, 1));
    float *zl = malloc(sizeof(float) * (P ? P : 1));
    double *w = malloc(sizeof(double) * 2 * D), *utu = calloc(P * P, sizeof(double)), *z2 = malloc(sizeof(double) * P);
    size_t aw = 0;
    int maxin = 1;
    for (int64_t a = 0; a < A; a++) {
        if (df_mlp_work_floats(m.anc_nets[a], 1) > aw) aw = df_mlp_work_floats(m.anc_nets[a], 1);
        if (m.anc_off[a + 1] - m.anc_off[a] > maxin) maxin = m.anc_off[a + 1] - m.anc_off[a];
    }
    float *awk = malloc(sizeof(float) * aw), *xi = malloc(sizeof(float) * maxin);
    /* pieces: where the error is (the largest piece vs the small ones) */
    int32_t *comp = malloc(sizeof(int32_t) * V);
    int64_t *csz = calloc(V, sizeof(int64_t)), big = 0;
    {
        uint32_t *tw = NULL;
        int64_t ntw = 0;
        if (comp && csz && !df_rigapprox_weld(V, m.rest, m.nt, m.tris, &tw, &ntw, &e) &&
            df_lap_components(V, ntw, tw, comp) > 0) {
            for (int64_t v = 0; v < V; v++) csz[comp[v]]++;
            for (int64_t c = 0; c < V; c++) if (csz[c] > csz[big]) big = c;
        } else if (comp) {
            for (int64_t v = 0; v < V; v++) comp[v] = 0;
        }
        free(tw);
    }
    double perr[6][2] = {{0}}, pmx[6][2] = {{0}};
    int64_t pcount[2] = {0, 0}, wv[6] = {0}, wp[6] = {0};
    for (int64_t v = 0; comp && v < V; v++) pcount[comp[v] != big]++;
    /* least-squares projection on the basis (not orthogonal when it is the
     * v_nl PCA mapped through L_s): Gram matrix, Cholesky once */
    for (int64_t k = 0; k < D; k++)
        for (int64_t p = 0; p < P; p++) {
            double bp = m.basis[k * P + p];
            for (int64_t q = 0; q <= p; q++) utu[p * P + q] += bp * m.basis[k * P + q];
        }
    double gtr = 0;
    for (int64_t p = 0; p < P; p++) gtr += utu[p * P + p];
    for (int64_t p = 0; p < P; p++) utu[p * P + p] += 1e-9 * gtr / P;
    int np = (int)P, one = 1, info = 0;
    dpotrf_("U", &np, utu, &np, &info); /* row-major lower = column-major upper */
    /* the floor of a network trained in position space (--pos-epochs): the
     * best coefficients z for the reconstructed v_nl itself, least squares
     * on the folded G = A^-1 L_s^T U (with the true anchors):
     * z = (G^T G)^-1 G^T (v_nl - g0 - H a) */
    float *G = malloc(sizeof(float) * D * P), *Hm = malloc(sizeof(float) * V * (A ? A : 1)), *g0 = malloc(sizeof(float) * D);
    double *gtg = calloc(P * P, sizeof(double)), *gd = malloc(sizeof(double) * D * P);
    int ginfo = !G || !Hm || !g0 || !gtg || !gd || df_lap_fold(lap, (int)(3 * P), m.basis, G, Hm, &e) ||
                df_lap_fold(lap, 3, m.basis_mean, g0, NULL, &e);
    if (!ginfo) {
        for (int64_t k = 0; k < D * P; k++) gd[k] = G[k];
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)P, (int)D, 1.0, gd, (int)P, 0.0, gtg, (int)P);
        double tr = 0;
        for (int64_t p = 0; p < P; p++) tr += gtg[p * P + p];
        for (int64_t p = 0; p < P; p++) gtg[p * P + p] += 1e-9 * tr / P;
        dpotrf_("U", &np, gtg, &np, &ginfo);
    }
    const char *names[6] = {"true delta (all 3V) + true anchors", "true delta on the PCs + true anchors",
                            "predicted delta + true anchors", "true delta + predicted anchors",
                            "predicted delta + predicted anchors", "best PC coefficients for v + true anchors"};
    double err[6] = {0}, mx[6] = {0};
    for (int64_t s = 0; s < d.n; s++) {
        const float *W = d.joints + s * d.nj * 12, *C = d.nc ? d.controls + s * d.nc : NULL, *gt = d.positions + s * D;
        df_rigapprox_linear_skin(m.dqs, V, d.nj, (int)d.k, d.invbind, d.skin_j, d.skin_w, 1, W, T);
        df_rigapprox_nonlinear(V, T, d.rest, gt, nl);
        df_lap_apply(lap, 3, nl, dt);
        for (int64_t a = 0; a < A; a++)
            for (int c = 0; c < 3; c++) apt[a * 3 + c] = nl[m.anchors[a] * 3 + c];
        for (int64_t p = 0; p < P; p++) {
            double q = 0;
            for (int64_t k = 0; k < D; k++) q += (double)m.basis[k * P + p] * (dt[k] - m.basis_mean[k]);
            z2[p] = q;
        }
        if (!info) dpotrs_("U", &np, &one, utu, &np, z2, &np, &info);
        for (int64_t k = 0; k < D; k++) {
            double q = m.basis_mean[k];
            for (int64_t p = 0; p < P; p++) q += m.basis[k * P + p] * z2[p];
            dj[k] = (float)q;
        }
        df_ramodel_features(&m, W, C, x);
        const float *zz = df_mlp_forward(m.net, 1, x, act);
        if (m.lin) { /* the linear path beside the network */
            for (int64_t p = 0; p < P; p++) {
                double q = zz[p] + m.lin_b[p];
                for (int64_t f = 0; f < m.nf; f++) q += (double)m.lin[p * m.nf + f] * x[f];
                zl[p] = (float)q;
            }
            zz = zl;
        }
        for (int64_t k = 0; k < D; k++) {
            double q = m.basis_mean[k];
            for (int64_t p = 0; p < P; p++) q += m.basis[k * P + p] * zz[p];
            dp[k] = (float)q;
        }
        for (int64_t a = 0; a < A; a++) {
            int ni = m.anc_off[a + 1] - m.anc_off[a];
            for (int i = 0; i < ni; i++) xi[i] = x[m.anc_idx[m.anc_off[a] + i]];
            memcpy(app + a * 3, df_mlp_forward(m.anc_nets[a], 1, xi, awk), sizeof(float) * 3);
            for (int c = 0; m.alin && c < 3; c++) { /* the anchors' linear path */
                double q = m.alin_b[a * 3 + c];
                for (int64_t f = 0; f < m.nf; f++) q += (double)m.alin[(a * 3 + c) * m.nf + f] * x[f];
                app[a * 3 + c] += (float)q;
            }
        }
        const float *dl[5] = {dt, dj, dp, dt, dp}, *al[5] = {apt, apt, apt, app, app};
        for (int c = 0; c < 6; c++) {
            if (c == 5) { /* out = G z* + H a + g0 */
                if (ginfo) break;
                for (int64_t k = 0; k < D; k++) out[k] = g0[k];
                for (int64_t v = 0; v < V; v++)
                    for (int64_t a = 0; a < A; a++)
                        for (int q = 0; q < 3; q++) out[v * 3 + q] += Hm[v * A + a] * apt[a * 3 + q];
                for (int64_t p = 0; p < P; p++) {
                    double q = 0;
                    for (int64_t k = 0; k < D; k++) q += (double)G[k * P + p] * (nl[k] - out[k]);
                    z2[p] = q;
                }
                dpotrs_("U", &np, &one, gtg, &np, z2, &np, &info);
                for (int64_t k = 0; k < D; k++) {
                    double q = out[k];
                    for (int64_t p = 0; p < P; p++) q += G[k * P + p] * z2[p];
                    out[k] = (float)q;
                }
            } else
                df_lap_reconstruct(lap, 3, dl[c], al[c], out, w);
            df_rigapprox_apply(V, T, d.rest, out, pos);
            for (int64_t v = 0; v < V; v++) {
                double q = sqrt((pos[v * 3] - gt[v * 3]) * (pos[v * 3] - gt[v * 3]) +
                                (pos[v * 3 + 1] - gt[v * 3 + 1]) * (pos[v * 3 + 1] - gt[v * 3 + 1]) +
                                (pos[v * 3 + 2] - gt[v * 3 + 2]) * (pos[v * 3 + 2] - gt[v * 3 + 2]));
                err[c] += q;
                if (q > mx[c]) mx[c] = q, wv[c] = v, wp[c] = s;
                int sm = comp[v] != big;
                perr[c][sm] += q;
                if (q > pmx[c][sm]) pmx[c][sm] = q;
            }
        }
    }
    printf("%-40s %-28s %-22s %-22s %s\n", "", "all vertices", "largest piece", "other pieces", "worst vertex");
    for (int c = 0; c < (ginfo ? 5 : 6); c++)
        printf("%-40s mean %.4f %%  max %.3f %%  %.4f %% / %.3f %%  %.4f %% / %.3f %%  v %lld (piece of %lld) pose %lld\n",
               names[c], 100 * err[c] / ((double)d.n * V) / d.height, 100 * mx[c] / d.height,
               100 * perr[c][0] / ((double)d.n * (pcount[0] ? pcount[0] : 1)) / d.height, 100 * pmx[c][0] / d.height,
               100 * perr[c][1] / ((double)d.n * (pcount[1] ? pcount[1] : 1)) / d.height, 100 * pmx[c][1] / d.height,
               (long long)wv[c], (long long)csz[comp[wv[c]]], (long long)wp[c]);
    free(T), free(nl), free(dt), free(dp), free(dj), free(apt), free(app), free(x), free(out), free(pos), free(act), free(zl);
    free(w), free(utu), free(z2), free(awk), free(xi), free(comp), free(csz);
    free(G), free(Hm), free(g0), free(gtg), free(gd);
    df_lap_free(&lap);
    df_rigdata_close(&d);
    df_ramodel_release(&m);
    df_st_close(&st);
    return 0;
}

/* REPO/NAME/config.json of a trained model */
static int write_config(const char *out)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/config.json", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "deform train: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"kind\": \"rigapprox\",\n  \"parameters\": {\"reconstruction\": \"auto\"},\n"
               "  \"max_batch_size\": 32,\n  \"max_queue_delay_us\": 500\n}\n");
    fclose(f);
    return 0;
}

/* --add-anchors: REPO/NAME (trained) + its training set -> REPO/NAME2 */
static int add_anchors(const char *from, const char *data, const char *out, const df_raanchor_opts_t *ao)
{
    df_error_t err = {0};
    df_rigdata_t d;
    char src[1400], dir[1200], path[1400];
    snprintf(src, sizeof src, "%s/1/model.safetensors", from);
    snprintf(dir, sizeof dir, "%s/1", out);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    (void)data;
    if (open_data(&d, &err)) {
        fprintf(stderr, "deform train: %s\n", err.msg);
        return 1;
    }
    if (mkdirs(dir)) {
        fprintf(stderr, "deform train: cannot create %s: %s\n", dir, strerror(errno));
        df_rigdata_close(&d);
        return 1;
    }
    int rc = df_rigapprox_add_anchors(src, &d, ao, path, &err);
    df_rigdata_close(&d);
    if (rc) {
        fprintf(stderr, "deform train: %s\n", err.msg);
        return 1;
    }
    if (write_config(out)) return 1;
    fprintf(stderr, "wrote %s\n", path);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    df_ratrain_opts_t o;
    df_ratrain_opts_default(&o);
    const char *data = NULL, *out = NULL, *eval = NULL, *recon = NULL, *heat = NULL, *errs = NULL, *posn = NULL;
    const char *brk = NULL, *from = NULL;
    int pose = 0, epochs_set = 0, batch_set = 0, lr_set = 0;
    df_raanchor_opts_t ao;
    df_raanchor_opts_default(&ao);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--sgd")) { o.adam = 0; o.lr = 1e-2f; o.lr_anchor = 1e-2f; continue; }
        if (!strcmp(a, "--resume")) { o.resume = 1; continue; }
        if (!strcmp(a, "--pca-delta")) { o.pca_delta = 1; continue; }
        if (!strcmp(a, "--no-refit")) { o.no_refit = 1; continue; }
        if (!strcmp(a, "--no-linear")) { o.no_linear = 1; continue; }
        if (!strcmp(a, "--world-features")) { o.world_features = 1; continue; }
        if (!strcmp(a, "--anchor-influence")) { o.anchor_influence = 1; continue; }
        if (!strcmp(a, "--quiet")) { o.verbose = 0; continue; }
        if (a[0] != '-') {
            if (n_data >= DF_RIGDATA_MAX_SHARDS) return usage();
            if (!data) data = a;
            data_paths[n_data++] = a;
            continue;
        }
        if (i + 1 >= argc) return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--evaluate")) eval = v;
        else if (!strcmp(a, "--reconstruction")) recon = v;
        else if (!strcmp(a, "--heatmap")) heat = v;
        else if (!strcmp(a, "--errors")) errs = v;
        else if (!strcmp(a, "--positions")) posn = v;
        else if (!strcmp(a, "--breakdown")) brk = v;
        else if (!strcmp(a, "--pose")) pose = atoi(v);
        else if (!strcmp(a, "--heatmap-max")) {
            heat_max_pct = atof(v);
            if (!(heat_max_pct > 0 && heat_max_pct <= 100)) {
                fprintf(stderr, "deform train: --heatmap-max wants a percentage in (0, 100]\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--variant")) {
            o.variant = !strcmp(v, "ours") ? DF_RA_OURS : !strcmp(v, "local") ? DF_RA_LOCAL
                      : !strcmp(v, "pcalr") ? DF_RA_PCALR : !strcmp(v, "lbs") ? DF_RA_LBS : -1;
            if (o.variant < 0) return usage();
        } else if (!strcmp(a, "--layers")) o.n_hidden = atoi(v);
        else if (!strcmp(a, "--width")) o.hidden = atoi(v);
        else if (!strcmp(a, "--anchor-layers")) o.anchor_hidden_layers = atoi(v);
        else if (!strcmp(a, "--anchor-width")) o.anchor_width = atoi(v);
        else if (!strcmp(a, "--pca")) o.pca_frac = atof(v);
        else if (!strcmp(a, "--anchors")) o.anchor_frac = atof(v);
        else if (!strcmp(a, "--piece-anchors")) o.piece_anchors = atoi(v);
        else if (!strcmp(a, "--omega")) o.omega = ao.omega = atof(v);
        else if (!strcmp(a, "--epochs")) o.epochs = atoi(v), epochs_set = 1;
        else if (!strcmp(a, "--add-anchors")) ao.add = atoi(v);
        else if (!strcmp(a, "--from")) from = v;
        else if (!strcmp(a, "--rounds")) ao.rounds = atoi(v);
        else if (!strcmp(a, "--threads")) ao.threads = atoi(v);
        else if (!strcmp(a, "--anchor-radius")) ao.radius = atof(v);
        else if (!strcmp(a, "--pos-epochs")) o.pos_epochs = atoi(v);
        else if (!strcmp(a, "--pos-lr")) o.pos_lr = (float)atof(v);
        else if (!strcmp(a, "--batch")) o.batch = atoi(v), batch_set = 1;
        else if (!strcmp(a, "--lr")) o.lr = o.lr_anchor = (float)atof(v), lr_set = 1;
        else if (!strcmp(a, "--val")) o.val_frac = atof(v);
        else if (!strcmp(a, "--patience")) o.patience = atoi(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--checkpoint")) o.checkpoint = v;
        else if (!strcmp(a, "--time-limit")) o.time_limit_s = atof(v);
        else return usage();
    }
    if (brk) return data ? breakdown(brk, data) : usage();
    if (ao.add || from) {
        if (!data || !out || !from || ao.add < 1) return usage();
        if (epochs_set) ao.epochs = o.epochs;
        if (batch_set) ao.batch = o.batch;
        if (lr_set) ao.lr = o.lr; /* not --sgd's 1e-2: the anchors train with Adam */
        ao.seed = o.seed, ao.verbose = o.verbose;
        return add_anchors(from, data, out, &ao);
    }
    if (eval) return data ? evaluate(eval, data, recon, heat, pose, errs, posn) : usage();
    if (!data || !out) return usage();
    df_error_t err = {0};
    df_rigdata_t d;
    if (open_data(&d, &err)) {
        fprintf(stderr, "deform train: %s\n", err.msg);
        return 1;
    }
    char dir[1200], path[1400];
    snprintf(dir, sizeof dir, "%s/1", out);
    if (mkdirs(dir)) {
        fprintf(stderr, "deform train: cannot create %s: %s\n", dir, strerror(errno));
        df_rigdata_close(&d);
        return 1;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    df_ratrain_report_t rep;
    memset(&rep, 0, sizeof rep);
    int rc = df_rigapprox_train(&d, &o, path, &rep, &err);
    df_rigdata_close(&d);
    if (rc) {
        fprintf(stderr, "deform train: %s\n", err.msg);
        return 1;
    }
    if (write_config(out)) return 1;
    fprintf(stderr, "trained in %.1f s (%d epochs, best %d): validation diff L1 %.4g, anchor L2 %.4g; wrote %s/1/model.safetensors\n",
            rep.seconds, rep.epochs_run, rep.best_epoch, rep.val_diff, rep.val_anchor, out);
    return 0;
}

/* test_rigapprox.c — training, model file, served evaluation, bad datasets.
 *
 * References: the served model (df_model_evaluate, dense and sparse
 * reconstruction, batch 1 and batch 5) is compared with an offline forward
 * pass in double from the model file's tensors (rigapprox_ref.h, shared with
 * test_rigapprox_serve.c: features, MLPs, PCA layer, anchor mini-networks,
 * a dense solve of the omega-weighted normal equations built from the
 * triangles, LBS); training is run twice with one seed (identical files) and
 * once interrupted + resumed from a checkpoint (identical again). Local
 * joint features are computed here from the world matrices and the file's
 * joint_parents; a world-feature model (no joint_parents) still serves. The
 * last-layer refit is checked against a dense least-squares solve; the
 * position-space fine-tuning must lower the error on held-out poses.
 * Error-driven anchors run on a dataset whose v_nl is prescribed here
 * (make_syn_dataset), built so that anchors must fix a large error.
 * Every bound is far from rounding on any OpenBLAS kernel (training
 * trajectories differ between kernels): no check rests on a small effect.
 */
#include "dftest.h"
#include "df.h"
#include "rigapprox/refdeformer.h"
#include "rigapprox/rigapprox.h"
#include "rigapprox_ref.h"
#include "math/skin.h"

#include <stdlib.h>
#include <string.h>

static char dir[512];

static const char *path(const char *name)
{
    static char b[8][700];
    static int k;
    k = (k + 1) % 8;
    snprintf(b[k], sizeof b[k], "%s/%s", dir, name);
    return b[k];
}

static void small_opts(df_ratrain_opts_t *o)
{
    df_ratrain_opts_default(o);
    o->n_hidden = 2, o->hidden = 24, o->anchor_hidden_layers = 2, o->anchor_width = 12;
    o->epochs = 6, o->batch = 32, o->verbose = 0, o->anchor_frac = 0.05, o->pca_frac = 0.1;
    o->seed = 5;
}

static unsigned char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) { free(b); b = NULL; }
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}

/* n poses of the tiny reference rig with this seed (influence from
 * `influence` poses) written to dftest_out_dir()/name. */
static int make_dataset_n(int n, uint64_t seed, int influence, const char *name)
{
    df_refrig_opts_t o;
    df_refrig_opts_default(&o);
    o.n_controls = 4, o.n_combos = 2;
    df_refrig_t *r = NULL;
    df_error_t err = {0};
    int rc = df_refrig_tiny(8, 6, &o, &r, &err);
    if (!rc) rc = df_refrig_write_dataset(r, n, seed, 0, influence, path(name), &err);
    df_refrig_free(&r);
    if (rc) fprintf(stderr, "dataset: %s\n", err.msg);
    return rc;
}

static int make_dataset(void) { return make_dataset_n(160, 11, 4, "ra_tiny.safetensors"); }

/* ------------------------------------------- datasets with a known v_nl */
/* The tiny rig's mesh, skin weights, joints and controls (those of
 * ra_tiny.safetensors, 56 vertices: 7 rings of 8 at y = 0, 0.5 .. 3, the
 * height) with nonlinear offsets v_nl prescribed here, so that what a model
 * must reach is known: positions = T_i (v_i + v_nl,i), T_i the linear part.
 *   SYN_TWO_ENDS: v_nl = (c1 m0(y) + c3 m1(y), 0, 0), a sideways shift of
 *     the lower half (m0 = 0.6 ((1.5 - y) / 1.5)^2 below y = 1.5) and of the
 *     upper half (m1 = 0.3 ((y - 1.5) / 1.5)^2 above); `influence` written:
 *     |m0| for control 1, |m1| for control 3, 0 for everything else.
 *   SYN_LINEAR: v_nl affine in the model's features: a constant offset plus
 *     control 1, control 3 and (R10 - R01) / 2 of joint 1's local matrix R
 *     (world_0^-1 world_1; the tiny rig is the chain 0 <- 1 <- 2), each
 *     times a fixed shape; no influence tensor. (The rotation term is an
 *     antisymmetric pair, well conditioned among the rotation entries, so
 *     PCA + LR's small ridge, 1e-4 of the mean feature variance, costs
 *     3.4e-5 of the height-3 mesh; a single entry cost 5e-4.) */
enum { SYN_TWO_ENDS, SYN_LINEAR };

static void syn_vnl(int mode, const df_rigdata_t *d, int64_t s, float *nl)
{
    const float *c = d->controls + s * d->nc;
    float loc[12 * 3];
    const int32_t par[3] = {-1, 0, 1};
    df_rigapprox_local(3, par, d->joints + s * d->nj * 12, loc);
    for (int64_t v = 0; v < d->nv; v++) {
        double x = d->rest[v * 3], y = d->rest[v * 3 + 1], z = d->rest[v * 3 + 2], r = sqrt(x * x + z * z);
        double *o = (double[3]){0, 0, 0};
        if (mode == SYN_TWO_ENDS) {
            double m0 = y < 1.5 ? 0.6 * (1.5 - y) * (1.5 - y) / 2.25 : 0, m1 = y > 1.5 ? 0.3 * (y - 1.5) * (y - 1.5) / 2.25 : 0;
            o[0] = c[1] * m0 + c[3] * m1;
        } else {
            double ra = 0.5 * (loc[1 * 12 + 4] - loc[1 * 12 + 1]); /* joint 1's local (R10 - R01) / 2 */
            o[0] = 0.10 + 0.15 * c[3] * x / r * (y / 3) + 0.5 * ra * (y / 3) * (y / 3);
            o[1] = 0.05;
            o[2] = -0.08 + 0.2 * c[1] * sin(3.14159265 * y / 3) + 0.15 * c[3] * z / r * (y / 3);
        }
        for (int k = 0; k < 3; k++) nl[v * 3 + k] = (float)o[k];
    }
}

static int make_syn_dataset(int mode, const char *name)
{
    df_rigdata_t d;
    df_error_t err = {0};
    int rc = df_rigdata_open(path("ra_tiny.safetensors"), &d, &err);
    if (rc) return rc;
    int64_t V = d.nv, N = d.n, J = d.nj, C = d.nc;
    float *pos = malloc(sizeof(float) * N * V * 3), *T = malloc(sizeof(float) * V * 12), *nl = malloc(sizeof(float) * V * 3);
    float *infl = mode == SYN_TWO_ENDS ? calloc((size_t)(C + J) * V, sizeof(float)) : NULL;
    rc = pos && T && nl && (infl || mode != SYN_TWO_ENDS) && J == 3 && C >= 4 ? 0 : -1;
    for (int64_t v = 0; !rc && infl && v < V; v++) {
        double y = d.rest[v * 3 + 1];
        infl[1 * V + v] = (float)(y < 1.5 ? 0.6 * (1.5 - y) * (1.5 - y) / 2.25 : 0);
        infl[3 * V + v] = (float)(y > 1.5 ? 0.3 * (y - 1.5) * (y - 1.5) / 2.25 : 0);
    }
    for (int64_t s = 0; !rc && s < N; s++) {
        syn_vnl(mode, &d, s, nl);
        df_rigapprox_linear(V, J, (int)d.k, d.invbind, d.skin_j, d.skin_w, 1, d.joints + s * J * 12, T);
        df_rigapprox_apply(V, T, d.rest, nl, pos + s * V * 3);
    }
    if (!rc) {
        df_rigdata_t e = d;
        e.positions = pos, e.influence = infl;
        rc = df_rigdata_write(&e, path(name), &err);
    }
    if (rc) fprintf(stderr, "synthetic dataset %s: %s\n", name, err.msg);
    free(pos), free(T), free(nl), free(infl);
    df_rigdata_close(&d);
    return rc;
}

static void test_training_reproducible(void)
{
    df_rigdata_t d;
    df_error_t err = {0};
    int rc = df_rigdata_open(path("ra_tiny.safetensors"), &d, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    df_ratrain_opts_t o;
    small_opts(&o);
    df_ratrain_report_t rep;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_a.safetensors"), &rep, &err) == 0);
    DF_CHECK(rep.n_anchors >= 1 && rep.n_pca >= 1 && rep.epochs_run == 6);
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_b.safetensors"), NULL, &err) == 0);
    DF_CHECK(same_file(path("ra_a.safetensors"), path("ra_b.safetensors")));
    /* another seed gives another model */
    o.seed = 6;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_c.safetensors"), NULL, &err) == 0);
    DF_CHECK(!same_file(path("ra_a.safetensors"), path("ra_c.safetensors")));
    /* interrupted after the first epoch (time limit), resumed: same model */
    o.seed = 5;
    o.checkpoint = path("ra_ck.safetensors");
    remove(o.checkpoint);
    o.time_limit_s = 1e-9;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_d.safetensors"), &rep, &err) == 0);
    DF_CHECK(rep.epochs_run == 1);
    o.time_limit_s = 0;
    o.resume = 1;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_d.safetensors"), &rep, &err) == 0);
    DF_CHECK(rep.epochs_run == 6);
    DF_CHECK(same_file(path("ra_a.safetensors"), path("ra_d.safetensors")));
    df_rigdata_close(&d);
}

static double served_error(const char *model, const char *data, double *max, double *vmax);
static double served_mean_error(const char *model, const char *data);

/* ---------------------------------------------------- offline reference */
/* The model evaluated by rigapprox_ref.h (double loops, a dense solve of the
 * omega-weighted normal equations; omega <= 0: the file's), as floats; NaN
 * everywhere when it cannot (the message on stderr). */
static void offline(const df_st_t *st, const float *world, const float *ctl, double omega, float *out)
{
    raref_t r = {0};
    df_error_t err = {0};
    int64_t n = 0;
    const df_tensor_t *rp = df_st_find(st, "rest_positions");
    double *ref = rp ? malloc(sizeof(double) * (n = rp->shape[0] * 3)) : NULL;
    int rc = ref ? raref_open(st, &r, &err) : -1;
    if (!rc) rc = raref_eval(&r, world, ctl, omega, ref, &err);
    if (rc) fprintf(stderr, "offline: %s\n", err.msg);
    for (int64_t k = 0; k < n; k++) out[k] = rc ? NAN : (float)ref[k];
    raref_close(&r);
    free(ref);
}

static void served_equals_offline(const char *model)
{
    df_error_t err = {0};
    df_st_t *st = NULL;
    DF_CHECK(df_st_open(path(model), NULL, &st, &err) == 0);
    df_rigdata_t d;
    DF_CHECK(df_rigdata_open(path("ra_tiny.safetensors"), &d, &err) == 0);
    if (!st || !d.st) return;
    int64_t V = d.nv;
    enum { B = 5 };
    float *ref = malloc(sizeof(float) * B * V * 3), *got = malloc(sizeof(float) * B * V * 3);
    for (int b = 0; b < B; b++) offline(st, d.joints + b * 7 * d.nj * 12, d.controls + b * 7 * d.nc, 0, ref + b * V * 3);
    const char *params[2] = {"{\"reconstruction\": \"dense\"}", "{\"reconstruction\": \"sparse\"}"};
    for (int pi = 0; pi < 2; pi++) {
        df_model_t *m = NULL;
        int rc = df_model_open(path(model), "rigapprox", params[pi], NULL, &m, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc) continue;
        DF_CHECK(df_model_n_vertices(m) == V);
        int ij = df_model_find_input(m, "joint_matrices"), ic = df_model_find_input(m, "controls");
        int op = df_model_find_output(m, "positions");
        DF_CHECK(ij >= 0 && ic >= 0 && op >= 0);
        df_scratch_t *sc = df_scratch_new();
        for (int bs = 1; bs <= B; bs += B - 1) { /* batch 1 (gemv) and batch 5 */
            memset(got, 0, sizeof(float) * B * V * 3);
            for (int s = 0; s < B; s += bs) {
                const float *pj[B], *pc[B];
                float *po[B];
                for (int b = 0; b < bs; b++) {
                    pj[b] = d.joints + (s + b) * 7 * d.nj * 12;
                    pc[b] = d.controls + (s + b) * 7 * d.nc;
                    po[b] = got + (s + b) * V * 3;
                }
                df_batch_t bt;
                memset(&bt, 0, sizeof bt);
                bt.n = bs;
                bt.in[ij] = pj, bt.in[ic] = pc, bt.out[op] = po;
                void *mem = df_scratch_get(sc, 1);
                (void)mem;
                rc = df_model_evaluate(m, &bt, sc, &err);
                DF_CHECK_MSG(rc == 0, "%s", err.msg);
            }
            double mx = 0;
            for (int64_t i = 0; i < B * V * 3; i++) mx = fmax(mx, fabs(got[i] - ref[i]));
            DF_CHECK_MSG(mx < 1e-4 * d.height, "%s batch %d: served vs offline %g", params[pi], bs, mx);
        }
        /* a non-finite input is refused and named */
        float bad[12 * 64];
        memcpy(bad, d.joints, sizeof(float) * 12 * d.nj);
        bad[5] = NAN;
        const float *pj[1] = {bad};
        float *po[1] = {got};
        df_batch_t bt;
        memset(&bt, 0, sizeof bt);
        bt.n = 1, bt.in[ij] = pj, bt.out[op] = po;
        DF_CHECK(df_model_evaluate(m, &bt, sc, &err) == DF_EINVAL);
        DF_CHECK(strstr(err.msg, "joint_matrices") != NULL);
        /* a singular parent matrix (local features need its inverse) */
        const df_tensor_t *jp = df_st_find(st, "joint_parents");
        if (jp) {
            const int32_t *par = jp->data;
            int64_t pj0 = -1;
            for (int64_t j = 0; j < d.nj; j++)
                if (par[j] >= 0) pj0 = par[j];
            DF_CHECK(pj0 >= 0);
            memcpy(bad, d.joints, sizeof(float) * 12 * d.nj);
            for (int e = 0; e < 12; e++) bad[pj0 * 12 + e] = 0;
            DF_CHECK(df_model_evaluate(m, &bt, sc, &err) == DF_EINVAL);
            DF_CHECK_MSG(strstr(err.msg, "joint_matrices") && strstr(err.msg, "singular"), "%s", err.msg);
        }
        df_scratch_free(&sc);
        df_model_unref(&m);
    }
    free(ref), free(got);
    df_rigdata_close(&d);
    df_st_close(&st);
}

/* Local joint features (default: the model stores joint_parents) and the
 * older world-feature models (no joint_parents) both serve what the loops
 * compute; the local model's parents are the rig's hierarchy. */
static void test_served_equals_offline(void)
{
    df_error_t err = {0};
    df_st_t *st = NULL;
    DF_CHECK(df_st_open(path("ra_a.safetensors"), NULL, &st, &err) == 0);
    const df_tensor_t *jp = st ? df_st_find(st, "joint_parents") : NULL;
    DF_CHECK(jp && jp->dtype == DF_DT_I32 && jp->shape[0] == 3);
    if (jp) {
        const int32_t *p = jp->data; /* df_refrig_tiny: a chain 0 <- 1 <- 2 */
        DF_CHECK(p[0] == -1 && p[1] == 0 && p[2] == 1);
    }
    DF_CHECK(st && !strcmp(df_st_meta(st, "format_version"), "2"));
    df_st_close(&st);
    served_equals_offline("ra_a.safetensors");
    df_rigdata_t d;
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err)) return;
    df_ratrain_opts_t o;
    small_opts(&o);
    o.world_features = 1;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_w.safetensors"), NULL, &err) == 0);
    df_rigdata_close(&d);
    DF_CHECK(df_st_open(path("ra_w.safetensors"), NULL, &st, &err) == 0);
    DF_CHECK(st && !df_st_find(st, "joint_parents") && !strcmp(df_st_meta(st, "format_version"), "1"));
    df_st_close(&st);
    served_equals_offline("ra_w.safetensors");
}

/* Largest |served - offline(omega)| over poses 0, 7, .., 28 of the tiny
 * dataset, served one at a time with the given reconstruction. */
static double served_vs_offline(const char *model, const char *recon, double omega)
{
    df_error_t err = {0};
    df_st_t *st = NULL;
    df_rigdata_t d;
    df_model_t *m = NULL;
    char params[64];
    snprintf(params, sizeof params, "{\"reconstruction\": \"%s\"}", recon);
    if (df_st_open(path(model), NULL, &st, &err)) return INFINITY;
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err)) { df_st_close(&st); return INFINITY; }
    double mx = INFINITY;
    if (!df_model_open(path(model), "rigapprox", params, NULL, &m, &err)) {
        int64_t V = d.nv;
        float *ref = malloc(sizeof(float) * V * 3), *got = malloc(sizeof(float) * V * 3);
        df_scratch_t *sc = df_scratch_new();
        mx = 0;
        for (int s = 0; s < 5 * 7; s += 7) {
            offline(st, d.joints + s * d.nj * 12, d.controls + s * d.nc, omega, ref);
            float *po[1] = {got};
            if (df_rigdata_evaluate(m, &d, s, 1, po, sc, &err)) { mx = INFINITY; break; }
            for (int64_t i = 0; i < V * 3; i++) mx = fmax(mx, isfinite(ref[i]) ? fabs(got[i] - ref[i]) : INFINITY);
        }
        df_scratch_free(&sc);
        free(ref), free(got);
        df_model_unref(&m);
    }
    df_rigdata_close(&d);
    df_st_close(&st);
    return mx;
}

/* The anchor weight (--omega): a model trained with omega = 4 stores 4 and
 * serves (dense and sparse) what the offline loops give with a dense solve
 * of the omega = 4 normal equations built here (measured 5e-7, tolerance
 * 1e-4 x height); the offline answer with omega = 1 is >= 10x the
 * tolerance away (measured 0.044 = 147x), so a model that stores or serves
 * omega = 1 fails. --add-anchors keeps the model's omega unless given one. */
static void test_omega(void)
{
    df_error_t err = {0};
    df_rigdata_t d;
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err)) return;
    df_ratrain_opts_t o;
    small_opts(&o);
    o.omega = 4;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_om4.safetensors"), NULL, &err) == 0);
    double tol = 1e-4 * d.height;
    df_raanchor_opts_t ao;
    df_raanchor_opts_default(&ao);
    ao.add = 2, ao.rounds = 1, ao.epochs = 3, ao.verbose = 0;
    DF_CHECK(df_rigapprox_add_anchors(path("ra_om4.safetensors"), &d, &ao, path("ra_om4a.safetensors"), &err) == 0);
    ao.omega = 2;
    DF_CHECK(df_rigapprox_add_anchors(path("ra_om4.safetensors"), &d, &ao, path("ra_om2a.safetensors"), &err) == 0);
    df_rigdata_close(&d);
    const char *files[3] = {"ra_om4.safetensors", "ra_om4a.safetensors", "ra_om2a.safetensors"};
    const double want[3] = {4, 4, 2};
    for (int f = 0; f < 3; f++) {
        df_st_t *st = NULL;
        DF_CHECK(df_st_open(path(files[f]), NULL, &st, &err) == 0);
        const char *om = st ? df_st_meta(st, "omega") : NULL;
        DF_CHECK_MSG(om && strtod(om, NULL) == want[f], "%s: omega '%s', want %g", files[f], om ? om : "(none)", want[f]);
        df_st_close(&st);
    }
    const char *recon[2] = {"dense", "sparse"};
    for (int r = 0; r < 2; r++) {
        double e4 = served_vs_offline("ra_om4.safetensors", recon[r], 4);
        double e1 = served_vs_offline("ra_om4.safetensors", recon[r], 1);
        DF_CHECK_MSG(e4 <= tol, "%s: served vs offline with omega 4: %g (tolerance %g)", recon[r], e4, tol);
        DF_CHECK_MSG(e1 >= 10 * tol && isfinite(e1), "%s: served vs offline with omega 1: %g, not >= %g", recon[r], e1,
                     10 * tol);
        e4 = served_vs_offline("ra_om2a.safetensors", recon[r], 2);
        DF_CHECK_MSG(e4 <= tol, "%s: add-anchors --omega 2: served vs offline %g (tolerance %g)", recon[r], e4, tol);
    }
}

/* The position-space refit of the last layer is the least-squares optimum:
 * it equals a dense solve of the normal equations of
 *   sum_i |G (W h_i + b) - r_i|^2 + lambda |G W|_F^2,  lambda = ridge tr(H^T H)/Hd
 * over every entry of (W, b) at once, built here from the Jacobian. */
static double refit_objective(int n, int Hd, const float *h, int D, const float *r, int P, const float *G,
                              double lambda, const double *W, const double *b)
{
    double e = 0;
    for (int i = 0; i < n; i++) {
        double z[8];
        for (int p = 0; p < P; p++) {
            z[p] = b[p];
            for (int j = 0; j < Hd; j++) z[p] += W[p * Hd + j] * h[i * Hd + j];
        }
        for (int k = 0; k < D; k++) {
            double q = -r[i * D + k];
            for (int p = 0; p < P; p++) q += G[k * P + p] * z[p];
            e += q * q;
        }
    }
    for (int k = 0; k < D; k++)
        for (int j = 0; j < Hd; j++) {
            double q = 0;
            for (int p = 0; p < P; p++) q += G[k * P + p] * W[p * Hd + j];
            e += lambda * q * q;
        }
    return e;
}

static void test_refit_optimal(void)
{
    enum { N = 150, HD = 6, D = 15, P = 4, NT = P * (HD + 1) };
    float *h = malloc(sizeof(float) * N * HD), *r = malloc(sizeof(float) * N * D), G[D * P], W[P * HD], b[P];
    df_rng_t g = {77};
    for (int i = 0; i < D * P; i++) G[i] = (float)df_rng_normal(&g);
    for (int i = 0; i < N * HD; i++) h[i] = (float)fmax(0, df_rng_normal(&g) + 0.3); /* ReLU-like */
    for (int i = 0; i < N * D; i++) r[i] = (float)df_rng_normal(&g);
    double ridges[2] = {0, 1e-2};
    for (int ri = 0; ri < 2; ri++) {
        df_error_t err = {0};
        int rc = df__ra_refit_solve(N, HD, h, D, r, P, G, ridges[ri], W, b, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        double htr = 0;
        for (int i = 0; i < N * HD; i++) htr += (double)h[i] * h[i];
        double lambda = ridges[ri] * htr / HD;
        /* theta = [W row-major (P x HD), b (P)] */
        double *A = calloc(NT * NT, sizeof(double)), y[NT] = {0}, jr[NT];
        for (int i = 0; i < N; i++)
            for (int k = 0; k < D; k++) {
                for (int p = 0; p < P; p++) {
                    for (int j = 0; j < HD; j++) jr[p * HD + j] = G[k * P + p] * h[i * HD + j];
                    jr[P * HD + p] = G[k * P + p];
                }
                for (int a = 0; a < NT; a++) {
                    y[a] += jr[a] * r[i * D + k];
                    for (int c = 0; c < NT; c++) A[a * NT + c] += jr[a] * jr[c];
                }
            }
        for (int k = 0; k < D; k++) /* ridge rows sqrt(lambda) (G W)_kj */
            for (int j = 0; j < HD; j++) {
                for (int a = 0; a < NT; a++) jr[a] = 0;
                for (int p = 0; p < P; p++) jr[p * HD + j] = G[k * P + p];
                for (int a = 0; a < NT; a++)
                    for (int c = 0; c < NT; c++) A[a * NT + c] += lambda * jr[a] * jr[c];
            }
        DF_CHECK(raref_dense_solve(NT, A, y) == 0);
        double mx = 0, sc = 0;
        for (int a = 0; a < NT; a++) {
            double got = a < P * HD ? W[a] : b[a - P * HD];
            mx = fmax(mx, fabs(got - y[a]));
            sc = fmax(sc, fabs(y[a]));
        }
        DF_CHECK_MSG(mx <= 1e-3 * sc, "ridge %g: refit vs dense solve %g (scale %g)", ridges[ri], mx, sc);
        /* and no nearby (W, b) does better on the objective */
        double Wd[P * HD], bd[P];
        for (int a = 0; a < P * HD; a++) Wd[a] = W[a];
        for (int p = 0; p < P; p++) bd[p] = b[p];
        double e0 = refit_objective(N, HD, h, D, r, P, G, lambda, Wd, bd);
        for (int t = 0; t < 20; t++) {
            double Wp[P * HD], bp[P];
            for (int a = 0; a < P * HD; a++) Wp[a] = Wd[a] + 1e-2 * df_rng_normal(&g);
            for (int p = 0; p < P; p++) bp[p] = bd[p] + 1e-2 * df_rng_normal(&g);
            DF_CHECK(refit_objective(N, HD, h, D, r, P, G, lambda, Wp, bp) >= e0 * (1 - 1e-6));
        }
        free(A);
    }
    free(h), free(r);
}

/* Mean vertex error, over every pose of dataset `data`, of positions
 * T_i (v_i + nl_i) with one fixed nl [V,3] for all poses (NULL: 0, plain
 * skinning): the trivial baselines a trained variant must beat. */
static double fixed_offset_error(const char *data, const float *nl)
{
    df_error_t err = {0};
    df_rigdata_t d;
    if (df_rigdata_open(path(data), &d, &err)) return INFINITY;
    int64_t V = d.nv;
    float *T = malloc(sizeof(float) * V * 12), *p = malloc(sizeof(float) * V * 3);
    double sum = 0;
    for (int64_t s = 0; s < d.n; s++) {
        df_rigapprox_linear(V, d.nj, (int)d.k, d.invbind, d.skin_j, d.skin_w, 1, d.joints + s * d.nj * 12, T);
        df_rigapprox_apply(V, T, d.rest, nl, p);
        const float *g = d.positions + s * V * 3;
        for (int64_t v = 0; v < V; v++) {
            double a = p[v * 3] - g[v * 3], b = p[v * 3 + 1] - g[v * 3 + 1], c = p[v * 3 + 2] - g[v * 3 + 2];
            sum += sqrt(a * a + b * b + c * c);
        }
    }
    free(T), free(p);
    double e = sum / ((double)d.n * V);
    df_rigdata_close(&d);
    return e;
}

/* Baseline variants, each against what it must produce, on SYN_LINEAR (v_nl
 * affine in the features; its constant part, 0.14 long, is what a dropped
 * PCA mean loses):
 *  - PCA + LR (ridge regression to the PCA coefficients of v_nl) reproduces
 *    an affine v_nl up to its tiny ridge: served = the dataset's positions
 *    on every pose, max 1e-4 x height (measured 3.4e-5 / 3 on every
 *    OpenBLAS kernel; a dropped mean costs ~0.14); the file's pca_mean is
 *    the mean v_nl (computed here from the prescribed v_nl) over the
 *    training poses: with one validation pose (--val 0.001), the mean over
 *    all poses but one, to 1e-5;
 *  - Local (the network on v_nl, 60 epochs at lr 1e-2) has, on the poses it
 *    was trained on, at most 1/5 of the mean error of the best constant
 *    offset (the mean v_nl) and of plain skinning (measured 1/29 .. 1/19);
 *  - LBS serves plain skinning of the rest mesh, every pose. */
static void test_baseline_variants(void)
{
    df_rigdata_t d;
    df_error_t err = {0};
    DF_CHECK(make_syn_dataset(SYN_LINEAR, "ra_lin.safetensors") == 0);
    if (df_rigdata_open(path("ra_lin.safetensors"), &d, &err)) return;
    int64_t V = d.nv, N = d.n;
    double tol = 1e-4 * d.height;
    /* the prescribed v_nl: its sum over the poses, and each pose's */
    float *nl = malloc(sizeof(float) * N * V * 3), *mean = malloc(sizeof(float) * V * 3);
    double *sum = calloc((size_t)V * 3, sizeof(double));
    for (int64_t s = 0; s < N; s++) {
        syn_vnl(SYN_LINEAR, &d, s, nl + s * V * 3);
        for (int64_t k = 0; k < V * 3; k++) sum[k] += nl[s * V * 3 + k];
    }
    for (int64_t k = 0; k < V * 3; k++) mean[k] = (float)(sum[k] / N);
    df_ratrain_opts_t o;
    /* PCA + LR */
    small_opts(&o);
    o.variant = DF_RA_PCALR, o.val_frac = 1e-3;
    int rc = df_rigapprox_train(&d, &o, path("ra_vp.safetensors"), NULL, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    double mx = INFINITY;
    served_error("ra_vp.safetensors", "ra_lin.safetensors", &mx, NULL);
    DF_CHECK_MSG(mx <= tol, "pcalr: served vs the affine dataset, max %g (tolerance %g)", mx, tol);
    df_st_t *st = NULL;
    DF_CHECK(df_st_open(path("ra_vp.safetensors"), NULL, &st, &err) == 0);
    const df_tensor_t *pm = st ? df_st_find(st, "pca_mean") : NULL;
    DF_CHECK(pm && pm->dtype == DF_DT_F32 && pm->shape[0] == V * 3);
    if (pm && pm->shape[0] == V * 3) {
        const float *mu = pm->data;
        double best = INFINITY, all = 0;
        for (int64_t k = 0; k < N; k++) { /* the mean without pose k (the validation pose) */
            double dk = 0;
            for (int64_t i = 0; i < V * 3; i++) dk = fmax(dk, fabs(mu[i] - (sum[i] - nl[k * V * 3 + i]) / (N - 1)));
            best = fmin(best, dk);
        }
        for (int64_t i = 0; i < V * 3; i++) all = fmax(all, fabs(mu[i] - mean[i]));
        DF_CHECK_MSG(best <= 1e-5, "pcalr: pca_mean vs the training poses' mean v_nl: %g (vs every pose's: %g)", best,
                     all);
    }
    df_st_close(&st);
    /* Local */
    small_opts(&o);
    o.variant = DF_RA_LOCAL, o.epochs = 60, o.lr = 1e-2f;
    rc = df_rigapprox_train(&d, &o, path("ra_vl.safetensors"), NULL, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    double el = served_mean_error("ra_vl.safetensors", "ra_lin.safetensors");
    double ec = fixed_offset_error("ra_lin.safetensors", mean), e0 = fixed_offset_error("ra_lin.safetensors", NULL);
    DF_CHECK_MSG(el <= 0.2 * ec && el <= 0.2 * e0, "local: mean error %g; constant offset %g, skinning only %g", el, ec, e0);
    /* LBS */
    small_opts(&o);
    o.variant = DF_RA_LBS;
    rc = df_rigapprox_train(&d, &o, path("ra_vb.safetensors"), NULL, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    double eb = served_mean_error("ra_vb.safetensors", "ra_lin.safetensors");
    DF_CHECK_MSG(fabs(eb - e0) <= 1e-6 * e0, "lbs: mean error %g, plain skinning %g", eb, e0);
    df_model_t *m = NULL;
    rc = df_model_open(path("ra_vb.safetensors"), "rigapprox", NULL, NULL, &m, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (m) {
        float *out = malloc(sizeof(float) * V * 3), *Tm = malloc(sizeof(float) * 12 * V), *ref = malloc(sizeof(float) * 3 * V);
        df_scratch_t *sc = df_scratch_new();
        double worst = 0;
        for (int64_t s = 0; s < N; s++) {
            float *po[1] = {out};
            DF_CHECK(df_rigdata_evaluate(m, &d, s, 1, po, sc, &err) == 0);
            df_rigapprox_linear(V, d.nj, (int)d.k, d.invbind, d.skin_j, d.skin_w, 1, d.joints + s * d.nj * 12, Tm);
            df_rigapprox_apply(V, Tm, d.rest, NULL, ref);
            for (int64_t k = 0; k < V * 3; k++) worst = fmax(worst, fabs(ref[k] - out[k]));
        }
        DF_CHECK_MSG(worst < 1e-5, "lbs vs plain skinning: %g", worst);
        free(out), free(Tm), free(ref);
        df_scratch_free(&sc);
        df_model_unref(&m);
    }
    free(nl), free(mean), free(sum);
    df_rigdata_close(&d);
}

/* Malformed datasets: each refused with a message naming the problem. */
static void test_malformed_datasets(void)
{
    df_rigdata_t d;
    df_error_t err = {0};
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err)) return;
    size_t nt = d.nt * 3, nw = d.nv * d.k, nc = d.nc * 3;
    uint32_t *tris = malloc(sizeof(uint32_t) * nt);
    float *w = malloc(sizeof(float) * nw), *cr = malloc(sizeof(float) * nc);
    struct { const char *what, *expect; } cases[] = {
        {"triangle", "triangles"}, {"weights", "sum to"}, {"range", "control_ranges"}, {"samples", "samples"},
    };
    for (int c = 0; c < 4; c++) {
        df_rigdata_t e = d;
        memcpy(tris, d.tris, sizeof(uint32_t) * nt);
        memcpy(w, d.skin_w, sizeof(float) * nw);
        memcpy(cr, d.ctrl_range, sizeof(float) * nc);
        e.tris = tris, e.skin_w = w, e.ctrl_range = cr;
        if (c == 0) tris[7] = (uint32_t)d.nv + 3;
        if (c == 1) w[5 * d.k] += 0.5f;
        if (c == 2) cr[1 * 3] = 2, cr[1 * 3 + 1] = 1;
        if (c == 3) e.n = 1;
        DF_CHECK(df_rigdata_write(&e, path("ra_bad.safetensors"), &err) == 0);
        df_rigdata_t x;
        int rc = df_rigdata_open(path("ra_bad.safetensors"), &x, &err);
        DF_CHECK_MSG(rc == DF_EFORMAT && strstr(err.msg, cases[c].expect), "%s: rc %d '%s'", cases[c].what, rc, err.msg);
        if (!rc) df_rigdata_close(&x);
    }
    /* not a dataset at all: a model file */
    df_rigdata_t x;
    int rc = df_rigdata_open(path("ra_a.safetensors"), &x, &err);
    DF_CHECK(rc == DF_EFORMAT && strstr(err.msg, "rigdata"));
    /* garbage bytes */
    FILE *f = fopen(path("ra_junk.safetensors"), "wb");
    if (f) { fputs("not a safetensors file", f); fclose(f); }
    DF_CHECK(df_rigdata_open(path("ra_junk.safetensors"), &x, &err) < 0);
    free(tris), free(w), free(cr);
    df_rigdata_close(&d);
}

/* Joint parents inferred from world matrices: the tiny reference rig's own
 * hierarchy, and a random 12-joint tree posed by FK written here (random
 * local rotations about fixed bone offsets, the root moving too). */
static void rotm(double ax, double ay, double az, double *R)
{
    double th = sqrt(ax * ax + ay * ay + az * az), k[3] = {1, 0, 0};
    if (th > 1e-12) k[0] = ax / th, k[1] = ay / th, k[2] = az / th;
    double c = cos(th), s = sin(th), C = 1 - c;
    double M[9] = {c + k[0] * k[0] * C,        k[0] * k[1] * C - k[2] * s, k[0] * k[2] * C + k[1] * s,
                   k[1] * k[0] * C + k[2] * s, c + k[1] * k[1] * C,        k[1] * k[2] * C - k[0] * s,
                   k[2] * k[0] * C - k[1] * s, k[2] * k[1] * C + k[0] * s, c + k[2] * k[2] * C};
    memcpy(R, M, sizeof M);
}

static void test_joint_parents_inferred(void)
{
    df_refrig_opts_t o;
    df_refrig_opts_default(&o);
    o.n_controls = 4, o.n_combos = 2;
    df_refrig_t *r = NULL;
    df_error_t err = {0};
    df_rigdata_t d;
    DF_CHECK(df_refrig_tiny(8, 6, &o, &r, &err) == 0);
    DF_CHECK(df_rigdata_open(path("ra_tiny.safetensors"), &d, &err) == 0);
    if (r && d.nj == r->nj) {
        int32_t par[16];
        DF_CHECK(df__ra_joint_parents(d.n < 64 ? d.n : 64, d.nj, d.joints, 1.0, NULL, par, &err) == 0);
        for (int64_t j = 0; j < d.nj; j++) DF_CHECK(par[j] == r->parents[j]);
    }
    df_rigdata_close(&d);
    df_refrig_free(&r);
    enum { J = 12, NS = 40 };
    int32_t truth[J], got[J];
    double off[J][3];
    float *W = malloc(sizeof(float) * NS * J * 12);
    df_rng_t g = {12345};
    truth[0] = -1;
    for (int j = 1; j < J; j++) truth[j] = (int32_t)(df_rng_u64(&g) % (uint64_t)j);
    for (int j = 0; j < J; j++)
        for (int c = 0; c < 3; c++) off[j][c] = df_rng_normal(&g);
    for (int n = 0; n < NS; n++) {
        double R[J][9], t[J][3];
        for (int j = 0; j < J; j++) { /* parents come first (truth[j] < j) */
            double L[9];
            rotm(0.5 * df_rng_normal(&g), 0.5 * df_rng_normal(&g), 0.5 * df_rng_normal(&g), L);
            if (truth[j] < 0) {
                memcpy(R[j], L, sizeof L);
                for (int c = 0; c < 3; c++) t[j][c] = off[j][c] + 0.3 * df_rng_normal(&g);
            } else {
                const double *P = R[truth[j]];
                for (int a = 0; a < 3; a++) {
                    for (int b = 0; b < 3; b++)
                        R[j][a * 3 + b] = P[a * 3] * L[b] + P[a * 3 + 1] * L[3 + b] + P[a * 3 + 2] * L[6 + b];
                    t[j][a] = t[truth[j]][a] + P[a * 3] * off[j][0] + P[a * 3 + 1] * off[j][1] + P[a * 3 + 2] * off[j][2];
                }
            }
            float *m = W + ((size_t)n * J + j) * 12;
            for (int a = 0; a < 3; a++) {
                for (int b = 0; b < 3; b++) m[a * 4 + b] = (float)R[j][a * 3 + b];
                m[a * 4 + 3] = (float)t[j][a];
            }
        }
    }
    DF_CHECK(df__ra_joint_parents(NS, J, W, 3.0, NULL, got, &err) == 0);
    for (int j = 0; j < J; j++) DF_CHECK(got[j] == truth[j]);
    free(W);
}

/* What the trainer cannot learn is refused with the name of the culprit
 * (issue: a flat skeleton sampled at rest trained into a model that ignores
 * every feature; a hierarchy guessed with a cycle loaded anyway). Each case
 * is the tiny dataset with one thing broken. */
static int train_msg(const df_rigdata_t *e, const char *out, char *msg, size_t n)
{
    df_ratrain_opts_t o;
    small_opts(&o);
    o.epochs = 1;
    df_error_t err = {0};
    int rc = df_rigapprox_train(e, &o, path(out), NULL, &err);
    snprintf(msg, n, "%s", err.msg);
    return rc;
}

static void test_refusals(void)
{
    df_rigdata_t d;
    df_error_t err = {0};
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err)) return;
    int64_t N = d.n, J = d.nj, C = d.nc;
    float *ctl = malloc(sizeof(float) * N * C), *jm = malloc(sizeof(float) * N * J * 12);
    char msg[512];
    DF_CHECK(d.parents && d.nc >= 3 && J == 3);
    /* the intact dataset trains */
    DF_CHECK_MSG(train_msg(&d, "ra_ref0.safetensors", msg, sizeof msg) == 0, "%s", msg);
    /* control 2 never moves */
    df_rigdata_t e = d;
    memcpy(ctl, d.controls, sizeof(float) * N * C);
    for (int64_t s = 0; s < N; s++) ctl[s * C + 2] = 0.25f;
    e.controls = ctl;
    int rc = train_msg(&e, "ra_ref1.safetensors", msg, sizeof msg);
    DF_CHECK_MSG(rc == DF_EINVAL && strstr(msg, d.control_names[2]) && strstr(msg, "never moves"), "%d %s", rc, msg);
    /* nothing moves: every pose is pose 0 (the flat skeleton sampled at rest) */
    for (int64_t s = 0; s < N; s++) {
        memcpy(ctl + s * C, d.controls, sizeof(float) * C);
        memcpy(jm + s * J * 12, d.joints, sizeof(float) * J * 12);
    }
    e.joints = jm;
    rc = train_msg(&e, "ra_ref2.safetensors", msg, sizeof msg);
    DF_CHECK_MSG(rc == DF_EINVAL && strstr(msg, "nothing moves"), "%d %s", rc, msg);
    /* a stored hierarchy with a cycle (joint 0 <- 2 <- 1 <- 0) is refused when the file is read */
    int32_t cyc[3] = {2, 0, 1};
    e = d;
    e.parents = cyc;
    DF_CHECK(df_rigdata_write(&e, path("ra_cycle.safetensors"), &err) == 0);
    df_rigdata_t x;
    rc = df_rigdata_open(path("ra_cycle.safetensors"), &x, &err);
    DF_CHECK_MSG(rc == DF_EFORMAT && strstr(err.msg, "cycle") && strstr(err.msg, d.joint_names[1]), "%d %s", rc, err.msg);
    if (!rc) df_rigdata_close(&x);
    /* no stored hierarchy and joints 0 and 1 never move: each carries the
     * other rigidly, so no hierarchy can be inferred (a cycle 0 <-> 1, or
     * joint 2 with two candidate parents) */
    memcpy(jm, d.joints, sizeof(float) * N * J * 12);
    for (int64_t s = 1; s < N; s++) memcpy(jm + s * J * 12, d.joints, sizeof(float) * 2 * 12);
    e = d;
    e.parents = NULL, e.joints = jm;
    rc = train_msg(&e, "ra_ref3.safetensors", msg, sizeof msg);
    DF_CHECK_MSG(rc == DF_EFORMAT && (strstr(msg, "cannot infer the parent") || strstr(msg, "cycle ('bone")) &&
                 strstr(msg, "joint_parents"), "%d %s", rc, msg);
    /* ... and with the hierarchy stored, the same poses train */
    e.parents = d.parents;
    DF_CHECK_MSG(train_msg(&e, "ra_ref4.safetensors", msg, sizeof msg) == 0, "%s", msg);
    free(ctl), free(jm);
    df_rigdata_close(&d);
}

/* Anchors per connected shell: the tiny rig's mesh twice, side by side (two
 * shells of 56 vertices on the same joints), the second shell's influence
 * scaled by `k2`. The heaviest shell gets anchor_frac x V anchors, the
 * other round(that x its summed deformation / the heaviest's), with the
 * deformation of a vertex = its summed influence / the largest + 0.02
 * (recomputed here from the file). Equal shells get equal shares (the old
 * choice: all on the first, 3 on the other). */
static int two_shells(double k2, const char *name)
{
    df_rigdata_t d;
    df_error_t err = {0};
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err) || !d.influence) return -1;
    int64_t V = d.nv, N = d.n, NI = d.nc + d.nj, K = d.k;
    float *rest = malloc(sizeof(float) * 6 * V), *pos = malloc(sizeof(float) * N * 6 * V);
    float *w = malloc(sizeof(float) * 2 * V * K), *inf = malloc(sizeof(float) * NI * 2 * V);
    int32_t *sj = malloc(sizeof(int32_t) * 2 * V * K);
    uint32_t *tri = malloc(sizeof(uint32_t) * 6 * d.nt);
    for (int64_t v = 0; v < V; v++)
        for (int c = 0; c < 3; c++) rest[v * 3 + c] = d.rest[v * 3 + c], rest[(V + v) * 3 + c] = d.rest[v * 3 + c] + (c == 0 ? 10.0f : 0.0f);
    for (int64_t s = 0; s < N; s++)
        for (int64_t v = 0; v < V; v++)
            for (int c = 0; c < 3; c++) {
                float p = d.positions[(s * V + v) * 3 + c];
                pos[(s * 2 * V + v) * 3 + c] = p, pos[(s * 2 * V + V + v) * 3 + c] = p + (c == 0 ? 10.0f : 0.0f);
            }
    for (int64_t i = 0; i < V * K; i++) w[i] = w[V * K + i] = d.skin_w[i], sj[i] = sj[V * K + i] = d.skin_j[i];
    for (int64_t i = 0; i < NI; i++)
        for (int64_t v = 0; v < V; v++)
            inf[i * 2 * V + v] = d.influence[i * V + v], inf[i * 2 * V + V + v] = (float)k2 * d.influence[i * V + v];
    for (int64_t t = 0; t < d.nt * 3; t++) tri[t] = d.tris[t], tri[d.nt * 3 + t] = d.tris[t] + (uint32_t)V;
    df_rigdata_t e = d;
    e.nv = 2 * V, e.nt = 2 * d.nt, e.rest = rest, e.positions = pos, e.skin_w = w, e.skin_j = sj, e.influence = inf;
    e.tris = tri;
    int rc = df_rigdata_write(&e, path(name), &err);
    free(rest), free(pos), free(w), free(inf), free(sj), free(tri);
    df_rigdata_close(&d);
    return rc;
}

static void test_anchors_per_shell(void)
{
    for (int c = 0; c < 3; c++) {
        double k2 = c == 0 ? 1.0 : c == 1 ? 0.5 : 0.0;
        DF_CHECK(two_shells(k2, "ra_2s.safetensors") == 0);
        df_rigdata_t d;
        df_error_t err = {0};
        if (df_rigdata_open(path("ra_2s.safetensors"), &d, &err)) { DF_CHECK_MSG(0, "%s", err.msg); return; }
        df_ratrain_opts_t o;
        small_opts(&o);
        o.epochs = 0, o.no_refit = 1, o.anchor_frac = 0.1;
        DF_CHECK(df_rigapprox_train(&d, &o, path("ra_2s_m.safetensors"), NULL, &err) == 0);
        /* the expected shares, from the influence written above */
        int64_t V = d.nv, H = V / 2, NI = d.nc + d.nj;
        double mx = 0, w[2] = {0, 0};
        for (int64_t v = 0; v < V; v++) {
            double q = 0;
            for (int64_t i = 0; i < NI; i++) q += d.influence[i * V + v];
            mx = q > mx ? q : mx;
        }
        for (int64_t v = 0; v < V; v++) {
            double q = 0;
            for (int64_t i = 0; i < NI; i++) q += d.influence[i * V + v];
            w[v >= H] += q / mx + 0.02;
        }
        int64_t want = llround(0.1 * V), k1 = llround(want * w[1] / w[0]);
        if (k1 < 3) k1 = 3;
        df_st_t *st = NULL;
        df_ramodel_t m;
        if (df_st_open(path("ra_2s_m.safetensors"), NULL, &st, &err) || df_ramodel_read(st, &m, &err)) {
            DF_CHECK_MSG(0, "%s", err.msg);
            df_st_close(&st);
            df_rigdata_close(&d);
            return;
        }
        int64_t n[2] = {0, 0};
        int distinct = 1;
        for (int64_t a = 0; a < m.na; a++) {
            n[m.anchors[a] >= H]++;
            for (int64_t b = 0; b < a; b++) distinct &= m.anchors[a] != m.anchors[b];
        }
        DF_CHECK_MSG(n[0] == want && n[1] == k1 && distinct && (c != 0 || n[1] == n[0]) && (c != 1 || (k1 > 3 && k1 < want)),
                     "influence x %g on the second shell: %lld + %lld anchors, want %lld + %lld", k2, (long long)n[0],
                     (long long)n[1], (long long)want, (long long)k1);
        df_ramodel_release(&m);
        df_st_close(&st);
        df_rigdata_close(&d);
    }
}

/* The linear path beside the network (OURS, LOCAL): for LOCAL its basis is
 * the v_nl PCA of PCA + LR, so net_linear must be PCA + LR's single layer
 * (an independent solve: Cholesky by hand there, LAPACK here) to 1e-3 of
 * its largest weight; --no-linear writes none; on SYN_LINEAR (v_nl affine
 * in the features) a LOCAL model trained 2 epochs with the path is at least
 * 2.5x closer than without it (4.1x measured; the network alone cannot learn the affine map
 * in 2 epochs; the path is exact up to the ridge); the same for OURS with
 * the anchors' linear path as well (5.8x measured), whose tensors --no-linear
 * leaves out too. */
static void test_linear_path(void)
{
    df_error_t err = {0};
    DF_CHECK(make_syn_dataset(SYN_LINEAR, "ra_lin.safetensors") == 0);
    df_rigdata_t d;
    if (df_rigdata_open(path("ra_lin.safetensors"), &d, &err)) { DF_CHECK_MSG(0, "%s", err.msg); return; }
    df_ratrain_opts_t o;
    small_opts(&o);
    o.epochs = 2, o.no_refit = 1;
    o.variant = DF_RA_PCALR;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_lin_p.safetensors"), NULL, &err) == 0);
    o.variant = DF_RA_LOCAL;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_lin_l.safetensors"), NULL, &err) == 0);
    o.no_linear = 1;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_lin_n.safetensors"), NULL, &err) == 0);
    o.variant = DF_RA_OURS; /* the anchors' linear path too */
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_lin_on.safetensors"), NULL, &err) == 0);
    o.no_linear = 0;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_lin_o.safetensors"), NULL, &err) == 0);
    df_rigdata_close(&d);
    df_st_t *sp = NULL, *sl = NULL, *sn = NULL;
    DF_CHECK(df_st_open(path("ra_lin_p.safetensors"), NULL, &sp, &err) == 0);
    DF_CHECK(df_st_open(path("ra_lin_l.safetensors"), NULL, &sl, &err) == 0);
    DF_CHECK(df_st_open(path("ra_lin_n.safetensors"), NULL, &sn, &err) == 0);
    const df_tensor_t *wp = sp ? df_st_find(sp, "net/0/weight") : NULL, *bp = sp ? df_st_find(sp, "net/0/bias") : NULL;
    const df_tensor_t *wl = sl ? df_st_find(sl, "net_linear/weight") : NULL, *bl = sl ? df_st_find(sl, "net_linear/bias") : NULL;
    DF_CHECK(sn && !df_st_find(sn, "net_linear/weight"));
    DF_CHECK(wp && wl && bp && bl && wp->nbytes == wl->nbytes && bp->nbytes == bl->nbytes);
    if (wp && wl && bp && bl && wp->nbytes == wl->nbytes && bp->nbytes == bl->nbytes) {
        const float *a = wp->data, *b = wl->data;
        double mx = 0, dm = 0;
        for (size_t i = 0; i < wp->nbytes / 4; i++) mx = fmax(mx, fabs(a[i])), dm = fmax(dm, fabs(a[i] - b[i]));
        for (size_t i = 0; i < bp->nbytes / 4; i++)
            dm = fmax(dm, fabs(((const float *)bp->data)[i] - ((const float *)bl->data)[i]));
        DF_CHECK_MSG(dm <= 1e-3 * mx && mx > 0, "linear path vs PCA + LR: max difference %g (largest weight %g)", dm, mx);
    }
    df_st_close(&sp), df_st_close(&sl), df_st_close(&sn);
    double el = served_mean_error("ra_lin_l.safetensors", "ra_lin.safetensors");
    double en = served_mean_error("ra_lin_n.safetensors", "ra_lin.safetensors");
    DF_CHECK_MSG(isfinite(el) && el * 2.5 < en, "LOCAL 2 epochs on an affine v_nl: with the linear path %g, without %g", el, en);
    double eo = served_mean_error("ra_lin_o.safetensors", "ra_lin.safetensors");
    double eon = served_mean_error("ra_lin_on.safetensors", "ra_lin.safetensors");
    DF_CHECK_MSG(isfinite(eo) && eo * 2.5 < eon, "OURS 2 epochs on an affine v_nl: with both linear paths %g, without %g",
                 eo, eon);
    df_st_t *so = NULL;
    DF_CHECK(df_st_open(path("ra_lin_o.safetensors"), NULL, &so, &err) == 0 && df_st_find(so, "anchor_linear/weight") &&
             df_st_find(so, "net_linear/weight"));
    df_st_close(&so);
    DF_CHECK(df_st_open(path("ra_lin_on.safetensors"), NULL, &so, &err) == 0 && !df_st_find(so, "anchor_linear/weight"));
    df_st_close(&so);
}

/* Dual quaternion skinning as the linear part (datasets with skinning =
 * dqs: Blender's Preserve Volume, the Red Eclipse player's): (a) T_i applied
 * to the rest mesh equals the rigged kind's DQS kernel (df__skin_dqs,
 * core/math/skin.c: its own blend and matrix conversion) on the tiny rig's
 * poses with one joint scaled non-uniformly (two of them also with joints
 * 0 and 1 turned 6 rad apart, whose quaternions then lie in opposite
 * hemispheres), to 1e-5 of the height, and
 * differs from LBS there by > 1e-3; (b) the tiny rig's poses skinned by DQS
 * (v_nl = 0): an LBS-variant model on them marked dqs serves them to 1e-5
 * of the height, marked lbs it does not (> 100x that); (c) an OURS model
 * on them serves what the offline reference computes (its own DQS in
 * double, rigid joints). */
static void test_dqs(void)
{
    df_error_t err = {0};
    df_rigdata_t d;
    if (df_rigdata_open(path("ra_tiny.safetensors"), &d, &err)) { DF_CHECK_MSG(0, "%s", err.msg); return; }
    int64_t V = d.nv, J = d.nj, N = d.n;
    int K = (int)d.k;
    df__skin_t sk;
    DF_CHECK(df__skin_build(&sk, V, K, d.skin_j, d.skin_w) == 0);
    float *T = malloc(sizeof(float) * V * 12), *a = malloc(sizeof(float) * V * 3), *b = malloc(sizeof(float) * V * 3);
    float *rest1 = calloc(V * 3 + 4, sizeof(float)), *W = malloc(sizeof(float) * J * 12), *pos = malloc(sizeof(float) * N * V * 3);
    float *skm = malloc(sizeof(float) * J * 12), *dq = malloc(sizeof(float) * J * 8), *plin = malloc(sizeof(float) * J * 12);
    float *lin16 = aligned_alloc(32, sizeof(float) * 16 * (J + 1)), *dq8 = aligned_alloc(32, sizeof(float) * 8 * (J + 1));
    memcpy(rest1, d.rest, sizeof(float) * V * 3);
    double mx = 0, ml = 0;
    for (int p = 0; p < 10; p++) {
        memcpy(W, d.joints + (int64_t)p * 7 * J * 12, sizeof(float) * J * 12);
        float sc[3] = {1.3f, 0.8f, 1.1f}; /* joint p % J scaled along its own axes */
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 3; c++) W[(p % J) * 12 + r * 4 + c] *= sc[c];
        if (p < 2) { /* joints 0 and 1 turned -3 and +3 rad about x: their quaternions in opposite hemispheres */
            for (int j = 0; j < 2; j++) {
                double th = j ? 3.0 : -3.0, cs = cos(th), sn = sin(th);
                float *m = W + j * 12, o[12];
                memcpy(o, m, sizeof o);
                for (int c = 0; c < 4; c++) {
                    m[4 + c] = (float)(cs * o[4 + c] - sn * o[8 + c]);
                    m[8 + c] = (float)(sn * o[4 + c] + cs * o[8 + c]);
                }
            }
        }
        df_rigapprox_linear_skin(1, V, J, K, d.invbind, d.skin_j, d.skin_w, 1, W, T);
        df_rigapprox_apply(V, T, d.rest, NULL, a);
        df__ra_skin_prepare(J, d.invbind, W, 1, skm, dq, plin);
        for (int64_t j = 0; j < J; j++) df__skin_pack(plin + j * 12, lin16 + j * 16);
        memcpy(dq8, dq, sizeof(float) * 8 * J);
        df__skin_dqs(&sk, dq8, lin16, rest1, NULL, b, NULL);
        for (int64_t i = 0; i < V * 3; i++) mx = fmax(mx, fabs(a[i] - b[i]));
        df_rigapprox_linear(V, J, K, d.invbind, d.skin_j, d.skin_w, 1, W, T);
        df_rigapprox_apply(V, T, d.rest, NULL, a);
        for (int64_t i = 0; i < V * 3; i++) ml = fmax(ml, fabs(a[i] - b[i]));
    }
    DF_CHECK_MSG(mx < 1e-5 * d.height && ml > 1e-3 * d.height, "DQS T_i vs df__skin_dqs %g, LBS vs DQS %g", mx, ml);
    for (int64_t s = 0; s < N; s++) {
        df_rigapprox_linear_skin(1, V, J, K, d.invbind, d.skin_j, d.skin_w, 1, d.joints + s * J * 12, T);
        df_rigapprox_apply(V, T, d.rest, NULL, pos + s * V * 3);
    }
    df_rigdata_t e = d;
    e.positions = pos, e.dqs = 1;
    DF_CHECK(df_rigdata_write(&e, path("ra_dqs.safetensors"), &err) == 0);
    e.dqs = 0;
    DF_CHECK(df_rigdata_write(&e, path("ra_dqs_lbs.safetensors"), &err) == 0);
    df_rigdata_close(&d);
    df_ratrain_opts_t o;
    small_opts(&o);
    const char *data[2] = {"ra_dqs.safetensors", "ra_dqs_lbs.safetensors"}, *mod[2] = {"ra_dqs_m.safetensors", "ra_dqs_ml.safetensors"};
    double em[2] = {INFINITY, INFINITY};
    for (int k = 0; k < 2; k++) {
        df_rigdata_t x;
        if (df_rigdata_open(path(data[k]), &x, &err)) { DF_CHECK_MSG(0, "%s", err.msg); continue; }
        DF_CHECK(x.dqs == (k == 0));
        o.variant = DF_RA_LBS;
        DF_CHECK(df_rigapprox_train(&x, &o, path(mod[k]), NULL, &err) == 0);
        double h = x.height;
        df_rigdata_close(&x);
        double mxe = 0;
        served_error(mod[k], data[k], &mxe, NULL);
        em[k] = mxe / h;
    }
    DF_CHECK_MSG(em[0] < 1e-5 && em[1] > 100 * 1e-5, "LBS variant, max error / height: marked dqs %g, marked lbs %g", em[0], em[1]);
    df_rigdata_t x;
    if (!df_rigdata_open(path("ra_dqs.safetensors"), &x, &err)) {
        o.variant = DF_RA_OURS, o.epochs = 2;
        DF_CHECK(df_rigapprox_train(&x, &o, path("ra_dqs_o.safetensors"), NULL, &err) == 0);
        df_rigdata_close(&x);
        served_equals_offline("ra_dqs_o.safetensors");
    }
    df__skin_free(&sk);
    free(T), free(a), free(b), free(rest1), free(W), free(pos), free(skm), free(dq), free(plin), free(lin16), free(dq8);
}

/* Mean vertex error of a served model (dense reconstruction) on every pose
 * of a dataset, computed here from the served positions and the dataset's. */
static double served_mean_error(const char *model, const char *data) { return served_error(model, data, NULL, NULL); }

/* vmax [V] (may be NULL): each vertex's largest error over the poses. */
static double served_error(const char *model, const char *data, double *max, double *vmax)
{
    df_error_t err = {0};
    df_rigdata_t d;
    if (df_rigdata_open(path(data), &d, &err)) return INFINITY;
    df_model_t *m = NULL;
    if (df_model_open(path(model), "rigapprox", NULL, NULL, &m, &err)) {
        df_rigdata_close(&d);
        return INFINITY;
    }
    int ij = df_model_find_input(m, "joint_matrices"), ic = df_model_find_input(m, "controls");
    int op = df_model_find_output(m, "positions");
    int64_t V = d.nv;
    float *got = malloc(sizeof(float) * V * 3);
    df_scratch_t *sc = df_scratch_new();
    double sum = 0, mx = 0;
    int ok = got && sc && ij >= 0 && ic >= 0 && op >= 0;
    for (int64_t v = 0; vmax && v < V; v++) vmax[v] = INFINITY;
    for (int64_t s = 0; ok && s < d.n; s++) {
        const float *pj[1] = {d.joints + s * d.nj * 12}, *pc[1] = {d.controls + s * d.nc};
        float *po[1] = {got};
        df_batch_t bt;
        memset(&bt, 0, sizeof bt);
        bt.n = 1, bt.in[ij] = pj, bt.in[ic] = pc, bt.out[op] = po;
        if (df_model_evaluate(m, &bt, sc, &err)) { ok = 0; break; }
        const float *ref = d.positions + s * V * 3;
        for (int64_t v = 0; v < V; v++) {
            double a = got[v * 3] - ref[v * 3], b = got[v * 3 + 1] - ref[v * 3 + 1], c = got[v * 3 + 2] - ref[v * 3 + 2];
            double e = sqrt(a * a + b * b + c * c);
            sum += e;
            mx = fmax(mx, e);
            if (vmax) vmax[v] = s ? fmax(vmax[v], e) : e;
        }
    }
    double e = ok ? sum / ((double)d.n * V) : INFINITY;
    if (max) *max = ok ? mx : INFINITY;
    df_scratch_free(&sc);
    free(got);
    df_model_unref(&m);
    df_rigdata_close(&d);
    return e;
}

/* Position-space fine-tuning (--pos-epochs): the same training with and
 * without it (one seed); the fine-tuned model must be clearly better on
 * poses it never saw (another seed), measured through the served model.
 * A gradient that does not descend (e.g. its sign flipped) leaves the
 * starting weights as the best ones and the two errors equal; one that
 * still descends but is inexact (through the PCA basis instead of the
 * folded G, or squared instead of Euclidean errors) is not caught here
 * (measured: it still improves). The effect is made large against
 * rounding: the 6-epoch model is far from converged and the fine-tuning
 * runs at --pos-lr 1e-2 (held-out error ratio measured 0.41 on every
 * OpenBLAS kernel; at the default 0.3 x lr it was 0.938..0.943 against a
 * 0.95 bound). It must also stay reproducible. */
static void test_position_finetune(void)
{
    df_error_t err = {0};
    int rc = make_dataset_n(60, 99, 0, "ra_tiny_test.safetensors");
    DF_CHECK(rc == 0);
    df_rigdata_t d;
    rc = df_rigdata_open(path("ra_tiny.safetensors"), &d, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    df_ratrain_opts_t o;
    small_opts(&o);
    o.no_refit = 1;
    o.no_linear = 1; /* the plain network: the linear path leaves less for fine-tuning to fix */
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_p0.safetensors"), NULL, &err) == 0);
    o.pos_epochs = 40, o.pos_lr = 1e-2f;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_p1.safetensors"), NULL, &err) == 0);
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_p2.safetensors"), NULL, &err) == 0);
    DF_CHECK(same_file(path("ra_p1.safetensors"), path("ra_p2.safetensors")));
    o.pos_epochs = -1;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_p3.safetensors"), NULL, &err) == DF_EINVAL);
    o.pos_epochs = 3, o.variant = DF_RA_LOCAL; /* nothing to fine-tune through: refused, named */
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_p3.safetensors"), NULL, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "--pos-epochs") && strstr(err.msg, "local"), "%s", err.msg);
    df_rigdata_close(&d);
    double e0 = served_mean_error("ra_p0.safetensors", "ra_tiny_test.safetensors");
    double e1 = served_mean_error("ra_p1.safetensors", "ra_tiny_test.safetensors");
    DF_CHECK_MSG(isfinite(e0) && e1 < 0.7 * e0, "held-out mean error without %g, with fine-tuning %g", e0, e1);
}

/* Error-driven anchors (df_rigapprox_add_anchors), on a case built so that
 * the effect is large against rounding: SYN_TWO_ENDS, and a model with one
 * principal component (taken by the larger lower mode) and one anchor (vertex
 * 0, at the bottom). The upper mode reaches neither the differential
 * coordinates nor an anchor, so the top ring is off by up to 0.3 |c3| (10 %
 * of the height), more than any other vertex. K = 8 anchors in one round must
 *  - go to the K vertices of largest training-set error, ranked here from
 *    the served model (the top ring: a clear gap to the next vertex),
 *  - get trained networks: the error at those vertices drops at least 4x
 *    (measured 14x on every OpenBLAS kernel; untrained or unscaled networks
 *    leave it or raise it),
 *  - leave the model's own anchors and their networks untouched, all K
 *    distinct and new;
 * and the file loads and serves what the offline loops compute (they read
 * every anchor from the file), the same file on 1 or 3 threads (also over
 * 2 rounds); refusals named. Not asserted: a lower max error over the whole
 * training set. Anchors are soft (weight omega): the solve shares the
 * disagreement between the predicted differential coordinates and the
 * anchors, so anchors added where the error is large can raise it elsewhere
 * (here: the bottom ring, its single anchor now outvoted by eight). */
static void test_add_anchors(void)
{
    df_error_t err = {0};
    df_rigdata_t d;
    DF_CHECK(make_syn_dataset(SYN_TWO_ENDS, "ra_aas.safetensors") == 0);
    int rc = df_rigdata_open(path("ra_aas.safetensors"), &d, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    df_ratrain_opts_t o;
    small_opts(&o);
    o.anchor_frac = 0.01, o.pca_frac = 0.01, o.epochs = 40;
    df_ratrain_report_t rep;
    memset(&rep, 0, sizeof rep);
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_aa0.safetensors"), &rep, &err) == 0);
    DF_CHECK_MSG(rep.n_anchors == 1 && rep.n_pca == 1, "%lld anchors, %lld PCs (want 1, 1)", (long long)rep.n_anchors,
                 (long long)rep.n_pca);
    enum { K = 8 };
    df_raanchor_opts_t ao;
    df_raanchor_opts_default(&ao);
    ao.add = K, ao.rounds = 1, ao.epochs = 300, ao.verbose = 0;
    rc = df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa1.safetensors"), &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    ao.threads = 3; /* the same file whatever the thread count */
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa2.safetensors"), &err) == 0);
    DF_CHECK(same_file(path("ra_aa1.safetensors"), path("ra_aa2.safetensors")));
    ao.rounds = 2; /* errors re-evaluated between the rounds */
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa4.safetensors"), &err) == 0);
    ao.threads = 1;
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa5.safetensors"), &err) == 0);
    DF_CHECK(same_file(path("ra_aa4.safetensors"), path("ra_aa5.safetensors")));
    int64_t V = d.nv;
    double *e0 = malloc(sizeof(double) * V), *e1 = malloc(sizeof(double) * V), *rank = malloc(sizeof(double) * V);
    served_error("ra_aa0.safetensors", "ra_aas.safetensors", NULL, e0);
    served_error("ra_aa1.safetensors", "ra_aas.safetensors", NULL, e1);
    const char *files[2] = {"ra_aa1.safetensors", "ra_aa4.safetensors"};
    for (int f = 0; f < 2; f++) {
        df_st_t *s0 = NULL, *s1 = NULL;
        df_ramodel_t m0, m1;
        DF_CHECK(df_st_open(path("ra_aa0.safetensors"), NULL, &s0, &err) == 0 && df_ramodel_read(s0, &m0, &err) == 0);
        DF_CHECK(df_st_open(path(files[f]), NULL, &s1, &err) == 0 && df_ramodel_read(s1, &m1, &err) == 0);
        if (!s0 || !s1 || m0.na != 1 || m1.na != m0.na + K) {
            DF_CHECK_MSG(0, "%s: %lld anchors, want %lld", files[f], s1 ? (long long)m1.na : -1LL, (long long)1 + K);
            df_st_close(&s0), df_st_close(&s1);
            continue;
        }
        for (int64_t a = 0; a < m1.na; a++) {
            DF_CHECK(m1.anchors[a] >= 0 && m1.anchors[a] < m1.nv);
            if (a < m0.na) DF_CHECK(m1.anchors[a] == m0.anchors[a]);
            for (int64_t b = 0; b < a; b++) DF_CHECK(m1.anchors[a] != m1.anchors[b]);
        }
        for (int64_t a = 0; a < m0.na; a++)
            for (int l = 0; l < 3; l++) {
                char nm[64];
                snprintf(nm, sizeof nm, "anchor/%lld/%d/weight", (long long)a, l);
                const df_tensor_t *t0 = df_st_find(s0, nm), *t1 = df_st_find(s1, nm);
                DF_CHECK(t0 && t1 && t0->nbytes == t1->nbytes && !memcmp(t0->data, t1->data, t0->nbytes));
            }
        if (f == 0) {
            /* the K largest errors before, the model's own anchor left out (never chosen) */
            int64_t n = 0;
            for (int64_t v = 0; v < V; v++)
                if (v != m0.anchors[0]) rank[n++] = e0[v];
            for (int64_t i = 0; i < n; i++) /* descending, K + 1 first places */
                for (int64_t k = i + 1; i <= K && k < n; k++)
                    if (rank[k] > rank[i]) { double q = rank[i]; rank[i] = rank[k]; rank[k] = q; }
            DF_CHECK_MSG(rank[K - 1] > 0.05 * d.height && rank[K - 1] > 1.2 * rank[K],
                         "the case: K-th largest error %g, next %g (height %g)", rank[K - 1], rank[K], d.height);
            double before = INFINITY, after = 0;
            for (int64_t a = m0.na; a < m1.na; a++) {
                int32_t v = m1.anchors[a];
                DF_CHECK_MSG(e0[v] >= rank[K - 1], "new anchor %d: error %g before, not among the %d largest (>= %g)", v,
                             e0[v], K, rank[K - 1]);
                before = fmin(before, e0[v]), after = fmax(after, e1[v]);
            }
            DF_CHECK_MSG(after <= 0.25 * before, "error at the new anchors: at least %g before, up to %g after", before,
                         after);
        }
        df_ramodel_release(&m0);
        df_ramodel_release(&m1);
        df_st_close(&s0);
        df_st_close(&s1);
    }
    free(e0), free(e1), free(rank);
    served_equals_offline("ra_aa1.safetensors");
    /* refusals */
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa0.safetensors"), &err) == DF_EINVAL);
    o.variant = DF_RA_LOCAL;
    DF_CHECK(df_rigapprox_train(&d, &o, path("ra_aal.safetensors"), NULL, &err) == 0);
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aal.safetensors"), &d, &ao, path("ra_aa3.safetensors"), &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "local") && strstr(err.msg, "ours"), "%s", err.msg);
    ao.add = 0;
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa3.safetensors"), &err) == DF_EINVAL);
    df_rigdata_close(&d);
    ao.add = 2;
    DF_CHECK(make_dataset_n(40, 3, 0, "ra_noinf.safetensors") == 0);
    DF_CHECK(df_rigdata_open(path("ra_noinf.safetensors"), &d, &err) == 0);
    DF_CHECK(df_rigapprox_add_anchors(path("ra_aa0.safetensors"), &d, &ao, path("ra_aa3.safetensors"), &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "influence"), "%s", err.msg);
    df_rigdata_close(&d);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s", dftest_out_dir());
    if (make_dataset()) {
        printf("FAIL make_dataset\n");
        return 1;
    }
    DF_RUN(test_training_reproducible);
    DF_RUN(test_served_equals_offline);
    DF_RUN(test_omega);
    DF_RUN(test_baseline_variants);
    DF_RUN(test_malformed_datasets);
    DF_RUN(test_joint_parents_inferred);
    DF_RUN(test_refusals);
    DF_RUN(test_anchors_per_shell);
    DF_RUN(test_linear_path);
    DF_RUN(test_dqs);
    DF_RUN(test_refit_optimal);
    DF_RUN(test_position_finetune);
    DF_RUN(test_add_anchors);
    return dftest_exit();
}

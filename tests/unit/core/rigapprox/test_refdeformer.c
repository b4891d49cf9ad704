/* test_refdeformer.c — the reference deformer stack and the dataset file.
 *
 * References are computed here independently: LBS evaluated from the world
 * and inverse-bind matrices with plain loops, the rest mesh (delta mush must
 * give it back exactly at rest), and inclusion-exclusion for product shapes.
 */
#include "dftest.h"
#include "df.h"
#include "rigapprox/refdeformer.h"
#include "rigapprox/rigapprox.h"

#include <stdlib.h>
#include <string.h>

static const char *outdir(void) { return dftest_out_dir(); }

static df_refrig_t *tiny(int mush, int jc)
{
    df_refrig_opts_t o;
    df_refrig_opts_default(&o);
    o.mush_iters = mush;
    o.n_joint_correctives = jc;
    df_refrig_t *r = NULL;
    df_error_t err = {0};
    int rc = df_refrig_tiny(12, 10, &o, &r, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    return r;
}

static void test_rest_pose_is_rest_mesh(void)
{
    df_refrig_t *r = tiny(6, 2);
    if (!r) return;
    float *ctl = calloc(r->nc, sizeof(float)), *out = malloc(sizeof(float) * r->nv * 3);
    float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
    df_refrig_deform(r, ctl, r->rest_world, out, work);
    double mx = 0;
    for (int64_t i = 0; i < r->nv * 3; i++) mx = fmax(mx, fabs(out[i] - r->rest[i]));
    DF_CHECK_MSG(mx < 1e-5, "max deviation at rest %g", mx);
    free(ctl), free(out), free(work);
    df_refrig_free(&r);
}

static void test_lbs_only_matches_formula(void)
{
    df_refrig_t *r = tiny(0, 0);
    if (!r) return;
    df_rng_t rng = {42};
    float *ctl = malloc(sizeof(float) * r->nc), *w = malloc(sizeof(float) * r->nj * 12);
    float *out = malloc(sizeof(float) * r->nv * 3);
    float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
    df_refrig_sample(r, &rng, ctl, w);
    memset(ctl, 0, sizeof(float) * r->nc);
    df_refrig_deform(r, ctl, w, out, work);
    double mx = 0;
    for (int64_t v = 0; v < r->nv; v++) {
        double p[3] = {0, 0, 0};
        for (int k = 0; k < r->k; k++) {
            int j = r->skin_j[v * r->k + k];
            double wt = r->skin_w[v * r->k + k];
            const float *W = w + j * 12, *I = r->invbind + j * 12;
            /* q = I * rest, then W * q */
            double q[3];
            for (int a = 0; a < 3; a++)
                q[a] = I[a * 4] * r->rest[v * 3] + I[a * 4 + 1] * r->rest[v * 3 + 1] +
                       I[a * 4 + 2] * r->rest[v * 3 + 2] + I[a * 4 + 3];
            for (int a = 0; a < 3; a++)
                p[a] += wt * (W[a * 4] * q[0] + W[a * 4 + 1] * q[1] + W[a * 4 + 2] * q[2] + W[a * 4 + 3]);
        }
        for (int a = 0; a < 3; a++) mx = fmax(mx, fabs(p[a] - out[v * 3 + a]));
    }
    DF_CHECK_MSG(mx < 1e-5, "LBS max error %g", mx);
    /* the posed mesh really moved */
    double moved = 0;
    for (int64_t i = 0; i < r->nv * 3; i++) moved = fmax(moved, fabs(out[i] - r->rest[i]));
    DF_CHECK(moved > 0.05);
    /* and its nonlinear displacement is zero (Eq. 14 inverts LBS exactly) */
    float *T = malloc(sizeof(float) * 12 * r->nv), *nl = malloc(sizeof(float) * 3 * r->nv);
    df_rigapprox_linear(r->nv, r->nj, (int)r->k, r->invbind, r->skin_j, r->skin_w, 1, w, T);
    DF_CHECK(df_rigapprox_nonlinear(r->nv, T, r->rest, out, nl) == 0);
    double nmax = 0;
    for (int64_t i = 0; i < r->nv * 3; i++) nmax = fmax(nmax, fabs(nl[i]));
    DF_CHECK_MSG(nmax < 1e-4, "nonlinear part of pure LBS %g", nmax);
    free(T), free(nl), free(ctl), free(w), free(out), free(work);
    df_refrig_free(&r);
}

static void test_product_shapes_are_not_additive(void)
{
    df_refrig_t *r = tiny(0, 0);
    if (!r) return;
    DF_CHECK(r->n_combos > 0);
    int a = r->combo_ab[0], b = r->combo_ab[1];
    float *ctl = calloc(r->nc, sizeof(float));
    float *o[4];
    float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
    for (int i = 0; i < 4; i++) {
        memset(ctl, 0, sizeof(float) * r->nc);
        if (i & 1) ctl[a] = 1;
        if (i & 2) ctl[b] = 1;
        o[i] = malloc(sizeof(float) * r->nv * 3);
        df_refrig_deform(r, ctl, r->rest_world, o[i], work);
    }
    /* f(1,1) - f(1,0) - f(0,1) + f(0,0) = sum of product shapes on (a,b) */
    double mx = 0, err = 0;
    for (int64_t k = 0; k < r->nv * 3; k++) {
        double inter = o[3][k] - o[1][k] - o[2][k] + o[0][k];
        double expect = 0;
        for (int c = 0; c < r->n_combos; c++)
            if ((r->combo_ab[c * 2] == a && r->combo_ab[c * 2 + 1] == b) ||
                (r->combo_ab[c * 2] == b && r->combo_ab[c * 2 + 1] == a))
                expect += r->combo_shapes[(int64_t)c * r->nv * 3 + k];
        mx = fmax(mx, fabs(inter));
        err = fmax(err, fabs(inter - expect));
    }
    DF_CHECK(mx > 1e-3);
    DF_CHECK_MSG(err < 1e-5, "product term error %g", err);
    for (int i = 0; i < 4; i++) free(o[i]);
    free(ctl), free(work);
    df_refrig_free(&r);
}

static void test_sampling_in_range(void)
{
    df_refrig_t *r = tiny(6, 2);
    if (!r) return;
    df_rng_t rng = {7};
    float *ctl = malloc(sizeof(float) * r->nc), *w = malloc(sizeof(float) * r->nj * 12);
    int in = 1;
    double mean = 0;
    for (int s = 0; s < 2000; s++) {
        df_refrig_sample(r, &rng, ctl, w);
        for (int64_t c = 0; c < r->nc; c++) {
            if (ctl[c] < r->ctrl_range[c * 3] || ctl[c] > r->ctrl_range[c * 3 + 1]) in = 0;
        }
        mean += ctl[1];
    }
    DF_CHECK(in);
    /* control 1 ranges [-1,1] centred on 0: symmetric truncated Gaussian */
    DF_CHECK_NEAR(mean / 2000, 0.0, 0.05);
    free(ctl), free(w);
    df_refrig_free(&r);
}

static void test_dataset_roundtrip(void)
{
    df_refrig_t *r = tiny(6, 2);
    if (!r) return;
    char path[512];
    snprintf(path, sizeof path, "%s/refdeformer_tiny.safetensors", outdir());
    df_error_t err = {0};
    int rc = df_refrig_write_dataset(r, 50, 3, 0, 5, path, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    df_rigdata_t d;
    rc = df_rigdata_open(path, &d, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        DF_CHECK(d.n == 50 && d.nv == r->nv && d.nj == r->nj && d.nc == r->nc);
        DF_CHECK(d.influence != NULL);
        DF_CHECK(!strcmp(d.control_names[2], r->control_names[2]));
        /* sample 7 regenerated through the rig */
        float *out = malloc(sizeof(float) * r->nv * 3);
        float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
        df_refrig_deform(r, d.controls + 7 * d.nc, d.joints + 7 * d.nj * 12, out, work);
        double mx = 0;
        for (int64_t i = 0; i < r->nv * 3; i++)
            mx = fmax(mx, fabs(out[i] - d.positions[7 * r->nv * 3 + i]));
        DF_CHECK(mx == 0);
        /* controls influence the vertices near their bulge */
        double imax = 0;
        for (int64_t v = 0; v < d.nv; v++) imax = fmax(imax, d.influence[v]);
        DF_CHECK(imax > 1e-3);
        free(out), free(work);
        df_rigdata_close(&d);
    }
    df_refrig_free(&r);
}

int main(void)
{
    DF_RUN(test_rest_pose_is_rest_mesh);
    DF_RUN(test_lbs_only_matches_formula);
    DF_RUN(test_product_shapes_are_not_additive);
    DF_RUN(test_sampling_in_range);
    DF_RUN(test_dataset_roundtrip);
    return dftest_exit();
}

/* test_decompose_skeleton.c — skeleton extraction and the rig export
 * (core/decompose/decompose_skeleton.c, decompose_export.c).
 *
 * Reference: a kinematic chain built here by forward kinematics (bone k
 * turns about a ball joint at y = 2k/B on the tube's axis relative to bone
 * k-1), so the true joint locations and the true hierarchy are known. The
 * extracted skeleton must be that chain with joints near the true ones (the
 * weights peak 0.06 above each bone's centre, so the clusters' boundaries lie
 * away from the joints: only the motion can place them); its
 * local TRS must recompose (FK written here) to T · bind; the written
 * `rigged` model, played through the rigged kind's own FK, must replay the
 * fit.
 */
#include "decompose/decompose.h"
#include "dftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const df_kind_t df_kind_rigged;

static uint64_t rng_state = 4242;
static double urand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void axis_angle(const double ax[3], double ang, double R[9])
{
    double n = sqrt(ax[0] * ax[0] + ax[1] * ax[1] + ax[2] * ax[2]);
    double x = ax[0] / n, y = ax[1] / n, z = ax[2] / n, c = cos(ang), s = sin(ang), t = 1 - c;
    double M[9] = {t * x * x + c, t * x * y - s * z, t * x * z + s * y,
                   t * x * y + s * z, t * y * y + c, t * y * z - s * x,
                   t * x * z - s * y, t * y * z + s * x, t * z * z + c};
    memcpy(R, M, sizeof M);
}

static void mul34(const double *a, const double *b, double *o)
{
    double t[12];
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 4; c++)
            t[4 * r + c] = a[4 * r] * b[c] + a[4 * r + 1] * b[4 + c] + a[4 * r + 2] * b[8 + c] +
                           (c == 3 ? a[4 * r + 3] : 0);
    }
    memcpy(o, t, sizeof t);
}

enum { RINGS = 60, SEG = 12, NB = 5, NF = 24 };

typedef struct chain {
    int64_t N, T;
    float *rest, *frames;
    uint32_t *tris;
} chain_t;

static void make_chain(chain_t *c)
{
    c->N = RINGS * SEG;
    c->T = (RINGS - 1) * SEG * 2;
    c->rest = malloc(sizeof(float) * c->N * 3);
    c->frames = malloc(sizeof(float) * NF * c->N * 3);
    c->tris = malloc(sizeof(uint32_t) * c->T * 3);
    double *W = calloc(c->N * NB, sizeof(double));
    for (int r = 0; r < RINGS; r++)
        for (int k = 0; k < SEG; k++) {
            int64_t i = (int64_t)r * SEG + k;
            double a = 2 * M_PI * k / SEG, y = 2.0 * r / (RINGS - 1), tot = 0;
            c->rest[3 * i] = (float)(0.25 * cos(a));
            c->rest[3 * i + 1] = (float)y;
            c->rest[3 * i + 2] = (float)(0.25 * sin(a));
            for (int j = 0; j < NB; j++)
                tot += W[i * NB + j] = fmax(0, 1 - fabs(y - 2.0 * (j + 0.5) / NB - 0.06) / (1.5 / NB));
            for (int j = 0; j < NB; j++) W[i * NB + j] /= tot;
        }
    int64_t t = 0;
    for (int r = 0; r + 1 < RINGS; r++)
        for (int k = 0; k < SEG; k++) {
            uint32_t a = r * SEG + k, b = r * SEG + (k + 1) % SEG, cc = a + SEG, d = b + SEG;
            c->tris[3 * t] = a; c->tris[3 * t + 1] = cc; c->tris[3 * t + 2] = b; t++;
            c->tris[3 * t] = b; c->tris[3 * t + 1] = cc; c->tris[3 * t + 2] = d; t++;
        }
    for (int p = 0; p < NF; p++) {
        double Tb[NB][12];
        for (int j = 0; j < NB; j++) {
            double R[9], ax[3] = {urand() - .5, urand() - .5, urand() - .5};
            axis_angle(ax, p == 0 ? 0 : 0.7 * urand(), R);
            /* rotation about the joint point (0, 2j/B, 0) (bone 0: its centre) */
            double cy = j == 0 ? 1.0 / NB : 2.0 * j / NB, loc[12];
            for (int r = 0; r < 3; r++) {
                for (int k = 0; k < 3; k++) loc[4 * r + k] = R[3 * r + k];
                loc[4 * r + 3] = (r == 1 ? cy : 0) - R[3 * r + 1] * cy;
            }
            if (j == 0) {
                for (int r = 0; r < 3; r++) loc[4 * r + 3] += p == 0 ? 0 : 0.3 * (urand() - .5);
                memcpy(Tb[0], loc, sizeof loc);
            } else {
                mul34(Tb[j - 1], loc, Tb[j]);
            }
        }
        for (int64_t i = 0; i < c->N; i++) {
            const float *v = c->rest + 3 * i;
            for (int r = 0; r < 3; r++) {
                double acc = 0;
                for (int j = 0; j < NB; j++) {
                    double w = W[i * NB + j];
                    if (w > 0)
                        acc += w * (Tb[j][4 * r] * v[0] + Tb[j][4 * r + 1] * v[1] +
                                    Tb[j][4 * r + 2] * v[2] + Tb[j][4 * r + 3]);
                }
                c->frames[((int64_t)p * c->N + i) * 3 + r] = (float)acc;
            }
        }
    }
    free(W);
}

static void free_chain(chain_t *c)
{
    free(c->rest); free(c->frames); free(c->tris);
}

static void test_chain_skeleton(void)
{
    chain_t c;
    make_chain(&c);
    df_decompose_input_t in = {.n_frames = NF, .n_vertices = c.N, .frames = c.frames,
                               .n_triangles = c.T, .triangles = c.tris, .rest = c.rest};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = NB;
    o.max_influences = 4;
    o.max_iterations = 60;
    o.tol = 1e-5;
    df_decompose_result_t *r = NULL;
    df_decompose_skeleton_t *s = NULL;
    df_error_t err = {0};
    int rc = df_decompose_fit(&in, &o, NULL, &r, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    if (!rc) {
        rc = df_decompose_skeleton(r, c.T, c.tris, 1, &s, &err);
        DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    }
    if (s) {
        const double diag = sqrt(0.5 * 0.5 * 2 + 4.0);
        fprintf(stderr, "chain: fit ERMS %.3g of diag; root bone %d\n", r->stats.erms, s->bone[0]);
        /* a chain: the tree is a path (every joint at most 2 neighbours) */
        int deg[NB] = {0}, roots = 0;
        for (int k = 0; k < NB; k++) {
            DF_CHECK(s->parent[k] < k);
            if (s->parent[k] < 0) roots++;
            else { deg[k]++; deg[s->parent[k]]++; }
        }
        DF_CHECK(roots == 1);
        for (int k = 0; k < NB; k++) DF_CHECK_MSG(deg[k] <= 2, "joint %d has %d neighbours", k, deg[k]);
        /* every true joint (0, 2j/B, 0), j = 1..B-1, has an extracted one near */
        double worst = 0;
        for (int j = 1; j < NB; j++) {
            double best = INFINITY;
            for (int k = 0; k < NB; k++) {
                if (s->parent[k] < 0) continue;
                const double *b = s->bind + 12 * k;
                double d = sqrt(b[3] * b[3] + (b[7] - 2.0 * j / NB) * (b[7] - 2.0 * j / NB) + b[11] * b[11]);
                best = fmin(best, d);
            }
            worst = fmax(worst, best);
        }
        double dmax = 0;
        for (int k = 0; k < NB; k++) dmax = fmax(dmax, s->dislocation[k]);
        fprintf(stderr, "chain: joints within %.3g of the true ones (%.3g%% of diag); "
                        "dislocation max %.3g%% of diag\n", worst, 100 * worst / diag, 100 * dmax / diag);
        DF_CHECK_MSG(worst < 0.01 * diag, "a true joint is %g from every extracted one", worst);
        DF_CHECK(dmax < 0.005 * diag);
        /* FK of the stored local TRS gives T_bone · bind (skin matrix = T) */
        double e = 0;
        double *wp = malloc(sizeof(double) * 12 * NB);
        for (int64_t p = 0; p < NF; p++)
            for (int k = 0; k < NB; k++) {
                double loc[12];
                df_decompose_skeleton_local(s, p, k, loc);
                if (s->parent[k] < 0) memcpy(wp + 12 * k, loc, sizeof loc);
                else mul34(wp + 12 * s->parent[k], loc, wp + 12 * k);
                double ref[12], Tm[12];
                for (int q = 0; q < 12; q++) Tm[q] = r->matrices[(p * NB + s->bone[k]) * 12 + q];
                mul34(Tm, s->bind + 12 * k, ref);
                for (int q = 0; q < 12; q++) e = fmax(e, fabs(wp[12 * k + q] - ref[q]));
                DF_CHECK_NEAR(s->scale[p * NB + k], 1.0, 1e-5); /* rigid fit: no scale */
            }
        free(wp);
        fprintf(stderr, "chain: FK of the local TRS vs T·bind: max %.3g\n", e);
        DF_CHECK(e < 1e-5);
        /* the written model, through the rigged kind, replays the fit */
        char path[1200];
        snprintf(path, sizeof path, "%s/decompose_rig.safetensors", dftest_out_dir());
        df_model_t *m = NULL;
        rc = df_decompose_write_rig(r, s, c.T, c.tris, NULL, "fit", path, &err);
        DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
        if (!rc) DF_CHECK_MSG(df_model_open(path, "rigged", NULL, NULL, &m, &err) == DF_OK, "%s", err.msg);
        if (m) {
            float *ref = malloc(sizeof(float) * NF * c.N * 3), *outp = malloc(sizeof(float) * c.N * 3);
            float *rot = malloc(sizeof(float) * NB * 4), *tr = malloc(sizeof(float) * NB * 3);
            df_decompose_reconstruct(r, ref);
            int ir = df_model_find_input(m, "joint_rotations"), it = df_model_find_input(m, "joint_translations");
            int op = df_model_find_output(m, "positions"), cl = df_model_clip_find(m, "fit");
            DF_CHECK(ir >= 0 && it >= 0 && op >= 0 && cl >= 0);
            df_scratch_t *sc = df_scratch_new();
            double em = 0;
            for (int64_t p = 0; p < NF && ir >= 0 && it >= 0 && op >= 0 && cl >= 0; p++) {
                float *bufs[DF_MAX_IO] = {0};
                uint32_t filled = 0;
                bufs[ir] = rot;
                bufs[it] = tr;
                DF_CHECK(df_model_clip_sample(m, cl, p / 30.0, bufs, &filled, &err) == DF_OK);
                DF_CHECK((filled & (1u << ir)) && (filled & (1u << it)));
                const float *one_r[1] = {rot}, *one_t[1] = {tr};
                float *dst[1] = {outp};
                df_batch_t b = {.n = 1};
                b.in[ir] = one_r;
                b.in[it] = one_t;
                b.out[op] = dst;
                DF_CHECK(df_model_evaluate(m, &b, sc, &err) == DF_OK);
                for (int64_t q = 0; q < c.N * 3; q++) em = fmax(em, fabs(outp[q] - ref[p * c.N * 3 + q]));
            }
            fprintf(stderr, "chain: rigged model clip vs fit: max %.3g (%.3g of diag)\n", em, em / diag);
            DF_CHECK(em < 1e-5 * diag);
            df_scratch_free(&sc);
            free(ref); free(outp); free(rot); free(tr);
            df_model_unref(&m);
        }
    }
    df_decompose_skeleton_free(&s);
    DF_CHECK(s == NULL);
    /* affine fits have no skeleton */
    if (r) {
        r->transforms = DF_DECOMPOSE_AFFINE;
        DF_CHECK(df_decompose_skeleton(r, c.T, c.tris, 1, &s, &err) == DF_EUNSUPPORTED);
        DF_CHECK(s == NULL && strstr(err.msg, "affine"));
    }
    df_decompose_result_free(&r);
    free_chain(&c);
}

int main(void)
{
    DF_CHECK(df_kind_find("rigged") == &df_kind_rigged);
    DF_RUN(test_chain_skeleton);
    return dftest_exit();
}

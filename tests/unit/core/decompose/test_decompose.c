/* test_decompose.c — skinning decomposition (core/decompose*.c).
 *
 * References are independent of the code under test: sequences generated
 * from a known LBS rig (so the exact answer exists), metrics evaluated by
 * hand on a one-triangle example, Horn's rotation checked against the
 * rotation that produced the points, and the exported model replayed
 * through the `rigged` kind (df_model_evaluate / clip sampling).
 */
#include "decompose/decompose.h"
#include "decompose/decompose_internal.h"
#include "dftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* strong reference: pulls the rigged kind out of libdfcore.a */
extern const df_kind_t df_kind_rigged;

static uint64_t rng_state = 12345;
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

/* A tube of `rings` x `seg` vertices along y in [0, 2], radius 0.3, driven
 * by `bones` bones with hat weights (each bone has a pure core, blends of
 * two bones between) and random rigid transforms per bone and frame. */
typedef struct seq {
    int64_t F, N, T;
    float *frames;
    uint32_t *tris;
    float *wtrue; /* [N, bones] */
} seq_t;

static void make_tube(seq_t *s, int rings, int seg, int bones, int64_t F, double ang_max)
{
    s->F = F;
    s->N = (int64_t)rings * seg;
    s->T = (int64_t)(rings - 1) * seg * 2;
    s->frames = malloc(sizeof(float) * F * s->N * 3);
    s->tris = malloc(sizeof(uint32_t) * s->T * 3);
    s->wtrue = calloc(s->N * bones, sizeof(float));
    float *rest = malloc(sizeof(float) * s->N * 3);
    for (int r = 0; r < rings; r++)
        for (int k = 0; k < seg; k++) {
            int64_t i = (int64_t)r * seg + k;
            double a = 2 * M_PI * k / seg, y = 2.0 * r / (rings - 1);
            rest[3 * i] = (float)(0.3 * cos(a));
            rest[3 * i + 1] = (float)y;
            rest[3 * i + 2] = (float)(0.3 * sin(a));
            double tot = 0, w[64];
            for (int j = 0; j < bones; j++) {
                double c = 2.0 * (j + 0.5) / bones;
                w[j] = fmax(0, 1 - fabs(y - c) / (1.5 / bones));
                tot += w[j];
            }
            for (int j = 0; j < bones; j++) s->wtrue[i * bones + j] = (float)(w[j] / tot);
        }
    int64_t t = 0;
    for (int r = 0; r + 1 < rings; r++)
        for (int k = 0; k < seg; k++) {
            uint32_t a = r * seg + k, b = r * seg + (k + 1) % seg, c = a + seg, d = b + seg;
            s->tris[3 * t] = a; s->tris[3 * t + 1] = c; s->tris[3 * t + 2] = b; t++;
            s->tris[3 * t] = b; s->tris[3 * t + 1] = c; s->tris[3 * t + 2] = d; t++;
        }
    double *T = malloc(sizeof(double) * bones * 12);
    for (int64_t p = 0; p < F; p++) {
        for (int j = 0; j < bones; j++) {
            double R[9], ax[3] = {urand() - 0.5, urand() - 0.5, urand() - 0.5};
            double ang = p == 0 ? 0 : ang_max * urand();
            axis_angle(ax, ang, R);
            for (int r = 0; r < 3; r++) {
                for (int c = 0; c < 3; c++) T[j * 12 + 4 * r + c] = R[3 * r + c];
                T[j * 12 + 4 * r + 3] = p == 0 ? 0 : 0.4 * (urand() - 0.5);
            }
        }
        for (int64_t i = 0; i < s->N; i++) {
            const float *v = rest + 3 * i;
            for (int r = 0; r < 3; r++) {
                double acc = 0;
                for (int j = 0; j < bones; j++) {
                    double w = s->wtrue[i * bones + j];
                    if (w == 0) continue;
                    const double *m = T + j * 12 + 4 * r;
                    acc += w * (m[0] * v[0] + m[1] * v[1] + m[2] * v[2] + m[3]);
                }
                s->frames[(p * s->N + i) * 3 + r] = (float)acc;
            }
        }
    }
    free(T);
    free(rest);
}

static void free_seq(seq_t *s)
{
    free(s->frames); free(s->tris); free(s->wtrue);
    memset(s, 0, sizeof *s);
}

/* Independent ERMS (fraction of the rest bbox diagonal) of a result. */
static double fit_erms(const seq_t *s, const df_decompose_result_t *r, df_decompose_metrics_t *mo)
{
    float *ap = malloc(sizeof(float) * s->F * s->N * 3);
    df_decompose_reconstruct(r, ap);
    df_decompose_metrics_t m;
    df_error_t err = {0};
    int rc = df_decompose_metrics(s->F, s->N, s->frames, ap, s->T, s->tris, 0, &m, &err);
    DF_CHECK(rc == DF_OK);
    free(ap);
    if (mo) *mo = m;
    return m.erms / m.diag;
}

static void check_weights(const df_decompose_result_t *r, int K)
{
    int bad = 0;
    for (int64_t i = 0; i < r->n_vertices; i++) {
        double s = 0;
        int nnz = 0;
        for (int k = 0; k < r->n_influences; k++) {
            float w = r->skin_weights[i * r->n_influences + k];
            int j = r->skin_joints[i * r->n_influences + k];
            if (!(w >= 0) || j < 0 || j >= r->n_bones) bad++;
            if (w > 0) nnz++;
            s += w;
        }
        if (fabs(s - 1) > 1e-5 || nnz > K) bad++;
    }
    DF_CHECK_MSG(bad == 0, "%d vertices with non-convex or too many weights", bad);
    DF_CHECK(r->n_influences <= K);
}

static void test_best_rotation(void)
{
    for (int trial = 0; trial < 50; trial++) {
        double R[9], ax[3] = {urand() - 0.5, urand() - 0.5, urand() - 0.5};
        axis_angle(ax, (trial == 0 ? M_PI : 3.1 * urand()), R);
        double H[9] = {0}, pts[8][3], cen[3] = {0};
        for (int k = 0; k < 8; k++)
            for (int a = 0; a < 3; a++) { pts[k][a] = urand() - 0.5; cen[a] += pts[k][a] / 8; }
        for (int k = 0; k < 8; k++) {
            double r[3] = {pts[k][0] - cen[0], pts[k][1] - cen[1], pts[k][2] - cen[2]}, q[3];
            for (int a = 0; a < 3; a++) q[a] = R[3 * a] * r[0] + R[3 * a + 1] * r[1] + R[3 * a + 2] * r[2];
            for (int u = 0; u < 3; u++)
                for (int v = 0; v < 3; v++) H[3 * u + v] += r[u] * q[v];
        }
        double Rf[9];
        df__dc_best_rotation(H, Rf);
        double e = 0;
        for (int a = 0; a < 9; a++) e = fmax(e, fabs(Rf[a] - R[a]));
        DF_CHECK_MSG(e < 1e-9, "trial %d: rotation error %g", trial, e);
    }
}

static void test_weld(void)
{
    /* 0,3,5 coincide; 1 and 4 within tolerance; 2 and 6 stand alone; 6 is
     * just outside the tolerance from 2 */
    const float p[7 * 3] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1e-6f, 0, 0, 0, 0, 0, 1.00002f, 0};
    int32_t rep[7];
    int64_t W = 0;
    df_error_t err = {0};
    DF_CHECK(df_decompose_weld(7, p, 1e-5, rep, &W, &err) == DF_OK);
    DF_CHECK(W == 4);
    DF_CHECK(rep[0] == rep[3] && rep[0] == rep[5]);
    DF_CHECK(rep[1] == rep[4]);
    DF_CHECK(rep[2] != rep[6] && rep[2] != rep[0] && rep[1] != rep[0]);
}

static void test_metrics_by_hand(void)
{
    /* One triangle, two frames; frame 1 translated by +2 in z. The
     * approximation is exact except vertex 0 of frame 1, one unit too high.
     * By hand: |A-A'|² = 1; temporal means are z = 1, so |A-A_avg|² = 6;
     * DisPer = 100 sqrt(1/6); ERMS = sqrt(1/18); MaxAvgDist = (0 + 1)/2;
     * approx normal of frame 1 is (1,1,1)/√3 against (0,0,1): |n x n'| =
     * √2/√3, NormDistort = (0 + √(2/3))/2. Rest diagonal √2. */
    const float orig[18] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 2, 0, 1, 2};
    float ap[18];
    memcpy(ap, orig, sizeof ap);
    ap[9 + 2] = 3;
    const uint32_t tri[3] = {0, 1, 2};
    df_decompose_metrics_t m;
    df_error_t err = {0};
    DF_CHECK(df_decompose_metrics(2, 3, orig, ap, 1, tri, 0, &m, &err) == DF_OK);
    DF_CHECK_NEAR(m.disper, 100 * sqrt(1.0 / 6), 1e-9);
    DF_CHECK_NEAR(m.erms, sqrt(1.0 / 18), 1e-12);
    DF_CHECK_NEAR(m.diag, sqrt(2.0), 1e-12);
    DF_CHECK_NEAR(m.erms_pct, 100 * sqrt(1.0 / 18) / sqrt(2.0), 1e-9);
    DF_CHECK_NEAR(m.max_avg_dist, 0.5, 1e-12);
    DF_CHECK_NEAR(m.max_avg_dist_pct, 50 / sqrt(2.0), 1e-9);
    DF_CHECK_NEAR(m.norm_distort, 0.5 * sqrt(2.0 / 3.0), 1e-9);
    /* identical sequences: all zero */
    DF_CHECK(df_decompose_metrics(2, 3, orig, orig, 1, tri, 0, &m, &err) == DF_OK);
    DF_CHECK(m.disper == 0 && m.erms == 0 && m.max_avg_dist == 0 && m.norm_distort == 0);
}

static void test_recover_known_rig(void)
{
    seq_t s;
    make_tube(&s, 48, 16, 6, 24, 0.9);
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = 6;
    o.max_influences = 4;
    o.max_iterations = 100;
    o.tol = 1e-4;
    o.target_erms = 1e-6;
    df_decompose_result_t *r = NULL;
    df_error_t err = {0};
    int rc = df_decompose_fit(&in, &o, NULL, &r, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    if (rc) { free_seq(&s); return; }
    df_decompose_metrics_t m;
    double e = fit_erms(&s, r, &m);
    fprintf(stderr, "recover: %d iterations, ERMS %.3g of diag (init %.3g), DisPer %.3g, "
                    "MaxAvgDist %.3g%%, %.3f s\n", r->stats.iterations, e, r->stats.erms_init,
            m.disper, m.max_avg_dist_pct, r->stats.total_seconds);
    DF_CHECK_MSG(e < 1e-4, "ERMS %g of the diagonal", e);
    DF_CHECK_NEAR(e, r->stats.erms, 1e-6); /* internal double error agrees */
    check_weights(r, 4);
    /* error history never rises (alternating least squares) */
    for (int it = 1; it <= r->stats.iterations; it++)
        DF_CHECK(r->stats.erms_history[it] <= r->stats.erms_history[it - 1] * (1 + 1e-9) + 1e-12);
    df_decompose_result_free(&r);
    DF_CHECK(r == NULL);
    free_seq(&s);
}

/* Split the tube along a seam (the vertices of column 0 are duplicated and
 * the triangles on one side use the copies, as an asset split on a UV seam
 * would) and also cut it into two unconnected halves: the raw split mesh
 * must fit as well as the welded original. */
static void test_seams_as_good_as_welded(void)
{
    seq_t s;
    const int rings = 40, seg = 12;
    make_tube(&s, rings, seg, 5, 20, 0.7);
    int64_t extra = rings + seg; /* column 0 and the middle ring */
    int64_t N2 = s.N + extra;
    float *fr2 = malloc(sizeof(float) * s.F * N2 * 3);
    uint32_t *tr2 = malloc(sizeof(uint32_t) * s.T * 3);
    int32_t *dup = malloc(sizeof(int32_t) * s.N); /* copy index or -1 */
    for (int64_t i = 0; i < s.N; i++) dup[i] = -1;
    int64_t nx = s.N;
    for (int r = 0; r < rings; r++) dup[r * seg] = (int32_t)nx++;
    int mid = rings / 2;
    for (int k = 1; k < seg; k++) dup[mid * seg + k] = (int32_t)nx++;

    nx = s.N + rings + seg - 1;
    N2 = nx;
    for (int64_t p = 0; p < s.F; p++) {
        memcpy(fr2 + p * N2 * 3, s.frames + p * s.N * 3, sizeof(float) * s.N * 3);
        for (int64_t i = 0; i < s.N; i++)
            if (dup[i] >= 0) memcpy(fr2 + (p * N2 + dup[i]) * 3, s.frames + (p * s.N + i) * 3, 12);
    }
    for (int64_t t = 0; t < s.T; t++) {
        uint32_t *v = s.tris + 3 * t;
        int ring = (int)(v[0] / seg), upper = ring >= mid; /* triangle lies in rings ring..ring+1 */
        int touches_last = 0;
        for (int a = 0; a < 3; a++) touches_last |= (v[a] % seg) == (uint32_t)(seg - 1);
        for (int a = 0; a < 3; a++) {
            uint32_t x = v[a];
            int use = 0;
            if ((x % seg) == 0 && touches_last) use = 1; /* UV seam */
            if ((int)(x / seg) == mid && upper && (x % seg) != 0) use = 1; /* cut */
            tr2[3 * t + a] = use && dup[x] >= 0 ? (uint32_t)dup[x] : x;
        }
    }
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = 4; /* fewer than the rig's 5: the fit is approximate */
    o.max_influences = 4;
    o.max_iterations = 15;
    df_error_t err = {0};
    df_decompose_result_t *rw = NULL, *rr = NULL;
    df_decompose_input_t inw = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                                .n_triangles = s.T, .triangles = s.tris};
    df_decompose_input_t inr = {.n_frames = s.F, .n_vertices = N2, .frames = fr2,
                                .n_triangles = s.T, .triangles = tr2};
    DF_CHECK(df_decompose_fit(&inw, &o, NULL, &rw, &err) == DF_OK);
    DF_CHECK_MSG(df_decompose_fit(&inr, &o, NULL, &rr, &err) == DF_OK, "%s", err.msg);
    if (rw && rr) {
        DF_CHECK(rr->stats.n_welded == s.N);
        seq_t s2 = {.F = s.F, .N = N2, .T = s.T, .frames = fr2, .tris = tr2};
        double ew = fit_erms(&s, rw, NULL), er = fit_erms(&s2, rr, NULL);
        fprintf(stderr, "seams: welded copy ERMS %.4g, raw split %.4g (of diag)\n", ew, er);
        DF_CHECK_MSG(er <= ew * 1.02 + 1e-7, "raw %g vs welded %g", er, ew);
        check_weights(rr, 4);
        /* duplicated vertices get the same weights as their originals */
        int differ = 0;
        for (int64_t i = 0; i < s.N; i++) {
            if (dup[i] < 0) continue;
            for (int k = 0; k < rr->n_influences; k++) {
                int64_t a = i * rr->n_influences + k, b = (int64_t)dup[i] * rr->n_influences + k;
                if (rr->skin_weights[a] > 1e-6 && (rr->skin_joints[a] != rr->skin_joints[b] ||
                                                   fabsf(rr->skin_weights[a] - rr->skin_weights[b]) > 1e-4f))
                    differ++;
            }
        }
        DF_CHECK_MSG(differ == 0, "%d seam copies weighted differently", differ);
    }
    df_decompose_result_free(&rw);
    df_decompose_result_free(&rr);
    free(fr2); free(tr2); free(dup);
    free_seq(&s);
}

static void test_malformed(void)
{
    seq_t s;
    make_tube(&s, 6, 4, 2, 3, 0.5);
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = 2;
    df_decompose_result_t *r = NULL;
    df_error_t err = {0};

    in.n_frames = 1; /* one frame */
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_EINVAL && !r);
    DF_CHECK_MSG(strstr(err.msg, "1 frame"), "%s", err.msg);
    in.n_frames = s.F;

    s.frames[(1 * s.N + 5) * 3 + 1] = NAN; /* NaN in frame 1, vertex 5, y */
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_EINVAL && !r);
    DF_CHECK_MSG(strstr(err.msg, "frame 1, vertex 5, coordinate y"), "%s", err.msg);
    s.frames[(1 * s.N + 5) * 3 + 1] = 0;

    o.n_bones = (int)s.N + 1; /* more bones than vertices */
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_EINVAL && !r);
    DF_CHECK_MSG(strstr(err.msg, "bones is more than"), "%s", err.msg);
    o.n_bones = 2;

    s.tris[7] = (uint32_t)s.N; /* triangle 2 out of range */
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_EINVAL && !r);
    DF_CHECK_MSG(strstr(err.msg, "triangle 2 references vertex"), "%s", err.msg);
    s.tris[7] = 0;

    o.max_influences = 9;
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_EINVAL && !r);
    DF_CHECK_MSG(strstr(err.msg, "max influences"), "%s", err.msg);
    o.max_influences = 4;

    /* all rest positions coincide: nothing to fit, and more bones than
     * distinct positions once welded */
    float *flat = calloc(s.F * s.N * 3, sizeof(float));
    df_decompose_input_t in2 = in;
    in2.frames = flat;
    DF_CHECK(df_decompose_fit(&in2, &o, NULL, &r, &err) == DF_EINVAL && !r);
    DF_CHECK_MSG(strstr(err.msg, "coincide"), "%s", err.msg);
    free(flat);

    o.max_bytes = 1000; /* working-set limit */
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_ELIMIT && !r);
    DF_CHECK_MSG(strstr(err.msg, "GiB of working memory"), "%s", err.msg);
    o.max_bytes = 0;

    /* metrics refuse bad triangles too */
    df_decompose_metrics_t m;
    DF_CHECK(df_decompose_metrics(s.F, s.N, s.frames, s.frames, 1, (uint32_t[]){0, 1, 99999}, 0,
                                  &m, &err) == DF_EINVAL);
    free_seq(&s);
}

/* A parallel_for that runs the ranges of 3 "workers" one after another, in
 * reverse order: exercises the per-worker buffers and reductions without
 * threads (core is thread-free; the tool's pthreads use the same path). */
static void serial_3way(void *user, int64_t n, df_range_body_cb body, void *arg)
{
    (*(int *)user)++;
    for (int t = 2; t >= 0; t--) body(arg, n * t / 3, n * (t + 1) / 3, t);
}

static void test_workers_match_serial(void)
{
    seq_t s;
    make_tube(&s, 30, 12, 4, 16, 0.8);
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = 3; /* fewer than the rig: an approximate fit */
    o.max_iterations = 10;
    df_decompose_result_t *a = NULL, *b = NULL;
    df_error_t err = {0};
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &a, &err) == DF_OK);
    int calls = 0;
    o.parallel_for = serial_3way;
    o.parallel_user = &calls;
    o.n_workers = 3;
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &b, &err) == DF_OK);
    DF_CHECK(calls > 0);
    if (a && b) {
        DF_CHECK(a->stats.iterations == b->stats.iterations);
        DF_CHECK_NEAR(a->stats.erms, b->stats.erms, 1e-9 * a->stats.erms);
        double e = 0;
        for (int64_t q = 0; q < s.F * a->n_bones * 12; q++)
            e = fmax(e, fabs(a->matrices[q] - b->matrices[q]));
        DF_CHECK_MSG(e < 1e-4, "transforms differ by %g", e);
    }
    df_decompose_result_free(&a);
    df_decompose_result_free(&b);
    free_seq(&s);
}

/* Opt-in re-seeding keeps the error monotone and the weights convex; the
 * opt-in soft sum-to-one still exports convex weights. */
static void test_reseed_monotone(void)
{
    seq_t s;
    make_tube(&s, 30, 12, 5, 16, 0.8);
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = 4;
    o.max_influences = 3;
    o.max_iterations = 12;
    o.tol = 0;
    o.patience = 100;
    o.reseed_every = 1;
    df_decompose_result_t *r = NULL;
    df_error_t err = {0};
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_OK);
    if (r) {
        DF_CHECK(r->stats.reseeds_tried > 0);
        for (int it = 1; it <= r->stats.iterations; it++)
            DF_CHECK(r->stats.erms_history[it] <= r->stats.erms_history[it - 1] * (1 + 1e-9));
        check_weights(r, 3);
        DF_CHECK_NEAR(fit_erms(&s, r, NULL), r->stats.erms, 1e-6);
    }
    df_decompose_result_free(&r);
    /* the paper's soft sum-to-one row: exported weights are still convex
     * (normalised), and the fit stays close to the exact constraint's */
    o.reseed_every = 0;
    o.sum_penalty = 1;
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_OK);
    if (r) {
        check_weights(r, 3);
        double e = fit_erms(&s, r, NULL);
        fprintf(stderr, "soft convexity: ERMS %.4g of diag (internal, unnormalised %.4g)\n", e,
                r->stats.erms);
        DF_CHECK(e < 0.05);
    }
    df_decompose_result_free(&r);
    free_seq(&s);
}

/* The exported model replays the fit through the rigged kind: per frame
 * with explicit joint_matrices, and by sampling the stored clip. */
static void test_export_replays(void)
{
    seq_t s;
    make_tube(&s, 24, 10, 4, 12, 0.8);
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = 4;
    o.max_influences = 3;
    o.max_iterations = 5;
    df_decompose_result_t *r = NULL;
    df_error_t err = {0};
    DF_CHECK(df_decompose_fit(&in, &o, NULL, &r, &err) == DF_OK);
    if (!r) { free_seq(&s); return; }
    char path[1200];
    snprintf(path, sizeof path, "%s/decompose_export.safetensors", dftest_out_dir());
    float *times = malloc(sizeof(float) * s.F);
    for (int64_t p = 0; p < s.F; p++) times[p] = 0.04f * (float)p;
    int rc = df_decompose_write_model(r, s.T, s.tris, times, "fit", path, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    df_model_t *m = NULL;
    if (rc == DF_OK) {
        rc = df_model_open(path, "rigged", NULL, NULL, &m, &err);
        DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    }
    if (m) {
        float *ref = malloc(sizeof(float) * s.F * s.N * 3);
        float *outp = malloc(sizeof(float) * s.N * 3);
        df_decompose_reconstruct(r, ref);
        int im = df_model_find_input(m, "joint_matrices"), op = df_model_find_output(m, "positions");
        int c = df_model_clip_find(m, "fit");
        DF_CHECK(im >= 0 && op >= 0 && c >= 0);
        DF_CHECK(df_model_n_vertices(m) == s.N && df_model_n_triangles(m) == s.T);
        df_scratch_t *sc = df_scratch_new();
        float *bufs[DF_MAX_IO] = {0};
        float *jm = malloc(sizeof(float) * r->n_bones * 12);
        double emax_direct = 0, emax_clip = 0, diag = 0;
        float lo[3], hi[3];
        df_model_bbox(m, lo, hi);
        diag = sqrt(pow(hi[0] - lo[0], 2) + pow(hi[1] - lo[1], 2) + pow(hi[2] - lo[2], 2));
        for (int64_t p = 0; p < s.F && im >= 0 && op >= 0 && c >= 0; p++) {
            for (int pass = 0; pass < 2; pass++) {
                const float *src = r->matrices + p * r->n_bones * 12;
                if (pass == 1) { /* the stored clip at the frame's time */
                    uint32_t filled = 0;
                    bufs[im] = jm;
                    DF_CHECK(df_model_clip_sample(m, c, times[p] - times[0], bufs, &filled, &err) == DF_OK);
                    DF_CHECK(filled & (1u << im));
                    src = jm;
                }
                const float *one[1] = {src};
                float *dst[1] = {outp};
                df_batch_t b = {.n = 1};
                b.in[im] = one;
                b.out[op] = dst;
                rc = df_model_evaluate(m, &b, sc, &err);
                DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
                double e = 0;
                for (int64_t q = 0; q < s.N * 3; q++) e = fmax(e, fabs(outp[q] - ref[p * s.N * 3 + q]));
                if (pass == 0) emax_direct = fmax(emax_direct, e);
                else emax_clip = fmax(emax_clip, e);
            }
        }
        fprintf(stderr, "replay: max |model - fit| %.3g (matrices), %.3g (clip), diag %.3g\n",
                emax_direct, emax_clip, diag);
        DF_CHECK(emax_direct < 1e-5 * diag);
        DF_CHECK(emax_clip < 1e-5 * diag);
        free(jm); free(ref); free(outp);
        df_scratch_free(&sc);
        df_model_unref(&m);
    }
    free(times);
    df_decompose_result_free(&r);
    free_seq(&s);
}

int main(void)
{
    DF_CHECK(df_kind_find("rigged") == &df_kind_rigged);
    DF_RUN(test_best_rotation);
    DF_RUN(test_weld);
    DF_RUN(test_metrics_by_hand);
    DF_RUN(test_malformed);
    DF_RUN(test_recover_known_rig);
    DF_RUN(test_seams_as_good_as_welded);
    DF_RUN(test_workers_match_serial);
    DF_RUN(test_reseed_monotone);
    DF_RUN(test_export_replays);
    return dftest_exit();
}

/* test_kind_retarget.c — the `retarget` kind through df_model_open /
 * df_model_evaluate, against references computed here in double:
 *  - source weights: target weights clamp(E w), positions rest + sum tw d;
 *  - markers: exact markers of a known rigid motion give back the weights;
 *    noisy markers give the bounded least-squares optimum found by an
 *    exhaustive enumeration of active sets (with the six rigid-correction
 *    unknowns always free, or without them);
 *  - bounds none / nonneg from the config parameters;
 *  - a mixed batch equals its poses one by one;
 *  - a sequence's state (previous weights, the start to take) changes
 *    nothing but the solve's start: the answers equal those without it;
 * and every malformed file and bad pose refused with a message naming it.
 */
#include "dftest.h"
#include "df.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 30, T = 20, MT = 4, MS = 6, K = 10, KS = 4 /* stable markers */ };

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static double urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static double nrand(void)
{
    return sqrt(-2 * log(urand() + 1e-300)) * cos(2 * M_PI * urand());
}

/* the target's skeleton (knob `skeleton`): joint 0 at the origin, joint 1
 * its child at (0, 5, 0); every vertex on both with weights skw, 1 - skw */
static float skw[N];
/* the model's data, in float as written */
static float rest[N * 3], deltas[MT * N * 3], E[MT * MS], mrest[K * 3], A[MS * K * 3], mw[K];
static int32_t tris[T * 3];

static void make_data(void)
{
    for (int i = 0; i < N * 3; i++) rest[i] = (float)(10 * nrand());
    for (int i = 0; i < MT * N * 3; i++) deltas[i] = (float)nrand();
    for (int i = 0; i < T * 3; i++) tris[i] = (int32_t)(urand() * N);
    for (int i = 0; i < MT * MS; i++) E[i] = (float)(-0.5 + 1.5 * urand());
    for (int i = 0; i < K * 3; i++) mrest[i] = (float)(5 * nrand());
    /* the first KS markers do not move with any control: they anchor the
     * head (alignment weight 1, the others 0) */
    for (int j = 0; j < MS; j++)
        for (int i = 0; i < K; i++)
            for (int d = 0; d < 3; d++)
                A[(j * K + i) * 3 + d] = i < KS ? 0.0f : (float)(0.8 * nrand());
    for (int i = 0; i < K; i++) mw[i] = i < KS ? 1.0f : 0.0f;
    for (int i = 0; i < N; i++) skw[i] = (float)urand();
}

typedef struct knobs {
    int no_source_names, dup_name, bad_E_shape, deltas_without_rest, dup_marker, collinear,
        dead_control, bad_bounds, no_target_morphs, no_markers, marker_lambda_zero, skeleton;
    double lambda_abs; /* > 0: metadata marker_lambda */
} knobs_t;

static void write_model(const char *path, const knobs_t *k)
{
    df_st_writer_t *w = df_st_writer_new();
    int64_t sp[2] = {N, 3}, st[2] = {T, 3}, sd[3] = {MT, N, 3}, se[2] = {MT, k->bad_E_shape ? MS - 1 : MS},
            sr[2] = {K, 3}, sa[3] = {MS, K, 3}, sw[1] = {K};
    df_st_writer_add(w, "positions", DF_DT_F32, 2, sp, rest);
    df_st_writer_add(w, "triangles", DF_DT_I32, 2, st, tris);
    if (!k->no_target_morphs) {
        df_st_writer_add(w, "morph_deltas", DF_DT_F32, 3, sd, deltas);
        df_st_writer_meta(w, "morph_names", "[\"t0\",\"t1\",\"t2\",\"t3\"]");
    }
    df_st_writer_meta(w, "kind", "retarget");
    df_st_writer_meta(w, "format_version", "1");
    if (!k->no_source_names)
        df_st_writer_meta(w, "source_names", k->dup_name ? "[\"s0\",\"s1\",\"s2\",\"s1\",\"s4\",\"s5\"]"
                                                         : "[\"s0\",\"s1\",\"s2\",\"s3\",\"s4\",\"s5\"]");
    if (k->bad_bounds) df_st_writer_meta(w, "bounds", "positive");
    char lam[64];
    snprintf(lam, sizeof lam, "%.17g", k->lambda_abs);
    df_st_writer_meta(w, "marker_lambda", k->marker_lambda_zero ? "0" : lam);
    float E2[MT * MS];
    memcpy(E2, E, sizeof E2);
    df_st_writer_add(w, "retarget/E", DF_DT_F32, 2, se, E2);
    if (!k->no_markers) {
        float r2[K * 3], a2[MS * K * 3];
        memcpy(r2, mrest, sizeof r2);
        memcpy(a2, A, sizeof a2);
        if (k->dup_marker) memcpy(r2 + 3 * 7, r2 + 3 * 2, 3 * sizeof(float));
        if (k->collinear)
            for (int i = 0; i < K; i++)
                for (int d = 0; d < 3; d++) r2[3 * i + d] = (float)(i * (d + 1));
        if (k->dead_control)
            for (int i = 0; i < K * 3; i++) a2[3 * K * 3 + i] = 0.0f; /* s3 moves nothing */
        if (!k->deltas_without_rest) df_st_writer_add(w, "retarget/marker_rest", DF_DT_F32, 2, sr, r2);
        df_st_writer_add(w, "retarget/marker_deltas", DF_DT_F32, 3, sa, a2);
        df_st_writer_add(w, "retarget/marker_weights", DF_DT_F32, 1, sw, mw);
    }
    if (k->skeleton) {
        int64_t sj[1] = {2}, sj3[2] = {2, 3}, sj4[2] = {2, 4}, sib[3] = {2, 4, 4}, sk[2] = {N, 2};
        int32_t par[2] = {-1, 0}, sjn[N * 2];
        float tr[6] = {0, 0, 0, 0, 5, 0}, rot[8] = {0, 0, 0, 1, 0, 0, 0, 1}, sc[6] = {1, 1, 1, 1, 1, 1};
        float ib[32] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1,
                        1, 0, 0, 0, 0, 1, 0, -5, 0, 0, 1, 0, 0, 0, 0, 1};
        float sww[N * 2];
        for (int i = 0; i < N; i++) {
            sjn[2 * i] = 0, sjn[2 * i + 1] = 1;
            sww[2 * i] = skw[i], sww[2 * i + 1] = 1 - skw[i];
        }
        df_st_writer_meta(w, "joint_names", "[\"root\",\"head\"]");
        df_st_writer_add(w, "joint_parents", DF_DT_I32, 1, sj, par);
        df_st_writer_add(w, "joint_rest_translations", DF_DT_F32, 2, sj3, tr);
        df_st_writer_add(w, "joint_rest_rotations", DF_DT_F32, 2, sj4, rot);
        df_st_writer_add(w, "joint_rest_scales", DF_DT_F32, 2, sj3, sc);
        df_st_writer_add(w, "inverse_bind_matrices", DF_DT_F32, 3, sib, ib);
        df_st_writer_add(w, "skin_joints", DF_DT_I32, 2, sk, sjn);
        df_st_writer_add(w, "skin_weights", DF_DT_F32, 2, sk, sww);
    }
    df_error_t err = {0};
    int rc = df_st_writer_save(w, path, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    df_st_writer_free(&w);
}

static char dir[256];
static char good[300];

static df_model_t *open_model(const char *params)
{
    df_model_t *m = NULL;
    df_error_t err = {0};
    int rc = df_model_open(good, "retarget", params, NULL, &m, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    return m;
}

/* one pose; in: "w" weights or "x" markers; outputs into the given buffers */
static int eval1(df_model_t *m, const float *w, const float *x, float *pos, float *nrm, float *tw,
                 float *sw, df_error_t *err)
{
    df_scratch_t *s = df_scratch_new();
    const float *pw[1] = {w}, *px[1] = {x};
    float *pp[1] = {pos}, *pn[1] = {nrm}, *pt[1] = {tw}, *ps[1] = {sw};
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    if (w) b.in[df_model_find_input(m, "source_weights")] = pw;
    if (x) b.in[df_model_find_input(m, "markers")] = px;
    if (pos) b.out[df_model_find_output(m, "positions")] = pp;
    if (nrm) b.out[df_model_find_output(m, "normals")] = pn;
    if (tw) b.out[df_model_find_output(m, "target_weights")] = pt;
    if (sw) b.out[df_model_find_output(m, "solved_weights")] = ps;
    int rc = df_model_evaluate(m, &b, s, err);
    df_scratch_free(&s);
    return rc;
}

/* target weights and positions from source weights, in double */
static void reference_target(const double *ws, double *tw, double *pos)
{
    for (int t = 0; t < MT; t++) {
        double v = 0;
        for (int j = 0; j < MS; j++) v += (double)E[t * MS + j] * ws[j];
        tw[t] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    for (int i = 0; i < N * 3; i++) {
        double v = rest[i];
        for (int t = 0; t < MT; t++) v += tw[t] * deltas[t * N * 3 + i];
        pos[i] = v;
    }
}

static void test_source_weights(void)
{
    df_model_t *m = open_model(NULL);
    if (!m) return;
    DF_CHECK(df_model_find_input(m, "markers") >= 0);
    const char *const *names;
    DF_CHECK(df_model_names(m, "controls", &names) == MS && !strcmp(names[3], "s3"));
    DF_CHECK(df_model_names(m, "morphs", &names) == MT && !strcmp(names[2], "t2"));
    for (int trial = 0; trial < 20; trial++) {
        float w[MS], pos[N * 3], tw[MT], sw[MS], nrm[N * 3];
        double wd[MS], twr[MT], pr[N * 3];
        for (int j = 0; j < MS; j++) wd[j] = w[j] = (float)urand();
        df_error_t err = {0};
        int rc = eval1(m, w, NULL, pos, nrm, tw, sw, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        reference_target(wd, twr, pr);
        for (int t = 0; t < MT; t++) DF_CHECK_NEAR(tw[t], twr[t], 1e-5);
        for (int j = 0; j < MS; j++) DF_CHECK(sw[j] == w[j]);
        for (int i = 0; i < N * 3; i++) DF_CHECK_NEAR(pos[i], pr[i], 1e-4 * (1 + fabs(pr[i])));
        for (int i = 0; i < N; i++) {
            double l = sqrt(nrm[3 * i] * nrm[3 * i] + nrm[3 * i + 1] * nrm[3 * i + 1] +
                            nrm[3 * i + 2] * nrm[3 * i + 2]);
            DF_CHECK(l < 1e-6 || fabs(l - 1) < 1e-4);
        }
    }
    df_model_unref(&m);
}

static void random_rigid(double R[9], double t[3])
{
    double q[4] = {nrand(), nrand(), nrand(), nrand()}, n = 0;
    for (int i = 0; i < 4; i++) n += q[i] * q[i];
    for (int i = 0; i < 4; i++) q[i] /= sqrt(n);
    double w = q[0], x = q[1], y = q[2], z = q[3];
    double R0[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                    2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                    2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
    memcpy(R, R0, sizeof R0);
    for (int a = 0; a < 3; a++) t[a] = 20 * nrand();
}

/* markers of source weights w moved by (R, t), plus noise on the moving
 * markers; y (OUT, may be NULL): the un-moved noisy markers minus rest */
static void make_markers(const double *w, const double R[9], const double t[3], double noise,
                         float *x, double *y)
{
    for (int i = 0; i < K; i++) {
        double p[3];
        for (int d = 0; d < 3; d++) {
            p[d] = mrest[3 * i + d];
            for (int j = 0; j < MS; j++) p[d] += w[j] * A[(j * K + i) * 3 + d];
            if (i >= KS) p[d] += noise * nrand();
            if (y) y[3 * i + d] = p[d] - mrest[3 * i + d];
        }
        for (int a = 0; a < 3; a++)
            x[3 * i + a] = (float)(R[3 * a] * p[0] + R[3 * a + 1] * p[1] + R[3 * a + 2] * p[2] + t[a]);
    }
}

static void test_markers_exact(void)
{
    df_model_t *m = open_model(NULL);
    if (!m) return;
    for (int trial = 0; trial < 30; trial++) {
        double w[MS] = {0}, R[9], t[3];
        for (int k = 0; k < 2; k++) w[(int)(urand() * MS)] = 0.2 + 0.6 * urand();
        random_rigid(R, t);
        float x[K * 3], pos[N * 3], tw[MT], sw[MS];
        make_markers(w, R, t, 0.0, x, NULL);
        df_error_t err = {0};
        int rc = eval1(m, NULL, x, pos, NULL, tw, sw, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        for (int j = 0; j < MS; j++) DF_CHECK_NEAR(sw[j], w[j], 2e-4);
        double twr[MT], pr[N * 3];
        reference_target(w, twr, pr);
        for (int i = 0; i < N * 3; i++) DF_CHECK_NEAR(pos[i], pr[i], 2e-3 * (1 + fabs(pr[i])));
    }
    df_model_unref(&m);
}

/* min |Aw + J th - y|^2, 0 <= w <= hi (hi < 0: no upper bound; nob: no
 * bounds at all), th free (nj = 6) or absent (nj = 0), by enumeration */
static void reference_solve(const double *y, int nj, int unit, int nob, double *best_w)
{
    enum { NV = MS + 6 };
    double cols[NV][K * 3];
    double c[3] = {0, 0, 0};
    for (int i = 0; i < KS; i++)
        for (int d = 0; d < 3; d++) c[d] += mrest[3 * i + d] / KS;
    for (int j = 0; j < MS; j++)
        for (int k = 0; k < K * 3; k++) cols[j][k] = A[j * K * 3 + k];
    for (int i = 0; i < K; i++) {
        double px = mrest[3 * i] - c[0], py = mrest[3 * i + 1] - c[1], pz = mrest[3 * i + 2] - c[2];
        /* d/d(omega) of omega x p, then translation */
        double J[3][6] = {{0, pz, -py, 1, 0, 0}, {-pz, 0, px, 0, 1, 0}, {py, -px, 0, 0, 0, 1}};
        for (int d = 0; d < 3; d++)
            for (int q = 0; q < 6; q++) cols[MS + q][3 * i + d] = J[d][q];
    }
    int nv = MS + nj;
    long double G[NV][NV], b[NV];
    for (int a = 0; a < nv; a++) {
        b[a] = 0;
        for (int k = 0; k < K * 3; k++) b[a] += (long double)cols[a][k] * y[k];
        for (int e = 0; e < nv; e++) {
            G[a][e] = 0;
            for (int k = 0; k < K * 3; k++) G[a][e] += (long double)cols[a][k] * cols[e][k];
        }
    }
    int states = unit ? 3 : 2;
    long total = 1;
    for (int i = 0; i < MS && !nob; i++) total *= states;
    double bestf = INFINITY;
    for (long code = 0; code < total; code++) {
        long cc = code;
        double w[NV] = {0};
        int fr[NV], nf = 0;
        for (int i = 0; i < MS; i++) {
            int st = nob ? 2 : (int)(cc % states);
            if (!nob) cc /= states;
            if (!unit && st == 1) st = 2;
            w[i] = st == 1 ? 1.0 : 0.0;
            if (st == 2) fr[nf++] = i;
        }
        for (int q = 0; q < nj; q++) fr[nf++] = MS + q;
        /* solve the free block (Gaussian elimination, long double) */
        long double M[NV][NV + 1];
        for (int a = 0; a < nf; a++) {
            M[a][nf] = b[fr[a]];
            for (int e = 0; e < nv; e++)
                if (w[e] != 0) M[a][nf] -= G[fr[a]][e] * w[e];
            for (int e = 0; e < nf; e++) M[a][e] = G[fr[a]][fr[e]];
        }
        int sing = 0;
        for (int col = 0; col < nf && !sing; col++) {
            int p = col;
            for (int r = col + 1; r < nf; r++)
                if (fabsl(M[r][col]) > fabsl(M[p][col])) p = r;
            if (fabsl(M[p][col]) < 1e-30L) sing = 1;
            for (int e = 0; e <= nf; e++) {
                long double tmp = M[col][e];
                M[col][e] = M[p][e];
                M[p][e] = tmp;
            }
            for (int r = col + 1; r < nf && !sing; r++) {
                long double f = M[r][col] / M[col][col];
                for (int e = col; e <= nf; e++) M[r][e] -= f * M[col][e];
            }
        }
        if (sing) continue;
        double z[NV];
        for (int a = nf - 1; a >= 0; a--) {
            long double s = M[a][nf];
            for (int e = a + 1; e < nf; e++) s -= M[a][e] * z[e];
            z[a] = (double)(s / M[a][a]);
        }
        int ok = 1;
        for (int a = 0; a < nf; a++) {
            if (fr[a] < MS && !nob && (z[a] < -1e-12 || (unit && z[a] > 1 + 1e-12))) ok = 0;
            w[fr[a]] = z[a];
        }
        if (!ok) continue;
        double f = 0;
        for (int k = 0; k < K * 3; k++) {
            double r = -y[k];
            for (int a = 0; a < nv; a++) r += cols[a][k] * w[a];
            f += r * r;
        }
        if (f < bestf) {
            bestf = f;
            memcpy(best_w, w, sizeof(double) * MS);
        }
    }
}

static void test_markers_noisy(void)
{
    static const char *const params[] = {
        NULL,                                                     /* unit, linear */
        "{\"rigid_correction\": \"none\"}",                       /* unit, no correction */
        "{\"bounds\": \"nonneg\", \"rigid_correction\": \"none\"}",
        "{\"bounds\": \"none\", \"rigid_correction\": \"none\"}", /* plain least squares */
        "{\"bounds\": \"nonneg\"}",
    };
    for (size_t v = 0; v < sizeof params / sizeof params[0]; v++) {
        df_model_t *m = open_model(params[v]);
        if (!m) return;
        int nj = params[v] && strstr(params[v], "none\"}") && strstr(params[v], "rigid") ? 0 : 6;
        int unit = !params[v] || !strstr(params[v], "bounds");
        int nob = params[v] && strstr(params[v], "\"bounds\": \"none\"");
        if (nob) unit = 0;
        double maxd = 0;
        for (int trial = 0; trial < 25; trial++) {
            double w[MS] = {0}, R[9], t[3], y[K * 3], ref[MS] = {NAN, NAN, NAN, NAN, NAN, NAN};
            for (int k = 0; k < 3; k++) w[(int)(urand() * MS)] = 0.1 + 0.9 * urand();
            random_rigid(R, t);
            float x[K * 3], sw[MS];
            make_markers(w, R, t, 0.3, x, y);
            df_error_t err = {0};
            int rc = eval1(m, NULL, x, NULL, NULL, NULL, sw, &err);
            DF_CHECK_MSG(rc == 0, "%s", err.msg);
            reference_solve(y, nj, unit, nob, ref);
            for (int j = 0; j < MS; j++) maxd = fmax(maxd, fabs(sw[j] - ref[j]));
            if (!nob)
                for (int j = 0; j < MS; j++) DF_CHECK(sw[j] >= 0 && (!unit || sw[j] <= 1));
        }
        /* float markers and right-hand sides: 1e-3 of weights of order 1 */
        DF_CHECK_MSG(maxd < 1e-3, "variant %zu (%s): max |w - reference| = %g", v,
                     params[v] ? params[v] : "default", maxd);
        df_model_unref(&m);
    }
}

/* one marker pose with a sequence's state in and out */
static int eval_state(df_model_t *m, const float *x, const float *st_in, float *st_out, float *sw,
                      df_error_t *err)
{
    df_scratch_t *s = df_scratch_new();
    const float *px[1] = {x}, *ps[1] = {st_in};
    float *po[1] = {st_out}, *pw[1] = {sw};
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    b.in[df_model_find_input(m, "markers")] = px;
    if (st_in) b.in[df_model_find_input(m, "state")] = ps;
    if (st_out) b.out[df_model_find_output(m, "state")] = po;
    b.out[df_model_find_output(m, "solved_weights")] = pw;
    int rc = df_model_evaluate(m, &b, s, err);
    df_scratch_free(&s);
    return rc;
}

/* a sequence's state: the previous frame's weights and the start to take;
 * whichever start the solve takes, the answer is the one without state */
static void test_sequence_state(void)
{
    static const char *const params[] = {NULL, "{\"bounds\": \"nonneg\"}"};
    for (size_t v = 0; v < 2; v++) {
        df_model_t *m = open_model(params[v]);
        if (!m) return;
        int is = df_model_find_input(m, "state"), os = df_model_find_output(m, "state");
        DF_CHECK(is >= 0 && os >= 0);
        if (is < 0 || os < 0) return;
        DF_CHECK(df_model_input(m, is)->shape[0] == MS + 1 && df_model_input(m, is)->optional);
        DF_CHECK(df_model_output(m, os)->shape[0] == MS + 1);
        const float *def = df_model_input_default(m, is);
        for (int i = 0; i <= MS; i++) DF_CHECK(def[i] == -1.0f);
        float st[2][MS + 1];
        for (int i = 0; i <= MS; i++) st[0][i] = -1.0f;
        double maxd = 0;
        int flags[2] = {0, 0};
        for (int f = 0; f < 60; f++) {
            /* smooth weights, some at the bounds; clean markers, then noisy */
            double w[MS], R[9], t[3];
            for (int j = 0; j < MS; j++) {
                double a = sin(0.15 * f + 1.3 * j) * (j % 3 == 0 ? 1.6 : 0.8);
                w[j] = a < 0 ? 0 : a > 1 ? 1 : a;
            }
            random_rigid(R, t);
            float x[K * 3], sw[MS], sc[MS];
            make_markers(w, R, t, f < 30 ? 0.0 : 0.4, x, NULL);
            float *in = st[f & 1], *out = st[~f & 1];
            df_error_t err = {0};
            int rc = eval_state(m, x, in, out, sw, &err);
            DF_CHECK_MSG(rc == 0, "frame %d: %s", f, err.msg);
            rc = eval_state(m, x, NULL, NULL, sc, &err); /* no state: the signs' start */
            DF_CHECK_MSG(rc == 0, "%s", err.msg);
            for (int j = 0; j < MS; j++) {
                maxd = fmax(maxd, fabs(sw[j] - sc[j]));
                DF_CHECK(out[j] == sw[j]); /* the state carries the solved weights */
            }
            DF_CHECK_MSG(out[MS] == 0.0f || out[MS] == 1.0f, "frame %d: start %g", f, out[MS]);
            if (f == 0) DF_CHECK(out[MS] == 1.0f); /* a first frame: try the sets next */
            flags[out[MS] == 1.0f]++;
            /* both starts forced, and a state with a negative weight (none) */
            float forced[MS + 1], sf[MS];
            memcpy(forced, in, sizeof forced);
            for (int k = 0; k < 3 && f > 0; k++) {
                forced[MS] = k == 0 ? 0.0f : 1.0f;
                if (k == 2) forced[1] = -0.5f;
                DF_CHECK(eval_state(m, x, forced, NULL, sf, &err) == 0);
                for (int j = 0; j < MS; j++) maxd = fmax(maxd, fabs(sf[j] - sc[j]));
            }
        }
        /* the bounded optimum is unique: the starts differ in the rounds
         * only (the answers in float rounding, 1e-3 of weights of order 1) */
        DF_CHECK_MSG(maxd < 1e-4, "variant %zu: max |w(state) - w(no state)| = %g", v, maxd);
        DF_CHECK(flags[1] > 0); /* the previous frame's sets were taken */
        /* a non-finite state is refused, naming it */
        float bad[MS + 1], x[K * 3], sw[MS];
        double w0[MS] = {0}, R[9], t[3];
        random_rigid(R, t);
        make_markers(w0, R, t, 0, x, NULL);
        for (int i = 0; i <= MS; i++) bad[i] = 0.5f;
        bad[MS] = NAN;
        df_error_t err = {0};
        DF_CHECK(eval_state(m, x, bad, NULL, sw, &err) == DF_EINVAL);
        DF_CHECK_MSG(strstr(err.msg, "'state' element 6"), "%s", err.msg);
        df_model_unref(&m);
    }
    /* plain least squares has no sets: no state */
    df_model_t *m = open_model("{\"bounds\": \"none\"}");
    if (!m) return;
    DF_CHECK(df_model_find_input(m, "state") < 0 && df_model_find_output(m, "state") < 0);
    df_model_unref(&m);
}

/* parameters' marker_lambda (x mean diag A'A) equals a file carrying the
 * same absolute lambda, and changes the answer of noisy markers */
static void test_marker_lambda_param(void)
{
    double tr = 0;
    for (int i = 0; i < MS * K * 3; i++) tr += (double)A[i] * A[i];
    knobs_t k;
    memset(&k, 0, sizeof k);
    k.lambda_abs = 0.5 * tr / MS;
    char path[320];
    snprintf(path, sizeof path, "%s/lambda.safetensors", dir);
    write_model(path, &k);
    df_model_t *mf = NULL, *mp = open_model("{\"marker_lambda\": 0.5}"), *m0 = open_model(NULL);
    df_error_t err = {0};
    DF_CHECK_MSG(df_model_open(path, "retarget", NULL, NULL, &mf, &err) == 0, "%s", err.msg);
    if (!mf || !mp || !m0) return;
    double same = 0, moved = 0;
    for (int trial = 0; trial < 10; trial++) {
        double w[MS] = {0}, R[9], t[3];
        for (int j = 0; j < 3; j++) w[(int)(urand() * MS)] = 0.2 + 0.7 * urand();
        random_rigid(R, t);
        float x[K * 3], sf[MS], sp[MS], s0[MS];
        make_markers(w, R, t, 0.3, x, NULL);
        DF_CHECK(eval1(mf, NULL, x, NULL, NULL, NULL, sf, &err) == 0);
        DF_CHECK(eval1(mp, NULL, x, NULL, NULL, NULL, sp, &err) == 0);
        DF_CHECK(eval1(m0, NULL, x, NULL, NULL, NULL, s0, &err) == 0);
        for (int j = 0; j < MS; j++) {
            same = fmax(same, fabs(sf[j] - sp[j]));
            moved = fmax(moved, fabs(sf[j] - s0[j]));
        }
    }
    DF_CHECK_MSG(same < 1e-5, "parameters vs file: %g", same);
    DF_CHECK_MSG(moved > 1e-2, "lambda changed nothing: %g", moved);
    df_model_unref(&mf);
    df_model_unref(&mp);
    df_model_unref(&m0);
    static const char *const bad[] = {"{\"marker_lambda\": -1}", "{\"marker_lambda\": \"big\"}"};
    for (int i = 0; i < 2; i++) {
        df_model_t *mb = NULL;
        DF_CHECK(df_model_open(good, "retarget", bad[i], NULL, &mb, &err) == DF_EINVAL);
        DF_CHECK_MSG(strstr(err.msg, "marker_lambda"), "%s", err.msg);
        df_model_unref(&mb);
    }
}

static void test_batch_consistency(void)
{
    df_model_t *m = open_model(NULL);
    if (!m) return;
    enum { B = 7 };
    float in_w[B][MS], in_x[B][K * 3], pos[B][N * 3], tw[B][MT];
    const float *pw[B], *px[B];
    float *pp[B], *pt[B];
    for (int p = 0; p < B; p++) {
        double w[MS], R[9], t[3];
        for (int j = 0; j < MS; j++) w[j] = in_w[p][j] = (float)urand();
        random_rigid(R, t);
        make_markers(w, R, t, 0.1, in_x[p], NULL);
        pw[p] = p % 3 == 0 ? in_w[p] : NULL;
        px[p] = p % 3 == 1 ? in_x[p] : NULL; /* p % 3 == 2: neither, the neutral */
        pp[p] = pos[p];
        pt[p] = tw[p];
    }
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = B;
    b.in[df_model_find_input(m, "source_weights")] = pw;
    b.in[df_model_find_input(m, "markers")] = px;
    b.out[df_model_find_output(m, "positions")] = pp;
    b.out[df_model_find_output(m, "target_weights")] = pt;
    df_scratch_t *s = df_scratch_new();
    df_error_t err = {0};
    DF_CHECK_MSG(df_model_evaluate(m, &b, s, &err) == 0, "%s", err.msg);
    for (int p = 0; p < B; p++) {
        float p1[N * 3], t1[MT];
        DF_CHECK(eval1(m, pw[p], px[p], p1, NULL, t1, NULL, &err) == 0);
        for (int i = 0; i < N * 3; i++) DF_CHECK_NEAR(pos[p][i], p1[i], 1e-4 * (1 + fabs(p1[i])));
        for (int q = 0; q < MT; q++) DF_CHECK_NEAR(tw[p][q], t1[q], 1e-5);
        if (p % 3 == 2)
            for (int i = 0; i < N * 3; i++) DF_CHECK_NEAR(pos[p][i], rest[i], 1e-5);
    }
    df_scratch_free(&s);
    df_model_unref(&m);
}

static void expect_load_error(const knobs_t *k, const char *params, int code, const char *needle)
{
    char path[300];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    write_model(path, k);
    df_model_t *m = NULL;
    df_error_t err = {0};
    int rc = df_model_open(path, "retarget", params, NULL, &m, &err);
    DF_CHECK_MSG(rc == code, "want %d (%s), got %d: %s", code, needle, rc, err.msg);
    DF_CHECK_MSG(strstr(err.msg, needle) != NULL, "'%s' not in: %s", needle, err.msg);
    DF_CHECK(m == NULL);
    df_model_unref(&m);
}

static void test_bad_models(void)
{
    knobs_t k;
#define BAD(field, params, code, needle)                                                    \
    do {                                                                                    \
        memset(&k, 0, sizeof k);                                                            \
        k.field = 1;                                                                        \
        expect_load_error(&k, params, code, needle);                                        \
    } while (0)
    BAD(no_source_names, NULL, DF_EFORMAT, "source_names");
    BAD(dup_name, NULL, DF_EFORMAT, "'s1' appears twice");
    BAD(bad_E_shape, NULL, DF_EFORMAT, "retarget/E");
    BAD(deltas_without_rest, NULL, DF_EFORMAT, "marker_rest");
    BAD(dup_marker, NULL, DF_EFORMAT, "markers 2 and 7 coincide");
    BAD(collinear, NULL, DF_EFORMAT, "collinear");
    BAD(dead_control, NULL, DF_ENUMERIC, "'s3'");
    BAD(bad_bounds, NULL, DF_EFORMAT, "bounds");
    BAD(no_target_morphs, NULL, DF_EFORMAT, "target");
    memset(&k, 0, sizeof k);
    expect_load_error(&k, "{\"bounds\": \"positive\"}", DF_EINVAL, "parameters 'bounds'");
    expect_load_error(&k, "{\"speed\": 1}", DF_EINVAL, "unknown key 'speed'");
    expect_load_error(&k, "{\"align_iterations\": 0}", DF_EINVAL, "align_iterations");
#undef BAD
    /* a truncated file, at many lengths: an error, never a crash */
    char path[300];
    snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
    FILE *f = fopen(good, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len);
    DF_CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    for (long cut = 0; cut < len; cut += 1 + len / 37) {
        f = fopen(path, "wb");
        fwrite(buf, 1, (size_t)cut, f);
        fclose(f);
        df_model_t *m = NULL;
        df_error_t err = {0};
        DF_CHECK(df_model_open(path, "retarget", NULL, NULL, &m, &err) != 0);
        DF_CHECK(err.msg[0] != 0);
        df_model_unref(&m);
    }
    free(buf);
    /* a model without markers has no markers input */
    memset(&k, 0, sizeof k);
    k.no_markers = 1;
    write_model(path, &k);
    df_model_t *m = NULL;
    df_error_t err = {0};
    DF_CHECK_MSG(df_model_open(path, "retarget", NULL, NULL, &m, &err) == 0, "%s", err.msg);
    if (m) DF_CHECK(df_model_find_input(m, "markers") < 0 && df_model_find_input(m, "source_weights") >= 0);
    df_model_unref(&m);
}

static void test_bad_poses(void)
{
    df_model_t *m = open_model(NULL);
    if (!m) return;
    float w[MS] = {0}, x[K * 3], pos[N * 3], tw[MT];
    double wd[MS] = {0}, R[9], t[3];
    random_rigid(R, t);
    make_markers(wd, R, t, 0, x, NULL);
    df_error_t err = {0};
    /* NaN marker */
    x[3 * 5 + 1] = NAN;
    for (int i = 0; i < N * 3; i++) pos[i] = 1234.5f;
    DF_CHECK(eval1(m, NULL, x, pos, NULL, tw, NULL, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "pose 0") && strstr(err.msg, "'markers' element 16"), "%s", err.msg);
    DF_CHECK(pos[0] == 1234.5f); /* nothing written */
    make_markers(wd, R, t, 0, x, NULL);
    /* both inputs */
    DF_CHECK(eval1(m, w, x, pos, NULL, tw, NULL, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "not both"), "%s", err.msg);
    /* Inf weight */
    w[2] = INFINITY;
    DF_CHECK(eval1(m, w, NULL, pos, NULL, tw, NULL, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "'source_weights' element 2"), "%s", err.msg);
    /* collinear and duplicated (all coincident) markers */
    for (int i = 0; i < K; i++)
        for (int d = 0; d < 3; d++) x[3 * i + d] = (float)(2.0 * i + d);
    DF_CHECK(eval1(m, NULL, x, pos, NULL, tw, NULL, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "collinear"), "%s", err.msg);
    for (int i = 0; i < K * 3; i++) x[i] = 3.0f;
    DF_CHECK(eval1(m, NULL, x, pos, NULL, tw, NULL, &err) == DF_EINVAL);
    DF_CHECK(pos[0] == 1234.5f);
    df_model_unref(&m);
}

/* 3 x 3 rotation of the unit quaternion (x, y, z, w) */
static void quat_mat(const float *q, double R[9])
{
    double x = q[0], y = q[1], z = q[2], w = q[3];
    double R0[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                    2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                    2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
    memcpy(R, R0, sizeof R0);
}

/* A target with a skeleton: its joint inputs are the retarget model's under
 * the same names, handed to the target's evaluation. Positions from source
 * weights and joint rotations / translations against linear blend skinning
 * computed here in double (FK of the two joints, skin matrices world x
 * inverse bind); without joint inputs the rest pose (the plain morph
 * reference); with markers the same skinning of the solved weights; a
 * non-finite joint input refused. */
static void test_target_skeleton(void)
{
    char path[320];
    snprintf(path, sizeof path, "%s/skel.safetensors", dir);
    knobs_t k;
    memset(&k, 0, sizeof k);
    k.skeleton = 1;
    write_model(path, &k);
    df_model_t *m = NULL;
    df_error_t err = {0};
    int rc = df_model_open(path, "retarget", NULL, NULL, &m, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    int iq = df_model_find_input(m, "joint_rotations"), it = df_model_find_input(m, "joint_translations");
    DF_CHECK(iq >= 0 && it >= 0);
    if (iq < 0 || it < 0) goto out;
    DF_CHECK(df_model_input(m, iq)->shape[0] == 2 && df_model_input(m, iq)->shape[1] == 4);
    DF_CHECK(df_model_input(m, iq)->optional && df_model_input(m, it)->optional);
    int iw = df_model_find_input(m, "source_weights"), ix = df_model_find_input(m, "markers");
    int op = df_model_find_output(m, "positions"), osw = df_model_find_output(m, "solved_weights");
    df_scratch_t *sc = df_scratch_new();
    double worst = 0, worst_rest = 0, worst_mk = 0;
    for (int trial = 0; trial < 12; trial++) {
        float w[MS], q[8], t[6], pos[N * 3], x[K * 3], posm[N * 3], swm[MS];
        double wd[MS], twr[MT], pr[N * 3];
        for (int j = 0; j < MS; j++) wd[j] = w[j] = (float)urand();
        for (int j = 0; j < 2; j++) {
            double n = 0;
            for (int a = 0; a < 4; a++) n += (q[4 * j + a] = (float)nrand()) * q[4 * j + a];
            for (int a = 0; a < 4; a++) q[4 * j + a] = (float)(q[4 * j + a] / sqrt(n));
            for (int a = 0; a < 3; a++) t[3 * j + a] = (float)(a == 1 && j == 1 ? 5 : 0) + (float)nrand();
        }
        double R0[9], t0[3];
        random_rigid(R0, t0);
        make_markers(wd, R0, t0, 0.0, x, NULL);
        const float *pw[1] = {w}, *pq[1] = {q}, *pt[1] = {t}, *px[1] = {x};
        float *pp[1] = {pos}, *ppm[1] = {posm}, *psw[1] = {swm};
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.in[iw] = pw, b.in[iq] = pq, b.in[it] = pt;
        b.out[op] = pp;
        rc = df_model_evaluate(m, &b, sc, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        /* the same joints with markers instead of weights */
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.in[ix] = px, b.in[iq] = pq, b.in[it] = pt;
        b.out[op] = ppm, b.out[osw] = psw;
        rc = df_model_evaluate(m, &b, sc, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        /* FK: world_0 = [R0 | t0], world_1 = world_0 [R1 | t1]; skin_0 =
         * world_0, skin_1 = world_1 translate(0, -5, 0) */
        double Ra[9], Rb[9], W1[9], T1[3], S[2][12];
        quat_mat(q, Ra), quat_mat(q + 4, Rb);
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++) {
                W1[3 * a + c] = 0;
                for (int e = 0; e < 3; e++) W1[3 * a + c] += Ra[3 * a + e] * Rb[3 * e + c];
            }
        for (int a = 0; a < 3; a++) {
            T1[a] = t[a];
            for (int e = 0; e < 3; e++) T1[a] += Ra[3 * a + e] * t[3 + e];
        }
        for (int a = 0; a < 3; a++) {
            for (int c = 0; c < 3; c++) S[0][4 * a + c] = Ra[3 * a + c], S[1][4 * a + c] = W1[3 * a + c];
            S[0][4 * a + 3] = t[a];
            S[1][4 * a + 3] = T1[a] - 5 * W1[3 * a + 1];
        }
        for (int pass = 0; pass < 2; pass++) {
            double ws[MS];
            for (int j = 0; j < MS; j++) ws[j] = pass ? swm[j] : wd[j];
            reference_target(ws, twr, pr);
            for (int i = 0; i < N; i++)
                for (int a = 0; a < 3; a++) {
                    double v = 0;
                    for (int j = 0; j < 2; j++) {
                        const double *M = S[j];
                        double u = M[4 * a + 3];
                        for (int c = 0; c < 3; c++) u += M[4 * a + c] * pr[3 * i + c];
                        v += (j ? 1 - (double)skw[i] : skw[i]) * u;
                    }
                    double e = fabs((pass ? posm : pos)[3 * i + a] - v) / (1 + fabs(v));
                    if (pass)
                        worst_mk = fmax(worst_mk, e);
                    else
                        worst = fmax(worst, e);
                }
        }
        /* no joint inputs: the rest pose */
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.in[iw] = pw;
        b.out[op] = pp;
        rc = df_model_evaluate(m, &b, sc, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        reference_target(wd, twr, pr);
        for (int i = 0; i < N * 3; i++) worst_rest = fmax(worst_rest, fabs(pos[i] - pr[i]) / (1 + fabs(pr[i])));
    }
    printf("# target skeleton: posed %.3g, markers %.3g, rest %.3g (relative)\n", worst, worst_mk,
           worst_rest);
    DF_CHECK_MSG(worst < 1e-5 && worst_rest < 1e-5, "posed %g, rest %g", worst, worst_rest);
    DF_CHECK_MSG(worst_mk < 1e-3, "markers %g", worst_mk);
    /* a non-finite joint input is refused, naming it */
    {
        float w[MS] = {0}, q[8] = {0, 0, 0, 1, NAN, 0, 0, 1}, pos[N * 3];
        const float *pw[1] = {w}, *pq[1] = {q};
        float *pp[1] = {pos};
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.in[iw] = pw, b.in[iq] = pq;
        b.out[op] = pp;
        rc = df_model_evaluate(m, &b, sc, &err);
        DF_CHECK_MSG(rc != 0 && strstr(err.msg, "joint_rotations"), "rc %d: %s", rc, err.msg);
    }
    df_scratch_free(&sc);
out:
    df_model_unref(&m);
    unlink(path);
}

/* head_pose: for a marker pose the rigid motion taking the source's rest
 * frame to the markers' (exact markers of a known motion x = R p + t give
 * [R | t]); for a pose with source weights or neither, the identity */
static void test_head_pose(void)
{
    df_model_t *m = open_model(NULL);
    if (!m) return;
    int oh = df_model_find_output(m, "head_pose");
    DF_CHECK(oh >= 0);
    if (oh < 0) goto out;
    DF_CHECK(df_model_output(m, oh)->ndim == 2 && df_model_output(m, oh)->shape[0] == 3 &&
             df_model_output(m, oh)->shape[1] == 4);
    int iw = df_model_find_input(m, "source_weights"), ix = df_model_find_input(m, "markers");
    df_scratch_t *sc = df_scratch_new();
    double worst = 0;
    int bad_id = 0;
    for (int trial = 0; trial < 20; trial++) {
        double w[MS] = {0}, R[9], t[3];
        for (int k = 0; k < 2; k++) w[(int)(urand() * MS)] = 0.2 + 0.6 * urand();
        random_rigid(R, t);
        float x[K * 3], ws[MS] = {0.5f}, h[3][12];
        make_markers(w, R, t, 0.0, x, NULL);
        const float *px[3] = {NULL, x, NULL}, *pw[3] = {ws, NULL, NULL};
        float *ph[3] = {h[0], h[1], h[2]};
        for (int i = 0; i < 36; i++) h[i / 12][i % 12] = NAN;
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = 3;
        b.in[ix] = px, b.in[iw] = pw;
        b.out[oh] = ph;
        df_error_t err = {0};
        int rc = df_model_evaluate(m, &b, sc, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        for (int a = 0; a < 3; a++) {
            for (int c = 0; c < 3; c++) worst = fmax(worst, fabs(h[1][4 * a + c] - R[3 * a + c]));
            worst = fmax(worst, fabs(h[1][4 * a + 3] - t[a]) / 20);
        }
        for (int p = 0; p < 3; p += 2)
            for (int e = 0; e < 12; e++) bad_id += h[p][e] != (e % 5 == 0 ? 1.0f : 0.0f);
    }
    printf("# head pose: worst error %.3g (rotation; translation / 20)\n", worst);
    DF_CHECK_MSG(worst < 1e-4, "head pose off by %g", worst);
    DF_CHECK_MSG(bad_id == 0, "%d values of the identity wrong", bad_id);
    df_scratch_free(&sc);
out:
    df_model_unref(&m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s", dftest_out_dir());
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    make_data();
    knobs_t k;
    memset(&k, 0, sizeof k);
    write_model(good, &k);
    DF_RUN(test_source_weights);
    DF_RUN(test_markers_exact);
    DF_RUN(test_markers_noisy);
    DF_RUN(test_sequence_state);
    DF_RUN(test_marker_lambda_param);
    DF_RUN(test_batch_consistency);
    DF_RUN(test_bad_models);
    DF_RUN(test_bad_poses);
    DF_RUN(test_target_skeleton);
    DF_RUN(test_head_pose);
    return dftest_exit();
}

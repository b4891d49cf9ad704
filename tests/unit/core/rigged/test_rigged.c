/* test_rigged.c — the `rigged` kind end to end: df_rigged_write -> file ->
 * df_model_open -> df_model_evaluate, against references written here in
 * double precision and independently of core (own quaternion->matrix, own
 * FK, naive LBS loop, DQS via "blend, convert the DQ to a matrix, apply",
 * naive morph loop, hand-computed FK chain). Also validation: bad per-pose
 * inputs and bad model tensors must be refused with a message naming the
 * pose/tensor/index.
 *
 * Tolerances: positions 5e-5 absolute (float evaluation, coordinates of
 * magnitude <= ~10), normals 1e-5, DQS vs LBS for single-influence vertices
 * 1e-6 relative to coordinate magnitude (ISSUE: "exactly").
 */
#include "dftest.h"
#include "df.h"
#include "math/mathx.h"
#include "rigged/rigged_internal.h"
#include "math/skin.h"

#include <stdint.h>
#include <string.h>

/* strong reference: the kind table (core/base/kinds.c) only references kinds
 * weakly, so a static link would otherwise leave kind_rigged.o out */
extern const df_kind_t df_kind_rigged;

/* ------------------------------------------------------------- helpers */

static unsigned rs = 777u;
static double urand(void)
{
    rs = rs * 1664525u + 1013904223u;
    return (rs >> 8) / 16777216.0;
}
static double srand1(void) { return 2.0 * urand() - 1.0; }

static char *tmp_path(const char *name)
{
    static char buf[1200];
    snprintf(buf, sizeof buf, "%s/rigged_%s.safetensors", dftest_out_dir(), name);
    return buf;
}

/* double-precision quaternion (x,y,z,w) -> row-major 3x3, own formula via
 * the axis-angle form: R = I + sin K + (1-cos) K^2 with unit axis */
static void ref_qmat(const float qf[4], double R[9])
{
    double q[4], n = 0;
    for (int i = 0; i < 4; i++) n += (double)qf[i] * qf[i];
    n = sqrt(n);
    for (int i = 0; i < 4; i++) q[i] = qf[i] / n;
    double s = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2]);
    double th = 2 * atan2(s, q[3]);
    double ax[3] = {1, 0, 0};
    if (s > 1e-15) {
        ax[0] = q[0] / s;
        ax[1] = q[1] / s;
        ax[2] = q[2] / s;
    }
    double K[9] = {0, -ax[2], ax[1], ax[2], 0, -ax[0], -ax[1], ax[0], 0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double k2 = 0;
            for (int k = 0; k < 3; k++) k2 += K[3 * i + k] * K[3 * k + j];
            R[3 * i + j] = (i == j) + sin(th) * K[3 * i + j] + (1 - cos(th)) * k2;
        }
}

static void ref_mul34(const double a[12], const double b[12], double o[12])
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double s = a[4 * i] * b[j] + a[4 * i + 1] * b[4 + j] +
                       a[4 * i + 2] * b[8 + j];
            if (j == 3) s += a[4 * i + 3];
            o[4 * i + j] = s;
        }
}

/* affine inverse in double via cofactors */
static void ref_inv34(const double m[12], double o[12])
{
    double a = m[0], b = m[1], c = m[2], d = m[4], e = m[5], f = m[6],
           g = m[8], h = m[9], i = m[10];
    double det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
    double inv[9] = {(e * i - f * h) / det, (c * h - b * i) / det,
                     (b * f - c * e) / det, (f * g - d * i) / det,
                     (a * i - c * g) / det, (c * d - a * f) / det,
                     (d * h - e * g) / det, (b * g - a * h) / det,
                     (a * e - b * d) / det};
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++) o[4 * r + k] = inv[3 * r + k];
        o[4 * r + 3] = -(inv[3 * r] * m[3] + inv[3 * r + 1] * m[7] +
                         inv[3 * r + 2] * m[11]);
    }
}

typedef struct {
    df_rigged_data_t d;
    double *world_rest; /* [J,12] */
} model_src_t;

static void src_free(model_src_t *s)
{
    df_rigged_data_t *d = &s->d;
    free(d->positions);
    free(d->triangles);
    free(d->normals);
    free(d->morph_deltas);
    free(d->morph_normal_deltas);
    free(d->parents);
    free(d->rest_translations);
    free(d->rest_rotations);
    free(d->rest_scales);
    free(d->inverse_bind);
    free(d->skin_joints);
    free(d->skin_weights);
    free(s->world_rest);
    memset(s, 0, sizeof *s);
}

static void rand_quat(float q[4])
{
    double n;
    do {
        for (int i = 0; i < 4; i++) q[i] = (float)srand1();
        n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    } while (n < 0.2);
    for (int i = 0; i < 4; i++) q[i] = (float)(q[i] / n);
}

/* FK in double: world[j] = world[parent] * T R S */
static void ref_fk(const df_rigged_data_t *d, const float *rot,
                   const float *tr, double *world)
{
    for (int64_t j = 0; j < d->n_joints; j++) {
        double R[9], L[12];
        const float *q = rot ? rot + 4 * j : d->rest_rotations + 4 * j;
        const float *t = tr ? tr + 3 * j : d->rest_translations + 3 * j;
        const float *s = d->rest_scales + 3 * j;
        ref_qmat(q, R);
        for (int i = 0; i < 3; i++) {
            for (int k = 0; k < 3; k++) L[4 * i + k] = R[3 * i + k] * s[k];
            L[4 * i + 3] = t[i];
        }
        if (d->parents[j] >= 0)
            ref_mul34(world + 12 * d->parents[j], L, world + 12 * j);
        else
            memcpy(world + 12 * j, L, sizeof L);
    }
}

/* A random model: N vertices, T triangles, M morphs, J joints, K influences.
 * Inverse binds are the inverse rest world matrices, so the rest pose
 * reproduces the rest positions. zero_frac of the weights are zero. */
static void make_model(model_src_t *s, int64_t N, int64_t T, int64_t M,
                       int64_t J, int64_t K, int scaled, double zero_frac)
{
    memset(s, 0, sizeof *s);
    df_rigged_data_t *d = &s->d;
    d->n_vertices = N;
    d->n_triangles = T;
    d->positions = malloc(N * 3 * sizeof(float));
    d->normals = malloc(N * 3 * sizeof(float));
    for (int64_t i = 0; i < N; i++) {
        float nn[3];
        double l = 0;
        for (int k = 0; k < 3; k++) {
            d->positions[3 * i + k] = (float)srand1();
            nn[k] = (float)srand1();
            l += nn[k] * nn[k];
        }
        l = sqrt(l) + 1e-9;
        for (int k = 0; k < 3; k++) d->normals[3 * i + k] = (float)(nn[k] / l);
    }
    d->triangles = malloc((T ? T : 1) * 3 * sizeof(uint32_t));
    for (int64_t i = 0; i < T; i++) {
        d->triangles[3 * i] = (uint32_t)(urand() * N);
        d->triangles[3 * i + 1] = (uint32_t)(urand() * N);
        d->triangles[3 * i + 2] = (uint32_t)(urand() * N);
    }
    d->n_morphs = M;
    if (M) {
        d->morph_deltas = malloc(M * N * 3 * sizeof(float));
        for (int64_t i = 0; i < M * N * 3; i++)
            d->morph_deltas[i] = (float)(0.1 * srand1());
    }
    d->n_joints = J;
    if (J) {
        d->parents = malloc(J * sizeof(int32_t));
        d->rest_translations = malloc(J * 3 * sizeof(float));
        d->rest_rotations = malloc(J * 4 * sizeof(float));
        d->rest_scales = malloc(J * 3 * sizeof(float));
        d->inverse_bind = malloc(J * 16 * sizeof(float));
        s->world_rest = malloc(J * 12 * sizeof(double));
        for (int64_t j = 0; j < J; j++) {
            d->parents[j] = j == 0 ? -1 : (int32_t)(urand() * j);
            if (j > 0 && urand() < 0.1) d->parents[j] = -1;
            for (int k = 0; k < 3; k++) {
                d->rest_translations[3 * j + k] = (float)(0.5 * srand1());
                d->rest_scales[3 * j + k] =
                    scaled ? (float)(0.7 + 0.6 * urand()) : 1.0f;
            }
            rand_quat(d->rest_rotations + 4 * j);
        }
        ref_fk(d, NULL, NULL, s->world_rest);
        for (int64_t j = 0; j < J; j++) {
            double inv[12];
            ref_inv34(s->world_rest + 12 * j, inv);
            for (int k = 0; k < 12; k++) d->inverse_bind[16 * j + k] = (float)inv[k];
            d->inverse_bind[16 * j + 12] = 0;
            d->inverse_bind[16 * j + 13] = 0;
            d->inverse_bind[16 * j + 14] = 0;
            d->inverse_bind[16 * j + 15] = 1;
        }
        d->n_influences = K;
        d->skin_joints = malloc(N * K * sizeof(int32_t));
        d->skin_weights = malloc(N * K * sizeof(float));
        for (int64_t v = 0; v < N; v++) {
            double sum = 0;
            for (int64_t k = 0; k < K; k++) {
                d->skin_joints[v * K + k] = (int32_t)(urand() * J);
                double w = (k > 0 && urand() < zero_frac) ? 0.0 : urand() + 0.01;
                d->skin_weights[v * K + k] = (float)w;
                sum += w;
            }
            for (int64_t k = 0; k < K; k++)
                d->skin_weights[v * K + k] = (float)(d->skin_weights[v * K + k] / sum);
        }
    }
    d->skinning = "lbs";
}

static df_model_t *open_src(model_src_t *s, const char *name)
{
    df_error_t err = {0};
    const char *p = tmp_path(name);
    int rc = df_rigged_write(&s->d, p, &err);
    DF_CHECK_MSG(rc == 0, "write: %s", err.msg);
    if (rc) return NULL;
    df_model_t *m = NULL;
    rc = df_model_open(p, "rigged", NULL, NULL, &m, &err);
    DF_CHECK_MSG(rc == 0, "open: %s", err.msg);
    return m;
}

/* One evaluation call; per-input arrays of B pointers (array NULL = absent
 * for all). */
static int eval(df_model_t *m, int B, const float **w, const float **rot,
                const float **tr, const float **mat, float **pos, float **nrm,
                const uint32_t *flags, df_scratch_t *sc, df_error_t *err)
{
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = B;
    int iw = df_model_find_input(m, "weights"),
        ir = df_model_find_input(m, "joint_rotations"),
        it = df_model_find_input(m, "joint_translations"),
        im = df_model_find_input(m, "joint_matrices");
    if (iw >= 0) b.in[iw] = w;
    if (ir >= 0) b.in[ir] = rot;
    if (it >= 0) b.in[it] = tr;
    if (im >= 0) b.in[im] = mat;
    b.out[df_model_find_output(m, "positions")] = pos;
    b.out[df_model_find_output(m, "normals")] = nrm;
    b.flags = flags;
    return df_model_evaluate(m, &b, sc, err);
}

/* The normal matrix of a joint with linear part L (rows of stride st):
 * cof(L)/|det L|^(1/3), the inverse transpose scaled to equal L for a
 * rotation times a scale (the rigged kind's normals, docs/rigged.md). */
static void ref_normal_matrix(const double *m, int st, double N[9])
{
    double a = m[0], b = m[1], c = m[2], d = m[st], e = m[st + 1], f = m[st + 2],
           g = m[2 * st], h = m[2 * st + 1], i = m[2 * st + 2];
    double C[9] = {e * i - f * h, f * g - d * i, d * h - e * g, c * h - b * i, a * i - c * g,
                   b * g - a * h, b * f - c * e, c * d - a * f, a * e - b * d};
    double k = 1.0 / cbrt(fabs(a * C[0] + b * C[1] + c * C[2]));
    for (int q = 0; q < 9; q++) N[q] = C[q] * k;
}

/* 1: ref_lbs turns normals by the blended L, as the skinning kernels do
 * (the rigged kind passes them its normal matrices when a joint is not a
 * rotation times a scale). */
static int ref_kernel_normals;

/* Naive LBS in double from the file data: positions (morphed by w) and
 * normals. skin[j] = world[j] * ibm[j]. */
static void ref_lbs(const df_rigged_data_t *d, const double *world,
                    const float *w, double *pos, double *nrm)
{
    int64_t N = d->n_vertices, K = d->n_influences;
    double *S = malloc(d->n_joints * 12 * sizeof(double));
    for (int64_t j = 0; j < d->n_joints; j++) {
        double ib[12];
        for (int k = 0; k < 12; k++) ib[k] = d->inverse_bind[16 * j + k];
        ref_mul34(world + 12 * j, ib, S + 12 * j);
    }
    for (int64_t v = 0; v < N; v++) {
        double p[3], n[3] = {0, 0, 0}, o[3] = {0, 0, 0}, on[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            p[k] = d->positions[3 * v + k];
            for (int64_t mm = 0; w && mm < d->n_morphs; mm++)
                p[k] += (double)w[mm] * d->morph_deltas[(mm * N + v) * 3 + k];
            n[k] = d->normals[3 * v + k];
            for (int64_t mm = 0; w && d->morph_normal_deltas && mm < d->n_morphs; mm++)
                n[k] += (double)w[mm] * d->morph_normal_deltas[(mm * N + v) * 3 + k];
        }
        double sum = 0;
        for (int64_t k = 0; k < K; k++) sum += d->skin_weights[v * K + k];
        for (int64_t k = 0; k < K; k++) {
            double wk = d->skin_weights[v * K + k] / sum;
            const double *sm = S + 12 * d->skin_joints[v * K + k];
            double nm[9];
            ref_normal_matrix(sm, 4, nm);
            for (int q = 0; ref_kernel_normals && q < 9; q++) nm[q] = sm[4 * (q / 3) + q % 3];
            for (int r = 0; r < 3; r++) {
                o[r] += wk * (sm[4 * r] * p[0] + sm[4 * r + 1] * p[1] +
                              sm[4 * r + 2] * p[2] + sm[4 * r + 3]);
                on[r] += wk * (nm[3 * r] * n[0] + nm[3 * r + 1] * n[1] +
                               nm[3 * r + 2] * n[2]);
            }
        }
        double l = sqrt(on[0] * on[0] + on[1] * on[1] + on[2] * on[2]);
        for (int r = 0; r < 3; r++) {
            pos[3 * v + r] = o[r];
            nrm[3 * v + r] = l > 1e-20 ? on[r] / l : 0;
        }
    }
    free(S);
}

static double max_err(const float *a, const double *b, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= e)) e = x; /* NaN propagates as failure */
    }
    return e;
}

/* --------------------------------------------------------------- tests */

static void test_roundtrip(void)
{
    DF_CHECK(df_kind_find("rigged") == &df_kind_rigged);
    model_src_t s;
    make_model(&s, 37, 20, 3, 5, 4, 0, 0.3);
    char *jn[5] = {"root", "spine", "neck", "head", "jaw"};
    char *mn[3] = {"smile", "blink", "frown"};
    s.d.joint_names = jn;
    s.d.morph_names = mn;
    float times[3] = {0.0f, 0.5f, 1.25f};
    float rot[3 * 5 * 4];
    for (int i = 0; i < 15; i++) rand_quat(rot + 4 * i);
    df_rigged_clip_t clip = {.name = "wave", .n_keys = 3, .times = times,
                             .rotations = rot};
    s.d.n_clips = 1;
    s.d.clips = &clip;
    df_model_t *m = open_src(&s, "roundtrip");
    if (!m) { src_free(&s); return; }
    DF_CHECK(strcmp(df_model_kind(m), "rigged") == 0);
    DF_CHECK(df_model_n_vertices(m) == 37 && df_model_n_triangles(m) == 20);
    /* the model's mesh is the default pose in output space (here the bind
     * pose differs from the rest pose), not the file's bind-space positions */
    {
        df_scratch_t *sc = df_scratch_new();
        float pos[37 * 3];
        float *pp[1] = {pos};
        df_error_t e;
        DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, pp, NULL, NULL, sc, &e) == 0);
        DF_CHECK(memcmp(df_model_rest_positions(m), pos, 37 * 12) == 0);
        DF_CHECK(memcmp(df_model_rest_positions(m), s.d.positions, 37 * 12) != 0);
        float lo[3], hi[3];
        df_model_bbox(m, lo, hi);
        for (int i = 0; i < 37; i++)
            for (int c = 0; c < 3; c++)
                DF_CHECK(pos[3 * i + c] >= lo[c] && pos[3 * i + c] <= hi[c]);
        df_scratch_free(&sc);
    }
    DF_CHECK(memcmp(df_model_triangles(m), s.d.triangles, 20 * 12) == 0);
    const char *const *names;
    DF_CHECK(df_model_names(m, "joints", &names) == 5);
    DF_CHECK(names && strcmp(names[4], "jaw") == 0);
    DF_CHECK(df_model_names(m, "morphs", &names) == 3);
    DF_CHECK(names && strcmp(names[1], "blink") == 0);
    DF_CHECK(df_model_names(m, "clips", &names) == 1);
    DF_CHECK(df_model_n_inputs(m) == 4 && df_model_n_outputs(m) == 2);
    int iw = df_model_find_input(m, "weights");
    int ir = df_model_find_input(m, "joint_rotations");
    DF_CHECK(iw == 0 && ir == 1 && df_model_find_input(m, "joint_matrices") == 3);
    DF_CHECK(df_model_input(m, ir)->shape[0] == 5 && df_model_input(m, ir)->shape[1] == 4);
    DF_CHECK(df_model_input(m, iw)->optional);
    const float *dq = df_model_input_default(m, ir);
    for (int i = 0; i < 20; i++) DF_CHECK_NEAR(dq[i], s.d.rest_rotations[i], 1e-6);
    /* joint_matrices default = rest world */
    const float *dm = df_model_input_default(m, 3);
    for (int i = 0; i < 60; i++) DF_CHECK_NEAR(dm[i], s.world_rest[i], 1e-5);
    DF_CHECK(df_model_clip_count(m) == 1 && df_model_clip_find(m, "wave") == 0);
    df_clip_info_t ci;
    DF_CHECK(df_model_clip_info(m, 0, &ci) == 0 && ci.n_keys == 3 &&
             ci.times[2] == 1.25f);
    df_model_unref(&m);
    src_free(&s);
}

static void test_rest_pose_identity(void)
{
    /* with ibm = inverse rest world, no inputs reproduces rest */
    model_src_t s;
    make_model(&s, 101, 50, 0, 12, 4, 1, 0.2);
    df_model_t *m = open_src(&s, "rest");
    if (!m) { src_free(&s); return; }
    df_scratch_t *sc = df_scratch_new();
    float *pos = malloc(101 * 12);
    float *pp[1] = {pos};
    df_error_t err;
    DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, pp, NULL, NULL, sc, &err) == 0);
    for (int i = 0; i < 303; i++) DF_CHECK_NEAR(pos[i], s.d.positions[i], 1e-5);
    /* normals only (no positions requested): rest normals at rest pose */
    float *nrm = malloc(101 * 12);
    float *nn[1] = {nrm};
    DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, NULL, nn, NULL, sc, &err) == 0);
    for (int i = 0; i < 303; i++) DF_CHECK_NEAR(nrm[i], s.d.normals[i], 1e-5);
    uint32_t fd[1] = {DF_POSE_DQS};
    DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, NULL, nn, fd, sc, &err) == 0);
    for (int i = 0; i < 303; i++) DF_CHECK_NEAR(nrm[i], s.d.normals[i], 1e-5);
    free(nrm);
    free(pos);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

static void test_fk_chain_hand_computed(void)
{
    /* root at origin rotated 90 deg about z; child j1 at local (1,0,0);
     * j2 at local (1,0,0) from j1. Identity inverse binds, so the skin
     * matrix is the world matrix. Vertex 0 (origin) -> j2, vertex 1
     * (1,0,0) -> j2, vertex 2 (origin) -> j1. */
    df_rigged_data_t d = {0};
    float P[9] = {0, 0, 0, 1, 0, 0, 0, 0, 0};
    uint32_t tri[3] = {0, 1, 2};
    int32_t par[3] = {-1, 0, 1};
    float c = (float)sqrt(0.5);
    float rt[9] = {0, 0, 0, 1, 0, 0, 1, 0, 0};
    float rq[12] = {0, 0, c, c, 0, 0, 0, 1, 0, 0, 0, 1};
    float rsc[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    float ib[48] = {0};
    for (int j = 0; j < 3; j++)
        ib[16 * j] = ib[16 * j + 5] = ib[16 * j + 10] = ib[16 * j + 15] = 1;
    int32_t sj[3] = {2, 2, 1};
    float sw[3] = {1, 1, 1};
    d.n_vertices = 3;
    d.n_triangles = 1;
    d.positions = P;
    d.triangles = tri;
    d.n_joints = 3;
    d.parents = par;
    d.rest_translations = rt;
    d.rest_rotations = rq;
    d.rest_scales = rsc;
    d.inverse_bind = ib;
    d.n_influences = 1;
    d.skin_joints = sj;
    d.skin_weights = sw;
    df_error_t err = {0};
    const char *p = tmp_path("chain");
    DF_CHECK(df_rigged_write(&d, p, &err) == 0);
    df_model_t *m = NULL;
    DF_CHECK_MSG(df_model_open(p, "rigged", NULL, NULL, &m, &err) == 0, "%s", err.msg);
    if (!m) return;
    /* world matrices from FK against hand-written ones: Rz(90) at the
     * root, then +1 along the root's x (= world y) per joint */
    {
        const df__rig_t *r = m->impl;
        float world[36], skin[36];
        df__rig_skin_matrices(r, NULL, NULL, NULL, world, skin);
        const float hand[36] = {0, -1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0,
                                0, -1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0,
                                0, -1, 0, 0, 1, 0, 0, 2, 0, 0, 1, 0};
        for (int i = 0; i < 36; i++) {
            DF_CHECK_NEAR(world[i], hand[i], 1e-6);
            DF_CHECK_NEAR(skin[i], hand[i], 1e-6); /* identity inverse binds */
        }
        /* j1 posed by Rz(90): j1 world = Rz(180) at (0,1,0); j2 = Rz(180)
         * at (-1,1,0) */
        float rq2[12] = {0, 0, c, c, 0, 0, c, c, 0, 0, 0, 1};
        df__rig_skin_matrices(r, rq2, NULL, NULL, world, skin);
        const float hand2[24] = {-1, 0, 0, 0, 0, -1, 0, 1, 0, 0, 1, 0,
                                 -1, 0, 0, -1, 0, -1, 0, 1, 0, 0, 1, 0};
        for (int i = 0; i < 24; i++) DF_CHECK_NEAR(world[12 + i], hand2[i], 1e-6);
    }
    df_scratch_t *sc = df_scratch_new();
    float out[9], nrm[9];
    float *po[1] = {out}, *no[1] = {nrm};
    /* rest: j1 at (0,1,0), j2 at (0,2,0), both rotated 90 about z */
    DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, po, no, NULL, sc, &err) == 0);
    float e0[9] = {0, 2, 0, 0, 3, 0, 0, 1, 0};
    for (int i = 0; i < 9; i++) DF_CHECK_NEAR(out[i], e0[i], 1e-6);
    /* pose: j1 local rotation 90 about z -> j1 world rot 180, j2 at
     * (0,1,0) + R180 (1,0,0) = (-1,1,0); vertex 1: (-1,1,0) + R180 (1,0,0)
     * = (-2,1,0). Rotations given unnormalised (x3) on purpose. */
    float rot[12] = {0, 0, 3 * c, 3 * c, 0, 0, 3 * c, 3 * c, 0, 0, 0, 3};
    const float *ro[1] = {rot};
    DF_CHECK(eval(m, 1, NULL, ro, NULL, NULL, po, no, NULL, sc, &err) == 0);
    float e1[9] = {-1, 1, 0, -2, 1, 0, 0, 1, 0};
    for (int i = 0; i < 9; i++) DF_CHECK_NEAR(out[i], e1[i], 1e-6);
    /* translations input replaces rest local translation: j2 local (0,2,0)
     * under world rot 180 -> (0,1,0) + (0,-2,0) */
    float tr[9] = {0, 0, 0, 1, 0, 0, 0, 2, 0};
    const float *to[1] = {tr};
    DF_CHECK(eval(m, 1, NULL, ro, to, NULL, po, no, NULL, sc, &err) == 0);
    DF_CHECK_NEAR(out[0], 0, 1e-6);
    DF_CHECK_NEAR(out[1], -1, 1e-6);
    /* joint_matrices override FK: j2 = pure translation (5,6,7) */
    float mats[36] = {0};
    for (int j = 0; j < 3; j++) mats[12 * j] = mats[12 * j + 5] = mats[12 * j + 10] = 1;
    mats[24 + 3] = 5;
    mats[24 + 7] = 6;
    mats[24 + 11] = 7;
    const float *mo[1] = {mats};
    DF_CHECK(eval(m, 1, NULL, ro, to, mo, po, no, NULL, sc, &err) == 0);
    DF_CHECK_NEAR(out[0], 5, 1e-6);
    DF_CHECK_NEAR(out[3], 6, 1e-6);
    DF_CHECK_NEAR(out[5], 7, 1e-6);
    df_scratch_free(&sc);
    df_model_unref(&m);
}

/* Morph targets with normal deltas (glTF NORMAL targets): the normal of a
 * morphed pose is normalize(L (n + sum w dn)), L the blended linear part —
 * checked against the double loop, in a batch mixing morphed and unmorphed
 * poses, with and without a skeleton; without morph_normal_deltas the rest
 * normals are skinned (as before). */
static void test_morph_normals(void)
{
    for (int J = 0; J <= 7; J += 7) {
        model_src_t s;
        int64_t N = 517, M = 5, B = 4;
        make_model(&s, N, 300, M, J, J ? 3 : 0, 0, 0.2);
        s.d.morph_normal_deltas = malloc(M * N * 3 * sizeof(float));
        for (int64_t i = 0; i < M * N * 3; i++) s.d.morph_normal_deltas[i] = (float)(0.4 * srand1());
        df_model_t *m = open_src(&s, J ? "mn_skin" : "mn_noskin");
        if (!m) { src_free(&s); continue; }
        float *w = calloc(B * M, sizeof(float)), *rot = malloc(B * 8 * 16);
        for (int64_t i = M; i < B * M; i++) w[i] = (float)srand1(); /* pose 0: all zero */
        for (int64_t i = 0; i < B * 8; i++) rand_quat(rot + 4 * i);
        float *pos = malloc(B * N * 12), *nrm = malloc(B * N * 12);
        const float *wo[4], *ro[4];
        float *po[4], *no[4];
        for (int p = 0; p < B; p++) {
            wo[p] = w + p * M;
            ro[p] = rot + p * 4 * 8;
            po[p] = pos + p * N * 3;
            no[p] = nrm + p * N * 3;
        }
        df_scratch_t *sc = df_scratch_new();
        df_error_t err = {0};
        int rc = eval(m, (int)B, wo, J ? ro : NULL, NULL, NULL, po, no, NULL, sc, &err);
        DF_CHECK_MSG(rc == 0, "J=%d: %s", J, err.msg);
        double *rp = malloc(N * 3 * sizeof(double)), *rn = malloc(N * 3 * sizeof(double));
        double *world = malloc((J ? J : 1) * 12 * sizeof(double)), turn = 0;
        for (int p = 0; p < B && rc == 0; p++) {
            if (J) {
                ref_fk(&s.d, ro[p], NULL, world);
                ref_lbs(&s.d, world, wo[p], rp, rn);
            } else {
                for (int64_t v = 0; v < N; v++) {
                    double n[3], l = 0;
                    for (int k = 0; k < 3; k++) {
                        n[k] = s.d.normals[3 * v + k];
                        for (int64_t mm = 0; mm < M; mm++)
                            n[k] += (double)wo[p][mm] * s.d.morph_normal_deltas[(mm * N + v) * 3 + k];
                        l += n[k] * n[k];
                    }
                    for (int k = 0; k < 3; k++) rn[3 * v + k] = n[k] / sqrt(l);
                }
            }
            double en = max_err(no[p], rn, N * 3);
            DF_CHECK_MSG(en < 2e-5, "J=%d pose %d: normals max error %g", J, p, en);
            if (p == 1 && !J)
                for (int64_t i = 0; i < N * 3; i++) turn = fmax(turn, fabs(rn[i] - s.d.normals[i]));
        }
        if (!J) DF_CHECK_MSG(turn > 0.1, "the normal deltas moved the normals by %g only", turn);
        /* the same file without morph_normal_deltas: morphs keep the rest normals */
        if (!J) {
            free(s.d.morph_normal_deltas);
            s.d.morph_normal_deltas = NULL;
            df_model_t *m0 = open_src(&s, "mn_none");
            if (m0) {
                DF_CHECK(eval(m0, (int)B, wo, NULL, NULL, NULL, po, no, NULL, sc, &err) == 0);
                double e0 = 0;
                for (int p = 0; p < B; p++)
                    for (int64_t i = 0; i < N * 3; i++) e0 = fmax(e0, fabs(no[p][i] - s.d.normals[i]));
                DF_CHECK_MSG(e0 < 1e-6, "without normal deltas: %g from the rest normals", e0);
                df_model_unref(&m0);
            }
        }
        free(rp); free(rn); free(world); free(w); free(rot); free(pos); free(nrm);
        df_scratch_free(&sc);
        df_model_unref(&m);
        src_free(&s);
    }
}

static void test_lbs_vs_naive_k1_to_8(void)
{
    for (int K = 1; K <= 8; K++) {
        model_src_t s;
        int64_t N = 1003; /* not a multiple of the block size */
        make_model(&s, N, 400, 0, 20, K, K % 2, 0.3);
        char nm[32];
        snprintf(nm, sizeof nm, "lbs%d", K);
        df_model_t *m = open_src(&s, nm);
        if (!m) { src_free(&s); continue; }
        float *rot = malloc(20 * 16), *tr = malloc(20 * 12);
        for (int j = 0; j < 20; j++) {
            rand_quat(rot + 4 * j);
            for (int k = 0; k < 3; k++) tr[3 * j + k] = (float)(0.5 * srand1());
        }
        double *world = malloc(20 * 12 * sizeof(double));
        ref_fk(&s.d, rot, tr, world);
        double *rp = malloc(N * 3 * sizeof(double)), *rn = malloc(N * 3 * sizeof(double));
        ref_lbs(&s.d, world, NULL, rp, rn);
        float *pos = malloc(N * 12), *nrm = malloc(N * 12);
        float *po[1] = {pos}, *no[1] = {nrm};
        const float *ro[1] = {rot}, *to[1] = {tr};
        df_scratch_t *sc = df_scratch_new();
        df_error_t err = {0};
        int rc = eval(m, 1, NULL, ro, to, NULL, po, no, NULL, sc, &err);
        DF_CHECK_MSG(rc == 0, "K=%d: %s", K, err.msg);
        double ep = max_err(pos, rp, N * 3), en = max_err(nrm, rn, N * 3);
        DF_CHECK_MSG(ep < 5e-5, "K=%d positions max error %g", K, ep);
        DF_CHECK_MSG(en < 1e-5, "K=%d normals max error %g", K, en);
        /* positions only (no normals requested) gives the same positions */
        float *pos2 = malloc(N * 12);
        float *po2[1] = {pos2};
        DF_CHECK(eval(m, 1, NULL, ro, to, NULL, po2, NULL, NULL, sc, &err) == 0);
        DF_CHECK(memcmp(pos, pos2, N * 12) == 0);
        /* the scalar fallback kernel agrees too */
        df__skin_t sk;
        DF_CHECK(df__skin_build(&sk, N, K, s.d.skin_joints, s.d.skin_weights) == 0);
        DF_CHECK(sk.kmax <= K);
        float *mats = NULL;
        DF_CHECK(posix_memalign((void **)&mats, 64, 20 * 16 * sizeof(float)) == 0);
        for (int j = 0; j < 20; j++) {
            float S[12];
            for (int k = 0; k < 12; k++) {
                double v = 0;
                /* world * ibm in double, here */
                int r = k / 4, cc = k % 4;
                for (int q = 0; q < 3; q++)
                    v += world[12 * j + 4 * r + q] * s.d.inverse_bind[16 * j + 4 * q + cc];
                if (cc == 3) v += world[12 * j + 4 * r + 3];
                S[k] = (float)v;
            }
            df__skin_pack(S, mats + 16 * j);
        }
        float *pin = calloc(N * 3 + 4, 4), *nin = calloc(N * 3 + 4, 4);
        memcpy(pin, s.d.positions, N * 12);
        memcpy(nin, s.d.normals, N * 12);
        /* every compiled kernel (scalar fallback, AVX2, AVX-512) agrees */
        ref_kernel_normals = 1;
        ref_lbs(&s.d, world, NULL, rp, rn);
        ref_kernel_normals = 0;
        for (int impl = 0; impl < 3; impl++) {
            memset(pos2, 0, N * 12);
            memset(nrm, 0, N * 12);
            if (df__skin_lbs_impl(impl, &sk, mats, pin, nin, pos2, nrm) < 0)
                continue;
            ep = max_err(pos2, rp, N * 3);
            en = max_err(nrm, rn, N * 3);
            DF_CHECK_MSG(ep < 5e-5 && en < 1e-5, "K=%d %s kernel errors %g %g",
                         K, df__skin_impl_name(impl), ep, en);
            DF_CHECK(df__skin_lbs_impl(impl, &sk, mats, pin, NULL, pos2, NULL) == 0);
            ep = max_err(pos2, rp, N * 3);
            DF_CHECK_MSG(ep < 5e-5, "K=%d %s kernel positions-only error %g", K,
                         df__skin_impl_name(impl), ep);
        }
        DF_CHECK(df__skin_lbs_impl(DF__SKIN_SCALAR, &sk, mats, pin, nin, pos2, nrm) == 0);
        df__skin_free(&sk);
        free(mats);
        free(pin);
        free(nin);
        free(pos2);
        free(rot);
        free(tr);
        free(world);
        free(rp);
        free(rn);
        free(pos);
        free(nrm);
        df_scratch_free(&sc);
        df_model_unref(&m);
        src_free(&s);
    }
}

/* Independent DQS reference: per joint quaternion from the rigid matrix
 * (trace method in double, written here), blend with sign fix against the
 * first influence, normalise, convert the blended DQ to a matrix, apply. */
static void ref_q_from_R(const double R[9], double q[4])
{
    /* pick the largest of 4w^2, 4x^2, 4y^2, 4z^2 */
    double t[4] = {1 + R[0] - R[4] - R[8], 1 - R[0] + R[4] - R[8],
                   1 - R[0] - R[4] + R[8], 1 + R[0] + R[4] + R[8]};
    int b = 0;
    for (int i = 1; i < 4; i++)
        if (t[i] > t[b]) b = i;
    double s = 0.5 / sqrt(t[b]);
    if (b == 3) {
        q[3] = 0.5 * sqrt(t[3]);
        q[0] = (R[7] - R[5]) * s;
        q[1] = (R[2] - R[6]) * s;
        q[2] = (R[3] - R[1]) * s;
    } else if (b == 0) {
        q[0] = 0.5 * sqrt(t[0]);
        q[1] = (R[1] + R[3]) * s;
        q[2] = (R[2] + R[6]) * s;
        q[3] = (R[7] - R[5]) * s;
    } else if (b == 1) {
        q[1] = 0.5 * sqrt(t[1]);
        q[0] = (R[1] + R[3]) * s;
        q[2] = (R[5] + R[7]) * s;
        q[3] = (R[2] - R[6]) * s;
    } else {
        q[2] = 0.5 * sqrt(t[2]);
        q[0] = (R[2] + R[6]) * s;
        q[1] = (R[5] + R[7]) * s;
        q[3] = (R[3] - R[1]) * s;
    }
}

static void hmul(const double a[4], const double b[4], double o[4])
{
    o[0] = a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1];
    o[1] = a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0];
    o[2] = a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3];
    o[3] = a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2];
}

/* S: [J,12] rigid skin matrices; lin: [J,12] affine scale part (row-major
 * 3x4) applied first (NULL = identity) */
static void ref_dqs(const df_rigged_data_t *d, const double *S,
                    const double *lin, double *pos, double *nrm)
{
    int64_t N = d->n_vertices, K = d->n_influences, J = d->n_joints;
    double *dq = malloc(J * 8 * sizeof(double));
    for (int64_t j = 0; j < J; j++) {
        double R[9], t[4];
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 3; k++) R[3 * i + k] = S[12 * j + 4 * i + k];
        ref_q_from_R(R, dq + 8 * j);
        t[0] = S[12 * j + 3];
        t[1] = S[12 * j + 7];
        t[2] = S[12 * j + 11];
        t[3] = 0;
        double du[4];
        hmul(t, dq + 8 * j, du);
        for (int i = 0; i < 4; i++) dq[8 * j + 4 + i] = 0.5 * du[i];
    }
    for (int64_t v = 0; v < N; v++) {
        double b[8] = {0}, A[12] = {0};
        /* pivot for the sign fix: the heaviest influence (first on ties) */
        int64_t kp = 0;
        for (int64_t k = 1; k < K; k++)
            if (d->skin_weights[v * K + k] > d->skin_weights[v * K + kp]) kp = k;
        const double *q0 = dq + 8 * d->skin_joints[v * K + kp];
        for (int64_t k = 0; k < K; k++) {
            double w = d->skin_weights[v * K + k];
            int j = d->skin_joints[v * K + k];
            const double *qk = dq + 8 * j;
            double dot = q0[0] * qk[0] + q0[1] * qk[1] + q0[2] * qk[2] + q0[3] * qk[3];
            double sw = dot < 0 ? -w : w;
            for (int i = 0; i < 8; i++) b[i] += sw * qk[i];
            for (int i = 0; i < 12; i++)
                A[i] += w * (lin ? lin[12 * j + i] : (i % 5 == 0));
        }
        double n = sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2] + b[3] * b[3]);
        for (int i = 0; i < 8; i++) b[i] /= n;
        /* DQ -> matrix */
        double R[9], rc[4] = {-b[0], -b[1], -b[2], b[3]}, t[4];
        float qf[4] = {(float)b[0], (float)b[1], (float)b[2], (float)b[3]};
        /* rotation matrix from the unit quaternion, algebraic form */
        double x = b[0], y = b[1], z = b[2], w = b[3];
        R[0] = 1 - 2 * (y * y + z * z); R[1] = 2 * (x * y - z * w); R[2] = 2 * (x * z + y * w);
        R[3] = 2 * (x * y + z * w); R[4] = 1 - 2 * (x * x + z * z); R[5] = 2 * (y * z - x * w);
        R[6] = 2 * (x * z - y * w); R[7] = 2 * (y * z + x * w); R[8] = 1 - 2 * (x * x + y * y);
        (void)qf;
        hmul(b + 4, rc, t);
        double p[3], nn[3], p1[3], n1[3];
        for (int k = 0; k < 3; k++) {
            p[k] = d->positions[3 * v + k];
            nn[k] = d->normals[3 * v + k];
        }
        for (int r = 0; r < 3; r++) {
            p1[r] = A[4 * r] * p[0] + A[4 * r + 1] * p[1] + A[4 * r + 2] * p[2] + A[4 * r + 3];
            n1[r] = A[4 * r] * nn[0] + A[4 * r + 1] * nn[1] + A[4 * r + 2] * nn[2];
        }
        double on[3], l = 0;
        for (int r = 0; r < 3; r++) {
            pos[3 * v + r] = R[3 * r] * p1[0] + R[3 * r + 1] * p1[1] +
                             R[3 * r + 2] * p1[2] + 2 * t[r];
            on[r] = R[3 * r] * n1[0] + R[3 * r + 1] * n1[1] + R[3 * r + 2] * n1[2];
            l += on[r] * on[r];
        }
        l = sqrt(l);
        for (int r = 0; r < 3; r++) nrm[3 * v + r] = l > 1e-20 ? on[r] / l : 0;
    }
    free(dq);
}

static void skin_mats_ref(const df_rigged_data_t *d, const double *world,
                          double *S)
{
    for (int64_t j = 0; j < d->n_joints; j++) {
        double ib[12];
        for (int k = 0; k < 12; k++) ib[k] = d->inverse_bind[16 * j + k];
        ref_mul34(world + 12 * j, ib, S + 12 * j);
    }
}

static void test_dqs_vs_reference(void)
{
    model_src_t s;
    int64_t N = 517, J = 15;
    make_model(&s, N, 100, 0, J, 4, 0, 0.3);
    s.d.skinning = "dqs";
    df_model_t *m = open_src(&s, "dqs");
    if (!m) { src_free(&s); return; }
    float *rot = malloc(J * 16);
    for (int j = 0; j < J; j++) rand_quat(rot + 4 * j);
    double *world = malloc(J * 12 * 8), *S = malloc(J * 12 * 8);
    ref_fk(&s.d, rot, NULL, world);
    skin_mats_ref(&s.d, world, S);
    double *rp = malloc(N * 24), *rn = malloc(N * 24);
    ref_dqs(&s.d, S, NULL, rp, rn);
    float *pos = malloc(N * 12), *nrm = malloc(N * 12);
    float *po[1] = {pos}, *no[1] = {nrm};
    const float *ro[1] = {rot};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    DF_CHECK_MSG(eval(m, 1, NULL, ro, NULL, NULL, po, no, NULL, sc, &err) == 0,
                 "%s", err.msg);
    double ep = max_err(pos, rp, N * 3), en = max_err(nrm, rn, N * 3);
    DF_CHECK_MSG(ep < 5e-5, "DQS positions max error %g", ep);
    DF_CHECK_MSG(en < 1e-5, "DQS normals max error %g", en);
    /* DQS differs from LBS on multi-influence vertices (it is not LBS) */
    double *lp = malloc(N * 24), *ln = malloc(N * 24);
    ref_lbs(&s.d, world, NULL, lp, ln);
    DF_CHECK(max_err(pos, lp, N * 3) > 1e-3);
    /* per-pose flag LBS on a DQS model gives LBS */
    uint32_t fl[1] = {DF_POSE_LBS};
    DF_CHECK(eval(m, 1, NULL, ro, NULL, NULL, po, no, fl, sc, &err) == 0);
    DF_CHECK(max_err(pos, lp, N * 3) < 5e-5);
    free(lp);
    free(ln);
    free(rot);
    free(world);
    free(S);
    free(rp);
    free(rn);
    free(pos);
    free(nrm);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

static void test_dqs_equals_lbs_single_influence(void)
{
    model_src_t s;
    int64_t N = 203, J = 10;
    make_model(&s, N, 50, 0, J, 3, 0, 0.0);
    /* only the first influence is non-zero */
    for (int64_t v = 0; v < N; v++) {
        s.d.skin_weights[v * 3] = 1;
        s.d.skin_weights[v * 3 + 1] = 0;
        s.d.skin_weights[v * 3 + 2] = 0;
    }
    df_model_t *m = open_src(&s, "dqs1");
    if (!m) { src_free(&s); return; }
    float *rot = malloc(J * 16), *tr = malloc(J * 12);
    for (int j = 0; j < J; j++) {
        rand_quat(rot + 4 * j);
        for (int k = 0; k < 3; k++) tr[3 * j + k] = (float)(0.5 * srand1());
    }
    float *a = malloc(N * 12), *b = malloc(N * 12), *na = malloc(N * 12),
          *nb = malloc(N * 12);
    float *pa[1] = {a}, *pb[1] = {b}, *qa[1] = {na}, *qb[1] = {nb};
    const float *ro[1] = {rot}, *to[1] = {tr};
    uint32_t fl[1] = {DF_POSE_LBS}, fd[1] = {DF_POSE_DQS};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err;
    DF_CHECK(eval(m, 1, NULL, ro, to, NULL, pa, qa, fl, sc, &err) == 0);
    DF_CHECK(eval(m, 1, NULL, ro, to, NULL, pb, qb, fd, sc, &err) == 0);
    double e = 0, en = 0, mag = 0;
    for (int64_t i = 0; i < N * 3; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        en = fmax(en, fabs(na[i] - nb[i]));
        mag = fmax(mag, fabs(a[i]));
    }
    DF_CHECK_MSG(e <= 1e-6 * (1 + mag), "DQS vs LBS single influence: %g (|p| <= %g)",
                 e, mag);
    DF_CHECK_MSG(en <= 1e-6, "normals %g", en);
    free(a);
    free(b);
    free(na);
    free(nb);
    free(rot);
    free(tr);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

static void test_dqs_scaled_joints(void)
{
    /* joint_matrices = R_j diag(s_j) + t_j with identity inverse binds:
     * the scale part diag(s_j) is blended linearly and applied first,
     * then the blended rigid DQ (docs/rigged.md). */
    model_src_t s;
    int64_t N = 150, J = 6;
    make_model(&s, N, 30, 0, J, 3, 0, 0.2);
    for (int64_t j = 0; j < J; j++) {
        memset(s.d.inverse_bind + 16 * j, 0, 64);
        for (int k = 0; k < 4; k++) s.d.inverse_bind[16 * j + 5 * k] = 1;
    }
    s.d.skinning = "dqs";
    df_model_t *m = open_src(&s, "dqsscale");
    if (!m) { src_free(&s); return; }
    float *mats = malloc(J * 48);
    double *S = malloc(J * 96), *lin = malloc(J * 96);
    for (int64_t j = 0; j < J; j++) {
        float q[4];
        double R[9], sc3[3];
        rand_quat(q);
        ref_qmat(q, R);
        for (int k = 0; k < 3; k++) sc3[k] = 0.5 + urand();
        memset(lin + 12 * j, 0, 96);
        for (int i = 0; i < 3; i++) {
            lin[12 * j + 5 * i] = sc3[i];
            for (int k = 0; k < 3; k++) {
                mats[12 * j + 4 * i + k] = (float)(R[3 * i + k] * sc3[k]);
                S[12 * j + 4 * i + k] = R[3 * i + k];
            }
            double t = srand1();
            mats[12 * j + 4 * i + 3] = (float)t;
            S[12 * j + 4 * i + 3] = t;
        }
    }
    double *rp = malloc(N * 24), *rn = malloc(N * 24);
    ref_dqs(&s.d, S, lin, rp, rn);
    float *pos = malloc(N * 12), *nrm = malloc(N * 12);
    float *po[1] = {pos}, *no[1] = {nrm};
    const float *mo[1] = {mats};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    DF_CHECK_MSG(eval(m, 1, NULL, NULL, NULL, mo, po, no, NULL, sc, &err) == 0,
                 "%s", err.msg);
    double ep = max_err(pos, rp, N * 3), en = max_err(nrm, rn, N * 3);
    DF_CHECK_MSG(ep < 5e-5, "scaled DQS positions max error %g", ep);
    DF_CHECK_MSG(en < 1e-5, "scaled DQS normals max error %g", en);
    free(mats);
    free(S);
    free(lin);
    free(rp);
    free(rn);
    free(pos);
    free(nrm);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

/* Scaled joints with bind positions away from the origin: the scale/shear
 * part P of each skin matrix S = [R P | t] acts about the joint's bind
 * position c (docs/rigged.md):  S x = R (P (x - c) + c) + t'.
 * Reference: R and P are built here (P = Q diag Q^T, never through the
 * code's polar decomposition) and fed to the independent DQS reference.
 * Then the whole character is moved by d (rest mesh, binds and pose): the
 * answer must move by exactly d, as LBS's does. */
static void test_dqs_scale_about_joint(void)
{
    model_src_t s;
    int64_t N = 400, J = 8;
    make_model(&s, N, 60, 0, J, 3, 0, 0.2);
    s.d.skinning = "dqs";
    double *S = malloc(J * 96), *Sr = malloc(J * 96), *lin = malloc(J * 96);
    float *mats = malloc(J * 48);
    for (int64_t j = 0; j < J; j++) {
        float qr[4], qq[4];
        double R[9], Q[9], P[9], D[3], c[3];
        rand_quat(qr);
        rand_quat(qq);
        ref_qmat(qr, R);
        ref_qmat(qq, Q);
        for (int k = 0; k < 3; k++) D[k] = 0.5 + 1.2 * urand();
        for (int a = 0; a < 3; a++)
            for (int b2 = 0; b2 < 3; b2++) {
                P[3 * a + b2] = 0;
                for (int k = 0; k < 3; k++) P[3 * a + b2] += Q[3 * a + k] * D[k] * Q[3 * b2 + k];
            }
        /* c = bind position = translation of world_rest (= inverse(ibm)) */
        for (int a = 0; a < 3; a++) c[a] = s.world_rest[12 * j + 4 * a + 3];
        double t[3], e[3];
        for (int a = 0; a < 3; a++) t[a] = srand1();
        for (int a = 0; a < 3; a++)
            e[a] = c[a] - (P[3 * a] * c[0] + P[3 * a + 1] * c[1] + P[3 * a + 2] * c[2]);
        for (int a = 0; a < 3; a++) {
            for (int b2 = 0; b2 < 3; b2++) {
                double rp = 0;
                for (int k = 0; k < 3; k++) rp += R[3 * a + k] * P[3 * k + b2];
                S[12 * j + 4 * a + b2] = rp;        /* the skin matrix R P */
                Sr[12 * j + 4 * a + b2] = R[3 * a + b2]; /* its rigid part */
                lin[12 * j + 4 * a + b2] = P[3 * a + b2];
            }
            S[12 * j + 4 * a + 3] = t[a];
            Sr[12 * j + 4 * a + 3] =
                t[a] - (R[3 * a] * e[0] + R[3 * a + 1] * e[1] + R[3 * a + 2] * e[2]);
            lin[12 * j + 4 * a + 3] = e[a];
        }
        /* the pose as world matrices: M = S * world_rest */
        double M[12];
        ref_mul34(S + 12 * j, s.world_rest + 12 * j, M);
        for (int k = 0; k < 12; k++) mats[12 * j + k] = (float)M[k];
    }
    double *rp = malloc(N * 24), *rn = malloc(N * 24);
    ref_dqs(&s.d, Sr, lin, rp, rn);
    df_model_t *m = open_src(&s, "dqspivot");
    float *pos = malloc(N * 12), *nrm = malloc(N * 12), *pos2 = malloc(N * 12);
    float *po[1] = {pos}, *no[1] = {nrm}, *po2[1] = {pos2};
    const float *mo[1] = {mats};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    if (m) {
        DF_CHECK_MSG(eval(m, 1, NULL, NULL, NULL, mo, po, no, NULL, sc, &err) == 0, "%s",
                     err.msg);
        double ep = max_err(pos, rp, N * 3), en = max_err(nrm, rn, N * 3);
        DF_CHECK_MSG(ep < 1e-4, "DQS scaled about the joint: positions max error %g", ep);
        DF_CHECK_MSG(en < 1e-4, "DQS scaled about the joint: normals max error %g", en);
        df_model_unref(&m);
    }
    /* move everything by d: positions + d, ibm * T(-d), pose T(d) * M */
    const double dv[3] = {5, -3, 2};
    for (int64_t v = 0; v < N; v++)
        for (int k = 0; k < 3; k++) s.d.positions[3 * v + k] += (float)dv[k];
    for (int64_t j = 0; j < J; j++)
        for (int a = 0; a < 3; a++) {
            float *ib = s.d.inverse_bind + 16 * j + 4 * a;
            ib[3] -= (float)(ib[0] * dv[0] + ib[1] * dv[1] + ib[2] * dv[2]);
            mats[12 * j + 4 * a + 3] += (float)dv[a];
        }
    m = open_src(&s, "dqspivot2");
    if (m) {
        DF_CHECK_MSG(eval(m, 1, NULL, NULL, NULL, mo, po2, NULL, NULL, sc, &err) == 0, "%s",
                     err.msg);
        double e = 0;
        for (int64_t v = 0; v < N; v++)
            for (int k = 0; k < 3; k++)
                e = fmax(e, fabs((double)pos2[3 * v + k] - dv[k] - pos[3 * v + k]));
        DF_CHECK_MSG(e < 1e-4, "DQS moved by d: output moved by d +- %g", e);
        df_model_unref(&m);
    }
    free(S);
    free(Sr);
    free(lin);
    free(mats);
    free(rp);
    free(rn);
    free(pos);
    free(pos2);
    free(nrm);
    df_scratch_free(&sc);
    src_free(&s);
}

/* Skin weights that sum to 1 only within the loader's tolerance (1 +- 5e-4,
 * accepted up to 1e-3) are renormalised exactly at load: with every joint
 * moved by the same translation T (world = T * rest), each vertex must move
 * by exactly T. Unnormalised weights would scale it by their sum: 5e-4 of
 * |p + T| ~ 0.05 here, against float rounding ~1e-5. */
static void test_weights_renormalised(void)
{
    model_src_t s;
    int64_t N = 300, J = 7, K = 4;
    make_model(&s, N, 40, 0, J, K, 0, 0.2);
    for (int64_t v = 0; v < N; v++) {
        double sum = 0;
        for (int64_t k = 0; k < K; k++) sum += s.d.skin_weights[v * K + k];
        double target = 1.0 + (v % 2 ? 5e-4 : -5e-4);
        for (int64_t k = 0; k < K; k++)
            s.d.skin_weights[v * K + k] = (float)(s.d.skin_weights[v * K + k] / sum * target);
    }
    df_model_t *m = open_src(&s, "renorm");
    if (!m) { src_free(&s); return; }
    const double T[3] = {100, -60, 80};
    float *mats = malloc(J * 48), *pos = malloc(N * 12);
    for (int64_t j = 0; j < J; j++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 4; c++)
                mats[12 * j + 4 * a + c] =
                    (float)(s.world_rest[12 * j + 4 * a + c] + (c == 3 ? T[a] : 0));
    float *po[1] = {pos};
    const float *mo[1] = {mats};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    for (int dqs = 0; dqs <= 1; dqs++) {
        uint32_t fl[1] = {dqs ? DF_POSE_DQS : DF_POSE_LBS};
        DF_CHECK_MSG(eval(m, 1, NULL, NULL, NULL, mo, po, NULL, fl, sc, &err) == 0, "%s",
                     err.msg);
        double e = 0;
        for (int64_t v = 0; v < N; v++)
            for (int k = 0; k < 3; k++)
                e = fmax(e, fabs(pos[3 * v + k] - (s.d.positions[3 * v + k] + T[k])));
        DF_CHECK_MSG(e < 2e-3, "%s: weights summing to 1 +- 5e-4: vertex off by %g",
                     dqs ? "DQS" : "LBS", e);
    }
    free(mats);
    free(pos);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

/* One-hot morph weights on each target in turn (the last one included), in
 * one batch and one pose at a time, with and without a skeleton, and a model
 * with a single target: each against the naive sum rest + w d_m. */
static void test_morph_one_hot(void)
{
    for (int variant = 0; variant < 3; variant++) {
        int64_t N = 211, M = variant == 2 ? 1 : 9, J = variant == 1 ? 5 : 0;
        model_src_t s;
        make_model(&s, N, 30, M, J, J ? 3 : 0, 0, 0.0);
        df_model_t *m = open_src(&s, "onehot");
        if (!m) { src_free(&s); continue; }
        float *w = calloc(M * M, 4), *pos = malloc(M * N * 12);
        const float *wp[16];
        float *po[16];
        for (int64_t p = 0; p < M; p++) {
            w[p * M + p] = 0.75f;
            wp[p] = w + p * M;
            po[p] = pos + p * N * 3;
        }
        double *ref = malloc(N * 24), *rn = malloc(N * 24);
        df_scratch_t *sc = df_scratch_new();
        df_error_t err = {0};
        for (int one = 0; one <= 1; one++) {
            if (!one)
                DF_CHECK_MSG(eval(m, (int)M, wp, NULL, NULL, NULL, po, NULL, NULL, sc, &err) == 0,
                             "%s", err.msg);
            for (int64_t p = 0; p < M; p++) {
                if (one)
                    DF_CHECK_MSG(eval(m, 1, wp + p, NULL, NULL, NULL, po + p, NULL, NULL, sc,
                                      &err) == 0, "%s", err.msg);
                double e = 0;
                if (J) {
                    ref_lbs(&s.d, s.world_rest, wp[p], ref, rn);
                } else {
                    for (int64_t i = 0; i < N * 3; i++)
                        ref[i] = s.d.positions[i] + 0.75 * s.d.morph_deltas[p * N * 3 + i];
                }
                e = max_err(po[p], ref, N * 3);
                DF_CHECK_MSG(e < 1e-5, "M=%lld J=%lld %s: one-hot on target %lld: error %g",
                             (long long)M, (long long)J, one ? "alone" : "in a batch",
                             (long long)p, e);
            }
        }
        free(w);
        free(pos);
        free(ref);
        free(rn);
        df_scratch_free(&sc);
        df_model_unref(&m);
        src_free(&s);
    }
}

static void test_dqs_kernels_agree(void)

{
    /* the scalar fallback and the vectorised DQS kernel on the same data
     * (the model tests above go through the default, widest kernel) */
    int64_t N = 1003, J = 12;
    for (int K = 1; K <= 8; K += 3) {
        model_src_t s;
        make_model(&s, N, 10, 0, J, K, 0, 0.3);
        df__skin_t sk;
        DF_CHECK(df__skin_build(&sk, N, K, s.d.skin_joints, s.d.skin_weights) == 0);
        float *dq = malloc(J * 32), *lin = NULL;
        DF_CHECK(posix_memalign((void **)&lin, 64, J * 64) == 0);
        for (int64_t j = 0; j < J; j++) {
            float q[4], t[3] = {(float)srand1(), (float)srand1(), (float)srand1()};
            rand_quat(q);
            df_dq_from_qt(q, t, dq + 8 * j);
            float m[12] = {0};
            for (int r = 0; r < 3; r++) {
                for (int c = 0; c < 3; c++)
                    m[4 * r + c] = (r == c ? 1.0f : 0.0f) + (float)(0.2 * srand1());
            }
            df__skin_pack(m, lin + 16 * j);
        }
        float *pin = calloc(N * 3 + 4, 4), *nin = calloc(N * 3 + 4, 4);
        memcpy(pin, s.d.positions, N * 12);
        memcpy(nin, s.d.normals, N * 12);
        float *p0 = malloc(N * 12), *n0 = malloc(N * 12), *p1 = malloc(N * 12),
              *n1 = malloc(N * 12);
        for (int withlin = 0; withlin <= 1; withlin++) {
            const float *L = withlin ? lin : NULL;
            DF_CHECK(df__skin_dqs_impl(DF__SKIN_SCALAR, &sk, dq, L, pin, nin, p0, n0) == 0);
            for (int impl = 1; impl < 3; impl++) {
                if (df__skin_dqs_impl(impl, &sk, dq, L, pin, nin, p1, n1) < 0) continue;
                double ep = 0, en = 0;
                for (int64_t i = 0; i < N * 3; i++) {
                    ep = fmax(ep, fabs(p0[i] - p1[i]));
                    en = fmax(en, fabs(n0[i] - n1[i]));
                }
                DF_CHECK_MSG(ep < 2e-5 && en < 1e-5, "K=%d lin=%d %s: %g %g", K,
                             withlin, df__skin_impl_name(impl), ep, en);
                /* positions only */
                DF_CHECK(df__skin_dqs_impl(impl, &sk, dq, L, pin, NULL, p1, NULL) == 0);
                ep = 0;
                for (int64_t i = 0; i < N * 3; i++) ep = fmax(ep, fabs(p0[i] - p1[i]));
                DF_CHECK_MSG(ep < 2e-5, "K=%d %s positions-only %g", K,
                             df__skin_impl_name(impl), ep);
            }
        }
        free(p0);
        free(n0);
        free(p1);
        free(n1);
        free(pin);
        free(nin);
        free(dq);
        free(lin);
        df__skin_free(&sk);
        src_free(&s);
    }
}

static void naive_morph(const df_rigged_data_t *d, const float *w, double *out)
{
    int64_t N = d->n_vertices;
    for (int64_t i = 0; i < N * 3; i++) {
        double v = d->positions[i];
        for (int64_t mm = 0; w && mm < d->n_morphs; mm++)
            v += (double)w[mm] * d->morph_deltas[mm * N * 3 + i];
        out[i] = v;
    }
}

static void test_morph_gemm_and_batch(void)
{
    /* M = 9 morphs, no skeleton (pure morph model) and a skinned one */
    for (int skinned = 0; skinned <= 1; skinned++) {
        model_src_t s;
        int64_t N = 611, M = 9, J = skinned ? 8 : 0;
        make_model(&s, N, 100, M, J, 4, 0, 0.3);
        df_model_t *m = open_src(&s, skinned ? "morph_sk" : "morph");
        if (!m) { src_free(&s); continue; }
        DF_CHECK(df_model_n_inputs(m) == (skinned ? 4 : 1));
        enum { B = 7 };
        float *w[B], *rot[B], *pos[B], *nrm[B], *one[B];
        const float *cw[B], *crot[B];
        for (int p = 0; p < B; p++) {
            w[p] = malloc(M * 4);
            for (int i = 0; i < M; i++) w[p][i] = (float)srand1();
            rot[p] = malloc((J ? J : 1) * 16);
            for (int j = 0; j < J; j++) rand_quat(rot[p] + 4 * j);
            pos[p] = malloc(N * 12);
            nrm[p] = malloc(N * 12);
            one[p] = malloc(N * 12);
            cw[p] = w[p];
            crot[p] = rot[p];
        }
        cw[2] = NULL;                          /* absent: rest */
        memset(w[4], 0, M * 4);                /* all zero: rest */
        df_scratch_t *sc = df_scratch_new();
        df_error_t err = {0};
        int rc = eval(m, B, cw, skinned ? crot : NULL, NULL, NULL, pos, nrm,
                      NULL, sc, &err);
        DF_CHECK_MSG(rc == 0, "%s", err.msg);
        double *ref = malloc(N * 24), *rp = malloc(N * 24), *rn = malloc(N * 24);
        double *world = malloc((J ? J : 1) * 96);
        for (int p = 0; p < B; p++) {
            if (!skinned) {
                naive_morph(&s.d, cw[p], ref);
                double e = max_err(pos[p], ref, N * 3);
                DF_CHECK_MSG(e < 1e-5, "pose %d morph error %g", p, e);
                /* no skeleton: normals are the rest normals */
                DF_CHECK_NEAR(nrm[p][5], s.d.normals[5], 1e-6);
            } else {
                ref_fk(&s.d, rot[p], NULL, world);
                ref_lbs(&s.d, world, cw[p], rp, rn);
                double e = max_err(pos[p], rp, N * 3);
                DF_CHECK_MSG(e < 5e-5, "pose %d morph+LBS error %g", p, e);
            }
            /* batch of B == B single evaluations (B=1 uses sgemv) */
            float *o1[1] = {one[p]};
            const float *w1[1] = {cw[p]}, *r1[1] = {crot[p]};
            DF_CHECK(eval(m, 1, w1, skinned ? r1 : NULL, NULL, NULL, o1, NULL,
                          NULL, sc, &err) == 0);
            double e1 = 0;
            for (int64_t i = 0; i < N * 3; i++)
                e1 = fmax(e1, fabs(one[p][i] - pos[p][i]));
            DF_CHECK_MSG(e1 < 1e-5, "pose %d: batch vs single %g", p, e1);
        }
        /* outputs in one contiguous array (the GEMM may write straight
         * into them): same results */
        float *big = malloc(B * N * 12), *bp[B];
        for (int p = 0; p < B; p++) bp[p] = big + p * N * 3;
        DF_CHECK(eval(m, B, cw, skinned ? crot : NULL, NULL, NULL, bp, NULL,
                      NULL, sc, &err) == 0);
        double ec = 0;
        for (int p = 0; p < B; p++)
            for (int64_t i = 0; i < N * 3; i++)
                ec = fmax(ec, fabs(bp[p][i] - pos[p][i]));
        DF_CHECK_MSG(ec < 1e-6, "contiguous outputs differ by %g", ec);
        free(big);
        /* grown scratch is reused: no growth on the same batch again */
        size_t cap = df_scratch_capacity(sc);
        DF_CHECK(eval(m, B, cw, skinned ? crot : NULL, NULL, NULL, pos, nrm,
                      NULL, sc, &err) == 0);
        DF_CHECK(df_scratch_capacity(sc) == cap);
        for (int p = 0; p < B; p++) {
            free(w[p]);
            free(rot[p]);
            free(pos[p]);
            free(nrm[p]);
            free(one[p]);
        }
        free(ref);
        free(rp);
        free(rn);
        free(world);
        df_scratch_free(&sc);
        df_model_unref(&m);
        src_free(&s);
    }
}

static void test_per_pose_flags(void)
{
    model_src_t s;
    int64_t N = 77, J = 6;
    make_model(&s, N, 20, 0, J, 4, 0, 0.2);
    df_model_t *m = open_src(&s, "flags");
    if (!m) { src_free(&s); return; }
    float *rot = malloc(J * 16);
    for (int j = 0; j < J; j++) rand_quat(rot + 4 * j);
    float *p0 = malloc(N * 12), *p1 = malloc(N * 12), *p2 = malloc(N * 12);
    float *po[3] = {p0, p1, p2};
    const float *ro[3] = {rot, rot, rot};
    uint32_t fl[3] = {0, DF_POSE_DQS, DF_POSE_LBS};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    DF_CHECK(eval(m, 3, NULL, ro, NULL, NULL, po, NULL, fl, sc, &err) == 0);
    double *world = malloc(J * 96), *S = malloc(J * 96), *rp = malloc(N * 24),
           *rn = malloc(N * 24);
    ref_fk(&s.d, rot, NULL, world);
    skin_mats_ref(&s.d, world, S);
    ref_lbs(&s.d, world, NULL, rp, rn);
    DF_CHECK(max_err(p0, rp, N * 3) < 5e-5); /* model default: LBS */
    DF_CHECK(max_err(p2, rp, N * 3) < 5e-5);
    ref_dqs(&s.d, S, NULL, rp, rn);
    DF_CHECK(max_err(p1, rp, N * 3) < 5e-5);
    /* both flags at once is refused naming the pose */
    uint32_t bad[3] = {0, 0, DF_POSE_LBS | DF_POSE_DQS};
    int rc = eval(m, 3, NULL, ro, NULL, NULL, po, NULL, bad, sc, &err);
    DF_CHECK(rc == DF_EINVAL && strstr(err.msg, "pose 2"));
    free(rot);
    free(p0);
    free(p1);
    free(p2);
    free(world);
    free(S);
    free(rp);
    free(rn);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

static void test_bad_pose_inputs(void)
{
    model_src_t s;
    int64_t N = 40, J = 5, M = 2;
    make_model(&s, N, 10, M, J, 2, 0, 0.2);
    df_model_t *m = open_src(&s, "badpose");
    if (!m) { src_free(&s); return; }
    float rot[3][20], w[3][2] = {{0.1f, 0.2f}, {0.3f, 0.4f}, {0.5f, 0.6f}};
    for (int p = 0; p < 3; p++)
        for (int j = 0; j < J; j++) rand_quat(rot[p] + 4 * j);
    float *out[3];
    for (int p = 0; p < 3; p++) out[p] = malloc(N * 12);
    const float *ro[3] = {rot[0], rot[1], rot[2]}, *wo[3] = {w[0], w[1], w[2]};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    DF_CHECK(eval(m, 3, wo, ro, NULL, NULL, out, NULL, NULL, sc, &err) == 0);
    /* zero quaternion at pose 1, joint 3 */
    memset(rot[1] + 12, 0, 16);
    int rc = eval(m, 3, wo, ro, NULL, NULL, out, NULL, NULL, sc, &err);
    DF_CHECK(rc == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "pose 1") && strstr(err.msg, "joint_rotations") &&
                 strstr(err.msg, "joint 3"), "msg: %s", err.msg);
    rand_quat(rot[1] + 12);
    /* NaN weight at pose 2 */
    w[2][1] = NAN;
    rc = eval(m, 3, wo, ro, NULL, NULL, out, NULL, NULL, sc, &err);
    DF_CHECK(rc == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "pose 2") && strstr(err.msg, "weights"),
                 "msg: %s", err.msg);
    w[2][1] = 0.5f;
    /* Inf rotation at pose 0 */
    rot[0][0] = INFINITY;
    rc = eval(m, 3, wo, ro, NULL, NULL, out, NULL, NULL, sc, &err);
    DF_CHECK(rc == DF_EINVAL && strstr(err.msg, "pose 0") &&
             strstr(err.msg, "not finite"));
    rot[0][0] = 0;
    /* NaN in joint_matrices */
    float mats[60] = {0};
    mats[7] = NAN;
    const float *mo[3] = {NULL, NULL, mats};
    rc = eval(m, 3, wo, ro, NULL, mo, out, NULL, NULL, sc, &err);
    DF_CHECK(rc == DF_EINVAL && strstr(err.msg, "pose 2") &&
             strstr(err.msg, "joint_matrices"));
    for (int p = 0; p < 3; p++) free(out[p]);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

/* write the (modified) model and expect df_model_open to fail with a
 * message containing both needles */
static void expect_refused(model_src_t *s, const char *name, const char *n1,
                           const char *n2)
{
    df_error_t err = {0};
    const char *p = tmp_path(name);
    int rc = df_rigged_write(&s->d, p, &err);
    DF_CHECK_MSG(rc == 0, "write %s: %s", name, err.msg);
    df_model_t *m = NULL;
    rc = df_model_open(p, "rigged", NULL, NULL, &m, &err);
    DF_CHECK_MSG(rc < 0 && !m, "%s: accepted", name);
    DF_CHECK_MSG(strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)),
                 "%s: message '%s' lacks '%s'/'%s'", name, err.msg, n1,
                 n2 ? n2 : "");
    if (m) df_model_unref(&m);
}

static void test_bad_models_refused(void)
{
    model_src_t s;
    make_model(&s, 30, 10, 1, 4, 3, 0, 0.0);
    s.d.triangles[7] = 30;
    expect_refused(&s, "bad_tri", "triangles", "triangle 2");
    s.d.triangles[7] = 0;
    float w0 = s.d.skin_weights[3 * 5];
    s.d.skin_weights[3 * 5] += 0.1f;
    expect_refused(&s, "bad_wsum", "skin_weights", "vertex 5");
    s.d.skin_weights[3 * 5] = -0.5f;
    expect_refused(&s, "bad_wneg", "skin_weights", "negative");
    s.d.skin_weights[3 * 5] = w0;
    s.d.skin_joints[3 * 6 + 1] = 4;
    expect_refused(&s, "bad_joint", "skin_joints", "vertex 6");
    s.d.skin_joints[3 * 6 + 1] = 0;
    s.d.parents[1] = 2;
    expect_refused(&s, "bad_parent", "joint_parents", "joint 1");
    s.d.parents[1] = 0;
    float q[4];
    memcpy(q, s.d.rest_rotations + 8, 16);
    memset(s.d.rest_rotations + 8, 0, 16);
    expect_refused(&s, "bad_quat", "joint_rest_rotations", "joint 2");
    memcpy(s.d.rest_rotations + 8, q, 16);
    s.d.inverse_bind[16 * 3 + 13] = 0.5f;
    expect_refused(&s, "bad_ibm", "inverse_bind_matrices", "joint 3");
    s.d.inverse_bind[16 * 3 + 13] = 0;
    float times[3] = {0, 1, 1};
    df_rigged_clip_t clip = {.name = "c", .n_keys = 3, .times = times};
    s.d.clips = &clip;
    s.d.n_clips = 1;
    expect_refused(&s, "bad_times", "clip/0/times", "frame 2");
    s.d.n_clips = 0;
    /* the fixed model loads */
    df_model_t *m = open_src(&s, "bad_fixed");
    DF_CHECK(m != NULL);
    if (m) df_model_unref(&m);
    src_free(&s);
    /* K > 8 is refused (written by hand: the writer refuses it too) */
    make_model(&s, 10, 2, 0, 2, 9, 0, 0.0);
    df_error_t err;
    DF_CHECK(df_rigged_write(&s.d, tmp_path("k9"), &err) == DF_EINVAL);
    src_free(&s);
}

/* Every tensor of a valid file rewritten with a wrong shape, then with a
 * wrong dtype: load must refuse naming that tensor. Then random byte flips
 * anywhere in the file: load either succeeds (and the model evaluates) or
 * fails with a message; never crashes (run under ASan in CI). */
static void test_mutated_files(void)
{
    model_src_t s;
    make_model(&s, 20, 8, 2, 4, 3, 0, 0.0);
    float times[2] = {0, 1}, rot[2 * 4 * 4];
    for (int i = 0; i < 8; i++) rand_quat(rot + 4 * i);
    df_rigged_clip_t clip = {.name = "c", .n_keys = 2, .times = times, .rotations = rot};
    s.d.clips = &clip;
    s.d.n_clips = 1;
    char src[1024]; /* a copy: tmp_path's buffer is reused below */
    snprintf(src, sizeof src, "%s", tmp_path("mut_src"));
    df_error_t err;
    DF_CHECK(df_rigged_write(&s.d, src, &err) == 0);
    df_st_t *st = NULL;
    DF_CHECK(df_st_open(src, NULL, &st, &err) == 0);
    if (!st) { src_free(&s); return; }
    static const char *const mkeys[] = {"kind", "format_version", "skinning",
                                        "joint_names", "morph_names", "clips"};
    for (size_t victim = 0; victim < df_st_count(st); victim++) {
        for (int mode = 0; mode < 2; mode++) {
            df_st_writer_t *w = df_st_writer_new();
            for (size_t k = 0; k < sizeof mkeys / sizeof mkeys[0]; k++)
                df_st_writer_meta(w, mkeys[k], df_st_meta(st, mkeys[k]));
            const df_tensor_t *vt = df_st_at(st, victim);
            for (size_t i = 0; i < df_st_count(st); i++) {
                const df_tensor_t *t = df_st_at(st, i);
                int64_t shape[DF_MAX_DIMS];
                memcpy(shape, t->shape, sizeof shape);
                df_dtype_t dt = t->dtype;
                const void *data = t->data;
                void *buf = NULL;
                if (i == victim && mode == 0) {
                    shape[t->ndim - 1] -= 1; /* one column short */
                } else if (i == victim) {
                    /* same bytes, other dtype of the same size */
                    dt = dt == DF_DT_F32 ? DF_DT_I32 : DF_DT_F32;
                    if (dt == DF_DT_F32) { /* make the ints finite floats */
                        buf = malloc(t->nbytes + 1);
                        for (size_t e = 0; e < t->nbytes / 4; e++)
                            ((float *)buf)[e] = (float)((const int32_t *)t->data)[e];
                        data = buf;
                    }
                }
                int64_t numel = 1;
                for (int d = 0; d < t->ndim; d++) numel *= shape[d];
                if (i == victim && mode == 0 && numel > 0) {
                    /* rows copied with the shorter stride */
                    buf = malloc((size_t)numel * 4);
                    int64_t last = t->shape[t->ndim - 1];
                    for (int64_t r = 0; r < numel / shape[t->ndim - 1]; r++)
                        memcpy((char *)buf + r * (last - 1) * 4,
                               (const char *)t->data + r * last * 4, (last - 1) * 4);
                    data = buf;
                }
                DF_CHECK(df_st_writer_add(w, t->name, dt, t->ndim, shape, data) == 0);
                free(buf);
            }
            const char *p = tmp_path("mut");
            DF_CHECK(df_st_writer_save(w, p, &err) == 0);
            df_st_writer_free(&w);
            df_model_t *m = NULL;
            int rc = df_model_open(p, "rigged", NULL, NULL, &m, &err);
            DF_CHECK_MSG(rc < 0 && !m && strstr(err.msg, vt->name),
                         "%s %s: rc %d msg '%s'", vt->name,
                         mode ? "dtype" : "shape", rc, rc ? err.msg : "");
            if (m) df_model_unref(&m);
        }
    }
    df_st_close(&st);
    /* byte flips */
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *orig = malloc(len), *mut = malloc(len);
    DF_CHECK(fread(orig, 1, len, f) == (size_t)len);
    fclose(f);
    int loaded = 0, refused = 0;
    df_scratch_t *sc = df_scratch_new();
    for (int it = 0; it < 300; it++) {
        memcpy(mut, orig, len);
        int nflip = 1 + (int)(urand() * 4);
        for (int k = 0; k < nflip; k++) {
            long at = (long)(urand() * len);
            mut[at] ^= (unsigned char)(1u << (int)(urand() * 8));
        }
        const char *p = tmp_path("flip");
        FILE *o = fopen(p, "wb");
        fwrite(mut, 1, len, o);
        fclose(o);
        df_model_t *m = NULL;
        int rc = df_model_open(p, "rigged", NULL, NULL, &m, &err);
        if (rc == 0) {
            loaded++;
            int64_t N = df_model_n_vertices(m);
            float *pos = malloc(N * 12), *nrm = malloc(N * 12);
            float *po[1] = {pos}, *no[1] = {nrm};
            DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, po, no, NULL, sc, &err) == 0);
            free(pos);
            free(nrm);
            df_model_unref(&m);
        } else {
            refused++;
            DF_CHECK(err.msg[0] != 0);
        }
    }
    DF_CHECK_MSG(loaded > 0 && refused > 0, "byte flips: %d loaded, %d refused", loaded, refused);
    df_scratch_free(&sc);
    free(orig);
    free(mut);
    src_free(&s);
}

static void test_computed_normals(void)
{
    /* two triangles sharing vertex 0, different areas and orientations:
     * the stored normal is the area-weighted mean (sum of cross products) */
    float P[15] = {0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 1, 1, 0, 0};
    uint32_t tri[6] = {0, 1, 2, 0, 3, 4}; /* z-up area 2; second: area 0.5 */
    df_rigged_data_t d = {0};
    d.n_vertices = 5;
    d.n_triangles = 2;
    d.positions = P;
    d.triangles = tri;
    df_error_t err;
    const char *p = tmp_path("normals");
    DF_CHECK(df_rigged_write(&d, p, &err) == 0);
    df_model_t *m = NULL;
    DF_CHECK_MSG(df_model_open(p, "rigged", NULL, NULL, &m, &err) == 0, "%s", err.msg);
    if (!m) return;
    float pos[15], nrm[15];
    float *po[1] = {pos}, *no[1] = {nrm};
    df_scratch_t *sc = df_scratch_new();
    DF_CHECK(eval(m, 1, NULL, NULL, NULL, NULL, po, no, NULL, sc, &err) == 0);
    /* e1 x e2: (2,0,0)x(0,2,0) = (0,0,4); (0,0,1)x(1,0,0) = (0,1,0) */
    double n0[3] = {0, 1, 4}, l = sqrt(17.0);
    for (int k = 0; k < 3; k++) DF_CHECK_NEAR(nrm[k], n0[k] / l, 1e-6);
    DF_CHECK_NEAR(nrm[3 * 1 + 2], 1, 1e-6);
    DF_CHECK_NEAR(nrm[3 * 3 + 1], 1, 1e-6);
    DF_CHECK(memcmp(pos, P, sizeof P) == 0);
    df_scratch_free(&sc);
    df_model_unref(&m);
}

static void test_clip_sample(void)
{
    model_src_t s;
    int64_t J = 3, M = 2;
    make_model(&s, 20, 5, M, J, 2, 0, 0.0);
    float times[3] = {1.0f, 1.5f, 3.0f};
    float rot[3 * 3 * 4], tr[3 * 3 * 3], w[3 * 2];
    for (int i = 0; i < 9; i++) rand_quat(rot + 4 * i);
    for (int i = 0; i < 27; i++) tr[i] = (float)srand1();
    for (int i = 0; i < 6; i++) w[i] = (float)urand();
    df_rigged_clip_t clip = {.name = "walk", .n_keys = 3, .times = times,
                             .rotations = rot, .translations = tr, .weights = w};
    s.d.clips = &clip;
    s.d.n_clips = 1;
    df_model_t *m = open_src(&s, "clip");
    if (!m) { src_free(&s); return; }
    int iw = df_model_find_input(m, "weights"), ir = df_model_find_input(m, "joint_rotations"),
        it = df_model_find_input(m, "joint_translations"),
        im = df_model_find_input(m, "joint_matrices");
    float bw[2], br[12], bt[9], bm[36];
    float *bufs[4] = {0};
    bufs[iw] = bw;
    bufs[ir] = br;
    bufs[it] = bt;
    bufs[im] = bm;
    uint32_t filled = 0;
    df_error_t err;
    /* t = 1.0 s after the first key: between keys 1 (1.5) and 2 (3.0),
     * alpha = (2.0 - 1.5) / 1.5 = 1/3 */
    DF_CHECK(df_model_clip_sample(m, 0, 1.0, bufs, &filled, &err) == 0);
    DF_CHECK(filled == ((1u << iw) | (1u << ir) | (1u << it)));
    double a = 1.0 / 3.0;
    for (int i = 0; i < 2; i++) DF_CHECK_NEAR(bw[i], w[2 + i] + a * (w[4 + i] - w[2 + i]), 1e-6);
    for (int i = 0; i < 9; i++) DF_CHECK_NEAR(bt[i], tr[9 + i] + a * (tr[18 + i] - tr[9 + i]), 1e-6);
    for (int j = 0; j < 3; j++) {
        /* slerp written here: shortest arc, sin weights */
        const float *q0 = rot + 4 * (3 + j), *q1 = rot + 4 * (6 + j);
        double d = 0, sgn = 1;
        for (int k = 0; k < 4; k++) d += q0[k] * q1[k];
        if (d < 0) { d = -d; sgn = -1; }
        double th = acos(fmin(d, 1.0));
        for (int k = 0; k < 4; k++) {
            double e = (sin((1 - a) * th) * q0[k] + sgn * sin(a * th) * q1[k]) / sin(th);
            DF_CHECK_NEAR(br[4 * j + k], e, 2e-6);
        }
    }
    /* clamped before the start and after the end */
    DF_CHECK(df_model_clip_sample(m, 0, -5.0, bufs, &filled, &err) == 0);
    for (int i = 0; i < 9; i++) DF_CHECK_NEAR(bt[i], tr[i], 0);
    DF_CHECK(df_model_clip_sample(m, 0, 100.0, bufs, &filled, &err) == 0);
    for (int i = 0; i < 9; i++) DF_CHECK_NEAR(bt[i], tr[18 + i], 0);
    /* exactly on a key */
    DF_CHECK(df_model_clip_sample(m, 0, 0.5, bufs, &filled, &err) == 0);
    for (int i = 0; i < 9; i++) DF_CHECK_NEAR(bt[i], tr[9 + i], 1e-7);
    DF_CHECK(df_model_clip_sample(m, 0, NAN, bufs, &filled, &err) == DF_EINVAL);
    DF_CHECK(df_model_clip_sample(m, 1, 0.0, bufs, &filled, &err) == DF_ENOTFOUND);
    df_model_unref(&m);
    src_free(&s);
}

int main(void)
{
    DF_RUN(test_roundtrip);
    DF_RUN(test_rest_pose_identity);
    DF_RUN(test_fk_chain_hand_computed);
    DF_RUN(test_lbs_vs_naive_k1_to_8);
    DF_RUN(test_morph_normals);
    DF_RUN(test_dqs_vs_reference);
    DF_RUN(test_dqs_equals_lbs_single_influence);
    DF_RUN(test_dqs_scaled_joints);
    DF_RUN(test_dqs_scale_about_joint);
    DF_RUN(test_dqs_kernels_agree);
    DF_RUN(test_weights_renormalised);
    DF_RUN(test_morph_one_hot);
    DF_RUN(test_morph_gemm_and_batch);
    DF_RUN(test_per_pose_flags);
    DF_RUN(test_bad_pose_inputs);
    DF_RUN(test_bad_models_refused);
    DF_RUN(test_mutated_files);
    DF_RUN(test_computed_normals);
    DF_RUN(test_clip_sample);
    return dftest_exit();
}

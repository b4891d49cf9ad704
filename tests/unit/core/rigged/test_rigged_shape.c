/* test_rigged_shape.c — shape blend shapes of the `rigged` kind (SMPL-like
 * bodies: shape_deltas, shape_normal_deltas, joint_rest_translation_shapedirs
 * and the `shape` input), through df_rigged_write -> file -> df_model_open ->
 * df_model_evaluate.
 *
 * The reference is written here in double precision and states the
 * definition rather than the implementation: with J_s the shaped local rest
 * translations t_j + sum beta_s T_sj (plus any joint_translations input),
 *     W_j(theta, beta) = FK of those translations and the pose's rotations,
 *     skin_j = W_j(theta, beta) * W_j(rest, beta)^-1 * W_j(rest, 0) * ibm_j
 * (the bind follows the shaped rest skeleton), applied by a naive LBS loop
 * to rest + sum w_m d_m + sum beta_s D_s. Core computes the same thing as a
 * load-time origin shift per (shape, joint) and one GEMM over morph and
 * shape columns. The models have random rest rotations, non-unit scales and
 * an inverse bind that is not the inverse rest world (bind != rest), so the
 * general form is exercised.
 *
 * Tolerance: positions 5e-5 (float evaluation of coordinates <= ~5),
 * normals 2e-5; batch vs single calls 1e-6.
 */
#include "dftest.h"
#include "df.h"

#include <stdint.h>
#include <string.h>

extern const df_kind_t df_kind_rigged;

static unsigned rs = 4242u;
static double urand(void)
{
    rs = rs * 1664525u + 1013904223u;
    return (rs >> 8) / 16777216.0;
}
static double srand1(void) { return 2.0 * urand() - 1.0; }

static const char *tmp_path(const char *name)
{
    static char buf[1200];
    snprintf(buf, sizeof buf, "%s/rigged_shape_%s.safetensors", dftest_out_dir(), name);
    return buf;
}

/* ---------------------------------------------------- double reference */

static void qmat(const float qf[4], double R[9])
{
    double n = sqrt((double)qf[0] * qf[0] + (double)qf[1] * qf[1] + (double)qf[2] * qf[2] +
                    (double)qf[3] * qf[3]);
    double x = qf[0] / n, y = qf[1] / n, z = qf[2] / n, w = qf[3] / n;
    double M[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                   2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                   2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)};
    memcpy(R, M, sizeof M);
}

/* 4x4 row-major helpers */
static void mul44(const double *a, const double *b, double *o)
{
    double t[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += a[4 * i + k] * b[4 * k + j];
            t[4 * i + j] = s;
        }
    memcpy(o, t, sizeof t);
}

/* general 4x4 inverse by Gauss-Jordan with partial pivoting */
static void inv44(const double *m, double *o)
{
    double a[4][8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) a[i][j] = j < 4 ? m[4 * i + j] : (j - 4 == i);
    for (int c = 0; c < 4; c++) {
        int p = c;
        for (int r = c + 1; r < 4; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        for (int j = 0; j < 8; j++) {
            double t = a[c][j];
            a[c][j] = a[p][j];
            a[p][j] = t;
        }
        double d = a[c][c];
        for (int j = 0; j < 8; j++) a[c][j] /= d;
        for (int r = 0; r < 4; r++)
            if (r != c) {
                double f = a[r][c];
                for (int j = 0; j < 8; j++) a[r][j] -= f * a[c][j];
            }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) o[4 * i + j] = a[i][4 + j];
}

typedef struct {
    df_rigged_data_t d;
    float *tshape; /* [S,J,3] */
} src_t;

/* world 4x4 [J,16] of rotations rot (NULL: rest), translations tr (NULL:
 * rest) moved by beta (NULL: 0) */
static void fk(const src_t *s, const float *rot, const float *tr, const float *beta,
               double *W)
{
    const df_rigged_data_t *d = &s->d;
    int64_t J = d->n_joints, S = d->n_shapes;
    for (int64_t j = 0; j < J; j++) {
        double R[9], L[16] = {0};
        qmat(rot ? rot + 4 * j : d->rest_rotations + 4 * j, R);
        const float *t = tr ? tr + 3 * j : d->rest_translations + 3 * j;
        for (int i = 0; i < 3; i++) {
            for (int k = 0; k < 3; k++) L[4 * i + k] = R[3 * i + k] * d->rest_scales[3 * j + k];
            L[4 * i + 3] = t[i];
            for (int64_t q = 0; beta && q < S; q++)
                L[4 * i + 3] += (double)beta[q] * s->tshape[(q * J + j) * 3 + i];
        }
        L[15] = 1;
        if (d->parents[j] >= 0)
            mul44(W + 16 * d->parents[j], L, W + 16 * j);
        else
            memcpy(W + 16 * j, L, sizeof L);
    }
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

static void reference(const src_t *s, const float *w, const float *beta, const float *rot,
                      const float *tr, double *pos, double *nrm)
{
    const df_rigged_data_t *d = &s->d;
    int64_t N = d->n_vertices, J = d->n_joints, K = d->n_influences, M = d->n_morphs,
            S = d->n_shapes;
    double *Wp = malloc(J * 16 * sizeof(double)), *Wr = malloc(J * 16 * sizeof(double)),
           *W0 = malloc(J * 16 * sizeof(double)), *Sk = malloc(J * 16 * sizeof(double));
    fk(s, rot, tr, beta, Wp);
    fk(s, NULL, tr, beta, Wr); /* the shaped rest skeleton (same translations) */
    fk(s, NULL, tr, NULL, W0);
    for (int64_t j = 0; j < J; j++) {
        double inv[16], ib[16], t[16];
        for (int k = 0; k < 16; k++) ib[k] = d->inverse_bind[16 * j + k];
        inv44(Wr + 16 * j, inv);
        mul44(Wp + 16 * j, inv, t);
        mul44(t, W0 + 16 * j, t);
        mul44(t, ib, Sk + 16 * j);
    }
    for (int64_t v = 0; v < N; v++) {
        double p[3], n[3], o[3] = {0, 0, 0}, on[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            p[k] = d->positions[3 * v + k];
            n[k] = d->normals[3 * v + k];
            for (int64_t m = 0; w && m < M; m++) p[k] += (double)w[m] * d->morph_deltas[(m * N + v) * 3 + k];
            for (int64_t q = 0; beta && q < S; q++) {
                p[k] += (double)beta[q] * d->shape_deltas[(q * N + v) * 3 + k];
                if (d->shape_normal_deltas)
                    n[k] += (double)beta[q] * d->shape_normal_deltas[(q * N + v) * 3 + k];
            }
        }
        for (int64_t k = 0; k < K; k++) {
            double wk = d->skin_weights[v * K + k];
            const double *m = Sk + 16 * d->skin_joints[v * K + k];
            double nm[9];
            ref_normal_matrix(m, 4, nm);
            for (int r = 0; r < 3; r++) {
                o[r] += wk * (m[4 * r] * p[0] + m[4 * r + 1] * p[1] + m[4 * r + 2] * p[2] + m[4 * r + 3]);
                on[r] += wk * (nm[3 * r] * n[0] + nm[3 * r + 1] * n[1] + nm[3 * r + 2] * n[2]);
            }
        }
        double l = sqrt(on[0] * on[0] + on[1] * on[1] + on[2] * on[2]);
        for (int r = 0; r < 3; r++) {
            pos[3 * v + r] = o[r];
            nrm[3 * v + r] = on[r] / l;
        }
    }
    free(Wp);
    free(Wr);
    free(W0);
    free(Sk);
}

/* ------------------------------------------------------------- models */

static void rand_quat(float q[4])
{
    double n;
    do {
        for (int i = 0; i < 4; i++) q[i] = (float)srand1();
        n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    } while (n < 0.2);
    for (int i = 0; i < 4; i++) q[i] = (float)(q[i] / n);
}

static float *rnd(int64_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * srand1());
    return x;
}

/* N vertices, M morphs, S shapes, J joints, K = 3 influences; ibm = X *
 * (rest world)^-1 with a random rigid X (bind space != rest world). */
static void make(src_t *s, int64_t N, int64_t M, int64_t S, int64_t J, int normal_deltas)
{
    memset(s, 0, sizeof *s);
    df_rigged_data_t *d = &s->d;
    int64_t K = 3, T = N / 2;
    d->n_vertices = N;
    d->n_triangles = T;
    d->positions = rnd(N * 3, 1.0);
    d->normals = rnd(N * 3, 1.0);
    for (int64_t v = 0; v < N; v++) {
        float *n = d->normals + 3 * v;
        double l = sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]) + 1e-6;
        for (int k = 0; k < 3; k++) n[k] = (float)(n[k] / l);
    }
    d->triangles = malloc(T * 3 * sizeof(uint32_t));
    for (int64_t i = 0; i < 3 * T; i++) d->triangles[i] = (uint32_t)(urand() * N);
    d->n_morphs = M;
    d->morph_deltas = M ? rnd(M * N * 3, 0.1) : NULL;
    d->n_shapes = S;
    d->shape_deltas = rnd(S * N * 3, 0.1);
    d->shape_normal_deltas = normal_deltas ? rnd(S * N * 3, 0.2) : NULL;
    s->tshape = rnd(S * J * 3, 0.05);
    d->joint_shape_translations = s->tshape;
    d->n_joints = J;
    d->parents = malloc(J * sizeof(int32_t));
    d->rest_translations = rnd(J * 3, 0.5);
    d->rest_rotations = malloc(J * 4 * sizeof(float));
    d->rest_scales = malloc(J * 3 * sizeof(float));
    for (int64_t j = 0; j < J; j++) {
        d->parents[j] = j == 0 ? -1 : (int32_t)(urand() * j);
        rand_quat(d->rest_rotations + 4 * j);
        for (int k = 0; k < 3; k++) d->rest_scales[3 * j + k] = (float)(0.7 + 0.6 * urand());
    }
    double *Wr = malloc(J * 16 * sizeof(double)), X[16] = {0}, R[9], inv[16], ib[16];
    fk(s, NULL, NULL, NULL, Wr);
    float qx[4];
    rand_quat(qx);
    qmat(qx, R);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 3; k++) X[4 * i + k] = R[3 * i + k];
        X[4 * i + 3] = 0.3 * srand1();
    }
    X[15] = 1;
    d->inverse_bind = malloc(J * 16 * sizeof(float));
    for (int64_t j = 0; j < J; j++) {
        inv44(Wr + 16 * j, inv);
        mul44(inv, X, ib);
        for (int k = 0; k < 16; k++) d->inverse_bind[16 * j + k] = (float)ib[k];
        d->inverse_bind[16 * j + 12] = d->inverse_bind[16 * j + 13] = d->inverse_bind[16 * j + 14] = 0;
        d->inverse_bind[16 * j + 15] = 1;
    }
    free(Wr);
    d->n_influences = K;
    d->skin_joints = malloc(N * K * sizeof(int32_t));
    d->skin_weights = malloc(N * K * sizeof(float));
    for (int64_t v = 0; v < N; v++) {
        double sum = 0;
        for (int64_t k = 0; k < K; k++) {
            d->skin_joints[v * K + k] = (int32_t)(urand() * J);
            d->skin_weights[v * K + k] = (float)(urand() + 0.05);
            sum += d->skin_weights[v * K + k];
        }
        for (int64_t k = 0; k < K; k++) d->skin_weights[v * K + k] = (float)(d->skin_weights[v * K + k] / sum);
    }
    d->skinning = "lbs";
}

static void src_free(src_t *s)
{
    df_rigged_data_t *d = &s->d;
    free(d->positions);
    free(d->normals);
    free(d->triangles);
    free(d->morph_deltas);
    free(d->shape_deltas);
    free(d->shape_normal_deltas);
    free(s->tshape);
    free(d->parents);
    free(d->rest_translations);
    free(d->rest_rotations);
    free(d->rest_scales);
    free(d->inverse_bind);
    free(d->skin_joints);
    free(d->skin_weights);
}

static df_model_t *open_src(src_t *s, const char *name)
{
    df_error_t err = {0};
    const char *p = tmp_path(name);
    int rc = df_rigged_write(&s->d, p, &err);
    DF_CHECK_MSG(rc == 0, "write: %s", err.msg);
    df_model_t *m = NULL;
    if (!rc) {
        rc = df_model_open(p, "rigged", NULL, NULL, &m, &err);
        DF_CHECK_MSG(rc == 0, "open: %s", err.msg);
    }
    return m;
}

static double max_err(const float *a, const double *b, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= e)) e = x;
    }
    return e;
}

/* ------------------------------------------------------------- tests */

#define B_ 6
static void test_shape_vs_reference(void)
{
    DF_CHECK(df_kind_find("rigged") == &df_kind_rigged);
    src_t s;
    const int64_t N = 200, M = 2, S = 4, J = 7;
    make(&s, N, M, S, J, 1);
    df_model_t *m = open_src(&s, "ref");
    if (!m) { src_free(&s); return; }
    int iw = df_model_find_input(m, "weights"), is = df_model_find_input(m, "shape"),
        ir = df_model_find_input(m, "joint_rotations"), it = df_model_find_input(m, "joint_translations");
    DF_CHECK(iw == 0 && is == 1 && ir == 2 && it == 3);
    DF_CHECK(is >= 0 && df_model_input(m, is)->shape[0] == S && df_model_input(m, is)->optional);
    const char *const *names;
    DF_CHECK(df_model_names(m, "shapes", &names) == (size_t)S && names && !strcmp(names[3], "shape3"));
    /* poses: 0 shape only; 1 shape + rotations; 2 morphs + shape + rotations;
     * 3 nothing; 4 rotations only; 5 shape + rotations + translations */
    float w[B_][2], beta[B_][4], rot[B_][7 * 4], tr[B_][7 * 3];
    const float *pw[B_] = {0}, *pb[B_] = {0}, *pr[B_] = {0}, *pt[B_] = {0};
    for (int p = 0; p < B_; p++) {
        for (int k = 0; k < 2; k++) w[p][k] = (float)srand1();
        for (int k = 0; k < 4; k++) beta[p][k] = (float)(2.0 * srand1());
        for (int j = 0; j < J; j++) rand_quat(rot[p] + 4 * j);
        for (int k = 0; k < J * 3; k++) tr[p][k] = s.d.rest_translations[k] + (float)(0.1 * srand1());
    }
    pb[0] = beta[0];
    pb[1] = beta[1], pr[1] = rot[1];
    pw[2] = w[2], pb[2] = beta[2], pr[2] = rot[2];
    pr[4] = rot[4];
    pb[5] = beta[5], pr[5] = rot[5], pt[5] = tr[5];
    float *pos = malloc(B_ * N * 3 * sizeof(float)), *nrm = malloc(B_ * N * 3 * sizeof(float));
    float *op[B_], *on[B_];
    for (int p = 0; p < B_; p++) op[p] = pos + p * N * 3, on[p] = nrm + p * N * 3;
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = B_;
    b.in[iw] = pw, b.in[is] = pb, b.in[ir] = pr, b.in[it] = pt;
    b.out[0] = op, b.out[1] = on;
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    int rc = df_model_evaluate(m, &b, sc, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    double *rp = malloc(N * 3 * sizeof(double)), *rn = malloc(N * 3 * sizeof(double));
    for (int p = 0; p < B_ && rc == 0; p++) {
        reference(&s, pw[p], pb[p], pr[p], pt[p], rp, rn);
        double ep = max_err(op[p], rp, N * 3), en = max_err(on[p], rn, N * 3);
        DF_CHECK_MSG(ep < 5e-5, "pose %d: positions off by %g", p, ep);
        DF_CHECK_MSG(en < 2e-5, "pose %d: normals off by %g", p, en);
        /* the same pose alone (GEMV path) */
        float *p1 = malloc(N * 3 * sizeof(float)), *n1 = malloc(N * 3 * sizeof(float));
        float *o1[1] = {p1}, *o2[1] = {n1};
        df_batch_t b1;
        memset(&b1, 0, sizeof b1);
        b1.n = 1;
        const float *a0[1] = {pw[p]}, *a1[1] = {pb[p]}, *a2[1] = {pr[p]}, *a3[1] = {pt[p]};
        b1.in[iw] = a0, b1.in[is] = a1, b1.in[ir] = a2, b1.in[it] = a3;
        b1.out[0] = o1, b1.out[1] = o2;
        DF_CHECK(df_model_evaluate(m, &b1, sc, &err) == 0);
        double d1 = 0;
        for (int64_t i = 0; i < N * 3; i++) d1 = fmax(d1, fabs(p1[i] - op[p][i]));
        DF_CHECK_MSG(d1 < 1e-6, "pose %d: alone vs batch %g", p, d1);
        free(p1);
        free(n1);
    }
    /* the shape changes the result (not the rest mesh): a check that fails
     * when the shape input is ignored */
    reference(&s, NULL, NULL, pr[1], NULL, rp, rn);
    DF_CHECK(max_err(op[1], rp, N * 3) > 1e-2);
    free(rp);
    free(rn);
    free(pos);
    free(nrm);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

/* At the rest pose the shaped skeleton skins the shaped mesh onto itself:
 * the output is W(rest)*ibm applied to rest + sum beta D, whatever beta. */
static void test_shape_rest_pose(void)
{
    src_t s;
    const int64_t N = 90, S = 3, J = 5;
    make(&s, N, 0, S, J, 0);
    df_model_t *m = open_src(&s, "rest");
    if (!m) { src_free(&s); return; }
    DF_CHECK(df_model_find_input(m, "shape") == 0 && df_model_find_input(m, "weights") < 0);
    float beta[3] = {1.5f, -2.0f, 0.7f}, zero[3] = {0, 0, 0};
    float *p0 = malloc(N * 12), *p1 = malloc(N * 12), *shaped = malloc(N * 12);
    for (int64_t i = 0; i < N * 3; i++) {
        double x = s.d.positions[i];
        for (int q = 0; q < S; q++) x += beta[q] * s.d.shape_deltas[q * N * 3 + i];
        shaped[i] = (float)x;
    }
    const float *in0[1] = {zero}, *in1[1] = {beta};
    float *o0[1] = {p0}, *o1[1] = {p1};
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    b.in[0] = in0;
    b.out[0] = o0;
    DF_CHECK(df_model_evaluate(m, &b, sc, &err) == 0);
    b.in[0] = in1;
    b.out[0] = o1;
    DF_CHECK(df_model_evaluate(m, &b, sc, &err) == 0);
    /* skin = W_rest * ibm = X (the random rigid bind offset of make()), so
     * p0 = X rest and p1 must be X shaped: p1 - p0 = L_X (shaped - rest),
     * with L_X solved from three edges of the rest mesh and p0. */
    double A[9], Bm[9];
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 3; c++) {
            A[3 * c + k] = s.d.positions[3 * (k + 1) + c] - s.d.positions[c];
            Bm[3 * c + k] = p0[3 * (k + 1) + c] - p0[c];
        }
    /* L = Bm * A^-1 */
    double det = A[0] * (A[4] * A[8] - A[5] * A[7]) - A[1] * (A[3] * A[8] - A[5] * A[6]) +
                 A[2] * (A[3] * A[7] - A[4] * A[6]);
    double Ai[9] = {(A[4] * A[8] - A[5] * A[7]) / det, (A[2] * A[7] - A[1] * A[8]) / det,
                    (A[1] * A[5] - A[2] * A[4]) / det, (A[5] * A[6] - A[3] * A[8]) / det,
                    (A[0] * A[8] - A[2] * A[6]) / det, (A[2] * A[3] - A[0] * A[5]) / det,
                    (A[3] * A[7] - A[4] * A[6]) / det, (A[1] * A[6] - A[0] * A[7]) / det,
                    (A[0] * A[4] - A[1] * A[3]) / det};
    double L[9] = {0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++) L[3 * i + j] += Bm[3 * i + k] * Ai[3 * k + j];
    double e = 0;
    for (int64_t v = 0; v < N; v++)
        for (int i = 0; i < 3; i++) {
            double want = p0[3 * v + i];
            for (int k = 0; k < 3; k++) want += L[3 * i + k] * (shaped[3 * v + k] - s.d.positions[3 * v + k]);
            e = fmax(e, fabs(want - p1[3 * v + i]));
        }
    DF_CHECK_MSG(e < 2e-5, "shaped rest pose off by %g", e);
    free(p0);
    free(p1);
    free(shaped);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

static void test_shape_bad_input(void)
{
    src_t s;
    make(&s, 40, 0, 2, 3, 0);
    df_model_t *m = open_src(&s, "bad_input");
    if (!m) { src_free(&s); return; }
    float beta[2] = {0.5f, NAN};
    const float *in[1] = {beta};
    float out[40 * 3];
    float *o[1] = {out};
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    b.in[0] = in;
    b.out[0] = o;
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    DF_CHECK(df_model_evaluate(m, &b, sc, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "'shape'") && strstr(err.msg, "element 1"), "%s", err.msg);
    df_scratch_free(&sc);
    df_model_unref(&m);
    src_free(&s);
}

/* files with broken shape tensors, written tensor by tensor */
static int write_variant(const src_t *s, const char *path, int variant)
{
    const df_rigged_data_t *d = &s->d;
    int64_t N = d->n_vertices, J = d->n_joints, K = d->n_influences, S = d->n_shapes, T = d->n_triangles;
    df_st_writer_t *w = df_st_writer_new();
    df_st_writer_meta(w, "kind", "rigged");
    df_st_writer_add(w, "positions", DF_DT_F32, 2, (int64_t[]){N, 3}, d->positions);
    df_st_writer_add(w, "triangles", DF_DT_I32, 2, (int64_t[]){T, 3}, d->triangles);
    if (variant != 1) /* 1: shape_normal_deltas without shape_deltas */
        df_st_writer_add(w, "shape_deltas", DF_DT_F32, 3, (int64_t[]){S, N, 3}, d->shape_deltas);
    if (variant == 1 || variant == 2) /* 2: fewer normal deltas than shapes */
        df_st_writer_add(w, "shape_normal_deltas", DF_DT_F32, 3,
                         (int64_t[]){variant == 2 ? S - 1 : S, N, 3}, d->shape_deltas);
    if (variant == 3) /* joint shapedirs of the wrong shape */
        df_st_writer_add(w, "joint_rest_translation_shapedirs", DF_DT_F32, 3, (int64_t[]){S, J - 1, 3},
                         s->tshape);
    else if (variant != 4)
        df_st_writer_add(w, "joint_rest_translation_shapedirs", DF_DT_F32, 3, (int64_t[]){S, J, 3},
                         s->tshape);
    if (variant != 4) { /* 4: joint shapedirs... absent, and no skeleton: valid */
        df_st_writer_add(w, "joint_parents", DF_DT_I32, 1, (int64_t[]){J}, d->parents);
        df_st_writer_add(w, "joint_rest_translations", DF_DT_F32, 2, (int64_t[]){J, 3}, d->rest_translations);
        df_st_writer_add(w, "joint_rest_rotations", DF_DT_F32, 2, (int64_t[]){J, 4}, d->rest_rotations);
        float *sc = malloc(J * 3 * sizeof(float));
        memcpy(sc, d->rest_scales, J * 3 * sizeof(float));
        if (variant == 5) sc[0] = sc[1] = sc[2] = 0.0f; /* singular rest joint */
        df_st_writer_add(w, "joint_rest_scales", DF_DT_F32, 2, (int64_t[]){J, 3}, sc);
        free(sc);
        df_st_writer_add(w, "inverse_bind_matrices", DF_DT_F32, 3, (int64_t[]){J, 4, 4}, d->inverse_bind);
        df_st_writer_add(w, "skin_joints", DF_DT_I32, 2, (int64_t[]){N, K}, d->skin_joints);
        df_st_writer_add(w, "skin_weights", DF_DT_F32, 2, (int64_t[]){N, K}, d->skin_weights);
    }
    df_error_t err = {0};
    int rc = df_st_writer_save(w, path, &err);
    df_st_writer_free(&w);
    return rc;
}

static void test_shape_bad_models(void)
{
    src_t s;
    make(&s, 30, 0, 3, 4, 0);
    static const char *const want[] = {
        NULL, "'shape_normal_deltas' present but 'shape_deltas' is missing",
        "'shape_normal_deltas': 2 shapes, 'shape_deltas' has 3",
        "joint_rest_translation_shapedirs", NULL, "singular"};
    for (int v = 1; v <= 5; v++) {
        const char *p = tmp_path("variant");
        DF_CHECK(write_variant(&s, p, v) == 0);
        df_model_t *m = NULL;
        df_error_t err = {0};
        int rc = df_model_open(p, "rigged", NULL, NULL, &m, &err);
        if (!want[v]) {
            DF_CHECK_MSG(rc == 0, "variant %d: %s", v, err.msg);
            if (m) DF_CHECK(df_model_find_input(m, "shape") == 0);
        } else {
            DF_CHECK_MSG(rc == DF_EFORMAT && strstr(err.msg, want[v]), "variant %d: rc %d: %s", v, rc,
                         err.msg);
        }
        df_model_unref(&m);
    }
    /* the writer refuses shapes without deltas */
    float *kept = s.d.shape_deltas;
    s.d.shape_deltas = NULL;
    df_error_t err = {0};
    DF_CHECK(df_rigged_write(&s.d, tmp_path("nodeltas"), &err) == DF_EINVAL);
    s.d.shape_deltas = kept;
    src_free(&s);
}

int main(void)
{
    DF_RUN(test_shape_vs_reference);
    DF_RUN(test_shape_rest_pose);
    DF_RUN(test_shape_bad_input);
    DF_RUN(test_shape_bad_models);
    return dftest_exit();
}

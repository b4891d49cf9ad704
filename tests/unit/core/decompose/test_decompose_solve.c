/* test_decompose_solve.c — the transform models of the decomposition
 * (core/decompose/decompose_solve.c): rigid, trs and affine bones, and the
 * normals of each.
 *
 * References are independent of the code under test:
 *  - one bone's weighted Procrustes step against a solve written here from
 *    explicit points (weighted centroids, cross covariance, an SVD by
 *    Jacobi on HᵀH, Kabsch's reflection fix, Umeyama's scale);
 *  - sequences generated from known rigid / uniformly scaled rigs (the exact
 *    answer is in the model class), checked for error and for what every
 *    fitted linear part is (a rotation, a positive multiple of one);
 *  - normals against normals recomputed from the fitted positions (an
 *    affine bone moves every face's cross product by cof(L)), and against
 *    the `rigged` kind's skinned normals for each transform model.
 */
#include "decompose/decompose.h"
#include "decompose/decompose_internal.h"
#include "dftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const df_kind_t df_kind_rigged;

static uint64_t rng_state = 777;
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

static double det3(const double *m)
{
    return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
           m[2] * (m[3] * m[7] - m[4] * m[6]);
}

/* Jacobi eigen-decomposition of a symmetric 3x3 (a destroyed; eigenvalues
 * on its diagonal, eigenvectors in the columns of v). */
static void jacobi3(double a[9], double v[9])
{
    for (int i = 0; i < 9; i++) v[i] = (i % 4 == 0);
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = a[1] * a[1] + a[2] * a[2] + a[5] * a[5];
        if (off < 1e-300) break;
        for (int p = 0; p < 2; p++)
            for (int q = p + 1; q < 3; q++) {
                double apq = a[3 * p + q];
                if (apq == 0) continue;
                double th = (a[3 * q + q] - a[3 * p + p]) / (2 * apq);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < 3; k++) {
                    double x = a[3 * k + p], y = a[3 * k + q];
                    a[3 * k + p] = c * x - s * y; a[3 * k + q] = s * x + c * y;
                }
                for (int k = 0; k < 3; k++) {
                    double x = a[3 * p + k], y = a[3 * q + k];
                    a[3 * p + k] = c * x - s * y; a[3 * q + k] = s * x + c * y;
                }
                for (int k = 0; k < 3; k++) {
                    double x = v[3 * k + p], y = v[3 * k + q];
                    v[3 * k + p] = c * x - s * y; v[3 * k + q] = s * x + c * y;
                }
            }
    }
}

/* Reference weighted Procrustes (Kabsch / Umeyama) by SVD of the cross
 * covariance H = Σ c (v - v̄)(y - ȳ)ᵀ = U S Vᵀ: R = V diag(1,1,d) Uᵀ. */
static void ref_procrustes(int n, const double *v, const double *y, const double *c, int scale,
                           double T[12])
{
    double cs = 0, vb[3] = {0}, yb[3] = {0}, H[9] = {0}, var = 0;
    for (int i = 0; i < n; i++) {
        cs += c[i];
        for (int a = 0; a < 3; a++) { vb[a] += c[i] * v[3 * i + a]; yb[a] += c[i] * y[3 * i + a]; }
    }
    for (int a = 0; a < 3; a++) { vb[a] /= cs; yb[a] /= cs; }
    for (int i = 0; i < n; i++)
        for (int u = 0; u < 3; u++) {
            var += c[i] * (v[3 * i + u] - vb[u]) * (v[3 * i + u] - vb[u]);
            for (int s = 0; s < 3; s++)
                H[3 * u + s] += c[i] * (v[3 * i + u] - vb[u]) * (y[3 * i + s] - yb[s]);
        }
    double HtH[9], V[9];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            HtH[3 * a + b] = 0;
            for (int k = 0; k < 3; k++) HtH[3 * a + b] += H[3 * k + a] * H[3 * k + b];
        }
    jacobi3(HtH, V);
    int ord[3] = {0, 1, 2}; /* descending eigenvalues */
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (HtH[4 * ord[b]] > HtH[4 * ord[a]]) { int t = ord[a]; ord[a] = ord[b]; ord[b] = t; }
    double Vs[9], U[9], sig[3];
    for (int k = 0; k < 3; k++) {
        sig[k] = sqrt(fmax(HtH[4 * ord[k]], 0));
        for (int a = 0; a < 3; a++) Vs[3 * a + k] = V[3 * a + ord[k]];
    }
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 3; a++) {
            double t = 0;
            for (int b = 0; b < 3; b++) t += H[3 * a + b] * Vs[3 * b + k];
            U[3 * a + k] = t / sig[k];
        }
    /* third left vector: orthogonal to the first two, sign from H V3 */
    U[2] = U[3] * U[7] - U[6] * U[4];
    U[5] = U[6] * U[1] - U[0] * U[7];
    U[8] = U[0] * U[4] - U[3] * U[1];
    double hv = 0;
    for (int a = 0; a < 3; a++) {
        double t = 0;
        for (int b = 0; b < 3; b++) t += H[3 * a + b] * Vs[3 * b + 2];
        hv += t * U[3 * a + 2];
    }
    if (hv < 0)
        for (int a = 0; a < 3; a++) U[3 * a + 2] = -U[3 * a + 2];
    double VUt[9];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            VUt[3 * a + b] = 0;
            for (int k = 0; k < 3; k++) VUt[3 * a + b] += Vs[3 * a + k] * U[3 * b + k];
        }
    double d = det3(VUt) < 0 ? -1 : 1, D[3] = {1, 1, d}, R[9];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            R[3 * a + b] = 0;
            for (int k = 0; k < 3; k++) R[3 * a + b] += Vs[3 * a + k] * D[k] * U[3 * b + k];
        }
    double s = scale ? (sig[0] + sig[1] + d * sig[2]) / var : 1;
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++) T[4 * r + k] = s * R[3 * r + k];
        T[4 * r + 3] = yb[r] - s * (R[3 * r] * vb[0] + R[3 * r + 1] * vb[1] + R[3 * r + 2] * vb[2]);
    }
}

static void test_procrustes_vs_svd(void)
{
    enum { n = 40 };
    double worst[2] = {0, 0};
    for (int trial = 0; trial < 60; trial++) {
        const int scale = trial % 2;
        double v[3 * n], y[3 * n], c[n], R[9], ax[3] = {urand() - .5, urand() - .5, urand() - .5};
        axis_angle(ax, trial < 2 ? M_PI : 3.1 * urand(), R);
        double s = scale ? 0.5 + urand() : 1, t[3] = {urand() - .5, urand() - .5, urand() - .5};
        /* every 5th trial mirrors the targets: the best map is then a
         * reflection, which neither model may return */
        const int mirror = trial % 5 == 4;
        for (int i = 0; i < n; i++) {
            c[i] = 0.05 + urand();
            for (int a = 0; a < 3; a++) v[3 * i + a] = 2 * urand() - 1;
            for (int a = 0; a < 3; a++) {
                y[3 * i + a] = t[a] + 0.05 * (urand() - .5);
                for (int b = 0; b < 3; b++) y[3 * i + a] += s * R[3 * a + b] * v[3 * i + b];
            }
            if (mirror) y[3 * i] = -y[3 * i];
        }
        double P[16] = {0}, Bm[12] = {0}, T[12], Tref[12], Lp[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
        for (int i = 0; i < n; i++) {
            double vh[4] = {v[3 * i], v[3 * i + 1], v[3 * i + 2], 1};
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) P[4 * a + b] += c[i] * vh[a] * vh[b];
            for (int r = 0; r < 3; r++)
                for (int b = 0; b < 4; b++) Bm[4 * r + b] += c[i] * y[3 * i + r] * vh[b];
        }
        df__dc_bone_procrustes(P, Bm, scale, Lp, T);
        ref_procrustes(n, v, y, c, scale, Tref);
        double e = 0;
        for (int q = 0; q < 12; q++) e = fmax(e, fabs(T[q] - Tref[q]));
        worst[scale] = fmax(worst[scale], e);
        DF_CHECK_MSG(e < 1e-9, "trial %d (%s%s): max |T - SVD reference| %g", trial,
                     scale ? "trs" : "rigid", mirror ? ", mirrored" : "", e);
        double L[9] = {T[0], T[1], T[2], T[4], T[5], T[6], T[8], T[9], T[10]};
        DF_CHECK_MSG(det3(L) > 0, "trial %d: det %g", trial, det3(L));
    }
    fprintf(stderr, "procrustes: max deviation from the SVD solve %.2g (rigid), %.2g (trs)\n",
            worst[0], worst[1]);
}

/* A tube along y driven by `bones` bones with hat weights; each bone's
 * transform per frame is s R + t with random R, t and s = 1 (scale_amp 0)
 * or s in [1 - scale_amp, 1 + scale_amp]. */
typedef struct seq {
    int64_t F, N, T;
    float *frames, *rest;
    uint32_t *tris;
} seq_t;

static void make_tube(seq_t *s, int rings, int seg, int bones, int64_t F, double ang_max,
                      double scale_amp)
{
    s->F = F;
    s->N = (int64_t)rings * seg;
    s->T = (int64_t)(rings - 1) * seg * 2;
    s->frames = malloc(sizeof(float) * F * s->N * 3);
    s->tris = malloc(sizeof(uint32_t) * s->T * 3);
    s->rest = malloc(sizeof(float) * s->N * 3);
    double *W = calloc(s->N * bones, sizeof(double));
    for (int r = 0; r < rings; r++)
        for (int k = 0; k < seg; k++) {
            int64_t i = (int64_t)r * seg + k;
            double a = 2 * M_PI * k / seg, y = 2.0 * r / (rings - 1), tot = 0;
            s->rest[3 * i] = (float)(0.3 * cos(a));
            s->rest[3 * i + 1] = (float)y;
            s->rest[3 * i + 2] = (float)(0.3 * sin(a));
            for (int j = 0; j < bones; j++)
                tot += W[i * bones + j] = fmax(0, 1 - fabs(y - 2.0 * (j + 0.5) / bones) / (1.5 / bones));
            for (int j = 0; j < bones; j++) W[i * bones + j] /= tot;
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
            axis_angle(ax, p == 0 ? 0 : ang_max * urand(), R);
            double sc = p == 0 ? 1 : 1 + scale_amp * (2 * urand() - 1);
            for (int r = 0; r < 3; r++) {
                for (int c = 0; c < 3; c++) T[j * 12 + 4 * r + c] = sc * R[3 * r + c];
                T[j * 12 + 4 * r + 3] = p == 0 ? 0 : 0.4 * (urand() - 0.5);
            }
        }
        for (int64_t i = 0; i < s->N; i++) {
            const float *v = s->rest + 3 * i;
            for (int r = 0; r < 3; r++) {
                double acc = 0;
                for (int j = 0; j < bones; j++) {
                    double w = W[i * bones + j];
                    if (w == 0) continue;
                    const double *m = T + j * 12 + 4 * r;
                    acc += w * (m[0] * v[0] + m[1] * v[1] + m[2] * v[2] + m[3]);
                }
                s->frames[(p * s->N + i) * 3 + r] = (float)acc;
            }
        }
    }
    free(T);
    free(W);
}

static void free_seq(seq_t *s)
{
    free(s->frames); free(s->tris); free(s->rest);
    memset(s, 0, sizeof *s);
}

static double fit_erms(const seq_t *s, const df_decompose_result_t *r)
{
    float *ap = malloc(sizeof(float) * s->F * s->N * 3);
    df_decompose_reconstruct(r, ap);
    df_decompose_metrics_t m;
    df_error_t err = {0};
    DF_CHECK(df_decompose_metrics(s->F, s->N, s->frames, ap, s->T, s->tris, 0, &m, &err) == DF_OK);
    free(ap);
    return m.erms / m.diag;
}

/* Largest |LᵀL - s² I| over bones and frames, s² = tr(LᵀL)/3 (scaled
 * rotations), or with s = 1 (rotations); and the smallest det. */
static void linear_parts(const df_decompose_result_t *r, int unit, double *dev, double *min_det)
{
    *dev = 0;
    *min_det = INFINITY;
    for (int64_t q = 0; q < r->n_frames * r->n_bones; q++) {
        const float *m = r->matrices + 12 * q;
        double L[9] = {m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]}, G[9], tr = 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                G[3 * a + b] = 0;
                for (int k = 0; k < 3; k++) G[3 * a + b] += L[3 * k + a] * L[3 * k + b];
            }
        for (int a = 0; a < 3; a++) tr += G[4 * a];
        double s2 = unit ? 1 : tr / 3;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) *dev = fmax(*dev, fabs(G[3 * a + b] - (a == b) * s2) / s2);
        *min_det = fmin(*min_det, det3(L));
    }
}

static df_decompose_result_t *fit(const seq_t *s, int bones, int K, int transforms, int iters)
{
    df_decompose_input_t in = {.n_frames = s->F, .n_vertices = s->N, .frames = s->frames,
                               .n_triangles = s->T, .triangles = s->tris, .rest = s->rest};
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    o.n_bones = bones;
    o.max_influences = K;
    o.max_iterations = iters;
    o.tol = 1e-5;
    o.transforms = transforms;
    df_decompose_result_t *r = NULL;
    df_error_t err = {0};
    int rc = df_decompose_fit(&in, &o, NULL, &r, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    return r;
}

static void test_rigid_recovers_rigid_rig(void)
{
    DF_CHECK(df_decompose_transforms_parse("rigid") == DF_DECOMPOSE_RIGID);
    DF_CHECK(df_decompose_transforms_parse("trs") == DF_DECOMPOSE_TRS);
    DF_CHECK(df_decompose_transforms_parse("affine") == DF_DECOMPOSE_AFFINE);
    DF_CHECK(df_decompose_transforms_parse("shear") == -1);
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    DF_CHECK(o.transforms == DF_DECOMPOSE_RIGID); /* the default is a skeleton */
    seq_t s;
    make_tube(&s, 48, 16, 6, 24, 0.9, 0);
    df_decompose_result_t *r = fit(&s, 6, 4, DF_DECOMPOSE_RIGID, 100);
    if (r) {
        double e = fit_erms(&s, r), dev, mdet;
        linear_parts(r, 1, &dev, &mdet);
        fprintf(stderr, "rigid rig, rigid fit: ERMS %.3g of diag after %d iterations; "
                        "max |LᵀL - I| %.2g, min det %.6f\n", e, r->stats.iterations, dev, mdet);
        DF_CHECK(r->transforms == DF_DECOMPOSE_RIGID);
        DF_CHECK_MSG(e < 2e-5, "ERMS %g of the diagonal", e);
        DF_CHECK_MSG(dev < 1e-5 && fabs(mdet - 1) < 1e-5, "linear parts not rotations: %g, det %g",
                     dev, mdet);
        for (int it = 1; it <= r->stats.iterations; it++)
            DF_CHECK(r->stats.erms_history[it] <= r->stats.erms_history[it - 1] * (1 + 1e-9) + 1e-12);
    }
    df_decompose_result_free(&r);
    free_seq(&s);
}

/* Bones that scale uniformly: trs recovers them; rigid cannot, and every
 * trs linear part is a positive multiple of a rotation. */
static void test_trs_recovers_scaled_rig(void)
{
    seq_t s;
    make_tube(&s, 40, 12, 4, 16, 0.7, 0.2);
    df_decompose_result_t *rt = fit(&s, 4, 4, DF_DECOMPOSE_TRS, 100);
    df_decompose_result_t *rr = fit(&s, 4, 4, DF_DECOMPOSE_RIGID, 100);
    if (rt && rr) {
        double et = fit_erms(&s, rt), er = fit_erms(&s, rr), dev, mdet;
        linear_parts(rt, 0, &dev, &mdet);
        fprintf(stderr, "scaled rig: trs ERMS %.3g, rigid %.3g of diag; trs max |LᵀL/s² - I| %.2g, "
                        "min det %.4f\n", et, er, dev, mdet);
        DF_CHECK_MSG(et < 2e-5, "trs ERMS %g", et);
        DF_CHECK_MSG(er > 10 * et, "rigid %g should not fit scaling bones like trs %g", er, et);
        DF_CHECK(dev < 1e-5 && mdet > 0);
    }
    df_decompose_result_free(&rt);
    df_decompose_result_free(&rr);
    free_seq(&s);
}

/* One affine bone with shear (and a reflection in one frame): the fit is
 * exact, and its normals are those of the fitted surface (recomputed from
 * the positions), not the linear part applied to the rest normal. */
static void test_normals_inverse_transpose(void)
{
    seq_t s;
    make_tube(&s, 12, 10, 1, 2, 0, 0);
    const int64_t F = 5, N = s.N;
    float *fr = malloc(sizeof(float) * F * N * 3);
    double A[5][9];
    for (int p = 0; p < F; p++) {
        double base[9] = {1, 0.6 * p / F, 0, 0.1 * p, 1 + 0.3 * p, -0.4 * p / F, 0.2, 0, 0.5 + 0.2 * p};
        memcpy(A[p], base, sizeof base);
        if (p == 0) memcpy(A[p], (double[9]){1, 0, 0, 0, 1, 0, 0, 0, 1}, sizeof base);
        if (p == 3) for (int a = 0; a < 3; a++) A[p][a] = -A[p][a]; /* mirror x */
        for (int64_t i = 0; i < N; i++)
            for (int r = 0; r < 3; r++) {
                const float *v = s.rest + 3 * i;
                fr[(p * N + i) * 3 + r] = (float)(A[p][3 * r] * v[0] + A[p][3 * r + 1] * v[1] +
                                                  A[p][3 * r + 2] * v[2] + 0.1 * r);
            }
    }
    free(s.frames);
    s.frames = fr;
    s.F = F;
    df_decompose_result_t *r = fit(&s, 1, 1, DF_DECOMPOSE_AFFINE, 3);
    if (r) {
        float *rn = malloc(sizeof(float) * N * 3), *fn = malloc(sizeof(float) * F * N * 3);
        float *ref = malloc(sizeof(float) * N * 3);
        df_decompose_vertex_normals(N, s.rest, s.T, s.tris, rn);
        df_decompose_reconstruct_normals(r, rn, fn);
        double worst = 0, worst_lin = 0;
        for (int64_t p = 0; p < F; p++) {
            df_decompose_vertex_normals(N, s.frames + p * N * 3, s.T, s.tris, ref);
            for (int64_t i = 0; i < N; i++) {
                const float *a = fn + (p * N + i) * 3, *b = ref + 3 * i, *n0 = rn + 3 * i;
                double d = a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
                worst = fmax(worst, acos(fmin(1, d)));
                double l[3], ll = 0; /* the linear part applied to the normal */
                for (int q = 0; q < 3; q++) {
                    l[q] = A[p][3 * q] * n0[0] + A[p][3 * q + 1] * n0[1] + A[p][3 * q + 2] * n0[2];
                    ll += l[q] * l[q];
                }
                double dl = (l[0] * b[0] + l[1] * b[1] + l[2] * b[2]) / sqrt(ll);
                worst_lin = fmax(worst_lin, acos(fmax(-1, fmin(1, dl))));
            }
        }
        fprintf(stderr, "affine normals: max angle to recomputed normals %.3g rad "
                        "(linear part instead: %.3g rad)\n", worst, worst_lin);
        /* the reference is recomputed from float32 frames: at the open
         * ends a vertex normal sums two thin triangles, 3.5e-4 rad of
         * rounding there (frame 0, identity map, included) */
        DF_CHECK_MSG(worst < 2e-3, "normals %g rad off", worst);
        DF_CHECK(worst_lin > 0.1); /* the case tells the two apart */
        free(rn); free(fn); free(ref);
    }
    df_decompose_result_free(&r);
    free_seq(&s);
}

/* The rigged kind's skinned normals of the exported model are ours for
 * every transform model: for rigid bones the normal matrix is the rotation
 * itself (Σ w R n, normalised), for trs and affine bones the served path
 * blends the same cof(L)/|det L|^(1/3). */
static void normals_match_served(int kind)
{
    seq_t s;
    make_tube(&s, 24, 10, 4, 8, 0.8, kind == DF_DECOMPOSE_RIGID ? 0 : 0.2);
    df_decompose_result_t *r = fit(&s, 4, 3, kind, 5);
    char path[1200];
    snprintf(path, sizeof path, "%s/decompose_%s_normals.safetensors", dftest_out_dir(),
             df_decompose_transforms_name(kind));
    df_error_t err = {0};
    df_model_t *m = NULL;
    if (r && df_decompose_write_model(r, s.T, s.tris, NULL, "fit", path, &err) == DF_OK)
        DF_CHECK_MSG(df_model_open(path, "rigged", NULL, NULL, &m, &err) == DF_OK, "%s", err.msg);
    if (m) {
        const int64_t N = s.N;
        float *rn = malloc(sizeof(float) * N * 3), *fn = malloc(sizeof(float) * s.F * N * 3);
        float *pos = malloc(sizeof(float) * N * 3), *nrm = malloc(sizeof(float) * N * 3);
        df_decompose_vertex_normals(N, s.rest, s.T, s.tris, rn);
        df_decompose_reconstruct_normals(r, rn, fn);
        int im = df_model_find_input(m, "joint_matrices");
        int op = df_model_find_output(m, "positions"), on = df_model_find_output(m, "normals");
        DF_CHECK(im >= 0 && op >= 0 && on >= 0);
        df_scratch_t *sc = df_scratch_new();
        double worst = 0;
        for (int64_t p = 0; p < s.F && im >= 0 && op >= 0 && on >= 0; p++) {
            const float *one[1] = {r->matrices + p * r->n_bones * 12};
            float *dp[1] = {pos}, *dn[1] = {nrm};
            df_batch_t b = {.n = 1};
            b.in[im] = one;
            b.out[op] = dp;
            b.out[on] = dn;
            DF_CHECK(df_model_evaluate(m, &b, sc, &err) == DF_OK);
            for (int64_t q = 0; q < N * 3; q++) worst = fmax(worst, fabs(nrm[q] - fn[p * N * 3 + q]));
        }
        double dev, mdet;
        linear_parts(r, 0, &dev, &mdet);
        fprintf(stderr, "%s normals: max |served - ours| %.3g; linear parts max |LᵀL/s² - I| %.2g\n",
                df_decompose_transforms_name(kind), worst, dev);
        DF_CHECK(worst < 1e-5);
        /* affine: the served path's normal matrices are exercised */
        if (kind == DF_DECOMPOSE_AFFINE) DF_CHECK_MSG(dev > 1e-3, "affine bones %g from similarities", dev);
        df_scratch_free(&sc);
        free(rn); free(fn); free(pos); free(nrm);
        df_model_unref(&m);
    }
    df_decompose_result_free(&r);
    free_seq(&s);
}

static void test_normals_match_served(void)
{
    normals_match_served(DF_DECOMPOSE_RIGID);
    normals_match_served(DF_DECOMPOSE_TRS);
    normals_match_served(DF_DECOMPOSE_AFFINE);
}

int main(void)
{
    DF_CHECK(df_kind_find("rigged") == &df_kind_rigged);
    DF_RUN(test_procrustes_vs_svd);
    DF_RUN(test_rigid_recovers_rigid_rig);
    DF_RUN(test_trs_recovers_scaled_rig);
    DF_RUN(test_normals_inverse_transpose);
    DF_RUN(test_normals_match_served);
    return dftest_exit();
}

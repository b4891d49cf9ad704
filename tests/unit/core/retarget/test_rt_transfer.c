/* test_rt_transfer.c — blendshapes onto another topology
 * (core/retarget/rt_transfer.c) against references computed here:
 *  - the landmark warp interpolates its landmarks and reproduces an affine
 *    map exactly (value and Jacobian); coincident or coplanar landmarks are
 *    refused;
 *  - closest points are no farther than any vertex or any point of a dense
 *    barycentric sampling of every triangle; a mesh without triangles is
 *    refused;
 *  - on a curved sheet remeshed at another resolution: a displacement field
 *    affine in position is carried exactly by expression cloning (no local
 *    frames) and deformation transfer reproduces a uniform stretch's
 *    gradient; the naive copy equals a brute-force nearest-vertex copy, the
 *    naive point copy interpolates at a point no farther than a dense
 *    sampling of every source triangle; a target turned by 90 degrees and
 *    moved gets, with the alignment, the turned shapes of the target in
 *    the source's frame (every method), one in the source's frame is left
 *    as it is;
 *  - the correspondence's refinement (sliding semilandmarks) on a bumpy
 *    sheet mapped onto a remeshed copy whose true correspondence is known:
 *    with landmarks snapped to target vertices it brings the error down to
 *    under 0.3 (an affine map) and 0.5 (the same with sines added) of the
 *    landmark warp's, and with exact landmarks on an affine map it keeps
 *    the exact answer;
 *  - the local frames' modes on a target that is the source under a
 *    general affine map: `warp` gives A d, `similarity` cbrt(det A) R d,
 *    `off` d, and the normals' frames are not A d.
 */
#include "dftest.h"
#include "retarget/retarget.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

/* a curved sheet z = 0.1 (x^2 - y^2) over [-1,1]^2 as an n x n grid */
static void sheet(int n, float *P, uint32_t *T)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = -1 + 2.0 * i / (n - 1), y = -1 + 2.0 * j / (n - 1);
            float *p = P + 3 * (i * n + j);
            p[0] = (float)x, p[1] = (float)y, p[2] = (float)(0.1 * (x * x - y * y));
        }
    int t = 0;
    for (int i = 0; i + 1 < n; i++)
        for (int j = 0; j + 1 < n; j++) {
            uint32_t a = (uint32_t)(i * n + j), b = a + 1, c = a + (uint32_t)n, d = c + 1;
            uint32_t f[6] = {a, c, b, b, c, d};
            memcpy(T + 6 * t++, f, sizeof f);
        }
}

static void test_rbf(void)
{
    enum { L = 20 };
    float s[3 * L], d[3 * L];
    double A[9] = {1.2, 0.1, -0.3, 0.05, 0.9, 0.2, 0.1, -0.1, 1.1}, b[3] = {0.5, -2, 3};
    for (int i = 0; i < 3 * L; i++) s[i] = (float)(4 * urand() - 2);
    for (int i = 0; i < L; i++)
        for (int r = 0; r < 3; r++)
            d[3 * i + r] = (float)(A[3 * r] * s[3 * i] + A[3 * r + 1] * s[3 * i + 1] +
                                   A[3 * r + 2] * s[3 * i + 2] + b[r]);
    double coef[3 * (L + 4)];
    df_error_t err = {0};
    DF_CHECK_MSG(df__rt_rbf_fit(s, d, L, coef, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 50; k++) {
        double x[3] = {4 * urand() - 2, 4 * urand() - 2, 4 * urand() - 2}, y[3], J[9];
        df__rt_rbf_eval(s, L, coef, x, y, J);
        for (int r = 0; r < 3; r++) {
            double want = A[3 * r] * x[0] + A[3 * r + 1] * x[1] + A[3 * r + 2] * x[2] + b[r];
            DF_CHECK_NEAR(y[r], want, 1e-5);
            for (int c = 0; c < 3; c++) DF_CHECK_NEAR(J[3 * r + c], A[3 * r + c], 1e-5);
        }
    }
    /* a non-affine target: the landmarks themselves are interpolated */
    for (int i = 0; i < 3 * L; i++) d[i] += (float)(0.3 * sin(5.0 * s[i]));
    DF_CHECK(df__rt_rbf_fit(s, d, L, coef, &err) == 0);
    for (int i = 0; i < L; i++) {
        double x[3] = {s[3 * i], s[3 * i + 1], s[3 * i + 2]}, y[3];
        df__rt_rbf_eval(s, L, coef, x, y, NULL);
        for (int r = 0; r < 3; r++) DF_CHECK_NEAR(y[r], d[3 * i + r], 1e-4);
    }
    /* its Jacobian against central differences */
    for (int k = 0; k < 20; k++) {
        double x[3] = {3 * urand() - 1.5, 3 * urand() - 1.5, 3 * urand() - 1.5}, y[3], J[9];
        df__rt_rbf_eval(s, L, coef, x, y, J);
        for (int c = 0; c < 3; c++) {
            double xp[3] = {x[0], x[1], x[2]}, xm[3] = {x[0], x[1], x[2]}, yp[3], ym[3];
            xp[c] += 1e-5, xm[c] -= 1e-5;
            df__rt_rbf_eval(s, L, coef, xp, yp, NULL);
            df__rt_rbf_eval(s, L, coef, xm, ym, NULL);
            for (int r = 0; r < 3; r++) DF_CHECK_NEAR(J[3 * r + c], (yp[r] - ym[r]) / 2e-5, 1e-4);
        }
    }
    /* refused: a duplicated landmark, coplanar landmarks */
    float s2[3 * L];
    memcpy(s2, s, sizeof s2);
    memcpy(s2 + 3 * 9, s2 + 3 * 4, 3 * sizeof(float));
    DF_CHECK(df__rt_rbf_fit(s2, d, L, coef, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "source landmarks 4 and 9 coincide"), "%s", err.msg);
    for (int i = 0; i < L; i++) s2[3 * i + 2] = 0.0f, s2[3 * i] = (float)i, s2[3 * i + 1] = (float)(i * i % 7);
    DF_CHECK(df__rt_rbf_fit(s2, d, L, coef, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "coplanar"), "%s", err.msg);
}

static void test_closest(void)
{
    enum { N = 9 };
    float P[3 * N * N];
    uint32_t T[6 * (N - 1) * (N - 1)];
    sheet(N, P, T);
    int64_t nt = 2 * (N - 1) * (N - 1);
    double V[3 * N * N];
    for (int i = 0; i < 3 * N * N; i++) V[i] = P[i];
    enum { Q = 60 };
    double q[3 * Q];
    for (int i = 0; i < Q; i++) {
        q[3 * i] = 2.4 * urand() - 1.2, q[3 * i + 1] = 2.4 * urand() - 1.2;
        q[3 * i + 2] = 0.6 * urand() - 0.3;
    }
    int32_t tri[Q];
    float bary[3 * Q];
    df_error_t err = {0};
    DF_CHECK(df__rt_closest(V, N * N, T, nt, q, NULL, Q, tri, bary, &err) == 0);
    DF_CHECK(df__rt_closest(V, N * N, T, 0, q, NULL, Q, tri, bary, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "no triangles"), "%s", err.msg);
    DF_CHECK(df__rt_closest(V, N * N, T, nt, q, NULL, Q, tri, bary, &err) == 0);
    for (int i = 0; i < Q; i++) {
        const uint32_t *f = T + 3 * tri[i];
        double x[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            DF_CHECK(bary[3 * i + k] >= -1e-6f);
            for (int d = 0; d < 3; d++) x[d] += bary[3 * i + k] * V[3 * f[k] + d];
        }
        double dq = 0;
        for (int d = 0; d < 3; d++) dq += (x[d] - q[3 * i + d]) * (x[d] - q[3 * i + d]);
        double best = INFINITY; /* dense sampling of every triangle */
        for (int64_t t = 0; t < nt; t++)
            for (int a = 0; a <= 20; a++)
                for (int b = 0; a + b <= 20; b++) {
                    double u = a / 20.0, v = b / 20.0, w = 1 - u - v, y[3], e = 0;
                    for (int d = 0; d < 3; d++)
                        y[d] = u * V[3 * T[3 * t] + d] + v * V[3 * T[3 * t + 1] + d] +
                               w * V[3 * T[3 * t + 2] + d];
                    for (int d = 0; d < 3; d++) e += (y[d] - q[3 * i + d]) * (y[d] - q[3 * i + d]);
                    if (e < best) best = e;
                }
        DF_CHECK_MSG(sqrt(dq) <= sqrt(best) + 1e-9, "query %d: %g vs sampled %g", i, sqrt(dq),
                     sqrt(best));
    }
}

/* source: 17 x 17 sheet; target: 12 x 12 sheet of the same surface moved
 * by a translation; landmarks: the corners, centre and edge midpoints of
 * both (the same surface points) */
enum { NS = 17, NT = 12, M = 2 };
static float sp[3 * NS * NS], tp[3 * NT * NT], sd[M * 3 * NS * NS];
static uint32_t st[6 * (NS - 1) * (NS - 1)], tt[6 * (NT - 1) * (NT - 1)];
static const double shift[3] = {0.3, -0.2, 0.5};

static void field(int j, const float *p, double *o) /* shape j's displacement */
{
    if (j == 0) { /* affine in position */
        o[0] = 0.05 * p[0] + 0.02 * p[1] + 0.01;
        o[1] = -0.03 * p[0] + 0.04 * p[2];
        o[2] = 0.06 * p[1] - 0.02;
    } else { /* a uniform stretch of x by 10 % */
        o[0] = 0.1 * p[0], o[1] = 0, o[2] = 0;
    }
}

static void setup_sheets(df__rt_mesh_t *s, df__rt_mesh_t *t, int32_t *ls, int32_t *lt)
{
    sheet(NS, sp, st);
    sheet(NT, tp, tt);
    for (int v = 0; v < NT * NT; v++)
        for (int d = 0; d < 3; d++) tp[3 * v + d] += (float)shift[d];
    for (int j = 0; j < M; j++)
        for (int v = 0; v < NS * NS; v++) {
            double o[3];
            field(j, sp + 3 * v, o);
            for (int d = 0; d < 3; d++) sd[(j * NS * NS + v) * 3 + d] = (float)o[d];
        }
    /* the four corners coincide on both grids */
    int sidx[4] = {0, NS - 1, NS * (NS - 1), NS * NS - 1};
    int tidx[4] = {0, NT - 1, NT * (NT - 1), NT * NT - 1};
    for (int i = 0; i < 4; i++) ls[i] = sidx[i], lt[i] = tidx[i];
    s->nv = NS * NS, s->nt = 2 * (NS - 1) * (NS - 1), s->M = M, s->pos = sp, s->tri = st, s->deltas = sd;
    t->nv = NT * NT, t->nt = 2 * (NT - 1) * (NT - 1), t->M = 0, t->pos = tp, t->tri = tt, t->deltas = NULL;
}

static void test_transfer(void)
{
    df__rt_mesh_t s, t;
    int32_t ls[8], lt[8];
    setup_sheets(&s, &t, ls, lt);
    /* the corners alone are coplanar (the warp's affine part would be
     * undetermined): four interior target vertices join them, with their
     * exact points on the source sheet (the vertex minus the shift) added
     * to the source as extra vertices that no triangle uses */
    int nl = 4;
    int tv[4] = {5 * NT + 5, 2 * NT + 8, 9 * NT + 3, 7 * NT + 10};
    static float sp2[3 * (NS * NS + 4)], sd2[M * 3 * (NS * NS + 4)];
    memcpy(sp2, sp, sizeof sp);
    for (int k = 0; k < 4; k++) {
        for (int d = 0; d < 3; d++) sp2[3 * (NS * NS + k) + d] = (float)(tp[3 * tv[k] + d] - shift[d]);
        ls[nl + k] = NS * NS + k;
        lt[nl + k] = tv[k];
    }
    for (int j = 0; j < M; j++)
        for (int v = 0; v < NS * NS + 4; v++) {
            double o[3];
            field(j, sp2 + 3 * v, o);
            for (int d = 0; d < 3; d++) sd2[(j * (NS * NS + 4) + v) * 3 + d] = (float)o[d];
        }
    s.nv = NS * NS + 4, s.pos = sp2, s.deltas = sd2;
    nl = 8;
    float *out = malloc(sizeof(float) * (size_t)(M * 3 * NT * NT));
    df_error_t err = {0};
    /* expression cloning without local frames: the warp is the translation,
     * so each target vertex's source point is itself minus the shift, and a
     * field affine in position is interpolated exactly */
    DF_CHECK_MSG(df__rt_transfer(&s, &t, ls, lt, nl, DF_RT_CLONE, 0, 0, DF_RT_ALIGN_AUTO, NULL, out, NULL, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    double worst = 0;
    for (int v = 0; v < NT * NT; v++) {
        float p[3];
        for (int d = 0; d < 3; d++) p[d] = (float)(tp[3 * v + d] - shift[d]);
        double o[3];
        field(0, p, o);
        for (int d = 0; d < 3; d++) worst = fmax(worst, fabs(out[3 * v + d] - o[d]));
    }
    /* the sheet is curved: a target vertex lies off the source's flat
     * triangles by up to the chord error, where the field differs by its
     * gradient (0.06) times that */
    DF_CHECK_MSG(worst < 2e-4, "clone, affine field: max error %g", worst);
    /* with local frames the warp is a translation (Jacobian I) and the
     * normals, both taken over the target's 1-rings (the source sampled at
     * the target's corresponding points), agree to the chord error of the
     * finer source: 2.2e-4 here (normals at the source's own resolution
     * against the target's: 5.9e-4) */
    DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, DF_RT_CLONE, 1, 0, DF_RT_ALIGN_AUTO, NULL, out, NULL, NULL, NULL, NULL, &err) == 0);
    worst = 0;
    for (int v = 0; v < NT * NT; v++) {
        float p[3];
        for (int d = 0; d < 3; d++) p[d] = (float)(tp[3 * v + d] - shift[d]);
        double o[3];
        field(0, p, o);
        for (int d = 0; d < 3; d++) worst = fmax(worst, fabs(out[3 * v + d] - o[d]));
    }
    DF_CHECK_MSG(worst < 4e-4, "clone with local frames: max error %g", worst);
    /* the same target in other units (x 0.01, a target in metres from a source in
     * centimetres): the warp's local scale is 0.01 and the displacements scale with it,
     * as far from the 0.1..10 a folded warp is told by as the size ratio allows */
    {
        static float tp2[3 * NT * NT];
        for (int v = 0; v < 3 * NT * NT; v++) tp2[v] = 0.01f * tp[v];
        df__rt_mesh_t t2 = t;
        t2.pos = tp2;
        float *o2 = malloc(sizeof(float) * (size_t)(M * 3 * NT * NT));
        DF_CHECK_MSG(df__rt_transfer(&s, &t2, ls, lt, nl, DF_RT_CLONE, 1, 0, DF_RT_ALIGN_AUTO, NULL, o2, NULL, NULL, NULL,
                                     NULL, &err) == 0, "%s", err.msg);
        double w2 = 0;
        for (int v = 0; v < M * 3 * NT * NT; v++) w2 = fmax(w2, fabs(o2[v] - 0.01 * out[v]));
        DF_CHECK_MSG(w2 < 1e-6, "clone onto a target x 0.01: max error %g (of displacements ~1e-3)", w2);
        const double r = df__rt_size_ratio(tp, tp2, NT * NT);
        DF_CHECK_MSG(fabs(r - 0.01) < 1e-9, "size ratio %g", r);
        free(o2);
    }
    /* deformation transfer of the stretch: every target edge stretched by
     * 10 % in x (the solution is defined up to a translation); each target
     * triangle's gradient from the source over the same patch (its
     * corners' corresponding points): 3.7e-5 here (from the one source
     * triangle under its centroid: 1.1e-4) */
    DF_CHECK_MSG(df__rt_transfer(&s, &t, ls, lt, nl, DF_RT_DT, 1, 0, DF_RT_ALIGN_AUTO, NULL, out, NULL, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    worst = 0;
    const float *o1 = out + 3 * NT * NT;
    for (int f = 0; f < 2 * (NT - 1) * (NT - 1); f++)
        for (int k = 0; k < 3; k++) {
            uint32_t a = tt[3 * f + k], b = tt[3 * f + (k + 1) % 3];
            double want = 0.1 * (tp[3 * b] - tp[3 * a]);
            worst = fmax(worst, fabs((o1[3 * b] - o1[3 * a]) - want));
            for (int d = 1; d < 3; d++) worst = fmax(worst, fabs(o1[3 * b + d] - o1[3 * a + d]));
        }
    DF_CHECK_MSG(worst < 6e-5, "deformation transfer, stretch: max edge error %g", worst);
    /* naive: the nearest source vertex's displacement, brute force here */
    DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, DF_RT_NAIVE, 0, 0, DF_RT_ALIGN_AUTO, NULL, out, NULL, NULL, NULL, NULL, &err) == 0);
    int same = 1;
    for (int v = 0; v < NT * NT; v++) {
        double best = INFINITY;
        int bi = 0;
        for (int u = 0; u < (int)s.nv; u++) {
            double e = 0;
            for (int d = 0; d < 3; d++) e += (sp2[3 * u + d] - tp[3 * v + d]) * (sp2[3 * u + d] - tp[3 * v + d]);
            if (e < best) best = e, bi = u;
        }
        for (int d = 0; d < 3; d++) same &= out[3 * v + d] == sd2[3 * bi + d];
    }
    DF_CHECK(same);
    /* naive point copy: the displacement interpolated at the nearest point
     * of the source surface (no facing test), which is no farther than any
     * point of a dense sampling of every source triangle; the
     * correspondence it hands out is that point */
    {
        int32_t *ct = malloc(sizeof(int32_t) * NT * NT);
        float *cb = malloc(sizeof(float) * 3 * NT * NT);
        DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, DF_RT_NAIVE_POINT, 0, 0, DF_RT_ALIGN_AUTO, NULL, out, ct, cb, NULL,
                                 NULL, &err) == 0);
        double werr = 0, wfar = -INFINITY;
        for (int v = 0; v < NT * NT; v++) {
            const uint32_t *f = s.tri + 3 * ct[v];
            double x[3], e2 = 0, best = INFINITY;
            for (int d = 0; d < 3; d++) {
                x[d] = cb[3 * v] * sp2[3 * f[0] + d] + cb[3 * v + 1] * sp2[3 * f[1] + d] +
                       cb[3 * v + 2] * sp2[3 * f[2] + d];
                e2 += (x[d] - tp[3 * v + d]) * (x[d] - tp[3 * v + d]);
                for (int j = 0; j < M; j++) {
                    const float *dj = sd2 + (size_t)j * 3 * (NS * NS + 4);
                    double want = cb[3 * v] * dj[3 * f[0] + d] + cb[3 * v + 1] * dj[3 * f[1] + d] +
                                  cb[3 * v + 2] * dj[3 * f[2] + d];
                    werr = fmax(werr, fabs(out[(j * NT * NT + v) * 3 + d] - want));
                }
            }
            for (int64_t tr = 0; tr < s.nt; tr++)
                for (int a = 0; a <= 16; a++)
                    for (int b = 0; a + b <= 16; b++) {
                        const uint32_t *g = s.tri + 3 * tr;
                        double u = a / 16.0, w = b / 16.0, e = 0;
                        for (int d = 0; d < 3; d++) {
                            double p = (1 - u - w) * sp2[3 * g[0] + d] + u * sp2[3 * g[1] + d] +
                                       w * sp2[3 * g[2] + d];
                            e += (p - tp[3 * v + d]) * (p - tp[3 * v + d]);
                        }
                        best = fmin(best, e);
                    }
            wfar = fmax(wfar, sqrt(e2) - sqrt(best));
        }
        DF_CHECK_MSG(werr < 1e-6, "naive point copy: interpolation error %g", werr);
        DF_CHECK_MSG(wfar < 1e-6, "naive point copy: a point %g farther than the sampling's", wfar);
        free(ct), free(cb);
    }
    /* the target in another frame: turned by Q (90 degrees about an oblique
     * axis) and moved. With the alignment (auto: its landmarks turn by 90
     * degrees) every method's shapes are Q times those of the target as
     * given, moved into the source's frame (rigid: by the shift alone);
     * the target as given is left as it is (auto: no turn) */
    {
        static float tq[3 * NT * NT];
        const double ax[3] = {1 / 3.0, 2 / 3.0, 2 / 3.0}; /* 90 degrees: Q = a a' + [a]x */
        double Q[9];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) Q[3 * i + j] = ax[i] * ax[j];
        Q[1] -= ax[2], Q[2] += ax[1], Q[3] += ax[2], Q[5] -= ax[0], Q[6] -= ax[1], Q[7] += ax[0];
        for (int v = 0; v < NT * NT; v++)
            for (int a = 0; a < 3; a++)
                tq[3 * v + a] = (float)(Q[3 * a] * tp[3 * v] + Q[3 * a + 1] * tp[3 * v + 1] +
                                        Q[3 * a + 2] * tp[3 * v + 2] + (a == 0 ? 4.0 : a == 1 ? -1.0 : 2.0));
        df__rt_mesh_t tr = t;
        tr.pos = tq;
        const size_t n = (size_t)(M * 3 * NT * NT);
        float *o0 = malloc(sizeof(float) * n), *o1 = malloc(sizeof(float) * n), *o2 = malloc(sizeof(float) * n);
        const df__rt_transfer_t ms[4] = {DF_RT_NAIVE_POINT, DF_RT_CLONE, DF_RT_CLONE, DF_RT_DT};
        const int lf[4] = {0, 0, 1, 1};
        for (int k = 0; k < 4; k++) {
            double d0 = -1, d1 = -1, d2 = -1;
            DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, ms[k], lf[k], 0, DF_RT_ALIGN_RIGID, &d0, o0,
                                     NULL, NULL, NULL, NULL, &err) == 0);
            DF_CHECK(df__rt_transfer(&s, &tr, ls, lt, nl, ms[k], lf[k], 0, DF_RT_ALIGN_AUTO, &d1, o1,
                                     NULL, NULL, NULL, NULL, &err) == 0);
            double w = 0;
            for (size_t i = 0; i < n; i += 3)
                for (int a = 0; a < 3; a++)
                    w = fmax(w, fabs(o1[i + a] - (Q[3 * a] * o0[i] + Q[3 * a + 1] * o0[i + 1] +
                                                  Q[3 * a + 2] * o0[i + 2])));
            DF_CHECK_MSG(w < 1e-5, "method %d, target turned 90 degrees: shapes %g from Q x the "
                                   "aligned target's", k, w);
            DF_CHECK_MSG(fabs(d1 - 90.0) < 1e-3 && fabs(d0) < 1e-3, "turned %g and %g degrees", d1, d0);
            /* as given: auto leaves it, equal to no alignment */
            DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, ms[k], lf[k], 0, DF_RT_ALIGN_AUTO, &d2, o1,
                                     NULL, NULL, NULL, NULL, &err) == 0);
            DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, ms[k], lf[k], 0, DF_RT_ALIGN_NONE, NULL, o2,
                                     NULL, NULL, NULL, NULL, &err) == 0);
            DF_CHECK_MSG(d2 == 0.0 && !memcmp(o1, o2, sizeof(float) * n), "method %d: auto moved "
                         "a target in the source's frame", k);
        }
        free(o0), free(o1), free(o2);
    }
    /* refused: a landmark out of range */
    lt[2] = NT * NT + 5;
    DF_CHECK(df__rt_transfer(&s, &t, ls, lt, nl, DF_RT_CLONE, 1, 0, DF_RT_ALIGN_AUTO, NULL, out, NULL, NULL, NULL, NULL, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "landmark 2"), "%s", err.msg);
    free(out);
}

/* a bumpy sheet: the source surface and, mapped by a smooth map, the
 * target's (remeshed) */
static void bumpy(double x, double y, double *p)
{
    p[0] = x, p[1] = y;
    p[2] = 0.3 * exp(-((x - 0.2) * (x - 0.2) + (y + 0.1) * (y + 0.1)) / 0.12) +
           0.12 * sin(2.5 * x) * cos(1.7 * y);
}

/* an affine map, plus (bent != 0) sines of up to 2 % of the sheet's size */
static void tmap(const double *p, int bent, double *o)
{
    static const double A[9] = {1.1, 0.15, -0.1, -0.05, 0.95, 0.2, 0.1, -0.12, 1.05};
    for (int r = 0; r < 3; r++) o[r] = A[3 * r] * p[0] + A[3 * r + 1] * p[1] + A[3 * r + 2] * p[2];
    o[0] += 0.3, o[1] -= 0.2, o[2] += 0.1;
    if (bent) {
        o[0] += 0.0225 * sin(2.2 * p[1] + 0.3);
        o[1] += 0.02 * sin(1.9 * p[0] - 0.4);
        o[2] += 0.015 * sin(1.5 * (p[0] + p[1]));
    }
}

/* the mean and max distance from each target vertex's corresponding point
 * (on the source mesh) to its true one (on the smooth surface) */
static void corr_error(const df__rt_mesh_t *s, const double *truth, int64_t n, const int32_t *tri,
                       const float *bary, double *mean, double *mx)
{
    *mean = 0, *mx = 0;
    for (int64_t q = 0; q < n; q++) {
        const uint32_t *f = s->tri + 3 * tri[q];
        double e = 0;
        for (int d = 0; d < 3; d++) {
            double x = bary[3 * q] * s->pos[3 * f[0] + d] + bary[3 * q + 1] * s->pos[3 * f[1] + d] +
                       bary[3 * q + 2] * s->pos[3 * f[2] + d];
            e += (x - truth[3 * q + d]) * (x - truth[3 * q + d]);
        }
        *mean += sqrt(e) / (double)n, *mx = fmax(*mx, sqrt(e));
    }
}

/* The refinement on cases whose correspondence is known: the source a
 * 41 x 41 bumpy sheet, the target the same surface under a smooth map (an
 * affine one, then with sines added) remeshed as a jittered 27 x 27 grid
 * whose border stays the border; 12 landmarks snapped to the target vertex
 * nearest to their true image (as landmarks given as vertex indices are),
 * or (the affine map) exact. */
/* records the progress calls of a transfer */
typedef struct prog {
    char stage[64];
    double last;
    int n, stages, ok;
} prog_t;

static void on_progress(void *user, const char *stage, double frac)
{
    prog_t *p = user;
    if (p->n == 0) p->ok = 1;
    if (strcmp(stage, p->stage)) { /* a new stage starts at 0 after the last ended at 1 */
        if (frac != 0.0 || (p->n && p->last != 1.0)) p->ok = 0;
        snprintf(p->stage, sizeof p->stage, "%s", stage);
        p->stages++;
    } else if (!(frac >= p->last && frac <= 1.0)) {
        p->ok = 0;
    }
    p->last = frac;
    p->n++;
}

static void test_refine(void)
{
    enum { NS2 = 41, NT2 = 27, NL = 12 };
    static float sp2[3 * NS2 * NS2], tp2[3 * NT2 * NT2];
    static uint32_t st2[6 * (NS2 - 1) * (NS2 - 1)], tt2[6 * (NT2 - 1) * (NT2 - 1)];
    static double truth[3 * NT2 * NT2];
    static int32_t tri[NT2 * NT2], tri0[NT2 * NT2];
    static float bary[3 * NT2 * NT2], bary0[3 * NT2 * NT2];
    static const int gi[NL][2] = {{4, 4},   {4, 20},  {4, 36},  {20, 4},  {20, 20}, {20, 36},
                                  {36, 4},  {36, 20}, {36, 36}, {12, 12}, {28, 28}, {15, 24}};
    sheet(NS2, sp2, st2);
    sheet(NT2, tp2, tt2);
    for (int v = 0; v < NS2 * NS2; v++) {
        double p[3];
        bumpy(sp2[3 * v], sp2[3 * v + 1], p);
        for (int d = 0; d < 3; d++) sp2[3 * v + d] = (float)p[d];
    }
    df__rt_mesh_t s = {NS2 * NS2, 2 * (NS2 - 1) * (NS2 - 1), 0, sp2, st2, NULL};
    df__rt_mesh_t t = {NT2 * NT2, 2 * (NT2 - 1) * (NT2 - 1), 0, tp2, tt2, NULL};
    for (int c = 0; c < 3; c++) { /* affine snapped, bent snapped, affine exact */
        int bent = c == 1, exact = c == 2;
        rs = 0x9E3779B97F4A7C15ull;
        int32_t ls[NL], lt[NL];
        for (int k = 0; k < NL; k++) ls[k] = gi[k][0] * NS2 + gi[k][1];
        for (int i = 0; i < NT2; i++)
            for (int j = 0; j < NT2; j++) {
                int v = i * NT2 + j;
                double h = 2.0 / (NT2 - 1), x = -1 + h * i, y = -1 + h * j, p[3], o[3];
                if (i > 0 && i < NT2 - 1) x += 0.3 * h * (2 * urand() - 1);
                if (j > 0 && j < NT2 - 1) y += 0.3 * h * (2 * urand() - 1);
                for (int k = 0; k < NL && exact; k++) /* on a source landmark */
                    if (i == gi[k][0] * 2 / 3 && j == gi[k][1] * 2 / 3)
                        x = sp2[3 * ls[k]], y = sp2[3 * ls[k] + 1];
                bumpy(x, y, p);
                memcpy(truth + 3 * v, p, sizeof p);
                tmap(p, bent, o);
                for (int d = 0; d < 3; d++) tp2[3 * v + d] = (float)o[d];
            }
        for (int k = 0; k < NL; k++) { /* the target vertex nearest the true image */
            double p[3], o[3], best = INFINITY;
            for (int d = 0; d < 3; d++) p[d] = sp2[3 * ls[k] + d];
            tmap(p, bent, o);
            for (int v = 0; v < NT2 * NT2; v++) {
                double e = 0;
                for (int d = 0; d < 3; d++) e += (tp2[3 * v + d] - o[d]) * (tp2[3 * v + d] - o[d]);
                if (e < best) best = e, lt[k] = v;
            }
        }
        df_error_t err = {0};
        int rounds = -1;
        DF_CHECK_MSG(df__rt_correspond(&s, &t, ls, lt, NL, 0, tri0, bary0, &rounds, &err) == 0,
                     "%s", err.msg);
        DF_CHECK(rounds == 0);
        DF_CHECK_MSG(df__rt_correspond(&s, &t, ls, lt, NL, 5, tri, bary, &rounds, &err) == 0,
                     "%s", err.msg);
        DF_CHECK(rounds >= 1 && rounds <= 5);
        /* the transfer hands out the correspondence it used: this one */
        static int32_t trx[NT2 * NT2];
        static float brx[3 * NT2 * NT2];
        float none[1];
        int rx = -1;
        prog_t pr = {0};
        df__rt_progress_t pg = {on_progress, &pr};
        DF_CHECK_MSG(df__rt_transfer(&s, &t, ls, lt, NL, DF_RT_CLONE, 1, 5, DF_RT_ALIGN_AUTO, NULL, none, trx, brx, &rx,
                                     &pg, &err) == 0, "%s", err.msg);
        DF_CHECK(rx == rounds && !memcmp(trx, tri, sizeof trx) && !memcmp(brx, bary, sizeof brx));
        /* progress: the correspondence from 0 through each round to 1, then
         * cloning from 0 to 1, fractions never going back within a stage */
        DF_CHECK_MSG(pr.ok && pr.n == 4 + rounds && pr.stages == 2 && pr.last == 1.0 &&
                     !strcmp(pr.stage, "expression cloning"),
                     "progress: %d calls, %d stages, ok %d, last %g (%s)", pr.n, pr.stages, pr.ok,
                     pr.last, pr.stage);
        double m0, x0, m1, x1;
        corr_error(&s, truth, NT2 * NT2, tri0, bary0, &m0, &x0);
        corr_error(&s, truth, NT2 * NT2, tri, bary, &m1, &x1);
        if (exact) {
            /* the landmark warp is the map itself: what is left is the
             * source's chord error (2e-4 mean, 3e-3 max here), and the
             * rounds keep it (6e-4 / 3.5e-3) */
            DF_CHECK_MSG(m0 < 1e-3 && x0 < 8e-3, "exact: landmark warp %g / %g", m0, x0);
            DF_CHECK_MSG(m1 < 1.5e-3 && x1 < 1e-2, "exact: refined %g / %g", m1, x1);
        } else if (!bent) {
            /* snapped landmarks (up to half a target edge, 0.04, off):
             * 0.024 mean / 0.054 max with the warp through them, 0.003 /
             * 0.007 once they and the samples have slid */
            DF_CHECK_MSG(m1 < 0.3 * m0 && x1 < 0.4 * x0, "affine: %g / %g -> %g / %g", m0, x0, m1, x1);
        } else {
            /* 0.025 / 0.054 -> 0.007 / 0.023 */
            DF_CHECK_MSG(m1 < 0.5 * m0 && x1 < 0.7 * x0, "bent: %g / %g -> %g / %g", m0, x0, m1, x1);
        }
    }
}

/* the rotation nearest A (det A > 0) by Newton's iteration R <- (R + R^-T) / 2 */
static void polar3(const double A[9], double R[9])
{
    double Ri[9];
    memcpy(Ri, A, sizeof Ri);
    memcpy(R, A, sizeof Ri);
    for (int it = 0; it < 30; it++) {
        const double det = R[0] * (R[4] * R[8] - R[5] * R[7]) - R[1] * (R[3] * R[8] - R[5] * R[6]) +
                           R[2] * (R[3] * R[7] - R[4] * R[6]);
        /* R^-T = cofactor matrix / det */
        Ri[0] = (R[4] * R[8] - R[5] * R[7]) / det, Ri[1] = -(R[3] * R[8] - R[5] * R[6]) / det;
        Ri[2] = (R[3] * R[7] - R[4] * R[6]) / det, Ri[3] = -(R[1] * R[8] - R[2] * R[7]) / det;
        Ri[4] = (R[0] * R[8] - R[2] * R[6]) / det, Ri[5] = -(R[0] * R[7] - R[1] * R[6]) / det;
        Ri[6] = (R[1] * R[5] - R[2] * R[4]) / det, Ri[7] = -(R[0] * R[5] - R[2] * R[3]) / det;
        Ri[8] = (R[0] * R[4] - R[1] * R[3]) / det;
        for (int i = 0; i < 9; i++) R[i] = 0.5 * (R[i] + Ri[i]);
    }
}

/* The local frames' modes on a target that is the source under a general
 * affine map x -> A x + c (another size per axis, a turn, a shear): the
 * warp through landmarks reproduces it exactly, every target vertex's
 * point is its own source vertex, so `warp` must give A d, `similarity`
 * cbrt(det A) R d (R: A's polar rotation, by an independent 3x3 SVD-free
 * route: the rotation nearest A by Newton's iteration R <- (R + R^-T) / 2),
 * and `off` d, each to float rounding; `normals` differs from A d (it
 * turns and scales but cannot stretch per axis). */
static void test_frames_affine(void)
{
    enum { N = 13 };
    static float P[3 * N * N], Q[3 * N * N], Dl[3 * N * N], out[3 * N * N];
    static uint32_t T[6 * (N - 1) * (N - 1)];
    sheet(N, P, T);
    /* A = turn(30 deg about z) * diag(1.4, 0.7, 1.1) + shear */
    const double c30 = cos(M_PI / 6), s30 = sin(M_PI / 6);
    const double S[9] = {1.4, 0.25, 0, 0, 0.7, 0, 0.1, 0, 1.1};
    const double Rz[9] = {c30, -s30, 0, s30, c30, 0, 0, 0, 1};
    double A[9];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            A[3 * a + b] = Rz[3 * a] * S[b] + Rz[3 * a + 1] * S[3 + b] + Rz[3 * a + 2] * S[6 + b];
    const double c[3] = {0.4, -0.3, 0.2};
    for (int v = 0; v < N * N; v++) {
        const float *x = P + 3 * v;
        for (int d = 0; d < 3; d++) {
            Q[3 * v + d] = (float)(A[3 * d] * x[0] + A[3 * d + 1] * x[1] + A[3 * d + 2] * x[2] + c[d]);
            /* a displacement field varying over the sheet */
            Dl[3 * v + d] = (float)(0.05 * sin(2.0 * x[0] + d) + 0.03 * cos(3.0 * x[1] - d));
        }
    }
    /* Newton's iteration for the polar rotation of A */
    double R[9];
    polar3(A, R);
    const double detA = A[0] * (A[4] * A[8] - A[5] * A[7]) - A[1] * (A[3] * A[8] - A[5] * A[6]) +
                        A[2] * (A[3] * A[7] - A[4] * A[6]);
    const double sc = cbrt(detA);
    /* landmarks: corners, centre and edge midpoints (the sheet is curved:
     * they span 3D) */
    int32_t lm[9] = {0, N - 1, N * (N - 1), N * N - 1, (N / 2) * N + N / 2, N / 2, (N / 2) * N,
                     (N / 2) * N + N - 1, N * (N - 1) + N / 2};
    df__rt_mesh_t s = {N * N, 2 * (N - 1) * (N - 1), 1, P, T, Dl};
    df__rt_mesh_t t = {N * N, 2 * (N - 1) * (N - 1), 0, Q, T, NULL};
    df_error_t err = {0};
    const int modes[4] = {DF_RT_FRAMES_WARP, DF_RT_FRAMES_SIMILARITY, DF_RT_FRAMES_OFF,
                          DF_RT_FRAMES_NORMALS};
    double worst[4] = {0, 0, 0, 0}, mag = 0;
    for (int k = 0; k < 4; k++) {
        DF_CHECK_MSG(df__rt_transfer(&s, &t, lm, lm, 9, DF_RT_CLONE, modes[k], 0, DF_RT_ALIGN_NONE,
                                     NULL, out, NULL, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int v = 0; v < N * N; v++) {
            const float *d = Dl + 3 * v;
            for (int e = 0; e < 3; e++) {
                double want = k == 0 ? A[3 * e] * d[0] + A[3 * e + 1] * d[1] + A[3 * e + 2] * d[2]
                            : k == 1 ? sc * (R[3 * e] * d[0] + R[3 * e + 1] * d[1] + R[3 * e + 2] * d[2])
                            : k == 2 ? d[e]
                                     : A[3 * e] * d[0] + A[3 * e + 1] * d[1] + A[3 * e + 2] * d[2];
                worst[k] = fmax(worst[k], fabs(out[3 * v + e] - want));
                if (k == 0) mag = fmax(mag, fabs(want));
            }
        }
    }
    DF_CHECK_MSG(worst[0] < 1e-5, "warp: max error %g against A d", worst[0]);
    DF_CHECK_MSG(worst[1] < 1e-5, "similarity: max error %g against cbrt(det A) R d", worst[1]);
    DF_CHECK_MSG(worst[2] < 1e-6, "off: max error %g against d", worst[2]);
    /* the paper's frames cannot stretch per axis: far from A d */
    DF_CHECK_MSG(worst[3] > 0.1 * mag, "normals: %g from A d (displacements up to %g)", worst[3], mag);
}

/* The pieces' modes (df__rt_pieces_apply) on four pieces of a point set:
 * skin left bit for bit; still zero; rigid: a shape that is a rigid motion
 * of the piece kept (1e-5), one with noise replaced by the rigid motion
 * nearest it, against an independent route (the rotation nearest the
 * cross-covariance by Newton's polar iteration, the centroids' difference
 * for the translation), a zero shape kept zero; a piece on a line takes its
 * mean displacement; bad pieces and modes refused. */
static void test_pieces(void)
{
    enum { NP = 4, PER = 40, NV = NP * PER, MS = 3 };
    static float pos[3 * NV], D[MS * 3 * NV], D0[MS * 3 * NV];
    int32_t piece[NV];
    for (int v = 0; v < NV; v++) {
        piece[v] = (v * 7) % NP; /* pieces interleaved in the vertex order */
        for (int d = 0; d < 3; d++)
            pos[3 * v + d] = piece[v] == 3 ? (float)(0.5 + (d + 1) * 0.1 * v) /* a line */
                                           : (float)(2.0 * urand() - 1.0 + 5.0 * d);
    }
    /* shape 0: a rigid motion of every piece; shape 1: it plus noise; shape 2: zero */
    const double a = 0.4, ca = cos(a), sa = sin(a);
    const double Rm[9] = {ca, 0, sa, 0, 1, 0, -sa, 0, ca}, tm[3] = {0.3, -0.1, 0.2};
    for (int v = 0; v < NV; v++)
        for (int d = 0; d < 3; d++) {
            const float *x = pos + 3 * v;
            const double r = Rm[3 * d] * x[0] + Rm[3 * d + 1] * x[1] + Rm[3 * d + 2] * x[2] + tm[d] - x[d];
            D[3 * v + d] = (float)r;
            D[3 * NV + 3 * v + d] = (float)(r + 0.05 * (2.0 * urand() - 1.0));
            D[6 * NV + 3 * v + d] = 0.0f;
        }
    memcpy(D0, D, sizeof D);
    const uint8_t mode[NP] = {DF_RT_PIECE_SKIN, DF_RT_PIECE_STILL, DF_RT_PIECE_RIGID,
                              DF_RT_PIECE_RIGID};
    df_error_t err = {0};
    DF_CHECK_MSG(df__rt_pieces_apply(pos, NV, piece, NP, mode, MS, D, &err) == 0, "%s", err.msg);
    double e_skin = 0, e_still = 0, e_exact = 0, e_noisy = 0, e_zero = 0, e_line = 0, moved = 0;
    /* the reference for the noisy shape on piece 2 */
    double cx[3] = {0, 0, 0}, cy[3] = {0, 0, 0}, H[9] = {0}, Rr[9];
    int n2 = 0;
    for (int v = 0; v < NV; v++)
        if (piece[v] == 2) {
            n2++;
            for (int d = 0; d < 3; d++) {
                cx[d] += pos[3 * v + d];
                cy[d] += pos[3 * v + d] + D0[3 * NV + 3 * v + d];
            }
        }
    for (int d = 0; d < 3; d++) cx[d] /= n2, cy[d] /= n2;
    for (int v = 0; v < NV; v++)
        if (piece[v] == 2)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    H[3 * i + j] += (pos[3 * v + i] + D0[3 * NV + 3 * v + i] - cy[i]) *
                                    (pos[3 * v + j] - cx[j]);
    polar3(H, Rr);
    double mean_line[3] = {0, 0, 0};
    int n3 = 0;
    for (int v = 0; v < NV; v++)
        if (piece[v] == 3) {
            n3++;
            for (int d = 0; d < 3; d++) mean_line[d] += D0[3 * NV + 3 * v + d];
        }
    for (int d = 0; d < 3; d++) mean_line[d] /= n3;
    for (int v = 0; v < NV; v++)
        for (int d = 0; d < 3; d++) {
            const float *x = pos + 3 * v;
            const size_t i0 = (size_t)(3 * v + d), i1 = 3 * NV + i0, i2 = 6 * NV + i0;
            switch (piece[v]) {
            case 0:
                for (int s = 0; s < MS; s++)
                    e_skin = fmax(e_skin, fabs(D[s * 3 * NV + i0] - D0[s * 3 * NV + i0]));
                break;
            case 1:
                for (int s = 0; s < MS; s++) e_still = fmax(e_still, fabs(D[s * 3 * NV + i0]));
                break;
            case 2: {
                e_exact = fmax(e_exact, fabs(D[i0] - D0[i0]));
                const double want = Rr[3 * d] * (x[0] - cx[0]) + Rr[3 * d + 1] * (x[1] - cx[1]) +
                                    Rr[3 * d + 2] * (x[2] - cx[2]) + cy[d] - x[d];
                e_noisy = fmax(e_noisy, fabs(D[i1] - want));
                moved = fmax(moved, fabs(D[i1] - D0[i1]));
                e_zero = fmax(e_zero, fabs(D[i2]));
                break;
            }
            default:
                e_line = fmax(e_line, fabs(D[i1] - mean_line[d]));
            }
        }
    DF_CHECK_MSG(e_skin == 0.0, "skin changed by %g", e_skin);
    DF_CHECK_MSG(e_still == 0.0, "still moves by %g", e_still);
    DF_CHECK_MSG(e_exact < 1e-5, "an exactly rigid shape changed by %g", e_exact);
    DF_CHECK_MSG(e_noisy < 1e-5, "the noisy shape %g from the nearest rigid motion", e_noisy);
    DF_CHECK_MSG(moved > 0.01, "the noise not taken out (%g)", moved);
    DF_CHECK_MSG(e_zero < 1e-6, "a zero shape moves by %g", e_zero);
    DF_CHECK_MSG(e_line < 1e-5, "a piece on a line %g from its mean displacement", e_line);
    int32_t bad[NV];
    memcpy(bad, piece, sizeof bad);
    bad[5] = NP;
    DF_CHECK(df__rt_pieces_apply(pos, NV, bad, NP, mode, MS, D, &err) == DF_EINVAL);
    const uint8_t badm[NP] = {0, 1, 2, 7};
    DF_CHECK(df__rt_pieces_apply(pos, NV, piece, NP, badm, MS, D, &err) == DF_EINVAL);
}

int main(void)
{
    DF_RUN(test_rbf);
    DF_RUN(test_closest);
    DF_RUN(test_transfer);
    DF_RUN(test_refine);
    DF_RUN(test_frames_affine);
    DF_RUN(test_pieces);
    return dftest_exit();
}

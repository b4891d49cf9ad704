/* rt_transfer.c — blendshapes for a target of another topology: dense
 * correspondence from landmarks, expression cloning (Noh & Neumann 2001),
 * a naive displacement copy, and deformation transfer (Sumner & Popovic
 * 2004). Offline (deform retarget transfer); the result is a `rigged`
 * target with one shape per source control, served by a retarget model
 * with the names map.
 *
 * DESIGN
 *  - Correspondence: a radial-basis warp of the source onto the target
 *    through the landmark pairs (phi(r) = r, the 3D biharmonic kernel, plus
 *    an affine part; dense LU in double), then every target vertex's closest
 *    point on the warped source surface (triangles around its 12 nearest
 *    warped vertices): a source triangle and barycentric coordinates.
 *  - Expression cloning: the source displacement at that point, turned by
 *    the rotation taking the source's surface normal onto the target
 *    vertex's normal and scaled by the warp's local scale (cube root of its
 *    Jacobian's determinant). Both normals are taken at the target's
 *    resolution: the source's is the area-weighted normal of the target's
 *    1-ring with its vertices moved to their corresponding source points
 *    (the source surface sampled like the target), the target's the same
 *    over its own 1-ring; a finer source's vertex normal against a coarser
 *    target's would count the facets as a change of orientation. The
 *    paper's scale is the ratio of the local bounding boxes; that assumes
 *    meshes of similar resolution, which a remeshed target is not, so the
 *    warp's own scale stands in for it. local_frames = 0 carries the
 *    displacement unchanged (correspondence only).
 *  - Naive copy: the displacement of the nearest source vertex, no warp.
 *  - Deformation transfer: per target triangle the deformation gradient of
 *    the source surface over the same patch: the triangle spanned by the
 *    corners' corresponding source points (Sumner & Popovic's
 *    Q = V~ V^-1 with the fourth vertex along the normal), or the source
 *    triangle under the centroid where those points coincide; the target
 *    vertices minimise sum_t A_t |grad_t x - Q_t grad_t x0|^2 +
 *    eps |x - x0|^2 (the cotangent stiffness matrix; eps 1e-6 of its mean
 *    diagonal pins the translation), one CHOLMOD factorisation, one solve
 *    with 3 columns per shape for all shapes.
 */
#include "retarget/retarget.h"

#include <cholmod.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define E_(code, ...) df_error_set(err, code, __VA_ARGS__)

static void sub3(const double *a, const double *b, double *o)
{
    o[0] = a[0] - b[0], o[1] = a[1] - b[1], o[2] = a[2] - b[2];
}
static void cross3(const double *a, const double *b, double *o)
{
    o[0] = a[1] * b[2] - a[2] * b[1];
    o[1] = a[2] * b[0] - a[0] * b[2];
    o[2] = a[0] * b[1] - a[1] * b[0];
}
static double dot3(const double *a, const double *b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
static void fget(const float *p, int64_t i, double *o)
{
    o[0] = p[3 * i], o[1] = p[3 * i + 1], o[2] = p[3 * i + 2];
}

/* ------------------------------------------------------------ RBF warp */

/* LU with partial pivoting, in place (n x n, row-major); 0, or -1 when a
 * pivot is below tiny * the largest entry */
static int lu_solve(double *A, int64_t n, double *B, int64_t nrhs)
{
    double amax = 0;
    for (int64_t i = 0; i < n * n; i++) amax = fmax(amax, fabs(A[i]));
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(A[r * n + c]) > fabs(A[p * n + c])) p = r;
        if (!(fabs(A[p * n + c]) > 1e-12 * amax)) return -1;
        if (p != c) {
            for (int64_t k = 0; k < n; k++) {
                double t = A[c * n + k];
                A[c * n + k] = A[p * n + k];
                A[p * n + k] = t;
            }
            for (int64_t k = 0; k < nrhs; k++) {
                double t = B[c * nrhs + k];
                B[c * nrhs + k] = B[p * nrhs + k];
                B[p * nrhs + k] = t;
            }
        }
        for (int64_t r = c + 1; r < n; r++) {
            double f = A[r * n + c] / A[c * n + c];
            if (f == 0) continue;
            for (int64_t k = c; k < n; k++) A[r * n + k] -= f * A[c * n + k];
            for (int64_t k = 0; k < nrhs; k++) B[r * nrhs + k] -= f * B[c * nrhs + k];
        }
    }
    for (int64_t r = n - 1; r >= 0; r--)
        for (int64_t k = 0; k < nrhs; k++) {
            double s = B[r * nrhs + k];
            for (int64_t c = r + 1; c < n; c++) s -= A[r * n + c] * B[c * nrhs + k];
            B[r * nrhs + k] = s / A[r * n + r];
        }
    return 0;
}

int df__rt_rbf_fit(const float *src, const float *dst, int64_t L, double *coef,
                   df_error_t *err)
{
    if (L < 4) return E_(DF_EINVAL, "landmarks: %lld pairs (need at least 4)", (long long)L);
    double ext = 0;
    for (int64_t i = 0; i < L; i++)
        for (int d = 0; d < 3; d++) ext = fmax(ext, fabs((double)src[3 * i + d] - src[d]));
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = i + 1; j < L; j++) {
            double a[3], b[3], e[3];
            fget(src, i, a), fget(src, j, b), sub3(a, b, e);
            if (sqrt(dot3(e, e)) <= 1e-6 * ext)
                return E_(DF_EINVAL, "source landmarks %lld and %lld coincide (duplicated "
                                     "landmark)", (long long)i, (long long)j);
            fget(dst, i, a), fget(dst, j, b), sub3(a, b, e);
            if (sqrt(dot3(e, e)) <= 1e-6 * ext)
                return E_(DF_EINVAL, "target landmarks %lld and %lld coincide (duplicated "
                                     "landmark)", (long long)i, (long long)j);
        }
    int64_t n = L + 4;
    double *A = calloc((size_t)(n * n), sizeof(double));
    if (!A) return E_(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n * 3; i++) coef[i] = 0;
    for (int64_t i = 0; i < L; i++) {
        double a[3];
        fget(src, i, a);
        for (int64_t j = 0; j < L; j++) {
            double b[3], e[3];
            fget(src, j, b), sub3(a, b, e);
            A[i * n + j] = sqrt(dot3(e, e));
        }
        double P[4] = {1, a[0], a[1], a[2]};
        for (int k = 0; k < 4; k++) A[i * n + L + k] = A[(L + k) * n + i] = P[k];
        for (int d = 0; d < 3; d++) coef[i * 3 + d] = dst[3 * i + d];
    }
    int rc = lu_solve(A, n, coef, 3);
    free(A);
    if (rc)
        return E_(DF_EINVAL, "landmarks: the warp is undetermined (the landmarks are "
                             "collinear or coplanar, or nearly so)");
    return DF_OK;
}

void df__rt_rbf_eval(const float *src, int64_t L, const double *coef, const double x[3],
                     double out[3], double J[9])
{
    const double *aff = coef + 3 * L; /* rows: 1, x, y, z */
    for (int d = 0; d < 3; d++) out[d] = aff[d] + aff[3 + d] * x[0] + aff[6 + d] * x[1] + aff[9 + d] * x[2];
    if (J)
        for (int d = 0; d < 3; d++)
            for (int e = 0; e < 3; e++) J[d * 3 + e] = aff[3 * (e + 1) + d];
    for (int64_t i = 0; i < L; i++) {
        double s[3], e[3];
        fget(src, i, s), sub3(x, s, e);
        double r = sqrt(dot3(e, e));
        for (int d = 0; d < 3; d++) out[d] += coef[3 * i + d] * r;
        if (J && r > 1e-12)
            for (int d = 0; d < 3; d++)
                for (int k = 0; k < 3; k++) J[d * 3 + k] += coef[3 * i + d] * e[k] / r;
    }
}

/* ------------------------------------------------------- closest points */

/* barycentric coordinates of p's closest point on triangle abc (Ericson,
 * Real-Time Collision Detection, 5.1.5) */
static void closest_bary(const double *p, const double *a, const double *b, const double *c,
                         double *bo)
{
    double ab[3], ac[3], ap[3], bp[3], cp[3];
    sub3(b, a, ab), sub3(c, a, ac), sub3(p, a, ap);
    double d1 = dot3(ab, ap), d2 = dot3(ac, ap);
    if (d1 <= 0 && d2 <= 0) { bo[0] = 1, bo[1] = bo[2] = 0; return; }
    sub3(p, b, bp);
    double d3 = dot3(ab, bp), d4 = dot3(ac, bp);
    if (d3 >= 0 && d4 <= d3) { bo[1] = 1, bo[0] = bo[2] = 0; return; }
    double vc = d1 * d4 - d3 * d2;
    if (vc <= 0 && d1 >= 0 && d3 <= 0) {
        double v = d1 / (d1 - d3);
        bo[0] = 1 - v, bo[1] = v, bo[2] = 0;
        return;
    }
    sub3(p, c, cp);
    double d5 = dot3(ab, cp), d6 = dot3(ac, cp);
    if (d6 >= 0 && d5 <= d6) { bo[2] = 1, bo[0] = bo[1] = 0; return; }
    double vb = d5 * d2 - d1 * d6;
    if (vb <= 0 && d2 >= 0 && d6 <= 0) {
        double w = d2 / (d2 - d6);
        bo[0] = 1 - w, bo[1] = 0, bo[2] = w;
        return;
    }
    double va = d3 * d6 - d5 * d4;
    if (va <= 0 && (d4 - d3) >= 0 && (d5 - d6) >= 0) {
        double w = (d4 - d3) / ((d4 - d3) + (d5 - d6));
        bo[0] = 0, bo[1] = 1 - w, bo[2] = w;
        return;
    }
    double den = 1.0 / (va + vb + vc);
    bo[1] = vb * den, bo[2] = vc * den, bo[0] = 1 - bo[1] - bo[2];
}

int df__rt_closest(const double *V, int64_t nv, const uint32_t *T, int64_t nt, const double *P,
                   const double *PN, int64_t np, int32_t *tri_out, float *bary_out,
                   df_error_t *err)
{
    enum { KN = 12 };
    int64_t *deg = calloc((size_t)nv + 1, sizeof(int64_t));
    int32_t *inc = malloc((size_t)(3 * nt + 1) * sizeof(int32_t));
    if (!deg || !inc) {
        free(deg), free(inc);
        return E_(DF_ENOMEM, "out of memory");
    }
    for (int64_t t = 0; t < 3 * nt; t++) deg[T[t] + 1]++;
    for (int64_t v = 0; v < nv; v++) deg[v + 1] += deg[v];
    int64_t *fill = calloc((size_t)nv, sizeof(int64_t));
    if (!fill) {
        free(deg), free(inc);
        return E_(DF_ENOMEM, "out of memory");
    }
    for (int64_t t = 0; t < nt; t++)
        for (int k = 0; k < 3; k++) {
            uint32_t v = T[3 * t + k];
            inc[deg[v] + fill[v]++] = (int32_t)t;
        }
    free(fill);
    for (int64_t q = 0; q < np; q++) {
        const double *p = P + 3 * q;
        int64_t near[KN];
        double nd[KN];
        int nn = 0;
        for (int64_t v = 0; v < nv; v++) { /* the KN nearest, insertion */
            double e[3];
            sub3(p, V + 3 * v, e);
            double d = dot3(e, e);
            if (nn == KN && d >= nd[KN - 1]) continue;
            int k = nn < KN ? nn++ : KN - 1;
            while (k > 0 && nd[k - 1] > d) {
                nd[k] = nd[k - 1], near[k] = near[k - 1];
                k--;
            }
            nd[k] = d, near[k] = v;
        }
        double best = INFINITY;
        /* with query normals, first only faces facing the same way (lips
         * that touch: the upper lip must not find the lower one) */
        for (int pass = PN ? 0 : 1; pass < 2 && best == INFINITY; pass++)
        for (int k = 0; k < nn; k++)
            for (int64_t j = deg[near[k]]; j < deg[near[k] + 1]; j++) {
                int64_t t = inc[j];
                const double *a = V + 3 * T[3 * t], *b = V + 3 * T[3 * t + 1],
                             *c = V + 3 * T[3 * t + 2];
                double bo[3], x[3], e[3];
                if (pass == 0) {
                    double e1[3], e2[3], fn[3];
                    sub3(b, a, e1), sub3(c, a, e2), cross3(e1, e2, fn);
                    double l = sqrt(dot3(fn, fn));
                    if (!(l > 0) || dot3(fn, PN + 3 * q) < 0.5 * l) continue;
                }
                closest_bary(p, a, b, c, bo);
                for (int d = 0; d < 3; d++) x[d] = bo[0] * a[d] + bo[1] * b[d] + bo[2] * c[d];
                sub3(p, x, e);
                double d2 = dot3(e, e);
                if (d2 < best) {
                    best = d2;
                    tri_out[q] = (int32_t)t;
                    for (int d = 0; d < 3; d++) bary_out[3 * q + d] = (float)bo[d];
                }
            }
    }
    free(deg);
    free(inc);
    return DF_OK;
}

/* ------------------------------------------------------------ transfers */

static void vertex_normals(const float *P, int64_t nv, const uint32_t *T, int64_t nt, double *N)
{
    memset(N, 0, sizeof(double) * (size_t)(3 * nv));
    for (int64_t t = 0; t < nt; t++) {
        double a[3], b[3], c[3], e1[3], e2[3], n[3];
        fget(P, T[3 * t], a), fget(P, T[3 * t + 1], b), fget(P, T[3 * t + 2], c);
        sub3(b, a, e1), sub3(c, a, e2), cross3(e1, e2, n);
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++) N[3 * T[3 * t + k] + d] += n[d];
    }
    for (int64_t v = 0; v < nv; v++) {
        double l = sqrt(dot3(N + 3 * v, N + 3 * v));
        for (int d = 0; d < 3 && l > 0; d++) N[3 * v + d] /= l;
    }
}

/* the same for double positions; a vertex whose triangles have no area
 * gets a zero normal */
static void vertex_normals_d(const double *P, int64_t nv, const uint32_t *T, int64_t nt, double *N)
{
    memset(N, 0, sizeof(double) * (size_t)(3 * nv));
    for (int64_t t = 0; t < nt; t++) {
        double e1[3], e2[3], n[3];
        const uint32_t *f = T + 3 * t;
        sub3(P + 3 * f[1], P + 3 * f[0], e1), sub3(P + 3 * f[2], P + 3 * f[0], e2), cross3(e1, e2, n);
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++) N[3 * f[k] + d] += n[d];
    }
    for (int64_t v = 0; v < nv; v++) {
        double l = sqrt(dot3(N + 3 * v, N + 3 * v));
        for (int d = 0; d < 3; d++) N[3 * v + d] = l > 0 ? N[3 * v + d] / l : 0.0;
    }
}

/* the rotation taking unit a onto unit b (Rodrigues; a = -b: a half turn
 * about any axis normal to a) */
static void rot_between(const double *a, const double *b, double *R)
{
    double v[3], c = dot3(a, b);
    cross3(a, b, v);
    if (c < -1 + 1e-9) {
        double t[3] = {1, 0, 0};
        if (fabs(a[0]) > 0.9) t[0] = 0, t[1] = 1;
        cross3(a, t, v);
        double l = sqrt(dot3(v, v));
        for (int d = 0; d < 3; d++) v[d] /= l;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) R[i * 3 + j] = 2 * v[i] * v[j] - (i == j);
        return;
    }
    double K[9] = {0, -v[2], v[1], v[2], 0, -v[0], -v[1], v[0], 0}, K2[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            K2[i * 3 + j] = 0;
            for (int k = 0; k < 3; k++) K2[i * 3 + j] += K[i * 3 + k] * K[k * 3 + j];
        }
    double f = 1 / (1 + c);
    for (int i = 0; i < 9; i++) R[i] = (i % 4 == 0) + K[i] + K2[i] * f;
}

int df__rt_transfer(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                    const int32_t *lm_t, int64_t L, df__rt_transfer_t method, int local_frames,
                    float *out, df_error_t *err)
{
    int64_t ns = s->nv, nt = t->nv, M = s->M;
    int rc = DF_OK;
    float *ls = malloc(sizeof(float) * (size_t)(3 * L)), *lt = malloc(sizeof(float) * (size_t)(3 * L));
    double *coef = malloc(sizeof(double) * (size_t)(3 * (L + 4)));
    double *W = malloc(sizeof(double) * (size_t)(3 * ns)), *Pt = malloc(sizeof(double) * (size_t)(3 * nt));
    int32_t *ctri = malloc(sizeof(int32_t) * (size_t)(nt + t->nt));
    float *cbary = malloc(sizeof(float) * (size_t)(3 * (nt + t->nt)));
    uint8_t *pin = calloc((size_t)nt, 1);
    double *Ns = malloc(sizeof(double) * (size_t)(3 * ns)), *Nt = malloc(sizeof(double) * (size_t)(3 * nt));
    double *Pv = malloc(sizeof(double) * (size_t)(3 * nt)), *Nv = malloc(sizeof(double) * (size_t)(3 * nt));
    if (!ls || !lt || !coef || !W || !Pt || !ctri || !cbary || !Ns || !Nt || !pin || !Pv || !Nv) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < L; i++) {
        if (lm_s[i] < 0 || lm_s[i] >= ns || lm_t[i] < 0 || lm_t[i] >= nt) {
            rc = E_(DF_EINVAL, "landmark %lld: vertex %d / %d out of range (%lld / %lld "
                               "vertices)", (long long)i, lm_s[i], lm_t[i], (long long)ns,
                    (long long)nt);
            goto done;
        }
        memcpy(ls + 3 * i, s->pos + 3 * (int64_t)lm_s[i], 3 * sizeof(float));
        memcpy(lt + 3 * i, t->pos + 3 * (int64_t)lm_t[i], 3 * sizeof(float));
    }
    vertex_normals(s->pos, ns, s->tri, s->nt, Ns);
    vertex_normals(t->pos, nt, t->tri, t->nt, Nt);
    for (int64_t v = 0; v < nt; v++) fget(t->pos, v, Pt + 3 * v);
    if (method == DF_RT_NAIVE) { /* nearest source vertex, no warp */
        for (int64_t q = 0; q < nt; q++) {
            double best = INFINITY;
            int64_t bi = 0;
            for (int64_t v = 0; v < ns; v++) {
                double x[3], e[3];
                fget(s->pos, v, x), sub3(Pt + 3 * q, x, e);
                double d = dot3(e, e);
                if (d < best) best = d, bi = v;
            }
            for (int64_t j = 0; j < M; j++)
                for (int d = 0; d < 3; d++)
                    out[(j * nt + q) * 3 + d] = s->deltas[(j * ns + bi) * 3 + d];
        }
        goto done;
    }
    if ((rc = df__rt_rbf_fit(ls, lt, L, coef, err))) goto done;
    for (int64_t v = 0; v < ns; v++) {
        double x[3];
        fget(s->pos, v, x);
        df__rt_rbf_eval(ls, L, coef, x, W + 3 * v, NULL);
    }
    /* every target vertex's point on the warped source */
    if ((rc = df__rt_closest(W, ns, s->tri, s->nt, Pt, Nt, nt, ctri, cbary, err))) goto done;
    /* the source surface sampled at the target's resolution: the target's
     * connectivity with each vertex at its corresponding source point */
    for (int64_t q = 0; q < nt; q++) {
        const uint32_t *f = s->tri + 3 * ctri[q];
        const float *b = cbary + 3 * q;
        for (int d = 0; d < 3; d++)
            Pv[3 * q + d] = b[0] * s->pos[3 * f[0] + d] + b[1] * s->pos[3 * f[1] + d] +
                            b[2] * s->pos[3 * f[2] + d];
    }
    if (method == DF_RT_CLONE) {
        /* local frames compared at one resolution: the normal of that
         * sampled source surface against the target's own, both
         * area-weighted over the same 1-ring (the source's finer vertex
         * normals would count the coarser mesh's facets as a change of
         * orientation) */
        vertex_normals_d(Pv, nt, t->tri, t->nt, Nv);
        for (int64_t q = 0; q < nt; q++) {
            const uint32_t *f = s->tri + 3 * ctri[q];
            const float *b = cbary + 3 * q;
            double ns3[3], R[9], J[9], wx[3];
            memcpy(ns3, Nv + 3 * q, sizeof ns3);
            if (!(dot3(ns3, ns3) > 0.5)) { /* a collapsed ring: the source's own */
                for (int d = 0; d < 3; d++)
                    ns3[d] = b[0] * Ns[3 * f[0] + d] + b[1] * Ns[3 * f[1] + d] + b[2] * Ns[3 * f[2] + d];
                double l = sqrt(dot3(ns3, ns3));
                for (int d = 0; d < 3 && l > 0; d++) ns3[d] /= l;
            }
            rot_between(ns3, Nt + 3 * q, R);
            df__rt_rbf_eval(ls, L, coef, Pv + 3 * q, wx, J);
            double det = J[0] * (J[4] * J[8] - J[5] * J[7]) - J[1] * (J[3] * J[8] - J[5] * J[6]) +
                         J[2] * (J[3] * J[7] - J[4] * J[6]);
            double sc = cbrt(fabs(det));
            if (!(sc > 0.1 && sc < 10)) sc = 1; /* a folded warp: keep the size */
            if (!local_frames) { /* the displacement as it is */
                sc = 1;
                for (int i = 0; i < 9; i++) R[i] = (i % 4 == 0);
            }
            for (int64_t j = 0; j < M; j++) {
                double m[3] = {0, 0, 0};
                for (int k = 0; k < 3; k++)
                    for (int d = 0; d < 3; d++) m[d] += b[k] * s->deltas[(j * ns + f[k]) * 3 + d];
                for (int d = 0; d < 3; d++)
                    out[(j * nt + q) * 3 + d] =
                        (float)(sc * (R[3 * d] * m[0] + R[3 * d + 1] * m[1] + R[3 * d + 2] * m[2]));
            }
        }
        goto done;
    }
    /* deformation transfer: the source triangle under each target
     * triangle's centroid */
    {
        /* target vertices over source surface no shape moves are pinned
         * (the back of the head, the neck): they fix the solution's
         * translation as a rigid frame would */
        double ext = 0;
        for (int64_t v = 0; v < ns * 3; v++) ext = fmax(ext, fabs((double)s->pos[v]));
        for (int64_t q = 0; q < nt; q++) {
            const uint32_t *f = s->tri + 3 * ctri[q];
            double mx = 0;
            for (int64_t j = 0; j < M; j++)
                for (int k = 0; k < 3; k++)
                    for (int d = 0; d < 3; d++)
                        mx = fmax(mx, fabs((double)s->deltas[(j * ns + f[k]) * 3 + d]));
            pin[q] = mx <= 1e-5 * ext;
        }
        int64_t T2 = t->nt;
        double *C = malloc(sizeof(double) * (size_t)(3 * T2)), *CN = malloc(sizeof(double) * (size_t)(3 * T2));
        if (!C || !CN) {
            free(C), free(CN);
            rc = E_(DF_ENOMEM, "out of memory");
            goto done;
        }
        for (int64_t f = 0; f < T2; f++) {
            const uint32_t *v = t->tri + 3 * f;
            double e1[3], e2[3];
            for (int d = 0; d < 3; d++)
                C[3 * f + d] = (Pt[3 * v[0] + d] + Pt[3 * v[1] + d] + Pt[3 * v[2] + d]) / 3;
            sub3(Pt + 3 * v[1], Pt + 3 * v[0], e1), sub3(Pt + 3 * v[2], Pt + 3 * v[0], e2);
            cross3(e1, e2, CN + 3 * f);
            double l = sqrt(dot3(CN + 3 * f, CN + 3 * f));
            for (int d = 0; d < 3 && l > 0; d++) CN[3 * f + d] /= l;
        }
        rc = df__rt_closest(W, ns, s->tri, s->nt, C, CN, T2, ctri + nt, cbary + 3 * nt, err);
        free(C), free(CN);
        if (rc) goto done;
        rc = df__rt_deformation_transfer(s, t, ctri + nt, ctri, cbary, pin, out, err);
    }
done:
    free(ls), free(lt), free(coef), free(W), free(Pt), free(ctri), free(cbary), free(Ns), free(Nt);
    free(pin), free(Pv), free(Nv);
    return rc;
}

/* gradients of the three hat functions of triangle (a, b, c); area A */
static int hat_gradients(const double *a, const double *b, const double *c, double g[3][3],
                         double *A)
{
    double e1[3], e2[3], n[3];
    sub3(b, a, e1), sub3(c, a, e2), cross3(e1, e2, n);
    double l = sqrt(dot3(n, n));
    if (!(l > 1e-14)) return -1;
    *A = l / 2;
    for (int d = 0; d < 3; d++) n[d] /= l;
    const double *P[3] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        double e[3];
        sub3(P[(k + 2) % 3], P[(k + 1) % 3], e); /* the opposite edge */
        cross3(n, e, g[k]);
        for (int d = 0; d < 3; d++) g[k][d] /= l;
    }
    return 0;
}

/* Sumner & Popovic's frame of a triangle: [e1, e2, n/sqrt|n|] (columns) */
static void frame(const double *a, const double *b, const double *c, double *F)
{
    double e1[3], e2[3], n[3];
    sub3(b, a, e1), sub3(c, a, e2), cross3(e1, e2, n);
    double s = 1 / sqrt(sqrt(dot3(n, n)) + 1e-300);
    for (int d = 0; d < 3; d++) F[d * 3] = e1[d], F[d * 3 + 1] = e2[d], F[d * 3 + 2] = n[d] * s;
}

static int inv33(const double *m, double *o)
{
    double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                 m[2] * (m[3] * m[7] - m[4] * m[6]);
    if (!(fabs(det) > 1e-300)) return -1;
    double id = 1 / det;
    o[0] = (m[4] * m[8] - m[5] * m[7]) * id, o[1] = (m[2] * m[7] - m[1] * m[8]) * id;
    o[2] = (m[1] * m[5] - m[2] * m[4]) * id, o[3] = (m[5] * m[6] - m[3] * m[8]) * id;
    o[4] = (m[0] * m[8] - m[2] * m[6]) * id, o[5] = (m[2] * m[3] - m[0] * m[5]) * id;
    o[6] = (m[3] * m[7] - m[4] * m[6]) * id, o[7] = (m[1] * m[6] - m[0] * m[7]) * id;
    o[8] = (m[0] * m[4] - m[1] * m[3]) * id;
    return 0;
}

int df__rt_deformation_transfer(const df__rt_mesh_t *s, const df__rt_mesh_t *t,
                                const int32_t *ctri, const int32_t *vtri, const float *vbary,
                                const uint8_t *pin, float *out, df_error_t *err)
{
    int64_t n = t->nv, T2 = t->nt, M = s->M, ns = s->nv;
    cholmod_common cc;
    cholmod_start(&cc);
    int rc = DF_OK;
    cholmod_triplet *tr = cholmod_allocate_triplet((size_t)n, (size_t)n, (size_t)(6 * T2 + n), -1,
                                                   CHOLMOD_REAL, &cc);
    cholmod_dense *B = cholmod_zeros((size_t)n, (size_t)(3 * M), CHOLMOD_REAL, &cc);
    double (*G)[3][3] = malloc(sizeof *G * (size_t)T2); /* hat gradients */
    double *Ar = malloc(sizeof(double) * (size_t)T2);
    cholmod_sparse *K = NULL;
    cholmod_factor *Lf = NULL;
    cholmod_dense *X = NULL;
    if (!tr || !B || !G || !Ar) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    int32_t *ti = tr->i, *tj = tr->j;
    double *tx = tr->x, diag = 0;
    size_t nz = 0;
    for (int64_t f = 0; f < T2; f++) {
        double a[3], b[3], c[3];
        const uint32_t *v = t->tri + 3 * f;
        fget(t->pos, v[0], a), fget(t->pos, v[1], b), fget(t->pos, v[2], c);
        if (hat_gradients(a, b, c, G[f], &Ar[f])) {
            Ar[f] = 0; /* a degenerate target triangle has no gradient */
            continue;
        }
        for (int p = 0; p < 3; p++)
            for (int q = 0; q <= p; q++) { /* lower triangle (stype -1) */
                int64_t i = v[p], j = v[q];
                if (i < j) i = v[q], j = v[p];
                ti[nz] = (int32_t)i, tj[nz] = (int32_t)j;
                tx[nz++] = Ar[f] * dot3(G[f][p], G[f][q]);
                if (p == q) diag += Ar[f] * dot3(G[f][p], G[f][p]);
            }
    }
    /* the anchor: eps everywhere (the translation), 1e3 x the mean
     * diagonal on pinned vertices */
    double *anc = malloc(sizeof(double) * (size_t)n);
    if (!anc) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t v = 0; v < n; v++) {
        anc[v] = (pin && pin[v] ? 1e3 : 1e-6) * diag / (double)n;
        ti[nz] = tj[nz] = (int32_t)v, tx[nz++] = anc[v];
    }
    tr->nnz = nz;
    K = cholmod_triplet_to_sparse(tr, nz, &cc);
    if (!K) {
        rc = E_(DF_ENOMEM, "out of memory (stiffness matrix)");
        goto done;
    }
    Lf = cholmod_analyze(K, &cc);
    if (!Lf || !cholmod_factorize(K, Lf, &cc) || cc.status != CHOLMOD_OK) {
        rc = E_(DF_ENUMERIC, "deformation transfer: the target's stiffness matrix did not "
                             "factorise (CHOLMOD status %d)", cc.status);
        goto done;
    }
    /* right-hand sides: b_c[v_k] += A_t grad_k . (Q_t J0_t)[c,:], plus eps x0 */
    double *bx = B->x;
    for (int64_t f = 0; f < T2; f++) {
        if (Ar[f] == 0) continue;
        const uint32_t *v = t->tri + 3 * f, *u = s->tri + 3 * ctri[f];
        double J0[9] = {0}, F0[9], F0i[9];
        for (int k = 0; k < 3; k++) {
            double x[3];
            fget(t->pos, v[k], x);
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 3; q++) J0[r * 3 + q] += x[r] * G[f][k][q];
        }
        /* the source triangle: the corresponding points of the target
         * triangle's corners (the source surface over the same patch,
         * however many source triangles it crosses), or the source
         * triangle under the centroid when those points (nearly) coincide
         * or no vertex correspondence is given */
        double P[3][3], Pw[3][3]; /* corners; their barycentric weights per
                                   * source vertex are in vbary */
        int virt = vtri != NULL;
        if (virt) {
            for (int k = 0; k < 3; k++) {
                const uint32_t *g = s->tri + 3 * vtri[v[k]];
                const float *bb = vbary + 3 * (int64_t)v[k];
                for (int d = 0; d < 3; d++)
                    P[k][d] = bb[0] * s->pos[3 * g[0] + d] + bb[1] * s->pos[3 * g[1] + d] +
                              bb[2] * s->pos[3 * g[2] + d];
            }
            double e1[3], e2[3], nn[3];
            sub3(P[1], P[0], e1), sub3(P[2], P[0], e2), cross3(e1, e2, nn);
            virt = sqrt(dot3(nn, nn)) > 2e-3 * Ar[f]; /* area > 1e-3 the target's */
        }
        if (!virt)
            for (int k = 0; k < 3; k++) fget(s->pos, u[k], P[k]);
        frame(P[0], P[1], P[2], F0);
        if (inv33(F0, F0i)) continue; /* a degenerate source triangle: rest */
        for (int64_t j = 0; j < M; j++) {
            double F1[9], Q[9], QJ[9];
            for (int k = 0; k < 3; k++) {
                double dlt[3] = {0, 0, 0};
                if (virt) {
                    const uint32_t *g = s->tri + 3 * vtri[v[k]];
                    const float *bb = vbary + 3 * (int64_t)v[k];
                    for (int e = 0; e < 3; e++)
                        for (int d = 0; d < 3; d++) dlt[d] += bb[e] * s->deltas[(j * ns + g[e]) * 3 + d];
                } else {
                    for (int d = 0; d < 3; d++) dlt[d] = s->deltas[(j * ns + u[k]) * 3 + d];
                }
                for (int d = 0; d < 3; d++) Pw[k][d] = P[k][d] + dlt[d];
            }
            frame(Pw[0], Pw[1], Pw[2], F1);
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 3; q++) {
                    Q[r * 3 + q] = 0;
                    for (int k = 0; k < 3; k++) Q[r * 3 + q] += F1[r * 3 + k] * F0i[k * 3 + q];
                }
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 3; q++) {
                    QJ[r * 3 + q] = 0;
                    for (int k = 0; k < 3; k++) QJ[r * 3 + q] += Q[r * 3 + k] * J0[k * 3 + q];
                }
            for (int k = 0; k < 3; k++)
                for (int cdim = 0; cdim < 3; cdim++)
                    bx[(size_t)(3 * j + cdim) * (size_t)n + v[k]] +=
                        Ar[f] * dot3(G[f][k], QJ + 3 * cdim);
        }
    }
    for (int64_t j = 0; j < M; j++)
        for (int cdim = 0; cdim < 3; cdim++)
            for (int64_t v = 0; v < n; v++)
                bx[(size_t)(3 * j + cdim) * (size_t)n + v] += anc[v] * t->pos[3 * v + cdim];
    free(anc);
    anc = NULL;
    X = cholmod_solve(CHOLMOD_A, Lf, B, &cc);
    if (!X || cc.status != CHOLMOD_OK) {
        rc = E_(DF_ENUMERIC, "deformation transfer: solve failed (CHOLMOD status %d)", cc.status);
        goto done;
    }
    const double *xx = X->x;
    for (int64_t j = 0; j < M; j++)
        for (int cdim = 0; cdim < 3; cdim++)
            for (int64_t v = 0; v < n; v++)
                out[(j * n + v) * 3 + cdim] =
                    (float)(xx[(size_t)(3 * j + cdim) * (size_t)n + v] - t->pos[3 * v + cdim]);
done:
    cholmod_free_dense(&X, &cc);
    cholmod_free_factor(&Lf, &cc);
    cholmod_free_sparse(&K, &cc);
    cholmod_free_dense(&B, &cc);
    cholmod_free_triplet(&tr, &cc);
    cholmod_finish(&cc);
    free(G);
    free(Ar);
    return rc;
}

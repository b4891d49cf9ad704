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
 *    an affine part; dense LU in double), refined by sliding semilandmarks
 *    (`refine` rounds, see correspond()): up to 400 source vertices spread
 *    over the surface get images on the target's surface, slid along it
 *    (and the target landmarks within half an edge of their vertices) to
 *    where the warp through all of them bends least; the warp through the
 *    final images replaces the landmarks' one. Then every target vertex's
 *    closest point on the warped source surface (triangles around its 12
 *    nearest warped vertices, facing within 60 degrees): a source triangle
 *    and barycentric coordinates. Nearest vertices (here and in the naive
 *    copy) come from a uniform grid (math/knn.h: exact, ties by index, the
 *    answers of a scan of every vertex).
 *  - Expression cloning: the source displacement at that point, turned by
 *    the rotation taking the source's surface normal onto the target
 *    vertex's normal and scaled by the warp's local scale (cube root of its
 *    Jacobian's determinant, the final warp's). Both normals are taken at the target's
 *    resolution: the source's is the area-weighted normal of the target's
 *    1-ring with its vertices moved to their corresponding source points
 *    (the source surface sampled like the target), the target's the same
 *    over its own 1-ring; a finer source's vertex normal against a coarser
 *    target's would count the facets as a change of orientation. The
 *    paper's scale is the ratio of the local bounding boxes; that assumes
 *    meshes of similar resolution, which a remeshed target is not, so the
 *    warp's own scale stands in for it (where the warp folds, the landmarks' size ratio,
 *    which carries a change of units). That is local_frames =
 *    DF_RT_FRAMES_NORMALS, the paper's frames. The default,
 *    DF_RT_FRAMES_WARP, carries each displaced source point through the
 *    correspondence's own warp: w(p + d) - w(p) (first order: the warp's
 *    Jacobian J d, which turns and stretches per direction as the target
 *    differs locally; exact for a target that is the source under a smooth
 *    map the warp reproduces). DF_RT_FRAMES_SIMILARITY turns by J's polar
 *    rotation and scales by the local scale; where the warp folds both
 *    take the normals' frames. DF_RT_FRAMES_OFF carries the displacement
 *    unchanged (correspondence only).
 *  - Naive copies, no warp: the displacement of the nearest source vertex,
 *    or interpolated at the nearest point of the source surface (the
 *    closest points below without the facing test).
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
#include "math/knn.h"
#include "math/mathx.h"

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

/* the warp's system through n centres p [n,3], (n+4) x (n+4), zeroed by the
 * caller: |p_i - p_j| bordered by the affine part [1 x y z] (symmetric) */
static void rbf_system(const float *p, int64_t n, double *A)
{
    const int64_t m = n + 4;
    for (int64_t i = 0; i < n; i++) {
        double a[3];
        fget(p, i, a);
        for (int64_t j = 0; j < n; j++) {
            double b[3], e[3];
            fget(p, j, b), sub3(a, b, e);
            A[i * m + j] = sqrt(dot3(e, e));
        }
        const double P[4] = {1, a[0], a[1], a[2]};
        for (int k = 0; k < 4; k++) A[i * m + n + k] = A[(n + k) * m + i] = P[k];
    }
}

/* the warp through n centres (the first L the landmarks, checked for
 * coincident pairs; the others distinct source vertices), interpolating */
static int rbf_fit_n(const float *src, const float *dst, int64_t L, int64_t n, double *coef,
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
    int64_t m = n + 4;
    double *A = calloc((size_t)(m * m), sizeof(double));
    if (!A) return E_(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < m * 3; i++) coef[i] = 0;
    rbf_system(src, n, A);
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < 3; d++) coef[i * 3 + d] = dst[3 * i + d];
    int rc = lu_solve(A, m, coef, 3);
    free(A);
    if (rc)
        return E_(DF_EINVAL, "landmarks: the warp is undetermined (the landmarks are "
                             "collinear or coplanar, or nearly so)");
    return DF_OK;
}

int df__rt_rbf_fit(const float *src, const float *dst, int64_t L, double *coef,
                   df_error_t *err)
{
    return rbf_fit_n(src, dst, L, L, coef, err);
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
    if (nt < 1 && np > 0) return E_(DF_EINVAL, "closest points: the mesh has no triangles");
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
    df_knn_t *grid = NULL;
    if (nv > 0 && df_knn_build(V, nv, &grid)) {
        free(deg), free(inc);
        return E_(DF_EINVAL, "closest points: out of memory or a non-finite vertex");
    }
    for (int64_t q = 0; q < np; q++) {
        const double *p = P + 3 * q;
        int64_t near[KN];
        tri_out[q] = 0; /* (non-finite input matches nothing) */
        bary_out[3 * q] = 1, bary_out[3 * q + 1] = bary_out[3 * q + 2] = 0;
        double nd[KN];
        /* the KN nearest vertices (the grid's exact answer: ties by index) */
        int nn = grid ? df_knn_query(grid, p, KN, near, nd) : 0;
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
        if (best == INFINITY) /* no triangle around the nearest vertices: all of them */
            for (int64_t t = 0; t < nt; t++) {
                const double *a = V + 3 * T[3 * t], *b = V + 3 * T[3 * t + 1],
                             *c = V + 3 * T[3 * t + 2];
                double bo[3], x[3], e[3];
                closest_bary(p, a, b, c, bo);
                for (int d = 0; d < 3; d++) x[d] = bo[0] * a[d] + bo[1] * b[d] + bo[2] * c[d];
                sub3(p, x, e);
                if (dot3(e, e) < best) {
                    best = dot3(e, e);
                    tri_out[q] = (int32_t)t;
                    for (int d = 0; d < 3; d++) bary_out[3 * q + d] = (float)bo[d];
                }
            }
    }
    df_knn_free(&grid);
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

/* ------------------------------------------------------ correspondence */

extern void dgesv_(const int *n, const int *nrhs, double *a, const int *lda, int *ipiv,
                   double *b, const int *ldb, int *info);
extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda,
                   double *b, const int *ldb, int *info);

/* The refinement (sliding semilandmarks). Samples: source vertices spread
 * by farthest point sampling from the landmarks (at most this many). A
 * sample is dropped when its first image on the target faces the other way
 * (normals more than 60 degrees apart), lands on the target's border while
 * the sample is inside the source, or lies more than REJECT_MEDIANS times
 * the median distance away. The rounds stop when the images move by less
 * than STOP_MOVE of the target's mean edge on average; RIDGE (relative to
 * the mean diagonal) keeps the slide's system positive definite. */
enum { REFINE_SAMPLES = 400 };
#define REJECT_MEDIANS 5.0
#define STOP_MOVE 0.01
#define RIDGE 1e-6

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct edge_key {
    uint32_t a, b;
    int64_t slot; /* 3 * triangle + the corner opposite the edge */
} edge_key_t;

static int cmp_edge(const void *p, const void *q)
{
    const edge_key_t *x = p, *y = q;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    return (x->b > y->b) - (x->b < y->b);
}

/* border[3 t + k] = 1 when triangle t's edge opposite corner k belongs to
 * no other triangle; -1: out of memory */
static int border_edges(const uint32_t *T, int64_t nt, uint8_t *border)
{
    edge_key_t *e = malloc(sizeof *e * (size_t)(3 * nt + 1));
    if (!e) return -1;
    for (int64_t t = 0; t < nt; t++)
        for (int k = 0; k < 3; k++) {
            uint32_t a = T[3 * t + (k + 1) % 3], b = T[3 * t + (k + 2) % 3];
            e[3 * t + k] = (edge_key_t){a < b ? a : b, a < b ? b : a, 3 * t + k};
        }
    qsort(e, (size_t)(3 * nt), sizeof *e, cmp_edge);
    for (int64_t i = 0; i < 3 * nt;) {
        int64_t j = i + 1;
        while (j < 3 * nt && e[j].a == e[i].a && e[j].b == e[i].b) j++;
        for (int64_t k = i; k < j; k++) border[e[k].slot] = j - i == 1;
        i = j;
    }
    free(e);
    return 0;
}

/* the warp through n centres applied to every source vertex */
static void warp_all(const df__rt_mesh_t *s, const float *cen, int64_t n, const double *coef,
                     double *W)
{
    for (int64_t v = 0; v < s->nv; v++) {
        double x[3];
        fget(s->pos, v, x);
        df__rt_rbf_eval(cen, n, coef, x, W + 3 * v, NULL);
    }
}

/* two unit vectors spanning the plane normal to unit n (zeros when n is
 * not a unit vector: no direction to slide in) */
static void tangents(const double *n, double *t1, double *t2)
{
    double a[3] = {1, 0, 0};
    if (!(dot3(n, n) > 0.5)) {
        memset(t1, 0, 3 * sizeof(double)), memset(t2, 0, 3 * sizeof(double));
        return;
    }
    if (fabs(n[0]) > 0.9) a[0] = 0, a[1] = 1;
    cross3(n, a, t1);
    double l = sqrt(dot3(t1, t1));
    for (int d = 0; d < 3; d++) t1[d] /= l;
    cross3(n, t1, t2);
}

/* the closest point p to q on the segments E [ne,2] of V, and the unit
 * direction of its segment */
static void closest_on_border(const double *V, const uint32_t *E, int64_t ne, const double *q,
                              double *p, double *dir)
{
    double best = INFINITY;
    for (int64_t e = 0; e < ne; e++) {
        const double *a = V + 3 * E[2 * e], *b = V + 3 * E[2 * e + 1];
        double ab[3], aq[3], x[3], r[3];
        sub3(b, a, ab), sub3(q, a, aq);
        double l2 = dot3(ab, ab), u = l2 > 0 ? dot3(aq, ab) / l2 : 0;
        u = u < 0 ? 0 : u > 1 ? 1 : u;
        for (int d = 0; d < 3; d++) x[d] = a[d] + u * ab[d];
        sub3(q, x, r);
        double d2 = dot3(r, r);
        if (d2 < best && l2 > 0) {
            best = d2;
            memcpy(p, x, sizeof x);
            for (int d = 0; d < 3; d++) dir[d] = ab[d] / sqrt(l2);
        }
    }
}

/* a point and unit normal on the target from a closest-point answer */
static void target_point(const double *Pt, const double *Nt, const uint32_t *f, const float *b,
                         double *y, double *nrm)
{
    for (int d = 0; d < 3; d++) {
        y[d] = b[0] * Pt[3 * f[0] + d] + b[1] * Pt[3 * f[1] + d] + b[2] * Pt[3 * f[2] + d];
        nrm[d] = b[0] * Nt[3 * f[0] + d] + b[1] * Nt[3 * f[1] + d] + b[2] * Nt[3 * f[2] + d];
    }
    double l = sqrt(dot3(nrm, nrm));
    for (int d = 0; d < 3 && l > 0; d++) nrm[d] /= l;
}

/* The dense correspondence. cen, dst: [L + REFINE_SAMPLES, 3], the first L
 * the landmark pairs (IN; lm_t: the target landmarks' vertices); on return the final warp's centres and their
 * images, *n_out of them, and its coefficients coef [(*n_out + 4), 3].
 * W [ns,3] OUT: the source warped by it; ctri, cbary OUT: every target
 * vertex's closest point on W (the answer). Pt, Nt: the target's vertices
 * and unit normals. *rounds OUT: the rounds of sliding done.
 *
 * Sliding semilandmarks (Bookstein 1997; Gunz, Mitteroecker & Bookstein
 * 2005): the landmark warp alone leaves every point between the landmarks
 * where its interpolation puts it, off the target's surface and, once
 * projected, slid along it by millimetres. Source vertices spread over the
 * surface (the samples) take as images their closest points on the target
 * (facing the same way); then each round slides every image in its tangent
 * plane (a sample on the source's border along the target's border) to the
 * positions whose warp, interpolating the landmarks and all the images,
 * bends least (the bending energy is a quadratic form of the images: one
 * linear solve), and puts them back on the surface. The target landmarks
 * slide too, each within half the mean length of its vertex's edges (a
 * landmark given as a vertex is known to about that: the true point is
 * nearer to that vertex than to its neighbours). The warp through the final
 * images gives the correspondence. */
static void report(const df__rt_progress_t *pg, const char *stage, double frac)
{
    if (pg && pg->fn) pg->fn(pg->user, stage, frac);
}

static int correspond(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const double *Pt,
                      const double *Nt, const int32_t *lm_t, float *cen, float *dst, int64_t L,
                      int refine, int64_t *n_out, double *coef, double *W, int32_t *ctri,
                      float *cbary, int *rounds, const df__rt_progress_t *pg, df_error_t *err)
{
    int64_t ns = s->nv, nt = t->nv;
    int rc;
    *rounds = 0;
    *n_out = L;
    if ((rc = df__rt_rbf_fit(cen, dst, L, coef, err))) return rc;
    warp_all(s, cen, L, coef, W);
    int64_t K = ns - L < REFINE_SAMPLES ? ns - L : REFINE_SAMPLES, cap = L + K;
    if (refine <= 0 || K < 1 || t->nt < 1) /* (no target surface to slide on) */
        return df__rt_closest(W, ns, s->tri, s->nt, Pt, Nt, nt, ctri, cbary, err);
    /* per image (landmarks first, then samples): position Y, normal Nr,
     * tangents Tg (two; a border image one), kind */
    enum { SURFACE = 0, BORDER = 1, FIXED = 2 };
    int64_t *smp = malloc(sizeof(int64_t) * (size_t)cap);
    double *far = malloc(sizeof(double) * (size_t)ns), *Wn = malloc(sizeof(double) * (size_t)(3 * ns));
    double *Y = malloc(sizeof(double) * (size_t)(3 * cap)), *Yn = malloc(sizeof(double) * (size_t)(3 * cap));
    double *Y0 = malloc(sizeof(double) * (size_t)(3 * L)), *lim = malloc(sizeof(double) * (size_t)L);
    double *Nr = malloc(sizeof(double) * (size_t)(3 * cap)), *Tg = malloc(sizeof(double) * (size_t)(6 * cap));
    double *dist = malloc(sizeof(double) * (size_t)cap), *med = malloc(sizeof(double) * (size_t)cap);
    int32_t *qt = malloc(sizeof(int32_t) * (size_t)cap);
    float *qb = malloc(sizeof(float) * (size_t)(3 * cap));
    uint8_t *sbs = calloc((size_t)(3 * s->nt) + 1, 1), *tbs = calloc((size_t)(3 * t->nt) + 1, 1);
    uint8_t *sbv = calloc((size_t)ns, 1), *tbv = calloc((size_t)nt, 1);
    uint8_t *kind = calloc((size_t)cap, 1), *keep = calloc((size_t)cap, 1);
    uint32_t *E = malloc(sizeof(uint32_t) * (size_t)(6 * t->nt + 2));
    double *vl = calloc((size_t)nt + 1, sizeof(double));
    int64_t *vc = calloc((size_t)nt + 1, sizeof(int64_t));
    double *S = NULL, *B = NULL, *H = NULL, *g = NULL;
    int *ipiv = NULL;
    if (!smp || !far || !Wn || !Y || !Yn || !Y0 || !lim || !Nr || !Tg || !dist || !med || !qt ||
        !qb || !sbs || !tbs || !sbv || !tbv || !kind || !keep || !E || !vl || !vc ||
        border_edges(s->tri, s->nt, sbs) || border_edges(t->tri, t->nt, tbs)) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    int64_t ne = 0;
    for (int64_t f = 0; f < s->nt; f++)
        for (int k = 0; k < 3; k++)
            if (sbs[3 * f + k]) sbv[s->tri[3 * f + (k + 1) % 3]] = sbv[s->tri[3 * f + (k + 2) % 3]] = 1;
    for (int64_t f = 0; f < t->nt; f++)
        for (int k = 0; k < 3; k++)
            if (tbs[3 * f + k]) {
                uint32_t a = t->tri[3 * f + (k + 1) % 3], b = t->tri[3 * f + (k + 2) % 3];
                E[2 * ne] = a, E[2 * ne + 1] = b, ne++;
                tbv[a] = tbv[b] = 1;
            }
    /* the target's mean edge (the stopping rule) and the mean edge at each
     * landmark (its bound) */
    double edge = 0;
    for (int64_t f = 0; f < t->nt; f++)
        for (int k = 0; k < 3; k++) { /* (each edge seen from both sides) */
            uint32_t a = t->tri[3 * f + k], b = t->tri[3 * f + (k + 1) % 3];
            double e[3];
            sub3(Pt + 3 * a, Pt + 3 * b, e);
            double l = sqrt(dot3(e, e));
            edge += l, vl[a] += l, vl[b] += l, vc[a]++, vc[b]++;
        }
    edge /= (double)(3 * (t->nt > 0 ? t->nt : 1));
    for (int64_t i = 0; i < L; i++) {
        int32_t v = lm_t[i];
        fget(dst, i, Y0 + 3 * i);
        memcpy(Y + 3 * i, Y0 + 3 * i, 3 * sizeof(double));
        memcpy(Nr + 3 * i, Nt + 3 * v, 3 * sizeof(double));
        lim[i] = vc[v] > 0 ? 0.5 * vl[v] / (double)vc[v] : 0;
        kind[i] = tbv[v] || !(lim[i] > 0) ? FIXED : SURFACE; /* on the border: held */
    }
    /* the samples: source vertices farthest from the landmarks and each
     * other */
    for (int64_t v = 0; v < ns; v++) far[v] = INFINITY;
    for (int64_t i = 0; i < cap; i++) {
        double x[3];
        if (i < L) {
            fget(cen, i, x);
        } else {
            int64_t best = 0;
            for (int64_t v = 1; v < ns; v++)
                if (far[v] > far[best]) best = v;
            if (!(far[best] > 0)) { /* every vertex taken */
                cap = i, K = i - L;
                break;
            }
            smp[i] = best;
            fget(s->pos, best, x);
        }
        for (int64_t v = 0; v < ns; v++) {
            double p[3], e[3];
            fget(s->pos, v, p), sub3(p, x, e);
            far[v] = fmin(far[v], dot3(e, e));
        }
    }
    /* the images: the landmarks' (normals at their points), the samples'
     * closest points on the target facing the same way as the warped
     * source there */
    vertex_normals_d(W, ns, s->tri, s->nt, Wn);
    for (int64_t i = L; i < cap; i++) {
        memcpy(Yn + 3 * i, W + 3 * smp[i], 3 * sizeof(double));
        memcpy(Nr + 3 * i, Wn + 3 * smp[i], 3 * sizeof(double));
    }
    if (K < 1) goto project;
    if ((rc = df__rt_closest(Pt, nt, t->tri, t->nt, Yn + 3 * L, Nr + 3 * L, K, qt + L, qb + 3 * L, err)))
        goto done;
    int64_t nk = 0;
    for (int64_t i = L; i < cap; i++) {
        double nrm[3], e[3];
        const uint32_t *f = t->tri + 3 * qt[i];
        const float *b = qb + 3 * i;
        if (sbv[smp[i]] && ne > 0) { /* on the source's border: onto the target's */
            closest_on_border(Pt, E, ne, Yn + 3 * i, Y + 3 * i, nrm);
            kind[i] = BORDER, keep[i] = 1;
        } else {
            double e1[3], e2[3], fn[3];
            target_point(Pt, Nt, f, b, Y + 3 * i, nrm);
            sub3(Pt + 3 * f[1], Pt + 3 * f[0], e1), sub3(Pt + 3 * f[2], Pt + 3 * f[0], e2);
            cross3(e1, e2, fn);
            double l = sqrt(dot3(fn, fn));
            kind[i] = SURFACE;
            keep[i] = l > 0 && dot3(fn, Nr + 3 * i) >= 0.5 * l;
            for (int k = 0; k < 3; k++)
                if (tbs[3 * qt[i] + k] && b[k] <= 1e-6f) keep[i] = 0;
            memcpy(Nr + 3 * i, nrm, sizeof nrm);
        }
        sub3(Y + 3 * i, Yn + 3 * i, e);
        dist[i] = sqrt(dot3(e, e));
        if (keep[i]) med[nk++] = dist[i];
    }
    if (nk == 0) goto project;
    qsort(med, (size_t)nk, sizeof(double), cmp_double);
    double cut = REJECT_MEDIANS * med[nk / 2] + 1e-9 * edge;
    int64_t n = L; /* the kept samples follow the landmarks */
    for (int64_t i = L; i < cap; i++) {
        if (!keep[i] || dist[i] > cut) continue;
        smp[n] = smp[i], kind[n] = kind[i];
        memcpy(Y + 3 * n, Y + 3 * i, 3 * sizeof(double));
        memcpy(Nr + 3 * n, Nr + 3 * i, 3 * sizeof(double));
        n++;
    }
    int64_t m = n + 4, n2 = 2 * n;
    for (int64_t i = L; i < n; i++)
        for (int d = 0; d < 3; d++) cen[3 * i + d] = s->pos[3 * smp[i] + d];
    /* the bending energy of the warp interpolating images Z (one column per
     * coordinate) is -sum_d Z_d' B Z_d, B the n x n block of the inverse of
     * the interpolation system (phi(r) = r is conditionally negative
     * definite): B from one LU solve with n right-hand sides */
    S = calloc((size_t)(m * m), sizeof(double));
    B = calloc((size_t)(m * n), sizeof(double));
    H = malloc(sizeof(double) * (size_t)(n2 * n2));
    g = malloc(sizeof(double) * (size_t)n2);
    ipiv = malloc(sizeof(int) * (size_t)m);
    if (!S || !B || !H || !g || !ipiv) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    rbf_system(cen, n, S);
    for (int64_t i = 0; i < n; i++) B[i * m + i] = 1; /* column-major m x n identity */
    {
        int mi = (int)m, ni = (int)n, info = 0;
        dgesv_(&mi, &ni, S, &mi, ipiv, B, &mi, &info);
        if (info) goto project; /* not expected: the landmarks' system solved */
    }
    /* B[i + j m] (i, j < n) is now the block, symmetric */
    for (int r = 0; r < refine; r++) {
        for (int64_t i = 0; i < n; i++) {
            double *T1 = Tg + 6 * i, *T2 = T1 + 3, p[3];
            if (kind[i] == BORDER) {
                closest_on_border(Pt, E, ne, Y + 3 * i, p, T1);
                memset(T2, 0, 3 * sizeof(double));
            } else if (kind[i] == SURFACE) {
                tangents(Nr + 3 * i, T1, T2);
            } else {
                memset(T1, 0, 6 * sizeof(double));
            }
        }
        /* minimise sum_d Z_d' (-B) Z_d over the slides u: Z_i = Y_i + T_i u_i */
        double tr = 0;
        for (int64_t i = 0; i < n; i++)
            for (int a = 0; a < 2; a++) {
                const double *Ti = Tg + 6 * i + 3 * a;
                double gz = 0;
                for (int64_t j = 0; j < n; j++) gz -= B[i + j * m] * dot3(Ti, Y + 3 * j);
                g[2 * i + a] = -gz;
                for (int64_t j = 0; j < n; j++)
                    for (int c = 0; c < 2; c++)
                        H[(2 * i + a) * n2 + 2 * j + c] = -B[i + j * m] * dot3(Ti, Tg + 6 * j + 3 * c);
                tr += H[(2 * i + a) * n2 + 2 * i + a];
            }
        tr /= (double)n2;
        for (int64_t q = 0; q < n2; q++) {
            const double *Tq = Tg + 3 * q;
            H[q * n2 + q] += RIDGE * tr;
            if (!(dot3(Tq, Tq) > 0)) H[q * n2 + q] = 1; /* no such direction */
        }
        {
            int ni = (int)n2, one = 1, info = 0;
            dposv_("L", &ni, &one, H, &ni, g, &ni, &info);
            if (info) break; /* keep the last images */
        }
        for (int64_t i = 0; i < n; i++) {
            for (int d = 0; d < 3; d++)
                Yn[3 * i + d] = Y[3 * i + d] + g[2 * i] * Tg[6 * i + d] + g[2 * i + 1] * Tg[6 * i + 3 + d];
            if (i < L) { /* a landmark stays within its bound */
                double e[3];
                sub3(Yn + 3 * i, Y0 + 3 * i, e);
                double l = sqrt(dot3(e, e));
                if (l > lim[i])
                    for (int d = 0; d < 3; d++) Yn[3 * i + d] = Y0[3 * i + d] + e[d] * lim[i] / l;
            }
        }
        /* back onto the surface (the border), facing as before */
        if ((rc = df__rt_closest(Pt, nt, t->tri, t->nt, Yn, Nr, n, qt, qb, err))) goto done;
        double move = 0;
        for (int64_t i = 0; i < n; i++) {
            double y[3], nrm[3], e[3];
            if (kind[i] == FIXED) continue;
            if (kind[i] == BORDER) {
                closest_on_border(Pt, E, ne, Yn + 3 * i, y, nrm);
            } else {
                target_point(Pt, Nt, t->tri + 3 * qt[i], qb + 3 * i, y, nrm);
                memcpy(Nr + 3 * i, nrm, sizeof nrm);
            }
            sub3(y, Y + 3 * i, e);
            move += sqrt(dot3(e, e));
            memcpy(Y + 3 * i, y, sizeof y);
        }
        ++*rounds;
        report(pg, "correspondence", (double)(r + 1) / (refine + 1));
        if (move / (double)n < STOP_MOVE * edge) break;
    }
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < 3; d++) dst[3 * i + d] = (float)Y[3 * i + d];
    if (rbf_fit_n(cen, dst, L, n, coef, err)) { /* two landmarks slid together: */
        for (int64_t i = 0; i < 3 * L; i++) dst[i] = (float)Y0[i]; /* unslid */
        if ((rc = rbf_fit_n(cen, dst, L, n, coef, err))) goto done;
    }
    *n_out = n;
    warp_all(s, cen, n, coef, W);
project:
    rc = df__rt_closest(W, ns, s->tri, s->nt, Pt, Nt, nt, ctri, cbary, err);
done:
    free(smp), free(far), free(Wn), free(Y), free(Yn), free(Y0), free(lim), free(Nr), free(Tg);
    free(dist), free(med), free(qt), free(qb), free(sbs), free(tbs), free(sbv), free(tbv);
    free(kind), free(keep), free(E), free(vl), free(vc), free(S), free(B), free(H), free(g), free(ipiv);
    return rc;
}

/* the landmarks' positions ls, lt [L,3] OUT; indices out of range refused */
static int landmarks(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                     const int32_t *lm_t, int64_t L, float *ls, float *lt, df_error_t *err)
{
    for (int64_t i = 0; i < L; i++) {
        if (lm_s[i] < 0 || lm_s[i] >= s->nv || lm_t[i] < 0 || lm_t[i] >= t->nv)
            return E_(DF_EINVAL, "landmark %lld: vertex %d / %d out of range (%lld / %lld "
                                 "vertices)", (long long)i, lm_s[i], lm_t[i], (long long)s->nv,
                      (long long)t->nv);
        memcpy(ls + 3 * i, s->pos + 3 * (int64_t)lm_s[i], 3 * sizeof(float));
        memcpy(lt + 3 * i, t->pos + 3 * (int64_t)lm_t[i], 3 * sizeof(float));
    }
    return DF_OK;
}

int df__rt_correspond(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                      const int32_t *lm_t, int64_t L, int refine, int32_t *tri_out,
                      float *bary_out, int *rounds, df_error_t *err)
{
    int64_t ns = s->nv, nt = t->nv, cap = L + REFINE_SAMPLES, n;
    int rc, rd = 0;
    float *cen = malloc(sizeof(float) * (size_t)(3 * cap)), *dst = malloc(sizeof(float) * (size_t)(3 * cap));
    double *coef = malloc(sizeof(double) * (size_t)(3 * (cap + 4)));
    double *W = malloc(sizeof(double) * (size_t)(3 * ns)), *Pt = calloc((size_t)(3 * nt) + 1, sizeof(double));
    double *Nt = malloc(sizeof(double) * (size_t)(3 * nt));
    if (!cen || !dst || !coef || !W || !Pt || !Nt) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = landmarks(s, t, lm_s, lm_t, L, cen, dst, err))) goto done;
    for (int64_t v = 0; v < nt; v++) fget(t->pos, v, Pt + 3 * v);
    vertex_normals(t->pos, nt, t->tri, t->nt, Nt);
    rc = correspond(s, t, Pt, Nt, lm_t, cen, dst, L, refine, &n, coef, W, tri_out, bary_out, &rd, NULL,
                    err);
    if (rounds) *rounds = rd;
done:
    free(cen), free(dst), free(coef), free(W), free(Pt), free(Nt);
    return rc;
}

double df__rt_size_ratio(const float *ls, const float *lt, int64_t L)
{
    double cs[3] = {0, 0, 0}, ct[3] = {0, 0, 0}, ss = 0, st = 0;
    for (int64_t i = 0; i < L; i++)
        for (int d = 0; d < 3; d++) cs[d] += ls[3 * i + d] / (double)L, ct[d] += lt[3 * i + d] / (double)L;
    for (int64_t i = 0; i < L; i++)
        for (int d = 0; d < 3; d++) {
            ss += (ls[3 * i + d] - cs[d]) * (ls[3 * i + d] - cs[d]);
            st += (lt[3 * i + d] - ct[d]) * (lt[3 * i + d] - ct[d]);
        }
    return ss > 0 && st > 0 ? sqrt(st / ss) : 1.0;
}

static int transfer(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                    const int32_t *lm_t, int64_t L, df__rt_transfer_t method, int local_frames,
                    int refine, float *out, int32_t *corr_tri, float *corr_bary, int *rounds_out,
                    const df__rt_progress_t *pg, df_error_t *err)
{
    int64_t ns = s->nv, nt = t->nv, M = s->M, cap = L + REFINE_SAMPLES, nc = L;
    int rc = DF_OK, rounds = 0;
    float *ls = malloc(sizeof(float) * (size_t)(3 * cap)), *lt = malloc(sizeof(float) * (size_t)(3 * cap));
    double *coef = malloc(sizeof(double) * (size_t)(3 * (cap + 4)));
    double *W = malloc(sizeof(double) * (size_t)(3 * ns)), *Pt = calloc((size_t)(3 * nt) + 1, sizeof(double));
    int32_t *ctri = malloc(sizeof(int32_t) * (size_t)(nt + t->nt));
    float *cbary = malloc(sizeof(float) * (size_t)(3 * (nt + t->nt)));
    uint8_t *pin = calloc((size_t)nt, 1);
    double *Ns = malloc(sizeof(double) * (size_t)(3 * ns)), *Nt = malloc(sizeof(double) * (size_t)(3 * nt));
    double *Pv = calloc((size_t)(3 * nt) + 1, sizeof(double)), *Nv = malloc(sizeof(double) * (size_t)(3 * nt));
    if (!ls || !lt || !coef || !W || !Pt || !ctri || !cbary || !Ns || !Nt || !pin || !Pv || !Nv) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = landmarks(s, t, lm_s, lm_t, L, ls, lt, err))) goto done;
    const double sg = df__rt_size_ratio(ls, lt, L);
    vertex_normals(s->pos, ns, s->tri, s->nt, Ns);
    vertex_normals(t->pos, nt, t->tri, t->nt, Nt);
    for (int64_t v = 0; v < nt; v++) fget(t->pos, v, Pt + 3 * v);
    if (method == DF_RT_NAIVE) { /* nearest source vertex, no warp */
        report(pg, "naive copy", 0);
        df_knn_t *grid = NULL;
        for (int64_t v = 0; v < ns; v++) fget(s->pos, v, W + 3 * v);
        if (df_knn_build(W, ns, &grid)) {
            rc = E_(DF_EINVAL, "naive copy: out of memory or a non-finite source vertex");
            goto done;
        }
        for (int64_t q = 0; q < nt; q++) {
            int64_t bi = 0; /* (a non-finite target vertex: the first) */
            double d2;
            df_knn_query(grid, Pt + 3 * q, 1, &bi, &d2);
            for (int64_t j = 0; j < M; j++)
                for (int d = 0; d < 3; d++)
                    out[(j * nt + q) * 3 + d] = s->deltas[(j * ns + bi) * 3 + d];
        }
        df_knn_free(&grid);
        report(pg, "naive copy", 1);
        goto done;
    }
    if (method == DF_RT_NAIVE_POINT) { /* the nearest point of the source surface, no warp */
        report(pg, "naive copy", 0);
        for (int64_t v = 0; v < ns; v++) fget(s->pos, v, W + 3 * v);
        if ((rc = df__rt_closest(W, ns, s->tri, s->nt, Pt, NULL, nt, ctri, cbary, err))) goto done;
        if (corr_tri) memcpy(corr_tri, ctri, sizeof(int32_t) * (size_t)nt);
        if (corr_bary) memcpy(corr_bary, cbary, sizeof(float) * (size_t)(3 * nt));
        if (rounds_out) *rounds_out = 0;
        for (int64_t q = 0; q < nt; q++) {
            const uint32_t *f = s->tri + 3 * ctri[q];
            const float *b = cbary + 3 * q;
            for (int64_t j = 0; j < M; j++)
                for (int d = 0; d < 3; d++)
                    out[(j * nt + q) * 3 + d] = b[0] * s->deltas[(j * ns + f[0]) * 3 + d] +
                                                b[1] * s->deltas[(j * ns + f[1]) * 3 + d] +
                                                b[2] * s->deltas[(j * ns + f[2]) * 3 + d];
        }
        report(pg, "naive copy", 1);
        goto done;
    }
    /* every target vertex's point on the warped source */
    report(pg, "correspondence", 0);
    if ((rc = correspond(s, t, Pt, Nt, lm_t, ls, lt, L, refine, &nc, coef, W, ctri, cbary, &rounds,
                         pg, err)))
        goto done;
    report(pg, "correspondence", 1);
    if (corr_tri) memcpy(corr_tri, ctri, sizeof(int32_t) * (size_t)nt);
    if (corr_bary) memcpy(corr_bary, cbary, sizeof(float) * (size_t)(3 * nt));
    if (rounds_out) *rounds_out = rounds;
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
        report(pg, "expression cloning", 0);
        for (int64_t q = 0; q < nt; q++) {
            if (q % 8192 == 8191) report(pg, "expression cloning", (double)q / (double)nt);
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
            df__rt_rbf_eval(ls, nc, coef, Pv + 3 * q, wx, J);
            double det = J[0] * (J[4] * J[8] - J[5] * J[7]) - J[1] * (J[3] * J[8] - J[5] * J[6]) +
                         J[2] * (J[3] * J[7] - J[4] * J[6]);
            double sc = cbrt(fabs(det));
            /* a folded warp: the landmarks' size ratio (units included),
             * and the normals' turn for the warp's frames */
            const int folded = !(sc > 0.1 * sg && sc < 10 * sg);
            if (folded) sc = sg;
            const int turned_over = folded || !(det > 0);
            if (local_frames == DF_RT_FRAMES_OFF) { /* the displacement as it is */
                sc = 1;
                for (int i = 0; i < 9; i++) R[i] = (i % 4 == 0);
            } else if (local_frames == DF_RT_FRAMES_SIMILARITY && !turned_over) {
                float Jf[9], Rf[9], Pf[9]; /* the warp's own turn: J's polar rotation */
                for (int i = 0; i < 9; i++) Jf[i] = (float)J[i];
                if (df_m33_polar(Jf, Rf, Pf) == 0)
                    for (int i = 0; i < 9; i++) R[i] = Rf[i];
            }
            /* the displaced source point through the warp itself */
            const int through = local_frames == DF_RT_FRAMES_WARP && !turned_over;
            for (int64_t j = 0; j < M; j++) {
                double m[3] = {0, 0, 0};
                for (int k = 0; k < 3; k++)
                    for (int d = 0; d < 3; d++) m[d] += b[k] * s->deltas[(j * ns + f[k]) * 3 + d];
                if (through) {
                    double x2[3], w2[3];
                    if (m[0] == 0 && m[1] == 0 && m[2] == 0) { /* most shapes move a region */
                        for (int d = 0; d < 3; d++) out[(j * nt + q) * 3 + d] = 0.0f;
                        continue;
                    }
                    for (int d = 0; d < 3; d++) x2[d] = Pv[3 * q + d] + m[d];
                    df__rt_rbf_eval(ls, nc, coef, x2, w2, NULL);
                    for (int d = 0; d < 3; d++) out[(j * nt + q) * 3 + d] = (float)(w2[d] - wx[d]);
                    continue;
                }
                for (int d = 0; d < 3; d++)
                    out[(j * nt + q) * 3 + d] =
                        (float)(sc * (R[3 * d] * m[0] + R[3 * d + 1] * m[1] + R[3 * d + 2] * m[2]));
            }
        }
        report(pg, "expression cloning", 1);
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
        report(pg, "deformation transfer: triangles' closest points", 0);
        rc = df__rt_closest(W, ns, s->tri, s->nt, C, CN, T2, ctri + nt, cbary + 3 * nt, err);
        if (!rc) report(pg, "deformation transfer: triangles' closest points", 1);
        free(C), free(CN);
        if (rc) goto done;
        rc = df__rt_deformation_transfer(s, t, ctri + nt, ctri, cbary, pin, out, pg, err);
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
                                const uint8_t *pin, float *out, const df__rt_progress_t *pg,
                                df_error_t *err)
{
    report(pg, "deformation transfer: factorising", 0);
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
    report(pg, "deformation transfer: factorising", 1);
    report(pg, "deformation transfer: gradients", 0);
    for (int64_t f = 0; f < T2; f++) {
        if (f % 16384 == 16383) report(pg, "deformation transfer: gradients", (double)f / (double)T2);
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
    report(pg, "deformation transfer: gradients", 1);
    report(pg, "deformation transfer: solving", 0);
    X = cholmod_solve(CHOLMOD_A, Lf, B, &cc);
    if (!X || cc.status != CHOLMOD_OK) {
        rc = E_(DF_ENUMERIC, "deformation transfer: solve failed (CHOLMOD status %d)", cc.status);
        goto done;
    }
    report(pg, "deformation transfer: solving", 1);
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

/* The target's frame against the source's: the rigid motion (R, t) taking
 * the target's landmarks onto the source's (Horn, uniform weights), the
 * angle it turns by, and whether it clearly differs (auto): a turn of more
 * than ALIGN_DEGREES. Two faces in one frame differ by a few degrees (T2:
 * 2.1) from their shapes alone; those are left as they are. A translation
 * alone changes nothing but the naive copies (the warp has an affine
 * part), and a target in other units sits far from the source's origin:
 * auto does not move for it. */
#define ALIGN_DEGREES 15.0

int df__rt_transfer(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                    const int32_t *lm_t, int64_t L, df__rt_transfer_t method, int local_frames,
                    int refine, df__rt_align_t align, double *turned, float *out,
                    int32_t *corr_tri, float *corr_bary, int *rounds, const df__rt_progress_t *pg,
                    df_error_t *err)
{
    if (turned) *turned = 0.0;
    if (align == DF_RT_ALIGN_NONE || L < 3)
        return transfer(s, t, lm_s, lm_t, L, method, local_frames, refine, out, corr_tri,
                        corr_bary, rounds, pg, err);
    float *ls = malloc(sizeof(float) * (size_t)(3 * L)), *lt = malloc(sizeof(float) * (size_t)(3 * L));
    float *w = malloc(sizeof(float) * (size_t)L), *P = NULL;
    int rc;
    if (!ls || !lt || !w) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = landmarks(s, t, lm_s, lm_t, L, ls, lt, err))) goto done;
    for (int64_t i = 0; i < L; i++) w[i] = 1.0f / (float)L;
    double R[9], tr[3];
    if (df__rt_rigid_align(lt, ls, w, L, 1, R, tr)) { /* the warp refuses these below */
        rc = transfer(s, t, lm_s, lm_t, L, method, local_frames, refine, out, corr_tri,
                      corr_bary, rounds, pg, err);
        goto done;
    }
    const double c = (R[0] + R[4] + R[8] - 1.0) / 2.0;
    const double deg = acos(c < -1.0 ? -1.0 : c > 1.0 ? 1.0 : c) * 180.0 / acos(-1.0);
    if (align == DF_RT_ALIGN_AUTO && !(deg > ALIGN_DEGREES)) {
        rc = transfer(s, t, lm_s, lm_t, L, method, local_frames, refine, out, corr_tri,
                      corr_bary, rounds, pg, err);
        goto done;
    }
    /* the transfer in the source's frame: the target moved by (R, t), its
     * shapes turned back by R' */
    if (!(P = malloc(sizeof(float) * (size_t)(3 * t->nv) + 1))) {
        rc = E_(DF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t v = 0; v < t->nv; v++) {
        double p[3];
        fget(t->pos, v, p);
        for (int a = 0; a < 3; a++)
            P[3 * v + a] = (float)(R[3 * a] * p[0] + R[3 * a + 1] * p[1] + R[3 * a + 2] * p[2] + tr[a]);
    }
    df__rt_mesh_t tm = *t;
    tm.pos = P;
    if ((rc = transfer(s, &tm, lm_s, lm_t, L, method, local_frames, refine, out, corr_tri, corr_bary,
                       rounds, pg, err)))
        goto done;
    for (int64_t k = 0; k < s->M * t->nv; k++) {
        float *o = out + 3 * k;
        const double x = o[0], y = o[1], z = o[2];
        for (int a = 0; a < 3; a++) o[a] = (float)(R[a] * x + R[3 + a] * y + R[6 + a] * z);
    }
    if (turned) *turned = deg;
done:
    free(ls), free(lt), free(w), free(P);
    return rc;
}

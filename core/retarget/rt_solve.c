/* rt_solve.c — the small dense solvers of the `retarget` kind: bounded
 * least squares on a Gram matrix prepared at load, Cholesky, and weighted
 * rigid alignment of marker sets.
 *
 * DESIGN
 * Everything is per pose, in double, on caller-provided work memory (the
 * kind's scratch): nothing allocates. The bounded solve is an active-set
 * method on the normal equations (see retarget.h for the algorithm and its
 * stopping rule); face performances are sparse (a few shapes active), so
 * the free set stays small and each step is a Cholesky of a few rows; the
 * gradient b - Gw costs m x nnz(w). Rigid alignment is Horn's closed form:
 * the rotation is the dominant eigenvector of a 4x4 symmetric matrix built
 * from the cross-covariance, always a proper rotation (no reflection
 * fix-up needed): its eigenvalue by Newton's method on the characteristic
 * polynomial and the eigenvector from the adjugate, cyclic Jacobi when the
 * eigenvalue is not simple (horn_rotation).
 */
#include "retarget/retarget.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* a.b with four partial sums: the compiler may not reorder a floating-point
 * reduction, and one accumulator is a chain of dependent FMAs */
static inline double dot(const double *a, const double *b, int64_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += a[k] * b[k];
        s1 += a[k + 1] * b[k + 1];
        s2 += a[k + 2] * b[k + 2];
        s3 += a[k + 3] * b[k + 3];
    }
    for (; k < n; k++) s0 += a[k] * b[k];
    return (s0 + s1) + (s2 + s3);
}

/* Right-looking (outer-product) Cholesky on the upper triangle U = L':
 * scaling a row and the trailing updates are independent, contiguous axpys
 * that vectorise, where the dot-product form is a chain of dependent
 * divisions and reductions. L gets U' at the end. */
int64_t df__rt_cholesky(const double *G, int64_t m, double min_pivot,
                        double *L)
{
    double *U = L; /* factor in place in the upper triangle, then transpose */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = i; j < m; j++) U[i * m + j] = G[i * m + j];
    for (int64_t k = 0; k < m; k++) {
        double *Uk = U + k * m;
        double d = Uk[k];
        if (!(d > min_pivot)) return k + 1;
        d = sqrt(d);
        Uk[k] = d;
        const double inv = 1.0 / d;
        for (int64_t j = k + 1; j < m; j++) Uk[j] *= inv;
        for (int64_t i = k + 1; i < m; i++) {
            const double uki = Uk[i];
            double *Ui = U + i * m;
            for (int64_t j = i; j < m; j++) Ui[j] -= uki * Uk[j];
        }
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < i; j++) {
            L[i * m + j] = U[j * m + i];
            U[j * m + i] = 0.0;
        }
    return 0;
}

void df__rt_chol_solve(const double *L, int64_t m, double *x)
{
    for (int64_t i = 0; i < m; i++) x[i] = (x[i] - dot(L + i * m, x, i)) / L[i * m + i];
    /* L' x = y by columns of L' (rows of L): contiguous updates */
    for (int64_t i = m - 1; i >= 0; i--) {
        const double *Li = L + i * m;
        double xi = x[i] /= Li[i];
        for (int64_t k = 0; k < i; k++) x[k] -= Li[k] * xi;
    }
}

/* ------------------------------------------------------------ bounded LS */

size_t df__rt_bvls_work(int64_t m)
{
    /* g, z, r: 3m; Gff, Lff: 2m^2; state, tried: 2m bytes; free and upper
     * index lists: 2m ints */
    return (size_t)(3 * m + 2 * m * m) + (size_t)(m * 2 + 7) / 8 + (size_t)m + 4;
}

typedef struct bv {
    const double *G, *b, *tol;
    int64_t m;
    double hi;
    double *w, *g, *z, *r, *Gff, *Lff;
    uint8_t *state, *tried;
    int32_t *F;
} bv_t;

/* z = the solution of the free variables' equations with the bound ones
 * at their bounds; F, *nf: the free variables. -1 when the free block is
 * not positive definite (rounding on a near-singular G). */
static int solve_free(bv_t *s, int64_t *nf_out)
{
    const int64_t m = s->m;
    int64_t nf = 0, nh = 0;
    int32_t *H = s->F + m; /* the variables at the upper bound */
    for (int64_t i = 0; i < m; i++) {
        if (s->state[i] == DF_RT_FREE) s->F[nf++] = (int32_t)i;
        else if (s->state[i] == DF_RT_AT_HI) H[nh++] = (int32_t)i;
    }
    *nf_out = nf;
    if (nf == 0) return 0;
    for (int64_t a = 0; a < nf; a++) {
        const double *Gi = s->G + (int64_t)s->F[a] * m;
        double v = s->b[s->F[a]];
        for (int64_t h = 0; h < nh; h++) v -= Gi[H[h]] * s->hi;
        s->r[a] = v;
        double *row = s->Gff + a * nf;
        for (int64_t c = 0; c < nf; c++) row[c] = Gi[s->F[c]];
    }
    if (df__rt_cholesky(s->Gff, nf, 0.0, s->Lff)) return -1;
    memcpy(s->z, s->r, (size_t)nf * sizeof(double));
    df__rt_chol_solve(s->Lff, nf, s->z);
    return 0;
}

/* g = b - G w over the non-zero w */
static void gradient(bv_t *s)
{
    const int64_t m = s->m;
    memcpy(s->g, s->b, (size_t)m * sizeof(double));
    for (int64_t j = 0; j < m; j++) {
        if (s->w[j] == 0.0) continue;
        const double wj = s->w[j], *Gj = s->G + j * m; /* G symmetric: row j */
        for (int64_t i = 0; i < m; i++) s->g[i] -= Gj[i] * wj;
    }
}

/* The active-set inner loop: from a feasible w, move to the free
 * subproblem's solution, stepping back to the first bound crossed and
 * fixing the variables that reach a bound, until the free solution is
 * feasible. best: the variable just freed (-1: none). Returns 1 when w
 * moved, 0 when not, -1 when best was put back (it would leave at once). */
static int inner(bv_t *s, int64_t best, uint8_t was)
{
    const int64_t m = s->m;
    const double hi = s->hi;
    double *w = s->w, *z = s->z;
    int progress = 0;
    for (int it = 0; it <= m; it++) {
        int64_t nf;
        if (solve_free(s, &nf)) {
            if (best >= 0 && it == 0) {
                s->state[best] = was;
                return -1;
            }
            return progress;
        }
        if (nf == 0) return progress;
        double alpha = 1.0;
        int64_t amin = -1;
        for (int64_t a = 0; a < nf; a++) {
            double wk = w[s->F[a]], zk = z[a], t;
            if (zk < 0.0) {
                t = wk / (wk - zk);
                if (t < alpha) alpha = t, amin = a;
            } else if (zk > hi) {
                t = (hi - wk) / (zk - wk);
                if (t < alpha) alpha = t, amin = a;
            }
        }
        if (alpha >= 1.0) {
            for (int64_t a = 0; a < nf; a++) w[s->F[a]] = z[a];
            return 1;
        }
        if (it == 0 && best >= 0 && alpha <= 0.0) {
            /* the variable just freed would leave at once (a numerical
             * tie): put it back */
            int64_t k;
            for (k = 0; k < nf && s->F[k] != best; k++) {}
            if (k < nf && (z[k] <= 0.0 || z[k] >= hi)) {
                s->state[best] = was;
                return -1;
            }
        }
        if (alpha < 0.0) alpha = 0.0;
        for (int64_t a = 0; a < nf; a++) {
            int64_t k = s->F[a];
            double wn = w[k] + alpha * (z[a] - w[k]);
            /* variables that reached a bound leave the free set (the one
             * that set alpha in any case, so the loop ends even when
             * rounding lands it a hair inside) */
            if (z[a] < 0.0 && (a == amin || wn <= 1e-14 * (1.0 + fabs(w[k])))) {
                w[k] = 0.0;
                s->state[k] = DF_RT_AT_LO;
            } else if (z[a] > hi && (a == amin || wn >= hi - 1e-14)) {
                w[k] = hi;
                s->state[k] = DF_RT_AT_HI;
            } else {
                w[k] = wn;
            }
        }
        progress = 1;
    }
    return progress;
}

/* Primal-dual active set (Hintermueller, Ito & Kunisch 2002) from the
 * given sets: solve with the sets, move violated primal variables to their
 * bound and bound variables with a wrong-signed gradient to the free set.
 * Returns 1 when the KKT conditions hold (w is the answer), 0 when it did
 * not settle within `rounds` (w is then left infeasible: the caller
 * projects it and goes on with the active-set loop). */
static int pdas(bv_t *s, int rounds)
{
    const int64_t m = s->m;
    const double hi = s->hi;
    for (int it = 0; it < rounds; it++) {
        int64_t nf;
        if (solve_free(s, &nf)) return 0;
        for (int64_t i = 0; i < m; i++)
            s->w[i] = s->state[i] == DF_RT_AT_HI ? hi : 0.0;
        for (int64_t a = 0; a < nf; a++) s->w[s->F[a]] = s->z[a];
        gradient(s);
        int changed = 0;
        for (int64_t i = 0; i < m; i++) {
            uint8_t st = s->state[i];
            if (st == DF_RT_FREE) {
                if (s->w[i] < 0.0) st = DF_RT_AT_LO;
                else if (s->w[i] > hi) st = DF_RT_AT_HI;
            } else if (st == DF_RT_AT_LO) {
                if (s->g[i] > s->tol[i]) st = DF_RT_FREE;
            } else if (s->g[i] < -s->tol[i]) {
                st = DF_RT_FREE;
            }
            changed |= st != s->state[i];
            s->state[i] = st;
        }
        if (!changed) return 1;
    }
    return 0;
}

int df__rt_bvls(const double *G, const double *L, const double *b, int64_t m,
                df__rt_bounds_t bounds, const double *tol, uint8_t *state_io, double *w,
                double *work)
{
    if (bounds == DF_RT_NONE) {
        memcpy(w, b, (size_t)m * sizeof(double));
        df__rt_chol_solve(L, m, w);
        return 1;
    }
    bv_t s;
    s.G = G, s.b = b, s.tol = tol, s.m = m, s.w = w;
    s.hi = bounds == DF_RT_UNIT ? 1.0 : INFINITY;
    s.g = work, s.z = s.g + m, s.r = s.z + m, s.Gff = s.r + m, s.Lff = s.Gff + m * m;
    s.state = (uint8_t *)(s.Lff + m * m), s.tried = s.state + m;
    s.F = (int32_t *)(((uintptr_t)(s.tried + m) + 3) & ~(uintptr_t)3);
    memset(s.tried, 0, (size_t)m);
    int warm = 0;
    if (state_io) {
        for (int64_t i = 0; i < m; i++) {
            uint8_t st = state_io[i];
            s.state[i] = st == DF_RT_AT_HI && s.hi == INFINITY ? DF_RT_AT_LO
                         : st <= DF_RT_FREE                    ? st
                                                               : DF_RT_AT_LO;
        }
        if (pdas(&s, 8)) {
            memcpy(state_io, s.state, (size_t)m);
            return 0;
        }
        /* project onto the box and continue from there */
        for (int64_t i = 0; i < m; i++) {
            if (s.state[i] == DF_RT_AT_LO || w[i] <= 0.0) {
                w[i] = 0.0;
                s.state[i] = DF_RT_AT_LO;
            } else if (s.state[i] == DF_RT_AT_HI || w[i] >= s.hi) {
                w[i] = s.hi;
                s.state[i] = DF_RT_AT_HI;
            }
        }
        warm = 1;
    } else {
        for (int64_t i = 0; i < m; i++) {
            w[i] = 0.0;
            s.state[i] = DF_RT_AT_LO;
        }
    }
    if (warm) inner(&s, -1, 0);
    const int64_t max_outer = 3 * m + 10;
    int64_t outer;
    for (outer = 0; outer < max_outer; outer++) {
        gradient(&s);
        /* the most violated KKT condition, relative to its tolerance */
        int64_t best = -1;
        double bv = 1.0;
        for (int64_t i = 0; i < m; i++) {
            if (s.state[i] == DF_RT_FREE || s.tried[i]) continue;
            double v = (s.state[i] == DF_RT_AT_LO ? s.g[i] : -s.g[i]) / tol[i];
            if (v > bv) {
                bv = v;
                best = i;
            }
        }
        if (best < 0) break; /* KKT conditions hold */
        const uint8_t was = s.state[best];
        s.state[best] = DF_RT_FREE;
        int rc = inner(&s, best, was);
        if (rc < 0)
            s.tried[best] = 1; /* not again until w moves */
        else if (rc > 0)
            memset(s.tried, 0, (size_t)m);
    }
    if (state_io) memcpy(state_io, s.state, (size_t)m);
    return (int)outer + 1;
}

/* -------------------------------------------------------- rigid alignment */

void df__rt_eig_sym(double *a, int64_t n, double *V)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) V[i * n + j] = i == j;
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0, diag = 0;
        for (int64_t i = 0; i < n; i++) {
            diag += a[i * n + i] * a[i * n + i];
            for (int64_t j = i + 1; j < n; j++) off += a[i * n + j] * a[i * n + j];
        }
        if (off <= 1e-30 * diag || off == 0.0) break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0.0) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) /
                           (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for (int64_t k = 0; k < n; k++) {
                    double vkp = V[k * n + p], vkq = V[k * n + q];
                    V[k * n + p] = c * vkp - s * vkq;
                    V[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
}

/* 3 x 3 determinant of rows a, b, c (each 3 values) */
static double det3(const double *a, const double *b, const double *c)
{
    return a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0]) +
           a[2] * (b[0] * c[1] - b[1] * c[0]);
}

/* cofactor (i, j) of the symmetric 4 x 4 A (row-major) */
static double cofactor4(const double *A, int i, int j)
{
    double r[3][3];
    for (int p = 0, rp = 0; p < 4; p++) {
        if (p == i) continue;
        for (int q = 0, rq = 0; q < 4; q++) {
            if (q == j) continue;
            r[rp][rq++] = A[p * 4 + q];
        }
        rp++;
    }
    const double d = det3(r[0], r[1], r[2]);
    return (i + j) & 1 ? -d : d;
}

/* Horn 1987: the rotation taking the points of cross-covariance S (x to y)
 * best onto each other is the unit quaternion (w, x, y, z) that is N's
 * dominant eigenvector. Its eigenvalue is the largest root of N's
 * characteristic polynomial lambda^4 + c2 lambda^2 + c1 lambda + c0 (N has
 * trace 0 and real eigenvalues): Newton from above it (sqrt 3 |S|_F bounds
 * every eigenvalue) descends onto it monotonically; the eigenvector is the
 * largest column of the adjugate of N - lambda I (rank 3 when the root is
 * simple). When the root is not simple or the eigenvector's residual is not
 * at rounding level, cyclic Jacobi on N decides (the general method). */
static void horn_rotation(const double S[9], double R[9])
{
    double Sxx = S[0], Sxy = S[1], Sxz = S[2], Syx = S[3], Syy = S[4], Syz = S[5], Szx = S[6],
           Szy = S[7], Szz = S[8];
    double N[16] = {Sxx + Syy + Szz, Syz - Szy, Szx - Sxz, Sxy - Syx,
                    Syz - Szy, Sxx - Syy - Szz, Sxy + Syx, Szx + Sxz,
                    Szx - Sxz, Sxy + Syx, -Sxx + Syy - Szz, Syz + Szy,
                    Sxy - Syx, Szx + Sxz, Syz + Szy, -Sxx - Syy + Szz};
    double f2 = 0;
    for (int i = 0; i < 9; i++) f2 += S[i] * S[i];
    double q[4] = {1, 0, 0, 0};
    int ok = 0;
    if (f2 > 0) {
        const double c2 = -2 * f2, c1 = -8 * det3(S, S + 3, S + 6);
        /* c0 = det N by the 2 x 2 minors of its first two rows */
        const double *n0 = N, *n1 = N + 4, *n2 = N + 8, *n3 = N + 12;
        const double a01 = n0[0] * n1[1] - n0[1] * n1[0], a02 = n0[0] * n1[2] - n0[2] * n1[0],
                     a03 = n0[0] * n1[3] - n0[3] * n1[0], a12 = n0[1] * n1[2] - n0[2] * n1[1],
                     a13 = n0[1] * n1[3] - n0[3] * n1[1], a23 = n0[2] * n1[3] - n0[3] * n1[2];
        const double b01 = n2[0] * n3[1] - n2[1] * n3[0], b02 = n2[0] * n3[2] - n2[2] * n3[0],
                     b03 = n2[0] * n3[3] - n2[3] * n3[0], b12 = n2[1] * n3[2] - n2[2] * n3[1],
                     b13 = n2[1] * n3[3] - n2[3] * n3[1], b23 = n2[2] * n3[3] - n2[3] * n3[2];
        const double c0 = a01 * b23 - a02 * b13 + a03 * b12 + a12 * b03 - a13 * b02 + a23 * b01;
        double l = sqrt(3 * f2);
        const double scale = l;
        for (int it = 0; it < 60; it++) {
            const double l2 = l * l;
            const double p = (l2 + c2) * l2 + c1 * l + c0, dp = (4 * l2 + 2 * c2) * l + c1;
            if (!(dp > 0)) break;
            const double step = p / dp;
            l -= step;
            if (fabs(step) <= 1e-15 * scale) {
                ok = 1;
                break;
            }
        }
        if (ok) {
            double A[16];
            memcpy(A, N, sizeof A);
            for (int i = 0; i < 4; i++) A[i * 5] -= l;
            int j = 0;
            double best = -1;
            for (int i = 0; i < 4; i++) {
                const double c = fabs(cofactor4(A, i, i));
                if (c > best) best = c, j = i;
            }
            double n = 0;
            for (int i = 0; i < 4; i++) {
                q[i] = cofactor4(A, i, j);
                n += q[i] * q[i];
            }
            n = sqrt(n);
            ok = n > 0;
            if (ok) {
                for (int i = 0; i < 4; i++) q[i] /= n;
                /* the eigenvector at rounding level: |A q| against |N| */
                double res = 0;
                for (int i = 0; i < 4; i++) {
                    double v = 0;
                    for (int k = 0; k < 4; k++) v += A[i * 4 + k] * q[k];
                    res += v * v;
                }
                ok = sqrt(res) <= 1e-11 * scale;
            }
        }
    }
    if (!ok) {
        double V[16];
        df__rt_eig_sym(N, 4, V);
        int k = 0;
        for (int i = 1; i < 4; i++)
            if (N[i * 4 + i] > N[k * 4 + k]) k = i;
        double n = 0;
        for (int i = 0; i < 4; i++) n += V[i * 4 + k] * V[i * 4 + k];
        n = sqrt(n);
        for (int i = 0; i < 4; i++) q[i] = V[i * 4 + k] / n;
    }
    const double qw = q[0], qx = q[1], qy = q[2], qz = q[3];
    R[0] = 1 - 2 * (qy * qy + qz * qz);
    R[1] = 2 * (qx * qy - qw * qz);
    R[2] = 2 * (qx * qz + qw * qy);
    R[3] = 2 * (qx * qy + qw * qz);
    R[4] = 1 - 2 * (qx * qx + qz * qz);
    R[5] = 2 * (qy * qz - qw * qx);
    R[6] = 2 * (qx * qz - qw * qy);
    R[7] = 2 * (qy * qz + qw * qx);
    R[8] = 1 - 2 * (qx * qx + qy * qy);
}

static void centroid(const float *x, const float *w, int64_t K, double c[3])
{
    c[0] = c[1] = c[2] = 0;
    for (int64_t i = 0; i < K; i++)
        for (int d = 0; d < 3; d++) c[d] += w[i] * (double)x[3 * i + d];
}

/* A sufficient test, from one pass of moments: with e1 >= e2 >= e3 the
 * eigenvalues of the weighted scatter, c1 = e1e2 + e1e3 + e2e3 <= 3 e1 e2
 * and tr >= e1, so c1 > 1e-8 tr^2 gives e2 > 3.3e-9 e1, far above the
 * 1e-10 of the exact test: rounding cannot decide it. 1: certainly not
 * degenerate; 0: ask the exact test. */
static int clearly_spread(const float *x, const float *w, int64_t K, double *spread)
{
    double s1[3] = {0, 0, 0}, s2[6] = {0, 0, 0, 0, 0, 0}, sw = 0;
    for (int64_t i = 0; i < K; i++) {
        const double wi = w[i], a = x[3 * i], b = x[3 * i + 1], c = x[3 * i + 2];
        sw += wi;
        s1[0] += wi * a, s1[1] += wi * b, s1[2] += wi * c;
        s2[0] += wi * a * a, s2[1] += wi * b * b, s2[2] += wi * c * c;
        s2[3] += wi * a * b, s2[4] += wi * a * c, s2[5] += wi * b * c;
    }
    if (spread) *spread = 0;
    if (!(sw > 0)) return 0;
    const double m0 = s1[0] / sw, m1 = s1[1] / sw, m2 = s1[2] / sw;
    const double xx = s2[0] / sw - m0 * m0, yy = s2[1] / sw - m1 * m1,
                 zz = s2[2] / sw - m2 * m2, xy = s2[3] / sw - m0 * m1,
                 xz = s2[4] / sw - m0 * m2, yz = s2[5] / sw - m1 * m2;
    const double tr = xx + yy + zz;
    if (spread) *spread = tr > 0 ? sqrt(tr) : 0;
    const double c1 = xx * yy - xy * xy + xx * zz - xz * xz + yy * zz - yz * yz;
    return tr > 0 && c1 > 1e-8 * tr * tr;
}

int df__rt_degenerate(const float *x, const float *w, int64_t K, double *spread)
{
    if (clearly_spread(x, w, K, spread)) return 0;
    double c[3], S[9] = {0}, V[9];
    centroid(x, w, K, c);
    for (int64_t i = 0; i < K; i++) {
        double d[3] = {x[3 * i] - c[0], x[3 * i + 1] - c[1], x[3 * i + 2] - c[2]};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) S[a * 3 + b] += w[i] * d[a] * d[b];
    }
    df__rt_eig_sym(S, 3, V);
    double e[3] = {S[0], S[4], S[8]}, t;
    /* sort descending */
    if (e[0] < e[1]) { t = e[0]; e[0] = e[1]; e[1] = t; }
    if (e[1] < e[2]) { t = e[1]; e[1] = e[2]; e[2] = t; }
    if (e[0] < e[1]) { t = e[0]; e[0] = e[1]; e[1] = t; }
    return !(e[0] > 0.0) || !(e[1] > 1e-10 * e[0]);
}

int df__rt_rigid_align(const float *x, const float *y, const float *w,
                       int64_t K, int check, double R[9], double t[3])
{
    if (check && (df__rt_degenerate(x, w, K, NULL) || df__rt_degenerate(y, w, K, NULL))) return -1;
    double cx[3], cy[3], S[9] = {0};
    centroid(x, w, K, cx);
    centroid(y, w, K, cy);
    for (int64_t i = 0; i < K; i++) {
        double a[3] = {x[3 * i] - cx[0], x[3 * i + 1] - cx[1], x[3 * i + 2] - cx[2]};
        double b[3] = {y[3 * i] - cy[0], y[3 * i + 1] - cy[1], y[3 * i + 2] - cy[2]};
        for (int p = 0; p < 3; p++)
            for (int q = 0; q < 3; q++) S[p * 3 + q] += w[i] * a[p] * b[q];
    }
    horn_rotation(S, R);
    for (int a = 0; a < 3; a++)
        t[a] = cy[a] - (R[3 * a] * cx[0] + R[3 * a + 1] * cx[1] + R[3 * a + 2] * cx[2]);
    return 0;
}

int df__rt_ref_init(df__rt_ref_t *ref, const float *y, const float *w, int64_t K)
{
    memset(ref, 0, sizeof *ref);
    ref->K = K;
    ref->w = w;
    ref->yc = malloc(sizeof(double) * (size_t)(3 * K));
    if (!ref->yc) return -1;
    centroid(y, w, K, ref->cy);
    for (int64_t i = 0; i < K; i++)
        for (int d = 0; d < 3; d++) {
            ref->yc[3 * i + d] = y[3 * i + d] - ref->cy[d];
            ref->syc[d] += w[i] * ref->yc[3 * i + d];
        }
    return 0;
}

void df__rt_ref_free(df__rt_ref_t *ref)
{
    free(ref->yc);
    ref->yc = NULL;
}

/* df__rt_rigid_align onto the prepared reference: the cross-covariance
 * sum w (x - cx)(y - cy)' as sum w x (y - cy)' - cx sum w (y - cy)' in one
 * pass over the points */
void df__rt_rigid_align_ref(const float *x, const df__rt_ref_t *ref, double R[9], double t[3])
{
    double cx[3] = {0, 0, 0}, S[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    const double *yc = ref->yc;
    for (int64_t i = 0; i < ref->K; i++) {
        const double wi = ref->w[i];
        const double a0 = wi * x[3 * i], a1 = wi * x[3 * i + 1], a2 = wi * x[3 * i + 2];
        const double b0 = yc[3 * i], b1 = yc[3 * i + 1], b2 = yc[3 * i + 2];
        cx[0] += a0, cx[1] += a1, cx[2] += a2;
        S[0] += a0 * b0, S[1] += a0 * b1, S[2] += a0 * b2;
        S[3] += a1 * b0, S[4] += a1 * b1, S[5] += a1 * b2;
        S[6] += a2 * b0, S[7] += a2 * b1, S[8] += a2 * b2;
    }
    for (int p = 0; p < 3; p++)
        for (int q = 0; q < 3; q++) S[p * 3 + q] -= cx[p] * ref->syc[q];
    horn_rotation(S, R);
    for (int a = 0; a < 3; a++)
        t[a] = ref->cy[a] - (R[3 * a] * cx[0] + R[3 * a + 1] * cx[1] + R[3 * a + 2] * cx[2]);
}

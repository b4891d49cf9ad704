/* rt_pdas.c — the fast path of the retarget kind's bounded solve: the
 * primal-dual active-set rounds of df__rt_bvls (the same start, the same
 * rule, the same stopping test, so the same answer) on an explicit inverse
 * of the free block, kept up to date across the rounds instead of a
 * Cholesky factorisation of every round's free block.
 *
 * DESIGN
 * M = inverse of G_FF (F: the free variables, in the order they were
 * freed) in a dense [m, P] array, P = m rounded up to 8 doubles, zero past
 * the free block within each row. Freeing variable a is bordering:
 * v = M G_Fa, d = G_aa - G_aF v (> 0: the Schur complement of a positive
 * definite matrix), M += v v'/d, new row and column -v/d, corner 1/d.
 * Binding the variable at position p is the rank-1 downdate
 * M -= M_p M_p' / M_pp, then the last row and column move into p. The
 * initial free block (the signs of the unconstrained solution) is built in
 * blocks of 4 (block bordering with a 4 x 4 Schur complement), so that
 * every row of M is loaded once per 4 variables. A round is then two
 * matrix-vector products (z = M r; g = b - G w over the free rows of G), no
 * factorisation: with about 28 of 55 variables free and ~25 set changes
 * per pose (noisy face markers), the rounds cost a fraction of the
 * Cholesky factorisations they replace.
 *
 * Numerics: G is SPD with condition numbers up to ~1e6 in use; the explicit
 * inverse after k updates carries a relative error of order k * cond * eps
 * (double): the decisions of a round (signs of z, KKT of g against tol)
 * are far above that. A pivot d <= 1e-13 G_aa (a free block numerically
 * singular) returns -1, and so do rounds that do not settle within the
 * primal-dual method's 8: the caller then runs df__rt_bvls from the same
 * start, which handles both (its active-set fallback).
 *
 * The inner loops run on vectors of 8 doubles (AVX-512 when the build has
 * it, plain C otherwise: the compiler vectorises what it can); nothing is
 * allocated.
 */
#include "retarget/retarget.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { BLK = 4, CW = 4 }; /* variables per block update; vectors per column chunk */

int64_t df__rt_pad(int64_t m) { return (m + 7) & ~(int64_t)7; }

size_t df__rt_pdas_work(int64_t m)
{
    const int64_t P = df__rt_pad(m);
    /* M; c, g, z, r, rh; V, W, C (blocks); three int lists */
    return (size_t)(m * P + 5 * P + 3 * BLK * P) + (size_t)((3 * m * 4 + 7) / 8) + 8;
}

#define AL(p) ((double *)__builtin_assume_aligned((p), 64))

/* a.b with 8 partial sums (a floating-point reduction is not reordered by
 * the compiler: one accumulator would be a chain of dependent adds) */
static inline double dot(const double *a, const double *b, int64_t n)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t t = 0;
    for (; t + 8 <= n; t += 8)
        for (int e = 0; e < 8; e++) acc[e] += a[t + e] * b[t + e];
    for (; t < n; t++) acc[0] += a[t] * b[t];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* W[l] = sign sum_{l2 < k} S[l][l2] V[l2] over len (rows of stride P) */
static inline void small_times(const double S[BLK][BLK], const double *V, int64_t P, int k,
                               int64_t len, double sign, double *W)
{
    const double *V0 = V, *V1 = V + P, *V2 = V + 2 * P, *V3 = V + 3 * P;
    for (int l = 0; l < k; l++) {
        double *Wl = W + l * P;
        const double s0 = sign * S[l][0], s1 = sign * S[l][1], s2 = sign * S[l][2],
                     s3 = sign * S[l][3];
        switch (k) {
        case 1:
            for (int64_t e = 0; e < len; e++) Wl[e] = s0 * V0[e];
            break;
        case 2:
            for (int64_t e = 0; e < len; e++) Wl[e] = s0 * V0[e] + s1 * V1[e];
            break;
        case 3:
            for (int64_t e = 0; e < len; e++) Wl[e] = s0 * V0[e] + s1 * V1[e] + s2 * V2[e];
            break;
        default:
            for (int64_t e = 0; e < len; e++)
                Wl[e] = s0 * V0[e] + s1 * V1[e] + s2 * V2[e] + s3 * V3[e];
        }
    }
}

/* ------------------------------------------------------------- kernels */

/* Y[l][0 .. 8 nv) = sum_{t < n} C[l][t] M[row t] for l < k <= BLK: rows of
 * stride P, row t is idx[t] (or t when idx is NULL). Each row of M is
 * loaded once for the k products. */
static inline void matvec_k(const double *M, int64_t P, const int32_t *idx, const double *C,
                            int64_t ldc, const int k, int64_t n, int64_t nv, double *Y,
                            int64_t ldy)
{
#if defined(__AVX512F__)
    for (int64_t v0 = 0; v0 < nv; v0 += CW) {
        const int64_t nc = nv - v0 < CW ? nv - v0 : CW;
        __m512d a[BLK][CW];
        for (int l = 0; l < k; l++)
            for (int e = 0; e < CW; e++) a[l][e] = _mm512_setzero_pd();
        for (int64_t t = 0; t < n; t++) {
            const double *Mt = M + (idx ? (int64_t)idx[t] : t) * P + 8 * v0;
            __m512d x[CW];
            for (int e = 0; e < CW; e++)
                x[e] = e < nc ? _mm512_load_pd(Mt + 8 * e) : _mm512_setzero_pd();
            for (int l = 0; l < k; l++) {
                const __m512d c = _mm512_set1_pd(C[l * ldc + t]);
                for (int e = 0; e < CW; e++) a[l][e] = _mm512_fmadd_pd(c, x[e], a[l][e]);
            }
        }
        for (int l = 0; l < k; l++)
            for (int e = 0; e < CW; e++)
                if (e < nc) _mm512_store_pd(Y + l * ldy + 8 * (v0 + e), a[l][e]);
    }
#else
    const int64_t len = 8 * nv;
    for (int l = 0; l < k; l++)
        for (int64_t e = 0; e < len; e++) Y[l * ldy + e] = 0.0;
    for (int64_t t = 0; t < n; t++) {
        const double *Mt = M + (idx ? (int64_t)idx[t] : t) * P;
        for (int l = 0; l < k; l++) {
            const double c = C[l * ldc + t];
            double *y = Y + l * ldy;
            for (int64_t e = 0; e < len; e++) y[e] += c * Mt[e];
        }
    }
#endif
}

/* M[i][0 .. 8 nv) += sum_{l < k} F[l][i] X[l] for rows i < n, k <= BLK:
 * one pass over M for k rank-1 updates */
static inline void rank_k(double *M, int64_t P, const double *F, int64_t ldf, const int k,
                          int64_t n, int64_t nv, const double *X, int64_t ldx)
{
#if defined(__AVX512F__)
    for (int64_t v0 = 0; v0 < nv; v0 += CW) {
        const int64_t nc = nv - v0 < CW ? nv - v0 : CW;
        __m512d x[BLK][CW];
        for (int l = 0; l < k; l++)
            for (int e = 0; e < CW; e++)
                x[l][e] = e < nc ? _mm512_load_pd(X + l * ldx + 8 * (v0 + e)) : _mm512_setzero_pd();
        for (int64_t i = 0; i < n; i++) {
            double *Mi = M + i * P + 8 * v0;
            __m512d acc[CW];
            for (int e = 0; e < CW; e++)
                acc[e] = e < nc ? _mm512_load_pd(Mi + 8 * e) : _mm512_setzero_pd();
            for (int l = 0; l < k; l++) {
                const __m512d f = _mm512_set1_pd(F[l * ldf + i]);
                for (int e = 0; e < CW; e++) acc[e] = _mm512_fmadd_pd(f, x[l][e], acc[e]);
            }
            for (int e = 0; e < CW; e++)
                if (e < nc) _mm512_store_pd(Mi + 8 * e, acc[e]);
        }
    }
#else
    const int64_t len = 8 * nv;
    for (int64_t i = 0; i < n; i++) {
        double *Mi = M + i * P;
        for (int l = 0; l < k; l++) {
            const double f = F[l * ldf + i];
            const double *x = X + l * ldx;
            for (int64_t e = 0; e < len; e++) Mi[e] += f * x[e];
        }
    }
#endif
}

/* the same with k a compile-time constant in each branch (the register
 * arrays above stay in registers) */
#define DISPATCH_K(k, call) \
    switch (k) {            \
    case 1: call(1); break; \
    case 2: call(2); break; \
    case 3: call(3); break; \
    default: call(4); break; \
    }

/* in-place inverse of a 4 x 4 SPD block (a k x k block padded with the
 * identity), by cofactors: one division and no chain of pivots (Gauss-
 * Jordan's four dependent divisions made it latency-bound). The pivots
 * Gauss-Jordan would take are the ratios of the leading principal minors
 * D1..D4; -1 when pivot p <= tiny[p], i.e. D(p+1) <= tiny[p] D(p) (D0 = 1),
 * checked without dividing. */
static int small_inverse(double S[BLK][BLK], const double *tiny, int k)
{
    (void)k;
    const double a00 = S[0][0], a01 = S[0][1], a02 = S[0][2], a03 = S[0][3];
    const double a10 = S[1][0], a11 = S[1][1], a12 = S[1][2], a13 = S[1][3];
    const double a20 = S[2][0], a21 = S[2][1], a22 = S[2][2], a23 = S[2][3];
    const double a30 = S[3][0], a31 = S[3][1], a32 = S[3][2], a33 = S[3][3];
    const double s0 = a00 * a11 - a10 * a01, s1 = a00 * a12 - a10 * a02,
                 s2 = a00 * a13 - a10 * a03, s3 = a01 * a12 - a11 * a02,
                 s4 = a01 * a13 - a11 * a03, s5 = a02 * a13 - a12 * a03;
    const double c5 = a22 * a33 - a32 * a23, c4 = a21 * a33 - a31 * a23,
                 c3 = a21 * a32 - a31 * a22, c2 = a20 * a33 - a30 * a23,
                 c1 = a20 * a32 - a30 * a22, c0 = a20 * a31 - a30 * a21;
    const double D3 = a20 * s3 - a21 * s1 + a22 * s0; /* leading 3 x 3 minor */
    const double det = s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0;
    if (!(a00 > tiny[0]) || !(s0 > tiny[1] * a00) || !(D3 > tiny[2] * s0) ||
        !(det > tiny[3] * D3))
        return -1;
    const double id = 1.0 / det;
    S[0][0] = (a11 * c5 - a12 * c4 + a13 * c3) * id;
    S[0][1] = (-a01 * c5 + a02 * c4 - a03 * c3) * id;
    S[0][2] = (a31 * s5 - a32 * s4 + a33 * s3) * id;
    S[0][3] = (-a21 * s5 + a22 * s4 - a23 * s3) * id;
    S[1][0] = (-a10 * c5 + a12 * c2 - a13 * c1) * id;
    S[1][1] = (a00 * c5 - a02 * c2 + a03 * c1) * id;
    S[1][2] = (-a30 * s5 + a32 * s2 - a33 * s1) * id;
    S[1][3] = (a20 * s5 - a22 * s2 + a23 * s1) * id;
    S[2][0] = (a10 * c4 - a11 * c2 + a13 * c0) * id;
    S[2][1] = (-a00 * c4 + a01 * c2 - a03 * c0) * id;
    S[2][2] = (a30 * s4 - a31 * s2 + a33 * s0) * id;
    S[2][3] = (-a20 * s4 + a21 * s2 - a23 * s0) * id;
    S[3][0] = (-a10 * c3 + a11 * c1 - a12 * c0) * id;
    S[3][1] = (a00 * c3 - a01 * c1 + a02 * c0) * id;
    S[3][2] = (-a30 * s3 + a31 * s1 - a32 * s0) * id;
    S[3][3] = D3 * id;
    return 0;
}

/* c[t] = g[idx[t]] for t < n (the free variables' entries of a row of G;
 * c may be written up to n rounded up to 8) */
static inline void gather(const double *g, const int32_t *idx, int64_t n, double *c)
{
    int64_t t = 0;
#if defined(__AVX512F__)
    for (; t + 8 <= n; t += 8)
        _mm512_storeu_pd(c + t, _mm512_i32gather_pd(_mm256_loadu_si256((const __m256i *)(idx + t)), g, 8));
#endif
    for (; t < n; t++) c[t] = g[idx[t]];
}

/* ------------------------------------------------- the explicit inverse */

typedef struct inv {
    const double *G; /* [m, P], rows padded with zeros */
    int64_t m, P;
    double *M;       /* [m, P]; rows < s: zero from column s on */
    double *V, *W, *C; /* [BLK, P] each */
    int32_t *F;      /* the free variables by position */
    int64_t s;       /* how many */
} inv_t;

/* free the j <= BLK variables A (block bordering with the j x j Schur
 * complement S = G_AA - G_AF M G_FA). -1: a pivot of S is numerically
 * zero (the free block would be singular) */
static int inv_add(inv_t *I, const int32_t *A, const int j)
{
    const int64_t s = I->s, P = I->P, nv = df__rt_pad(s + j) / 8, len = 8 * nv;
    double *M = AL(I->M), *V = AL(I->V), *W = AL(I->W), *C = AL(I->C);
    double S[BLK][BLK], tiny[BLK] = {0};
    for (int l = 0; l < BLK; l++)
        for (int l2 = 0; l2 < BLK; l2++) S[l][l2] = l == l2;
    for (int l = 0; l < j; l++) {
        const double *Gl = I->G + (int64_t)A[l] * P;
        double *Cl = C + l * P;
        gather(Gl, I->F, s, Cl);
        tiny[l] = 1e-13 * Gl[A[l]];
    }
    /* V_l = M G_{F,A_l}, zero from s on (M is) */
    if (s) {
#define MV(K) matvec_k(M, P, NULL, C, P, K, s, nv, V, P)
        DISPATCH_K(j, MV)
#undef MV
    } else {
        for (int l = 0; l < j; l++) memset(V + l * P, 0, (size_t)len * sizeof(double));
    }
    for (int l = 0; l < j; l++) {
        const double *Gl = I->G + (int64_t)A[l] * P, *Cl = C + l * P;
        for (int l2 = 0; l2 <= l; l2++)
            S[l][l2] = S[l2][l] = Gl[A[l2]] - dot(Cl, V + l2 * P, s);
    }
    if (small_inverse(S, tiny, j)) return -1;
    /* -e_l into V_l at s + l: the update of the old rows below then also
     * writes their new columns -(V' S^-1); W = S^-1 V */
    for (int l = 0; l < j; l++)
        for (int l2 = 0; l2 < j; l2++) V[l * P + s + l2] = l2 == l ? -1.0 : 0.0;
    small_times(S, V, P, j, len, 1.0, W);
    if (s) {
#define RK(K) rank_k(M, P, V, P, K, s, nv, W, P)
        DISPATCH_K(j, RK)
#undef RK
    }
    /* the new rows: -W_l (S^-1 at the corner), zero past them */
    for (int l = 0; l < j; l++) {
        double *Ml = M + (s + l) * P;
        const double *Wl = W + l * P;
        for (int64_t e = 0; e < len; e++) Ml[e] = -Wl[e];
        for (int64_t e = len; e < P; e++) Ml[e] = 0.0;
        I->F[s + l] = A[l];
    }
    I->s = s + j;
    return 0;
}

/* bind the variables at the k <= BLK positions D (distinct): the block
 * downdate M -= M_:D (M_DD)^-1 M_D:, then the last rows and columns move
 * into the holes. D is sorted in place (descending). -1: M_DD not
 * numerically positive definite */
static int inv_del(inv_t *I, int32_t *D, const int k)
{
    const int64_t s = I->s, P = I->P, nv = df__rt_pad(s) / 8, len = 8 * nv;
    double *M = AL(I->M), *V = AL(I->V), *W = AL(I->W);
    double T[BLK][BLK], tiny[BLK] = {0};
    for (int l = 0; l < BLK; l++)
        for (int l2 = 0; l2 < BLK; l2++) T[l][l2] = l == l2;
    for (int l = 0; l < k; l++) {
        memcpy(V + l * P, M + (int64_t)D[l] * P, (size_t)len * sizeof(double));
        for (int l2 = 0; l2 < k; l2++) T[l][l2] = M[(int64_t)D[l] * P + D[l2]];
        tiny[l] = 0.0;
    }
    if (small_inverse(T, tiny, k)) return -1;
    small_times(T, V, P, k, len, -1.0, W);
#define RK(K) rank_k(M, P, V, P, K, s, nv, W, P)
    DISPATCH_K(k, RK)
#undef RK
    for (int a = 1; a < k; a++) /* descending positions */
        for (int b = a; b > 0 && D[b] > D[b - 1]; b--) {
            const int32_t t = D[b];
            D[b] = D[b - 1], D[b - 1] = t;
        }
    int64_t n = s;
    for (int a = 0; a < k; a++) {
        const int64_t p = D[a], l = --n;
        /* every hole above p is filled: the last is not one to drop */
        if (p != l) {
            memcpy(M + p * P, M + l * P, (size_t)len * sizeof(double));
            for (int64_t i = 0; i < n; i++) M[i * P + p] = M[i * P + l];
            I->F[p] = I->F[l];
        }
        for (int64_t i = 0; i < n; i++) M[i * P + l] = 0.0;
    }
    I->s = n;
    return 0;
}

/* -------------------------------------------------------------- rounds */

int df__rt_pdas(const double *Gp, int64_t m, const double *b, df__rt_bounds_t bounds,
                const double *tol, uint8_t *state_io, double *w, double *work)
{
    const int64_t P = df__rt_pad(m);
    const double hi = bounds == DF_RT_UNIT ? 1.0 : INFINITY;
    inv_t I;
    I.G = Gp, I.m = m, I.P = P, I.s = 0;
    I.M = work;
    double *x = work + m * P;
    double *g = x, *z = x + P, *r = x + 2 * P, *rh = x + 3 * P;
    I.V = x + 5 * P, I.W = I.V + BLK * P, I.C = I.W + BLK * P;
    I.F = (int32_t *)(I.C + BLK * P);
    int32_t *add = I.F + m, *del = add + m;
    uint8_t *st = state_io;

    /* the starting free block */
    int64_t na = 0, nh = 0;
    for (int64_t i = 0; i < m; i++) {
        if (st[i] > DF_RT_FREE || (st[i] == DF_RT_AT_HI && hi == INFINITY)) st[i] = DF_RT_AT_LO;
        add[na] = (int32_t)i;
        na += st[i] == DF_RT_FREE;
        nh += st[i] == DF_RT_AT_HI;
    }
    for (int64_t a = 0; a < na; a += BLK)
        if (inv_add(&I, add + a, na - a < BLK ? (int)(na - a) : BLK)) return -1;

    for (int round = 0; round < 8; round++) {
        const int64_t s = I.s, nv = df__rt_pad(s) / 8;
        /* the variables at the upper bound: rh = hi sum_h G_h */
        if (nh) {
            memset(rh, 0, (size_t)P * sizeof(double));
            for (int64_t h = 0; h < m; h++) {
                if (st[h] != DF_RT_AT_HI) continue;
                const double *Gh = Gp + h * P;
                for (int64_t e = 0; e < P; e++) rh[e] += hi * Gh[e];
            }
        }
        /* z: the free block's solution with the others at their bounds */
        for (int64_t a = 0; a < s; a++) r[a] = b[I.F[a]] - (nh ? rh[I.F[a]] : 0.0);
        if (s) matvec_k(AL(I.M), P, NULL, r, P, 1, s, nv, z, P);
        /* the gradient g = b - G w (G symmetric: its rows F) */
        if (s)
            matvec_k(Gp, P, I.F, z, P, 1, s, P / 8, g, P);
        else
            memset(g, 0, (size_t)P * sizeof(double));
        for (int64_t i = 0; i < m; i++) g[i] = b[i] - g[i] - (nh ? rh[i] : 0.0);
        /* the new sets (branch-free: the sets are random): bound variables
         * whose KKT condition fails are freed, free variables out of the
         * box are bound */
        na = 0;
        for (int64_t i = 0; i < m; i++) {
            const int lo = st[i] == DF_RT_AT_LO, up = st[i] == DF_RT_AT_HI;
            add[na] = (int32_t)i;
            na += (lo & (g[i] > tol[i])) | (up & (g[i] < -tol[i]));
        }
        int64_t nd = 0;
        for (int64_t a = 0; a < s; a++) {
            del[nd] = (int32_t)a;
            nd += (z[a] < 0.0) | (z[a] > hi);
        }
        if (!na && !nd) {
            for (int64_t i = 0; i < m; i++) w[i] = st[i] == DF_RT_AT_HI ? hi : 0.0;
            for (int64_t a = 0; a < s; a++) w[I.F[a]] = z[a];
            return round + 1;
        }
        for (int64_t k = 0; k < nd; k++) {
            const double za = z[del[k]];
            const uint8_t to = za < 0.0 ? DF_RT_AT_LO : DF_RT_AT_HI;
            st[I.F[del[k]]] = to;
            nh += to == DF_RT_AT_HI;
        }
        /* bind in blocks; the positions left to bind are found again after
         * each block (the moves renumber them) */
        while (nd > 0) {
            const int k = nd < BLK ? (int)nd : BLK;
            if (inv_del(&I, del, k)) return -1;
            nd = 0;
            for (int64_t a = 0; a < I.s; a++) {
                del[nd] = (int32_t)a;
                nd += st[I.F[a]] != DF_RT_FREE;
            }
        }
        for (int64_t k = 0; k < na; k++) {
            nh -= st[add[k]] == DF_RT_AT_HI;
            st[add[k]] = DF_RT_FREE;
        }
        for (int64_t a = 0; a < na; a += BLK)
            if (inv_add(&I, add + a, na - a < BLK ? (int)(na - a) : BLK)) return -1;
    }
    return -1;
}

/* decompose_solve.c — the two alternating least-squares steps and the exact
 * error of the current fit (paper §3).
 *
 * DESIGN
 *  - Everything that touches all vertices and all frames is BLAS level 3:
 *    Z = X·Y gives every vertex's right-hand side for every bone at once;
 *    M = YᵀY gives every bone pair's Σ_p T_jᵀT_k, so a vertex's Gram matrix
 *    for candidate bones j, k is ṽᵀ M_jk ṽ (16 flops, independent of F).
 *  - Weights step: per vertex, a convex QP over C candidate bones (active
 *    set on the probability simplex, ≤ K free variables, warm-started from
 *    the current weights so the error never increases). Candidates are the
 *    vertex's current influences, the initial clusters of its welded
 *    1-ring (welding makes seams and split pieces see each other), then the
 *    bones that fit the vertex best on their own.
 *  - Transforms step: for fixed weights the design matrix A [N, 4B] (row i:
 *    w_ij ṽ_iᵀ in bone j's block) is the same for every frame, so the 4Bx4B
 *    normal matrix AᵀA is factorised once (LAPACK dposv) for the 3F
 *    right-hand sides XᵀA. Workers accumulate AᵀA and XᵀA over their vertex
 *    blocks (dsyrk/dgemm into per-worker buffers), reduced before the solve. A tiny ridge towards the previous transforms
 *    keeps bones with no or coplanar support well posed.
 */
#include "decompose/decompose_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a,
                   const int *lda, double *b, const int *ldb, int *info);

#define MAXC 32 /* candidate bones per vertex (opts clamp to this) */

static void z_body(void *arg, int64_t i0, int64_t i1, int worker)
{
    df__dc_t *d = arg;
    const int F3 = (int)(3 * d->F), B4 = 4 * d->B;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(i1 - i0), B4, F3, 1.0,
                d->X + (size_t)i0 * F3, F3, d->Y, B4, 0.0, d->Z + (size_t)i0 * B4, B4);
}

/* Z = X·Y by row blocks on the workers (the caller keeps OpenBLAS itself
 * single-threaded: one owner of the cores); M = YᵀY is small. */
void df__dc_update_zm(df__dc_t *d)
{
    const int F3 = (int)(3 * d->F), B4 = 4 * d->B;
    df__dc_pfor(d, d->N, z_body, d);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, B4, F3, 1.0, d->Y, B4,
                0.0, d->M, B4);
    for (int a = 0; a < B4; a++)
        for (int b = 0; b < a; b++) d->M[(size_t)a * B4 + b] = d->M[(size_t)b * B4 + a];
}

static inline double quad(const double *M, int B4, const double *v, int j,
                          int k)
{
    const double *m = M + (size_t)(4 * j) * B4 + 4 * k;
    double s = 0;
    for (int a = 0; a < 4; a++) {
        const double *row = m + (size_t)a * B4;
        s += v[a] * (row[0] * v[0] + row[1] * v[1] + row[2] * v[2] + row[3] * v[3]);
    }
    return s;
}

/* Cholesky of the n x n matrix a (lower, in place). 0 on failure. */
static int chol(int n, double *a)
{
    for (int j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (int k = 0; k < j; k++) s -= a[j * n + k] * a[j * n + k];
        if (!(s > 0)) return 0;
        s = sqrt(s);
        a[j * n + j] = s;
        for (int i = j + 1; i < n; i++) {
            double t = a[i * n + j];
            for (int k = 0; k < j; k++) t -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = t / s;
        }
    }
    return 1;
}

static void chol_solve(int n, const double *l, double *x)
{
    for (int i = 0; i < n; i++) {
        double t = x[i];
        for (int k = 0; k < i; k++) t -= l[i * n + k] * x[k];
        x[i] = t / l[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double t = x[i];
        for (int k = i + 1; k < n; k++) t -= l[k * n + i] * x[k];
        x[i] = t / l[i * n + i];
    }
}

/* min ½zᵀGz - cᵀz on the free set P subject to Σz = 1: z = a + μb with
 * a = G⁻¹c, b = G⁻¹1 (eq = 0: no equality, z = a). */
static int solve_eqp(int n, const double *G, const double *c, const int *P,
                     int np, double *z, int eq)
{
    double L[DF_DECOMPOSE_MAX_INFLUENCES * DF_DECOMPOSE_MAX_INFLUENCES];
    double a[DF_DECOMPOSE_MAX_INFLUENCES], b[DF_DECOMPOSE_MAX_INFLUENCES];
    double dmax = 0;
    for (int k = 0; k < np; k++) dmax = fmax(dmax, G[P[k] * n + P[k]]);
    double ridge = 1e-13 * dmax + 1e-300;
    for (int attempt = 0; attempt < 6; attempt++, ridge *= 100) {
        for (int r = 0; r < np; r++)
            for (int s = 0; s < np; s++)
                L[r * np + s] = G[P[r] * n + P[s]] + (r == s ? ridge : 0);
        if (!chol(np, L)) continue;
        for (int k = 0; k < np; k++) { a[k] = c[P[k]]; b[k] = 1; }
        chol_solve(np, L, a);
        if (!eq) {
            for (int k = 0; k < np; k++) z[k] = a[k];
            return 1;
        }
        chol_solve(np, L, b);
        double sa = 0, sb = 0;
        for (int k = 0; k < np; k++) { sa += a[k]; sb += b[k]; }
        if (!(sb > 0)) continue;
        double mu = (1 - sa) / sb;
        for (int k = 0; k < np; k++) z[k] = a[k] + mu * b[k];
        return 1;
    }
    return 0;
}

/* Active set on the simplex with at most kmax free variables. w (length n)
 * is a feasible start and receives the result; the objective never rises
 * above the start's. eq = 0: only w >= 0 (NNLS; the paper-style soft
 * sum-to-one row is then folded into G and c by the caller). */
static void qp_simplex(int n, const double *G, const double *c, double *w,
                       int kmax, int eq)
{
    int P[DF_DECOMPOSE_MAX_INFLUENCES], np = 0, in[MAXC];
    double z[DF_DECOMPOSE_MAX_INFLUENCES];
    double dmax = 0;
    for (int j = 0; j < n; j++) dmax = fmax(dmax, G[j * n + j]);
    const double tol = 1e-14 * (1 + dmax);
    for (int j = 0; j < n; j++) {
        in[j] = 0;
        if (w[j] > 0 && np < kmax) { P[np++] = j; in[j] = 1; }
        else w[j] = 0;
    }
    for (int it = 0; it < 4 * n + 16 && np > 0; it++) {
        if (!solve_eqp(n, G, c, P, np, z, eq)) break;
        int feasible = 1;
        for (int k = 0; k < np; k++)
            if (z[k] <= 0) { feasible = 0; break; }
        if (feasible) {
            for (int k = 0; k < np; k++) w[P[k]] = z[k];
            if (np >= kmax) break;
            double g[MAXC], mu = 0;
            for (int j = 0; j < n; j++) {
                double s = -c[j];
                for (int k = 0; k < np; k++) s += G[j * n + P[k]] * w[P[k]];
                g[j] = s;
            }
            if (eq) {
                for (int k = 0; k < np; k++) mu += g[P[k]];
                mu /= np;
            }
            int best = -1;
            double lmin = -tol;
            for (int j = 0; j < n; j++)
                if (!in[j] && g[j] - mu < lmin) { lmin = g[j] - mu; best = j; }
            if (best < 0) break;
            P[np++] = best;
            in[best] = 1;
        } else {
            /* move towards z until the first free variable reaches 0 */
            double alpha = 1;
            int hit = -1;
            for (int k = 0; k < np; k++) {
                double wk = w[P[k]];
                if (z[k] <= 0) {
                    double a = wk / (wk - z[k]);
                    if (a < alpha) { alpha = a; hit = k; }
                }
            }
            for (int k = 0; k < np; k++) w[P[k]] += alpha * (z[k] - w[P[k]]);
            if (hit >= 0) w[P[hit]] = 0;
            int m = 0;
            for (int k = 0; k < np; k++) {
                if (w[P[k]] > 1e-15) P[m++] = P[k];
                else { w[P[k]] = 0; in[P[k]] = 0; }
            }
            np = m;
        }
    }
    if (!eq) return;
    /* renormalise (guards drift) */
    double s = 0;
    for (int j = 0; j < n; j++) s += w[j];
    if (s > 0)
        for (int j = 0; j < n; j++) w[j] /= s;
}

static void weights_body(void *arg, int64_t i0, int64_t i1, int worker)
{
    df__dc_t *d = arg;
    df__dc_worker_t *wk = &d->wk[worker];
    const int B = d->B, K = d->K, C = d->C, B4 = 4 * B;
    double *e = wk->e, *cz = wk->cz;
    int32_t *order = wk->order;
    double G[MAXC * MAXC], cc[MAXC], wc[MAXC];
    int cand[MAXC];
    for (int64_t i = i0; i < i1; i++) {
        const double *v = d->V + 4 * i, *z = d->Z + (size_t)i * B4;
        int32_t *idx = d->idx + i * K;
        double *w = d->w + i * K;
        for (int j = 0; j < B; j++) {
            const double *zj = z + 4 * j;
            cz[j] = v[0] * zj[0] + v[1] * zj[1] + v[2] * zj[2] + v[3] * zj[3];
            e[j] = quad(d->M, B4, v, j, j) - 2 * cz[j];
        }
        /* priorities: current support, then welded-neighbourhood clusters */
        for (int k = 0; k < K; k++)
            if (idx[k] >= 0 && w[k] > 0) e[idx[k]] -= 4e30;
        int32_t g = d->rep[i];
        int cl = d->cluster[g];
        if (e[cl] > -1e30) e[cl] -= 1e30;
        for (int64_t a = d->adj_off[g]; a < d->adj_off[g + 1]; a++) {
            int cn = d->cluster[d->adj[a]];
            if (e[cn] > -1e30) e[cn] -= 1e30;
        }
        /* C smallest keys by insertion into a sorted list */
        int nc = 0;
        for (int j = 0; j < B; j++) {
            if (nc == C && e[j] >= e[order[nc - 1]]) continue;
            int p = nc < C ? nc++ : C - 1;
            while (p > 0 && e[order[p - 1]] > e[j]) { order[p] = order[p - 1]; p--; }
            order[p] = j;
        }
        for (int a = 0; a < nc; a++) {
            cand[a] = order[a];
            cc[a] = cz[cand[a]];
            wc[a] = 0;
        }
        for (int a = 0; a < nc; a++)
            for (int b = a; b < nc; b++)
                G[a * nc + b] = G[b * nc + a] = quad(d->M, B4, v, cand[a], cand[b]);
        double ws = 0;
        for (int k = 0; k < K; k++) {
            if (idx[k] < 0 || !(w[k] > 0)) continue;
            for (int a = 0; a < nc; a++)
                if (cand[a] == idx[k]) { wc[a] = w[k]; ws += w[k]; }
        }
        if (!(ws > 0)) { /* no usable start: the best single bone */
            int best = 0;
            for (int a = 1; a < nc; a++)
                if (G[a * nc + a] - 2 * cc[a] < G[best * nc + best] - 2 * cc[best]) best = a;
            wc[best] = 1;
        } else {
            for (int a = 0; a < nc; a++) wc[a] /= ws;
        }
        const int eq = !(d->o.sum_penalty > 0);
        if (!eq) { /* paper style: Σw = 1 as one more least-squares row */
            double lam = 0;
            for (int a = 0; a < nc; a++) lam += G[a * nc + a];
            lam *= d->o.sum_penalty / nc;
            for (int a = 0; a < nc; a++) {
                cc[a] += lam;
                for (int b = 0; b < nc; b++) G[a * nc + b] += lam;
            }
        }
        qp_simplex(nc, G, cc, wc, K, eq);
        /* store by decreasing weight */
        int m = 0;
        for (int k = 0; k < K; k++) { idx[k] = -1; w[k] = 0; }
        for (int a = 0; a < nc; a++) {
            if (!(wc[a] > 0)) continue;
            if (m == K) continue; /* cannot happen: the QP keeps <= K */
            int p = m++;
            while (p > 0 && w[p - 1] < wc[a]) { w[p] = w[p - 1]; idx[p] = idx[p - 1]; p--; }
            w[p] = wc[a];
            idx[p] = cand[a];
        }
    }
}

void df__dc_weights_step(df__dc_t *d)
{
    df__dc_update_zm(d);
    df__dc_pfor(d, d->N, weights_body, d);
}

/* Builds rows i0..i1 of the design matrix A and adds their share of the
 * normal matrix AᵀA and right-hand side XᵀA into this worker's buffers. */
static void design_body(void *arg, int64_t i0, int64_t i1, int worker)
{
    df__dc_t *d = arg;
    const int B4 = 4 * d->B, K = d->K, F3 = (int)(3 * d->F);
    double *G = d->wk[worker].acc, *R = G + (size_t)B4 * B4;
    for (int64_t i = i0; i < i1; i++) {
        double *a = d->A + (size_t)i * B4;
        memset(a, 0, sizeof(double) * B4);
        const double *v = d->V + 4 * i;
        for (int k = 0; k < K; k++) {
            int j = d->idx[i * K + k];
            if (j < 0) continue;
            double wv = d->w[i * K + k];
            for (int s = 0; s < 4; s++) a[4 * j + s] += wv * v[s];
        }
    }
    const double *A = d->A + (size_t)i0 * B4;
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, B4, (int)(i1 - i0), 1.0, A, B4, 1.0, G, B4);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, F3, B4, (int)(i1 - i0), 1.0,
                d->X + (size_t)i0 * F3, F3, A, B4, 1.0, R, B4);
}

/* Rigid / trs transforms of one frame by block coordinate descent: for
 * bone j with the others fixed, E_j(T) = tr(T P_jj Tᵀ) - 2 tr(T Bᵀ) + c
 * with P_jk = Σ_i w_ij w_ik ṽ_i ṽ_iᵀ (the 4x4 blocks of AᵀA, the same for
 * every frame) and B = R_j^p - Σ_{k≠j} T_k P_kj (R = XᵀA). Writing
 * P_jj = [[S, m], [mᵀ, n]] and T = [L | t], the best t is (b - L m)/n and
 * what is left is max tr(L K) over L = s R with K = Bvᵀ - m bᵀ/n: Horn's
 * rotation of K (a weighted Procrustes problem), and for trs the scale
 * s = tr(R K) / tr(S - m mᵀ/n). Each update is the exact minimiser for
 * its bone, so the frame's error never rises. */
void df__dc_bone_procrustes(const double P[16], const double Bm[12], int trs,
                            const double Lprev[9], double T[12])
{
    const double n = P[15];
    double m[3] = {P[3], P[7], P[11]}, b[3], K[9], trS = 0, L[9];
    for (int r = 0; r < 3; r++) b[r] = Bm[4 * r + 3];
    /* K[u][s] = Bv[s][u] - m_u b_s / n */
    for (int u = 0; u < 3; u++)
        for (int s = 0; s < 3; s++) K[3 * u + s] = Bm[4 * s + u] - m[u] * b[s] / n;
    for (int u = 0; u < 3; u++) trS += P[5 * u] - m[u] * m[u] / n;
    if (trS > 1e-12 * (P[0] + P[5] + P[10]) + 1e-300) {
        df__dc_best_rotation(K, L);
        if (trs) {
            double trk = 0; /* tr(L K) */
            for (int u = 0; u < 3; u++)
                for (int s = 0; s < 3; s++) trk += L[3 * u + s] * K[3 * s + u];
            double sc = trk / trS;
            if (!(sc > 1e-6)) sc = 1e-6; /* keep L a positive multiple of R */
            for (int q = 0; q < 9; q++) L[q] *= sc;
        }
    } else { /* all of the bone's weight on one point: keep L */
        memcpy(L, Lprev, sizeof L);
    }
    for (int r = 0; r < 3; r++) {
        T[4 * r] = L[3 * r]; T[4 * r + 1] = L[3 * r + 1]; T[4 * r + 2] = L[3 * r + 2];
        T[4 * r + 3] = (b[r] - (L[3 * r] * m[0] + L[3 * r + 1] * m[1] + L[3 * r + 2] * m[2])) / n;
    }
}

typedef struct proc_ctx {
    df__dc_t *d;
    const double *G; /* AᵀA, full symmetric [4B x 4B] */
    const double *R; /* XᵀA [3F x 4B] */
} proc_ctx_t;

static void procrustes_body(void *arg, int64_t p0, int64_t p1, int worker)
{
    const proc_ctx_t *c = arg;
    df__dc_t *d = c->d;
    const int B = d->B, B4 = 4 * B;
    const int trs = d->o.transforms == DF_DECOMPOSE_TRS;
    const int sweeps = d->o.transform_sweeps > 0 ? d->o.transform_sweeps : 3;
    double tr_all = 0;
    for (int a = 0; a < B4; a++) tr_all += c->G[(size_t)a * B4 + a];
    for (int64_t p = p0; p < p1; p++) {
        double *Y = d->Y + (size_t)(3 * p) * B4; /* rows 3p..3p+2 */
        const double *Rp = c->R + (size_t)(3 * p) * B4;
        for (int sw = 0; sw < sweeps; sw++)
            for (int j = 0; j < B; j++) {
                const double *Pjj = c->G + (size_t)(4 * j) * B4 + 4 * j;
                const double n = Pjj[3 * B4 + 3];
                if (!(n > 1e-14 * (tr_all / B4 + 1e-300))) continue; /* unused bone */
                /* Bm (3x4) = R_j^p - Σ_{k≠j} T_k P_kj */
                double Bm[12];
                for (int r = 0; r < 3; r++)
                    for (int s = 0; s < 4; s++) Bm[4 * r + s] = Rp[(size_t)r * B4 + 4 * j + s];
                for (int k = 0; k < B; k++) {
                    if (k == j) continue;
                    const double *Pkj = c->G + (size_t)(4 * k) * B4 + 4 * j;
                    for (int r = 0; r < 3; r++) {
                        const double *t = Y + (size_t)r * B4 + 4 * k;
                        if (t[0] == 0 && t[1] == 0 && t[2] == 0 && t[3] == 0) continue;
                        for (int s = 0; s < 4; s++)
                            Bm[4 * r + s] -= t[0] * Pkj[s] + t[1] * Pkj[B4 + s] +
                                             t[2] * Pkj[2 * B4 + s] + t[3] * Pkj[3 * B4 + s];
                    }
                }
                double P[16], T[12], Lp[9];
                for (int u = 0; u < 4; u++)
                    for (int s = 0; s < 4; s++) P[4 * u + s] = Pjj[(size_t)u * B4 + s];
                for (int r = 0; r < 3; r++)
                    for (int s = 0; s < 3; s++) Lp[3 * r + s] = Y[(size_t)r * B4 + 4 * j + s];
                df__dc_bone_procrustes(P, Bm, trs, Lp, T);
                for (int r = 0; r < 3; r++)
                    for (int s = 0; s < 4; s++) Y[(size_t)r * B4 + 4 * j + s] = T[4 * r + s];
            }
    }
}

int df__dc_transforms_step(df__dc_t *d, df_error_t *err)
{
    const int F3 = (int)(3 * d->F), B4 = 4 * d->B;
    const size_t accn = (size_t)B4 * B4 + (size_t)F3 * B4;
    for (int t = 0; t < d->nw; t++) memset(d->wk[t].acc, 0, sizeof(double) * accn);
    df__dc_pfor(d, d->N, design_body, d);
    double *G = malloc(sizeof(double) * B4 * B4);
    double *G0 = malloc(sizeof(double) * B4 * B4);
    double *R = malloc(sizeof(double) * F3 * B4);
    double *R0 = malloc(sizeof(double) * F3 * B4);
    if (!G || !G0 || !R || !R0) {
        free(G); free(G0); free(R); free(R0);
        return df_error_set(err, DF_ENOMEM, "decompose: out of memory (transforms step)");
    }
    /* column-major view: G is symmetric (lower = row-major upper), R is
     * the 4B x 3F right-hand side block */
    memcpy(G0, d->wk[0].acc, sizeof(double) * B4 * B4);
    memcpy(R0, d->wk[0].acc + (size_t)B4 * B4, sizeof(double) * F3 * B4);
    for (int t = 1; t < d->nw; t++) {
        const double *g = d->wk[t].acc, *r = g + (size_t)B4 * B4;
        for (size_t q = 0; q < (size_t)B4 * B4; q++) G0[q] += g[q];
        for (size_t q = 0; q < (size_t)F3 * B4; q++) R0[q] += r[q];
    }
    int rc = DF_OK;
    if (d->o.transforms != DF_DECOMPOSE_AFFINE) {
        for (int a = 0; a < B4; a++) /* dsyrk filled the (row-major) upper half */
            for (int b = 0; b < a; b++) G0[(size_t)a * B4 + b] = G0[(size_t)b * B4 + a];
        proc_ctx_t c = {d, G0, R0};
        df__dc_pfor(d, d->F, procrustes_body, &c);
        free(G); free(G0); free(R); free(R0);
        return DF_OK;
    }
    double tr = 0;
    for (int a = 0; a < B4; a++) tr += G0[(size_t)a * B4 + a];
    double lam = 1e-11 * tr / B4 + 1e-300;
    for (int attempt = 0;; attempt++, lam *= 1000) {
        memcpy(G, G0, sizeof(double) * B4 * B4);
        for (int a = 0; a < B4; a++) G[(size_t)a * B4 + a] += lam;
        for (int q = 0; q < F3; q++)
            for (int a = 0; a < B4; a++)
                R[(size_t)q * B4 + a] = R0[(size_t)q * B4 + a] + lam * d->Y[(size_t)q * B4 + a];
        int n = B4, nrhs = F3, info = 0;
        dposv_("L", &n, &nrhs, G, &n, R, &n, &info);
        if (info == 0) break;
        if (info < 0 || attempt >= 4) {
            rc = df_error_set(err, DF_ENUMERIC,
                              "decompose: transforms normal matrix not positive "
                              "definite (LAPACK dposv info %d)", info);
            break;
        }
    }
    if (rc == DF_OK) memcpy(d->Y, R, sizeof(double) * F3 * B4);
    free(G); free(G0); free(R); free(R0);
    return rc;
}

static void error_body(void *arg, int64_t i0, int64_t i1, int worker)
{
    df__dc_t *d = arg;
    const int B4 = 4 * d->B, K = d->K;
    const int64_t F3 = 3 * d->F;
    double acc = 0, vacc = 0;
    for (int64_t i = i0; i < i1; i++) {
        const double *v = d->V + 4 * i, *x = d->X + (size_t)i * F3;
        const int32_t *idx = d->idx + i * K;
        const double *w = d->w + i * K;
        for (int64_t q = 0; q < F3; q++) {
            const double *y = d->Y + (size_t)q * B4;
            double s = 0;
            for (int k = 0; k < K; k++) {
                if (idx[k] < 0) continue;
                const double *t = y + 4 * idx[k];
                s += w[k] * (t[0] * v[0] + t[1] * v[1] + t[2] * v[2] + t[3]);
            }
            double r = s - x[q];
            vacc += r * r;
        }
        d->verr[i] = vacc;
        acc += vacc;
        vacc = 0;
    }
    d->wk[worker].sum += acc;
}

double df__dc_error(df__dc_t *d)
{
    for (int t = 0; t < d->nw; t++) d->wk[t].sum = 0;
    df__dc_pfor(d, d->N, error_body, d);
    double s = 0;
    for (int t = 0; t < d->nw; t++) s += d->wk[t].sum;
    return s;
}

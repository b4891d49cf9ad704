/* decompose_internal.h — state shared by the decomposition files.
 *
 * decompose.c (driver, welding, validation, results), decompose_init.c
 * (trajectory clustering, rigid per-cluster transforms) and
 * decompose_solve.c (weights step, transforms step, exact error) share one
 * df__dc_t. Layouts (all row-major, double, normalised coordinates: rest
 * bbox centre at the origin, diagonal 1):
 *   X  [N, 3F]   trajectories, X[i][3p+r] = coordinate r of vertex i, frame p
 *   V  [N, 4]    homogeneous rest positions (x, y, z, 1)
 *   Y  [3F, 4B]  transforms, Y[3p+r][4j+s] = T_j^p[r][s]
 *   Z  [N, 4B]   X·Y, so c_ij = Σ_s V_is Z_i(4j+s) = Σ_p v_i^p·(T_j^p ṽ_i)
 *   M  [4B, 4B]  YᵀY, so Σ_p (T_j^p ṽ)·(T_k^p ṽ) = ṽᵀ M_jk ṽ
 */
#ifndef DF_DECOMPOSE_INTERNAL_H
#define DF_DECOMPOSE_INTERNAL_H

#include "decompose/decompose.h"

typedef struct df__dc_worker {
    double *e;        /* [B] single-bone errors */
    double *cz;       /* [B] c_j */
    int32_t *order;   /* [B] */
    double *acc;      /* clustering accumulators */
    double sum;       /* reduction slot */
    int64_t count;
    char pad[64];
} df__dc_worker_t;

typedef struct df__dc {
    df_decompose_opts_t o;
    int64_t F, N, W;
    int B, K, C, nw;
    int nb_active;           /* init: bones in use (clusters 0..nb_active-1) */
    double center[3], scale; /* v_normalised = (v - center) / scale */
    double *X, *V, *xx;      /* xx[i] = Σ_q X[i][q]² */
    double xx_total;
    int32_t *rep;            /* [N] welded id */
    int64_t *wfirst;         /* [W] first vertex of each welded id */
    int64_t *adj_off;        /* [W+1] welded adjacency (CSR) */
    int32_t *adj;
    int32_t *cluster;        /* [W] initial cluster */
    double *Y, *Z, *M, *A;   /* see above; A [N, 4B] transforms-step design */
    int32_t *idx;            /* [N,K] influences (-1 unused) */
    double *w;               /* [N,K] */
    double *verr;            /* [N] per-vertex error of the last df__dc_error */
    df__dc_worker_t *wk;     /* [nw] */
} df__dc_t;

/* Run body over [0, n) with the caller's parallel_for or serially. */
void df__dc_pfor(df__dc_t *d, int64_t n, df_range_body_cb body, void *arg);

/* decompose_init.c: cluster welded vertices into B clusters and set Y to
 * each cluster's rigid transforms; idx/w one-hot on the cluster. */
int df__dc_init(df__dc_t *d, df_error_t *err);
/* Horn's closed form: best rotation R (3x3 row-major) for the cross
 * covariance H = Σ (r - r̄)(q - q̄)ᵀ, i.e. minimising Σ |R r - q|². */
void df__dc_best_rotation(const double H[9], double R[9]);

/* decompose_solve.c */
void df__dc_update_zm(df__dc_t *d);          /* Z = X·Y, M = YᵀY */
void df__dc_weights_step(df__dc_t *d);
int df__dc_transforms_step(df__dc_t *d, df_error_t *err);
double df__dc_error(df__dc_t *d);
/* One bone's weighted Procrustes step: the T = [L | t] (3x4 row-major)
 * minimising tr(T P Tᵀ) - 2 tr(T Bmᵀ), i.e. Σ_i c_i |T ṽ_i - y_i|² for
 * P = Σ c_i ṽ_i ṽ_iᵀ (4x4, P[15] = Σ c_i > 0) and Bm = Σ c_i y_i ṽ_iᵀ,
 * over L a rotation (trs = 0) or a positive multiple of one (trs = 1).
 * Lprev (3x3) is kept when the points coincide. */
void df__dc_bone_procrustes(const double P[16], const double Bm[12], int trs,
                            const double Lprev[9], double T[12]);             /* exact Σ |v' - v|², fills verr */

/* decompose_init.c: rigid transforms of bone j fitted to welded vertices gs. */
void df__dc_fit_rigid_set(df__dc_t *d, const int64_t *gs, int64_t n, int j);

/* decompose_reseed.c: move the least-used bone to the worst-fitted region
 * and keep the move if one alternation then lowers the error below *e
 * (updated). Needs verr from the last df__dc_error. 1 accepted, 0 not,
 * <0 error. */
int df__dc_reseed(df__dc_t *d, double *e, df_error_t *err);

#endif

/* laplacian.h — uniform mesh Laplacian and anchored least-squares
 * reconstruction (Song et al. 2020, Eq. 1-5 and 15-16).
 *
 * DESIGN
 * L_s = D - A (symmetric uniform Laplacian from the triangle edges). With
 * anchor rows the system is L~ = [L_s; w I(P)], and the reconstruction
 * solves (L~^T L~) X = L_s^T Delta + w^2 S^T X_P for any number of columns
 * (3 per pose: x, y, z), X stored row-major [V, ncol]. The normal matrix is
 * analysed (AMD) and factorised once with CHOLMOD in double; the factor is
 * then copied out as a plain packed lower-triangular CSC (simplicial LL^T)
 * plus permutation, so solves need no cholmod_common, allocate nothing
 * (caller passes work) and can run concurrently from any thread. A mesh with
 * several disconnected pieces needs an anchor in every piece, else L~^T L~
 * is singular: df_lap_new refuses it and names the piece.
 *
 * Folding: because the solve is linear, X = A^-1 L_s^T U c + ... for a basis
 * U becomes one dense matrix G = A^-1 L_s^T U (df_lap_fold); the rigapprox
 * kind chooses per model between the dense GEMM and the sparse solve.
 */
#ifndef DF_LAPLACIAN_H
#define DF_LAPLACIAN_H

#include "df.h"

typedef struct df_lap {
    int64_t nv, nnz;
    int32_t *rp, *ci;   /* L_s, CSR [V,V] (symmetric) */
    float *val;
    int64_t n_anchors;
    int32_t *anchors;   /* [n_anchors] vertex indices */
    double omega;
    int32_t *Lp, *Li;   /* factor, lower CSC, diagonal first in each column */
    double *Lx;
    int32_t *perm;      /* L L^T = P A P^T; perm[k] = row of A at k */
    int64_t factor_nnz;
} df_lap_t;

/* Connected components of the triangle graph. comp [V] (OUT) gets the
 * component of each vertex (isolated vertices get their own). Returns the
 * count. */
int64_t df_lap_components(int64_t nv, int64_t nt, const uint32_t *tris,
                          int32_t *comp);

/* Seam welding: vertices at the same rest position (within eps) are split
 * copies (UV / normal seams). Returns in *out (new: free) the triangles plus
 * one degenerate triangle (r, d, d) per copy d of representative r, so the
 * Laplacian and smoothing see one connected surface. *out_nt gets the count. */
int df_lap_weld(int64_t nv, const float *rest, int64_t nt, const uint32_t *tris,
                float eps, uint32_t **out, int64_t *out_nt, df_error_t *err);

/* Build L_s, add anchor rows with weight omega, factorise. *out new:
 * df_lap_free. Anchors must be distinct vertices and cover every component. */
int df_lap_new(int64_t nv, int64_t nt, const uint32_t *tris, int64_t n_anchors,
               const int32_t *anchors, double omega, df_lap_t **out,
               df_error_t *err);
void df_lap_free(df_lap_t **l);

/* y [V,ncol] = L_s x [V,ncol] (float). */
void df_lap_apply(const df_lap_t *l, int ncol, const float *x, float *y);
/* Solve (L~^T L~) x = b in place; b [V,ncol] double; work [V*ncol] double. */
void df_lap_solve(const df_lap_t *l, int ncol, double *b, double *work);
/* Reconstruction: X = (L~^T L~)^-1 (L_s^T delta + w^2 S^T anchor_pos).
 * delta [V,ncol] (target of L_s X), anchor_pos [n_anchors,ncol],
 * out [V,ncol]; work: 2*V*ncol doubles. */
void df_lap_reconstruct(const df_lap_t *l, int ncol, const float *delta,
                        const float *anchor_pos, float *out, double *work);
/* Dense folding: G [V,m] = A^-1 L_s^T U for U [V,m] (either may be NULL
 * with m = 0), H [V,n_anchors] = w^2 A^-1 S^T (may be NULL). */
int df_lap_fold(const df_lap_t *l, int m, const float *U, float *G, float *H,
                df_error_t *err);

#endif

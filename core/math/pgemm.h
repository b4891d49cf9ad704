/* pgemm.h — a batch of products of one matrix with many vectors, the matrix
 * packed once: C[:, j] = A W[:, j] for the nm columns of W.
 *
 * DESIGN
 * OpenBLAS (0.3.21 picks its Haswell AVX2 kernel on this kind of AMD EPYC)
 * copies the whole matrix into its panel layout on every call ("itcopy"):
 * for a matrix used for every batch that copy is repeated work, a quarter
 * of a morph GEMM's time and more for the small matrices of a retarget
 * mapping. Here A (n x k) is packed once, at load, into panels of
 * DF_PGEMM_PANEL rows (for each of the k columns the panel's rows
 * contiguous, zero past row n), and one AVX-512 kernel computes a 32-row x
 * T-column tile (T = 8, 4, 2, 1) with 2T accumulators. Panels are the outer
 * loop: a panel is read from memory once per batch and reused from L2 by
 * every tile of columns. One column (a batch of one) has its own kernel
 * with four accumulator pairs and a prefetch (memory-bound).
 * Each result column goes to its own address (a pose's output buffer, or
 * C + j ldc): no copy out of a contiguous result.
 * Built only with AVX-512 (DF_PGEMM defined); callers keep their OpenBLAS
 * path for other builds.
 */
#ifndef DF_PGEMM_H
#define DF_PGEMM_H

#include <stddef.h>
#include <stdint.h>

#if defined(__AVX512F__)
#define DF_PGEMM 1
#endif
#define DF_PGEMM_PANEL 32

#ifdef DF_PGEMM
/* floats of the packed n x k matrix (its panels padded to 32 rows) */
size_t df_pgemm_floats(int64_t n, int64_t k);
/* packs A, element (i, c) at a[i rs + c cs] (column-major: rs 1, cs the
 * leading dimension; row-major: rs the row length, cs 1), into out (64-byte
 * aligned, df_pgemm_floats(n, k) floats) */
void df_pgemm_pack(const float *a, int64_t rs, int64_t cs, int64_t n, int64_t k, float *out);
/* a packed copy of A (the layout of df_pgemm_pack) in new 64-byte aligned
 * memory (free it with free()); NULL when out of memory */
float *df_pgemm_new(const float *a, int64_t rs, int64_t cs, int64_t n, int64_t k);
/* for j < nm: column j of the result, n floats, = A W_j with W_j = W + j k;
 * written to cols[j] when cols is given, else to C + j ldc. wt: scratch of
 * k nm floats (W regrouped per tile). */
void df_pgemm(const float *packed, int64_t n, int64_t k, const float *W, int nm,
              float *const *cols, float *C, size_t ldc, float *wt);
#endif

#endif

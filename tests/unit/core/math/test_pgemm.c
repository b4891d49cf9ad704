/* test_pgemm.c — the packed matrix times a batch of vectors (math/pgemm.h)
 * against a naive double-precision product, on AVX-512 builds (elsewhere
 * the module is not built and the suite says so):
 *  - every row count from 1 to 70 (one panel, a partial panel, several),
 *    column counts k of 1, 7, 55 and 204, batches of 1 to 19 vectors (every
 *    tile split: 8, 4, 2, 1);
 *  - the matrix packed from a column-major array (df_pgemm_pack) and from
 *    a row-major one (df_pgemm_new): the strides of the rigged deltas and of
 *    the retarget mapping's matrices;
 *  - results written to C + j ldc with ldc > n, and to a pointer per column
 *    in reverse order: the same bytes, rows past n untouched.
 * Tolerance 1e-6 of the product's scale (float accumulation of at most 204
 * terms of unit size). */
#include "dftest.h"
#include "math/pgemm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DF_PGEMM
static uint32_t rng = 7;
static float urand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static void test_against_naive(void)
{
    static const int64_t ks[] = {1, 7, 55, 204};
    int bad = 0, bytes = 0, untouched = 0;
    double worst = 0;
    for (int64_t n = 1; n <= 70; n++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            const int64_t k = ks[ki];
            float *a = malloc(sizeof(float) * (size_t)(n * k));
            for (int64_t i = 0; i < n * k; i++) a[i] = urand();
            float *pc = aligned_alloc(64, (df_pgemm_floats(n, k) * sizeof(float) + 63) & ~(size_t)63);
            /* a as column-major (element (i, c) at a[i + c n]) and the
             * same matrix row-major */
            float *at = malloc(sizeof(float) * (size_t)(n * k));
            for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < k; c++) at[i * k + c] = a[i + c * n];
            df_pgemm_pack(a, 1, n, n, k, pc);
            float *pr = df_pgemm_new(at, k, 1, n, k); /* allocates and packs */
            DF_CHECK(pr != NULL);
            for (int nm = 1; nm <= 19; nm += (n % 3 == 0 ? 1 : 6)) {
                float *W = malloc(sizeof(float) * (size_t)(k * nm));
                for (int64_t i = 0; i < k * nm; i++) W[i] = urand();
                const size_t ldc = (size_t)n + 5;
                float *C1 = malloc(sizeof(float) * ldc * (size_t)nm);
                float *C2 = malloc(sizeof(float) * ldc * (size_t)nm);
                float *wt = malloc(sizeof(float) * (size_t)(k * nm));
                for (size_t i = 0; i < ldc * (size_t)nm; i++) C1[i] = C2[i] = NAN;
                float **cols = malloc(sizeof(float *) * (size_t)nm);
                for (int j = 0; j < nm; j++) cols[j] = C2 + (size_t)(nm - 1 - j) * ldc;
                df_pgemm(pc, n, k, W, nm, NULL, C1, ldc, wt);
                df_pgemm(pr, n, k, W, nm, cols, NULL, 0, wt);
                for (int j = 0; j < nm; j++) {
                    for (int64_t i = 0; i < n; i++) {
                        double x = 0, s = 0;
                        for (int64_t c = 0; c < k; c++) {
                            x += (double)a[i + c * n] * W[(size_t)j * k + c];
                            s += fabs((double)a[i + c * n] * W[(size_t)j * k + c]);
                        }
                        double e = fabs(C1[(size_t)j * ldc + i] - x) / (s + 1e-30);
                        worst = fmax(worst, isfinite(e) ? e : INFINITY);
                        if (!(e <= 1e-6)) bad++;
                    }
                    if (memcmp(C1 + (size_t)j * ldc, cols[j], sizeof(float) * (size_t)n)) bytes++;
                    for (size_t i = (size_t)n; i < ldc; i++)
                        if (!isnan(C1[(size_t)j * ldc + i]) || !isnan(cols[j][i])) untouched++;
                }
                free(W), free(C1), free(C2), free(wt), free(cols);
            }
            free(a), free(at), free(pc), free(pr);
        }
    printf("# worst error %.3g of the sum of |terms|\n", worst);
    DF_CHECK_MSG(bad == 0, "%d results off the naive product", bad);
    DF_CHECK_MSG(bytes == 0, "%d columns differ between the two layouts and destinations", bytes);
    DF_CHECK_MSG(untouched == 0, "%d values past row n written", untouched);
}
#endif

#ifndef DF_PGEMM
static void test_against_naive(void)
{
    printf("# skipped: math/pgemm.h is built with AVX-512 only (callers use OpenBLAS)\n");
}
#endif

int main(void)
{
    DF_RUN(test_against_naive);
    return dftest_exit();
}

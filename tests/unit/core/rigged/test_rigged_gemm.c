/* test_rigged_gemm.c — the rigged kind's morph GEMM (core/rigged/rigged_eval.c:
 * an AVX-512 kernel on deltas packed at load, or OpenBLAS on builds without
 * AVX-512) against two independent references, for every batch size from
 * 1 to 40 (all tile splits: 8, 4, 2, 1 poses) and a vertex count whose 3N
 * is not a multiple of the 32-row panel:
 *   - a naive double-precision sum rest + Σ w_m d_m (tolerance 2e-6 of the
 *     output's scale: float accumulation over M = 70 terms);
 *   - cblas_sgemm of the same column-major shape (same tolerance);
 * and outputs written into one contiguous array equal to separate buffers,
 * bit for bit; and outputs 8.5 GiB apart (a distance no int leading
 * dimension can express) still get the right answer. The Makefile builds and
 * runs this suite with and without the AVX-512 kernel, so both paths run.
 */
#include "df.h"
#include "dftest.h"
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { N = 701, M = 70, BMAX = 40 };

static uint32_t rng = 4242;
static float urand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static df_model_t *model;
static float rest[N * 3], deltas[(size_t)M * N * 3];

static int make_model(void)
{
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = N;
    d.positions = rest;
    for (int i = 0; i < N * 3; i++) rest[i] = urand() * 4;
    int64_t T = N - 2;
    uint32_t *tri = malloc((size_t)T * 3 * sizeof *tri);
    for (int64_t t = 0; t < T; t++) {
        tri[t * 3] = (uint32_t)t;
        tri[t * 3 + 1] = (uint32_t)t + 1;
        tri[t * 3 + 2] = (uint32_t)t + 2;
    }
    d.n_triangles = T;
    d.triangles = tri;
    d.n_morphs = M;
    d.morph_deltas = deltas;
    for (size_t i = 0; i < (size_t)M * N * 3; i++) deltas[i] = urand();
    char path[1200];
    snprintf(path, sizeof path, "%s/rigged_gemm.safetensors", dftest_out_dir());
    df_error_t e = {0};
    int rc = df_rigged_write(&d, path, &e);
    free(tri);
    if (rc) {
        fprintf(stderr, "write: %s\n", e.msg);
        return rc;
    }
    rc = df_model_open(path, "rigged", NULL, NULL, &model, &e);
    if (rc) fprintf(stderr, "open: %s\n", e.msg);
    unlink(path);
    return rc;
}

static void test_all_batch_sizes(void)
{
    static float w[BMAX * M], out[BMAX * N * 3], out2[BMAX * N * 3], ref[BMAX * N * 3];
    static float A[(size_t)N * 3 * (M + 1)], W1[BMAX * (M + 1)];
    /* the reference GEMM's operands: deltas then rest as column M */
    memcpy(A, deltas, sizeof deltas);
    memcpy(A + (size_t)M * N * 3, rest, sizeof rest);
    double worst_naive = 0, worst_blas = 0;
    int bad = 0;
    df_scratch_t *s = df_scratch_new();
    for (int B = 1; B <= BMAX; B++) {
        for (int i = 0; i < B * M; i++) w[i] = urand() * 2;
        const float *wp[BMAX];
        float *op[BMAX], *op2[BMAX];
        for (int p = 0; p < B; p++) {
            wp[p] = w + p * M;
            op[p] = out + (size_t)p * N * 3;        /* contiguous: direct GEMM */
            op2[p] = out2 + (size_t)(B - 1 - p) * N * 3; /* reversed: via scratch */
        }
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = B;
        b.in[df_model_find_input(model, "weights")] = wp;
        int io = df_model_find_output(model, "positions");
        df_error_t e = {0};
        b.out[io] = op;
        int rc = df_model_evaluate(model, &b, s, &e);
        DF_CHECK_MSG(rc == 0, "B=%d: %s", B, e.msg);
        b.out[io] = op2;
        rc = df_model_evaluate(model, &b, s, &e);
        DF_CHECK_MSG(rc == 0, "B=%d: %s", B, e.msg);
        for (int p = 0; p < B; p++) {
            memcpy(W1 + p * (M + 1), w + p * M, M * sizeof(float));
            W1[p * (M + 1) + M] = 1.0f;
        }
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N * 3, B, M + 1, 1.0f, A, N * 3,
                    W1, M + 1, 0.0f, ref, N * 3);
        for (int p = 0; p < B; p++) {
            double scale = 0, en = 0, eb = 0;
            for (int i = 0; i < N * 3; i++) {
                double x = rest[i];
                for (int m = 0; m < M; m++) x += (double)w[p * M + m] * deltas[(size_t)m * N * 3 + i];
                double y = op[p][i];
                scale = fmax(scale, fabs(x));
                en = fmax(en, fabs(y - x));
                eb = fmax(eb, fabs(y - ref[(size_t)p * N * 3 + i]));
            }
            en /= scale;
            eb /= scale;
            worst_naive = fmax(worst_naive, en);
            worst_blas = fmax(worst_blas, eb);
            if (en > 2e-6 || eb > 2e-6) bad++;
            if (memcmp(op[p], op2[p], N * 3 * sizeof(float))) bad++;
        }
    }
    printf("# B = 1..%d: worst error vs naive double %.3g, vs cblas_sgemm %.3g (of the output's "
           "scale)\n", BMAX, worst_naive, worst_blas);
    DF_CHECK_MSG(bad == 0, "%d poses out of tolerance or direct != scratch", bad);
    df_scratch_free(&s);
}

/* Two poses whose output buffers lie 8.5 GiB apart in one reserved address
 * range (only the two buffers are backed: PROT_NONE, MAP_NORESERVE). Each
 * output must equal the naive sum; the buffers start as NaN so a skipped
 * write shows. */
static void test_far_apart_outputs(void)
{
    const size_t gap = (size_t)17 << 29; /* 8.5 GiB */
    const size_t nbytes = (size_t)N * 3 * sizeof(float);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = gap + 2 * page + nbytes;
    char *base = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        printf("# skipped: cannot reserve %.1f GiB of address space\n", span / 1073741824.0);
        return;
    }
    size_t len = (nbytes + page - 1) / page * page;
    float *o0 = (float *)base, *o1 = (float *)(base + gap);
    DF_CHECK(mprotect(o0, len, PROT_READ | PROT_WRITE) == 0);
    DF_CHECK(mprotect(o1, len, PROT_READ | PROT_WRITE) == 0);
    static float w[2 * M];
    for (int i = 0; i < 2 * M; i++) w[i] = urand() * 2;
    for (size_t i = 0; i < (size_t)N * 3; i++) o0[i] = o1[i] = NAN;
    const float *wp[2] = {w, w + M};
    float *op[2] = {o0, o1};
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = 2;
    b.in[df_model_find_input(model, "weights")] = wp;
    b.out[df_model_find_output(model, "positions")] = op;
    df_scratch_t *s = df_scratch_new();
    df_error_t e = {0};
    int rc = df_model_evaluate(model, &b, s, &e);
    DF_CHECK_MSG(rc == 0, "%s", e.msg);
    double worst = 0, scale = 0;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < N * 3; i++) {
            double x = rest[i];
            for (int m = 0; m < M; m++) x += (double)w[p * M + m] * deltas[(size_t)m * N * 3 + i];
            scale = fmax(scale, fabs(x));
            double d = fabs((double)op[p][i] - x);
            worst = isfinite(d) ? fmax(worst, d) : INFINITY;
        }
    DF_CHECK_MSG(worst <= 2e-6 * scale, "outputs 8.5 GiB apart: worst error %g (scale %g)", worst,
                 scale);
    df_scratch_free(&s);
    munmap(base, span);
}

int main(void)
{
    if (make_model()) {
        printf("FAIL make_model\n");
        return 1;
    }
    DF_RUN(test_all_batch_sizes);
    DF_RUN(test_far_apart_outputs);
    df_model_unref(&model);
    return dftest_exit();
}

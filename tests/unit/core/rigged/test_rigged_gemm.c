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
 * dimension can express) still get the right answer; a batch mixing rest
 * poses, poses without a positions buffer and normals (morph normal deltas)
 * against the naive sums, the rest poses bit for bit, and the same batch
 * with its buffers in another order giving the same bytes. The Makefile builds and
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

/* A model with normals and morph normal deltas; a batch of 13 poses (tiles
 * of 8, 4 and 1) where poses 2 and 9 have all-zero weights (the rest pose).
 * Positions equal the naive double sum, normals the normalised naive sum of
 * the normal deltas; rest poses get the file's rest positions; the buffers
 * given in another order, or positions or normals alone, get the same
 * bytes. */
static void test_normals_and_mixed_outputs(void)
{
    enum { BN = 13 };
    static float nrm[N * 3], ndel[(size_t)M * N * 3];
    for (int i = 0; i < N; i++) {
        double a = urand() * 6, c = urand() * 3;
        nrm[3 * i] = (float)(cos(a) * cos(c)), nrm[3 * i + 1] = (float)(sin(a) * cos(c));
        nrm[3 * i + 2] = (float)sin(c);
    }
    for (size_t i = 0; i < (size_t)M * N * 3; i++) ndel[i] = urand() * 0.05f;
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = N;
    d.positions = rest;
    d.normals = nrm;
    int64_t T = N - 2;
    uint32_t *tri = malloc((size_t)T * 3 * sizeof *tri);
    for (int64_t t = 0; t < T; t++)
        tri[t * 3] = (uint32_t)t, tri[t * 3 + 1] = (uint32_t)t + 1, tri[t * 3 + 2] = (uint32_t)t + 2;
    d.n_triangles = T;
    d.triangles = tri;
    d.n_morphs = M;
    d.morph_deltas = deltas;
    d.morph_normal_deltas = ndel;
    char path[1200];
    snprintf(path, sizeof path, "%s/rigged_gemm_n.safetensors", dftest_out_dir());
    df_error_t e = {0};
    df_model_t *mn = NULL;
    int rc = df_rigged_write(&d, path, &e);
    free(tri);
    DF_CHECK_MSG(rc == 0, "write: %s", e.msg);
    if (rc) return;
    rc = df_model_open(path, "rigged", NULL, NULL, &mn, &e);
    unlink(path);
    DF_CHECK_MSG(rc == 0, "open: %s", e.msg);
    if (rc) return;
    static float w[BN * M], pos[4][BN][N * 3], nor[4][BN][N * 3];
    for (int i = 0; i < BN * M; i++) w[i] = urand() * 2;
    memset(w + 2 * M, 0, M * sizeof(float));
    memset(w + 9 * M, 0, M * sizeof(float));
    const float *wp[BN];
    float *op[4][BN], *on[4][BN];
    for (int p = 0; p < BN; p++) wp[p] = w + p * M;
    int ip = df_model_find_output(mn, "positions"), in = df_model_find_output(mn, "normals");
    DF_CHECK(ip >= 0 && in >= 0);
    df_scratch_t *s = df_scratch_new();
    /* v = 0: both outputs; 1: both, the buffers in reverse order; 2:
     * positions alone; 3: normals alone */
    for (int v = 0; v < 4; v++) {
        for (int p = 0; p < BN; p++) {
            int slot = v == 1 ? BN - 1 - p : p;
            op[v][p] = pos[v][slot];
            on[v][p] = nor[v][slot];
        }
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = BN;
        b.in[df_model_find_input(mn, "weights")] = wp;
        b.out[ip] = v == 3 ? NULL : op[v];
        b.out[in] = v == 2 ? NULL : on[v];
        rc = df_model_evaluate(mn, &b, s, &e);
        DF_CHECK_MSG(rc == 0, "%s", e.msg);
    }
    double worst_p = 0, worst_n = 0;
    int bad = 0;
    for (int p = 0; p < BN; p++) {
        const int zero = p == 2 || p == 9;
        for (int i = 0; i < N; i++) {
            double x[3], n[3], l = 0;
            for (int a = 0; a < 3; a++) {
                size_t k = 3 * (size_t)i + a;
                x[a] = rest[k], n[a] = nrm[k];
                for (int m = 0; m < M; m++) {
                    x[a] += (double)w[p * M + m] * deltas[(size_t)m * N * 3 + k];
                    n[a] += (double)w[p * M + m] * ndel[(size_t)m * N * 3 + k];
                }
                l += n[a] * n[a];
            }
            l = sqrt(l);
            for (int a = 0; a < 3; a++) {
                size_t k = 3 * (size_t)i + a;
                worst_p = fmax(worst_p, fabs(op[0][p][k] - x[a]));
                if (zero && op[0][p][k] != rest[k]) bad++;
                worst_n = fmax(worst_n, fabs(on[0][p][k] - n[a] / l));
            }
        }
        if (memcmp(op[0][p], op[1][p], sizeof pos[0][0]) ||
            memcmp(op[0][p], op[2][p], sizeof pos[0][0]))
            bad++;
        if (memcmp(on[0][p], on[1][p], sizeof nor[0][0]) ||
            memcmp(on[0][p], on[3][p], sizeof nor[0][0]))
            bad++;
    }
    printf("# normals batch: worst position error %.3g, worst normal error %.3g\n", worst_p,
           worst_n);
    DF_CHECK_MSG(worst_p <= 2e-6 * 40 && worst_n <= 1e-5, "positions %g, normals %g", worst_p,
                 worst_n);
    DF_CHECK_MSG(bad == 0, "%d rest poses or other buffers differ", bad);
    df_scratch_free(&s);
    df_model_unref(&mn);
}

int main(void)
{
    if (make_model()) {
        printf("FAIL make_model\n");
        return 1;
    }
    DF_RUN(test_all_batch_sizes);
    DF_RUN(test_far_apart_outputs);
    DF_RUN(test_normals_and_mixed_outputs);
    df_model_unref(&model);
    return dftest_exit();
}

/* bench_core.c — throughput of the `rigged` kind, side by side with its
 * baselines, in one run (make bench-core; bench/run_core.sh).
 *
 *   bench_core [--model FILE.safetensors]... [--quick]
 *
 * Prints, for a synthetic 50k-vertex / 4-influence / 64-joint mesh (always)
 * and each --model (a real imported asset):
 *  - STREAM-style triad bandwidth (a = b + s*c, 3 x 64 MiB, one thread);
 *  - skinning through df_model_evaluate, LBS and DQS, positions only and
 *    with normals, batch 1 and 32: ns/vertex, Mvertices/s, GB/s of the
 *    per-vertex stream (12 B in + 12 B out + 8 B per influence slot
 *    [+ 24 B normals]) and that as a fraction of triad bandwidth;
 *  - the rejected across-vertex (SoA + gathers) LBS design, for the record;
 *  - the LBS kernel alone, and a plain scalar C LBS loop over the file's
 *    [N,K] layout as the baseline (ratio);
 *  - morph targets (N=50k, M=50): df_model_evaluate of a morph-only model
 *    vs a bare cblas_sgemm (B=32) / cblas_sgemv (B=1) of the same shape.
 * Each figure is the best of 7 repetitions of >= 30 ms of thread CPU time
 * (DF_BENCH_WALL=1: wall time); the machine is shared and the minimum is
 * the least disturbed estimate. OpenBLAS is
 * pinned to one thread. Nothing here is asserted: benchmarks measure.
 */
#include "df.h"
#include "math/mathx.h"
#include "math/skin.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const df_kind_t df_kind_rigged;
void openblas_set_num_threads(int);

/* Thread CPU time: on a shared machine (8 helpers on 2 cores) wall time
 * mostly measures the scheduler; CPU time of this thread does not count
 * the slices other processes take (cache/DRAM contention still shows). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(getenv("DF_BENCH_WALL") ? CLOCK_MONOTONIC
                                          : CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int quick;
static unsigned rs = 4242u;
static double urand(void)
{
    rs = rs * 1664525u + 1013904223u;
    return (rs >> 8) / 16777216.0;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* seconds per call of fn(ctx), best of the repetitions */
typedef void (*bench_fn)(void *);
static double timeit(bench_fn fn, void *ctx)
{
    double t[7];
    int reps = quick ? 3 : 7;
    fn(ctx); /* warm up (grows scratch, faults pages) */
    for (int r = 0; r < reps; r++) {
        long n = 0;
        double t0 = now(), t1;
        do {
            fn(ctx);
            n++;
            t1 = now();
        } while (t1 - t0 < (quick ? 0.01 : 0.03));
        t[r] = (t1 - t0) / n;
    }
    qsort(t, reps, sizeof t[0], cmpd);
    return t[0]; /* best of reps: the machine is shared and noisy */
}

/* ------------------------------------------------------------- triad */
typedef struct {
    float *a, *b, *c;
    size_t n;
} triad_t;
static void triad_fn(void *p)
{
    triad_t *t = p;
    float s = 1.0001f;
    for (size_t i = 0; i < t->n; i++) t->a[i] = t->b[i] + s * t->c[i];
    __asm__ volatile("" ::"r"(t->a) : "memory");
}

/* --------------------------------------------------------- evaluation */
typedef struct {
    df_model_t *m;
    df_scratch_t *sc;
    int B;
    df_batch_t b;
} eval_t;
static void eval_fn(void *p)
{
    eval_t *e = p;
    df_error_t err;
    if (df_model_evaluate(e->m, &e->b, e->sc, &err)) {
        fprintf(stderr, "evaluate: %s\n", err.msg);
        exit(1);
    }
}

/* ----------------------------------------------------- scalar baseline */
typedef struct {
    int64_t N, K;
    const int32_t *J;
    const float *W, *S, *P; /* S: [J,12] row-major */
    float *out;
} scalar_t;
static void scalar_fn(void *p)
{
    scalar_t *s = p;
    for (int64_t v = 0; v < s->N; v++) {
        float m[12] = {0};
        for (int64_t k = 0; k < s->K; k++) {
            const float *sm = s->S + 12 * s->J[v * s->K + k];
            float w = s->W[v * s->K + k];
            for (int e = 0; e < 12; e++) m[e] += w * sm[e];
        }
        const float *x = s->P + 3 * v;
        for (int r = 0; r < 3; r++)
            s->out[3 * v + r] = m[4 * r] * x[0] + m[4 * r + 1] * x[1] +
                                m[4 * r + 2] * x[2] + m[4 * r + 3];
    }
}

#ifdef __AVX512F__
#include <immintrin.h>
/* The design we did not take (skin.c): LBS vectorised ACROSS 16 vertices,
 * structure-of-arrays influences and positions, each blended matrix entry
 * gathered from the joint matrices (12 gathers per influence per 16
 * vertices). Outputs are SoA too (which favours this variant: no
 * re-interleave). Measured here side by side with the kernel we use. */
typedef struct {
    int64_t N, K;
    const int32_t *jsoa; /* [K][N] joint * 12 */
    const float *wsoa;   /* [K][N] */
    const float *S;      /* [J][12] row-major */
    const float *x, *y, *z;
    float *ox, *oy, *oz;
} gather_t;
static void gather_fn(void *p)
{
    gather_t *g = p;
    for (int64_t v = 0; v + 16 <= g->N; v += 16) {
        __m512 a[12];
        for (int e = 0; e < 12; e++) a[e] = _mm512_setzero_ps();
        for (int64_t k = 0; k < g->K; k++) {
            __m512i j = _mm512_loadu_si512(g->jsoa + k * g->N + v);
            __m512 w = _mm512_loadu_ps(g->wsoa + k * g->N + v);
            for (int e = 0; e < 12; e++)
                a[e] = _mm512_fmadd_ps(w, _mm512_i32gather_ps(j, g->S + e, 4), a[e]);
        }
        __m512 x = _mm512_loadu_ps(g->x + v), y = _mm512_loadu_ps(g->y + v),
               z = _mm512_loadu_ps(g->z + v);
        float *dst[3] = {g->ox + v, g->oy + v, g->oz + v};
        for (int r = 0; r < 3; r++)
            _mm512_storeu_ps(dst[r],
                             _mm512_fmadd_ps(a[4 * r], x,
                                             _mm512_fmadd_ps(a[4 * r + 1], y,
                                                             _mm512_fmadd_ps(a[4 * r + 2], z, a[4 * r + 3]))));
    }
}
#endif

typedef struct {
    const df__skin_t *sk;
    const float *mats, *pos, *nrm;
    float *op, *on;
    int impl;
} kern_t;
static void kern_fn(void *p)
{
    kern_t *k = p;
    df__skin_lbs_impl(k->impl, k->sk, k->mats, k->pos, k->nrm, k->op, k->on);
}

/* ----------------------------------------------------------- models */
static const char *tmpdir(void)
{
    const char *d = getenv("DF_BENCH_OUT");
    return d && *d ? d : "/tmp";
}

/* synthetic mesh: a grid-ish cloud of N vertices, J joints in a chain of
 * branches, K influences on nearby joints (realistic locality) */
static int make_synthetic(int64_t N, int64_t J, int64_t K, int64_t M,
                          const char *path)
{
    df_rigged_data_t d = {0};
    d.n_vertices = N;
    d.positions = malloc(N * 12);
    for (int64_t i = 0; i < N * 3; i++) d.positions[i] = (float)(2 * urand() - 1);
    d.n_triangles = N / 2;
    d.triangles = malloc(d.n_triangles * 12);
    for (int64_t t = 0; t < d.n_triangles; t++)
        for (int k = 0; k < 3; k++)
            d.triangles[3 * t + k] = (uint32_t)((2 * t + k) % N);
    d.n_morphs = M;
    if (M) {
        d.morph_deltas = malloc(M * N * 12);
        for (int64_t i = 0; i < M * N * 3; i++)
            d.morph_deltas[i] = (float)(0.01 * (urand() - 0.5));
    }
    d.n_joints = J;
    if (J) {
        d.parents = malloc(J * 4);
        d.rest_translations = malloc(J * 12);
        d.rest_rotations = malloc(J * 16);
        d.rest_scales = malloc(J * 12);
        d.inverse_bind = calloc(J * 16, 4);
        for (int64_t j = 0; j < J; j++) {
            d.parents[j] = (int32_t)(j - 1 - (j % 3 == 0 && j > 3 ? 2 : 0));
            for (int k = 0; k < 3; k++) {
                d.rest_translations[3 * j + k] = (float)(0.1 * urand());
                d.rest_scales[3 * j + k] = 1;
            }
            d.rest_rotations[4 * j + 0] = 0;
            d.rest_rotations[4 * j + 1] = 0;
            d.rest_rotations[4 * j + 2] = 0;
            d.rest_rotations[4 * j + 3] = 1;
            for (int k = 0; k < 4; k++) d.inverse_bind[16 * j + 5 * k] = 1;
        }
        d.n_influences = K;
        d.skin_joints = malloc(N * K * 4);
        d.skin_weights = malloc(N * K * 4);
        for (int64_t v = 0; v < N; v++) {
            int64_t base = (int64_t)(v * J / N);
            double sum = 0;
            for (int64_t k = 0; k < K; k++) {
                d.skin_joints[v * K + k] = (int32_t)((base + k) % J);
                d.skin_weights[v * K + k] = (float)(0.05 + urand());
                sum += d.skin_weights[v * K + k];
            }
            for (int64_t k = 0; k < K; k++)
                d.skin_weights[v * K + k] = (float)(d.skin_weights[v * K + k] / sum);
        }
    }
    df_error_t err;
    int rc = df_rigged_write(&d, path, &err);
    if (rc) fprintf(stderr, "write %s: %s\n", path, err.msg);
    free(d.positions);
    free(d.triangles);
    free(d.morph_deltas);
    free(d.parents);
    free(d.rest_translations);
    free(d.rest_rotations);
    free(d.rest_scales);
    free(d.inverse_bind);
    free(d.skin_joints);
    free(d.skin_weights);
    return rc;
}

static double triad_gbs;

static void bench_skinning(const char *label, const char *path)
{
    df_error_t err;
    df_model_t *m = NULL;
    if (df_model_open(path, "rigged", NULL, NULL, &m, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return;
    }
    int ir = df_model_find_input(m, "joint_rotations");
    if (ir < 0) {
        printf("%s: no skeleton, skipped\n", label);
        df_model_unref(&m);
        return;
    }
    int64_t N = df_model_n_vertices(m), J = df_model_input(m, ir)->shape[0];
    /* influence slots actually streamed (blocked layout) */
    const char *const *nm;
    df_model_names(m, "joints", &nm);
    printf("\n== %s: N=%lld vertices, J=%lld joints (%s)\n", label,
           (long long)N, (long long)J, path);
    enum { BMAX = 32 };
    float *rot[BMAX], *pos[BMAX], *nrm[BMAX];
    for (int p = 0; p < BMAX; p++) {
        rot[p] = malloc(J * 16);
        for (int64_t j = 0; j < J; j++) {
            float ax[3] = {(float)urand() - 0.5f, (float)urand() - 0.5f,
                           (float)urand() - 0.5f};
            df_quat_from_axis_angle(ax, (float)(0.6 * urand()), rot[p] + 4 * j);
        }
        pos[p] = malloc(N * 12);
        nrm[p] = malloc(N * 12);
    }
    eval_t e = {.m = m, .sc = df_scratch_new()};
    int iw = df_model_find_input(m, "weights");
    (void)iw;
    printf("%-5s %3s %-9s %9s %10s %9s %8s\n", "skin", "B", "outputs",
           "ns/vert", "Mvert/s", "GB/s", "of triad");
    double lbs_b1_pos = 0;
    /* skinning stream: K slots averaged over blocks, from the model file */
    df_st_t *st = NULL;
    double kavg = 4;
    if (df_st_open(path, NULL, &st, &err) == 0) {
        const df_tensor_t *w = df_st_find(st, "skin_weights");
        if (w) {
            const float *wf = w->data;
            int64_t K = w->shape[1], nz = 0;
            for (int64_t i = 0; i < N * K; i++) nz += wf[i] > 0;
            kavg = (double)nz / N;
        }
        df_st_close(&st);
    }
    for (int dqs = 0; dqs <= 1; dqs++)
        for (int B = 1; B <= BMAX; B += BMAX - 1)
            for (int wn = 0; wn <= 1; wn++) {
                uint32_t flags[BMAX];
                for (int p = 0; p < B; p++) flags[p] = dqs ? DF_POSE_DQS : DF_POSE_LBS;
                memset(&e.b, 0, sizeof e.b);
                e.b.n = B;
                e.b.in[ir] = (const float *const *)rot;
                e.b.out[0] = pos;
                e.b.out[1] = wn ? nrm : NULL;
                e.b.flags = flags;
                double t = timeit(eval_fn, &e);
                double nsv = t / (B * (double)N) * 1e9;
                double bytes = 24 + 8 * kavg + (wn ? 24 : 0);
                double gbs = bytes / nsv;
                printf("%-5s %3d %-9s %9.3f %10.1f %9.2f %7.1f%%\n",
                       dqs ? "dqs" : "lbs", B, wn ? "pos+nrm" : "pos", nsv,
                       1e3 / nsv, gbs, 100 * gbs / triad_gbs);
                if (!dqs && B == 1 && !wn) lbs_b1_pos = nsv;
            }
    printf("(stream per vertex: %.1f influence slots avg, %.0f B pos-only, "
           "%.0f B with normals)\n",
           kavg, 24 + 8 * kavg, 48 + 8 * kavg);

    /* kernel alone and the plain scalar loop on the same data */
    st = NULL;
    if (df_st_open(path, NULL, &st, &err) == 0) {
        const df_tensor_t *tj = df_st_find(st, "skin_joints"),
                          *tw = df_st_find(st, "skin_weights"),
                          *tp = df_st_find(st, "positions");
        int64_t K = tj->shape[1];
        float *S = malloc(J * 48), *mats = NULL, *P = calloc(N * 3 + 4, 4),
              *Nn = calloc(N * 3 + 4, 4), *out = malloc(N * 12),
              *on = malloc(N * 12);
        if (posix_memalign((void **)&mats, 64, J * 64)) exit(1);
        memcpy(P, tp->data, N * 12);
        for (int64_t i = 0; i < N; i++) Nn[3 * i + 2] = 1;
        for (int64_t j = 0; j < J; j++) {
            float R[9];
            df_quat_to_m33(rot[0] + 4 * j, R);
            for (int r = 0; r < 3; r++) {
                for (int c = 0; c < 3; c++) S[12 * j + 4 * r + c] = R[3 * r + c];
                S[12 * j + 4 * r + 3] = (float)urand();
            }
            df__skin_pack(S + 12 * j, mats + 16 * j);
        }
        /* weights exactly as the loader keeps them (already normalised) */
        df__skin_t sk;
        df__skin_build(&sk, N, (int)K, tj->data, tw->data);
        scalar_t sc = {N, K, tj->data, tw->data, S, P, out};
        double ts = timeit(scalar_fn, &sc) / N * 1e9;
        printf("plain scalar C LBS loop ([N,K] layout, K=%lld): %.3f ns/vert "
               "(evaluate LBS B=1 pos is %.2fx faster)\n",
               (long long)K, ts, ts / lbs_b1_pos);
#ifdef __AVX512F__
        {
            int32_t *jsoa = malloc(K * N * 4);
            float *wsoa = malloc(K * N * 4), *xs = malloc(N * 12), *os = malloc(N * 12);
            const int32_t *jf = tj->data;
            const float *wf = tw->data;
            for (int64_t v = 0; v < N; v++)
                for (int64_t k = 0; k < K; k++) {
                    jsoa[k * N + v] = jf[v * K + k] * 12;
                    wsoa[k * N + v] = wf[v * K + k];
                }
            for (int64_t v = 0; v < N; v++)
                for (int c = 0; c < 3; c++) xs[c * N + v] = P[3 * v + c];
            gather_t gt = {N, K, jsoa, wsoa, S, xs, xs + N, xs + 2 * N,
                           os, os + N, os + 2 * N};
            double tg = timeit(gather_fn, &gt) / N * 1e9;
            printf("rejected design, across-vertex AVX-512 with gathers (SoA in "
                   "and out, all K slots): %.3f ns/vert pos\n", tg);
            free(jsoa);
            free(wsoa);
            free(xs);
            free(os);
        }
#endif
        for (int impl = 0; impl < 3; impl++) {
            kern_t kc = {&sk, mats, P, NULL, out, NULL};
            if (df__skin_lbs_impl(impl, &sk, mats, P, NULL, out, NULL) < 0)
                continue;
            kc.impl = impl;
            double tk = timeit(kern_fn, &kc) / N * 1e9;
            kc.nrm = Nn;
            kc.on = on;
            double tkn = timeit(kern_fn, &kc) / N * 1e9;
            printf("LBS kernel %-6s alone: %6.3f ns/vert pos (%.2fx the "
                   "scalar loop), %6.3f ns/vert pos+nrm\n",
                   df__skin_impl_name(impl), tk, ts / tk, tkn);
        }
        df__skin_free(&sk);
        free(S);
        free(mats);
        free(P);
        free(Nn);
        free(out);
        free(on);
        df_st_close(&st);
    }
    for (int p = 0; p < BMAX; p++) {
        free(rot[p]);
        free(pos[p]);
        free(nrm[p]);
    }
    df_scratch_free(&e.sc);
    df_model_unref(&m);
}

typedef struct {
    int n3, b, k;
    const float *A, *Bm;
    float *C;
} gemm_t;
static void gemm_fn(void *p)
{
    gemm_t *g = p;
    if (g->b == 1)
        cblas_sgemv(CblasColMajor, CblasNoTrans, g->n3, g->k, 1.0f, g->A, g->n3,
                    g->Bm, 1, 1.0f, g->C, 1);
    else
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, g->n3, g->b,
                    g->k, 1.0f, g->A, g->n3, g->Bm, g->k, 1.0f, g->C, g->n3);
}

static void bench_morph(void)
{
    int64_t N = 50000, M = 50;
    char path[1024];
    snprintf(path, sizeof path, "%s/bench_core_morph.safetensors", tmpdir());
    if (make_synthetic(N, 0, 0, M, path)) return;
    df_error_t err;
    df_model_t *m = NULL;
    if (df_model_open(path, "rigged", NULL, NULL, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    printf("\n== morph targets: N=%lld, M=%lld (3N x M deltas = %.1f MB)\n",
           (long long)N, (long long)M, 3.0 * N * M * 4 / 1e6);
    printf("%3s %14s %14s %8s\n", "B", "ours GFLOP/s", "bare GFLOP/s", "ratio");
    enum { BMAX = 32 };
    float *w[BMAX], *pos[BMAX];
    for (int p = 0; p < BMAX; p++) {
        w[p] = malloc(M * 4);
        for (int i = 0; i < M; i++) w[p][i] = (float)urand();
        pos[p] = malloc(N * 12);
    }
    float *A = malloc(3 * N * M * 4), *Bm = malloc(M * BMAX * 4),
          *C = calloc(3 * N * BMAX, 4);
    for (int64_t i = 0; i < 3 * N * M; i++) A[i] = (float)urand();
    for (int i = 0; i < M * BMAX; i++) Bm[i] = (float)urand();
    float *big = malloc(BMAX * 3 * N * 4), *posc[BMAX];
    for (int p = 0; p < BMAX; p++) posc[p] = big + p * 3 * N;
    for (int B = 1; B <= BMAX; B += BMAX - 1) {
        gemm_t g = {(int)(3 * N), B, (int)M, A, Bm, C};
        double tg = timeit(gemm_fn, &g);
        double fl = 2.0 * 3 * N * M * B;
        for (int contig = 0; contig <= (B > 1); contig++) {
            eval_t e = {.m = m, .sc = df_scratch_new()};
            e.b.n = B;
            e.b.in[0] = (const float *const *)w;
            e.b.out[0] = contig ? posc : pos;
            double t = timeit(eval_fn, &e);
            printf("%3d %14.2f %14.2f %7.0f%%   (%s, %s outputs)\n", B,
                   fl / t * 1e-9, fl / tg * 1e-9, 100 * tg / t,
                   B == 1 ? "sgemv" : "sgemm",
                   contig ? "one contiguous array of" : "separate");
            df_scratch_free(&e.sc);
        }
    }
    free(big);
    for (int p = 0; p < BMAX; p++) {
        free(w[p]);
        free(pos[p]);
    }
    free(A);
    free(Bm);
    free(C);
    df_model_unref(&m);
}

int main(int argc, char **argv)
{
    openblas_set_num_threads(1);
    (void)df_kind_rigged;
    const char *models[16];
    int nm = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc && nm < 16)
            models[nm++] = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: bench_core [--model FILE]... [--quick]\n");
            return 2;
        }
    }
    /* triad, 3 x 64 MiB: DRAM-resident */
    triad_t tr;
    tr.n = (size_t)16 << 20;
    tr.a = malloc(tr.n * 4);
    tr.b = malloc(tr.n * 4);
    tr.c = malloc(tr.n * 4);
    for (size_t i = 0; i < tr.n; i++) {
        tr.a[i] = 0;
        tr.b[i] = 1;
        tr.c[i] = 2;
    }
    double tt = timeit(triad_fn, &tr);
    triad_gbs = 3.0 * 4 * tr.n / tt * 1e-9;
    printf("triad bandwidth (1 thread, 3 x 64 MiB): %.1f GB/s\n", triad_gbs);
    free(tr.a);
    free(tr.b);
    free(tr.c);

    char path[1024];
    snprintf(path, sizeof path, "%s/bench_core_synth.safetensors", tmpdir());
    if (make_synthetic(50000, 64, 4, 0, path) == 0)
        bench_skinning("synthetic 50k, K=4", path);
    for (int i = 0; i < nm; i++) bench_skinning(models[i], models[i]);
    bench_morph();
    return 0;
}

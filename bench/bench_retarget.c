/* bench_retarget.c — `make bench-retarget`: served throughput of a retarget
 * model beside its target's own rigged evaluation, in one run.
 *
 *   build/bench/bench_retarget RETARGET.safetensors TARGET.safetensors
 *       MARKERS.npy [--batch B] [--seconds S] [--params JSON] [--normals]
 *
 * One OpenBLAS thread (the daemon's setting). For the same poses at batch B
 * (default 64), through df_model_evaluate (the served path), in alternation
 * (5 rounds; within a round the variants take turns batch by batch):
 *   markers  -> positions   (rigid alignment, bounded solve, E, target)
 *   weights  -> positions   (E, target)
 *   target alone            (the rigged model of the target file, with the
 *                            target weights the markers variant produced)
 *   markers  -> target_weights only (the mapping alone)
 * and prints, per variant, poses per second of one core (the thread's CPU
 * time; the best round) and the percentiles of the CPU time per pose of
 * every batch (p10, p50, p90, p99 over all rounds); then the mapping's cost
 * relative to the target's own evaluation, from the best rounds, from the
 * medians, and paired: per turn, our batch against the target's batch run
 * beside it (median and quartiles of those ratios: what a VM's drifting
 * speed does not move). --normals: the variants that output positions
 * output normals too (what a renderer asks for), the target alone as well.
 */
#include "df.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int);


/* this thread's CPU time: poses per second of one core, whatever else the
 * machine runs (wall time on a shared 2-core VM measures the neighbours) */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct variant {
    const char *name;
    df_model_t *m;
    int in;
    const float *src; /* [F, per] */
    int64_t per;
    int out_pos, out_w;
    double best;
    double *batch_us; /* CPU time per pose of each batch, all rounds */
    size_t nb, cap;
    /* sequences: pose p of every batch is the next frame of sequence p
     * (which starts at frame p F / B), its `state` the one sequence p's
     * previous frame returned, as the daemon carries it */
    int seq, in_st, out_st;
    int64_t ns;   /* state size */
    float *st;    /* [2, B, ns]: read one half, write the other */
    int64_t step; /* batches run */
    int64_t f;    /* the next frame (cold variants) */
    int out_nrm;  /* normals with positions (--normals), or -1 */
} variant_t;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const variant_t *v, double q) /* of the sorted batch times */
{
    size_t i = (size_t)(q * (double)(v->nb - 1) + 0.5);
    return v->batch_us[i];
}

/* one batch of variant v (its next B poses); records and returns the CPU
 * time per pose */
static float *g_nrm; /* [B, N3] normals, with --normals */
static float **g_pn;

static double one_batch(variant_t *v, int B, int64_t F, float *pos, float *tw, int64_t N3,
                        int64_t Mt, df_scratch_t *scr, const float **pin, const float **psi,
                        float **pp, float **pt, float **pso)
{
    df_error_t err = {0};
    if (v->nb == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 4096;
        double *nbuf = realloc(v->batch_us, v->cap * sizeof(double));
        if (!nbuf) {
            fprintf(stderr, "bench_retarget: out of memory\n");
            exit(1);
        }
        v->batch_us = nbuf;
    }
    for (int p = 0; p < B; p++, v->f++) {
        int64_t fr = v->seq ? ((int64_t)p * (F / B) + v->step) % F : v->f % F;
        pin[p] = v->src + fr * v->per;
        pp[p] = pos + (size_t)p * N3;
        pt[p] = tw + (size_t)p * Mt;
        if (g_nrm) g_pn[p] = g_nrm + (size_t)p * N3;
        if (v->seq) {
            psi[p] = v->st + ((size_t)(v->step & 1) * B + p) * v->ns;
            pso[p] = v->st + ((size_t)(~v->step & 1) * B + p) * v->ns;
        }
    }
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = B;
    b.in[v->in] = pin;
    if (v->out_pos >= 0) b.out[v->out_pos] = pp;
    if (v->out_w >= 0) b.out[v->out_w] = pt;
    if (v->out_pos >= 0 && v->out_nrm >= 0 && g_nrm) b.out[v->out_nrm] = g_pn;
    if (v->seq) {
        b.in[v->in_st] = psi;
        b.out[v->out_st] = pso;
    }
    v->step++;
    const double tb = now();
    if (df_model_evaluate(v->m, &b, scr, &err)) {
        fprintf(stderr, "bench_retarget: %s: %s\n", v->name, err.msg);
        exit(1);
    }
    const double us = (now() - tb) * 1e6 / B;
    v->batch_us[v->nb++] = us;
    return us;
}

/* the median and quartiles of (a_k - b_k) / b_k over paired batches, % */
static void paired(const variant_t *a, const variant_t *b, double q[3])
{
    size_t n = a->nb < b->nb ? a->nb : b->nb;
    double *r = malloc(sizeof(double) * (n ? n : 1));
    for (size_t k = 0; k < n; k++) r[k] = 100 * (a->batch_us[k] - b->batch_us[k]) / b->batch_us[k];
    qsort(r, n, sizeof(double), cmp_d);
    for (int i = 0; i < 3; i++) q[i] = n ? r[(size_t)((0.25 + 0.25 * i) * (double)(n - 1) + 0.5)] : 0;
    free(r);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_retarget RETARGET.safetensors TARGET.safetensors "
                        "MARKERS.npy [--batch B] [--seconds S] [--params JSON] [--normals]\n");
        return 2;
    }
    int B = 64;
    double seconds = 0.4;
    const char *params = NULL;
    int normals = 0;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--normals")) normals = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--batch")) B = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) seconds = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--params")) params = argv[++i];
        else {
            fprintf(stderr, "bench_retarget: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (B < 1 || B > 4096 || !(seconds > 0)) {
        fprintf(stderr, "bench_retarget: bad --batch or --seconds\n");
        return 2;
    }
    openblas_set_num_threads(1);
    df_error_t err = {0};
    df_model_t *rt = NULL, *tg = NULL;
    if (df_model_open(argv[1], "retarget", params, NULL, &rt, &err) ||
        df_model_open(argv[2], "rigged", NULL, NULL, &tg, &err)) {
        fprintf(stderr, "bench_retarget: %s\n", err.msg);
        return 1;
    }
    int nd;
    int64_t sh[DF_MAX_DIMS];
    float *X = NULL;
    if (df_npy_read_f32(argv[3], &nd, sh, &X, &err)) {
        fprintf(stderr, "bench_retarget: %s\n", err.msg);
        return 1;
    }
    int im = df_model_find_input(rt, "markers"), iw = df_model_find_input(rt, "source_weights");
    if (im < 0 || nd != 3 || sh[1] != df_model_input(rt, im)->shape[0] || sh[2] != 3) {
        fprintf(stderr, "bench_retarget: the model needs a markers input matching %s\n",
                argv[3]);
        return 1;
    }
    int64_t F = sh[0], K = sh[1];
    int64_t N = df_model_n_vertices(rt), N3 = 3 * N;
    int ot = df_model_find_output(rt, "target_weights"), os = df_model_find_output(rt, "solved_weights");
    int64_t Mt = df_model_output(rt, ot)->shape[0], Ms = df_model_output(rt, os)->shape[0];
    if (df_model_n_vertices(tg) != N || df_model_find_input(tg, "weights") < 0 ||
        df_model_input(tg, df_model_find_input(tg, "weights"))->shape[0] != Mt) {
        fprintf(stderr, "bench_retarget: %s is not the target of %s\n", argv[2], argv[1]);
        return 1;
    }
    /* the solved source weights and target weights of every frame, for the
     * weights-input and target-alone variants */
    float *SW = malloc(sizeof(float) * (size_t)(F * Ms)), *TW = malloc(sizeof(float) * (size_t)(F * Mt));
    float *pos = malloc(sizeof(float) * (size_t)(B * N3)), *tw = malloc(sizeof(float) * (size_t)(B * Mt));
    df_scratch_t *scr = df_scratch_new();
    {
        const float *pin[1];
        float *ps[1], *pt[1];
        for (int64_t f = 0; f < F; f++) {
            df_batch_t b;
            memset(&b, 0, sizeof b);
            b.n = 1;
            pin[0] = X + f * K * 3;
            ps[0] = SW + f * Ms;
            pt[0] = TW + f * Mt;
            b.in[im] = pin;
            b.out[os] = ps;
            b.out[ot] = pt;
            if (df_model_evaluate(rt, &b, scr, &err)) {
                fprintf(stderr, "bench_retarget: %s\n", err.msg);
                return 1;
            }
        }
    }
    int ist = df_model_find_input(rt, "state"), ost = df_model_find_output(rt, "state");
    if (ist < 0 || ost < 0) {
        fprintf(stderr, "bench_retarget: %s has no state (sequences' warm start)\n", argv[1]);
        return 1;
    }
    const int64_t ns = df_model_input(rt, ist)->shape[0];
    const int rn = df_model_find_output(rt, "normals"), tn = df_model_find_output(tg, "normals");
    if (normals) {
        if (rn < 0 || tn < 0) {
            fprintf(stderr, "bench_retarget: --normals: a model has no normals output\n");
            return 1;
        }
        g_nrm = malloc(sizeof(float) * (size_t)(B * N3));
        g_pn = malloc(sizeof *g_pn * (size_t)B);
        if (!g_nrm || !g_pn) return 1;
    }
    enum { NV = 6 };
    variant_t v[NV] = {
        {"markers -> positions", rt, im, X, K * 3, df_model_find_output(rt, "positions"), -1, 0,
         NULL, 0, 0},
        {"source_weights -> positions", rt, iw, SW, Ms, df_model_find_output(rt, "positions"), -1,
         0, NULL, 0, 0},
        {"target alone (rigged, its weights)", tg, df_model_find_input(tg, "weights"), TW, Mt,
         df_model_find_output(tg, "positions"), -1, 0, NULL, 0, 0},
        {"markers -> target_weights only", rt, im, X, K * 3, -1, ot, 0, NULL, 0, 0},
        {"markers -> positions, sequences", rt, im, X, K * 3,
         df_model_find_output(rt, "positions"), -1, 0, NULL, 0, 0, 1, ist, ost, ns},
        {"markers -> target_weights, sequences", rt, im, X, K * 3, -1, ot, 0, NULL, 0, 0, 1,
         ist, ost, ns},
    };
    for (int i = 0; i < NV; i++) v[i].out_nrm = normals ? (v[i].m == tg ? tn : rn) : -1;
    for (int i = 0; i < NV; i++) {
        if (!v[i].seq) continue;
        v[i].st = malloc(sizeof(float) * (size_t)(2 * B * ns));
        for (int64_t e = 0; e < 2 * B * ns; e++) v[i].st[e] = -1.0f; /* no previous frame */
    }
    /* 5 rounds; within a round the variants take turns batch by batch, so
     * batch k of every variant runs at the same moment of the machine's
     * life (a VM's speed drifts by several % over seconds): the paired
     * ratios below compare batches that ran side by side */
    {
        const float **pin = malloc(sizeof *pin * (size_t)B), **psi = malloc(sizeof *psi * (size_t)B);
        float **pp = malloc(sizeof *pp * (size_t)B), **pt = malloc(sizeof *pt * (size_t)B);
        float **pso = malloc(sizeof *pso * (size_t)B);
        for (int r = 0; r < 5; r++) {
            double used[NV] = {0}, t0 = now();
            int64_t nb = 0;
            while (now() - t0 < seconds * NV) {
                for (int i = 0; i < NV; i++)
                    used[i] += one_batch(&v[i], B, F, pos, tw, N3, Mt, scr, pin, psi, pp, pt, pso);
                nb++;
            }
            for (int i = 0; i < NV; i++) {
                double rate = 1e6 * (double)nb / used[i];
                if (rate > v[i].best) v[i].best = rate;
            }
        }
        free(pin), free(psi), free(pp), free(pt), free(pso);
    }
    double pm[3], ps[3], pw[3];
    paired(&v[0], &v[2], pm);
    paired(&v[4], &v[2], ps);
    paired(&v[3], &v[2], pw);
    printf("retarget bench: %lld target vertices, %lld source controls, %lld target shapes, "
           "%lld markers, batch %d, 1 thread, %lld frames cycled, best of 5 x %.1f s CPU%s%s%s\n",
           (long long)N, (long long)Ms, (long long)Mt, (long long)K, B, (long long)F, seconds,
           params ? ", parameters " : "", params ? params : "",
           normals ? ", positions with normals" : "");
    printf("  %-36s %10s %9s | CPU us/pose of each batch: %6s %6s %6s %6s\n", "", "poses/s",
           "us/pose", "p10", "p50", "p90", "p99");
    for (int i = 0; i < NV; i++) {
        qsort(v[i].batch_us, v[i].nb, sizeof(double), cmp_d);
        printf("  %-36s %10.0f %9.2f | %26s %6.2f %6.2f %6.2f %6.2f\n", v[i].name, v[i].best,
               1e6 / v[i].best, "", pct(&v[i], 0.10), pct(&v[i], 0.50), pct(&v[i], 0.90),
               pct(&v[i], 0.99));
    }
    double t_m = 1 / v[0].best, t_w = 1 / v[1].best, t_t = 1 / v[2].best;
    double m_m = pct(&v[0], 0.5), m_w = pct(&v[1], 0.5), m_t = pct(&v[2], 0.5);
    printf("  ours (markers -> positions) %.2f us/pose, the target's own evaluation %.2f us/pose: "
           "ratio %.3f\n", 1e6 * t_m, 1e6 * t_t, t_m / t_t);
    printf("  mapping cost over the target's own evaluation: markers %+.1f %% (medians %+.1f %%), "
           "source_weights %+.1f %% (medians %+.1f %%)\n", 100 * (t_m - t_t) / t_t,
           100 * (m_m - m_t) / m_t, 100 * (t_w - t_t) / t_t, 100 * (m_w - m_t) / m_t);
    double t_s = 1 / v[4].best, m_s = pct(&v[4], 0.5);
    printf("  in sequences (each pose the next frame of its own sequence, the solve started from "
           "the frame before): markers %+.1f %% (medians %+.1f %%)\n",
           100 * (t_s - t_t) / t_t, 100 * (m_s - m_t) / m_t);
    printf("  paired batches (each batch beside the target's batch of the same turn), median "
           "[quartiles]: markers %+.1f %% [%+.1f, %+.1f], sequences %+.1f %% [%+.1f, %+.1f]; "
           "the mapping alone (target_weights) %.1f %% [%.1f, %.1f] of the target's time\n",
           pm[1], pm[0], pm[2], ps[1], ps[0], ps[2], 100 + pw[1], 100 + pw[0], 100 + pw[2]);
    for (int i = 0; i < NV; i++) {
        free(v[i].batch_us);
        free(v[i].st);
    }
    df_scratch_free(&scr);
    df_model_unref(&rt);
    df_model_unref(&tg);
    free(X);
    free(SW);
    free(TW);
    free(pos);
    free(tw);
    free(g_nrm);
    free(g_pn);
    return 0;
}

/* bench_rigapprox.c — `make bench-rigapprox`: served throughput of a rigapprox
 * model and the cost of its reconstruction, side by side in one run.
 *
 *   build/bench/bench_rigapprox MODEL.safetensors [--dump FOLDED.safetensors | --served-only]
 *
 * Prints, all on one OpenBLAS thread (the daemon's setting):
 *  1. poses/s through df_model_evaluate (the served path) at batch 1, 8, 32,
 *     128, dense-folded and sparse reconstruction;
 *  2. the batch-1 weight-streaming floor: bytes of weights the dense path
 *     must read per pose (network + anchor networks + folded G, H, g0) /
 *     DRAM bandwidth measured here (the definition: a one-thread
 *     triad), and our batch-1 time as a multiple of it. Batch 1 and the
 *     bandwidths are measured in alternation (5 rounds, best of each) so a
 *     noisy neighbour on the memory bus hits both. Also printed, for
 *     reading the ratio: the non-weight bytes a pose reads (rest, skin
 *     weights, output...), a read-only DRAM stream (sdot over 2 x 128 MB:
 *     gemv only reads, a triad also writes) and a read-only stream over the
 *     model's own byte count repeated (cache-warm: a model that fits the
 *     last-level cache is not bound by DRAM at batch 1);
 *  3. reconstruction alone, us/pose, sparse (CHOLMOD factor, our
 *     substitutions, 3B right-hand sides) vs dense (GEMMs on the folded
 *     matrices; at batch 1 sgemv + df_matvec3_add, as served) on this
 *     model's mesh and on grid meshes of 1k-20k vertices (P = 5 %, A = 2 %
 *     of V) — the crossover;
 *  --served-only repeats only the dense served throughput (OURS_B lines);
 *  4. --dump writes the folded model (G, H, g0 + networks) for the PyTorch
 *     side (bench/bench_rigapprox_torch.py), so both run the same weights.
 */
#include "df.h"
#include "math/laplacian.h"
#include "math/nn.h"
#include "rigapprox/rigapprox.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* one-thread triad a = b + s c over 3 x 128 MB, best of 3; GB/s counting
 * 3 streams (the write-allocate read of a is not counted, as in STREAM) */
static double triad_gbs(void)
{
    size_t n = 32u << 20;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t = now();
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        t = now() - t;
        if (t < best) best = t;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a), free(b), free(c);
    return 3.0 * n * 4 / best / 1e9;
}

/* one-thread read-only stream: sdot over two arrays of `bytes`/2 each,
 * repeated for ~0.1 s, best pass; GB/s of bytes read */
static double read_gbs(double bytes)
{
    size_t n = (size_t)(bytes / 8) + 16;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    for (size_t i = 0; i < n; i++) a[i] = 1e-3f * (float)(i & 7), b[i] = 1;
    double best = 1e9, t0 = now();
    volatile float sink = 0;
    do {
        double t = now();
        sink += cblas_sdot((int)n, a, 1, b, 1);
        t = now() - t;
        if (t < best) best = t;
    } while (now() - t0 < 0.1);
    (void)sink;
    free(a), free(b);
    return 2.0 * n * 4 / best / 1e9;
}

/* poses/s through the served path: the best of 5 rounds of secs / 5 each
 * (the least disturbed by other processes on a shared machine) */
static double served(df_model_t *m, int B, const float *world, const float *ctl, int64_t V, double secs)
{
    int ij = df_model_find_input(m, "joint_matrices"), ic = df_model_find_input(m, "controls");
    int op = df_model_find_output(m, "positions");
    float *out = malloc(sizeof(float) * B * V * 3);
    const float **pj = malloc(sizeof(float *) * B), **pc = malloc(sizeof(float *) * B);
    float **po = malloc(sizeof(float *) * B);
    for (int b = 0; b < B; b++) pj[b] = world + (size_t)(b % 16) * df_model_input(m, ij)->shape[0] * 12,
                                 pc[b] = ctl, po[b] = out + (size_t)b * V * 3;
    df_batch_t bt;
    memset(&bt, 0, sizeof bt);
    bt.n = B;
    bt.in[ij] = pj;
    if (ic >= 0) bt.in[ic] = pc;
    bt.out[op] = (float *const *)po;
    df_scratch_t *sc = df_scratch_new();
    df_error_t err;
    df_model_evaluate(m, &bt, sc, &err); /* grow scratch */
    double best = 0;
    for (int round = 0; round < 5; round++) {
        int reps = 0;
        double t0 = now(), t = 0;
        do {
            if (df_model_evaluate(m, &bt, sc, &err)) { fprintf(stderr, "%s\n", err.msg); break; }
            reps++;
        } while ((t = now() - t0) < secs / 5 || reps < 2);
        if (reps * (double)B / t > best) best = reps * (double)B / t;
    }
    df_scratch_free(&sc);
    free(out), free(pj), free(pc), free(po);
    return best;
}

/* reconstruction us/pose: sparse vs dense, B poses */
static void recon(df_lap_t *lap, int64_t V, int64_t P, int64_t A, int B, double *us_sparse, double *us_dense)
{
    df_rng_t r = {3};
    float *U = malloc(sizeof(float) * 3 * V * P), *G = malloc(sizeof(float) * 3 * V * P);
    float *H = malloc(sizeof(float) * V * A);
    for (int64_t i = 0; i < 3 * V * P; i++) U[i] = (float)df_rng_normal(&r) * 0.01f;
    df_lap_fold(lap, (int)(3 * P), U, G, H, NULL);
    float *z = malloc(sizeof(float) * B * P), *ap = malloc(sizeof(float) * A * 3 * B);
    for (int64_t i = 0; i < B * P; i++) z[i] = (float)df_rng_normal(&r);
    for (int64_t i = 0; i < A * 3 * B; i++) ap[i] = (float)df_rng_normal(&r) * 0.01f;
    float *delta = malloc(sizeof(float) * B * 3 * V), *D = malloc(sizeof(float) * V * 3 * B);
    float *R = malloc(sizeof(float) * V * 3 * B), *out = malloc(sizeof(float) * B * 3 * V);
    double *w = malloc(sizeof(double) * 2 * V * 3 * B);
    /* sparse: delta = U z, transpose, solve, transpose back (what the kind does) */
    int reps = 0;
    double t0 = now(), t = 0;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)(3 * V), (int)P, 1, z, (int)P, U, (int)P, 0, delta, (int)(3 * V));
        for (int64_t v = 0; v < V; v++)
            for (int p = 0; p < B; p++)
                for (int c = 0; c < 3; c++) D[(v * B + p) * 3 + c] = delta[(size_t)p * 3 * V + v * 3 + c];
        df_lap_reconstruct(lap, 3 * B, D, ap, R, w);
        for (int64_t v = 0; v < V; v++)
            for (int p = 0; p < B; p++)
                for (int c = 0; c < 3; c++) out[(size_t)p * 3 * V + v * 3 + c] = R[(v * B + p) * 3 + c];
        reps++;
    } while ((t = now() - t0) < 0.5 || reps < 3);
    *us_sparse = t / reps / B * 1e6;
    reps = 0;
    t0 = now();
    do {
        if (B == 1) { /* what the kind does at batch 1: sgemv on G, one pass over H */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(3 * V), (int)P, 1, G, (int)P, z, 1, 0, out, 1);
            df_matvec3_add(V, (int)A, H, ap, out, R);
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, (int)(3 * V), (int)P, 1, z, (int)P, G, (int)P, 0, out, (int)(3 * V));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)V, 3 * B, (int)A, 1, H, (int)A, ap, 3 * B, 0, R, 3 * B);
            for (int64_t v = 0; v < V; v++)
                for (int p = 0; p < B; p++)
                    for (int c = 0; c < 3; c++) out[(size_t)p * 3 * V + v * 3 + c] += R[(v * B + p) * 3 + c];
        }
        reps++;
    } while ((t = now() - t0) < 0.5 || reps < 3);
    *us_dense = t / reps / B * 1e6;
    free(U), free(G), free(H), free(z), free(ap), free(delta), free(D), free(R), free(out), free(w);
}

static void grid(int n, int64_t *nv, int64_t *nt, float **pos, uint32_t **tris)
{
    *nv = (int64_t)n * n, *nt = (int64_t)(n - 1) * (n - 1) * 2;
    *pos = malloc(sizeof(float) * 3 * *nv);
    *tris = malloc(sizeof(uint32_t) * 3 * *nt);
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            float *p = *pos + 3 * ((int64_t)y * n + x);
            p[0] = (float)x, p[1] = (float)y, p[2] = 0.1f * sinf(x * 0.3f);
        }
    int64_t t = 0;
    for (int y = 0; y + 1 < n; y++)
        for (int x = 0; x + 1 < n; x++) {
            uint32_t a = y * n + x, b = a + 1, c = a + n, d = c + 1;
            uint32_t *T = *tris + 6 * t++; /* two triangles per quad */
            T[0] = a, T[1] = b, T[2] = d, T[3] = a, T[4] = d, T[5] = c;
        }
    *nt = 2 * t;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_rigapprox MODEL.safetensors [--dump FOLDED.safetensors]\n");
        return 2;
    }
    openblas_set_num_threads(1);
    const char *path = argv[1], *dump = argc > 3 && !strcmp(argv[2], "--dump") ? argv[3] : NULL;
    int served_only = argc > 2 && !strcmp(argv[2], "--served-only");
    df_error_t err;
    df_st_t *st = NULL;
    if (df_st_open(path, NULL, &st, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    df_ramodel_t m;
    if (df_ramodel_read(st, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int64_t V = m.nv, J = m.nj;
    double wbytes = 0;
    if (m.net) wbytes += 4.0 * df_mlp_n_params(m.net);
    for (int64_t a = 0; a < m.na; a++) wbytes += 4.0 * df_mlp_n_params(m.anc_nets[a]);
    /* the linear paths beside the networks: lin [P,F] + bias, alin [3A,F] + bias */
    double lin_bytes = (m.lin ? 4.0 * m.P * (m.nf + 1) : 0) + (m.alin ? 4.0 * 3 * m.na * (m.nf + 1) : 0);
    wbytes += lin_bytes;
    double net_bytes = wbytes, diff_bytes = m.net ? 4.0 * df_mlp_n_params(m.net) : 0;
    if (m.variant == DF_RA_OURS) /* folded G [3V,P], H [V,A], g0 [3V] */
        wbytes += 4.0 * (3.0 * V * m.P + (double)V * m.na + 3.0 * V);
    else if (m.variant != DF_RA_LBS) /* PCA basis [3V,P] and mean [3V] */
        wbytes += 4.0 * (3.0 * V * m.P + 3.0 * V);
    /* read per pose besides the weights: rest, skin (index + weight), inverse
     * binds, feature mean and scale, the output written */
    double other_bytes = 4.0 * (3.0 * V + 2.0 * V * m.k + 12.0 * J + 2.0 * m.nf + 3.0 * V);
    printf("model %s: variant %s, %lld vertices, %lld joints, %lld controls, net %s%d layers, P %lld, %lld anchors\n",
           path, df_ramodel_variant_name(m.variant), (long long)V, (long long)J, (long long)m.nc, "",
           m.net ? m.net->n_layers : 0, (long long)m.P, (long long)m.na);
    printf("weights: networks %.1f MB, folded G+H+g0 (PCA basis for the baselines) %.1f MB\n", net_bytes / 1e6,
           (wbytes - net_bytes) / 1e6);
    /* poses: bind pose perturbed */
    float *world = malloc(sizeof(float) * 16 * J * 12), *ctl = calloc(m.nc + 1, sizeof(float));
    df_rng_t r = {1};
    for (int p = 0; p < 16; p++)
        for (int64_t j = 0; j < J; j++) {
            float inv[12];
            const float *ib = m.invbind + j * 12;
            /* world = inverse(invbind) (bind pose) + jitter */
            double a[9] = {ib[0], ib[1], ib[2], ib[4], ib[5], ib[6], ib[8], ib[9], ib[10]};
            double det = a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) + a[2] * (a[3] * a[7] - a[4] * a[6]);
            double c[9] = {(a[4] * a[8] - a[5] * a[7]) / det, (a[2] * a[7] - a[1] * a[8]) / det, (a[1] * a[5] - a[2] * a[4]) / det,
                           (a[5] * a[6] - a[3] * a[8]) / det, (a[0] * a[8] - a[2] * a[6]) / det, (a[2] * a[3] - a[0] * a[5]) / det,
                           (a[3] * a[7] - a[4] * a[6]) / det, (a[1] * a[6] - a[0] * a[7]) / det, (a[0] * a[4] - a[1] * a[3]) / det};
            for (int i = 0; i < 3; i++) {
                for (int k = 0; k < 3; k++) inv[i * 4 + k] = (float)c[i * 3 + k] + 0.01f * (float)df_rng_normal(&r);
                inv[i * 4 + 3] = (float)-(c[i * 3] * ib[3] + c[i * 3 + 1] * ib[7] + c[i * 3 + 2] * ib[11]);
            }
            memcpy(world + (p * J + j) * 12, inv, sizeof inv);
        }
    if (served_only) { /* a repeat of the served throughput only (bench/run_rigapprox.sh) */
        df_model_t *mo = NULL;
        if (df_model_open(path, "rigapprox", "{\"reconstruction\":\"dense\"}", NULL, &mo, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        int Bs1[4] = {1, 8, 32, 128};
        for (int i = 0; i < 4; i++) printf("OURS_B%d %.1f\n", Bs1[i], served(mo, Bs1[i], world, ctl, V, 1.0));
        df_model_unref(&mo);
        free(world);
        free(ctl);
        df_ramodel_release(&m);
        df_st_close(&st);
        return 0;
    }
    double bw = triad_gbs(), bw_read = 0, bw_warm = 0;
    const char *modes[2] = {"{\"reconstruction\":\"dense\"}", "{\"reconstruction\":\"sparse\"}"};
    double ps[2][4];
    int Bs[4] = {1, 8, 32, 128};
    for (int k = 0; k < 2; k++) {
        df_model_t *mo = NULL;
        if (df_model_open(path, "rigapprox", modes[k], NULL, &mo, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        for (int i = 0; i < 4; i++) ps[k][i] = served(mo, Bs[i], world, ctl, V, 1.0);
        if (k == 0) /* batch 1 and the bandwidths in alternation, best of 5 rounds */
            for (int round = 0; round < 5; round++) {
                double b1 = served(mo, 1, world, ctl, V, 0.3), tr = triad_gbs();
                double rd = read_gbs(256e6), rw = read_gbs(wbytes);
                if (b1 > ps[0][0]) ps[0][0] = b1;
                if (tr > bw) bw = tr;
                if (rd > bw_read) bw_read = rd;
                if (rw > bw_warm) bw_warm = rw;
            }
        df_model_unref(&mo);
        if (m.variant != DF_RA_OURS) { memcpy(ps[1], ps[0], sizeof ps[0]); break; }
    }
    printf("served poses/s (df_model_evaluate, 1 thread)\n  batch     dense    sparse   dense/sparse\n");
    for (int i = 0; i < 4; i++)
        printf("  %5d  %8.0f  %8.0f   %.2fx\n", Bs[i], ps[0][i], ps[1][i], ps[0][i] / ps[1][i]);
    double floor_ps = bw * 1e9 / wbytes;
    printf("\nbatch-1 weight-streaming floor (1 thread; batch 1 and bandwidths best of 5 alternating rounds)\n"
           "  bytes of weights per pose: %.2f MB = differential net %.2f + anchor nets %.2f + linear paths %.2f + G %.2f + H %.2f + g0 %.3f\n"
           "  not counted (not weights): rest, skin, inverse binds, feature scaling, output: %.3f MB\n",
           wbytes / 1e6, diff_bytes / 1e6, (net_bytes - diff_bytes - lin_bytes) / 1e6, lin_bytes / 1e6, 12.0 * V * m.P / 1e6,
           m.variant == DF_RA_OURS ? 4.0 * V * m.na / 1e6 : 0.0, 12.0 * V / 1e6, other_bytes / 1e6);
    printf("  triad (the definition) %5.1f GB/s: floor %6.0f poses/s; ours (dense) %.0f poses/s = %.2fx the floor time\n",
           bw, floor_ps, ps[0][0], floor_ps / ps[0][0]);
    printf("  same, weights + the uncounted bytes:                     %.2fx\n", bw * 1e9 / (wbytes + other_bytes) / ps[0][0]);
    printf("  read-only DRAM stream %5.1f GB/s:                           %.2fx\n", bw_read, bw_read * 1e9 / wbytes / ps[0][0]);
    printf("  read-only stream over %.1f MB, cache-warm %5.1f GB/s:       %.2fx\n", wbytes / 1e6, bw_warm,
           bw_warm * 1e9 / wbytes / ps[0][0]);
    printf("FLOOR %.1f\nFLOOR_RATIO %.3f\nFLOOR_RATIO_READ %.3f\n", floor_ps, floor_ps / ps[0][0], bw_read * 1e9 / wbytes / ps[0][0]);
    for (int i = 0; i < 4; i++) printf("OURS_B%d %.1f\n", Bs[i], ps[0][i]);
    if (m.variant == DF_RA_OURS) {
        df_lap_t *lap = NULL;
        if (df_rigapprox_lap(V, m.rest, m.nt, m.tris, m.na, m.anchors, m.omega, &lap, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        printf("\nreconstruction us/pose on this mesh (V %lld, P %lld, A %lld)\n  batch   sparse    dense   sparse/dense\n",
               (long long)V, (long long)m.P, (long long)m.na);
        for (int B = 1; B <= 32; B += 31) {
            double s, d;
            recon(lap, V, m.P, m.na, B, &s, &d);
            printf("  %5d  %7.1f  %7.1f   %.2fx\n", B, s, d, s / d);
        }
        if (dump) {
            float *G = malloc(sizeof(float) * 3 * V * m.P), *H = malloc(sizeof(float) * V * m.na), *g0 = malloc(sizeof(float) * 3 * V);
            df_lap_fold(lap, (int)(3 * m.P), m.basis, G, H, &err);
            df_lap_fold(lap, 3, m.basis_mean, g0, NULL, &err);
            df_st_writer_t *w = df_st_writer_new();
            int64_t sg[2] = {3 * V, m.P}, sh[2] = {V, m.na}, s0[1] = {3 * V}, sw[2] = {16 * J, 12};
            df_st_writer_add(w, "G", DF_DT_F32, 2, sg, G);
            df_st_writer_add(w, "H", DF_DT_F32, 2, sh, H);
            df_st_writer_add(w, "g0", DF_DT_F32, 1, s0, g0);
            df_st_writer_add(w, "bench_world", DF_DT_F32, 2, sw, world);
            /* the served answer for bench pose 0, for the PyTorch side to compare */
            df_model_t *mo = NULL;
            float *p0 = malloc(sizeof(float) * 3 * V);
            if (!df_model_open(path, "rigapprox", NULL, NULL, &mo, &err)) {
                const float *pj[1] = {world}, *pc[1] = {ctl};
                float *po[1] = {p0};
                df_batch_t bt;
                memset(&bt, 0, sizeof bt);
                bt.n = 1;
                bt.in[df_model_find_input(mo, "joint_matrices")] = pj;
                if (m.nc) bt.in[df_model_find_input(mo, "controls")] = pc;
                bt.out[df_model_find_output(mo, "positions")] = po;
                df_scratch_t *sc = df_scratch_new();
                int64_t sp[2] = {V, 3};
                if (!df_model_evaluate(mo, &bt, sc, &err)) df_st_writer_add(w, "pose0_positions", DF_DT_F32, 2, sp, p0);
                df_scratch_free(&sc);
                df_model_unref(&mo);
            }
            free(p0);
            if (df_st_writer_save(w, dump, &err)) fprintf(stderr, "%s\n", err.msg);
            df_st_writer_free(&w);
            free(G), free(H), free(g0);
        }
        df_lap_free(&lap);
    }
    printf("\nreconstruction crossover on grid meshes (P = 5 %%, A = 2 %% of V), us/pose\n"
           "      V  batch   sparse    dense   sparse/dense  folded MB\n");
    int sizes[4] = {32, 55, 100, 141};
    for (int si = 0; si < 4; si++) {
        int64_t nv, nt;
        float *pos;
        uint32_t *tris;
        grid(sizes[si], &nv, &nt, &pos, &tris);
        int64_t P = nv / 20, A = nv / 50;
        int32_t *anc = malloc(sizeof(int32_t) * A);
        for (int64_t a = 0; a < A; a++) anc[a] = (int32_t)(a * (nv / A)); /* distinct, spread */
        df_lap_t *lap = NULL;
        if (df_lap_new(nv, nt, tris, A, anc, 1.0, &lap, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        for (int B = 1; B <= 32; B += 31) {
            double s, d;
            recon(lap, nv, P, A, B, &s, &d);
            printf("  %5lld  %5d  %7.1f  %7.1f   %6.2fx     %6.1f\n", (long long)nv, B, s, d, s / d,
                   4.0 * (3.0 * nv * P + (double)nv * A) / 1e6);
        }
        df_lap_free(&lap);
        free(pos), free(tris), free(anc);
    }
    free(world), free(ctl);
    df_ramodel_release(&m);
    df_st_close(&st);
    return 0;
}

/* cmd_decompose_net.c — `deform decompose train-init`: train (or score) the
 * trajectory network that initialises a decomposition (core/decompose/
 * decompose_net.h; docs/decompose.md, "Network initialisation").
 *
 *   deform decompose train-init TRAIN.safetensors... --out WEIGHTS.safetensors
 *       [--test SEQ.safetensors]... [--steps N (3000)] [--batch N (256)] [--lr X (2e-3)]
 *       [--seed S (1)] [--frames T (32)] [--embed D (16)] [--window X (0.6)]
 *       [--no-augment] [--threads T (1)] [--quiet]
 *   deform decompose train-init --score WEIGHTS.safetensors SEQ.safetensors...
 *
 * Sequences are raw decomposition sequences with `bones` I32 [N] (the true
 * bone of each vertex; `deform decompose MODEL --save-sequence F
 * --sequence-only`, tools/decompose/blend_actions.py) and metadata
 * `character` (sequences of one character are one group: training samples
 * characters evenly, and a character given as training and test data is
 * refused). After training, every sequence is scored (nearest-prototype
 * accuracy against the largest bone's share, k-means ARI) for the network
 * and for the raw resampled trajectories.
 */
#include "decompose/decompose_net.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nseq {
    const char *path;
    char character[128], clip[128];
    int64_t F, N;
    double *X, *rest;
    int32_t *label;
    int group, test;
} nseq_t;

static void nseq_free(nseq_t *s)
{
    free(s->X);
    free(s->rest);
    free(s->label);
}

static int train_usage(void)
{
    fprintf(stderr,
            "usage: deform decompose train-init TRAIN.safetensors... --out WEIGHTS.safetensors\n"
            "         [--test SEQ.safetensors]... [--steps N(3000)] [--batch N(256)] [--lr X(2e-3)]\n"
            "         [--seed S(1)] [--frames T(32)] [--embed D(16)] [--window X(0.6)]\n"
            "         [--no-augment] [--threads T(1)] [--quiet]\n"
            "       deform decompose train-init --score WEIGHTS.safetensors SEQ.safetensors...\n"
            "  sequences: raw decomposition sequences with `bones` [N] (docs/decompose.md)\n");
    return 2;
}

static int read_seq(const char *path, nseq_t *s, df_error_t *err)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    df_st_t *st = NULL;
    int rc = df_st_open(path, NULL, &st, err);
    if (rc) return rc;
    const df_tensor_t *fr, *bo, *rs;
    int64_t fs[3] = {-1, -1, 3};
    rc = df_st_require(st, "frames", DF_DT_F32, 3, fs, 0, &fr, err);
    if (!rc) {
        s->F = fr->shape[0];
        s->N = fr->shape[1];
        int64_t bs[1] = {s->N}, rsh[2] = {s->N, 3};
        rc = df_st_require(st, "bones", DF_DT_I32, 1, bs, 0, &bo, err);
        if (!rc) rc = df_st_require(st, "rest", DF_DT_F32, 2, rsh, 1, &rs, err);
        if (!rc && (s->F < 2 || s->N < 2))
            rc = df_error_set(err, DF_EINVAL, "%lld frames x %lld vertices (>= 2 each)",
                              (long long)s->F, (long long)s->N);
        if (!rc) {
            s->X = malloc(sizeof(double) * (size_t)s->N * 3 * s->F);
            s->rest = malloc(sizeof(double) * (size_t)s->N * 3);
            s->label = malloc(sizeof(int32_t) * (size_t)s->N);
            if (!s->X || !s->rest || !s->label) rc = df_error_set(err, DF_ENOMEM, "out of memory");
        }
        if (!rc) {
            memcpy(s->label, bo->data, sizeof(int32_t) * (size_t)s->N);
            rc = df_decompose_net_normalise(s->F, s->N, fr->data, rs ? rs->data : NULL, s->X,
                                            s->rest, err);
        }
        const char *c = df_st_meta(st, "character"), *k = df_st_meta(st, "clip");
        snprintf(s->character, sizeof s->character, "%s", c ? c : path);
        snprintf(s->clip, sizeof s->clip, "%s", k ? k : "");
    }
    df_st_close(&st);
    return rc;
}

static double max_motion(const nseq_t *s)
{
    double m = 0;
    for (int64_t i = 0; i < s->N; i++) {
        const double *x = s->X + (size_t)i * 3 * s->F;
        for (int64_t p = 1; p < s->F; p++)
            for (int r = 0; r < 3; r++) m = fmax(m, fabs(x[3 * p + r] - x[r]));
    }
    return m;
}

static void progress(void *user, const df_decompose_net_progress_t *p)
{
    fprintf(stderr, "train-init: step %lld/%lld  loss %.4f  elapsed %.0fs  ETA %.0fs\n",
            (long long)p->step, (long long)p->steps, p->loss, p->seconds, p->eta_seconds);
}

static const char *base(const char *p)
{
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

int df__decompose_train_init(int argc, char **argv)
{
    const char *out = NULL, *score_w = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof(char *));
    int *is_test = calloc((size_t)argc + 1, sizeof(int));
    int nf = 0, threads = 1, quiet = 0, embed = 16, frames = 32;
    df_decompose_net_train_opts_t o;
    df_decompose_net_train_opts_default(&o);
    if (!files || !is_test) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(a, "--out") && more) out = argv[++i];
        else if (!strcmp(a, "--score") && more) score_w = argv[++i];
        else if (!strcmp(a, "--test") && more) { is_test[nf] = 1; files[nf++] = argv[++i]; }
        else if (!strcmp(a, "--steps") && more) o.steps = strtoll(argv[++i], &end, 10);
        else if (!strcmp(a, "--batch") && more) o.batch = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--lr") && more) o.lr = strtof(argv[++i], &end);
        else if (!strcmp(a, "--seed") && more) o.seed = strtoull(argv[++i], &end, 10);
        else if (!strcmp(a, "--frames") && more) frames = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--embed") && more) embed = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--window") && more) o.min_window = strtod(argv[++i], &end);
        else if (!strcmp(a, "--threads") && more) threads = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--no-augment")) o.augment = 0;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { train_usage(); free(files); free(is_test); return 0; }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "deform decompose train-init: unknown option '%s'\n", a);
            free(files); free(is_test);
            return train_usage();
        } else files[nf++] = a;
        if (end && *end) {
            fprintf(stderr, "deform decompose train-init: %s: not a number: '%s'\n", a, argv[i]);
            free(files); free(is_test);
            return 2;
        }
    }
    int bad = 0;
    if (!nf || (!out && !score_w) || (out && score_w)) bad = train_usage();
    else if (o.steps < 1 || o.batch < 4 || o.batch > 65536 || !(o.lr > 0) || frames < 8 ||
             frames > 1024 || embed < 1 || embed > 256 || !(o.min_window > 0 && o.min_window <= 1) ||
             threads < 1 || threads > 64) {
        fprintf(stderr, "deform decompose train-init: --steps >= 1, --batch 4..65536, --lr > 0, "
                        "--frames 8..1024, --embed 1..256, --window in (0, 1], --threads 1..64\n");
        bad = 2;
    }
    if (bad) { free(files); free(is_test); return bad; }
    openblas_set_num_threads(threads);

    df_error_t err = {0};
    nseq_t *S = calloc((size_t)nf, sizeof *S);
    int rc = S ? DF_OK : DF_ENOMEM, ng = 0;
    char (*groups)[128] = calloc((size_t)nf, sizeof *groups);
    int *gtest = calloc((size_t)nf, sizeof(int)), *gtrain = calloc((size_t)nf, sizeof(int));
    if (!groups || !gtest || !gtrain) rc = DF_ENOMEM;
    for (int q = 0; q < nf && !rc; q++) {
        if ((rc = read_seq(files[q], &S[q], &err))) {
            fprintf(stderr, "deform decompose train-init: %s: %s\n", files[q], err.msg);
            break;
        }
        S[q].test = is_test[q] || score_w;
        int g = 0;
        while (g < ng && strcmp(groups[g], S[q].character)) g++;
        if (g == ng) snprintf(groups[ng++], sizeof groups[0], "%s", S[q].character);
        S[q].group = g;
        (S[q].test ? gtest : gtrain)[g]++;
    }
    for (int g = 0; g < ng && !rc && !score_w; g++)
        if (gtest[g] && gtrain[g]) {
            fprintf(stderr, "deform decompose train-init: character '%s' has training and test "
                            "sequences (hold characters out, not clips)\n", groups[g]);
            rc = DF_EINVAL;
        }
    /* static sequences carry no motion: skipped for training, noted */
    int ntrain = 0;
    df_decompose_net_seq_t *tr = calloc((size_t)nf + 1, sizeof *tr);
    if (!tr && !rc) rc = DF_ENOMEM;
    for (int q = 0; q < nf && !rc; q++) {
        if (S[q].test) continue;
        if (max_motion(&S[q]) < 1e-4) {
            fprintf(stderr, "train-init: %s: no motion (static frames), skipped\n", files[q]);
            continue;
        }
        tr[ntrain++] = (df_decompose_net_seq_t){S[q].F, S[q].N, S[q].X, S[q].rest, S[q].label,
                                                S[q].group};
    }
    df_decompose_net_t *net = NULL;
    if (!rc && score_w) {
        rc = df_decompose_net_load(score_w, &net, &err);
        if (rc) fprintf(stderr, "deform decompose train-init: %s\n", err.msg);
    } else if (!rc) {
        df_decompose_net_arch_t a;
        df_decompose_net_arch_default(&a);
        a.frames = frames;
        a.dense[a.n_dense - 1] = embed;
        rc = df_decompose_net_new(&a, o.seed, &net, &err);
        if (!rc && !ntrain) rc = df_error_set(&err, DF_EINVAL, "no training sequence with motion");
        if (!rc && !quiet) {
            int64_t nv = 0;
            for (int q = 0; q < ntrain; q++) nv += tr[q].N;
            int nchar = 0;
            for (int g = 0; g < ng; g++) nchar += gtrain[g] > 0;
            fprintf(stderr, "train-init: %d training sequences (%d characters, %lld vertex "
                            "trajectories), %lld parameters, %lld steps of %d vertices, %d "
                            "thread(s)\n", ntrain, nchar, (long long)nv,
                    (long long)df_decompose_net_n_params(net), (long long)o.steps, o.batch, threads);
            o.progress = progress;
        }
        if (!rc) rc = df_decompose_net_train(net, ntrain, tr, &o, &err);
        if (rc) fprintf(stderr, "deform decompose train-init: %s\n", err.msg);
    }
    /* scores: every sequence, network and raw trajectories */
    double sum[2][4] = {{0}};
    int cnt[2] = {0, 0};
    if (!rc) {
        printf("%-5s %-14s %-22s %5s %6s | %-17s | %-17s | %s\n", "set", "character", "clip",
               "bones", "verts", "proto acc net/raw", "k-means ARI net/raw", "largest bone");
    }
    for (int q = 0; q < nf && !rc; q++) {
        df_decompose_net_seq_t s = {S[q].F, S[q].N, S[q].X, S[q].rest, S[q].label, S[q].group};
        df_decompose_net_score_t a, b;
        rc = df_decompose_net_score(net, &s, &a, &err);
        if (!rc) rc = df_decompose_net_score(NULL, &s, &b, &err);
        if (rc) {
            fprintf(stderr, "deform decompose train-init: %s: %s\n", files[q], err.msg);
            break;
        }
        printf("%-5s %-14.14s %-22.22s %5d %6lld | %7.3f / %7.3f | %7.3f / %7.3f | %.3f\n",
               S[q].test ? "test" : "train", S[q].character, S[q].clip[0] ? S[q].clip : base(files[q]),
               a.n_bones, (long long)a.n_vertices, a.proto_acc, b.proto_acc, a.ari, b.ari,
               a.majority);
        int t = S[q].test;
        sum[t][0] += a.proto_acc, sum[t][1] += b.proto_acc, sum[t][2] += a.ari, sum[t][3] += b.ari;
        cnt[t]++;
    }
    for (int t = 0; t < 2 && !rc; t++)
        if (cnt[t])
            printf("mean  %-5s (%d sequences)%*s| %7.3f / %7.3f | %7.3f / %7.3f |\n",
                   t ? "test" : "train", cnt[t], 30, "", sum[t][0] / cnt[t], sum[t][1] / cnt[t],
                   sum[t][2] / cnt[t], sum[t][3] / cnt[t]);
    if (!rc && out) {
        char chars[1024] = "", steps[32], seed[32];
        for (int g = 0, len = 0; g < ng; g++)
            if (gtrain[g] && len < (int)sizeof chars - 1)
                len += snprintf(chars + len, sizeof chars - len, "%s%s", len ? "," : "", groups[g]);
        snprintf(steps, sizeof steps, "%lld", (long long)o.steps);
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)o.seed);
        const char *kv[] = {"trained_on", chars, "steps", steps, "seed", seed, NULL};
        rc = df_decompose_net_save(net, out, kv, &err);
        if (rc) fprintf(stderr, "deform decompose train-init: %s\n", err.msg);
        else printf("weights: %s\n", out);
    }
    df_decompose_net_free(&net);
    for (int q = 0; q < nf && S; q++) nseq_free(&S[q]);
    free(S); free(tr); free(groups); free(gtest); free(gtrain); free(files); free(is_test);
    return rc ? 1 : 0;
}

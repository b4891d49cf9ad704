/* bench_safetensors.c — cost of loading and validating model files, and of
 * float16 conversion, each next to its baseline in the same run.
 *
 *   make bench-st            (or build/bench/bench_safetensors [MiB])
 *
 * 1. A file of S MiB (default 256: one F32 tensor, like morph_deltas) is
 *    written with df_st_writer; then, page cache warm, we time
 *      - baseline: open + read() of the whole file into a fresh buffer,
 *      - df_st_open (read into huge pages, validation + finiteness scan),
 *      - df_st_parse from memory (copy into an aligned buffer + validation).
 * 2. f32 -> f16 and f16 -> f32 over 16 M values: df_f32_to_f16/df_f16_to_f32
 *    per value and the array forms df_*_n, versus the compiler's vectorised
 *    _Float16 conversions (F16C with -march=native).
 * Prints GB/s and ns/value; asserts nothing (not a test).
 */
#include "df.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double best_of(int reps, double (*fn)(void *), void *arg)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t = fn(arg);
        if (t < best) best = t;
    }
    return best;
}

static const char *g_path;
static size_t g_size;
static void *g_buf;

/* what a plain loader does: fresh buffer, read() the file */
static double t_read(void *unused)
{
    double t0 = now();
    char *buf = malloc(g_size);
    int fd = open(g_path, O_RDONLY);
    size_t got = 0;
    while (got < g_size) {
        ssize_t r = read(fd, buf + got, g_size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    double t = now() - t0;
    if (got == g_size) memcpy(g_buf, buf, g_size); /* keep for t_parse */
    free(buf);
    return t;
}

static double t_open(void *unused)
{
    df_st_t *st = NULL;
    df_error_t e;
    double t0 = now();
    if (df_st_open(g_path, NULL, &st, &e) != DF_OK) {
        fprintf(stderr, "open: %s\n", e.msg);
        exit(1);
    }
    double t = now() - t0;
    df_st_close(&st);
    return t;
}

static double t_parse(void *unused)
{
    df_st_t *st = NULL;
    df_error_t e;
    double t0 = now();
    if (df_st_parse(g_buf, g_size, NULL, &st, &e) != DF_OK) {
        fprintf(stderr, "parse: %s\n", e.msg);
        exit(1);
    }
    double t = now() - t0;
    df_st_close(&st);
    return t;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    const char *out = getenv("DF_TEST_OUT");
    char path[1024];
    snprintf(path, sizeof path, "%s/bench_st.safetensors", out ? out : "/tmp");
    size_t n = mib * (1u << 20) / 4;
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)(i % 1000) * 1e-3f;
    int64_t sh[3] = {(int64_t)(n / 3), 3, 1};
    n = (size_t)sh[0] * 3;
    df_st_writer_t *w = df_st_writer_new();
    df_st_writer_add(w, "morph_deltas", DF_DT_F32, 3, sh, v);
    df_st_writer_meta(w, "kind", "bench");
    df_error_t e;
    if (df_st_writer_save(w, path, &e) != DF_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    df_st_writer_free(&w);
    struct stat sb;
    stat(path, &sb);
    g_path = path;
    g_size = (size_t)sb.st_size;
    g_buf = malloc(g_size);
    double tr = best_of(5, t_read, NULL);
    double to = best_of(5, t_open, NULL);
    double tp = best_of(5, t_parse, NULL);
    double gb = g_size / 1e9;
    printf("file %.1f MiB (%s)\n", g_size / 1048576.0, path);
    printf("  read() baseline     %7.1f ms  %5.2f GB/s\n", tr * 1e3, gb / tr);
    printf("  df_st_open (read)   %7.1f ms  %5.2f GB/s  (%.2fx read)\n", to * 1e3,
           gb / to, to / tr);
    printf("  df_st_parse (copy)  %7.1f ms  %5.2f GB/s  (%.2fx read)\n", tp * 1e3,
           gb / tp, tp / tr);
    remove(path);
    free(g_buf);

    size_t m = 16u << 20;
    uint16_t *h = malloc(m * sizeof *h);
    float *f = malloc(m * sizeof *f);
    memset(h, 0, m * sizeof *h); /* page faults are not what we measure */
    for (size_t i = 0; i < m; i++) f[i] = v[i % n] * 100.0f - 37.0f;
    double t_ours = 1e30, t_cc = 1e30, t_back = 1e30, t_back_cc = 1e30, t0;
    double t_arr = 1e30, t_back_arr = 1e30;
    volatile uint32_t sink = 0;
    float *f2 = malloc(m * sizeof *f2);
    memset(f2, 0, m * sizeof *f2);
    for (int rep = 0; rep < 5; rep++) { /* best of 5: the machine is shared */
        t0 = now();
        for (size_t i = 0; i < m; i++) h[i] = df_f32_to_f16(f[i]);
        t0 = now() - t0;
        if (t0 < t_ours) t_ours = t0;
        sink += h[rep];
        t0 = now();
        for (size_t i = 0; i < m; i++) {
            _Float16 c = (_Float16)f[i];
            memcpy(&h[i], &c, 2);
        }
        t0 = now() - t0;
        if (t0 < t_cc) t_cc = t0;
        sink += h[rep];
        t0 = now();
        for (size_t i = 0; i < m; i++) f2[i] = df_f16_to_f32(h[i]);
        t0 = now() - t0;
        if (t0 < t_back) t_back = t0;
        sink += (uint32_t)f2[rep];
        t0 = now();
        for (size_t i = 0; i < m; i++) {
            _Float16 c;
            memcpy(&c, &h[i], 2);
            f2[i] = (float)c;
        }
        t0 = now() - t0;
        if (t0 < t_back_cc) t_back_cc = t0;
        sink += (uint32_t)f2[rep];
        t0 = now();
        df_f32_to_f16_n(f, h, m);
        t0 = now() - t0;
        if (t0 < t_arr) t_arr = t0;
        t0 = now();
        df_f16_to_f32_n(h, f2, m);
        t0 = now() - t0;
        if (t0 < t_back_arr) t_back_arr = t0;
        sink += (uint32_t)f2[rep];
    }
    free(f2);
    printf("f32->f16  df_f32_to_f16 %.2f ns/value, _Float16 %.2f ns/value (%.1fx)\n",
           t_ours * 1e9 / m, t_cc * 1e9 / m, t_ours / t_cc);
    printf("f16->f32  df_f16_to_f32 %.2f ns/value, _Float16 %.2f ns/value (%.1fx)\n",
           t_back * 1e9 / m, t_back_cc * 1e9 / m, t_back / t_back_cc);
    printf("arrays    df_f32_to_f16_n %.2f ns/value, df_f16_to_f32_n %.2f ns/value\n",
           t_arr * 1e9 / m, t_back_arr * 1e9 / m);
    free(h);
    free(f);
    free(v);
    return 0;
}

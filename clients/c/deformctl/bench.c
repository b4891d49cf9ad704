/* bench.c — `deformctl bench`: a simple socket load generator.
 *
 * N threads, one connection each, keep D requests in flight (pipelined)
 * for S seconds; each request asks for one character's positions in its
 * default pose (B poses per request). Latency is measured per request from
 * submit to its callback; the report gives requests/s, poses/s, bytes/s
 * and p50/p99/p99.9 latency. A measurement tool, never run by make test.
 */
#include "deformclient.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const char *deformctl_token; /* main.c: NULL or the token to present */

typedef struct bslot {
    double t0;
    struct bthread *bt;
} bslot_t;

typedef struct bthread {
    const char *addr, *character, *encoding;
    int depth, batch;
    double seconds;
    double *lat;
    size_t n_lat, cap_lat;
    size_t bytes;
    int errors;
    char err[1100];
    pthread_t th;
} bthread_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_done(const df_client_result_t *r, void *user)
{
    bslot_t *s = user;
    bthread_t *bt = s->bt;
    if (r->status) {
        bt->errors++;
        snprintf(bt->err, sizeof bt->err, "%s", r->error);
    }
    if (bt->n_lat == bt->cap_lat) {
        bt->cap_lat = bt->cap_lat ? 2 * bt->cap_lat : 4096;
        bt->lat = realloc(bt->lat, bt->cap_lat * sizeof *bt->lat);
    }
    bt->lat[bt->n_lat++] = now_s() - s->t0;
    bt->bytes += r->wire_bytes;
    s->t0 = 0;
}

static void *run(void *arg)
{
    bthread_t *bt = arg;
    df_client_t *c = NULL;
    df_error_t err = {0};
    if (df_client_connect(bt->addr, &c, &err) ||
        (deformctl_token && df_client_auth(c, deformctl_token, &err))) {
        snprintf(bt->err, sizeof bt->err, "%s", err.msg);
        bt->errors++;
        return NULL;
    }
    bslot_t *slots = calloc((size_t)bt->depth, sizeof *slots);
    df_client_request_t q = {0};
    q.character = bt->character;
    q.n_poses = bt->batch;
    q.n_outputs = 1;
    q.outputs[0] = "positions";
    q.encoding = bt->encoding;
    double end = now_s() + bt->seconds;
    for (;;) {
        int stop = now_s() >= end;
        for (int k = 0; !stop && k < bt->depth; k++) {
            if (slots[k].t0 != 0) continue;
            slots[k].bt = bt;
            slots[k].t0 = now_s();
            if (df_client_submit(c, &q, on_done, &slots[k], NULL, &err)) {
                snprintf(bt->err, sizeof bt->err, "%s", err.msg);
                bt->errors++;
                stop = 1;
            }
        }
        if (stop) break;
        if (df_client_poll(c, -1, &err) < 0) {
            snprintf(bt->err, sizeof bt->err, "%s", err.msg);
            bt->errors++;
            break;
        }
    }
    df_client_wait(c, 0, &err);
    free(slots);
    df_client_close(&c);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int deformctl_bench(const char *addr, int argc, char **argv)
{
    int conns = 8, depth = 4, batch = 1;
    double seconds = 5;
    const char *character = NULL, *encoding = NULL;
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--connections")) conns = atoi(v);
        else if (!strcmp(a, "--depth")) depth = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--character")) character = v;
        else if (!strcmp(a, "--encoding")) encoding = v;
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else {
            fprintf(stderr, "deformctl bench: unknown option %s\n", a);
            return 2;
        }
    }
    if (conns < 1 || conns > 1024 || depth < 1 || depth > 4096 || batch < 1 || seconds <= 0) {
        fprintf(stderr, "deformctl bench: bad --connections/--depth/--batch/--seconds\n");
        return 2;
    }
    char first[DF_NAME_MAX] = "";
    if (!character) {
        df_client_t *c = NULL;
        df_error_t err = {0};
        char *js = NULL;
        if (df_client_connect(addr, &c, &err) ||
            (deformctl_token && df_client_auth(c, deformctl_token, &err)) ||
            df_client_info(c, "", &js, &err)) {
            fprintf(stderr, "deformctl bench: %s\n", err.msg);
            df_client_close(&c);
            return 1;
        }
        json_t *root = json_loads(js, 0, NULL);
        const char *n = json_string_value(json_array_get(json_object_get(root, "characters"), 0));
        if (n) snprintf(first, sizeof first, "%s", n);
        json_decref(root);
        free(js);
        df_client_close(&c);
        if (!first[0]) {
            fprintf(stderr, "deformctl bench: the server has no characters\n");
            return 1;
        }
        character = first;
    }
    bthread_t *bt = calloc((size_t)conns, sizeof *bt);
    double t0 = now_s();
    for (int i = 0; i < conns; i++) {
        bt[i] = (bthread_t){.addr = addr, .character = character, .encoding = encoding,
                            .depth = depth, .batch = batch, .seconds = seconds};
        pthread_create(&bt[i].th, NULL, run, &bt[i]);
    }
    size_t n = 0, bytes = 0;
    int errors = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(bt[i].th, NULL);
        n += bt[i].n_lat;
        bytes += bt[i].bytes;
        errors += bt[i].errors;
        if (bt[i].errors) fprintf(stderr, "deformctl bench: connection %d: %s\n", i, bt[i].err);
    }
    double wall = now_s() - t0;
    double *all = malloc((n ? n : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < conns; i++) {
        memcpy(all + k, bt[i].lat, bt[i].n_lat * sizeof *all);
        k += bt[i].n_lat;
        free(bt[i].lat);
    }
    qsort(all, n, sizeof *all, cmp_d);
#define PCT(p) (n ? all[(size_t)((p) * (n - 1))] * 1e6 : 0)
    printf("bench %s: %d connections x depth %d, batch %d, %s, %.1f s\n", character, conns, depth,
           batch, encoding ? encoding : "float32", wall);
    printf("requests %zu  errors %d  req/s %.0f  poses/s %.0f  MB/s %.1f\n", n, errors, n / wall,
           n * (double)batch / wall, bytes / wall / 1e6);
    printf("latency us: p50 %.0f  p99 %.0f  p99.9 %.0f  max %.0f\n", PCT(0.5), PCT(0.99),
           PCT(0.999), PCT(1.0));
    free(all);
    free(bt);
    return errors ? 1 : 0;
}

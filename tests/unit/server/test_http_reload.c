/* test_http_reload.c — model lifecycle under load, against the real daemon.
 *
 * 8 clients query model "prop" continuously while the test: adds version 2
 * and loads it through the repository API (token), adds a corrupt version
 * 3 (refused: version 2 keeps serving), adds version 4 and sends SIGHUP
 * (rescan picks it up). Zero requests may fail, and every answer must equal
 * core's evaluation of the version the response names. Then SIGTERM while
 * requests sit in the queue: they are all answered and the daemon exits 0.
 */
#include "daemon_util.h"
#include <pthread.h>
#include <stdatomic.h>

static daemon_t D;
static char repo[1024];
/* reference models by version; published by the main thread while the
 * clients read them, hence atomic (TSan) */
static df_model_t *_Atomic vers[5];
static atomic_int stop_flag;
static const char *tok_hdr = "Authorization: Bearer reload-token-42";

typedef struct {
    int id, ok, failed, wrong;
    int seen[5];
} cl_t;

static void *client(void *arg)
{
    cl_t *c = arg;
    CURL *h = curl_easy_init();
    df_scratch_t *s = df_scratch_new();
    float ref[120 * 3];
    uint32_t rng = 77u + (uint32_t)c->id;
    while (!atomic_load(&stop_flag)) {
        float w[4];
        for (int i = 0; i < 4; i++) {
            rng = rng * 1664525u + 1013904223u;
            w[i] = (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
        }
        char req[512];
        int len = snprintf(req, sizeof req,
                           "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],"
                           "\"data\":[%.9g,%.9g,%.9g,%.9g]}],\"outputs\":[{\"name\":\"positions\","
                           "\"parameters\":{\"binary_data\":true}}]}",
                           w[0], w[1], w[2], w[3]);
        resp_t r;
        if (http_req(h, D.port, "POST", "/v2/models/prop/infer", req, (size_t)len, NULL, &r) ||
            r.status != 200 || r.header_len <= 0) {
            c->failed++;
            fprintf(stderr, "client %d: status %ld %.200s\n", c->id, r.status, r.body ? r.body : "");
            resp_free(&r);
            continue;
        }
        const char *v = strstr(r.body, "\"model_version\":\"");
        int ver = v ? atoi(v + 17) : -1;
        df_model_t *m = ver >= 1 && ver <= 4 ? atomic_load(&vers[ver]) : NULL;
        if (!m || (size_t)r.header_len + sizeof ref != r.len) {
            c->wrong++;
        } else {
            c->seen[ver]++;
            df_batch_t b;
            memset(&b, 0, sizeof b);
            b.n = 1;
            const float *wp[1] = {w};
            float *op[1] = {ref};
            b.in[df_model_find_input(m, "weights")] = wp;
            b.out[df_model_find_output(m, "positions")] = op;
            df_error_t e = {0};
            if (df_model_evaluate(m, &b, s, &e) ||
                max_rel_err((r.body + r.header_len), ref, 360) > 1e-6)
                c->wrong++;
            else
                c->ok++;
        }
        resp_free(&r);
    }
    df_scratch_free(&s);
    curl_easy_cleanup(h);
    return NULL;
}

static int served_version(CURL *h)
{
    resp_t r;
    int v = -1;
    if (http_req(h, D.port, "GET", "/v2/models/prop", NULL, 0, NULL, &r) == 0 && r.status == 200) {
        const char *p = strstr(r.body, "\"versions\":[\"");
        if (p) v = atoi(p + 13);
    }
    resp_free(&r);
    return v;
}

static void add_version(int v, uint32_t seed, int corrupt)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/prop/%d", repo, v);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/prop/%d/model.safetensors", repo, v);
    if (corrupt) {
        /* a plausible header length followed by garbage */
        FILE *f = fopen(p, "wb");
        uint64_t n = 200;
        fwrite(&n, 8, 1, f);
        fputs("{\"positions\":{\"dtype\":\"F32\",\"shape\":[10,3],\"data_offsets\":[0,99999]}}garbage", f);
        fclose(f);
        return;
    }
    DF_CHECK(make_rigged(p, 10, 12, 3, 4, "lbs", seed) == 0);
    df_error_t e = {0};
    df_model_t *m = NULL;
    DF_CHECK(df_model_open(p, "rigged", NULL, NULL, &m, &e) == 0);
    atomic_store(&vers[v], m);
}

static void test_reload_under_load(void)
{
    enum { NC = 8 };
    pthread_t th[NC];
    static cl_t cl[NC];
    for (int i = 0; i < NC; i++) {
        cl[i].id = i;
        pthread_create(&th[i], NULL, client, &cl[i]);
    }
    CURL *h = curl_easy_init();
    usleep(500000);
    DF_CHECK(served_version(h) == 1);
    /* version 2 through the repository API */
    add_version(2, 555, 0);
    resp_t r;
    const char *hd[] = {tok_hdr, NULL};
    DF_CHECK(http_req(h, D.port, "POST", "/v2/repository/models/prop/load", NULL, 0, hd, &r) == 0);
    DF_CHECK_MSG(r.status == 200, "load v2: %ld %s", r.status, r.body);
    resp_free(&r);
    DF_CHECK(served_version(h) == 2);
    usleep(500000);
    /* corrupt version 3: refused, version 2 keeps serving */
    add_version(3, 0, 1);
    DF_CHECK(http_req(h, D.port, "POST", "/v2/repository/models/prop/load", NULL, 0, hd, &r) == 0);
    DF_CHECK_MSG(r.status == 400 && strstr(r.body, "version 3"), "load v3: %ld %s", r.status, r.body);
    resp_free(&r);
    DF_CHECK(served_version(h) == 2);
    DF_CHECK(http_req(h, D.port, "GET", "/v2/repository/index", NULL, 0, NULL, &r) == 0);
    DF_CHECK(strstr(r.body, "\"version\":\"2\"") && strstr(r.body, "READY"));
    resp_free(&r);
    usleep(500000);
    /* version 4 + SIGHUP */
    add_version(4, 777, 0);
    kill(D.pid, SIGHUP);
    int v = -1;
    for (int i = 0; i < 250 && v != 4; i++) {
        usleep(20000);
        v = served_version(h);
    }
    DF_CHECK(v == 4);
    usleep(500000);
    atomic_store(&stop_flag, 1);
    int ok = 0, failed = 0, wrong = 0, seen[5] = {0};
    for (int i = 0; i < NC; i++) {
        pthread_join(th[i], NULL);
        ok += cl[i].ok;
        failed += cl[i].failed;
        wrong += cl[i].wrong;
        for (int k = 0; k < 5; k++) seen[k] += cl[i].seen[k];
    }
    printf("# %d answers (v1 %d, v2 %d, v4 %d), %d failed, %d wrong\n", ok, seen[1], seen[2],
           seen[4], failed, wrong);
    DF_CHECK(failed == 0 && wrong == 0);
    DF_CHECK(seen[1] > 0 && seen[2] > 0 && seen[4] > 0 && seen[3] == 0);
    DF_CHECK(http_req(h, D.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    DF_CHECK(strstr(r.body, "deformd_model_load_failures_total{model=\"prop\"} 1") != NULL);
    resp_free(&r);
    /* unload: 404 afterwards, and load brings it back */
    DF_CHECK(http_req(h, D.port, "POST", "/v2/repository/models/prop/unload", NULL, 0, hd, &r) == 0 && r.status == 200);
    resp_free(&r);
    DF_CHECK(served_version(h) == -1);
    DF_CHECK(http_req(h, D.port, "POST", "/v2/repository/models/prop/load", NULL, 0, hd, &r) == 0 && r.status == 200);
    resp_free(&r);
    DF_CHECK(served_version(h) == 4);
    curl_easy_cleanup(h);
    DF_CHECK(daemon_stop(&D) == 0);
}

typedef struct {
    int port;
    long status;
} shot_t;

static void *shot(void *arg)
{
    shot_t *s = arg;
    CURL *h = curl_easy_init();
    resp_t r;
    const char *req = "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,0,0,0]}]}";
    if (http_req(h, s->port, "POST", "/v2/models/prop/infer", req, strlen(req), NULL, &r) == 0)
        s->status = r.status;
    resp_free(&r);
    curl_easy_cleanup(h);
    return NULL;
}

static void test_sigterm_drains(void)
{
    daemon_t D2;
    /* requests wait up to 2 s for a batch: SIGTERM must flush them */
    const char *extra[] = {"--set", "max_queue_delay_us=2000000", "--set", "max_batch_size=64", NULL};
    DF_CHECK(daemon_start(&D2, repo, "http_drain", extra) == 0);
    enum { N = 10 };
    pthread_t th[N];
    shot_t s[N];
    for (int i = 0; i < N; i++) {
        s[i].port = D2.port;
        s[i].status = 0;
        pthread_create(&th[i], NULL, shot, &s[i]);
    }
    /* wait until all N requests sit in the queue (inflight gauge) */
    CURL *h = curl_easy_init();
    for (int i = 0; i < 500; i++) {
        resp_t r;
        int n = -1;
        if (http_req(h, D2.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0) {
            const char *p = strstr(r.body, "deformd_inflight_requests ");
            if (p) n = atoi(p + strlen("deformd_inflight_requests "));
        }
        resp_free(&r);
        if (n == N) break;
        usleep(10000);
    }
    curl_easy_cleanup(h);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int code = daemon_stop(&D2);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += s[i].status == 200;
    }
    printf("# SIGTERM with %d queued requests: %d answered 200, exit code %d\n", N, ok, code);
    DF_CHECK(ok == N);
    DF_CHECK(code == 0);
    FILE *f = fopen(D2.log, "r");
    char line[1024];
    int drained = 0, stopped = 0;
    while (f && fgets(line, sizeof line, f)) {
        drained |= strstr(line, "drained") != NULL;
        stopped |= strstr(line, "stopped") != NULL;
    }
    if (f) fclose(f);
    DF_CHECK(drained && stopped);
}

int main(void)
{
    char cmd[1200], tok[1200];
    snprintf(repo, sizeof repo, "%s/http_reload_repo", test_out());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
    if (system(cmd)) return 2;
    make_repo(repo);
    char p[1200];
    snprintf(p, sizeof p, "%s/prop/1/model.safetensors", repo);
    df_error_t e = {0};
    df_model_t *m1 = NULL;
    int orc = df_model_open(p, "rigged", NULL, NULL, &m1, &e);
    atomic_store(&vers[1], m1);
    if (orc) {
        printf("FAIL open %s\n", e.msg);
        return 1;
    }
    snprintf(tok, sizeof tok, "%s/reload_token.txt", test_out());
    write_text(tok, "reload-token-42\n");
    curl_global_init(CURL_GLOBAL_ALL);
    const char *extra[] = {"--token-file", tok, NULL};
    if (daemon_start(&D, repo, "http_reload", extra)) {
        printf("FAIL daemon_start\n");
        return 1;
    }
    DF_RUN(test_reload_under_load);
    DF_RUN(test_sigterm_drains);
    for (int i = 0; i < 5; i++) {
        df_model_t *m = atomic_exchange(&vers[i], NULL);
        df_model_unref(&m);
    }
    curl_global_cleanup();
    return test_out_done(dftest_exit());
}

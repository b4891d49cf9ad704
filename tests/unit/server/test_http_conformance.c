/* test_http_conformance.c — KServe v2 / Triton rules the HTTP front must
 * follow, against the real daemon (daemon_util.h).
 *
 *  - request ids of any length (300 bytes, escapes) echoed back exactly;
 *  - /versions/<v>: the loaded version answers, any other (and an empty
 *    or non-numeric segment) is 404, for metadata, ready and infer;
 *  - 405 carries an Allow header listing the methods of the endpoint;
 *  - POST /v2/repository/index {"ready": true} lists only READY models;
 *    a malformed body or a non-boolean "ready" is 400;
 *  - loading a name the repository does not hold is 404 and leaves no
 *    entry in the index (the Triton client's index call broke on it);
 *  - load {"parameters": {"config": "<json>"}} loads with that
 *    configuration (a SIGHUP goes back to the file's); other parameters
 *    are refused, not ignored;
 *  - a raw binary request (Inference-Header-Content-Length: 0) to a model
 *    with one input evaluates the body as that input, equal to core's
 *    evaluation; a model with several inputs answers 400 naming them.
 */
#include "daemon_util.h"

static daemon_t D;
static CURL *C;
static char repo[1024];
static const char *AUTH[] = {"Authorization: Bearer conformance-token-1", NULL};

/* A morph-only rigged model (no skeleton): its one input is "weights". */
static int make_cube(const char *path)
{
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    float pos[8 * 3];
    for (int i = 0; i < 8; i++) {
        pos[i * 3] = (float)(i & 1);
        pos[i * 3 + 1] = (float)((i >> 1) & 1);
        pos[i * 3 + 2] = (float)((i >> 2) & 1);
    }
    uint32_t tri[12 * 3] = {0, 1, 3, 0, 3, 2, 4, 6, 7, 4, 7, 5, 0, 4, 5, 0, 5, 1,
                            2, 3, 7, 2, 7, 6, 0, 2, 6, 0, 6, 4, 1, 5, 7, 1, 7, 3};
    float md[3 * 8 * 3];
    for (int i = 0; i < 3 * 8 * 3; i++) md[i] = 0.01f * (float)((i * 7) % 13) - 0.05f;
    d.n_vertices = 8;
    d.positions = pos;
    d.n_triangles = 12;
    d.triangles = tri;
    d.n_morphs = 3;
    d.morph_deltas = md;
    df_error_t e = {0};
    int rc = df_rigged_write(&d, path, &e);
    if (rc) fprintf(stderr, "make_cube: %s\n", e.msg);
    return rc;
}

static resp_t req(const char *method, const char *path, const char *body, const char *const *hdrs)
{
    resp_t r;
    if (http_req(C, D.port, method, path, body, body ? strlen(body) : 0, hdrs, &r)) {
        memset(&r, 0, sizeof r);
        r.status = -1;
        r.body = calloc(1, 1);
    }
    return r;
}

static void test_long_ids(void)
{
    char id[301];
    memset(id, 'a', 300);
    id[300] = 0;
    id[0] = 'Z';
    id[299] = 'Z';
    char body[1024];
    snprintf(body, sizeof body, "{\"id\":\"%s\",\"outputs\":[{\"name\":\"positions\"}]}", id);
    resp_t r = req("POST", "/v2/models/prop/infer", body, NULL);
    json_t *j = json_loads(r.body, 0, NULL);
    const char *got = json_string_value(json_object_get(j, "id"));
    DF_CHECK_MSG(r.status == 200 && got && !strcmp(got, id), "status %ld: %.200s", r.status, r.body);
    json_decref(j);
    resp_free(&r);
    /* escapes and UTF-8 come back as the same string */
    r = req("POST", "/v2/models/prop/infer",
            "{\"id\":\"q\\\"\\u00e9\\n\\\\\",\"outputs\":[{\"name\":\"positions\"}]}", NULL);
    j = json_loads(r.body, 0, NULL);
    got = json_string_value(json_object_get(j, "id"));
    DF_CHECK_MSG(r.status == 200 && got && !strcmp(got, "q\"\xc3\xa9\n\\"), "status %ld: %.200s", r.status,
                 r.body);
    json_decref(j);
    resp_free(&r);
}

static void test_versions(void)
{
    const struct { const char *m, *path; long want; } c[] = {
        {"GET", "/v2/models/prop/versions/1", 200},
        {"GET", "/v2/models/prop/versions/1/ready", 200},
        {"POST", "/v2/models/prop/versions/1/infer", 200},
        {"GET", "/v2/models/prop/versions/999", 404},
        {"GET", "/v2/models/prop/versions/999/ready", 404},
        {"POST", "/v2/models/prop/versions/2/infer", 404},
        {"GET", "/v2/models/prop/versions//ready", 404},
        {"GET", "/v2/models/prop/versions/", 404},
        {"GET", "/v2/models/prop/versions/one/ready", 404},
        {"GET", "/v2/models/prop/versions/-1/ready", 404},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        resp_t r = req(c[i].m, c[i].path, !strcmp(c[i].m, "POST") ? "{}" : NULL, NULL);
        DF_CHECK_MSG(r.status == c[i].want && (c[i].want == 200 || strstr(r.body, "\"error\"")),
                     "%s %s: %ld (want %ld) %.200s", c[i].m, c[i].path, r.status, c[i].want, r.body);
        if (c[i].want == 404 && strstr(c[i].path, "/versions/9"))
            DF_CHECK_MSG(strstr(r.body, "version 999 is not loaded (version 1 serves)"), "%s", r.body);
        resp_free(&r);
    }
}

/* The Allow header of a 405 (libcurl's header callback keeps only a few). */
static size_t allow_cb(char *p, size_t sz, size_t n, void *u)
{
    size_t k = sz * n;
    if (k > 6 && !strncasecmp(p, "allow:", 6)) {
        char *a = u;
        snprintf(a, 128, "%.*s", (int)(k - 6), p + 6);
        size_t L = strlen(a);
        while (L && (a[L - 1] == '\r' || a[L - 1] == '\n' || a[L - 1] == ' ')) a[--L] = 0;
        memmove(a, a + strspn(a, " "), strlen(a + strspn(a, " ")) + 1);
    }
    return k;
}

static void test_405_allow(void)
{
    const struct { const char *m, *path, *allow; } c[] = {
        {"PUT", "/v2/models/prop/infer", "POST, OPTIONS"},
        {"GET", "/v2/models/prop/infer", "POST, OPTIONS"},
        {"DELETE", "/v2/health/ready", "GET, HEAD, OPTIONS"},
        {"POST", "/v2/models/prop", "GET, HEAD, OPTIONS"},
        {"PUT", "/v2/repository/index", "GET, HEAD, POST, OPTIONS"},
        {"GET", "/v2/repository/models/prop/load", "POST, OPTIONS"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char url[256], allow[128] = "";
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", D.port, c[i].path);
        curl_easy_reset(C);
        curl_easy_setopt(C, CURLOPT_URL, url);
        curl_easy_setopt(C, CURLOPT_CUSTOMREQUEST, c[i].m);
        curl_easy_setopt(C, CURLOPT_HEADERFUNCTION, allow_cb);
        curl_easy_setopt(C, CURLOPT_HEADERDATA, (void *)allow);
        curl_easy_setopt(C, CURLOPT_WRITEFUNCTION, du_write);
        resp_t r;
        memset(&r, 0, sizeof r);
        curl_easy_setopt(C, CURLOPT_WRITEDATA, &r);
        long st = -1;
        if (curl_easy_perform(C) == CURLE_OK) curl_easy_getinfo(C, CURLINFO_RESPONSE_CODE, &st);
        DF_CHECK_MSG(st == 405 && !strcmp(allow, c[i].allow), "%s %s: %ld, Allow '%s' (want '%s')",
                     c[i].m, c[i].path, st, allow, c[i].allow);
        resp_free(&r);
    }
}

static int index_has(const char *body, const char *name)
{
    char k[96];
    snprintf(k, sizeof k, "\"name\":\"%s\"", name);
    return strstr(body, k) != NULL;
}

static void test_index_filter_and_unknown_load(void)
{
    resp_t r = req("POST", "/v2/repository/index", "{}", NULL);
    DF_CHECK_MSG(r.status == 200 && index_has(r.body, "broken") && index_has(r.body, "prop") &&
                     strstr(r.body, "UNAVAILABLE"),
                 "%.300s", r.body);
    resp_free(&r);
    r = req("POST", "/v2/repository/index", "{\"ready\":true}", NULL);
    DF_CHECK_MSG(r.status == 200 && !index_has(r.body, "broken") && index_has(r.body, "prop") &&
                     index_has(r.body, "cube") && !strstr(r.body, "UNAVAILABLE"),
                 "ready only: %.300s", r.body);
    resp_free(&r);
    r = req("POST", "/v2/repository/index", "{\"ready\":false}", NULL);
    DF_CHECK(r.status == 200 && index_has(r.body, "broken"));
    resp_free(&r);
    const char *bad[] = {"{\"ready\":\"yes\"}", "{\"ready\":1}", "[1,2]", "{\"ready\":", "null"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = req("POST", "/v2/repository/index", bad[i], NULL);
        DF_CHECK_MSG(r.status == 400 && strstr(r.body, "\"error\""), "index body %s: %ld %.200s", bad[i],
                     r.status, r.body);
        resp_free(&r);
    }
    /* an unknown name: 404, and no entry left behind */
    r = req("POST", "/v2/repository/models/no_such_model/load", NULL, AUTH);
    DF_CHECK_MSG(r.status == 404, "load no_such_model: %ld %.200s", r.status, r.body);
    resp_free(&r);
    r = req("GET", "/v2/repository/index", NULL, NULL);
    DF_CHECK_MSG(r.status == 200 && !index_has(r.body, "no_such_model"), "%.300s", r.body);
    resp_free(&r);
}

static void test_load_with_config(void)
{
    const char *cfg = "{\"parameters\":{\"config\":\"{\\\"kind\\\":\\\"rigged\\\",\\\"max_batch_size\\\":3,"
                      "\\\"characters\\\":{\\\"prop2\\\":{\\\"skinning\\\":\\\"dqs\\\"}}}\"}}";
    resp_t r = req("POST", "/v2/repository/models/prop/load", cfg, AUTH);
    DF_CHECK_MSG(r.status == 200, "load with config: %ld %.300s", r.status, r.body);
    resp_free(&r);
    r = req("GET", "/v2/models/prop2", NULL, NULL);
    DF_CHECK_MSG(r.status == 200 && strstr(r.body, "\"max_batch_size\":3") && strstr(r.body, "\"skinning\":\"dqs\""),
                 "prop2: %ld %.400s", r.status, r.body);
    resp_free(&r);
    r = req("GET", "/v2/models/prop", NULL, NULL);
    DF_CHECK_MSG(r.status == 404, "prop after the override: %ld", r.status);
    resp_free(&r);
    /* refused, not ignored */
    const char *bad[] = {"{\"parameters\":{\"file:1/model.safetensors\":\"x\"}}",
                         "{\"parameters\":{\"config\":5}}", "{\"parameters\":{\"config\":\"{\\\"kind\\\":7}\"}}",
                         "{\"config\":\"{}\"}", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = req("POST", "/v2/repository/models/prop/load", bad[i], AUTH);
        DF_CHECK_MSG(r.status == 400 && strstr(r.body, "\"error\""), "load body %s: %ld %.200s", bad[i],
                     r.status, r.body);
        resp_free(&r);
    }
    r = req("GET", "/v2/models/prop2", NULL, NULL); /* the refused loads changed nothing */
    DF_CHECK(r.status == 200);
    resp_free(&r);
    /* a rescan reads config.json again */
    kill(D.pid, SIGHUP);
    long st = 0;
    for (int i = 0; i < 100 && st != 200; i++) {
        usleep(50000);
        r = req("GET", "/v2/models/prop", NULL, NULL);
        st = r.status;
        resp_free(&r);
    }
    DF_CHECK_MSG(st == 200, "prop after SIGHUP: %ld", st);
    r = req("GET", "/v2/models/prop2", NULL, NULL);
    DF_CHECK(r.status == 404);
    resp_free(&r);
}

static void test_raw_binary(void)
{
    float w[2 * 3] = {1, 0, 0.5f, 0.25f, -1, 2};
    const char *h0[] = {"Inference-Header-Content-Length: 0", NULL};
    resp_t r;
    DF_CHECK(http_req(C, D.port, "POST", "/v2/models/cube/infer", w, sizeof w, h0, &r) == 0);
    size_t n = 0;
    json_t *o = NULL;
    float *got = r.status == 200 ? json_output(r.body, "positions", &n, &o) : NULL;
    DF_CHECK_MSG(got && n == 2 * 8 * 3 && json_integer_value(json_array_get(json_object_get(o, "shape"), 0)) == 2,
                 "raw: %ld %.300s", r.status, r.body);
    char path[1200];
    snprintf(path, sizeof path, "%s/cube/1/model.safetensors", repo);
    float ref[2 * 8 * 3];
    const char *names[] = {"weights"};
    const float *data[] = {w};
    DF_CHECK(ref_eval(path, 2, names, data, 1, NULL, 0, "positions", ref) == 0);
    if (got && n == 48) DF_CHECK_MSG(max_rel_err(got, ref, 48) <= 1e-6, "raw answer differs from core");
    free(got);
    json_decref(o);
    resp_free(&r);
    /* not a whole number of poses */
    DF_CHECK(http_req(C, D.port, "POST", "/v2/models/cube/infer", w, 10, h0, &r) == 0);
    DF_CHECK_MSG(r.status == 400 && strstr(r.body, "whole number of poses"), "%ld %.200s", r.status, r.body);
    resp_free(&r);
    /* several inputs: which one? */
    DF_CHECK(http_req(C, D.port, "POST", "/v2/models/prop/infer", w, sizeof w, h0, &r) == 0);
    DF_CHECK_MSG(r.status == 400 && strstr(r.body, "exactly one input") && strstr(r.body, "joint_rotations"),
                 "%ld %.200s", r.status, r.body);
    resp_free(&r);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    C = curl_easy_init();
    snprintf(repo, sizeof repo, "%s/repo", test_out());
    make_repo(repo);
    char p[1200];
    snprintf(p, sizeof p, "%s/cube/1", repo);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/cube/1/model.safetensors", repo);
    if (make_cube(p)) return 2;
    snprintf(p, sizeof p, "%s/cube/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\"}");
    snprintf(p, sizeof p, "%s/broken/1", repo);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/broken/1/model.safetensors", repo);
    write_text(p, "not a model");
    snprintf(p, sizeof p, "%s/broken/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\"}");
    char tok[1100];
    snprintf(tok, sizeof tok, "%s/token", test_out());
    write_text(tok, "conformance-token-1\n");
    const char *extra[] = {"--token-file", tok, NULL};
    if (daemon_start(&D, repo, "conformance", extra)) return 1;
    DF_RUN(test_long_ids);
    DF_RUN(test_versions);
    DF_RUN(test_405_allow);
    DF_RUN(test_index_filter_and_unknown_load);
    DF_RUN(test_load_with_config);
    DF_RUN(test_raw_binary);
    DF_CHECK(daemon_stop(&D) == 0);
    curl_easy_cleanup(C);
    curl_global_cleanup();
    return test_out_done(dftest_exit());
}

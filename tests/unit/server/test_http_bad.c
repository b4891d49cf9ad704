/* test_http_bad.c — a generated corpus of malformed HTTP requests, each
 * answered by the real daemon with the right status and a JSON error that
 * names the problem; afterwards a valid request still gets the right answer
 * (compared with core directly). The daemon runs with a 1 MiB body limit
 * and a JSON depth limit of 8 so the limit paths are cheap to reach.
 */
#include "daemon_util.h"

static daemon_t D;
static CURL *C;
static int n_cases, n_bad;

typedef struct {
    const char *method, *path;
    const char *hdr1, *hdr2;
    const char *body;      /* NUL-terminated unless len given */
    size_t len;
    long want;
    const char *want_text; /* substring the error must contain, or NULL */
} bad_t;

static void run(const bad_t *b)
{
    resp_t r;
    const char *hdrs[3] = {b->hdr1, b->hdr2, NULL};
    if (!b->hdr1) hdrs[0] = NULL;
    size_t len = b->body ? (b->len ? b->len : strlen(b->body)) : 0;
    n_cases++;
    if (http_req(C, D.port, b->method, b->path, b->body, len, hdrs, &r)) {
        n_bad++;
        fprintf(stderr, "case %d (%s %s): transport error\n", n_cases, b->method, b->path);
        return;
    }
    int ok = r.status == b->want;
    if (b->want >= 400) ok &= strstr(r.body, "\"error\"") != NULL;
    if (b->want_text) ok &= strstr(r.body, b->want_text) != NULL;
    if (!ok) {
        n_bad++;
        fprintf(stderr, "case %d %s %s body '%.80s': got %ld '%.200s', want %ld%s%s\n", n_cases,
                b->method, b->path, b->body ? b->body : "", r.status, r.body, b->want,
                b->want_text ? " containing " : "", b->want_text ? b->want_text : "");
    }
    resp_free(&r);
}

#define INFER "/v2/models/prop/infer"
#define W(data) "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":" data "}]}"

static void test_bad_json(void)
{
    const char *cases[] = {"{", "[", "{\"inputs\":", "nul", "{'a':1}", "{} x", "{\"a\":NaN}",
                           "{\"a\":Infinity}", " ", "\xff\xfe", "{\"inputs\":[}", "{\"inputs\":[1,]}",
                           "{\"a\":1,\"a\":2}", "\"just a string\"", "42", "null", "[]",
                           "{\"inputs\":[{\"name\":\"weights\"", "{\"id\":\"\\ud800\"}"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad_t b = {"POST", INFER, NULL, NULL, cases[i], 0, 400, NULL};
        run(&b);
    }
    bad_t empty = {"POST", INFER, NULL, NULL, NULL, 0, 400, "empty"};
    run(&empty);
}

static void test_bad_structure(void)
{
    const struct { const char *body; long want; const char *text; } c[] = {
        {"{\"inputs\":{}}", 400, "array"},
        {"{\"inputs\":[1]}", 400, "object"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "name"},
        {"{\"inputs\":[{\"name\":5,\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "name"},
        {"{\"inputs\":[{\"name\":\"\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "name"},
        {"{\"inputs\":[{\"name\":\"wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "name"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]},{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "twice"},
        {"{\"inputs\":[{\"name\":\"weights\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "datatype"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP64\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "FP64"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"INT32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "INT32"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"BYTES\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "BYTES"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":7,\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "datatype"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"data\":[1,2,3,4]}]}", 400, "shape"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":4,\"data\":[1,2,3,4]}]}", 400, "shape"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[-4],\"data\":[1,2,3,4]}]}", 400, "shape"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4.5],\"data\":[1,2,3,4]}]}", 400, "shape"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[\"4\"],\"data\":[1,2,3,4]}]}", 400, "shape"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data\":[1,2,3,4]}]}", 400, "dimensions"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3]}]}", 400, "3 numbers"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4,5]}]}", 400, "5 numbers"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[\"1\",2,3,4]}]}", 400, "string"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[null,2,3,4]}]}", 400, "null"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[true,2,3,4]}]}", 400, "boolean"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[{},2,3,4]}]}", 400, "object"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":5}]}", 400, NULL},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2,3],[4]]}]}", 400, "shape"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3,[4]]]}]}", 400, NULL},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[[[[[[[[[[1]]]]]]]]],2,3,4]}]}", 413, "deeper"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1e39,2,3,4]}]}", 400, "float32"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[-1e300,2,3,4]}]}", 400, "float32"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4],\"parameters\":{\"binary_data_size\":16}}]}", 400, "both"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":[]}]}", 400, "parameters"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4]}]}", 400, "no \\\"data\\\""},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[100000000,100000000],\"data\":[]}]}", 413, "elements"},
        {"{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4000,5000],\"data\":[]}]}", 413, "elements"},
        {"{\"outputs\":{}}", 400, "array"},
        {"{\"outputs\":[3]}", 400, "object"},
        {"{\"outputs\":[{\"nam\":\"positions\"}]}", 400, "name"},
        {"{\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":\"yes\"}}]}", 400, "binary_data"},
        {"{\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"encoding\":\"float8\"}}]}", 400, "encoding"},
        {"{\"outputs\":[{\"name\":\"positions\",\"parameters\":7}]}", 400, "parameters"},
        {"{\"parameters\":[]}", 400, "parameters"},
        {"{\"parameters\":{\"encoding\":3}}", 400, "encoding"},
        {"{\"parameters\":{\"binary_data_output\":1}}", 400, "binary_data_output"},
        {"{\"parameters\":{\"skinning\":\"xyz\"}}", 400, "skinning"},
        {"{\"parameters\":{\"timeout_us\":-5}}", 400, "timeout_us"},
        {"{\"parameters\":{\"timeout_us\":\"fast\"}}", 400, "timeout_us"},
        {"{\"parameters\":{\"batch_size\":0}}", 400, "batch_size"},
        {"{\"parameters\":{\"batch_size\":1.5}}", 400, "batch_size"},
        {"{\"parameters\":{\"clip\":\"nope\"}}", 400, "clip"},
        {"{\"parameters\":{\"clip\":5}}", 400, "clip"},
        {"{\"parameters\":{\"time\":\"now\"}}", 400, "time"},
        {"{\"id\":5}", 400, "id"},
        {"{\"inputs\":[{\"name\":\"w\\u0000x\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "NUL"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        bad_t b = {"POST", INFER, NULL, NULL, c[i].body, 0, c[i].want, c[i].text};
        run(&b);
    }
}

static void test_bad_semantics(void)
{
    const struct { const char *path, *body; long want; const char *text; } c[] = {
        {INFER, "{\"inputs\":[{\"name\":\"weightz\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]}]}", 400, "unknown input 'weightz'"},
        {INFER, W("[1,2,3]"), 400, NULL},
        {INFER, "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2,3]}]}", 400, "does not match [4]"},
        {INFER, "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,3],\"data\":[1,2,3,4,5,6]}]}", 400, "weights"},
        {INFER, "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[1,2,2],\"data\":[1,2,3,4]}]}", 400, "[1,2,2]"},
        {INFER, "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[0,4],\"data\":[]}]}", 400, "poses"},
        {INFER, "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,4],\"data\":[1,2,3,4,1,2,3,4]},"
                "{\"name\":\"joint_rotations\",\"datatype\":\"FP32\",\"shape\":[3,3,4],\"data\":[0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1]}]}", 400, "poses"},
        {INFER, "{\"inputs\":[{\"name\":\"joint_rotations\",\"datatype\":\"FP32\",\"shape\":[3,4],\"data\":[0,0,0,0,0,0,0,0,0,0,0,0]}]}", 400, NULL},
        {INFER, "{\"inputs\":[{\"name\":\"joint_rotations\",\"datatype\":\"FP32\",\"shape\":[4,3],\"data\":[0,0,0,1,0,0,0,1,0,0,0,1]}]}", 400, "joint_rotations"},
        {INFER, "{\"parameters\":{\"batch_size\":2},\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[3,4],\"data\":[1,2,3,4,1,2,3,4,1,2,3,4]}]}", 400, "poses"},
        {INFER, "{\"parameters\":{\"batch_size\":5000}}", 413, "poses"},
        {INFER, "{\"outputs\":[{\"name\":\"colors\"}]}", 400, "unknown output 'colors'"},
        {INFER, "{\"outputs\":[{\"name\":\"positions\"},{\"name\":\"positions\"}]}", 400, "twice"},
        {INFER "?format=glb", "{\"outputs\":[{\"name\":\"normals\"}]}", 400, "positions"},
        {"/v2/models/nobody/infer", W("[1,2,3,4]"), 404, "nobody"},
        {"/v2/models/body/infer", W("[1,2,3,4]"), 404, "body"},
        {"/v2/models/../infer", W("[1,2,3,4]"), 404, NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        bad_t b = {"POST", c[i].path, NULL, NULL, c[i].body, 0, c[i].want, c[i].text};
        run(&b);
    }
}

static void test_bad_binary(void)
{
    /* weights [4] as 16 binary bytes after a header */
    static char body[4096];
    const char *hdr = "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],"
                      "\"parameters\":{\"binary_data_size\":16}}]}";
    size_t hl = strlen(hdr);
    memcpy(body, hdr, hl);
    float w[4] = {1, 0, 0.5f, 0};
    memcpy(body + hl, w, 16);
    char h_ok[64], h_big[64], h_small[64];
    snprintf(h_ok, sizeof h_ok, "Inference-Header-Content-Length: %zu", hl);
    snprintf(h_big, sizeof h_big, "Inference-Header-Content-Length: %zu", hl + 100);
    snprintf(h_small, sizeof h_small, "Inference-Header-Content-Length: %zu", hl - 5);
    bad_t c[] = {
        {"POST", INFER, h_big, NULL, body, hl + 16, 400, "larger than the body"},
        {"POST", INFER, h_small, NULL, body, hl + 16, 400, "JSON"},
        {"POST", INFER, "Inference-Header-Content-Length: 0", NULL, body, hl + 16, 400, "Inference-Header-Content-Length"},
        {"POST", INFER, "Inference-Header-Content-Length: abc", NULL, body, hl + 16, 400, "Inference-Header-Content-Length"},
        {"POST", INFER, "Inference-Header-Content-Length: -3", NULL, body, hl + 16, 400, "Inference-Header-Content-Length"},
        {"POST", INFER, "Inference-Header-Content-Length: 99999999999999999999", NULL, body, hl + 16, 400, NULL},
        {"POST", INFER, h_ok, NULL, body, hl + 12, 400, "past the end"},
        {"POST", INFER, h_ok, NULL, body, hl + 20, 400, "after the JSON"},
        {"POST", INFER, h_ok, NULL, body, hl, 400, "past the end"},
        {"POST", INFER, NULL, NULL, body, hl + 16, 400, "JSON"}, /* binary without the header */
    };
    memset(body + hl + 16, 0, 8);
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) run(&c[i]);
    /* size disagreeing with the shape; negative size; NaN in binary */
    const char *h2[] = {
        "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{\"binary_data_size\":12}}]}",
        "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{\"binary_data_size\":-16}}]}",
        "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{\"binary_data_size\":\"16\"}}]}",
        "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{\"binary_data_size\":160000000000}}]}",
    };
    for (size_t i = 0; i < sizeof h2 / sizeof h2[0]; i++) {
        size_t l = strlen(h2[i]);
        memcpy(body, h2[i], l);
        memcpy(body + l, w, 16);
        char hh[64];
        snprintf(hh, sizeof hh, "Inference-Header-Content-Length: %zu", l);
        bad_t b = {"POST", INFER, hh, NULL, body, l + 16, 400, "binary_data_size"};
        run(&b);
    }
    float nanw[4] = {1, NAN, 0, 0}, infw[4] = {INFINITY, 0, 0, 0};
    const float *vals[2] = {nanw, infw};
    for (int k = 0; k < 2; k++) {
        memcpy(body, hdr, hl);
        memcpy(body + hl, vals[k], 16);
        bad_t b = {"POST", INFER, h_ok, NULL, body, hl + 16, 400, "not finite"};
        run(&b);
    }
    /* unaligned binary data (header length not a multiple of 4) still works */
    char hdr3[256];
    int l3 = snprintf(hdr3, sizeof hdr3, "%s ", hdr);
    memcpy(body, hdr3, (size_t)l3);
    memcpy(body + l3, w, 16);
    char hh3[64];
    snprintf(hh3, sizeof hh3, "Inference-Header-Content-Length: %d", l3);
    bad_t ok = {"POST", INFER, hh3, NULL, body, (size_t)l3 + 16, 200, NULL};
    run(&ok);
}

static void test_bad_routes(void)
{
    bad_t c[] = {
        {"GET", "/v2/models/prop/infer", NULL, NULL, NULL, 0, 405, "POST"},
        {"POST", "/v2/models/prop", NULL, NULL, "{}", 0, 405, "GET"},
        {"PUT", "/v2/models/prop/infer", NULL, NULL, "{}", 0, 405, NULL},
        {"DELETE", "/v2/models/prop", NULL, NULL, NULL, 0, 405, NULL},
        {"GET", "/v2/models/nobody", NULL, NULL, NULL, 0, 404, "nobody"},
        {"GET", "/v2/models/nobody/ready", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/v2/models/nobody/mesh", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/v2/models/prop/frobnicate", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/v3", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/v2/models/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/viewer/../../etc/passwd", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/viewer/%2e%2e/%2e%2e/etc/passwd", NULL, NULL, NULL, 0, 404, NULL},
        {"GET", "/viewer/no-such-file.js", NULL, NULL, NULL, 0, 404, NULL},
        {"POST", "/v2/repository/models/prop/load", NULL, NULL, NULL, 0, 403, "disabled"},
        {"POST", "/v2/repository/models/prop/unload", NULL, NULL, NULL, 0, 403, NULL},
        {"GET", "/v2/repository/models/prop/load", NULL, NULL, NULL, 0, 405, NULL},
        {"POST", "/v2/repository/models/prop/explode", NULL, NULL, NULL, 0, 404, NULL},
        {"POST", "/metrics", NULL, NULL, "{}", 0, 405, NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) run(&c[i]);
}

static void test_oversize(void)
{
    /* declared Content-Length over the 1 MiB limit: refused up front */
    size_t n = (2u << 20);
    char *big = malloc(n);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    bad_t b = {"POST", INFER, NULL, NULL, big, n, 413, "max_body_bytes"};
    run(&b);
    /* chunked upload without Content-Length: cut off while reading */
    bad_t b2 = {"POST", INFER, "Transfer-Encoding: chunked", NULL, big, n, 413, "max_body_bytes"};
    run(&b2);
    free(big);
    /* headers beyond http_connection_memory (16 KiB): libmicrohttpd's own
     * 431 (its HTML body, not our JSON); 6 KB of headers still fit */
    for (int k = 0; k < 2; k++) {
        size_t hn = k ? 6000 : 20000;
        char *h = malloc(hn + 16);
        memcpy(h, "X-Big: ", 7);
        memset(h + 7, 'a', hn);
        h[7 + hn] = 0;
        const char *hdrs[2] = {h, NULL};
        resp_t r;
        n_cases++;
        int rc = http_req(C, D.port, "GET", "/v2/health/ready", NULL, 0, hdrs, &r);
        long want = k ? 200 : 431;
        if (rc || r.status != want) {
            n_bad++;
            fprintf(stderr, "%zu bytes of headers: got %ld, want %ld\n", hn, rc ? -1 : r.status, want);
        }
        if (!rc) resp_free(&r);
        free(h);
    }
}

static void test_corpus_size_and_still_serving(void)
{
    printf("# %d malformed requests, %d answered wrongly\n", n_cases, n_bad);
    DF_CHECK(n_cases >= 100);
    DF_CHECK(n_bad == 0);
    /* a valid request after all that */
    const char *req = W("[0.25,-1,0.5,2]");
    resp_t r;
    DF_CHECK(http_req(C, D.port, "POST", INFER, req, strlen(req), NULL, &r) == 0 && r.status == 200);
    size_t n = 0;
    float *got = json_output(r.body, "positions", &n, NULL);
    char mp[1200];
    snprintf(mp, sizeof mp, "%s/http_bad_repo/prop/1/model.safetensors", test_out());
    static float ref[120 * 3];
    float w[4] = {0.25f, -1, 0.5f, 2};
    const char *names[1] = {"weights"};
    const float *data[1] = {w};
    DF_CHECK(ref_eval(mp, 1, names, data, 1, NULL, 0, "positions", ref) == 0);
    DF_CHECK(got && n == 120 * 3 && !memcmp(got, ref, sizeof ref));
    free(got);
    resp_free(&r);
    DF_CHECK(http_req(C, D.port, "GET", "/v2/health/live", NULL, 0, NULL, &r) == 0 && r.status == 200);
    resp_free(&r);
    DF_CHECK(daemon_stop(&D) == 0);
}

int main(void)
{
    char repo[1024], cmd[1200];
    snprintf(repo, sizeof repo, "%s/http_bad_repo", test_out());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
    if (system(cmd)) return 2;
    make_repo(repo);
    curl_global_init(CURL_GLOBAL_ALL);
    C = curl_easy_init();
    const char *extra[] = {"--set", "max_body_bytes=1M", "--set", "max_json_depth=8",
                           "--set", "max_json_elements=10000000", NULL};
    if (daemon_start(&D, repo, "http_bad", extra)) {
        printf("FAIL daemon_start\n");
        return 1;
    }
    DF_RUN(test_bad_json);
    DF_RUN(test_bad_structure);
    DF_RUN(test_bad_semantics);
    DF_RUN(test_bad_binary);
    DF_RUN(test_bad_routes);
    DF_RUN(test_oversize);
    DF_RUN(test_corpus_size_and_still_serving);
    curl_easy_cleanup(C);
    curl_global_cleanup();
    return test_out_done(dftest_exit());
}

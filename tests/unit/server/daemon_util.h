/* daemon_util.h — helpers for the daemon's end-to-end tests (header-only,
 * included by tests/unit/server/test_*.c).
 *
 * - make_rigged(): a synthetic `rigged` model written with core's
 *   df_rigged_write (grid mesh, joint chain, morph targets, 2 influences)
 *   so the tests do not depend on any importer;
 * - make_repo(): a repository with two models and three characters;
 * - daemon_start()/daemon_stop(): run the real bin/deformd on a free port
 *   (--http-port 0, port read from --ready-file) and SIGTERM it;
 * - http(): one request over a real socket with libcurl;
 * - ref_eval(): the reference, core's df_model_evaluate called directly on
 *   the same model file and inputs.
 */
#ifndef DAEMON_UTIL_H
#define DAEMON_UTIL_H
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "df.h"
#include "dftest.h"
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint32_t du_rng = 12345;
static float du_rand(void)
{
    du_rng = du_rng * 1664525u + 1013904223u;
    return (float)((du_rng >> 8) & 0xFFFFFF) / 16777216.0f;
}

/* A grid of gx*gy vertices along y, J joints in a chain along y, M morphs. */
static int make_rigged(const char *path, int gx, int gy, int J, int M, const char *skinning,
                       uint32_t seed)
{
    du_rng = seed;
    int64_t N = (int64_t)gx * gy, T = 2 * (int64_t)(gx - 1) * (gy - 1);
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = N;
    d.positions = malloc((size_t)N * 3 * sizeof(float));
    d.n_triangles = T;
    d.triangles = malloc((size_t)T * 3 * sizeof(uint32_t));
    for (int y = 0; y < gy; y++)
        for (int x = 0; x < gx; x++) {
            float *p = d.positions + ((int64_t)y * gx + x) * 3;
            p[0] = (float)x / (float)(gx - 1) - 0.5f;
            p[1] = 2.0f * (float)y / (float)(gy - 1);
            p[2] = 0.05f * du_rand();
        }
    int64_t t = 0;
    for (int y = 0; y + 1 < gy; y++)
        for (int x = 0; x + 1 < gx; x++) {
            uint32_t a = (uint32_t)(y * gx + x), b = a + 1, c = a + (uint32_t)gx, e = c + 1;
            uint32_t *tr = d.triangles + t * 6;
            tr[0] = a; tr[1] = b; tr[2] = e; tr[3] = a; tr[4] = e; tr[5] = c;
            t++;
        }
    d.n_morphs = M;
    if (M) {
        d.morph_deltas = malloc((size_t)M * N * 3 * sizeof(float));
        for (int64_t i = 0; i < (int64_t)M * N * 3; i++) d.morph_deltas[i] = 0.1f * (du_rand() - 0.5f);
    }
    d.n_joints = J;
    d.parents = malloc((size_t)J * sizeof(int32_t));
    d.rest_translations = calloc((size_t)J * 3, sizeof(float));
    d.rest_rotations = calloc((size_t)J * 4, sizeof(float));
    d.rest_scales = calloc((size_t)J * 3, sizeof(float));
    d.inverse_bind = calloc((size_t)J * 16, sizeof(float));
    char **jn = calloc((size_t)J, sizeof(char *));
    for (int j = 0; j < J; j++) {
        d.parents[j] = j - 1;
        d.rest_translations[j * 3 + 1] = j ? 2.0f / (float)J : 0.0f;
        d.rest_rotations[j * 4 + 3] = 1;
        for (int c = 0; c < 3; c++) d.rest_scales[j * 3 + c] = 1;
        float *ib = d.inverse_bind + j * 16;
        ib[0] = ib[5] = ib[10] = ib[15] = 1;
        ib[7] = -2.0f * (float)j / (float)J; /* row-major: translation in column 3 */
        jn[j] = malloc(16);
        snprintf(jn[j], 16, "bone%d", j);
    }
    d.joint_names = jn;
    d.n_influences = 2;
    d.skin_joints = malloc((size_t)N * 2 * sizeof(int32_t));
    d.skin_weights = malloc((size_t)N * 2 * sizeof(float));
    for (int64_t v = 0; v < N; v++) {
        float fy = d.positions[v * 3 + 1] / 2.0f * (float)(J - 1);
        int j0 = (int)fy;
        if (j0 >= J - 1) j0 = J - 2;
        if (j0 < 0) j0 = 0;
        float w = fy - (float)j0;
        if (w < 0) w = 0;
        if (w > 1) w = 1;
        d.skin_joints[v * 2] = j0;
        d.skin_joints[v * 2 + 1] = j0 + 1 < J ? j0 + 1 : j0;
        d.skin_weights[v * 2] = 1 - w;
        d.skin_weights[v * 2 + 1] = w;
    }
    d.skinning = skinning;
    df_error_t e = {0};
    int rc = df_rigged_write(&d, path, &e);
    if (rc) fprintf(stderr, "make_rigged %s: %s\n", path, e.msg);
    free(d.positions); free(d.triangles); free(d.morph_deltas); free(d.parents);
    free(d.rest_translations); free(d.rest_rotations); free(d.rest_scales);
    free(d.inverse_bind); free(d.skin_joints); free(d.skin_weights);
    for (int j = 0; j < J; j++) free(jn[j]);
    free(jn);
    return rc;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(tmp, 0755); *p = '/'; }
    mkdir(tmp, 0755);
}

static void mkdirs(const char *path);

/* A directory of this test process's own under $DF_TEST_OUT (several
 * helpers may run the suites at once in one tree): repositories, daemon
 * logs, ready files. Removed by test_out_done() when every test passed. */
static const char *test_out(void)
{
    static char dir[900];
    if (!dir[0]) {
        const char *o = getenv("DF_TEST_OUT");
        snprintf(dir, sizeof dir, "%s/server-%d", o && *o ? o : "build/test-out", (int)getpid());
        mkdirs(dir);
    }
    return dir;
}

static int test_out_done(int rc)
{
    if (rc == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_out());
        if (system(cmd)) rc = 0;
    } else {
        fprintf(stderr, "test files kept in %s\n", test_out());
    }
    return rc;
}

/* Repository: model "body" (J=6, M=8, characters alice (weights default)
 * and bob (dqs)) and model "prop" (bare, J=3, M=4). */
static void make_repo(const char *repo)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/body/1", repo); mkdirs(p);
    snprintf(p, sizeof p, "%s/prop/1", repo); mkdirs(p);
    snprintf(p, sizeof p, "%s/body/1/model.safetensors", repo);
    if (make_rigged(p, 24, 40, 6, 8, "lbs", 7)) exit(2);
    snprintf(p, sizeof p, "%s/prop/1/model.safetensors", repo);
    if (make_rigged(p, 10, 12, 3, 4, "lbs", 99)) exit(2);
    snprintf(p, sizeof p, "%s/body/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\",\"max_batch_size\":32,\"max_queue_delay_us\":2000,"
                  "\"max_queue_length\":1024,\"characters\":{"
                  "\"alice\":{\"defaults\":{\"weights\":[1,0,0.5,0,0,0,0,0.25]}},"
                  "\"bob\":{\"skinning\":\"dqs\",\"encoding\":\"float32\"}}}");
    snprintf(p, sizeof p, "%s/prop/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\",\"max_batch_size\":16,\"max_queue_delay_us\":2000}");
}

typedef struct {
    pid_t pid;
    int port;
    char ready[1024];
    char log[1024];
} daemon_t;

static const char *bin_dir(void)
{
    const char *b = getenv("BIN");
    return b && *b ? b : "bin";
}

/* Optional, for the next daemon_start calls: the daemon's working
 * directory (NULL: the test's own) and executable (NULL: $BIN/deformd).
 * With a working directory set, the paths daemon_start passes are made
 * absolute (repo must be absolute already). */
static const char *du_daemon_cwd;
static const char *du_daemon_exe;

static void du_abs(char *dst, size_t cap, const char *path)
{
    char cwd[1024];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(dst, cap, "%s", path);
    else snprintf(dst, cap, "%s/%s", cwd, path);
}

/* extra: NULL-terminated extra arguments. Returns 0 when serving. */
static int daemon_start(daemon_t *d, const char *repo, const char *tag, const char *const *extra)
{
    memset(d, 0, sizeof d[0]);
    char rel[1024];
    snprintf(rel, sizeof rel, "%s/%s.ready", test_out(), tag);
    du_abs(d->ready, sizeof d->ready, rel);
    snprintf(rel, sizeof rel, "%s/%s.log", test_out(), tag);
    du_abs(d->log, sizeof d->log, rel);
    unlink(d->ready);
    char exe[1024];
    snprintf(rel, sizeof rel, "%s/deformd", bin_dir());
    du_abs(exe, sizeof exe, du_daemon_exe ? du_daemon_exe : rel);
    const char *argv[64];
    int n = 0;
    argv[n++] = exe;
    argv[n++] = "--repository"; argv[n++] = repo;
    argv[n++] = "--http-port"; argv[n++] = "0";
    argv[n++] = "--socket-port"; argv[n++] = "-1";
    argv[n++] = "--ready-file"; argv[n++] = d->ready;
    for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        FILE *lf = freopen(d->log, "w", stderr);
        (void)lf;
        if (du_daemon_cwd && chdir(du_daemon_cwd)) {
            perror(du_daemon_cwd);
            _exit(127);
        }
        execv(exe, (char *const *)argv);
        perror("execv");
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(d->ready, "r");
        if (f) {
            int ok = fscanf(f, "http=%d", &d->port) == 1;
            fclose(f);
            if (ok) return 0;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "deformd exited early (log %s)\n", d->log);
            d->pid = 0;
            return -1;
        }
        usleep(20000);
    }
    fprintf(stderr, "deformd did not become ready (log %s)\n", d->log);
    return -1;
}

/* SIGTERM; returns the exit status (or -1). */
static int daemon_stop(daemon_t *d)
{
    if (d->pid <= 0) return -1;
    kill(d->pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(20000);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = 0;
    return -1;
}

typedef struct {
    long status;
    char *body;
    size_t len, cap;
    long header_len; /* Inference-Header-Content-Length, -1 absent */
    char ctype[128];
    char cors[128];  /* Access-Control-Allow-Origin */
} resp_t;

static size_t du_write(char *p, size_t sz, size_t n, void *u)
{
    resp_t *r = u;
    size_t k = sz * n;
    if (r->len + k + 1 > r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 65536;
        while (nc < r->len + k + 1) nc *= 2;
        r->body = realloc(r->body, nc);
        r->cap = nc;
    }
    memcpy(r->body + r->len, p, k);
    r->len += k;
    r->body[r->len] = 0;
    return k;
}

static size_t du_header(char *p, size_t sz, size_t n, void *u)
{
    resp_t *r = u;
    size_t k = sz * n;
    const char *h = "inference-header-content-length:";
    if (k > strlen(h) && !strncasecmp(p, h, strlen(h))) r->header_len = atol(p + strlen(h));
    const char *ao = "access-control-allow-origin:";
    if (k > strlen(ao) && !strncasecmp(p, ao, strlen(ao))) {
        size_t m = k - strlen(ao);
        if (m >= sizeof r->cors) m = sizeof r->cors - 1;
        memcpy(r->cors, p + strlen(ao), m);
        r->cors[m] = 0;
    }
    const char *c = "content-type:";
    if (k > strlen(c) && !strncasecmp(p, c, strlen(c))) {
        size_t m = k - strlen(c);
        if (m >= sizeof r->ctype) m = sizeof r->ctype - 1;
        memcpy(r->ctype, p + strlen(c), m);
        r->ctype[m] = 0;
    }
    return k;
}

static void resp_free(resp_t *r) { free(r->body); memset(r, 0, sizeof *r); }

/* One request. method "GET"/"POST"/...; body may be NULL. hdrs: extra
 * header lines, NULL-terminated. Uses (and keeps alive) the given handle. */
static int http_req(CURL *c, int port, const char *method, const char *path, const void *body,
                    size_t len, const char *const *hdrs, resp_t *r)
{
    memset(r, 0, sizeof *r);
    r->header_len = -1;
    char url[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, du_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, du_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    struct curl_slist *hl = NULL;
    hl = curl_slist_append(hl, "Expect:");
    for (int i = 0; hdrs && hdrs[i]; i++) hl = curl_slist_append(hl, hdrs[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (!strcmp(method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hl);
    if (cc != CURLE_OK) {
        fprintf(stderr, "curl %s %s: %s\n", method, path, curl_easy_strerror(cc));
        return -1;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (!r->body) { r->body = calloc(1, 1); }
    return 0;
}

/* Reference evaluation with core directly: B poses, inputs[i] = B*numel
 * floats (or NULL), for model input names. out: B*N*3 positions. */
static inline int ref_eval(const char *model_path, int B, const char *const *in_names,
                    const float *const *in_data, int n_in, const float *char_default_w,
                    uint32_t flags, const char *out_name, float *out)
{
    df_model_t *m = NULL;
    df_error_t e = {0};
    if (df_model_open(model_path, "rigged", NULL, NULL, &m, &e)) {
        fprintf(stderr, "ref: %s\n", e.msg);
        return -1;
    }
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = B;
    const float **ptrs[DF_MAX_IO] = {0};
    for (int i = 0; i < df_model_n_inputs(m); i++) {
        const df_io_desc_t *d = df_model_input(m, i);
        int64_t numel = 1;
        for (int k = 0; k < d->ndim; k++) numel *= d->shape[k];
        const float *base = NULL;
        for (int k = 0; k < n_in; k++)
            if (!strcmp(in_names[k], d->name)) base = in_data[k];
        if (!base && char_default_w && !strcmp(d->name, "weights")) {
            ptrs[i] = malloc((size_t)B * sizeof(float *));
            for (int p = 0; p < B; p++) ptrs[i][p] = char_default_w;
            b.in[i] = ptrs[i];
            continue;
        }
        if (!base) continue;
        ptrs[i] = malloc((size_t)B * sizeof(float *));
        for (int p = 0; p < B; p++) ptrs[i][p] = base + (int64_t)p * numel;
        b.in[i] = ptrs[i];
    }
    int o = df_model_find_output(m, out_name);
    int64_t onum = 1;
    for (int k = 0; k < df_model_output(m, o)->ndim; k++) onum *= df_model_output(m, o)->shape[k];
    float **optr = malloc((size_t)B * sizeof(float *));
    for (int p = 0; p < B; p++) optr[p] = out + (int64_t)p * onum;
    b.out[o] = optr;
    uint32_t *fl = malloc((size_t)B * sizeof(uint32_t));
    for (int p = 0; p < B; p++) fl[p] = flags;
    b.flags = fl;
    df_scratch_t *s = df_scratch_new();
    int rc = df_model_evaluate(m, &b, s, &e);
    if (rc) fprintf(stderr, "ref eval: %s\n", e.msg);
    df_scratch_free(&s);
    for (int i = 0; i < DF_MAX_IO; i++) free(ptrs[i]);
    free(optr);
    free(fl);
    df_model_unref(&m);
    return rc;
}

/* Norm-wise relative error: max |a-b| / max |b| (the output's scale). */
static inline double max_rel_err(const void *a_any, const float *b, size_t n)
{
    /* a may point into a response body at any alignment */
    const unsigned char *a = a_any;
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        float ai;
        memcpy(&ai, a + 4 * i, 4);
        double d = fabs((double)ai - (double)b[i]);
        if (!(d <= m)) m = d;
        if (fabs((double)b[i]) > s) s = fabs((double)b[i]);
    }
    return s > 0 ? m / s : m;
}

/* Flatten "data" of output `name` from a KServe JSON response. */
static inline float *json_output(const char *body, const char *name, size_t *n, json_t **out_obj)
{
    json_error_t je;
    json_t *root = json_loads(body, 0, &je);
    if (!root) return NULL;
    json_t *outs = json_object_get(root, "outputs");
    size_t i;
    json_t *o;
    float *res = NULL;
    json_array_foreach(outs, i, o) {
        if (strcmp(json_string_value(json_object_get(o, "name")), name)) continue;
        json_t *data = json_object_get(o, "data");
        size_t k = json_array_size(data);
        res = malloc((k ? k : 1) * sizeof(float));
        for (size_t j = 0; j < k; j++) res[j] = (float)json_number_value(json_array_get(data, j));
        *n = k;
        if (out_obj) *out_obj = json_incref(o);
    }
    json_decref(root);
    return res;
}

#endif

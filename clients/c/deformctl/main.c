/* main.c — bin/deformctl: command-line client of deformd (libdeformclient).
 *
 *   deformctl [--host H] [--socket-port P] [--http-port P] [--unix PATH]
 *             [--token-file FILE] COMMAND ...
 *     list                          characters served (socket INFO)
 *     info NAME                     inputs, outputs, joints, clips (JSON)
 *     infer NAME --input name=FILE.npy|JSON [--input ...] [--output NAME]...
 *           [--encoding float32|float16|int16] [--skinning lbs|dqs]
 *           [--http | --http-binary]
 *           [--sequence ID [--sequence-start] [--sequence-end]] --out OUT.npy
 *                                   a frame of sequence ID (a number, or any
 *                                   other string) of the daemon
 *     play NAME --clip C [--fps R] [--chunk N] [--window N] [--output positions]
 *           [--encoding E] [--skinning S] --out FRAMES.npy
 *                                   C: a clip name, matched ignoring case, or
 *                                   a unique part of one ("walk")
 *     mesh NAME --out REST.glb      GET /v2/models/NAME/mesh?format=glb
 *     bench [--connections N] [--depth D] [--seconds S] [--character NAME]
 *           [--encoding E] [--batch B]  socket load: req/s, p50/p99/p99.9
 *
 * DESIGN
 * Every command is a thin layer over deformclient.h; the socket is used
 * unless a command needs HTTP (mesh, infer --http). An input given per pose
 * (e.g. [J,4]) gets the batch dimension 1 added, checked against the
 * model's input shape from INFO. Errors print the server's message and
 * exit 1; usage errors exit 2. A token (--token-file FILE: its first line
 * that is not blank or a # comment; else the environment's DEFORMD_TOKEN)
 * is presented on every connection (AUTH) and HTTP request (Bearer).
 */
#include "deformclient.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int deformctl_bench(const char *addr, int argc, char **argv); /* bench.c */

static char g_host[256] = "127.0.0.1";
static int g_sock_port = 8001, g_http_port = 8000;
static const char *g_unix;
const char *deformctl_token; /* NULL: none (bench.c reads it too) */
static char g_token[256];

static int usage(void)
{
    fprintf(stderr,
            "usage: deformctl [--host H] [--socket-port P] [--http-port P] [--unix PATH]\n"
            "                 [--token-file FILE] COMMAND   (or DEFORMD_TOKEN in the environment)\n"
            "  list | info NAME | mesh NAME --out REST.glb\n"
            "  infer NAME --input name=FILE.npy|JSON [--output NAME]... [--encoding E]\n"
            "        [--skinning lbs|dqs] [--http|--http-binary]\n"
            "        [--sequence ID [--sequence-start] [--sequence-end]] --out OUT.npy\n"
            "  play NAME --clip C [--fps R] [--chunk N] [--window N] [--output NAME]\n"
            "        [--encoding E] [--skinning S] --out FRAMES.npy\n"
            "        (C: a clip's name, any case, or a unique part of it: walk)\n"
            "  bench [--connections N] [--depth D] [--seconds S] [--character NAME]\n"
            "        [--encoding E] [--batch B]\n");
    return 2;
}

static void sock_addr(char *buf, size_t n)
{
    if (g_unix) snprintf(buf, n, "unix:%s", g_unix);
    else snprintf(buf, n, "%s:%d", g_host, g_sock_port);
}

static void http_base(char *buf, size_t n) { snprintf(buf, n, "http://%s:%d", g_host, g_http_port); }

static int fail(const df_error_t *err)
{
    fprintf(stderr, "deformctl: %s (%s)\n", err->msg, df_strerror(err->code));
    return 1;
}

static df_client_t *connect_or_die(void)
{
    char addr[1100];
    df_error_t err = {0};
    df_client_t *c = NULL;
    sock_addr(addr, sizeof addr);
    if (df_client_connect(addr, &c, &err) ||
        (deformctl_token && df_client_auth(c, deformctl_token, &err))) {
        fail(&err);
        exit(1);
    }
    return c;
}

static json_t *info_or_die(df_client_t *c, const char *name)
{
    char *js = NULL;
    df_error_t err = {0};
    if (df_client_info(c, name, &js, &err)) {
        fail(&err);
        exit(1);
    }
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    free(js);
    if (!root) {
        fprintf(stderr, "deformctl: INFO JSON: %s\n", je.text);
        exit(1);
    }
    return root;
}

static int cmd_list(void)
{
    df_client_t *c = connect_or_die();
    json_t *root = info_or_die(c, ""), *n;
    size_t i;
    json_array_foreach(json_object_get(root, "characters"), i, n) printf("%s\n", json_string_value(n));
    json_decref(root);
    df_client_close(&c);
    return 0;
}

static int cmd_info(const char *name)
{
    df_client_t *c = connect_or_die();
    json_t *root = info_or_die(c, name);
    char *s = json_dumps(root, JSON_INDENT(2));
    printf("%s\n", s);
    free(s);
    json_decref(root);
    df_client_close(&c);
    return 0;
}

/* A JSON array (nested) into floats + shape. */
static int json_tensor(json_t *j, float **data, size_t *n, int *ndim, int64_t *shape, int depth)
{
    if (json_is_number(j)) {
        float *p = realloc(*data, (*n + 1) * sizeof(float));
        if (!p) return -1;
        *data = p;
        p[(*n)++] = (float)json_number_value(j);
        if (depth > *ndim) *ndim = depth;
        return 0;
    }
    if (!json_is_array(j) || depth >= DF_MAX_DIMS) return -1;
    size_t i;
    json_t *e;
    if (shape[depth] == 0) shape[depth] = (int64_t)json_array_size(j);
    else if (shape[depth] != (int64_t)json_array_size(j)) return -1; /* ragged */
    json_array_foreach(j, i, e) if (json_tensor(e, data, n, ndim, shape, depth + 1)) return -1;
    if (depth + 1 > *ndim) *ndim = depth + 1;
    return 0;
}

static int load_input(const char *spec, json_t *info, df_client_tensor_t *t, float **owned)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || eq - spec >= DF_NAME_MAX) {
        fprintf(stderr, "deformctl: --input expects NAME=FILE.npy or NAME=[json]\n");
        return 2;
    }
    memset(t, 0, sizeof *t);
    memcpy(t->name, spec, (size_t)(eq - spec));
    const char *val = eq + 1;
    int ndim = 0;
    int64_t shape[DF_MAX_DIMS] = {0};
    float *data = NULL;
    if (val[0] == '[' || val[0] == '-' || (val[0] >= '0' && val[0] <= '9')) {
        json_error_t je;
        json_t *j = json_loads(val, JSON_DECODE_ANY, &je);
        size_t n = 0;
        if (!j || json_tensor(j, &data, &n, &ndim, shape, 0)) {
            fprintf(stderr, "deformctl: input %s: not a rectangular JSON array of numbers\n", t->name);
            json_decref(j);
            free(data);
            return 2;
        }
        json_decref(j);
        if (ndim == 0) { ndim = 1; shape[0] = 1; }
    } else {
        df_error_t err = {0};
        if (df_npy_read_f32(val, &ndim, shape, &data, &err)) return fail(&err);
    }
    /* per-pose shape from INFO: add the batch dimension when missing */
    json_t *in, *want = NULL;
    size_t i;
    json_array_foreach(json_object_get(info, "inputs"), i, in)
        if (!strcmp(json_string_value(json_object_get(in, "name")) ?: "", t->name)) want = in;
    if (!want) {
        fprintf(stderr, "deformctl: the character has no input \"%s\"\n", t->name);
        free(data);
        return 1;
    }
    int pd = (int)json_array_size(json_object_get(want, "shape"));
    if (ndim == pd && ndim < DF_MAX_DIMS) {
        memmove(shape + 1, shape, (size_t)ndim * sizeof shape[0]);
        shape[0] = 1;
        ndim++;
    }
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof shape);
    t->data = data;
    *owned = data;
    return 0;
}

static int write_npy(const char *path, const df_client_tensor_t *t)
{
    df_error_t err = {0};
    if (df_npy_write_f32(path, t->ndim, t->shape, t->data, &err)) return fail(&err);
    return 0;
}

static int cmd_infer(const char *name, int argc, char **argv)
{
    df_client_request_t q = {0};
    float *owned[DF_CLIENT_MAX_IO] = {0};
    const char *out = NULL, *inputs[DF_CLIENT_MAX_IO];
    int n_in = 0, http = 0, rc = 0;
    q.character = name;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--http")) { http = 1; continue; }
        if (!strcmp(a, "--http-binary")) { http = 2; continue; }
        if (!strcmp(a, "--sequence-start")) { q.sequence_start = 1; continue; }
        if (!strcmp(a, "--sequence-end")) { q.sequence_end = 1; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--sequence")) {
            /* digits: a numeric id; anything else: a string id */
            char *end;
            unsigned long long n = strtoull(v, &end, 10);
            if (*v && !*end && v[0] != '-') q.sequence_id = n;
            else q.sequence_name = v;
        } else if (!strcmp(a, "--input") && n_in < DF_CLIENT_MAX_IO) inputs[n_in++] = v;
        else if (!strcmp(a, "--output") && q.n_outputs < DF_CLIENT_MAX_IO) q.outputs[q.n_outputs++] = v;
        else if (!strcmp(a, "--encoding")) q.encoding = v;
        else if (!strcmp(a, "--skinning")) q.skinning = v;
        else if (!strcmp(a, "--out")) out = v;
        else return usage();
    }
    if (!out) return usage();
    df_client_t *c = connect_or_die();
    json_t *info = info_or_die(c, name);
    for (int i = 0; i < n_in; i++) {
        if ((rc = load_input(inputs[i], info, &q.inputs[i], &owned[i]))) goto done;
        q.n_inputs++;
        if (q.inputs[i].shape[0] != q.inputs[0].shape[0]) {
            fprintf(stderr, "deformctl: inputs disagree on the batch size\n");
            rc = 2;
            goto done;
        }
    }
    q.n_poses = q.n_inputs ? (int)q.inputs[0].shape[0] : 1;
    df_client_result_t r;
    df_error_t err = {0};
    if (http) {
        char base[300];
        http_base(base, sizeof base);
        rc = df_client_http_infer(base, &q, http == 2, &r, &err);
    } else {
        rc = df_client_infer(c, &q, &r, &err);
    }
    if (rc) {
        rc = fail(&err);
        goto done;
    }
    const char *want = q.n_outputs ? q.outputs[0] : "positions";
    int found = 0;
    for (int o = 0; o < r.n_outputs; o++)
        if (!strcmp(r.outputs[o].name, want)) {
            found = 1;
            rc = write_npy(out, &r.outputs[o]);
            if (!rc) {
                fprintf(stderr, "deformctl: %s %s [", name, want);
                for (int k = 0; k < r.outputs[o].ndim; k++)
                    fprintf(stderr, "%s%lld", k ? "," : "", (long long)r.outputs[o].shape[k]);
                fprintf(stderr, "] %s -> %s (%zu bytes on the wire)\n",
                        q.encoding ? q.encoding : "float32", out, r.wire_bytes);
            }
        }
    if (!found) {
        fprintf(stderr, "deformctl: output \"%s\" not in the result\n", want);
        rc = 1;
    }
    df_client_result_free(&r);
done:
    for (int i = 0; i < DF_CLIENT_MAX_IO; i++) free(owned[i]);
    json_decref(info);
    df_client_close(&c);
    return rc;
}

static void progress(size_t done, size_t total, void *user)
{
    if (!isatty(2) && done != total) return;
    int w = 40, k = total ? (int)(w * done / total) : w;
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu frames", k, "========================================",
            w - k, "", done, total);
    if (done == total) fputc('\n', stderr);
}

static int cmd_play(const char *name, int argc, char **argv)
{
    df_client_play_t p = {0};
    const char *out = NULL;
    char played[DF_NAME_MAX] = "";
    p.character = name;
    p.progress = progress;
    p.clip_played = played;
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--clip")) p.clip = v;
        else if (!strcmp(a, "--fps")) p.fps = atof(v);
        else if (!strcmp(a, "--chunk")) p.chunk = atoi(v);
        else if (!strcmp(a, "--window")) p.window = atoi(v);
        else if (!strcmp(a, "--output")) p.output = v;
        else if (!strcmp(a, "--encoding")) p.encoding = v;
        else if (!strcmp(a, "--skinning")) p.skinning = v;
        else if (!strcmp(a, "--out")) out = v;
        else return usage();
    }
    if (argc % 2 || !p.clip || !out) return usage();
    df_client_t *c = connect_or_die();
    float *frames = NULL;
    size_t n = 0;
    int ndim = 0;
    int64_t shape[DF_MAX_DIMS + 1];
    df_error_t err = {0};
    int rc = df_client_play(c, &p, &frames, &n, &ndim, shape + 1, &err);
    if (rc) {
        df_client_close(&c);
        return fail(&err);
    }
    shape[0] = (int64_t)n;
    if (df_npy_write_f32(out, ndim + 1, shape, frames, &err)) rc = fail(&err);
    else fprintf(stderr, "deformctl: %s/%s: %zu frames -> %s\n", name, played, n, out);
    free(frames);
    df_client_close(&c);
    return rc;
}

static int cmd_mesh(const char *name, int argc, char **argv)
{
    const char *out = NULL;
    for (int i = 0; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else return usage();
    if (!out) return usage();
    char base[300], path[200];
    http_base(base, sizeof base);
    snprintf(path, sizeof path, "/v2/models/%s/mesh?format=glb", name);
    char *body = NULL;
    size_t len = 0;
    long st = 0;
    df_error_t err = {0};
    if (df_client_http_get(base, path, &body, &len, &st, &err)) return fail(&err);
    if (st != 200) {
        fprintf(stderr, "deformctl: HTTP %ld: %.*s\n", st, (int)(len < 400 ? len : 400), body);
        free(body);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(body, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "deformctl: cannot write %s\n", out);
        free(body);
        return 1;
    }
    fprintf(stderr, "deformctl: %s mesh -> %s (%zu bytes)\n", name, out, len);
    free(body);
    return 0;
}

/* The first line of FILE that is not blank or a # comment. */
static int read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "deformctl: --token-file %s: cannot open\n", path);
        return -1;
    }
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *t = line;
        while (*t == ' ' || *t == '\t') t++;
        size_t n = strcspn(t, "\r\n");
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t')) n--;
        t[n] = 0;
        if (!n || *t == '#') continue;
        if (n >= sizeof g_token) break;
        memcpy(g_token, t, n + 1);
        found = 1;
    }
    fclose(f);
    memset(line, 0, sizeof line);
    if (!found) {
        fprintf(stderr, "deformctl: --token-file %s: no token in it\n", path);
        return -1;
    }
    deformctl_token = g_token;
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1;
    const char *env_token = getenv("DEFORMD_TOKEN");
    if (env_token && *env_token && strlen(env_token) < sizeof g_token) {
        strcpy(g_token, env_token);
        deformctl_token = g_token;
    }
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') break;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        if (i + 1 >= argc) return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--host")) snprintf(g_host, sizeof g_host, "%s", v);
        else if (!strcmp(a, "--socket-port")) g_sock_port = atoi(v);
        else if (!strcmp(a, "--http-port")) g_http_port = atoi(v);
        else if (!strcmp(a, "--unix")) g_unix = v;
        else if (!strcmp(a, "--token-file")) {
            if (read_token(v)) return 2;
        } else return usage();
    }
    if (deformctl_token) df_client_http_set_token(deformctl_token);
    if (i >= argc) return usage();
    const char *cmd = argv[i++];
    if (!strcmp(cmd, "list")) return cmd_list();
    if (!strcmp(cmd, "bench")) {
        char addr[1100];
        sock_addr(addr, sizeof addr);
        return deformctl_bench(addr, argc - i, argv + i);
    }
    if (i >= argc) return usage();
    const char *name = argv[i++];
    if (!strcmp(cmd, "info")) return cmd_info(name);
    if (!strcmp(cmd, "infer")) return cmd_infer(name, argc - i, argv + i);
    if (!strcmp(cmd, "play")) return cmd_play(name, argc - i, argv + i);
    if (!strcmp(cmd, "mesh")) return cmd_mesh(name, argc - i, argv + i);
    return usage();
}

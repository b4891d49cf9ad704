/* bench_server.c — load generator for `make bench-server` (bench/bench_server.sh).
 *
 *   bench_server mkrepo DIR
 *       writes the benchmark repository: "face" — the Wuson mesh from
 *       Debian's assimp-testmodels (OBJ/WusonOBJ.obj, 2117 vertices) with
 *       256 smooth morph targets, so evaluation is dominated by the morph
 *       GEMM; characters face_a (own default weights) and face_b; "bigface",
 *       the same mesh with 1024 targets (characters big_a, big_b) — and
 *       "tiny", a 120-vertex rig (characters tiny_a, tiny_b) for transport
 *       overhead.
 *   bench_server run --port P --proto json|bin|sock|fixed-http|fixed-sock
 *                    --conns N --secs S --chars a,b
 *                    (--weights M | --inputs FILE --names a,b) [--pid PID]
 *                    [--threads T] [--warmup S]
 *       N closed-loop connections (one request in flight each, raw
 *       non-blocking sockets driven by epoll from T threads (default 1):
 *       no client library, and the generator's own CPU use stays small
 *       next to the server's on a shared machine), characters assigned
 *       round-robin. The first S seconds (default 0.5) are a warm-up: their
 *       requests are not recorded and the CPU/time window starts after. Prints one line: proto, conns, requests, req/s, p50,
 *       p99, p99.9 latency (µs), errors, given --pid the server's CPU
 *       time per request (µs) from /proc/PID/stat, and the answer's body
 *       bytes (HTTP body / frame payload: what the fixed servers must send
 *       to be compared fairly).
 *   bench_server evalbench MODEL.safetensors [--inputs FILE --names a,b]
 *       the model's evaluation alone, in this process: df_model_evaluate of
 *       B = 1, 8, 32, 64 poses, per pose and as B=1 / B (the most batching
 *       can give); for a morph model without --inputs (random weights) also
 *       a bare cblas_sgemv (B = 1) / cblas_sgemm (B > 1) of the same
 *       3N x (M+1) shape; best of 7, thread CPU time.
 * Request bodies are built once per connection (random weights, or rows
 * of a safetensors file: --inputs FILE --names a,b); each
 * request is a single pose with `weights` [M] asking for `positions` (binary
 * for bin/sock).
 */
#include "df.h"
#include "frame.h"
#include <cblas.h>
#include <arpa/inet.h>
#include <assimp/cimport.h>
#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- mkrepo */

static void wfile(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
}

static int write_model(const char *path, int64_t nv, float *pos, int64_t nt, uint32_t *tri, int M,
                       float amp, uint32_t seed)
{
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = nv;
    d.positions = pos;
    d.n_triangles = nt;
    d.triangles = tri;
    d.n_morphs = M;
    d.morph_deltas = malloc((size_t)M * (size_t)nv * 3 * sizeof(float));
    uint32_t r = seed;
    for (int k = 0; k < M; k++) {
        float f[3], ph[3], a[3];
        for (int c = 0; c < 3; c++) {
            r = r * 1664525u + 1013904223u;
            f[c] = 1.0f + (float)(r >> 24) / 32.0f;
            r = r * 1664525u + 1013904223u;
            ph[c] = (float)(r >> 16) / 10000.0f;
            r = r * 1664525u + 1013904223u;
            a[c] = amp * ((float)(r >> 8) / 16777216.0f - 0.5f);
        }
        for (int64_t v = 0; v < nv; v++)
            for (int c = 0; c < 3; c++)
                d.morph_deltas[((int64_t)k * nv + v) * 3 + c] =
                    a[c] * sinf(f[c] * pos[v * 3 + (c + 1) % 3] + ph[c]);
    }
    d.n_joints = 1;
    int32_t parent = -1;
    float rt[3] = {0}, rr[4] = {0, 0, 0, 1}, rs[3] = {1, 1, 1};
    float ib[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    char *jn[1] = {"root"};
    d.joint_names = jn;
    d.parents = &parent;
    d.rest_translations = rt;
    d.rest_rotations = rr;
    d.rest_scales = rs;
    d.inverse_bind = ib;
    d.n_influences = 1;
    d.skin_joints = calloc((size_t)nv, sizeof(int32_t));
    d.skin_weights = malloc((size_t)nv * sizeof(float));
    for (int64_t v = 0; v < nv; v++) d.skin_weights[v] = 1;
    d.skinning = "lbs";
    df_error_t e = {0};
    int rc = df_rigged_write(&d, path, &e);
    if (rc) fprintf(stderr, "%s: %s\n", path, e.msg);
    free(d.morph_deltas);
    free(d.skin_joints);
    free(d.skin_weights);
    return rc;
}

/* One triangle mesh of an asset (first mesh, identical vertices joined). */
static int load_mesh(const char *asset, int64_t *nv_out, float **pos_out, int64_t *nt_out,
                     uint32_t **tri_out)
{
    const struct aiScene *sc = aiImportFile(asset, aiProcess_Triangulate | aiProcess_JoinIdenticalVertices);
    if (!sc || sc->mNumMeshes < 1) {
        fprintf(stderr, "cannot import %s\n", asset);
        return 1;
    }
    const struct aiMesh *m = sc->mMeshes[0];
    int64_t nv = m->mNumVertices, nt = 0;
    float *pos = malloc((size_t)nv * 12);
    uint32_t *tri = malloc((size_t)m->mNumFaces * 12);
    for (int64_t v = 0; v < nv; v++) {
        pos[v * 3] = m->mVertices[v].x;
        pos[v * 3 + 1] = m->mVertices[v].y;
        pos[v * 3 + 2] = m->mVertices[v].z;
    }
    for (unsigned f = 0; f < m->mNumFaces; f++)
        if (m->mFaces[f].mNumIndices == 3) {
            for (int k = 0; k < 3; k++) tri[nt * 3 + k] = m->mFaces[f].mIndices[k];
            nt++;
        }
    aiReleaseImport(sc);
    *nv_out = nv;
    *pos_out = pos;
    *nt_out = nt;
    *tri_out = tri;
    return 0;
}

static int mkrepo(const char *dir)
{
    int64_t nv, nt;
    float *pos;
    uint32_t *tri;
    if (load_mesh("/usr/share/assimp/models/OBJ/WusonOBJ.obj", &nv, &pos, &nt, &tri)) return 1;
    char p[2048];
    snprintf(p, sizeof p, "mkdir -p '%s/face/1' '%s/tiny/1'", dir, dir);
    if (system(p)) return 1;
    snprintf(p, sizeof p, "%s/face/1/model.safetensors", dir);
    if (write_model(p, nv, pos, nt, tri, 256, 0.05f, 1)) return 1;
    snprintf(p, sizeof p, "mkdir -p '%s/bigface/1'", dir);
    if (system(p)) return 1;
    snprintf(p, sizeof p, "%s/bigface/1/model.safetensors", dir);
    if (write_model(p, nv, pos, nt, tri, 1024, 0.02f, 3)) return 1;
    /* tiny: a 10x12 grid */
    int gx = 10, gy = 12;
    int64_t tv = gx * gy, tt = 0;
    float *tp = malloc((size_t)tv * 12);
    uint32_t *ti = malloc((size_t)(gx - 1) * (gy - 1) * 24);
    for (int y = 0; y < gy; y++)
        for (int x = 0; x < gx; x++) {
            tp[(y * gx + x) * 3] = (float)x / 9.0f;
            tp[(y * gx + x) * 3 + 1] = (float)y / 11.0f;
            tp[(y * gx + x) * 3 + 2] = 0;
        }
    for (int y = 0; y + 1 < gy; y++)
        for (int x = 0; x + 1 < gx; x++) {
            uint32_t a = (uint32_t)(y * gx + x);
            uint32_t q[6] = {a, a + 1, a + 1 + (uint32_t)gx, a, a + 1 + (uint32_t)gx, a + (uint32_t)gx};
            memcpy(ti + tt * 3, q, sizeof q);
            tt += 2;
        }
    snprintf(p, sizeof p, "%s/tiny/1/model.safetensors", dir);
    if (write_model(p, tv, tp, tt, ti, 4, 0.1f, 2)) return 1;
    char w[8192];
    size_t n = 0;
    n += (size_t)snprintf(w + n, sizeof w - n, "{\"kind\":\"rigged\",\"max_batch_size\":64,"
                                               "\"max_queue_delay_us\":1000,\"max_queue_length\":4096,"
                                               "\"characters\":{\"face_a\":{\"defaults\":{\"weights\":[");
    for (int k = 0; k < 256; k++) n += (size_t)snprintf(w + n, sizeof w - n, k ? ",%.3f" : "%.3f", 0.001 * (k % 7));
    n += (size_t)snprintf(w + n, sizeof w - n, "]}},\"face_b\":{}}}");
    snprintf(p, sizeof p, "%s/face/config.json", dir);
    wfile(p, w);
    snprintf(p, sizeof p, "%s/bigface/config.json", dir);
    wfile(p, "{\"kind\":\"rigged\",\"max_batch_size\":64,\"max_queue_delay_us\":2000,"
             "\"max_queue_length\":4096,\"characters\":{\"big_a\":{},\"big_b\":{}}}");
    snprintf(p, sizeof p, "%s/tiny/config.json", dir);
    wfile(p, "{\"kind\":\"rigged\",\"max_batch_size\":64,\"max_queue_delay_us\":200,"
             "\"max_queue_length\":4096,\"characters\":{\"tiny_a\":{},\"tiny_b\":{}}}");
    printf("repository %s: face/bigface %lld vertices 256/1024 morphs, tiny %lld vertices\n", dir, (long long)nv,
           (long long)tv);
    free(pos); free(tri); free(tp); free(ti);
    /* "head": the dense PLY scan of the same character (11154 vertices)
     * with 512 targets (68 MB of deltas, more than the last-level cache:
     * one pose streams them from memory, a batch reuses them) */
    if (load_mesh("/usr/share/assimp/models/PLY/Wuson.ply", &nv, &pos, &nt, &tri)) return 1;
    snprintf(p, sizeof p, "mkdir -p '%s/head/1'", dir);
    if (system(p)) return 1;
    float lo[3] = {1e30f, 1e30f, 1e30f}, hi[3] = {-1e30f, -1e30f, -1e30f};
    for (int64_t v = 0; v < nv; v++)
        for (int c = 0; c < 3; c++) {
            lo[c] = fminf(lo[c], pos[v * 3 + c]);
            hi[c] = fmaxf(hi[c], pos[v * 3 + c]);
        }
    float diag = sqrtf((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                       (hi[2] - lo[2]) * (hi[2] - lo[2]));
    snprintf(p, sizeof p, "%s/head/1/model.safetensors", dir);
    if (write_model(p, nv, pos, nt, tri, 512, 0.02f * diag, 3)) return 1;
    snprintf(p, sizeof p, "%s/head/config.json", dir);
    wfile(p, "{\"kind\":\"rigged\",\"max_batch_size\":64,\"max_queue_delay_us\":2000,"
             "\"max_queue_length\":4096,\"characters\":{\"head_a\":{},\"head_b\":{}}}");
    printf("repository %s: head %lld vertices 512 morphs\n", dir, (long long)nv);
    free(pos); free(tri);
    return 0;
}

/* ---------------------------------------------------------------- run */

enum { P_JSON, P_BIN, P_SOCK, P_FHTTP, P_FSOCK };

typedef struct {
    int id, port, proto;
    const char *character;
    double end;
    double measure_from;       /* requests sent before: warm-up, not recorded */
    double *lat;
    size_t n, cap;
    size_t body_bytes;         /* of the last answer: HTTP body / frame payload */
    int errors;
    char *req;
    size_t req_len;
    char *buf;
    size_t buf_cap;
} worker_t;

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* The inputs of every request: one `weights` [M] tensor of random values
 * (default), or, with --inputs FILE --names a,b, row (connection id mod N)
 * of each named [N, ...] FP32 tensor of a safetensors file (e.g. a rigdata
 * dataset's `controls` and `joint_matrices`: real poses for a rigapprox
 * model). */
typedef struct {
    char name[DF_NAME_MAX];
    int ndim;                 /* per pose, without the batch dimension */
    uint32_t dims[DF_MAX_DIMS];
    size_t per_pose;          /* floats */
    const float *rows;        /* NULL: random values */
    size_t nrows;
} inspec_t;
static inspec_t g_in[DF_MAX_IO];
static int g_nin;

static void build_request(worker_t *w)
{
    uint32_t r = 7u + (uint32_t)w->id * 31u;
    const float *val[DF_MAX_IO];
    float *own[DF_MAX_IO] = {0};
    size_t total = 0;
    for (int i = 0; i < g_nin; i++) {
        const inspec_t *in = &g_in[i];
        total += in->per_pose;
        if (in->rows) {
            val[i] = in->rows + ((size_t)w->id % in->nrows) * in->per_pose;
            continue;
        }
        own[i] = malloc(in->per_pose * sizeof(float));
        for (size_t k = 0; k < in->per_pose; k++) {
            r = r * 1664525u + 1013904223u;
            own[i][k] = (float)(r >> 8) / 16777216.0f;
        }
        val[i] = own[i];
    }
    size_t cap = 64 * 1024 + total * 24;
    w->req = malloc(cap);
    if (w->proto == P_SOCK || w->proto == P_FSOCK) {
        df_frame_infer_t q;
        memset(&q, 0, sizeof q);
        q.n_poses = 1;
        q.encoding = DF_WIRE_F32;
        snprintf(q.character, sizeof q.character, "%s", w->character);
        q.n_outputs = 1;
        snprintf(q.outputs[0], DF_NAME_MAX, "positions");
        q.n_inputs = g_nin;
        for (int i = 0; i < g_nin; i++) {
            df_frame_tensor_t *t = &q.inputs[i];
            memcpy(t->name, g_in[i].name, sizeof g_in[i].name < sizeof t->name ? sizeof g_in[i].name : sizeof t->name);
            t->type = DF_DT_F32;
            t->ndim = 1 + g_in[i].ndim;
            t->dims[0] = 1;
            for (int d = 0; d < g_in[i].ndim; d++) t->dims[1 + d] = g_in[i].dims[d];
            t->data = val[i];
            t->nbytes = g_in[i].per_pose * 4;
        }
        df_frame_buf_t fb;
        df_frame_buf_init(&fb);
        df_error_t e = {0};
        if (df_frame_encode_infer(1, &q, &fb.o, &e)) {
            fprintf(stderr, "encode: %s\n", e.msg);
            exit(1);
        }
        df_frame_flatten(&fb.o, w->req);
        w->req_len = fb.o.total;
    } else {
        char *body = malloc(cap);
        size_t bl = 0;
        int binary = w->proto != P_JSON;
        bl += (size_t)sprintf(body, "{\"inputs\":[");
        for (int i = 0; i < g_nin; i++) {
            bl += (size_t)sprintf(body + bl, "%s{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":[1", i ? "," : "",
                                  g_in[i].name);
            for (int d = 0; d < g_in[i].ndim; d++) bl += (size_t)sprintf(body + bl, ",%u", g_in[i].dims[d]);
            if (binary) {
                bl += (size_t)sprintf(body + bl, "],\"parameters\":{\"binary_data_size\":%zu}}", g_in[i].per_pose * 4);
            } else {
                bl += (size_t)sprintf(body + bl, "],\"data\":[");
                for (size_t k = 0; k < g_in[i].per_pose; k++)
                    bl += (size_t)sprintf(body + bl, g_in[i].rows ? (k ? ",%.9g" : "%.9g") : (k ? ",%.6g" : "%.6g"),
                                          val[i][k]);
                bl += (size_t)sprintf(body + bl, "]}");
            }
        }
        bl += (size_t)sprintf(body + bl, binary ? "],\"outputs\":[{\"name\":\"positions\","
                                                  "\"parameters\":{\"binary_data\":true}}]}"
                                                : "],\"outputs\":[{\"name\":\"positions\"}]}");
        size_t hl = bl;
        if (binary)
            for (int i = 0; i < g_nin; i++) {
                memcpy(body + bl, val[i], g_in[i].per_pose * 4);
                bl += g_in[i].per_pose * 4;
            }
        size_t n = (size_t)sprintf(w->req, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: bench\r\n"
                                           "Content-Length: %zu\r\n", w->character, bl);
        if (binary) n += (size_t)sprintf(w->req + n, "Inference-Header-Content-Length: %zu\r\n", hl);
        n += (size_t)sprintf(w->req + n, "\r\n");
        memcpy(w->req + n, body, bl);
        w->req_len = n + bl;
        free(body);
    }
    for (int i = 0; i < g_nin; i++) free(own[i]);
}

/* --inputs FILE --names a,b: see inspec_t. The file stays open (its rows
 * are the request bodies' source) until the process exits. */
static int load_inputs(const char *path, const char *names)
{
    static df_st_t *st;
    df_error_t e = {0};
    if (df_st_open(path, NULL, &st, &e)) {
        fprintf(stderr, "--inputs %s: %s\n", path, e.msg);
        return -1;
    }
    char *nl = strdup(names);
    g_nin = 0;
    for (char *t = strtok(nl, ","); t; t = strtok(NULL, ",")) {
        const df_tensor_t *x = df_st_find(st, t);
        if (!x || x->dtype != DF_DT_F32 || x->ndim < 2 || g_nin == DF_MAX_IO) {
            fprintf(stderr, "--inputs %s: no FP32 tensor %s of shape [N, ...]\n", path, t);
            free(nl);
            return -1;
        }
        inspec_t *in = &g_in[g_nin++];
        snprintf(in->name, sizeof in->name, "%s", t);
        in->ndim = x->ndim - 1;
        in->per_pose = 1;
        for (int d = 1; d < x->ndim; d++) {
            in->dims[d - 1] = (uint32_t)x->shape[d];
            in->per_pose *= (size_t)x->shape[d];
        }
        in->rows = x->data;
        in->nrows = (size_t)x->shape[0];
    }
    free(nl);
    return g_nin ? 0 : -1;
}

/* ---- event-driven closed loop: T threads, each drives its share of the
 * connections with epoll (non-blocking sockets), so 64 connections cost
 * the machine a few threads, not 64 (the load generator shares the cores
 * with the server under test). Each connection: write the request, read
 * one whole answer, record the latency, repeat until the end time. */

typedef struct {
    worker_t *w;               /* request, latencies, buffer */
    int fd;
    size_t sent, have, need;   /* need: total answer bytes once known */
    uint64_t id;
    double t0;
    int done;
} lconn_t;

/* Bytes of a whole answer in c->w->buf[0..have), or 0 while unknown; -1 on
 * a malformed answer. *status gets the HTTP status / frame type. */
static long answer_size(const lconn_t *c, int *status, size_t *head)
{
    const worker_t *w = c->w;
    if (w->proto == P_SOCK || w->proto == P_FSOCK) {
        if (c->have < 24) return 0;
        uint32_t len;
        uint16_t type;
        memcpy(&len, w->buf + 20, 4);
        memcpy(&type, w->buf + 6, 2);
        *status = type == DF_FT_RESULT ? 200 : 500;
        *head = 24;
        return 24 + (long)len;
    }
    w->buf[c->have] = 0;
    char *hend = strstr(w->buf, "\r\n\r\n");
    if (!hend) return 0;
    *status = atoi(w->buf + 9);
    char *cl = strcasestr(w->buf, "\r\ncontent-length:");
    if (!cl || cl > hend) return -1;
    *head = (size_t)(hend + 4 - w->buf);
    return (long)(hend + 4 - w->buf) + atol(cl + 17);
}

static int lconn_send(lconn_t *c)
{
    worker_t *w = c->w;
    if (c->sent == 0) {
        if (w->proto == P_SOCK || w->proto == P_FSOCK) memcpy(w->req + 12, &c->id, 8);
        c->id++;
        c->t0 = now_s();
        c->have = 0;
        c->need = 0;
    }
    while (c->sent < w->req_len) {
        ssize_t k = write(c->fd, w->req + c->sent, w->req_len - c->sent);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) return 1; /* wait for EPOLLOUT */
        if (k <= 0) return -1;
        c->sent += (size_t)k;
    }
    return 0;
}

/* Readable: returns 1 when an answer completed, 0 when more is needed, -1
 * on error. */
static int lconn_recv(lconn_t *c)
{
    worker_t *w = c->w;
    for (;;) {
        if (c->have + 65536 > w->buf_cap) {
            w->buf_cap = w->buf_cap * 2 + 131072;
            w->buf = realloc(w->buf, w->buf_cap);
        }
        ssize_t k = read(c->fd, w->buf + c->have, w->buf_cap - c->have - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) return 0;
        if (k <= 0) return -1;
        c->have += (size_t)k;
        int status = 0;
        if (!c->need) {
            size_t head;
            long n = answer_size(c, &status, &head);
            if (n < 0) return -1;
            c->need = (size_t)n;
        }
        if (c->need && c->have >= c->need) {
            if (c->have > c->need) return -1; /* one answer in flight: no extra bytes */
            size_t head = 0;
            answer_size(c, &status, &head);
            w->body_bytes = c->need - head;
            double t1 = now_s();
            if (status != 200) {
                w->errors++;
                if (w->errors < 3) fprintf(stderr, "error response: %.200s\n", w->buf);
            } else if (c->t0 >= w->measure_from) {
                if (w->n == w->cap) {
                    w->cap = w->cap * 2 + 4096;
                    w->lat = realloc(w->lat, w->cap * sizeof(double));
                }
                w->lat[w->n++] = (t1 - c->t0) * 1e6;
            }
            return 1;
        }
    }
}

typedef struct {
    worker_t *w;   /* this thread's connections' workers */
    int n;
} lthread_t;

static void *lthread_main(void *arg)
{
    lthread_t *lt = arg;
    int ep = epoll_create1(0);
    lconn_t *cs = calloc((size_t)lt->n, sizeof *cs);
    int live = 0;
    for (int i = 0; i < lt->n; i++) {
        worker_t *w = &lt->w[i];
        build_request(w);
        cs[i].w = w;
        cs[i].id = 1;
        cs[i].fd = connect_to(w->port);
        if (cs[i].fd < 0) {
            w->errors++;
            cs[i].done = 1;
            continue;
        }
        fcntl(cs[i].fd, F_SETFL, fcntl(cs[i].fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
        live++;
    }
    double end = lt->n ? lt->w[0].end : 0;
    for (int i = 0; i < lt->n; i++) {
        if (cs[i].done) continue;
        int r = lconn_send(&cs[i]);
        if (r < 0) { cs[i].w->errors++; cs[i].done = 1; live--; }
        else if (r > 0) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = &cs[i]};
            epoll_ctl(ep, EPOLL_CTL_MOD, cs[i].fd, &ev);
        }
    }
    struct epoll_event evs[128];
    while (live > 0) {
        int n = epoll_wait(ep, evs, 128, 100);
        if (n < 0 && errno == EINTR) continue;
        for (int k = 0; k < n; k++) {
            lconn_t *c = evs[k].data.ptr;
            if (c->done) continue;
            int r = 0;
            if (evs[k].events & EPOLLOUT) {
                r = lconn_send(c);
                if (r == 0) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }
            if (r >= 0 && (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
                r = lconn_recv(c);
                if (r == 1) {
                    c->sent = 0;
                    if (now_s() >= end) {
                        c->done = 1;
                        live--;
                        continue;
                    }
                    r = lconn_send(c);
                    if (r > 0) {
                        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                    }
                }
            }
            if (r < 0) {
                c->w->errors++;
                c->done = 1;
                live--;
            }
        }
        if (n == 0 && now_s() > end + 30) break; /* a server that stopped answering */
    }
    for (int i = 0; i < lt->n; i++)
        if (cs[i].fd >= 0) close(cs[i].fd);
    close(ep);
    free(cs);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double proc_cpu_s(int pid)
{
    if (pid <= 0) return 0;
    char p[64], buf[4096];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = strrchr(buf, ')');
    if (!s) return 0;
    unsigned long ut = 0, st = 0;
    /* fields after ')': state(3) ... utime(14) stime(15) */
    sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int run(int argc, char **argv)
{
    int port = 0, conns = 16, pid = 0, weights = 4, proto = P_BIN, lthreads = 1;
    double secs = 5, warmup = 0.5;
    const char *chars = "tiny_a,tiny_b", *pname = "bin", *inputs = NULL, *inames = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conns")) conns = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--secs")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--pid")) pid = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--weights")) weights = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) lthreads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--chars")) chars = argv[i + 1];
        else if (!strcmp(argv[i], "--inputs")) inputs = argv[i + 1];
        else if (!strcmp(argv[i], "--names")) inames = argv[i + 1];
        else if (!strcmp(argv[i], "--proto")) {
            pname = argv[i + 1];
            proto = !strcmp(pname, "json") ? P_JSON : !strcmp(pname, "bin") ? P_BIN
                  : !strcmp(pname, "sock") ? P_SOCK : !strcmp(pname, "fixed-http") ? P_FHTTP
                  : !strcmp(pname, "fixed-sock") ? P_FSOCK : -1;
            if (proto < 0) { fprintf(stderr, "unknown proto %s\n", pname); return 2; }
        } else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (inputs) {
        if (load_inputs(inputs, inames ? inames : "weights")) return 2;
    } else {
        g_nin = 1;
        g_in[0] = (inspec_t){.name = "weights", .ndim = 1, .dims = {(uint32_t)weights}, .per_pose = (size_t)weights};
    }
    char *cl = strdup(chars), *names[64];
    int nn = 0;
    for (char *t = strtok(cl, ","); t && nn < 64; t = strtok(NULL, ",")) names[nn++] = t;
    worker_t *w = calloc((size_t)conns, sizeof *w);
    if (lthreads < 1) lthreads = 1;
    if (lthreads > conns) lthreads = conns;
    pthread_t *th = calloc((size_t)lthreads, sizeof *th);
    lthread_t *lt = calloc((size_t)lthreads, sizeof *lt);
    /* warm-up: connections open, every pooled buffer and each worker's
     * first large batch happen before measuring starts */
    double t0 = now_s(), tm = t0 + warmup;
    for (int i = 0; i < conns; i++)
        w[i] = (worker_t){.id = i, .port = port, .proto = proto,
                          .character = names[i % nn], .end = tm + secs, .measure_from = tm};
    for (int k = 0, first = 0; k < lthreads; k++) {
        int n = conns / lthreads + (k < conns % lthreads);
        lt[k] = (lthread_t){.w = w + first, .n = n};
        first += n;
        pthread_create(&th[k], NULL, lthread_main, &lt[k]);
    }
    while (now_s() < tm) usleep(1000);
    double c0 = proc_cpu_s(pid);
    size_t total = 0;
    int errors = 0;
    for (int k = 0; k < lthreads; k++) pthread_join(th[k], NULL);
    for (int i = 0; i < conns; i++) {
        total += w[i].n;
        errors += w[i].errors;
    }
    free(lt);
    double el = now_s() - tm, c1 = proc_cpu_s(pid);
    double *all = malloc((total ? total : 1) * sizeof(double));
    size_t k = 0;
    size_t nmin = SIZE_MAX, nmax = 0; /* requests per connection: fairness between clients */
    size_t body = 0;                  /* largest answer body seen: sizes the fixed servers' replies */
    for (int i = 0; i < conns; i++) {
        if (w[i].body_bytes > body) body = w[i].body_bytes;
        if (w[i].n < nmin) nmin = w[i].n;
        if (w[i].n > nmax) nmax = w[i].n;
        memcpy(all + k, w[i].lat, w[i].n * sizeof(double));
        k += w[i].n;
        free(w[i].lat);
        free(w[i].req);
        free(w[i].buf);
    }
    qsort(all, total, sizeof(double), cmp_d);
#define PCT(p) (total ? all[(size_t)((double)(total - 1) * (p))] : 0)
    printf("%-10s conns=%-3d reqs=%-8zu rps=%-9.0f p50=%-7.0f p99=%-7.0f p99.9=%-7.0f errors=%d cpu_us_per_req=%.1f "
           "per_conn=%zu..%zu body_bytes=%zu\n",
           pname, conns, total, (double)total / el, PCT(0.5), PCT(0.99), PCT(0.999), errors,
           pid > 0 && total ? (c1 - c0) * 1e6 / (double)total : 0.0, nmin, nmax, body);
    free(all);
    free(w);
    free(th);
    free(cl);
    return errors > 0 && total == 0;
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void openblas_set_num_threads(int);

/* evalbench MODEL [--inputs FILE --names a,b]: per-pose cost of
 * df_model_evaluate at B = 1, 8, 32, 64 in this thread — the most batching
 * can give before any transport cost (B = 1 time / B time). A model with a
 * `weights` input and no --inputs gets random weights and, beside it, a bare
 * cblas_sgemv / sgemm of its morph GEMM's shape; with --inputs every input
 * named comes from the file's rows (e.g. a rigdata dataset's controls and
 * joint_matrices for a rigapprox model). */
static int evalbench(int argc, char **argv)
{
    const char *path = argv[2], *inputs = NULL, *inames = NULL;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--inputs")) inputs = argv[i + 1];
        else if (!strcmp(argv[i], "--names")) inames = argv[i + 1];
        else { fprintf(stderr, "evalbench: unknown option %s\n", argv[i]); return 2; }
    }
    openblas_set_num_threads(1);
    df_model_t *m = NULL;
    df_error_t e = {0};
    df_st_t *st = NULL;
    if (df_st_open(path, NULL, &st, &e)) {
        fprintf(stderr, "evalbench: %s\n", e.msg);
        return 1;
    }
    char kind[64];
    snprintf(kind, sizeof kind, "%s", df_st_meta(st, "kind") ? df_st_meta(st, "kind") : "rigged");
    int bad = df_model_open(path, kind, NULL, NULL, &m, &e);
    df_st_close(&st);
    if (bad) {
        fprintf(stderr, "evalbench: %s\n", e.msg);
        return 1;
    }
    if (inputs && load_inputs(inputs, inames ? inames : "weights")) return 1;
    int io = df_model_find_output(m, "positions");
    int iw = inputs ? -1 : df_model_find_input(m, "weights");
    if (io < 0 || (!inputs && iw < 0)) {
        fprintf(stderr, "evalbench: the model needs a positions output, and a weights input or --inputs\n");
        df_model_unref(&m);
        return 1;
    }
    long N3 = (long)df_model_output(m, io)->shape[0] * 3;
    int M = iw >= 0 ? (int)df_model_input(m, iw)->shape[0] : 0;
    float *A = NULL, *w = NULL;
    float *out = malloc((size_t)64 * (size_t)N3 * sizeof(float));
    const float *ip[DF_MAX_IO][64];
    df_batch_t b;
    memset(&b, 0, sizeof b);
    if (iw >= 0) {
        A = malloc((size_t)N3 * (size_t)(M + 1) * sizeof(float));
        w = malloc((size_t)64 * (size_t)(M + 1) * sizeof(float));
        if (!A || !w) return 1;
        for (long i = 0; i < N3 * (M + 1); i++) A[i] = (float)(i % 101) * 0.001f;
        for (int i = 0; i < 64 * (M + 1); i++) w[i] = (float)(i % 7) * 0.1f + 0.01f;
        for (int p = 0; p < 64; p++) ip[0][p] = w + (size_t)p * (size_t)M;
        b.in[iw] = ip[0];
    } else {
        for (int i = 0; i < g_nin; i++) {
            int k = df_model_find_input(m, g_in[i].name);
            if (k < 0) {
                fprintf(stderr, "evalbench: the model has no input %s\n", g_in[i].name);
                return 1;
            }
            for (int p = 0; p < 64; p++) ip[i][p] = g_in[i].rows + ((size_t)p % g_in[i].nrows) * g_in[i].per_pose;
            b.in[k] = ip[i];
        }
    }
    if (!out) return 1;
    df_scratch_t *s = df_scratch_new();
    printf("# evalbench %s (%s): 3N = %ld%s", path, kind, N3, iw >= 0 ? "" : "\n");
    if (iw >= 0) printf(", M = %d\n", M);
    static const int Bs[] = {1, 8, 32, 64};
    double b1 = 0;
    for (int bi = 0; bi < 4; bi++) {
        int B = Bs[bi];
        float *op[64];
        for (int p = 0; p < B; p++) op[p] = out + (size_t)p * (size_t)N3;
        b.n = B;
        b.out[io] = op;
        double be = 1e9, bb = 1e9;
        for (int r = 0; r < 7; r++) {
            double t = cpu_now();
            if (df_model_evaluate(m, &b, s, &e)) {
                fprintf(stderr, "evalbench: %s\n", e.msg);
                return 1;
            }
            t = cpu_now() - t;
            if (t < be) be = t;
            if (iw < 0) continue;
            t = cpu_now();
            if (B == 1)
                cblas_sgemv(CblasColMajor, CblasNoTrans, (int)N3, M + 1, 1.0f, A, (int)N3, w, 1, 0.0f, out, 1);
            else
                cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)N3, B, M + 1, 1.0f, A, (int)N3,
                            w, M + 1, 0.0f, out, (int)N3);
            t = cpu_now() - t;
            if (t < bb) bb = t;
        }
        if (B == 1) b1 = be;
        printf("EVAL B=%-2d df_model_evaluate %8.1f us/pose  (B=1 / this: %.2fx)", B, be * 1e6 / B, b1 / (be / B));
        if (iw >= 0)
            printf("   bare %s %8.1f us/pose   (%.2fx)", B == 1 ? "sgemv" : "sgemm", bb * 1e6 / B, bb / be);
        printf("\n");
    }
    df_scratch_free(&s);
    free(A);
    free(w);
    free(out);
    df_model_unref(&m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "evalbench")) return evalbench(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "mkrepo")) return mkrepo(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "run")) return run(argc, argv);
    fprintf(stderr, "usage: bench_server mkrepo DIR | evalbench MODEL [--inputs F --names a,b] | run --port P "
                    "--proto json|bin|sock|fixed-http|fixed-sock --conns N --secs S --chars a,b "
                    "(--weights M | --inputs F --names a,b) [--pid PID]\n");
    return 2;
}

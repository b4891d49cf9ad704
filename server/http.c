/* http.c — the HTTP front: KServe v2 over libmicrohttpd.
 *
 * DESIGN
 * cfg->http_threads MHD daemons run one epoll thread each; our acceptor
 * thread owns the listening socket and gives every new connection to the
 * daemon with the fewest (see struct df_http). Each request gets a req_t
 * (con_cls):
 *  1. first call: route the URL, check Content-Length against the limit
 *     (an oversize body is refused at once, with Connection: close, so we
 *     never read it); nothing else is queued on the first call (MHD 0.9.75
 *     answers Connection: close when a response is queued on the first
 *     call, which cut keep-alive throughput 4x in bench/bench_server.sh);
 *  2. upload calls: append to the request's body buffer (bounded);
 *  3. last call: answer GETs at once; for inference, decode the body
 *     (proto/kserve.h), fill a df_job_t whose inputs point into the body,
 *     submit it, and suspend the connection;
 *  4. the worker's done() marks the request finished and resumes the
 *     connection (thread-safe in MHD with an ITC); MHD calls us again and
 *     we encode the response (JSON, binary-data extension, or .glb).
 * A stalled client therefore never holds a worker: the worker only flips a
 * flag and resumes; the bytes are written by the MHD thread. The req_t, its
 * body and the job are freed in MHD's request-completed callback, after
 * the response has been sent. Every error is {"error": "..."} with a status
 * from df_http_status_for().
 */
#include "http.h"
#include "glb.h"
#include "kserve.h"
#include "peers.h"
#include <jansson.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

void df__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One MHD daemon per HTTP thread, each with its own epoll thread and no
 * listening socket: our acceptor thread owns the socket and hands every
 * new connection to the daemon that holds the fewest (MHD_add_connection).
 * MHD's own thread pool lets whichever thread wakes first accept a burst of
 * connections, which on this 2-core box left one thread with 12 of 16
 * keep-alive clients and the other idle (req/s 68k-108k run to run;
 * docs/performance.md, session 5). The acceptor also enforces
 * max_connections itself (our own counts: + at hand-off, - when MHD
 * reports the connection closed) and never lets MHD refuse one: in MHD
 * 0.9.75 a connection added from another thread and refused at the
 * daemon's limit leaves the connections queued with it unanswered and
 * MHD_stop_daemon hanging (seen here with limit 2 and 3 connections). */
#define DF_HTTP_MAX_THREADS 64
typedef struct {
    df_http_t *h;
    atomic_int conns; /* connections handed to this daemon and not yet closed */
} http_slot_t;

/* A connection as the read timeouts see it (MHD's socket_context). The
 * states and their clocks are written by its MHD thread and read by the
 * reaper; the list and `shut` are under h->conn_mu. MHD calls
 * NOTIFY_CLOSED (which unlinks it under conn_mu) before it closes the fd,
 * so the reaper never shuts down a descriptor that was reused. */
enum { HC_HEADERS, HC_BODY, HC_BUSY };
typedef struct hconn {
    struct hconn *prev, *next;    /* under h->conn_mu */
    int fd;
    df_peer_key_t peer;
    atomic_int state;             /* HC_*: waiting for a request's headers,
                                   * reading its body, or not reading */
    _Atomic int64_t since_ns;     /* when that state began */
    int shut;                     /* under conn_mu: timed out, shut down */
    int url_nul;                  /* MHD thread: the request's URL had %00 */
} hconn_t;

struct df_http {
    df_server_t *srv;
    const df_config_t *cfg;
    struct MHD_Daemon *d[DF_HTTP_MAX_THREADS]; /* immutable after start */
    http_slot_t slot[DF_HTTP_MAX_THREADS];
    int nd;
    atomic_int conns;            /* all open connections: max_connections is enforced here */
    int lfd;                     /* listening socket, acceptor's; -1 once closed */
    pthread_t acceptor;
    int acceptor_started;
    atomic_int quiescing;
    df_ks_limits_t lim;
    pthread_mutex_t pool_mu;     /* request contexts for reuse */
    struct req *pool;
    int pool_n;
    size_t pool_bytes;           /* buffer bytes of the pooled contexts
                                  * (<= pool_keep_bytes), under pool_mu */
    atomic_int repo_ops;         /* load/unload threads running */
    _Atomic uint64_t in_bytes;   /* request bodies and their JSON reading,
                                  * counted before allocating
                                  * (max_input_buffered_bytes) */
    pthread_mutex_t conn_mu;     /* hconns, peers */
    hconn_t *hconns;
    df_peers_t peers;            /* connections per remote address */
    pthread_t reaper;            /* header/body timeouts */
    int reaper_started;
    atomic_int reaper_stop;
    atomic_long timeouts;        /* connections closed by the read timeouts */
    atomic_long auth_refused;    /* requests refused for want of a token (auth = all) */
    _Atomic int64_t auth_log_ns; /* last log line about them */
};

enum route {
    R_NOTFOUND, R_LIVE, R_READY, R_SERVER, R_MODELS, R_MODEL_META, R_MODEL_READY, R_INFER,
    R_POSE_GLB, R_MESH, R_REPO_INDEX, R_REPO_LOAD, R_REPO_UNLOAD, R_METRICS, R_VIEWER, R_ROOT
};

typedef struct req {
    df_http_t *h;
    struct MHD_Connection *conn;
    hconn_t *hc;               /* its connection's timeout state (or NULL) */
    enum route route;
    int is_post, is_get, is_options;
    char name[DF_NAME_MAX];
    char path[512];            /* static file path below www */
    int64_t version;           /* /versions/<v> in the URL, -1: none */
    int raw;                   /* Inference-Header-Content-Length: 0 (raw binary) */
    char *repo_config;         /* load: parameters.config (owned) */
    size_t repo_config_len;
    int glb;
    char *body;
    size_t len, cap;
    size_t header_len;         /* Inference-Header-Content-Length, 0: none */
    int too_big;
    int too_busy;              /* the body did not fit max_input_buffered_bytes */
    uint64_t in_charged;       /* counted in h->in_bytes: body capacity + reading */
    uint64_t in_body;          /*   of which the body buffer's */
    df_ks_request_t kreq;
    df_job_t *job;
    pthread_mutex_t mu;
    int suspended, finished;   /* guarded by mu */
    df_ks_buf_t out;           /* response body (JSON header, glb) */
    struct MHD_IoVec iov[1 + DF_MAX_IO];
    struct req *next;          /* pool link */
    int repo_pending;          /* a load/unload thread works for it */
    int repo_rc;               /* its result (under mu until finished) */
    df_error_t repo_err;
    char method[8];            /* for log_requests */
    char url[128];
    int64_t t0_ns;
} req_t;

int64_t df__now_ns(void);

static inline void hc_set(hconn_t *hc, int state)
{
    if (!hc) return;
    atomic_store(&hc->since_ns, df__now_ns());
    atomic_store(&hc->state, state);
}

#define REQ_POOL_MAX 512
#define REQ_KEEP_BYTES (4u << 20) /* larger buffers are not kept */
#define HTTP_COPY_MAX (256u << 10) /* binary outputs up to this are copied behind the JSON header: one send() */

/* Bytes of the buffers a context keeps between requests. */
static size_t req_bytes(const req_t *q)
{
    const df_kj_doc_t *d = &q->kreq.doc;
    return q->cap + q->kreq.arena_cap * sizeof(float) + q->out.cap + d->cap * sizeof *d->nodes +
           d->scap * sizeof *d->stack + d->str_cap + d->num_cap * (sizeof *d->num + 1);
}

/* A request context from the pool: its body, arena and output buffers are
 * kept between requests, so steady traffic allocates nothing here. */
static req_t *req_get(df_http_t *h)
{
    pthread_mutex_lock(&h->pool_mu);
    req_t *q = h->pool;
    if (q) {
        h->pool = q->next;
        h->pool_n--;
        h->pool_bytes -= req_bytes(q);
    }
    pthread_mutex_unlock(&h->pool_mu);
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) return NULL;
        pthread_mutex_init(&q->mu, NULL);
    }
    q->h = h;
    q->route = 0;
    q->is_post = q->is_get = q->is_options = 0;
    q->name[0] = q->path[0] = 0;
    q->glb = 0;
    q->version = -1;
    q->raw = 0;
    q->repo_config = NULL;
    q->repo_config_len = 0;
    q->len = 0;
    q->header_len = 0;
    q->too_big = q->too_busy = 0;
    q->in_charged = q->in_body = 0;
    q->job = NULL;
    q->repo_pending = 0;
    q->suspended = q->finished = 0;
    df_ks_buf_reset(&q->out);
    q->next = NULL;
    return q;
}

static void req_destroy(req_t *q)
{
    df_ks_request_free(&q->kreq);
    df_ks_buf_free(&q->out);
    free(q->body);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* Count n more bytes of q's input against max_input_buffered_bytes;
 * -1 (nothing counted) when they do not fit. */
static int in_charge(df_http_t *h, req_t *q, uint64_t n)
{
    uint64_t before = atomic_fetch_add(&h->in_bytes, n);
    if (before + n > h->cfg->max_input_buffered_bytes) {
        atomic_fetch_sub(&h->in_bytes, n);
        return -1;
    }
    q->in_charged += n;
    return 0;
}

static void in_release(df_http_t *h, req_t *q, uint64_t n)
{
    if (n > q->in_charged) n = q->in_charged;
    atomic_fetch_sub(&h->in_bytes, n);
    q->in_charged -= n;
}

static void busy_msg(df_http_t *h, char *msg, size_t cap, uint64_t need)
{
    snprintf(msg, cap,
             "server busy: %.1f MiB of request input held, this request needs %.1f MiB more "
             "(max_input_buffered_bytes %.1f MiB); retry later",
             (double)atomic_load(&h->in_bytes) / 1048576.0, (double)need / 1048576.0,
             (double)h->cfg->max_input_buffered_bytes / 1048576.0);
}

static void req_put(df_http_t *h, req_t *q)
{
    in_release(h, q, q->in_charged);
    free(q->repo_config);
    q->repo_config = NULL;
    if (q->job) df_job_free(&q->job);
    if (q->cap > REQ_KEEP_BYTES) {
        free(q->body);
        q->body = NULL;
        q->cap = 0;
    }
    if (q->kreq.arena_cap * sizeof(float) > REQ_KEEP_BYTES) df_ks_request_free(&q->kreq);
    if (q->out.cap > REQ_KEEP_BYTES) df_ks_buf_free(&q->out);
    /* the pool keeps at most pool_keep_bytes of buffers */
    size_t bytes = req_bytes(q);
    pthread_mutex_lock(&h->pool_mu);
    if (h->pool_bytes + bytes > h->cfg->pool_keep_bytes) {
        pthread_mutex_unlock(&h->pool_mu);
        free(q->body);
        q->body = NULL;
        q->cap = 0;
        df_ks_request_free(&q->kreq);
        df_ks_buf_free(&q->out);
        bytes = 0;
        pthread_mutex_lock(&h->pool_mu);
    }
    if (h->pool_n < REQ_POOL_MAX) {
        q->next = h->pool;
        h->pool = q;
        h->pool_n++;
        h->pool_bytes += bytes;
        q = NULL;
    }
    pthread_mutex_unlock(&h->pool_mu);
    if (q) req_destroy(q);
}

/* ------------------------------------------------------------ responses */

static void add_cors(df_http_t *h, struct MHD_Response *r)
{
    if (!h->cfg->cors_origin[0]) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", h->cfg->cors_origin);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            "Content-Type, Authorization, Inference-Header-Content-Length");
    MHD_add_response_header(r, "Access-Control-Expose-Headers",
                            "Inference-Header-Content-Length");
}

static enum MHD_Result queue(req_t *q, unsigned status, struct MHD_Response *r,
                             const char *ctype)
{
    if (q->h->cfg->log_requests)
        df__log("http %s %s -> %u (%.0f us)", q->method, q->url, status,
                (double)(df__now_ns() - q->t0_ns) / 1e3);
    if (!r) return MHD_NO;
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    add_cors(q->h, r);
    enum MHD_Result ret = MHD_queue_response(q->conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Send q->out (persistent until the request completes). */
static enum MHD_Result send_out(req_t *q, unsigned status, const char *ctype)
{
    if (q->out.oom) {
        df_ks_buf_reset(&q->out);
        df_ks_buf_printf(&q->out, "{\"error\":\"out of memory\"}");
        status = 500;
        ctype = "application/json";
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(q->out.len, q->out.data, MHD_RESPMEM_PERSISTENT);
    return queue(q, status, r, ctype);
}

static enum MHD_Result send_error(req_t *q, unsigned status, const char *msg)
{
    df_ks_buf_reset(&q->out);
    df_kserve_write_error(&q->out, msg);
    return send_out(q, status, "application/json");
}

static enum MHD_Result send_405(req_t *q, const char *allow, const char *msg)
{
    df_ks_buf_reset(&q->out);
    df_kserve_write_error(&q->out, msg);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(q->out.len, q->out.data, MHD_RESPMEM_PERSISTENT);
    if (r) MHD_add_response_header(r, "Allow", allow);
    return queue(q, 405, r, "application/json");
}

static enum MHD_Result send_df_error(req_t *q, const df_error_t *e)
{
    return send_error(q, (unsigned)df_http_status_for(e->code ? e->code : DF_EINTERNAL),
                      e->msg[0] ? e->msg : df_strerror(e->code));
}

/* ------------------------------------------------------------- routing */

static int seg_ok(const char *s, size_t n)
{
    if (n == 0 || n >= DF_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] < 0x21) return 0;
    return 1;
}

static void route(req_t *q, const char *url)
{
    q->route = R_NOTFOUND;
    if (!strcmp(url, "/v2/health/live")) { q->route = R_LIVE; return; }
    if (!strcmp(url, "/v2/health/ready")) { q->route = R_READY; return; }
    if (!strcmp(url, "/v2") || !strcmp(url, "/v2/")) { q->route = R_SERVER; return; }
    if (!strcmp(url, "/v2/models") || !strcmp(url, "/v2/models/")) { q->route = R_MODELS; return; }
    if (!strcmp(url, "/metrics")) { q->route = R_METRICS; return; }
    if (!strcmp(url, "/")) { q->route = R_ROOT; return; }
    if (!strcmp(url, "/v2/repository/index")) { q->route = R_REPO_INDEX; return; }
    if (!strncmp(url, "/viewer", 7) && (url[7] == 0 || url[7] == '/')) {
        const char *p = url[7] ? url + 8 : "";
        if (!*p) p = "index.html";
        if (strlen(p) >= sizeof q->path || strstr(p, "..") || strstr(p, "//") || p[0] == '/')
            return;
        snprintf(q->path, sizeof q->path, "%s", p);
        q->route = R_VIEWER;
        return;
    }
    const char *rp = "/v2/repository/models/";
    if (!strncmp(url, rp, strlen(rp))) {
        const char *n = url + strlen(rp), *sl = strchr(n, '/');
        if (!sl || !seg_ok(n, (size_t)(sl - n))) return;
        memcpy(q->name, n, (size_t)(sl - n));
        q->name[sl - n] = 0;
        if (!strcmp(sl, "/load")) q->route = R_REPO_LOAD;
        else if (!strcmp(sl, "/unload")) q->route = R_REPO_UNLOAD;
        return;
    }
    const char *mp = "/v2/models/";
    if (strncmp(url, mp, strlen(mp))) return;
    const char *n = url + strlen(mp), *sl = strchr(n, '/');
    size_t nl = sl ? (size_t)(sl - n) : strlen(n);
    if (!seg_ok(n, nl)) return;
    memcpy(q->name, n, nl);
    q->name[nl] = 0;
    const char *rest = sl ? sl : "";
    /* /versions/<v>: a decimal version; the handlers answer 404 unless it
     * is the loaded one (an empty or other segment: no such endpoint) */
    if (!strncmp(rest, "/versions/", 10)) {
        const char *v = rest + 10, *s2 = strchr(v, '/');
        size_t vl = s2 ? (size_t)(s2 - v) : strlen(v);
        if (vl == 0 || vl > 18) return;
        int64_t ver = 0;
        for (size_t k = 0; k < vl; k++) {
            if (v[k] < '0' || v[k] > '9') return;
            ver = ver * 10 + (v[k] - '0');
        }
        q->version = ver;
        rest = s2 ? s2 : "";
    }
    if (!*rest || !strcmp(rest, "/")) q->route = R_MODEL_META;
    else if (!strcmp(rest, "/ready")) q->route = R_MODEL_READY;
    else if (!strcmp(rest, "/infer")) q->route = R_INFER;
    else if (!strcmp(rest, "/pose.glb")) { q->route = R_POSE_GLB; q->glb = 1; }
    else if (!strcmp(rest, "/mesh")) q->route = R_MESH;
    else if (!strcmp(rest, "/mesh.glb")) { q->route = R_MESH; q->glb = 1; }
}

/* ------------------------------------------------------------ handlers */

static void json_names(df_ks_buf_t *b, const df_model_t *m, const char *list)
{
    const char *const *names = NULL;
    size_t n = df_model_names(m, list, &names);
    df_ks_buf_append(b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i) df_ks_buf_append(b, ",", 1);
        df_ks_buf_json_string(b, names[i]);
    }
    df_ks_buf_append(b, "]", 1);
}

/* Inputs of at most this many values carry their default in the metadata
 * ("deformd": {"defaults": {"<input>": [...]}}, flat, row-major) so that
 * clients can start from it, e.g. the viewer's joint sliders compose with the
 * rest local joint rotations. Larger inputs (none today) would bloat every
 * metadata read. */
#define META_DEFAULT_MAX 4096

/* A tensor's metadata. KServe's $parameters hold scalars only, so an input's
 * parameters are {"optional": bool}; lists and objects go to the "deformd"
 * extension object of the model's metadata (h_model_meta). */
static void json_io(df_ks_buf_t *b, const df_io_desc_t *d, int is_input)
{
    df_ks_buf_append(b, "{\"name\":", 8);
    df_ks_buf_json_string(b, d->name);
    df_ks_buf_printf(b, ",\"datatype\":\"FP32\",\"shape\":[-1");
    for (int k = 0; k < d->ndim; k++) df_ks_buf_printf(b, ",%lld", (long long)d->shape[k]);
    df_ks_buf_printf(b, "]");
    if (is_input) df_ks_buf_printf(b, ",\"parameters\":{\"optional\":%s}", d->optional ? "true" : "false");
    df_ks_buf_append(b, "}", 1);
}

/* "<name>": [v, ...] when the default has at most META_DEFAULT_MAX finite values */
static int json_default(df_ks_buf_t *b, int first, const df_io_desc_t *d, const float *def)
{
    int64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
    int finite = def && n > 0 && n <= META_DEFAULT_MAX;
    for (int64_t k = 0; finite && k < n; k++) finite = isfinite(def[k]);
    if (!finite) return first;
    if (!first) df_ks_buf_append(b, ",", 1);
    df_ks_buf_json_string(b, d->name);
    df_ks_buf_append(b, ":[", 2);
    for (int64_t k = 0; k < n; k++) df_ks_buf_printf(b, k ? ",%.9g" : "%.9g", (double)def[k]);
    df_ks_buf_append(b, "]", 1);
    return 0;
}

/* GET /v2/models/{name}: KServe model metadata. "parameters" holds scalars
 * only (KServe's $parameters); the lists a client needs to drive a character
 * (characters, names of joints, morphs, controls and shapes, clips, the rest
 * bounding box, each input's default) are in the "deformd" extension object. */
static enum MHD_Result h_model_meta(req_t *q)
{
    df_char_info_t ci;
    df_error_t e = {0};
    if (df_server_character(q->h->srv, q->name, &ci, &e)) return send_df_error(q, &e);
    const df_model_t *m = ci.model;
    df_ks_buf_t *b = &q->out;
    df_ks_buf_reset(b);
    df_ks_buf_append(b, "{\"name\":", 8);
    df_ks_buf_json_string(b, ci.name);
    df_ks_buf_printf(b, ",\"versions\":[\"%lld\"],\"platform\":\"deformd\",\"inputs\":[",
                     (long long)ci.version);
    for (int i = 0; i < df_model_n_inputs(m); i++) {
        if (i) df_ks_buf_append(b, ",", 1);
        json_io(b, df_model_input(m, i), 1);
    }
    df_ks_buf_append(b, "],\"outputs\":[", 13);
    for (int o = 0; o < df_model_n_outputs(m); o++) {
        if (o) df_ks_buf_append(b, ",", 1);
        json_io(b, df_model_output(m, o), 0);
    }
    df_ks_buf_append(b, "],\"parameters\":{\"model\":", 24);
    df_ks_buf_json_string(b, ci.model_name);
    df_ks_buf_append(b, ",\"kind\":", 8);
    df_ks_buf_json_string(b, df_model_kind(m));
    df_ks_buf_printf(b, ",\"vertices\":%lld,\"triangles\":%lld,\"encoding\":\"%s\",\"skinning\":\"%s\","
                        "\"max_batch_size\":%d}",
                     (long long)df_model_n_vertices(m), (long long)df_model_n_triangles(m),
                     df_encoding_name(ci.encoding),
                     ci.flags & DF_POSE_DQS ? "dqs" : ci.flags & DF_POSE_LBS ? "lbs" : "default",
                     ci.max_batch_size);
    df_ks_buf_append(b, ",\"deformd\":{\"characters\":[", 26);
    for (int c = 0; c < ci.n_characters && c < 8; c++) {
        if (c) df_ks_buf_append(b, ",", 1);
        df_ks_buf_json_string(b, ci.characters[c]);
    }
    df_ks_buf_append(b, "]", 1);
    static const char *const lists[] = {"joints", "morphs", "controls", "shapes"};
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
        df_ks_buf_printf(b, ",\"%s\":", lists[l]);
        json_names(b, m, lists[l]);
    }
    df_ks_buf_append(b, ",\"clips\":[", 10);
    size_t nc = df_model_clip_count(m);
    for (size_t c = 0, first = 1; c < nc; c++) {
        df_clip_info_t inf;
        if (df_model_clip_info(m, c, &inf)) continue;
        if (!first) df_ks_buf_append(b, ",", 1);
        first = 0;
        df_ks_buf_append(b, "{\"name\":", 8);
        df_ks_buf_json_string(b, inf.name ? inf.name : "");
        double dur = inf.n_keys > 0 ? (double)(inf.times[inf.n_keys - 1] - inf.times[0]) : 0;
        df_ks_buf_printf(b, ",\"keys\":%lld,\"duration\":%.9g}", (long long)inf.n_keys, dur);
    }
    float lo[3], hi[3];
    df_model_bbox(m, lo, hi);
    df_ks_buf_printf(b, "],\"bbox\":{\"min\":[%.9g,%.9g,%.9g],\"max\":[%.9g,%.9g,%.9g]},\"defaults\":{",
                     lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]);
    float *cdef = malloc(META_DEFAULT_MAX * sizeof *cdef); /* metadata only, not a hot path */
    for (int i = 0, first = 1; i < df_model_n_inputs(m); i++) {
        const df_io_desc_t *d = df_model_input(m, i);
        const float *def = df_model_input_default(m, i);
        int64_t n = 1;
        for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
        /* a character's own default (its config) overrides the model's */
        if (cdef && n <= META_DEFAULT_MAX &&
            df_server_character_default(q->h->srv, ci.name, m, i, cdef, (size_t)n) == 1)
            def = cdef;
        first = json_default(b, first, d, def);
    }
    free(cdef);
    df_ks_buf_append(b, "}}}", 3);
    df_char_info_release(&ci);
    return send_out(q, 200, "application/json");
}

static enum MHD_Result h_mesh(req_t *q)
{
    df_char_info_t ci;
    df_error_t e = {0};
    if (df_server_character(q->h->srv, q->name, &ci, &e)) return send_df_error(q, &e);
    const df_model_t *m = ci.model;
    int64_t nv = df_model_n_vertices(m), nt = df_model_n_triangles(m);
    const float *pos = df_model_rest_positions(m);
    df_ks_buf_reset(&q->out);
    enum MHD_Result r;
    if (q->glb) {
        if (df_glb_write(&q->out, 1, &pos, NULL, nv, df_model_triangles(m), nt, ci.name, &e)) {
            df_char_info_release(&ci);
            return send_df_error(q, &e);
        }
        r = send_out(q, 200, "model/gltf-binary");
    } else {
        df_ks_buf_t *b = &q->out;
        df_ks_buf_append(b, "{\"name\":", 8);
        df_ks_buf_json_string(b, ci.name);
        df_ks_buf_printf(b, ",\"vertices\":%lld,\"triangles\":%lld,\"positions\":[", (long long)nv,
                         (long long)nt);
        df_ks_buf_floats(b, pos, (size_t)nv * 3);
        df_ks_buf_append(b, "],\"indices\":[", 13);
        const uint32_t *t = df_model_triangles(m);
        for (int64_t i = 0; i < nt * 3; i++) df_ks_buf_printf(b, i ? ",%u" : "%u", t[i]);
        df_ks_buf_append(b, "]}", 2);
        r = send_out(q, 200, "application/json");
    }
    df_char_info_release(&ci);
    return r;
}

static enum MHD_Result h_models(req_t *q)
{
    static char names[1024][DF_NAME_MAX];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    size_t n = df_server_names(q->h->srv, names, 1024);
    df_ks_buf_reset(&q->out);
    df_ks_buf_append(&q->out, "{\"models\":[", 11);
    for (size_t i = 0; i < n && i < 1024; i++) {
        if (i) df_ks_buf_append(&q->out, ",", 1);
        df_ks_buf_json_string(&q->out, names[i]);
    }
    pthread_mutex_unlock(&mu);
    df_ks_buf_append(&q->out, "]}", 2);
    return send_out(q, 200, "application/json");
}

static int small_json(req_t *q, json_t **root, df_error_t *e);

static enum MHD_Result h_index(req_t *q)
{
    /* POST {"ready": true}: only the models ready to serve (KServe) */
    int only_ready = 0;
    if (q->is_post && q->len) {
        json_t *root;
        df_error_t e = {0};
        if (small_json(q, &root, &e)) return send_df_error(q, &e);
        json_t *rd = root ? json_object_get(root, "ready") : NULL;
        int bad = rd && !json_is_boolean(rd);
        only_ready = rd && json_is_true(rd);
        json_decref(root);
        if (bad) return send_error(q, 400, "\"ready\" must be true or false");
    }
    size_t n = df_server_index(q->h->srv, NULL, 0);
    df_index_entry_t *ix = calloc(n ? n : 1, sizeof *ix);
    if (!ix) return send_error(q, 500, "out of memory");
    n = df_server_index(q->h->srv, ix, n);
    df_ks_buf_t *b = &q->out;
    df_ks_buf_reset(b);
    df_ks_buf_append(b, "[", 1);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (only_ready && !ix[i].ready) continue;
        df_ks_buf_append(b, first ? "{\"name\":" : ",{\"name\":", first ? 8 : 9);
        first = 0;
        df_ks_buf_json_string(b, ix[i].name);
        if (ix[i].version >= 0) df_ks_buf_printf(b, ",\"version\":\"%lld\"", (long long)ix[i].version);
        df_ks_buf_printf(b, ",\"state\":\"%s\",\"reason\":", ix[i].ready ? "READY" : "UNAVAILABLE");
        df_ks_buf_json_string(b, ix[i].reason);
        df_ks_buf_append(b, ",\"characters\":[", 15);
        for (int c = 0; c < ix[i].n_characters && c < 8; c++) {
            if (c) df_ks_buf_append(b, ",", 1);
            df_ks_buf_json_string(b, ix[i].characters[c]);
        }
        df_ks_buf_append(b, "]}", 2);
    }
    df_ks_buf_append(b, "]", 1);
    free(ix);
    return send_out(q, 200, "application/json");
}

/* ---------------------------------------------------------------- auth */

/* The bearer token of the Authorization header, checked against every
 * configured token in constant time (config.c). */
static int bearer_ok(df_http_t *h, struct MHD_Connection *c)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7)) return 0;
    a += 7;
    while (*a == ' ') a++;
    return df_config_token_match(h->cfg, a, strlen(a));
}

/* auth = all and the browser viewer: /viewer/?token=T (checked) sets the
 * cookie deformd_token (HttpOnly, SameSite=Strict) and redirects to the
 * same page without the token, so a browser's same-origin requests carry
 * it from then on. The cookie holds the token percent-encoded (a token may
 * hold characters a cookie value may not). */
#define AUTH_COOKIE "deformd_token"

static int hexval(char c);

static int cookie_ok(df_http_t *h, struct MHD_Connection *c)
{
    const char *v = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, AUTH_COOKIE);
    if (!v) return 0;
    char tok[DF_TOKEN_MAX];
    size_t n = 0;
    int bad = 0;
    for (const char *p = v; *p && !bad; p++) {
        int ch = (unsigned char)*p;
        if (ch == '%') {
            int hi = hexval(p[1]), lo = hi >= 0 ? hexval(p[2]) : -1;
            if (lo < 0) { bad = 1; break; }
            ch = hi * 16 + lo;
            p += 2;
        }
        if (n + 1 >= sizeof tok) bad = 1;
        else tok[n++] = (char)ch;
    }
    int ok = !bad && df_config_token_match(h->cfg, tok, n);
    memset(tok, 0, sizeof tok);
    return ok;
}

/* s percent-encoded (unreserved characters kept, and '/' when keep_slash) */
static void pct_append_x(df_ks_buf_t *b, const char *s, int keep_slash)
{
    static const char hx[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~' || (keep_slash && ch == '/')) {
            df_ks_buf_append(b, s, 1);
        } else {
            char e[3] = {'%', hx[ch >> 4], hx[ch & 15]};
            df_ks_buf_append(b, e, 3);
        }
    }
}

static void pct_append(df_ks_buf_t *b, const char *s) { pct_append_x(b, s, 0); }

/* the viewer's own query arguments (character, up, ...) survive the
 * redirect; the token does not */
static enum MHD_Result keep_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    df_ks_buf_t *b = cls;
    (void)kind;
    if (!key || !strcmp(key, "token")) return MHD_YES;
    df_ks_buf_append(b, b->len && memchr(b->data, '?', b->len) ? "&" : "?", 1);
    pct_append(b, key);
    if (value) {
        df_ks_buf_append(b, "=", 1);
        pct_append(b, value);
    }
    return MHD_YES;
}

/* A refusal for want of a token: counted, logged at most once a second
 * (never the token). */
static void auth_count(df_http_t *h)
{
    atomic_fetch_add(&h->auth_refused, 1);
    int64_t now = df__now_ns(), last = atomic_load(&h->auth_log_ns);
    if (now - last > 1000000000 && atomic_compare_exchange_strong(&h->auth_log_ns, &last, now))
        df__log("http: refused a request without a valid token (auth = all; %ld so far)",
                atomic_load(&h->auth_refused));
}

static const char login_page[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>deformd: token required</title>"
    "</head><body style=\"font-family:sans-serif;max-width:34em;margin:4em auto\">"
    "<h1>deformd</h1><p>%s</p>"
    "<form method=\"get\" action=\"/viewer/\"><label>Token <input name=\"token\" "
    "type=\"password\" autofocus></label> <button>Open the viewer</button></form>"
    "<p>Or open <code>/viewer/?token=YOUR_TOKEN</code> once: this browser keeps the token in "
    "a cookie for this daemon.</p></body></html>";

/* 401 for a request without a valid token: the login page for the viewer,
 * a JSON error for the API; both say WWW-Authenticate: Bearer. */
static enum MHD_Result send_401(req_t *q, int viewer, const char *why)
{
    auth_count(q->h);
    df_ks_buf_reset(&q->out);
    if (viewer) df_ks_buf_printf(&q->out, login_page, why);
    else df_kserve_write_error(&q->out, why);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(q->out.len, q->out.data, MHD_RESPMEM_PERSISTENT);
    if (r) MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"deformd\"");
    return queue(q, 401, r, viewer ? "text/html; charset=utf-8" : "application/json");
}

/* /viewer/...?token=T or /?token=T: a right token becomes the cookie and
 * the browser is sent to the same page without it. */
static enum MHD_Result viewer_login(req_t *q, const char *url, const char *token)
{
    df_http_t *h = q->h;
    if (!df_config_token_match(h->cfg, token, strlen(token)))
        return send_401(q, 1, "That token is not accepted by this daemon.");
    df_ks_buf_t loc = {0}, cookie = {0};
    pct_append_x(&loc, q->route == R_ROOT ? "/viewer/" : url, 1); /* no CR/LF can pass */
    MHD_get_connection_values(q->conn, MHD_GET_ARGUMENT_KIND, keep_arg, &loc);
    df_ks_buf_append(&loc, "", 1); /* NUL */
    df_ks_buf_printf(&cookie, "%s=", AUTH_COOKIE);
    pct_append(&cookie, token);
    const char *proto = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Forwarded-Proto");
    df_ks_buf_printf(&cookie, "; Path=/; HttpOnly; SameSite=Strict%s",
                     proto && !strcasecmp(proto, "https") ? "; Secure" : "");
    df_ks_buf_append(&cookie, "", 1);
    enum MHD_Result ret;
    if (loc.oom || cookie.oom) {
        ret = send_error(q, 500, "out of memory");
    } else {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (r) {
            MHD_add_response_header(r, "Location", loc.data);
            MHD_add_response_header(r, "Set-Cookie", cookie.data);
            MHD_add_response_header(r, "Cache-Control", "no-store");
        }
        ret = queue(q, 302, r, NULL);
    }
    if (cookie.data) memset(cookie.data, 0, cookie.cap);
    df_ks_buf_free(&loc);
    df_ks_buf_free(&cookie);
    return ret;
}

/* The asynchronous answer's hand-over (a worker or load thread finishes,
 * the HTTP thread suspends): q->mu closes the race between the two. */
static void finish_and_resume(req_t *q)
{
    pthread_mutex_lock(&q->mu);
    q->finished = 1;
    if (q->suspended) {
        q->suspended = 0;
        MHD_resume_connection(q->conn);
    }
    pthread_mutex_unlock(&q->mu);
}

/* HTTP thread: suspend the connection unless the answer is already
 * there; returns 1 when it is (answer now). */
static int suspend_unless_finished(req_t *q)
{
    pthread_mutex_lock(&q->mu);
    int fin = q->finished;
    if (!fin) {
        q->suspended = 1;
        MHD_suspend_connection(q->conn);
    }
    pthread_mutex_unlock(&q->mu);
    return fin;
}

static enum MHD_Result repo_answer(req_t *q)
{
    q->repo_pending = 0;
    if (q->repo_rc) return send_df_error(q, &q->repo_err);
    df_ks_buf_reset(&q->out);
    df_ks_buf_printf(&q->out, "{\"name\":");
    df_ks_buf_json_string(&q->out, q->name);
    df_ks_buf_printf(&q->out, ",\"%s\":true}", q->route == R_REPO_LOAD ? "loaded" : "unloaded");
    return send_out(q, 200, "application/json");
}

static void *repo_thread(void *arg)
{
    req_t *q = arg;
    df_http_t *h = q->h;
    df_error_t e = {0};
    int rc = q->route == R_REPO_LOAD
                 ? df_server_load_config(h->srv, q->name, q->repo_config, q->repo_config_len, &e)
                 : df_server_unload(h->srv, q->name, &e);
    q->repo_rc = rc; /* read by the HTTP thread only after finished (q->mu) */
    q->repo_err = e;
    finish_and_resume(q);
    atomic_fetch_sub(&h->repo_ops, 1);
    return NULL;
}

/* A repository request's body (at most 1 MiB of JSON; empty is fine):
 * sets *root (new: json_decref) or an error. */
static int small_json(req_t *q, json_t **root, df_error_t *e)
{
    *root = NULL;
    if (!q->len) return 0;
    if (q->len > (1u << 20))
        return df_error_set(e, DF_ELIMIT, "repository request body of %zu bytes (max 1 MiB)", q->len);
    json_error_t je;
    *root = json_loadb(q->body, q->len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return df_error_set(e, DF_EINVAL, "invalid JSON at line %d column %d: %s", je.line,
                            je.column, je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return df_error_set(e, DF_EINVAL, "the request body must be a JSON object");
    }
    return 0;
}

/* load: {"parameters": {"config": "<model config JSON>"}} (KServe/Triton;
 * the config may also be given as an object); unload:
 * {"parameters": {"unload_dependents": bool}} (accepted: a model has no
 * dependents here). Anything else is refused rather than ignored. */
static int repo_body(req_t *q, df_error_t *e)
{
    json_t *root;
    int rc = small_json(q, &root, e);
    if (rc || !root) return rc;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "parameters")) {
            rc = df_error_set(e, DF_EINVAL, "unknown key '%.64s' (a %s request takes {\"parameters\": {...}})",
                              k, q->route == R_REPO_LOAD ? "load" : "unload");
            break;
        }
        if (!json_is_object(v)) {
            rc = df_error_set(e, DF_EINVAL, "\"parameters\" must be an object");
            break;
        }
        const char *pk;
        json_t *pv;
        json_object_foreach(v, pk, pv) {
            if (q->route == R_REPO_LOAD && !strcmp(pk, "config")) {
                char *text = json_is_string(pv) ? strdup(json_string_value(pv))
                             : json_is_object(pv) ? json_dumps(pv, JSON_COMPACT) : NULL;
                if (!text) {
                    rc = df_error_set(e, DF_EINVAL,
                                      "parameters.config must be the model configuration as a JSON "
                                      "string (or object)");
                    break;
                }
                free(q->repo_config);
                q->repo_config = text;
                q->repo_config_len = strlen(text);
            } else if (q->route == R_REPO_UNLOAD && !strcmp(pk, "unload_dependents") &&
                       json_is_boolean(pv)) {
                /* nothing depends on a model here */
            } else {
                rc = df_error_set(e, DF_EINVAL, "unsupported %s parameter '%.64s'%s",
                                  q->route == R_REPO_LOAD ? "load" : "unload", pk,
                                  q->route == R_REPO_LOAD ? " (supported: config)"
                                                          : " (supported: unload_dependents)");
                break;
            }
        }
        if (rc) break;
    }
    json_decref(root);
    return rc;
}

static enum MHD_Result h_repo(req_t *q)
{
    df_http_t *h = q->h;
    if (!h->cfg->n_tokens)
        return send_error(q, 403, "repository API disabled: no token configured (set token_file)");
    if (!bearer_ok(h, q->conn)) {
        df__log("repository API: rejected request without a valid bearer token");
        df_ks_buf_reset(&q->out);
        df_kserve_write_error(&q->out, "missing or wrong bearer token (Authorization: Bearer ...)");
        struct MHD_Response *r =
            MHD_create_response_from_buffer(q->out.len, q->out.data, MHD_RESPMEM_PERSISTENT);
        if (r) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
        return queue(q, 401, r, "application/json");
    }
    df_error_t be = {0};
    if (repo_body(q, &be)) return send_df_error(q, &be);
    /* a load can take seconds: run it on its own thread with the
     * connection suspended, so the HTTP thread keeps serving */
    q->repo_pending = 1;
    atomic_fetch_add(&h->repo_ops, 1);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int terr = pthread_create(&th, &at, repo_thread, q);
    pthread_attr_destroy(&at);
    if (terr) {
        atomic_fetch_sub(&h->repo_ops, 1);
        q->repo_pending = 0;
        return send_error(q, 500, "cannot start the load thread");
    }
    if (suspend_unless_finished(q)) return repo_answer(q);
    return MHD_YES;
}

static const char *mime(const char *p)
{
    const char *e = strrchr(p, '.');
    if (!e) return "application/octet-stream";
    if (!strcmp(e, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(e, ".js") || !strcmp(e, ".mjs")) return "text/javascript";
    if (!strcmp(e, ".css")) return "text/css";
    if (!strcmp(e, ".json")) return "application/json";
    if (!strcmp(e, ".png")) return "image/png";
    if (!strcmp(e, ".svg")) return "image/svg+xml";
    if (!strcmp(e, ".glb")) return "model/gltf-binary";
    if (!strcmp(e, ".wasm")) return "application/wasm";
    return "application/octet-stream";
}

static enum MHD_Result h_static(req_t *q)
{
    if (!q->h->cfg->www_dir[0])
        return send_error(q, 404, "no viewer: deformd found no web root (its start-up log says "
                                  "where it looked; --www DIR sets one)");
    char full[DF_PATH_MAX + 600];
    snprintf(full, sizeof full, "%s/%s", q->h->cfg->www_dir, q->path);
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return send_error(q, 404, "no such file under /viewer/");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (!r) {
        close(fd);
        return send_error(q, 500, "cannot serve file");
    }
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return queue(q, 200, r, mime(q->path));
}

/* ------------------------------------------------------------- inference */

static enum MHD_Result finish_infer(req_t *q);

static void job_done(df_job_t *job, void *user)
{
    finish_and_resume(user);
}

/* Submit a prepared job of q; a job evaluated inline (on this thread) is
 * answered at once, else the connection waits for job_done. */
static enum MHD_Result submit_job(req_t *q, df_job_t *job)
{
    df_error_t e = {0};
    job->done = job_done;
    job->user = q;
    job->allow_inline = 1;
    if (df_server_submit(q->h->srv, job, &e)) return send_df_error(q, &e);
    if (job->ran_inline) {
        job->done = NULL;
        return finish_infer(q);
    }
    suspend_unless_finished(q);
    return MHD_YES;
}

/* A raw binary request (Inference-Header-Content-Length: 0, binary data
 * extension): the whole body is little-endian float32 data of the model's
 * only input, [B, per-pose shape...] with B = body / one pose's bytes;
 * every output comes back as JSON, as for a request that names none. A
 * model with several inputs cannot take one (which input would it be?). */
static enum MHD_Result start_raw(req_t *q)
{
    df_http_t *h = q->h;
    df_char_info_t ci;
    df_error_t e = {0};
    if (df_server_character(h->srv, q->name, &ci, &e)) return send_df_error(q, &e);
    const df_model_t *m = ci.model;
    int ni = df_model_n_inputs(m);
    char msg[512];
    if (ni != 1) {
        size_t n = (size_t)snprintf(msg, sizeof msg,
                                    "a raw binary request (Inference-Header-Content-Length: 0) is "
                                    "for a model with exactly one input; '%s' has %d (",
                                    q->name, ni);
        for (int i = 0; i < ni && n < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s", i ? ", " : "", df_model_input(m, i)->name);
        if (n < sizeof msg) snprintf(msg + n, sizeof msg - n, "): send a JSON header naming them");
        df_char_info_release(&ci);
        return send_error(q, 400, msg);
    }
    const df_io_desc_t *d = df_model_input(m, 0);
    int64_t numel = 1;
    for (int k = 0; k < d->ndim; k++) numel *= d->shape[k];
    size_t per = (size_t)numel * sizeof(float);
    if (!q->len || per == 0 || q->len % per) {
        snprintf(msg, sizeof msg,
                 "a raw binary body of %zu bytes is not a whole number of poses of input '%s' "
                 "(%zu bytes of float32 each)",
                 q->len, d->name, per);
        df_char_info_release(&ci);
        return send_error(q, 400, msg);
    }
    df_job_t *job = df_job_new(h->srv);
    if (!job) {
        df_char_info_release(&ci);
        return send_error(q, 500, "out of memory");
    }
    q->job = job;
    df__strcpy_n(job->character, sizeof job->character, q->name);
    job->n_inputs = 1;
    df_job_input_t *in = &job->inputs[0];
    df__strcpy_n(in->name, sizeof in->name, d->name);
    in->ndim = d->ndim + 1;
    in->shape[0] = (int64_t)(q->len / per);
    for (int k = 0; k < d->ndim; k++) in->shape[k + 1] = d->shape[k];
    in->data = (const float *)q->body; /* malloc'd: aligned */
    df_char_info_release(&ci);
    /* the response as for a JSON request naming no outputs */
    q->kreq.n_outputs = 0;
    q->kreq.binary_output = 0;
    if (q->kreq.id_cap) q->kreq.id[0] = 0;
    else q->kreq.id = (char *)"";
    job->n_outputs = 0;
    job->text_value_bytes = q->glb ? 4 : DF_KS_TEXT_VALUE_BYTES;
    job->as_text_all = 1;
    return submit_job(q, job);
}

static enum MHD_Result start_infer(req_t *q)
{
    df_http_t *h = q->h;
    df_error_t e = {0};
    if (q->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body larger than %llu bytes (max_body_bytes)",
                 (unsigned long long)h->cfg->max_body_bytes);
        return send_error(q, 413, msg);
    }
    if (q->too_busy) {
        char msg[256];
        busy_msg(h, msg, sizeof msg, q->len);
        return send_error(q, 429, msg);
    }
    if (q->raw) return start_raw(q);
    size_t json_len = q->header_len ? q->header_len : q->len;
    /* the most reading the JSON may take (kserve.h), counted before */
    uint64_t reading = (uint64_t)DF_KS_PARSE_FACTOR * json_len + (64u << 10);
    if (in_charge(h, q, reading)) {
        char msg[256];
        busy_msg(h, msg, sizeof msg, reading);
        return send_error(q, 429, msg);
    }
    int prc = df_kserve_parse_request(&q->kreq, q->body ? q->body : "", q->len, json_len, &h->lim, &e);
    in_release(h, q, reading - (q->kreq.read_bytes < reading ? q->kreq.read_bytes : reading));
    if (prc) return send_df_error(q, &e);
    df_job_t *job = df_job_new(h->srv);
    if (!job) return send_error(q, 500, "out of memory");
    q->job = job;
    df_ks_request_t *k = &q->kreq;
    df__strcpy_n(job->character, sizeof job->character, q->name);
    job->n_inputs = k->n_inputs;
    for (int i = 0; i < k->n_inputs; i++) {
        df_job_input_t *in = &job->inputs[i];
        memcpy(in->name, k->inputs[i].name, DF_NAME_MAX);
        in->ndim = k->inputs[i].ndim;
        memcpy(in->shape, k->inputs[i].shape, sizeof in->shape);
        in->data = k->inputs[i].data;
    }
    /* encodings: an output's own parameters.encoding, else the request's
     * (also for every output when "outputs" is omitted: the engine fills
     * those in), else the character's */
    job->encoding = k->encoding;
    job->n_outputs = k->n_outputs;
    for (int o = 0; o < k->n_outputs; o++) {
        df_job_output_t *out = &job->outputs[o];
        memcpy(out->name, k->outputs[o].name, DF_NAME_MAX);
        out->encoding = k->outputs[o].encoding;
        out->front_flags = k->outputs[o].binary >= 0 ? k->outputs[o].binary : k->binary_output;
        out->as_text = q->glb || !out->front_flags;
    }
    /* what the answer will hold besides the job's buffers: JSON numbers,
     * or a .glb copy of the positions (and normals) */
    job->text_value_bytes = q->glb ? 4 : DF_KS_TEXT_VALUE_BYTES;
    job->as_text_all = q->glb || !k->binary_output;
    job->batch = k->batch_size;
    job->flags = k->flags;
    job->timeout_us = k->timeout_us;
    if (k->seq) {
        job->seq = 1;
        job->seq_id = k->seq_id;
        memcpy(job->seq_id_str, k->seq_id_str, DF_NAME_MAX);
        job->seq_start = k->seq_start;
        job->seq_end = k->seq_end;
    }
    if (k->clip[0]) {
        memcpy(job->clip, k->clip, DF_NAME_MAX);
        job->clip_time = k->clip_time;
        job->clip_dt = k->clip_dt;
    }
    return submit_job(q, job);
}

/* Append s / a decimal integer at p (caller sized the buffer); return the
 * new end. No terminator. */
static char *put_s(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

/* s as the inside of a JSON string (at most 6 bytes per byte of s) */
static char *put_json_s(char *p, const char *s)
{
    static const char hx[] = "0123456789abcdef";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            p = put_s(p, "\\u00");
            *p++ = hx[c >> 4];
            *p++ = hx[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    return p;
}

static enum MHD_Result finish_infer(req_t *q)
{
    df_job_t *job = q->job;
    if (job->status) return send_df_error(q, &job->err);
    if (job->n_outputs == 0 || q->kreq.n_outputs == 0)
        for (int o = 0; o < job->n_outputs; o++) job->outputs[o].front_flags = q->kreq.binary_output;
    df_ks_buf_reset(&q->out);
    if (q->glb) {
        /* posed mesh: positions (and normals when computed) of each pose */
        const df_job_output_t *pos = NULL, *nrm = NULL;
        for (int o = 0; o < job->n_outputs; o++) {
            if (!strcmp(job->outputs[o].name, "positions")) pos = &job->outputs[o];
            if (!strcmp(job->outputs[o].name, "normals")) nrm = &job->outputs[o];
        }
        if (!pos) return send_error(q, 400, "a .glb needs the 'positions' output");
        df_char_info_t ci;
        df_error_t e = {0};
        if (df_server_character(q->h->srv, q->name, &ci, &e)) return send_df_error(q, &e);
        int B = job->batch;
        if (B > 64) B = 64;
        const float *pp[64], *nn[64];
        int64_t nv = pos->shape[1];
        for (int b = 0; b < B; b++) {
            pp[b] = pos->f32 + (int64_t)b * nv * 3;
            nn[b] = nrm ? nrm->f32 + (int64_t)b * nv * 3 : NULL;
        }
        int rc = nv == df_model_n_vertices(ci.model)
                     ? df_glb_write(&q->out, B, pp, nrm ? nn : NULL, nv, df_model_triangles(ci.model),
                                    df_model_n_triangles(ci.model), q->name, &e)
                     : df_error_set(&e, DF_EINTERNAL, "positions do not match the mesh");
        df_char_info_release(&ci);
        if (rc) return send_df_error(q, &e);
        return send_out(q, 200, "model/gltf-binary");
    }
    df_ks_output_t outs[DF_MAX_IO];
    int any_binary = 0;
    for (int o = 0; o < job->n_outputs; o++) {
        const df_job_output_t *jo = &job->outputs[o];
        outs[o] = (df_ks_output_t){jo->name, jo->encoding, jo->ndim, jo->shape, jo->f32,
                                   jo->bytes, jo->nbytes, &jo->quant, jo->clamped,
                                   jo->front_flags != 0};
        any_binary |= jo->front_flags != 0;
    }
    /* the response's parameters, built without printf (hot path) */
    char params[DF_NAME_MAX * 7 + 320];
    char *pp = params;
    pp = put_s(pp, "\"character\":\"");
    pp = put_s(pp, q->name);
    const struct { const char *key; int64_t v; } nums[] = {
        {"\",\"queue_us\":", job->queue_us},          {",\"compute_us\":", job->compute_us},
        {",\"batch_poses\":", job->batch_poses},       {",\"batch_requests\":", job->batch_requests},
        {",\"batch_characters\":", job->batch_characters},
    };
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++)
        pp = df_ks_fmt_i64(put_s(pp, nums[k].key), nums[k].v);
    pp = put_s(pp, job->ran_inline ? ",\"inline\":true" : ",\"inline\":false");
    if (job->seq) {
        /* Triton echoes the sequence id; the frame's number in its sequence */
        if (job->seq_id_str[0]) {
            pp = put_s(pp, ",\"sequence_id\":\"");
            pp = put_json_s(pp, job->seq_id_str);
            pp = put_s(pp, "\"");
        } else {
            char num[24];
            snprintf(num, sizeof num, "%llu", (unsigned long long)job->seq_id);
            pp = put_s(put_s(pp, ",\"sequence_id\":"), num);
        }
        pp = df_ks_fmt_i64(put_s(pp, ",\"sequence_frame\":"), job->seq_frame);
    }
    *pp = 0;
    if (df_kserve_write_response(&q->out, job->model_name, job->model_version, q->kreq.id, outs,
                                 job->n_outputs, params))
        return send_error(q, 500, "out of memory");
    if (!any_binary) return send_out(q, 200, "application/json");
    char hl[32];
    *df_ks_fmt_i64(hl, (int64_t)q->out.len) = 0;
    size_t bin_bytes = 0;
    for (int o = 0; o < job->n_outputs; o++)
        if (outs[o].binary) bin_bytes += outs[o].nbytes;
    struct MHD_Response *r;
    if (bin_bytes <= HTTP_COPY_MAX) {
        /* small answer: one buffer, so libmicrohttpd sends status line,
         * headers and body in one send() (an iovec response costs a second
         * send and a second wake-up of the client) */
        for (int o = 0; o < job->n_outputs; o++)
            if (outs[o].binary) df_ks_buf_append(&q->out, (const char *)outs[o].bytes, outs[o].nbytes);
        if (q->out.oom) return send_error(q, 500, "out of memory");
        r = MHD_create_response_from_buffer(q->out.len, q->out.data, MHD_RESPMEM_PERSISTENT);
    } else {
        unsigned n = 0;
        q->iov[n++] = (struct MHD_IoVec){q->out.data, q->out.len};
        for (int o = 0; o < job->n_outputs; o++)
            if (outs[o].binary) q->iov[n++] = (struct MHD_IoVec){outs[o].bytes, outs[o].nbytes};
        r = MHD_create_response_from_iovec(q->iov, n, NULL, NULL);
    }
    if (!r) return send_error(q, 500, "cannot create response");
    MHD_add_response_header(r, "Inference-Header-Content-Length", hl);
    return queue(q, 200, r, "application/octet-stream");
}

/* ------------------------------------------------------------ MHD glue */

/* Appends the HTTP front's own gauges to the /metrics text (*text new,
 * realloc'd here): open connections per HTTP thread, so an operator (and
 * test_http_concurrency) can see that the acceptor spreads them. */
static int http_metrics(df_http_t *h, char **text, size_t *len)
{
    size_t cap = *len + 700 + (size_t)h->nd * 48;
    char *t = realloc(*text, cap);
    if (!t) {
        free(*text);
        *text = NULL;
        return -1;
    }
    *text = t;
    size_t n = *len;
    n += (size_t)snprintf(t + n, cap - n,
                          "# HELP deformd_http_connections Open HTTP connections per HTTP thread.\n"
                          "# TYPE deformd_http_connections gauge\n");
    for (int k = 0; k < h->nd; k++)
        n += (size_t)snprintf(t + n, cap - n, "deformd_http_connections{thread=\"%d\"} %d\n", k,
                              atomic_load(&h->slot[k].conns));
    n += (size_t)snprintf(t + n, cap - n,
                          "# HELP deformd_http_read_timeouts_total HTTP connections closed by "
                          "header_timeout_s / body_timeout_s.\n"
                          "# TYPE deformd_http_read_timeouts_total counter\n"
                          "deformd_http_read_timeouts_total %ld\n"
                          "# HELP deformd_auth_refused_total Requests refused for want of a valid "
                          "token (auth = all).\n"
                          "# TYPE deformd_auth_refused_total counter\n"
                          "deformd_auth_refused_total{front=\"http\"} %ld\n",
                          atomic_load(&h->timeouts), atomic_load(&h->auth_refused));
    *len = n;
    return 0;
}

static enum MHD_Result dispatch(req_t *q)
{
    df_http_t *h = q->h;
    if (q->is_options) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        return queue(q, 204, r, NULL);
    }
    int post_route = q->route == R_INFER || q->route == R_REPO_LOAD || q->route == R_REPO_UNLOAD;
    int either = q->route == R_POSE_GLB || q->route == R_REPO_INDEX;
    if (q->route == R_NOTFOUND) return send_error(q, 404, "no such endpoint");
    if (post_route && !q->is_post) return send_405(q, "POST, OPTIONS", "use POST");
    if (either && !q->is_get && !q->is_post) return send_405(q, "GET, HEAD, POST, OPTIONS", "use GET or POST");
    if (!post_route && !either && !q->is_get) return send_405(q, "GET, HEAD, OPTIONS", "use GET");
    if (q->too_big && q->route != R_INFER) return send_error(q, 413, "request body too large");
    if (q->version >= 0) {
        /* /versions/<v>: only the version that serves exists (checked when
         * the request arrives) */
        df_char_info_t ci;
        df_error_t e = {0};
        if (df_server_character(h->srv, q->name, &ci, &e)) return send_df_error(q, &e);
        int64_t loaded = ci.version;
        df_char_info_release(&ci);
        if (loaded != q->version) {
            char msg[DF_NAME_MAX + 128];
            snprintf(msg, sizeof msg, "'%s' version %lld is not loaded (version %lld serves)", q->name,
                     (long long)q->version, (long long)loaded);
            return send_error(q, 404, msg);
        }
    }
    switch (q->route) {
    case R_LIVE:
        df_ks_buf_reset(&q->out);
        df_ks_buf_printf(&q->out, "{\"live\":true}");
        return send_out(q, 200, "application/json");
    case R_READY: {
        int ready = df_server_ready(h->srv);
        df_ks_buf_reset(&q->out);
        df_ks_buf_printf(&q->out, "{\"ready\":%s}", ready ? "true" : "false");
        return send_out(q, ready ? 200 : 503, "application/json");
    }
    case R_SERVER:
        df_ks_buf_reset(&q->out);
        df_ks_buf_printf(&q->out,
                         "{\"name\":\"deformd\",\"version\":\"%s\",\"extensions\":["
                         "\"binary_tensor_data\",\"model_repository\",\"characters\","
                         "\"output_encodings\",\"glb\",\"clips\",\"metrics\"]}",
                         DF_VERSION);
        return send_out(q, 200, "application/json");
    case R_MODELS: return h_models(q);
    case R_MODEL_META: return h_model_meta(q);
    case R_MODEL_READY: {
        df_char_info_t ci;
        df_error_t e = {0};
        if (df_server_character(h->srv, q->name, &ci, &e)) return send_df_error(q, &e);
        df_char_info_release(&ci);
        df_ks_buf_reset(&q->out);
        df_ks_buf_printf(&q->out, "{\"name\":");
        df_ks_buf_json_string(&q->out, q->name);
        df_ks_buf_printf(&q->out, ",\"ready\":true}");
        return send_out(q, 200, "application/json");
    }
    case R_MESH: return h_mesh(q);
    case R_INFER:
    case R_POSE_GLB:
        if (q->is_get && q->route == R_POSE_GLB && !q->len) {
            /* GET pose.glb: empty request (defaults / clip via query) */
            if (q->cap < 3) {
                char *nb = realloc(q->body, 64);
                if (!nb) return send_error(q, 500, "out of memory");
                q->body = nb;
                q->cap = 64;
            }
            memcpy(q->body, "{}", 3);
            q->len = 2;
        }
        return start_infer(q);
    case R_REPO_INDEX: return h_index(q);
    case R_REPO_LOAD:
    case R_REPO_UNLOAD: return h_repo(q);
    case R_METRICS: {
        char *text = NULL;
        size_t len = 0;
        if (df_server_metrics(h->srv, &text, &len) || http_metrics(h, &text, &len))
            return send_error(q, 500, "out of memory");
        struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
        return queue(q, 200, r, "text/plain; version=0.0.4");
    }
    case R_VIEWER: return h_static(q);
    case R_ROOT: {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (r) MHD_add_response_header(r, "Location", "/viewer/");
        return queue(q, 302, r, NULL);
    }
    default: return send_error(q, 404, "no such endpoint");
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    df_http_t *h = cls;
    req_t *q = *con_cls;
    if (!q) {
        q = req_get(h);
        if (!q) return MHD_NO;
        q->conn = conn;
        *con_cls = q;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        q->hc = ci ? ci->socket_context : NULL;
        hc_set(q->hc, HC_BODY); /* headers are in: the body has body_timeout_s */
        if (h->cfg->log_requests) {
            snprintf(q->method, sizeof q->method, "%s", method);
            snprintf(q->url, sizeof q->url, "%s", url);
            q->t0_ns = df__now_ns();
        }
        q->is_post = !strcmp(method, "POST");
        q->is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        q->is_options = !strcmp(method, "OPTIONS");
        if (q->hc && q->hc->url_nul) {
            q->hc->url_nul = 0;
            return send_error(q, 400, "the URL contains %00 (a NUL byte), which no name may hold");
        }
        const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
        if (te && strcasecmp(te, "chunked")) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "Transfer-Encoding '%.40s' is not supported: send the body as it is, with "
                     "Content-Length, or chunked", te);
            return send_error(q, 501, msg);
        }
        route(q, url);
        if (h->cfg->auth_all && !q->is_options && q->route != R_LIVE && q->route != R_READY) {
            /* auth = all: refused before the body is read */
            int viewer = q->route == R_VIEWER || q->route == R_ROOT;
            const char *qt =
                viewer ? MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token") : NULL;
            if (qt) return viewer_login(q, url, qt);
            if (!bearer_ok(h, conn) && !cookie_ok(h, conn))
                return send_401(q, viewer,
                                viewer ? "This daemon requires a token (auth = all)."
                                       : "missing or wrong bearer token: this daemon requires "
                                         "one on every endpoint but /v2/health/* (auth = all); "
                                         "send Authorization: Bearer <token>");
        }
        const char *fmt = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "format");
        if (fmt && !strcmp(fmt, "glb")) q->glb = 1;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long n = strtoull(cl, &end, 10);
            if (n > h->cfg->max_body_bytes) {
                /* refuse now (Connection: close is what we want here) */
                char msg[128];
                snprintf(msg, sizeof msg, "request body of %llu bytes is larger than %llu (max_body_bytes)",
                         n, (unsigned long long)h->cfg->max_body_bytes);
                return send_error(q, 413, msg);
            }
            /* the body's buffer, counted by its declared length before a
             * byte of it is read; refused now when it does not fit */
            if (n > 0 && in_charge(h, q, n + 1)) {
                char msg[256];
                busy_msg(h, msg, sizeof msg, n + 1);
                return send_error(q, 429, msg);
            }
            if (n > 0) q->in_body = n + 1;
        }
        const char *ih = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     "Inference-Header-Content-Length");
        if (ih) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(ih, &end, 10);
            if (errno || end == ih || *end || n > h->cfg->max_body_bytes)
                q->header_len = (size_t)-1;
            else if (n == 0)
                q->raw = 1; /* the whole body is the one input's data */
            else
                q->header_len = (size_t)n;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->too_big || q->too_busy) return MHD_YES;
        if (q->len + n > h->cfg->max_body_bytes) {
            q->too_big = 1;
            free(q->body);
            q->body = NULL;
            q->len = q->cap = 0;
            return MHD_YES;
        }
        if (q->len + n + 1 > q->cap) {
            size_t nc = q->cap ? q->cap : 4096;
            while (nc < q->len + n + 1) nc *= 2;
            if (nc > h->cfg->max_body_bytes + 1) nc = h->cfg->max_body_bytes + 1;
            if (q->in_body >= q->len + n + 1 && nc > q->in_body) nc = q->in_body; /* declared */
            /* without a declared length (chunked), the buffer is counted
             * as it grows */
            if (nc > q->in_body) {
                if (in_charge(h, q, nc - q->in_body)) {
                    q->too_busy = 1;
                    return MHD_YES;
                }
                q->in_body = nc;
            }
            char *nb = realloc(q->body, nc);
            if (!nb) {
                q->too_big = 1;
                return MHD_YES;
            }
            q->body = nb;
            q->cap = nc;
        }
        memcpy(q->body + q->len, upload_data, n);
        q->len += n;
        return MHD_YES;
    }
    if (q->hc && atomic_load(&q->hc->state) == HC_BODY) hc_set(q->hc, HC_BUSY); /* body complete */
    if (q->repo_pending) {
        int fin;
        pthread_mutex_lock(&q->mu);
        fin = q->finished;
        pthread_mutex_unlock(&q->mu);
        return fin ? repo_answer(q) : MHD_YES;
    }
    if (q->job) {
        /* resumed after the worker finished */
        int fin;
        pthread_mutex_lock(&q->mu);
        fin = q->finished;
        pthread_mutex_unlock(&q->mu);
        if (!fin) return MHD_YES;
        if (q->job->done == NULL) return MHD_YES;
        q->job->done = NULL; /* answered once */
        return finish_infer(q);
    }
    if (q->header_len == (size_t)-1)
        return send_error(q, 400, "bad Inference-Header-Content-Length header");
    enum MHD_Result r = dispatch(q);
    if (r == MHD_YES && q->job) {
        /* submitted; if the worker already finished, answer now */
        pthread_mutex_lock(&q->mu);
        int fin = q->finished && !q->suspended;
        pthread_mutex_unlock(&q->mu);
        if (fin) {
            q->job->done = NULL;
            return finish_infer(q);
        }
    }
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req_t *q = *con_cls;
    if (!q) return;
    *con_cls = NULL;
    /* keep-alive: the next request's headers have header_timeout_s */
    hc_set(q->hc, HC_HEADERS);
    if (q->hc) q->hc->url_nul = 0;
    /* a submitted job is finished here: the connection was resumed by done()
     * and the response sent (or the client went away) */
    req_put(q->h, q);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* MHD thread: URL (path and query) unescaping, as libmicrohttpd's own but
 * a %00 stays as it is and marks the request (refused with 400 when the
 * access handler sees it): decoded, the NUL cut the string and
 * /v2/models/wuson%00x/... addressed "wuson". */
static size_t unescape_url(void *cls, struct MHD_Connection *c, char *s)
{
    char *w = s;
    const char *r = s;
    while (*r) {
        int hi, lo;
        if (r[0] == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0) {
            int v = hi * 16 + lo;
            if (v == 0) {
                const union MHD_ConnectionInfo *ci =
                    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
                hconn_t *hc = ci ? ci->socket_context : NULL;
                if (hc) hc->url_nul = 1;
                *w++ = *r++; /* keep "%00" */
                continue;
            }
            *w++ = (char)v;
            r += 3;
            continue;
        }
        *w++ = *r++;
    }
    *w = 0;
    return (size_t)(w - s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    df__log("http: %s", buf);
}

/* A refusal written straight to a connection MHD never saw, then closed
 * (best effort: the client may not read it). */
static void refuse_raw(int fd, int status, const char *reason, const char *msg)
{
    char body[320], buf[512];
    int bn = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     status, reason, bn, body);
    if (n > 0) (void)send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
}

/* Reaper thread: every 200 ms, shut down connections that have waited
 * longer than header_timeout_s for a request's headers (from the
 * connection's start or its previous answer: this also bounds idle
 * keep-alive) or longer than body_timeout_s for its body. A client that
 * trickles a byte at a time keeps libmicrohttpd's idle timeout from ever
 * firing; these count from the state's start. MHD sees the shutdown as
 * the client closing and frees the connection. */
static void *reaper_main(void *arg)
{
    df_http_t *h = arg;
    int64_t hto = (int64_t)h->cfg->header_timeout_s * 1000000000;
    int64_t bto = (int64_t)h->cfg->body_timeout_s * 1000000000;
    while (!atomic_load(&h->reaper_stop)) {
        usleep(200000);
        int64_t now = df__now_ns();
        int n = 0;
        pthread_mutex_lock(&h->conn_mu);
        for (hconn_t *c = h->hconns; c; c = c->next) {
            int st = atomic_load(&c->state);
            int64_t lim = st == HC_HEADERS ? hto : st == HC_BODY ? bto : 0;
            if (!lim || c->shut || now - atomic_load(&c->since_ns) <= lim) continue;
            c->shut = 1;
            (void)shutdown(c->fd, SHUT_RDWR);
            n++;
        }
        pthread_mutex_unlock(&h->conn_mu);
        if (n) {
            atomic_fetch_add(&h->timeouts, n);
            df__log("http: closed %d connection%s that sent no complete request headers within "
                    "%d s or body within %d s (header_timeout_s, body_timeout_s)",
                    n, n > 1 ? "s" : "", h->cfg->header_timeout_s, h->cfg->body_timeout_s);
        }
    }
    return NULL;
}

/* Acceptor thread: blocking accept4, then the least-loaded daemon takes
 * the socket (MHD closes it if it refuses, e.g. at its connection limit).
 * Ends when df_http_quiesce shuts the listening socket down. */
static void *acceptor_main(void *arg)
{
    df_http_t *h = arg;
    int64_t last_full_log = 0, last_peer_log = 0;
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(h->lfd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
        if (fd < 0) {
            if (atomic_load(&h->quiescing)) break;
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                df__log("http: accept: %s (retrying)", strerror(errno));
                usleep(10000);
                continue;
            }
            if (!atomic_load(&h->quiescing)) df__log("http: accept: %s", strerror(errno));
            break;
        }
        if (atomic_load(&h->conns) >= h->cfg->max_connections) {
            char msg[128];
            snprintf(msg, sizeof msg, "server busy: %d connections open (max_connections)",
                     h->cfg->max_connections);
            refuse_raw(fd, 503, "Service Unavailable", msg);
            int64_t now = df__now_ns();
            if (now - last_full_log > 1000000000) { /* a line a second at most */
                df__log("http: %d connections (max_connections): refusing new ones",
                        h->cfg->max_connections);
                last_full_log = now;
            }
            continue;
        }
        df_peer_key_t pk;
        df__peer_key((const struct sockaddr *)&peer, &pk);
        pthread_mutex_lock(&h->conn_mu);
        int prc = df__peers_add(&h->peers, &pk, h->cfg->max_connections_per_peer);
        pthread_mutex_unlock(&h->conn_mu);
        if (prc) {
            char addr[64], msg[192];
            df__peer_str(&pk, addr, sizeof addr);
            snprintf(msg, sizeof msg, "too many connections from %s (max_connections_per_peer %d)",
                     addr, h->cfg->max_connections_per_peer);
            refuse_raw(fd, 429, "Too Many Requests", msg);
            int64_t now = df__now_ns();
            if (now - last_peer_log > 1000000000) {
                df__log("http: %s", msg);
                last_peer_log = now;
            }
            continue;
        }
        int best = 0, best_n = INT32_MAX;
        for (int k = 0; k < h->nd; k++) {
            int n = atomic_load(&h->slot[k].conns);
            if (n < best_n) {
                best_n = n;
                best = k;
            }
        }
        atomic_fetch_add(&h->slot[best].conns, 1);
        atomic_fetch_add(&h->conns, 1);
        /* on failure MHD has closed fd and logged why */
        if (MHD_add_connection(h->d[best], fd, (const struct sockaddr *)&peer, plen) != MHD_YES) {
            atomic_fetch_sub(&h->slot[best].conns, 1);
            atomic_fetch_sub(&h->conns, 1);
            pthread_mutex_lock(&h->conn_mu);
            df__peers_del(&h->peers, &pk);
            pthread_mutex_unlock(&h->conn_mu);
        }
    }
    return NULL;
}

/* MHD thread: a connection of this slot's daemon started or closed */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_slot_t *sl = cls;
    df_http_t *h = sl->h;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        hconn_t *hc = calloc(1, sizeof *hc);
        if (!hc) return; /* no timeouts for it; counted as usual */
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        hc->fd = fi ? fi->connect_fd : -1;
        df__peer_key(ai ? ai->client_addr : NULL, &hc->peer);
        atomic_init(&hc->state, HC_HEADERS);
        atomic_init(&hc->since_ns, df__now_ns());
        pthread_mutex_lock(&h->conn_mu);
        hc->next = h->hconns;
        if (h->hconns) h->hconns->prev = hc;
        h->hconns = hc;
        pthread_mutex_unlock(&h->conn_mu);
        *socket_context = hc;
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED) return;
    atomic_fetch_sub(&sl->conns, 1);
    atomic_fetch_sub(&h->conns, 1);
    hconn_t *hc = *socket_context;
    df_peer_key_t pk;
    if (hc) pk = hc->peer;
    else {
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        df__peer_key(ai ? ai->client_addr : NULL, &pk);
    }
    pthread_mutex_lock(&h->conn_mu);
    df__peers_del(&h->peers, &pk);
    if (hc) {
        if (hc->prev) hc->prev->next = hc->next;
        else h->hconns = hc->next;
        if (hc->next) hc->next->prev = hc->prev;
    }
    pthread_mutex_unlock(&h->conn_mu);
    free(hc);
    *socket_context = NULL;
}

static int listen_on(const df_config_t *cfg, int *port, df_error_t *err)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    socklen_t alen;
    if (inet_pton(AF_INET, cfg->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->http_port);
        alen = sizeof *a4;
    } else if (inet_pton(AF_INET6, cfg->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->http_port);
        alen = sizeof *a6;
    } else {
        return df_error_set(err, DF_EINVAL, "host '%s' is not an IPv4 or IPv6 address", cfg->host);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return df_error_set(err, DF_EIO, "socket: %s", strerror(errno));
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, alen) || listen(fd, 1024)) {
        int e = errno;
        close(fd);
        return df_error_set(err, DF_EIO, "cannot listen on %s:%d (%s)", cfg->host, cfg->http_port,
                            strerror(e));
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    *port = cfg->http_port;
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) == 0)
        *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

static void daemons_stop(df_http_t *h)
{
    for (int k = 0; k < h->nd; k++) {
        MHD_stop_daemon(h->d[k]);
        h->d[k] = NULL;
    }
    h->nd = 0;
}

/* df_http_start failed after listening: daemons, socket, h */
static void reaper_stop(df_http_t *h)
{
    if (!h->reaper_started) return;
    atomic_store(&h->reaper_stop, 1);
    pthread_join(h->reaper, NULL);
    h->reaper_started = 0;
}

static void start_undo(df_http_t *h)
{
    reaper_stop(h);
    daemons_stop(h);
    close(h->lfd);
    pthread_mutex_destroy(&h->pool_mu);
    pthread_mutex_destroy(&h->conn_mu);
    df__peers_free(&h->peers);
    free(h);
}

int df_http_start(df_server_t *s, const df_config_t *cfg, df_http_t **out, int *port,
                  df_error_t *err)
{
    df_http_t *h = calloc(1, sizeof *h);
    if (!h) return df_error_set(err, DF_ENOMEM, "out of memory");
    h->srv = s;
    h->cfg = cfg;
    h->lfd = -1;
    atomic_init(&h->repo_ops, 0);
    atomic_init(&h->quiescing, 0);
    atomic_init(&h->conns, 0);
    atomic_init(&h->reaper_stop, 0);
    atomic_init(&h->timeouts, 0);
    atomic_init(&h->auth_refused, 0);
    atomic_init(&h->auth_log_ns, 0);
    pthread_mutex_init(&h->pool_mu, NULL);
    pthread_mutex_init(&h->conn_mu, NULL);
    df_ks_limits_default(&h->lim);
    h->lim.max_depth = cfg->max_json_depth;
    h->lim.max_elements = cfg->max_json_elements;
    int nthreads = cfg->http_threads < 1 ? 1 : cfg->http_threads;
    if (nthreads > DF_HTTP_MAX_THREADS) nthreads = DF_HTTP_MAX_THREADS;
    int rc = listen_on(cfg, port, err);
    if (rc < 0) {
        pthread_mutex_destroy(&h->pool_mu);
        pthread_mutex_destroy(&h->conn_mu);
        free(h);
        return rc;
    }
    h->lfd = rc;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    for (int k = 0; k < nthreads; k++) {
        h->slot[k].h = h;
        atomic_init(&h->slot[k].conns, 0);
        /* the acceptor keeps the total under max_connections; MHD's own
         * limit is set above it so that MHD never refuses (see struct df_http) */
        struct MHD_OptionItem ops[] = {
            {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
            {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
            {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, &h->slot[k]},
            {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)unescape_url, NULL},
            {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->idle_timeout_s, NULL},
            {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)cfg->max_connections + 64, NULL},
            /* MHD zeroes the used part of this pool after every request
             * (its default is 32 KiB: 5 % of the CPU of a small binary
             * request, perf, docs/performance.md session 6) */
            {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)(cfg->http_connection_memory > 0 ? cfg->http_connection_memory : 16384), NULL},
            {MHD_OPTION_END, 0, NULL},
        };
        h->d[k] = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, ops,
                                   MHD_OPTION_END);
        if (!h->d[k]) {
            int e = errno;
            start_undo(h);
            return df_error_set(err, DF_EIO, "cannot start the HTTP daemon (%s)", strerror(e));
        }
        h->nd = k + 1;
    }
    if (pthread_create(&h->reaper, NULL, reaper_main, h)) {
        start_undo(h);
        return df_error_set(err, DF_EIO, "cannot start the HTTP timeout thread");
    }
    h->reaper_started = 1;
    if (pthread_create(&h->acceptor, NULL, acceptor_main, h)) {
        start_undo(h);
        return df_error_set(err, DF_EIO, "cannot start the HTTP acceptor thread");
    }
    h->acceptor_started = 1;
    *out = h;
    return DF_OK;
}

void df_http_quiesce(df_http_t *h)
{
    if (!h || !h->acceptor_started) return;
    atomic_store(&h->quiescing, 1);
    /* wakes the blocking accept4 (it fails with EINVAL) */
    (void)shutdown(h->lfd, SHUT_RDWR);
    pthread_join(h->acceptor, NULL);
    h->acceptor_started = 0;
    close(h->lfd);
    h->lfd = -1;
}

void df_http_stop(df_http_t **ph)
{
    df_http_t *h = *ph;
    *ph = NULL;
    if (!h) return;
    df_http_quiesce(h);
    /* a load/unload still running holds a suspended connection */
    for (int i = 0; i < 6000 && atomic_load(&h->repo_ops) > 0; i++) usleep(10000);
    reaper_stop(h);
    daemons_stop(h);
    while (h->pool) {
        req_t *q = h->pool;
        h->pool = q->next;
        req_destroy(q);
    }
    pthread_mutex_destroy(&h->pool_mu);
    pthread_mutex_destroy(&h->conn_mu);
    df__peers_free(&h->peers);
    free(h);
}

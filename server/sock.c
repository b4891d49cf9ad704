/* sock.c — the binary socket front: docs/protocol.md over libuv.
 *
 * DESIGN
 * Threads. One loop thread owns the uv loop, the listeners, every
 * connection and every request struct. Worker threads only ever touch the
 * completion list (guarded by sock->mu) and call uv_async_send — the one
 * libuv call other threads may make.
 *
 * Reading. A connection reads into a small buffer while it waits for a
 * header; once a header announces a payload, a request struct (req_t, from
 * a free list, with a grow-only payload buffer) is taken and the rest of
 * the payload is read by libuv directly into it (alloc_cb hands out the
 * payload's tail), so a 50 MB frame is never copied. A partial frame just
 * waits. The payload buffer is 8-byte aligned (malloc), so decoded tensors
 * point straight into it and the engine job borrows them.
 *
 * Answers. A RESULT is encoded with df_frame_encode_result into the req's
 * metadata buffer plus segments pointing at the job's output buffers, and
 * written with one uv_write of all the segments. The job (and the payload
 * its inputs borrowed) is released when the write completes.
 *
 * Flow control. Per connection: at most max_inflight requests between
 * decode and written answer (the next INFER is answered DF_ELIMIT); when
 * more than max_queued_bytes of answers wait for a slow reader, reading
 * stops until they drain below half — a worker never waits for a socket.
 * A periodic timer closes connections idle for idle_timeout_s.
 *
 * Lifetimes. A connection is reference-counted: one reference for the open
 * handle (dropped in its close callback) and one per live req. End of
 * stream (the client's shutdown(SHUT_WR), or its close) stops reading and
 * drops a frame it did not finish; the requests it sent before are still
 * answered, and the connection closes once the last answer is written (or
 * a write fails because the client is gone). Jobs of a closed connection
 * complete later into the completion list, see c->closed and are dropped.
 *
 * Authentication (auth = all). Until a connection's AUTH frame carried one
 * of the configured tokens, any frame but PING and AUTH is refused at its
 * header — ERROR DF_EAUTH, then close, its payload never read — and so is
 * an AUTH with a wrong token.
 */
#include "sock.h"

#include "frame.h"
#include "peers.h"
#include "base/model_internal.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

void df__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define RBUF_SIZE (64 * 1024)
#define POOL_MAX 512
#define POOL_KEEP_BYTES (4u << 20)

typedef struct conn conn_t;

typedef struct req {
    struct req *next;        /* free list or completion list */
    conn_t *c;               /* reference held while the req lives */
    df_frame_header_t h;
    int hdr_rc;              /* non-fatal header error, answered after the payload */
    df_error_t hdr_err;
    uint8_t *payload;        /* grow-only, 8-byte aligned */
    size_t cap, got;
    float *clipbuf;          /* sampled clip inputs, grow-only */
    size_t clipcap;
    void *encbuf;            /* int16 re-encoding (rare), grow-only */
    size_t enccap;
    df_job_t *job;           /* while submitted / being written */
    uint64_t in_charged;     /* payload bytes counted in s->in_bytes */
    char *json;              /* INFO answer (owned) */
    int close_after;         /* close the connection once written */
    int counted;             /* counts toward c->inflight */
    size_t wbytes;
    uv_write_t w;
    df_frame_buf_t fb;
    uv_buf_t bufs[DF_FRAME_MAX_SEGS];
} req_t;

struct conn {
    union {
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    df_sock_t *s;
    conn_t *prev, *next;     /* s->conns list */
    int refs;
    int closed;              /* uv_close called */
    int reading;             /* uv_read_start active */
    int paused;              /* reading stopped for backpressure */
    int draining;            /* fatal error: no more reads, close after writes */
    int eof;                 /* the client shut down its side: no more reads;
                              * close once every answer is written */
    int authed;              /* presented a valid token (auth = all) */
    int inflight;
    size_t queued;           /* bytes in uv_write not completed */
    uint64_t last_active_ms;
    uint64_t last_write_ms;  /* an answer started or finished being written */
    uint64_t frame_start_ms; /* a frame's first byte arrived (0: none pending) */
    df_peer_key_t peer;
    int peer_counted;        /* counted in s->peers */
    req_t *cur;              /* request whose payload is being read */
    uint8_t rbuf[RBUF_SIZE];
    size_t rlen;             /* bytes in rbuf */
};

struct df_sock {
    df_server_t *srv;
    df_sock_config_t cfg;
    uv_loop_t loop;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    int has_tcp, has_pipe;
    int port;
    uv_async_t done_async, stop_async, quiesce_async;
    uv_timer_t idle_timer;
    pthread_t th;
    int started;
    /* loop thread only */
    conn_t *conns;
    int n_conns;
    req_t *pool;
    int pool_n;
    size_t pool_bytes;       /* buffer bytes of pooled requests (<= pool_keep_bytes) */
    uint64_t in_bytes;       /* payloads held (max_input_buffered_bytes) */
    df_peers_t peers;        /* connections per remote address */
    long timeouts;           /* connections closed by body_timeout_s */
    uint64_t last_timeout_log;
    long auth_refused;       /* connections refused for want of a token */
    uint64_t last_auth_log;
    /* guarded by mu */
    pthread_mutex_t mu;
    req_t *done_head, *done_tail;
    int stopped;
    long pending;            /* jobs submitted and not yet returned */
};

/* ------------------------------------------------------------ requests */

static req_t *req_get(df_sock_t *s, conn_t *c)
{
    req_t *r = s->pool;
    if (r) {
        s->pool = r->next;
        s->pool_n--;
        s->pool_bytes -= r->cap + r->clipcap + r->enccap;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) return NULL;
    }
    r->next = NULL;
    r->c = c;
    c->refs++;
    r->got = 0;
    r->hdr_rc = 0;
    r->job = NULL;
    r->json = NULL;
    r->close_after = 0;
    r->counted = 0;
    r->wbytes = 0;
    r->in_charged = 0;
    return r;
}

static void conn_unref(conn_t *c);
static void conn_close(conn_t *c);

static void req_put(df_sock_t *s, req_t *r)
{
    conn_t *c = r->c;
    if (r->job) df_job_free(&r->job);
    free(r->json);
    r->json = NULL;
    s->in_bytes -= r->in_charged;
    r->in_charged = 0;
    if (r->counted) c->inflight--;
    r->c = NULL;
    /* half-closed by the client: done once the last answer is written */
    if (c->eof && !c->closed && c->inflight == 0 && c->queued == 0) conn_close(c);
    if (s->pool_n < POOL_MAX) {
        if (r->cap > POOL_KEEP_BYTES ||
            s->pool_bytes + r->cap + r->clipcap + r->enccap > s->cfg.pool_keep_bytes) {
            free(r->payload);
            r->payload = NULL;
            r->cap = 0;
        }
        if (r->clipcap > POOL_KEEP_BYTES ||
            s->pool_bytes + r->cap + r->clipcap + r->enccap > s->cfg.pool_keep_bytes) {
            free(r->clipbuf);
            r->clipbuf = NULL;
            r->clipcap = 0;
        }
        if (s->pool_bytes + r->cap + r->clipcap + r->enccap > s->cfg.pool_keep_bytes) {
            free(r->encbuf);
            r->encbuf = NULL;
            r->enccap = 0;
        }
        s->pool_bytes += r->cap + r->clipcap + r->enccap;
        r->next = s->pool;
        s->pool = r;
        s->pool_n++;
    } else {
        free(r->payload);
        free(r->clipbuf);
        free(r->encbuf);
        free(r);
    }
    conn_unref(c);
}

static int grow_enc(req_t *r, size_t n)
{
    void *p = realloc(r->encbuf, n);
    if (!p) return -1;
    r->encbuf = p;
    r->enccap = n;
    return 0;
}

static int req_reserve(req_t *r, size_t n)
{
    if (n <= r->cap) return 0;
    size_t cap = n < 4096 ? 4096 : n;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap)) return -1;
    free(r->payload);
    r->payload = p;
    r->cap = cap;
    return 0;
}

/* ------------------------------------------------------------ connections */

static uint64_t now_ms(df_sock_t *s) { return uv_now(&s->loop); }

static void conn_free(conn_t *c)
{
    df_sock_t *s = c->s;
    if (c->peer_counted) df__peers_del(&s->peers, &c->peer);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    free(c);
}

static void conn_unref(conn_t *c)
{
    if (--c->refs == 0) conn_free(c);
}

static void on_close(uv_handle_t *h)
{
    conn_t *c = h->data;
    conn_unref(c);
}

static void conn_close(conn_t *c)
{
    if (c->closed) return;
    c->closed = 1;
    if (c->cur) {
        req_t *r = c->cur;
        c->cur = NULL;
        req_put(c->s, r);
    }
    uv_close((uv_handle_t *)&c->h.stream, on_close);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void conn_update_reading(conn_t *c)
{
    if (c->closed) return;
    int want = !c->draining && !c->paused && !c->eof;
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0) c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = 0;
    }
}

/* ------------------------------------------------------------ writing */

static void on_write(uv_write_t *w, int status)
{
    req_t *r = w->data;
    conn_t *c = r->c;
    df_sock_t *s = c->s;
    c->queued -= r->wbytes;
    c->last_write_ms = now_ms(s);
    int close_after = r->close_after || status < 0;
    req_put(s, r); /* c stays valid: the handle holds a reference until on_close */
    if (close_after) {
        conn_close(c);
        return;
    }
    if (c->paused && c->queued < s->cfg.max_queued_bytes / 2) {
        c->paused = 0;
        conn_update_reading(c);
    }
}

/* Write the frame in r->fb (segments); r is released here when the socket
 * takes it all at once, else in on_write. Either way the caller must not
 * touch r afterwards.
 * The first attempt is uv_try_write: when nothing is queued on the
 * connection (libuv refuses it otherwise, so bytes never reorder) and the
 * kernel takes the whole frame, which is the common case for small answers,
 * the answer is done without uv_write's completion round, whose POLLOUT
 * bookkeeping cost one epoll_ctl per answer (session 5 profile). The rest of
 * a partial write goes through uv_write. */
static void req_write(req_t *r)
{
    conn_t *c = r->c;
    df_sock_t *s = c->s;
    if (c->closed) {
        req_put(s, r);
        return;
    }
    df_frame_out_t *o = &r->fb.o;
    for (int i = 0; i < o->n_segs; i++)
        r->bufs[i] = uv_buf_init((char *)o->segs[i].base, (unsigned)o->segs[i].len);
    c->last_active_ms = now_ms(s);
    uv_buf_t *bufs = r->bufs;
    unsigned nbufs = (unsigned)o->n_segs;
    size_t left = o->total;
    if (c->queued == 0) {
        int n = uv_try_write(&c->h.stream, bufs, nbufs);
        if (n >= 0 && (size_t)n == left) {
            int close_after = r->close_after;
            req_put(s, r);
            if (close_after) conn_close(c);
            return;
        }
        if (n > 0) { /* skip what was written */
            size_t done = (size_t)n;
            left -= done;
            while (done >= bufs->len) {
                done -= bufs->len;
                bufs++;
                nbufs--;
            }
            bufs->base += done;
            bufs->len -= done;
        } else if (n < 0 && n != UV_EAGAIN && n != UV_ENOSYS) {
            req_put(s, r);
            conn_close(c);
            return;
        }
    }
    r->wbytes = left;
    r->w.data = r;
    if (c->queued == 0) c->last_write_ms = now_ms(s);
    c->queued += r->wbytes;
    if (uv_write(&r->w, &c->h.stream, bufs, nbufs, on_write)) {
        c->queued -= r->wbytes;
        req_put(s, r);
        conn_close(c);
        return;
    }
    if (!c->paused && c->queued > s->cfg.max_queued_bytes) {
        c->paused = 1;
        conn_update_reading(c);
    }
}

/* Answer r with an ERROR frame (keeps the payload buffer for reuse). */
static void req_error(req_t *r, int code, const char *msg)
{
    df_frame_buf_init(&r->fb);
    df_error_t e;
    if (df_frame_encode_error(r->h.id, code, msg, &r->fb.o, &e)) {
        req_put(r->c->s, r);
        return;
    }
    req_write(r);
}

/* An ERROR for a connection-level problem, then close. */
static void conn_fatal(conn_t *c, uint64_t id, int code, const char *msg)
{
    df_sock_t *s = c->s;
    c->draining = 1;
    conn_update_reading(c);
    req_t *r = req_get(s, c);
    if (!r) {
        conn_close(c);
        return;
    }
    r->h.id = id;
    r->close_after = 1;
    req_error(r, code, msg);
}

/* ------------------------------------------------------------ INFO */

static json_t *io_json(const df_io_desc_t *d, int with_optional)
{
    json_t *shape = json_array();
    for (int k = 0; k < d->ndim; k++) json_array_append_new(shape, json_integer(d->shape[k]));
    json_t *o = json_pack("{s:s, s:s, s:o}", "name", d->name, "datatype",
                          df_dtype_kserve(d->dtype), "shape", shape);
    if (with_optional) json_object_set_new(o, "optional", json_boolean(d->optional));
    return o;
}

static json_t *names_json(const df_model_t *m, const char *list)
{
    const char *const *names = NULL;
    size_t n = df_model_names(m, list, &names);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_string(names[i]));
    return a;
}

static char *info_json(df_sock_t *s, const char *name, df_error_t *err)
{
    json_t *root;
    if (!name[0]) {
        static char names[1024][DF_NAME_MAX];
        size_t n = df_server_names(s->srv, names, 1024);
        json_t *a = json_array();
        for (size_t i = 0; i < n && i < 1024; i++) json_array_append_new(a, json_string(names[i]));
        root = json_pack("{s:s, s:s, s:i, s:o}", "name", "deformd", "version", DF_VERSION,
                         "protocol", DF_FRAME_VERSION, "characters", a);
    } else {
        df_char_info_t ci;
        if (df_server_character(s->srv, name, &ci, err)) return NULL;
        const df_model_t *m = ci.model;
        json_t *ins = json_array(), *outs = json_array(), *clips = json_array();
        for (int i = 0; i < df_model_n_inputs(m); i++)
            json_array_append_new(ins, io_json(df_model_input(m, i), 1));
        for (int i = 0; i < df_model_n_outputs(m); i++)
            json_array_append_new(outs, io_json(df_model_output(m, i), 0));
        for (size_t c = 0; c < df_model_clip_count(m); c++) {
            df_clip_info_t info;
            if (df_model_clip_info(m, c, &info)) continue;
            json_t *times = json_array();
            double t0 = info.n_keys ? info.times[0] : 0;
            for (int64_t k = 0; k < info.n_keys; k++)
                json_array_append_new(times, json_real(info.times[k] - t0));
            json_array_append_new(
                clips, json_pack("{s:s, s:I, s:f, s:o}", "name", info.name, "keys",
                                 (json_int_t)info.n_keys, "duration",
                                 info.n_keys ? info.times[info.n_keys - 1] - t0 : 0.0, "times",
                                 times));
        }
        float lo[3], hi[3];
        df_model_bbox(m, lo, hi);
        root = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:[[f,f,f],[f,f,f]], s:o, s:o, s:o, "
                         "s:o, s:o}",
                         "name", ci.name, "model", ci.model_name, "kind", df_model_kind(m),
                         "version", (json_int_t)ci.version, "vertices",
                         (json_int_t)df_model_n_vertices(m), "triangles",
                         (json_int_t)df_model_n_triangles(m), "bbox", lo[0], lo[1], lo[2],
                         hi[0], hi[1], hi[2], "inputs", ins, "outputs", outs, "joints",
                         names_json(m, "joints"), "morphs", names_json(m, "morphs"), "clips",
                         clips);
        /* the other name lists, as HTTP metadata has them (a rig's or a retarget's
         * controls, a body's shapes): what a client names one-axis inputs by */
        if (root) {
            json_object_set_new(root, "controls", names_json(m, "controls"));
            json_object_set_new(root, "shapes", names_json(m, "shapes"));
        }
        df_char_info_release(&ci);
    }
    if (!root) {
        df_error_set(err, DF_EINTERNAL, "INFO: cannot build JSON");
        return NULL;
    }
    char *txt = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!txt) df_error_set(err, DF_ENOMEM, "INFO: out of memory");
    return txt;
}

/* ------------------------------------------------------------ INFER */

static void finish_job(df_sock_t *s, req_t *r);

static void on_job_done(df_job_t *job, void *user)
{
    req_t *r = user;
    df_sock_t *s = r->c->s;
    pthread_mutex_lock(&s->mu);
    s->pending--;
    if (s->stopped) {
        /* the loop is gone (drain timed out): drop the answer */
        pthread_mutex_unlock(&s->mu);
        df_job_free(&job);
        r->job = NULL;
        return;
    }
    r->next = NULL;
    if (s->done_tail) s->done_tail->next = r;
    else s->done_head = r;
    s->done_tail = r;
    /* under mu: df_sock_stop sets `stopped` under mu before the handle
     * closes, so no send can race with the close */
    uv_async_send(&s->done_async);
    pthread_mutex_unlock(&s->mu);
}

/* Inputs from a clip sampled at each pose's time, for the model inputs the
 * request does not give itself. */
static int add_clip_inputs(df_sock_t *s, req_t *r, const df_frame_infer_t *q, df_job_t *job,
                           const df_model_t *m, df_error_t *err)
{
    int c = df_model_clip_find(m, q->clip);
    if (c < 0)
        return df_error_set(err, DF_ENOTFOUND, "clip \"%s\" not found in character \"%s\"",
                            q->clip, q->character);
    int nin = df_model_n_inputs(m);
    size_t off[DF_MAX_IO + 1], numel[DF_MAX_IO];
    off[0] = 0;
    for (int i = 0; i < nin; i++) {
        const df_io_desc_t *d = df_model_input(m, i);
        numel[i] = 1;
        for (int k = 0; k < d->ndim; k++) numel[i] *= (size_t)d->shape[k];
        off[i + 1] = off[i] + numel[i] * q->n_poses;
    }
    size_t need = off[nin] * sizeof(float);
    if (need > r->clipcap) {
        float *p = realloc(r->clipbuf, need);
        if (!p) return df_error_set(err, DF_ENOMEM, "clip: out of memory");
        r->clipbuf = p;
        r->clipcap = need;
    }
    uint32_t filled = 0;
    for (uint32_t b = 0; b < q->n_poses; b++) {
        float *bufs[DF_MAX_IO];
        for (int i = 0; i < nin; i++) bufs[i] = r->clipbuf + off[i] + b * numel[i];
        int rc = df_model_clip_sample(m, c, q->times[b], bufs, &filled, err);
        if (rc) return rc;
    }
    for (int i = 0; i < nin; i++) {
        if (!(filled & (1u << i))) continue;
        const df_io_desc_t *d = df_model_input(m, i);
        int given = 0;
        for (int k = 0; k < q->n_inputs; k++)
            if (!strcmp(q->inputs[k].name, d->name)) given = 1;
        if (given) continue;
        if (job->n_inputs >= DF_MAX_IO)
            return df_error_set(err, DF_ELIMIT, "too many inputs with the clip's");
        df_job_input_t *in = &job->inputs[job->n_inputs++];
        df__strcpy_n(in->name, sizeof in->name, d->name);
        in->ndim = d->ndim + 1;
        in->shape[0] = q->n_poses;
        for (int k = 0; k < d->ndim; k++) in->shape[k + 1] = d->shape[k];
        in->data = r->clipbuf + off[i];
    }
    (void)s;
    return DF_OK;
}

static void handle_infer(df_sock_t *s, req_t *r)
{
    conn_t *c = r->c;
    df_frame_infer_t q;
    df_error_t err = {0};
    int rc = df_frame_decode_infer(r->payload, r->h.length, &q, &err);
    if (rc) return req_error(r, rc, err.msg);
    if (c->inflight >= s->cfg.max_inflight) {
        snprintf(err.msg, sizeof err.msg, "too many requests in flight on this connection (max %d)",
                 s->cfg.max_inflight);
        return req_error(r, DF_ELIMIT, err.msg);
    }
    df_job_t *job = df_job_new(s->srv);
    if (!job) return req_error(r, DF_ENOMEM, "out of memory");
    df__strcpy_n(job->character, sizeof job->character, q.character);
    if (q.seq) {
        job->seq = 1;
        job->seq_id = q.seq_id;
        memcpy(job->seq_id_str, q.seq_id_str, DF_NAME_MAX);
        job->seq_start = (q.seq_flags & DF_SEQ_START) != 0;
        job->seq_end = (q.seq_flags & DF_SEQ_END) != 0;
    }
    job->batch = (int)q.n_poses;
    job->flags = q.pose_flags;
    job->n_inputs = q.n_inputs;
    for (int i = 0; i < q.n_inputs; i++) {
        df_job_input_t *in = &job->inputs[i];
        memcpy(in->name, q.inputs[i].name, sizeof in->name);
        in->ndim = q.inputs[i].ndim;
        for (int k = 0; k < in->ndim; k++) in->shape[k] = q.inputs[i].dims[k];
        in->data = q.inputs[i].data;
    }
    df_encoding_t enc = (df_encoding_t)(q.encoding + 1);
    job->n_outputs = q.n_outputs;
    for (int o = 0; o < q.n_outputs; o++) {
        memcpy(job->outputs[o].name, q.outputs[o], DF_NAME_MAX);
        job->outputs[o].encoding = enc;
    }
    if (q.n_outputs == 0 || q.clip[0]) {
        /* every output (in the requested encoding, not the character's)
         * and/or the clip need the model */
        df_char_info_t ci;
        if ((rc = df_server_character(s->srv, q.character, &ci, &err))) {
            df_job_free(&job);
            return req_error(r, rc, err.msg);
        }
        if (q.n_outputs == 0) {
            int no = df_model_n_outputs(ci.model);
            job->n_outputs = no;
            for (int o = 0; o < no; o++) {
                df__strcpy_n(job->outputs[o].name, DF_NAME_MAX, df_model_output(ci.model, o)->name);
                job->outputs[o].encoding = enc;
            }
        }
        if (q.clip[0]) rc = add_clip_inputs(s, r, &q, job, ci.model, &err);
        df_char_info_release(&ci);
        if (rc) {
            df_job_free(&job);
            return req_error(r, rc, err.msg);
        }
    }
    job->done = on_job_done;
    job->user = r;
    job->front_id = r->h.id;
    job->allow_inline = 1;
    r->job = job;
    r->counted = 1;
    c->inflight++;
    pthread_mutex_lock(&s->mu);
    s->pending++;
    pthread_mutex_unlock(&s->mu);
    rc = df_server_submit(s->srv, job, &err);
    if (rc || job->ran_inline) {
        pthread_mutex_lock(&s->mu);
        s->pending--;
        pthread_mutex_unlock(&s->mu);
    }
    if (rc) {
        df_job_free(&r->job);
        return req_error(r, rc, err.msg);
    }
    if (job->ran_inline) finish_job(s, r); /* evaluated on this thread: answer now */
}

/* Loop thread: a job came back. Encode RESULT or ERROR and write it. */
static void finish_job(df_sock_t *s, req_t *r)
{
    df_job_t *job = r->job;
    if (r->c->closed) {
        req_put(s, r);
        return;
    }
    if (job->status != DF_OK) {
        char msg[DF_FRAME_MAX_MSG];
        int code = job->status;
        snprintf(msg, sizeof msg, "%s", job->err.msg[0] ? job->err.msg : df_strerror(code));
        df_job_free(&r->job);
        return req_error(r, code, msg);
    }
    df_frame_result_t res;
    memset(&res, 0, offsetof(df_frame_result_t, outputs));
    res.n_poses = (uint32_t)(job->batch > 0 ? job->batch : 1);
    res.n_outputs = job->n_outputs;
    size_t enc_need = 0, enc_used = 0;
    for (int o = 0; o < job->n_outputs; o++)
        if (job->outputs[o].encoding == DF_ENC_I16 && job->outputs[o].quant.comps != 1 &&
            job->outputs[o].quant.comps != 3)
            enc_need += job->outputs[o].nbytes;
    for (int o = 0; o < job->n_outputs; o++) {
        const df_job_output_t *jo = &job->outputs[o];
        df_frame_tensor_t *t = &res.outputs[o];
        memcpy(t->name, jo->name, DF_NAME_MAX);
        int e = jo->encoding == DF_ENC_DEFAULT ? DF_ENC_F32 : jo->encoding;
        t->type = (uint8_t)(e - 1);
        t->ndim = jo->ndim;
        for (int k = 0; k < jo->ndim; k++) t->dims[k] = (uint32_t)jo->shape[k];
        if (jo->ndim > 0) res.n_poses = (uint32_t)jo->shape[0];
        t->data = jo->bytes;
        t->nbytes = jo->nbytes;
        if (t->type == DF_WIRE_I16) {
            df_quant_t q1 = jo->quant;
            int comps = q1.comps;
            if (comps != 1 && comps != 3) {
                /* the wire carries 3 channels or 1: re-encode this output
                 * with one range (docs/protocol.md) from the job's floats */
                size_t n = jo->nbytes / 2;
                if (!jo->f32 || (enc_used + n * 2 > r->enccap && grow_enc(r, enc_need)))
                    return req_error(r, DF_ENOMEM, "out of memory re-encoding int16");
                int16_t *dst = (int16_t *)((char *)r->encbuf + enc_used);
                df_quant_from_data(jo->f32, n, 1, &q1);
                df_encode_i16(jo->f32, n, &q1, dst);
                t->data = dst;
                enc_used += n * 2;
                comps = 1;
            }
            for (int k = 0; k < 3; k++) {
                t->scale[k] = q1.scale[comps == 3 ? k : 0];
                t->offset[k] = q1.offset[comps == 3 ? k : 0];
            }
        }
    }
    df_frame_buf_init(&r->fb);
    df_error_t err = {0};
    int rc = df_frame_encode_result(r->h.id, &res, &r->fb.o, &err);
    if (rc) return req_error(r, DF_EINTERNAL, err.msg);
    req_write(r);
}

static void on_done_async(uv_async_t *a)
{
    df_sock_t *s = a->data;
    pthread_mutex_lock(&s->mu);
    req_t *r = s->done_head;
    s->done_head = s->done_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (r) {
        req_t *next = r->next;
        r->next = NULL;
        finish_job(s, r);
        r = next;
    }
}

/* ------------------------------------------------------------ dispatch */

/* A connection refused for want of a token: counted, a log line a second
 * at most (never the token). */
static void auth_refused(df_sock_t *s)
{
    s->auth_refused++;
    uint64_t now = now_ms(s);
    if (now - s->last_auth_log > 1000) {
        df__log("socket: refused a connection without a valid token (auth = all; %ld so far)",
                s->auth_refused);
        s->last_auth_log = now;
    }
}

/* A complete frame in r (header + payload). */
static void dispatch(df_sock_t *s, req_t *r)
{
    df_error_t err = {0};
    if (r->hdr_rc) return req_error(r, r->hdr_rc, r->hdr_err.msg);
    switch (r->h.type) {
    case DF_FT_PING:
        if (r->h.length > DF_FRAME_MAX_PING)
            return req_error(r, DF_ELIMIT, "PING payload over 1024 bytes");
        df_frame_buf_init(&r->fb);
        df_frame_encode_blob(r->h.id, DF_FT_PONG, r->payload, r->h.length, &r->fb.o, &err);
        return req_write(r);
    case DF_FT_INFO: {
        char name[DF_NAME_MAX];
        int rc = df_frame_decode_info(r->payload, r->h.length, name, &err);
        if (rc) return req_error(r, rc, err.msg);
        r->json = info_json(s, name, &err);
        if (!r->json) return req_error(r, err.code ? err.code : DF_EINTERNAL, err.msg);
        df_frame_buf_init(&r->fb);
        rc = df_frame_encode_blob(r->h.id, DF_FT_INFO_RESULT, r->json, strlen(r->json), &r->fb.o,
                                  &err);
        if (rc) return req_error(r, rc, err.msg);
        return req_write(r);
    }
    case DF_FT_INFER:
        return handle_infer(s, r);
    case DF_FT_AUTH: {
        char tok[DF_FRAME_MAX_TOKEN + 1];
        int rc = df_frame_decode_auth(r->payload, r->h.length, tok, &err);
        int ok = rc == DF_OK && (!s->cfg.auth || !s->cfg.auth->auth_all ||
                                 df_config_token_match(s->cfg.auth, tok, strlen(tok)));
        memset(tok, 0, sizeof tok);
        memset(r->payload, 0, r->h.length);
        if (!ok) {
            auth_refused(s);
            r->c->draining = 1;
            conn_update_reading(r->c);
            r->close_after = 1;
            return req_error(r, DF_EAUTH, rc ? err.msg : "wrong token (auth = all); closing");
        }
        r->c->authed = 1;
        df_frame_buf_init(&r->fb);
        df_frame_encode_blob(r->h.id, DF_FT_AUTH_OK, NULL, 0, &r->fb.o, &err);
        return req_write(r);
    }
    default: {
        char msg[128];
        snprintf(msg, sizeof msg, "%s frames are sent by the server, not to it",
                 df_frame_type_name(r->h.type));
        return req_error(r, DF_EUNSUPPORTED, msg);
    }
    }
}

/* ------------------------------------------------------------ reading */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    if (c->cur && c->rlen == 0) {
        req_t *r = c->cur;
        *buf = uv_buf_init((char *)r->payload + r->got, (unsigned)(r->h.length - r->got));
        return;
    }
    *buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(RBUF_SIZE - c->rlen));
}

/* Consume bytes in c->rbuf: headers, small payloads. */
static void parse(conn_t *c)
{
    df_sock_t *s = c->s;
    size_t off = 0;
    while (!c->closed && !c->draining) {
        size_t avail = c->rlen - off;
        if (c->cur) {
            req_t *r = c->cur;
            size_t n = r->h.length - r->got;
            if (n > avail) n = avail;
            memcpy(r->payload + r->got, c->rbuf + off, n);
            r->got += n;
            off += n;
            if (r->got < r->h.length) break;
            c->cur = NULL;
            c->frame_start_ms = 0;
            dispatch(s, r);
            continue;
        }
        if (avail < DF_FRAME_HEADER_SIZE) break;
        df_frame_header_t h;
        df_error_t err = {0};
        int fatal = 0;
        int rc = df_frame_header_decode(c->rbuf + off, avail, s->cfg.max_frame_bytes, &h, &fatal,
                                        &err);
        off += DF_FRAME_HEADER_SIZE;
        if (rc && fatal) {
            conn_fatal(c, rc == DF_EFORMAT ? 0 : h.id, rc, err.msg);
            break;
        }
        if (s->cfg.auth && s->cfg.auth->auth_all && !c->authed && h.type != DF_FT_PING) {
            /* auth = all: nothing but PING before a valid AUTH; a payload
             * is not read for a client without one */
            if (h.type != DF_FT_AUTH) {
                auth_refused(s);
                char msg[160];
                snprintf(msg, sizeof msg,
                         "authentication required (auth = all): send an AUTH frame with a token "
                         "before %s; closing", df_frame_type_name(h.type));
                conn_fatal(c, h.id, DF_EAUTH, msg);
                break;
            }
            if (h.length > 2 + DF_FRAME_MAX_TOKEN) {
                auth_refused(s);
                conn_fatal(c, h.id, DF_EAUTH, "AUTH payload too long for a token; closing");
                break;
            }
        }
        /* the payload is counted by its declared length before a byte of
         * it is read; one that does not fit is refused and the connection
         * closed (its payload is never read) */
        if (s->in_bytes + h.length > s->cfg.max_input_buffered_bytes) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "server busy: %.1f MiB of frames held, this one declares %.1f MiB "
                     "(max_input_buffered_bytes %.1f MiB); retry later",
                     (double)s->in_bytes / 1048576.0, (double)h.length / 1048576.0,
                     (double)s->cfg.max_input_buffered_bytes / 1048576.0);
            conn_fatal(c, h.id, DF_EOVERLOAD, msg);
            break;
        }
        req_t *r = req_get(s, c);
        if (!r || req_reserve(r, h.length ? h.length : 1)) {
            if (r) req_put(s, r);
            conn_fatal(c, h.id, DF_ENOMEM, "out of memory for the frame payload");
            break;
        }
        r->in_charged = h.length;
        s->in_bytes += h.length;
        r->h = h;
        r->hdr_rc = rc;
        if (rc) r->hdr_err = err;
        c->cur = r;
        /* the frame's clock starts with its header, or with the first
         * byte of a header that came in pieces */
        if (!c->frame_start_ms) c->frame_start_ms = now_ms(s);
    }
    if (off) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    if (!c->cur && c->rlen > 0 && !c->frame_start_ms) c->frame_start_ms = now_ms(s);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = st->data;
    if (nread == UV_EOF && !c->closed) {
        /* the client shut down its sending side (or closed): answer what
         * it sent before, then close; a frame it did not finish is
         * dropped. A client that closed entirely makes the writes fail,
         * which closes the connection too. */
        c->eof = 1;
        conn_update_reading(c);
        if (c->cur) {
            req_t *r = c->cur;
            c->cur = NULL;
            req_put(c->s, r);
        }
        c->rlen = 0;
        c->frame_start_ms = 0;
        if (!c->closed && c->inflight == 0 && c->queued == 0) conn_close(c);
        return;
    }
    if (nread < 0) {
        conn_close(c); /* an error; jobs in flight complete into nothing */
        return;
    }
    if (nread == 0) return;
    c->last_active_ms = now_ms(c->s);
    if (c->cur && buf->base == (char *)c->cur->payload + c->cur->got) {
        req_t *r = c->cur;
        r->got += (size_t)nread;
        if (r->got == r->h.length) {
            c->cur = NULL;
            c->frame_start_ms = 0;
            dispatch(c->s, r);
        }
        return;
    }
    c->rlen += (size_t)nread;
    parse(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    df_sock_t *s = server->data;
    if (status < 0) return;
    conn_t *c = calloc(1, sizeof *c);
    if (!c) return;
    c->s = s;
    int rc = (server == (uv_stream_t *)&s->tcp) ? uv_tcp_init(&s->loop, &c->h.tcp)
                                                : uv_pipe_init(&s->loop, &c->h.pipe, 0);
    if (rc) {
        free(c);
        return;
    }
    c->h.stream.data = c;
    c->refs = 1;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    c->last_active_ms = c->last_write_ms = now_ms(s);
    if (uv_accept(server, &c->h.stream)) {
        conn_close(c);
        return;
    }
    if (s->n_conns > s->cfg.max_connections) {
        conn_fatal(c, 0, DF_ELIMIT, "too many connections");
        return;
    }
    if (server == (uv_stream_t *)&s->tcp) {
        struct sockaddr_storage pa;
        int pl = sizeof pa;
        if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&pa, &pl) == 0)
            df__peer_key((struct sockaddr *)&pa, &c->peer);
        if (df__peers_add(&s->peers, &c->peer, s->cfg.max_connections_per_peer)) {
            char addr[64], msg[192];
            df__peer_str(&c->peer, addr, sizeof addr);
            snprintf(msg, sizeof msg, "too many connections from %s (max_connections_per_peer %d)",
                     addr, s->cfg.max_connections_per_peer);
            conn_fatal(c, 0, DF_ELIMIT, msg);
            return;
        }
        c->peer_counted = 1;
    }
    if (server == (uv_stream_t *)&s->tcp) uv_tcp_nodelay(&c->h.tcp, 1);
    conn_update_reading(c);
}

/* A frame that did not complete in body_timeout_s: an ERROR if the socket
 * takes it at once, then close (the client may be reading nothing). */
static void conn_timeout(conn_t *c, uint64_t waited_ms)
{
    df_sock_t *s = c->s;
    char msg[160];
    snprintf(msg, sizeof msg, "frame not complete after %.1f s (body_timeout_s %d); closing",
             (double)waited_ms / 1000.0, s->cfg.body_timeout_s);
    if (c->queued == 0) {
        df_frame_buf_t fb;
        df_error_t e;
        df_frame_buf_init(&fb);
        if (df_frame_encode_error(c->cur ? c->cur->h.id : 0, DF_ETIMEDOUT, msg, &fb.o, &e) == 0) {
            uv_buf_t b[DF_FRAME_MAX_SEGS];
            for (int i = 0; i < fb.o.n_segs; i++)
                b[i] = uv_buf_init((char *)fb.o.segs[i].base, (unsigned)fb.o.segs[i].len);
            (void)uv_try_write(&c->h.stream, b, (unsigned)fb.o.n_segs);
        }
    }
    s->timeouts++;
    conn_close(c);
}

/* Every 250 ms: close connections idle for idle_timeout_s (nothing
 * received, nothing in flight), whose answers have not moved for
 * idle_timeout_s (a client that stopped reading), or whose frame has been
 * arriving for more than body_timeout_s (a byte at a time keeps the idle
 * clock from ever running out). */
static void on_idle_timer(uv_timer_t *t)
{
    df_sock_t *s = t->data;
    uint64_t now = now_ms(s), lim = (uint64_t)s->cfg.idle_timeout_s * 1000;
    uint64_t blim = (uint64_t)s->cfg.body_timeout_s * 1000;
    int timed_out = 0;
    for (conn_t *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->closed) continue;
        if (c->frame_start_ms && now - c->frame_start_ms > blim && !c->draining) {
            conn_timeout(c, now - c->frame_start_ms);
            timed_out++;
        } else if (c->queued > 0 && now - c->last_write_ms > lim) {
            conn_close(c);
            timed_out++;
        } else if (c->inflight == 0 && c->queued == 0 && now - c->last_active_ms > lim)
            conn_close(c);
    }
    if (timed_out && now - s->last_timeout_log > 1000) {
        df__log("socket: closed %d connection%s: a frame incomplete after %d s (body_timeout_s) "
                "or answers unread for %d s (idle_timeout_s)",
                timed_out, timed_out > 1 ? "s" : "", s->cfg.body_timeout_s, s->cfg.idle_timeout_s);
        s->last_timeout_log = now;
    }
}

/* ------------------------------------------------------------ lifecycle */

static void close_listeners(df_sock_t *s)
{
    if (s->has_tcp && !uv_is_closing((uv_handle_t *)&s->tcp)) uv_close((uv_handle_t *)&s->tcp, NULL);
    if (s->has_pipe && !uv_is_closing((uv_handle_t *)&s->pipe)) {
        uv_close((uv_handle_t *)&s->pipe, NULL);
        unlink(s->cfg.unix_path);
    }
}

static void on_quiesce(uv_async_t *a) { close_listeners(a->data); }

static void on_stop(uv_async_t *a)
{
    df_sock_t *s = a->data;
    close_listeners(s);
    for (conn_t *c = s->conns; c; c = c->next) conn_close(c);
    uv_close((uv_handle_t *)&s->idle_timer, NULL);
    uv_close((uv_handle_t *)&s->done_async, NULL);
    uv_close((uv_handle_t *)&s->quiesce_async, NULL);
    uv_close((uv_handle_t *)&s->stop_async, NULL);
}

static void *loop_main(void *arg)
{
    df_sock_t *s = arg;
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

void df_sock_config_from(df_sock_config_t *o, const df_config_t *cfg)
{
    memset(o, 0, sizeof *o);
    strcpy(o->host, "127.0.0.1");
    o->port = 8001;
    o->max_frame_bytes = DF_FRAME_DEFAULT_MAX_PAYLOAD;
    o->max_inflight = 256;
    o->idle_timeout_s = 60;
    o->body_timeout_s = 60;
    o->max_connections_per_peer = 256;
    o->max_connections = 1024;
    o->max_queued_bytes = 64u << 20;
    o->max_input_buffered_bytes = 512ull << 20;
    o->pool_keep_bytes = 64u << 20;
    if (!cfg) return;
    o->pool_keep_bytes = (size_t)cfg->pool_keep_bytes;
    if (cfg->max_input_buffered_bytes) o->max_input_buffered_bytes = cfg->max_input_buffered_bytes;
    snprintf(o->host, sizeof o->host, "%s", cfg->host);
    o->port = cfg->socket_port;
    snprintf(o->unix_path, sizeof o->unix_path, "%s", cfg->unix_path);
    if (cfg->max_frame_bytes)
        o->max_frame_bytes = cfg->max_frame_bytes > UINT32_MAX ? UINT32_MAX
                                                               : (uint32_t)cfg->max_frame_bytes;
    if (cfg->max_inflight_per_conn > 0) o->max_inflight = cfg->max_inflight_per_conn;
    if (cfg->idle_timeout_s > 0) o->idle_timeout_s = cfg->idle_timeout_s;
    if (cfg->body_timeout_s > 0) o->body_timeout_s = cfg->body_timeout_s;
    o->max_connections_per_peer = cfg->max_connections_per_peer;
    if (cfg->max_connections > 0) o->max_connections = cfg->max_connections;
    o->auth = cfg;
}

static int uverr(df_error_t *err, int rc, const char *what, const char *where)
{
    return df_error_set(err, DF_EIO, "socket front: %s %s: %s", what, where, uv_strerror(rc));
}

int df_sock_start(df_server_t *srv, const df_sock_config_t *cfg, df_sock_t **out,
                  df_error_t *err)
{
    df_sock_t *s = calloc(1, sizeof *s);
    if (!s) return df_error_set(err, DF_ENOMEM, "socket front: out of memory");
    s->srv = srv;
    s->cfg = *cfg;
    s->port = -1;
    pthread_mutex_init(&s->mu, NULL);
    int rc = uv_loop_init(&s->loop);
    if (rc) {
        free(s);
        return uverr(err, rc, "loop", "init");
    }
    uv_async_init(&s->loop, &s->done_async, on_done_async);
    uv_async_init(&s->loop, &s->stop_async, on_stop);
    uv_async_init(&s->loop, &s->quiesce_async, on_quiesce);
    s->done_async.data = s->stop_async.data = s->quiesce_async.data = s;
    uv_timer_init(&s->loop, &s->idle_timer);
    s->idle_timer.data = s;
    char where[DF_PATH_MAX + 300];
    if (cfg->port >= 0) {
        struct sockaddr_storage addr;
        snprintf(where, sizeof where, "%s:%d", cfg->host, cfg->port);
        if (uv_ip4_addr(cfg->host, cfg->port, (struct sockaddr_in *)&addr) &&
            (rc = uv_ip6_addr(cfg->host, cfg->port, (struct sockaddr_in6 *)&addr))) {
            rc = uverr(err, rc, "address", where);
            goto fail;
        }
        uv_tcp_init(&s->loop, &s->tcp);
        s->has_tcp = 1;
        s->tcp.data = s;
        if ((rc = uv_tcp_bind(&s->tcp, (struct sockaddr *)&addr, 0)) ||
            (rc = uv_listen((uv_stream_t *)&s->tcp, 511, on_connection))) {
            rc = uverr(err, rc, "listen on", where);
            goto fail;
        }
        struct sockaddr_storage bound;
        int len = sizeof bound;
        uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&bound, &len);
        s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    }
    if (cfg->unix_path[0]) {
        struct stat st;
        snprintf(where, sizeof where, "unix:%s", cfg->unix_path);
        if (lstat(cfg->unix_path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(cfg->unix_path);
        uv_pipe_init(&s->loop, &s->pipe, 0);
        s->has_pipe = 1;
        s->pipe.data = s;
        if ((rc = uv_pipe_bind(&s->pipe, cfg->unix_path)) ||
            (rc = uv_listen((uv_stream_t *)&s->pipe, 511, on_connection))) {
            s->cfg.unix_path[0] = 0; /* not ours: do not unlink */
            rc = uverr(err, rc, "listen on", where);
            goto fail;
        }
    }
    uv_timer_start(&s->idle_timer, on_idle_timer, 250, 250);
    if (pthread_create(&s->th, NULL, loop_main, s)) {
        rc = df_error_set(err, DF_EINTERNAL, "socket front: cannot start its thread");
        goto fail;
    }
    s->started = 1;
    *out = s;
    return DF_OK;
fail:
    on_stop(&s->stop_async);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    df__peers_free(&s->peers);
    free(s);
    return rc;
}

int df_sock_port(const df_sock_t *s) { return s ? s->port : -1; }

void df_sock_quiesce(df_sock_t *s)
{
    if (s) uv_async_send(&s->quiesce_async);
}

void df_sock_stop(df_sock_t **ps)
{
    df_sock_t *s = *ps;
    *ps = NULL;
    if (!s) return;
    /* from here on, completions are dropped by the worker (never touch the
     * loop's handles while they close) */
    pthread_mutex_lock(&s->mu);
    s->stopped = 1;
    pthread_mutex_unlock(&s->mu);
    uv_async_send(&s->stop_async);
    pthread_join(s->th, NULL);
    pthread_mutex_lock(&s->mu);
    long pending = s->pending;
    req_t *r = s->done_head;
    s->done_head = s->done_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    /* completions that arrived after the loop ended */
    while (r) {
        req_t *n = r->next;
        df_job_free(&r->job);
        r = n;
    }
    uv_loop_close(&s->loop);
    while (s->pool) {
        req_t *p = s->pool;
        s->pool = p->next;
        free(p->payload);
        free(p->clipbuf);
        free(p->encbuf);
        free(p);
    }
    /* with jobs still inside the engine, their callbacks will read s: keep it */
    df__peers_free(&s->peers);
    if (pending == 0) {
        pthread_mutex_destroy(&s->mu);
        free(s);
    }
}

/* ------------------------------------------------------------ main.c hooks */

static df_sock_t *g_sock;
static df_sock_config_t g_cfg;

int df__sock_start_from_config(df_server_t *srv, const df_config_t *cfg, int *port,
                               df_error_t *err)
{
    df_sock_config_from(&g_cfg, cfg);
    int rc = df_sock_start(srv, &g_cfg, &g_sock, err);
    if (rc == DF_OK && port) *port = df_sock_port(g_sock);
    return rc;
}

void df__sock_quiesce(void) { df_sock_quiesce(g_sock); }
void df__sock_stop(void) { df_sock_stop(&g_sock); }

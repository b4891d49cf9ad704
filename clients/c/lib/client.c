/* client.c — libdeformclient: the binary socket connection (deformclient.h).
 *
 * DESIGN
 * The socket is non-blocking; every wait is a poll(). Received bytes go to
 * one grow-only buffer whose first byte is always the start of a frame
 * (consumed frames are moved out with memmove, which only ever moves a
 * partial frame), so a payload sits at offset 24 — 8-byte aligned — and the
 * codec (proto/frame.h) can hand out float32 outputs that point straight
 * into it: a float32 RESULT is never copied before the callback sees it.
 * float16/int16 outputs are decoded into a second grow-only buffer.
 *
 * Requests in flight are kept in a small array (id, callback); answers
 * are matched by id in any order. A submit that cannot write (the server
 * stopped reading because our answers piled up) reads and dispatches
 * answers while it waits, so deep pipelines cannot deadlock.
 *
 * Retry: every request of the protocol is idempotent (INFER is a pure
 * function of its inputs), so a blocking call (df_client_infer, _info,
 * _ping) that was the only request on its connection and lost it — the
 * connection closed or reset before the answer (a daemon killed, a router
 * that lost its upstream) or the server answered DF_ESHUTDOWN (draining) —
 * connects again to the same address and sends the request once more.
 * Behind a router the new connection lands on a live daemon. Pipelined
 * requests are not resent: df_client_reconnect lets the caller do it.
 */
#include "deformclient.h"
#include "frame.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define CLIENT_MAX_PAYLOAD (1u << 30)

enum { K_INFER = 0, K_BLOB = 1, K_AUTH = 2 };

typedef struct blob_wait {
    int done, status;
    char msg[DF_FRAME_MAX_MSG + 1];
    char *data;
    size_t len;
} blob_wait_t;

typedef struct pend {
    uint64_t id;
    int kind;
    df_client_done_cb cb;
    void *user;
} pend_t;

struct df_client {
    int fd;
    uint64_t next_id;
    pend_t *pend;
    size_t n_pend, cap_pend;
    uint8_t *rbuf;           /* frame-aligned receive buffer */
    size_t rlen, rcap;
    float *dec;              /* decoded f16/i16 outputs */
    size_t dec_cap;
    int broken;              /* protocol error: the connection is unusable */
    char addr[512];          /* as given to df_client_connect, for reconnects */
    char token[DF_FRAME_MAX_TOKEN + 1]; /* df_client_auth's, "" = none */
    unsigned retries;        /* requests sent a second time (df_client_retries) */
};

/* ------------------------------------------------------------ connect */

/* A connected non-blocking socket to address in *out_fd. */
static int open_fd(const char *address, int *out_fd, df_error_t *err)
{
    if (!address || !*address) return df_error_set(err, DF_EINVAL, "empty address");
    int fd = -1;
    const char *path = NULL;
    if (!strncmp(address, "unix:", 5)) path = address + 5;
    else if (address[0] == '/' || address[0] == '.') path = address;
    if (path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof sa.sun_path)
            return df_error_set(err, DF_EINVAL, "unix socket path too long: %s", path);
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
            int e = errno;
            if (fd >= 0) close(fd);
            return df_error_set(err, DF_EIO, "connect unix:%s: %s", path, strerror(e));
        }
    } else {
        const char *a = !strncmp(address, "tcp://", 6) ? address + 6 : address;
        char host[256];
        const char *colon = strrchr(a, ':');
        if (!colon || colon == a || (size_t)(colon - a) >= sizeof host)
            return df_error_set(err, DF_EINVAL, "address \"%s\": expected HOST:PORT or unix:PATH",
                                address);
        memcpy(host, a, (size_t)(colon - a));
        host[colon - a] = 0;
        if (host[0] == '[') { /* [::1]:8001 */
            memmove(host, host + 1, strlen(host));
            char *rb = strchr(host, ']');
            if (rb) *rb = 0;
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(host, colon + 1, &hints, &res);
        if (rc) return df_error_set(err, DF_EINVAL, "address \"%s\": %s", address, gai_strerror(rc));
        int e = 0;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) { e = errno; continue; }
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
            e = errno;
            close(fd);
            fd = -1;
        }
        freeaddrinfo(res);
        if (fd < 0) return df_error_set(err, DF_EIO, "connect %s: %s", address, strerror(e));
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *out_fd = fd;
    return DF_OK;
}

int df_client_connect(const char *address, df_client_t **out, df_error_t *err)
{
    *out = NULL;
    int fd = -1;
    if (address && strlen(address) >= sizeof((df_client_t *)0)->addr)
        return df_error_set(err, DF_EINVAL, "address too long");
    int rc = open_fd(address, &fd, err);
    if (rc) return rc;
    df_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    c->fd = fd;
    snprintf(c->addr, sizeof c->addr, "%s", address);
    c->next_id = 1;
    c->rcap = 1 << 16;
    c->rbuf = malloc(c->rcap);
    if (!c->rbuf) {
        close(fd);
        free(c);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    *out = c;
    return DF_OK;
}

void df_client_close(df_client_t **pc)
{
    df_client_t *c = *pc;
    *pc = NULL;
    if (!c) return;
    close(c->fd);
    free(c->pend);
    free(c->rbuf);
    free(c->dec);
    memset(c->token, 0, sizeof c->token);
    free(c);
}

/* requests of the caller in flight (an unanswered AUTH is not one) */
static size_t user_pending(const df_client_t *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_pend; i++) n += c->pend[i].kind != K_AUTH;
    return n;
}

size_t df_client_in_flight(const df_client_t *c) { return user_pending(c); }

unsigned df_client_retries(const df_client_t *c) { return c->retries; }

static int auth_now(df_client_t *c, df_error_t *err);

int df_client_reconnect(df_client_t *c, df_error_t *err)
{
    int fd = -1;
    int rc = open_fd(c->addr, &fd, err);
    if (rc) return rc;
    close(c->fd);
    c->fd = fd;
    c->rlen = 0;
    c->n_pend = 0; /* answers of the old connection never come */
    c->broken = 0;
    return c->token[0] ? auth_now(c, err) : DF_OK;
}

/* A blocking call that was alone on the connection (`others` requests were
 * in flight before it) failed with rc: worth one more try on a new
 * connection? */
static int retry_once(df_client_t *c, int rc, size_t others)
{
    if (others || !((rc == DF_EIO && c->broken) || rc == DF_ESHUTDOWN)) return 0;
    if (df_client_reconnect(c, NULL)) return 0;
    c->retries++;
    return 1;
}

void df_client_cancel_all(df_client_t *c) { c->n_pend = 0; }

/* ------------------------------------------------------------ receiving */

static pend_t *pend_find(df_client_t *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_pend; i++)
        if (c->pend[i].id == id) return &c->pend[i];
    return NULL;
}

static void pend_remove(df_client_t *c, pend_t *p)
{
    *p = c->pend[--c->n_pend];
}

static int decode_outputs(df_client_t *c, const df_frame_result_t *fr, df_client_result_t *r,
                          df_error_t *err)
{
    size_t need = 0;
    for (int o = 0; o < fr->n_outputs; o++)
        if (fr->outputs[o].type != DF_WIRE_F32) need += fr->outputs[o].nbytes / 2;
    if (need > c->dec_cap) {
        float *p = realloc(c->dec, need * sizeof(float));
        if (!p) return df_error_set(err, DF_ENOMEM, "out of memory decoding a result");
        c->dec = p;
        c->dec_cap = need;
    }
    float *d = c->dec;
    r->n_poses = (int)fr->n_poses;
    r->n_outputs = fr->n_outputs;
    for (int o = 0; o < fr->n_outputs; o++) {
        const df_frame_tensor_t *t = &fr->outputs[o];
        df_client_tensor_t *ct = &r->outputs[o];
        memcpy(ct->name, t->name, DF_NAME_MAX);
        ct->ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) ct->shape[k] = t->dims[k];
        ct->encoding = t->type;
        memcpy(ct->scale, t->scale, sizeof ct->scale);
        memcpy(ct->offset, t->offset, sizeof ct->offset);
        if (t->type == DF_WIRE_F32) {
            ct->data = t->data;
            continue;
        }
        size_t n = t->nbytes / 2;
        if (t->type == DF_WIRE_F16) {
            const uint16_t *h = t->data;
            for (size_t i = 0; i < n; i++) d[i] = df_f16_to_f32(h[i]);
        } else {
            const int16_t *q = t->data;
            int three = t->dims[t->ndim - 1] == 3;
            for (size_t i = 0; i < n; i++) {
                int k = three ? (int)(i % 3) : 0;
                d[i] = t->offset[k] + t->scale[k] * (float)q[i];
            }
        }
        ct->data = d;
        d += n;
    }
    return DF_OK;
}

/* Handle one complete frame at c->rbuf. Returns 1 if a callback ran, 0,
 * or a negative code for a protocol error. */
static int handle_frame(df_client_t *c, df_error_t *err)
{
    df_frame_t f;
    int rc = df_frame_decode(c->rbuf, c->rlen, CLIENT_MAX_PAYLOAD, &f, NULL, err);
    if (rc) {
        c->broken = 1;
        return rc;
    }
    pend_t *p = pend_find(c, f.h.id);
    if (f.h.type == DF_FT_ERROR && f.h.id == 0) {
        /* a connection-level error (our ids start at 1): the server closes */
        c->broken = 1;
        return df_error_set(err, f.u.error.code, "server: %s", f.u.error.msg);
    }
    if (!p) return 0; /* an answer nobody waits for (cancelled) */
    pend_t pe = *p;
    pend_remove(c, p);
    if (pe.kind == K_AUTH) {
        if (f.h.type == DF_FT_AUTH_OK) return 0;
        /* a refused token: the server closes the connection after this */
        c->broken = 1;
        if (f.h.type == DF_FT_ERROR)
            return df_error_set(err, f.u.error.code, "server: %s", f.u.error.msg);
        return df_error_set(err, DF_EFORMAT, "unexpected %s frame for an AUTH",
                            df_frame_type_name(f.h.type));
    }
    if (pe.kind == K_BLOB) {
        blob_wait_t *bw = pe.user;
        bw->done = 1;
        if (f.h.type == DF_FT_ERROR) {
            bw->status = f.u.error.code;
            snprintf(bw->msg, sizeof bw->msg, "%s", f.u.error.msg);
        } else if (f.h.type == DF_FT_PONG || f.h.type == DF_FT_INFO_RESULT ||
                   f.h.type == DF_FT_AUTH_OK) {
            bw->data = malloc(f.u.blob.len + 1);
            if (!bw->data) { bw->status = DF_ENOMEM; return 1; }
            memcpy(bw->data, f.u.blob.data, f.u.blob.len);
            bw->data[f.u.blob.len] = 0;
            bw->len = f.u.blob.len;
        } else {
            bw->status = DF_EFORMAT;
            snprintf(bw->msg, sizeof bw->msg, "unexpected %s frame", df_frame_type_name(f.h.type));
        }
        return 1;
    }
    df_client_result_t res;
    res.id = f.h.id;
    res.status = DF_OK;
    res.error[0] = 0;
    res.n_poses = 0;
    res.n_outputs = 0;
    res.wire_bytes = DF_FRAME_HEADER_SIZE + f.h.length;
    if (f.h.type == DF_FT_ERROR) {
        res.status = f.u.error.code;
        snprintf(res.error, sizeof res.error, "%s", f.u.error.msg);
    } else if (f.h.type == DF_FT_RESULT) {
        df_error_t e2 = {0};
        if (decode_outputs(c, &f.u.result, &res, &e2)) {
            res.status = e2.code;
            snprintf(res.error, sizeof res.error, "%s", e2.msg);
        }
    } else {
        res.status = DF_EFORMAT;
        snprintf(res.error, sizeof res.error, "unexpected %s frame for an INFER",
                 df_frame_type_name(f.h.type));
    }
    if (pe.cb) pe.cb(&res, pe.user);
    return 1;
}

/* Dispatch every complete frame in the buffer. */
static int process(df_client_t *c, df_error_t *err)
{
    int ran = 0;
    while (c->rlen >= DF_FRAME_HEADER_SIZE) {
        df_frame_header_t h;
        int fatal = 0;
        int rc = df_frame_header_decode(c->rbuf, c->rlen, CLIENT_MAX_PAYLOAD, &h, &fatal, err);
        if (rc && fatal) {
            c->broken = 1;
            return rc;
        }
        size_t need = DF_FRAME_HEADER_SIZE + (size_t)h.length;
        if (c->rlen < need) {
            if (need > c->rcap) {
                uint8_t *p = realloc(c->rbuf, need);
                if (!p) return df_error_set(err, DF_ENOMEM, "out of memory for a %zu-byte frame", need);
                c->rbuf = p;
                c->rcap = need;
            }
            break;
        }
        if (rc == DF_OK) {
            rc = handle_frame(c, err);
            if (rc < 0) return rc;
            ran += rc;
        }
        memmove(c->rbuf, c->rbuf + need, c->rlen - need);
        c->rlen -= need;
    }
    return ran;
}

/* Read what is available (after poll said so). */
static int read_some(df_client_t *c, df_error_t *err)
{
    if (c->rlen == c->rcap) {
        uint8_t *p = realloc(c->rbuf, c->rcap * 2);
        if (!p) return df_error_set(err, DF_ENOMEM, "out of memory");
        c->rbuf = p;
        c->rcap *= 2;
    }
    ssize_t n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
    if (n == 0) {
        c->broken = 1;
        return df_error_set(err, DF_EIO, "the server closed the connection");
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return 0;
        c->broken = 1;
        return df_error_set(err, DF_EIO, "read: %s", strerror(errno));
    }
    c->rlen += (size_t)n;
    return (int)n;
}

int df_client_poll(df_client_t *c, int timeout_ms, df_error_t *err)
{
    int ran = process(c, err);
    if (ran != 0) return ran;
    for (;;) {
        if (c->broken) return df_error_set(err, DF_EIO, "connection is broken");
        struct pollfd pfd = {c->fd, POLLIN, 0};
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return 0;
        int rc = read_some(c, err);
        if (rc < 0) return rc;
        ran = process(c, err);
        if (ran != 0 || timeout_ms >= 0) return ran;
    }
}

int df_client_wait(df_client_t *c, uint64_t id, df_error_t *err)
{
    while (id ? pend_find(c, id) != NULL : user_pending(c) > 0) {
        int rc = df_client_poll(c, -1, err);
        if (rc < 0) return rc;
    }
    return DF_OK;
}

/* ------------------------------------------------------------ sending */

static int send_frame(df_client_t *c, const df_frame_out_t *o, df_error_t *err)
{
    struct iovec iov[DF_FRAME_MAX_SEGS];
    int n = o->n_segs, first = 0;
    for (int i = 0; i < n; i++) iov[i] = (struct iovec){(void *)o->segs[i].base, o->segs[i].len};
    while (first < n) {
        if (c->broken) return df_error_set(err, DF_EIO, "connection is broken");
        ssize_t w = writev(c->fd, iov + first, n - first > 1024 ? 1024 : n - first);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) {
                c->broken = 1;
                return df_error_set(err, DF_EIO, "write: %s", strerror(errno));
            }
            /* full: read answers while the server drains */
            struct pollfd pfd = {c->fd, POLLIN | POLLOUT, 0};
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return df_error_set(err, DF_EIO, "poll: %s", strerror(errno));
            if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
                int rc = read_some(c, err);
                if (rc < 0) return rc;
                if ((rc = process(c, err)) < 0) return rc;
            }
            continue;
        }
        size_t left = (size_t)w;
        while (first < n && left >= iov[first].iov_len) left -= iov[first++].iov_len;
        if (first < n) {
            iov[first].iov_base = (char *)iov[first].iov_base + left;
            iov[first].iov_len -= left;
        }
    }
    return DF_OK;
}

static int pend_add(df_client_t *c, uint64_t id, int kind, df_client_done_cb cb, void *user,
                    df_error_t *err)
{
    if (c->n_pend == c->cap_pend) {
        size_t cap = c->cap_pend ? 2 * c->cap_pend : 64;
        pend_t *p = realloc(c->pend, cap * sizeof *p);
        if (!p) return df_error_set(err, DF_ENOMEM, "out of memory");
        c->pend = p;
        c->cap_pend = cap;
    }
    c->pend[c->n_pend++] = (pend_t){id, kind, cb, user};
    return DF_OK;
}

int df_client_submit(df_client_t *c, const df_client_request_t *q, df_client_done_cb cb,
                     void *user, uint64_t *id_out, df_error_t *err)
{
    df_frame_infer_t fi;
    memset(&fi, 0, offsetof(df_frame_infer_t, inputs));
    if (!q->character) return df_error_set(err, DF_EINVAL, "request without a character");
    if (q->n_inputs < 0 || q->n_inputs > DF_CLIENT_MAX_IO || q->n_outputs < 0 ||
        q->n_outputs > DF_CLIENT_MAX_IO)
        return df_error_set(err, DF_ELIMIT, "too many inputs or outputs");
    fi.n_poses = (uint32_t)(q->n_poses > 0 ? q->n_poses : 1);
    int enc = q->encoding ? df_wire_enc_parse(q->encoding) : DF_WIRE_F32;
    if (enc < 0)
        return df_error_set(err, DF_EINVAL, "encoding \"%s\" (float32, float16 or int16)",
                            q->encoding);
    fi.encoding = (uint8_t)enc;
    if (!q->skinning) fi.pose_flags = 0;
    else if (!strcmp(q->skinning, "lbs")) fi.pose_flags = DF_POSE_LBS;
    else if (!strcmp(q->skinning, "dqs")) fi.pose_flags = DF_POSE_DQS;
    else return df_error_set(err, DF_EINVAL, "skinning \"%s\" (lbs or dqs)", q->skinning);
    if (strlen(q->character) >= DF_NAME_MAX)
        return df_error_set(err, DF_ELIMIT, "character name too long");
    strcpy(fi.character, q->character);
    if (q->clip && q->clip[0]) {
        if (strlen(q->clip) >= DF_NAME_MAX) return df_error_set(err, DF_ELIMIT, "clip name too long");
        if (!q->times) return df_error_set(err, DF_EINVAL, "clip \"%s\" without times", q->clip);
        strcpy(fi.clip, q->clip);
        fi.times = q->times;
    }
    if ((q->sequence_name && q->sequence_name[0]) || q->sequence_id) {
        fi.seq = 1;
        fi.seq_flags = (uint8_t)((q->sequence_start ? DF_SEQ_START : 0) |
                                 (q->sequence_end ? DF_SEQ_END : 0));
        if (q->sequence_name && q->sequence_name[0]) {
            if (strlen(q->sequence_name) >= DF_NAME_MAX)
                return df_error_set(err, DF_ELIMIT, "sequence name longer than %d bytes",
                                    DF_NAME_MAX - 1);
            strcpy(fi.seq_id_str, q->sequence_name);
        } else {
            fi.seq_id = q->sequence_id;
        }
    } else if (q->sequence_start || q->sequence_end) {
        return df_error_set(err, DF_EINVAL, "sequence_start / sequence_end without a sequence id");
    }
    fi.n_outputs = q->n_outputs;
    for (int o = 0; o < q->n_outputs; o++) {
        if (!q->outputs[o] || strlen(q->outputs[o]) >= DF_NAME_MAX)
            return df_error_set(err, DF_EINVAL, "output %d: bad name", o);
        strcpy(fi.outputs[o], q->outputs[o]);
    }
    fi.n_inputs = q->n_inputs;
    for (int i = 0; i < q->n_inputs; i++) {
        const df_client_tensor_t *t = &q->inputs[i];
        df_frame_tensor_t *ft = &fi.inputs[i];
        memset(ft, 0, sizeof *ft);
        memcpy(ft->name, t->name, DF_NAME_MAX);
        ft->name[DF_NAME_MAX - 1] = 0;
        ft->type = DF_DT_F32;
        if (t->ndim < 1 || t->ndim > DF_MAX_DIMS)
            return df_error_set(err, DF_EINVAL, "input \"%s\": ndim %d", ft->name, t->ndim);
        ft->ndim = t->ndim;
        size_t n = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] <= 0 || t->shape[k] > UINT32_MAX)
                return df_error_set(err, DF_EINVAL, "input \"%s\": shape[%d] = %lld", ft->name, k,
                                    (long long)t->shape[k]);
            ft->dims[k] = (uint32_t)t->shape[k];
            n *= (size_t)t->shape[k];
        }
        ft->data = t->data;
        ft->nbytes = n * sizeof(float);
    }
    uint64_t id = c->next_id++;
    df_frame_buf_t fb;
    df_frame_buf_init(&fb);
    int rc = df_frame_encode_infer(id, &fi, &fb.o, err);
    if (rc) return rc;
    if ((rc = pend_add(c, id, K_INFER, cb, user, err))) return rc;
    if ((rc = send_frame(c, &fb.o, err))) return rc;
    if (id_out) *id_out = id;
    return DF_OK;
}

/* ------------------------------------------------------------ blocking */

static int blob_call_once(df_client_t *c, int type, const char *name, const void *data,
                          size_t len, blob_wait_t *bw, df_error_t *err)
{
    uint64_t id = c->next_id++;
    df_frame_buf_t fb;
    df_frame_buf_init(&fb);
    int rc = type == DF_FT_INFO   ? df_frame_encode_info(id, name, &fb.o, err)
             : type == DF_FT_AUTH ? df_frame_encode_auth(id, name, &fb.o, err)
                                  : df_frame_encode_blob(id, type, data, len, &fb.o, err);
    if (rc) return rc;
    memset(bw, 0, sizeof *bw);
    if ((rc = pend_add(c, id, K_BLOB, NULL, bw, err))) return rc;
    if ((rc = send_frame(c, &fb.o, err))) return rc;
    if ((rc = df_client_wait(c, id, err))) return rc;
    if (bw->status) {
        free(bw->data);
        bw->data = NULL;
        return df_error_set(err, bw->status, "server: %s", bw->msg);
    }
    return DF_OK;
}

static int blob_call(df_client_t *c, int type, const char *name, const void *data, size_t len,
                     blob_wait_t *bw, df_error_t *err)
{
    size_t others = user_pending(c);
    int rc = blob_call_once(c, type, name, data, len, bw, err);
    if (rc && retry_once(c, rc, others))
        rc = blob_call_once(c, type, name, data, len, bw, err);
    return rc;
}

/* AUTH is sent without waiting for its answer: the next request follows
 * at once (behind the nginx router, whose preread holds the connection
 * until it sees the first request's character, waiting would never end).
 * AUTH_OK is consumed when answers are read; a refusal ends the connection
 * and whichever call reads it returns DF_EAUTH with the server's message. */
static int auth_now(df_client_t *c, df_error_t *err)
{
    uint64_t id = c->next_id++;
    df_frame_buf_t fb;
    df_frame_buf_init(&fb);
    int rc = df_frame_encode_auth(id, c->token, &fb.o, err);
    if (!rc) rc = pend_add(c, id, K_AUTH, NULL, NULL, err);
    if (!rc) rc = send_frame(c, &fb.o, err);
    memset(fb.meta, 0, sizeof fb.meta);
    return rc;
}

int df_client_auth(df_client_t *c, const char *token, df_error_t *err)
{
    size_t n = token ? strlen(token) : 0;
    if (n < 1 || n > DF_FRAME_MAX_TOKEN)
        return df_error_set(err, DF_EINVAL, "token of %zu bytes (1..%d)", n, DF_FRAME_MAX_TOKEN);
    memcpy(c->token, token, n + 1);
    return auth_now(c, err);
}

int df_client_ping(df_client_t *c, df_error_t *err)
{
    blob_wait_t bw;
    const char payload[8] = "deformd";
    int rc = blob_call(c, DF_FT_PING, NULL, payload, sizeof payload, &bw, err);
    if (rc) return rc;
    rc = (bw.len == sizeof payload && !memcmp(bw.data, payload, sizeof payload))
             ? DF_OK
             : df_error_set(err, DF_EFORMAT, "PONG does not echo the PING");
    free(bw.data);
    return rc;
}

int df_client_info(df_client_t *c, const char *name, char **json, df_error_t *err)
{
    blob_wait_t bw;
    int rc = blob_call(c, DF_FT_INFO, name ? name : "", NULL, 0, &bw, err);
    if (rc) return rc;
    *json = bw.data;
    return DF_OK;
}

typedef struct copy_ctx {
    df_client_result_t *out;
    int rc;
} copy_ctx_t;

static void copy_result(const df_client_result_t *res, void *user)
{
    copy_ctx_t *cx = user;
    df_client_result_t *o = cx->out;
    *o = *res;
    for (int i = 0; i < res->n_outputs; i++) o->outputs[i].data = NULL;
    for (int i = 0; i < res->n_outputs; i++) {
        size_t n = 1;
        for (int k = 0; k < res->outputs[i].ndim; k++) n *= (size_t)res->outputs[i].shape[k];
        float *d = malloc(n * sizeof(float) + 1);
        if (!d) {
            cx->rc = DF_ENOMEM;
            return;
        }
        memcpy(d, res->outputs[i].data, n * sizeof(float));
        o->outputs[i].data = d;
    }
}

static int infer_once(df_client_t *c, const df_client_request_t *q, df_client_result_t *out,
                      df_error_t *err)
{
    memset(out, 0, sizeof *out);
    copy_ctx_t cx = {out, DF_OK};
    uint64_t id;
    int rc = df_client_submit(c, q, copy_result, &cx, &id, err);
    if (rc) return rc;
    if ((rc = df_client_wait(c, id, err))) return rc;
    if (cx.rc) return df_error_set(err, cx.rc, "out of memory copying the result");
    if (out->status) return df_error_set(err, out->status, "%s", out->error);
    return DF_OK;
}

int df_client_infer(df_client_t *c, const df_client_request_t *q, df_client_result_t *out,
                    df_error_t *err)
{
    size_t others = user_pending(c);
    int rc = infer_once(c, q, out, err);
    int seq = (q->sequence_name && q->sequence_name[0]) || q->sequence_id;
    if (rc && !seq && retry_once(c, rc, others)) { /* a sequence's frame may have run */
        df_client_result_free(out);
        rc = infer_once(c, q, out, err);
    }
    return rc;
}

void df_client_result_free(df_client_result_t *r)
{
    for (int i = 0; i < r->n_outputs && i < DF_CLIENT_MAX_IO; i++) {
        free((void *)r->outputs[i].data);
        r->outputs[i].data = NULL;
    }
    r->n_outputs = 0;
}

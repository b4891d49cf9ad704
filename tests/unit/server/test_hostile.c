/* test_hostile.c — the daemon against bad files and hostile clients.
 *
 * Each test starts the real bin/deformd (daemon_util.h) with limits small
 * enough to reach in a second or two, does what an attacker or an unlucky
 * operator would do, and then checks that the daemon is alive, that the
 * refusal came with the documented status and a message naming the limit,
 * and that a valid request is still answered correctly (against core's own
 * evaluation of the model file).
 *
 *  - test_model_rewritten_during_reload: a model file of ~2 MB rewritten in
 *    place (truncated, then written again) while SIGHUP reloads run: the
 *    daemon never dies (it did of SIGBUS when core mapped the file) and
 *    keeps serving the model. Two faults ended the daemon here: SIGBUS
 *    from the mapped file, and a SIGHUP arriving during a rescan, which
 *    went to a thread started before main (OpenBLAS's) that did not block
 *    it.
 *  - test_output_limits: answers too large for max_output_bytes (413 /
 *    DF_ELIMIT) and answers beyond max_output_inflight_bytes while a client
 *    does not read its own (429 / DF_EOVERLOAD), then served once it left.
 *  - test_input_budget: request bodies and frame payloads counted by their
 *    declared length against max_input_buffered_bytes, refused (429 /
 *    DF_EOVERLOAD) before they are read when they do not fit.
 *  - test_pool_memory_returned: after eight 23 MB answers the daemon's RSS
 *    returns to within the pools' keep (pool_keep_bytes).
 *  - test_slow_clients: one peer trickling a byte at a time on both fronts
 *    is cut off by header_timeout_s / body_timeout_s and capped by
 *    max_connections_per_peer, while another peer is served.
 *  - test_socket_write_stall: a socket client that stops reading is closed
 *    after idle_timeout_s without progress.
 *  - test_half_close: requests followed by shutdown(SHUT_WR) are all
 *    answered on both fronts, then the daemon closes.
 *  - test_minor_refusals: %00 in names, Transfer-Encoding gzip, a 2^63-byte
 *    chunk, absolute paths in the index, a ready file on a full disk.
 */
#include "daemon_util.h"
#include "frame.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdatomic.h>

static char repo[1024];
static CURL *C;

/* ------------------------------------------------------------ helpers */

/* ------------------------------------------------------------ raw sockets */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read one frame into buf (8-aligned). Returns total bytes, 0 on EOF, -1 on
 * error or timeout. */
static long read_frame(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0, need = DF_FRAME_HEADER_SIZE;
    while (got < need) {
        ssize_t r = recv(fd, buf + got, need - got, 0);
        if (r == 0) return 0;
        if (r < 0) return -1;
        got += (size_t)r;
        if (got == DF_FRAME_HEADER_SIZE) {
            uint32_t len;
            memcpy(&len, buf + 20, 4);
            need = DF_FRAME_HEADER_SIZE + len;
            if (need > cap) return -1;
        }
    }
    return (long)got;
}

/* Read from fd until `needle` was seen or `ms` passed; the bytes read
 * (NUL-terminated) into buf. Returns the count. */
static size_t read_until(int fd, char *buf, size_t cap, const char *needle, int ms)
{
    size_t got = 0;
    struct timeval tv = {0, 50000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    double t0 = now_s();
    while (got + 1 < cap && (now_s() - t0) * 1000 < ms) {
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r == 0) break;
        if (r > 0) {
            got += (size_t)r;
            buf[got] = 0;
            if (needle && strstr(buf, needle)) break;
        }
    }
    buf[got] = 0;
    return got;
}

/* A binary-data infer of `poses` poses of prop's joint_matrices (3x12),
 * identity rotations: the body (new: free()) and its JSON header length. */
static char *prop_binary(int poses, size_t *len, size_t *hlen)
{
    char hdr[512];
    int hn = snprintf(hdr, sizeof hdr,
                      "{\"inputs\":[{\"name\":\"joint_matrices\",\"datatype\":\"FP32\","
                      "\"shape\":[%d,3,12],\"parameters\":{\"binary_data_size\":%d}}],"
                      "\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":true}}]}",
                      poses, poses * 144);
    size_t n = (size_t)hn + (size_t)poses * 144;
    char *b = malloc(n);
    memcpy(b, hdr, (size_t)hn);
    float *m = calloc((size_t)poses * 36, sizeof(float));
    for (int p = 0; p < poses * 3; p++) m[p * 12 + 0] = m[p * 12 + 5] = m[p * 12 + 10] = 1;
    memcpy(b + hn, m, (size_t)poses * 144);
    free(m);
    *len = n;
    *hlen = (size_t)hn;
    return b;
}

/* A TCP connection to 127.0.0.1:port from source address `from` (another
 * loopback address: a different peer for max_connections_per_peer). */
static int connect_from(int port, const char *from)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    inet_pton(AF_INET, from, &src.sin_addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) ||
        connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* 1 when the peer closed fd (EOF or reset), reading and dropping what
 * arrived meanwhile; 0 while it is open. */
static int peer_closed(int fd)
{
    char b[65536];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (r == 0) return 1;
        if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
    }
}

/* An INFER frame (new: free()). */
static uint8_t *enc_infer(const df_frame_infer_t *q, uint64_t id, size_t *n)
{
    df_frame_buf_t fb;
    df_error_t err;
    df_frame_buf_init(&fb);
    if (df_frame_encode_infer(id, q, &fb.o, &err)) return NULL;
    uint8_t *b = malloc(fb.o.total + 16);
    df_frame_flatten(&fb.o, b);
    *n = fb.o.total;
    return b;
}

/* The socket port from the daemon's ready file. */
static int sock_port_of(const daemon_t *d)
{
    FILE *f = fopen(d->ready, "r");
    int h = -1, sp = -1;
    if (f) {
        if (fscanf(f, "http=%d socket=%d", &h, &sp) != 2) sp = -1;
        fclose(f);
    }
    return sp;
}

/* One INFER of `character` with n_poses and no inputs on a new
 * connection; the answer's frame type, error code and message. */
static int sock_infer(int port, const char *character, uint32_t n_poses, int32_t *code,
                      char *msg, size_t cap)
{
    int fd = raw_connect(port);
    if (fd < 0) return -1;
    df_frame_infer_t q;
    memset(&q, 0, sizeof q);
    q.n_poses = n_poses;
    snprintf(q.character, sizeof q.character, "%s", character);
    size_t n;
    uint8_t *b = enc_infer(&q, 9, &n);
    static uint8_t buf[64 << 20] __attribute__((aligned(8)));
    long r = b && send_all(fd, b, n) == 0 ? read_frame(fd, buf, sizeof buf) : -1;
    free(b);
    close(fd);
    df_frame_t f;
    df_error_t err = {0};
    if (r <= 0 || df_frame_decode(buf, (size_t)r, sizeof buf, &f, NULL, &err)) return -1;
    *code = 0;
    msg[0] = 0;
    if (f.h.type == DF_FT_ERROR) {
        *code = f.u.error.code;
        snprintf(msg, cap, "%s", f.u.error.msg);
    }
    return f.h.type;
}

/* 1 while the daemon runs; when it has ended, reaps it and says how. */
static int alive(daemon_t *d)
{
    int st;
    if (d->pid <= 0) return 0;
    if (waitpid(d->pid, &st, WNOHANG) == 0) return 1;
    fprintf(stderr, "deformd %s %d (log %s)\n", WIFSIGNALED(st) ? "killed by signal" : "exited",
            WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), d->log);
    d->pid = 0;
    return 0;
}

/* One request of model "big" with weights w (16 values); its positions
 * compared with core's evaluation of path. Returns 1 when equal. */
static int big_answer_ok(int port, const char *path)
{
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = 0.05f * (float)(i % 5) - 0.1f;
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[16],"
                     "\"data\":[");
    for (int i = 0; i < 16; i++) n += snprintf(req + n, sizeof req - (size_t)n, "%s%.9g", i ? "," : "", w[i]);
    n += snprintf(req + n, sizeof req - (size_t)n,
                  "]}],\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":true}}]}");
    resp_t r;
    if (http_req(C, port, "POST", "/v2/models/big/infer", req, (size_t)n, NULL, &r)) return 0;
    int64_t N = 100 * 100;
    float *ref = malloc((size_t)N * 3 * sizeof(float));
    const char *names[1] = {"weights"};
    const float *data[1] = {w};
    int ok = r.status == 200 && r.header_len > 0 &&
             (size_t)r.header_len + (size_t)N * 12 == r.len &&
             ref_eval(path, 1, names, data, 1, NULL, 0, "positions", ref) == 0 &&
             max_rel_err(r.body + r.header_len, ref, (size_t)N * 3) <= 1e-6;
    if (!ok) fprintf(stderr, "big: status %ld, %zu bytes: %.200s\n", r.status, r.len, r.body);
    free(ref);
    resp_free(&r);
    return ok;
}

/* ---------------------------------------------- D1: file rewritten */

typedef struct {
    const char *path;
    const unsigned char *bytes;
    size_t n;
    atomic_int stop;
    int rewrites;
} rewriter_t;

static void *rewrite_loop(void *arg)
{
    rewriter_t *rw = arg;
    while (!atomic_load(&rw->stop)) {
        int fd = open(rw->path, O_WRONLY | O_TRUNC);
        if (fd < 0) break;
        size_t off = 0;
        while (off < rw->n) {
            size_t k = rw->n - off < (128u << 10) ? rw->n - off : (128u << 10);
            ssize_t w = write(fd, rw->bytes + off, k);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
        rw->rewrites++;
        usleep(2000);
    }
    return NULL;
}

static void test_model_rewritten_during_reload(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/big/1/model.safetensors", repo);
    FILE *f = fopen(path, "rb");
    DF_CHECK(f != NULL);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(n);
    DF_CHECK(fread(bytes, 1, n, f) == n);
    fclose(f);
    DF_CHECK_MSG(n >= (1u << 20), "model file of %zu bytes: the large-file path needs >= 1 MiB", n);
    daemon_t d;
    if (daemon_start(&d, repo, "rewrite", NULL)) {
        DF_CHECK(0);
        free(bytes);
        return;
    }
    DF_CHECK(big_answer_ok(d.port, path));
    rewriter_t rw = {path, bytes, n, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, rewrite_loop, &rw);
    int hups = 0;
    double t0 = now_s();
    while (now_s() - t0 < 1.5 && alive(&d)) {
        kill(d.pid, SIGHUP);
        hups++;
        usleep(15000);
    }
    atomic_store(&rw.stop, 1);
    pthread_join(th, NULL);
    /* the last rewrite completed: the file is whole again */
    usleep(300000); /* the last SIGHUP's reload */
    DF_CHECK_MSG(alive(&d), "deformd died during %d reloads of a file rewritten %d times (log %s)",
                 hups, rw.rewrites, d.log);
    DF_CHECK(big_answer_ok(d.port, path));
    kill(d.pid, SIGHUP); /* a reload of the whole file succeeds */
    usleep(300000);
    DF_CHECK(big_answer_ok(d.port, path));
    fprintf(stderr, "model_rewritten: %d SIGHUPs, %d rewrites\n", hups, rw.rewrites);
    DF_CHECK(daemon_stop(&d) == 0);
    free(bytes);
}

/* ------------------------------------------- D4: answer-size limits */

/* The 34-byte request for 4096 poses of every output (a 1.7 GB answer as
 * JSON) is refused with 413 on HTTP and DF_ELIMIT on the socket, before
 * any work. Answers in flight are counted until written: a client that
 * does not read its 38 MB answer keeps it counted, so a second such
 * request does not fit under max_output_inflight_bytes (60 MiB) and is
 * answered 429; once the first client goes away, it is served. */
static void test_output_limits(void)
{
    daemon_t d;
    const char *extra[] = {"--socket-port", "0", "--set", "max_output_inflight_bytes=60M", NULL};
    if (daemon_start(&d, repo, "outlim", extra)) {
        DF_CHECK(0);
        return;
    }
    const char *huge = "{\"parameters\":{\"batch_size\":4096}}";
    resp_t r;
    DF_CHECK(http_req(C, d.port, "POST", "/v2/models/alice/infer", huge, strlen(huge), NULL, &r) == 0);
    DF_CHECK_MSG(r.status == 413 && strstr(r.body, "max_output_bytes") &&
                     strstr(r.body, "4096 poses"),
                 "status %ld: %.300s", r.status, r.body);
    resp_free(&r);
    int32_t code;
    char msg[1100];
    int sp = sock_port_of(&d);
    int type = sock_infer(sp, "alice", 4096, &code, msg, sizeof msg);
    DF_CHECK_MSG(type == DF_FT_ERROR && code == DF_ELIMIT && strstr(msg, "max_output_bytes"),
                 "socket: type %d code %d: %s", type, code, msg);
    /* in flight: a 300-pose JSON answer is 38 MB counted (6.9 MB of floats,
     * 18 bytes per value of text), about 19 MB written */
    const char *big = "{\"parameters\":{\"batch_size\":300}}";
    int fd = raw_connect(d.port);
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST /v2/models/alice/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(big), big);
    DF_CHECK(fd >= 0 && send_all(fd, head, (size_t)hn) == 0);
    usleep(400000); /* submitted, evaluated, stuck writing to a client that does not read */
    DF_CHECK(http_req(C, d.port, "POST", "/v2/models/alice/infer", big, strlen(big), NULL, &r) == 0);
    DF_CHECK_MSG(r.status == 429 && strstr(r.body, "max_output_inflight_bytes"),
                 "second big answer while the first is unread: status %ld: %.300s", r.status,
                 r.body);
    resp_free(&r);
    type = sock_infer(sp, "alice", 2000, &code, msg, sizeof msg); /* 46 MB of floats */
    DF_CHECK_MSG(type == DF_FT_ERROR && code == DF_EOVERLOAD &&
                     strstr(msg, "max_output_inflight_bytes"),
                 "socket while the HTTP answer is unread: type %d code %d: %s", type, code, msg);
    /* a small answer still fits */
    const char *small = "{\"parameters\":{\"batch_size\":2}}";
    DF_CHECK(http_req(C, d.port, "POST", "/v2/models/alice/infer", small, strlen(small), NULL, &r) == 0);
    DF_CHECK_MSG(r.status == 200, "small answer: status %ld: %.200s", r.status, r.body);
    resp_free(&r);
    close(fd);
    long status = 0;
    for (int i = 0; i < 50 && status != 200; i++) {
        usleep(50000);
        if (http_req(C, d.port, "POST", "/v2/models/alice/infer", big, strlen(big), NULL, &r)) break;
        status = r.status;
        if (status == 200)
            DF_CHECK_MSG(strstr(r.body, "\"shape\":[300,960,3]") != NULL, "%.300s", r.body);
        resp_free(&r);
    }
    DF_CHECK_MSG(status == 200, "after the slow client left: status %ld", status);
    DF_CHECK(alive(&d));
    DF_CHECK(daemon_stop(&d) == 0);
}

/* ----------------------------------------- D5: input held per front */

/* max_input_buffered_bytes = 256 KiB. HTTP: a client that declared a
 * 200 KB body and sent 100 bytes of it holds 200 KB; a request whose body
 * and JSON reading (10 x its JSON + 64 KiB) do not fit beside it is
 * answered 429, and one that declares 100 KB is answered 429 before it
 * sends a byte of its body. Socket: a frame header that declares 262,140
 * bytes holds them; the next frame that does not fit is refused with
 * DF_EOVERLOAD (and its connection closed, its payload unread). Once the
 * holders leave, the same requests are served. */
static void test_input_budget(void)
{
    daemon_t d;
    const char *extra[] = {"--socket-port", "0", "--set", "max_input_buffered_bytes=256k", NULL};
    if (daemon_start(&d, repo, "inbudget", extra)) {
        DF_CHECK(0);
        return;
    }
    int a = raw_connect(d.port);
    const char *ha = "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n{\"inputs\":[";
    DF_CHECK(a >= 0 && send_all(a, ha, strlen(ha)) == 0);
    usleep(200000);
    size_t len, hlen;
    char *body = prop_binary(32, &len, &hlen);
    char hh[64];
    snprintf(hh, sizeof hh, "Inference-Header-Content-Length: %zu", hlen);
    const char *hdrs[] = {hh, NULL};
    resp_t r;
    DF_CHECK(http_req(C, d.port, "POST", "/v2/models/prop/infer", body, len, hdrs, &r) == 0);
    DF_CHECK_MSG(r.status == 429 && strstr(r.body, "max_input_buffered_bytes"),
                 "beside a held 200 KB body: status %ld: %.300s", r.status, r.body);
    resp_free(&r);
    /* declared 100 KB: refused before its body is sent */
    int c = raw_connect(d.port);
    const char *hc = "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
    DF_CHECK(c >= 0 && send_all(c, hc, strlen(hc)) == 0);
    char buf[4096];
    read_until(c, buf, sizeof buf, "}", 3000);
    DF_CHECK_MSG(strstr(buf, "HTTP/1.1 429") && strstr(buf, "max_input_buffered_bytes"),
                 "declared 100 KB: %.300s", buf);
    close(c);
    /* socket: a frame that declares 262,140 bytes and sends 8 */
    int sp = sock_port_of(&d);
    int s1 = raw_connect(sp);
    uint8_t hdr[32] = {0};
    uint32_t magic = DF_FRAME_MAGIC, plen = 262140;
    uint16_t ver = DF_FRAME_VERSION, type = DF_FT_PING;
    memcpy(hdr, &magic, 4);
    memcpy(hdr + 4, &ver, 2);
    memcpy(hdr + 6, &type, 2);
    hdr[12] = 1;
    memcpy(hdr + 20, &plen, 4);
    DF_CHECK(s1 >= 0 && send_all(s1, hdr, 32) == 0);
    usleep(200000);
    int32_t code;
    char msg[1100];
    int ft = sock_infer(sp, "prop", 1, &code, msg, sizeof msg);
    DF_CHECK_MSG(ft == DF_FT_ERROR && code == DF_EOVERLOAD && strstr(msg, "max_input_buffered_bytes"),
                 "socket beside a held frame: type %d code %d: %s", ft, code, msg);
    /* the holders leave: both requests are served */
    close(a);
    close(s1);
    usleep(300000);
    DF_CHECK(http_req(C, d.port, "POST", "/v2/models/prop/infer", body, len, hdrs, &r) == 0);
    DF_CHECK_MSG(r.status == 200 && r.header_len > 0 && r.len == (size_t)r.header_len + 32 * 120 * 12,
                 "after: status %ld: %.200s", r.status, r.body);
    resp_free(&r);
    ft = sock_infer(sp, "prop", 1, &code, msg, sizeof msg);
    DF_CHECK_MSG(ft == DF_FT_RESULT, "socket after: type %d code %d: %s", ft, code, msg);
    free(body);
    DF_CHECK(alive(&d));
    DF_CHECK(daemon_stop(&d) == 0);
}

/* ------------------------------------------ D3: memory given back */

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

typedef struct {
    int port;
    const char *body;
    long status;
    size_t len;
} big_req_t;

static void *big_req(void *arg)
{
    big_req_t *b = arg;
    CURL *h = curl_easy_init();
    resp_t r;
    if (http_req(h, b->port, "POST", "/v2/models/alice/infer", b->body, strlen(b->body), NULL, &r) == 0) {
        b->status = r.status;
        b->len = r.len;
        resp_free(&r);
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* Eight requests at once of 1000 poses (23 MB of float outputs each): the
 * daemon's memory grows by their answers, and once they are answered it
 * shrinks back to within the pools' keep (3 pools x pool_keep_bytes = 24
 * MiB here) and some slack; before, the job pool kept every answer's
 * buffers for good (+184 MB). */
static void test_pool_memory_returned(void)
{
#if defined(__SANITIZE_ADDRESS__)
    /* ASan's allocator keeps freed memory in its quarantine: RSS says
     * nothing about what the daemon gives back */
    printf("# skipped under AddressSanitizer\n");
    return;
#endif
    daemon_t d;
    const char *extra[] = {"--set", "pool_keep_bytes=8M", NULL};
    if (daemon_start(&d, repo, "pools", extra)) {
        DF_CHECK(0);
        return;
    }
    const char *small = "{\"parameters\":{\"batch_size\":4,\"binary_data_output\":true}}";
    resp_t r;
    for (int i = 0; i < 20; i++) {
        DF_CHECK(http_req(C, d.port, "POST", "/v2/models/alice/infer", small, strlen(small), NULL, &r) == 0 &&
                 r.status == 200);
        resp_free(&r);
    }
    usleep(200000);
    long before = rss_kb(d.pid);
    const char *body =
        "{\"parameters\":{\"batch_size\":1000,\"binary_data_output\":true,\"timeout_us\":120000000}}";
    enum { NB = 8 };
    big_req_t b[NB];
    pthread_t th[NB];
    for (int i = 0; i < NB; i++) {
        b[i] = (big_req_t){d.port, body, 0, 0};
        pthread_create(&th[i], NULL, big_req, &b[i]);
    }
    for (int i = 0; i < NB; i++) pthread_join(th[i], NULL);
    int ok = 0;
    for (int i = 0; i < NB; i++) ok += b[i].status == 200 && b[i].len > 1000u * 960 * 24;
    DF_CHECK_MSG(ok == NB, "%d of %d large answers (last status %ld)", ok, NB, b[NB - 1].status);
    for (int i = 0; i < NB; i++) if (b[i].status != 200) fprintf(stderr, "large %d: status %ld\n", i, b[i].status);
    usleep(300000); /* the connections' completion callbacks */
    long after = rss_kb(d.pid);
    fprintf(stderr, "pools: RSS %ld kB before, %ld kB after %d answers of %.0f MB\n", before, after,
            NB, 1000.0 * 960 * 24 / 1e6);
    DF_CHECK_MSG(before > 0 && after - before < 64 * 1024,
                 "the daemon kept %ld kB after the large answers were sent (keep 3 x 8 MiB)",
                 after - before);
    DF_CHECK(daemon_stop(&d) == 0);
}

/* ------------------------------------------------- D6: slow clients */

/* header_timeout_s = body_timeout_s = 1, max_connections_per_peer = 4,
 * idle_timeout_s 30 (so that only the new timeouts can act). A peer
 * (127.0.0.2) opens six connections to each front: the fifth and sixth are
 * refused at once (HTTP 429 / ERROR DF_ELIMIT naming the limit). Its four
 * HTTP connections trickle a byte every 200 ms — two of them in the
 * headers, two in a declared body — and its socket connections a frame's
 * payload, a frame's header, or nothing after a complete PING: every
 * trickling connection is closed by the daemon within the timeout and a
 * second (libmicrohttpd's idle clock, reset by every byte, never fires);
 * meanwhile 127.0.0.1 is served; afterwards the peer may connect again. */
static void test_slow_clients(void)
{
    daemon_t d;
    const char *extra[] = {"--socket-port", "0", "--set", "header_timeout_s=1", "--set",
                           "body_timeout_s=1", "--set", "idle_timeout_s=30", "--set",
                           "max_connections_per_peer=4", NULL};
    if (daemon_start(&d, repo, "slow", extra)) {
        DF_CHECK(0);
        return;
    }
    int sp = sock_port_of(&d);
    int hf[6], sf[6];
    char buf[4096];
    for (int i = 0; i < 6; i++) {
        hf[i] = connect_from(d.port, "127.0.0.2");
        DF_CHECK(hf[i] >= 0);
        usleep(30000); /* accepted in this order */
    }
    for (int i = 4; i < 6; i++) {
        read_until(hf[i], buf, sizeof buf, "}", 2000);
        DF_CHECK_MSG(strstr(buf, "HTTP/1.1 429") && strstr(buf, "max_connections_per_peer 4") &&
                         strstr(buf, "127.0.0.2"),
                     "HTTP connection %d of the peer: '%.200s'", i + 1, buf);
        close(hf[i]);
    }
    for (int i = 0; i < 6; i++) {
        sf[i] = connect_from(sp, "127.0.0.2");
        DF_CHECK(sf[i] >= 0);
        usleep(30000);
    }
    for (int i = 4; i < 6; i++) {
        static uint8_t fb[8192] __attribute__((aligned(8)));
        long r = read_frame(sf[i], fb, sizeof fb);
        df_frame_t f;
        df_error_t e = {0};
        DF_CHECK_MSG(r > 0 && df_frame_decode(fb, (size_t)r, sizeof fb, &f, NULL, &e) == 0 &&
                         f.h.type == DF_FT_ERROR && f.u.error.code == DF_ELIMIT &&
                         strstr(f.u.error.msg, "max_connections_per_peer"),
                     "socket connection %d of the peer", i + 1);
        close(sf[i]);
    }
    /* the trickles */
    const char *h0 = "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\n";
    const char *h2 = "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
    for (int i = 0; i < 4; i++) DF_CHECK(send_all(hf[i], i < 2 ? h0 : h2, strlen(i < 2 ? h0 : h2)) == 0);
    uint8_t ping[24] = {0};
    uint32_t magic = DF_FRAME_MAGIC, plen = 100;
    uint16_t ver = DF_FRAME_VERSION, type = DF_FT_PING;
    memcpy(ping, &magic, 4);
    memcpy(ping + 4, &ver, 2);
    memcpy(ping + 6, &type, 2);
    memcpy(ping + 20, &plen, 4);
    DF_CHECK(send_all(sf[0], ping, 24) == 0);  /* then its payload, a byte at a time */
    DF_CHECK(send_all(sf[1], ping, 10) == 0);  /* then the rest of its header, likewise */
    uint8_t small_ping[26];                     /* a whole PING, then silence */
    memcpy(small_ping, ping, 24);
    plen = 2;
    memcpy(small_ping + 20, &plen, 4);
    small_ping[24] = 'h';
    small_ping[25] = 'i';
    DF_CHECK(send_all(sf[2], small_ping, 26) == 0);
    double t0 = now_s(), closed_at[8] = {0};
    int open_n = 7, served = 0;
    while (open_n > 0 && now_s() - t0 < 4.0) {
        usleep(200000);
        for (int i = 0; i < 4; i++) {
            if (closed_at[i] > 0) continue;
            if (peer_closed(hf[i]) || send(hf[i], "a", 1, MSG_NOSIGNAL) < 0) {
                closed_at[i] = now_s() - t0;
                open_n--;
            }
        }
        for (int i = 0; i < 3; i++) {
            if (closed_at[4 + i] > 0) continue;
            if (peer_closed(sf[i]) || (i < 2 && send(sf[i], ping + 10, 1, MSG_NOSIGNAL) < 0)) {
                closed_at[4 + i] = now_s() - t0;
                open_n--;
            }
        }
        resp_t r;
        if (http_req(C, d.port, "GET", "/v2/health/ready", NULL, 0, NULL, &r) == 0 && r.status == 200)
            served++;
        resp_free(&r);
    }
    for (int i = 0; i < 6; i++) {
        const char *what[] = {"HTTP headers", "HTTP headers", "HTTP body", "HTTP body",
                              "socket payload", "socket header"};
        DF_CHECK_MSG(closed_at[i] > 0.7 && closed_at[i] < 3.0,
                     "%s trickle %d: closed after %.1f s (timeout 1 s; 0 = still open after 4 s)",
                     what[i], i, closed_at[i]);
    }
    DF_CHECK_MSG(closed_at[6] == 0, "an idle socket connection (idle_timeout_s 30) was closed after %.1f s",
                 closed_at[6]);
    DF_CHECK_MSG(served > 5, "127.0.0.1 served %d times meanwhile", served);
    for (int i = 0; i < 4; i++) close(hf[i]);
    for (int i = 0; i < 3; i++) close(sf[i]);
    usleep(300000);
    /* the peer's count went back down: it is served again */
    int again = connect_from(d.port, "127.0.0.2");
    const char *get = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n";
    DF_CHECK(again >= 0 && send_all(again, get, strlen(get)) == 0);
    read_until(again, buf, sizeof buf, "}", 2000);
    DF_CHECK_MSG(strstr(buf, "HTTP/1.1 200") && strstr(buf, "\"live\":true"), "again: '%.200s'", buf);
    close(again);
    resp_t m;
    DF_CHECK(http_req(C, d.port, "GET", "/metrics", NULL, 0, NULL, &m) == 0);
    const char *key = "\ndeformd_http_read_timeouts_total ";
    const char *tm = m.body ? strstr(m.body, key) : NULL;
    DF_CHECK_MSG(tm && atol(tm + strlen(key)) >= 4, "%s", tm ? tm : "no deformd_http_read_timeouts_total");
    resp_free(&m);
    DF_CHECK(alive(&d));
    DF_CHECK(daemon_stop(&d) == 0);
}

/* A socket client that sends 40 requests of 1.5 MB answers and reads
 * nothing: once its answers have not moved for idle_timeout_s (1 s here)
 * the daemon closes the connection, and the answers it held are freed;
 * before, it kept them (and the connection) for as long as the client
 * stayed. */
static void test_socket_write_stall(void)
{
    daemon_t d;
    const char *extra[] = {"--socket-port", "0", "--set", "idle_timeout_s=1", NULL};
    if (daemon_start(&d, repo, "stall", extra)) {
        DF_CHECK(0);
        return;
    }
    int fd = raw_connect(sock_port_of(&d));
    int rcv = 64 << 10;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    df_frame_infer_t q;
    memset(&q, 0, sizeof q);
    q.n_poses = 64;
    strcpy(q.character, "alice");
    size_t n;
    uint8_t *b = enc_infer(&q, 1, &n);
    for (int i = 0; i < 40 && b; i++) DF_CHECK(send_all(fd, b, n) == 0);
    free(b);
    sleep(3);
    /* now read: what was buffered, then the end */
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static char buf[1 << 20];
    size_t total = 0;
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0) total += (size_t)r;
    DF_CHECK_MSG(r == 0 || (r < 0 && errno == ECONNRESET),
                 "after 3 s of not reading: %s (%zu bytes read)", r < 0 ? strerror(errno) : "open",
                 total);
    DF_CHECK_MSG(total < 40u * 1470000, "all %zu bytes of the 40 answers arrived", total);
    close(fd);
    DF_CHECK(alive(&d));
    DF_CHECK(daemon_stop(&d) == 0);
}

/* ------------------------------------------------- D7: half-close */

/* Reads fd until EOF or `secs` pass; returns the bytes (new: free()) and
 * sets *eof when the daemon closed its side. */
static char *read_to_eof(int fd, double secs, size_t *len, int *eof)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    *eof = 0;
    struct timeval tv = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    double t0 = now_s();
    while (now_s() - t0 < secs) {
        if (n + 4096 > cap) b = realloc(b, cap *= 2);
        ssize_t r = recv(fd, b + n, cap - n - 1, 0);
        if (r == 0) {
            *eof = 1;
            break;
        }
        if (r > 0) n += (size_t)r;
        else if (errno != EAGAIN && errno != EWOULDBLOCK) break;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* A client sends its requests and shuts down its sending side
 * (shutdown(SHUT_WR)), as `nc -N` or a batch script does: every request
 * it sent is answered, then the daemon closes. The requests are queued
 * (inline_max_us 0, 20 ms batching delay), so the half-close arrives while
 * they wait; before, the socket front closed at once and dropped them. */
static void test_half_close(void)
{
    daemon_t d;
    const char *extra[] = {"--socket-port", "0", "--set", "inline_max_us=0", "--set",
                           "max_queue_delay_us=20000", NULL};
    if (daemon_start(&d, repo, "halfclose", extra)) {
        DF_CHECK(0);
        return;
    }
    int sp = sock_port_of(&d);
    int bad_sock = 0, bad_http = 0;
    for (int round = 0; round < 5; round++) {
        /* socket: five INFERs, then SHUT_WR */
        int fd = raw_connect(sp);
        df_frame_infer_t q;
        memset(&q, 0, sizeof q);
        q.n_poses = 1;
        strcpy(q.character, "prop");
        for (uint64_t id = 1; id <= 5; id++) {
            size_t n;
            uint8_t *b = enc_infer(&q, id, &n);
            DF_CHECK(b && send_all(fd, b, n) == 0);
            free(b);
        }
        shutdown(fd, SHUT_WR);
        size_t len;
        int eof;
        char *all = read_to_eof(fd, 3.0, &len, &eof);
        int results = 0;
        uint64_t ids = 0;
        size_t off = 0;
        static uint8_t fb[1 << 16] __attribute__((aligned(8)));
        while (off + DF_FRAME_HEADER_SIZE <= len) {
            uint32_t pl;
            memcpy(&pl, all + off + 20, 4);
            if (off + DF_FRAME_HEADER_SIZE + pl > len || DF_FRAME_HEADER_SIZE + pl > sizeof fb) break;
            memcpy(fb, all + off, DF_FRAME_HEADER_SIZE + pl);
            df_frame_t f;
            df_error_t e = {0};
            if (df_frame_decode(fb, DF_FRAME_HEADER_SIZE + pl, sizeof fb, &f, NULL, &e) == 0 &&
                f.h.type == DF_FT_RESULT) {
                results++;
                ids += f.h.id;
            }
            off += DF_FRAME_HEADER_SIZE + pl;
        }
        if (results != 5 || ids != 15 || !eof) {
            bad_sock++;
            fprintf(stderr, "socket round %d: %d results (ids sum %llu), %s\n", round, results,
                    (unsigned long long)ids, eof ? "closed" : "not closed after 3 s");
        }
        free(all);
        close(fd);
        /* HTTP: three pipelined requests, then SHUT_WR */
        fd = raw_connect(d.port);
        const char *body = "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[4],"
                           "\"data\":[1,0,0.5,0]}],\"outputs\":[{\"name\":\"positions\"}]}";
        char req[1024];
        int rn = snprintf(req, sizeof req,
                          "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                          strlen(body), body);
        for (int k = 0; k < 3; k++) DF_CHECK(send_all(fd, req, (size_t)rn) == 0);
        shutdown(fd, SHUT_WR);
        all = read_to_eof(fd, 3.0, &len, &eof);
        int answers = 0;
        for (const char *p = all; (p = strstr(p, "HTTP/1.1 200")); p++) answers++;
        if (answers != 3 || !eof) {
            bad_http++;
            fprintf(stderr, "HTTP round %d: %d answers, %s\n", round, answers,
                    eof ? "closed" : "not closed after 3 s");
        }
        free(all);
        close(fd);
    }
    DF_CHECK_MSG(bad_sock == 0, "socket: %d of 5 half-closed connections not fully answered", bad_sock);
    DF_CHECK_MSG(bad_http == 0, "HTTP: %d of 5 half-closed connections not fully answered", bad_http);
    DF_CHECK(alive(&d));
    DF_CHECK(daemon_stop(&d) == 0);
}

/* ------------------------------------------------------- minor ones */

static int file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* %00 in a name is refused (it cut the name: /v2/models/prop%00x/...
 * addressed "prop"); a Transfer-Encoding other than chunked is refused at
 * once (the daemon waited for a body it cannot read); a chunk announced
 * as 2^63 bytes ends with the body timeout; the index, served without a
 * token, names files relative to the repository; a ready file that cannot
 * be written (a full disk) stops the daemon instead of leaving an empty
 * file and logging "ready". */
static void test_minor_refusals(void)
{
    char r2[1100], p[1300];
    snprintf(r2, sizeof r2, "%s/repo_minor", test_out());
    snprintf(p, sizeof p, "%s/prop/1", r2);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/prop/1/model.safetensors", r2);
    DF_CHECK(make_rigged(p, 10, 12, 3, 4, "lbs", 99) == 0);
    snprintf(p, sizeof p, "%s/prop/config.json", r2);
    write_text(p, "{\"kind\":\"rigged\"}");
    snprintf(p, sizeof p, "%s/broken/1", r2);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/broken/1/model.safetensors", r2);
    write_text(p, "not a safetensors file");
    snprintf(p, sizeof p, "%s/broken/config.json", r2);
    write_text(p, "{\"kind\":\"rigged\"}");
    char tok[1100];
    snprintf(tok, sizeof tok, "%s/token", test_out());
    write_text(tok, "minor-token-1234\n");
    daemon_t d;
    const char *extra[] = {"--token-file", tok, "--set", "body_timeout_s=1", NULL};
    if (daemon_start(&d, r2, "minor", extra)) {
        DF_CHECK(0);
        return;
    }
    const char *auth[] = {"Authorization: Bearer minor-token-1234", NULL};
    resp_t r;
    DF_CHECK(http_req(C, d.port, "POST", "/v2/repository/models/prop%00x/load", NULL, 0, auth, &r) == 0);
    DF_CHECK_MSG(r.status == 400 && strstr(r.body, "%00"), "load prop%%00x: %ld %s", r.status, r.body);
    resp_free(&r);
    DF_CHECK(http_req(C, d.port, "GET", "/v2/models/prop%00x", NULL, 0, NULL, &r) == 0);
    DF_CHECK_MSG(r.status == 400 && strstr(r.body, "%00"), "metadata prop%%00x: %ld %s", r.status, r.body);
    resp_free(&r);
    DF_CHECK(http_req(C, d.port, "GET", "/v2/models/prop", NULL, 0, NULL, &r) == 0 && r.status == 200);
    resp_free(&r);
    usleep(100000);
    DF_CHECK_MSG(!file_contains(d.log, "model prop: reloaded"), "prop was reloaded (log %s)", d.log);
    /* Transfer-Encoding: gzip */
    char buf[4096];
    int fd = raw_connect(d.port);
    const char *gz = "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
    double t0 = now_s();
    DF_CHECK(fd >= 0 && send_all(fd, gz, strlen(gz)) == 0);
    read_until(fd, buf, sizeof buf, "}", 3000);
    DF_CHECK_MSG(strstr(buf, "HTTP/1.1 501") && strstr(buf, "gzip") && now_s() - t0 < 1.0,
                 "gzip after %.1f s: '%.200s'", now_s() - t0, buf);
    close(fd);
    /* a chunk of 2^63 bytes, 3 of them sent */
    fd = raw_connect(d.port);
    const char *ch = "POST /v2/models/prop/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "8000000000000000\r\nabc";
    t0 = now_s();
    DF_CHECK(fd >= 0 && send_all(fd, ch, strlen(ch)) == 0);
    double closed = 0;
    while (now_s() - t0 < 4 && !closed) {
        usleep(100000);
        if (peer_closed(fd)) closed = now_s() - t0;
    }
    DF_CHECK_MSG(closed > 0.5 && closed < 3.0, "chunk of 2^63: closed after %.1f s (body_timeout_s 1)", closed);
    close(fd);
    /* the index without a token: the broken model's reason is relative */
    DF_CHECK(http_req(C, d.port, "GET", "/v2/repository/index", NULL, 0, NULL, &r) == 0 && r.status == 200);
    DF_CHECK_MSG(strstr(r.body, "\"broken\"") && strstr(r.body, "broken/1/model.safetensors") &&
                     !strstr(r.body, r2),
                 "index: %.600s", r.body);
    resp_free(&r);
    DF_CHECK(file_contains(d.log, r2)); /* the log keeps the full path */
    DF_CHECK(daemon_stop(&d) == 0);
    /* a ready file that cannot be written: <ready>.tmp is /dev/full */
    daemon_t f;
    char rf[1100], rt[1200];
    snprintf(rf, sizeof rf, "%s/full.ready", test_out());
    snprintf(rt, sizeof rt, "%s.tmp", rf);
    unlink(rt);
    DF_CHECK(symlink("/dev/full", rt) == 0);
    const char *extra2[] = {"--ready-file", rf, NULL};
    DF_CHECK(daemon_start(&f, r2, "full", extra2) != 0); /* exited */
    if (f.pid > 0) daemon_stop(&f);                        /* (it did not) */
    DF_CHECK_MSG(file_contains(f.log, "cannot write the ready file") &&
                     file_contains(f.log, "No space left on device") && !file_contains(f.log, "ready\n"),
                 "log %s", f.log);
    DF_CHECK(access(rf, F_OK) != 0);
    unlink(rt);
}

/* ------------------------------------------------------------ main */

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    C = curl_easy_init();
    snprintf(repo, sizeof repo, "%s/repo", test_out());
    make_repo(repo);
    char p[1100];
    snprintf(p, sizeof p, "%s/big/1", repo);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/big/1/model.safetensors", repo);
    if (make_rigged(p, 100, 100, 4, 16, "lbs", 5)) return 2;
    snprintf(p, sizeof p, "%s/big/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\",\"max_batch_size\":8,\"max_queue_delay_us\":500}");
    DF_RUN(test_model_rewritten_during_reload);
    DF_RUN(test_output_limits);
    DF_RUN(test_input_budget);
    DF_RUN(test_pool_memory_returned);
    DF_RUN(test_slow_clients);
    DF_RUN(test_socket_write_stall);
    DF_RUN(test_half_close);
    DF_RUN(test_minor_refusals);
    curl_easy_cleanup(C);
    curl_global_cleanup();
    return test_out_done(dftest_exit());
}

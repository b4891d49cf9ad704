/* test_client.c — the binary socket end to end: real bin/deformd on free
 * ports, libdeformclient and raw sockets, answers checked against core.
 *
 * Reference: core's df_model_evaluate called directly on the same model
 * file and inputs (ref_eval in tests/unit/server/daemon_util.h). Same
 * batch composition (one request alone on the daemon) must be
 * bit-identical; when requests may share batches with others (pipelining)
 * the tolerance is 1e-6 relative to the output's magnitude. float16 must be
 * within |v| * 2^-11 (+ 2^-24 for tiny values) of the float32 reference,
 * int16 within scale/2 (+ float rounding) inside its box — the bounds
 * stated in docs/protocol.md, evaluated here from the scale the server sent.
 * Malformed frames (24 kinds) must each get an ERROR frame with the right
 * code (or, for an unframeable stream, an ERROR and a close) after which
 * the daemon still answers a valid request.
 */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../server/daemon_util.h"
#include "deformclient.h"
#include "frame.h"

#include <poll.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>

static char repo[1024], unix_path[1100];
static daemon_t D;
static int sock_port;
static char model_prop[1200], model_body[1200], model_wuson[1200];
static int have_wuson;

static int read_sock_port(const daemon_t *d)
{
    FILE *f = fopen(d->ready, "r");
    int h = 0, s = -1;
    if (f) {
        if (fscanf(f, "http=%d socket=%d", &h, &s) != 2) s = -1;
        fclose(f);
    }
    return s;
}

static df_client_t *conn(void)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", sock_port);
    df_client_t *c = NULL;
    df_error_t err = {0};
    DF_CHECK_MSG(df_client_connect(addr, &c, &err) == 0, "%s", err.msg);
    return c;
}

static void rand_quats(float *q, int n)
{
    for (int j = 0; j < n; j++) {
        float *p = q + 4 * j, s = 0;
        for (int k = 0; k < 4; k++) { p[k] = du_rand() - 0.5f; s += p[k] * p[k]; }
        s = 1.0f / sqrtf(s);
        for (int k = 0; k < 4; k++) p[k] *= s;
        if (j == 0) { p[0] = p[1] = p[2] = 0; p[3] = 1; }
    }
}

static const float *find_out(const df_client_result_t *r, const char *name)
{
    for (int o = 0; o < r->n_outputs; o++)
        if (!strcmp(r->outputs[o].name, name)) return r->outputs[o].data;
    return NULL;
}

/* ------------------------------------------------------------ basics */

static void test_ping_info(void)
{
    df_client_t *c = conn();
    if (!c) return;
    df_error_t err = {0};
    DF_CHECK_MSG(df_client_ping(c, &err) == 0, "%s", err.msg);
    char *js = NULL;
    DF_CHECK(df_client_info(c, "", &js, &err) == 0);
    DF_CHECK(js && strstr(js, "\"alice\"") && strstr(js, "\"prop\""));
    free(js);
    js = NULL;
    DF_CHECK(df_client_info(c, "alice", &js, &err) == 0);
    json_t *root = js ? json_loads(js, 0, NULL) : NULL;
    DF_CHECK(root && json_integer_value(json_object_get(root, "vertices")) == 24 * 40);
    DF_CHECK(json_array_size(json_object_get(root, "joints")) == 6);
    json_decref(root);
    free(js);
    js = NULL;
    DF_CHECK(df_client_info(c, "nobody", &js, &err) == DF_ENOTFOUND && strstr(err.msg, "nobody"));
    DF_CHECK(df_client_ping(c, &err) == 0); /* still usable after an ERROR */
    df_client_close(&c);
}

/* One request alone on the daemon: bit-identical to core. */
static void test_infer_bit_identical(void)
{
    df_client_t *c = conn();
    if (!c) return;
    enum { B = 3, J = 6, M = 8, N = 24 * 40 };
    static float rot[B * J * 4], w[B * M], ref[B * N * 3];
    rand_quats(rot, B * J);
    for (int i = 0; i < B * M; i++) w[i] = du_rand();
    const char *cases[3] = {"alice", "bob", "alice"};
    int bs[3] = {1, B, B};
    for (int k = 0; k < 3; k++) {
        df_client_request_t q = {0};
        q.character = cases[k];
        q.n_poses = bs[k];
        q.n_inputs = k == 2 ? 1 : 2;
        snprintf(q.inputs[0].name, DF_NAME_MAX, "joint_rotations");
        q.inputs[0].ndim = 3; q.inputs[0].shape[0] = bs[k]; q.inputs[0].shape[1] = J; q.inputs[0].shape[2] = 4;
        q.inputs[0].data = rot;
        snprintf(q.inputs[1].name, DF_NAME_MAX, "weights");
        q.inputs[1].ndim = 2; q.inputs[1].shape[0] = bs[k]; q.inputs[1].shape[1] = M;
        q.inputs[1].data = w;
        q.n_outputs = 1;
        q.outputs[0] = "positions";
        df_client_result_t r;
        df_error_t err = {0};
        int rc = df_client_infer(c, &q, &r, &err);
        DF_CHECK_MSG(rc == 0, "%s: %s", cases[k], err.msg);
        if (rc) continue;
        const char *names[2] = {"joint_rotations", "weights"};
        const float *data[2] = {rot, w};
        static const float alice_w[M] = {1, 0, 0.5f, 0, 0, 0, 0, 0.25f};
        DF_CHECK(ref_eval(model_body, bs[k], names, data, q.n_inputs,
                          !strcmp(cases[k], "alice") ? alice_w : NULL,
                          !strcmp(cases[k], "bob") ? DF_POSE_DQS : 0, "positions", ref) == 0);
        const float *p = find_out(&r, "positions");
        DF_CHECK(p && r.n_poses == bs[k] && r.outputs[0].shape[1] == N && r.outputs[0].shape[2] == 3);
        DF_CHECK_MSG(p && !memcmp(p, ref, (size_t)bs[k] * N * 3 * sizeof(float)),
                     "%s B=%d: not bit-identical, rel err %g", cases[k], bs[k],
                     p ? max_rel_err(p, ref, (size_t)bs[k] * N * 3) : -1.0);
        df_client_result_free(&r);
    }
    df_client_close(&c);
}

/* ------------------------------------------------------------ pipelining */

enum { NP = 100, PJ = 3, PM = 4, PN = 10 * 12 };
typedef struct {
    int idx;
    int done, status, order;
    float pos[PN * 3];
} pslot_t;
static int p_order;

/* The heavy request: 512 default poses of alice; pose 0 and 511 kept. */
enum { HB = 512, HN = 24 * 40 };
static struct { int done, status, order; float first[HN * 3], last[HN * 3]; } heavy;

static void on_heavy(const df_client_result_t *r, void *user)
{
    heavy.done++;
    heavy.status = r->status;
    heavy.order = p_order++;
    const float *p = find_out(r, "positions");
    if (p && r->n_poses == HB && r->outputs[0].shape[1] == HN) {
        memcpy(heavy.first, p, sizeof heavy.first);
        memcpy(heavy.last, p + (size_t)(HB - 1) * HN * 3, sizeof heavy.last);
    }
}

static void on_pipe(const df_client_result_t *r, void *user)
{
    pslot_t *s = user;
    s->done++;
    s->status = r->status;
    s->order = p_order++;
    const float *p = find_out(r, "positions");
    if (p && r->outputs[0].shape[1] == PN) memcpy(s->pos, p, sizeof s->pos);
}

static void test_pipelining_100(void)
{
    df_client_t *c = conn();
    if (!c) return;
    static float rot[NP][PJ * 4], w[NP][PM];
    static pslot_t slot[NP];
    df_error_t err = {0};
    uint64_t ids[NP];
    p_order = 0;
    /* first a slow request (512 poses of another model), then 99 small
     * ones: the small ones must overtake it (answers out of order) */
    df_client_request_t hq = {0};
    hq.character = "alice";
    hq.n_poses = HB;
    hq.n_outputs = 1;
    hq.outputs[0] = "positions";
    memset(&heavy, 0, sizeof heavy);
    DF_CHECK(df_client_submit(c, &hq, on_heavy, NULL, NULL, &err) == 0);
    for (int i = 1; i < NP; i++) {
        rand_quats(rot[i], PJ);
        for (int k = 0; k < PM; k++) w[i][k] = du_rand();
        df_client_request_t q = {0};
        q.character = "prop";
        q.n_inputs = 2;
        snprintf(q.inputs[0].name, DF_NAME_MAX, "joint_rotations");
        q.inputs[0].ndim = 3; q.inputs[0].shape[0] = 1; q.inputs[0].shape[1] = PJ; q.inputs[0].shape[2] = 4;
        q.inputs[0].data = rot[i];
        snprintf(q.inputs[1].name, DF_NAME_MAX, "weights");
        q.inputs[1].ndim = 2; q.inputs[1].shape[0] = 1; q.inputs[1].shape[1] = PM;
        q.inputs[1].data = w[i];
        q.n_outputs = 1;
        q.outputs[0] = "positions";
        slot[i].idx = i;
        DF_CHECK(df_client_submit(c, &q, on_pipe, &slot[i], &ids[i], &err) == 0);
    }
    DF_CHECK(df_client_in_flight(c) <= NP);
    DF_CHECK_MSG(df_client_wait(c, 0, &err) == 0, "%s", err.msg);
    int out_of_order = 0, bad = 0;
    double worst = 0;
    DF_CHECK_MSG(heavy.done == 1 && heavy.status == 0, "heavy request status %d", heavy.status);
    DF_CHECK_MSG(heavy.order > 0, "the 512-pose request was answered first: no overtaking");
    {
        static const float alice_w[8] = {1, 0, 0.5f, 0, 0, 0, 0, 0.25f};
        static float ref[HN * 3];
        DF_CHECK(ref_eval(model_body, 1, NULL, NULL, 0, alice_w, 0, "positions", ref) == 0);
        DF_CHECK(max_rel_err(heavy.first, ref, HN * 3) <= 1e-6);
        DF_CHECK(max_rel_err(heavy.last, ref, HN * 3) <= 1e-6);
    }
    if (heavy.order != 0) out_of_order++;
    for (int i = 1; i < NP; i++) {
        DF_CHECK(slot[i].done == 1 && slot[i].status == 0);
        if (slot[i].order != i) out_of_order++;
        float ref[PN * 3];
        const char *names[2] = {"joint_rotations", "weights"};
        const float *data[2] = {rot[i], w[i]};
        DF_CHECK(ref_eval(model_prop, 1, names, data, 2, NULL, 0, "positions", ref) == 0);
        double e = max_rel_err(slot[i].pos, ref, PN * 3);
        if (e > worst) worst = e;
        if (!(e <= 1e-6)) bad++;
        if (i > 1) DF_CHECK(ids[i] != ids[i - 1]);
    }
    DF_CHECK_MSG(bad == 0, "%d of %d answers differ from core (worst rel %g)", bad, NP, worst);
    printf("# pipelining: %d requests in flight on one connection; the 512-pose request sent "
           "first was answered #%d; worst rel err %g\n", NP, heavy.order + 1, worst);
    (void)out_of_order;
    df_client_close(&c);
}

/* Close a connection with 64 requests in flight; the daemon must survive. */
static void test_close_with_inflight(void)
{
    for (int round = 0; round < 3; round++) {
        df_client_t *c = conn();
        if (!c) return;
        df_error_t err = {0};
        for (int i = 0; i < 64; i++) {
            df_client_request_t q = {0};
            q.character = i % 2 ? "alice" : "prop";
            DF_CHECK(df_client_submit(c, &q, NULL, NULL, NULL, &err) == 0);
        }
        df_client_close(&c);
    }
    usleep(200 * 1000);
    df_client_t *c = conn();
    df_error_t err = {0};
    df_client_request_t q = {0};
    q.character = "prop";
    df_client_result_t r;
    DF_CHECK_MSG(c && df_client_infer(c, &q, &r, &err) == 0, "%s", err.msg);
    df_client_result_free(&r);
    df_client_close(&c);
}

static void test_unix_socket(void)
{
    char addr[1200];
    snprintf(addr, sizeof addr, "unix:%s", unix_path);
    df_client_t *c = NULL;
    df_error_t err = {0};
    DF_CHECK_MSG(df_client_connect(addr, &c, &err) == 0, "%s", err.msg);
    if (!c) return;
    float rot[PJ * 4];
    rand_quats(rot, PJ);
    df_client_request_t q = {0};
    q.character = "prop";
    q.n_inputs = 1;
    snprintf(q.inputs[0].name, DF_NAME_MAX, "joint_rotations");
    q.inputs[0].ndim = 3; q.inputs[0].shape[0] = 1; q.inputs[0].shape[1] = PJ; q.inputs[0].shape[2] = 4;
    q.inputs[0].data = rot;
    q.n_outputs = 1;
    q.outputs[0] = "positions";
    df_client_result_t r;
    int rc = df_client_infer(c, &q, &r, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        float ref[PN * 3];
        const char *names[1] = {"joint_rotations"};
        const float *data[1] = {rot};
        DF_CHECK(ref_eval(model_prop, 1, names, data, 1, NULL, 0, "positions", ref) == 0);
        DF_CHECK(!memcmp(find_out(&r, "positions"), ref, sizeof ref));
        df_client_result_free(&r);
    }
    df_client_close(&c);
}

/* ------------------------------------------------------------ encodings */

static void test_encodings(void)
{
    df_client_t *c = conn();
    if (!c) return;
    enum { J = 6, N = 24 * 40 };
    float rot[J * 4], ref[N * 3], nref[N * 3];
    rand_quats(rot, J);
    const char *names[1] = {"joint_rotations"};
    const float *data[1] = {rot};
    DF_CHECK(ref_eval(model_body, 1, names, data, 1, NULL, DF_POSE_DQS, "positions", ref) == 0);
    DF_CHECK(ref_eval(model_body, 1, names, data, 1, NULL, DF_POSE_DQS, "normals", nref) == 0);
    const char *encs[2] = {"float16", "int16"};
    for (int e = 0; e < 2; e++) {
        df_client_request_t q = {0};
        q.character = "bob";
        q.encoding = encs[e];
        q.n_inputs = 1;
        snprintf(q.inputs[0].name, DF_NAME_MAX, "joint_rotations");
        q.inputs[0].ndim = 3; q.inputs[0].shape[0] = 1; q.inputs[0].shape[1] = J; q.inputs[0].shape[2] = 4;
        q.inputs[0].data = rot;
        df_client_result_t r;
        df_error_t err = {0};
        int rc = df_client_infer(c, &q, &r, &err);
        DF_CHECK_MSG(rc == 0, "%s: %s", encs[e], err.msg);
        if (rc) continue;
        DF_CHECK(r.n_outputs == 2); /* every output when none is named */
        double worst = 0, worst_n = 0;
        for (int o = 0; o < r.n_outputs; o++) {
            const df_client_tensor_t *t = &r.outputs[o];
            const float *want = !strcmp(t->name, "positions") ? ref : nref;
            DF_CHECK(t->encoding == e + 1);
            int bad = 0;
            for (int i = 0; i < N * 3; i++) {
                double d = fabs((double)t->data[i] - want[i]), tol;
                if (e == 0) tol = fabs(want[i]) * (1.0 / 2048) + 6e-8;
                else /* scale/2, plus float rounding of (v-offset)/scale and offset+scale*q */
                    tol = t->scale[i % 3] * 0.5 +
                          (fabs(want[i]) + fabs(t->offset[i % 3]) + t->scale[i % 3] * 32767) * 1.2e-7;
                if (!(d <= tol)) bad++;
                double rel = d / (e == 0 ? fabs(want[i]) + 1e-30 : t->scale[i % 3]);
                if (want == ref && rel > worst) worst = rel;
                if (want == nref && rel > worst_n) worst_n = rel;
            }
            DF_CHECK_MSG(bad == 0, "%s %s: %d values outside the documented error", encs[e],
                         t->name, bad);
        }
        printf("# %s: positions worst error %.3g %s, normals %.3g; %zu bytes on the wire\n", encs[e],
               worst, e == 0 ? "x |v|" : "x scale", worst_n, r.wire_bytes);
        df_client_result_free(&r);
    }
    df_client_close(&c);
}

/* ------------------------------------------------------------ HTTP vs socket */

static void test_http_equals_socket(void)
{
    df_client_t *c = conn();
    if (!c) return;
    enum { J = 6, M = 8, N = 24 * 40 };
    float rot[J * 4], w[M];
    rand_quats(rot, J);
    for (int i = 0; i < M; i++) w[i] = du_rand();
    df_client_request_t q = {0};
    q.character = "alice";
    q.n_inputs = 2;
    snprintf(q.inputs[0].name, DF_NAME_MAX, "joint_rotations");
    q.inputs[0].ndim = 3; q.inputs[0].shape[0] = 1; q.inputs[0].shape[1] = J; q.inputs[0].shape[2] = 4;
    q.inputs[0].data = rot;
    snprintf(q.inputs[1].name, DF_NAME_MAX, "weights");
    q.inputs[1].ndim = 2; q.inputs[1].shape[0] = 1; q.inputs[1].shape[1] = M;
    q.inputs[1].data = w;
    q.n_outputs = 1;
    q.outputs[0] = "positions";
    df_client_result_t rs, rj, rb;
    df_error_t err = {0};
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", D.port);
    DF_CHECK_MSG(df_client_infer(c, &q, &rs, &err) == 0, "socket: %s", err.msg);
    DF_CHECK_MSG(df_client_http_infer(base, &q, 0, &rj, &err) == 0, "http json: %s", err.msg);
    DF_CHECK_MSG(df_client_http_infer(base, &q, 1, &rb, &err) == 0, "http binary: %s", err.msg);
    const float *a = find_out(&rs, "positions"), *b = find_out(&rj, "positions"),
                *d = find_out(&rb, "positions");
    DF_CHECK(a && b && d);
    if (a && b && d) {
        DF_CHECK_MSG(!memcmp(a, b, N * 3 * sizeof(float)), "socket vs HTTP JSON rel %g",
                     max_rel_err(b, a, N * 3));
        DF_CHECK_MSG(!memcmp(a, d, N * 3 * sizeof(float)), "socket vs HTTP binary rel %g",
                     max_rel_err(d, a, N * 3));
    }
    df_client_result_free(&rs);
    df_client_result_free(&rj);
    df_client_result_free(&rb);
    df_client_close(&c);
}

/* ------------------------------------------------------------ raw frames */

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

/* Read one frame into buf (8-aligned). Returns total bytes, 0 on EOF, -1 on error. */
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

static void set_len(uint8_t *f, uint32_t len) { memcpy(f + 20, &len, 4); }

/* A valid INFER for prop: joint_rotations [1,3,4], weights [1,4]. */
static df_frame_infer_t valid_infer(float *rot, float *w)
{
    df_frame_infer_t q;
    memset(&q, 0, sizeof q);
    q.n_poses = 1;
    strcpy(q.character, "prop");
    q.n_outputs = 1;
    strcpy(q.outputs[0], "positions");
    q.n_inputs = 2;
    strcpy(q.inputs[0].name, "joint_rotations");
    q.inputs[0].ndim = 3; q.inputs[0].dims[0] = 1; q.inputs[0].dims[1] = PJ; q.inputs[0].dims[2] = 4;
    q.inputs[0].data = rot; q.inputs[0].nbytes = PJ * 16;
    strcpy(q.inputs[1].name, "weights");
    q.inputs[1].ndim = 2; q.inputs[1].dims[0] = 1; q.inputs[1].dims[1] = PM;
    q.inputs[1].data = w; q.inputs[1].nbytes = PM * 4;
    return q;
}

/* A valid request on fd must still be answered (RESULT, id 777). */
static int still_serves(int fd)
{
    float rot[PJ * 4], w[PM] = {0};
    rand_quats(rot, PJ);
    df_frame_infer_t q = valid_infer(rot, w);
    size_t n;
    uint8_t *b = enc_infer(&q, 777, &n);
    int ok = b && send_all(fd, b, n) == 0;
    free(b);
    static uint8_t buf[1 << 16] __attribute__((aligned(8)));
    long r = ok ? read_frame(fd, buf, sizeof buf) : -1;
    df_frame_t f;
    df_error_t err;
    return r > 0 && df_frame_decode(buf, (size_t)r, 1u << 20, &f, NULL, &err) == 0 &&
           f.h.type == DF_FT_RESULT && f.h.id == 777;
}

typedef struct {
    const char *name;
    int kind;   /* mutation id, see make_bad */
    int want;   /* expected ERROR code */
    int fatal;  /* connection closed after the ERROR */
} badcase_t;

static const badcase_t bad[] = {
    {"bad magic", 1, DF_EFORMAT, 1},
    {"version 9", 2, DF_EUNSUPPORTED, 1},
    {"declared length 4 GiB", 3, DF_ELIMIT, 1},
    {"flags set", 4, DF_EUNSUPPORTED, 0},
    {"unknown frame type", 5, DF_EUNSUPPORTED, 0},
    {"RESULT sent by a client", 6, DF_EUNSUPPORTED, 0},
    {"PONG sent by a client", 7, DF_EUNSUPPORTED, 0},
    {"INFER payload truncated", 8, DF_EFORMAT, 0},
    {"INFER unknown character", 9, DF_ENOTFOUND, 0},
    {"INFER unknown input", 10, DF_EINVAL, 0},
    {"INFER wrong per-pose shape", 11, DF_EINVAL, 0},
    {"INFER NaN value", 12, DF_EINVAL, 0},
    {"INFER unknown output", 13, DF_EINVAL, 0},
    {"INFER unknown clip", 14, DF_ENOTFOUND, 0},
    {"INFER dims[0] != n_poses", 15, DF_EINVAL, 0},
    {"INFER encoding 7", 16, DF_EUNSUPPORTED, 0},
    {"INFER n_poses 5000", 17, DF_ELIMIT, 0},
    {"INFER character name 64 bytes", 18, DF_ELIMIT, 0},
    {"INFER trailing bytes", 19, DF_EFORMAT, 0},
    {"INFER n_inputs beyond payload", 20, DF_EFORMAT, 0},
    {"PING payload 2000 bytes", 21, DF_ELIMIT, 0},
    {"INFO unknown character", 22, DF_ENOTFOUND, 0},
    {"INFO trailing bytes", 23, DF_EFORMAT, 0},
    {"INFER -inf value", 24, DF_EINVAL, 0},
};

static uint8_t *make_bad(int kind, size_t *n)
{
    float rot[PJ * 4], w[PM] = {0};
    rand_quats(rot, PJ);
    df_frame_infer_t q = valid_infer(rot, w);
    uint8_t *b;
    switch (kind) {
    case 9: strcpy(q.character, "nobody"); break;
    case 10: strcpy(q.inputs[1].name, "wheights"); break;
    case 11: q.inputs[1].dims[1] = PM - 1; q.inputs[1].nbytes = (PM - 1) * 4; break;
    case 12: w[2] = NAN; break;
    case 13: strcpy(q.outputs[0], "colors"); break;
    case 14: {
        static double t[1] = {0.5};
        strcpy(q.clip, "no_such_clip");
        q.times = t;
        break;
    }
    case 24: rot[5] = -INFINITY; break;
    }
    b = enc_infer(&q, 42, n);
    b = realloc(b, *n + 4096);
    uint32_t len = (uint32_t)(*n - 24);
    switch (kind) {
    case 1: memcpy(b, "HTTP", 4); break;
    case 2: b[4] = 9; break;
    case 3: set_len(b, 0xffffffffu); *n = 24; break;
    case 4: b[8] = 1; break;
    case 5: b[6] = 0x77; break;
    case 6: b[6] = DF_FT_RESULT; break;
    case 7: b[6] = DF_FT_PONG; break;
    case 8: set_len(b, len - 9); *n -= 9; break;
    case 15: b[24] = 2; break; /* n_poses 2, dims[0] 1 */
    case 16: b[24 + 8] = 7; break;
    case 17: b[24] = 0x88; b[25] = 0x13; break;
    case 18: b[24 + 14] = 64; break;
    case 19: b[*n] = 0; set_len(b, len + 1); *n += 1; break;
    case 20: b[24 + 10] = 9; break;
    case 21: {
        memset(b + 24, 'x', 2000);
        b[6] = DF_FT_PING;
        set_len(b, 2000);
        *n = 2024;
        break;
    }
    case 22: case 23: {
        df_frame_buf_t fb;
        df_error_t err;
        df_frame_buf_init(&fb);
        df_frame_encode_info(42, kind == 22 ? "nobody" : "prop", &fb.o, &err);
        df_frame_flatten(&fb.o, b);
        *n = fb.o.total;
        if (kind == 23) { b[*n] = 1; set_len(b, (uint32_t)(*n - 24 + 1)); *n += 1; }
        break;
    }
    }
    return b;
}

static void test_malformed_frames(void)
{
    int n = (int)(sizeof bad / sizeof bad[0]);
    static uint8_t buf[1 << 16] __attribute__((aligned(8)));
    for (int i = 0; i < n; i++) {
        int fd = raw_connect(sock_port);
        DF_CHECK(fd >= 0);
        if (fd < 0) return;
        size_t len = 0;
        uint8_t *b = make_bad(bad[i].kind, &len);
        DF_CHECK(send_all(fd, b, len) == 0);
        free(b);
        long r = read_frame(fd, buf, sizeof buf);
        df_frame_t f;
        df_error_t err = {0};
        int rc = r > 0 ? df_frame_decode(buf, (size_t)r, 1u << 20, &f, NULL, &err) : -100;
        DF_CHECK_MSG(rc == 0 && f.h.type == DF_FT_ERROR && f.u.error.code == bad[i].want,
                     "case \"%s\": rc %d type %d code %d (want %d): %s", bad[i].name, rc,
                     rc ? -1 : f.h.type, rc ? 0 : f.u.error.code, bad[i].want,
                     rc ? "" : f.u.error.msg);
        if (rc == 0 && f.h.type == DF_FT_ERROR)
            DF_CHECK_MSG(f.u.error.msg[0], "case \"%s\": empty message", bad[i].name);
        if (bad[i].fatal) {
            DF_CHECK_MSG(read_frame(fd, buf, sizeof buf) == 0, "case \"%s\": not closed", bad[i].name);
            close(fd);
            fd = raw_connect(sock_port);
        }
        DF_CHECK_MSG(still_serves(fd), "case \"%s\": no valid answer afterwards", bad[i].name);
        close(fd);
    }
    printf("# %d malformed frames answered with the right ERROR; daemon still serving\n", n);
}

/* A frame split in pieces (partial reads) is served once complete. */
static void test_partial_frames(void)
{
    int fd = raw_connect(sock_port);
    if (fd < 0) return;
    float rot[PJ * 4], w[PM] = {0.5f, 0, 0, 0};
    rand_quats(rot, PJ);
    df_frame_infer_t q = valid_infer(rot, w);
    size_t n;
    uint8_t *b = enc_infer(&q, 5, &n);
    size_t cuts[4] = {0, 7, 30, n};
    for (int k = 0; k < 3; k++) {
        DF_CHECK(send_all(fd, b + cuts[k], cuts[k + 1] - cuts[k]) == 0);
        usleep(50 * 1000);
    }
    static uint8_t buf[1 << 16] __attribute__((aligned(8)));
    long r = read_frame(fd, buf, sizeof buf);
    df_frame_t f;
    df_error_t err;
    DF_CHECK(r > 0 && df_frame_decode(buf, (size_t)r, 1u << 20, &f, NULL, &err) == 0 &&
             f.h.type == DF_FT_RESULT && f.h.id == 5);
    /* two frames in one write are both answered */
    uint8_t *two = malloc(2 * n);
    memcpy(two, b, n);
    memcpy(two + n, b, n);
    two[n + 12] = 6; /* id 6 */
    DF_CHECK(send_all(fd, two, 2 * n) == 0);
    int seen = 0;
    for (int k = 0; k < 2; k++) {
        r = read_frame(fd, buf, sizeof buf);
        if (r > 0 && df_frame_decode(buf, (size_t)r, 1u << 20, &f, NULL, &err) == 0 &&
            f.h.type == DF_FT_RESULT)
            seen |= 1 << (f.h.id - 5);
    }
    DF_CHECK(seen == 3);
    free(two);
    free(b);
    close(fd);
}

/* Limits on a second daemon: 4 in flight per connection, 4 KiB frames.
 * Requests go to the workers (inline_max_us=0): a request evaluated inline
 * is answered and written before the next frame is parsed (uv_try_write),
 * so it is never in flight and the limit could not show. */
static void test_limits(void)
{
    daemon_t D2;
    const char *extra[] = {"--socket-port", "0", "--set", "max_inflight_per_conn=4",
                           "--set", "max_frame_bytes=4096", "--set", "idle_timeout_s=1",
                           "--set", "inline_max_us=0", NULL};
    DF_CHECK(daemon_start(&D2, repo, "sock_limits", extra) == 0);
    int port = read_sock_port(&D2);
    DF_CHECK(port > 0);
    int fd = raw_connect(port);
    if (fd < 0) { daemon_stop(&D2); return; }
    float rot[PJ * 4], w[PM] = {0};
    rand_quats(rot, PJ);
    df_frame_infer_t q = valid_infer(rot, w);
    size_t n;
    uint8_t *b = enc_infer(&q, 1, &n);
    uint8_t *many = malloc(32 * n);
    for (int i = 0; i < 32; i++) {
        memcpy(many + i * n, b, n);
        many[i * n + 12] = (uint8_t)(i + 1);
    }
    DF_CHECK(send_all(fd, many, 32 * n) == 0);
    static uint8_t buf[1 << 16] __attribute__((aligned(8)));
    int results = 0, limited = 0, other = 0;
    for (int i = 0; i < 32; i++) {
        long r = read_frame(fd, buf, sizeof buf);
        df_frame_t f;
        df_error_t err;
        if (r <= 0 || df_frame_decode(buf, (size_t)r, 1u << 20, &f, NULL, &err)) { other++; break; }
        if (f.h.type == DF_FT_RESULT) results++;
        else if (f.h.type == DF_FT_ERROR && f.u.error.code == DF_ELIMIT) limited++;
        else other++;
    }
    DF_CHECK_MSG(results >= 4 && limited >= 1 && results + limited == 32 && other == 0,
                 "results %d limited %d other %d", results, limited, other);
    printf("# in-flight limit 4: %d answered, %d refused with DF_ELIMIT\n", results, limited);
    /* a frame over 4 KiB: ERROR DF_ELIMIT, then closed */
    uint8_t hdr[24];
    memcpy(hdr, b, 24);
    set_len(hdr, 5000);
    DF_CHECK(send_all(fd, hdr, 24) == 0);
    long r = read_frame(fd, buf, sizeof buf);
    df_frame_t f;
    df_error_t err;
    DF_CHECK(r > 0 && df_frame_decode(buf, (size_t)r, 1u << 20, &f, NULL, &err) == 0 &&
             f.h.type == DF_FT_ERROR && f.u.error.code == DF_ELIMIT);
    DF_CHECK(read_frame(fd, buf, sizeof buf) == 0);
    close(fd);
    /* idle timeout 1 s: a silent connection, and one stuck in a partial
     * header, are closed (EOF within the 10 s receive timeout) */
    for (int k = 0; k < 2; k++) {
        fd = raw_connect(port);
        if (k == 1) DF_CHECK(send_all(fd, b, 10) == 0);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        DF_CHECK_MSG(read_frame(fd, buf, sizeof buf) == 0, "idle connection %d not closed", k);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("# idle connection%s closed after %.1f s (idle_timeout_s=1)\n",
               k ? " with a partial header" : "", (double)(t1.tv_sec - t0.tv_sec) +
               (t1.tv_nsec - t0.tv_nsec) * 1e-9);
        close(fd);
    }
    free(many);
    free(b);
    DF_CHECK(daemon_stop(&D2) == 0);
}

/* A client that sends 120 requests of 64 poses (1.47 MB answers, 177 MB
 * in all: more than the 64 MiB a connection may queue, so the daemon must
 * pause reading it) and reads nothing for a while: the daemon keeps serving
 * other connections (workers never block on a slow reader), and every
 * answer arrives, in full, once the client reads. */
static void test_slow_reader(void)
{
    enum { NREQ = 120, SB = 64 };
    int fd = raw_connect(sock_port);
    if (fd < 0) return;
    df_frame_infer_t q;
    memset(&q, 0, sizeof q);
    q.n_poses = SB;
    strcpy(q.character, "alice"); /* positions + normals: 64 x 960 x 3 x 4 x 2 bytes */
    size_t n;
    uint8_t *b = enc_infer(&q, 1, &n);
    for (int i = 0; i < NREQ; i++) {
        b[12] = (uint8_t)i;
        b[13] = (uint8_t)(i >> 8);
        DF_CHECK(send_all(fd, b, n) == 0);
    }
    free(b);
    usleep(500 * 1000);
    df_client_t *c = conn(); /* another client is served meanwhile */
    df_client_request_t qq = {0};
    qq.character = "prop";
    df_client_result_t r;
    df_error_t err = {0};
    DF_CHECK_MSG(c && df_client_infer(c, &qq, &r, &err) == 0, "%s", err.msg);
    df_client_result_free(&r);
    df_client_close(&c);
    static uint8_t buf[2 << 20] __attribute__((aligned(8)));
    /* every request is the same pose: every RESULT carries the same bytes,
     * whether the daemon wrote it at once or in pieces behind a full socket */
    static uint8_t first[2 << 20];
    size_t first_len = 0;
    int got = 0, results = 0, overloaded = 0, differ = 0;
    uint64_t ids = 0;
    for (int i = 0; i < NREQ; i++) {
        long rr = read_frame(fd, buf, sizeof buf);
        df_frame_t f;
        int drc = rr > 0 ? df_frame_decode(buf, (size_t)rr, 1u << 22, &f, NULL, &err) : -1;
        if (drc == 0 && f.h.type == DF_FT_RESULT && f.u.result.n_poses == SB &&
            f.u.result.n_outputs == 2) {
            got++;
            results++;
            ids += f.h.id;
            const df_frame_tensor_t *t = &f.u.result.outputs[1];
            size_t off = (size_t)((const uint8_t *)t->data - buf) + t->nbytes - 24;
            if (!first_len) {
                memcpy(first, buf + 24, off);
                first_len = off;
            } else if (off != first_len || memcmp(first, buf + 24, off)) {
                differ++;
            }
        } else if (drc == 0 && f.h.type == DF_FT_ERROR &&
                   (f.u.error.code == DF_EOVERLOAD || f.u.error.code == DF_ETIMEDOUT)) {
            /* a slow machine (sanitizers) may fill the model's queue (7,680
             * poses queued) or pass the request deadline: still an answer */
            got++;
            overloaded++;
            ids += f.h.id;
        } else {
            fprintf(stderr, "slow reader: answer %d: read %ld (%s), type %d\n", i, rr,
                    rr < 0 ? strerror(errno) : "", rr > 0 ? (int)f.h.type : -1);
            break;
        }
    }
    DF_CHECK_MSG(got == NREQ && ids == (uint64_t)NREQ * (NREQ - 1) / 2 && results > 0,
                 "slow reader got %d of %d answers", got, NREQ);
    DF_CHECK_MSG(differ == 0, "%d of %d answers differ from the first", differ, results);
    printf("# slow reader: %d answers of %.1f MB each, %d refused as overload/timeout\n",
           results, 64.0 * 960 * 3 * 4 * 2 / 1e6, overloaded);
    close(fd);
}

/* ------------------------------------------------------------ clips */

static void test_play_clip(void)
{
    if (!have_wuson) { printf("# skipped: wuson not imported\n"); return; }
    df_client_t *c = conn();
    if (!c) return;
    df_client_play_t p = {0};
    p.character = "wuson";
    p.clip = "Wuson_Run";
    p.chunk = 4;
    p.window = 4;
    float *frames = NULL;
    size_t F = 0;
    int ndim = 0;
    int64_t shape[DF_MAX_DIMS];
    df_error_t err = {0};
    int rc = df_client_play(c, &p, &frames, &F, &ndim, shape, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) { df_client_close(&c); return; }
    DF_CHECK(ndim == 2 && shape[1] == 3 && F == 30);
    /* reference: core samples the clip at the same key times and evaluates */
    df_model_t *m = NULL;
    DF_CHECK(df_model_open(model_wuson, "rigged", NULL, NULL, &m, &err) == 0);
    if (!m) { free(frames); df_client_close(&c); return; }
    int cl = df_model_clip_find(m, "Wuson_Run");
    df_clip_info_t ci;
    df_model_clip_info(m, (size_t)cl, &ci);
    int nin = df_model_n_inputs(m), o = df_model_find_output(m, "positions");
    size_t N = (size_t)shape[0];
    float *ref = malloc(N * 3 * sizeof(float));
    float *bufs[DF_MAX_IO] = {0};
    for (int i = 0; i < nin; i++) {
        size_t k = 1;
        for (int d = 0; d < df_model_input(m, i)->ndim; d++) k *= (size_t)df_model_input(m, i)->shape[d];
        bufs[i] = malloc(k * sizeof(float));
    }
    df_scratch_t *sc = df_scratch_new();
    double worst = 0;
    for (size_t f = 0; f < F; f++) {
        uint32_t filled = 0;
        DF_CHECK(df_model_clip_sample(m, cl, (double)ci.times[f] - ci.times[0], bufs, &filled, &err) == 0);
        df_batch_t bt;
        memset(&bt, 0, sizeof bt);
        bt.n = 1;
        const float *inp[DF_MAX_IO][1];
        for (int i = 0; i < nin; i++)
            if (filled & (1u << i)) { inp[i][0] = bufs[i]; bt.in[i] = inp[i]; }
        float *op[1] = {ref};
        bt.out[o] = op;
        DF_CHECK(df_model_evaluate(m, &bt, sc, &err) == 0);
        double e = max_rel_err(frames + f * N * 3, ref, N * 3);
        if (e > worst) worst = e;
    }
    DF_CHECK_MSG(worst <= 1e-6, "play vs core: worst rel %g", worst);
    printf("# play Wuson_Run: %zu frames x %zu vertices, worst rel err vs core %g\n", F, N, worst);
    for (int i = 0; i < nin; i++) free(bufs[i]);
    free(ref);
    free(frames);
    df_scratch_free(&sc);
    df_model_unref(&m);
    df_client_close(&c);
}

/* issue 14.5: clip names. df_client_clip_match: exact, then ignoring case,
 * then a unique part ignoring case; df_client_play resolves "walk" to
 * Wuson_Walk (the same frames as the full name) and, when nothing or several
 * match, says so with the list of the character's clips. */
static void test_clip_names(void)
{
    const char *names[] = {"Wuson_Run", "Wuson_Walk", "Wuson_Bind", "walk"};
    DF_CHECK(df_client_clip_match(names, 3, "Wuson_Walk") == 1);
    DF_CHECK(df_client_clip_match(names, 3, "wuson_walk") == 1);
    DF_CHECK(df_client_clip_match(names, 3, "walk") == 1);
    DF_CHECK(df_client_clip_match(names, 3, "WALK") == 1);
    DF_CHECK(df_client_clip_match(names, 3, "run") == 0);
    DF_CHECK(df_client_clip_match(names, 3, "wuson") == -2);  /* several */
    DF_CHECK(df_client_clip_match(names, 3, "_") == -2);
    DF_CHECK(df_client_clip_match(names, 3, "jump") == -1);
    DF_CHECK(df_client_clip_match(names, 3, "") == -1);
    DF_CHECK(df_client_clip_match(names, 0, "walk") == -1);
    /* an exact name wins over a longer one containing it */
    DF_CHECK(df_client_clip_match(names, 4, "walk") == 3);
    DF_CHECK(df_client_clip_match(names, 4, "Walk") == 3);
    if (!have_wuson) { printf("# skipped play: wuson not imported\n"); return; }
    df_client_t *c = conn();
    if (!c) return;
    float *fr[2] = {NULL, NULL};
    size_t F[2] = {0, 0};
    int ndim[2] = {0, 0};
    int64_t shape[2][DF_MAX_DIMS];
    const char *ask[2] = {"Wuson_Walk", "walk"};
    for (int k = 0; k < 2; k++) {
        char played[DF_NAME_MAX] = "";
        df_client_play_t p = {0};
        p.character = "wuson";
        p.clip = ask[k];
        p.clip_played = played;
        df_error_t err = {0};
        int rc = df_client_play(c, &p, &fr[k], &F[k], &ndim[k], shape[k], &err);
        DF_CHECK_MSG(rc == 0, "play --clip %s: %s", ask[k], err.msg);
        DF_CHECK_MSG(!strcmp(played, "Wuson_Walk"), "--clip %s played '%s'", ask[k], played);
    }
    DF_CHECK(F[0] > 1 && F[0] == F[1] && ndim[0] == ndim[1] && shape[0][0] == shape[1][0]);
    if (fr[0] && fr[1] && F[0] == F[1])
        DF_CHECK_MSG(!memcmp(fr[0], fr[1], F[0] * (size_t)shape[0][0] * 3 * sizeof(float)),
                     "'walk' and 'Wuson_Walk' give different frames");
    free(fr[0]);
    free(fr[1]);
    static const struct { const char *clip; int code; const char *text; } bad[] = {
        {"nope", DF_ENOTFOUND, "has no clip \"nope\" (clips: Wuson_Run, Wuson_Walk"},
        {"wuson", DF_EINVAL, "matches several clips of \"wuson\": Wuson_Run, Wuson_Walk"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        df_client_play_t p = {0};
        p.character = "wuson";
        p.clip = bad[k].clip;
        float *f = NULL;
        size_t n = 0;
        int nd = 0;
        int64_t sh[DF_MAX_DIMS];
        df_error_t err = {0};
        int rc = df_client_play(c, &p, &f, &n, &nd, sh, &err);
        DF_CHECK_MSG(rc == bad[k].code && strstr(err.msg, bad[k].text), "--clip %s: rc %d '%s'",
                     bad[k].clip, rc, err.msg);
        free(f);
    }
    df_client_close(&c);
}

/* ------------------------------------------------------------ retry */

/* The HTTP calls' one retry, against the real daemon behind a relay on
 * loopback that fails the first connection the way a router or a dying
 * daemon does: closed after reading the request (no answer), or answered
 * 502; later connections are relayed to the daemon. The answer after the
 * retry must equal the direct one bit for bit, after exactly two
 * connections; 502 twice fails after two (one retry, not more). */
typedef struct relay {
    int lfd, port;
    const char *script;  /* per connection: 'd' drop, '5' answer 502, 'r' relay */
    int n_conns;
    pthread_t th;
} relay_t;

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    for (const char *m = r->script; *m; m++) {
        int fd = accept(r->lfd, NULL, NULL);
        if (fd < 0) break;
        r->n_conns++;
        char buf[65536];
        if (*m == 'd' || *m == '5') {
            struct pollfd p = {fd, POLLIN, 0};
            while (poll(&p, 1, 300) > 0 && read(fd, buf, sizeof buf) > 0) {}
            if (*m == '5') {
                const char *a = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                (void)!write(fd, a, strlen(a));
            }
            close(fd);
            continue;
        }
        int up = raw_connect(D.port);
        struct pollfd p[2] = {{fd, POLLIN, 0}, {up, POLLIN, 0}};
        for (int open = up >= 0; open && poll(p, 2, 5000) > 0;) {
            for (int k = 0; k < 2; k++) {
                if (!(p[k].revents & (POLLIN | POLLHUP))) continue;
                ssize_t n = read(p[k].fd, buf, sizeof buf);
                if (n <= 0 || send_all(p[1 - k].fd, buf, (size_t)n)) { open = 0; break; }
            }
        }
        if (up >= 0) close(up);
        close(fd);
    }
    return NULL;
}

static int relay_start(relay_t *r, const char *script)
{
    memset(r, 0, sizeof *r);
    r->script = script;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&a, sizeof a) || listen(r->lfd, 8) ||
        getsockname(r->lfd, (struct sockaddr *)&a, &al))
        return -1;
    r->port = ntohs(a.sin_port);
    return pthread_create(&r->th, NULL, relay_main, r);
}

static void relay_stop(relay_t *r)
{
    shutdown(r->lfd, SHUT_RDWR);
    close(r->lfd);
    pthread_join(r->th, NULL);
}

static void test_http_retry(void)
{
    signal(SIGPIPE, SIG_IGN);
    df_client_request_t q = {0};
    q.character = "alice";
    q.n_outputs = 1;
    q.outputs[0] = "positions";
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", D.port);
    df_client_result_t r0;
    df_error_t err = {0};
    DF_CHECK_MSG(df_client_http_infer(base, &q, 1, &r0, &err) == 0, "direct: %s", err.msg);
    static const struct { const char *script; int ok; } cases[] = {
        {"dr", 1}, {"5r", 1}, {"55r", 0}};
    for (int k = 0; k < 3; k++) {
        relay_t rl;
        DF_CHECK(relay_start(&rl, cases[k].script) == 0);
        char rbase[64];
        snprintf(rbase, sizeof rbase, "http://127.0.0.1:%d", rl.port);
        df_client_result_t r1;
        int rc = df_client_http_infer(rbase, &q, 1, &r1, &err);
        int conns = rl.n_conns;
        if (!cases[k].ok) { /* let the relay's last accept return */
            int fd = raw_connect(rl.port);
            if (fd >= 0) close(fd);
        }
        relay_stop(&rl);
        DF_CHECK_MSG(conns == 2, "%s: %d connections (one retry expected)", cases[k].script, conns);
        if (!cases[k].ok) {
            DF_CHECK_MSG(rc != 0, "%s: succeeded after two 502s", cases[k].script);
            continue;
        }
        DF_CHECK_MSG(rc == 0, "%s: %s", cases[k].script, err.msg);
        if (rc == 0 && r0.n_outputs == 1 && r1.n_outputs == 1) {
            size_t n = (size_t)r0.outputs[0].shape[1] * 3;
            DF_CHECK_MSG(r1.outputs[0].shape[1] == r0.outputs[0].shape[1] &&
                             !memcmp(r0.outputs[0].data, r1.outputs[0].data, n * sizeof(float)),
                         "%s: the retried answer differs", cases[k].script);
        }
        if (rc == 0) df_client_result_free(&r1);
    }
    df_client_result_free(&r0);
}


/* A blocking call whose connection is lost is sent once more on a new
 * connection to the same address: daemon 1 answers, is stopped (its
 * connections close), daemon 2 takes the same socket port; the next
 * df_client_infer on the old connection must succeed with the same answer,
 * bit for bit (same model, request alone), after exactly one retry. With
 * no daemon left it fails with DF_EIO after one attempt to reconnect. */
static void test_retry_after_lost_connection(void)
{
    signal(SIGPIPE, SIG_IGN);
    daemon_t d1, d2;
    const char *x1[] = {"--socket-port", "0", NULL};
    DF_CHECK(daemon_start(&d1, repo, "sock_retry1", x1) == 0);
    int port = read_sock_port(&d1);
    DF_CHECK(port > 0);
    if (port <= 0) { daemon_stop(&d1); return; }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    df_client_t *c = NULL;
    df_error_t err = {0};
    DF_CHECK_MSG(df_client_connect(addr, &c, &err) == 0, "%s", err.msg);
    if (!c) { daemon_stop(&d1); return; }
    df_client_request_t q = {0};
    q.character = "alice";
    q.n_outputs = 1;
    q.outputs[0] = "positions";
    df_client_result_t r0, r1;
    DF_CHECK_MSG(df_client_infer(c, &q, &r0, &err) == 0, "%s", err.msg);
    DF_CHECK(df_client_retries(c) == 0);
    DF_CHECK(daemon_stop(&d1) == 0);
    char pstr[16];
    snprintf(pstr, sizeof pstr, "%d", port);
    const char *x2[] = {"--socket-port", pstr, NULL};
    DF_CHECK(daemon_start(&d2, repo, "sock_retry2", x2) == 0);
    int rc = df_client_infer(c, &q, &r1, &err);
    DF_CHECK_MSG(rc == 0, "infer after the daemon changed: %s", err.msg);
    DF_CHECK_MSG(df_client_retries(c) == 1, "retries %u", df_client_retries(c));
    if (rc == 0 && r0.n_outputs == 1 && r1.n_outputs == 1) {
        size_t n = (size_t)r0.outputs[0].shape[1] * 3;
        DF_CHECK(r1.outputs[0].shape[1] == r0.outputs[0].shape[1]);
        DF_CHECK_MSG(!memcmp(r0.outputs[0].data, r1.outputs[0].data, n * sizeof(float)),
                     "the retried answer differs");
        df_client_result_free(&r1);
    }
    /* the new connection works without a retry */
    rc = df_client_infer(c, &q, &r1, &err);
    DF_CHECK_MSG(rc == 0 && df_client_retries(c) == 1, "rc %d retries %u", rc, df_client_retries(c));
    if (rc == 0) df_client_result_free(&r1);
    df_client_result_free(&r0);
    DF_CHECK(daemon_stop(&d2) == 0);
    rc = df_client_infer(c, &q, &r1, &err);
    DF_CHECK_MSG(rc == DF_EIO, "no daemon: rc %d (%s)", rc, err.msg);
    DF_CHECK(df_client_retries(c) == 1);
    df_client_close(&c);
}

int main(void)
{
    snprintf(repo, sizeof repo, "%s/sock_repo", test_out());
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "rm -rf %s", repo);
    if (system(cmd)) return 2;
    mkdirs(repo);
    make_repo(repo);
    snprintf(model_prop, sizeof model_prop, "%s/prop/1/model.safetensors", repo);
    snprintf(model_body, sizeof model_body, "%s/body/1/model.safetensors", repo);
    const char *asset = "/usr/share/assimp/models/X/Testwuson.X";
    if (!access(asset, R_OK)) {
        snprintf(cmd, sizeof cmd, "%s/deform import %s --repository %s --name wuson >%s/sock_import.log 2>&1",
                 bin_dir(), asset, repo, test_out());
        have_wuson = system(cmd) == 0;
        snprintf(model_wuson, sizeof model_wuson, "%s/wuson/1/model.safetensors", repo);
        if (have_wuson && access(model_wuson, R_OK)) have_wuson = 0;
    }
    snprintf(unix_path, sizeof unix_path, "%s/deformd-test.sock", test_out());
    const char *extra[] = {"--socket-port", "0", "--unix", unix_path, NULL};
    if (daemon_start(&D, repo, "sock_main", extra)) {
        printf("FAIL daemon_start\n");
        daemon_stop(&D); /* it may be running but not ready */
        return 1;
    }
    sock_port = read_sock_port(&D);
    if (sock_port <= 0) {
        printf("FAIL socket_port\n");
        daemon_stop(&D);
        return 1;
    }
    DF_RUN(test_ping_info);
    DF_RUN(test_infer_bit_identical);
    DF_RUN(test_pipelining_100);
    DF_RUN(test_unix_socket);
    DF_RUN(test_encodings);
    DF_RUN(test_http_equals_socket);
    DF_RUN(test_malformed_frames);
    DF_RUN(test_partial_frames);
    DF_RUN(test_close_with_inflight);
    DF_RUN(test_slow_reader);
    DF_RUN(test_play_clip);
    DF_RUN(test_clip_names);
    DF_RUN(test_limits);
    DF_RUN(test_retry_after_lost_connection);
    DF_RUN(test_http_retry);
    int st = daemon_stop(&D);
    DF_CHECK_MSG(st == 0, "deformd exit status %d (log %s)", st, D.log);
    return dftest_exit();
}

/* test_frame.c — the binary socket codec (proto/frame.c) against the spec.
 *
 * 1. Golden frames (tests/data/golden_frames/NAME.hex), written by hand from
 *    docs/protocol.md: each is decoded and every field compared with the
 *    values stated in the file's comments, then the decoded struct is
 *    re-encoded and must give exactly the same bytes (checked both ways).
 * 2. Round trips of bigger frames built in the test (random data, B > 1,
 *    clips, int16 outputs); the encoder must reference, not copy, big data.
 * 3. A malformed corpus (> 60 cases) made by mutating golden frames: each
 *    must be rejected with the stated DF_E* code (and header errors with the
 *    stated fatal/non-fatal verdict), plus every truncation of every golden
 *    payload. Run under ASan (make asan) this also shows no decoder reads
 *    out of bounds.
 */
#include "dftest.h"
#include "frame.h"

#include <stdint.h>
#include <string.h>

#define GOLD "tests/data/golden_frames/"

typedef struct {
    uint8_t *p; /* 8-byte aligned (malloc) */
    size_t n;
} bytes_t;

static bytes_t load_hex(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, GOLD "%s", name);
    FILE *f = fopen(path, "r");
    bytes_t b = {malloc(1 << 16), 0};
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return b;
    }
    int c, hi = -1, comment = 0;
    while ((c = fgetc(f)) != EOF) {
        if (c == '\n') { comment = 0; continue; }
        if (comment) continue;
        if (c == '#') { comment = 1; continue; }
        int v = (c >= '0' && c <= '9') ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (v < 0) continue;
        if (hi < 0) hi = v;
        else { b.p[b.n++] = (uint8_t)(hi << 4 | v); hi = -1; }
    }
    fclose(f);
    return b;
}

/* Encoder output flattened into an aligned buffer. */
static bytes_t flat(const df_frame_out_t *o)
{
    bytes_t b = {malloc(o->total + 8), o->total};
    df_frame_flatten(o, b.p);
    return b;
}

static int same(bytes_t a, bytes_t b, const char *what)
{
    if (a.n != b.n) {
        fprintf(stderr, "%s: %zu bytes vs golden %zu\n", what, a.n, b.n);
        return 0;
    }
    for (size_t i = 0; i < a.n; i++)
        if (a.p[i] != b.p[i]) {
            fprintf(stderr, "%s: byte %zu is %02x, golden %02x\n", what, i, a.p[i], b.p[i]);
            return 0;
        }
    return 1;
}

static float f32at(const void *p, size_t i) { float f; memcpy(&f, (const char *)p + 4 * i, 4); return f; }

/* ------------------------------------------------------------ golden */

static void test_golden_ping_pong(void)
{
    const char *files[2] = {"ping.hex", "pong.hex"};
    int types[2] = {DF_FT_PING, DF_FT_PONG};
    for (int k = 0; k < 2; k++) {
        bytes_t g = load_hex(files[k]);
        df_frame_t fr;
        size_t used = 0;
        df_error_t err = {0};
        DF_CHECK(g.n == 26);
        DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, &used, &err) == DF_OK);
        DF_CHECK(used == 26 && fr.h.type == types[k] && fr.h.id == 7 && fr.h.length == 2);
        DF_CHECK(fr.u.blob.len == 2 && !memcmp(fr.u.blob.data, "hi", 2));
        df_frame_buf_t fb;
        df_frame_buf_init(&fb);
        DF_CHECK(df_frame_encode_blob(7, types[k], "hi", 2, &fb.o, &err) == DF_OK);
        bytes_t e = flat(&fb.o);
        DF_CHECK(same(e, g, files[k]));
        free(e.p); free(g.p);
    }
}

static void test_golden_infer_basic(void)
{
    bytes_t g = load_hex("infer_basic.hex");
    df_frame_t fr;
    df_error_t err = {0};
    DF_CHECK(g.n == 24 + 64);
    int rc = df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    df_frame_infer_t *q = &fr.u.infer;
    DF_CHECK(fr.h.type == DF_FT_INFER && fr.h.id == 0x0102030405060708ull);
    DF_CHECK(q->n_poses == 1 && q->pose_flags == 0 && q->encoding == DF_WIRE_F16);
    DF_CHECK(!strcmp(q->character, "wuson") && q->clip[0] == 0 && q->times == NULL);
    DF_CHECK(q->n_outputs == 1 && !strcmp(q->outputs[0], "positions"));
    DF_CHECK(q->n_inputs == 1 && !strcmp(q->inputs[0].name, "weights"));
    DF_CHECK(q->inputs[0].type == DF_DT_F32 && q->inputs[0].ndim == 2);
    DF_CHECK(q->inputs[0].dims[0] == 1 && q->inputs[0].dims[1] == 2);
    DF_CHECK(q->inputs[0].nbytes == 8);
    DF_CHECK(q->inputs[0].data == g.p + 24 + 56); /* borrowed, aligned */
    DF_CHECK(f32at(q->inputs[0].data, 0) == 0.5f && f32at(q->inputs[0].data, 1) == 1.0f);
    df_frame_buf_t fb;
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(fr.h.id, q, &fb.o, &err) == DF_OK);
    /* zero-copy: the tensor data is its own segment pointing at the source */
    int found = 0;
    for (int i = 0; i < fb.o.n_segs; i++)
        if (fb.o.segs[i].base == q->inputs[0].data && fb.o.segs[i].len == 8) found = 1;
    DF_CHECK(found);
    bytes_t e = flat(&fb.o);
    DF_CHECK(same(e, g, "infer_basic"));
    free(e.p); free(g.p);
}

static void test_golden_infer_clip(void)
{
    bytes_t g = load_hex("infer_clip.hex");
    df_frame_t fr;
    df_error_t err = {0};
    DF_CHECK(g.n == 24 + 48);
    int rc = df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    df_frame_infer_t *q = &fr.u.infer;
    DF_CHECK(fr.h.id == 42 && q->n_poses == 2 && q->pose_flags == DF_POSE_DQS);
    DF_CHECK(q->encoding == DF_WIRE_I16 && q->n_inputs == 0 && q->n_outputs == 0);
    DF_CHECK(!strcmp(q->character, "wuson") && !strcmp(q->clip, "Walk"));
    DF_CHECK(q->times && q->times[0] == 0.0 && q->times[1] == 0.5);
    df_frame_buf_t fb;
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(42, q, &fb.o, &err) == DF_OK);
    bytes_t e = flat(&fb.o);
    DF_CHECK(same(e, g, "infer_clip"));
    free(e.p); free(g.p);
}

static void test_golden_auth(void)
{
    df_error_t err = {0};
    df_frame_t fr;
    df_frame_buf_t fb;
    bytes_t g = load_hex("auth.hex");
    DF_CHECK(g.n == 24 + 18);
    int rc = df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    DF_CHECK(fr.h.type == DF_FT_AUTH && fr.h.id == 1 && !strcmp(fr.u.token, "alpha-token-0001"));
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_auth(1, "alpha-token-0001", &fb.o, &err) == DF_OK);
    bytes_t e = flat(&fb.o);
    DF_CHECK(same(e, g, "auth"));
    free(e.p); free(g.p);
    g = load_hex("auth_ok.hex");
    DF_CHECK(g.n == 24);
    rc = df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
    DF_CHECK_MSG(rc == DF_OK && fr.h.type == DF_FT_AUTH_OK && fr.h.id == 1, "%s", err.msg);
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_blob(1, DF_FT_AUTH_OK, NULL, 0, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "auth_ok"));
    free(e.p); free(g.p);
    /* an empty token, a NUL inside, 256 bytes: refused both ways */
    DF_CHECK(df_frame_encode_auth(1, "", &fb.o, &err) == DF_EINVAL);
    uint8_t pl[8] = {3, 0, 'a', 0, 'b'};
    char tok[DF_FRAME_MAX_TOKEN + 1];
    DF_CHECK(df_frame_decode_auth(pl, 5, tok, &err) == DF_EFORMAT);
    pl[0] = 0;
    DF_CHECK(df_frame_decode_auth(pl, 2, tok, &err) == DF_EFORMAT);
    uint8_t big[2 + 256] = {0, 1};
    memset(big + 2, 'x', 256);
    DF_CHECK(df_frame_decode_auth(big, sizeof big, tok, &err) == DF_ELIMIT);
}

static void test_golden_infer_sequence(void)
{
    df_error_t err = {0};
    df_frame_t fr;
    df_frame_buf_t fb;
    bytes_t g = load_hex("infer_sequence.hex");
    DF_CHECK(g.n == 24 + 40);
    int rc = df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    df_frame_infer_t *q = &fr.u.infer;
    DF_CHECK(fr.h.id == 43 && q->n_poses == 1 && !strcmp(q->character, "shirt") && !q->clip[0]);
    DF_CHECK(q->seq && q->seq_flags == DF_SEQ_START && !strcmp(q->seq_id_str, "take-2"));
    DF_CHECK(q->n_outputs == 1 && !strcmp(q->outputs[0], "state") && q->n_inputs == 0);
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(43, q, &fb.o, &err) == DF_OK);
    bytes_t e = flat(&fb.o);
    DF_CHECK(same(e, g, "infer_sequence"));
    free(e.p); free(g.p);
    g = load_hex("infer_sequence_end.hex");
    DF_CHECK(g.n == 24 + 31);
    rc = df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    DF_CHECK(fr.h.id == 44 && !strcmp(q->character, "ann") && q->n_outputs == 0);
    DF_CHECK(q->seq && q->seq_flags == DF_SEQ_END && q->seq_id == 7 && !q->seq_id_str[0]);
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(44, q, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "infer_sequence_end"));
    /* id 0, flag bits 4.., id kind 2: refused */
    e.p[24 + 23] = 0;
    DF_CHECK(df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_EINVAL);
    e.p[24 + 23] = 7;
    e.p[24 + 21] = 4;
    DF_CHECK(df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_EFORMAT);
    e.p[24 + 21] = 2;
    e.p[24 + 22] = 2;
    DF_CHECK(df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_EFORMAT);
    free(e.p); free(g.p);
}

static void test_golden_results(void)
{
    df_error_t err = {0};
    df_frame_t fr;
    df_frame_buf_t fb;
    /* float32 */
    bytes_t g = load_hex("result_f32.hex");
    DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_OK);
    df_frame_result_t *r = &fr.u.result;
    DF_CHECK(r->n_poses == 1 && r->n_outputs == 1 && !strcmp(r->outputs[0].name, "positions"));
    DF_CHECK(r->outputs[0].type == DF_WIRE_F32 && r->outputs[0].ndim == 3);
    DF_CHECK(r->outputs[0].dims[1] == 2 && r->outputs[0].dims[2] == 3 && r->outputs[0].nbytes == 24);
    const float want[6] = {1, 2, 3, -1, 0.5f, 0};
    for (int i = 0; i < 6; i++) DF_CHECK(f32at(r->outputs[0].data, i) == want[i]);
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_result(fr.h.id, r, &fb.o, &err) == DF_OK);
    bytes_t e = flat(&fb.o);
    DF_CHECK(same(e, g, "result_f32"));
    free(e.p); free(g.p);

    /* int16: values = offset + scale * q, computed here from the spec */
    g = load_hex("result_i16.hex");
    DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_OK);
    DF_CHECK(fr.h.id == 5 && r->outputs[0].type == DF_WIRE_I16 && r->outputs[0].nbytes == 6);
    DF_CHECK(r->outputs[0].scale[0] == 0.5f && r->outputs[0].scale[1] == 0.25f && r->outputs[0].scale[2] == 1.0f);
    DF_CHECK(r->outputs[0].offset[0] == 1.0f && r->outputs[0].offset[1] == -2.0f && r->outputs[0].offset[2] == 0.0f);
    int16_t qv[3];
    memcpy(qv, r->outputs[0].data, 6);
    const float vals[3] = {2, -3, 100};
    for (int c = 0; c < 3; c++)
        DF_CHECK(r->outputs[0].offset[c] + r->outputs[0].scale[c] * qv[c] == vals[c]);
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_result(5, r, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "result_i16"));
    free(e.p); free(g.p);

    /* float16 */
    g = load_hex("result_f16.hex");
    DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_OK);
    DF_CHECK(fr.h.id == 6 && !strcmp(r->outputs[0].name, "normals") && r->outputs[0].type == DF_WIRE_F16);
    uint16_t h[2];
    memcpy(h, r->outputs[0].data, 4);
    DF_CHECK(df_f16_to_f32(h[0]) == 1.0f && df_f16_to_f32(h[1]) == -2.0f);
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_result(6, r, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "result_f16"));
    free(e.p); free(g.p);
}

static void test_golden_error_info(void)
{
    df_error_t err = {0};
    df_frame_t fr;
    df_frame_buf_t fb;
    bytes_t g = load_hex("error.hex"), e;
    DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_OK);
    DF_CHECK(fr.h.id == 9 && fr.u.error.code == DF_ENOTFOUND && !strcmp(fr.u.error.msg, "no character bob"));
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_error(9, DF_ENOTFOUND, "no character bob", &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "error"));
    free(e.p); free(g.p);

    g = load_hex("info.hex");
    DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_OK);
    DF_CHECK(fr.h.type == DF_FT_INFO && fr.h.id == 3 && !strcmp(fr.u.name, "wuson"));
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_info(3, "wuson", &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "info"));
    free(e.p); free(g.p);

    g = load_hex("info_result.hex");
    DF_CHECK(df_frame_decode(g.p, g.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_OK);
    DF_CHECK(fr.u.blob.len == 7 && !memcmp(fr.u.blob.data, "{\"a\":1}", 7));
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_blob(3, DF_FT_INFO_RESULT, "{\"a\":1}", 7, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(same(e, g, "info_result"));
    free(e.p); free(g.p);
}

/* ------------------------------------------------------------ round trip */

static uint32_t rng = 12345;
static float frand(void) { rng = rng * 1664525u + 1013904223u; return (float)(rng >> 8) / (1 << 24) - 0.5f; }

static void test_roundtrip_big(void)
{
    enum { B = 3, J = 37, M = 5 };
    static float rot[B * J * 4], w[B * M];
    for (size_t i = 0; i < B * J * 4; i++) rot[i] = frand();
    for (size_t i = 0; i < B * M; i++) w[i] = frand();
    double times[B] = {0.25, 0.0, 1.75};
    df_frame_infer_t q = {0};
    q.n_poses = B; q.pose_flags = DF_POSE_LBS; q.encoding = DF_WIRE_I16;
    strcpy(q.character, "a_character_with_a_63_byte_name_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    DF_CHECK(strlen(q.character) == 63);
    strcpy(q.clip, "Take 001"); q.times = times;
    q.n_outputs = 2; strcpy(q.outputs[0], "normals"); strcpy(q.outputs[1], "positions");
    q.n_inputs = 2;
    df_frame_tensor_t *t = &q.inputs[0];
    strcpy(t->name, "joint_rotations"); t->ndim = 3; t->dims[0] = B; t->dims[1] = J; t->dims[2] = 4;
    t->data = rot; t->nbytes = sizeof rot;
    t = &q.inputs[1];
    strcpy(t->name, "weights"); t->ndim = 2; t->dims[0] = B; t->dims[1] = M; t->data = w; t->nbytes = sizeof w;
    df_frame_buf_t fb;
    df_error_t err = {0};
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(77, &q, &fb.o, &err) == DF_OK);
    bytes_t e = flat(&fb.o);
    df_frame_t fr;
    size_t used;
    int rc = df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, &used, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    DF_CHECK(used == e.n && fr.h.length == e.n - 24);
    df_frame_infer_t *d = &fr.u.infer;
    DF_CHECK(d->n_poses == B && d->pose_flags == DF_POSE_LBS && d->encoding == DF_WIRE_I16);
    DF_CHECK(!strcmp(d->character, q.character) && !strcmp(d->clip, "Take 001"));
    for (int b = 0; b < B; b++) DF_CHECK(d->times[b] == times[b]);
    DF_CHECK(!strcmp(d->outputs[1], "positions") && d->n_inputs == 2);
    DF_CHECK(d->inputs[0].nbytes == sizeof rot && !memcmp(d->inputs[0].data, rot, sizeof rot));
    DF_CHECK(d->inputs[1].nbytes == sizeof w && !memcmp(d->inputs[1].data, w, sizeof w));
    for (int i = 0; i < 2; i++) DF_CHECK(((uintptr_t)d->inputs[i].data & 7) == 0);
    free(e.p);

    /* RESULT with an int16 and a float32 output */
    static int16_t qd[B * 10 * 3];
    static float pd[B * 10 * 3];
    for (size_t i = 0; i < B * 30; i++) { qd[i] = (int16_t)(i * 100 - 3000); pd[i] = frand(); }
    df_frame_result_t r = {0};
    r.n_poses = B; r.n_outputs = 2;
    t = &r.outputs[0];
    strcpy(t->name, "positions"); t->type = DF_WIRE_I16; t->ndim = 3; t->dims[0] = B; t->dims[1] = 10; t->dims[2] = 3;
    t->scale[0] = 1e-3f; t->scale[1] = 2e-3f; t->scale[2] = 3e-3f; t->offset[0] = -1; t->offset[1] = 0; t->offset[2] = 7;
    t->data = qd; t->nbytes = sizeof qd;
    t = &r.outputs[1];
    strcpy(t->name, "normals"); t->type = DF_WIRE_F32; t->ndim = 3; t->dims[0] = B; t->dims[1] = 10; t->dims[2] = 3;
    t->data = pd; t->nbytes = sizeof pd;
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_result(78, &r, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    rc = df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, &used, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    df_frame_result_t *dr = &fr.u.result;
    DF_CHECK(dr->n_outputs == 2 && !memcmp(dr->outputs[0].data, qd, sizeof qd) && !memcmp(dr->outputs[1].data, pd, sizeof pd));
    DF_CHECK(dr->outputs[0].scale[2] == 3e-3f && dr->outputs[0].offset[2] == 7);
    free(e.p);
}

static void test_encoder_rejects(void)
{
    df_frame_buf_t fb;
    df_error_t err = {0};
    float x[4] = {0};
    df_frame_infer_t q = {0};
    q.n_poses = 1; strcpy(q.character, "c");
    q.n_inputs = 1; strcpy(q.inputs[0].name, "w"); q.inputs[0].ndim = 2;
    q.inputs[0].dims[0] = 1; q.inputs[0].dims[1] = 4; q.inputs[0].data = x; q.inputs[0].nbytes = 12; /* wrong */
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_EINVAL);
    q.inputs[0].nbytes = 16; q.character[0] = 0;
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_EINVAL);
    strcpy(q.character, "c"); strcpy(q.clip, "walk"); /* clip without times */
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_EINVAL);
    q.clip[0] = 0; q.n_poses = 0;
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_ELIMIT);
    q.n_poses = 1;
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_OK);
    uint8_t big[2000] = {0};
    DF_CHECK(df_frame_encode_blob(1, DF_FT_PING, big, sizeof big, &fb.o, &err) == DF_ELIMIT);
    DF_CHECK(df_frame_encode_blob(1, DF_FT_INFER, big, 4, &fb.o, &err) == DF_EINVAL);
}

/* ------------------------------------------------------------ malformed */

typedef struct mcase {
    const char *name;
    const char *file;
    int at;            /* frame offset of the patch (payload offset + 24), -1 none */
    int n;             /* patch bytes */
    const char *bytes; /* patch */
    int set_len;       /* -1: keep header length; else new total frame size */
    int want;          /* expected code */
    int fatal;         /* header errors: expected fatal flag; -1 don't care */
    const char *msg;   /* the whole message, where checked (they name the field) */
} mcase_t;

#define P(o) (24 + (o))
static const mcase_t cases[] = {
    /* header */
    {"bad magic", "ping.hex", 0, 4, "XFRM", -1, DF_EFORMAT, 1},
    {"magic byte order swapped", "ping.hex", 0, 4, "MRFD", -1, DF_EFORMAT, 1},
    {"version 2", "ping.hex", 4, 2, "\x02\x00", -1, DF_EUNSUPPORTED, 1},
    {"version 0", "ping.hex", 4, 2, "\x00\x00", -1, DF_EUNSUPPORTED, 1},
    {"huge declared length", "ping.hex", 20, 4, "\xff\xff\xff\xff", -1, DF_ELIMIT, 1},
    {"length just over 64 MiB", "ping.hex", 20, 4, "\x01\x00\x00\x04", -1, DF_ELIMIT, 1},
    {"flags set", "ping.hex", 8, 4, "\x01\x00\x00\x00", -1, DF_EUNSUPPORTED, 0},
    {"high flag set", "ping.hex", 8, 4, "\x00\x00\x00\x80", -1, DF_EUNSUPPORTED, 0},
    {"unknown type 0x99", "ping.hex", 6, 2, "\x99\x00", -1, DF_EUNSUPPORTED, 0},
    {"type 0", "ping.hex", 6, 2, "\x00\x00", -1, DF_EUNSUPPORTED, 0},
    {"type 0xffff", "ping.hex", 6, 2, "\xff\xff", -1, DF_EUNSUPPORTED, 0},
    {"header truncated to 23 bytes", "ping.hex", -1, 0, NULL, 23, DF_EFORMAT, -1},
    {"payload shorter than declared", "infer_basic.hex", -1, 0, NULL, 24 + 40, DF_EFORMAT, -1},
    {"ping payload over 1024", "ping.hex", 20, 4, "\x01\x08\x00\x00", 24 + 2049, DF_ELIMIT, -1},
    /* INFER */
    {"infer n_poses 0", "infer_basic.hex", P(0), 4, "\0\0\0\0", -1, DF_ELIMIT, -1},
    {"infer n_poses 5000", "infer_basic.hex", P(0), 4, "\x88\x13\0\0", -1, DF_ELIMIT, -1},
    {"infer n_poses 2^32-1", "infer_basic.hex", P(0), 4, "\xff\xff\xff\xff", -1, DF_ELIMIT, -1},
    {"infer pose_flags 3", "infer_basic.hex", P(4), 1, "\x03", -1, DF_EUNSUPPORTED, -1},
    {"infer encoding 3", "infer_basic.hex", P(8), 1, "\x03", -1, DF_EUNSUPPORTED, -1},
    {"infer encoding 255", "infer_basic.hex", P(8), 1, "\xff", -1, DF_EUNSUPPORTED, -1},
    {"infer undefined flag", "infer_basic.hex", P(9), 1, "\x80", -1, DF_EFORMAT, -1},
    {"infer n_inputs 17", "infer_basic.hex", P(10), 2, "\x11\x00", -1, DF_ELIMIT, -1},
    {"infer n_inputs 65535", "infer_basic.hex", P(10), 2, "\xff\xff", -1, DF_ELIMIT, -1},
    {"infer n_outputs 17", "infer_basic.hex", P(12), 2, "\x11\x00", -1, DF_ELIMIT, -1},
    {"infer n_inputs 2 beyond payload", "infer_basic.hex", P(10), 2, "\x02\x00", -1, DF_EFORMAT, -1},
    {"infer n_inputs 0 leaves trailing bytes", "infer_basic.hex", P(10), 2, "\x00\x00", -1, DF_EFORMAT, -1},
    {"infer empty character", "infer_basic.hex", P(14), 2, "\x00\x00", -1, DF_EFORMAT, -1},
    {"infer character 64 bytes", "infer_basic.hex", P(14), 2, "\x40\x00", -1, DF_ELIMIT, -1},
    {"infer character 65535 bytes", "infer_basic.hex", P(14), 2, "\xff\xff", -1, DF_ELIMIT, -1},
    {"infer character with NUL", "infer_basic.hex", P(17), 1, "\x00", -1, DF_EFORMAT, -1},
    {"infer clip length beyond payload", "infer_basic.hex", P(21), 2, "\x3c\x00", -1, DF_EFORMAT, -1},
    {"infer empty output name", "infer_basic.hex", P(23), 2, "\x00\x00", -1, DF_EFORMAT, -1, "INFER outputs[0]: empty name"},
    {"infer output name 63 bytes beyond payload", "infer_basic.hex", P(23), 2, "\x3f\x00", -1, DF_EFORMAT, -1, "INFER outputs[0]: need 63 bytes at offset 25, 39 remain"},
    {"infer input dtype F16", "infer_basic.hex", P(43), 1, "\x01", -1, DF_EUNSUPPORTED, -1},
    {"infer input dtype 200", "infer_basic.hex", P(43), 1, "\xc8", -1, DF_EUNSUPPORTED, -1},
    {"infer ndim 0", "infer_basic.hex", P(44), 1, "\x00", -1, DF_ELIMIT, -1, "INFER inputs[0] \"weights\" ndim: ndim 0 (must be 1..8)"},
    {"infer ndim 9", "infer_basic.hex", P(44), 1, "\x09", -1, DF_ELIMIT, -1},
    {"infer ndim 255", "infer_basic.hex", P(44), 1, "\xff", -1, DF_ELIMIT, -1},
    {"infer dims[0] != n_poses", "infer_basic.hex", P(45), 4, "\x02\0\0\0", -1, DF_EINVAL, -1},
    {"infer dims[1] = 0", "infer_basic.hex", P(49), 4, "\0\0\0\0", -1, DF_EINVAL, -1},
    {"infer dims[1] = 2^32-1", "infer_basic.hex", P(49), 4, "\xff\xff\xff\xff", -1, DF_EFORMAT, -1},
    {"infer dims[1] = 2^30 (overflow x4)", "infer_basic.hex", P(49), 4, "\0\0\0\x40", -1, DF_EFORMAT, -1},
    {"infer dims[1] = 3, data beyond payload", "infer_basic.hex", P(49), 4, "\x03\0\0\0", -1, DF_EFORMAT, -1},
    {"infer ndim 3 reads padding as dims[2] = 0", "infer_basic.hex", P(44), 1, "\x03", -1, DF_EINVAL, -1, "INFER inputs[0] \"weights\" dims: dims[2] is 0"},
    {"infer non-zero padding", "infer_basic.hex", P(54), 1, "\x01", -1, DF_EFORMAT, -1, "INFER inputs[0] \"weights\" padding: non-zero padding byte at offset 54"},
    {"infer NaN input", "infer_basic.hex", P(56), 4, "\x00\x00\xc0\x7f", -1, DF_EINVAL, -1},
    {"infer +inf input", "infer_basic.hex", P(60), 4, "\x00\x00\x80\x7f", -1, DF_EINVAL, -1},
    {"infer -inf input", "infer_basic.hex", P(60), 4, "\x00\x00\x80\xff", -1, DF_EINVAL, -1},
    {"infer trailing byte", "infer_basic.hex", 20, 1, "\x41", 24 + 65, DF_EFORMAT, -1},
    {"infer clip times NaN", "infer_clip.hex", P(40), 8, "\0\0\0\0\0\0\xf8\x7f", -1, DF_EINVAL, -1},
    {"infer clip times inf", "infer_clip.hex", P(32), 8, "\0\0\0\0\0\0\xf0\x7f", -1, DF_EINVAL, -1},
    {"infer clip padding non-zero", "infer_clip.hex", P(30), 1, "\x07", -1, DF_EFORMAT, -1},
    {"infer n_poses 3 clip times beyond payload", "infer_clip.hex", P(0), 1, "\x03", -1, DF_EFORMAT, -1},
    {"infer clip 64 bytes", "infer_clip.hex", P(21), 2, "\x40\x00", -1, DF_ELIMIT, -1},
    /* RESULT */
    {"result n_poses 0", "result_f32.hex", P(0), 4, "\0\0\0\0", -1, DF_ELIMIT, -1},
    {"result n_outputs 17", "result_f32.hex", P(4), 2, "\x11\x00", -1, DF_ELIMIT, -1},
    {"result reserved", "result_f32.hex", P(6), 2, "\x01\x00", -1, DF_EFORMAT, -1},
    {"result encoding 3", "result_f32.hex", P(19), 1, "\x03", -1, DF_EUNSUPPORTED, -1},
    {"result dims[0] != n_poses", "result_f32.hex", P(21), 4, "\x02\0\0\0", -1, DF_EINVAL, -1, "RESULT outputs[0] \"positions\" dims: leading dimension 2 != n_poses 1"},
    {"result dims beyond payload", "result_f32.hex", P(25), 4, "\x09\0\0\0", -1, DF_EFORMAT, -1},
    {"result f32 read as f16 leaves trailing", "result_f32.hex", P(19), 1, "\x01", -1, DF_EFORMAT, -1},
    {"result i16 scale 0", "result_i16.hex", P(33), 4, "\0\0\0\0", -1, DF_EINVAL, -1},
    {"result i16 scale negative", "result_i16.hex", P(37), 4, "\x00\x00\x80\xbe", -1, DF_EINVAL, -1},
    {"result i16 scale inf", "result_i16.hex", P(41), 4, "\x00\x00\x80\x7f", -1, DF_EINVAL, -1},
    {"result i16 offset NaN", "result_i16.hex", P(53), 4, "\x00\x00\xc0\x7f", -1, DF_EINVAL, -1},
    {"result i16 padding non-zero", "result_i16.hex", P(63), 1, "\x01", -1, DF_EFORMAT, -1},
    /* ERROR, INFO, INFO_RESULT */
    {"error code positive", "error.hex", P(0), 4, "\x05\0\0\0", -1, DF_EFORMAT, -1},
    {"error code 0", "error.hex", P(0), 4, "\0\0\0\0", -1, DF_EFORMAT, -1},
    {"error message 2000 bytes", "error.hex", P(4), 2, "\xd0\x07", -1, DF_ELIMIT, -1},
    {"error message beyond payload", "error.hex", P(4), 2, "\x11\x00", -1, DF_EFORMAT, -1},
    {"info name 64 bytes", "info.hex", P(0), 2, "\x40\x00", -1, DF_ELIMIT, -1},
    {"info name beyond payload", "info.hex", P(0), 2, "\x06\x00", -1, DF_EFORMAT, -1},
    {"info trailing byte", "info.hex", 20, 1, "\x08", 24 + 8, DF_EFORMAT, -1},
    {"info_result json length huge", "info_result.hex", P(0), 4, "\xff\xff\xff\x7f", -1, DF_ELIMIT, -1},
    {"info_result json beyond payload", "info_result.hex", P(0), 4, "\x08\0\0\0", -1, DF_EFORMAT, -1},
};

static void test_malformed_corpus(void)
{
    int n = (int)(sizeof cases / sizeof cases[0]);
    DF_CHECK(n >= 40);
    for (int i = 0; i < n; i++) {
        const mcase_t *c = &cases[i];
        bytes_t g = load_hex(c->file);
        size_t len = g.n;
        if (c->set_len >= 0) {
            if ((size_t)c->set_len > len) memset(g.p + len, 0, (size_t)c->set_len - len);
            len = (size_t)c->set_len;
        }
        if (c->at >= 0) memcpy(g.p + c->at, c->bytes, (size_t)c->n);
        df_frame_t fr;
        df_error_t err = {0};
        int rc = df_frame_decode(g.p, len, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
        DF_CHECK_MSG(rc == c->want, "case \"%s\": got %d (%s) want %d", c->name, rc, err.msg, c->want);
        DF_CHECK_MSG(rc == DF_OK || err.msg[0], "case \"%s\": no message", c->name);
        DF_CHECK_MSG(!c->msg || !strcmp(err.msg, c->msg), "case \"%s\": message \"%s\", want \"%s\"",
                     c->name, err.msg, c->msg);
        if (c->fatal >= 0) {
            int fatal = -1;
            df_frame_header_t h;
            int hr = df_frame_header_decode(g.p, len, DF_FRAME_DEFAULT_MAX_PAYLOAD, &h, &fatal, &err);
            DF_CHECK_MSG(hr == c->want && fatal == c->fatal, "case \"%s\": header rc %d fatal %d",
                         c->name, hr, fatal);
        }
        free(g.p);
    }
    printf("# %d malformed frames rejected with the expected code\n", n);
}

/* Every strict prefix of every golden payload is rejected (EFORMAT), with
 * the header's length adjusted so the frame is self-consistent. */
static void test_every_truncation(void)
{
    const char *files[] = {"infer_basic.hex", "infer_clip.hex", "result_f32.hex", "result_i16.hex",
                           "result_f16.hex", "error.hex", "info.hex", "info_result.hex"};
    int total = 0;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        bytes_t g = load_hex(files[k]);
        size_t pl = g.n - 24;
        for (size_t cut = 0; cut < pl; cut++) {
            /* copy into a buffer of exactly the truncated size so ASan sees overreads */
            uint8_t *b = malloc(24 + cut + (cut == 0));
            memcpy(b, g.p, 24 + cut);
            b[20] = (uint8_t)cut; b[21] = (uint8_t)(cut >> 8); b[22] = 0; b[23] = 0;
            df_frame_t fr;
            df_error_t err = {0};
            int rc = df_frame_decode(b, 24 + cut, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err);
            /* info with a cut inside the name: a shorter name is still wrong
             * since all bytes must be consumed exactly; so always EFORMAT */
            DF_CHECK_MSG(rc == DF_EFORMAT, "%s cut at %zu: rc %d (%s)", files[k], cut, rc, err.msg);
            free(b);
            total++;
        }
        free(g.p);
    }
    printf("# %d truncated payloads rejected\n", total);
}

static void test_duplicates_and_alignment(void)
{
    float x[2] = {1, 2};
    df_frame_infer_t q = {0};
    q.n_poses = 1; strcpy(q.character, "c");
    q.n_inputs = 2;
    for (int i = 0; i < 2; i++) {
        strcpy(q.inputs[i].name, "w"); q.inputs[i].ndim = 2; q.inputs[i].dims[0] = 1;
        q.inputs[i].dims[1] = 2; q.inputs[i].data = x; q.inputs[i].nbytes = 8;
    }
    df_frame_buf_t fb;
    df_error_t err = {0};
    df_frame_buf_init(&fb);
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_OK);
    bytes_t e = flat(&fb.o);
    df_frame_t fr;
    DF_CHECK(df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_EINVAL);
    free(e.p);
    q.n_inputs = 0; q.n_outputs = 2; strcpy(q.outputs[0], "positions"); strcpy(q.outputs[1], "positions");
    DF_CHECK(df_frame_encode_infer(1, &q, &fb.o, &err) == DF_OK);
    e = flat(&fb.o);
    DF_CHECK(df_frame_decode(e.p, e.n, DF_FRAME_DEFAULT_MAX_PAYLOAD, &fr, NULL, &err) == DF_EINVAL);
    free(e.p);
    /* an unaligned payload buffer is refused, not read unaligned */
    bytes_t g = load_hex("infer_basic.hex");
    uint8_t *u = malloc(g.n + 1);
    memcpy(u + 1, g.p + 24, g.n - 24);
    DF_CHECK(df_frame_decode_infer(u + 1, g.n - 24, &fr.u.infer, &err) == DF_EINVAL);
    free(u); free(g.p);
    /* a smaller configured limit */
    g = load_hex("infer_basic.hex");
    int fatal = 0;
    DF_CHECK(df_frame_header_decode(g.p, g.n, 63, &fr.h, &fatal, &err) == DF_ELIMIT && fatal == 1);
    DF_CHECK(df_frame_header_decode(g.p, g.n, 64, &fr.h, &fatal, &err) == DF_OK && fatal == 0);
    free(g.p);
}

int main(void)
{
    DF_RUN(test_golden_ping_pong);
    DF_RUN(test_golden_infer_basic);
    DF_RUN(test_golden_infer_clip);
    DF_RUN(test_golden_auth);
    DF_RUN(test_golden_infer_sequence);
    DF_RUN(test_golden_results);
    DF_RUN(test_golden_error_info);
    DF_RUN(test_roundtrip_big);
    DF_RUN(test_encoder_rejects);
    DF_RUN(test_malformed_corpus);
    DF_RUN(test_every_truncation);
    DF_RUN(test_duplicates_and_alignment);
    return dftest_exit();
}

/* test_kserve.c — the KServe v2 codec (proto/kserve.c) alone: nested and
 * flat data, binary segments (aligned and not), errors naming the input,
 * limits, and a response written then read back with jansson (float32
 * values must round-trip bit for bit through the 9-digit text); the subset
 * JSON reader must parse mutated requests exactly as jansson does; the
 * float writer (df_ks_buf_floats, eight at a time with AVX-512) must print
 * exactly what the scalar formatter prints. */
#include "dftest.h"
#include "kserve.h"
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* the reference for df_ks_buf_floats: the scalar formatter one number at a
 * time (proto/kserve.c; its text is what every JSON answer carried before
 * the AVX-512 path, and it is checked below to read back bit for bit) */
static size_t ref_floats(char *out, const float *x, size_t n)
{
    return df__ks_fmt_floats_scalar(out, x, n);
}

static void test_parse_json_nested_and_flat(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    df_error_t e = {0};
    const char *b = "{\"id\":\"x\",\"parameters\":{\"encoding\":\"float16\",\"binary_data_output\":true,"
                    "\"skinning\":\"dqs\",\"clip\":\"walk\",\"time\":0.5},"
                    "\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3,4.5]]},"
                    "{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[-1,0,1e-3]}],"
                    "\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":false,\"encoding\":\"int16\"}}]}";
    DF_CHECK(df_kserve_parse_request(&r, b, strlen(b), strlen(b), NULL, &e) == 0);
    DF_CHECK(r.n_inputs == 2 && r.n_outputs == 1);
    DF_CHECK(!strcmp(r.id, "x") && r.binary_output == 1 && r.encoding == DF_ENC_F16);
    DF_CHECK(r.flags == DF_POSE_DQS && !strcmp(r.clip, "walk") && r.clip_time == 0.5);
    DF_CHECK(r.inputs[0].ndim == 2 && r.inputs[0].data[3] == 4.5f && r.inputs[1].data[2] == 1e-3f);
    DF_CHECK(r.outputs[0].binary == 0 && r.outputs[0].encoding == DF_ENC_I16);
    df_ks_request_free(&r);
}

static void test_parse_binary(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    df_error_t e = {0};
    char hdr[256];
    float v[3] = {1.5f, -2, 3.25f};
    for (int pad = 0; pad < 4; pad++) {
        int hl = snprintf(hdr, sizeof hdr, "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[3],"
                                           "\"parameters\":{\"binary_data_size\":12}}]}%*s", pad, "");
        char *body = malloc((size_t)hl + 12 + 1);
        memcpy(body + 1, hdr, (size_t)hl); /* +1: an odd base address */
        memcpy(body + 1 + hl, v, 12);
        DF_CHECK(df_kserve_parse_request(&r, body + 1, (size_t)hl + 12, (size_t)hl, NULL, &e) == 0);
        DF_CHECK(r.inputs[0].binary && ((uintptr_t)r.inputs[0].data & 3) == 0);
        DF_CHECK(!memcmp(r.inputs[0].data, v, 12));
        free(body);
    }
    df_ks_request_free(&r);
}

/* The parsed-header cache: the same binary header again (any base
 * alignment, new values) hits and gives the new data; a NaN in the binary
 * part is still refused on a hit; the same header with another body length
 * or other limits does not hit and gets the full parse's answer. */
static void test_parse_binary_cached(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    df_error_t e = {0};
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[3],"
                                       "\"parameters\":{\"binary_data_size\":12}}],\"outputs\":[{\"name\":\"p\","
                                       "\"parameters\":{\"binary_data\":true}}]}");
    char *body = malloc((size_t)hl + 64);
    unsigned long h0 = df__kserve_cache_hits();
    for (int k = 0; k < 8; k++) {
        char *b = body + (k % 4);
        float v[3] = {(float)k, -2, 3.25f};
        memcpy(b, hdr, (size_t)hl);
        memcpy(b + hl, v, 12);
        DF_CHECK(df_kserve_parse_request(&r, b, (size_t)hl + 12, (size_t)hl, NULL, &e) == 0);
        DF_CHECK(r.n_inputs == 1 && r.n_outputs == 1 && r.outputs[0].binary == 1);
        DF_CHECK(r.inputs[0].binary && ((uintptr_t)r.inputs[0].data & 3) == 0 && !memcmp(r.inputs[0].data, v, 12));
    }
    DF_CHECK_MSG(df__kserve_cache_hits() - h0 == 7, "%lu hits", df__kserve_cache_hits() - h0);
    float bad[3] = {1, NAN, 2};
    memcpy(body + hl, bad, 12);
    memcpy(body, hdr, (size_t)hl);
    h0 = df__kserve_cache_hits();
    DF_CHECK(df_kserve_parse_request(&r, body, (size_t)hl + 12, (size_t)hl, NULL, &e) == DF_EINVAL);
    DF_CHECK(strstr(e.msg, "input 'a': element 1 is not finite") != NULL);
    DF_CHECK(df__kserve_cache_hits() - h0 == 1);
    h0 = df__kserve_cache_hits();
    memset(&e, 0, sizeof e);
    DF_CHECK(df_kserve_parse_request(&r, body, (size_t)hl + 16, (size_t)hl, NULL, &e) == DF_EINVAL);
    DF_CHECK(strstr(e.msg, "add up to") != NULL);
    df_ks_limits_t lim;
    df_ks_limits_default(&lim);
    lim.max_elements = 2;
    memset(&e, 0, sizeof e);
    DF_CHECK(df_kserve_parse_request(&r, body, (size_t)hl + 12, (size_t)hl, &lim, &e) == DF_ELIMIT);
    DF_CHECK(df__kserve_cache_hits() == h0);
    free(body);
    df_ks_request_free(&r);
}

static void test_parse_errors(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    df_ks_limits_t lim;
    df_ks_limits_default(&lim);
    lim.max_elements = 100;
    lim.max_depth = 4;
    const struct { const char *b; int code; const char *text; } c[] = {
        {"{", DF_EINVAL, "invalid JSON"},
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1]}]}", DF_EINVAL, "input 'a'"},
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[200],\"data\":[]}]}", DF_ELIMIT, "elements"},
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[[[[[1]]]]]}]}", DF_ELIMIT, "deeper"},
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP16\",\"shape\":[1],\"data\":[1]}]}", DF_EUNSUPPORTED, "FP16"},
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1],\"parameters\":{\"binary_data_size\":4}}]}", DF_EINVAL, "past the end"},
        {"{\"outputs\":[{\"name\":\"p\",\"parameters\":{\"encoding\":\"x\"}}]}", DF_EINVAL, "encoding"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        df_error_t e = {0};
        int rc = df_kserve_parse_request(&r, c[i].b, strlen(c[i].b), strlen(c[i].b), &lim, &e);
        DF_CHECK_MSG(rc == c[i].code && strstr(e.msg, c[i].text), "case %zu: rc %d msg %s", i, rc, e.msg);
    }
    df_error_t e = {0};
    DF_CHECK(df_kserve_parse_request(&r, "{}", 2, 5, NULL, &e) == DF_EINVAL);
    df_ks_request_free(&r);
}

/* issue 14.6: "data" holding MORE values than the shape says is refused,
 * flat or nested, with a message naming the input and both counts (not
 * only by the fuzz corpus). Checked with the subset reader and with the
 * jansson reference parser. */
static void test_parse_too_many_values(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    const struct { const char *b, *text; } c[] = {
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,2,3]}]}",
         "input 'w': data has 3 numbers but shape needs 2"},
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3,4]}]}",
         "input 'w': data has 4 numbers but shape needs 3"},
        {"{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3,4],[5,6]]}]}",
         "input 'q': data has 6 numbers but shape needs 4"},
        {"{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2,3],[4,5]]}]}",
         "input 'q': data has 5 numbers but shape needs 4"},
        /* right count, one row too long and one too short: not the shape */
        {"{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2,3],[4]]}]}",
         "input 'q': nested data does not follow the shape"},
        /* the second input is the one with too many */
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]},"
         "{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1,2]}]}",
         "input 'b': data has 2 numbers but shape needs 1"},
    };
    for (int jansson = 0; jansson < 2; jansson++) {
        df__kserve_jansson_only(jansson);
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
            df_error_t e = {0};
            int rc = df_kserve_parse_request(&r, c[i].b, strlen(c[i].b), strlen(c[i].b), NULL, &e);
            DF_CHECK_MSG(rc == DF_EINVAL && e.code == DF_EINVAL && strstr(e.msg, c[i].text),
                         "%s case %zu: rc %d msg '%s', want '%s'", jansson ? "jansson" : "subset", i,
                         rc, e.msg, c[i].text);
        }
        /* the same requests with the count right are accepted */
        const char *okb = "{\"inputs\":[{\"name\":\"q\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]}]}";
        df_error_t e = {0};
        DF_CHECK(df_kserve_parse_request(&r, okb, strlen(okb), strlen(okb), NULL, &e) == 0 &&
                 r.n_inputs == 1 && r.inputs[0].numel == 4 && r.inputs[0].data[3] == 4.0f);
    }
    df__kserve_jansson_only(0);
    df_ks_request_free(&r);
}

/* Issue 20 D5: reading a JSON header takes at most DF_KS_PARSE_FACTOR
 * times its size plus 64 KiB, and headers over DF_KS_FALLBACK_MAX bytes
 * never go to jansson (about 40 times the text in memory; a 64 MiB body
 * with one \u escape took 2.4 GB there). */
static char *big_body(size_t n_values, const char *row, const char *id, size_t *len)
{
    size_t rl = strlen(row);
    char *b = malloc(n_values * (rl + 1) + 512);
    char *p = b + sprintf(b, "{\"id\":\"%s\",\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\","
                             "\"shape\":[%zu],\"data\":[", id, n_values);
    for (size_t i = 0; i < n_values; i++) {
        memcpy(p, row, rl);
        p += rl;
        *p++ = ',';
    }
    p[-1] = ']';
    p += sprintf(p, "}]}");
    *len = (size_t)(p - b);
    return b;
}

static void test_parse_memory_bounded(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    df_ks_limits_t lim;
    df_ks_limits_default(&lim);
    lim.max_elements = 1 << 24;
    size_t len;
    /* 2 M numbers "0," (4 MB): read, within the bound, no jansson, although
     * the id has escapes and UTF-8 (both went to jansson before) */
    char *b = big_body(2u << 20, "0", "frame \\u00e9\\\"1\\\" \xc3\xa9", &len);
    unsigned long fb0 = df__kserve_fallbacks();
    df_error_t e = {0};
    DF_CHECK_MSG(df_kserve_parse_request(&r, b, len, len, &lim, &e) == 0, "%s", e.msg);
    DF_CHECK(df__kserve_fallbacks() == fb0);
    DF_CHECK(r.n_inputs == 1 && r.inputs[0].numel == (int64_t)(2u << 20) && r.inputs[0].data[7] == 0.0f);
    DF_CHECK(!strcmp(r.id, "frame \xc3\xa9\"1\" \xc3\xa9"));
    size_t used = r.read_bytes;
    DF_CHECK_MSG(used <= (size_t)DF_KS_PARSE_FACTOR * len + (64u << 10),
                 "reading %zu bytes took %zu", len, used);
    printf("# a %zu-byte flat data array: %.2f bytes read per byte of JSON (bound %d)\n", len,
           (double)used / (double)len, DF_KS_PARSE_FACTOR);
    free(b);
    /* nested quaternion rows, the densest realistic form, fit too */
    b = big_body(1u << 18, "[0,0,0,1]", "q", &len);
    char *sh = strstr(b, "\"shape\":[");
    DF_CHECK(sh != NULL);
    if (sh) { /* shape [N] -> [N,4] by hand: rewrite the request */
        size_t n = 1u << 18;
        char *nb = malloc(len + 64);
        int k = sprintf(nb, "{\"id\":\"q\",\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[%zu,4],", n);
        const char *rest = strstr(b, "\"data\"");
        size_t rl = len - (size_t)(rest - b);
        memcpy(nb + k, rest, rl);
        len = (size_t)k + rl;
        free(b);
        b = nb;
    }
    e = (df_error_t){0};
    DF_CHECK_MSG(df_kserve_parse_request(&r, b, len, len, &lim, &e) == 0, "%s", e.msg);
    DF_CHECK(r.inputs[0].numel == (int64_t)(1u << 20) && r.inputs[0].data[3] == 1.0f);
    free(b);
    /* tiny values nested deep enough to need more: refused, not read */
    b = big_body(1u << 20, "[]", "x", &len);
    e = (df_error_t){0};
    int rc = df_kserve_parse_request(&r, b, len, len, &lim, &e);
    DF_CHECK_MSG(rc == DF_ELIMIT && strstr(e.msg, "needs more than"), "rc %d: %s", rc, e.msg);
    DF_CHECK(df__kserve_fallbacks() == fb0);
    free(b);
    /* invalid JSON over 64 KiB: our reader's message (line, column, what),
     * no jansson */
    b = big_body(1u << 16, "1", "x", &len);
    memcpy(b + len - 40, "1,,", 3);
    e = (df_error_t){0};
    rc = df_kserve_parse_request(&r, b, len, len, &lim, &e);
    DF_CHECK_MSG(rc == DF_EINVAL && strstr(e.msg, "line 1 column") && strstr(e.msg, "invalid token") &&
                     strstr(e.msg, "64 KiB"),
                 "rc %d: %s", rc, e.msg);
    DF_CHECK(df__kserve_fallbacks() == fb0);
    free(b);
    /* the same under 64 KiB still gets jansson's own message */
    b = big_body(100, "1", "x", &len);
    memcpy(b + len - 40, "1,,", 3);
    e = (df_error_t){0};
    rc = df_kserve_parse_request(&r, b, len, len, &lim, &e);
    DF_CHECK_MSG(rc == DF_EINVAL && strstr(e.msg, "invalid JSON at line 1"), "rc %d: %s", rc, e.msg);
    DF_CHECK(df__kserve_fallbacks() == fb0 + 1);
    free(b);
    df_ks_request_free(&r);
}

/* issue 14.6: a parameters.binary_data_size larger than what remains of the
 * body is refused with a message naming the input, its size and the bytes
 * left (not read past the end, not only by the fuzz corpus) — for the first
 * input, for a later one once earlier inputs took their bytes, and for a
 * size far beyond the body. A binary_data_size that disagrees with the shape,
 * one past 64 bits and a negative one are refused too. */
static void test_parse_binary_size_past_end(void)
{
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    static const struct { const char *hdr; size_t bin; const char *text; } c[] = {
        /* 16 bytes announced, 8 present */
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[4],"
         "\"parameters\":{\"binary_data_size\":16}}]}", 8,
         "input 'w': binary data of 16 bytes runs past the end of the body (8 bytes left)"},
        /* nothing after the header at all */
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[4],"
         "\"parameters\":{\"binary_data_size\":16}}]}", 0,
         "input 'w': binary data of 16 bytes runs past the end of the body (0 bytes left)"},
        /* a fits (8 of 12 bytes), then b wants 8 of the 4 left */
        {"{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],"
         "\"parameters\":{\"binary_data_size\":8}},{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[2],"
         "\"parameters\":{\"binary_data_size\":8}}]}", 12,
         "input 'b': binary data of 8 bytes runs past the end of the body (4 bytes left)"},
        /* a size far beyond the body (matching its shape) */
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[1000000],"
         "\"parameters\":{\"binary_data_size\":4000000}}]}", 16,
         "input 'w': binary data of 4000000 bytes runs past the end of the body (16 bytes left)"},
        /* larger than the shape's bytes: refused before the body is looked at */
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[2],"
         "\"parameters\":{\"binary_data_size\":4611686018427387904}}]}", 8,
         "input 'w': binary_data_size 4611686018427387904 does not match shape (2 FP32 = 8 bytes)"},
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[2],"
         "\"parameters\":{\"binary_data_size\":18446744073709551616}}]}", 8,
         "too big integer near '18446744073709551616'"},
        {"{\"inputs\":[{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[2],"
         "\"parameters\":{\"binary_data_size\":-8}}]}", 8,
         "input 'w': parameters.binary_data_size must be a non-negative integer"},
    };
    static char body[4096 + 64];
    for (int jansson = 0; jansson < 2; jansson++) {
        df__kserve_jansson_only(jansson);
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
            size_t hl = strlen(c[i].hdr);
            memcpy(body, c[i].hdr, hl);
            for (size_t k = 0; k < c[i].bin; k++) body[hl + k] = (char)(k + 1);
            df_error_t e = {0};
            int rc = df_kserve_parse_request(&r, body, hl + c[i].bin, hl, NULL, &e);
            DF_CHECK_MSG(rc == DF_EINVAL && e.code == DF_EINVAL && strstr(e.msg, c[i].text),
                         "%s case %zu: rc %d msg '%s', want '%s'", jansson ? "jansson" : "subset", i,
                         rc, e.msg, c[i].text);
        }
    }
    df__kserve_jansson_only(0);
    df_ks_request_free(&r);
}

static void test_response_roundtrip(void)
{
    enum { N = 60000 };
    static float x[N];
    uint32_t s = 9;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t bits = s;
        if (i % 2) bits = (s & 0x807FFFFFu) | ((100u + (s >> 27)) << 23); /* near 1 */
        if (((bits >> 23) & 0xFF) == 0xFF) bits &= ~(1u << 30);       /* no inf/NaN */
        memcpy(&x[i], &bits, 4);
    }
    /* edge cases: powers of ten, format boundaries, extremes, subnormals */
    const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 10.0f, 1e8f, 1e9f, 999999999.0f, 123456789.0f,
                          1e-5f, 1e-6f, 9.9999999e-6f, 0.1f, 0.3f, 3.4028235e38f, -3.4028235e38f,
                          1.17549435e-38f, 1.4e-45f, 7e-45f, 16777216.0f, 16777217.0f, 0.5f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[i * 2] = edge[i];
    /* every power of ten in float range and its neighbours: where the
     * decimal exponent estimate from the binary one is off by one */
    size_t at = 1000;
    for (int e = -45; e <= 38; e++) {
        float p = (float)pow(10.0, e);
        x[at++] = p;
        x[at++] = nextafterf(p, 0.0f);
        x[at++] = nextafterf(p, INFINITY);
        x[at++] = -p;
    }
    int64_t shape[2] = {N / 3, 3};
    df_quant_t q = {0};
    df_ks_output_t o = {"positions", DF_ENC_F32, 2, shape, x, x, sizeof x, &q, 0, 0};
    df_ks_buf_t b = {0};
    DF_CHECK(df_kserve_write_response(&b, "m\"odel", 3, "id-1", &o, 1, "\"queue_us\":5") == 0);
    json_t *j = json_loads(b.data, 0, NULL);
    DF_CHECK(j != NULL);
    DF_CHECK(!strcmp(json_string_value(json_object_get(j, "model_name")), "m\"odel"));
    json_t *d = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    DF_CHECK(json_array_size(d) == N);
    int same = 1;
    for (int i = 0; i < N; i++) same &= (float)json_number_value(json_array_get(d, (size_t)i)) == x[i];
    DF_CHECK(same);
    json_decref(j);
    df_ks_buf_reset(&b);
    DF_CHECK(df_kserve_write_error(&b, "bad \"x\"\n") == 0);
    j = json_loads(b.data, 0, NULL);
    DF_CHECK(j && !strcmp(json_string_value(json_object_get(j, "error")), "bad \"x\"\n"));
    json_decref(j);
    df_ks_buf_free(&b);
}

/* Mutation fuzzing in-process: 20,000 corruptions (byte flips, inserted
 * and deleted bytes, truncation) of valid JSON and binary requests. Every
 * result must be DF_OK with consistent inputs or a negative code with a
 * message; under `make asan` this also checks memory safety. */
static void test_mutation_fuzz(void)
{
    const char *seeds[] = {
        "{\"id\":\"a\",\"parameters\":{\"encoding\":\"int16\",\"binary_data_output\":true},"
        "\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]}],"
        "\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":true}}]}",
        "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[3],\"parameters\":{\"binary_data_size\":12}}]}"
        "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40",
    };
    size_t hl1 = strlen("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[3],\"parameters\":{\"binary_data_size\":12}}]}");
    size_t lens[2] = {strlen(seeds[0]), hl1 + 12};
    size_t hls[2] = {lens[0], hl1};
    df_ks_request_t r;
    memset(&r, 0, sizeof r);
    df_ks_limits_t lim;
    df_ks_limits_default(&lim);
    lim.max_elements = 4096;
    uint32_t s = 12345;
    int ok = 0, bad = 0, broken = 0;
    char *buf = malloc(4096);
    for (int it = 0; it < 20000; it++) {
        int k = it & 1;
        size_t n = lens[k], hl = hls[k];
        memcpy(buf, seeds[k], n);
        int muts = 1 + (int)((s >> 28) & 3);
        for (int m = 0; m < muts; m++) {
            s = s * 1664525u + 1013904223u;
            size_t pos = (s >> 8) % (n ? n : 1);
            switch ((s >> 4) & 3) {
            case 0: buf[pos] = (char)(s >> 20); break;
            case 1: if (n < 4000) { memmove(buf + pos + 1, buf + pos, n - pos); buf[pos] = "{}[],:\"0-e"[(s >> 24) % 10]; n++; if (pos < hl) hl++; } break;
            case 2: if (n > 1) { memmove(buf + pos, buf + pos + 1, n - pos - 1); n--; if (pos < hl && hl > 1) hl--; } break;
            case 3: n = pos + 1; if (hl > n) hl = n; break;
            }
        }
        df_error_t e = {0};
        int rc = df_kserve_parse_request(&r, buf, n, hl, &lim, &e);
        if (rc == 0) {
            ok++;
            for (int i = 0; i < r.n_inputs; i++) {
                int64_t numel = 1;
                for (int d = 0; d < r.inputs[i].ndim; d++) numel *= r.inputs[i].shape[d];
                if (numel != r.inputs[i].numel || (numel && !r.inputs[i].data)) broken++;
                for (int64_t x = 0; x < numel; x++)
                    if (!isfinite(r.inputs[i].data[x])) broken++;
            }
        } else {
            bad++;
            if (rc > 0 || !e.msg[0]) broken++;
        }
    }
    free(buf);
    df_ks_request_free(&r);
    printf("# mutation fuzz: %d accepted, %d refused, %d inconsistent\n", ok, bad, broken);
    DF_CHECK(broken == 0);
    DF_CHECK(bad > 1000 && ok > 0);
}

/* Two parsed requests equal field by field (data bit for bit). */
static int same_request(const df_ks_request_t *a, const df_ks_request_t *b)
{
    if (strcmp(a->id, b->id) || a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs ||
        a->binary_output != b->binary_output || a->encoding != b->encoding || a->flags != b->flags ||
        a->timeout_us != b->timeout_us || strcmp(a->clip, b->clip) ||
        memcmp(&a->clip_time, &b->clip_time, 8) || memcmp(&a->clip_dt, &b->clip_dt, 8) ||
        a->batch_size != b->batch_size)
        return 0;
    for (int i = 0; i < a->n_inputs; i++) {
        const df_ks_input_t *x = &a->inputs[i], *y = &b->inputs[i];
        if (strcmp(x->name, y->name) || x->ndim != y->ndim || x->numel != y->numel ||
            x->binary != y->binary || memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) ||
            memcmp(x->data, y->data, 4 * (size_t)x->numel))
            return 0;
    }
    for (int i = 0; i < a->n_outputs; i++)
        if (strcmp(a->outputs[i].name, b->outputs[i].name) || a->outputs[i].binary != b->outputs[i].binary ||
            a->outputs[i].encoding != b->outputs[i].encoding)
            return 0;
    return 1;
}

/* The subset JSON reader (proto/kjson.c) against jansson as the reference:
 * 30,000 mutated requests (numbers in every form, parameters, nesting,
 * strings with escapes) parsed both ways must give the same return code,
 * the same error message, and the same request field by field; the
 * unmutated seeds must not fall back to jansson. */
static void test_subset_reader_matches_jansson(void)
{
    const char *seeds[] = {
        "{\"id\":\"req-7\",\"parameters\":{\"encoding\":\"int16\",\"binary_data_output\":false,\"timeout_us\":250000,"
        "\"skinning\":\"lbs\",\"clip\":\"walk\",\"time\":1.25,\"dt\":0.016666668,\"batch_size\":2},"
        "\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,3],"
        "\"data\":[[0.5,-1.5e-3,3.4028234e38],[-0,1E+2,0.30000000000000004]]},"
        "{\"name\":\"pose\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,-2,1.401298464324817e-45,7e-7]}],"
        "\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":true,\"encoding\":\"float16\"}},"
        "{\"name\":\"normals\"}]}",
        "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[0.25,0.5,0.75,1]}],"
        "\"outputs\":[{\"name\":\"positions\"}]}",
        " { \"inputs\" : [ { \"name\" : \"a\" , \"datatype\" : \"FP32\" , \"shape\" : [ 3 ] , "
        "\"data\" : [ 1.5e-45 , 3.5e38 , -123456789012345678 ] } ] } ",
    };
    df_ks_request_t r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    df_ks_limits_t lim;
    df_ks_limits_default(&lim);
    lim.max_elements = 4096;
    unsigned long fb0 = df__kserve_fallbacks();
    for (int k = 0; k < 3; k++) {
        df_error_t e = {0};
        int rc = df_kserve_parse_request(&r1, seeds[k], strlen(seeds[k]), strlen(seeds[k]), &lim, &e);
        DF_CHECK_MSG(k == 2 ? rc == DF_EINVAL && strstr(e.msg, "outside float32") : rc == 0,
                     "seed %d: %d %s", k, rc, e.msg);
    }
    DF_CHECK(df__kserve_fallbacks() == fb0);
    uint32_t s = 777;
    int ok = 0, bad = 0, differ = 0;
    char *buf = malloc(8192);
    for (int it = 0; it < 30000; it++) {
        int k = it % 3;
        size_t n = strlen(seeds[k]);
        memcpy(buf, seeds[k], n);
        int muts = 1 + (int)((s >> 28) & 3);
        for (int m = 0; m < muts; m++) {
            s = s * 1664525u + 1013904223u;
            size_t pos = (s >> 8) % n;
            switch ((s >> 4) & 3) {
            case 0: buf[pos] = "0123456789.eE+-,[]{}:\"\\ atfnu\x01\xc3"[(s >> 20) % 31]; break;
            case 1: if (n < 8000) { memmove(buf + pos + 1, buf + pos, n - pos); buf[pos] = "{}[],:\"0-e.5\\"[(s >> 24) % 13]; n++; } break;
            case 2: if (n > 1) { memmove(buf + pos, buf + pos + 1, n - pos - 1); n--; } break;
            case 3: if ((s >> 12) % 8 == 0) n = pos + 1; else buf[pos] = (char)(s >> 20); break;
            }
        }
        df_error_t e1 = {0}, e2 = {0};
        int rc1 = df_kserve_parse_request(&r1, buf, n, n, &lim, &e1);
        df__kserve_jansson_only(1);
        int rc2 = df_kserve_parse_request(&r2, buf, n, n, &lim, &e2);
        df__kserve_jansson_only(0);
        if (rc1 != rc2 || strcmp(e1.msg, e2.msg) || (rc1 == 0 && !same_request(&r1, &r2))) {
            if (differ++ < 5) printf("# differ (%d/%d): %.*s\n#   %s\n#   %s\n", rc1, rc2, (int)n, buf, e1.msg, e2.msg);
        }
        if (rc1 == 0) ok++; else bad++;
    }
    free(buf);
    printf("# subset reader vs jansson: %d accepted, %d refused, %d differ; %lu fell back to jansson\n", ok,
           bad, differ, df__kserve_fallbacks() - fb0);
    DF_CHECK(differ == 0);
    DF_CHECK(ok > 1000 && bad > 1000);
    df_ks_request_free(&r1);
    df_ks_request_free(&r2);
}

static uint32_t fl_rng = 2024;
static uint32_t fl_rand(void)
{
    fl_rng ^= fl_rng << 13;
    fl_rng ^= fl_rng >> 17;
    fl_rng ^= fl_rng << 5;
    return fl_rng;
}
static float fl_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* df_ks_buf_floats(x, n) appended after a prefix equals the prefix and the
 * reference text; reports the first differing element. */
static int floats_match(const float *x, size_t n, const char *what)
{
    static char ref[64 + 20 * 4096];
    static df_ks_buf_t b;
    df_ks_buf_reset(&b);
    df_ks_buf_append(&b, "[", 1); /* an arbitrary start in the buffer */
    df_ks_buf_floats(&b, x, n);
    size_t rl = ref_floats(ref, x, n);
    if (!b.oom && b.len == rl + 1 && !memcmp(b.data + 1, ref, rl) && b.data[b.len] == 0) return 1;
    /* name the first element that differs (the numbers are comma-separated) */
    const char *g = b.data + 1, *w = ref;
    size_t i = 0;
    while (*g && *g == *w) {
        if (*g == ',') {
            i++;
            g++, w++;
            continue;
        }
        g++, w++;
    }
    while (g > b.data + 1 && g[-1] != ',') g--;
    while (w > ref && w[-1] != ',') w--;
    uint32_t u = 0;
    if (i < n) memcpy(&u, &x[i], 4);
    printf("# %s: element %zu of %zu (bits %08x): got \"%.*s\", want \"%.*s\"\n", what, i, n, u,
           (int)strcspn(g, ","), g, (int)strcspn(w, ","), w);
    return 0;
}

/* df_ks_buf_floats against the scalar formatter, byte for byte, on whole arrays:
 * 2.1 million random bit patterns (every exponent, subnormals, inf and NaN
 * included) in arrays of random length; every power of ten and its float
 * neighbours; each side of the form boundaries (1e-5, 1e-6, 1e8, 1e9) and
 * of the float range; every array length 0..40 (partial chunks) at every
 * start offset in a chunk; a NaN at each position of a chunk (the scalar
 * fallback); vertex-like data. Every finite number printed must read back
 * (strtof) to the same bits. */
static void test_floats_match_reference(void)
{
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512CD__)
    printf("# df_ks_buf_floats: AVX-512 path\n");
#else
    printf("# df_ks_buf_floats: scalar path\n");
#endif
    enum { N = 4096 };
    static float x[N];
    int bad = 0;
    /* random bit patterns, all exponents */
    size_t total = 0;
    while (total < 2100000) {
        size_t n = 1 + fl_rand() % 400;
        for (size_t i = 0; i < n; i++) x[i] = fl_bits(fl_rand());
        if (!floats_match(x, n, "random bits") && bad++ > 3) break;
        total += n;
    }
    /* the same with the exponent drawn uniformly (0 = subnormal, 255 = inf/NaN rare) */
    for (int rep = 0; rep < 200; rep++) {
        for (size_t i = 0; i < 1000; i++) {
            uint32_t r = fl_rand();
            uint32_t e = (fl_rand() % 255); /* no inf/NaN */
            x[i] = fl_bits((r & 0x807FFFFFu) | e << 23);
        }
        if (!floats_match(x, 1000, "random exponent") && bad++ > 3) break;
    }
    /* powers of ten and neighbours; form boundaries; extremes */
    size_t n = 0;
    for (int e = -46; e <= 39; e++) {
        float pw = (float)pow(10.0, e);
        float lo = pw, hi = pw;
        x[n++] = pw;
        x[n++] = -pw;
        for (int k = 0; k < 4; k++) {
            lo = nextafterf(lo, 0.0f);
            hi = nextafterf(hi, INFINITY);
            x[n++] = lo;
            x[n++] = hi;
        }
        /* and 9.9999999 * 10^e, 5 * 10^e (rounding at the last digit) */
        x[n++] = (float)(9.9999999 * pow(10.0, e));
        x[n++] = (float)(9.99999995 * pow(10.0, e));
        x[n++] = (float)(5.0 * pow(10.0, e));
    }
    const float bound[] = {1e-5f, 1e-6f, 1e8f, 1e9f, 1e-4f, 1e7f, 999999999.0f, 99999999.0f, 0.0001f,
                           9.9999999e-6f, 9.99999e-7f, 123456789.0f, 16777216.0f, 16777217.0f};
    for (size_t i = 0; i < sizeof bound / sizeof bound[0]; i++) {
        float lo = bound[i], hi = bound[i];
        x[n++] = bound[i];
        for (int k = 0; k < 8; k++) {
            lo = nextafterf(lo, 0.0f);
            hi = nextafterf(hi, INFINITY);
            x[n++] = lo;
            x[n++] = -hi;
        }
    }
    const float ext[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 0.1f, 0.3f, 2.0f, FLT_MAX, -FLT_MAX, FLT_MIN,
                         -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, nextafterf(FLT_MIN, 0.0f),
                         2 * FLT_TRUE_MIN, 7e-45f, nextafterf(FLT_MAX, 0.0f), 3.4028234e38f};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) x[n++] = ext[i];
    for (uint32_t u = 1; u < 64; u++) x[n++] = fl_bits(u);             /* smallest subnormals */
    for (uint32_t u = 0; u < 64; u++) x[n++] = fl_bits(0x007FFFFFu - u); /* largest */
    for (int i = 0; i < 256; i++) x[n++] = fl_bits(fl_rand() & 0x807FFFFFu); /* random subnormals */
    DF_CHECK(n < N);
    bad += !floats_match(x, n, "edges");
    size_t nedge = n;
    /* every length 0..40 at every offset 0..7, from the edges and random data */
    for (size_t i = nedge; i < nedge + 100; i++) x[i] = fl_bits(fl_rand());
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 40; len++) {
            bad += !floats_match(x + off, len, "lengths (edges)");
            bad += !floats_match(x + nedge + off, len, "lengths (random)");
        }
    /* a NaN or an inf at each position of a 20-float array (chunk fallback) */
    float y[20];
    for (int at = 0; at < 20; at++) {
        for (int i = 0; i < 20; i++) y[i] = (float)(i - 9) * 0.37f;
        y[at] = at & 1 ? NAN : -INFINITY;
        bad += !floats_match(y, 20, "non-finite");
    }
    /* vertex-like: [-10, 10] with exact values mixed in */
    const float exact[] = {0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 0.25f, -0.0f, 2.0f};
    for (int rep = 0; rep < 100; rep++) {
        for (size_t i = 0; i < 360; i++) {
            uint32_t r = fl_rand();
            x[i] = r % 10 == 0 ? exact[(r >> 8) % 8] : (float)((fl_rand() / 4294967296.0) * 20.0 - 10.0);
        }
        bad += !floats_match(x, 360, "vertex-like");
    }
    DF_CHECK_MSG(bad == 0, "%d arrays differ", bad);

    /* round trip: strtof of every finite number gives the same bits */
    df_ks_buf_t b = {0};
    long roundtrip_bad = 0, numbers = 0;
    for (int rep = 0; rep < 250; rep++) {
        for (size_t i = 0; i < N; i++) {
            uint32_t u = fl_rand();
            if (((u >> 23) & 0xFF) == 0xFF) u &= ~(1u << 30);
            x[i] = fl_bits(u);
        }
        if (rep == 0) memcpy(x, ext, sizeof ext);
        df_ks_buf_reset(&b);
        df_ks_buf_floats(&b, x, N);
        char *p = b.data, *end;
        for (size_t i = 0; i < N; i++) {
            float f = strtof(p, &end);
            if (memcmp(&f, &x[i], 4) && !(f == 0 && x[i] == 0)) roundtrip_bad++;
            if (x[i] == 0 && (end != p + 1 || *p != '0')) roundtrip_bad++; /* zeros print as "0" */
            numbers++;
            p = end + 1; /* past the comma */
        }
    }
    df_ks_buf_free(&b);
    printf("# float writer: %zu random + %zu edge floats byte-identical to the reference, "
           "%ld of %ld round trips wrong\n", total, nedge, roundtrip_bad, numbers);
    DF_CHECK(roundtrip_bad == 0);
}

int main(void)
{
    DF_RUN(test_parse_json_nested_and_flat);
    DF_RUN(test_parse_binary);
    DF_RUN(test_parse_binary_cached);
    DF_RUN(test_parse_errors);
    DF_RUN(test_parse_too_many_values);
    DF_RUN(test_parse_memory_bounded);
    DF_RUN(test_parse_binary_size_past_end);
    DF_RUN(test_response_roundtrip);
    DF_RUN(test_floats_match_reference);
    DF_RUN(test_mutation_fuzz);
    DF_RUN(test_subset_reader_matches_jansson);
    return dftest_exit();
}

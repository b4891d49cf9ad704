/* fuzz_kserve.c — libFuzzer driver for the KServe v2 request decoder
 * (proto/kserve.c, with the JSON reader proto/kjson.c).
 *
 * Input: two bytes little-endian k, then a request body. k = 0xFFFF: the
 * whole body is JSON (no Inference-Header-Content-Length); otherwise the
 * first min(k, body) bytes are the JSON header and the rest is binary data,
 * as the HTTP front calls the decoder. The body is copied into a buffer of
 * exactly its size (ASan sees any read past it). Oracles:
 *   - an error has its code and a message; success means every input has
 *     numel = product of its shape, data inside the body or the request's
 *     arena, finite values, and the reading stayed within
 *     DF_KS_PARSE_FACTOR x the header + 64 KiB (read_bytes);
 *   - the same body through jansson only (headers of at most 64 KiB) gives
 *     the same result code and the same inputs, bit for bit: the subset
 *     reader may decline JSON, never read it differently.
 * Seeds: fuzz/corpus/kserve (replayed by tests/unit/fuzz/test_fuzz_kserve.c).
 */
#include "kserve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const df_ks_request_t *r, int rc, const df_error_t *e, const char *body,
                  size_t len, size_t json_len)
{
    if (rc != DF_OK) {
        if (e->code != rc || !e->msg[0]) abort();
        return;
    }
    if (r->n_inputs < 0 || r->n_inputs > DF_KS_MAX_TENSORS) abort();
    if (r->n_outputs < 0 || r->n_outputs > DF_KS_MAX_TENSORS) abort();
    if (r->read_bytes > (size_t)DF_KS_PARSE_FACTOR * json_len + (64u << 10)) abort();
    for (int i = 0; i < r->n_inputs; i++) {
        const df_ks_input_t *x = &r->inputs[i];
        int64_t n = 1;
        for (int k = 0; k < x->ndim; k++) n *= x->shape[k];
        if (n != x->numel) abort();
        const char *d = (const char *)x->data;
        int in_body = d >= body && d + 4 * (size_t)n <= body + len;
        int in_arena = (const float *)d >= r->arena && x->data + n <= r->arena + r->arena_cap;
        if (n && !in_body && !in_arena) abort();
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(x->data[k])) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t k = (size_t)data[0] | (size_t)data[1] << 8;
    size_t len = size - 2;
    char *body = malloc(len ? len : 1);
    memcpy(body, data + 2, len);
    size_t json_len = k == 0xFFFF || k > len ? len : k;
    df_ks_limits_t lim;
    df_ks_limits_default(&lim);
    lim.max_elements = 1 << 20;
    static df_ks_request_t a, b; /* reused, as the HTTP front does */
    df_error_t ea = {0}, eb = {0};
    int ra = df_kserve_parse_request(&a, body, len, json_len, &lim, &ea);
    check(&a, ra, &ea, body, len, json_len);
    if (json_len <= DF_KS_FALLBACK_MAX) {
        df__kserve_jansson_only(1);
        int rb = df_kserve_parse_request(&b, body, len, json_len, &lim, &eb);
        df__kserve_jansson_only(0);
        check(&b, rb, &eb, body, len, json_len);
        /* a header the subset reader reads is read the same by jansson;
         * only its memory bound (DF_ELIMIT) may refuse what jansson reads */
        if (ra == DF_OK && rb != DF_OK && rb != DF_ELIMIT) abort();
        if (ra == DF_OK && rb == DF_OK) {
            if (a.n_inputs != b.n_inputs || a.n_outputs != b.n_outputs || strcmp(a.id, b.id) ||
                a.binary_output != b.binary_output || a.encoding != b.encoding ||
                a.flags != b.flags || a.batch_size != b.batch_size || strcmp(a.clip, b.clip))
                abort();
            for (int i = 0; i < a.n_inputs; i++) {
                if (strcmp(a.inputs[i].name, b.inputs[i].name) ||
                    a.inputs[i].numel != b.inputs[i].numel ||
                    memcmp(a.inputs[i].data, b.inputs[i].data, 4 * (size_t)a.inputs[i].numel))
                    abort();
            }
        }
    }
    free(body);
    return 0;
}

/* http.c — libdeformclient over HTTP (KServe v2) with libcurl.
 *
 * DESIGN
 * The same df_client_request_t as the socket, sent as
 * POST /v2/models/{character}/infer either with JSON numbers (binary = 0)
 * or with the binary-data extension (binary = 1): the JSON header gives
 * each input's parameters.binary_data_size and the raw float32 bytes
 * follow, Inference-Header-Content-Length says where the JSON ends; the
 * answer is split the same way. Numbers are printed with %.9g, which
 * round-trips float32 exactly, so both modes must give bit-identical
 * results (tests/unit/clients/test_client.c checks it against the socket).
 * Not a hot path: one curl handle per call, simple growable buffers.
 * Both calls are idempotent (GET, and infer: a pure function of its
 * inputs), so each is sent once more when the first try lost its
 * connection (refused, reset, closed before an answer) or got 502 / 503 —
 * what a router answers when a daemon died under the request, and what a
 * draining daemon answers; behind a router the second try reaches another
 * daemon.
 */
#include "deformclient.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb_add(sbuf_t *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* JSON string of a name (names are plain; escape quotes and backslashes). */
static void sb_str(sbuf_t *b, const char *s)
{
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') sb_add(b, "\\", 1);
        if ((unsigned char)*s >= 0x20) sb_add(b, s, 1);
    }
    sb_add(b, "\"", 1);
}

static char g_token[256]; /* df_client_http_set_token; "" = none */

int df_client_http_set_token(const char *token)
{
    size_t n = token ? strlen(token) : 0;
    if (n >= sizeof g_token) return DF_EINVAL;
    memset(g_token, 0, sizeof g_token);
    if (n) memcpy(g_token, token, n);
    return DF_OK;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user)
{
    sbuf_t *b = user;
    sb_add(b, ptr, size * nmemb);
    return b->oom ? 0 : size * nmemb;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *user)
{
    long *json_len = user;
    size_t n = size * nmemb;
    static const char key[] = "inference-header-content-length:";
    if (n > sizeof key - 1 && !strncasecmp(ptr, key, sizeof key - 1))
        *json_len = strtol(ptr + sizeof key - 1, NULL, 10);
    return n;
}

static int perform_once(const char *url, const char *body, size_t body_len, long json_len,
                        sbuf_t *resp, long *status, long *resp_json_len, CURLcode *cr_out,
                        df_error_t *err)
{
    CURL *h = curl_easy_init();
    if (!h) return df_error_set(err, DF_ENOMEM, "curl_easy_init failed");
    struct curl_slist *hdr = NULL;
    char line[96], auth[300];
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, resp_json_len);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        if (json_len >= 0) {
            snprintf(line, sizeof line, "Inference-Header-Content-Length: %ld", json_len);
            hdr = curl_slist_append(hdr, line);
            hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
        } else {
            hdr = curl_slist_append(hdr, "Content-Type: application/json");
        }
        hdr = curl_slist_append(hdr, "Expect:");
    }
    if (g_token[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_token);
        hdr = curl_slist_append(hdr, auth);
        memset(auth, 0, sizeof auth);
    }
    if (hdr) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    CURLcode cr = curl_easy_perform(h);
    *cr_out = cr;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    if (cr != CURLE_OK) return df_error_set(err, DF_EIO, "%s: %s", url, curl_easy_strerror(cr));
    if (resp->oom) return df_error_set(err, DF_ENOMEM, "out of memory reading %s", url);
    return DF_OK;
}

static int perform(const char *url, const char *body, size_t body_len, long json_len,
                   sbuf_t *resp, long *status, long *resp_json_len, df_error_t *err)
{
    CURLcode cr = CURLE_OK;
    int rc = perform_once(url, body, body_len, json_len, resp, status, resp_json_len, &cr, err);
    int lost = cr == CURLE_COULDNT_CONNECT || cr == CURLE_GOT_NOTHING ||
               cr == CURLE_SEND_ERROR || cr == CURLE_RECV_ERROR;
    if (lost || (rc == DF_OK && (*status == 502 || *status == 503))) {
        free(resp->p);
        memset(resp, 0, sizeof *resp);
        *resp_json_len = -1;
        *status = 0;
        rc = perform_once(url, body, body_len, json_len, resp, status, resp_json_len, &cr, err);
    }
    return rc;
}

int df_client_http_get(const char *base, const char *path, char **body, size_t *len,
                       long *status, df_error_t *err)
{
    char url[2048];
    snprintf(url, sizeof url, "%s%s", base, path);
    sbuf_t b = {0};
    long jl = -1, st = 0;
    int rc = perform(url, NULL, 0, -1, &b, &st, &jl, err);
    if (status) *status = st;
    if (rc) {
        free(b.p);
        return rc;
    }
    if (!b.p) sb_add(&b, "", 0);
    *body = b.p;
    if (len) *len = b.len;
    return DF_OK;
}

static int code_for_status(long st)
{
    switch (st) {
    case 400: return DF_EINVAL;
    case 401: case 403: return DF_EAUTH;
    case 404: return DF_ENOTFOUND;
    case 413: return DF_ELIMIT;
    case 429: return DF_EOVERLOAD;
    case 503: return DF_ESHUTDOWN;
    default: return DF_EINTERNAL;
    }
}

int df_client_http_infer(const char *base, const df_client_request_t *q, int binary,
                         df_client_result_t *out, df_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (!q->character) return df_error_set(err, DF_EINVAL, "request without a character");
    int B = q->n_poses > 0 ? q->n_poses : 1;
    sbuf_t js = {0};
    sb_add(&js, "{\"inputs\":[", 11);
    for (int i = 0; i < q->n_inputs; i++) {
        const df_client_tensor_t *t = &q->inputs[i];
        size_t n = 1;
        sb_printf(&js, "%s{\"name\":", i ? "," : "");
        sb_str(&js, t->name);
        sb_add(&js, ",\"datatype\":\"FP32\",\"shape\":[", 28);
        for (int k = 0; k < t->ndim; k++) {
            sb_printf(&js, k ? ",%lld" : "%lld", (long long)t->shape[k]);
            n *= (size_t)t->shape[k];
        }
        if (binary) {
            sb_printf(&js, "],\"parameters\":{\"binary_data_size\":%zu}}", n * sizeof(float));
        } else {
            sb_add(&js, "],\"data\":[", 10);
            for (size_t k = 0; k < n; k++) sb_printf(&js, k ? ",%.9g" : "%.9g", t->data[k]);
            sb_add(&js, "]}", 2);
        }
    }
    sb_add(&js, "]", 1);
    if (q->n_outputs) {
        sb_add(&js, ",\"outputs\":[", 12);
        for (int o = 0; o < q->n_outputs; o++) {
            sb_add(&js, o ? ",{\"name\":" : "{\"name\":", o ? 9 : 8);
            sb_str(&js, q->outputs[o]);
            sb_printf(&js, ",\"parameters\":{\"binary_data\":%s}}", binary ? "true" : "false");
        }
        sb_add(&js, "]", 1);
    }
    sb_printf(&js, ",\"parameters\":{\"binary_data_output\":%s,\"encoding\":\"float32\"",
              binary ? "true" : "false");
    if (B > 1) sb_printf(&js, ",\"batch_size\":%d", B);
    if (q->skinning) {
        sb_add(&js, ",\"skinning\":", 12);
        sb_str(&js, q->skinning);
    }
    int seq = (q->sequence_name && q->sequence_name[0]) || q->sequence_id;
    if (seq) {
        sb_add(&js, ",\"sequence_id\":", 15);
        if (q->sequence_name && q->sequence_name[0]) sb_str(&js, q->sequence_name);
        else sb_printf(&js, "%llu", (unsigned long long)q->sequence_id);
        if (q->sequence_start) sb_add(&js, ",\"sequence_start\":true", 22);
        if (q->sequence_end) sb_add(&js, ",\"sequence_end\":true", 20);
    }
    if (q->clip && q->times) {
        sb_add(&js, ",\"clip\":", 8);
        sb_str(&js, q->clip);
        sb_printf(&js, ",\"time\":%.17g", q->times[0]);
        if (B > 1) sb_printf(&js, ",\"dt\":%.17g", q->times[1] - q->times[0]);
    }
    sb_add(&js, "}}", 2);
    long json_len = (long)js.len;
    if (binary)
        for (int i = 0; i < q->n_inputs; i++) {
            size_t n = 1;
            for (int k = 0; k < q->inputs[i].ndim; k++) n *= (size_t)q->inputs[i].shape[k];
            sb_add(&js, q->inputs[i].data, n * sizeof(float));
        }
    if (js.oom) {
        free(js.p);
        return df_error_set(err, DF_ENOMEM, "out of memory building the request");
    }
    char url[1024];
    snprintf(url, sizeof url, "%s/v2/models/%s/infer", base, q->character);
    sbuf_t resp = {0};
    long st = 0, rjl = -1;
    int rc = seq ? perform_once(url, js.p, js.len, binary ? json_len : -1, &resp, &st, &rjl,
                                &(CURLcode){CURLE_OK}, err) /* a sequence's frame: never twice */
                 : perform(url, js.p, js.len, binary ? json_len : -1, &resp, &st, &rjl, err);
    free(js.p);
    if (rc) {
        free(resp.p);
        return rc;
    }
    size_t jlen = rjl >= 0 && (size_t)rjl <= resp.len ? (size_t)rjl : resp.len;
    json_error_t je;
    json_t *root = resp.p ? json_loadb(resp.p, jlen, 0, &je) : NULL;
    if (st != 200) {
        const char *m = root ? json_string_value(json_object_get(root, "error")) : NULL;
        rc = df_error_set(err, code_for_status(st), "HTTP %ld: %s", st, m ? m : "(no message)");
        out->status = rc;
        snprintf(out->error, sizeof out->error, "%s", err ? err->msg : "");
        goto done;
    }
    if (!root) {
        rc = df_error_set(err, DF_EFORMAT, "HTTP response JSON: %s", resp.p ? je.text : "empty");
        goto done;
    }
    json_t *outs = json_object_get(root, "outputs"), *o;
    size_t i, boff = jlen;
    json_array_foreach(outs, i, o) {
        if (i >= DF_CLIENT_MAX_IO) break;
        df_client_tensor_t *t = &out->outputs[i];
        snprintf(t->name, sizeof t->name, "%s", json_string_value(json_object_get(o, "name")) ?: "");
        json_t *sh = json_object_get(o, "shape"), *d;
        size_t k, n = 1;
        json_array_foreach(sh, k, d) {
            if (k < DF_MAX_DIMS) t->shape[k] = json_integer_value(d);
            n *= (size_t)json_integer_value(d);
        }
        t->ndim = (int)json_array_size(sh);
        const char *dt = json_string_value(json_object_get(o, "datatype")) ?: "";
        json_t *par = json_object_get(o, "parameters");
        json_t *bds = json_object_get(par, "binary_data_size");
        float *v = malloc(n * sizeof(float) + 1);
        if (!v) {
            rc = df_error_set(err, DF_ENOMEM, "out of memory");
            goto done;
        }
        t->data = v;
        out->n_outputs = (int)i + 1;
        if (bds) {
            size_t nb = (size_t)json_integer_value(bds);
            size_t es = strcmp(dt, "FP32") ? 2 : 4;
            if (nb != n * es || boff + nb > resp.len) {
                rc = df_error_set(err, DF_EFORMAT, "output %s: binary size %zu for %zu %s values",
                                  t->name, nb, n, dt);
                goto done;
            }
            const char *src = resp.p + boff;
            if (es == 4) memcpy(v, src, nb);
            else if (!strcmp(dt, "FP16"))
                for (size_t e = 0; e < n; e++) {
                    uint16_t h;
                    memcpy(&h, src + 2 * e, 2);
                    v[e] = df_f16_to_f32(h);
                }
            else {
                float sc[4] = {1, 1, 1, 1}, of[4] = {0};
                /* the int16 box: the output's "deformd" extension object
                 * (daemons before it sent it in "parameters") */
                json_t *box = json_object_get(o, "deformd") ?: par;
                json_t *s = json_object_get(box, "scale"), *f = json_object_get(box, "offset");
                size_t nc = json_array_size(s);
                for (size_t c = 0; c < nc && c < 4; c++) {
                    sc[c] = (float)json_number_value(json_array_get(s, c));
                    of[c] = (float)json_number_value(json_array_get(f, c));
                }
                for (size_t e = 0; e < n; e++) {
                    int16_t qv;
                    memcpy(&qv, src + 2 * e, 2);
                    size_t c = nc ? e % nc : 0;
                    v[e] = of[c] + sc[c] * (float)qv;
                }
            }
            boff += nb;
        } else {
            json_t *data = json_object_get(o, "data");
            if (json_array_size(data) != n) {
                rc = df_error_set(err, DF_EFORMAT, "output %s: %zu numbers for shape of %zu",
                                  t->name, json_array_size(data), n);
                goto done;
            }
            for (size_t e = 0; e < n; e++) v[e] = (float)json_number_value(json_array_get(data, e));
        }
    }
    out->n_poses = out->n_outputs ? (int)out->outputs[0].shape[0] : B;
    out->wire_bytes = resp.len;
done:
    if (rc && out->n_outputs) df_client_result_free(out);
    json_decref(root);
    free(resp.p);
    return rc;
}

/* kserve.c — KServe v2 JSON + binary-data extension codec (see kserve.h).
 *
 * Parsing reads the JSON header only (never the binary part) into a flat
 * node array — proto/kjson.c for the common subset, jansson for the rest
 * and for syntax errors (see kjson.h) — then walks the document with
 * explicit checks; every error names the input (or field) at fault. Writing uses a small growable buffer and
 * prints floats with %.9g (exact float32 round trip).
 */
#include "kserve.h"
#include <jansson.h>
#include <math.h>
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* df_ks_buf_floats' eight-at-a-time path (see there) */
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512CD__)
#define KS_FLOATS_X8 1
#include <immintrin.h>
#include <pthread.h>
#endif

void df_ks_limits_default(df_ks_limits_t *l)
{
    l->max_depth = 16;
    l->max_elements = 16 * 1024 * 1024;
}

#define KS_DOC_KEEP 65536 /* nodes (16 bytes each) kept between requests */
/* Memory the reader may use for a JSON header: KS_PARSE_FACTOR times its
 * size plus KS_PARSE_BASE (nodes, packed numbers, strings, and the floats
 * of "data"): a flat "data" array needs 6.5 times its text, nested 4-value
 * rows ("[0,0,0,1],") 8.4. More (deep nesting of tiny values) is DF_ELIMIT. */
#define KS_PARSE_FACTOR DF_KS_PARSE_FACTOR
#define KS_PARSE_BASE (64u << 10)
/* Largest JSON header handed to jansson when the subset reader declines:
 * jansson takes about 40 times the text in memory. */
#define KS_FALLBACK_MAX DF_KS_FALLBACK_MAX

void df_ks_request_free(df_ks_request_t *r)
{
    if (r->id_cap) free(r->id);
    r->id = NULL;
    r->id_cap = 0;
    df_kj_doc_free(&r->doc);
    free(r->arena);
    r->arena = NULL;
    r->arena_cap = r->arena_used = 0;
}

/* r->id = s[0..n) in r's own (grow-only) buffer. */
static int set_id(df_ks_request_t *r, const char *s, size_t n)
{
    if (n + 1 > r->id_cap) {
        size_t cap = n + 1 < 64 ? 64 : n + 1;
        char *p = realloc(r->id_cap ? r->id : NULL, cap);
        if (!p) return DF_ENOMEM;
        r->id = p;
        r->id_cap = cap;
    }
    memcpy(r->id, s, n);
    r->id[n] = 0;
    return 0;
}

static float *arena_take(df_ks_request_t *r, size_t n)
{
    size_t need = r->arena_used + n;
    if (need > r->arena_cap) {
        /* inputs already parsed point into the arena: only grow before the
         * first allocation of a request (we size it in a first pass) */
        return NULL;
    }
    float *p = r->arena + r->arena_used;
    r->arena_used = need;
    return p;
}

static int arena_reserve(df_ks_request_t *r, size_t n)
{
    r->arena_used = 0;
    if (n <= r->arena_cap) return 0;
    free(r->arena);
    r->arena = NULL;
    r->arena_cap = 0;
    size_t cap = n < 1024 ? 1024 : n;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap * sizeof(float))) return -1;
    r->arena = p;
    r->arena_cap = cap;
    return 0;
}

/* The JSON header is read into a df_kj_doc_t (proto/kjson.h): by the
 * subset reader, or by jansson and converted when the subset reader
 * declines. These accessors follow jansson's conventions (NULL / 0 on the
 * wrong type), so the checks below read as they did on json_t. */
typedef df_kj_node_t jv_t;
static inline const jv_t *jv_get(const jv_t *o, const char *k) { return df_kj_get(o, k); }
static inline const jv_t *jv_at(const jv_t *a, size_t i) { return df_kj_at(a, i); }
static inline size_t jv_size(const jv_t *v) { return df_kj_size(v); }
static inline int jv_is_num(const jv_t *v) { return v && (v->type == DF_KJ_INT || v->type == DF_KJ_REAL); }
static inline int jv_is_int(const jv_t *v) { return df_kj_is(v, DF_KJ_INT); }
static inline int jv_is_arr(const jv_t *v) { return df_kj_is(v, DF_KJ_ARR); }
static inline int jv_is_obj(const jv_t *v) { return df_kj_is(v, DF_KJ_OBJ); }
static inline int jv_is_str(const jv_t *v) { return df_kj_is(v, DF_KJ_STR); }
static inline int jv_is_null(const jv_t *v) { return df_kj_is(v, DF_KJ_NULL); }
static inline int jv_is_true(const jv_t *v) { return df_kj_is(v, DF_KJ_TRUE); }
static inline int jv_is_bool(const jv_t *v) { return v && (v->type == DF_KJ_TRUE || v->type == DF_KJ_FALSE); }
static inline const char *jv_str(const jv_t *v) { return jv_is_str(v) ? v->u.s : NULL; }
static inline size_t jv_strlen(const jv_t *v) { return jv_is_str(v) ? v->n : 0; }
static inline int64_t jv_int(const jv_t *v) { return jv_is_int(v) ? v->u.i : 0; }
static inline double jv_num(const jv_t *v)
{
    return jv_is_int(v) ? (double)v->u.i : df_kj_is(v, DF_KJ_REAL) ? v->u.d : 0.0;
}

/* "inputs[3]" for error messages, without snprintf (was 2 % of the HTTP
 * thread: it ran for every tensor of every request). what: >= 32 bytes. */
static void where(char *what, const char *list, size_t i)
{
    size_t n = strlen(list);
    memcpy(what, list, n);
    char *p = df_ks_fmt_i64(what + n, (int64_t)i);
    p[0] = ']';
    p[1] = 0;
}

/* Count numbers in a (nested) data array, checking depth and that every
 * leaf is a number. Returns count or -1 (err set). */
static int64_t count_data(const df_kj_doc_t *D, const jv_t *v, int depth, int max_depth,
                          const char *name, df_error_t *err)
{
    if (depth > max_depth) {
        df_error_set(err, DF_ELIMIT, "input '%s': data nested deeper than %d", name, max_depth);
        return -1;
    }
    if (jv_is_num(v)) return 1;
    if (!jv_is_arr(v)) {
        df_error_set(err, DF_EINVAL, "input '%s': data must hold numbers, found %s", name,
                     jv_is_str(v) ? "a string" : jv_is_obj(v) ? "an object"
                     : jv_is_bool(v) ? "a boolean" : jv_is_null(v) ? "null" : "a value");
        return -1;
    }
    if (v->packed) {
        if (depth + 1 > max_depth) { /* where its numbers are */
            df_error_set(err, DF_ELIMIT, "input '%s': data nested deeper than %d", name,
                         max_depth);
            return -1;
        }
        return (int64_t)v->n;
    }
    (void)D;
    int64_t n = 0;
    size_t i;
    const jv_t *e;
    for (i = 0; (e = jv_at(v, i)); i++) {
        int64_t c = count_data(D, e, depth + 1, max_depth, name, err);
        if (c < 0) return -1;
        n += c;
    }
    return n;
}

/* Check a nested array against the shape (row-major, each level's length
 * equal to its dimension). A flat array of numel numbers is also valid. */
static int nested_ok(const jv_t *v, const int64_t *shape, int ndim)
{
    if (ndim == 0) return jv_is_num(v);
    if (!jv_is_arr(v) || (int64_t)jv_size(v) != shape[0]) return 0;
    if (v->packed) return ndim == 1; /* numbers, one level */
    size_t i;
    const jv_t *e;
    for (i = 0; (e = jv_at(v, i)); i++) if (!nested_ok(e, shape + 1, ndim - 1)) return 0;
    return 1;
}

static int put_float(double d, float *out, int64_t *k, const char *name, df_error_t *err)
{
    if (!isfinite(d) || fabs(d) > FLT_MAX) {
        df_error_set(err, DF_EINVAL, "input '%s': element %lld (%g) is outside float32", name,
                     (long long)*k, d);
        return -1;
    }
    out[(*k)++] = (float)d;
    return 0;
}

static int flatten(const df_kj_doc_t *D, const jv_t *v, float *out, int64_t *k, const char *name,
                   df_error_t *err)
{
    if (jv_is_num(v)) return put_float(jv_num(v), out, k, name, err);
    if (jv_is_arr(v) && v->packed) {
        size_t b = (size_t)v->u.rel;
        for (size_t i = 0; i < v->n; i++) {
            double d = D->num_real[b + i] ? D->num[b + i].d : (double)D->num[b + i].i;
            if (put_float(d, out, k, name, err)) return -1;
        }
        return 0;
    }
    size_t i;
    const jv_t *e;
    for (i = 0; (e = jv_at(v, i)); i++) if (flatten(D, e, out, k, name, err)) return -1;
    return 0;
}

static int parse_encoding(const jv_t *p, df_encoding_t *out, const char *where, df_error_t *err)
{
    const jv_t *e = jv_get(p, "encoding");
    if (!e) return 0;
    if (!jv_is_str(e) || df_encoding_parse(jv_str(e), out))
        return df_error_set(err, DF_EINVAL,
                            "%s: parameters.encoding must be \"float32\", \"float16\" or \"int16\"",
                            where);
    return 0;
}

static int parse_bool(const jv_t *p, const char *key, int *out, const char *where,
                      df_error_t *err)
{
    const jv_t *e = jv_get(p, key);
    if (!e) return 0;
    if (!jv_is_bool(e))
        return df_error_set(err, DF_EINVAL, "%s: parameters.%s must be true or false", where, key);
    *out = jv_is_true(e);
    return 0;
}

static int copy_name(char *dst, const jv_t *v, const char *what, df_error_t *err)
{
    if (!jv_is_str(v))
        return df_error_set(err, DF_EINVAL, "%s: \"name\" must be a string", what);
    const char *s = jv_str(v);
    size_t n = strlen(s);
    if (n == 0 || n >= DF_NAME_MAX)
        return df_error_set(err, DF_EINVAL, "%s: name must be 1..%d characters", what,
                            DF_NAME_MAX - 1);
    if (n != jv_strlen(v))
        return df_error_set(err, DF_EINVAL, "%s: name contains a NUL byte", what);
    memcpy(dst, s, n + 1);
    return 0;
}

/* Parsed-header cache. A client streaming binary requests sends the same
 * JSON header every time (same names, shapes, sizes); only the binary part
 * changes. The parse is a pure function of (header bytes, body length,
 * limits), and with every input binary the result differs between such
 * requests only in where the data lies in the body, so each thread keeps
 * its last KS_CACHE_N results (offsets instead of pointers) and a request
 * whose header matches one byte for byte skips jansson. The data checks
 * (alignment copy, finite values) still run on every request. */
#define KS_CACHE_N 4
#define KS_CACHE_HDR 2048
typedef struct {
    int valid;
    size_t json_len, len;
    df_ks_limits_t lim;
    char hdr[KS_CACHE_HDR];
    char id[KS_CACHE_HDR + 1]; /* the request's id (the header holds it) */
    df_ks_request_t req; /* arena NULL, data NULL, id NULL */
    size_t off[DF_KS_MAX_TENSORS];
} ks_cache_t;
static _Thread_local ks_cache_t ks_cache[KS_CACHE_N];
static _Thread_local unsigned ks_cache_next;
static _Thread_local unsigned long ks_cache_hits;

unsigned long df__kserve_cache_hits(void) { return ks_cache_hits; }

static _Thread_local int ks_jansson_only;
static _Thread_local unsigned long ks_fallbacks;
void df__kserve_jansson_only(int on) { ks_jansson_only = on; }
unsigned long df__kserve_fallbacks(void) { return ks_fallbacks; }

static int lim_same(const df_ks_limits_t *a, const df_ks_limits_t *b)
{
    return a->max_depth == b->max_depth && a->max_elements == b->max_elements;
}

/* Binary inputs of r (data set) need no JSON: check alignment and values
 * exactly as the full parse does. */
static int check_binary_data(df_ks_request_t *r, df_error_t *err)
{
    size_t need = 0;
    for (int i = 0; i < r->n_inputs; i++)
        if (((uintptr_t)r->inputs[i].data & 3) != 0) need += (size_t)r->inputs[i].numel;
    if (need && arena_reserve(r, need + 16)) return df_error_set(err, DF_ENOMEM, "out of memory");
    for (int i = 0; i < r->n_inputs; i++) {
        df_ks_input_t *x = &r->inputs[i];
        if (((uintptr_t)x->data & 3) != 0) {
            float *dst = arena_take(r, (size_t)x->numel);
            memcpy(dst, x->data, (size_t)x->numel * 4);
            x->data = dst;
        }
        for (int64_t k = 0; k < x->numel; k++)
            if (!isfinite(x->data[k]))
                return df_error_set(err, DF_EINVAL, "input '%s': element %lld is not finite", x->name,
                                    (long long)k);
    }
    return DF_OK;
}

static int cache_lookup(df_ks_request_t *r, const char *body, size_t len, size_t json_len,
                        const df_ks_limits_t *lim, df_error_t *err, int *hit)
{
    *hit = 0;
    if (json_len >= len || json_len > KS_CACHE_HDR) return DF_OK;
    for (int c = 0; c < KS_CACHE_N; c++) {
        const ks_cache_t *e = &ks_cache[c];
        if (!e->valid || e->json_len != json_len || e->len != len || !lim_same(&e->lim, lim) ||
            memcmp(e->hdr, body, json_len))
            continue;
        float *keep = r->arena;
        size_t keep_cap = r->arena_cap;
        df_kj_doc_t keep_doc = r->doc;
        char *keep_id = r->id;
        size_t keep_id_cap = r->id_cap;
        memcpy(r, &e->req, sizeof *r);
        r->arena = keep;
        r->arena_cap = keep_cap;
        r->doc = keep_doc;
        r->id = keep_id;
        r->id_cap = keep_id_cap;
        r->arena_used = 0;
        if (e->id[0]) {
            if (set_id(r, e->id, strlen(e->id))) return df_error_set(err, DF_ENOMEM, "out of memory");
        } else if (r->id_cap) {
            r->id[0] = 0;
        } else {
            r->id = (char *)"";
        }
        for (int i = 0; i < r->n_inputs; i++) r->inputs[i].data = (const float *)(body + e->off[i]);
        *hit = 1;
        ks_cache_hits++;
        return check_binary_data(r, err);
    }
    return DF_OK;
}

static void cache_store(const df_ks_request_t *r, const char *body, size_t len, size_t json_len,
                        const df_ks_limits_t *lim, const size_t *boff)
{
    if (json_len >= len || json_len > KS_CACHE_HDR || r->n_inputs < 1) return;
    for (int i = 0; i < r->n_inputs; i++)
        if (!r->inputs[i].binary) return;
    ks_cache_t *e = &ks_cache[ks_cache_next++ % KS_CACHE_N];
    e->valid = 1;
    e->json_len = json_len;
    e->len = len;
    e->lim = *lim;
    memcpy(e->hdr, body, json_len);
    e->req = *r;
    snprintf(e->id, sizeof e->id, "%s", r->id ? r->id : "");
    e->req.id = NULL;
    e->req.id_cap = 0;
    e->req.arena = NULL;
    e->req.arena_cap = e->req.arena_used = 0;
    memset(&e->req.doc, 0, sizeof e->req.doc);
    for (int i = 0; i < r->n_inputs; i++) {
        e->off[i] = boff[i];
        e->req.inputs[i].data = NULL;
    }
}

int df_kserve_parse_request(df_ks_request_t *r, const char *body, size_t len, size_t json_len,
                            const df_ks_limits_t *lim, df_error_t *err)
{
    df_ks_limits_t dl;
    if (!lim) { df_ks_limits_default(&dl); lim = &dl; }
    if (json_len <= len) {
        int hit, hrc = cache_lookup(r, body, len, json_len, lim, err, &hit);
        if (hit) {
            if (hrc && err && err->code == 0) err->code = hrc;
            return hrc;
        }
    }
    float *keep = r->arena;
    size_t keep_cap = r->arena_cap;
    df_kj_doc_t keep_doc = r->doc;
    char *keep_id = r->id;
    size_t keep_id_cap = r->id_cap;
    memset(r, 0, sizeof *r);
    r->arena = keep;
    r->arena_cap = keep_cap;
    r->doc = keep_doc;
    r->id_cap = keep_id_cap;
    r->id = keep_id_cap ? keep_id : (char *)"";
    if (keep_id_cap) r->id[0] = 0;
    r->binary_output = 0;
    if (json_len > len)
        return df_error_set(err, DF_EINVAL,
                            "Inference-Header-Content-Length %zu is larger than the body (%zu bytes)",
                            json_len, len);
    if (json_len == 0) return df_error_set(err, DF_EINVAL, "empty request body");
    /* the subset reader first; jansson (its errors, its whole grammar)
     * for anything it declines in a header of at most KS_FALLBACK_MAX
     * bytes. Both within KS_PARSE_FACTOR times the header (see kserve.h). */
    json_t *jroot = NULL;
    size_t budget = KS_PARSE_FACTOR * json_len + KS_PARSE_BASE;
    r->doc.max_bytes = budget;
    int krc = ks_jansson_only && json_len <= KS_FALLBACK_MAX ? DF_KJ_FALLBACK
                                                               : df_kj_parse(&r->doc, body, json_len);
    if (krc == DF_KJ_FALLBACK && json_len > KS_FALLBACK_MAX) {
        int line = 1, col = 1;
        for (size_t k = 0; k < r->doc.err_at && k < json_len; k++) {
            if (body[k] == '\n') line++, col = 1;
            else col++;
        }
        return df_error_set(err, DF_EINVAL,
                            "invalid or unsupported JSON at line %d column %d: %s (a JSON header "
                            "over %d KiB is read by deformd's own reader only; see "
                            "docs/http-api.md)",
                            line, col, r->doc.err_what ? r->doc.err_what : "invalid JSON",
                            KS_FALLBACK_MAX >> 10);
    }
    if (krc == DF_KJ_FALLBACK) {
        ks_fallbacks++;
        json_error_t je;
        jroot = json_loadb(body, json_len, JSON_REJECT_DUPLICATES, &je);
        if (!jroot)
            return df_error_set(err, DF_EINVAL, "invalid JSON at line %d column %d: %s", je.line,
                                je.column, je.text);
        krc = df_kj_from_jansson(&r->doc, jroot);
    }
    if (krc == DF_KJ_LIMIT) {
        json_decref(jroot);
        return df_error_set(err, DF_ELIMIT,
                            "the JSON header of %zu bytes needs more than %zu bytes to read "
                            "(%d times its size): send \"data\" as flat arrays, or as binary data",
                            json_len, budget, KS_PARSE_FACTOR);
    }
    if (krc) {
        json_decref(jroot);
        return df_error_set(err, DF_ENOMEM, "out of memory reading the JSON header");
    }
    const jv_t *root = r->doc.root;
    int rc = DF_OK;
    if (!jv_is_obj(root)) {
        rc = df_error_set(err, DF_EINVAL, "the request must be a JSON object");
        goto done;
    }
    const jv_t *id = jv_get(root, "id");
    if (id) {
        if (!jv_is_str(id) || strlen(jv_str(id)) != jv_strlen(id)) {
            rc = df_error_set(err, DF_EINVAL, "\"id\" must be a string (without NUL bytes)");
            goto done;
        }
        if ((rc = set_id(r, jv_str(id), jv_strlen(id)))) {
            df_error_set(err, rc, "out of memory");
            goto done;
        }
    }
    /* request parameters */
    const jv_t *params = jv_get(root, "parameters");
    if (params) {
        if (!jv_is_obj(params)) {
            rc = df_error_set(err, DF_EINVAL, "\"parameters\" must be an object");
            goto done;
        }
        if ((rc = parse_bool(params, "binary_data_output", &r->binary_output, "request", err)))
            goto done;
        if ((rc = parse_encoding(params, &r->encoding, "request", err))) goto done;
        const jv_t *v;
        if ((v = jv_get(params, "skinning"))) {
            const char *s = jv_is_str(v) ? jv_str(v) : "";
            if (!strcmp(s, "lbs")) r->flags = DF_POSE_LBS;
            else if (!strcmp(s, "dqs")) r->flags = DF_POSE_DQS;
            else {
                rc = df_error_set(err, DF_EINVAL, "parameters.skinning must be \"lbs\" or \"dqs\"");
                goto done;
            }
        }
        if ((v = jv_get(params, "timeout_us"))) {
            if (!jv_is_int(v) || jv_int(v) <= 0 ||
                jv_int(v) > 3600000000LL) {
                rc = df_error_set(err, DF_EINVAL, "parameters.timeout_us must be an integer in 1..3.6e9");
                goto done;
            }
            r->timeout_us = jv_int(v);
        }
        if ((v = jv_get(params, "batch_size"))) {
            if (!jv_is_int(v) || jv_int(v) < 1 || jv_int(v) > 65536) {
                rc = df_error_set(err, DF_EINVAL, "parameters.batch_size must be an integer in 1..65536");
                goto done;
            }
            r->batch_size = (int)jv_int(v);
        }
        if ((v = jv_get(params, "clip"))) {
            if ((rc = copy_name(r->clip, v, "parameters.clip", err))) goto done;
        }
        if ((v = jv_get(params, "time"))) {
            if (!jv_is_num(v) || !isfinite(jv_num(v))) {
                rc = df_error_set(err, DF_EINVAL, "parameters.time must be a number (seconds)");
                goto done;
            }
            r->clip_time = jv_num(v);
        }
        if ((v = jv_get(params, "dt"))) {
            if (!jv_is_num(v) || !isfinite(jv_num(v))) {
                rc = df_error_set(err, DF_EINVAL, "parameters.dt must be a number (seconds)");
                goto done;
            }
            r->clip_dt = jv_num(v);
        }
        if ((v = jv_get(params, "sequence_id"))) {
            if (jv_is_int(v) && jv_int(v) >= 0) {
                r->seq_id = (uint64_t)jv_int(v);
                r->seq = r->seq_id != 0;
            } else if (jv_is_str(v) && jv_strlen(v) < DF_NAME_MAX &&
                       strlen(jv_str(v)) == jv_strlen(v)) {
                memcpy(r->seq_id_str, jv_str(v), jv_strlen(v) + 1);
                r->seq = r->seq_id_str[0] != 0;
            } else {
                rc = df_error_set(err, DF_EINVAL,
                                  "parameters.sequence_id must be an integer in 0..2^63-1 or a "
                                  "string of at most %d bytes (0 and \"\" mean no sequence)",
                                  DF_NAME_MAX - 1);
                goto done;
            }
        }
        if ((rc = parse_bool(params, "sequence_start", &r->seq_start, "request", err)) ||
            (rc = parse_bool(params, "sequence_end", &r->seq_end, "request", err)))
            goto done;
        if ((r->seq_start || r->seq_end) && !r->seq) {
            rc = df_error_set(err, DF_EINVAL,
                              "parameters.sequence_%s needs a non-zero parameters.sequence_id",
                              r->seq_start ? "start" : "end");
            goto done;
        }
    }
    /* inputs: first pass validates and counts arena floats */
    const jv_t *inputs = jv_get(root, "inputs");
    if (inputs && !jv_is_arr(inputs)) {
        rc = df_error_set(err, DF_EINVAL, "\"inputs\" must be an array");
        goto done;
    }
    size_t nin = inputs ? jv_size(inputs) : 0;
    if (nin > DF_KS_MAX_TENSORS) {
        rc = df_error_set(err, DF_ELIMIT, "%zu inputs (max %d)", nin, DF_KS_MAX_TENSORS);
        goto done;
    }
    int64_t total = 0;
    size_t arena_need = 0, json_floats = 0, bin_off = json_len, boff[DF_KS_MAX_TENSORS] = {0};
    for (size_t i = 0; i < nin; i++) {
        const jv_t *in = jv_at(inputs, i);
        df_ks_input_t *x = &r->inputs[i];
        char what[96];
        where(what, "inputs[", i);
        if (!jv_is_obj(in)) {
            rc = df_error_set(err, DF_EINVAL, "%s must be an object", what);
            goto done;
        }
        if ((rc = copy_name(x->name, jv_get(in, "name"), what, err))) goto done;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(r->inputs[k].name, x->name)) {
                rc = df_error_set(err, DF_EINVAL, "input '%s' given twice", x->name);
                goto done;
            }
        const jv_t *dt = jv_get(in, "datatype");
        if (!jv_is_str(dt)) {
            rc = df_error_set(err, DF_EINVAL, "input '%s': \"datatype\" missing (use \"FP32\")",
                              x->name);
            goto done;
        }
        if (strcmp(jv_str(dt), "FP32")) {
            rc = df_error_set(err, DF_EUNSUPPORTED,
                              "input '%s': datatype \"%.32s\" not supported (use \"FP32\")",
                              x->name, jv_str(dt));
            goto done;
        }
        const jv_t *shape = jv_get(in, "shape");
        if (!jv_is_arr(shape)) {
            rc = df_error_set(err, DF_EINVAL, "input '%s': \"shape\" must be an array of integers",
                              x->name);
            goto done;
        }
        if (jv_size(shape) > DF_MAX_DIMS) {
            rc = df_error_set(err, DF_EINVAL, "input '%s': shape has %zu dimensions (max %d)",
                              x->name, jv_size(shape), DF_MAX_DIMS);
            goto done;
        }
        x->ndim = (int)jv_size(shape);
        int64_t numel = 1;
        for (int k = 0; k < x->ndim; k++) {
            jv_t dn;
            const jv_t *d = df_kj_num_at(&r->doc, shape, (size_t)k, &dn) ? &dn : NULL;
            if (!jv_is_int(d) || jv_int(d) < 0) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': shape[%d] must be a non-negative integer", x->name, k);
                goto done;
            }
            if (jv_int(d) > lim->max_elements) {
                rc = df_error_set(err, DF_ELIMIT, "input '%s': more than %lld elements", x->name,
                                  (long long)lim->max_elements);
                goto done;
            }
            x->shape[k] = jv_int(d);
            numel *= x->shape[k];
            if (numel > lim->max_elements) {
                rc = df_error_set(err, DF_ELIMIT, "input '%s': more than %lld elements", x->name,
                                  (long long)lim->max_elements);
                goto done;
            }
        }
        x->numel = numel;
        total += numel;
        if (total > lim->max_elements) {
            rc = df_error_set(err, DF_ELIMIT, "request has more than %lld elements",
                              (long long)lim->max_elements);
            goto done;
        }
        const jv_t *ip = jv_get(in, "parameters");
        const jv_t *bsz = ip && jv_is_obj(ip) ? jv_get(ip, "binary_data_size") : NULL;
        const jv_t *data = jv_get(in, "data");
        if (ip && !jv_is_obj(ip)) {
            rc = df_error_set(err, DF_EINVAL, "input '%s': \"parameters\" must be an object", x->name);
            goto done;
        }
        if (bsz) {
            if (data) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': both \"data\" and parameters.binary_data_size", x->name);
                goto done;
            }
            if (!jv_is_int(bsz) || jv_int(bsz) < 0) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': parameters.binary_data_size must be a non-negative integer",
                                  x->name);
                goto done;
            }
            uint64_t n = (uint64_t)jv_int(bsz);
            if (n != (uint64_t)numel * 4) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': binary_data_size %llu does not match shape (%lld FP32 = %lld bytes)",
                                  x->name, (unsigned long long)n, (long long)numel,
                                  (long long)numel * 4);
                goto done;
            }
            if (n > len - bin_off) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': binary data of %llu bytes runs past the end of the body "
                                  "(%zu bytes left)",
                                  x->name, (unsigned long long)n, len - bin_off);
                goto done;
            }
            x->binary = 1;
            x->data = (const float *)(body + bin_off); /* fixed up below */
            boff[i] = bin_off;
            bin_off += n;
            if (((uintptr_t)x->data & 3) != 0) arena_need += (size_t)numel;
        } else {
            if (!data) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': no \"data\" (and no parameters.binary_data_size)",
                                  x->name);
                goto done;
            }
            int64_t c = count_data(&r->doc, data, 1, lim->max_depth, x->name, err);
            if (c < 0) { rc = err ? err->code : DF_EINVAL; goto done; }
            if (c != numel) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': data has %lld numbers but shape needs %lld", x->name,
                                  (long long)c, (long long)numel);
                goto done;
            }
            if (jv_is_arr(data) && jv_size(data) != (size_t)numel &&
                !nested_ok(data, x->shape, x->ndim)) {
                rc = df_error_set(err, DF_EINVAL,
                                  "input '%s': nested data does not follow the shape", x->name);
                goto done;
            }
            if (!jv_is_arr(data)) {
                rc = df_error_set(err, DF_EINVAL, "input '%s': data must be an array", x->name);
                goto done;
            }
            arena_need += (size_t)numel;
            json_floats += (size_t)numel;
        }
    }
    if (bin_off != len) {
        rc = df_error_set(err, DF_EINVAL,
                          "body has %zu bytes after the JSON header but the inputs' binary_data_size "
                          "add up to %zu",
                          len - json_len, bin_off - json_len);
        goto done;
    }
    /* (copies of unaligned binary data are bounded by the body itself) */
    if (r->doc.used + json_floats * sizeof(float) > budget) {
        rc = df_error_set(err, DF_ELIMIT,
                          "the JSON header of %zu bytes needs more than %zu bytes to read "
                          "(%d times its size): send \"data\" as flat arrays, or as binary data",
                          json_len, budget, KS_PARSE_FACTOR);
        goto done;
    }
    r->read_bytes = r->doc.used + json_floats * sizeof(float);
    if (arena_reserve(r, arena_need + 16)) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nin; i++) {
        df_ks_input_t *x = &r->inputs[i];
        if (x->binary) {
            if (((uintptr_t)x->data & 3) != 0) {
                float *dst = arena_take(r, (size_t)x->numel);
                memcpy(dst, x->data, (size_t)x->numel * 4);
                x->data = dst;
            }
            for (int64_t k = 0; k < x->numel; k++)
                if (!isfinite(x->data[k])) {
                    rc = df_error_set(err, DF_EINVAL, "input '%s': element %lld is not finite",
                                      x->name, (long long)k);
                    goto done;
                }
        } else {
            float *dst = arena_take(r, (size_t)x->numel);
            int64_t k = 0;
            if (flatten(&r->doc, jv_get(jv_at(inputs, i), "data"), dst, &k, x->name, err)) {
                rc = err ? err->code : DF_EINVAL;
                goto done;
            }
            x->data = dst;
        }
    }
    r->n_inputs = (int)nin;
    /* outputs */
    const jv_t *outputs = jv_get(root, "outputs");
    if (outputs && !jv_is_arr(outputs)) {
        rc = df_error_set(err, DF_EINVAL, "\"outputs\" must be an array");
        goto done;
    }
    size_t nout = outputs ? jv_size(outputs) : 0;
    if (nout > DF_KS_MAX_TENSORS) {
        rc = df_error_set(err, DF_ELIMIT, "%zu outputs requested (max %d)", nout, DF_KS_MAX_TENSORS);
        goto done;
    }
    for (size_t i = 0; i < nout; i++) {
        const jv_t *o = jv_at(outputs, i);
        df_ks_output_req_t *y = &r->outputs[i];
        char what[96];
        where(what, "outputs[", i);
        if (!jv_is_obj(o)) {
            rc = df_error_set(err, DF_EINVAL, "%s must be an object", what);
            goto done;
        }
        if ((rc = copy_name(y->name, jv_get(o, "name"), what, err))) goto done;
        y->binary = -1;
        const jv_t *op = jv_get(o, "parameters");
        if (op) {
            if (!jv_is_obj(op)) {
                rc = df_error_set(err, DF_EINVAL, "output '%s': \"parameters\" must be an object", y->name);
                goto done;
            }
            if ((rc = parse_bool(op, "binary_data", &y->binary, y->name, err))) goto done;
            if ((rc = parse_encoding(op, &y->encoding, y->name, err))) goto done;
        }
    }
    r->n_outputs = (int)nout;
    cache_store(r, body, len, json_len, lim, boff);
done:
    json_decref(jroot);
    if (r->doc.cap > KS_DOC_KEEP || r->doc.scap > KS_DOC_KEEP || r->doc.str_cap > 16 * KS_DOC_KEEP ||
        r->doc.num_cap > 2 * KS_DOC_KEEP)
        df_kj_doc_free(&r->doc); /* a large request's nodes are not kept */
    if (rc && err && err->code == 0) err->code = rc;
    return rc;
}

/* ------------------------------------------------------------- writing */

void df_ks_buf_reset(df_ks_buf_t *b) { b->len = 0; b->oom = 0; if (b->data) b->data[0] = 0; }

void df_ks_buf_free(df_ks_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int reserve(df_ks_buf_t *b, size_t extra)
{
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->len + extra + 1) nc *= 2;
    char *nd = realloc(b->data, nc);
    if (!nd) { b->oom = 1; return -1; }
    b->data = nd;
    b->cap = nc;
    return 0;
}

void df_ks_buf_append(df_ks_buf_t *b, const char *s, size_t n)
{
    if (reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void df_ks_buf_printf(df_ks_buf_t *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2; tries++) {
        if (reserve(b, 64)) return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        if (reserve(b, (size_t)n + 1)) return;
    }
}

void df_ks_buf_json_string(df_ks_buf_t *b, const char *s)
{
    df_ks_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            df_ks_buf_append(b, e, 2);
        } else if (*p < 0x20) {
            df_ks_buf_printf(b, "\\u%04x", *p);
        } else {
            df_ks_buf_append(b, (const char *)p, 1);
        }
    }
    df_ks_buf_append(b, "\"", 1);
}

/* Write one float32 as a JSON number with 9 significant digits (enough
 * for an exact float32 round trip), without printf: the value is scaled in
 * double precision, whose error (< 1e-15 relative) is far below half a
 * float32 ulp (>= 3e-8 relative), so the 9-digit text still reads back to
 * the same float. Returns the length (<= 16; writes up to 20 bytes).
 * Costs (session 3 profile: this was 24 % of the HTTP thread's time on a
 * 360-float answer) are kept off the serial path: the binary exponent is
 * read from the float's bits (frexp only for subnormals), the decimal one
 * is an integer multiply-shift, the scale is one table multiply (a divide
 * only for values >= 1e9), and the digits come two at a time from a
 * table in independent chains instead of nine dependent divisions. */
static const double k_p10[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14,
    1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29,
    1e30, 1e31, 1e32, 1e33, 1e34, 1e35, 1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44,
    1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54, 1e55, 1e56, 1e57, 1e58, 1e59,
    1e60};

/* x * 10^k in double, k in [-60, 60] (float32 needs [-31, 54]) */
static inline double scale10(double x, int k)
{
    return k >= 0 ? x * k_p10[k] : x / k_p10[-k];
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fmt_float builds digit strings in little-endian words"
#endif
static const char k_dig2[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";
static inline uint16_t dig2(uint32_t i) /* "00".."99" as two chars */
{
    uint16_t t;
    memcpy(&t, k_dig2 + 2 * i, 2);
    return t;
}

static inline __attribute__((always_inline)) int fmt_float(char *out, float xf)
{
    uint32_t bits;
    memcpy(&bits, &xf, 4);
    char *p = out;
    uint32_t be = (bits >> 23) & 0xFF;
    if ((bits & 0x7FFFFFFFu) == 0) { /* +0 and -0 */
        *p++ = '0';
        return 1;
    }
    if (be == 0xFF) { /* not valid JSON; never produced from validated data */
        memcpy(out, "null", 4);
        return 4;
    }
    if (bits >> 31) *p++ = '-';
    double x = fabs((double)xf);
    /* x in [2^(e2-1), 2^e2) */
    int e2;
    if (be) e2 = (int)be - 126;
    else (void)frexp(x, &e2);
    /* floor((e2 - 1) log10 2) (78913 / 2^18 ~ log10 2; exact for |n| < 1650,
     * arithmetic shift floors negatives); floor(log10 x) is est or est + 1 */
    int e10 = ((e2 - 1) * 78913) >> 18;
    double sc = scale10(x, 8 - e10); /* 9 digits left of the point */
    if (sc >= 999999999.5) {        /* est was one low: rescale from x */
        e10++;
        sc = scale10(x, 8 - e10);
    }
    uint32_t m = (uint32_t)(sc + 0.5);
    if (m >= 1000000000u) { m = (m + 5) / 10; e10++; }
    if (m < 100000000u) { m *= 10; e10--; } /* rounding at a power of 10 */
    /* nine digits: the first, then eight as the chars of one 64-bit word
     * (little-endian: d1 in the low byte) built from four table pairs in
     * independent chains. They are only stored, never stored and read back:
     * building them in a char array and then copying it cost a failed
     * store-to-load forwarding on every number (30 % of this function's
     * samples in the session 3 profile). */
    uint32_t hi = m / 10000u, lo = m % 10000u; /* 5 + 4 digits */
    char d0 = (char)('0' + hi / 10000u);
    uint32_t h4 = hi % 10000u;
    uint64_t v = (uint64_t)dig2(h4 / 100u) | (uint64_t)dig2(h4 % 100u) << 16 |
                 (uint64_t)dig2(lo / 100u) << 32 | (uint64_t)dig2(lo % 100u) << 48;
    /* trailing zero digits: the last digit is the high byte */
    uint64_t z = v ^ 0x3030303030303030ull;
    int nd = z ? 9 - (__builtin_clzll(z) >> 3) : 1;
    if (e10 >= 0 && e10 < 9) { /* ddd.ddd */
        p[0] = d0;
        memcpy(p + 1, &v, 8);
        if (nd > e10 + 1) {
            uint64_t f = v >> (8 * e10); /* digits e10+1.. */
            p[e10 + 1] = '.';
            memcpy(p + e10 + 2, &f, 8);
            p += nd + 1;
        } else {
            p += e10 + 1;
        }
    } else if (e10 < 0 && e10 >= -5) { /* 0.000ddd */
        memcpy(p, "0.00000", 8);
        p += 1 - e10;
        p[0] = d0;
        memcpy(p + 1, &v, 8);
        p += nd;
    } else { /* d.ddde-XX */
        *p++ = d0;
        if (nd > 1) {
            *p++ = '.';
            memcpy(p, &v, 8);
            p += nd - 1;
        }
        *p++ = 'e';
        if (e10 < 0) { *p++ = '-'; e10 = -e10; }
        if (e10 >= 10) *p++ = (char)('0' + e10 / 10);
        *p++ = (char)('0' + e10 % 10);
    }
    return (int)(p - out);
}

char *df_ks_fmt_i64(char *p, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *p++ = '-';
    while (n) *p++ = tmp[--n];
    return p;
}

void df_ks_buf_i64(df_ks_buf_t *b, int64_t v)
{
    char out[24];
    df_ks_buf_append(b, out, (size_t)(df_ks_fmt_i64(out, v) - out));
}

void df_ks_buf_str(df_ks_buf_t *b, const char *s) { df_ks_buf_append(b, s, strlen(s)); }

/* df_ks_buf_floats: the same text as fmt_float, eight numbers at a time.
 *
 * With AVX-512 (F, DQ, BW, VL, CD) a chunk of eight floats goes through
 * two stages. The arithmetic stage is fmt_float's, lane for lane, in 64-bit
 * lanes: e2 from the exponent of (double)|x| (for a subnormal that is what
 * frexp gives, so subnormals need no special case), the same e10 estimate,
 * the same scale (a multiply by 10^k for k >= 0, a divide by 10^-k for
 * k < 0: vmulpd and vdivpd round exactly as the scalar code's double
 * operations), the same >= 999999999.5 rescale, m = (uint32)(sc + 0.5) and
 * its two adjustments (which, by an exhaustive count, no float32 needs;
 * they are kept as fmt_float has them); then the nine digits (divisions by constants as
 * multiply-shifts, the last split in 16-bit lanes) and the count of
 * trailing zero digits. It leaves per lane a 16-byte source (digits 1-8,
 * digit 0, '.', '0', '-'), the trailing-zero count and a row of k_form,
 * which is all that the text depends on besides the digits: the row is
 * e10 and the sign (or "zero"), and holds the byte shuffle that lays the
 * source out in that form, the length for each trailing-zero count, and
 * the suffix (the exponent text, then a comma). The stitching stage,
 * scalar, writes each number as one pshufb of its source stored as 16
 * bytes, then the suffix as 8 bytes, and advances by the two lengths: no
 * branch depends on the data (fmt_float's sign and form branches
 * mispredict on mixed data). Zeros are lanes with x = 1 and the zero row;
 * a chunk holding an inf or NaN is written by fmt_float. Every number is
 * followed by a comma and the last one is taken back.
 *
 * The vector ports are the bottleneck, which decides the details: the
 * per-lane results go through memory, not lane extracts; the constants
 * are read through an opaque pointer (k_x8); everything that depends only
 * on e10 and the sign is a table row rather than vector arithmetic. And
 * the loop is software-pipelined: chunk i + 1's arithmetic is issued
 * before chunk i is stitched, as loads right behind the 64-byte stores
 * they read were measured to stall (stitching right after computing cost
 * 30 % more). On 360-float arrays (thread CPU time, best of 31) this is
 * 3.4-3.7x the speed of the fmt_float loop on vertex-like data ([-10, 10],
 * exact values mixed in), 2.3-2.8x on random bit patterns (which need the
 * divide and the gather).
 * Byte identity with fmt_float is checked by
 * tests/unit/proto/test_kserve.c (and was checked once over all 2^32 bit
 * patterns). Without AVX-512 the loop over fmt_float below is all there
 * is. */
#ifdef KS_FLOATS_X8
/* One k_form row: rows 2 * (e10 + 48) + (x < 0) for e10 in [-48, 47]
 * (float32 needs [-45, 38]), then KS_ZERO_ROW. */
typedef struct {
    uint8_t shuf[16]; /* text byte j = source byte shuf[j] (0x80: a zero byte) */
    uint8_t len[16];  /* bytes before the suffix, by trailing zero digits (0..8) */
    uint64_t suf;     /* exponent text and comma; its length in the top byte */
    uint64_t pad[3];  /* 64 bytes: the row offset is a shift */
} ks_form_t;
_Static_assert(sizeof(ks_form_t) == 64, "chunk_x8 computes row offsets as e10 << 7");
#define KS_ZERO_ROW 192
static ks_form_t k_form[KS_ZERO_ROW + 1] __attribute__((aligned(64)));
static pthread_once_t k_form_once = PTHREAD_ONCE_INIT;

/* the rows, from fmt_float's three forms */
static void k_form_init(void)
{
    enum { DIG0 = 8, DOT = 9, ZERO = 10, MINUS = 11 }; /* source bytes; digit d >= 1 is d - 1 */
    for (int r = 0; r <= KS_ZERO_ROW; r++) {
        ks_form_t *f = &k_form[r];
        int e10 = r / 2 - 48, neg = r & 1;
        uint8_t t[16];
        memset(t, 0x80, 16);
        int n = 0, ip, extra = 0; /* digits before the point; extra = -e10 for 0.000ddd */
        if (neg) t[n++] = MINUS;
        char suf[8] = ",", *q = suf;
        if (r == KS_ZERO_ROW) {
            t[0] = ZERO;
            ip = 1;
        } else if (e10 >= 0 && e10 < 9) { /* ddd.ddd */
            for (int d = 0; d <= 8; d++) {
                if (d == e10 + 1) t[n++] = DOT;
                t[n++] = (uint8_t)(d ? d - 1 : DIG0);
            }
            ip = e10 + 1;
        } else if (e10 < 0 && e10 >= -5) { /* 0.000ddd */
            t[n++] = ZERO;
            t[n++] = DOT;
            for (int z = 1; z < -e10; z++) t[n++] = ZERO;
            for (int d = 0; d <= 8; d++) t[n++] = (uint8_t)(d ? d - 1 : DIG0);
            ip = 0;
            extra = -e10;
        } else { /* d.ddde-XX */
            t[n++] = DIG0;
            t[n++] = DOT;
            for (int d = 1; d <= 8; d++) t[n++] = (uint8_t)(d - 1);
            ip = 1;
            *q++ = 'e';
            int a = e10;
            if (a < 0) { *q++ = '-'; a = -a; }
            if (a >= 10) *q++ = (char)('0' + a / 10);
            *q++ = (char)('0' + a % 10);
            *q++ = ',';
            *q = 0;
        }
        memcpy(f->shuf, t, 16);
        for (int z = 0; z < 16; z++) { /* nd = 9 - z significant digits */
            int nd = z <= 8 ? 9 - z : 1;
            f->len[z] = (uint8_t)(neg + (nd > ip ? nd + 1 + extra : ip));
        }
        size_t sl = strlen(suf);
        f->suf = (uint64_t)sl << 56;
        memcpy(&f->suf, suf, sl);
    }
}

/* The integer constants of chunk_x8, read through a pointer the compiler
 * cannot see into: given the values, GCC rebuilds each vector constant
 * from an immediate (mov + vpbroadcast, on the arithmetic's ports) in
 * every chunk; from memory each is a broadcast load or an embedded {1to8}
 * operand. 16-bit constants are two halves of a 32-bit one. */
static const struct ks_k {
    int64_t one, eight, bias, log2, five, div10, e9, e8, ten, e4, div1e4, ascii, d0tail, row0,
        rowneg, rowzero, fifteen;
    int32_t expo, mag, w100, w100m, w10, w10m;
} k_x8 = {
    .one = 1, .eight = 8, .bias = 1023, .log2 = 78913, .five = 5, .div10 = 0xCCCCCCCD,
    .e9 = 1000000000, .e8 = 100000000, .ten = 10, .e4 = 10000, .div1e4 = 3518437209,
    .ascii = 0x3030303030303030, .d0tail = 0x2D302E30,
    .row0 = 96 * sizeof(ks_form_t), .rowneg = sizeof(ks_form_t),
    .rowzero = KS_ZERO_ROW * sizeof(ks_form_t), .fifteen = 15,
    .expo = 0x7F800000, .mag = 0x7FFFFFFF, .w100 = 5243 * 0x10001, .w100m = 100 * 0x10001,
    .w10 = 6554 * 0x10001, .w10m = 10 * 0x10001};

/* scale10 in eight lanes: x * 10^k for k >= 0, x / 10^-k for k < 0; the
 * power by a two-register permute when every |k| <= 15 (vertex data), else
 * by a gather (several more uops on the busy ports) */
static inline __m512d scale10_x8(__m512d x, __m512i k, const struct ks_k *K)
{
    __mmask8 neg = _mm512_cmplt_epi64_mask(k, _mm512_setzero_si512());
    __m512i i = _mm512_abs_epi64(k);
    __m512d p;
    if (_mm512_cmpgt_epu64_mask(i, _mm512_set1_epi64(K->fifteen)))
        p = _mm512_i64gather_pd(i, k_p10, 8);
    else
        p = _mm512_permutex2var_pd(_mm512_loadu_pd(k_p10), i, _mm512_loadu_pd(k_p10 + 8));
    __m512d r = _mm512_mul_pd(x, p);
    if (neg) r = _mm512_mask_div_pd(r, neg, x, p);
    return r;
}

/* floor(a / d) for a < 2^32 as (a * mul) >> sh, in 64-bit lanes */
#define KS_DIV(a, mul, sh) _mm512_srli_epi64(_mm512_mul_epu32((a), _mm512_set1_epi64(mul)), (sh))

typedef struct {
    __m128i src[8];   /* the source bytes of each lane (see k_form_init) */
    uint64_t row[8];  /* byte offset of the k_form row */
    uint64_t tz[8];   /* trailing zero digits among digits 1-8 */
} ks_chunk_t;

/* The arithmetic stage for x[0..cnt-1] (cnt in 1..8). Returns 0, or -1
 * when a lane is inf or NaN. */
static inline int chunk_x8(ks_chunk_t *c, const float *x, unsigned cnt)
{
    const struct ks_k *K = &k_x8;
    __asm__("" : "+r"(K)); /* see k_x8 */
    const __m512i one = _mm512_set1_epi64(K->one);
    __mmask8 act = (__mmask8)((1u << cnt) - 1);
    __m256i bits = _mm256_castps_si256(_mm256_maskz_loadu_ps(act, x));
    const __m256i expo = _mm256_set1_epi32(K->expo);
    if (_mm256_cmpeq_epi32_mask(_mm256_and_si256(bits, expo), expo)) return -1;
    __mmask8 zero = _mm256_testn_epi32_mask(bits, _mm256_set1_epi32(K->mag));
    __mmask8 neg = _mm256_movepi32_mask(bits) & (__mmask8)~zero;
    __m512d xd = _mm512_abs_pd(_mm512_cvtps_pd(_mm256_castsi256_ps(bits)));
    xd = _mm512_mask_mov_pd(xd, zero, _mm512_set1_pd(1.0));
    /* x in [2^(e2-1), 2^e2); e10 = ((e2 - 1) * 78913) >> 18 */
    __m512i e2m1 = _mm512_sub_epi64(_mm512_srli_epi64(_mm512_castpd_si512(xd), 52),
                                    _mm512_set1_epi64(K->bias));
    __m512i e10 = _mm512_srai_epi64(_mm512_mul_epi32(e2m1, _mm512_set1_epi64(K->log2)), 18);
    const __m512i eight = _mm512_set1_epi64(K->eight);
    __m512d sc = scale10_x8(xd, _mm512_sub_epi64(eight, e10), K);
    __mmask8 re = _mm512_cmp_pd_mask(sc, _mm512_set1_pd(999999999.5), _CMP_GE_OQ);
    if (re) {
        e10 = _mm512_mask_add_epi64(e10, re, e10, one);
        sc = _mm512_mask_mov_pd(sc, re, scale10_x8(xd, _mm512_sub_epi64(eight, e10), K));
    }
    __m512i m = _mm512_cvttpd_epu64(_mm512_add_pd(sc, _mm512_set1_pd(0.5)));
    __mmask8 big = _mm512_cmpge_epu64_mask(m, _mm512_set1_epi64(K->e9));
    if (big) { /* m = (m + 5) / 10 */
        __m512i m5 = _mm512_add_epi64(m, _mm512_set1_epi64(K->five));
        m = _mm512_mask_mov_epi64(m, big, KS_DIV(m5, K->div10, 35));
        e10 = _mm512_mask_add_epi64(e10, big, e10, one);
    }
    __mmask8 small = _mm512_cmplt_epu64_mask(m, _mm512_set1_epi64(K->e8));
    if (small) {
        m = _mm512_mask_mullo_epi64(m, small, m, _mm512_set1_epi64(K->ten));
        e10 = _mm512_mask_sub_epi64(e10, small, e10, one);
    }
    /* digits: d0, then 4 + 4 (hi4, lo: 32-bit lanes), each 2 + 2 (16-bit
     * lanes), each 1 + 1 (bytes); digit 1 ends in the low byte */
    const __m512i k1e4 = _mm512_set1_epi64(K->e4);
    __m512i hi = KS_DIV(m, K->div1e4, 45); /* m / 10000 */
    __m512i lo = _mm512_sub_epi64(m, _mm512_mul_epu32(hi, k1e4));
    __m512i d0 = KS_DIV(hi, K->div1e4, 45);
    __m512i hi4 = _mm512_sub_epi64(hi, _mm512_mul_epu32(d0, k1e4));
    __m512i t = _mm512_or_si512(hi4, _mm512_slli_epi64(lo, 32));
    __m512i q = _mm512_srli_epi16(_mm512_mulhi_epu16(t, _mm512_set1_epi32(K->w100)), 3); /* t / 100 */
    __m512i r = _mm512_sub_epi16(t, _mm512_mullo_epi16(q, _mm512_set1_epi32(K->w100m)));
    __m512i u = _mm512_or_si512(q, _mm512_slli_epi32(r, 16));
    __m512i q2 = _mm512_mulhi_epu16(u, _mm512_set1_epi32(K->w10)); /* u / 10 */
    __m512i r2 = _mm512_sub_epi16(u, _mm512_mullo_epi16(q2, _mm512_set1_epi32(K->w10m)));
    __m512i w = _mm512_or_si512(q2, _mm512_slli_epi16(r2, 8)); /* digits 1-8, binary */
    /* trailing zero digits: the last digit is the high byte (8: all zero) */
    _mm512_store_si512((void *)c->tz, _mm512_srli_epi64(_mm512_lzcnt_epi64(w), 3));
    __m512i v = _mm512_or_si512(w, _mm512_set1_epi64(K->ascii));
    __m512i h = _mm512_add_epi64(d0, _mm512_set1_epi64(K->d0tail)); /* digit 0 '.' '0' '-' */
    _mm512_store_si512((void *)&c->src[0],
                       _mm512_permutex2var_epi64(v, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), h));
    _mm512_store_si512((void *)&c->src[4],
                       _mm512_permutex2var_epi64(v, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), h));
    /* row 2 * (e10 + 48) + (x < 0) or the zero row, as a byte offset */
    __m512i row = _mm512_add_epi64(_mm512_slli_epi64(e10, 7), _mm512_set1_epi64(K->row0));
    row = _mm512_mask_add_epi64(row, neg, row, _mm512_set1_epi64(K->rowneg));
    row = _mm512_mask_mov_epi64(row, zero, _mm512_set1_epi64(K->rowzero));
    _mm512_store_si512((void *)c->row, row);
    return 0;
}
#endif

void df_ks_buf_floats(df_ks_buf_t *b, const float *x, size_t n)
{
    /* one reserve for all: each number takes <= 17 bytes with its comma,
     * and fmt_float may write 20 past its start (the chunk path 16 at the
     * start of a number, 8 at its suffix) */
    if (n > (SIZE_MAX - 64) / 18 || reserve(b, n * 18 + 24)) {
        b->oom = 1;
        return;
    }
    char *p = b->data + b->len;
#ifdef KS_FLOATS_X8
    pthread_once(&k_form_once, k_form_init);
    /* chunk k's results are in c[k & 1], its return value in special[k & 1] */
    ks_chunk_t c[2] __attribute__((aligned(64)));
    int special[2] = {0, 0};
    if (n) special[0] = chunk_x8(&c[0], x, n < 8 ? (unsigned)n : 8);
    for (size_t i = 0, k = 0; i < n; i += 8, k ^= 1) {
        if (n - i > 8) { /* the next chunk's arithmetic first */
            size_t r = n - i - 8;
            special[k ^ 1] = chunk_x8(&c[k ^ 1], x + i + 8, r < 8 ? (unsigned)r : 8);
        }
        unsigned cnt = n - i < 8 ? (unsigned)(n - i) : 8;
        if (special[k]) {
            for (unsigned j = 0; j < cnt; j++) {
                p += fmt_float(p, x[i + j]);
                *p++ = ',';
            }
            continue;
        }
        /* read c[k] from memory: lane extracts would compete with the
         * arithmetic for the vector ports */
        __asm__ volatile("" : : "r"(c) : "memory");
        const ks_chunk_t *ck = &c[k];
        for (unsigned j = 0; j < cnt; j++) {
            const ks_form_t *f = (const ks_form_t *)((const char *)k_form + ck->row[j]);
            __m128i s = _mm_shuffle_epi8(_mm_load_si128(&ck->src[j]),
                                         _mm_load_si128((const __m128i *)f->shuf));
            _mm_storeu_si128((__m128i *)p, s);
            p += f->len[ck->tz[j]];
            memcpy(p, &f->suf, 8);
            p += f->suf >> 56;
        }
    }
    if (n) p--; /* the last comma */
#else
    p += df__ks_fmt_floats_scalar(p, x, n);
#endif
    b->len = (size_t)(p - b->data);
    b->data[b->len] = 0;
}

size_t df__ks_fmt_floats_scalar(char *out, const float *x, size_t n)
{
    char *p = out;
    for (size_t i = 0; i < n; i++) {
        if (i) *p++ = ',';
        p += fmt_float(p, x[i]);
    }
    *p = 0;
    return (size_t)(p - out);
}

static void put_floats(df_ks_buf_t *b, const float *x, size_t n) { df_ks_buf_floats(b, x, n); }

int df_kserve_write_response(df_ks_buf_t *b, const char *model_name, int64_t version,
                             const char *id, const df_ks_output_t *outs, int n,
                             const char *params_json)
{
    df_ks_buf_append(b, "{\"model_name\":", 14);
    df_ks_buf_json_string(b, model_name);
    df_ks_buf_append(b, ",\"model_version\":\"", 18);
    df_ks_buf_i64(b, version);
    df_ks_buf_append(b, "\"", 1);
    if (id && id[0]) {
        df_ks_buf_append(b, ",\"id\":", 6);
        df_ks_buf_json_string(b, id);
    }
    if (params_json && params_json[0]) {
        df_ks_buf_append(b, ",\"parameters\":{", 15);
        df_ks_buf_str(b, params_json);
        df_ks_buf_append(b, "}", 1);
    }
    df_ks_buf_append(b, ",\"outputs\":[", 12);
    for (int i = 0; i < n; i++) {
        const df_ks_output_t *o = &outs[i];
        size_t numel = 1;
        for (int k = 0; k < o->ndim; k++) numel *= (size_t)o->shape[k];
        df_ks_buf_append(b, i ? ",{\"name\":" : "{\"name\":", i ? 9 : 8);
        df_ks_buf_json_string(b, o->name);
        df_ks_buf_append(b, ",\"datatype\":\"", 13);
        df_ks_buf_str(b, df_encoding_kserve(o->encoding));
        df_ks_buf_append(b, "\",\"shape\":[", 11);
        for (int k = 0; k < o->ndim; k++) {
            if (k) df_ks_buf_append(b, ",", 1);
            df_ks_buf_i64(b, o->shape[k]);
        }
        df_ks_buf_append(b, "],\"parameters\":{\"encoding\":\"", 28);
        df_ks_buf_str(b, df_encoding_name(o->encoding));
        df_ks_buf_append(b, "\"", 1);
        if (o->encoding == DF_ENC_I16 && o->quant) df_ks_buf_printf(b, ",\"clamped\":%zu", o->clamped);
        if (o->binary) {
            df_ks_buf_append(b, ",\"binary_data_size\":", 20);
            df_ks_buf_i64(b, (int64_t)o->nbytes);
        }
        df_ks_buf_append(b, "}", 1);
        /* KServe's $parameters hold scalars: the int16 box per component goes
         * to the output's "deformd" extension object */
        if (o->encoding == DF_ENC_I16 && o->quant) {
            df_ks_buf_append(b, ",\"deformd\":{\"scale\":[", 21);
            put_floats(b, o->quant->scale, (size_t)o->quant->comps);
            df_ks_buf_append(b, "],\"offset\":[", 12);
            put_floats(b, o->quant->offset, (size_t)o->quant->comps);
            df_ks_buf_append(b, "]}", 2);
        }
        if (o->binary) {
            df_ks_buf_append(b, "}", 1);
            continue;
        }
        df_ks_buf_append(b, ",\"data\":[", 9);
        if (o->encoding == DF_ENC_I16) {
            const int16_t *q = o->bytes;
            for (size_t k = 0; k < numel; k++) {
                if (reserve(b, 16)) break;
                b->len += (size_t)snprintf(b->data + b->len, 16, k ? ",%d" : "%d", q[k]);
            }
        } else if (o->encoding == DF_ENC_F16) {
            const uint16_t *h = o->bytes;
            for (size_t k = 0; k < numel; k++) {
                float v = df_f16_to_f32(h[k]);
                if (reserve(b, 24)) break;
                if (k) b->data[b->len++] = ',';
                b->len += (size_t)fmt_float(b->data + b->len, v);
            }
            if (b->data) b->data[b->len] = 0;
        } else {
            put_floats(b, o->f32, numel);
        }
        df_ks_buf_append(b, "]}", 2);
    }
    df_ks_buf_append(b, "]}", 2);
    return b->oom ? DF_ENOMEM : DF_OK;
}

int df_kserve_write_error(df_ks_buf_t *b, const char *msg)
{
    df_ks_buf_append(b, "{\"error\":", 9);
    df_ks_buf_json_string(b, msg);
    df_ks_buf_append(b, "}", 1);
    return b->oom ? DF_ENOMEM : DF_OK;
}

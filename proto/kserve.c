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

void df_ks_limits_default(df_ks_limits_t *l)
{
    l->max_depth = 16;
    l->max_elements = 16 * 1024 * 1024;
}

#define KS_DOC_KEEP 65536 /* nodes (16 bytes each) kept between requests */

void df_ks_request_free(df_ks_request_t *r)
{
    df_kj_doc_free(&r->doc);
    free(r->arena);
    r->arena = NULL;
    r->arena_cap = r->arena_used = 0;
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
static int64_t count_data(const jv_t *v, int depth, int max_depth, const char *name,
                          df_error_t *err)
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
    int64_t n = 0;
    size_t i;
    const jv_t *e;
    for (i = 0; (e = jv_at(v, i)); i++) {
        int64_t c = count_data(e, depth + 1, max_depth, name, err);
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
    size_t i;
    const jv_t *e;
    for (i = 0; (e = jv_at(v, i)); i++) if (!nested_ok(e, shape + 1, ndim - 1)) return 0;
    return 1;
}

static int flatten(const jv_t *v, float *out, int64_t *k, const char *name, df_error_t *err)
{
    if (jv_is_num(v)) {
        double d = jv_num(v);
        if (!isfinite(d) || fabs(d) > FLT_MAX) {
            df_error_set(err, DF_EINVAL, "input '%s': element %lld (%g) is outside float32", name,
                         (long long)*k, d);
            return -1;
        }
        out[(*k)++] = (float)d;
        return 0;
    }
    size_t i;
    const jv_t *e;
    for (i = 0; (e = jv_at(v, i)); i++) if (flatten(e, out, k, name, err)) return -1;
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
    df_ks_request_t req; /* arena NULL, data NULL */
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
        memcpy(r, &e->req, sizeof *r);
        r->arena = keep;
        r->arena_cap = keep_cap;
        r->doc = keep_doc;
        r->arena_used = 0;
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
    memset(r, 0, sizeof *r);
    r->arena = keep;
    r->arena_cap = keep_cap;
    r->doc = keep_doc;
    r->binary_output = 0;
    if (json_len > len)
        return df_error_set(err, DF_EINVAL,
                            "Inference-Header-Content-Length %zu is larger than the body (%zu bytes)",
                            json_len, len);
    if (json_len == 0) return df_error_set(err, DF_EINVAL, "empty request body");
    /* the subset reader first; jansson (its errors, its whole grammar)
     * for anything it declines */
    json_t *jroot = NULL;
    int krc = ks_jansson_only ? DF_KJ_FALLBACK : df_kj_parse(&r->doc, body, json_len);
    if (krc == DF_KJ_FALLBACK) {
        ks_fallbacks++;
        json_error_t je;
        jroot = json_loadb(body, json_len, JSON_REJECT_DUPLICATES, &je);
        if (!jroot)
            return df_error_set(err, DF_EINVAL, "invalid JSON at line %d column %d: %s", je.line,
                                je.column, je.text);
        krc = df_kj_from_jansson(&r->doc, jroot);
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
        if (!jv_is_str(id) || strlen(jv_str(id)) >= sizeof r->id) {
            rc = df_error_set(err, DF_EINVAL, "\"id\" must be a string of at most %zu bytes",
                              sizeof r->id - 1);
            goto done;
        }
        strcpy(r->id, jv_str(id));
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
    size_t arena_need = 0, bin_off = json_len, boff[DF_KS_MAX_TENSORS] = {0};
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
            const jv_t *d = jv_at(shape, (size_t)k);
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
            int64_t c = count_data(data, 1, lim->max_depth, x->name, err);
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
        }
    }
    if (bin_off != len) {
        rc = df_error_set(err, DF_EINVAL,
                          "body has %zu bytes after the JSON header but the inputs' binary_data_size "
                          "add up to %zu",
                          len - json_len, bin_off - json_len);
        goto done;
    }
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
            if (flatten(jv_get(jv_at(inputs, i), "data"), dst, &k, x->name, err)) {
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
    if (r->doc.cap > KS_DOC_KEEP || r->doc.scap > KS_DOC_KEEP || r->doc.str_cap > 16 * KS_DOC_KEEP)
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

void df_ks_buf_floats(df_ks_buf_t *b, const float *x, size_t n)
{
    /* one reserve for all: each number takes <= 17 bytes with its comma,
     * and fmt_float may write 20 past its start */
    if (n > (SIZE_MAX - 64) / 18 || reserve(b, n * 18 + 24)) {
        b->oom = 1;
        return;
    }
    char *p = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        if (i) *p++ = ',';
        p += fmt_float(p, x[i]);
    }
    b->len = (size_t)(p - b->data);
    b->data[b->len] = 0;
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
        if (o->encoding == DF_ENC_I16 && o->quant) {
            df_ks_buf_append(b, ",\"scale\":[", 10);
            put_floats(b, o->quant->scale, (size_t)o->quant->comps);
            df_ks_buf_append(b, "],\"offset\":[", 12);
            put_floats(b, o->quant->offset, (size_t)o->quant->comps);
            df_ks_buf_printf(b, "],\"clamped\":%zu", o->clamped);
        }
        if (o->binary) {
            df_ks_buf_append(b, ",\"binary_data_size\":", 20);
            df_ks_buf_i64(b, (int64_t)o->nbytes);
            df_ks_buf_append(b, "}}", 2);
            continue;
        }
        df_ks_buf_append(b, "},\"data\":[", 10);
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

/* kjson.c — strict subset JSON reader with jansson fallback (see kjson.h).
 *
 * Recursive descent over the bytes; a value is pushed on d->stack when it
 * is complete; when a container closes, its children (the top of the
 * stack) move to d->nodes as one contiguous run and the container itself
 * is pushed. On the stack a container holds the absolute index of its
 * first child; when it moves into d->nodes that becomes an offset from its
 * own slot. Numbers: integers of <= 18 digits exactly; reals of <= 15
 * significant digits with a decimal exponent in [-22, 22] by one IEEE
 * multiply or divide of exact operands (Clinger's fast path: correctly
 * rounded, so equal to strtod); other reals through strtod_l in the "C"
 * locale, which is what jansson calls (jansson swaps the decimal point for
 * the locale's instead). Anything this file does not handle exactly like
 * jansson is DF_KJ_FALLBACK.
 */
#include "kjson.h"
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p, *end;
    df_kj_doc_t *d;
    int depth;
} pz_t;

#define FB DF_KJ_FALLBACK

static int grow(void **buf, size_t *cap, size_t need, size_t elt)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *nb = realloc(*buf, nc * elt);
    if (!nb) return DF_KJ_NOMEM;
    *buf = nb;
    *cap = nc;
    return 0;
}

static inline int push(df_kj_doc_t *d, const df_kj_node_t *v)
{
    if (d->sn == d->scap && grow((void **)&d->stack, &d->scap, d->sn + 1, sizeof *d->stack))
        return DF_KJ_NOMEM;
    d->stack[d->sn++] = *v;
    return 0;
}

static inline int is_container(const df_kj_node_t *v)
{
    return v->type == DF_KJ_ARR || v->type == DF_KJ_OBJ;
}

/* Move d->stack[base..sn) into d->nodes; push the container. */
static int close_container(df_kj_doc_t *d, size_t base, int type)
{
    size_t m = d->sn - base, at = d->n;
    if (grow((void **)&d->nodes, &d->cap, at + m + 1, sizeof *d->nodes)) return DF_KJ_NOMEM;
    for (size_t j = 0; j < m; j++) {
        df_kj_node_t c = d->stack[base + j];
        if (is_container(&c)) c.u.rel -= (int64_t)(at + j);
        d->nodes[at + j] = c;
    }
    d->n += m;
    d->sn = base;
    df_kj_node_t v = {0};
    v.type = (uint8_t)type;
    v.n = (uint32_t)(type == DF_KJ_OBJ ? m / 2 : m);
    v.u.rel = (int64_t)at;
    return push(d, &v);
}

/* The last value on the stack becomes the root. */
static int finish(df_kj_doc_t *d)
{
    if (d->sn != 1 || grow((void **)&d->nodes, &d->cap, d->n + 1, sizeof *d->nodes))
        return d->sn != 1 ? FB : DF_KJ_NOMEM;
    df_kj_node_t c = d->stack[0];
    if (is_container(&c)) c.u.rel -= (int64_t)d->n;
    d->nodes[d->n] = c;
    d->root = &d->nodes[d->n++];
    d->sn = 0;
    return DF_KJ_OK;
}

static inline void skip_ws(pz_t *z)
{
    while (z->p < z->end && (*z->p == ' ' || *z->p == '\n' || *z->p == '\r' || *z->p == '\t'))
        z->p++;
}

/* z->p at the opening quote; only printable ASCII without escapes. */
static int parse_string(pz_t *z, df_kj_node_t *out)
{
    const char *s = ++z->p;
    while (z->p < z->end) {
        unsigned char c = (unsigned char)*z->p;
        if (c == '"') break;
        if (c < 0x20 || c >= 0x7F || c == '\\') return FB;
        z->p++;
    }
    if (z->p >= z->end) return FB;
    size_t L = (size_t)(z->p - s);
    z->p++;
    df_kj_doc_t *d = z->d;
    char *dst = d->str + d->str_used; /* fits: L + 1 < L + 2 bytes of text */
    memcpy(dst, s, L);
    dst[L] = 0;
    d->str_used += L + 1;
    memset(out, 0, sizeof *out);
    out->type = DF_KJ_STR;
    out->n = (uint32_t)L;
    out->u.s = dst;
    return 0;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

static const double k_exact_p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int isdig(char c) { return c >= '0' && c <= '9'; }

/* JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(pz_t *z, df_kj_node_t *out)
{
    const char *s = z->p, *p = s, *e = z->end;
    int neg = 0, real = 0;
    uint64_t mant = 0;
    int sig = 0, frac = 0, digits = 0; /* significant digits; of them after '.'; all int digits */
    if (p < e && *p == '-') { neg = 1; p++; }
    if (p >= e || !isdig(*p)) return FB;
    if (*p == '0') {
        p++;
        digits = 1;
        if (p < e && isdig(*p)) return FB; /* leading zero */
    } else {
        while (p < e && isdig(*p)) {
            if (sig < 19) mant = mant * 10 + (uint64_t)(*p - '0');
            sig++;
            digits++;
            p++;
        }
    }
    if (p < e && *p == '.') {
        real = 1;
        p++;
        if (p >= e || !isdig(*p)) return FB;
        while (p < e && isdig(*p)) {
            if (sig || *p != '0') { /* leading zeros of 0.00x are not significant */
                if (sig < 19) mant = mant * 10 + (uint64_t)(*p - '0');
                sig++;
            }
            frac++;
            p++;
        }
    }
    int ex = 0, eneg = 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        real = 1;
        p++;
        if (p < e && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        if (p >= e || !isdig(*p)) return FB;
        while (p < e && isdig(*p)) {
            if (ex < 100000) ex = ex * 10 + (*p - '0');
            p++;
        }
    }
    z->p = p;
    memset(out, 0, sizeof *out);
    if (!real) {
        if (digits > 18) return FB; /* jansson: strtoll, "too big integer" */
        out->type = DF_KJ_INT;
        out->u.i = neg ? -(int64_t)mant : (int64_t)mant;
        return 0;
    }
    out->type = DF_KJ_REAL;
    int e10 = (eneg ? -ex : ex) - frac;
    if (sig == 0) { /* all digits zero */
        out->u.d = neg ? -0.0 : 0.0;
        return 0;
    }
    if (sig <= 15 && e10 >= -22 && e10 <= 22) {
        double v = (double)mant; /* exact: < 10^15 < 2^53 */
        v = e10 >= 0 ? v * k_exact_p10[e10] : v / k_exact_p10[-e10];
        out->u.d = neg ? -v : v;
        return 0;
    }
    char buf[64];
    size_t L = (size_t)(p - s);
    if (L >= sizeof buf) return FB;
    memcpy(buf, s, L);
    buf[L] = 0;
    pthread_once(&c_locale_once, c_locale_init);
    if (!c_locale) return FB;
    char *endp;
    double v = strtod_l(buf, &endp, c_locale);
    if (endp != buf + L || !isfinite(v)) return FB; /* overflow: jansson's error */
    out->u.d = v;
    return 0;
}

static int parse_value(pz_t *z);

static int parse_array(pz_t *z)
{
    df_kj_doc_t *d = z->d;
    if (++z->depth > DF_KJ_MAX_DEPTH) return FB;
    size_t base = d->sn;
    z->p++;
    skip_ws(z);
    if (z->p < z->end && *z->p == ']') {
        z->p++;
    } else {
        for (;;) {
            int rc = parse_value(z);
            if (rc) return rc;
            skip_ws(z);
            if (z->p >= z->end) return FB;
            char c = *z->p++;
            if (c == ']') break;
            if (c != ',') return FB;
        }
    }
    z->depth--;
    return close_container(d, base, DF_KJ_ARR);
}

static int parse_object(pz_t *z)
{
    df_kj_doc_t *d = z->d;
    if (++z->depth > DF_KJ_MAX_DEPTH) return FB;
    size_t base = d->sn;
    int members = 0;
    z->p++;
    skip_ws(z);
    if (z->p < z->end && *z->p == '}') {
        z->p++;
    } else {
        for (;;) {
            skip_ws(z);
            if (z->p >= z->end || *z->p != '"' || ++members > DF_KJ_MAX_MEMBERS) return FB;
            df_kj_node_t k;
            int rc = parse_string(z, &k);
            if (rc) return rc;
            for (size_t j = base; j < d->sn; j += 2) /* duplicates: jansson's error */
                if (d->stack[j].n == k.n && !memcmp(d->stack[j].u.s, k.u.s, k.n)) return FB;
            if ((rc = push(d, &k))) return rc;
            skip_ws(z);
            if (z->p >= z->end || *z->p != ':') return FB;
            z->p++;
            if ((rc = parse_value(z))) return rc;
            skip_ws(z);
            if (z->p >= z->end) return FB;
            char c = *z->p++;
            if (c == '}') break;
            if (c != ',') return FB;
        }
    }
    z->depth--;
    return close_container(d, base, DF_KJ_OBJ);
}

static int parse_literal(pz_t *z, const char *word, size_t n, int type)
{
    if ((size_t)(z->end - z->p) < n || memcmp(z->p, word, n)) return FB;
    z->p += n;
    df_kj_node_t v = {0};
    v.type = (uint8_t)type;
    return push(z->d, &v);
}

static int parse_value(pz_t *z)
{
    skip_ws(z);
    if (z->p >= z->end) return FB;
    df_kj_node_t v;
    int rc;
    switch (*z->p) {
    case '{': return parse_object(z);
    case '[': return parse_array(z);
    case '"':
        if ((rc = parse_string(z, &v))) return rc;
        return push(z->d, &v);
    case 't': return parse_literal(z, "true", 4, DF_KJ_TRUE);
    case 'f': return parse_literal(z, "false", 5, DF_KJ_FALSE);
    case 'n': return parse_literal(z, "null", 4, DF_KJ_NULL);
    default:
        if (*z->p != '-' && !isdig(*z->p)) return FB;
        if ((rc = parse_number(z, &v))) return rc;
        return push(z->d, &v);
    }
}

static void reset(df_kj_doc_t *d)
{
    d->n = d->sn = d->str_used = 0;
    d->root = NULL;
}

int df_kj_parse(df_kj_doc_t *d, const char *s, size_t len)
{
    reset(d);
    if (grow((void **)&d->str, &d->str_cap, len + 1, 1)) return DF_KJ_NOMEM;
    pz_t z = {s, s + len, d, 0};
    skip_ws(&z);
    if (z.p >= z.end || (*z.p != '{' && *z.p != '[')) return FB; /* jansson: '[' or '{' expected */
    int rc = parse_value(&z);
    if (rc) return rc;
    skip_ws(&z);
    if (z.p != z.end) return FB; /* trailing bytes */
    return finish(d);
}

static int conv(df_kj_doc_t *d, const json_t *v)
{
    df_kj_node_t x = {0};
    size_t base = d->sn;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)v, k, val) {
            df_kj_node_t kn = {0};
            kn.type = DF_KJ_STR;
            kn.n = (uint32_t)strlen(k);
            kn.u.s = k;
            int rc = push(d, &kn);
            if (rc || (rc = conv(d, val))) return rc;
        }
        return close_container(d, base, DF_KJ_OBJ);
    }
    case JSON_ARRAY:
        for (size_t i = 0; i < json_array_size(v); i++) {
            int rc = conv(d, json_array_get(v, i));
            if (rc) return rc;
        }
        return close_container(d, base, DF_KJ_ARR);
    case JSON_STRING:
        x.type = DF_KJ_STR;
        x.n = (uint32_t)json_string_length(v);
        x.u.s = json_string_value(v);
        break;
    case JSON_INTEGER:
        x.type = DF_KJ_INT;
        x.u.i = json_integer_value(v);
        break;
    case JSON_REAL:
        x.type = DF_KJ_REAL;
        x.u.d = json_real_value(v);
        break;
    case JSON_TRUE: x.type = DF_KJ_TRUE; break;
    case JSON_FALSE: x.type = DF_KJ_FALSE; break;
    default: x.type = DF_KJ_NULL; break;
    }
    return push(d, &x);
}

int df_kj_from_jansson(df_kj_doc_t *d, const void *root)
{
    reset(d);
    int rc = conv(d, (const json_t *)root);
    return rc ? rc : finish(d);
}

void df_kj_doc_free(df_kj_doc_t *d)
{
    free(d->nodes);
    free(d->stack);
    free(d->str);
    memset(d, 0, sizeof *d);
}

const df_kj_node_t *df_kj_get(const df_kj_node_t *o, const char *key)
{
    if (!df_kj_is(o, DF_KJ_OBJ)) return NULL;
    size_t L = strlen(key);
    const df_kj_node_t *c = o + o->u.rel;
    for (uint32_t k = 0; k < o->n; k++, c += 2)
        if (c->n == L && !memcmp(c->u.s, key, L)) return c + 1;
    return NULL;
}

/* kjson.c — strict subset JSON reader with jansson fallback (see kjson.h).
 *
 * Recursive descent over the bytes; a value is pushed on d->stack when it
 * is complete; when a container closes, its children (the top of the
 * stack) move to d->nodes as one contiguous run and the container itself
 * is pushed. On the stack a container holds the absolute index of its
 * first child; when it moves into d->nodes that becomes an offset from its
 * own slot. An array starts PACKED: while its elements are numbers they go
 * straight to d->num (never to the stack); the first element that is not
 * a number moves them onto the stack as nodes and the array continues as
 * usual. Numbers: integers of <= 18 digits exactly; reals of <= 15
 * significant digits with a decimal exponent in [-22, 22] by one IEEE
 * multiply or divide of exact operands (Clinger's fast path: correctly
 * rounded, so equal to strtod); other reals through strtod_l in the "C"
 * locale, which is what jansson calls (jansson swaps the decimal point for
 * the locale's instead). Strings: escapes decoded and UTF-8 validated by
 * jansson's rules (no overlong forms, surrogates or code points past
 * U+10FFFF; \u0000 and lone surrogates are jansson's errors). Anything
 * this file does not handle exactly like jansson is DF_KJ_FALLBACK.
 *
 * Memory accounting (d->max_bytes): d->used counts 16 bytes per node on
 * the stack or in d->nodes, 9 per packed number and the string bytes; a
 * parse that would pass max_bytes stops with DF_KJ_LIMIT.
 */
#include "kjson.h"
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p, *end, *start;
    df_kj_doc_t *d;
    int depth;
} pz_t;

#define FB DF_KJ_FALLBACK

/* Decline at the current byte, saying why (the first reason is kept). */
static int decline(pz_t *z, const char *what)
{
    if (!z->d->err_what) {
        z->d->err_what = what;
        z->d->err_at = (size_t)(z->p - z->start);
    }
    return FB;
}

/* Count bytes against max_bytes. */
static inline int charge(df_kj_doc_t *d, size_t bytes)
{
    d->used += bytes;
    if (d->max_bytes && d->used > d->max_bytes) {
        if (!d->err_what) d->err_what = "more memory than the request's size allows";
        return DF_KJ_LIMIT;
    }
    return 0;
}

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
    int rc = charge(d, sizeof *d->stack);
    if (rc) return rc;
    if (d->sn == d->scap && grow((void **)&d->stack, &d->scap, d->sn + 1, sizeof *d->stack))
        return DF_KJ_NOMEM;
    d->stack[d->sn++] = *v;
    return 0;
}

/* A number of a packed array. */
static inline int push_num(df_kj_doc_t *d, const df_kj_node_t *v)
{
    int rc = charge(d, sizeof *d->num + 1);
    if (rc) return rc;
    if (d->nn == d->num_cap) {
        size_t cap = d->num_cap;
        if (grow((void **)&d->num, &cap, d->nn + 1, sizeof *d->num)) return DF_KJ_NOMEM;
        size_t cap2 = d->num_cap;
        if (grow((void **)&d->num_real, &cap2, cap, 1)) return DF_KJ_NOMEM;
        d->num_cap = cap;
    }
    d->num_real[d->nn] = v->type == DF_KJ_REAL;
    if (v->type == DF_KJ_REAL) d->num[d->nn].d = v->u.d;
    else d->num[d->nn].i = v->u.i;
    d->nn++;
    return 0;
}

/* An array that was packed meets an element that is not a number: its
 * numbers d->num[nbase..] become nodes on the stack. */
static int unpack(df_kj_doc_t *d, size_t nbase)
{
    size_t m = d->nn - nbase;
    d->used -= m * (sizeof *d->num + 1);
    for (size_t k = nbase; k < nbase + m; k++) {
        df_kj_node_t v = {0};
        v.type = d->num_real[k] ? DF_KJ_REAL : DF_KJ_INT;
        if (d->num_real[k]) v.u.d = d->num[k].d;
        else v.u.i = d->num[k].i;
        int rc = push(d, &v);
        if (rc) return rc;
    }
    d->nn = nbase;
    return 0;
}

/* A node whose u.rel locates children in d->nodes (packed arrays locate
 * theirs in d->num). */
static inline int is_container(const df_kj_node_t *v)
{
    return (v->type == DF_KJ_ARR && !v->packed) || v->type == DF_KJ_OBJ;
}

/* Move d->stack[base..sn) into d->nodes; push the container. */
static int close_container(df_kj_doc_t *d, size_t base, int type)
{
    size_t m = d->sn - base, at = d->n;
    int rc = charge(d, m * sizeof *d->nodes);
    if (rc) return rc;
    if (grow((void **)&d->nodes, &d->cap, at + m + 1, sizeof *d->nodes)) return DF_KJ_NOMEM;
    for (size_t j = 0; j < m; j++) {
        df_kj_node_t c = d->stack[base + j];
        if (is_container(&c)) c.u.rel -= (int64_t)(at + j);
        d->nodes[at + j] = c;
    }
    d->n += m;
    d->sn = base;
    d->used -= m * sizeof *d->stack;
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
    /* the root moves from the stack to the nodes: counted once, as before */
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

static int hex4(const char *p, const char *end, uint32_t *out)
{
    if (end - p < 4) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *q, uint32_t c)
{
    if (c < 0x80) *q++ = (char)c;
    else if (c < 0x800) {
        *q++ = (char)(0xC0 | (c >> 6));
        *q++ = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *q++ = (char)(0xE0 | (c >> 12));
        *q++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (char)(0x80 | (c & 0x3F));
    } else {
        *q++ = (char)(0xF0 | (c >> 18));
        *q++ = (char)(0x80 | ((c >> 12) & 0x3F));
        *q++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (char)(0x80 | (c & 0x3F));
    }
    return q;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 if
 * invalid: no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    return n;
}

/* z->p at the opening quote. Decoded into the side buffer. */
static int parse_string(pz_t *z, df_kj_node_t *out)
{
    df_kj_doc_t *d = z->d;
    char *dst = d->str + d->str_used, *q = dst; /* fits: never longer than the text */
    const char *p = ++z->p, *end = z->end;
    for (;;) {
        /* the common run: printable ASCII */
        const char *s = p;
        while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7F && *p != '"' &&
               *p != '\\')
            p++;
        memcpy(q, s, (size_t)(p - s));
        q += p - s;
        if (p >= end) {
            z->p = p;
            return decline(z, "unterminated string");
        }
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c < 0x20 || c == 0x7F) {
            if (c == 0x7F) { /* DEL is allowed in JSON strings */
                *q++ = (char)c;
                p++;
                continue;
            }
            z->p = p;
            return decline(z, "control character in a string");
        }
        if (c >= 0x80) {
            size_t n = utf8_len((const unsigned char *)p, (const unsigned char *)end);
            if (!n) {
                z->p = p;
                return decline(z, "invalid UTF-8 in a string");
            }
            memcpy(q, p, n);
            q += n;
            p += n;
            continue;
        }
        /* an escape */
        if (end - p < 2) {
            z->p = p;
            return decline(z, "unterminated string");
        }
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': *q++ = '"'; continue;
        case '\\': *q++ = '\\'; continue;
        case '/': *q++ = '/'; continue;
        case 'b': *q++ = '\b'; continue;
        case 'f': *q++ = '\f'; continue;
        case 'n': *q++ = '\n'; continue;
        case 'r': *q++ = '\r'; continue;
        case 't': *q++ = '\t'; continue;
        case 'u': break;
        default:
            z->p = p - 2;
            return decline(z, "invalid escape in a string");
        }
        uint32_t u;
        if (hex4(p, end, &u)) {
            z->p = p - 2;
            return decline(z, "invalid \\u escape");
        }
        p += 4;
        if (u >= 0xD800 && u <= 0xDBFF) { /* a pair: \uD8xx\uDCxx */
            uint32_t lo;
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF) {
                z->p = p - 6;
                return decline(z, "lone UTF-16 surrogate in a \\u escape");
            }
            p += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
            z->p = p - 6;
            return decline(z, "lone UTF-16 surrogate in a \\u escape");
        } else if (u == 0) {
            z->p = p - 6;
            return decline(z, "\\u0000 in a string");
        }
        q = put_utf8(q, u);
    }
    size_t L = (size_t)(q - dst);
    z->p = p + 1;
    int rc = charge(d, L + 1);
    if (rc) return rc;
    *q = 0;
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

/* A number; why it was declined, if it was. */
static int number(pz_t *z, df_kj_node_t *v)
{
    const char *at = z->p;
    int rc = parse_number(z, v);
    if (rc == FB) {
        z->p = at;
        return decline(z, "invalid number, or an integer of more than 18 digits, or a real "
                          "outside double");
    }
    return rc;
}

static inline int starts_number(char c) { return c == '-' || isdig(c); }

static int parse_array(pz_t *z)
{
    df_kj_doc_t *d = z->d;
    if (++z->depth > DF_KJ_MAX_DEPTH) return decline(z, "arrays and objects nested deeper than 64");
    size_t base = d->sn, nbase = d->nn, count = 0;
    int packed = 1; /* every element so far is a number, in d->num[nbase..] */
    z->p++;
    skip_ws(z);
    if (z->p < z->end && *z->p == ']') {
        z->p++;
        packed = 0;
    } else {
        for (;;) {
            int rc;
            skip_ws(z);
            if (packed && z->p < z->end && starts_number(*z->p)) {
                df_kj_node_t v;
                if ((rc = number(z, &v)) || (rc = push_num(d, &v))) return rc;
            } else {
                if (packed && (rc = unpack(d, nbase))) return rc;
                packed = 0;
                if ((rc = parse_value(z))) return rc;
            }
            count++;
            skip_ws(z);
            if (z->p >= z->end) return decline(z, "unterminated array");
            char c = *z->p++;
            if (c == ']') break;
            if (c != ',') {
                z->p--;
                return decline(z, "expected ',' or ']' in an array");
            }
        }
    }
    z->depth--;
    if (packed) {
        if (count > UINT32_MAX) return decline(z, "an array of more than 2^32 numbers");
        df_kj_node_t v = {0};
        v.type = DF_KJ_ARR;
        v.packed = 1;
        v.n = (uint32_t)count;
        v.u.rel = (int64_t)nbase;
        return push(d, &v);
    }
    return close_container(d, base, DF_KJ_ARR);
}

static int parse_object(pz_t *z)
{
    df_kj_doc_t *d = z->d;
    if (++z->depth > DF_KJ_MAX_DEPTH) return decline(z, "arrays and objects nested deeper than 64");
    size_t base = d->sn;
    int members = 0;
    z->p++;
    skip_ws(z);
    if (z->p < z->end && *z->p == '}') {
        z->p++;
    } else {
        for (;;) {
            skip_ws(z);
            if (z->p >= z->end || *z->p != '"') return decline(z, "expected a string key in an object");
            if (++members > DF_KJ_MAX_MEMBERS) return decline(z, "an object with more than 64 members");
            const char *kat = z->p;
            df_kj_node_t k;
            int rc = parse_string(z, &k);
            if (rc) return rc;
            for (size_t j = base; j < d->sn; j += 2) /* duplicates: jansson's error */
                if (d->stack[j].n == k.n && !memcmp(d->stack[j].u.s, k.u.s, k.n)) {
                    z->p = kat;
                    return decline(z, "duplicate key in an object");
                }
            if ((rc = push(d, &k))) return rc;
            skip_ws(z);
            if (z->p >= z->end || *z->p != ':') return decline(z, "expected ':' after a key");
            z->p++;
            if ((rc = parse_value(z))) return rc;
            skip_ws(z);
            if (z->p >= z->end) return decline(z, "unterminated object");
            char c = *z->p++;
            if (c == '}') break;
            if (c != ',') {
                z->p--;
                return decline(z, "expected ',' or '}' in an object");
            }
        }
    }
    z->depth--;
    return close_container(d, base, DF_KJ_OBJ);
}

static int parse_literal(pz_t *z, const char *word, size_t n, int type)
{
    if ((size_t)(z->end - z->p) < n || memcmp(z->p, word, n)) return decline(z, "invalid literal");
    z->p += n;
    df_kj_node_t v = {0};
    v.type = (uint8_t)type;
    return push(z->d, &v);
}

static int parse_value(pz_t *z)
{
    skip_ws(z);
    if (z->p >= z->end) return decline(z, "a value is missing");
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
        if (!starts_number(*z->p)) return decline(z, "invalid token");
        if ((rc = number(z, &v))) return rc;
        return push(z->d, &v);
    }
}

static void reset(df_kj_doc_t *d)
{
    d->n = d->sn = d->str_used = d->nn = 0;
    d->used = 0;
    d->err_at = 0;
    d->err_what = NULL;
    d->root = NULL;
}

int df_kj_parse(df_kj_doc_t *d, const char *s, size_t len)
{
    reset(d);
    if (grow((void **)&d->str, &d->str_cap, len + 1, 1)) return DF_KJ_NOMEM;
    pz_t z = {s, s + len, s, d, 0};
    skip_ws(&z);
    if (z.p >= z.end || (*z.p != '{' && *z.p != '['))
        return decline(&z, "expected an object or an array"); /* jansson: '[' or '{' expected */
    int rc = parse_value(&z);
    if (rc == DF_KJ_LIMIT && !d->err_at) d->err_at = (size_t)(z.p - s);
    if (rc) return rc;
    skip_ws(&z);
    if (z.p != z.end) return decline(&z, "bytes after the end of the document");
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
    case JSON_ARRAY: {
        size_t n = json_array_size(v), i;
        for (i = 0; i < n && json_is_number(json_array_get(v, i)); i++) {}
        if (n > 0 && i == n && n <= UINT32_MAX) { /* packed, as df_kj_parse does */
            size_t nbase = d->nn;
            for (i = 0; i < n; i++) {
                const json_t *e = json_array_get(v, i);
                df_kj_node_t y = {0};
                y.type = json_is_integer(e) ? DF_KJ_INT : DF_KJ_REAL;
                if (json_is_integer(e)) y.u.i = json_integer_value(e);
                else y.u.d = json_real_value(e);
                int rc = push_num(d, &y);
                if (rc) return rc;
            }
            x.type = DF_KJ_ARR;
            x.packed = 1;
            x.n = (uint32_t)n;
            x.u.rel = (int64_t)nbase;
            break;
        }
        for (i = 0; i < n; i++) {
            int rc = conv(d, json_array_get(v, i));
            if (rc) return rc;
        }
        return close_container(d, base, DF_KJ_ARR);
    }
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
    size_t keep = d->max_bytes;
    free(d->nodes);
    free(d->stack);
    free(d->str);
    free(d->num);
    free(d->num_real);
    memset(d, 0, sizeof *d);
    d->max_bytes = keep;
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

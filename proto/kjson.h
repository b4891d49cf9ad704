/* kjson.h — a small strict JSON reader for KServe request headers
 * (pure: bytes to a flat node array, no I/O, no allocation per value).
 *
 * DESIGN
 * jansson builds a tree of malloc'd objects with hash tables and reads its
 * input one character at a time through a callback; on a 150-byte infer
 * request that was 13 % of the HTTP thread (session 3 profile), more than
 * the whole evaluation of a small model. This reader is an accelerator,
 * not a second JSON implementation with its own semantics:
 *   - it accepts a strict SUBSET of JSON — strings with escapes and valid
 *     UTF-8 (no \u0000, no lone surrogates), integers of at most 18
 *     digits, reals that strtod reads to a finite double, nesting to
 *     DF_KJ_MAX_DEPTH, objects of at most DF_KJ_MAX_MEMBERS distinct keys,
 *     an object or array at the top — and for that subset produces exactly
 *     the values jansson would (integers stay integers, reals are strtod's
 *     correctly rounded double, strings decoded as jansson decodes them);
 *   - everything else (invalid JSON, NUL escapes, duplicate keys, huge
 *     numbers) returns DF_KJ_FALLBACK with the byte offset and the reason
 *     in err_at / err_what; the caller may parse with jansson (json_loadb
 *     with JSON_REJECT_DUPLICATES) and convert the result with
 *     df_kj_from_jansson, so error messages and every corner of the JSON
 *     grammar stay jansson's.
 * Values are nodes of 16 bytes in one array (reused between parses); a
 * container's children are contiguous, found by an offset relative to the
 * container's own node, so lookups need only a node pointer. An array whose
 * elements are all numbers (the "data" and "shape" of a request) is stored
 * PACKED: its node holds only the count, and the numbers are 9 bytes each
 * in the document's number arrays, read with df_kj_num_at (df_kj_at
 * answers NULL for them). Consecutive packed arrays ([[1,2],[3,4]]) are
 * contiguous there. Strings are copied NUL-terminated into a side buffer
 * of json_len + 1 bytes (decoded, a string never takes more bytes than
 * its text).
 *
 * Memory. With max_bytes set, the reader refuses (DF_KJ_LIMIT) a document
 * whose nodes (16 bytes each, counted while on the parse stack too),
 * packed numbers (9 bytes) and strings would take more: the caller bounds
 * the reader's memory by a multiple of the text. A number takes at least
 * two bytes of text with its separator, so a flat "data" array takes at
 * most 4.5 times its text.
 */
#ifndef DF_PROTO_KJSON_H
#define DF_PROTO_KJSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DF_KJ_MAX_DEPTH 64     /* deeper: fallback (jansson allows 2048) */
#define DF_KJ_MAX_MEMBERS 64   /* keys of one object; more: fallback */

enum { DF_KJ_NULL, DF_KJ_FALSE, DF_KJ_TRUE, DF_KJ_INT, DF_KJ_REAL, DF_KJ_STR, DF_KJ_ARR, DF_KJ_OBJ };

typedef struct df_kj_node {
    uint8_t type;
    uint8_t packed;           /* ARR: every element a number, stored in the
                                 document's number arrays (df_kj_num_at);
                                 u.rel is the index of the first there */
    uint32_t n;               /* STR: length; ARR: elements; OBJ: members */
    union {
        int64_t i;            /* INT */
        double d;             /* REAL */
        const char *s;        /* STR: NUL-terminated, borrowed from the doc
                                 (or from the jansson value converted) */
        int64_t rel;          /* ARR/OBJ: first child = this node + rel;
                                 OBJ children are key, value, key, value... */
    } u;
} df_kj_node_t;

typedef struct df_kj_doc {
    df_kj_node_t *nodes;      /* owned; free with df_kj_doc_free */
    size_t n, cap;
    df_kj_node_t *stack;      /* owned: children of open containers */
    size_t sn, scap;
    char *str;                /* owned: string bytes */
    size_t str_used, str_cap;
    union df_kj_num { int64_t i; double d; } *num; /* owned: packed numbers */
    uint8_t *num_real;        /* owned: 1 where num[k] is a REAL */
    size_t nn, num_cap;
    const df_kj_node_t *root; /* into nodes after a successful parse */
    size_t max_bytes;         /* set by the caller: 0 no limit, else see DESIGN */
    size_t used;              /* bytes counted against max_bytes (a parse's peak
                                 is at most max_bytes) */
    size_t err_at;            /* FALLBACK / LIMIT: byte offset of the problem */
    const char *err_what;     /* and what it is (static text) */
} df_kj_doc_t;

enum { DF_KJ_OK = 0, DF_KJ_FALLBACK = 1, DF_KJ_NOMEM = -2, DF_KJ_LIMIT = -5 };

/* Parse s[0..len) into d (its buffers are reused; d->max_bytes is kept).
 * Returns DF_KJ_OK (d->root set), DF_KJ_FALLBACK (outside the subset or
 * invalid: use jansson, or report err_what at err_at), DF_KJ_LIMIT (more
 * memory than max_bytes) or DF_KJ_NOMEM. */
int df_kj_parse(df_kj_doc_t *d, const char *s, size_t len);

/* Convert a jansson document (a json_t *; void here so this header does not
 * need jansson.h) into d (numeric arrays packed as by df_kj_parse); strings
 * borrow from root, which must outlive the use of d. Returns DF_KJ_OK,
 * DF_KJ_LIMIT or DF_KJ_NOMEM. */
int df_kj_from_jansson(df_kj_doc_t *d, const void *root);

/* Frees d's buffers; d can be parsed into again. */
void df_kj_doc_free(df_kj_doc_t *d);

/* Accessors with jansson's conventions: NULL / 0 on the wrong type. */
static inline int df_kj_is(const df_kj_node_t *v, int t) { return v && v->type == t; }
static inline size_t df_kj_size(const df_kj_node_t *v)
{
    return v && (v->type == DF_KJ_ARR || v->type == DF_KJ_OBJ) ? v->n : 0;
}
/* Element i of an array; NULL past the end and for packed arrays. */
static inline const df_kj_node_t *df_kj_at(const df_kj_node_t *v, size_t i)
{
    return df_kj_is(v, DF_KJ_ARR) && !v->packed && i < v->n ? v + v->u.rel + (int64_t)i : NULL;
}
/* Element i of array v when it is a number (packed or not): 1 and *out
 * (an INT or REAL node) set; else 0. */
static inline int df_kj_num_at(const df_kj_doc_t *d, const df_kj_node_t *v, size_t i,
                               df_kj_node_t *out)
{
    if (!df_kj_is(v, DF_KJ_ARR) || i >= v->n) return 0;
    if (v->packed) {
        size_t k = (size_t)v->u.rel + i;
        out->type = d->num_real[k] ? DF_KJ_REAL : DF_KJ_INT;
        out->packed = 0;
        out->n = 0;
        if (d->num_real[k]) out->u.d = d->num[k].d;
        else out->u.i = d->num[k].i;
        return 1;
    }
    const df_kj_node_t *e = v + v->u.rel + (int64_t)i;
    if (e->type != DF_KJ_INT && e->type != DF_KJ_REAL) return 0;
    *out = *e;
    return 1;
}
const df_kj_node_t *df_kj_get(const df_kj_node_t *obj, const char *key);

#ifdef __cplusplus
}
#endif
#endif

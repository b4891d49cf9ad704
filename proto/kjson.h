/* kjson.h — a small strict JSON reader for KServe request headers
 * (pure: bytes to a flat node array, no I/O, no allocation per value).
 *
 * DESIGN
 * jansson builds a tree of malloc'd objects with hash tables and reads its
 * input one character at a time through a callback; on a 150-byte infer
 * request that was 13 % of the HTTP thread (session 3 profile), more than
 * the whole evaluation of a small model. This reader is an accelerator,
 * not a second JSON implementation with its own semantics:
 *   - it accepts a strict SUBSET of JSON — strings of printable ASCII
 *     without escapes, integers of at most 18 digits, reals that strtod
 *     reads to a finite double, nesting to DF_KJ_MAX_DEPTH, objects of at
 *     most DF_KJ_MAX_MEMBERS distinct keys, an object or array at the top —
 *     and for that subset produces exactly the values jansson would
 *     (integers stay integers, reals are strtod's correctly rounded double);
 *   - everything else (invalid JSON, escapes, UTF-8, duplicate keys, huge
 *     numbers) returns DF_KJ_FALLBACK, and the caller parses with jansson
 *     (json_loadb with JSON_REJECT_DUPLICATES) and converts the result with
 *     df_kj_from_jansson, so error messages and every corner of the JSON
 *     grammar stay jansson's.
 * Values are nodes of 16 bytes in one array (reused between parses); a
 * container's children are contiguous, found by an offset relative to the
 * container's own node, so lookups need only a node pointer. Strings are
 * copied NUL-terminated into a side buffer of json_len + 1 bytes (each
 * string takes fewer bytes there than in the text).
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
    const df_kj_node_t *root; /* into nodes after a successful parse */
} df_kj_doc_t;

enum { DF_KJ_OK = 0, DF_KJ_FALLBACK = 1, DF_KJ_NOMEM = -2 };

/* Parse s[0..len) into d (its buffers are reused). Returns DF_KJ_OK (d->root
 * set), DF_KJ_FALLBACK (outside the subset or invalid: use jansson), or
 * DF_KJ_NOMEM. */
int df_kj_parse(df_kj_doc_t *d, const char *s, size_t len);

/* Convert a jansson document (a json_t *; void here so this header does not
 * need jansson.h) into d; strings borrow from root, which must outlive the
 * use of d. Returns DF_KJ_OK or DF_KJ_NOMEM. */
int df_kj_from_jansson(df_kj_doc_t *d, const void *root);

/* Frees d's buffers; d can be parsed into again. */
void df_kj_doc_free(df_kj_doc_t *d);

/* Accessors with jansson's conventions: NULL / 0 on the wrong type. */
static inline int df_kj_is(const df_kj_node_t *v, int t) { return v && v->type == t; }
static inline size_t df_kj_size(const df_kj_node_t *v)
{
    return v && (v->type == DF_KJ_ARR || v->type == DF_KJ_OBJ) ? v->n : 0;
}
static inline const df_kj_node_t *df_kj_at(const df_kj_node_t *v, size_t i)
{
    return df_kj_is(v, DF_KJ_ARR) && i < v->n ? v + v->u.rel + (int64_t)i : NULL;
}
const df_kj_node_t *df_kj_get(const df_kj_node_t *obj, const char *key);

#ifdef __cplusplus
}
#endif
#endif

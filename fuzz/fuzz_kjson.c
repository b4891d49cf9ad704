/* fuzz_kjson.c — libFuzzer driver for the subset JSON reader
 * (proto/kjson.c), differential against jansson.
 *
 * Oracles: whatever the subset reader accepts, jansson (JSON_REJECT_
 * DUPLICATES) accepts too, and both read the same document (compared node
 * by node: types, integers, doubles bit for bit, strings byte for byte,
 * members in order); a decline or a limit comes with a reason and an
 * offset inside the text; with a budget of 10 x the text + 64 KiB the
 * reader's count never passes it. Seeds: fuzz/corpus/kjson (replayed by
 * tests/unit/fuzz/test_fuzz_kjson.c).
 */
#include "kjson.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const df_kj_doc_t *doc;

static void same(const df_kj_node_t *v, const json_t *j)
{
    switch (v->type) {
    case DF_KJ_NULL: if (!json_is_null(j)) abort(); return;
    case DF_KJ_TRUE: if (!json_is_true(j)) abort(); return;
    case DF_KJ_FALSE: if (!json_is_false(j)) abort(); return;
    case DF_KJ_INT: if (!json_is_integer(j) || json_integer_value(j) != v->u.i) abort(); return;
    case DF_KJ_REAL: {
        double a = v->u.d, b = json_is_real(j) ? json_real_value(j) : 0;
        if (!json_is_real(j) || memcmp(&a, &b, sizeof a)) abort();
        return;
    }
    case DF_KJ_STR:
        if (!json_is_string(j) || json_string_length(j) != v->n || memcmp(json_string_value(j), v->u.s, v->n))
            abort();
        return;
    case DF_KJ_ARR:
        if (!json_is_array(j) || json_array_size(j) != v->n) abort();
        for (size_t i = 0; i < v->n; i++) {
            df_kj_node_t e;
            if (v->packed) {
                if (!df_kj_num_at(doc, v, i, &e)) abort();
                same(&e, json_array_get(j, i));
            } else {
                same(df_kj_at(v, i), json_array_get(j, i));
            }
        }
        return;
    case DF_KJ_OBJ: {
        if (!json_is_object(j) || json_object_size(j) != v->n) abort();
        const df_kj_node_t *c = v + v->u.rel;
        for (size_t i = 0; i < v->n; i++, c += 2) {
            const json_t *m = json_object_get(j, c->u.s);
            if (!m || strlen(c->u.s) != c->n) abort();
            same(c + 1, m);
        }
        return;
    }
    default: abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static df_kj_doc_t d;
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    d.max_bytes = 10 * size + (64u << 10);
    int rc = df_kj_parse(&d, text, size);
    if (d.used > d.max_bytes) abort();
    json_error_t je;
    json_t *j = json_loadb(text, size, JSON_REJECT_DUPLICATES, &je);
    if (rc == DF_KJ_OK) {
        if (!j) abort();
        doc = &d;
        same(d.root, j);
    } else if (rc == DF_KJ_FALLBACK || rc == DF_KJ_LIMIT) {
        if (!d.err_what || d.err_at > size) abort();
    } else if (rc != DF_KJ_NOMEM) {
        abort();
    }
    json_decref(j);
    free(text);
    return 0;
}

/* test_kjson.c — the subset JSON reader (proto/kjson.c) against jansson and
 * strtod as references: every number it accepts must have jansson's type
 * and strtod's double bit for bit; documents and strings (escapes, UTF-8)
 * it accepts must read the same as jansson's (compared through a canonical
 * dump); everything outside the subset — invalid tokens, NaN/Infinity,
 * invalid UTF-8, \u0000, lone surrogates, duplicate keys, depth,
 * truncation — must be declined (DF_KJ_FALLBACK) with a reason so jansson
 * (or the caller's error) decides. Packed numeric arrays and the memory
 * budget (max_bytes) are checked against their documented bounds. */
#include "dftest.h"
#include "kjson.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static df_kj_doc_t doc;

static int kj(const char *s) { return df_kj_parse(&doc, s, strlen(s)); }

/* "[text]": 0 if the subset reader declined; 1 if it accepted and agrees
 * with jansson (type and bits); -1 on a disagreement. */
static int number_agrees(const char *text)
{
    char buf[256];
    snprintf(buf, sizeof buf, "[%s]", text);
    int rc = kj(buf);
    if (rc == DF_KJ_FALLBACK) return 0;
    if (rc != DF_KJ_OK) return -1;
    json_t *j = json_loads(buf, JSON_REJECT_DUPLICATES, NULL);
    if (!j) return -1;
    df_kj_node_t vn;
    const df_kj_node_t *v = df_kj_num_at(&doc, doc.root, 0, &vn) ? &vn : NULL;
    const json_t *jv = json_array_get(j, 0);
    int same = 0;
    if (v && v->type == DF_KJ_INT && json_is_integer(jv)) {
        same = v->u.i == json_integer_value(jv);
    } else if (v && v->type == DF_KJ_REAL && json_is_real(jv)) {
        double a = v->u.d, b = json_real_value(jv), c = strtod(text, NULL);
        same = !memcmp(&a, &b, 8) && !memcmp(&a, &c, 8);
    }
    json_decref(j);
    return same ? 1 : -1;
}

static void test_numbers_vs_strtod(void)
{
    const char *fixed[] = {"0", "-0", "0.0", "-0.0", "1", "-1", "10", "123456789012345678",
                           "-123456789012345678", "0.5", "1.5e3", "1.5E3", "1.5e+3", "1.5e-3",
                           "2.5E-07", "0e0", "0E-5", "-0e10", "1e22", "1e-22", "123456789012345e22",
                           "0.1", "0.30000000000000004", "0.10000000149011612", "3.4028234663852886e38",
                           "1.1754943508222875e-38", "1.401298464324817e-45", "4.9406564584124654e-324",
                           "2.2250738585072014e-308", "1e-320", "1e-400", "-1e-400", "1.7976931348623157e308",
                           "9007199254740993", "9007199254740993.0", "0.000000000000000000000000001",
                           "1234567.1234567", "7e-45", "100000000000000000000000.5"};
    int bad = 0, fast = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        int a = number_agrees(fixed[i]);
        if (a < 0) { bad++; printf("# disagree: %s\n", fixed[i]); }
        fast += a > 0;
    }
    DF_CHECK(bad == 0);
    DF_CHECK(fast == (int)(sizeof fixed / sizeof fixed[0])); /* all inside the subset */
    /* random doubles and float32 values in the forms clients print */
    const char *fmts[] = {"%.17g", "%.9g", "%.6g", "%.3e", "%.15g", "%.1f", "%.12f", "%g"};
    uint64_t s = 88172645463325252ull;
    int n = 0;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double d;
        if (i % 3 == 0) {
            uint64_t bits = s & ~(0x7FFull << 52);
            bits |= (uint64_t)(1023 - 80 + (int)((s >> 52) % 160)) << 52; /* 1e-24 .. 1e24 */
            memcpy(&d, &bits, 8);
        } else if (i % 3 == 1) {
            uint32_t fb = (uint32_t)s;
            if (((fb >> 23) & 0xFF) == 0xFF) fb &= ~(1u << 30);
            float f;
            memcpy(&f, &fb, 4);
            d = f;
        } else {
            d = (double)(int64_t)(s >> (s & 31)) * ((s & 64) ? -1 : 1);
        }
        char t[64];
        snprintf(t, sizeof t, fmts[i % 8], d);
        int a = number_agrees(t);
        if (a < 0 && bad++ < 5) printf("# disagree: %s\n", t);
        n += a > 0;
    }
    printf("# %d of 200000 random numbers read by the subset reader, all equal to strtod\n", n);
    DF_CHECK(bad == 0);
    DF_CHECK(n > 190000); /* declined only where jansson must decide */
    /* declined: not JSON numbers, or outside the subset */
    const char *decl[] = {"01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "1E-", "--1", "1.5.3",
                          "0x10", "NaN", "nan", "Infinity", "-Infinity", "inf", "1e400", "-1e400",
                          "1e999999999999", "1234567890123456789", "99999999999999999999",
                          "1_000", "1,", "tru", "nul", "0.1234567890123456789012345678901234567890123456789012345678901234567"};
    for (size_t i = 0; i < sizeof decl / sizeof decl[0]; i++) {
        char buf[128];
        snprintf(buf, sizeof buf, "[%s]", decl[i]);
        DF_CHECK_MSG(kj(buf) == DF_KJ_FALLBACK, "accepted %s", decl[i]);
    }
}

/* Canonical text of a document: keys sorted, reals as %a. */
static const df_kj_doc_t *dump_doc;
static void dump(const df_kj_node_t *v, char **p, char *end)
{
    if (v->type == DF_KJ_ARR && v->packed) {
        *p += snprintf(*p, (size_t)(end - *p), "[");
        for (size_t i = 0; i < v->n; i++) {
            df_kj_node_t e;
            if (df_kj_num_at(dump_doc, v, i, &e)) dump(&e, p, end);
            *p += snprintf(*p, (size_t)(end - *p), ",");
        }
        *p += snprintf(*p, (size_t)(end - *p), "]");
        return;
    }
    switch (v->type) {
    case DF_KJ_NULL: *p += snprintf(*p, (size_t)(end - *p), "null"); break;
    case DF_KJ_TRUE: *p += snprintf(*p, (size_t)(end - *p), "true"); break;
    case DF_KJ_FALSE: *p += snprintf(*p, (size_t)(end - *p), "false"); break;
    case DF_KJ_INT: *p += snprintf(*p, (size_t)(end - *p), "i%lld", (long long)v->u.i); break;
    case DF_KJ_REAL: *p += snprintf(*p, (size_t)(end - *p), "r%a", v->u.d); break;
    case DF_KJ_STR: *p += snprintf(*p, (size_t)(end - *p), "s%u:%s", v->n, v->u.s); break;
    case DF_KJ_ARR:
        *p += snprintf(*p, (size_t)(end - *p), "[");
        for (size_t i = 0; i < v->n; i++) dump(df_kj_at(v, i), p, end), *p += snprintf(*p, (size_t)(end - *p), ",");
        *p += snprintf(*p, (size_t)(end - *p), "]");
        break;
    case DF_KJ_OBJ: {
        const df_kj_node_t *c = v + v->u.rel;
        int order[64], m = (int)v->n;
        for (int i = 0; i < m && i < 64; i++) order[i] = i;
        for (int i = 1; i < m && i < 64; i++) /* insertion sort by key */
            for (int j = i; j > 0 && strcmp(c[2 * order[j - 1]].u.s, c[2 * order[j]].u.s) > 0; j--) {
                int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
            }
        *p += snprintf(*p, (size_t)(end - *p), "{");
        for (int i = 0; i < m && i < 64; i++) {
            *p += snprintf(*p, (size_t)(end - *p), "%s:", c[2 * order[i]].u.s);
            dump(&c[2 * order[i] + 1], p, end);
            *p += snprintf(*p, (size_t)(end - *p), ",");
        }
        *p += snprintf(*p, (size_t)(end - *p), "}");
        break;
    }
    }
}

static void test_documents_vs_jansson(void)
{
    const char *docs[] = {
        "{}", "[]", " \t\r\n{ } \n", "[[],{},[[]],{\"a\":{}}]",
        "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\",\"f\":-2.5e-3}}",
        "[1, 2 ,3 , [ 4 , [ 5 ] ] ]",
        "{\"id\":\"x\",\"parameters\":{\"encoding\":\"float16\",\"timeout_us\":100000,\"time\":0.5},"
        "\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3,4.5]]}],"
        "\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":true}}]}",
        "{\"\":\"\",\" \":\"~!#$%&'()*+,-./:;<=>?@[]^_`{|}\"}",
        "[1,\"a\",2,[3],[],[4,5],{\"b\":[6]},-7.5]", "[[1,2],[3,4]]", "[[[1]],[[2,3.5]]]",
        "[[],[1],[\"x\"],[1,\"x\"],[\"x\",1]]", "{\"a\\\"b\":[\"\\u0041\\n\\t\\/\\\\\"]}",
        "[\"\xc3\xa9\\u00e9\\ud834\\udd1e\xf0\x9d\x84\x9e\x7f\"]",
    };
    static char a[8192], b[8192];
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        DF_CHECK_MSG(kj(docs[i]) == DF_KJ_OK, "declined doc %zu", i);
        char *p = a;
        dump_doc = &doc;
        dump(doc.root, &p, a + sizeof a);
        json_t *j = json_loads(docs[i], JSON_REJECT_DUPLICATES, NULL);
        DF_CHECK(j != NULL);
        df_kj_doc_t d2 = {0};
        DF_CHECK(df_kj_from_jansson(&d2, j) == DF_KJ_OK);
        p = b;
        dump_doc = &d2;
        dump(d2.root, &p, b + sizeof b);
        DF_CHECK_MSG(!strcmp(a, b), "doc %zu: %s vs %s", i, a, b);
        json_decref(j);
        df_kj_doc_free(&d2);
    }
    /* lookups */
    DF_CHECK(kj("{\"ab\":1,\"a\":2,\"b\":[3,4]}") == DF_KJ_OK);
    DF_CHECK(df_kj_get(doc.root, "a")->u.i == 2 && df_kj_get(doc.root, "ab")->u.i == 1);
    DF_CHECK(df_kj_get(doc.root, "c") == NULL && df_kj_get(df_kj_get(doc.root, "b"), "a") == NULL);
    df_kj_node_t e;
    DF_CHECK(df_kj_size(df_kj_get(doc.root, "b")) == 2 &&
             df_kj_num_at(&doc, df_kj_get(doc.root, "b"), 1, &e) && e.u.i == 4);
    DF_CHECK(!df_kj_num_at(&doc, df_kj_get(doc.root, "b"), 2, &e) && df_kj_at(doc.root, 0) == NULL);
    /* packed arrays: df_kj_at answers NULL for them; consecutive ones are
     * contiguous in the number arrays */
    DF_CHECK(kj("[[1,2],[3,4.5],[\"x\",6]]") == DF_KJ_OK);
    const df_kj_node_t *r0 = df_kj_at(doc.root, 0), *r1 = df_kj_at(doc.root, 1), *r2 = df_kj_at(doc.root, 2);
    DF_CHECK(r0 && r0->packed && r1 && r1->packed && r2 && !r2->packed);
    DF_CHECK(r0 && r1 && df_kj_at(r0, 0) == NULL && r1->u.rel == r0->u.rel + 2);
    DF_CHECK(df_kj_num_at(&doc, r1, 1, &e) && e.type == DF_KJ_REAL && e.u.d == 4.5);
    DF_CHECK(df_kj_num_at(&doc, r2, 1, &e) && e.type == DF_KJ_INT && e.u.i == 6);
    DF_CHECK(!df_kj_num_at(&doc, r2, 0, &e) && df_kj_is(df_kj_at(r2, 0), DF_KJ_STR));
}

/* Strings: every case either declined, or read as jansson reads it
 * (bytes and length); the must-read and must-decline lists pin the
 * subset. */
static void test_strings_vs_jansson(void)
{
    const char *must_read[] = {
        "\\\"", "\\\\", "\\/", "\\b\\f\\n\\r\\t", "\\u0041", "\\u00e9", "\\u20AC", "\\uFFFF",
        "\\ud834\\udd1e", "\\uDBFF\\uDFFF", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf",
        "\xee\x80\x80", "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "a\x7f", "\\u0001",
    };
    const char *must_decline[] = {
        "\\u0000", "\\ud834", "\\ud834x", "\\ud834\\u0041", "\\udd1e", "\\x41", "\\u12", "\\u12g4", "\\",
        "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xed\xbf\xbf",
        "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\x80",
        "\xc3", "\xe2\x82", "\xf0\x9d\x84", "\xc3\x28", "a\x01b", "a\tb", "a\nb",
    };
    char doc_text[128], a[512], b[512];
    int n_read = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *const *list = pass ? must_decline : must_read;
        size_t n = pass ? sizeof must_decline / sizeof *must_decline : sizeof must_read / sizeof *must_read;
        for (size_t i = 0; i < n; i++) {
            snprintf(doc_text, sizeof doc_text, "{\"k%s\":[\"%s\"]}", list[i], list[i]);
            int rc = kj(doc_text);
            json_t *j = json_loads(doc_text, JSON_REJECT_DUPLICATES, NULL);
            if (pass) {
                DF_CHECK_MSG(rc == DF_KJ_FALLBACK && doc.err_what, "read case %zu (%s)", i, doc_text);
                DF_CHECK_MSG(j == NULL, "jansson reads must-decline case %zu", i);
            } else {
                DF_CHECK_MSG(rc == DF_KJ_OK && j, "case %zu (%s): rc %d, %s", i, doc_text, rc,
                             doc.err_what ? doc.err_what : "");
            }
            if (rc == DF_KJ_OK && j) {
                char *p = a;
                dump_doc = &doc;
                dump(doc.root, &p, a + sizeof a);
                df_kj_doc_t d2 = {0};
                DF_CHECK(df_kj_from_jansson(&d2, j) == DF_KJ_OK);
                p = b;
                dump_doc = &d2;
                dump(d2.root, &p, b + sizeof b);
                DF_CHECK_MSG(!strcmp(a, b), "case %zu: %s vs %s", i, a, b);
                df_kj_doc_free(&d2);
                n_read++;
            }
            json_decref(j);
        }
    }
    DF_CHECK(n_read == (int)(sizeof must_read / sizeof *must_read));
    /* every byte value after a valid prefix, as the second and third byte
     * of a sequence: declined exactly when jansson refuses */
    int differ = 0;
    for (int c1 = 0x80; c1 < 0x100; c1++)
        for (int c2 = 0x00; c2 < 0x100; c2 += 1) {
            char t[32];
            int m = snprintf(t, sizeof t, "[\"%c%c\x80\x80\"]", c1, c2 ? c2 : ' ');
            int rc = df_kj_parse(&doc, t, (size_t)m);
            json_t *j = json_loadb(t, (size_t)m, 0, NULL);
            if ((rc == DF_KJ_OK) != (j != NULL)) differ++;
            if (rc == DF_KJ_OK && j) {
                const df_kj_node_t *sv = df_kj_at(doc.root, 0);
                const json_t *js = json_array_get(j, 0);
                if (!sv || sv->n != json_string_length(js) || memcmp(sv->u.s, json_string_value(js), sv->n))
                    differ++;
            }
            json_decref(j);
        }
    DF_CHECK_MSG(differ == 0, "%d two-byte prefixes read differently from jansson", differ);
}

/* max_bytes: a flat numeric array stays within 4.5x + a little of its text;
 * a budget below that, or tiny nested values beyond it, is DF_KJ_LIMIT. */
static void test_memory_budget(void)
{
    size_t n = 1 << 20;
    char *t = malloc(2 * n + 16);
    char *p = t;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) { *p++ = '0'; *p++ = ','; }
    p[-1] = ']';
    size_t len = (size_t)(p - t);
    df_kj_doc_t d = {0};
    d.max_bytes = 5 * len;
    DF_CHECK(df_kj_parse(&d, t, len) == DF_KJ_OK && d.root && d.root->packed && d.root->n == n);
    DF_CHECK_MSG(d.used <= 9 * n + 2 * sizeof(df_kj_node_t) + 64, "used %zu for %zu numbers", d.used, n);
    d.max_bytes = 4 * len;
    DF_CHECK(df_kj_parse(&d, t, len) == DF_KJ_LIMIT && d.err_what);
    /* [[],[],...]: 32 bytes of nodes (stack, then nodes) per 3 bytes */
    p = t;
    *p++ = '[';
    for (size_t i = 0; i < n / 2; i++) { *p++ = '['; *p++ = ']'; *p++ = ','; }
    p[-1] = ']';
    len = (size_t)(p - t);
    d.max_bytes = 10 * len;
    DF_CHECK(df_kj_parse(&d, t, len) == DF_KJ_LIMIT);
    d.max_bytes = 0; /* no limit */
    DF_CHECK(df_kj_parse(&d, t, len) == DF_KJ_OK);
    df_kj_doc_free(&d);
    DF_CHECK(d.max_bytes == 0 && d.nodes == NULL);
    free(t);
}

static void test_declined(void)
{
    /* jansson's business: syntax errors, escapes, UTF-8, control bytes,
     * duplicate keys, deep nesting, scalars at the top, trailing bytes */
    const char *decl[] = {"", " ", "1", "\"a\"", "null", "{", "}", "[1,]", "[,1]", "{\"a\":1,}",
                          "{\"a\" 1}", "{a:1}", "{'a':1}", "{\"a\":1}}", "{\"a\":1} x", "[1] [2]",
                          "[\"\xff\"]", "[\"\\u0000\"]", "[\"\\ud800\"]",
                          "[\"a\tb\"]", "{\"a\":1,\"a\":2}", "{\"a\":1,\"b\":{},\"a\":3}", "[True]",
                          "{\"a\\u0000\":1}", "{\"\\u0061\":1,\"a\":2}",
                          "[nulll]", "[1 2]", "{\"a\":1 \"b\":2}", "[\"unterminated]", "[1,2", "[1,2,"};
    for (size_t i = 0; i < sizeof decl / sizeof decl[0]; i++) {
        DF_CHECK_MSG(kj(decl[i]) == DF_KJ_FALLBACK, "accepted case %zu: %s", i, decl[i]);
        DF_CHECK_MSG(doc.err_what != NULL && doc.err_at <= strlen(decl[i]), "case %zu: no reason", i);
    }
    DF_CHECK(kj("{\"a\":[1,2,x]}") == DF_KJ_FALLBACK && doc.err_at == 10 &&
             !strcmp(doc.err_what, "invalid token"));
    DF_CHECK(kj("{\"a\":1,\"a\":2}") == DF_KJ_FALLBACK && doc.err_at == 7 &&
             strstr(doc.err_what, "duplicate"));
    DF_CHECK(df_kj_parse(&doc, "[1]\0", 4) == DF_KJ_FALLBACK); /* NUL byte */
    char deep[200];
    memset(deep, '[', DF_KJ_MAX_DEPTH);
    memset(deep + DF_KJ_MAX_DEPTH, ']', DF_KJ_MAX_DEPTH);
    DF_CHECK(df_kj_parse(&doc, deep, 2 * DF_KJ_MAX_DEPTH) == DF_KJ_OK);
    memset(deep, '[', DF_KJ_MAX_DEPTH + 1);
    memset(deep + DF_KJ_MAX_DEPTH + 1, ']', DF_KJ_MAX_DEPTH + 1);
    DF_CHECK(df_kj_parse(&doc, deep, 2 * DF_KJ_MAX_DEPTH + 2) == DF_KJ_FALLBACK);
    char wide[2048], *p = wide;
    p += sprintf(p, "{");
    for (int i = 0; i <= DF_KJ_MAX_MEMBERS; i++) p += sprintf(p, "%s\"k%d\":%d", i ? "," : "", i, i);
    p += sprintf(p, "}");
    DF_CHECK(kj(wide) == DF_KJ_FALLBACK);
    /* every proper prefix of a valid request is declined (and invalid) */
    const char *req = "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[1,4],"
                      "\"data\":[0.25,-1.5e-3,true,null]}],\"outputs\":[{\"name\":\"positions\"}]}";
    size_t n = strlen(req), declined = 0;
    for (size_t k = 0; k < n; k++) {
        declined += df_kj_parse(&doc, req, k) == DF_KJ_FALLBACK;
        json_t *j = json_loadb(req, k, 0, NULL);
        DF_CHECK(j == NULL);
        json_decref(j);
    }
    DF_CHECK(declined == n);
    DF_CHECK(df_kj_parse(&doc, req, n) == DF_KJ_OK);
}

int main(void)
{
    DF_RUN(test_numbers_vs_strtod);
    DF_RUN(test_documents_vs_jansson);
    DF_RUN(test_declined);
    DF_RUN(test_strings_vs_jansson);
    DF_RUN(test_memory_budget);
    df_kj_doc_free(&doc);
    return dftest_exit();
}

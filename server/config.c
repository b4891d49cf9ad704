/* config.c — daemon configuration: defaults, `key = value` files, options.
 *
 * DESIGN
 * A table maps each key to a field and a type (string, int, size, bool,
 * float) with bounds, so the file parser, the command line and the docs
 * agree on one list. Errors name the file, line and key. The tokens are
 * read from token_file by df_config_finish and never printed (errors name
 * the file and the line, not the token).
 */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { T_STR, T_INT, T_I64, T_U64, T_BOOL, T_FLOAT };

typedef struct {
    const char *key;
    int type;
    size_t off;
    size_t cap;     /* strings */
    double lo, hi;  /* numbers */
} key_t_;

#define S(k, f) {k, T_STR, offsetof(df_config_t, f), sizeof(((df_config_t *)0)->f), 0, 0}
#define I(k, f, lo, hi) {k, T_INT, offsetof(df_config_t, f), 0, lo, hi}
#define L(k, f, lo, hi) {k, T_I64, offsetof(df_config_t, f), 0, lo, hi}
#define U(k, f, lo, hi) {k, T_U64, offsetof(df_config_t, f), 0, lo, hi}
#define BOOL(k, f) {k, T_BOOL, offsetof(df_config_t, f), 0, 0, 1}
#define FL(k, f, lo, hi) {k, T_FLOAT, offsetof(df_config_t, f), 0, lo, hi}

static const key_t_ keys[] = {
    S("repository", repository),
    S("host", host),
    I("http_port", http_port, -1, 65535),
    I("socket_port", socket_port, -1, 65535),
    S("unix", unix_path),
    I("workers", workers, 1, 256),
    I("http_threads", http_threads, 1, 64),
    I("http_connection_memory", http_connection_memory, 4096, 1 << 20),
    S("token_file", token_file),
    S("www", www_dir),
    S("cors_origin", cors_origin),
    S("ready_file", ready_file),
    U("max_body_bytes", max_body_bytes, 1024, 4e9),
    U("max_frame_bytes", max_frame_bytes, 1024, 4e9),
    U("max_input_buffered_bytes", max_input_buffered_bytes, 65536, 1e13),
    I("max_json_depth", max_json_depth, 2, 64),
    L("max_json_elements", max_json_elements, 1, 1e9),
    U("max_output_bytes", max_output_bytes, 1024, 1e12),
    U("max_output_inflight_bytes", max_output_inflight_bytes, 1024, 1e13),
    U("pool_keep_bytes", pool_keep_bytes, 0, 1e12),
    I("max_connections", max_connections, 1, 100000),
    I("max_inflight_per_conn", max_inflight_per_conn, 1, 65536),
    I("idle_timeout_s", idle_timeout_s, 1, 86400),
    I("header_timeout_s", header_timeout_s, 1, 86400),
    I("body_timeout_s", body_timeout_s, 1, 86400),
    I("max_connections_per_peer", max_connections_per_peer, 0, 100000),
    L("drain_timeout_ms", drain_timeout_ms, 0, 3600000),
    I("max_batch_size", max_batch_size, -1, 4096),
    L("max_queue_delay_us", max_queue_delay_us, -1, 10000000),
    I("max_queue_length", max_queue_length, -1, 1000000),
    L("timeout_us", timeout_us, -1, 3600e6),
    L("inline_max_us", inline_max_us, -1, 1000000),
    I("batch_split_min", batch_split_min, 0, 65536),
    BOOL("batching", batching),
    I("max_sequences", max_sequences, 0, 1000000),
    L("sequence_idle_timeout_ms", sequence_idle_timeout_ms, 1, 86400000),
    FL("int16_margin", int16_margin, 0, 100),
    BOOL("log_requests", log_requests),
};

void df_config_default(df_config_t *c)
{
    memset(c, 0, sizeof *c);
    strcpy(c->host, "127.0.0.1");
    c->http_port = 8000;
    c->socket_port = 8001;
    c->workers = 2;
    c->http_threads = 2;
    c->http_connection_memory = 16384;
    /* www_dir "": found next to the executable by deformd (server/main.c) */
    c->max_body_bytes = 64ull << 20;
    c->max_frame_bytes = 64ull << 20;
    c->max_input_buffered_bytes = 512ull << 20;
    c->max_json_depth = 16;
    c->max_json_elements = 16 * 1024 * 1024;
    c->max_output_bytes = 64ull << 20;
    c->max_output_inflight_bytes = 512ull << 20;
    c->pool_keep_bytes = 64ull << 20;
    c->max_connections = 1024;
    c->max_inflight_per_conn = 256;
    c->idle_timeout_s = 60;
    c->header_timeout_s = 30;
    c->body_timeout_s = 60;
    c->max_connections_per_peer = 256;
    c->drain_timeout_ms = 10000;
    c->max_batch_size = -1;
    c->max_queue_delay_us = -1;
    c->max_queue_length = -1;
    c->timeout_us = -1;
    c->inline_max_us = -1;
    c->batch_split_min = 16;
    c->batching = 1;
    c->max_sequences = 1024;
    c->sequence_idle_timeout_ms = 60000;
    c->int16_margin = 0.5f;
}

static int parse_num(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || errno) return -1;
    /* size suffixes for byte counts */
    if (*end == 'k' || *end == 'K') { d *= 1024; end++; }
    else if (*end == 'M') { d *= 1024.0 * 1024; end++; }
    else if (*end == 'G') { d *= 1024.0 * 1024 * 1024; end++; }
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    *out = d;
    return 0;
}

int df_config_set(df_config_t *c, const char *key, const char *value,
                  df_error_t *err)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const key_t_ *k = &keys[i];
        if (strcmp(k->key, key)) continue;
        char *p = (char *)c + k->off;
        if (k->type == T_STR) {
            if (strlen(value) >= k->cap)
                return df_error_set(err, DF_ELIMIT, "%s: value longer than %zu bytes",
                                    key, k->cap - 1);
            strcpy(p, value);
            return DF_OK;
        }
        if (k->type == T_BOOL) {
            int b;
            if (!strcasecmp(value, "1") || !strcasecmp(value, "true") ||
                !strcasecmp(value, "yes") || !strcasecmp(value, "on")) b = 1;
            else if (!strcasecmp(value, "0") || !strcasecmp(value, "false") ||
                     !strcasecmp(value, "no") || !strcasecmp(value, "off")) b = 0;
            else
                return df_error_set(err, DF_EINVAL, "%s: expected true/false, got '%s'",
                                    key, value);
            *(int *)p = b;
            return DF_OK;
        }
        double d;
        if (parse_num(value, &d))
            return df_error_set(err, DF_EINVAL, "%s: expected a number, got '%s'", key, value);
        if (d < k->lo || d > k->hi)
            return df_error_set(err, DF_EINVAL, "%s: %s out of range [%g, %g]", key,
                                value, k->lo, k->hi);
        if (k->type != T_FLOAT && d != (double)(int64_t)d)
            return df_error_set(err, DF_EINVAL, "%s: expected an integer, got '%s'", key,
                                value);
        switch (k->type) {
        case T_INT: *(int *)p = (int)d; break;
        case T_I64: *(int64_t *)p = (int64_t)d; break;
        case T_U64: *(uint64_t *)p = (uint64_t)d; break;
        case T_FLOAT: *(float *)p = (float)d; break;
        }
        return DF_OK;
    }
    if (!strcmp(key, "auth")) {
        if (!strcmp(value, "repository")) c->auth_all = 0;
        else if (!strcmp(value, "all")) c->auth_all = 1;
        else
            return df_error_set(err, DF_EINVAL,
                                "auth: expected 'repository' (a token for the repository API "
                                "only) or 'all' (a token on every endpoint but health), got '%s'",
                                value);
        return DF_OK;
    }
    if (!strcmp(key, "token"))
        return df_error_set(err, DF_EINVAL,
                            "token: put the token in a file and set token_file");
    return df_error_set(err, DF_ENOTFOUND, "unknown configuration key '%s'", key);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

int df_config_load_file(df_config_t *c, const char *path, df_error_t *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return df_error_set(err, DF_EIO, "%s: cannot open: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, rc = DF_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = df_error_set(err, DF_ELIMIT, "%s:%d: line too long", path, lineno);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = df_error_set(err, DF_EINVAL, "%s:%d: expected 'key = value'", path, lineno);
            break;
        }
        *eq = 0;
        char *k = trim(s), *v = trim(eq + 1);
        size_t vl = strlen(v);
        if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') { v[vl - 1] = 0; v++; }
        df_error_t e2 = {0};
        if (df_config_set(c, k, v, &e2)) {
            rc = df_error_set(err, e2.code, "%s:%d: %s", path, lineno, e2.msg);
            break;
        }
    }
    fclose(f);
    return rc;
}

/* token_file: one token per line; blank lines and lines starting with #
 * are skipped. Every token is 8..255 printable characters without spaces.
 * Errors name the file and the line, never the token. */
static int read_tokens(df_config_t *c, df_error_t *err)
{
    FILE *f = fopen(c->token_file, "r");
    if (!f)
        return df_error_set(err, DF_EIO, "token_file %s: cannot open: %s", c->token_file,
                            strerror(errno));
    char line[1024];
    int lineno = 0, rc = DF_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = df_error_set(err, DF_ELIMIT, "token_file %s:%d: line longer than %zu bytes",
                              c->token_file, lineno, sizeof line - 2);
            break;
        }
        char *t = trim(line);
        if (!*t || *t == '#') continue;
        size_t n = strlen(t);
        if (n < 8) {
            rc = df_error_set(err, DF_EINVAL, "token_file %s:%d: a token must be at least 8 characters",
                              c->token_file, lineno);
            break;
        }
        if (n >= DF_TOKEN_MAX) {
            rc = df_error_set(err, DF_ELIMIT, "token_file %s:%d: token longer than %d bytes",
                              c->token_file, lineno, DF_TOKEN_MAX - 1);
            break;
        }
        int bad = 0;
        for (char *p = t; *p; p++) bad |= !isgraph((unsigned char)*p);
        if (bad) {
            rc = df_error_set(err, DF_EINVAL,
                              "token_file %s:%d: a token has a space or a non-printable character",
                              c->token_file, lineno);
            break;
        }
        if (c->n_tokens >= DF_MAX_TOKENS) {
            rc = df_error_set(err, DF_ELIMIT, "token_file %s:%d: more than %d tokens",
                              c->token_file, lineno, DF_MAX_TOKENS);
            break;
        }
        memset(c->tokens[c->n_tokens], 0, DF_TOKEN_MAX);
        memcpy(c->tokens[c->n_tokens], t, n);
        c->token_len[c->n_tokens] = (int)n;
        if ((int)n + 1 > c->token_cmp) c->token_cmp = (int)n + 1;
        c->n_tokens++;
    }
    if (ferror(f) && rc == DF_OK)
        rc = df_error_set(err, DF_EIO, "token_file %s: read error", c->token_file);
    fclose(f);
    memset(line, 0, sizeof line);
    if (rc == DF_OK && c->n_tokens == 0)
        rc = df_error_set(err, DF_EINVAL, "token_file %s: no token in it (one per line; # comments)",
                          c->token_file);
    return rc;
}

int df_config_token_match(const df_config_t *c, const char *tok, size_t len)
{
    unsigned char a[DF_TOKEN_MAX];
    memset(a, 0, sizeof a);
    int len_ok = tok && len > 0 && len < DF_TOKEN_MAX;
    if (len_ok) memcpy(a, tok, len);
    unsigned found = 0;
    for (int k = 0; k < c->n_tokens; k++) {
        unsigned diff = (unsigned)c->token_len[k] ^ (unsigned)len;
        for (int i = 0; i < c->token_cmp; i++)
            diff |= (unsigned)((unsigned char)c->tokens[k][i] ^ a[i]);
        found |= (unsigned)(diff == 0);
    }
    memset(a, 0, sizeof a);
    return len_ok && found;
}

int df_config_finish(df_config_t *c, df_error_t *err)
{
    c->n_tokens = 0;
    c->token_cmp = 0;
    if (c->token_file[0]) {
        int rc = read_tokens(c, err);
        if (rc) return rc;
    }
    if (c->auth_all && !c->n_tokens)
        return df_error_set(err, DF_EINVAL,
                            "auth = all needs token_file (the tokens clients must present)");
    if (!c->repository[0])
        return df_error_set(err, DF_EINVAL, "no repository: use --repository DIR");
    if (!c->batching) c->max_batch_size = 1;
    return DF_OK;
}

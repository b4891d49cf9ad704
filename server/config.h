/* config.h — the daemon's configuration: defaults, `key = value` file,
 * command line (server/config.c).
 *
 * DESIGN
 * One flat struct, filled in three layers: built-in defaults, then the
 * config file (--config FILE), then command-line options, so the command
 * line wins. Every key is documented in docs/configuration.md and
 * config/deformd.conf. The struct is immutable once the daemon starts and
 * every thread may read it. The bearer tokens are read from token_file
 * (one per line) and kept only here; they are never logged, and
 * df_config_token_match compares a presented token with every one of them
 * in constant time.
 */
#ifndef DF_SERVER_CONFIG_H
#define DF_SERVER_CONFIG_H

#include "df.h"
#include <stdint.h>

#define DF_PATH_MAX 1024
#define DF_MAX_TOKENS 64   /* tokens in token_file */
#define DF_TOKEN_MAX 256   /* bytes of one token, with its NUL */

typedef struct df_config {
    char repository[DF_PATH_MAX]; /* model repository directory */
    char host[256];               /* listen address, default 127.0.0.1 */
    int http_port;                /* default 8000; 0 = any free port; -1 off */
    int socket_port;              /* default 8001; 0 = any free port; -1 off */
    char unix_path[DF_PATH_MAX];  /* Unix socket path, "" = none */
    int workers;                  /* worker threads, default 2 */
    int http_threads;             /* MHD threads, default 2 */
    int http_connection_memory;   /* MHD's per-connection pool (request line,
                                     headers, read/write buffers), default 16 KiB */
    char tokens[DF_MAX_TOKENS][DF_TOKEN_MAX]; /* bearer tokens, zero-padded
                                   * (none = admin API disabled) */
    int token_len[DF_MAX_TOKENS];
    int n_tokens;
    int token_cmp;                /* bytes compared per token: the longest
                                   * token + 1 (the time depends on the
                                   * configured tokens only) */
    char token_file[DF_PATH_MAX];
    int auth_all;                 /* auth = all: every endpoint but health
                                   * (and the socket's PING) needs a token;
                                   * 0 (auth = repository): only the
                                   * repository API */
    char www_dir[DF_PATH_MAX];    /* static files for /viewer/; "" by
                                   * default: deformd looks next to its
                                   * executable (<exe dir>/../server/www,
                                   * <exe dir>/../share/deformd/www) and
                                   * stays "" when neither has index.html */
    char cors_origin[256];        /* Access-Control-Allow-Origin, "" none */
    char ready_file[DF_PATH_MAX]; /* written with the bound ports when ready */
    uint64_t max_body_bytes;      /* HTTP request body, default 64 MiB */
    uint64_t max_frame_bytes;     /* socket frame, default 64 MiB */
    uint64_t max_input_buffered_bytes; /* per front: request bodies / frame
                                   * payloads held and their JSON reading,
                                   * default 512 MiB */
    int max_json_depth;           /* JSON nesting, default 16 */
    int64_t max_json_elements;    /* numbers in one request, default 16M */
    uint64_t max_output_bytes;    /* one answer (buffers + text), default 64 MiB */
    uint64_t max_output_inflight_bytes; /* all answers in flight, default 512 MiB */
    uint64_t pool_keep_bytes;     /* buffers each request pool keeps, default 64 MiB */
    int max_connections;          /* default 1024 */
    int max_inflight_per_conn;    /* socket pipelining, default 256 */
    int idle_timeout_s;           /* connection idle timeout, default 60 */
    int header_timeout_s;         /* HTTP: request line + headers, default 30 */
    int body_timeout_s;           /* HTTP body / socket frame, default 60 */
    int max_connections_per_peer; /* per remote address and front, default 256; 0 = none */
    int64_t drain_timeout_ms;     /* SIGTERM drain, default 10000 */
    /* engine overrides; < 0 = use each model's config.json value */
    int max_batch_size;
    int64_t max_queue_delay_us;
    int max_queue_length;
    int64_t timeout_us;
    int64_t inline_max_us;
    int batch_split_min;          /* split a ready queue between idle workers
                                   * into pieces >= this (0 never), default 16 */
    int batching;                 /* 0 forces max_batch_size 1 (bench) */
    int max_sequences;            /* live sequences (Triton's sequence
                                   * batcher), default 1024; 0: none */
    int64_t sequence_idle_timeout_ms; /* a sequence with no request for this
                                   * long expires, default 60000 */
    float int16_margin;           /* quantization box margin, default 0.5 */
    int log_requests;             /* one log line per request, default 0 */
} df_config_t;

void df_config_default(df_config_t *c /* OUT */);
/* Apply a `key = value` file (# comments). Unknown keys and bad values are
 * errors naming the file, line and key. */
int df_config_load_file(df_config_t *c, const char *path, df_error_t *err);
/* Apply one key (the same names as the file; command-line options map to
 * them). */
int df_config_set(df_config_t *c, const char *key, const char *value,
                  df_error_t *err);
/* Read token_file into tokens (one per line, # comments); checks the rest. */
int df_config_finish(df_config_t *c, df_error_t *err);
/* 1 when tok[0..len) equals one of the configured tokens. Compares with
 * every token, each over the same token_cmp bytes, whatever matches: the
 * time does not depend on the token presented. */
int df_config_token_match(const df_config_t *c, const char *tok, size_t len);

#endif

/* sock.h — the binary socket front (server/sock.c): docs/protocol.md over
 * libuv, on TCP and/or a Unix socket.
 *
 * The front owns one libuv loop on its own thread. Frames are read
 * incrementally and decoded with proto/frame.h; INFER requests become
 * engine jobs (server/job.h); a worker's completion is handed back with
 * uv_async_send and answered with one uv_write of several buffers (header
 * and metadata, then the job's own output buffers: no copies). See the
 * DESIGN comment in sock.c for threads, backpressure and lifetimes.
 */
#ifndef DF_SERVER_SOCK_H
#define DF_SERVER_SOCK_H

#include "config.h"
#include "job.h"

typedef struct df_sock df_sock_t;

typedef struct df_sock_config {
    char host[256];           /* TCP listen address */
    int port;                 /* TCP port; 0 = any free port; < 0 = no TCP */
    char unix_path[DF_PATH_MAX]; /* "" = no Unix socket */
    uint32_t max_frame_bytes; /* payload limit, default 64 MiB */
    int max_inflight;         /* per connection, default 256 */
    int idle_timeout_s;       /* default 60: nothing received and nothing in
                                 flight; or answers queued and none written */
    int body_timeout_s;       /* default 60: a frame, from its first byte */
    int max_connections_per_peer; /* per remote address, default 256; 0 none */
    int max_connections;      /* default 1024 */
    size_t max_queued_bytes;  /* answers queued before reading pauses, 64 MiB */
    uint64_t max_input_buffered_bytes; /* all payloads held (declared lengths
                                          counted when their header arrives),
                                          default 512 MiB */
    size_t pool_keep_bytes;   /* buffers pooled requests keep, default 64 MiB */
    const df_config_t *auth;  /* borrowed: with auth_all, a connection must
                               * present one of its tokens (AUTH frame)
                               * before anything but PING; NULL: none */
} df_sock_config_t;

/* Defaults, then the daemon's configuration (host, socket_port, unix_path,
 * max_frame_bytes, max_inflight_per_conn, idle_timeout_s, max_connections). */
void df_sock_config_from(df_sock_config_t *out, const df_config_t *cfg /* may be NULL */);

/* Bind, listen and start the loop thread. srv and cfg are borrowed for the
 * front's lifetime. *out new: df_sock_stop. */
int df_sock_start(df_server_t *srv, const df_sock_config_t *cfg, df_sock_t **out,
                  df_error_t *err);
int df_sock_port(const df_sock_t *s);       /* bound TCP port, -1 if none */
/* Stop accepting connections (existing ones keep being served). */
void df_sock_quiesce(df_sock_t *s);
/* Close every connection, stop the loop thread, free. Call after
 * df_server_drain(): a job still in flight completes into a dropped answer. */
void df_sock_stop(df_sock_t **s);

/* Hooks server/main.c calls (weak there): one front per process. */
int df__sock_start_from_config(df_server_t *s, const df_config_t *cfg, int *port,
                               df_error_t *err);
void df__sock_quiesce(void);
void df__sock_stop(void);

#endif

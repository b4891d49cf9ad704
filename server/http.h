/* http.h — the HTTP front (server/http.c): KServe v2 over libmicrohttpd.
 *
 * cfg->http_threads MHD daemons, each with its own epoll thread, fed by one
 * acceptor thread (own listening socket; each new connection goes to the
 * daemon holding the fewest). Request
 * bodies are accumulated per connection up to cfg->max_body_bytes; an
 * inference request is decoded (proto/kserve.h), submitted to the engine,
 * and its connection suspended until the worker's done() resumes it, so a
 * stalled client never holds a worker and a worker never waits on a socket.
 */
#ifndef DF_SERVER_HTTP_H
#define DF_SERVER_HTTP_H

#include "config.h"
#include "job.h"

typedef struct df_http df_http_t;

/* Start listening on cfg->host:cfg->http_port (0: any free port). The
 * bound port goes to *port. *out new: df_http_stop. */
int df_http_start(df_server_t *s, const df_config_t *cfg, df_http_t **out, int *port,
                  df_error_t *err);
/* Stop accepting new connections (existing ones finish). */
void df_http_quiesce(df_http_t *h);
/* Stop the daemon and free (after df_server_drain). */
void df_http_stop(df_http_t **h);

#endif

/* peers.h — open connections per remote address, for
 * max_connections_per_peer (server/peers.c).
 *
 * DESIGN
 * One table per front: remote IP address (IPv4 or IPv6, without the port)
 * -> connections open. A linear array: a front holds at most
 * max_connections connections, so a scan costs well under a microsecond
 * per accept next to the accept itself. Not thread-safe: the HTTP front
 * guards its table with a mutex (acceptor and MHD threads); the socket
 * front's belongs to its loop thread. Unix-socket peers have no address
 * and are not counted.
 */
#ifndef DF_SERVER_PEERS_H
#define DF_SERVER_PEERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct df_peer_key {
    uint8_t a[16];
    uint8_t len;                  /* 4 or 16; 0: no address (not counted) */
} df_peer_key_t;

typedef struct df_peers {
    struct df__peer { df_peer_key_t k; int n; } *v; /* owned */
    size_t n, cap;
} df_peers_t;

/* The key of sa (its address, no port); len 0 for non-IP addresses. */
void df__peer_key(const struct sockaddr *sa, df_peer_key_t *k /* OUT */);
/* The address as text (inet_ntop). */
void df__peer_str(const df_peer_key_t *k, char *buf, size_t cap);
/* One more connection from k unless it already has `limit` (limit 0: no
 * limit). Returns 0, or -1 (over the limit, nothing counted), or -2 (out
 * of memory, nothing counted). Keys of length 0 always succeed. */
int df__peers_add(df_peers_t *p, const df_peer_key_t *k, int limit);
/* One connection from k fewer. */
void df__peers_del(df_peers_t *p, const df_peer_key_t *k);
void df__peers_free(df_peers_t *p);

#endif

/* peers.c — connection counts per remote address (see peers.h). */
#include "peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df__peer_key(const struct sockaddr *sa, df_peer_key_t *k)
{
    memset(k, 0, sizeof *k);
    if (!sa) return;
    if (sa->sa_family == AF_INET) {
        memcpy(k->a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        k->len = 4;
    } else if (sa->sa_family == AF_INET6) {
        memcpy(k->a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        k->len = 16;
    }
}

void df__peer_str(const df_peer_key_t *k, char *buf, size_t cap)
{
    if (!cap) return;
    buf[0] = 0;
    if (k->len == 4) inet_ntop(AF_INET, k->a, buf, (socklen_t)cap);
    else if (k->len == 16) inet_ntop(AF_INET6, k->a, buf, (socklen_t)cap);
    else snprintf(buf, cap, "(local)");
}

static struct df__peer *find(df_peers_t *p, const df_peer_key_t *k)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].k.len == k->len && !memcmp(p->v[i].k.a, k->a, k->len)) return &p->v[i];
    return NULL;
}

int df__peers_add(df_peers_t *p, const df_peer_key_t *k, int limit)
{
    if (!k->len) return 0;
    struct df__peer *e = find(p, k);
    if (e) {
        if (limit > 0 && e->n >= limit) return -1;
        e->n++;
        return 0;
    }
    if (p->n == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        struct df__peer *nv = realloc(p->v, nc * sizeof *nv);
        if (!nv) return -2;
        p->v = nv;
        p->cap = nc;
    }
    p->v[p->n].k = *k;
    p->v[p->n].n = 1;
    p->n++;
    return 0;
}

void df__peers_del(df_peers_t *p, const df_peer_key_t *k)
{
    if (!k->len) return;
    struct df__peer *e = find(p, k);
    if (!e) return;
    if (--e->n == 0) *e = p->v[--p->n];
}

void df__peers_free(df_peers_t *p)
{
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* fixed_uv.c — baseline for `make bench-server`: the smallest sensible
 * libuv server for deformd's frame format (docs/protocol.md): it reads
 * length-prefixed frames (24-byte header, payload length at offset 20) and
 * answers each with a RESULT-typed frame carrying a fixed payload of N
 * bytes and the request's id, written with one uv_write of two buffers.
 * No decoding, no engine: the ceiling for the socket front.
 *
 *   fixed_uv PORT REPLY_BYTES   (PORT 0: any; prints "port=P" on stdout)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static char *payload;
static uint32_t payload_len;

typedef struct {
    uv_tcp_t tcp;
    char *buf;
    size_t len, cap;
} conn_t;

typedef struct {
    uv_write_t w;
    unsigned char hdr[24];
} wr_t;

static void on_close(uv_handle_t *h)
{
    conn_t *c = (conn_t *)h;
    free(c->buf);
    free(c);
}

static void on_written(uv_write_t *w, int status) { free(w); }

static void alloc_cb(uv_handle_t *h, size_t sug, uv_buf_t *b)
{
    conn_t *c = (conn_t *)h;
    if (c->cap - c->len < 65536) {
        c->cap = c->cap * 2 + 65536;
        c->buf = realloc(c->buf, c->cap);
    }
    b->base = c->buf + c->len;
    b->len = c->cap - c->len;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    conn_t *c = (conn_t *)s;
    if (n < 0) {
        uv_close((uv_handle_t *)s, on_close);
        return;
    }
    c->len += (size_t)n;
    size_t off = 0;
    while (c->len - off >= 24) {
        uint32_t len;
        memcpy(&len, c->buf + off + 20, 4);
        if (c->len - off < 24 + (size_t)len) break;
        wr_t *w = malloc(sizeof *w);
        memcpy(w->hdr, c->buf + off, 24);
        uint16_t type = 0x0011;
        memcpy(w->hdr + 6, &type, 2);
        memcpy(w->hdr + 20, &payload_len, 4);
        uv_buf_t bufs[2] = {uv_buf_init((char *)w->hdr, 24), uv_buf_init(payload, payload_len)};
        uv_write(&w->w, s, bufs, 2, on_written);
        off += 24 + len;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
}

static void on_conn(uv_stream_t *srv, int status)
{
    if (status < 0) return;
    conn_t *c = calloc(1, sizeof *c);
    uv_tcp_init(srv->loop, &c->tcp);
    if (uv_accept(srv, (uv_stream_t *)&c->tcp)) {
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, on_read);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fixed_uv PORT REPLY_BYTES\n");
        return 2;
    }
    payload_len = (uint32_t)atol(argv[2]);
    payload = calloc(1, payload_len + 8);
    uv_loop_t *loop = uv_default_loop();
    uv_tcp_t srv;
    uv_tcp_init(loop, &srv);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", atoi(argv[1]), &a);
    if (uv_tcp_bind(&srv, (const struct sockaddr *)&a, 0) ||
        uv_listen((uv_stream_t *)&srv, 1024, on_conn)) {
        fprintf(stderr, "fixed_uv: cannot listen\n");
        return 1;
    }
    struct sockaddr_storage ss;
    int l = sizeof ss;
    uv_tcp_getsockname(&srv, (struct sockaddr *)&ss, &l);
    printf("port=%d\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    fflush(stdout);
    return uv_run(loop, UV_RUN_DEFAULT);
}

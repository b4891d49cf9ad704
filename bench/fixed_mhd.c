/* fixed_mhd.c — baseline for `make bench-server`: the smallest sensible
 * libmicrohttpd server (internal epoll thread, like deformd's HTTP front)
 * that reads each request body and answers a fixed reply of N bytes. The
 * reply is queued only once the upload completed (see
 * libmicrohttpd 0.9.75 answers Connection: close when a response is
 * queued on the first call of the access handler).
 *
 *   fixed_mhd PORT REPLY_BYTES [THREADS]
 *   (PORT 0: any; prints "port=P" on stdout; THREADS > 1: an MHD thread
 *   pool of that size, as deformd's --http-threads)
 */
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *reply;
static size_t reply_len;

static enum MHD_Result on_req(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **con_cls)
{
    if (!*con_cls) {
        *con_cls = (void *)1;
        return MHD_YES;
    }
    if (*size) {
        *size = 0; /* consume */
        return MHD_YES;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(reply_len, reply, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fixed_mhd PORT REPLY_BYTES [THREADS]\n");
        return 2;
    }
    reply_len = (size_t)atol(argv[2]);
    unsigned threads = argc > 3 ? (unsigned)atoi(argv[3]) : 1;
    reply = calloc(1, reply_len + 1);
    memset(reply, 'x', reply_len);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)atoi(argv[1]), NULL, NULL,
        on_req, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, threads, MHD_OPTION_END);
    if (!d) {
        perror("MHD_start_daemon");
        return 1;
    }
    printf("port=%u\n", MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
    fflush(stdout);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGINT);
    sigprocmask(SIG_BLOCK, &s, NULL);
    int sig;
    sigwait(&s, &sig);
    MHD_stop_daemon(d);
    free(reply);
    return 0;
}

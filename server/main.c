/* main.c — bin/deformd: options, signals, lifecycle.
 *
 * DESIGN
 * Configuration comes from defaults, then --config FILE (`key = value`),
 * then command-line options. Startup: engine (workers + repository), then
 * the fronts (HTTP here, the socket front in sock.c when linked), then the
 * ready file (bound ports, for tests and scripts). The main thread then only
 * waits for signals with sigwait (all signals are blocked in every thread):
 * SIGHUP rescans the repository; SIGTERM/SIGINT stop accepting, drain the
 * in-flight requests within drain_timeout_ms, stop and exit 0 (exit 1
 * without cleanup if the drain timed out: in-flight jobs would otherwise
 * complete into torn-down fronts). One log line
 * per lifecycle event goes to stderr. The token is never logged.
 */
#include "config.h"
#include "http.h"
#include "job.h"
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void df__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The socket front (server/sock.c, another file): weak so the daemon builds
 * and serves HTTP without it. */
typedef struct df_sock df_sock_t;
int df__sock_start_from_config(df_server_t *s, const df_config_t *cfg, int *port,
                               df_error_t *err) __attribute__((weak));
void df__sock_quiesce(void) __attribute__((weak));
void df__sock_stop(void) __attribute__((weak));

static pthread_t g_main_thread;

/* Runs on a thread that does not block the signal (see main). */
static void forward_signal(int sig)
{
    int e = errno;
    pthread_kill(g_main_thread, sig);
    errno = e;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: deformd --repository DIR [options]\n"
            "  --repository DIR     model repository (REPO/<model>/config.json, <version>/)\n"
            "  --config FILE        `key = value` configuration file (config/deformd.conf)\n"
            "  --http-port N        HTTP port (default 8000; 0 = any free port; -1 = off)\n"
            "  --socket-port N      binary socket port (default 8001; 0 = any; -1 = off)\n"
            "  --unix PATH          also listen on a Unix socket\n"
            "  --host ADDR          listen address (default 127.0.0.1)\n"
            "  --workers N          worker threads (default 2)\n"
            "  --token-file FILE    bearer tokens, one per line (the repository API is\n"
            "                       disabled without them)\n"
            "  --auth WHAT          repository (default: tokens guard the repository API)\n"
            "                       or all (every endpoint but health, and the socket)\n"
            "  --www DIR            static files served at /viewer/ (default: next to the\n"
            "                       executable, <exe dir>/../server/www in a checkout,\n"
            "                       <exe dir>/../share/deformd/www when installed)\n"
            "  --ready-file FILE    write \"http=PORT socket=PORT\" once serving\n"
            "  --set KEY=VALUE      any configuration key (see docs/configuration.md)\n"
            "  --no-batching        max_batch_size 1 for every model (benchmarks)\n"
            "  --version, --help\n");
}

static const struct { const char *opt, *key; } optmap[] = {
    {"--repository", "repository"}, {"--http-port", "http_port"},
    {"--socket-port", "socket_port"}, {"--unix", "unix"},
    {"--host", "host"},           {"--workers", "workers"},
    {"--token-file", "token_file"}, {"--www", "www"},
    {"--ready-file", "ready_file"}, {"--cors-origin", "cors_origin"},
    {"--max-body-bytes", "max_body_bytes"}, {"--http-threads", "http_threads"},
    {"--auth", "auth"},
};

/* The viewer's directory. Explicit (--www DIR, config key www): taken as
 * given. Default: next to the executable (/proc/self/exe), so the daemon
 * started from any directory finds it: <exe dir>/../server/www (bin/deformd
 * of a checkout), then <exe dir>/../share/deformd/www (an installed prefix);
 * the first with an index.html wins and is stored as an absolute path.
 * Says on the log where /viewer/ serves from, or that there is no viewer
 * and which directories were tried; cfg->www_dir stays "" then (404). */
static void resolve_www(df_config_t *cfg)
{
    char idx[DF_PATH_MAX + 16], abs[PATH_MAX];
    if (cfg->www_dir[0]) {
        snprintf(idx, sizeof idx, "%s/index.html", cfg->www_dir);
        const char *shown = realpath(cfg->www_dir, abs) ? abs : cfg->www_dir;
        if (access(idx, R_OK) == 0)
            df__log("viewer: /viewer/ serves %s (www)", shown);
        else
            df__log("no viewer: /viewer/ answers 404: www %s has no readable index.html", shown);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        df__log("no viewer: /viewer/ answers 404: cannot read /proc/self/exe (%s) to find the "
                "web root next to the executable; set --www DIR", strerror(errno));
        return;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    static const char *const rel[] = {"../server/www", "../share/deformd/www"};
    char tried[2][PATH_MAX + 32];
    for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++) {
        snprintf(tried[k], sizeof tried[k], "%s/%s", exe, rel[k]);
        if (realpath(tried[k], abs)) snprintf(tried[k], sizeof tried[k], "%s", abs);
        snprintf(idx, sizeof idx, "%.*s/index.html", DF_PATH_MAX - 1, tried[k]);
        if (access(idx, R_OK) == 0 && strlen(tried[k]) < sizeof cfg->www_dir) {
            snprintf(cfg->www_dir, sizeof cfg->www_dir, "%s", tried[k]);
            df__log("viewer: /viewer/ serves %s (next to the executable)", cfg->www_dir);
            return;
        }
    }
    df__log("no viewer: /viewer/ answers 404: no index.html in %s nor %s; set --www DIR",
            tried[0], tried[1]);
}

/* Write "http=P socket=P pid=N" to path.tmp and rename it over path, so a
 * reader never sees half a file; every step checked (a full disk made an
 * empty ready file while the log said "ready"). 0, or -1 (logged, nothing
 * left behind). */
static int write_ready_file(const char *path, int http_port, int sock_port)
{
    char tmp[DF_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        df__log("cannot write the ready file %s: %s; stopping", tmp, strerror(errno));
        return -1;
    }
    int ok = fprintf(f, "http=%d socket=%d pid=%d\n", http_port, sock_port, (int)getpid()) > 0 &&
             fflush(f) == 0;
    int e = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path)) ok = 0, e = errno;
    if (!ok) {
        df__log("cannot write the ready file %s: %s; stopping", path, strerror(e ? e : EIO));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static df_config_t cfg;
    df_config_default(&cfg);
    df_error_t err = {0};
    /* the config file first, so options override it */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--version")) { printf("deformd %s\n", DF_VERSION); return 0; }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) { usage(stderr); return 2; }
            if (df_config_load_file(&cfg, argv[i + 1], &err)) {
                fprintf(stderr, "deformd: %s\n", err.msg);
                return 2;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) { i++; continue; }
        if (!strcmp(a, "--no-batching")) { cfg.batching = 0; continue; }
        const char *key = NULL, *val = NULL;
        char kv[1200];
        if (!strcmp(a, "--set") && i + 1 < argc) {
            snprintf(kv, sizeof kv, "%s", argv[++i]);
            char *eq = strchr(kv, '=');
            if (!eq) { fprintf(stderr, "deformd: --set expects KEY=VALUE\n"); return 2; }
            *eq = 0;
            key = kv;
            val = eq + 1;
        } else {
            for (size_t k = 0; k < sizeof optmap / sizeof optmap[0]; k++)
                if (!strcmp(a, optmap[k].opt)) key = optmap[k].key;
            if (!key) {
                fprintf(stderr, "deformd: unknown option '%s'\n", a);
                usage(stderr);
                return 2;
            }
            if (i + 1 >= argc) { fprintf(stderr, "deformd: %s needs a value\n", a); return 2; }
            val = argv[++i];
        }
        if (df_config_set(&cfg, key, val, &err)) {
            fprintf(stderr, "deformd: %s\n", err.msg);
            return 2;
        }
    }
    if (df_config_finish(&cfg, &err)) {
        fprintf(stderr, "deformd: %s\n", err.msg);
        return 2;
    }

    /* every thread inherits this mask; the main thread takes signals */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* Threads started before main (OpenBLAS's pool, by its library
     * constructor) do not block them: a SIGHUP that arrives while the main
     * thread is busy outside sigwait (a rescan) went to such a thread and
     * its default action ended the daemon. Handlers that hand the signal
     * to the main thread, where it waits for the next sigwait. */
    g_main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    df__log("starting %s: repository %s, %d workers, admin API %s, auth = %s", DF_VERSION,
            cfg.repository, cfg.workers,
            cfg.n_tokens ? "enabled (tokens set)" : "disabled (no token)",
            cfg.auth_all ? "all (a token on every endpoint but health)" : "repository");
    if (cfg.http_port >= 0) resolve_www(&cfg);
    df_server_t *srv = NULL;
    if (df_server_new(&cfg, &srv, &err) || df_server_start(srv, &err)) {
        df__log("cannot start: %s", err.msg);
        df_server_free(&srv);
        return 1;
    }
    df_http_t *http = NULL;
    int http_port = -1, sock_port = -1;
    if (cfg.http_port >= 0) {
        if (df_http_start(srv, &cfg, &http, &http_port, &err)) {
            df__log("cannot start HTTP on %s:%d: %s", cfg.host, cfg.http_port, err.msg);
            df_server_free(&srv);
            return 1;
        }
        df__log("HTTP listening on %s:%d", cfg.host, http_port);
    }
    if ((cfg.socket_port >= 0 || cfg.unix_path[0]) && df__sock_start_from_config) {
        if (df__sock_start_from_config(srv, &cfg, &sock_port, &err)) {
            df__log("cannot start the socket front: %s", err.msg);
            df_http_stop(&http);
            df_server_free(&srv);
            return 1;
        }
        df__log("socket listening on %s:%d%s%s", cfg.host, sock_port,
                cfg.unix_path[0] ? " and unix:" : "", cfg.unix_path);
    }
    if (cfg.ready_file[0] && write_ready_file(cfg.ready_file, http_port, sock_port)) {
        /* whoever waits for the file would wait forever: stop instead */
        if (http) df_http_quiesce(http);
        if (df__sock_quiesce) df__sock_quiesce();
        df_server_drain(srv, 0);
        df_http_stop(&http);
        if (df__sock_stop) df__sock_stop();
        df_server_free(&srv);
        return 1;
    }
    df__log("ready");

    int code = 0;
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig)) continue;
        if (sig == SIGHUP) {
            df__log("SIGHUP: rescanning the repository");
            df_server_rescan(srv);
            continue;
        }
        if (sig == SIGPIPE) continue;
        df__log("%s: stopping (draining up to %lld ms)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                (long long)cfg.drain_timeout_ms);
        break;
    }
    if (http) df_http_quiesce(http);
    if (df__sock_quiesce) df__sock_quiesce();
    int left = df_server_drain(srv, cfg.drain_timeout_ms);
    if (left) {
        /* workers still hold jobs whose completion would touch the fronts:
         * tearing them down now would race; leave without cleanup */
        df__log("drain timed out with %d requests in flight; exiting without cleanup", left);
        if (cfg.ready_file[0]) unlink(cfg.ready_file);
        fflush(stderr);
        _exit(1);
    }
    df__log("drained");
    /* give the fronts a moment to write the last responses */
    usleep(100 * 1000);
    df_http_stop(&http);
    if (df__sock_stop) df__sock_stop();
    df_server_free(&srv);
    if (cfg.ready_file[0]) unlink(cfg.ready_file);
    df__log("stopped");
    return code;
}

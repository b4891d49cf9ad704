/* test_hostile.c — the daemon against bad files and hostile clients.
 *
 * Each test starts the real bin/deformd (daemon_util.h) with limits small
 * enough to reach in a second or two, does what an attacker or an unlucky
 * operator would do, and then checks that the daemon is alive, that the
 * refusal came with the documented status and a message naming the limit,
 * and that a valid request is still answered correctly (against core's own
 * evaluation of the model file).
 *
 *  - test_model_rewritten_during_reload: a model file of ~2 MB rewritten in
 *    place (truncated, then written again) while SIGHUP reloads run: the
 *    daemon never dies (it did of SIGBUS when core mapped the file) and
 *    keeps serving the model. Two faults ended the daemon here: SIGBUS
 *    from the mapped file, and a SIGHUP arriving during a rescan, which
 *    went to a thread started before main (OpenBLAS's) that did not block
 *    it.
 */
#include "daemon_util.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

static char repo[1024];
static CURL *C;

/* ------------------------------------------------------------ helpers */

/* 1 while the daemon runs; when it has ended, reaps it and says how. */
static int alive(daemon_t *d)
{
    int st;
    if (d->pid <= 0) return 0;
    if (waitpid(d->pid, &st, WNOHANG) == 0) return 1;
    fprintf(stderr, "deformd %s %d (log %s)\n", WIFSIGNALED(st) ? "killed by signal" : "exited",
            WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), d->log);
    d->pid = 0;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One request of model "big" with weights w (16 values); its positions
 * compared with core's evaluation of path. Returns 1 when equal. */
static int big_answer_ok(int port, const char *path)
{
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = 0.05f * (float)(i % 5) - 0.1f;
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "{\"inputs\":[{\"name\":\"weights\",\"datatype\":\"FP32\",\"shape\":[16],"
                     "\"data\":[");
    for (int i = 0; i < 16; i++) n += snprintf(req + n, sizeof req - (size_t)n, "%s%.9g", i ? "," : "", w[i]);
    n += snprintf(req + n, sizeof req - (size_t)n,
                  "]}],\"outputs\":[{\"name\":\"positions\",\"parameters\":{\"binary_data\":true}}]}");
    resp_t r;
    if (http_req(C, port, "POST", "/v2/models/big/infer", req, (size_t)n, NULL, &r)) return 0;
    int64_t N = 100 * 100;
    float *ref = malloc((size_t)N * 3 * sizeof(float));
    const char *names[1] = {"weights"};
    const float *data[1] = {w};
    int ok = r.status == 200 && r.header_len > 0 &&
             (size_t)r.header_len + (size_t)N * 12 == r.len &&
             ref_eval(path, 1, names, data, 1, NULL, 0, "positions", ref) == 0 &&
             max_rel_err(r.body + r.header_len, ref, (size_t)N * 3) <= 1e-6;
    if (!ok) fprintf(stderr, "big: status %ld, %zu bytes: %.200s\n", r.status, r.len, r.body);
    free(ref);
    resp_free(&r);
    return ok;
}

/* ---------------------------------------------- D1: file rewritten */

typedef struct {
    const char *path;
    const unsigned char *bytes;
    size_t n;
    atomic_int stop;
    int rewrites;
} rewriter_t;

static void *rewrite_loop(void *arg)
{
    rewriter_t *rw = arg;
    while (!atomic_load(&rw->stop)) {
        int fd = open(rw->path, O_WRONLY | O_TRUNC);
        if (fd < 0) break;
        size_t off = 0;
        while (off < rw->n) {
            size_t k = rw->n - off < (128u << 10) ? rw->n - off : (128u << 10);
            ssize_t w = write(fd, rw->bytes + off, k);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
        rw->rewrites++;
        usleep(2000);
    }
    return NULL;
}

static void test_model_rewritten_during_reload(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/big/1/model.safetensors", repo);
    FILE *f = fopen(path, "rb");
    DF_CHECK(f != NULL);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(n);
    DF_CHECK(fread(bytes, 1, n, f) == n);
    fclose(f);
    DF_CHECK_MSG(n >= (1u << 20), "model file of %zu bytes: the large-file path needs >= 1 MiB", n);
    daemon_t d;
    if (daemon_start(&d, repo, "rewrite", NULL)) {
        DF_CHECK(0);
        free(bytes);
        return;
    }
    DF_CHECK(big_answer_ok(d.port, path));
    rewriter_t rw = {path, bytes, n, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, rewrite_loop, &rw);
    int hups = 0;
    double t0 = now_s();
    while (now_s() - t0 < 1.5 && alive(&d)) {
        kill(d.pid, SIGHUP);
        hups++;
        usleep(15000);
    }
    atomic_store(&rw.stop, 1);
    pthread_join(th, NULL);
    /* the last rewrite completed: the file is whole again */
    usleep(300000); /* the last SIGHUP's reload */
    DF_CHECK_MSG(alive(&d), "deformd died during %d reloads of a file rewritten %d times (log %s)",
                 hups, rw.rewrites, d.log);
    DF_CHECK(big_answer_ok(d.port, path));
    kill(d.pid, SIGHUP); /* a reload of the whole file succeeds */
    usleep(300000);
    DF_CHECK(big_answer_ok(d.port, path));
    fprintf(stderr, "model_rewritten: %d SIGHUPs, %d rewrites\n", hups, rw.rewrites);
    DF_CHECK(daemon_stop(&d) == 0);
    free(bytes);
}

/* ------------------------------------------------------------ main */

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    C = curl_easy_init();
    snprintf(repo, sizeof repo, "%s/repo", test_out());
    make_repo(repo);
    char p[1100];
    snprintf(p, sizeof p, "%s/big/1", repo);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/big/1/model.safetensors", repo);
    if (make_rigged(p, 100, 100, 4, 16, "lbs", 5)) return 2;
    snprintf(p, sizeof p, "%s/big/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\",\"max_batch_size\":8,\"max_queue_delay_us\":500}");
    DF_RUN(test_model_rewritten_during_reload);
    curl_easy_cleanup(C);
    curl_global_cleanup();
    return test_out_done(dftest_exit());
}

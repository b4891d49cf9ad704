/* test_mixed_batch.c — two characters of ONE model with different defaults,
 * evaluated in ONE batch, deterministically (issue 14.7; test_64_clients
 * only catches it when the timing happens to mix them).
 *
 * The engine runs in-process (df_server_new/df_server_start on a small
 * repository written here): model "cube" (synthetic rigged, 4 morphs) with
 * characters "zero" (no defaults: the model's, weights 0) and "half"
 * (weights 0.5 by default). One worker, max_batch_size 2, max_queue_delay_us
 * 5 s and no inline evaluation: the first job waits in the queue until the
 * second fills the batch, so both always run in the same df_model_evaluate
 * (checked: batch_requests 2, batch_characters 2). Each answer must equal
 * the reference — core's df_model_evaluate on the same file, the same two
 * poses in the same order, each with ITS character's default weights — bit
 * for bit; a batch that took job 0's character defaults for every job gives
 * the other character the wrong weights (a morph offset of ~0.025 here) and
 * fails. Orders: zero then half, half then zero, and half with explicit
 * weights then zero (an explicit input of one job must not leak either).
 */
#include "config.h"
/* daemon_util.h: make_rigged, test_out (its HTTP helpers are not used here:
 * the engine runs in-process) */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "daemon_util.h"
#include "job.h"
#include <pthread.h>

enum { GX = 6, GY = 8, NV = GX * GY, J = 3, M = 4 };

static char repo[1024], model_path[1200];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int n_done;

static void on_done(df_job_t *job, void *user)
{
    pthread_mutex_lock(&mu);
    n_done++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static const float half_w[M] = {0.5f, 0.5f, 0.5f, 0.5f};

/* Core's answer for poses (one per entry) given as weights pointers (NULL:
 * the model's default), evaluated as one batch. out: n * NV * 3. */
static int reference(int n, const float *const *w, float *out)
{
    df_model_t *m = NULL;
    df_error_t e = {0};
    if (df_model_open(model_path, "rigged", NULL, NULL, &m, &e)) {
        fprintf(stderr, "ref: %s\n", e.msg);
        return -1;
    }
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = n;
    int wi = -1, pi = df_model_find_output(m, "positions");
    for (int i = 0; i < df_model_n_inputs(m); i++)
        if (!strcmp(df_model_input(m, i)->name, "weights")) wi = i;
    if (wi < 0 || pi < 0) {
        df_model_unref(&m);
        return -1;
    }
    int any = 0;
    for (int p = 0; p < n; p++) any |= w[p] != NULL;
    b.in[wi] = any ? w : NULL;
    float *dst[8];
    for (int p = 0; p < n; p++) dst[p] = out + (int64_t)p * NV * 3;
    b.out[pi] = dst;
    df_scratch_t *s = df_scratch_new();
    int rc = df_model_evaluate(m, &b, s, &e);
    if (rc) fprintf(stderr, "ref eval: %s\n", e.msg);
    df_scratch_free(&s);
    df_model_unref(&m);
    return rc;
}

static df_server_t *S;

/* Submit one single-pose job per character in order (explicit weights when
 * w[k] is given) and wait for both answers. */
static void run_pair(const char *const *chars, const float *const *explicit_w,
                     const float *const *expect_w, const char *what)
{
    df_job_t *jobs[2] = {NULL, NULL};
    pthread_mutex_lock(&mu);
    n_done = 0;
    pthread_mutex_unlock(&mu);
    int submitted = 0;
    for (int k = 0; k < 2; k++) {
        df_job_t *job = df_job_new(S);
        DF_CHECK(job != NULL);
        if (!job) break;
        snprintf(job->character, sizeof job->character, "%s", chars[k]);
        if (explicit_w[k]) {
            job->n_inputs = 1;
            snprintf(job->inputs[0].name, DF_NAME_MAX, "weights");
            job->inputs[0].ndim = 2;
            job->inputs[0].shape[0] = 1;
            job->inputs[0].shape[1] = M;
            job->inputs[0].data = explicit_w[k];
        }
        job->n_outputs = 1;
        snprintf(job->outputs[0].name, DF_NAME_MAX, "positions");
        job->outputs[0].encoding = DF_ENC_F32;
        job->timeout_us = 60000000;
        job->done = on_done;
        job->allow_inline = 0;
        df_error_t e = {0};
        int rc = df_server_submit(S, job, &e);
        DF_CHECK_MSG(rc == 0, "%s: submit %s: %s", what, chars[k], e.msg);
        if (rc) {
            df_job_free(&job);
            break;
        }
        jobs[k] = job;
        submitted++;
    }
    pthread_mutex_lock(&mu);
    while (n_done < submitted) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    if (submitted == 2) {
        static float ref[2 * NV * 3];
        DF_CHECK(reference(2, expect_w, ref) == 0);
        for (int k = 0; k < 2; k++) {
            df_job_t *job = jobs[k];
            DF_CHECK_MSG(job->status == 0, "%s: %s: %s", what, chars[k], job->err.msg);
            DF_CHECK_MSG(job->batch_requests == 2 && job->batch_characters == 2 &&
                             job->batch_poses == 2 && !job->ran_inline,
                         "%s: %s ran in a batch of %d requests, %d characters (want 2, 2: one mixed batch)",
                         what, chars[k], job->batch_requests, job->batch_characters);
            if (job->status) continue;
            const float *got = job->outputs[0].f32, *want = ref + (int64_t)k * NV * 3;
            double worst = 0;
            for (int i = 0; i < NV * 3; i++)
                if (fabs((double)got[i] - want[i]) > worst) worst = fabs((double)got[i] - want[i]);
            DF_CHECK_MSG(!memcmp(got, want, sizeof(float) * NV * 3),
                         "%s: %s (job %d of the batch) differs from its own defaults by %g", what,
                         chars[k], k, worst);
        }
    }
    for (int k = 0; k < 2; k++) df_job_free(&jobs[k]);
}

static void test_zero_then_half(void)
{
    const char *chars[2] = {"zero", "half"};
    const float *none[2] = {NULL, NULL};
    const float *expect[2] = {NULL, half_w};
    run_pair(chars, none, expect, "zero+half");
}

static void test_half_then_zero(void)
{
    const char *chars[2] = {"half", "zero"};
    const float *none[2] = {NULL, NULL};
    const float *expect[2] = {half_w, NULL};
    run_pair(chars, none, expect, "half+zero");
}

static void test_explicit_then_default(void)
{
    static const float mine[M] = {1.0f, -0.25f, 0.75f, 0.125f};
    const char *chars[2] = {"half", "zero"};
    const float *given[2] = {mine, NULL};
    const float *expect[2] = {mine, NULL};
    run_pair(chars, given, expect, "half(explicit)+zero");
    const char *chars2[2] = {"zero", "half"};
    const float *given2[2] = {mine, NULL};
    const float *expect2[2] = {mine, half_w};
    run_pair(chars2, given2, expect2, "zero(explicit)+half");
}

/* The two defaults really differ on this model (else the test proves
 * nothing). */
static void test_defaults_differ(void)
{
    static float a[NV * 3], b[NV * 3];
    const float *wz[1] = {NULL}, *wh[1] = {half_w};
    DF_CHECK(reference(1, wz, a) == 0 && reference(1, wh, b) == 0);
    double d = 0;
    for (int i = 0; i < NV * 3; i++)
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    DF_CHECK_MSG(d > 1e-3, "zero and half answer alike (max diff %g)", d);
    printf("# zero vs half default: max vertex difference %.3g\n", d);
}

int main(void)
{
    snprintf(repo, sizeof repo, "%s/mixed_repo", test_out());
    char cmd[1200], p[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
    if (system(cmd)) return 2;
    snprintf(p, sizeof p, "%s/cube/1", repo);
    mkdirs(p);
    snprintf(model_path, sizeof model_path, "%s/cube/1/model.safetensors", repo);
    if (make_rigged(model_path, GX, GY, J, M, "lbs", 31)) return 2;
    snprintf(p, sizeof p, "%s/cube/config.json", repo);
    write_text(p, "{\"kind\":\"rigged\",\"max_batch_size\":2,\"max_queue_delay_us\":5000000,"
                  "\"max_queue_length\":64,\"timeout_us\":60000000,\"characters\":{"
                  "\"zero\":{},"
                  "\"half\":{\"defaults\":{\"weights\":[0.5,0.5,0.5,0.5]}}}}");
    static df_config_t cfg;
    df_config_default(&cfg);
    snprintf(cfg.repository, sizeof cfg.repository, "%s", repo);
    cfg.workers = 1;
    cfg.inline_max_us = 0;    /* never on the submitting thread */
    cfg.batch_split_min = 0;  /* never split a ready queue */
    df_error_t e = {0};
    if (df_server_new(&cfg, &S, &e) || df_server_start(S, &e)) {
        printf("FAIL server_start: %s\n", e.msg);
        return 1;
    }
    DF_RUN(test_defaults_differ);
    DF_RUN(test_zero_then_half);
    DF_RUN(test_half_then_zero);
    DF_RUN(test_explicit_then_default);
    DF_CHECK(df_server_drain(S, 5000) == 0);
    df_server_free(&S);
    return test_out_done(dftest_exit());
}

/* metrics.c — Prometheus text exposition of the engine's counters.
 *
 * DESIGN
 * Counters live in each model entry, guarded by the engine mutex and
 * updated once per batch and once per finished request (worker.c) or
 * rejected request (batcher.c). df_server_metrics snapshots them under the
 * lock into a text buffer. Histograms use fixed buckets: durations in µs
 * (50 .. 1.6e6, x2 steps), batch sizes in poses (1 .. 256, x2 steps).
 */
#include "engine.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double us_bounds[DF__NHIST - 1] = {50,    100,   200,    400,    800,
                                                1600,  3200,  6400,   12800,  25600,
                                                51200, 102400, 204800, 409600, 1638400};
static const double batch_bounds[DF__NBATCH - 1] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

static void hist_add(uint64_t *h, const double *bounds, int nb, double v)
{
    int k = 0;
    while (k < nb - 1 && v > bounds[k]) k++;
    h[k]++;
}

void df__metrics_batch(df__mentry_t *me, int poses, int mixed)
{
    if (!me) return;
    me->n_batches++;
    me->n_poses += (uint64_t)poses;
    if (mixed) me->n_batch_mixed++;
    hist_add(me->batch_hist, batch_bounds, DF__NBATCH, poses);
}

void df__metrics_job(df__mentry_t *me, const df_job_t *job)
{
    if (!me) return;
    if (job->status == DF_OK) me->n_success++;
    else me->n_failure++;
    me->queue_us_sum += (uint64_t)(job->queue_us > 0 ? job->queue_us : 0);
    hist_add(me->queue_hist, us_bounds, DF__NHIST, (double)job->queue_us);
    if (job->status == DF_OK) {
        me->compute_us_sum += (uint64_t)job->compute_us;
        hist_add(me->compute_hist, us_bounds, DF__NHIST, (double)job->compute_us);
    }
}

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb(sbuf_t *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        size_t nc = b->cap * 2 + (size_t)n;
        char *nb = realloc(b->buf, nc);
        if (!nb) { b->oom = 1; return; }
        b->buf = nb;
        b->cap = nc;
    }
}

static void hist_out(sbuf_t *b, const char *metric, const char *model, const uint64_t *h,
                     const double *bounds, int nb, double sum)
{
    uint64_t cum = 0;
    for (int k = 0; k < nb; k++) {
        cum += h[k];
        if (k < nb - 1)
            sb(b, "%s_bucket{model=\"%s\",le=\"%g\"} %llu\n", metric, model, bounds[k],
               (unsigned long long)cum);
        else
            sb(b, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", metric, model,
               (unsigned long long)cum);
    }
    sb(b, "%s_sum{model=\"%s\"} %.0f\n", metric, model, sum);
    sb(b, "%s_count{model=\"%s\"} %llu\n", metric, model, (unsigned long long)cum);
}

int df_server_metrics(df_server_t *s, char **text, size_t *len)
{
    sbuf_t b = {malloc(16384), 0, 16384, 0};
    if (!b.buf) return DF_ENOMEM;
    pthread_mutex_lock(&s->mu);
    size_t loaded = 0;
    for (size_t i = 0; i < s->n_models; i++) loaded += s->models[i]->cur != NULL;
    sb(&b, "# HELP deformd_up 1 while the daemon runs.\n# TYPE deformd_up gauge\ndeformd_up 1\n");
    sb(&b, "# HELP deformd_uptime_seconds Seconds since start.\n# TYPE deformd_uptime_seconds gauge\n"
           "deformd_uptime_seconds %.3f\n",
       (double)(df__now_ns() - s->t_start_ns) / 1e9);
    sb(&b, "# HELP deformd_models_loaded Models currently serving.\n# TYPE deformd_models_loaded gauge\n"
           "deformd_models_loaded %zu\n",
       loaded);
    sb(&b, "# HELP deformd_inflight_requests Requests submitted and not yet answered.\n"
           "# TYPE deformd_inflight_requests gauge\ndeformd_inflight_requests %lld\n",
       (long long)s->inflight);
    sb(&b, "# HELP deformd_model_loaded 1 when the model serves, with its version.\n"
           "# TYPE deformd_model_loaded gauge\n");
    for (size_t i = 0; i < s->n_models; i++) {
        df__mentry_t *me = s->models[i];
        sb(&b, "deformd_model_loaded{model=\"%s\",version=\"%lld\"} %d\n", me->name,
           (long long)me->version, me->cur != NULL);
    }
    sb(&b, "# HELP deformd_model_load_failures_total Refused loads/reloads.\n"
           "# TYPE deformd_model_load_failures_total counter\n");
    for (size_t i = 0; i < s->n_models; i++)
        sb(&b, "deformd_model_load_failures_total{model=\"%s\"} %llu\n", s->models[i]->name,
           (unsigned long long)s->models[i]->n_load_failures);
    sb(&b, "# HELP deformd_requests_total Requests by outcome.\n# TYPE deformd_requests_total counter\n");
    for (size_t i = 0; i < s->n_models; i++) {
        df__mentry_t *me = s->models[i];
        sb(&b, "deformd_requests_total{model=\"%s\",status=\"success\"} %llu\n", me->name,
           (unsigned long long)me->n_success);
        sb(&b, "deformd_requests_total{model=\"%s\",status=\"failure\"} %llu\n", me->name,
           (unsigned long long)me->n_failure);
    }
    sb(&b, "# HELP deformd_queue_length Requests waiting in the model's queue.\n"
           "# TYPE deformd_queue_length gauge\n");
    for (size_t i = 0; i < s->n_models; i++)
        sb(&b, "deformd_queue_length{model=\"%s\"} %d\n", s->models[i]->name, s->models[i]->q_jobs);
    sb(&b, "# HELP deformd_batches_total Batches evaluated.\n# TYPE deformd_batches_total counter\n");
    for (size_t i = 0; i < s->n_models; i++)
        sb(&b, "deformd_batches_total{model=\"%s\"} %llu\n", s->models[i]->name,
           (unsigned long long)s->models[i]->n_batches);
    sb(&b, "# HELP deformd_batches_mixed_total Batches holding requests of more than one "
           "character.\n# TYPE deformd_batches_mixed_total counter\n");
    for (size_t i = 0; i < s->n_models; i++)
        sb(&b, "deformd_batches_mixed_total{model=\"%s\"} %llu\n", s->models[i]->name,
           (unsigned long long)s->models[i]->n_batch_mixed);
    sb(&b, "# HELP deformd_queue_us_total Cumulative queue time (us).\n"
           "# TYPE deformd_queue_us_total counter\n");
    for (size_t i = 0; i < s->n_models; i++)
        sb(&b, "deformd_queue_us_total{model=\"%s\"} %llu\n", s->models[i]->name,
           (unsigned long long)s->models[i]->queue_us_sum);
    sb(&b, "# HELP deformd_compute_us_total Cumulative compute time (us) of successful "
           "requests (each counts its batch's time).\n# TYPE deformd_compute_us_total counter\n");
    for (size_t i = 0; i < s->n_models; i++)
        sb(&b, "deformd_compute_us_total{model=\"%s\"} %llu\n", s->models[i]->name,
           (unsigned long long)s->models[i]->compute_us_sum);
    sb(&b, "# HELP deformd_queue_duration_us Queue time per request (us).\n"
           "# TYPE deformd_queue_duration_us histogram\n");
    for (size_t i = 0; i < s->n_models; i++)
        hist_out(&b, "deformd_queue_duration_us", s->models[i]->name, s->models[i]->queue_hist,
                 us_bounds, DF__NHIST, (double)s->models[i]->queue_us_sum);
    sb(&b, "# HELP deformd_compute_duration_us Batch compute time per request (us).\n"
           "# TYPE deformd_compute_duration_us histogram\n");
    for (size_t i = 0; i < s->n_models; i++)
        hist_out(&b, "deformd_compute_duration_us", s->models[i]->name,
                 s->models[i]->compute_hist, us_bounds, DF__NHIST,
                 (double)s->models[i]->compute_us_sum);
    sb(&b, "# HELP deformd_batch_size Poses per evaluated batch.\n"
           "# TYPE deformd_batch_size histogram\n");
    for (size_t i = 0; i < s->n_models; i++)
        hist_out(&b, "deformd_batch_size", s->models[i]->name, s->models[i]->batch_hist,
                 batch_bounds, DF__NBATCH, (double)s->models[i]->n_poses);
    df__seq_sweep(s, df__now_ns());
    sb(&b, "# HELP deformd_sequences_live Sequences started and not yet ended or expired.\n"
           "# TYPE deformd_sequences_live gauge\ndeformd_sequences_live %d\n"
           "# HELP deformd_sequences_started_total Sequence starts (and restarts).\n"
           "# TYPE deformd_sequences_started_total counter\ndeformd_sequences_started_total %llu\n"
           "# HELP deformd_sequences_ended_total Sequences ended by sequence_end.\n"
           "# TYPE deformd_sequences_ended_total counter\ndeformd_sequences_ended_total %llu\n"
           "# HELP deformd_sequences_expired_total Sequences idle longer than "
           "sequence_idle_timeout_ms.\n"
           "# TYPE deformd_sequences_expired_total counter\ndeformd_sequences_expired_total %llu\n"
           "# HELP deformd_sequences_refused_total Sequence requests refused: max_sequences "
           "reached, no such live sequence, or an expired one.\n"
           "# TYPE deformd_sequences_refused_total counter\n"
           "deformd_sequences_refused_total{reason=\"max_sequences\"} %llu\n"
           "deformd_sequences_refused_total{reason=\"unknown\"} %llu\n"
           "deformd_sequences_refused_total{reason=\"expired\"} %llu\n",
       s->seq_live, (unsigned long long)s->seq_started, (unsigned long long)s->seq_ended,
       (unsigned long long)s->seq_expired, (unsigned long long)s->seq_refused_full,
       (unsigned long long)s->seq_refused_unknown, (unsigned long long)s->seq_refused_expired);
    pthread_mutex_unlock(&s->mu);
    if (b.oom) {
        free(b.buf);
        return DF_ENOMEM;
    }
    *text = b.buf;
    *len = b.len;
    return DF_OK;
}

/* worker.c — the worker pool: choose a model queue, form a batch, evaluate.
 *
 * DESIGN
 * N threads, each owning a df_scratch_t and preallocated per-pose pointer
 * arrays (grown only when a batch is larger than any before), so a batch
 * allocates nothing. A free worker picks the next model whose queue is
 * ready — it holds max_batch_size poses, or its oldest request has waited
 * max_queue_delay_us, or the server is draining — scanning the models
 * round-robin from a cursor that moves past the model just served, so no
 * model is starved. Otherwise it sleeps until the earliest queue comes due
 * or a submit signals.
 *
 * A batch takes requests in FIFO order from one queue while they fit in
 * max_batch_size poses (the first always fits, so a request larger than the
 * limit runs alone) and were validated against the same loaded version.
 * Requests of different characters mix freely: for each pose the worker
 * points each input at the request's data, else the character's default,
 * else NULL (the model's default). One df_model_evaluate call per batch. If
 * it fails, the requests are retried one by one so the error lands on the
 * request at fault only. Outputs nobody asked for go to a per-worker sink.
 * Expired requests are answered DF_ETIMEDOUT when dequeued, never run.
 */
#include "engine.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int worker_grow(df__worker_t *w, int poses, int njobs)
{
    if (poses > w->cap) {
        int nc = w->cap ? w->cap : 64;
        while (nc < poses) nc *= 2;
        for (int i = 0; i < DF_MAX_IO; i++) {
            const float **a = realloc(w->in[i], (size_t)nc * sizeof *a);
            if (!a) return -1;
            w->in[i] = a;
            float **b = realloc(w->out[i], (size_t)nc * sizeof *b);
            if (!b) return -1;
            w->out[i] = b;
        }
        uint32_t *f = realloc(w->flags, (size_t)nc * sizeof *f);
        if (!f) return -1;
        w->flags = f;
        w->cap = nc;
    }
    if (njobs > w->jobs_cap) {
        int nc = w->jobs_cap ? w->jobs_cap : 64;
        while (nc < njobs) nc *= 2;
        df_job_t **j = realloc(w->jobs, (size_t)nc * sizeof *j);
        if (!j) return -1;
        w->jobs = j;
        w->jobs_cap = nc;
    }
    return 0;
}

static void encode_outputs(df_server_t *s, df__loaded_t *ld, df_job_t *job)
{
    for (int k = 0; k < job->n_outputs; k++) {
        df_job_output_t *out = &job->outputs[k];
        if (out->encoding == DF_ENC_F32) continue;
        const df_io_desc_t *d = df_model_output(ld->model, out->index);
        int comps = d->ndim > 0 ? (int)d->shape[d->ndim - 1] : 1;
        size_t n = (size_t)job->batch * (size_t)ld->out_numel[out->index];
        if (out->encoding == DF_ENC_F16) {
            df_encode_f16(out->f32, n, (uint16_t *)out->bytes);
            continue;
        }
        if (comps == 3 && strstr(out->name, "normal"))
            df_quant_unit(3, &out->quant);
        else if (comps == 3) {
            df_quant_from_box(ld->lo, ld->hi, s->cfg->int16_margin, &out->quant);
            df_quant_cover(&out->quant, out->f32, n);
        }
        else
            df_quant_from_data(out->f32, n, comps <= DF_QUANT_MAX_COMPS ? comps : 1, &out->quant);
        out->clamped = df_encode_i16(out->f32, n, &out->quant, (int16_t *)out->bytes);
    }
}

/* Evaluate jobs[0..nj) (same loaded version) as one batch. Sets each job's
 * status. */
static void run_batch(df__worker_t *w, df_job_t **jobs, int nj)
{
    df_server_t *s = w->s;
    df__loaded_t *ld = jobs[0]->priv->ld;
    const df_model_t *m = ld->model;
    int ni = df_model_n_inputs(m), no = df_model_n_outputs(m);
    int P = 0;
    for (int j = 0; j < nj; j++) P += jobs[j]->priv->B;
    df_error_t e = {0};
    if (worker_grow(w, P, nj)) {
        for (int j = 0; j < nj; j++) {
            jobs[j]->status = df_error_set(&jobs[j]->err, DF_ENOMEM, "out of memory");
        }
        return;
    }
    size_t sink_need = 0;
    for (int o = 0; o < no; o++) sink_need += (size_t)ld->out_numel[o] * (size_t)P;
    if (sink_need * sizeof(float) > w->sink_cap) {
        free(w->sink);
        w->sink = malloc(sink_need * sizeof(float));
        w->sink_cap = w->sink ? sink_need * sizeof(float) : 0;
        if (!w->sink) {
            for (int j = 0; j < nj; j++)
                jobs[j]->status = df_error_set(&jobs[j]->err, DF_ENOMEM, "out of memory");
            return;
        }
    }
    df_batch_t batch;
    memset(&batch, 0, sizeof batch);
    batch.n = P;
    for (int i = 0; i < ni; i++) {
        int p = 0, any = 0;
        for (int j = 0; j < nj; j++) {
            struct df__job_priv *q = jobs[j]->priv;
            const float *base = q->in_base[i];
            const float *def = ld->char_defaults[q->char_idx * DF_MAX_IO + i];
            /* a sequence's frame: the previous frame's state (sequence.c) */
            if (i == ld->state_in && q->seq_in) def = q->seq_in;
            for (int b = 0; b < q->B; b++, p++) {
                const float *ptr = base ? base + (int64_t)b * ld->in_numel[i] : def;
                w->in[i][p] = ptr;
                any |= ptr != NULL;
            }
        }
        batch.in[i] = any ? w->in[i] : NULL;
    }
    size_t sink_off = 0;
    for (int o = 0; o < no; o++) {
        int p = 0, any = 0;
        float *sink = w->sink + sink_off;
        sink_off += (size_t)ld->out_numel[o] * (size_t)P;
        for (int j = 0; j < nj; j++) {
            df_job_t *job = jobs[j];
            float *dst = NULL;
            for (int k = 0; k < job->n_outputs; k++)
                if (job->outputs[k].index == o) dst = (float *)job->outputs[k].f32;
            /* a sequence keeps the state output (copied after, when the
             * request asked for it too) */
            if (!dst && o == ld->state_out && job->priv->seq_out) dst = job->priv->seq_out;
            for (int b = 0; b < job->priv->B; b++, p++) {
                if (dst) {
                    w->out[o][p] = dst + (int64_t)b * ld->out_numel[o];
                    any = 1;
                } else {
                    w->out[o][p] = sink + (int64_t)p * ld->out_numel[o];
                }
            }
        }
        batch.out[o] = any ? w->out[o] : NULL;
    }
    int p = 0;
    for (int j = 0; j < nj; j++) {
        uint32_t f = jobs[j]->flags ? jobs[j]->flags : ld->char_flags[jobs[j]->priv->char_idx];
        for (int b = 0; b < jobs[j]->priv->B; b++) w->flags[p++] = f;
    }
    batch.flags = w->flags;
    int rc = df_model_evaluate(m, &batch, w->scratch, &e);
    if (rc && nj > 1) {
        for (int j = 0; j < nj; j++) run_batch(w, &jobs[j], 1);
        return;
    }
    for (int j = 0; j < nj; j++) {
        jobs[j]->status = rc;
        if (rc) {
            jobs[j]->err = e;
            continue;
        }
        float *so = jobs[j]->priv->seq_out;
        for (int k = 0; so && k < jobs[j]->n_outputs; k++)
            if (jobs[j]->outputs[k].index == ld->state_out)
                memcpy(so, jobs[j]->outputs[k].f32, (size_t)ld->state_numel * sizeof(float));
        encode_outputs(s, ld, jobs[j]);
    }
}

static int count_chars(df_job_t **jobs, int nj)
{
    int n = 0;
    for (int j = 0; j < nj; j++) {
        int seen = 0;
        for (int k = 0; k < j && !seen; k++)
            seen = jobs[k]->priv->char_idx == jobs[j]->priv->char_idx;
        n += !seen;
    }
    return n;
}

/* Hand finished jobs back; the front may free them as soon as done() runs,
 * so everything is read before. */
static void finish(df_server_t *s, df__mentry_t *me, df_job_t **jobs, int nj, int is_batch,
                   int poses, int chars)
{
    pthread_mutex_lock(&s->mu);
    if (is_batch) df__metrics_batch(me, poses, chars > 1);
    int64_t now = df__now_ns();
    for (int j = 0; j < nj; j++) {
        df__metrics_job(me, jobs[j]);
        /* the next frame of its sequence, if one waits, may run now */
        df_job_t *next = df__seq_done(s, jobs[j], now);
        if (next) df__queue_push(s, next);
    }
    pthread_mutex_unlock(&s->mu);
    for (int j = 0; j < nj; j++) {
        df_job_t *job = jobs[j];
        df__loaded_unref(&job->priv->ld);
        job->done(job, job->user);
    }
    pthread_mutex_lock(&s->mu);
    s->inflight -= nj;
    if (s->inflight <= 0) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

void df__job_complete(df_server_t *s, df_job_t *job)
{
    finish(s, job->priv->me, &job, 1, 0, 0, 0);
}

/* ---- inline evaluation (df_server_submit on a front's thread) ---- */

static void worker_bufs_free(df__worker_t *w)
{
    df_scratch_free(&w->scratch);
    for (int k = 0; k < DF_MAX_IO; k++) {
        free(w->in[k]);
        free(w->out[k]);
        w->in[k] = NULL;
        w->out[k] = NULL;
    }
    free(w->flags);
    free(w->sink);
    free(w->jobs);
    w->flags = NULL;
    w->sink = NULL;
    w->jobs = NULL;
    w->cap = w->jobs_cap = 0;
    w->sink_cap = 0;
}

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

static void tl_free(void *p)
{
    df__worker_t *w = p;
    worker_bufs_free(w);
    free(w);
}

static void tl_init(void) { pthread_key_create(&tl_key, tl_free); }

/* The calling thread's own worker state (scratch, pointer arrays), made on
 * first use and freed when the thread exits. */
static df__worker_t *tl_worker(df_server_t *s)
{
    pthread_once(&tl_once, tl_init);
    df__worker_t *w = pthread_getspecific(tl_key);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) return NULL;
        w->id = -1;
        w->scratch = df_scratch_new();
        if (!w->scratch || worker_grow(w, 64, 64) || pthread_setspecific(tl_key, w)) {
            tl_free(w);
            return NULL;
        }
    }
    w->s = s;
    return w;
}

void df__run_inline(df_server_t *s, df_job_t *job)
{
    struct df__job_priv *q = job->priv;
    df__worker_t *w = tl_worker(s);
    int64_t t0 = df__now_ns();
    if (w) run_batch(w, &job, 1);
    else job->status = df_error_set(&job->err, DF_ENOMEM, "out of memory");
    int64_t t1 = df__now_ns();
    job->queue_us = (t0 - q->t_submit_ns) / 1000;
    job->compute_us = (t1 - t0) / 1000;
    job->batch_poses = q->B;
    job->batch_requests = 1;
    job->batch_characters = 1;
    job->ran_inline = 1;
    pthread_mutex_lock(&s->mu);
    df__metrics_batch(q->me, q->B, 0);
    df__metrics_job(q->me, job);
    df_job_t *next = df__seq_done(s, job, t1);
    if (next) df__queue_push(s, next);
    s->inflight--;
    if (s->inflight <= 0) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
    df__loaded_unref(&q->ld);
}

/* After a batch larger than any model's max_batch_size (one request of up
 * to 4096 poses runs alone): give back scratch beyond twice what a full
 * batch of the largest model needs (the idle worker pre-faults that much
 * again, see worker_main), and a sink beyond SINK_KEEP. */
#define SINK_KEEP (16u << 20)
static void trim(df__worker_t *w)
{
    df_server_t *s = w->s;
    if (df_scratch_capacity(w->scratch) <= (8u << 20) && w->sink_cap <= SINK_KEEP) return;
    pthread_mutex_lock(&s->mu);
    size_t need = s->scratch_need;
    pthread_mutex_unlock(&s->mu);
    size_t keep = 2 * (need > (4u << 20) ? need : (4u << 20));
    if (df_scratch_capacity(w->scratch) > keep) {
        df_scratch_t *n = df_scratch_new();
        if (n) {
            df_scratch_free(&w->scratch);
            w->scratch = n;
            pthread_mutex_lock(&s->mu);
            w->warm_bytes = 0;
            pthread_mutex_unlock(&s->mu);
        }
    }
    if (w->sink_cap > SINK_KEEP) {
        free(w->sink);
        w->sink = NULL;
        w->sink_cap = 0;
    }
}

/* Under s->mu: the next ready model, or NULL with *due set to the earliest
 * time one becomes ready (INT64_MAX when all queues are empty). */
static df__mentry_t *pick(df_server_t *s, int64_t now, int64_t *due)
{
    *due = INT64_MAX;
    size_t n = s->n_models;
    for (size_t k = 0; k < n; k++) {
        size_t idx = (s->rr + k) % n;
        df__mentry_t *me = s->models[idx];
        if (!me->head) continue;
        df__loaded_t *ld = me->head->priv->ld;
        int64_t d = me->head->priv->t_submit_ns + ld->max_queue_delay_us * 1000;
        if (me->q_poses >= ld->max_batch_size || now >= d || me->split_ready || s->draining ||
            s->stopping) {
            s->rr = idx + 1;
            return me;
        }
        if (d < *due) *due = d;
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    df__worker_t *w = arg;
    df_server_t *s = w->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->scratch_need > w->warm_bytes && !s->stopping) {
            /* A model was loaded whose full batch needs more scratch than
             * this worker has: grow it and touch every page now, while
             * idle, rather than in the first large batch (measured on the
             * 11k-vertex model: a first batch of 63 poses took 58 ms instead
             * of about 13, page faults of fresh memory being costly on this
             * VM; docs/server.md). */
            size_t need = s->scratch_need;
            w->warm_bytes = need;
            pthread_mutex_unlock(&s->mu);
            void *p = df_scratch_get(w->scratch, need);
            if (p) memset(p, 0, need);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        int64_t now = df__now_ns(), due;
        df__mentry_t *me = pick(s, now, &due);
        if (!me) {
            if (s->stopping) break;
            s->n_idle++;
            if (due == INT64_MAX) {
                pthread_cond_wait(&s->work_cv, &s->mu);
            } else {
                struct timespec ts = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
                pthread_cond_timedwait(&s->work_cv, &s->mu, &ts);
            }
            s->n_idle--;
            continue;
        }
        /* form the batch */
        df__loaded_t *ld = me->head->priv->ld;
        int maxb = ld->max_batch_size;
        /* Split a ready queue between this worker and the idle ones, so a
         * burst (e.g. every client of a closed loop answered by the last
         * batch) runs on every core instead of one; pieces of at least
         * batch_split_min poses (smaller batches lose too much per pose;
         * 0: never split). */
        int target = maxb, split_min = s->cfg->batch_split_min;
        if (split_min > 0 && s->n_idle > 0 && me->q_poses > split_min) {
            int share = (me->q_poses + s->n_idle) / (s->n_idle + 1);
            if (share < split_min) share = split_min;
            if (share < target) target = share;
        }
        int nj = 0, poses = 0;
        df_job_t *expired = NULL;
        int nexp = 0;
        while (me->head) {
            df_job_t *j = me->head;
            struct df__job_priv *q = j->priv;
            if (q->deadline_ns <= now) {
                me->head = q->next;
                me->q_jobs--;
                me->q_poses -= q->B;
                q->next = expired;
                expired = j;
                nexp++;
                continue;
            }
            if (nj > 0 && (q->ld != ld || poses + q->B > maxb || poses >= target)) break;
            if (nj == 0) ld = q->ld, maxb = ld->max_batch_size;
            if (worker_grow(w, poses + q->B, nj + 1)) break;
            me->head = q->next;
            me->q_jobs--;
            me->q_poses -= q->B;
            w->jobs[nj++] = j;
            poses += q->B;
        }
        if (!me->head) me->tail = NULL;
        me->split_ready = me->head != NULL && target < maxb && poses >= target;
        if (me->head && s->n_idle > 0) pthread_cond_signal(&s->work_cv); /* more for another */
        pthread_mutex_unlock(&s->mu);

        while (expired) {
            df_job_t *j = expired;
            expired = j->priv->next;
            j->status = df_error_set(&j->err, DF_ETIMEDOUT,
                                     "request timed out after %lld us in the queue of '%s'",
                                     (long long)((now - j->priv->t_submit_ns) / 1000), me->name);
            j->queue_us = (now - j->priv->t_submit_ns) / 1000;
            df__job_complete(s, j);
        }
        if (nj > 0) {
            int64_t t0 = df__now_ns();
            run_batch(w, w->jobs, nj);
            int64_t t1 = df__now_ns();
            int chars = count_chars(w->jobs, nj);
            for (int j = 0; j < nj; j++) {
                df_job_t *job = w->jobs[j];
                job->queue_us = (t0 - job->priv->t_submit_ns) / 1000;
                job->compute_us = (t1 - t0) / 1000;
                job->batch_poses = poses;
                job->batch_requests = nj;
                job->batch_characters = chars;
            }
            finish(s, me, w->jobs, nj, 1, poses, chars);
            trim(w);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

extern void openblas_set_num_threads(int);

int df__workers_start(df_server_t *s, df_error_t *err)
{
    openblas_set_num_threads(1);
    int n = s->cfg->workers > 0 ? s->cfg->workers : 1;
    s->workers = calloc((size_t)n, sizeof *s->workers);
    if (!s->workers) return df_error_set(err, DF_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        df__worker_t *w = &s->workers[i];
        w->s = s;
        w->id = i;
        w->scratch = df_scratch_new();
        if (!w->scratch || worker_grow(w, 64, 64)) {
            s->n_workers = i;
            return df_error_set(err, DF_ENOMEM, "out of memory for worker %d", i);
        }
        if (pthread_create(&w->th, NULL, worker_main, w)) {
            df_scratch_free(&w->scratch);
            s->n_workers = i;
            return df_error_set(err, DF_EINTERNAL, "cannot start worker thread %d", i);
        }
        s->n_workers = i + 1;
    }
    df__log("%d workers started", n);
    return DF_OK;
}

void df__workers_stop(df_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->draining = 1;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_workers; i++) pthread_join(s->workers[i].th, NULL);
    /* workers drain the queues before exiting (stopping makes every queue
     * ready), so nothing is left queued here */
    for (int i = 0; i < s->n_workers; i++) {
        worker_bufs_free(&s->workers[i]);
    }
    free(s->workers);
    s->workers = NULL;
    s->n_workers = 0;
}

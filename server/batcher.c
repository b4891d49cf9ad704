/* batcher.c — jobs in: the job pool, validation, the per-model queues, and
 * the server object's lifecycle.
 *
 * DESIGN
 * df_server_submit runs on a front's thread. It resolves the character to
 * its model entry and takes a reference to the loaded version, then checks
 * everything a batch could trip on, so one bad request never fails a batch
 * of good ones: input names, shapes (per-pose, [B, per-pose], or flat), one
 * B for all inputs, finite values, output names, clip. It points
 * priv->in_base[i] at each given input, samples a requested clip into the
 * job's own buffer, sizes the output buffers, and appends the job to the
 * MODEL's queue (shared by the model's characters) unless the queue already
 * holds max_queue_length requests (DF_EOVERLOAD) or the server is draining
 * (DF_ESHUTDOWN). Workers (worker.c) take batches from the queues.
 *
 * Jobs are recycled through a pool; their buffers only grow, so steady
 * traffic allocates nothing.
 */
#include "engine.h"
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX 1024
#define MIB 1048576.0

static void uncharge(df_server_t *s, struct df__job_priv *p);

static size_t job_bytes(const struct df__job_priv *p)
{
    return p->f32_cap + p->enc_cap + p->clip_cap;
}

static void job_bufs_free(struct df__job_priv *p)
{
    free(p->f32);
    free(p->enc);
    free(p->clip);
    p->f32 = NULL;
    p->enc = NULL;
    p->clip = NULL;
    p->f32_cap = p->enc_cap = p->clip_cap = 0;
}

df_job_t *df_job_new(df_server_t *s)
{
    df_job_t *j = NULL;
    pthread_mutex_lock(&s->pool_mu);
    if (s->pool) {
        j = s->pool;
        s->pool = j->priv->next;
        s->pool_n--;
        s->pool_bytes -= job_bytes(j->priv);
    }
    pthread_mutex_unlock(&s->pool_mu);
    if (!j) {
        j = malloc(sizeof *j);
        struct df__job_priv *p = calloc(1, sizeof *p);
        if (!j || !p) {
            free(j);
            free(p);
            return NULL;
        }
        j->priv = p;
    }
    struct df__job_priv *p = j->priv;
    memset(j, 0, offsetof(df_job_t, priv));
    p->s = s;
    p->next = NULL;
    p->ld = NULL;
    p->me = NULL;
    p->seq = NULL;
    p->seq_in = NULL;
    p->seq_out = NULL;
    return j;
}

void df_job_free(df_job_t **pj)
{
    df_job_t *j = *pj;
    *pj = NULL;
    if (!j) return;
    struct df__job_priv *p = j->priv;
    df__loaded_unref(&p->ld);
    df_server_t *s = p->s;
    uncharge(s, p);
    /* the pool keeps at most pool_keep_bytes of buffers: a job that would
     * take it past is pooled without them (one large request must not
     * hold its answer's memory for good) */
    size_t bytes = job_bytes(p);
    pthread_mutex_lock(&s->pool_mu);
    int keep_bufs = s->pool_bytes + bytes <= s->cfg->pool_keep_bytes;
    if (s->pool_n < POOL_MAX && keep_bufs) {
        p->next = s->pool;
        s->pool = j;
        s->pool_n++;
        s->pool_bytes += bytes;
        j = NULL;
    }
    pthread_mutex_unlock(&s->pool_mu);
    if (!j) return;
    job_bufs_free(p);
    pthread_mutex_lock(&s->pool_mu);
    if (s->pool_n < POOL_MAX) {
        p->next = s->pool;
        s->pool = j;
        s->pool_n++;
        j = NULL;
    }
    pthread_mutex_unlock(&s->pool_mu);
    if (j) {
        free(p);
        free(j);
    }
}

static int grow(void **buf, size_t *cap, size_t bytes)
{
    if (*cap >= bytes) return 0;
    size_t nc = bytes < 4096 ? 4096 : bytes + bytes / 4;
    void *nb = NULL;
    if (posix_memalign(&nb, 64, nc)) return -1;
    free(*buf);
    *buf = nb;
    *cap = nc;
    return 0;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < ndim && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", k ? "," : "", (long long)shape[k]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* B for one input given as `in` against desc (per pose), or -1. */
static int64_t input_batch(const df_job_input_t *in, const df_io_desc_t *d, int64_t numel)
{
    if (in->ndim < 0 || in->ndim > DF_MAX_DIMS) return -1;
    for (int k = 0; k < in->ndim; k++)
        if (in->shape[k] < 0) return -1;
    if (in->ndim == d->ndim) {
        int same = 1;
        for (int k = 0; k < d->ndim; k++) same &= in->shape[k] == d->shape[k];
        if (same) return 1;
    }
    if (in->ndim == d->ndim + 1) {
        int same = 1;
        for (int k = 0; k < d->ndim; k++) same &= in->shape[k + 1] == d->shape[k];
        if (same) return in->shape[0];
    }
    if (in->ndim == 1 && in->shape[0] == numel) return 1;
    if (in->ndim == 2 && in->shape[1] == numel) return in->shape[0];
    return -1;
}

/* Gives back what the job counted in s->out_inflight. */
static void uncharge(df_server_t *s, struct df__job_priv *p)
{
    if (p->out_charged) {
        atomic_fetch_sub(&s->out_inflight, p->out_charged);
        p->out_charged = 0;
    }
}

static int reject(df_server_t *s, df_job_t *job, int rc, const df_error_t *e, df_error_t *err)
{
    struct df__job_priv *p = job->priv;
    if (p->me) {
        pthread_mutex_lock(&s->mu);
        p->me->n_failure++;
        pthread_mutex_unlock(&s->mu);
    }
    df__loaded_unref(&p->ld);
    p->me = NULL;
    uncharge(s, p);
    job->status = rc;
    job->err = *e;
    if (err) *err = *e;
    return rc;
}

int df_server_submit(df_server_t *s, df_job_t *job, df_error_t *err)
{
    struct df__job_priv *p = job->priv;
    df_error_t e = {0};
    char sh[96], sh2[96];
    job->status = DF_OK;
    job->ran_inline = 0;
    job->err.code = 0;
    job->err.msg[0] = 0;
    if (!job->done) {
        df_error_set(&e, DF_EINTERNAL, "job without completion callback");
        return reject(s, job, DF_EINTERNAL, &e, err);
    }
    job->character[DF_NAME_MAX - 1] = 0;

    pthread_mutex_lock(&s->mu);
    if (s->draining || s->stopping) {
        pthread_mutex_unlock(&s->mu);
        df_error_set(&e, DF_ESHUTDOWN, "server is shutting down");
        return reject(s, job, DF_ESHUTDOWN, &e, err);
    }
    int ci = -1;
    df__mentry_t *me = df__find_char(s, job->character, &ci);
    if (me) {
        p->me = me;
        p->ld = df__loaded_ref(me->cur);
        p->char_idx = ci;
    }
    pthread_mutex_unlock(&s->mu);
    if (!me) {
        df_error_set(&e, DF_ENOTFOUND, "unknown model or character '%s'", job->character);
        return reject(s, job, DF_ENOTFOUND, &e, err);
    }
    df__loaded_t *ld = p->ld;
    const df_model_t *m = ld->model;
    int ni = df_model_n_inputs(m), no = df_model_n_outputs(m);
    df__strcpy_n(job->model_name, sizeof job->model_name, me->name);
    job->model_version = df_model_version(m);

    /* inputs */
    int64_t B = job->batch > 0 ? job->batch : -1;
    const char *B_from = job->batch > 0 ? "the request's batch size" : NULL;
    for (int i = 0; i < DF_MAX_IO; i++) p->in_base[i] = NULL;
    if (job->n_inputs < 0 || job->n_inputs > DF_MAX_IO) {
        df_error_set(&e, DF_ELIMIT, "too many inputs (%d, max %d)", job->n_inputs, DF_MAX_IO);
        return reject(s, job, DF_ELIMIT, &e, err);
    }
    for (int k = 0; k < job->n_inputs; k++) {
        df_job_input_t *in = &job->inputs[k];
        in->name[DF_NAME_MAX - 1] = 0;
        int i = df_model_find_input(m, in->name);
        if (i < 0) {
            char list[256];
            size_t n = 0;
            list[0] = 0;
            for (int q = 0; q < ni && n < sizeof list; q++) {
                const df_io_desc_t *d = df_model_input(m, q);
                shape_str(sh, sizeof sh, d->ndim, d->shape);
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s %s", q ? ", " : "", d->name, sh);
            }
            df_error_set(&e, DF_EINVAL, "unknown input '%s' for '%s' (inputs: %s)", in->name,
                         job->character, ni ? list : "none");
            return reject(s, job, DF_EINVAL, &e, err);
        }
        if (p->in_base[i]) {
            df_error_set(&e, DF_EINVAL, "input '%s' given twice", in->name);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        const df_io_desc_t *d = df_model_input(m, i);
        int64_t b = input_batch(in, d, ld->in_numel[i]);
        if (b < 0) {
            shape_str(sh, sizeof sh, in->ndim, in->shape);
            shape_str(sh2, sizeof sh2, d->ndim, d->shape);
            df_error_set(&e, DF_EINVAL,
                         "input '%s': shape %s does not match %s (or [B,%s for B poses)",
                         in->name, sh, sh2, sh2 + 1);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        if (b == 0 || b > DF_JOB_MAX_POSES) {
            df_error_set(&e, b ? DF_ELIMIT : DF_EINVAL,
                         "input '%s': %lld poses (must be 1..%d)", in->name, (long long)b,
                         DF_JOB_MAX_POSES);
            return reject(s, job, e.code, &e, err);
        }
        if (B < 0) {
            B = b;
            B_from = in->name;
        } else if (b != B) {
            df_error_set(&e, DF_EINVAL, "input '%s' has %lld poses but %s has %lld", in->name,
                         (long long)b, B_from, (long long)B);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        if (!in->data) {
            df_error_set(&e, DF_EINVAL, "input '%s': no data", in->name);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        int64_t n = b * ld->in_numel[i];
        for (int64_t x = 0; x < n; x++)
            if (!isfinite(in->data[x])) {
                df_error_set(&e, DF_EINVAL, "input '%s': element %lld (pose %lld) is not finite",
                             in->name, (long long)x, (long long)(x / ld->in_numel[i]));
                return reject(s, job, DF_EINVAL, &e, err);
            }
        p->in_base[i] = in->data;
    }
    if (B < 0) B = 1;
    if (B > DF_JOB_MAX_POSES) {
        df_error_set(&e, DF_ELIMIT, "%lld poses in one request (max %d)", (long long)B,
                     DF_JOB_MAX_POSES);
        return reject(s, job, DF_ELIMIT, &e, err);
    }
    p->B = (int)B;
    job->batch = (int)B;

    /* clip: which one (sampled below, once the answer's size passed) */
    int clip_idx = -1;
    size_t clip_per = 0; /* floats per pose of the inputs it fills */
    if (job->clip[0]) {
        job->clip[DF_NAME_MAX - 1] = 0;
        clip_idx = df_model_clip_find(m, job->clip);
        if (clip_idx < 0) {
            df_error_set(&e, DF_EINVAL, "unknown clip '%s' for '%s'", job->clip, job->character);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        if (!isfinite(job->clip_time) || !isfinite(job->clip_dt)) {
            df_error_set(&e, DF_EINVAL, "clip time is not finite");
            return reject(s, job, DF_EINVAL, &e, err);
        }
        for (int i = 0; i < ni; i++)
            if (!p->in_base[i]) clip_per += (size_t)ld->in_numel[i];
    }

    /* outputs */
    if (job->n_outputs < 0 || job->n_outputs > DF_MAX_IO) {
        df_error_set(&e, DF_ELIMIT, "too many outputs requested (%d)", job->n_outputs);
        return reject(s, job, DF_ELIMIT, &e, err);
    }
    if (job->n_outputs == 0) {
        job->n_outputs = no;
        for (int o = 0; o < no; o++) {
            memset(&job->outputs[o], 0, sizeof job->outputs[o]);
            df__strcpy_n(job->outputs[o].name, DF_NAME_MAX, df_model_output(m, o)->name);
            job->outputs[o].as_text = job->as_text_all;
        }
    }
    size_t f32_total = 0, enc_total = 0;
    uint64_t text_total = 0;
    for (int k = 0; k < job->n_outputs; k++) {
        df_job_output_t *out = &job->outputs[k];
        out->name[DF_NAME_MAX - 1] = 0;
        int o = df_model_find_output(m, out->name);
        if (o < 0) {
            char list[256];
            size_t n = 0;
            list[0] = 0;
            for (int q = 0; q < no && n < sizeof list; q++)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", q ? ", " : "",
                                      df_model_output(m, q)->name);
            df_error_set(&e, DF_EINVAL, "unknown output '%s' for '%s' (outputs: %s)", out->name,
                         job->character, list);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        for (int k2 = 0; k2 < k; k2++)
            if (job->outputs[k2].index == o) {
                df_error_set(&e, DF_EINVAL, "output '%s' requested twice", out->name);
                return reject(s, job, DF_EINVAL, &e, err);
            }
        out->index = o;
        /* the output's own encoding, else the request's, else the character's */
        if (out->encoding == DF_ENC_DEFAULT) out->encoding = job->encoding;
        if (out->encoding == DF_ENC_DEFAULT) out->encoding = ld->char_enc[p->char_idx];
        if (out->encoding < DF_ENC_F32 || out->encoding > DF_ENC_I16) {
            df_error_set(&e, DF_EINVAL, "output '%s': bad encoding", out->name);
            return reject(s, job, DF_EINVAL, &e, err);
        }
        const df_io_desc_t *d = df_model_output(m, o);
        out->ndim = d->ndim + 1;
        out->shape[0] = B;
        for (int q = 0; q < d->ndim; q++) out->shape[q + 1] = d->shape[q];
        size_t n = (size_t)B * (size_t)ld->out_numel[o];
        f32_total += (n * sizeof(float) + 63) & ~(size_t)63;
        if (out->encoding != DF_ENC_F32) enc_total += (n * 2 + 63) & ~(size_t)63;
        if (out->as_text && job->text_value_bytes > 0)
            text_total += (uint64_t)n * (uint64_t)job->text_value_bytes;
    }

    /* the answer's size, before anything is allocated for it */
    uint64_t clip_bytes = (uint64_t)clip_per * (uint64_t)B * sizeof(float);
    uint64_t need = (uint64_t)f32_total + enc_total + clip_bytes + text_total;
    const df_config_t *cfg = s->cfg;
    if (need > cfg->max_output_bytes) {
        df_error_set(&e, DF_ELIMIT,
                     "the answer would take %.1f MiB (%lld poses; %.1f MiB of it as text), "
                     "more than max_output_bytes (%.1f MiB): ask for fewer poses or outputs, "
                     "or binary or float16 outputs",
                     (double)need / MIB, (long long)B, (double)text_total / MIB,
                     (double)cfg->max_output_bytes / MIB);
        return reject(s, job, DF_ELIMIT, &e, err);
    }
    uint64_t before = atomic_fetch_add(&s->out_inflight, need);
    p->out_charged = need;
    if (before + need > cfg->max_output_inflight_bytes) {
        df_error_set(&e, DF_EOVERLOAD,
                     "server busy: %.1f MiB of answers in flight, this one needs %.1f MiB more "
                     "(max_output_inflight_bytes %.1f MiB); retry later",
                     (double)before / MIB, (double)need / MIB,
                     (double)cfg->max_output_inflight_bytes / MIB);
        return reject(s, job, DF_EOVERLOAD, &e, err);
    }

    /* clip: fill inputs the request did not give */
    if (clip_idx >= 0) {
        if (grow((void **)&p->clip, &p->clip_cap, clip_per * (size_t)B * sizeof(float) + 64)) {
            df_error_set(&e, DF_ENOMEM, "out of memory");
            return reject(s, job, DF_ENOMEM, &e, err);
        }
        /* layout: for each absent input i, B*numel floats */
        float *bufs[DF_MAX_IO];
        float *base[DF_MAX_IO];
        size_t off = 0;
        for (int i = 0; i < ni; i++) {
            base[i] = p->in_base[i] ? NULL : p->clip + off * (size_t)B;
            if (!p->in_base[i]) off += (size_t)ld->in_numel[i];
        }
        uint32_t filled = 0;
        for (int64_t b = 0; b < B; b++) {
            for (int i = 0; i < ni; i++)
                bufs[i] = base[i] ? base[i] + b * ld->in_numel[i] : NULL;
            uint32_t f = 0;
            int rc = df_model_clip_sample(m, clip_idx, job->clip_time + (double)b * job->clip_dt,
                                          bufs, &f, &e);
            if (rc) return reject(s, job, rc, &e, err);
            filled = f;
        }
        for (int i = 0; i < ni; i++)
            if (base[i] && (filled & (1u << i))) p->in_base[i] = base[i];
    }

    if (grow((void **)&p->f32, &p->f32_cap, f32_total + 64) ||
        grow(&p->enc, &p->enc_cap, enc_total + 64)) {
        df_error_set(&e, DF_ENOMEM, "out of memory for outputs");
        return reject(s, job, DF_ENOMEM, &e, err);
    }
    size_t foff = 0, eoff = 0;
    for (int k = 0; k < job->n_outputs; k++) {
        df_job_output_t *out = &job->outputs[k];
        size_t n = (size_t)B * (size_t)ld->out_numel[out->index];
        out->f32 = (float *)((char *)p->f32 + foff);
        foff += (n * sizeof(float) + 63) & ~(size_t)63;
        if (out->encoding == DF_ENC_F32) {
            out->bytes = out->f32;
            out->nbytes = n * sizeof(float);
        } else {
            out->bytes = (char *)p->enc + eoff;
            out->nbytes = n * 2;
            eoff += (n * 2 + 63) & ~(size_t)63;
        }
        memset(&out->quant, 0, sizeof out->quant);
        out->clamped = 0;
    }

    /* queue */
    int64_t now = df__now_ns();
    p->t_submit_ns = now;
    int64_t to = job->timeout_us > 0 ? job->timeout_us : ld->timeout_us;
    p->deadline_ns = now + to * 1000;
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->stopping) {
        pthread_mutex_unlock(&s->mu);
        df_error_set(&e, DF_ESHUTDOWN, "server is shutting down");
        return reject(s, job, DF_ESHUTDOWN, &e, err);
    }
    if (me->q_jobs >= ld->max_queue_length) {
        int ql = me->q_jobs;
        pthread_mutex_unlock(&s->mu);
        df_error_set(&e, DF_EOVERLOAD, "model '%s' is overloaded: %d requests queued (max %d)",
                     me->name, ql, ld->max_queue_length);
        return reject(s, job, DF_EOVERLOAD, &e, err);
    }
    if (job->seq) {
        /* a frame of a sequence: in the sequence's order (sequence.c) */
        int run = 0, rc = df__seq_admit(s, job, now, &run, &e);
        if (rc) {
            pthread_mutex_unlock(&s->mu);
            return reject(s, job, rc, &e, err);
        }
        if (!run) { /* waits for the sequence's request in flight */
            s->inflight++;
            pthread_mutex_unlock(&s->mu);
            return DF_OK;
        }
    }
    /* Inline: a request cheaper than the hand-off to a worker, for a model
     * with nothing queued (so it overtakes no one), runs right here. */
    if (job->allow_inline && p->B <= ld->inline_poses && me->head == NULL) {
        s->inflight++;
        pthread_mutex_unlock(&s->mu);
        df__run_inline(s, job);
        return DF_OK;
    }
    s->inflight++;
    df__queue_push(s, job);
    pthread_mutex_unlock(&s->mu);
    return DF_OK;
}

void df__queue_push(df_server_t *s, df_job_t *job)
{
    struct df__job_priv *p = job->priv;
    df__mentry_t *me = p->me;
    df__loaded_t *ld = p->ld;
    p->next = NULL;
    int was_empty = me->head == NULL;
    if (me->tail) me->tail->priv->next = job;
    else me->head = job;
    me->tail = job;
    me->q_jobs++;
    me->q_poses += p->B;
    /* Wake an idle worker only when it has something new to decide: the
     * queue became ready, or it was empty (a new due time). A worker
     * already sleeping until this queue's due time needs no wake-up, which
     * saves a futex round trip per request under load. */
    if (s->n_idle > 0 &&
        (was_empty || me->q_poses >= ld->max_batch_size || ld->max_queue_delay_us == 0))
        pthread_cond_signal(&s->work_cv);
}

int df_http_status_for(int code)
{
    switch (code) {
    case DF_OK: return 200;
    case DF_EINVAL: case DF_EFORMAT: case DF_EUNSUPPORTED: case DF_ENUMERIC: return 400;
    case DF_ENOTFOUND: return 404;
    case DF_ELIMIT: return 413;
    case DF_EOVERLOAD: return 429;
    case DF_ESHUTDOWN: case DF_ETIMEDOUT: return 503;
    default: return 500;
    }
}

int df_server_new(const df_config_t *cfg, df_server_t **out, df_error_t *err)
{
    /* Blocks of 1 MiB and more are mapped and unmapped on free, always:
     * glibc otherwise raises its mmap threshold to the largest block freed
     * (up to 32 MiB), after which the buffers of a large request come from
     * the heap and their memory is not returned when the pools let go of
     * them (docs/server.md, "Memory"). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    df_server_t *s = calloc(1, sizeof *s);
    if (!s) return df_error_set(err, DF_ENOMEM, "out of memory");
    s->cfg = cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_mutex_init(&s->load_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->work_cv, &ca);
    pthread_cond_init(&s->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    s->t_start_ns = df__now_ns();
    int rc = df__seq_init(s, err);
    if (rc) {
        df_server_free(&s);
        return rc;
    }
    *out = s;
    return DF_OK;
}

int df_server_start(df_server_t *s, df_error_t *err)
{
    int rc = df__workers_start(s, err);
    if (rc) return rc;
    df_server_rescan(s);
    df__seq_prealloc(s);
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_mutex_unlock(&s->mu);
    return DF_OK;
}

int df_server_ready(df_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    int r = s->ready && !s->draining;
    pthread_mutex_unlock(&s->mu);
    return r;
}

const df_config_t *df_server_config(const df_server_t *s) { return s->cfg; }

int df_server_drain(df_server_t *s, int64_t timeout_ms)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_cond_broadcast(&s->work_cv);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t end = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + timeout_ms * 1000000;
    while (s->inflight > 0) {
        struct timespec d = {(time_t)(end / 1000000000), (long)(end % 1000000000)};
        if (pthread_cond_timedwait(&s->idle_cv, &s->mu, &d)) break;
    }
    int left = (int)s->inflight;
    pthread_mutex_unlock(&s->mu);
    return left;
}

void df_server_free(df_server_t **ps)
{
    df_server_t *s = *ps;
    *ps = NULL;
    if (!s) return;
    df__workers_stop(s);
    df__registry_free(s);
    df__seq_free(s);
    while (s->pool) {
        df_job_t *j = s->pool;
        s->pool = j->priv->next;
        job_bufs_free(j->priv);
        free(j->priv);
        free(j);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_mutex_destroy(&s->load_mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}

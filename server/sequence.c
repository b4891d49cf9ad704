/* sequence.c — Triton's sequence batcher: per-sequence order and state.
 *
 * DESIGN
 * A request may name a sequence (HTTP parameters sequence_id /
 * sequence_start / sequence_end, the socket's sequence block). A sequence
 * is keyed by (model, character, id) and lives in a table of max_sequences
 * slots made at start, with hash buckets and two lists through the slots
 * (free slots; idle live sequences, oldest first), so nothing is allocated
 * per request. Everything here runs under s->mu.
 *
 * Order: a sequence has at most one request queued or running (`busy`);
 * later ones wait on the sequence's own list in the order they were
 * submitted, and the first of them goes to the model's queue when the one
 * before it finished (df__seq_done, from the worker or inline completion).
 * So a batch never holds two frames of one sequence and a frame never
 * overtakes an earlier one, while frames of different sequences batch
 * together as usual.
 *
 * State: a model whose kind declares an input and an output both named
 * `state`, of the same size (the garment kind's damping), gets the
 * previous frame's state output as its state input. Each slot has two
 * buffers: a frame reads one and writes the other, and the sequence keeps
 * the written one when the frame succeeded (a failed frame leaves the
 * state as it was). A START resets it; a request that gives `state` itself
 * overrides it for that frame. The buffers are made at start for the
 * models loaded then (df__seq_prealloc); a model loaded later with a larger
 * state grows a slot's buffers when one of its sequences first runs.
 *
 * Lifetime: a sequence ends after its END request, or expires when it has
 * had no request for sequence_idle_timeout_ms (checked whenever a sequence
 * request arrives and when /metrics is read: the idle list is oldest first,
 * so that costs only the expired ones). An expired sequence keeps its slot
 * as a tombstone until the slot is needed, so a late request gets "expired"
 * rather than "unknown".
 */
#include "engine.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB 1048576.0
#define SLAB_MAX (256u << 20) /* state buffers made at start, at most */

static uint32_t seq_hash(const df__mentry_t *me, const char *chr, uint64_t id, const char *ids)
{
    uint32_t h = 2166136261u;
    uintptr_t m = (uintptr_t)me;
    for (size_t k = 0; k < sizeof m; k++) h = (h ^ (uint8_t)(m >> (8 * k))) * 16777619u;
    for (const char *c = chr; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    h = (h ^ 0xff) * 16777619u;
    for (int k = 0; k < 8; k++) h = (h ^ (uint8_t)(id >> (8 * k))) * 16777619u;
    for (const char *c = ids; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    return h;
}

/* the id as the messages show it: 42 or "take-3" */
static void id_text(char *buf, size_t cap, uint64_t id, const char *ids)
{
    if (ids[0]) snprintf(buf, cap, "\"%s\"", ids);
    else snprintf(buf, cap, "%llu", (unsigned long long)id);
}

int df__seq_init(df_server_t *s, df_error_t *err)
{
    int n = s->cfg->max_sequences;
    s->seq_free = s->seq_idle_head = s->seq_idle_tail = -1;
    if (n <= 0) return DF_OK;
    uint32_t nb = 16;
    while (nb < 2u * (uint32_t)n) nb *= 2;
    s->seqs = calloc((size_t)n, sizeof *s->seqs);
    s->seq_buckets = malloc(nb * sizeof *s->seq_buckets);
    if (!s->seqs || !s->seq_buckets) {
        free(s->seqs);
        free(s->seq_buckets);
        s->seqs = NULL;
        s->seq_buckets = NULL;
        return df_error_set(err, DF_ENOMEM, "out of memory for %d sequences (max_sequences)", n);
    }
    for (uint32_t b = 0; b < nb; b++) s->seq_buckets[b] = -1;
    s->seq_nbuckets = nb;
    s->n_seqs = n;
    for (int i = n - 1; i >= 0; i--) {
        s->seqs[i].state = DF__SEQ_FREE;
        s->seqs[i].next = s->seq_free;
        s->seq_free = i;
    }
    return DF_OK;
}

void df__seq_free(df_server_t *s)
{
    for (int i = 0; i < s->n_seqs; i++)
        if (s->seqs[i].own) free(s->seqs[i].buf);
    free(s->seqs);
    free(s->seq_buckets);
    free(s->seq_slab);
    s->seqs = NULL;
    s->seq_buckets = NULL;
    s->seq_slab = NULL;
    s->n_seqs = 0;
}

void df__seq_prealloc(df_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t numel = 0;
    for (size_t i = 0; i < s->n_models; i++) {
        const df__loaded_t *ld = s->models[i]->cur;
        if (ld && ld->state_out >= 0 && ld->state_numel > numel) numel = ld->state_numel;
    }
    double bytes = (double)s->n_seqs * 2.0 * (double)numel * sizeof(float);
    if (numel > 0 && s->n_seqs > 0 && !s->seq_slab && bytes <= SLAB_MAX) {
        s->seq_slab = calloc((size_t)s->n_seqs * 2 * (size_t)numel, sizeof(float));
        for (int i = 0; s->seq_slab && i < s->n_seqs; i++) {
            s->seqs[i].buf = s->seq_slab + (size_t)i * 2 * (size_t)numel;
            s->seqs[i].cap = numel;
        }
    }
    int made = s->seq_slab != NULL;
    pthread_mutex_unlock(&s->mu);
    if (numel > 0 && s->n_seqs > 0)
        df__log("sequences: %d slots, state buffers %s (%lld floats per state, %.1f MiB)",
                s->n_seqs, made ? "made" : "made when first used", (long long)numel,
                bytes / MIB);
}

/* ---- lists (under s->mu) */

static void idle_unlink(df_server_t *s, int32_t i)
{
    df__seq_t *q = &s->seqs[i];
    if (q->prev >= 0) s->seqs[q->prev].next = q->next;
    else if (s->seq_idle_head == i) s->seq_idle_head = q->next;
    else return; /* not in the list */
    if (q->next >= 0) s->seqs[q->next].prev = q->prev;
    else s->seq_idle_tail = q->prev;
    q->prev = q->next = -1;
}

static void idle_append(df_server_t *s, int32_t i)
{
    df__seq_t *q = &s->seqs[i];
    q->next = -1;
    q->prev = s->seq_idle_tail;
    if (s->seq_idle_tail >= 0) s->seqs[s->seq_idle_tail].next = i;
    else s->seq_idle_head = i;
    s->seq_idle_tail = i;
}

static void hash_unlink(df_server_t *s, int32_t i)
{
    int32_t *pp = &s->seq_buckets[s->seqs[i].hash & (s->seq_nbuckets - 1)];
    while (*pp >= 0 && *pp != i) pp = &s->seqs[*pp].hnext;
    if (*pp == i) *pp = s->seqs[i].hnext;
    s->seqs[i].hnext = -1;
}

static int32_t find(df_server_t *s, uint32_t h, const df__mentry_t *me, const char *chr,
                    uint64_t id, const char *ids)
{
    for (int32_t i = s->seq_buckets[h & (s->seq_nbuckets - 1)]; i >= 0; i = s->seqs[i].hnext) {
        const df__seq_t *q = &s->seqs[i];
        if (q->hash == h && q->me == me && q->id == id && !strcmp(q->id_str, ids) &&
            !strcmp(q->character, chr))
            return i;
    }
    return -1;
}

/* Expire the live sequences idle for longer than the timeout. */
static void sweep(df_server_t *s, int64_t now)
{
    int64_t to = s->cfg->sequence_idle_timeout_ms * 1000000;
    while (s->seq_idle_head >= 0) {
        int32_t i = s->seq_idle_head;
        df__seq_t *q = &s->seqs[i];
        if (now - q->last_ns <= to) break;
        idle_unlink(s, i);
        q->state = DF__SEQ_EXPIRED;
        q->idle_ms = (now - q->last_ns) / 1000000;
        s->seq_live--;
        s->seq_expired++;
    }
}

/* A slot for a new sequence: a free one, else the oldest expired one. */
static int32_t take_slot(df_server_t *s)
{
    int32_t i = s->seq_free;
    if (i >= 0) {
        s->seq_free = s->seqs[i].next;
        return i;
    }
    int32_t best = -1;
    for (int32_t k = 0; k < s->n_seqs; k++)
        if (s->seqs[k].state == DF__SEQ_EXPIRED &&
            (best < 0 || s->seqs[k].last_ns < s->seqs[best].last_ns))
            best = k;
    if (best >= 0) hash_unlink(s, best);
    return best;
}

/* The request becomes the sequence's running one: its state pointers. */
static void activate(df_server_t *s, df__seq_t *q, df_job_t *job)
{
    struct df__job_priv *p = job->priv;
    const df__loaded_t *ld = p->ld;
    q->busy = 1;
    if (job->seq_start) {
        q->has_state = 0;
        q->frames = 0;
    }
    job->seq_frame = ++q->frames;
    p->seq_in = NULL;
    p->seq_out = NULL;
    if (ld->state_out < 0) return;
    if (q->cap < ld->state_numel) {
        /* a model loaded after start with a larger state (once per slot) */
        float *nb = malloc((size_t)ld->state_numel * 2 * sizeof(float));
        if (!nb) {
            df__log("sequences: out of memory for a state of %lld floats: this frame runs "
                    "without it", (long long)ld->state_numel);
            return;
        }
        if (q->own) free(q->buf);
        q->buf = nb;
        q->own = 1;
        q->cap = ld->state_numel;
        q->has_state = 0;
    }
    if (q->has_state && q->nstate == ld->state_numel) p->seq_in = q->buf + q->cur * q->cap;
    p->seq_out = q->buf + (q->cur ^ 1) * q->cap;
    (void)s;
}

int df__seq_admit(df_server_t *s, df_job_t *job, int64_t now, int *run, df_error_t *err)
{
    struct df__job_priv *p = job->priv;
    df__loaded_t *ld = p->ld;
    df__mentry_t *me = p->me;
    char idt[DF_NAME_MAX + 8];
    *run = 0;
    job->seq_id_str[DF_NAME_MAX - 1] = 0;
    id_text(idt, sizeof idt, job->seq_id, job->seq_id_str);
    if (!s->n_seqs)
        return df_error_set(err, DF_EINVAL,
                            "sequence %s: this daemon keeps no sequences (max_sequences 0)", idt);
    if (ld->state_out >= 0 && p->B != 1)
        return df_error_set(err, DF_EINVAL,
                            "sequence %s of '%s': a frame of a sequence on a model with state "
                            "is one pose (this request has %d); send the poses one by one",
                            idt, job->character, p->B);
    sweep(s, now);
    uint32_t h = seq_hash(me, job->character, job->seq_id, job->seq_id_str);
    int32_t i = find(s, h, me, job->character, job->seq_id, job->seq_id_str);
    df__seq_t *q = i >= 0 ? &s->seqs[i] : NULL;
    if (!q || q->state != DF__SEQ_LIVE) {
        if (!job->seq_start) {
            if (q) {
                s->seq_refused_expired++;
                return df_error_set(err, DF_EINVAL,
                                    "sequence %s of '%s' expired: it had no request for %lld ms "
                                    "(sequence_idle_timeout_ms %lld); start it again with "
                                    "sequence_start",
                                    idt, job->character, (long long)q->idle_ms,
                                    (long long)s->cfg->sequence_idle_timeout_ms);
            }
            s->seq_refused_unknown++;
            return df_error_set(err, DF_EINVAL,
                                "inference request for sequence %s to '%s' must specify "
                                "sequence_start on its first request: no such live sequence",
                                idt, job->character);
        }
        if (s->seq_live >= s->n_seqs) {
            s->seq_refused_full++;
            return df_error_set(err, DF_EOVERLOAD,
                                "too many live sequences: %d (max_sequences); end one with "
                                "sequence_end, or wait until an idle one expires "
                                "(sequence_idle_timeout_ms %lld)",
                                s->seq_live, (long long)s->cfg->sequence_idle_timeout_ms);
        }
        if (!q) {
            i = take_slot(s);
            DF_ASSERT(i >= 0); /* fewer live sequences than slots */
            q = &s->seqs[i];
            q->me = me;
            q->hash = h;
            df__strcpy_n(q->character, sizeof q->character, job->character);
            q->id = job->seq_id;
            df__strcpy_n(q->id_str, sizeof q->id_str, job->seq_id_str);
            q->hnext = s->seq_buckets[h & (s->seq_nbuckets - 1)];
            s->seq_buckets[h & (s->seq_nbuckets - 1)] = i;
        }
        q->state = DF__SEQ_LIVE;
        q->prev = q->next = -1;
        q->busy = 0;
        q->ending = 0;
        q->wait_head = q->wait_tail = NULL;
        q->n_wait = 0;
        q->frames = 0;
        q->has_state = 0;
        s->seq_live++;
    } else if (q->ending && !job->seq_start) {
        s->seq_refused_unknown++;
        return df_error_set(err, DF_EINVAL,
                            "sequence %s of '%s' has ended (sequence_end was sent); start it "
                            "again with sequence_start",
                            idt, job->character);
    }
    if (q->busy && q->n_wait >= ld->max_queue_length)
        return df_error_set(err, DF_EOVERLOAD,
                            "sequence %s of '%s': %d requests already wait for their turn "
                            "(max_queue_length)",
                            idt, job->character, q->n_wait);
    if (job->seq_start) {
        s->seq_started++;
        q->ending = 0;
    }
    if (job->seq_end) q->ending = 1;
    p->seq = q;
    if (q->busy) {
        p->next = NULL;
        if (q->wait_tail) q->wait_tail->priv->next = job;
        else q->wait_head = job;
        q->wait_tail = job;
        q->n_wait++;
        return DF_OK;
    }
    idle_unlink(s, i);
    activate(s, q, job);
    *run = 1;
    return DF_OK;
}

df_job_t *df__seq_done(df_server_t *s, df_job_t *job, int64_t now)
{
    struct df__job_priv *p = job->priv;
    df__seq_t *q = p->seq;
    if (!q) return NULL;
    p->seq = NULL;
    if (job->status == DF_OK && p->seq_out) {
        q->cur ^= 1;
        q->has_state = 1;
        q->nstate = p->ld ? p->ld->state_numel : 0;
    }
    p->seq_in = NULL;
    p->seq_out = NULL;
    int32_t i = (int32_t)(q - s->seqs);
    if (job->seq_end) s->seq_ended++;
    df_job_t *next = q->wait_head;
    if (next) {
        q->wait_head = next->priv->next;
        if (!q->wait_head) q->wait_tail = NULL;
        q->n_wait--;
        next->priv->next = NULL;
        activate(s, q, next);
        return next;
    }
    q->busy = 0;
    q->last_ns = now;
    if (job->seq_end) {
        /* ended: the slot is free again */
        hash_unlink(s, i);
        q->state = DF__SEQ_FREE;
        q->next = s->seq_free;
        s->seq_free = i;
        s->seq_live--;
        return NULL;
    }
    idle_append(s, i);
    return NULL;
}

/* /metrics: sweeps first, so an expired sequence is counted without
 * waiting for the next sequence request (metrics.c holds s->mu). */
void df__seq_sweep(df_server_t *s, int64_t now)
{
    if (s->n_seqs) sweep(s, now);
}

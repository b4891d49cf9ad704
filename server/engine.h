/* engine.h — the engine's internal state, shared by registry.c (models and
 * characters), batcher.c (jobs, submit, queues), worker.c (threads,
 * evaluation, drain) and metrics.c. Fronts use job.h only.
 *
 * DESIGN
 * One mutex (s->mu) guards the registry, every model queue and the
 * metrics: the critical sections are a few pointer moves, and a 2-core
 * machine gains nothing from finer locks. Workers sleep on s->work_cv;
 * submit signals it; drain waits on s->idle_cv.
 *
 * A model directory is a df__mentry_t that lives as long as the server
 * (stable pointer, never freed before df_server_free); each successful
 * (re)load creates a df__loaded_t (model + config + resolved character
 * defaults), reference-counted: the registry holds one reference, every
 * queued or running job holds one. A reload swaps mentry->cur; jobs
 * already queued finish on the version they validated against, and a
 * batch never mixes versions.
 */
#ifndef DF_SERVER_ENGINE_H
#define DF_SERVER_ENGINE_H

#include "config.h"
#include "job.h"
#include <pthread.h>
#include <stdatomic.h>

#define DF__NHIST 16 /* histogram buckets (µs): 50,100,...  +Inf */
#define DF__NBATCH 10 /* batch-size buckets: 1,2,4,...,256,+Inf */

typedef struct df__loaded {
    atomic_int refs;
    df_model_t *model;           /* one reference, owned */
    df_model_config_t cfg;       /* owned */
    int n_chars;                 /* cfg.n_characters, or 1 for a bare model */
    char (*char_names)[DF_NAME_MAX];
    uint32_t *char_flags;
    df_encoding_t *char_enc;
    const float **char_defaults; /* [n_chars * DF_MAX_IO], NULL: model's */
    int64_t in_numel[DF_MAX_IO], out_numel[DF_MAX_IO];
    int max_batch_size;          /* effective (config overrides applied) */
    int64_t max_queue_delay_us;
    int max_queue_length;
    int64_t timeout_us;
    float lo[3], hi[3];          /* rest bbox */
    int64_t single_ns;           /* one default pose, measured at load (min
                                  * of 3; -1: not measured / too slow) */
    int inline_poses;            /* run requests of <= this many poses on
                                  * the front's thread (0: never) */
    size_t scratch_need;         /* scratch bytes of a max_batch_size batch */
    int state_in, state_out;     /* a `state` input and output of the same
                                  * size: sequences carry it (-1: none) */
    int64_t state_numel;
} df__loaded_t;

typedef struct df__mentry {
    char name[DF_NAME_MAX];      /* immutable */
    df__loaded_t *cur;           /* guarded by s->mu; NULL when not loaded */
    int64_t version;             /* guarded by s->mu */
    char reason[512];            /* guarded by s->mu: last load problem */
    /* queue, guarded by s->mu */
    df_job_t *head, *tail;
    int q_jobs, q_poses;
    int split_ready;             /* the rest of a batch split between idle
                                  * workers: ready now (worker.c) */
    /* metrics, guarded by s->mu */
    uint64_t n_success, n_failure, n_batches, n_batch_mixed, n_poses;
    uint64_t queue_us_sum, compute_us_sum;
    uint64_t queue_hist[DF__NHIST], compute_hist[DF__NHIST];
    uint64_t batch_hist[DF__NBATCH];
    uint64_t n_loads, n_load_failures;
} df__mentry_t;

struct df__job_priv {
    df_server_t *s;
    df_job_t *next;              /* queue or pool link */
    df__loaded_t *ld;            /* reference while queued/running */
    df__mentry_t *me;
    int char_idx;
    int B;
    const float *in_base[DF_MAX_IO]; /* per model input: B*numel or NULL */
    int64_t t_submit_ns, deadline_ns;
    float *f32; size_t f32_cap;  /* output floats (grow only) */
    void *enc; size_t enc_cap;   /* encoded outputs (grow only) */
    float *clip; size_t clip_cap;/* sampled clip inputs (grow only) */
    uint64_t out_charged;        /* bytes counted in s->out_inflight */
    /* sequences (sequence.c), under s->mu until the job runs */
    struct df__seq *seq;         /* its sequence, NULL: none */
    const float *seq_in;         /* state input from the previous frame */
    float *seq_out;              /* where its state output goes */
};

/* One sequence of the table (sequence.c). Guarded by s->mu; a running
 * job reads seq_in and writes seq_out without the lock (no other job of
 * the sequence runs meanwhile). */
enum { DF__SEQ_FREE, DF__SEQ_LIVE, DF__SEQ_EXPIRED };
typedef struct df__seq {
    int state;                   /* DF__SEQ_* */
    df__mentry_t *me;            /* key: model, character, id */
    char character[DF_NAME_MAX];
    uint64_t id;
    char id_str[DF_NAME_MAX];
    uint32_t hash;
    int32_t hnext;               /* hash chain (LIVE and EXPIRED) */
    int32_t prev, next;          /* idle list (LIVE, not busy) or free list */
    int64_t last_ns;             /* end of its last request */
    int busy;                    /* a request of it queued or running */
    int ending;                  /* an END was submitted last */
    df_job_t *wait_head, *wait_tail; /* requests behind the busy one */
    int n_wait;
    int64_t frames;              /* requests since its start */
    float *buf;                  /* two state buffers of cap floats each */
    int64_t cap;
    int own;                     /* buf is malloc'd (else in the slab) */
    int cur;                     /* buffer holding the last state */
    int has_state;
    int64_t nstate;              /* floats of the last state */
    int64_t idle_ms;             /* EXPIRED: how long it was idle */
} df__seq_t;

typedef struct df__worker {
    df_server_t *s;
    int id;
    pthread_t th;
    df_scratch_t *scratch;
    int cap;                     /* poses the arrays hold */
    const float **in[DF_MAX_IO];
    float **out[DF_MAX_IO];
    uint32_t *flags;
    float *sink; size_t sink_cap;/* outputs nobody in the batch asked for */
    df_job_t **jobs; int jobs_cap;
    size_t warm_bytes;           /* scratch pre-faulted up to (worker.c) */
} df__worker_t;

struct df_server {
    const df_config_t *cfg;      /* borrowed, immutable */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    /* guarded by mu */
    df__mentry_t **models; size_t n_models, cap_models;
    size_t rr;                   /* round-robin cursor */
    int ready, draining, stopping;
    int64_t inflight;            /* submitted, not yet done */
    int n_idle;                  /* workers waiting on work_cv */
    size_t scratch_need;         /* largest loaded model's scratch_need:
                                  * idle workers pre-fault that much */
    /* job pool, guarded by pool_mu */
    pthread_mutex_t pool_mu;
    df_job_t *pool;
    size_t pool_n;
    size_t pool_bytes;           /* buffer bytes of the pooled jobs
                                  * (<= cfg->pool_keep_bytes) */
    /* workers */
    int n_workers;
    df__worker_t *workers;
    int64_t t_start_ns;
    pthread_mutex_t load_mu;     /* serialises loads (slow, outside mu) */
    _Atomic uint64_t out_inflight; /* answer bytes of jobs between submit
                                  * and df_job_free (max_output_inflight_bytes) */
    /* sequences (sequence.c), guarded by mu */
    df__seq_t *seqs;             /* max_sequences slots, allocated at start */
    int n_seqs;
    int32_t *seq_buckets;        /* hash buckets (-1: empty) */
    uint32_t seq_nbuckets;       /* power of two */
    int32_t seq_free;            /* free list */
    int32_t seq_idle_head, seq_idle_tail; /* idle live sequences, oldest first */
    int seq_live;
    float *seq_slab;             /* state buffers made at start */
    uint64_t seq_started, seq_ended, seq_expired;
    uint64_t seq_refused_full, seq_refused_unknown, seq_refused_expired;
};

int64_t df__now_ns(void);
void df__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* registry.c */
df__loaded_t *df__loaded_ref(df__loaded_t *ld);
void df__loaded_unref(df__loaded_t **ld);
/* Under s->mu: find a servable name. Returns the entry or NULL. */
df__mentry_t *df__find_char(df_server_t *s, const char *name, int *char_idx);
void df__registry_free(df_server_t *s);

/* worker.c */
int df__workers_start(df_server_t *s, df_error_t *err);
void df__workers_stop(df_server_t *s);
/* Complete a job (not under s->mu): metrics, release, callback. */
void df__job_complete(df_server_t *s, df_job_t *job);
/* Evaluate one validated job on the calling thread (its thread-local
 * worker state): metrics, release of the version, s->inflight--; done()
 * is not called. The caller counted it in s->inflight. */
void df__run_inline(df_server_t *s, df_job_t *job);

/* sequence.c */
int df__seq_init(df_server_t *s, df_error_t *err);
void df__seq_free(df_server_t *s);
/* State buffers for every slot, sized for the largest state of the models
 * loaded now (called once after the first repository scan). */
void df__seq_prealloc(df_server_t *s);
/* Under s->mu: take job (job->seq, validated, p->ld set) into its
 * sequence. *run = 1: it may run now (its state pointers are set);
 * 0: it waits behind the sequence's request in flight. */
int df__seq_admit(df_server_t *s, df_job_t *job, int64_t now, int *run, df_error_t *err);
/* Under s->mu: a sequence's request finished (whatever its status). Keeps
 * its state output, ends or idles the sequence, and returns the next
 * request of the sequence, ready to run, or NULL. */
df_job_t *df__seq_done(df_server_t *s, df_job_t *job, int64_t now);
/* Under s->mu: expire idle sequences now (metrics). */
void df__seq_sweep(df_server_t *s, int64_t now);
/* batcher.c, under s->mu: append a validated job to its model's queue and
 * wake a worker for it (s->inflight already counts it). */
void df__queue_push(df_server_t *s, df_job_t *job);

/* metrics.c (under s->mu) */
void df__metrics_batch(df__mentry_t *me, int poses, int mixed);
void df__metrics_job(df__mentry_t *me, const df_job_t *job);

#endif

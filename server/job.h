/* job.h — the engine API shared by the daemon's fronts (HTTP, socket).
 *
 * DESIGN
 * A front (server/http.c, server/sock.c) decodes a request into a df_job_t
 * and hands it to the engine with df_server_submit(). The engine validates
 * it against the character's model (input names, shapes, batch dimension,
 * output names), takes a reference to the loaded model version, and queues
 * it on the MODEL's queue (characters sharing a model share the queue). A
 * worker thread forms a batch (up to max_batch_size poses, waiting at most
 * max_queue_delay_us for more), fills each pose's absent inputs from its
 * character's defaults, calls df_model_evaluate() once, encodes the outputs
 * (float32 / float16 / int16, proto/encode.h) into buffers owned by the job,
 * and calls job->done on the worker thread.
 *
 * Threads and ownership
 *  - Before submit, the job belongs to the front. The input data pointers
 *    are BORROWED: the front keeps them alive until done() has run.
 *  - From a successful submit until done() runs, the job belongs to the
 *    engine; the front must not touch it.
 *  - done() runs on a worker thread. It must only hand the job back to the
 *    front's own thread (uv_async_send, MHD_resume_connection) and return
 *    quickly; the front then reads the results and calls df_job_free().
 *  - If df_server_submit() fails, done() never runs; the job still belongs
 *    to the front (read err, then df_job_free()).
 *
 * Jobs come from a per-server pool (df_job_new); their output buffers grow
 * and are reused, so a steady stream of requests allocates nothing.
 */
#ifndef DF_SERVER_JOB_H
#define DF_SERVER_JOB_H

#include "df.h"
#include "encode.h"
#include <stdint.h>

#include <string.h>

/* strcpy bounded by cap (truncating, always terminated): the request path
 * copies names with it instead of snprintf("%s"), which costs ~0.1 us a
 * call through vfprintf (session 5 profile of the socket front) */
static inline void df__strcpy_n(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_server df_server_t;
typedef struct df_job df_job_t;
struct df_config; /* server/config.h */

/* Runs on a worker thread; see DESIGN. */
typedef void (*df_job_done_cb)(df_job_t *job, void *user);

/* Largest B (poses) one request may carry. */
#define DF_JOB_MAX_POSES 4096

typedef struct df_job_input {
    char name[DF_NAME_MAX];       /* model input name */
    int ndim;                     /* shape as the client sent it: */
    int64_t shape[DF_MAX_DIMS];   /*   per-pose shape, [B, per-pose...],
                                   *   or flat [numel] / [B, numel] */
    const float *data;            /* borrowed; numel(shape) floats,
                                   * pose-major; 4-byte aligned */
} df_job_input_t;

typedef struct df_job_output {
    /* set by the front (n_outputs == 0 means: every model output) */
    char name[DF_NAME_MAX];
    df_encoding_t encoding;       /* DF_ENC_DEFAULT: the character's */
    int front_flags;              /* free for the front (e.g. HTTP binary) */
    int as_text;                  /* 1: the front answers this output as
                                   * text, text_value_bytes per value (for
                                   * the answer-size limits) */
    /* results, valid once done() ran with status DF_OK */
    int index;                    /* model output index */
    int ndim;                     /* shape = [B, per-pose shape...] */
    int64_t shape[DF_MAX_DIMS];
    const float *f32;             /* B*numel floats, owned by the job */
    const void *bytes;            /* encoded data (== f32 for float32), */
    size_t nbytes;                /*   owned by the job                 */
    df_quant_t quant;             /* int16: value = q*scale[c] + offset[c] */
    size_t clamped;               /* int16: values clamped to the range */
} df_job_output_t;

struct df_job {
    /* ---- set by the front before df_server_submit ---- */
    char character[DF_NAME_MAX];  /* a character or model name */
    int n_inputs;
    df_job_input_t inputs[DF_MAX_IO];
    int n_outputs;                /* 0: every output of the model */
    df_job_output_t outputs[DF_MAX_IO];
    df_encoding_t encoding;       /* the request's encoding: applies to
                                   * every output whose own encoding is
                                   * DF_ENC_DEFAULT (all of them when
                                   * n_outputs == 0); DF_ENC_DEFAULT: the
                                   * character's */
    int batch;                    /* B; 0: from the inputs' leading dim
                                   * (1 when no input has one) */
    uint32_t flags;               /* DF_POSE_*; 0: character default */
    int64_t timeout_us;           /* 0: the model's timeout_us */
    char clip[DF_NAME_MAX];       /* optional: "" or a clip name; its
                                   * sample at clip_time fills the inputs
                                   * the request does not give */
    double clip_time;             /* seconds (with B>1: clip_time +
                                   * b*clip_dt for pose b) */
    double clip_dt;
    df_job_done_cb done;          /* required */
    void *user;                   /* passed to done */
    int allow_inline;             /* 1: the front can take the answer back
                                   * inside df_server_submit (ran_inline) */
    int text_value_bytes;         /* most bytes one output value takes in
                                   * the front's text form (HTTP JSON); 0:
                                   * no output is answered as text */
    int as_text_all;              /* n_outputs == 0: every output is
                                   * answered as text (as_text) */
    uint64_t front_id;            /* free for the front (request id) */
    /* Triton's sequence batcher (docs/http-api.md, "Sequences"): seq = 1
     * makes this request the next frame of sequence (character, id). Its
     * requests run one at a time in the order submitted; a model with a
     * `state` input and output gets the previous frame's state output as
     * its state input. */
    int seq;
    uint64_t seq_id;              /* a number (not 0) ... */
    char seq_id_str[DF_NAME_MAX]; /* ... or a string ("" with a number) */
    int seq_start, seq_end;       /* START (new, or restart: state reset) /
                                   * END (the sequence is freed after it) */

    /* ---- results, valid in done() and after ---- */
    int status;                   /* DF_OK or DF_E* */
    df_error_t err;               /* message when status != DF_OK */
    char model_name[DF_NAME_MAX]; /* the model that served it */
    int64_t model_version;
    int64_t queue_us;             /* submit -> batch start */
    int64_t compute_us;           /* evaluate + encode of its batch */
    int batch_poses;              /* poses in the batch it ran in */
    int batch_requests;           /* requests in that batch */
    int batch_characters;         /* distinct characters in that batch */
    int64_t seq_frame;            /* a sequence's request: its number since
                                   * the sequence's start (1, 2, ...) */
    int ran_inline;               /* 1: evaluated on the caller's thread
                                   * inside df_server_submit, which
                                   * returned DF_OK; done() did NOT run and
                                   * the job is the front's again (status
                                   * may still be an evaluation error) */

    /* ---- engine private (server/engine.c) ---- */
    struct df__job_priv *priv;
};

/* A job from the server's pool, zeroed except for its private buffers.
 * new: release with df_job_free. Returns NULL on out of memory. */
df_job_t *df_job_new(df_server_t *s);
/* Return a job to the pool (only while the front owns it). */
void df_job_free(df_job_t **job);

/* Validate and queue. A sequence request (job->seq) waits behind the
 * sequence's request in flight, if any, and never overtakes it. Cheap
 * models run inline instead: when
 * job->allow_inline, the model's measured single-pose cost times B is at
 * most its inline_max_us and its queue is empty, the job is evaluated on
 * the calling thread, ran_inline is set and done() never runs (no thread
 * hop for work smaller than the hop itself; docs/server.md). Errors
 * (done() will NOT run): DF_ENOTFOUND unknown
 * character; DF_EINVAL unknown input/output/clip, bad shape (the message
 * names the input and the expected shape), non-finite value; DF_ELIMIT too
 * many poses, or an answer larger than max_output_bytes; DF_EOVERLOAD the
 * model's queue is full, or the answers in flight would exceed
 * max_output_inflight_bytes, or max_sequences sequences are live;
 * DF_EINVAL also for a sequence request that is not a start and names no
 * live sequence (unknown, ended or expired: the message says which);
 * DF_ESHUTDOWN the server is stopping. Map
 * codes with df_http_status_for().
 *
 * Answer bytes. Before anything is allocated, a job's answer is sized:
 * its float outputs, their encoded copies, the sampled clip inputs, and
 * text_value_bytes per value of the outputs answered as text. It is
 * refused above max_output_bytes, and counted against
 * max_output_inflight_bytes (all answers of the server) from submit until
 * df_job_free, so answers a slow client has not read yet still count. */
int df_server_submit(df_server_t *s, df_job_t *job, df_error_t *err);

/* ------------------------------------------------------ lookups for fronts */

/* What a front needs to describe a character (KServe model metadata, mesh,
 * socket INFO). The model reference keeps the mesh and descriptions alive. */
typedef struct df_char_info {
    char name[DF_NAME_MAX];        /* the character's name */
    char model_name[DF_NAME_MAX];  /* the model serving it */
    int64_t version;
    df_model_t *model;             /* new reference: df_char_info_release */
    df_encoding_t encoding;        /* character's default output encoding */
    uint32_t flags;                /* character's default DF_POSE_* */
    int max_batch_size;
    int n_characters;              /* characters sharing the model */
    char characters[8][DF_NAME_MAX]; /* first 8 of them */
} df_char_info_t;

/* DF_ENOTFOUND when no such character is loaded. */
int df_server_character(df_server_t *s, const char *name,
                        df_char_info_t *out /* OUT */, df_error_t *err);
void df_char_info_release(df_char_info_t *info);
/* Copies character `name`'s own default of input i of model m (n floats,
 * the input's numel) into dst (caller's). Returns 1 when the character
 * overrides the model's default, 0 when it uses the model's (or m is no
 * longer the character's model), DF_ENOTFOUND/DF_EINVAL otherwise.
 * Not for hot paths (takes the registry lock). */
int df_server_character_default(df_server_t *s, const char *name, const df_model_t *m, int i,
                                float *dst /* OUT */, size_t n);

/* Repository index (KServe repository extension). */
typedef struct df_index_entry {
    char name[DF_NAME_MAX];        /* model directory name */
    int64_t version;               /* loaded version, -1 when none */
    int ready;                     /* serving */
    char reason[512];              /* why not ready / last load error */
    int n_characters;
    char characters[8][DF_NAME_MAX];
} df_index_entry_t;

/* Fills up to max entries; returns the total count. */
size_t df_server_index(df_server_t *s, df_index_entry_t *out, size_t max);

/* Every servable name (characters and bare models), sorted. Returns the
 * count, fills up to max names. */
size_t df_server_names(df_server_t *s, char (*out)[DF_NAME_MAX], size_t max);

/* Load (or reload) / unload a model by repository directory name. A reload
 * validates the new version fully before swapping; on failure the old
 * version keeps serving and the error says why. In-flight requests finish
 * on the version they were queued with. */
int df_server_load(df_server_t *s, const char *model, df_error_t *err);
/* The same with the model's configuration given as JSON text (the
 * repository API's parameters.config) instead of its config.json, for
 * this load only (a later rescan reads the file again). A name the
 * repository does not hold fails with DF_ENOTFOUND and leaves no entry in
 * the index. */
int df_server_load_config(df_server_t *s, const char *model, const char *config_text,
                          size_t config_len, df_error_t *err);
int df_server_unload(df_server_t *s, const char *model, df_error_t *err);
/* Rescan the repository: load new models, reload existing ones, unload
 * models whose directory vanished. Returns the number of failures. */
int df_server_rescan(df_server_t *s);

int df_server_ready(df_server_t *s);   /* 1 once the repository loaded */

/* Prometheus text exposition. *text new: free(). */
int df_server_metrics(df_server_t *s, char **text, size_t *len);

/* ------------------------------------------------------------ lifecycle */

/* Create the engine (no models loaded, no threads yet). cfg borrowed for
 * the server's lifetime. *out new: df_server_free. */
int df_server_new(const struct df_config *cfg, df_server_t **out,
                  df_error_t *err);
/* Load the repository and start the workers. */
int df_server_start(df_server_t *s, df_error_t *err);
/* Stop accepting (submit -> DF_ESHUTDOWN), then wait up to timeout_ms for
 * queued and running jobs to complete. Returns the number of jobs still in
 * flight (0 = drained). */
int df_server_drain(df_server_t *s, int64_t timeout_ms);
/* Stops the workers; jobs still queued complete with DF_ESHUTDOWN. */
void df_server_free(df_server_t **s);

/* The configuration the server runs with (borrowed). */
const struct df_config *df_server_config(const df_server_t *s);

/* Status mapping shared by the fronts' docs: DF_E* -> HTTP status. */
int df_http_status_for(int code);

#ifdef __cplusplus
}
#endif
#endif

/* deformclient.h — libdeformclient: the C client of deformd.
 *
 * DESIGN
 * One connection object speaks the binary socket protocol
 * (docs/protocol.md) over TCP or a Unix socket, blocking I/O, no threads:
 *
 *   df_client_t *c;  df_error_t err;
 *   df_client_connect("127.0.0.1:8001", &c, &err);        // or "unix:/run/d.sock"
 *   df_client_request_t q = {.character = "wuson", .n_poses = 1};
 *   df_client_result_t r;
 *   df_client_infer(c, &q, &r, &err);                      // blocking
 *   ... r.outputs[0].data is float32 [1, N, 3] ...
 *   df_client_result_free(&r);
 *   df_client_close(&c);
 *
 * Pipelining: df_client_submit() sends a request and returns its id at
 * once; df_client_poll()/df_client_wait() read answers (in any order) and
 * call each request's callback with its result. While a submit waits to
 * write it also reads answers, so a deep pipeline cannot deadlock against
 * the server's backpressure. df_client_play() streams a whole clip that
 * way. HTTP (KServe v2, JSON or the binary-data extension) goes through
 * libcurl with df_client_http_*, so tests can compare transports.
 *
 * Errors use core/df.h's df_error_t and DF_E* codes: a server ERROR frame
 * arrives as its code and message. A connection is not thread-safe (one
 * thread at a time). Link: -ldeformclient -lcurl -ljansson -lpthread -lm.
 */
#ifndef DEFORMCLIENT_H
#define DEFORMCLIENT_H

#include "df.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DF_CLIENT_MAX_IO 16

typedef struct df_client df_client_t;

typedef struct df_client_tensor {
    char name[DF_NAME_MAX];
    int ndim;                 /* including the leading batch dimension B */
    int64_t shape[DF_MAX_DIMS];
    const float *data;        /* inputs: borrowed (until the request is
                               * written); results: see df_client_result_t */
    int encoding;             /* results: how it travelled ("float32"=0,
                               * "float16"=1, "int16"=2, DF_WIRE_*) */
    float scale[3], offset[3];/* results, int16 only */
} df_client_tensor_t;

typedef struct df_client_request {
    const char *character;    /* required */
    int n_poses;              /* B >= 1 (0 means 1) */
    int n_inputs;
    df_client_tensor_t inputs[DF_CLIENT_MAX_IO]; /* shape [B, per-pose...] */
    int n_outputs;            /* 0: every output of the model */
    const char *outputs[DF_CLIENT_MAX_IO];
    const char *encoding;     /* "float32" (NULL), "float16", "int16" */
    const char *skinning;     /* NULL (character default), "lbs", "dqs" */
    const char *clip;         /* NULL or a clip name ... */
    const double *times;      /* ... sampled at these n_poses times (s) */
    /* A frame of a sequence (Triton's sequence batcher, docs/http-api.md
     * "Sequences"): sequence_name (a string id) or else sequence_id (a
     * number; 0 and NULL/"": not a sequence). The daemon runs a sequence's
     * frames in order and carries a model's `state` between them. A frame
     * is never sent twice by the blocking calls' retry. */
    uint64_t sequence_id;
    const char *sequence_name;
    int sequence_start, sequence_end;
} df_client_request_t;

typedef struct df_client_result {
    uint64_t id;
    int status;               /* DF_OK or the server's DF_E* code */
    char error[1025];         /* the server's message when status != 0 */
    int n_poses;
    int n_outputs;
    /* decoded to float32. In a callback: valid during the call only. From
     * df_client_infer: owned, free with df_client_result_free. */
    df_client_tensor_t outputs[DF_CLIENT_MAX_IO];
    size_t wire_bytes;        /* size of the RESULT frame as received */
} df_client_result_t;

/* Called by df_client_poll/wait for each answer. */
typedef void (*df_client_done_cb)(const df_client_result_t *res, void *user);

/* address: "HOST:PORT", "tcp://HOST:PORT", "unix:PATH" or "/PATH" (Unix).
 * *out new: df_client_close. */
int df_client_connect(const char *address, df_client_t **out, df_error_t *err);
void df_client_close(df_client_t **c);
/* Close the connection and connect again to the same address. Requests in
 * flight are forgotten (their callbacks never run): resubmit them. The
 * blocking calls below do this by themselves once (see client.c: a call
 * alone on its connection that lost it, or was answered DF_ESHUTDOWN, is
 * sent again on a new connection); df_client_retries counts those resends. */
int df_client_reconnect(df_client_t *c, df_error_t *err);
unsigned df_client_retries(const df_client_t *c);

/* Present a bearer token on this connection (an AUTH frame; needed when
 * the daemon runs with auth = all). It is sent at once and not waited for,
 * so that the next request follows it (a router reading the first
 * request's character needs that); its AUTH_OK is read with the later
 * answers. A wrong token makes the server answer ERROR DF_EAUTH and close:
 * the call that reads it returns DF_EAUTH with the server's message. The
 * token (1..255 bytes) is kept and presented again by df_client_reconnect
 * and the retries of the blocking calls. */
int df_client_auth(df_client_t *c, const char *token, df_error_t *err);

/* Round trip of a PING with an 8-byte payload. */
int df_client_ping(df_client_t *c, df_error_t *err);
/* INFO: name "" = the server. *json new (NUL-terminated): free(). */
int df_client_info(df_client_t *c, const char *name, char **json, df_error_t *err);

/* Pipelined: send q, return its request id in *id (may be NULL). cb may be
 * NULL (the answer is dropped). Input arrays may be reused once this
 * returns. Returns transport/encoding errors only; server errors arrive in
 * the callback's res->status. */
int df_client_submit(df_client_t *c, const df_client_request_t *q, df_client_done_cb cb,
                     void *user, uint64_t *id, df_error_t *err);
/* Read answers for up to timeout_ms (0: only what is already there, -1:
 * until at least one arrives); returns the number of callbacks run, or a
 * negative DF_E* on a transport error. */
int df_client_poll(df_client_t *c, int timeout_ms, df_error_t *err);
/* Block until request id (0: every request in flight) is answered. */
int df_client_wait(df_client_t *c, uint64_t id, df_error_t *err);
size_t df_client_in_flight(const df_client_t *c);
/* Forget every request in flight: their answers will be dropped and their
 * callbacks never run (e.g. after an error, before freeing callback data). */
void df_client_cancel_all(df_client_t *c);

/* Blocking request: submit + wait. Returns DF_OK or the transport error or
 * the server's code (message in err and out->error). *out owns its
 * outputs: df_client_result_free. */
int df_client_infer(df_client_t *c, const df_client_request_t *q, df_client_result_t *out,
                    df_error_t *err);
void df_client_result_free(df_client_result_t *r);

/* Stream a clip: sample it at times (NULL: the clip's key times from INFO,
 * or every 1/fps s when fps > 0), chunk poses per request, window requests
 * in flight. *frames new (free()): n_frames x (numel of one pose's output)
 * floats of output `output` (NULL: "positions"), in time order; per-pose
 * shape in shape[0..*ndim). progress(done, total, user) may be NULL.
 * clip is matched against the character's clips with df_client_clip_match
 * ("walk" plays "Wuson_Walk"); no match or several: DF_ENOTFOUND / DF_EINVAL
 * with the list of the character's clips in the message. */
typedef struct df_client_play {
    const char *character, *clip, *output, *encoding, *skinning;
    const double *times;
    size_t n_times;
    double fps;
    int chunk;                /* poses per request, default 8 */
    int window;               /* requests in flight, default 16 */
    void (*progress)(size_t done, size_t total, void *user);
    void *user;
    char *clip_played;        /* optional (DF_NAME_MAX bytes): gets the
                               * full name of the clip played */
} df_client_play_t;
/* Which of the n clip names `want` designates: the one equal to it, else the
 * one equal ignoring case, else the only one containing it ignoring case.
 * Returns its index, -1 when none matches, -2 when several do. */
int df_client_clip_match(const char *const *names, size_t n, const char *want);
int df_client_play(df_client_t *c, const df_client_play_t *p, float **frames,
                   size_t *n_frames, int *ndim, int64_t shape[DF_MAX_DIMS], df_error_t *err);

/* ---------------------------------------------------------------- HTTP */
/* Both calls are idempotent and are sent once more when the first try lost
 * its connection (refused, reset, closed before an answer) or was answered
 * 502 / 503 (a router whose daemon died, a draining daemon). */

/* The bearer token every df_client_http_* call sends from now on
 * (Authorization: Bearer ...; copied, at most 255 bytes); NULL or "" sends
 * none. Process-wide: set it before HTTP calls run on other threads. A
 * missing or wrong token is answered 401 and returned as DF_EAUTH. */
int df_client_http_set_token(const char *token);

/* GET base_url + path (e.g. "http://127.0.0.1:8000", "/v2/models/wuson").
 * *body new (NUL-terminated): free(). *status gets the HTTP status. */
int df_client_http_get(const char *base_url, const char *path, char **body, size_t *len,
                       long *status, df_error_t *err);
/* POST /v2/models/{character}/infer with the request's inputs as JSON
 * numbers (binary = 0) or with the binary-data extension for inputs and
 * outputs (binary = 1). Outputs come back float32 (encoding and clip of q
 * are honoured where the HTTP front supports them). *out owns its outputs. */
int df_client_http_infer(const char *base_url, const df_client_request_t *q, int binary,
                         df_client_result_t *out, df_error_t *err);

#ifdef __cplusplus
}
#endif
#endif

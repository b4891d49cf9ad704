/* kserve.h — KServe v2 inference JSON codec with the binary-data extension
 * (pure: bytes to structs and back, no I/O; fuzzable alone).
 *
 * DESIGN
 * A request body is a JSON header, optionally followed by binary input
 * segments (Inference-Header-Content-Length gives the JSON length; each
 * input with parameters.binary_data_size takes that many bytes, in input
 * order). df_kserve_parse_request validates everything a client can get
 * wrong and names it: JSON syntax (line/column), nesting depth, element
 * counts, datatype (FP32 only), shape vs. element count, nested "data"
 * ragged or not matching the shape, non-numbers, values outside float32,
 * binary sizes that disagree with the shape or the body. Float data ends
 * up either pointing into the caller's body (binary, when 4-byte aligned)
 * or in the request's own arena (JSON numbers, unaligned binary), which is
 * reused across requests.
 *
 * Responses are written by df_kserve_write_response into a growable
 * buffer: a JSON header; outputs flagged binary are described with
 * parameters.binary_data_size and their bytes are sent after the JSON by
 * the caller, in output order. float32 numbers are printed with 9
 * significant digits (own formatter, ~10x faster than printf), so JSON
 * round-trips float32 bit for bit.
 */
#ifndef DF_PROTO_KSERVE_H
#define DF_PROTO_KSERVE_H

#include "df.h"
#include "encode.h"
#include "kjson.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DF_KS_MAX_TENSORS 16
/* Most bytes one output value takes in a JSON answer, with its comma
 * (df_ks_buf_floats reserves this much per value). */
#define DF_KS_TEXT_VALUE_BYTES 18
/* Reading a JSON header takes at most DF_KS_PARSE_FACTOR times its size
 * plus 64 KiB (more is refused, DF_ELIMIT); headers over
 * DF_KS_FALLBACK_MAX bytes are never handed to jansson. */
#define DF_KS_PARSE_FACTOR 10
#define DF_KS_FALLBACK_MAX (64u << 10)

typedef struct df_ks_limits {
    int max_depth;          /* JSON nesting, default 16 */
    int64_t max_elements;   /* numbers in one request, default 16M */
} df_ks_limits_t;

typedef struct df_ks_input {
    char name[DF_NAME_MAX];
    int ndim;
    int64_t shape[DF_MAX_DIMS];
    int64_t numel;
    const float *data;      /* borrowed: into the body or the arena */
    int binary;             /* came from the binary part */
} df_ks_input_t;

typedef struct df_ks_output_req {
    char name[DF_NAME_MAX];
    int binary;             /* -1: not said (request default applies) */
    df_encoding_t encoding; /* DF_ENC_DEFAULT: not said */
} df_ks_output_req_t;

typedef struct df_ks_request {
    char *id;               /* the request's "id" ("" when absent), owned,
                               any length the header allows */
    size_t id_cap;
    int n_inputs;
    df_ks_input_t inputs[DF_KS_MAX_TENSORS];
    int n_outputs;          /* 0: all outputs */
    df_ks_output_req_t outputs[DF_KS_MAX_TENSORS];
    /* request parameters */
    int binary_output;      /* parameters.binary_data_output (0/1) */
    df_encoding_t encoding; /* parameters.encoding */
    uint32_t flags;         /* parameters.skinning: "lbs" / "dqs" */
    int64_t timeout_us;     /* parameters.timeout_us, 0 = default */
    char clip[DF_NAME_MAX]; /* parameters.clip */
    double clip_time, clip_dt; /* parameters.time, parameters.dt */
    int batch_size;         /* parameters.batch_size, 0 = from inputs */
    /* Triton's sequence batcher: parameters.sequence_id (an integer, or a
     * string of 1..63 bytes; 0 and "" mean no sequence), sequence_start,
     * sequence_end */
    int seq;                /* 1: sequence_id names a sequence */
    uint64_t seq_id;        /* integer id (seq_id_str "") */
    char seq_id_str[DF_NAME_MAX]; /* string id */
    int seq_start, seq_end;
    /* storage (owned, reused: free with df_ks_request_free) */
    float *arena;
    size_t arena_cap, arena_used;
    df_kj_doc_t doc;        /* the parsed JSON header (reused) */
    size_t read_bytes;      /* memory the last parse used: the reader's
                               nodes, numbers and strings plus the floats
                               of JSON data (<= DF_KS_PARSE_FACTOR x the
                               header + 64 KiB) */
} df_ks_request_t;

void df_ks_limits_default(df_ks_limits_t *l);

/* Parse body[0..len). json_len: the JSON header's length (the
 * Inference-Header-Content-Length), or len when there is no binary part.
 * body must stay alive while r's inputs are used. */
int df_kserve_parse_request(df_ks_request_t *r, const char *body, size_t len,
                            size_t json_len, const df_ks_limits_t *lim,
                            df_error_t *err);
void df_ks_request_free(df_ks_request_t *r);
/* Parses of this thread answered from the parsed-header cache (tests). */
unsigned long df__kserve_cache_hits(void);
/* Tests: parse this thread's requests with jansson only (the reference for
 * the subset reader), and count parses that fell back to jansson. */
void df__kserve_jansson_only(int on);
unsigned long df__kserve_fallbacks(void);

/* One output of a response. */
typedef struct df_ks_output {
    const char *name;
    df_encoding_t encoding;
    int ndim;
    const int64_t *shape;
    const float *f32;       /* the float values (JSON float32 data) */
    const void *bytes;      /* encoded bytes (JSON float16/int16, binary) */
    size_t nbytes;
    const df_quant_t *quant;/* int16 */
    size_t clamped;
    int binary;             /* send after the JSON */
} df_ks_output_t;

/* Growable text buffer. */
typedef struct df_ks_buf {
    char *data;
    size_t len, cap;
    int oom;
} df_ks_buf_t;
void df_ks_buf_reset(df_ks_buf_t *b);
void df_ks_buf_free(df_ks_buf_t *b);
void df_ks_buf_printf(df_ks_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void df_ks_buf_append(df_ks_buf_t *b, const char *s, size_t n);
/* Writes v in decimal at p (room for 21 chars; no terminator); returns
 * the end. */
char *df_ks_fmt_i64(char *p, int64_t v);
/* A decimal integer / a raw (unescaped) string, without printf. */
void df_ks_buf_i64(df_ks_buf_t *b, int64_t v);
void df_ks_buf_str(df_ks_buf_t *b, const char *s);
/* Append n float32 values as comma-separated JSON numbers (9 significant
 * digits: an exact float32 round trip; no printf). */
void df_ks_buf_floats(df_ks_buf_t *b, const float *x, size_t n);
/* Internal (tests): the same text one number at a time, the plain scalar
 * formatter df_ks_buf_floats' AVX-512 path must match byte for byte. out
 * needs n * 18 + 24 bytes; returns the length (terminated). */
size_t df__ks_fmt_floats_scalar(char *out, const float *x, size_t n);
/* Append s as a JSON string (quoted, escaped). */
void df_ks_buf_json_string(df_ks_buf_t *b, const char *s);

/* The JSON header of an infer response. params_json: extra text inside
 * the response's "parameters" object (e.g. "\"queue_us\":12"), or NULL.
 * Returns DF_OK or DF_ENOMEM. */
int df_kserve_write_response(df_ks_buf_t *b, const char *model_name,
                             int64_t version, const char *id,
                             const df_ks_output_t *outs, int n,
                             const char *params_json);
/* {"error": "..."} */
int df_kserve_write_error(df_ks_buf_t *b, const char *msg);

#ifdef __cplusplus
}
#endif
#endif

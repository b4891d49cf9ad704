/* frame.h — codec for deformd's binary socket protocol (docs/protocol.md).
 *
 * DESIGN
 * Pure: bytes to structs and back, no I/O, no allocation in the decoders,
 * so the socket front, the C client, the tests and the fuzzer share it.
 *
 *  - Decoding is two steps, because a stream reader must know how many bytes
 *    to wait for before it can look at a payload: df_frame_header_decode()
 *    on the first DF_FRAME_HEADER_SIZE bytes, then df_frame_decode_<type>()
 *    on exactly header.length payload bytes. Every length and count is
 *    checked against the bytes that remain and against the limits before it
 *    is used; a decoder never reads outside [payload, payload + len).
 *  - Decoded structs BORROW from the payload: tensor data and clip times
 *    point into it (the payload must be 8-byte aligned, which makes tensor
 *    data aligned). Names are copied into fixed arrays (NUL-terminated).
 *  - Encoding is zero-copy for bulk data: an encoder writes the small
 *    metadata bytes (header, names, dims, padding) into a caller buffer and
 *    emits a list of segments that alternate between that buffer and the
 *    caller's tensor arrays, ready for writev / uv_write. The caller keeps
 *    the tensor arrays alive until the write completes.
 *  - The output encodings themselves (float16, int16 in a box) are in
 *    proto/encode.h, shared with HTTP; this file only carries their bytes
 *    and the int16 scale/offset.
 *
 * Host byte order: the integer fields are read byte by byte (portable);
 * tensor data is passed through raw, i.e. this assumes a little-endian host
 * (x86-64, aarch64), which df.h also assumes for safetensors.
 */
#ifndef DF_FRAME_H
#define DF_FRAME_H

#include "df.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DF_FRAME_MAGIC 0x4D524644u /* bytes "DFRM" */
#define DF_FRAME_VERSION 1
#define DF_FRAME_HEADER_SIZE 24
#define DF_FRAME_DEFAULT_MAX_PAYLOAD (64u << 20)
#define DF_FRAME_MAX_POSES 4096
#define DF_FRAME_MAX_PING 1024
#define DF_FRAME_MAX_MSG 1024
#define DF_FRAME_MAX_INFO_JSON (16u << 20)
#define DF_FRAME_MAX_TOKEN 255 /* AUTH token bytes */
/* Worst-case metadata bytes and segments an encoder needs. */
#define DF_FRAME_META_MAX 8192
#define DF_FRAME_MAX_SEGS (2 * DF_MAX_IO + 4)

typedef enum df_frame_type {
    DF_FT_PING = 0x0001,
    DF_FT_PONG = 0x0002,
    DF_FT_INFER = 0x0010,
    DF_FT_RESULT = 0x0011,
    DF_FT_ERROR = 0x0012,
    DF_FT_INFO = 0x0020,
    DF_FT_INFO_RESULT = 0x0021,
    DF_FT_AUTH = 0x0030,       /* client -> server: string token */
    DF_FT_AUTH_OK = 0x0031,    /* server -> client: empty payload */
} df_frame_type_t;

/* Output encodings on the wire (INFER.encoding, RESULT output encoding).
 * Not the same numbers as df_encoding_t (proto/encode.h), which reserves 0
 * for "the character's default": wire = df_encoding_t - 1. */
enum {
    DF_WIRE_F32 = 0,
    DF_WIRE_F16 = 1,
    DF_WIRE_I16 = 2,
    DF_WIRE_ENC_COUNT
};

const char *df_wire_enc_name(int enc);         /* "float32"...; "?" */
int df_wire_enc_parse(const char *s);          /* DF_WIRE_* or -1 */
size_t df_wire_enc_size(int enc);              /* bytes per value; 0 */
const char *df_frame_type_name(int type);      /* "INFER"...; "?" */

typedef struct df_frame_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t flags;
    uint64_t id;
    uint32_t length; /* payload bytes */
} df_frame_header_t;

/* A tensor in INFER (input) or RESULT (output). */
typedef struct df_frame_tensor {
    char name[DF_NAME_MAX];
    uint8_t type;          /* input: df_dtype_t (F32); output: DF_WIRE_* */
    int ndim;              /* 1..DF_MAX_DIMS, dims[0] = n_poses */
    uint32_t dims[DF_MAX_DIMS];
    float scale[3];        /* int16 outputs only */
    float offset[3];       /* int16 outputs only */
    const void *data;      /* borrowed */
    size_t nbytes;         /* = prod(dims) * element size */
} df_frame_tensor_t;

/* INFER flags byte (payload offset 9) */
#define DF_INFER_SEQUENCE 0x01  /* a sequence block follows the clip */
/* sequence block flags (Triton's sequence batcher) */
#define DF_SEQ_START 0x01
#define DF_SEQ_END 0x02

typedef struct df_frame_infer {
    uint32_t n_poses;
    uint32_t pose_flags;   /* 0, DF_POSE_LBS or DF_POSE_DQS */
    uint8_t encoding;      /* DF_WIRE_* */
    char character[DF_NAME_MAX];
    char clip[DF_NAME_MAX];     /* "" = none */
    const double *times;        /* n_poses, borrowed; NULL when no clip */
    int seq;                    /* 1: the request is a frame of a sequence */
    uint8_t seq_flags;          /* DF_SEQ_START | DF_SEQ_END */
    uint64_t seq_id;            /* its id: a number (not 0) ... */
    char seq_id_str[DF_NAME_MAX]; /* ... or a string ("" with a number) */
    int n_outputs;              /* 0 = all */
    char outputs[DF_MAX_IO][DF_NAME_MAX];
    int n_inputs;
    df_frame_tensor_t inputs[DF_MAX_IO];
} df_frame_infer_t;

typedef struct df_frame_result {
    uint32_t n_poses;
    int n_outputs;
    df_frame_tensor_t outputs[DF_MAX_IO];
} df_frame_result_t;

typedef struct df_frame_errmsg {
    int32_t code;
    char msg[DF_FRAME_MAX_MSG + 1];
} df_frame_errmsg_t;

/* Any decoded frame (df_frame_decode). */
typedef struct df_frame {
    df_frame_header_t h;
    union {
        df_frame_infer_t infer;
        df_frame_result_t result;
        df_frame_errmsg_t error;
        char name[DF_NAME_MAX];          /* INFO */
        char token[DF_FRAME_MAX_TOKEN + 1]; /* AUTH */
        struct {
            const uint8_t *data;         /* PING/PONG bytes, INFO_RESULT JSON */
            size_t len;                  /* borrowed from the payload */
        } blob;
    } u;
} df_frame_t;

/* ------------------------------------------------------------ decoding */

/* Decode the 24-byte header at buf (len >= DF_FRAME_HEADER_SIZE, else
 * DF_EFORMAT). Fills *h whenever len >= 24. Errors: bad magic (DF_EFORMAT),
 * version (DF_EUNSUPPORTED), length > max_payload (DF_ELIMIT) — these set
 * *fatal = 1 (the stream cannot be resynchronised); flags != 0 or an unknown
 * type (DF_EUNSUPPORTED) set *fatal = 0 (skip the payload, keep going).
 * fatal may be NULL. */
int df_frame_header_decode(const void *buf, size_t len, uint32_t max_payload,
                           df_frame_header_t *h /* OUT */, int *fatal /* OUT */,
                           df_error_t *err);

/* Payload decoders: payload is exactly the len bytes announced by the
 * header, 8-byte aligned (else DF_EINVAL). Errors: DF_EFORMAT (truncated,
 * trailing bytes, non-zero padding, inconsistent dims), DF_ELIMIT (counts,
 * name lengths), DF_EUNSUPPORTED (dtype, encoding, flags), DF_EINVAL
 * (non-finite values, duplicate names, dims[0] != n_poses). The output
 * borrows from payload. */
int df_frame_decode_infer(const void *payload, size_t len,
                          df_frame_infer_t *out, df_error_t *err);
int df_frame_decode_result(const void *payload, size_t len,
                           df_frame_result_t *out, df_error_t *err);
int df_frame_decode_error(const void *payload, size_t len,
                          df_frame_errmsg_t *out, df_error_t *err);
/* INFO request: a string, possibly empty. */
int df_frame_decode_info(const void *payload, size_t len,
                         char name[DF_NAME_MAX], df_error_t *err);
/* AUTH: u16 n + n bytes of token (1..DF_FRAME_MAX_TOKEN, no NUL), copied
 * NUL-terminated into token. */
int df_frame_decode_auth(const void *payload, size_t len,
                         char token[DF_FRAME_MAX_TOKEN + 1], df_error_t *err);
/* INFO_RESULT: u32 n + n bytes of JSON (not NUL-terminated). */
int df_frame_decode_info_result(const void *payload, size_t len,
                                const uint8_t **json, size_t *json_len,
                                df_error_t *err);

/* Whole frame in one buffer (tests, fuzzer, blocking client): header, then
 * the payload by type. buf must be 8-byte aligned. *consumed = 24 + length.
 * Returns DF_EFORMAT when fewer than 24 + length bytes are present. */
int df_frame_decode(const void *buf, size_t len, uint32_t max_payload,
                    df_frame_t *out, size_t *consumed, df_error_t *err);

/* ------------------------------------------------------------ encoding */

typedef struct df_frame_seg {
    const void *base;
    size_t len;
} df_frame_seg_t;

/* Output of an encoder: metadata bytes written to meta[0..meta_len) and the
 * frame as n_segs segments (pointing into meta and the caller's arrays) of
 * total bytes. Set meta/meta_cap/segs/max_segs before calling; use
 * DF_FRAME_META_MAX / DF_FRAME_MAX_SEGS to never run short. */
typedef struct df_frame_out {
    uint8_t *meta;
    size_t meta_cap;
    size_t meta_len;
    df_frame_seg_t *segs;
    int max_segs;
    int n_segs;
    size_t total;
} df_frame_out_t;

/* Convenience: an out with embedded storage (about 9 KB). */
typedef struct df_frame_buf {
    df_frame_out_t o;
    uint8_t meta[DF_FRAME_META_MAX];
    df_frame_seg_t segs[DF_FRAME_MAX_SEGS];
} df_frame_buf_t;
void df_frame_buf_init(df_frame_buf_t *b);

/* Encoders validate what they are given (names, counts, nbytes against
 * dims) and return DF_EINVAL / DF_ELIMIT naming the field. Tensor data,
 * times and blobs are referenced, not copied. */
int df_frame_encode_infer(uint64_t id, const df_frame_infer_t *r,
                          df_frame_out_t *o, df_error_t *err);
int df_frame_encode_result(uint64_t id, const df_frame_result_t *r,
                           df_frame_out_t *o, df_error_t *err);
/* msg is truncated to DF_FRAME_MAX_MSG bytes. */
int df_frame_encode_error(uint64_t id, int32_t code, const char *msg,
                          df_frame_out_t *o, df_error_t *err);
/* PING, PONG (len <= DF_FRAME_MAX_PING), INFO_RESULT (JSON) and AUTH_OK
 * (len 0). */
int df_frame_encode_blob(uint64_t id, int type, const void *data, size_t len,
                         df_frame_out_t *o, df_error_t *err);
int df_frame_encode_info(uint64_t id, const char *name /* "" = server */,
                         df_frame_out_t *o, df_error_t *err);
/* AUTH with a token of 1..DF_FRAME_MAX_TOKEN bytes (copied into o->meta). */
int df_frame_encode_auth(uint64_t id, const char *token, df_frame_out_t *o,
                         df_error_t *err);

/* Copy the segments into dst (o->total bytes). */
void df_frame_flatten(const df_frame_out_t *o, void *dst);

#ifdef __cplusplus
}
#endif
#endif /* DF_FRAME_H */

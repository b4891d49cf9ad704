/* df.h — the whole public API of deformd's core library (libdfcore).
 *
 * DESIGN
 * core/ is a library: no sockets, no threads, no network JSON. It knows model
 * files (safetensors, whose header is JSON read with jansson), the model
 * repository layout, and the model kinds. The daemon, the offline tool
 * (bin/deform) and the tests all call these functions.
 *
 *  - Errors: every fallible function returns 0 (DF_OK) or a negative DF_E*
 *    code, and fills an optional df_error_t with a message naming what is
 *    wrong (which tensor, which index). Bad input is an answer; a bug is an
 *    assert (DF_ASSERT stays on in release builds).
 *  - Models are immutable after load and reference-counted
 *    (df_model_ref/df_model_unref); any thread may evaluate a model
 *    concurrently with its own df_scratch_t.
 *  - Evaluation is batch-first: df_model_evaluate() takes B poses at once,
 *    each given as per-pose pointers so a worker can batch requests of
 *    different characters without copying them into one array first.
 *  - Model kinds (rigged, rigapprox, ...) plug in through df_kind_t; the
 *    server has no per-kind code: it reads a model's input/output
 *    descriptions and passes tensors through.
 *
 * Ownership in prototypes: "borrowed" (caller keeps it), "new" (caller frees
 * with the named function), "copied" (callee copies it).
 */
#ifndef DF_H
#define DF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DF_VERSION "0.1.0"

/* ---------------------------------------------------------------- errors */

enum {
    DF_OK = 0,
    DF_EINVAL = -1,       /* bad argument or bad input (user error)        */
    DF_ENOMEM = -2,       /* out of memory                                 */
    DF_EIO = -3,          /* a file could not be read or written           */
    DF_EFORMAT = -4,      /* malformed file or data                        */
    DF_ELIMIT = -5,       /* larger than a configured limit                */
    DF_ENOTFOUND = -6,    /* no such model, tensor, clip, file             */
    DF_EUNSUPPORTED = -7, /* valid but not supported (dtype, feature)      */
    DF_EOVERLOAD = -8,    /* queue full                                    */
    DF_ETIMEDOUT = -9,    /* request deadline passed                       */
    DF_ESHUTDOWN = -10,   /* server stopping                               */
    DF_EINTERNAL = -11,   /* a bug or a library failure                    */
    DF_ENUMERIC = -12,    /* numerical failure (not positive definite...)  */
    DF_EAUTH = -13,       /* missing or wrong credentials (server)         */
};

typedef struct df_error {
    int code;       /* DF_OK or a DF_E* code */
    char msg[512];  /* human readable, names the tensor/input at fault */
} df_error_t;

const char *df_strerror(int code);
/* Fill err (may be NULL) with code and a printf-style message; returns code. */
int df_error_set(df_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Assertion that stays on in release builds: internal invariants only. */
#define DF_ASSERT(c) \
    ((c) ? (void)0 : df__assert_fail(#c, __FILE__, __LINE__))
void df__assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

/* ---------------------------------------------------------------- dtypes */

typedef enum df_dtype {
    DF_DT_F32 = 0, DF_DT_F16, DF_DT_BF16, DF_DT_F64,
    DF_DT_I8, DF_DT_U8, DF_DT_I16, DF_DT_U16,
    DF_DT_I32, DF_DT_U32, DF_DT_I64, DF_DT_U64, DF_DT_BOOL,
    DF_DT_COUNT
} df_dtype_t;

size_t df_dtype_size(df_dtype_t dt);
const char *df_dtype_name(df_dtype_t dt); /* safetensors spelling: "F32" */
/* KServe v2 spelling: "FP32", "INT32", ... */
const char *df_dtype_kserve(df_dtype_t dt);
/* Accepts both spellings. Returns DF_OK or DF_EINVAL. */
int df_dtype_parse(const char *s, df_dtype_t *out);

/* float16 conversion (IEEE 754 binary16, round to nearest even). */
uint16_t df_f32_to_f16(float f);
float df_f16_to_f32(uint16_t h);
/* Array forms (same rounding; 8 values per instruction with F16C). */
void df_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void df_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);

#define DF_MAX_DIMS 8

typedef struct df_tensor {
    const char *name;   /* borrowed */
    df_dtype_t dtype;
    int ndim;
    int64_t shape[DF_MAX_DIMS];
    const void *data;   /* borrowed; little-endian, C order; aligned to 8 */
    size_t nbytes;
} df_tensor_t;

int64_t df_tensor_numel(const df_tensor_t *t);

/* ---------------------------------------------------------------- limits */

typedef struct df_limits {
    uint64_t max_file_bytes;    /* default 4 GiB */
    uint64_t max_header_bytes;  /* safetensors JSON header, default 64 MiB */
    uint64_t max_tensors;       /* default 65536 */
    uint64_t max_tensor_elems;  /* default 1<<31 */
    int64_t max_vertices;       /* default 10,000,000 */
    int64_t max_joints;         /* default 4096 */
    int64_t max_morphs;         /* default 4096 */
    int64_t max_clip_frames;    /* default 1,000,000 */
} df_limits_t;

void df_limits_default(df_limits_t *lim /* OUT */);

/* ----------------------------------------------------------- safetensors */

/* A loaded safetensors file, read-only. Tensor data is 8-byte aligned. */
typedef struct df_st df_st_t;

/* Read and validate a file: header length, JSON, dtypes, shapes agree with
 * byte sizes, offsets inside the data area, no overlapping tensors, limits.
 * Float tensors are also checked finite (names the first bad element).
 * *out is new: free with df_st_close. */
int df_st_open(const char *path, const df_limits_t *lim /* NULL: defaults */,
               df_st_t **out, df_error_t *err);
/* Same from memory (buf is copied). */
int df_st_parse(const void *buf, size_t len, const df_limits_t *lim,
                df_st_t **out, df_error_t *err);
void df_st_close(df_st_t **st);

size_t df_st_count(const df_st_t *st);
const df_tensor_t *df_st_at(const df_st_t *st, size_t i);     /* borrowed */
const df_tensor_t *df_st_find(const df_st_t *st, const char *name);
/* A __metadata__ string value, or NULL. Borrowed. */
const char *df_st_meta(const df_st_t *st, const char *key);

/* Look up a tensor and check its dtype and shape. shape[i] < 0 matches any
 * extent; ndim < 0 skips the shape check. A missing tensor is an error
 * unless optional (then *out = NULL and DF_OK). */
int df_st_require(const df_st_t *st, const char *name, df_dtype_t dt,
                  int ndim, const int64_t *shape, int optional,
                  const df_tensor_t **out, df_error_t *err);

typedef struct df_st_writer df_st_writer_t;
df_st_writer_t *df_st_writer_new(void); /* new: df_st_writer_free */
/* data is copied. Names must be unique. */
int df_st_writer_add(df_st_writer_t *w, const char *name, df_dtype_t dt,
                     int ndim, const int64_t *shape, const void *data);
int df_st_writer_meta(df_st_writer_t *w, const char *key, const char *value);
/* Writes path.tmp then renames, so readers never see half a file. */
int df_st_writer_save(df_st_writer_t *w, const char *path, df_error_t *err);
void df_st_writer_free(df_st_writer_t **w);

/* ----------------------------------------------------------------- model */

#define DF_MAX_IO 16
#define DF_NAME_MAX 64

typedef struct df_io_desc {
    char name[DF_NAME_MAX];
    df_dtype_t dtype;     /* F32 for every input/output today */
    int ndim;
    int64_t shape[4];     /* per pose (no batch dimension) */
    int optional;         /* input may be omitted: the default is used */
} df_io_desc_t;

/* Per-pose flags (df_batch_t.flags). 0 = the model's defaults. */
#define DF_POSE_LBS 0x1u
#define DF_POSE_DQS 0x2u

typedef struct df_batch {
    int n; /* B, number of poses */
    /* in[i]: array of n pointers for model input i (df_model_input(m, i)),
     * or NULL when input i is absent for every pose; in[i][b] == NULL means
     * absent for pose b. Absent inputs take the model's default. Each
     * pointer addresses numel(desc) floats. Borrowed. */
    const float *const *in[DF_MAX_IO];
    /* out[o]: array of n destinations for model output o, or NULL when the
     * output is not wanted. Borrowed. */
    float *const *out[DF_MAX_IO];
    const uint32_t *flags; /* n per-pose DF_POSE_* flags, or NULL */
} df_batch_t;

typedef struct df_model df_model_t;
typedef struct df_scratch df_scratch_t;

/* Load a model file of a given kind. params_json: the "parameters" object of
 * the model's config.json as JSON text, or NULL. *out is new with one
 * reference: release with df_model_unref. */
int df_model_open(const char *path, const char *kind, const char *params_json,
                  const df_limits_t *lim, df_model_t **out, df_error_t *err);

df_model_t *df_model_ref(df_model_t *m);       /* atomic; returns m */
void df_model_unref(df_model_t **m);           /* atomic; frees at zero */

const char *df_model_kind(const df_model_t *m);
const char *df_model_name(const df_model_t *m);   /* set by repository */
int64_t df_model_version(const df_model_t *m);
void df_model_set_identity(df_model_t *m, const char *name, int64_t version);

int df_model_n_inputs(const df_model_t *m);
const df_io_desc_t *df_model_input(const df_model_t *m, int i);
int df_model_find_input(const df_model_t *m, const char *name); /* -1 */
int df_model_n_outputs(const df_model_t *m);
const df_io_desc_t *df_model_output(const df_model_t *m, int o);
int df_model_find_output(const df_model_t *m, const char *name); /* -1 */
/* Default value of input i (numel floats), borrowed. */
const float *df_model_input_default(const df_model_t *m, int i);

/* The output mesh: rest positions [N,3] and triangles [T,3]. Borrowed. */
int64_t df_model_n_vertices(const df_model_t *m);
int64_t df_model_n_triangles(const df_model_t *m);
const float *df_model_rest_positions(const df_model_t *m);
const uint32_t *df_model_triangles(const df_model_t *m);
void df_model_bbox(const df_model_t *m, float lo[3], float hi[3]);
/* Named lists: "joints", "morphs", "controls", "clips". Returns the count;
 * *names is borrowed (NULL when the list is empty). */
size_t df_model_names(const df_model_t *m, const char *list,
                      const char *const **names);

/* Evaluate b->n poses. Validates per-pose values (finite, quaternion
 * non-zero...) and names the pose and input at fault. Thread-safe for
 * distinct scratch objects. Allocates nothing once scratch has grown. */
int df_model_evaluate(const df_model_t *m, const df_batch_t *b,
                      df_scratch_t *scratch, df_error_t *err);
/* Scratch bytes one df_model_evaluate of n poses needs (to size and
 * pre-fault a worker's scratch before the first large batch). */
size_t df_model_scratch_bytes(const df_model_t *m, int n);

/* Clips (animations stored in the model file). */
typedef struct df_clip_info {
    const char *name;      /* borrowed */
    int64_t n_keys;        /* number of stored key frames */
    const float *times;    /* n_keys key times in seconds, borrowed */
} df_clip_info_t;
size_t df_model_clip_count(const df_model_t *m);
int df_model_clip_info(const df_model_t *m, size_t c, df_clip_info_t *out);
int df_model_clip_find(const df_model_t *m, const char *name); /* -1 */
/* Sample clip c at time t (seconds since the clip's first key; clamped;
 * quaternions slerped, the rest lerped). bufs[i] receives input i
 * (numel floats) or is NULL to skip. *filled gets bit i set for each input
 * the clip provides. */
int df_model_clip_sample(const df_model_t *m, int c, double t,
                         float *const *bufs, uint32_t *filled,
                         df_error_t *err);

/* --------------------------------------------------------------- scratch */

/* Per-worker scratch memory; grows, never shrinks; not thread-safe. */
df_scratch_t *df_scratch_new(void);
void df_scratch_free(df_scratch_t **s);
/* Returns at least bytes of 64-byte aligned memory (valid until the next
 * call), or NULL on out of memory. */
void *df_scratch_get(df_scratch_t *s, size_t bytes);
size_t df_scratch_capacity(const df_scratch_t *s);

/* ----------------------------------------------------------------- kinds */

/* A model kind. Implementations live in core/kind_<name>.c and are listed in
 * core/base/kinds.c. load() fills the model through the df__model_* setters in
 * core/base/model_internal.h. */
typedef struct df_kind {
    const char *name;
    int (*load)(df_model_t *m, const df_st_t *st, const char *params_json,
                const df_limits_t *lim, df_error_t *err);
    void (*destroy)(void *impl);
    size_t (*scratch_bytes)(const df_model_t *m, int n);
    int (*evaluate)(const df_model_t *m, const df_batch_t *b, void *scratch,
                    df_error_t *err);
    /* optional */
    int (*clip_sample)(const df_model_t *m, int c, double t,
                       float *const *bufs, uint32_t *filled, df_error_t *err);
} df_kind_t;

const df_kind_t *df_kind_find(const char *name);
size_t df_kind_count(void);
const df_kind_t *df_kind_at(size_t i);
/* Register a kind at run time (plugins, tests). k is borrowed and must
 * outlive the process. DF_EINVAL if a kind of that name exists, DF_ELIMIT
 * when the table (16 entries) is full. Not thread-safe: call at start-up. */
int df_kind_register(const df_kind_t *k);

/* ------------------------------------------------------------ repository */

/* REPO/<name>/config.json and REPO/<name>/<version>/model.safetensors.
 *
 * config.json:
 * { "kind": "rigged",
 *   "parameters": { ... kind specific ... },
 *   "max_batch_size": 32, "max_queue_delay_us": 500,
 *   "max_queue_length": 1024, "timeout_us": 5000000,
 *   "inline_max_us": 20,
 *   "characters": { "alice": { "defaults": { "weights": [..] },
 *                              "skinning": "dqs", "encoding": "float16" } } }
 */
typedef struct df_char_default {
    char input[DF_NAME_MAX];
    float *data;      /* owned by the config */
    size_t n;
} df_char_default_t;

typedef struct df_character {
    char name[DF_NAME_MAX];
    int n_defaults;
    df_char_default_t defaults[DF_MAX_IO];
    uint32_t flags;         /* DF_POSE_* default for this character */
    char encoding[16];      /* "float32" (default), "float16", "int16" */
} df_character_t;

typedef struct df_model_config {
    char name[DF_NAME_MAX];
    char kind[32];
    char *params_json;       /* owned; NULL if absent */
    int max_batch_size;      /* default 32 */
    int64_t max_queue_delay_us; /* default 500 */
    int max_queue_length;    /* default 1024 */
    int64_t timeout_us;      /* default 10 s */
    int64_t inline_max_us;   /* default 20: a request whose evaluation
                              * costs at most this (measured at load) runs
                              * on the front's thread when the model's
                              * queue is empty; 0 = always queue */
    int n_characters;        /* 0: served under the model's own name */
    df_character_t *characters; /* owned */
} df_model_config_t;

/* Model directory names in REPO (sorted). *names new: df_repo_names_free. */
int df_repo_list(const char *repo, char ***names, size_t *n, df_error_t *err);
void df_repo_names_free(char ***names, size_t n);
int df_repo_read_config(const char *repo, const char *name,
                        df_model_config_t *out, df_error_t *err);
void df_model_config_free(df_model_config_t *cfg);
/* Load the highest version of REPO/name that validates. Versions that fail
 * are skipped; their errors are appended to *skipped (may be NULL; new,
 * free()). cfg_out may be NULL. */
int df_repo_load(const char *repo, const char *name, const df_limits_t *lim,
                 df_model_t **out, df_model_config_t *cfg_out,
                 char **skipped, df_error_t *err);

/* ----------------------------------------------------- rigged model data */

/* The in-memory description of a `rigged` model, for writers (import,
 * decompose) and the file format. All arrays borrowed by df_rigged_write.
 * See docs/model-format.md for the tensor names. */
typedef struct df_rigged_clip {
    char name[DF_NAME_MAX];
    int64_t n_keys;
    float *times;          /* [F] seconds, increasing */
    float *rotations;      /* [F,J,4] local xyzw, or NULL */
    float *translations;   /* [F,J,3] local, or NULL */
    float *weights;        /* [F,M] morph weights, or NULL */
    float *matrices;       /* [F,J,12] world 3x4 row-major, or NULL */
} df_rigged_clip_t;

typedef struct df_rigged_data {
    int64_t n_vertices, n_triangles;
    float *positions;          /* [N,3] bind-space rest positions */
    uint32_t *triangles;       /* [T,3] */
    float *normals;            /* [N,3] or NULL */
    int64_t n_morphs;
    float *morph_deltas;       /* [M,N,3] or NULL */
    float *morph_normal_deltas;/* [M,N,3] or NULL: change of the vertex normal
                                * per unit weight (glTF NORMAL targets) */
    char **morph_names;        /* [M] or NULL */
    int64_t n_joints;          /* 0: no skeleton */
    char **joint_names;        /* [J] */
    int32_t *parents;          /* [J], -1 for roots; parent < child */
    float *rest_translations;  /* [J,3] local */
    float *rest_rotations;     /* [J,4] local xyzw */
    float *rest_scales;        /* [J,3] local */
    float *inverse_bind;       /* [J,16] row-major 4x4 */
    int64_t n_influences;      /* K <= 8 */
    int32_t *skin_joints;      /* [N,K] */
    float *skin_weights;       /* [N,K] sum to 1 */
    const char *skinning;      /* "lbs" or "dqs" (default lbs) */
    size_t n_clips;
    df_rigged_clip_t *clips;
    /* shape blend shapes (optional; docs/rigged.md "Shape blend shapes") */
    int64_t n_shapes;          /* S, 0: none */
    float *shape_deltas;       /* [S,N,3] per unit beta_s */
    float *shape_normal_deltas;/* [S,N,3] or NULL */
    char **shape_names;        /* [S] or NULL */
    float *joint_shape_translations; /* [S,J,3] change of each joint's local
                                * rest translation per unit beta_s, or NULL */
} df_rigged_data_t;

int df_rigged_write(const df_rigged_data_t *d, const char *path,
                    df_error_t *err);

/* ----------------------------------------------------------------- misc */

/* .npy float32 writer/reader (C order). */
int df_npy_write_f32(const char *path, int ndim, const int64_t *shape,
                     const float *data, df_error_t *err);
/* *data new: free(). */
int df_npy_read_f32(const char *path, int *ndim, int64_t shape[DF_MAX_DIMS],
                    float **data, df_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* DF_H */

/* encode.h — output encodings shared by the HTTP and socket fronts (pure).
 *
 * DESIGN
 * Clients (VR headsets, browsers) are bandwidth-bound, so an output can be
 * sent as float32 (exact), float16 (IEEE binary16, round to nearest even:
 * relative error <= 2^-11 for normal values) or int16 quantized in a box:
 * value = q * scale[c] + offset[c] for component c (of the last axis), with
 * q in [-32767, 32767]; the error is <= scale[c]/2 for values inside the
 * box; values outside are clamped to it (and counted).
 *
 * The box for int16: for a 3-component output named like "*normal*" the
 * unit box [-1,1]; for any other 3-component output the model's rest
 * bounding box grown by `margin` times its extent on every side (posed
 * vertices leave the rest box), widened further to the data's range when a
 * pose leaves even that (df_quant_cover), so nothing valid is clamped; for
 * other shapes the data's own min/max.
 * No I/O, no allocation: fuzzable and testable alone.
 */
#ifndef DF_PROTO_ENCODE_H
#define DF_PROTO_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum df_encoding {
    DF_ENC_DEFAULT = 0, /* "use the character's default" (requests only) */
    DF_ENC_F32 = 1,
    DF_ENC_F16 = 2,
    DF_ENC_I16 = 3,
} df_encoding_t;

#define DF_QUANT_MAX_COMPS 4

typedef struct df_quant {
    int comps;                       /* components (last axis); 0: unused */
    float scale[DF_QUANT_MAX_COMPS];
    float offset[DF_QUANT_MAX_COMPS];
} df_quant_t;

/* "float32"|"float16"|"int16" (also "fp32"/"FP16"/"INT16"...). 0 or -1. */
int df_encoding_parse(const char *s, df_encoding_t *out);
const char *df_encoding_name(df_encoding_t e);   /* "float32" ... */
const char *df_encoding_kserve(df_encoding_t e); /* "FP32","FP16","INT16" */
size_t df_encoding_size(df_encoding_t e);        /* bytes per element */

/* Default margin for the bbox quantization box (fraction of the extent). */
#define DF_QUANT_MARGIN 0.5f

/* The box for a bounding box [lo,hi] grown by margin*extent each side.
 * Degenerate axes get a unit extent. */
void df_quant_from_box(const float lo[3], const float hi[3], float margin,
                       df_quant_t *q /* OUT */);
/* The unit box [-1,1]^comps. */
void df_quant_unit(int comps, df_quant_t *q /* OUT */);
/* The data's own range per component (n elements, comps per row). */
void df_quant_from_data(const float *x, size_t n, int comps,
                        df_quant_t *q /* OUT */);

/* Widen q (if needed) so that it covers every finite value of x (n
 * elements, q->comps per row); returns 1 when it widened. Keeps the error
 * bound scale/2 for poses that leave the rest box. */
int df_quant_cover(df_quant_t *q, const float *x, size_t n);

/* n floats -> n halfs. */
void df_encode_f16(const float *src, size_t n, uint16_t *dst);
void df_decode_f16(const uint16_t *src, size_t n, float *dst);
/* n floats (rows of q->comps) -> n int16. Returns how many were clamped
 * (outside the box or not finite). */
size_t df_encode_i16(const float *src, size_t n, const df_quant_t *q,
                     int16_t *dst);
void df_decode_i16(const int16_t *src, size_t n, const df_quant_t *q,
                   float *dst);

/* Encode n floats of an output named `name` with `comps` components per
 * row into dst (n * df_encoding_size(e) bytes). For DF_ENC_I16 the box is
 * chosen as described above (bbox lo/hi may be NULL: data range) and
 * written to *q. Returns clamped count. */
size_t df_encode_output(df_encoding_t e, const char *name, int comps,
                        const float *src, size_t n, const float *lo,
                        const float *hi, void *dst, df_quant_t *q /* OUT */);

#ifdef __cplusplus
}
#endif
#endif

/* encode.c — output encodings: float32, float16, int16-in-a-box (pure).
 *
 * See encode.h for the error each encoding introduces. The float16
 * conversion is core's df_f32_to_f16 (round to nearest even); int16 rounds
 * to nearest, so the error inside the box is at most scale/2.
 */
#include "encode.h"
#include "df.h"
#include <math.h>
#include <string.h>
#include <strings.h>

int df_encoding_parse(const char *s, df_encoding_t *out)
{
    if (!s) return -1;
    static const struct { const char *n; df_encoding_t e; } t[] = {
        {"float32", DF_ENC_F32}, {"fp32", DF_ENC_F32}, {"f32", DF_ENC_F32},
        {"float16", DF_ENC_F16}, {"fp16", DF_ENC_F16}, {"f16", DF_ENC_F16},
        {"half", DF_ENC_F16},    {"int16", DF_ENC_I16}, {"i16", DF_ENC_I16},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcasecmp(s, t[i].n)) { *out = t[i].e; return 0; }
    return -1;
}

const char *df_encoding_name(df_encoding_t e)
{
    switch (e) {
    case DF_ENC_F16: return "float16";
    case DF_ENC_I16: return "int16";
    case DF_ENC_F32: return "float32";
    default: return "default";
    }
}

const char *df_encoding_kserve(df_encoding_t e)
{
    switch (e) {
    case DF_ENC_F16: return "FP16";
    case DF_ENC_I16: return "INT16";
    default: return "FP32";
    }
}

size_t df_encoding_size(df_encoding_t e)
{
    return (e == DF_ENC_F16 || e == DF_ENC_I16) ? 2 : 4;
}

void df_quant_from_box(const float lo[3], const float hi[3], float margin,
                       df_quant_t *q)
{
    memset(q, 0, sizeof *q);
    q->comps = 3;
    for (int c = 0; c < 3; c++) {
        float ext = hi[c] - lo[c];
        if (!(ext > 0) || !isfinite(ext)) ext = 1.0f;
        float half = ext * (0.5f + margin);
        q->offset[c] = 0.5f * (lo[c] + hi[c]);
        if (!isfinite(q->offset[c])) q->offset[c] = 0;
        q->scale[c] = half / 32767.0f;
    }
}

void df_quant_unit(int comps, df_quant_t *q)
{
    memset(q, 0, sizeof *q);
    if (comps < 1) comps = 1;
    if (comps > DF_QUANT_MAX_COMPS) comps = DF_QUANT_MAX_COMPS;
    q->comps = comps;
    for (int c = 0; c < comps; c++) q->scale[c] = 1.0f / 32767.0f;
}

void df_quant_from_data(const float *x, size_t n, int comps, df_quant_t *q)
{
    memset(q, 0, sizeof *q);
    if (comps < 1 || comps > DF_QUANT_MAX_COMPS) comps = 1;
    q->comps = comps;
    float lo[DF_QUANT_MAX_COMPS], hi[DF_QUANT_MAX_COMPS];
    for (int c = 0; c < comps; c++) { lo[c] = INFINITY; hi[c] = -INFINITY; }
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        int c = (int)(i % (size_t)comps);
        if (!isfinite(v)) continue;
        if (v < lo[c]) lo[c] = v;
        if (v > hi[c]) hi[c] = v;
    }
    for (int c = 0; c < comps; c++) {
        if (!(hi[c] >= lo[c])) { lo[c] = 0; hi[c] = 0; }
        float ext = hi[c] - lo[c];
        q->offset[c] = 0.5f * (lo[c] + hi[c]);
        /* the extremes must round back inside [-32767, 32767] */
        q->scale[c] = ext > 0 ? ext * 0.5f / 32766.0f : 1.0f / 32767.0f;
    }
}

int df_quant_cover(df_quant_t *q, const float *x, size_t n)
{
    int comps = q->comps > 0 ? q->comps : 1;
    float lo[DF_QUANT_MAX_COMPS], hi[DF_QUANT_MAX_COMPS];
    for (int c = 0; c < comps; c++) {
        lo[c] = q->offset[c] - 32767.0f * q->scale[c];
        hi[c] = q->offset[c] + 32767.0f * q->scale[c];
    }
    int wide = 0, c = 0;
    float dlo[DF_QUANT_MAX_COMPS], dhi[DF_QUANT_MAX_COMPS];
    for (int k = 0; k < comps; k++) { dlo[k] = lo[k]; dhi[k] = hi[k]; }
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (isfinite(v)) {
            if (v < dlo[c]) { dlo[c] = v; wide = 1; }
            if (v > dhi[c]) { dhi[c] = v; wide = 1; }
        }
        if (++c == comps) c = 0;
    }
    if (!wide) return 0;
    for (int k = 0; k < comps; k++) {
        q->offset[k] = 0.5f * (dlo[k] + dhi[k]);
        /* 32766: the extremes must round back inside [-32767, 32767] */
        q->scale[k] = (dhi[k] - dlo[k]) * 0.5f / 32766.0f;
        if (!(q->scale[k] > 0)) q->scale[k] = 1.0f / 32767.0f;
    }
    return 1;
}

void df_encode_f16(const float *src, size_t n, uint16_t *dst)
{
    for (size_t i = 0; i < n; i++) dst[i] = df_f32_to_f16(src[i]);
}

void df_decode_f16(const uint16_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) dst[i] = df_f16_to_f32(src[i]);
}

size_t df_encode_i16(const float *src, size_t n, const df_quant_t *q,
                     int16_t *dst)
{
    int comps = q->comps > 0 ? q->comps : 1;
    float inv[DF_QUANT_MAX_COMPS];
    for (int c = 0; c < comps; c++)
        inv[c] = q->scale[c] > 0 ? 1.0f / q->scale[c] : 0.0f;
    size_t clamped = 0;
    int c = 0;
    for (size_t i = 0; i < n; i++) {
        float v = (src[i] - q->offset[c]) * inv[c];
        long r;
        if (!(v >= -32767.0f)) { r = -32767; clamped++; } /* also NaN */
        else if (v > 32767.0f) { r = 32767; clamped++; }
        else r = lrintf(v);
        dst[i] = (int16_t)r;
        if (++c == comps) c = 0;
    }
    return clamped;
}

void df_decode_i16(const int16_t *src, size_t n, const df_quant_t *q,
                   float *dst)
{
    int comps = q->comps > 0 ? q->comps : 1;
    int c = 0;
    for (size_t i = 0; i < n; i++) {
        dst[i] = (float)src[i] * q->scale[c] + q->offset[c];
        if (++c == comps) c = 0;
    }
}

size_t df_encode_output(df_encoding_t e, const char *name, int comps,
                        const float *src, size_t n, const float *lo,
                        const float *hi, void *dst, df_quant_t *q)
{
    memset(q, 0, sizeof *q);
    switch (e) {
    case DF_ENC_F16:
        df_encode_f16(src, n, dst);
        return 0;
    case DF_ENC_I16:
        if (comps == 3 && name && strstr(name, "normal"))
            df_quant_unit(3, q);
        else if (comps == 3 && lo && hi) {
            df_quant_from_box(lo, hi, DF_QUANT_MARGIN, q);
            df_quant_cover(q, src, n);
        }
        else
            df_quant_from_data(src, n, comps <= DF_QUANT_MAX_COMPS ? comps : 1, q);
        return df_encode_i16(src, n, q, dst);
    default:
        if (dst != (const void *)src) memcpy(dst, src, n * sizeof(float));
        return 0;
    }
}

/* dtype.c — element types: sizes, the two spellings, float16 conversion.
 *
 * DESIGN
 * One table indexed by df_dtype_t holds the byte size, the safetensors
 * spelling ("F32") and the KServe v2 spelling ("FP32"); df_dtype_parse
 * accepts either. float16 <-> float32 is done bit-exactly in integer
 * arithmetic: f32 -> f16 rounds to nearest, ties to
 * even, produces subnormals and overflows to infinity; NaN stays NaN
 * (quiet, payload top bits kept). f16 -> f32 is exact. When the build
 * targets F16C (-march=native on x86-64) the exported functions use the
 * hardware instructions, which implement the same rounding; the software
 * versions stay available as df__f32_to_f16_soft/df__f16_to_f32_soft.
 */
#include "df.h"

#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

typedef struct {
    size_t size;
    const char *st;     /* safetensors */
    const char *kserve; /* KServe v2 */
} dtype_info_t;

static const dtype_info_t dtypes[DF_DT_COUNT] = {
    [DF_DT_F32] = {4, "F32", "FP32"},   [DF_DT_F16] = {2, "F16", "FP16"},
    [DF_DT_BF16] = {2, "BF16", "BF16"}, [DF_DT_F64] = {8, "F64", "FP64"},
    [DF_DT_I8] = {1, "I8", "INT8"},     [DF_DT_U8] = {1, "U8", "UINT8"},
    [DF_DT_I16] = {2, "I16", "INT16"},  [DF_DT_U16] = {2, "U16", "UINT16"},
    [DF_DT_I32] = {4, "I32", "INT32"},  [DF_DT_U32] = {4, "U32", "UINT32"},
    [DF_DT_I64] = {8, "I64", "INT64"},  [DF_DT_U64] = {8, "U64", "UINT64"},
    [DF_DT_BOOL] = {1, "BOOL", "BOOL"},
};

size_t df_dtype_size(df_dtype_t dt)
{
    return (unsigned)dt < DF_DT_COUNT ? dtypes[dt].size : 0;
}

const char *df_dtype_name(df_dtype_t dt)
{
    return (unsigned)dt < DF_DT_COUNT ? dtypes[dt].st : "?";
}

const char *df_dtype_kserve(df_dtype_t dt)
{
    return (unsigned)dt < DF_DT_COUNT ? dtypes[dt].kserve : "?";
}

int df_dtype_parse(const char *s, df_dtype_t *out)
{
    if (!s) return DF_EINVAL;
    for (int i = 0; i < DF_DT_COUNT; i++) {
        if (strcmp(s, dtypes[i].st) == 0 || strcmp(s, dtypes[i].kserve) == 0) {
            if (out) *out = (df_dtype_t)i;
            return DF_OK;
        }
    }
    return DF_EINVAL;
}

/* Software conversions (always compiled; the exported functions use the
 * F16C instructions when the build targets them, which round the same way:
 * the tests compare both against independent references). */
uint16_t df__f32_to_f16_soft(float f);
float df__f16_to_f32_soft(uint16_t h);

uint16_t df__f32_to_f16_soft(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;

    if (exp == 0xff) { /* inf or nan */
        if (man == 0) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | (man >> 13));
    }
    int32_t e = (int32_t)exp - 127 + 15; /* rebiased exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (e <= 0) {
        /* subnormal or zero in f16: value = man16 * 2^-24 */
        if (e < -10) return (uint16_t)sign; /* below half the smallest subnormal */
        uint32_t m = man | 0x800000u;       /* implicit bit */
        uint32_t shift = (uint32_t)(14 - e); /* 14..24 */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h); /* may carry into the smallest normal: correct */
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* may carry into exponent, up to inf: correct */
    return (uint16_t)(sign | h);
}

float df__f16_to_f32_soft(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            man &= 0x3ffu;
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 0x1f) { /* inf, or NaN made quiet as IEEE requires */
        x = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t df_f32_to_f16(float f)
{
#if defined(__F16C__)
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    return df__f32_to_f16_soft(f);
#endif
}

float df_f16_to_f32(uint16_t h)
{
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return df__f16_to_f32_soft(h);
#endif
}

void df_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = df_f32_to_f16(src[i]);
}

void df_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      (const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = df_f16_to_f32(src[i]);
}

int64_t df_tensor_numel(const df_tensor_t *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

void df_limits_default(df_limits_t *lim)
{
    lim->max_file_bytes = 4ull << 30;
    lim->max_header_bytes = 64ull << 20;
    lim->max_tensors = 65536;
    lim->max_tensor_elems = 1ull << 31;
    lim->max_vertices = 10000000;
    lim->max_joints = 4096;
    lim->max_morphs = 4096;
    lim->max_clip_frames = 1000000;
}

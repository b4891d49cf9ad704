/* test_dtype.c — dtype table and float16 conversion.
 *
 * References are independent of core/base/dtype.c: f16 -> f32 is checked against
 * the IEEE formula evaluated with ldexp() in double, and f32 -> f16 against
 * the compiler's _Float16 conversion (GCC on x86-64, round to nearest even)
 * and against a nearest-value search over the f16 table with ties to even.
 */
#include "df.h"
#include "dftest.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* core/base/dtype.c: the software conversions behind the exported ones (which
 * use F16C when the build targets it). Both are tested. */
uint16_t df__f32_to_f16_soft(float f);
float df__f16_to_f32_soft(uint16_t h);

typedef struct {
    const char *name;
    uint16_t (*to16)(float);
    float (*to32)(uint16_t);
} impl_t;
static const impl_t impls[2] = {
    {"exported", df_f32_to_f16, df_f16_to_f32},
    {"software", df__f32_to_f16_soft, df__f16_to_f32_soft},
};
#define df_f32_to_f16 (im->to16)
#define df_f16_to_f32 (im->to32)
#define FOR_IMPLS for (const impl_t *im = impls; im < impls + 2; im++)

static float bits_f(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }
static uint32_t f_bits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }

/* IEEE binary16 value by formula. */
static double f16_formula(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_table(void)
{
    DF_CHECK(df_dtype_size(DF_DT_F32) == 4);
    DF_CHECK(df_dtype_size(DF_DT_F16) == 2);
    DF_CHECK(df_dtype_size(DF_DT_BF16) == 2);
    DF_CHECK(df_dtype_size(DF_DT_F64) == 8);
    DF_CHECK(df_dtype_size(DF_DT_I8) == 1 && df_dtype_size(DF_DT_U8) == 1);
    DF_CHECK(df_dtype_size(DF_DT_I16) == 2 && df_dtype_size(DF_DT_U16) == 2);
    DF_CHECK(df_dtype_size(DF_DT_I32) == 4 && df_dtype_size(DF_DT_U32) == 4);
    DF_CHECK(df_dtype_size(DF_DT_I64) == 8 && df_dtype_size(DF_DT_U64) == 8);
    DF_CHECK(df_dtype_size(DF_DT_BOOL) == 1);
    DF_CHECK(df_dtype_size(DF_DT_COUNT) == 0);
    DF_CHECK(strcmp(df_dtype_name(DF_DT_F32), "F32") == 0);
    DF_CHECK(strcmp(df_dtype_kserve(DF_DT_F32), "FP32") == 0);
    DF_CHECK(strcmp(df_dtype_kserve(DF_DT_I32), "INT32") == 0);
    DF_CHECK(strcmp(df_dtype_kserve(DF_DT_U8), "UINT8") == 0);
    DF_CHECK(strcmp(df_dtype_name(DF_DT_BOOL), "BOOL") == 0);
    /* both spellings of every dtype parse back to it */
    for (int i = 0; i < DF_DT_COUNT; i++) {
        df_dtype_t a = DF_DT_COUNT, b = DF_DT_COUNT;
        DF_CHECK(df_dtype_parse(df_dtype_name((df_dtype_t)i), &a) == DF_OK);
        DF_CHECK(df_dtype_parse(df_dtype_kserve((df_dtype_t)i), &b) == DF_OK);
        DF_CHECK(a == (df_dtype_t)i && b == (df_dtype_t)i);
    }
    df_dtype_t d;
    DF_CHECK(df_dtype_parse("fp32", &d) == DF_EINVAL); /* case matters */
    DF_CHECK(df_dtype_parse("F33", &d) == DF_EINVAL);
    DF_CHECK(df_dtype_parse("", &d) == DF_EINVAL);
    DF_CHECK(df_dtype_parse(NULL, &d) == DF_EINVAL);
}

static void test_f16_to_f32_exhaustive(void)
{
    FOR_IMPLS {
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            float f = df_f16_to_f32((uint16_t)h);
            double ref = f16_formula((uint16_t)h);
            if (isnan(ref)) {
                if (!isnan(f)) bad++;
            } else if ((double)f != ref || !signbit(f) != !signbit(ref)) {
                bad++;
            }
        }
        DF_CHECK_MSG(bad == 0, "%s: %d mismatches", im->name, bad);
    }
}

static void test_roundtrip_exhaustive(void)
{
    FOR_IMPLS {
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            int is_nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff);
            uint16_t back = df_f32_to_f16(df_f16_to_f32((uint16_t)h));
            if (is_nan) {
                if ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff)) bad++;
            } else if (back != h) {
                bad++;
            }
        }
        DF_CHECK_MSG(bad == 0, "%s: %d values do not survive f16->f32->f16", im->name, bad);
    }
}

/* Nearest f16 by search over the positive table, ties to even; the value
 * past 65504 is treated as 65536 (the IEEE overflow rule). */
static uint16_t ref_nearest(float f)
{
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    uint16_t lo = 0, hi = 0x7c00;
    /* largest h with value(h) <= a */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (f16_formula(mid) <= a) lo = mid; else hi = mid;
    }
    if (f16_formula(0x7c00 - 1) <= a && a >= 65536.0) return sign | 0x7c00;
    double vlo = f16_formula(lo);
    double vhi = lo + 1 == 0x7c00 ? 65536.0 : f16_formula((uint16_t)(lo + 1));
    if (a == vlo) return sign | lo;
    double dl = a - vlo, dh = vhi - a;
    uint16_t r;
    if (dl < dh) r = lo;
    else if (dh < dl) r = (uint16_t)(lo + 1);
    else r = (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return sign | r;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void test_f32_to_f16_vs_references(void)
{
    FOR_IMPLS {
        int bad_search = 0, bad_cc = 0;
        /* random bit patterns plus values concentrated in the f16 range */
        for (int i = 0; i < 400000; i++) {
            uint32_t x = rnd();
            if (i & 1) x = (x & 0x807fffffu) | ((100u + (x >> 24) % 60u) << 23);
            float f = bits_f(x);
            if (isnan(f)) continue;
            uint16_t got = df_f32_to_f16(f);
            if (got != ref_nearest(f)) bad_search++;
#if defined(__FLT16_MAX__)
            _Float16 c = (_Float16)f;
            uint16_t cb;
            memcpy(&cb, &c, 2);
            if (got != cb) bad_cc++;
#endif
        }
        DF_CHECK_MSG(bad_search == 0, "%s: %d mismatches vs nearest search", im->name, bad_search);
        DF_CHECK_MSG(bad_cc == 0, "%s: %d mismatches vs _Float16", im->name, bad_cc);
    }
}

/* Every midpoint between consecutive f16 values is a tie: it must go to the
 * even neighbour; one f32 ulp either side must go to the nearer one. */
static void test_ties_to_even(void)
{
    FOR_IMPLS {
        int bad = 0;
        for (uint16_t h = 0; h < 0x7bff; h++) {
            double a = f16_formula(h), b = f16_formula((uint16_t)(h + 1));
            float mid = (float)((a + b) / 2); /* exact: 12 significant bits */
            DF_CHECK((double)mid == (a + b) / 2);
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
            if (df_f32_to_f16(mid) != even) bad++;
            if (df_f32_to_f16(-mid) != (0x8000 | even)) bad++;
            if (df_f32_to_f16(nextafterf(mid, 0)) != h) bad++;
            if (df_f32_to_f16(nextafterf(mid, INFINITY)) != h + 1) bad++;
        }
        DF_CHECK_MSG(bad == 0, "%s: %d tie cases wrong", im->name, bad);
    }
}

static void test_specials(void)
{
    FOR_IMPLS {
        DF_CHECK(df_f32_to_f16(0.0f) == 0x0000);
        DF_CHECK(df_f32_to_f16(-0.0f) == 0x8000);
        DF_CHECK(df_f32_to_f16(1.0f) == 0x3c00);
        DF_CHECK(df_f32_to_f16(-2.0f) == 0xc000);
        DF_CHECK(df_f32_to_f16(65504.0f) == 0x7bff);
        DF_CHECK(df_f32_to_f16(65519.996f) == 0x7bff); /* below the tie */
        DF_CHECK(df_f32_to_f16(65520.0f) == 0x7c00);   /* tie -> even = inf */
        DF_CHECK(df_f32_to_f16(1e10f) == 0x7c00);
        DF_CHECK(df_f32_to_f16(-1e10f) == 0xfc00);
        DF_CHECK(df_f32_to_f16(INFINITY) == 0x7c00);
        DF_CHECK(df_f32_to_f16(-INFINITY) == 0xfc00);
        uint16_t n = df_f32_to_f16(NAN);
        DF_CHECK((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
        /* a NaN whose payload lives only in the low bits must stay NaN */
        n = df_f32_to_f16(bits_f(0x7f800001u));
        DF_CHECK((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
        /* subnormals */
        DF_CHECK(df_f32_to_f16(ldexpf(1, -24)) == 0x0001);   /* smallest */
        DF_CHECK(df_f32_to_f16(ldexpf(1, -25)) == 0x0000);   /* tie -> 0 */
        DF_CHECK(df_f32_to_f16(ldexpf(1.5f, -25)) == 0x0001);
        DF_CHECK(df_f32_to_f16(ldexpf(3, -25)) == 0x0002);   /* 1.5 ulp tie -> 2 */
        DF_CHECK(df_f32_to_f16(ldexpf(1023, -24)) == 0x03ff); /* largest subnormal */
        DF_CHECK(df_f32_to_f16(ldexpf(1, -14)) == 0x0400);    /* smallest normal */
        DF_CHECK(df_f32_to_f16(ldexpf(2047, -25)) == 0x0400); /* rounds up into normal */
        DF_CHECK(df_f32_to_f16(bits_f(1)) == 0x0000);         /* f32 subnormal */
        DF_CHECK(df_f16_to_f32(0x0001) == ldexpf(1, -24));
        DF_CHECK(df_f16_to_f32(0x7c00) == INFINITY);
        DF_CHECK(df_f16_to_f32(0xfc00) == -INFINITY);
        DF_CHECK(isnan(df_f16_to_f32(0x7e00)));
        DF_CHECK(f_bits(df_f16_to_f32(0x8000)) == 0x80000000u);
    }
}

/* NaN payloads: the hardware and software paths produce the same bits. */
static void test_nan_agree(void)
{
    int bad = 0;
    for (uint32_t m = 1; m < (1u << 23); m += 997) {
        float f = bits_f(0x7f800000u | m), g = bits_f(0xff800000u | m);
        if (impls[0].to16(f) != impls[1].to16(f)) bad++;
        if (impls[0].to16(g) != impls[1].to16(g)) bad++;
    }
    for (uint32_t h = 0x7c01; h < 0x8000; h++) {
        float a = impls[0].to32((uint16_t)h), b = impls[1].to32((uint16_t)h);
        if (f_bits(a) != f_bits(b)) bad++;
    }
    DF_CHECK_MSG(bad == 0, "%d NaN conversions differ", bad);
}

/* The array forms agree with the scalar ones for every length/offset. */
static void test_array_forms(void)
{
    enum { N = 1000 };
    float f[N], back[N];
    uint16_t h[N], h2[N];
    for (int i = 0; i < N; i++) f[i] = bits_f(rnd());
    f[5] = NAN;
    f[6] = INFINITY;
    f[7] = ldexpf(3, -25);
    int bad = 0;
    for (int len = 0; len < 40; len++) {
        for (int i = 0; i < N; i++) h[i] = 0xdead;
        df_f32_to_f16_n(f + 3, h, (size_t)len);
        for (int i = 0; i < len; i++)
            if (h[i] != impls[1].to16(f[3 + i])) bad++;
        if (h[len] != 0xdead) bad++; /* no overrun */
    }
    df_f32_to_f16_n(f, h, N);
    for (int i = 0; i < N; i++) h2[i] = (uint16_t)i * 67u;
    df_f16_to_f32_n(h2, back, N);
    for (int i = 0; i < N; i++) {
        if (h[i] != impls[1].to16(f[i])) bad++;
        if (f_bits(back[i]) != f_bits(impls[1].to32(h2[i]))) bad++;
    }
    DF_CHECK_MSG(bad == 0, "%d array conversions differ", bad);
}

static void test_limits_default(void)
{
    df_limits_t l;
    df_limits_default(&l);
    DF_CHECK(l.max_file_bytes == 4ull << 30);
    DF_CHECK(l.max_header_bytes == 64ull << 20);
    DF_CHECK(l.max_tensors == 65536);
    DF_CHECK(l.max_tensor_elems == 1ull << 31);
    DF_CHECK(l.max_vertices == 10000000);
    DF_CHECK(l.max_joints == 4096 && l.max_morphs == 4096);
    DF_CHECK(l.max_clip_frames == 1000000);
}

static void test_errors(void)
{
    df_error_t e = {0};
    DF_CHECK(df_error_set(&e, DF_ELIMIT, "tensor '%s' too big", "x") == DF_ELIMIT);
    DF_CHECK(e.code == DF_ELIMIT && strcmp(e.msg, "tensor 'x' too big") == 0);
    DF_CHECK(df_error_set(NULL, DF_EIO, "ignored") == DF_EIO);
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    df_error_set(&e, DF_EINVAL, "%s", big); /* truncated, terminated */
    DF_CHECK(strlen(e.msg) == sizeof e.msg - 1);
    for (int c = DF_ENUMERIC; c <= DF_OK; c++)
        DF_CHECK(strcmp(df_strerror(c), "unknown error") != 0);
    DF_CHECK(strcmp(df_strerror(-999), "unknown error") == 0);
}

int main(void)
{
    DF_RUN(test_table);
    DF_RUN(test_f16_to_f32_exhaustive);
    DF_RUN(test_roundtrip_exhaustive);
    DF_RUN(test_f32_to_f16_vs_references);
    DF_RUN(test_ties_to_even);
    DF_RUN(test_specials);
    DF_RUN(test_nan_agree);
    DF_RUN(test_array_forms);
    DF_RUN(test_limits_default);
    DF_RUN(test_errors);
    return dftest_exit();
}

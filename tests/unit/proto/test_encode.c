/* test_encode.c — output encodings (proto/encode.c) against independent
 * references: float16 against an exact rounding computed here with
 * frexp/ldexp in double precision, int16 against the documented bound
 * scale/2, and the box rules (unit box for normals, rest box + margin,
 * widened to cover poses that leave it). */
#include "dftest.h"
#include "df.h"
#include "encode.h"
#include <string.h>

/* Reference float16 value of x: round to nearest even on an 11-bit
 * significand, with the binary16 subnormal range and overflow to inf. */
static double ref_f16(double x)
{
    if (x == 0) return x;
    double a = fabs(x);
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5,1) */
    int exp = e - 1;                   /* a = 1.f * 2^exp */
    if (exp < -14) exp = -14;          /* subnormals share the min exponent */
    double ulp = ldexp(1.0, exp - 10);
    double q = a / ulp;
    double r = nearbyint(q);           /* ties to even (default mode) */
    double v = r * ulp;
    if (v > 65504.0) v = INFINITY;
    return x < 0 ? -v : v;
}

static uint32_t rng = 1;
static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFFFF) / 16777216.0f;
}

static void test_f16_against_reference(void)
{
    enum { N = 20000 };
    static float x[N], y[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++) {
        float s = ldexpf(1.0f, (int)(rnd() * 40) - 26);
        x[i] = (rnd() - 0.5f) * s;
    }
    x[0] = 65504; x[1] = 70000; x[2] = -1e-8f; x[3] = 6.1035156e-05f; x[4] = 0;
    df_encode_f16(x, N, h);
    df_decode_f16(h, N, y);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double r = ref_f16(x[i]);
        if (!((double)y[i] == r)) {
            if (bad++ < 5) fprintf(stderr, "x=%.9g got %.9g want %.9g\n", x[i], y[i], r);
        }
        /* the documented bound for the normal range */
        if (fabs(x[i]) >= 6.1035156e-05 && fabs(x[i]) <= 65504)
            DF_CHECK(fabs(y[i] - x[i]) <= ldexp(fabs(x[i]), -11));
    }
    DF_CHECK(bad == 0);
}

static void test_i16_bound_and_cover(void)
{
    float lo[3] = {-1, 0, -0.5f}, hi[3] = {1, 2, 0.5f};
    df_quant_t q;
    df_quant_from_box(lo, hi, 0.5f, &q);
    /* box covers [lo - 0.5 ext, hi + 0.5 ext] */
    DF_CHECK_NEAR(q.offset[1], 1.0, 1e-7);
    DF_CHECK_NEAR(q.scale[1] * 32767.0, 2.0, 1e-5);
    enum { N = 3000 };
    static float x[N], y[N];
    static int16_t c[N];
    for (int i = 0; i < N; i++) x[i] = lo[i % 3] + (hi[i % 3] - lo[i % 3]) * (2 * rnd() - 0.5f);
    DF_CHECK(df_encode_i16(x, N, &q, c) == 0);
    df_decode_i16(c, N, &q, y);
    for (int i = 0; i < N; i++) DF_CHECK(fabs(y[i] - x[i]) <= q.scale[i % 3] * 0.5 * 1.001 + 1e-7);
    /* a pose far outside: cover widens the box, nothing clamps */
    x[7] = 50.0f;
    x[8] = -30.0f;
    DF_CHECK(df_quant_cover(&q, x, N) == 1);
    DF_CHECK(df_encode_i16(x, N, &q, c) == 0);
    df_decode_i16(c, N, &q, y);
    for (int i = 0; i < N; i++) DF_CHECK(fabs(y[i] - x[i]) <= q.scale[i % 3] * 0.5 * 1.001 + 1e-6);
    /* without cover the same data clamps and says so */
    df_quant_from_box(lo, hi, 0.5f, &q);
    DF_CHECK(df_encode_i16(x, N, &q, c) == 2);
    /* non-finite values clamp, never crash */
    float bad[3] = {NAN, INFINITY, -INFINITY};
    df_quant_unit(3, &q);
    DF_CHECK(df_encode_i16(bad, 3, &q, c) == 3);
}

static void test_output_rules(void)
{
    float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
    float n[6] = {0, 0, 1, 0.6f, 0.8f, 0};
    int16_t c[6];
    df_quant_t q;
    df_encode_output(DF_ENC_I16, "normals", 3, n, 6, lo, hi, c, &q);
    DF_CHECK(q.offset[0] == 0 && fabs(q.scale[0] - 1.0f / 32767) < 1e-12);
    DF_CHECK(c[2] == 32767 && c[3] == (int16_t)lrintf(0.6f * 32767));
    float p[6] = {0.5f, 0.5f, 0.5f, 0, 0, 0};
    df_encode_output(DF_ENC_I16, "positions", 3, p, 6, lo, hi, c, &q);
    DF_CHECK(q.offset[0] == 0.5f && c[0] == 0);
    float w[4] = {-2, 0, 1, 2};
    int16_t cw[4];
    df_encode_output(DF_ENC_I16, "weights", 1, w, 4, NULL, NULL, cw, &q);
    DF_CHECK(cw[0] == -32766 && cw[3] == 32766);
    df_encoding_t e;
    DF_CHECK(df_encoding_parse("float16", &e) == 0 && e == DF_ENC_F16);
    DF_CHECK(df_encoding_parse("INT16", &e) == 0 && e == DF_ENC_I16);
    DF_CHECK(df_encoding_parse("float8", &e) == -1);
    DF_CHECK(df_encoding_parse(NULL, &e) == -1);
    DF_CHECK(!strcmp(df_encoding_kserve(DF_ENC_F16), "FP16"));
    DF_CHECK(df_encoding_size(DF_ENC_F32) == 4 && df_encoding_size(DF_ENC_I16) == 2);
}

int main(void)
{
    DF_RUN(test_f16_against_reference);
    DF_RUN(test_i16_bound_and_cover);
    DF_RUN(test_output_rules);
    return dftest_exit();
}

/* test_mathx.c — core/mathx against independently written formulas:
 * Rodrigues' rotation formula (double), explicit matrix products, slerp
 * angle identities, dual-quaternion vs [R|t], polar decomposition of a
 * constructed R*P. Tolerances are float round-off (1e-5 absolute on unit
 * quantities) unless stated.
 */
#include "dftest.h"
#include "math/mathx.h"

#include <string.h>

static unsigned rs = 12345u;
static double urand(void) /* [0,1) */
{
    rs = rs * 1664525u + 1013904223u;
    return (rs >> 8) / 16777216.0;
}
static double srand1(void) { return 2.0 * urand() - 1.0; }

static void rand_axis(float a[3])
{
    double x, y, z, n;
    do {
        x = srand1();
        y = srand1();
        z = srand1();
        n = sqrt(x * x + y * y + z * z);
    } while (n < 0.1 || n > 1);
    a[0] = (float)(x / n);
    a[1] = (float)(y / n);
    a[2] = (float)(z / n);
}

/* Rodrigues: R = I + sin(th) K + (1 - cos(th)) K^2, K = [axis]x */
static void rodrigues(const float ax[3], double th, double R[9])
{
    double K[9] = {0, -ax[2], ax[1], ax[2], 0, -ax[0], -ax[1], ax[0], 0};
    double K2[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            K2[3 * i + j] = 0;
            for (int k = 0; k < 3; k++) K2[3 * i + j] += K[3 * i + k] * K[3 * k + j];
        }
    for (int i = 0; i < 9; i++)
        R[i] = (i % 4 == 0 ? 1.0 : 0.0) + sin(th) * K[i] + (1 - cos(th)) * K2[i];
}

static void test_quat_to_matrix_vs_rodrigues(void)
{
    for (int it = 0; it < 200; it++) {
        float ax[3], q[4], m[9];
        rand_axis(ax);
        double th = srand1() * 3.14159;
        df_quat_from_axis_angle(ax, (float)th, q);
        df_quat_to_m33(q, m);
        double R[9];
        rodrigues(ax, th, R);
        for (int i = 0; i < 9; i++) DF_CHECK_NEAR(m[i], R[i], 2e-6);
    }
}

static void test_quat_mul_composes(void)
{
    for (int it = 0; it < 100; it++) {
        float a1[3], a2[3], qa[4], qb[4], qab[4], ma[9], mb[9], mab[9], mm[9];
        rand_axis(a1);
        rand_axis(a2);
        df_quat_from_axis_angle(a1, (float)(3 * srand1()), qa);
        df_quat_from_axis_angle(a2, (float)(3 * srand1()), qb);
        df_quat_mul(qa, qb, qab);
        df_quat_to_m33(qa, ma);
        df_quat_to_m33(qb, mb);
        df_quat_to_m33(qab, mab);
        /* explicit product, written out here */
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                double s = 0;
                for (int k = 0; k < 3; k++) s += ma[3 * i + k] * mb[3 * k + j];
                mm[3 * i + j] = (float)s;
            }
        for (int i = 0; i < 9; i++) DF_CHECK_NEAR(mab[i], mm[i], 3e-6);
        /* rotate == matrix * v */
        float v[3] = {(float)srand1(), (float)srand1(), (float)srand1()}, rv[3];
        df_quat_rotate(qab, v, rv);
        for (int i = 0; i < 3; i++)
            DF_CHECK_NEAR(rv[i], mm[3 * i] * v[0] + mm[3 * i + 1] * v[1] +
                                     mm[3 * i + 2] * v[2], 3e-6);
    }
}

static void test_quat_from_matrix_roundtrip(void)
{
    for (int it = 0; it < 200; it++) {
        float ax[3], q[4], m[9], q2[4];
        rand_axis(ax);
        /* include angles near pi (the non-trace branches) */
        double th = it < 20 ? 3.14159 - 1e-3 * it : srand1() * 3.14159;
        df_quat_from_axis_angle(ax, (float)th, q);
        df_quat_to_m33(q, m);
        df_quat_from_m33(m, q2);
        double d = q[0] * q2[0] + q[1] * q2[1] + q[2] * q2[2] + q[3] * q2[3];
        DF_CHECK_NEAR(fabs(d), 1.0, 1e-6); /* same rotation: q2 = +-q */
    }
}

static void test_slerp(void)
{
    for (int it = 0; it < 100; it++) {
        float a1[3], a2[3], qa[4], qb[4], o[4], nb[4];
        rand_axis(a1);
        rand_axis(a2);
        df_quat_from_axis_angle(a1, (float)(3 * srand1()), qa);
        df_quat_from_axis_angle(a2, (float)(3 * srand1()), qb);
        double d = qa[0] * qb[0] + qa[1] * qb[1] + qa[2] * qb[2] + qa[3] * qb[3];
        if (d < 0) /* make qb the shortest-path representative */
            for (int i = 0; i < 4; i++) qb[i] = -qb[i];
        d = fabs(d);
        df_quat_slerp(qa, qb, 0.0f, o);
        for (int i = 0; i < 4; i++) DF_CHECK_NEAR(o[i], qa[i], 1e-6);
        df_quat_slerp(qa, qb, 1.0f, o);
        for (int i = 0; i < 4; i++) DF_CHECK_NEAR(o[i], qb[i], 1e-6);
        /* midpoint is half way in angle: dot(a, mid) = cos(theta/2) */
        double th = acos(d > 1 ? 1 : d);
        df_quat_slerp(qa, qb, 0.5f, o);
        double dm = qa[0] * o[0] + qa[1] * o[1] + qa[2] * o[2] + qa[3] * o[3];
        DF_CHECK_NEAR(dm, cos(th / 2), 2e-5);
        double dmb = qb[0] * o[0] + qb[1] * o[1] + qb[2] * o[2] + qb[3] * o[3];
        DF_CHECK_NEAR(dmb, cos(th / 2), 2e-5);
        /* t = 0.25: angle th/4 from a */
        df_quat_slerp(qa, qb, 0.25f, o);
        dm = qa[0] * o[0] + qa[1] * o[1] + qa[2] * o[2] + qa[3] * o[3];
        DF_CHECK_NEAR(dm, cos(th / 4), 2e-5);
        /* shortest path: -b is the same rotation, same result */
        for (int i = 0; i < 4; i++) nb[i] = -qb[i];
        float o2[4];
        df_quat_slerp(qa, nb, 0.5f, o2);
        df_quat_slerp(qa, qb, 0.5f, o);
        for (int i = 0; i < 4; i++) DF_CHECK_NEAR(o2[i], o[i], 1e-6);
    }
}

static void test_trs_and_affine(void)
{
    for (int it = 0; it < 100; it++) {
        float ax[3], q[4], R[9], t[3], s[3], m[12], mi[12], prod[12];
        rand_axis(ax);
        df_quat_from_axis_angle(ax, (float)(3 * srand1()), q);
        df_quat_to_m33(q, R);
        for (int i = 0; i < 3; i++) {
            t[i] = (float)(5 * srand1());
            s[i] = (float)(0.5 + 2 * urand());
        }
        df_m34_from_trs(t, q, s, m);
        /* T*R*S applied to p: R (s .* p) + t */
        float p[3] = {(float)srand1(), (float)srand1(), (float)srand1()}, o[3];
        df_m34_apply_point(m, p, o);
        for (int i = 0; i < 3; i++) {
            double e = t[i];
            for (int k = 0; k < 3; k++) e += R[3 * i + k] * s[k] * p[k];
            DF_CHECK_NEAR(o[i], e, 1e-5);
        }
        /* inverse: m * inv = identity */
        DF_CHECK(df_m34_inverse(m, mi) == 0);
        df_m34_mul(m, mi, prod);
        for (int i = 0; i < 12; i++)
            DF_CHECK_NEAR(prod[i], (i == 0 || i == 5 || i == 10) ? 1.0 : 0.0,
                          2e-5);
        /* composition: (a*b) p == a (b p) */
        float o1[3], o2[3], o3[3];
        df_m34_mul(m, mi, prod);
        float mm[12];
        df_m34_mul(mi, m, mm);
        df_m34_apply_point(mm, p, o1);
        for (int i = 0; i < 3; i++) DF_CHECK_NEAR(o1[i], p[i], 2e-5);
        df_m34_apply_point(m, p, o2);
        df_m34_apply_point(mi, o2, o3);
        for (int i = 0; i < 3; i++) DF_CHECK_NEAR(o3[i], p[i], 2e-5);
    }
    float sing[12] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, out[12];
    DF_CHECK(df_m34_inverse(sing, out) == -1);
    float m44[16] = {1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 1, 3, 0, 0, 0, 1}, m34[12];
    DF_CHECK(df_m44_to_m34(m44, 1e-6f, m34) == 0);
    DF_CHECK(m34[3] == 1 && m34[7] == 2 && m34[11] == 3);
    m44[12] = 0.5f;
    DF_CHECK(df_m44_to_m34(m44, 1e-6f, m34) == -1);
}

static void test_dual_quaternion(void)
{
    for (int it = 0; it < 100; it++) {
        float ax[3], q[4], R[9], t[3], d[8], m[12];
        rand_axis(ax);
        df_quat_from_axis_angle(ax, (float)(3 * srand1()), q);
        df_quat_to_m33(q, R);
        for (int i = 0; i < 3; i++) t[i] = (float)(5 * srand1());
        df_dq_from_qt(q, t, d);
        /* a unit DQ: real . dual = 0 */
        DF_CHECK_NEAR(d[0] * d[4] + d[1] * d[5] + d[2] * d[6] + d[3] * d[7], 0,
                      1e-6);
        /* scaling a DQ does not change the transform it represents */
        for (int i = 0; i < 8; i++) d[i] *= 2.5f;
        DF_CHECK(df_dq_to_m34(d, m) == 0);
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 3; j++) DF_CHECK_NEAR(m[4 * i + j], R[3 * i + j], 2e-6);
            DF_CHECK_NEAR(m[4 * i + 3], t[i], 1e-5);
        }
    }
    float z[8] = {0}, m[12];
    DF_CHECK(df_dq_to_m34(z, m) == -1);
}

static void test_polar(void)
{
    for (int it = 0; it < 50; it++) {
        /* M = R * P with P = U diag(s) U^T symmetric positive definite */
        float ax[3], q[4], R[9], U[9], P[9], Mx[9], Ro[9], Po[9];
        rand_axis(ax);
        df_quat_from_axis_angle(ax, (float)(3 * srand1()), q);
        df_quat_to_m33(q, R);
        rand_axis(ax);
        df_quat_from_axis_angle(ax, (float)(3 * srand1()), q);
        df_quat_to_m33(q, U);
        double s[3] = {0.3 + 2 * urand(), 0.3 + 2 * urand(), 0.3 + 2 * urand()};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                double v = 0;
                for (int k = 0; k < 3; k++) v += U[3 * i + k] * s[k] * U[3 * j + k];
                P[3 * i + j] = (float)v;
            }
        df_m33_mul(R, P, Mx);
        DF_CHECK(df_m33_polar(Mx, Ro, Po) == 0);
        for (int i = 0; i < 9; i++) {
            DF_CHECK_NEAR(Ro[i], R[i], 2e-5);
            DF_CHECK_NEAR(Po[i], P[i], 2e-5);
        }
    }
    float mirror[9] = {-1, 0, 0, 0, 1, 0, 0, 0, 1}, r[9], p[9];
    DF_CHECK(df_m33_polar(mirror, r, p) == -1);
    DF_CHECK(r[0] == 1 && p[0] == -1);
}

static void test_normalize_zero(void)
{
    float q[4] = {0, 0, 0, 0};
    DF_CHECK(df_quat_normalize(q) <= 1e-12f);
    DF_CHECK(q[0] == 0 && q[3] == 0); /* unchanged, no NaN */
    float q2[4] = {0, 0, 3, 4};
    DF_CHECK_NEAR(df_quat_normalize(q2), 5.0, 1e-6);
    DF_CHECK_NEAR(q2[2], 0.6, 1e-7);
}

int main(void)
{
    DF_RUN(test_quat_to_matrix_vs_rodrigues);
    DF_RUN(test_quat_mul_composes);
    DF_RUN(test_quat_from_matrix_roundtrip);
    DF_RUN(test_slerp);
    DF_RUN(test_trs_and_affine);
    DF_RUN(test_dual_quaternion);
    DF_RUN(test_polar);
    DF_RUN(test_normalize_zero);
    return dftest_exit();
}

/* mathx.c — quaternions, affine matrices, dual quaternions, polar
 * decomposition (see mathx.h for conventions).
 *
 * DESIGN
 * Straight-line float code: these run per joint per pose (tens to a few
 * thousand times per evaluation), never per vertex, so clarity wins over
 * SIMD. The only iterative routine, df_m33_polar, runs in double (Higham's
 * scaled Newton iteration) because it feeds dual-quaternion skinning of
 * scaled joints where float round-off would show as wobble.
 */
#include "math/mathx.h"

#include <math.h>
#include <string.h>

/* ----------------------------------------------------------- quaternions */

void df_quat_identity(float q[4])
{
    q[0] = q[1] = q[2] = 0.0f;
    q[3] = 1.0f;
}

float df_quat_normalize(float q[4])
{
    double n2 = (double)q[0] * q[0] + (double)q[1] * q[1] +
                (double)q[2] * q[2] + (double)q[3] * q[3];
    double n = sqrt(n2);
    if (n <= 1e-12) return (float)n;
    double inv = 1.0 / n;
    for (int i = 0; i < 4; i++) q[i] = (float)(q[i] * inv);
    return (float)n;
}

void df_quat_mul(const float a[4], const float b[4], float out[4])
{
    float x = a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1];
    float y = a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0];
    float z = a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3];
    float w = a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2];
    out[0] = x;
    out[1] = y;
    out[2] = z;
    out[3] = w;
}

void df_quat_conj(const float q[4], float out[4])
{
    out[0] = -q[0];
    out[1] = -q[1];
    out[2] = -q[2];
    out[3] = q[3];
}

void df_quat_rotate(const float q[4], const float v[3], float out[3])
{
    /* v' = v + 2w (u x v) + 2 u x (u x v), u = (x, y, z) */
    float ux = q[0], uy = q[1], uz = q[2], w = q[3];
    float cx = uy * v[2] - uz * v[1];
    float cy = uz * v[0] - ux * v[2];
    float cz = ux * v[1] - uy * v[0];
    float ccx = uy * cz - uz * cy;
    float ccy = uz * cx - ux * cz;
    float ccz = ux * cy - uy * cx;
    float ox = v[0] + 2.0f * (w * cx + ccx);
    float oy = v[1] + 2.0f * (w * cy + ccy);
    float oz = v[2] + 2.0f * (w * cz + ccz);
    out[0] = ox;
    out[1] = oy;
    out[2] = oz;
}

void df_quat_to_m33(const float q[4], float m[9])
{
    float x = q[0], y = q[1], z = q[2], w = q[3];
    float xx = x * x, yy = y * y, zz = z * z;
    float xy = x * y, xz = x * z, yz = y * z;
    float wx = w * x, wy = w * y, wz = w * z;
    m[0] = 1.0f - 2.0f * (yy + zz);
    m[1] = 2.0f * (xy - wz);
    m[2] = 2.0f * (xz + wy);
    m[3] = 2.0f * (xy + wz);
    m[4] = 1.0f - 2.0f * (xx + zz);
    m[5] = 2.0f * (yz - wx);
    m[6] = 2.0f * (xz - wy);
    m[7] = 2.0f * (yz + wx);
    m[8] = 1.0f - 2.0f * (xx + yy);
}

void df_quat_from_m33(const float m[9], float q[4])
{
    double m00 = m[0], m01 = m[1], m02 = m[2];
    double m10 = m[3], m11 = m[4], m12 = m[5];
    double m20 = m[6], m21 = m[7], m22 = m[8];
    double tr = m00 + m11 + m22, x, y, z, w, s;
    if (tr > 0.0) {
        s = sqrt(tr + 1.0) * 2.0;
        w = 0.25 * s;
        x = (m21 - m12) / s;
        y = (m02 - m20) / s;
        z = (m10 - m01) / s;
    } else if (m00 > m11 && m00 > m22) {
        s = sqrt(1.0 + m00 - m11 - m22) * 2.0;
        w = (m21 - m12) / s;
        x = 0.25 * s;
        y = (m01 + m10) / s;
        z = (m02 + m20) / s;
    } else if (m11 > m22) {
        s = sqrt(1.0 + m11 - m00 - m22) * 2.0;
        w = (m02 - m20) / s;
        x = (m01 + m10) / s;
        y = 0.25 * s;
        z = (m12 + m21) / s;
    } else {
        s = sqrt(1.0 + m22 - m00 - m11) * 2.0;
        w = (m10 - m01) / s;
        x = (m02 + m20) / s;
        y = (m12 + m21) / s;
        z = 0.25 * s;
    }
    if (w < 0) {
        x = -x;
        y = -y;
        z = -z;
        w = -w;
    }
    q[0] = (float)x;
    q[1] = (float)y;
    q[2] = (float)z;
    q[3] = (float)w;
    df_quat_normalize(q);
}

void df_quat_from_axis_angle(const float axis[3], float angle, float q[4])
{
    double n = sqrt((double)axis[0] * axis[0] + (double)axis[1] * axis[1] +
                    (double)axis[2] * axis[2]);
    if (n <= 1e-12) {
        df_quat_identity(q);
        return;
    }
    double s = sin(0.5 * angle) / n;
    q[0] = (float)(axis[0] * s);
    q[1] = (float)(axis[1] * s);
    q[2] = (float)(axis[2] * s);
    q[3] = (float)cos(0.5 * angle);
}

void df_quat_slerp(const float a[4], const float b[4], float t, float out[4])
{
    double d = (double)a[0] * b[0] + (double)a[1] * b[1] +
               (double)a[2] * b[2] + (double)a[3] * b[3];
    double sb = 1.0;
    if (d < 0) { /* shortest arc: q and -q are the same rotation */
        d = -d;
        sb = -1.0;
    }
    double wa, wb;
    if (d > 0.9995) {
        wa = 1.0 - t;
        wb = t;
    } else {
        double th = acos(d), s = sin(th);
        wa = sin((1.0 - t) * th) / s;
        wb = sin(t * th) / s;
    }
    wb *= sb;
    for (int i = 0; i < 4; i++) out[i] = (float)(wa * a[i] + wb * b[i]);
    df_quat_normalize(out);
}

/* -------------------------------------------------------------- matrices */

void df_m33_mul(const float a[9], const float b[9], float out[9])
{
    float r[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            r[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] +
                           a[i * 3 + 2] * b[6 + j];
    memcpy(out, r, sizeof r);
}

float df_m33_det(const float m[9])
{
    return m[0] * (m[4] * m[8] - m[5] * m[7]) -
           m[1] * (m[3] * m[8] - m[5] * m[6]) +
           m[2] * (m[3] * m[7] - m[4] * m[6]);
}

static double det3d(const double m[9])
{
    return m[0] * (m[4] * m[8] - m[5] * m[7]) -
           m[1] * (m[3] * m[8] - m[5] * m[6]) +
           m[2] * (m[3] * m[7] - m[4] * m[6]);
}

/* inverse transpose of m (cofactor matrix / det) */
static void inv_t3d(const double m[9], double det, double out[9])
{
    double c[9] = {
        m[4] * m[8] - m[5] * m[7], -(m[3] * m[8] - m[5] * m[6]),
        m[3] * m[7] - m[4] * m[6], -(m[1] * m[8] - m[2] * m[7]),
        m[0] * m[8] - m[2] * m[6], -(m[0] * m[7] - m[1] * m[6]),
        m[1] * m[5] - m[2] * m[4], -(m[0] * m[5] - m[2] * m[3]),
        m[0] * m[4] - m[1] * m[3]};
    for (int i = 0; i < 9; i++) out[i] = c[i] / det;
}

static double fro3d(const double m[9])
{
    double s = 0;
    for (int i = 0; i < 9; i++) s += m[i] * m[i];
    return sqrt(s);
}

int df_m33_polar(const float mf[9], float r[9], float p[9])
{
    double x[9], xit[9];
    for (int i = 0; i < 9; i++) x[i] = mf[i];
    double scale = fro3d(x);
    double det = det3d(x);
    if (!(scale > 0) || det <= 1e-9 * scale * scale * scale) {
        for (int i = 0; i < 9; i++) {
            r[i] = (i % 4 == 0) ? 1.0f : 0.0f;
            p[i] = mf[i];
        }
        return -1;
    }
    /* Higham: X <- (g X + X^-T / g) / 2, g = sqrt(|X^-1|_F / |X|_F) */
    for (int it = 0; it < 40; it++) {
        det = det3d(x);
        inv_t3d(x, det, xit);
        double g = sqrt(fro3d(xit) / fro3d(x));
        double diff = 0;
        for (int i = 0; i < 9; i++) {
            double nx = 0.5 * (g * x[i] + xit[i] / g);
            diff += (nx - x[i]) * (nx - x[i]);
            x[i] = nx;
        }
        if (diff < 1e-26) break;
    }
    /* P = R^T M, symmetrised */
    double pm[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            pm[i * 3 + j] = x[0 * 3 + i] * mf[0 * 3 + j] +
                            x[1 * 3 + i] * mf[1 * 3 + j] +
                            x[2 * 3 + i] * mf[2 * 3 + j];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            p[i * 3 + j] = (float)(0.5 * (pm[i * 3 + j] + pm[j * 3 + i]));
    for (int i = 0; i < 9; i++) r[i] = (float)x[i];
    return 0;
}

void df_m34_identity(float m[12])
{
    memset(m, 0, 12 * sizeof(float));
    m[0] = m[5] = m[10] = 1.0f;
}

void df_m34_mul(const float a[12], const float b[12], float out[12])
{
    float r[12];
    for (int i = 0; i < 3; i++) {
        const float *ar = a + 4 * i;
        for (int j = 0; j < 4; j++)
            r[4 * i + j] = ar[0] * b[j] + ar[1] * b[4 + j] + ar[2] * b[8 + j];
        r[4 * i + 3] += ar[3];
    }
    memcpy(out, r, sizeof r);
}

void df_m34_from_trs(const float t[3], const float q[4], const float s[3],
                     float out[12])
{
    float rm[9];
    df_quat_to_m33(q, rm);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) out[4 * i + j] = rm[3 * i + j] * s[j];
        out[4 * i + 3] = t[i];
    }
}

void df_m34_apply_point(const float m[12], const float p[3], float out[3])
{
    float r[3];
    for (int i = 0; i < 3; i++)
        r[i] = m[4 * i] * p[0] + m[4 * i + 1] * p[1] + m[4 * i + 2] * p[2] +
               m[4 * i + 3];
    memcpy(out, r, sizeof r);
}

void df_m34_apply_dir(const float m[12], const float d[3], float out[3])
{
    float r[3];
    for (int i = 0; i < 3; i++)
        r[i] = m[4 * i] * d[0] + m[4 * i + 1] * d[1] + m[4 * i + 2] * d[2];
    memcpy(out, r, sizeof r);
}

int df_m34_inverse(const float m[12], float out[12])
{
    double a[9], it[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) a[3 * i + j] = m[4 * i + j];
    double det = det3d(a);
    double sc = fro3d(a);
    if (!(fabs(det) > 1e-12 * sc * sc * sc) || !(sc > 0)) return -1;
    inv_t3d(a, det, it); /* it = A^-T, so A^-1[i][j] = it[j][i] */
    double r[12];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) r[4 * i + j] = it[3 * j + i];
        r[4 * i + 3] = -(r[4 * i] * m[3] + r[4 * i + 1] * m[7] +
                         r[4 * i + 2] * m[11]);
    }
    for (int i = 0; i < 12; i++) out[i] = (float)r[i];
    return 0;
}

void df_m34_linear(const float m[12], float out[9])
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) out[3 * i + j] = m[4 * i + j];
}

int df_m44_to_m34(const float m[16], float tol, float out[12])
{
    memcpy(out, m, 12 * sizeof(float));
    if (fabsf(m[12]) > tol || fabsf(m[13]) > tol || fabsf(m[14]) > tol ||
        fabsf(m[15] - 1.0f) > tol)
        return -1;
    return 0;
}

void df_m34_to_m44(const float m[12], float out[16])
{
    memcpy(out, m, 12 * sizeof(float));
    out[12] = out[13] = out[14] = 0.0f;
    out[15] = 1.0f;
}

/* ------------------------------------------------------- dual quaternions */

void df_dq_from_qt(const float q[4], const float t[3], float d[8])
{
    float tq[4] = {t[0], t[1], t[2], 0.0f}, du[4];
    df_quat_mul(tq, q, du);
    for (int i = 0; i < 4; i++) {
        d[i] = q[i];
        d[4 + i] = 0.5f * du[i];
    }
}

int df_dq_to_m34(const float d[8], float out[12])
{
    double n2 = (double)d[0] * d[0] + (double)d[1] * d[1] +
                (double)d[2] * d[2] + (double)d[3] * d[3];
    if (!(n2 > 1e-24)) {
        df_m34_identity(out);
        return -1;
    }
    float inv = (float)(1.0 / sqrt(n2));
    float r[4], du[4], rc[4], t[4], rm[9];
    for (int i = 0; i < 4; i++) {
        r[i] = d[i] * inv;
        du[i] = d[4 + i] * inv;
    }
    /* t = 2 * dual * conj(real) (the real part's scale cancels above) */
    df_quat_conj(r, rc);
    df_quat_mul(du, rc, t);
    df_quat_to_m33(r, rm);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) out[4 * i + j] = rm[3 * i + j];
        out[4 * i + 3] = 2.0f * t[i];
    }
    return 0;
}

/* mathx.h — small 3D math for the rigged kind: quaternions, affine
 * matrices, TRS composition, dual quaternions, polar decomposition.
 *
 * DESIGN
 * Plain float arrays, so tensors from model files and network inputs can be
 * passed without conversion:
 *   - quaternion  float q[4] = x, y, z, w (w is the scalar part);
 *   - m33         float m[9], row-major;
 *   - m34         float m[12], row-major 3x4 affine [R|t] (the implicit
 *                 fourth row is 0 0 0 1) — the layout of `joint_matrices`;
 *   - m44         float m[16], row-major;
 *   - dual quat   float d[8] = real (x,y,z,w), dual (x,y,z,w).
 * Everything is pure (no state, no allocation); output arguments may not
 * alias inputs unless a comment says so. Functions that can fail on data
 * (a zero quaternion, a singular matrix) return a status and never produce
 * NaN silently. Names are df_<type>_<verb> (quat, m33, m34, m44, dq).
 */
#ifndef DF_MATHX_H
#define DF_MATHX_H

#include <stdint.h>

/* ----------------------------------------------------------- quaternions */
void df_quat_identity(float q[4] /* OUT */);
/* Normalises in place; returns the norm before normalisation. A norm
 * <= 1e-12 leaves q unchanged (callers treat that as an error). */
float df_quat_normalize(float q[4]);
void df_quat_mul(const float a[4], const float b[4], float out[4] /* OUT */);
void df_quat_conj(const float q[4], float out[4] /* OUT, may alias q */);
/* Rotate v by unit quaternion q. out may alias v. */
void df_quat_rotate(const float q[4], const float v[3], float out[3]);
/* Unit quaternion -> rotation matrix (row-major 3x3). */
void df_quat_to_m33(const float q[4], float m[9] /* OUT */);
/* Rotation matrix -> unit quaternion (Shepperd's method, w >= 0). */
void df_quat_from_m33(const float m[9], float q[4] /* OUT */);
void df_quat_from_axis_angle(const float axis[3], float angle,
                             float q[4] /* OUT */);
/* Spherical interpolation along the shortest arc (unit inputs); falls back
 * to normalised lerp when the quaternions are nearly equal. */
void df_quat_slerp(const float a[4], const float b[4], float t,
                   float out[4] /* OUT */);

/* -------------------------------------------------------------- matrices */
void df_m33_mul(const float a[9], const float b[9], float out[9] /* OUT */);
float df_m33_det(const float m[9]);
/* Polar decomposition m = R * P (R rotation, P symmetric). Returns 0, or -1
 * when m is singular/mirroring (then R = identity, P = m). */
int df_m33_polar(const float m[9], float r[9] /* OUT */, float p[9] /* OUT */);

void df_m34_identity(float m[12] /* OUT */);
/* out = a * b (affine composition: b applied first). */
void df_m34_mul(const float a[12], const float b[12], float out[12] /* OUT */);
/* T(t) * R(q) * S(s); q must be unit. */
void df_m34_from_trs(const float t[3], const float q[4], const float s[3],
                     float out[12] /* OUT */);
void df_m34_apply_point(const float m[12], const float p[3],
                        float out[3] /* OUT */);
void df_m34_apply_dir(const float m[12], const float d[3],
                      float out[3] /* OUT */);
/* Affine inverse; returns -1 when the 3x3 part is singular. */
int df_m34_inverse(const float m[12], float out[12] /* OUT */);
void df_m34_linear(const float m[12], float out[9] /* OUT: 3x3 part */);

/* 4x4 row-major <-> 3x4. df_m44_to_m34 returns -1 when the last row is not
 * (0,0,0,1) within tol (the affine part is still copied). */
int df_m44_to_m34(const float m[16], float tol, float out[12] /* OUT */);
void df_m34_to_m44(const float m[12], float out[16] /* OUT */);

/* ------------------------------------------------------- dual quaternions */
/* Rigid transform (unit q, then translate by t) -> unit dual quaternion. */
void df_dq_from_qt(const float q[4], const float t[3], float d[8] /* OUT */);
/* Normalises d (by the real part's norm) and converts it to [R|t]. Returns
 * -1 when the real part is ~zero (then out is identity). */
int df_dq_to_m34(const float d[8], float out[12] /* OUT */);

#endif

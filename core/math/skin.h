/* skin.h — skinning kernels of the rigged kind (core-internal).
 *
 * DESIGN
 * Influences are re-laid out once at load (df__skin_build) into blocks of
 * DF__SKIN_BLOCK vertices. Within a block every vertex has the same number
 * of slots kb (the largest count of non-zero weights in the block), sorted
 * by decreasing weight, padded with (joint 0, weight 0); entries are
 * vertex-major ([vertex][slot]) so one vertex's influences are one short
 * contiguous run. Zero weights cost nothing and blocks adapt to local
 * influence counts (a mesh whose hands use 4 joints and torso 2 pays 2 on
 * the torso).
 *
 * Per-joint skinning matrices are passed in the "skin matrix" layout below:
 * 16 floats, column-major 3x4 with a zero fourth lane, 32-byte aligned:
 *     c0 = (m00 m10 m20 0)  c1 = (m01 m11 m21 0)
 *     c2 = (m02 m12 m22 0)  c3 = (tx  ty  tz  0)
 * so a weighted sum of matrices is two 8-wide FMAs per influence and the
 * point transform is c0*x + c1*y + c2*z + c3 with broadcasts.
 *
 * Input position/normal arrays are [N,3] floats and MUST have one more
 * readable float after the last element (the kernels load 4 floats per
 * vertex); outputs are exactly [N,3].
 */
#ifndef DF_SKIN_H
#define DF_SKIN_H

#include "df.h"
#include <stdint.h>

#define DF__SKIN_BLOCK 8

typedef struct df__skin {
    int64_t n;        /* vertices */
    int64_t nblocks;  /* ceil(n / DF__SKIN_BLOCK) */
    int kmax;         /* largest slot count of any block */
    uint64_t *off;    /* [nblocks] first entry of each block */
    uint8_t *kb;      /* [nblocks] slots per vertex in the block */
    int32_t *joints;  /* entries, vertex-major within a block */
    float *weights;   /* entries */
} df__skin_t;

/* Build the layout from [n,k] joints/weights (already validated: joints in
 * [0,J), weights >= 0, rows sum to 1). s is filled; free with
 * df__skin_free. Returns DF_OK or DF_ENOMEM. */
int df__skin_build(df__skin_t *s /* OUT */, int64_t n, int k,
                   const int32_t *joints, const float *weights);
void df__skin_free(df__skin_t *s);

/* Convert a row-major 3x4 matrix to the skin-matrix layout. */
void df__skin_pack(const float m34[12], float out[16] /* OUT */);

/* Linear blend skinning. mats: [J][16] skin-matrix layout, 32-byte aligned.
 * nrm/out_nrm may be NULL (positions only). Uses AVX2/FMA when compiled
 * for it (-march=native), else the scalar loop. */
void df__skin_lbs(const df__skin_t *s, const float *mats, const float *pos,
                  const float *nrm, float *out_pos, float *out_nrm);
/* The portable scalar version (also the fallback). */
void df__skin_lbs_scalar(const df__skin_t *s, const float *mats,
                         const float *pos, const float *nrm, float *out_pos,
                         float *out_nrm);

/* A specific LBS implementation (tests and benchmarks compare them).
 * Returns -1 when impl was not compiled in (needs -mavx2 -mfma /
 * -mavx512f). df__skin_lbs picks the widest compiled one. */
enum { DF__SKIN_SCALAR = 0, DF__SKIN_AVX2 = 1, DF__SKIN_AVX512 = 2 };
int df__skin_lbs_impl(int impl, const df__skin_t *s, const float *mats,
                      const float *pos, const float *nrm, float *out_pos,
                      float *out_nrm);
const char *df__skin_impl_name(int impl);

/* Dual quaternion skinning. dq: [J][8] unit dual quaternions of the rigid
 * part of each skin matrix. lin: [J][16] skin-matrix layout holding the
 * scale/shear part as an affine map (scale about the joint's bind position,
 * so its translation column is c - P c), blended linearly and applied first;
 * NULL when every joint is rigid. Normals are transformed by the blended
 * scale/shear part, then the blended rotation, then normalised. */
void df__skin_dqs(const df__skin_t *s, const float *dq, const float *lin,
                  const float *pos, const float *nrm, float *out_pos,
                  float *out_nrm);

/* A specific DQS implementation (scalar, or AVX2 = 8 vertices per register
 * after the blend); -1 when not compiled in. df__skin_dqs picks the widest. */
int df__skin_dqs_impl(int impl, const df__skin_t *s, const float *dq,
                      const float *lin, const float *pos, const float *nrm,
                      float *out_pos, float *out_nrm);

#endif

/* garment_internal.h — the loaded `garment` model (core-internal), shared by
 * kind_garment.c (load, validation, clips) and garment_eval.c (evaluation).
 *
 * Everything is immutable after load and owned by the impl. The body is a
 * real `rigged` model built from the file's own tensors (the rigged kind's
 * load validates it); its skinning and FK are the rigged kind's. Arrays
 * that the LBS kernel reads are padded by 4 floats (skin.h).
 */
#ifndef DF_GARMENT_INTERNAL_H
#define DF_GARMENT_INTERNAL_H

#include "base/model_internal.h"
#include "math/skin.h"
#include "rigged/rigged_internal.h"

#define DF_GARMENT_MAX_EXAMPLES 4096
#define DF_GARMENT_MAX_REGIONS 64
#define DF_GARMENT_MAX_COMPONENTS 64
#define DF_GARMENT_MAX_TOP 32

typedef struct df__garment {
    df_model_t *body;        /* the body as a `rigged` model (owned reference) */
    const df__rig_t *rig;    /* body->impl */
    int64_t G, T, K, R, J, S, P, A, k, F, C, Nb;
    /* G garment vertices, T triangles, K influences, R regions, J joints,
     * S shapes, P pose examples, A anchors, k PCA components, F features
     * (S or 2S), C penetration candidates per vertex, Nb body vertices */
    /* Garment vertices are stored sorted by region (dominant region, then
     * the next one), so each region's vertices fill few runs of skin
     * blocks; perm maps a stored index to the file's, the outputs are
     * scattered back through it. */
    int32_t *perm;           /* [G] stored vertex -> file vertex */
    float *rest;             /* [gs] template garment, stored order */
    uint32_t *tris;          /* [T,3] stored order */
    int64_t nblocks;         /* skin blocks of DF__SKIN_BLOCK vertices */
    int64_t *run_off;        /* [R+1] region r's runs: run_off[r]..run_off[r+1] */
    int64_t *runs;           /* [.., 2] block ranges [b0, b1) */
    df__skin_t skin;         /* the garment's binding (blocked layout) */
    float *regions_t;        /* [R,G] region weights, region-major */
    float *Q;                /* [R,3J] Eq. 7 weights per region and joint DOF */
    int32_t *cand;           /* [G,C] body vertices for penetration */
    int64_t *nb_off;         /* [Nb+1] body vertex neighbours (CSR, from the triangles) */
    int32_t *nb;             /* [..] */
    const uint32_t *btris;   /* body triangles (the body model's mesh) */
    int64_t bT;
    float *clear;            /* [G] initial clearance (m, along the body normal) */
    size_t gs;               /* stride of one padded garment array (floats) */
    float *pose_rv;          /* [P,3J] rotation vectors of the pose examples' joints */
    float *pose_ex;          /* [P,gs] examples on the template body */
    float *pose_inv;         /* [P,J,12] S(theta_p, beta0)^-1 */
    float *anc_rv;           /* [A,3J] */
    float *anc_rot;          /* [A,J,4] unit */
    float *anc_base;         /* [A,gs] f(beta0, theta_s) */
    float *anc_inv0;         /* [A,J,12] S(theta_s, beta0)^-1 */
    float *basis;            /* [A,k,3G] column-major 3G x k per anchor */
    float *map;              /* [A,k,F] */
    int quadratic;           /* features (beta, beta^2) instead of beta */
    float damping, margin, power;
    int top;
    int shape_model, resolve;
    /* our inputs / outputs (-1: absent) */
    int in_shape, in_rot, in_state;
    int out_pos, out_nrm, out_bpos, out_bnrm, out_state;
    /* the body's */
    int b_in_shape, b_in_rot, b_out_pos, b_out_nrm;
    int64_t nstate;          /* R * (P + A) */
} df__garment_t;

size_t df__garment_scratch_bytes(const df_model_t *m, int n);
int df__garment_evaluate(const df_model_t *m, const df_batch_t *b, void *scratch,
                         df_error_t *err);
/* Rotation vector (axis * angle, angle in [0, pi]) of each of n quaternions
 * x,y,z,w: the joint-angle DOFs of the distance of Eq. 7. */
void df__garment_rotvecs(const float *q, int64_t n, float *rv);

#endif

/* rigged_internal.h — the loaded `rigged` model (core-internal), shared by
 * kind_rigged.c (load, validation, clips) and rigged_eval.c (evaluation).
 *
 * Everything here is immutable after load and owned by the impl (freed by
 * the kind's destroy). Arrays are copies of the file's tensors, validated
 * and normalised (unit quaternions, weights summing to exactly 1 in float
 * accumulation), plus the layouts evaluation wants (padded rest arrays,
 * blocked influences).
 */
#ifndef DF_RIGGED_INTERNAL_H
#define DF_RIGGED_INTERNAL_H

#include "base/model_internal.h"
#include "math/pgemm.h"
#include "math/skin.h"

typedef struct df__rig_clip {
    char *name;
    int64_t F;
    float *times;  /* [F] increasing */
    float *rot;    /* [F,J,4] unit, or NULL */
    float *tr;     /* [F,J,3] or NULL */
    float *w;      /* [F,M] or NULL */
    float *mat;    /* [F,J,12] or NULL */
} df__rig_clip_t;

typedef struct df__rig {
    int64_t N, T, M, J, K;
    int64_t S;        /* shape blend shapes (0: none) */
    float *rest;      /* [3N + 4] (padded: kernels read 4 floats/vertex) */
    float *rest_nrm;  /* [3N + 4] unit (or zero for isolated vertices) */
    float *deltas;    /* [M+S+1,N,3] = column-major 3N x (M+S+1): the morph
                       * deltas, the shape deltas, then the rest positions
                       * (weight 1), so one GEMM with beta = 0 gives
                       * rest + sum w_m d_m + sum beta_s D_s.
                       * DF_PGEMM builds: packed in panels of
                       * DF_PGEMM_PANEL rows instead (math/pgemm.h) */
    float *ndeltas;   /* the same layout for the normals: morph_normal_deltas,
                       * shape_normal_deltas (zero columns for the one the
                       * file lacks), then the rest normals; NULL when the
                       * file has neither (morphs and shapes then keep the
                       * rest normals) */
    float *shape_t;   /* [S,J,3] joint_rest_translation_shapedirs, or NULL */
    float *shape_c;   /* [S,J,3] the joint's rest origin shift per unit
                       * beta_s in the joint's own rest frame (load):
                       * shaped inverse bind = T(-sum beta_s c_s) * ibm */
    int32_t *parents; /* [J] */
    float *rest_t;    /* [J,3] */
    float *rest_q;    /* [J,4] unit */
    float *rest_s;    /* [J,3] */
    float *ibm;       /* [J,12] affine part of inverse_bind_matrices */
    df__skin_t skin;
    int dqs;          /* default skinning: 1 = DQS, 0 = LBS */
    /* input indices (-1 when the model has no such input) */
    int in_w, in_shape, in_rot, in_tr, in_mat;
    size_t n_clips;
    df__rig_clip_t *clips;
} df__rig_t;

/* rigged_eval.c */
size_t df__rig_scratch_bytes(const df_model_t *m, int n);
int df__rig_evaluate(const df_model_t *m, const df_batch_t *b, void *scratch,
                     df_error_t *err);
/* Skin matrices of one pose: S_j = world_j * ibm_j, row-major 3x4 [J,12].
 * rot/tr/mat as the inputs (NULL = rest); world: [J,12] workspace. */
void df__rig_skin_matrices(const df__rig_t *r, const float *rot,
                           const float *tr, const float *mat, float *world,
                           float *skin);
/* The same for body shape beta [S] (NULL = 0): each joint's local
 * translation (rest or tr) moves by sum beta_s shape_t[s], and the inverse
 * bind follows the shaped rest skeleton, S_j = world_j T(-c_j(beta)) ibm_j,
 * so the shaped rest pose skins to the shaped rest mesh exactly. */
void df__rig_skin_matrices_shaped(const df__rig_t *r, const float *rot,
                                  const float *tr, const float *mat,
                                  const float *beta, float *world,
                                  float *skin);

#endif

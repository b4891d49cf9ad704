/* rigapprox.h — shared pieces of the rigapprox pipeline (Song et al. 2020):
 * the dataset file, features (Eq. 9), the linear part T_i (Eq. 11) and the
 * nonlinear displacement (Eq. 14). Used by the trainer (tools/deform), the
 * model kind (core/kind_rigapprox.c) and the tests.
 *
 * DESIGN
 * A dataset is a safetensors file (metadata kind="rigdata", layout in
 * docs/rigapprox.md). df_rigdata_open validates every tensor against the
 * others (shapes, index ranges, weight sums, finiteness, ranges lo<=hi) and
 * names the first thing wrong; arrays of an opened dataset are borrowed from
 * the file. Joint matrices are world 3x4 row-major, like the `rigged` kind's
 * `joint_matrices` input; T_i = sum_k w_ik world_k inverse_bind_k.
 */
#ifndef DF_RIGAPPROX_H
#define DF_RIGAPPROX_H

#include "df.h"

#define DF_RIGDATA_MAX_K 8

typedef struct df_rigdata {
    int64_t nv, nt, nj, nc, k, n;
    const float *rest;         /* [V,3] */
    const uint32_t *tris;      /* [T,3] */
    char **control_names;      /* [C] owned */
    const float *ctrl_range;   /* [C,3] lo, hi, default */
    char **joint_names;        /* [J] owned */
    const float *invbind;      /* [J,12] */
    const int32_t *skin_j;     /* [V,K] */
    const float *skin_w;       /* [V,K] */
    const float *controls;     /* [N,C] */
    const float *joints;       /* [N,J,12] */
    const float *positions;    /* [N,V,3] */
    const float *influence;    /* [C+J,V] or NULL */
    float height;              /* largest rest bbox extent */
    df_st_t *st;               /* owned when opened from a file */
} df_rigdata_t;

/* All arrays borrowed. */
int df_rigdata_write(const df_rigdata_t *d, const char *path, df_error_t *err);
/* Open and validate. *d filled; close with df_rigdata_close. */
int df_rigdata_open(const char *path, df_rigdata_t *d, df_error_t *err);
void df_rigdata_close(df_rigdata_t *d);

/* Linear part for B poses: T [B,V,12] (3x4) from world [B,J,12]. */
void df_rigapprox_linear(int64_t nv, int64_t nj, int k, const float *invbind,
                         const int32_t *skin_j, const float *skin_w, int B,
                         const float *world, float *T);
/* out = T (v + d) for every vertex of one pose (d may be NULL). */
void df_rigapprox_apply(int64_t nv, const float *T, const float *rest,
                        const float *d, float *out);
/* v_nl = T^-1 p - v (Eq. 14) for one pose. Returns 0, or -1 when some T_i
 * is singular (that vertex gets 0). */
int df_rigapprox_nonlinear(int64_t nv, const float *T, const float *rest,
                           const float *p, float *vnl);

#endif

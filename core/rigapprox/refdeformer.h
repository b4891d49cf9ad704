/* refdeformer.h — the C reference deformer stack ("the rig to approximate").
 *
 * DESIGN
 * A df_refrig_t is a black-box rig in the sense of Song et al. 2020: numeric
 * controls + joint world matrices in, deformed vertex positions out. Its
 * stack, evaluated per pose:
 *   1. corrective displacements in bind space:
 *        sum_k c_k S_k                       (control shapes)
 *      + sum_(a,b) c_a c_b S_ab              (combination / product shapes)
 *      + sum_j g(theta_j) S_j                (joint correctives, theta_j the
 *                                             angle of joint j relative to its
 *                                             parent, g quadratic, clamped)
 *   2. linear blend skinning with world_j * inverse_bind_j;
 *   3. delta mush (Mancewicz et al. 2014): uniform Laplacian smoothing of
 *      the skinned mesh plus the rest-pose detail deltas re-applied in
 *      per-vertex frames (normal + tangent) of the smoothed deformed mesh.
 * Everything the rig reads is in (controls, world matrices), so the rig is a
 * function of exactly what a rigapprox model receives. Corrective shapes are
 * procedural (seeded): smooth bulges of a few % of the character height
 * around chosen vertices; docs/rigapprox.md lists them.
 *
 * Sources: a `rigged` model file written by `deform import` (its skeleton,
 * skin weights and clips), or df_refrig_tiny(), a small skinned tube used by
 * the tests. Pose sampling follows the paper: each control independently from
 * a truncated Gaussian inside its range; joints get a truncated-Gaussian
 * rotation (axis-angle components) on top of their rest rotation.
 */
#ifndef DF_REFDEFORMER_H
#define DF_REFDEFORMER_H

#include "df.h"
#include "math/nn.h"

typedef struct df_refrig_opts {
    int n_controls;          /* numeric controls (default 8) */
    int n_combos;            /* product shapes over control pairs (default 4) */
    int n_joint_correctives; /* default 6 */
    float amplitude;         /* corrective size, fraction of height (0.04) */
    float radius;            /* bulge radius, fraction of height (0.12) */
    int mush_iters;          /* delta-mush smoothing iterations (default 6) */
    float mush_lambda;       /* smoothing step (default 0.5) */
    float joint_sigma;       /* rad, per axis-angle component (0.35) */
    float joint_max;         /* rad, truncation (0.8) */
    uint64_t seed;           /* corrective shapes (default 1) */
} df_refrig_opts_t;

void df_refrig_opts_default(df_refrig_opts_t *o /* OUT */);

typedef struct df_refrig_clip {
    char name[DF_NAME_MAX];
    int64_t n_frames;
    float *rotations;    /* [F,J,4] local xyzw (owned; rest when absent) */
    float *translations; /* [F,J,3] local (owned) */
} df_refrig_clip_t;

typedef struct df_refrig {
    int64_t nv, nt, nj, nc, k;
    float *rest;          /* [V,3] bind space */
    uint32_t *tris;       /* [T,3] */
    char **joint_names;   /* [J] */
    int32_t *parents;     /* [J] */
    float *rest_t, *rest_r, *rest_s; /* [J,3] [J,4] [J,3] local */
    float *invbind;       /* [J,12] 3x4 row-major */
    float *rest_world;    /* [J,12] FK of the rest pose */
    int32_t *skin_j;      /* [V,K] */
    float *skin_w;        /* [V,K] */
    char **control_names; /* [C] */
    float *ctrl_range;    /* [C,3]: lo, hi, default */
    float *shapes;        /* [C,V,3] */
    int n_combos;
    int32_t *combo_ab;    /* [n_combos,2] */
    float *combo_shapes;  /* [n_combos,V,3] */
    int n_jc;
    int32_t *jc_joint;    /* [n_jc] */
    float *jc_shapes;     /* [n_jc,V,3] */
    int mush_iters;
    float mush_lambda;
    int32_t *adj_p, *adj_i; /* vertex adjacency CSR */
    float *mush_delta;    /* [V,3] rest detail in local frames */
    int32_t *mush_tan;    /* [V] neighbour defining each frame's tangent */
    float height;         /* largest bbox extent of the rest mesh */
    float joint_sigma, joint_max;
    size_t n_clips;
    df_refrig_clip_t *clips;
} df_refrig_t;

/* Rig from a `rigged` model file (skeleton + skin required). *out new:
 * df_refrig_free. */
int df_refrig_from_rigged(const char *path, const df_refrig_opts_t *o,
                          df_refrig_t **out, df_error_t *err);
/* A skinned tube (rings x segments vertices, 3 joints) for tests. */
int df_refrig_tiny(int rings, int segments, const df_refrig_opts_t *o,
                   df_refrig_t **out, df_error_t *err);
void df_refrig_free(df_refrig_t **r);

/* Floats of work memory df_refrig_deform needs. */
size_t df_refrig_work_floats(const df_refrig_t *r);
/* Random pose: controls [C], world matrices [J,12]. */
void df_refrig_sample(const df_refrig_t *r, df_rng_t *rng, float *controls,
                      float *world);
/* World matrices [J,12] from local rotations [J,4] / translations [J,3]
 * (either may be NULL: rest). */
void df_refrig_fk(const df_refrig_t *r, const float *rot, const float *trans,
                  float *world);
/* Evaluate the stack. out [V,3]; work: df_refrig_work_floats floats. */
void df_refrig_deform(const df_refrig_t *r, const float *controls,
                      const float *world, float *out, float *work);

/* Control influence per vertex (paper 3.2): around n_poses random poses,
 * perturb each control (by half its range) and each joint (0.5 rad about
 * each axis) and record the largest displacement of each vertex.
 * infl [(C+J), V] (OUT). */
int df_refrig_influence(const df_refrig_t *r, int n_poses, uint64_t seed,
                        float *infl, df_error_t *err);

/* Write a dataset (docs/rigapprox.md) with n random poses, or with the
 * frames of the rig's clips when clips != 0 (controls then follow smooth
 * periodic curves). influence_poses > 0 adds the `influence` tensor. */
int df_refrig_write_dataset(const df_refrig_t *r, int n, uint64_t seed,
                            int clips, int influence_poses, const char *path,
                            df_error_t *err);

#endif

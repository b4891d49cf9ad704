/* decompose.h — skinning decomposition of animated meshes (core API).
 *
 * Given a mesh sequence with fixed topology and no skeleton (frames [F,N,3]),
 * fit B proxy bones: per-vertex convex sparse weights w (≤ K influences, w ≥ 0,
 * Σw = 1) and one 3x4 transform per bone and frame — rigid (default), a
 * rotation with a uniform scale (trs) or affine — so that linear blend
 * skinning of the rest positions reproduces every frame:
 *
 *     v'_i^p = Σ_j w_ij T_j^p [v_i; 1]
 *
 * This is the fitting half of "Temporal Parameter-free Deep Skinning of
 * Animated Meshes" (§3). The
 * paper's network initialisation is replaced by clustering of vertex
 * trajectories (clusters grown by splitting the worst-fitted one, refined
 * by assigning each vertex to the cluster whose per-frame rigid transforms
 * fit it best); see docs/decompose.md.
 *
 * DESIGN
 *  - Welding: vertices whose rest positions coincide (within weld_tol times
 *    the rest bbox diagonal, found with a spatial hash) form one welded vertex
 *    for every neighbourhood the method uses: the clustering runs on welded
 *    vertices and the candidate bones of a vertex come from the clusters of
 *    its welded 1-ring. Weights are still solved per input vertex (a split
 *    vertex keeps its own trajectory), so the output has the input topology.
 *  - Weights step: per vertex, a small QP (active set with the sum-to-one
 *    equality, ≤ K free variables) over candidate bones: its welded
 *    neighbourhood's clusters, its current influences and the bones that fit
 *    it best alone. The per-vertex Gram matrix is ṽᵀ M_jk ṽ with
 *    M_jk = Σ_p T_jᵀ T_k precomputed per bone pair, and the right-hand side
 *    comes from one GEMM of the trajectories with all transforms.
 *  - Transforms step: the normal matrix AᵀA (4B x 4B) is the same for every
 *    frame. Affine: one Cholesky factorisation (LAPACK) serves the 3F
 *    right-hand sides. Rigid / trs: per frame, block coordinate descent over
 *    the bones, each an exact weighted Procrustes step (Horn's rotation)
 *    whose moments are blocks of AᵀA and XᵀA.
 *  - Skeleton (decompose_skeleton.c): joints between neighbouring clusters,
 *    a spanning tree, joint frames, local TRS animation; exported as a
 *    `rigged` model (and by the tool as .glb).
 *  - Core stays thread-free: the caller may pass a parallel_for callback
 *    (the offline tool runs it on pthreads); bodies index a per-worker
 *    scratch by the worker id they receive.
 *  - Internally everything is double, in coordinates centred on the rest
 *    bbox and scaled by its diagonal; results are mapped back.
 */
#ifndef DF_DECOMPOSE_H
#define DF_DECOMPOSE_H

#include "df.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DF_DECOMPOSE_MAX_BONES 256
#define DF_DECOMPOSE_MAX_INFLUENCES 8

/* What a bone's per-frame transform T = [L | t] may be. */
typedef enum df_decompose_transforms {
    DF_DECOMPOSE_RIGID = 0,  /* L a rotation (det +1): a skeleton any engine plays */
    DF_DECOMPOSE_TRS = 1,    /* L = s R, one positive scale per bone and frame */
    DF_DECOMPOSE_AFFINE = 2  /* any 3x3 L (shear, reflection): not a skeleton */
} df_decompose_transforms_t;

/* How the bones start (docs/decompose.md, "Network initialisation"). */
enum { DF_DECOMPOSE_INIT_CLUSTER = 0, DF_DECOMPOSE_INIT_NETWORK = 1 };

/* "rigid" / "trs" / "affine" -> the enum, -1 for anything else. */
int df_decompose_transforms_parse(const char *name);
const char *df_decompose_transforms_name(int transforms);

/* Runs body(arg, i0, i1, worker) over a partition of [0, n) into ranges,
 * with 0 <= worker < n_workers; returns when all ranges are done. */
typedef void (*df_range_body_cb)(void *arg, int64_t i0, int64_t i1,
                                 int worker);
typedef void (*df_parallel_for_cb)(void *user, int64_t n,
                                   df_range_body_cb body, void *arg);

/* One line of progress per iteration. */
typedef struct df_decompose_progress {
    int iteration;        /* 0 = after initialisation */
    int max_iterations;
    const char *step;     /* "init" or "iteration" */
    double erms;          /* RMS error, fraction of the rest bbox diagonal */
    double seconds;       /* elapsed since df_decompose_fit started */
    double eta_seconds;   /* estimate for the remaining iterations */
    double weight_seconds, transform_seconds; /* time of this iteration's steps */
} df_decompose_progress_t;
typedef void (*df_decompose_progress_cb)(void *user,
                                         const df_decompose_progress_t *p);

typedef struct df_decompose_opts {
    int n_bones;            /* B >= 1 (required) */
    int transforms;         /* df_decompose_transforms_t; default RIGID */
    int transform_sweeps;   /* rigid/trs: passes over the bones per
                               transforms step (block coordinate descent,
                               each bone's exact weighted Procrustes given
                               the others); default 3 */
    int max_influences;     /* K, 1..8; default 6 */
    int max_iterations;     /* alternations; default 30 */
    double tol;             /* stop when ERMS improves by less than this
                               fraction over `patience` iterations; 1e-3 */
    int patience;           /* default 2 */
    double target_erms;     /* stop once ERMS (fraction of diagonal) <= this;
                               default 0 (never) */
    int weld;               /* 1 (default): weld coincident rest positions */
    double weld_tol;        /* relative to the bbox diagonal; default 1e-5 */
    int init_iterations;    /* rigid-cluster reassignment rounds; 20 */
    int n_candidates;       /* candidate bones per vertex; default
                               min(B, max(2K, 12)), at most 32 */
    int reseed_every;       /* every this many iterations try moving the
                               least-used bone to the worst-fitted region
                               (kept only if the error drops); 0 = never */
    double sum_penalty;     /* 0 (default): Σw = 1 exactly. > 0: the paper's
                               variant for comparison, Σw = 1 as an extra
                               least-squares row weighted by this times the
                               mean diagonal of the vertex's Gram matrix
                               (weights are normalised on output) */
    int init;               /* DF_DECOMPOSE_INIT_CLUSTER (default): trajectory
                               clustering; DF_DECOMPOSE_INIT_NETWORK: k-means
                               of init_net's embeddings (decompose_net.h),
                               then init_iterations rigid reassignment rounds */
    const struct df_decompose_net *init_net; /* borrowed; needed by NETWORK */
    uint64_t max_bytes;     /* refuse (DF_ELIMIT) when the working set would
                               exceed this; default 8 GiB, 0 = no limit */
    /* optional parallelism (NULL: serial, n_workers = 1) */
    df_parallel_for_cb parallel_for;
    void *parallel_user;
    int n_workers;
    /* optional progress (NULL: silent) */
    df_decompose_progress_cb progress;
    void *progress_user;
} df_decompose_opts_t;

void df_decompose_opts_default(df_decompose_opts_t *o /* OUT */);

/* The input sequence. All borrowed. */
typedef struct df_decompose_input {
    int64_t n_frames;          /* F >= 2 */
    int64_t n_vertices;        /* N */
    const float *frames;       /* [F,N,3] */
    int64_t n_triangles;       /* T (0 allowed: no adjacency) */
    const uint32_t *triangles; /* [T,3] or NULL when T = 0 */
    const float *rest;         /* [N,3] rest positions, or NULL = frame 0 */
} df_decompose_input_t;

typedef struct df_decompose_stats {
    int iterations;            /* alternations run */
    int64_t n_welded;          /* vertices after welding */
    double init_seconds, weight_seconds, transform_seconds, total_seconds;
    double erms_init;          /* fraction of diagonal after initialisation */
    int reseeds_tried, reseeds_accepted;
    double erms;               /* final, fraction of the rest bbox diagonal */
    double *erms_history;      /* [iterations+1], new with the result */
    double *weight_seconds_history;    /* [iterations+1] (entry 0: init) */
    double *transform_seconds_history; /* [iterations+1] */
} df_decompose_stats_t;

typedef struct df_decompose_result {
    int n_bones;               /* B */
    int transforms;            /* df_decompose_transforms_t of the fit */
    int n_influences;          /* K */
    int64_t n_vertices, n_frames;
    float *rest;               /* [N,3] rest positions used */
    int32_t *skin_joints;      /* [N,K], unused slots 0 with weight 0 */
    float *skin_weights;       /* [N,K] ≥ 0, rows sum to 1 */
    float *matrices;           /* [F,B,12] 3x4 row-major, maps rest to frame */
    int32_t *cluster;          /* [N] initial cluster of each vertex */
    df_decompose_stats_t stats;
} df_decompose_result_t;

/* Check an input sequence (sizes, finite values, triangle indices, rest)
 * against limits (NULL: defaults). Names the first bad frame/vertex. */
int df_decompose_validate(const df_decompose_input_t *in, int n_bones,
                          const df_limits_t *lim, df_error_t *err);

/* Fit. *out is new: free with df_decompose_result_free. */
int df_decompose_fit(const df_decompose_input_t *in,
                     const df_decompose_opts_t *opts, const df_limits_t *lim,
                     df_decompose_result_t **out, df_error_t *err);
void df_decompose_result_free(df_decompose_result_t **r);

/* LBS of the result for every frame into out [F,N,3] (caller's buffer). */
void df_decompose_reconstruct(const df_decompose_result_t *r,
                              float *out /* OUT [F,N,3] */);

/* Vertex normals of the fit for every frame into out [F,N,3] (unit, or 0
 * where undefined): n'_i = normalise(Σ_j w_ij N_j^p n_i) with the bone's
 * normal matrix N = cof(L)/|det L|^(1/3) of its linear part L: the inverse
 * transpose up to a positive factor (a reflection turns the normal the way
 * the triangles' winding turns), scaled so that N = L for rigid and trs
 * bones. The `rigged` kind serves the same normals for the written model.
 * rest_normals [N,3]: unit normals of the rest pose. */
void df_decompose_reconstruct_normals(const df_decompose_result_t *r,
                                      const float *rest_normals,
                                      float *out /* OUT [F,N,3] */);

/* Area-weighted unit vertex normals of a mesh (0 for isolated vertices). */
void df_decompose_vertex_normals(int64_t n_vertices, const float *pos /* [N,3] */,
                                 int64_t n_triangles, const uint32_t *triangles,
                                 float *out /* OUT [N,3] */);

/* Welding map: rep[i] in [0, n_welded) for each vertex, vertices with rest
 * positions within tol * bbox diagonal share a rep (transitively). */
int df_decompose_weld(int64_t n, const float *pos /* [N,3] */, double tol,
                      int32_t *rep /* OUT [N] */, int64_t *n_welded,
                      df_error_t *err);

/* Write the result as a `rigged` model file (df_rigged_write): rest
 * positions and triangles as the mesh, the B proxy bones as root joints
 * "bone<j>" with identity rest pose and identity inverse binds, the weights
 * as skin (LBS), and one clip `clip_name` whose `matrices` [F,B,12] are the
 * fitted transforms at `times` (F seconds, increasing; NULL: p/30). Playing
 * the clip (df_model_clip_sample + df_model_evaluate) replays the fit. */
int df_decompose_write_model(const df_decompose_result_t *r,
                             int64_t n_triangles,
                             const uint32_t *triangles /* [T,3] borrowed */,
                             const float *times /* [F] or NULL */,
                             const char *clip_name, const char *path,
                             df_error_t *err);

/* A joint hierarchy for a rigid or trs fit (decompose_skeleton.c, docs/
 * decompose.md): joint k animates proxy bone bone[k]; joints are ordered so
 * parent[k] < k. Matrices are 3x4 row-major in model units, double. */
typedef struct df_decompose_skeleton {
    int n_joints;            /* = B */
    int64_t n_frames;        /* F */
    int root;                /* 0 */
    int32_t *parent;         /* [B] -1 for the root(s) */
    int32_t *bone;           /* [B] proxy bone of joint k */
    int32_t *joint_of_bone;  /* [B] inverse of bone */
    double *bind;            /* [B,12] joint frame at rest (world): rotation + position */
    double *world;           /* [F,B,12] world_k^p = T_bone(k)^p · bind_k */
    float *translation;      /* [F,B,3] local (relative to the parent joint) */
    float *rotation;         /* [F,B,4] local, unit quaternion x,y,z,w */
    float *scale;            /* [F,B] local uniform scale (1 for rigid fits) */
    float *rest_translation; /* [B,3] local bind pose */
    float *rest_rotation;    /* [B,4] */
    double *dislocation;     /* [B] RMS over frames of |T_parent q - T_k q| at the
                                joint q (model units), 0 for the root */
} df_decompose_skeleton_t;

/* Extract the hierarchy (hierarchy = 1) or keep the B proxy bones as roots
 * at the origin (0). Refuses affine fits (DF_EUNSUPPORTED). *out new: free
 * with df_decompose_skeleton_free. */
int df_decompose_skeleton(const df_decompose_result_t *r, int64_t n_triangles,
                          const uint32_t *triangles, int hierarchy,
                          df_decompose_skeleton_t **out, df_error_t *err);
void df_decompose_skeleton_free(df_decompose_skeleton_t **s);
/* Local 3x4 of joint k at frame p recomposed from its stored float TRS. */
void df_decompose_skeleton_local(const df_decompose_skeleton_t *s, int64_t p, int k,
                                 double m[12] /* OUT */);

/* Write the result with a skeleton as a `rigged` model: joints named
 * "joint<k>" in the skeleton's order with its parents, bind pose and inverse
 * binds; the clip as local rotations + translations (rigid fits) or world
 * matrices (trs fits: the rigged clip has no scale channel). */
int df_decompose_write_rig(const df_decompose_result_t *r, const df_decompose_skeleton_t *s,
                           int64_t n_triangles, const uint32_t *triangles /* [T,3] */,
                           const float *times /* [F] or NULL */, const char *clip_name,
                           const char *path, df_error_t *err);

/* Error metrics of an approximation (paper §4; formulas in
 * docs/decompose.md). diag: rest bbox diagonal (<= 0: computed from frame
 * 0 of orig). */
typedef struct df_decompose_metrics {
    double disper;        /* 100 ||A-A'||_F / ||A-A_avg||_F            */
    double erms;          /* ||A-A'||_F / sqrt(3NP), model units       */
    double erms_pct;      /* 100 erms / diag                           */
    double max_avg_dist;  /* (1/P) Σ_p max_i |v_i^p - v'_i^p|          */
    double max_avg_dist_pct; /* 100 max_avg_dist / diag                */
    double norm_distort;  /* (1/(FP)) Σ_p Σ_f |n_f^p x n'_f^p|         */
    double diag;          /* diagonal used                             */
} df_decompose_metrics_t;

int df_decompose_metrics(int64_t n_frames, int64_t n_vertices,
                         const float *orig /* [F,N,3] */,
                         const float *approx /* [F,N,3] */,
                         int64_t n_triangles, const uint32_t *triangles,
                         double diag, df_decompose_metrics_t *out,
                         df_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* DF_DECOMPOSE_H */

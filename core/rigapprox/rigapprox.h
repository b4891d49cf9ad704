/* rigapprox.h — shared pieces of the rigapprox pipeline (Song et al. 2020):
 * the dataset file, features (Eq. 9), the linear part T_i (Eq. 11) and the
 * nonlinear displacement (Eq. 14). Used by the trainer (tools/deform), the
 * model kind (core/rigapprox/kind_rigapprox.c) and the tests.
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
    /* format 2 (optional; NULL / 0 when absent) */
    const int32_t *parents;    /* [J] joint hierarchy (-1: root); NULL: the
                                  trainer infers it from the samples */
    const float *rest_frames;  /* [J,12] world matrix of each joint at rest */
    int64_t ns;                /* rig controls the exporter sampled */
    const float *sample_values;/* [N,S] their values, per sample */
    char *sample_controls;     /* JSON array describing them (owned) */
    int64_t first, total;      /* samples [first, first + n) of an export of
                                  `total` written in shards (0, n: whole) */
    int dqs;                   /* the rig skins by dual quaternions (Blender's
                                  Preserve Volume; metadata skinning = dqs):
                                  T_i is the DQS transform, not the LBS blend */
    df_st_t *st;               /* owned when opened from a file */
    void *owned;               /* samples concatenated from shards */
} df_rigdata_t;

#define DF_RIGDATA_MAX_SHARDS 1024

/* All arrays borrowed. Writes format_version 2 when any format-2 field is
 * set, else 1. */
int df_rigdata_write(const df_rigdata_t *d, const char *path, df_error_t *err);
/* Open and validate. *d filled; close with df_rigdata_close. A shard of a
 * larger export is refused (open every shard with df_rigdata_open_shards). */
int df_rigdata_open(const char *path, df_rigdata_t *d, df_error_t *err);
/* Open the n files of one export written in shards (any order) as one
 * dataset: every shard must describe the same rig (mesh, skin, joints,
 * controls, ranges, hierarchy) and together they must hold samples
 * 0..total-1 exactly once; samples are concatenated in export order and
 * influence scores combined by their maximum (each is a maximum over its
 * shard's poses). n == 1: df_rigdata_open. */
int df_rigdata_open_shards(const char *const *paths, int n, df_rigdata_t *d, df_error_t *err);
void df_rigdata_close(df_rigdata_t *d);
/* Check a joint hierarchy: par[j] in [-1, J), no joint its own ancestor.
 * Returns DF_OK or DF_EFORMAT naming the joint (names may be NULL). */
int df_rigdata_check_parents(int64_t J, const int32_t *par, char *const *names, df_error_t *err);
/* Evaluate model m (kind rigapprox, or any model with a joint_matrices
 * input and a positions output) on samples [s, s+n) of d, n <=
 * DF_RIGDATA_EVAL_MAX: out[b] receives sample s+b's positions [V,3]. */
#define DF_RIGDATA_EVAL_MAX 64
int df_rigdata_evaluate(const df_model_t *m, const df_rigdata_t *d, int64_t s, int n, float *const *out,
                        df_scratch_t *sc, df_error_t *err);

/* Linear part for B poses: T [B,V,12] (3x4) from world [B,J,12]. */
void df_rigapprox_linear(int64_t nv, int64_t nj, int k, const float *invbind,
                         const int32_t *skin_j, const float *skin_w, int B,
                         const float *world, float *T);
/* The same with dqs = 1: T_i of dual quaternion skinning (the rigid part of
 * each skinning matrix blended as dual quaternions, signs relative to the
 * heaviest influence; scale/shear blended linearly about each joint's bind
 * position and applied first). */
void df_rigapprox_linear_skin(int dqs, int64_t nv, int64_t nj, int k, const float *invbind, const int32_t *skin_j,
                              const float *skin_w, int B, const float *world, float *T);
/* Internal, shared with the kind: one pose's per-joint skinning (skm [J,12];
 * dq [J,8], plin [J,12] when dqs) and one vertex's T from them. */
void df__ra_skin_prepare(int64_t nj, const float *invbind, const float *world, int dqs, float *skm, float *dq,
                         float *plin);
void df__ra_vertex_T(int dqs, int k, const int32_t *sj, const float *sw, const float *skm, const float *dq,
                     const float *plin, float T[12]);
/* out = T (v + d) for every vertex of one pose (d may be NULL). */
void df_rigapprox_apply(int64_t nv, const float *T, const float *rest,
                        const float *d, float *out);
/* v_nl = T^-1 p - v (Eq. 14) for one pose. Returns 0, or -1 when some T_i
 * is singular (that vertex gets 0). */
int df_rigapprox_nonlinear(int64_t nv, const float *T, const float *rest,
                           const float *p, float *vnl);

/* ------------------------------------------------------- model (kind) */
/* The in-memory rigapprox model, as the trainer writes it and the kind reads
 * it (tensor names in docs/rigapprox.md). Variants share one evaluator:
 *   OURS  : differential network -> PCA -> L_s coordinates, anchor
 *           mini-networks, Laplacian reconstruction (the paper);
 *   LOCAL : the same network predicting local offsets v_nl directly;
 *   PCALR : one linear layer (ridge regression) -> PCA of v_nl;
 *   LBS   : v_nl = 0 (linear part only). */
enum { DF_RA_OURS = 0, DF_RA_LOCAL, DF_RA_PCALR, DF_RA_LBS };
const char *df_ramodel_variant_name(int v);

struct df_mlp;
typedef struct df_ramodel {
    int variant;
    int64_t nv, nt, nj, nc, k;
    const float *rest;        /* [V,3] */
    const uint32_t *tris;     /* [T,3] */
    const float *invbind;     /* [J,12] */
    const int32_t *skin_j;    /* [V,K] */
    const float *skin_w;      /* [V,K] */
    const float *ctrl_range;  /* [C,3] or NULL when C == 0 */
    char **control_names, **joint_names;
    int64_t nf;               /* 12 J + C */
    const int32_t *parents;   /* [J] joint parents (-1: root) or NULL. Set: the
                                 joint features are LOCAL matrices world_p^-1
                                 world_j (roots: world); NULL: world matrices
                                 (models written before format_version 2) */
    const float *feat_mean, *feat_scale; /* [F]: x' = (x - mean) * scale */
    struct df_mlp *net;       /* F -> P (NULL for LBS) */
    const float *lin;         /* [P,F] linear path beside the network: the
                                 coefficients are net(x) + lin x + lin_b (OURS,
                                 LOCAL; NULL: none, models before it) */
    const float *lin_b;       /* [P] */
    int64_t P;
    const float *basis;       /* [3V,P] */
    const float *basis_mean;  /* [3V] */
    int64_t na;
    const int32_t *anchors;   /* [A] */
    const int32_t *anc_off;   /* [A+1] offsets into anc_idx */
    const int32_t *anc_idx;   /* feature indices of each mini-network */
    struct df_mlp **anc_nets; /* [A] n_in -> 3 */
    const float *alin;        /* [3A,F] the anchors' linear path: anchor a's
                                 offset is its net's output + alin[3a..3a+3) x
                                 + alin_b (NULL: none) */
    const float *alin_b;      /* [3A] */
    double omega;
    int dqs;                  /* linear part by dual quaternion skinning
                                 (metadata skinning = dqs) */
    void *arena;              /* owned copy of every array (df_ramodel_copy) */
} df_ramodel_t;

/* Local joint matrices: local_j = world_p^-1 world_j for p = par[j] >= 0,
 * world_j for roots (par NULL: every joint). local [J,12] must not alias
 * world. Returns -1 - p when the world matrix of parent p is singular
 * (local_j is then world_j), else 0. */
int df_rigapprox_local(int64_t nj, const int32_t *par, const float *world, float *local);
/* Features of one pose (Eq. 9): out [F] from world [J,12] and controls [C]:
 * 12 floats of each joint's matrix (local when m->parents is set, else
 * world) then the controls, each standardised. Returns 0, or -1 - p when
 * joint p's world matrix is singular (a parent: cannot be inverted). */
int df_ramodel_features(const df_ramodel_t *m, const float *world,
                        const float *controls, float *out);
/* All arrays borrowed. */
int df_ramodel_write(const df_ramodel_t *m, const char *path, df_error_t *err);
/* Parse (borrowing arrays from st, which must outlive *m). Validates. */
int df_ramodel_read(const df_st_t *st, df_ramodel_t *m, df_error_t *err);
/* Deep copy of src (borrowed arrays included) into one owned arena. */
int df_ramodel_copy(const df_ramodel_t *src, df_ramodel_t *dst, df_error_t *err);
/* Frees what df_ramodel_read / df_ramodel_copy allocated. */
void df_ramodel_release(df_ramodel_t *m);

/* The anchored Laplacian of a rigapprox mesh: seams welded
 * (df_lap_weld, eps = 1e-6 of the largest extent) then df_lap_new. The
 * trainer and the kind both call this so they agree. */
struct df_lap;
int df_rigapprox_lap(int64_t nv, const float *rest, int64_t nt, const uint32_t *tris,
                     int64_t na, const int32_t *anchors, double omega,
                     struct df_lap **out, df_error_t *err);
/* Welded triangle list (new: free) for component counts etc. */
int df_rigapprox_weld(int64_t nv, const float *rest, int64_t nt, const uint32_t *tris,
                      uint32_t **out, int64_t *out_nt, df_error_t *err);

/* ------------------------------------------------------------ training */
typedef struct df_ratrain_opts {
    int variant;              /* DF_RA_* */
    int n_hidden;             /* differential network hidden layers (3) */
    int hidden;               /* their width (256) */
    int anchor_hidden_layers; /* per-anchor mini-network hidden layers (3) */
    int anchor_width;         /* (64) */
    double pca_frac;          /* principal components / vertices (0.05) */
    double anchor_frac;       /* anchors / vertices (0.02) + 1 per extra piece */
    double omega;             /* anchor weight (1) */
    int pca_delta;            /* OURS: 1 = PCA of the differential coordinates (the
                                 paper); 0 = PCA of v_nl mapped through L_s (default) */
    int anchor_influence;     /* 1 = anchors weighted by influence (the paper); 0 =
                                 farthest-point spread (default) */
    int no_refit;             /* OURS: 1 = skip the position-space refit of the
                                 differential network's last layer */
    int no_linear;            /* OURS, LOCAL: 1 = no linear path (the paper's plain
                                 MLP); 0 = a ridge regression of the PCA
                                 coefficients on the features beside the network,
                                 which then learns what it leaves (default) */
    int piece_anchors;        /* anchors on each piece other than the largest
                                 (3; 0 or 1: one; k: farthest-point spread, <= its size) */
    int world_features;       /* 1 = joint features are world matrices (before
                                 2026-11-29 evening); 0 = local matrices in the
                                 inferred parent's frame (default) */
    int pos_epochs;           /* OURS: epochs of position-space fine-tuning of the
                                 differential network through the (folded)
                                 reconstruction after the differential-coordinate
                                 training (0: none, the paper) */
    float pos_lr;             /* its initial learning rate (0: 0.3 x lr), decaying 10x */
    int epochs, batch;        /* (200, 128) */
    float lr, lr_anchor;      /* Adam (1e-3, 1e-3) */
    int adam;                 /* 1 Adam, 0 SGD momentum */
    double val_frac;          /* validation split (0.1) */
    int patience;             /* early stopping, epochs (20) */
    uint64_t seed;            /* (1) */
    const char *checkpoint;   /* NULL: none */
    int resume;               /* resume from checkpoint if it exists */
    int checkpoint_every;     /* epochs (10) */
    double time_limit_s;      /* stop training after this (0: none) */
    int verbose;              /* progress line per epoch on stderr */
} df_ratrain_opts_t;

typedef struct df_ratrain_report {
    int epochs_run, best_epoch;
    double val_diff, val_anchor; /* best validation losses */
    double seconds;
    int64_t n_train, n_val, n_pca, n_anchors;
} df_ratrain_report_t;

void df_ratrain_opts_default(df_ratrain_opts_t *o /* OUT */);
/* Train on dataset d and write the model file to out_path. */
int df_rigapprox_train(const df_rigdata_t *d, const df_ratrain_opts_t *o,
                       const char *out_path, df_ratrain_report_t *rep,
                       df_error_t *err);

/* Internal (tested): the position-space refit of an OURS network's last
 * layer, exposed for its optimality test. Given n rows of hidden features
 * h [n,Hd], target residuals r [n,D] (= v_nl - g0 - H a) and the folded
 * map G [D,P], returns W [P,Hd], b [P] minimising
 * sum_rows |G (W h + b) - r|^2 + ridge (ridge * tr(HtH)/Hd on W only).
 * Returns DF_OK or a negative DF_E*. */
int df__ra_refit_solve(int64_t n, int Hd, const float *h, int64_t D, const float *r, int64_t P,
                       const float *G, double ridge, float *W, float *b, df_error_t *err);

/* Internal (tested): joint parents inferred from ns samples of world
 * matrices joints [ns,J,12] (datasets without joint_parents): p is the
 * joint for which R_p^T (t_j - t_p) is constant (variance < 1e-8 scale^2),
 * else -1; a candidate with a zero offset (a joint growing from the same
 * point) yields to one with a non-zero offset. Returns DF_EFORMAT naming
 * the joint when two candidates remain (ambiguous) or the parents form a
 * cycle (names may be NULL). */
int df__ra_joint_parents(int64_t ns, int64_t J, const float *joints, double scale, char *const *names,
                         int32_t *par, df_error_t *err);


/* ------------------------------------------- error-driven extra anchors */
/* Departure from the paper (docs/rigapprox.md, "Error-driven anchors"):
 * after training, add anchors where the trained model's error is largest.
 * The differential network is unchanged (its L1 loss on delta does not
 * depend on the anchors); each new anchor gets its own mini-network,
 * trained like the others (inputs by influence, L2 on the standardised
 * v_nl, Adam), and the reconstruction is refactorised with the larger
 * anchor set when the model is loaded. */
typedef struct df_raanchor_opts {
    int add;            /* anchors to add, > 0 */
    int rounds;         /* re-evaluate the errors this many times (4) */
    double radius;      /* no new anchor within this distance of another
                           anchor, as a fraction of the height (0.01) */
    int epochs, batch;  /* mini-network training (100, 32) */
    double omega;       /* > 0: the written model's anchor weight (0: keep) */
    float lr;           /* Adam, decaying to 0.1 x over the epochs (1e-3) */
    double val_frac;    /* validation split, best weights kept (0.1) */
    uint64_t seed;      /* (1; with the trainer's default seed the split is
                           the trainer's) */
    int threads;        /* mini-networks trained in parallel (1); the result
                           does not depend on it */
    int verbose;        /* one line per round on stderr */
} df_raanchor_opts_t;

void df_raanchor_opts_default(df_raanchor_opts_t *o /* OUT */);
/* Read the 'ours' model at model_path, add o->add anchors chosen on
 * dataset d (the training set: it must have influence scores) and write
 * the model to out_path (another file: model_path stays open while it is
 * written). */
int df_rigapprox_add_anchors(const char *model_path, const df_rigdata_t *d,
                             const df_raanchor_opts_t *o, const char *out_path,
                             df_error_t *err);

/* Internal, shared by the trainer and df_rigapprox_add_anchors. */
int df__ra_anchor_inputs(const df_rigdata_t *d, const int32_t *par, int world_features, int32_t v, int32_t *idx);
void df__ra_anchor_stats(const float *NL, int64_t D, int64_t r0, int64_t r1, int32_t v, float *mu, float *sig);
void df__ra_anchor_fold(struct df_mlp *n, const float *mu, const float *sig);

#endif

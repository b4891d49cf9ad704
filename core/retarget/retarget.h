/* retarget.h — the `retarget` kind's internals (core-internal), shared by
 * kind_retarget.c (load, evaluation), rt_solve.c (bounded least squares,
 * rigid alignment) and the offline tool (tools/deform/cmd_retarget.c).
 *
 * Everything in df__rt_t is immutable after load and owned by it.
 */
#ifndef DF_RETARGET_H
#define DF_RETARGET_H

#include "base/model_internal.h"

/* Bounds of the source weights a marker solve may take. */
typedef enum df__rt_bounds {
    DF_RT_UNIT = 0,   /* 0 <= w <= 1 (default) */
    DF_RT_NONNEG = 1, /* 0 <= w (NNLS) */
    DF_RT_NONE = 2,   /* plain least squares */
} df__rt_bounds_t;

/* Fixed reference points (the rest markers) prepared for many alignments:
 * df__rt_rigid_align_ref(x, ref) is df__rt_rigid_align(x, y, w) (check
 * off) with y's centroid and centred points computed once. */
typedef struct df__rt_ref {
    int64_t K;
    const float *w;        /* borrowed [K] */
    double *yc;            /* owned [K,3]: y - cy */
    double cy[3], syc[3];  /* centroid; sum_i w_i yc_i (rounding: w sums to 1) */
} df__rt_ref_t;

typedef struct df__rt {
    df_model_t *target;  /* owned: the `rigged` model of the target's
                          * tensors; its kernel evaluates every pose */
    int64_t Ms, Mt, N;   /* source controls, target shapes, target vertices */
    int64_t K;           /* markers (0: no markers input) */
    int64_t Mi;          /* the source_weights input's controls: Ms, or
                          * the input names' count when S maps them */
    float *S;            /* [Ms,Mi] row-major or NULL: source weights =
                          * S x the input's (a tracker's controls) */
    float *E;            /* [Mt,Ms] row-major = column-major Ms x Mt:
                          * target weights = E source weights */
    float *A;            /* [Ms,K,3] = column-major 3K x Ms: marker deltas */
    float *rest;         /* [K,3] marker rest positions */
    float *rigid_w;      /* [K] alignment weights, sum 1 */
    df__rt_ref_t ref;    /* rest with rigid_w, prepared for alignments */
    double *G;           /* [Ms,Ms] A'A + lambda I, row-major */
    double *Gp;          /* [Ms,P] G with rows padded to P = df__rt_pad(Ms)
                          * doubles (zeros), 64-byte aligned */
    double *L;           /* [Ms,Ms] its Cholesky factor (lower) */
    float *Ginv;         /* [Ms,Ms] G^-1 (symmetric), for warm starts */
    float *Kinv;         /* [Ms,Ms] (G + rho I)^-1: the ADMM start's x-update
                          * (bounded solves; NULL for bounds none) */
    float rho;           /* its rho (absolute) */
    float *At;           /* [Ms,K,3]: A with the infinitesimal rigid motions
                          * at the rest markers projected out (the right-hand
                          * sides use it), or A itself */
    double *Pj;          /* [6,3K] (J'J)^-1 J': the rigid correction of a
                          * residual (rotation about jc, translation), or NULL */
    double *PjA;         /* [6,Ms] Pj A */
    double jc[3];        /* the centre of J's rotations */
    double rest_spread;  /* the rest markers' (df__rt_degenerate) */
    float *pAt, *pGinv, *pE, *pKinv; /* At', Ginv, E, Kinv packed for math/pgemm.h (its
                          * builds; NULL otherwise or for no markers) */
    double lambda;
    double lambda_rel;   /* parameters' marker_lambda (x mean diag A'A), or -1 */
    double *tol;         /* [Ms] KKT tolerances of the bounded solve:
                          * 1e-5 x marker extent x sqrt(G_ii) */
    int rigid_fix;       /* 1: solve for a small rigid correction too */
    df__rt_bounds_t bounds;
    int clamp;           /* 1: target weights clamped to [0,1] */
    int iters;           /* alignment / solve rounds (1..10, default 1) */
    /* input / output indices (-1: absent) */
    int in_w, in_mk, in_state;
    int out_pos, out_nrm, out_tw, out_sw, out_state, out_head;
    int tgt_in_w;        /* the target's `weights` input */
    int n_pass;          /* the target's other inputs (a skeleton's joint
                          * inputs, shape), passed through: */
    int pass_in[DF_MAX_IO], pass_tgt[DF_MAX_IO]; /* ours, the target's */
    int tgt_out_pos, tgt_out_nrm; /* the target's outputs */
} df__rt_t;

/* Bounded least squares on a prepared Gram matrix:
 *     min 1/2 w'Gw - b'w   subject to lo <= w_i <= hi
 * with (lo, hi) = (0, 1) for DF_RT_UNIT, (0, inf) for DF_RT_NONNEG, and no
 * bounds for DF_RT_NONE (then L, the Cholesky factor of G, is used).
 *
 * state_io NULL (cold start): an active-set method (bounded-variable least
 * squares, Stark & Parker 1995, on the normal equations): variables start
 * at 0; each outer iteration frees the bound variable that violates its
 * KKT condition most (relative to its tolerance), then solves the free
 * subproblem by Cholesky, stepping back to the first bound crossed until the
 * free solution is feasible.
 * state_io given (warm start: DF_RT_AT_LO / AT_HI / FREE per variable, e.g.
 * from the signs of the unconstrained solution or a previous solve): first
 * up to 8 rounds of the primal-dual active-set method from those sets;
 * when they do not settle, w is projected onto the box and the active-set
 * method above continues from it. On return state_io holds the final sets.
 *
 * Stops when every bound variable's KKT condition holds within its
 * tolerance (g_i <= tol_i at 0, g_i >= -tol_i at 1, g = b - Gw; free
 * variables solve g_i = 0) or after 3m + 10 outer iterations.
 * G: [m,m] row-major SPD; tol: [m]; w: OUT [m]; work: df__rt_bvls_work(m)
 * doubles. Returns the number of active-set iterations (0: the primal-dual
 * rounds settled). */
enum { DF_RT_AT_LO = 0, DF_RT_AT_HI = 1, DF_RT_FREE = 2 };
size_t df__rt_bvls_work(int64_t m);
int df__rt_bvls(const double *G, const double *L, const double *b, int64_t m,
                df__rt_bounds_t bounds, const double *tol, uint8_t *state_io, double *w,
                double *work);

/* The fast path of df__rt_bvls with a warm start (rt_pdas.c): the same
 * primal-dual active-set rounds (at most 8, the same rule and tolerances,
 * hence the same answer) on an explicit inverse of the free block updated
 * as variables enter and leave it, instead of a Cholesky factorisation of
 * every round's free block. Gp: G with rows padded to df__rt_pad(m) doubles
 * (zeros), 64-byte aligned; work: df__rt_pdas_work(m) doubles, 64-byte
 * aligned. state_io: the starting sets, overwritten. Returns the rounds
 * (>= 1) when they settled (w the answer, state_io its sets), or -1 when
 * they did not, or a pivot was numerically zero: the caller then runs
 * df__rt_bvls from the same starting sets (a copy), whose active-set
 * fallback handles both. bounds: DF_RT_UNIT or DF_RT_NONNEG. */
int64_t df__rt_pad(int64_t m);
size_t df__rt_pdas_work(int64_t m);
int df__rt_pdas(const double *Gp, int64_t m, const double *b, df__rt_bounds_t bounds,
                const double *tol, uint8_t *state_io, double *w, double *work);

/* Cholesky G = L L' (lower, row-major, m x m) in double. Returns 0, or the
 * 1-based index of the first pivot <= min_pivot (not positive definite). */
int64_t df__rt_cholesky(const double *G, int64_t m, double min_pivot,
                        double *L);
/* Solve L L' x = b in place (x = b on entry). */
void df__rt_chol_solve(const double *L, int64_t m, double *x);

/* Weighted rigid alignment (Horn's quaternion method): R, t minimising
 * sum_i w_i |R x_i + t - y_i|^2, R a proper rotation. x, y: [K,3]; w: [K],
 * summing to 1 (the centroids are the weighted sums).
 * R: OUT row-major 3x3, t: OUT [3]. Returns 0, or -1 when the weighted
 * points x (or y) are collinear or coincident: the second largest
 * eigenvalue of their scatter below 1e-10 of the largest (checked only
 * when check is set: the kind checks each pose's markers once). */
int df__rt_rigid_align(const float *x, const float *y, const float *w,
                       int64_t K, int check, double R[9], double t[3]);

/* The marker basis adapted to an actor (rt_adapt.c): [A c] = argmin
 * sum_f |d_f - A w_f - c|^2 + mu |A - A0|^2 + mu |c|^2 over F frames of
 * displacements D [F,n3] (the actor's markers aligned into the rest frame,
 * minus the rest markers) and their weights W [F,m]; A0, A: [m,n3] (a
 * control's displacements contiguous, as retarget/marker_deltas); c [n3]
 * OUT: the frames' common offset from the rest markers. mu > 0 (absolute). */
int df__rt_adapt_basis(const float *D, const float *W, int64_t F, int64_t n3, int64_t m,
                       const float *A0, double mu, float *A, float *c, df_error_t *err);

/* Eigen-decomposition of a symmetric n x n matrix (row-major) by cyclic
 * Jacobi, to off-diagonal^2 <= 1e-30 diagonal^2 (at most 60 sweeps): a is
 * destroyed (its diagonal ends as the eigenvalues, unsorted), V [n,n] gets
 * the eigenvectors as columns. Horn's fallback (n = 3, 4) and the
 * key-frame basis's PCA (n = 3 x markers). */
void df__rt_eig_sym(double *a, int64_t n, double *V);

/* 1 when K points are collinear or coincident (as above), else 0. spread
 * (NULL: not wanted) OUT: their weighted RMS distance to their weighted
 * centroid (w summing to 1), the size the served markers are compared with
 * the rest markers' by (another unit is refused). */
int df__rt_degenerate(const float *x, const float *w, int64_t K, double *spread);

int df__rt_ref_init(df__rt_ref_t *ref, const float *y, const float *w, int64_t K); /* -1: ENOMEM */
void df__rt_ref_free(df__rt_ref_t *ref);
void df__rt_rigid_align_ref(const float *x, const df__rt_ref_t *ref, double R[9], double t[3]);

/* ------------------------------------------- another topology (offline) */

/* A mesh with blendshapes, borrowed arrays. */
typedef struct df__rt_mesh {
    int64_t nv, nt, M;
    const float *pos;      /* [nv,3] */
    const uint32_t *tri;   /* [nt,3] */
    const float *deltas;   /* [M,nv,3] (source) or NULL (target) */
} df__rt_mesh_t;

typedef enum df__rt_transfer {
    DF_RT_CLONE = 0,  /* expression cloning (Noh & Neumann) */
    DF_RT_NAIVE = 1,  /* displacement of the nearest source vertex */
    DF_RT_DT = 2,     /* deformation transfer (Sumner & Popovic) */
    DF_RT_NAIVE_POINT = 3, /* displacement at the nearest point of the source surface */
} df__rt_transfer_t;

/* Progress of a long offline computation: fn(user, stage, fraction of the
 * stage done, 0..1), called at each stage's start and end and now and then
 * between (never more than a few hundred times in all). */
typedef struct df__rt_progress {
    void (*fn)(void *user, const char *stage, double frac);
    void *user;
} df__rt_progress_t;

/* The source's M shapes carried onto target t (rt_transfer.c): out [M,
 * t->nv, 3] deltas. lm_s, lm_t: L corresponding landmark vertex indices.
 * local_frames (expression cloning): a df__rt_frames_t, how each
 * displacement is carried from the source's local frame into the target's
 * (below; DF_RT_FRAMES_OFF = 0 and DF_RT_FRAMES_NORMALS = 1 keep the
 * values of the former off and on).
 * refine: rounds of the correspondence's refinement (df__rt_correspond).
 * corr_tri [t->nv], corr_bary [t->nv,3], rounds (each NULL when not
 * wanted; not written by the nearest-vertex copy): the dense correspondence used
 * (the naive point copy's: each target vertex's nearest source point),
 * as df__rt_correspond gives it. progress: stages "correspondence" (by
 * rounds of refinement), then "expression cloning", "naive copy" or
 * "deformation transfer: triangles' closest points", ": factorising",
 * ": gradients", ": solving".
 * align: the transfer runs in the source's frame: the target moved there
 * by the rigid motion taking its landmarks onto the source's (Horn), its
 * shapes turned back into its own (the naive copies and deformation
 * transfer carry the source's directions, expression cloning's local
 * frames only the normals': a target facing another way, or in another
 * up axis, needs it); DF_RT_ALIGN_AUTO does so when that motion turns by
 * more than 15 degrees, and leaves faces in one frame (a few degrees apart
 * from their shapes alone) as they are. *turned OUT (or NULL): the
 * degrees turned, 0 when not moved. Not with fewer than 3 landmarks.
 * Errors: landmarks out of range, coincident, or not spanning 3D (the warp
 * would be undetermined); CHOLMOD failures. */
/* The global size ratio of two landmark sets (L points each, [L,3]): the RMS
 * distance of lt's points to their centroid over ls's (1 when either is a
 * single point). Expression cloning's local scale falls back to it where the
 * warp folds; it is 0.01 for a target in metres from a source in
 * centimetres. */
double df__rt_size_ratio(const float *ls, const float *lt, int64_t L);

/* Expression cloning's local frames (local_frames of df__rt_transfer):
 * how a source displacement d at source point p becomes the target's.
 * Where the warp folds (its Jacobian's determinant not positive, or its
 * scale beyond 10x the landmarks' size ratio either way) the warp's modes
 * take the normals' turn and that size ratio. */
typedef enum df__rt_frames {
    DF_RT_FRAMES_OFF = 0,        /* d as it is (the correspondence alone) */
    DF_RT_FRAMES_NORMALS = 1,    /* turned from the source's normal onto the target's (Noh &
                                    Neumann), scaled by the warp's local scale */
    DF_RT_FRAMES_SIMILARITY = 2, /* turned by the rotation of the warp's Jacobian (its polar
                                    factor), scaled by the warp's local scale */
    DF_RT_FRAMES_WARP = 3,       /* w(p + d) - w(p), w the correspondence's warp: the
                                    target's local stretch per direction (its Jacobian J d
                                    for a small d) */
} df__rt_frames_t;

typedef enum df__rt_align {
    DF_RT_ALIGN_AUTO = 0,  /* into the source's frame when the frames clearly differ */
    DF_RT_ALIGN_RIGID = 1, /* always into the source's frame */
    DF_RT_ALIGN_NONE = 2,  /* as given */
} df__rt_align_t;

int df__rt_transfer(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                    const int32_t *lm_t, int64_t L, df__rt_transfer_t method, int local_frames,
                    int refine, df__rt_align_t align, double *turned, float *out,
                    int32_t *corr_tri, float *corr_bary, int *rounds,
                    const df__rt_progress_t *progress /* or NULL */, df_error_t *err);
/* The dense correspondence of df__rt_transfer: each target vertex's closest
 * point on the source warped through the landmarks, after up to `refine`
 * rounds of sliding semilandmarks (0: the landmark warp alone).
 * tri_out [t->nv], bary_out [t->nv,3] OUT: a source triangle and
 * barycentric coordinates; *rounds OUT (or NULL): the rounds done. */
int df__rt_correspond(const df__rt_mesh_t *s, const df__rt_mesh_t *t, const int32_t *lm_s,
                      const int32_t *lm_t, int64_t L, int refine, int32_t *tri_out,
                      float *bary_out, int *rounds, df_error_t *err);
/* What a transfer gives each separate piece of the target (a connected
 * component of its triangles: an eyeball, a row of teeth), rt_pieces.c */
typedef enum df__rt_piece {
    DF_RT_PIECE_SKIN = 0,  /* the transferred displacements (the skin's motion there) */
    DF_RT_PIECE_STILL = 1, /* none */
    DF_RT_PIECE_RIGID = 2, /* per shape, the rigid motion closest to them (Horn) */
} df__rt_piece_t;
/* D [M,nv,3] (a transfer's shapes) IN/OUT: the pieces' vertices changed by
 * their mode; piece [nv]: each vertex's piece (0..np-1); mode [np]: a
 * df__rt_piece_t each. A rigid piece on a line takes its mean displacement.
 * Errors: a piece or mode out of range, out of memory. */
int df__rt_pieces_apply(const float *pos, int64_t nv, const int32_t *piece, int64_t np,
                        const uint8_t *mode, int64_t M, float *D, df_error_t *err);

/* RBF warp (phi(r) = r plus affine) through L landmark pairs: coef
 * [(L+4),3] OUT. */
int df__rt_rbf_fit(const float *src, const float *dst, int64_t L, double *coef,
                   df_error_t *err);
/* warp x (and its Jacobian, row-major 3x3, when J != NULL) */
void df__rt_rbf_eval(const float *src, int64_t L, const double *coef, const double x[3],
                     double out[3], double J[9]);
/* closest point of each of np points on the mesh (V double [nv,3]): the
 * triangle and barycentric coordinates */
int df__rt_closest(const double *V, int64_t nv, const uint32_t *T, int64_t nt, const double *P,
                   const double *PN /* [np,3] unit normals or NULL */, int64_t np,
                   int32_t *tri_out, float *bary_out, df_error_t *err);
/* deformation transfer: each target triangle's deformation gradient from
 * the source triangle spanned by its corners' corresponding points (vtri,
 * vbary: a source triangle and barycentric coordinates per target vertex),
 * or, where those points (nearly) coincide or vtri is NULL, from the
 * source triangle ctri[f] under the target triangle's centroid. pin
 * [t->nv] (or NULL): vertices held at rest */
int df__rt_deformation_transfer(const df__rt_mesh_t *s, const df__rt_mesh_t *t,
                                const int32_t *ctri, const int32_t *vtri, const float *vbary,
                                const uint8_t *pin, float *out,
                                const df__rt_progress_t *progress /* or NULL */,
                                df_error_t *err);

#endif

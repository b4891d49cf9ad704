/* decompose_net.h — the trajectory network that initialises a skinning
 * decomposition (the paper's temporal network; docs/decompose.md, "Network
 * initialisation").
 *
 * A vertex's trajectory, resampled to `frames` steps and expressed in the
 * sequence's normalised frame (rest bbox centre at the origin, diagonal 1),
 * goes through 1D convolutions over time, mean and max pooling over time
 * and dense layers to an embedding e (dims[last] floats). The network is
 * trained so that vertices moved by the same bone of a rig have nearby
 * embeddings within a sequence (a prototype loss over the bones present in
 * a batch drawn from one sequence), which needs no bone order shared by
 * different characters; the decomposition clusters the embeddings of its
 * vertices into B bones (k-means) and starts from those clusters.
 *
 * Input channels per time step: the position x(u) and the displacement
 * x(u) - rest, both in the normalised frame (6 channels).
 */
#ifndef DF_DECOMPOSE_NET_H
#define DF_DECOMPOSE_NET_H

#include "df.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DF_DCNET_MAX_CONV 4
#define DF_DCNET_CHANNELS 6

typedef struct df_decompose_net df_decompose_net_t;

/* Shape of a network. conv[l] = {cout, k, stride, pad}; dense lists the
 * widths after pooling (the last is the embedding size). */
typedef struct df_decompose_net_arch {
    int frames;                      /* resampled length T (>= 2) */
    int n_conv;                      /* 1..DF_DCNET_MAX_CONV */
    int conv[DF_DCNET_MAX_CONV][4];
    int n_dense;                     /* 1..8 */
    int dense[8];
} df_decompose_net_arch_t;

/* The default: T = 32; conv 6->32 (k 5), 32->64 (k 5, stride 2), 64->64
 * (k 3, stride 2); mean+max pooling (128); dense 128, 16. */
void df_decompose_net_arch_default(df_decompose_net_arch_t *a /* OUT */);

/* New network, He-initialised from seed. *out new: df_decompose_net_free. */
int df_decompose_net_new(const df_decompose_net_arch_t *a, uint64_t seed,
                         df_decompose_net_t **out, df_error_t *err);
void df_decompose_net_free(df_decompose_net_t **n);
int df_decompose_net_embed_dim(const df_decompose_net_t *n);
int64_t df_decompose_net_n_params(const df_decompose_net_t *n);
void df_decompose_net_get_arch(const df_decompose_net_t *n, df_decompose_net_arch_t *a /* OUT */);

/* Weights file (safetensors): tensors conv<l>/weight F32 [cout, k*cin],
 * conv<l>/bias [cout], dense<l>/weight [out, in], dense<l>/bias [out];
 * metadata kind = "decompose_init", format_version = "1", frames, conv
 * (JSON [[cin,cout,k,stride,pad],...]), dense (JSON [in, w1, ..., D]) and
 * any extra key/value pairs given to save (NULL-terminated list). Load
 * checks every shape against the metadata and names what disagrees. */
int df_decompose_net_save(const df_decompose_net_t *n, const char *path,
                          const char *const *meta_kv, df_error_t *err);
int df_decompose_net_load(const char *path, df_decompose_net_t **out, df_error_t *err);

/* Normalise a sequence as the decomposition does: centre on the rest bbox
 * (rest, or frame 0 when NULL), divide by its diagonal. X [N, 3F] (row i =
 * vertex i's trajectory, X[i][3p+r]), rest_out [N, 3]. Fails when the rest
 * positions coincide. */
int df_decompose_net_normalise(int64_t F, int64_t N, const float *frames /* [F,N,3] */,
                               const float *rest /* [N,3] or NULL */, double *X /* OUT */,
                               double *rest_out /* OUT */, df_error_t *err);

/* Embeddings E [n, D] of n trajectories: row rows[i] (or i when rows is
 * NULL) of X [*, 3F] (normalised) with rest position rest + rows[i] *
 * rest_stride. Allocates its work buffers (freed before return). */
int df_decompose_net_embed(const df_decompose_net_t *net, int64_t n, int64_t F, const double *X,
                           const double *rest, int rest_stride, const int64_t *rows,
                           float *E /* OUT [n, D] */, df_error_t *err);

/* One training or test sequence, normalised (df_decompose_net_normalise),
 * with the true bone of every vertex (label < 0: not used). group: the
 * character, for sampling characters evenly. All borrowed. */
typedef struct df_decompose_net_seq {
    int64_t F, N;
    const double *X;
    const double *rest;
    const int32_t *label;
    int group;
} df_decompose_net_seq_t;

typedef struct df_decompose_net_progress {
    int64_t step, steps;
    double loss;         /* mean over the steps since the last report */
    double seconds, eta_seconds;
} df_decompose_net_progress_t;

typedef struct df_decompose_net_train_opts {
    int64_t steps;       /* optimiser steps (default 3000) */
    int batch;           /* vertices per step, from one sequence (256) */
    float lr;            /* Adam, cosine decay to lr/20 (2e-3) */
    uint64_t seed;       /* sampling and augmentation (1) */
    double min_window;   /* random time window >= this share of the
                            sequence (0.6); 1 = whole sequences */
    int augment;         /* random rotation/reflection, scale, reversal (1) */
    int report_every;    /* steps between progress calls (100) */
    void (*progress)(void *user, const df_decompose_net_progress_t *p);
    void *progress_user;
} df_decompose_net_train_opts_t;

void df_decompose_net_train_opts_default(df_decompose_net_train_opts_t *o /* OUT */);

/* Train net in place on n sequences. Deterministic for a seed (and a BLAS
 * kernel). Sequences with fewer than 2 labelled bones are skipped. */
int df_decompose_net_train(df_decompose_net_t *net, int n, const df_decompose_net_seq_t *seqs,
                           const df_decompose_net_train_opts_t *o, df_error_t *err);

/* How well embeddings separate the bones of one sequence (labelled
 * vertices only):
 *  - proto_acc: share of vertices whose nearest bone prototype (mean
 *    embedding of the bone's vertices) is their own bone; majority: the
 *    share of the largest bone (what always answering it scores);
 *  - ari: adjusted Rand index of k-means (k = bones present, seeded) on
 *    the embeddings against the bones (0: chance, 1: identical).
 * net NULL scores the raw input features instead (the resampled
 * trajectory, 6T values) — the baseline a learned metric must beat. */
typedef struct df_decompose_net_score {
    int n_bones;
    int64_t n_vertices;
    double proto_acc, majority, ari;
} df_decompose_net_score_t;
int df_decompose_net_score(const df_decompose_net_t *net, const df_decompose_net_seq_t *s,
                           df_decompose_net_score_t *out, df_error_t *err);

/* k-means of n points E [n, D] into k clusters (k-means++ seeding from
 * seed, Lloyd rounds until nothing moves or 100; an empty cluster takes the
 * point farthest from its centre). assign [n]. k <= n. */
int df_decompose_kmeans(int64_t n, int D, const float *E, int k, uint64_t seed,
                        int32_t *assign /* OUT */, df_error_t *err);

/* Internal, for tests: the parameter tensors in a fixed order (conv
 * weight, bias per layer, then dense weight, bias per layer), and the
 * prototype loss of one batch of nb feature rows x [nb, frames, 6] with
 * labels lab [nb]; grads (NULL: loss only) receives d loss / d parameter
 * for every tensor (overwritten). */
int df__dcnet_n_tensors(const df_decompose_net_t *n);
float *df__dcnet_tensor(df_decompose_net_t *n, int i, size_t *len /* OUT */);
int df__dcnet_batch_loss(df_decompose_net_t *n, int nb, const float *x, const int32_t *lab,
                         float *const *grads, double *loss /* OUT */, df_error_t *err);

#ifdef __cplusplus
}
#endif
#endif

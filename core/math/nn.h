/* nn.h — small dense neural networks for the rigapprox kind and its trainer.
 *
 * DESIGN
 * A df_mlp_t is a stack of fully connected layers (ReLU after every layer
 * but the last, which is linear). Weights are row-major [out,in] float32 so
 * a batch X [B,in] (row-major) goes through one sgemm per layer
 * (Y = X W^T + b); at B == 1 the forward pass calls sgemv instead, because
 * sgemm at N=1 is several times slower than sgemv (docs/performance.md).
 * Backward is the same GEMMs transposed; gradients accumulate into a
 * df_mlp_grad_t of the same shape. Optimisers (Adam, SGD with momentum) keep
 * their state in df_mlp_opt_t. Nothing here allocates in forward/backward:
 * callers pass the activation buffers (df_mlp_work_bytes tells how much).
 *
 * The RNG (splitmix64 + Box-Muller) is here too so every random choice of
 * the rigapprox pipeline (sampling, init, shuffles) is reproducible from one
 * seed.
 */
#ifndef DF_NN_H
#define DF_NN_H

#include "df.h"
#include <stdint.h>

/* ------------------------------------------------------------------ rng */
typedef struct df_rng {
    uint64_t s;
} df_rng_t;

static inline uint64_t df_rng_u64(df_rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* uniform in [0,1) */
static inline double df_rng_u01(df_rng_t *r)
{
    return (double)(df_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}
double df_rng_normal(df_rng_t *r);
/* Truncated Gaussian: N(mu, sigma) restricted to [lo,hi] (rejection, then
 * uniform fallback after 64 tries). */
double df_rng_trunc_normal(df_rng_t *r, double mu, double sigma, double lo,
                           double hi);

/* ------------------------------------------------------------------ mlp */
#define DF_MLP_MAX_LAYERS 16

typedef struct df_mlp {
    int n_layers;                   /* number of weight layers */
    int dims[DF_MLP_MAX_LAYERS + 1];/* dims[0] = in, dims[n_layers] = out */
    float *w[DF_MLP_MAX_LAYERS];    /* [dims[l+1], dims[l]] row-major */
    float *b[DF_MLP_MAX_LAYERS];    /* [dims[l+1]] */
    int owns;                       /* 1: w/b malloc'ed by df_mlp_new */
} df_mlp_t;

/* New network with He-initialised weights (seeded), zero biases.
 * *out is new: df_mlp_free. */
int df_mlp_new(int n_layers, const int *dims, uint64_t seed, df_mlp_t **out,
               df_error_t *err);
/* A zero-filled network of the same shape (used for gradients, moments). */
int df_mlp_new_like(const df_mlp_t *m, df_mlp_t **out, df_error_t *err);
void df_mlp_free(df_mlp_t **m);
int64_t df_mlp_n_params(const df_mlp_t *m);
int df_mlp_copy(df_mlp_t *dst, const df_mlp_t *src); /* same shape */

/* Floats of activation storage for a batch of B (forward keeps every
 * layer's output for backward). */
size_t df_mlp_work_floats(const df_mlp_t *m, int B);

/* Forward B rows of x [B, in]. act: df_mlp_work_floats(m,B) floats (borrowed,
 * receives every layer's output). Returns a pointer into act to the output
 * [B, out]. B == 1 uses sgemv. */
float *df_mlp_forward(const df_mlp_t *m, int B, const float *x, float *act);

/* Backward for the batch just run through df_mlp_forward (same act).
 * dy [B,out] is the loss gradient w.r.t. the output; it is overwritten.
 * Gradients are ADDED to g. dx (may be NULL) receives d loss / d x [B,in].
 * tmp: df_mlp_work_floats(m,B) floats scratch. */
void df_mlp_backward(const df_mlp_t *m, int B, const float *x,
                     const float *act, float *dy, df_mlp_t *g, float *dx,
                     float *tmp);
void df_mlp_zero(df_mlp_t *g);

/* ------------------------------------------------- packed serving path
 * At batch 1 a small network is a chain of matrix-vector products bound by
 * the bytes of its weights; one BLAS call per layer costs more in dispatch
 * than the product itself for the rigapprox anchor mini-networks
 * (in <= a few hundred, out = 64). The packed form streams each layer once
 * with an own kernel (AVX2/FMA when compiled for it, plain C otherwise):
 * per layer the bias [out] then the weights, TRANSPOSED [in,out] when
 * out >= 8 (64 outputs stay in registers, each input broadcast once) and
 * row-major [out,in] otherwise (one dot product per output); every layer
 * starts 64-byte aligned relative to the packed array. Numerically it is
 * the same network summed in another order (tests/unit/core/
 * test_rigapprox_serve.c: vs a double loop and vs the GEMM path). */

/* Floats df_mlp_pack writes for m. */
size_t df_mlp_packed_floats(const df_mlp_t *m);
/* Pack m into dst (df_mlp_packed_floats(m) floats, borrowed; 64-byte
 * aligned for the best speed, any float alignment works). */
void df_mlp_pack(const df_mlp_t *m, float *dst);
/* One packed layer (as df_mlp_pack lays it out): y[out] = W x + b, ReLU
 * when relu != 0. The input is x[i], or x[idx[i]] when idx is not NULL
 * (a gather fused into the read). y must not alias x. */
void df_dense_packed(int in, int out, const float *layer, const float *x,
                     const int32_t *idx, float *y, int relu);
/* Forward one row through the packed copy pk of m (m gives the shape, pk is
 * borrowed). Input x[i], or x[idx[i]] for i < m->dims[0] when idx is not
 * NULL. act: df_mlp_work_floats(m,1) floats (borrowed). Returns a pointer
 * into act to the output [out]. */
const float *df_mlp_forward_packed(const df_mlp_t *m, const float *pk,
                                   const int32_t *idx, const float *x,
                                   float *act);
/* Forward B rows x [B,in] through the packed copy pk of m, like
 * df_mlp_forward (act: df_mlp_work_floats(m,B) floats, borrowed; returns a
 * pointer into act to the output [B,out]). With AVX-512 four poses share
 * every weight load (a small GEMM kernel); without it, OpenBLAS sgemm on
 * the packed panels. */
const float *df_mlp_forward_packed_batch(const df_mlp_t *m, const float *pk, int B,
                                         const float *x, float *act);
/* y[r*3+c] += sum_a M[r*n+a] x3[a*3+c] for r < rows, c < 3: three
 * matrix-vector products sharing M [rows,n] row-major, M read exactly once.
 * tmp: 3n floats scratch (borrowed; x3 is de-interleaved into it). */
void df_matvec3_add(int64_t rows, int n, const float *M, const float *x3,
                    float *y, float *tmp);

typedef struct df_mlp_opt {
    int adam;          /* 1: Adam, 0: SGD with momentum */
    float lr, beta1, beta2, eps, momentum, weight_decay;
    int64_t t;         /* step count */
    df_mlp_t *m1, *m2; /* moments (m2 only for Adam) */
} df_mlp_opt_t;

int df_mlp_opt_init(df_mlp_opt_t *o, const df_mlp_t *m, int adam, float lr,
                    df_error_t *err);
void df_mlp_opt_free(df_mlp_opt_t *o);
/* One update with gradient g (already averaged over the batch). */
void df_mlp_opt_step(df_mlp_opt_t *o, df_mlp_t *m, const df_mlp_t *g);

/* Losses over n values: return the mean loss and write d(mean loss)/d pred
 * into grad (may be NULL). */
double df_loss_l1(int64_t n, const float *pred, const float *target,
                  float *grad);
double df_loss_l2(int64_t n, const float *pred, const float *target,
                  float *grad);

#endif

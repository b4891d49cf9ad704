/* nn_conv.h — 1D convolution over time for small sequence networks (the
 * decomposition's trajectory network, core/decompose/decompose_net.c).
 *
 * DESIGN
 * Activations are time-major: one sample is [T, C] row-major (the C
 * channels of a time step contiguous), a batch is B samples back to back.
 * With that layout the receptive field of output step t is one contiguous
 * run of k*cin floats of the input (rows t*stride - pad .. + k - 1), so
 * im2col is a copy per output step with zero rows at the edges, and the
 * layer is one sgemm for the whole batch:
 *     Y [B*Tout, cout] = col [B*Tout, k*cin] · Wᵀ + b,
 * W row-major [cout, k*cin] (inner index kk*cin + c). Backward is the same
 * products transposed (dW += dYᵀ col, dcol = dY W) and a scatter-add of
 * dcol back onto the input rows (col2im). Callers pass every buffer; no
 * function here allocates except df_conv1d_new.
 *
 * Adam on a plain float array (df_adam_step) lets a caller update conv
 * layers beside a df_mlp_t (nn.h) with the same hyper-parameters.
 */
#ifndef DF_NN_CONV_H
#define DF_NN_CONV_H

#include "df.h"
#include <stddef.h>
#include <stdint.h>

typedef struct df_conv1d {
    int cin, cout, k, stride, pad;
    float *w; /* [cout, k*cin] */
    float *b; /* [cout] */
} df_conv1d_t;

/* Output length for input length T: (T + 2 pad - k) / stride + 1. */
int df_conv1d_out_len(const df_conv1d_t *c, int T);

/* Allocates w and b (zero); seed > 0 draws He-normal weights
 * (sd = sqrt(2 / (k cin))). Free with df_conv1d_free. */
int df_conv1d_new(df_conv1d_t *c, int cin, int cout, int k, int stride, int pad,
                  uint64_t seed, df_error_t *err);
void df_conv1d_free(df_conv1d_t *c);

/* Floats of the im2col buffer for a batch of B samples of length T. */
size_t df_conv1d_col_floats(const df_conv1d_t *c, int B, int T);

/* y [B, Tout, cout] = conv(x [B, T, cin]) (+ ReLU when relu). col:
 * df_conv1d_col_floats floats (borrowed), left holding the im2col of x
 * for the backward pass. */
void df_conv1d_forward(const df_conv1d_t *c, int B, int T, const float *x, float *col,
                       float *y, int relu);

/* Backward of the batch just run (same col, and y when relu). dy
 * [B, Tout, cout] is the loss gradient w.r.t. the output (ReLU's mask is
 * applied in place when relu). Adds to gw [cout, k*cin] and gb [cout].
 * dx (may be NULL): [B, T, cin] receives d loss / d x (overwritten). dcol:
 * df_conv1d_col_floats floats scratch (unused when dx is NULL). */
void df_conv1d_backward(const df_conv1d_t *c, int B, int T, const float *col, const float *y,
                        float *dy, int relu, float *gw, float *gb, float *dx, float *dcol);

/* One Adam step on n parameters p with gradient g and moments m1, m2
 * (zero-initialised by the caller); t is the step count after this step
 * (1, 2, ...). */
void df_adam_step(float *p, const float *g, float *m1, float *m2, size_t n, int64_t t,
                  float lr, float beta1, float beta2, float eps);

#endif

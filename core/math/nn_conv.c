/* nn_conv.c — 1D convolution over time as im2col + one sgemm per batch
 * (design in nn_conv.h), and Adam on plain arrays.
 */
#include "math/nn_conv.h"
#include "math/nn.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int df_conv1d_out_len(const df_conv1d_t *c, int T)
{
    int n = T + 2 * c->pad - c->k;
    return n < 0 ? 0 : n / c->stride + 1;
}

int df_conv1d_new(df_conv1d_t *c, int cin, int cout, int k, int stride, int pad,
                  uint64_t seed, df_error_t *err)
{
    memset(c, 0, sizeof *c);
    if (cin < 1 || cout < 1 || k < 1 || stride < 1 || pad < 0 || pad >= k ||
        (int64_t)cin * k > (1 << 20) || cout > (1 << 20))
        return df_error_set(err, DF_EINVAL, "conv1d: bad shape (cin %d, cout %d, k %d, "
                                            "stride %d, pad %d)", cin, cout, k, stride, pad);
    c->cin = cin, c->cout = cout, c->k = k, c->stride = stride, c->pad = pad;
    size_t n = (size_t)cout * k * cin;
    c->w = calloc(n, sizeof(float));
    c->b = calloc((size_t)cout, sizeof(float));
    if (!c->w || !c->b) {
        df_conv1d_free(c);
        return df_error_set(err, DF_ENOMEM, "conv1d: out of memory");
    }
    if (seed) {
        df_rng_t r = {seed * 0x2545F4914F6CDD1DULL + 29};
        double sd = sqrt(2.0 / ((double)k * cin));
        for (size_t i = 0; i < n; i++) c->w[i] = (float)(sd * df_rng_normal(&r));
    }
    return DF_OK;
}

void df_conv1d_free(df_conv1d_t *c)
{
    free(c->w);
    free(c->b);
    c->w = c->b = NULL;
}

size_t df_conv1d_col_floats(const df_conv1d_t *c, int B, int T)
{
    return (size_t)B * (size_t)df_conv1d_out_len(c, T) * (size_t)c->k * (size_t)c->cin;
}

void df_conv1d_forward(const df_conv1d_t *c, int B, int T, const float *x, float *col,
                       float *y, int relu)
{
    const int To = df_conv1d_out_len(c, T), kc = c->k * c->cin;
    const size_t rows = (size_t)B * To;
    if (!rows) return;
    for (int s = 0; s < B; s++) {
        const float *xs = x + (size_t)s * T * c->cin;
        for (int t = 0; t < To; t++) {
            float *o = col + ((size_t)s * To + t) * kc;
            int t0 = t * c->stride - c->pad;
            for (int kk = 0; kk < c->k; kk++) {
                int ti = t0 + kk;
                if (ti < 0 || ti >= T)
                    memset(o + kk * c->cin, 0, sizeof(float) * c->cin);
                else
                    memcpy(o + kk * c->cin, xs + (size_t)ti * c->cin, sizeof(float) * c->cin);
            }
        }
    }
    for (size_t r = 0; r < rows; r++) memcpy(y + r * c->cout, c->b, sizeof(float) * c->cout);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, c->cout, kc, 1.0f, col, kc,
                c->w, kc, 1.0f, y, c->cout);
    if (relu)
        for (size_t q = 0; q < rows * c->cout; q++) y[q] = y[q] > 0 ? y[q] : 0.0f;
}

void df_conv1d_backward(const df_conv1d_t *c, int B, int T, const float *col, const float *y,
                        float *dy, int relu, float *gw, float *gb, float *dx, float *dcol)
{
    const int To = df_conv1d_out_len(c, T), kc = c->k * c->cin;
    const size_t rows = (size_t)B * To;
    if (dx) memset(dx, 0, sizeof(float) * (size_t)B * T * c->cin);
    if (!rows) return;
    if (relu)
        for (size_t q = 0; q < rows * c->cout; q++)
            if (!(y[q] > 0)) dy[q] = 0.0f;
    for (size_t r = 0; r < rows; r++)
        for (int o = 0; o < c->cout; o++) gb[o] += dy[r * c->cout + o];
    /* gw [cout, kc] += dyᵀ [cout, rows] · col [rows, kc] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c->cout, kc, (int)rows, 1.0f, dy,
                c->cout, col, kc, 1.0f, gw, kc);
    if (!dx) return;
    /* dcol [rows, kc] = dy [rows, cout] · W [cout, kc]; col2im */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, kc, c->cout, 1.0f, dy,
                c->cout, c->w, kc, 0.0f, dcol, kc);
    for (int s = 0; s < B; s++) {
        float *xs = dx + (size_t)s * T * c->cin;
        for (int t = 0; t < To; t++) {
            const float *o = dcol + ((size_t)s * To + t) * kc;
            int t0 = t * c->stride - c->pad;
            for (int kk = 0; kk < c->k; kk++) {
                int ti = t0 + kk;
                if (ti < 0 || ti >= T) continue;
                float *d = xs + (size_t)ti * c->cin;
                const float *g = o + kk * c->cin;
                for (int q = 0; q < c->cin; q++) d[q] += g[q];
            }
        }
    }
}

void df_adam_step(float *p, const float *g, float *m1, float *m2, size_t n, int64_t t,
                  float lr, float beta1, float beta2, float eps)
{
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m1[i] = beta1 * m1[i] + (1 - beta1) * g[i];
        m2[i] = beta2 * m2[i] + (1 - beta2) * g[i] * g[i];
        p[i] -= lr * (m1[i] / c1) / (sqrtf(m2[i] / c2) + eps);
    }
}

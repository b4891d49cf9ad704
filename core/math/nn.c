/* nn.c — MLP forward/backward as GEMMs (OpenBLAS), Adam / SGD-momentum,
 * L1 / L2 losses, seeded RNG, and the packed batch-1 kernels (own AVX2/FMA
 * loops with a plain-C fallback, chosen at compile time like core/math/skin.c).
 * See nn.h for the design.
 */
#include "math/nn.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DF__NN_AVX2 1
#if defined(__AVX512F__)
#define DF__NN_AVX512 1
#endif
#endif

double df_rng_normal(df_rng_t *r)
{
    double u1 = df_rng_u01(r), u2 = df_rng_u01(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double df_rng_trunc_normal(df_rng_t *r, double mu, double sigma, double lo,
                           double hi)
{
    if (!(hi > lo)) return lo;
    for (int i = 0; i < 64; i++) {
        double x = mu + sigma * df_rng_normal(r);
        if (x >= lo && x <= hi) return x;
    }
    return lo + (hi - lo) * df_rng_u01(r);
}

static int mlp_alloc(int n_layers, const int *dims, df_mlp_t **out,
                     df_error_t *err)
{
    if (n_layers < 1 || n_layers > DF_MLP_MAX_LAYERS)
        return df_error_set(err, DF_EINVAL, "mlp: %d layers (1..%d)",
                            n_layers, DF_MLP_MAX_LAYERS);
    for (int l = 0; l <= n_layers; l++)
        if (dims[l] < 1 || dims[l] > (1 << 20))
            return df_error_set(err, DF_EINVAL, "mlp: width %d of layer %d",
                                dims[l], l);
    df_mlp_t *m = calloc(1, sizeof *m);
    if (!m) return df_error_set(err, DF_ENOMEM, "mlp: out of memory");
    m->n_layers = n_layers;
    m->owns = 1;
    for (int l = 0; l <= n_layers; l++) m->dims[l] = dims[l];
    for (int l = 0; l < n_layers; l++) {
        m->w[l] = calloc((size_t)dims[l + 1] * dims[l], sizeof(float));
        m->b[l] = calloc((size_t)dims[l + 1], sizeof(float));
        if (!m->w[l] || !m->b[l]) {
            df_mlp_free(&m);
            return df_error_set(err, DF_ENOMEM, "mlp: out of memory");
        }
    }
    *out = m;
    return DF_OK;
}

int df_mlp_new(int n_layers, const int *dims, uint64_t seed, df_mlp_t **out,
               df_error_t *err)
{
    int rc = mlp_alloc(n_layers, dims, out, err);
    if (rc) return rc;
    df_rng_t r = {seed * 0x2545F4914F6CDD1DULL + 17};
    for (int l = 0; l < n_layers; l++) {
        double sd = sqrt(2.0 / dims[l]);
        if (l == n_layers - 1) sd = sqrt(1.0 / dims[l]);
        size_t n = (size_t)dims[l + 1] * dims[l];
        for (size_t i = 0; i < n; i++)
            (*out)->w[l][i] = (float)(sd * df_rng_normal(&r));
    }
    return DF_OK;
}

int df_mlp_new_like(const df_mlp_t *m, df_mlp_t **out, df_error_t *err)
{
    return mlp_alloc(m->n_layers, m->dims, out, err);
}

void df_mlp_free(df_mlp_t **pm)
{
    if (!pm || !*pm) return;
    df_mlp_t *m = *pm;
    if (m->owns)
        for (int l = 0; l < m->n_layers; l++) {
            free(m->w[l]);
            free(m->b[l]);
        }
    free(m);
    *pm = NULL;
}

int64_t df_mlp_n_params(const df_mlp_t *m)
{
    int64_t n = 0;
    for (int l = 0; l < m->n_layers; l++)
        n += (int64_t)m->dims[l + 1] * (m->dims[l] + 1);
    return n;
}

int df_mlp_copy(df_mlp_t *dst, const df_mlp_t *src)
{
    DF_ASSERT(dst->n_layers == src->n_layers);
    for (int l = 0; l < src->n_layers; l++) {
        memcpy(dst->w[l], src->w[l],
               sizeof(float) * src->dims[l + 1] * src->dims[l]);
        memcpy(dst->b[l], src->b[l], sizeof(float) * src->dims[l + 1]);
    }
    return DF_OK;
}

void df_mlp_zero(df_mlp_t *g)
{
    for (int l = 0; l < g->n_layers; l++) {
        memset(g->w[l], 0, sizeof(float) * g->dims[l + 1] * g->dims[l]);
        memset(g->b[l], 0, sizeof(float) * g->dims[l + 1]);
    }
}

size_t df_mlp_work_floats(const df_mlp_t *m, int B)
{
    size_t n = 0;
    for (int l = 1; l <= m->n_layers; l++) n += (size_t)B * m->dims[l];
    return n;
}

float *df_mlp_forward(const df_mlp_t *m, int B, const float *x, float *act)
{
    const float *in = x;
    float *y = act;
    for (int l = 0; l < m->n_layers; l++) {
        int ni = m->dims[l], no = m->dims[l + 1];
        if (B == 1) {
            memcpy(y, m->b[l], sizeof(float) * no);
            cblas_sgemv(CblasRowMajor, CblasNoTrans, no, ni, 1.0f, m->w[l], ni,
                        in, 1, 1.0f, y, 1);
        } else {
            for (int b = 0; b < B; b++)
                memcpy(y + (size_t)b * no, m->b[l], sizeof(float) * no);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, no, ni,
                        1.0f, in, ni, m->w[l], ni, 1.0f, y, no);
        }
        if (l < m->n_layers - 1) {
            size_t n = (size_t)B * no;
            for (size_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        }
        in = y;
        y += (size_t)B * no;
    }
    return (float *)in;
}

void df_mlp_backward(const df_mlp_t *m, int B, const float *x,
                     const float *act, float *dy, df_mlp_t *g, float *dx,
                     float *tmp)
{
    /* offsets of each layer's output in act */
    size_t off[DF_MLP_MAX_LAYERS + 1];
    off[0] = 0;
    for (int l = 0; l < m->n_layers; l++)
        off[l + 1] = off[l] + (size_t)B * m->dims[l + 1];
    float *cur = dy; /* gradient w.r.t. output of layer l (post-activation) */
    for (int l = m->n_layers - 1; l >= 0; l--) {
        int ni = m->dims[l], no = m->dims[l + 1];
        const float *y = act + off[l];
        if (l < m->n_layers - 1) { /* ReLU mask */
            size_t n = (size_t)B * no;
            for (size_t i = 0; i < n; i++)
                if (y[i] <= 0.0f) cur[i] = 0.0f;
        }
        const float *in = l ? act + off[l - 1] : x;
        /* dW += cur^T in ; db += sum_b cur */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, no, ni, B, 1.0f,
                    cur, no, in, ni, 1.0f, g->w[l], ni);
        for (int b = 0; b < B; b++) {
            const float *c = cur + (size_t)b * no;
            for (int o = 0; o < no; o++) g->b[l][o] += c[o];
        }
        /* tmp's layer-(l-1) region never aliases cur (layer l region) */
        float *prev = l > 0 ? tmp + off[l - 1] : dx;
        if (prev)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, ni, no,
                        1.0f, cur, no, m->w[l], ni, 0.0f, prev, ni);
        cur = prev;
    }
}

int df_mlp_opt_init(df_mlp_opt_t *o, const df_mlp_t *m, int adam, float lr,
                    df_error_t *err)
{
    memset(o, 0, sizeof *o);
    o->adam = adam;
    o->lr = lr;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->momentum = 0.9f;
    int rc = df_mlp_new_like(m, &o->m1, err);
    if (!rc && adam) rc = df_mlp_new_like(m, &o->m2, err);
    if (rc) df_mlp_opt_free(o);
    return rc;
}

void df_mlp_opt_free(df_mlp_opt_t *o)
{
    df_mlp_free(&o->m1);
    df_mlp_free(&o->m2);
}

static void step_arr(df_mlp_opt_t *o, float *p, const float *g, float *m1,
                     float *m2, size_t n, float c1, float c2)
{
    if (o->adam) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + o->weight_decay * p[i];
            m1[i] = o->beta1 * m1[i] + (1 - o->beta1) * gi;
            m2[i] = o->beta2 * m2[i] + (1 - o->beta2) * gi * gi;
            p[i] -= o->lr * (m1[i] / c1) / (sqrtf(m2[i] / c2) + o->eps);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + o->weight_decay * p[i];
            m1[i] = o->momentum * m1[i] + gi;
            p[i] -= o->lr * m1[i];
        }
    }
}

void df_mlp_opt_step(df_mlp_opt_t *o, df_mlp_t *m, const df_mlp_t *g)
{
    o->t++;
    float c1 = 1.0f - powf(o->beta1, (float)o->t);
    float c2 = 1.0f - powf(o->beta2, (float)o->t);
    for (int l = 0; l < m->n_layers; l++) {
        size_t nw = (size_t)m->dims[l + 1] * m->dims[l];
        step_arr(o, m->w[l], g->w[l], o->m1->w[l], o->adam ? o->m2->w[l] : NULL,
                 nw, c1, c2);
        step_arr(o, m->b[l], g->b[l], o->m1->b[l], o->adam ? o->m2->b[l] : NULL,
                 (size_t)m->dims[l + 1], c1, c2);
    }
}

double df_loss_l1(int64_t n, const float *pred, const float *target,
                  float *grad)
{
    double s = 0;
    float inv = 1.0f / (float)n;
    for (int64_t i = 0; i < n; i++) {
        float d = pred[i] - target[i];
        s += fabsf(d);
        if (grad) grad[i] = d > 0 ? inv : (d < 0 ? -inv : 0.0f);
    }
    return s / (double)n;
}

double df_loss_l2(int64_t n, const float *pred, const float *target,
                  float *grad)
{
    double s = 0;
    float inv = 2.0f / (float)n;
    for (int64_t i = 0; i < n; i++) {
        float d = pred[i] - target[i];
        s += (double)d * d;
        if (grad) grad[i] = d * inv;
    }
    return s / (double)n;
}

/* ------------------------------------------------- packed batch-1 path */
static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

size_t df_mlp_packed_floats(const df_mlp_t *m)
{
    size_t n = 0;
    for (int l = 0; l < m->n_layers; l++)
        n += up16((size_t)m->dims[l + 1]) + up16((size_t)m->dims[l + 1] * m->dims[l]);
    return n;
}

void df_mlp_pack(const df_mlp_t *m, float *dst)
{
    memset(dst, 0, sizeof(float) * df_mlp_packed_floats(m));
    for (int l = 0; l < m->n_layers; l++) {
        int ni = m->dims[l], no = m->dims[l + 1];
        memcpy(dst, m->b[l], sizeof(float) * no);
        float *w = dst + up16((size_t)no);
        if (no >= 8) /* transposed panels of 64 outputs: [in,pw] each, back to back */
            for (int o0 = 0; o0 < no; o0 += 64) {
                int pw = no - o0 < 64 ? no - o0 : 64;
                float *pn = w + (size_t)o0 * ni;
                for (int o = 0; o < pw; o++)
                    for (int i = 0; i < ni; i++) pn[(size_t)i * pw + o] = m->w[l][(size_t)(o0 + o) * ni + i];
            }
        else
            memcpy(w, m->w[l], sizeof(float) * no * ni);
        dst = w + up16((size_t)no * ni);
    }
}

#ifdef DF__NN_AVX2
static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

static inline float xin(const float *x, const int32_t *idx, int i) { return idx ? x[idx[i]] : x[i]; }

/* outputs o0.. of one packed layer (o0 a multiple of 64, 0 = all) */
static void dense1(int in, int out, const float *layer, const float *x,
                   const int32_t *idx, float *y, int relu, int o0)
{
    const float *b = layer, *W = layer + up16((size_t)out);
    int o = o0;
    if (out >= 8) { /* panels: y[o0+k] = b[o0+k] + sum_i x_i P[i*pw+k], P = W + o0*in */
#ifdef DF__NN_AVX2
        const __m256 z = _mm256_setzero_ps();
        for (; o + 64 <= out; o += 64) { /* full panels, pw = 64: 64 outputs in registers */
            __m256 a0 = _mm256_loadu_ps(b + o), a1 = _mm256_loadu_ps(b + o + 8),
                   a2 = _mm256_loadu_ps(b + o + 16), a3 = _mm256_loadu_ps(b + o + 24),
                   a4 = _mm256_loadu_ps(b + o + 32), a5 = _mm256_loadu_ps(b + o + 40),
                   a6 = _mm256_loadu_ps(b + o + 48), a7 = _mm256_loadu_ps(b + o + 56);
            const float *w = W + (size_t)o * in;
            for (int i = 0; i < in; i++, w += 64) {
                __m256 xi = _mm256_set1_ps(xin(x, idx, i));
                a0 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w), a0);
                a1 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 8), a1);
                a2 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 16), a2);
                a3 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 24), a3);
                a4 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 32), a4);
                a5 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 40), a5);
                a6 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 48), a6);
                a7 = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + 56), a7);
            }
            if (relu) {
                a0 = _mm256_max_ps(a0, z), a1 = _mm256_max_ps(a1, z), a2 = _mm256_max_ps(a2, z);
                a3 = _mm256_max_ps(a3, z), a4 = _mm256_max_ps(a4, z), a5 = _mm256_max_ps(a5, z);
                a6 = _mm256_max_ps(a6, z), a7 = _mm256_max_ps(a7, z);
            }
            _mm256_storeu_ps(y + o, a0), _mm256_storeu_ps(y + o + 8, a1);
            _mm256_storeu_ps(y + o + 16, a2), _mm256_storeu_ps(y + o + 24, a3);
            _mm256_storeu_ps(y + o + 32, a4), _mm256_storeu_ps(y + o + 40, a5);
            _mm256_storeu_ps(y + o + 48, a6), _mm256_storeu_ps(y + o + 56, a7);
        }
        /* the last panel, narrower than 64: 8 columns at a time */
        const int pw = out - o, o0 = o;
        for (; o + 8 <= out; o += 8) {
            __m256 a = _mm256_loadu_ps(b + o);
            const float *w = W + (size_t)o0 * in + (o - o0);
            for (int i = 0; i < in; i++, w += pw) a = _mm256_fmadd_ps(_mm256_set1_ps(xin(x, idx, i)), _mm256_loadu_ps(w), a);
            if (relu) a = _mm256_max_ps(a, z);
            _mm256_storeu_ps(y + o, a);
        }
#endif
        for (int o0 = o / 64 * 64; o < out; o0 += 64) { /* remaining columns (all of them without AVX2) */
            int pw = out - o0 < 64 ? out - o0 : 64, k0 = o, k1 = o0 + pw;
            for (int k = k0; k < k1; k++) y[k] = b[k];
            for (int i = 0; i < in; i++) {
                float xi = xin(x, idx, i);
                const float *w = W + (size_t)o0 * in + (size_t)i * pw - o0;
                for (int k = k0; k < k1; k++) y[k] += xi * w[k];
            }
            if (relu)
                for (int k = k0; k < k1; k++) y[k] = y[k] > 0.0f ? y[k] : 0.0f;
            o = k1;
        }
        return;
    }
    for (; o < out; o++) { /* row-major: one dot product per output */
        const float *w = W + (size_t)o * in;
        float s = 0.0f;
        int i = 0;
#ifdef DF__NN_AVX2
        if (!idx) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (; i + 16 <= in; i += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
            }
            for (; i + 8 <= in; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
            s = hsum8(_mm256_add_ps(a0, a1));
        }
#endif
        for (; i < in; i++) s += w[i] * xin(x, idx, i);
        s += b[o];
        y[o] = relu && s < 0.0f ? 0.0f : s;
    }
}

void df_dense_packed(int in, int out, const float *layer, const float *x,
                     const int32_t *idx, float *y, int relu)
{
    dense1(in, out, layer, x, idx, y, relu, 0);
}

#ifdef DF__NN_AVX512
/* the full 64-output panels of one packed layer for FOUR poses: x rows ldx
 * apart, y rows ldy apart. 16 accumulators (4 poses x 64 outputs) + 4
 * weight registers: each weight is loaded once for four poses, so the
 * kernel is a small GEMM that streams the weights (OpenBLAS 0.3.21 runs
 * its AVX2 Haswell kernels on this CPU: measured 1.6-3x slower for these
 * shapes, docs/rigapprox.md). */
static void panels4(int in, int out, const float *layer, const float *x, size_t ldx,
                    float *y, size_t ldy, int relu)
{
    const float *b = layer, *W = layer + up16((size_t)out);
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    for (int o = 0; o + 64 <= out; o += 64) {
        __m512 a[16];
        for (int k = 0; k < 4; k++) a[k] = a[4 + k] = a[8 + k] = a[12 + k] = _mm512_loadu_ps(b + o + 16 * k);
        const float *w = W + (size_t)o * in;
        for (int i = 0; i < in; i++, w += 64) {
            __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16), w2 = _mm512_loadu_ps(w + 32),
                   w3 = _mm512_loadu_ps(w + 48), s;
#define POSE(xq, q)                                                                   \
    s = _mm512_set1_ps(xq[i]);                                                        \
    a[q * 4] = _mm512_fmadd_ps(s, w0, a[q * 4]), a[q * 4 + 1] = _mm512_fmadd_ps(s, w1, a[q * 4 + 1]); \
    a[q * 4 + 2] = _mm512_fmadd_ps(s, w2, a[q * 4 + 2]), a[q * 4 + 3] = _mm512_fmadd_ps(s, w3, a[q * 4 + 3])
            POSE(x0, 0);
            POSE(x1, 1);
            POSE(x2, 2);
            POSE(x3, 3);
#undef POSE
        }
        for (int q = 0; q < 4; q++)
            for (int k = 0; k < 4; k++) {
                __m512 v = a[q * 4 + k];
                if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
                _mm512_storeu_ps(y + q * ldy + o + 16 * k, v);
            }
    }
}
#endif

#ifndef DF__NN_AVX512
/* without AVX-512: OpenBLAS on the packed layout (a panel [in,pw] is a block
 * of W^T, row-major), as fast as df_mlp_forward on the original weights */
static void packed_gemm(int in, int out, const float *layer, int B, const float *x, float *y, int relu)
{
    const float *b = layer, *W = layer + up16((size_t)out);
    for (int p = 0; p < B; p++) memcpy(y + (size_t)p * out, b, sizeof(float) * out);
    if (out >= 8)
        for (int o0 = 0; o0 < out; o0 += 64) {
            int pw = out - o0 < 64 ? out - o0 : 64;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, pw, in, 1.0f, x, in, W + (size_t)o0 * in, pw,
                        1.0f, y + o0, out);
        }
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
    if (relu)
        for (size_t i = 0; i < (size_t)B * out; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}
#endif

const float *df_mlp_forward_packed_batch(const df_mlp_t *m, const float *pk, int B,
                                         const float *x, float *act)
{
    const float *in = x;
    float *y = act;
    for (int l = 0; l < m->n_layers; l++) {
        int ni = m->dims[l], no = m->dims[l + 1], relu = l < m->n_layers - 1, p = 0;
#ifdef DF__NN_AVX512
        if (no >= 64)
            for (; p + 4 <= B; p += 4) {
                panels4(ni, no, pk, in + (size_t)p * ni, (size_t)ni, y + (size_t)p * no, (size_t)no, relu);
                if (no % 64) /* the narrower last panel, pose by pose */
                    for (int q = p; q < p + 4; q++)
                        dense1(ni, no, pk, in + (size_t)q * ni, NULL, y + (size_t)q * no, relu, no / 64 * 64);
            }
#else
        if (B > 1) {
            packed_gemm(ni, no, pk, B, in, y, relu);
            p = B;
        }
#endif
        for (; p < B; p++) dense1(ni, no, pk, in + (size_t)p * ni, NULL, y + (size_t)p * no, relu, 0);
        pk += up16((size_t)no) + up16((size_t)no * ni);
        in = y;
        y += (size_t)B * no;
    }
    return in;
}

const float *df_mlp_forward_packed(const df_mlp_t *m, const float *pk,
                                   const int32_t *idx, const float *x,
                                   float *act)
{
    const float *in = x;
    float *y = act;
    for (int l = 0; l < m->n_layers; l++) {
        int ni = m->dims[l], no = m->dims[l + 1];
        df_dense_packed(ni, no, pk, in, l ? NULL : idx, y, l < m->n_layers - 1);
        pk += up16((size_t)no) + up16((size_t)no * ni);
        in = y;
        y += no;
    }
    return in;
}

#ifdef DF__NN_AVX2
/* lanes 0..k-1 on (k in 0..8) */
static inline __m256i lanes(int k)
{
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(m + 8 - k));
}
/* [sum a, sum b, sum c, sum d] */
static inline __m128 hsum4x8(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
#endif

void df_matvec3_add(int64_t rows, int n, const float *M, const float *x3,
                    float *y, float *tmp)
{
    float *x0 = tmp, *x1 = tmp + n, *x2 = tmp + 2 * (size_t)n;
    for (int a = 0; a < n; a++) x0[a] = x3[a * 3], x1[a] = x3[a * 3 + 1], x2[a] = x3[a * 3 + 2];
    int64_t r = 0;
#ifdef DF__NN_AVX2
    /* four rows at a time: 12 FMA chains (row x coordinate), each x vector
     * loaded once for four rows; the tail through a masked load */
    const int nt = n & 7, n8 = n & ~7;
    const __m256i mk = lanes(nt);
    for (; r + 4 <= rows; r += 4) {
        const float *h0 = M + (size_t)r * n, *h1 = h0 + n, *h2 = h1 + n, *h3 = h2 + n;
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
        __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
        for (int a = 0; a <= n8; a += 8) {
            __m256 u, v, w, h;
            if (a < n8) {
                u = _mm256_loadu_ps(x0 + a), v = _mm256_loadu_ps(x1 + a), w = _mm256_loadu_ps(x2 + a);
            } else if (nt) {
                u = _mm256_maskload_ps(x0 + a, mk), v = _mm256_maskload_ps(x1 + a, mk), w = _mm256_maskload_ps(x2 + a, mk);
            } else {
                break;
            }
#define ROW(h_, c0, c1, c2)                                                      \
    h = a < n8 ? _mm256_loadu_ps(h_ + a) : _mm256_maskload_ps(h_ + a, mk);       \
    c0 = _mm256_fmadd_ps(h, u, c0), c1 = _mm256_fmadd_ps(h, v, c1), c2 = _mm256_fmadd_ps(h, w, c2)
            ROW(h0, c00, c01, c02);
            ROW(h1, c10, c11, c12);
            ROW(h2, c20, c21, c22);
            ROW(h3, c30, c31, c32);
#undef ROW
        }
        /* y[r*3 .. r*3+11] += the 12 sums, in that order */
        __m128 s0 = hsum4x8(c00, c01, c02, c10), s1 = hsum4x8(c11, c12, c20, c21), s2 = hsum4x8(c22, c30, c31, c32);
        float *yr = y + r * 3;
        _mm_storeu_ps(yr, _mm_add_ps(_mm_loadu_ps(yr), s0));
        _mm_storeu_ps(yr + 4, _mm_add_ps(_mm_loadu_ps(yr + 4), s1));
        _mm_storeu_ps(yr + 8, _mm_add_ps(_mm_loadu_ps(yr + 8), s2));
    }
#endif
    for (; r < rows; r++) {
        const float *h = M + (size_t)r * n;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
        for (int a = 0; a < n; a++) s0 += h[a] * x0[a], s1 += h[a] * x1[a], s2 += h[a] * x2[a];
        y[r * 3] += s0, y[r * 3 + 1] += s1, y[r * 3 + 2] += s2;
    }
}

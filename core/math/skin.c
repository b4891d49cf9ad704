/* skin.c — LBS and DQS kernels over the blocked influence layout (skin.h).
 *
 * DESIGN
 * Skinning is compute-bound when written as a plain loop (the scalar
 * baseline of make bench-core, ~15 ns/vertex) because every vertex blends K 3x4 matrices. The AVX2
 * kernel keeps each joint's matrix as two 8-float registers (columns c0c1,
 * c2c3, see skin.h), so blending is 2 FMAs per influence with a broadcast
 * weight, and the transform is 2 FMAs + a lane fold. Matrices (64 B per
 * joint) stay in L1 for any realistic skeleton; the per-vertex stream is
 * position (12 B) + k*(4+4) B of influences + output.
 *
 * We vectorise over the matrix entries rather than across vertices: the
 * across-vertex (SoA) form needs 12 gathers per influence per 16 vertices,
 * and on this machine it ran ~5x slower than this kernel even with SoA
 * outputs (bench_core prints both; figures in docs/rigged.md). Blocks still matter: they give
 * a per-block slot count so the inner loop trip count is uniform and
 * predictable.
 *
 * DQS is written in scalar C with an 8-wide inner blend the compiler
 * vectorises; it is not on the critical path (LBS is the default).
 */
#include "math/skin.h"
#include "math/mathx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DF__SKIN_HAVE_AVX2 1
#endif
#if defined(DF__SKIN_HAVE_AVX2) && defined(__AVX512F__)
#define DF__SKIN_HAVE_AVX512 1
#endif

typedef struct {
    int32_t j;
    float w;
} infl_t;

static void sort_desc(infl_t *a, int n)
{
    for (int i = 1; i < n; i++) { /* insertion sort, n <= 8 */
        infl_t x = a[i];
        int j = i - 1;
        while (j >= 0 && a[j].w < x.w) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = x;
    }
}

int df__skin_build(df__skin_t *s, int64_t n, int k, const int32_t *joints,
                   const float *weights)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->nblocks = (n + DF__SKIN_BLOCK - 1) / DF__SKIN_BLOCK;
    int64_t nb = s->nblocks;
    s->off = calloc((size_t)nb + 1, sizeof *s->off);
    s->kb = calloc((size_t)nb + 1, 1);
    if (!s->off || !s->kb) goto oom;
    /* pass 1: slots per block */
    uint64_t total = 0;
    for (int64_t b = 0; b < nb; b++) {
        int kb = 0;
        for (int i = 0; i < DF__SKIN_BLOCK; i++) {
            int64_t v = b * DF__SKIN_BLOCK + i;
            if (v >= n) break;
            int c = 0;
            for (int q = 0; q < k; q++) c += weights[v * k + q] > 0.0f;
            if (c > kb) kb = c;
        }
        if (kb == 0) kb = 1; /* cannot happen for validated rows */
        s->kb[b] = (uint8_t)kb;
        s->off[b] = total;
        total += (uint64_t)kb * DF__SKIN_BLOCK;
        if (kb > s->kmax) s->kmax = kb;
    }
    s->off[nb] = total;
    s->joints = calloc((size_t)total + 1, sizeof *s->joints);
    s->weights = calloc((size_t)total + 1, sizeof *s->weights);
    if (!s->joints || !s->weights) goto oom;
    /* pass 2: fill, sorted by weight, zero weights dropped */
    for (int64_t b = 0; b < nb; b++) {
        int kb = s->kb[b];
        for (int i = 0; i < DF__SKIN_BLOCK; i++) {
            int64_t v = b * DF__SKIN_BLOCK + i;
            if (v >= n) break;
            infl_t a[8];
            int c = 0;
            for (int q = 0; q < k && c < 8; q++)
                if (weights[v * k + q] > 0.0f) {
                    a[c].j = joints[v * k + q];
                    a[c].w = weights[v * k + q];
                    c++;
                }
            sort_desc(a, c);
            uint64_t e = s->off[b] + (uint64_t)i * kb;
            for (int q = 0; q < c; q++) {
                s->joints[e + q] = a[q].j;
                s->weights[e + q] = a[q].w;
            }
        }
    }
    return DF_OK;
oom:
    df__skin_free(s);
    return DF_ENOMEM;
}

void df__skin_free(df__skin_t *s)
{
    if (!s) return;
    free(s->off);
    free(s->kb);
    free(s->joints);
    free(s->weights);
    memset(s, 0, sizeof *s);
}

void df__skin_pack(const float m[12], float out[16])
{
    for (int c = 0; c < 4; c++) {
        out[4 * c + 0] = m[c];
        out[4 * c + 1] = m[4 + c];
        out[4 * c + 2] = m[8 + c];
        out[4 * c + 3] = 0.0f;
    }
}

/* ------------------------------------------------------------ LBS scalar */

void df__skin_lbs_scalar(const df__skin_t *s, const float *mats,
                         const float *pos, const float *nrm, float *out_pos,
                         float *out_nrm)
{
    for (int64_t b = 0; b < s->nblocks; b++) {
        int kb = s->kb[b];
        const int32_t *J = s->joints + s->off[b];
        const float *W = s->weights + s->off[b];
        for (int i = 0; i < DF__SKIN_BLOCK; i++) {
            int64_t v = b * DF__SKIN_BLOCK + i;
            if (v >= s->n) return;
            float m[16] = {0};
            for (int q = 0; q < kb; q++) {
                const float *sm = mats + 16 * (size_t)J[i * kb + q];
                float w = W[i * kb + q];
                for (int e = 0; e < 16; e++) m[e] += w * sm[e];
            }
            const float *p = pos + 3 * v;
            for (int r = 0; r < 3; r++)
                out_pos[3 * v + r] =
                    m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r];
            if (out_nrm) {
                const float *nn = nrm + 3 * v;
                float o[3];
                for (int r = 0; r < 3; r++)
                    o[r] = m[r] * nn[0] + m[4 + r] * nn[1] + m[8 + r] * nn[2];
                float l2 = o[0] * o[0] + o[1] * o[1] + o[2] * o[2];
                float inv = 1.0f / sqrtf(l2 > 1e-30f ? l2 : 1e-30f);
                for (int r = 0; r < 3; r++) out_nrm[3 * v + r] = o[r] * inv;
            }
        }
    }
}

/* -------------------------------------------------------------- LBS AVX2 */

#ifdef DF__SKIN_HAVE_AVX2
static inline void store3(float *dst, __m128 r, int last)
{
    if (!last) {
        _mm_storeu_ps(dst, r); /* 4th lane overwritten by the next vertex */
    } else {
        float t[4];
        _mm_storeu_ps(t, r);
        dst[0] = t[0];
        dst[1] = t[1];
        dst[2] = t[2];
    }
}

/* o / |o| with 1/sqrt from the 12-bit estimate + one Newton step (relative
 * error ~1e-7, vs a 20-cycle sqrt+div); |o| = 0 gives 0, not NaN. */
static inline __m128 unit(__m128 o, __m128 tiny, __m128 half, __m128 three)
{
    __m128 l2 = _mm_max_ps(_mm_dp_ps(o, o, 0x7F), tiny);
    __m128 y = _mm_rsqrt_ps(l2);
    y = _mm_mul_ps(_mm_mul_ps(half, y),
                   _mm_fnmadd_ps(_mm_mul_ps(l2, y), y, three));
    return _mm_mul_ps(o, y);
}

static void lbs_avx2(const df__skin_t *s, const float *mats, const float *pos,
                     const float *nrm, float *out_pos, float *out_nrm)
{
    const __m128 half = _mm_set1_ps(0.5f), three = _mm_set1_ps(3.0f);
    const __m256i ixy = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i iz = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m128 one3 = _mm_setr_ps(0, 0, 0, 1.0f);
    const __m128 tiny = _mm_set1_ps(1e-30f);
    const int64_t n = s->n;
    for (int64_t b = 0; b < s->nblocks; b++) {
        const int kb = s->kb[b];
        const int32_t *J = s->joints + s->off[b];
        const float *W = s->weights + s->off[b];
        int64_t v0 = b * DF__SKIN_BLOCK;
        int cnt = (int)(n - v0 < DF__SKIN_BLOCK ? n - v0 : DF__SKIN_BLOCK);
        for (int i = 0; i < cnt; i++, J += kb, W += kb) {
            int64_t v = v0 + i;
            const float *m0 = mats + 16 * (size_t)J[0];
            __m256 w = _mm256_broadcast_ss(W);
            __m256 a = _mm256_mul_ps(w, _mm256_load_ps(m0));
            __m256 c = _mm256_mul_ps(w, _mm256_load_ps(m0 + 8));
            for (int q = 1; q < kb; q++) {
                const float *mq = mats + 16 * (size_t)J[q];
                w = _mm256_broadcast_ss(W + q);
                a = _mm256_fmadd_ps(w, _mm256_load_ps(mq), a);
                c = _mm256_fmadd_ps(w, _mm256_load_ps(mq + 8), c);
            }
            /* p = (x y z 1): lanes (x x x x y y y y), (z z z z 1 1 1 1) */
            __m128 p = _mm_blend_ps(_mm_loadu_ps(pos + 3 * v), one3, 0x8);
            __m256 p8 = _mm256_castps128_ps256(p);
            __m256 r = _mm256_fmadd_ps(
                a, _mm256_permutevar8x32_ps(p8, ixy),
                _mm256_mul_ps(c, _mm256_permutevar8x32_ps(p8, iz)));
            __m128 rp = _mm_add_ps(_mm256_castps256_ps128(r),
                                   _mm256_extractf128_ps(r, 1));
            store3(out_pos + 3 * v, rp, v == n - 1);
            if (out_nrm) {
                __m128 nv = _mm_blend_ps(_mm_loadu_ps(nrm + 3 * v),
                                         _mm_setzero_ps(), 0x8);
                __m256 n8 = _mm256_castps128_ps256(nv);
                __m256 rn = _mm256_fmadd_ps(
                    a, _mm256_permutevar8x32_ps(n8, ixy),
                    _mm256_mul_ps(c, _mm256_permutevar8x32_ps(n8, iz)));
                __m128 o = _mm_add_ps(_mm256_castps256_ps128(rn),
                                      _mm256_extractf128_ps(rn, 1));
                store3(out_nrm + 3 * v, unit(o, tiny, half, three),
                       v == n - 1);
            }
        }
    }
}
#endif

#ifdef DF__SKIN_HAVE_AVX512
/* One joint matrix is one 16-float register: blending costs 1 FMA per
 * influence; the transform multiplies by (x x x x y y y y z z z z 1 1 1 1)
 * and folds the four column products. */
static inline __m256 hi256(__m512 x) /* AVX512F only (no DQ needed) */
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
}

/* One block with a compile-time slot count (the switch below instantiates
 * kb = 1..8 so the influence loop is fully unrolled). */
static inline __attribute__((always_inline)) void
block512(const int kb, int cnt, int64_t v0, int64_t n, const int32_t *J,
         const float *W, const float *mats, const float *pos, const float *nrm,
         float *out_pos, float *out_nrm)
{
    const __m512i ib = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
                                         3, 3, 3, 3);
    const __m512 one5 = _mm512_set1_ps(1.0f);
    float tmp[4 * DF__SKIN_BLOCK] __attribute__((aligned(64)));
    if (out_nrm && cnt < DF__SKIN_BLOCK) memset(tmp, 0, sizeof tmp);
    for (int i = 0; i < cnt; i++, J += kb, W += kb) {
        int64_t v = v0 + i;
        __m512 m = _mm512_mul_ps(_mm512_set1_ps(W[0]),
                                 _mm512_load_ps(mats + 16 * (size_t)J[0]));
        for (int q = 1; q < kb; q++)
            m = _mm512_fmadd_ps(_mm512_set1_ps(W[q]),
                                _mm512_load_ps(mats + 16 * (size_t)J[q]), m);
        /* (x x x x y y y y z z z z 1 1 1 1): the masked permute puts the
         * 1s in the translation quarter (no blend needed) */
        __m512 r = _mm512_mul_ps(
            m, _mm512_mask_permutexvar_ps(
                   one5, 0x0FFF, ib,
                   _mm512_castps128_ps512(_mm_loadu_ps(pos + 3 * v))));
        __m256 r2 = _mm256_add_ps(_mm512_castps512_ps256(r), hi256(r));
        __m128 rp = _mm_add_ps(_mm256_castps256_ps128(r2),
                               _mm256_extractf128_ps(r2, 1));
        store3(out_pos + 3 * v, rp, v == n - 1);
        if (out_nrm) {
            __m512 rn = _mm512_mul_ps(
                m, _mm512_maskz_permutexvar_ps(
                       0x0FFF, ib,
                       _mm512_castps128_ps512(_mm_loadu_ps(nrm + 3 * v))));
            __m256 n2 = _mm256_add_ps(_mm512_castps512_ps256(rn), hi256(rn));
            _mm_store_ps(tmp + 4 * i,
                         _mm_add_ps(_mm256_castps256_ps128(n2),
                                    _mm256_extractf128_ps(n2, 1)));
        }
    }
    if (!out_nrm) return;
    /* Normalise the block's normals 4 at a time: each 128-bit lane holds
     * one (x y z 0); in-lane shuffles give |n|^2 per lane, 1/sqrt is the
     * 14-bit estimate + one Newton step; compress drops the 4th lanes and
     * a masked store writes exactly 3 floats per vertex. */
    const __m512 tiny5 = _mm512_set1_ps(1e-30f), half5 = _mm512_set1_ps(0.5f),
                 three5 = _mm512_set1_ps(3.0f);
    for (int g = 0; g < cnt; g += 4) {
        __m512 z = _mm512_load_ps(tmp + 4 * g);
        __m512 sq = _mm512_mul_ps(z, z);
        sq = _mm512_add_ps(sq, _mm512_permute_ps(sq, 0xB1)); /* 1 0 3 2 */
        sq = _mm512_add_ps(sq, _mm512_permute_ps(sq, 0x4E)); /* 2 3 0 1 */
        sq = _mm512_max_ps(sq, tiny5);
        __m512 y = _mm512_rsqrt14_ps(sq);
        y = _mm512_mul_ps(_mm512_mul_ps(half5, y),
                          _mm512_fnmadd_ps(_mm512_mul_ps(sq, y), y, three5));
        __m512 o = _mm512_maskz_compress_ps(0x7777, _mm512_mul_ps(z, y));
        int c = cnt - g < 4 ? cnt - g : 4;
        _mm512_mask_storeu_ps(out_nrm + 3 * (v0 + g),
                              (__mmask16)((1u << (3 * c)) - 1), o);
    }
}

static void lbs_avx512(const df__skin_t *s, const float *mats, const float *pos,
                       const float *nrm, float *out_pos, float *out_nrm)
{
    const int64_t n = s->n;
    for (int64_t b = 0; b < s->nblocks; b++) {
        const int32_t *J = s->joints + s->off[b];
        const float *W = s->weights + s->off[b];
        int64_t v0 = b * DF__SKIN_BLOCK;
        int cnt = (int)(n - v0 < DF__SKIN_BLOCK ? n - v0 : DF__SKIN_BLOCK);
#define DF__KB(k)                                                          \
    case k:                                                                \
        block512(k, cnt, v0, n, J, W, mats, pos, nrm, out_pos, out_nrm);   \
        break;
        switch (s->kb[b]) {
            DF__KB(1) DF__KB(2) DF__KB(3) DF__KB(4)
            DF__KB(5) DF__KB(6) DF__KB(7) DF__KB(8)
        default: DF_ASSERT(!"slot count out of range");
        }
#undef DF__KB
    }
}
#endif

int df__skin_lbs_impl(int impl, const df__skin_t *s, const float *mats,
                      const float *pos, const float *nrm, float *out_pos,
                      float *out_nrm)
{
    switch (impl) {
    case DF__SKIN_SCALAR:
        df__skin_lbs_scalar(s, mats, pos, nrm, out_pos, out_nrm);
        return 0;
#ifdef DF__SKIN_HAVE_AVX2
    case DF__SKIN_AVX2:
        lbs_avx2(s, mats, pos, nrm, out_pos, out_nrm);
        return 0;
#endif
#ifdef DF__SKIN_HAVE_AVX512
    case DF__SKIN_AVX512:
        lbs_avx512(s, mats, pos, nrm, out_pos, out_nrm);
        return 0;
#endif
    default:
        return -1;
    }
}

const char *df__skin_impl_name(int impl)
{
    static const char *const n[] = {"scalar", "avx2", "avx512"};
    return impl >= 0 && impl < 3 ? n[impl] : "?";
}

void df__skin_lbs(const df__skin_t *s, const float *mats, const float *pos,
                  const float *nrm, float *out_pos, float *out_nrm)
{
#if defined(DF__SKIN_HAVE_AVX512)
    lbs_avx512(s, mats, pos, nrm, out_pos, out_nrm);
#elif defined(DF__SKIN_HAVE_AVX2)
    lbs_avx2(s, mats, pos, nrm, out_pos, out_nrm);
#else
    df__skin_lbs_scalar(s, mats, pos, nrm, out_pos, out_nrm);
#endif
}

/* ------------------------------------------------------------------- DQS */

static inline void dqs_lin(const float *lin, const int32_t *jv, const float *wv,
                           int kb, float p[3], float nn[3])
{
    float m[16] = {0};
    for (int q = 0; q < kb; q++) {
        const float *l = lin + 16 * (size_t)jv[q];
        for (int e = 0; e < 16; e++) m[e] += wv[q] * l[e];
    }
    float t[3], u[3];
    for (int r = 0; r < 3; r++) {
        t[r] = m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r];
        u[r] = m[r] * nn[0] + m[4 + r] * nn[1] + m[8 + r] * nn[2];
    }
    memcpy(p, t, 3 * sizeof(float));
    memcpy(nn, u, 3 * sizeof(float));
}

static void dqs_scalar(const df__skin_t *s, const float *dq, const float *lin,
                       const float *pos, const float *nrm, float *out_pos,
                       float *out_nrm)
{
    for (int64_t b = 0; b < s->nblocks; b++) {
        const int kb = s->kb[b];
        const int32_t *J = s->joints + s->off[b];
        const float *W = s->weights + s->off[b];
        for (int i = 0; i < DF__SKIN_BLOCK; i++) {
            int64_t v = b * DF__SKIN_BLOCK + i;
            if (v >= s->n) return;
            const int32_t *jv = J + i * kb;
            const float *wv = W + i * kb;
            float p[3] = {pos[3 * v], pos[3 * v + 1], pos[3 * v + 2]};
            float nn[3] = {0, 0, 0};
            if (out_nrm) {
                nn[0] = nrm[3 * v];
                nn[1] = nrm[3 * v + 1];
                nn[2] = nrm[3 * v + 2];
            }
            if (lin) dqs_lin(lin, jv, wv, kb, p, nn); /* phase 1: scale/shear */
            /* phase 2: blend dual quaternions; sign relative to the first
             * (= heaviest) influence so all lie in one hemisphere */
            const float *d0 = dq + 8 * (size_t)jv[0];
            float bl[8];
            for (int e = 0; e < 8; e++) bl[e] = wv[0] * d0[e];
            for (int q = 1; q < kb; q++) {
                const float *dk = dq + 8 * (size_t)jv[q];
                float dot = d0[0] * dk[0] + d0[1] * dk[1] + d0[2] * dk[2] +
                            d0[3] * dk[3];
                float w = dot < 0 ? -wv[q] : wv[q];
                for (int e = 0; e < 8; e++) bl[e] += w * dk[e];
            }
            /* blended DQ (r, d) -> [R|t] without normalising first:
             * R = rotation of r / |r|, t = 2 (r.w d.v - d.w r.v + r.v x d.v)
             * / |r|^2 */
            float x = bl[0], y = bl[1], z = bl[2], w = bl[3];
            float n2 = x * x + y * y + z * z + w * w;
            float is = 1.0f / (n2 > 1e-30f ? n2 : 1e-30f), s2 = 2.0f * is;
            float R0 = 1 - s2 * (y * y + z * z), R1 = s2 * (x * y - z * w),
                  R2 = s2 * (x * z + y * w), R3 = s2 * (x * y + z * w),
                  R4 = 1 - s2 * (x * x + z * z), R5 = s2 * (y * z - x * w),
                  R6 = s2 * (x * z - y * w), R7 = s2 * (y * z + x * w),
                  R8 = 1 - s2 * (x * x + y * y);
            float dx = bl[4], dy = bl[5], dz = bl[6], dw = bl[7];
            float tx = s2 * (w * dx - dw * x + y * dz - z * dy);
            float ty = s2 * (w * dy - dw * y + z * dx - x * dz);
            float tz = s2 * (w * dz - dw * z + x * dy - y * dx);
            out_pos[3 * v] = R0 * p[0] + R1 * p[1] + R2 * p[2] + tx;
            out_pos[3 * v + 1] = R3 * p[0] + R4 * p[1] + R5 * p[2] + ty;
            out_pos[3 * v + 2] = R6 * p[0] + R7 * p[1] + R8 * p[2] + tz;
            if (out_nrm) {
                float o0 = R0 * nn[0] + R1 * nn[1] + R2 * nn[2];
                float o1 = R3 * nn[0] + R4 * nn[1] + R5 * nn[2];
                float o2 = R6 * nn[0] + R7 * nn[1] + R8 * nn[2];
                float nl = o0 * o0 + o1 * o1 + o2 * o2;
                float ni = 1.0f / sqrtf(nl > 1e-30f ? nl : 1e-30f);
                out_nrm[3 * v] = o0 * ni;
                out_nrm[3 * v + 1] = o1 * ni;
                out_nrm[3 * v + 2] = o2 * ni;
            }
        }
    }
}

/* Phase 1 of DQS for one vertex: blended scale/shear applied to p and n. */

#ifdef DF__SKIN_HAVE_AVX2
/* 8x8 transpose: r[i] = row i in, r[c] = column c out. */
static inline void transpose8(__m256 *r)
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* DQS, 8 vertices at a time: each vertex's DQ blend is one 8-wide FMA per
 * influence (AoS); the block's 8 blended DQs are transposed so that the
 * DQ -> [R|t] conversion, the transform and the normalisation run once per
 * 8 vertices (SoA). */
static void dqs_avx2(const df__skin_t *s, const float *dq, const float *lin,
                     const float *pos, const float *nrm, float *out_pos,
                     float *out_nrm)
{
    float tq[64] __attribute__((aligned(32)));
    float P[6][8] __attribute__((aligned(32)));  /* px py pz nx ny nz */
    float O[6][8] __attribute__((aligned(32)));
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f),
                 tiny = _mm256_set1_ps(1e-30f), half = _mm256_set1_ps(0.5f),
                 three = _mm256_set1_ps(3.0f);
    const int64_t n = s->n;
    for (int64_t b = 0; b < s->nblocks; b++) {
        const int kb = s->kb[b];
        const int32_t *J = s->joints + s->off[b];
        const float *W = s->weights + s->off[b];
        int64_t v0 = b * DF__SKIN_BLOCK;
        int cnt = (int)(n - v0 < DF__SKIN_BLOCK ? n - v0 : DF__SKIN_BLOCK);
        if (cnt < DF__SKIN_BLOCK) {
            memset(tq, 0, sizeof tq);
            memset(P, 0, sizeof P);
        }
        for (int i = 0; i < cnt; i++) {
            int64_t v = v0 + i;
            const int32_t *jv = J + i * kb;
            const float *wv = W + i * kb;
            float p[3] = {pos[3 * v], pos[3 * v + 1], pos[3 * v + 2]};
            float nn[3] = {0, 0, 0};
            if (out_nrm) {
                nn[0] = nrm[3 * v];
                nn[1] = nrm[3 * v + 1];
                nn[2] = nrm[3 * v + 2];
            }
            if (lin) dqs_lin(lin, jv, wv, kb, p, nn);
            for (int c = 0; c < 3; c++) {
                P[c][i] = p[c];
                P[3 + c][i] = nn[c];
            }
            const float *d0 = dq + 8 * (size_t)jv[0];
            __m256 acc = _mm256_mul_ps(_mm256_set1_ps(wv[0]), _mm256_loadu_ps(d0));
            for (int q = 1; q < kb; q++) {
                const float *dk = dq + 8 * (size_t)jv[q];
                float dot = d0[0] * dk[0] + d0[1] * dk[1] + d0[2] * dk[2] +
                            d0[3] * dk[3];
                float w = dot < 0 ? -wv[q] : wv[q];
                acc = _mm256_fmadd_ps(_mm256_set1_ps(w), _mm256_loadu_ps(dk), acc);
            }
            _mm256_store_ps(tq + 8 * i, acc);
        }
        __m256 r[8];
        for (int c = 0; c < 8; c++) r[c] = _mm256_load_ps(tq + 8 * c);
        transpose8(r);
        __m256 x = r[0], y = r[1], z = r[2], w = r[3];
        __m256 n2 = _mm256_fmadd_ps(x, x, _mm256_mul_ps(y, y));
        n2 = _mm256_fmadd_ps(z, z, n2);
        n2 = _mm256_max_ps(_mm256_fmadd_ps(w, w, n2), tiny);
        __m256 s2 = _mm256_div_ps(two, n2);
        __m256 xx = _mm256_mul_ps(x, x), yy = _mm256_mul_ps(y, y),
               zz = _mm256_mul_ps(z, z), xy = _mm256_mul_ps(x, y),
               xz = _mm256_mul_ps(x, z), yz = _mm256_mul_ps(y, z),
               wx = _mm256_mul_ps(w, x), wy = _mm256_mul_ps(w, y),
               wz = _mm256_mul_ps(w, z);
        __m256 R0 = _mm256_fnmadd_ps(s2, _mm256_add_ps(yy, zz), one);
        __m256 R1 = _mm256_mul_ps(s2, _mm256_sub_ps(xy, wz));
        __m256 R2 = _mm256_mul_ps(s2, _mm256_add_ps(xz, wy));
        __m256 R3 = _mm256_mul_ps(s2, _mm256_add_ps(xy, wz));
        __m256 R4 = _mm256_fnmadd_ps(s2, _mm256_add_ps(xx, zz), one);
        __m256 R5 = _mm256_mul_ps(s2, _mm256_sub_ps(yz, wx));
        __m256 R6 = _mm256_mul_ps(s2, _mm256_sub_ps(xz, wy));
        __m256 R7 = _mm256_mul_ps(s2, _mm256_add_ps(yz, wx));
        __m256 R8 = _mm256_fnmadd_ps(s2, _mm256_add_ps(xx, yy), one);
        __m256 dx = r[4], dy = r[5], dz = r[6], dw = r[7];
        /* t = 2 (w d - dw r + r x d) / |r|^2 */
        __m256 tx = _mm256_mul_ps(s2, _mm256_sub_ps(
            _mm256_fmadd_ps(w, dx, _mm256_fmsub_ps(y, dz, _mm256_mul_ps(z, dy))),
            _mm256_mul_ps(dw, x)));
        __m256 ty = _mm256_mul_ps(s2, _mm256_sub_ps(
            _mm256_fmadd_ps(w, dy, _mm256_fmsub_ps(z, dx, _mm256_mul_ps(x, dz))),
            _mm256_mul_ps(dw, y)));
        __m256 tz = _mm256_mul_ps(s2, _mm256_sub_ps(
            _mm256_fmadd_ps(w, dz, _mm256_fmsub_ps(x, dy, _mm256_mul_ps(y, dx))),
            _mm256_mul_ps(dw, z)));
        __m256 px = _mm256_load_ps(P[0]), py = _mm256_load_ps(P[1]),
               pz = _mm256_load_ps(P[2]);
        _mm256_store_ps(O[0], _mm256_fmadd_ps(R0, px, _mm256_fmadd_ps(R1, py, _mm256_fmadd_ps(R2, pz, tx))));
        _mm256_store_ps(O[1], _mm256_fmadd_ps(R3, px, _mm256_fmadd_ps(R4, py, _mm256_fmadd_ps(R5, pz, ty))));
        _mm256_store_ps(O[2], _mm256_fmadd_ps(R6, px, _mm256_fmadd_ps(R7, py, _mm256_fmadd_ps(R8, pz, tz))));
        if (out_nrm) {
            __m256 nx = _mm256_load_ps(P[3]), ny = _mm256_load_ps(P[4]),
                   nz = _mm256_load_ps(P[5]);
            __m256 ox = _mm256_fmadd_ps(R0, nx, _mm256_fmadd_ps(R1, ny, _mm256_mul_ps(R2, nz)));
            __m256 oy = _mm256_fmadd_ps(R3, nx, _mm256_fmadd_ps(R4, ny, _mm256_mul_ps(R5, nz)));
            __m256 oz = _mm256_fmadd_ps(R6, nx, _mm256_fmadd_ps(R7, ny, _mm256_mul_ps(R8, nz)));
            __m256 l2 = _mm256_fmadd_ps(ox, ox, _mm256_fmadd_ps(oy, oy, _mm256_mul_ps(oz, oz)));
            l2 = _mm256_max_ps(l2, tiny);
            __m256 ys = _mm256_rsqrt_ps(l2);
            ys = _mm256_mul_ps(_mm256_mul_ps(half, ys),
                               _mm256_fnmadd_ps(_mm256_mul_ps(l2, ys), ys, three));
            _mm256_store_ps(O[3], _mm256_mul_ps(ox, ys));
            _mm256_store_ps(O[4], _mm256_mul_ps(oy, ys));
            _mm256_store_ps(O[5], _mm256_mul_ps(oz, ys));
        }
        for (int i = 0; i < cnt; i++) {
            float *op = out_pos + 3 * (v0 + i);
            op[0] = O[0][i];
            op[1] = O[1][i];
            op[2] = O[2][i];
        }
        if (out_nrm)
            for (int i = 0; i < cnt; i++) {
                float *on = out_nrm + 3 * (v0 + i);
                on[0] = O[3][i];
                on[1] = O[4][i];
                on[2] = O[5][i];
            }
    }
}
#endif

int df__skin_dqs_impl(int impl, const df__skin_t *s, const float *dq,
                      const float *lin, const float *pos, const float *nrm,
                      float *out_pos, float *out_nrm)
{
    switch (impl) {
    case DF__SKIN_SCALAR:
        dqs_scalar(s, dq, lin, pos, nrm, out_pos, out_nrm);
        return 0;
#ifdef DF__SKIN_HAVE_AVX2
    case DF__SKIN_AVX2:
        dqs_avx2(s, dq, lin, pos, nrm, out_pos, out_nrm);
        return 0;
#endif
    default:
        return -1;
    }
}

void df__skin_dqs(const df__skin_t *s, const float *dq, const float *lin,
                  const float *pos, const float *nrm, float *out_pos,
                  float *out_nrm)
{
#ifdef DF__SKIN_HAVE_AVX2
    dqs_avx2(s, dq, lin, pos, nrm, out_pos, out_nrm);
#else
    dqs_scalar(s, dq, lin, pos, nrm, out_pos, out_nrm);
#endif
}

/* refdeformer.c — reference deformer stack: correctives (control, product,
 * joint-driven) -> LBS -> delta mush. See refdeformer.h for the design.
 *
 * FK and the 3x4 algebra use core/math/mathx.h.
 */
#include "rigapprox/refdeformer.h"
#include "rigapprox/rigapprox.h"
#include "base/model_internal.h"
#include "math/mathx.h"
#include "math/laplacian.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df_refrig_opts_default(df_refrig_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->n_controls = 8;
    o->n_combos = 4;
    o->n_joint_correctives = 6;
    o->amplitude = 0.04f;
    o->radius = 0.12f;
    o->mush_iters = 6;
    o->mush_lambda = 0.5f;
    o->joint_sigma = 0.35f;
    o->joint_max = 0.8f;
    o->seed = 1;
}

/* 3x4 / quaternion math comes from core/math/mathx.h (shared with the rigged
 * kind). Its outputs may not alias inputs, hence the temporaries below. */
static void m34_mul(const float *a, const float *b, float *c)
{
    float t[12];
    df_m34_mul(a, b, t);
    memcpy(c, t, sizeof t);
}

/* ---------------------------------------------------------- build helpers */
static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void free_names(char **n, int64_t c)
{
    if (!n) return;
    for (int64_t i = 0; i < c; i++) free(n[i]);
    free(n);
}

void df_refrig_free(df_refrig_t **pr)
{
    if (!pr || !*pr) return;
    df_refrig_t *r = *pr;
    free(r->rest), free(r->tris), free_names(r->joint_names, r->nj);
    free(r->parents), free(r->rest_t), free(r->rest_r), free(r->rest_s);
    free(r->invbind), free(r->rest_world), free(r->skin_j), free(r->skin_w);
    free_names(r->control_names, r->nc), free(r->ctrl_range), free(r->shapes);
    free(r->combo_ab), free(r->combo_shapes), free(r->jc_joint), free(r->jc_shapes);
    free(r->adj_p), free(r->adj_i), free(r->mush_delta), free(r->mush_tan);
    for (size_t c = 0; c < r->n_clips; c++) {
        free(r->clips[c].rotations);
        free(r->clips[c].translations);
    }
    free(r->clips);
    free(r);
    *pr = NULL;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Unique vertex neighbours from triangles (CSR). */
static int build_adjacency(df_refrig_t *r, int64_t ntw, const uint32_t *tw)
{
    int64_t V = r->nv;
    int32_t *cnt = calloc(V + 1, sizeof *cnt);
    int32_t *tmp = malloc(sizeof(int32_t) * 6 * (ntw ? ntw : 1));
    int32_t *pos = malloc(sizeof(int32_t) * (V + 1));
    if (!cnt || !tmp || !pos) { free(cnt), free(tmp), free(pos); return -1; }
    for (int64_t t = 0; t < ntw; t++)
        for (int e = 0; e < 3; e++) cnt[tw[t * 3 + e]] += 2;
    pos[0] = 0;
    for (int64_t v = 0; v < V; v++) pos[v + 1] = pos[v] + cnt[v];
    memcpy(cnt, pos, sizeof(int32_t) * (V + 1));
    for (int64_t t = 0; t < ntw; t++)
        for (int e = 0; e < 3; e++) {
            uint32_t a = tw[t * 3 + e], b = tw[t * 3 + (e + 1) % 3],
                     c = tw[t * 3 + (e + 2) % 3];
            tmp[cnt[a]++] = (int32_t)b;
            tmp[cnt[a]++] = (int32_t)c;
        }
    r->adj_p = malloc(sizeof(int32_t) * (V + 1));
    r->adj_i = malloc(sizeof(int32_t) * (pos[V] ? pos[V] : 1));
    if (!r->adj_p || !r->adj_i) { free(cnt), free(tmp), free(pos); return -1; }
    int32_t o = 0;
    for (int64_t v = 0; v < V; v++) {
        r->adj_p[v] = o;
        int32_t *s = tmp + pos[v];
        int32_t n = pos[v + 1] - pos[v];
        qsort(s, n, sizeof *s, cmp_i32);
        for (int32_t i = 0; i < n; i++)
            if ((i == 0 || s[i] != s[i - 1]) && s[i] != (int32_t)v) r->adj_i[o++] = s[i];
    }
    r->adj_p[V] = o;
    free(cnt), free(tmp), free(pos);
    return 0;
}

/* One delta-mush smoothing result of p into s (work: V*3 floats). */
static void smooth(const df_refrig_t *r, const float *p, float *s, float *w)
{
    int64_t V = r->nv;
    memcpy(s, p, sizeof(float) * V * 3);
    for (int it = 0; it < r->mush_iters; it++) {
        for (int64_t v = 0; v < V; v++) {
            int32_t a = r->adj_p[v], b = r->adj_p[v + 1];
            if (a == b) { memcpy(w + v * 3, s + v * 3, 12); continue; }
            float c[3] = {0, 0, 0};
            for (int32_t i = a; i < b; i++)
                for (int d = 0; d < 3; d++) c[d] += s[r->adj_i[i] * 3 + d];
            float inv = 1.0f / (float)(b - a);
            for (int d = 0; d < 3; d++)
                w[v * 3 + d] = s[v * 3 + d] + r->mush_lambda * (c[d] * inv - s[v * 3 + d]);
        }
        memcpy(s, w, sizeof(float) * V * 3);
    }
}

/* Per-vertex frames of mesh s: frames [V,9] rows t, b, n. */
static void frames(const df_refrig_t *r, const float *s, float *fr)
{
    int64_t V = r->nv;
    memset(fr, 0, sizeof(float) * V * 9);
    for (int64_t t = 0; t < r->nt; t++) {
        const uint32_t *f = r->tris + t * 3;
        const float *a = s + f[0] * 3, *b = s + f[1] * 3, *c = s + f[2] * 3;
        float e1[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
        float e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
        float n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                      e1[0] * e2[1] - e1[1] * e2[0]};
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++) fr[f[k] * 9 + 6 + d] += n[d];
    }
    for (int64_t v = 0; v < V; v++) {
        float *F = fr + v * 9, *n = F + 6;
        float nl = sqrtf(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
        int32_t a = r->adj_p[v];
        if (nl < 1e-20f || a == r->adj_p[v + 1]) { /* identity frame */
            memset(F, 0, 36);
            F[0] = F[4] = F[8] = 1;
            continue;
        }
        for (int d = 0; d < 3; d++) n[d] /= nl;
        /* tangent: the edge to a neighbour fixed at rest (r->mush_tan), so
         * frames vary continuously with the pose */
        const float *p = s + v * 3, *q = s + (int64_t)r->mush_tan[v] * 3;
        float e[3] = {q[0] - p[0], q[1] - p[1], q[2] - p[2]};
        float dn = e[0] * n[0] + e[1] * n[1] + e[2] * n[2];
        for (int d = 0; d < 3; d++) e[d] -= dn * n[d];
        float el = sqrtf(e[0] * e[0] + e[1] * e[1] + e[2] * e[2]);
        if (el < 1e-20f) { memset(F, 0, 36); F[0] = F[4] = F[8] = 1; continue; }
        for (int d = 0; d < 3; d++) F[d] = e[d] / el;
        F[3] = n[1] * F[2] - n[2] * F[1];
        F[4] = n[2] * F[0] - n[0] * F[2];
        F[5] = n[0] * F[1] - n[1] * F[0];
    }
}

size_t df_refrig_work_floats(const df_refrig_t *r)
{
    return (size_t)r->nv * (3 * 4 + 9) + (size_t)r->nj * 12;
}

static float bulge(float d2, float r2)
{
    if (d2 >= r2) return 0.0f;
    float x = 1.0f - d2 / r2;
    return x * x;
}

/* Procedural corrective shapes around chosen centre vertices. */
static int build_correctives(df_refrig_t *r, const df_refrig_opts_t *o)
{
    int64_t V = r->nv, C = o->n_controls;
    df_rng_t rng = {o->seed * 7919 + 3};
    float h = r->height, amp = o->amplitude * h, rad = o->radius * h;
    /* normals of the rest mesh for bulge directions */
    float *fr = malloc(sizeof(float) * V * 9);
    if (!fr) return -1;
    frames(r, r->rest, fr);
    r->nc = C;
    r->control_names = calloc(C ? C : 1, sizeof(char *));
    r->ctrl_range = malloc(sizeof(float) * 3 * (C ? C : 1));
    r->shapes = calloc((size_t)(C ? C : 1) * V * 3, sizeof(float));
    int nco = C >= 2 ? o->n_combos : 0;
    if (nco > C / 2 * (C - 1)) nco = (int)(C / 2 * (C - 1));
    r->n_combos = nco;
    r->combo_ab = malloc(sizeof(int32_t) * 2 * (nco ? nco : 1));
    r->combo_shapes = calloc((size_t)(nco ? nco : 1) * V * 3, sizeof(float));
    int32_t *centres = malloc(sizeof(int32_t) * (C ? C : 1));
    if (!r->control_names || !r->ctrl_range || !r->shapes || !r->combo_ab ||
        !r->combo_shapes || !centres) { free(fr), free(centres); return -1; }
    for (int64_t c = 0; c < C; c++) {
        char nm[32];
        snprintf(nm, sizeof nm, "ctrl_%02d", (int)c);
        r->control_names[c] = xstrdup(nm);
        /* half the controls are [0,1] sliders, half [-1,1] */
        r->ctrl_range[c * 3 + 0] = (c % 2) ? -1.0f : 0.0f;
        r->ctrl_range[c * 3 + 1] = 1.0f;
        r->ctrl_range[c * 3 + 2] = 0.0f;
        int32_t cv = (int32_t)(df_rng_u64(&rng) % (uint64_t)V);
        centres[c] = cv;
        const float *p0 = r->rest + cv * 3;
        float dir[3];
        if (c % 3 == 2) { /* sliding (tangential) shape */
            for (int d = 0; d < 3; d++) dir[d] = fr[cv * 9 + d];
        } else {
            for (int d = 0; d < 3; d++) dir[d] = fr[cv * 9 + 6 + d];
        }
        for (int64_t v = 0; v < V; v++) {
            const float *p = r->rest + v * 3;
            float d2 = (p[0] - p0[0]) * (p[0] - p0[0]) + (p[1] - p0[1]) * (p[1] - p0[1]) +
                       (p[2] - p0[2]) * (p[2] - p0[2]);
            float f = amp * bulge(d2, rad * rad);
            for (int d = 0; d < 3; d++) r->shapes[(c * V + v) * 3 + d] = f * dir[d];
        }
    }
    for (int i = 0; i < nco; i++) {
        int a = (2 * i) % (int)C, b = (2 * i + 1 + i / (int)(C / 2 ? C / 2 : 1)) % (int)C;
        if (b == a) b = (a + 1) % (int)C;
        r->combo_ab[i * 2] = a, r->combo_ab[i * 2 + 1] = b;
        const float *pa = r->rest + centres[a] * 3, *pb = r->rest + centres[b] * 3;
        float p0[3] = {(pa[0] + pb[0]) / 2, (pa[1] + pb[1]) / 2, (pa[2] + pb[2]) / 2};
        int32_t cv = centres[a];
        for (int64_t v = 0; v < V; v++) {
            const float *p = r->rest + v * 3;
            float d2 = (p[0] - p0[0]) * (p[0] - p0[0]) + (p[1] - p0[1]) * (p[1] - p0[1]) +
                       (p[2] - p0[2]) * (p[2] - p0[2]);
            float f = -0.8f * amp * bulge(d2, rad * rad);
            for (int d = 0; d < 3; d++)
                r->combo_shapes[((int64_t)i * V + v) * 3 + d] = f * fr[cv * 9 + 6 + d];
        }
    }
    /* joint correctives on the joints carrying the most skin weight */
    int64_t J = r->nj;
    double *wsum = calloc(J ? J : 1, sizeof(double));
    if (!wsum) { free(fr), free(centres); return -1; }
    for (int64_t v = 0; v < V; v++)
        for (int k = 0; k < r->k; k++) wsum[r->skin_j[v * r->k + k]] += r->skin_w[v * r->k + k];
    int njc = 0;
    r->jc_joint = malloc(sizeof(int32_t) * (o->n_joint_correctives + 1));
    r->jc_shapes = calloc((size_t)(o->n_joint_correctives + 1) * V * 3, sizeof(float));
    if (!r->jc_joint || !r->jc_shapes) { free(fr), free(centres), free(wsum); return -1; }
    for (int i = 0; i < o->n_joint_correctives; i++) {
        int64_t best = -1;
        for (int64_t j = 0; j < J; j++)
            if (r->parents[j] >= 0 && wsum[j] > 0 && (best < 0 || wsum[j] > wsum[best])) best = j;
        if (best < 0) break;
        wsum[best] = -1;
        r->jc_joint[njc] = (int32_t)best;
        /* joint position in bind space: inverse of inverse-bind */
        float bind[12];
        if (df_m34_inverse(r->invbind + best * 12, bind)) continue;
        float p0[3] = {bind[3], bind[7], bind[11]};
        for (int64_t v = 0; v < V; v++) {
            const float *p = r->rest + v * 3;
            float d2 = (p[0] - p0[0]) * (p[0] - p0[0]) + (p[1] - p0[1]) * (p[1] - p0[1]) +
                       (p[2] - p0[2]) * (p[2] - p0[2]);
            float f = 1.2f * amp * bulge(d2, rad * rad);
            for (int d = 0; d < 3; d++)
                r->jc_shapes[((int64_t)njc * V + v) * 3 + d] = f * fr[v * 9 + 6 + d];
        }
        njc++;
    }
    r->n_jc = njc;
    free(wsum), free(centres), free(fr);
    return 0;
}

static int finish(df_refrig_t *r, const df_refrig_opts_t *o, df_error_t *err)
{
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t v = 0; v < r->nv; v++)
        for (int d = 0; d < 3; d++) {
            float x = r->rest[v * 3 + d];
            if (x < lo[d]) lo[d] = x;
            if (x > hi[d]) hi[d] = x;
        }
    r->height = fmaxf(hi[0] - lo[0], fmaxf(hi[1] - lo[1], hi[2] - lo[2]));
    if (!(r->height > 0)) return df_error_set(err, DF_EFORMAT, "rig: degenerate mesh");
    r->mush_iters = o->mush_iters;
    r->mush_lambda = o->mush_lambda;
    r->joint_sigma = o->joint_sigma;
    r->joint_max = o->joint_max;
    r->rest_world = malloc(sizeof(float) * 12 * r->nj);
    r->mush_delta = malloc(sizeof(float) * 3 * r->nv);
    /* smoothing sees seams welded (split copies linked), like the Laplacian */
    uint32_t *tw = NULL;
    int64_t ntw = 0;
    int rc = df_lap_weld(r->nv, r->rest, r->nt, r->tris, 1e-6f * r->height, &tw, &ntw, err);
    if (rc) return rc;
    rc = build_adjacency(r, ntw, tw);
    free(tw);
    r->mush_tan = malloc(sizeof(int32_t) * r->nv);
    if (!r->mush_tan) return df_error_set(err, DF_ENOMEM, "rig: out of memory");
    for (int64_t v = 0; !rc && v < r->nv; v++) { /* farthest neighbour at rest */
        float best = -1;
        r->mush_tan[v] = (int32_t)v;
        for (int32_t k = r->adj_p[v]; k < r->adj_p[v + 1]; k++) {
            const float *a = r->rest + v * 3, *b = r->rest + (int64_t)r->adj_i[k] * 3;
            float d2 = (a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]);
            if (d2 > best) best = d2, r->mush_tan[v] = r->adj_i[k];
        }
    }
    if (!r->rest_world || !r->mush_delta || rc || build_correctives(r, o))
        return df_error_set(err, DF_ENOMEM, "rig: out of memory");
    df_refrig_fk(r, NULL, NULL, r->rest_world);
    /* rest detail: skin the rest pose (no correctives), smooth, store delta
     * in the smoothed mesh's frames. */
    float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
    if (!work) return df_error_set(err, DF_ENOMEM, "rig: out of memory");
    int64_t V = r->nv;
    float *sk = work, *sm = sk + V * 3, *tmp = sm + V * 3, *fr = tmp + V * 3;
    float *T = malloc(sizeof(float) * 12 * V);
    if (!T) { free(work); return df_error_set(err, DF_ENOMEM, "rig: out of memory"); }
    df_rigapprox_linear(V, r->nj, (int)r->k, r->invbind, r->skin_j, r->skin_w, 1,
                        r->rest_world, T);
    df_rigapprox_apply(V, T, r->rest, NULL, sk);
    smooth(r, sk, sm, tmp);
    frames(r, sm, fr);
    for (int64_t v = 0; v < V; v++) {
        float d[3] = {sk[v * 3] - sm[v * 3], sk[v * 3 + 1] - sm[v * 3 + 1],
                      sk[v * 3 + 2] - sm[v * 3 + 2]};
        for (int a = 0; a < 3; a++)
            r->mush_delta[v * 3 + a] = fr[v * 9 + a * 3] * d[0] +
                                       fr[v * 9 + a * 3 + 1] * d[1] +
                                       fr[v * 9 + a * 3 + 2] * d[2];
    }
    free(T), free(work);
    return DF_OK;
}

void df_refrig_fk(const df_refrig_t *r, const float *rot, const float *trans,
                  float *world)
{
    for (int64_t j = 0; j < r->nj; j++) {
        float loc[12], q[4];
        memcpy(q, rot ? rot + j * 4 : r->rest_r + j * 4, sizeof q);
        if (df_quat_normalize(q) <= 1e-12f) df_quat_identity(q);
        df_m34_from_trs(trans ? trans + j * 3 : r->rest_t + j * 3, q, r->rest_s + j * 3, loc);
        if (r->parents[j] >= 0) m34_mul(world + r->parents[j] * 12, loc, world + j * 12);
        else memcpy(world + j * 12, loc, sizeof loc);
    }
}

void df_refrig_sample(const df_refrig_t *r, df_rng_t *rng, float *controls,
                      float *world)
{
    for (int64_t c = 0; c < r->nc; c++) {
        float lo = r->ctrl_range[c * 3], hi = r->ctrl_range[c * 3 + 1],
              def = r->ctrl_range[c * 3 + 2];
        controls[c] = (float)df_rng_trunc_normal(rng, def, 0.5 * (hi - lo), lo, hi);
    }
    float *rot = malloc(sizeof(float) * 4 * (r->nj ? r->nj : 1));
    if (!rot) return;
    for (int64_t j = 0; j < r->nj; j++) {
        float aa[3];
        for (int d = 0; d < 3; d++)
            aa[d] = (float)df_rng_trunc_normal(rng, 0, r->joint_sigma, -r->joint_max, r->joint_max);
        if (r->parents[j] < 0) aa[0] = aa[1] = aa[2] = 0; /* roots stay at rest */
        float th = sqrtf(aa[0] * aa[0] + aa[1] * aa[1] + aa[2] * aa[2]);
        float q[4] = {0, 0, 0, 1};
        if (th > 1e-9f) {
            float s = sinf(th / 2) / th;
            q[0] = aa[0] * s, q[1] = aa[1] * s, q[2] = aa[2] * s, q[3] = cosf(th / 2);
        }
        df_quat_mul(r->rest_r + j * 4, q, rot + j * 4);
    }
    df_refrig_fk(r, rot, NULL, world);
    free(rot);
}

/* Angle of joint j's skinning rotation relative to its parent's. */
static float joint_angle(const df_refrig_t *r, const float *world, int64_t j, float *skm)
{
    const float *a = skm + j * 12;
    float id[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
    const float *b = r->parents[j] >= 0 ? skm + r->parents[j] * 12 : id;
    /* R = rot(b)^T rot(a), columns normalised */
    double tr = 0;
    for (int c = 0; c < 3; c++) {
        double na = 0, nb = 0, dot = 0;
        for (int i = 0; i < 3; i++) {
            na += a[i * 4 + c] * a[i * 4 + c];
            nb += b[i * 4 + c] * b[i * 4 + c];
            dot += a[i * 4 + c] * b[i * 4 + c];
        }
        tr += dot / sqrt(na * nb + 1e-30);
    }
    double cs = (tr - 1) / 2;
    if (cs > 1) cs = 1;
    if (cs < -1) cs = -1;
    (void)world;
    return (float)acos(cs);
}

void df_refrig_deform(const df_refrig_t *r, const float *controls,
                      const float *world, float *out, float *work)
{
    int64_t V = r->nv, J = r->nj;
    float *disp = work, *sk = disp + V * 3, *sm = sk + V * 3, *tmp = sm + V * 3,
          *fr = tmp + V * 3, *skm = fr + V * 9;
    (void)sk;
    memset(disp, 0, sizeof(float) * V * 3);
    for (int64_t c = 0; c < r->nc; c++) {
        float w = controls[c];
        if (w == 0) continue;
        const float *s = r->shapes + c * V * 3;
        for (int64_t i = 0; i < V * 3; i++) disp[i] += w * s[i];
    }
    for (int i = 0; i < r->n_combos; i++) {
        float w = controls[r->combo_ab[i * 2]] * controls[r->combo_ab[i * 2 + 1]];
        const float *s = r->combo_shapes + (int64_t)i * V * 3;
        for (int64_t k = 0; k < V * 3; k++) disp[k] += w * s[k];
    }
    for (int64_t j = 0; j < J; j++) m34_mul(world + j * 12, r->invbind + j * 12, skm + j * 12);
    for (int i = 0; i < r->n_jc; i++) {
        float th = joint_angle(r, world, r->jc_joint[i], skm) / 0.6f;
        float w = th * th;
        if (w > 2.5f) w = 2.5f;
        const float *s = r->jc_shapes + (int64_t)i * V * 3;
        for (int64_t k = 0; k < V * 3; k++) disp[k] += w * s[k];
    }
    /* LBS of rest + disp into out (per vertex T_i, no big temp) */
    for (int64_t v = 0; v < V; v++) {
        float T[12] = {0};
        for (int k = 0; k < r->k; k++) {
            float w = r->skin_w[v * r->k + k];
            if (w == 0) continue;
            const float *M = skm + r->skin_j[v * r->k + k] * 12;
            for (int e = 0; e < 12; e++) T[e] += w * M[e];
        }
        float p[3] = {r->rest[v * 3] + disp[v * 3], r->rest[v * 3 + 1] + disp[v * 3 + 1],
                      r->rest[v * 3 + 2] + disp[v * 3 + 2]};
        for (int d = 0; d < 3; d++)
            out[v * 3 + d] = T[d * 4] * p[0] + T[d * 4 + 1] * p[1] + T[d * 4 + 2] * p[2] + T[d * 4 + 3];
    }
    if (r->mush_iters <= 0) return;
    smooth(r, out, sm, tmp);
    frames(r, sm, fr);
    for (int64_t v = 0; v < V; v++) {
        const float *F = fr + v * 9, *d = r->mush_delta + v * 3;
        for (int a = 0; a < 3; a++)
            out[v * 3 + a] = sm[v * 3 + a] + F[a] * d[0] + F[3 + a] * d[1] + F[6 + a] * d[2];
    }
}

/* ---------------------------------------------------------- sources */
int df_refrig_tiny(int rings, int segments, const df_refrig_opts_t *o,
                   df_refrig_t **out, df_error_t *err)
{
    if (rings < 3 || segments < 2 || rings > 1000 || segments > 1000)
        return df_error_set(err, DF_EINVAL, "tiny rig: rings %d segments %d", rings, segments);
    df_refrig_t *r = calloc(1, sizeof *r);
    if (!r) return df_error_set(err, DF_ENOMEM, "rig: out of memory");
    int S = segments + 1;
    r->nv = (int64_t)rings * S;
    r->nt = (int64_t)rings * segments * 2;
    r->nj = 3;
    r->k = 2;
    r->rest = malloc(sizeof(float) * 3 * r->nv);
    r->tris = malloc(sizeof(uint32_t) * 3 * r->nt);
    r->joint_names = calloc(3, sizeof(char *));
    r->parents = malloc(sizeof(int32_t) * 3);
    r->rest_t = calloc(9, sizeof(float));
    r->rest_r = calloc(12, sizeof(float));
    r->rest_s = malloc(sizeof(float) * 9);
    r->invbind = calloc(36, sizeof(float));
    r->skin_j = malloc(sizeof(int32_t) * 2 * r->nv);
    r->skin_w = malloc(sizeof(float) * 2 * r->nv);
    if (!r->rest || !r->tris || !r->joint_names || !r->parents || !r->rest_t ||
        !r->rest_r || !r->rest_s || !r->invbind || !r->skin_j || !r->skin_w) {
        df_refrig_free(&r);
        return df_error_set(err, DF_ENOMEM, "rig: out of memory");
    }
    float len = 3.0f;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < rings; i++) {
            int64_t v = (int64_t)s * rings + i;
            float a = 6.2831853f * i / rings, y = len * s / segments;
            float rad = 0.4f + 0.08f * sinf(3.0f * y);
            r->rest[v * 3] = rad * cosf(a), r->rest[v * 3 + 1] = y, r->rest[v * 3 + 2] = rad * sinf(a);
            /* two nearest joints at y = 0, 1, 2 */
            float u = y / (len / 3.0f);
            int j0 = (int)floorf(u - 0.5f);
            if (j0 < 0) j0 = 0;
            if (j0 > 1) j0 = 1;
            float t = u - 0.5f - j0;
            if (t < 0) t = 0;
            if (t > 1) t = 1;
            float w1 = t * t * (3 - 2 * t);
            r->skin_j[v * 2] = j0, r->skin_j[v * 2 + 1] = j0 + 1;
            r->skin_w[v * 2] = 1 - w1, r->skin_w[v * 2 + 1] = w1;
        }
    int64_t t = 0;
    for (int s = 0; s < segments; s++)
        for (int i = 0; i < rings; i++) {
            uint32_t a = s * rings + i, b = s * rings + (i + 1) % rings;
            uint32_t c = a + rings, d = b + rings;
            r->tris[t * 3] = a, r->tris[t * 3 + 1] = c, r->tris[t * 3 + 2] = b, t++;
            r->tris[t * 3] = b, r->tris[t * 3 + 1] = c, r->tris[t * 3 + 2] = d, t++;
        }
    for (int j = 0; j < 3; j++) {
        char nm[16];
        snprintf(nm, sizeof nm, "bone%d", j);
        r->joint_names[j] = xstrdup(nm);
        r->parents[j] = j - 1;
        r->rest_t[j * 3 + 1] = j ? len / 3.0f : 0.0f;
        r->rest_r[j * 4 + 3] = 1;
        r->rest_s[j * 3] = r->rest_s[j * 3 + 1] = r->rest_s[j * 3 + 2] = 1;
        float *ib = r->invbind + j * 12;
        ib[0] = ib[5] = ib[10] = 1;
        ib[7] = -(len / 3.0f) * j;
    }
    int rc = finish(r, o, err);
    if (rc) { df_refrig_free(&r); return rc; }
    *out = r;
    return DF_OK;
}

static int copy_tensor(const df_st_t *st, const char *name, df_dtype_t dt, int ndim,
                       const int64_t *shape, int optional, void **dst, df_error_t *err)
{
    const df_tensor_t *t;
    int rc = df_st_require(st, name, dt, ndim, shape, optional, &t, err);
    if (rc) return rc;
    if (!t) { *dst = NULL; return DF_OK; }
    *dst = malloc(t->nbytes ? t->nbytes : 1);
    if (!*dst) return df_error_set(err, DF_ENOMEM, "rig: out of memory");
    memcpy(*dst, t->data, t->nbytes);
    return DF_OK;
}

int df_refrig_from_rigged(const char *path, const df_refrig_opts_t *o,
                          df_refrig_t **out, df_error_t *err)
{
    df_st_t *st = NULL;
    int rc = df_st_open(path, NULL, &st, err);
    if (rc) return rc;
    df_refrig_t *r = calloc(1, sizeof *r);
    if (!r) { df_st_close(&st); return df_error_set(err, DF_ENOMEM, "rig: out of memory"); }
    const df_tensor_t *pos = df_st_find(st, "positions"), *par = df_st_find(st, "joint_parents"),
                      *sj = df_st_find(st, "skin_joints");
    if (!pos || !par || !sj || pos->ndim != 2 || par->ndim != 1 || sj->ndim != 2) {
        rc = df_error_set(err, DF_EFORMAT,
                          "%s: not a skinned rigged model (needs positions, joint_parents, skin_joints)",
                          path);
        goto fail;
    }
    r->nv = pos->shape[0];
    r->nj = par->shape[0];
    r->k = sj->shape[1];
    if (r->nj < 1 || r->k < 1 || r->k > DF_RIGDATA_MAX_K || r->nv < 3) {
        rc = df_error_set(err, DF_EFORMAT, "%s: %lld joints, %lld influences", path,
                          (long long)r->nj, (long long)r->k);
        goto fail;
    }
    const df_tensor_t *tri = df_st_find(st, "triangles");
    if (!tri || tri->ndim != 2 || tri->shape[1] != 3) {
        rc = df_error_set(err, DF_EFORMAT, "%s: triangles missing", path);
        goto fail;
    }
    r->nt = tri->shape[0];
    int64_t s_v3[2] = {r->nv, 3}, s_t3[2] = {r->nt, 3}, s_j[1] = {r->nj}, s_j3[2] = {r->nj, 3},
            s_j4[2] = {r->nj, 4}, s_j44[3] = {r->nj, 4, 4}, s_vk[2] = {r->nv, r->k};
    float *ib44 = NULL;
    if ((rc = copy_tensor(st, "positions", DF_DT_F32, 2, s_v3, 0, (void **)&r->rest, err)) ||
        (rc = copy_tensor(st, "triangles", DF_DT_I32, 2, s_t3, 0, (void **)&r->tris, err)) ||
        (rc = copy_tensor(st, "joint_parents", DF_DT_I32, 1, s_j, 0, (void **)&r->parents, err)) ||
        (rc = copy_tensor(st, "joint_rest_translations", DF_DT_F32, 2, s_j3, 0, (void **)&r->rest_t, err)) ||
        (rc = copy_tensor(st, "joint_rest_rotations", DF_DT_F32, 2, s_j4, 0, (void **)&r->rest_r, err)) ||
        (rc = copy_tensor(st, "joint_rest_scales", DF_DT_F32, 2, s_j3, 0, (void **)&r->rest_s, err)) ||
        (rc = copy_tensor(st, "inverse_bind_matrices", DF_DT_F32, 3, s_j44, 0, (void **)&ib44, err)) ||
        (rc = copy_tensor(st, "skin_joints", DF_DT_I32, 2, s_vk, 0, (void **)&r->skin_j, err)) ||
        (rc = copy_tensor(st, "skin_weights", DF_DT_F32, 2, s_vk, 0, (void **)&r->skin_w, err)))
        goto fail;
    r->invbind = malloc(sizeof(float) * 12 * r->nj);
    if (!r->invbind) { free(ib44); rc = df_error_set(err, DF_ENOMEM, "rig: out of memory"); goto fail; }
    for (int64_t j = 0; j < r->nj; j++) memcpy(r->invbind + j * 12, ib44 + j * 16, 48);
    free(ib44);
    for (int64_t j = 0; j < r->nj; j++)
        if (r->parents[j] >= j) {
            rc = df_error_set(err, DF_EFORMAT, "%s: joint_parents[%lld] = %d not < %lld", path,
                              (long long)j, r->parents[j], (long long)j);
            goto fail;
        }
    for (int64_t i = 0; i < r->nt * 3; i++)
        if (r->tris[i] >= (uint32_t)r->nv) {
            rc = df_error_set(err, DF_EFORMAT, "%s: triangle index %u out of range", path, r->tris[i]);
            goto fail;
        }
    for (int64_t i = 0; i < r->nv * r->k; i++)
        if (r->skin_j[i] < 0 || r->skin_j[i] >= r->nj) {
            rc = df_error_set(err, DF_EFORMAT, "%s: skin_joints[%lld] out of range", path, (long long)i);
            goto fail;
        }
    const char *jn = df_st_meta(st, "joint_names");
    size_t nn = 0;
    if (!jn || df__json_string_array(jn, (size_t)r->nj, &r->joint_names, &nn, err)) {
        r->joint_names = calloc(r->nj, sizeof(char *));
        if (!r->joint_names) { rc = DF_ENOMEM; goto fail; }
        for (int64_t j = 0; j < r->nj; j++) {
            char b[32];
            snprintf(b, sizeof b, "joint%lld", (long long)j);
            r->joint_names[j] = xstrdup(b);
        }
    }
    /* clips: local rotations/translations per frame */
    const char *cl = df_st_meta(st, "clips");
    char **cnames = NULL;
    size_t ncl = 0;
    if (cl && df__json_string_array(cl, 0, &cnames, &ncl, NULL) == DF_OK && ncl) {
        r->clips = calloc(ncl, sizeof *r->clips);
        if (!r->clips) { rc = DF_ENOMEM; goto fail; }
        for (size_t c = 0; c < ncl; c++) {
            char tn[96];
            snprintf(tn, sizeof tn, "clip/%zu/times", c);
            const df_tensor_t *tt = df_st_find(st, tn);
            if (!tt || tt->ndim != 1) continue;
            df_refrig_clip_t *k = &r->clips[r->n_clips];
            int64_t F = tt->shape[0];
            int64_t sr[3] = {F, r->nj, 4}, str[3] = {F, r->nj, 3};
            snprintf(tn, sizeof tn, "clip/%zu/rotations", c);
            if (copy_tensor(st, tn, DF_DT_F32, 3, sr, 1, (void **)&k->rotations, NULL)) continue;
            snprintf(tn, sizeof tn, "clip/%zu/translations", c);
            if (copy_tensor(st, tn, DF_DT_F32, 3, str, 1, (void **)&k->translations, NULL)) {
                free(k->rotations);
                k->rotations = NULL;
                continue;
            }
            snprintf(k->name, sizeof k->name, "%s", cnames[c]);
            k->n_frames = F;
            r->n_clips++;
        }
        for (size_t c = 0; c < ncl; c++) free(cnames[c]);
        free(cnames);
    }
    df_st_close(&st);
    rc = finish(r, o, err);
    if (rc) { df_refrig_free(&r); return rc; }
    *out = r;
    return DF_OK;
fail:
    df_st_close(&st);
    df_refrig_free(&r);
    return rc;
}

/* ---------------------------------------------------------- influence */
int df_refrig_influence(const df_refrig_t *r, int n_poses, uint64_t seed,
                        float *infl, df_error_t *err)
{
    int64_t V = r->nv, C = r->nc, J = r->nj;
    float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
    float *base = malloc(sizeof(float) * V * 3), *pert = malloc(sizeof(float) * V * 3);
    float *ctl = malloc(sizeof(float) * (C + 1)), *ctl2 = malloc(sizeof(float) * (C + 1));
    float *w = malloc(sizeof(float) * J * 12), *w2 = malloc(sizeof(float) * J * 12);
    float *T = malloc(sizeof(float) * V * 12), *T2 = malloc(sizeof(float) * V * 12);
    float *nl = malloc(sizeof(float) * V * 3), *nl2 = malloc(sizeof(float) * V * 3);
    int rc = DF_OK;
    if (!work || !base || !pert || !ctl || !ctl2 || !w || !w2 || !T || !T2 || !nl || !nl2) {
        rc = df_error_set(err, DF_ENOMEM, "influence: out of memory");
        goto done;
    }
    memset(infl, 0, sizeof(float) * (C + J) * V);
    df_rng_t rng = {seed};
    for (int p = 0; p < n_poses; p++) {
        df_refrig_sample(r, &rng, ctl, w);
        df_refrig_deform(r, ctl, w, base, work);
        df_rigapprox_linear(V, J, (int)r->k, r->invbind, r->skin_j, r->skin_w, 1, w, T);
        df_rigapprox_nonlinear(V, T, r->rest, base, nl);
        for (int64_t c = 0; c < C + J; c++) {
            memcpy(ctl2, ctl, sizeof(float) * C);
            memcpy(w2, w, sizeof(float) * J * 12);
            if (c < C) {
                float lo = r->ctrl_range[c * 3], hi = r->ctrl_range[c * 3 + 1];
                float mid = (lo + hi) / 2;
                ctl2[c] += (ctl[c] < mid ? 0.5f : -0.5f) * (hi - lo);
            } else {
                /* rotate joint j's local frame by 0.5 rad about axis (p % 3):
                 * world_k <- world_j R world_j^-1 world_k for j's subtree */
                int64_t j = c - C;
                float R[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, inv[12], M[12];
                int ax = p % 3, a1 = (ax + 1) % 3, a2 = (ax + 2) % 3;
                R[a1 * 4 + a1] = R[a2 * 4 + a2] = cosf(0.5f);
                R[a1 * 4 + a2] = -sinf(0.5f), R[a2 * 4 + a1] = sinf(0.5f);
                if (df_m34_inverse(w + j * 12, inv)) continue;
                m34_mul(w + j * 12, R, M);
                m34_mul(M, inv, M);
                for (int64_t k = j; k < J; k++) {
                    int64_t a = k;
                    while (a > j) a = r->parents[a];
                    if (a == j) m34_mul(M, w + k * 12, w2 + k * 12);
                }
            }
            df_refrig_deform(r, ctl2, w2, pert, work);
            df_rigapprox_linear(V, J, (int)r->k, r->invbind, r->skin_j, r->skin_w, 1, w2, T2);
            df_rigapprox_nonlinear(V, T2, r->rest, pert, nl2);
            float *row = infl + c * V;
            for (int64_t v = 0; v < V; v++) {
                float dx = nl2[v * 3] - nl[v * 3], dy = nl2[v * 3 + 1] - nl[v * 3 + 1],
                      dz = nl2[v * 3 + 2] - nl[v * 3 + 2];
                float d = sqrtf(dx * dx + dy * dy + dz * dz);
                if (d > row[v]) row[v] = d;
            }
        }
    }
done:
    free(work), free(base), free(pert), free(ctl), free(ctl2), free(w), free(w2);
    free(T), free(T2), free(nl), free(nl2);
    return rc;
}

/* ---------------------------------------------------------- dataset */
int df_refrig_write_dataset(const df_refrig_t *r, int n, uint64_t seed,
                            int clips, int influence_poses, const char *path,
                            df_error_t *err)
{
    int64_t V = r->nv, C = r->nc, J = r->nj;
    if (clips) {
        n = 0;
        for (size_t c = 0; c < r->n_clips; c++) n += (int)r->clips[c].n_frames;
        if (n == 0) return df_error_set(err, DF_ENOTFOUND, "rig has no clips");
    }
    if (n < 1 || n > 1000000) return df_error_set(err, DF_EINVAL, "rigdata: %d samples (1..1e6)", n);
    if ((double)n * V * 3 * 4 > 3e9)
        return df_error_set(err, DF_ELIMIT, "rigdata: %d samples x %lld vertices is over 3 GB", n,
                            (long long)V);
    float *ctl = malloc(sizeof(float) * n * (C ? C : 1));
    float *wm = malloc(sizeof(float) * n * J * 12);
    float *pos = malloc(sizeof(float) * (size_t)n * V * 3);
    float *work = malloc(sizeof(float) * df_refrig_work_floats(r));
    float *infl = influence_poses > 0 ? malloc(sizeof(float) * (C + J) * V) : NULL;
    int32_t *tri32 = malloc(sizeof(int32_t) * r->nt * 3);
    int rc = DF_OK;
    if (!ctl || !wm || !pos || !work || !tri32 || (influence_poses > 0 && !infl)) {
        rc = df_error_set(err, DF_ENOMEM, "rigdata: out of memory");
        goto done;
    }
    df_rng_t rng = {seed};
    if (!clips) {
        for (int i = 0; i < n; i++) df_refrig_sample(r, &rng, ctl + (size_t)i * C, wm + (size_t)i * J * 12);
    } else {
        int i = 0;
        for (size_t c = 0; c < r->n_clips; c++)
            for (int64_t f = 0; f < r->clips[c].n_frames; f++, i++) {
                const df_refrig_clip_t *k = &r->clips[c];
                df_refrig_fk(r, k->rotations ? k->rotations + f * J * 4 : NULL,
                             k->translations ? k->translations + f * J * 3 : NULL,
                             wm + (size_t)i * J * 12);
                /* animated controls: smooth curves inside each range */
                for (int64_t q = 0; q < C; q++) {
                    float lo = r->ctrl_range[q * 3], hi = r->ctrl_range[q * 3 + 1];
                    float s = 0.5f + 0.5f * sinf(0.15f * (float)f * (1.0f + 0.37f * q) + q);
                    ctl[(size_t)i * C + q] = lo + (hi - lo) * s;
                }
            }
    }
    for (int i = 0; i < n; i++)
        df_refrig_deform(r, ctl + (size_t)i * C, wm + (size_t)i * J * 12, pos + (size_t)i * V * 3, work);
    if (infl && (rc = df_refrig_influence(r, influence_poses, seed ^ 0xabcdefULL, infl, err))) goto done;
    for (int64_t i = 0; i < r->nt * 3; i++) tri32[i] = (int32_t)r->tris[i];
    df_rigdata_t d = {0};
    d.nv = V, d.nt = r->nt, d.nj = J, d.nc = C, d.k = r->k, d.n = n;
    d.rest = r->rest, d.tris = (const uint32_t *)tri32;
    d.control_names = r->control_names, d.ctrl_range = r->ctrl_range;
    d.joint_names = r->joint_names, d.invbind = r->invbind;
    d.skin_j = r->skin_j, d.skin_w = r->skin_w;
    d.controls = ctl, d.joints = wm, d.positions = pos, d.influence = infl;
    d.parents = r->parents;
    d.height = r->height;
    rc = df_rigdata_write(&d, path, err);
done:
    free(ctl), free(wm), free(pos), free(work), free(infl), free(tri32);
    return rc;
}

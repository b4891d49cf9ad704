/* kind_rigged.c — the `rigged` model kind: load with full validation,
 * inputs/outputs, clips. Evaluation is in rigged_eval.c, kernels in skin.c.
 *
 * DESIGN
 * A model file comes from elsewhere (an importer, a decomposition, a user),
 * so load() checks every tensor and names the tensor and the vertex/joint/
 * frame index at fault; after load nothing is re-checked per request except
 * the per-pose inputs. Load also builds the evaluation layouts: rest
 * positions/normals padded by 4 floats (the SIMD kernels load 4 floats per
 * vertex), unit quaternions, exactly renormalised skin weights re-laid out
 * in blocks (skin.h), inverse binds reduced to 3x4. Rest normals missing
 * from the file are computed area-weighted from the triangles.
 *
 * Input order: weights (only when M > 0), shape (only when S > 0), then
 * joint_rotations, joint_translations, joint_matrices (only when J > 0).
 * Shape blend shapes (shape_deltas, optional shape_normal_deltas and
 * joint_rest_translation_shapedirs) are extra columns of the morph matrix,
 * so morphs and shapes are one GEMM; the joints' shape part is reduced at
 * load to one origin shift per (shape, joint) in the joint's rest frame
 * (shape_c), which makes the shaped inverse bind one subtraction. The default of
 * joint_matrices is the rest pose's world matrices, so passing the default
 * explicitly gives the same result as omitting every joint input.
 */
#include "math/mathx.h"
#include "rigged/rigged_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E(code, ...) df_error_set(err, code, __VA_ARGS__)

static void *xalloc(size_t nfloats)
{
    void *p = NULL;
    size_t bytes = (nfloats ? nfloats : 1) * sizeof(float);
    bytes = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes)) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void *dupf(const df_tensor_t *t, size_t extra)
{
    if (!t) return NULL;
    size_t n = (size_t)df_tensor_numel(t);
    float *p = xalloc(n + extra);
    if (p && n) memcpy(p, t->data, n * sizeof(float));
    return p;
}

/* df_st_require, with where the expected extents come from appended to a
 * shape error ("J = 3 from 'joint_parents'"), so a file whose defining
 * tensor is the wrong one still names it. */
static int require(const df_st_t *st, const char *name, df_dtype_t dt,
                   int ndim, const int64_t *shape, int optional,
                   const df_tensor_t **out, const char *ctx, df_error_t *err)
{
    int rc = df_st_require(st, name, dt, ndim, shape, optional, out, err);
    if (rc && ctx && err) {
        char tmp[512];
        memcpy(tmp, err->msg, sizeof tmp);
        tmp[sizeof tmp - 1] = 0;
        df_error_set(err, rc, "%.300s (%.200s)", tmp, ctx);
    }
    return rc;
}

/* The morph GEMM's matrix: the [M,N,3] tensor a (morphs) and the [S,N,3]
 * tensor b (shapes) as a column-major 3N x (M+S+1) matrix with last (3N
 * floats) as the final column, so one GEMM with a weight column
 * [w; beta; 1] gives last + sum w_m a_m + sum beta_s b_s. A NULL a or b with
 * a non-zero count gives zero columns (normals of only one of the two).
 * Packed once into the kernel's panel layout in DF_PGEMM builds. NULL
 * when out of memory. */
static float *morph_matrix(const float *a, int64_t M, const float *b, int64_t S,
                           const float *last, int64_t N)
{
    size_t n3 = (size_t)N * 3;
    float *x = xalloc(n3 * (size_t)(M + S + 1)); /* zeroed */
    if (!x) return NULL;
    if (a && M) memcpy(x, a, (size_t)M * n3 * sizeof(float));
    if (b && S) memcpy(x + (size_t)M * n3, b, (size_t)S * n3 * sizeof(float));
    memcpy(x + (size_t)(M + S) * n3, last, n3 * sizeof(float));
#ifdef DF_PGEMM
    float *pk = df_pgemm_new(x, 1, (int64_t)n3, N * 3, M + S + 1);
    free(x);
    x = pk;
#endif
    return x;
}

/* shape_c[s,j] = L_j^-1 da_{s,j}: the rest origin of joint j moves by
 * da_{s,j} = da_{s,parent} + L_parent t_{s,j} per unit beta_s (L: the rest
 * world matrix's linear part, t: joint_rest_translation_shapedirs); in the
 * joint's own rest frame that is c. Fails on a singular rest matrix. */
static int shape_origins(df__rig_t *r, df_error_t *err)
{
    int64_t J = r->J, S = r->S;
    float *world = xalloc((size_t)J * 12), *skin = xalloc((size_t)J * 12);
    float *da = xalloc((size_t)J * 3);
    int rc = DF_OK;
    if (!world || !skin || !da) {
        rc = E(DF_ENOMEM, "out of memory");
        goto out;
    }
    df__rig_skin_matrices(r, NULL, NULL, NULL, world, skin);
    for (int64_t s = 0; s < S && !rc; s++) {
        for (int64_t j = 0; j < J; j++) {
            const float *t = r->shape_t + (s * J + j) * 3;
            int32_t p = r->parents[j];
            double d[3] = {t[0], t[1], t[2]};
            if (p >= 0) {
                const float *Lp = world + 12 * p;
                for (int a = 0; a < 3; a++)
                    d[a] = da[3 * p + a] + Lp[4 * a] * t[0] + Lp[4 * a + 1] * t[1] +
                           Lp[4 * a + 2] * t[2];
            }
            for (int a = 0; a < 3; a++) da[3 * j + a] = (float)d[a];
            float inv[12];
            if (df_m34_inverse(world + 12 * j, inv)) {
                rc = E(DF_EFORMAT, "tensor 'joint_rest_translation_shapedirs': joint %lld: "
                                   "its rest world matrix is singular", (long long)j);
                break;
            }
            float *c = r->shape_c + (s * J + j) * 3;
            for (int a = 0; a < 3; a++)
                c[a] = (float)(inv[4 * a] * d[0] + inv[4 * a + 1] * d[1] + inv[4 * a + 2] * d[2]);
        }
    }
out:
    free(world);
    free(skin);
    free(da);
    return rc;
}

static void rig_destroy(void *impl)
{
    df__rig_t *r = impl;
    if (!r) return;
    free(r->rest);
    free(r->rest_nrm);
    free(r->deltas);
    free(r->ndeltas);
    free(r->shape_t);
    free(r->shape_c);
    free(r->parents);
    free(r->rest_t);
    free(r->rest_q);
    free(r->rest_s);
    free(r->ibm);
    df__skin_free(&r->skin);
    for (size_t c = 0; c < r->n_clips; c++) {
        df__rig_clip_t *cl = &r->clips[c];
        free(cl->name);
        free(cl->times);
        free(cl->rot);
        free(cl->tr);
        free(cl->w);
        free(cl->mat);
    }
    free(r->clips);
    free(r);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Name list from metadata `key` (expect entries), or generated
 * "<prefix><i>" names when the key is absent. */
static int load_names(df_model_t *m, const df_st_t *st, const char *key,
                      const char *list, const char *prefix, size_t expect,
                      df_error_t *err)
{
    const char *js = df_st_meta(st, key);
    char **names = NULL;
    size_t n = 0;
    int rc;
    if (js) {
        rc = df__json_string_array(js, expect, &names, &n, err);
        if (rc) {
            char tmp[512];
            snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
            return E(rc, "metadata '%s': %s", key, tmp);
        }
    } else {
        names = calloc(expect ? expect : 1, sizeof *names);
        if (!names) return E(DF_ENOMEM, "out of memory");
        for (size_t i = 0; i < expect; i++) {
            char buf[32];
            snprintf(buf, sizeof buf, "%s%zu", prefix, i);
            if (!(names[i] = strdup(buf))) {
                free_names(names, i);
                return E(DF_ENOMEM, "out of memory");
            }
        }
        n = expect;
    }
    rc = df__model_set_names(m, list, n, (const char *const *)names);
    free_names(names, n);
    if (rc) return E(rc, "cannot register %s names: %s", list, df_strerror(rc));
    return DF_OK;
}

static int check_quats(float *q, int64_t n, const char *tensor, int64_t J,
                       df_error_t *err)
{
    for (int64_t i = 0; i < n; i++) {
        float nn = df_quat_normalize(q + 4 * i);
        if (!(nn > 1e-6f)) {
            if (J > 0 && n > J)
                return E(DF_EFORMAT,
                         "tensor '%s': frame %lld joint %lld: quaternion has "
                         "norm %g (must be > 1e-6)",
                         tensor, (long long)(i / J), (long long)(i % J),
                         (double)nn);
            return E(DF_EFORMAT,
                     "tensor '%s': joint %lld: quaternion has norm %g (must be "
                     "> 1e-6)",
                     tensor, (long long)i, (double)nn);
        }
    }
    return DF_OK;
}

static void compute_normals(const float *p, int64_t N, const uint32_t *tri,
                            int64_t T, float *nrm)
{
    memset(nrm, 0, (size_t)N * 3 * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        const float *a = p + 3 * tri[3 * t], *b = p + 3 * tri[3 * t + 1],
                    *c = p + 3 * tri[3 * t + 2];
        float e1[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
        float e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
        /* |e1 x e2| = 2 * area: the sum is area-weighted */
        float n[3] = {e1[1] * e2[2] - e1[2] * e2[1],
                      e1[2] * e2[0] - e1[0] * e2[2],
                      e1[0] * e2[1] - e1[1] * e2[0]};
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++) nrm[3 * tri[3 * t + k] + d] += n[d];
    }
}

static void normalize_rows(float *v, int64_t N)
{
    for (int64_t i = 0; i < N; i++) {
        float *x = v + 3 * i;
        double l = sqrt((double)x[0] * x[0] + (double)x[1] * x[1] +
                        (double)x[2] * x[2]);
        if (l > 1e-20)
            for (int d = 0; d < 3; d++) x[d] = (float)(x[d] / l);
        else
            x[0] = x[1] = x[2] = 0.0f;
    }
}

static int load_clips(df_model_t *m, df__rig_t *r, const df_st_t *st,
                      const df_limits_t *lim, df_error_t *err)
{
    const char *js = df_st_meta(st, "clips");
    if (!js) return DF_OK;
    char **names = NULL;
    size_t n = 0;
    int rc = df__json_string_array(js, (size_t)-1, &names, &n, err);
    if (rc) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        return E(rc, "metadata 'clips': %s", tmp);
    }
    if (n == 0) {
        free(names);
        return DF_OK;
    }
    r->clips = calloc(n, sizeof *r->clips);
    m->clips = calloc(n, sizeof *m->clips);
    if (!r->clips || !m->clips) {
        free_names(names, n);
        return E(DF_ENOMEM, "out of memory");
    }
    r->n_clips = n;
    for (size_t c = 0; c < n; c++) { /* ownership of the name moves */
        r->clips[c].name = names[c];
        names[c] = NULL;
    }
    free(names);
    int64_t J = r->J, M = r->M;
    for (size_t c = 0; c < n; c++) {
        df__rig_clip_t *cl = &r->clips[c];
        char nm[5][96];
        static const char *const part[5] = {"times", "rotations",
                                            "translations", "weights",
                                            "matrices"};
        for (int i = 0; i < 5; i++)
            snprintf(nm[i], sizeof nm[i], "clip/%zu/%s", c, part[i]);
        const df_tensor_t *tt, *tq, *ttr, *tw, *tm;
        int64_t s1[1] = {-1};
        if ((rc = df_st_require(st, nm[0], DF_DT_F32, 1, s1, 0, &tt, err)))
            return rc;
        int64_t F = tt->shape[0];
        if (F < 1) return E(DF_EFORMAT, "tensor '%s': no key frames", nm[0]);
        if (F > lim->max_clip_frames)
            return E(DF_ELIMIT, "tensor '%s': %lld frames exceeds the limit "
                                "%lld", nm[0], (long long)F,
                     (long long)lim->max_clip_frames);
        int64_t sq[3] = {F, J, 4}, st3[3] = {F, J, 3}, sw[2] = {F, M},
                sm[3] = {F, J, 12};
        char ctx[256];
        snprintf(ctx, sizeof ctx, "F = %lld from '%s', J = %lld, M = %lld",
                 (long long)F, nm[0], (long long)J, (long long)M);
        if ((rc = require(st, nm[1], DF_DT_F32, 3, sq, 1, &tq, ctx, err)) ||
            (rc = require(st, nm[2], DF_DT_F32, 3, st3, 1, &ttr, ctx, err)) ||
            (rc = require(st, nm[3], DF_DT_F32, 2, sw, 1, &tw, ctx, err)) ||
            (rc = require(st, nm[4], DF_DT_F32, 3, sm, 1, &tm, ctx, err)))
            return rc;
        if ((tq || ttr || tm) && J == 0)
            return E(DF_EFORMAT, "clip %zu ('%s') animates joints but the "
                                 "model has no skeleton", c, cl->name);
        if (tw && M == 0)
            return E(DF_EFORMAT, "tensor '%s': the model has no morph targets",
                     nm[3]);
        cl->F = F;
        cl->times = dupf(tt, 0);
        if (!cl->times) return E(DF_ENOMEM, "out of memory");
        for (int64_t f = 1; f < F; f++)
            if (!(cl->times[f] > cl->times[f - 1]))
                return E(DF_EFORMAT,
                         "tensor '%s': times not increasing at frame %lld "
                         "(%g after %g)",
                         nm[0], (long long)f, (double)cl->times[f],
                         (double)cl->times[f - 1]);
        if ((tq && !(cl->rot = dupf(tq, 0))) ||
            (ttr && !(cl->tr = dupf(ttr, 0))) ||
            (tw && !(cl->w = dupf(tw, 0))) || (tm && !(cl->mat = dupf(tm, 0))))
            return E(DF_ENOMEM, "out of memory");
        if (cl->rot && (rc = check_quats(cl->rot, F * J, nm[1], J, err)))
            return rc;
        m->clips[c].name = cl->name;
        m->clips[c].n_keys = F;
        m->clips[c].times = cl->times;
    }
    m->n_clips = n;
    const char **cn = calloc(n, sizeof *cn);
    if (!cn) return E(DF_ENOMEM, "out of memory");
    for (size_t c = 0; c < n; c++) cn[c] = r->clips[c].name;
    rc = df__model_set_names(m, "clips", n, cn);
    free(cn);
    if (rc) return E(rc, "cannot register clip names: %s", df_strerror(rc));
    return DF_OK;
}

static int parse_params(const char *params_json, int *dqs, df_error_t *err)
{
    if (!params_json || !*params_json) return DF_OK;
    json_error_t je;
    json_t *o = json_loads(params_json, 0, &je);
    if (!o) return E(DF_EINVAL, "parameters: not JSON: %s", je.text);
    int rc = DF_OK;
    if (!json_is_object(o)) {
        rc = E(DF_EINVAL, "parameters: not a JSON object");
    } else {
        json_t *s = json_object_get(o, "skinning");
        if (s) {
            const char *v = json_string_value(s);
            if (v && strcmp(v, "lbs") == 0)
                *dqs = 0;
            else if (v && strcmp(v, "dqs") == 0)
                *dqs = 1;
            else
                rc = E(DF_EINVAL,
                       "parameters: 'skinning' must be \"lbs\" or \"dqs\"");
        }
    }
    json_decref(o);
    return rc;
}

/* The model's output mesh (df_model_rest_positions, its bbox, /mesh, the
 * int16 box) must be in the same space as `positions`: the asset's world
 * space. The file's `positions` are bind-space, which differs whenever the
 * skeleton's rest pose is not the bind pose or a root node carries a
 * transform (Testwuson's root rotates the mesh). So the mesh is the default
 * pose evaluated once at load. Models without a skeleton keep the file's. */
static int rest_pose_mesh(df_model_t *m, const df__rig_t *r, df_error_t *err)
{
    if (r->J == 0) return DF_OK;
    size_t n3 = (size_t)r->N * 3;
    float *out = malloc((n3 + 4) * sizeof(float));
    df_scratch_t *s = df_scratch_new();
    void *mem = s ? df_scratch_get(s, df__rig_scratch_bytes(m, 1)) : NULL;
    int rc = DF_ENOMEM;
    if (out && mem) {
        float *const outs[1] = {out};
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.out[0] = outs; /* output 0 is `positions` */
        rc = df__rig_evaluate(m, &b, mem, err);
        if (rc == DF_OK)
            rc = df__model_set_mesh(m, r->N, out, m->n_triangles, m->triangles);
    }
    free(out);
    df_scratch_free(&s);
    if (rc == DF_ENOMEM) return E(DF_ENOMEM, "out of memory");
    return rc;
}

static int rig_load(df_model_t *m, const df_st_t *st, const char *params_json,
                    const df_limits_t *lim, df_error_t *err)
{
    df_limits_t dl;
    if (!lim) {
        df_limits_default(&dl);
        lim = &dl;
    }
    df__rig_t *r = calloc(1, sizeof *r);
    if (!r) return E(DF_ENOMEM, "out of memory");
    m->impl = r; /* freed by destroy, also on failure */
    r->in_w = r->in_shape = r->in_rot = r->in_tr = r->in_mat = -1;
    int rc;

    /* ---- metadata */
    const char *fv = df_st_meta(st, "format_version");
    if (fv && strcmp(fv, "1") != 0)
        return E(DF_EUNSUPPORTED, "metadata 'format_version' is '%s' "
                                  "(this build reads 1)", fv);
    const char *sk = df_st_meta(st, "skinning");
    if (sk && strcmp(sk, "lbs") && strcmp(sk, "dqs"))
        return E(DF_EFORMAT, "metadata 'skinning' is '%s' (want lbs or dqs)",
                 sk);
    r->dqs = sk && strcmp(sk, "dqs") == 0;
    if ((rc = parse_params(params_json, &r->dqs, err))) return rc;

    /* ---- mesh */
    const df_tensor_t *tp, *tt, *tn, *tmd;
    int64_t any2[2] = {-1, 3};
    if ((rc = df_st_require(st, "positions", DF_DT_F32, 2, any2, 0, &tp, err)))
        return rc;
    int64_t N = r->N = tp->shape[0];
    if (N < 1) return E(DF_EFORMAT, "tensor 'positions': no vertices");
    if (N > lim->max_vertices)
        return E(DF_ELIMIT, "tensor 'positions': %lld vertices exceeds the "
                            "limit %lld", (long long)N,
                 (long long)lim->max_vertices);
    if ((rc = df_st_require(st, "triangles", DF_DT_I32, 2, any2, 0, &tt, err)))
        return rc;
    int64_t T = r->T = tt->shape[0];
    const int32_t *tri = tt->data;
    for (int64_t i = 0; i < 3 * T; i++)
        if (tri[i] < 0 || tri[i] >= N)
            return E(DF_EFORMAT,
                     "tensor 'triangles': triangle %lld corner %d: vertex "
                     "index %d out of range [0,%lld)",
                     (long long)(i / 3), (int)(i % 3), tri[i], (long long)N);
    int64_t sn[2] = {N, 3};
    char nctx[96];
    snprintf(nctx, sizeof nctx, "N = %lld from 'positions'", (long long)N);
    if ((rc = require(st, "normals", DF_DT_F32, 2, sn, 1, &tn, nctx, err)))
        return rc;
    int64_t smd[3] = {-1, N, 3};
    if ((rc = require(st, "morph_deltas", DF_DT_F32, 3, smd, 1, &tmd, nctx,
                      err)))
        return rc;
    r->M = tmd ? tmd->shape[0] : 0;
    const df_tensor_t *tmn = NULL;
    if ((rc = require(st, "morph_normal_deltas", DF_DT_F32, 3, smd, 1, &tmn,
                      nctx, err)))
        return rc;
    if (tmn && tmn->shape[0] != r->M)
        return E(DF_EFORMAT, "tensor 'morph_normal_deltas': %lld morphs, "
                             "'morph_deltas' has %lld",
                 (long long)tmn->shape[0], (long long)r->M);
    if (r->M > lim->max_morphs)
        return E(DF_ELIMIT, "tensor 'morph_deltas': %lld morphs exceeds the "
                            "limit %lld", (long long)r->M,
                 (long long)lim->max_morphs);
    /* shape blend shapes (SMPL-like bodies): deltas per unit beta_s */
    const df_tensor_t *tsd = NULL, *tsn = NULL;
    if ((rc = require(st, "shape_deltas", DF_DT_F32, 3, smd, 1, &tsd, nctx, err)) ||
        (rc = require(st, "shape_normal_deltas", DF_DT_F32, 3, smd, 1, &tsn, nctx, err)))
        return rc;
    r->S = tsd ? tsd->shape[0] : 0;
    if (tsn && !tsd)
        return E(DF_EFORMAT, "tensor 'shape_normal_deltas' present but 'shape_deltas' "
                             "is missing");
    if (tsn && tsn->shape[0] != r->S)
        return E(DF_EFORMAT, "tensor 'shape_normal_deltas': %lld shapes, 'shape_deltas' "
                             "has %lld", (long long)tsn->shape[0], (long long)r->S);
    if (r->S > lim->max_morphs)
        return E(DF_ELIMIT, "tensor 'shape_deltas': %lld shapes exceeds the limit %lld",
                 (long long)r->S, (long long)lim->max_morphs);
    if ((rc = df__model_set_mesh(m, N, tp->data, T, (const uint32_t *)tri)))
        return E(rc, "cannot store the mesh: %s", df_strerror(rc));
    r->rest = dupf(tp, 4);
    r->rest_nrm = xalloc((size_t)N * 3 + 4);
    if (!r->rest || !r->rest_nrm) return E(DF_ENOMEM, "out of memory");
    if (tn)
        memcpy(r->rest_nrm, tn->data, (size_t)N * 3 * sizeof(float));
    else
        compute_normals(r->rest, N, (const uint32_t *)tri, T, r->rest_nrm);
    normalize_rows(r->rest_nrm, N);
    /* morph and shape deltas plus the rest positions as the last column
     * (weight 1); the normal deltas likewise with the rest normals */
    if ((r->M + r->S > 0 &&
         !(r->deltas = morph_matrix(tmd ? tmd->data : NULL, r->M, tsd ? tsd->data : NULL,
                                    r->S, tp->data, N))) ||
        ((tmn || tsn) &&
         !(r->ndeltas = morph_matrix(tmn ? tmn->data : NULL, r->M, tsn ? tsn->data : NULL,
                                     r->S, r->rest_nrm, N))))
        return E(DF_ENOMEM, "out of memory");

    /* ---- skeleton */
    const df_tensor_t *tpar;
    int64_t s1[1] = {-1};
    if ((rc = df_st_require(st, "joint_parents", DF_DT_I32, 1, s1, 1, &tpar,
                            err)))
        return rc;
    int64_t J = r->J = tpar ? tpar->shape[0] : 0;
    if (J > lim->max_joints)
        return E(DF_ELIMIT, "tensor 'joint_parents': %lld joints exceeds the "
                            "limit %lld", (long long)J,
                 (long long)lim->max_joints);
    if (!tpar) {
        static const char *const jt[] = {
            "joint_rest_translations", "joint_rest_rotations",
            "joint_rest_scales", "inverse_bind_matrices", "skin_joints",
            "skin_weights"};
        for (size_t i = 0; i < sizeof jt / sizeof jt[0]; i++)
            if (df_st_find(st, jt[i]))
                return E(DF_EFORMAT, "tensor '%s' present but "
                                     "'joint_parents' is missing", jt[i]);
    }
    if (J > 0) {
        const df_tensor_t *trt, *trq, *trs, *tib, *tsj, *tsw;
        int64_t s3[2] = {J, 3}, s4[2] = {J, 4}, s44[3] = {J, 4, 4},
                snk[2] = {N, -1};
        char jctx[128];
        snprintf(jctx, sizeof jctx, "J = %lld from 'joint_parents', N = %lld "
                 "from 'positions'", (long long)J, (long long)N);
        if ((rc = require(st, "joint_rest_translations", DF_DT_F32, 2, s3, 0,
                          &trt, jctx, err)) ||
            (rc = require(st, "joint_rest_rotations", DF_DT_F32, 2, s4, 0, &trq,
                          jctx, err)) ||
            (rc = require(st, "joint_rest_scales", DF_DT_F32, 2, s3, 0, &trs,
                          jctx, err)) ||
            (rc = require(st, "inverse_bind_matrices", DF_DT_F32, 3, s44, 0,
                          &tib, jctx, err)) ||
            (rc = require(st, "skin_joints", DF_DT_I32, 2, snk, 0, &tsj, jctx,
                          err)) ||
            (rc = require(st, "skin_weights", DF_DT_F32, 2, snk, 0, &tsw, jctx,
                          err)))
            return rc;
        int64_t K = r->K = tsj->shape[1];
        if (K < 1 || K > 8)
            return E(DF_EFORMAT, "tensor 'skin_joints': %lld influences per "
                                 "vertex (must be 1..8)", (long long)K);
        if (tsw->shape[1] != K)
            return E(DF_EFORMAT, "tensor 'skin_weights': %lld influences, "
                                 "'skin_joints' has %lld",
                     (long long)tsw->shape[1], (long long)K);
        const int32_t *par = tpar->data;
        for (int64_t j = 0; j < J; j++)
            if (par[j] < -1 || par[j] >= j)
                return E(DF_EFORMAT,
                         "tensor 'joint_parents': joint %lld has parent %d "
                         "(must be -1 or a joint before it, < %lld)",
                         (long long)j, par[j], (long long)j);
        r->parents = malloc((size_t)J * sizeof(int32_t));
        r->rest_t = dupf(trt, 0);
        r->rest_q = dupf(trq, 0);
        r->rest_s = dupf(trs, 0);
        r->ibm = xalloc((size_t)J * 12);
        if (!r->parents || !r->rest_t || !r->rest_q || !r->rest_s || !r->ibm)
            return E(DF_ENOMEM, "out of memory");
        memcpy(r->parents, par, (size_t)J * sizeof(int32_t));
        if ((rc = check_quats(r->rest_q, J, "joint_rest_rotations", 0, err)))
            return rc;
        const float *ib = tib->data;
        for (int64_t j = 0; j < J; j++)
            if (df_m44_to_m34(ib + 16 * j, 1e-4f, r->ibm + 12 * j))
                return E(DF_EFORMAT,
                         "tensor 'inverse_bind_matrices': joint %lld: last "
                         "row is (%g %g %g %g), must be (0 0 0 1)",
                         (long long)j, (double)ib[16 * j + 12],
                         (double)ib[16 * j + 13], (double)ib[16 * j + 14],
                         (double)ib[16 * j + 15]);
        /* skin: indices, weights >= 0, rows sum to 1 (then exactly) */
        const int32_t *sj = tsj->data;
        const float *swf = tsw->data;
        float *sw = malloc((size_t)(N * K) * sizeof(float));
        if (!sw) return E(DF_ENOMEM, "out of memory");
        for (int64_t v = 0; v < N; v++) {
            double sum = 0;
            for (int64_t k = 0; k < K; k++) {
                int32_t j = sj[v * K + k];
                float w = swf[v * K + k];
                if (j < 0 || j >= J) {
                    free(sw);
                    return E(DF_EFORMAT,
                             "tensor 'skin_joints': vertex %lld influence "
                             "%lld: joint %d out of range [0,%lld)",
                             (long long)v, (long long)k, j, (long long)J);
                }
                if (!(w >= 0.0f)) {
                    free(sw);
                    return E(DF_EFORMAT,
                             "tensor 'skin_weights': vertex %lld influence "
                             "%lld: weight %g is negative",
                             (long long)v, (long long)k, (double)w);
                }
                sum += w;
            }
            if (!(fabs(sum - 1.0) <= 1e-3)) {
                free(sw);
                return E(DF_EFORMAT,
                         "tensor 'skin_weights': vertex %lld: weights sum to "
                         "%.6g (must be 1 within 1e-3)",
                         (long long)v, sum);
            }
            for (int64_t k = 0; k < K; k++)
                sw[v * K + k] = (float)(swf[v * K + k] / sum);
        }
        rc = df__skin_build(&r->skin, N, (int)K, sj, sw);
        free(sw);
        if (rc) return E(rc, "out of memory");
    }

    /* ---- joints that move with the shape */
    const df_tensor_t *tjs = NULL;
    int64_t sjs[3] = {r->S, J, 3};
    char sctx[128];
    snprintf(sctx, sizeof sctx, "S = %lld from 'shape_deltas', J = %lld from 'joint_parents'",
             (long long)r->S, (long long)J);
    if ((rc = require(st, "joint_rest_translation_shapedirs", DF_DT_F32, 3, sjs, 1, &tjs,
                      sctx, err)))
        return rc;
    if (tjs && (r->S == 0 || J == 0))
        return E(DF_EFORMAT, "tensor 'joint_rest_translation_shapedirs' needs 'shape_deltas' "
                             "and a skeleton");
    if (tjs) {
        r->shape_t = dupf(tjs, 0);
        r->shape_c = xalloc((size_t)(r->S * J * 3));
        if (!r->shape_t || !r->shape_c) return E(DF_ENOMEM, "out of memory");
        if ((rc = shape_origins(r, err))) return rc;
    }

    /* ---- names, inputs, outputs */
    if ((rc = load_names(m, st, "joint_names", "joints", "joint", (size_t)J,
                         err)) ||
        (rc = load_names(m, st, "morph_names", "morphs", "morph",
                         (size_t)r->M, err)))
        return rc;
    if (r->S > 0 && (rc = load_names(m, st, "shape_names", "shapes", "shape",
                                     (size_t)r->S, err)))
        return rc;
    int64_t shp[2];
    if (r->M > 0) {
        shp[0] = r->M;
        r->in_w = m->n_inputs;
        if ((rc = df__model_add_input(m, "weights", 1, shp, 1, NULL)))
            return E(rc, "cannot add input 'weights': %s", df_strerror(rc));
    }
    if (r->S > 0) {
        shp[0] = r->S;
        r->in_shape = m->n_inputs;
        if ((rc = df__model_add_input(m, "shape", 1, shp, 1, NULL)))
            return E(rc, "cannot add input 'shape': %s", df_strerror(rc));
    }
    if (J > 0) {
        float *world = xalloc((size_t)J * 12), *skin = xalloc((size_t)J * 12);
        if (!world || !skin) {
            free(world);
            free(skin);
            return E(DF_ENOMEM, "out of memory");
        }
        df__rig_skin_matrices(r, NULL, NULL, NULL, world, skin);
        shp[0] = J;
        shp[1] = 4;
        r->in_rot = m->n_inputs;
        rc = df__model_add_input(m, "joint_rotations", 2, shp, 1, r->rest_q);
        shp[1] = 3;
        r->in_tr = m->n_inputs;
        if (!rc)
            rc = df__model_add_input(m, "joint_translations", 2, shp, 1,
                                     r->rest_t);
        shp[1] = 12;
        r->in_mat = m->n_inputs;
        if (!rc)
            rc = df__model_add_input(m, "joint_matrices", 2, shp, 1, world);
        free(world);
        free(skin);
        if (rc) return E(rc, "cannot add joint inputs: %s", df_strerror(rc));
    }
    shp[0] = N;
    shp[1] = 3;
    if ((rc = df__model_add_output(m, "positions", 2, shp)) ||
        (rc = df__model_add_output(m, "normals", 2, shp)))
        return E(rc, "cannot add outputs: %s", df_strerror(rc));
    if ((rc = load_clips(m, r, st, lim, err))) return rc;
    return rest_pose_mesh(m, r, err);
}

/* ---------------------------------------------------------------- clips */

static int rig_clip_sample(const df_model_t *m, int c, double t,
                           float *const *bufs, uint32_t *filled,
                           df_error_t *err)
{
    const df__rig_t *r = m->impl;
    const df__rig_clip_t *cl = &r->clips[c];
    double t0 = cl->times[0], tt = t0 + t;
    int64_t i = 0;
    float a = 0.0f;
    if (tt >= cl->times[cl->F - 1]) {
        i = cl->F - 1;
    } else if (tt > t0) { /* largest i with times[i] <= tt */
        int64_t lo = 0, hi = cl->F - 1;
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            if (cl->times[mid] <= tt)
                lo = mid;
            else
                hi = mid;
        }
        i = lo;
        a = (float)((tt - cl->times[i]) / (cl->times[i + 1] - cl->times[i]));
    }
    int64_t i1 = i + 1 < cl->F ? i + 1 : i;
    int64_t J = r->J, M = r->M;
    uint32_t f = 0;
#define LERP(src, idx, width)                                               \
    do {                                                                    \
        f |= 1u << (idx);                                                   \
        float *o = bufs ? bufs[idx] : NULL;                                 \
        if (!o) break;                                                      \
        const float *s0 = (src) + i * (width), *s1 = (src) + i1 * (width);  \
        for (int64_t e = 0; e < (width); e++)                               \
            o[e] = s0[e] + a * (s1[e] - s0[e]);                             \
    } while (0)
    if (cl->w) LERP(cl->w, r->in_w, M);
    if (cl->tr) LERP(cl->tr, r->in_tr, J * 3);
    if (cl->mat) LERP(cl->mat, r->in_mat, J * 12);
#undef LERP
    if (cl->rot) {
        f |= 1u << r->in_rot;
        float *o = bufs ? bufs[r->in_rot] : NULL;
        if (o)
            for (int64_t j = 0; j < J; j++)
                df_quat_slerp(cl->rot + (i * J + j) * 4,
                              cl->rot + (i1 * J + j) * 4, a, o + 4 * j);
    }
    if (filled) *filled = f;
    (void)err;
    return DF_OK;
}

const df_kind_t df_kind_rigged = {
    .name = "rigged",
    .load = rig_load,
    .destroy = rig_destroy,
    .scratch_bytes = df__rig_scratch_bytes,
    .evaluate = df__rig_evaluate,
    .clip_sample = rig_clip_sample,
};

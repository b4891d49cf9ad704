/* kind_garment.c — the `garment` model kind: example-based clothing
 * synthesis for bodies of any shape in any pose, after Wu et al.,
 * "Example-based Real-time Clothing Synthesis for Virtual Agents".
 * Load and validation, inputs/outputs, clips; evaluation in garment_eval.c.
 *
 * DESIGN
 * A garment file is a `rigged` body with shape blend shapes (the top-level
 * tensors: positions, shape_deltas, joints, skin, clips...) plus the garment
 * under `garment/...` (docs/garment.md has the table). Load builds the body
 * as a real `rigged` model from the same tensors with the rigged kind's own
 * load (same validation; LBS forced, as the examples were simulated with
 * it), then validates the garment tensors and precomputes what evaluation
 * wants: the binding in skin.h's blocked layout, padded example arrays, the
 * inverse skin matrices S(theta_e, beta0)^-1 of every example pose, the
 * joints' rotation vectors of every example (the distance of Eq. 7 compares
 * them), the region weights region-major, and the garment's vertices
 * re-ordered by region so that each region's vertices are a few runs of
 * skin blocks (evaluation works on runs; outputs go back to the file's
 * order).
 *
 * Options: metadata garment_damping / garment_margin / garment_top /
 * garment_power, overridden by config parameters {"damping", "margin",
 * "top", "power", "resolve_penetration", "shape_model"} (the last two are
 * for measuring: without penetration resolution, without the shape term).
 *
 * Input order: shape (when the body has shapes), joint_rotations, state.
 * Outputs: positions, normals, body_positions, body_normals, state.
 * Clips are the body's (joint rotations), sampled by the rigged kind.
 */
#include "garment/garment_internal.h"
#include "math/mathx.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E(code, ...) df_error_set(err, code, __VA_ARGS__)

extern const df_kind_t df_kind_rigged;

static float *xalloc(size_t nfloats)
{
    void *p = NULL;
    size_t bytes = ((nfloats ? nfloats : 1) * sizeof(float) + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes)) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void g_destroy(void *impl)
{
    df__garment_t *g = impl;
    if (!g) return;
    df_model_unref(&g->body);
    free(g->perm);
    free(g->run_off);
    free(g->runs);
    free(g->rest);
    free(g->tris);
    df__skin_free(&g->skin);
    free(g->regions_t);
    free(g->Q);
    free(g->cand);
    free(g->nb_off);
    free(g->nb);
    free(g->clear);
    free(g->pose_rv);
    free(g->pose_ex);
    free(g->pose_inv);
    free(g->anc_rv);
    free(g->anc_rot);
    free(g->anc_base);
    free(g->anc_inv0);
    free(g->basis);
    free(g->map);
    free(g);
}

void df__garment_rotvecs(const float *q, int64_t n, float *rv)
{
    for (int64_t i = 0; i < n; i++) {
        double x = q[4 * i], y = q[4 * i + 1], z = q[4 * i + 2], w = q[4 * i + 3];
        double nn = sqrt(x * x + y * y + z * z + w * w);
        if (w < 0) nn = -nn;
        x /= nn, y /= nn, z /= nn, w /= nn;
        double s = sqrt(x * x + y * y + z * z);
        double k = s > 1e-12 ? 2.0 * atan2(s, w) / s : 2.0;
        rv[3 * i] = (float)(x * k);
        rv[3 * i + 1] = (float)(y * k);
        rv[3 * i + 2] = (float)(z * k);
    }
}

/* A number from metadata key (default def when absent), range-checked. */
static int meta_num(const df_st_t *st, const char *key, double def, double lo, double hi,
                    double *out, df_error_t *err)
{
    const char *v = df_st_meta(st, key);
    *out = def;
    if (!v) return DF_OK;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi))
        return E(DF_EFORMAT, "metadata '%s' is '%s' (want a number in [%g, %g])", key, v, lo, hi);
    *out = x;
    return DF_OK;
}

static int parse_params(df__garment_t *g, const char *params, df_error_t *err)
{
    if (!params || !*params) return DF_OK;
    json_error_t je;
    json_t *o = json_loads(params, 0, &je);
    if (!o) return E(DF_EINVAL, "parameters: not JSON: %s", je.text);
    int rc = DF_OK;
    if (!json_is_object(o)) {
        rc = E(DF_EINVAL, "parameters: not a JSON object");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        double x = json_number_value(v);
        if (!strcmp(key, "damping") && json_is_number(v) && x >= 0 && x < 1)
            g->damping = (float)x;
        else if (!strcmp(key, "margin") && json_is_number(v) && x >= 0 && x <= 0.1)
            g->margin = (float)x;
        else if (!strcmp(key, "top") && json_is_integer(v) && x >= 1 && x <= DF_GARMENT_MAX_TOP)
            g->top = (int)x;
        else if (!strcmp(key, "power") && json_is_number(v) && x > 0 && x <= 16)
            g->power = (float)x;
        else if (!strcmp(key, "resolve_penetration") && json_is_boolean(v))
            g->resolve = json_is_true(v);
        else if (!strcmp(key, "shape_model") && json_is_boolean(v))
            g->shape_model = json_is_true(v);
        else {
            rc = E(DF_EINVAL,
                   "parameters: '%s' is unknown or out of range (damping in [0,1), margin in "
                   "[0,0.1] m, top in 1..%d, power in (0,16], resolve_penetration and "
                   "shape_model true/false)",
                   key, DF_GARMENT_MAX_TOP);
            break;
        }
    }
out:
    json_decref(o);
    return rc;
}

static int need(const df_st_t *st, const char *name, df_dtype_t dt, int ndim, const int64_t *shape,
                const df_tensor_t **t, df_error_t *err)
{
    return df_st_require(st, name, dt, ndim, shape, 0, t, err);
}

static int check_quats(const float *q, int64_t n, int64_t J, const char *name, df_error_t *err)
{
    for (int64_t i = 0; i < n; i++) {
        const float *x = q + 4 * i;
        double nn = sqrt((double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2] +
                         (double)x[3] * x[3]);
        if (!(nn > 1e-6))
            return E(DF_EFORMAT, "tensor '%s': example %lld joint %lld: quaternion norm %g",
                     name, (long long)(i / J), (long long)(i % J), nn);
    }
    return DF_OK;
}

/* S(theta, beta0)^-1 of each of n poses [n,J,4] into inv [n,J,12]. */
static int inverse_skins(const df__garment_t *g, const float *rot, int64_t n, float *inv,
                         const char *name, df_error_t *err)
{
    int64_t J = g->J;
    float *world = xalloc((size_t)J * 12), *skin = xalloc((size_t)J * 12);
    int rc = world && skin ? DF_OK : E(DF_ENOMEM, "out of memory");
    for (int64_t e = 0; e < n && !rc; e++) {
        df__rig_skin_matrices(g->rig, rot + e * J * 4, NULL, NULL, world, skin);
        for (int64_t j = 0; j < J && !rc; j++)
            if (df_m34_inverse(skin + 12 * j, inv + (e * J + j) * 12))
                rc = E(DF_EFORMAT, "tensor '%s': example %lld: joint %lld's skin matrix is "
                                   "singular", name, (long long)e, (long long)j);
    }
    free(world);
    free(skin);
    return rc;
}

typedef struct {
    int32_t dom, sec, idx;
} vkey_t;

static int vkey_cmp(const void *a, const void *b)
{
    const vkey_t *x = a, *y = b;
    if (x->dom != y->dom) return x->dom < y->dom ? -1 : 1;
    if (x->sec != y->sec) return x->sec < y->sec ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The stored order (garment_internal.h): perm[y] = file index of stored
 * vertex y, sorted by dominant region, then second region. */
static int32_t *region_order(const float *rg, int64_t G, int64_t R)
{
    vkey_t *k = malloc((size_t)G * sizeof *k);
    int32_t *perm = malloc((size_t)G * sizeof *perm);
    if (!k || !perm) {
        free(k);
        free(perm);
        return NULL;
    }
    for (int64_t v = 0; v < G; v++) {
        int32_t d = 0, e = -1;
        for (int64_t r = 1; r < R; r++)
            if (rg[v * R + r] > rg[v * R + d]) d = (int32_t)r;
        for (int64_t r = 0; r < R; r++)
            if (r != d && rg[v * R + r] > 0 && (e < 0 || rg[v * R + r] > rg[v * R + e])) e = (int32_t)r;
        k[v] = (vkey_t){d, e < 0 ? (int32_t)R : e, (int32_t)v};
    }
    qsort(k, (size_t)G, sizeof *k, vkey_cmp);
    for (int64_t y = 0; y < G; y++) perm[y] = k[y].idx;
    free(k);
    return perm;
}

/* Runs of skin blocks holding a vertex of each region. */
static int region_runs(df__garment_t *g)
{
    const int64_t G = g->G, R = g->R, nb = g->nblocks;
    g->run_off = calloc((size_t)R + 1, sizeof *g->run_off);
    g->runs = malloc((size_t)(R * nb + 1) * 2 * sizeof *g->runs); /* at most nb runs each */
    if (!g->run_off || !g->runs) return DF_ENOMEM;
    int64_t n = 0;
    for (int64_t r = 0; r < R; r++) {
        g->run_off[r] = n;
        const float *w = g->regions_t + r * G;
        int64_t open = -1;
        for (int64_t b = 0; b <= nb; b++) {
            int has = 0;
            for (int64_t v = b * DF__SKIN_BLOCK; b < nb && v < G && v < (b + 1) * DF__SKIN_BLOCK; v++)
                has |= w[v] > 0.0f;
            if (has && open < 0) open = b;
            if (!has && open >= 0) {
                g->runs[2 * n] = open;
                g->runs[2 * n + 1] = b;
                n++;
                open = -1;
            }
        }
    }
    g->run_off[R] = n;
    return DF_OK;
}

/* Neighbours of each body vertex (sharing a triangle), sorted, unique. */
static int body_neighbours(df__garment_t *g)
{
    const int64_t N = g->Nb, T = g->bT;
    const uint32_t *t = g->btris;
    int64_t *cnt = calloc((size_t)N + 1, sizeof *cnt);
    int32_t *tmp = malloc((size_t)(6 * T + 1) * sizeof *tmp);
    g->nb_off = calloc((size_t)N + 1, sizeof *g->nb_off);
    if (!cnt || !tmp || !g->nb_off) {
        free(cnt);
        free(tmp);
        return DF_ENOMEM;
    }
    for (int64_t i = 0; i < T; i++)
        for (int a = 0; a < 3; a++) cnt[t[3 * i + a] + 1] += 2;
    for (int64_t v = 0; v < N; v++) cnt[v + 1] += cnt[v];
    int64_t *fill = g->nb_off; /* as a cursor first */
    memcpy(fill, cnt, (size_t)(N + 1) * sizeof *fill);
    for (int64_t i = 0; i < T; i++)
        for (int a = 0; a < 3; a++) {
            uint32_t v = t[3 * i + a];
            tmp[fill[v]++] = (int32_t)t[3 * i + (a + 1) % 3];
            tmp[fill[v]++] = (int32_t)t[3 * i + (a + 2) % 3];
        }
    g->nb = malloc((size_t)(6 * T + 1) * sizeof *g->nb);
    if (!g->nb) {
        free(cnt);
        free(tmp);
        return DF_ENOMEM;
    }
    int64_t n = 0;
    for (int64_t v = 0; v < N; v++) { /* sort each list (short), drop duplicates */
        int32_t *l = tmp + cnt[v];
        int64_t len = cnt[v + 1] - cnt[v];
        for (int64_t i = 1; i < len; i++)
            for (int64_t j = i; j > 0 && l[j - 1] > l[j]; j--) {
                int32_t x = l[j];
                l[j] = l[j - 1];
                l[j - 1] = x;
            }
        g->nb_off[v] = n;
        for (int64_t i = 0; i < len; i++)
            if (i == 0 || l[i] != l[i - 1]) g->nb[n++] = l[i];
    }
    g->nb_off[N] = n;
    free(cnt);
    free(tmp);
    return DF_OK;
}

static int g_load(df_model_t *m, const df_st_t *st, const char *params, const df_limits_t *lim,
                  df_error_t *err)
{
    df_limits_t dl;
    if (!lim) {
        df_limits_default(&dl);
        lim = &dl;
    }
    df__garment_t *g = calloc(1, sizeof *g);
    if (!g) return E(DF_ENOMEM, "out of memory");
    m->impl = g; /* freed by destroy, also on failure */
    g->in_shape = g->in_rot = g->in_state = -1;
    g->out_pos = g->out_nrm = g->out_bpos = g->out_bnrm = g->out_state = -1;
    int rc;
    const char *fv = df_st_meta(st, "format_version");
    if (fv && strcmp(fv, "1") != 0)
        return E(DF_EUNSUPPORTED, "metadata 'format_version' is '%s' (this build reads 1)", fv);

    /* ---- options */
    double x;
    if ((rc = meta_num(st, "garment_damping", 0.5, 0, 0.999, &x, err))) return rc;
    g->damping = (float)x;
    if ((rc = meta_num(st, "garment_margin", 0.005, 0, 0.1, &x, err))) return rc;
    g->margin = (float)x;
    if ((rc = meta_num(st, "garment_top", 5, 1, DF_GARMENT_MAX_TOP, &x, err))) return rc;
    g->top = (int)x;
    if ((rc = meta_num(st, "garment_power", 3, 1e-3, 16, &x, err))) return rc;
    g->power = (float)x;
    g->shape_model = g->resolve = 1;
    const char *feat = df_st_meta(st, "garment_features");
    if (feat && strcmp(feat, "linear") && strcmp(feat, "quadratic"))
        return E(DF_EFORMAT, "metadata 'garment_features' is '%s' (want linear or quadratic)",
                 feat);
    g->quadratic = feat && !strcmp(feat, "quadratic");
    if ((rc = parse_params(g, params, err))) return rc;

    /* ---- the body: a rigged model of the file's own tensors, LBS */
    df_model_t *b = calloc(1, sizeof *b);
    if (!b) return E(DF_ENOMEM, "out of memory");
    b->kind = &df_kind_rigged;
    atomic_init(&b->refs, 1);
    g->body = b;
    if ((rc = df_kind_rigged.load(b, st, "{\"skinning\":\"lbs\"}", lim, err))) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        return E(rc, "body: %s", tmp);
    }
    g->rig = b->impl;
    g->J = g->rig->J;
    g->S = g->rig->S;
    g->Nb = g->rig->N;
    if (g->J < 1) return E(DF_EFORMAT, "body: no skeleton (tensor 'joint_parents' missing)");
    g->b_in_shape = df_model_find_input(b, "shape");
    g->b_in_rot = df_model_find_input(b, "joint_rotations");
    g->b_out_pos = df_model_find_output(b, "positions");
    g->b_out_nrm = df_model_find_output(b, "normals");
    g->btris = df_model_triangles(b);
    g->bT = df_model_n_triangles(b);
    if ((rc = body_neighbours(g))) return E(rc, "out of memory");
    DF_ASSERT(g->b_in_rot >= 0 && g->b_out_pos >= 0 && g->b_out_nrm >= 0);
    const int64_t J = g->J, S = g->S, J3 = 3 * J;

    /* ---- the garment mesh and its binding */
    const df_tensor_t *tp, *tt, *tsj, *tsw, *trg, *tq, *tbv, *tcl;
    int64_t any3[2] = {-1, 3};
    if ((rc = need(st, "garment/positions", DF_DT_F32, 2, any3, &tp, err))) return rc;
    const int64_t G = g->G = tp->shape[0];
    if (G < 1) return E(DF_EFORMAT, "tensor 'garment/positions': no vertices");
    if (G > lim->max_vertices)
        return E(DF_ELIMIT, "tensor 'garment/positions': %lld vertices exceeds the limit %lld",
                 (long long)G, (long long)lim->max_vertices);
    if ((rc = need(st, "garment/triangles", DF_DT_I32, 2, any3, &tt, err))) return rc;
    g->T = tt->shape[0];
    const int32_t *tri = tt->data;
    for (int64_t i = 0; i < 3 * g->T; i++)
        if (tri[i] < 0 || tri[i] >= G)
            return E(DF_EFORMAT, "tensor 'garment/triangles': triangle %lld corner %d: vertex "
                                 "%d out of range [0,%lld)",
                     (long long)(i / 3), (int)(i % 3), tri[i], (long long)G);
    int64_t sgk[2] = {G, -1};
    if ((rc = need(st, "garment/skin_joints", DF_DT_I32, 2, sgk, &tsj, err))) return rc;
    const int64_t K = g->K = tsj->shape[1];
    if (K < 1 || K > 8)
        return E(DF_EFORMAT, "tensor 'garment/skin_joints': %lld influences (must be 1..8)",
                 (long long)K);
    int64_t sgK[2] = {G, K};
    if ((rc = need(st, "garment/skin_weights", DF_DT_F32, 2, sgK, &tsw, err))) return rc;
    if ((rc = need(st, "garment/regions", DF_DT_F32, 2, sgk, &trg, err))) return rc;
    const int64_t R = g->R = trg->shape[1];
    if (R < 1 || R > DF_GARMENT_MAX_REGIONS)
        return E(DF_EFORMAT, "tensor 'garment/regions': %lld regions (must be 1..%d)",
                 (long long)R, DF_GARMENT_MAX_REGIONS);
    int64_t sq[2] = {R, J3};
    if ((rc = need(st, "garment/dof_weights", DF_DT_F32, 2, sq, &tq, err))) return rc;
    if ((rc = need(st, "garment/body_vertices", DF_DT_I32, 2, sgk, &tbv, err))) return rc;
    g->C = tbv->shape[1];
    if (g->C < 1 || g->C > 16)
        return E(DF_EFORMAT, "tensor 'garment/body_vertices': %lld candidates per vertex (must "
                             "be 1..16)", (long long)g->C);
    int64_t sg1[1] = {G};
    if ((rc = need(st, "garment/clearance", DF_DT_F32, 1, sg1, &tcl, err))) return rc;

    const int32_t *sj = tsj->data;
    const float *swf = tsw->data;
    float *sw = malloc((size_t)(G * K) * sizeof(float));
    int32_t *sjp = malloc((size_t)(G * K) * sizeof(int32_t));
    if (!sw || !sjp) {
        free(sw);
        free(sjp);
        return E(DF_ENOMEM, "out of memory");
    }
    for (int64_t v = 0; v < G; v++) {
        double sum = 0;
        for (int64_t k = 0; k < K; k++) {
            int32_t j = sj[v * K + k];
            float w = swf[v * K + k];
            if (j < 0 || j >= J || !(w >= 0)) {
                free(sw);
                free(sjp);
                return E(DF_EFORMAT, "tensor 'garment/skin_%s': vertex %lld influence %lld: %s",
                         j < 0 || j >= J ? "joints" : "weights", (long long)v, (long long)k,
                         j < 0 || j >= J ? "joint out of range" : "negative weight");
            }
            sum += w;
        }
        if (!(fabs(sum - 1.0) <= 1e-3)) {
            free(sw);
            free(sjp);
            return E(DF_EFORMAT, "tensor 'garment/skin_weights': vertex %lld: weights sum to "
                                 "%.6g (must be 1 within 1e-3)", (long long)v, sum);
        }
    }

    const float *rg = trg->data;
    g->regions_t = xalloc((size_t)(R * G));
    if (!g->regions_t) {
        free(sw);
        free(sjp);
        return E(DF_ENOMEM, "out of memory");
    }
    for (int64_t v = 0; v < G; v++) {
        double sum = 0;
        for (int64_t r = 0; r < R; r++) {
            if (!(rg[v * R + r] >= 0)) {
                free(sw);
                free(sjp);
                return E(DF_EFORMAT, "tensor 'garment/regions': vertex %lld region %lld: "
                                     "negative weight", (long long)v, (long long)r);
            }
            sum += rg[v * R + r];
        }
        if (!(fabs(sum - 1.0) <= 1e-3)) {
            free(sw);
            free(sjp);
            return E(DF_EFORMAT, "tensor 'garment/regions': vertex %lld: weights sum to %.6g "
                                 "(must be 1 within 1e-3)", (long long)v, sum);
        }
    }
    /* the stored order, then everything per vertex in it */
    g->perm = region_order(rg, G, R);
    int32_t *inv = malloc((size_t)G * sizeof(int32_t));
    if (!g->perm || !inv) {
        free(sw);
        free(sjp);
        free(inv);
        return E(DF_ENOMEM, "out of memory");
    }
    for (int64_t y = 0; y < G; y++) {
        int64_t v = g->perm[y];
        inv[v] = (int32_t)y;
        double sum = 0, rs = 0;
        for (int64_t k = 0; k < K; k++) sum += swf[v * K + k];
        for (int64_t k = 0; k < K; k++) {
            sjp[y * K + k] = sj[v * K + k];
            sw[y * K + k] = (float)(swf[v * K + k] / sum);
        }
        for (int64_t r = 0; r < R; r++) rs += rg[v * R + r];
        for (int64_t r = 0; r < R; r++) g->regions_t[r * G + y] = (float)(rg[v * R + r] / rs);
    }
    rc = df__skin_build(&g->skin, G, (int)K, sjp, sw);
    free(sw);
    free(sjp);
    if (rc) {
        free(inv);
        return E(rc, "out of memory");
    }
    g->nblocks = g->skin.nblocks;
    if ((rc = region_runs(g))) {
        free(inv);
        return E(rc, "out of memory");
    }
    g->Q = xalloc((size_t)(R * J3));
    if (!g->Q) {
        free(inv);
        return E(DF_ENOMEM, "out of memory");
    }
    memcpy(g->Q, tq->data, (size_t)(R * J3) * sizeof(float));
    for (int64_t i = 0; i < R * J3; i++)
        if (!(g->Q[i] >= 0)) {
            free(inv);
            return E(DF_EFORMAT, "tensor 'garment/dof_weights': region %lld DOF %lld: negative",
                     (long long)(i / J3), (long long)(i % J3));
        }
    const int32_t *bv = tbv->data;
    for (int64_t i = 0; i < G * g->C; i++)
        if (bv[i] < 0 || bv[i] >= g->Nb) {
            free(inv);
            return E(DF_EFORMAT, "tensor 'garment/body_vertices': vertex %lld: body vertex %d "
                                 "out of range [0,%lld)",
                     (long long)(i / g->C), bv[i], (long long)g->Nb);
        }
    g->cand = malloc((size_t)(G * g->C) * sizeof(int32_t));
    g->clear = xalloc((size_t)G);
    g->gs = ((size_t)G * 3 + 4 + 15) & ~(size_t)15;
    g->rest = xalloc(g->gs);
    g->tris = malloc((size_t)(g->T ? g->T : 1) * 3 * sizeof(uint32_t));
    if (!g->cand || !g->clear || !g->rest || !g->tris) {
        free(inv);
        return E(DF_ENOMEM, "out of memory");
    }
    const float *clr = tcl->data, *rp = tp->data;
    for (int64_t y = 0; y < G; y++) {
        int64_t v = g->perm[y];
        memcpy(g->cand + y * g->C, bv + v * g->C, (size_t)g->C * sizeof(int32_t));
        g->clear[y] = clr[v];
        memcpy(g->rest + 3 * y, rp + 3 * v, 3 * sizeof(float));
    }
    for (int64_t i = 0; i < 3 * g->T; i++) g->tris[i] = (uint32_t)inv[tri[i]];
    free(inv);

    /* ---- examples: the pose model (template body) and the anchors */
    const df_tensor_t *tpr, *tpe, *tar, *tab, *tbs, *tmp_;
    int64_t sr[3] = {-1, J, 4};
    if ((rc = need(st, "garment/pose_rotations", DF_DT_F32, 3, sr, &tpr, err))) return rc;
    const int64_t P = g->P = tpr->shape[0];
    if (P < 1 || P > DF_GARMENT_MAX_EXAMPLES)
        return E(DF_EFORMAT, "tensor 'garment/pose_rotations': %lld pose examples (must be "
                             "1..%d)", (long long)P, DF_GARMENT_MAX_EXAMPLES);
    int64_t se[3] = {P, G, 3};
    if ((rc = need(st, "garment/pose_examples", DF_DT_F32, 3, se, &tpe, err))) return rc;
    if ((rc = need(st, "garment/anchor_rotations", DF_DT_F32, 3, sr, &tar, err))) return rc;
    const int64_t A = g->A = tar->shape[0];
    if (A > DF_GARMENT_MAX_EXAMPLES)
        return E(DF_ELIMIT, "tensor 'garment/anchor_rotations': %lld anchors exceeds %d",
                 (long long)A, DF_GARMENT_MAX_EXAMPLES);
    int64_t sa[3] = {A, G, 3};
    if ((rc = need(st, "garment/anchor_base", DF_DT_F32, 3, sa, &tab, err))) return rc;
    int64_t sb[4] = {A, -1, G, 3};
    if ((rc = need(st, "garment/anchor_basis", DF_DT_F32, 4, sb, &tbs, err))) return rc;
    g->k = tbs->shape[1];
    if (g->k > DF_GARMENT_MAX_COMPONENTS)
        return E(DF_ELIMIT, "tensor 'garment/anchor_basis': %lld components exceeds %d",
                 (long long)g->k, DF_GARMENT_MAX_COMPONENTS);
    g->F = g->quadratic ? 2 * S : S;
    int64_t sm[3] = {A, g->k, g->F};
    char ctx[160];
    if ((rc = need(st, "garment/anchor_map", DF_DT_F32, 3, sm, &tmp_, err))) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        snprintf(ctx, sizeof ctx, "F = %lld features of %lld shapes (%s)", (long long)g->F,
                 (long long)S, g->quadratic ? "quadratic" : "linear");
        return E(rc, "%.300s (%s)", tmp, ctx);
    }
    if ((rc = check_quats(tpr->data, P * J, J, "garment/pose_rotations", err)) ||
        (rc = check_quats(tar->data, A * J, J, "garment/anchor_rotations", err)))
        return rc;
    g->pose_rv = xalloc((size_t)(P * J3));
    g->pose_ex = xalloc((size_t)P * g->gs);
    g->pose_inv = xalloc((size_t)(P * J * 12));
    g->anc_rv = xalloc((size_t)(A * J3));
    g->anc_rot = xalloc((size_t)(A * J * 4));
    g->anc_base = xalloc((size_t)A * g->gs);
    g->anc_inv0 = xalloc((size_t)(A * J * 12));
    g->basis = xalloc((size_t)(A * g->k * G * 3));
    g->map = xalloc((size_t)(A * g->k * g->F));
    if (!g->pose_rv || !g->pose_ex || !g->pose_inv || !g->anc_rv || !g->anc_rot ||
        !g->anc_base || !g->anc_inv0 || !g->basis || !g->map)
        return E(DF_ENOMEM, "out of memory");
    df__garment_rotvecs(tpr->data, P * J, g->pose_rv);
    df__garment_rotvecs(tar->data, A * J, g->anc_rv);
    memcpy(g->anc_rot, tar->data, (size_t)(A * J * 4) * sizeof(float));
    for (int64_t i = 0; i < A * J; i++) df_quat_normalize(g->anc_rot + 4 * i);
    for (int64_t y = 0; y < G; y++) { /* stored order */
        int64_t v = g->perm[y];
        for (int64_t e = 0; e < P; e++)
            memcpy(g->pose_ex + e * g->gs + 3 * y, (const float *)tpe->data + (e * G + v) * 3,
                   3 * sizeof(float));
        for (int64_t e = 0; e < A; e++)
            memcpy(g->anc_base + e * g->gs + 3 * y, (const float *)tab->data + (e * G + v) * 3,
                   3 * sizeof(float));
        for (int64_t e = 0; e < A * g->k; e++)
            memcpy(g->basis + e * G * 3 + 3 * y, (const float *)tbs->data + (e * G + v) * 3,
                   3 * sizeof(float));
    }
    memcpy(g->map, tmp_->data, (size_t)(A * g->k * g->F) * sizeof(float));
    if ((rc = inverse_skins(g, tpr->data, P, g->pose_inv, "garment/pose_rotations", err)) ||
        (rc = inverse_skins(g, g->anc_rot, A, g->anc_inv0, "garment/anchor_rotations", err)))
        return rc;
    g->nstate = R * (P + A);

    /* ---- mesh, names, inputs, outputs */
    if ((rc = df__model_set_mesh(m, G, tp->data, g->T, (const uint32_t *)tri)))
        return E(rc, "cannot store the mesh: %s", df_strerror(rc));
    const char *const *names;
    size_t nn = df_model_names(b, "joints", &names);
    if ((rc = df__model_set_names(m, "joints", nn, names)))
        return E(rc, "cannot register joint names: %s", df_strerror(rc));
    if (S > 0) {
        nn = df_model_names(b, "shapes", &names);
        if ((rc = df__model_set_names(m, "shapes", nn, names)))
            return E(rc, "cannot register shape names: %s", df_strerror(rc));
    }
    int64_t shp[2];
    if (S > 0) {
        shp[0] = S;
        g->in_shape = m->n_inputs;
        if ((rc = df__model_add_input(m, "shape", 1, shp, 1, NULL)))
            return E(rc, "cannot add input 'shape': %s", df_strerror(rc));
    }
    shp[0] = J;
    shp[1] = 4;
    g->in_rot = m->n_inputs;
    if ((rc = df__model_add_input(m, "joint_rotations", 2, shp, 1,
                                  df_model_input_default(b, g->b_in_rot))))
        return E(rc, "cannot add input 'joint_rotations': %s", df_strerror(rc));
    float *none = xalloc((size_t)g->nstate);
    if (!none) return E(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < g->nstate; i++) none[i] = -1.0f; /* no previous frame */
    shp[0] = g->nstate;
    g->in_state = m->n_inputs;
    rc = df__model_add_input(m, "state", 1, shp, 1, none);
    free(none);
    if (rc) return E(rc, "cannot add input 'state': %s", df_strerror(rc));
    int64_t sg3[2] = {G, 3}, sb3[2] = {g->Nb, 3}, ss[1] = {g->nstate};
    g->out_pos = m->n_outputs;
    if ((rc = df__model_add_output(m, "positions", 2, sg3)))
        return E(rc, "cannot add outputs: %s", df_strerror(rc));
    g->out_nrm = m->n_outputs;
    if ((rc = df__model_add_output(m, "normals", 2, sg3)))
        return E(rc, "cannot add outputs: %s", df_strerror(rc));
    g->out_bpos = m->n_outputs;
    if ((rc = df__model_add_output(m, "body_positions", 2, sb3)))
        return E(rc, "cannot add outputs: %s", df_strerror(rc));
    g->out_bnrm = m->n_outputs;
    if ((rc = df__model_add_output(m, "body_normals", 2, sb3)))
        return E(rc, "cannot add outputs: %s", df_strerror(rc));
    g->out_state = m->n_outputs;
    if ((rc = df__model_add_output(m, "state", 1, ss)))
        return E(rc, "cannot add outputs: %s", df_strerror(rc));

    /* clips: the body's */
    if (b->n_clips) {
        m->clips = calloc(b->n_clips, sizeof *m->clips);
        if (!m->clips) return E(DF_ENOMEM, "out of memory");
        memcpy(m->clips, b->clips, b->n_clips * sizeof *m->clips); /* names/times owned by body */
        m->n_clips = b->n_clips;
        nn = df_model_names(b, "clips", &names);
        if ((rc = df__model_set_names(m, "clips", nn, names)))
            return E(rc, "cannot register clip names: %s", df_strerror(rc));
    }
    return DF_OK;
}

static int g_clip_sample(const df_model_t *m, int c, double t, float *const *bufs,
                         uint32_t *filled, df_error_t *err)
{
    const df__garment_t *g = m->impl;
    float *bb[DF_MAX_IO] = {0};
    if (bufs && g->in_rot >= 0) bb[g->b_in_rot] = bufs[g->in_rot];
    uint32_t f = 0;
    int rc = df_kind_rigged.clip_sample(g->body, c, t, bufs ? bb : NULL, &f, err);
    if (filled) *filled = (f >> g->b_in_rot) & 1u ? 1u << g->in_rot : 0u;
    return rc;
}

const df_kind_t df_kind_garment = {
    .name = "garment",
    .load = g_load,
    .destroy = g_destroy,
    .scratch_bytes = df__garment_scratch_bytes,
    .evaluate = df__garment_evaluate,
    .clip_sample = g_clip_sample,
};

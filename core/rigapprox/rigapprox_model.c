/* rigapprox_model.c — the rigapprox model file: features (Eq. 9), writer
 * and validating reader. Layout in docs/rigapprox.md; design in rigapprox.h.
 * The reader borrows every array from the open safetensors file (no copy),
 * and builds df_mlp_t shells whose weights point into it.
 */
#include "rigapprox/rigapprox.h"
#include "base/model_internal.h"
#include "math/nn.h"
#include "math/laplacian.h"
#include "math/mathx.h"

#include <math.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *variant_names[] = {"ours", "local", "pcalr", "lbs"};

const char *df_ramodel_variant_name(int v)
{
    return v >= 0 && v < 4 ? variant_names[v] : "?";
}

int df_rigapprox_local(int64_t nj, const int32_t *par, const float *world, float *local)
{
    int rc = 0;
    for (int64_t j = 0; j < nj; j++) {
        int32_t p = par ? par[j] : -1;
        float inv[12];
        if (p < 0 || df_m34_inverse(world + (int64_t)p * 12, inv)) {
            if (p >= 0 && !rc) rc = -1 - p;
            memcpy(local + j * 12, world + j * 12, sizeof(float) * 12);
            continue;
        }
        df_m34_mul(inv, world + j * 12, local + j * 12);
    }
    return rc;
}

int df_ramodel_features(const df_ramodel_t *m, const float *world,
                        const float *controls, float *out)
{
    int64_t nw = m->nj * 12;
    int rc = 0;
    if (m->parents) {
        rc = df_rigapprox_local(m->nj, m->parents, world, out); /* out holds >= 12 J floats */
        for (int64_t i = 0; i < nw; i++) out[i] = (out[i] - m->feat_mean[i]) * m->feat_scale[i];
    } else {
        for (int64_t i = 0; i < nw; i++) out[i] = (world[i] - m->feat_mean[i]) * m->feat_scale[i];
    }
    for (int64_t c = 0; c < m->nc; c++)
        out[nw + c] = (controls[c] - m->feat_mean[nw + c]) * m->feat_scale[nw + c];
    return rc;
}

/* Parents valid: each -1 or another joint. (No tree check: a local matrix
 * only needs its parent's world matrix, never a chain.) */
static int check_parents(int64_t J, const int32_t *par, df_error_t *err)
{
    for (int64_t j = 0; j < J; j++)
        if (par[j] < -1 || par[j] >= J || par[j] == j)
            return df_error_set(err, DF_EFORMAT, "rigapprox: joint_parents[%lld] = %d invalid (-1 or another joint < %lld)",
                                (long long)j, par[j], (long long)J);
    return DF_OK;
}

static char *names_json(char **names, int64_t n)
{
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(a, json_string(names && names[i] ? names[i] : ""));
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

static int add_mlp(df_st_writer_t *w, const char *prefix, const df_mlp_t *n)
{
    int rc = 0;
    char nm[128];
    for (int l = 0; l < n->n_layers; l++) {
        int64_t sw[2] = {n->dims[l + 1], n->dims[l]}, sb[1] = {n->dims[l + 1]};
        snprintf(nm, sizeof nm, "%s/%d/weight", prefix, l);
        rc |= df_st_writer_add(w, nm, DF_DT_F32, 2, sw, n->w[l]);
        snprintf(nm, sizeof nm, "%s/%d/bias", prefix, l);
        rc |= df_st_writer_add(w, nm, DF_DT_F32, 1, sb, n->b[l]);
    }
    return rc;
}

int df_ramodel_write(const df_ramodel_t *m, const char *path, df_error_t *err)
{
    df_st_writer_t *w = df_st_writer_new();
    if (!w) return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory");
    int rc = 0;
    char buf[64];
    int64_t V = m->nv, s_v3[2] = {V, 3}, s_t3[2] = {m->nt, 3}, s_j12[2] = {m->nj, 12},
            s_vk[2] = {V, m->k}, s_c3[2] = {m->nc, 3}, s_f[1] = {m->nf};
    char *cn = names_json(m->control_names, m->nc), *jn = names_json(m->joint_names, m->nj);
    rc |= df_st_writer_meta(w, "kind", "rigapprox");
    rc |= df_st_writer_meta(w, "format_version", m->parents ? "2" : "1");
    rc |= df_st_writer_meta(w, "variant", df_ramodel_variant_name(m->variant));
    rc |= df_st_writer_meta(w, "control_names", cn ? cn : "[]");
    rc |= df_st_writer_meta(w, "joint_names", jn ? jn : "[]");
    snprintf(buf, sizeof buf, "%.17g", m->omega);
    rc |= df_st_writer_meta(w, "omega", buf);
    if (m->dqs) rc |= df_st_writer_meta(w, "skinning", "dqs");
    free(cn), free(jn);
    rc |= df_st_writer_add(w, "rest_positions", DF_DT_F32, 2, s_v3, m->rest);
    rc |= df_st_writer_add(w, "triangles", DF_DT_I32, 2, s_t3, m->tris);
    rc |= df_st_writer_add(w, "inverse_bind_matrices", DF_DT_F32, 2, s_j12, m->invbind);
    rc |= df_st_writer_add(w, "skin_joints", DF_DT_I32, 2, s_vk, m->skin_j);
    rc |= df_st_writer_add(w, "skin_weights", DF_DT_F32, 2, s_vk, m->skin_w);
    if (m->nc) rc |= df_st_writer_add(w, "control_ranges", DF_DT_F32, 2, s_c3, m->ctrl_range);
    rc |= df_st_writer_add(w, "feature_mean", DF_DT_F32, 1, s_f, m->feat_mean);
    rc |= df_st_writer_add(w, "feature_scale", DF_DT_F32, 1, s_f, m->feat_scale);
    if (m->parents) {
        int64_t s_j[1] = {m->nj};
        rc |= df_st_writer_add(w, "joint_parents", DF_DT_I32, 1, s_j, m->parents);
    }
    if (m->variant != DF_RA_LBS) {
        snprintf(buf, sizeof buf, "%d", m->net->n_layers);
        rc |= df_st_writer_meta(w, "net_layers", buf);
        rc |= add_mlp(w, "net", m->net);
        if (m->lin) {
            int64_t sl[2] = {m->P, m->nf}, sp[1] = {m->P};
            rc |= df_st_writer_add(w, "net_linear/weight", DF_DT_F32, 2, sl, m->lin);
            rc |= df_st_writer_add(w, "net_linear/bias", DF_DT_F32, 1, sp, m->lin_b);
        }
        int64_t sb[2] = {3 * V, m->P}, sm[1] = {3 * V};
        rc |= df_st_writer_add(w, "pca_basis", DF_DT_F32, 2, sb, m->basis);
        rc |= df_st_writer_add(w, "pca_mean", DF_DT_F32, 1, sm, m->basis_mean);
    }
    if (m->variant == DF_RA_OURS) {
        int64_t sa[1] = {m->na}, so[1] = {m->na + 1}, si[1] = {m->anc_off[m->na]};
        rc |= df_st_writer_add(w, "anchor_vertices", DF_DT_I32, 1, sa, m->anchors);
        rc |= df_st_writer_add(w, "anchor_input_offsets", DF_DT_I32, 1, so, m->anc_off);
        rc |= df_st_writer_add(w, "anchor_input_index", DF_DT_I32, 1, si, m->anc_idx);
        snprintf(buf, sizeof buf, "%d", m->anc_nets[0]->n_layers);
        rc |= df_st_writer_meta(w, "anchor_layers", buf);
        if (m->alin) {
            int64_t sl[2] = {3 * m->na, m->nf}, sp[1] = {3 * m->na};
            rc |= df_st_writer_add(w, "anchor_linear/weight", DF_DT_F32, 2, sl, m->alin);
            rc |= df_st_writer_add(w, "anchor_linear/bias", DF_DT_F32, 1, sp, m->alin_b);
        }
        for (int64_t a = 0; a < m->na; a++) {
            char pre[64];
            snprintf(pre, sizeof pre, "anchor/%lld", (long long)a);
            rc |= add_mlp(w, pre, m->anc_nets[a]);
        }
    }
    if (rc) {
        df_st_writer_free(&w);
        return df_error_set(err, DF_ENOMEM, "rigapprox: cannot build %s", path);
    }
    rc = df_st_writer_save(w, path, err);
    df_st_writer_free(&w);
    return rc;
}

void df_ramodel_release(df_ramodel_t *m)
{
    if (m->control_names)
        for (int64_t i = 0; i < m->nc; i++) free(m->control_names[i]);
    if (m->joint_names)
        for (int64_t i = 0; i < m->nj; i++) free(m->joint_names[i]);
    free(m->control_names), free(m->joint_names);
    df_mlp_free(&m->net);
    if (m->anc_nets)
        for (int64_t a = 0; a < m->na; a++) df_mlp_free(&m->anc_nets[a]);
    free(m->anc_nets);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

/* A network shell over prefix/<l>/weight|bias with n_layers layers; input
 * width in, output width out. */
static int read_mlp(const df_st_t *st, const char *prefix, int n_layers, int64_t in,
                    int64_t out, df_mlp_t **res, df_error_t *err)
{
    if (n_layers < 1 || n_layers > DF_MLP_MAX_LAYERS)
        return df_error_set(err, DF_EFORMAT, "%s: %d layers (1..%d)", prefix, n_layers,
                            DF_MLP_MAX_LAYERS);
    df_mlp_t *n = calloc(1, sizeof *n);
    if (!n) return df_error_set(err, DF_ENOMEM, "out of memory");
    n->n_layers = n_layers;
    n->dims[0] = (int)in;
    char nm[128];
    for (int l = 0; l < n_layers; l++) {
        const df_tensor_t *tw, *tb;
        snprintf(nm, sizeof nm, "%s/%d/weight", prefix, l);
        int64_t sw[2] = {-1, n->dims[l]};
        int rc = df_st_require(st, nm, DF_DT_F32, 2, sw, 0, &tw, err);
        if (rc) { free(n); return rc; }
        n->dims[l + 1] = (int)tw->shape[0];
        int64_t sb[1] = {tw->shape[0]};
        snprintf(nm, sizeof nm, "%s/%d/bias", prefix, l);
        if ((rc = df_st_require(st, nm, DF_DT_F32, 1, sb, 0, &tb, err))) { free(n); return rc; }
        n->w[l] = (float *)tw->data;
        n->b[l] = (float *)tb->data;
    }
    if (n->dims[n_layers] != out) {
        int got = n->dims[n_layers];
        free(n);
        return df_error_set(err, DF_EFORMAT, "%s: output width %d, expected %lld", prefix, got,
                            (long long)out);
    }
    *res = n;
    return DF_OK;
}

static int meta_int(const df_st_t *st, const char *key, int *out, df_error_t *err)
{
    const char *s = df_st_meta(st, key);
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || *end || v < 1 || v > DF_MLP_MAX_LAYERS)
        return df_error_set(err, DF_EFORMAT, "metadata '%s' missing or not 1..%d", key, DF_MLP_MAX_LAYERS);
    *out = (int)v;
    return DF_OK;
}

int df_ramodel_read(const df_st_t *st, df_ramodel_t *m, df_error_t *err)
{
    memset(m, 0, sizeof *m);
    const df_tensor_t *t;
    int rc;
    const char *var = df_st_meta(st, "variant");
    m->variant = -1;
    for (int i = 0; i < 4; i++)
        if (var && !strcmp(var, variant_names[i])) m->variant = i;
    if (m->variant < 0)
        return df_error_set(err, DF_EFORMAT, "rigapprox: metadata 'variant' is '%s' (ours, local, pcalr, lbs)",
                            var ? var : "(missing)");
    int64_t a3[2] = {-1, 3}, a12[2] = {-1, 12};
    const char *sk = df_st_meta(st, "skinning");
    if (sk && strcmp(sk, "lbs") && strcmp(sk, "dqs"))
        return df_error_set(err, DF_EFORMAT, "rigapprox: metadata 'skinning' is '%s' (lbs, dqs)", sk);
    m->dqs = sk && !strcmp(sk, "dqs");
    if ((rc = df_st_require(st, "rest_positions", DF_DT_F32, 2, a3, 0, &t, err))) return rc;
    m->nv = t->shape[0], m->rest = t->data;
    if ((rc = df_st_require(st, "triangles", DF_DT_I32, 2, a3, 0, &t, err))) return rc;
    m->nt = t->shape[0], m->tris = t->data;
    if ((rc = df_st_require(st, "inverse_bind_matrices", DF_DT_F32, 2, a12, 0, &t, err))) return rc;
    m->nj = t->shape[0], m->invbind = t->data;
    int64_t vk[2] = {m->nv, -1};
    if ((rc = df_st_require(st, "skin_joints", DF_DT_I32, 2, vk, 0, &t, err))) return rc;
    m->k = t->shape[1], m->skin_j = t->data;
    vk[1] = m->k;
    if ((rc = df_st_require(st, "skin_weights", DF_DT_F32, 2, vk, 0, &t, err))) return rc;
    m->skin_w = t->data;
    if ((rc = df_st_require(st, "control_ranges", DF_DT_F32, 2, a3, 1, &t, err))) return rc;
    m->nc = t ? t->shape[0] : 0, m->ctrl_range = t ? t->data : NULL;
    if (m->nv < 1 || m->nj < 1 || m->k < 1 || m->k > DF_RIGDATA_MAX_K || m->nj > 4096 || m->nc > 65536)
        return df_error_set(err, DF_EFORMAT, "rigapprox: %lld vertices, %lld joints, %lld influences, %lld controls",
                            (long long)m->nv, (long long)m->nj, (long long)m->k, (long long)m->nc);
    for (int64_t i = 0; i < m->nt * 3; i++)
        if (m->tris[i] >= (uint32_t)m->nv)
            return df_error_set(err, DF_EFORMAT, "rigapprox: triangles[%lld] = %d out of range",
                                (long long)(i / 3), (int32_t)m->tris[i]);
    for (int64_t i = 0; i < m->nv * m->k; i++)
        if (m->skin_j[i] < 0 || m->skin_j[i] >= m->nj)
            return df_error_set(err, DF_EFORMAT, "rigapprox: skin_joints[%lld][%lld] = %d out of range",
                                (long long)(i / m->k), (long long)(i % m->k), m->skin_j[i]);
    m->nf = 12 * m->nj + m->nc;
    int64_t sf[1] = {m->nf};
    if ((rc = df_st_require(st, "feature_mean", DF_DT_F32, 1, sf, 0, &t, err))) return rc;
    m->feat_mean = t->data;
    if ((rc = df_st_require(st, "feature_scale", DF_DT_F32, 1, sf, 0, &t, err))) return rc;
    m->feat_scale = t->data;
    int64_t sj[1] = {m->nj};
    if ((rc = df_st_require(st, "joint_parents", DF_DT_I32, 1, sj, 1, &t, err))) return rc;
    m->parents = t ? t->data : NULL; /* absent: a format_version 1 model, world features */
    if (m->parents && (rc = check_parents(m->nj, m->parents, err))) return rc;
    size_t n1 = 0, n2 = 0; /* df__json_string_array checks the counts */
    const char *cn = df_st_meta(st, "control_names"), *jn = df_st_meta(st, "joint_names");
    if ((rc = df__json_string_array(cn, (size_t)m->nc, &m->control_names, &n1, err))) goto fail;
    if ((rc = df__json_string_array(jn, (size_t)m->nj, &m->joint_names, &n2, err))) goto fail;
    if (m->variant != DF_RA_LBS) {
        int nl;
        if ((rc = meta_int(st, "net_layers", &nl, err))) goto fail;
        int64_t sb[2] = {3 * m->nv, -1};
        if ((rc = df_st_require(st, "pca_basis", DF_DT_F32, 2, sb, 0, &t, err))) goto fail;
        m->P = t->shape[1], m->basis = t->data;
        int64_t sm[1] = {3 * m->nv};
        if ((rc = df_st_require(st, "pca_mean", DF_DT_F32, 1, sm, 0, &t, err))) goto fail;
        m->basis_mean = t->data;
        if ((rc = read_mlp(st, "net", nl, m->nf, m->P, &m->net, err))) goto fail;
        int64_t sl[2] = {m->P, m->nf}, sp[1] = {m->P};
        const df_tensor_t *tb = NULL;
        if ((rc = df_st_require(st, "net_linear/weight", DF_DT_F32, 2, sl, 1, &t, err)) ||
            (t && (rc = df_st_require(st, "net_linear/bias", DF_DT_F32, 1, sp, 0, &tb, err))))
            goto fail;
        m->lin = t ? t->data : NULL, m->lin_b = tb ? tb->data : NULL;
    }
    if (m->variant == DF_RA_OURS) {
        int64_t any[1] = {-1};
        const char *om = df_st_meta(st, "omega");
        m->omega = om ? strtod(om, NULL) : 0;
        if (!(m->omega > 0 && m->omega < 1e6)) {
            rc = df_error_set(err, DF_EFORMAT, "rigapprox: metadata 'omega' missing or not > 0");
            goto fail;
        }
        if ((rc = df_st_require(st, "anchor_vertices", DF_DT_I32, 1, any, 0, &t, err))) goto fail;
        m->na = t->shape[0], m->anchors = t->data;
        int64_t so[1] = {m->na + 1};
        if ((rc = df_st_require(st, "anchor_input_offsets", DF_DT_I32, 1, so, 0, &t, err))) goto fail;
        m->anc_off = t->data;
        if ((rc = df_st_require(st, "anchor_input_index", DF_DT_I32, 1, any, 0, &t, err))) goto fail;
        m->anc_idx = t->data;
        if (m->na < 1 || m->anc_off[0] != 0 || m->anc_off[m->na] != t->shape[0]) {
            rc = df_error_set(err, DF_EFORMAT, "rigapprox: anchor_input_offsets do not span anchor_input_index");
            goto fail;
        }
        for (int64_t a = 0; a < m->na; a++) {
            if (m->anchors[a] < 0 || m->anchors[a] >= m->nv || m->anc_off[a + 1] <= m->anc_off[a]) {
                rc = df_error_set(err, DF_EFORMAT, "rigapprox: anchor %lld (vertex %d) invalid or without inputs",
                                  (long long)a, m->anchors[a]);
                goto fail;
            }
        }
        for (int64_t i = 0; i < t->shape[0]; i++)
            if (m->anc_idx[i] < 0 || m->anc_idx[i] >= m->nf) {
                rc = df_error_set(err, DF_EFORMAT, "rigapprox: anchor_input_index[%lld] = %d not a feature",
                                  (long long)i, m->anc_idx[i]);
                goto fail;
            }
        int64_t sl[2] = {3 * m->na, m->nf}, sp[1] = {3 * m->na};
        const df_tensor_t *tb = NULL;
        if ((rc = df_st_require(st, "anchor_linear/weight", DF_DT_F32, 2, sl, 1, &t, err)) ||
            (t && (rc = df_st_require(st, "anchor_linear/bias", DF_DT_F32, 1, sp, 0, &tb, err))))
            goto fail;
        m->alin = t ? t->data : NULL, m->alin_b = tb ? tb->data : NULL;
        int al;
        if ((rc = meta_int(st, "anchor_layers", &al, err))) goto fail;
        m->anc_nets = calloc(m->na, sizeof(df_mlp_t *));
        if (!m->anc_nets) { rc = df_error_set(err, DF_ENOMEM, "out of memory"); goto fail; }
        for (int64_t a = 0; a < m->na; a++) {
            char pre[64];
            snprintf(pre, sizeof pre, "anchor/%lld", (long long)a);
            if ((rc = read_mlp(st, pre, al, m->anc_off[a + 1] - m->anc_off[a], 3, &m->anc_nets[a], err)))
                goto fail;
        }
    }
    return DF_OK;
fail:
    df_ramodel_release(m);
    return rc;
}

/* ------------------------------------------------------------------ copy */
typedef struct arena {
    char *base;
    size_t off, cap;
} arena_t;

static void *ar_put(arena_t *a, const void *src, size_t bytes)
{
    size_t o = (a->off + 63) & ~(size_t)63;
    if (a->base) {
        DF_ASSERT(o + bytes <= a->cap);
        if (src && bytes) memcpy(a->base + o, src, bytes);
    }
    a->off = o + bytes;
    return a->base ? a->base + o : NULL;
}

static size_t copy_pass(const df_ramodel_t *s, df_ramodel_t *d, arena_t *a)
{
    d->rest = ar_put(a, s->rest, sizeof(float) * 3 * s->nv);
    d->tris = ar_put(a, s->tris, sizeof(uint32_t) * 3 * s->nt);
    d->invbind = ar_put(a, s->invbind, sizeof(float) * 12 * s->nj);
    d->skin_j = ar_put(a, s->skin_j, sizeof(int32_t) * s->nv * s->k);
    d->skin_w = ar_put(a, s->skin_w, sizeof(float) * s->nv * s->k);
    d->ctrl_range = s->nc ? ar_put(a, s->ctrl_range, sizeof(float) * 3 * s->nc) : NULL;
    d->feat_mean = ar_put(a, s->feat_mean, sizeof(float) * s->nf);
    d->feat_scale = ar_put(a, s->feat_scale, sizeof(float) * s->nf);
    d->parents = s->parents ? ar_put(a, s->parents, sizeof(int32_t) * s->nj) : NULL;
    if (s->net) {
        d->basis = ar_put(a, s->basis, sizeof(float) * 3 * s->nv * s->P);
        d->basis_mean = ar_put(a, s->basis_mean, sizeof(float) * 3 * s->nv);
        d->lin = s->lin ? ar_put(a, s->lin, sizeof(float) * s->P * s->nf) : NULL;
        d->lin_b = s->lin ? ar_put(a, s->lin_b, sizeof(float) * s->P) : NULL;
        for (int l = 0; l < s->net->n_layers; l++) {
            float *w = ar_put(a, s->net->w[l], sizeof(float) * s->net->dims[l + 1] * s->net->dims[l]);
            float *b = ar_put(a, s->net->b[l], sizeof(float) * s->net->dims[l + 1]);
            if (a->base) d->net->w[l] = w, d->net->b[l] = b;
        }
    }
    if (s->na) {
        d->anchors = ar_put(a, s->anchors, sizeof(int32_t) * s->na);
        d->anc_off = ar_put(a, s->anc_off, sizeof(int32_t) * (s->na + 1));
        d->anc_idx = ar_put(a, s->anc_idx, sizeof(int32_t) * s->anc_off[s->na]);
        d->alin = s->alin ? ar_put(a, s->alin, sizeof(float) * 3 * s->na * s->nf) : NULL;
        d->alin_b = s->alin ? ar_put(a, s->alin_b, sizeof(float) * 3 * s->na) : NULL;
        for (int64_t i = 0; i < s->na; i++) {
            const df_mlp_t *n = s->anc_nets[i];
            for (int l = 0; l < n->n_layers; l++) {
                float *w = ar_put(a, n->w[l], sizeof(float) * n->dims[l + 1] * n->dims[l]);
                float *b = ar_put(a, n->b[l], sizeof(float) * n->dims[l + 1]);
                if (a->base) d->anc_nets[i]->w[l] = w, d->anc_nets[i]->b[l] = b;
            }
        }
    }
    return a->off;
}

static char **copy_names(char **src, int64_t n)
{
    char **d = calloc(n ? n : 1, sizeof(char *));
    if (!d) return NULL;
    for (int64_t i = 0; i < n; i++) {
        d[i] = strdup(src && src[i] ? src[i] : "");
        if (!d[i]) { while (i--) free(d[i]); free(d); return NULL; }
    }
    return d;
}

static df_mlp_t *shell_like(const df_mlp_t *s)
{
    df_mlp_t *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->n_layers = s->n_layers;
    memcpy(n->dims, s->dims, sizeof n->dims);
    return n;
}

int df_ramodel_copy(const df_ramodel_t *src, df_ramodel_t *dst, df_error_t *err)
{
    *dst = *src;
    dst->control_names = dst->joint_names = NULL;
    dst->net = NULL;
    dst->anc_nets = NULL;
    dst->arena = NULL;
    arena_t a = {0};
    int ok = 1;
    dst->control_names = copy_names(src->control_names, src->nc);
    dst->joint_names = copy_names(src->joint_names, src->nj);
    ok = dst->control_names && dst->joint_names;
    if (ok && src->net) ok = (dst->net = shell_like(src->net)) != NULL;
    if (ok && src->na) {
        dst->anc_nets = calloc(src->na, sizeof(df_mlp_t *));
        ok = dst->anc_nets != NULL;
        for (int64_t i = 0; ok && i < src->na; i++) ok = (dst->anc_nets[i] = shell_like(src->anc_nets[i])) != NULL;
    }
    if (ok) {
        size_t bytes = copy_pass(src, dst, &a);
        a.base = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        a.cap = bytes;
        a.off = 0;
        ok = a.base != NULL;
        if (ok) copy_pass(src, dst, &a);
        dst->arena = a.base;
    }
    if (!ok) {
        df_ramodel_release(dst);
        return df_error_set(err, DF_ENOMEM, "rigapprox: out of memory copying the model");
    }
    return DF_OK;
}

int df_rigapprox_weld(int64_t nv, const float *rest, int64_t nt, const uint32_t *tris,
                      uint32_t **out, int64_t *out_nt, df_error_t *err)
{
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t v = 0; v < nv; v++)
        for (int d = 0; d < 3; d++) {
            lo[d] = fminf(lo[d], rest[v * 3 + d]);
            hi[d] = fmaxf(hi[d], rest[v * 3 + d]);
        }
    float h = fmaxf(hi[0] - lo[0], fmaxf(hi[1] - lo[1], hi[2] - lo[2]));
    return df_lap_weld(nv, rest, nt, tris, 1e-6f * h, out, out_nt, err);
}

int df_rigapprox_lap(int64_t nv, const float *rest, int64_t nt, const uint32_t *tris,
                     int64_t na, const int32_t *anchors, double omega,
                     df_lap_t **out, df_error_t *err)
{
    uint32_t *tw = NULL;
    int64_t ntw = 0;
    int rc = df_rigapprox_weld(nv, rest, nt, tris, &tw, &ntw, err);
    if (rc) return rc;
    rc = df_lap_new(nv, ntw, tw, na, anchors, omega, out, err);
    free(tw);
    return rc;
}

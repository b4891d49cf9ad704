/* rigapprox_data.c — the rigapprox dataset file (write, open + validate) and
 * the linear part / nonlinear displacement of Eq. 10-14. See rigapprox.h.
 */
#include "rigapprox/rigapprox.h"
#include "base/model_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *names_json(char **names, int64_t n)
{
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(a, json_string(names[i] ? names[i] : ""));
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

int df_rigdata_write(const df_rigdata_t *d, const char *path, df_error_t *err)
{
    df_st_writer_t *w = df_st_writer_new();
    if (!w) return df_error_set(err, DF_ENOMEM, "rigdata: out of memory");
    int64_t s_v3[2] = {d->nv, 3}, s_t3[2] = {d->nt, 3}, s_c3[2] = {d->nc, 3},
            s_j12[2] = {d->nj, 12}, s_vk[2] = {d->nv, d->k}, s_nc[2] = {d->n, d->nc},
            s_nj[3] = {d->n, d->nj, 12}, s_nv[3] = {d->n, d->nv, 3},
            s_in[2] = {d->nc + d->nj, d->nv};
    char hb[32];
    snprintf(hb, sizeof hb, "%.9g", d->height);
    char *cn = names_json(d->control_names, d->nc), *jn = names_json(d->joint_names, d->nj);
    int rc = 0;
    rc |= df_st_writer_meta(w, "kind", "rigdata");
    rc |= df_st_writer_meta(w, "format_version", "1");
    rc |= df_st_writer_meta(w, "control_names", cn ? cn : "[]");
    rc |= df_st_writer_meta(w, "joint_names", jn ? jn : "[]");
    rc |= df_st_writer_meta(w, "height", hb);
    rc |= df_st_writer_add(w, "rest_positions", DF_DT_F32, 2, s_v3, d->rest);
    rc |= df_st_writer_add(w, "triangles", DF_DT_I32, 2, s_t3, d->tris);
    if (d->nc) rc |= df_st_writer_add(w, "control_ranges", DF_DT_F32, 2, s_c3, d->ctrl_range);
    rc |= df_st_writer_add(w, "inverse_bind_matrices", DF_DT_F32, 2, s_j12, d->invbind);
    rc |= df_st_writer_add(w, "skin_joints", DF_DT_I32, 2, s_vk, d->skin_j);
    rc |= df_st_writer_add(w, "skin_weights", DF_DT_F32, 2, s_vk, d->skin_w);
    if (d->nc) rc |= df_st_writer_add(w, "controls", DF_DT_F32, 2, s_nc, d->controls);
    rc |= df_st_writer_add(w, "joint_matrices", DF_DT_F32, 3, s_nj, d->joints);
    rc |= df_st_writer_add(w, "positions", DF_DT_F32, 3, s_nv, d->positions);
    if (d->influence) rc |= df_st_writer_add(w, "influence", DF_DT_F32, 2, s_in, d->influence);
    free(cn), free(jn);
    if (rc) {
        df_st_writer_free(&w);
        return df_error_set(err, DF_ENOMEM, "rigdata: cannot build %s", path);
    }
    rc = df_st_writer_save(w, path, err);
    df_st_writer_free(&w);
    return rc;
}

void df_rigdata_close(df_rigdata_t *d)
{
    if (d->control_names)
        for (int64_t i = 0; i < d->nc; i++) free(d->control_names[i]);
    if (d->joint_names)
        for (int64_t i = 0; i < d->nj; i++) free(d->joint_names[i]);
    free(d->control_names);
    free(d->joint_names);
    df_st_close(&d->st);
    memset(d, 0, sizeof *d);
}

int df_rigdata_open(const char *path, df_rigdata_t *d, df_error_t *err)
{
    memset(d, 0, sizeof *d);
    int rc = df_st_open(path, NULL, &d->st, err);
    if (rc) return rc;
    const df_st_t *st = d->st;
    const char *kind = df_st_meta(st, "kind");
    const df_tensor_t *t;
    if (!kind || strcmp(kind, "rigdata")) {
        rc = df_error_set(err, DF_EFORMAT, "%s: metadata kind is '%s', expected 'rigdata'", path,
                          kind ? kind : "(none)");
        goto fail;
    }
    int64_t any2[2] = {-1, 3};
    if ((rc = df_st_require(st, "rest_positions", DF_DT_F32, 2, any2, 0, &t, err))) goto fail;
    d->nv = t->shape[0], d->rest = t->data;
    if ((rc = df_st_require(st, "triangles", DF_DT_I32, 2, any2, 0, &t, err))) goto fail;
    d->nt = t->shape[0], d->tris = t->data;
    int64_t a12[2] = {-1, 12};
    if ((rc = df_st_require(st, "inverse_bind_matrices", DF_DT_F32, 2, a12, 0, &t, err))) goto fail;
    d->nj = t->shape[0], d->invbind = t->data;
    int64_t ak[2] = {d->nv, -1};
    if ((rc = df_st_require(st, "skin_joints", DF_DT_I32, 2, ak, 0, &t, err))) goto fail;
    d->k = t->shape[1], d->skin_j = t->data;
    int64_t vk[2] = {d->nv, d->k};
    if ((rc = df_st_require(st, "skin_weights", DF_DT_F32, 2, vk, 0, &t, err))) goto fail;
    d->skin_w = t->data;
    const df_tensor_t *pt;
    int64_t a3[3] = {-1, d->nv, 3};
    if ((rc = df_st_require(st, "positions", DF_DT_F32, 3, a3, 0, &pt, err))) goto fail;
    d->n = pt->shape[0], d->positions = pt->data;
    int64_t nj12[3] = {d->n, d->nj, 12};
    if ((rc = df_st_require(st, "joint_matrices", DF_DT_F32, 3, nj12, 0, &t, err))) goto fail;
    d->joints = t->data;
    const df_tensor_t *cr;
    if ((rc = df_st_require(st, "control_ranges", DF_DT_F32, 2, any2, 1, &cr, err))) goto fail;
    d->nc = cr ? cr->shape[0] : 0;
    d->ctrl_range = cr ? cr->data : NULL;
    int64_t nc2[2] = {d->n, d->nc};
    if ((rc = df_st_require(st, "controls", DF_DT_F32, 2, nc2, d->nc == 0, &t, err))) goto fail;
    d->controls = t ? t->data : NULL;
    int64_t in2[2] = {d->nc + d->nj, d->nv};
    if ((rc = df_st_require(st, "influence", DF_DT_F32, 2, in2, 1, &t, err))) goto fail;
    d->influence = t ? t->data : NULL;
    if (d->nv < 4 || d->nt < 1 || d->nj < 1 || d->n < 2 || d->k < 1 || d->k > DF_RIGDATA_MAX_K) {
        rc = df_error_set(err, DF_EFORMAT,
                          "%s: needs >= 4 vertices, >= 1 triangle, >= 1 joint, >= 2 samples and "
                          "1..%d influences (has %lld, %lld, %lld, %lld, %lld)",
                          path, DF_RIGDATA_MAX_K, (long long)d->nv, (long long)d->nt,
                          (long long)d->nj, (long long)d->n, (long long)d->k);
        goto fail;
    }
    for (int64_t i = 0; i < d->nt * 3; i++)
        if (d->tris[i] >= (uint32_t)d->nv) {
            rc = df_error_set(err, DF_EFORMAT, "%s: triangles[%lld][%lld] = %d is not a vertex (< %lld)",
                              path, (long long)(i / 3), (long long)(i % 3), (int32_t)d->tris[i],
                              (long long)d->nv);
            goto fail;
        }
    for (int64_t v = 0; v < d->nv; v++) {
        double s = 0;
        for (int64_t k = 0; k < d->k; k++) {
            int32_t j = d->skin_j[v * d->k + k];
            float w = d->skin_w[v * d->k + k];
            if (j < 0 || j >= d->nj || w < 0) {
                rc = df_error_set(err, DF_EFORMAT,
                                  "%s: skin of vertex %lld: joint %d (of %lld), weight %g", path,
                                  (long long)v, j, (long long)d->nj, w);
                goto fail;
            }
            s += w;
        }
        if (fabs(s - 1) > 1e-3) {
            rc = df_error_set(err, DF_EFORMAT, "%s: skin_weights of vertex %lld sum to %g, not 1",
                              path, (long long)v, s);
            goto fail;
        }
    }
    for (int64_t c = 0; c < d->nc; c++)
        if (!(d->ctrl_range[c * 3] < d->ctrl_range[c * 3 + 1])) {
            rc = df_error_set(err, DF_EFORMAT, "%s: control_ranges[%lld]: lo %g >= hi %g", path,
                              (long long)c, d->ctrl_range[c * 3], d->ctrl_range[c * 3 + 1]);
            goto fail;
        }
    const char *cn = df_st_meta(st, "control_names"), *jn = df_st_meta(st, "joint_names");
    size_t n1 = 0, n2 = 0;
    if (d->nc) {
        if (!cn || (rc = df__json_string_array(cn, (size_t)d->nc, &d->control_names, &n1, err))) {
            if (!rc) rc = df_error_set(err, DF_EFORMAT, "%s: control_names metadata missing", path);
            goto fail;
        }
    }
    if (!jn || (rc = df__json_string_array(jn, (size_t)d->nj, &d->joint_names, &n2, err))) {
        if (!rc) rc = df_error_set(err, DF_EFORMAT, "%s: joint_names metadata missing", path);
        goto fail;
    }
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t v = 0; v < d->nv; v++)
        for (int k = 0; k < 3; k++) {
            lo[k] = fminf(lo[k], d->rest[v * 3 + k]);
            hi[k] = fmaxf(hi[k], d->rest[v * 3 + k]);
        }
    d->height = fmaxf(hi[0] - lo[0], fmaxf(hi[1] - lo[1], hi[2] - lo[2]));
    if (!(d->height > 0)) {
        rc = df_error_set(err, DF_EFORMAT, "%s: rest_positions are all equal", path);
        goto fail;
    }
    return DF_OK;
fail:
    if (d->control_names) { for (size_t i = 0; i < n1; i++) free(d->control_names[i]); free(d->control_names); }
    d->control_names = NULL;
    if (d->joint_names) { for (size_t i = 0; i < n2; i++) free(d->joint_names[i]); free(d->joint_names); }
    d->joint_names = NULL;
    df_st_close(&d->st);
    return rc;
}

void df_rigapprox_linear(int64_t nv, int64_t nj, int k, const float *invbind,
                         const int32_t *skin_j, const float *skin_w, int B,
                         const float *world, float *T)
{
    /* skinning matrices once per pose, then a weighted sum per vertex */
    for (int b = 0; b < B; b++) {
        const float *W = world + (size_t)b * nj * 12;
        float *Tb = T + (size_t)b * nv * 12;
        for (int64_t v = 0; v < nv; v++) {
            float acc[12] = {0};
            for (int q = 0; q < k; q++) {
                float w = skin_w[v * k + q];
                if (w == 0) continue;
                int32_t j = skin_j[v * k + q];
                const float *a = W + j * 12, *ib = invbind + j * 12;
                for (int r = 0; r < 3; r++)
                    for (int c = 0; c < 4; c++) {
                        float s = c == 3 ? a[r * 4 + 3] : 0.0f;
                        s += a[r * 4] * ib[c] + a[r * 4 + 1] * ib[4 + c] + a[r * 4 + 2] * ib[8 + c];
                        acc[r * 4 + c] += w * s;
                    }
            }
            memcpy(Tb + v * 12, acc, sizeof acc);
        }
    }
}

void df_rigapprox_apply(int64_t nv, const float *T, const float *rest,
                        const float *d, float *out)
{
    for (int64_t v = 0; v < nv; v++) {
        const float *M = T + v * 12;
        float p[3] = {rest[v * 3], rest[v * 3 + 1], rest[v * 3 + 2]};
        if (d) p[0] += d[v * 3], p[1] += d[v * 3 + 1], p[2] += d[v * 3 + 2];
        for (int r = 0; r < 3; r++)
            out[v * 3 + r] = M[r * 4] * p[0] + M[r * 4 + 1] * p[1] + M[r * 4 + 2] * p[2] + M[r * 4 + 3];
    }
}

int df_rigapprox_nonlinear(int64_t nv, const float *T, const float *rest,
                           const float *p, float *vnl)
{
    int bad = 0;
    for (int64_t v = 0; v < nv; v++) {
        const float *a = T + v * 12;
        double m[9] = {a[0], a[1], a[2], a[4], a[5], a[6], a[8], a[9], a[10]};
        double c0 = m[4] * m[8] - m[5] * m[7], c1 = m[5] * m[6] - m[3] * m[8],
               c2 = m[3] * m[7] - m[4] * m[6];
        double det = m[0] * c0 + m[1] * c1 + m[2] * c2;
        if (!(fabs(det) > 1e-12)) {
            vnl[v * 3] = vnl[v * 3 + 1] = vnl[v * 3 + 2] = 0;
            bad = 1;
            continue;
        }
        double id = 1.0 / det;
        double r[9] = {c0 * id, (m[2] * m[7] - m[1] * m[8]) * id, (m[1] * m[5] - m[2] * m[4]) * id,
                       c1 * id, (m[0] * m[8] - m[2] * m[6]) * id, (m[2] * m[3] - m[0] * m[5]) * id,
                       c2 * id, (m[1] * m[6] - m[0] * m[7]) * id, (m[0] * m[4] - m[1] * m[3]) * id};
        double q[3] = {p[v * 3] - a[3], p[v * 3 + 1] - a[7], p[v * 3 + 2] - a[11]};
        for (int i = 0; i < 3; i++)
            vnl[v * 3 + i] = (float)(r[i * 3] * q[0] + r[i * 3 + 1] * q[1] + r[i * 3 + 2] * q[2] -
                                     rest[v * 3 + i]);
    }
    return bad ? -1 : 0;
}

int df_rigdata_evaluate(const df_model_t *m, const df_rigdata_t *d, int64_t s, int n, float *const *out,
                        df_scratch_t *sc, df_error_t *err)
{
    int ij = df_model_find_input(m, "joint_matrices"), ic = df_model_find_input(m, "controls");
    int op = df_model_find_output(m, "positions");
    if (ij < 0 || op < 0 || df_model_n_vertices(m) != d->nv)
        return df_error_set(err, DF_EINVAL, "the model (%lld vertices) does not take this dataset's poses (%lld vertices)",
                            (long long)df_model_n_vertices(m), (long long)d->nv);
    if (n < 1 || n > DF_RIGDATA_EVAL_MAX || s < 0 || s + n > d->n)
        return df_error_set(err, DF_EINVAL, "samples %lld..%lld are not in the dataset (%lld)", (long long)s,
                            (long long)(s + n), (long long)d->n);
    const float *pj[DF_RIGDATA_EVAL_MAX], *pc[DF_RIGDATA_EVAL_MAX];
    for (int b = 0; b < n; b++) {
        pj[b] = d->joints + (s + b) * d->nj * 12;
        pc[b] = d->nc ? d->controls + (s + b) * d->nc : NULL;
    }
    df_batch_t bt;
    memset(&bt, 0, sizeof bt);
    bt.n = n;
    bt.in[ij] = pj;
    if (ic >= 0) bt.in[ic] = pc;
    bt.out[op] = (float **)out;
    return df_model_evaluate(m, &bt, sc, err);
}

/* rigapprox_data.c — the rigapprox dataset file (write, open + validate) and
 * the linear part / nonlinear displacement of Eq. 10-14. See rigapprox.h.
 */
#include "rigapprox/rigapprox.h"
#include "base/model_internal.h"
#include "math/mathx.h"

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
            s_in[2] = {d->nc + d->nj, d->nv}, s_j[1] = {d->nj}, s_ns[2] = {d->n, d->ns};
    char hb[32], fb[32], tb[32];
    snprintf(hb, sizeof hb, "%.9g", d->height);
    snprintf(fb, sizeof fb, "%lld", (long long)d->first);
    snprintf(tb, sizeof tb, "%lld", (long long)(d->total > 0 ? d->total : d->n));
    int v2 = d->parents || d->rest_frames || d->sample_values || d->total > 0;
    char *cn = names_json(d->control_names, d->nc), *jn = names_json(d->joint_names, d->nj);
    int rc = 0;
    rc |= df_st_writer_meta(w, "kind", "rigdata");
    rc |= df_st_writer_meta(w, "format_version", v2 ? "2" : "1");
    rc |= df_st_writer_meta(w, "control_names", cn ? cn : "[]");
    rc |= df_st_writer_meta(w, "joint_names", jn ? jn : "[]");
    rc |= df_st_writer_meta(w, "height", hb);
    if (d->dqs) rc |= df_st_writer_meta(w, "skinning", "dqs");
    if (d->total > 0) {
        rc |= df_st_writer_meta(w, "first_sample", fb);
        rc |= df_st_writer_meta(w, "total_samples", tb);
    }
    if (d->sample_values && d->sample_controls) rc |= df_st_writer_meta(w, "sample_controls", d->sample_controls);
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
    if (d->parents) rc |= df_st_writer_add(w, "joint_parents", DF_DT_I32, 1, s_j, d->parents);
    if (d->rest_frames) rc |= df_st_writer_add(w, "rest_joint_matrices", DF_DT_F32, 2, s_j12, d->rest_frames);
    if (d->sample_values && d->ns > 0) rc |= df_st_writer_add(w, "sample_values", DF_DT_F32, 2, s_ns, d->sample_values);
    free(cn), free(jn);
    if (rc) {
        df_st_writer_free(&w);
        return df_error_set(err, DF_ENOMEM, "rigdata: cannot build %s", path);
    }
    rc = df_st_writer_save(w, path, err);
    df_st_writer_free(&w);
    return rc;
}

int df_rigdata_check_parents(int64_t J, const int32_t *par, char *const *names, df_error_t *err)
{
#define JN(j) (names && names[j] ? names[j] : "?")
    for (int64_t j = 0; j < J; j++)
        if (par[j] < -1 || par[j] >= J || par[j] == j)
            return df_error_set(err, DF_EFORMAT, "joint_parents: joint %lld ('%s') has parent %d (want -1 or another joint < %lld)",
                                (long long)j, JN(j), par[j], (long long)J);
    for (int64_t j = 0; j < J; j++) {
        int64_t p = j, steps = 0;
        while (p >= 0 && steps <= J) p = par[p], steps++;
        if (p < 0) continue;
        /* j reaches a cycle: name its joints */
        char b[400];
        size_t o = 0;
        int64_t q = j;
        for (int64_t k = 0; k < J; k++) q = par[q]; /* now on the cycle */
        int64_t c0 = q;
        do {
            o += (size_t)snprintf(b + o, o < sizeof b ? sizeof b - o : 0, "'%s' -> ", JN(q));
            q = par[q];
        } while (q != c0 && o < sizeof b);
        if (o < sizeof b) snprintf(b + o, sizeof b - o, "'%s'", JN(c0));
        b[sizeof b - 1] = 0;
        return df_error_set(err, DF_EFORMAT, "joint_parents: the hierarchy has a cycle (%s): each joint's parent "
                                             "must lead to a root", b);
    }
    return DF_OK;
#undef JN
}

void df_rigdata_close(df_rigdata_t *d)
{
    if (d->control_names)
        for (int64_t i = 0; i < d->nc; i++) free(d->control_names[i]);
    if (d->joint_names)
        for (int64_t i = 0; i < d->nj; i++) free(d->joint_names[i]);
    free(d->control_names);
    free(d->joint_names);
    free(d->sample_controls);
    free(d->owned);
    df_st_close(&d->st);
    memset(d, 0, sizeof *d);
}

static int open_one(const char *path, df_rigdata_t *d, df_error_t *err)
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
    int64_t j1[1] = {d->nj};
    if ((rc = df_st_require(st, "joint_parents", DF_DT_I32, 1, j1, 1, &t, err))) goto fail;
    d->parents = t ? t->data : NULL;
    if ((rc = df_st_require(st, "rest_joint_matrices", DF_DT_F32, 2, a12, 1, &t, err))) goto fail;
    if (t && t->shape[0] != d->nj) {
        rc = df_error_set(err, DF_EFORMAT, "%s: rest_joint_matrices has %lld rows for %lld joints", path,
                          (long long)t->shape[0], (long long)d->nj);
        goto fail;
    }
    d->rest_frames = t ? t->data : NULL;
    int64_t ns2[2] = {d->n, -1};
    if ((rc = df_st_require(st, "sample_values", DF_DT_F32, 2, ns2, 1, &t, err))) goto fail;
    d->ns = t ? t->shape[1] : 0;
    d->sample_values = t ? t->data : NULL;
    if (d->nv < 4 || d->nt < 1 || d->nj < 1 || d->n < 1 || d->k < 1 || d->k > DF_RIGDATA_MAX_K) {
        rc = df_error_set(err, DF_EFORMAT,
                          "%s: needs >= 4 vertices, >= 1 triangle, >= 1 joint, >= 1 sample and "
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
    if (d->parents && (rc = df_rigdata_check_parents(d->nj, d->parents, d->joint_names, err))) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        rc = df_error_set(err, DF_EFORMAT, "%s: %s", path, m);
        goto fail;
    }
    const char *sc = df_st_meta(st, "sample_controls");
    if (d->sample_values) {
        json_error_t je;
        json_t *a = sc ? json_loads(sc, 0, &je) : NULL;
        int okj = a && json_is_array(a) && (int64_t)json_array_size(a) == d->ns;
        json_decref(a);
        if (!okj) {
            rc = df_error_set(err, DF_EFORMAT, "%s: metadata sample_controls must be a JSON array of %lld entries "
                              "(one per column of sample_values)", path, (long long)d->ns);
            goto fail;
        }
        if (!(d->sample_controls = strdup(sc))) {
            rc = df_error_set(err, DF_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
    }
    const char *sk = df_st_meta(st, "skinning");
    if (sk && strcmp(sk, "lbs") && strcmp(sk, "dqs")) {
        rc = df_error_set(err, DF_EFORMAT, "%s: metadata skinning '%s' (lbs or dqs)", path, sk);
        goto fail;
    }
    d->dqs = sk && !strcmp(sk, "dqs");
    const char *fs = df_st_meta(st, "first_sample"), *ts = df_st_meta(st, "total_samples");
    d->first = 0, d->total = d->n;
    if (fs || ts) {
        char *e1 = NULL, *e2 = NULL;
        long long f = fs ? strtoll(fs, &e1, 10) : -1, tt = ts ? strtoll(ts, &e2, 10) : -1;
        if (!fs || !ts || *e1 || *e2 || f < 0 || tt < 1 || f + d->n > tt) {
            rc = df_error_set(err, DF_EFORMAT, "%s: metadata first_sample '%s' / total_samples '%s' do not describe "
                              "this file's %lld samples", path, fs ? fs : "(none)", ts ? ts : "(none)", (long long)d->n);
            goto fail;
        }
        d->first = f, d->total = tt;
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
    free(d->sample_controls);
    d->sample_controls = NULL;
    if (d->control_names) { for (size_t i = 0; i < n1; i++) free(d->control_names[i]); free(d->control_names); }
    d->control_names = NULL;
    if (d->joint_names) { for (size_t i = 0; i < n2; i++) free(d->joint_names[i]); free(d->joint_names); }
    d->joint_names = NULL;
    df_st_close(&d->st);
    return rc;
}


int df_rigdata_open(const char *path, df_rigdata_t *d, df_error_t *err)
{
    int rc = open_one(path, d, err);
    if (rc) return rc;
    if (d->first != 0 || d->total != d->n) {
        rc = df_error_set(err, DF_EFORMAT, "%s holds samples %lld..%lld of an export of %lld written in shards: "
                          "give every shard (deform train SHARD...)", path, (long long)d->first,
                          (long long)(d->first + d->n - 1), (long long)d->total);
        df_rigdata_close(d);
        return rc;
    }
    if (d->n < 2) {
        rc = df_error_set(err, DF_EFORMAT, "%s: needs >= 2 samples (has %lld)", path, (long long)d->n);
        df_rigdata_close(d);
    }
    return rc;
}

static int same_bytes(const df_st_t *a, const df_st_t *b, const char *name)
{
    const df_tensor_t *x = df_st_find(a, name), *y = df_st_find(b, name);
    if (!x || !y) return !x && !y;
    return x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
}

static int same_meta(const df_st_t *a, const df_st_t *b, const char *key)
{
    const char *x = df_st_meta(a, key), *y = df_st_meta(b, key);
    return (!x && !y) || (x && y && !strcmp(x, y));
}

int df_rigdata_open_shards(const char *const *paths, int n, df_rigdata_t *d, df_error_t *err)
{
    memset(d, 0, sizeof *d);
    if (n == 1) return df_rigdata_open(paths[0], d, err);
    if (n < 1 || n > DF_RIGDATA_MAX_SHARDS)
        return df_error_set(err, DF_EINVAL, "rigdata: %d files (1..%d shards)", n, DF_RIGDATA_MAX_SHARDS);
    df_rigdata_t *s = calloc((size_t)n, sizeof *s);
    int *ord = malloc(sizeof(int) * (size_t)n);
    if (!s || !ord) {
        free(s), free(ord);
        return df_error_set(err, DF_ENOMEM, "rigdata: out of memory");
    }
    int rc = DF_OK, opened = 0;
    for (; opened < n && !rc; opened++) rc = open_one(paths[opened], &s[opened], err);
    if (rc) opened--;
    static const char *const same_t[] = {"rest_positions", "triangles", "control_ranges", "inverse_bind_matrices",
                                         "skin_joints", "skin_weights", "joint_parents", "rest_joint_matrices"};
    static const char *const same_m[] = {"control_names", "joint_names", "sample_controls", "skinning"};
    for (int i = 1; i < n && !rc; i++) {
        const char *what = NULL;
        for (size_t k = 0; k < sizeof same_t / sizeof *same_t && !what; k++)
            if (!same_bytes(s[0].st, s[i].st, same_t[k])) what = same_t[k];
        for (size_t k = 0; k < sizeof same_m / sizeof *same_m && !what; k++)
            if (!same_meta(s[0].st, s[i].st, same_m[k])) what = same_m[k];
        if (!what && s[i].total != s[0].total) what = "total_samples";
        if (!what && !s[i].influence != !s[0].influence) what = "influence";
        if (!what && s[i].ns != s[0].ns) what = "sample_values";
        if (what)
            rc = df_error_set(err, DF_EFORMAT, "%s and %s are not shards of one export: their %s differ", paths[0],
                              paths[i], what);
    }
    /* order by first sample; they must tile 0..total-1 */
    for (int i = 0; i < n; i++) ord[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[ord[j]].first < s[ord[j - 1]].first; j--) {
            int x = ord[j];
            ord[j] = ord[j - 1], ord[j - 1] = x;
        }
    int64_t at = 0;
    for (int i = 0; i < n && !rc; i++) {
        const df_rigdata_t *q = &s[ord[i]];
        if (q->first != at)
            rc = df_error_set(err, DF_EFORMAT, "%s: samples %lld..%lld %s (shards of an export of %lld samples)",
                              paths[ord[i]], (long long)(q->first < at ? q->first : at),
                              (long long)((q->first < at ? at : q->first) - 1),
                              q->first < at ? "are in two files" : "are in no file given", (long long)q->total);
        at = q->first + q->n;
    }
    if (!rc && at != s[0].total)
        rc = df_error_set(err, DF_EFORMAT, "samples %lld..%lld of %lld are in no file given (a shard is missing)",
                          (long long)at, (long long)(s[0].total - 1), (long long)s[0].total);
    int64_t N = s[0].total, V = s[0].nv, J = s[0].nj, C = s[0].nc, S = s[0].ns;
    size_t fl = 0;
    if (!rc) {
        fl = (size_t)N * (C + J * 12 + V * 3 + S) + (s[0].influence ? (size_t)(C + J) * V : 0);
        if ((double)fl * 4 > 64e9) rc = df_error_set(err, DF_ELIMIT, "rigdata: %lld samples x %lld vertices do not fit", (long long)N, (long long)V);
    }
    float *buf = !rc ? malloc(sizeof(float) * (fl ? fl : 1)) : NULL;
    if (!rc && !buf) rc = df_error_set(err, DF_ENOMEM, "rigdata: %lld samples x %lld vertices do not fit in memory",
                                       (long long)N, (long long)V);
    if (rc) {
        for (int i = 0; i < opened; i++) df_rigdata_close(&s[i]);
        free(s), free(ord), free(buf);
        return rc;
    }
    float *ctl = buf, *jm = ctl + N * C, *pos = jm + N * J * 12, *sv = pos + N * V * 3, *inf = sv + N * S;
    for (int i = 0; i < n; i++) {
        const df_rigdata_t *q = &s[ord[i]];
        int64_t f = q->first, m = q->n;
        if (C) memcpy(ctl + f * C, q->controls, sizeof(float) * m * C);
        memcpy(jm + f * J * 12, q->joints, sizeof(float) * m * J * 12);
        memcpy(pos + f * V * 3, q->positions, sizeof(float) * m * V * 3);
        if (S) memcpy(sv + f * S, q->sample_values, sizeof(float) * m * S);
        if (q->influence)
            for (int64_t k = 0; k < (C + J) * V; k++)
                inf[k] = i == 0 || q->influence[k] > inf[k] ? q->influence[k] : inf[k];
    }
    /* the first shard keeps the rig (borrowed from its file); the others'
     * samples are copied, so their files are closed */
    *d = s[0];
    d->n = N, d->first = 0, d->total = N;
    d->controls = C ? ctl : NULL, d->joints = jm, d->positions = pos;
    d->sample_values = S ? sv : NULL;
    d->influence = s[0].influence ? inf : NULL;
    d->owned = buf;
    for (int i = 1; i < n; i++) df_rigdata_close(&s[i]);
    free(s), free(ord);
    return DF_OK;
}

/* Per-joint skinning of one pose: skm_j = world_j invbind_j; for DQS also
 * the rigid part as a unit dual quaternion dq_j and the scale/shear part as
 * an affine map plin_j applied first, about the joint's bind position c
 * (Blender's Preserve Volume, as the rigged kind: S x = R (P (x - c) + c) +
 * t', a rigid S giving P = I). */
void df__ra_skin_prepare(int64_t nj, const float *invbind, const float *world, int dqs, float *skm, float *dq,
                         float *plin)
{
    for (int64_t j = 0; j < nj; j++) {
        float *s = skm + j * 12;
        df_m34_mul(world + j * 12, invbind + j * 12, s);
        if (!dqs) continue;
        float L[9], R[9], P[9], q[4], t[3] = {s[3], s[7], s[11]}, dev = 0;
        df_m34_linear(s, L);
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++)
                dev = fmaxf(dev, fabsf(L[a] * L[c] + L[3 + a] * L[3 + c] + L[6 + a] * L[6 + c] - (a == c ? 1.0f : 0.0f)));
        float *pl = plin + j * 12;
        if (dev < 1e-5f && df_m33_det(L) > 0) {
            df_quat_from_m33(L, q);
            static const float id[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
            memcpy(pl, id, sizeof id);
        } else {
            df_m33_polar(L, R, P);
            df_quat_from_m33(R, q);
            float bind[12], c[3] = {0, 0, 0}, e[3];
            if (df_m34_inverse(invbind + j * 12, bind) == 0) c[0] = bind[3], c[1] = bind[7], c[2] = bind[11];
            for (int a = 0; a < 3; a++) e[a] = c[a] - (P[3 * a] * c[0] + P[3 * a + 1] * c[1] + P[3 * a + 2] * c[2]);
            for (int a = 0; a < 3; a++) t[a] -= R[3 * a] * e[0] + R[3 * a + 1] * e[1] + R[3 * a + 2] * e[2];
            float pm[12] = {P[0], P[1], P[2], e[0], P[3], P[4], P[5], e[1], P[6], P[7], P[8], e[2]};
            memcpy(pl, pm, sizeof pm);
        }
        df_dq_from_qt(q, t, dq + j * 8);
    }
}

/* T of one vertex from the prepared joints: LBS sum_k w_k skm_k, or DQS:
 * the dual quaternions blended with signs relative to the first (heaviest)
 * influence, normalised to [R|t], after the blended scale/shear. */
void df__ra_vertex_T(int dqs, int k, const int32_t *sj, const float *sw, const float *skm, const float *dq,
                     const float *plin, float T[12])
{
    if (!dqs) {
        memset(T, 0, sizeof(float) * 12);
        for (int q = 0; q < k; q++) {
            float w = sw[q];
            if (w == 0) continue;
            const float *M = skm + sj[q] * 12;
            for (int e = 0; e < 12; e++) T[e] += w * M[e];
        }
        return;
    }
    const float *d0 = dq + sj[0] * 8;
    float bl[8] = {0}, Pb[12] = {0}, Rt[12];
    for (int q = 0; q < k; q++) {
        const float *dk = dq + sj[q] * 8, *pk = plin + sj[q] * 12;
        float w = sw[q];
        for (int e = 0; e < 12; e++) Pb[e] += w * pk[e];
        if (d0[0] * dk[0] + d0[1] * dk[1] + d0[2] * dk[2] + d0[3] * dk[3] < 0) w = -w;
        for (int e = 0; e < 8; e++) bl[e] += w * dk[e];
    }
    df_dq_to_m34(bl, Rt);
    df_m34_mul(Rt, Pb, T);
}

void df_rigapprox_linear_skin(int dqs, int64_t nv, int64_t nj, int k, const float *invbind, const int32_t *skin_j,
                              const float *skin_w, int B, const float *world, float *T)
{
    if (!dqs) {
        df_rigapprox_linear(nv, nj, k, invbind, skin_j, skin_w, B, world, T);
        return;
    }
    float *skm = malloc(sizeof(float) * nj * 32);
    DF_ASSERT(skm);
    float *dq = skm + nj * 12, *plin = dq + nj * 8;
    for (int b = 0; b < B; b++) {
        df__ra_skin_prepare(nj, invbind, world + (size_t)b * nj * 12, 1, skm, dq, plin);
        for (int64_t v = 0; v < nv; v++)
            df__ra_vertex_T(1, k, skin_j + v * k, skin_w + v * k, skm, dq, plin, T + ((size_t)b * nv + v) * 12);
    }
    free(skm);
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

/* rigged_write.c — df_rigged_write: a df_rigged_data_t to a `rigged`
 * safetensors file (format in docs/architecture.md, docs/rigged.md).
 *
 * DESIGN
 * The writer checks only what it needs to produce a well-formed file
 * (counts, non-NULL arrays, triangle indices representable as I32); the
 * full semantic validation lives in the loader (kind_rigged.c), which is the
 * only gate that matters since files also come from elsewhere. Name lists go
 * to __metadata__ as JSON arrays of strings encoded with jansson; missing
 * joint/morph names are written as "joint<i>"/"morph<i>".
 */
#include "df.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON array text of n names (NULL names -> prefix<i>); *out new: free(). */
static int names_json(char *const *names, size_t n, const char *prefix,
                      char **out)
{
    json_t *a = json_array();
    if (!a) return DF_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char buf[32];
        const char *s = names && names[i] ? names[i] : NULL;
        if (!s) {
            snprintf(buf, sizeof buf, "%s%zu", prefix, i);
            s = buf;
        }
        if (json_array_append_new(a, json_string(s))) {
            json_decref(a);
            return DF_EINVAL; /* not UTF-8 */
        }
    }
    *out = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return *out ? DF_OK : DF_ENOMEM;
}

static int add(df_st_writer_t *w, const char *name, df_dtype_t dt, int ndim,
               int64_t d0, int64_t d1, int64_t d2, const void *data,
               df_error_t *err)
{
    int64_t shape[3] = {d0, d1, d2};
    int rc = df_st_writer_add(w, name, dt, ndim, shape, data);
    if (rc) return df_error_set(err, rc, "rigged write: tensor '%s': %s", name,
                                df_strerror(rc));
    return DF_OK;
}

static int meta(df_st_writer_t *w, const char *key, const char *val,
                df_error_t *err)
{
    int rc = df_st_writer_meta(w, key, val);
    if (rc) return df_error_set(err, rc, "rigged write: metadata '%s'", key);
    return DF_OK;
}

int df_rigged_write(const df_rigged_data_t *d, const char *path,
                    df_error_t *err)
{
    if (!d || !path)
        return df_error_set(err, DF_EINVAL, "rigged write: NULL argument");
    int64_t N = d->n_vertices, T = d->n_triangles, M = d->n_morphs,
            J = d->n_joints, K = d->n_influences;
    if (N <= 0 || !d->positions)
        return df_error_set(err, DF_EINVAL, "rigged write: no positions");
    if (T < 0 || (T > 0 && !d->triangles))
        return df_error_set(err, DF_EINVAL, "rigged write: bad triangles");
    int64_t S = d->n_shapes;
    if (S < 0 || (S > 0 && !d->shape_deltas) || (d->joint_shape_translations && (S == 0 || J == 0)))
        return df_error_set(err, DF_EINVAL, "rigged write: %lld shapes: shape_deltas needed, "
                            "and joint_shape_translations need shapes and a skeleton",
                            (long long)S);
    if (M < 0 || (M > 0 && !d->morph_deltas))
        return df_error_set(err, DF_EINVAL,
                            "rigged write: %lld morphs but no morph_deltas",
                            (long long)M);
    if (J < 0 || (J > 0 && (!d->parents || !d->rest_translations ||
                            !d->rest_rotations || !d->rest_scales ||
                            !d->inverse_bind || !d->skin_joints ||
                            !d->skin_weights || K <= 0 || K > 8)))
        return df_error_set(err, DF_EINVAL,
                            "rigged write: skeleton of %lld joints needs "
                            "parents, rest TRS, inverse_bind and skin "
                            "joints/weights with 1..8 influences",
                            (long long)J);
    const char *sk = d->skinning ? d->skinning : "lbs";
    if (strcmp(sk, "lbs") && strcmp(sk, "dqs"))
        return df_error_set(err, DF_EINVAL,
                            "rigged write: skinning '%s' (want lbs or dqs)", sk);
    for (int64_t i = 0; i < 3 * T; i++)
        if (d->triangles[i] > INT32_MAX)
            return df_error_set(err, DF_EINVAL,
                                "rigged write: triangle index %u too large",
                                d->triangles[i]);

    df_st_writer_t *w = df_st_writer_new();
    if (!w) return df_error_set(err, DF_ENOMEM, "out of memory");
    char *jn = NULL, *mn = NULL, *cn = NULL, *sn = NULL;
    int rc = DF_OK;
    char name[96];

    if ((rc = meta(w, "kind", "rigged", err)) ||
        (rc = meta(w, "format_version", "1", err)) ||
        (rc = meta(w, "skinning", sk, err)))
        goto done;
    char **cnames = NULL;
    if (d->n_clips) {
        cnames = calloc(d->n_clips, sizeof *cnames);
        if (!cnames) {
            rc = df_error_set(err, DF_ENOMEM, "out of memory");
            goto done;
        }
        for (size_t c = 0; c < d->n_clips; c++)
            cnames[c] = d->clips[c].name[0] ? (char *)d->clips[c].name : NULL;
    }
    rc = names_json(d->joint_names, (size_t)J, "joint", &jn);
    if (!rc) rc = names_json(d->morph_names, (size_t)M, "morph", &mn);
    if (!rc) rc = names_json(cnames, d->n_clips, "clip", &cn);
    if (!rc && S > 0) rc = names_json(d->shape_names, (size_t)S, "shape", &sn);
    free(cnames);
    if (rc) {
        df_error_set(err, rc, "rigged write: a joint/morph/clip name is not "
                              "valid UTF-8");
        goto done;
    }
    if ((rc = meta(w, "joint_names", jn, err)) ||
        (rc = meta(w, "morph_names", mn, err)) ||
        (rc = meta(w, "clips", cn, err)) ||
        (S > 0 && (rc = meta(w, "shape_names", sn, err))))
        goto done;

    if ((rc = add(w, "positions", DF_DT_F32, 2, N, 3, 0, d->positions, err)))
        goto done;
    if ((rc = add(w, "triangles", DF_DT_I32, 2, T, 3, 0, d->triangles, err)))
        goto done;
    if (d->normals &&
        (rc = add(w, "normals", DF_DT_F32, 2, N, 3, 0, d->normals, err)))
        goto done;
    if (M > 0 && (rc = add(w, "morph_deltas", DF_DT_F32, 3, M, N, 3,
                           d->morph_deltas, err)))
        goto done;
    if (M > 0 && d->morph_normal_deltas &&
        (rc = add(w, "morph_normal_deltas", DF_DT_F32, 3, M, N, 3,
                  d->morph_normal_deltas, err)))
        goto done;
    if (S > 0 && (rc = add(w, "shape_deltas", DF_DT_F32, 3, S, N, 3, d->shape_deltas, err)))
        goto done;
    if (S > 0 && d->shape_normal_deltas &&
        (rc = add(w, "shape_normal_deltas", DF_DT_F32, 3, S, N, 3, d->shape_normal_deltas, err)))
        goto done;
    if (d->joint_shape_translations &&
        (rc = add(w, "joint_rest_translation_shapedirs", DF_DT_F32, 3, S, J, 3,
                  d->joint_shape_translations, err)))
        goto done;
    if (J > 0) {
        if ((rc = add(w, "joint_parents", DF_DT_I32, 1, J, 0, 0, d->parents,
                      err)) ||
            (rc = add(w, "joint_rest_translations", DF_DT_F32, 2, J, 3, 0,
                      d->rest_translations, err)) ||
            (rc = add(w, "joint_rest_rotations", DF_DT_F32, 2, J, 4, 0,
                      d->rest_rotations, err)) ||
            (rc = add(w, "joint_rest_scales", DF_DT_F32, 2, J, 3, 0,
                      d->rest_scales, err)) ||
            (rc = add(w, "inverse_bind_matrices", DF_DT_F32, 3, J, 4, 4,
                      d->inverse_bind, err)) ||
            (rc = add(w, "skin_joints", DF_DT_I32, 2, N, K, 0, d->skin_joints,
                      err)) ||
            (rc = add(w, "skin_weights", DF_DT_F32, 2, N, K, 0,
                      d->skin_weights, err)))
            goto done;
    }
    for (size_t c = 0; c < d->n_clips; c++) {
        const df_rigged_clip_t *cl = &d->clips[c];
        int64_t F = cl->n_keys;
        if (F <= 0 || !cl->times) {
            rc = df_error_set(err, DF_EINVAL, "rigged write: clip %zu has no "
                                              "key times", c);
            goto done;
        }
        snprintf(name, sizeof name, "clip/%zu/times", c);
        if ((rc = add(w, name, DF_DT_F32, 1, F, 0, 0, cl->times, err)))
            goto done;
        if (cl->rotations) {
            snprintf(name, sizeof name, "clip/%zu/rotations", c);
            if ((rc = add(w, name, DF_DT_F32, 3, F, J, 4, cl->rotations, err)))
                goto done;
        }
        if (cl->translations) {
            snprintf(name, sizeof name, "clip/%zu/translations", c);
            if ((rc = add(w, name, DF_DT_F32, 3, F, J, 3, cl->translations,
                          err)))
                goto done;
        }
        if (cl->weights) {
            snprintf(name, sizeof name, "clip/%zu/weights", c);
            if ((rc = add(w, name, DF_DT_F32, 2, F, M, 0, cl->weights, err)))
                goto done;
        }
        if (cl->matrices) {
            snprintf(name, sizeof name, "clip/%zu/matrices", c);
            if ((rc = add(w, name, DF_DT_F32, 3, F, J, 12, cl->matrices, err)))
                goto done;
        }
    }
    rc = df_st_writer_save(w, path, err);
done:
    free(jn);
    free(mn);
    free(cn);
    free(sn);
    df_st_writer_free(&w);
    return rc;
}

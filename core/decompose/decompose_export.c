/* decompose_export.c — a decomposition result as a servable `rigged` model.
 *
 * The proxy bones become B root joints with identity rest transforms and
 * identity inverse bind matrices, so a joint's world matrix *is* the fitted
 * rest-to-frame transform; the fitted per-frame transforms are stored as
 * the clip's `matrices` (world 3x4), which the rigged kind feeds to its
 * `joint_matrices` input when the clip is sampled. Evaluating frame p thus
 * computes Σ_j w_ij T_j^p [v_i; 1] — exactly df_decompose_reconstruct up to
 * float rounding (the model evaluates in float32).
 */
#include "decompose/decompose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_decompose_write_model(const df_decompose_result_t *r, int64_t T,
                             const uint32_t *tris, const float *times,
                             const char *clip_name, const char *path,
                             df_error_t *err)
{
    if (!r || !path || (T > 0 && !tris))
        return df_error_set(err, DF_EINVAL, "decompose write: missing result, path or triangles");
    const int B = r->n_bones;
    const int64_t F = r->n_frames;
    if (times)
        for (int64_t p = 1; p < F; p++)
            if (!(times[p] > times[p - 1]))
                return df_error_set(err, DF_EINVAL,
                                    "decompose write: frame times not increasing at frame %lld "
                                    "(%g after %g)", (long long)p, times[p], times[p - 1]);
    char **names = calloc(B, sizeof(char *));
    char *namebuf = malloc((size_t)B * 16);
    int32_t *parents = malloc(sizeof(int32_t) * B);
    float *rt = calloc((size_t)B * 3, sizeof(float)), *rq = calloc((size_t)B * 4, sizeof(float));
    float *rs = malloc(sizeof(float) * B * 3), *ibm = calloc((size_t)B * 16, sizeof(float));
    float *tt = malloc(sizeof(float) * F);
    int rc = DF_OK;
    if (!names || !namebuf || !parents || !rt || !rq || !rs || !ibm || !tt) {
        rc = df_error_set(err, DF_ENOMEM, "decompose write: out of memory");
        goto done;
    }
    for (int j = 0; j < B; j++) {
        names[j] = namebuf + 16 * j;
        snprintf(names[j], 16, "bone%d", j);
        parents[j] = -1;
        rq[4 * j + 3] = 1;
        for (int a = 0; a < 3; a++) rs[3 * j + a] = 1;
        for (int a = 0; a < 4; a++) ibm[16 * j + 5 * a] = 1;
    }
    for (int64_t p = 0; p < F; p++) tt[p] = times ? times[p] : (float)p / 30.0f;
    df_rigged_clip_t clip;
    memset(&clip, 0, sizeof clip);
    snprintf(clip.name, sizeof clip.name, "%s", clip_name && *clip_name ? clip_name : "fit");
    clip.n_keys = F;
    clip.times = tt;
    clip.matrices = r->matrices;
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = r->n_vertices;
    d.n_triangles = T;
    d.positions = r->rest;
    d.triangles = (uint32_t *)tris;
    d.n_joints = B;
    d.joint_names = names;
    d.parents = parents;
    d.rest_translations = rt;
    d.rest_rotations = rq;
    d.rest_scales = rs;
    d.inverse_bind = ibm;
    d.n_influences = r->n_influences;
    d.skin_joints = r->skin_joints;
    d.skin_weights = r->skin_weights;
    d.skinning = "lbs";
    d.n_clips = 1;
    d.clips = &clip;
    rc = df_rigged_write(&d, path, err);
done:
    free(names); free(namebuf); free(parents); free(rt); free(rq); free(rs); free(ibm); free(tt);
    return rc;
}

int df_decompose_write_rig(const df_decompose_result_t *r, const df_decompose_skeleton_t *s,
                           int64_t T, const uint32_t *tris, const float *times,
                           const char *clip_name, const char *path, df_error_t *err)
{
    if (!r || !s || !path || (T > 0 && !tris) || s->n_joints != r->n_bones ||
        s->n_frames != r->n_frames)
        return df_error_set(err, DF_EINVAL, "decompose write: result and skeleton do not match");
    const int B = r->n_bones, K = r->n_influences;
    const int64_t F = r->n_frames, N = r->n_vertices;
    if (times)
        for (int64_t p = 1; p < F; p++)
            if (!(times[p] > times[p - 1]))
                return df_error_set(err, DF_EINVAL,
                                    "decompose write: frame times not increasing at frame %lld "
                                    "(%g after %g)", (long long)p, times[p], times[p - 1]);
    const int rigid = r->transforms == DF_DECOMPOSE_RIGID;
    char **names = calloc(B, sizeof(char *));
    char *namebuf = malloc((size_t)B * 16);
    float *rs = malloc(sizeof(float) * B * 3), *ibm = calloc((size_t)B * 16, sizeof(float));
    float *tt = malloc(sizeof(float) * F);
    int32_t *sj = malloc(sizeof(int32_t) * N * K);
    float *mats = rigid ? NULL : malloc(sizeof(float) * F * B * 12);
    int rc = DF_OK;
    if (!names || !namebuf || !rs || !ibm || !tt || !sj || (!rigid && !mats)) {
        rc = df_error_set(err, DF_ENOMEM, "decompose write: out of memory");
        goto done;
    }
    for (int k = 0; k < B; k++) {
        names[k] = namebuf + 16 * k;
        snprintf(names[k], 16, "joint%d", k);
        for (int a = 0; a < 3; a++) rs[3 * k + a] = 1;
        /* inverse of the bind frame [Q | c] (Q a rotation): [Qᵀ | -Qᵀ c] */
        const double *bd = s->bind + 12 * k;
        for (int a = 0; a < 3; a++) {
            double t = 0;
            for (int b = 0; b < 3; b++) {
                ibm[16 * k + 4 * a + b] = (float)bd[4 * b + a];
                t -= bd[4 * b + a] * bd[4 * b + 3];
            }
            ibm[16 * k + 4 * a + 3] = (float)t;
        }
        ibm[16 * k + 15] = 1;
    }
    for (int64_t q = 0; q < N * K; q++) sj[q] = s->joint_of_bone[r->skin_joints[q]];
    if (mats)
        for (int64_t q = 0; q < F * B * 12; q++) mats[q] = (float)s->world[q];
    for (int64_t p = 0; p < F; p++) tt[p] = times ? times[p] : (float)p / 30.0f;
    df_rigged_clip_t clip;
    memset(&clip, 0, sizeof clip);
    snprintf(clip.name, sizeof clip.name, "%s", clip_name && *clip_name ? clip_name : "fit");
    clip.n_keys = F;
    clip.times = tt;
    if (rigid) {
        clip.rotations = s->rotation;
        clip.translations = s->translation;
    } else {
        clip.matrices = mats;
    }
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = N;
    d.n_triangles = T;
    d.positions = r->rest;
    d.triangles = (uint32_t *)tris;
    d.n_joints = B;
    d.joint_names = names;
    d.parents = s->parent;
    d.rest_translations = s->rest_translation;
    d.rest_rotations = s->rest_rotation;
    d.rest_scales = rs;
    d.inverse_bind = ibm;
    d.n_influences = K;
    d.skin_joints = sj;
    d.skin_weights = r->skin_weights;
    d.skinning = "lbs";
    d.n_clips = 1;
    d.clips = &clip;
    rc = df_rigged_write(&d, path, err);
done:
    free(names); free(namebuf); free(rs); free(ibm); free(tt); free(sj); free(mats);
    return rc;
}

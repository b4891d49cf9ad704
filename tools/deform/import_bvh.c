/* import_bvh.c — clips from a BVH (or any animation assimp reads) for an existing model.
 *
 * DESIGN (kept simple on purpose; docs/import.md says what it does and does not do)
 *  - assimp reads the BVH: a node per BVH joint (rest transform = the OFFSET translation, no
 *    rotation) and one aiAnimation whose channels hold every frame.
 *  - Joints are matched by name: exact first, then ignoring case. Unmatched model joints keep
 *    their rest transform; unmatched BVH joints are ignored; both lists are reported.
 *  - A matched joint's local rotation is q_rest(model) * q_bvh(t): the BVH rotation is applied
 *    as a delta in the joint's own rest frame. That is exact when the BVH was recorded on this
 *    skeleton or the model's rest local rotations are identity (the BVH convention); it is no
 *    retargeting method (no bone-axis alignment, no limb-length scaling).
 *  - A matched joint with BVH position keys (the root) gets rest(model) + (p(t) - OFFSET).
 *  - Frames: every BVH key, at times key/mTicksPerSecond (assimp sets ticks = 1/frame time).
 *  - The new model file is the source file's tensors and known metadata (kind, format_version,
 *    skinning, joint_names, morph_names) with the clips appended (clip/<i>/..., "clips").
 */
#include "import.h"

#include <assimp/cimport.h>
#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void qmul(const double a[4], const double b[4], double o[4]) /* xyzw */
{
    double x = a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1];
    double y = a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0];
    double z = a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3];
    double w = a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2];
    o[0] = x; o[1] = y; o[2] = z; o[3] = w;
}

static void qnorm(double q[4])
{
    double n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    if (n < 1e-12) { q[0] = q[1] = q[2] = 0; q[3] = 1; return; }
    for (int i = 0; i < 4; i++) q[i] /= n;
}

/* value of key list at time t: linear / slerp, clamped */
static unsigned seg(const void *keys, size_t stride, unsigned n, double t, double *u)
{
#define KT(i) (*(const double *)((const char *)keys + (size_t)(i) * stride))
    *u = 0;
    if (n <= 1 || t <= KT(0)) return 0;
    if (t >= KT(n - 1)) return n - 1;
    unsigned lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        unsigned m = (lo + hi) / 2;
        if (KT(m) <= t) lo = m; else hi = m;
    }
    double dt = KT(hi) - KT(lo);
    *u = dt > 0 ? (t - KT(lo)) / dt : 0;
    return lo;
#undef KT
}

static void slerp(const double a[4], const double b0[4], double u, double o[4])
{
    double b[4] = {b0[0], b0[1], b0[2], b0[3]};
    double d = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
    if (d < 0) { d = -d; for (int i = 0; i < 4; i++) b[i] = -b[i]; }
    double wa = 1 - u, wb = u;
    if (d < 0.9999995) {
        double th = acos(d), st = sin(th);
        wa = sin((1 - u) * th) / st;
        wb = sin(u * th) / st;
    }
    for (int i = 0; i < 4; i++) o[i] = wa * a[i] + wb * b[i];
    qnorm(o);
}

static const struct aiNode *find(const struct aiNode *n, const char *name, int icase)
{
    if (icase ? !strcasecmp(n->mName.data, name) : !strcmp(n->mName.data, name)) return n;
    for (unsigned i = 0; i < n->mNumChildren; i++) {
        const struct aiNode *r = find(n->mChildren[i], name, icase);
        if (r) return r;
    }
    return NULL;
}

static json_t *meta_array(const df_st_t *st, const char *key)
{
    const char *s = df_st_meta(st, key);
    if (!s) return json_array();
    json_t *j = json_loads(s, 0, NULL);
    if (!j || !json_is_array(j)) { json_decref(j); return NULL; }
    return j;
}

int df__import_clips_for(const char *asset, const char *src_model, const char *dst_model,
                         FILE *report, df_error_t *err)
{
    df_st_t *st = NULL;
    const struct aiScene *sc = NULL;
    json_t *jn = NULL, *clips = NULL;
    df_st_writer_t *w = NULL;
    float *rot = NULL, *tr = NULL, *tm = NULL;
    double *times = NULL;
    int *map = NULL;
    int rc = df_st_open(src_model, NULL, &st, err);
    if (rc) return rc;
    const char *kind = df_st_meta(st, "kind");
    if (!kind || strcmp(kind, "rigged")) {
        rc = df_error_set(err, DF_EUNSUPPORTED, "%s: clips can only be added to a rigged model",
                          src_model);
        goto done;
    }
    jn = meta_array(st, "joint_names");
    clips = meta_array(st, "clips");
    if (!jn || !clips) {
        rc = df_error_set(err, DF_EFORMAT, "%s: joint_names/clips metadata is not a JSON array",
                          src_model);
        goto done;
    }
    size_t J = json_array_size(jn);
    const df_tensor_t *rt = NULL, *rr = NULL;
    int64_t s3[2] = {(int64_t)J, 3}, s4[2] = {(int64_t)J, 4};
    if (J == 0) {
        rc = df_error_set(err, DF_EINVAL, "%s: the model has no skeleton to animate", src_model);
        goto done;
    }
    if ((rc = df_st_require(st, "joint_rest_translations", DF_DT_F32, 2, s3, 0, &rt, err)) ||
        (rc = df_st_require(st, "joint_rest_rotations", DF_DT_F32, 2, s4, 0, &rr, err)))
        goto done;

    sc = aiImportFile(asset, aiProcess_ValidateDataStructure);
    if (!sc) {
        rc = df_error_set(err, DF_EFORMAT, "%s: assimp cannot read it: %s", asset, aiGetErrorString());
        goto done;
    }
    if (sc->mNumAnimations == 0 || !sc->mRootNode) {
        rc = df_error_set(err, DF_EINVAL, "%s: no animation in this file", asset);
        goto done;
    }
    /* joint map: model joint -> channel index in animation 0's channel list (per animation) */
    map = malloc(J * sizeof *map);
    rot = NULL;
    w = df_st_writer_new();
    if (!map || !w) { rc = df_error_set(err, DF_ENOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < df_st_count(st); i++) {
        const df_tensor_t *t = df_st_at(st, i);
        if ((rc = df_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data))) {
            rc = df_error_set(err, rc, "cannot copy tensor %s", t->name);
            goto done;
        }
    }
    static const char *keep[] = {"kind", "format_version", "skinning", "joint_names", "morph_names"};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
        const char *v = df_st_meta(st, keep[k]);
        if (v) df_st_writer_meta(w, keep[k], v);
    }
    size_t c0 = json_array_size(clips);
    int matched_total = 0;
    for (unsigned a = 0; a < sc->mNumAnimations; a++) {
        const struct aiAnimation *an = sc->mAnimations[a];
        double tps = an->mTicksPerSecond > 0 ? an->mTicksPerSecond : 25.0;
        int matched = 0;
        size_t nt = 0;
        for (size_t j = 0; j < J; j++) {
            const char *jname = json_string_value(json_array_get(jn, j));
            map[j] = -1;
            for (int icase = 0; icase < 2 && map[j] < 0 && jname; icase++)
                for (unsigned ch = 0; ch < an->mNumChannels; ch++)
                    if (icase ? !strcasecmp(an->mChannels[ch]->mNodeName.data, jname)
                              : !strcmp(an->mChannels[ch]->mNodeName.data, jname)) {
                        map[j] = (int)ch;
                        break;
                    }
            if (map[j] >= 0) {
                matched++;
                const struct aiNodeAnim *na = an->mChannels[map[j]];
                if (na->mNumRotationKeys > nt) nt = na->mNumRotationKeys;
                if (na->mNumPositionKeys > nt) nt = na->mNumPositionKeys;
            } else if (report && a == 0) {
                fprintf(report, "  model joint '%s' has no BVH joint: keeps its rest pose\n",
                        jname ? jname : "?");
            }
        }
        if (report && a == 0)
            for (unsigned ch = 0; ch < an->mNumChannels; ch++) {
                int used = 0;
                for (size_t j = 0; j < J && !used; j++) used = map[j] == (int)ch;
                if (!used)
                    fprintf(report, "  BVH joint '%s' matches no model joint: ignored\n",
                            an->mChannels[ch]->mNodeName.data);
            }
        if (!matched || nt == 0) {
            if (report) fprintf(report, "  animation %u: no joint matches; skipped\n", a);
            continue;
        }
        matched_total += matched;
        /* times: the keys of the channel with the most keys (BVH: all channels share them) */
        times = malloc(nt * sizeof *times);
        tm = malloc(nt * sizeof *tm);
        rot = malloc(nt * J * 4 * sizeof *rot);
        tr = malloc(nt * J * 3 * sizeof *tr);
        if (!times || !tm || !rot || !tr) { rc = df_error_set(err, DF_ENOMEM, "out of memory"); goto done; }
        for (size_t j = 0; j < J; j++) {
            if (map[j] < 0) continue;
            const struct aiNodeAnim *na = an->mChannels[map[j]];
            if (na->mNumRotationKeys == nt)
                for (size_t f = 0; f < nt; f++) times[f] = na->mRotationKeys[f].mTime;
            else if (na->mNumPositionKeys == nt)
                for (size_t f = 0; f < nt; f++) times[f] = na->mPositionKeys[f].mTime;
            else continue;
            break;
        }
        for (size_t f = 0; f < nt; f++) {
            tm[f] = (float)((times[f] - times[0]) / tps);
            if (f && !(tm[f] > tm[f - 1])) {
                rc = df_error_set(err, DF_EFORMAT, "%s: key times not increasing at frame %zu",
                                  asset, f);
                goto done;
            }
        }
        for (size_t f = 0; f < nt; f++)
            for (size_t j = 0; j < J; j++) {
                const float *r0 = (const float *)rr->data + j * 4, *t0 = (const float *)rt->data + j * 3;
                double q[4] = {r0[0], r0[1], r0[2], r0[3]}, p[3] = {t0[0], t0[1], t0[2]};
                if (map[j] >= 0) {
                    const struct aiNodeAnim *na = an->mChannels[map[j]];
                    double u;
                    if (na->mNumRotationKeys) {
                        unsigned k = seg(&na->mRotationKeys[0].mTime, sizeof na->mRotationKeys[0],
                                         na->mNumRotationKeys, times[f], &u);
                        const struct aiQuaternion *A = &na->mRotationKeys[k].mValue,
                                                  *B = &na->mRotationKeys[k + (u > 0)].mValue;
                        double qa[4] = {A->x, A->y, A->z, A->w}, qb[4] = {B->x, B->y, B->z, B->w}, d[4];
                        qnorm(qa); qnorm(qb);
                        slerp(qa, qb, u, d);
                        qmul(q, d, q);
                        qnorm(q);
                    }
                    if (na->mNumPositionKeys) {
                        unsigned k = seg(&na->mPositionKeys[0].mTime, sizeof na->mPositionKeys[0],
                                         na->mNumPositionKeys, times[f], &u);
                        const struct aiVector3D *A = &na->mPositionKeys[k].mValue,
                                                *B = &na->mPositionKeys[k + (u > 0)].mValue;
                        const struct aiNode *bn = find(sc->mRootNode, na->mNodeName.data, 0);
                        double off[3] = {0, 0, 0};
                        if (bn) {
                            off[0] = bn->mTransformation.a4;
                            off[1] = bn->mTransformation.b4;
                            off[2] = bn->mTransformation.c4;
                        }
                        p[0] += A->x + (B->x - A->x) * u - off[0];
                        p[1] += A->y + (B->y - A->y) * u - off[1];
                        p[2] += A->z + (B->z - A->z) * u - off[2];
                    }
                }
                for (int k = 0; k < 4; k++) rot[(f * J + j) * 4 + k] = (float)q[k];
                for (int k = 0; k < 3; k++) tr[(f * J + j) * 3 + k] = (float)p[k];
            }
        size_t ci = json_array_size(clips);
        char nm[128], base[96];
        const char *slash = strrchr(asset, '/');
        snprintf(base, sizeof base, "%.40s", an->mName.length ? an->mName.data : (slash ? slash + 1 : asset));
        snprintf(nm, sizeof nm, "%s", base);
        for (int k = 1;; k++) {
            int clash = 0;
            for (size_t i = 0; i < json_array_size(clips) && !clash; i++)
                clash = !strcmp(json_string_value(json_array_get(clips, i)), nm);
            if (!clash) break;
            snprintf(nm, sizeof nm, "%s.%d", base, k);
        }
        json_array_append_new(clips, json_string(nm));
        char tn[64];
        int64_t sh1[1] = {(int64_t)nt}, shr[3] = {(int64_t)nt, (int64_t)J, 4},
                sht[3] = {(int64_t)nt, (int64_t)J, 3};
        snprintf(tn, sizeof tn, "clip/%zu/times", ci);
        rc = df_st_writer_add(w, tn, DF_DT_F32, 1, sh1, tm);
        snprintf(tn, sizeof tn, "clip/%zu/rotations", ci);
        if (!rc) rc = df_st_writer_add(w, tn, DF_DT_F32, 3, shr, rot);
        snprintf(tn, sizeof tn, "clip/%zu/translations", ci);
        if (!rc) rc = df_st_writer_add(w, tn, DF_DT_F32, 3, sht, tr);
        if (rc) { rc = df_error_set(err, rc, "cannot add clip tensors"); goto done; }
        if (report)
            fprintf(report, "  clip '%s': %zu frames, %.4g s, %d of %zu joints matched\n", nm, nt,
                    (double)tm[nt - 1], matched, J);
        free(times); free(tm); free(rot); free(tr);
        times = NULL; tm = rot = tr = NULL;
    }
    if (json_array_size(clips) == c0) {
        rc = df_error_set(err, DF_EINVAL, "%s: no joint name of the animation matches the model's "
                          "joints", asset);
        goto done;
    }
    (void)matched_total;
    char *cj = json_dumps(clips, JSON_COMPACT);
    if (!cj) { rc = df_error_set(err, DF_ENOMEM, "out of memory"); goto done; }
    df_st_writer_meta(w, "clips", cj);
    free(cj);
    rc = df_st_writer_save(w, dst_model, err);
done:
    free(times); free(tm); free(rot); free(tr); free(map);
    df_st_writer_free(&w);
    json_decref(jn);
    json_decref(clips);
    if (sc) aiReleaseImport(sc);
    df_st_close(&st);
    return rc;
}

/* cmd_decompose.c — `deform decompose`: skinning decomposition of an animated
 * mesh into a servable `rigged` model (core/decompose/decompose.h does the fitting).
 *
 *   deform decompose INPUT --bones B --repository DIR --name NAME
 *       [--max-influences K] [--iters N] [--threads T] [--clip NAME]
 *       [--fps R] [--frames a:b] [--tol X] [--no-weld] [--weld-tol X] [--reseed N]
 *       [--model-rest] [--metrics-json FILE] [--save-sequence FILE] [--quiet]
 *       [--init cluster|network] [--init-weights FILE] [--init-rounds N]
 *   deform decompose train-init ...   (cmd_decompose_net.c)
 *
 * --save-sequence writes the sequence as read (after --frames) in the raw
 * format below, e.g. to bake an asset once or to make a welded copy; from a
 * rigged model it adds `bones` (each vertex's strongest skin joint), the
 * labels the initialisation network trains on. --sequence-only stops there.
 *
 * INPUT is one of
 *  - a raw sequence: a .safetensors file with `frames` F32 [F,N,3] and
 *    `triangles` I32 [T,3], optional `times` F32 [F] (seconds) and `rest`
 *    F32 [N,3] (default: frame 0) — docs/decompose.md;
 *  - a model: REPO/NAME directory or a model .safetensors; its clip (--clip,
 *    default the first) is sampled at its key times (or --fps) with
 *    df_model_clip_sample and evaluated with df_model_evaluate;
 *  - a per-vertex animated asset (.md2): every keyframe is read through
 *    assimp (AI_CONFIG_IMPORT_MD2_KEYFRAME), as stored (no welding by us);
 *  - an .md3: every frame, read directly (md3_read.c);
 *  - a point cache (.mdd, .pc2; cache_read.c), triangles from --mesh;
 *  - a directory of per-frame mesh files (no config.json; files assimp
 *    reads, sorted by name, e.g. frame000.obj ...): topology must not change;
 *  - any other asset: imported with `deform import` (cmd_import) into a
 *    temporary repository, then handled as a model.
 *
 * DESIGN
 * The tool owns the parallelism: core gets a parallel_for that runs the
 * ranges on T pthreads, and OpenBLAS is kept single-threaded (core calls
 * its GEMMs per vertex block inside those ranges), so the two never
 * compete for the cores (a process whose own threads and OpenBLAS's
 * threads share 2 cores ran up to 2x slower). Output goes to
 * DIR/NAME/<next version>/model.safetensors (+ config.json if absent): a
 * skeleton (df_decompose_skeleton) for rigid/trs fits, proxy bones for
 * affine ones, and with --export-glb the skeleton as .glb (glb_write.c);
 * the written model is loaded back and its clip replayed through the rigged
 * kind, and the replay error is printed with the four metrics.
 */
#include "decompose/decompose.h"
#include "decompose/decompose_net.h"
#include "cache_read.h"
#include "glb_write.h"
#include "import.h"
#include "md3_read.h"

#include <assimp/cimport.h>
#include <assimp/config.h>
#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cmd_import(int argc, char **argv);
int df__decompose_train_init(int argc, char **argv); /* cmd_decompose_net.c */
extern const df_kind_t df_kind_rigged; /* strong: the tool needs the rigged kind */

static int usage(void)
{
    fprintf(stderr,
            "usage: deform decompose INPUT --bones B --repository DIR --name NAME\n"
            "         [--transforms rigid|trs|affine (rigid)] [--transform-sweeps S(3)]\n"
            "         [--skeleton tree|flat] [--export-glb FILE.glb] [--mesh MESH (caches)]\n"
            "         [--max-influences K(6; 4 with --export-glb)] [--iters N(30)] [--threads T(1)] [--clip NAME]\n"
            "         [--fps R] [--frames a:b] [--tol X] [--no-weld] [--weld-tol X] [--reseed N]\n"
            "         [--soft-convexity X] [--candidates C]\n"
            "         [--model-rest] [--metrics-json FILE] [--save-sequence RAW.safetensors]\n"
            "         [--init cluster|network] [--init-weights FILE] [--init-rounds N(20)]\n"
            "         [--sequence-only] [--quiet]\n"
            "       deform decompose train-init SEQ.safetensors... --out WEIGHTS.safetensors\n"
            "         (deform decompose train-init --help)\n"
            "  INPUT: raw .safetensors (frames [F,N,3] F32, triangles [T,3] I32), a model\n"
            "         (REPO/NAME or model .safetensors), an .md2, a directory of per-frame\n"
            "         meshes (e.g. OBJ), an .md3 (every frame), a point cache (.mdd, .pc2;\n"
            "         triangles from --mesh),\n"
            "         or any asset deform import reads\n");
    return 2;
}

/* ------------------------------------------------------------ sequence */

typedef struct seq {
    int64_t F, N, T;
    float *frames;    /* [F,N,3] */
    uint32_t *tris;   /* [T,3] */
    float *times;     /* [F] */
    float *rest;      /* [N,3] or NULL */
    int32_t *bones;   /* [N] strongest skin joint (rigged models), or NULL */
    char *bone_names; /* JSON array (the model's joint_names), or NULL */
    char clip[96];    /* the model clip read, or "" */
    char source[96];  /* what was read, for the summary */
} seq_t;

static void seq_free(seq_t *s)
{
    free(s->frames); free(s->tris); free(s->times); free(s->rest); free(s->bones);
    free(s->bone_names);
    memset(s, 0, sizeof *s);
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

static int read_raw(const char *path, df_st_t *st, seq_t *s, df_error_t *err)
{
    const df_tensor_t *fr, *tr, *tm, *rs;
    int64_t shp[3] = {-1, -1, 3};
    int rc = df_st_require(st, "frames", DF_DT_F32, 3, shp, 0, &fr, err);
    if (rc) return rc;
    int64_t F = fr->shape[0], N = fr->shape[1];
    int64_t tshp[2] = {-1, 3};
    if ((rc = df_st_require(st, "triangles", DF_DT_I32, 2, tshp, 0, &tr, err))) return rc;
    int64_t fshp[1] = {F}, rshp[2] = {N, 3};
    if ((rc = df_st_require(st, "times", DF_DT_F32, 1, fshp, 1, &tm, err))) return rc;
    if ((rc = df_st_require(st, "rest", DF_DT_F32, 2, rshp, 1, &rs, err))) return rc;
    s->F = F; s->N = N; s->T = tr->shape[0];
    s->frames = malloc(fr->nbytes ? fr->nbytes : 1);
    s->tris = malloc(sizeof(uint32_t) * (s->T * 3 + 1));
    s->times = malloc(sizeof(float) * (F + 1));
    if (!s->frames || !s->tris || !s->times) return df_error_set(err, DF_ENOMEM, "out of memory");
    memcpy(s->frames, fr->data, fr->nbytes);
    const int32_t *ti = tr->data;
    for (int64_t q = 0; q < 3 * s->T; q++) {
        if (ti[q] < 0 || ti[q] >= N)
            return df_error_set(err, DF_EINVAL,
                                "%s: tensor 'triangles': triangle %lld references vertex %d but "
                                "'frames' has %lld vertices", path, (long long)(q / 3), ti[q],
                                (long long)N);
        s->tris[q] = (uint32_t)ti[q];
    }
    for (int64_t p = 0; p < F; p++) s->times[p] = tm ? ((const float *)tm->data)[p] : p / 30.0f;
    for (int64_t p = 1; p < F && tm; p++)
        if (!(s->times[p] > s->times[p - 1]))
            return df_error_set(err, DF_EINVAL, "%s: tensor 'times' not increasing at frame %lld",
                                path, (long long)p);
    if (rs) {
        s->rest = malloc(rs->nbytes);
        if (!s->rest) return df_error_set(err, DF_ENOMEM, "out of memory");
        memcpy(s->rest, rs->data, rs->nbytes);
    }
    snprintf(s->source, sizeof s->source, "raw sequence");
    return DF_OK;
}

/* Diagonal of the bounding box of n points. */
static double bbox_diag(const float *p, int64_t n)
{
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            lo[k] = fmin(lo[k], p[3 * i + k]);
            hi[k] = fmax(hi[k], p[3 * i + k]);
        }
    return n > 0 ? sqrt((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                        (hi[2] - lo[2]) * (hi[2] - lo[2]))
                 : 0;
}

/* Sample clip `clip` (or the first) of a model at its key times or 1/fps. */
static int read_model(df_model_t *m, const char *clip, double fps, int model_rest, seq_t *s,
                      df_error_t *err)
{
    if (df_model_clip_count(m) == 0)
        return df_error_set(err, DF_EINVAL, "model '%s' has no clips to decompose",
                            df_model_name(m));
    int c = 0;
    if (clip) {
        c = df_model_clip_find(m, clip);
        if (c < 0) {
            const char *const *names;
            size_t n = df_model_names(m, "clips", &names);
            char list[256] = "";
            for (size_t i = 0; i < n; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                         names[i]);
            return df_error_set(err, DF_ENOTFOUND, "no clip '%s' in the model (clips: %s)", clip,
                                list);
        }
    }
    df_clip_info_t ci;
    int rc = df_model_clip_info(m, c, &ci);
    if (rc) return df_error_set(err, rc, "clip %d: no info", c);
    double dur = ci.n_keys > 0 ? ci.times[ci.n_keys - 1] - ci.times[0] : 0;
    int64_t F = fps > 0 ? (int64_t)floor(dur * fps + 1e-9) + 1 : ci.n_keys;
    int po = df_model_find_output(m, "positions");
    if (po < 0) return df_error_set(err, DF_EUNSUPPORTED, "model has no 'positions' output");
    s->F = F;
    s->N = df_model_n_vertices(m);
    s->T = df_model_n_triangles(m);
    s->frames = malloc(sizeof(float) * F * s->N * 3);
    s->tris = malloc(sizeof(uint32_t) * (s->T * 3 + 1));
    s->times = malloc(sizeof(float) * (F + 1));
    int ni = df_model_n_inputs(m);
    float *bufs[DF_MAX_IO] = {0};
    df_scratch_t *sc = df_scratch_new();
    rc = !s->frames || !s->tris || !s->times || !sc ? DF_ENOMEM : DF_OK;
    for (int i = 0; i < ni && !rc; i++) {
        const df_io_desc_t *d = df_model_input(m, i);
        int64_t n = 1;
        for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
        if (!(bufs[i] = malloc(sizeof(float) * (n + 1)))) rc = DF_ENOMEM;
    }
    if (rc) {
        df_scratch_free(&sc);
        for (int i = 0; i < ni; i++) free(bufs[i]);
        return df_error_set(err, DF_ENOMEM, "out of memory (%lld frames)", (long long)F);
    }
    memcpy(s->tris, df_model_triangles(m), sizeof(uint32_t) * s->T * 3);
    for (int64_t p = 0; p < F && !rc; p++) {
        double t = fps > 0 ? p / fps : ci.times[p] - ci.times[0];
        s->times[p] = (float)t;
        uint32_t filled = 0;
        rc = df_model_clip_sample(m, c, t, bufs, &filled, err);
        if (rc) break;
        const float *ptr[DF_MAX_IO][1];
        float *dst[1] = {s->frames + p * s->N * 3};
        df_batch_t b = {.n = 1};
        for (int i = 0; i < ni; i++)
            if (filled & (1u << i)) { ptr[i][0] = bufs[i]; b.in[i] = ptr[i]; }
        b.out[po] = dst;
        rc = df_model_evaluate(m, &b, sc, err);
    }
    df_scratch_free(&sc);
    for (int i = 0; i < ni; i++) free(bufs[i]);
    if (rc) return rc;
    if (model_rest) {
        s->rest = malloc(sizeof(float) * s->N * 3);
        if (!s->rest) return df_error_set(err, DF_ENOMEM, "out of memory");
        memcpy(s->rest, df_model_rest_positions(m), sizeof(float) * s->N * 3);
    }
    snprintf(s->source, sizeof s->source, "clip '%s' of model", ci.name);
    snprintf(s->clip, sizeof s->clip, "%s", ci.name);
    return DF_OK;
}

/* The strongest skin joint of every vertex of a rigged model file (the
 * labels of the initialisation network's training data); nothing when the
 * file has no skin. */
static void read_labels(const char *path, seq_t *s)
{
    df_st_t *st = NULL;
    df_error_t e = {0};
    if (df_st_open(path, NULL, &st, &e)) return;
    const df_tensor_t *sj = df_st_find(st, "skin_joints"), *sw = df_st_find(st, "skin_weights");
    const char *names = df_st_meta(st, "joint_names");
    if (sj && sw && sj->dtype == DF_DT_I32 && sw->dtype == DF_DT_F32 && sj->ndim == 2 &&
        sw->ndim == 2 && sj->shape[0] == s->N && sw->shape[0] == s->N &&
        sj->shape[1] == sw->shape[1] && (s->bones = malloc(sizeof(int32_t) * (s->N + 1)))) {
        const int32_t *j = sj->data;
        const float *w = sw->data;
        int64_t K = sj->shape[1];
        for (int64_t i = 0; i < s->N; i++) {
            int64_t b = 0;
            for (int64_t k = 1; k < K; k++)
                if (w[i * K + k] > w[i * K + b]) b = k;
            s->bones[i] = w[i * K + b] > 0 ? j[i * K + b] : -1;
        }
        if (names) s->bone_names = strdup(names);
    }
    df_st_close(&st);
}

/* Merge every mesh of an assimp scene (positions in world space). */
static void collect_node(const struct aiScene *sc, const struct aiNode *nd, struct aiMatrix4x4 parent,
                         float *pos, int64_t *nv, uint32_t *tris, int64_t *nt, int count_only)
{
    struct aiMatrix4x4 w = parent;
    aiMultiplyMatrix4(&w, &nd->mTransformation);
    for (unsigned k = 0; k < nd->mNumMeshes; k++) {
        const struct aiMesh *me = sc->mMeshes[nd->mMeshes[k]];
        int64_t base = *nv;
        for (unsigned f = 0; f < me->mNumFaces; f++) {
            if (me->mFaces[f].mNumIndices != 3) continue;
            if (!count_only && tris)
                for (int a = 0; a < 3; a++) tris[3 * *nt + a] = (uint32_t)(base + me->mFaces[f].mIndices[a]);
            (*nt)++;
        }
        if (!count_only)
            for (unsigned v = 0; v < me->mNumVertices; v++) {
                struct aiVector3D p = me->mVertices[v];
                aiTransformVecByMatrix4(&p, &w);
                pos[3 * (base + v)] = p.x; pos[3 * (base + v) + 1] = p.y; pos[3 * (base + v) + 2] = p.z;
            }
        *nv += me->mNumVertices;
    }
    for (unsigned c = 0; c < nd->mNumChildren; c++)
        collect_node(sc, nd->mChildren[c], w, pos, nv, tris, nt, count_only);
}

static int md2_frame_count(const char *path, df_error_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return df_error_set(err, DF_EIO, "%s: %s", path, strerror(errno));
    int32_t h[17];
    size_t n = fread(h, 4, 17, f);
    fclose(f);
    if (n != 17 || memcmp(h, "IDP2", 4))
        return df_error_set(err, DF_EFORMAT, "%s: not an MD2 file (no IDP2 header)", path);
    if (h[10] < 1 || h[10] > 100000)
        return df_error_set(err, DF_EFORMAT, "%s: MD2 header frame count %d", path, h[10]);
    return h[10];
}

static int read_md2(const char *path, seq_t *s, df_error_t *err)
{
    int nf = md2_frame_count(path, err);
    if (nf < 0) return nf;
    struct aiMatrix4x4 id;
    aiIdentityMatrix4(&id);
    int rc = DF_OK;
    for (int k = 0; k < nf && !rc; k++) {
        struct aiPropertyStore *ps = aiCreatePropertyStore();
        aiSetImportPropertyInteger(ps, AI_CONFIG_IMPORT_MD2_KEYFRAME, k);
        const struct aiScene *sc = aiImportFileExWithProperties(path, aiProcess_Triangulate, NULL, ps);
        aiReleasePropertyStore(ps);
        if (!sc || !sc->mRootNode) {
            rc = df_error_set(err, DF_EFORMAT, "%s: keyframe %d: assimp: %s", path, k, aiGetErrorString());
            break;
        }
        int64_t nv = 0, nt = 0;
        collect_node(sc, sc->mRootNode, id, NULL, &nv, NULL, &nt, 1);
        if (k == 0) {
            s->F = nf; s->N = nv; s->T = nt;
            s->frames = malloc(sizeof(float) * nf * nv * 3 + 1);
            s->tris = malloc(sizeof(uint32_t) * nt * 3 + 1);
            s->times = malloc(sizeof(float) * nf);
            if (!s->frames || !s->tris || !s->times) rc = df_error_set(err, DF_ENOMEM, "out of memory");
        } else if (nv != s->N || nt != s->T) {
            rc = df_error_set(err, DF_EINVAL,
                              "%s: keyframe %d has %lld vertices and %lld triangles but keyframe 0 "
                              "has %lld and %lld: the topology must not change", path, k,
                              (long long)nv, (long long)nt, (long long)s->N, (long long)s->T);
        }
        if (!rc) {
            nv = nt = 0;
            collect_node(sc, sc->mRootNode, id, s->frames + (int64_t)k * s->N * 3, &nv,
                         k == 0 ? s->tris : NULL, &nt, 0);
            s->times[k] = k / 10.0f; /* Quake 2 animates at 10 Hz */
        }
        aiReleaseImport(sc);
    }
    snprintf(s->source, sizeof s->source, "%d MD2 keyframes", nf);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory of per-frame meshes (frame files sorted by name, any format
 * assimp reads; e.g. one OBJ per frame), taken as stored. */
static int read_meshdir(const char *dirpath, seq_t *s, df_error_t *err)
{
    DIR *dir = opendir(dirpath);
    if (!dir) return df_error_set(err, DF_EIO, "%s: %s", dirpath, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = DF_OK;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.') continue;
        const char *dot = strrchr(de->d_name, '.');
        if (!dot || !aiIsExtensionSupported(dot)) continue;
        if (n == cap) {
            char **q = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *q);
            if (!q) { rc = DF_ENOMEM; break; }
            names = q;
        }
        if (!(names[n] = strdup(de->d_name))) { rc = DF_ENOMEM; break; }
        n++;
    }
    closedir(dir);
    if (rc) {
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
        return df_error_set(err, rc, "out of memory");
    }
    if (n == 0) {
        free(names);
        return df_error_set(err, DF_EINVAL,
                            "%s: neither a model directory (no config.json) nor a directory of "
                            "mesh files assimp reads", dirpath);
    }
    qsort(names, n, sizeof *names, cmp_str);
    struct aiMatrix4x4 id;
    aiIdentityMatrix4(&id);
    for (size_t k = 0; k < n && !rc; k++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dirpath, names[k]);
        const struct aiScene *sc = aiImportFile(p, aiProcess_Triangulate);
        if (!sc || !sc->mRootNode) {
            rc = df_error_set(err, DF_EFORMAT, "%s: frame %zu: assimp: %s", p, k, aiGetErrorString());
            break;
        }
        int64_t nv = 0, nt = 0;
        collect_node(sc, sc->mRootNode, id, NULL, &nv, NULL, &nt, 1);
        if (k == 0) {
            s->F = (int64_t)n; s->N = nv; s->T = nt;
            s->frames = malloc(sizeof(float) * n * nv * 3 + 1);
            s->tris = malloc(sizeof(uint32_t) * nt * 3 + 1);
            s->times = malloc(sizeof(float) * n);
            if (!s->frames || !s->tris || !s->times) rc = df_error_set(err, DF_ENOMEM, "out of memory");
        } else if (nv != s->N || nt != s->T) {
            rc = df_error_set(err, DF_EINVAL,
                              "%s: frame %zu has %lld vertices and %lld triangles but frame 0 (%s) "
                              "has %lld and %lld: the topology must not change", p, k,
                              (long long)nv, (long long)nt, names[0], (long long)s->N,
                              (long long)s->T);
        }
        if (!rc) {
            nv = nt = 0;
            collect_node(sc, sc->mRootNode, id, s->frames + (int64_t)k * s->N * 3, &nv,
                         k == 0 ? s->tris : NULL, &nt, 0);
            s->times[k] = k / 30.0f;
        }
        aiReleaseImport(sc);
    }
    snprintf(s->source, sizeof s->source, "%zu mesh files", n);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* Triangles for a point cache from --mesh: a .safetensors with `triangles`
 * (a raw sequence or a model) or any mesh assimp reads (as stored, only
 * triangulated); its vertex count must be the cache's point count. */
static int read_mesh_topology(const char *mesh, const char *cache, seq_t *s, df_error_t *err)
{
    int64_t nv = 0, nt = 0;
    if (ends_with(mesh, ".safetensors")) {
        df_st_t *st = NULL;
        int rc = df_st_open(mesh, NULL, &st, err);
        if (rc) return rc;
        const df_tensor_t *tr = df_st_find(st, "triangles");
        const df_tensor_t *fr = df_st_find(st, "frames"), *ps = df_st_find(st, "positions");
        if (!tr || tr->dtype != DF_DT_I32 || tr->ndim != 2 || tr->shape[1] != 3 ||
            !((fr && fr->ndim == 3) || (ps && ps->ndim == 2))) {
            df_st_close(&st);
            return df_error_set(err, DF_EFORMAT, "%s: --mesh wants `triangles` I32 [T,3] with "
                                "`frames` [F,N,3] or `positions` [N,3]", mesh);
        }
        nv = fr && fr->ndim == 3 ? fr->shape[1] : ps->shape[0];
        nt = tr->shape[0];
        if (nv == s->N) {
            s->tris = malloc(sizeof(uint32_t) * (nt * 3 + 1));
            if (!s->tris) { df_st_close(&st); return df_error_set(err, DF_ENOMEM, "out of memory"); }
            const int32_t *ti = tr->data;
            for (int64_t q = 0; q < 3 * nt; q++) {
                if (ti[q] < 0 || ti[q] >= nv) {
                    df_st_close(&st);
                    return df_error_set(err, DF_EINVAL, "%s: triangle %lld references vertex %d "
                                        "of %lld", mesh, (long long)(q / 3), ti[q], (long long)nv);
                }
                s->tris[q] = (uint32_t)ti[q];
            }
        }
        df_st_close(&st);
    } else {
        const struct aiScene *sc = aiImportFile(mesh, aiProcess_Triangulate);
        if (!sc || !sc->mRootNode)
            return df_error_set(err, DF_EFORMAT, "%s: assimp: %s", mesh, aiGetErrorString());
        struct aiMatrix4x4 id;
        aiIdentityMatrix4(&id);
        collect_node(sc, sc->mRootNode, id, NULL, &nv, NULL, &nt, 1);
        if (nv == s->N) {
            float *pos = malloc(sizeof(float) * (nv * 3 + 1));
            s->tris = malloc(sizeof(uint32_t) * (nt * 3 + 1));
            if (!pos || !s->tris) {
                free(pos);
                aiReleaseImport(sc);
                return df_error_set(err, DF_ENOMEM, "out of memory");
            }
            nv = nt = 0;
            collect_node(sc, sc->mRootNode, id, pos, &nv, s->tris, &nt, 0);
            free(pos);
        }
        aiReleaseImport(sc);
    }
    if (nv != s->N)
        return df_error_set(err, DF_EINVAL, "%s has %lld points but the mesh %s has %lld "
                            "vertices: a cache needs the mesh it was written from (same vertex "
                            "order)", cache, (long long)s->N, mesh, (long long)nv);
    s->T = nt;
    return DF_OK;
}

static int read_cache(const char *path, double fps, const char *mesh, seq_t *s, df_error_t *err)
{
    df__cache_t c;
    int rc = df__cache_read(path, fps, &c, err);
    if (rc) return rc;
    s->F = c.F;
    s->N = c.N;
    s->frames = c.frames;
    s->times = c.times;
    snprintf(s->source, sizeof s->source, "%s%s", c.source, mesh ? " + mesh" : ", no triangles");
    if (mesh) return read_mesh_topology(mesh, path, s, err);
    s->T = 0;
    s->tris = malloc(sizeof(uint32_t));
    return s->tris ? DF_OK : df_error_set(err, DF_ENOMEM, "out of memory");
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

/* ------------------------------------------------------------ threads */

typedef struct pool {
    int T;
} pool_t;
typedef struct job {
    df_range_body_cb body;
    void *arg;
    int64_t i0, i1;
    int worker;
} job_t;
static void *job_run(void *a)
{
    job_t *j = a;
    j->body(j->arg, j->i0, j->i1, j->worker);
    return NULL;
}
static void pool_for(void *user, int64_t n, df_range_body_cb body, void *arg)
{
    pool_t *p = user;
    int T = p->T;
    if (n < 2 * T) T = 1;
    job_t jobs[64];
    pthread_t th[64];
    int started[64] = {0};
    for (int t = 0; t < T; t++)
        jobs[t] = (job_t){body, arg, n * t / T, n * (t + 1) / T, t};
    for (int t = 1; t < T; t++) started[t] = !pthread_create(&th[t], NULL, job_run, &jobs[t]);
    job_run(&jobs[0]);
    for (int t = 1; t < T; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else job_run(&jobs[t]); /* could not start a thread: run here */
    }
}

static void progress(void *user, const df_decompose_progress_t *p)
{
    if (p->iteration == 0)
        fprintf(stderr, "decompose: init        ERMS %.4f%% of diag   %.2fs\n", 100 * p->erms,
                p->seconds);
    else
        fprintf(stderr,
                "decompose: iter %3d/%-3d ERMS %.4f%% of diag   weights %.3fs transforms %.3fs   "
                "elapsed %.2fs  ETA %.1fs\n",
                p->iteration, p->max_iterations, 100 * p->erms, p->weight_seconds,
                p->transform_seconds, p->seconds, p->eta_seconds);
}

/* 99th percentile of the angle (degrees) between unit normals a and b
 * [F,N,3], over the vertices where both are defined. */
static double p99_angle(int64_t n, const float *a, const float *b)
{
    float *ang = malloc(sizeof(float) * (n + 1));
    if (!ang) return NAN;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = a + 3 * i, *y = b + 3 * i;
        double la = x[0] * x[0] + x[1] * x[1] + x[2] * x[2], lb = y[0] * y[0] + y[1] * y[1] + y[2] * y[2];
        if (!(la > 0.5 && lb > 0.5)) continue;
        double d = (x[0] * y[0] + x[1] * y[1] + x[2] * y[2]) / sqrt(la * lb);
        ang[m++] = (float)(acos(fmax(-1, fmin(1, d))) * 180 / M_PI);
    }
    double r = NAN;
    if (m > 0) {
        int64_t k = (int64_t)floor(0.99 * (double)(m - 1)); /* nth_element by partial sort */
        int64_t lo = 0, hi = m - 1;
        while (lo < hi) {
            float piv = ang[(lo + hi) / 2];
            int64_t i = lo, j = hi;
            while (i <= j) {
                while (ang[i] < piv) i++;
                while (ang[j] > piv) j--;
                if (i <= j) { float t = ang[i]; ang[i] = ang[j]; ang[j] = t; i++; j--; }
            }
            if (k <= j) hi = j;
            else if (k >= i) lo = i;
            else break;
        }
        r = ang[k];
    }
    free(ang);
    return r;
}

/* Normal error of the fit: skinned normals (df_decompose_reconstruct_normals
 * of the rest normals) and normals recomputed from the fitted positions,
 * each against normals recomputed from the input frames (p99, degrees). */
static void normal_stats(const seq_t *s, const df_decompose_result_t *r, const float *fit,
                         double *skinned, double *recomputed)
{
    *skinned = *recomputed = NAN;
    if (s->T == 0) return;
    const int64_t N = s->N, F = s->F;
    float *rn = malloc(sizeof(float) * N * 3), *sk = malloc(sizeof(float) * F * N * 3);
    float *tr = malloc(sizeof(float) * F * N * 3), *fr = malloc(sizeof(float) * F * N * 3);
    if (rn && sk && tr && fr) {
        df_decompose_vertex_normals(N, r->rest, s->T, s->tris, rn);
        df_decompose_reconstruct_normals(r, rn, sk);
        for (int64_t p = 0; p < F; p++) {
            df_decompose_vertex_normals(N, s->frames + p * N * 3, s->T, s->tris, tr + p * N * 3);
            df_decompose_vertex_normals(N, fit + p * N * 3, s->T, s->tris, fr + p * N * 3);
        }
        *skinned = p99_angle(F * N, sk, tr);
        *recomputed = p99_angle(F * N, fr, tr);
    }
    free(rn); free(sk); free(tr); free(fr);
}

/* ------------------------------------------------------------ main */

int cmd_decompose(int argc, char **argv)
{
    const char *input = NULL, *repo = NULL, *name = NULL, *clip = NULL, *mjson = NULL,
               *frames_arg = NULL, *save_seq = NULL, *glb = NULL, *skel_arg = NULL,
               *mesh = NULL;
    df_decompose_opts_t o;
    df_decompose_opts_default(&o);
    int threads = 1, quiet = 0, model_rest = 0, k_given = 0, seq_only = 0;
    const char *init_arg = NULL, *init_weights = NULL;
    double fps = 0;
    if (argc > 1 && !strcmp(argv[1], "train-init")) return df__decompose_train_init(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(a, "--bones") && more) o.n_bones = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--transforms") && more) {
            o.transforms = df_decompose_transforms_parse(argv[++i]);
            if (o.transforms < 0) {
                fprintf(stderr, "deform decompose: --transforms wants rigid, trs or affine, not '%s'\n",
                        argv[i]);
                return 2;
            }
        }
        else if (!strcmp(a, "--transform-sweeps") && more) o.transform_sweeps = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--max-influences") && more) {
            o.max_influences = (int)strtol(argv[++i], &end, 10);
            k_given = 1;
        }
        else if (!strcmp(a, "--export-glb") && more) glb = argv[++i];
        else if (!strcmp(a, "--mesh") && more) mesh = argv[++i];
        else if (!strcmp(a, "--skeleton") && more) skel_arg = argv[++i];
        else if (!strcmp(a, "--iters") && more) o.max_iterations = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--threads") && more) threads = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--tol") && more) o.tol = strtod(argv[++i], &end);
        else if (!strcmp(a, "--weld-tol") && more) o.weld_tol = strtod(argv[++i], &end);
        else if (!strcmp(a, "--fps") && more) fps = strtod(argv[++i], &end);
        else if (!strcmp(a, "--no-weld")) o.weld = 0;
        else if (!strcmp(a, "--reseed") && more) o.reseed_every = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--candidates") && more) o.n_candidates = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--soft-convexity") && more) o.sum_penalty = strtod(argv[++i], &end);
        else if (!strcmp(a, "--model-rest")) model_rest = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--sequence-only")) seq_only = 1;
        else if (!strcmp(a, "--init") && more) init_arg = argv[++i];
        else if (!strcmp(a, "--init-weights") && more) init_weights = argv[++i];
        else if (!strcmp(a, "--init-rounds") && more) o.init_iterations = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--clip") && more) clip = argv[++i];
        else if (!strcmp(a, "--frames") && more) frames_arg = argv[++i];
        else if (!strcmp(a, "--repository") && more) repo = argv[++i];
        else if (!strcmp(a, "--name") && more) name = argv[++i];
        else if (!strcmp(a, "--metrics-json") && more) mjson = argv[++i];
        else if (!strcmp(a, "--save-sequence") && more) save_seq = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "deform decompose: unknown option '%s'\n", a); return usage(); }
        else if (!input) input = a;
        else { fprintf(stderr, "deform decompose: unexpected argument '%s'\n", a); return usage(); }
        if (end && *end) {
            fprintf(stderr, "deform decompose: %s: not a number: '%s'\n", a, argv[i]);
            return 2;
        }
    }
    if (!input || ((!repo || !name) && !seq_only)) return usage();
    if (seq_only && !save_seq) {
        fprintf(stderr, "deform decompose: --sequence-only needs --save-sequence FILE\n");
        return 2;
    }
    if (init_arg) {
        if (!strcmp(init_arg, "cluster")) o.init = DF_DECOMPOSE_INIT_CLUSTER;
        else if (!strcmp(init_arg, "network")) o.init = DF_DECOMPOSE_INIT_NETWORK;
        else {
            fprintf(stderr, "deform decompose: --init wants cluster or network, not '%s'\n", init_arg);
            return 2;
        }
    }
    if (!init_weights && o.init == DF_DECOMPOSE_INIT_NETWORK && !seq_only) {
        fprintf(stderr, "deform decompose: --init network needs --init-weights FILE (`make "
                        "decompose-init-weights` trains one: docs/decompose.md)\n");
        return 2;
    }
    if (init_weights && o.init != DF_DECOMPOSE_INIT_NETWORK) {
        fprintf(stderr, "deform decompose: --init-weights is for --init network\n");
        return 2;
    }
    if (o.init_iterations < 0 || o.init_iterations > 1000) {
        fprintf(stderr, "deform decompose: --init-rounds must be 0..1000\n");
        return 2;
    }
    int hierarchy = o.transforms != DF_DECOMPOSE_AFFINE; /* a skeleton unless affine */
    if (skel_arg) {
        if (!strcmp(skel_arg, "tree")) hierarchy = 1;
        else if (!strcmp(skel_arg, "flat")) hierarchy = 0;
        else {
            fprintf(stderr, "deform decompose: --skeleton wants tree or flat, not '%s'\n", skel_arg);
            return 2;
        }
        if (hierarchy && o.transforms == DF_DECOMPOSE_AFFINE) {
            fprintf(stderr, "deform decompose: --skeleton tree needs --transforms rigid or trs "
                            "(affine bones shear and reflect: no joint can play them)\n");
            return 2;
        }
    }
    if (glb && o.transforms == DF_DECOMPOSE_AFFINE) {
        fprintf(stderr, "deform decompose: --export-glb needs --transforms rigid or trs (glTF "
                        "animates translation, rotation and scale, not shear or reflection)\n");
        return 2;
    }
    if (mesh && !ends_with(input, ".mdd") && !ends_with(input, ".pc2")) {
        fprintf(stderr, "deform decompose: --mesh gives the triangles of a point cache (.mdd, "
                        ".pc2); '%s' brings its own\n", input);
        return 2;
    }
    if (glb && !k_given) o.max_influences = 4; /* what engines and three.js skin with */
    if (seq_only && !o.n_bones) o.n_bones = 1; /* no fit */
    if (o.n_bones < 1) { fprintf(stderr, "deform decompose: --bones B (>= 1) is required\n"); return 2; }
    if (threads < 1 || threads > 64) { fprintf(stderr, "deform decompose: --threads must be 1..64\n"); return 2; }
    if (fps < 0 || !isfinite(fps)) { fprintf(stderr, "deform decompose: --fps must be > 0\n"); return 2; }
    if (name && (strchr(name, '/') || !name[0] || name[0] == '.')) {
        fprintf(stderr, "deform decompose: bad model name '%s'\n", name);
        return 2;
    }
    (void)df_kind_rigged;

    df_error_t err = {0};
    seq_t s = {0};
    int rc = DF_OK;
    char tmpdir[64] = "";
    struct stat sb;
    df_model_t *m = NULL;
    char mpath[PATH_MAX + 64] = "", character[128] = "";
    if (ends_with(input, ".safetensors") && stat(input, &sb) == 0 && S_ISREG(sb.st_mode)) {
        df_st_t *st = NULL;
        rc = df_st_open(input, NULL, &st, &err);
        if (!rc && df_st_find(st, "frames")) rc = read_raw(input, st, &s, &err);
        else if (!rc) rc = df__tool_open_model(input, &m, mpath, sizeof mpath, &err);
        df_st_close(&st);
    } else if (stat(input, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char cfg[PATH_MAX];
        snprintf(cfg, sizeof cfg, "%s/config.json", input);
        if (stat(cfg, &sb) == 0) rc = df__tool_open_model(input, &m, mpath, sizeof mpath, &err);
        else rc = read_meshdir(input, &s, &err);
    } else if (ends_with(input, ".md2")) {
        rc = read_md2(input, &s, &err);
    } else if (ends_with(input, ".md3")) {
        df__md3_t m3;
        rc = df__md3_read(input, fps, &m3, &err);
        if (!rc) {
            s.F = m3.F; s.N = m3.N; s.T = m3.T;
            s.frames = m3.frames; s.tris = m3.tris; s.times = m3.times;
            snprintf(s.source, sizeof s.source, "%s", m3.source);
        }
    } else if (ends_with(input, ".mdd") || ends_with(input, ".pc2")) {
        rc = read_cache(input, fps, mesh, &s, &err);
    } else if (stat(input, &sb) == 0) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/deform-decompose-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            rc = df_error_set(&err, DF_EIO, "mkdtemp: %s", strerror(errno));
            tmpdir[0] = 0;
        } else {
            char *iargv[] = {"import", (char *)input, "--repository", tmpdir, "--name", "src", NULL};
            fflush(stdout);
            if (cmd_import(6, iargv) != 0)
                rc = df_error_set(&err, DF_EFORMAT, "%s: import failed (see above)", input);
            else {
                char p[PATH_MAX];
                snprintf(p, sizeof p, "%s/src", tmpdir);
                rc = df__tool_open_model(p, &m, mpath, sizeof mpath, &err);
            }
        }
    } else {
        rc = df_error_set(&err, DF_ENOTFOUND, "%s: %s", input, strerror(errno));
    }
    if (!rc && m) rc = read_model(m, clip, fps, model_rest, &s, &err);
    if (!rc && m && save_seq && mpath[0]) read_labels(mpath, &s);
    if (m) snprintf(character, sizeof character, "%s", df_model_name(m));
    df_model_unref(&m);
    if (tmpdir[0]) nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    if (rc) {
        fprintf(stderr, "deform decompose: %s\n", err.msg);
        seq_free(&s);
        return 1;
    }
    if (frames_arg) { /* python slice a:b */
        long a = 0, b = s.F;
        const char *colon = strchr(frames_arg, ':');
        if (!colon) { fprintf(stderr, "deform decompose: --frames wants a:b\n"); seq_free(&s); return 2; }
        if (colon != frames_arg) a = strtol(frames_arg, NULL, 10);
        if (colon[1]) b = strtol(colon + 1, NULL, 10);
        if (a < 0) a += s.F;
        if (b < 0) b += s.F;
        if (a < 0) a = 0;
        if (b > s.F) b = s.F;
        if (b < a) b = a;
        memmove(s.frames, s.frames + a * s.N * 3, sizeof(float) * (b - a) * s.N * 3);
        memmove(s.times, s.times + a, sizeof(float) * (b - a));
        s.F = b - a;
    }
    if (!quiet && !seq_only)
        fprintf(stderr, "decompose: %s: %lld frames x %lld vertices, %lld triangles; %d bones, "
                        "<= %d influences, %d thread(s)\n", s.source, (long long)s.F,
                (long long)s.N, (long long)s.T, o.n_bones, o.max_influences, threads);

    if (save_seq) { /* the sequence as read, in the documented raw format */
        df_st_writer_t *w = df_st_writer_new();
        int32_t *ti = malloc(sizeof(int32_t) * (s.T * 3 + 1));
        rc = w && ti ? DF_OK : DF_ENOMEM;
        for (int64_t q = 0; q < 3 * s.T && ti; q++) ti[q] = (int32_t)s.tris[q];
        int64_t fs[3] = {s.F, s.N, 3}, ts[2] = {s.T, 3}, ms[1] = {s.F};
        if (!rc) rc = df_st_writer_add(w, "frames", DF_DT_F32, 3, fs, s.frames);
        if (!rc) rc = df_st_writer_add(w, "triangles", DF_DT_I32, 2, ts, ti);
        if (!rc) rc = df_st_writer_add(w, "times", DF_DT_F32, 1, ms, s.times);
        if (!rc && s.rest) rc = df_st_writer_add(w, "rest", DF_DT_F32, 2, (int64_t[]){s.N, 3}, s.rest);
        if (!rc && s.bones) rc = df_st_writer_add(w, "bones", DF_DT_I32, 1, (int64_t[]){s.N}, s.bones);
        if (!rc && s.bone_names) rc = df_st_writer_meta(w, "bone_names", s.bone_names);
        /* the model's name unless its import was temporary: the asset's file name */
        if (!rc && tmpdir[0]) {
            const char *b = strrchr(input, '/');
            snprintf(character, sizeof character, "%s", b ? b + 1 : input);
            char *dot = strrchr(character, '.');
            if (dot && dot != character) *dot = 0;
        }
        if (!rc && character[0]) rc = df_st_writer_meta(w, "character", character);
        if (!rc && s.clip[0]) rc = df_st_writer_meta(w, "clip", s.clip);
        if (!rc) rc = df_st_writer_save(w, save_seq, &err);
        else df_error_set(&err, rc, "%s: cannot build the sequence file", save_seq);
        df_st_writer_free(&w);
        free(ti);
        if (rc) {
            fprintf(stderr, "deform decompose: %s\n", err.msg);
            seq_free(&s);
            return 1;
        }
        if (seq_only) {
            printf("sequence: %s (%lld frames x %lld vertices%s)\n", save_seq, (long long)s.F,
                   (long long)s.N, s.bones ? ", bones" : "");
            seq_free(&s);
            return 0;
        }
    }
    df_decompose_net_t *net = NULL;
    if (o.init == DF_DECOMPOSE_INIT_NETWORK) {
        if (df_decompose_net_load(init_weights, &net, &err)) {
            fprintf(stderr, "deform decompose: --init network: %s\n", err.msg);
            seq_free(&s);
            return 1;
        }
        o.init_net = net;
    }
    pool_t pool = {threads};
    openblas_set_num_threads(1); /* the pool owns the cores; core runs GEMMs per block */
    if (threads > 1) {
        o.parallel_for = pool_for;
        o.parallel_user = &pool;
        o.n_workers = threads;
    }
    if (!quiet) o.progress = progress;
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris, .rest = s.rest};
    df_decompose_result_t *r = NULL;
    rc = df_decompose_fit(&in, &o, NULL, &r, &err);
    df_decompose_net_free(&net);
    if (rc) {
        fprintf(stderr, "deform decompose: %s\n", err.msg);
        seq_free(&s);
        return 1;
    }

    /* write REPO/NAME/<v>/model.safetensors (and the glb) */
    df_decompose_skeleton_t *sk = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);
    int64_t v = df__tool_latest_version(dir) + 1;
    snprintf(path, sizeof path, "%s/%lld", dir, (long long)v);
    rc = df__tool_mkdirs(path, &err);
    if (!rc) {
        snprintf(path, sizeof path, "%s/%lld/model.safetensors", dir, (long long)v);
        if (o.transforms == DF_DECOMPOSE_AFFINE)
            rc = df_decompose_write_model(r, s.T, s.tris, s.times, clip ? clip : "fit", path, &err);
        else
            rc = df_decompose_skeleton(r, s.T, s.tris, hierarchy, &sk, &err);
        if (!rc && sk)
            rc = df_decompose_write_rig(r, sk, s.T, s.tris, s.times, clip ? clip : "fit", path, &err);
        if (!rc && sk && glb)
            rc = df__glb_write_rig(glb, r, sk, s.T, s.tris, s.times, clip ? clip : "fit", &err);
    }
    if (!rc) {
        char cp[PATH_MAX + 16];
        snprintf(cp, sizeof cp, "%s/config.json", dir);
        if (stat(cp, &sb) != 0) {
            FILE *f = fopen(cp, "w");
            if (!f || fprintf(f, "{\n  \"kind\": \"rigged\",\n  \"parameters\": {},\n"
                                 "  \"max_batch_size\": 32,\n  \"max_queue_delay_us\": 500\n}\n") < 0)
                rc = df_error_set(&err, DF_EIO, "%s: cannot write", cp);
            if (f && fclose(f)) rc = df_error_set(&err, DF_EIO, "%s: cannot write", cp);
        }
    }
    float *fit = malloc(sizeof(float) * s.F * s.N * 3), *replay = NULL;
    df_decompose_metrics_t mt = {0};
    double n_skinned = NAN, n_recomputed = NAN;
    double replay_err = -1;
    if (!rc && !fit) rc = df_error_set(&err, DF_ENOMEM, "out of memory");
    if (!rc) {
        df_decompose_reconstruct(r, fit);
        /* "% of diag" against the rest pose the fit used (frame 0 when none) */
        rc = df_decompose_metrics(s.F, s.N, s.frames, fit, s.T, s.tris,
                                  s.rest ? bbox_diag(s.rest, s.N) : 0, &mt, &err);
        if (!rc) normal_stats(&s, r, fit, &n_skinned, &n_recomputed);
    }
    /* replay the written model's clip through the rigged kind */
    if (!rc) rc = df_model_open(path, "rigged", NULL, NULL, &m, &err);
    if (!rc) {
        seq_t rs = {0};
        rc = read_model(m, clip ? clip : "fit", 0, 0, &rs, &err);
        if (!rc && rs.F == s.F) {
            replay_err = 0;
            for (int64_t q = 0; q < s.F * s.N * 3; q++)
                replay_err = fmax(replay_err, fabs((double)rs.frames[q] - fit[q]));
        }
        seq_free(&rs);
        df_model_unref(&m);
    }
    if (rc) {
        fprintf(stderr, "deform decompose: %s\n", err.msg);
    } else {
        const df_decompose_stats_t *st = &r->stats;
        printf("decompose: %s/%lld: %d %s bones, %d influences, %d iterations, %lld -> %lld welded "
               "vertices, %.3f s (init %.3f, weights %.3f, transforms %.3f)\n",
               name, (long long)v, r->n_bones, df_decompose_transforms_name(r->transforms),
               r->n_influences, st->iterations,
               (long long)s.N, (long long)st->n_welded, st->total_seconds, st->init_seconds,
               st->weight_seconds, st->transform_seconds);
        if (st->reseeds_tried)
            printf("re-seeding: %d of %d moves kept\n", st->reseeds_accepted, st->reseeds_tried);
        printf("metrics: DisPer %.4g  ERMS %.6g (%.4g%% of diag)  MaxAvgDist %.6g (%.4g%% of "
               "diag)  NormDistort %.4g  diag %.6g\n", mt.disper, mt.erms, mt.erms_pct,
               mt.max_avg_dist, mt.max_avg_dist_pct, mt.norm_distort, mt.diag);
        if (sk) {
            double dmax = 0, dsum = 0;
            int depth_max = 0;
            for (int k = 0; k < sk->n_joints; k++) {
                dmax = fmax(dmax, sk->dislocation[k]);
                dsum += sk->dislocation[k];
                int dep = 0;
                for (int q = k; sk->parent[q] >= 0; q = sk->parent[q]) dep++;
                depth_max = dep > depth_max ? dep : depth_max;
            }
            printf("skeleton: %d joints (%s), root joint0 = bone %d, depth %d; joint "
                   "dislocation mean %.3g%% max %.3g%% of diag\n", sk->n_joints,
                   hierarchy ? "tree" : "flat", sk->bone[0], depth_max,
                   100 * dsum / sk->n_joints / mt.diag, 100 * dmax / mt.diag);
        }
        if (glb) printf("glb: %s\n", glb);
        if (s.T > 0)
            printf("normals: 99th percentile angle to the input's %.3g deg skinned, %.3g deg "
                   "recomputed from the fitted positions\n", n_skinned, n_recomputed);
        printf("replay: max |model clip - fit| = %.3g (%s)\n", replay_err, path);
        if (mjson) {
            FILE *f = fopen(mjson, "w");
            if (f) {
                fprintf(f, "{\"init\": \"%s\", \"erms_init_pct\": %.6g, ",
                        o.init == DF_DECOMPOSE_INIT_NETWORK ? "network" : "cluster",
                        100 * st->erms_init);
                fprintf(f, "\"transforms\": \"%s\", \"normal_p99_deg\": %.6g, "
                           "\"normal_recomputed_p99_deg\": %.6g, ",
                        df_decompose_transforms_name(r->transforms),
                        isfinite(n_skinned) ? n_skinned : -1, isfinite(n_recomputed) ? n_recomputed : -1);
                fprintf(f, "\"frames\": %lld, \"vertices\": %lld, \"welded\": %lld, \"bones\": %d, "
                           "\"influences\": %d, \"iterations\": %d, \"seconds\": %.4f, "
                           "\"init_seconds\": %.4f, \"weight_seconds\": %.4f, "
                           "\"transform_seconds\": %.4f, \"disper\": %.6g, \"erms\": %.6g, "
                           "\"erms_pct\": %.6g, \"max_avg_dist\": %.6g, \"max_avg_dist_pct\": %.6g, "
                           "\"norm_distort\": %.6g, \"diag\": %.6g, \"replay_max_err\": %.6g, "
                           "\"erms_history_pct\": [",
                        (long long)s.F, (long long)s.N, (long long)st->n_welded, r->n_bones,
                        r->n_influences, st->iterations, st->total_seconds, st->init_seconds,
                        st->weight_seconds, st->transform_seconds, mt.disper, mt.erms,
                        mt.erms_pct, mt.max_avg_dist, mt.max_avg_dist_pct, mt.norm_distort,
                        mt.diag, replay_err);
                for (int it = 0; it <= st->iterations; it++)
                    fprintf(f, "%s%.6g", it ? ", " : "", 100 * st->erms_history[it]);
                fprintf(f, "], \"weight_seconds_history\": [");
                for (int it = 0; it <= st->iterations; it++)
                    fprintf(f, "%s%.5f", it ? ", " : "", st->weight_seconds_history[it]);
                fprintf(f, "], \"transform_seconds_history\": [");
                for (int it = 0; it <= st->iterations; it++)
                    fprintf(f, "%s%.5f", it ? ", " : "", st->transform_seconds_history[it]);
                fprintf(f, "]}\n");
                if (fclose(f)) rc = DF_EIO;
            } else {
                rc = DF_EIO;
            }
            if (rc) fprintf(stderr, "deform decompose: %s: cannot write\n", mjson);
        }
    }
    free(fit);
    free(replay);
    df_decompose_skeleton_free(&sk);
    df_decompose_result_free(&r);
    seq_free(&s);
    return rc ? 1 : 0;
}

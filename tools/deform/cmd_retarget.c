/* cmd_retarget.c — `deform retarget`: build and apply `retarget` models
 * (facial performance retargeting, docs/retarget.md).
 *
 *   deform retarget build --source SRC --target TGT --repository R --name NAME
 *       [--map names|clone|clone-nn] [--names loose|exact] [--input-names NAMES.txt]
 *       [--poses SRC_POSES.npy TGT_POSES.npy] [--lambda L] [--markers INDICES.txt|all] [--marker-lambda L]
 *       [--rigid-weights stable|uniform] [--bounds unit|nonneg|none]
 *       [--clamp unit|none] [--align-iterations N] [--marker-rest NEUTRAL.npy]
 *       [--adapt FRAMES.npy --adapt-weights W.npy [--adapt-lambda A]
 *        [--adapt-iterations N] [--adapt-lag auto|N]]
 *   deform retarget apply MODEL (--weights W.npy | --markers X.npy)
 *       [--batch B] [--params JSON] [--positions P.npy] [--target-weights T.npy]
 *       [--solved S.npy] [--head-pose H.npy] [--input NAME=FILE.npy]...
 *   deform retarget keyframes --source SRC --markers INDICES.txt
 *       --performance X.npy [--components N] --out BASIS.safetensors
 *       [--frames-out FRAMES.txt]
 *   deform retarget transfer --source SRC --target MESH --source-landmarks A.txt
 *       --target-landmarks B.txt [--method clone|naive|naive-point|dt] [--local-frames warp|normals|similarity|off]
 *       [--refine N] [--align auto|rigid|none] [--correspondence-out C.npy]
 *       [--pieces skin|still|rigid] [--piece N=skin|still|rigid]... --out RIG.safetensors
 *
 * DESIGN
 * SRC and TGT are `rigged` models (a .safetensors file, REPO/NAME or a
 * version directory) with morph targets. The retarget file is the target's
 * own tensors (clips dropped) plus the mapping: retarget/E, the cloning
 * matrix [Mt,Ms] (target weights = E source weights), and with --markers
 * the source's marker rest positions and marker deltas (the source rig at
 * the given vertex indices). The maps:
 *   names     parallel blendshapes: E_ij = 1 when target shape i and source
 *             control j have the same name; the names that match nothing are
 *             listed (the baseline of Lewis & Pighin's survey);
 *   clone     the global cloning matrix from p >= m corresponding poses:
 *             E = argmin |E V - W|^2 + lambda |E|^2 (V: source weights of
 *             the poses, W: target weights), each row a Cholesky solve of
 *             (V V' + lambda I);
 *   clone-nn  the same with E >= 0 (each row a bounded solve with the
 *             kind's own active-set solver).
 * lambda is relative: lambda * mean(diag(V V')) is added (default 1e-3);
 * --marker-lambda likewise for the markers' Gram matrix (default 1e-3).
 * --marker-rest calibrates the markers to an actor: the rest markers become
 * the actor's neutral frames ([k,3] or [F,k,3]), each aligned rigidly onto
 * the source's rest markers (the alignment weights) and averaged; the
 * marker deltas stay the source rig's unless --adapt refits them to the
 * actor's frames (adapt(): Choe & Ko's alternation of solve and refit).
 * `apply` evaluates a model frame by frame in batches (what a render-farm
 * node does) and writes the outputs as .npy.
 */
#include "base/clock.h"
#include "df.h"
#include "import.h"
#include "math/laplacian.h"
#include "retarget/retarget.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, "deform retarget: " __VA_ARGS__); fputc('\n', stderr); goto out; } while (0)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: deform retarget build --source SRC --target TGT --repository R --name NAME\n"
            "           [--map names|clone|clone-nn] [--names loose|exact] [--input-names NAMES.txt]\n"
            "           [--poses SRC_POSES.npy TGT_POSES.npy]\n"
            "           [--lambda L] [--markers INDICES.txt|all] [--marker-lambda L]\n"
            "           [--rigid-weights stable|uniform] [--bounds unit|nonneg|none]\n"
            "           [--clamp unit|none] [--align-iterations N] [--marker-rest NEUTRAL.npy]\n"
            "           [--adapt FRAMES.npy --adapt-weights W.npy [--adapt-lambda A]\n"
            "            [--adapt-iterations N] [--adapt-lag auto|N]]\n"
            "       deform retarget apply MODEL (--weights W.npy | --markers X.npy) [--batch B]\n"
            "           [--params JSON] [--positions P.npy] [--target-weights T.npy] [--solved S.npy]\n"
            "           [--head-pose H.npy] [--input NAME=FILE.npy]...\n"
            "       deform retarget keyframes --source SRC --markers INDICES.txt --performance X.npy\n"
            "           [--components N] --out BASIS.safetensors [--frames-out FRAMES.txt]\n"
            "       deform retarget transfer --source SRC --target MESH --source-landmarks A.txt\n"
            "           --target-landmarks B.txt [--method clone|naive|naive-point|dt] [--local-frames warp|normals|similarity|off]\n"
            "           (or --source-landmark-points P.txt, --target-landmark-points Q.txt)\n"
            "           [--refine N] [--align auto|rigid|none] [--correspondence-out C.npy]\n"
            "           [--pieces skin|still|rigid] [--piece N=skin|still|rigid]...\n"
            "           --out RIG.safetensors\n");
}

/* ---------------------------------------------------------------- rigs */

typedef struct rig {
    df_st_t *st;
    char path[4096];
    int64_t N, M;
    const float *pos;    /* [N,3] borrowed from st */
    const float *deltas; /* [M,N,3] */
    char **names;
    size_t n_names;
} rig_t;

static void rig_free(rig_t *r)
{
    for (size_t i = 0; i < r->n_names; i++) free(r->names[i]);
    free(r->names);
    df_st_close(&r->st);
}

static int rig_open(const char *arg, const char *role, rig_t *r, df_error_t *err)
{
    memset(r, 0, sizeof *r);
    df_model_t *m = NULL;
    int rc = df__tool_open_model(arg, &m, r->path, sizeof r->path, err);
    if (rc) return rc;
    int rigged = !strcmp(df_model_kind(m), "rigged");
    df_model_unref(&m);
    if (!rigged) return df_error_set(err, DF_EINVAL, "%s %s is not a rigged model", role, arg);
    if ((rc = df_st_open(r->path, NULL, &r->st, err))) return rc;
    const df_tensor_t *tp, *td;
    int64_t s2[2] = {-1, 3}, s3[3] = {-1, -1, 3};
    if ((rc = df_st_require(r->st, "positions", DF_DT_F32, 2, s2, 0, &tp, err)) ||
        (rc = df_st_require(r->st, "morph_deltas", DF_DT_F32, 3, s3, 1, &td, err)))
        return rc;
    if (!td) return df_error_set(err, DF_EINVAL, "%s %s has no morph targets", role, arg);
    r->N = tp->shape[0];
    r->M = td->shape[0];
    r->pos = tp->data;
    r->deltas = td->data;
    const char *js = df_st_meta(r->st, "morph_names");
    if (!js) return df_error_set(err, DF_EINVAL, "%s %s has no morph_names", role, arg);
    if ((rc = df__json_string_array(js, (size_t)r->M, &r->names, &r->n_names, err))) return rc;
    return DF_OK;
}

static int read_indices(const char *path, int32_t **out, int64_t *n, df_error_t *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return df_error_set(err, DF_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 64, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    long x;
    int rc = DF_OK;
    while (v && fscanf(f, "%ld", &x) == 1) {
        if (x < 0 || x > INT32_MAX) {
            rc = df_error_set(err, DF_EINVAL, "%s: index %ld out of range", path, x);
            break;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[k++] = (int32_t)x;
    }
    if (!rc && !feof(f))
        rc = df_error_set(err, DF_EINVAL, "%s: not a list of integers (entry %zu)", path, k);
    fclose(f);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *n = (int64_t)k;
    return DF_OK;
}

/* Landmarks given as points (--source-landmark-points, --target-landmark-points): a
 * text file of "x y z" lines in the mesh's coordinates ('#' starts a comment), each
 * snapped to the mesh's nearest vertex; prints how far the farthest moved, in the mesh's
 * units and its mean edges, and warns beyond 2 mean edges (points in another frame or
 * unit than the mesh's). *out [*n] OUT: the vertices. */
static int landmark_points(const char *path, const char *side, const float *pos, int64_t nv,
                           const int32_t *tri, int64_t nt, int32_t **out, int64_t *n,
                           df_error_t *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return df_error_set(err, DF_EIO, "%s: %s", path, strerror(errno));
    char line[4096];
    int64_t k = 0, cap = 64, ln = 0;
    int32_t *v = malloc(sizeof *v * (size_t)cap);
    double far = 0;
    int64_t far_k = -1;
    int rc = DF_OK;
    while (v && fgets(line, sizeof line, f)) {
        ln++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = df_error_set(err, DF_EINVAL, "%s: line %lld: longer than %zu bytes", path,
                              (long long)ln, sizeof line - 2);
            break;
        }
        char *h = strchr(line, '#');
        if (h) *h = 0;
        double x[3];
        char tail[2];
        int got = sscanf(line, "%lf %lf %lf %1s", &x[0], &x[1], &x[2], tail);
        if (got <= 0) continue; /* empty or a comment */
        if (got != 3 || !isfinite(x[0]) || !isfinite(x[1]) || !isfinite(x[2])) {
            rc = df_error_set(err, DF_EINVAL, "%s: line %lld: want three numbers x y z (a point "
                                              "in the mesh's coordinates)", path, (long long)ln);
            break;
        }
        if (k == cap) {
            int32_t *nvp = realloc(v, sizeof *v * (size_t)(cap *= 2));
            if (!nvp) break;
            v = nvp;
        }
        int64_t best = -1;
        double bd = INFINITY;
        for (int64_t i = 0; i < nv; i++) {
            double d2 = 0;
            for (int d = 0; d < 3; d++) d2 += (pos[3 * i + d] - x[d]) * (pos[3 * i + d] - x[d]);
            if (d2 < bd) bd = d2, best = i;
        }
        if (best < 0) {
            rc = df_error_set(err, DF_EINVAL, "%s: the %s mesh has no vertices", path, side);
            break;
        }
        if (sqrt(bd) > far || far_k < 0) far = sqrt(bd), far_k = k;
        v[k++] = (int32_t)best;
    }
    if (!v && !rc) rc = df_error_set(err, DF_ENOMEM, "out of memory");
    fclose(f);
    if (rc) {
        free(v);
        return rc;
    }
    double edge = 0;
    for (int64_t t = 0; t < nt; t++)
        for (int c = 0; c < 3; c++) {
            const float *a = pos + 3 * (int64_t)tri[3 * t + c], *b = pos + 3 * (int64_t)tri[3 * t + (c + 1) % 3];
            edge += sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) +
                         (a[2] - b[2]) * (a[2] - b[2]));
        }
    edge = nt > 0 ? edge / (double)(3 * nt) : 0;
    if (k > 0)
        printf("%s landmarks: %lld points snapped to their nearest vertices, the farthest by "
               "%.3g (%.2f mean edges, landmark %lld)\n", side, (long long)k, far,
               edge > 0 ? far / edge : 0.0, (long long)far_k);
    if (k > 0 && edge > 0 && far > 2 * edge)
        fprintf(stderr, "deform retarget transfer: warning: %s landmark %lld is %.1f mean edges "
                        "from the nearest vertex: points in another frame or unit than the "
                        "mesh's?\n", side, (long long)far_k, far / edge);
    *out = v;
    *n = k;
    return DF_OK;
}

/* names, whitespace separated (a tracker's controls, --input-names): each of 1..DF_NAME_MAX-1
 * bytes, no repeats, at most `max` */
static int read_names(const char *path, int64_t max, char ***out, int64_t *n, df_error_t *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return df_error_set(err, DF_EIO, "%s: cannot open: %s", path, strerror(errno));
    char **v = NULL, tok[DF_NAME_MAX + 1];
    int64_t k = 0, cap = 0;
    int rc = DF_OK;
    char fmt[32];
    snprintf(fmt, sizeof fmt, "%%%ds", DF_NAME_MAX);
    while (!rc && fscanf(f, fmt, tok) == 1) {
        if (strlen(tok) >= DF_NAME_MAX) {
            rc = df_error_set(err, DF_EINVAL, "%s: name %lld is longer than %d bytes", path,
                              (long long)k, DF_NAME_MAX - 1);
            break;
        }
        for (int64_t j = 0; j < k && !rc; j++)
            if (!strcmp(v[j], tok))
                rc = df_error_set(err, DF_EINVAL, "%s: '%s' appears twice (names %lld and %lld)",
                                  path, tok, (long long)j, (long long)k);
        if (!rc && k >= max)
            rc = df_error_set(err, DF_ELIMIT, "%s: more than %lld names", path, (long long)max);
        if (!rc && k == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) rc = df_error_set(err, DF_ENOMEM, "out of memory");
            else v = nv;
        }
        if (!rc && !(v[k] = strdup(tok))) rc = df_error_set(err, DF_ENOMEM, "out of memory");
        if (!rc) k++;
    }
    fclose(f);
    if (!rc && k == 0) rc = df_error_set(err, DF_EINVAL, "%s: no names", path);
    if (rc) {
        for (int64_t j = 0; j < k; j++) free(v[j]);
        free(v);
        return rc;
    }
    *out = v;
    *n = k;
    return DF_OK;
}

/* -------------------------------------------------------------- the maps */

/* A control name's spelling-free key: `base` (lower case, without a namespace
 * prefix and without separators) and its side (0 none, 1 left, 2 right), so that
 * eyeBlink_L, eyeBlinkLeft, EyeBlinkLeft, eyeBlink.L, eye_blink_l and
 * blendShape1.eyeBlinkLeft or head:eyeBlinkLeft are one key. The side is a trailing
 * "left"/"right" or a separated "l"/"r" (_L, .L, -L, " L"); both rigs' names get
 * the same treatment, so a shape named after a direction (jawLeft) keys alike in
 * both. */
static void name_key(const char *name, char *base, size_t cap, int *side)
{
    char low[256];
    size_t n = 0;
    for (const char *c = name; *c && n + 1 < sizeof low; c++)
        low[n++] = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    low[n] = 0;
    const char *p = low;
    const char *col = strrchr(p, ':'); /* namespace (Maya) */
    if (col && col[1]) p = col + 1;
    const char *dot = strrchr(p, '.'); /* blendShape1.<name>, unless .l / .r */
    if (dot && dot[1] && strcmp(dot + 1, "l") && strcmp(dot + 1, "r") &&
        strcmp(dot + 1, "left") && strcmp(dot + 1, "right"))
        p = dot + 1;
    size_t len = strlen(p);
    *side = 0;
    static const struct { const char *suf; int side; } sides[] = {
        {"left", 1}, {"right", 2}, {"_l", 1}, {".l", 1}, {"-l", 1}, {" l", 1},
        {"_r", 2}, {".r", 2}, {"-r", 2}, {" r", 2}};
    for (size_t k = 0; k < sizeof sides / sizeof sides[0]; k++) {
        size_t ls = strlen(sides[k].suf);
        if (len > ls && !strcmp(p + len - ls, sides[k].suf)) {
            *side = sides[k].side;
            len -= ls;
            break;
        }
    }
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++)
        if (p[i] != '_' && p[i] != '.' && p[i] != '-' && p[i] != ' ') base[o++] = p[i];
    base[o] = 0;
}

/* Parallel blendshapes: E_ij = 1 where target shape i and source control j have the
 * same name; with loose matching, target shapes left unmatched then take (1) the source
 * control whose name differs only in spelling (name_key), or (2) by side: a side-less
 * target shape (browInnerUp) the mean of the source's left and right ones, a one-sided
 * target shape (browInnerUp_L) the side-less source control. */
typedef struct names {
    char *const *names;
    int64_t M;
} names_t;

/* what the report calls the two sides */
typedef struct names_words {
    const char *head;      /* "names" */
    const char *t_plural;  /* "target shapes" */
    const char *s_unused;  /* "source controls with no target shape" */
    const char *t_unused;  /* "target shapes with no source control" */
} names_words_t;

static const names_words_t target_words = {"names", "target shapes",
                                           "source controls with no target shape:",
                                           "target shapes with no source control:"};
static const names_words_t input_words = {"input names", "source controls",
                                          "input controls with no source control:",
                                          "source controls with no input control (held at 0):"};

static int map_names(const names_t *s, const names_t *t, int loose, const names_words_t *wd,
                     float *E)
{
    int64_t matched = 0, n_exact = 0, n_spell = 0, n_side = 0;
    memset(E, 0, (size_t)(t->M * s->M) * sizeof(float));
    char (*sb)[256] = malloc(sizeof *sb * (size_t)(s->M ? s->M : 1)), tb[256];
    int *ss = malloc(sizeof(int) * (size_t)(s->M ? s->M : 1)), ts;
    if (!sb || !ss) {
        free(sb), free(ss);
        return -1;
    }
    for (int64_t j = 0; j < s->M; j++) name_key(s->names[j], sb[j], sizeof sb[j], &ss[j]);
    for (int64_t i = 0; i < t->M; i++) {
        float *e = E + i * s->M;
        int hit = 0;
        for (int64_t j = 0; j < s->M; j++)
            if (!strcmp(t->names[i], s->names[j])) e[j] = 1.0f, hit = 1;
        if (hit) {
            n_exact++;
        } else if (loose) {
            name_key(t->names[i], tb, sizeof tb, &ts);
            for (int64_t j = 0; j < s->M; j++)
                if (ss[j] == ts && !strcmp(sb[j], tb)) e[j] = 1.0f, hit = 1;
            if (hit) {
                n_spell++;
            } else {
                int64_t lr[2] = {-1, -1}, none = -1;
                for (int64_t j = 0; j < s->M; j++) {
                    if (strcmp(sb[j], tb)) continue;
                    if (ss[j] == 0) none = j;
                    else lr[ss[j] - 1] = j;
                }
                if (ts == 0 && lr[0] >= 0 && lr[1] >= 0)
                    e[lr[0]] = e[lr[1]] = 0.5f, hit = 1;
                else if (ts != 0 && none >= 0)
                    e[none] = 1.0f, hit = 1;
                n_side += hit;
            }
        }
        matched += hit;
    }
    free(sb), free(ss);
    printf("%s: %lld of %lld %s matched by name", wd->head, (long long)matched,
           (long long)t->M, wd->t_plural);
    if (n_spell || n_side)
        printf(" (%lld exact, %lld spelt otherwise, %lld by side)", (long long)n_exact,
               (long long)n_spell, (long long)n_side);
    printf("\n");
    for (int64_t i = 0; i < t->M; i++) {
        int many = 0;
        for (int64_t j = 0; j < s->M; j++) many += E[i * s->M + j] != 0;
        if (many && (n_spell || n_side)) {
            int exact = 0;
            for (int64_t j = 0; j < s->M; j++)
                exact |= E[i * s->M + j] != 0 && !strcmp(t->names[i], s->names[j]);
            if (exact) continue;
            printf("  %s <-", t->names[i]);
            for (int64_t j = 0; j < s->M; j++)
                if (E[i * s->M + j] != 0)
                    printf(" %s%s", E[i * s->M + j] != 1.0f ? "0.5 " : "", s->names[j]);
            printf("\n");
        }
    }
    int any = 0;
    for (int64_t j = 0; j < s->M; j++) {
        int hit = 0;
        for (int64_t i = 0; i < t->M; i++) hit |= E[i * s->M + j] != 0;
        if (!hit) printf("%s%s %s", any ? "" : "  ", any ? "" : wd->s_unused, s->names[j]);
        any += !hit;
    }
    if (any) printf("\n");
    any = 0;
    for (int64_t i = 0; i < t->M; i++) {
        int hit = 0;
        for (int64_t j = 0; j < s->M; j++) hit |= E[i * s->M + j] != 0;
        if (!hit) printf("%s%s %s", any ? "" : "  ", any ? "" : wd->t_unused, t->names[i]);
        any += !hit;
    }
    if (any) printf("\n");
    return (int)matched;
}

/* E [Mt,Ms] from poses V [p,Ms], W [p,Mt]: rows of E solve
 * (V'V + lambda I) e = V' w  (nonneg: bounded solve with e >= 0). */
static int map_clone(const float *V, const float *W, int64_t p, int64_t Ms, int64_t Mt,
                     double lambda_rel, int nonneg, const char *const *src_names, float *E,
                     df_error_t *err)
{
    double *G = calloc((size_t)(Ms * Ms), sizeof(double));
    double *L = calloc((size_t)(Ms * Ms), sizeof(double));
    double *b = malloc((size_t)Ms * sizeof(double)), *e = malloc((size_t)Ms * sizeof(double));
    double *work = malloc(df__rt_bvls_work(Ms) * sizeof(double));
    double *tolv = malloc((size_t)Ms * sizeof(double));
    int rc = DF_OK;
    if (!G || !L || !b || !e || !work || !tolv) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t k = 0; k < p; k++)
        for (int64_t i = 0; i < Ms; i++)
            for (int64_t j = 0; j < Ms; j++) G[i * Ms + j] += (double)V[k * Ms + i] * V[k * Ms + j];
    double md = 0;
    for (int64_t i = 0; i < Ms; i++) md += G[i * Ms + i] / (double)Ms;
    if (!(md > 0)) {
        rc = df_error_set(err, DF_EINVAL, "the source poses are all zero");
        goto done;
    }
    for (int64_t i = 0; i < Ms; i++) G[i * Ms + i] += lambda_rel * md;
    int64_t bad = df__rt_cholesky(G, Ms, 1e-12 * md, L);
    if (bad) {
        rc = df_error_set(err, DF_ENUMERIC,
                          "the corresponding poses do not span the source controls: control "
                          "%lld ('%s') is never used or only as a combination of the others; "
                          "add poses or raise --lambda",
                          (long long)(bad - 1), src_names[bad - 1]);
        goto done;
    }
    for (int64_t i = 0; i < Ms; i++) tolv[i] = 1e-12 * sqrt(G[i * Ms + i]) * sqrt(md);
    double res = 0, tot = 0;
    for (int64_t t = 0; t < Mt; t++) {
        for (int64_t i = 0; i < Ms; i++) {
            double s = 0;
            for (int64_t k = 0; k < p; k++) s += (double)V[k * Ms + i] * W[k * Mt + t];
            b[i] = s;
        }
        df__rt_bvls(G, L, b, Ms, nonneg ? DF_RT_NONNEG : DF_RT_NONE, tolv, NULL, e, work);
        for (int64_t i = 0; i < Ms; i++) E[t * Ms + i] = (float)e[i];
        for (int64_t k = 0; k < p; k++) {
            double s = 0;
            for (int64_t i = 0; i < Ms; i++) s += e[i] * V[k * Ms + i];
            res += (s - W[k * Mt + t]) * (s - W[k * Mt + t]);
            tot += (double)W[k * Mt + t] * W[k * Mt + t];
        }
    }
    printf("%s: E [%lld x %lld] from %lld poses, lambda %g x %.4g; pose fit: rms %.4g "
           "(relative %.3g)\n",
           nonneg ? "clone-nn" : "clone", (long long)Mt, (long long)Ms, (long long)p,
           lambda_rel, md, sqrt(res / (double)(p * Mt)), tot > 0 ? sqrt(res / tot) : 0.0);
done:
    free(G);
    free(L);
    free(b);
    free(e);
    free(work);
    free(tolv);
    return rc;
}

/* Alignment weights of K markers (vertex indices mk of a rig with M shapes
 * of N vertices): w_i = 1 / (m_i^2 + e^2), m_i the largest displacement of
 * marker i over the shapes, e a tenth of the median m_i. */
static int stable_weights(const float *deltas, int64_t N, int64_t M, const int32_t *mk,
                          int64_t K, float *w)
{
    float *mot = malloc((size_t)K * sizeof(float)), *srt = malloc((size_t)K * sizeof(float));
    if (!mot || !srt) {
        free(mot);
        free(srt);
        return DF_ENOMEM;
    }
    for (int64_t i = 0; i < K; i++) {
        double mx = 0;
        for (int64_t j = 0; j < M; j++) {
            const float *dd = deltas + (j * N + mk[i]) * 3;
            mx = fmax(mx, (double)dd[0] * dd[0] + (double)dd[1] * dd[1] + (double)dd[2] * dd[2]);
        }
        mot[i] = srt[i] = (float)sqrt(mx);
    }
    for (int64_t i = 1; i < K; i++) /* insertion sort: K is small */
        for (int64_t j = i; j > 0 && srt[j - 1] > srt[j]; j--) {
            float t = srt[j];
            srt[j] = srt[j - 1];
            srt[j - 1] = t;
        }
    double e = 0.1 * srt[K / 2] + 1e-12;
    for (int64_t i = 0; i < K; i++) w[i] = (float)(1.0 / ((double)mot[i] * mot[i] + e * e));
    free(mot);
    free(srt);
    return DF_OK;
}

/* ----------------------------------------------------------------- build */

/* what goes into a retarget file besides the two rigs */
typedef struct spec {
    const float *E;            /* [Mt,Ms] */
    const int32_t *mk;         /* [K] marker vertices, K = 0: no markers */
    int64_t K;
    double mlambda;            /* absolute */
    const float *rigid_w;      /* [K] or NULL */
    const float *rest;         /* [K,3] or NULL: the source's */
    int64_t rest_frames;
    const float *A;            /* [Ms,K,3] or NULL: the source's deltas */
    int64_t adapt_frames;      /* > 0: A adapted to that many frames */
    int adapt_iters;
    const char *map, *bounds, *clamp;
    int iters;
    const float *S;            /* [Ms,Mi] or NULL: source weights from the input's */
    char *const *in_names;     /* [Mi] the input's controls (--input-names) */
    int64_t Mi;
} spec_t;

/* names as a JSON array of strings (NULL: out of memory) */
static char *json_names(char *const *names, int64_t n)
{
    size_t cap = 16;
    for (int64_t j = 0; j < n; j++) cap += strlen(names[j]) * 2 + 4;
    char *js = malloc(cap);
    if (!js) return NULL;
    size_t o = 0;
    js[o++] = '[';
    for (int64_t j = 0; j < n; j++) {
        o += (size_t)snprintf(js + o, cap - o, "%s\"", j ? "," : "");
        for (const char *c = names[j]; *c; c++) {
            if (*c == '"' || *c == '\\') js[o++] = '\\';
            js[o++] = *c;
        }
        js[o++] = '"';
    }
    js[o++] = ']';
    js[o] = 0;
    return js;
}

/* the retarget file at `file`: the target's tensors and the mapping */
static int assemble(const char *file, const rig_t *src, const rig_t *tgt, const spec_t *sp,
                    df_error_t *err)
{
    const float *E = sp->E, *rigid_w = sp->rigid_w, *rest_in = sp->rest;
    const int32_t *mk = sp->mk;
    const int64_t K = sp->K;
    int rc = 0;
    df_st_writer_t *w = df_st_writer_new();
    float *rest = NULL, *A = NULL;
    char *js = NULL;
    if (!w) return df_error_set(err, DF_ENOMEM, "out of memory");
    for (size_t i = 0; i < df_st_count(tgt->st) && !rc; i++) {
        const df_tensor_t *t = df_st_at(tgt->st, i);
        if (!strncmp(t->name, "clip/", 5) || !strncmp(t->name, "retarget/", 9)) continue;
        rc = df_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    static const char *const keep[] = {"morph_names", "joint_names", "skinning"};
    for (size_t i = 0; i < 3 && !rc; i++) {
        const char *v = df_st_meta(tgt->st, keep[i]);
        if (v) rc = df_st_writer_meta(w, keep[i], v);
    }
    js = json_names(src->names, src->M);
    if (!js) rc = DF_ENOMEM;
    char num[64];
    int64_t se[2] = {tgt->M, src->M};
    if (!rc) rc = df_st_writer_meta(w, "kind", "retarget");
    if (!rc) rc = df_st_writer_meta(w, "format_version", "1");
    if (!rc) rc = df_st_writer_meta(w, "source_names", js);
    if (!rc) rc = df_st_writer_meta(w, "map", sp->map);
    if (!rc) rc = df_st_writer_meta(w, "bounds", sp->bounds);
    if (!rc) rc = df_st_writer_meta(w, "clamp_target", sp->clamp);
    snprintf(num, sizeof num, "%d", sp->iters);
    if (!rc) rc = df_st_writer_meta(w, "align_iterations", num);
    if (!rc) rc = df_st_writer_add(w, "retarget/E", DF_DT_F32, 2, se, E);
    if (!rc && sp->S) {
        char *ji = json_names(sp->in_names, sp->Mi);
        int64_t ss[2] = {src->M, sp->Mi};
        rc = ji ? df_st_writer_meta(w, "input_names", ji) : DF_ENOMEM;
        if (!rc) rc = df_st_writer_add(w, "retarget/S", DF_DT_F32, 2, ss, sp->S);
        free(ji);
    }
    if (!rc && K > 0) {
        rest = malloc((size_t)K * 3 * sizeof(float));
        A = malloc((size_t)(src->M * K * 3) * sizeof(float));
        if (!rest || !A) rc = DF_ENOMEM;
        for (int64_t i = 0; !rc && i < K; i++) {
            memcpy(rest + 3 * i, rest_in ? rest_in + 3 * i : src->pos + 3 * (int64_t)mk[i],
                   3 * sizeof(float));
            for (int64_t j = 0; j < src->M; j++)
                memcpy(A + (j * K + i) * 3,
                       sp->A ? sp->A + (j * K + i) * 3 : src->deltas + (j * src->N + mk[i]) * 3,
                       3 * sizeof(float));
        }
        int64_t sr[2] = {K, 3}, sa[3] = {src->M, K, 3}, s1[1] = {K};
        snprintf(num, sizeof num, "%.9g", sp->mlambda);
        if (!rc) rc = df_st_writer_meta(w, "marker_lambda", num);
        if (!rc) rc = df_st_writer_add(w, "retarget/marker_rest", DF_DT_F32, 2, sr, rest);
        snprintf(num, sizeof num, "%lld", (long long)sp->rest_frames);
        if (!rc && rest_in && sp->rest_frames > 0) rc = df_st_writer_meta(w, "marker_rest_frames", num);
        snprintf(num, sizeof num, "%lld", (long long)sp->adapt_frames);
        if (!rc && sp->adapt_frames > 0) rc = df_st_writer_meta(w, "marker_adapt_frames", num);
        snprintf(num, sizeof num, "%d", sp->adapt_iters);
        if (!rc && sp->adapt_frames > 0) rc = df_st_writer_meta(w, "marker_adapt_iterations", num);
        if (!rc) rc = df_st_writer_add(w, "retarget/marker_deltas", DF_DT_F32, 3, sa, A);
        if (!rc && rigid_w) rc = df_st_writer_add(w, "retarget/marker_weights", DF_DT_F32, 1, s1, rigid_w);
    }
    if (rc) rc = df_error_set(err, rc, "cannot assemble the model file");
    if (!rc) rc = df_st_writer_save(w, file, err);
    df_st_writer_free(&w);
    free(js);
    free(rest);
    free(A);
    return rc;
}

static int write_model(const char *repo, const char *name, const rig_t *src, const rig_t *tgt,
                       const spec_t *sp, df_error_t *err)
{
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);
    int64_t ver = df__tool_latest_version(dir) + 1;
    snprintf(path, sizeof path, "%s/%lld", dir, (long long)ver);
    int rc = df__tool_mkdirs(path, err);
    if (rc) return rc;
    char file[4400];
    snprintf(file, sizeof file, "%s/model.safetensors", path);
    if ((rc = assemble(file, src, tgt, sp, err))) {
        remove(file);
        rmdir(path);
        return rc;
    }
    /* config.json */
    char cfg[4400];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat sb;
    if (stat(cfg, &sb) != 0) {
        FILE *f = fopen(cfg, "w");
        if (!f) return df_error_set(err, DF_EIO, "%s: %s", cfg, strerror(errno));
        fprintf(f, "{\"kind\": \"retarget\", \"max_batch_size\": 64}\n");
        if (fclose(f)) return df_error_set(err, DF_EIO, "%s: write failed", cfg);
    }
    /* load it back as the daemon would; a file that does not load is
     * removed (with its version directory) */
    df_model_t *m = NULL;
    rc = df_model_open(file, "retarget", NULL, NULL, &m, err);
    if (rc) {
        remove(file);
        rmdir(path);
        return rc;
    }
    printf("wrote %s (retarget: %lld source controls -> %lld target shapes, %lld target "
           "vertices%s)\n",
           file, (long long)src->M, (long long)tgt->M, (long long)df_model_n_vertices(m),
           sp->K ? ", markers input" : "");
    df_model_unref(&m);
    return DF_OK;
}

/* the actor's rest markers: the neutral frames of `path` ([K,3] or [F,K,3])
 * each aligned rigidly onto the source's rest markers (weights w, NULL: all
 * 1) and averaged. Prints how far they are from the source's. NULL on
 * error (err set); *X holds the file's data (the caller frees it). */
static float *calibrate(const char *path, const rig_t *src, const int32_t *mk, int64_t K,
                        const float *w, float **X, int64_t *nf, df_error_t *err)
{
    int nd;
    int64_t sh[DF_MAX_DIMS];
    if (df_npy_read_f32(path, &nd, sh, X, err)) return NULL;
    int64_t F = nd == 3 ? sh[0] : 1;
    if (!(nd == 2 || nd == 3) || sh[nd - 2] != K || sh[nd - 1] != 3 || F < 1) {
        df_error_set(err, DF_EINVAL, "%s: want the actor's neutral markers [%lld,3] or "
                                      "[frames,%lld,3] (the --markers count)", path,
                     (long long)K, (long long)K);
        return NULL;
    }
    float *y = malloc(sizeof(float) * (size_t)(3 * K));
    float *wt = malloc(sizeof(float) * (size_t)K); /* the weights, summing to 1 */
    double *acc = calloc((size_t)(3 * K), sizeof(double));
    float *rest = malloc(sizeof(float) * (size_t)(3 * K));
    if (!y || !acc || !rest || !wt) {
        df_error_set(err, DF_ENOMEM, "out of memory");
        goto fail;
    }
    double sw = 0;
    for (int64_t i = 0; i < K; i++) sw += w ? w[i] : 1.0;
    for (int64_t i = 0; i < K; i++) wt[i] = (float)((w ? w[i] : 1.0) / sw);
    for (int64_t i = 0; i < K; i++) memcpy(y + 3 * i, src->pos + 3 * (int64_t)mk[i], 3 * sizeof(float));
    for (int64_t f = 0; f < F; f++) {
        const float *x = *X + f * 3 * K;
        for (int64_t i = 0; i < 3 * K; i++)
            if (!isfinite(x[i])) {
                df_error_set(err, DF_EINVAL, "%s: frame %lld, marker %lld is not finite", path,
                             (long long)f, (long long)(i / 3));
                goto fail;
            }
        double R[9], t[3], sx = 0, sy = 0;
        if (df__rt_rigid_align(x, y, wt, K, 1, R, t)) {
            df_error_set(err, DF_EINVAL, "%s: frame %lld: the markers are collinear or "
                                          "coincide", path, (long long)f);
            goto fail;
        }
        df__rt_degenerate(x, wt, K, &sx);
        df__rt_degenerate(y, wt, K, &sy);
        if (!(sx >= 0.5 * sy && sx <= 2.0 * sy)) { /* as the served markers (kind_retarget.c) */
            df_error_set(err, DF_EINVAL, "%s: frame %lld: the markers span %.3g x the source's "
                                          "rest markers (allowed 0.5..2): another unit than the "
                                          "source rig's?", path, (long long)f, sx / sy);
            goto fail;
        }
        for (int64_t i = 0; i < K; i++)
            for (int a = 0; a < 3; a++)
                acc[3 * i + a] += R[3 * a] * x[3 * i] + R[3 * a + 1] * x[3 * i + 1] +
                                  R[3 * a + 2] * x[3 * i + 2] + t[a];
    }
    double ss = 0, mx = 0;
    for (int64_t i = 0; i < K; i++) {
        double d2 = 0;
        for (int a = 0; a < 3; a++) {
            rest[3 * i + a] = (float)(acc[3 * i + a] / (double)F);
            double e = rest[3 * i + a] - y[3 * i + a];
            d2 += e * e;
        }
        ss += d2, mx = fmax(mx, sqrt(d2));
    }
    printf("marker rest: %lld neutral frame%s of the actor; distance to the source's rest "
           "markers rms %.4g, max %.4g (model units)\n", (long long)F, F == 1 ? "" : "s",
           sqrt(ss / (double)K), mx);
    *nf = F;
    free(y), free(acc), free(wt);
    return rest;
fail:
    free(y), free(acc), free(wt), free(rest);
    return NULL;
}

/* Choe & Ko's adaptation of the marker basis to the actor (--adapt): the
 * actor's frames X [F,K,3] of a range of motion with known weights Wk
 * [F,Ms] (each control on cue) are aligned by the model as it stands (the
 * served code: rigid alignment and its correction, the frame's head_pose),
 * brought into the rest frame by its inverse, and the basis is refitted to
 * them (df__rt_adapt_basis, mu = alpha x the mean of diag(W'W)). The
 * actor's timing: the weights are first shifted by the lag (lag_auto: the
 * one in -30..30 frames whose refit leaves the least residual; an actor
 * follows a cue a few frames late). The head
 * poses of the refitted basis are better, so T rounds. (Refitting to the
 * model's own solved weights instead, without known ones, drifted: the
 * basis and the weights trade errors, docs/retarget.md.) The residual is
 * printed before each refit and after the last. *A_out: the adapted
 * [Ms,K,3]. */
/* rms over frames and markers of d_f - A w_f - c (c NULL: 0) */
static double residual(const float *D, const float *W, const float *A, const float *c, int64_t F,
                       int64_t n3, int64_t Ms)
{
    double ss = 0;
    for (int64_t f = 0; f < F; f++) {
        const float *d = D + f * n3, *w = W + f * Ms;
        for (int64_t k = 0; k < n3; k++) {
            double v = (double)d[k] - (c ? c[k] : 0.0);
            for (int64_t j = 0; j < Ms; j++) v -= (double)A[j * n3 + k] * w[j];
            ss += v * v;
        }
    }
    return sqrt(ss / (double)(F * (n3 / 3)));
}

/* Wl[f] = W[f - L] (zeros outside): weights L frames later */
static void shift_frames(const float *W, int64_t F, int64_t Ms, int L, float *Wl)
{
    for (int64_t f = 0; f < F; f++) {
        const int64_t g = f - L;
        if (g >= 0 && g < F)
            memcpy(Wl + f * Ms, W + g * Ms, (size_t)Ms * sizeof(float));
        else
            memset(Wl + f * Ms, 0, (size_t)Ms * sizeof(float));
    }
}

enum { ADAPT_LAG_MAX = 30 };

static int adapt(const char *xpath, const char *wpath, double alpha, int T, int lag_auto, int lag,
                 const rig_t *src, const rig_t *tgt, spec_t *sp, float **A_out, float **rest_out,
                 int64_t *F_out, df_error_t *err)
{
    const int64_t K = sp->K, n3 = 3 * K, Ms = src->M;
    int nd, rc = DF_OK;
    int64_t sh[DF_MAX_DIMS];
    float *X = NULL, *Wk = NULL, *H = NULL, *D = NULL, *A = NULL, *A0 = NULL;
    float *rest = NULL, *c = NULL;
    const float *rest_in = sp->rest;
    const float **pin = NULL;
    float **ph = NULL;
    df_model_t *m = NULL;
    df_scratch_t *scr = NULL;
    char tmp[4200] = "";
    if ((rc = df_npy_read_f32(xpath, &nd, sh, &X, err))) goto out;
    if (nd != 3 || sh[1] != K || sh[2] != 3 || sh[0] < 1) {
        rc = df_error_set(err, DF_EINVAL, "%s: want the actor's markers [frames,%lld,3] (the "
                                          "--markers count)", xpath, (long long)K);
        goto out;
    }
    const int64_t F = sh[0];
    for (int64_t i = 0; i < F * n3; i++)
        if (!isfinite(X[i])) {
            rc = df_error_set(err, DF_EINVAL, "%s: frame %lld, marker %lld is not finite", xpath,
                              (long long)(i / n3), (long long)(i % n3 / 3));
            goto out;
        }
    if ((rc = df_npy_read_f32(wpath, &nd, sh, &Wk, err))) goto out;
    if (nd != 2 || sh[0] != F || sh[1] != Ms) {
        rc = df_error_set(err, DF_EINVAL, "%s: want the weights of the %lld --adapt frames "
                                          "[%lld,%lld]", wpath, (long long)F, (long long)F,
                          (long long)Ms);
        goto out;
    }
    for (int64_t i = 0; i < F * Ms; i++)
        if (!isfinite(Wk[i])) {
            rc = df_error_set(err, DF_EINVAL, "%s: frame %lld, control %lld is not finite",
                              wpath, (long long)(i / Ms), (long long)(i % Ms));
            goto out;
        }
    { /* the controls the range of motion leaves (nearly) still keep the source's columns */
        int any = 0;
        for (int64_t j = 0; j < Ms; j++) {
            float mx = 0.0f;
            for (int64_t f = 0; f < F; f++) mx = fmaxf(mx, fabsf(Wk[f * Ms + j]));
            if (mx >= 0.1f) continue;
            printf("%s%s", any++ ? ", " : "adapt: controls the frames do not move (max weight "
                                          "< 0.1; their displacements stay the source's): ",
                   src->names[j]);
        }
        if (any) printf("\n");
    }
    H = malloc(sizeof(float) * (size_t)(F * 12));
    D = malloc(sizeof(float) * (size_t)(F * n3));
    A = malloc(sizeof(float) * (size_t)(Ms * n3));
    A0 = malloc(sizeof(float) * (size_t)(Ms * n3));
    rest = malloc(sizeof(float) * (size_t)n3);
    c = malloc(sizeof(float) * (size_t)n3);
    pin = malloc(64 * sizeof *pin), ph = malloc(64 * sizeof *ph);
    scr = df_scratch_new();
    if (!H || !D || !A || !A0 || !rest || !c || !pin || !ph || !scr) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory (%lld frames)", (long long)F);
        goto out;
    }
    for (int64_t j = 0; j < Ms; j++)
        for (int64_t i = 0; i < K; i++)
            memcpy(A0 + j * n3 + 3 * i, src->deltas + (j * src->N + sp->mk[i]) * 3,
                   3 * sizeof(float));
    memcpy(A, A0, sizeof(float) * (size_t)(Ms * n3));
    for (int64_t i = 0; i < K; i++)
        memcpy(rest + 3 * i, rest_in ? rest_in + 3 * i : src->pos + 3 * (int64_t)sp->mk[i],
               3 * sizeof(float));
    const char *td = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/deform-adapt-XXXXXX", td && *td && strlen(td) < 4000 ? td : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = df_error_set(err, DF_EIO, "%s: %s", tmp, strerror(errno));
        tmp[0] = 0;
        goto out;
    }
    close(fd);
    const double t0 = df__now_s();
    double rms0 = 0, t_search = 0; /* the timing search's share of the elapsed time */
    for (int r = 0; r <= T; r++) {
        /* the model with the current basis, through the served code */
        sp->A = A;
        sp->rest = rest;
        if ((rc = assemble(tmp, src, tgt, sp, err))) goto out;
        df_model_unref(&m);
        if ((rc = df_model_open(tmp, "retarget", NULL, NULL, &m, err))) goto out;
        const int ii = df_model_find_input(m, "markers"), ih = df_model_find_output(m, "head_pose");
        for (int64_t f0 = 0; f0 < F; f0 += 64) {
            const int n = (int)(F - f0 < 64 ? F - f0 : 64);
            df_batch_t b;
            memset(&b, 0, sizeof b);
            b.n = n;
            for (int p = 0; p < n; p++) {
                pin[p] = X + (f0 + p) * n3;
                ph[p] = H + (f0 + p) * 12;
            }
            b.in[ii] = pin;
            b.out[ih] = ph; /* the head's pose alone: no positions evaluated */
            if ((rc = df_model_evaluate(m, &b, scr, err))) {
                char msg[sizeof err->msg];
                snprintf(msg, sizeof msg, "%s", err->msg);
                rc = df_error_set(err, rc, "%s: frames %lld..%lld: %s", xpath, (long long)f0,
                                  (long long)(f0 + n - 1), msg);
                goto out;
            }
        }
        /* into the rest frame: p = R'(x - t), d = p - rest */
        for (int64_t f = 0; f < F; f++) {
            const float *h = H + 12 * f, *x = X + f * n3;
            float *d = D + f * n3;
            for (int64_t i = 0; i < K; i++) {
                const double e[3] = {x[3 * i] - h[3], x[3 * i + 1] - h[7], x[3 * i + 2] - h[11]};
                const float *r0 = rest + 3 * i;
                for (int a = 0; a < 3; a++)
                    d[3 * i + a] = (float)(h[a] * e[0] + h[4 + a] * e[1] + h[8 + a] * e[2] - r0[a]);
            }
        }
        double tr = 0;
        for (int64_t i = 0; i < F * Ms; i++) tr += (double)Wk[i] * Wk[i];
        const double mu = alpha * fmax(tr / (double)Ms, 1e-12);
        if (r == 0 && (lag_auto || lag)) {
            /* the actor's timing: the shift of the weights whose refit
             * explains the frames best (or the one given) */
            float *Wl = malloc(sizeof(float) * (size_t)(F * Ms)),
                  *Al = malloc(sizeof(float) * (size_t)(Ms * n3));
            if (!Wl || !Al) {
                free(Wl), free(Al);
                rc = df_error_set(err, DF_ENOMEM, "out of memory");
                goto out;
            }
            int best = lag;
            double best_r = INFINITY, r_zero = NAN, last = df__now_s() - t0, tl0 = last;
            for (int L = lag_auto ? -ADAPT_LAG_MAX : lag; L <= (lag_auto ? ADAPT_LAG_MAX : lag); L++) {
                shift_frames(Wk, F, Ms, L, Wl);
                if ((rc = df__rt_adapt_basis(D, Wl, F, n3, Ms, A0, mu, Al, c, err))) {
                    free(Wl), free(Al);
                    goto out;
                }
                const double rr = residual(D, Wl, Al, c, F, n3, Ms);
                if (L == 0) r_zero = rr;
                if (rr < best_r) best_r = rr, best = L;
                const double el = df__now_s() - t0;
                if (lag_auto && el - last > 1.0 && L < ADAPT_LAG_MAX) { /* a long range of motion */
                    const double done = (double)(L + ADAPT_LAG_MAX + 1) / (2 * ADAPT_LAG_MAX + 1);
                    fprintf(stderr, "adapt: timing search %d/%d lags, elapsed %.1fs, ETA %.1fs\n",
                            L + ADAPT_LAG_MAX + 1, 2 * ADAPT_LAG_MAX + 1, el,
                            (el - tl0) * (1 - done) / done);
                    last = el;
                }
            }
            shift_frames(Wk, F, Ms, best, Wl);
            memcpy(Wk, Wl, sizeof(float) * (size_t)(F * Ms));
            t_search = df__now_s() - t0 - tl0;
            free(Wl), free(Al);
            if (lag_auto)
                printf("adapt: timing: the weights shifted by %+d frames explain the frames best "
                       "(refit residual rms %.4g; %.4g as given; searched -%d..%d)\n", best,
                       best_r, r_zero, ADAPT_LAG_MAX, ADAPT_LAG_MAX);
        }
        const double rms = residual(D, Wk, A, NULL, F, n3, Ms);
        if (r == 0) rms0 = rms;
        const double el = df__now_s() - t0;
        if (r == T) {
            printf("marker basis adapted to %lld frames of the actor in %d round%s: residual "
                   "rms %.4g -> %.4g (model units), %.1fs\n", (long long)F, T,
                   T == 1 ? "" : "s", rms0, rms, el);
            break;
        }
        fprintf(stderr, "adapt: round %d/%d, residual rms %.4g, elapsed %.1fs, ETA %.1fs\n",
                r + 1, T, rms, el, (el - t_search) / (r + 1) * (T + 1 - (r + 1)));
        if ((rc = df__rt_adapt_basis(D, Wk, F, n3, Ms, A0, mu, A, c, err))) goto out;
        for (int64_t k = 0; k < n3; k++) rest[k] += c[k];
    }
    *A_out = A, A = NULL;
    *rest_out = rest, rest = NULL;
    *F_out = F;
out:
    if (tmp[0]) remove(tmp);
    sp->A = NULL;
    sp->rest = rest_in;
    df_model_unref(&m);
    df_scratch_free(&scr);
    free(X), free(Wk), free(H), free(D), free(A), free(A0), free(rest), free(c);
    free(pin), free(ph);
    return rc;
}

static int cmd_build(int argc, char **argv)
{
    const char *src_arg = NULL, *tgt_arg = NULL, *repo = NULL, *name = NULL, *map = "names";
    const char *pv = NULL, *pw = NULL, *markers = NULL, *bounds = "unit", *clamp = "unit";
    const char *rigid = "stable", *mrest = NULL, *adapt_x = NULL, *adapt_w = NULL;
    double lambda = 1e-3, mlambda = 1e-3, adapt_lambda = 0.1;
    const char *adapt_lag = "auto", *match = "loose", *in_names_path = NULL;
    int iters = 1, adapt_iters = 5;
    char **in_names = NULL;
    int64_t Mi = 0;
    float *S = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--source") && more) src_arg = argv[++i];
        else if (!strcmp(a, "--target") && more) tgt_arg = argv[++i];
        else if (!strcmp(a, "--repository") && more) repo = argv[++i];
        else if (!strcmp(a, "--name") && more) name = argv[++i];
        else if (!strcmp(a, "--map") && more) map = argv[++i];
        else if (!strcmp(a, "--names") && more) match = argv[++i];
        else if (!strcmp(a, "--input-names") && more) in_names_path = argv[++i];
        else if (!strcmp(a, "--poses") && i + 2 < argc) { pv = argv[++i]; pw = argv[++i]; }
        else if (!strcmp(a, "--lambda") && more) lambda = atof(argv[++i]);
        else if (!strcmp(a, "--markers") && more) markers = argv[++i];
        else if (!strcmp(a, "--marker-lambda") && more) mlambda = atof(argv[++i]);
        else if (!strcmp(a, "--bounds") && more) bounds = argv[++i];
        else if (!strcmp(a, "--clamp") && more) clamp = argv[++i];
        else if (!strcmp(a, "--align-iterations") && more) iters = atoi(argv[++i]);
        else if (!strcmp(a, "--rigid-weights") && more) rigid = argv[++i];
        else if (!strcmp(a, "--marker-rest") && more) mrest = argv[++i];
        else if (!strcmp(a, "--adapt") && more) adapt_x = argv[++i];
        else if (!strcmp(a, "--adapt-weights") && more) adapt_w = argv[++i];
        else if (!strcmp(a, "--adapt-lambda") && more) adapt_lambda = atof(argv[++i]);
        else if (!strcmp(a, "--adapt-iterations") && more) adapt_iters = atoi(argv[++i]);
        else if (!strcmp(a, "--adapt-lag") && more) adapt_lag = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "deform retarget build: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!src_arg || !tgt_arg || !repo || !name) {
        fprintf(stderr, "deform retarget build: --source, --target, --repository and --name "
                        "are required\n");
        return 2;
    }
    int clone = !strcmp(map, "clone"), clone_nn = !strcmp(map, "clone-nn");
    if (!clone && !clone_nn && strcmp(map, "names")) {
        fprintf(stderr, "deform retarget build: --map must be names, clone or clone-nn\n");
        return 2;
    }
    if (strcmp(match, "loose") && strcmp(match, "exact")) {
        fprintf(stderr, "deform retarget build: --names must be loose or exact\n");
        return 2;
    }
    if ((clone || clone_nn) && !pv) {
        fprintf(stderr, "deform retarget build: --map %s needs --poses SRC_POSES.npy "
                        "TGT_POSES.npy\n", map);
        return 2;
    }
    if (strcmp(bounds, "unit") && strcmp(bounds, "nonneg") && strcmp(bounds, "none")) {
        fprintf(stderr, "deform retarget build: --bounds must be unit, nonneg or none\n");
        return 2;
    }
    if (strcmp(rigid, "stable") && strcmp(rigid, "uniform")) {
        fprintf(stderr, "deform retarget build: --rigid-weights must be stable or uniform\n");
        return 2;
    }
    if (strcmp(clamp, "unit") && strcmp(clamp, "none")) {
        fprintf(stderr, "deform retarget build: --clamp must be unit or none\n");
        return 2;
    }
    if (iters < 1 || iters > 10 || !(lambda >= 0) || !isfinite(lambda) || !(mlambda >= 0) ||
        !isfinite(mlambda)) {
        fprintf(stderr, "deform retarget build: --align-iterations must be 1..10, --lambda "
                        "and --marker-lambda finite and >= 0\n");
        return 2;
    }
    if (mrest && !markers) {
        fprintf(stderr, "deform retarget build: --marker-rest needs --markers\n");
        return 2;
    }
    if ((adapt_x && (!markers || !adapt_w)) || (adapt_w && !adapt_x)) {
        fprintf(stderr, "deform retarget build: --adapt FRAMES.npy needs --markers and "
                        "--adapt-weights W.npy (the frames' weights)\n");
        return 2;
    }
    if (adapt_iters < 1 || adapt_iters > 50 || !(adapt_lambda > 0) || !isfinite(adapt_lambda)) {
        fprintf(stderr, "deform retarget build: --adapt-iterations must be 1..50 and "
                        "--adapt-lambda finite and > 0\n");
        return 2;
    }
    int lag_auto = !strcmp(adapt_lag, "auto"), lag = 0;
    if (!lag_auto) {
        char *end;
        long v = strtol(adapt_lag, &end, 10);
        if (end == adapt_lag || *end || v < -1000 || v > 1000) {
            fprintf(stderr, "deform retarget build: --adapt-lag must be auto or a frame count "
                            "-1000..1000\n");
            return 2;
        }
        lag = (int)v;
    }
    df_error_t err = {0};
    rig_t src, tgt;
    memset(&src, 0, sizeof src);
    memset(&tgt, 0, sizeof tgt);
    float *E = NULL, *V = NULL, *W = NULL, *X = NULL, *rest = NULL, *Aad = NULL, *rad = NULL;
    int64_t nrest = 0;
    int32_t *mk = NULL;
    float *rigid_w = NULL;
    int64_t K = 0;
    int rc = 1;
    if (rig_open(src_arg, "source", &src, &err) || rig_open(tgt_arg, "target", &tgt, &err))
        DIE("%s", err.msg);
    E = calloc((size_t)(src.M * tgt.M), sizeof(float));
    if (!E) DIE("out of memory");
    if (!clone && !clone_nn) {
        const names_t sn = {src.names, src.M}, tn = {tgt.names, tgt.M};
        const int got = map_names(&sn, &tn, strcmp(match, "exact") != 0, &target_words, E);
        if (got < 0) DIE("out of memory");
        if (got == 0)
            DIE("no target shape has a source control's name: parallel blendshapes need "
                "matching names (use --map clone with corresponding poses)");
    } else {
        int nd;
        int64_t sv[DF_MAX_DIMS], sw[DF_MAX_DIMS];
        if (df_npy_read_f32(pv, &nd, sv, &V, &err)) DIE("%s", err.msg);
        if (nd != 2 || sv[1] != src.M)
            DIE("%s: want source poses [p,%lld] (one row per pose, one column per source "
                "control)", pv, (long long)src.M);
        if (df_npy_read_f32(pw, &nd, sw, &W, &err)) DIE("%s", err.msg);
        if (nd != 2 || sw[1] != tgt.M)
            DIE("%s: want target poses [p,%lld]", pw, (long long)tgt.M);
        if (sv[0] != sw[0])
            DIE("%lld source poses but %lld target poses", (long long)sv[0], (long long)sw[0]);
        if (sv[0] < src.M)
            DIE("%lld corresponding poses for %lld source controls: the cloning matrix needs "
                "p >= m poses", (long long)sv[0], (long long)src.M);
        if (map_clone(V, W, sv[0], src.M, tgt.M, lambda, clone_nn,
                      (const char *const *)src.names, E, &err))
            DIE("%s", err.msg);
    }
    if (markers && !strcmp(markers, "all")) { /* every vertex of the source is a marker */
        K = src.N;
        if (!(mk = malloc((size_t)K * sizeof *mk))) DIE("out of memory");
        for (int64_t i = 0; i < K; i++) mk[i] = (int32_t)i;
    } else if (markers && read_indices(markers, &mk, &K, &err)) {
        DIE("%s", err.msg);
    }
    if (markers) {
        if (K < 3) DIE("%s: %lld markers (need at least 3)", markers, (long long)K);
        for (int64_t i = 0; i < K; i++) {
            if (mk[i] >= src.N)
                DIE("%s: marker %lld is vertex %d, the source has %lld vertices", markers,
                    (long long)i, mk[i], (long long)src.N);
            for (int64_t j = 0; j < i; j++)
                if (mk[i] == mk[j])
                    DIE("%s: markers %lld and %lld are the same vertex %d (duplicated "
                        "landmark)", markers, (long long)j, (long long)i, mk[i]);
        }
        /* marker lambda relative to the mean diagonal of A'A */
        double md = 0;
        for (int64_t j = 0; j < src.M; j++)
            for (int64_t i = 0; i < K; i++)
                for (int d = 0; d < 3; d++) {
                    double x = src.deltas[(j * src.N + mk[i]) * 3 + d];
                    md += x * x / (double)src.M;
                }
        mlambda *= md;
        /* alignment weights: markers the expressions move least anchor the
         * head (nose bridge, eye corners, temples) */
        if (strcmp(rigid, "uniform")) {
            if (!(rigid_w = malloc((size_t)K * sizeof(float)))) DIE("out of memory");
            if (stable_weights(src.deltas, src.N, src.M, mk, K, rigid_w)) DIE("out of memory");
        }
    }
    if (mrest && !(rest = calibrate(mrest, &src, mk, K, rigid_w, &X, &nrest, &err)))
        DIE("%s", err.msg);
    spec_t sp = {.E = E, .mk = mk, .K = K, .mlambda = mlambda, .rigid_w = rigid_w,
                 .rest = rest, .rest_frames = nrest, .map = map, .bounds = bounds,
                 .clamp = clamp, .iters = iters};
    if (adapt_x) {
        if (adapt(adapt_x, adapt_w, adapt_lambda, adapt_iters, lag_auto, lag, &src, &tgt, &sp,
                  &Aad, &rad, &sp.adapt_frames, &err))
            DIE("%s", err.msg);
        sp.A = Aad;
        sp.rest = rad;
        sp.adapt_iters = adapt_iters;
    }
    if (in_names_path) { /* a tracker's controls onto the source's, by name */
        df_limits_t lim;
        df_limits_default(&lim);
        if (read_names(in_names_path, lim.max_morphs, &in_names, &Mi, &err)) DIE("%s", err.msg);
        if (!(S = calloc((size_t)(src.M * Mi), sizeof(float)))) DIE("out of memory");
        const names_t inn = {in_names, Mi}, sn = {src.names, src.M};
        const int got = map_names(&inn, &sn, strcmp(match, "exact") != 0, &input_words, S);
        if (got < 0) DIE("out of memory");
        if (got == 0)
            DIE("%s: no source control has one of these names: --input-names needs names "
                "the source's controls share (spelt otherwise or by side with --names loose)",
                in_names_path);
        sp.S = S, sp.in_names = in_names, sp.Mi = Mi;
    }
    if (write_model(repo, name, &src, &tgt, &sp, &err)) DIE("%s", err.msg);
    rc = 0;
out:
    for (int64_t i = 0; i < Mi; i++) free(in_names[i]);
    free(in_names);
    free(S);
    rig_free(&src);
    rig_free(&tgt);
    free(E);
    free(V);
    free(W);
    free(mk);
    free(rigid_w);
    free(X);
    free(rest);
    free(Aad);
    free(rad);
    return rc;
}

/* ----------------------------------------------------------------- apply */

/* the frames [F, ...] of model input idx from an .npy (float32 or float64),
 * *per values a frame; *F < 0: any frame count (set here), else it must be
 * that count. NULL with the reason in err */
static float *read_frames(const df_model_t *m, int idx, const char *path, int64_t *F,
                          int64_t *per, df_error_t *err)
{
    const df_io_desc_t *d = df_model_input(m, idx);
    *per = 1;
    for (int e = 0; e < d->ndim; e++) *per *= d->shape[e];
    char want[96] = "";
    for (int e = 0; e < d->ndim; e++)
        snprintf(want + strlen(want), sizeof want - strlen(want), ",%lld", (long long)d->shape[e]);
    int nd;
    int64_t sh[DF_MAX_DIMS];
    float *x = NULL;
    if (df_npy_read_f32(path, &nd, sh, &x, err)) return NULL;
    int64_t got = 1;
    for (int e = 1; e < nd; e++) got *= sh[e];
    if (nd < 2 || got != *per || (*F >= 0 && sh[0] != *F)) {
        char fs[32] = "F";
        if (*F >= 0) snprintf(fs, sizeof fs, "%lld", (long long)*F);
        df_error_set(err, DF_EINVAL, "%s: want [%s%s] with %lld values a frame for input '%s', "
                                     "got %lld frames of %lld", path, fs, want, (long long)*per,
                     d->name, nd < 1 ? 0LL : (long long)sh[0], (long long)got);
        free(x);
        return NULL;
    }
    *F = sh[0];
    return x;
}

static int cmd_apply(int argc, char **argv)
{
    const char *model = NULL, *win = NULL, *xin = NULL, *params = NULL;
    const char *opos = NULL, *otw = NULL, *osw = NULL, *ohp = NULL;
    const char *extra[DF_MAX_IO]; /* --input NAME=FILE.npy */
    int nx = 0;
    int batch = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--weights") && more) win = argv[++i];
        else if (!strcmp(a, "--markers") && more) xin = argv[++i];
        else if (!strcmp(a, "--batch") && more) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--params") && more) params = argv[++i];
        else if (!strcmp(a, "--positions") && more) opos = argv[++i];
        else if (!strcmp(a, "--target-weights") && more) otw = argv[++i];
        else if (!strcmp(a, "--solved") && more) osw = argv[++i];
        else if (!strcmp(a, "--head-pose") && more) ohp = argv[++i];
        else if (!strcmp(a, "--input") && more) {
            if (nx == DF_MAX_IO) {
                fprintf(stderr, "deform retarget apply: too many --input\n");
                return 2;
            }
            extra[nx++] = argv[++i];
        }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "deform retarget apply: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!win == !xin) || (!opos && !otw && !osw && !ohp)) {
        fprintf(stderr, "deform retarget apply: MODEL, one of --weights/--markers and at least "
                        "one of --positions/--target-weights/--solved/--head-pose are "
                        "required\n");
        return 2;
    }
    if (batch < 1 || batch > 4096) {
        fprintf(stderr, "deform retarget apply: --batch must be 1..4096\n");
        return 2;
    }
    df_error_t err = {0};
    df_model_t *m = NULL;
    df_scratch_t *scr = NULL;
    float *in = NULL, *P = NULL, *TW = NULL, *SW = NULL, *HP = NULL;
    float *xarr[DF_MAX_IO] = {0};
    const float **xp[DF_MAX_IO] = {0};
    int xi[DF_MAX_IO];
    int64_t xper[DF_MAX_IO];
    const float **pin = NULL;
    float **pp = NULL, **pt = NULL, **ps = NULL, **ph = NULL;
    int rc = 1;
    char path[4096];
    if (df__tool_open_model(model, &m, path, sizeof path, &err)) DIE("%s", err.msg);
    if (strcmp(df_model_kind(m), "retarget")) DIE("%s is a '%s' model, not retarget", model,
                                                  df_model_kind(m));
    if (params) {
        df_model_unref(&m);
        if (df_model_open(path, "retarget", params, NULL, &m, &err)) DIE("%s", err.msg);
    }
    const char *iname = win ? "source_weights" : "markers";
    int ii = df_model_find_input(m, iname);
    if (ii < 0) DIE("the model has no input '%s' (built without --markers?)", iname);
    int64_t F = -1, per;
    if (!(in = read_frames(m, ii, win ? win : xin, &F, &per, &err))) DIE("%s", err.msg);
    /* the model's other inputs (a skeleton target's joint_rotations, ...),
     * one [F, ...] array each */
    for (int k = 0; k < nx; k++) {
        const char *eq = strchr(extra[k], '=');
        char name[DF_NAME_MAX];
        if (!eq || eq == extra[k] || (size_t)(eq - extra[k]) >= sizeof name || !eq[1])
            DIE("--input %s: want NAME=FILE.npy", extra[k]);
        memcpy(name, extra[k], (size_t)(eq - extra[k]));
        name[eq - extra[k]] = 0;
        xi[k] = df_model_find_input(m, name);
        if (xi[k] < 0) DIE("--input %s: the model has no input '%s'", extra[k], name);
        if (xi[k] == ii) DIE("--input %s: '%s' is the frames' input already", extra[k], name);
        for (int q = 0; q < k; q++)
            if (xi[q] == xi[k]) DIE("--input %s: '%s' given twice", extra[k], name);
        if (!(xarr[k] = read_frames(m, xi[k], eq + 1, &F, &xper[k], &err))) DIE("%s", err.msg);
        if (!(xp[k] = malloc((size_t)batch * sizeof *xp[k]))) DIE("out of memory");
    }
    int64_t N = df_model_n_vertices(m);
    int io = df_model_find_output(m, "positions"), it = df_model_find_output(m, "target_weights"),
        is = df_model_find_output(m, "solved_weights"), ih = df_model_find_output(m, "head_pose");
    if (ohp && ih < 0) DIE("the model has no output 'head_pose' (built without --markers)");
    int64_t Mt = df_model_output(m, it)->shape[0], Ms = df_model_output(m, is)->shape[0];
    if ((opos && !(P = malloc((size_t)(F * N * 3) * sizeof(float)))) ||
        (otw && !(TW = malloc((size_t)(F * Mt) * sizeof(float)))) ||
        (osw && !(SW = malloc((size_t)(F * Ms) * sizeof(float)))) ||
        (ohp && !(HP = malloc((size_t)(F * 12) * sizeof(float)))))
        DIE("out of memory (%lld frames)", (long long)F);
    pin = malloc((size_t)batch * sizeof *pin);
    pp = malloc((size_t)batch * sizeof *pp);
    pt = malloc((size_t)batch * sizeof *pt);
    ps = malloc((size_t)batch * sizeof *ps);
    ph = malloc((size_t)batch * sizeof *ph);
    scr = df_scratch_new();
    if (!pin || !pp || !pt || !ps || !ph || !scr) DIE("out of memory");
    double t0 = df__now_s(), last = t0;
    for (int64_t f0 = 0; f0 < F; f0 += batch) {
        int n = (int)(F - f0 < batch ? F - f0 : batch);
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = n;
        for (int p = 0; p < n; p++) {
            pin[p] = in + (size_t)(f0 + p) * (size_t)per;
            if (P) pp[p] = P + (size_t)(f0 + p) * (size_t)N * 3;
            if (TW) pt[p] = TW + (size_t)(f0 + p) * (size_t)Mt;
            if (SW) ps[p] = SW + (size_t)(f0 + p) * (size_t)Ms;
            if (HP) ph[p] = HP + (size_t)(f0 + p) * 12;
        }
        b.in[ii] = pin;
        for (int k = 0; k < nx; k++) {
            for (int p = 0; p < n; p++) xp[k][p] = xarr[k] + (size_t)(f0 + p) * (size_t)xper[k];
            b.in[xi[k]] = xp[k];
        }
        if (P) b.out[io] = pp;
        if (TW) b.out[it] = pt;
        if (SW) b.out[is] = ps;
        if (HP) b.out[ih] = ph;
        if (df_model_evaluate(m, &b, scr, &err))
            DIE("frames %lld..%lld: %s", (long long)f0, (long long)(f0 + n - 1), err.msg);
        double t = df__now_s();
        if (t - last > 1.0 && f0 + n < F) {
            double done = (double)(f0 + n) / (double)F;
            fprintf(stderr, "apply: %lld/%lld frames, elapsed %.1fs, ETA %.1fs\n",
                    (long long)(f0 + n), (long long)F, t - t0, (t - t0) * (1 - done) / done);
            last = t;
        }
    }
    double el = df__now_s() - t0;
    int64_t s3[3] = {F, N, 3}, s2[2] = {F, Mt}, s2s[2] = {F, Ms}, s34[3] = {F, 3, 4};
    if (P && df_npy_write_f32(opos, 3, s3, P, &err)) DIE("%s", err.msg);
    if (TW && df_npy_write_f32(otw, 2, s2, TW, &err)) DIE("%s", err.msg);
    if (SW && df_npy_write_f32(osw, 2, s2s, SW, &err)) DIE("%s", err.msg);
    if (HP && df_npy_write_f32(ohp, 3, s34, HP, &err)) DIE("%s", err.msg);
    printf("applied %s to %lld frames of '%s' in %.2fs (%.0f frames/s, batch %d)\n", model,
           (long long)F, iname, el, el > 0 ? (double)F / el : 0.0, batch);
    rc = 0;
out:
    df_model_unref(&m);
    df_scratch_free(&scr);
    free(in);
    free(P);
    free(TW);
    free(SW);
    free(HP);
    free(ph);
    for (int k = 0; k < nx; k++) {
        free(xarr[k]);
        free(xp[k]);
    }
    free(pin);
    free(pp);
    free(pt);
    free(ps);
    return rc;
}

/* ------------------------------------------------------------- keyframes */

/* Chuang & Bregler: a source basis taken from performance frames. The
 * frames' markers are aligned rigidly onto the source neutral's markers
 * (stable-marker weights), their displacements go through PCA, and for each
 * of the leading components the frames of smallest and largest projection
 * become basis shapes. Writes them as a `rigged` model whose vertices are
 * the markers (build a retarget model from it with --markers all). */
static int cmd_keyframes(int argc, char **argv)
{
    const char *src_arg = NULL, *markers = NULL, *perf = NULL, *out = NULL, *fout = NULL;
    int ncomp = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--source") && more) src_arg = argv[++i];
        else if (!strcmp(a, "--markers") && more) markers = argv[++i];
        else if (!strcmp(a, "--performance") && more) perf = argv[++i];
        else if (!strcmp(a, "--components") && more) ncomp = atoi(argv[++i]);
        else if (!strcmp(a, "--out") && more) out = argv[++i];
        else if (!strcmp(a, "--frames-out") && more) fout = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "deform retarget keyframes: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!src_arg || !markers || !perf || !out) {
        fprintf(stderr, "deform retarget keyframes: --source, --markers, --performance and --out "
                        "are required\n");
        return 2;
    }
    if (ncomp < 1 || ncomp > 256) {
        fprintf(stderr, "deform retarget keyframes: --components must be 1..256\n");
        return 2;
    }
    df_error_t err = {0};
    rig_t src;
    memset(&src, 0, sizeof src);
    int32_t *mk = NULL, *pick = NULL;
    int64_t K = 0, F = 0, P = 0;
    float *X = NULL, *w = NULL, *n0 = NULL, *kd = NULL;
    double *D = NULL, *C = NULL, *V = NULL, *mu = NULL;
    int rc = 1;
    if (rig_open(src_arg, "source", &src, &err)) DIE("%s", err.msg);
    if (read_indices(markers, &mk, &K, &err)) DIE("%s", err.msg);
    if (K < 3) DIE("%s: %lld markers (need at least 3)", markers, (long long)K);
    for (int64_t i = 0; i < K; i++)
        if (mk[i] >= src.N) DIE("%s: marker %lld is vertex %d, the source has %lld vertices",
                                markers, (long long)i, mk[i], (long long)src.N);
    int nd;
    int64_t sh[DF_MAX_DIMS];
    if (df_npy_read_f32(perf, &nd, sh, &X, &err)) DIE("%s", err.msg);
    if (nd != 3 || sh[1] != K || sh[2] != 3)
        DIE("%s: want marker tracks [F,%lld,3]", perf, (long long)K);
    F = sh[0];
    if (F < 2) DIE("%s: %lld frames (need at least 2)", perf, (long long)F);
    int64_t n3 = 3 * K;
    w = malloc((size_t)K * sizeof(float));
    n0 = malloc((size_t)n3 * sizeof(float));
    D = malloc((size_t)(F * n3) * sizeof(double));
    C = calloc((size_t)(n3 * n3), sizeof(double));
    V = malloc((size_t)(n3 * n3) * sizeof(double));
    mu = calloc((size_t)n3, sizeof(double));
    pick = malloc((size_t)(2 * ncomp) * sizeof(int32_t));
    if (!w || !n0 || !D || !C || !V || !mu || !pick) DIE("out of memory");
    if (stable_weights(src.deltas, src.N, src.M, mk, K, w)) DIE("out of memory");
    double ws = 0;
    for (int64_t i = 0; i < K; i++) ws += w[i];
    for (int64_t i = 0; i < K; i++) w[i] = (float)(w[i] / ws);
    for (int64_t i = 0; i < K; i++) memcpy(n0 + 3 * i, src.pos + 3 * (int64_t)mk[i], 3 * sizeof(float));
    for (int64_t f = 0; f < F; f++) {
        double R[9], t[3];
        const float *x = X + f * n3;
        if (df__rt_rigid_align(x, n0, w, K, 1, R, t))
            DIE("%s: frame %lld: the markers are collinear or coincide", perf, (long long)f);
        for (int64_t i = 0; i < K; i++)
            for (int a = 0; a < 3; a++) {
                double v = R[3 * a] * x[3 * i] + R[3 * a + 1] * x[3 * i + 1] +
                           R[3 * a + 2] * x[3 * i + 2] + t[a] - n0[3 * i + a];
                D[f * n3 + 3 * i + a] = v;
                mu[3 * i + a] += v / (double)F;
            }
    }
    for (int64_t f = 0; f < F; f++)
        for (int64_t k = 0; k < n3; k++) D[f * n3 + k] -= mu[k];
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n3, (int)n3, (int)F, 1.0, D,
                (int)n3, D, (int)n3, 0.0, C, (int)n3);
    df__rt_eig_sym(C, n3, V);
    /* components by decreasing variance */
    double total = 0;
    for (int64_t k = 0; k < n3; k++) total += C[k * n3 + k];
    printf("keyframes: %lld frames, %lld markers; leading components (variance share):", (long long)F,
           (long long)K);
    int8_t *used = calloc((size_t)n3, 1);
    if (!used) DIE("out of memory");
    for (int c = 0; c < ncomp && c < n3; c++) {
        int64_t best = -1;
        for (int64_t k = 0; k < n3; k++)
            if (!used[k] && (best < 0 || C[k * n3 + k] > C[best * n3 + best])) best = k;
        used[best] = 1;
        printf(" %.3f", total > 0 ? C[best * n3 + best] / total : 0.0);
        double lo = INFINITY, hi = -INFINITY;
        int64_t flo = 0, fhi = 0;
        for (int64_t f = 0; f < F; f++) {
            double pr = 0;
            for (int64_t k = 0; k < n3; k++) pr += V[k * n3 + best] * D[f * n3 + k];
            if (pr < lo) lo = pr, flo = f;
            if (pr > hi) hi = pr, fhi = f;
        }
        int64_t cand[2] = {flo, fhi};
        for (int e = 0; e < 2; e++) {
            int dup = 0;
            for (int64_t q = 0; q < P; q++) dup |= pick[q] == cand[e];
            if (!dup) pick[P++] = (int32_t)cand[e];
        }
    }
    free(used);
    printf("\nkeyframes: %lld basis frames:", (long long)P);
    for (int64_t q = 0; q < P; q++) printf(" %d", pick[q]);
    printf("\n");
    /* the basis rig: markers as vertices, key frames' displacements as shapes */
    if (P < 1) DIE("no key frame selected");
    kd = malloc((size_t)P * (size_t)n3 * sizeof(float));
    char **names = calloc((size_t)P, sizeof(char *));
    if (!kd || !names) {
        free(names);
        DIE("out of memory");
    }
    for (int64_t q = 0; q < P; q++)
        for (int64_t k = 0; k < n3; k++) kd[q * n3 + k] = (float)(D[(int64_t)pick[q] * n3 + k] + mu[k]);
    for (int64_t q = 0; q < P; q++) {
        names[q] = malloc(32);
        if (names[q]) snprintf(names[q], 32, "kf%d", pick[q]);
    }
    uint32_t tri[3] = {0, 1, 2};
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = K;
    d.positions = n0;
    d.n_triangles = 1;
    d.triangles = tri;
    d.n_morphs = P;
    d.morph_deltas = kd;
    d.morph_names = names;
    int wrc = df_rigged_write(&d, out, &err);
    for (int64_t q = 0; q < P; q++) free(names[q]);
    free(names);
    if (wrc) DIE("%s", err.msg);
    printf("wrote %s (rigged: %lld marker vertices, %lld key-frame shapes)\n", out, (long long)K,
           (long long)P);
    if (fout) {
        FILE *f = fopen(fout, "w");
        if (!f) DIE("%s: %s", fout, strerror(errno));
        for (int64_t q = 0; q < P; q++) fprintf(f, "%d\n", pick[q]);
        if (fclose(f)) DIE("%s: write failed", fout);
    }
    rc = 0;
out:
    rig_free(&src);
    free(mk);
    free(pick);
    free(X);
    free(w);
    free(n0);
    free(kd);
    free(D);
    free(C);
    free(V);
    free(mu);
    return rc;
}

/* -------------------------------------------------------------- transfer */

/* progress of a long transfer on stderr: past its first second, a line
 * when a stage starts and at most every second within it, with the stage,
 * its fraction and the time it still needs at its pace so far */
typedef struct tprog {
    double t0, last, stage_t0;
    char stage[64];
} tprog_t;

static void transfer_progress(void *user, const char *stage, double frac)
{
    tprog_t *p = user;
    double now = df__now_s();
    int fresh = strcmp(stage, p->stage) != 0;
    if (fresh) {
        snprintf(p->stage, sizeof p->stage, "%s", stage);
        p->stage_t0 = now;
    }
    if (now - p->t0 < 1.0 || (!fresh && now - p->last < 1.0)) return;
    p->last = now;
    double in = now - p->stage_t0;
    if (frac > 0.02 && frac < 1.0)
        fprintf(stderr, "transfer: %s %.0f %% (%.1f s elapsed, about %.0f s left in this stage)\n",
                stage, 100 * frac, now - p->t0, in * (1 - frac) / frac);
    else
        fprintf(stderr, "transfer: %s %.0f %% (%.1f s elapsed)\n", stage, 100 * frac, now - p->t0);
}

/* The source's shapes onto a target mesh of another topology: expression
 * cloning, the naive copies (nearest vertex, nearest surface point), or
 * deformation transfer
 * (core/retarget/rt_transfer.c). Writes the target as a `rigged` file with
 * one shape per source control, named as the source's (serve it with
 * `build --map names`). --refine's default: 5 rounds for expression
 * cloning, which gains from the refined correspondence on every target
 * measured; none for deformation transfer, whose worst vertex on T2 (a
 * lip-seam vertex) does not (docs/retarget.md). */
enum { TRANSFER_REFINE_CLONE = 5, TRANSFER_REFINE_DT = 0 };

static int piece_mode(const char *s)
{
    return !strcmp(s, "skin") ? DF_RT_PIECE_SKIN
           : !strcmp(s, "still") ? DF_RT_PIECE_STILL
           : !strcmp(s, "rigid") ? DF_RT_PIECE_RIGID
                                 : -1;
}

static const char *const PIECE_NAME[] = {"skin", "still", "rigid"};

enum { MAX_PIECE_OPTS = 256 };

/* (vertex count, piece) pairs: larger first, then by number */
static int by_size(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

typedef struct piece_opt {
    long n; /* checked against the pieces before the transfer */
    int mode;
} piece_opt_t;

/* What the transfer gives each of the target's np pieces (comp: each
 * vertex's piece, df_lap_components): the skin (the pieces holding target
 * landmarks; without landmarks the largest piece) keeps its transferred
 * motion unless --piece says otherwise, the others take --pieces (default
 * skin) or their --piece. Prints the pieces when there are several (the 20
 * largest), each with its largest transferred displacement and its shape,
 * then applies the modes to D. */
static int transfer_pieces(const df__rt_mesh_t *tm, const int32_t *comp, int64_t np,
                           const int32_t *lt, int64_t nl, int others, const piece_opt_t *po,
                           int npo, int64_t M, char **names, float *D, df_error_t *err)
{
    int rc = 0;
    int64_t *cnt = NULL, *nlm = NULL, *order = NULL;
    uint8_t *mode = NULL;
    double *box = NULL, *dmax = NULL;
    int64_t *dshape = NULL;
    if (np <= 1 && !npo) return 0;
    cnt = calloc((size_t)np, sizeof(int64_t));
    nlm = calloc((size_t)np, sizeof(int64_t));
    order = malloc(sizeof(int64_t) * (size_t)np);
    mode = malloc((size_t)np);
    box = malloc(sizeof(double) * (size_t)(6 * np));
    dmax = calloc((size_t)np, sizeof(double));
    dshape = calloc((size_t)np, sizeof(int64_t));
    if (!cnt || !nlm || !order || !mode || !box || !dmax || !dshape) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory (the target's pieces)");
        goto done;
    }
    for (int64_t k = 0; k < np; k++) {
        for (int d = 0; d < 3; d++) box[6 * k + d] = INFINITY, box[6 * k + 3 + d] = -INFINITY;
        order[k] = k;
    }
    for (int64_t v = 0; v < tm->nv; v++) {
        const int32_t k = comp[v];
        cnt[k]++;
        for (int d = 0; d < 3; d++) {
            const double x = tm->pos[3 * v + d];
            if (x < box[6 * k + d]) box[6 * k + d] = x;
            if (x > box[6 * k + 3 + d]) box[6 * k + 3 + d] = x;
        }
    }
    for (int64_t i = 0; lt && i < nl; i++) nlm[comp[lt[i]]]++;
    int64_t largest = 0, with_lm = 0;
    for (int64_t k = 0; k < np; k++) {
        if (cnt[k] > cnt[largest]) largest = k;
        with_lm += nlm[k] > 0;
    }
    for (int64_t k = 0; k < np; k++)
        mode[k] = (uint8_t)((with_lm ? nlm[k] > 0 : k == largest) ? DF_RT_PIECE_SKIN : others);
    for (int i = 0; i < npo; i++) mode[po[i].n] = (uint8_t)po[i].mode;
    for (int64_t s = 0; s < M; s++) {
        const float *Ds = D + (size_t)s * (size_t)tm->nv * 3;
        for (int64_t v = 0; v < tm->nv; v++) {
            const double a = Ds[3 * v], b = Ds[3 * v + 1], c = Ds[3 * v + 2];
            const double l = sqrt(a * a + b * b + c * c);
            if (l > dmax[comp[v]]) dmax[comp[v]] = l, dshape[comp[v]] = s;
        }
    }
    if (np > 1) {
        /* the 20 largest (a mesh of hair cards has thousands of pieces), in
         * their numbering */
        int64_t *key = malloc(sizeof(int64_t) * (size_t)(2 * np));
        if (!key) {
            rc = df_error_set(err, DF_ENOMEM, "out of memory (the target's pieces)");
            goto done;
        }
        for (int64_t k = 0; k < np; k++) key[2 * k] = cnt[k], key[2 * k + 1] = k;
        qsort(key, (size_t)np, 2 * sizeof(int64_t), by_size);
        for (int64_t k = 0; k < np; k++) order[k] = key[2 * k + 1];
        free(key);
        const int64_t shown = np < 20 ? np : 20;
        for (int64_t a = 1; a < shown; a++)
            for (int64_t b = a; b > 0 && order[b] < order[b - 1]; b--) {
                const int64_t t = order[b];
                order[b] = order[b - 1], order[b - 1] = t;
            }
        printf("pieces: the target has %lld separate pieces (numbered by their first vertex)%s\n",
               (long long)np, np > shown ? "; the 20 largest" : "");
        int skin_others = 0;
        for (int64_t a = 0; a < shown; a++) {
            const int64_t k = order[a];
            const double *bx = box + 6 * k;
            printf("  piece %lld: %lld vertices, %lld landmarks, centre (%.4g, %.4g, %.4g), size "
                   "%.3g x %.3g x %.3g; largest transferred motion %.3g (%s): %s\n",
                   (long long)k, (long long)cnt[k], (long long)nlm[k], 0.5 * (bx[0] + bx[3]),
                   0.5 * (bx[1] + bx[4]), 0.5 * (bx[2] + bx[5]), bx[3] - bx[0], bx[4] - bx[1],
                   bx[5] - bx[2], dmax[k], names && names[dshape[k]] ? names[dshape[k]] : "-",
                   mode[k] == DF_RT_PIECE_SKIN ? "skin (its transferred motion)"
                   : mode[k] == DF_RT_PIECE_STILL ? "still"
                                                  : "rigid (each shape's closest rigid motion)");
        }
        if (np > shown) {
            int64_t rest = 0;
            for (int64_t a = shown; a < np; a++) rest += cnt[order[a]];
            printf("  (%lld smaller pieces, %lld vertices in all: %s)\n", (long long)(np - shown),
                   (long long)rest, PIECE_NAME[others]);
        }
        for (int64_t k = 0; k < np; k++)
            skin_others += mode[k] == DF_RT_PIECE_SKIN && (with_lm ? nlm[k] == 0 : k != largest);
        if (skin_others)
            printf("pieces: %d piece%s without landmarks take%s the skin's motion nearest to "
                   "them (an eyeball takes the lid's blink): --pieces still keeps them still, "
                   "--piece N=rigid moves piece N rigidly with it (the lower teeth with the "
                   "jaw)\n", skin_others, skin_others == 1 ? "" : "s",
                   skin_others == 1 ? "s" : "");
    }
    rc = df__rt_pieces_apply(tm->pos, tm->nv, comp, np, mode, M, D, err);
done:
    free(cnt), free(nlm), free(order), free(mode), free(box), free(dmax), free(dshape);
    return rc;
}

static int cmd_transfer(int argc, char **argv)
{
    const char *src_arg = NULL, *tgt_arg = NULL, *lms = NULL, *lmt = NULL, *out = NULL;
    const char *pts_s = NULL, *pts_t = NULL; /* landmarks as points */
    const char *method = "clone", *frames = "warp", *refine_arg = NULL, *corr_out = NULL;
    const char *align_arg = "auto";
    int others = DF_RT_PIECE_SKIN, npo = 0;
    piece_opt_t po[MAX_PIECE_OPTS];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--pieces") && more) {
            others = piece_mode(argv[++i]);
            if (others < 0) {
                fprintf(stderr, "deform retarget transfer: --pieces must be skin, still or rigid, "
                                "not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--piece") && more) {
            const char *v = argv[++i], *eq = strchr(v, '=');
            char *end;
            errno = 0;
            const long n = strtol(v, &end, 10);
            const int md = eq ? piece_mode(eq + 1) : -1;
            if (!eq || end != eq || errno || n < 0 || n > INT32_MAX || md < 0) {
                fprintf(stderr, "deform retarget transfer: --piece takes N=skin, N=still or "
                                "N=rigid (N: a piece's number as the transfer lists them), not "
                                "'%s'\n", v);
                return 2;
            }
            if (npo == MAX_PIECE_OPTS) {
                fprintf(stderr, "deform retarget transfer: at most %d --piece options (--pieces "
                                "sets every piece without landmarks at once)\n", MAX_PIECE_OPTS);
                return 2;
            }
            po[npo].n = n, po[npo++].mode = md;
        } else if (!strcmp(a, "--source") && more) src_arg = argv[++i];
        else if (!strcmp(a, "--target") && more) tgt_arg = argv[++i];
        else if (!strcmp(a, "--source-landmarks") && more) lms = argv[++i];
        else if (!strcmp(a, "--target-landmarks") && more) lmt = argv[++i];
        else if (!strcmp(a, "--source-landmark-points") && more) pts_s = argv[++i];
        else if (!strcmp(a, "--target-landmark-points") && more) pts_t = argv[++i];
        else if (!strcmp(a, "--method") && more) method = argv[++i];
        else if (!strcmp(a, "--local-frames") && more) frames = argv[++i];
        else if (!strcmp(a, "--refine") && more) refine_arg = argv[++i];
        else if (!strcmp(a, "--align") && more) align_arg = argv[++i];
        else if (!strcmp(a, "--correspondence-out") && more) corr_out = argv[++i];
        else if (!strcmp(a, "--out") && more) out = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "deform retarget transfer: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    df__rt_transfer_t mt;
    if (!strcmp(method, "clone")) mt = DF_RT_CLONE;
    else if (!strcmp(method, "naive")) mt = DF_RT_NAIVE;
    else if (!strcmp(method, "naive-point")) mt = DF_RT_NAIVE_POINT;
    else if (!strcmp(method, "dt")) mt = DF_RT_DT;
    else {
        fprintf(stderr, "deform retarget transfer: --method must be clone, naive, naive-point or dt\n");
        return 2;
    }
    df__rt_align_t align;
    if (!strcmp(align_arg, "auto")) align = DF_RT_ALIGN_AUTO;
    else if (!strcmp(align_arg, "rigid")) align = DF_RT_ALIGN_RIGID;
    else if (!strcmp(align_arg, "none")) align = DF_RT_ALIGN_NONE;
    else {
        fprintf(stderr, "deform retarget transfer: --align must be auto, rigid or none\n");
        return 2;
    }
    df__rt_frames_t lf;
    if (!strcmp(frames, "on") || !strcmp(frames, "normals")) lf = DF_RT_FRAMES_NORMALS;
    else if (!strcmp(frames, "similarity")) lf = DF_RT_FRAMES_SIMILARITY;
    else if (!strcmp(frames, "warp")) lf = DF_RT_FRAMES_WARP;
    else if (!strcmp(frames, "off")) lf = DF_RT_FRAMES_OFF;
    else {
        fprintf(stderr, "deform retarget transfer: --local-frames must be warp, normals (or on), "
                        "similarity or off\n");
        return 2;
    }
    int refine = mt == DF_RT_DT ? TRANSFER_REFINE_DT : TRANSFER_REFINE_CLONE;
    if (refine_arg) {
        char *end;
        errno = 0;
        long r = strtol(refine_arg, &end, 10);
        if (errno || end == refine_arg || *end || r < 0 || r > 100) {
            fprintf(stderr, "deform retarget transfer: --refine must be an integer from 0 to "
                            "100 (rounds of the correspondence's refinement), not '%s'\n",
                    refine_arg);
            return 2;
        }
        refine = (int)r;
    }
    if (corr_out && mt == DF_RT_NAIVE) {
        fprintf(stderr, "deform retarget transfer: --correspondence-out needs --method clone, "
                        "naive-point or dt (the nearest-vertex copy has no correspondence)\n");
        return 2;
    }
    const int naive = mt == DF_RT_NAIVE || mt == DF_RT_NAIVE_POINT;
    if ((lms && pts_s) || (lmt && pts_t)) {
        fprintf(stderr, "deform retarget transfer: give a side's landmarks as vertices "
                        "(--source-landmarks, --target-landmarks) or as points "
                        "(--source-landmark-points, --target-landmark-points), not both\n");
        return 2;
    }
    const int have_s = lms || pts_s, have_t = lmt || pts_t;
    if (!src_arg || !tgt_arg || !out || (!naive && (!have_s || !have_t)) || have_s != have_t) {
        fprintf(stderr, "deform retarget transfer: --source, --target, --out and (except for "
                        "the naive copies) the landmarks of both sides (--source-landmarks or "
                        "--source-landmark-points, --target-landmarks or "
                        "--target-landmark-points) are required\n");
        return 2;
    }
    df_error_t err = {0};
    rig_t src;
    memset(&src, 0, sizeof src);
    df_st_t *tst = NULL;
    int32_t *ls = NULL, *lt = NULL, *ctri = NULL, *comp = NULL;
    float *D = NULL, *cbary = NULL, *C = NULL;
    int rc = 1;
    int64_t nls = 0, nlt = 0;
    if (rig_open(src_arg, "source", &src, &err)) DIE("%s", err.msg);
    const df_tensor_t *tp, *tt, *st_tri;
    int64_t s2[2] = {-1, 3};
    if (df_st_open(tgt_arg, NULL, &tst, &err) ||
        df_st_require(tst, "positions", DF_DT_F32, 2, s2, 0, &tp, &err) ||
        df_st_require(tst, "triangles", DF_DT_I32, 2, s2, 0, &tt, &err) ||
        df_st_require(src.st, "triangles", DF_DT_I32, 2, s2, 0, &st_tri, &err))
        DIE("%s", err.msg);
    for (int64_t i = 0; i < 3 * tt->shape[0]; i++)
        if (((const int32_t *)tt->data)[i] < 0 || ((const int32_t *)tt->data)[i] >= tp->shape[0])
            DIE("%s: triangle %lld uses a vertex out of range", tgt_arg, (long long)(i / 3));
    for (int64_t i = 0; i < 3 * st_tri->shape[0]; i++)
        if (((const int32_t *)st_tri->data)[i] < 0 || ((const int32_t *)st_tri->data)[i] >= src.N)
            DIE("%s: triangle %lld uses a vertex out of range", src_arg, (long long)(i / 3));
    if (!naive && tt->shape[0] < 1)
        DIE("%s: no triangles (the target's surface is needed)", tgt_arg);
    if (mt != DF_RT_NAIVE && st_tri->shape[0] < 1)
        DIE("%s: no triangles (the source's surface is needed)", src_arg);
    if ((lms && read_indices(lms, &ls, &nls, &err)) ||
        (pts_s && landmark_points(pts_s, "source", src.pos, src.N, st_tri->data, st_tri->shape[0],
                                  &ls, &nls, &err)) ||
        (lmt && read_indices(lmt, &lt, &nlt, &err)) ||
        (pts_t && landmark_points(pts_t, "target", tp->data, tp->shape[0], tt->data, tt->shape[0],
                                  &lt, &nlt, &err)))
        DIE("%s", err.msg);
    if (nls != nlt) DIE("%lld source landmarks but %lld target landmarks", (long long)nls, (long long)nlt);
    df__rt_mesh_t sm = {src.N, st_tri->shape[0], src.M, src.pos, st_tri->data, src.deltas};
    df__rt_mesh_t tm = {tp->shape[0], tt->shape[0], 0, tp->data, tt->data, NULL};
    D = malloc(sizeof(float) * (size_t)(src.M * tm.nv * 3));
    if (!D) DIE("out of memory");
    int rounds = 0;
    double turned = 0;
    if (corr_out) { /* the correspondence the transfer uses, written out below */
        ctri = malloc(sizeof(int32_t) * (size_t)tm.nv);
        cbary = malloc(sizeof(float) * (size_t)(3 * tm.nv));
        C = malloc(sizeof(float) * (size_t)(4 * tm.nv));
        if (!ctri || !cbary || !C) DIE("out of memory");
    }
    /* displacements carried at the source's size onto a target of another size (units):
     * say so before the work */
    if (ls && nls >= 2 && (naive || lf == DF_RT_FRAMES_OFF)) {
        float *ps = malloc(sizeof(float) * (size_t)(3 * nls)), *pt = malloc(sizeof(float) * (size_t)(3 * nls));
        int in = ps && pt;
        for (int64_t i = 0; in && i < nls; i++) {
            in = ls[i] >= 0 && ls[i] < sm.nv && lt[i] >= 0 && lt[i] < tm.nv;
            for (int d = 0; in && d < 3; d++) {
                ps[3 * i + d] = sm.pos[3 * (int64_t)ls[i] + d];
                pt[3 * i + d] = tm.pos[3 * (int64_t)lt[i] + d];
            }
        }
        const double r = in ? df__rt_size_ratio(ps, pt, nls) : 1.0;
        if (!(r >= 0.5 && r <= 2.0))
            fprintf(stderr, "deform retarget transfer: warning: the target's landmarks span %.3g x "
                            "the source's (other units?); --method %s%s carries displacements at "
                            "the source's size: import both in one unit (deform import --units), "
                            "or use --method clone with local frames or --method dt, which scale "
                            "them\n", r, method, naive ? "" : " --local-frames off");
        free(ps), free(pt);
    }
    /* the target's pieces; --piece numbers checked before the work */
    comp = malloc(sizeof(int32_t) * (size_t)(tm.nv ? tm.nv : 1));
    const int64_t npieces = comp ? df_lap_components(tm.nv, tm.nt, tm.tri, comp) : -1;
    if (npieces < 0) DIE("out of memory");
    for (int i = 0; i < npo; i++)
        if (po[i].n >= npieces)
            DIE("--piece %ld: the target has %lld piece%s (0..%lld)", po[i].n,
                (long long)npieces, npieces == 1 ? "" : "s", (long long)npieces - 1);
    double t0 = df__now_s();
    tprog_t tpr = {t0, t0, t0, ""};
    df__rt_progress_t pg = {transfer_progress, &tpr};
    if (df__rt_transfer(&sm, &tm, ls, lt, nls, mt, (int)lf, refine, align, &turned, D, ctri, cbary,
                        &rounds, &pg, &err))
        DIE("%s", err.msg);
    if (transfer_pieces(&tm, comp, npieces, lt, nlt, others, po, npo, src.M, src.names, D, &err))
        DIE("%s", err.msg);
    df_rigged_data_t d;
    memset(&d, 0, sizeof d);
    d.n_vertices = tm.nv;
    d.positions = (float *)tm.pos;
    d.n_triangles = tm.nt;
    d.triangles = (uint32_t *)tm.tri;
    d.n_morphs = src.M;
    d.morph_deltas = D;
    d.morph_names = src.names;
    if (df_rigged_write(&d, out, &err)) DIE("%s", err.msg);
    printf("transfer (%s): %lld source shapes onto %lld target vertices in %.2fs; wrote %s\n",
           method, (long long)src.M, (long long)tm.nv, df__now_s() - t0, out);
    if (turned > 0)
        printf("transfer: the target's frame differs from the source's (its landmarks turned by "
               "%.1f degrees): transferred in the source's frame, the shapes turned back\n",
               turned);
    if (corr_out) {
        for (int64_t q = 0; q < tm.nv; q++) {
            C[4 * q] = (float)ctri[q];
            memcpy(C + 4 * q + 1, cbary + 3 * q, 3 * sizeof(float));
        }
        int64_t shape[2] = {tm.nv, 4};
        if (df_npy_write_f32(corr_out, 2, shape, C, &err)) DIE("%s", err.msg);
        printf("correspondence (%d rounds of refinement): wrote %s\n", rounds, corr_out);
    }
    rc = 0;
out:
    rig_free(&src);
    df_st_close(&tst);
    free(ls);
    free(lt);
    free(D);
    free(ctri);
    free(cbary);
    free(C);
    free(comp);
    return rc;
}

int cmd_retarget(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "build")) return cmd_build(argc - 1, argv + 1);
    if (!strcmp(argv[1], "apply")) return cmd_apply(argc - 1, argv + 1);
    if (!strcmp(argv[1], "keyframes")) return cmd_keyframes(argc - 1, argv + 1);
    if (!strcmp(argv[1], "transfer")) return cmd_transfer(argc - 1, argv + 1);
    fprintf(stderr, "deform retarget: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

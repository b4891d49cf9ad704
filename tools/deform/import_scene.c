/* import_scene.c — an assimp scene becomes one `rigged` model (df_rigged_data_t).
 *
 * DESIGN (docs/import.md has the user-level description)
 *  - assimp reads the file with Triangulate | JoinIdenticalVertices | ValidateDataStructure;
 *    never PreTransformVertices (it would bake the node hierarchy away). Non-triangle
 *    primitives (points, lines) are dropped and counted.
 *  - The node tree is flattened depth-first (parents before children). Joints are the nodes
 *    that are bones, the nodes that carry a mesh without bones in a skinned character (bound
 *    rigidly: one influence of weight 1), and all their ancestors up to the scene root, so
 *    FK reproduces every node transform above the skin. A scene without bones gets joints only
 *    when an animation moves a node above one of its meshes (then every mesh is rigid);
 *    otherwise it is a static mesh with 0 joints in world space.
 *  - Bind space. assimp gives one offset matrix per (mesh, bone): mesh space -> bone space. Our
 *    file has one inverse bind matrix per joint, so all meshes must share one bind space. We
 *    use the world bind pose: for the first mesh that uses a bone, IBM_j = offset * G_mesh^-1
 *    and its vertices are stored as G_mesh * v. A later mesh sharing a bone j gets the
 *    transform X = IBM_j^-1 * offset (so IBM_j X v = offset v exactly); its other bones are
 *    checked against X and disagreements counted. Skinning results do not depend on this
 *    choice (IBM_j * X = offset), only the stored rest mesh does.
 *  - Rest local transforms are the node matrices decomposed into T, R (quaternion), S.
 *  - Clips: one per aiAnimation; key times are the union of the key times of every channel
 *    that targets a joint (and of morph channels), in seconds = ticks / mTicksPerSecond
 *    (25 when 0, assimp's convention). Each channel is sampled at every union time by linear
 *    interpolation (slerp for rotations), clamped outside its keys; joints without a channel
 *    keep their rest transform. Because lerp/slerp between two samples taken on one segment
 *    reproduces the segment, sampling the clip later between union keys is exact too. Our
 *    clips have no per-key scale: a clip whose scale keys move away from the rest scale is
 *    stored as world matrices (clip/<i>/matrices) computed here by FK.
 *  - Morph targets: aiMesh::mAnimMeshes hold absolute positions; deltas = anim - base (in bind
 *    space). Targets of different meshes with the same name are one control (one global index,
 *    each mesh's deltas on its own vertices): an avatar's head, teeth and eyes each carry
 *    `jawOpen` or `eyeBlink_L`, and one weight must move them together. Within one mesh a
 *    repeated name stays a separate target (made unique). opts->morphs_per_mesh keeps every
 *    mesh's targets apart (names made unique). aiMeshMorphAnim channels (named after the node
 *    that holds the mesh) become the clip's weights; a shared control takes the first mesh's
 *    channel, and other meshes' channels that animate it otherwise are counted and reported.
 */
#include "import.h"

#include <assimp/cimport.h>
#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------ double matrix helpers */

static void m4_mul(const double a[16], const double b[16], double out[16])
{
    double r[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += a[i * 4 + k] * b[k * 4 + j];
            r[i * 4 + j] = s;
        }
    memcpy(out, r, sizeof r);
}

static void m4_from_ai(const struct aiMatrix4x4 *a, double m[16])
{
    const ai_real *p = &a->a1; /* a1..a4, b1..b4, ... : row-major */
    for (int i = 0; i < 16; i++) m[i] = p[i];
}

/* Inverse of an affine matrix (last row 0 0 0 1). Returns 0 when singular. */
static int m4_inv_affine(const double a[16], double out[16])
{
    double c00 = a[5] * a[10] - a[6] * a[9], c01 = a[6] * a[8] - a[4] * a[10],
           c02 = a[4] * a[9] - a[5] * a[8];
    double det = a[0] * c00 + a[1] * c01 + a[2] * c02;
    if (!(fabs(det) > 1e-300)) return 0;
    double id = 1.0 / det, r[16];
    r[0] = c00 * id;
    r[1] = (a[2] * a[9] - a[1] * a[10]) * id;
    r[2] = (a[1] * a[6] - a[2] * a[5]) * id;
    r[4] = c01 * id;
    r[5] = (a[0] * a[10] - a[2] * a[8]) * id;
    r[6] = (a[2] * a[4] - a[0] * a[6]) * id;
    r[8] = c02 * id;
    r[9] = (a[1] * a[8] - a[0] * a[9]) * id;
    r[10] = (a[0] * a[5] - a[1] * a[4]) * id;
    for (int i = 0; i < 3; i++)
        r[i * 4 + 3] = -(r[i * 4] * a[3] + r[i * 4 + 1] * a[7] + r[i * 4 + 2] * a[11]);
    r[12] = r[13] = r[14] = 0;
    r[15] = 1;
    memcpy(out, r, sizeof r);
    return 1;
}

static void m4_point(const double m[16], const double v[3], double o[3])
{
    for (int i = 0; i < 3; i++)
        o[i] = m[i * 4] * v[0] + m[i * 4 + 1] * v[1] + m[i * 4 + 2] * v[2] + m[i * 4 + 3];
}

static void m4_vec(const double m[16], const double v[3], double o[3])
{
    for (int i = 0; i < 3; i++)
        o[i] = m[i * 4] * v[0] + m[i * 4 + 1] * v[1] + m[i * 4 + 2] * v[2];
}

/* q = x,y,z,w */
static void quat_to_m3(const double q[4], double r[9])
{
    double x = q[0], y = q[1], z = q[2], w = q[3];
    r[0] = 1 - 2 * (y * y + z * z); r[1] = 2 * (x * y - z * w); r[2] = 2 * (x * z + y * w);
    r[3] = 2 * (x * y + z * w); r[4] = 1 - 2 * (x * x + z * z); r[5] = 2 * (y * z - x * w);
    r[6] = 2 * (x * z - y * w); r[7] = 2 * (y * z + x * w); r[8] = 1 - 2 * (x * x + y * y);
}

static void quat_norm(double q[4])
{
    double n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    if (n < 1e-12) { q[0] = q[1] = q[2] = 0; q[3] = 1; return; }
    for (int i = 0; i < 4; i++) q[i] /= n;
}

static void m3_to_quat(const double r[9], double q[4])
{
    double tr = r[0] + r[4] + r[8];
    if (tr > 0) {
        double s = sqrt(tr + 1.0) * 2;
        q[3] = 0.25 * s; q[0] = (r[7] - r[5]) / s; q[1] = (r[2] - r[6]) / s; q[2] = (r[3] - r[1]) / s;
    } else if (r[0] > r[4] && r[0] > r[8]) {
        double s = sqrt(1.0 + r[0] - r[4] - r[8]) * 2;
        q[3] = (r[7] - r[5]) / s; q[0] = 0.25 * s; q[1] = (r[1] + r[3]) / s; q[2] = (r[2] + r[6]) / s;
    } else if (r[4] > r[8]) {
        double s = sqrt(1.0 + r[4] - r[0] - r[8]) * 2;
        q[3] = (r[2] - r[6]) / s; q[0] = (r[1] + r[3]) / s; q[1] = 0.25 * s; q[2] = (r[5] + r[7]) / s;
    } else {
        double s = sqrt(1.0 + r[8] - r[0] - r[4]) * 2;
        q[3] = (r[3] - r[1]) / s; q[0] = (r[2] + r[6]) / s; q[1] = (r[5] + r[7]) / s; q[2] = 0.25 * s;
    }
    quat_norm(q);
}

static void trs_compose(const double t[3], const double q[4], const double s[3], double m[16])
{
    double r[9];
    quat_to_m3(q, r);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) m[i * 4 + j] = r[i * 3 + j] * s[j];
        m[i * 4 + 3] = t[i];
    }
    m[12] = m[13] = m[14] = 0;
    m[15] = 1;
}

/* Affine m -> T, R, S (S's first axis negative when det < 0). Returns the max abs error of
 * recomposing (non-zero for shear). */
static double trs_decompose(const double m[16], double t[3], double q[4], double s[3])
{
    double r[9];
    for (int i = 0; i < 3; i++) t[i] = m[i * 4 + 3];
    for (int j = 0; j < 3; j++)
        s[j] = sqrt(m[j] * m[j] + m[4 + j] * m[4 + j] + m[8 + j] * m[8 + j]);
    double det = m[0] * (m[5] * m[10] - m[6] * m[9]) - m[1] * (m[4] * m[10] - m[6] * m[8]) +
                 m[2] * (m[4] * m[9] - m[5] * m[8]);
    if (det < 0) s[0] = -s[0];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) r[i * 3 + j] = s[j] != 0 ? m[i * 4 + j] / s[j] : (i == j);
    m3_to_quat(r, q);
    double back[16], e = 0;
    trs_compose(t, q, s, back);
    for (int i = 0; i < 12; i++) e = fmax(e, fabs(back[i] - m[i]));
    return e;
}

static void quat_slerp(const double a[4], const double b0[4], double u, double o[4])
{
    double b[4] = {b0[0], b0[1], b0[2], b0[3]};
    double d = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
    if (d < 0) { d = -d; for (int i = 0; i < 4; i++) b[i] = -b[i]; }
    double wa, wb;
    if (d > 0.9999995) { wa = 1 - u; wb = u; }
    else {
        double th = acos(d), st = sin(th);
        wa = sin((1 - u) * th) / st;
        wb = sin(u * th) / st;
    }
    for (int i = 0; i < 4; i++) o[i] = wa * a[i] + wb * b[i];
    quat_norm(o);
}

/* ------------------------------------------------------------- key sampling */

/* Index i of the segment [k_i, k_i+1] containing t (clamped), and the fraction. */
static unsigned seg_find(const double *times, size_t stride, unsigned n, double t, double *u)
{
#define KT(i) (*(const double *)((const char *)times + (size_t)(i) * stride))
    if (n <= 1 || t <= KT(0)) { *u = 0; return 0; }
    if (t >= KT(n - 1)) { *u = 0; return n - 1; }
    unsigned lo = 0, hi = n - 1; /* KT(lo) <= t < KT(hi) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (KT(mid) <= t) lo = mid; else hi = mid;
    }
    double dt = KT(hi) - KT(lo);
    *u = dt > 0 ? (t - KT(lo)) / dt : 0;
    return lo;
#undef KT
}

static void sample_vec(const struct aiVectorKey *k, unsigned n, double t, double o[3])
{
    double u;
    unsigned i = seg_find(&k[0].mTime, sizeof *k, n, t, &u);
    const struct aiVector3D *a = &k[i].mValue, *b = &k[i + (u > 0)].mValue;
    o[0] = a->x + (b->x - a->x) * u;
    o[1] = a->y + (b->y - a->y) * u;
    o[2] = a->z + (b->z - a->z) * u;
}

static void sample_quat(const struct aiQuatKey *k, unsigned n, double t, double o[4])
{
    double u;
    unsigned i = seg_find(&k[0].mTime, sizeof *k, n, t, &u);
    const struct aiQuaternion *a = &k[i].mValue, *b = &k[i + (u > 0)].mValue;
    double qa[4] = {a->x, a->y, a->z, a->w}, qb[4] = {b->x, b->y, b->z, b->w};
    quat_norm(qa);
    quat_norm(qb);
    quat_slerp(qa, qb, u, o);
}

/* ------------------------------------------------------------ scene walking */

typedef struct node {
    const struct aiNode *ai;
    int parent;        /* node index */
    double local[16], global[16];
    int joint;         /* joint index or -1 */
    int mark;          /* needed as a joint */
} node_t;

typedef struct inst {
    int node;
    unsigned mesh;
    int rigid;         /* bound rigidly to its node */
} inst_t;

typedef struct ctx {
    const struct aiScene *sc;
    node_t *nodes;
    int n_nodes, cap_nodes;
    inst_t *insts;
    int n_insts, cap_insts;
    df_error_t *err;
} ctx_t;

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 1;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

static int walk(ctx_t *c, const struct aiNode *n, int parent, int depth)
{
    if (depth > 1000)
        return df_error_set(c->err, DF_ELIMIT, "node hierarchy deeper than 1000 levels");
    if (!grow((void **)&c->nodes, &c->cap_nodes, c->n_nodes + 1, sizeof(node_t)))
        return df_error_set(c->err, DF_ENOMEM, "out of memory");
    int me = c->n_nodes++;
    node_t *nd = &c->nodes[me];
    memset(nd, 0, sizeof *nd);
    nd->ai = n;
    nd->parent = parent;
    nd->joint = -1;
    m4_from_ai(&n->mTransformation, nd->local);
    if (parent >= 0) m4_mul(c->nodes[parent].global, nd->local, nd->global);
    else memcpy(nd->global, nd->local, sizeof nd->global);
    for (unsigned k = 0; k < n->mNumMeshes; k++) {
        if (n->mMeshes[k] >= c->sc->mNumMeshes) continue;
        if (!grow((void **)&c->insts, &c->cap_insts, c->n_insts + 1, sizeof(inst_t)))
            return df_error_set(c->err, DF_ENOMEM, "out of memory");
        c->insts[c->n_insts++] = (inst_t){me, n->mMeshes[k], 0};
    }
    for (unsigned k = 0; k < n->mNumChildren; k++) {
        int rc = walk(c, n->mChildren[k], me, depth + 1);
        if (rc) return rc;
    }
    return DF_OK;
}

static int find_node(const ctx_t *c, const char *name)
{
    for (int i = 0; i < c->n_nodes; i++)
        if (!strcmp(c->nodes[i].ai->mName.data, name)) return i;
    return -1;
}

/* The node a bone moves with and its offset matrix. A bone without a node (a broken exporter:
 * X/anim_test.x names 4 bones but stores 2) follows the mesh's own node rigidly: offset = I,
 * i.e. those vertices keep their bind pose relative to the mesh's node. */
static int bone_target(const ctx_t *c, const inst_t *in, const struct aiBone *b, double off[16])
{
    int n = find_node(c, b->mName.data);
    if (n >= 0) {
        if (off) m4_from_ai(&b->mOffsetMatrix, off);
        return n;
    }
    if (off) {
        memset(off, 0, 16 * sizeof *off);
        off[0] = off[5] = off[10] = off[15] = 1;
    }
    return in->node;
}

static int is_ancestor_or_self(const ctx_t *c, int a, int n)
{
    for (; n >= 0; n = c->nodes[n].parent)
        if (n == a) return 1;
    return 0;
}

#define MNAME(am) ((am)->mName.length ? (am)->mName.data : "(unnamed)")

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Make names unique and non-empty: "" -> prefix<i>, repeats get ".<k>". */
static int unique_name(char **names, int i, const char *want, const char *prefix, size_t maxlen)
{
    char base[256], buf[300];
    if (want && *want) snprintf(base, sizeof base, "%.250s", want);
    else snprintf(base, sizeof base, "%s%d", prefix, i);
    if (strlen(base) > maxlen) base[maxlen] = 0;
    snprintf(buf, sizeof buf, "%s", base);
    for (int k = 1;; k++) {
        int clash = 0;
        for (int j = 0; j < i && !clash; j++) clash = !strcmp(names[j], buf);
        if (!clash) break;
        snprintf(buf, sizeof buf, "%.*s.%d", (int)(maxlen > 8 ? maxlen - 8 : maxlen), base, k);
    }
    names[i] = xstrdup(buf);
    return names[i] != NULL;
}

/* ------------------------------------------------------------------ import */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int ext_is(const char *path, const char *ext)
{
    const char *d = strrchr(path, '.');
    return d && !strcasecmp(d + 1, ext);
}

/* State shared by the import stages below; each stage returns DF_OK or an error (set in err). */
typedef struct imp {
    const char *path;
    df_rigged_data_t *out;
    df__import_summary_t *sum;
    df_error_t *err;
    df_limits_t lim;
    const struct aiScene *sc;
    ctx_t c;
    int use_joints, all_normals, J;
    int64_t N, T, M;      /* M: global morph targets (controls) */
    int64_t ML;           /* the meshes' own targets, all instances */
    int *vbase, *mbase;   /* per instance: first vertex / first own target (n_insts + 1) */
    int *gmap;            /* [ML] own target -> global control */
    char **gnames;        /* [M] the controls' names */
    int per_mesh;         /* opts->morphs_per_mesh */
    double *X;            /* per instance: mesh space -> bind space (16 each) */
    double *ibm;          /* per node: inverse bind (16 each), valid where ibm_set */
    char *ibm_set;
} imp_t;

static int oom(imp_t *s) { return df_error_set(s->err, DF_ENOMEM, "out of memory"); }

/* Which mesh instances, whether the model needs joints, and which nodes are joints. */
static int select_joints(imp_t *s)
{
    const struct aiScene *sc = s->sc;
    ctx_t *c = &s->c;
    /* skinned meshes once (their bones place them), others per instance */
    int any_bones = 0;
    for (unsigned m = 0; m < sc->mNumMeshes; m++) any_bones |= sc->mMeshes[m]->mNumBones > 0;
    char *seen = calloc(sc->mNumMeshes, 1);
    if (!seen) return oom(s);
    int w = 0;
    for (int i = 0; i < c->n_insts; i++) {
        const struct aiMesh *am = sc->mMeshes[c->insts[i].mesh];
        if (am->mNumBones > 0 && seen[c->insts[i].mesh]) continue;
        seen[c->insts[i].mesh] = 1;
        c->insts[w++] = c->insts[i];
    }
    c->n_insts = w;
    free(seen);
    /* an unskinned scene needs joints only if an animation moves a node above a mesh */
    s->use_joints = any_bones;
    for (unsigned a = 0; a < sc->mNumAnimations && !s->use_joints; a++)
        for (unsigned ch = 0; ch < sc->mAnimations[a]->mNumChannels && !s->use_joints; ch++) {
            int n = find_node(c, sc->mAnimations[a]->mChannels[ch]->mNodeName.data);
            for (int i = 0; n >= 0 && i < c->n_insts && !s->use_joints; i++)
                s->use_joints = is_ancestor_or_self(c, n, c->insts[i].node);
        }
    if (!s->use_joints) return DF_OK;
    /* joints: bones, rigid mesh nodes, and all their ancestors */
    for (int i = 0; i < c->n_insts; i++) {
        const struct aiMesh *am = sc->mMeshes[c->insts[i].mesh];
        if (am->mNumBones == 0) {
            c->insts[i].rigid = 1;
            c->nodes[c->insts[i].node].mark = 1;
            s->sum->n_rigid_meshes++;
        }
        for (unsigned b = 0; b < am->mNumBones; b++) {
            int n = find_node(c, am->mBones[b]->mName.data);
            if (n < 0) {
                fprintf(stderr, "import: warning: mesh '%s' bone '%s' has no node in the "
                        "hierarchy; its vertices follow the mesh's node '%s' rigidly\n",
                        MNAME(am), am->mBones[b]->mName.data,
                        c->nodes[c->insts[i].node].ai->mName.data);
                s->sum->n_missing_bones++;
                n = c->insts[i].node;
            } else if (!c->nodes[n].mark) s->sum->n_bones++;
            c->nodes[n].mark = 1;
        }
    }
    for (int n = c->n_nodes - 1; n >= 0; n--) /* children follow parents: one pass up */
        if (c->nodes[n].mark && c->nodes[n].parent >= 0) c->nodes[c->nodes[n].parent].mark = 1;
    for (int n = 0; n < c->n_nodes; n++)
        if (c->nodes[n].mark) c->nodes[n].joint = s->J++;
    if (s->J > s->lim.max_joints)
        return df_error_set(s->err, DF_ELIMIT, "%s: %d joints (limit %lld)", s->path, s->J,
                            (long long)s->lim.max_joints);
    return DF_OK;
}

/* The name of instance i's target k as the file gives it (unnamed: from the mesh). */
static void morph_name(const struct aiMesh *am, unsigned k, char *nm, size_t len)
{
    const struct aiAnimMesh *an = am->mAnimMeshes[k];
    if (an->mName.length) snprintf(nm, len, "%.200s", an->mName.data);
    else snprintf(nm, len, "%.200s%s%u", am->mName.data, am->mName.length ? "_" : "morph", k);
}

/* gmap and gnames: each mesh's targets onto the global controls. A target takes the control
 * of an earlier mesh's target of the same name, unless this mesh already uses that control
 * (a repeated name within one mesh) or per_mesh; otherwise a new control, its name made
 * unique. */
static int map_morphs(imp_t *s)
{
    const ctx_t *c = &s->c;
    s->gmap = malloc(sizeof *s->gmap * (size_t)(s->ML ? s->ML : 1));
    s->gnames = calloc((size_t)(s->ML ? s->ML : 1), sizeof *s->gnames);
    char **want = calloc((size_t)(s->ML ? s->ML : 1), sizeof *want); /* as the file names it */
    int *last = malloc(sizeof *last * (size_t)(s->ML ? s->ML : 1));     /* last instance using it */
    int rc = DF_OK;
    if (!s->gmap || !s->gnames || !want || !last) rc = oom(s);
    s->M = 0;
    for (int i = 0; i < c->n_insts && !rc; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        for (unsigned k = 0; k < am->mNumAnimMeshes && !rc; k++) {
            char nm[300];
            morph_name(am, k, nm, sizeof nm);
            int64_t g = -1;
            for (int64_t q = 0; q < s->M && !s->per_mesh && g < 0; q++)
                if (last[q] != i && !strcmp(want[q], nm)) g = q;
            if (g >= 0) {
                s->sum->n_shared_morphs++;
            } else {
                g = s->M++;
                if (!(want[g] = xstrdup(nm)) || !unique_name(s->gnames, (int)g, nm, "morph", 200))
                    rc = oom(s);
            }
            last[g] = i;
            s->gmap[s->mbase[i] + (int)k] = (int)g;
        }
    }
    for (int64_t q = 0; want && q < s->ML; q++) free(want[q]);
    free(want), free(last);
    return rc;
}

/* Vertex/triangle/morph counts and per-instance offsets, against the limits. */
static int count(imp_t *s)
{
    const ctx_t *c = &s->c;
    s->vbase = calloc((size_t)c->n_insts + 1, sizeof *s->vbase);
    s->mbase = calloc((size_t)c->n_insts + 1, sizeof *s->mbase);
    s->X = calloc((size_t)c->n_insts * 16, sizeof *s->X);
    if (!s->vbase || !s->mbase || !s->X) return oom(s);
    s->all_normals = 1;
    for (int i = 0; i < c->n_insts; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        s->vbase[i] = (int)s->N;
        s->mbase[i] = (int)s->ML;
        s->N += am->mNumVertices;
        s->ML += am->mNumAnimMeshes;
        for (unsigned fi = 0; fi < am->mNumFaces; fi++) {
            if (am->mFaces[fi].mNumIndices == 3) s->T++;
            else s->sum->n_skipped_faces++;
        }
        s->all_normals &= am->mNormals != NULL;
        if (s->N > s->lim.max_vertices || s->N > INT32_MAX)
            return df_error_set(s->err, DF_ELIMIT, "%s: more than %lld vertices", s->path,
                                (long long)s->lim.max_vertices);
    }
    s->vbase[c->n_insts] = (int)s->N;
    s->mbase[c->n_insts] = (int)s->ML;
    s->sum->n_meshes = c->n_insts;
    if (s->T == 0)
        return df_error_set(s->err, DF_EINVAL, "%s: no triangles (only points or lines)", s->path);
    /* the meshes' own targets, before names join them: 4 x the controls' limit (and the name
     * matching below, quadratic in them, a few seconds at worst) */
    if (s->ML > s->lim.max_morphs * 4)
        return df_error_set(s->err, DF_ELIMIT, "%s: %lld morph targets in its meshes (limit %lld)",
                            s->path, (long long)s->ML, (long long)s->lim.max_morphs * 4);
    int rc = map_morphs(s);
    if (rc) return rc;
    if (s->M > s->lim.max_morphs)
        return df_error_set(s->err, DF_ELIMIT, "%s: %lld morph targets (limit %lld)", s->path,
                            (long long)s->M, (long long)s->lim.max_morphs);
    return DF_OK;
}

/* Per instance X (mesh space -> bind space) and per bone node IBM: see DESIGN above. */
static int bind_transforms(imp_t *s)
{
    const ctx_t *c = &s->c;
    s->ibm = calloc((size_t)c->n_nodes * 16, sizeof *s->ibm);
    s->ibm_set = calloc((size_t)c->n_nodes, 1);
    if (!s->ibm || !s->ibm_set) return oom(s);
    for (int i = 0; i < c->n_insts; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        double *Xi = s->X + 16 * i;
        const node_t *nd = &c->nodes[c->insts[i].node];
        if (!s->use_joints) { memcpy(Xi, nd->global, sizeof nd->global); continue; }
        if (c->insts[i].rigid) { /* offset = I: mesh space is the node's space */
            int n = c->insts[i].node;
            if (s->ibm_set[n]) {
                if (!m4_inv_affine(s->ibm + 16 * n, Xi)) goto singular;
            } else {
                memcpy(Xi, nd->global, sizeof nd->global);
                if (!m4_inv_affine(nd->global, s->ibm + 16 * n)) goto singular;
                s->ibm_set[n] = 1;
            }
            continue;
        }
        int have = 0;
        for (unsigned b = 0; b < am->mNumBones && !have; b++) {
            double off[16], inv[16];
            int n = bone_target(c, &c->insts[i], am->mBones[b], off);
            if (s->ibm_set[n]) {
                if (!m4_inv_affine(s->ibm + 16 * n, inv)) goto singular;
                m4_mul(inv, off, Xi);
                have = 1;
            }
        }
        if (!have) memcpy(Xi, nd->global, sizeof nd->global);
        double Xinv[16];
        if (!m4_inv_affine(Xi, Xinv)) goto singular;
        for (unsigned b = 0; b < am->mNumBones; b++) {
            double off[16];
            int n = bone_target(c, &c->insts[i], am->mBones[b], off);
            if (!s->ibm_set[n]) {
                m4_mul(off, Xinv, s->ibm + 16 * n);
                s->ibm_set[n] = 1;
            } else {
                double chk[16], e = 0, mag = 0;
                m4_mul(s->ibm + 16 * n, Xi, chk);
                for (int k = 0; k < 12; k++) {
                    e = fmax(e, fabs(chk[k] - off[k]));
                    mag = fmax(mag, fabs(off[k]));
                }
                if (e > 1e-4 * fmax(1.0, mag)) s->sum->n_inconsistent_binds++;
            }
        }
    }
    return DF_OK;
singular:
    return df_error_set(s->err, DF_EFORMAT, "%s: a node or offset matrix is singular", s->path);
}

/* Positions and normals in bind space, triangles with offset indices. */
static int write_mesh(imp_t *s, const df__import_opts_t *opts)
{
    df_rigged_data_t *out = s->out;
    const ctx_t *c = &s->c;
    out->n_vertices = s->N;
    out->n_triangles = s->T;
    out->positions = malloc((size_t)s->N * 3 * sizeof(float));
    out->triangles = malloc((size_t)s->T * 3 * sizeof(uint32_t));
    out->normals = s->all_normals ? malloc((size_t)s->N * 3 * sizeof(float)) : NULL;
    out->skinning = opts && opts->skinning ? opts->skinning : "lbs";
    if (!out->positions || !out->triangles || (s->all_normals && !out->normals)) return oom(s);
    int64_t t = 0;
    for (int i = 0; i < c->n_insts; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        const double *Xi = s->X + 16 * i;
        double Ninv[16], NT[16]; /* normals: inverse transpose */
        m4_inv_affine(Xi, Ninv);
        for (int r = 0; r < 4; r++)
            for (int q = 0; q < 4; q++) NT[r * 4 + q] = Ninv[q * 4 + r];
        for (unsigned v = 0; v < am->mNumVertices; v++) {
            size_t g = (size_t)s->vbase[i] + v;
            double p[3] = {am->mVertices[v].x, am->mVertices[v].y, am->mVertices[v].z}, o[3];
            m4_point(Xi, p, o);
            for (int k = 0; k < 3; k++) out->positions[g * 3 + k] = (float)o[k];
            if (out->normals) {
                double nn[3] = {am->mNormals[v].x, am->mNormals[v].y, am->mNormals[v].z};
                m4_vec(NT, nn, o);
                double l = sqrt(o[0] * o[0] + o[1] * o[1] + o[2] * o[2]);
                if (!(l > 1e-20) || !isfinite(l)) { o[0] = 0; o[1] = 1; o[2] = 0; l = 1; }
                for (int k = 0; k < 3; k++) out->normals[g * 3 + k] = (float)(o[k] / l);
            }
        }
        for (unsigned fi = 0; fi < am->mNumFaces; fi++) {
            const struct aiFace *fc = &am->mFaces[fi];
            if (fc->mNumIndices != 3) continue;
            for (int k = 0; k < 3; k++)
                out->triangles[t * 3 + k] = (uint32_t)(s->vbase[i] + (int)fc->mIndices[k]);
            t++;
        }
    }
    return DF_OK;
}

/* Morph deltas (anim mesh - base, in bind space) and unique names. */
static int write_morphs(imp_t *s)
{
    df_rigged_data_t *out = s->out;
    const ctx_t *c = &s->c;
    if (s->M == 0) return DF_OK;
    out->n_morphs = s->M;
    out->morph_deltas = calloc((size_t)s->M * s->N * 3, sizeof(float));
    out->morph_names = calloc((size_t)s->M, sizeof(char *));
    if (!out->morph_deltas || !out->morph_names) return oom(s);
    /* normal targets (glTF NORMAL): kept when the base mesh has normals and
     * at least one target has them; the delta is taken through the same
     * inverse transpose and scale as the base normal, so base + sum w d is
     * the morphed normal up to length (the evaluation normalises) */
    int any_n = 0;
    for (int i = 0; i < c->n_insts && out->normals; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        for (unsigned k = 0; k < am->mNumAnimMeshes; k++)
            any_n |= am->mAnimMeshes[k]->mNormals != NULL && am->mNormals != NULL;
    }
    if (any_n && !(out->morph_normal_deltas = calloc((size_t)s->M * s->N * 3, sizeof(float))))
        return oom(s);
    for (int i = 0; i < c->n_insts; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        const double *Xi = s->X + 16 * i;
        for (unsigned k = 0; k < am->mNumAnimMeshes; k++) {
            const struct aiAnimMesh *an = am->mAnimMeshes[k];
            int gm = s->gmap[s->mbase[i] + (int)k];
            if (!out->morph_names[gm]) {
                out->morph_names[gm] = s->gnames[gm];
                s->gnames[gm] = NULL;
            }
            if (!an->mVertices) continue;
            if (an->mNumVertices != am->mNumVertices)
                return df_error_set(s->err, DF_EFORMAT, "%s: mesh '%s' morph target %u has %u "
                                    "vertices, the mesh has %u", s->path, MNAME(am), k,
                                    an->mNumVertices, am->mNumVertices);
            for (unsigned v = 0; v < am->mNumVertices; v++) {
                double d[3] = {an->mVertices[v].x - am->mVertices[v].x,
                               an->mVertices[v].y - am->mVertices[v].y,
                               an->mVertices[v].z - am->mVertices[v].z}, o[3];
                m4_vec(Xi, d, o);
                float *dst = out->morph_deltas + ((size_t)gm * s->N + s->vbase[i] + v) * 3;
                for (int q = 0; q < 3; q++) dst[q] = (float)o[q];
            }
            if (!out->morph_normal_deltas || !an->mNormals || !am->mNormals) continue;
            double Ninv[16], NT[16];
            m4_inv_affine(Xi, Ninv);
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++) NT[r * 4 + q] = Ninv[q * 4 + r];
            for (unsigned v = 0; v < am->mNumVertices; v++) {
                double nb[3] = {am->mNormals[v].x, am->mNormals[v].y, am->mNormals[v].z}, ob[3];
                double d[3] = {an->mNormals[v].x - nb[0], an->mNormals[v].y - nb[1],
                               an->mNormals[v].z - nb[2]}, o[3];
                m4_vec(NT, nb, ob);
                m4_vec(NT, d, o);
                double l = sqrt(ob[0] * ob[0] + ob[1] * ob[1] + ob[2] * ob[2]);
                if (!(l > 1e-20) || !isfinite(l) || !isfinite(o[0] + o[1] + o[2])) continue;
                float *dst = out->morph_normal_deltas + ((size_t)gm * s->N + s->vbase[i] + v) * 3;
                for (int q = 0; q < 3; q++) dst[q] = (float)(o[q] / l);
            }
        }
    }
    return DF_OK;
}

/* Joint names, parents, rest TRS, inverse bind matrices. */
static int write_skeleton(imp_t *s)
{
    df_rigged_data_t *out = s->out;
    const ctx_t *c = &s->c;
    int J = s->J;
    out->n_joints = J;
    out->joint_names = calloc((size_t)J, sizeof(char *));
    out->parents = malloc((size_t)J * sizeof(int32_t));
    out->rest_translations = malloc((size_t)J * 3 * sizeof(float));
    out->rest_rotations = malloc((size_t)J * 4 * sizeof(float));
    out->rest_scales = malloc((size_t)J * 3 * sizeof(float));
    out->inverse_bind = malloc((size_t)J * 16 * sizeof(float));
    if (!out->joint_names || !out->parents || !out->rest_translations || !out->rest_rotations ||
        !out->rest_scales || !out->inverse_bind)
        return oom(s);
    double worst = 0;
    for (int n = 0; n < c->n_nodes; n++) {
        int j = c->nodes[n].joint;
        if (j < 0) continue;
        if (!unique_name(out->joint_names, j, c->nodes[n].ai->mName.data, "node", 200)) return oom(s);
        out->parents[j] = c->nodes[n].parent >= 0 ? c->nodes[c->nodes[n].parent].joint : -1;
        double t[3], q[4], sc[3];
        worst = fmax(worst, trs_decompose(c->nodes[n].local, t, q, sc));
        for (int k = 0; k < 3; k++) {
            out->rest_translations[j * 3 + k] = (float)t[k];
            out->rest_scales[j * 3 + k] = (float)sc[k];
        }
        for (int k = 0; k < 4; k++) out->rest_rotations[j * 4 + k] = (float)q[k];
        double inv[16];
        const double *src = s->ibm + 16 * n;
        if (!s->ibm_set[n]) { /* a joint no vertex uses: its own inverse global rest */
            if (!m4_inv_affine(c->nodes[n].global, inv))
                return df_error_set(s->err, DF_EFORMAT, "%s: node '%s' has a singular transform",
                                    s->path, c->nodes[n].ai->mName.data);
            src = inv;
        }
        for (int k = 0; k < 16; k++) out->inverse_bind[j * 16 + k] = (float)src[k];
    }
    if (worst > 1e-4)
        fprintf(stderr, "import: warning: a node transform has shear (TRS error %.3g); it is "
                        "approximated by T*R*S\n", worst);
    return DF_OK;
}

/* Skin: per vertex, weights summed per joint, <= 8, heaviest first, normalised. */
static int write_skin(imp_t *s)
{
    enum { MAXI = DF__IMPORT_MAX_INFLUENCES };
    df_rigged_data_t *out = s->out;
    const ctx_t *c = &s->c;
    int64_t N = s->N;
    int rc = DF_OK, K = 1;
    int32_t *cnt = calloc((size_t)N, sizeof *cnt);
    int32_t *tj = malloc((size_t)N * MAXI * sizeof *tj);
    float *tw = malloc((size_t)N * MAXI * sizeof *tw);
    if (!cnt || !tj || !tw) { rc = oom(s); goto done; }
    for (int i = 0; i < c->n_insts && !rc; i++) {
        const struct aiMesh *am = s->sc->mMeshes[c->insts[i].mesh];
        if (c->insts[i].rigid) {
            int j = c->nodes[c->insts[i].node].joint;
            for (unsigned v = 0; v < am->mNumVertices; v++) {
                size_t g = (size_t)s->vbase[i] + v;
                cnt[g] = 1;
                tj[g * MAXI] = j;
                tw[g * MAXI] = 1;
            }
            continue;
        }
        for (unsigned b = 0; b < am->mNumBones; b++) {
            const struct aiBone *bn = am->mBones[b];
            int j = c->nodes[bone_target(c, &c->insts[i], bn, NULL)].joint;
            for (unsigned w = 0; w < bn->mNumWeights; w++) {
                unsigned v = bn->mWeights[w].mVertexId;
                float wt = bn->mWeights[w].mWeight;
                if (v >= am->mNumVertices) {
                    rc = df_error_set(s->err, DF_EFORMAT, "%s: mesh '%s' bone '%s' weights vertex "
                                      "%u of %u", s->path, MNAME(am), bn->mName.data, v,
                                      am->mNumVertices);
                    goto done;
                }
                if (!(wt > 0)) continue;
                size_t g = (size_t)s->vbase[i] + v;
                int k;
                for (k = 0; k < cnt[g] && k < MAXI; k++)
                    if (tj[g * MAXI + k] == j) { tw[g * MAXI + k] += wt; break; }
                if (k < cnt[g] && k < MAXI) continue;
                if (cnt[g] < MAXI) { tj[g * MAXI + cnt[g]] = j; tw[g * MAXI + cnt[g]] = wt; }
                cnt[g]++; /* counts beyond MAXI too, for the error message */
            }
        }
        for (unsigned v = 0; v < am->mNumVertices; v++) {
            size_t g = (size_t)s->vbase[i] + v;
            if (cnt[g] > MAXI) {
                rc = df_error_set(s->err, DF_EUNSUPPORTED, "%s: mesh '%s' vertex %u has %d "
                                  "influences; at most %d are supported", s->path, MNAME(am), v,
                                  cnt[g], MAXI);
                goto done;
            }
            if (cnt[g] == 0) {
                rc = df_error_set(s->err, DF_EFORMAT, "%s: mesh '%s' vertex %u has no bone weight "
                                  "(a skinned mesh must weight every vertex)", s->path, MNAME(am), v);
                goto done;
            }
            if (cnt[g] > K) K = cnt[g];
        }
    }
    out->n_influences = K;
    out->skin_joints = calloc((size_t)N * K, sizeof(int32_t));
    out->skin_weights = calloc((size_t)N * K, sizeof(float));
    if (!out->skin_joints || !out->skin_weights) { rc = oom(s); goto done; }
    for (int64_t v = 0; v < N; v++) {
        double sum = 0;
        int32_t *J_ = tj + v * MAXI;
        float *W_ = tw + v * MAXI;
        for (int k = 0; k < cnt[v]; k++) sum += W_[k];
        for (int k = 0; k < cnt[v]; k++) { /* selection sort, heaviest first */
            int best = k;
            for (int q = k + 1; q < cnt[v]; q++)
                if (W_[q] > W_[best]) best = q;
            float w0 = W_[k]; int32_t j0 = J_[k];
            W_[k] = W_[best]; J_[k] = J_[best];
            W_[best] = w0; J_[best] = j0;
            out->skin_joints[v * K + k] = J_[k];
            out->skin_weights[v * K + k] = (float)(W_[k] / sum);
        }
    }
done:
    free(cnt); free(tj); free(tw);
    return rc;
}

/* Sorted, de-duplicated key times (ticks) of the channels of animation an that move this
 * model; *chj[j] = the channel of joint j. *times new. */
static int clip_times(imp_t *s, const struct aiAnimation *an, const struct aiNodeAnim **chj,
                      double **times_out, size_t *nt_out, int *has_morph)
{
    const ctx_t *c = &s->c;
    size_t total = 0;
    for (unsigned ch = 0; ch < an->mNumChannels; ch++) {
        const struct aiNodeAnim *na = an->mChannels[ch];
        total += (size_t)na->mNumPositionKeys + na->mNumRotationKeys + na->mNumScalingKeys;
    }
    for (unsigned ch = 0; ch < an->mNumMorphMeshChannels; ch++) total += an->mMorphMeshChannels[ch]->mNumKeys;
    double *times = malloc((total ? total : 1) * sizeof *times);
    if (!times) return oom(s);
    size_t nt = 0;
    for (unsigned ch = 0; ch < an->mNumChannels; ch++) {
        const struct aiNodeAnim *na = an->mChannels[ch];
        int n = find_node(c, na->mNodeName.data);
        if (n < 0 || c->nodes[n].joint < 0) { s->sum->n_ignored_channels++; continue; }
        chj[c->nodes[n].joint] = na;
        for (unsigned k = 0; k < na->mNumPositionKeys; k++) times[nt++] = na->mPositionKeys[k].mTime;
        for (unsigned k = 0; k < na->mNumRotationKeys; k++) times[nt++] = na->mRotationKeys[k].mTime;
        for (unsigned k = 0; k < na->mNumScalingKeys; k++) times[nt++] = na->mScalingKeys[k].mTime;
    }
    *has_morph = 0;
    for (unsigned ch = 0; ch < an->mNumMorphMeshChannels; ch++) {
        const struct aiMeshMorphAnim *ma = an->mMorphMeshChannels[ch];
        for (int i = 0; i < c->n_insts; i++)
            if (!strcmp(c->nodes[c->insts[i].node].ai->mName.data, ma->mName.data) &&
                s->mbase[i + 1] > s->mbase[i])
                *has_morph = 1;
        for (unsigned k = 0; k < ma->mNumKeys; k++) times[nt++] = ma->mKeys[k].mTime;
    }
    if (nt > 1) qsort(times, nt, sizeof *times, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < nt; i++)
        if (u == 0 || times[i] - times[u - 1] > 1e-9 * fmax(1.0, fabs(times[i]))) times[u++] = times[i];
    *times_out = times;
    *nt_out = u;
    return DF_OK;
}

/* Joint tracks of one clip: every channel sampled at every union time; world matrices when
 * a scale key leaves the rest scale (our clips carry no per-key scale). */
static int clip_joints(imp_t *s, df_rigged_clip_t *cl, const struct aiNodeAnim *const *chj,
                       const double *times, size_t nt)
{
    df_rigged_data_t *out = s->out;
    int J = s->J, scaled = 0;
    for (int j = 0; j < J && !scaled; j++) {
        const struct aiNodeAnim *na = chj[j];
        if (!na) continue;
        const float *rs = out->rest_scales + j * 3;
        for (unsigned k = 0; k < na->mNumScalingKeys && !scaled; k++) {
            const struct aiVector3D *v = &na->mScalingKeys[k].mValue;
            double d = fmax(fabs(fabs(v->x) - fabs(rs[0])),
                            fmax(fabs(fabs(v->y) - fabs(rs[1])), fabs(fabs(v->z) - fabs(rs[2]))));
            if (d > 1e-5 * fmax(1.0, fabs(rs[1]))) scaled = 1;
        }
    }
    double *world = NULL;
    if (scaled) {
        cl->matrices = malloc(nt * (size_t)J * 12 * sizeof(float));
        world = malloc((size_t)J * 16 * sizeof(double));
        s->sum->n_matrix_clips++;
        if (!cl->matrices || !world) { free(world); return oom(s); }
    } else {
        cl->rotations = malloc(nt * (size_t)J * 4 * sizeof(float));
        cl->translations = malloc(nt * (size_t)J * 3 * sizeof(float));
        if (!cl->rotations || !cl->translations) return oom(s);
    }
    for (size_t fi = 0; fi < nt; fi++) {
        double t = times[fi];
        for (int j = 0; j < J; j++) {
            double tv[3], q[4], sc[3];
            for (int k = 0; k < 3; k++) {
                tv[k] = out->rest_translations[j * 3 + k];
                sc[k] = out->rest_scales[j * 3 + k];
            }
            for (int k = 0; k < 4; k++) q[k] = out->rest_rotations[j * 4 + k];
            const struct aiNodeAnim *na = chj[j];
            if (na) {
                if (na->mNumPositionKeys) sample_vec(na->mPositionKeys, na->mNumPositionKeys, t, tv);
                if (na->mNumRotationKeys) sample_quat(na->mRotationKeys, na->mNumRotationKeys, t, q);
                if (na->mNumScalingKeys) sample_vec(na->mScalingKeys, na->mNumScalingKeys, t, sc);
            }
            if (scaled) {
                double loc[16];
                trs_compose(tv, q, sc, loc);
                int p = out->parents[j];
                if (p >= 0) m4_mul(world + 16 * p, loc, world + 16 * j);
                else memcpy(world + 16 * j, loc, sizeof loc);
                for (int k = 0; k < 12; k++) cl->matrices[(fi * J + j) * 12 + k] = (float)world[16 * j + k];
            } else {
                for (int k = 0; k < 3; k++) cl->translations[(fi * J + j) * 3 + k] = (float)tv[k];
                for (int k = 0; k < 4; k++) cl->rotations[(fi * J + j) * 4 + k] = (float)q[k];
            }
        }
    }
    free(world);
    return DF_OK;
}

/* Morph weights of one clip: aiMeshMorphAnim channels named after the mesh's node, lerped.
 * Each instance's own targets first (tmp), then onto the controls: a shared control takes
 * the first instance that animates it; a later one that differs (1e-4) is counted. */
static int clip_weights(imp_t *s, df_rigged_clip_t *cl, const struct aiAnimation *an,
                        const double *times, size_t nt)
{
    const ctx_t *c = &s->c;
    int64_t M = s->M;
    int nmax = 0;
    for (int i = 0; i < c->n_insts; i++)
        if (s->mbase[i + 1] - s->mbase[i] > nmax) nmax = s->mbase[i + 1] - s->mbase[i];
    cl->weights = calloc(nt * (size_t)M, sizeof(float));
    float *tmp = malloc(nt * (size_t)(nmax ? nmax : 1) * sizeof(float));
    char *set = calloc((size_t)(M ? M : 1), 1), *bad = calloc((size_t)(M ? M : 1), 1);
    if (!cl->weights || !tmp || !set || !bad) {
        free(tmp), free(set), free(bad);
        return oom(s);
    }
    for (int i = 0; i < c->n_insts; i++) {
        const int nm = s->mbase[i + 1] - s->mbase[i];
        int any = 0;
        if (nm == 0) continue;
        memset(tmp, 0, nt * (size_t)nm * sizeof(float));
        for (unsigned ch = 0; ch < an->mNumMorphMeshChannels; ch++) {
            const struct aiMeshMorphAnim *ma = an->mMorphMeshChannels[ch];
            if (ma->mNumKeys == 0 || strcmp(c->nodes[c->insts[i].node].ai->mName.data, ma->mName.data))
                continue;
            any = 1;
            for (size_t fi = 0; fi < nt; fi++) {
                double u;
                unsigned k0 = seg_find(&ma->mKeys[0].mTime, sizeof ma->mKeys[0], ma->mNumKeys,
                                       times[fi], &u);
                unsigned k1 = k0 + (u > 0);
                for (int side = 0; side < 2; side++) {
                    const struct aiMeshMorphKey *mk = &ma->mKeys[side ? k1 : k0];
                    double wgt = side ? u : 1 - u;
                    for (unsigned q = 0; q < mk->mNumValuesAndWeights; q++)
                        if ((int)mk->mValues[q] < nm)
                            tmp[fi * nm + mk->mValues[q]] += (float)(wgt * mk->mWeights[q]);
                }
            }
        }
        if (!any) continue;
        for (int k = 0; k < nm; k++) {
            const int g = s->gmap[s->mbase[i] + k];
            for (size_t fi = 0; fi < nt; fi++) {
                float *dst = &cl->weights[fi * M + g];
                if (!set[g]) *dst = tmp[fi * nm + k];
                else if (!bad[g] && fabsf(*dst - tmp[fi * nm + k]) > 1e-4f) {
                    bad[g] = 1;
                    s->sum->n_morph_conflicts++;
                }
            }
            set[g] = 1;
        }
    }
    free(tmp), free(set), free(bad);
    return DF_OK;
}

/* One clip per aiAnimation that moves something of this model. */
static int write_clips(imp_t *s)
{
    const struct aiScene *sc = s->sc;
    df_rigged_data_t *out = s->out;
    if (sc->mNumAnimations == 0 || (!s->use_joints && s->M == 0)) return DF_OK;
    out->clips = calloc(sc->mNumAnimations, sizeof(df_rigged_clip_t));
    char **cnames = calloc(sc->mNumAnimations, sizeof(char *));
    const struct aiNodeAnim **chj = malloc((size_t)(s->J ? s->J : 1) * sizeof *chj);
    int rc = DF_OK;
    if (!out->clips || !cnames || !chj) { rc = oom(s); goto done; }
    for (unsigned a = 0; a < sc->mNumAnimations && !rc; a++) {
        const struct aiAnimation *an = sc->mAnimations[a];
        double tps = an->mTicksPerSecond > 0 ? an->mTicksPerSecond : 25.0;
        double *times = NULL;
        size_t nt = 0;
        int has_morph = 0;
        memset(chj, 0, (size_t)(s->J ? s->J : 1) * sizeof *chj);
        if ((rc = clip_times(s, an, chj, &times, &nt, &has_morph))) break;
        if (nt == 0 || (!has_morph && s->J == 0)) {
            fprintf(stderr, "import: animation '%s' moves nothing this model has; skipped\n",
                    an->mName.data);
        } else if ((int64_t)nt > s->lim.max_clip_frames) {
            rc = df_error_set(s->err, DF_ELIMIT, "%s: animation '%s' has %zu key times (limit %lld)",
                              s->path, an->mName.data, nt, (long long)s->lim.max_clip_frames);
        } else if (!unique_name(cnames, (int)out->n_clips, an->mName.data, "clip", DF_NAME_MAX - 1)) {
            rc = oom(s);
        } else {
            df_rigged_clip_t *cl = &out->clips[out->n_clips];
            snprintf(cl->name, sizeof cl->name, "%s", cnames[out->n_clips]);
            out->n_clips++; /* from here on df__import_free releases it */
            cl->n_keys = (int64_t)nt;
            cl->times = malloc(nt * sizeof(float));
            if (!cl->times) rc = oom(s);
            for (size_t i = 0; !rc && i < nt; i++) {
                cl->times[i] = (float)(times[i] / tps);
                if (i && !(cl->times[i] > cl->times[i - 1])) /* distinct doubles, equal floats */
                    cl->times[i] = nextafterf(cl->times[i - 1], INFINITY);
            }
            if (!rc && s->J > 0) rc = clip_joints(s, cl, chj, times, nt);
            if (!rc && has_morph) rc = clip_weights(s, cl, an, times, nt);
        }
        free(times);
    }
done:
    if (cnames)
        for (unsigned i = 0; i < sc->mNumAnimations; i++) free(cnames[i]);
    free(cnames);
    free(chj);
    return rc;
}

int df__import_scene(const char *path, const df__import_opts_t *opts, df_rigged_data_t *out,
                     df__import_summary_t *sum, df_error_t *err)
{
    memset(out, 0, sizeof *out);
    memset(sum, 0, sizeof *sum);
    FILE *f = fopen(path, "rb");
    if (!f) return df_error_set(err, DF_EIO, "%s: cannot open: %s", path, strerror(errno));
    fclose(f);
    const struct aiScene *sc = aiImportFile(
        path, aiProcess_Triangulate | aiProcess_JoinIdenticalVertices | aiProcess_ValidateDataStructure);
    if (!sc)
        return df_error_set(err, DF_EFORMAT, "%s: assimp cannot read it: %s", path, aiGetErrorString());
    imp_t s = {.path = path, .out = out, .sum = sum, .err = err, .sc = sc,
               .per_mesh = opts && opts->morphs_per_mesh};
    s.c.sc = sc;
    s.c.err = err;
    df_limits_default(&s.lim);
    int rc = DF_OK;
    if (!sc->mRootNode || sc->mNumMeshes == 0)
        rc = df_error_set(err, DF_EINVAL, "%s: no mesh in this file (%u animations)", path,
                          sc->mNumAnimations);
    else if (sc->mFlags & AI_SCENE_FLAGS_INCOMPLETE)
        rc = df_error_set(err, DF_EFORMAT, "%s: assimp read an incomplete scene", path);
    else if (!(rc = walk(&s.c, sc->mRootNode, -1, 0)) && s.c.n_insts == 0)
        rc = df_error_set(err, DF_EINVAL, "%s: no node references a mesh", path);
    sum->static_first_frame = ext_is(path, "md2") || ext_is(path, "md3") || ext_is(path, "mdl") ||
                              ext_is(path, "mdc");
    if (!rc) rc = select_joints(&s);
    if (!rc) rc = count(&s);
    if (!rc) rc = bind_transforms(&s);
    if (!rc) rc = write_mesh(&s, opts);
    if (!rc) rc = write_morphs(&s);
    if (!rc && s.use_joints) rc = write_skeleton(&s);
    if (!rc && s.use_joints) rc = write_skin(&s);
    if (!rc) rc = write_clips(&s);
    if (rc) df__import_free(out);
    for (int64_t q = 0; s.gnames && q < s.M; q++) free(s.gnames[q]);
    free(s.vbase); free(s.mbase); free(s.gmap); free(s.gnames); free(s.X); free(s.ibm); free(s.ibm_set);
    free(s.c.nodes); free(s.c.insts);
    aiReleaseImport(sc);
    return rc;
}

void df__import_free(df_rigged_data_t *d)
{
    if (!d) return;
    free(d->positions); free(d->triangles); free(d->normals); free(d->morph_deltas); free(d->morph_normal_deltas);
    if (d->morph_names)
        for (int64_t i = 0; i < d->n_morphs; i++) free(d->morph_names[i]);
    free(d->morph_names);
    if (d->joint_names)
        for (int64_t i = 0; i < d->n_joints; i++) free(d->joint_names[i]);
    free(d->joint_names); free(d->parents); free(d->rest_translations); free(d->rest_rotations);
    free(d->rest_scales); free(d->inverse_bind); free(d->skin_joints); free(d->skin_weights);
    for (size_t c = 0; c < d->n_clips; c++) {
        free(d->clips[c].times); free(d->clips[c].rotations); free(d->clips[c].translations);
        free(d->clips[c].weights); free(d->clips[c].matrices);
    }
    free(d->clips);
    memset(d, 0, sizeof *d);
}

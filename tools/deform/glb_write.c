/* glb_write.c — a decomposition with its skeleton as a glTF 2.0 binary:
 * one skinned mesh, one skin (joints + inverse bind matrices), one
 * animation with translation / rotation (/ scale) channels per joint.
 *
 * DESIGN
 * server/glb.c writes static meshes for the daemon's /mesh endpoint (no
 * skin, no animation, into proto's response buffer); this writer is the
 * tool's and shares only the container layout: 12-byte header, a JSON chunk
 * padded with spaces and one BIN chunk padded with zeros, every buffer view
 * 4-byte aligned. Accessors (in BIN order): indices (UNSIGNED_INT),
 * POSITION (with min/max), NORMAL, JOINTS_n (UNSIGNED_SHORT) and WEIGHTS_n
 * (FLOAT) per group of 4 influences, inverse bind matrices (MAT4,
 * column-major as glTF stores them), key times (with min/max), then per
 * joint its translations, rotations (x,y,z,w) and, for trs fits, scales.
 * Joint k is node k, the mesh node comes last; the scene lists the mesh
 * node and the root joints. Samplers interpolate LINEARly (quaternions
 * spherically), consecutive rotations kept in one hemisphere.
 */
#include "glb_write.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gbuf {
    char *p;
    size_t n, cap;
    int oom;
} gbuf_t;

static void gb_put(gbuf_t *b, const void *x, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

static void gb_printf(gbuf_t *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof tmp) { gb_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gb_put(b, big, (size_t)n);
    free(big);
}

static void gb_pad(gbuf_t *b, char c)
{
    while (b->n % 4) gb_put(b, &c, 1);
}

/* a buffer view + accessor over bytes appended to bin */
typedef struct acc_list {
    gbuf_t views, accs;
    int nv, na;
} acc_list_t;

static int add_accessor(acc_list_t *a, gbuf_t *bin, const void *data, size_t bytes, int ctype,
                        int64_t count, const char *type, const char *minmax)
{
    gb_pad(bin, 0);
    size_t off = bin->n;
    gb_put(bin, data, bytes);
    gb_printf(&a->views, "%s{\"buffer\":0,\"byteOffset\":%zu,\"byteLength\":%zu}",
              a->nv ? "," : "", off, bytes);
    gb_printf(&a->accs, "%s{\"bufferView\":%d,\"componentType\":%d,\"count\":%lld,\"type\":\"%s\"%s}",
              a->na ? "," : "", a->nv, ctype, (long long)count, type, minmax ? minmax : "");
    a->nv++;
    return a->na++;
}

int df__glb_write_rig(const char *path, const df_decompose_result_t *r,
                      const df_decompose_skeleton_t *s, int64_t T, const uint32_t *tris,
                      const float *times, const char *clip_name, df_error_t *err)
{
    const int B = r->n_bones, K = r->n_influences, G = (K + 3) / 4;
    const int64_t N = r->n_vertices, F = r->n_frames;
    const int with_scale = r->transforms != DF_DECOMPOSE_RIGID;
    gbuf_t json = {0}, bin = {0};
    acc_list_t al = {{0}, {0}, 0, 0};
    float *nrm = malloc(sizeof(float) * N * 3 + 4), *buf = NULL;
    uint16_t *jn = malloc(sizeof(uint16_t) * N * 4 + 8);
    float *wt = malloc(sizeof(float) * N * 4 + 4);
    size_t nbuf = (size_t)F * 4 + 16 * (size_t)B + 16;
    buf = malloc(sizeof(float) * nbuf);
    int rc = DF_OK;
    if (!nrm || !jn || !wt || !buf) {
        rc = df_error_set(err, DF_ENOMEM, "glb: out of memory");
        goto done;
    }
    /* mesh */
    int a_idx = add_accessor(&al, &bin, tris, sizeof(uint32_t) * 3 * T, 5125, 3 * T, "SCALAR", NULL);
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = 0; i < N; i++)
        for (int c = 0; c < 3; c++) {
            lo[c] = fminf(lo[c], r->rest[3 * i + c]);
            hi[c] = fmaxf(hi[c], r->rest[3 * i + c]);
        }
    char mm[256];
    snprintf(mm, sizeof mm, ",\"min\":[%.9g,%.9g,%.9g],\"max\":[%.9g,%.9g,%.9g]", lo[0], lo[1],
             lo[2], hi[0], hi[1], hi[2]);
    int a_pos = add_accessor(&al, &bin, r->rest, sizeof(float) * 3 * N, 5126, N, "VEC3", mm);
    df_decompose_vertex_normals(N, r->rest, T, tris, nrm);
    for (int64_t i = 0; i < N; i++) /* glTF wants unit normals: isolated points get +Y */
        if (nrm[3 * i] == 0 && nrm[3 * i + 1] == 0 && nrm[3 * i + 2] == 0) nrm[3 * i + 1] = 1;
    int a_nrm = add_accessor(&al, &bin, nrm, sizeof(float) * 3 * N, 5126, N, "VEC3", NULL);
    int a_j[2], a_w[2];
    for (int g = 0; g < G; g++) {
        for (int64_t i = 0; i < N; i++)
            for (int k = 0; k < 4; k++) {
                int kk = 4 * g + k;
                float w = kk < K ? r->skin_weights[i * K + kk] : 0;
                jn[4 * i + k] = (uint16_t)(kk < K && w > 0 ? s->joint_of_bone[r->skin_joints[i * K + kk]] : 0);
                wt[4 * i + k] = w > 0 ? w : 0;
            }
        a_j[g] = add_accessor(&al, &bin, jn, sizeof(uint16_t) * 4 * N, 5123, N, "VEC4", NULL);
        a_w[g] = add_accessor(&al, &bin, wt, sizeof(float) * 4 * N, 5126, N, "VEC4", NULL);
    }
    /* inverse binds: bind = [Q | c] -> [Qᵀ | -Qᵀc]; glTF stores 4x4 column-major,
     * m[4 col + row], and column b of Qᵀ is row b of Q */
    for (int k = 0; k < B; k++) {
        const double *bd = s->bind + 12 * k;
        float *m = buf + 16 * k;
        for (int b = 0; b < 3; b++) {
            double t = 0;
            for (int a = 0; a < 3; a++) {
                m[4 * b + a] = (float)bd[4 * b + a];
                t -= bd[4 * a + b] * bd[4 * a + 3];
            }
            m[12 + b] = (float)t;
            m[4 * b + 3] = 0;
        }
        m[15] = 1;
    }
    int a_ibm = add_accessor(&al, &bin, buf, sizeof(float) * 16 * B, 5126, B, "MAT4", NULL);
    /* key times from 0 */
    for (int64_t p = 0; p < F; p++) buf[p] = times ? times[p] - times[0] : (float)p / 30.0f;
    snprintf(mm, sizeof mm, ",\"min\":[%.9g],\"max\":[%.9g]", buf[0], buf[F - 1]);
    int a_time = add_accessor(&al, &bin, buf, sizeof(float) * F, 5126, F, "SCALAR", mm);
    int *a_t = malloc(sizeof(int) * 3 * B);
    if (!a_t) { rc = df_error_set(err, DF_ENOMEM, "glb: out of memory"); goto done; }
    for (int k = 0; k < B; k++) {
        for (int64_t p = 0; p < F; p++)
            for (int c = 0; c < 3; c++) buf[3 * p + c] = s->translation[3 * (p * B + k) + c];
        a_t[3 * k] = add_accessor(&al, &bin, buf, sizeof(float) * 3 * F, 5126, F, "VEC3", NULL);
        for (int64_t p = 0; p < F; p++) {
            const float *q = s->rotation + 4 * (p * B + k);
            float sg = 1;
            if (p > 0) {
                const float *o = buf + 4 * (p - 1);
                if (q[0] * o[0] + q[1] * o[1] + q[2] * o[2] + q[3] * o[3] < 0) sg = -1;
            }
            for (int c = 0; c < 4; c++) buf[4 * p + c] = sg * q[c];
        }
        a_t[3 * k + 1] = add_accessor(&al, &bin, buf, sizeof(float) * 4 * F, 5126, F, "VEC4", NULL);
        if (with_scale) {
            for (int64_t p = 0; p < F; p++)
                for (int c = 0; c < 3; c++) buf[3 * p + c] = s->scale[p * B + k];
            a_t[3 * k + 2] = add_accessor(&al, &bin, buf, sizeof(float) * 3 * F, 5126, F, "VEC3", NULL);
        }
    }

    /* JSON */
    gb_printf(&json, "{\"asset\":{\"version\":\"2.0\",\"generator\":\"deformd deform decompose\"},"
                     "\"scene\":0,\"scenes\":[{\"nodes\":[%d", B);
    for (int k = 0; k < B; k++)
        if (s->parent[k] < 0) gb_printf(&json, ",%d", k);
    gb_printf(&json, "]}],\"nodes\":[");
    for (int k = 0; k < B; k++) {
        const float *t = s->rest_translation + 3 * k, *q = s->rest_rotation + 4 * k;
        gb_printf(&json, "%s{\"name\":\"joint%d\",\"translation\":[%.9g,%.9g,%.9g],"
                         "\"rotation\":[%.9g,%.9g,%.9g,%.9g]", k ? "," : "", k, t[0], t[1], t[2],
                  q[0], q[1], q[2], q[3]);
        int nc = 0;
        for (int c = k + 1; c < B; c++)
            if (s->parent[c] == k) gb_printf(&json, "%s%d", nc++ ? "," : ",\"children\":[", c);
        gb_printf(&json, "%s}", nc ? "]" : "");
    }
    gb_printf(&json, ",{\"name\":\"mesh\",\"mesh\":0,\"skin\":0}],\"skins\":[{\"inverseBindMatrices\":%d,"
                     "\"skeleton\":%d,\"joints\":[", a_ibm, s->root);
    for (int k = 0; k < B; k++) gb_printf(&json, "%s%d", k ? "," : "", k);
    gb_printf(&json, "]}],\"meshes\":[{\"name\":\"mesh\",\"primitives\":[{\"attributes\":{"
                     "\"POSITION\":%d,\"NORMAL\":%d", a_pos, a_nrm);
    for (int g = 0; g < G; g++) gb_printf(&json, ",\"JOINTS_%d\":%d,\"WEIGHTS_%d\":%d", g, a_j[g], g, a_w[g]);
    gb_printf(&json, "},\"indices\":%d,\"mode\":4}]}],\"animations\":[{\"name\":", a_idx);
    char nm[256];
    size_t o = 0;
    const char *cn = clip_name && *clip_name ? clip_name : "fit";
    nm[o++] = '"';
    for (const char *c = cn; *c && o < sizeof nm - 3; c++) {
        if (*c == '"' || *c == '\\') nm[o++] = '\\';
        if ((unsigned char)*c >= 0x20) nm[o++] = *c;
    }
    nm[o++] = '"';
    nm[o] = 0;
    gb_printf(&json, "%s,\"samplers\":[", nm);
    int ns = 0;
    for (int k = 0; k < B; k++)
        for (int c = 0; c < (with_scale ? 3 : 2); c++)
            gb_printf(&json, "%s{\"input\":%d,\"output\":%d,\"interpolation\":\"LINEAR\"}",
                      ns++ ? "," : "", a_time, a_t[3 * k + c]);
    gb_printf(&json, "],\"channels\":[");
    static const char *const paths[3] = {"translation", "rotation", "scale"};
    ns = 0;
    for (int k = 0; k < B; k++)
        for (int c = 0; c < (with_scale ? 3 : 2); c++, ns++)
            gb_printf(&json, "%s{\"sampler\":%d,\"target\":{\"node\":%d,\"path\":\"%s\"}}",
                      ns ? "," : "", ns, k, paths[c]);
    free(a_t);
    gb_pad(&bin, 0);
    gb_printf(&json, "]}],\"buffers\":[{\"byteLength\":%zu}],\"bufferViews\":[", bin.n);
    gb_put(&json, al.views.p, al.views.n);
    gb_printf(&json, "],\"accessors\":[");
    gb_put(&json, al.accs.p, al.accs.n);
    gb_printf(&json, "]}");
    gb_pad(&json, ' ');
    if (json.oom || bin.oom || al.views.oom || al.accs.oom) {
        rc = df_error_set(err, DF_ENOMEM, "glb: out of memory");
        goto done;
    }
    uint64_t total = 12 + 8 + (uint64_t)json.n + 8 + (uint64_t)bin.n;
    if (total > 0xFFFFFFF0ull) {
        rc = df_error_set(err, DF_ELIMIT, "glb: %llu bytes exceeds the 4 GiB of the format",
                          (unsigned long long)total);
        goto done;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        rc = df_error_set(err, DF_EIO, "%s: %s", path, strerror(errno));
        goto done;
    }
    uint32_t h[5] = {0x46546C67u, 2, (uint32_t)total, (uint32_t)json.n, 0x4E4F534Au};
    uint32_t hb[2] = {(uint32_t)bin.n, 0x004E4942u};
    int ok = fwrite(h, 4, 5, f) == 5 && fwrite(json.p, 1, json.n, f) == json.n &&
             fwrite(hb, 4, 2, f) == 2 && fwrite(bin.p, 1, bin.n, f) == bin.n;
    if (fclose(f) || !ok) rc = df_error_set(err, DF_EIO, "%s: write failed", path);
done:
    free(json.p); free(bin.p); free(al.views.p); free(al.accs.p);
    free(nrm); free(jn); free(wt); free(buf);
    return rc;
}

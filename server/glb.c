/* glb.c — glTF 2.0 binary writer (see glb.h).
 *
 * Layout: 12-byte header, a JSON chunk (padded with spaces to 4 bytes) and
 * one BIN chunk holding the shared index buffer (UNSIGNED_INT) followed by
 * each mesh's POSITION (and NORMAL) float3 arrays. POSITION accessors
 * carry min/max as the spec requires. Each mesh gets its own node so a
 * batch of poses shows side by side in a viewer's scene list.
 */
#include "glb.h"
#include <float.h>
#include <stdio.h>
#include <string.h>

static void put_u32(df_ks_buf_t *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    df_ks_buf_append(b, (const char *)x, 4);
}

int df_glb_write(df_ks_buf_t *out, int n_meshes, const float *const *positions,
                 const float *const *normals, int64_t nv, const uint32_t *tris, int64_t nt,
                 const char *name, df_error_t *err)
{
    uint64_t idx_bytes = (uint64_t)nt * 12, vbytes = (uint64_t)nv * 12;
    uint64_t bin = idx_bytes;
    for (int k = 0; k < n_meshes; k++) bin += vbytes * (normals && normals[k] ? 2 : 1);
    if (bin + (1u << 20) > 0xFFFFFFF0ull)
        return df_error_set(err, DF_ELIMIT, "glb would exceed 4 GiB");
    df_ks_buf_t j = {0};
    df_ks_buf_printf(&j, "{\"asset\":{\"version\":\"2.0\",\"generator\":\"deformd\"},\"scene\":0,"
                         "\"scenes\":[{\"nodes\":[");
    for (int k = 0; k < n_meshes; k++) df_ks_buf_printf(&j, k ? ",%d" : "%d", k);
    df_ks_buf_printf(&j, "]}],\"nodes\":[");
    for (int k = 0; k < n_meshes; k++) {
        df_ks_buf_printf(&j, "%s{\"mesh\":%d,\"name\":", k ? "," : "", k);
        char nm[128];
        snprintf(nm, sizeof nm, n_meshes > 1 ? "%s_%d" : "%s", name ? name : "mesh", k);
        df_ks_buf_json_string(&j, nm);
        df_ks_buf_printf(&j, "}");
    }
    df_ks_buf_printf(&j, "],\"meshes\":[");
    int acc = 1; /* accessor 0: indices */
    for (int k = 0; k < n_meshes; k++) {
        int has_n = normals && normals[k];
        df_ks_buf_printf(&j, "%s{\"primitives\":[{\"attributes\":{\"POSITION\":%d", k ? "," : "",
                         acc);
        if (has_n) df_ks_buf_printf(&j, ",\"NORMAL\":%d", acc + 1);
        df_ks_buf_printf(&j, "},\"indices\":0,\"mode\":4}]}");
        acc += 1 + has_n;
    }
    df_ks_buf_printf(&j, "],\"accessors\":[{\"bufferView\":0,\"componentType\":5125,\"count\":%lld,"
                         "\"type\":\"SCALAR\"}",
                     (long long)nt * 3);
    int view = 1;
    for (int k = 0; k < n_meshes; k++) {
        float lo[3] = {FLT_MAX, FLT_MAX, FLT_MAX}, hi[3] = {-FLT_MAX, -FLT_MAX, -FLT_MAX};
        for (int64_t v = 0; v < nv; v++)
            for (int c = 0; c < 3; c++) {
                float x = positions[k][v * 3 + c];
                if (x < lo[c]) lo[c] = x;
                if (x > hi[c]) hi[c] = x;
            }
        if (nv == 0) lo[0] = lo[1] = lo[2] = hi[0] = hi[1] = hi[2] = 0;
        df_ks_buf_printf(&j, ",{\"bufferView\":%d,\"componentType\":5126,\"count\":%lld,"
                             "\"type\":\"VEC3\",\"min\":[%.9g,%.9g,%.9g],\"max\":[%.9g,%.9g,%.9g]}",
                         view++, (long long)nv, lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]);
        if (normals && normals[k])
            df_ks_buf_printf(&j, ",{\"bufferView\":%d,\"componentType\":5126,\"count\":%lld,"
                                 "\"type\":\"VEC3\"}",
                             view++, (long long)nv);
    }
    df_ks_buf_printf(&j, "],\"bufferViews\":[{\"buffer\":0,\"byteOffset\":0,\"byteLength\":%llu,"
                         "\"target\":34963}",
                     (unsigned long long)idx_bytes);
    uint64_t off = idx_bytes;
    for (int k = 0; k < n_meshes; k++) {
        int nviews = normals && normals[k] ? 2 : 1;
        for (int q = 0; q < nviews; q++) {
            df_ks_buf_printf(&j, ",{\"buffer\":0,\"byteOffset\":%llu,\"byteLength\":%llu,"
                                 "\"target\":34962}",
                             (unsigned long long)off, (unsigned long long)vbytes);
            off += vbytes;
        }
    }
    df_ks_buf_printf(&j, "],\"buffers\":[{\"byteLength\":%llu}]}", (unsigned long long)bin);
    while (j.len % 4) df_ks_buf_append(&j, " ", 1);
    if (j.oom) {
        df_ks_buf_free(&j);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    uint64_t binpad = (4 - bin % 4) % 4;
    uint64_t total = 12 + 8 + j.len + 8 + bin + binpad;
    df_ks_buf_append(out, "glTF", 4);
    put_u32(out, 2);
    put_u32(out, (uint32_t)total);
    put_u32(out, (uint32_t)j.len);
    df_ks_buf_append(out, "JSON", 4);
    df_ks_buf_append(out, j.data, j.len);
    df_ks_buf_free(&j);
    put_u32(out, (uint32_t)(bin + binpad));
    df_ks_buf_append(out, "BIN\0", 4);
    df_ks_buf_append(out, (const char *)tris, (size_t)idx_bytes);
    for (int k = 0; k < n_meshes; k++) {
        df_ks_buf_append(out, (const char *)positions[k], (size_t)vbytes);
        if (normals && normals[k]) df_ks_buf_append(out, (const char *)normals[k], (size_t)vbytes);
    }
    static const char zeros[4] = {0};
    df_ks_buf_append(out, zeros, (size_t)binpad);
    if (out->oom) return df_error_set(err, DF_ENOMEM, "out of memory");
    return DF_OK;
}

/* md3_read.c — id Tech 3 MD3 vertex animation, every frame (assimp reads
 * only the first).
 *
 * Format (little-endian; offsets from the start of the file, or of the
 * surface for a surface's own offsets):
 *   header  "IDP3", int32 version (15), char name[64], int32 flags,
 *           int32 frames, tags, surfaces, skins, int32 ofs_frames, ofs_tags,
 *           ofs_surfaces, ofs_eof                                 (108 bytes)
 *   surface "IDP3", char name[64], int32 flags, int32 frames, shaders,
 *           verts, triangles, int32 ofs_triangles, ofs_shaders, ofs_st,
 *           ofs_xyznormal, ofs_end                                (108 bytes)
 *           triangles int32[3]; xyznormal per frame and vertex: int16 x, y,
 *           z (units of 1/64), int16 packed normal                (8 bytes)
 *
 * DESIGN
 * Every surface becomes part of one mesh (vertices appended in file order,
 * triangle indices offset), positions x/64 as stored (Quake's Z-up). Every
 * count and offset is checked against the file's size before it is used;
 * a surface must have the header's frame count. Times are p / fps (fps the
 * caller's, default 10).
 */
#include "md3_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t rd32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}
static int16_t rd16(const unsigned char *p) { return (int16_t)((uint16_t)p[0] | (uint16_t)p[1] << 8); }

/* [off, off + len) inside [0, size) */
static int inside(int64_t off, int64_t len, int64_t size)
{
    return off >= 0 && len >= 0 && off <= size && len <= size - off;
}

int df__md3_read(const char *path, double fps, df__md3_t *m, df_error_t *err)
{
    memset(m, 0, sizeof *m);
    if (!(fps > 0)) fps = 10;
    FILE *f = fopen(path, "rb");
    if (!f) return df_error_set(err, DF_ENOTFOUND, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    rewind(f);
    if (sz < 0 || sz > (1L << 30)) {
        fclose(f);
        return df_error_set(err, DF_ELIMIT, "%s: %ld bytes (an MD3 is at most 1 GiB here)", path, sz);
    }
    unsigned char *b = malloc((size_t)sz + 1);
    size_t got = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    if (!b) return df_error_set(err, DF_ENOMEM, "%s: out of memory", path);
    int rc = DF_OK;
    if (got != (size_t)sz) { rc = df_error_set(err, DF_EIO, "%s: read error", path); goto done; }
    if (sz < 108 || memcmp(b, "IDP3", 4)) {
        rc = df_error_set(err, DF_EFORMAT, "%s: not an MD3 file (no IDP3 header; %ld bytes)", path, sz);
        goto done;
    }
    int32_t ver = rd32(b + 4), F = rd32(b + 76), S = rd32(b + 84), ofs_s = rd32(b + 100);
    if (ver != 15)
        fprintf(stderr, "decompose: %s: MD3 version %d (15 expected), reading it anyway\n", path, ver);
    df_limits_t lim;
    df_limits_default(&lim);
    if (F < 1 || F > lim.max_clip_frames || S < 1 || S > 4096) {
        rc = df_error_set(err, DF_EFORMAT, "%s: MD3 header says %d frames and %d surfaces", path, F, S);
        goto done;
    }
    /* pass 1: sizes; pass 2: fill */
    int64_t N = 0, T = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        int64_t off = ofs_s, nv = 0, nt = 0;
        if (pass == 1) {
            m->F = F;
            m->N = N;
            m->T = T;
            m->frames = malloc(sizeof(float) * (size_t)(F * N * 3) + 4);
            m->tris = malloc(sizeof(uint32_t) * (size_t)(T * 3) + 4);
            m->times = malloc(sizeof(float) * (size_t)F + 4);
            if (!m->frames || !m->tris || !m->times) {
                rc = df_error_set(err, DF_ENOMEM, "%s: out of memory (%d frames, %lld vertices)",
                                  path, F, (long long)N);
                break;
            }
        }
        for (int s = 0; s < S; s++) {
            if (!inside(off, 108, sz) || memcmp(b + off, "IDP3", 4)) {
                rc = df_error_set(err, DF_EFORMAT, "%s: surface %d: no IDP3 header at byte %lld "
                                  "(file of %ld bytes)", path, s, (long long)off, sz);
                break;
            }
            const unsigned char *h = b + off;
            int32_t sf = rd32(h + 72), sv = rd32(h + 80), st = rd32(h + 84);
            int32_t o_tri = rd32(h + 88), o_xyz = rd32(h + 100), o_end = rd32(h + 104);
            char sname[65];
            memcpy(sname, h + 4, 64);
            sname[64] = 0;
            if (sf != F) {
                rc = df_error_set(err, DF_EFORMAT, "%s: surface %d ('%s') has %d frames but the "
                                  "header says %d", path, s, sname, sf, F);
                break;
            }
            if (sv < 0 || st < 0 || sv > lim.max_vertices || nv + sv > lim.max_vertices ||
                !inside(off + (int64_t)o_tri, 12 * (int64_t)st, sz) ||
                !inside(off + (int64_t)o_xyz, 8 * (int64_t)sv * F, sz) || o_end <= 0 ||
                !inside(off, o_end, sz)) {
                rc = df_error_set(err, DF_EFORMAT, "%s: surface %d ('%s'): %d vertices, %d "
                                  "triangles or their offsets run past the end of the file "
                                  "(%ld bytes): truncated or damaged", path, s, sname, sv, st, sz);
                break;
            }
            if (pass == 1) {
                const unsigned char *tp = b + off + o_tri;
                for (int64_t t = 0; t < st; t++)
                    for (int k = 0; k < 3; k++) {
                        int32_t v = rd32(tp + 12 * t + 4 * k);
                        if (v < 0 || v >= sv) {
                            rc = df_error_set(err, DF_EFORMAT, "%s: surface %d ('%s'): triangle "
                                              "%lld references vertex %d of %d", path, s, sname,
                                              (long long)t, v, sv);
                            goto done;
                        }
                        m->tris[3 * (nt + t) + k] = (uint32_t)(nv + v);
                    }
                const unsigned char *xp = b + off + o_xyz;
                for (int64_t p = 0; p < F; p++)
                    for (int64_t i = 0; i < sv; i++)
                        for (int k = 0; k < 3; k++)
                            m->frames[(p * N + nv + i) * 3 + k] = rd16(xp + 8 * (p * sv + i) + 2 * k) / 64.0f;
            }
            nv += sv;
            nt += st;
            off += o_end;
        }
        N = nv;
        T = nt;
        if (pass == 0 && !rc && N < 1)
            rc = df_error_set(err, DF_EFORMAT, "%s: MD3 with no vertices", path);
    }
    if (!rc) {
        for (int64_t p = 0; p < F; p++) m->times[p] = (float)(p / fps);
        snprintf(m->source, sizeof m->source, "%d MD3 frames, %d surface(s)", F, S);
    }
done:
    free(b);
    if (rc) df__md3_free(m);
    return rc;
}

void df__md3_free(df__md3_t *m)
{
    free(m->frames); free(m->tris); free(m->times);
    memset(m, 0, sizeof *m);
}

/* cache_read.c — point caches: per-frame vertex positions with no topology,
 * as DCC tools export them (Blender, Maya, 3ds Max, Houdini).
 *
 *   MDD (LightWave MotionDesigner), big-endian:
 *       int32 frames F, int32 points N, float32 times[F] (seconds),
 *       then F x N x 3 float32 positions.
 *   PC2 (3ds Max point cache 2), little-endian:
 *       char[12] "POINTCACHE2\0", int32 version (1), int32 points N,
 *       float32 start frame, float32 sampling (frames between samples),
 *       int32 samples F, then F x N x 3 float32 positions.
 *
 * DESIGN
 * The whole file is read once and checked before anything is trusted: the
 * header's counts against the limits and against the file's size (a
 * truncated or over-long file is named with both sizes), every value
 * finite (the first NaN is named by frame, point and axis). Times: MDD's
 * own when they increase, else frame / fps; PC2's (start + k sampling) /
 * fps. fps is the caller's (--fps) or 24. Coordinates are kept as stored
 * (Blender writes its Z-up world space).
 */
#include "cache_read.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_all(const char *path, unsigned char **buf, size_t *n, df_error_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return df_error_set(err, DF_ENOTFOUND, "%s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) || ftell(f) < 0) {
        fclose(f);
        return df_error_set(err, DF_EIO, "%s: cannot seek", path);
    }
    long sz = ftell(f);
    rewind(f);
    if ((unsigned long)sz > (8ull << 30)) {
        fclose(f);
        return df_error_set(err, DF_ELIMIT, "%s: %ld bytes is above the 8 GiB limit for a point cache",
                            path, sz);
    }
    *buf = malloc((size_t)sz + 1);
    if (!*buf) { fclose(f); return df_error_set(err, DF_ENOMEM, "%s: out of memory", path); }
    *n = fread(*buf, 1, (size_t)sz, f);
    fclose(f);
    if (*n != (size_t)sz) {
        free(*buf);
        *buf = NULL;
        return df_error_set(err, DF_EIO, "%s: read error", path);
    }
    return DF_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int check_counts(const char *path, const char *fmt, int64_t F, int64_t N, size_t have,
                        size_t header, size_t per_frame_extra, df_error_t *err)
{
    df_limits_t lim;
    df_limits_default(&lim);
    if (F < 1 || N < 1)
        return df_error_set(err, DF_EFORMAT, "%s: %s header says %lld frames of %lld points",
                            path, fmt, (long long)F, (long long)N);
    if (F > lim.max_clip_frames || N > lim.max_vertices)
        return df_error_set(err, DF_ELIMIT, "%s: %s header says %lld frames of %lld points, above "
                            "the limits (%lld frames, %lld vertices)", path, fmt, (long long)F,
                            (long long)N, (long long)lim.max_clip_frames, (long long)lim.max_vertices);
    uint64_t want = header + (uint64_t)F * per_frame_extra + (uint64_t)F * (uint64_t)N * 12;
    if (have < want)
        return df_error_set(err, DF_EFORMAT, "%s: truncated %s: %lld frames of %lld points need "
                            "%llu bytes, the file has %zu", path, fmt, (long long)F, (long long)N,
                            (unsigned long long)want, have);
    if (have > want)
        return df_error_set(err, DF_EFORMAT, "%s: %s has %zu bytes but %lld frames of %lld points "
                            "take %llu: wrong counts in the header or a damaged file", path, fmt,
                            have, (long long)F, (long long)N, (unsigned long long)want);
    return DF_OK;
}

static int positions(const char *path, const unsigned char *p, int64_t F, int64_t N, int big,
                     float *out, df_error_t *err)
{
    for (int64_t q = 0; q < F * N * 3; q++) {
        float v = u2f(big ? be32(p + 4 * q) : le32(p + 4 * q));
        if (!isfinite(v))
            return df_error_set(err, DF_EFORMAT, "%s: frame %lld, point %lld, coordinate %c is "
                                "not finite (%g)", path, (long long)(q / (3 * N)),
                                (long long)(q / 3 % N), "xyz"[q % 3], v);
        out[q] = v;
    }
    return DF_OK;
}

int df__cache_read(const char *path, double fps, df__cache_t *c, df_error_t *err)
{
    memset(c, 0, sizeof *c);
    if (!(fps > 0)) fps = 24;
    size_t n = strlen(path);
    int mdd = n >= 4 && !strcasecmp(path + n - 4, ".mdd");
    int pc2 = n >= 4 && !strcasecmp(path + n - 4, ".pc2");
    if (!mdd && !pc2)
        return df_error_set(err, DF_EINVAL, "%s: not a point cache (.mdd or .pc2)", path);
    unsigned char *buf = NULL;
    size_t sz = 0;
    int rc = read_all(path, &buf, &sz, err);
    if (rc) return rc;
    int64_t F, N;
    const unsigned char *data;
    if (mdd) {
        if (sz < 8) {
            rc = df_error_set(err, DF_EFORMAT, "%s: truncated MDD: %zu bytes, the header alone "
                              "is 8", path, sz);
            goto done;
        }
        F = (int32_t)be32(buf);
        N = (int32_t)be32(buf + 4);
        if ((rc = check_counts(path, "MDD", F, N, sz, 8, 4, err))) goto done;
        data = buf + 8 + 4 * F;
    } else {
        if (sz < 32 || memcmp(buf, "POINTCACHE2", 12)) {
            rc = df_error_set(err, DF_EFORMAT, "%s: not a PC2 file (no \"POINTCACHE2\" "
                              "signature in a 32-byte header; %zu bytes)", path, sz);
            goto done;
        }
        int32_t ver = (int32_t)le32(buf + 12);
        if (ver != 1) {
            rc = df_error_set(err, DF_EFORMAT, "%s: PC2 version %d (only 1 exists)", path, ver);
            goto done;
        }
        N = (int32_t)le32(buf + 16);
        F = (int32_t)le32(buf + 28);
        if ((rc = check_counts(path, "PC2", F, N, sz, 32, 0, err))) goto done;
        data = buf + 32;
    }
    c->F = F;
    c->N = N;
    c->frames = malloc(sizeof(float) * F * N * 3 + 4);
    c->times = malloc(sizeof(float) * F + 4);
    if (!c->frames || !c->times) {
        rc = df_error_set(err, DF_ENOMEM, "%s: out of memory (%lld frames of %lld points)", path,
                          (long long)F, (long long)N);
        goto done;
    }
    if ((rc = positions(path, data, F, N, mdd, c->frames, err))) goto done;
    if (mdd) {
        int inc = 1;
        for (int64_t p = 0; p < F; p++) {
            c->times[p] = u2f(be32(buf + 8 + 4 * p));
            if (!isfinite(c->times[p]) || (p && !(c->times[p] > c->times[p - 1]))) inc = 0;
        }
        if (!inc)
            for (int64_t p = 0; p < F; p++) c->times[p] = (float)(p / fps);
        snprintf(c->source, sizeof c->source, "MDD cache (%s)", inc ? "its times" : "times p/fps");
    } else {
        float start = u2f(le32(buf + 20)), step = u2f(le32(buf + 24));
        if (!isfinite(start) || !(step > 0) || !isfinite(step)) {
            rc = df_error_set(err, DF_EFORMAT, "%s: PC2 start %g / sampling %g (want finite, "
                              "sampling > 0)", path, start, step);
            goto done;
        }
        for (int64_t p = 0; p < F; p++) c->times[p] = (float)((start + p * (double)step) / fps);
        snprintf(c->source, sizeof c->source, "PC2 cache");
    }
done:
    free(buf);
    if (rc) df__cache_free(c);
    return rc;
}

void df__cache_free(df__cache_t *c)
{
    free(c->frames);
    free(c->times);
    memset(c, 0, sizeof *c);
}

/* npy.c — NumPy .npy float32 reader and writer.
 *
 * DESIGN
 * Used for golden data, bakes and tool outputs. Writes format 1.0 with a
 * '<f4' C-order header padded to 64 bytes. Reads versions 1.x/2.x/3.x with
 * descr '<f4' (or '<f8', converted), rejects Fortran order, big-endian and
 * object arrays, and checks that the file holds exactly the element count of
 * the shape (checked multiplication; limit 1<<31 elements). The header dict
 * is parsed by hand: it is a Python literal, not JSON.
 */
#include "df.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NPY_MAX_ELEMS ((uint64_t)1 << 31)
#define NPY_MAX_HEADER (1u << 20)

int df_npy_write_f32(const char *path, int ndim, const int64_t *shape,
                     const float *data, df_error_t *err)
{
    if (!path || ndim < 0 || ndim > DF_MAX_DIMS || (ndim && !shape))
        return df_error_set(err, DF_EINVAL, "npy write: bad arguments");
    char dict[512];
    int o = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            return df_error_set(err, DF_EINVAL, "npy write %s: bad shape", path);
        o += snprintf(dict + o, sizeof dict - (size_t)o, "%lld%s",
                      (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
    }
    o += snprintf(dict + o, sizeof dict - (size_t)o, "), }");
    if (n && !data) return df_error_set(err, DF_EINVAL, "npy write: NULL data");
    size_t total = 10 + (size_t)o + 1; /* magic+ver+len, dict, '\n' */
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)o + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    FILE *f = fopen(path, "wb");
    if (!f) return df_error_set(err, DF_EIO, "%s: %s", path, strerror(errno));
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)o, f) == (size_t)o;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    if (ok) ok = fputc('\n', f) != EOF;
    if (ok && n) ok = fwrite(data, sizeof(float), (size_t)n, f) == n;
    if (fclose(f) != 0) ok = 0;
    if (!ok) return df_error_set(err, DF_EIO, "%s: write failed", path);
    return DF_OK;
}

/* Finds 'key': in the dict and returns a pointer after the colon. */
static const char *dict_find(const char *d, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(d, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\"", key);
        p = strstr(d, pat);
    }
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

int df_npy_read_f32(const char *path, int *ndim, int64_t shape[DF_MAX_DIMS],
                    float **data, df_error_t *err)
{
    *data = NULL;
    *ndim = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return df_error_set(err, errno == ENOENT ? DF_ENOTFOUND : DF_EIO,
                            "%s: %s", path, strerror(errno));
    int rc = DF_OK;
    char *hdr = NULL;
    float *out = NULL;
    unsigned char pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        rc = df_error_set(err, DF_EFORMAT, "%s: not a .npy file", path);
        goto done;
    }
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto trunc;
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4) goto trunc;
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
               (size_t)pre[11] << 24;
    } else {
        rc = df_error_set(err, DF_EUNSUPPORTED, "%s: npy version %d", path, pre[6]);
        goto done;
    }
    if (hlen > NPY_MAX_HEADER) {
        rc = df_error_set(err, DF_ELIMIT, "%s: npy header of %zu bytes", path, hlen);
        goto done;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) { rc = df_error_set(err, DF_ENOMEM, "out of memory"); goto done; }
    if (fread(hdr, 1, hlen, f) != hlen) goto trunc;
    hdr[hlen] = 0;
    const char *descr = dict_find(hdr, "descr");
    const char *fo = dict_find(hdr, "fortran_order");
    const char *sh = dict_find(hdr, "shape");
    if (!descr || !fo || !sh) {
        rc = df_error_set(err, DF_EFORMAT, "%s: npy header lacks descr, "
                          "fortran_order or shape", path);
        goto done;
    }
    int is_f8;
    if (strncmp(descr, "'<f4'", 5) == 0 || strncmp(descr, "\"<f4\"", 5) == 0)
        is_f8 = 0;
    else if (strncmp(descr, "'<f8'", 5) == 0 || strncmp(descr, "\"<f8\"", 5) == 0)
        is_f8 = 1;
    else { /* name the dtype: the quoted token (at most 16 characters) */
        int n = 1;
        while (n < 17 && descr[n] && descr[n] != descr[0]) n++;
        rc = df_error_set(err, DF_EUNSUPPORTED, "%s: npy dtype %.*s (want <f4 or <f8)", path,
                          descr[n] == descr[0] ? n + 1 : n, descr);
        goto done;
    }
    if (strncmp(fo, "False", 5) != 0) {
        rc = df_error_set(err, DF_EUNSUPPORTED, "%s: Fortran-order npy", path);
        goto done;
    }
    if (*sh != '(') {
        rc = df_error_set(err, DF_EFORMAT, "%s: npy shape is not a tuple", path);
        goto done;
    }
    sh++;
    uint64_t n = 1;
    int nd = 0;
    for (;;) {
        while (*sh == ' ' || *sh == ',') sh++;
        if (*sh == ')') break;
        if (*sh < '0' || *sh > '9' || nd == DF_MAX_DIMS) {
            rc = df_error_set(err, DF_EFORMAT, "%s: bad npy shape", path);
            goto done;
        }
        char *end;
        errno = 0;
        unsigned long long v = strtoull(sh, &end, 10);
        if (errno || v > NPY_MAX_ELEMS ||
            __builtin_mul_overflow(n, (uint64_t)v, &n) || n > NPY_MAX_ELEMS) {
            rc = df_error_set(err, DF_ELIMIT, "%s: npy array too large", path);
            goto done;
        }
        shape[nd++] = (int64_t)v;
        sh = end;
    }
    size_t es = is_f8 ? 8 : 4;
    out = malloc(n ? n * sizeof(float) : 1);
    if (!out) { rc = df_error_set(err, DF_ENOMEM, "out of memory"); goto done; }
    if (!is_f8) {
        if (fread(out, 4, n, f) != n) goto trunc;
    } else {
        for (uint64_t i = 0; i < n; i++) {
            double d;
            if (fread(&d, 8, 1, f) != 1) goto trunc;
            out[i] = (float)d;
        }
    }
    (void)es;
    if (fgetc(f) != EOF) {
        rc = df_error_set(err, DF_EFORMAT, "%s: trailing bytes after npy data", path);
        goto done;
    }
    *ndim = nd;
    *data = out;
    out = NULL;
    goto done;
trunc:
    rc = df_error_set(err, DF_EFORMAT, "%s: truncated npy file", path);
done:
    free(out);
    free(hdr);
    fclose(f);
    return rc;
}

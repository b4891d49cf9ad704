/* test_npy.c — .npy float32 writer and reader (core/base/npy.c).
 *
 * The writer's bytes are checked against the NPY 1.0 format as specified
 * (magic, version, little-endian header length, a dict literal, header
 * padded so data starts at a multiple of 64, raw little-endian float32).
 * Files for the reader are assembled by hand here, including version 2.0,
 * '<f8' data, and the refusals (big-endian, Fortran order, other dtypes,
 * truncated data, trailing bytes, absurd shapes).
 */
#include "df.h"
#include "dftest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char dir[1024];

static void path_of(char *p, size_t n, const char *name)
{
    snprintf(p, n, "%s/%s", dir, name);
}

static unsigned char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    b[*n] = 0;
    return b;
}

static void test_write_format(void)
{
    char p[1200];
    path_of(p, sizeof p, "a.npy");
    float v[6] = {1.5f, -2, 3, 4, 5e-8f, 6};
    int64_t sh[2] = {2, 3};
    df_error_t e = {0};
    DF_CHECK(df_npy_write_f32(p, 2, sh, v, &e) == DF_OK);
    size_t n;
    unsigned char *b = slurp(p, &n);
    DF_CHECK(b != NULL);
    if (!b) return;
    DF_CHECK(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
    size_t hl = b[8] | (size_t)b[9] << 8;
    DF_CHECK((10 + hl) % 64 == 0);
    DF_CHECK(b[10 + hl - 1] == '\n');
    char *hdr = strndup((char *)b + 10, hl);
    DF_CHECK(strstr(hdr, "'descr': '<f4'") && strstr(hdr, "'fortran_order': False"));
    DF_CHECK_MSG(strstr(hdr, "'shape': (2, 3)"), "%s", hdr);
    DF_CHECK(n == 10 + hl + sizeof v);
    DF_CHECK(memcmp(b + 10 + hl, v, sizeof v) == 0);
    free(hdr);
    free(b);

    /* 1-d shapes are written as a one-element tuple "(5,)", scalars "()" */
    path_of(p, sizeof p, "b.npy");
    int64_t s1 = 5;
    float w[5] = {0};
    DF_CHECK(df_npy_write_f32(p, 1, &s1, w, &e) == DF_OK);
    b = slurp(p, &n);
    DF_CHECK(b && strstr((char *)b + 10, "'shape': (5,)"));
    free(b);
    path_of(p, sizeof p, "c.npy");
    DF_CHECK(df_npy_write_f32(p, 0, NULL, w, &e) == DF_OK);
    b = slurp(p, &n);
    DF_CHECK(b && strstr((char *)b + 10, "'shape': ()") && n % 64 == 4);
    free(b);
    DF_CHECK(df_npy_write_f32(p, 9, sh, v, &e) == DF_EINVAL);
    int64_t neg = -2;
    DF_CHECK(df_npy_write_f32(p, 1, &neg, v, &e) == DF_EINVAL);
    DF_CHECK(df_npy_write_f32("/nonexistent-dir/x.npy", 1, &s1, w, &e) == DF_EIO);
}

static void test_roundtrip(void)
{
    char p[1200];
    path_of(p, sizeof p, "rt.npy");
    int64_t sh[4] = {2, 1, 3, 4};
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = (float)i * 0.1f - 1;
    df_error_t e = {0};
    DF_CHECK(df_npy_write_f32(p, 4, sh, v, &e) == DF_OK);
    int nd = -1;
    int64_t shape[DF_MAX_DIMS];
    float *d = NULL;
    DF_CHECK_MSG(df_npy_read_f32(p, &nd, shape, &d, &e) == DF_OK, "%s", e.msg);
    DF_CHECK(nd == 4 && shape[0] == 2 && shape[1] == 1 && shape[2] == 3 && shape[3] == 4);
    DF_CHECK(d && memcmp(d, v, sizeof v) == 0);
    free(d);
    /* zero-sized arrays */
    int64_t z[2] = {0, 3};
    DF_CHECK(df_npy_write_f32(p, 2, z, NULL, &e) == DF_OK);
    DF_CHECK(df_npy_read_f32(p, &nd, shape, &d, &e) == DF_OK && nd == 2 && shape[0] == 0);
    free(d);
}

/* Hand-made file: version, header dict text, payload. */
static void make(const char *name, int ver, const char *dict, const void *data,
                 size_t dlen)
{
    char p[1200];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    size_t hl = strlen(dict);
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)ver, 0};
    size_t pl;
    if (ver == 1) {
        pre[8] = (unsigned char)hl;
        pre[9] = (unsigned char)(hl >> 8);
        pl = 10;
    } else {
        pre[8] = (unsigned char)hl;
        pre[9] = (unsigned char)(hl >> 8);
        pre[10] = (unsigned char)(hl >> 16);
        pre[11] = (unsigned char)(hl >> 24);
        pl = 12;
    }
    fwrite(pre, 1, pl, f);
    fwrite(dict, 1, hl, f);
    if (dlen) fwrite(data, 1, dlen, f);
    fclose(f);
}

static void expect(const char *name, int code, const char *needle)
{
    char p[1200];
    path_of(p, sizeof p, name);
    int nd;
    int64_t shape[DF_MAX_DIMS];
    float *d = (float *)1;
    df_error_t e = {0};
    int rc = df_npy_read_f32(p, &nd, shape, &d, &e);
    DF_CHECK_MSG(rc == code, "%s: rc %d (%s)", name, rc, e.msg);
    DF_CHECK_MSG(!needle || strstr(e.msg, needle), "%s: '%s' lacks '%s'", name, e.msg, needle);
    DF_CHECK(d == NULL);
}

static void test_read_variants_and_errors(void)
{
    double dd[3] = {0.5, -1.25, 1e-3};
    make("v2_f8.npy", 2, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (3,)}\n",
         dd, sizeof dd);
    char p[1200];
    path_of(p, sizeof p, "v2_f8.npy");
    int nd;
    int64_t shape[DF_MAX_DIMS];
    float *d = NULL;
    df_error_t e = {0};
    DF_CHECK_MSG(df_npy_read_f32(p, &nd, shape, &d, &e) == DF_OK, "%s", e.msg);
    DF_CHECK(nd == 1 && shape[0] == 3 && d && d[0] == 0.5f && d[1] == -1.25f &&
             d[2] == (float)1e-3);
    free(d);
    float f2[2] = {1, 2};
    make("be.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", f2, 8);
    expect("be.npy", DF_EUNSUPPORTED, ">f4");
    make("i4.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n", f2, 8);
    expect("i4.npy", DF_EUNSUPPORTED, "dtype '<i4' (want"); /* the token, nothing after it */
    make("u2.npy", 2, "{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (2,)}\n", f2, 4);
    expect("u2.npy", DF_EUNSUPPORTED, "dtype \"<u2\" (want");
    make("fort.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n", f2, 8);
    expect("fort.npy", DF_EUNSUPPORTED, "Fortran");
    make("short.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", f2, 8);
    expect("short.npy", DF_EFORMAT, "truncated");
    make("long.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", f2, 8);
    expect("long.npy", DF_EFORMAT, "trailing");
    make("noshape.npy", 1, "{'descr': '<f4', 'fortran_order': False}\n", f2, 8);
    expect("noshape.npy", DF_EFORMAT, "shape");
    make("huge.npy", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n",
         f2, 8);
    expect("huge.npy", DF_ELIMIT, "too large");
    make("baddim.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", f2, 8);
    expect("baddim.npy", DF_EFORMAT, "shape");
    make("ver9.npy", 9, "{}", NULL, 0);
    expect("ver9.npy", DF_EUNSUPPORTED, "version 9");
    path_of(p, sizeof p, "junk.npy");
    FILE *f = fopen(p, "wb");
    fputs("PK\x03\x04 not numpy", f);
    fclose(f);
    expect("junk.npy", DF_EFORMAT, "not a .npy");
    make("hdrtrunc.npy", 1, "", NULL, 0);
    {
        /* header length says 200 but the file ends */
        path_of(p, sizeof p, "hdrtrunc.npy");
        f = fopen(p, "wb");
        fwrite("\x93NUMPY\x01\x00\xc8\x00{'descr'", 1, 18, f);
        fclose(f);
    }
    expect("hdrtrunc.npy", DF_EFORMAT, "truncated");
    expect("missing.npy", DF_ENOTFOUND, "missing.npy");
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/core_npy", dftest_out_dir());
    mkdir(dir, 0755);
    DF_RUN(test_write_format);
    DF_RUN(test_roundtrip);
    DF_RUN(test_read_variants_and_errors);
    return dftest_exit();
}

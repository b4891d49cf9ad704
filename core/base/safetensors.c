/* safetensors.c — reading, validating and writing safetensors files.
 *
 * DESIGN
 * A safetensors file is: u64 little-endian header length H, H bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 * "__metadata__": {"k": "v"}}), then the data area; offsets are relative to
 * the start of the data area.
 *
 * Model files come from users, so everything is checked before a tensor is
 * handed out, and each refusal names the tensor and the problem: header
 * length vs file size and limit, JSON syntax and duplicate keys (jansson's
 * JSON_REJECT_DUPLICATES), entry types, dtype spelling, shape (non-negative
 * integers, at most DF_MAX_DIMS, element count by checked multiplication,
 * limit), offsets ([begin,end] integers inside the data area, byte size equal
 * to numel * dtype size), overlaps (entries sorted by begin), tensor count,
 * and finiteness of every F16/BF16/F32/F64 element (first bad flat index).
 * Gaps between tensors are accepted (the reference implementation refuses
 * them; our writer never makes them).
 *
 * Memory: df_st_open read()s the whole file into memory it owns; it never
 * maps the file. A mapped file that is truncated while mapped (a model
 * rewritten in place during a load) kills the process with SIGBUS on the
 * next touch of a removed page; read() instead returns short, and the
 * file's size and modification times are compared before and after, so a
 * file changed while it was read is refused with a message, never half
 * used. Buffers of 1 MiB or more are anonymous mappings aligned to 2 MiB,
 * advised as transparent huge pages and pre-faulted (MADV_POPULATE_WRITE):
 * on this VM 4 KiB first-touch faults made malloc + read() run at 0.27
 * GB/s, huge pages at about the speed of the page cache (docs/model-format.md,
 * make bench-st). Smaller files go into a 64-byte aligned malloc buffer.
 * df_st_parse copies its input into the same kind of buffer. The contract
 * is that tensor data is 8-byte aligned: a tensor whose address is not is
 * copied into its own aligned buffer (our writer never produces such
 * files, others may).
 *
 * The writer keeps copies of the tensors, pads the header with spaces so the
 * data area starts 8-aligned, and lays the tensors out without gaps (as the
 * reference implementation requires) in an order that keeps the large ones
 * at 8-aligned offsets (plan_layout); the header lists them in insertion
 * order. It writes <path>.tmp, fsyncs, and renames it over <path>.
 */
#include "df.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BIG_THRESHOLD (1u << 20) /* from here on: anonymous huge-page buffers */
#define HUGE_ALIGN ((size_t)2 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

typedef struct st_entry {
    df_tensor_t t;
    uint64_t begin, end; /* offsets in the data area */
    void *copy;          /* aligned private copy, or NULL */
} st_entry_t;

struct df_st {
    void *base;    /* the whole file, in memory owned here */
    size_t len;
    int mapped;    /* base is an anonymous mapping of maplen bytes */
    size_t maplen;
    size_t n;
    st_entry_t *e;
    size_t n_meta;
    char **meta_keys, **meta_vals;
};

/* ------------------------------------------------------------- helpers */

static int dtype_from_st(const char *s, df_dtype_t *out)
{
    for (int i = 0; i < DF_DT_COUNT; i++)
        if (strcmp(s, df_dtype_name((df_dtype_t)i)) == 0) {
            *out = (df_dtype_t)i;
            return 1;
        }
    return 0;
}

/* dtypes of the safetensors spec that we do not evaluate */
static int dtype_known_unsupported(const char *s)
{
    static const char *const other[] = {"F8_E4M3", "F8_E5M2", "F8_E8M0",
                                        "F4", "F6_E2M3", "F6_E3M2",
                                        "C64", "C128", NULL};
    for (int i = 0; other[i]; i++)
        if (strcmp(s, other[i]) == 0) return 1;
    return 0;
}

static uint64_t rd_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Index of the first non-finite element, or -1. data may be unaligned. */
static int64_t first_nonfinite(const df_tensor_t *t)
{
    int64_t n = df_tensor_numel(t);
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case DF_DT_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t x;
            memcpy(&x, p + 4 * i, 4);
            if ((x & 0x7f800000u) == 0x7f800000u) return i;
        }
        break;
    case DF_DT_F64:
        for (int64_t i = 0; i < n; i++) {
            uint64_t x;
            memcpy(&x, p + 8 * i, 8);
            if ((x & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) return i;
        }
        break;
    case DF_DT_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t x;
            memcpy(&x, p + 2 * i, 2);
            if ((x & 0x7c00u) == 0x7c00u) return i;
        }
        break;
    case DF_DT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t x;
            memcpy(&x, p + 2 * i, 2);
            if ((x & 0x7f80u) == 0x7f80u) return i;
        }
        break;
    default: break;
    }
    return -1;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry_t *x = *(const st_entry_t *const *)a;
    const st_entry_t *y = *(const st_entry_t *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

void df_st_close(df_st_t **pst)
{
    if (!pst || !*pst) return;
    df_st_t *st = *pst;
    for (size_t i = 0; i < st->n; i++) {
        free((char *)st->e[i].t.name);
        free(st->e[i].copy);
    }
    free(st->e);
    for (size_t i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_vals[i]);
    }
    free(st->meta_keys);
    free(st->meta_vals);
    if (st->mapped)
        munmap(st->base, st->maplen);
    else
        free(st->base);
    free(st);
    *pst = NULL;
}

/* ------------------------------------------------------------- parsing */

static int parse_meta(df_st_t *st, json_t *meta, const df_limits_t *lim,
                      df_error_t *err)
{
    if (!json_is_object(meta))
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: __metadata__ is not an object");
    size_t n = json_object_size(meta);
    if (n > lim->max_tensors)
        return df_error_set(err, DF_ELIMIT,
                            "safetensors: __metadata__ has %zu keys (limit %llu)",
                            n, (unsigned long long)lim->max_tensors);
    st->meta_keys = calloc(n ? n : 1, sizeof(char *));
    st->meta_vals = calloc(n ? n : 1, sizeof(char *));
    if (!st->meta_keys || !st->meta_vals)
        return df_error_set(err, DF_ENOMEM, "safetensors: out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return df_error_set(err, DF_EFORMAT,
                                "safetensors: __metadata__ key '%s' is not a "
                                "string", k);
        st->meta_keys[st->n_meta] = strdup(k);
        st->meta_vals[st->n_meta] = strdup(json_string_value(v));
        st->n_meta++;
        if (!st->meta_keys[st->n_meta - 1] || !st->meta_vals[st->n_meta - 1])
            return df_error_set(err, DF_ENOMEM, "safetensors: out of memory");
    }
    return DF_OK;
}

static int parse_entry(st_entry_t *e, const char *name, json_t *v,
                       uint64_t data_len, const df_limits_t *lim,
                       df_error_t *err)
{
    if (!json_is_object(v))
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': entry is not an object",
                            name);
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': \"dtype\" missing or "
                            "not a string", name);
    const char *ds = json_string_value(jd);
    if (!dtype_from_st(ds, &e->t.dtype))
        return df_error_set(err,
                            dtype_known_unsupported(ds) ? DF_EUNSUPPORTED
                                                        : DF_EFORMAT,
                            "safetensors: tensor '%s': unknown dtype '%.32s'",
                            name, ds);
    if (!json_is_array(js))
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': \"shape\" missing or "
                            "not an array", name);
    size_t nd = json_array_size(js);
    if (nd > DF_MAX_DIMS)
        return df_error_set(err, DF_ELIMIT,
                            "safetensors: tensor '%s': %zu dimensions (max %d)",
                            name, nd, DF_MAX_DIMS);
    e->t.ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return df_error_set(err, DF_EFORMAT,
                                "safetensors: tensor '%s': shape[%zu] is not a "
                                "non-negative integer", name, i);
        e->t.shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(numel, (uint64_t)e->t.shape[i], &numel))
            overflow = 1;
    }
    if (overflow || numel > lim->max_tensor_elems)
        return df_error_set(err, DF_ELIMIT,
                            "safetensors: tensor '%s': too many elements "
                            "(limit %llu)", name,
                            (unsigned long long)lim->max_tensor_elems);
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)df_dtype_size(e->t.dtype),
                               &nbytes))
        return df_error_set(err, DF_ELIMIT,
                            "safetensors: tensor '%s': byte size overflows",
                            name);
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': \"data_offsets\" is not "
                            "[begin, end] integers", name);
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < 0 || b > en)
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': bad data_offsets "
                            "[%lld, %lld]", name, (long long)b, (long long)en);
    if ((uint64_t)en > data_len)
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': data_offsets end %lld "
                            "beyond the data area (%llu bytes)", name,
                            (long long)en, (unsigned long long)data_len);
    if ((uint64_t)(en - b) != nbytes)
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: tensor '%s': %lld bytes for shape "
                            "with %llu elements of %s (%llu bytes expected)",
                            name, (long long)(en - b),
                            (unsigned long long)numel,
                            df_dtype_name(e->t.dtype),
                            (unsigned long long)nbytes);
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    e->t.nbytes = (size_t)nbytes;
    e->t.name = strdup(name);
    if (!e->t.name) return df_error_set(err, DF_ENOMEM, "out of memory");
    return DF_OK;
}

/* st->base/len hold the whole file. Validates and fills the entries. */
static int st_build(df_st_t *st, const df_limits_t *lim, df_error_t *err)
{
    const unsigned char *p = st->base;
    if (st->len < 8)
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: file is %zu bytes, shorter than the "
                            "8-byte header length", st->len);
    uint64_t hlen = rd_u64le(p);
    if (hlen > lim->max_header_bytes)
        return df_error_set(err, DF_ELIMIT,
                            "safetensors: header length %llu exceeds limit %llu",
                            (unsigned long long)hlen,
                            (unsigned long long)lim->max_header_bytes);
    if (hlen > st->len - 8)
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: header length %llu but only %zu bytes "
                            "follow (truncated file?)",
                            (unsigned long long)hlen, st->len - 8);
    const unsigned char *data = p + 8 + hlen;
    uint64_t data_len = st->len - 8 - hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)p + 8, hlen,
                              JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return df_error_set(err, DF_EFORMAT,
                            "safetensors: header is not valid JSON: %s "
                            "(at byte %d)", je.text, je.position);
    int rc = DF_OK;
    if (!json_is_object(root)) {
        rc = df_error_set(err, DF_EFORMAT,
                          "safetensors: header is not a JSON object");
        goto done;
    }
    size_t count = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta) count--;
    if (count > lim->max_tensors) {
        rc = df_error_set(err, DF_ELIMIT,
                          "safetensors: %zu tensors exceed limit %llu", count,
                          (unsigned long long)lim->max_tensors);
        goto done;
    }
    if (meta && (rc = parse_meta(st, meta, lim, err)) != DF_OK) goto done;

    st->e = calloc(count ? count : 1, sizeof *st->e);
    if (!st->e) {
        rc = df_error_set(err, DF_ENOMEM, "safetensors: out of memory");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) continue;
        DF_ASSERT(st->n < count);
        st_entry_t *e = &st->e[st->n];
        rc = parse_entry(e, k, v, data_len, lim, err);
        if (e->t.name) st->n++;
        if (rc) goto done;
    }

    /* overlaps */
    if (st->n > 1) {
        st_entry_t **ord = malloc(st->n * sizeof *ord);
        if (!ord) {
            rc = df_error_set(err, DF_ENOMEM, "safetensors: out of memory");
            goto done;
        }
        for (size_t i = 0; i < st->n; i++) ord[i] = &st->e[i];
        qsort(ord, st->n, sizeof *ord, cmp_begin);
        for (size_t i = 0; i + 1 < st->n; i++) {
            /* empty tensors overlap nothing */
            if (ord[i]->end > ord[i + 1]->begin && ord[i]->begin < ord[i]->end &&
                ord[i + 1]->begin < ord[i + 1]->end) {
                rc = df_error_set(err, DF_EFORMAT,
                                  "safetensors: tensor '%s' [%llu, %llu) "
                                  "overlaps tensor '%s' [%llu, %llu)",
                                  ord[i]->t.name,
                                  (unsigned long long)ord[i]->begin,
                                  (unsigned long long)ord[i]->end,
                                  ord[i + 1]->t.name,
                                  (unsigned long long)ord[i + 1]->begin,
                                  (unsigned long long)ord[i + 1]->end);
                break;
            }
        }
        free(ord);
        if (rc) goto done;
    }

    /* data pointers, alignment, finiteness */
    for (size_t i = 0; i < st->n; i++) {
        st_entry_t *e = &st->e[i];
        const unsigned char *d = data + e->begin;
        e->t.data = d;
        int64_t bad = first_nonfinite(&e->t);
        if (bad >= 0) {
            rc = df_error_set(err, DF_EFORMAT,
                              "safetensors: tensor '%s': element %lld is not "
                              "finite (NaN or Inf)", e->t.name, (long long)bad);
            goto done;
        }
        if ((uintptr_t)d % 8 != 0 && e->t.nbytes > 0) {
            if (posix_memalign(&e->copy, 64, e->t.nbytes) != 0) {
                e->copy = NULL;
                rc = df_error_set(err, DF_ENOMEM,
                                  "safetensors: tensor '%s': out of memory",
                                  e->t.name);
                goto done;
            }
            memcpy(e->copy, d, e->t.nbytes);
            e->t.data = e->copy;
        }
    }
done:
    json_decref(root);
    return rc;
}

/* st->base = a fresh buffer of len bytes (64-byte aligned). Large ones are
 * anonymous mappings at a 2 MiB boundary, advised as huge pages and
 * pre-faulted, see DESIGN; the advice is best effort (without transparent
 * huge pages or MADV_POPULATE_WRITE the buffer is still correct, only
 * slower to fill). Returns 0 or -1 (out of memory). */
static int st_alloc(df_st_t *st, size_t len)
{
    if (len < BIG_THRESHOLD) {
        if (posix_memalign(&st->base, 64, len ? len : 1) != 0) return -1;
        return 0;
    }
    size_t want = (len + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
    if (want < len || want + HUGE_ALIGN < want) return -1;
    char *m = mmap(NULL, want + HUGE_ALIGN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    char *a = (char *)(((uintptr_t)m + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    if (a > m) munmap(m, (size_t)(a - m));
    size_t tail = (size_t)(m + want + HUGE_ALIGN - (a + want));
    if (tail) munmap(a + want, tail);
    (void)madvise(a, want, MADV_HUGEPAGE);
    (void)madvise(a, want, MADV_POPULATE_WRITE);
    st->base = a;
    st->maplen = want;
    st->mapped = 1;
    return 0;
}

int df_st_parse(const void *buf, size_t len, const df_limits_t *lim,
                df_st_t **out, df_error_t *err)
{
    df_limits_t dl;
    if (!lim) { df_limits_default(&dl); lim = &dl; }
    *out = NULL;
    if (!buf && len) return df_error_set(err, DF_EINVAL, "safetensors: NULL buffer");
    if (len > lim->max_file_bytes)
        return df_error_set(err, DF_ELIMIT,
                            "safetensors: %zu bytes exceed limit %llu", len,
                            (unsigned long long)lim->max_file_bytes);
    df_st_t *st = calloc(1, sizeof *st);
    if (!st) return df_error_set(err, DF_ENOMEM, "safetensors: out of memory");
    if (st_alloc(st, len)) {
        free(st);
        return df_error_set(err, DF_ENOMEM, "safetensors: out of memory");
    }
    if (len) memcpy(st->base, buf, len);
    st->len = len;
    int rc = st_build(st, lim, err);
    if (rc) { df_st_close(&st); return rc; }
    *out = st;
    return DF_OK;
}

int df_st_open(const char *path, const df_limits_t *lim, df_st_t **out,
               df_error_t *err)
{
    df_limits_t dl;
    if (!lim) { df_limits_default(&dl); lim = &dl; }
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return df_error_set(err, errno == ENOENT ? DF_ENOTFOUND : DF_EIO,
                            "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return df_error_set(err, DF_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > lim->max_file_bytes) {
        close(fd);
        return df_error_set(err, DF_ELIMIT, "%s: %lld bytes exceed limit %llu",
                            path, (long long)sb.st_size,
                            (unsigned long long)lim->max_file_bytes);
    }
    df_st_t *st = calloc(1, sizeof *st);
    if (!st) { close(fd); return df_error_set(err, DF_ENOMEM, "out of memory"); }
    size_t len = (size_t)sb.st_size;
    st->len = len;
    if (st_alloc(st, len)) {
        close(fd);
        free(st);
        return df_error_set(err, DF_ENOMEM, "%s: out of memory for %zu bytes", path, len);
    }
    /* read(), never mmap: see DESIGN (SIGBUS) */
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)st->base + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            df_st_close(&st);
            if (r == 0)
                return df_error_set(err, DF_EIO,
                                    "%s: file shrank from %zu to %zu bytes while being "
                                    "read (rewritten in place? replace model files by "
                                    "renaming a complete copy over them)",
                                    path, len, got);
            return df_error_set(err, DF_EIO, "%s: read: %s", path, strerror(e));
        }
        got += (size_t)r;
    }
    struct stat sa;
    int same = fstat(fd, &sa) == 0 && sa.st_size == sb.st_size &&
               sa.st_mtim.tv_sec == sb.st_mtim.tv_sec &&
               sa.st_mtim.tv_nsec == sb.st_mtim.tv_nsec &&
               sa.st_ctim.tv_sec == sb.st_ctim.tv_sec &&
               sa.st_ctim.tv_nsec == sb.st_ctim.tv_nsec;
    if (!same) {
        close(fd);
        df_st_close(&st);
        return df_error_set(err, DF_EIO,
                            "%s: file changed while being read (rewritten in place? "
                            "replace model files by renaming a complete copy over "
                            "them)", path);
    }
    close(fd);
    int rc = st_build(st, lim, err);
    if (rc) {
        /* prefix the path so the message names the file too */
        if (err) {
            char tmp[sizeof err->msg];
            snprintf(tmp, sizeof tmp, "%.200s: %.300s", path, err->msg);
            memcpy(err->msg, tmp, sizeof tmp);
        }
        df_st_close(&st);
        return rc;
    }
    *out = st;
    return DF_OK;
}

size_t df_st_count(const df_st_t *st) { return st ? st->n : 0; }

const df_tensor_t *df_st_at(const df_st_t *st, size_t i)
{
    return st && i < st->n ? &st->e[i].t : NULL;
}

const df_tensor_t *df_st_find(const df_st_t *st, const char *name)
{
    if (!st || !name) return NULL;
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->e[i].t.name, name) == 0) return &st->e[i].t;
    return NULL;
}

const char *df_st_meta(const df_st_t *st, const char *key)
{
    if (!st || !key) return NULL;
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_vals[i];
    return NULL;
}

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < ndim && o < cap; i++) {
        if (shape[i] < 0)
            o += (size_t)snprintf(buf + o, cap - o, "%s*", i ? "," : "");
        else
            o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "",
                                  (long long)shape[i]);
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

int df_st_require(const df_st_t *st, const char *name, df_dtype_t dt, int ndim,
                  const int64_t *shape, int optional, const df_tensor_t **out,
                  df_error_t *err)
{
    *out = NULL;
    const df_tensor_t *t = df_st_find(st, name);
    if (!t) {
        if (optional) return DF_OK;
        return df_error_set(err, DF_ENOTFOUND, "tensor '%s' is missing", name);
    }
    if (t->dtype != dt)
        return df_error_set(err, DF_EFORMAT,
                            "tensor '%s': dtype %s, expected %s", name,
                            df_dtype_name(t->dtype), df_dtype_name(dt));
    if (ndim >= 0) {
        int ok = t->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++)
            if (shape && shape[i] >= 0 && shape[i] != t->shape[i]) ok = 0;
        if (!ok) {
            char want[160], got[160];
            int64_t any[DF_MAX_DIMS];
            for (int i = 0; i < DF_MAX_DIMS; i++) any[i] = -1;
            fmt_shape(want, sizeof want, ndim, shape ? shape : any);
            fmt_shape(got, sizeof got, t->ndim, t->shape);
            return df_error_set(err, DF_EFORMAT,
                                "tensor '%s': shape %s, expected %s", name, got,
                                want);
        }
    }
    *out = t;
    return DF_OK;
}

/* -------------------------------------------------------------- writer */

typedef struct {
    char *name;
    df_dtype_t dt;
    int ndim;
    int64_t shape[DF_MAX_DIMS];
    void *data;
    size_t nbytes;
} w_entry_t;

struct df_st_writer {
    size_t n, cap;
    w_entry_t *e;
    json_t *meta; /* object of strings */
};

df_st_writer_t *df_st_writer_new(void)
{
    df_st_writer_t *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->meta = json_object();
    if (!w->meta) { free(w); return NULL; }
    return w;
}

void df_st_writer_free(df_st_writer_t **pw)
{
    if (!pw || !*pw) return;
    df_st_writer_t *w = *pw;
    for (size_t i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].data);
    }
    free(w->e);
    json_decref(w->meta);
    free(w);
    *pw = NULL;
}

int df_st_writer_add(df_st_writer_t *w, const char *name, df_dtype_t dt,
                     int ndim, const int64_t *shape, const void *data)
{
    if (!w || !name || !*name || strcmp(name, "__metadata__") == 0 ||
        (unsigned)dt >= DF_DT_COUNT || ndim < 0 || ndim > DF_MAX_DIMS ||
        (ndim > 0 && !shape))
        return DF_EINVAL;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return DF_EINVAL;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return DF_EINVAL;
        if (__builtin_mul_overflow(numel, (uint64_t)shape[i], &numel))
            return DF_ELIMIT;
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)df_dtype_size(dt), &nbytes) ||
        nbytes > SIZE_MAX / 2)
        return DF_ELIMIT;
    if (nbytes && !data) return DF_EINVAL;
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 16;
        w_entry_t *ne = realloc(w->e, nc * sizeof *ne);
        if (!ne) return DF_ENOMEM;
        w->e = ne;
        w->cap = nc;
    }
    w_entry_t *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->data = malloc(nbytes ? nbytes : 1);
    if (!e->name || !e->data) {
        free(e->name);
        free(e->data);
        return DF_ENOMEM;
    }
    if (nbytes) memcpy(e->data, data, nbytes);
    e->dt = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = (size_t)nbytes;
    w->n++;
    return DF_OK;
}

int df_st_writer_meta(df_st_writer_t *w, const char *key, const char *value)
{
    if (!w || !key || !value) return DF_EINVAL;
    json_t *s = json_string(value);
    if (!s) return DF_EINVAL; /* not UTF-8 */
    return json_object_set_new(w->meta, key, s) == 0 ? DF_OK : DF_EINVAL;
}

static int write_all(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n;
}

/* Data layout without gaps (the reference implementation refuses files whose
 * tensors do not tile the data area), keeping the big tensors 8-aligned:
 * at an aligned offset take the largest remaining tensor whose size is a
 * multiple of 8 (so all of those are aligned), then the largest other one;
 * at a misaligned offset take the smallest tensor that restores alignment
 * (or the smallest).
 * order[k] is the k-th tensor in the data area; off[i] its offset. */
typedef struct {
    size_t nbytes, idx;
} size_idx_t;

static int cmp_size_desc(const void *a, const void *b)
{
    const size_idx_t *x = a, *y = b;
    int xa = x->nbytes % 8 == 0, ya = y->nbytes % 8 == 0;
    if (xa != ya) return ya - xa; /* multiples of 8 first */
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? 1 : -1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int plan_layout(const df_st_writer_t *w, size_t *order, uint64_t *off)
{
    if (w->n > 4096) { /* the greedy pass is quadratic: sort instead */
        size_idx_t *v = malloc(w->n * sizeof *v);
        if (!v) return DF_ENOMEM;
        for (size_t i = 0; i < w->n; i++) v[i] = (size_idx_t){w->e[i].nbytes, i};
        qsort(v, w->n, sizeof *v, cmp_size_desc);
        uint64_t cur = 0;
        for (size_t k = 0; k < w->n; k++) {
            order[k] = v[k].idx;
            off[v[k].idx] = cur;
            cur += v[k].nbytes;
        }
        free(v);
        return DF_OK;
    }
    char *used = calloc(w->n ? w->n : 1, 1);
    if (!used) return DF_ENOMEM;
    uint64_t cur = 0;
    for (size_t k = 0; k < w->n; k++) {
        size_t best = (size_t)-1;
        for (size_t i = 0; i < w->n; i++) {
            if (used[i]) continue;
            size_t nb = w->e[i].nbytes;
            if (best == (size_t)-1) { best = i; continue; }
            size_t bb = w->e[best].nbytes;
            if (cur % 8 == 0) { /* multiples of 8 first: all stay aligned */
                int mi = nb % 8 == 0, mb = bb % 8 == 0;
                if (mi > mb || (mi == mb && nb > bb)) best = i;
            } else {
                int fi = (cur + nb) % 8 == 0, fb = (cur + bb) % 8 == 0;
                if (fi > fb || (fi == fb && nb < bb)) best = i;
            }
        }
        used[best] = 1;
        order[k] = best;
        off[best] = cur;
        cur += w->e[best].nbytes;
    }
    free(used);
    return DF_OK;
}

int df_st_writer_save(df_st_writer_t *w, const char *path, df_error_t *err)
{
    if (!w || !path) return df_error_set(err, DF_EINVAL, "st writer: NULL argument");
    size_t *order = malloc((w->n ? w->n : 1) * sizeof *order);
    uint64_t *offs = malloc((w->n ? w->n : 1) * sizeof *offs);
    if (!order || !offs || plan_layout(w, order, offs) != DF_OK) {
        free(order);
        free(offs);
        return df_error_set(err, DF_ENOMEM, "st writer: out of memory");
    }
    json_t *root = json_object();
    if (!root) {
        free(order);
        free(offs);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    int rc = DF_OK;
    if (json_object_size(w->meta) > 0)
        json_object_set(root, "__metadata__", w->meta);
    for (size_t i = 0; i < w->n; i++) {
        w_entry_t *e = &w->e[i];
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++)
            json_array_append_new(shape, json_integer(e->shape[d]));
        json_t *ent = json_pack("{s:s, s:o, s:[I,I]}", "dtype",
                                df_dtype_name(e->dt), "shape", shape,
                                "data_offsets", (json_int_t)offs[i],
                                (json_int_t)(offs[i] + e->nbytes));
        if (!ent || json_object_set_new(root, e->name, ent) != 0) {
            json_decref(root);
            free(order);
            free(offs);
            return df_error_set(err, DF_ENOMEM, "st writer: out of memory");
        }
    }
    free(offs);
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!hdr) {
        free(order);
        return df_error_set(err, DF_ENOMEM, "st writer: out of memory");
    }
    size_t hl = strlen(hdr);
    size_t pad = (8 - (8 + hl) % 8) % 8;
    uint64_t hlen = hl + pad;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(hlen >> (8 * i));

    size_t plen = strlen(path) + 5;
    char *tmp = malloc(plen);
    if (!tmp) {
        free(hdr);
        free(order);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    snprintf(tmp, plen, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = df_error_set(err, DF_EIO, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    static const char spaces[8] = "       ";
    int ok = write_all(f, lenb, 8) && write_all(f, hdr, hl) &&
             write_all(f, spaces, pad);
    for (size_t k = 0; ok && k < w->n; k++)
        ok = write_all(f, w->e[order[k]].data, w->e[order[k]].nbytes);
    if (fflush(f) != 0) ok = 0;
    if (ok && fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        rc = df_error_set(err, DF_EIO, "%s: write failed: %s", tmp,
                          strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        rc = df_error_set(err, DF_EIO, "%s: rename: %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    free(order);
    free(tmp);
    free(hdr);
    return rc;
}

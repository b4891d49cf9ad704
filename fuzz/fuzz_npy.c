/* fuzz_npy.c — libFuzzer driver for the .npy reader (core/base/npy.c:
 * clips and training data read by bin/deform).
 *
 * The reader takes a path, so each input is written to an anonymous
 * memory file and read through /proc/self/fd. Oracles: an error has its
 * code and a message and no data; success gives 1..DF_MAX_DIMS dimensions
 * whose product is the number of floats, every one of them readable.
 * Seeds: fuzz/corpus/npy (replayed by tests/unit/fuzz/test_fuzz_npy.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "df.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz_npy", 0);
    if (fd < 0) abort();
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int ndim = -1;
    int64_t shape[DF_MAX_DIMS];
    float *x = NULL;
    df_error_t err = {0};
    int rc = df_npy_read_f32(path, &ndim, shape, &x, &err);
    if (rc != DF_OK) {
        if (x || err.code != rc || !err.msg[0]) abort();
        return 0;
    }
    if (ndim < 0 || ndim > DF_MAX_DIMS) abort();
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0) abort();
        n *= shape[k];
    }
    if (n * 4 > (int64_t)size) abort(); /* the floats came from the file */
    volatile float s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    free(x);
    return 0;
}

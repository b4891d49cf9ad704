/* fuzz_safetensors.c — libFuzzer driver for the safetensors reader.
 *
 * Feeds arbitrary bytes to df_st_parse with small limits (so the fuzzer
 * explores the limit paths instead of allocating gigabytes) and, when a file
 * is accepted, touches every tensor byte and checks the invariants the rest
 * of the code relies on: data 8-byte aligned, nbytes == numel * dtype size,
 * names unique. Build and run with `make fuzz` (clang, -fsanitize=fuzzer,
 * address,undefined). Seeds: fuzz/corpus/safetensors/.
 */
#include "df.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_limits_t lim;
    df_limits_default(&lim);
    lim.max_file_bytes = 1 << 20;
    lim.max_header_bytes = 1 << 16;
    lim.max_tensors = 64;
    lim.max_tensor_elems = 1 << 16;
    df_st_t *st = NULL;
    df_error_t err = {0};
    int rc = df_st_parse(data, size, &lim, &st, &err);
    if (rc != DF_OK) {
        if (st || err.code != rc || err.msg[0] == 0) abort();
        return 0;
    }
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < df_st_count(st); i++) {
        const df_tensor_t *t = df_st_at(st, i);
        if (t->nbytes && ((uintptr_t)t->data % 8) != 0) abort();
        if ((size_t)df_tensor_numel(t) * df_dtype_size(t->dtype) != t->nbytes)
            abort();
        if (df_st_find(st, t->name) != t) abort();
        for (size_t j = 0; j < t->nbytes; j++)
            sink ^= ((const unsigned char *)t->data)[j];
    }
    (void)df_st_meta(st, "kind");
    df_st_close(&st);
    return 0;
}

/* fuzz_deformd_conf.c — libFuzzer driver for the daemon's configuration
 * file reader (server/config.c, `key = value` lines; compiled in here, it
 * needs nothing else of the server).
 *
 * The reader takes a path, so each input is written to an anonymous memory
 * file and read through /proc/self/fd. Oracles: an error names the file
 * and has its code; a file that loads leaves every number key inside its
 * documented range. Seeds: fuzz/corpus/deformd_conf (replayed by
 * tests/unit/fuzz/test_fuzz_deformd_conf.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
/* renamed: the corpus replay test links the server's own config.o too */
#define df_config_default fz_config_default
#define df_config_load_file fz_config_load_file
#define df_config_set fz_config_set
#define df_config_finish fz_config_finish
#define df_config_token_match fz_config_token_match
#include "../server/config.c"

#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz_conf", 0);
    if (fd < 0) abort();
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    df_config_t c;
    df_config_default(&c);
    df_error_t err = {0};
    int rc = df_config_load_file(&c, path, &err);
    if (rc != DF_OK) {
        if (err.code != rc || !strstr(err.msg, path)) abort();
        return 0;
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const key_t_ *k = &keys[i];
        const char *p = (const char *)&c + k->off;
        double v;
        switch (k->type) {
        case T_STR: if (!memchr(p, 0, k->cap)) abort(); continue;
        case T_BOOL: v = *(const int *)p; break;
        case T_INT: v = *(const int *)p; break;
        case T_I64: v = (double)*(const int64_t *)p; break;
        case T_U64: v = (double)*(const uint64_t *)p; break;
        default: v = *(const float *)p; break;
        }
        if (v < k->lo || v > k->hi) abort();
    }
    return 0;
}

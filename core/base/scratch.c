/* scratch.c — per-worker scratch memory.
 *
 * DESIGN
 * A worker owns one df_scratch_t and passes it to every evaluation. It is a
 * single 64-byte aligned block that grows (to the next power of two, so a
 * worker settles after a few batches) and never shrinks: once grown, the hot
 * path allocates nothing. Contents are not preserved across a grow, which is
 * fine because each evaluation treats scratch as uninitialised.
 */
#include "df.h"

#include <stdlib.h>

struct df_scratch {
    void *mem;
    size_t cap;
};

df_scratch_t *df_scratch_new(void)
{
    return calloc(1, sizeof(df_scratch_t));
}

void df_scratch_free(df_scratch_t **s)
{
    if (!s || !*s) return;
    free((*s)->mem);
    free(*s);
    *s = NULL;
}

void *df_scratch_get(df_scratch_t *s, size_t bytes)
{
    if (!s) return NULL;
    if (bytes == 0) bytes = 64;
    if (bytes <= s->cap) return s->mem;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < bytes) {
        if (cap > SIZE_MAX / 2) { cap = bytes; break; }
        cap *= 2;
    }
    cap = (cap + 63) & ~(size_t)63;
    if (cap < bytes) return NULL; /* rounding overflowed */
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0) return NULL;
    free(s->mem);
    s->mem = p;
    s->cap = cap;
    return p;
}

size_t df_scratch_capacity(const df_scratch_t *s)
{
    return s ? s->cap : 0;
}

/* cache_read.h — MDD and PC2 point caches (positions per frame, no
 * topology); formats in cache_read.c and docs/decompose.md. */
#ifndef DF_TOOL_CACHE_READ_H
#define DF_TOOL_CACHE_READ_H

#include "df.h"

typedef struct df__cache {
    int64_t F, N;
    float *frames;    /* [F,N,3] as stored */
    float *times;     /* [F] seconds */
    char source[64];
} df__cache_t;

/* Read path by its extension (.mdd / .pc2). fps (<= 0: 24) turns frame
 * numbers into seconds where the file has none. Malformed files (bad
 * signature, counts that disagree with the size, non-finite values) get
 * DF_EFORMAT naming the problem. c is filled; free with df__cache_free. */
int df__cache_read(const char *path, double fps, df__cache_t *c, df_error_t *err);
void df__cache_free(df__cache_t *c);

#endif

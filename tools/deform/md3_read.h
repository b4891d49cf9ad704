/* md3_read.h — every frame of an id Tech 3 MD3 (format in md3_read.c). */
#ifndef DF_TOOL_MD3_READ_H
#define DF_TOOL_MD3_READ_H

#include "df.h"

typedef struct df__md3 {
    int64_t F, N, T;
    float *frames;    /* [F,N,3], all surfaces, x/64 as stored */
    uint32_t *tris;   /* [T,3] */
    float *times;     /* [F] p / fps */
    char source[64];
} df__md3_t;

/* fps <= 0: 10. Malformed files get DF_EFORMAT naming the surface and the
 * problem. m filled; free with df__md3_free. */
int df__md3_read(const char *path, double fps, df__md3_t *m, df_error_t *err);
void df__md3_free(df__md3_t *m);

#endif

/* model_internal.h — the model object as kinds see it (core-internal).
 *
 * A kind's load() receives a zeroed df_model_t with kind/refcount set and
 * fills: the io descriptions and defaults, the output mesh (rest positions,
 * triangles, bbox), the named lists, clip infos, and impl (its own data,
 * freed by kind->destroy). Everything here is immutable once load returns.
 */
#ifndef DF_MODEL_INTERNAL_H
#define DF_MODEL_INTERNAL_H

#include "df.h"
#include <stdatomic.h>

#define DF__MAX_LISTS 4

typedef struct df__namelist {
    char list[16];        /* "joints", "morphs", "controls", "clips" */
    size_t n;
    char **names;         /* owned: each string and the array are freed */
} df__namelist_t;

struct df_model {
    const df_kind_t *kind;            /* immutable after load */
    atomic_int refs;
    char name[DF_NAME_MAX];
    int64_t version;

    int n_inputs, n_outputs;
    df_io_desc_t inputs[DF_MAX_IO];
    df_io_desc_t outputs[DF_MAX_IO];
    float *input_defaults[DF_MAX_IO]; /* owned; numel floats each */

    int64_t n_vertices, n_triangles;
    float *rest_positions;            /* owned [N,3] */
    uint32_t *triangles;              /* owned [T,3] */
    float bbox_lo[3], bbox_hi[3];

    int n_lists;
    df__namelist_t lists[DF__MAX_LISTS];

    size_t n_clips;
    df_clip_info_t *clips;            /* owned array; names/times owned by impl */

    void *impl;                       /* kind data, freed by kind->destroy */
};

/* Helpers for kinds (core/base/model.c). */
int df__model_add_input(df_model_t *m, const char *name, int ndim,
                        const int64_t *shape, int optional,
                        const float *default_value /* copied, may be NULL=0 */);
int df__model_add_output(df_model_t *m, const char *name, int ndim,
                         const int64_t *shape);
/* Copies positions/triangles and computes the bbox. */
int df__model_set_mesh(df_model_t *m, int64_t n_vertices,
                       const float *positions, int64_t n_triangles,
                       const uint32_t *triangles);
/* Copies the strings. */
int df__model_set_names(df_model_t *m, const char *list, size_t n,
                        const char *const *names);
/* Parse a JSON array of strings (as stored in __metadata__) into a namelist;
 * *out new: free each and the array. */
int df__json_string_array(const char *json, size_t expect, char ***out,
                          size_t *n, df_error_t *err);

#endif

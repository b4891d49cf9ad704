/* import.h — shared between bin/deform's asset-side subcommands (import, eval, info, compare).
 *
 * DESIGN
 * import_scene.c turns an assimp scene into a df_rigged_data_t (the in-memory `rigged` model,
 * written by df_rigged_write); import_bvh.c turns a BVH (or any animation-only file) into
 * clips for an existing model and writes a new version of it; import_util.c holds the small
 * file/repository helpers the subcommands share (open a model given as a directory or a
 * .safetensors file, next version number, config.json). Everything here is tool code: it may
 * allocate freely and prints warnings on stderr; the library stays in core/.
 */
#ifndef DF_TOOL_IMPORT_H
#define DF_TOOL_IMPORT_H

#include "df.h"
#include <stdio.h>

#define DF__IMPORT_MAX_INFLUENCES 8

typedef struct df__import_opts {
    const char *skinning;  /* "lbs" or "dqs" */
    int verbose;
    int morphs_per_mesh;   /* 1: every mesh's morph targets apart (names made unique); 0:
                            * targets of one name across meshes are one control */
} df__import_opts_t;

/* What the import found, for the summary line and the tests. */
typedef struct df__import_summary {
    int n_meshes;            /* meshes merged */
    int n_rigid_meshes;      /* meshes without bones bound rigidly to their node */
    int n_bones;             /* distinct bone nodes */
    long n_skipped_faces;    /* points/lines dropped */
    int n_ignored_channels;  /* channels targeting nodes that move no vertex */
    int n_matrix_clips;      /* clips stored as world matrices (animated scale) */
    int n_inconsistent_binds;/* bones whose offset matrices disagree between meshes */
    int n_missing_bones;     /* bones without a node: follow their mesh's node rigidly */
    int static_first_frame;  /* vertex-animated format: first frame only */
    int n_shared_morphs;     /* meshes' targets joined to an earlier mesh's control by name */
    int n_morph_conflicts;   /* shared controls a clip animates otherwise in different meshes */
} df__import_summary_t;

/* Import ASSET through assimp into *out (new: free with df__import_free). */
int df__import_scene(const char *path, const df__import_opts_t *opts,
                     df_rigged_data_t *out /* OUT */, df__import_summary_t *sum /* OUT */,
                     df_error_t *err);
void df__import_free(df_rigged_data_t *d);

/* Read the animations of ASSET (BVH or any format assimp animates) and map them by joint name
 * onto the model file src_model (a rigged .safetensors); write dst_model with every tensor of
 * the source plus the new clips. Reports unmatched joints on stderr. */
int df__import_clips_for(const char *asset, const char *src_model, const char *dst_model,
                         FILE *report, df_error_t *err);

/* import_xform.c: change a whole model by X = s·A (s > 0; A a rotation that permutes axes,
 * from df__import_up_matrix) so that every pose evaluates to X times its old result. */
int df__import_transform(df_rigged_data_t *d, double s, const double A[9], df_error_t *err);
/* The rotation taking an asset's up axis ("y", "z", "-z", "x", "-x", "-y") to +Y; -1 if unknown. */
int df__import_up_matrix(const char *up, double A[9] /* OUT */);
/* Metres per unit of "m", "cm", "mm", "km", "in", "ft"; -1 if unknown. */
int df__import_units_scale(const char *units, double *s /* OUT */);

/* MODEL argument of eval/info: a model directory REPO/NAME (loaded with df_repo_load on REPO)
 * or a .safetensors file (kind from its metadata). *out new: df_model_unref. If path_out is
 * not NULL it receives the safetensors path that was loaded (size n). */
int df__tool_open_model(const char *arg, df_model_t **out, char *path_out, size_t n,
                        df_error_t *err);

/* Highest numeric version directory in REPO/NAME (0 when none). */
int64_t df__tool_latest_version(const char *model_dir);
/* mkdir -p */
int df__tool_mkdirs(const char *path, df_error_t *err);

#endif

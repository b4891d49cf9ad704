/* glb.h — glTF 2.0 binary (.glb) writer for rest and posed meshes, so any
 * glTF viewer can show what the daemon computed. Pure (no I/O). */
#ifndef DF_SERVER_GLB_H
#define DF_SERVER_GLB_H

#include "kserve.h"
#include <stdint.h>

/* Append a .glb holding n_meshes meshes (one node each) that share the
 * triangle list: positions[k] is [n_vertices,3], normals[k] [n_vertices,3]
 * or NULL. Returns DF_OK, DF_ENOMEM, or DF_ELIMIT (over 4 GiB). */
int df_glb_write(df_ks_buf_t *out, int n_meshes, const float *const *positions,
                 const float *const *normals, int64_t n_vertices, const uint32_t *triangles,
                 int64_t n_triangles, const char *name, df_error_t *err);

#endif

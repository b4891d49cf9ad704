/* glb_write.h — a decomposition with its skeleton as a glTF 2.0 binary
 * (skinned mesh, skin with inverse bind matrices, one animation). */
#ifndef DF_TOOL_GLB_WRITE_H
#define DF_TOOL_GLB_WRITE_H

#include "decompose/decompose.h"

/* Writes path. r: a rigid or trs fit; s: its skeleton (df_decompose_skeleton,
 * hierarchy or not); triangles [T,3]; times [F] seconds (NULL: 30 fps; the
 * animation starts at 0). Rigid fits get translation + rotation channels,
 * trs fits also scale. More than 4 influences go to JOINTS_1/WEIGHTS_1. */
int df__glb_write_rig(const char *path, const df_decompose_result_t *r,
                      const df_decompose_skeleton_t *s, int64_t n_triangles,
                      const uint32_t *triangles, const float *times, const char *clip_name,
                      df_error_t *err);

#endif

/* import_xform.c — units and up axis of an imported asset (`deform import --units/--scale/--up`).
 *
 * DESIGN
 * Assets come in their authors' units and up axes (an FBX from Maya in centimetres, a Z-up
 * scene); deformd serves what it imports. df__import_transform changes a whole rigged model by
 * a similarity X = s·A (s > 0 a uniform scale, A a proper rotation that is a signed axis
 * permutation: the up-axis change), so that every pose of every clip evaluates to X times what
 * it evaluated to before. Each joint is conjugated, world'_j = X world_j X^-1, which keeps the
 * skeleton's local TRS form:
 *   rest translation t -> s A t      rest rotation R -> A R A^T (quaternion q_A q q_A*)
 *   rest scale diag(S) -> A S A^T (a permutation of S: A permutes axes)
 *   inverse bind [L|t] -> [A L A^T | s A t]     clip rotations/translations/matrices alike
 * and the mesh: positions s A p, normals A n, morph deltas s A d, normal deltas A dn.
 */
#include "import.h"
#include "math/mathx.h"

#include <math.h>
#include <string.h>

static void mv(const double A[9], const float *v, double s, float *o)
{
    double x = v[0], y = v[1], z = v[2];
    for (int r = 0; r < 3; r++) o[r] = (float)(s * (A[3 * r] * x + A[3 * r + 1] * y + A[3 * r + 2] * z));
}

/* [L|t] (row-major 3x4, stride `stride` floats) -> [A L A^T | s A t] */
static void conj34(const double A[9], double s, float *m)
{
    double L[9], T[9];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) L[3 * r + c] = m[4 * r + c];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            double v = 0;
            for (int k = 0; k < 3; k++) v += A[3 * r + k] * L[3 * k + c];
            T[3 * r + c] = v;
        }
    float t[3] = {m[3], m[7], m[11]}, t2[3];
    mv(A, t, s, t2);
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++) {
            double v = 0;
            for (int k = 0; k < 3; k++) v += T[3 * r + k] * A[3 * c + k];
            m[4 * r + c] = (float)v;
        }
        m[4 * r + 3] = t2[r];
    }
}

static void conj_quat(const float qa[4], float *q)
{
    float t[4], c[4];
    df_quat_mul(qa, q, t);
    df_quat_conj(qa, c);
    df_quat_mul(t, c, q);
}

int df__import_up_matrix(const char *up, double A[9])
{
    static const struct { const char *name; double m[9]; } ups[] = {
        {"y", {1, 0, 0, 0, 1, 0, 0, 0, 1}},  {"z", {1, 0, 0, 0, 0, 1, 0, -1, 0}},
        {"-z", {1, 0, 0, 0, 0, -1, 0, 1, 0}}, {"x", {0, -1, 0, 1, 0, 0, 0, 0, 1}},
        {"-x", {0, 1, 0, -1, 0, 0, 0, 0, 1}}, {"-y", {1, 0, 0, 0, -1, 0, 0, 0, -1}},
    };
    for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++)
        if (!strcmp(up, ups[i].name)) {
            memcpy(A, ups[i].m, sizeof ups[i].m);
            return 0;
        }
    return -1;
}

int df__import_units_scale(const char *u, double *s)
{
    static const struct { const char *name; double s; } us[] = {
        {"m", 1}, {"cm", 0.01}, {"mm", 0.001}, {"km", 1000}, {"in", 0.0254}, {"ft", 0.3048}};
    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++)
        if (!strcmp(u, us[i].name)) {
            *s = us[i].s;
            return 0;
        }
    return -1;
}

int df__import_transform(df_rigged_data_t *d, double s, const double A[9], df_error_t *err)
{
    if (!(s > 0) || !isfinite(s)) return df_error_set(err, DF_EINVAL, "scale %g must be > 0", s);
    float Af[9], qa[4];
    for (int i = 0; i < 9; i++) Af[i] = (float)A[i];
    df_quat_from_m33(Af, qa);
    const int64_t N = d->n_vertices, M = d->n_morphs, J = d->n_joints;
    for (int64_t v = 0; v < N; v++) {
        mv(A, d->positions + 3 * v, s, d->positions + 3 * v);
        if (d->normals) mv(A, d->normals + 3 * v, 1, d->normals + 3 * v);
    }
    for (int64_t i = 0; i < M * N; i++) {
        if (d->morph_deltas) mv(A, d->morph_deltas + 3 * i, s, d->morph_deltas + 3 * i);
        if (d->morph_normal_deltas)
            mv(A, d->morph_normal_deltas + 3 * i, 1, d->morph_normal_deltas + 3 * i);
    }
    for (int64_t j = 0; j < J; j++) {
        mv(A, d->rest_translations + 3 * j, s, d->rest_translations + 3 * j);
        conj_quat(qa, d->rest_rotations + 4 * j);
        float sc[3];
        for (int r = 0; r < 3; r++) { /* diag(A S A^T): A permutes the axes */
            double v = 0;
            for (int k = 0; k < 3; k++) v += A[3 * r + k] * A[3 * r + k] * d->rest_scales[3 * j + k];
            sc[r] = (float)v;
        }
        memcpy(d->rest_scales + 3 * j, sc, sizeof sc);
        conj34(A, s, d->inverse_bind + 16 * j); /* rows 0-2 of the 4x4 */
    }
    for (size_t c = 0; c < d->n_clips; c++) {
        df_rigged_clip_t *cl = &d->clips[c];
        for (int64_t f = 0; f < cl->n_keys; f++)
            for (int64_t j = 0; j < J; j++) {
                size_t k = (size_t)(f * J + j);
                if (cl->rotations) conj_quat(qa, cl->rotations + 4 * k);
                if (cl->translations) mv(A, cl->translations + 3 * k, s, cl->translations + 3 * k);
                if (cl->matrices) conj34(A, s, cl->matrices + 12 * k);
            }
    }
    return DF_OK;
}

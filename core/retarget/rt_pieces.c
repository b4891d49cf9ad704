/* rt_pieces.c — what a transfer gives a target's separate pieces
 * (eyeballs, teeth, a tongue): `deform retarget transfer --pieces /
 * --piece`.
 *
 * DESIGN
 * Every transfer (expression cloning, the naive copies, deformation
 * transfer) gives each target vertex the motion of its corresponding point
 * on the source's skin. A piece of the target that is not skin (a connected
 * component of its triangles: an eyeball, a row of teeth) then takes the
 * motion of the skin nearest to it: an eyeball takes the lid's blink and
 * is squashed by it. Per piece, after the transfer, for each shape:
 *   skin   the transferred displacements as they are;
 *   still  zero (an eyeball under a blink, the upper teeth);
 *   rigid  the rigid motion closest to the transferred displacements:
 *          Horn's alignment (df__rt_rigid_align, equal weights) of the
 *          piece's rest vertices x onto x + d, and d := R x + t - x (the
 *          lower teeth and the tongue under jawOpen follow the jaw's skin
 *          as a whole). A piece whose vertices, or their moved images, lie
 *          on a line has no rotation determined: it takes its mean
 *          displacement (a translation).
 * A shape is then a rigid motion of the piece at weight 1; in between,
 * blendshapes blend displacements linearly (a piece turned by angle a
 * comes out 1 - cos(a/2) smaller at weight 1/2), as a rig's own teeth
 * shapes do.
 * Which piece is which is the user's: no rule tells an eyeball (still)
 * from the lower teeth (rigid) by their shape.
 */
#include "retarget/retarget.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define E_(code, ...) df_error_set(err, code, __VA_ARGS__)

int df__rt_pieces_apply(const float *pos, int64_t nv, const int32_t *piece, int64_t np,
                        const uint8_t *mode, int64_t M, float *D, df_error_t *err)
{
    for (int64_t v = 0; v < nv; v++)
        if (piece[v] < 0 || piece[v] >= np)
            return E_(DF_EINVAL, "vertex %lld: piece %d out of range (%lld pieces)",
                      (long long)v, piece[v], (long long)np);
    for (int64_t k = 0; k < np; k++)
        if (mode[k] > DF_RT_PIECE_RIGID)
            return E_(DF_EINVAL, "piece %lld: unknown motion %d", (long long)k, mode[k]);
    /* the vertices of each piece, contiguous: start[k] .. start[k+1] in idx */
    int64_t *start = calloc((size_t)np + 1, sizeof(int64_t));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(nv ? nv : 1));
    int64_t nmax = 0;
    if (!start || !idx) goto oom;
    for (int64_t v = 0; v < nv; v++) start[piece[v] + 1]++;
    for (int64_t k = 0; k < np; k++) {
        if (start[k + 1] > nmax) nmax = start[k + 1];
        start[k + 1] += start[k];
    }
    {
        int64_t *fill = malloc(sizeof(int64_t) * (size_t)(np ? np : 1));
        if (!fill) goto oom;
        memcpy(fill, start, sizeof(int64_t) * (size_t)np);
        for (int64_t v = 0; v < nv; v++) idx[fill[piece[v]]++] = v;
        free(fill);
    }
    float *x = malloc(sizeof(float) * (size_t)(3 * (nmax ? nmax : 1)));
    float *y = malloc(sizeof(float) * (size_t)(3 * (nmax ? nmax : 1)));
    float *w = malloc(sizeof(float) * (size_t)(nmax ? nmax : 1));
    if (!x || !y || !w) {
        free(x), free(y), free(w);
        goto oom;
    }
    for (int64_t k = 0; k < np; k++) {
        const int64_t *iv = idx + start[k], n = start[k + 1] - start[k];
        if (mode[k] == DF_RT_PIECE_SKIN || n == 0) continue;
        for (int64_t s = 0; s < M; s++) {
            float *Ds = D + (size_t)s * (size_t)nv * 3;
            if (mode[k] == DF_RT_PIECE_STILL) {
                for (int64_t i = 0; i < n; i++) memset(Ds + 3 * iv[i], 0, 3 * sizeof(float));
                continue;
            }
            /* rigid: x -> x + d, equal weights summing to 1 */
            double mean[3] = {0, 0, 0};
            for (int64_t i = 0; i < n; i++)
                for (int d = 0; d < 3; d++) {
                    x[3 * i + d] = pos[3 * iv[i] + d];
                    y[3 * i + d] = pos[3 * iv[i] + d] + Ds[3 * iv[i] + d];
                    mean[d] += Ds[3 * iv[i] + d];
                }
            for (int64_t i = 0; i < n; i++) w[i] = (float)(1.0 / (double)n);
            double R[9], t[3];
            if (df__rt_rigid_align(x, y, w, n, 1, R, t)) { /* on a line: a translation */
                for (int d = 0; d < 3; d++) mean[d] /= (double)n;
                for (int64_t i = 0; i < n; i++)
                    for (int d = 0; d < 3; d++) Ds[3 * iv[i] + d] = (float)mean[d];
                continue;
            }
            for (int64_t i = 0; i < n; i++) {
                const double p[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
                for (int d = 0; d < 3; d++)
                    Ds[3 * iv[i] + d] = (float)(R[3 * d] * p[0] + R[3 * d + 1] * p[1] +
                                                R[3 * d + 2] * p[2] + t[d] - p[d]);
            }
        }
    }
    free(x), free(y), free(w);
    free(start), free(idx);
    return 0;
oom:
    free(start), free(idx);
    return E_(DF_ENOMEM, "out of memory (the pieces of %lld vertices)", (long long)nv);
}

/* cmd_compare.c — `deform compare`: vertex error between two position arrays.
 *
 *   deform compare A.npy B.npy [--rest MODEL] [--per-frame] [--tol REL]
 *
 * A and B are float32 [F,N,3] (or [N,3], one frame). The error of a vertex is the Euclidean
 * distance between A and B. Prints the max and mean, absolute and relative to a bounding-box
 * diagonal: the rest mesh's when --rest names a model, else the diagonal of A's first frame.
 * --per-frame adds one line per frame (its max). Exit 1 when the shapes differ, when a value
 * is not finite, or when --tol is given and the max relative error exceeds it; else 0.
 * Output lines are "key=value" so scripts can parse them.
 */
#include "import.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: deform compare A.npy B.npy [--rest MODEL] [--per-frame] [--tol REL]\n");
    return 2;
}

static double diag_of(const float *p, int64_t n)
{
    double lo[3] = {DBL_MAX, DBL_MAX, DBL_MAX}, hi[3] = {-DBL_MAX, -DBL_MAX, -DBL_MAX};
    for (int64_t v = 0; v < n; v++)
        for (int k = 0; k < 3; k++) {
            lo[k] = fmin(lo[k], p[v * 3 + k]);
            hi[k] = fmax(hi[k], p[v * 3 + k]);
        }
    if (n == 0) return 0;
    return sqrt((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                (hi[2] - lo[2]) * (hi[2] - lo[2]));
}

int cmd_compare(int argc, char **argv)
{
    const char *fa = NULL, *fb = NULL, *rest = NULL;
    int per_frame = 0;
    double tol = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--rest") && i + 1 < argc) rest = argv[++i];
        else if (!strcmp(a, "--per-frame")) per_frame = 1;
        else if (!strcmp(a, "--tol") && i + 1 < argc) tol = atof(argv[++i]);
        else if (a[0] == '-' && a[1]) return usage();
        else if (!fa) fa = a;
        else if (!fb) fb = a;
        else return usage();
    }
    if (!fa || !fb) return usage();
    df_error_t err = {0};
    int na, nb;
    int64_t sa[DF_MAX_DIMS], sb[DF_MAX_DIMS];
    float *A = NULL, *B = NULL;
    int rc = 1;
    if (df_npy_read_f32(fa, &na, sa, &A, &err) || df_npy_read_f32(fb, &nb, sb, &B, &err)) {
        fprintf(stderr, "deform compare: %s\n", err.msg);
        goto out;
    }
    if (na != nb || memcmp(sa, sb, (size_t)na * sizeof sa[0])) {
        fprintf(stderr, "deform compare: shapes differ: %s is [", fa);
        for (int i = 0; i < na; i++) fprintf(stderr, "%s%lld", i ? "," : "", (long long)sa[i]);
        fprintf(stderr, "], %s is [", fb);
        for (int i = 0; i < nb; i++) fprintf(stderr, "%s%lld", i ? "," : "", (long long)sb[i]);
        fprintf(stderr, "]\n");
        goto out;
    }
    if (!((na == 3 && sa[2] == 3) || (na == 2 && sa[1] == 3))) {
        fprintf(stderr, "deform compare: want [F,N,3] or [N,3] arrays\n");
        goto out;
    }
    int64_t F = na == 3 ? sa[0] : 1, N = na == 3 ? sa[1] : sa[0];
    double diag;
    if (rest) {
        df_model_t *m = NULL;
        if (df__tool_open_model(rest, &m, NULL, 0, &err)) {
            fprintf(stderr, "deform compare: %s\n", err.msg);
            goto out;
        }
        float lo[3], hi[3];
        df_model_bbox(m, lo, hi);
        diag = sqrt((double)(hi[0] - lo[0]) * (hi[0] - lo[0]) + (double)(hi[1] - lo[1]) * (hi[1] - lo[1]) +
                    (double)(hi[2] - lo[2]) * (hi[2] - lo[2]));
        df_model_unref(&m);
    } else {
        diag = diag_of(A, N);
    }
    if (!(diag > 0)) diag = 1;
    double mx = 0, sum = 0;
    int64_t mf = 0, mv = 0, bad = 0;
    for (int64_t f = 0; f < F; f++) {
        double fmx = 0, fsum = 0;
        int64_t fv = 0;
        for (int64_t v = 0; v < N; v++) {
            const float *a = A + (f * N + v) * 3, *b = B + (f * N + v) * 3;
            double dx = (double)a[0] - b[0], dy = (double)a[1] - b[1], dz = (double)a[2] - b[2];
            double e = sqrt(dx * dx + dy * dy + dz * dz);
            if (!isfinite(e)) { bad++; continue; }
            fsum += e;
            if (e > fmx) { fmx = e; fv = v; }
        }
        sum += fsum;
        if (fmx > mx || f == 0) { mx = fmx; mf = f; mv = fv; }
        if (per_frame)
            printf("frame=%lld max_abs=%.6g max_rel=%.6g mean_abs=%.6g vertex=%lld\n", (long long)f,
                   fmx, fmx / diag, N ? fsum / N : 0.0, (long long)fv);
    }
    double mean = (F > 0 && N > 0) ? sum / ((double)F * N) : 0;
    printf("frames=%lld vertices=%lld diag=%.6g\n", (long long)F, (long long)N, diag);
    printf("max_abs=%.6g max_rel=%.6g mean_abs=%.6g mean_rel=%.6g at frame=%lld vertex=%lld\n", mx,
           mx / diag, mean, mean / diag, (long long)mf, (long long)mv);
    if (bad) {
        fprintf(stderr, "deform compare: %lld non-finite vertex errors\n", (long long)bad);
        goto out;
    }
    if (tol >= 0 && mx / diag > tol) {
        printf("over tolerance: max_rel %.6g > %.6g\n", mx / diag, tol);
        goto out;
    }
    rc = 0;
out:
    free(A);
    free(B);
    return rc;
}

/* decompose.c — skinning decomposition driver: validation, welding,
 * normalisation, the alternating loop, results (API in decompose.h).
 *
 * DESIGN
 *  - The input is validated first (sizes, limits, finite values, triangle
 *    indices) so bad sequences get an answer naming the frame and vertex.
 *  - Coordinates are centred on the rest bbox and divided by its diagonal,
 *    so every tolerance is relative to the character's size and the RMS
 *    error of the normalised problem is directly a fraction of the diagonal.
 *  - Welding is a spatial hash with cells of the weld tolerance: each point
 *    looks in its 27 neighbouring cells and unions points within the
 *    tolerance (union-find), so chains of near-coincident points weld.
 *  - Loop: initialisation (decompose_init.c), then weights step and
 *    transforms step (decompose_solve.c), error measured exactly after each
 *    iteration; stop on max_iterations, target_erms, or when the relative
 *    improvement stays below tol for `patience` iterations.
 */
#include "base/clock.h"
#include "decompose/decompose_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void df_decompose_opts_default(df_decompose_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->transforms = DF_DECOMPOSE_RIGID;
    o->transform_sweeps = 3;
    o->max_influences = 6;
    o->max_iterations = 30;
    o->tol = 1e-3;
    o->patience = 2;
    o->weld = 1;
    o->weld_tol = 1e-5;
    o->init_iterations = 20;
    o->n_workers = 1;
    o->max_bytes = (uint64_t)8 << 30;
}

int df_decompose_transforms_parse(const char *name)
{
    if (!name) return -1;
    if (!strcmp(name, "rigid")) return DF_DECOMPOSE_RIGID;
    if (!strcmp(name, "trs")) return DF_DECOMPOSE_TRS;
    if (!strcmp(name, "affine")) return DF_DECOMPOSE_AFFINE;
    return -1;
}

const char *df_decompose_transforms_name(int t)
{
    return t == DF_DECOMPOSE_RIGID ? "rigid" : t == DF_DECOMPOSE_TRS ? "trs"
         : t == DF_DECOMPOSE_AFFINE ? "affine" : "?";
}

void df__dc_pfor(df__dc_t *d, int64_t n, df_range_body_cb body, void *arg)
{
    if (n <= 0) return;
    if (d->o.parallel_for && d->nw > 1) d->o.parallel_for(d->o.parallel_user, n, body, arg);
    else body(arg, 0, n, 0);
}

int df_decompose_validate(const df_decompose_input_t *in, int n_bones,
                          const df_limits_t *lim, df_error_t *err)
{
    df_limits_t dl;
    if (!lim) { df_limits_default(&dl); lim = &dl; }
    if (!in || !in->frames)
        return df_error_set(err, DF_EINVAL, "decompose: no frames given");
    if (in->n_frames < 2)
        return df_error_set(err, DF_EINVAL,
                            "decompose: the sequence has %lld frame(s); at least 2 are "
                            "needed to fit motion", (long long)in->n_frames);
    if (in->n_frames > lim->max_clip_frames)
        return df_error_set(err, DF_ELIMIT, "decompose: %lld frames exceeds the limit of %lld",
                            (long long)in->n_frames, (long long)lim->max_clip_frames);
    if (in->n_vertices < 1)
        return df_error_set(err, DF_EINVAL, "decompose: the sequence has no vertices");
    if (in->n_vertices > lim->max_vertices)
        return df_error_set(err, DF_ELIMIT, "decompose: %lld vertices exceeds the limit of %lld",
                            (long long)in->n_vertices, (long long)lim->max_vertices);
    if ((uint64_t)in->n_frames * (uint64_t)in->n_vertices * 3 > lim->max_tensor_elems)
        return df_error_set(err, DF_ELIMIT,
                            "decompose: %lld frames x %lld vertices exceeds the tensor "
                            "limit of %llu values", (long long)in->n_frames,
                            (long long)in->n_vertices, (unsigned long long)lim->max_tensor_elems);
    if (n_bones < 1)
        return df_error_set(err, DF_EINVAL, "decompose: bone count %d (need >= 1)", n_bones);
    if (n_bones > in->n_vertices)
        return df_error_set(err, DF_EINVAL,
                            "decompose: %d bones is more than the %lld vertices", n_bones,
                            (long long)in->n_vertices);
    if (n_bones > DF_DECOMPOSE_MAX_BONES)
        return df_error_set(err, DF_ELIMIT, "decompose: %d bones exceeds the limit of %d",
                            n_bones, DF_DECOMPOSE_MAX_BONES);
    if (in->n_triangles < 0 || (in->n_triangles > 0 && !in->triangles))
        return df_error_set(err, DF_EINVAL, "decompose: triangle count %lld without triangles",
                            (long long)in->n_triangles);
    const int64_t N = in->n_vertices;
    for (int64_t t = 0; t < in->n_triangles * 3; t++)
        if (in->triangles[t] >= (uint64_t)N)
            return df_error_set(err, DF_EINVAL,
                                "decompose: triangle %lld references vertex %u but there are "
                                "%lld vertices", (long long)(t / 3), in->triangles[t],
                                (long long)N);
    for (int64_t p = 0; p < in->n_frames; p++)
        for (int64_t q = 0; q < 3 * N; q++)
            if (!isfinite(in->frames[p * 3 * N + q]))
                return df_error_set(err, DF_EINVAL,
                                    "decompose: frame %lld, vertex %lld, coordinate %c is not "
                                    "finite (%g)", (long long)p, (long long)(q / 3),
                                    "xyz"[q % 3], in->frames[p * 3 * N + q]);
    if (in->rest)
        for (int64_t q = 0; q < 3 * N; q++)
            if (!isfinite(in->rest[q]))
                return df_error_set(err, DF_EINVAL,
                                    "decompose: rest vertex %lld coordinate %c is not finite",
                                    (long long)(q / 3), "xyz"[q % 3]);
    return DF_OK;
}

/* ------------------------------------------------------------ welding */

static int64_t uf_find(int64_t *par, int64_t a)
{
    while (par[a] != a) { par[a] = par[par[a]]; a = par[a]; }
    return a;
}

static uint64_t cell_hash(int64_t x, int64_t y, int64_t z)
{
    uint64_t h = (uint64_t)x * 0x9e3779b97f4a7c15ull ^ (uint64_t)y * 0xc2b2ae3d27d4eb4full ^
                 (uint64_t)z * 0x165667b19e3779f9ull;
    return h ^ (h >> 29);
}

int df_decompose_weld(int64_t n, const float *pos, double tol, int32_t *rep,
                      int64_t *n_welded, df_error_t *err)
{
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++)
        for (int r = 0; r < 3; r++) {
            lo[r] = fmin(lo[r], pos[3 * i + r]);
            hi[r] = fmax(hi[r], pos[3 * i + r]);
        }
    double diag = n ? sqrt((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                           (hi[2] - lo[2]) * (hi[2] - lo[2]))
                    : 0;
    double h = tol * diag;
    if (!(h > 0) || n < 2) { /* nothing can weld except exact duplicates */
        h = 0;
    }
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap <<= 1;
    int64_t *par = malloc(sizeof(int64_t) * n), *next = malloc(sizeof(int64_t) * n);
    int64_t *head = malloc(sizeof(int64_t) * cap), *ckey = malloc(sizeof(int64_t) * 3 * cap);
    int64_t *cell = malloc(sizeof(int64_t) * 3 * n), *label = malloc(sizeof(int64_t) * n);
    if (!par || !next || !head || !ckey || !cell || !label) {
        free(par); free(next); free(head); free(ckey); free(cell); free(label);
        return df_error_set(err, DF_ENOMEM, "decompose: out of memory (welding)");
    }
    for (size_t s = 0; s < cap; s++) head[s] = -1;
    const double inv = h > 0 ? 1.0 / h : 0;
    for (int64_t i = 0; i < n; i++) {
        par[i] = i;
        for (int r = 0; r < 3; r++)
            cell[3 * i + r] = h > 0 ? (int64_t)floor((pos[3 * i + r] - lo[r]) * inv) : 0;
        if (h == 0) /* exact duplicates only: hash the coordinates' bits */
            for (int r = 0; r < 3; r++) {
                float f = pos[3 * i + r];
                int32_t b;
                memcpy(&b, &f, 4);
                cell[3 * i + r] = b;
            }
        size_t s = cell_hash(cell[3 * i], cell[3 * i + 1], cell[3 * i + 2]) & (cap - 1);
        while (head[s] >= 0 && memcmp(ckey + 3 * s, cell + 3 * i, sizeof(int64_t) * 3)) s = (s + 1) & (cap - 1);
        if (head[s] < 0) memcpy(ckey + 3 * s, cell + 3 * i, sizeof(int64_t) * 3);
        next[i] = head[s];
        head[s] = i;
    }
    const double h2 = h * h;
    const int span = h > 0 ? 1 : 0;
    for (int64_t i = 0; i < n; i++) {
        for (int dx = -span; dx <= span; dx++)
            for (int dy = -span; dy <= span; dy++)
                for (int dz = -span; dz <= span; dz++) {
                    int64_t c[3] = {cell[3 * i] + dx, cell[3 * i + 1] + dy, cell[3 * i + 2] + dz};
                    size_t s = cell_hash(c[0], c[1], c[2]) & (cap - 1);
                    while (head[s] >= 0 && memcmp(ckey + 3 * s, c, sizeof c)) s = (s + 1) & (cap - 1);
                    for (int64_t j = head[s]; j >= 0; j = next[j]) {
                        if (j >= i) continue;
                        double d2 = 0;
                        for (int r = 0; r < 3; r++) {
                            double t = (double)pos[3 * i + r] - pos[3 * j + r];
                            d2 += t * t;
                        }
                        if (d2 <= h2) {
                            int64_t a = uf_find(par, i), b = uf_find(par, j);
                            if (a != b) par[a < b ? b : a] = a < b ? a : b;
                        }
                    }
                }
    }
    int64_t W = 0;
    for (int64_t i = 0; i < n; i++) label[i] = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t root = uf_find(par, i);
        if (label[root] < 0) label[root] = W++;
        rep[i] = (int32_t)label[root];
    }
    *n_welded = W;
    free(par); free(next); free(head); free(ckey); free(cell); free(label);
    return DF_OK;
}

/* ------------------------------------------------------------- driver */

static void dc_free(df__dc_t *d)
{
    free(d->X); free(d->V); free(d->xx); free(d->rep); free(d->wfirst);
    free(d->adj_off); free(d->adj); free(d->cluster); free(d->Y); free(d->Z);
    free(d->M); free(d->A); free(d->idx); free(d->w); free(d->verr);
    if (d->wk)
        for (int t = 0; t < d->nw; t++) {
            free(d->wk[t].e); free(d->wk[t].cz); free(d->wk[t].order); free(d->wk[t].acc);
        }
    free(d->wk);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Welded 1-ring from the triangles (CSR, sorted, unique). */
static int build_adjacency(df__dc_t *d, const df_decompose_input_t *in)
{
    const int64_t W = d->W, T = in->n_triangles;
    d->adj_off = calloc(W + 1, sizeof(int64_t));
    if (!d->adj_off) return 0;
    for (int64_t t = 0; t < T; t++)
        for (int e = 0; e < 3; e++) {
            int32_t a = d->rep[in->triangles[3 * t + e]], b = d->rep[in->triangles[3 * t + (e + 1) % 3]];
            if (a == b) continue;
            d->adj_off[a + 1]++;
            d->adj_off[b + 1]++;
        }
    for (int64_t g = 0; g < W; g++) d->adj_off[g + 1] += d->adj_off[g];
    d->adj = malloc(sizeof(int32_t) * (d->adj_off[W] + 1));
    int64_t *fill = malloc(sizeof(int64_t) * (W + 1));
    if (!d->adj || !fill) { free(fill); return 0; }
    memcpy(fill, d->adj_off, sizeof(int64_t) * (W + 1));
    for (int64_t t = 0; t < T; t++)
        for (int e = 0; e < 3; e++) {
            int32_t a = d->rep[in->triangles[3 * t + e]], b = d->rep[in->triangles[3 * t + (e + 1) % 3]];
            if (a == b) continue;
            d->adj[fill[a]++] = b;
            d->adj[fill[b]++] = a;
        }
    /* sort and dedupe each row in place, then compact */
    int64_t outp = 0;
    for (int64_t g = 0; g < W; g++) {
        int64_t s = d->adj_off[g], e = d->adj_off[g + 1];
        qsort(d->adj + s, e - s, sizeof(int32_t), cmp_i32);
        d->adj_off[g] = outp;
        for (int64_t k = s; k < e; k++)
            if (k == s || d->adj[k] != d->adj[k - 1]) d->adj[outp++] = d->adj[k];
    }
    d->adj_off[W] = outp;
    free(fill);
    return 1;
}

static void report(df__dc_t *d, int it, const char *step, double erms, double t0,
                   double iter_avg, double ws, double ts)
{
    if (!d->o.progress) return;
    df_decompose_progress_t p = {.iteration = it, .max_iterations = d->o.max_iterations,
                                 .step = step, .erms = erms, .seconds = df__now_s() - t0,
                                 .eta_seconds = iter_avg * (d->o.max_iterations - it),
                                 .weight_seconds = ws, .transform_seconds = ts};
    d->o.progress(d->o.progress_user, &p);
}

int df_decompose_fit(const df_decompose_input_t *in, const df_decompose_opts_t *opts,
                     const df_limits_t *lim, df_decompose_result_t **out, df_error_t *err)
{
    *out = NULL;
    df_decompose_opts_t o;
    if (opts) o = *opts; else df_decompose_opts_default(&o);
    int rc = df_decompose_validate(in, o.n_bones, lim, err);
    if (rc) return rc;
    if (o.max_influences < 1 || o.max_influences > DF_DECOMPOSE_MAX_INFLUENCES)
        return df_error_set(err, DF_EINVAL, "decompose: max influences %d outside 1..%d",
                            o.max_influences, DF_DECOMPOSE_MAX_INFLUENCES);
    if (o.transforms < DF_DECOMPOSE_RIGID || o.transforms > DF_DECOMPOSE_AFFINE)
        return df_error_set(err, DF_EINVAL,
                            "decompose: transform model %d (want rigid, trs or affine)",
                            o.transforms);
    if (o.transform_sweeps < 0 || o.transform_sweeps > 100)
        return df_error_set(err, DF_EINVAL, "decompose: transform sweeps %d outside 0..100",
                            o.transform_sweeps);
    if (o.max_iterations < 0 || o.init_iterations < 0 || o.patience < 1 || !(o.tol >= 0) || !(o.sum_penalty >= 0) ||
        !(o.weld_tol >= 0) || o.n_candidates < 0)
        return df_error_set(err, DF_EINVAL,
                            "decompose: bad options (iterations, patience, tolerances must be "
                            ">= 0, patience >= 1)");
    if (o.init != DF_DECOMPOSE_INIT_CLUSTER && o.init != DF_DECOMPOSE_INIT_NETWORK)
        return df_error_set(err, DF_EINVAL, "decompose: initialisation %d (want cluster or "
                                            "network)", o.init);
    if (o.init == DF_DECOMPOSE_INIT_NETWORK && !o.init_net)
        return df_error_set(err, DF_EINVAL, "decompose: network initialisation without a network "
                                            "(load its weights first)");
    const double t0 = df__now_s();
    df__dc_t D, *d = &D;
    memset(d, 0, sizeof D);
    d->o = o;
    d->F = in->n_frames;
    d->N = in->n_vertices;
    d->B = o.n_bones;
    d->K = o.max_influences < d->B ? o.max_influences : d->B;
    int C = o.n_candidates ? o.n_candidates : (2 * d->K > 12 ? 2 * d->K : 12);
    if (C > 32) C = 32;
    if (C > d->B) C = d->B;
    if (C < d->K) C = d->K;
    d->C = C;
    d->nw = o.parallel_for && o.n_workers > 1 ? o.n_workers : 1;
    const int64_t N = d->N, F = d->F, F3 = 3 * F, B4 = 4 * d->B;
    const float *rest = in->rest ? in->rest : in->frames;

    /* normalisation */
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = 0; i < N; i++)
        for (int r = 0; r < 3; r++) {
            lo[r] = fmin(lo[r], rest[3 * i + r]);
            hi[r] = fmax(hi[r], rest[3 * i + r]);
        }
    double diag = sqrt((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                       (hi[2] - lo[2]) * (hi[2] - lo[2]));
    if (!(diag > 0) || !isfinite(diag))
        return df_error_set(err, DF_EINVAL,
                            "decompose: all rest positions coincide (bbox diagonal %g)", diag);
    for (int r = 0; r < 3; r++) d->center[r] = 0.5 * (lo[r] + hi[r]);
    d->scale = diag;

    /* working set: trajectories, Z and A, per-worker accumulators */
    double need = 8.0 * ((double)N * F3 + 2.0 * N * B4 + (double)d->nw * (B4 + F3) * B4 +
                         3.0 * F3 * B4 + 2.0 * B4 * B4);
    if (o.max_bytes > 0 && need > (double)o.max_bytes)
        return df_error_set(err, DF_ELIMIT,
                            "decompose: %lld frames x %lld vertices with %d bones needs %.1f GiB "
                            "of working memory, above the limit of %.1f GiB (fewer frames: "
                            "--frames / --fps)", (long long)F, (long long)N, d->B,
                            need / 1073741824.0, (double)o.max_bytes / 1073741824.0);
    rc = DF_ENOMEM;
    d->X = malloc(sizeof(double) * N * F3);
    d->V = malloc(sizeof(double) * N * 4);
    d->xx = malloc(sizeof(double) * N);
    d->rep = malloc(sizeof(int32_t) * N);
    d->Y = malloc(sizeof(double) * F3 * B4);
    d->Z = malloc(sizeof(double) * N * B4);
    d->M = malloc(sizeof(double) * B4 * B4);
    d->A = malloc(sizeof(double) * N * B4);
    d->idx = malloc(sizeof(int32_t) * N * d->K);
    d->w = malloc(sizeof(double) * N * d->K);
    d->verr = malloc(sizeof(double) * N);
    d->wk = calloc(d->nw, sizeof(df__dc_worker_t));
    if (!d->X || !d->V || !d->xx || !d->rep || !d->Y || !d->Z || !d->M || !d->A || !d->idx ||
        !d->w || !d->verr || !d->wk)
        goto nomem;
    for (int t = 0; t < d->nw; t++) {
        df__dc_worker_t *w = &d->wk[t];
        w->e = malloc(sizeof(double) * d->B);
        w->cz = malloc(sizeof(double) * d->B);
        w->order = malloc(sizeof(int32_t) * d->B);
        /* clustering accumulators, or AᵀA and XᵀA of the transforms step */
        size_t acc = (size_t)d->B * (4 + 12 * F);
        size_t acc2 = (size_t)(4 * d->B) * (4 * d->B) + (size_t)(3 * F) * (4 * d->B);
        w->acc = malloc(sizeof(double) * (acc > acc2 ? acc : acc2));
        if (!w->e || !w->cz || !w->order || !w->acc) goto nomem;
    }
    d->xx_total = 0;
    for (int64_t i = 0; i < N; i++) {
        double s = 0;
        for (int64_t p = 0; p < F; p++)
            for (int r = 0; r < 3; r++) {
                double x = (in->frames[(p * N + i) * 3 + r] - d->center[r]) / diag;
                d->X[i * F3 + 3 * p + r] = x;
                s += x * x;
            }
        d->xx[i] = s;
        d->xx_total += s;
        for (int r = 0; r < 3; r++) d->V[4 * i + r] = (rest[3 * i + r] - d->center[r]) / diag;
        d->V[4 * i + 3] = 1;
    }

    /* welding and adjacency */
    if (o.weld) {
        rc = df_decompose_weld(N, rest, o.weld_tol, d->rep, &d->W, err);
        if (rc) goto fail;
    } else {
        for (int64_t i = 0; i < N; i++) d->rep[i] = (int32_t)i;
        d->W = N;
    }
    if (d->B > d->W) {
        rc = df_error_set(err, DF_EINVAL,
                          "decompose: %d bones is more than the %lld distinct rest positions "
                          "(after welding %lld vertices)", d->B, (long long)d->W, (long long)N);
        goto fail;
    }
    rc = DF_ENOMEM;
    d->wfirst = malloc(sizeof(int64_t) * d->W);
    d->cluster = malloc(sizeof(int32_t) * d->W);
    if (!d->wfirst || !d->cluster) goto nomem;
    for (int64_t g = 0; g < d->W; g++) d->wfirst[g] = -1;
    for (int64_t i = 0; i < N; i++)
        if (d->wfirst[d->rep[i]] < 0) d->wfirst[d->rep[i]] = i;
    if (!build_adjacency(d, in)) goto nomem;

    /* initialisation */
    df_decompose_stats_t st = {0};
    st.n_welded = d->W;
    st.erms_history = calloc(o.max_iterations + 1, sizeof(double));
    st.weight_seconds_history = calloc(o.max_iterations + 1, sizeof(double));
    st.transform_seconds_history = calloc(o.max_iterations + 1, sizeof(double));
    if (!st.erms_history || !st.weight_seconds_history || !st.transform_seconds_history) {
        free(st.erms_history); free(st.weight_seconds_history); free(st.transform_seconds_history);
        goto nomem;
    }
    rc = df__dc_init(d, err);
    if (rc) {
        free(st.erms_history); free(st.weight_seconds_history); free(st.transform_seconds_history);
        goto fail;
    }
    double erms = sqrt(df__dc_error(d) / (double)(N * F3));
    st.init_seconds = df__now_s() - t0;
    st.erms_init = st.erms_history[0] = erms;
    st.weight_seconds_history[0] = st.init_seconds;
    report(d, 0, "init", erms, t0, 0, st.init_seconds, 0);

    double best = erms;
    int stall = 0, it = 0;
    const double loop_t0 = df__now_s();
    while (rc == DF_OK && it < o.max_iterations && erms > o.target_erms) {
        it++;
        double a = df__now_s();
        df__dc_weights_step(d);
        double b = df__now_s();
        rc = df__dc_transforms_step(d, err);
        if (rc) break;
        double c = df__now_s();
        double e2 = df__dc_error(d);
        if (o.reseed_every > 0 && it % o.reseed_every == 0 && it + 2 < o.max_iterations) {
            int acc = df__dc_reseed(d, &e2, err);
            if (acc < 0) { rc = acc; break; }
            st.reseeds_tried++;
            st.reseeds_accepted += acc;
            c = df__now_s(); /* the attempt's time counts as transforms time */
        }
        erms = sqrt(e2 / (double)(N * F3));
        st.weight_seconds += b - a;
        st.transform_seconds += c - b;
        st.erms_history[it] = erms;
        st.weight_seconds_history[it] = b - a;
        st.transform_seconds_history[it] = c - b;
        report(d, it, "iteration", erms, t0, (df__now_s() - loop_t0) / it, b - a, c - b);
        if (erms > best * (1 - o.tol)) stall++;
        else stall = 0;
        if (erms < best) best = erms;
        if (stall >= o.patience) break;
    }
    if (rc) {
        free(st.erms_history); free(st.weight_seconds_history); free(st.transform_seconds_history);
        goto fail;
    }
    st.iterations = it;
    st.erms = erms;

    /* results, back in model units */
    rc = DF_ENOMEM;
    df_decompose_result_t *res = calloc(1, sizeof *res);
    if (!res) {
        free(st.erms_history); free(st.weight_seconds_history); free(st.transform_seconds_history);
        goto nomem;
    }
    res->stats = st;
    res->transforms = o.transforms;
    res->n_bones = d->B;
    res->n_influences = d->K;
    res->n_vertices = N;
    res->n_frames = F;
    res->rest = malloc(sizeof(float) * N * 3);
    res->skin_joints = malloc(sizeof(int32_t) * N * d->K);
    res->skin_weights = malloc(sizeof(float) * N * d->K);
    res->matrices = malloc(sizeof(float) * F * d->B * 12);
    res->cluster = malloc(sizeof(int32_t) * N);
    if (!res->rest || !res->skin_joints || !res->skin_weights || !res->matrices || !res->cluster) {
        df_decompose_result_free(&res);
        goto nomem;
    }
    memcpy(res->rest, rest, sizeof(float) * N * 3);
    for (int64_t i = 0; i < N; i++) {
        res->cluster[i] = d->cluster[d->rep[i]];
        double s = 0;
        for (int k = 0; k < d->K; k++) s += d->idx[i * d->K + k] >= 0 ? d->w[i * d->K + k] : 0;
        for (int k = 0; k < d->K; k++) {
            int j = d->idx[i * d->K + k];
            res->skin_joints[i * d->K + k] = j >= 0 ? j : 0;
            res->skin_weights[i * d->K + k] = j >= 0 && s > 0 ? (float)(d->w[i * d->K + k] / s) : 0;
        }
    }
    for (int64_t p = 0; p < F; p++)
        for (int j = 0; j < d->B; j++) {
            float *m = res->matrices + (p * d->B + j) * 12;
            for (int r = 0; r < 3; r++) {
                const double *y = d->Y + (size_t)(3 * p + r) * B4 + 4 * j;
                double t = diag * y[3] + d->center[r];
                for (int s = 0; s < 3; s++) {
                    m[4 * r + s] = (float)y[s];
                    t -= y[s] * d->center[s];
                }
                m[4 * r + 3] = (float)t;
            }
        }
    res->stats.total_seconds = df__now_s() - t0;
    dc_free(d);
    *out = res;
    return DF_OK;
nomem:
    rc = df_error_set(err, DF_ENOMEM, "decompose: out of memory (%lld vertices, %lld frames, %d bones)",
                      (long long)N, (long long)F, d->B);
fail:
    dc_free(d);
    return rc;
}

void df_decompose_result_free(df_decompose_result_t **r)
{
    if (!r || !*r) return;
    df_decompose_result_t *x = *r;
    free(x->rest); free(x->skin_joints); free(x->skin_weights); free(x->matrices);
    free(x->cluster);
    free(x->stats.erms_history); free(x->stats.weight_seconds_history);
    free(x->stats.transform_seconds_history);
    free(x);
    *r = NULL;
}

void df_decompose_reconstruct(const df_decompose_result_t *r, float *out)
{
    const int64_t N = r->n_vertices;
    const int K = r->n_influences, B = r->n_bones;
    for (int64_t p = 0; p < r->n_frames; p++)
        for (int64_t i = 0; i < N; i++) {
            const float *v = r->rest + 3 * i;
            double acc[3] = {0, 0, 0};
            for (int k = 0; k < K; k++) {
                float w = r->skin_weights[i * K + k];
                if (w == 0) continue;
                const float *m = r->matrices + (p * B + r->skin_joints[i * K + k]) * 12;
                for (int a = 0; a < 3; a++)
                    acc[a] += w * ((double)m[4 * a] * v[0] + (double)m[4 * a + 1] * v[1] +
                                   (double)m[4 * a + 2] * v[2] + m[4 * a + 3]);
            }
            for (int a = 0; a < 3; a++) out[(p * N + i) * 3 + a] = (float)acc[a];
        }
}

/* cof(L)/|det L|^(1/3): L^{-T} with the orientation of the cross product
 * (a reflection flips the normal as it flips the triangles' winding),
 * scaled to equal L for a rotation times a uniform scale, as the `rigged`
 * kind's normal matrices (rigged_eval.c). */
static void normal_matrix(const float *m /* 3x4 row-major */, double N[9])
{
    double a = m[0], b = m[1], c = m[2], d = m[4], e = m[5], f = m[6], g = m[8], h = m[9],
           i = m[10];
    double C[9] = {e * i - f * h, f * g - d * i, d * h - e * g,
                   c * h - b * i, a * i - c * g, b * g - a * h,
                   b * f - c * e, c * d - a * f, a * e - b * d};
    double det = a * C[0] + b * C[1] + c * C[2];
    double s = fabs(det) > 1e-30 ? 1.0 / cbrt(fabs(det)) : 1.0;
    for (int q = 0; q < 9; q++) N[q] = C[q] * s;
}

void df_decompose_reconstruct_normals(const df_decompose_result_t *r, const float *rest_n,
                                      float *out)
{
    const int64_t N = r->n_vertices, F = r->n_frames;
    const int K = r->n_influences, B = r->n_bones;
    double *nm = malloc(sizeof(double) * 9 * (size_t)B);
    if (!nm) { /* no memory: say "undefined" rather than something wrong */
        memset(out, 0, sizeof(float) * 3 * (size_t)(F * N));
        return;
    }
    for (int64_t p = 0; p < F; p++) {
        for (int j = 0; j < B; j++) normal_matrix(r->matrices + (p * B + j) * 12, nm + 9 * j);
        for (int64_t i = 0; i < N; i++) {
            const float *n = rest_n + 3 * i;
            double acc[3] = {0, 0, 0};
            for (int k = 0; k < K; k++) {
                float w = r->skin_weights[i * K + k];
                if (w == 0) continue;
                const double *M = nm + 9 * r->skin_joints[i * K + k];
                for (int a = 0; a < 3; a++)
                    acc[a] += w * (M[3 * a] * n[0] + M[3 * a + 1] * n[1] + M[3 * a + 2] * n[2]);
            }
            double l = sqrt(acc[0] * acc[0] + acc[1] * acc[1] + acc[2] * acc[2]);
            for (int a = 0; a < 3; a++) out[(p * N + i) * 3 + a] = l > 1e-30 ? (float)(acc[a] / l) : 0;
        }
    }
    free(nm);
}

void df_decompose_vertex_normals(int64_t N, const float *pos, int64_t T, const uint32_t *tris,
                                 float *out)
{
    double *acc = calloc((size_t)N * 3 + 1, sizeof(double));
    if (!acc) { memset(out, 0, sizeof(float) * 3 * (size_t)N); return; }
    for (int64_t t = 0; t < T; t++) {
        const uint32_t *f = tris + 3 * t;
        const float *a = pos + 3 * f[0], *b = pos + 3 * f[1], *c = pos + 3 * f[2];
        double u[3] = {(double)b[0] - a[0], (double)b[1] - a[1], (double)b[2] - a[2]};
        double v[3] = {(double)c[0] - a[0], (double)c[1] - a[1], (double)c[2] - a[2]};
        double n[3] = {u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2],
                       u[0] * v[1] - u[1] * v[0]};
        for (int k = 0; k < 3; k++)
            for (int q = 0; q < 3; q++) acc[3 * f[k] + q] += n[q];
    }
    for (int64_t i = 0; i < N; i++) {
        double *x = acc + 3 * i, l = sqrt(x[0] * x[0] + x[1] * x[1] + x[2] * x[2]);
        for (int q = 0; q < 3; q++) out[3 * i + q] = l > 0 ? (float)(x[q] / l) : 0;
    }
    free(acc);
}

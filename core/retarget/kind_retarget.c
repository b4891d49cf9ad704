/* kind_retarget.c — the `retarget` model kind: facial performance
 * retargeting (source controls or markers -> a target rig's weights ->
 * the target's vertices), after Lewis & Pighin's survey of retargeting
 * algorithms (parallel blendshapes, Choe & Ko's marker solve, Chuang &
 * Bregler's non-negative solve, the global cloning matrix; targets of
 * another topology get their shapes offline, rt_transfer.c).
 *
 * DESIGN
 * A retarget file is a `rigged` file (the target: positions, triangles,
 * morph_deltas, morph_names...) plus the mapping under `retarget/...`. Load
 * builds the target as a real `rigged` model from the same tensors (the
 * rigged kind's own load, so the same validation) and keeps it; evaluation
 * hands the target weights to the rigged kind's evaluate: the morph GEMM,
 * skinning and normals are the rigged kernel's, not a copy.
 *
 * For a batch of B poses, each with `source_weights` or `markers` (not
 * both; neither: the neutral). `source_weights` are the source controls, or
 * with `input_names` a tracker's controls that retarget/S [Ms, Mi] maps onto
 * them (one small product per pose, in the validation pass). Markers more
 * than 2x larger or smaller than the rest markers (another unit) are refused
 * there too, from the moments the collinearity test takes anyway:
 *  1. marker poses, for r = 1..iters (default 1): rigid alignment of each
 *     pose's markers onto the source's marker positions of the current
 *     estimate (rest + A w; rest in round 1) by Horn's method, weighted
 *     towards the markers expressions move least; residual
 *     y = R x + t - rest; the right-hand sides At'y of all marker poses as
 *     ONE matrix product, At = A with the six infinitesimal rigid motions at the
 *     rest markers projected out (load), so a small rigid correction is
 *     solved with the weights; the unconstrained solutions G^-1 b as one
 *     more product, whose signs start each pose's bounded least-squares
 *     solve on the Gram matrix G = At'At + lambda I prepared (and checked
 *     positive definite) at load (the rounds on an explicit inverse of the
 *     free block, rt_pdas.c; the general solver of rt_solve.c from the same
 *     start when they do not settle); then (when another round
 *     follows) A w for all of them as one sgemm;
 *  2. target weights for the whole batch as ONE product: W_t = E W_s,
 *     clamped to [0, 1] unless the file says otherwise;
 *  3. the target's positions / normals: df_kind_rigged.evaluate on the
 *     target model with those weights, one batch.
 * The products of step 1 and 2 run on At', G^-1 and E packed at load for
 * math/pgemm.h's kernel in AVX-512 builds (OpenBLAS copies its operand into
 * its own layout on every call: at these sizes that and its call overhead
 * measured 0.54 us per pose of the mapping, the packed kernel about 0.25),
 * sgemm elsewhere.
 * Scratch holds everything (the rigged kind's scratch first, then ours);
 * nothing is allocated per request.
 */
#include "math/pgemm.h"
#include "retarget/retarget.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_(code, ...) df_error_set(err, code, __VA_ARGS__)

/* the ADMM start of the bounded solves (admm_start): iterations, and rho
 * relative to the mean of diag(G) (ADMM_RHO 0.03..0.1 start the solves
 * alike on face markers; 0.3 and above less well) */
enum { ADMM_ITERS = 10 };
/* the served markers' size (RMS distance to their centroid) against the rest
 * markers': an actor's face is within tens of % of the rig's; a factor of 2
 * either way is another unit or not the model's markers */
#define MARKER_SIZE_MIN 0.5
#define MARKER_SIZE_MAX 2.0
#define ADMM_RHO 0.05
#define ADMM_ALPHA 1.8f /* over-relaxation (Boyd et al. 2011, sec. 3.4.3: 1.5..1.8) */
#define DF_RT_MAX_MARKERS 4096

extern const df_kind_t df_kind_rigged;

static void rt_destroy(void *impl)
{
    df__rt_t *r = impl;
    if (!r) return;
    df_model_unref(&r->target);
    free(r->E);
    free(r->S);
    if (r->At != r->A) free(r->At);
    free(r->Pj);
    free(r->PjA);
    free(r->A);
    free(r->tol);
    free(r->rest);
    df__rt_ref_free(&r->ref);
    free(r->rigid_w);
    free(r->G);
    free(r->Gp);
    free(r->L);
    free(r->Ginv);
    free(r->Kinv);
    free(r->pKinv);
    free(r->pAt);
    free(r->pGinv);
    free(r->pE);
    free(r);
}

static float *dup_tensor(const df_tensor_t *t)
{
    size_t n = (size_t)df_tensor_numel(t);
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (p && n) memcpy(p, t->data, n * sizeof(float));
    return p;
}

/* metadata key or config parameter (params wins): bounds, clamp_target,
 * align_iterations, marker_lambda (the file's is absolute; the parameters'
 * is relative to the mean of diag(A'A), as `deform retarget build
 * --marker-lambda`). */
static int parse_choice(const char *v, const char *key, const char *const *opts,
                        int nopt, int code, int *out, df_error_t *err)
{
    for (int i = 0; i < nopt; i++)
        if (!strcmp(v, opts[i])) {
            *out = i;
            return DF_OK;
        }
    char list[128] = "";
    for (int i = 0; i < nopt; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 i ? ", " : "", opts[i]);
    return E_(code, "%s is '%s' (want one of %s)", key, v, list);
}

static int parse_iters(const char *v, const char *what, int *out, df_error_t *err)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 1 || n > 10)
        return E_(DF_EFORMAT, "%s 'align_iterations' is '%s' (want 1..10)", what, v);
    *out = (int)n;
    return DF_OK;
}

static const char *const bounds_opts[] = {"unit", "nonneg", "none"};
static const char *const clamp_opts[] = {"none", "unit"};
static const char *const rigid_opts[] = {"none", "linear"};

static int read_options(df__rt_t *r, const df_st_t *st, const char *params,
                        df_error_t *err)
{
    int rc, v = 0;
    const char *s;
    r->bounds = DF_RT_UNIT;
    r->clamp = 1;
    r->iters = 1;
    r->rigid_fix = 1;
    r->lambda = 0.0;
    r->lambda_rel = -1.0;
    if ((s = df_st_meta(st, "rigid_correction"))) {
        if ((rc = parse_choice(s, "metadata 'rigid_correction'", rigid_opts, 2, DF_EFORMAT, &v, err)))
            return rc;
        r->rigid_fix = v;
    }
    if ((s = df_st_meta(st, "bounds"))) {
        if ((rc = parse_choice(s, "metadata 'bounds'", bounds_opts, 3, DF_EFORMAT, &v, err))) return rc;
        r->bounds = (df__rt_bounds_t)v;
    }
    if ((s = df_st_meta(st, "clamp_target"))) {
        if ((rc = parse_choice(s, "metadata 'clamp_target'", clamp_opts, 2, DF_EFORMAT, &v, err))) return rc;
        r->clamp = v;
    }
    if ((s = df_st_meta(st, "align_iterations")) &&
        (rc = parse_iters(s, "metadata", &r->iters, err)))
        return rc;
    if ((s = df_st_meta(st, "marker_lambda"))) {
        char *end;
        r->lambda = strtod(s, &end);
        if (end == s || *end || !isfinite(r->lambda) || r->lambda < 0)
            return E_(DF_EFORMAT, "metadata 'marker_lambda' is '%s' (want a "
                                  "finite number >= 0)", s);
    }
    if (!params || !*params) return DF_OK;
    json_error_t je;
    json_t *o = json_loads(params, 0, &je);
    if (!o) return E_(DF_EINVAL, "parameters: not JSON: %s", je.text);
    rc = DF_OK;
    if (!json_is_object(o)) {
        rc = E_(DF_EINVAL, "parameters: not a JSON object");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        if (!strcmp(key, "bounds") || !strcmp(key, "clamp_target") ||
            !strcmp(key, "rigid_correction")) {
            const char *sv = json_string_value(val);
            int which = !strcmp(key, "bounds") ? 0 : !strcmp(key, "clamp_target") ? 1 : 2;
            static const char *const *const opts[3] = {bounds_opts, clamp_opts, rigid_opts};
            static const int nopts[3] = {3, 2, 2};
            char what[64];
            snprintf(what, sizeof what, "parameters '%s'", key);
            if (!sv) {
                rc = E_(DF_EINVAL, "parameters: '%s' must be a string", key);
                break;
            }
            if ((rc = parse_choice(sv, what, opts[which], nopts[which], DF_EINVAL, &v, err)))
                break;
            if (which == 0)
                r->bounds = (df__rt_bounds_t)v;
            else if (which == 1)
                r->clamp = v;
            else
                r->rigid_fix = v;
        } else if (!strcmp(key, "align_iterations")) {
            json_int_t n = json_integer_value(val);
            if (!json_is_integer(val) || n < 1 || n > 10) {
                rc = E_(DF_EINVAL, "parameters: 'align_iterations' must be an integer 1..10");
                break;
            }
            r->iters = (int)n;
        } else if (!strcmp(key, "marker_lambda")) {
            double l = json_number_value(val);
            if (!json_is_number(val) || !isfinite(l) || l < 0 || l > 1e6) {
                rc = E_(DF_EINVAL, "parameters: 'marker_lambda' must be a number 0..1e6 (x the "
                                   "mean of diag(A'A), as deform retarget build's)");
                break;
            }
            r->lambda_rel = l;
        } else {
            rc = E_(DF_EINVAL, "parameters: unknown key '%s' (retarget takes bounds, "
                               "clamp_target, rigid_correction, align_iterations, "
                               "marker_lambda)", key);
            break;
        }
    }
done:
    json_decref(o);
    return rc;
}

/* (G + shift I)^-1 in float [m,m] (symmetric), G SPD [m,m] in double (so
 * is G + shift I for shift >= 0); NULL when out of memory */
static float *inverse_f(const double *G, int64_t m, double shift)
{
    double *Gs = malloc((size_t)(m * m) * sizeof(double));
    double *L = malloc((size_t)(m * m) * sizeof(double));
    double *col = malloc((size_t)m * sizeof(double));
    float *out = malloc((size_t)(m * m) * sizeof(float));
    if (Gs && L && col && out) {
        memcpy(Gs, G, (size_t)(m * m) * sizeof(double));
        for (int64_t i = 0; i < m; i++) Gs[i * m + i] += shift;
        df__rt_cholesky(Gs, m, 0.0, L);
        for (int64_t j = 0; j < m; j++) {
            for (int64_t i = 0; i < m; i++) col[i] = i == j;
            df__rt_chol_solve(L, m, col);
            for (int64_t i = 0; i < m; i++) out[j * m + i] = (float)col[i];
        }
    } else {
        free(out);
        out = NULL;
    }
    free(Gs), free(L), free(col);
    return out;
}

static int load_markers(df__rt_t *r, const df_st_t *st, const char *const *src_names,
                        df_error_t *err)
{
    const df_tensor_t *tr, *td, *tw;
    int rc;
    int64_t s2[2] = {-1, 3};
    if ((rc = df_st_require(st, "retarget/marker_rest", DF_DT_F32, 2, s2, 1, &tr, err)))
        return rc;
    if (!tr) {
        if (df_st_find(st, "retarget/marker_deltas") || df_st_find(st, "retarget/marker_weights"))
            return E_(DF_EFORMAT, "tensor 'retarget/marker_deltas' or 'retarget/marker_weights' "
                                  "present but 'retarget/marker_rest' is missing");
        return DF_OK;
    }
    int64_t K = tr->shape[0];
    if (K < 3 || K > DF_RT_MAX_MARKERS)
        return E_(K < 3 ? DF_EFORMAT : DF_ELIMIT,
                  "tensor 'retarget/marker_rest': %lld markers (must be 3..%d)",
                  (long long)K, DF_RT_MAX_MARKERS);
    int64_t s3[3] = {r->Ms, K, 3}, s1[1] = {K};
    char ctx[512];
    if ((rc = df_st_require(st, "retarget/marker_deltas", DF_DT_F32, 3, s3, 0, &td, err)) ||
        (rc = df_st_require(st, "retarget/marker_weights", DF_DT_F32, 1, s1, 1, &tw, err))) {
        snprintf(ctx, sizeof ctx, "%.400s", err ? err->msg : "");
        return E_(rc, "%s (Ms = %lld from metadata 'source_names', K = %lld from "
                      "'retarget/marker_rest')", ctx, (long long)r->Ms, (long long)K);
    }
    r->K = K;
    r->rest = dup_tensor(tr);
    r->A = dup_tensor(td);
    r->rigid_w = malloc((size_t)K * sizeof(float));
    if (!r->rest || !r->A || !r->rigid_w) return E_(DF_ENOMEM, "out of memory");
    double sum = 0;
    for (int64_t i = 0; i < K; i++) {
        float w = tw ? ((const float *)tw->data)[i] : 1.0f;
        if (!(w >= 0.0f))
            return E_(DF_EFORMAT, "tensor 'retarget/marker_weights': marker %lld: "
                                  "weight %g is negative", (long long)i, (double)w);
        r->rigid_w[i] = w;
        sum += w;
    }
    if (!(sum > 0))
        return E_(DF_EFORMAT, "tensor 'retarget/marker_weights': all weights are 0");
    for (int64_t i = 0; i < K; i++) r->rigid_w[i] = (float)(r->rigid_w[i] / sum);
    /* the rest configuration: no duplicated marker, not collinear */
    float lo[3], hi[3];
    for (int d = 0; d < 3; d++) lo[d] = hi[d] = r->rest[d];
    for (int64_t i = 1; i < K; i++)
        for (int d = 0; d < 3; d++) {
            lo[d] = fminf(lo[d], r->rest[3 * i + d]);
            hi[d] = fmaxf(hi[d], r->rest[3 * i + d]);
        }
    double diag = sqrt((double)(hi[0] - lo[0]) * (hi[0] - lo[0]) +
                       (double)(hi[1] - lo[1]) * (hi[1] - lo[1]) +
                       (double)(hi[2] - lo[2]) * (hi[2] - lo[2]));
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = i + 1; j < K; j++) {
            const float *a = r->rest + 3 * i, *b = r->rest + 3 * j;
            double d2 = 0;
            for (int d = 0; d < 3; d++) d2 += (double)(a[d] - b[d]) * (a[d] - b[d]);
            if (sqrt(d2) <= 1e-6 * diag)
                return E_(DF_EFORMAT, "tensor 'retarget/marker_rest': markers %lld and "
                                      "%lld coincide (duplicated landmark)",
                          (long long)i, (long long)j);
        }
    if (df__rt_degenerate(r->rest, r->rigid_w, K, &r->rest_spread))
        return E_(DF_EFORMAT, "tensor 'retarget/marker_rest': the (weighted) markers are "
                              "collinear: a rigid alignment would be undefined");
    if (df__rt_ref_init(&r->ref, r->rest, r->rigid_w, K)) return E_(DF_ENOMEM, "out of memory");
    int64_t m = r->Ms, n3 = 3 * K;
    /* the infinitesimal rigid motions at the rest markers, J (3K x 6:
     * rotation about the weighted centroid, translation), projected out of
     * A: solving with At = (I - J (J'J)^-1 J') A is solving for the weights
     * and a small rigid correction together (the correction eliminated),
     * so what the rough alignment left over does not leak into the
     * weights */
    r->At = r->A;
    if (r->rigid_fix) {
        double c[3] = {0, 0, 0}, JJ[36] = {0}, LJ[36];
        for (int64_t i = 0; i < K; i++)
            for (int d = 0; d < 3; d++) c[d] += r->rigid_w[i] * (double)r->rest[3 * i + d];
        r->At = malloc((size_t)(m * n3) * sizeof(float));
        double *Jm = malloc((size_t)(n3 * 6) * sizeof(double));
        if (!r->At || !Jm) {
            free(Jm);
            return E_(DF_ENOMEM, "out of memory");
        }
        for (int64_t i = 0; i < K; i++) {
            double x = r->rest[3 * i] - c[0], y = r->rest[3 * i + 1] - c[1],
                   z = r->rest[3 * i + 2] - c[2];
            double rows[3][6] = {{0, z, -y, 1, 0, 0}, {-z, 0, x, 0, 1, 0}, {y, -x, 0, 0, 0, 1}};
            memcpy(Jm + 18 * i, rows, sizeof rows);
        }
        for (int64_t k = 0; k < n3; k++)
            for (int a = 0; a < 6; a++)
                for (int b2 = 0; b2 < 6; b2++) JJ[a * 6 + b2] += Jm[6 * k + a] * Jm[6 * k + b2];
        if (df__rt_cholesky(JJ, 6, 0.0, LJ)) {
            free(Jm);
            return E_(DF_EFORMAT, "tensor 'retarget/marker_rest': the markers do not determine "
                                  "a rigid motion");
        }
        /* Pj = (J'J)^-1 J' and Pj A: the correction itself, for the head's
         * pose (theta = Pj y - Pj A w once w is solved) */
        r->Pj = malloc((size_t)(6 * n3) * sizeof(double));
        r->PjA = malloc((size_t)(6 * m) * sizeof(double));
        if (!r->Pj || !r->PjA) {
            free(Jm);
            return E_(DF_ENOMEM, "out of memory");
        }
        memcpy(r->jc, c, sizeof c);
        for (int64_t k = 0; k < n3; k++) {
            double col[6];
            for (int q = 0; q < 6; q++) col[q] = Jm[6 * k + q];
            df__rt_chol_solve(LJ, 6, col);
            for (int q = 0; q < 6; q++) r->Pj[q * n3 + k] = col[q];
        }
        for (int64_t j = 0; j < m; j++) {
            const float *a = r->A + j * n3;
            float *at = r->At + j * n3;
            double coef[6] = {0};
            for (int64_t k = 0; k < n3; k++)
                for (int q = 0; q < 6; q++) coef[q] += Jm[6 * k + q] * a[k];
            df__rt_chol_solve(LJ, 6, coef);
            for (int q = 0; q < 6; q++) r->PjA[q * m + j] = coef[q];
            for (int64_t k = 0; k < n3; k++) {
                double v = a[k];
                for (int q = 0; q < 6; q++) v -= Jm[6 * k + q] * coef[q];
                at[k] = (float)v;
            }
        }
        free(Jm);
    }
    /* parameters' marker_lambda: relative to mean diag(A'A), as the build's */
    if (r->lambda_rel >= 0) {
        double tr = 0;
        for (int64_t k = 0; k < m * n3; k++) tr += (double)r->A[k] * r->A[k];
        r->lambda = r->lambda_rel * tr / (double)m;
    }
    /* Gram matrix G = At'At + lambda I, checked positive definite */
    r->G = malloc((size_t)(m * m) * sizeof(double));
    r->L = malloc((size_t)(m * m) * sizeof(double));
    r->tol = malloc((size_t)m * sizeof(double));
    if (!r->G || !r->L || !r->tol) return E_(DF_ENOMEM, "out of memory");
    double maxd = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j <= i; j++) {
            const float *ai = r->At + i * n3, *aj = r->At + j * n3;
            double s = 0;
            for (int64_t k = 0; k < n3; k++) s += (double)ai[k] * aj[k];
            if (i == j) {
                s += r->lambda;
                if (s > maxd) maxd = s;
            }
            r->G[i * m + j] = r->G[j * m + i] = s;
        }
    if (!(maxd > 0))
        return E_(DF_EFORMAT, "tensor 'retarget/marker_deltas': no source control moves "
                              "any marker");
    int64_t bad = df__rt_cholesky(r->G, m, 1e-10 * maxd, r->L);
    if (bad)
        return E_(DF_ENUMERIC,
                  "tensor 'retarget/marker_deltas': the markers' Gram matrix is not positive "
                  "definite at source control %lld ('%s'): it does not move the markers, or "
                  "only as a combination of the controls before it%s; raise metadata "
                  "'marker_lambda' (now %g)",
                  (long long)(bad - 1), src_names[bad - 1],
                  r->rigid_fix ? " and rigid motions" : "", r->lambda);
    /* G with rows padded to 8 doubles, for the bounded solve's fast path */
    const int64_t P = df__rt_pad(m);
    r->Gp = aligned_alloc(64, (size_t)(m * P) * sizeof(double));
    if (!r->Gp) return E_(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < P; j++) r->Gp[i * P + j] = j < m ? r->G[i * m + j] : 0.0;
    /* G^-1 (float), for the batch's unconstrained solutions; (G + rho I)^-1,
     * the x-update of the ADMM start of the bounded solves (admm_start) */
    if (!(r->Ginv = inverse_f(r->G, m, 0.0))) return E_(DF_ENOMEM, "out of memory");
    if (r->bounds != DF_RT_NONE) {
        double dg = 0;
        for (int64_t i = 0; i < m; i++) dg += r->G[i * m + i];
        r->rho = (float)(ADMM_RHO * dg / (double)m);
        if (!(r->Kinv = inverse_f(r->G, m, r->rho))) return E_(DF_ENOMEM, "out of memory");
    }
    /* KKT tolerance: freeing variable i would lower the residual norm by
     * g_i / sqrt(G_ii); below 1e-5 of the markers' extent it is rounding */
    for (int64_t i = 0; i < m; i++) r->tol[i] = 1e-5 * diag * sqrt(r->G[i * m + i]);
    return DF_OK;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* metadata `key` (its text: js) as a list of 1..max_morphs names, each non-empty, shorter
 * than DF_NAME_MAX, none twice; *out: free with free_names */
static int read_name_list(const char *js, const char *key, const df_limits_t *lim, char ***out,
                          size_t *n_out, df_error_t *err)
{
    char **v = NULL;
    size_t n = 0;
    int rc = df__json_string_array(js, (size_t)-1, &v, &n, err);
    if (rc) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        return E_(rc, "metadata '%s': %s", key, tmp);
    }
    if (n < 1 || (int64_t)n > lim->max_morphs)
        rc = E_(n < 1 ? DF_EFORMAT : DF_ELIMIT, "metadata '%s': %zu controls (must be 1..%lld)",
                key, n, (long long)lim->max_morphs);
    for (size_t i = 0; !rc && i < n; i++) {
        if (!v[i][0] || strlen(v[i]) >= DF_NAME_MAX)
            rc = E_(DF_EFORMAT, "metadata '%s': name %zu is empty or longer than %d bytes", key,
                    i, DF_NAME_MAX - 1);
        for (size_t j = 0; !rc && j < i; j++)
            if (!strcmp(v[i], v[j]))
                rc = E_(DF_EFORMAT, "metadata '%s': '%s' appears twice (%zu and %zu)", key, v[i],
                        j, i);
    }
    if (rc) {
        free_names(v, n);
        return rc;
    }
    *out = v;
    *n_out = n;
    return DF_OK;
}

/* The names clients send source_weights under: the source controls, or (metadata
 * 'input_names' with tensor retarget/S [Ms, Mi]) a tracker's controls that S maps onto
 * them (deform retarget build --input-names). Registered as the model's "controls". */
static int load_input_map(df_model_t *m, df__rt_t *r, const df_st_t *st,
                          const df_limits_t *lim, const char *const *src_names,
                          df_error_t *err)
{
    const char *js = df_st_meta(st, "input_names");
    int rc;
    if (!js) {
        if (df_st_find(st, "retarget/S"))
            return E_(DF_EFORMAT, "tensor 'retarget/S' without metadata 'input_names'");
        if ((rc = df__model_set_names(m, "controls", (size_t)r->Ms, src_names)))
            return E_(rc, "cannot register the source control names: %s", df_strerror(rc));
        return DF_OK;
    }
    char **in = NULL;
    size_t ni = 0;
    if ((rc = read_name_list(js, "input_names", lim, &in, &ni, err))) return rc;
    const df_tensor_t *ts;
    int64_t ss[2] = {r->Ms, (int64_t)ni};
    if (!rc && (rc = df_st_require(st, "retarget/S", DF_DT_F32, 2, ss, 0, &ts, err))) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        rc = E_(rc, "%s (Ms = %lld source controls, %zu input names)", tmp, (long long)r->Ms, ni);
    }
    if (!rc && !(r->S = dup_tensor(ts))) rc = E_(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < r->Ms * (int64_t)ni; i++)
        if (!isfinite(r->S[i]))
            rc = E_(DF_EFORMAT, "tensor 'retarget/S': element %lld is not finite", (long long)i);
    if (!rc && (rc = df__model_set_names(m, "controls", ni, (const char *const *)in)))
        rc = E_(rc, "cannot register the input names: %s", df_strerror(rc));
    r->Mi = (int64_t)ni;
    free_names(in, ni);
    return rc;
}

static int rt_load(df_model_t *m, const df_st_t *st, const char *params,
                   const df_limits_t *lim, df_error_t *err)
{
    df_limits_t dl;
    if (!lim) {
        df_limits_default(&dl);
        lim = &dl;
    }
    df__rt_t *r = calloc(1, sizeof *r);
    if (!r) return E_(DF_ENOMEM, "out of memory");
    m->impl = r;
    r->in_w = r->in_mk = r->in_state = -1;
    r->out_pos = r->out_nrm = r->out_tw = r->out_sw = r->out_state = r->out_head = -1;
    int rc;
    const char *fv = df_st_meta(st, "format_version");
    if (fv && strcmp(fv, "1") != 0)
        return E_(DF_EUNSUPPORTED, "metadata 'format_version' is '%s' (this build reads 1)", fv);
    if ((rc = read_options(r, st, params, err))) return rc;

    /* ---- the target: a rigged model of the file's own tensors */
    df_model_t *t = calloc(1, sizeof *t);
    if (!t) return E_(DF_ENOMEM, "out of memory");
    t->kind = &df_kind_rigged;
    atomic_init(&t->refs, 1);
    r->target = t;
    if ((rc = df_kind_rigged.load(t, st, NULL, lim, err))) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        return E_(rc, "target: %s", tmp);
    }
    r->tgt_in_w = df_model_find_input(t, "weights");
    if (r->tgt_in_w < 0)
        return E_(DF_EFORMAT, "target: no morph targets (tensor 'morph_deltas' missing)");
    r->Mt = t->inputs[r->tgt_in_w].shape[0];
    r->tgt_out_pos = df_model_find_output(t, "positions");
    r->tgt_out_nrm = df_model_find_output(t, "normals");
    DF_ASSERT(r->tgt_out_pos >= 0 && r->tgt_out_nrm >= 0);
    r->N = t->n_vertices;

    /* ---- source controls */
    const char *js = df_st_meta(st, "source_names");
    if (!js) return E_(DF_EFORMAT, "metadata 'source_names' missing (the source controls)");
    char **sn = NULL;
    size_t ns = 0;
    if ((rc = read_name_list(js, "source_names", lim, &sn, &ns, err))) return rc;
    r->Ms = r->Mi = (int64_t)ns;
    rc = load_input_map(m, r, st, lim, (const char *const *)sn, err);
    if (!rc) rc = load_markers(r, st, (const char *const *)sn, err);
    free_names(sn, ns);
    if (rc) return rc;

    /* ---- the mapping */
    const df_tensor_t *te;
    int64_t se[2] = {r->Mt, r->Ms};
    if ((rc = df_st_require(st, "retarget/E", DF_DT_F32, 2, se, 0, &te, err))) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        return E_(rc, "%s (Mt = %lld target shapes, Ms = %lld source controls)", tmp,
                  (long long)r->Mt, (long long)r->Ms);
    }
    if (!(r->E = dup_tensor(te))) return E_(DF_ENOMEM, "out of memory");

    /* ---- the model as the world sees it */
    const char *const *tn = NULL;
    size_t ntn = df_model_names(t, "morphs", &tn);
    if ((rc = df__model_set_names(m, "morphs", ntn, tn)) ||
        (rc = df__model_set_mesh(m, t->n_vertices, t->rest_positions, t->n_triangles,
                                 t->triangles)))
        return E_(rc, "cannot store the target's names and mesh: %s", df_strerror(rc));
    int64_t shp[2] = {r->Mi, 3};
    r->in_w = m->n_inputs;
    if ((rc = df__model_add_input(m, "source_weights", 1, shp, 1, NULL)))
        return E_(rc, "cannot add input 'source_weights': %s", df_strerror(rc));
    if (r->K > 0) {
        shp[0] = r->K;
        r->in_mk = m->n_inputs;
        if ((rc = df__model_add_input(m, "markers", 2, shp, 1, r->rest)))
            return E_(rc, "cannot add input 'markers': %s", df_strerror(rc));
    }
    if (r->K > 0 && r->bounds != DF_RT_NONE) {
        /* a sequence's state: the previous frame's solved weights and the
         * start the bounded solve takes (1 their sets, 0 the signs of the
         * unconstrained solution); -1: no previous frame */
        float *none = malloc((size_t)(r->Ms + 1) * sizeof(float));
        if (!none) return E_(DF_ENOMEM, "out of memory");
        for (int64_t i = 0; i <= r->Ms; i++) none[i] = -1.0f;
        shp[0] = r->Ms + 1;
        r->in_state = m->n_inputs;
        rc = df__model_add_input(m, "state", 1, shp, 1, none);
        free(none);
        if (rc) return E_(rc, "cannot add input 'state': %s", df_strerror(rc));
    }
    /* the target's other inputs under their own names (a skeleton's
     * joint_rotations, joint_translations, joint_matrices; shape): handed
     * to the target's evaluation as they come */
    for (int i = 0; i < t->n_inputs; i++) {
        if (i == r->tgt_in_w) continue;
        const df_io_desc_t *d = df_model_input(t, i);
        if (df_model_find_input(m, d->name) >= 0 || m->n_inputs >= DF_MAX_IO)
            return E_(DF_EFORMAT, "target input '%s' cannot be passed through", d->name);
        r->pass_in[r->n_pass] = m->n_inputs;
        r->pass_tgt[r->n_pass++] = i;
        if ((rc = df__model_add_input(m, d->name, d->ndim, d->shape, 1,
                                      df_model_input_default(t, i))))
            return E_(rc, "cannot add input '%s': %s", d->name, df_strerror(rc));
    }
    shp[0] = r->N;
    shp[1] = 3;
    r->out_pos = m->n_outputs;
    if ((rc = df__model_add_output(m, "positions", 2, shp))) return E_(rc, "output");
    r->out_nrm = m->n_outputs;
    if ((rc = df__model_add_output(m, "normals", 2, shp))) return E_(rc, "output");
    shp[0] = r->Mt;
    r->out_tw = m->n_outputs;
    if ((rc = df__model_add_output(m, "target_weights", 1, shp))) return E_(rc, "output");
    shp[0] = r->Ms;
    r->out_sw = m->n_outputs;
    if ((rc = df__model_add_output(m, "solved_weights", 1, shp))) return E_(rc, "output");
    if (r->in_state >= 0) {
        shp[0] = r->Ms + 1;
        r->out_state = m->n_outputs;
        if ((rc = df__model_add_output(m, "state", 1, shp))) return E_(rc, "output");
    }
    if (r->K > 0) {
        /* the head's pose: the rigid motion from the source's rest frame to
         * the markers' (the inverse of the alignment), row-major 3 x 4 */
        shp[0] = 3;
        shp[1] = 4;
        r->out_head = m->n_outputs;
        if ((rc = df__model_add_output(m, "head_pose", 2, shp))) return E_(rc, "output");
    }
#ifdef DF_PGEMM
    /* the mapping's matrices in the packed kernel's layout: the right-hand
     * sides At'y (element (j, c) of At' at At[j 3K + c]), the unconstrained
     * solutions Ginv b, the target weights E w (E row-major) */
    if (!(r->pE = df_pgemm_new(r->E, r->Ms, 1, r->Mt, r->Ms)) ||
        (r->K && (!(r->pAt = df_pgemm_new(r->At, 3 * r->K, 1, r->Ms, 3 * r->K)) ||
                  !(r->pGinv = df_pgemm_new(r->Ginv, 1, r->Ms, r->Ms, r->Ms)) ||
                  (r->Kinv && !(r->pKinv = df_pgemm_new(r->Kinv, 1, r->Ms, r->Ms, r->Ms))))))
        return E_(DF_ENOMEM, "out of memory");
#endif
    return DF_OK;
}

/* ------------------------------------------------------------ evaluation */

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Scratch: [rigged scratch][floats: Ws, Wt, Y, RHS, Wm][doubles: per-pose
 * bounded solve][pointers] */
static size_t rt_scratch_bytes(const df_model_t *m, int n)
{
    const df__rt_t *r = m->impl;
    size_t B = (size_t)n, K3 = (size_t)(3 * r->K), Ms = (size_t)r->Ms;
    size_t fl = al16(Ms * B) + al16((size_t)r->Mt * B) + al16(K3 * B) * 2 + al16(Ms * B) * 2;
    fl += 5 * al16(Ms * B); /* the ADMM start's iterates */
    fl += al16((K3 > Ms ? K3 : Ms) * B); /* the packed kernel's regrouped vectors */
    size_t db = r->K ? df__rt_bvls_work(r->Ms) + df__rt_pdas_work(r->Ms) + 2 * Ms + 32 + 12 * B : 0;
    size_t ptr = 3 * B + 8;
    return (al16(df_kind_rigged.scratch_bytes(r->target, n)) + 64) + fl * sizeof(float) +
           db * sizeof(double) + ptr * sizeof(void *) + 2 * B * sizeof(int32_t) + 2 * B * Ms +
           B + Ms + 256;
}

static const float *pose_in(const df_batch_t *b, int idx, int p)
{
    if (idx < 0 || !b->in[idx]) return NULL;
    return b->in[idx][p];
}

/* a marker pose's state when it holds a previous frame (none of its
 * weights negative; the default -1 is none), else NULL */
static const float *prev_state(const df__rt_t *r, const df_batch_t *b, int p)
{
    const float *sv = pose_in(b, r->in_state, p);
    for (int64_t i = 0; sv && i < r->Ms; i++)
        if (!(sv[i] >= 0.0f)) return NULL;
    return sv;
}

/* the bounded solve's sets of n weights w (unit: the upper bound 1 holds);
 * branch-free: the signs are random */
static void sets_of(const float *w, size_t n, int unit, uint8_t *sets)
{
    for (size_t i = 0; i < n; i++) {
        const int lo = w[i] <= 0.0f, up = unit & (w[i] >= 1.0f);
        sets[i] = (uint8_t)(DF_RT_FREE - 2 * lo - (up & !lo)); /* LO 0, HI 1, FREE 2 */
    }
}

static int check_finite(const float *x, int64_t n, int p, const char *name, df_error_t *err)
{
    /* all exponent bits set: Inf or NaN; an OR over the bits vectorises
     * (a loop of isfinite tests and early exits does not) */
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) return DF_OK;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return E_(DF_EINVAL, "pose %d: input '%s' element %lld is not finite", p, name,
                      (long long)i);
    return DF_OK;
}

/* C (rows x cols, col-major, ldc = rows) = op(A) X: A column-major with
 * leading dimension lda; trans: A' (sgemv when cols == 1). */
static void gemm(int trans, int rows, int cols, int inner, const float *A, int lda,
                 const float *X, float *C)
{
    if (cols == 1)
        cblas_sgemv(CblasColMajor, trans ? CblasTrans : CblasNoTrans, trans ? inner : rows,
                    trans ? rows : inner, 1.0f, A, lda, X, 1, 0.0f, C, 1);
    else
        cblas_sgemm(CblasColMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, rows,
                    cols, inner, 1.0f, A, lda, X, inner, 0.0f, C, rows);
}

/* The head's pose of a marker pose, row-major 3 x 4 into h: the rigid
 * motion taking the source's rest frame to the markers'. The alignment
 * (R, t: markers onto the rest frame) leaves the residual y = R x + t -
 * rest = A w + J theta + noise; theta = Pj (y - A w), the small rotation om
 * about jc and translation v solved with the weights (zero without the
 * rigid correction), moves the posed face p to Q (p - jc) + jc + v with
 * Q = exp([om]x). So x = R'(Q (p - jc) + jc + v - t). */
static void head_pose(const df__rt_t *r, const double *Rt, const float *y, const double *w,
                      float *h)
{
    const double *R = Rt, *t = Rt + 9;
    double th[6] = {0, 0, 0, 0, 0, 0};
    if (r->Pj) {
        const int64_t n3 = 3 * r->K;
        for (int q = 0; q < 6; q++) {
            const double *pj = r->Pj + q * n3, *pa = r->PjA + q * r->Ms;
            double v = 0;
            for (int64_t k = 0; k < n3; k++) v += pj[k] * y[k];
            for (int64_t j = 0; j < r->Ms; j++) v -= pa[j] * w[j];
            th[q] = v;
        }
    }
    /* Q by Rodrigues */
    double Q[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    const double a = sqrt(th[0] * th[0] + th[1] * th[1] + th[2] * th[2]);
    if (a > 0) {
        const double k[3] = {th[0] / a, th[1] / a, th[2] / a}, s = sin(a), c1 = 1 - cos(a);
        const double K3[9] = {0, -k[2], k[1], k[2], 0, -k[0], -k[1], k[0], 0};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                double kk = 0;
                for (int e = 0; e < 3; e++) kk += K3[3 * i + e] * K3[3 * e + j];
                Q[3 * i + j] += s * K3[3 * i + j] + c1 * kk;
            }
    }
    double off[3]; /* jc - Q jc + v - t */
    for (int i = 0; i < 3; i++) {
        off[i] = r->jc[i] + th[3 + i] - t[i];
        for (int e = 0; e < 3; e++) off[i] -= Q[3 * i + e] * r->jc[e];
    }
    for (int i = 0; i < 3; i++) {
        double s3 = 0;
        for (int j = 0; j < 3; j++) {
            double v = 0;
            for (int e = 0; e < 3; e++) v += R[3 * e + i] * Q[3 * e + j];
            h[4 * i + j] = (float)v;
            s3 += R[3 * j + i] * off[j];
        }
        h[4 * i + 3] = (float)s3;
    }
}

/* the same product through the packed copy pk of A when there is one
 * (df_pgemm; wt: its scratch) */
static void pgemm(const float *pk, float *wt, int trans, int rows, int cols, int inner,
                  const float *A, int lda, const float *X, float *C)
{
#ifdef DF_PGEMM
    if (pk) {
        df_pgemm(pk, rows, inner, X, cols, NULL, C, (size_t)rows, wt);
        return;
    }
#else
    (void)pk, (void)wt;
#endif
    gemm(trans, rows, cols, inner, A, lda, X, C);
}

/* v clamped to [0, hi] (a compare and select each side: vectorises, where
 * fminf / fmaxf are library calls) */
static inline float clampf(float v, float hi)
{
    v = v < 0.0f ? 0.0f : v;
    return v > hi ? hi : v;
}

/* The cold start of the bounded solves (poses without a previous frame's
 * sets): ADMM_ITERS iterations of ADMM on the batch's box-constrained
 * problems min 1/2 w'Gw - b'w, lo <= w <= hi (Boyd et al. 2011, sec. 5.2:
 * x = (G + rho I)^-1 (b + rho (z - u)), z = clip(x^ + u), u += x^ - z with
 * the over-relaxed x^ = a x + (1 - a) z, a = 1.8, sec. 3.4.3), each
 * iteration one matrix product for all of them, from z = clip(G^-1 b), u =
 * 0; the sets of z start the exact solve. A start changes the answer only
 * within the stopping rule (the problem is strictly convex and the exact
 * solve goes on until the KKT conditions hold to tol; along directions the
 * markers barely observe, two starts can stop a few 1e-3 apart in weight):
 * it saves the exact solve's set changes, which
 * cost far more per pose than the products (the unconstrained solution's
 * signs are ~14 of 55 variables from the answer's sets on face markers,
 * ADMM's ~4.4 (clean) and ~1.5 (1 mm noise) after 10 iterations; 5.5 and
 * 3.0 without the over-relaxation). cq: the nc poses (marker order);
 * Ad: 5 blocks of ld floats; sets: [nm, Ms] OUT for those poses. */
static void admm_start(const df__rt_t *r, float *wt, const float *RHS, const float *Wm,
                       const int32_t *cq, int nc, float *Ad, size_t ld, uint8_t *sets)
{
    const int64_t Ms = r->Ms;
    const size_t n = (size_t)Ms * nc;
    float *Rc = Ad, *Z = Ad + ld, *U = Ad + 2 * ld, *T = Ad + 3 * ld, *X = Ad + 4 * ld;
    const float hi = r->bounds == DF_RT_UNIT ? 1.0f : INFINITY, rho = r->rho;
    for (int c = 0; c < nc; c++) {
        memcpy(Rc + (size_t)c * Ms, RHS + (size_t)cq[c] * Ms, (size_t)Ms * sizeof(float));
        const float *w = Wm + (size_t)cq[c] * Ms;
        float *z = Z + (size_t)c * Ms;
        for (int64_t i = 0; i < Ms; i++) z[i] = clampf(w[i], hi);
    }
    memset(U, 0, n * sizeof(float));
    for (int k = 0; k < ADMM_ITERS; k++) {
        for (size_t i = 0; i < n; i++) T[i] = Rc[i] + rho * (Z[i] - U[i]);
        pgemm(r->pKinv, wt, 0, (int)Ms, nc, (int)Ms, r->Kinv, (int)Ms, T, X);
        for (size_t i = 0; i < n; i++) { /* over-relaxed: x^ = a x + (1 - a) z */
            const float v = ADMM_ALPHA * X[i] + (1.0f - ADMM_ALPHA) * Z[i] + U[i],
                        z = clampf(v, hi);
            U[i] = v - z;
            Z[i] = z;
        }
    }
    for (int c = 0; c < nc; c++)
        sets_of(Z + (size_t)c * Ms, (size_t)Ms, r->bounds == DF_RT_UNIT,
                sets + (size_t)cq[c] * Ms);
}

static int rt_evaluate(const df_model_t *m, const df_batch_t *b, void *scratch,
                       df_error_t *err)
{
    const df__rt_t *r = m->impl;
    const int B = b->n;
    const int64_t Ms = r->Ms, Mt = r->Mt, K = r->K, K3 = 3 * K;
    int rc;

    /* carve scratch */
    size_t rig_bytes = al16(df_kind_rigged.scratch_bytes(r->target, B)) + 64;
    char *base = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    void *rig_scratch = base;
    float *s = (float *)(base + rig_bytes);
    float *Ws = s;
    s += al16((size_t)Ms * B);
    float *Wt = s;
    s += al16((size_t)Mt * B);
    float *Y = s;
    s += al16((size_t)K3 * B);
    float *Yref = s;
    s += al16((size_t)K3 * B);
    float *RHS = s;
    s += al16((size_t)Ms * B);
    float *Wm = s;
    s += al16((size_t)Ms * B);
    float *wt = s; /* df_pgemm's scratch */
    s += al16((size_t)(K3 > Ms ? K3 : Ms) * B);
    float *Ad = s; /* the ADMM start's iterates: 5 blocks of [Ms, B] */
    s += 5 * al16((size_t)Ms * B);
    double *d = (double *)s;
    double *bw = d, *ww = bw + Ms, *work = ww + Ms;
    /* the fast path's work, 64-byte aligned */
    double *pwork = (double *)(((uintptr_t)(work + df__rt_bvls_work(Ms)) + 63) & ~(uintptr_t)63);
    double *Rt = pwork + df__rt_pdas_work(Ms) + 8; /* [B,12] each pose's alignment */
    if (K) d = Rt + 12 * (size_t)B;
    const float **pin = (const float **)d;
    float **ppos = (float **)(pin + B), **pnrm = ppos + B;
    int32_t *mk = (int32_t *)(pnrm + B); /* pose index of each marker pose */
    uint8_t *sets = (uint8_t *)(mk + B);  /* [nm, Ms] active sets */
    uint8_t *sets0 = sets + (size_t)B * Ms; /* [Ms] a pose's starting sets */
    uint8_t *cold = sets0 + Ms;              /* [nm, Ms] the cold start's sets */
    uint8_t *next = cold + (size_t)B * Ms;   /* [nm] the start each sequence takes next */
    int32_t *cq = (int32_t *)(((uintptr_t)(next + B) + 3) & ~(uintptr_t)3); /* [nm] cold poses */

    /* 1. validate every pose before anything is written */
    int nm = 0;
    for (int p = 0; p < B; p++) {
        const float *w = pose_in(b, r->in_w, p), *x = pose_in(b, r->in_mk, p);
        if (w && x)
            return E_(DF_EINVAL, "pose %d: give either 'source_weights' or 'markers', not "
                                 "both", p);
        if (w && (rc = check_finite(w, r->Mi, p, "source_weights", err))) return rc;
        const float *sv = pose_in(b, r->in_state, p);
        if (sv && (rc = check_finite(sv, Ms + 1, p, "state", err))) return rc;
        for (int k = 0; k < r->n_pass; k++) {
            const float *v = pose_in(b, r->pass_in[k], p);
            const df_io_desc_t *d = df_model_input(m, r->pass_in[k]);
            int64_t n = 1;
            for (int e = 0; e < d->ndim; e++) n *= d->shape[e];
            if (v && (rc = check_finite(v, n, p, d->name, err))) return rc;
        }
        if (x) {
            if ((rc = check_finite(x, K3, p, "markers", err))) return rc;
            double sp;
            if (df__rt_degenerate(x, r->rigid_w, K, &sp))
                return E_(DF_EINVAL, "pose %d: input 'markers': the markers are collinear "
                                     "or coincide: the head's rigid alignment is undefined",
                          p);
            /* another unit (metres for a rig in centimetres) or not this face's markers:
             * no rigid alignment fits them, refuse rather than answer nonsense */
            if (!(sp >= MARKER_SIZE_MIN * r->rest_spread && sp <= MARKER_SIZE_MAX * r->rest_spread))
                return E_(DF_EINVAL, "pose %d: input 'markers': they span %.3g x the model's "
                                     "rest markers (allowed %g..%g): markers in another unit "
                                     "than the model's, or not its markers",
                          p, sp / r->rest_spread, MARKER_SIZE_MIN, MARKER_SIZE_MAX);
            mk[nm++] = p;
        }
        float *col = Ws + (size_t)p * Ms;
        if (w && r->S) { /* a tracker's controls onto the source's */
            for (int64_t i = 0; i < Ms; i++) {
                const float *Si = r->S + i * r->Mi;
                float v = 0.0f;
                for (int64_t j = 0; j < r->Mi; j++) v += Si[j] * w[j];
                col[i] = v;
            }
        } else if (w)
            memcpy(col, w, (size_t)Ms * sizeof(float));
        else
            memset(col, 0, (size_t)Ms * sizeof(float));
    }

    /* 2. marker poses: align, one GEMM for the right-hand sides, bounded
     * solve per pose; repeat with the markers of the current estimate */
    for (int it = 0; nm > 0 && it < r->iters; it++) {
        for (int q = 0; q < nm; q++) {
            const float *x = pose_in(b, r->in_mk, mk[q]);
            double R[9], t[3];
            if (it == 0)
                df__rt_rigid_align_ref(x, &r->ref, R, t);
            else if (df__rt_rigid_align(x, Yref + (size_t)q * K3, r->rigid_w, K, 0, R, t))
                return E_(DF_EINVAL, "pose %d: input 'markers': rigid alignment failed "
                                     "(degenerate marker set)", mk[q]);
            if (r->out_head >= 0 && b->out[r->out_head]) { /* kept for the head's pose */
                memcpy(Rt + 12 * q, R, sizeof(double) * 9);
                memcpy(Rt + 12 * q + 9, t, sizeof(double) * 3);
            }
            float *y = Y + (size_t)q * K3;
            for (int64_t i = 0; i < K; i++) {
                const float *xi = x + 3 * i;
                for (int a = 0; a < 3; a++)
                    y[3 * i + a] = (float)(R[3 * a] * xi[0] + R[3 * a + 1] * xi[1] +
                                           R[3 * a + 2] * xi[2] + t[a] - r->rest[3 * i + a]);
            }
        }
        pgemm(r->pAt, wt, 1, (int)Ms, nm, (int)K3, r->At, (int)K3, Y, RHS);
        if (it == 0 && r->bounds != DF_RT_NONE) {
            /* the starts. The unconstrained solutions G^-1 b, one GEMM for
             * the batch: ADMM's starting point, and their signs the cold
             * start the sequences below compare with. A sequence's previous
             * frame (state: its solved weights, then which start to take):
             * with clean markers its sets are a change or two from this
             * frame's; with noisy ones the weak controls flip from frame to
             * frame and the cold start is the better one. Each frame
             * compares the two with its own final sets and the state says
             * which to take next (below). The other poses start from ADMM
             * (admm_start), and compare with that. */
            pgemm(r->pGinv, wt, 0, (int)Ms, nm, (int)Ms, r->Ginv, (int)Ms, RHS, Wm);
            const int unit = r->bounds == DF_RT_UNIT;
            sets_of(Wm, (size_t)Ms * nm, unit, cold);
            int nc = 0; /* the poses without a previous frame's sets to start from */
            for (int q = 0; q < nm; q++) {
                const float *sv = prev_state(r, b, mk[q]);
                if (sv && sv[Ms] > 0.5f)
                    sets_of(sv, (size_t)Ms, unit, sets + (size_t)q * Ms);
                else
                    cq[nc++] = q;
            }
            if (nc > 0) admm_start(r, wt, RHS, Wm, cq, nc, Ad, al16((size_t)Ms * B), sets);
            for (int c = 0; c < nc; c++)
                memcpy(cold + (size_t)cq[c] * Ms, sets + (size_t)cq[c] * Ms, (size_t)Ms);
        }
        for (int q = 0; q < nm; q++) {
            for (int64_t i = 0; i < Ms; i++) bw[i] = RHS[(size_t)q * Ms + i];
            /* later rounds start from the previous round's sets; the fast
             * path first, the general solver from the same sets when it
             * does not settle (the same answer either way) */
            uint8_t *sq = sets + (size_t)q * Ms;
            if (r->bounds == DF_RT_NONE) {
                df__rt_bvls(r->G, r->L, bw, Ms, r->bounds, r->tol, sq, ww, work);
            } else {
                memcpy(sets0, sq, (size_t)Ms);
                if (df__rt_pdas(r->Gp, Ms, bw, r->bounds, r->tol, sq, ww, pwork) < 0) {
                    memcpy(sq, sets0, (size_t)Ms);
                    df__rt_bvls(r->G, r->L, bw, Ms, r->bounds, r->tol, sq, ww, work);
                }
            }
            for (int64_t i = 0; i < Ms; i++) Wm[(size_t)q * Ms + i] = (float)ww[i];
            if (r->out_head >= 0 && b->out[r->out_head] && it + 1 == r->iters)
                head_pose(r, Rt + 12 * q, Y + (size_t)q * K3, ww, b->out[r->out_head][mk[q]]);
        }
        if (it + 1 < r->iters) {
            gemm(0, (int)K3, nm, (int)Ms, r->A, (int)K3, Wm, Yref);
            for (int q = 0; q < nm; q++)
                for (int64_t i = 0; i < K3; i++) Yref[(size_t)q * K3 + i] += r->rest[i];
        }
    }
    for (int q = 0; q < nm; q++)
        memcpy(Ws + (size_t)mk[q] * Ms, Wm + (size_t)q * Ms, (size_t)Ms * sizeof(float));
    /* the start each sequence takes next: the previous frame's sets when
     * they were at most half as far from this frame's final sets as the
     * signs were (a sequence's first frame: try them) */
    if (r->out_state >= 0 && b->out[r->out_state] && nm > 0 && r->bounds != DF_RT_NONE) {
        const int unit = r->bounds == DF_RT_UNIT;
        for (int q = 0; q < nm; q++) {
            const float *sv = prev_state(r, b, mk[q]);
            const uint8_t *sq = sets + (size_t)q * Ms, *cq = cold + (size_t)q * Ms;
            int64_t nc = 0, nw = 0;
            for (int64_t i = 0; i < Ms; i++) nc += sq[i] != cq[i];
            if (sv) {
                sets_of(sv, (size_t)Ms, unit, sets0);
                for (int64_t i = 0; i < Ms; i++) nw += sq[i] != sets0[i];
            }
            next[q] = !sv || 2 * nw < nc;
        }
    }

    /* 3. target weights: one GEMM for the batch. E is [Mt,Ms] row-major,
     * i.e. column-major Ms x Mt: W_t = E' (col-major) W_s */
    pgemm(r->pE, wt, 1, (int)Mt, B, (int)Ms, r->E, (int)Ms, Ws, Wt);
    if (r->clamp)
        for (size_t i = 0; i < (size_t)Mt * B; i++)
            Wt[i] = Wt[i] < 0.0f ? 0.0f : Wt[i] > 1.0f ? 1.0f : Wt[i];
    for (int p = 0; p < B; p++) {
        if (b->out[r->out_tw])
            memcpy(b->out[r->out_tw][p], Wt + (size_t)p * Mt, (size_t)Mt * sizeof(float));
        if (b->out[r->out_sw])
            memcpy(b->out[r->out_sw][p], Ws + (size_t)p * Ms, (size_t)Ms * sizeof(float));
        if (r->out_head >= 0 && b->out[r->out_head] && !pose_in(b, r->in_mk, p)) {
            float *h = b->out[r->out_head][p]; /* no markers: the rest frame */
            for (int e = 0; e < 12; e++) h[e] = e % 5 == 0 ? 1.0f : 0.0f;
        }
        if (r->out_state >= 0 && b->out[r->out_state]) { /* -1: no solve to start from */
            float *o = b->out[r->out_state][p];
            for (int64_t i = 0; i <= Ms; i++) o[i] = -1.0f;
        }
    }
    for (int q = 0; r->out_state >= 0 && b->out[r->out_state] && q < nm; q++) {
        float *o = b->out[r->out_state][mk[q]];
        memcpy(o, Ws + (size_t)mk[q] * Ms, (size_t)Ms * sizeof(float));
        o[Ms] = next[q] ? 1.0f : 0.0f;
    }

    /* 4. the target's vertices through the rigged kind's kernel */
    if (!b->out[r->out_pos] && !b->out[r->out_nrm]) return DF_OK;
    df_batch_t tb;
    memset(&tb, 0, sizeof tb);
    tb.n = B;
    for (int p = 0; p < B; p++) {
        pin[p] = Wt + (size_t)p * Mt;
        if (b->out[r->out_pos]) ppos[p] = b->out[r->out_pos][p];
        if (b->out[r->out_nrm]) pnrm[p] = b->out[r->out_nrm][p];
    }
    tb.in[r->tgt_in_w] = pin;
    for (int k = 0; k < r->n_pass; k++) tb.in[r->pass_tgt[k]] = b->in[r->pass_in[k]];
    tb.flags = b->flags;
    tb.out[r->tgt_out_pos] = b->out[r->out_pos] ? ppos : NULL;
    tb.out[r->tgt_out_nrm] = b->out[r->out_nrm] ? pnrm : NULL;
    rc = df_kind_rigged.evaluate(r->target, &tb, rig_scratch, err);
    if (rc) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        return E_(rc, "target: %s", tmp);
    }
    return DF_OK;
}

const df_kind_t df_kind_retarget = {
    .name = "retarget",
    .load = rt_load,
    .destroy = rt_destroy,
    .scratch_bytes = rt_scratch_bytes,
    .evaluate = rt_evaluate,
    .clip_sample = NULL,
};

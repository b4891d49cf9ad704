/* laplacian.c — uniform Laplacian, CHOLMOD factorisation of the anchored
 * normal matrix, allocation-free multi-RHS solves, dense folding.
 * See laplacian.h for the design.
 */
#include "math/laplacian.h"

#include <cholmod.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t uf_find(int32_t *p, int32_t x)
{
    while (p[x] != x) {
        p[x] = p[p[x]];
        x = p[x];
    }
    return x;
}

int64_t df_lap_components(int64_t nv, int64_t nt, const uint32_t *tris,
                          int32_t *comp)
{
    int32_t *p = malloc(sizeof(int32_t) * (nv ? nv : 1));
    if (!p) return -1;
    for (int64_t v = 0; v < nv; v++) p[v] = (int32_t)v;
    for (int64_t t = 0; t < nt; t++)
        for (int e = 0; e < 3; e++) {
            int32_t a = uf_find(p, (int32_t)tris[t * 3 + e]);
            int32_t b = uf_find(p, (int32_t)tris[t * 3 + (e + 1) % 3]);
            if (a != b) p[a < b ? b : a] = a < b ? a : b;
        }
    int64_t n = 0;
    for (int64_t v = 0; v < nv; v++) comp[v] = -1;
    int32_t *id = malloc(sizeof(int32_t) * (nv ? nv : 1));
    if (!id) { free(p); return -1; }
    for (int64_t v = 0; v < nv; v++) id[v] = -1;
    for (int64_t v = 0; v < nv; v++) {
        int32_t r = uf_find(p, (int32_t)v);
        if (id[r] < 0) id[r] = (int32_t)n++;
        comp[v] = id[r];
    }
    free(p), free(id);
    return n;
}

void df_lap_free(df_lap_t **pl)
{
    if (!pl || !*pl) return;
    df_lap_t *l = *pl;
    free(l->rp), free(l->ci), free(l->val), free(l->anchors);
    free(l->Lp), free(l->Li), free(l->Lx), free(l->perm);
    free(l);
    *pl = NULL;
}

/* L_s in CSR from unique edges. */
static int build_ls(df_lap_t *l, int64_t nt, const uint32_t *tris)
{
    int64_t V = l->nv;
    int32_t *cnt = calloc(V + 1, sizeof(int32_t));
    int32_t *nb = malloc(sizeof(int32_t) * 6 * (nt ? nt : 1));
    int32_t *st = malloc(sizeof(int32_t) * (V + 1));
    if (!cnt || !nb || !st) { free(cnt), free(nb), free(st); return -1; }
    for (int64_t t = 0; t < nt; t++)
        for (int e = 0; e < 3; e++) cnt[tris[t * 3 + e]] += 2;
    st[0] = 0;
    for (int64_t v = 0; v < V; v++) st[v + 1] = st[v] + cnt[v];
    memcpy(cnt, st, sizeof(int32_t) * V);
    for (int64_t t = 0; t < nt; t++)
        for (int e = 0; e < 3; e++) {
            uint32_t a = tris[t * 3 + e];
            nb[cnt[a]++] = (int32_t)tris[t * 3 + (e + 1) % 3];
            nb[cnt[a]++] = (int32_t)tris[t * 3 + (e + 2) % 3];
        }
    l->rp = malloc(sizeof(int32_t) * (V + 1));
    l->ci = malloc(sizeof(int32_t) * (st[V] + V + 1));
    l->val = malloc(sizeof(float) * (st[V] + V + 1));
    if (!l->rp || !l->ci || !l->val) { free(cnt), free(nb), free(st); return -1; }
    int64_t o = 0;
    for (int64_t v = 0; v < V; v++) {
        int32_t *s = nb + st[v], n = st[v + 1] - st[v];
        qsort(s, n, sizeof *s, cmp_i32);
        l->rp[v] = (int32_t)o;
        int64_t diag = o++;
        l->ci[diag] = (int32_t)v;
        int deg = 0;
        for (int32_t i = 0; i < n; i++) {
            if (s[i] == (int32_t)v || (i > 0 && s[i] == s[i - 1])) continue;
            l->ci[o] = s[i];
            l->val[o++] = -1.0f;
            deg++;
        }
        l->val[diag] = (float)deg;
    }
    l->rp[V] = (int32_t)o;
    l->nnz = o;
    free(cnt), free(nb), free(st);
    return 0;
}

int df_lap_new(int64_t nv, int64_t nt, const uint32_t *tris, int64_t n_anchors,
               const int32_t *anchors, double omega, df_lap_t **out,
               df_error_t *err)
{
    if (nv < 1 || nv > 50000000 || n_anchors < 1 || n_anchors > nv || !(omega > 0))
        return df_error_set(err, DF_EINVAL, "laplacian: %lld vertices, %lld anchors, omega %g",
                            (long long)nv, (long long)n_anchors, omega);
    for (int64_t t = 0; t < nt * 3; t++)
        if (tris[t] >= (uint64_t)nv)
            return df_error_set(err, DF_EINVAL, "laplacian: triangle %lld has vertex %u >= %lld",
                                (long long)(t / 3), tris[t], (long long)nv);
    df_lap_t *l = calloc(1, sizeof *l);
    if (!l) return df_error_set(err, DF_ENOMEM, "laplacian: out of memory");
    l->nv = nv;
    l->omega = omega;
    l->n_anchors = n_anchors;
    l->anchors = malloc(sizeof(int32_t) * n_anchors);
    int32_t *comp = malloc(sizeof(int32_t) * nv);
    uint8_t *seen = calloc(nv, 1);
    if (!l->anchors || !comp || !seen || build_ls(l, nt, tris)) {
        free(comp), free(seen);
        df_lap_free(&l);
        return df_error_set(err, DF_ENOMEM, "laplacian: out of memory");
    }
    memcpy(l->anchors, anchors, sizeof(int32_t) * n_anchors);
    int rc = DF_OK;
    for (int64_t a = 0; a < n_anchors; a++) {
        int32_t v = anchors[a];
        if (v < 0 || v >= nv) { rc = df_error_set(err, DF_EINVAL, "laplacian: anchor %lld = %d is not a vertex", (long long)a, v); break; }
        if (seen[v]) { rc = df_error_set(err, DF_EINVAL, "laplacian: anchor %lld repeats vertex %d", (long long)a, v); break; }
        seen[v] = 1;
    }
    if (!rc) {
        int64_t nc = df_lap_components(nv, nt, tris, comp);
        uint8_t *has = calloc(nc > 0 ? nc : 1, 1);
        if (!has || nc < 0) rc = df_error_set(err, DF_ENOMEM, "laplacian: out of memory");
        for (int64_t a = 0; !rc && a < n_anchors; a++) has[comp[anchors[a]]] = 1;
        for (int64_t v = 0; !rc && v < nv; v++)
            if (!has[comp[v]])
                rc = df_error_set(err, DF_EINVAL,
                                  "laplacian: mesh piece containing vertex %lld has no anchor "
                                  "(%lld pieces; each needs one, else the system is singular)",
                                  (long long)v, (long long)nc);
        free(has);
    }
    free(comp), free(seen);
    if (rc) { df_lap_free(&l); return rc; }

    /* A = L_s^T L_s + w^2 sum e_a e_a^T, assembled by CHOLMOD (double) */
    cholmod_common c;
    cholmod_start(&c);
    c.nmethods = 1;
    c.method[0].ordering = CHOLMOD_AMD;
    c.postorder = 1;
    cholmod_sparse *Ls = cholmod_allocate_sparse(nv, nv, l->nnz, 1, 1, 0, CHOLMOD_REAL, &c);
    cholmod_sparse *AtA = NULL, *A = NULL;
    cholmod_factor *F = NULL;
    if (!Ls) { rc = df_error_set(err, DF_ENOMEM, "laplacian: cholmod allocate failed"); goto done; }
    /* CSR of a symmetric matrix == its CSC */
    int *Ap = Ls->p, *Ai = Ls->i;
    double *Ax = Ls->x;
    for (int64_t v = 0; v <= nv; v++) Ap[v] = l->rp[v];
    for (int64_t k = 0; k < l->nnz; k++) Ai[k] = l->ci[k], Ax[k] = l->val[k];
    Ls->sorted = 0;
    AtA = cholmod_aat(Ls, NULL, 0, 1, &c); /* L_s L_s^T = L_s^T L_s */
    if (!AtA) { rc = df_error_set(err, DF_ENOMEM, "laplacian: cholmod_aat failed (status %d)", c.status); goto done; }
    if (!cholmod_sort(AtA, &c)) { rc = df_error_set(err, DF_EINTERNAL, "laplacian: sort failed"); goto done; }
    {
        int *p = AtA->p, *i = AtA->i;
        double *x = AtA->x;
        for (int64_t a = 0; a < n_anchors; a++) {
            int32_t v = anchors[a];
            int found = 0;
            for (int k = p[v]; k < p[v + 1]; k++)
                if (i[k] == v) { x[k] += omega * omega; found = 1; break; }
            if (!found) { rc = df_error_set(err, DF_EINTERNAL, "laplacian: no diagonal at %d", v); goto done; }
        }
    }
    A = cholmod_copy(AtA, 1, 1, &c); /* symmetric, upper part */
    if (!A) { rc = df_error_set(err, DF_ENOMEM, "laplacian: cholmod_copy failed"); goto done; }
    F = cholmod_analyze(A, &c);
    if (!F) { rc = df_error_set(err, DF_ENUMERIC, "laplacian: cholmod_analyze failed (status %d)", c.status); goto done; }
    if (!cholmod_factorize(A, F, &c) || c.status != CHOLMOD_OK) {
        rc = df_error_set(err, DF_ENUMERIC, "laplacian: factorisation failed (status %d, minor %d of %lld)",
                          c.status, (int)F->minor, (long long)nv);
        goto done;
    }
    if (!cholmod_change_factor(CHOLMOD_REAL, 1, 0, 1, 1, F, &c)) {
        rc = df_error_set(err, DF_EINTERNAL, "laplacian: change_factor failed (status %d)", c.status);
        goto done;
    }
    {
        int *Fp = F->p, *Fi = F->i, *Fperm = F->Perm;
        double *Fx = F->x;
        int64_t fnz = Fp[nv];
        l->Lp = malloc(sizeof(int32_t) * (nv + 1));
        l->Li = malloc(sizeof(int32_t) * fnz);
        l->Lx = malloc(sizeof(double) * fnz);
        l->perm = malloc(sizeof(int32_t) * nv);
        if (!l->Lp || !l->Li || !l->Lx || !l->perm) { rc = df_error_set(err, DF_ENOMEM, "laplacian: out of memory"); goto done; }
        for (int64_t j = 0; j <= nv; j++) l->Lp[j] = Fp[j];
        for (int64_t k = 0; k < fnz; k++) l->Li[k] = Fi[k], l->Lx[k] = Fx[k];
        for (int64_t j = 0; j < nv; j++) l->perm[j] = Fperm[j];
        for (int64_t j = 0; j < nv; j++)
            if (l->Lp[j] >= l->Lp[j + 1] || l->Li[l->Lp[j]] != j || !(l->Lx[l->Lp[j]] > 0)) {
                rc = df_error_set(err, DF_EINTERNAL, "laplacian: factor column %lld lacks its diagonal", (long long)j);
                goto done;
            }
        l->factor_nnz = fnz;
    }
done:
    cholmod_free_factor(&F, &c);
    cholmod_free_sparse(&A, &c);
    cholmod_free_sparse(&AtA, &c);
    cholmod_free_sparse(&Ls, &c);
    cholmod_finish(&c);
    if (rc) { df_lap_free(&l); return rc; }
    *out = l;
    return DF_OK;
}

void df_lap_apply(const df_lap_t *l, int ncol, const float *x, float *y)
{
    for (int64_t v = 0; v < l->nv; v++) {
        float *yr = y + v * ncol;
        for (int c = 0; c < ncol; c++) yr[c] = 0;
        for (int32_t k = l->rp[v]; k < l->rp[v + 1]; k++) {
            const float *xr = x + (int64_t)l->ci[k] * ncol;
            float w = l->val[k];
            for (int c = 0; c < ncol; c++) yr[c] += w * xr[c];
        }
    }
}

void df_lap_solve(const df_lap_t *l, int ncol, double *b, double *z)
{
    int64_t n = l->nv;
    for (int64_t k = 0; k < n; k++)
        memcpy(z + k * ncol, b + (int64_t)l->perm[k] * ncol, sizeof(double) * ncol);
    for (int64_t j = 0; j < n; j++) { /* L y = Pb */
        double *zj = z + j * ncol, d = 1.0 / l->Lx[l->Lp[j]];
        for (int c = 0; c < ncol; c++) zj[c] *= d;
        for (int32_t p = l->Lp[j] + 1; p < l->Lp[j + 1]; p++) {
            double *zi = z + (int64_t)l->Li[p] * ncol, x = l->Lx[p];
            for (int c = 0; c < ncol; c++) zi[c] -= x * zj[c];
        }
    }
    for (int64_t j = n - 1; j >= 0; j--) { /* L^T w = y */
        double *zj = z + j * ncol;
        for (int32_t p = l->Lp[j] + 1; p < l->Lp[j + 1]; p++) {
            const double *zi = z + (int64_t)l->Li[p] * ncol;
            double x = l->Lx[p];
            for (int c = 0; c < ncol; c++) zj[c] -= x * zi[c];
        }
        double d = 1.0 / l->Lx[l->Lp[j]];
        for (int c = 0; c < ncol; c++) zj[c] *= d;
    }
    for (int64_t k = 0; k < n; k++)
        memcpy(b + (int64_t)l->perm[k] * ncol, z + k * ncol, sizeof(double) * ncol);
}

void df_lap_reconstruct(const df_lap_t *l, int ncol, const float *delta,
                        const float *anchor_pos, float *out, double *work)
{
    int64_t n = l->nv;
    double *b = work, *z = work + n * ncol;
    /* b = L_s^T delta (L_s symmetric) */
    for (int64_t v = 0; v < n; v++) {
        double *br = b + v * ncol;
        for (int c = 0; c < ncol; c++) br[c] = 0;
        for (int32_t k = l->rp[v]; k < l->rp[v + 1]; k++) {
            const float *dr = delta + (int64_t)l->ci[k] * ncol;
            double w = l->val[k];
            for (int c = 0; c < ncol; c++) br[c] += w * dr[c];
        }
    }
    double w2 = l->omega * l->omega;
    for (int64_t a = 0; a < l->n_anchors; a++) {
        double *br = b + (int64_t)l->anchors[a] * ncol;
        for (int c = 0; c < ncol; c++) br[c] += w2 * anchor_pos[a * ncol + c];
    }
    df_lap_solve(l, ncol, b, z);
    for (int64_t i = 0; i < n * ncol; i++) out[i] = (float)b[i];
}

int df_lap_fold(const df_lap_t *l, int m, const float *U, float *G, float *H,
                df_error_t *err)
{
    int64_t n = l->nv, na = l->n_anchors;
    int64_t cols = m > na ? m : na;
    double *b = malloc(sizeof(double) * n * (cols ? cols : 1));
    double *z = malloc(sizeof(double) * n * (cols ? cols : 1));
    if (!b || !z) {
        free(b), free(z);
        return df_error_set(err, DF_ENOMEM, "laplacian fold: out of memory for %lld x %lld doubles",
                            (long long)n, (long long)cols);
    }
    if (m > 0 && U && G) {
        for (int64_t v = 0; v < n; v++) {
            double *br = b + v * m;
            for (int c = 0; c < m; c++) br[c] = 0;
            for (int32_t k = l->rp[v]; k < l->rp[v + 1]; k++) {
                const float *ur = U + (int64_t)l->ci[k] * m;
                double w = l->val[k];
                for (int c = 0; c < m; c++) br[c] += w * ur[c];
            }
        }
        df_lap_solve(l, m, b, z);
        for (int64_t i = 0; i < n * m; i++) G[i] = (float)b[i];
    }
    if (H) {
        memset(b, 0, sizeof(double) * n * na);
        double w2 = l->omega * l->omega;
        for (int64_t a = 0; a < na; a++) b[(int64_t)l->anchors[a] * na + a] = w2;
        df_lap_solve(l, (int)na, b, z);
        for (int64_t i = 0; i < n * na; i++) H[i] = (float)b[i];
    }
    free(b), free(z);
    return DF_OK;
}

static int cmp_pos(const void *a, const void *b, void *ctx)
{
    const float *pos = ctx;
    const float *p = pos + 3 * (int64_t)*(const int32_t *)a, *q = pos + 3 * (int64_t)*(const int32_t *)b;
    for (int d = 0; d < 3; d++)
        if (p[d] != q[d]) return p[d] < q[d] ? -1 : 1;
    return cmp_i32(a, b);
}

int df_lap_weld(int64_t nv, const float *rest, int64_t nt, const uint32_t *tris,
                float eps, uint32_t **out, int64_t *out_nt, df_error_t *err)
{
    /* sort by x then y then z; coincident copies are neighbours in this
     * order when eps is tiny (exact seams), which is what importers make */
    int32_t *ord = malloc(sizeof(int32_t) * (nv ? nv : 1));
    uint32_t *t = malloc(sizeof(uint32_t) * 3 * (nt + nv));
    if (!ord || !t) {
        free(ord), free(t);
        return df_error_set(err, DF_ENOMEM, "weld: out of memory");
    }
    for (int64_t v = 0; v < nv; v++) ord[v] = (int32_t)v;
    qsort_r(ord, nv, sizeof *ord, cmp_pos, (void *)rest);
    memcpy(t, tris, sizeof(uint32_t) * 3 * nt);
    int64_t n = nt;
    int64_t rep = 0;
    for (int64_t i = 1; i < nv; i++) {
        const float *p = rest + 3 * (int64_t)ord[rep], *q = rest + 3 * (int64_t)ord[i];
        if (fabsf(p[0] - q[0]) <= eps && fabsf(p[1] - q[1]) <= eps && fabsf(p[2] - q[2]) <= eps) {
            t[n * 3] = (uint32_t)ord[rep], t[n * 3 + 1] = (uint32_t)ord[i], t[n * 3 + 2] = (uint32_t)ord[i];
            n++;
        } else {
            rep = i;
        }
    }
    free(ord);
    *out = t;
    *out_nt = n;
    return DF_OK;
}

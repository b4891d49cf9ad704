/* test_garment.c — the `garment` kind (core/garment) on synthetic models
 * written tensor by tensor, against a reference written here in double
 * precision and independently of core: its own quaternion matrices, FK with
 * shape directions, 3x4 inverses by cofactors, dense per-vertex LBS (no
 * blocked layout), full sorts for the `top` nearest examples, and the
 * penetration rule. It states the method (docs/garment.md):
 *   f = sum_p v_p(y) LBS[S(q,0) S(q_p,0)^-1] ex_p
 *     + sum_s w_s(y) (LBS[S(q,b) S(q_s,b)^-1](base_s + U_s W_s feat(b))
 *                    - LBS[S(q,0) S(q_s,0)^-1] base_s)
 * with v, w the region blend of 1/(D+1e-6)^power over the `top` nearest
 * pose examples / anchors under D_gr = sum_m Q_gm |rv_m - rv_m(e)|, D damped
 * by the state; then, twice, each vertex walks from its nearest candidate
 * body vertex (the second time: from where the first walk ended) to the
 * local nearest one (body neighbours = shared triangles)
 * and, closer than min(clearance, margin) along that vertex's area-weighted
 * normal, is pushed out to it.
 *
 * Also: batch vs single calls (1e-6), the state output, the damping, the
 * no-shape-model and no-resolution parameters, bad inputs and bad files
 * (the message names the tensor), clips forwarded to the body.
 * Tolerance: 2e-5 (float evaluation of coordinates of magnitude ~2).
 */
#include "dftest.h"
#include "df.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

extern const df_kind_t df_kind_garment;

static unsigned rs = 99u;
static double urand(void)
{
    rs = rs * 1664525u + 1013904223u;
    return (rs >> 8) / 16777216.0;
}
static double srand1(void) { return 2.0 * urand() - 1.0; }

enum { NB = 40, TB = 30, J = 5, S = 2, KB = 2, G = 36, TG = 24, KG = 3, R = 3, C = 2, P = 5, A = 3,
       KC = 2, F = 2 * S };

typedef struct {
    float pos[NB * 3], nrm[NB * 3], sd[S * NB * 3], snd[S * NB * 3];
    int32_t tri[TB * 3];
    int32_t par[J];
    float rt[J * 3], rq[J * 4], rsc[J * 3], ibm[J * 16], jsd[S * J * 3];
    int32_t sj[NB * KB];
    float sw[NB * KB];
    float gpos[G * 3];
    int32_t gtri[TG * 3], gsj[G * KG];
    float gsw[G * KG], reg[G * R], Q[R * J * 3];
    int32_t cand[G * C];
    float clear[G];
    float prot[P * J * 4], pex[P * G * 3];
    float arot[A * J * 4], abase[A * G * 3], abasis[A * KC * G * 3], amap[A * KC * F];
    float clip_t[3], clip_r[3 * J * 4];
} src_t;

static void small_quat(float *q, double amp)
{
    double v[3] = {amp * srand1(), amp * srand1(), amp * srand1()};
    double a = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    double s = a > 1e-12 ? sin(a / 2) / a : 0.5;
    q[0] = (float)(v[0] * s), q[1] = (float)(v[1] * s), q[2] = (float)(v[2] * s);
    q[3] = (float)cos(a / 2);
}

static void make(src_t *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < NB * 3; i++) s->pos[i] = (float)srand1();
    for (int v = 0; v < NB; v++) {
        double n[3] = {srand1(), srand1(), srand1()}, l = sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
        for (int k = 0; k < 3; k++) s->nrm[3 * v + k] = (float)(n[k] / l);
    }
    for (int i = 0; i < S * NB * 3; i++) s->sd[i] = (float)(0.1 * srand1()), s->snd[i] = 0;
    for (int i = 0; i < TB * 3; i++) s->tri[i] = (int32_t)(urand() * NB);
    for (int j = 0; j < J; j++) {
        s->par[j] = j - 1; /* a chain */
        for (int k = 0; k < 3; k++) s->rt[3 * j + k] = (float)(0.4 * srand1()), s->rsc[3 * j + k] = 1;
        s->rq[4 * j + 3] = 1;
    }
    /* ibm = T(-h): h = rest joint positions (chain sums) */
    double h[3] = {0, 0, 0};
    for (int j = 0; j < J; j++) {
        for (int k = 0; k < 3; k++) h[k] += s->rt[3 * j + k];
        float *m = s->ibm + 16 * j;
        m[0] = m[5] = m[10] = m[15] = 1;
        m[3] = (float)-h[0], m[7] = (float)-h[1], m[11] = (float)-h[2];
    }
    for (int i = 0; i < S * J * 3; i++) s->jsd[i] = (float)(0.05 * srand1());
    for (int v = 0; v < NB; v++) {
        double a = urand() + 0.1, b = urand() + 0.1;
        s->sj[2 * v] = (int32_t)(urand() * J), s->sj[2 * v + 1] = (int32_t)(urand() * J);
        s->sw[2 * v] = (float)(a / (a + b)), s->sw[2 * v + 1] = (float)(b / (a + b));
    }
    for (int i = 0; i < G * 3; i++) s->gpos[i] = (float)srand1();
    for (int i = 0; i < TG * 3; i++) s->gtri[i] = (int32_t)(urand() * G);
    for (int v = 0; v < G; v++) {
        double w[KG], sum = 0, rr[R], rsum = 0;
        for (int k = 0; k < KG; k++) w[k] = urand() + 0.05, sum += w[k];
        for (int k = 0; k < KG; k++) {
            s->gsj[KG * v + k] = (int32_t)(urand() * J);
            s->gsw[KG * v + k] = (float)(w[k] / sum);
        }
        for (int r = 0; r < R; r++) rr[r] = urand() < 0.4 ? 0 : urand(), rsum += rr[r];
        if (rsum == 0) rr[v % R] = rsum = 1;
        for (int r = 0; r < R; r++) s->reg[R * v + r] = (float)(rr[r] / rsum);
        for (int c = 0; c < C; c++) s->cand[C * v + c] = (int32_t)(urand() * NB);
        s->clear[v] = (float)(0.012 * urand() - 0.002);
    }
    for (int i = 0; i < R * J * 3; i++) s->Q[i] = (float)(urand() < 0.2 ? 0 : urand());
    for (int e = 0; e < P * J; e++) small_quat(s->prot + 4 * e, 0.8);
    for (int i = 0; i < P * G * 3; i++) s->pex[i] = (float)srand1();
    for (int e = 0; e < A * J; e++) small_quat(s->arot + 4 * e, 0.8);
    for (int i = 0; i < A * G * 3; i++) s->abase[i] = (float)srand1();
    for (int i = 0; i < A * KC * G * 3; i++) s->abasis[i] = (float)(0.05 * srand1());
    for (int i = 0; i < A * KC * F; i++) s->amap[i] = (float)srand1();
    for (int f = 0; f < 3; f++) {
        s->clip_t[f] = 0.5f * f;
        for (int j = 0; j < J; j++) small_quat(s->clip_r + (f * J + j) * 4, 0.5);
    }
}

/* variant: 0 valid; others break one thing (see test_bad_files) */
static int write_src(const src_t *s, const char *path, int variant)
{
    df_st_writer_t *w = df_st_writer_new();
    df_st_writer_meta(w, "kind", "garment");
    df_st_writer_meta(w, "garment_features", variant == 7 ? "cubic" : "quadratic");
    df_st_writer_meta(w, "garment_top", "2");
    df_st_writer_meta(w, "garment_power", "3");
    df_st_writer_meta(w, "garment_damping", variant == 8 ? "1.5" : "0.4");
    df_st_writer_meta(w, "garment_margin", "0.005");
    df_st_writer_meta(w, "clips", "[\"wave\"]");
#define ADD(name, dt, nd, ...) df_st_writer_add(w, name, dt, nd, (int64_t[]){__VA_ARGS__}, 
    ADD("positions", DF_DT_F32, 2, NB, 3) s->pos);
    ADD("normals", DF_DT_F32, 2, NB, 3) s->nrm);
    ADD("triangles", DF_DT_I32, 2, TB, 3) s->tri);
    ADD("shape_deltas", DF_DT_F32, 3, S, NB, 3) s->sd);
    ADD("joint_parents", DF_DT_I32, 1, J) s->par);
    ADD("joint_rest_translations", DF_DT_F32, 2, J, 3) s->rt);
    ADD("joint_rest_rotations", DF_DT_F32, 2, J, 4) s->rq);
    ADD("joint_rest_scales", DF_DT_F32, 2, J, 3) s->rsc);
    ADD("inverse_bind_matrices", DF_DT_F32, 3, J, 4, 4) s->ibm);
    ADD("joint_rest_translation_shapedirs", DF_DT_F32, 3, S, J, 3) s->jsd);
    ADD("skin_joints", DF_DT_I32, 2, NB, KB) s->sj);
    ADD("skin_weights", DF_DT_F32, 2, NB, KB) s->sw);
    ADD("clip/0/times", DF_DT_F32, 1, 3) s->clip_t);
    ADD("clip/0/rotations", DF_DT_F32, 3, 3, J, 4) s->clip_r);
    if (variant != 1) ADD("garment/positions", DF_DT_F32, 2, G, 3) s->gpos);
    ADD("garment/triangles", DF_DT_I32, 2, TG, 3) s->gtri);
    ADD("garment/skin_joints", DF_DT_I32, 2, G, KG) s->gsj);
    ADD("garment/skin_weights", DF_DT_F32, 2, G, KG) s->gsw);
    float reg[G * R];
    memcpy(reg, s->reg, sizeof reg);
    if (variant == 2) reg[R * 7] += 0.5f; /* vertex 7's regions sum to 1.5 */
    ADD("garment/regions", DF_DT_F32, 2, G, R) reg);
    ADD("garment/dof_weights", DF_DT_F32, 2, R, J * 3) s->Q);
    int32_t cand[G * C];
    memcpy(cand, s->cand, sizeof cand);
    if (variant == 3) cand[C * 4 + 1] = NB; /* out of range */
    ADD("garment/body_vertices", DF_DT_I32, 2, G, C) cand);
    ADD("garment/clearance", DF_DT_F32, 1, G) s->clear);
    ADD("garment/pose_rotations", DF_DT_F32, 3, P, J, 4) s->prot);
    ADD("garment/pose_examples", DF_DT_F32, 3, variant == 4 ? P - 1 : P, G, 3) s->pex);
    ADD("garment/anchor_rotations", DF_DT_F32, 3, A, J, 4) s->arot);
    ADD("garment/anchor_base", DF_DT_F32, 3, A, G, 3) s->abase);
    ADD("garment/anchor_basis", DF_DT_F32, 4, A, KC, G, 3) s->abasis);
    ADD("garment/anchor_map", DF_DT_F32, 3, A, KC, variant == 5 ? S : F) s->amap);
#undef ADD
    df_error_t err = {0};
    int rc = df_st_writer_save(w, path, &err);
    df_st_writer_free(&w);
    return rc;
}

static const char *tmp_path(const char *name)
{
    static char buf[1200];
    snprintf(buf, sizeof buf, "%s/garment_%s.safetensors", dftest_out_dir(), name);
    return buf;
}

/* ------------------------------------------------------------- reference */

static void qmat(const float *qf, double R_[9])
{
    double n = sqrt((double)qf[0] * qf[0] + (double)qf[1] * qf[1] + (double)qf[2] * qf[2] + (double)qf[3] * qf[3]);
    double x = qf[0] / n, y = qf[1] / n, z = qf[2] / n, w = qf[3] / n;
    double M[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                   2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                   2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)};
    memcpy(R_, M, sizeof M);
}

/* skin maps [J][12] (rest -> posed) of rotations q and shape b: identity
 * rest rotations, so S_j x = Rw_j (x - h_j(b)) + a_j(q, b) */
static void skins(const src_t *s, const float *q, const double *b, double out[J][12])
{
    double Rw[J][9], a[J][3], h[J][3];
    for (int j = 0; j < J; j++) {
        double Rl[9], t[3];
        qmat(q + 4 * j, Rl);
        for (int k = 0; k < 3; k++) {
            t[k] = s->rt[3 * j + k];
            for (int i = 0; i < S; i++) t[k] += b[i] * s->jsd[(i * J + j) * 3 + k];
        }
        int p = s->par[j];
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 3; c++) {
                double v = 0;
                if (p < 0) v = Rl[3 * r + c];
                else
                    for (int k = 0; k < 3; k++) v += Rw[p][3 * r + k] * Rl[3 * k + c];
                Rw[j][3 * r + c] = v;
            }
        for (int r = 0; r < 3; r++) {
            a[j][r] = p < 0 ? t[r] : a[p][r];
            h[j][r] = (p < 0 ? 0 : h[p][r]) + t[r];
            if (p >= 0)
                for (int k = 0; k < 3; k++) a[j][r] += Rw[p][3 * r + k] * t[k];
        }
        for (int r = 0; r < 3; r++) {
            double tt = a[j][r];
            for (int c = 0; c < 3; c++) {
                out[j][4 * r + c] = Rw[j][3 * r + c];
                tt -= Rw[j][3 * r + c] * h[j][c];
            }
            out[j][4 * r + 3] = tt;
        }
    }
}

static void inv34(const double *m, double *o)
{
    double a = m[0], b = m[1], c = m[2], d = m[4], e = m[5], f = m[6], g = m[8], h = m[9], i = m[10];
    double det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
    double inv[9] = {(e * i - f * h) / det, (c * h - b * i) / det, (b * f - c * e) / det,
                     (f * g - d * i) / det, (a * i - c * g) / det, (c * d - a * f) / det,
                     (d * h - e * g) / det, (b * g - a * h) / det, (a * e - b * d) / det};
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++) o[4 * r + k] = inv[3 * r + k];
        o[4 * r + 3] = -(inv[3 * r] * m[3] + inv[3 * r + 1] * m[7] + inv[3 * r + 2] * m[11]);
    }
}

static void mul34(const double *a, const double *b, double *o)
{
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) {
            double v = c == 3 ? a[4 * r + 3] : 0;
            for (int k = 0; k < 3; k++) v += a[4 * r + k] * b[4 * k + c];
            o[4 * r + c] = v;
        }
}

/* dense LBS of points X with the garment binding and maps M (rel) */
static void lbs(const src_t *s, double M[J][12], const double *X, double *out)
{
    for (int v = 0; v < G; v++) {
        double o[3] = {0, 0, 0};
        for (int k = 0; k < KG; k++) {
            const double *m = M[s->gsj[KG * v + k]];
            double w = s->gsw[KG * v + k];
            for (int r = 0; r < 3; r++)
                o[r] += w * (m[4 * r] * X[3 * v] + m[4 * r + 1] * X[3 * v + 1] + m[4 * r + 2] * X[3 * v + 2] + m[4 * r + 3]);
        }
        memcpy(out + 3 * v, o, sizeof o);
    }
}

static void rel(double Sq[J][12], double Se[J][12], double out[J][12])
{
    for (int j = 0; j < J; j++) {
        double inv[12];
        inv34(Se[j], inv);
        mul34(Sq[j], inv, out[j]);
    }
}

static void rotvec(const float *q, double *rv)
{
    double x = q[0], y = q[1], z = q[2], w = q[3], n = sqrt(x * x + y * y + z * z + w * w);
    if (w < 0) n = -n;
    x /= n, y /= n, z /= n, w /= n;
    double sn = sqrt(x * x + y * y + z * z), ang = 2 * atan2(sn, w);
    double k = sn > 1e-12 ? ang / sn : 2;
    rv[0] = x * k, rv[1] = y * k, rv[2] = z * k;
}

/* per-vertex weights [G][n] of examples with rotations rot[n] */
static void weights(const src_t *s, double D[R][P + A], int off, int n, double *vw)
{
    memset(vw, 0, sizeof(double) * G * n);
    for (int r = 0; r < R; r++) {
        int idx[P + A];
        for (int e = 0; e < n; e++) idx[e] = e;
        for (int i = 0; i < n; i++) /* full selection sort by distance */
            for (int k = i + 1; k < n; k++)
                if (D[r][off + idx[k]] < D[r][off + idx[i]]) {
                    int t = idx[i];
                    idx[i] = idx[k];
                    idx[k] = t;
                }
        int top = n < 2 ? n : 2;
        double W[P + A] = {0}, sum = 0;
        for (int i = 0; i < top; i++) W[idx[i]] = pow(D[r][off + idx[i]] + 1e-6, -3.0), sum += W[idx[i]];
        for (int v = 0; v < G; v++)
            for (int e = 0; e < n; e++) vw[v * n + e] += s->reg[R * v + r] * W[e] / sum;
    }
}

static void reference(const src_t *s, const float *beta, const float *q, const float *state, int shape_model,
                      int resolve, double *out, double *Dout)
{
    double b[S], b0[S] = {0};
    int shaped = 0;
    for (int i = 0; i < S; i++) b[i] = beta ? beta[i] : 0, shaped |= b[i] != 0;
    double rv[J * 3], D[R][P + A];
    for (int j = 0; j < J; j++) rotvec(q + 4 * j, rv + 3 * j);
    for (int e = 0; e < P + A; e++) {
        double rve[J * 3];
        for (int j = 0; j < J; j++) rotvec((e < P ? s->prot + e * J * 4 : s->arot + (e - P) * J * 4) + 4 * j, rve + 3 * j);
        for (int r = 0; r < R; r++) {
            double d = 0;
            for (int m = 0; m < 3 * J; m++) d += s->Q[r * 3 * J + m] * fabs(rv[m] - rve[m]);
            if (state && state[0] >= 0) d = 0.4 * state[r * (P + A) + e] + 0.6 * d;
            D[r][e] = d;
            if (Dout) Dout[r * (P + A) + e] = d;
        }
    }
    double S0[J][12], Sb[J][12], Se[J][12], M[J][12], t[G * 3], t0[G * 3], X[G * 3];
    skins(s, q, b0, S0);
    skins(s, q, b, Sb);
    double vw[G * (P + A)];
    memset(out, 0, sizeof(double) * G * 3);
    weights(s, D, 0, P, vw);
    for (int p = 0; p < P; p++) {
        skins(s, s->prot + p * J * 4, b0, Se);
        rel(S0, Se, M);
        for (int i = 0; i < G * 3; i++) X[i] = s->pex[p * G * 3 + i];
        lbs(s, M, X, t);
        for (int v = 0; v < G; v++)
            for (int k = 0; k < 3; k++) out[3 * v + k] += vw[v * P + p] * t[3 * v + k];
    }
    if (shaped && shape_model) {
        weights(s, D, P, A, vw);
        double feat[F];
        for (int i = 0; i < S; i++) feat[i] = b[i], feat[S + i] = b[i] * b[i];
        for (int a = 0; a < A; a++) {
            double coef[KC] = {0};
            for (int c = 0; c < KC; c++)
                for (int f = 0; f < F; f++) coef[c] += s->amap[(a * KC + c) * F + f] * feat[f];
            double base[G * 3];
            for (int i = 0; i < G * 3; i++) {
                base[i] = s->abase[a * G * 3 + i];
                X[i] = base[i];
                for (int c = 0; c < KC; c++) X[i] += coef[c] * s->abasis[(a * KC + c) * G * 3 + i];
            }
            skins(s, s->arot + a * J * 4, b, Se);
            rel(Sb, Se, M);
            lbs(s, M, X, t);
            skins(s, s->arot + a * J * 4, b0, Se);
            rel(S0, Se, M);
            lbs(s, M, base, t0);
            for (int v = 0; v < G; v++)
                for (int k = 0; k < 3; k++) out[3 * v + k] += vw[v * A + a] * (t[3 * v + k] - t0[3 * v + k]);
        }
    }
    if (!resolve) return;
    /* posed body: LBS of rest + shape deltas; normals area-weighted from the
     * posed triangles */
    double Pb[NB * 3], Nn[NB * 3] = {0};
    for (int v = 0; v < NB; v++) {
        double x[3], o[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            x[k] = s->pos[3 * v + k];
            for (int i = 0; i < S; i++) x[k] += b[i] * s->sd[(i * NB + v) * 3 + k];
        }
        for (int k = 0; k < KB; k++) {
            const double *m = Sb[s->sj[KB * v + k]];
            double w = s->sw[KB * v + k];
            for (int r = 0; r < 3; r++)
                o[r] += w * (m[4 * r] * x[0] + m[4 * r + 1] * x[1] + m[4 * r + 2] * x[2] + m[4 * r + 3]);
        }
        for (int r = 0; r < 3; r++) Pb[3 * v + r] = o[r];
    }
    for (int t = 0; t < TB; t++) {
        const double *a = Pb + 3 * s->tri[3 * t], *bb = Pb + 3 * s->tri[3 * t + 1], *c = Pb + 3 * s->tri[3 * t + 2];
        double e1[3] = {bb[0] - a[0], bb[1] - a[1], bb[2] - a[2]}, e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
        double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0]};
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++) Nn[3 * s->tri[3 * t + k] + d] += n[d];
    }
    for (int v = 0; v < NB; v++) {
        double l = sqrt(Nn[3 * v] * Nn[3 * v] + Nn[3 * v + 1] * Nn[3 * v + 1] + Nn[3 * v + 2] * Nn[3 * v + 2]);
        for (int k = 0; k < 3 && l > 1e-20; k++) Nn[3 * v + k] /= l;
    }
    /* neighbours: vertices sharing a triangle */
    static char adj[NB][NB];
    memset(adj, 0, sizeof adj);
    for (int t = 0; t < TB; t++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++)
                if (s->tri[3 * t + a] != s->tri[3 * t + c]) adj[s->tri[3 * t + a]][s->tri[3 * t + c]] = 1;
    int ended[G];
    for (int pass = 0; pass < 2; pass++)
        for (int v = 0; v < G; v++) {
            double *y = out + 3 * v, bd = 1e300;
            int best = 0;
            for (int c = 0; c < (pass == 0 ? C : 1); c++) { /* pass 2: from where pass 1 ended */
                int i = pass == 0 ? s->cand[C * v + c] : ended[v];
                double d2 = 0;
                for (int k = 0; k < 3; k++) d2 += (y[k] - Pb[3 * i + k]) * (y[k] - Pb[3 * i + k]);
                if (d2 < bd) bd = d2, best = i;
            }
            for (int moved = 1; moved;) { /* to the nearest neighbour while nearer */
                moved = 0;
                int next = best;
                for (int i = 0; i < NB; i++) {
                    if (!adj[best][i]) continue;
                    double d2 = 0;
                    for (int k = 0; k < 3; k++) d2 += (y[k] - Pb[3 * i + k]) * (y[k] - Pb[3 * i + k]);
                    if (d2 < bd) bd = d2, next = i;
                }
                if (next != best) best = next, moved = 1;
            }
            ended[v] = best;
            double d = 0;
            for (int k = 0; k < 3; k++) d += (y[k] - Pb[3 * best + k]) * Nn[3 * best + k];
            double h = fmax(0.0, fmin((double)s->clear[v], 0.005));
            if (d < h)
                for (int k = 0; k < 3; k++) y[k] += (h - d) * Nn[3 * best + k];
        }
}

/* ------------------------------------------------------------- helpers */

static df_model_t *open_model(const src_t *s, const char *params)
{
    const char *p = tmp_path("model");
    DF_CHECK(write_src(s, p, 0) == 0);
    df_model_t *m = NULL;
    df_error_t err = {0};
    int rc = df_model_open(p, "garment", params, NULL, &m, &err);
    DF_CHECK_MSG(rc == 0, "open: %s", err.msg);
    return m;
}

static double max_err(const float *a, const double *b, int n)
{
    double e = 0;
    for (int i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= e)) e = x;
    }
    return e;
}

/* ------------------------------------------------------------- tests */

#define NPOSE 5
static void test_vs_reference(void)
{
    DF_CHECK(df_kind_find("garment") == &df_kind_garment);
    static src_t s;
    make(&s);
    df_model_t *m = open_model(&s, NULL);
    if (!m) return;
    int is = df_model_find_input(m, "shape"), ir = df_model_find_input(m, "joint_rotations"),
        ist = df_model_find_input(m, "state");
    int op = df_model_find_output(m, "positions"), ost = df_model_find_output(m, "state"),
        obp = df_model_find_output(m, "body_positions");
    DF_CHECK(is == 0 && ir == 1 && ist == 2 && op == 0 && ost == 4 && obp == 2);
    DF_CHECK(df_model_n_vertices(m) == G && df_model_input(m, ist)->shape[0] == R * (P + A));
    DF_CHECK(df_model_input_default(m, ist)[0] < 0);
    /* poses: 0 rest/no shape; 1 shape + pose; 2 = an anchor's pose exactly
     * with a shape; 3 shape + pose + a state; 4 pose only */
    float beta[NPOSE][S], rot[NPOSE][J * 4], st[R * (P + A)];
    for (int p = 0; p < NPOSE; p++) {
        for (int i = 0; i < S; i++) beta[p][i] = (float)(1.5 * srand1());
        for (int j = 0; j < J; j++) small_quat(rot[p] + 4 * j, 0.7);
    }
    memcpy(rot[2], s.arot + J * 4, sizeof rot[2]);
    for (int i = 0; i < R * (P + A); i++) st[i] = (float)(2 * urand());
    const float *pb[NPOSE] = {NULL, beta[1], beta[2], beta[3], NULL};
    const float *pr[NPOSE] = {NULL, rot[1], rot[2], rot[3], rot[4]};
    const float *ps[NPOSE] = {NULL, NULL, NULL, st, NULL};
    static float pos[NPOSE][G * 3], sto[NPOSE][R * (P + A)], bpos[NPOSE][NB * 3];
    float *o0[NPOSE], *o1[NPOSE], *o2[NPOSE];
    for (int p = 0; p < NPOSE; p++) o0[p] = pos[p], o1[p] = sto[p], o2[p] = bpos[p];
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = NPOSE;
    b.in[is] = pb, b.in[ir] = pr, b.in[ist] = ps;
    b.out[op] = o0, b.out[ost] = o1, b.out[obp] = o2;
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    int rc = df_model_evaluate(m, &b, sc, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    static const float ident[J * 4] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
    double ref[G * 3], Dref[R * (P + A)];
    for (int p = 0; p < NPOSE && !rc; p++) {
        reference(&s, pb[p], pr[p] ? pr[p] : ident, ps[p], 1, 1, ref, Dref);
        double e = max_err(pos[p], ref, G * 3), es = max_err(sto[p], Dref, R * (P + A));
        DF_CHECK_MSG(e < 2e-5, "pose %d: positions off by %g", p, e);
        DF_CHECK_MSG(es < 1e-5, "pose %d: state off by %g", p, es);
        /* the same pose alone */
        float one[G * 3];
        float *oo[1] = {one};
        const float *a0[1] = {pb[p]}, *a1[1] = {pr[p]}, *a2[1] = {ps[p]};
        df_batch_t b1;
        memset(&b1, 0, sizeof b1);
        b1.n = 1;
        b1.in[is] = a0, b1.in[ir] = a1, b1.in[ist] = a2;
        b1.out[op] = oo;
        DF_CHECK(df_model_evaluate(m, &b1, sc, &err) == 0);
        /* the body's batch runs sgemm where a single pose runs sgemv (non-AVX-512
         * builds): float rounding, not bits */
        double d1 = 0;
        for (int i = 0; i < G * 3; i++) d1 = fmax(d1, fabs(one[i] - pos[p][i]));
        DF_CHECK_MSG(d1 < 1e-6, "pose %d: alone vs batch %g", p, d1);
    }
    /* the checks above can fail: the shape term, the damping and the
     * resolution each change the answer */
    reference(&s, pb[1], pr[1], NULL, 0, 1, ref, NULL);
    DF_CHECK(max_err(pos[1], ref, G * 3) > 1e-3);
    reference(&s, pb[3], pr[3], NULL, 1, 1, ref, NULL);
    DF_CHECK(max_err(pos[3], ref, G * 3) > 1e-3);
    reference(&s, pb[1], pr[1], NULL, 1, 0, ref, NULL);
    DF_CHECK(max_err(pos[1], ref, G * 3) > 1e-4);
    df_scratch_free(&sc);
    df_model_unref(&m);
}

static void test_params(void)
{
    static src_t s;
    make(&s);
    float beta[S] = {1.2f, -0.8f}, rot[J * 4];
    for (int j = 0; j < J; j++) small_quat(rot + 4 * j, 0.6);
    const char *params[3] = {"{\"shape_model\": false}", "{\"resolve_penetration\": false}",
                             "{\"damping\": 0.9}"};
    for (int k = 0; k < 2; k++) {
        df_model_t *m = open_model(&s, params[k]);
        if (!m) return;
        float pos[G * 3];
        float *o[1] = {pos};
        const float *a0[1] = {beta}, *a1[1] = {rot};
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.in[0] = a0, b.in[1] = a1;
        b.out[0] = o;
        df_scratch_t *sc = df_scratch_new();
        df_error_t err = {0};
        DF_CHECK(df_model_evaluate(m, &b, sc, &err) == 0);
        double ref[G * 3];
        reference(&s, beta, rot, NULL, k != 0, k != 1, ref, NULL);
        double e = max_err(pos, ref, G * 3);
        DF_CHECK_MSG(e < 2e-5, "%s: off by %g", params[k], e);
        df_scratch_free(&sc);
        df_model_unref(&m);
    }
    df_model_t *m = NULL;
    df_error_t err = {0};
    DF_CHECK(write_src(&s, tmp_path("model"), 0) == 0);
    DF_CHECK(df_model_open(tmp_path("model"), "garment", "{\"damping\": 1.5}", NULL, &m, &err) == DF_EINVAL);
    DF_CHECK_MSG(strstr(err.msg, "damping"), "%s", err.msg);
    DF_CHECK(df_model_open(tmp_path("model"), "garment", "{\"shape\": 1}", NULL, &m, &err) == DF_EINVAL);
    DF_CHECK(df_model_open(tmp_path("model"), "garment", params[2], NULL, &m, &err) == 0);
    df_model_unref(&m);
}

static void test_bad_inputs(void)
{
    static src_t s;
    make(&s);
    df_model_t *m = open_model(&s, NULL);
    if (!m) return;
    float beta[S] = {0.5f, NAN}, good[S] = {0.1f, 0.2f}, rot[J * 4] = {0}, st[R * (P + A)];
    for (int i = 0; i < R * (P + A); i++) st[i] = 1;
    st[5] = INFINITY;
    float pos[G * 3];
    float *o[1] = {pos};
    df_scratch_t *sc = df_scratch_new();
    df_error_t err = {0};
    struct { const float *b, *r, *s; const char *want; } cases[] = {
        {beta, NULL, NULL, "input 'shape' element 1"},
        {good, rot, NULL, "input 'joint_rotations' joint 0"},
        {good, NULL, st, "input 'state' element 5"},
    };
    for (int c = 0; c < 3; c++) {
        const float *a0[1] = {cases[c].b}, *a1[1] = {cases[c].r}, *a2[1] = {cases[c].s};
        df_batch_t b;
        memset(&b, 0, sizeof b);
        b.n = 1;
        b.in[0] = a0, b.in[1] = a1, b.in[2] = a2;
        b.out[0] = o;
        DF_CHECK(df_model_evaluate(m, &b, sc, &err) == DF_EINVAL);
        DF_CHECK_MSG(strstr(err.msg, cases[c].want), "case %d: %s", c, err.msg);
    }
    df_scratch_free(&sc);
    df_model_unref(&m);
}

static void test_bad_files(void)
{
    static src_t s;
    make(&s);
    static const char *const want[] = {NULL,
                                       "garment/positions",
                                       "'garment/regions': vertex 7",
                                       "'garment/body_vertices': vertex 4",
                                       "garment/pose_examples",
                                       "garment/anchor_map",
                                       NULL,
                                       "garment_features",
                                       "garment_damping"};
    for (int v = 1; v <= 8; v++) {
        if (!want[v]) continue;
        const char *p = tmp_path("bad");
        DF_CHECK(write_src(&s, p, v) == 0);
        df_model_t *m = NULL;
        df_error_t err = {0};
        int rc = df_model_open(p, "garment", NULL, NULL, &m, &err);
        DF_CHECK_MSG(rc != 0 && strstr(err.msg, want[v]), "variant %d: rc %d: %s", v, rc, err.msg);
        df_model_unref(&m);
    }
    /* a truncated file */
    const char *p = tmp_path("trunc");
    DF_CHECK(write_src(&s, p, 0) == 0);
    FILE *f = fopen(p, "r+b");
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        DF_CHECK(ftruncate(fileno(f), n - 100) == 0);
        fclose(f);
    }
    df_model_t *m = NULL;
    df_error_t err = {0};
    DF_CHECK(df_model_open(p, "garment", NULL, NULL, &m, &err) == DF_EFORMAT);
    /* a body that is not a valid rigged model names the body */
    static src_t s2;
    make(&s2);
    s2.sw[0] = 5.0f;
    DF_CHECK(write_src(&s2, p, 0) == 0);
    DF_CHECK(df_model_open(p, "garment", NULL, NULL, &m, &err) == DF_EFORMAT);
    DF_CHECK_MSG(strstr(err.msg, "body: ") && strstr(err.msg, "skin_weights"), "%s", err.msg);
}

static void test_clip(void)
{
    static src_t s;
    make(&s);
    df_model_t *m = open_model(&s, NULL);
    if (!m) return;
    DF_CHECK(df_model_clip_count(m) == 1 && df_model_clip_find(m, "wave") == 0);
    float rot[J * 4] = {0};
    float *bufs[DF_MAX_IO] = {0};
    bufs[1] = rot;
    uint32_t filled = 0;
    df_error_t err = {0};
    DF_CHECK(df_model_clip_sample(m, 0, 0.5, bufs, &filled, &err) == 0);
    DF_CHECK(filled == 2u); /* joint_rotations only */
    for (int i = 0; i < J * 4; i++) DF_CHECK_NEAR(rot[i], s.clip_r[J * 4 + i], 1e-6);
    df_model_unref(&m);
}

int main(void)
{
    DF_RUN(test_vs_reference);
    DF_RUN(test_params);
    DF_RUN(test_bad_inputs);
    DF_RUN(test_bad_files);
    DF_RUN(test_clip);
    return dftest_exit();
}

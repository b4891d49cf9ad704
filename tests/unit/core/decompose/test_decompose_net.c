/* test_decompose_net.c — the decomposition's initialisation network
 * (core/math/nn_conv.c, core/decompose/decompose_net.c) and `--init
 * network` in the fit.
 *
 * References are independent of the code under test:
 *  - the 1D convolution against a direct double loop, and its gradients
 *    (weights, bias, input; stride and padding, with and without ReLU)
 *    against central finite differences of a random linear functional;
 *  - the whole network's prototype-loss gradient (every parameter tensor,
 *    through the pooling and the prototypes) against finite differences;
 *  - a tiny synthetic set (tubes bent by 3-bone rigs, one bone per vertex):
 *    the trained network separates the bones far above the largest bone's
 *    share, the same seed trains the same weights, the weights file
 *    round-trips and bad files are refused by name;
 *  - a decomposition started from the network recovers a generated rig.
 */
#include "decompose/decompose.h"
#include "decompose/decompose_net.h"
#include "dftest.h"
#include "math/nn_conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 12345;
static double urand(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static double srand1(void) { return 2 * urand() - 1; }

/* ----------------------------------------------------------- conv1d */

static void conv_ref(const df_conv1d_t *c, int B, int T, const float *x, double *y, int relu)
{
    int To = (T + 2 * c->pad - c->k) / c->stride + 1;
    for (int s = 0; s < B; s++)
        for (int t = 0; t < To; t++)
            for (int o = 0; o < c->cout; o++) {
                double v = c->b[o];
                for (int kk = 0; kk < c->k; kk++) {
                    int ti = t * c->stride - c->pad + kk;
                    if (ti < 0 || ti >= T) continue;
                    for (int q = 0; q < c->cin; q++)
                        v += (double)c->w[(size_t)o * c->k * c->cin + kk * c->cin + q] *
                             x[((size_t)s * T + ti) * c->cin + q];
                }
                y[((size_t)s * To + t) * c->cout + o] = relu && v < 0 ? 0 : v;
            }
}

/* L = Σ r ⊙ conv(x) */
static double conv_loss(const df_conv1d_t *c, int B, int T, const float *x, const float *r,
                        int relu)
{
    int To = df_conv1d_out_len(c, T);
    double *y = malloc(sizeof(double) * B * To * c->cout), L = 0;
    conv_ref(c, B, T, x, y, relu);
    for (int q = 0; q < B * To * c->cout; q++) L += r[q] * y[q];
    free(y);
    return L;
}

static void test_conv1d_vs_loop_and_gradients(void)
{
    const int shapes[3][5] = {{3, 5, 5, 1, 2}, {4, 3, 3, 2, 1}, {2, 6, 4, 3, 0}}; /* cin cout k stride pad */
    for (int sh = 0; sh < 3; sh++)
        for (int relu = 0; relu < 2; relu++) {
            df_conv1d_t c;
            df_error_t err = {0};
            const int *S = shapes[sh], B = 3, T = 11;
            DF_CHECK(df_conv1d_new(&c, S[0], S[1], S[2], S[3], S[4], 7 + sh, &err) == DF_OK);
            for (int o = 0; o < c.cout; o++) c.b[o] = (float)(0.1 * srand1());
            int To = df_conv1d_out_len(&c, T);
            DF_CHECK(To == (T + 2 * S[4] - S[2]) / S[3] + 1);
            size_t nx = (size_t)B * T * c.cin, ny = (size_t)B * To * c.cout, nw = (size_t)c.cout * c.k * c.cin;
            float *x = malloc(nx * 4), *y = malloc(ny * 4), *col = malloc(df_conv1d_col_floats(&c, B, T) * 4);
            float *dcol = malloc(df_conv1d_col_floats(&c, B, T) * 4), *r = malloc(ny * 4), *dy = malloc(ny * 4);
            float *gw = calloc(nw, 4), *gb = calloc(c.cout, 4), *dx = malloc(nx * 4);
            double *yr = malloc(ny * 8);
            for (size_t q = 0; q < nx; q++) x[q] = (float)srand1();
            for (size_t q = 0; q < ny; q++) r[q] = (float)srand1();
            df_conv1d_forward(&c, B, T, x, col, y, relu);
            conv_ref(&c, B, T, x, yr, relu);
            double e = 0;
            for (size_t q = 0; q < ny; q++) e = fmax(e, fabs(y[q] - yr[q]));
            DF_CHECK_MSG(e < 1e-5, "shape %d relu %d: forward %g from the loop", sh, relu, e);
            memcpy(dy, r, ny * 4);
            df_conv1d_backward(&c, B, T, col, y, dy, relu, gw, gb, dx, dcol);
            /* finite differences (central, in double through the loop) */
            const double h = 1e-3;
            double worst = 0;
            for (int it = 0; it < 3; it++) {
                float *p = it == 0 ? c.w : it == 1 ? c.b : x;
                const float *g = it == 0 ? gw : it == 1 ? gb : dx;
                size_t n = it == 0 ? nw : it == 1 ? (size_t)c.cout : nx;
                for (size_t q = 0; q < n; q++) {
                    float keep = p[q];
                    p[q] = keep + (float)h;
                    double lp = conv_loss(&c, B, T, x, r, relu);
                    p[q] = keep - (float)h;
                    double lm = conv_loss(&c, B, T, x, r, relu);
                    p[q] = keep;
                    double fd = (lp - lm) / (2 * h);
                    worst = fmax(worst, fabs(fd - g[q]) / (1 + fabs(fd)));
                }
            }
            /* ReLU kinks within h of an input change the finite difference;
             * with random data none lies that close */
            DF_CHECK_MSG(worst < 2e-3, "shape %d relu %d: gradient %g off", sh, relu, worst);
            free(x); free(y); free(col); free(dcol); free(r); free(dy); free(gw); free(gb); free(dx); free(yr);
            df_conv1d_free(&c);
        }
}

/* ----------------------------------------------------- whole network */

static df_decompose_net_t *small_net(int frames, uint64_t seed)
{
    df_decompose_net_arch_t a;
    df_decompose_net_arch_default(&a);
    a.frames = frames;
    a.conv[0][0] = 8, a.conv[1][0] = 12, a.conv[2][0] = 10;
    a.dense[0] = 16, a.dense[1] = 6;
    df_decompose_net_t *n = NULL;
    df_error_t err = {0};
    DF_CHECK_MSG(df_decompose_net_new(&a, seed, &n, &err) == DF_OK, "%s", err.msg);
    return n;
}

static void test_network_gradient(void)
{
    df_decompose_net_t *n = small_net(12, 3);
    if (!n) return;
    const int nb = 14, T = 12;
    float *x = malloc(sizeof(float) * nb * T * DF_DCNET_CHANNELS);
    int32_t lab[14];
    for (int i = 0; i < nb * T * DF_DCNET_CHANNELS; i++) x[i] = (float)srand1();
    for (int i = 0; i < nb; i++) lab[i] = i % 4; /* 4 bones, >= 3 members each */
    int nt = df__dcnet_n_tensors(n);
    float **g = calloc(nt, sizeof(float *));
    for (int i = 0; i < nt; i++) {
        size_t len;
        df__dcnet_tensor(n, i, &len);
        g[i] = malloc(len * sizeof(float));
    }
    df_error_t err = {0};
    double L0;
    DF_CHECK(df__dcnet_batch_loss(n, nb, x, lab, g, &L0, &err) == DF_OK);
    DF_CHECK(L0 > 0.1); /* an untrained net does not separate the bones */
    int checked = 0, agree = 0;
    double gnorm = 0;
    for (int i = 0; i < nt; i++) {
        size_t len;
        float *p = df__dcnet_tensor(n, i, &len);
        for (int k = 0; k < 8; k++) {
            size_t q = (size_t)(urand() * len);
            float keep = p[q];
            const float h = 1e-4f;
            double lp, lm;
            p[q] = keep + h;
            df__dcnet_batch_loss(n, nb, x, lab, NULL, &lp, &err);
            p[q] = keep - h;
            df__dcnet_batch_loss(n, nb, x, lab, NULL, &lm, &err);
            p[q] = keep;
            double fd = (lp - lm) / (2.0 * h), an = g[i][q];
            gnorm = fmax(gnorm, fabs(an));
            checked++;
            agree += fabs(fd - an) <= 3e-3 + 0.05 * fmax(fabs(fd), fabs(an));
        }
    }
    fprintf(stderr, "network gradient: %d of %d entries agree with finite differences (largest "
                    "|gradient| %.3g)\n", agree, checked, gnorm);
    /* a ReLU or max-pool kink inside ±h spoils an entry (2e-3: 63 of 80 agree,
     * 5e-4: 70, 1e-4: 79 — kinks, not a wrong gradient); all but a few agree */
    DF_CHECK_MSG(agree >= checked - 2, "%d of %d", agree, checked);
    DF_CHECK(gnorm > 1e-3);
    for (int i = 0; i < nt; i++) free(g[i]);
    free(g);
    free(x);
    df_decompose_net_free(&n);
}

/* ----------------------------------------------------- synthetic set */

/* A tube along y bent by a 3-bone chain (joints at y = -1/3, 1/3), one
 * bone per vertex by y; rotations about an axis of the tube's own choosing
 * with its own frequencies. frames [F,N,3], labels [N]. */
typedef struct syn {
    int64_t F, N, T;
    float *frames;
    uint32_t *tris;
    int32_t *label;
} syn_t;

static void rot(const double ax[3], double a, double R[9])
{
    double x = ax[0], y = ax[1], z = ax[2], c = cos(a), s = sin(a), t = 1 - c;
    double M[9] = {t * x * x + c, t * x * y - s * z, t * x * z + s * y, t * x * y + s * z,
                   t * y * y + c, t * y * z - s * x, t * x * z - s * y, t * y * z + s * x,
                   t * z * z + c};
    memcpy(R, M, sizeof M);
}

static void make_syn(syn_t *s, int rings, int segs, int64_t F, double phase, double tilt)
{
    s->F = F;
    s->N = (int64_t)rings * segs;
    s->T = (int64_t)(rings - 1) * segs * 2;
    s->frames = malloc(sizeof(float) * F * s->N * 3);
    s->tris = malloc(sizeof(uint32_t) * s->T * 3);
    s->label = malloc(sizeof(int32_t) * s->N);
    double ax[3] = {cos(tilt), 0, sin(tilt)};
    for (int64_t p = 0; p < F; p++) {
        double a1 = 0.9 * sin(2 * M_PI * p / F + phase), a2 = 1.1 * sin(4 * M_PI * p / F + 2 * phase);
        double R1[9], R2[9];
        rot(ax, a1, R1);
        rot(ax, a1 + a2, R2);
        for (int r = 0; r < rings; r++)
            for (int q = 0; q < segs; q++) {
                int64_t i = (int64_t)r * segs + q;
                double th = 2 * M_PI * q / segs, y = -1 + 2.0 * r / (rings - 1);
                double v[3] = {0.2 * cos(th), y, 0.2 * sin(th)}, o[3];
                int b = y < -1.0 / 3 ? 0 : y < 1.0 / 3 ? 1 : 2;
                s->label[i] = b;
                if (b == 0) memcpy(o, v, sizeof o);
                else {
                    const double *R = b == 1 ? R1 : R2;
                    double j[3] = {0, b == 1 ? -1.0 / 3 : 1.0 / 3, 0}, u[3] = {v[0], v[1] - j[1], v[2]};
                    double base[3] = {0, -1.0 / 3, 0};
                    if (b == 2) { /* joint 2 moves with bone 1 */
                        double w[3] = {0, 2.0 / 3, 0};
                        for (int k = 0; k < 3; k++)
                            base[k] += R1[3 * k] * w[0] + R1[3 * k + 1] * w[1] + R1[3 * k + 2] * w[2];
                    }
                    for (int k = 0; k < 3; k++)
                        o[k] = base[k] + R[3 * k] * u[0] + R[3 * k + 1] * u[1] + R[3 * k + 2] * u[2];
                }
                for (int k = 0; k < 3; k++) s->frames[(p * s->N + i) * 3 + k] = (float)o[k];
            }
    }
    int64_t t = 0;
    for (int r = 0; r + 1 < rings; r++)
        for (int q = 0; q < segs; q++) {
            uint32_t a = r * segs + q, b = r * segs + (q + 1) % segs, c = a + segs, d = b + segs;
            uint32_t f[6] = {a, c, b, b, c, d};
            memcpy(s->tris + 6 * t++, f, sizeof f);
        }
}

static void free_syn(syn_t *s) { free(s->frames); free(s->tris); free(s->label); }

static void test_learns_tiny_set(void)
{
    syn_t sy[3];
    double *X[3], *R[3];
    df_decompose_net_seq_t seq[3];
    df_error_t err = {0};
    for (int k = 0; k < 3; k++) {
        make_syn(&sy[k], 24, 8, 20, 0.7 * k, 0.5 * k);
        X[k] = malloc(sizeof(double) * sy[k].N * 3 * sy[k].F);
        R[k] = malloc(sizeof(double) * sy[k].N * 3);
        DF_CHECK(df_decompose_net_normalise(sy[k].F, sy[k].N, sy[k].frames, NULL, X[k], R[k], &err) == DF_OK);
        seq[k] = (df_decompose_net_seq_t){sy[k].F, sy[k].N, X[k], R[k], sy[k].label, k};
    }
    df_decompose_net_train_opts_t o;
    df_decompose_net_train_opts_default(&o);
    o.steps = 1000;
    o.batch = 64;
    o.augment = 0; /* three tubes: no rotations to learn */
    o.report_every = 0;
    df_decompose_net_t *a = small_net(16, 5), *b = small_net(16, 5);
    if (a && b) {
        DF_CHECK_MSG(df_decompose_net_train(a, 3, seq, &o, &err) == DF_OK, "%s", err.msg);
        DF_CHECK(df_decompose_net_train(b, 3, seq, &o, &err) == DF_OK);
        /* the same seed trains the same weights */
        int same = 1;
        for (int i = 0; i < df__dcnet_n_tensors(a); i++) {
            size_t la, lb;
            float *pa = df__dcnet_tensor(a, i, &la), *pb = df__dcnet_tensor(b, i, &lb);
            same &= la == lb && !memcmp(pa, pb, la * sizeof(float));
        }
        DF_CHECK(same);
        for (int k = 0; k < 3; k++) {
            df_decompose_net_score_t sc;
            DF_CHECK(df_decompose_net_score(a, &seq[k], &sc, &err) == DF_OK);
            fprintf(stderr, "tiny set %d: %d bones, prototype accuracy %.3f (largest bone %.3f), "
                            "k-means ARI %.3f\n", k, sc.n_bones, sc.proto_acc, sc.majority, sc.ari);
            DF_CHECK(sc.n_bones == 3);
            DF_CHECK_MSG(sc.proto_acc > 0.95 && sc.majority < 0.4, "accuracy %g", sc.proto_acc);
            DF_CHECK_MSG(sc.ari > 0.8, "ARI %g", sc.ari);
        }
        /* file round trip: the same embeddings */
        char path[1200], bad[1200];
        snprintf(path, sizeof path, "%s/decompose_net.safetensors", dftest_out_dir());
        const char *kv[] = {"trained_on", "tiny", NULL};
        DF_CHECK_MSG(df_decompose_net_save(a, path, kv, &err) == DF_OK, "%s", err.msg);
        df_decompose_net_t *c = NULL;
        DF_CHECK_MSG(df_decompose_net_load(path, &c, &err) == DF_OK, "%s", err.msg);
        if (c) {
            int D = df_decompose_net_embed_dim(a);
            float *ea = malloc(sizeof(float) * sy[0].N * D), *ec = malloc(sizeof(float) * sy[0].N * D);
            DF_CHECK(df_decompose_net_embed(a, sy[0].N, sy[0].F, X[0], R[0], 3, NULL, ea, &err) == DF_OK);
            DF_CHECK(df_decompose_net_embed(c, sy[0].N, sy[0].F, X[0], R[0], 3, NULL, ec, &err) == DF_OK);
            DF_CHECK(!memcmp(ea, ec, sizeof(float) * sy[0].N * D));
            free(ea); free(ec);
            df_decompose_net_free(&c);
        }
        /* bad files: another kind of file, a tensor of the wrong shape */
        snprintf(bad, sizeof bad, "%s/decompose_net_bad.safetensors", dftest_out_dir());
        df_st_writer_t *w = df_st_writer_new();
        float z[4] = {0};
        df_st_writer_add(w, "x", DF_DT_F32, 1, (int64_t[]){4}, z);
        df_st_writer_meta(w, "kind", "rigged");
        DF_CHECK(df_st_writer_save(w, bad, &err) == DF_OK);
        df_st_writer_free(&w);
        DF_CHECK(df_decompose_net_load(bad, &c, &err) != DF_OK && strstr(err.msg, "not a decomposition network"));
        w = df_st_writer_new();
        df_st_writer_meta(w, "kind", "decompose_init");
        df_st_writer_meta(w, "format_version", "1");
        df_st_writer_meta(w, "frames", "16");
        df_st_writer_meta(w, "conv", "[[6,8,5,1,2]]");
        df_st_writer_meta(w, "dense", "[16,6]");
        float wz[8 * 29] = {0};
        df_st_writer_add(w, "conv0/weight", DF_DT_F32, 2, (int64_t[]){8, 29}, wz);
        DF_CHECK(df_st_writer_save(w, bad, &err) == DF_OK);
        df_st_writer_free(&w);
        memset(&err, 0, sizeof err);
        DF_CHECK(df_decompose_net_load(bad, &c, &err) != DF_OK && strstr(err.msg, "conv0/weight"));
        fprintf(stderr, "refused: %s\n", err.msg);
    }
    df_decompose_net_free(&a);
    df_decompose_net_free(&b);

    /* decompositions started from a trained network: on a training tube
     * with the network's clusters as they are (init rounds 0), and on an
     * unseen tube with the default rigid refinement */
    df_decompose_net_t *n = small_net(16, 9);
    if (n) {
        DF_CHECK(df_decompose_net_train(n, 3, seq, &o, &err) == DF_OK);
        syn_t t;
        make_syn(&t, 24, 8, 20, 2.1, 1.3);
        for (int c = 0; c < 2; c++) {
            const syn_t *u = c == 0 ? &sy[0] : &t;
            df_decompose_input_t in = {.n_frames = u->F, .n_vertices = u->N, .frames = u->frames,
                                       .n_triangles = u->T, .triangles = u->tris};
            df_decompose_opts_t opt;
            df_decompose_opts_default(&opt);
            opt.n_bones = 3;
            opt.max_influences = 2;
            opt.init = DF_DECOMPOSE_INIT_NETWORK;
            df_decompose_result_t *r = NULL;
            if (c == 0) {
                memset(&err, 0, sizeof err);
                DF_CHECK(df_decompose_fit(&in, &opt, NULL, &r, &err) != DF_OK &&
                         strstr(err.msg, "without a network")); /* init_net missing */
                opt.init_iterations = 0;
            }
            opt.init_net = n;
            DF_CHECK_MSG(df_decompose_fit(&in, &opt, NULL, &r, &err) == DF_OK, "%s", err.msg);
            if (!r) continue;
            int agree = 0, map[3] = {-1, -1, -1};
            for (int64_t i = 0; i < u->N; i++) {
                int l = u->label[i];
                if (map[l] < 0) map[l] = r->cluster[i];
                agree += map[l] == r->cluster[i];
            }
            int distinct = map[0] != map[1] && map[1] != map[2] && map[0] != map[2];
            fprintf(stderr, "network init, %s tube: %d of %lld vertices in their bone's cluster; "
                            "ERMS after init %.3g, after the fit %.3g of the diagonal\n",
                    c ? "an unseen" : "a training", agree, (long long)u->N, r->stats.erms_init,
                    r->stats.erms);
            if (c == 0) DF_CHECK(distinct && agree == u->N);
            DF_CHECK_MSG(r->stats.erms < 1e-4, "ERMS %g", r->stats.erms);
            df_decompose_result_free(&r);
        }
        free_syn(&t);
    }
    df_decompose_net_free(&n);
    for (int k = 0; k < 3; k++) { free(X[k]); free(R[k]); free_syn(&sy[k]); }
}

int main(void)
{
    DF_RUN(test_conv1d_vs_loop_and_gradients);
    DF_RUN(test_network_gradient);
    DF_RUN(test_learns_tiny_set);
    return dftest_exit();
}

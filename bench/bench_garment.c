/* bench_garment.c — synthesis speed of the `garment` kind beside plain LBS
 * of the same garment, in one run (make bench-garment).
 *
 *   bench_garment MODEL.safetensors [--vertices 12000] [--examples 150] [--frames 200] [--quick]
 *
 * MODEL is a fitted garment model (tests/data/garment/shirt.safetensors by
 * default in make bench-garment). To measure at the paper's size, the bench
 * derives from it a model with exactly --vertices garment vertices and
 * --examples pose examples and anchors each, and evaluates that:
 *  - vertices: triangle centroids inserted (each triangle split into three),
 *    round after round, the last round on as many triangles as needed; a new
 *    vertex is the mean of its triangle's corners in every example, basis
 *    and clearance, and takes its first corner's binding, regions and body
 *    candidates: a finer mesh of the same surface and the same examples;
 *  - examples: the model's pose examples and anchors repeated, each copy's
 *    joint rotations perturbed (about 0.05 rad), so every one is a distinct
 *    pose of the distance ranking.
 * Then, per frame of the body's first clip (a real retargeted motion) with a
 * fixed non-zero shape:
 *  - garment, batch 1 (df_model_evaluate, positions only, the state carried
 *    from frame to frame: damping on), and with normals;
 *  - garment, batch 32;
 *  - plain LBS of the same garment: FK of the shaped skeleton and one
 *    df__skin_lbs of the template (what a game engine does with a skinned
 *    shirt), batch 1.
 * Frames/s of thread CPU time (one core), best of 5 runs over the clip;
 * nothing is asserted.
 */
#include "df.h"
#include "garment/garment_internal.h"
#include "math/mathx.h"
#include "math/skin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now(void)
{
    struct timespec ts;
    clock_gettime(getenv("DF_BENCH_WALL") ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned rs = 777u;
static double srand1(void)
{
    rs = rs * 1664525u + 1013904223u;
    return 2.0 * ((rs >> 8) / 16777216.0) - 1.0;
}

static void die(const char *msg, const df_error_t *e)
{
    fprintf(stderr, "bench_garment: %s%s%s\n", msg, e ? ": " : "", e ? e->msg : "");
    exit(1);
}

static const df_tensor_t *get(const df_st_t *st, const char *name)
{
    const df_tensor_t *t = df_st_find(st, name);
    if (!t) {
        fprintf(stderr, "bench_garment: tensor '%s' missing (not a garment model?)\n", name);
        exit(1);
    }
    return t;
}

/* per-vertex float attribute of width w: new vertex = mean of its corners */
typedef struct {
    const char *name;
    int64_t lead;  /* leading count (examples, anchors*k), 1 for per-vertex */
    int64_t w;     /* floats per vertex */
    float *data;   /* [lead][Gmax][w] */
} attr_t;

int main(int argc, char **argv)
{
    const char *path = NULL;
    int64_t Gt = 12000, Et = 150, frames = 200;
    int quick = 0;
    const char *params = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vertices") && i + 1 < argc) Gt = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--examples") && i + 1 < argc) Et = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--params") && i + 1 < argc) params = argv[++i];
        else if (argv[i][0] != '-') path = argv[i];
        else {
            fprintf(stderr, "usage: bench_garment MODEL.safetensors [--vertices N] [--examples N] "
                            "[--frames N] [--quick]\n");
            return 2;
        }
    }
    if (!path) die("no model file given", NULL);
    openblas_set_num_threads(1);
    df_error_t err = {0};
    df_st_t *st = NULL;
    if (df_st_open(path, NULL, &st, &err)) die("cannot open the model", &err);
    const df_tensor_t *tg = get(st, "garment/positions"), *tt = get(st, "garment/triangles");
    const df_tensor_t *tpe = get(st, "garment/pose_examples"), *tpr = get(st, "garment/pose_rotations");
    const df_tensor_t *tab = get(st, "garment/anchor_base"), *tar = get(st, "garment/anchor_rotations");
    const df_tensor_t *tbs = get(st, "garment/anchor_basis");
    const df_tensor_t *tsj = get(st, "garment/skin_joints"), *tsw = get(st, "garment/skin_weights");
    const df_tensor_t *trg = get(st, "garment/regions"), *tbv = get(st, "garment/body_vertices");
    int64_t G0 = tg->shape[0], T0 = tt->shape[0], P0 = tpe->shape[0], A0 = tab->shape[0],
            k = tbs->shape[1], J = tpr->shape[1], K = tsj->shape[1], R = trg->shape[1],
            C = tbv->shape[1];
    if (Gt < G0) Gt = G0;

    /* ---- vertices: centroid insertion */
    int64_t Gm = Gt, Tm = T0 + 2 * (Gt - G0);
    uint32_t *tri = malloc((size_t)Tm * 3 * sizeof(uint32_t));
    for (int64_t i = 0; i < 3 * T0; i++) tri[i] = (uint32_t)((const int32_t *)tt->data)[i];
    attr_t at[] = {{"garment/positions", 1, 3, NULL}, {"garment/pose_examples", P0, 3, NULL},
                   {"garment/anchor_base", A0, 3, NULL}, {"garment/anchor_basis", A0 * k, 3, NULL},
                   {"garment/clearance", 1, 1, NULL}};
    const int NA = sizeof at / sizeof at[0];
    for (int a = 0; a < NA; a++) {
        const df_tensor_t *t = get(st, at[a].name);
        at[a].data = calloc((size_t)(at[a].lead * Gm * at[a].w), sizeof(float));
        for (int64_t l = 0; l < at[a].lead; l++)
            memcpy(at[a].data + l * Gm * at[a].w, (const float *)t->data + l * G0 * at[a].w,
                   (size_t)(G0 * at[a].w) * sizeof(float));
    }
    int32_t *sj = malloc((size_t)(Gm * K) * sizeof(int32_t)), *bv = malloc((size_t)(Gm * C) * sizeof(int32_t));
    float *sw = malloc((size_t)(Gm * K) * sizeof(float)), *rg = malloc((size_t)(Gm * R) * sizeof(float));
    memcpy(sj, tsj->data, (size_t)(G0 * K) * 4);
    memcpy(sw, tsw->data, (size_t)(G0 * K) * 4);
    memcpy(rg, trg->data, (size_t)(G0 * R) * 4);
    memcpy(bv, tbv->data, (size_t)(G0 * C) * 4);
    int64_t G = G0, T = T0;
    while (G < Gt) {
        int64_t Tr = T; /* triangles of this round */
        for (int64_t t = 0; t < Tr && G < Gt; t++) {
            uint32_t a = tri[3 * t], b = tri[3 * t + 1], c = tri[3 * t + 2], v = (uint32_t)G++;
            for (int q = 0; q < NA; q++)
                for (int64_t l = 0; l < at[q].lead; l++)
                    for (int64_t d = 0; d < at[q].w; d++) {
                        float *x = at[q].data + l * Gm * at[q].w;
                        x[v * at[q].w + d] = (x[a * at[q].w + d] + x[b * at[q].w + d] + x[c * at[q].w + d]) / 3.0f;
                    }
            memcpy(sj + v * K, sj + a * K, (size_t)K * 4);
            memcpy(sw + v * K, sw + a * K, (size_t)K * 4);
            memcpy(rg + v * R, rg + a * R, (size_t)R * 4);
            memcpy(bv + v * C, bv + a * C, (size_t)C * 4);
            uint32_t t1[3] = {b, c, v}, t2[3] = {c, a, v};
            tri[3 * t + 2] = v;
            memcpy(tri + 3 * T, t1, sizeof t1);
            memcpy(tri + 3 * T + 3, t2, sizeof t2);
            T += 2;
        }
    }

    /* ---- examples: repeated with perturbed rotations */
    int64_t P = Et > P0 ? Et : P0, A = Et > A0 ? Et : A0;
    float *prot = malloc((size_t)(P * J * 4) * 4), *arot = malloc((size_t)(A * J * 4) * 4);
    float *pex = malloc((size_t)(P * G * 3) * 4), *abase = malloc((size_t)(A * G * 3) * 4);
    float *abasis = malloc((size_t)(A * k * G * 3) * 4), *amap;
    const df_tensor_t *tmap = get(st, "garment/anchor_map");
    int64_t F = tmap->shape[2];
    amap = malloc((size_t)(A * k * F) * 4);
    for (int64_t e = 0; e < P; e++) {
        memcpy(pex + e * G * 3, at[1].data + (e % P0) * Gm * 3, (size_t)(G * 3) * 4);
        for (int64_t j = 0; j < J; j++) {
            float *q = prot + (e * J + j) * 4;
            memcpy(q, (const float *)tpr->data + ((e % P0) * J + j) * 4, 16);
            if (e >= P0)
                for (int c = 0; c < 3; c++) q[c] += (float)(0.025 * srand1());
            df_quat_normalize(q);
        }
    }
    for (int64_t e = 0; e < A; e++) {
        memcpy(abase + e * G * 3, at[2].data + (e % A0) * Gm * 3, (size_t)(G * 3) * 4);
        for (int64_t c = 0; c < k; c++)
            memcpy(abasis + (e * k + c) * G * 3, at[3].data + ((e % A0) * k + c) * Gm * 3, (size_t)(G * 3) * 4);
        memcpy(amap + e * k * F, (const float *)tmap->data + (e % A0) * k * F, (size_t)(k * F) * 4);
        for (int64_t j = 0; j < J; j++) {
            float *q = arot + (e * J + j) * 4;
            memcpy(q, (const float *)tar->data + ((e % A0) * J + j) * 4, 16);
            if (e >= A0)
                for (int c = 0; c < 3; c++) q[c] += (float)(0.025 * srand1());
            df_quat_normalize(q);
        }
    }

    /* ---- write the derived model: every non-garment tensor and the metadata copied */
    df_st_writer_t *w = df_st_writer_new();
    static const char *const mk[] = {"kind", "format_version", "skinning", "joint_names", "shape_names",
                                     "clips", "garment_features", "garment_regions", "garment_damping",
                                     "garment_margin", "garment_top", "garment_power"};
    for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++)
        if (df_st_meta(st, mk[i])) df_st_writer_meta(w, mk[i], df_st_meta(st, mk[i]));
    for (size_t i = 0; i < df_st_count(st); i++) {
        const df_tensor_t *t = df_st_at(st, i);
        if (!strncmp(t->name, "garment/", 8)) continue;
        df_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
#define ADD(name, dt, data, ...) df_st_writer_add(w, name, dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__}, data)
    int32_t *tri32 = malloc((size_t)T * 12);
    for (int64_t i = 0; i < 3 * T; i++) tri32[i] = (int32_t)tri[i];
    ADD("garment/positions", DF_DT_F32, at[0].data, G, 3);
    ADD("garment/triangles", DF_DT_I32, tri32, T, 3);
    ADD("garment/skin_joints", DF_DT_I32, sj, G, K);
    ADD("garment/skin_weights", DF_DT_F32, sw, G, K);
    ADD("garment/regions", DF_DT_F32, rg, G, R);
    ADD("garment/dof_weights", DF_DT_F32, get(st, "garment/dof_weights")->data, R, 3 * J);
    ADD("garment/body_vertices", DF_DT_I32, bv, G, C);
    ADD("garment/clearance", DF_DT_F32, at[4].data, G);
    ADD("garment/pose_rotations", DF_DT_F32, prot, P, J, 4);
    ADD("garment/pose_examples", DF_DT_F32, pex, P, G, 3);
    ADD("garment/anchor_rotations", DF_DT_F32, arot, A, J, 4);
    ADD("garment/anchor_base", DF_DT_F32, abase, A, G, 3);
    ADD("garment/anchor_basis", DF_DT_F32, abasis, A, k, G, 3);
    ADD("garment/anchor_map", DF_DT_F32, amap, A, k, F);
#undef ADD
    char out[1024];
    const char *dir = getenv("DF_BENCH_OUT");
    snprintf(out, sizeof out, "%s/bench_garment.safetensors", dir && *dir ? dir : "build");
    if (df_st_writer_save(w, out, &err)) die("cannot write the derived model", &err);
    df_st_writer_free(&w);
    df_st_close(&st);

    df_model_t *m = NULL;
    if (df_model_open(out, "garment", params, NULL, &m, &err)) die("derived model does not load", &err);
    const df__garment_t *g = m->impl;
    printf("garment model: %lld vertices, %lld triangles, %lld pose examples, %lld anchors (k = %lld), "
           "%lld regions, top %d, %lld joints (derived from %s: %lld vertices, %lld + %lld examples)\n",
           (long long)G, (long long)T, (long long)P, (long long)A, (long long)k, (long long)R, g->top,
           (long long)J, path, (long long)G0, (long long)P0, (long long)A0);

    /* ---- poses: the body's first clip, a fixed shape */
    int nf = (int)(quick ? 40 : frames);
    int ir = df_model_find_input(m, "joint_rotations"), is = df_model_find_input(m, "shape"),
        ist = df_model_find_input(m, "state");
    int op = df_model_find_output(m, "positions"), on = df_model_find_output(m, "normals"),
        ost = df_model_find_output(m, "state");
    int64_t S = is >= 0 ? df_model_input(m, is)->shape[0] : 0, ns = df_model_input(m, ist)->shape[0];
    float *rots = malloc((size_t)(nf * J * 4) * 4);
    df_clip_info_t ci;
    int have_clip = df_model_clip_count(m) > 0 && df_model_clip_info(m, 0, &ci) == 0;
    for (int f = 0; f < nf; f++) {
        float *bufs[DF_MAX_IO] = {0};
        bufs[ir] = rots + (size_t)f * J * 4;
        if (!have_clip || df_model_clip_sample(m, 0, (ci.times[ci.n_keys - 1] - ci.times[0]) * f / nf,
                                               bufs, NULL, &err))
            for (int64_t j = 0; j < J; j++) {
                float *q = rots + ((size_t)f * J + j) * 4;
                for (int c = 0; c < 3; c++) q[c] = (float)(0.3 * srand1());
                q[3] = 1;
                df_quat_normalize(q);
            }
    }
    float beta[64] = {0};
    for (int64_t i = 0; i < S && i < 64; i++) beta[i] = (float)(0.8 * srand1());
    float *pos = malloc((size_t)(32 * G * 3) * 4), *nrm = malloc((size_t)(32 * G * 3) * 4);
    float *state = malloc((size_t)(2 * ns) * 4);
    df_scratch_t *sc = df_scratch_new();
    int reps = quick ? 2 : 5;

    /* garment, batch 1, with and without normals */
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int with_n = 0; with_n < 2; with_n++)
        for (int r = 0; r < reps; r++) {
            for (int64_t i = 0; i < ns; i++) state[i] = -1;
            double t0 = now();
            for (int f = 0; f < nf; f++) {
                const float *ib[1] = {beta}, *iq[1] = {rots + (size_t)f * J * 4}, *is_[1] = {state + (f & 1) * ns};
                float *o1[1] = {pos}, *o2[1] = {nrm}, *o3[1] = {state + ((f + 1) & 1) * ns};
                df_batch_t b;
                memset(&b, 0, sizeof b);
                b.n = 1;
                if (is >= 0) b.in[is] = ib;
                b.in[ir] = iq;
                b.in[ist] = is_;
                b.out[op] = o1;
                if (with_n) b.out[on] = o2;
                b.out[ost] = o3;
                if (df_model_evaluate(m, &b, sc, &err)) die("evaluate", &err);
            }
            double dt = (now() - t0) / nf;
            if (dt < best[with_n]) best[with_n] = dt;
        }
    /* garment, batch 32 (32 characters, the same shape, consecutive frames) */
    int B = 32;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        int done = 0;
        for (int f = 0; f + B <= nf; f += B) {
            const float *ib[32], *iq[32];
            float *o1[32];
            for (int p = 0; p < B; p++) ib[p] = beta, iq[p] = rots + (size_t)(f + p) * J * 4, o1[p] = pos + (size_t)p * G * 3;
            df_batch_t b;
            memset(&b, 0, sizeof b);
            b.n = B;
            if (is >= 0) b.in[is] = ib;
            b.in[ir] = iq;
            b.out[op] = o1;
            if (df_model_evaluate(m, &b, sc, &err)) die("evaluate", &err);
            done += B;
        }
        double dt = (now() - t0) / (done ? done : 1);
        if (done && dt < best[2]) best[2] = dt;
    }
    /* plain LBS of the same garment: shaped FK + one skinning pass */
    const df__rig_t *rig = g->rig;
    float *world = aligned_alloc(64, (size_t)J * 48 + 64), *skin = aligned_alloc(64, (size_t)J * 48 + 64);
    float *mats = aligned_alloc(64, (size_t)J * 64 + 64);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (int f = 0; f < nf; f++) {
            df__rig_skin_matrices_shaped(rig, rots + (size_t)f * J * 4, NULL, NULL, beta, world, skin);
            for (int64_t j = 0; j < J; j++) df__skin_pack(skin + 12 * j, mats + 16 * j);
            df__skin_lbs(&g->skin, mats, g->rest, NULL, pos, NULL);
        }
        double dt = (now() - t0) / nf;
        if (dt < best[3]) best[3] = dt;
    }
    printf("%d frames of %s, shape (%.2f %.2f ...), thread CPU time, best of %d\n", nf,
           have_clip ? ci.name : "random poses", beta[0], beta[1], reps);
    printf("  %-44s %10.1f frames/s  (%.3f ms/frame)\n", "garment (Eq. 4 + penetration), batch 1", 1 / best[0], best[0] * 1e3);
    printf("  %-44s %10.1f frames/s  (%.3f ms/frame)\n", "garment + normals, batch 1", 1 / best[1], best[1] * 1e3);
    printf("  %-44s %10.1f frames/s  (%.3f ms/frame)\n", "garment, batch 32", 1 / best[2], best[2] * 1e3);
    printf("  %-44s %10.1f frames/s  (%.3f ms/frame)\n", "plain LBS of the same garment, batch 1", 1 / best[3], best[3] * 1e3);
    printf("  garment / plain LBS: %.1fx the time per frame\n", best[0] / best[3]);
    df_scratch_free(&sc);
    df_model_unref(&m);
    return 0;
}

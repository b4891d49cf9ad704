/* test_model.c — the generic model object (core/base/model.c), scratch and
 * run-time kinds, through a test-only kind registered with df_kind_register.
 *
 * The kind "t_affine" is small enough to evaluate by hand here:
 *   positions_out = scale * gain * rest + offset   (scale from parameters)
 *   sum           = gain + offset.x + offset.y + offset.z
 * Its model file is written with df_st_writer. What is tested is the generic
 * part: kind lookup, load/unload ownership (ASan sees leaks), reference
 * counting across threads, batch validation, scratch sizing, accessors,
 * named lists, clip dispatch and the JSON name-list helper.
 */
#include "df.h"
#include "dftest.h"
#include "base/model_internal.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char outdir[1024];
static atomic_int destroyed;
static size_t last_scratch_request;
static uintptr_t last_scratch_ptr;

typedef struct {
    float scale;
    float *clip_times;
    char *clip_name;
} affine_t;

static void affine_destroy(void *impl)
{
    affine_t *a = impl;
    free(a->clip_times);
    free(a->clip_name);
    free(a);
    atomic_fetch_add(&destroyed, 1);
}

static int affine_load(df_model_t *m, const df_st_t *st, const char *params,
                       const df_limits_t *lim, df_error_t *err)
{
    const df_tensor_t *pos, *tri, *times;
    int64_t s3[2] = {-1, 3};
    int rc;
    if ((rc = df_st_require(st, "positions", DF_DT_F32, 2, s3, 0, &pos, err)) ||
        (rc = df_st_require(st, "triangles", DF_DT_I32, 2, s3, 0, &tri, err)) ||
        (rc = df_st_require(st, "clip/0/times", DF_DT_F32, 1, NULL, 1, &times, err)))
        return rc;
    affine_t *a = calloc(1, sizeof *a);
    m->impl = a; /* from here on the model owns it */
    a->scale = 1;
    if (params) {
        json_t *j = json_loads(params, 0, NULL);
        json_t *s = json_object_get(j, "scale");
        if (s && !json_is_number(s)) {
            json_decref(j);
            return df_error_set(err, DF_EINVAL, "parameter 'scale' not a number");
        }
        if (s) a->scale = (float)json_number_value(s);
        json_decref(j);
    }
    int64_t n = pos->shape[0], t = tri->shape[0];
    uint32_t *tr = malloc((size_t)(t ? t : 1) * 3 * sizeof *tr);
    for (int64_t i = 0; i < 3 * t; i++) {
        int32_t v = ((const int32_t *)tri->data)[i];
        if (v < 0 || v >= n) {
            free(tr);
            return df_error_set(err, DF_EFORMAT, "triangles: index %d out of range", v);
        }
        tr[i] = (uint32_t)v;
    }
    rc = df__model_set_mesh(m, n, pos->data, t, tr);
    free(tr);
    if (rc) return df_error_set(err, rc, "set_mesh");
    int64_t three = 3, one = 1;
    float off_def[3] = {0.5f, -1.0f, 2.0f};
    if ((rc = df__model_add_input(m, "offset", 1, &three, 1, off_def)) ||
        (rc = df__model_add_input(m, "gain", 1, &one, 0, NULL)))
        return df_error_set(err, rc, "add_input");
    int64_t ps[2] = {n, 3};
    if ((rc = df__model_add_output(m, "positions", 2, ps)) ||
        (rc = df__model_add_output(m, "sum", 1, &one)))
        return df_error_set(err, rc, "add_output");
    const char *ctl[2] = {"offset", "gain"};
    if ((rc = df__model_set_names(m, "controls", 2, ctl))) return rc;
    char **jn;
    size_t nj;
    const char *js = df_st_meta(st, "joint_names");
    if (js) {
        if ((rc = df__json_string_array(js, (size_t)-1, &jn, &nj, err))) return rc;
        rc = df__model_set_names(m, "joints", nj, (const char *const *)jn);
        for (size_t i = 0; i < nj; i++) free(jn[i]);
        free(jn);
        if (rc) return rc;
    }
    if (times) {
        a->clip_name = strdup("wave");
        a->clip_times = malloc(times->nbytes);
        memcpy(a->clip_times, times->data, times->nbytes);
        m->clips = calloc(1, sizeof *m->clips);
        m->clips[0].name = a->clip_name;
        m->clips[0].n_keys = times->shape[0];
        m->clips[0].times = a->clip_times;
        m->n_clips = 1;
    }
    (void)lim;
    return DF_OK;
}

static size_t affine_scratch(const df_model_t *m, int n)
{
    last_scratch_request = (size_t)n * 4 * sizeof(float) + 1000;
    return last_scratch_request;
}

static int affine_eval(const df_model_t *m, const df_batch_t *b, void *scratch,
                       df_error_t *err)
{
    const affine_t *a = m->impl;
    float *tmp = scratch;
    last_scratch_ptr = (uintptr_t)scratch;
    for (int p = 0; p < b->n; p++) {
        const float *off = b->in[0] && b->in[0][p] ? b->in[0][p] : m->input_defaults[0];
        float g = b->in[1][p][0];
        if (!(g == g)) return df_error_set(err, DF_EINVAL, "pose %d: gain is NaN", p);
        memcpy(tmp + 4 * p, off, 3 * sizeof(float));
        tmp[4 * p + 3] = g;
    }
    for (int p = 0; p < b->n; p++) {
        const float *off = tmp + 4 * p;
        float g = tmp[4 * p + 3];
        if (b->out[0])
            for (int64_t v = 0; v < m->n_vertices; v++)
                for (int k = 0; k < 3; k++)
                    b->out[0][p][3 * v + k] =
                        a->scale * g * m->rest_positions[3 * v + k] + off[k];
        if (b->out[1]) b->out[1][p][0] = g + off[0] + off[1] + off[2];
    }
    return DF_OK;
}

static int affine_clip(const df_model_t *m, int c, double t, float *const *bufs,
                       uint32_t *filled, df_error_t *err)
{
    const affine_t *a = m->impl;
    double t0 = a->clip_times[0], t1 = a->clip_times[m->clips[c].n_keys - 1];
    double tt = t0 + t;
    if (tt > t1) tt = t1;
    if (tt < t0) tt = t0;
    if (bufs[0]) {
        bufs[0][0] = (float)tt;
        bufs[0][1] = bufs[0][2] = 0;
        *filled |= 1u;
    }
    return DF_OK;
}

static const df_kind_t kind_affine = {"t_affine", affine_load, affine_destroy,
                                      affine_scratch, affine_eval, affine_clip};
static const df_kind_t kind_noclip = {"t_noclip", affine_load, affine_destroy,
                                      affine_scratch, affine_eval, NULL};

/* rest positions of the test mesh: 4 vertices of a tetrahedron */
static const float REST[12] = {0, 0, 0, 2, 0, 0, 0, -3, 0, 0, 0, 5};
static const int32_t TRIS[12] = {0, 1, 2, 0, 1, 3, 0, 2, 3, 1, 2, 3};

static void write_model(const char *path, const char *kind_meta, int with_tris,
                        int with_clip)
{
    int64_t ps[2] = {4, 3}, cs = 3;
    float times[3] = {1.0f, 1.5f, 3.0f};
    df_st_writer_t *w = df_st_writer_new();
    df_st_writer_add(w, "positions", DF_DT_F32, 2, ps, REST);
    if (with_tris) df_st_writer_add(w, "triangles", DF_DT_I32, 2, ps, TRIS);
    if (with_clip) df_st_writer_add(w, "clip/0/times", DF_DT_F32, 1, &cs, times);
    if (kind_meta) df_st_writer_meta(w, "kind", kind_meta);
    df_st_writer_meta(w, "joint_names", "[\"root\",\"spine\"]");
    df_error_t e = {0};
    DF_CHECK_MSG(df_st_writer_save(w, path, &e) == DF_OK, "%s", e.msg);
    df_st_writer_free(&w);
}

static char good_path[1200];

static void test_kind_register(void)
{
    size_t before = df_kind_count();
    DF_CHECK(df_kind_register(&kind_affine) == DF_OK);
    DF_CHECK(df_kind_register(&kind_noclip) == DF_OK);
    DF_CHECK(df_kind_register(&kind_affine) == DF_EINVAL); /* duplicate */
    DF_CHECK(df_kind_register(NULL) == DF_EINVAL);
    DF_CHECK(df_kind_count() == before + 2);
    DF_CHECK(df_kind_find("t_affine") == &kind_affine);
    DF_CHECK(df_kind_at(before) == &kind_affine);
    DF_CHECK(df_kind_at(before + 2) == NULL);
    DF_CHECK(df_kind_find("no-such-kind") == NULL);
    DF_CHECK(df_kind_find(NULL) == NULL);
}

static void test_open_errors(void)
{
    df_model_t *m = (df_model_t *)1;
    df_error_t e = {0};
    DF_CHECK(df_model_open(good_path, "no-such-kind", NULL, NULL, &m, &e) == DF_ENOTFOUND);
    DF_CHECK(m == NULL && strstr(e.msg, "'no-such-kind'"));
    char p[1300];
    snprintf(p, sizeof p, "%s/missing.safetensors", outdir);
    DF_CHECK(df_model_open(p, "t_affine", NULL, NULL, &m, &e) == DF_ENOTFOUND);
    snprintf(p, sizeof p, "%s/other_kind.safetensors", outdir);
    write_model(p, "rigged", 1, 0);
    DF_CHECK(df_model_open(p, "t_affine", NULL, NULL, &m, &e) == DF_EFORMAT);
    DF_CHECK_MSG(strstr(e.msg, "'rigged'") && strstr(e.msg, "'t_affine'"), "%s", e.msg);
    /* the kind's load fails after it attached impl: destroy must run once */
    snprintf(p, sizeof p, "%s/no_tris.safetensors", outdir);
    write_model(p, "t_affine", 0, 0);
    int d0 = atomic_load(&destroyed);
    DF_CHECK(df_model_open(p, "t_affine", NULL, NULL, &m, &e) == DF_ENOTFOUND);
    DF_CHECK(strstr(e.msg, "'triangles'") != NULL && m == NULL);
    DF_CHECK(atomic_load(&destroyed) == d0); /* impl not yet attached */
    DF_CHECK(df_model_open(good_path, "t_affine", "{\"scale\":\"x\"}", NULL, &m, &e) == DF_EINVAL);
    DF_CHECK(atomic_load(&destroyed) == d0 + 1); /* attached, then freed */
    DF_CHECK(df_model_open(NULL, "t_affine", NULL, NULL, &m, &e) == DF_EINVAL);
}

static void test_accessors(void)
{
    df_model_t *m = NULL;
    df_error_t e = {0};
    DF_CHECK_MSG(df_model_open(good_path, "t_affine", "{\"scale\":2}", NULL, &m, &e) == DF_OK,
                 "%s", e.msg);
    if (!m) return;
    DF_CHECK(strcmp(df_model_kind(m), "t_affine") == 0);
    DF_CHECK(strcmp(df_model_name(m), "") == 0 && df_model_version(m) == 0);
    df_model_set_identity(m, "alice", 7);
    DF_CHECK(strcmp(df_model_name(m), "alice") == 0 && df_model_version(m) == 7);
    DF_CHECK(df_model_n_vertices(m) == 4 && df_model_n_triangles(m) == 4);
    DF_CHECK(memcmp(df_model_rest_positions(m), REST, sizeof REST) == 0);
    for (int i = 0; i < 12; i++) DF_CHECK(df_model_triangles(m)[i] == (uint32_t)TRIS[i]);
    float lo[3], hi[3];
    df_model_bbox(m, lo, hi);
    DF_CHECK(lo[0] == 0 && lo[1] == -3 && lo[2] == 0);
    DF_CHECK(hi[0] == 2 && hi[1] == 0 && hi[2] == 5);
    DF_CHECK(df_model_n_inputs(m) == 2 && df_model_n_outputs(m) == 2);
    DF_CHECK(df_model_find_input(m, "gain") == 1 && df_model_find_input(m, "x") == -1);
    DF_CHECK(df_model_find_output(m, "sum") == 1 && df_model_find_output(m, NULL) == -1);
    const df_io_desc_t *d = df_model_input(m, 0);
    DF_CHECK(d && d->optional && d->ndim == 1 && d->shape[0] == 3 && d->dtype == DF_DT_F32);
    DF_CHECK(df_model_input(m, 2) == NULL && df_model_input(m, -1) == NULL);
    d = df_model_output(m, 0);
    DF_CHECK(d && d->ndim == 2 && d->shape[0] == 4 && d->shape[1] == 3);
    const float *def = df_model_input_default(m, 0);
    DF_CHECK(def && def[0] == 0.5f && def[1] == -1.0f && def[2] == 2.0f);
    DF_CHECK(df_model_input_default(m, 1)[0] == 0.0f); /* NULL default -> zeros */
    const char *const *names;
    DF_CHECK(df_model_names(m, "controls", &names) == 2);
    DF_CHECK(strcmp(names[0], "offset") == 0 && strcmp(names[1], "gain") == 0);
    DF_CHECK(df_model_names(m, "joints", &names) == 2 && strcmp(names[1], "spine") == 0);
    DF_CHECK(df_model_names(m, "morphs", &names) == 0 && names == NULL);
    /* helpers refuse bad descriptions */
    int64_t neg = -1, big[4] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
    DF_CHECK(df__model_add_input(m, "gain", 1, big, 0, NULL) == DF_EINVAL); /* dup */
    DF_CHECK(df__model_add_input(m, "x", 1, &neg, 0, NULL) == DF_ELIMIT);
    DF_CHECK(df__model_add_input(m, "x", 4, big, 0, NULL) == DF_ELIMIT);
    DF_CHECK(df__model_add_input(m, "", 0, NULL, 0, NULL) == DF_EINVAL);
    DF_CHECK(df__model_add_output(m, "sum", 0, NULL) == DF_EINVAL); /* duplicate */
    DF_CHECK(df_model_n_inputs(m) == 2 && df_model_n_outputs(m) == 2);
    df_model_unref(&m);
    DF_CHECK(m == NULL);
    df_model_unref(&m); /* NULL is fine */
}

static void test_evaluate(void)
{
    df_model_t *m = NULL;
    df_error_t e = {0};
    DF_CHECK(df_model_open(good_path, "t_affine", "{\"scale\":2}", NULL, &m, &e) == DF_OK);
    if (!m) return;
    df_scratch_t *s = df_scratch_new();
    enum { B = 3 };
    float off[B][3] = {{1, 2, 3}, {0, 0, 0}, {-1, 0.5f, 0}};
    float gain[B][1] = {{1}, {0.5f}, {-2}};
    float pos[B][12], sum[B][1];
    const float *in0[B] = {off[0], NULL, off[2]}; /* pose 1 takes the default */
    const float *in1[B] = {gain[0], gain[1], gain[2]};
    float *o0[B] = {pos[0], pos[1], pos[2]};
    float *o1[B] = {sum[0], sum[1], sum[2]};
    df_batch_t b = {0};
    b.n = B;
    b.in[0] = in0;
    b.in[1] = in1;
    b.out[0] = o0;
    b.out[1] = o1;
    DF_CHECK_MSG(df_model_evaluate(m, &b, s, &e) == DF_OK, "%s", e.msg);
    const float defo[3] = {0.5f, -1.0f, 2.0f};
    for (int p = 0; p < B; p++) {
        const float *o = p == 1 ? defo : off[p];
        for (int v = 0; v < 4; v++)
            for (int k = 0; k < 3; k++)
                DF_CHECK_NEAR(pos[p][3 * v + k], 2.0 * gain[p][0] * REST[3 * v + k] + o[k], 1e-6);
        DF_CHECK_NEAR(sum[p][0], gain[p][0] + o[0] + o[1] + o[2], 1e-6);
    }
    DF_CHECK(df_scratch_capacity(s) >= last_scratch_request);
    DF_CHECK(last_scratch_ptr % 64 == 0);

    /* only some outputs */
    b.out[0] = NULL;
    sum[0][0] = -99;
    DF_CHECK(df_model_evaluate(m, &b, s, &e) == DF_OK && sum[0][0] == 7.0f);

    /* generic validation */
    df_batch_t bad = b;
    bad.n = 0;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL && strstr(e.msg, "batch size 0"));
    bad.n = -5;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL);
    bad = b;
    bad.in[1] = NULL;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL && strstr(e.msg, "'gain' is required"));
    const float *in1h[B] = {gain[0], NULL, gain[2]};
    bad = b;
    bad.in[1] = in1h;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL);
    DF_CHECK_MSG(strstr(e.msg, "pose 1: input 'gain'"), "%s", e.msg);
    bad = b;
    bad.in[0] = NULL; /* optional input absent for all poses: fine */
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_OK);
    DF_CHECK_NEAR(sum[0][0], 1.0 + 0.5 - 1.0 + 2.0, 1e-6);
    bad = b;
    bad.in[5] = in1;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL && strstr(e.msg, "slot 5"));
    bad = b;
    bad.out[4] = o1;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL && strstr(e.msg, "slot 4"));
    bad = b;
    bad.out[1] = NULL;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL && strstr(e.msg, "no output"));
    float *o1h[B] = {sum[0], sum[1], NULL};
    bad = b;
    bad.out[1] = o1h;
    DF_CHECK(df_model_evaluate(m, &bad, s, &e) == DF_EINVAL);
    DF_CHECK_MSG(strstr(e.msg, "pose 2: output 'sum'"), "%s", e.msg);
    DF_CHECK(df_model_evaluate(m, &b, NULL, &e) == DF_EINVAL);
    /* the kind's own value checks come through */
    gain[2][0] = NAN;
    DF_CHECK(df_model_evaluate(m, &b, s, &e) == DF_EINVAL && strstr(e.msg, "pose 2"));
    df_scratch_free(&s);
    DF_CHECK(s == NULL);
    df_model_unref(&m);
}

static void test_scratch(void)
{
    df_scratch_t *s = df_scratch_new();
    DF_CHECK(df_scratch_capacity(s) == 0);
    void *a = df_scratch_get(s, 100);
    DF_CHECK(a && (uintptr_t)a % 64 == 0 && df_scratch_capacity(s) >= 100);
    DF_CHECK(df_scratch_get(s, 50) == a); /* no regrowth when smaller */
    memset(a, 1, df_scratch_capacity(s));
    void *b = df_scratch_get(s, 1 << 20);
    DF_CHECK(b && (uintptr_t)b % 64 == 0 && df_scratch_capacity(s) >= (1u << 20));
    size_t cap = df_scratch_capacity(s);
    DF_CHECK(df_scratch_get(s, 10) == b && df_scratch_capacity(s) == cap); /* never shrinks */
    memset(b, 2, cap);
    DF_CHECK(df_scratch_get(s, SIZE_MAX - 10) == NULL); /* out of memory is an answer */
    DF_CHECK(df_scratch_get(s, 10) == b);
    DF_CHECK(df_scratch_get(NULL, 10) == NULL);
    df_scratch_free(&s);
    DF_CHECK(s == NULL);
}

typedef struct {
    df_model_t *m;
    int iters;
} refarg_t;

static void *ref_thread(void *p)
{
    refarg_t *a = p;
    for (int i = 0; i < a->iters; i++) {
        df_model_t *r = df_model_ref(a->m);
        df_model_unref(&r);
    }
    return NULL;
}

static void test_refcount_threads(void)
{
    df_model_t *m = NULL;
    df_error_t e = {0};
    DF_CHECK(df_model_open(good_path, "t_affine", NULL, NULL, &m, &e) == DF_OK);
    if (!m) return;
    int d0 = atomic_load(&destroyed);
    pthread_t th[4];
    refarg_t a = {m, 100000};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, ref_thread, &a);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    DF_CHECK(atomic_load(&destroyed) == d0);
    DF_CHECK(atomic_load(&m->refs) == 1);
    df_model_t *r1 = df_model_ref(m), *r2 = df_model_ref(m);
    DF_CHECK(r1 == m && r2 == m);
    df_model_unref(&m);
    df_model_unref(&r1);
    DF_CHECK(atomic_load(&destroyed) == d0);
    df_model_unref(&r2);
    DF_CHECK(atomic_load(&destroyed) == d0 + 1);
}

static void test_clips(void)
{
    df_model_t *m = NULL, *nc = NULL;
    df_error_t e = {0};
    char p[1300];
    snprintf(p, sizeof p, "%s/clip.safetensors", outdir);
    write_model(p, NULL, 1, 1);
    DF_CHECK(df_model_open(p, "t_affine", NULL, NULL, &m, &e) == DF_OK);
    DF_CHECK(df_model_open(p, "t_noclip", NULL, NULL, &nc, &e) == DF_OK);
    if (!m || !nc) return;
    DF_CHECK(df_model_clip_count(m) == 1);
    df_clip_info_t ci;
    DF_CHECK(df_model_clip_info(m, 0, &ci) == DF_OK);
    DF_CHECK(strcmp(ci.name, "wave") == 0 && ci.n_keys == 3 && ci.times[2] == 3.0f);
    DF_CHECK(df_model_clip_info(m, 1, &ci) == DF_ENOTFOUND);
    DF_CHECK(df_model_clip_find(m, "wave") == 0 && df_model_clip_find(m, "x") == -1);
    float buf[3];
    float *bufs[DF_MAX_IO] = {buf, NULL};
    uint32_t filled = 99;
    DF_CHECK(df_model_clip_sample(m, 0, 0.25, bufs, &filled, &e) == DF_OK);
    DF_CHECK(filled == 1u && buf[0] == 1.25f);
    DF_CHECK(df_model_clip_sample(m, 0, 100, bufs, &filled, &e) == DF_OK && buf[0] == 3.0f);
    DF_CHECK(df_model_clip_sample(m, 1, 0, bufs, &filled, &e) == DF_ENOTFOUND);
    DF_CHECK(df_model_clip_sample(m, -1, 0, bufs, &filled, &e) == DF_ENOTFOUND);
    DF_CHECK(df_model_clip_sample(m, 0, NAN, bufs, &filled, &e) == DF_EINVAL);
    DF_CHECK(strstr(e.msg, "'wave'") != NULL);
    DF_CHECK(df_model_clip_sample(nc, 0, 0, bufs, &filled, &e) == DF_EUNSUPPORTED);
    df_model_unref(&m);
    df_model_unref(&nc);
}

static void test_json_string_array(void)
{
    char **v;
    size_t n;
    df_error_t e = {0};
    DF_CHECK(df__json_string_array("[\"a\", \"b\\u00e9\", \"\"]", 3, &v, &n, &e) == DF_OK);
    DF_CHECK(n == 3 && strcmp(v[0], "a") == 0 && strcmp(v[1], "b\xc3\xa9") == 0 && v[2][0] == 0);
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    DF_CHECK(df__json_string_array("[]", (size_t)-1, &v, &n, &e) == DF_OK && n == 0);
    free(v);
    DF_CHECK(df__json_string_array("[\"a\",\"b\"]", 0, &v, &n, &e) == DF_OK && n == 2);
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    DF_CHECK(df__json_string_array("[\"a\"]", 2, &v, &n, &e) == DF_EFORMAT);
    DF_CHECK(strstr(e.msg, "1 names, expected 2") != NULL && v == NULL);
    DF_CHECK(df__json_string_array("[\"a\", 3]", (size_t)-1, &v, &n, &e) == DF_EFORMAT);
    DF_CHECK(strstr(e.msg, "entry 1") != NULL && v == NULL);
    DF_CHECK(df__json_string_array("{\"a\":1}", (size_t)-1, &v, &n, &e) == DF_EFORMAT);
    DF_CHECK(df__json_string_array("[\"a\"", (size_t)-1, &v, &n, &e) == DF_EFORMAT);
    DF_CHECK(df__json_string_array(NULL, (size_t)-1, &v, &n, &e) == DF_EFORMAT);
}

int main(void)
{
    snprintf(outdir, sizeof outdir, "%s/core_model", dftest_out_dir());
    mkdir(outdir, 0755);
    snprintf(good_path, sizeof good_path, "%s/good.safetensors", outdir);
    write_model(good_path, "t_affine", 1, 0);
    DF_RUN(test_kind_register);
    DF_RUN(test_open_errors);
    DF_RUN(test_accessors);
    DF_RUN(test_evaluate);
    DF_RUN(test_scratch);
    DF_RUN(test_refcount_threads);
    DF_RUN(test_clips);
    DF_RUN(test_json_string_array);
    return dftest_exit();
}

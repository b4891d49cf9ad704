/* test_repo.c — the model repository (core/base/repo.c) on a real temporary
 * directory tree: listing, config.json parsing (every key, defaults, type
 * errors, characters), and version selection (highest valid version wins, a
 * corrupt newer version is skipped and reported).
 *
 * Models use a test-only kind "t_repo" (registered at start) whose load
 * needs a "positions" F32 [N,3] tensor and accepts parameters {"need": "x"}
 * meaning "tensor x must exist", so parameters are seen to reach the kind.
 */
#include "df.h"
#include "dftest.h"
#include "base/model_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char repo[1024];

static void rt_destroy(void *impl) { free(impl); }

static int rt_load(df_model_t *m, const df_st_t *st, const char *params,
                   const df_limits_t *lim, df_error_t *err)
{
    const df_tensor_t *pos;
    int64_t s3[2] = {-1, 3};
    int rc = df_st_require(st, "positions", DF_DT_F32, 2, s3, 0, &pos, err);
    if (rc) return rc;
    if (params) {
        json_t *j = json_loads(params, 0, NULL);
        const char *need = json_string_value(json_object_get(j, "need"));
        if (need && !df_st_find(st, need))
            rc = df_error_set(err, DF_ENOTFOUND, "tensor '%s' needed", need);
        json_decref(j);
        if (rc) return rc;
    }
    int64_t three = 3;
    df__model_add_output(m, "positions", 1, &three);
    return df__model_set_mesh(m, pos->shape[0], pos->data, 0, NULL);
}

static size_t rt_scratch(const df_model_t *m, int n) { return 64; }
static int rt_eval(const df_model_t *m, const df_batch_t *b, void *s,
                   df_error_t *err)
{
    return DF_OK;
}
static const df_kind_t kind_repo = {"t_repo", rt_load, rt_destroy, rt_scratch,
                                    rt_eval, NULL};

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    DF_CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char *fmt, const char *a, const char *b)
{
    char p[2048];
    snprintf(p, sizeof p, fmt, repo, a, b);
    mkdir(p, 0755);
}

/* REPO/<model>/<version>/model.safetensors with n vertices at x = version */
static void write_version(const char *model, const char *ver, int n,
                          const char *extra_tensor)
{
    mkdirs("%s/%s", model, NULL);
    mkdirs("%s/%s/%s", model, ver);
    char p[2048];
    snprintf(p, sizeof p, "%s/%s/%s/model.safetensors", repo, model, ver);
    float *v = calloc((size_t)n * 3, sizeof *v);
    for (int i = 0; i < n; i++) v[3 * i] = (float)atof(ver);
    int64_t sh[2] = {n, 3};
    df_st_writer_t *w = df_st_writer_new();
    df_st_writer_add(w, "positions", DF_DT_F32, 2, sh, v);
    if (extra_tensor) df_st_writer_add(w, extra_tensor, DF_DT_F32, 2, sh, v);
    df_error_t e = {0};
    DF_CHECK(df_st_writer_save(w, p, &e) == DF_OK);
    df_st_writer_free(&w);
    free(v);
}

static void write_config(const char *model, const char *json)
{
    mkdirs("%s/%s", model, NULL);
    char p[2048];
    snprintf(p, sizeof p, "%s/%s/config.json", repo, model);
    write_text(p, json);
}

static void test_list(void)
{
    char **names = NULL;
    size_t n = 0;
    df_error_t e = {0};
    write_config("zeta", "{\"kind\":\"t_repo\"}");
    write_config("alpha", "{\"kind\":\"t_repo\"}");
    write_config("mid", "{\"kind\":\"t_repo\"}");
    mkdirs("%s/%s", "no_config", NULL);
    char p[2048];
    snprintf(p, sizeof p, "%s/stray_file", repo);
    write_text(p, "x");
    DF_CHECK(df_repo_list(repo, &names, &n, &e) == DF_OK);
    DF_CHECK(n == 3);
    if (n == 3)
        DF_CHECK(strcmp(names[0], "alpha") == 0 && strcmp(names[1], "mid") == 0 &&
                 strcmp(names[2], "zeta") == 0);
    df_repo_names_free(&names, n);
    DF_CHECK(names == NULL);
    snprintf(p, sizeof p, "%s/absent", repo);
    DF_CHECK(df_repo_list(p, &names, &n, &e) == DF_ENOTFOUND && n == 0);
    DF_CHECK(strstr(e.msg, "absent") != NULL);
}

static void test_config_full(void)
{
    write_config("full",
                 "{\"kind\": \"t_repo\", \"parameters\": {\"need\": \"extra\", \"k\": [1,2]},\n"
                 " \"max_batch_size\": 8, \"max_queue_delay_us\": 250,\n"
                 " \"max_queue_length\": 99, \"timeout_us\": 123456,\n"
                 " \"future_key\": {\"ignored\": true},\n"
                 " \"characters\": {\n"
                 "   \"alice\": {\"defaults\": {\"weights\": [0.5, 0.25],\n"
                 "                             \"joint_rotations\": [[0,0,0,1],[0,0,1e-3,1]]},\n"
                 "               \"skinning\": \"dqs\", \"encoding\": \"float16\"},\n"
                 "   \"bob\": {\"skinning\": \"lbs\"},\n"
                 "   \"carol\": {}}}");
    df_model_config_t c;
    df_error_t e = {0};
    DF_CHECK_MSG(df_repo_read_config(repo, "full", &c, &e) == DF_OK, "%s", e.msg);
    DF_CHECK(strcmp(c.name, "full") == 0 && strcmp(c.kind, "t_repo") == 0);
    json_t *pj = json_loads(c.params_json ? c.params_json : "", 0, NULL);
    DF_CHECK(pj && strcmp(json_string_value(json_object_get(pj, "need")), "extra") == 0);
    DF_CHECK(json_array_size(json_object_get(pj, "k")) == 2);
    json_decref(pj);
    DF_CHECK(c.max_batch_size == 8 && c.max_queue_delay_us == 250);
    DF_CHECK(c.max_queue_length == 99 && c.timeout_us == 123456);
    DF_CHECK(c.n_characters == 3);
    if (c.n_characters == 3) {
        df_character_t *a = &c.characters[0];
        DF_CHECK(strcmp(a->name, "alice") == 0 && a->flags == DF_POSE_DQS);
        DF_CHECK(strcmp(a->encoding, "float16") == 0 && a->n_defaults == 2);
        DF_CHECK(strcmp(a->defaults[0].input, "weights") == 0 && a->defaults[0].n == 2);
        DF_CHECK(a->defaults[0].data[0] == 0.5f && a->defaults[0].data[1] == 0.25f);
        DF_CHECK(strcmp(a->defaults[1].input, "joint_rotations") == 0);
        DF_CHECK(a->defaults[1].n == 8 && a->defaults[1].data[6] == 1e-3f &&
                 a->defaults[1].data[7] == 1.0f);
        DF_CHECK(strcmp(c.characters[1].name, "bob") == 0 &&
                 c.characters[1].flags == DF_POSE_LBS);
        DF_CHECK(strcmp(c.characters[2].name, "carol") == 0 &&
                 c.characters[2].flags == 0 && c.characters[2].n_defaults == 0 &&
                 strcmp(c.characters[2].encoding, "float32") == 0);
    }
    df_model_config_free(&c);
    DF_CHECK(c.characters == NULL && c.params_json == NULL);
}

static void test_config_defaults(void)
{
    write_config("minimal", "{\"kind\":\"t_repo\"}");
    df_model_config_t c;
    df_error_t e = {0};
    DF_CHECK(df_repo_read_config(repo, "minimal", &c, &e) == DF_OK);
    DF_CHECK(c.params_json == NULL && c.max_batch_size == 32);
    DF_CHECK(c.max_queue_delay_us == 500 && c.max_queue_length == 1024);
    DF_CHECK(c.timeout_us == 10000000 && c.n_characters == 0 && c.characters == NULL);
    df_model_config_free(&c);
}

static void expect_config_error(const char *json, int code, const char *needle)
{
    write_config("bad", json);
    df_model_config_t c;
    df_error_t e = {0};
    int rc = df_repo_read_config(repo, "bad", &c, &e);
    DF_CHECK_MSG(rc == code, "%s: rc %d msg %s", json, rc, e.msg);
    DF_CHECK_MSG(strstr(e.msg, needle) != NULL, "%s: '%s' lacks '%s'", json, e.msg, needle);
    DF_CHECK(c.characters == NULL && c.params_json == NULL);
}

static void test_config_errors(void)
{
    expect_config_error("{\"kind\": \"t_repo\",", DF_EINVAL, "not valid JSON");
    expect_config_error("[1]", DF_EINVAL, "not a JSON object");
    expect_config_error("{}", DF_EINVAL, "\"kind\"");
    expect_config_error("{\"kind\": 3}", DF_EINVAL, "\"kind\"");
    expect_config_error("{\"kind\": \"t_repo\", \"kind\": \"x\"}", DF_EINVAL, "duplicate");
    expect_config_error("{\"kind\":\"t_repo\",\"parameters\":[1]}", DF_EINVAL, "\"parameters\"");
    expect_config_error("{\"kind\":\"t_repo\",\"max_batch_size\":\"32\"}", DF_EINVAL,
                        "\"max_batch_size\" must be an integer");
    expect_config_error("{\"kind\":\"t_repo\",\"max_batch_size\":0}", DF_EINVAL,
                        "\"max_batch_size\" = 0 out of range");
    expect_config_error("{\"kind\":\"t_repo\",\"max_batch_size\":1e3}", DF_EINVAL,
                        "\"max_batch_size\"");
    expect_config_error("{\"kind\":\"t_repo\",\"max_queue_delay_us\":-1}", DF_EINVAL,
                        "\"max_queue_delay_us\"");
    expect_config_error("{\"kind\":\"t_repo\",\"max_queue_length\":true}", DF_EINVAL,
                        "\"max_queue_length\"");
    expect_config_error("{\"kind\":\"t_repo\",\"timeout_us\":0}", DF_EINVAL, "\"timeout_us\"");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":[]}", DF_EINVAL, "\"characters\"");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a\":1}}", DF_EINVAL,
                        "character 'a'");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a\":{\"skinning\":\"xyz\"}}}",
                        DF_EINVAL, "'a': \"skinning\"");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a\":{\"encoding\":\"int8\"}}}",
                        DF_EINVAL, "'a': \"encoding\"");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a\":{\"defaults\":[1]}}}",
                        DF_EINVAL, "'a': \"defaults\"");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a\":{\"defaults\":"
                        "{\"weights\":[1,\"x\"]}}}}",
                        DF_EINVAL, "default 'weights'");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a\":{\"defaults\":"
                        "{\"weights\":[1e39]}}}}",
                        DF_EINVAL, "default 'weights'");
    expect_config_error("{\"kind\":\"t_repo\",\"characters\":{\"a/b\":{}}}", DF_EINVAL,
                        "bad character name");
    df_model_config_t c;
    df_error_t e = {0};
    DF_CHECK(df_repo_read_config(repo, "nonexistent", &c, &e) == DF_ENOTFOUND);
    DF_CHECK(df_repo_read_config(repo, "../etc", &c, &e) == DF_EINVAL);
    DF_CHECK(df_repo_read_config(repo, "", &c, &e) == DF_EINVAL);
}

static void test_load_versions(void)
{
    write_config("ver", "{\"kind\":\"t_repo\"}");
    write_version("ver", "1", 4, NULL);
    write_version("ver", "2", 5, NULL);
    write_version("ver", "10", 6, NULL); /* numeric order: 10 > 2 */
    mkdirs("%s/%s/%s", "ver", "notaversion");
    mkdirs("%s/%s/%s", "ver", "011"); /* leading zero: not a version */
    df_model_t *m = NULL;
    df_model_config_t c;
    char *skipped = NULL;
    df_error_t e = {0};
    DF_CHECK_MSG(df_repo_load(repo, "ver", NULL, &m, &c, &skipped, &e) == DF_OK, "%s", e.msg);
    if (m) {
        DF_CHECK(df_model_version(m) == 10 && strcmp(df_model_name(m), "ver") == 0);
        DF_CHECK(df_model_n_vertices(m) == 6 && df_model_rest_positions(m)[0] == 10.0f);
        DF_CHECK(strcmp(c.kind, "t_repo") == 0);
    }
    DF_CHECK(skipped == NULL);
    df_model_unref(&m);
    df_model_config_free(&c);

    /* a corrupt newest version: skipped, reported, previous one serves */
    mkdirs("%s/%s/%s", "ver", "11");
    char p[2048];
    snprintf(p, sizeof p, "%s/ver/11/model.safetensors", repo);
    {
        static const char trunc[] = "\x40\0\0\0\0\0\0\0{\"positions\":";
        FILE *f = fopen(p, "wb");
        fwrite(trunc, 1, sizeof trunc - 1, f);
        fclose(f);
    }
    mkdirs("%s/%s/%s", "ver", "12"); /* version directory without a file */
    DF_CHECK(df_repo_load(repo, "ver", NULL, &m, NULL, &skipped, &e) == DF_OK);
    DF_CHECK(m && df_model_version(m) == 10);
    DF_CHECK_MSG(skipped && strstr(skipped, "version 11 skipped") &&
                 strstr(skipped, "version 12 skipped"), "%s", skipped ? skipped : "(null)");
    DF_CHECK(skipped && strstr(skipped, "header length") != NULL);
    free(skipped);
    df_model_unref(&m);

    /* parameters reach the kind: "need" a tensor only version 2 has */
    write_config("par", "{\"kind\":\"t_repo\", \"parameters\": {\"need\": \"extra\"}}");
    write_version("par", "2", 4, "extra");
    write_version("par", "3", 4, NULL);
    DF_CHECK(df_repo_load(repo, "par", NULL, &m, NULL, &skipped, &e) == DF_OK);
    DF_CHECK(m && df_model_version(m) == 2);
    DF_CHECK(skipped && strstr(skipped, "version 3 skipped: tensor 'extra' needed"));
    free(skipped);
    df_model_unref(&m);

    /* limits reach the loader */
    df_limits_t lim;
    df_limits_default(&lim);
    lim.max_file_bytes = 64;
    DF_CHECK(df_repo_load(repo, "par", &lim, &m, NULL, &skipped, &e) == DF_ELIMIT);
    DF_CHECK(m == NULL && skipped && strstr(skipped, "version 2 skipped"));
    DF_CHECK(strstr(e.msg, "none of 2 versions") != NULL);
    free(skipped);

    /* every version bad, no versions, unknown kind */
    write_config("allbad", "{\"kind\":\"t_repo\"}");
    mkdirs("%s/%s/%s", "allbad", "1");
    snprintf(p, sizeof p, "%s/allbad/1/model.safetensors", repo);
    write_text(p, "");
    DF_CHECK(df_repo_load(repo, "allbad", NULL, &m, NULL, NULL, &e) == DF_EFORMAT);
    DF_CHECK_MSG(strstr(e.msg, "allbad") && strstr(e.msg, "shorter"), "%s", e.msg);
    write_config("empty", "{\"kind\":\"t_repo\"}");
    DF_CHECK(df_repo_load(repo, "empty", NULL, &m, NULL, &skipped, &e) == DF_ENOTFOUND);
    DF_CHECK(strstr(e.msg, "no version") != NULL && skipped == NULL);
    write_config("unk", "{\"kind\":\"no_such_kind\"}");
    write_version("unk", "1", 3, NULL);
    DF_CHECK(df_repo_load(repo, "unk", NULL, &m, NULL, &skipped, &e) == DF_ENOTFOUND);
    DF_CHECK(skipped && strstr(skipped, "'no_such_kind'"));
    free(skipped);
    write_config("badcfg", "{\"kind\":");
    DF_CHECK(df_repo_load(repo, "badcfg", NULL, &m, NULL, &skipped, &e) == DF_EINVAL);
    DF_CHECK(m == NULL);
}

int main(void)
{
    char base[900];
    snprintf(base, sizeof base, "%s", dftest_out_dir());
    snprintf(repo, sizeof repo, "%s/core_repo.XXXXXX", base);
    if (!mkdtemp(repo)) {
        perror("mkdtemp");
        return 1;
    }
    DF_CHECK(df_kind_register(&kind_repo) == DF_OK);
    DF_RUN(test_list);
    DF_RUN(test_config_full);
    DF_RUN(test_config_defaults);
    DF_RUN(test_config_errors);
    DF_RUN(test_load_versions);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
    if (dftest_exit() == 0 && system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return dftest_exit();
}

/* repo.c — the model repository: REPO/<name>/config.json and
 * REPO/<name>/<version>/model.safetensors.
 *
 * DESIGN
 * A model is a directory holding config.json (its kind, kind parameters,
 * batching knobs and characters) and numeric version directories. Loading
 * tries versions from the highest down and keeps the first that validates,
 * so a corrupt upload of a new version never takes a model down: its error
 * is reported in *skipped and the previous version keeps serving. Running
 * out of memory is not a property of a version: it fails the load (DF_ENOMEM)
 * instead of falling back to an older version. The
 * config parser ignores unknown keys (forward compatibility) but refuses
 * known keys of the wrong type or range, naming the key.
 */
#include "df.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REPO_MAX_CONFIG_BYTES (16u << 20)
#define REPO_MAX_CHARACTERS 4096
#define REPO_MAX_DEFAULT_FLOATS (1u << 24)

static int valid_name(const char *n)
{
    if (!n || !*n || strlen(n) >= DF_NAME_MAX || n[0] == '.') return 0;
    for (const char *p = n; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20) return 0;
    return 1;
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void df_repo_names_free(char ***names, size_t n)
{
    if (!names || !*names) return;
    for (size_t i = 0; i < n; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
}

int df_repo_list(const char *repo, char ***names, size_t *n, df_error_t *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(repo);
    if (!d)
        return df_error_set(err, errno == ENOENT ? DF_ENOTFOUND : DF_EIO,
                            "repository %s: %s", repo, strerror(errno));
    size_t cap = 0, cnt = 0;
    char **v = NULL;
    struct dirent *de;
    int rc = DF_OK;
    while ((de = readdir(d))) {
        if (!valid_name(de->d_name)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/config.json", repo, de->d_name);
        if (!is_file(path)) continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) { rc = DF_ENOMEM; break; }
            v = nv;
        }
        if (!(v[cnt] = strdup(de->d_name))) { rc = DF_ENOMEM; break; }
        cnt++;
    }
    closedir(d);
    if (rc) {
        df_repo_names_free(&v, cnt);
        return df_error_set(err, rc, "repository %s: out of memory", repo);
    }
    if (cnt) qsort(v, cnt, sizeof *v, cmp_str);
    *names = v;
    *n = cnt;
    return DF_OK;
}

void df_model_config_free(df_model_config_t *cfg)
{
    if (!cfg) return;
    free(cfg->params_json);
    for (int c = 0; c < cfg->n_characters; c++)
        for (int i = 0; i < cfg->characters[c].n_defaults; i++)
            free(cfg->characters[c].defaults[i].data);
    free(cfg->characters);
    memset(cfg, 0, sizeof *cfg);
}

/* Integer key with range; absent keeps *out. */
static int get_int(json_t *root, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, const char *where, df_error_t *err)
{
    json_t *v = json_object_get(root, key);
    if (!v) return DF_OK;
    if (!json_is_integer(v))
        return df_error_set(err, DF_EINVAL, "%s: \"%s\" must be an integer",
                            where, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return df_error_set(err, DF_EINVAL,
                            "%s: \"%s\" = %lld out of range [%lld, %lld]", where,
                            key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return DF_OK;
}

/* Flattens nested arrays of numbers into buf (count in *n, cap floats). */
static int flatten(json_t *v, float *buf, size_t cap, size_t *n, int depth)
{
    if (json_is_number(v)) {
        if (*n >= cap) return DF_ELIMIT;
        double x = json_number_value(v);
        if (!(x >= -3.4e38 && x <= 3.4e38)) return DF_EINVAL;
        if (buf) buf[*n] = (float)x;
        (*n)++;
        return DF_OK;
    }
    if (!json_is_array(v) || depth > DF_MAX_DIMS) return DF_EINVAL;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        int rc = flatten(e, buf, cap, n, depth + 1);
        if (rc) return rc;
    }
    return DF_OK;
}

static int parse_character(df_character_t *ch, const char *cname, json_t *v,
                           const char *where, df_error_t *err)
{
    if (!valid_name(cname))
        return df_error_set(err, DF_EINVAL, "%s: bad character name '%.80s'",
                            where, cname);
    snprintf(ch->name, sizeof ch->name, "%s", cname);
    snprintf(ch->encoding, sizeof ch->encoding, "float32");
    if (!json_is_object(v))
        return df_error_set(err, DF_EINVAL, "%s: character '%s' is not an object",
                            where, cname);
    json_t *defs = json_object_get(v, "defaults");
    if (defs) {
        if (!json_is_object(defs))
            return df_error_set(err, DF_EINVAL,
                                "%s: character '%s': \"defaults\" is not an "
                                "object", where, cname);
        if (json_object_size(defs) > DF_MAX_IO)
            return df_error_set(err, DF_ELIMIT,
                                "%s: character '%s': more than %d defaults",
                                where, cname, DF_MAX_IO);
        const char *in;
        json_t *arr;
        json_object_foreach(defs, in, arr) {
            df_char_default_t *d = &ch->defaults[ch->n_defaults];
            if (!*in || strlen(in) >= DF_NAME_MAX)
                return df_error_set(err, DF_EINVAL,
                                    "%s: character '%s': bad input name in "
                                    "defaults", where, cname);
            size_t n = 0;
            int rc = flatten(arr, NULL, REPO_MAX_DEFAULT_FLOATS, &n, 0);
            if (rc)
                return df_error_set(err, rc == DF_ELIMIT ? DF_ELIMIT : DF_EINVAL,
                                    "%s: character '%s': default '%s' must be "
                                    "a (nested) array of finite numbers%s",
                                    where, cname, in,
                                    rc == DF_ELIMIT ? " (too many)" : "");
            snprintf(d->input, sizeof d->input, "%s", in);
            d->data = malloc((n ? n : 1) * sizeof(float));
            if (!d->data) return df_error_set(err, DF_ENOMEM, "out of memory");
            d->n = 0;
            flatten(arr, d->data, n, &d->n, 0);
            ch->n_defaults++;
        }
    }
    json_t *sk = json_object_get(v, "skinning");
    if (sk) {
        const char *s = json_string_value(sk);
        if (s && strcmp(s, "lbs") == 0) ch->flags = DF_POSE_LBS;
        else if (s && strcmp(s, "dqs") == 0) ch->flags = DF_POSE_DQS;
        else
            return df_error_set(err, DF_EINVAL,
                                "%s: character '%s': \"skinning\" must be "
                                "\"lbs\" or \"dqs\"", where, cname);
    }
    json_t *enc = json_object_get(v, "encoding");
    if (enc) {
        const char *s = json_string_value(enc);
        if (!s || (strcmp(s, "float32") && strcmp(s, "float16") &&
                   strcmp(s, "int16")))
            return df_error_set(err, DF_EINVAL,
                                "%s: character '%s': \"encoding\" must be "
                                "\"float32\", \"float16\" or \"int16\"", where,
                                cname);
        snprintf(ch->encoding, sizeof ch->encoding, "%s", s);
    }
    return DF_OK;
}

/* Parses config JSON text (exposed for the fuzzer through
 * df__repo_parse_config). */
int df__repo_parse_config(const char *text, size_t len, const char *name,
                          df_model_config_t *cfg, df_error_t *err);
int df__repo_parse_config(const char *text, size_t len, const char *name,
                          df_model_config_t *cfg, df_error_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->name, sizeof cfg->name, "%s", name ? name : "");
    cfg->max_batch_size = 32;
    cfg->max_queue_delay_us = 500;
    cfg->max_queue_length = 1024;
    cfg->timeout_us = 10000000;
    cfg->inline_max_us = 20;
    char where[DF_NAME_MAX + 32];
    snprintf(where, sizeof where, "%s/config.json", cfg->name);

    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return df_error_set(err, DF_EINVAL, "%s: not valid JSON: %s (line %d)",
                            where, je.text, je.line);
    int rc = DF_OK;
    int64_t x;
    if (!json_is_object(root)) {
        rc = df_error_set(err, DF_EINVAL, "%s: not a JSON object", where);
        goto fail;
    }
    json_t *k = json_object_get(root, "kind");
    if (!json_is_string(k) || !*json_string_value(k) ||
        strlen(json_string_value(k)) >= sizeof cfg->kind) {
        rc = df_error_set(err, DF_EINVAL, "%s: \"kind\" must be a non-empty "
                          "string", where);
        goto fail;
    }
    snprintf(cfg->kind, sizeof cfg->kind, "%s", json_string_value(k));
    json_t *p = json_object_get(root, "parameters");
    if (p && !json_is_null(p)) {
        if (!json_is_object(p)) {
            rc = df_error_set(err, DF_EINVAL, "%s: \"parameters\" must be an "
                              "object", where);
            goto fail;
        }
        cfg->params_json = json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!cfg->params_json) {
            rc = df_error_set(err, DF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    x = cfg->max_batch_size;
    if ((rc = get_int(root, "max_batch_size", 1, 65536, &x, where, err))) goto fail;
    cfg->max_batch_size = (int)x;
    if ((rc = get_int(root, "max_queue_delay_us", 0, 60000000,
                      &cfg->max_queue_delay_us, where, err)))
        goto fail;
    x = cfg->max_queue_length;
    if ((rc = get_int(root, "max_queue_length", 1, 1 << 24, &x, where, err)))
        goto fail;
    cfg->max_queue_length = (int)x;
    if ((rc = get_int(root, "timeout_us", 1, (int64_t)3600 * 1000000,
                      &cfg->timeout_us, where, err)))
        goto fail;
    if ((rc = get_int(root, "inline_max_us", 0, 1000000, &cfg->inline_max_us, where, err)))
        goto fail;

    json_t *chars = json_object_get(root, "characters");
    if (chars && !json_is_null(chars)) {
        if (!json_is_object(chars)) {
            rc = df_error_set(err, DF_EINVAL, "%s: \"characters\" must be an "
                              "object", where);
            goto fail;
        }
        size_t nc = json_object_size(chars);
        if (nc > REPO_MAX_CHARACTERS) {
            rc = df_error_set(err, DF_ELIMIT, "%s: %zu characters (limit %d)",
                              where, nc, REPO_MAX_CHARACTERS);
            goto fail;
        }
        cfg->characters = calloc(nc ? nc : 1, sizeof *cfg->characters);
        if (!cfg->characters) {
            rc = df_error_set(err, DF_ENOMEM, "out of memory");
            goto fail;
        }
        const char *cn;
        json_t *cv;
        json_object_foreach(chars, cn, cv) {
            df_character_t *ch = &cfg->characters[cfg->n_characters++];
            if ((rc = parse_character(ch, cn, cv, where, err))) goto fail;
        }
    }
    json_decref(root);
    return DF_OK;
fail:
    json_decref(root);
    df_model_config_free(cfg);
    return rc;
}

int df_repo_read_config(const char *repo, const char *name,
                        df_model_config_t *out, df_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (!valid_name(name))
        return df_error_set(err, DF_EINVAL, "bad model name '%.80s'",
                            name ? name : "(null)");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/config.json", repo, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return df_error_set(err, errno == ENOENT ? DF_ENOTFOUND : DF_EIO,
                            "%s: %s", path, strerror(errno));
    char *buf = malloc(REPO_MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(f);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    size_t n = fread(buf, 1, REPO_MAX_CONFIG_BYTES + 1, f);
    int rerr = ferror(f);
    fclose(f);
    int rc;
    if (rerr)
        rc = df_error_set(err, DF_EIO, "%s: read error", path);
    else if (n > REPO_MAX_CONFIG_BYTES)
        rc = df_error_set(err, DF_ELIMIT, "%s: larger than %u bytes", path,
                          REPO_MAX_CONFIG_BYTES);
    else
        rc = df__repo_parse_config(buf, n, name, out, err);
    free(buf);
    return rc;
}

static int cmp_ver_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Appends line and a newline to *s (s may be NULL: nothing to do).
 * Returns DF_OK or DF_ENOMEM (*s unchanged). */
static int append(char **s, const char *line)
{
    if (!s) return DF_OK;
    size_t a = *s ? strlen(*s) : 0, b = strlen(line);
    char *n = realloc(*s, a + b + 2);
    if (!n) return DF_ENOMEM;
    memcpy(n + a, line, b);
    n[a + b] = '\n';
    n[a + b + 1] = 0;
    *s = n;
    return DF_OK;
}

/* df_repo_load with the model's configuration given as JSON text instead
 * of REPO/<name>/config.json (config_text NULL: the file). The daemon's
 * repository API uses it for a load request's parameters.config. */
int df__repo_load_with(const char *repo, const char *name, const char *config_text,
                       size_t config_len, const df_limits_t *lim, df_model_t **out,
                       df_model_config_t *cfg_out, char **skipped, df_error_t *err);

int df_repo_load(const char *repo, const char *name, const df_limits_t *lim,
                 df_model_t **out, df_model_config_t *cfg_out, char **skipped,
                 df_error_t *err)
{
    return df__repo_load_with(repo, name, NULL, 0, lim, out, cfg_out, skipped, err);
}

int df__repo_load_with(const char *repo, const char *name, const char *config_text,
                       size_t config_len, const df_limits_t *lim, df_model_t **out,
                       df_model_config_t *cfg_out, char **skipped, df_error_t *err)
{
    *out = NULL;
    if (skipped) *skipped = NULL;
    if (cfg_out) memset(cfg_out, 0, sizeof *cfg_out);
    df_model_config_t cfg;
    int rc;
    if (!config_text) {
        rc = df_repo_read_config(repo, name, &cfg, err);
    } else if (!valid_name(name)) {
        memset(&cfg, 0, sizeof cfg);
        rc = df_error_set(err, DF_EINVAL, "bad model name '%.80s'", name ? name : "(null)");
    } else if (config_len > REPO_MAX_CONFIG_BYTES) {
        memset(&cfg, 0, sizeof cfg);
        rc = df_error_set(err, DF_ELIMIT, "%s: configuration larger than %u bytes", name,
                          REPO_MAX_CONFIG_BYTES);
    } else {
        rc = df__repo_parse_config(config_text, config_len, name, &cfg, err);
    }
    if (rc) return rc;

    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/%s", repo, name) >= (int)sizeof dir) {
        df_model_config_free(&cfg);
        return df_error_set(err, DF_EINVAL, "repository path too long");
    }
    DIR *d = opendir(dir);
    if (!d) {
        rc = df_error_set(err, DF_EIO, "%s: %s", dir, strerror(errno));
        df_model_config_free(&cfg);
        return rc;
    }
    int64_t *vers = NULL;
    size_t nv = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *s = de->d_name;
        size_t L = strlen(s);
        if (L == 0 || L > 18 || (L > 1 && s[0] == '0')) continue;
        int digits = 1;
        for (size_t i = 0; i < L; i++)
            if (!isdigit((unsigned char)s[i])) digits = 0;
        if (!digits) continue;
        char vp[4096];
        if (snprintf(vp, sizeof vp, "%s/%s", dir, s) >= (int)sizeof vp ||
            !is_dir(vp))
            continue;
        if (nv == cap) {
            size_t nc = cap ? 2 * cap : 8;
            int64_t *n2 = realloc(vers, nc * sizeof *n2);
            if (!n2) {
                rc = DF_ENOMEM;
                break;
            }
            vers = n2;
            cap = nc;
        }
        vers[nv++] = strtoll(s, NULL, 10);
    }
    closedir(d);
    if (rc) {
        free(vers);
        df_model_config_free(&cfg);
        return df_error_set(err, rc, "model '%s': out of memory listing the versions in %s",
                            name, dir);
    }
    if (nv) qsort(vers, nv, sizeof *vers, cmp_ver_desc);

    df_model_t *m = NULL;
    int last_rc = DF_ENOTFOUND;
    df_error_t first = {0};
    for (size_t i = 0; i < nv && !m; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%lld/model.safetensors", dir,
                 (long long)vers[i]);
        df_error_t e = {0};
        int r = df_model_open(path, cfg.kind, cfg.params_json, lim, &m, &e);
        if (r == DF_ENOMEM) {
            /* says nothing about the version: an older one is no answer */
            rc = df_error_set(err, r, "model '%s' version %lld: %.400s", name,
                              (long long)vers[i], e.msg);
            free(vers);
            df_model_config_free(&cfg);
            return rc;
        }
        if (r) {
            char line[700];
            snprintf(line, sizeof line, "%s version %lld skipped: %s", name,
                     (long long)vers[i], e.msg);
            if (append(skipped, line)) {
                free(vers);
                df_model_config_free(&cfg);
                return df_error_set(err, DF_ENOMEM, "model '%s': out of memory recording "
                                    "the skipped versions", name);
            }
            if (last_rc == DF_ENOTFOUND && first.code == 0) first = e;
            last_rc = r;
            m = NULL;
        } else {
            df_model_set_identity(m, name, vers[i]);
        }
    }
    if (!m) {
        if (nv == 0)
            rc = df_error_set(err, DF_ENOTFOUND,
                              "model '%s': no version directory in %s", name,
                              dir);
        else
            rc = df_error_set(err, last_rc,
                              "model '%s': none of %zu versions loads; "
                              "version %lld: %.400s", name, nv,
                              (long long)vers[0], first.msg);
        free(vers);
        df_model_config_free(&cfg);
        return rc;
    }
    free(vers);
    *out = m;
    if (cfg_out)
        *cfg_out = cfg;
    else
        df_model_config_free(&cfg);
    return DF_OK;
}

/* import_util.c — small helpers shared by bin/deform's asset-side subcommands.
 *
 * A MODEL argument is either a model directory REPO/NAME (with config.json; loaded through
 * df_repo_load on REPO so the tool sees exactly what the daemon would serve), a version
 * directory REPO/NAME/<v> (its model.safetensors), or a bare .safetensors file whose
 * __metadata__ "kind" says how to load it.
 */
#include "import.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int64_t df__tool_latest_version(const char *model_dir)
{
    DIR *d = opendir(model_dir);
    if (!d) return 0;
    int64_t best = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (!e->d_name[0] || e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        long long v = strtoll(e->d_name, &end, 10);
        if (*end) continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", model_dir, e->d_name);
        if (is_dir(p) && v > best) best = v;
    }
    closedir(d);
    return best;
}

int df__tool_mkdirs(const char *path, df_error_t *err)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return df_error_set(err, DF_EINVAL, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return df_error_set(err, DF_EIO, "%s: cannot create directory: %s", buf,
                                    strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return DF_OK;
}

int df__tool_open_model(const char *arg, df_model_t **out, char *path_out, size_t n,
                        df_error_t *err)
{
    *out = NULL;
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", arg) >= (int)sizeof buf)
        return df_error_set(err, DF_EINVAL, "path too long: %s", arg);
    size_t L = strlen(buf);
    while (L > 1 && buf[L - 1] == '/') buf[--L] = 0;
    if (is_dir(buf)) {
        char cfg[PATH_MAX + 16], st_path[PATH_MAX + 24];
        snprintf(cfg, sizeof cfg, "%s/config.json", buf);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", buf);
        if (stat(cfg, &(struct stat){0}) != 0 && stat(st_path, &(struct stat){0}) == 0)
            return df__tool_open_model(st_path, out, path_out, n, err); /* a version directory */
        char *slash = strrchr(buf, '/');
        const char *repo = ".", *name = buf;
        if (slash) {
            *slash = 0;
            repo = slash == buf ? "/" : buf;
            name = slash + 1;
        }
        char *skipped = NULL;
        int rc = df_repo_load(repo, name, NULL, out, NULL, &skipped, err);
        if (skipped && *skipped) fprintf(stderr, "deform: skipped versions: %s\n", skipped);
        free(skipped);
        if (rc) return rc;
        if (path_out)
            snprintf(path_out, n, "%s/%s/%lld/model.safetensors", repo, name,
                     (long long)df_model_version(*out));
        return DF_OK;
    }
    df_st_t *st = NULL;
    int rc = df_st_open(buf, NULL, &st, err);
    if (rc) return rc;
    const char *kind = df_st_meta(st, "kind");
    char kbuf[64];
    snprintf(kbuf, sizeof kbuf, "%s", kind ? kind : "");
    df_st_close(&st);
    if (!kbuf[0])
        return df_error_set(err, DF_EFORMAT, "%s: no \"kind\" in __metadata__; not a model file",
                            buf);
    rc = df_model_open(buf, kbuf, NULL, NULL, out, err);
    if (rc) return rc;
    if (path_out) snprintf(path_out, n, "%s", buf);
    return DF_OK;
}

/* cmd_info.c — `deform info`: describe a model (REPO/NAME) or a .safetensors file.
 *
 *   deform info MODEL|FILE [--all]
 *
 * Prints the file's tensors (name, dtype, shape) and __metadata__ (long values shortened unless
 * --all), then, when the file names a kind that loads, the model as the daemon sees it:
 * inputs/outputs, mesh size and bounding box, joints (with parents when the file has them),
 * morphs, clips with key counts and durations. A file that does not validate is reported with
 * the loader's message and exit 1.
 */
#include "import.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void print_meta(const char *path, int all)
{
    /* df_st_t has no metadata iterator: read the header again (it validated already) */
    FILE *f = fopen(path, "rb");
    if (!f) return;
    unsigned char lenb[8];
    if (fread(lenb, 1, 8, f) != 8) { fclose(f); return; }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | lenb[i];
    if (n > (64u << 20)) { fclose(f); return; }
    char *h = malloc(n + 1);
    if (!h || fread(h, 1, n, f) != n) { free(h); fclose(f); return; }
    fclose(f);
    h[n] = 0;
    json_t *j = json_loads(h, 0, NULL);
    free(h);
    json_t *md = j ? json_object_get(j, "__metadata__") : NULL;
    if (json_is_object(md)) {
        printf("metadata:\n");
        const char *k;
        json_t *v;
        json_object_foreach(md, k, v) {
            const char *s = json_string_value(v);
            if (!s) continue;
            if (!all && strlen(s) > 100) printf("  %-16s %.96s... (%zu chars)\n", k, s, strlen(s));
            else printf("  %-16s %s\n", k, s);
        }
    }
    json_decref(j);
}

static void print_desc(const df_io_desc_t *d)
{
    printf("  %-20s %s [", d->name, df_dtype_name(d->dtype));
    for (int i = 0; i < d->ndim; i++) printf("%s%lld", i ? "," : "", (long long)d->shape[i]);
    printf("]%s\n", d->optional ? " optional" : "");
}

int cmd_info(int argc, char **argv)
{
    const char *arg = NULL;
    int all = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--all")) all = 1;
        else if (argv[i][0] == '-') { fprintf(stderr, "usage: deform info MODEL|FILE [--all]\n"); return 2; }
        else arg = argv[i];
    }
    if (!arg) { fprintf(stderr, "usage: deform info MODEL|FILE [--all]\n"); return 2; }
    df_error_t err = {0};
    df_model_t *m = NULL;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", arg);
    int mrc = df__tool_open_model(arg, &m, path, sizeof path, &err);
    df_st_t *st = NULL;
    df_error_t e2 = {0};
    if (df_st_open(path, NULL, &st, &e2)) {
        fprintf(stderr, "deform info: %s\n", mrc ? err.msg : e2.msg);
        df_model_unref(&m);
        return 1;
    }
    printf("file: %s\ntensors: %zu\n", path, df_st_count(st));
    size_t nt = df_st_count(st);
    for (size_t i = 0; i < nt; i++) {
        if (!all && nt > 40 && i == 30) { printf("  ... %zu more (--all)\n", nt - 30); break; }
        const df_tensor_t *t = df_st_at(st, i);
        printf("  %-28s %-4s [", t->name, df_dtype_name(t->dtype));
        for (int k = 0; k < t->ndim; k++) printf("%s%lld", k ? "," : "", (long long)t->shape[k]);
        printf("]\n");
    }
    print_meta(path, all);
    if (mrc) {
        fprintf(stderr, "deform info: the model does not load: %s\n", err.msg);
        df_st_close(&st);
        return 1;
    }
    printf("model: kind %s", df_model_kind(m));
    if (df_model_name(m) && *df_model_name(m))
        printf(", name %s, version %lld", df_model_name(m), (long long)df_model_version(m));
    printf("\ninputs:\n");
    for (int i = 0; i < df_model_n_inputs(m); i++) print_desc(df_model_input(m, i));
    printf("outputs:\n");
    for (int i = 0; i < df_model_n_outputs(m); i++) print_desc(df_model_output(m, i));
    float lo[3], hi[3];
    df_model_bbox(m, lo, hi);
    printf("mesh: %lld vertices, %lld triangles, bbox [%g %g %g] .. [%g %g %g]\n",
           (long long)df_model_n_vertices(m), (long long)df_model_n_triangles(m), lo[0], lo[1],
           lo[2], hi[0], hi[1], hi[2]);
    const df_tensor_t *par = df_st_find(st, "joint_parents");
    static const char *lists[] = {"joints", "morphs", "controls"};
    for (int l = 0; l < 3; l++) {
        const char *const *names;
        size_t n = df_model_names(m, lists[l], &names);
        if (!n) continue;
        printf("%s: %zu\n", lists[l], n);
        for (size_t i = 0; i < n; i++) {
            if (!all && i == 64) { printf("  ... %zu more (--all)\n", n - 64); break; }
            if (l == 0 && par && par->dtype == DF_DT_I32 && (int64_t)i < df_tensor_numel(par)) {
                int p = ((const int32_t *)par->data)[i];
                printf("  %3zu %-32s parent %d%s%s\n", i, names[i], p, p >= 0 ? " " : "",
                       p >= 0 && (size_t)p < n ? names[p] : "");
            } else {
                printf("  %3zu %s\n", i, names[i]);
            }
        }
    }
    size_t nc = df_model_clip_count(m);
    printf("clips: %zu\n", nc);
    for (size_t c = 0; c < nc; c++) {
        df_clip_info_t ci;
        if (df_model_clip_info(m, c, &ci)) continue;
        printf("  %-24s %6lld keys  %.4g s\n", ci.name, (long long)ci.n_keys,
               ci.n_keys ? (double)(ci.times[ci.n_keys - 1] - ci.times[0]) : 0.0);
    }
    df_st_close(&st);
    df_model_unref(&m);
    return 0;
}

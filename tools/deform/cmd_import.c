/* cmd_import.c — `deform import`: a real asset becomes a `rigged` model in a repository.
 *
 *   deform import ASSET --repository DIR --name NAME [--skinning lbs|dqs]
 *                 [--units m|cm|mm|km|in|ft] [--scale S] [--up y|z|-z|x|-x|-y]
 *                 [--morphs-per-mesh]
 *   deform import CLIPS.bvh --repository DIR --clips-for MODEL [--name NAME]
 *
 * The first form reads ASSET with assimp (import_scene.c) and writes DIR/NAME/config.json
 * (created when absent; an existing one is kept so hand-written characters survive) and
 * DIR/NAME/<latest+1>/model.safetensors with df_rigged_write. The second form reads only the
 * animations of CLIPS (BVH, or any file assimp animates), maps its joints onto MODEL's by name
 * (import_bvh.c) and writes a new version of MODEL (or of NAME, which gets MODEL's config)
 * holding MODEL's data plus the new clips. A summary goes to stdout; errors to stderr, exit 1;
 * usage errors exit 2. --max-memory MB caps the address space (default: RAM, at most 8 GiB).
 * --units (the asset's length unit; served in metres), --scale (a further factor) and --up (the
 * asset's up axis; served Y-up) change the whole model (import_xform.c); the default keeps the
 * file's units and axes as assimp reports them. Morph targets of one name in several meshes
 * are one control (an avatar's head, teeth and eyes sharing `jawOpen`); --morphs-per-mesh
 * keeps every mesh's targets apart.
 */
#include "import.h"

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int usage(void)
{
    fprintf(stderr,
            "usage: deform import ASSET --repository DIR --name NAME [--skinning lbs|dqs]\n"
            "                     [--units m|cm|mm|km|in|ft] [--scale S] [--up y|z|-z|x|-x|-y] [--max-memory MB]\n"
            "                     [--morphs-per-mesh]\n"
            "       deform import CLIPS.bvh --repository DIR --clips-for MODEL [--name NAME]\n");
    return 2;
}

static int valid_name(const char *s)
{
    if (!*s || strlen(s) >= DF_NAME_MAX || s[0] == '.') return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return 0;
    return 1;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int copy_file(const char *src, const char *dst, df_error_t *err)
{
    FILE *in = fopen(src, "rb");
    if (!in) return df_error_set(err, DF_EIO, "%s: %s", src, strerror(errno));
    FILE *o = fopen(dst, "wb");
    if (!o) { fclose(in); return df_error_set(err, DF_EIO, "%s: %s", dst, strerror(errno)); }
    char buf[8192];
    size_t n;
    int rc = DF_OK;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, o) != n) { rc = df_error_set(err, DF_EIO, "%s: write failed", dst); break; }
    fclose(in);
    if (fclose(o) && !rc) rc = df_error_set(err, DF_EIO, "%s: write failed", dst);
    return rc;
}

static int write_config(const char *dir, df_error_t *err)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (file_exists(p)) return DF_OK;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (!f) return df_error_set(err, DF_EIO, "%s: %s", tmp, strerror(errno));
    fprintf(f, "{\n  \"kind\": \"rigged\",\n  \"parameters\": {},\n  \"max_batch_size\": 32,\n"
               "  \"max_queue_delay_us\": 500\n}\n");
    if (fclose(f) || rename(tmp, p))
        return df_error_set(err, DF_EIO, "%s: cannot write", p);
    return DF_OK;
}

/* A hostile file can declare billions of vertices (assimp's invalid/OutOfMemory.off): assimp
 * then allocates and touches tens of GB before failing. Cap this process's address space at
 * --max-memory MB (default: physical RAM, at most 8 GiB) so such a file fails fast with std::bad_alloc,
 * which assimp reports as an ordinary read error. */
static void cap_memory(long long mb)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    (void)mb; /* sanitizers reserve terabytes of shadow address space: no cap */
    return;
#endif
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0) return;
    unsigned long long want;
    if (mb > 0) want = (unsigned long long)mb << 20;
    else {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || psz <= 0) return;
        want = (unsigned long long)pages * (unsigned long long)psz;
        if (want > (8ull << 30)) want = 8ull << 30; /* enough for max_vertices (10M) */
    }
    if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
    if (rl.rlim_cur == RLIM_INFINITY || want < rl.rlim_cur) {
        rl.rlim_cur = want;
        setrlimit(RLIMIT_AS, &rl);
    }
}

int cmd_import(int argc, char **argv)
{
    const char *asset = NULL, *repo = NULL, *name = NULL, *skin = "lbs", *clips_for = NULL;
    long long max_mb = 0;
    int per_mesh = 0;
    const char *units = NULL, *up = NULL, *scale_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--repository") && more) repo = argv[++i];
        else if (!strcmp(a, "--name") && more) name = argv[++i];
        else if (!strcmp(a, "--skinning") && more) skin = argv[++i];
        else if ((!strcmp(a, "--clips-for") || !strcmp(a, "--clips-only-for")) && more)
            clips_for = argv[++i];
        else if (!strcmp(a, "--max-memory") && more) max_mb = atoll(argv[++i]);
        else if (!strcmp(a, "--units") && more) units = argv[++i];
        else if (!strcmp(a, "--up") && more) up = argv[++i];
        else if (!strcmp(a, "--scale") && more) scale_s = argv[++i];
        else if (!strcmp(a, "--morphs-per-mesh")) per_mesh = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "deform import: unknown or incomplete option '%s'\n", a);
            return usage();
        } else if (!asset) asset = a;
        else { fprintf(stderr, "deform import: unexpected argument '%s'\n", a); return usage(); }
    }
    if (!asset || !repo || (!name && !clips_for)) return usage();
    if (!name) name = clips_for;
    if (!valid_name(name) || (clips_for && !valid_name(clips_for))) {
        fprintf(stderr, "deform import: model name '%s' must be 1-63 characters of [A-Za-z0-9_.-] "
                        "not starting with '.'\n", clips_for && !valid_name(clips_for) ? clips_for : name);
        return 2;
    }
    if (strcmp(skin, "lbs") && strcmp(skin, "dqs")) {
        fprintf(stderr, "deform import: --skinning must be lbs or dqs, not '%s'\n", skin);
        return 2;
    }
    double xs = 1, xa[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    if (units && df__import_units_scale(units, &xs)) {
        fprintf(stderr, "deform import: --units must be m, cm, mm, km, in or ft, not '%s'\n", units);
        return 2;
    }
    if (scale_s) {
        char *e = NULL;
        double f = strtod(scale_s, &e);
        if (!e || *e || !(f > 0) || !isfinite(f)) {
            fprintf(stderr, "deform import: --scale must be a positive number, not '%s'\n", scale_s);
            return 2;
        }
        xs *= f;
    }
    if (up && df__import_up_matrix(up, xa)) {
        fprintf(stderr, "deform import: --up must be y, z, -z, x, -x or -y, not '%s'\n", up);
        return 2;
    }
    if (clips_for && (units || scale_s || up)) {
        fprintf(stderr, "deform import: --units/--scale/--up apply to a whole asset, not to "
                        "--clips-for (clips take their model's units and axes)\n");
        return 2;
    }
    if (clips_for && per_mesh) {
        fprintf(stderr, "deform import: --morphs-per-mesh applies to a whole asset, not to "
                        "--clips-for (clips take their model's morph targets)\n");
        return 2;
    }
    cap_memory(max_mb);
    df_error_t err = {0};
    char dir[PATH_MAX], vdir[PATH_MAX + 32], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);

    if (clips_for) {
        char src_dir[PATH_MAX], src[PATH_MAX + 64];
        snprintf(src_dir, sizeof src_dir, "%s/%s", repo, clips_for);
        int64_t sv = df__tool_latest_version(src_dir);
        if (sv <= 0) {
            fprintf(stderr, "deform import: model '%s' has no version in %s\n", clips_for, repo);
            return 1;
        }
        snprintf(src, sizeof src, "%s/%lld/model.safetensors", src_dir, (long long)sv);
        int64_t v = df__tool_latest_version(dir) + 1;
        snprintf(vdir, sizeof vdir, "%s/%lld", dir, (long long)v);
        snprintf(path, sizeof path, "%s/model.safetensors", vdir);
        int rc = df__tool_mkdirs(vdir, &err);
        if (!rc && strcmp(name, clips_for)) {
            char a[PATH_MAX + 16], b[PATH_MAX + 16];
            snprintf(a, sizeof a, "%s/config.json", src_dir);
            snprintf(b, sizeof b, "%s/config.json", dir);
            if (!file_exists(b)) rc = copy_file(a, b, &err);
        }
        if (!rc) rc = df__import_clips_for(asset, src, path, stdout, &err);
        if (rc) {
            fprintf(stderr, "deform import: %s\n", err.msg);
            rmdir(vdir);
            return 1;
        }
        printf("wrote %s (version %lld of '%s': '%s' plus the clips of %s)\n", path, (long long)v,
               name, clips_for, asset);
        return 0;
    }

    df__import_opts_t opts = {.skinning = skin, .morphs_per_mesh = per_mesh};
    df_rigged_data_t d;
    df__import_summary_t s;
    int rc = df__import_scene(asset, &opts, &d, &s, &err);
    if (rc) {
        fprintf(stderr, "deform import: %s\n", err.msg);
        return 1;
    }
    if (units || scale_s || up) rc = df__import_transform(&d, xs, xa, &err);
    if (rc) {
        fprintf(stderr, "deform import: %s\n", err.msg);
        df__import_free(&d);
        return 1;
    }
    int64_t v = df__tool_latest_version(dir) + 1;
    snprintf(vdir, sizeof vdir, "%s/%lld", dir, (long long)v);
    snprintf(path, sizeof path, "%s/model.safetensors", vdir);
    rc = df__tool_mkdirs(vdir, &err);
    if (!rc) rc = write_config(dir, &err);
    if (!rc) rc = df_rigged_write(&d, path, &err);
    if (rc) {
        fprintf(stderr, "deform import: %s\n", err.msg);
        rmdir(vdir);
        df__import_free(&d);
        return 1;
    }
    printf("imported %s -> %s (version %lld)\n", asset, path, (long long)v);
    if (units || scale_s || up)
        printf("  converted: scale %g, up axis %s -> +y\n", xs, up ? up : "y");
    printf("  vertices %lld, triangles %lld, meshes %d (%d bound rigidly)%s\n",
           (long long)d.n_vertices, (long long)d.n_triangles, s.n_meshes, s.n_rigid_meshes,
           s.static_first_frame ? ", static: first frame of a vertex-animated format" : "");
    printf("  joints %lld (%d bones), influences %lld, morphs %lld, skinning %s\n",
           (long long)d.n_joints, s.n_bones, (long long)d.n_influences, (long long)d.n_morphs,
           d.skinning);
    if (s.n_shared_morphs)
        printf("  morph targets joined by name to another mesh's control: %d "
               "(--morphs-per-mesh keeps them apart)\n", s.n_shared_morphs);
    if (s.n_morph_conflicts)
        printf("  warning: shared morph controls a clip animates differently in their meshes: %d "
               "(each takes its first mesh's curve; --morphs-per-mesh keeps them apart)\n",
               s.n_morph_conflicts);
    if (s.n_skipped_faces) printf("  dropped %ld point/line primitives\n", s.n_skipped_faces);
    if (s.n_inconsistent_binds)
        printf("  warning: %d bones have offset matrices that disagree between meshes\n",
               s.n_inconsistent_binds);
    if (s.n_missing_bones)
        printf("  warning: %d bones have no node; their vertices follow their mesh's node\n",
               s.n_missing_bones);
    if (s.n_ignored_channels)
        printf("  %d animation channels target nodes that move no vertex (ignored)\n",
               s.n_ignored_channels);
    printf("  clips %zu\n", d.n_clips);
    for (size_t c = 0; c < d.n_clips; c++) {
        const df_rigged_clip_t *cl = &d.clips[c];
        printf("    %-24s %6lld frames  %.4g s%s%s\n", cl->name, (long long)cl->n_keys,
               cl->n_keys ? (double)(cl->times[cl->n_keys - 1] - cl->times[0]) : 0.0,
               cl->matrices ? "  (world matrices: animated scale)" : "",
               cl->weights ? "  (morph weights)" : "");
    }
    printf("next: a running deformd on %s picks it up with `kill -HUP <pid>` or\n"
           "  `curl -X POST localhost:8000/v2/repository/models/%s/load` (docs/own-character.md)\n",
           repo, name);
    df__import_free(&d);
    return 0;
}

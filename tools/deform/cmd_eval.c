/* cmd_eval.c — `deform eval`: evaluate a model's clip offline into a .npy.
 *
 *   deform eval MODEL [--clip NAME] [--fps R] [--frames a:b] [--times t0,t1,...]
 *               [--skinning lbs|dqs] [--batch B] [--normals FILE] [--rest|--bind]
 *               [--input NAME=FILE.npy ...] --out FILE.npy
 *
 * MODEL is REPO/NAME or a .safetensors file (import_util.c). Frame times, in seconds since
 * the clip's first key (df_model_clip_sample's convention):
 *   default      the clip's own key times;
 *   --fps R      k/R for k = 0 .. floor(duration*R);
 *   --times ...  exactly these (how the golden tests ask for Blender's frames);
 *   --frames a:b keeps frames a..b-1 of that list (Python slice; either bound may be empty).
 * --input NAME=FILE.npy (repeatable) gives model input NAME per frame from a
 * float32 array [F, ...] whose trailing dimensions hold the input's element
 * count (e.g. joint_matrices [F,J,12] or [F,J*12]); it overrides the clip
 * for that input. With inputs and no --clip/--times, F is the arrays' first
 * dimension and no clip is sampled; with a clip, the frame counts must agree.
 * Without --clip the first clip is used; a model without clips evaluates its default pose
 * once; --rest writes the model's rest mesh [1,N,3] (the default pose, in
 * output space) without evaluating; --bind writes the file's bind-space
 * `positions` [1,N,3] (before skinning).
 * Poses go to df_model_evaluate in batches of B (default 32) straight into the output array:
 * the same batch-first path the daemon uses. Output: float32 [F,N,3] (df_npy_write_f32).
 */
#include "import.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: deform eval MODEL [--clip NAME] [--fps R] [--frames a:b] "
                    "[--times t0,t1,...] [--skinning lbs|dqs] [--batch B] [--normals FILE] "
                    "[--rest|--bind] [--input NAME=FILE.npy ...] --out FILE.npy\n");
    return 2;
}

static int64_t numel(const df_io_desc_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

static int parse_times(const char *s, double **out, size_t *n)
{
    size_t cap = 16, k = 0;
    double *t = malloc(cap * sizeof *t);
    if (!t) return -1;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || v < 0) { free(t); return -1; }
        if (k == cap) {
            double *q = realloc(t, (cap *= 2) * sizeof *t);
            if (!q) { free(t); return -1; }
            t = q;
        }
        t[k++] = v;
        s = end;
        if (*s == ',') s++;
        else if (*s) { free(t); return -1; }
    }
    *out = t;
    *n = k;
    return k ? 0 : -1;
}

int cmd_eval(int argc, char **argv)
{
    const char *model_arg = NULL, *clip = NULL, *frames = NULL, *times_s = NULL, *skin = NULL,
               *out = NULL, *nout = NULL;
    double fps = 0;
    int batch = 32, rest = 0, bind = 0;
    const char *user_spec[DF_MAX_IO];
    int n_user = 0;
    int user_idx[DF_MAX_IO];
    float *user_data[DF_MAX_IO] = {0};
    size_t user_F = 0, f_off = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--clip") && more) clip = argv[++i];
        else if (!strcmp(a, "--fps") && more) fps = atof(argv[++i]);
        else if (!strcmp(a, "--frames") && more) frames = argv[++i];
        else if (!strcmp(a, "--times") && more) times_s = argv[++i];
        else if (!strcmp(a, "--skinning") && more) skin = argv[++i];
        else if (!strcmp(a, "--batch") && more) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--normals") && more) nout = argv[++i];
        else if (!strcmp(a, "--out") && more) out = argv[++i];
        else if (!strcmp(a, "--rest")) rest = 1;
        else if (!strcmp(a, "--bind")) bind = 1;
        else if (!strcmp(a, "--input") && more) {
            if (n_user >= DF_MAX_IO) { fprintf(stderr, "deform eval: too many --input\n"); return 2; }
            user_spec[n_user++] = argv[++i];
        }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "deform eval: unknown or incomplete option '%s'\n", a);
            return usage();
        } else if (!model_arg) model_arg = a;
        else return usage();
    }
    if (!model_arg || !out) return usage();
    if (batch < 1 || batch > 4096) { fprintf(stderr, "deform eval: --batch must be 1..4096\n"); return 2; }
    if (fps < 0 || fps > 10000 || !isfinite(fps)) { fprintf(stderr, "deform eval: --fps must be in (0, 10000]\n"); return 2; }
    uint32_t flag = 0;
    if (skin) {
        if (!strcmp(skin, "lbs")) flag = DF_POSE_LBS;
        else if (!strcmp(skin, "dqs")) flag = DF_POSE_DQS;
        else { fprintf(stderr, "deform eval: --skinning must be lbs or dqs\n"); return 2; }
    }

    df_error_t err = {0};
    df_model_t *m = NULL;
    char path[4096] = "";
    if (df__tool_open_model(model_arg, &m, path, sizeof path, &err)) {
        fprintf(stderr, "deform eval: %s\n", err.msg);
        return 1;
    }
    int64_t N = df_model_n_vertices(m);
    int rc = 1;
    double *times = NULL;
    size_t F = 0;
    float *P = NULL, *NRM = NULL, *inbuf = NULL;
    df_scratch_t *scr = NULL;
    if (bind) { /* the file's bind-space `positions`, before any skinning */
        df_st_t *st = NULL;
        const df_tensor_t *tp = NULL;
        int64_t any[2] = {-1, 3};
        if (df_st_open(path, NULL, &st, &err) ||
            df_st_require(st, "positions", DF_DT_F32, 2, any, 0, &tp, &err)) {
            df_st_close(&st);
            goto fail;
        }
        int64_t sh[3] = {1, tp->shape[0], 3};
        rc = df_npy_write_f32(out, 3, sh, tp->data, &err) ? 1 : 0;
        if (!rc) printf("wrote %s [1,%lld,3] (bind-space mesh)\n", out, (long long)tp->shape[0]);
        df_st_close(&st);
        if (rc) goto fail;
        df_model_unref(&m);
        return 0;
    }
    if (rest) {
        int64_t sh[3] = {1, N, 3};
        if (df_npy_write_f32(out, 3, sh, df_model_rest_positions(m), &err)) goto fail;
        printf("wrote %s [1,%lld,3] (rest mesh)\n", out, (long long)N);
        df_model_unref(&m);
        return 0;
    }

    for (int k = 0; k < n_user; k++) { /* --input NAME=FILE.npy */
        const char *eq = strchr(user_spec[k], '=');
        char nm[256];
        if (!eq || eq == user_spec[k] || (size_t)(eq - user_spec[k]) >= sizeof nm || !eq[1]) {
            fprintf(stderr, "deform eval: --input wants NAME=FILE.npy, got '%s'\n", user_spec[k]);
            goto out;
        }
        memcpy(nm, user_spec[k], (size_t)(eq - user_spec[k]));
        nm[eq - user_spec[k]] = 0;
        int idx = df_model_find_input(m, nm);
        if (idx < 0) {
            fprintf(stderr, "deform eval: the model has no input '%s'; inputs:", nm);
            for (int i = 0; i < df_model_n_inputs(m); i++)
                fprintf(stderr, " %s", df_model_input(m, i)->name);
            fprintf(stderr, "\n");
            goto out;
        }
        int nd = 0;
        int64_t sh[DF_MAX_DIMS];
        if (df_npy_read_f32(eq + 1, &nd, sh, &user_data[k], &err)) goto fail;
        int64_t per_frame = 1;
        for (int d = 1; d < nd; d++) per_frame *= sh[d];
        int64_t want = numel(df_model_input(m, idx));
        if (nd < 2 || sh[0] < 1 || per_frame != want) {
            fprintf(stderr, "deform eval: %s: shape must be [F, ...] with %lld values per frame "
                            "for input '%s'\n", eq + 1, (long long)want, nm);
            goto out;
        }
        for (int64_t q = 0; q < sh[0] * per_frame; q++)
                if (!isfinite(user_data[k][q])) {
                    fprintf(stderr, "deform eval: %s: value %lld is not finite\n", eq + 1,
                            (long long)q);
                    goto out;
                }
        if (k > 0 && (size_t)sh[0] != user_F) {
            fprintf(stderr, "deform eval: --input arrays have %zu and %lld frames\n", user_F,
                    (long long)sh[0]);
            goto out;
        }
        user_F = (size_t)sh[0];
        user_idx[k] = idx;
    }

    int c = -1;
    size_t nclips = df_model_clip_count(m);
    if (n_user && !clip && !times_s) {
        /* the inputs alone: F frames, no clip */
    } else if (clip) {
        c = df_model_clip_find(m, clip);
        if (c < 0) {
            fprintf(stderr, "deform eval: no clip '%s' in %s; clips:", clip, model_arg);
            const char *const *names;
            size_t n = df_model_names(m, "clips", &names);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %s", names[i]);
            fprintf(stderr, "\n");
            goto out;
        }
    } else if (nclips > 0) c = 0;

    df_clip_info_t ci = {0};
    if (c >= 0 && df_model_clip_info(m, (size_t)c, &ci)) { fprintf(stderr, "deform eval: clip info\n"); goto out; }
    if (n_user && !clip && !times_s) {
        F = user_F;
        times = calloc(F, sizeof *times);
    } else if (times_s) {
        if (parse_times(times_s, &times, &F)) {
            fprintf(stderr, "deform eval: --times wants comma-separated non-negative seconds\n");
            goto out;
        }
    } else if (c < 0) {
        F = 1;
        times = calloc(1, sizeof *times);
    } else if (fps > 0) {
        double dur = ci.n_keys ? ci.times[ci.n_keys - 1] - ci.times[0] : 0;
        F = (size_t)floor(dur * fps + 1e-3) + 1; /* float key times: 3.5999999 s at 1000 fps is 3601 frames */
        times = malloc(F * sizeof *times);
        for (size_t k = 0; times && k < F; k++) times[k] = k / fps;
    } else {
        F = (size_t)ci.n_keys;
        times = malloc((F ? F : 1) * sizeof *times);
        for (size_t k = 0; times && k < F; k++) times[k] = ci.times[k] - ci.times[0];
    }
    if (!times || F == 0) { fprintf(stderr, "deform eval: no frames to evaluate\n"); goto out; }
    if (frames) {
        long a = 0, b = (long)F;
        const char *colon = strchr(frames, ':');
        if (!colon) { fprintf(stderr, "deform eval: --frames wants a:b\n"); goto out; }
        if (colon != frames) a = strtol(frames, NULL, 10);
        if (colon[1]) b = strtol(colon + 1, NULL, 10);
        if (a < 0) a += (long)F;
        if (b < 0) b += (long)F;
        if (a < 0) a = 0;
        if (b > (long)F) b = (long)F;
        if (a >= b) { fprintf(stderr, "deform eval: --frames %s selects nothing of %zu frames\n", frames, F); goto out; }
        memmove(times, times + a, (size_t)(b - a) * sizeof *times);
        F = (size_t)(b - a);
        f_off = (size_t)a;
    }
    if (n_user && F + f_off != user_F && !(F == user_F && f_off == 0)) {
        fprintf(stderr, "deform eval: the clip gives %zu frames, the --input arrays %zu\n",
                F + f_off, user_F);
        goto out;
    }

    df_limits_t lim;
    df_limits_default(&lim);
    if ((int64_t)F > lim.max_clip_frames || (double)F * N * 3 * 4 > 8e9) {
        fprintf(stderr, "deform eval: %zu frames x %lld vertices is too large\n", F, (long long)N);
        goto out;
    }
    int po = df_model_find_output(m, "positions");
    int no = nout ? df_model_find_output(m, "normals") : -1;
    if (po < 0) { fprintf(stderr, "deform eval: the model has no 'positions' output\n"); goto out; }
    if (nout && no < 0) { fprintf(stderr, "deform eval: the model has no 'normals' output\n"); goto out; }
    P = malloc(F * (size_t)N * 3 * sizeof *P);
    NRM = nout ? malloc(F * (size_t)N * 3 * sizeof *NRM) : NULL;
    int ni = df_model_n_inputs(m);
    size_t per = 0, off[DF_MAX_IO];
    for (int i = 0; i < ni; i++) { off[i] = per; per += (size_t)numel(df_model_input(m, i)); }
    inbuf = malloc(((size_t)batch * per + 1) * sizeof *inbuf);
    scr = df_scratch_new();
    const float **inptr = malloc((size_t)batch * DF_MAX_IO * sizeof *inptr);
    float **pptr = malloc((size_t)batch * sizeof *pptr), **nptr = malloc((size_t)batch * sizeof *nptr);
    uint32_t *flags = malloc((size_t)batch * sizeof *flags);
    if (!P || (nout && !NRM) || !inbuf || !scr || !inptr || !pptr || !nptr || !flags) {
        fprintf(stderr, "deform eval: out of memory\n");
        free(inptr); free(pptr); free(nptr); free(flags);
        goto out;
    }
    for (size_t f0 = 0; f0 < F; f0 += (size_t)batch) {
        int B = (int)((F - f0) < (size_t)batch ? F - f0 : (size_t)batch);
        df_batch_t bt;
        memset(&bt, 0, sizeof bt);
        bt.n = B;
        uint32_t any = 0;
        for (int b = 0; b < B; b++) {
            float *bufs[DF_MAX_IO] = {0};
            for (int i = 0; i < ni; i++) bufs[i] = inbuf + (size_t)b * per + off[i];
            uint32_t filled = 0;
            if (c >= 0 && df_model_clip_sample(m, c, times[f0 + b], bufs, &filled, &err)) {
                fprintf(stderr, "deform eval: frame %zu (t=%g): %s\n", f0 + b, times[f0 + b], err.msg);
                free(inptr); free(pptr); free(nptr); free(flags);
                goto out;
            }
            for (int k = 0; k < n_user; k++) {
                const df_io_desc_t *d = df_model_input(m, user_idx[k]);
                size_t nu = (size_t)numel(d);
                memcpy(bufs[user_idx[k]], user_data[k] + (f_off + f0 + b) * nu, nu * sizeof(float));
                filled |= 1u << user_idx[k];
            }
            any |= filled;
            for (int i = 0; i < ni; i++) inptr[i * batch + b] = (filled >> i & 1u) ? bufs[i] : NULL;
            pptr[b] = P + (f0 + b) * (size_t)N * 3;
            if (NRM) nptr[b] = NRM + (f0 + b) * (size_t)N * 3;
            flags[b] = flag;
        }
        for (int i = 0; i < ni; i++) bt.in[i] = (any >> i & 1u) ? inptr + (size_t)i * batch : NULL;
        bt.out[po] = pptr;
        if (no >= 0) bt.out[no] = nptr;
        bt.flags = flag ? flags : NULL;
        if (df_model_evaluate(m, &bt, scr, &err)) {
            fprintf(stderr, "deform eval: frames %zu..%zu: %s\n", f0, f0 + B - 1, err.msg);
            free(inptr); free(pptr); free(nptr); free(flags);
            goto out;
        }
        if (F > 256 && (f0 / (size_t)batch) % 8 == 7)
            fprintf(stderr, "\r  %zu/%zu frames", f0 + B, F);
    }
    if (F > 256) fprintf(stderr, "\n");
    free(inptr); free(pptr); free(nptr); free(flags);
    int64_t sh[3] = {(int64_t)F, N, 3};
    if (df_npy_write_f32(out, 3, sh, P, &err)) goto fail;
    if (NRM && df_npy_write_f32(nout, 3, sh, NRM, &err)) goto fail;
    printf("wrote %s [%zu,%lld,3]%s%s (clip %s, t %.6g..%.6g s)\n", out, F, (long long)N,
           nout ? " and " : "", nout ? nout : "", c >= 0 ? ci.name : "(none: default pose)",
           times[0], times[F - 1]);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "deform eval: %s\n", err.msg);
out:
    free(times); free(P); free(NRM); free(inbuf);
    for (int k = 0; k < n_user; k++) free(user_data[k]);
    df_scratch_free(&scr);
    df_model_unref(&m);
    return rc;
}

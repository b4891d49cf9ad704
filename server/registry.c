/* registry.c — which models are loaded and which names they serve.
 *
 * DESIGN
 * The repository (REPO/<model>/config.json + <version>/model.safetensors,
 * read by core's df_repo_*) is mirrored as one df__mentry_t per model
 * directory. A load reads and validates a new version completely OUTSIDE
 * the engine lock (it can take seconds), resolves each character's defaults
 * against the model's inputs (a default of the wrong length or for an
 * unknown input refuses the version), checks that no character name clashes
 * with another model's, and only then swaps it in under the lock. The old
 * df__loaded_t is released; queued jobs still hold their own reference.
 *
 * Refusals keep the old version serving: a version that fails validation,
 * or a load that would go backwards (the newest version is corrupt and
 * only an older one validates).
 */
#include "engine.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int64_t df__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void df__log(const char *fmt, ...)
{
    char buf[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(buf + n, sizeof buf - n, ".%03ldZ deformd: ", ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", buf);
}

df__loaded_t *df__loaded_ref(df__loaded_t *ld)
{
    atomic_fetch_add(&ld->refs, 1);
    return ld;
}

static void loaded_destroy(df__loaded_t *ld)
{
    df_model_unref(&ld->model);
    df_model_config_free(&ld->cfg);
    free(ld->char_names);
    free(ld->char_flags);
    free(ld->char_enc);
    free(ld->char_defaults);
    free(ld);
}

void df__loaded_unref(df__loaded_t **pld)
{
    df__loaded_t *ld = *pld;
    *pld = NULL;
    if (ld && atomic_fetch_sub(&ld->refs, 1) == 1) loaded_destroy(ld);
}

static int64_t desc_numel(const df_io_desc_t *d)
{
    int64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
    return n;
}

/* Build a df__loaded_t from a freshly loaded model and its config (both
 * taken). On error both are released. */
/* Time one evaluation of one pose (every input given: its default, or 0,
 * plus 0.01, so no kind can take a shortcut for default or zero inputs such
 * as skipping the morph GEMM; every output written) so that submit can run
 * requests cheaper than a thread hop on the front's thread (docs/server.md,
 * "Inline evaluation"). Min of 3 after a warm-up; a model whose warm-up
 * alone exceeds 4x the limit is not timed further; a model that refuses
 * the perturbed pose never runs inline. */
static void measure_single(df__loaded_t *ld, int64_t inline_max_us)
{
    ld->single_ns = -1;
    ld->inline_poses = 0;
    if (inline_max_us <= 0) return;
    const df_model_t *m = ld->model;
    int no = df_model_n_outputs(m);
    int ni = df_model_n_inputs(m);
    size_t tot = 0;
    for (int o = 0; o < no; o++) tot += (size_t)ld->out_numel[o];
    for (int i = 0; i < ni; i++) tot += (size_t)ld->in_numel[i];
    float *buf = malloc((tot ? tot : 1) * sizeof(float));
    df_scratch_t *sc = df_scratch_new();
    float *ptr[DF_MAX_IO];
    const float *iptr[DF_MAX_IO];
    df_batch_t b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    if (!buf || !sc) goto done;
    size_t off = 0;
    for (int o = 0; o < no; o++) {
        ptr[o] = buf + off;
        off += (size_t)ld->out_numel[o];
        b.out[o] = &ptr[o];
    }
    for (int i = 0; i < ni; i++) {
        float *x = buf + off;
        const float *def = df_model_input_default(m, i);
        for (int64_t k = 0; k < ld->in_numel[i]; k++) x[k] = (def ? def[k] : 0.0f) + 0.01f;
        off += (size_t)ld->in_numel[i];
        iptr[i] = x;
        b.in[i] = &iptr[i];
    }
    int64_t best = -1;
    for (int r = 0; r < 4; r++) {
        df_error_t e = {0};
        int64_t t0 = df__now_ns();
        if (df_model_evaluate(m, &b, sc, &e)) {
            best = -1;
            break;
        }
        int64_t dt = df__now_ns() - t0;
        if (r == 0) {
            if (dt > 4 * inline_max_us * 1000) break;
            continue;
        }
        if (best < 0 || dt < best) best = dt;
    }
    ld->single_ns = best;
    if (best >= 0) {
        int64_t n = best > 0 ? inline_max_us * 1000 / best : ld->max_batch_size;
        if (n > ld->max_batch_size) n = ld->max_batch_size;
        ld->inline_poses = (int)n;
    }
done:
    df_scratch_free(&sc);
    free(buf);
}

static int loaded_build(df_server_t *s, df_model_t *m, df_model_config_t *cfg,
                        df__loaded_t **out, df_error_t *err)
{
    const df_config_t *sc = s->cfg;
    df__loaded_t *ld = calloc(1, sizeof *ld);
    if (!ld) {
        df_model_unref(&m);
        df_model_config_free(cfg);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    atomic_init(&ld->refs, 1);
    ld->model = m;
    ld->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    int rc = DF_OK;
    int ni = df_model_n_inputs(m), no = df_model_n_outputs(m);
    for (int i = 0; i < ni; i++) ld->in_numel[i] = desc_numel(df_model_input(m, i));
    for (int o = 0; o < no; o++) ld->out_numel[o] = desc_numel(df_model_output(m, o));
    /* a kind that declares an input and an output named `state` of one
     * size (the garment's damping): sequences carry it frame to frame */
    ld->state_in = df_model_find_input(m, "state");
    ld->state_out = df_model_find_output(m, "state");
    if (ld->state_in < 0 || ld->state_out < 0 ||
        ld->in_numel[ld->state_in] != ld->out_numel[ld->state_out])
        ld->state_in = ld->state_out = -1;
    ld->state_numel = ld->state_out >= 0 ? ld->out_numel[ld->state_out] : 0;
    df_model_bbox(m, ld->lo, ld->hi);
    ld->max_batch_size = sc->max_batch_size >= 0 ? sc->max_batch_size : ld->cfg.max_batch_size;
    if (!sc->batching) ld->max_batch_size = 1;
    if (ld->max_batch_size < 1) ld->max_batch_size = 1;
    ld->max_queue_delay_us =
        sc->max_queue_delay_us >= 0 ? sc->max_queue_delay_us : ld->cfg.max_queue_delay_us;
    if (ld->max_queue_delay_us < 0) ld->max_queue_delay_us = 0;
    ld->max_queue_length =
        sc->max_queue_length >= 0 ? sc->max_queue_length : ld->cfg.max_queue_length;
    if (ld->max_queue_length < 1) ld->max_queue_length = 1;
    ld->timeout_us = sc->timeout_us >= 0 ? sc->timeout_us : ld->cfg.timeout_us;
    if (ld->timeout_us <= 0) ld->timeout_us = 10000000;
    measure_single(ld, sc->inline_max_us >= 0 ? sc->inline_max_us : ld->cfg.inline_max_us);
    ld->scratch_need = df_model_scratch_bytes(m, ld->max_batch_size);

    int nc = ld->cfg.n_characters > 0 ? ld->cfg.n_characters : 1;
    ld->n_chars = nc;
    ld->char_names = calloc((size_t)nc, sizeof *ld->char_names);
    ld->char_flags = calloc((size_t)nc, sizeof *ld->char_flags);
    ld->char_enc = calloc((size_t)nc, sizeof *ld->char_enc);
    ld->char_defaults = calloc((size_t)nc * DF_MAX_IO, sizeof *ld->char_defaults);
    if (!ld->char_names || !ld->char_flags || !ld->char_enc || !ld->char_defaults) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory");
        goto fail;
    }
    if (ld->cfg.n_characters == 0) {
        snprintf(ld->char_names[0], DF_NAME_MAX, "%s", ld->cfg.name);
        ld->char_enc[0] = DF_ENC_F32;
    }
    for (int c = 0; c < ld->cfg.n_characters; c++) {
        const df_character_t *ch = &ld->cfg.characters[c];
        snprintf(ld->char_names[c], DF_NAME_MAX, "%s", ch->name);
        for (int c2 = 0; c2 < c; c2++)
            if (!strcmp(ld->char_names[c2], ch->name)) {
                rc = df_error_set(err, DF_EINVAL, "character '%s' declared twice", ch->name);
                goto fail;
            }
        ld->char_flags[c] = ch->flags;
        df_encoding_t e = DF_ENC_F32;
        if (ch->encoding[0] && df_encoding_parse(ch->encoding, &e)) {
            rc = df_error_set(err, DF_EINVAL,
                              "character '%s': unknown encoding '%s' (float32, float16, int16)",
                              ch->name, ch->encoding);
            goto fail;
        }
        ld->char_enc[c] = e;
        for (int d = 0; d < ch->n_defaults; d++) {
            const df_char_default_t *dd = &ch->defaults[d];
            int i = df_model_find_input(m, dd->input);
            if (i < 0) {
                rc = df_error_set(err, DF_EINVAL,
                                  "character '%s': default for unknown input '%s'", ch->name,
                                  dd->input);
                goto fail;
            }
            if ((int64_t)dd->n != ld->in_numel[i]) {
                rc = df_error_set(err, DF_EINVAL,
                                  "character '%s': default for input '%s' has %zu values, "
                                  "expected %lld",
                                  ch->name, dd->input, dd->n, (long long)ld->in_numel[i]);
                goto fail;
            }
            ld->char_defaults[c * DF_MAX_IO + i] = dd->data;
        }
    }
    *out = ld;
    return DF_OK;
fail:
    df__loaded_unref(&ld);
    return rc;
}

/* The index's reason (served without a token): msg with every occurrence
 * of "<repository>/" removed, so paths read relative to the repository
 * and the server's directory layout is not shown (the log keeps them). */
static void reason_set(char *dst, size_t cap, const char *msg, const char *repo)
{
    char pre[DF_PATH_MAX + 2];
    snprintf(pre, sizeof pre, "%s/", repo);
    size_t pl = strlen(pre), n = 0;
    while (*msg && n + 1 < cap) {
        if (pl > 1 && !strncmp(msg, pre, pl)) {
            msg += pl;
            continue;
        }
        dst[n++] = *msg++;
    }
    dst[n] = 0;
}

/* 1 when REPO/<name>/config.json exists. */
static int repo_has(const char *repo, const char *name)
{
    char p[DF_PATH_MAX + DF_NAME_MAX + 16];
    snprintf(p, sizeof p, "%s/%s/config.json", repo, name);
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Under s->mu. */
static df__mentry_t *mentry_find(df_server_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i]->name, name)) return s->models[i];
    return NULL;
}

static df__mentry_t *mentry_get(df_server_t *s, const char *name)
{
    df__mentry_t *me = mentry_find(s, name);
    if (me) return me;
    if (s->n_models == s->cap_models) {
        size_t nc = s->cap_models ? 2 * s->cap_models : 16;
        df__mentry_t **nm = realloc(s->models, nc * sizeof *nm);
        if (!nm) return NULL;
        s->models = nm;
        s->cap_models = nc;
    }
    me = calloc(1, sizeof *me);
    if (!me) return NULL;
    snprintf(me->name, sizeof me->name, "%s", name);
    me->version = -1;
    s->models[s->n_models++] = me;
    return me;
}

df__mentry_t *df__find_char(df_server_t *s, const char *name, int *char_idx)
{
    for (size_t i = 0; i < s->n_models; i++) {
        df__loaded_t *ld = s->models[i]->cur;
        if (!ld) continue;
        for (int c = 0; c < ld->n_chars; c++)
            if (!strcmp(ld->char_names[c], name)) {
                *char_idx = c;
                return s->models[i];
            }
    }
    return NULL;
}

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= DF_NAME_MAX || name[0] == '.') return 0;
    for (const char *p = name; *p; p++)
        if (!(*p == '_' || *p == '-' || *p == '.' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return 0;
    return 1;
}

int df__repo_load_with(const char *repo, const char *name, const char *config_text,
                       size_t config_len, const df_limits_t *lim, df_model_t **out,
                       df_model_config_t *cfg_out, char **skipped, df_error_t *err);

int df_server_load(df_server_t *s, const char *name, df_error_t *err)
{
    return df_server_load_config(s, name, NULL, 0, err);
}

int df_server_load_config(df_server_t *s, const char *name, const char *config_text,
                          size_t config_len, df_error_t *err)
{
    if (!valid_name(name))
        return df_error_set(err, DF_EINVAL,
                            "bad model name '%.64s' (letters, digits, '_', '-', '.')", name);
    pthread_mutex_lock(&s->load_mu);
    df_model_t *m = NULL;
    df_model_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    char *skipped = NULL;
    df_error_t e = {0};
    int64_t t0 = df__now_ns();
    int rc = df__repo_load_with(s->cfg->repository, name, config_text, config_len, NULL, &m, &cfg,
                                &skipped, &e);
    df__loaded_t *ld = NULL;
    if (rc == DF_OK) {
        df_model_set_identity(m, name, df_model_version(m));
        if (!cfg.name[0]) snprintf(cfg.name, sizeof cfg.name, "%s", name);
        rc = loaded_build(s, m, &cfg, &ld, &e);
    } else {
        df_model_config_free(&cfg);
    }
    pthread_mutex_lock(&s->mu);
    /* a name the repository does not have (no REPO/<name>/config.json)
     * gets no entry: the index would list it as UNAVAILABLE for good */
    if (rc != DF_OK && !mentry_find(s, name) && !repo_has(s->cfg->repository, name)) {
        pthread_mutex_unlock(&s->mu);
        free(skipped);
        pthread_mutex_unlock(&s->load_mu);
        df__log("model %s: load failed: %s", name, e.msg);
        if (err) *err = e;
        return rc;
    }
    df__mentry_t *me = mentry_get(s, name);
    if (!me) {
        pthread_mutex_unlock(&s->mu);
        df__loaded_unref(&ld);
        free(skipped);
        pthread_mutex_unlock(&s->load_mu);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    if (rc == DF_OK) {
        int64_t v = df_model_version(ld->model);
        if (me->cur && v < me->version) {
            rc = df_error_set(&e, DF_EFORMAT,
                              "refused: newest valid version %lld is older than the serving "
                              "version %lld (%s)",
                              (long long)v, (long long)me->version,
                              skipped ? skipped : "newer version failed");
        } else if (me->cur && v == me->version && skipped && skipped[0]) {
            rc = df_error_set(&e, DF_EFORMAT, "refused newer version: %s", skipped);
        }
    }
    if (rc == DF_OK) {
        /* character names must not clash with other models' */
        for (int c = 0; c < ld->n_chars && rc == DF_OK; c++) {
            int ci;
            df__mentry_t *o = df__find_char(s, ld->char_names[c], &ci);
            if (o && o != me)
                rc = df_error_set(&e, DF_EINVAL, "character '%s' is already served by model '%s'",
                                  ld->char_names[c], o->name);
        }
    }
    df__loaded_t *old = NULL;
    if (rc == DF_OK) {
        old = me->cur;
        me->cur = ld;
        if (ld->scratch_need > s->scratch_need) {
            s->scratch_need = ld->scratch_need; /* idle workers pre-fault it */
            pthread_cond_broadcast(&s->work_cv);
        }
        me->version = df_model_version(ld->model);
        me->n_loads++;
        me->reason[0] = 0;
        if (skipped && skipped[0]) {
            char tmp[sizeof me->reason];
            snprintf(tmp, sizeof tmp, "skipped: %s", skipped);
            reason_set(me->reason, sizeof me->reason, tmp, s->cfg->repository);
        }
        ld = NULL;
    } else {
        me->n_load_failures++;
        reason_set(me->reason, sizeof me->reason, e.msg, s->cfg->repository);
    }
    int64_t version = me->version;
    int serving = me->cur != NULL;
    int64_t single_ns = rc == DF_OK && me->cur ? me->cur->single_ns : -1;
    int inline_poses = rc == DF_OK && me->cur ? me->cur->inline_poses : 0;
    pthread_mutex_unlock(&s->mu);
    double ms = (double)(df__now_ns() - t0) / 1e6;
    if (rc == DF_OK) {
        char cost[96] = "";
        if (single_ns >= 0)
            snprintf(cost, sizeof cost, "; one pose %.1f us, inline up to %d poses",
                     (double)single_ns / 1000.0, inline_poses);
        df__log("model %s: %s version %lld (%.1f ms)%s%s%s", name, old ? "reloaded" : "loaded",
                (long long)version, ms, cost, skipped && skipped[0] ? "; skipped: " : "",
                skipped && skipped[0] ? skipped : "");
    }
    else
        df__log("model %s: load failed: %s%s", name, e.msg,
                serving ? " (previous version keeps serving)" : "");
    df__loaded_unref(&old);
    df__loaded_unref(&ld);
    free(skipped);
    pthread_mutex_unlock(&s->load_mu);
    if (rc) {
        if (err) *err = e;
        return rc;
    }
    return DF_OK;
}

int df_server_unload(df_server_t *s, const char *name, df_error_t *err)
{
    pthread_mutex_lock(&s->mu);
    df__mentry_t *me = mentry_find(s, name);
    df__loaded_t *old = NULL;
    if (me && me->cur) {
        old = me->cur;
        me->cur = NULL;
        me->version = -1;
        snprintf(me->reason, sizeof me->reason, "unloaded");
    }
    pthread_mutex_unlock(&s->mu);
    if (!old) return df_error_set(err, DF_ENOTFOUND, "model '%s' is not loaded", name);
    df__loaded_unref(&old);
    df__log("model %s: unloaded", name);
    return DF_OK;
}

int df_server_rescan(df_server_t *s)
{
    char **names = NULL;
    size_t n = 0;
    df_error_t e = {0};
    if (df_repo_list(s->cfg->repository, &names, &n, &e)) {
        df__log("rescan failed: %s", e.msg);
        return 1;
    }
    int failures = 0;
    for (size_t i = 0; i < n; i++)
        if (df_server_load(s, names[i], NULL)) failures++;
    /* unload models whose directory vanished */
    pthread_mutex_lock(&s->mu);
    size_t nm = s->n_models;
    char (*gone)[DF_NAME_MAX] = calloc(nm ? nm : 1, DF_NAME_MAX);
    size_t ng = 0;
    for (size_t i = 0; gone && i < nm; i++) {
        int found = 0;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(names[j], s->models[i]->name)) found = 1;
        if (!found && s->models[i]->cur) snprintf(gone[ng++], DF_NAME_MAX, "%s", s->models[i]->name);
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < ng; i++) df_server_unload(s, gone[i], NULL);
    free(gone);
    df_repo_names_free(&names, n);
    df__log("repository scanned: %zu models, %d failed", n, failures);
    return failures;
}

int df_server_character(df_server_t *s, const char *name, df_char_info_t *out, df_error_t *err)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    int c;
    df__mentry_t *me = df__find_char(s, name, &c);
    if (!me) {
        pthread_mutex_unlock(&s->mu);
        return df_error_set(err, DF_ENOTFOUND, "unknown model or character '%.64s'", name);
    }
    df__loaded_t *ld = me->cur;
    snprintf(out->name, sizeof out->name, "%s", ld->char_names[c]);
    snprintf(out->model_name, sizeof out->model_name, "%s", me->name);
    out->version = me->version;
    out->model = df_model_ref(ld->model);
    out->encoding = ld->char_enc[c];
    out->flags = ld->char_flags[c];
    out->max_batch_size = ld->max_batch_size;
    out->n_characters = ld->n_chars;
    for (int k = 0; k < ld->n_chars && k < 8; k++)
        snprintf(out->characters[k], DF_NAME_MAX, "%s", ld->char_names[k]);
    pthread_mutex_unlock(&s->mu);
    return DF_OK;
}

int df_server_character_default(df_server_t *s, const char *name, const df_model_t *m, int i,
                                float *dst, size_t n)
{
    if (i < 0 || i >= DF_MAX_IO || !dst) return DF_EINVAL;
    pthread_mutex_lock(&s->mu);
    int c, rc = 0;
    df__mentry_t *me = df__find_char(s, name, &c);
    df__loaded_t *ld = me ? me->cur : NULL;
    if (!ld) rc = DF_ENOTFOUND;
    else if (ld->model == m && i < df_model_n_inputs(m) && (int64_t)n == ld->in_numel[i] &&
             ld->char_defaults[c * DF_MAX_IO + i]) {
        memcpy(dst, ld->char_defaults[c * DF_MAX_IO + i], n * sizeof *dst);
        rc = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void df_char_info_release(df_char_info_t *info)
{
    if (info && info->model) df_model_unref(&info->model);
}

size_t df_server_index(df_server_t *s, df_index_entry_t *out, size_t max)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_models;
    for (size_t i = 0; i < n && i < max; i++) {
        df__mentry_t *me = s->models[i];
        df_index_entry_t *x = &out[i];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "%s", me->name);
        x->version = me->cur ? me->version : -1;
        x->ready = me->cur != NULL;
        snprintf(x->reason, sizeof x->reason, "%s", me->reason);
        if (me->cur) {
            x->n_characters = me->cur->n_chars;
            for (int c = 0; c < me->cur->n_chars && c < 8; c++)
                snprintf(x->characters[c], DF_NAME_MAX, "%s", me->cur->char_names[c]);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

size_t df_server_names(df_server_t *s, char (*out)[DF_NAME_MAX], size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_models; i++) {
        df__loaded_t *ld = s->models[i]->cur;
        if (!ld) continue;
        for (int c = 0; c < ld->n_chars; c++, n++)
            if (n < max) snprintf(out[n], DF_NAME_MAX, "%s", ld->char_names[c]);
    }
    pthread_mutex_unlock(&s->mu);
    qsort(out, n < max ? n : max, DF_NAME_MAX, cmp_name);
    return n;
}

void df__registry_free(df_server_t *s)
{
    for (size_t i = 0; i < s->n_models; i++) {
        df__loaded_unref(&s->models[i]->cur);
        free(s->models[i]);
    }
    free(s->models);
    s->models = NULL;
    s->n_models = s->cap_models = 0;
}

/* play.c — df_client_play: stream a whole clip through the socket.
 *
 * DESIGN
 * The clip's key times and the output's per-pose shape come from an INFO
 * frame (JSON, parsed with jansson), so the client needs no HTTP. Frames
 * are sent as INFER requests carrying the clip name and `chunk` times each,
 * with `window` requests in flight; answers arrive in any order and each
 * chunk's callback copies its poses to their place in the output array, so
 * the result is in time order whatever the completion order. Time
 * convention: seconds since the clip's first key, as df_model_clip_sample
 * and `deform eval` use; --fps R gives k/R for k = 0..floor(duration*R),
 * exactly like `deform eval --fps`.
 */
#include "deformclient.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct chunk {
    float *dst;       /* frames + first * numel */
    size_t count;     /* poses */
    size_t numel;     /* floats per pose */
    const char *output;
    int status;
    char msg[1100];
    int done;
} chunk_t;

static void on_chunk(const df_client_result_t *res, void *user)
{
    chunk_t *ck = user;
    ck->done = 1;
    if (res->status) {
        ck->status = res->status;
        snprintf(ck->msg, sizeof ck->msg, "%s", res->error);
        return;
    }
    for (int o = 0; o < res->n_outputs; o++) {
        const df_client_tensor_t *t = &res->outputs[o];
        if (strcmp(t->name, ck->output)) continue;
        size_t n = 1;
        for (int k = 0; k < t->ndim; k++) n *= (size_t)t->shape[k];
        if (n != ck->count * ck->numel) {
            ck->status = DF_EFORMAT;
            snprintf(ck->msg, sizeof ck->msg, "output \"%s\": %zu values, expected %zu", t->name,
                     n, ck->count * ck->numel);
            return;
        }
        memcpy(ck->dst, t->data, n * sizeof(float));
        return;
    }
    ck->status = DF_ENOTFOUND;
    snprintf(ck->msg, sizeof ck->msg, "output \"%s\" missing from the result", ck->output);
}

int df_client_clip_match(const char *const *names, size_t n, const char *want)
{
    if (!want || !*want) return -1;
    for (size_t i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], want)) return (int)i;
    int found = -1, count = 0;
    for (size_t i = 0; i < n; i++)
        if (names[i] && !strcasecmp(names[i], want)) found = (int)i, count++;
    if (count) return count == 1 ? found : -2;
    for (size_t i = 0; i < n; i++)
        if (names[i] && strcasestr(names[i], want)) found = (int)i, count++;
    return count == 1 ? found : count ? -2 : -1;
}

/* The clip of INFO's "clips" that p->clip designates, or NULL with err set
 * (the message lists the character's clips). */
static json_t *find_clip(json_t *root, const df_client_play_t *p, df_error_t *err)
{
    enum { MAXC = 256 };
    json_t *clips = json_object_get(root, "clips"), *cl;
    const char *names[MAXC];
    size_t n = 0, i;
    json_array_foreach(clips, i, cl) {
        if (n == MAXC) break;
        names[n++] = json_string_value(json_object_get(cl, "name"));
    }
    int k = df_client_clip_match(names, n, p->clip);
    if (k >= 0) return json_array_get(clips, (size_t)k);
    char list[400];
    size_t len = 0;
    list[0] = 0;
    for (size_t j = 0; j < n && len + 4 < sizeof list; j++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "", names[j] ? names[j] : "?");
        if (w < 0 || (size_t)w >= sizeof list - len) {
            snprintf(list + (len < sizeof list - 4 ? len : sizeof list - 4), 4, "...");
            break;
        }
        len += (size_t)w;
    }
    if (k == -2)
        df_error_set(err, DF_EINVAL, "play: \"%s\" matches several clips of \"%s\": %s", p->clip,
                     p->character, list);
    else if (n)
        df_error_set(err, DF_ENOTFOUND, "play: character \"%s\" has no clip \"%s\" (clips: %s)",
                     p->character, p->clip, list);
    else
        df_error_set(err, DF_ENOTFOUND, "play: character \"%s\" has no clips (asked \"%s\")",
                     p->character, p->clip);
    return NULL;
}

int df_client_play(df_client_t *c, const df_client_play_t *p, float **frames, size_t *n_frames,
                   int *ndim, int64_t shape[DF_MAX_DIMS], df_error_t *err)
{
    *frames = NULL;
    *n_frames = 0;
    const char *output = p->output ? p->output : "positions";
    if (!p->character || !p->clip) return df_error_set(err, DF_EINVAL, "play: character and clip are required");
    char *js = NULL;
    int rc = df_client_info(c, p->character, &js, err);
    if (rc) return rc;
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    free(js);
    if (!root) return df_error_set(err, DF_EFORMAT, "play: INFO JSON: %s", je.text);
    double *times = NULL;
    size_t F = 0, numel = 1;
    rc = DF_OK;
    /* per-pose shape of the output */
    json_t *outs = json_object_get(root, "outputs"), *o;
    size_t i;
    int found = 0;
    json_array_foreach(outs, i, o) {
        if (strcmp(json_string_value(json_object_get(o, "name")) ?: "", output)) continue;
        json_t *sh = json_object_get(o, "shape"), *d;
        size_t k;
        *ndim = 0;
        json_array_foreach(sh, k, d) {
            if (k >= DF_MAX_DIMS) break;
            shape[k] = json_integer_value(d);
            numel *= (size_t)shape[k];
            *ndim = (int)k + 1;
        }
        found = 1;
    }
    if (!found) {
        rc = df_error_set(err, DF_ENOTFOUND, "play: character \"%s\" has no output \"%s\"",
                          p->character, output);
        goto out;
    }
    json_t *want = find_clip(root, p, err);
    if (!want) {
        rc = err ? err->code : DF_ENOTFOUND;
        goto out;
    }
    /* the clip's own name goes into the requests (the server matches exactly) */
    char clip_name[DF_NAME_MAX];
    snprintf(clip_name, sizeof clip_name, "%s", json_string_value(json_object_get(want, "name")) ?: "");
    if (p->clip_played) snprintf(p->clip_played, DF_NAME_MAX, "%s", clip_name);
    if (p->times) {
        F = p->n_times;
        times = malloc((F ? F : 1) * sizeof *times);
        if (times) memcpy(times, p->times, F * sizeof *times);
    } else {
        json_t *kt = json_object_get(want, "times");
        if (p->fps > 0) {
            double dur = json_number_value(json_object_get(want, "duration"));
            F = (size_t)floor(dur * p->fps) + 1;
            times = malloc(F * sizeof *times);
            for (size_t k = 0; times && k < F; k++) times[k] = k / p->fps;
        } else {
            F = json_array_size(kt);
            times = malloc((F ? F : 1) * sizeof *times);
            for (size_t k = 0; times && k < F; k++)
                times[k] = json_number_value(json_array_get(kt, k));
        }
    }
    if (!times) {
        rc = df_error_set(err, DF_ENOMEM, "play: out of memory");
        goto out;
    }
    if (F == 0) {
        rc = df_error_set(err, DF_EINVAL, "play: no frames to evaluate");
        goto out;
    }
    size_t chunk = p->chunk > 0 ? (size_t)p->chunk : 8;
    size_t window = p->window > 0 ? (size_t)p->window : 16;
    size_t n_chunks = (F + chunk - 1) / chunk;
    float *fr = malloc(F * numel * sizeof(float));
    chunk_t *cks = calloc(n_chunks, sizeof *cks);
    if (!fr || !cks) {
        free(fr);
        free(cks);
        rc = df_error_set(err, DF_ENOMEM, "play: out of memory for %zu frames", F);
        goto out;
    }
    size_t sent = 0, done = 0, inflight = 0;
    while (done < n_chunks) {
        while (sent < n_chunks && inflight < window) {
            chunk_t *ck = &cks[sent];
            size_t first = sent * chunk;
            ck->count = F - first < chunk ? F - first : chunk;
            ck->dst = fr + first * numel;
            ck->numel = numel;
            ck->output = output;
            df_client_request_t q = {0};
            q.character = p->character;
            q.n_poses = (int)ck->count;
            q.clip = clip_name;
            q.times = times + first;
            q.n_outputs = 1;
            q.outputs[0] = output;
            q.encoding = p->encoding;
            q.skinning = p->skinning;
            if ((rc = df_client_submit(c, &q, on_chunk, ck, NULL, err))) goto fail;
            sent++;
            inflight++;
        }
        int n = df_client_poll(c, -1, err);
        if (n < 0) {
            rc = n;
            goto fail;
        }
        /* count completions (callbacks may also have run inside submit) */
        size_t now = 0;
        for (size_t k = 0; k < sent; k++) now += cks[k].done;
        if (now > done) {
            for (size_t k = 0; k < sent; k++)
                if (cks[k].done && cks[k].status) {
                    rc = df_error_set(err, cks[k].status, "play: frames %zu..: %s", k * chunk,
                                      cks[k].msg);
                    goto fail;
                }
            inflight -= now - done;
            done = now;
            if (p->progress) {
                size_t frames_done = 0;
                for (size_t k = 0; k < sent; k++) frames_done += cks[k].done ? cks[k].count : 0;
                p->progress(frames_done, F, p->user);
            }
        }
    }
    free(cks);
    *frames = fr;
    *n_frames = F;
    goto out;
fail:
    df_client_cancel_all(c); /* callbacks must not run on freed chunks */
    free(cks);
    free(fr);
out:
    free(times);
    json_decref(root);
    return rc;
}

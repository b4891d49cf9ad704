/* model.c — the generic model object: open, reference counting, accessors,
 * batch validation and dispatch to the kind.
 *
 * DESIGN
 * df_model_open() finds the kind by name, reads and validates the
 * safetensors file, hands a zeroed model (refs = 1) to kind->load and closes
 * the file afterwards: a kind copies what it keeps (tensors are small next to
 * the evaluation buffers, and a closed file can be replaced by a new version
 * while the old model still serves). After load the model is immutable and
 * shared between threads; the reference count is atomic.
 *
 * df_model_evaluate() checks what is generic (batch size, required inputs
 * present for every pose, output pointer arrays), takes scratch from the
 * worker's df_scratch_t and calls kind->evaluate, which checks values
 * (finite, quaternions non-zero...) and names the pose at fault.
 */
#include "base/model_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DF__MAX_BATCH (1 << 20)

int df_model_open(const char *path, const char *kind, const char *params_json,
                  const df_limits_t *lim, df_model_t **out, df_error_t *err)
{
    df_limits_t dl;
    if (!lim) { df_limits_default(&dl); lim = &dl; }
    if (!out) return df_error_set(err, DF_EINVAL, "df_model_open: out is NULL");
    *out = NULL;
    if (!path) return df_error_set(err, DF_EINVAL, "df_model_open: path is NULL");
    const df_kind_t *k = df_kind_find(kind);
    if (!k)
        return df_error_set(err, DF_ENOTFOUND, "unknown model kind '%s'",
                            kind ? kind : "(null)");
    df_st_t *st = NULL;
    int rc = df_st_open(path, lim, &st, err);
    if (rc) return rc;
    const char *fk = df_st_meta(st, "kind");
    if (fk && strcmp(fk, k->name) != 0) {
        rc = df_error_set(err, DF_EFORMAT,
                          "%s: file is a '%s' model, config says '%s'", path,
                          fk, k->name);
        df_st_close(&st);
        return rc;
    }
    df_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        df_st_close(&st);
        return df_error_set(err, DF_ENOMEM, "out of memory");
    }
    m->kind = k;
    atomic_init(&m->refs, 1);
    rc = k->load(m, st, params_json, lim, err);
    df_st_close(&st);
    if (rc) {
        df_model_unref(&m);
        return rc;
    }
    *out = m;
    return DF_OK;
}

static void model_destroy(df_model_t *m)
{
    if (m->impl && m->kind && m->kind->destroy) m->kind->destroy(m->impl);
    for (int i = 0; i < DF_MAX_IO; i++) free(m->input_defaults[i]);
    free(m->rest_positions);
    free(m->triangles);
    for (int l = 0; l < m->n_lists; l++) {
        for (size_t i = 0; i < m->lists[l].n; i++) free(m->lists[l].names[i]);
        free(m->lists[l].names);
    }
    free(m->clips);
    free(m);
}

df_model_t *df_model_ref(df_model_t *m)
{
    if (m) atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void df_model_unref(df_model_t **pm)
{
    if (!pm || !*pm) return;
    df_model_t *m = *pm;
    *pm = NULL;
    int prev = atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel);
    DF_ASSERT(prev >= 1);
    if (prev == 1) model_destroy(m);
}

const char *df_model_kind(const df_model_t *m) { return m->kind->name; }
const char *df_model_name(const df_model_t *m) { return m->name; }
int64_t df_model_version(const df_model_t *m) { return m->version; }

void df_model_set_identity(df_model_t *m, const char *name, int64_t version)
{
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    m->version = version;
}

int df_model_n_inputs(const df_model_t *m) { return m->n_inputs; }
int df_model_n_outputs(const df_model_t *m) { return m->n_outputs; }

const df_io_desc_t *df_model_input(const df_model_t *m, int i)
{
    return i >= 0 && i < m->n_inputs ? &m->inputs[i] : NULL;
}

const df_io_desc_t *df_model_output(const df_model_t *m, int o)
{
    return o >= 0 && o < m->n_outputs ? &m->outputs[o] : NULL;
}

int df_model_find_input(const df_model_t *m, const char *name)
{
    for (int i = 0; name && i < m->n_inputs; i++)
        if (strcmp(m->inputs[i].name, name) == 0) return i;
    return -1;
}

int df_model_find_output(const df_model_t *m, const char *name)
{
    for (int i = 0; name && i < m->n_outputs; i++)
        if (strcmp(m->outputs[i].name, name) == 0) return i;
    return -1;
}

const float *df_model_input_default(const df_model_t *m, int i)
{
    return i >= 0 && i < m->n_inputs ? m->input_defaults[i] : NULL;
}

int64_t df_model_n_vertices(const df_model_t *m) { return m->n_vertices; }
int64_t df_model_n_triangles(const df_model_t *m) { return m->n_triangles; }
const float *df_model_rest_positions(const df_model_t *m) { return m->rest_positions; }
const uint32_t *df_model_triangles(const df_model_t *m) { return m->triangles; }

void df_model_bbox(const df_model_t *m, float lo[3], float hi[3])
{
    for (int k = 0; k < 3; k++) {
        lo[k] = m->bbox_lo[k];
        hi[k] = m->bbox_hi[k];
    }
}

size_t df_model_names(const df_model_t *m, const char *list,
                      const char *const **names)
{
    for (int l = 0; list && l < m->n_lists; l++) {
        if (strcmp(m->lists[l].list, list) == 0) {
            if (names)
                *names = m->lists[l].n ? (const char *const *)m->lists[l].names
                                       : NULL;
            return m->lists[l].n;
        }
    }
    if (names) *names = NULL;
    return 0;
}

/* ------------------------------------------------------------ helpers */

static int64_t desc_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static int check_desc(const char *what, const char *name, int ndim,
                      const int64_t *shape, df_error_t *err)
{
    if (!name || !*name || strlen(name) >= DF_NAME_MAX)
        return df_error_set(err, DF_EINVAL, "%s name empty or too long", what);
    if (ndim < 0 || ndim > 4 || (ndim > 0 && !shape))
        return df_error_set(err, DF_EINVAL, "%s '%s': bad ndim %d", what, name,
                            ndim);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n) ||
            n > ((int64_t)1 << 34))
            return df_error_set(err, DF_ELIMIT, "%s '%s': bad shape", what,
                                name);
    }
    return DF_OK;
}

int df__model_add_input(df_model_t *m, const char *name, int ndim,
                        const int64_t *shape, int optional,
                        const float *default_value)
{
    if (m->n_inputs >= DF_MAX_IO) return DF_ELIMIT;
    int rc = check_desc("input", name, ndim, shape, NULL);
    if (rc) return rc;
    if (df_model_find_input(m, name) >= 0) return DF_EINVAL;
    int64_t n = desc_numel(ndim, shape);
    float *def = calloc((size_t)(n ? n : 1), sizeof(float));
    if (!def) return DF_ENOMEM;
    if (default_value && n) memcpy(def, default_value, (size_t)n * sizeof(float));
    df_io_desc_t *d = &m->inputs[m->n_inputs];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->dtype = DF_DT_F32;
    d->ndim = ndim;
    for (int i = 0; i < ndim; i++) d->shape[i] = shape[i];
    d->optional = optional;
    m->input_defaults[m->n_inputs] = def;
    m->n_inputs++;
    return DF_OK;
}

int df__model_add_output(df_model_t *m, const char *name, int ndim,
                         const int64_t *shape)
{
    if (m->n_outputs >= DF_MAX_IO) return DF_ELIMIT;
    int rc = check_desc("output", name, ndim, shape, NULL);
    if (rc) return rc;
    if (df_model_find_output(m, name) >= 0) return DF_EINVAL;
    df_io_desc_t *d = &m->outputs[m->n_outputs];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->dtype = DF_DT_F32;
    d->ndim = ndim;
    for (int i = 0; i < ndim; i++) d->shape[i] = shape[i];
    m->n_outputs++;
    return DF_OK;
}

int df__model_set_mesh(df_model_t *m, int64_t n_vertices,
                       const float *positions, int64_t n_triangles,
                       const uint32_t *triangles)
{
    if (n_vertices < 0 || n_triangles < 0 || (n_vertices && !positions) ||
        (n_triangles && !triangles) || n_vertices > ((int64_t)1 << 32) ||
        n_triangles > ((int64_t)1 << 32))
        return DF_EINVAL;
    float *p = malloc((size_t)(n_vertices ? n_vertices : 1) * 3 * sizeof(float));
    uint32_t *t = malloc((size_t)(n_triangles ? n_triangles : 1) * 3 *
                         sizeof(uint32_t));
    if (!p || !t) {
        free(p);
        free(t);
        return DF_ENOMEM;
    }
    if (n_vertices) memcpy(p, positions, (size_t)n_vertices * 3 * sizeof(float));
    if (n_triangles)
        memcpy(t, triangles, (size_t)n_triangles * 3 * sizeof(uint32_t));
    free(m->rest_positions);
    free(m->triangles);
    m->rest_positions = p;
    m->triangles = t;
    m->n_vertices = n_vertices;
    m->n_triangles = n_triangles;
    for (int k = 0; k < 3; k++) {
        m->bbox_lo[k] = n_vertices ? p[k] : 0.0f;
        m->bbox_hi[k] = n_vertices ? p[k] : 0.0f;
    }
    for (int64_t v = 1; v < n_vertices; v++)
        for (int k = 0; k < 3; k++) {
            float x = p[3 * v + k];
            if (x < m->bbox_lo[k]) m->bbox_lo[k] = x;
            if (x > m->bbox_hi[k]) m->bbox_hi[k] = x;
        }
    return DF_OK;
}

int df__model_set_names(df_model_t *m, const char *list, size_t n,
                        const char *const *names)
{
    if (!list || strlen(list) >= sizeof m->lists[0].list || (n && !names))
        return DF_EINVAL;
    int l;
    for (l = 0; l < m->n_lists; l++)
        if (strcmp(m->lists[l].list, list) == 0) break;
    if (l == m->n_lists && m->n_lists >= DF__MAX_LISTS) return DF_ELIMIT;
    char **copy = calloc(n ? n : 1, sizeof(char *));
    if (!copy) return DF_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        copy[i] = strdup(names[i] ? names[i] : "");
        if (!copy[i]) {
            for (size_t j = 0; j < i; j++) free(copy[j]);
            free(copy);
            return DF_ENOMEM;
        }
    }
    df__namelist_t *nl = &m->lists[l];
    if (l == m->n_lists) {
        memset(nl, 0, sizeof *nl);
        snprintf(nl->list, sizeof nl->list, "%s", list);
        m->n_lists++;
    } else {
        for (size_t i = 0; i < nl->n; i++) free(nl->names[i]);
        free(nl->names);
    }
    nl->names = copy;
    nl->n = n;
    return DF_OK;
}

/* expect: the required count, or 0 / (size_t)-1 for "any count" (callers
 * that know M == 0 compare *n themselves). */
int df__json_string_array(const char *json, size_t expect, char ***out,
                          size_t *n, df_error_t *err)
{
    *out = NULL;
    *n = 0;
    if (!json) return df_error_set(err, DF_EFORMAT, "name list missing");
    json_error_t je;
    json_t *a = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!a)
        return df_error_set(err, DF_EFORMAT, "name list is not JSON: %s",
                            je.text);
    int rc = DF_OK;
    if (!json_is_array(a)) {
        rc = df_error_set(err, DF_EFORMAT, "name list is not a JSON array");
        goto done;
    }
    size_t cnt = json_array_size(a);
    if (expect != (size_t)-1 && expect != 0 && cnt != expect) {
        rc = df_error_set(err, DF_EFORMAT, "name list has %zu names, expected %zu",
                          cnt, expect);
        goto done;
    }
    char **names = calloc(cnt ? cnt : 1, sizeof(char *));
    if (!names) {
        rc = df_error_set(err, DF_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < cnt; i++) {
        json_t *s = json_array_get(a, i);
        if (!json_is_string(s)) {
            rc = df_error_set(err, DF_EFORMAT, "name list entry %zu is not a "
                              "string", i);
        } else if (!(names[i] = strdup(json_string_value(s)))) {
            rc = df_error_set(err, DF_ENOMEM, "out of memory");
        }
        if (rc) {
            for (size_t j = 0; j < i; j++) free(names[j]);
            free(names);
            goto done;
        }
    }
    *out = names;
    *n = cnt;
done:
    json_decref(a);
    return rc;
}

/* ---------------------------------------------------------- evaluation */

int df_model_evaluate(const df_model_t *m, const df_batch_t *b,
                      df_scratch_t *scratch, df_error_t *err)
{
    if (!m || !b || !scratch)
        return df_error_set(err, DF_EINVAL, "evaluate: NULL argument");
    if (b->n <= 0)
        return df_error_set(err, DF_EINVAL, "evaluate: batch size %d", b->n);
    if (b->n > DF__MAX_BATCH)
        return df_error_set(err, DF_ELIMIT, "evaluate: batch size %d exceeds %d",
                            b->n, DF__MAX_BATCH);
    for (int i = 0; i < m->n_inputs; i++) {
        if (m->inputs[i].optional) continue;
        if (!b->in[i])
            return df_error_set(err, DF_EINVAL,
                                "input '%s' is required", m->inputs[i].name);
        for (int p = 0; p < b->n; p++)
            if (!b->in[i][p])
                return df_error_set(err, DF_EINVAL,
                                    "pose %d: input '%s' is required", p,
                                    m->inputs[i].name);
    }
    for (int i = m->n_inputs; i < DF_MAX_IO; i++)
        if (b->in[i])
            return df_error_set(err, DF_EINVAL,
                                "input slot %d given but the model has %d "
                                "inputs", i, m->n_inputs);
    int any_out = 0;
    for (int o = 0; o < DF_MAX_IO; o++) {
        if (!b->out[o]) continue;
        if (o >= m->n_outputs)
            return df_error_set(err, DF_EINVAL,
                                "output slot %d requested but the model has %d "
                                "outputs", o, m->n_outputs);
        any_out = 1;
        for (int p = 0; p < b->n; p++)
            if (!b->out[o][p])
                return df_error_set(err, DF_EINVAL,
                                    "pose %d: output '%s' has no destination",
                                    p, m->outputs[o].name);
    }
    if (!any_out)
        return df_error_set(err, DF_EINVAL, "evaluate: no output requested");
    size_t need = m->kind->scratch_bytes ? m->kind->scratch_bytes(m, b->n) : 0;
    void *s = df_scratch_get(scratch, need);
    if (!s)
        return df_error_set(err, DF_ENOMEM,
                            "evaluate: cannot grow scratch to %zu bytes", need);
    return m->kind->evaluate(m, b, s, err);
}

size_t df_model_scratch_bytes(const df_model_t *m, int n)
{
    return m && m->kind->scratch_bytes && n > 0 ? m->kind->scratch_bytes(m, n) : 0;
}

/* ---------------------------------------------------------------- clips */

size_t df_model_clip_count(const df_model_t *m) { return m->n_clips; }

int df_model_clip_info(const df_model_t *m, size_t c, df_clip_info_t *out)
{
    if (c >= m->n_clips) return DF_ENOTFOUND;
    *out = m->clips[c];
    return DF_OK;
}

int df_model_clip_find(const df_model_t *m, const char *name)
{
    for (size_t c = 0; name && c < m->n_clips; c++)
        if (m->clips[c].name && strcmp(m->clips[c].name, name) == 0)
            return (int)c;
    return -1;
}

int df_model_clip_sample(const df_model_t *m, int c, double t,
                         float *const *bufs, uint32_t *filled, df_error_t *err)
{
    if (filled) *filled = 0;
    if (c < 0 || (size_t)c >= m->n_clips)
        return df_error_set(err, DF_ENOTFOUND, "clip %d does not exist (%zu clips)",
                            c, m->n_clips);
    if (!(t == t) || t > 1e300 || t < -1e300) /* NaN or huge */
        return df_error_set(err, DF_EINVAL, "clip '%s': time is not finite",
                            m->clips[c].name);
    if (!m->kind->clip_sample)
        return df_error_set(err, DF_EUNSUPPORTED,
                            "model kind '%s' has no clips", m->kind->name);
    return m->kind->clip_sample(m, c, t, bufs, filled, err);
}

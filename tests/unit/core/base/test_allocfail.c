/* test_allocfail.c — allocation-failure injection on every load path.
 *
 * Each case loads one real file (or runs one loader) while core's own
 * allocation calls go through a countdown: a clean run counts the calls N,
 * then for i = 1..N the load runs again with exactly the i-th call failing.
 * Every such run must either
 *   - fail with DF_ENOMEM and a message that says so (err.code == rc,
 *     "out of memory" in err.msg), or
 *   - succeed with a result equal to the clean load's (a step that can do
 *     without the memory), checked by evaluating the model's default pose;
 * and in both cases leave no allocation behind: the live allocations made
 * through the wrappers are the same after the run (and after the result of
 * a successful one is released) as before it. A crash fails the suite.
 * When a case makes more than BUDGET calls, each distinct call site (return
 * address) fails at its first and its last call instead.
 *
 * Only core's own calls are counted and failed: the binary is linked with
 * -Wl,--wrap=malloc,calloc,realloc,posix_memalign,aligned_alloc,strdup,free
 * (Makefile), which redirects the calls of the statically linked objects
 * (core, and the daemon's objects this binary links) and leaves the shared
 * libraries (jansson, OpenBLAS, CHOLMOD, libc itself) alone. That is the
 * scope on purpose: Debian 12's jansson 2.14 itself crashes when its
 * allocator fails inside json_loadb (an assertion in lex_scan_string, or a
 * double free, on the headers of these very models), and where it survives
 * it returns NULL with a syntax error or no text, so failing its
 * allocations would test jansson, not us. Frees of memory the libraries
 * allocated (json_dumps' text) pass through uncounted.
 *
 * Cases, one real file of each kind: Testwuson.X imported by bin/deform
 * (rigged: 39 joints, two clips) and its dual-quaternion variant; the same
 * through df_repo_load, from config.json and from a load request's
 * parameters.config, with characters and defaults beside a corrupt newer
 * version (skipped); the daemon's registry (df_server_load: characters'
 * defaults resolved against the model, the one-pose timing, whose buffers
 * may fail without failing the load); a skinning decomposition's result
 * (df_decompose_fit on a bending tube, written with a skeleton and as proxy
 * bones) and the fit itself; a trained rigapprox model (dense and sparse
 * reconstruction) and its dataset; the committed garment
 * (tests/data/garment/shirt.safetensors); a retarget model with markers; a
 * safetensors file whose tensors are misaligned (the copy path); .npy,
 * config.json and the repository listing.
 *
 * A failure names the call index and the call site as an offset into this
 * binary: `addr2line -f -e build/tests/core/base/test_allocfail 0xOFFSET`.
 */
#include "decompose/decompose.h"
#include "df.h"
#include "dftest.h"
#include "config.h"
#include "job.h"
#include "rigapprox/refdeformer.h"
#include "rigapprox/rigapprox.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ wrappers */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t s);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
char *__wrap_strdup(const char *s);
void __wrap_free(void *p);

static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;

/* live allocations: an open-addressing set of addresses (0 empty, 1 removed) */
static uintptr_t *set_k;
static size_t set_cap, set_n, set_used;

static size_t set_slot(uintptr_t p, size_t cap)
{
    uint64_t h = (uint64_t)(p >> 4) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static void set_add(uintptr_t p);
static void set_grow(void)
{
    size_t oc = set_cap, nc = set_cap ? set_cap : 1024;
    while (set_n * 4 >= nc) nc *= 2; /* live entries fill at most a quarter */
    uintptr_t *ok = set_k;
    set_k = __real_calloc(nc, sizeof *set_k);
    if (!set_k) abort();
    set_cap = nc;
    set_n = set_used = 0;
    for (size_t i = 0; i < oc; i++)
        if (ok[i] > 1) set_add(ok[i]);
    __real_free(ok);
}

static void set_add(uintptr_t p)
{
    if ((set_used + 1) * 2 >= set_cap) set_grow();
    size_t i = set_slot(p, set_cap), tomb = (size_t)-1;
    for (;; i = (i + 1) & (set_cap - 1)) {
        if (set_k[i] == p) return; /* already known */
        if (set_k[i] == 1 && tomb == (size_t)-1) tomb = i;
        if (set_k[i] == 0) break;
    }
    if (tomb != (size_t)-1) {
        set_k[tomb] = p;
    } else {
        set_k[i] = p;
        set_used++;
    }
    set_n++;
}

static void set_del(uintptr_t p)
{
    if (!set_cap) return;
    for (size_t i = set_slot(p, set_cap);; i = (i + 1) & (set_cap - 1)) {
        if (set_k[i] == 0) return; /* not ours (a library's memory) */
        if (set_k[i] == p) {
            set_k[i] = 1;
            set_n--;
            return;
        }
    }
}

/* the countdown: calls made while armed are numbered from 1; call fail_at
 * fails (0: none). With recording on, each call's site is kept. */
static int armed, recording;
static long calls, fail_at;
static void *failed_site;
static void **rec_site;
static size_t rec_cap;

static int inject(void *site)
{
    if (!armed) return 0;
    long i = ++calls;
    if (recording) {
        if ((size_t)i > rec_cap) {
            size_t nc = rec_cap ? 2 * rec_cap : 4096;
            void **n = __real_realloc(rec_site, nc * sizeof *n);
            if (!n) abort();
            rec_site = n;
            rec_cap = nc;
        }
        rec_site[i - 1] = site;
    }
    if (i != fail_at) return 0;
    failed_site = site;
    return 1;
}

static void *track(void *p)
{
    if (p) set_add((uintptr_t)p);
    return p;
}

void *__wrap_malloc(size_t n)
{
    void *site = __builtin_return_address(0);
    pthread_mutex_lock(&amu);
    void *p = inject(site) ? NULL : track(__real_malloc(n));
    pthread_mutex_unlock(&amu);
    if (!p) errno = ENOMEM;
    return p;
}

void *__wrap_calloc(size_t n, size_t s)
{
    void *site = __builtin_return_address(0);
    pthread_mutex_lock(&amu);
    void *p = inject(site) ? NULL : track(__real_calloc(n, s));
    pthread_mutex_unlock(&amu);
    if (!p) errno = ENOMEM;
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    void *site = __builtin_return_address(0);
    pthread_mutex_lock(&amu);
    void *q = NULL;
    if (!inject(site)) {
        q = __real_realloc(p, n);
        if (q || n == 0) { /* moved, or freed by realloc(p, 0) */
            if (p) set_del((uintptr_t)p);
            track(q);
        }
    }
    pthread_mutex_unlock(&amu);
    if (!q && n) errno = ENOMEM;
    return q;
}

int __wrap_posix_memalign(void **pp, size_t a, size_t n)
{
    void *site = __builtin_return_address(0);
    pthread_mutex_lock(&amu);
    int rc = ENOMEM;
    if (!inject(site)) {
        rc = __real_posix_memalign(pp, a, n);
        if (rc == 0) track(*pp);
    }
    pthread_mutex_unlock(&amu);
    return rc;
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
    void *site = __builtin_return_address(0);
    pthread_mutex_lock(&amu);
    void *p = inject(site) ? NULL : track(__real_aligned_alloc(a, n));
    pthread_mutex_unlock(&amu);
    if (!p) errno = ENOMEM;
    return p;
}

char *__wrap_strdup(const char *s)
{
    void *site = __builtin_return_address(0);
    size_t n = strlen(s) + 1;
    pthread_mutex_lock(&amu);
    char *p = inject(site) ? NULL : track(__real_malloc(n));
    pthread_mutex_unlock(&amu);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(p, s, n);
    return p;
}

void __wrap_free(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&amu);
    set_del((uintptr_t)p);
    pthread_mutex_unlock(&amu);
    __real_free(p);
}

static size_t live(void)
{
    pthread_mutex_lock(&amu);
    size_t n = set_n;
    pthread_mutex_unlock(&amu);
    return n;
}

static void arm(long at, int rec)
{
    pthread_mutex_lock(&amu);
    calls = 0;
    fail_at = at;
    failed_site = NULL;
    recording = rec;
    armed = 1;
    pthread_mutex_unlock(&amu);
}

static long disarm(void)
{
    pthread_mutex_lock(&amu);
    armed = 0;
    recording = 0;
    long n = calls;
    pthread_mutex_unlock(&amu);
    return n;
}

/* offset of a code address in this binary (for addr2line) */
static unsigned long site_off(void *site)
{
    Dl_info di;
    if (site && dladdr(site, &di) && di.dli_fbase)
        return (unsigned long)((uintptr_t)site - (uintptr_t)di.dli_fbase);
    return (unsigned long)(uintptr_t)site;
}

/* ------------------------------------------------------------ fixtures */

static char dir[600];

static const char *path(const char *name)
{
    static char b[8][900];
    static int k;
    k = (k + 1) % 8;
    snprintf(b[k], sizeof b[k], "%s/%s", dir, name);
    return b[k];
}

static int write_text(const char *p, const char *text)
{
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int copy_file(const char *from, const char *to, long max_bytes)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char buf[65536];
    size_t n;
    long total = 0;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) {
        if (max_bytes >= 0 && total + (long)n > max_bytes) n = (size_t)(max_bytes - total);
        ok = fwrite(buf, 1, n, b) == n;
        total += (long)n;
        if (max_bytes >= 0 && total >= max_bytes) break;
    }
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = 0;
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------ the harness */

typedef struct acase acase_t;
struct acase {
    const char *name;
    /* run the loader; on success *obj is what it made */
    int (*load)(const acase_t *c, void **obj, df_error_t *err);
    void (*release)(void *obj);
    /* fingerprint of a loaded object for comparison (floats; new, untracked:
     * __real_free) */
    float *(*print)(void *obj, size_t *n);
    const char *file, *kind, *params; /* for model cases */
    const void *arg;
};

typedef struct tally {
    long n_calls;     /* allocation calls of one clean run */
    size_t n_sites;   /* distinct call sites */
    long runs;        /* runs with one call failing */
    long refused;     /* of them: failed (a FAIL unless DF_ENOMEM, "out of memory") */
    long recovered;   /* of them: succeeded, result unchanged */
} tally_t;

#define BUDGET 4000

static int same_print(const float *a, size_t na, const float *b, size_t nb, char *why, size_t cap)
{
    if (na != nb) {
        snprintf(why, cap, "%zu values, the clean load gave %zu", na, nb);
        return 0;
    }
    for (size_t i = 0; i < na; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= 1e-5 * (1.0 + fabs((double)b[i])))) {
            snprintf(why, cap, "value %zu is %.9g, the clean load gave %.9g", i, (double)a[i],
                     (double)b[i]);
            return 0;
        }
    }
    return 1;
}

/* One run with call `at` failing (0: none). Returns 0 when the run was
 * clean by the rules above; *ncalls gets the calls made. */
static int run_once(const acase_t *c, long at, const float *ref, size_t nref, long *ncalls,
                    int *outcome /* 1 refused, 2 recovered */)
{
    size_t live0 = live();
    void *obj = NULL;
    df_error_t err;
    memset(&err, 0, sizeof err);
    arm(at, 0);
    int rc = c->load(c, &obj, &err);
    *ncalls = disarm();
    void *site = failed_site;
    int ok = 1;
    char why[256] = "";
    if (at && !site) {
        DF_CHECK_MSG(0, "%s: call %ld: the run made only %ld calls (the clean run more)", c->name,
                     at, *ncalls);
        ok = 0;
    }
    if (rc) {
        *outcome = 1;
        int clear = rc == DF_ENOMEM && err.code == rc && strstr(err.msg, "out of memory");
        DF_CHECK_MSG(clear,
                     "%s: call %ld (site 0x%lx) failed: rc %d (%s), err.code %d, message '%s'",
                     c->name, at, site_off(site), rc, df_strerror(rc), err.code, err.msg);
        if (!clear) ok = 0;
        DF_CHECK_MSG(obj == NULL, "%s: call %ld: failed but returned an object", c->name, at);
    } else {
        *outcome = 2;
        size_t n = 0;
        float *fp = c->print ? c->print(obj, &n) : NULL;
        if (c->print && (!fp || !same_print(fp, n, ref, nref, why, sizeof why))) {
            DF_CHECK_MSG(0, "%s: call %ld (site 0x%lx) failed, the load succeeded but differs: %s",
                         c->name, at, site_off(site), fp ? why : "no fingerprint");
            ok = 0;
        }
        __real_free(fp);
        c->release(obj);
    }
    size_t live1 = live();
    if (live1 != live0) {
        DF_CHECK_MSG(0, "%s: call %ld (site 0x%lx): %ld allocations left behind (rc %d: %s)",
                     c->name, at, site_off(site), (long)live1 - (long)live0, rc, err.msg);
        ok = 0;
    }
    return ok ? 0 : -1;
}

static void run_case(const acase_t *c, tally_t *t)
{
    memset(t, 0, sizeof *t);
    /* warm up (lazy one-time state), then the reference */
    void *obj = NULL;
    df_error_t err = {0};
    int rc = c->load(c, &obj, &err);
    DF_CHECK_MSG(rc == 0, "%s: clean load: %s", c->name, err.msg);
    if (rc) return;
    c->release(obj);
    size_t live0 = live();
    obj = NULL;
    arm(0, 1);
    rc = c->load(c, &obj, &err);
    long n = disarm();
    DF_CHECK_MSG(rc == 0, "%s: clean load: %s", c->name, err.msg);
    if (rc) return;
    size_t nref = 0;
    float *ref = c->print ? c->print(obj, &nref) : NULL;
    DF_CHECK_MSG(!c->print || ref, "%s: no fingerprint of the clean load", c->name);
    c->release(obj);
    DF_CHECK_MSG(live() == live0, "%s: a clean load and release leave %ld allocations", c->name,
                 (long)live() - (long)live0);
    t->n_calls = n;
    /* the sites (first and last call of each), and which calls to fail */
    typedef struct { void *at; long first, last; } site_t;
    site_t *sites = malloc(sizeof *sites * (size_t)(n ? n : 1));
    long *pick = malloc(sizeof *pick * (size_t)(n ? n : 1));
    if (!sites || !pick) abort();
    for (long i = 0; i < n; i++) {
        size_t k = 0;
        while (k < t->n_sites && sites[k].at != rec_site[i]) k++;
        if (k == t->n_sites) sites[t->n_sites++] = (site_t){rec_site[i], i + 1, i + 1};
        sites[k].last = i + 1;
    }
    size_t np = 0;
    for (long i = 1; i <= n; i++) {
        int chosen = n <= BUDGET;
        for (size_t k = 0; k < t->n_sites && !chosen; k++)
            chosen = sites[k].first == i || sites[k].last == i;
        if (chosen) pick[np++] = i;
    }
    long bad = 0;
    for (size_t k = 0; k < np && bad < 10; k++) {
        long made = 0;
        int outcome = 0;
        if (run_once(c, pick[k], ref, nref, &made, &outcome)) bad++;
        t->runs++;
        if (outcome == 1) t->refused++;
        if (outcome == 2) t->recovered++;
    }
    if (bad >= 10) printf("# %s: stopped after 10 bad runs\n", c->name);
    printf("# %s: %ld allocation calls at %zu sites; %ld runs with one failing: %ld refused "
           "(DF_ENOMEM), %ld loaded unchanged\n",
           c->name, t->n_calls, t->n_sites, t->runs, t->refused, t->recovered);
    fflush(stdout);
    free(sites);
    free(pick);
    __real_free(ref);
}

/* ------------------------------------------------------------ model cases */

static int model_load(const acase_t *c, void **obj, df_error_t *err)
{
    df_model_t *m = NULL;
    int rc = df_model_open(c->file, c->kind, c->params, NULL, &m, err);
    *obj = m;
    return rc;
}

static void model_release(void *obj)
{
    df_model_t *m = obj;
    df_model_unref(&m);
}

typedef struct fbuf {
    float *v;
    size_t n, cap;
} fbuf_t;

static void fb_put(fbuf_t *b, const float *x, size_t n)
{
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n) nc *= 2;
        float *v = __real_realloc(b->v, nc * sizeof *v); /* untracked: outlives loads */
        if (!v) abort();
        b->v = v;
        b->cap = nc;
    }
    if (x) memcpy(b->v + b->n, x, n * sizeof *x);
    b->n += n;
}

static void fb_num(fbuf_t *b, double x)
{
    float f = (float)x;
    fb_put(b, &f, 1);
}

static void fb_str(fbuf_t *b, const char *s)
{
    for (; s && *s; s++) fb_num(b, (unsigned char)*s);
    fb_num(b, -1);
}

/* what a load must reproduce: counts, names, the mesh, the input defaults,
 * every output of the default pose and clip 0 sampled half-way */
static float *model_fingerprint(void *obj, size_t *n)
{
    const df_model_t *m = obj;
    fbuf_t b = {0};
    int ni = df_model_n_inputs(m), no = df_model_n_outputs(m);
    fb_num(&b, ni);
    fb_num(&b, no);
    fb_num(&b, (double)df_model_n_vertices(m));
    fb_num(&b, (double)df_model_n_triangles(m));
    fb_put(&b, df_model_rest_positions(m), (size_t)df_model_n_vertices(m) * 3);
    const uint32_t *tri = df_model_triangles(m);
    for (int64_t i = 0; i < df_model_n_triangles(m) * 3; i += 97) fb_num(&b, tri[i]);
    static const char *const lists[] = {"joints", "morphs", "controls", "clips", "shapes"};
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        const char *const *names = NULL;
        size_t k = df_model_names(m, lists[l], &names);
        fb_num(&b, (double)k);
        for (size_t i = 0; i < k; i++) fb_str(&b, names[i]);
    }
    const float *in[DF_MAX_IO] = {0};
    float *outs[DF_MAX_IO] = {0};
    float *bufs[DF_MAX_IO] = {0};
    for (int i = 0; i < ni; i++) {
        const df_io_desc_t *d = df_model_input(m, i);
        size_t k = 1;
        for (int a = 0; a < d->ndim; a++) k *= (size_t)d->shape[a];
        fb_str(&b, d->name);
        fb_put(&b, df_model_input_default(m, i), k);
        in[i] = df_model_input_default(m, i);
        bufs[i] = calloc(k ? k : 1, sizeof(float));
    }
    df_batch_t bt;
    memset(&bt, 0, sizeof bt);
    bt.n = 1;
    const float *const *inp[DF_MAX_IO];
    float *const *outp[DF_MAX_IO];
    size_t outn[DF_MAX_IO] = {0};
    for (int i = 0; i < ni; i++) {
        inp[i] = &in[i];
        bt.in[i] = inp[i];
    }
    for (int o = 0; o < no; o++) {
        const df_io_desc_t *d = df_model_output(m, o);
        size_t k = 1;
        for (int a = 0; a < d->ndim; a++) k *= (size_t)d->shape[a];
        fb_str(&b, d->name);
        outn[o] = k;
        outs[o] = calloc(k ? k : 1, sizeof(float));
        outp[o] = &outs[o];
        bt.out[o] = outp[o];
    }
    df_scratch_t *s = df_scratch_new();
    df_error_t err = {0};
    int rc = s ? df_model_evaluate(m, &bt, s, &err) : DF_ENOMEM;
    fb_num(&b, rc);
    for (int o = 0; o < no && rc == 0; o++) fb_put(&b, outs[o], outn[o]);
    /* clip 0 mid-way */
    size_t nc = df_model_clip_count(m);
    fb_num(&b, (double)nc);
    if (nc) {
        df_clip_info_t ci;
        uint32_t filled = 0;
        if (df_model_clip_info(m, 0, &ci) == 0) {
            fb_str(&b, ci.name);
            fb_num(&b, (double)ci.n_keys);
            double t = ci.n_keys > 1 ? 0.5 * (ci.times[ci.n_keys - 1] - ci.times[0]) : 0;
            rc = df_model_clip_sample(m, 0, t, bufs, &filled, &err);
            fb_num(&b, rc);
            fb_num(&b, filled);
            for (int i = 0; i < ni; i++)
                if (filled & (1u << i)) {
                    const df_io_desc_t *d = df_model_input(m, i);
                    size_t k = 1;
                    for (int a = 0; a < d->ndim; a++) k *= (size_t)d->shape[a];
                    fb_put(&b, bufs[i], k);
                }
        }
    }
    df_scratch_free(&s);
    for (int i = 0; i < DF_MAX_IO; i++) free(outs[i]), free(bufs[i]);
    *n = b.n;
    return b.v;
}

/* ------------------------------------------------------------ other cases */

/* the harness's own holders: not counted, not failed, not tracked */
static void *hold(size_t n)
{
    void *p = __real_calloc(1, n);
    if (!p) abort();
    return p;
}

static void unhold(void *p) { __real_free(p); }

/* the daemon's entry for a load request's parameters.config (core/base/repo.c) */
int df__repo_load_with(const char *repo, const char *name, const char *config_text,
                       size_t config_len, const df_limits_t *lim, df_model_t **out,
                       df_model_config_t *cfg_out, char **skipped, df_error_t *err);

typedef struct repo_obj {
    df_model_t *m;
    df_model_config_t cfg;
    char *skipped;
} repo_obj_t;

static int repo_load(const acase_t *c, void **obj, df_error_t *err)
{
    repo_obj_t *r = hold(sizeof *r);
    int rc = c->params ? df__repo_load_with(c->file, c->kind, c->params, strlen(c->params), NULL,
                                            &r->m, &r->cfg, &r->skipped, err)
                       : df_repo_load(c->file, c->kind, NULL, &r->m, &r->cfg, &r->skipped, err);
    if (rc) {
        DF_CHECK_MSG(!r->m && !r->cfg.params_json && !r->cfg.characters,
                     "%s: a failed df_repo_load left a model or a config", c->name);
        free(r->skipped); /* the versions skipped so far: the caller's, also on failure */
        unhold(r);
        return rc;
    }
    *obj = r;
    return rc;
}

static void repo_release(void *obj)
{
    repo_obj_t *r = obj;
    df_model_unref(&r->m);
    df_model_config_free(&r->cfg);
    free(r->skipped);
    unhold(r);
}

static void cfg_print(fbuf_t *b, const df_model_config_t *cfg)
{
    fb_str(b, cfg->name);
    fb_str(b, cfg->kind);
    fb_str(b, cfg->params_json);
    fb_num(b, cfg->max_batch_size);
    fb_num(b, (double)cfg->max_queue_delay_us);
    fb_num(b, cfg->n_characters);
    for (int i = 0; i < cfg->n_characters; i++) {
        const df_character_t *ch = &cfg->characters[i];
        fb_str(b, ch->name);
        fb_str(b, ch->encoding);
        fb_num(b, ch->flags);
        fb_num(b, ch->n_defaults);
        for (int d = 0; d < ch->n_defaults; d++) {
            fb_str(b, ch->defaults[d].input);
            fb_put(b, ch->defaults[d].data, ch->defaults[d].n);
        }
    }
}

static float *repo_print(void *obj, size_t *n)
{
    repo_obj_t *r = obj;
    size_t k = 0;
    float *mp = model_fingerprint(r->m, &k);
    fbuf_t b = {mp, k, k};
    fb_num(&b, (double)df_model_version(r->m));
    cfg_print(&b, &r->cfg);
    /* the skipped versions' lines, without the message's details */
    fb_num(&b, r->skipped ? (double)strlen(r->skipped) > 0 : -1);
    *n = b.n;
    return b.v;
}

static int config_load(const acase_t *c, void **obj, df_error_t *err)
{
    df_model_config_t *cfg = hold(sizeof *cfg);
    int rc = df_repo_read_config(c->file, c->kind, cfg, err);
    if (rc) {
        DF_CHECK_MSG(!cfg->params_json && !cfg->characters, "%s: a failed read left memory",
                     c->name);
        unhold(cfg);
        return rc;
    }
    *obj = cfg;
    return rc;
}

static void config_release(void *obj)
{
    df_model_config_free(obj);
    unhold(obj);
}

static float *config_print(void *obj, size_t *n)
{
    fbuf_t b = {0};
    cfg_print(&b, obj);
    *n = b.n;
    return b.v;
}

typedef struct list_obj {
    char **names;
    size_t n;
} list_obj_t;

static int list_load(const acase_t *c, void **obj, df_error_t *err)
{
    list_obj_t *l = hold(sizeof *l);
    int rc = df_repo_list(c->file, &l->names, &l->n, err);
    if (rc) {
        DF_CHECK_MSG(!l->names && !l->n, "%s: a failed listing returned names", c->name);
        unhold(l);
        return rc;
    }
    *obj = l;
    return rc;
}

static void list_release(void *obj)
{
    list_obj_t *l = obj;
    df_repo_names_free(&l->names, l->n);
    unhold(l);
}

static float *list_print(void *obj, size_t *n)
{
    list_obj_t *l = obj;
    fbuf_t b = {0};
    fb_num(&b, (double)l->n);
    for (size_t i = 0; i < l->n; i++) fb_str(&b, l->names[i]);
    *n = b.n;
    return b.v;
}

typedef struct npy_obj {
    int ndim;
    int64_t shape[DF_MAX_DIMS];
    float *data;
} npy_obj_t;

static int npy_load(const acase_t *c, void **obj, df_error_t *err)
{
    npy_obj_t *o = hold(sizeof *o);
    int rc = df_npy_read_f32(c->file, &o->ndim, o->shape, &o->data, err);
    if (rc) {
        DF_CHECK_MSG(!o->data, "%s: a failed read returned data", c->name);
        unhold(o);
        return rc;
    }
    *obj = o;
    return rc;
}

static void npy_release(void *obj)
{
    npy_obj_t *o = obj;
    free(o->data);
    unhold(o);
}

static float *npy_print(void *obj, size_t *n)
{
    npy_obj_t *o = obj;
    fbuf_t b = {0};
    size_t k = 1;
    fb_num(&b, o->ndim);
    for (int i = 0; i < o->ndim; i++) fb_num(&b, (double)o->shape[i]), k *= (size_t)o->shape[i];
    fb_put(&b, o->data, k);
    *n = b.n;
    return b.v;
}

static int st_load(const acase_t *c, void **obj, df_error_t *err)
{
    df_st_t *st = NULL;
    int rc = df_st_open(c->file, NULL, &st, err);
    *obj = st;
    return rc;
}

static void st_release(void *obj)
{
    df_st_t *st = obj;
    df_st_close(&st);
}

static float *st_print(void *obj, size_t *n)
{
    df_st_t *st = obj;
    fbuf_t b = {0};
    fb_num(&b, (double)df_st_count(st));
    for (size_t i = 0; i < df_st_count(st); i++) {
        const df_tensor_t *t = df_st_at(st, i);
        fb_str(&b, t->name);
        fb_num(&b, t->dtype);
        fb_num(&b, (double)((uintptr_t)t->data % 8)); /* the contract: 8-aligned */
        if (t->dtype == DF_DT_F32) fb_put(&b, t->data, t->nbytes / 4);
    }
    fb_str(&b, df_st_meta(st, "kind"));
    *n = b.n;
    return b.v;
}

static int rigdata_load(const acase_t *c, void **obj, df_error_t *err)
{
    df_rigdata_t *d = hold(sizeof *d);
    int rc = df_rigdata_open(c->file, d, err);
    if (rc) {
        unhold(d);
        return rc;
    }
    *obj = d;
    return rc;
}

static void rigdata_release(void *obj)
{
    df_rigdata_close(obj);
    unhold(obj);
}

static float *rigdata_print(void *obj, size_t *n)
{
    df_rigdata_t *d = obj;
    fbuf_t b = {0};
    fb_num(&b, (double)d->nv);
    fb_num(&b, (double)d->nj);
    fb_num(&b, (double)d->nc);
    fb_num(&b, (double)d->n);
    for (int64_t i = 0; i < d->nc; i++) fb_str(&b, d->control_names[i]);
    for (int64_t i = 0; i < d->nj; i++) fb_str(&b, d->joint_names[i]);
    fb_put(&b, d->positions, (size_t)(d->n * d->nv * 3));
    fb_put(&b, d->controls, (size_t)(d->n * d->nc));
    fb_num(&b, d->height);
    *n = b.n;
    return b.v;
}

/* skinning decomposition of a small tube: fit, then the skeleton */
typedef struct tube {
    int64_t F, N, T;
    float *frames;
    uint32_t *tris;
} tube_t;

static void make_tube(tube_t *s, int rings, int seg, int64_t F)
{
    s->F = F;
    s->N = (int64_t)rings * seg;
    s->T = (int64_t)(rings - 1) * seg * 2;
    s->frames = malloc(sizeof(float) * (size_t)(F * s->N * 3));
    s->tris = malloc(sizeof(uint32_t) * (size_t)(s->T * 3));
    if (!s->frames || !s->tris) abort();
    /* a tube along y bent at its middle by an angle growing with the frame */
    for (int64_t p = 0; p < F; p++) {
        double ang = 0.9 * (double)p / (double)(F - 1);
        for (int r = 0; r < rings; r++)
            for (int k = 0; k < seg; k++) {
                double a = 2 * M_PI * k / seg, y = 2.0 * r / (rings - 1);
                double x = 0.3 * cos(a), z = 0.3 * sin(a), yy = y;
                if (y > 1) { /* rotate about z through (0, 1, 0) */
                    double dy = y - 1;
                    x = 0.3 * cos(a) * cos(ang) - dy * sin(ang);
                    yy = 1 + 0.3 * cos(a) * sin(ang) + dy * cos(ang);
                }
                float *v = s->frames + ((size_t)p * s->N + (size_t)r * seg + k) * 3;
                v[0] = (float)x, v[1] = (float)yy, v[2] = (float)z;
            }
    }
    int64_t t = 0;
    for (int r = 0; r + 1 < rings; r++)
        for (int k = 0; k < seg; k++) {
            uint32_t a = r * seg + k, b = r * seg + (k + 1) % seg, c = a + seg, d = b + seg;
            s->tris[3 * t] = a, s->tris[3 * t + 1] = c, s->tris[3 * t + 2] = b, t++;
            s->tris[3 * t] = b, s->tris[3 * t + 1] = c, s->tris[3 * t + 2] = d, t++;
        }
}

static tube_t tube_small;

typedef struct fit_obj {
    df_decompose_result_t *r;
    df_decompose_skeleton_t *s;
} fit_obj_t;

static void fit_opts(df_decompose_opts_t *o)
{
    df_decompose_opts_default(o);
    o->n_bones = 3;
    o->max_influences = 2;
    o->max_iterations = 3;
    o->init_iterations = 3;
    o->reseed_every = 2;
}

static int fit_load(const acase_t *c, void **obj, df_error_t *err)
{
    const tube_t *s = c->arg;
    df_decompose_input_t in = {.n_frames = s->F, .n_vertices = s->N, .frames = s->frames,
                               .n_triangles = s->T, .triangles = s->tris};
    df_decompose_opts_t o;
    fit_opts(&o);
    fit_obj_t f = {0};
    int rc = df_decompose_validate(&in, o.n_bones, NULL, err);
    if (!rc) rc = df_decompose_fit(&in, &o, NULL, &f.r, err);
    if (!rc) rc = df_decompose_skeleton(f.r, s->T, s->tris, 1, &f.s, err);
    if (rc) {
        df_decompose_result_free(&f.r);
        return rc;
    }
    fit_obj_t *p = hold(sizeof *p);
    *p = f;
    *obj = p;
    return rc;
}

static void fit_release(void *obj)
{
    fit_obj_t *f = obj;
    df_decompose_skeleton_free(&f->s);
    df_decompose_result_free(&f->r);
    unhold(f);
}

static float *fit_print(void *obj, size_t *n)
{
    fit_obj_t *f = obj;
    fbuf_t b = {0};
    const df_decompose_result_t *r = f->r;
    fb_num(&b, r->n_bones);
    fb_num(&b, r->n_influences);
    fb_num(&b, r->stats.iterations);
    fb_num(&b, r->stats.erms);
    fb_put(&b, r->skin_weights, (size_t)(r->n_vertices * r->n_influences));
    fb_put(&b, r->matrices, (size_t)(r->n_frames * r->n_bones * 12));
    for (int k = 0; k < f->s->n_joints; k++) fb_num(&b, f->s->parent[k]);
    fb_put(&b, f->s->rotation, (size_t)(f->s->n_frames * f->s->n_joints * 4));
    *n = b.n;
    return b.v;
}

/* the daemon's registry (server/registry.c) on REPO2/wuson: a load through
 * df_server_load, released by df_server_unload */
static df_server_t *srv;
static df_config_t srv_cfg;

static int server_load(const acase_t *c, void **obj, df_error_t *err)
{
    int rc = df_server_load(srv, c->kind, err);
    if (!rc) *obj = srv;
    return rc;
}

static void server_release(void *obj)
{
    df_error_t err = {0};
    int rc = df_server_unload(obj, "wuson", &err);
    DF_CHECK_MSG(rc == 0, "unload: %s", err.msg);
}

static float *server_fingerprint(void *obj, size_t *n)
{
    df_server_t *s = obj;
    fbuf_t b = {0};
    static const char *const chars[] = {"wa", "wb", "wc"};
    for (int k = 0; k < 3; k++) {
        df_char_info_t ci;
        df_error_t err = {0};
        int rc = df_server_character(s, chars[k], &ci, &err);
        fb_num(&b, rc);
        if (rc) continue;
        size_t mn = 0;
        float *mp = k == 0 ? model_fingerprint(ci.model, &mn) : NULL;
        fb_put(&b, mp, mn);
        __real_free(mp);
        fb_num(&b, (double)ci.version);
        fb_num(&b, ci.encoding);
        fb_num(&b, ci.flags);
        fb_num(&b, ci.n_characters);
        for (int i = 0; i < df_model_n_inputs(ci.model); i++) {
            const df_io_desc_t *d = df_model_input(ci.model, i);
            size_t q = 1;
            for (int a = 0; a < d->ndim; a++) q *= (size_t)d->shape[a];
            float *v = calloc(q, sizeof *v);
            int got = v ? df_server_character_default(s, chars[k], ci.model, i, v, q) : -1;
            fb_num(&b, got);
            if (got == 1) fb_put(&b, v, q);
            free(v);
        }
        df_char_info_release(&ci);
    }
    *n = b.n;
    return b.v;
}

/* ------------------------------------------------------------ fixtures */

static const char *bin_dir(void)
{
    const char *b = getenv("BIN");
    return b && *b ? b : "bin";
}

/* Testwuson imported into REPO/wuson (version 1), a truncated copy as
 * version 2 (skipped by df_repo_load), a config with characters */
static int make_wuson(char *model, size_t cap)
{
    const char *asset = "/usr/share/assimp/models/X/Testwuson.X";
    if (access(asset, R_OK)) {
        printf("# skipped the imported asset: %s missing\n", asset);
        return -1;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && %s/deform import %s --repository %s --name wuson >%s 2>&1",
             path("repo"), bin_dir(), asset, path("repo"), path("import.log"));
    if (system(cmd) != 0 && strcmp(bin_dir(), "bin")) {
        /* a sanitizer build's bin/deform may not run; the importer is not under test */
        snprintf(cmd, sizeof cmd,
                 "rm -rf %s && bin/deform import %s --repository %s --name wuson >%s 2>&1",
                 path("repo"), asset, path("repo"), path("import.log"));
        if (system(cmd) != 0) {
            DF_CHECK_MSG(0, "bin/deform import failed (%s)", path("import.log"));
            return -1;
        }
    }
    snprintf(model, cap, "%s", path("repo/wuson/1/model.safetensors"));
    struct stat sb;
    if (stat(model, &sb)) {
        DF_CHECK_MSG(0, "the import wrote no %s", model);
        return -1;
    }
    mkdir(path("repo/wuson/2"), 0755);
    /* REPO2: the version alone, characters whose defaults fit its 39 joints */
    char cfg2[8192];
    int o = snprintf(cfg2, sizeof cfg2,
                     "{\"kind\": \"rigged\", \"characters\": {\n"
                     " \"wa\": {\"skinning\": \"dqs\", \"encoding\": \"int16\"},\n"
                     " \"wb\": {\"defaults\": {\"joint_translations\": [");
    for (int i = 0; i < 39 * 3; i++)
        o += snprintf(cfg2 + o, sizeof cfg2 - (size_t)o, "%s%g", i ? "," : "", 0.01 * i);
    snprintf(cfg2 + o, sizeof cfg2 - (size_t)o, "]}},\n \"wc\": {}}}\n");
    mkdir(path("repo2"), 0755);
    mkdir(path("repo2/wuson"), 0755);
    mkdir(path("repo2/wuson/1"), 0755);
    if (copy_file(model, path("repo2/wuson/1/model.safetensors"), -1) ||
        write_text(path("repo2/wuson/config.json"), cfg2)) {
        DF_CHECK_MSG(0, "cannot write the repository fixture in %s", path("repo2"));
        return -1;
    }
    if (copy_file(model, path("repo/wuson/2/model.safetensors"), sb.st_size / 2) ||
        write_text(path("repo/wuson/config.json"),
                   "{\"kind\": \"rigged\", \"parameters\": {\"skinning\": \"dqs\"},\n"
                   " \"max_batch_size\": 16, \"max_queue_delay_us\": 300,\n"
                   " \"characters\": {\n"
                   "  \"wuson_a\": {\"skinning\": \"lbs\", \"encoding\": \"float16\",\n"
                   "     \"defaults\": {\"joint_translations\": [[0, 0.1, 0], [0, 0, 0]],\n"
                   "                    \"weights\": [0.5]}},\n"
                   "  \"wuson_b\": {\"defaults\": {\"joint_rotations\": [0, 0, 0, 1]}},\n"
                   "  \"wuson_c\": {}}}\n")) {
        DF_CHECK_MSG(0, "cannot write the repository fixture in %s", path("repo"));
        return -1;
    }
    return 0;
}

static int make_rigapprox(void)
{
    df_refrig_opts_t ro;
    df_refrig_opts_default(&ro);
    ro.n_controls = 4, ro.n_combos = 2;
    df_refrig_t *rig = NULL;
    df_error_t err = {0};
    int rc = df_refrig_tiny(8, 6, &ro, &rig, &err);
    if (!rc) rc = df_refrig_write_dataset(rig, 64, 21, 0, 4, path("ra_data.safetensors"), &err);
    df_refrig_free(&rig);
    df_rigdata_t d;
    if (!rc) rc = df_rigdata_open(path("ra_data.safetensors"), &d, &err);
    if (!rc) {
        df_ratrain_opts_t o;
        df_ratrain_opts_default(&o);
        o.n_hidden = 2, o.hidden = 16, o.epochs = 1, o.batch = 32, o.verbose = 0, o.seed = 3;
        o.anchor_frac = 0.05, o.pca_frac = 0.1;
        rc = df_rigapprox_train(&d, &o, path("ra_model.safetensors"), NULL, &err);
        df_rigdata_close(&d);
    }
    DF_CHECK_MSG(rc == 0, "rigapprox fixture: %s", err.msg);
    return rc;
}

static int make_decomposed(void)
{
    tube_t s;
    make_tube(&s, 12, 8, 8);
    df_decompose_input_t in = {.n_frames = s.F, .n_vertices = s.N, .frames = s.frames,
                               .n_triangles = s.T, .triangles = s.tris};
    df_decompose_opts_t o;
    fit_opts(&o);
    df_decompose_result_t *r = NULL;
    df_decompose_skeleton_t *sk = NULL;
    df_error_t err = {0};
    int rc = df_decompose_fit(&in, &o, NULL, &r, &err);
    if (!rc) rc = df_decompose_skeleton(r, s.T, s.tris, 1, &sk, &err);
    if (!rc)
        rc = df_decompose_write_rig(r, sk, s.T, s.tris, NULL, "bend",
                                    path("decomposed_rig.safetensors"), &err);
    if (!rc)
        rc = df_decompose_write_model(r, s.T, s.tris, NULL, "bend",
                                      path("decomposed.safetensors"), &err);
    DF_CHECK_MSG(rc == 0, "decompose fixture: %s", err.msg);
    df_decompose_skeleton_free(&sk);
    df_decompose_result_free(&r);
    free(s.frames);
    free(s.tris);
    return rc;
}

/* a retarget model: a 30-vertex target with 4 morphs driven by 6 source
 * controls, with 10 markers (the first 4 stable) */
static int make_retarget(void)
{
    enum { N = 30, T = 20, MT = 4, MS = 6, K = 10 };
    static float rest[N * 3], deltas[MT * N * 3], E[MT * MS], mrest[K * 3], A[MS * K * 3], mw[K];
    static int32_t tris[T * 3];
    uint64_t x = 88172645463325252ull;
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, (double)(x >> 11) / 9007199254740992.0)
    for (int i = 0; i < N * 3; i++) rest[i] = (float)(10 * (RND() - 0.5));
    for (int i = 0; i < MT * N * 3; i++) deltas[i] = (float)(RND() - 0.5);
    for (int i = 0; i < T * 3; i++) tris[i] = (int32_t)(RND() * N);
    for (int i = 0; i < MT * MS; i++) E[i] = (float)(-0.5 + 1.5 * RND());
    for (int i = 0; i < K * 3; i++) mrest[i] = (float)(5 * (RND() - 0.5));
    for (int j = 0; j < MS; j++)
        for (int i = 0; i < K; i++)
            for (int d = 0; d < 3; d++)
                A[(j * K + i) * 3 + d] = i < 4 ? 0.0f : (float)(RND() - 0.5);
    for (int i = 0; i < K; i++) mw[i] = i < 4 ? 1.0f : 0.0f;
#undef RND
    df_st_writer_t *w = df_st_writer_new();
    int64_t sp[2] = {N, 3}, st[2] = {T, 3}, sd[3] = {MT, N, 3}, se[2] = {MT, MS}, sr[2] = {K, 3},
            sa[3] = {MS, K, 3}, sw[1] = {K};
    int rc = !w || df_st_writer_add(w, "positions", DF_DT_F32, 2, sp, rest) ||
             df_st_writer_add(w, "triangles", DF_DT_I32, 2, st, tris) ||
             df_st_writer_add(w, "morph_deltas", DF_DT_F32, 3, sd, deltas) ||
             df_st_writer_meta(w, "morph_names", "[\"t0\",\"t1\",\"t2\",\"t3\"]") ||
             df_st_writer_meta(w, "kind", "retarget") ||
             df_st_writer_meta(w, "format_version", "1") ||
             df_st_writer_meta(w, "source_names", "[\"s0\",\"s1\",\"s2\",\"s3\",\"s4\",\"s5\"]") ||
             df_st_writer_add(w, "retarget/E", DF_DT_F32, 2, se, E) ||
             df_st_writer_add(w, "retarget/marker_rest", DF_DT_F32, 2, sr, mrest) ||
             df_st_writer_add(w, "retarget/marker_deltas", DF_DT_F32, 3, sa, A) ||
             df_st_writer_add(w, "retarget/marker_weights", DF_DT_F32, 1, sw, mw);
    df_error_t err = {0};
    if (!rc) rc = df_st_writer_save(w, path("retarget.safetensors"), &err);
    df_st_writer_free(&w);
    DF_CHECK_MSG(rc == 0, "retarget fixture: %d %s", rc, err.msg);
    return rc;
}

/* a safetensors file laid out by hand: a 13-byte header pad leaves every
 * tensor at an odd address, so the reader copies each into its own buffer */
static int make_misaligned(void)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "{\"__metadata__\":{\"kind\":\"x\",\"note\":\"odd\"},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
                     "\"b\":{\"dtype\":\"I32\",\"shape\":[5],\"data_offsets\":[24,44]},"
                     "\"c\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[44,44]},"
                     "\"d\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[44,60]}}");
    while ((8 + n) % 8 != 5) hdr[n++] = ' ';
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
    float a[6] = {1, 2, 3, 4, 5, 6}, d[4] = {-1, 0.5f, 7, 8};
    int32_t b[5] = {1, 2, 3, 4, 5};
    FILE *f = fopen(path("misaligned.safetensors"), "wb");
    if (!f) return -1;
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n &&
             fwrite(a, 4, 6, f) == 6 && fwrite(b, 4, 5, f) == 5 && fwrite(d, 4, 4, f) == 4;
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------ tests */

static char wuson[1200];
static int have_wuson;

static void check_case(const acase_t *c)
{
    tally_t t;
    run_case(c, &t);
    DF_CHECK_MSG(t.n_calls > 0, "%s: the load made no allocation call through the wrappers",
                 c->name);
    DF_CHECK_MSG(t.runs == 0 || t.refused > 0, "%s: no run refused with DF_ENOMEM", c->name);
}

static void test_wrappers_see_core(void)
{
    /* the wrappers count core's calls and only once per allocation */
    size_t l0 = live();
    arm(0, 0);
    df_st_writer_t *w = df_st_writer_new();
    long n = disarm();
    DF_CHECK(w != NULL && n >= 1);
    DF_CHECK(live() == l0 + (size_t)n);
    df_st_writer_free(&w);
    DF_CHECK(live() == l0);
    /* a failing call returns NULL and the caller reports it */
    arm(1, 0);
    w = df_st_writer_new();
    disarm();
    DF_CHECK(w == NULL);
    DF_CHECK(live() == l0);
}

static void test_rigged(void)
{
    if (!have_wuson) return;
    acase_t c = {.name = "rigged Testwuson", .load = model_load, .release = model_release,
                 .print = model_fingerprint, .file = wuson, .kind = "rigged"};
    check_case(&c);
    acase_t d = c;
    d.name = "rigged Testwuson dqs";
    d.params = "{\"skinning\": \"dqs\"}";
    check_case(&d);
}

static void test_repo(void)
{
    if (have_wuson) {
        acase_t c = {.name = "df_repo_load wuson", .load = repo_load, .release = repo_release,
                     .print = repo_print, .file = path("repo"), .kind = "wuson"};
        check_case(&c);
        acase_t d = {.name = "df_repo_read_config", .load = config_load,
                     .release = config_release, .print = config_print, .file = path("repo"),
                     .kind = "wuson"};
        check_case(&d);
    }
    if (have_wuson) {
        acase_t c = {.name = "df_repo_load wuson (parameters.config)", .load = repo_load,
                     .release = repo_release, .print = repo_print, .file = path("repo"),
                     .kind = "wuson",
                     .params = "{\"kind\": \"rigged\", \"parameters\": {\"skinning\": \"lbs\"}, "
                               "\"characters\": {\"x\": {\"encoding\": \"int16\"}, "
                               "\"y\": {\"defaults\": {\"weights\": [1, 2]}}}}"};
        check_case(&c);
    }
    acase_t l = {.name = "df_repo_list", .load = list_load, .release = list_release,
                 .print = list_print, .file = path("list")};
    check_case(&l);
}

static void test_server_registry(void)
{
    if (!have_wuson) return;
    df_config_default(&srv_cfg);
    snprintf(srv_cfg.repository, sizeof srv_cfg.repository, "%s", path("repo2"));
    df_error_t err = {0};
    int rc = df_server_new(&srv_cfg, &srv, &err);
    DF_CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    acase_t c = {.name = "daemon registry df_server_load", .load = server_load,
                 .release = server_release, .print = server_fingerprint, .kind = "wuson"};
    check_case(&c);
    df_server_free(&srv);
}

static void test_decomposed(void)
{
    acase_t c = {.name = "rigged decomposition (skeleton)", .load = model_load,
                 .release = model_release, .print = model_fingerprint,
                 .file = path("decomposed_rig.safetensors"), .kind = "rigged"};
    check_case(&c);
    acase_t d = c;
    d.name = "rigged decomposition (proxy bones)";
    d.file = path("decomposed.safetensors");
    check_case(&d);
    acase_t f = {.name = "df_decompose_fit + skeleton", .load = fit_load, .release = fit_release,
                 .print = fit_print, .arg = &tube_small};
    check_case(&f);
}

static void test_rigapprox(void)
{
    acase_t c = {.name = "rigapprox dense", .load = model_load, .release = model_release,
                 .print = model_fingerprint, .file = path("ra_model.safetensors"),
                 .kind = "rigapprox", .params = "{\"reconstruction\": \"dense\"}"};
    check_case(&c);
    acase_t d = c;
    d.name = "rigapprox sparse";
    d.params = "{\"reconstruction\": \"sparse\"}";
    check_case(&d);
    acase_t r = {.name = "df_rigdata_open", .load = rigdata_load, .release = rigdata_release,
                 .print = rigdata_print, .file = path("ra_data.safetensors")};
    check_case(&r);
}

static void test_garment(void)
{
    acase_t c = {.name = "garment shirt", .load = model_load, .release = model_release,
                 .print = model_fingerprint, .file = "tests/data/garment/shirt.safetensors",
                 .kind = "garment"};
    check_case(&c);
}

static void test_retarget(void)
{
    acase_t c = {.name = "retarget markers", .load = model_load, .release = model_release,
                 .print = model_fingerprint, .file = path("retarget.safetensors"),
                 .kind = "retarget", .params = "{\"bounds\": \"nonneg\"}"};
    check_case(&c);
}

static void test_files(void)
{
    acase_t s = {.name = "df_st_open misaligned", .load = st_load, .release = st_release,
                 .print = st_print, .file = path("misaligned.safetensors")};
    check_case(&s);
    acase_t n = {.name = "df_npy_read_f32", .load = npy_load, .release = npy_release,
                 .print = npy_print, .file = path("a.npy")};
    check_case(&n);
}

static void test_fixtures(void)
{
    have_wuson = make_wuson(wuson, sizeof wuson) == 0;
    int fx = make_rigapprox() | make_decomposed() | make_retarget() | make_misaligned();
    make_tube(&tube_small, 8, 6, 5);
    int64_t sh[3] = {4, 5, 3};
    float v[60];
    for (int i = 0; i < 60; i++) v[i] = (float)i * 0.25f - 3;
    df_error_t err = {0};
    fx |= df_npy_write_f32(path("a.npy"), 3, sh, v, &err);
    mkdir(path("list"), 0755);
    static const char *const names[] = {"m2", "m0", "m1", "zz", "a_b"};
    for (int i = 0; i < 5; i++) {
        char p[1000];
        snprintf(p, sizeof p, "%s/%s", path("list"), names[i]);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/%s/config.json", path("list"), names[i]);
        fx |= write_text(p, "{\"kind\": \"rigged\"}\n");
    }
    DF_CHECK_MSG(fx == 0, "fixtures in %s could not be made", dir);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/allocfail", dftest_out_dir());
    mkdir(dir, 0755);
    DF_RUN(test_fixtures);
    DF_RUN(test_wrappers_see_core);
    DF_RUN(test_files);
    DF_RUN(test_repo);
    DF_RUN(test_rigged);
    DF_RUN(test_server_registry);
    DF_RUN(test_decomposed);
    DF_RUN(test_rigapprox);
    DF_RUN(test_garment);
    DF_RUN(test_retarget);
    free(tube_small.frames);
    free(tube_small.tris);
    return dftest_exit();
}

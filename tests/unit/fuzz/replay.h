/* replay.h — runs a libFuzzer target's committed seed corpus as a unit test
 * (header-only; included by tests/unit/fuzz/test_fuzz_<name>.c after the
 * target's source, whose LLVMFuzzerTestOneInput is renamed fuzz_one).
 *
 * Every file of fuzz/corpus/<name>/ (run from the repository root, as
 * tests/run.sh does) goes through the target, then MUTANTS deterministic
 * mutants of it (bytes flipped, set to boundary values, inserted, deleted,
 * the input cut short, two seeds spliced). The targets abort() when an
 * oracle fails, so a bad input ends the test without its "ok" line; under
 * `make asan` the sanitizers check every one of them too. A few thousand
 * inputs take well under a second.
 */
#ifndef DF_FUZZ_REPLAY_H
#define DF_FUZZ_REPLAY_H

#include "dftest.h"
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MUTANTS
#define MUTANTS 200
#endif

static uint64_t fr_rng = 0x9E3779B97F4A7C15ull;
static uint64_t fr_next(void)
{
    fr_rng ^= fr_rng << 13;
    fr_rng ^= fr_rng >> 7;
    fr_rng ^= fr_rng << 17;
    return fr_rng;
}

typedef struct {
    uint8_t *p;
    size_t n;
} fr_seed_t;

static void fr_mutate(const fr_seed_t *s, const fr_seed_t *other, uint8_t *out, size_t *n, size_t cap)
{
    size_t m = s->n < cap ? s->n : cap;
    memcpy(out, s->p, m);
    int steps = 1 + (int)(fr_next() % 4);
    for (int k = 0; k < steps; k++) {
        size_t at = m ? (size_t)(fr_next() % m) : 0;
        switch (fr_next() % 7) {
        case 0: if (m) out[at] ^= (uint8_t)(1u << (fr_next() % 8)); break;
        case 1: {
            static const uint8_t v[] = {0, 1, 0x7F, 0x80, 0xFF, '"', '\\', '[', '{', ',', '0', '9', 'e'};
            if (m) out[at] = v[fr_next() % sizeof v];
            break;
        }
        case 2: if (m < cap) { memmove(out + at + 1, out + at, m - at); out[at] = (uint8_t)fr_next(); m++; } break;
        case 3: if (m) { memmove(out + at, out + at + 1, m - at - 1); m--; } break;
        case 4: m = at; break;
        case 5: if (other && other->n && m < cap) { /* splice the other seed in */
                size_t from = (size_t)(fr_next() % other->n), len = other->n - from;
                if (len > cap - at) len = cap - at;
                memcpy(out + at, other->p + from, len);
                if (at + len > m) m = at + len;
            }
            break;
        default: if (m >= 4) { uint32_t v = (uint32_t)fr_next(); memcpy(out + (at > m - 4 ? m - 4 : at), &v, 4); } break;
        }
    }
    *n = m;
}

/* Which input was running when a target aborted (or crashed). */
static char fr_current[600];
static void fr_on_signal(int sig)
{
    (void)!write(2, fr_current, strlen(fr_current));
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Replays fuzz/corpus/<name> through fuzz_one; returns the seed count. */
static int fr_replay(const char *name, int (*one)(const uint8_t *, size_t))
{
    char dir[256];
    snprintf(dir, sizeof dir, "fuzz/corpus/%s", name);
    DIR *d = opendir(dir);
    DF_CHECK_MSG(d != NULL, "%s: run from the repository root", dir);
    if (!d) return 0;
    fr_seed_t seeds[256];
    int ns = 0;
    struct dirent *de;
    while ((de = readdir(d)) && ns < 256) {
        if (de->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        FILE *f = fopen(p, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long L = ftell(f);
        fseek(f, 0, SEEK_SET);
        seeds[ns].p = malloc(L > 0 ? (size_t)L : 1);
        seeds[ns].n = L > 0 ? fread(seeds[ns].p, 1, (size_t)L, f) : 0;
        fclose(f);
        ns++;
    }
    closedir(d);
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap + 64);
    long runs = 0;
    signal(SIGABRT, fr_on_signal);
    signal(SIGSEGV, fr_on_signal);
    for (int i = 0; i < ns; i++) {
        snprintf(fr_current, sizeof fr_current, "fuzz target failed on seed %d of %s\n", i, dir);
        DF_CHECK(one(seeds[i].p, seeds[i].n) == 0);
        runs++;
        for (int k = 0; k < MUTANTS; k++) {
            snprintf(fr_current, sizeof fr_current,
                     "fuzz target failed on mutant %d of seed %d of %s (replay.h, fr_rng)\n", k, i, dir);
            size_t n;
            fr_mutate(&seeds[i], ns > 1 ? &seeds[(i + 1 + k) % ns] : NULL, buf, &n, cap);
            uint8_t *exact = malloc(n ? n : 1); /* exactly n bytes: ASan sees overreads */
            memcpy(exact, buf, n);
            one(exact, n);
            free(exact);
            runs++;
        }
    }
    printf("# %s: %d seeds and %ld inputs in all through the fuzz target\n", name, ns, runs);
    for (int i = 0; i < ns; i++) free(seeds[i].p);
    free(buf);
    return ns;
}

#endif

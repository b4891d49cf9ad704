/* cmd_rigdata.c — `deform rigdata`: generate a rig-approximation dataset
 * with the C reference deformer stack (core/rigapprox/refdeformer.h).
 *
 *   deform rigdata (--rigged MODEL.safetensors | --tiny RINGS,SEGMENTS)
 *                  --out DATA.safetensors [--samples N] [--seed S]
 *                  [--clips] [--influence-poses P] [--controls C]
 *                  [--combos K] [--joint-correctives K] [--mush-iters I]
 *
 * --rigged reads a `rigged` model written by `deform import` (skeleton, skin
 * weights, clips). --clips writes the frames of the model's animation clips
 * instead of random poses (the "well-animated" test set). The dataset layout
 * is documented in docs/rigapprox.md.
 */
#include "df.h"
#include "rigapprox/refdeformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr,
            "usage: deform rigdata (--rigged MODEL.safetensors | --tiny RINGS,SEGMENTS)\n"
            "                      --out DATA.safetensors [--samples N] [--seed S] [--clips]\n"
            "                      [--influence-poses P] [--controls C] [--combos K]\n"
            "                      [--joint-correctives K] [--mush-iters I] [--rig-seed S]\n");
    return 2;
}

int cmd_rigdata(int argc, char **argv)
{
    const char *rigged = NULL, *tiny = NULL, *out = NULL;
    long samples = 1000, infl = 100;
    unsigned long long seed = 1;
    int clips = 0;
    df_refrig_opts_t o;
    df_refrig_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--clips")) { clips = 1; continue; }
        if (!v) return usage();
        if (!strcmp(a, "--rigged")) rigged = v;
        else if (!strcmp(a, "--tiny")) tiny = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--samples")) samples = strtol(v, NULL, 10);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--rig-seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--influence-poses")) infl = strtol(v, NULL, 10);
        else if (!strcmp(a, "--controls")) o.n_controls = atoi(v);
        else if (!strcmp(a, "--combos")) o.n_combos = atoi(v);
        else if (!strcmp(a, "--joint-correctives")) o.n_joint_correctives = atoi(v);
        else if (!strcmp(a, "--mush-iters")) o.mush_iters = atoi(v);
        else return usage();
        i++;
    }
    if (!out || (!rigged == !tiny)) return usage();
    if (samples < 1 || samples > 1000000 || infl < 0 || infl > 10000 || o.n_controls < 0 ||
        o.n_controls > 4096 || o.n_combos < 0 || o.n_joint_correctives < 0 ||
        o.n_joint_correctives > 4096 || o.mush_iters < 0 || o.mush_iters > 1000) {
        fprintf(stderr, "deform rigdata: an option is out of range\n");
        return 2;
    }
    df_error_t err = {0};
    df_refrig_t *r = NULL;
    int rc;
    if (rigged) {
        rc = df_refrig_from_rigged(rigged, &o, &r, &err);
    } else {
        int rings = 0, segs = 0;
        if (sscanf(tiny, "%d,%d", &rings, &segs) != 2) return usage();
        rc = df_refrig_tiny(rings, segs, &o, &r, &err);
    }
    if (rc) {
        fprintf(stderr, "deform rigdata: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "rig: %lld vertices, %lld joints, %lld controls, %d combos, %d joint correctives, %zu clips, height %.4g\n",
            (long long)r->nv, (long long)r->nj, (long long)r->nc, r->n_combos, r->n_jc,
            r->n_clips, r->height);
    rc = df_refrig_write_dataset(r, (int)samples, seed, clips, clips ? 0 : (int)infl, out, &err);
    df_refrig_free(&r);
    if (rc) {
        fprintf(stderr, "deform rigdata: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", out);
    return 0;
}

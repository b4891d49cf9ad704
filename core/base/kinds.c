/* kinds.c — the table of model kinds built into libdfcore.
 *
 * Each kind lives in core/<name>/kind_<name>.c and exports `const df_kind_t
 * df_kind_<name>`. They are referenced weakly so that a kind still under
 * construction does not break the build: a kind whose file is absent is
 * simply not listed. The server and tools find kinds by name only.
 * df_kind_register() appends kinds at run time (plugins, test-only kinds);
 * they are listed after the built-in ones.
 */
#include "df.h"
#include <string.h>

extern const df_kind_t df_kind_rigged __attribute__((weak));
extern const df_kind_t df_kind_rigapprox __attribute__((weak));
extern const df_kind_t df_kind_garment __attribute__((weak));
extern const df_kind_t df_kind_retarget __attribute__((weak));

#define DF__MAX_REGISTERED 16
static const df_kind_t *registered[DF__MAX_REGISTERED];
static size_t n_registered;

static const df_kind_t *all_kinds(size_t i);

int df_kind_register(const df_kind_t *k)
{
    if (!k || !k->name || !k->load || !k->evaluate) return DF_EINVAL;
    if (df_kind_find(k->name)) return DF_EINVAL;
    if (n_registered >= DF__MAX_REGISTERED) return DF_ELIMIT;
    registered[n_registered++] = k;
    return DF_OK;
}

static const df_kind_t *all_kinds(size_t i)
{
    const df_kind_t *t[] = {&df_kind_rigged, &df_kind_rigapprox,
                            &df_kind_garment, &df_kind_retarget};
    size_t k = 0;
    for (size_t j = 0; j < sizeof t / sizeof t[0]; j++) {
        if (!t[j]) continue;
        if (k++ == i) return t[j];
    }
    if (i - k < n_registered) return registered[i - k];
    return NULL;
}

size_t df_kind_count(void)
{
    size_t n = 0;
    while (all_kinds(n)) n++;
    return n;
}

const df_kind_t *df_kind_at(size_t i) { return all_kinds(i); }

const df_kind_t *df_kind_find(const char *name)
{
    for (size_t i = 0; all_kinds(i); i++)
        if (name && strcmp(all_kinds(i)->name, name) == 0) return all_kinds(i);
    return NULL;
}

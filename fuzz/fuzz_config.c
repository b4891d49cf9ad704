/* fuzz_config.c — libFuzzer driver for the repository config.json parser
 * (df__repo_parse_config in core/base/repo.c, the function behind
 * df_repo_read_config). Accepted configs are checked for the invariants the
 * server relies on: a non-empty kind, batching knobs in range, characters
 * with at most DF_MAX_IO defaults and a known encoding; then freed.
 * Seeds: fuzz/corpus/config/.
 */
#include "df.h"

#include <stdlib.h>
#include <string.h>

/* core/base/repo.c (internal) */
int df__repo_parse_config(const char *text, size_t len, const char *name,
                          df_model_config_t *cfg, df_error_t *err);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_model_config_t cfg;
    df_error_t err = {0};
    int rc = df__repo_parse_config((const char *)data, size, "fuzz", &cfg, &err);
    if (rc != DF_OK) {
        if (err.code != rc || err.msg[0] == 0 || cfg.characters || cfg.params_json)
            abort();
        return 0;
    }
    if (!cfg.kind[0] || cfg.max_batch_size < 1 || cfg.max_queue_length < 1 ||
        cfg.timeout_us < 1 || cfg.max_queue_delay_us < 0)
        abort();
    for (int c = 0; c < cfg.n_characters; c++) {
        const df_character_t *ch = &cfg.characters[c];
        if (ch->n_defaults < 0 || ch->n_defaults > DF_MAX_IO) abort();
        if (strcmp(ch->encoding, "float32") && strcmp(ch->encoding, "float16") &&
            strcmp(ch->encoding, "int16"))
            abort();
        volatile float s = 0;
        for (int i = 0; i < ch->n_defaults; i++)
            for (size_t k = 0; k < ch->defaults[i].n; k++) s += ch->defaults[i].data[k];
    }
    df_model_config_free(&cfg);
    return 0;
}

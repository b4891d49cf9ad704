/* test_fuzz_config.c — fuzz/fuzz_config.c's seed corpus (fuzz/corpus/config) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_config(void) { DF_CHECK(fr_replay("config", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_config);
    return dftest_exit();
}

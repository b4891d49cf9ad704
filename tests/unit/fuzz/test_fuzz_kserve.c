/* test_fuzz_kserve.c — fuzz/fuzz_kserve.c's seed corpus (fuzz/corpus/kserve) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_kserve.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_kserve(void) { DF_CHECK(fr_replay("kserve", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_kserve);
    return dftest_exit();
}

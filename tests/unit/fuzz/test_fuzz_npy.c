/* test_fuzz_npy.c — fuzz/fuzz_npy.c's seed corpus (fuzz/corpus/npy) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_npy.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_npy(void) { DF_CHECK(fr_replay("npy", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_npy);
    return dftest_exit();
}

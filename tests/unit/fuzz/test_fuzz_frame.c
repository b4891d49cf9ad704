/* test_fuzz_frame.c — fuzz/fuzz_frame.c's seed corpus (fuzz/corpus/frame) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_frame.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_frame(void) { DF_CHECK(fr_replay("frame", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_frame);
    return dftest_exit();
}

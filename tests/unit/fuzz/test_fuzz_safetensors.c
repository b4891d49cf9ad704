/* test_fuzz_safetensors.c — fuzz/fuzz_safetensors.c's seed corpus (fuzz/corpus/safetensors) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_safetensors(void) { DF_CHECK(fr_replay("safetensors", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_safetensors);
    return dftest_exit();
}

/* test_fuzz_deformd_conf.c — fuzz/fuzz_deformd_conf.c's seed corpus (fuzz/corpus/deformd_conf) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_deformd_conf.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_deformd_conf(void) { DF_CHECK(fr_replay("deformd_conf", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_deformd_conf);
    return dftest_exit();
}

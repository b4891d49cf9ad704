/* test_fuzz_kjson.c — fuzz/fuzz_kjson.c's seed corpus (fuzz/corpus/kjson) and
 * mutants of it replayed through the fuzz target (tests/unit/fuzz/replay.h). */
#define LLVMFuzzerTestOneInput fuzz_one
#include "../../../fuzz/fuzz_kjson.c"
#undef LLVMFuzzerTestOneInput
#include "replay.h"

static void test_corpus_kjson(void) { DF_CHECK(fr_replay("kjson", fuzz_one) >= 3); }

int main(void)
{
    DF_RUN(test_corpus_kjson);
    return dftest_exit();
}

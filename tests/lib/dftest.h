/* dftest.h — the tiny test framework every unit test uses.
 *
 * A test binary defines test functions and calls them from main with
 * DF_RUN(fn). Each check failure prints file:line and the expression; a test
 * prints "ok <name>" or "FAIL <name>" on stdout, which tests/run.sh counts.
 * main returns dftest_exit(): nonzero when anything failed.
 *
 *   static void test_quat_mul(void) { DF_CHECK(1 + 1 == 2); DF_CHECK_NEAR(a, b, 1e-6); }
 *   int main(void) { DF_RUN(test_quat_mul); return dftest_exit(); }
 */
#ifndef DFTEST_H
#define DFTEST_H
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int dftest__failed_checks;
static int dftest__tests_failed;
static int dftest__tests_passed;

#define DF_CHECK(c)                                                         \
    do {                                                                    \
        if (!(c)) {                                                         \
            dftest__failed_checks++;                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,          \
                    __LINE__, #c);                                          \
        }                                                                   \
    } while (0)

#define DF_CHECK_MSG(c, ...)                                                \
    do {                                                                    \
        if (!(c)) {                                                         \
            dftest__failed_checks++;                                        \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__,          \
                    __LINE__, #c);                                          \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

#define DF_CHECK_NEAR(a, b, tol)                                            \
    do {                                                                    \
        double dftest__a = (a), dftest__b = (b);                            \
        if (!(fabs(dftest__a - dftest__b) <= (tol))) {                      \
            dftest__failed_checks++;                                        \
            fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g, tol %g\n",        \
                    __FILE__, __LINE__, #a, dftest__a, #b, dftest__b,       \
                    (double)(tol));                                         \
        }                                                                   \
    } while (0)

#define DF_RUN(fn)                                                          \
    do {                                                                    \
        int dftest__before = dftest__failed_checks;                         \
        fn();                                                               \
        if (dftest__failed_checks == dftest__before) {                      \
            dftest__tests_passed++;                                         \
            printf("ok %s\n", #fn);                                         \
        } else {                                                            \
            dftest__tests_failed++;                                         \
            printf("FAIL %s\n", #fn);                                       \
        }                                                                   \
        fflush(stdout);                                                     \
    } while (0)

static inline int dftest_exit(void) { return dftest__tests_failed ? 1 : 0; }

/* dftest_out_dir(): this process's own directory for the files its tests
 * write, made on first use under $DF_TEST_OUT (else /tmp) as
 * dftest-XXXXXX. Two runs of one suite at the same time (two builds, two
 * OpenBLAS kernels, a developer beside CI) then never read each other's
 * files. Removed at exit when no check failed; kept for a look otherwise. */
static char dftest__out[1024];

static inline int dftest__rm(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static inline void dftest__cleanup(void)
{
    if (dftest__out[0] && !dftest__failed_checks)
        nftw(dftest__out, dftest__rm, 16, FTW_DEPTH | FTW_PHYS);
}

static inline const char *dftest_out_dir(void)
{
    if (dftest__out[0]) return dftest__out;
    const char *base = getenv("DF_TEST_OUT");
    if (!base || !*base) base = "/tmp";
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", base);
    for (char *q = parent + 1; *q; q++) /* mkdir -p */
        if (*q == '/') {
            *q = 0;
            mkdir(parent, 0755);
            *q = '/';
        }
    mkdir(parent, 0755);
    snprintf(dftest__out, sizeof dftest__out, "%s/dftest-XXXXXX", base);
    if (!mkdtemp(dftest__out)) {
        fprintf(stderr, "dftest: cannot make a directory under %s\n", base);
        exit(2);
    }
    atexit(dftest__cleanup);
    return dftest__out;
}

#endif

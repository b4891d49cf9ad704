/* clock.h — seconds on the monotonic clock, for the progress and time
 * limits of core's long jobs (training, decomposition); never for answers. */
#ifndef DF_BASE_CLOCK_H
#define DF_BASE_CLOCK_H

#include <time.h>

static inline double df__now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif

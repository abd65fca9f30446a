/* Monotonic time helpers shared by the agent's control plane and PMIx host.
 * All times are CLOCK_MONOTONIC nanoseconds; a deadline is an absolute time. */
#ifndef STAGEHAND_CLOCK_H
#define STAGEHAND_CLOCK_H

#include <limits.h>
#include <stdint.h>
#include <time.h>

#define SH_NS_PER_MS INT64_C(1000000)
#define SH_NS_PER_S  INT64_C(1000000000)

static inline int64_t sh_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SH_NS_PER_S + (int64_t)ts.tv_nsec;
}

/* Milliseconds left until @deadline_ns for poll(2), rounded up so that a poll
 * never returns just before the deadline and spins; 0 once it has passed. */
static inline int sh_poll_ms_until(int64_t deadline_ns)
{
    int64_t left = deadline_ns - sh_now_ns();

    if (left <= 0)
        return 0;
    left = (left + SH_NS_PER_MS - 1) / SH_NS_PER_MS;
    return left > INT_MAX ? INT_MAX : (int)left;
}

#endif

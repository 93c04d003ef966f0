/*
 * common/clock.c - the project's one clock (clock.h).
 */
#include "common/clock.h"

static struct timespec now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts); /* cannot fail for the clocks above on Linux */
    return ts;
}

uint64_t sl_now_ns(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double sl_now_s(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sl_now_ms(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double sl_wall_s(void)
{
    struct timespec ts = now(CLOCK_REALTIME);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sl_clock_s(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts))
        return -1;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sl_deadline_ms(struct timespec *dl, clockid_t id, unsigned long ms)
{
    *dl = now(id);
    dl->tv_sec += (time_t)(ms / 1000);
    dl->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (dl->tv_nsec >= 1000000000L) {
        dl->tv_sec++;
        dl->tv_nsec -= 1000000000L;
    }
}

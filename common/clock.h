/*
 * common/clock.h - the project's one clock: every duration, deadline and
 * progress interval reads CLOCK_MONOTONIC through here (time that never
 * jumps with NTP or date(1)); the wall clock only where a timestamp is
 * read by something outside the process (event files), and a condition
 * variable's deadline on the clock that variable waits with.
 *
 * Threading: all functions are reentrant.
 */
#ifndef SL_CLOCK_H
#define SL_CLOCK_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in nanoseconds / seconds / milliseconds. */
uint64_t sl_now_ns(void);
double sl_now_s(void);
double sl_now_ms(void);
/* CLOCK_REALTIME in seconds since the epoch (timestamps written out). */
double sl_wall_s(void);
/* Clock id's time in seconds (a thread's or the process's CPU time too);
 * -1 when the clock cannot be read. */
double sl_clock_s(clockid_t id);
/* The absolute time ms milliseconds from now on clock id: a deadline for
 * pthread_cond_timedwait on a condition variable that waits with id
 * (CLOCK_REALTIME unless its attribute chose another). */
void sl_deadline_ms(struct timespec *dl, clockid_t id, unsigned long ms);

#ifdef __cplusplus
}
#endif

#endif /* SL_CLOCK_H */

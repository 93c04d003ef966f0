/*
 * tools/convert_progress.h - the progress line and the skipped-input lines
 * of `sluice convert` (tools/cmd_convert.c) and of its plan / task / finish
 * steps (tools/cmd_convert_task.c): callbacks for sl_convert_config and
 * sl_convert_task_config.
 *
 * Threading: the callbacks run on the thread that called the library
 * (records.h), as the CLI's own.
 */
#ifndef SL_CONVERT_PROGRESS_H
#define SL_CONVERT_PROGRESS_H

#include <stdint.h>

#include "common/clock.h" /* sl_now_s: t0 and the time since */

typedef struct progress {
    int draw;              /* stderr is a TTY and not --quiet */
    int drawn;             /* a partial line is on screen */
    double t0;             /* sl_now_s() at init */
} progress;

/* draw: !quiet && stderr is a terminal; t0 = now. */
void progress_init(progress *p, int quiet);
/* Erase a partial progress line (before other output). */
void clear_line(progress *p);
/* sl_convert_config.progress: "  done/total inputs  N%  img/s  bytes  ETA". */
void on_progress(void *arg, uint64_t done, uint64_t total, uint64_t bytes);
/* sl_convert_config.skipped: "skipped: INPUT: reason" on stderr. */
void on_skipped(void *arg, const char *input, const char *reason);

#endif

/*
 * tools/walk_progress.h - the progress line of the commands that read a
 * dataset whole (verify, inspect): records.h's sl_walk_progress_fn drawing
 * "<label>: N records, F/T files, B MB" on stderr when it is a terminal.
 *
 * Threading: single-threaded (the walk's calling thread).
 */
#ifndef SL_WALK_PROGRESS_H
#define SL_WALK_PROGRESS_H

#include "records/records.h"

typedef struct walk_line {
    const char *label; /* "verify"; NULL draws nothing */
    int tty;           /* set by walk_line_init */
    int drawn;         /* a line is on screen */
} walk_line;

/* Draw only when label is not NULL and stderr is a terminal. */
void walk_line_init(walk_line *l, const char *label);
/* An sl_walk_progress_fn; arg is the walk_line. Always returns 0. */
int walk_line_draw(void *arg, const sl_walk_progress *p);
/* Erase the line (before printing anything else, and at the end). */
void walk_line_clear(walk_line *l);

#endif

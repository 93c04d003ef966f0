/*
 * tools/walk_progress.c - the progress line of verify and inspect (see
 * walk_progress.h).
 */
#include "walk_progress.h"

#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

void walk_line_init(walk_line *l, const char *label)
{
    l->label = label;
    l->tty = label && cli_stderr_tty();
    l->drawn = 0;
}

int walk_line_draw(void *arg, const sl_walk_progress *p)
{
    walk_line *l = arg;
    if (!l->tty)
        return 0;
    l->drawn = 1;
    fprintf(stderr, "\r%s: %" PRIu64 " records, %zu/%zu files, %.1f MB\033[K", l->label,
            p->records, p->files_done, p->files_total, (double)p->bytes / 1e6);
    fflush(stderr);
    return 0;
}

void walk_line_clear(walk_line *l)
{
    if (l->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        l->drawn = 0;
    }
}

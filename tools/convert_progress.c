/*
 * tools/convert_progress.c - the progress and skipped lines of sluice
 * convert (tools/convert_progress.h), shared by its one-machine run and its
 * plan / task / finish steps.
 */
#include "convert_progress.h"

#include <stdio.h>

#include "cli.h"

void progress_init(progress *p, int quiet)
{
    p->draw = !quiet && cli_stderr_tty();
    p->drawn = 0;
    p->t0 = sl_now_s();
}

void clear_line(progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        p->drawn = 0;
    }
}

void on_progress(void *arg, uint64_t done, uint64_t total, uint64_t bytes)
{
    progress *p = arg;
    if (!p->draw)
        return;
    if (done >= total) { /* the final call: the summary follows */
        clear_line(p);
        return;
    }
    double t = sl_now_s() - p->t0, rate = t > 0 ? (double)done / t : 0;
    char b[32];
    fprintf(stderr, "\r  %llu/%llu inputs  %3.0f%%  %.0f img/s  %s  ETA %.0f s\033[K",
            (unsigned long long)done, (unsigned long long)total, total ? 100.0 * done / total : 100.0,
            rate, cli_bytes(b, sizeof b, bytes), rate > 0 ? (double)(total - done) / rate : 0.0);
    fflush(stderr);
    p->drawn = 1;
}

void on_skipped(void *arg, const char *input, const char *reason)
{
    clear_line(arg);
    fprintf(stderr, "skipped: %s: %s\n", input, reason);
}

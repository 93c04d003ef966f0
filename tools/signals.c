/*
 * tools/signals.c - Ctrl-C and SIGTERM as a stop request (cli.h): the
 * commands that write for a long time (convert, train) hand the library a
 * flag instead of dying mid-write, so the work done stays usable and the
 * same command with --resume continues it. The first signal sets the flag;
 * SA_RESETHAND gives the second one its default action (the user who
 * presses Ctrl-C twice wants out now, and what a kill leaves is only temp
 * names, tests/tools/test_kill9.c).
 *
 * The flag is a plain int because the library's stop fields are
 * const volatile int * (sig_atomic_t is int on every platform sluice
 * builds on; asserted).
 */
#include <signal.h>
#include <string.h>

#include "cli.h"

_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "a stop flag written by a signal handler");

static volatile int g_stop;

static void on_signal(int sig) { g_stop = sig; }

const volatile int *cli_stop_catch(cli_stop *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    g_stop = 0;
    sigaction(SIGINT, &sa, &s->old_int);
    sigaction(SIGTERM, &sa, &s->old_term);
    return &g_stop;
}

int cli_stop_restore(const cli_stop *s)
{
    sigaction(SIGINT, &s->old_int, NULL);
    sigaction(SIGTERM, &s->old_term, NULL);
    return g_stop;
}

const char *cli_stop_name(int sig) { return sig == SIGINT ? "Ctrl-C (SIGINT)" : "SIGTERM"; }

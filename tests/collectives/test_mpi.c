/*
 * tests/collectives/test_mpi.c - the mpi backend (collectives/mpi.c): each
 * test starts 3 ranks of sluice_mpi_check (tests/collectives/mpi_check.c)
 *
 *   timeout 120 mpirun --oversubscribe --allow-run-as-root -np 3 sluice_mpi_check MODE
 *
 * and asserts on the exit status and on the ranks' output; the checks of
 * the data themselves run inside the ranks (see mpi_check.c). The children
 * run with ASAN_OPTIONS=detect_leaks=0 (OpenMPI's own allocations are still
 * held at exit), over shared memory only (btl self,vader; no single-copy
 * CMA, which containers often forbid).
 *
 * Skipped in a build without MPI (which checks the SL_ENOTSUP stub instead)
 * and where mpirun is not installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "collectives/collectives.h"
#include "testutil.h"

#define MPIRUN_ENV                                                                                 \
    "OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none "                      \
    "OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_rmaps_base_oversubscribe=1 "             \
    "OMPI_MCA_hwloc_base_binding_policy=none OMPI_ALLOW_RUN_AS_ROOT=1 "                          \
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0"

static __attribute__((unused)) double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void need_mpi(void)
{
#ifndef SLUICE_MPI_CHECK
    cr_skip_test("no sluice_mpi_check in this build");
#else
    if (!sl_comm_backend_available(SL_COMM_MPI))
        cr_skip_test("built without MPI");
    if (tu_run(NULL, "command -v mpirun") != 0)
        cr_skip_test("mpirun not found");
#endif
}

/* Run MODE on 3 ranks; returns mpirun's exit status (124: the timeout
 * killed it), the output in *out (malloc'd) and the wall time in *secs. */
static int run_mode(const char *mode, char **out, double *secs)
{
    need_mpi();
#ifdef SLUICE_MPI_CHECK
    double t0 = now_s();
    int rc = tu_run(out, MPIRUN_ENV " timeout 120 mpirun --oversubscribe --allow-run-as-root "
                    "-np 3 '%s' %s", SLUICE_MPI_CHECK, mode);
    *secs = now_s() - t0;
    cr_log_info("mpirun %s: exit %d after %.1f s:\n%s", mode, rc, *secs, *out);
    return rc;
#else
    (void)mode;
    *out = NULL;
    *secs = 0;
    return -1;
#endif
}

/* A mode whose every rank must print "rank R: MODE: ok" and exit 0. */
static void expect_ok(const char *mode)
{
    char *out = NULL;
    double secs;
    int rc = run_mode(mode, &out, &secs);
    cr_assert_eq(rc, 0, "mpirun %s exited %d:\n%s", mode, rc, out);
    for (int r = 0; r < 3; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d: %s: ok", r, mode);
        cr_assert(strstr(out, want), "no '%s' in:\n%s", want, out);
    }
    cr_assert_not(strstr(out, "FAIL"), "a rank failed:\n%s", out);
    free(out);
}

Test(collectives_mpi, allreduce) { expect_ok("allreduce"); }
Test(collectives_mpi, split_at_max_count) { expect_ok("split"); }
Test(collectives_mpi, broadcast) { expect_ok("broadcast"); }
Test(collectives_mpi, allgather) { expect_ok("allgather"); }
Test(collectives_mpi, barrier) { expect_ok("barrier"); }
Test(collectives_mpi, async) { expect_ok("async"); }

Test(collectives_mpi, sendrecv)
{
    char *out = NULL;
    double secs;
    int rc = run_mode("sendrecv", &out, &secs);
    cr_assert_eq(rc, 0, "mpirun sendrecv exited %d:\n%s", rc, out);
    for (int r = 0; r < 3; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d: sendrecv: ok", r);
        cr_assert(strstr(out, want), "no '%s' in:\n%s", want, out);
    }
    /* the receive timeout and the truncation name the peer, tag and op */
    cr_assert(strstr(out, "sl_comm_recv: mpi rank 0 of 3: MPI_Irecv"), "%s", out);
    cr_assert(strstr(out, "timed out after 300 ms waiting for rank 1"), "%s", out);
    cr_assert(strstr(out, "the message from rank 1 (tag 7) is longer than the buffer"), "%s",
              out);
    free(out);
}

/* Parse "rank R: timeout: got SL_ETIMEDOUT after N ms: MSG" for rank r. */
static double timeout_line(const char *out, int r, const char **msg)
{
    char key[64];
    snprintf(key, sizeof key, "rank %d: timeout: got SL_ETIMEDOUT after ", r);
    const char *p = strstr(out, key);
    cr_assert_not_null(p, "no '%s' in:\n%s", key, out);
    *msg = p;
    return atof(p + strlen(key));
}

/* Rank 2 never calls the all-reduce: ranks 0 and 1 give up after their 2 s
 * timeout with a message naming the operation, exit 3, and mpirun ends the
 * job (and the sleeping rank 2) well before the 120 s guard. */
Test(collectives_mpi, timeout_names_op)
{
    char *out = NULL;
    double secs;
    int rc = run_mode("timeout", &out, &secs);
    cr_assert_neq(rc, 124, "mpirun was still running after 120 s:\n%s", out);
    cr_assert_eq(rc, 3, "mpirun timeout exited %d, expected the ranks' 3:\n%s", rc, out);
    cr_assert_lt(secs, 30.0, "the job took %.1f s to end", secs);
    for (int r = 0; r < 2; r++) {
        const char *msg;
        double ms = timeout_line(out, r, &msg);
        cr_assert(ms >= 1990 && ms < 2000 + 4000, "rank %d gave up after %.0f ms (timeout 2000)",
                  r, ms);
        char who[96];
        snprintf(who, sizeof who, "sl_comm_allreduce: mpi rank %d of 3: MPI_Iallreduce", r);
        cr_assert(strstr(msg, who), "rank %d's message does not name the op: %s", r, msg);
        cr_assert(strstr(msg, "timed out after 2000 ms waiting for the other 2 ranks"), "%s",
                  msg);
    }
    cr_assert_not(strstr(out, "rank 2: timeout: got"), "rank 2 never called it:\n%s", out);
    cr_assert_not(strstr(out, "FAIL"), "a rank failed:\n%s", out);
    free(out);
}

/* Rank 1 aborts (from a second thread, while it waits in a receive): its
 * own wait ends with "aborted on this rank", and ranks 0 and 2, blocked in
 * an all-reduce that rank 1 never joins, get SL_ECANCELED with rank 1's
 * reason through the abort channel, long before their 60 s timeout. */
Test(collectives_mpi, abort_reaches_peers)
{
    char *out = NULL;
    double secs;
    int rc = run_mode("abort", &out, &secs);
    cr_assert_eq(rc, 5, "mpirun abort exited %d, expected the ranks' 5:\n%s", rc, out);
    cr_assert_lt(secs, 30.0, "the job took %.1f s to end", secs);
    cr_assert(strstr(out, "rank 1: abort: got SL_ECANCELED"), "%s", out);
    cr_assert(strstr(out, "aborted on this rank: test abort: loss is NaN"), "%s", out);
    for (int r = 0; r < 3; r += 2) {
        char want[128];
        snprintf(want, sizeof want, "mpi rank %d of 3: MPI_Iallreduce #2 (sum, f32, 100 "
                 "elements): rank 1 aborted: test abort: loss is NaN", r);
        cr_assert(strstr(out, want), "no '%s' in:\n%s", want, out);
    }
    cr_assert_not(strstr(out, "FAIL"), "a rank failed:\n%s", out);
    free(out);
}

/* Rank 1 SIGKILLs itself between all-reduces. What OpenMPI 4.1 does
 * (observed): the daemon sees the child die, mpirun prints "mpirun noticed
 * that process rank 1 with PID ... exited on signal 9 (Killed)", kills the
 * other ranks and exits 137, about a second after the kill, before the
 * survivors' own 5 s timeout (were it slower, they would print their
 * SL_ETIMEDOUT and exit 4). Either way the job must end, non-zero, with a
 * message that says what happened. */
Test(collectives_mpi, kill_ends_job)
{
    char *out = NULL;
    double secs;
    int rc = run_mode("kill", &out, &secs);
    cr_assert_neq(rc, 124, "mpirun was still running after 120 s:\n%s", out);
    cr_assert_neq(rc, 0, "the job succeeded with a rank killed:\n%s", out);
    cr_assert_lt(secs, 60.0, "the job took %.1f s to end", secs);
    cr_assert(strstr(out, "rank 1: kill: raising SIGKILL"), "%s", out);
    int ours = strstr(out, "kill: all-reduce") && strstr(out, "sl_comm_allreduce: mpi rank");
    int mpiruns = strstr(out, "exited on signal 9") != NULL;
    cr_assert(ours || mpiruns, "neither the ranks nor mpirun said what happened:\n%s", out);
    free(out);
}

/* ------------------------------------------------------- in this process */

Test(collectives_mpi, launched_reads_env)
{
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    cr_assert_not(sl_comm_mpi_launched());
    setenv("PMIX_RANK", "0", 1);
    cr_assert(sl_comm_mpi_launched());
    unsetenv("PMIX_RANK");
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    cr_assert(sl_comm_mpi_launched());
    unsetenv("OMPI_COMM_WORLD_SIZE");
}

Test(collectives_mpi, not_built)
{
    if (sl_comm_backend_available(SL_COMM_MPI))
        cr_skip_test("built with MPI");
    sl_comm *c = (sl_comm *)1;
    int rc = sl_comm_mpi_create(NULL, &c);
    cr_assert_eq(rc, SL_ENOTSUP);
    cr_assert_null(c);
    cr_assert(strstr(sl_errmsg(), "built without MPI"), "%s", sl_errmsg());
}

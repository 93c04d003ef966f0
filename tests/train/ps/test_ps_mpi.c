/*
 * tests/train/ps/test_ps_mpi.c - the parameter server over MPI
 * (train/ps/ps_mpi.c): server ranks running sl_ps_serve and worker ranks
 * using an sl_ps_create_mpi handle, checked against plain SGD and the
 * staleness bound.
 *
 * Each test starts this same test binary under mpirun with SL_PS_MPI_MODE
 * set; mpi_rank_entry (a constructor) then runs one rank of the scenario
 * instead of Criterion and exits with 0 (every check passed), 1 (a check
 * failed) or 2 (setup). Ranks 0, 1 are servers, the others workers. The
 * ranks run over shared memory only (btl self,vader, no single-copy CMA,
 * as tests/collectives/test_mpi.c). Modes:
 *   one   3 ranks, one worker: pull / forward / backward / push equals
 *         plain SGD bitwise, step by step; snapshot gives SGD's momentum;
 *         load then snapshot is the identity; servers see staleness 0
 *   many  5 ranks, three workers, max_staleness 0, worker 0 slow: every
 *         push applied, staleness <= W - 1, no pull ran ahead, the fast
 *         workers waited
 * Skipped in a build without MPI and where mpirun is not installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ps_testutil.h"
#include "testutil.h"
#include "train/ps/ps_int.h"

#define RANK_CHECK(cond, ...)                                                                    \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            printf("rank %d: %s: check failed at line %d: %s: ", rank, mode, __LINE__, #cond);   \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

enum { MPI_S = 2, MPI_B = 8, MPI_STEPS = 4, MPI_MANY_STEPS = 10 };

static int rank_worker_one(sl_ps *ps, int rank, const char *mode)
{
    sl_exec e;
    RANK_CHECK(sl_exec_init(&e, SL_BACKEND_CPU, 1) == SL_OK, "%s", sl_errmsg());
    sl_model *a = model_new(4, 7, MPI_B), *b = model_new(4, 7, MPI_B),
             *snap = model_new(4, 99, MPI_B), *c = model_new(4, 5, MPI_B);
    RANK_CHECK(a && b && snap && c, "models");
    sl_ps_config cfg = ps_cfg(MPI_S, 1, 0);
    sl_sgd *ob = NULL, *os = NULL, *oc = NULL;
    int n;
    sl_tensor_info *tb = sl_model_tensors(b, &n);
    RANK_CHECK(sl_sgd_create(&cfg.sgd, tb, n, &ob) == SL_OK, "%s", sl_errmsg());
    sl_tensor_info *ts = sl_model_tensors(snap, &n);
    RANK_CHECK(sl_sgd_create(&cfg.sgd, ts, n, &os) == SL_OK, "%s", sl_errmsg());
    sl_tensor_info *tc = sl_model_tensors(c, &n);
    RANK_CHECK(sl_sgd_create(&cfg.sgd, tc, n, &oc) == SL_OK, "%s", sl_errmsg());
    float x[MPI_STEPS * MPI_B * H * W * 3], dl[MPI_B * K], la, lb;
    int32_t lab[MPI_STEPS * MPI_B];
    make_data(MPI_STEPS * MPI_B, 3, x, lab);
    for (int s = 0; s < MPI_STEPS; s++) {
        uint64_t v;
        float lr = 0.05f + 0.01f * s;
        RANK_CHECK(sl_ps_pull(ps, 0, a, &v) == SL_OK, "%s", sl_errmsg());
        RANK_CHECK(v == (uint64_t)s, "version %llu at step %d", (unsigned long long)v, s);
        const char *d = model_diff(a, b);
        RANK_CHECK(!d, "step %d: %s differs from plain SGD", s, d);
        const float *xs = x + (size_t)s * MPI_B * H * W * 3;
        RANK_CHECK(fwd_bwd(a, &e, xs, lab + s * MPI_B, MPI_B, dl, &la) == SL_OK, "%s",
                   sl_errmsg());
        RANK_CHECK(sl_ps_push(ps, 0, a, v, lr) == SL_OK, "%s", sl_errmsg());
        RANK_CHECK(fwd_bwd(b, &e, xs, lab + s * MPI_B, MPI_B, dl, &lb) == SL_OK, "%s",
                   sl_errmsg());
        RANK_CHECK(sl_sgd_step(ob, lr) == SL_OK, "%s", sl_errmsg());
    }
    RANK_CHECK(sl_ps_snapshot(ps, snap, os) == SL_OK, "%s", sl_errmsg());
    const char *d = model_diff(snap, b);
    RANK_CHECK(!d, "snapshot: %s differs", d);
    d = opt_diff(os, ob);
    RANK_CHECK(!d, "snapshot momentum: %s differs", d);
    sl_ps_stats st;
    RANK_CHECK(sl_ps_stats_get(ps, &st, 0) == SL_OK, "%s", sl_errmsg());
    RANK_CHECK(st.updates == MPI_STEPS && st.staleness_max == 0 && st.pushes == MPI_STEPS &&
                   st.shard_updates == MPI_S * MPI_STEPS,
               "updates %llu, staleness max %llu", (unsigned long long)st.updates,
               (unsigned long long)st.staleness_max);
    /* load another model (fresh momentum) and read it back */
    RANK_CHECK(sl_ps_load(ps, c, oc) == SL_OK, "%s", sl_errmsg());
    RANK_CHECK(sl_ps_snapshot(ps, snap, os) == SL_OK, "%s", sl_errmsg());
    d = model_diff(snap, c);
    RANK_CHECK(!d, "load then snapshot: %s differs", d);
    d = opt_diff(os, oc);
    RANK_CHECK(!d, "load then snapshot: momentum %s differs", d);
    RANK_CHECK(sl_ps_push(ps, 1, a, 0, 0.1f) == SL_EINVAL, "another worker's id");
    RANK_CHECK(sl_ps_worker_done(ps, 0) == SL_OK, "%s", sl_errmsg());
    sl_sgd_destroy(ob);
    sl_sgd_destroy(os);
    sl_sgd_destroy(oc);
    sl_model_destroy(a);
    sl_model_destroy(b);
    sl_model_destroy(snap);
    sl_model_destroy(c);
    sl_exec_fini(&e);
    return 0;
}

static int rank_worker_many(sl_ps *ps, int id, int rank, const char *mode)
{
    sl_model *m = model_new(2, 1, 1);
    RANK_CHECK(m, "model");
    for (int s = 0; s < MPI_MANY_STEPS; s++) {
        uint64_t v;
        RANK_CHECK(sl_ps_pull(ps, id, m, &v) == SL_OK, "%s", sl_errmsg());
        set_grads(m, 0.001f * (float)(id + 1));
        if (id == 0)
            usleep(3000);
        RANK_CHECK(sl_ps_push(ps, id, m, v, 0.01f) == SL_OK, "%s", sl_errmsg());
    }
    sl_ps_stats st;
    RANK_CHECK(sl_ps_stats_get(ps, &st, 0) == SL_OK, "%s", sl_errmsg());
    RANK_CHECK(st.pushes == MPI_MANY_STEPS && st.pulls == MPI_MANY_STEPS, "pushes %llu",
               (unsigned long long)st.pushes);
    RANK_CHECK(sl_ps_worker_done(ps, id) == SL_OK, "%s", sl_errmsg());
    RANK_CHECK(sl_ps_pull(ps, id, m, NULL) == SL_EINVAL, "pull after done");
    sl_model_destroy(m);
    return 0;
}

static int mpi_rank_main(const char *mode)
{
    int rank = -1;
    sl_comm_config cc = SL_COMM_CONFIG_INIT;
    cc.timeout_ms = 60000;
    sl_comm *comm = NULL;
    if (sl_comm_mpi_create(&cc, &comm)) {
        printf("rank ?: %s: sl_comm_mpi_create: %s\n", mode, sl_errmsg());
        return 2;
    }
    rank = sl_comm_rank(comm);
    int world = sl_comm_world(comm), nw = world - MPI_S, many = !strcmp(mode, "many"), rc = 0;
    sl_ps_config cfg = ps_cfg(MPI_S, nw, 0);
    cfg.timeout_ms = 30000;
    sl_model *tmpl = model_new(many ? 2 : 4, many ? 1 : 7, many ? 1 : MPI_B);
    RANK_CHECK(tmpl, "template: %s", sl_errmsg());
    if (rank < MPI_S) {
        sl_ps_stats st;
        int src = sl_ps_serve(&cfg, comm, MPI_S, tmpl, &st);
        RANK_CHECK(src == SL_OK, "sl_ps_serve: %s", sl_errmsg());
        printf("rank %d: %s: served %llu pushes, staleness mean %.2f max %llu, ssp waits %llu, "
               "max lead %llu\n", rank, mode, (unsigned long long)st.shard_updates,
               st.staleness_mean, (unsigned long long)st.staleness_max,
               (unsigned long long)st.ssp_waits, (unsigned long long)st.max_lead);
        uint64_t want = many ? (uint64_t)nw * MPI_MANY_STEPS : MPI_STEPS;
        RANK_CHECK(st.shard_updates == want && st.version == want, "%llu pushes, want %llu",
                   (unsigned long long)st.shard_updates, (unsigned long long)want);
        RANK_CHECK(st.staleness_max <= (uint64_t)nw - 1 && st.max_lead == 0,
                   "staleness max %llu, lead %llu", (unsigned long long)st.staleness_max,
                   (unsigned long long)st.max_lead);
        RANK_CHECK(!many || st.ssp_waits > 0, "no pull waited for the slow worker");
    } else {
        sl_ps *ps = NULL;
        RANK_CHECK(sl_ps_create_mpi(&cfg, comm, MPI_S, tmpl, &ps) == SL_OK, "%s", sl_errmsg());
        rc = many ? rank_worker_many(ps, rank - MPI_S, rank, mode)
                  : rank_worker_one(ps, rank, mode);
        sl_ps_destroy(ps);
    }
    sl_model_destroy(tmpl);
    sl_comm_destroy(comm);
    if (!rc)
        printf("rank %d: %s: ok\n", rank, mode);
    return rc;
}

__attribute__((constructor)) static void mpi_rank_entry(void)
{
    const char *mode = getenv("SL_PS_MPI_MODE");
    if (!mode)
        return;
    int rc = mpi_rank_main(mode);
    fflush(stdout);
    _exit(rc);
}

/* Start np ranks of this binary in mode; the output (malloc'd) in *out. */
static int run_ranks(const char *mode, int np, char **out)
{
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert_gt(len, 0);
    exe[len] = 0;
    return tu_run(out,
                  "SL_PS_MPI_MODE=%s OMPI_MCA_btl=self,vader "
                  "OMPI_MCA_btl_vader_single_copy_mechanism=none "
                  "OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_rmaps_base_oversubscribe=1 "
                  "OMPI_MCA_hwloc_base_binding_policy=none OMPI_ALLOW_RUN_AS_ROOT=1 "
                  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 "
                  "timeout 120 mpirun --oversubscribe --allow-run-as-root -np %d '%s'",
                  mode, np, exe);
}

static void need_mpirun(void)
{
    if (!sl_comm_backend_available(SL_COMM_MPI))
        cr_skip_test("built without MPI");
    if (tu_run(NULL, "command -v mpirun >/dev/null") != 0)
        cr_skip_test("mpirun not installed");
}

static void mpi_scenario(const char *mode, int np)
{
    need_mpirun();
    char *out = NULL;
    int rc = run_ranks(mode, np, &out);
    cr_log_info("mpirun %s:\n%s", mode, out ? out : "");
    cr_assert_eq(rc, 0, "mpirun %s: exit %d:\n%s", mode, rc, out ? out : "");
    int ok = 0;
    for (const char *p = out; (p = strstr(p, ": ok\n")); p++)
        ok++;
    cr_assert_eq(ok, np, "%d of %d ranks said ok:\n%s", ok, np, out);
    free(out);
}

Test(train_ps_mpi, one_worker_is_sgd) { mpi_scenario("one", 3); }
Test(train_ps_mpi, three_workers_bounded) { mpi_scenario("many", 5); }

Test(train_ps_mpi, needs_the_mpi_backend)
{
    sl_comm_config cc = SL_COMM_CONFIG_INIT;
    sl_comm_group *g = NULL;
    sl_comm *c0 = NULL, *c1 = NULL;
    cr_assert_eq(sl_comm_local_group_create(2, &cc, &g), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_comm_local_open(g, 0, &c0), SL_OK);
    cr_assert_eq(sl_comm_local_open(g, 1, &c1), SL_OK);
    sl_model *t = model_new(2, 1, 1);
    cr_assert_not_null(t, "%s", sl_errmsg());
    sl_ps_config c = ps_cfg(1, 1, -1);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create_mpi(&c, c1, 1, t, &ps), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "mpi"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_serve(&c, c0, 1, t, NULL), SL_ENOTSUP);
    cr_assert_null(ps);
    sl_model_destroy(t);
    sl_comm_destroy(c0);
    sl_comm_destroy(c1);
    sl_comm_local_group_destroy(g);
}

/*
 * tests/train/ps/test_ps.c - the parameter server (train/ps/ps.c, ps_shard.c,
 * ps_mpi.c): one worker is plain SGD bitwise (1 and 3 servers); sharding
 * balances bytes; four worker threads: exact staleness in lock-step rounds
 * (K = 0), the SSP bound with a slow worker (K = 0, 1), unbounded staleness
 * when a worker falls behind, learning a synthetic task; snapshot / load /
 * checkpoint round trips; errors, deadlines, abort, backpressure. Under
 * mpirun (when the build has MPI; this binary re-run as the ranks, see
 * mpi_rank_entry): server ranks and worker ranks against the same numbers.
 *
 * Worker threads never assert (Criterion's asserts belong to the test's
 * thread): they record a status and message that the test then checks.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ps_testutil.h"
#include "testutil.h"
#include "train/ps/ps_int.h"

/* ------------------------------------------------------------ helpers */

static sl_model *mk(int width, uint64_t seed, int max_batch)
{
    sl_model *m = model_new(width, seed, max_batch);
    cr_assert_not_null(m, "sl_model_create: %s", sl_errmsg());
    return m;
}

/* Mean cross-entropy of m (train-mode forward) on n images. */
static float loss_of(sl_model *m, sl_exec *e, const float *x, const int32_t *lab, int n)
{
    const float *lg;
    float loss = 0, *dl = malloc((size_t)n * K * sizeof *dl);
    cr_assert_eq(sl_model_forward(m, e, x, n, 1, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->ops->xent_fwd_bwd(e, n, K, lg, lab, 0.0f, &loss, dl, NULL), SL_OK);
    free(dl);
    return loss;
}

/* Every tensor of a and b bitwise equal (params and buffers). */
static void assert_same_model(sl_model *a, sl_model *b, const char *what)
{
    const char *d = model_diff(a, b);
    cr_assert_null(d, "%s: %s differs", what, d);
}

static void assert_same_opt(sl_sgd *a, sl_sgd *b, const char *what)
{
    const char *d = opt_diff(a, b);
    cr_assert_null(d, "%s: %s differs", what, d);
}

static sl_sgd *opt_for(sl_model *m, const sl_sgd_config *c)
{
    int n;
    sl_tensor_info *t = sl_model_tensors(m, &n);
    sl_sgd *o = NULL;
    cr_assert_eq(sl_sgd_create(c, t, n, &o), SL_OK, "%s", sl_errmsg());
    return o;
}

/* ------------------------------------------- one worker == plain SGD */

static void one_worker_equals_sgd(int servers, int nesterov)
{
    enum { B = 8, STEPS = 6 };
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 1), SL_OK);
    sl_model *a = mk(4, 7, B), *b = mk(4, 7, B), *snap = mk(4, 99, B);
    sl_ps_config cfg = ps_cfg(servers, 1, 0);
    cfg.sgd.nesterov = nesterov;
    sl_sgd *ob = opt_for(b, &cfg.sgd), *os = opt_for(snap, &cfg.sgd);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&cfg, a, &ps), SL_OK, "%s", sl_errmsg());
    float *x = malloc((size_t)STEPS * B * H * W * 3 * sizeof *x), dl[B * K], la, lb;
    int32_t lab[STEPS * B];
    make_data(STEPS * B, 3, x, lab);
    for (int s = 0; s < STEPS; s++) {
        uint64_t v;
        float lr = 0.05f + 0.01f * s; /* the lr travels with each push */
        cr_assert_eq(sl_ps_pull(ps, 0, a, &v), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(v, (uint64_t)s, "version = updates applied");
        assert_same_model(a, b, "after pull");
        const float *xs = x + (size_t)s * B * H * W * 3;
        cr_assert_eq(fwd_bwd(a, &e, xs, lab + s * B, B, dl, &la), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_ps_push(ps, 0, a, v, lr), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(fwd_bwd(b, &e, xs, lab + s * B, B, dl, &lb), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_sgd_step(ob, lr), SL_OK);
        cr_assert_eq(la, lb, "step %d: loss %.9g vs %.9g", s, (double)la, (double)lb);
    }
    cr_assert_eq(sl_ps_snapshot(ps, snap, os), SL_OK, "%s", sl_errmsg());
    assert_same_model(snap, b, "snapshot");
    assert_same_opt(os, ob, "snapshot momentum");
    sl_ps_stats st;
    cr_assert_eq(sl_ps_stats_get(ps, &st, 0), SL_OK);
    cr_assert_eq(st.pulls, STEPS);
    cr_assert_eq(st.pushes, STEPS);
    cr_assert_eq(st.updates, STEPS);
    cr_assert_eq(st.shard_updates, (uint64_t)STEPS * servers);
    cr_assert_eq(st.staleness_max, 0);
    cr_assert_eq(st.staleness_hist[0], (uint64_t)STEPS * servers);
    cr_assert_eq(st.version, STEPS);
    sl_ps_destroy(ps);
    sl_sgd_destroy(ob);
    sl_sgd_destroy(os);
    sl_model_destroy(a);
    sl_model_destroy(b);
    sl_model_destroy(snap);
    free(x);
    sl_exec_fini(&e);
}

Test(train_ps, one_worker_one_server_is_sgd) { one_worker_equals_sgd(1, 0); }
Test(train_ps, one_worker_three_servers_is_sgd) { one_worker_equals_sgd(3, 0); }
Test(train_ps, one_worker_three_servers_nesterov_is_sgd) { one_worker_equals_sgd(3, 1); }

Test(train_ps, shards_are_whole_tensors_balanced_by_bytes)
{
    sl_model *m = mk(16, 1, 1);
    int n;
    sl_tensor_info *t = sl_model_tensors(m, &n);
    for (int S = 1; S <= 5; S++) {
        sl_ps_config cfg = ps_cfg(S, 1, -1);
        sl_ps *ps = NULL;
        cr_assert_eq(sl_ps_create(&cfg, m, &ps), SL_OK, "%s", sl_errmsg());
        size_t total = 0, largest = 0, sum = 0, lo = (size_t)-1, hi = 0;
        int *count = calloc((size_t)S, sizeof *count);
        for (int i = 0; i < n; i++) {
            size_t b = (size_t)t[i].numel * (t[i].dtype == SL_T_I64 ? 8 : 4);
            total += b;
            largest = b > largest ? b : largest;
            int s = sl_ps_server_of(ps, i);
            cr_assert(s >= 0 && s < S, "tensor %s on server %d", t[i].name, s);
            count[s]++;
        }
        for (int s = 0; s < S; s++) {
            size_t b = sl_ps_server_bytes(ps, s);
            sum += b;
            lo = b < lo ? b : lo;
            hi = b > hi ? b : hi;
            cr_assert_gt(count[s], 0, "server %d holds nothing", s);
        }
        cr_assert_eq(sum, total, "every byte on exactly one server");
        /* greedy by bytes: the spread is at most the largest tensor (plus
         * the 64-byte alignment the greedy counts) */
        cr_assert_leq(hi - lo, largest + 64 * (size_t)n, "S %d: %zu .. %zu", S, lo, hi);
        cr_assert_eq(sl_ps_server_of(ps, n), -1);
        free(count);
        sl_ps_destroy(ps);
    }
    sl_model_destroy(m);
}

/* ---------------------------------------------- worker threads */

/* A barrier that a failing worker can break (so the others do not wait for
 * it forever) and that gives up after 30 s. */
typedef struct tbar {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, count, gen, broken;
} tbar;

static void tbar_init(tbar *b, int n)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->n = n;
}

static void tbar_fini(tbar *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

static int tbar_wait(tbar *b)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    pthread_mutex_lock(&b->mu);
    int gen = b->gen, rc = 0;
    if (++b->count == b->n) {
        b->count = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    }
    while (!b->broken && gen == b->gen && rc == 0)
        rc = pthread_cond_timedwait(&b->cv, &b->mu, &dl);
    int ok = gen != b->gen;
    if (!ok)
        b->broken = 1, pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return ok ? 0 : -1;
}

static void tbar_break(tbar *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->broken = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

typedef struct wctx {
    sl_ps *ps;
    int id, steps;
    sl_model *m;
    tbar *round;                /* K = 0 rounds: between pull and push */
    tbar *start;                /* all begin together */
    int sleep_us;               /* per step: a slow worker */
    /* learning */
    sl_exec *e;
    const float *x;
    const int32_t *lab;
    int n, batch;
    float lr;
    /* result */
    int rc;
    char msg[SL_ERRMSG_MAX];
} wctx;

static void *worker_main(void *arg)
{
    wctx *c = arg;
    float *dl = c->e ? malloc((size_t)c->batch * K * sizeof *dl) : NULL;
    if (c->start && tbar_wait(c->start)) {
        c->rc = -1;
        snprintf(c->msg, sizeof c->msg, "start barrier broken");
        goto out;
    }
    for (int s = 0; s < c->steps && !c->rc; s++) {
        uint64_t v;
        if ((c->rc = sl_ps_pull(c->ps, c->id, c->m, &v)))
            break;
        if (c->round && tbar_wait(c->round)) {
            c->rc = -1;
            snprintf(c->msg, sizeof c->msg, "round barrier broken (another worker failed)");
            goto out;
        }
        if (c->e) {
            int off = (c->id * c->batch) % c->n; /* its own part of the data */
            float loss;
            if ((c->rc = fwd_bwd(c->m, c->e, c->x + (size_t)off * H * W * 3, c->lab + off,
                                 c->batch, dl, &loss)))
                break;
        } else {
            set_grads(c->m, 0.001f * (float)(c->id + 1));
        }
        if (c->sleep_us)
            usleep((useconds_t)c->sleep_us);
        c->rc = sl_ps_push(c->ps, c->id, c->m, v, c->e ? c->lr : 0.01f);
    }
    if (c->rc)
        snprintf(c->msg, sizeof c->msg, "%s", sl_errmsg());
    else if ((c->rc = sl_ps_worker_done(c->ps, c->id)))
        snprintf(c->msg, sizeof c->msg, "%s", sl_errmsg());
out:
    if (c->rc) {
        tbar_break(c->round);
        tbar_break(c->start);
    }
    free(dl);
    return NULL;
}

static void run_workers(wctx *c, int n)
{
    pthread_t th[8];
    for (int i = 0; i < n; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &c[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++)
        cr_assert_eq(c[i].rc, SL_OK, "worker %d: %s", i, c[i].msg);
}

/* Drain (a snapshot applies every queued push), then the stats. */
static sl_ps_stats drained_stats(sl_ps *ps, sl_model *into)
{
    cr_assert_eq(sl_ps_snapshot(ps, into, NULL), SL_OK, "%s", sl_errmsg());
    sl_ps_stats st;
    cr_assert_eq(sl_ps_stats_get(ps, &st, 0), SL_OK);
    cr_log_info("pushes %llu updates %llu staleness mean %.2f max %llu, ssp waits %llu (%.3f s), "
                "max lead %llu", (unsigned long long)st.pushes, (unsigned long long)st.updates,
                st.staleness_mean, (unsigned long long)st.staleness_max,
                (unsigned long long)st.ssp_waits, st.ssp_wait_s, (unsigned long long)st.max_lead);
    return st;
}

Test(train_ps, k0_rounds_have_exact_staleness)
{
    /* K = 0 and a barrier between pull and push: every round's pulls see
     * all of the last round applied and none of this one, so each server
     * applies a round's 4 pushes at staleness 0, 1, 2, 3. */
    enum { NW = 4, S = 2, STEPS = 10 };
    sl_model *tmpl = mk(2, 1, 1);
    sl_ps_config cfg = ps_cfg(S, NW, 0);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&cfg, tmpl, &ps), SL_OK, "%s", sl_errmsg());
    tbar round;
    tbar_init(&round, NW);
    wctx c[NW];
    memset(c, 0, sizeof c);
    for (int i = 0; i < NW; i++)
        c[i] = (wctx){.ps = ps, .id = i, .steps = STEPS, .m = mk(2, 1, 1), .round = &round};
    run_workers(c, NW);
    sl_ps_stats st = drained_stats(ps, tmpl);
    cr_assert_eq(st.pushes, NW * STEPS);
    cr_assert_eq(st.updates, NW * STEPS);
    cr_assert_eq(st.version, NW * STEPS);
    cr_assert_eq(st.shard_updates, S * NW * STEPS);
    cr_assert_eq(st.staleness_max, NW - 1);
    cr_assert(fabs(st.staleness_mean - 1.5) < 1e-12, "mean %.17g", st.staleness_mean);
    cr_assert_eq(st.staleness_hist[0], S * STEPS);     /* 0 */
    cr_assert_eq(st.staleness_hist[1], S * STEPS);     /* 1 */
    cr_assert_eq(st.staleness_hist[2], 2 * S * STEPS); /* 2, 3 */
    cr_assert_eq(st.max_lead, 0);
    tbar_fini(&round);
    for (int i = 0; i < NW; i++)
        sl_model_destroy(c[i].m);
    sl_ps_destroy(ps);
    sl_model_destroy(tmpl);
}

static void ssp_with_slow_worker(int k)
{
    enum { NW = 4, S = 2, STEPS = 12 };
    sl_model *tmpl = mk(2, 1, 1);
    sl_ps_config cfg = ps_cfg(S, NW, k);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&cfg, tmpl, &ps), SL_OK, "%s", sl_errmsg());
    wctx c[NW];
    for (int i = 0; i < NW; i++)
        c[i] = (wctx){.ps = ps, .id = i, .steps = STEPS, .m = mk(2, 1, 1),
                      .sleep_us = i == 0 ? 3000 : 0};
    run_workers(c, NW);
    sl_ps_stats st = drained_stats(ps, tmpl);
    cr_assert_eq(st.pushes, NW * STEPS);
    cr_assert_eq(st.updates, NW * STEPS);
    cr_assert_eq(st.shard_updates, S * NW * STEPS);
    /* ps_int.h: staleness <= (W - 1)(2K + 1) under the bound */
    cr_assert_leq(st.staleness_max, (uint64_t)(NW - 1) * (2 * k + 1), "K %d: max %llu", k,
                  (unsigned long long)st.staleness_max);
    cr_assert_leq(st.max_lead, (uint64_t)k);
    cr_assert_gt(st.ssp_waits, 0, "fast workers must have waited for the slow one");
    for (int i = 0; i < NW; i++)
        sl_model_destroy(c[i].m);
    sl_ps_destroy(ps);
    sl_model_destroy(tmpl);
}

Test(train_ps, ssp_bound_0_with_a_slow_worker) { ssp_with_slow_worker(0); }
Test(train_ps, ssp_bound_1_with_a_slow_worker) { ssp_with_slow_worker(1); }

Test(train_ps, unbounded_staleness_when_a_worker_falls_behind)
{
    /* Worker 0 pulls, the others run all their steps and finish, then
     * worker 0 pushes: 3 * STEPS updates came between its pull and its
     * push on every server. Nothing blocks without a bound. */
    enum { NW = 4, S = 2, STEPS = 10 };
    sl_model *tmpl = mk(2, 1, 1), *m0 = mk(2, 1, 1);
    sl_ps_config cfg = ps_cfg(S, NW, -1);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&cfg, tmpl, &ps), SL_OK, "%s", sl_errmsg());
    uint64_t v0;
    cr_assert_eq(sl_ps_pull(ps, 0, m0, &v0), SL_OK);
    cr_assert_eq(v0, 0);
    wctx c[NW - 1];
    for (int i = 0; i < NW - 1; i++)
        c[i] = (wctx){.ps = ps, .id = i + 1, .steps = STEPS, .m = mk(2, 1, 1)};
    run_workers(c, NW - 1);
    set_grads(m0, 0.5f);
    cr_assert_eq(sl_ps_push(ps, 0, m0, v0, 0.01f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_ps_worker_done(ps, 0), SL_OK);
    sl_ps_stats st = drained_stats(ps, tmpl);
    cr_assert_eq(st.updates, (NW - 1) * STEPS + 1);
    cr_assert_eq(st.staleness_max, (NW - 1) * STEPS);
    /* 30 falls in 16..31, once per server (the others' pushes may land
     * there too when a thread is descheduled between pull and push, but
     * never reach 30: two other workers push 20 times in all) */
    cr_assert_geq(st.staleness_hist[5], S);
    cr_assert_eq(st.staleness_hist[6] + st.staleness_hist[7], 0);
    cr_assert_eq(st.ssp_waits, 0);
    for (int i = 0; i < NW - 1; i++)
        sl_model_destroy(c[i].m);
    sl_ps_destroy(ps);
    sl_model_destroy(tmpl);
    sl_model_destroy(m0);
}

Test(train_ps, four_workers_learn)
{
    /* each worker its own quarter of the data; momentum 0.5 because
     * asynchrony adds momentum of its own (Mitliagkas et al. 2016,
     * "Asynchrony begets momentum"): 0.9 here makes some runs diverge */
    enum { NW = 4, S = 3, N = 64, B = 16, STEPS = 30 };
    float *x = malloc((size_t)N * H * W * 3 * sizeof *x);
    int32_t lab[N];
    make_data(N, 77, x, lab);
    sl_model *tmpl = mk(4, 17, N);
    sl_exec e0;
    cr_assert_eq(sl_exec_init(&e0, SL_BACKEND_CPU, 1), SL_OK);
    float first = loss_of(tmpl, &e0, x, lab, N);
    sl_ps_config cfg = ps_cfg(S, NW, -1);
    cfg.sgd.weight_decay = 0;
    cfg.sgd.momentum = 0.5f;
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&cfg, tmpl, &ps), SL_OK, "%s", sl_errmsg());
    tbar start;
    tbar_init(&start, NW);
    wctx c[NW];
    sl_exec e[NW];
    for (int i = 0; i < NW; i++) {
        cr_assert_eq(sl_exec_init(&e[i], SL_BACKEND_CPU, 1), SL_OK);
        c[i] = (wctx){.ps = ps, .id = i, .steps = STEPS, .m = mk(4, 1000 + i, B),
                      .start = &start, .e = &e[i], .x = x, .lab = lab, .n = N, .batch = B,
                      .lr = 0.02f};
    }
    run_workers(c, NW);
    sl_ps_stats st = drained_stats(ps, tmpl);
    sl_tensor_info *nbt = sl_model_tensor(tmpl, "bn1.num_batches_tracked");
    cr_assert_not_null(nbt);
    int64_t batches = *(int64_t *)nbt->data; /* 1 at create (the first loss_of) */
    float last = loss_of(tmpl, &e0, x, lab, N);
    cr_log_info("4 async workers, resnet20 w4: loss %.3f -> %.3f", (double)first, (double)last);
    cr_assert_eq(st.pushes, NW * STEPS);
    cr_assert_eq(st.updates, NW * STEPS);
    cr_assert_geq(st.staleness_max, 1, "4 workers started together must overlap");
    cr_assert_gt(first, 1.0f, "starts near ln 4");
    cr_assert_lt(last, 0.3f * first);
    cr_assert_gt(batches, 1, "BN buffers travel with the pushes");
    tbar_fini(&start);
    for (int i = 0; i < NW; i++) {
        sl_model_destroy(c[i].m);
        sl_exec_fini(&e[i]);
    }
    sl_ps_destroy(ps);
    sl_model_destroy(tmpl);
    sl_exec_fini(&e0);
    free(x);
}

/* ------------------------------------------------ snapshot and load */

/* One pull + fake-grad push by worker 0 (grads g). */
static void step_fake(sl_ps *ps, sl_model *m, float g, float lr)
{
    uint64_t v;
    cr_assert_eq(sl_ps_pull(ps, 0, m, &v), SL_OK, "%s", sl_errmsg());
    set_grads(m, g);
    cr_assert_eq(sl_ps_push(ps, 0, m, v, lr), SL_OK, "%s", sl_errmsg());
}

Test(train_ps, snapshot_load_round_trip)
{
    sl_ps_config cfg = ps_cfg(3, 1, -1);
    sl_model *t1 = mk(2, 1, 1), *t2 = mk(2, 2, 1), *w = mk(2, 3, 1);
    sl_model *m1 = mk(2, 4, 1), *m2 = mk(2, 5, 1), *m3 = mk(2, 6, 1);
    sl_sgd *o1 = opt_for(m1, &cfg.sgd), *o2 = opt_for(m2, &cfg.sgd), *o3 = opt_for(m3, &cfg.sgd);
    sl_ps *p1 = NULL, *p2 = NULL;
    cr_assert_eq(sl_ps_create(&cfg, t1, &p1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_ps_create(&cfg, t2, &p2), SL_OK, "%s", sl_errmsg());
    for (int s = 0; s < 3; s++)
        step_fake(p1, w, 0.1f * (s + 1), 0.1f);
    cr_assert_eq(sl_ps_snapshot(p1, m1, o1), SL_OK, "%s", sl_errmsg());
    /* p2 takes p1's state: its snapshot is p1's, bitwise */
    cr_assert_eq(sl_ps_load(p2, m1, o1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_ps_snapshot(p2, m2, o2), SL_OK, "%s", sl_errmsg());
    assert_same_model(m1, m2, "load then snapshot");
    assert_same_opt(o1, o2, "load then snapshot");
    int no;
    sl_tensor_info *os = sl_sgd_tensors(o2, &no);
    cr_assert_eq(*(int64_t *)os[no - 1].data, 3, "optimizer.step = pushes applied");
    /* the same next push gives the same state (momentum really restored) */
    sl_model *w2 = mk(2, 3, 1);
    step_fake(p1, w, -0.2f, 0.1f);
    step_fake(p2, w2, -0.2f, 0.1f);
    cr_assert_eq(sl_ps_snapshot(p1, m1, o1), SL_OK);
    cr_assert_eq(sl_ps_snapshot(p2, m2, o2), SL_OK);
    assert_same_model(m1, m2, "one more push");
    assert_same_opt(o1, o2, "one more push");
    /* and through a checkpoint file, as the trainer resumes */
    char *dir = tu_tmpdir(), *prefix = tu_join(dir, "ckpt-000000004");
    cr_assert_eq(sl_checkpoint_save(prefix, m1, o1, H, "{}"), SL_OK, "%s", sl_errmsg());
    char *path = NULL;
    cr_assert(asprintf(&path, "%s.safetensors", prefix) > 0);
    cr_assert_eq(sl_checkpoint_load(path, m3, o3, 1), SL_OK, "%s", sl_errmsg());
    sl_ps *p3 = NULL;
    sl_model *t3 = mk(2, 8, 1);
    cr_assert_eq(sl_ps_create(&cfg, t3, &p3), SL_OK);
    cr_assert_eq(sl_ps_load(p3, m3, o3), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_ps_snapshot(p3, m2, o2), SL_OK);
    assert_same_model(m1, m2, "checkpoint round trip");
    assert_same_opt(o1, o2, "checkpoint round trip");
    /* load without an optimizer: momentum starts afresh */
    cr_assert_eq(sl_ps_load(p3, m3, NULL), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_ps_snapshot(p3, m2, o2), SL_OK);
    os = sl_sgd_tensors(o2, &no);
    for (int i = 0; i < no - 1; i++)
        for (int64_t j = 0; j < os[i].numel; j++)
            cr_assert_eq(((float *)os[i].data)[j], 0.0f, "%s", os[i].name);
    cr_assert_eq(*(int64_t *)os[no - 1].data, 0);
    sl_ps_destroy(p1);
    sl_ps_destroy(p2);
    sl_ps_destroy(p3);
    sl_sgd_destroy(o1);
    sl_sgd_destroy(o2);
    sl_sgd_destroy(o3);
    sl_model *ms[] = {t1, t2, t3, w, w2, m1, m2, m3};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        sl_model_destroy(ms[i]);
    tu_rmrf(dir);
    free(path);
    free(prefix);
    free(dir);
}

Test(train_ps, stats_reset)
{
    sl_ps_config cfg = ps_cfg(2, 1, -1);
    sl_model *t = mk(2, 1, 1), *w = mk(2, 1, 1);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&cfg, t, &ps), SL_OK);
    step_fake(ps, w, 0.1f, 0.1f);
    step_fake(ps, w, 0.1f, 0.1f);
    sl_ps_stats st;
    cr_assert_eq(sl_ps_snapshot(ps, t, NULL), SL_OK);
    cr_assert_eq(sl_ps_stats_get(ps, &st, 1), SL_OK);
    cr_assert_eq(st.pushes, 2);
    cr_assert_eq(st.pulls, 2);
    cr_assert_eq(sl_ps_stats_get(ps, &st, 0), SL_OK);
    cr_assert_eq(st.pushes, 0);
    cr_assert_eq(st.shard_updates, 0);
    cr_assert_eq(st.version, 2, "the version is not a counter that resets");
    sl_ps_destroy(ps);
    sl_model_destroy(t);
    sl_model_destroy(w);
}

/* ------------------------------------------------------- errors */

Test(train_ps, bad_config_and_arguments)
{
    sl_model *t = mk(2, 1, 1), *other = mk(4, 1, 1), *w = mk(2, 1, 1);
    int n;
    sl_model_tensors(t, &n);
    sl_ps *ps = NULL;
    sl_ps_config c = ps_cfg(0, 1, -1);
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_ps_create"), "%s", sl_errmsg());
    c = ps_cfg(1, 0, -1);
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_EINVAL);
    c = ps_cfg(1, 1, -2);
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_EINVAL);
    c = ps_cfg(1, 1, -1);
    c.timeout_ms = 0;
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_EINVAL);
    c = ps_cfg(n + 1, 1, -1);
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "servers"), "%s", sl_errmsg());
    cr_assert_null(ps);
    cr_assert_eq(sl_ps_create(NULL, t, &ps), SL_EINVAL);

    c = ps_cfg(2, 2, -1);
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_OK, "%s", sl_errmsg());
    uint64_t v;
    cr_assert_eq(sl_ps_pull(ps, 2, w, &v), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "worker 2"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_push(ps, 0, w, 0, 0.1f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "before any pull"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_pull(ps, 0, other, &v), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "template"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_pull(ps, 0, w, &v), SL_OK);
    cr_assert_eq(sl_ps_push(ps, 0, w, v + 1, 0.1f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "last pull"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_push(ps, 0, w, v, -1.0f), SL_EINVAL);
    cr_assert_eq(sl_ps_push(ps, 0, w, v, NAN), SL_EINVAL);
    cr_assert_eq(sl_ps_push(ps, 0, other, v, 0.1f), SL_EINVAL);
    cr_assert_eq(sl_ps_snapshot(ps, other, NULL), SL_EINVAL);
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    sl_sgd *oo = opt_for(other, &sc);
    cr_assert_eq(sl_ps_snapshot(ps, w, oo), SL_EINVAL, "optimizer of another model");
    cr_assert(strstr(sl_errmsg(), "optimizer"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_worker_done(ps, 0), SL_OK);
    cr_assert_eq(sl_ps_pull(ps, 0, w, &v), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "done"), "%s", sl_errmsg());
    cr_assert_eq(sl_ps_push(ps, 0, w, v, 0.1f), SL_EINVAL);
    sl_ps_stats st;
    cr_assert_eq(sl_ps_stats_get(ps, NULL, 0), SL_EINVAL);
    cr_assert_eq(sl_ps_stats_get(ps, &st, 0), SL_OK);
    sl_ps_destroy(ps);
    sl_ps_destroy(NULL);
    sl_sgd_destroy(oo);
    sl_model_destroy(t);
    sl_model_destroy(other);
    sl_model_destroy(w);
}

Test(train_ps, ssp_wait_has_a_deadline)
{
    /* K = 0, two workers: worker 1 may not start step 1 before worker 0
     * finished step 0. Worker 0 never comes: a timeout naming it. Once
     * worker 0 is done, worker 1 goes on. */
    sl_model *t = mk(2, 1, 1), *w = mk(2, 1, 1);
    sl_ps_config c = ps_cfg(2, 2, 0);
    c.timeout_ms = 150;
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_OK);
    uint64_t v;
    cr_assert_eq(sl_ps_pull(ps, 1, w, &v), SL_OK);
    set_grads(w, 0.1f);
    cr_assert_eq(sl_ps_push(ps, 1, w, v, 0.1f), SL_OK);
    double t0 = sl_now_s();
    cr_assert_eq(sl_ps_pull(ps, 1, w, &v), SL_ETIMEDOUT);
    double waited = sl_now_s() - t0;
    cr_assert(strstr(sl_errmsg(), "worker 0"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "max_staleness 0"), "%s", sl_errmsg());
    cr_assert(waited >= 0.14 && waited < 5.0, "waited %.3f s", waited);
    cr_assert_eq(sl_ps_worker_done(ps, 0), SL_OK);
    cr_assert_eq(sl_ps_pull(ps, 1, w, &v), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(v, 1);
    sl_ps_stats st;
    cr_assert_eq(sl_ps_stats_get(ps, &st, 0), SL_OK);
    cr_assert_geq(st.ssp_waits, 1);
    sl_ps_destroy(ps);
    sl_model_destroy(t);
    sl_model_destroy(w);
}

typedef struct pull_ctx {
    sl_ps *ps;
    sl_model *m;
    int rc;
    double secs;
    char msg[SL_ERRMSG_MAX];
} pull_ctx;

static void *pull_main(void *arg)
{
    pull_ctx *c = arg;
    double t0 = sl_now_s();
    c->rc = sl_ps_pull(c->ps, 1, c->m, NULL);
    c->secs = sl_now_s() - t0;
    snprintf(c->msg, sizeof c->msg, "%s", sl_errmsg());
    return NULL;
}

Test(train_ps, abort_wakes_a_waiting_pull)
{
    /* worker 1 waits (K = 0) for worker 0, which "failed": the trainer
     * aborts, and the wait ends at once with the reason, long before the
     * 20 s timeout; every later call fails the same way. */
    sl_model *t = mk(2, 1, 1), *w = mk(2, 1, 1);
    sl_ps_config c = ps_cfg(2, 2, 0);
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_OK);
    uint64_t v;
    cr_assert_eq(sl_ps_pull(ps, 1, w, &v), SL_OK);
    cr_assert_eq(sl_ps_push(ps, 1, w, v, 0.1f), SL_OK);
    pull_ctx pc = {.ps = ps, .m = w};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, pull_main, &pc), 0);
    usleep(50000);
    sl_ps_abort(ps, "worker 0 failed: disk full");
    pthread_join(th, NULL);
    cr_assert_eq(pc.rc, SL_ECANCELED, "%s", pc.msg);
    cr_assert(strstr(pc.msg, "worker 0 failed: disk full"), "%s", pc.msg);
    cr_assert_lt(pc.secs, 10.0);
    cr_assert_eq(sl_ps_pull(ps, 0, w, &v), SL_ECANCELED);
    cr_assert_eq(sl_ps_snapshot(ps, t, NULL), SL_ECANCELED);
    sl_ps_abort(NULL, "no-op");
    sl_ps_destroy(ps);
    sl_model_destroy(t);
    sl_model_destroy(w);
}

Test(train_ps, full_inbox_is_backpressure_not_loss)
{
    /* One slot per server: many quick pushes from one worker queue behind
     * each other, and every one is applied. */
    sl_model *t = mk(2, 1, 1), *w = mk(2, 1, 1);
    sl_ps_config c = ps_cfg(2, 1, -1);
    c.queue_depth = 1;
    sl_ps *ps = NULL;
    cr_assert_eq(sl_ps_create(&c, t, &ps), SL_OK);
    uint64_t v;
    cr_assert_eq(sl_ps_pull(ps, 0, w, &v), SL_OK);
    set_grads(w, 0.01f);
    for (int i = 0; i < 20; i++) /* pushes from one pull, as gradient accumulation would */
        cr_assert_eq(sl_ps_push(ps, 0, w, v, 0.1f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_ps_pull(ps, 0, w, &v), SL_OK);
    cr_assert_eq(v, 20);
    sl_ps_stats st;
    cr_assert_eq(sl_ps_stats_get(ps, &st, 0), SL_OK);
    cr_assert_eq(st.updates, 20);
    cr_assert_eq(st.staleness_max, 19, "each push counts the ones before it");
    sl_ps_destroy(ps);
    sl_model_destroy(t);
    sl_model_destroy(w);
}

/*
 * tests/pipeline/test_tune.c - pipeline/tune.c: online tuning changes when
 * a batch is ready, never what it holds.
 *
 *   forced_schedule   active workers and prefetch moved up and down every
 *                     batch (sl_tune_force) give the bytes of a fixed run
 *                     (2 workers, prefetch 3), and the tuning report says
 *                     the range used
 *   holding_consumer  a consumer that holds batches while it takes the
 *                     next ones (the held-back samples must be woken when
 *                     next() moves on) does not hang, same bytes
 *   policy_parks      a slow consumer (the pipeline never waited on): the
 *                     policy parks workers, and says why
 *   off               without cfg.tune the report is the fixed settings
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/graph_int.h"
#include "pipeline_testdata.h"

static pl_dataset g_d;

static void setup(void)
{
    pl_make_dataset(&g_d, 240, 3, 0, NULL);
}

static void teardown(void)
{
    pl_dataset_free(&g_d);
}

TestSuite(pipeline_tune, .init = setup, .fini = teardown, .timeout = 120);

static void config(sl_pipeline_config *c)
{
    pl_config(c, &g_d);
    c->epochs = 3;
    c->workers = 2;
    c->prefetch = 3;
}

static void same_run(const pl_run *a, const pl_run *b)
{
    cr_assert_eq(a->nb, b->nb);
    cr_assert_eq(a->ns, b->ns);
    for (size_t i = 0; i < a->nb; i++)
        cr_assert_eq(a->digest[i], b->digest[i], "batch %zu differs", i);
    cr_assert_eq(memcmp(a->ids, b->ids, a->ns * sizeof *a->ids), 0);
}

Test(pipeline_tune, forced_schedule)
{
    sl_pipeline_config c;
    config(&c);
    pl_run fixed = {0}, tuned = {0};
    pl_run_config(&c, &fixed, 0);

    c.workers = 4;
    c.prefetch = 6;
    c.tune = SL_TUNE_WORKERS | SL_TUNE_PREFETCH;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    const unsigned w[] = {1, 4, 2, 3, 1, 1, 4, 2}, a[] = {2, 6, 3, 2, 5, 2, 4, 6};
    cr_assert_eq(sl_tune_force(p, w, a, 8), SL_OK);
    pl_collect(p, &tuned, SIZE_MAX, 0);
    cr_assert_eq(tuned.end_rc, SL_EOF);
    sl_pipeline_tuning t;
    cr_assert_eq(sl_pipeline_tuning_get(p, &t), SL_OK);
    cr_assert_eq(t.knobs, SL_TUNE_WORKERS | SL_TUNE_PREFETCH);
    cr_assert_eq(t.workers_max, 4);
    cr_assert_eq(t.prefetch_max, 6);
    cr_assert_eq(t.workers_lo, 1);
    cr_assert_eq(t.workers_hi, 4);
    cr_assert_eq(t.prefetch_lo, 2);
    cr_assert_eq(t.prefetch_hi, 6);
    cr_assert_gt(t.changes, 20, "%llu changes", (unsigned long long)t.changes);
    cr_assert(t.workers_mean > 1 && t.workers_mean < 4, "%g", t.workers_mean);
    cr_assert(strstr(t.last, "forced"), "%s", t.last);
    sl_pipeline_destroy(p);
    same_run(&fixed, &tuned);
    pl_run_free(&fixed);
    pl_run_free(&tuned);
}

Test(pipeline_tune, holding_consumer)
{
    sl_pipeline_config c;
    config(&c);
    pl_run fixed = {0};
    pl_run_config(&c, &fixed, 0);
    c.workers = 3;
    c.prefetch = 5;
    c.tune = SL_TUNE_WORKERS | SL_TUNE_PREFETCH;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    /* a constant schedule: no change, so no wake-up from set(); two
     * batches ahead at most while three are held */
    const unsigned w[] = {3}, a[] = {2};
    cr_assert_eq(sl_tune_force(p, w, a, 1), SL_OK);
    /* hold up to 3 batches (prefetch - 2), give back the oldest after */
    sl_batch *held[3];
    size_t nh = 0, nb = 0;
    int rc;
    for (;;) {
        sl_batch *b;
        if ((rc = sl_pipeline_next(p, &b)))
            break;
        cr_assert_eq(pl_digest(b), fixed.digest[nb], "batch %zu differs", nb);
        nb++;
        held[nh++] = b;
        if (nh == 3) {
            sl_pipeline_release(p, held[0]);
            memmove(held, held + 1, 2 * sizeof *held);
            nh = 2;
        }
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(nb, fixed.nb);
    while (nh)
        sl_pipeline_release(p, held[--nh]);
    sl_pipeline_destroy(p);
    pl_run_free(&fixed);
}

Test(pipeline_tune, policy_parks)
{
    sl_pipeline_config c;
    config(&c);
    c.workers = 4;
    c.prefetch = 6;
    c.tune = SL_TUNE_WORKERS | SL_TUNE_PREFETCH;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b;
    int rc;
    /* a consumer much slower than 4 workers: 25 ms a batch of 16 tiny
     * images (a worker decodes one in well under 1 ms, a few ms under a
     * sanitizer) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    struct timespec nap = {0, 200000000}; /* TSan: 4 workers decode a batch in ~60 ms */
#else
    struct timespec nap = {0, 25000000};
#endif
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        nanosleep(&nap, NULL);
        sl_pipeline_release(p, b);
    }
    cr_assert_eq(rc, SL_EOF);
    sl_pipeline_tuning t;
    cr_assert_eq(sl_pipeline_tuning_get(p, &t), SL_OK);
    cr_assert_gt(t.windows, 3);
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_lt(t.workers_lo, 4, "no worker parked in %llu windows (%.2f s; waited in next() "
                 "%.3f s, map busy %.3f s)", (unsigned long long)t.windows, st.elapsed_s,
                 st.stages[3].wait_in_s, st.stages[2].busy_s);
    cr_assert_lt(t.workers, 4);
    cr_assert(strstr(t.last, "no waits"), "%s", t.last);
    sl_pipeline_destroy(p);
}

Test(pipeline_tune, off)
{
    sl_pipeline_config c;
    config(&c);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_pipeline_tuning t;
    cr_assert_eq(sl_pipeline_tuning_get(p, &t), SL_OK);
    cr_assert_eq(t.knobs, 0);
    cr_assert_eq(t.workers, 2);
    cr_assert_eq(t.prefetch, 3);
    cr_assert_eq(t.changes, 0);
    cr_assert_eq(sl_tune_force(p, (unsigned[]){1}, (unsigned[]){2}, 1), SL_EINVAL);
    sl_pipeline_destroy(p);
}

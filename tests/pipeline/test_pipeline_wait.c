/* tests/pipeline/test_pipeline_wait.c - the consumer calls a binding needs
 * (python/): sl_pipeline_next_wait (a bounded wait, then SL_ETIMEDOUT, and
 * the stream unchanged by any mix of timeouts) and sl_pipeline_stop
 * (threads joined, lent batches still readable until destroy). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline_testdata.h"
#include "testutil.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

Test(pipeline_wait, timeouts_leave_the_stream_unchanged)
{
    pl_dataset d;
    pl_make_dataset(&d, 90, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    /* Big outputs: the first batch takes far longer than the call right
     * after create, so that call must time out. */
    c.height = c.width = 384;
    c.workers = 1;
    pl_run want = {0};
    pl_run_config(&c, &want, 0);
    cr_assert_eq(want.end_rc, SL_EOF, "%s", sl_errmsg());

    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    size_t nb = 0, timeouts = 0;
    for (;;) {
        sl_batch *b = (sl_batch *)1;
        int rc = sl_pipeline_next_wait(p, 0, &b);
        if (rc == SL_ETIMEDOUT) {
            cr_assert_null(b, "nothing is lent on a timeout");
            cr_assert(strstr(sl_errmsg(), "not ready"), "%s", sl_errmsg());
            timeouts++;
            continue;
        }
        if (rc == SL_EOF)
            break;
        cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
        cr_assert_lt(nb, want.nb);
        cr_assert_eq(b->index, nb);
        cr_assert_eq(pl_digest(b), want.digest[nb], "batch %zu differs from next()'s", nb);
        nb++;
        sl_pipeline_release(p, b);
    }
    cr_assert_eq(nb, want.nb);
    cr_assert_gt(timeouts, 0, "a zero timeout right after create must time out");
    sl_pipeline_destroy(p);
    pl_run_free(&want);
    pl_dataset_free(&d);
}

Test(pipeline_wait, timeout_is_honoured)
{
    pl_dataset d;
    pl_make_dataset(&d, 40, 2, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.height = c.width = 1024; /* about 16 x 12 MB per batch: far slower than 20 ms */
    c.batch = 16;
    c.workers = 1;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b;
    double t0 = now_s();
    int rc = sl_pipeline_next_wait(p, 20, &b);
    double dt = now_s() - t0;
    cr_assert_eq(rc, SL_ETIMEDOUT, "rc %d: %s", rc, sl_errmsg());
    cr_assert_geq(dt, 0.019, "returned after %.4f s, before the timeout", dt);
    cr_assert_lt(dt, 5.0, "waited %.2f s for a 20 ms timeout", dt);
    /* A long enough wait then gets the batch. */
    cr_assert_eq(sl_pipeline_next_wait(p, 600000, &b), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(b->index, 0);
    sl_pipeline_release(p, b);
    sl_pipeline_destroy(p);
    pl_dataset_free(&d);
}

Test(pipeline_wait, stop_keeps_lent_batches_readable)
{
    pl_dataset d;
    pl_make_dataset(&d, 120, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 0; /* forever: the threads are busy when stop comes */
    pl_run want = {0};
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    pl_collect(p, &want, 2, 0);
    sl_pipeline_destroy(p);

    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b0, *b1, *b;
    cr_assert_eq(sl_pipeline_next(p, &b0), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_pipeline_next(p, &b1), SL_OK, "%s", sl_errmsg());
    sl_pipeline_stop(p);
    sl_pipeline_stop(p); /* idempotent */
    cr_assert_eq(pl_digest(b0), want.digest[0], "a lent batch survives stop");
    cr_assert_eq(pl_digest(b1), want.digest[1]);
    cr_assert_eq(sl_pipeline_next(p, &b), SL_ECANCELED);
    cr_assert_eq(sl_pipeline_next_wait(p, 10, &b), SL_ECANCELED);
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.batches, 2);
    char state[SL_PIPELINE_STATE_MAX];
    size_t len;
    cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK, "%s", sl_errmsg());
    sl_pipeline_release(p, b0);
    cr_assert_eq(pl_digest(b1), want.digest[1], "releasing one does not touch the other");
    sl_pipeline_release(p, b1);
    sl_pipeline_destroy(p);
    sl_pipeline_stop(NULL);

    /* The state saved after stop resumes at batch 2. */
    cr_assert_eq(sl_pipeline_create_from_state(&c, state, len, &p), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_pipeline_next(p, &b), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(b->index, 2);
    sl_pipeline_release(p, b);
    sl_pipeline_destroy(p);
    pl_run_free(&want);
    pl_dataset_free(&d);
}

/* tests/pipeline/test_state.c - resume: after k batches, save the state,
 * destroy, create from the state (other thread counts, other prefetch):
 * the following batches must equal, byte for byte, those of a run that was
 * never interrupted. Cuts in the middle of an epoch, across an epoch
 * boundary, at the start and at the end, in every shuffle mode. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/pipeline.h"
#include "pipeline_testdata.h"
#include "testutil.h"

/* Run c for k batches with 1 reader / 1 worker, save, destroy, resume with
 * 3 readers / 2 workers / prefetch 5 and compare with ref from batch k on. */
static void check_resume(const sl_pipeline_config *c, const pl_run *ref, size_t k)
{
    sl_pipeline_config a = *c, b = *c;
    a.readers = 1;
    a.workers = 1;
    b.readers = 3;
    b.workers = 2;
    b.prefetch = 5;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&a, &p), SL_OK, "%s", sl_errmsg());
    pl_run first = {0};
    pl_collect(p, &first, k, 0);
    cr_assert_eq(first.nb, k);
    char state[SL_PIPELINE_STATE_MAX];
    size_t len = 0;
    cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(len, strlen(state));
    sl_pipeline_destroy(p);
    for (size_t i = 0; i < k; i++)
        cr_assert_eq(first.digest[i], ref->digest[i], "batch %zu before the cut", i);

    cr_assert_eq(sl_pipeline_create_from_state(&b, state, len, &p), SL_OK, "k %zu: %s", k,
                 sl_errmsg());
    pl_run rest = {0};
    rest.nb = k; /* batch indices continue */
    pl_collect(p, &rest, SIZE_MAX, 0);
    sl_pipeline_destroy(p);
    cr_assert_eq(rest.end_rc, SL_EOF, "k %zu: %s", k, sl_errmsg());
    cr_assert_eq(rest.nb, ref->nb, "k %zu: batches", k);
    for (size_t i = k; i < ref->nb; i++)
        cr_assert_eq(rest.digest[i], ref->digest[i], "k %zu: batch %zu differs after resume", k,
                     i);
    pl_run_free(&first);
    pl_run_free(&rest);
}

static void resume_cases(sl_pipeline_config *c, const size_t *ks, size_t nk)
{
    pl_run ref;
    pl_run_config(c, &ref, 0);
    cr_assert_eq(ref.end_rc, SL_EOF);
    for (size_t i = 0; i < nk; i++)
        check_resume(c, &ref, ks[i] == SIZE_MAX ? ref.nb : ks[i]);
    pl_run_free(&ref);
}

Test(pipeline_state, resume_buffer)
{
    pl_dataset d;
    pl_make_dataset(&d, 300, 5, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 2; /* 600 samples: 37 batches of 16 and one of 8 */
    /* mid-epoch 0; past the boundary (sample 320, buffer spans epochs 0 and
     * 1); start; last batch; after the end */
    const size_t ks[] = {7, 20, 0, 37, SIZE_MAX};
    resume_cases(&c, ks, 5);
    pl_dataset_free(&d);
}

Test(pipeline_state, resume_global_and_none)
{
    pl_dataset d;
    pl_make_dataset(&d, 200, 4, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 2;
    const size_t ks[] = {5, 13, 0, SIZE_MAX};
    c.shuffle = SL_SHUFFLE_GLOBAL;
    resume_cases(&c, ks, 4);
    c.shuffle = SL_SHUFFLE_NONE;
    resume_cases(&c, ks, 4);
    pl_dataset_free(&d);
}

Test(pipeline_state, resume_buffer_larger_than_epoch)
{
    pl_dataset d;
    pl_make_dataset(&d, 120, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 3;
    c.shuffle_buffer = 1000;
    c.batch = 12;
    c.layout = SL_LAYOUT_NHWC_U8;
    c.drop_remainder = 1;
    const size_t ks[] = {3, 11, 25};
    resume_cases(&c, ks, 3);
    pl_dataset_free(&d);
}

Test(pipeline_state, resume_with_bad_records_and_eval)
{
    uint8_t bad[150] = {0};
    bad[3] = PL_BAD_CRC;
    bad[40] = PL_BAD_NOT_JPEG;
    bad[41] = PL_BAD_TRUNCATED;
    bad[149] = PL_BAD_CRC; /* refilled from id 0 (wraps) */
    pl_dataset d;
    pl_make_dataset(&d, 150, 3, 0, bad);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 2;
    c.block = 5;
    c.transform = SL_TRANSFORM_EVAL;
    const size_t ks[] = {4, 10};
    resume_cases(&c, ks, 2);
    pl_dataset_free(&d);
}

Test(pipeline_state, resume_twice)
{
    pl_dataset d;
    pl_make_dataset(&d, 100, 2, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 3;
    c.shuffle_buffer = 60;
    pl_run ref;
    pl_run_config(&c, &ref, 0);
    char state[SL_PIPELINE_STATE_MAX];
    size_t len;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    pl_run r = {0};
    pl_collect(p, &r, 4, 0);
    cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK);
    sl_pipeline_destroy(p);
    cr_assert_eq(sl_pipeline_create_from_state(&c, state, len, &p), SL_OK, "%s", sl_errmsg());
    pl_collect(p, &r, 9, 0);
    cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK);
    sl_pipeline_destroy(p);
    cr_assert_eq(sl_pipeline_create_from_state(&c, state, len, &p), SL_OK, "%s", sl_errmsg());
    pl_collect(p, &r, SIZE_MAX, 0);
    sl_pipeline_destroy(p);
    cr_assert_eq(r.end_rc, SL_EOF);
    cr_assert_eq(r.nb, ref.nb);
    cr_assert_eq(memcmp(r.digest, ref.digest, r.nb * sizeof *r.digest), 0);
    pl_run_free(&r);
    pl_run_free(&ref);
    pl_dataset_free(&d);
}

/* --------------------------------------------------- the state itself */

static void expect_mismatch(const sl_pipeline_config *c, const char *state, size_t len,
                            const char *part)
{
    sl_pipeline *p = (sl_pipeline *)1;
    cr_assert_eq(sl_pipeline_create_from_state(c, state, len, &p), SL_EINVAL, "part %s", part);
    cr_assert_null(p);
    cr_assert(strstr(sl_errmsg(), part), "part %s: %s", part, sl_errmsg());
}

Test(pipeline_state, state_is_small_json_and_checked)
{
    pl_dataset d;
    pl_make_dataset(&d, 100, 2, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.seed = 0xfedcba9876543210ull; /* needs all 64 bits */
    sl_pipeline *p;
    sl_batch *b;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sl_pipeline_next(p, &b), SL_OK);
        sl_pipeline_release(p, b);
    }
    char state[SL_PIPELINE_STATE_MAX], tiny[16];
    size_t len;
    cr_assert_eq(sl_pipeline_state_save(p, tiny, sizeof tiny, &len), SL_EINVAL);
    cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK);
    sl_pipeline_destroy(p);
    cr_assert_lt(len, SL_PIPELINE_STATE_MAX);
    cJSON *j = cJSON_ParseWithLength(state, len);
    cr_assert_not_null(j, "%s", state);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "batches")->valuestring, "3");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "samples")->valuestring, "48");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "seed")->valuestring, "18364758544493064720");
    cJSON_Delete(j);

    /* Thread counts, prefetch, window, device-independent knobs may change. */
    sl_pipeline_config ok = c;
    ok.readers = 4;
    ok.workers = 1;
    ok.prefetch = 7;
    ok.read_window_bytes = 12345;
    cr_assert_eq(sl_pipeline_create_from_state(&ok, state, len, &p), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_pipeline_next(p, &b), SL_OK);
    cr_assert_eq(b->index, 3);
    sl_pipeline_release(p, b);
    sl_pipeline_destroy(p);

    /* What changes the stream may not. */
    sl_pipeline_config bad = c;
    bad.seed = 1;
    expect_mismatch(&bad, state, len, "order");
    bad = c;
    bad.shuffle_buffer = 99;
    expect_mismatch(&bad, state, len, "order");
    bad = c;
    bad.block = 3;
    expect_mismatch(&bad, state, len, "order");
    bad = c;
    bad.height = 21;
    expect_mismatch(&bad, state, len, "transform");
    bad = c;
    bad.scale_min = 0.5f;
    expect_mismatch(&bad, state, len, "transform");
    bad = c;
    bad.batch = 8;
    expect_mismatch(&bad, state, len, "batch");
    bad = c;
    bad.label_offset = 3;
    expect_mismatch(&bad, state, len, "source");

    /* Damaged or foreign states. */
    expect_mismatch(&c, "{}", 2, "state");
    expect_mismatch(&c, "not json", 8, "JSON");
    char edited[SL_PIPELINE_STATE_MAX];
    memcpy(edited, state, len + 1);
    char *h = strstr(edited, "\"order\":\"");
    cr_assert_not_null(h);
    h[9] = h[9] == '0' ? '1' : '0'; /* parts no longer match config_hash */
    expect_mismatch(&c, edited, len, "damaged");
    /* The version is the integer 1, not a number that rounds to it (cJSON's
     * valueint of 1.5 is 1), nor one no int holds. */
    static const char *const versions[] = {"1.5", "1.000001", "1e300", "-1e999", "\"1\""};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        char *v = strstr(state, "\"v\":1,");
        cr_assert_not_null(v, "%s", state);
        int m = snprintf(edited, sizeof edited, "%.*s\"v\":%s,%s", (int)(v - state), state,
                         versions[i], v + 6);
        expect_mismatch(&c, edited, (size_t)m, "state version is not 1");
    }
    /* Consistent hash but a position past the end. */
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_state_save(p, edited, sizeof edited, &len), SL_OK);
    sl_pipeline_destroy(p);
    char *pos = strstr(edited, "\"batches\":\"0\",\"samples\":\"0\"");
    cr_assert_not_null(pos, "%s", edited);
    char moved[SL_PIPELINE_STATE_MAX];
    int n = snprintf(moved, sizeof moved, "%.*s\"batches\":\"99\",\"samples\":\"1584\"}",
                     (int)(pos - edited), edited);
    expect_mismatch(&c, moved, (size_t)n, "inconsistent");
    pl_dataset_free(&d);
}

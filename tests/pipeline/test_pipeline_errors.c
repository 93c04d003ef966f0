/* tests/pipeline/test_pipeline_errors.c - the graph when things go wrong:
 * corrupt records (skip-and-refill or fail), shutdown at awkward moments,
 * holding too many batches, bad configs; and the per-stage stats. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_int.h"
#include "pipeline_testdata.h"
#include "testutil.h"

/* ---------------------------------------------------------- corrupt */

#define NREC 150
/* Bad records at ids 20 (payload byte flipped: CRC), 71 (truncated JPEG,
 * valid CRC), 122 (not a JPEG). Shards of 150 over 3: 25, 50, 75 records,
 * so they sit in shards 0 (record 20), 1 (record 46) and 2 (record 47). */
static const uint64_t bad_ids[3] = {20, 71, 122};
static const char *const bad_file[3] = {"train-00000-of-00003.tfrecord",
                                        "train-00001-of-00003.tfrecord",
                                        "train-00002-of-00003.tfrecord"};
static const char *const bad_rec[3] = {"record 20 @", "record 46 @", "record 47 @"};

static void make_bad_dataset(pl_dataset *d)
{
    uint8_t bad[NREC] = {0};
    bad[bad_ids[0]] = PL_BAD_CRC;
    bad[bad_ids[1]] = PL_BAD_TRUNCATED;
    bad[bad_ids[2]] = PL_BAD_NOT_JPEG;
    pl_make_dataset(d, NREC, 3, 0, bad);
    cr_assert_eq(d->shard_n[0], 25);
    cr_assert_eq(d->shard_n[1], 50);
}

Test(pipeline_errors, corrupt_records_skipped_and_refilled)
{
    pl_dataset d;
    make_bad_dataset(&d);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.shuffle = SL_SHUFFLE_NONE;
    c.workers = 3;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    pl_run r = {0};
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(r.ns, NREC, "batches stay full");
    for (size_t b = 0; b + 1 < r.nb; b++)
        cr_assert_eq(r.bn[b], 16);

    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.bad_records, 3);
    for (int i = 0; i < 3; i++) {
        int found = 0;
        for (int k = 0; k < 3; k++)
            found |= strstr(st.bad[k], bad_file[i]) && strstr(st.bad[k], bad_rec[i]);
        cr_assert(found, "no report names %s %s: [%s] [%s] [%s]", bad_file[i], bad_rec[i],
                  st.bad[0], st.bad[1], st.bad[2]);
    }
    int crc = 0;
    for (int k = 0; k < 3; k++)
        crc |= strstr(st.bad[k], "CRC") != NULL;
    cr_assert(crc, "the flipped byte is reported as a CRC mismatch");
    sl_pipeline_destroy(p);

    /* The bad ids never come out; the id after each comes out twice
     * (its own turn and the refill), each copy labelled right. */
    unsigned count[NREC] = {0};
    for (size_t i = 0; i < r.ns; i++) {
        count[r.ids[i]]++;
        cr_assert_eq(r.labels[i], (int32_t)(r.ids[i] % 10));
    }
    for (uint64_t id = 0; id < NREC; id++) {
        unsigned want = 1;
        for (int i = 0; i < 3; i++) {
            if (id == bad_ids[i])
                want = 0;
            if (id == bad_ids[i] + 1)
                want = 2;
        }
        cr_assert_eq(count[id], want, "id %llu: %u times", (unsigned long long)id, count[id]);
    }
    /* No shuffle: the output is the read order, except that the slot of
     * each bad record holds the record after it. */
    size_t norder, refilled = 0;
    uint64_t *order = pl_read_order(&d, &c, &norder);
    for (size_t pos = 0; pos < norder; pos++) {
        uint64_t id = order[pos], want = id;
        for (int k = 0; k < 3; k++)
            if (id == bad_ids[k])
                want = id + 1, refilled++;
        cr_assert_eq(r.ids[pos], want, "sample %zu", pos);
    }
    cr_assert_eq(refilled, 3);
    free(order);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

/* Under the eval transform a bad record is left out, not refilled: every
 * good record once, with the very pixels a clean dataset gives it, no
 * duplicate; batches keep their number and index (issue 38 item 6). */
Test(pipeline_errors, eval_leaves_bad_records_out)
{
    pl_dataset d, clean;
    make_bad_dataset(&d);
    pl_make_dataset(&clean, NREC, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.transform = SL_TRANSFORM_EVAL;
    c.shuffle = SL_SHUFFLE_NONE;
    c.workers = 3;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    pl_run r = {0}, ref = {0};
    pl_collect(p, &r, SIZE_MAX, 1);
    cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    sl_pipeline_destroy(p);
    cr_assert_eq(st.bad_records, 3);
    cr_assert_eq(st.bad_records_out, 3, "in the batches handed out");
    cr_assert_eq(r.nb, (NREC + 15) / 16, "the batches of a full run: %zu", r.nb);
    cr_assert_eq(r.ns, NREC - 3, "%zu samples", r.ns);
    unsigned short_batches = 0;
    for (size_t b = 0; b + 1 < r.nb; b++)
        short_batches += r.bn[b] == 15;
    cr_assert_eq(short_batches, 3, "each bad record's batch is one shorter");

    c.data = clean.dir;
    pl_run_config(&c, &ref, 1);
    cr_assert_eq(ref.ns, NREC);
    unsigned count[NREC] = {0};
    for (size_t i = 0; i < r.ns; i++) {
        uint64_t id = r.ids[i];
        count[id]++;
        cr_assert_eq(r.labels[i], (int32_t)(id % 10));
        size_t j = 0;
        while (ref.ids[j] != id)
            j++;
        cr_assert(!memcmp(r.data + i * r.sample_bytes, ref.data + j * ref.sample_bytes,
                          r.sample_bytes), "id %llu: its own pixels", (unsigned long long)id);
    }
    for (uint64_t id = 0; id < NREC; id++) {
        int bad = id == bad_ids[0] || id == bad_ids[1] || id == bad_ids[2];
        cr_assert_eq(count[id], bad ? 0u : 1u, "id %llu: %u times", (unsigned long long)id,
                     count[id]);
    }
    pl_run_free(&r);
    pl_run_free(&ref);
    pl_dataset_free(&clean);
    pl_dataset_free(&d);
}

/* Every record bad: the train transform's refill fails naming the first
 * bad record (file, record, why), not only "no good record left"; the eval
 * transform hands out empty batches and counts each record once. */
Test(pipeline_errors, all_bad_names_the_first)
{
    enum { N = 20 };
    uint8_t bad[N];
    memset(bad, PL_BAD_NOT_JPEG, sizeof bad);
    pl_dataset d;
    pl_make_dataset(&d, N, 1, 0, bad);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.shuffle = SL_SHUFFLE_NONE;
    c.workers = 1;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b;
    cr_assert_eq(sl_pipeline_next(p, &b), SL_ECORRUPT);
    const char *msg = sl_errmsg();
    cr_assert(strstr(msg, "no good record left") && strstr(msg, "all 20 records are bad") &&
              strstr(msg, "the first: ") && strstr(msg, "train-00000-of-00001.tfrecord: record 0 @") &&
              strstr(msg, "not a JPEG"), "%s", msg);
    sl_pipeline_destroy(p);

    c.transform = SL_TRANSFORM_EVAL;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    pl_run r = {0};
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(r.nb, 2);
    cr_assert_eq(r.ns, 0);
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.bad_records, N);
    cr_assert(strstr(st.bad[0], "record 0 @") && strstr(st.bad[0], "not a JPEG"), "%s",
              st.bad[0]);
    sl_pipeline_destroy(p);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

Test(pipeline_errors, corrupt_record_fails_with_policy_fail)
{
    pl_dataset d;
    make_bad_dataset(&d);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.shuffle = SL_SHUFFLE_NONE;
    c.on_error = SL_ON_ERROR_FAIL;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    pl_run r = {0};
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_ECORRUPT);
    const char *msg = sl_errmsg();
    cr_assert(strstr(msg, bad_file[0]) && strstr(msg, bad_rec[0]) && strstr(msg, "CRC"),
              "message: %s", msg);
    /* Sticky: the next call says the same. */
    sl_batch *b;
    cr_assert_eq(sl_pipeline_next(p, &b), SL_ECORRUPT);
    cr_assert_null(b);
    cr_assert(strstr(sl_errmsg(), bad_rec[0]));
    sl_pipeline_destroy(p);
    pl_run_free(&r);

    /* max_bad: two allowed, the third fails. */
    c.on_error = SL_ON_ERROR_SKIP;
    c.max_bad = 2;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "max_bad"), "%s", sl_errmsg());
    sl_pipeline_destroy(p);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

/* --------------------------------------------------------- shutdown */

Test(pipeline_errors, destroy_mid_run)
{
    pl_dataset d;
    pl_make_dataset(&d, 120, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.workers = 3;
    sl_pipeline *p;
    sl_batch *b, *b2;

    /* After 0 batches, right away. */
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    sl_pipeline_destroy(p);

    /* After 1 batch. */
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b), SL_OK);
    sl_pipeline_release(p, b);
    sl_pipeline_destroy(p);

    /* While holding a batch (and with the ring full behind it). */
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b2), SL_OK);
    cr_assert_eq(b2->index, 1);
    sl_pipeline_destroy(p);

    /* Forever, a big buffer, mid-stream. */
    c.epochs = 0;
    c.shuffle_buffer = 300;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    pl_run r = {0};
    pl_collect(p, &r, 20, 0); /* 320 samples: into the third epoch */
    cr_assert_eq(r.nb, 20);
    int max_epoch = 0;
    for (size_t i = 0; i < r.ns; i++)
        max_epoch = r.epochs[i] > max_epoch ? r.epochs[i] : max_epoch;
    cr_assert_geq(max_epoch, 2);
    sl_pipeline_destroy(p);
    pl_run_free(&r);

    /* Forever with GLOBAL, destroyed while workers wait for ring slots. */
    c.shuffle = SL_SHUFFLE_GLOBAL;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b), SL_OK);
    sl_pipeline_destroy(p);
    sl_pipeline_destroy(NULL);
    pl_dataset_free(&d);
}

Test(pipeline_errors, holding_prefetch_batches_is_einval)
{
    pl_dataset d;
    pl_make_dataset(&d, 100, 2, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.prefetch = 3;
    c.batch = 8;
    sl_pipeline *p;
    sl_batch *b[3];
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b[0]), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b[1]), SL_OK);
    cr_assert_eq(sl_pipeline_next(p, &b[2]), SL_EINVAL, "a third with prefetch 3");
    cr_assert(strstr(sl_errmsg(), "prefetch"), "%s", sl_errmsg());
    /* Not sticky: releasing one lets the run go on, in order. */
    sl_pipeline_release(p, b[0]);
    cr_assert_eq(sl_pipeline_next(p, &b[2]), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(b[2]->index, 2);
    /* Releasing twice or a foreign batch changes nothing. */
    sl_pipeline_release(p, b[1]);
    sl_pipeline_release(p, b[1]);
    sl_batch fake = *b[2];
    sl_pipeline_release(p, &fake);
    sl_pipeline_release(p, b[2]);
    pl_run r = {0};
    r.nb = 3; /* pl_collect checks indices from here */
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_EOF);
    cr_assert_eq(r.nb, (100 + 7) / 8);
    sl_pipeline_destroy(p);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

/* ------------------------------------------------------------- config */

static void expect_einval(const sl_pipeline_config *c, const char *field)
{
    sl_pipeline *p = (sl_pipeline *)1;
    cr_assert_eq(sl_pipeline_create(c, &p), SL_EINVAL, "field %s", field);
    cr_assert_null(p);
    cr_assert(strstr(sl_errmsg(), field), "message for %s: %s", field, sl_errmsg());
}

Test(pipeline_errors, bad_configs)
{
    pl_dataset d;
    pl_make_dataset(&d, 20, 1, 0, NULL);
    sl_pipeline_config c, ok;
    pl_config(&ok, &d);
#define CASE(field, ...)                                                                           \
    do {                                                                                           \
        c = ok;                                                                                    \
        __VA_ARGS__;                                                                               \
        expect_einval(&c, field);                                                                  \
    } while (0)
    CASE("batch", c.batch = 0);
    CASE("height", c.height = 0);
    CASE("width", c.width = -3);
    CASE("scale_min", c.scale_min = 0);
    CASE("scale_max", c.scale_max = 1.5f);
    CASE("ratio_min", c.ratio_min = 2, c.ratio_max = 1);
    CASE("crop_fraction", c.transform = SL_TRANSFORM_EVAL, c.crop_fraction = 0);
    CASE("prefetch", c.prefetch = 1);
    CASE("shuffle_buffer", c.shuffle_buffer = 0);
    CASE("shuffle", c.shuffle = (sl_shuffle_mode)9);
    CASE("layout", c.layout = (sl_layout)7);
    CASE("std", c.std[1] = 0);
    CASE("world", c.rank = 2, c.world = 2);
    CASE("rank", c.rank = 1, c.world = 2); /* one shard: rank 1 gets none */
    CASE("data", c.data = NULL);
    CASE("label_offset", c.label_offset = -5);
#undef CASE
    sl_pipeline *p;
    c = ok;
    char *missing = tu_join(d.dir, "nope");
    c.data = missing;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_ENOENT);
    free(missing);
    c = ok;
    c.device = 0;
    int rc = sl_pipeline_create(&c, &p);
    if (rc == SL_OK) /* a CUDA build on a GPU host */
        sl_pipeline_destroy(p);
    else
        cr_assert(rc == SL_ENOTSUP || rc == SL_ECUDA, "%s", sl_errmsg());
    pl_dataset_free(&d);
}

/* -------------------------------------------------------------- stats */

Test(pipeline_errors, stats_count_every_stage)
{
    pl_dataset d;
    pl_make_dataset(&d, 100, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.epochs = 2;
    c.readers = 2;
    c.workers = 3;
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    pl_run r = {0};
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_EOF);
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.batches, r.nb);
    cr_assert_eq(st.samples, 200);
    cr_assert_eq(st.nstages, 4);
    const char *names[] = {"read", "shuffle", "map", "load"};
    const unsigned threads[] = {2, 1, 3, 1};
    for (int i = 0; i < 4; i++) {
        cr_assert_str_eq(st.stages[i].name, names[i]);
        cr_assert_eq(st.stages[i].threads, threads[i]);
        cr_assert_gt(st.stages[i].busy_s, 0, "stage %s", names[i]);
        cr_assert(st.stages[i].queue_fill >= 0 && st.stages[i].queue_fill <= 1, "stage %s",
                  names[i]);
    }
    cr_assert_eq(st.stages[0].items, 200, "records read");
    cr_assert_eq(st.stages[0].bytes, 2 * d.total_bytes);
    cr_assert_eq(st.stages[1].items, 200);
    cr_assert_eq(st.stages[2].items, 200);
    cr_assert_eq(st.stages[2].bytes, (uint64_t)200 * 20 * 24 * 3 * 4, "NCHW f32 samples");
    cr_assert_eq(st.stages[3].items, r.nb);
    cr_assert_gt(st.stages[1].queue_fill, 0.5, "a full buffer most of the time");
    cr_assert_gt(st.elapsed_s, 0);
    cr_assert_eq(st.records_per_epoch, 100);
    cr_assert_eq(st.shuffle_buffer, 100, "an epoch of 100 fits the buffer of 100: holds it");
    cr_assert_eq(st.bad_records, 0);
    sl_pipeline_destroy(p);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

Test(pipeline_errors, empty_dataset_ends_at_once)
{
    pl_dataset d;
    pl_make_dataset(&d, 0, 2, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_BUFFER, SL_SHUFFLE_GLOBAL, SL_SHUFFLE_NONE};
    for (int m = 0; m < 3; m++) {
        c.shuffle = modes[m];
        c.epochs = m == 0 ? 0 : 2; /* forever, too */
        sl_pipeline *p;
        sl_batch *b;
        cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_pipeline_next(p, &b), SL_EOF);
        cr_assert_null(b);
        sl_pipeline_destroy(p);
    }
    pl_dataset_free(&d);
}

/* ---------------------------------------------------------- config size */

/* A config whose size is not this library's (a caller built against other
 * headers, or one not started from SL_PIPELINE_CONFIG_INIT) is refused by
 * each create function before anything is read. */
Test(pipeline_errors, config_of_another_size_is_refused)
{
    sl_pipeline_config c = SL_PIPELINE_CONFIG_INIT;
    cr_assert_eq(c.size, sizeof c);
    c.data = "/nonexistent/sluice-config-size";
    char want[256];
    for (int k = 0; k < 2; k++) {
        c.size = k == 0 ? sizeof c - 8 : 0;
        snprintf(want, sizeof want, "config of %zu bytes, this library's is %zu: rebuild against "
                 "this sluice's headers", c.size, sizeof c);
        sl_pipeline *p = (sl_pipeline *)&c;
        cr_assert_eq(sl_pipeline_create(&c, &p), SL_EINVAL);
        cr_assert_null(p);
        cr_assert(strstr(sl_errmsg(), "sl_pipeline_create: ") == sl_errmsg(), "%s", sl_errmsg());
        cr_assert(strstr(sl_errmsg(), want), "%s", sl_errmsg());
        cr_assert_eq(sl_pipeline_create_at(&c, 1, 0, &p), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "sl_pipeline_create_at: ") == sl_errmsg(), "%s",
                  sl_errmsg());
        cr_assert(strstr(sl_errmsg(), want), "%s", sl_errmsg());
        cr_assert_eq(sl_pipeline_create_from_state(&c, "{}", 2, &p), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "sl_pipeline_create_from_state: ") == sl_errmsg(), "%s",
                  sl_errmsg());
        cr_assert(strstr(sl_errmsg(), want), "%s", sl_errmsg());
    }
}

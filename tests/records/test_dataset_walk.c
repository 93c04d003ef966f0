/*
 * tests/records/test_dataset_walk.c - records.h's walker as a library call
 * (sl_dataset_walk, sl_verify_path, sl_dataset_inspect): the order and
 * positions it reports, the problem callback's fields, and a progress
 * callback that stops a long walk (what Python's Ctrl-C goes through).
 * tests/tools/test_inspect_verify.c checks the commands built on them.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_tmpdir(); }
static void teardown(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
}

/* A shard of n records "rec-<i>" (not Examples: the walker does not care). */
static char *write_shard(const char *name, int n)
{
    char *path = tu_join(g_dir, name);
    sl_tfrecord_writer *w;
    cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = 0; i < n; i++) {
        char buf[32];
        int len = snprintf(buf, sizeof buf, "rec-%d", i);
        cr_assert_eq(sl_tfrecord_writer_write(w, buf, (size_t)len), SL_OK);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    return path;
}

typedef struct seen {
    int records, files, errors;
    uint64_t last_recno, next_offset;
    int bad_order;
    int sleep_us;     /* per record: makes the walk long enough for progress */
    int progress_calls;
    int stop_after;   /* progress returns SL_ECANCELED at this call (0: never) */
} seen;

static int on_record(void *arg, const sl_walk_record *r)
{
    seen *s = arg;
    char want[32];
    int len = snprintf(want, sizeof want, "rec-%d", (int)r->recno);
    /* in order, at the offsets the framing puts them, the bytes written */
    if (r->offset != s->next_offset || r->len != (size_t)len || memcmp(r->data, want, r->len))
        s->bad_order = 1;
    s->next_offset = r->offset + SL_TFRECORD_OVERHEAD + r->len;
    s->last_recno = r->recno;
    s->records++;
    if (s->sleep_us)
        usleep((useconds_t)s->sleep_us);
    return 0;
}

static int on_file_end(void *arg, const sl_dataset_split *sp, const char *file, uint64_t n,
                       int clean)
{
    seen *s = arg;
    (void)sp;
    (void)file;
    (void)n;
    s->files += clean;
    s->next_offset = 0;
    return 0;
}

static int on_progress(void *arg, const sl_walk_progress *p)
{
    seen *s = arg;
    cr_assert_leq(p->files_done, p->files_total);
    /* polled between records: the one being visited is counted already */
    cr_assert(p->records == (uint64_t)s->records || p->records == (uint64_t)s->records + 1,
              "%llu records, %d seen", (unsigned long long)p->records, s->records);
    cr_assert_geq(p->elapsed_s, 0.5, "not before half a second");
    return ++s->progress_calls == s->stop_after ? SL_ECANCELED : 0;
}

TestSuite(dataset_walk, .init = setup, .fini = teardown);

Test(dataset_walk, every_record_in_order)
{
    free(write_shard("d-00000-of-00002", 30));
    free(write_shard("d-00001-of-00002", 12));
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    seen s = {0};
    sl_walk_visitor v = {.record = on_record, .file_end = on_file_end, .arg = &s};
    cr_assert_eq(sl_dataset_walk(&ds, &v), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(s.records, 42);
    cr_assert_eq(s.files, 2);
    cr_assert_not(s.bad_order);
    cr_assert_eq(s.last_recno, 11);
    sl_dataset_fini(&ds);
}

Test(dataset_walk, progress_stops_a_long_walk, .timeout = 60)
{
    free(write_shard("long-00000-of-00001", 3000));
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    /* 1 ms a record: progress is due from record 512 or so (0.5 s), polled
     * every 256 records; the second call cancels */
    seen s = {.sleep_us = 1000, .stop_after = 2};
    sl_walk_visitor v = {.record = on_record, .file_end = on_file_end,
                         .progress = on_progress, .arg = &s};
    cr_assert_eq(sl_dataset_walk(&ds, &v), SL_ECANCELED);
    cr_assert_eq(s.progress_calls, 2);
    cr_assert_lt(s.records, 3000, "stopped early (%d records)", s.records);
    cr_assert_eq(s.files, 0, "the file was not finished");
    sl_dataset_fini(&ds);
}

typedef struct problems {
    int n;
    char first_msg[1200];
    uint64_t recno, offset;
    int status;
    char split[64];
} problems;

static void on_problem(void *arg, const sl_verify_problem *p)
{
    problems *ps = arg;
    if (ps->n++ == 0) {
        snprintf(ps->first_msg, sizeof ps->first_msg, "%s", p->message);
        ps->recno = p->recno;
        ps->offset = p->offset;
        ps->status = p->status;
        snprintf(ps->split, sizeof ps->split, "%s", p->split ? p->split : "(null)");
    }
}

Test(dataset_walk, verify_reports_what_and_where)
{
    /* records that are not Examples: each one is a problem, the first named */
    char *path = write_shard("v-00000-of-00001", 5);
    problems ps = {0};
    sl_verify_options o = {.problem = on_problem, .arg = &ps};
    sl_verify_result res;
    memset(&res, 0, sizeof res);
    cr_assert_eq(sl_verify_path(g_dir, &o, &res), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(res.problems, 1, "stops at the first");
    cr_assert_eq(ps.n, 1);
    cr_assert_eq(ps.recno, 0);
    cr_assert_eq(ps.offset, 0);
    cr_assert_eq(ps.status, SL_ECORRUPT);
    cr_assert_str_eq(ps.split, "v");
    char want[1200];
    snprintf(want, sizeof want, "%s: record 0 @ 0: bad Example", path);
    cr_assert(!strncmp(ps.first_msg, want, strlen(want)), "%s", ps.first_msg);
    cr_assert_str_eq(res.first, ps.first_msg);
    cr_assert_eq(res.first_status, SL_ECORRUPT);
    cr_assert_eq(res.unindexed, 1);

    /* all: every record, counts added to the same result */
    memset(&ps, 0, sizeof ps);
    o.all = 1;
    cr_assert_eq(sl_verify_path(path, &o, &res), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ps.n, 5);
    cr_assert_eq(res.problems, 6);
    cr_assert_eq(res.records, 1 + 5);

    /* a PATH that is not there is the call's error, not a problem */
    memset(&res, 0, sizeof res);
    cr_assert_eq(sl_verify_path("/nonexistent/sluice-walk", &o, &res), SL_ENOENT);
    cr_assert_eq(res.problems, 0);
    free(path);
}

Test(dataset_walk, inspect_stops_at_a_bad_record)
{
    char *path = write_shard("i-00000-of-00001", 3);
    sl_dataset ds;
    sl_inspect_result res;
    cr_assert_eq(sl_dataset_resolve(path, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_dataset_inspect(&ds, NULL, NULL, &res), SL_ECORRUPT);
    char want[1200];
    snprintf(want, sizeof want, "sl_dataset_inspect: %s: record 0 @ 0: bad Example", path);
    cr_assert(!strncmp(sl_errmsg(), want, strlen(want)), "%s", sl_errmsg());
    sl_inspect_result_fini(&res);
    sl_inspect_result_fini(&res); /* twice is fine */
    sl_dataset_fini(&ds);
    free(path);
}

/* Three image Examples (labels 0, 1, 1; 8x6, 8x6 and 10x4 JPEGs, the last
 * without image/width and image/height) and the summary inspect makes. */
Test(dataset_walk, inspect_counts_labels_and_sizes)
{
    sl_transcoder *t;
    sl_example_builder b;
    sl_tfrecord_writer *w;
    char *path = tu_join(g_dir, "s-00000-of-00001");
    const int ws[] = {8, 8, 10}, hs[] = {6, 6, 4}, labels[] = {0, 1, 1};
    uint8_t px[10 * 6 * 3];
    memset(px, 90, sizeof px);
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    sl_example_builder_init(&b);
    cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = 0; i < 3; i++) {
        const uint8_t *jpeg, *rec;
        size_t jl, rl;
        cr_assert_eq(sl_encode_jpeg_rgb(t, px, ws[i], hs[i], ws[i] * 3, 3, 90, &jpeg, &jl),
                     SL_OK, "%s", sl_errmsg());
        sl_image_example ex = {.image = jpeg, .image_len = jl, .label = labels[i],
                               .height = i < 2 ? hs[i] : 0, .width = i < 2 ? ws[i] : 0,
                               .format = "JPEG", .format_len = 4};
        cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
        cr_assert_eq(sl_example_finish(&b, &rec, &rl), SL_OK);
        cr_assert_eq(sl_tfrecord_writer_write(w, rec, rl), SL_OK);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);
    sl_transcoder_destroy(t);

    sl_dataset ds;
    sl_inspect_result res;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_dataset_inspect(&ds, NULL, NULL, &res), SL_OK, "%s", sl_errmsg());
    const sl_inspect_stats *s = &res.total;
    cr_assert_eq(res.nsplits, 1);
    cr_assert_eq(s->records, 3);
    cr_assert_eq(s->files, 1);
    cr_assert_eq(s->nlabels, 2);
    cr_assert_eq(s->labels[0], 0);
    cr_assert_eq(s->label_counts[0], 1);
    cr_assert_eq(s->labels[1], 1);
    cr_assert_eq(s->label_counts[1], 2);
    cr_assert_eq(s->width.min, 8);
    cr_assert_eq(s->width.max, 10, "the JPEG header's width where image/width is absent");
    cr_assert_eq(s->height.min, 4);
    cr_assert_eq(s->unknown_size, 0);
    cr_assert_eq(s->nformats, 1);
    cr_assert_str_eq(s->formats[0].name, "JPEG");
    cr_assert_eq(s->formats[0].n, 3);
    char *json = sl_inspect_json(&ds, &res);
    cr_assert_not_null(json);
    cr_assert_not_null(strstr(json, "\"labels\":"), "%s", json);
    cr_assert_not_null(strstr(json, "\"shards_without_index\":\t1"), "%s", json);
    free(json);
    sl_inspect_result_fini(&res);
    sl_dataset_fini(&ds);
    free(path);
}

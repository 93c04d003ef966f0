/*
 * tests/train/io/test_summary.c - train/io/summary.c: scalars written and read
 * back (tags, steps, values, wall times), the file_version record and the
 * exact bytes of a scalar Event, unknown proto fields skipped, the file
 * name, metrics.jsonl lines, a partial last record read as not yet written
 * and a damaged one as SL_ECORRUPT.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"
#include "train/train.h"

#define MAXV 64

typedef struct seen {
    int n;
    int64_t step[MAXV];
    double wall[MAXV];
    char tag[MAXV][64];
    float value[MAXV];
    int stop_after; /* return 1234 from the callback after this many (0: never) */
} seen;

static int collect(void *ctx, int64_t step, double wall_time, const char *tag, float value)
{
    seen *s = ctx;
    cr_assert_lt(s->n, MAXV);
    s->step[s->n] = step;
    s->wall[s->n] = wall_time;
    snprintf(s->tag[s->n], sizeof s->tag[0], "%s", tag);
    s->value[s->n] = value;
    s->n++;
    return s->stop_after && s->n == s->stop_after ? 1234 : 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Write 3 steps of 2 tags (plus one with a negative and one with a huge
 * step) to a fresh logdir; returns the summary's event file path. */
static char *write_sample(const char *dir)
{
    sl_summary *s = NULL;
    char *logdir = tu_join(dir, "logs/run1");
    cr_assert_eq(sl_summary_open(logdir, &s), SL_OK, "%s", sl_errmsg());
    const char *tags[] = {"train/loss", "train/lr"};
    for (int i = 0; i < 3; i++) {
        double v[2] = {2.5 - 0.25 * i, 0.1 / (i + 1)};
        char extra[64];
        snprintf(extra, sizeof extra, "{\"epoch\": %d, \"phase\": \"train\"}", i);
        cr_assert_eq(sl_summary_scalars(s, 10 * (i + 1), tags, v, 2, extra), SL_OK, "%s",
                     sl_errmsg());
    }
    const char *one[] = {"eval/top1"};
    double big = 0.765432109876;
    cr_assert_eq(sl_summary_scalars(s, (int64_t)1 << 40, one, &big, 1, NULL), SL_OK);
    double neg = -3;
    cr_assert_eq(sl_summary_scalars(s, -5, one, &neg, 1, NULL), SL_OK);
    char *path = strdup(sl_summary_path(s));
    cr_assert_eq(sl_summary_close(s), SL_OK, "%s", sl_errmsg());
    free(logdir);
    return path;
}

Test(train_summary, scalars_read_back)
{
    char *dir = tu_tmpdir();
    double t0 = now();
    char *path = write_sample(dir);
    seen s = {0};
    cr_assert_eq(sl_events_read(path, collect, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(s.n, 8);
    static const char *want_tag[] = {"train/loss", "train/lr", "train/loss", "train/lr",
                                     "train/loss", "train/lr", "eval/top1", "eval/top1"};
    static const int64_t want_step[] = {10, 10, 20, 20, 30, 30, (int64_t)1 << 40, -5};
    for (int i = 0; i < 8; i++) {
        cr_assert_str_eq(s.tag[i], want_tag[i]);
        cr_assert_eq(s.step[i], want_step[i], "value %d: step %lld", i, (long long)s.step[i]);
        cr_assert(s.wall[i] >= t0 - 1 && s.wall[i] <= now() + 1, "wall_time %f", s.wall[i]);
    }
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(s.value[2 * i], (float)(2.5 - 0.25 * i));
        cr_assert_eq(s.value[2 * i + 1], (float)(0.1 / (i + 1)));
    }
    cr_assert_eq(s.value[6], (float)0.765432109876);
    cr_assert_eq(s.value[7], -3.0f);

    /* The callback's non-zero value stops the walk and comes back. */
    seen stop = {.stop_after = 3};
    cr_assert_eq(sl_events_read(path, collect, &stop), 1234);
    cr_assert_eq(stop.n, 3);

    /* Name: events.out.tfevents.<secs>.<host>.<pid>.sluice */
    const char *base = strrchr(path, '/') + 1;
    char host[256] = "";
    gethostname(host, sizeof host);
    char want[512];
    long long secs = 0;
    cr_assert_eq(sscanf(base, "events.out.tfevents.%lld.", &secs), 1, "%s", base);
    snprintf(want, sizeof want, "events.out.tfevents.%lld.%s.%d.sluice", secs, host, (int)getpid());
    cr_assert_str_eq(base, want);
    cr_assert(fabs((double)secs - t0) < 5);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

/* The records themselves: the file_version event first, then a scalar
 * event whose bytes after wall_time are spelled out here. */
Test(train_summary, golden_event_bytes)
{
    char *dir = tu_tmpdir();
    sl_summary *s = NULL;
    cr_assert_eq(sl_summary_open(dir, &s), SL_OK, "%s", sl_errmsg());
    const char *tag[] = {"a"};
    double v = 1.5;
    cr_assert_eq(sl_summary_scalars(s, 5, tag, &v, 1, NULL), SL_OK);
    char *path = strdup(sl_summary_path(s));
    /* Flushed per call: readable before close. */
    seen early = {0};
    cr_assert_eq(sl_events_read(path, collect, &early), SL_OK);
    cr_assert_eq(early.n, 1);
    cr_assert_eq(sl_summary_close(s), SL_OK);

    sl_tfrecord_reader *r = NULL;
    const uint8_t *d;
    size_t len;
    cr_assert_eq(sl_tfrecord_reader_open(path, &r), SL_OK);
    cr_assert_eq(sl_tfrecord_reader_next(r, &d, &len), SL_OK);
    /* Event {wall_time (1, fixed64), file_version (3) = "brain.Event:2"} */
    static const uint8_t version[] = {0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.', 'E',
                                      'v',  'e', 'n', 't', ':', '2'};
    cr_assert_eq(len, 9 + sizeof version);
    cr_assert_eq(d[0], 0x09);
    cr_assert_eq(memcmp(d + 9, version, sizeof version), 0);
    double wt;
    memcpy(&wt, d + 1, 8);
    cr_assert(fabs(wt - now()) < 60);
    cr_assert_eq(sl_tfrecord_reader_next(r, &d, &len), SL_OK);
    /* step (2, varint) 5; summary (5) { value (1) { tag (1) "a",
     * simple_value (2, fixed32) 1.5f = 0x3fc00000 } } */
    static const uint8_t scalar[] = {0x10, 0x05, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01,
                                     'a',  0x15, 0x00, 0x00, 0xc0, 0x3f};
    cr_assert_eq(len, 9 + sizeof scalar);
    cr_assert_eq(d[0], 0x09);
    cr_assert_eq(memcmp(d + 9, scalar, sizeof scalar), 0);
    cr_assert_eq(sl_tfrecord_reader_next(r, &d, &len), SL_EOF);
    sl_tfrecord_reader_close(r);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

static int collect_text(void *ctx, int64_t step, double wall_time, const char *tag,
                        const char *text)
{
    seen *s = ctx;
    (void)wall_time;
    cr_assert_lt(s->n, MAXV);
    s->step[s->n] = step;
    snprintf(s->tag[s->n], sizeof s->tag[0], "%s=%s", tag, text);
    s->value[s->n] = NAN;
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? 1234 : 0;
}

/* The text plugin's form, byte for byte (tensorboard/plugins/text's
 * summary: a DT_STRING scalar tensor, plugin_name "text"; interop's
 * tensorboard_reads_our_text has TensorBoard read it), read back in order
 * among the scalars by sl_events_read_all and passed over by
 * sl_events_read. */
Test(train_summary, text_golden_and_read_back)
{
    char *dir = tu_tmpdir();
    sl_summary *s = NULL;
    cr_assert_eq(sl_summary_open(dir, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_summary_text(s, 3, "t", "hi"), SL_OK, "%s", sl_errmsg());
    const char *tag[] = {"a"};
    double v = 1.5;
    cr_assert_eq(sl_summary_scalars(s, 4, tag, &v, 1, NULL), SL_OK);
    cr_assert_eq(sl_summary_text(s, 5, "why", ""), SL_OK, "empty text is text");
    cr_assert_eq(sl_summary_text(s, 5, "", "x"), SL_EINVAL);
    cr_assert_eq(sl_summary_text(s, 5, "t", NULL), SL_EINVAL);
    char *path = strdup(sl_summary_path(s));
    cr_assert_eq(sl_summary_close(s), SL_OK);

    sl_tfrecord_reader *r = NULL;
    const uint8_t *d;
    size_t len;
    cr_assert_eq(sl_tfrecord_reader_open(path, &r), SL_OK);
    cr_assert_eq(sl_tfrecord_reader_next(r, &d, &len), SL_OK); /* file_version */
    cr_assert_eq(sl_tfrecord_reader_next(r, &d, &len), SL_OK);
    /* step 3; summary { value { tag "t", metadata (9) { plugin_data (1) {
     * plugin_name (1) "text" } }, tensor (8) { dtype (1) 7, tensor_shape
     * (2) {}, string_val (8) "hi" } } } */
    static const uint8_t text[] = {0x10, 0x03, 0x2a, 25,   0x0a, 23,   0x0a, 0x01, 't',
                                   0x4a, 0x08, 0x0a, 0x06, 0x0a, 0x04, 't',  'e',  'x',
                                   't',  0x42, 0x08, 0x08, 0x07, 0x12, 0x00, 0x42, 0x02,
                                   'h',  'i'};
    cr_assert_eq(len, 9 + sizeof text);
    cr_assert_eq(memcmp(d + 9, text, sizeof text), 0);
    sl_tfrecord_reader_close(r);

    seen all = {0};
    cr_assert_eq(sl_events_read_all(path, collect, collect_text, &all), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(all.n, 3);
    cr_assert_str_eq(all.tag[0], "t=hi");
    cr_assert_eq(all.step[0], 3);
    cr_assert_str_eq(all.tag[1], "a");
    cr_assert_eq(all.value[1], 1.5f);
    cr_assert_str_eq(all.tag[2], "why=");
    seen scalars = {0};
    cr_assert_eq(sl_events_read(path, collect, &scalars), SL_OK);
    cr_assert_eq(scalars.n, 1, "text is no scalar");
    seen texts = {0};
    cr_assert_eq(sl_events_read_all(path, NULL, collect_text, &texts), SL_OK);
    cr_assert_eq(texts.n, 2);
    seen stop = {.stop_after = 1};
    cr_assert_eq(sl_events_read_all(path, NULL, collect_text, &stop), 1234);
    cr_assert_eq(sl_events_read_all(path, NULL, NULL, NULL), SL_EINVAL);
    /* metrics.jsonl has the text under its tag */
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "grep -c '\"t\":\"hi\"' %s/metrics.jsonl", dir), 0, "%s", out);
    free(out);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

/* Append one framed record to f. */
static void put_record(FILE *f, const uint8_t *data, size_t len)
{
    uint8_t hdr[12], ftr[4];
    sl_tfrecord_frame_header(hdr, len);
    sl_tfrecord_frame_footer(ftr, data, len);
    cr_assert_eq(fwrite(hdr, 1, 12, f), 12);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fwrite(ftr, 1, 4, f), 4);
}

/* Events as other writers make them: fields in another order, fields this
 * reader does not know (graph_def, log_message, a value's metadata and
 * node_name, a histogram value), a 10-byte varint for step 1. */
Test(train_summary, unknown_fields_skipped)
{
    char *dir = tu_tmpdir();
    char *path = tu_join(dir, "events.out.tfevents.1.other");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    /* step 7, graph_def (4) bytes, summary { value { metadata (9) {..},
     * tag "x", node_name (7) "n", simple_value 2.0 }, value { tag "h",
     * histo (5) {min (1, double) 0} } }, wall_time 3.0 last. */
    static const uint8_t ev1[] = {
        0x10, 0x07, 0x22, 0x03, 1, 2, 3, 0x2a, 33,
        0x0a, 15, 0x4a, 0x02, 0x08, 0x01, 0x0a, 0x01, 'x', 0x3a, 0x01, 'n', 0x15, 0, 0, 0, 0x40,
        0x0a, 14, 0x0a, 0x01, 'h', 0x2a, 0x09, 0x09, 0, 0, 0, 0, 0, 0, 0, 0,
        0x09, 0, 0, 0, 0, 0, 0, 0x08, 0x40,
    };
    put_record(f, ev1, sizeof ev1);
    /* log_message (6) {level (1) 1} and a fixed32 unknown field (15). */
    static const uint8_t ev2[] = {0x32, 0x02, 0x08, 0x01, 0x7d, 1, 2, 3, 4};
    put_record(f, ev2, sizeof ev2);
    /* step 1 as a non-minimal 10-byte varint. */
    static const uint8_t ev3[] = {0x10, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
                                  0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'y', 0x15, 0, 0, 0x80, 0xbf};
    put_record(f, ev3, sizeof ev3);
    fclose(f);
    seen s = {0};
    cr_assert_eq(sl_events_read(path, collect, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.tag[0], "x");
    cr_assert_eq(s.step[0], 7);
    cr_assert_eq(s.value[0], 2.0f);
    cr_assert_eq(s.wall[0], 3.0);
    cr_assert_str_eq(s.tag[1], "y");
    cr_assert_eq(s.step[1], 1);
    cr_assert_eq(s.value[1], -1.0f);

    /* Bad protos in well-framed records: SL_ECORRUPT naming the record. */
    static const struct {
        const char *what;
        uint8_t b[8];
        size_t n;
    } bad[] = {
        {"length past the end", {0x2a, 0x09, 0x0a}, 3},
        {"truncated varint", {0x10, 0x80}, 2},
        {"group wire type", {0x13, 0x00}, 2},
        {"field number 0", {0x00, 0x01}, 2},
        {"truncated fixed64", {0x09, 0x00, 0x00}, 3},
        {"bad value inside summary", {0x2a, 0x03, 0x0a, 0x05, 0x0a}, 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(path, "wb");
        cr_assert_not_null(f);
        put_record(f, ev3, sizeof ev3);
        put_record(f, bad[i].b, bad[i].n);
        fclose(f);
        seen t = {0};
        int rc = sl_events_read(path, collect, &t);
        cr_assert_eq(rc, SL_ECORRUPT, "%s: rc %d", bad[i].what, rc);
        cr_assert(strstr(sl_errmsg(), "record 1 @ 39"), "%s: %s", bad[i].what, sl_errmsg());
        cr_assert_eq(t.n, 1, "%s", bad[i].what);
    }
    free(path);
    tu_rmrf(dir);
    free(dir);
}

Test(train_summary, truncation_and_crc)
{
    char *dir = tu_tmpdir();
    char *path = write_sample(dir);
    char *cut = tu_join(dir, "events.out.tfevents.cut");
    size_t len;
    uint8_t *orig = tu_read_file(path, &len);
    cr_assert_not_null(orig);
    /* Record sizes from the index: find where the last record starts. */
    sl_index_entry *idx = NULL;
    size_t nrec = 0;
    cr_assert_eq(sl_index_build(path, &idx, &nrec), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(nrec, 6); /* file_version + 5 scalar events */
    uint64_t last = idx[nrec - 1].offset;

    /* Every cut inside the last record: the 7 complete values, SL_OK. */
    for (uint64_t n = last + 1; n < len; n++) {
        cr_assert_eq(tu_write_file(cut, orig, n), 0);
        seen s = {0};
        int rc = sl_events_read(cut, collect, &s);
        cr_assert_eq(rc, SL_OK, "cut at %llu of %zu: %s", (unsigned long long)n, len,
                     sl_errmsg());
        cr_assert_eq(s.n, 7, "cut at %llu", (unsigned long long)n);
    }
    /* A flipped payload byte (CRC mismatch) in a middle record. */
    uint64_t mid = idx[2].offset + 12 + 3;
    orig[mid] ^= 0x40;
    cr_assert_eq(tu_write_file(cut, orig, len), 0);
    seen s = {0};
    cr_assert_eq(sl_events_read(cut, collect, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "data CRC mismatch"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "sl_events_read"), "%s", sl_errmsg());
    cr_assert_eq(s.n, 2, "the values before the damage were delivered");
    orig[mid] ^= 0x40;
    /* A damaged LAST record that is complete is damage, not truncation. */
    orig[len - 1] ^= 0x01;
    cr_assert_eq(tu_write_file(cut, orig, len), 0);
    cr_assert_eq(sl_events_read(cut, collect, &(seen){0}), SL_ECORRUPT);
    orig[len - 1] ^= 0x01;
    /* A damaged length in the last header: its CRC says so. */
    orig[last + 2] ^= 0x01;
    cr_assert_eq(tu_write_file(cut, orig, len - 3), 0);
    cr_assert_eq(sl_events_read(cut, collect, &(seen){0}), SL_ECORRUPT);
    orig[last + 2] ^= 0x01;
    /* Empty file: no records, no error. */
    cr_assert_eq(tu_write_file(cut, orig, 0), 0);
    cr_assert_eq(sl_events_read(cut, collect, &(seen){0}), SL_OK);
    char *none = tu_join(dir, "absent");
    cr_assert_eq(sl_events_read(none, collect, &(seen){0}), SL_ENOENT);
    free(none);
    free(idx);
    free(orig);
    free(cut);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

Test(train_summary, metrics_jsonl)
{
    char *dir = tu_tmpdir();
    char *path = write_sample(dir);
    char *jpath = tu_join(dir, "logs/run1/metrics.jsonl");
    size_t len;
    char *text = (char *)tu_read_file(jpath, &len);
    cr_assert_not_null(text);
    cr_assert(len > 0 && text[len - 1] == '\n');
    int lines = 0;
    for (char *p = text, *nl; p < text + len; p = nl + 1, lines++) {
        nl = memchr(p, '\n', (size_t)(text + len - p));
        cr_assert_not_null(nl);
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(nl - p));
        cr_assert(cJSON_IsObject(j), "line %d: %.*s", lines, (int)(nl - p), p);
        const cJSON *step = cJSON_GetObjectItem(j, "step");
        const cJSON *wall = cJSON_GetObjectItem(j, "wall_time");
        cr_assert(cJSON_IsNumber(step) && cJSON_IsNumber(wall));
        cr_assert(wall->valuedouble > 1.5e9);
        if (lines < 3) {
            cr_assert_eq(step->valuedouble, 10 * (lines + 1));
            cr_assert_eq(cJSON_GetObjectItem(j, "train/loss")->valuedouble, 2.5 - 0.25 * lines);
            cr_assert_eq(cJSON_GetObjectItem(j, "train/lr")->valuedouble, 0.1 / (lines + 1));
            cr_assert_eq(cJSON_GetObjectItem(j, "epoch")->valuedouble, lines);
            cr_assert_str_eq(cJSON_GetObjectItem(j, "phase")->valuestring, "train");
            cr_assert_eq(cJSON_GetArraySize(j), 6);
        } else {
            cr_assert_eq(step->valuedouble, lines == 3 ? (double)((int64_t)1 << 40) : -5.0);
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "eval/top1")));
            cr_assert_eq(cJSON_GetArraySize(j), 3);
        }
        cJSON_Delete(j);
    }
    cr_assert_eq(lines, 5);
    free(text);

    /* A second writer in the same logdir: its own event file, the same
     * metrics.jsonl (appended); a bad extra_json writes nothing. */
    char *logdir = tu_join(dir, "logs/run1");
    sl_summary *s = NULL;
    cr_assert_eq(sl_summary_open(logdir, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_str_neq(sl_summary_path(s), path);
    const char *tag[] = {"t"};
    double v = 1;
    cr_assert_eq(sl_summary_scalars(s, 1, tag, &v, 1, "[1]"), SL_EINVAL);
    cr_assert_eq(sl_summary_scalars(s, 1, tag, &v, 1, "{bad"), SL_EINVAL);
    const char *empty[] = {""};
    cr_assert_eq(sl_summary_scalars(s, 1, empty, &v, 1, NULL), SL_EINVAL);
    cr_assert_eq(sl_summary_scalars(s, 2, tag, &v, 1, "{}"), SL_OK);
    char *path2 = strdup(sl_summary_path(s));
    cr_assert_eq(sl_summary_close(s), SL_OK);
    seen seen2 = {0};
    cr_assert_eq(sl_events_read(path2, collect, &seen2), SL_OK);
    cr_assert_eq(seen2.n, 1);
    cr_assert_eq(seen2.step[0], 2);
    text = (char *)tu_read_file(jpath, &len);
    cr_assert_not_null(text);
    int n = 0;
    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n';
    cr_assert_eq(n, 6);
    cr_assert(strstr(text, "{\"step\":2,"), "%s", text);
    free(text);
    cr_assert_eq(sl_summary_close(NULL), SL_OK);

    free(path2);
    free(logdir);
    free(jpath);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

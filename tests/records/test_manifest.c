/* tests/records/test_manifest.c - DIR/dataset.json (manifest.c): save/load
 * round trip, atomic save, and malformed or mistyped files rejected with the
 * file and field named. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

static const char *const fmnist[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                     "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

static void make_manifest(sl_manifest *m)
{
    sl_manifest_split train = {.name = "train", .format = SL_FORMAT_TFRECORD, .records = 60000,
                               .shards = 4, .bytes = 5000000000000ull, .skipped = 3,
                               .source = "idx /usr/share/datasets/fashion-mnist \"q\"\n"};
    sl_manifest_split test = {.name = "test", .format = SL_FORMAT_LMDB, .records = 10000,
                              .shards = 1, .bytes = 12345, .source = "folder /data/test"};
    sl_manifest_init(m);
    m->label_offset = 1;
    snprintf(m->created_by, sizeof m->created_by, "sluice 0.1.0");
    cr_assert_eq(sl_manifest_set_classes(m, fmnist, 10), SL_OK);
    cr_assert_eq(sl_manifest_split_put(m, &train), SL_OK);
    cr_assert_eq(sl_manifest_split_put(m, &test), SL_OK);
}

Test(manifest, save_load_roundtrip)
{
    char *dir = tu_tmpdir();
    char *tmp = tu_join(dir, "dataset.json.tmp");
    sl_manifest m, got;

    make_manifest(&m);
    cr_assert_eq(sl_manifest_save(dir, &m), SL_OK, "%s", sl_errmsg());
    cr_assert(access(tmp, F_OK) != 0, "no temp file left behind");
    cr_assert_eq(sl_manifest_load(dir, &got), SL_OK, "%s", sl_errmsg());

    cr_assert_eq(got.version, 1);
    cr_assert_eq(got.label_offset, 1);
    cr_assert_str_eq(got.created_by, "sluice 0.1.0");
    cr_assert_eq(got.num_classes, 10);
    cr_assert_not_null(got.class_names);
    for (int i = 0; i < 10; i++)
        cr_assert_str_eq(got.class_names[i], fmnist[i]);
    cr_assert_eq(got.nsplits, 2);
    sl_manifest_split *tr = sl_manifest_split_find(&got, "train");
    sl_manifest_split *te = sl_manifest_split_find(&got, "test");
    cr_assert_not_null(tr);
    cr_assert_not_null(te);
    cr_assert_null(sl_manifest_split_find(&got, "val"));
    cr_assert_eq(tr->format, SL_FORMAT_TFRECORD);
    cr_assert_eq(tr->records, 60000);
    cr_assert_eq(tr->shards, 4);
    cr_assert_eq(tr->bytes, 5000000000000ull);
    cr_assert_eq(tr->skipped, 3);
    cr_assert_str_eq(tr->source, "idx /usr/share/datasets/fashion-mnist \"q\"\n");
    cr_assert_eq(te->format, SL_FORMAT_LMDB);
    cr_assert_eq(te->records, 10000);
    cr_assert_eq(te->shards, 1);
    cr_assert_eq(te->bytes, 12345);
    cr_assert_str_eq(te->source, "folder /data/test");

    /* the file is the documented JSON */
    size_t len;
    char *path = tu_join(dir, "dataset.json");
    char *text = (char *)tu_read_file(path, &len);
    cr_assert_not_null(text);
    text = realloc(text, len + 1);
    text[len] = '\0';
    cr_assert(strstr(text, "\"format\":\t\"tfrecord\""), "%s", text);
    cr_assert(strstr(text, "\"T-shirt/top\""), "%s", text);

    /* save again over it (an update), with no classes: they are dropped */
    cr_assert_eq(sl_manifest_set_classes(&got, NULL, 10), SL_OK);
    got.splits[0].records = 1;
    cr_assert_eq(sl_manifest_save(dir, &got), SL_OK, "%s", sl_errmsg());
    sl_manifest again;
    cr_assert_eq(sl_manifest_load(dir, &again), SL_OK, "%s", sl_errmsg());
    cr_assert_null(again.class_names);
    cr_assert_eq(again.num_classes, 10);
    cr_assert_eq(again.splits[0].records, 1);

    sl_manifest_fini(&again);
    sl_manifest_fini(&got);
    sl_manifest_fini(&m);
    sl_manifest_fini(&m); /* twice is harmless */
    free(text);
    free(path);
    free(tmp);
    tu_rmrf(dir);
    free(dir);
}

Test(manifest, load_missing_is_enoent)
{
    char *dir = tu_tmpdir();
    sl_manifest m;
    cr_assert_eq(sl_manifest_load(dir, &m), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "dataset.json"), "%s", sl_errmsg());
    tu_rmrf(dir);
    free(dir);
}

static const char base_json[] =
    "{\"version\":1,\"created_by\":\"t\",\"label_offset\":0,\"num_classes\":2,"
    "\"classes\":[\"a\",\"b\"],\"splits\":{\"train\":{\"format\":\"tfrecord\","
    "\"records\":10,\"shards\":2,\"bytes\":100,\"skipped\":0,\"source\":\"s\"}}}";

Test(manifest, malformed_and_mistyped_are_corrupt)
{
    static const struct {
        const char *json;
        const char *field; /* expected in the message */
    } cases[] = {
        {"{\"version\":1,", "not valid JSON"},
        {"", "not valid JSON"},
        {"[1,2]", "top level"},
        {"{\"version\":\"1\",\"num_classes\":2,\"splits\":{}}", "field version"},
        {"{\"num_classes\":2,\"splits\":{}}", "field version: missing"},
        {"{\"version\":1,\"num_classes\":-1,\"splits\":{}}", "field num_classes"},
        {"{\"version\":1,\"num_classes\":2.5,\"splits\":{}}", "field num_classes"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":[]}", "field splits"},
        {"{\"version\":1,\"num_classes\":2}", "field splits: missing"},
        {"{\"version\":1,\"num_classes\":2,\"created_by\":7,\"splits\":{}}", "field created_by"},
        {"{\"version\":1,\"num_classes\":2,\"label_offset\":\"x\",\"splits\":{}}",
         "field label_offset"},
        {"{\"version\":1,\"num_classes\":2,\"classes\":\"ab\",\"splits\":{}}", "field classes"},
        {"{\"version\":1,\"num_classes\":2,\"classes\":[\"a\",3],\"splits\":{}}", "field classes"},
        {"{\"version\":1,\"num_classes\":3,\"classes\":[\"a\",\"b\"],\"splits\":{}}",
         "field classes: length"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":7}}", "field splits.train"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"csv\","
         "\"records\":1,\"shards\":1}}}", "field splits.train.format"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"tfrecord\","
         "\"records\":\"10\",\"shards\":1}}}", "field splits.train.records"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"tfrecord\","
         "\"records\":10}}}", "field splits.train.shards: missing"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"tfrecord\","
         "\"records\":10,\"shards\":1,\"bytes\":-5}}}", "field splits.train.bytes"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"tfrecord\","
         "\"records\":10,\"shards\":1,\"source\":null}}}", "field splits.train.source"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"t\":{\"format\":\"lmdb\",\"records\":1,"
         "\"shards\":1},\"t\":{\"format\":\"lmdb\",\"records\":1,\"shards\":1}}}", "twice"},
        /* numbers no integer holds: refused before any conversion (issue 26) */
        {"{\"version\":1,\"num_classes\":2,\"label_offset\":1e300,\"splits\":{}}",
         "field label_offset: 1e+300 is not an integer in -2^53..2^53"},
        {"{\"version\":1,\"num_classes\":2,\"label_offset\":0.5,\"splits\":{}}",
         "field label_offset: 0.5 is not an integer"},
        {"{\"version\":1,\"num_classes\":4294967296,\"splits\":{}}",
         "field num_classes: 4294967296 is not an integer in 0..4294967295"},
        {"{\"version\":1e999,\"num_classes\":2,\"splits\":{}}",
         "field version: inf is not an integer"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"tfrecord\","
         "\"records\":1e300,\"shards\":1}}}",
         "field splits.train.records: 1e+300 is not an integer in 0..2^53"},
        {"{\"version\":1,\"num_classes\":2,\"splits\":{\"train\":{\"format\":\"tfrecord\","
         "\"records\":10,\"shards\":-1e300}}}",
         "field splits.train.shards: -1e+300 is not an integer"},
    };
    char *dir = tu_tmpdir();
    char *path = tu_join(dir, "dataset.json");
    sl_manifest m;

    /* the base document is fine */
    cr_assert_eq(tu_write_file(path, base_json, strlen(base_json)), 0);
    cr_assert_eq(sl_manifest_load(dir, &m), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(m.splits[0].shards, 2);
    sl_manifest_fini(&m);

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert_eq(tu_write_file(path, cases[i].json, strlen(cases[i].json)), 0);
        cr_assert_eq(sl_manifest_load(dir, &m), SL_ECORRUPT, "case %zu: %s", i, cases[i].json);
        cr_assert(strstr(sl_errmsg(), path), "case %zu: %s", i, sl_errmsg());
        cr_assert(strstr(sl_errmsg(), cases[i].field), "case %zu: %s", i, sl_errmsg());
        cr_assert_null(m.class_names, "case %zu: nothing leaks on error", i);
    }
    /* a newer version is refused, not misread */
    const char *v2 = "{\"version\":2,\"num_classes\":1,\"splits\":{}}";
    cr_assert_eq(tu_write_file(path, v2, strlen(v2)), 0);
    cr_assert_eq(sl_manifest_load(dir, &m), SL_ENOTSUP);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

Test(manifest, split_put_and_set_classes)
{
    sl_manifest m;
    sl_manifest_split s = {.name = "train", .records = 5};
    sl_manifest_init(&m);
    cr_assert_eq(m.version, 1);
    cr_assert_eq(sl_manifest_split_put(&m, &s), SL_OK);
    s.records = 6;
    cr_assert_eq(sl_manifest_split_put(&m, &s), SL_OK); /* replaces */
    cr_assert_eq(m.nsplits, 1);
    cr_assert_eq(sl_manifest_split_find(&m, "train")->records, 6);
    for (int i = 1; i < SL_MANIFEST_MAX_SPLITS; i++) {
        snprintf(s.name, sizeof s.name, "s%d", i);
        cr_assert_eq(sl_manifest_split_put(&m, &s), SL_OK);
    }
    snprintf(s.name, sizeof s.name, "one-too-many");
    cr_assert_eq(sl_manifest_split_put(&m, &s), SL_EINVAL);
    s.name[0] = '\0';
    cr_assert_eq(sl_manifest_split_put(&m, &s), SL_EINVAL);

    char a[] = "alpha";
    const char *names[] = {a, "beta"};
    cr_assert_eq(sl_manifest_set_classes(&m, names, 2), SL_OK);
    a[0] = 'X'; /* copied, not borrowed */
    cr_assert_str_eq(m.class_names[0], "alpha");
    const char *with_null[] = {"x", NULL};
    cr_assert_eq(sl_manifest_set_classes(&m, with_null, 2), SL_EINVAL);
    cr_assert_str_eq(m.class_names[1], "beta", "unchanged on error");
    sl_manifest_fini(&m);
    cr_assert_null(m.class_names);
}

/* Counts up to 2^53 come back exactly as saved: cJSON's own printer keeps
 * 15 digits (9007199254740992 read back as 9007199254740990; found by
 * fuzz_manifest), so the manifest writes the integers' text. Likewise a
 * large label offset; one no double holds is refused. */
Test(manifest, large_counts_round_trip_exactly)
{
    static const uint64_t counts[] = {(1ull << 53), (1ull << 53) - 1, 1000000000000001ull,
                                      999999999999999ull, 123456789012345678ull >> 4};
    char *dir = tu_tmpdir();
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        sl_manifest m, got;
        sl_manifest_init(&m);
        m.label_offset = -(int64_t)counts[i];
        sl_manifest_split s = {.name = "train", .records = counts[i], .shards = 1,
                               .bytes = counts[i] - 1, .skipped = counts[i] / 3};
        cr_assert_eq(sl_manifest_split_put(&m, &s), SL_OK);
        cr_assert_eq(sl_manifest_save(dir, &m), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_manifest_load(dir, &got), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(got.splits[0].records, counts[i], "%llu came back as %llu",
                     (unsigned long long)counts[i], (unsigned long long)got.splits[0].records);
        cr_assert_eq(got.splits[0].bytes, counts[i] - 1);
        cr_assert_eq(got.splits[0].skipped, counts[i] / 3);
        cr_assert_eq(got.label_offset, -(int64_t)counts[i]);
        sl_manifest_fini(&got);
        sl_manifest_fini(&m);
    }
    sl_manifest m;
    sl_manifest_init(&m);
    m.label_offset = ((int64_t)1 << 53) + 1;
    cr_assert_eq(sl_manifest_save(dir, &m), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "label_offset 9007199254740993 is outside"), "%s", sl_errmsg());
    sl_manifest_fini(&m);
    tu_rmrf(dir);
    free(dir);
}

Test(manifest, save_refuses_counts_json_cannot_hold)
{
    char *dir = tu_tmpdir();
    char *path = tu_join(dir, "dataset.json");
    sl_manifest m;
    sl_manifest_split s = {.name = "train", .records = (1ull << 53) + 1, .shards = 1};
    sl_manifest_init(&m);
    cr_assert_eq(sl_manifest_split_put(&m, &s), SL_OK);
    cr_assert_eq(sl_manifest_save(dir, &m), SL_EINVAL);
    cr_assert(access(path, F_OK) != 0);
    /* a missing directory is an I/O error naming it */
    char *gone = tu_join(dir, "gone");
    m.splits[0].records = 1;
    cr_assert_eq(sl_manifest_save(gone, &m), SL_EIO);
    cr_assert(strstr(sl_errmsg(), gone), "%s", sl_errmsg());
    sl_manifest_fini(&m);
    free(gone);
    free(path);
    tu_rmrf(dir);
    free(dir);
}

/*
 * tests/records/test_dataset_files.c - records/dataset_files.c: what a file
 * is by its name (a shard and of which split and format, compressed, or
 * none) and, for one file given alone as the data, by its first 12 bytes
 * (a TFRecord header, or what it is instead and what was expected).
 * test_dataset.c checks the same through sl_dataset_resolve.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "records/records_int.h"
#include "testutil.h"

Test(dataset_files, split_and_format_by_name)
{
    static const struct {
        const char *path, *split;
        sl_format fmt;
    } cases[] = {
        {"d/train-00003-of-00016.tfrecord", "train", SL_FORMAT_TFRECORD},
        {"/a/b/validation-00000-of-00001", "validation", SL_FORMAT_TFRECORD},
        {"s3://bucket/p/val-000001.tar", "val", SL_FORMAT_WDS},
        {"shards/train_000002.tar", "train", SL_FORMAT_WDS},
        {"loose.tfrecord", "*", SL_FORMAT_TFRECORD},
        {"d/data.tar", "*", SL_FORMAT_WDS},
        /* TensorFlow Datasets' "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}" */
        {"tfds/mnist/3.0.1/mnist-train.tfrecord-00000-of-00001", "train", SL_FORMAT_TFRECORD},
        {"imagenet2012-validation.tfrecord-00063-of-00064", "validation", SL_FORMAT_TFRECORD},
        {"d/cats_vs_dogs-train.tfrecord-00003-of-00008", "train", SL_FORMAT_TFRECORD},
        {"d/train.tfrecord-00000-of-00004", "train", SL_FORMAT_TFRECORD},
        {"d/x-.tfrecord-00000-of-00004", "x-.tfrecord", SL_FORMAT_TFRECORD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char split[64];
        sl_dataset_split_of(cases[i].path, split, sizeof split);
        cr_assert_str_eq(split, cases[i].split, "%s", cases[i].path);
        cr_assert_eq(sl_dataset_file_format(cases[i].path), cases[i].fmt, "%s", cases[i].path);
    }
    size_t off;
    cr_assert_eq(sl_shard_split_span("mnist-test.tfrecord-00000-of-00001", &off), 4);
    cr_assert_eq(off, 6);
    cr_assert_eq(sl_shard_split_span("test-00000-of-00001.tfrecord", &off), 4);
    cr_assert_eq(off, 0);
    cr_assert_eq(sl_shard_split_span("mnist-test.tfrecord-00000-of-00001.tmp", &off), 0);
    char tiny[4];
    sl_dataset_split_of("train-00000-of-00001", tiny, sizeof tiny);
    cr_assert_str_eq(tiny, "*", "a name longer than the buffer is no split");
    cr_assert_str_eq(sl_name_base("a/b/c.tar"), "c.tar");
    cr_assert_str_eq(sl_name_base("c.tar"), "c.tar");
    cr_assert(sl_name_has_suffix("x.tar.idx", ".idx") && !sl_name_has_suffix("idx", ".idx"));
    cr_assert(sl_dataset_split_named("validation") && sl_dataset_split_named("train"));
    cr_assert(!sl_dataset_split_named("shard") && !sl_dataset_split_named("*"));
}

Test(dataset_files, shards_and_compressed_by_name)
{
    static const char *const shards[] = {"train-00000-of-00001", "x.tfrecord", "x.tar",
                                         "x.tar.gz", "x.tgz", "x.tar.zst"};
    static const char *const others[] = {"dataset.json", "x.tar.idx", "x.idx", "x.jpg",
                                         "notes.gz", "x.lmdb"};
    for (size_t i = 0; i < sizeof shards / sizeof shards[0]; i++)
        cr_assert(sl_dataset_shard_like(shards[i]), "%s is taken as a shard", shards[i]);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        cr_assert(!sl_dataset_shard_like(others[i]), "%s is no shard", others[i]);
    cr_assert_str_eq(sl_dataset_compressed_as("a/x.tar.gz"), "gzip");
    cr_assert_str_eq(sl_dataset_compressed_as("x.tgz"), "gzip");
    cr_assert_str_eq(sl_dataset_compressed_as("x.tar.zst"), "zstd");
    cr_assert_null(sl_dataset_compressed_as("x.tar"));
    cr_assert_eq(sl_dataset_refuse_compressed("d/x.tar.gz", "gzip"), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "d/x.tar.gz: a gzip-compressed file") &&
              strstr(sl_errmsg(), "gzip -d"), "%s", sl_errmsg());
}

/* One file given as the data: a TFRecord header passes, an empty file is
 * an empty shard, anything else is refused naming what it is. */
Test(dataset_files, a_file_alone_must_be_a_shard)
{
    char *dir = tu_tmpdir();
    /* a record's header: length 3 (u64 LE), its masked CRC-32C (u32 LE);
     * the check reads no further */
    uint8_t rec[12 + 3 + 4] = {3};
    uint32_t c = sl_crc_mask(sl_crc32c(0, rec, 8));
    for (int i = 0; i < 4; i++)
        rec[8 + i] = (uint8_t)(c >> (8 * i));
    static const struct {
        const char *name, *says;
    } bad[] = {
        {"dataset.json", "the dataset's manifest"},
        {"train-00000-of-00001.tfrecord.idx", "an index file"},
        {"data.mdb", "a file of an LMDB store"},
        {"cat.JPG", "an image: convert images into shards first"},
        {"blob.bin", "its first 12 bytes are no TFRecord record header"},
    };
    char *p = tu_join(dir, "good.tfrecord");
    cr_assert_eq(tu_write_file(p, rec, sizeof rec), 0);
    cr_assert_eq(sl_dataset_check_shard_file(p, sizeof rec), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_dataset_check_shard_file(p, 0), SL_OK, "an empty file is an empty shard");
    free(p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static const char text[] = "{\"splits\": {\"train\": {}}}  ";
        p = tu_join(dir, bad[i].name);
        cr_assert_eq(tu_write_file(p, text, sizeof text - 1), 0);
        cr_assert_eq(sl_dataset_check_shard_file(p, sizeof text - 1), SL_EINVAL, "%s", p);
        const char *m = sl_errmsg();
        cr_assert(strstr(m, p) && strstr(m, "not a record shard") && strstr(m, bad[i].says) &&
                  strstr(m, "dataset directory"), "%s", m);
        free(p);
    }
    tu_rmrf(dir);
    free(dir);
}

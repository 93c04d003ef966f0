/*
 * tests/tools/test_convert_tfrecord.c - `sluice convert --from tfrecord`
 * end to end (records/convert_records.c): shards laid out as TensorFlow
 * Datasets writes them (NAME-SPLIT.tfrecord-*-of-*, Examples keyed image /
 * label / file_name, features.json and label.labels.txt beside them) with
 * JPEG and PNG images, converted by the real binary and read back with the
 * records API. tests/interop/test_tf_interop.c does the same on a folder
 * that tfds itself prepared.
 */
#include <criterion/criterion.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

#define NREC 12 /* per train shard; 2 shards */
#define SIDE 24

static const char features[] =
    "{\"featuresDict\": {\"features\": {\"label\": {\"classLabel\": {\"numClasses\": \"3\"}}}}}";

/* Image i: a smooth SIDE x SIDE gray ramp (PNG for odd i) or RGB (JPEG). */
static uint8_t *pixels(int i, int comps)
{
    uint8_t *px = malloc((size_t)SIDE * SIDE * comps);
    cr_assert_not_null(px);
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++)
            for (int c = 0; c < comps; c++)
                px[((size_t)y * SIDE + x) * comps + c] =
                    (uint8_t)(30 + 3 * x + 2 * y + 5 * (i % 8) + 20 * c); /* <= 220 */
    return px;
}

static uint8_t *png_of(int i, size_t *len)
{
    uint8_t *px = pixels(i, 1);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = SIDE;
    img.height = SIDE;
    img.format = PNG_FORMAT_GRAY;
    png_alloc_size_t n = 0;
    cr_assert(png_image_write_to_memory(&img, NULL, &n, 0, px, 0, NULL), "%s", img.message);
    uint8_t *out = malloc(n);
    cr_assert_not_null(out);
    cr_assert(png_image_write_to_memory(&img, out, &n, 0, px, 0, NULL), "%s", img.message);
    free(px);
    *len = n;
    return out;
}

static uint8_t *jpeg_of(int i, size_t *len)
{
    uint8_t *px = pixels(i, 3);
    tjhandle tj = tjInitCompress();
    unsigned char *j = NULL;
    unsigned long n = 0;
    cr_assert_eq(tjCompress2(tj, px, SIDE, SIDE * 3, SIDE, TJPF_RGB, &j, &n, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    free(px);
    uint8_t *out = malloc(n);
    cr_assert_not_null(out);
    memcpy(out, j, n);
    tjFree(j);
    *len = n;
    return out;
}

/* Shard `name` in dir: records first..first+n-1 with TFDS's keys; record
 * `nolabel` (if in range) without its label. */
static void write_shard(const char *dir, const char *name, int first, int n, int nolabel)
{
    char *p = tu_join(dir, name);
    sl_tfrecord_writer *w;
    sl_example_builder b;
    sl_example_builder_init(&b);
    cr_assert_eq(sl_tfrecord_writer_open(p, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = first; i < first + n; i++) {
        size_t len;
        uint8_t *img = i % 2 ? png_of(i, &len) : jpeg_of(i, &len);
        char fname[32];
        int64_t label = i % 3;
        snprintf(fname, sizeof fname, "img-%02d.%s", i, i % 2 ? "png" : "jpg");
        cr_assert_eq(sl_example_add_bytes(&b, "file_name", fname, strlen(fname)), SL_OK);
        cr_assert_eq(sl_example_add_bytes(&b, "image", img, len), SL_OK);
        if (i != nolabel)
            cr_assert_eq(sl_example_add_int64(&b, "label", &label, 1), SL_OK);
        const uint8_t *rec;
        size_t rl;
        cr_assert_eq(sl_example_finish(&b, &rec, &rl), SL_OK);
        cr_assert_eq(sl_tfrecord_writer_write(w, rec, rl), SL_OK);
        sl_example_builder_reset(&b);
        free(img);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);
    free(p);
}

/* A TFDS-style folder under root: train (2 shards, record 5 unlabelled)
 * and test, the classes in features.json, their names in label.labels.txt. */
static char *make_source(const char *root)
{
    char *src = tu_join(root, "tfds");
    cr_assert_eq(mkdir(src, 0755), 0);
    write_shard(src, "snaps-train.tfrecord-00000-of-00002", 0, NREC, 5);
    write_shard(src, "snaps-train.tfrecord-00001-of-00002", NREC, NREC, -1);
    write_shard(src, "snaps-test.tfrecord-00000-of-00001", 100, 4, -1);
    char *f = tu_join(src, "features.json"), *l = tu_join(src, "label.labels.txt");
    cr_assert_eq(tu_write_file(f, features, strlen(features)), 0);
    cr_assert_eq(tu_write_file(l, "ant\nbee\ncat\n", 12), 0);
    free(f);
    free(l);
    return src;
}

/* Each record converted in source order (--no-shuffle): the JPEGs byte for
 * byte, the PNGs re-encoded to JPEGs of the same pixels (within JPEG's
 * error at quality 95), labels and file names kept, the unlabelled record
 * skipped and named by shard and number, dataset.json with the source's
 * classes and names. */
Test(convert_tfrecord, tfds_shards_jpeg_kept_png_reencoded)
{
    char *root = tu_tmpdir(), *src = make_source(root), *out = tu_join(root, "out"), *log;
    int st = tu_run(&log, "'%s' convert --from tfrecord '%s' --out '%s' --name train --shards 1 "
                    "--no-shuffle --no-fsync 2>&1", tu_sluice(), src, out);
    cr_assert_eq(st, 0, "%s", log);
    cr_assert(strstr(log, "skipped: ") && strstr(log, "snaps-train.tfrecord-00000-of-00002[5]") &&
                  strstr(log, "missing feature image/class/label"), "%s", log);
    cr_assert(strstr(log, "24 inputs -> 23 records in 1 shard") && strstr(log, "1 skipped"), "%s",
              log);
    free(log);

    char shard[4096];
    cr_assert_eq(sl_shard_path(shard, sizeof shard, out, "train", 0, 1), SL_OK);
    sl_tfrecord_reader *r;
    cr_assert_eq(sl_tfrecord_reader_open(shard, &r), SL_OK, "%s", sl_errmsg());
    tjhandle tj = tjInitDecompress();
    const uint8_t *rec;
    size_t len;
    int i = 0, rc;
    while ((rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK) {
        if (i == 5)
            i++;
        sl_image_example ex;
        cr_assert_eq(sl_image_example_decode(rec, len, &ex), SL_OK, "%s", sl_errmsg());
        char fname[32];
        snprintf(fname, sizeof fname, "img-%02d.%s", i, i % 2 ? "png" : "jpg");
        cr_assert(ex.filename_len == strlen(fname) && !memcmp(ex.filename, fname, ex.filename_len),
                  "record for %s: %.*s", fname, (int)ex.filename_len, ex.filename);
        cr_assert_eq(ex.label, i % 3, "%s", fname);
        cr_assert(ex.text_len == 3 && !memcmp(ex.text, &"antbeecat"[3 * (i % 3)], 3), "%s", fname);
        if (i % 2 == 0) {
            size_t jl;
            uint8_t *j = jpeg_of(i, &jl);
            cr_assert(jl == ex.image_len && !memcmp(j, ex.image, jl), "%s: not byte for byte", fname);
            free(j);
        } else {
            uint8_t *want = pixels(i, 1), got[SIDE * SIDE * 3];
            cr_assert_eq(tjDecompress2(tj, ex.image, ex.image_len, got, SIDE, 0, SIDE, TJPF_RGB, 0),
                         0, "%s: %s", fname, tjGetErrorStr2(tj));
            int worst = 0;
            for (int k = 0; k < SIDE * SIDE * 3; k++) {
                int d = abs((int)got[k] - (int)want[k / 3]);
                worst = d > worst ? d : worst;
            }
            cr_assert_leq(worst, 6, "%s: a pixel off by %d after re-encoding", fname, worst);
            free(want);
        }
        i++;
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(i, 2 * NREC);
    sl_tfrecord_reader_close(r);
    tjDestroy(tj);

    sl_manifest m;
    cr_assert_eq(sl_manifest_load(out, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_split *sp = sl_manifest_split_find(&m, "train");
    cr_assert(sp && sp->records == 23 && sp->skipped == 1);
    cr_assert(strstr(sp->source, "tfrecord ") && strstr(sp->source, "/tfds"), "%s", sp->source);
    cr_assert(m.num_classes == 3 && m.class_names && !strcmp(m.class_names[2], "cat"));
    sl_manifest_fini(&m);

    /* the test split by --split, into the same output */
    st = tu_run(&log, "'%s' convert --from tfrecord '%s' --split test --out '%s' --name validation "
                "--no-fsync 2>&1", tu_sluice(), src, out);
    cr_assert_eq(st, 0, "%s", log);
    cr_assert(strstr(log, "4 inputs -> 4 records"), "%s", log);
    free(log);
    free(out);
    free(src);
    tu_rmrf(root);
    free(root);
}

/* What is refused, before any shard is written: a split the source lacks
 * (naming those it has), the source's own folder as output, --split
 * without --from tfrecord, a planned (--plan-out) conversion, and a shard
 * whose framing is damaged (naming the shard and the record). */
Test(convert_tfrecord, refusals_name_the_cause)
{
    char *root = tu_tmpdir(), *src = make_source(root), *out = tu_join(root, "out"), *log;
    int st = tu_run(&log, "'%s' convert --from tfrecord '%s' --out '%s' --name val --no-fsync 2>&1",
                    tu_sluice(), src, out);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "no split 'val' (it has: test, train)") && strstr(log, "--split"), "%s",
              log);
    free(log);
    st = tu_run(&log, "'%s' convert --from tfrecord '%s' --out '%s' --name train --no-fsync 2>&1",
                tu_sluice(), src, src);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "the output folder is the source's"), "%s", log);
    free(log);
    st = tu_run(&log, "'%s' convert --from folder '%s' --split train --out '%s' --name train 2>&1",
                tu_sluice(), src, out);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "--split applies to --from tfrecord only"), "%s", log);
    free(log);
    st = tu_run(&log, "'%s' convert --from tfrecord '%s' --out '%s' --name train --plan-out '%s/p' "
                "2>&1", tu_sluice(), src, out, root);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "convert it on one machine"), "%s", log);
    free(log);

    /* a flipped byte in record 3's length field: its length CRC fails */
    char *bad = tu_join(src, "snaps-train.tfrecord-00001-of-00002");
    sl_tfrecord_reader *r;
    const uint8_t *d;
    size_t len;
    cr_assert_eq(sl_tfrecord_reader_open(bad, &r), SL_OK);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(sl_tfrecord_reader_next(r, &d, &len), SL_OK);
    uint64_t at = sl_tfrecord_reader_offset(r);
    sl_tfrecord_reader_close(r);
    size_t n;
    uint8_t *bytes = tu_read_file(bad, &n);
    cr_assert_not_null(bytes);
    bytes[at] ^= 0x40;
    cr_assert_eq(tu_write_file(bad, bytes, n), 0);
    free(bytes);
    st = tu_run(&log, "'%s' convert --from tfrecord '%s' --out '%s' --name train --no-fsync 2>&1",
                tu_sluice(), src, out);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "snaps-train.tfrecord-00001-of-00002") && strstr(log, "record 3"), "%s",
              log);
    char *dj = tu_join(out, "dataset.json");
    cr_assert_neq(access(dj, F_OK), 0, "nothing may be written:\n%s", log);
    free(dj);
    free(log);
    free(bad);
    free(out);
    free(src);
    tu_rmrf(root);
    free(root);
}

/*
 * tests/tools/test_tf_layout.c - every command on a directory laid out the
 * way TensorFlow's build_imagenet_data.py writes ImageNet, made here from
 * nothing with the records API: shards train-0000K-of-00002 and
 * validation-00000-of-00001 without a suffix, without index files, without
 * dataset.json, labels 1..K (0 is TF's background class), and Examples
 * with TF's whole feature set (colorspace, channels, synset, text, bbox
 * lists). verify, inspect, index, profile, train (its validation split
 * evaluated) and eval take it as it is; the label offset is an option.
 * (tests/interop/test_tf_interop.c does the same on shards TensorFlow
 * itself wrote, where its virtualenv is.)
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

#define K 5         /* classes: labels 1..K */
#define TRAIN_N 12  /* records per train shard (2 shards) */
#define VAL_N 10

/* A small RGB JPEG (w x h) whose colours depend on the label. */
static uint8_t *make_jpeg(int w, int h, int label, int seed, unsigned long *len)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    cr_assert_not_null(px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(label * 50 + x * 3 + seed);
            p[1] = (uint8_t)(255 - label * 40 + y * 2);
            p[2] = (uint8_t)((x * y + seed) & 0x3f);
        }
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *jpeg = NULL;
    cr_assert_eq(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, len, TJSAMP_420, 90, 0), 0,
                 "tjCompress2: %s", tjGetErrorStr2(tj));
    uint8_t *out = malloc(*len);
    cr_assert_not_null(out);
    memcpy(out, jpeg, *len);
    tjFree(jpeg);
    tjDestroy(tj);
    free(px);
    return out;
}

/* One Example as build_imagenet_data.py's _convert_to_example writes it. */
static void tf_example(sl_example_builder *b, int i, int label, const uint8_t **data,
                       size_t *len)
{
    int w = 24 + i % 9, h = 20 + i % 7;
    unsigned long jl;
    uint8_t *jpeg = make_jpeg(w, h, label, i, &jl);
    char synset[16], text[64], fname[64];
    snprintf(synset, sizeof synset, "n%08d", 1440764 + label);
    snprintf(text, sizeof text, "class %d, with a comma", label);
    snprintf(fname, sizeof fname, "%s_%d.JPEG", synset, i);
    int64_t hh = h, ww = w, ch = 3, l = label, bl[2] = {label, label};
    float xmin[2] = {0.1f, 0.2f}, xmax[2] = {0.8f, 0.9f}, ymin[2] = {0.05f, 0.3f},
          ymax[2] = {0.7f, 0.95f};
    int nbox = 1 + i % 2;
    sl_example_builder_reset(b);
    cr_assert_eq(sl_example_add_int64(b, "image/height", &hh, 1), SL_OK);
    cr_assert_eq(sl_example_add_int64(b, "image/width", &ww, 1), SL_OK);
    cr_assert_eq(sl_example_add_bytes(b, "image/colorspace", "RGB", 3), SL_OK);
    cr_assert_eq(sl_example_add_int64(b, "image/channels", &ch, 1), SL_OK);
    cr_assert_eq(sl_example_add_int64(b, "image/class/label", &l, 1), SL_OK);
    cr_assert_eq(sl_example_add_bytes(b, "image/class/synset", synset, strlen(synset)), SL_OK);
    cr_assert_eq(sl_example_add_bytes(b, "image/class/text", text, strlen(text)), SL_OK);
    cr_assert_eq(sl_example_add_float(b, "image/object/bbox/xmin", xmin, (size_t)nbox), SL_OK);
    cr_assert_eq(sl_example_add_float(b, "image/object/bbox/xmax", xmax, (size_t)nbox), SL_OK);
    cr_assert_eq(sl_example_add_float(b, "image/object/bbox/ymin", ymin, (size_t)nbox), SL_OK);
    cr_assert_eq(sl_example_add_float(b, "image/object/bbox/ymax", ymax, (size_t)nbox), SL_OK);
    cr_assert_eq(sl_example_add_int64(b, "image/object/bbox/label", bl, (size_t)nbox), SL_OK);
    cr_assert_eq(sl_example_add_bytes(b, "image/format", "JPEG", 4), SL_OK);
    cr_assert_eq(sl_example_add_bytes(b, "image/filename", fname, strlen(fname)), SL_OK);
    cr_assert_eq(sl_example_add_bytes(b, "image/encoded", jpeg, jl), SL_OK);
    cr_assert_eq(sl_example_finish(b, data, len), SL_OK, "%s", sl_errmsg());
    free(jpeg);
}

/* dir/name: n Examples, labels 1 + (first + i) % K (so every label, K too,
 * occurs), no index file. */
static void tf_shard(const char *dir, const char *name, int first, int n)
{
    char *p = tu_join(dir, name);
    sl_tfrecord_writer *w;
    sl_example_builder b;
    sl_example_builder_init(&b);
    cr_assert_eq(sl_tfrecord_writer_open(p, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = 0; i < n; i++) {
        const uint8_t *data;
        size_t len;
        tf_example(&b, first + i, 1 + (first + i) % K, &data, &len);
        cr_assert_eq(sl_tfrecord_writer_write(w, data, len), SL_OK);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);
    free(p);
}

static char *g_dir, *g_data;

static void setup(void)
{
    g_dir = tu_tmpdir();
    g_data = tu_join(g_dir, "imagenet-tf");
    cr_assert_eq(tu_run(NULL, "mkdir -p '%s'", g_data), 0);
    tf_shard(g_data, "train-00000-of-00002", 0, TRAIN_N);
    tf_shard(g_data, "train-00001-of-00002", TRAIN_N, TRAIN_N);
    tf_shard(g_data, "validation-00000-of-00001", 100, VAL_N);
}

static void teardown(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
    free(g_data);
}

TestSuite(tf_layout, .init = setup, .fini = teardown);

/* "sluice ARGS 2>&1": its exit status must be want; the output (malloc'd). */
static char *run(int want, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int want, const char *fmt, ...)
{
    char args[4096], *out = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = tu_run(&out, "cd '%s' && %s %s 2>&1", g_dir, tu_sluice(), args);
    cr_assert_not_null(out);
    cr_assert_eq(rc, want, "sluice %s: exit %d, want %d:\n%s", args, rc, want, out);
    return out;
}

static void has(const char *out, const char *what)
{
    cr_assert_not_null(strstr(out, what), "expected \"%s\" in:\n%s", what, out);
}

static int count(const char *out, const char *what)
{
    int n = 0;
    for (const char *p = strstr(out, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

Test(tf_layout, verify_inspect_index)
{
    char *out = run(0, "verify %s", g_data);
    has(out, "ok: 34 records in 3 files");
    has(out, "3 shards have no index file");
    free(out);
    out = run(0, "verify %s --label-range 1:%d", g_data, K);
    free(out);
    out = run(1, "verify %s --label-range 0:%d", g_data, K - 1);
    has(out, "label 5 outside 0..4");
    free(out);
    out = run(0, "verify %s/train-00001-of-00002", g_data); /* one suffix-less file */
    has(out, "ok: 12 records in 1 file");
    free(out);
    out = run(0, "verify '%s/train-*'", g_data); /* a quoted glob */
    has(out, "ok: 24 records in 2 files");
    free(out);

    out = run(0, "inspect %s --json", g_data);
    has(out, "\"train\"");
    has(out, "\"validation\"");
    has(out, "\"records\":\t34");
    has(out, "\"records\":\t24");
    has(out, "\"records\":\t10");
    has(out, "\"5\":\t6"); /* label K counted, as stored (no offset) */
    has(out, "\"shards_without_index\":\t2");
    free(out);
    out = run(0, "inspect %s", g_data);
    has(out, "note: 2 of 2 shards of train have no index file");
    free(out);

    out = run(0, "index %s", g_data);
    has(out, "wrote 3 index files, 0 already up to date");
    free(out);
    out = run(0, "index %s", g_data);
    has(out, "wrote 0 index files, 3 already up to date");
    free(out);
    out = run(0, "verify %s", g_data); /* now each index is checked against its shard */
    cr_assert_null(strstr(out, "no index file"), "%s", out);
    has(out, "ok: 34 records in 3 files");
    free(out);
    out = run(2, "index %s/nothing-here", g_data);
    has(out, "nothing-here");
    free(out);
    out = run(0, "index --help");
    has(out, "usage: sluice index");
    free(out);
}

Test(tf_layout, profile)
{
    char *out = run(0, "profile --data %s --label-offset 1 --image-size 16 --batch 8 "
                    "--batches 4 --warmup 1 --workers 1 --quiet", g_data);
    cr_assert_eq(count(out, "no index file"), 1, "%s", out);
    has(out, "2 of 2 shards of train have no index file");
    free(out);
    out = run(0, "profile --data %s --split validation --eval --epochs 1 --image-size 16 "
              "--batch 4 --workers 1 --quiet --label-offset 1 --digest", g_data);
    has(out, "digest: ");
    free(out);
    out = run(2, "profile --data %s --split test --batches 1 --quiet", g_data);
    has(out, "no split 'test'");
    has(out, "train, validation");
    free(out);
    out = run(2, "profile --data %s --label-offset -1 --batches 1", g_data);
    has(out, "--label-offset");
    free(out);
}

Test(tf_layout, train_and_eval)
{
    /* no dataset.json: the number of classes must be given */
    char *out = run(2, "train --data %s --image-size 16 --epochs 1", g_data);
    has(out, "--classes 1000 --label-offset 1");
    free(out);
    /* labels 1..K in a model of K classes: the message names the option */
    out = run(2, "train --data %s --classes %d --image-size 16 --batch 24 --width 4 --epochs 1 "
              "--threads 1", g_data, K); /* one batch of all: label K is in step 1 */
    has(out, "--label-offset 1");
    cr_assert_null(strstr(out, "saved in"), "no step completed: nothing to save\n%s", out);
    free(out);

    out = run(0, "train --data %s --classes %d --label-offset 1 --image-size 16 --batch 8 "
              "--width 4 --epochs 2 --threads 1 --ckpt-dir ck", g_data, K);
    has(out, "evaluating split 'validation' after each epoch (there is no 'test' split)");
    cr_assert_eq(count(out, "evaluating split"), 1, "%s", out);
    has(out, "2 of 2 shards of train have no index file");
    has(out, "1 of 1 shards of validation have no index file");
    cr_assert_eq(count(out, "no index file"), 2, "said once each:\n%s", out);
    has(out, "eval  epoch 1 step 3: top1");
    has(out, "eval  epoch 2 step 6: top1");
    has(out, "(10 images");
    has(out, "validation top1");
    free(out);
    /* eval takes validation when there is no test split */
    out = run(0, "eval --data %s --checkpoint ck/ckpt-000000006.safetensors --label-offset 1 "
              "--batch 4 --threads 1 --json", g_data);
    has(out, "\"split\":\"validation\"");
    has(out, "\"images\":10");
    free(out);
    /* a glob of the train shards: the eval split is found in their folder */
    out = run(0, "train --data '%s/train-*' --classes %d --label-offset 1 --image-size 16 "
              "--batch 8 --width 4 --max-steps 2 --threads 1 --eval-split validation",
              g_data, K);
    has(out, "eval  epoch 0 step 2: top1");
    free(out);
    out = run(2, "train --data %s --classes %d --label-offset 1 --image-size 16 --batch 8 "
              "--width 4 --epochs 1 --threads 1 --eval-split test", g_data, K);
    has(out, "--eval-split test");
    has(out, "no split 'test'");
    cr_assert_null(strstr(out, "step 1/"), "a step ran before the error:\n%s", out);
    free(out);
}

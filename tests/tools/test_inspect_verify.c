/*
 * tests/tools/test_inspect_verify.c - `sluice inspect` and `sluice verify`
 * run as the real binary on datasets written here with the records API
 * (TFRecord writer + Example encoder + TurboJPEG), so they do not depend on
 * `sluice convert`. Corruptions are made on purpose: a flipped byte, a
 * truncated shard, records with valid CRCs but a bad payload (among them
 * an abbreviated JPEG without its quantization tables, which no decoder
 * can read alone; one without its Huffman tables decodes with the
 * standard ones and passes), a missing or wrong index, a manifest that
 * disagrees.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"

#define NCLASSES 4
#define PER_SHARD 10
#define IMG_W 16
#define IMG_H 12

/* What to put into one record instead of a good Example. */
typedef enum bad_kind {
    BAD_NONE = 0,
    BAD_PROTOBUF,  /* length-delimited field running past the end */
    BAD_NO_IMAGE,  /* Example without image/encoded */
    BAD_NOT_JPEG,  /* image/encoded holds text */
    BAD_DIMS,      /* image/height x image/width disagree with the JPEG */
    BAD_LABEL,     /* label NCLASSES + 3 (out of range for the manifest) */
    BAD_JPEG_CUT,  /* image/encoded is a JPEG cut short (header intact, no EOI) */
    BAD_NO_DQT,    /* image/encoded is a JPEG without its DQT segment */
    OK_NO_DHT,     /* not bad: a JPEG without DHT (the standard tables apply) */
} bad_kind;

/* A small RGB JPEG with a gradient (w x h), malloc'd. */
static uint8_t *make_jpeg(int w, int h, int seed, size_t *len)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    cr_assert_not_null(px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 13 + seed * 7);
            p[1] = (uint8_t)(y * 17 + seed);
            p[2] = (uint8_t)((x + y) * 5);
        }
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *jpeg = NULL;
    unsigned long jl = 0;
    cr_assert_eq(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, &jl, TJSAMP_420, 90, 0), 0,
                 "tjCompress2: %s", tjGetErrorStr2(tj));
    uint8_t *out = malloc(jl);
    cr_assert_not_null(out);
    memcpy(out, jpeg, jl);
    *len = jl;
    tjFree(jpeg);
    tjDestroy(tj);
    free(px);
    return out;
}

/* Serialized payload of record `global` (label global % NCLASSES) into b,
 * or the given kind of bad payload. *data and *len point into b or a static. */
static void make_payload(sl_example_builder *b, uint64_t global, bad_kind bad,
                         const uint8_t **data, size_t *len, uint8_t **jpeg_out)
{
    static const uint8_t bad_pb[] = {0x0a, 0x7f, 0x01, 0x02}; /* field 1, 127 bytes, 2 given */
    static const char text[] = "this is not an image at all, just some text";
    size_t jl;
    uint8_t *jpeg = make_jpeg(IMG_W, IMG_H, (int)global, &jl);
    sl_image_example ex = {
        .image = jpeg, .image_len = jl,
        .label = (int64_t)(global % NCLASSES),
        .height = IMG_H, .width = IMG_W,
        .format = "JPEG", .format_len = 4,
        .filename = "x.jpg", .filename_len = 5,
    };
    if (bad == BAD_PROTOBUF) {
        *data = bad_pb;
        *len = sizeof bad_pb;
        *jpeg_out = jpeg;
        return;
    }
    if (bad == BAD_NO_IMAGE) {
        /* The image encoder insists on an image, so build this one by hand. */
        int64_t label = ex.label, hw[2] = {IMG_H, IMG_W};
        sl_example_builder_reset(b);
        cr_assert_eq(sl_example_add_int64(b, "image/class/label", &label, 1), SL_OK);
        cr_assert_eq(sl_example_add_int64(b, "image/height", &hw[0], 1), SL_OK);
        cr_assert_eq(sl_example_add_int64(b, "image/width", &hw[1], 1), SL_OK);
        cr_assert_eq(sl_example_add_bytes(b, "image/format", "JPEG", 4), SL_OK);
        cr_assert_eq(sl_example_finish(b, data, len), SL_OK, "%s", sl_errmsg());
        *jpeg_out = jpeg;
        return;
    } else if (bad == BAD_NOT_JPEG) {
        ex.image = (const uint8_t *)text;
        ex.image_len = sizeof text - 1;
        ex.height = ex.width = 0;
    } else if (bad == BAD_DIMS) {
        ex.height = 99;
        ex.width = 77;
    } else if (bad == BAD_LABEL) {
        ex.label = NCLASSES + 3;
    } else if (bad == BAD_JPEG_CUT) {
        ex.image_len = jl - 10;
    } else if (bad == BAD_NO_DQT || bad == OK_NO_DHT) {
        uint8_t *cut = hi_strip(jpeg, jl, bad == BAD_NO_DQT ? 0xDB : 0xC4, &jl);
        free(jpeg);
        ex.image = jpeg = cut;
        ex.image_len = jl;
    }
    cr_assert_eq(sl_image_example_encode(&ex, b), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_example_finish(b, data, len), SL_OK, "%s", sl_errmsg());
    *jpeg_out = jpeg;
}

/* A dataset under dir: split "train", nshards shards of PER_SHARD records
 * (with index files) and dataset.json. bad[s*PER_SHARD + r] picks record r of
 * shard s (NULL: all good). Returns the payload bytes written. */
static uint64_t make_dataset(const char *dir, unsigned nshards, const bad_kind *bad)
{
    sl_example_builder b;
    uint64_t bytes = 0;
    sl_example_builder_init(&b);
    for (unsigned s = 0; s < nshards; s++) {
        char path[1024];
        sl_tfrecord_writer *w;
        cr_assert_eq(sl_shard_path(path, sizeof path, dir, "train", s, nshards), SL_OK);
        cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK, "%s",
                     sl_errmsg());
        for (unsigned r = 0; r < PER_SHARD; r++) {
            uint64_t g = (uint64_t)s * PER_SHARD + r;
            const uint8_t *data;
            size_t len;
            uint8_t *jpeg;
            make_payload(&b, g, bad ? bad[g] : BAD_NONE, &data, &len, &jpeg);
            cr_assert_eq(sl_tfrecord_writer_write(w, data, len), SL_OK, "%s", sl_errmsg());
            bytes += len;
            free(jpeg);
        }
        cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    }
    sl_example_builder_fini(&b);

    sl_manifest m;
    sl_manifest_init(&m);
    const char *names[NCLASSES] = {"cat", "dog", "bird", "fish"};
    cr_assert_eq(sl_manifest_set_classes(&m, names, NCLASSES), SL_OK);
    sl_manifest_split sp = {.format = SL_FORMAT_TFRECORD,
                            .records = (uint64_t)nshards * PER_SHARD,
                            .shards = nshards,
                            .bytes = bytes};
    snprintf(sp.name, sizeof sp.name, "train");
    snprintf(sp.source, sizeof sp.source, "test");
    cr_assert_eq(sl_manifest_split_put(&m, &sp), SL_OK);
    cr_assert_eq(sl_manifest_save(dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_fini(&m);
    return bytes;
}

static char *shard_of(const char *dir, unsigned s, unsigned n)
{
    char path[1024];
    cr_assert_eq(sl_shard_path(path, sizeof path, dir, "train", s, n), SL_OK);
    return strdup(path);
}

/* Offset of record r of shard path, from its index file. */
static sl_index_entry entry_of(const char *shard, size_t r)
{
    char idx[1100];
    sl_index_entry *e, out;
    size_t n;
    snprintf(idx, sizeof idx, "%s.idx", shard);
    cr_assert_eq(sl_index_load(idx, &e, &n), SL_OK, "%s", sl_errmsg());
    cr_assert(r < n);
    out = e[r];
    free(e);
    return out;
}

/* Flip one byte in the middle of record r's payload. Returns its offset. */
static uint64_t flip_in_record(const char *shard, size_t r)
{
    sl_index_entry e = entry_of(shard, r);
    size_t len;
    uint8_t *buf = tu_read_file(shard, &len);
    cr_assert_not_null(buf);
    buf[e.offset + 12 + (e.size - 16) / 2] ^= 0x40;
    cr_assert_eq(tu_write_file(shard, buf, len), 0);
    free(buf);
    return e.offset;
}

/* Run "sluice ARGS" (ARGS a printf format), assert that it exits with
 * status want, and return its output (stdout and stderr, malloc'd). */
static char *sluice_run(int want, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *sluice_run(int want, const char *fmt, ...)
{
    char args[4096], *out = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof args, "command line too long");
    int rc = tu_run(&out, "%s %s", tu_sluice(), args);
    cr_assert_not_null(out, "sluice %s: could not run", args);
    cr_assert_eq(rc, want, "sluice %s: exit %d, want %d:\n%s", args, rc, want, out);
    return out;
}

static void assert_has(const char *out, const char *what)
{
    cr_assert_not_null(strstr(out, what), "expected \"%s\" in output:\n%s", what, out);
}

/* Each test's temp directory: made before it, removed after it even when an
 * assertion fails. */
static char *g_dir;

static void dir_init(void) { g_dir = tu_tmpdir(); }

static void dir_fini(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
    g_dir = NULL;
}

TestSuite(verify, .init = dir_init, .fini = dir_fini);
TestSuite(inspect, .init = dir_init, .fini = dir_fini);

/* ------------------------------------------------------------------ verify */

Test(verify, clean_dataset_ok)
{
    const char *dir = g_dir;
    char *out;
    make_dataset(dir, 2, NULL);
    out = sluice_run(0, "verify %s", dir);
    assert_has(out, "ok: 20 records in 2 files");
    free(out);
    /* --quiet: nothing printed when clean */
    out = sluice_run(0, "verify --quiet %s", dir);
    cr_assert_eq(out[0], '\0', "quiet printed: %s", out);
    free(out);
}

Test(verify, flipped_byte_names_file_record_offset)
{
    const char *dir = g_dir;
    char *out, want[256];
    make_dataset(dir, 2, NULL);
    char *shard = shard_of(dir, 1, 2);
    uint64_t off = flip_in_record(shard, 5);
    out = sluice_run(1, "verify %s", dir);
    assert_has(out, "train-00001-of-00002.tfrecord");
    snprintf(want, sizeof want, "record 5 @ %llu", (unsigned long long)off);
    assert_has(out, want);
    cr_assert_null(strstr(out, "ok:"), "%s", out);
    free(out);
    /* inspect stops with exit 2 and names the place as well */
    out = sluice_run(2, "inspect %s", dir);
    assert_has(out, "train-00001-of-00002.tfrecord");
    assert_has(out, want);
    free(out);
    free(shard);
}

Test(verify, truncated_shard)
{
    const char *dir = g_dir;
    char *out, want[64];
    make_dataset(dir, 2, NULL);
    char *shard = shard_of(dir, 0, 2);
    size_t len;
    uint8_t *buf = tu_read_file(shard, &len);
    cr_assert_not_null(buf);
    cr_assert_eq(truncate(shard, (off_t)(len - 7)), 0);
    free(buf);
    out = sluice_run(1, "verify %s", dir);
    assert_has(out, "train-00000-of-00002.tfrecord");
    snprintf(want, sizeof want, "record %d @ %llu", PER_SHARD - 1,
             (unsigned long long)entry_of(shard, PER_SHARD - 1).offset);
    assert_has(out, want);
    free(out);
    free(shard);
}

/* A dataset whose record r of shard 0 is bad in the given way: verify exits
 * 1 naming the record and saying `what`. */
static void check_bad_record(bad_kind kind, size_t r, const char *what)
{
    const char *dir = g_dir;
    char *out, want[64];
    bad_kind bad[PER_SHARD] = {0};
    bad[r] = kind;
    make_dataset(dir, 1, bad);
    char *shard = shard_of(dir, 0, 1);
    out = sluice_run(1, "verify %s", dir);
    snprintf(want, sizeof want, "record %zu @ %llu: ", r,
             (unsigned long long)entry_of(shard, r).offset);
    assert_has(out, "train-00000-of-00001.tfrecord");
    assert_has(out, want);
    assert_has(out, what);
    free(out);
    free(shard);
}

Test(verify, bad_protobuf_with_valid_crc) { check_bad_record(BAD_PROTOBUF, 3, "bad Example"); }
Test(verify, missing_image_encoded) { check_bad_record(BAD_NO_IMAGE, 2, "image/encoded"); }
Test(verify, payload_not_jpeg) { check_bad_record(BAD_NOT_JPEG, 4, "image/encoded"); }
Test(verify, dims_disagree_with_jpeg) { check_bad_record(BAD_DIMS, 1, "99x77"); }
Test(verify, label_out_of_manifest_range) { check_bad_record(BAD_LABEL, 6, "label 7"); }
Test(verify, truncated_jpeg_with_valid_crc) { check_bad_record(BAD_JPEG_CUT, 5, "truncated JPEG"); }
Test(verify, jpeg_without_quantization_tables)
{
    check_bad_record(BAD_NO_DQT, 7, "quantization table 0, which no DQT before it defines");
}

Test(verify, jpeg_without_huffman_tables_is_fine)
{
    bad_kind bad[PER_SHARD] = {0};
    bad[3] = OK_NO_DHT;
    make_dataset(g_dir, 1, bad);
    char *out = sluice_run(0, "verify %s", g_dir);
    free(out);
}

Test(verify, label_range_option)
{
    const char *dir = g_dir;
    char *out;
    bad_kind bad[PER_SHARD] = {0};
    bad[6] = BAD_LABEL; /* label 7 */
    make_dataset(dir, 1, bad);
    out = sluice_run(0, "verify %s --label-range 0:9", dir);
    free(out);
    out = sluice_run(1, "verify %s --label-range=0:6", dir);
    assert_has(out, "record 6 @");
    free(out);
    out = sluice_run(2, "verify %s --label-range 5:1", dir);
    assert_has(out, "--label-range");
    free(out);
}

/* A shard without its index file is read all the same (TensorFlow writes
 * none): verify notes it once, and sluice index writes it back, the same
 * bytes the converter wrote. */
Test(verify, missing_index_file)
{
    const char *dir = g_dir;
    char *out, idx[1100];
    make_dataset(dir, 2, NULL);
    char *shard = shard_of(dir, 1, 2);
    snprintf(idx, sizeof idx, "%s.idx", shard);
    size_t want_len, got_len;
    uint8_t *want = tu_read_file(idx, &want_len);
    cr_assert_not_null(want);
    cr_assert_eq(unlink(idx), 0);
    out = sluice_run(0, "verify %s", dir);
    assert_has(out, "1 shard has no index file (.idx)");
    assert_has(out, "sluice index");
    assert_has(out, "ok: 20 records in 2 files");
    free(out);
    out = sluice_run(0, "verify --quiet %s", dir);
    cr_assert_eq(out[0], '\0', "--quiet printed:\n%s", out);
    free(out);
    out = sluice_run(0, "index %s", dir);
    assert_has(out, "wrote 1 index file, 1 already up to date");
    free(out);
    uint8_t *got = tu_read_file(idx, &got_len);
    cr_assert_not_null(got);
    cr_assert(got_len == want_len && !memcmp(got, want, want_len), "rewritten index differs");
    out = sluice_run(0, "verify %s", dir);
    cr_assert_null(strstr(out, "no index file"), "%s", out);
    free(out);
    free(got);
    free(want);
    free(shard);
}

Test(verify, index_disagrees_with_shard)
{
    const char *dir = g_dir;
    char *out, idx[1100];
    make_dataset(dir, 1, NULL);
    char *shard = shard_of(dir, 0, 1);
    snprintf(idx, sizeof idx, "%s.idx", shard);
    /* Drop the last entry: the index is well formed but one record short. */
    sl_index_entry *e;
    size_t n;
    cr_assert_eq(sl_index_load(idx, &e, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, PER_SHARD);
    cr_assert_eq(sl_index_write(idx, e, n - 1), SL_OK, "%s", sl_errmsg());
    free(e);
    out = sluice_run(1, "verify %s", dir);
    assert_has(out, "record 9 @");
    assert_has(out, "index");
    free(out);
    free(shard);
}

Test(verify, listed_shard_missing)
{
    const char *dir = g_dir;
    char *out, idx[1100];
    make_dataset(dir, 3, NULL);
    char *shard = shard_of(dir, 1, 3);
    snprintf(idx, sizeof idx, "%s.idx", shard);
    cr_assert_eq(unlink(shard), 0);
    cr_assert_eq(unlink(idx), 0);
    /* a data problem (exit 1), the other shards still read with --all */
    out = sluice_run(1, "verify --all %s", dir);
    assert_has(out, "train-00001-of-00003.tfrecord: cannot open");
    assert_has(out, "1 problem in 20 records");
    free(out);
    out = sluice_run(2, "inspect %s", dir);
    assert_has(out, "train-00001-of-00003.tfrecord");
    free(out);
    free(shard);
}

Test(verify, manifest_count_mismatch)
{
    const char *dir = g_dir;
    char *out;
    make_dataset(dir, 1, NULL);
    sl_manifest m;
    cr_assert_eq(sl_manifest_load(dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_split *s = sl_manifest_split_find(&m, "train");
    cr_assert_not_null(s);
    s->records = PER_SHARD + 1;
    cr_assert_eq(sl_manifest_save(dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_fini(&m);
    out = sluice_run(1, "verify %s", dir);
    assert_has(out, "dataset.json");
    assert_has(out, "11 records, found 10");
    free(out);
    /* inspect only warns */
    out = sluice_run(0, "inspect %s", dir);
    assert_has(out, "warning:");
    free(out);
}

Test(verify, all_lists_every_problem)
{
    const char *dir = g_dir;
    char *out, want[64];
    bad_kind bad[2 * PER_SHARD] = {0};
    bad[2] = BAD_PROTOBUF;
    bad[6] = BAD_NOT_JPEG;
    make_dataset(dir, 2, bad);
    char *shard1 = shard_of(dir, 1, 2);
    uint64_t off = flip_in_record(shard1, 3);

    out = sluice_run(1, "verify %s", dir);
    assert_has(out, "record 2 @");
    cr_assert_null(strstr(out, "record 6 @"), "stopped at the first problem:\n%s", out);
    free(out);

    out = sluice_run(1, "verify --all %s", dir);
    assert_has(out, "train-00000-of-00002.tfrecord: record 2 @");
    assert_has(out, "train-00000-of-00002.tfrecord: record 6 @");
    snprintf(want, sizeof want, "train-00001-of-00002.tfrecord: record 3 @ %llu",
             (unsigned long long)off);
    assert_has(out, want);
    assert_has(out, "3 problems");
    free(out);
    free(shard1);
}

Test(verify, single_file_and_plain_dir)
{
    const char *dir = g_dir;
    char *out;
    make_dataset(dir, 2, NULL);
    char *shard = shard_of(dir, 0, 2);
    out = sluice_run(0, "verify %s", shard);
    assert_has(out, "ok: 10 records in 1 file");
    free(out);
    char *mf = tu_join(dir, "dataset.json");
    cr_assert_eq(unlink(mf), 0);
    out = sluice_run(0, "verify %s %s", dir, shard);
    assert_has(out, "ok: 30 records in 3 files");
    free(out);
    free(mf);
    free(shard);
}

Test(verify, missing_path_and_usage)
{
    char *out = sluice_run(2, "verify /tmp/sluice-no-such-dataset-h5");
    assert_has(out, "/tmp/sluice-no-such-dataset-h5");
    free(out);
    out = sluice_run(2, "verify");
    free(out);
    out = sluice_run(2, "verify --bogus /tmp");
    assert_has(out, "--bogus");
    free(out);
    out = sluice_run(0, "verify --help");
    assert_has(out, "usage: sluice verify");
    assert_has(out, "example");
    free(out);
}

/* ----------------------------------------------------------------- inspect */

static cJSON *inspect_json(const char *args)
{
    char *out = sluice_run(0, "inspect --json %s", args);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "not JSON:\n%s", out);
    free(out);
    return j;
}

static double num(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsNumber(n), "no number \"%s\"", name);
    return n->valuedouble;
}

Test(inspect, json_counts_and_labels)
{
    const char *dir = g_dir;
    uint64_t bytes = make_dataset(dir, 2, NULL);
    cJSON *j = inspect_json(dir);
    cr_assert_eq(num(j, "records"), 20);
    cr_assert_eq(num(j, "shards"), 2);
    cr_assert_eq(num(j, "bytes"), (double)bytes);
    const cJSON *train =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "splits"), "train");
    cr_assert_not_null(train);
    cr_assert_eq(num(train, "records"), 20);
    cr_assert_eq(num(train, "shards"), 2);
    cr_assert_eq(num(train, "bytes"), (double)bytes);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(train, "labels");
    cr_assert_eq(cJSON_GetArraySize(labels), NCLASSES);
    /* labels g % 4 over g = 0..19: 5 each */
    for (int k = 0; k < NCLASSES; k++) {
        char key[16];
        snprintf(key, sizeof key, "%d", k);
        cr_assert_eq(num(labels, key), 5, "label %d", k);
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(train, "width");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(train, "height");
    cr_assert_eq(num(w, "min"), IMG_W);
    cr_assert_eq(num(w, "max"), IMG_W);
    cr_assert_eq(num(h, "mean"), IMG_H);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(train, "formats"), "JPEG"), 20);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "warnings")), 0);
    cJSON_Delete(j);

    /* the human table names the classes */
    char *out = sluice_run(0, "inspect %s", dir);
    assert_has(out, "20 records in 2 shards");
    assert_has(out, "bird");
    free(out);
}

Test(inspect, sizes_from_jpeg_header_when_absent)
{
    /* Records without image/height and image/width: sizes come from the JPEG. */
    const char *dir = g_dir;
    char path[1024];
    snprintf(path, sizeof path, "%s/loose.tfrecord", dir);
    sl_tfrecord_writer *w;
    sl_example_builder b;
    sl_example_builder_init(&b);
    cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = 0; i < 3; i++) {
        size_t jl;
        uint8_t *jpeg = make_jpeg(20 + 8 * i, 10 + i, i, &jl);
        sl_image_example ex = {.image = jpeg, .image_len = jl, .label = i};
        const uint8_t *data;
        size_t len;
        cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
        cr_assert_eq(sl_example_finish(&b, &data, &len), SL_OK);
        cr_assert_eq(sl_tfrecord_writer_write(w, data, len), SL_OK);
        free(jpeg);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);

    cJSON *j = inspect_json(path);
    cr_assert_eq(num(j, "records"), 3);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(j, "width"), "min"), 20);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(j, "width"), "max"), 36);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(j, "height"), "mean"), 11);
    cJSON_Delete(j);
    /* the directory (no manifest) too */
    j = inspect_json(dir);
    cr_assert_eq(num(j, "records"), 3);
    cJSON_Delete(j);
    /* no index file: not a problem (readers scan), verify notes it once */
    char *out = sluice_run(0, "verify %s", path);
    assert_has(out, "1 shard has no index file");
    assert_has(out, "ok: 3 records in 1 file");
    free(out);
}

Test(inspect, lmdb_store)
{
    const char *dir = g_dir;
    char lpath[1024];
    cr_assert_eq(sl_lmdb_path(lpath, sizeof lpath, dir, "val"), SL_OK);
    sl_lmdb_writer *w;
    sl_example_builder b;
    uint64_t bytes = 0;
    sl_example_builder_init(&b);
    cr_assert_eq(sl_lmdb_writer_open(lpath, &w), SL_OK, "%s", sl_errmsg());
    for (uint64_t g = 0; g < 7; g++) {
        const uint8_t *data;
        size_t len;
        uint8_t *jpeg;
        make_payload(&b, g, BAD_NONE, &data, &len, &jpeg);
        cr_assert_eq(sl_lmdb_writer_put(w, data, len), SL_OK, "%s", sl_errmsg());
        bytes += len;
        free(jpeg);
    }
    cr_assert_eq(sl_lmdb_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);
    sl_manifest m;
    sl_manifest_init(&m);
    m.num_classes = NCLASSES;
    sl_manifest_split sp = {.format = SL_FORMAT_LMDB, .records = 7, .shards = 1, .bytes = bytes};
    snprintf(sp.name, sizeof sp.name, "val");
    cr_assert_eq(sl_manifest_split_put(&m, &sp), SL_OK);
    cr_assert_eq(sl_manifest_save(dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_fini(&m);

    cJSON *j = inspect_json(dir);
    const cJSON *val =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "splits"), "val");
    cr_assert_not_null(val);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(val, "format")->valuestring, "lmdb");
    cr_assert_eq(num(val, "records"), 7);
    cr_assert_eq(num(val, "bytes"), (double)bytes);
    /* labels 0,1,2,3,0,1,2 */
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(val, "labels"), "0"), 2);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(val, "labels"), "3"), 1);
    cJSON_Delete(j);
    j = inspect_json(lpath); /* the store directory itself */
    cr_assert_eq(num(j, "records"), 7);
    cJSON_Delete(j);

    char *out = sluice_run(0, "verify %s", dir);
    assert_has(out, "ok: 7 records in 1 file");
    free(out);
}

Test(inspect, split_option_and_errors)
{
    const char *dir = g_dir;
    char *out;
    make_dataset(dir, 1, NULL);
    cJSON *j;
    char args[1100];
    snprintf(args, sizeof args, "%s --split train", dir);
    j = inspect_json(args);
    cr_assert_eq(num(j, "records"), PER_SHARD);
    cJSON_Delete(j);
    out = sluice_run(2, "inspect %s --split nope", dir);
    assert_has(out, "nope");
    free(out);
    out = sluice_run(2, "inspect /tmp/sluice-no-such-dataset-h5 --json");
    assert_has(out, "/tmp/sluice-no-such-dataset-h5");
    free(out);
    out = sluice_run(0, "inspect --help");
    assert_has(out, "usage: sluice inspect");
    assert_has(out, "example");
    free(out);
    out = sluice_run(2, "inspect");
    free(out);
}

/*
 * tests/interop/test_tf_interop.c - byte compatibility with real TensorFlow.
 *
 * Both directions, with TensorFlow itself (tensorflow-cpu in a virtualenv,
 * DESIGN.md section 7) rather than our own idea of its format:
 *   - shards we write (records API and `sluice convert`) are read by
 *     tests/interop/tf_read_ours.py: tf.data.TFRecordDataset (checks both
 *     CRCs), tf.io.parse_single_example with the ImageNet converter's feature
 *     spec, tf.io.decode_jpeg; it prints {"records":N,"labels":{...},...};
 *   - a shard written by tf.io.TFRecordWriter with the full ImageNet feature
 *     set (bbox float lists, synset, colorspace, ...) by
 *     tests/interop/tf_write_imagenet.py is read back with our reader and
 *     decoder and compared with the values the script wrote to OUT.json.
 *
 * SLUICE_PYTHON names the virtualenv's python (tools/dev sets it); without
 * it every test is skipped. Scripts are found through SLUICE_SOURCE_DIR.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

#define SCRIPTS SLUICE_SOURCE_DIR "/tests/interop"
/* Each python run is bounded by coreutils timeout rather than Criterion's
 * .timeout: with parallel jobs, libcriterion 2.4.1 intermittently leaks its
 * 48-byte timer record, which fails the ASan run (LeakSanitizer exit 1). */
#define PY_TIMEOUT "timeout 300 "

static const char *python_or_skip(void)
{
    const char *py = getenv("SLUICE_PYTHON");
    if (!py || !*py)
        cr_skip_test("SLUICE_PYTHON not set");
    if (access(py, X_OK) != 0)
        cr_skip_test("SLUICE_PYTHON=%s is not executable", py);
    return py;
}

/* The JSON summary line of tf_read_ours.py inside its (log-noisy) output. */
static cJSON *summary_of(const char *out)
{
    const char *p = strstr(out, "{\"bytes\":");
    cr_assert_not_null(p, "no summary line in tf_read_ours output:\n%s", out);
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    cJSON *j = cJSON_ParseWithLength(p, len);
    cr_assert_not_null(j, "bad summary line: %.*s", (int)len, p);
    return j;
}

static int64_t json_int(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsNumber(v), "JSON field %s missing or not a number", key);
    return (int64_t)v->valuedouble;
}

static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsString(v), "JSON field %s missing or not a string", key);
    return v->valuestring;
}

/* A w x h RGB JPEG with a pattern that depends on seed; caller tjFree()s. */
static unsigned char *make_jpeg(int w, int h, unsigned seed, unsigned long *len)
{
    uint8_t *px = malloc((size_t)w * (size_t)h * 3);
    cr_assert_not_null(px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            p[0] = (uint8_t)(x * 7 + seed * 31);
            p[1] = (uint8_t)(y * 5 + seed * 17);
            p[2] = (uint8_t)((x ^ y) + seed);
        }
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *jpeg = NULL;
    *len = 0;
    cr_assert_eq(tjCompress2(tj, px, w, w * 3, h, TJPF_RGB, &jpeg, len, TJSAMP_420, 90, 0), 0,
                 "tjCompress2: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    free(px);
    return jpeg;
}

/* Write `nrec` image records over `nshards` shards of split "train" in dir
 * with the records API; record i has label i % 5 and size (20 + i) x (16 + 2i).
 * Returns the sum of payload lengths. */
static uint64_t write_our_shards(const char *dir, unsigned nshards, unsigned nrec)
{
    uint64_t payload = 0;
    sl_example_builder b;
    sl_example_builder_init(&b);
    for (unsigned s = 0; s < nshards; s++) {
        char path[4096];
        cr_assert_eq(sl_shard_path(path, sizeof path, dir, "train", s, nshards), SL_OK);
        sl_tfrecord_writer *w = NULL;
        cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK, "%s",
                     sl_errmsg());
        for (unsigned i = s; i < nrec; i += nshards) {
            int width = 20 + (int)i, height = 16 + 2 * (int)i;
            unsigned long jlen;
            unsigned char *jpeg = make_jpeg(width, height, i, &jlen);
            char fname[64];
            snprintf(fname, sizeof fname, "img-%04u.jpg", i);
            sl_image_example ex = {
                .image = jpeg, .image_len = jlen, .label = (int64_t)(i % 5),
                .height = height, .width = width, .format = "JPEG", .format_len = 4,
                .filename = fname, .filename_len = strlen(fname),
            };
            cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK, "%s", sl_errmsg());
            const uint8_t *rec;
            size_t len;
            cr_assert_eq(sl_example_finish(&b, &rec, &len), SL_OK);
            cr_assert_eq(sl_tfrecord_writer_write(w, rec, len), SL_OK, "%s", sl_errmsg());
            payload += len;
            tjFree(jpeg);
        }
        cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    }
    sl_example_builder_fini(&b);
    return payload;
}

Test(tf_interop, tensorflow_reads_records_api_shards)
{
    const char *py = python_or_skip();
    char *dir = tu_tmpdir();
    const unsigned nrec = 23, nshards = 2;
    uint64_t payload = write_our_shards(dir, nshards, nrec);

    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s/tf_read_ours.py' '%s' --split train", py,
                    SCRIPTS, dir);
    cr_assert_eq(rc, 0, "tf_read_ours failed (%d):\n%s", rc, out);
    cJSON *j = summary_of(out);
    cr_expect_eq(json_int(j, "records"), nrec);
    cr_expect_eq(json_int(j, "shards"), nshards);
    cr_expect_eq(json_int(j, "bytes"), (int64_t)payload);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(j, "labels");
    cr_assert(cJSON_IsObject(labels));
    cr_expect_eq(cJSON_GetArraySize(labels), 5);
    for (int l = 0; l < 5; l++) { /* labels i % 5 over 0..22: 5,5,5,4,4 */
        char key[16];
        snprintf(key, sizeof key, "%d", l);
        cr_expect_eq(json_int(labels, key), l < 3 ? 5 : 4, "label %d", l);
    }
    cJSON_Delete(j);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

/* The positive test above would also pass if TensorFlow ignored CRCs; this
 * one shows its reader checks our framing: one flipped payload byte must be
 * reported as a corrupted record. */
Test(tf_interop, tensorflow_rejects_a_flipped_byte_in_our_shard)
{
    const char *py = python_or_skip();
    char *dir = tu_tmpdir();
    write_our_shards(dir, 1, 4);
    char path[4096];
    cr_assert_eq(sl_shard_path(path, sizeof path, dir, "train", 0, 1), SL_OK);
    size_t len = 0;
    uint8_t *data = tu_read_file(path, &len);
    cr_assert_not_null(data);
    data[len / 2] ^= 0x01;
    cr_assert_eq(tu_write_file(path, data, len), 0);
    free(data);

    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s/tf_read_ours.py' '%s' --split train", py,
                    SCRIPTS, dir);
    cr_expect_neq(rc, 0, "TensorFlow accepted a corrupted shard:\n%s", out);
    cr_expect_not_null(strstr(out, "corrupted record"), "output:\n%s", out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

/* `sluice convert` on a small folder tree (3 classes, JPEG and PNG inputs)
 * into 2 shards with TF ImageNet's label offset 1, then TensorFlow reads the
 * split. */
Test(tf_interop, tensorflow_reads_sluice_convert_output)
{
    const char *py = python_or_skip();
    char *root = tu_tmpdir();
    char *in = tu_join(root, "in");
    char *outdir = tu_join(root, "out");
    cr_assert_eq(mkdir(in, 0755), 0);
    const char *classes[3] = {"cat", "dog", "fish"};
    const int per_class[3] = {4, 6, 3};
    int total = 0;
    for (int c = 0; c < 3; c++) {
        char d[4096];
        snprintf(d, sizeof d, "%s/%s", in, classes[c]);
        cr_assert_eq(mkdir(d, 0755), 0);
        for (int k = 0; k < per_class[c]; k++) {
            unsigned long jlen;
            unsigned char *jpeg = make_jpeg(40 + 3 * k, 30 + 5 * c, (unsigned)(c * 10 + k), &jlen);
            char f[4200];
            snprintf(f, sizeof f, "%s/img%02d.jpg", d, k);
            cr_assert_eq(tu_write_file(f, jpeg, jlen), 0);
            tjFree(jpeg);
            total++;
        }
    }
    /* one PNG (re-encoded to JPEG by the converter) in class "dog" */
    uint8_t px[24 * 18 * 3];
    for (size_t k = 0; k < sizeof px; k++)
        px[k] = (uint8_t)(k * 13);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = 24;
    img.height = 18;
    img.format = PNG_FORMAT_RGB;
    char png_path[4200];
    snprintf(png_path, sizeof png_path, "%s/dog/zz.png", in);
    cr_assert(png_image_write_to_file(&img, png_path, 0, px, 0, NULL), "png write");
    total++;

    char *out = NULL;
    int rc = tu_run(&out, "'%s' convert --from folder '%s' --out '%s' --name train --shards 2 "
                    "--label-offset 1 --no-fsync --quiet",
                    tu_sluice(), in, outdir);
    cr_assert_eq(rc, 0, "sluice convert failed (%d):\n%s", rc, out);
    free(out);

    rc = tu_run(&out, PY_TIMEOUT "'%s' '%s/tf_read_ours.py' '%s' --split train", py, SCRIPTS,
                outdir);
    cr_assert_eq(rc, 0, "tf_read_ours failed (%d):\n%s", rc, out);
    cJSON *j = summary_of(out);
    cr_expect_eq(json_int(j, "records"), total);
    cr_expect_eq(json_int(j, "shards"), 2);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(j, "labels");
    cr_expect_eq(cJSON_GetArraySize(labels), 3);
    for (int c = 0; c < 3; c++) { /* classes sorted by name -> 0..2, +1 offset */
        char key[16];
        snprintf(key, sizeof key, "%d", c + 1);
        cr_expect_eq(json_int(labels, key), per_class[c] + (c == 1), "label %d", c);
    }
    cJSON_Delete(j);
    free(out);
    tu_rmrf(root);
    free(in);
    free(outdir);
    free(root);
}

static float feature_float_at(const uint8_t *rec, size_t len, const char *name, size_t i,
                              size_t want_n)
{
    sl_feature_view f;
    cr_assert_eq(sl_example_find(rec, len, name, &f), SL_OK, "%s: %s", name, sl_errmsg());
    cr_assert_eq(f.kind, SL_FEATURE_FLOAT, "%s", name);
    size_t n = 0;
    cr_assert_eq(sl_feature_count(&f, &n), SL_OK);
    cr_assert_eq(n, want_n, "%s: %zu values, want %zu", name, n, want_n);
    float v;
    cr_assert_eq(sl_feature_float(&f, i, &v), SL_OK, "%s[%zu]", name, i);
    return v;
}

static void expect_bytes(const uint8_t *rec, size_t len, const char *name, const char *want)
{
    sl_feature_view f;
    cr_assert_eq(sl_example_find(rec, len, name, &f), SL_OK, "%s: %s", name, sl_errmsg());
    const uint8_t *d;
    size_t n;
    cr_assert_eq(sl_feature_bytes(&f, 0, &d, &n), SL_OK, "%s", name);
    cr_expect(n == strlen(want) && !memcmp(d, want, n), "%s: got '%.*s', want '%s'", name,
              (int)n, (const char *)d, want);
}

static int64_t feature_int_at(const uint8_t *rec, size_t len, const char *name, size_t i)
{
    sl_feature_view f;
    cr_assert_eq(sl_example_find(rec, len, name, &f), SL_OK, "%s: %s", name, sl_errmsg());
    int64_t v;
    cr_assert_eq(sl_feature_int64(&f, i, &v), SL_OK, "%s[%zu]", name, i);
    return v;
}

Test(tf_interop, we_read_a_tensorflow_imagenet_shard)
{
    const char *py = python_or_skip();
    char *dir = tu_tmpdir();
    char *shard = tu_join(dir, "train-00000-of-00001.tfrecord");
    const int nrec = 9;
    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s/tf_write_imagenet.py' '%s' %d", py, SCRIPTS,
                    shard, nrec);
    cr_assert_eq(rc, 0, "tf_write_imagenet failed (%d):\n%s", rc, out);
    free(out);

    char json_path[4200];
    snprintf(json_path, sizeof json_path, "%s.json", shard);
    size_t jlen = 0;
    char *jtext = (char *)tu_read_file(json_path, &jlen);
    cr_assert_not_null(jtext);
    cJSON *root = cJSON_ParseWithLength(jtext, jlen);
    cr_assert_not_null(root, "bad %s", json_path);
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(root, "records");
    cr_assert_eq(cJSON_GetArraySize(want), nrec);

    tjhandle tj = tjInitDecompress();
    cr_assert_not_null(tj);
    sl_tfrecord_reader *r = NULL;
    cr_assert_eq(sl_tfrecord_reader_open(shard, &r), SL_OK, "%s", sl_errmsg());
    const uint8_t *rec;
    size_t len;
    int i = 0;
    uint64_t *sizes = calloc((size_t)nrec, sizeof *sizes);
    cr_assert_not_null(sizes);
    for (; (rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK; i++) {
        cr_assert_lt(i, nrec, "more records than TensorFlow wrote");
        sizes[i] = len;
        const cJSON *w = cJSON_GetArrayItem(want, i);
        sl_image_example ex;
        cr_assert_eq(sl_image_example_decode(rec, len, &ex), SL_OK, "record %d: %s", i,
                     sl_errmsg());
        cr_expect_eq(ex.label, json_int(w, "label"), "record %d", i);
        cr_expect_eq(ex.height, json_int(w, "height"), "record %d", i);
        cr_expect_eq(ex.width, json_int(w, "width"), "record %d", i);
        const char *fn = json_str(w, "filename"), *text = json_str(w, "text");
        cr_expect(ex.filename_len == strlen(fn) && !memcmp(ex.filename, fn, ex.filename_len),
                  "record %d: filename '%.*s' want '%s'", i, (int)ex.filename_len, ex.filename,
                  fn);
        cr_expect(ex.text_len == strlen(text) && !memcmp(ex.text, text, ex.text_len),
                  "record %d: text '%.*s' want '%s'", i, (int)ex.text_len, ex.text, text);
        cr_expect(ex.format_len == 4 && !memcmp(ex.format, "JPEG", 4), "record %d", i);
        cr_expect_eq((int64_t)ex.image_len, json_int(w, "encoded_len"), "record %d", i);
        expect_bytes(rec, len, "image/class/synset", json_str(w, "synset"));
        expect_bytes(rec, len, "image/colorspace", "RGB");
        cr_expect_eq(feature_int_at(rec, len, "image/channels", 0), 3);

        /* bbox lists: floats bit-exact against the float32 values TF stored */
        static const char *const keys[4] = {"xmin", "xmax", "ymin", "ymax"};
        size_t nbox = (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(w, "xmin"));
        cr_expect_eq(nbox, (size_t)(1 + i % 3));
        for (int k = 0; k < 4; k++) {
            char name[64];
            snprintf(name, sizeof name, "image/object/bbox/%s", keys[k]);
            const cJSON *arr = cJSON_GetObjectItemCaseSensitive(w, keys[k]);
            for (size_t b = 0; b < nbox; b++) {
                float got = feature_float_at(rec, len, name, b, nbox);
                float exp = (float)cJSON_GetArrayItem(arr, (int)b)->valuedouble;
                cr_expect(got == exp, "record %d %s[%zu]: %.9g want %.9g", i, name, b, got, exp);
            }
        }
        for (size_t b = 0; b < nbox; b++)
            cr_expect_eq(feature_int_at(rec, len, "image/object/bbox/label", b), ex.label);

        /* the JPEG TensorFlow encoded decodes to the size the features state */
        int jw, jh, sub, cs;
        cr_assert_eq(tjDecompressHeader3(tj, ex.image, (unsigned long)ex.image_len, &jw, &jh,
                                         &sub, &cs),
                     0, "record %d: %s", i, tjGetErrorStr2(tj));
        cr_expect_eq(jw, ex.width);
        cr_expect_eq(jh, ex.height);
        uint8_t *px = malloc((size_t)jw * (size_t)jh * 3);
        cr_assert_not_null(px);
        cr_expect_eq(tjDecompress2(tj, ex.image, (unsigned long)ex.image_len, px, jw, jw * 3, jh,
                                   TJPF_RGB, 0),
                     0, "record %d: %s", i, tjGetErrorStr2(tj));
        free(px);
    }
    cr_expect_eq(rc, SL_EOF, "%s", sl_errmsg());
    cr_expect_eq(i, nrec);
    sl_tfrecord_reader_close(r);

    /* Index of TF's file: contiguous entries covering the file, and each one
     * reads back through sl_tfrecord_read_at. */
    sl_index_entry *idx = NULL;
    size_t n = 0;
    cr_assert_eq(sl_index_build(shard, &idx, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, (size_t)nrec);
    struct stat st;
    cr_assert_eq(stat(shard, &st), 0);
    int fd = open(shard, O_RDONLY);
    cr_assert_geq(fd, 0);
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
        cr_expect_eq(idx[k].offset, at, "entry %zu", k);
        cr_expect_eq(idx[k].size, sizes[k] + SL_TFRECORD_OVERHEAD, "entry %zu", k);
        at = idx[k].offset + idx[k].size;
        uint8_t *buf = malloc(idx[k].size);
        cr_assert_not_null(buf);
        size_t got = 0;
        cr_expect_eq(sl_tfrecord_read_at(fd, idx[k].offset, idx[k].size, buf, idx[k].size, &got,
                                         shard, k),
                     SL_OK, "%s", sl_errmsg());
        cr_expect_eq(got, sizes[k]);
        free(buf);
    }
    cr_expect_eq(at, (uint64_t)st.st_size);
    close(fd);
    free(idx);
    free(sizes);
    tjDestroy(tj);
    cJSON_Delete(root);
    free(jtext);
    tu_rmrf(dir);
    free(shard);
    free(dir);
}

/* A directory of shards that TensorFlow wrote, named as its ImageNet
 * converter names them (no suffix, no index files, no dataset.json, labels
 * 1..K): verified, indexed and trained on as it is, its validation split
 * evaluated. (tests/tools/test_tf_layout.c does the same everywhere, on
 * shards written here.) */
Test(tf_interop, we_train_on_a_tensorflow_imagenet_directory)
{
    const char *py = python_or_skip();
    char *dir = tu_tmpdir(), *out = NULL;
    static const struct { const char *name; int n, first; } shards[] = {
        {"train-00000-of-00002", 12, 0},
        {"train-00001-of-00002", 12, 12},
        {"validation-00000-of-00001", 8, 100},
    };
    for (int s = 0; s < 3; s++) {
        int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s/tf_write_imagenet.py' '%s/%s' %d --classes 5 "
                        "--first %d --no-json", py, SCRIPTS, dir, shards[s].name, shards[s].n,
                        shards[s].first);
        cr_assert_eq(rc, 0, "tf_write_imagenet failed (%d):\n%s", rc, out);
        free(out);
        out = NULL;
    }
    int rc = tu_run(&out, "%s verify %s --label-range 1:5 2>&1", tu_sluice(), dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "ok: 32 records in 3 files") && strstr(out, "3 shards have no index"),
              "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "cd %s && %s train --data %s --classes 5 --label-offset 1 --image-size 16 "
                "--batch 8 --width 4 --epochs 1 --threads 1 --ckpt-dir ck 2>&1", dir,
                tu_sluice(), dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "evaluating split 'validation'") &&
              strstr(out, "eval  epoch 1 step 3: top1") && strstr(out, "(8 images"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "%s index %s 2>&1", tu_sluice(), dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "wrote 3 index files"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "%s eval --data %s --checkpoint %s/ck/ckpt-000000003.safetensors "
                "--label-offset 1 --threads 1 --json 2>&1", tu_sluice(), dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"split\":\"validation\"") && strstr(out, "\"images\":8") &&
              !strstr(out, "no index file"), "%s", out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

/* tests/interop/tfds_write.py ARGS: the folder tfds prepared into dir. */
static void tfds_prepare(const char *py, const char *args, char *dir, size_t cap)
{
    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s/tfds_write.py' %s 2>&1", py, SCRIPTS, args);
    cr_assert_eq(rc, 0, "tfds_write %s failed (%d):\n%s", args, rc, out);
    const char *p = strstr(out, "{\"dir\": \"");
    cr_assert_not_null(p, "%s", out);
    snprintf(dir, cap, "%.*s", (int)strcspn(p + 9, "\""), p + 9);
    free(out);
}

/* `sluice train` for an epoch on data, with no --classes, in root: it
 * evaluates the test split, of the images `evaluated` says. */
static void train_evaluates_test(const char *root, const char *data, int size, int batch,
                                 const char *evaluated)
{
    char *out = NULL;
    int rc = tu_run(&out, "cd %s && %s train --data %s --image-size %d --batch %d --width 4 "
                    "--epochs 1 --threads 1 --ckpt-dir ck 2>&1", root, tu_sluice(), data, size,
                    batch);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "evaluating split 'test'") && strstr(out, evaluated), "%s", out);
    free(out);
}

/* A TensorFlow Datasets folder that tfds itself prepared
 * (tests/interop/tfds_write.py: a GeneratorBasedBuilder with TFDS's image
 * classification features over a tree of JPEGs; shards
 * snaps-SPLIT.tfrecord-*-of-*, features.json, label.labels.txt): sluice
 * reads its splits, its classes and their names without a dataset.json,
 * every record gives the JPEG the builder was handed byte for byte and its
 * class folder's label, and `sluice train` runs on it with no --classes and
 * evaluates its test split. */
Test(tf_interop, we_train_on_a_tensorflow_datasets_folder)
{
    const char *py = python_or_skip();
    static const char *const classes[] = {"ant", "bee", "cat"};
    char *root = tu_tmpdir(), *out = NULL, path[4400];
    unsigned seed = 0;
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 3; c++) {
            snprintf(path, sizeof path, "%s/src/%s/%s", root, s ? "test" : "train", classes[c]);
            cr_assert_eq(tu_run(&out, "mkdir -p '%s'", path), 0);
            free(out);
            for (int i = 0; i < (s ? 2 : 4); i++, seed++) {
                unsigned long jlen;
                unsigned char *jpeg = make_jpeg(24 + (int)seed, 20 + 2 * (int)seed, seed, &jlen);
                char f[4500];
                snprintf(f, sizeof f, "%s/%s-%02u.jpg", path, classes[c], seed);
                cr_assert_eq(tu_write_file(f, jpeg, jlen), 0);
                tjFree(jpeg);
            }
        }
    char dir[4096], args[4200];
    snprintf(args, sizeof args, "'%s/src' '%s/tfds'", root, root);
    tfds_prepare(py, args, dir, sizeof dir);
    int rc;

    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.manifest.num_classes, 3);
    cr_assert_not_null(ds.manifest.class_names);
    for (int c = 0; c < 3; c++)
        cr_assert_str_eq(ds.manifest.class_names[c], classes[c]);
    const sl_dataset_split *tr = sl_dataset_split_find(&ds, "train");
    cr_assert(tr && sl_dataset_split_find(&ds, "test"), "splits of %s", dir);
    cr_assert_str_eq(sl_dataset_eval_split(&ds), "test");
    int seen = 0;
    for (size_t f = 0; f < tr->nfiles; f++) {
        sl_tfrecord_reader *r = NULL;
        const uint8_t *rec;
        size_t len;
        cr_assert_eq(sl_tfrecord_reader_open(tr->files[f], &r), SL_OK, "%s", sl_errmsg());
        while ((rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK) {
            sl_image_example ex;
            cr_assert_eq(sl_image_example_decode(rec, len, &ex), SL_OK, "%s", sl_errmsg());
            cr_assert(ex.filename_len > 4 && ex.filename_len < 64);
            char name[64], src[4600];
            snprintf(name, sizeof name, "%.*s", (int)ex.filename_len, ex.filename);
            int c = name[0] == 'a' ? 0 : name[0] == 'b' ? 1 : 2;
            cr_assert_eq(ex.label, c, "%s", name);
            snprintf(src, sizeof src, "%s/src/train/%s/%s", root, classes[c], name);
            size_t slen = 0;
            uint8_t *want = tu_read_file(src, &slen);
            cr_assert_not_null(want, "%s", src);
            cr_assert(slen == ex.image_len && !memcmp(want, ex.image, slen), "%s: bytes", name);
            free(want);
            seen++;
        }
        cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
        sl_tfrecord_reader_close(r);
    }
    cr_assert_eq(seen, 12);
    sl_dataset_fini(&ds);

    rc = tu_run(&out, "%s verify %s 2>&1", tu_sluice(), dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "ok: 18 records in 2 files"), "%s", out);
    free(out);
    rc = tu_run(&out, "%s inspect %s 2>&1", tu_sluice(), dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "(features.json: 3 classes)") && strstr(out, "bee"), "%s", out);
    free(out);
    train_evaluates_test(root, dir, 16, 4, "(6 images");
    tu_rmrf(root);
    free(root);
}

/* A TensorFlow Datasets set stored as PNG, as tfds keeps mnist
 * (tfds_write.py --png: Image of shape (28, 28, 1), ClassLabel of 10, no
 * names): the pipeline refuses it by record, `sluice convert --from
 * tfrecord` re-encodes its train and test splits into JPEG shards whose
 * pixels are tfds's (within JPEG's error at quality 95), labels and file
 * names kept, and `sluice train` runs on those. */
Test(tf_interop, we_convert_a_tensorflow_datasets_png_set)
{
    const char *py = python_or_skip();
    enum { N = 24, PX = 28 * 28 };
    char *root = tu_tmpdir(), *out = NULL, dir[4096], *conv = tu_join(root, "conv"), args[4200];
    snprintf(args, sizeof args, "--png %d '%s/tfds'", N, root);
    tfds_prepare(py, args, dir, sizeof dir);
    int rc;

    rc = tu_run(&out, "%s verify %s 2>&1", tu_sluice(), dir);
    cr_assert_neq(rc, 0, "%s", out);
    cr_assert(strstr(out, "is PNG, not JPEG"), "%s", out);
    free(out);
    for (int s = 0; s < 2; s++) {
        rc = tu_run(&out, "%s convert --from tfrecord %s --out %s --name %s --no-shuffle "
                    "--no-fsync 2>&1", tu_sluice(), dir, conv, s ? "test" : "train");
        cr_assert_eq(rc, 0, "%s", out);
        cr_assert(strstr(out, s ? "12 inputs -> 12 records" : "24 inputs -> 24 records"), "%s",
                  out);
        free(out);
    }
    char raw[4200], shard[4096];
    snprintf(raw, sizeof raw, "%s/tfds/digits-train.raw", root);
    size_t rlen = 0;
    uint8_t *want = tu_read_file(raw, &rlen);
    cr_assert(want && rlen == (size_t)N * PX, "%s", raw);
    cr_assert_eq(sl_shard_path(shard, sizeof shard, conv, "train", 0, 1), SL_OK);
    sl_tfrecord_reader *r = NULL;
    cr_assert_eq(sl_tfrecord_reader_open(shard, &r), SL_OK, "%s", sl_errmsg());
    tjhandle tj = tjInitDecompress();
    const uint8_t *rec;
    size_t len;
    int seen = 0;
    while ((rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK) {
        sl_image_example ex;
        cr_assert_eq(sl_image_example_decode(rec, len, &ex), SL_OK, "%s", sl_errmsg());
        char num[16];
        snprintf(num, sizeof num, "%.*s", (int)(ex.filename_len < 15 ? ex.filename_len : 15),
                 ex.filename);
        int i = atoi(num);
        cr_assert(i >= 0 && i < N, "file name %s", num);
        cr_assert_eq(ex.label, i % 10, "image %d", i);
        uint8_t got[PX * 3];
        cr_assert_eq(tjDecompress2(tj, ex.image, ex.image_len, got, 28, 0, 28, TJPF_RGB, 0), 0,
                     "image %d: %s", i, tjGetErrorStr2(tj));
        int worst = 0;
        for (int k = 0; k < PX * 3; k++) {
            int d = abs((int)got[k] - (int)want[(size_t)i * PX + k / 3]);
            worst = d > worst ? d : worst;
        }
        cr_assert_leq(worst, 6, "image %d: a pixel off by %d", i, worst);
        seen++;
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(seen, N);
    sl_tfrecord_reader_close(r);
    tjDestroy(tj);
    free(want);

    train_evaluates_test(root, conv, 28, 8, "(12 images");
    free(conv);
    tu_rmrf(root);
    free(root);
}

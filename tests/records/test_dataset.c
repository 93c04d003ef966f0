/*
 * tests/records/test_dataset.c - records/dataset.c (sl_dataset_resolve) and
 * sl_dataset_index: TensorFlow's ImageNet layout made here from nothing
 * (shards train-0000K-of-00002 and validation-00000-of-00001 without a
 * suffix, without index files, without dataset.json, among decoys), a glob,
 * one suffix-less file, and the index files written for them.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

static char *g_dir;

static void dir_init(void) { g_dir = tu_tmpdir(); }

static void dir_fini(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
    g_dir = NULL;
}

TestSuite(dataset, .init = dir_init, .fini = dir_fini);

/* A TFRecord file at dir/name with n records of 10 + 7*i bytes; no index. */
static char *write_shard(const char *name, int n)
{
    char *p = tu_join(g_dir, name);
    sl_tfrecord_writer *w;
    uint8_t buf[256];
    cr_assert_eq(sl_tfrecord_writer_open(p, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = 0; i < n; i++) {
        memset(buf, 'a' + i, sizeof buf);
        cr_assert_eq(sl_tfrecord_writer_write(w, buf, 10 + 7 * (size_t)i), SL_OK);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    return p;
}

static void touch(const char *name)
{
    char *p = tu_join(g_dir, name);
    cr_assert_eq(tu_write_file(p, "x", 1), 0);
    free(p);
}

static char *idx_of(const char *shard)
{
    char *p = malloc(strlen(shard) + 5);
    cr_assert_not_null(p);
    sprintf(p, "%s.idx", shard);
    return p;
}

static void assert_file(const char *got, const char *name)
{
    char *want = tu_join(g_dir, name);
    cr_assert_str_eq(got, want);
    free(want);
}

/* The layout of TensorFlow's build_imagenet_data.py, with decoys. */
static void make_tf_layout(void)
{
    free(write_shard("train-00001-of-00002", 3)); /* out of order on purpose */
    free(write_shard("train-00000-of-00002", 2));
    free(write_shard("validation-00000-of-00001", 4));
    touch("README");
    touch("synsets.txt");
    touch("train-00002-of-00003.tmp");
    touch("train-x-of-00002");
    char *sub = tu_join(g_dir, "train-00009-of-00010"); /* a folder, not a shard */
    cr_assert_eq(mkdir(sub, 0755), 0);
    free(sub);
}

Test(dataset, tensorflow_directory)
{
    make_tf_layout();
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.kind, SL_DATASET_DIR);
    cr_assert_not(ds.remote, "a local folder is not remote");
    cr_assert_not(ds.has_manifest);
    cr_assert_eq(ds.nsplits, 2);
    const sl_dataset_split *tr = sl_dataset_split_find(&ds, "train");
    const sl_dataset_split *va = sl_dataset_split_find(&ds, "validation");
    cr_assert(tr && va);
    cr_assert_eq(tr->nfiles, 2);
    assert_file(tr->files[0], "train-00000-of-00002");
    assert_file(tr->files[1], "train-00001-of-00002");
    cr_assert_eq(tr->unindexed, 2);
    cr_assert_eq(va->nfiles, 1);
    cr_assert_eq(va->unindexed, 1);
    cr_assert_str_eq(sl_dataset_eval_split(&ds), "validation");
    cr_assert_eq(sl_dataset_label_offset(&ds), 0);

    const sl_dataset_split *s;
    cr_assert_eq(sl_dataset_reader_split(&ds, "train", &s), SL_OK);
    cr_assert_eq(s, tr);
    cr_assert_eq(sl_dataset_reader_split(&ds, "test", &s), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "no split 'test'") && strstr(sl_errmsg(), "train, validation"),
              "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    sl_dataset_fini(&ds); /* twice is fine */

    cr_assert_eq(sl_dataset_resolve(g_dir, "validation", &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.nsplits, 1);
    cr_assert_str_eq(ds.splits[0].name, "validation");
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve(g_dir, "test", &ds), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "train, validation"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);

    /* both eval names: test wins */
    free(write_shard("test-00000-of-00001.tfrecord", 1));
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_str_eq(sl_dataset_eval_split(&ds), "test");
    sl_dataset_fini(&ds);
}

/* A TensorFlow Datasets folder (DATA_DIR/NAME/VERSION as tfds'
 * download_and_prepare leaves it; tests/interop/test_tfds.c reads one
 * that tfds itself wrote): splits by "NAME-SPLIT.tfrecord-*-of-*", the
 * classes from features.json, their names from label.labels.txt. */
static const char tfds_features[] =
    "{\"featuresDict\": {\"features\": {"
    "\"image\": {\"pythonClassName\": \"tensorflow_datasets.core.features.image_feature.Image\"},"
    "\"label\": {\"classLabel\": {\"numClasses\": \"3\"}, \"pythonClassName\": "
    "\"tensorflow_datasets.core.features.class_label_feature.ClassLabel\"}}}}";

Test(dataset, tensorflow_datasets_folder)
{
    free(write_shard("snaps-train.tfrecord-00001-of-00002", 3));
    free(write_shard("snaps-train.tfrecord-00000-of-00002", 2));
    free(write_shard("snaps-test.tfrecord-00000-of-00001", 1));
    touch("dataset_info.json");
    char *fj = tu_join(g_dir, "features.json"), *lt = tu_join(g_dir, "label.labels.txt");
    cr_assert_eq(tu_write_file(fj, tfds_features, strlen(tfds_features)), 0);
    cr_assert_eq(tu_write_file(lt, "cat\ndog\nfox\n", 12), 0);

    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_not(ds.has_manifest);
    cr_assert_eq(ds.nsplits, 2);
    const sl_dataset_split *tr = sl_dataset_split_find(&ds, "train");
    cr_assert(tr && sl_dataset_split_find(&ds, "test"));
    cr_assert_eq(tr->nfiles, 2);
    assert_file(tr->files[0], "snaps-train.tfrecord-00000-of-00002");
    cr_assert_str_eq(sl_dataset_eval_split(&ds), "test");
    cr_assert_eq(ds.manifest.num_classes, 3);
    cr_assert_str_eq(ds.classes_path, fj);
    cr_assert(ds.manifest.class_names);
    cr_assert_str_eq(ds.manifest.class_names[0], "cat");
    cr_assert_str_eq(ds.manifest.class_names[2], "fox");
    sl_dataset_fini(&ds);

    /* the listing of a split by name, as readers of a manifest-less folder do */
    char **paths;
    size_t n;
    cr_assert_eq(sl_dataset_shards(g_dir, "train", &paths, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 2);
    sl_paths_free(paths, n);

    /* names that disagree with the count are left out, the count kept */
    cr_assert_eq(tu_write_file(lt, "cat\ndog\n", 8), 0);
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.manifest.num_classes, 3);
    cr_assert_null(ds.manifest.class_names);
    sl_dataset_fini(&ds);

    /* no features.json (older tfds): the names file gives the count */
    cr_assert_eq(unlink(fj), 0);
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.manifest.num_classes, 2);
    cr_assert_str_eq(ds.classes_path, lt);
    sl_dataset_fini(&ds);

    /* a features.json that gives no count is named, not guessed past */
    static const char bad[] = "{\"featuresDict\": {\"features\": {\"label\": "
                              "{\"classLabel\": {\"numClasses\": \"-4\"}}}}}";
    cr_assert_eq(tu_write_file(fj, bad, strlen(bad)), 0);
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "features.json") && strstr(sl_errmsg(), "numClasses"), "%s",
              sl_errmsg());
    sl_dataset_fini(&ds);

    /* nothing of TFDS's: no classes, as for any TFRecord shards */
    cr_assert_eq(unlink(fj), 0);
    cr_assert_eq(unlink(lt), 0);
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.manifest.num_classes, 0);
    cr_assert_null(ds.classes_path);
    sl_dataset_fini(&ds);
    free(fj);
    free(lt);
}

Test(dataset, glob_and_single_file)
{
    make_tf_layout();
    char *pat = tu_join(g_dir, "train-0*-of-0000[2]*");
    char *idx = tu_join(g_dir, "train-00000-of-00002.idx");
    cr_assert_eq(tu_write_file(idx, "0 26\n0 0\n", 9), 0); /* a (bad) index: not a shard */
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(pat, "validation", &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.kind, SL_DATASET_GLOB);
    cr_assert_eq(ds.nsplits, 1);
    cr_assert_str_eq(ds.splits[0].name, "train"); /* the glob chose, not only_split */
    cr_assert_eq(ds.splits[0].nfiles, 2, "%zu", ds.splits[0].nfiles); /* not the .idx */
    assert_file(ds.splits[0].files[0], "train-00000-of-00002");
    assert_file(ds.splits[0].files[1], "train-00001-of-00002");
    cr_assert_eq(ds.splits[0].unindexed, 1);
    cr_assert_str_eq(ds.dir, g_dir);
    const sl_dataset_split *s;
    cr_assert_eq(sl_dataset_reader_split(&ds, "test", &s), SL_OK, "%s", sl_errmsg());
    sl_dataset_fini(&ds);

    /* matches of two splits: one split "*" */
    char *pat2 = tu_join(g_dir, "*-0000[01]-of-*");
    cr_assert_eq(sl_dataset_resolve(pat2, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_str_eq(ds.splits[0].name, "*");
    cr_assert_eq(ds.splits[0].nfiles, 3);
    sl_dataset_fini(&ds);
    /* a glob that matches a folder is refused; one that matches nothing too */
    char *pat3 = tu_join(g_dir, "train-0000?-of-000?0");
    cr_assert_eq(sl_dataset_resolve(pat3, NULL, &ds), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "not a shard file"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    char *pat4 = tu_join(g_dir, "nothing-*");
    cr_assert_eq(sl_dataset_resolve(pat4, NULL, &ds), SL_ENOENT);
    sl_dataset_fini(&ds);

    /* one suffix-less shard */
    char *one = tu_join(g_dir, "validation-00000-of-00001");
    cr_assert_eq(sl_dataset_resolve(one, "train", &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.kind, SL_DATASET_FILE);
    cr_assert_str_eq(ds.splits[0].name, "validation");
    cr_assert_eq(ds.splits[0].nfiles, 1);
    sl_dataset_fini(&ds);

    /* a folder of nothing sluice reads */
    char *empty = tu_join(g_dir, "train-00009-of-00010");
    cr_assert_eq(sl_dataset_resolve(empty, NULL, &ds), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "NAME-NNNNN-of-NNNNN"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    free(empty), free(one), free(pat4), free(pat3), free(pat2), free(pat), free(idx);
}

/* A PyTorch user's ImageFolder tree, or a folder of photos, given as data:
 * the error says how to make shards of it (the files' contents are not
 * read: the names suffice); a folder of other files gets the plain error. */
Test(dataset, a_folder_of_images_names_convert)
{
    sl_dataset ds;
    char *tree = tu_join(g_dir, "photos"), *cls = tu_join(tree, "tabby"),
         *other = tu_join(g_dir, "notes");
    cr_assert_eq(tu_run(NULL, "mkdir -p '%s' '%s' && touch '%s/IMG_0001.JPG' '%s/b.png' "
                        "'%s/readme.txt'", cls, other, cls, cls, other), 0);
    cr_assert_eq(sl_dataset_resolve(tree, NULL, &ds), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "it holds folders of images") &&
                  strstr(sl_errmsg(), "sluice convert --from folder ") &&
                  strstr(sl_errmsg(), "--name train"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve(cls, NULL, &ds), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "it holds images: `sluice convert --from folder DIR` takes "
                     "them in class folders"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve(other, NULL, &ds), SL_ENOENT);
    cr_assert(!strstr(sl_errmsg(), "images"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    free(tree), free(cls), free(other);
}

/* sl_dataset_index writes what sl_index_build finds, atomically, for the
 * shards without an index or with a stale one, and keeps the right ones. */
Test(dataset, index_files_written)
{
    make_tf_layout();
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    size_t written = 0, kept = 0;
    cr_assert_eq(sl_dataset_index(&ds, 0, NULL, NULL, &written, &kept), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(written, 3);
    cr_assert_eq(kept, 0);
    for (size_t i = 0; i < ds.nsplits; i++)
        for (size_t k = 0; k < ds.splits[i].nfiles; k++) {
            char *idx = idx_of(ds.splits[i].files[k]);
            sl_index_entry *a, *b;
            size_t na, nb;
            cr_assert_eq(sl_index_load(idx, &a, &na), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(sl_index_build(ds.splits[i].files[k], &b, &nb), SL_OK);
            cr_assert_eq(na, nb);
            cr_assert(!memcmp(a, b, na * sizeof *a));
            free(a), free(b), free(idx);
        }
    /* DALI's text for the 2-record shard: records of 10 and 17 bytes */
    size_t len;
    char *idx0 = tu_join(g_dir, "train-00000-of-00002.idx");
    uint8_t *text = tu_read_file(idx0, &len);
    cr_assert_not_null(text);
    cr_assert_eq(len, strlen("0 26\n26 33\n"));
    cr_assert(!memcmp(text, "0 26\n26 33\n", len), "%.*s", (int)len, text);
    free(text);
    sl_dataset_fini(&ds);

    /* now indexed; a stale index (one entry short) is rewritten */
    cr_assert_eq(tu_write_file(idx0, "0 26\n", 5), 0);
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_dataset_split_find(&ds, "train")->unindexed, 0);
    cr_assert_eq(sl_dataset_index(&ds, 0, NULL, NULL, &written, &kept), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(written, 1);
    cr_assert_eq(kept, 2);
    text = tu_read_file(idx0, &len);
    cr_assert(text && len == 11 && !memcmp(text, "0 26\n26 33\n", 11));
    free(text);
    cr_assert_eq(sl_dataset_index(&ds, 1, NULL, NULL, &written, &kept), SL_OK);
    cr_assert_eq(written, 3);
    cr_assert_eq(kept, 0);
    sl_dataset_fini(&ds);
    char *tmp = tu_join(g_dir, "train-00000-of-00002.idx.tmp");
    cr_assert_neq(access(tmp, F_OK), 0, "a temporary file was left behind");

    /* a damaged shard stops it, naming file and record */
    char *bad = write_shard("broken-00000-of-00001", 2);
    size_t blen;
    uint8_t *bytes = tu_read_file(bad, &blen);
    bytes[blen - 20] ^= 1;
    cr_assert_eq(tu_write_file(bad, bytes, blen), 0);
    cr_assert_eq(sl_dataset_resolve(bad, NULL, &ds), SL_OK);
    cr_assert_eq(sl_dataset_index(&ds, 0, NULL, NULL, &written, &kept), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), bad) && strstr(sl_errmsg(), "record 1"), "%s", sl_errmsg());
    char *badidx = tu_join(g_dir, "broken-00000-of-00001.idx");
    cr_assert_neq(access(badidx, F_OK), 0, "an index was written for a damaged shard");
    sl_dataset_fini(&ds);
    free(badidx), free(bytes), free(bad), free(tmp), free(idx0);
}

/* dataset.json's splits come first and keep their counts; a shard group it
 * does not list (converted by another tool beside them) is a split too, loose
 * files are not. */
Test(dataset, manifest_and_unlisted_splits)
{
    free(write_shard("train-00000-of-00001.tfrecord", 2));
    free(write_shard("validation-00000-of-00001", 3));
    free(write_shard("stray.tfrecord", 1));
    sl_manifest m;
    sl_manifest_init(&m);
    sl_manifest_split tr = {.name = "train", .format = SL_FORMAT_TFRECORD, .records = 2,
                            .shards = 1};
    cr_assert_eq(sl_manifest_split_put(&m, &tr), SL_OK);
    m.label_offset = 1;
    m.num_classes = 7;
    cr_assert_eq(sl_manifest_save(g_dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_fini(&m);
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.kind, SL_DATASET_MANIFEST);
    cr_assert(ds.counts_listed);
    cr_assert_eq(ds.nsplits, 2);
    cr_assert_str_eq(ds.splits[0].name, "train");
    cr_assert_not_null(ds.splits[0].listed);
    cr_assert_str_eq(ds.splits[1].name, "validation");
    cr_assert_null(ds.splits[1].listed);
    cr_assert_eq(sl_dataset_label_offset(&ds), 1);
    cr_assert_str_eq(sl_dataset_eval_split(&ds), "validation");
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve(g_dir, "nope", &ds), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "dataset.json has: train, validation"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
    /* a glob beside it takes the label offset, not the counts */
    char *pat = tu_join(g_dir, "validation-*");
    cr_assert_eq(sl_dataset_resolve(pat, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert(ds.has_manifest && !ds.counts_listed);
    cr_assert_eq(sl_dataset_label_offset(&ds), 1);
    sl_dataset_fini(&ds);
    free(pat);
}

/* tests/fuzz/fuzz_manifest.c's finding (issue 16): a 200-byte dataset.json
 * claiming 303 million shards of a split whose shards are missing made
 * sl_dataset_resolve list every promised name, one realloc each (it never
 * returned). Now such a count is SL_ECORRUPT at once, and a plausible one
 * still gives every promised name. The input is the fuzzer's, verbatim. */
Test(dataset, manifest_promising_millions_of_missing_shards, .timeout = 20)
{
    static const char fuzz_input[] =
        "{\n\t\"version\":\t1,\n\t\"created_b\":\t1,\t\"num_classes\":\t3,\n"
        "\t\"classes\":\t[\"cat\", \"dog\", \"bird \\\"quoted\\\"\"],\n"
        "\t\"splits\":\t{\n\t\t\"trein\":\t{\n\t\t\t\"format\":\t\"tfrecord\",\n"
        "\t\t\t\"records\":\t10,\n"
        "\t\t\t\"shards\":\t000000000000000000000000303262958\t\t}\n\t}\n}";
    char *path = tu_join(g_dir, "dataset.json");
    cr_assert_eq(tu_write_file(path, fuzz_input, sizeof fuzz_input - 1), 0);
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_ECORRUPT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "split trein lists 303262958 shards"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);

    /* 3 promised, 1 there: the three names, in order. */
    sl_manifest m;
    sl_manifest_init(&m);
    sl_manifest_split tr = {.name = "train", .format = SL_FORMAT_TFRECORD, .records = 6,
                            .shards = 3};
    cr_assert_eq(sl_manifest_split_put(&m, &tr), SL_OK);
    cr_assert_eq(sl_manifest_save(g_dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_fini(&m);
    free(write_shard("train-00001-of-00003.tfrecord", 2));
    cr_assert_eq(sl_dataset_resolve(g_dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.splits[0].nfiles, 3);
    for (int k = 0; k < 3; k++) {
        char want[64];
        snprintf(want, sizeof want, "train-%05d-of-00003.tfrecord", k);
        assert_file(ds.splits[0].files[k], want);
    }
    sl_dataset_fini(&ds);
    free(path);
}

/* "{A..B}" ranges (WebDataset's notation; the way to name shards on a web
 * server without dataset.json): zero padding from A, several ranges,
 * the split from the names, a brace that is no range left alone. */
Test(dataset, brace_patterns)
{
    sl_dataset ds;
    cr_assert_eq(sl_dataset_resolve("/nowhere/d/train-{00000..00003}-of-00004.tfrecord", NULL,
                                    &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ds.nsplits, 1);
    cr_assert_str_eq(ds.splits[0].name, "train");
    cr_assert_eq(ds.splits[0].format, SL_FORMAT_TFRECORD);
    cr_assert_eq(ds.splits[0].nfiles, 4);
    cr_assert_str_eq(ds.splits[0].files[0], "/nowhere/d/train-00000-of-00004.tfrecord");
    cr_assert_str_eq(ds.splits[0].files[3], "/nowhere/d/train-00003-of-00004.tfrecord");
    sl_dataset_fini(&ds);

    cr_assert_eq(sl_dataset_resolve("/nowhere/s{1..2}/x-{008..011}.tar", NULL, &ds), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(ds.splits[0].format, SL_FORMAT_WDS);
    cr_assert_eq(ds.splits[0].nfiles, 8);
    cr_assert_str_eq(ds.splits[0].files[0], "/nowhere/s1/x-008.tar");
    cr_assert_str_eq(ds.splits[0].files[3], "/nowhere/s1/x-011.tar");
    cr_assert_str_eq(ds.splits[0].files[4], "/nowhere/s2/x-008.tar");
    sl_dataset_fini(&ds);

    /* not ranges: {b..a} backwards, {a..b} letters: a plain (missing) path */
    cr_assert_eq(sl_dataset_resolve("/nowhere/x-{5..1}.tar", NULL, &ds), SL_ENOENT);
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve("/nowhere/x-{a..c}.tar", NULL, &ds), SL_ENOENT);
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve("/nowhere/x-{0..99999999}.tar", NULL, &ds), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "more than"), "%s", sl_errmsg());
    sl_dataset_fini(&ds);
}

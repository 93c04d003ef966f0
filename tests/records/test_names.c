/* tests/records/test_names.c - shard and store names, and finding a split's
 * shards with and without dataset.json (names.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records.h"
#include "testutil.h"

Test(names, golden_strings)
{
    char buf[128];
    cr_assert_eq(sl_shard_path(buf, sizeof buf, "/d", "train", 3, 16), SL_OK);
    cr_assert_str_eq(buf, "/d/train-00003-of-00016.tfrecord");
    cr_assert_eq(sl_shard_path(buf, sizeof buf, "out", "validation", 0, 1), SL_OK);
    cr_assert_str_eq(buf, "out/validation-00000-of-00001.tfrecord");
    cr_assert_eq(sl_shard_path(buf, sizeof buf, "/d", "train", 123455, 123456), SL_OK);
    cr_assert_str_eq(buf, "/d/train-123455-of-123456.tfrecord");
    cr_assert_eq(sl_lmdb_path(buf, sizeof buf, "/d", "train"), SL_OK);
    cr_assert_str_eq(buf, "/d/train.lmdb");

    /* exact fit, one byte short */
    size_t need = strlen("/d/train-00003-of-00016.tfrecord") + 1;
    cr_assert_eq(sl_shard_path(buf, need, "/d", "train", 3, 16), SL_OK);
    cr_assert_eq(sl_shard_path(buf, need - 1, "/d", "train", 3, 16), SL_EINVAL);
    cr_assert_eq(sl_lmdb_path(buf, strlen("/d/train.lmdb"), "/d", "train"), SL_EINVAL);
    cr_assert_eq(sl_lmdb_path(buf, strlen("/d/train.lmdb") + 1, "/d", "train"), SL_OK);
    /* shard numbers out of range */
    cr_assert_eq(sl_shard_path(buf, sizeof buf, "/d", "train", 16, 16), SL_EINVAL);
    cr_assert_eq(sl_shard_path(buf, sizeof buf, "/d", "train", 0, 0), SL_EINVAL);
}

static void touch(const char *dir, const char *name)
{
    char *p = tu_join(dir, name);
    cr_assert_eq(tu_write_file(p, "x", 1), 0, "%s", p);
    free(p);
}

static void assert_paths(char **paths, size_t n, const char *dir, const char *const *want,
                         size_t nwant)
{
    cr_assert_eq(n, nwant, "%zu paths, want %zu", n, nwant);
    for (size_t i = 0; i < n; i++) {
        char *w = tu_join(dir, want[i]);
        cr_assert_str_eq(paths[i], w);
        free(w);
    }
}

Test(names, shards_by_listing_without_manifest)
{
    char *dir = tu_tmpdir();
    char **paths;
    size_t n;
    static const char *const want[] = {"train-00000-of-00003.tfrecord",
                                       "train-00001-of-00003.tfrecord",
                                       "train-00002-of-00003.tfrecord"};
    /* created out of order, with decoys that must not match */
    touch(dir, want[2]);
    touch(dir, want[0]);
    touch(dir, want[1]);
    touch(dir, "train-00000-of-00003.tfrecord.idx");
    touch(dir, "train-00003-of-00004.tfrecord.tmp");
    touch(dir, "test-00000-of-00001.tfrecord");
    touch(dir, "trainx-00000-of-00001.tfrecord");
    touch(dir, "train-aa-of-bb.tfrecord");
    touch(dir, "train-00000-of-.tfrecord");
    touch(dir, "train.lmdb");

    cr_assert_eq(sl_dataset_shards(dir, "train", &paths, &n), SL_OK, "%s", sl_errmsg());
    assert_paths(paths, n, dir, want, 3);
    sl_paths_free(paths, n);

    cr_assert_eq(sl_dataset_shards(dir, "test", &paths, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 1);
    sl_paths_free(paths, n);

    cr_assert_eq(sl_dataset_shards(dir, "val", &paths, &n), SL_ENOENT);
    cr_assert_null(paths);
    cr_assert_eq(n, 0);
    cr_assert(strstr(sl_errmsg(), "val-*-of-* shards"), "%s", sl_errmsg());

    char *missing = tu_join(dir, "missing");
    cr_assert_eq(sl_dataset_shards(missing, "train", &paths, &n), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), missing), "%s", sl_errmsg());
    sl_paths_free(NULL, 0);
    free(missing);
    tu_rmrf(dir);
    free(dir);
}

Test(names, shards_from_manifest)
{
    char *dir = tu_tmpdir();
    char **paths;
    size_t n;
    sl_manifest m;
    sl_manifest_split tr = {.name = "train", .format = SL_FORMAT_TFRECORD, .records = 4,
                            .shards = 2};
    sl_manifest_split te = {.name = "test", .format = SL_FORMAT_LMDB, .records = 4, .shards = 1};
    static const char *const want[] = {"train-00000-of-00002.tfrecord",
                                       "train-00001-of-00002.tfrecord"};

    sl_manifest_init(&m);
    cr_assert_eq(sl_manifest_split_put(&m, &tr), SL_OK);
    cr_assert_eq(sl_manifest_split_put(&m, &te), SL_OK);
    cr_assert_eq(sl_manifest_save(dir, &m), SL_OK, "%s", sl_errmsg());
    touch(dir, want[0]);
    touch(dir, want[1]);
    /* a leftover shard set of an earlier run: the manifest decides */
    touch(dir, "train-00000-of-00005.tfrecord");

    cr_assert_eq(sl_dataset_shards(dir, "train", &paths, &n), SL_OK, "%s", sl_errmsg());
    assert_paths(paths, n, dir, want, 2);
    sl_paths_free(paths, n);

    /* a shard the manifest lists is gone */
    char *gone = tu_join(dir, want[1]);
    cr_assert_eq(remove(gone), 0);
    cr_assert_eq(sl_dataset_shards(dir, "train", &paths, &n), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), gone) && strstr(sl_errmsg(), "missing shard 1 of 2"), "%s",
              sl_errmsg());
    cr_assert_null(paths);

    /* an LMDB split has no shards; the message says why */
    cr_assert_eq(sl_dataset_shards(dir, "test", &paths, &n), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "LMDB"), "%s", sl_errmsg());
    /* a split the manifest does not list falls back to the listing */
    touch(dir, "extra-00000-of-00001.tfrecord");
    cr_assert_eq(sl_dataset_shards(dir, "extra", &paths, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 1);
    sl_paths_free(paths, n);

    /* a damaged manifest is an error, not a reason to guess */
    char *mf = tu_join(dir, "dataset.json");
    cr_assert_eq(tu_write_file(mf, "{", 1), 0);
    cr_assert_eq(sl_dataset_shards(dir, "extra", &paths, &n), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "dataset.json"), "%s", sl_errmsg());

    sl_manifest_fini(&m);
    free(mf);
    free(gone);
    tu_rmrf(dir);
    free(dir);
}

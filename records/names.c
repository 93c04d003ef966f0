/*
 * records/names.c - where a dataset's files live.
 *
 *   DIR/NAME-00003-of-00016.tfrecord   TensorFlow's "%s-%05d-of-%05d" shard names
 *                                      (tf.data docs); sluice writes the suffix
 *   DIR/NAME-00003-of-01024            the same without it, as TensorFlow's
 *                                      build_imagenet_data.py writes ImageNet
 *   DIR/NAME.lmdb                      the LMDB store of a split (a directory)
 *   DIR/NAME-000003.tar                WebDataset's names ("%s-%06d.tar", ShardWriter;
 *                                      '_' too): split NAME (sl_wds_shard_name_len)
 *   DIR/DS-NAME.tfrecord-00003-of-00016
 *                                      TensorFlow Datasets' names (dataset_info.json's
 *                                      filepathTemplate "{DATASET}-{SPLIT}.{FILEFORMAT}-
 *                                      {SHARD_X_OF_Y}"): split NAME (sl_shard_split_span)
 *
 * sl_dataset_shards trusts DIR/dataset.json when it lists the split as
 * TFRecord (so a missing shard is an error, not a silently smaller dataset)
 * and falls back to the directory listing for shards made by other tools.
 */
#include "records_int.h"
#include "bytesrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int sl_shard_path(char *buf, size_t cap, const char *dir, const char *name, unsigned shard,
                  unsigned nshards)
{
    return sl_shard_path_fmt(buf, cap, dir, name, shard, nshards, SL_FORMAT_TFRECORD);
}

int sl_shard_path_fmt(char *buf, size_t cap, const char *dir, const char *name, unsigned shard,
                      unsigned nshards, sl_format fmt)
{
    if (!buf || !dir || !name)
        return sl_fail(SL_EINVAL, "sl_shard_path: NULL argument");
    if (nshards == 0 || shard >= nshards)
        return sl_fail(SL_EINVAL, "sl_shard_path: %s: shard %u of %u", name, shard, nshards);
    int n = snprintf(buf, cap, "%s/%s-%05u-of-%05u%s", dir, name, shard, nshards,
                     fmt == SL_FORMAT_WDS ? ".tar" : ".tfrecord");
    if (n < 0 || (size_t)n >= cap)
        return sl_fail(SL_EINVAL, "sl_shard_path: %s/%s: buffer of %zu bytes too small", dir, name,
                       cap);
    return SL_OK;
}

int sl_lmdb_path(char *buf, size_t cap, const char *dir, const char *name)
{
    if (!buf || !dir || !name)
        return sl_fail(SL_EINVAL, "sl_lmdb_path: NULL argument");
    int n = snprintf(buf, cap, "%s/%s.lmdb", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return sl_fail(SL_EINVAL, "sl_lmdb_path: %s/%s: buffer of %zu bytes too small", dir, name,
                       cap);
    return SL_OK;
}

void sl_paths_free(char **paths, size_t n)
{
    if (!paths)
        return;
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

/* A growable array of malloc'd strings. */
typedef struct path_list {
    char **v;
    size_t n, cap;
} path_list;

static int list_push(path_list *l, char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

size_t sl_shard_name_len(const char *base)
{
    static const char suffix[] = ".tfrecord";
    size_t n = strlen(base), i;
    if (n >= sizeof suffix - 1 && !strcmp(base + n - (sizeof suffix - 1), suffix))
        n -= sizeof suffix - 1;
    else if (n >= 4 && !strcmp(base + n - 4, ".tar")) /* a WebDataset shard */
        n -= 4;
    /* "-<digits>-of-<digits>" at the end, read backwards */
    for (i = n; i > 0 && base[i - 1] >= '0' && base[i - 1] <= '9'; i--)
        ;
    if (i == n || i < 4 || strncmp(base + i - 4, "-of-", 4))
        return 0;
    n = i - 4;
    for (i = n; i > 0 && base[i - 1] >= '0' && base[i - 1] <= '9'; i--)
        ;
    if (i == n || i < 2 || base[i - 1] != '-')
        return 0;
    return i - 1;
}

/* TensorFlow Datasets writes DATASET-SPLIT.tfrecord-NNNNN-of-NNNNN into
 * DATA_DIR/DATASET/[CONFIG/]VERSION/: the split is SPLIT, after the last '-'
 * (TFDS names datasets in snake_case, and splits are words), so that
 * --split train finds "mnist-train.tfrecord-00000-of-00001". Without a '-'
 * ("train.tfrecord-00000-of-00004"), the name before ".tfrecord". */
size_t sl_shard_split_span(const char *base, size_t *off)
{
    static const char tfds[] = ".tfrecord";
    size_t n = sl_shard_name_len(base), k = sizeof tfds - 1;
    *off = 0;
    if (n > k && !strncmp(base + n - k, tfds, k)) {
        size_t start = 0;
        for (size_t i = 0; i < n - k; i++)
            if (base[i] == '-')
                start = i + 1;
        if (start < n - k) {
            *off = start;
            return n - k - start;
        }
    }
    return n;
}

size_t sl_wds_shard_name_len(const char *base)
{
    size_t n = strlen(base), i;
    if (n < 5 || strcmp(base + n - 4, ".tar"))
        return 0;
    n -= 4;
    for (i = n; i > 0 && base[i - 1] >= '0' && base[i - 1] <= '9'; i--)
        ;
    if (i == n || i < 2 || (base[i - 1] != '-' && base[i - 1] != '_'))
        return 0;
    return i - 1;
}

/* Is name a shard of split: "SPLIT-<digits>-of-<digits>", with or without
 * ".tfrecord", or TFDS's "DATASET-SPLIT.tfrecord-<digits>-of-<digits>"?
 * Digits, not '*' as a shell glob would allow, so "train-x-of-y.tfrecord.tmp"
 * and the ".idx" files next to the shards never match. */
static int shard_name_matches(const char *name, const char *split)
{
    size_t ls = strlen(split), off;
    return sl_shard_split_span(name, &off) == ls && strncmp(name + off, split, ls) == 0;
}

/* "DIR/SPLIT-*-of-*[.tfrecord]", regular files, sorted (sl_bytes_list's
 * order; zero-padded, so it is numeric). */
static int shards_by_listing(const char *dir, const char *split, path_list *l)
{
    char **names = NULL;
    size_t n = 0;
    int rc;

    if ((rc = sl_bytes_list(dir, &names, &n))) /* sorted; folders end in '/' */
        return sl_fail(rc, "sl_dataset_shards: %s", sl_errmsg());
    for (size_t i = 0; i < n && !rc; i++) {
        char *p;
        struct stat st;
        if (!shard_name_matches(names[i], split))
            continue;
        if (asprintf(&p, "%s/%s", dir, names[i]) < 0) {
            rc = sl_fail(SL_ENOMEM, "sl_dataset_shards: out of memory");
            break;
        }
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (list_push(l, p)) {
            free(p);
            rc = sl_fail(SL_ENOMEM, "sl_dataset_shards: out of memory");
        }
    }
    sl_bytes_names_free(names, n);
    if (!rc && l->n == 0)
        rc = sl_fail(SL_ENOENT, "sl_dataset_shards: %s: no %s-*-of-* shards (.tfrecord or "
                     "no suffix)", dir, split);
    return rc;
}

/* The shards dataset.json promises, each checked to exist. */
static int shards_by_manifest(const char *dir, const sl_manifest_split *s, path_list *l)
{
    struct stat st;
    if (s->shards == 0)
        return sl_fail(SL_ENOENT, "sl_dataset_shards: %s/%s: split %s has 0 shards", dir,
                       SL_MANIFEST_FILE, s->name);
    for (unsigned i = 0; i < s->shards; i++) {
        char *p;
        size_t cap = strlen(dir) + strlen(s->name) + 32;
        if (!(p = malloc(cap)))
            return sl_fail(SL_ENOMEM, "sl_dataset_shards: out of memory");
        if (sl_shard_path_fmt(p, cap, dir, s->name, i, s->shards, s->format) || list_push(l, p)) {
            free(p);
            return sl_fail(SL_ENOMEM, "sl_dataset_shards: out of memory");
        }
        if (stat(p, &st) || !S_ISREG(st.st_mode))
            return sl_fail(SL_ENOENT, "sl_dataset_shards: %s: missing shard %u of %u listed in "
                           "%s/%s", p, i, s->shards, dir, SL_MANIFEST_FILE);
    }
    return SL_OK;
}

int sl_dataset_shards(const char *dir, const char *split, char ***paths, size_t *n)
{
    path_list l = {0};
    sl_manifest m;
    int rc;

    if (!dir || !split || !paths || !n)
        return sl_fail(SL_EINVAL, "sl_dataset_shards: NULL argument");
    *paths = NULL;
    *n = 0;
    rc = sl_manifest_load(dir, &m);
    if (rc == SL_OK) {
        sl_manifest_split *s = sl_manifest_split_find(&m, split);
        if (s && (s->format == SL_FORMAT_TFRECORD || s->format == SL_FORMAT_WDS))
            rc = shards_by_manifest(dir, s, &l);
        else
            rc = shards_by_listing(dir, split, &l);
        if (rc == SL_ENOENT && s && s->format == SL_FORMAT_LMDB)
            rc = sl_fail(SL_ENOENT, "%s (%s/%s lists split %s as LMDB)", sl_errmsg(), dir,
                         SL_MANIFEST_FILE, split);
        sl_manifest_fini(&m);
    } else if (rc == SL_ENOENT) {
        rc = shards_by_listing(dir, split, &l);
    } else {
        /* A damaged manifest is reported, not bypassed: it may be the only
         * record of how many shards there should be. */
        rc = sl_fail(rc, "sl_dataset_shards: %s", sl_errmsg());
    }
    if (rc) {
        sl_paths_free(l.v, l.n);
        return rc;
    }
    *paths = l.v;
    *n = l.n;
    return SL_OK;
}

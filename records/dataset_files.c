/*
 * records/dataset_files.c - what a file found or given as the data is, by
 * its name and, for one file given alone, its first bytes: a shard
 * (TFRecord "NAME-NNNNN-of-NNNNN[.tfrecord]" or "*.tfrecord", WebDataset
 * "NAME-NNNNNN.tar" or "*.tar") and of which split; a compressed one
 * (".tar.gz", ".tgz", ...: refused by name, since the readers seek);
 * or no shard at all (dataset.json, an index, an LMDB store's file, an
 * image: refused naming what was expected, issue 38 item 3).
 *
 * dataset.c's resolution of a PATH (a folder's listing, a glob, an S3
 * listing, one file) and sl_dataset_reader_split ask these; they read
 * nothing but the first 12 bytes of one file (sl_dataset_check_shard_file).
 *
 * Threading: reentrant.
 */
#include "records_int.h"
#include "wds.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Messages name the call the caller made (dataset.c's). */
static const char fn_res[] = "sl_dataset_resolve";

/* ------------------------------------------------------------ names */

int sl_name_has_suffix(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

const char *sl_name_base(const char *p)
{
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

/* A shard's format by its name: ".tar" is a WebDataset shard. */
sl_format sl_dataset_file_format(const char *path)
{
    return sl_name_has_suffix(path, ".tar") ? SL_FORMAT_WDS : SL_FORMAT_TFRECORD;
}

/* The compression a shard's name says it has ("gzip", ...), or NULL. */
const char *sl_dataset_compressed_as(const char *path)
{
    static const struct {
        const char *suffix, *what;
    } kinds[] = {{".tgz", "gzip"}, {".gz", "gzip"}, {".zst", "zstd"}, {".bz2", "bzip2"},
                 {".xz", "xz"},    {".lz4", "lz4"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (sl_name_has_suffix(path, kinds[i].suffix))
            return kinds[i].what;
    return NULL;
}

/* Refuse a compressed shard by name (records.h: the readers seek by offset). */
int sl_dataset_refuse_compressed(const char *path, const char *what)
{
    return sl_fail(SL_ENOTSUP, "%s: %s: a %s-compressed file: sluice reads shards in place, "
                   "seeking to each record (global shuffle, resume, ranged reads), which a "
                   "compressed stream does not allow; decompress it first (%s -d: JPEGs inside "
                   "compress by a few percent only)", fn_res, path, what,
                   !strcmp(what, "gzip") ? "gzip" : what);
}

/* Would a listing take this file as a shard? (a compressed tar is one
 * too, so that it is refused by name rather than passed over) */
int sl_dataset_shard_like(const char *b)
{
    return sl_shard_name_len(b) || sl_name_has_suffix(b, ".tfrecord") ||
           sl_name_has_suffix(b, ".tar") ||
           ((strstr(b, ".tar.") || sl_name_has_suffix(b, ".tgz")) && sl_dataset_compressed_as(b));
}

/* The split a shard file belongs to by its name: NAME of
 * "NAME-NNNNN-of-NNNNN[.tfrecord]", of TensorFlow Datasets'
 * "DATASET-NAME.tfrecord-NNNNN-of-NNNNN" or of WebDataset's
 * "NAME-NNNNNN.tar", else "*". */
void sl_dataset_split_of(const char *path, char *out, size_t cap)
{
    const char *b = sl_name_base(path);
    size_t off = 0, n = sl_shard_split_span(b, &off);
    if (!n)
        n = sl_wds_shard_name_len(b);
    if (n == 0 || n + 1 > cap)
        snprintf(out, cap, "*");
    else
        snprintf(out, cap, "%.*s", (int)n, b + off);
}

/* ------------------------------------------------------------ not a shard */

/* A file given as the data must be a shard: a TFRecord file opens with a
 * record header whose length carries its own masked CRC-32C (an empty file
 * is an empty shard). Anything else read as one (dataset.json, an .idx, a
 * JPEG) gave an empty pipeline without a word (issue 38 item 3); it is
 * refused here, naming what was expected, before any reader sees it. */
int sl_dataset_check_shard_file(const char *path, uint64_t size)
{
    static const char *const images[] = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp",
                                         ".JPG", ".JPEG", ".PNG"};
    const char *b = sl_name_base(path), *what = NULL;
    uint8_t h[12];
    if (size == 0)
        return SL_OK;
    if (size >= sizeof h) {
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(h, 1, sizeof h, f) : 0;
        if (f)
            fclose(f);
        if (got == sizeof h) {
            uint32_t want = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 |
                            (uint32_t)h[11] << 24;
            if (sl_crc_mask(sl_crc32c(0, h, 8)) == want)
                return SL_OK;
        } else if (!f) {
            return sl_fail(SL_EIO, "%s: %s", path, strerror(errno));
        }
    }
    if (!strcmp(b, SL_MANIFEST_FILE))
        what = "the dataset's manifest: pass the directory that holds it";
    else if (sl_name_has_suffix(b, ".idx"))
        what = "an index file: pass the shard it indexes, or their directory";
    else if (!strcmp(b, "data.mdb") || !strcmp(b, "lock.mdb"))
        what = "a file of an LMDB store: pass the store's directory";
    for (size_t i = 0; !what && i < sizeof images / sizeof images[0]; i++)
        if (sl_name_has_suffix(b, images[i]))
            what = "an image: convert images into shards first (sluice convert)";
    return sl_fail(SL_EINVAL, "%s: not a record shard (%s): the data is a dataset directory, a "
                   "glob of shards, or one TFRecord shard (NAME-00000-of-00008.tfrecord) or "
                   "WebDataset .tar", path,
                   what ? what : "its first 12 bytes are no TFRecord record header");
}

/* Is name a split name with a meaning ("validation-000000.tar" are not a
 * training set, even alone in their folder)? */
int sl_dataset_split_named(const char *name)
{
    static const char *const names[] = {"train", "training", "test", "testing", "validation",
                                        "valid", "val", "eval", "dev"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

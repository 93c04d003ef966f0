/*
 * records/convert_records.c - convert's inputs from TFRecord shards
 * (sl_convert_config.source SL_SOURCE_TFRECORD, `sluice convert --from
 * tfrecord PATH`): every record of one split of a dataset PATH, as
 * sl_dataset_resolve reads it (a folder of TensorFlow's shards, a
 * TensorFlow Datasets folder, a sluice dataset, a glob, one shard).
 *
 * Why: the pipeline decodes JPEG only, and TensorFlow Datasets stores the
 * classic small sets (mnist, fashion_mnist, cifar10) as PNG inside its
 * shards: such a folder cannot be trained on as it is, and convert re-encodes
 * every image that is not a pass-through JPEG (records/transcode.c). The
 * shards are read twice: here once in order for each record's place, size
 * and label (both CRCs and the Example checked; a framing error stops
 * the listing, naming the shard and the record, before any output is
 * written), then each record by its place (sl_tfrecord_read_at) by the
 * worker that converts it (records/convert.c).
 *
 * An input is then (path: the shard, off: the record's framing offset,
 * size: its framed size, idx: its number in the shard). Labels are the
 * stored ones less the source's label offset (dataset.json's; 0 for
 * others), so that `--label-offset` means the same as for images. The
 * class names are the source's (dataset.json's, or TensorFlow Datasets'
 * label.labels.txt through records/tfds.c) when it has them, else the
 * classes are max label + 1. A record whose Example has no image or
 * label (or a negative label) is listed with label -1 and skipped by the
 * worker with the decoder's reason, like an unreadable image file.
 *
 * Which split: the source's split named cfg->input_split, else the one
 * named like the output split (cfg->name), else its only split.
 * Local shards only: WebDataset and LMDB sources, and URLs, are refused.
 *
 * Threading: called from the converting thread only.
 */
#include "records_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char fn[] = "--from tfrecord";

/* The split of ds to read, or an error naming the ones there are. */
static int pick_split(const sl_dataset *ds, const sl_convert_config *cfg,
                      const sl_dataset_split **out)
{
    const char *want = cfg->input_split;
    const sl_dataset_split *s = NULL;
    if (want && *want)
        s = sl_dataset_split_find(ds, want);
    else if (!(s = sl_dataset_split_find(ds, cfg->name)) && ds->nsplits == 1)
        s = &ds->splits[0];
    if (s) {
        *out = s;
        return SL_OK;
    }
    char names[512];
    sl_dataset_split_names(ds, names, sizeof names);
    return sl_fail(SL_ENOENT, "%s: %s: no split '%s' (it has: %s)%s", fn, cfg->input,
                   want && *want ? want : cfg->name, names[0] ? names : "none",
                   want && *want ? "" : "; name the one to read with --split");
}

/* Do a and b name the same existing folder? */
static int same_dir(const char *a, const char *b)
{
    char *ra = a ? realpath(a, NULL) : NULL, *rb = b ? realpath(b, NULL) : NULL;
    int same = ra && rb && !strcmp(ra, rb);
    free(ra);
    free(rb);
    return same;
}

/* Every record of one shard, appended to l. */
static int list_shard(const char *path, int64_t label_offset, sl_input_list *l, size_t *cap,
                      int64_t *maxlabel)
{
    sl_tfrecord_reader *r = NULL;
    const uint8_t *rec;
    size_t len;
    int rc = sl_tfrecord_reader_open(path, &r);
    if (rc)
        return rc;
    while ((rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK) {
        uint64_t recno = sl_tfrecord_reader_record(r);
        if (recno > UINT32_MAX) {
            rc = sl_fail(SL_EINVAL, "%s: more than 2^32 records", path);
            break;
        }
        sl_image_example ex;
        int64_t label = -1;
        if (sl_image_example_decode(rec, len, &ex) == SL_OK && ex.label >= label_offset) {
            label = ex.label - label_offset;
            if (label > *maxlabel)
                *maxlabel = label;
        }
        sl_clear_error();
        sl_input it = {.idx = (uint32_t)recno, .label = label, .size = 16 + (uint64_t)len,
                       .off = sl_tfrecord_reader_offset(r), .rec = 1};
        if (!(it.path = strdup(path))) {
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
            break;
        }
        if ((rc = sl_inputs_push(l, cap, &it))) {
            free(it.path);
            break;
        }
    }
    sl_tfrecord_reader_close(r);
    return rc == SL_EOF ? SL_OK : rc;
}

int sl_inputs_load_records(const sl_convert_config *cfg, sl_input_list *l)
{
    if (!cfg->input)
        return sl_fail(SL_EINVAL, "%s: no input dataset given", fn);
    sl_dataset ds;
    const sl_dataset_split *s = NULL;
    int rc = sl_dataset_resolve(cfg->input, NULL, &ds);
    if (!rc && ds.remote)
        rc = sl_fail(SL_ENOTSUP, "%s: %s: --from tfrecord reads local shards; copy them here "
                     "first", fn, cfg->input);
    if (!rc && same_dir(cfg->out_dir, ds.dir))
        rc = sl_fail(SL_EINVAL, "%s: %s: the output folder is the source's: write the converted "
                     "split to another folder (--out)", fn, cfg->input);
    if (!rc)
        rc = pick_split(&ds, cfg, &s);
    if (!rc && s->format != SL_FORMAT_TFRECORD)
        rc = sl_fail(SL_ENOTSUP, "%s: %s: split %s is %s, not TFRecord shards: sluice reads it "
                     "as it is (--from tfrecord converts TFRecord shards)", fn, cfg->input,
                     s->name, s->format == SL_FORMAT_LMDB ? "an LMDB store" : "WebDataset");
    size_t cap = 0;
    int64_t maxlabel = -1, off = sl_dataset_label_offset(&ds);
    for (size_t f = 0; !rc && f < s->nfiles; f++)
        rc = list_shard(s->files[f], off, l, &cap, &maxlabel);
    uint32_t k = ds.manifest.num_classes;
    if (!rc && k && ds.manifest.class_names && maxlabel < (int64_t)k) {
        if (!(l->classes = calloc(k, sizeof *l->classes)))
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        for (uint32_t i = 0; !rc && i < k; i++)
            if (!(l->classes[i] = strdup(ds.manifest.class_names[i])))
                rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        l->nclasses = k; /* sl_inputs_free frees what was copied */
    } else if (!rc) {
        l->nclasses = (uint32_t)(maxlabel + 1 > (int64_t)k ? maxlabel + 1 : k);
    }
    sl_dataset_fini(&ds);
    return rc;
}

/*
 * records/dataset_index.c - sluice index: the index file beside every
 * shard of a resolved dataset (sl_dataset_index), written where it is
 * missing, stale or damaged. TFRecord shards get DALI's "<shard>.idx"
 * (records/index.c), WebDataset tars DALI's WebDataset index
 * (records/wds.c); shards are sized through the byte source.
 *
 * Above index.c and wds.c, which call nothing here.
 *
 * Threading: reentrant.
 */
#include "records_int.h"
#include "bytesrc.h"
#include "wds.h"

#include <stdlib.h>

/* Does idx_path hold an index that covers shard exactly (entries follow one
 * another from 0, as sl_index_load checks, and end at the file's end)? */
static int index_covers(const char *idx_path, const char *shard)
{
    uint64_t size;
    sl_index_entry *e = NULL;
    size_t n = 0;
    if (sl_bytes_size(shard, &size) != SL_OK || sl_index_load(idx_path, &e, &n) != SL_OK) {
        sl_clear_error();
        return 0;
    }
    uint64_t end = n ? e[n - 1].offset + e[n - 1].size : 0;
    free(e);
    return end == size;
}

/* The WebDataset index of shard (records/wds.h): kept when it loads and
 * its spans end inside the file, else rebuilt by a scan. */
static int wds_index_one(const char *shard, const char *idx, int force, int *write)
{
    uint64_t size;
    sl_wds_index ix;
    int rc;
    *write = 1;
    if (!force && sl_bytes_size(shard, &size) == SL_OK &&
        sl_wds_index_load(idx, size, &ix) == SL_OK) {
        sl_wds_index_fini(&ix);
        *write = 0;
        return SL_OK;
    }
    sl_clear_error();
    if ((rc = sl_wds_index_build(shard, &ix)))
        return rc;
    rc = sl_wds_index_write(idx, &ix);
    sl_wds_index_fini(&ix);
    return rc;
}

int sl_dataset_index(const sl_dataset *ds, int force,
                     void (*progress)(void *arg, const char *shard, size_t done, size_t total,
                                      int written),
                     void *arg, size_t *written, size_t *kept)
{
    size_t total = 0, done = 0, nw = 0, nk = 0;
    int rc = SL_OK;
    for (size_t i = 0; i < ds->nsplits; i++)
        if (ds->splits[i].format != SL_FORMAT_LMDB)
            total += ds->splits[i].nfiles;
    for (size_t i = 0; i < ds->nsplits && !rc; i++) {
        const sl_dataset_split *s = &ds->splits[i];
        if (s->format == SL_FORMAT_LMDB)
            continue;
        for (size_t k = 0; k < s->nfiles && !rc; k++) {
            const char *shard = s->files[k];
            char *idx = sl_str_cat(shard, ".idx");
            sl_index_entry *e = NULL;
            size_t n = 0;
            int write = 1;
            if (!idx)
                return sl_fail(SL_ENOMEM, "sl_dataset_index: out of memory");
            if (s->format == SL_FORMAT_WDS) /* records/wds.c: DALI's WebDataset index */
                rc = wds_index_one(shard, idx, force, &write);
            else if (!force && index_covers(idx, shard))
                write = 0;
            else if (!(rc = sl_index_build(shard, &e, &n)))
                rc = sl_index_write(idx, e, n);
            free(e);
            free(idx);
            if (rc)
                break;
            nw += (size_t)write;
            nk += (size_t)!write;
            done++;
            if (progress)
                progress(arg, shard, done, total, write);
        }
    }
    if (written)
        *written = nw;
    if (kept)
        *kept = nk;
    return rc;
}

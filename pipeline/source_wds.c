/*
 * pipeline/source_wds.c - the index of a WebDataset shard for the source
 * set (pipeline/source.c calls it for a shard whose name ends in ".tar").
 *
 * A sample is the pipeline's record: its index entry is the sample's span
 * (records/wds.h), so the block readers, the shuffle and resume treat it
 * like a TFRecord record; the reader does not check TFRecord framing on it
 * (reader.c's check_frames) and the map stage decodes it with
 * sl_wds_sample_decode (map.c), which checks every tar header again.
 *
 * The index: "<shard>.idx" in DALI's WebDataset format, or DALI's own
 * default name "X.idx" beside "X.tar" (sl_wds_index_load_beside, offsets
 * bounded by the file's size), or, when there is none, a scan of
 * the tar (not written back: the data directory may be read-only or
 * shared; `sluice index` writes it). Spans end before the end-of-archive
 * blocks, so bytes (the end of the last span) is below the file's size.
 * A damaged index is SL_ECORRUPT naming it under either error policy. A
 * scan that meets a damaged header or a truncation fails naming the shard,
 * the member and its byte offset under SL_ON_ERROR_FAIL; under
 * SL_ON_ERROR_SKIP the samples before the damage are kept (as
 * sl_index_build_prefix keeps a TFRecord's records) and the rest of the
 * file is one bad record (a tar's members cannot be found past a bad
 * header), its message into bad for the caller to note.
 *
 * Threading: called from sl_source_set_open, on one thread.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pipeline/pipeline_int.h"
#include "records/bytesrc.h"
#include "records/wds.h"

int sl_source_load_wds(sl_shard_info *sh, sl_error_policy policy, char *bad, size_t cap)
{
    static const char fn[] = "sl_source_set_open";
    sl_wds_index ix;
    uint64_t size;
    size_t n = 0;
    int rc;

    if (cap)
        bad[0] = 0;
    sh->kind = SL_SHARD_WDS;
    if ((rc = sl_bytes_size(sh->path, &size)))
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    rc = sl_wds_index_load_beside(sh->path, size, &ix, NULL);
    if (rc == SL_ENOENT) {
        sl_clear_error();
        if (policy != SL_ON_ERROR_SKIP) {
            rc = sl_wds_index_build(sh->path, &ix);
        } else if ((rc = sl_wds_index_build_prefix(sh->path, &ix)) == SL_ECORRUPT) {
            /* the scan's message names the shard, the member and its offset */
            snprintf(bad, cap, "%s (the rest of the file is skipped)", sl_errmsg());
            sl_clear_error();
            rc = SL_OK;
        }
    }
    if (rc)
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    rc = sl_wds_index_entries(&ix, &sh->idx, &n);
    sl_wds_index_fini(&ix);
    if (rc)
        return rc;
    sh->nrec = n;
    sh->bytes = n ? sh->idx[n - 1].offset + sh->idx[n - 1].size : 0;
    return SL_OK;
}

/*
 * tests/fuzz/fuzz_dali_idx.c - the DALI index parser (sl_index_load: one
 * "offset size" line per record, entries that follow one another). What it
 * accepts must be what it promises: contiguous entries of plausible sizes.
 * Input: a "<shard>.idx" file.
 */
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fz_path("shard.idx", path, sizeof path);
    fz_write(path, data, size);
    sl_index_entry *e = NULL;
    size_t n = 0;
    if (sl_index_load(path, &e, &n) == SL_OK) {
        uint64_t next = 0;
        for (size_t i = 0; i < n; i++) {
            if (e[i].offset != next || e[i].size < SL_TFRECORD_OVERHEAD ||
                e[i].size - SL_TFRECORD_OVERHEAD > SL_TFRECORD_MAX_LEN)
                abort();
            next = e[i].offset + e[i].size;
        }
        /* Written back (sl_index_write), it loads as the same entries. */
        char out[512];
        sl_index_entry *f = NULL;
        size_t m = 0;
        fz_path("again.idx", out, sizeof out);
        if (sl_index_write(out, e, n) != SL_OK || sl_index_load(out, &f, &m) != SL_OK || m != n ||
            (n && memcmp(e, f, n * sizeof *e) != 0))
            abort();
        free(f);
    }
    free(e);
    sl_clear_error();
    return 0;
}

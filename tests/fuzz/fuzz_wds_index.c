/*
 * tests/fuzz/fuzz_wds_index.c - the WebDataset index parser
 * (sl_wds_index_parse: DALI's "v1.1"/"v1.2" format, records/wds.h). What it
 * accepts must be what it promises: samples of at least one member, data
 * offsets on blocks after the previous member, within the tar size, spans
 * that follow one another; formatted again it parses to the same index.
 * Input: a "<shard>.tar.idx" file (the tar size bound is 1 MiB).
 */
#include <stdlib.h>
#include <string.h>

#include "records/wds.h"
#include "util.h"

#define TAR_SIZE ((uint64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_wds_index ix, again;
    if (sl_wds_index_parse((const char *)data, size, TAR_SIZE, "fuzz.idx", &ix) == SL_OK) {
        uint64_t prev = 0;
        for (size_t s = 0; s < ix.nsamples; s++) {
            const sl_wds_sample *sm = &ix.samples[s];
            if (sm->n == 0 || sm->span_off != prev || sm->span_end > TAR_SIZE ||
                sm->span_end <= sm->span_off)
                abort();
            for (size_t k = 0; k < sm->n; k++) {
                const sl_wds_member *mb = &ix.members[sm->first + k];
                if (mb->offset % SL_TAR_BLOCK || mb->offset < prev + SL_TAR_BLOCK ||
                    mb->offset + sl_tar_pad(mb->size) > TAR_SIZE)
                    abort();
                prev = mb->offset + sl_tar_pad(mb->size);
            }
        }
        char *text = NULL;
        size_t len = 0;
        if (sl_wds_index_format(&ix, &text, &len) == SL_OK) {
            if (sl_wds_index_parse(text, len, TAR_SIZE, "again.idx", &again) != SL_OK ||
                again.nsamples != ix.nsamples || again.nmembers != ix.nmembers)
                abort();
            for (size_t i = 0; i < ix.nmembers; i++)
                if (again.members[i].offset != ix.members[i].offset ||
                    again.members[i].size != ix.members[i].size)
                    abort();
            sl_wds_index_fini(&again);
        }
        free(text);
        sl_wds_index_fini(&ix);
    }
    sl_clear_error();
    return 0;
}

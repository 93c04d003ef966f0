/*
 * pipeline/config.c - the configuration's defaults, the shuffle buffer's
 * effective size and the evaluation config of a training one: what
 * sl_pipeline_create (pipeline.c), the memory estimate (memory.c) and
 * sluice train's evaluation derive from a config, below both of them so
 * that each calls down only (no pipeline.c <-> memory.c circle).
 */
#include "pipeline/graph_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Defaults for the zero fields of c (DESIGN: pipeline.h). */
void sl_pipeline_config_defaults(sl_pipeline_config *c)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (!c->readers)
        c->readers = 2;
    if (!c->cycle)
        c->cycle = 4;
    if (!c->block)
        c->block = 16;
    if (!c->read_window_bytes)
        c->read_window_bytes = (uint64_t)64 << 20;
    if (!c->shuffle_bytes)
        c->shuffle_bytes = (uint64_t)1 << 30;
    if (!c->workers)
        c->workers = ncpu > 0 ? (unsigned)(ncpu < (long)SL_MAX_THREADS ? ncpu : SL_MAX_THREADS) : 1;
    if (!c->prefetch) {
        /* One batch with the consumer, one filling, and enough ready that
         * the workers (which straddle about 2W/B batches) never wait. */
        unsigned straddle = (2 * c->workers + c->batch - 1) / c->batch;
        c->prefetch = 2 + (straddle > 1 ? straddle : 1);
        if (c->prefetch < 3)
            c->prefetch = 3;
    }
    if (!c->max_bad)
        c->max_bad = 1000;
}

/* Effective shuffle buffer: records, capped by the byte budget over the
 * mean framed record size; 1 (no record shuffle) for NONE and GLOBAL. */
uint64_t sl_effective_shuffle_cap(const sl_pipeline_config *c, const sl_source_set *s)
{
    if (c->shuffle != SL_SHUFFLE_BUFFER)
        return 1;
    uint64_t cap = c->shuffle_buffer;
    if (s->total > 0) {
        uint64_t mean = s->total_bytes / s->total;
        if (mean > 0 && c->shuffle_bytes / mean < cap)
            cap = c->shuffle_bytes / mean;
    }
    return cap ? cap : 1;
}

/* Local shards read with pread (reader.c) rather than mapped: under
 * SLUICE_READ=pread, or under a memory budget, since a mapping's pages stay
 * in the process's RSS once read (memory.c counts the read window then). */
int sl_pipeline_reads_by_pread(const sl_pipeline_config *c)
{
    const char *rd = getenv("SLUICE_READ");
    return (rd && strcmp(rd, "pread") == 0) || c->memory_budget;
}

void sl_pipeline_eval_config(const sl_pipeline_config *train, const char *data,
                             const char *split, sl_pipeline_config *ev)
{
    *ev = *train;
    ev->data = data;
    ev->split = split;
    ev->transform = SL_TRANSFORM_EVAL;
    ev->shuffle = SL_SHUFFLE_NONE;
    ev->shuffle_files = 0;
    ev->epochs = 1;
    ev->drop_remainder = 0;
}

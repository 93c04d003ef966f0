/*
 * pipeline/stats.c - per-stage figures of a running pipeline.
 *
 * What each stage counts (accumulated under p->mu by the thread doing the
 * work, from CLOCK_MONOTONIC readings taken around work and waits; a
 * worker flushes its figures when it next holds the lock anyway, so this
 * costs no extra locking):
 *
 *   stage    threads items            busy
 *   read     R       records read     pread + CRC checks
 *   shuffle  1       samples popped   push/pop under the lock
 *   map      W       samples decoded  decode + augment + store
 *   load     1       batches          submit + reuse
 *
 *   stage    wait_in                        wait_out          queue_fill (mean of samples)
 *   read     -                              window full       window bytes / read_window,
 *                                                             at each put and take
 *   shuffle  window head not read yet       -                 buffer records / cap, at each pop
 *   map      in claim() (incl. shuffle)     ring slot busy    ready batches / prefetch,
 *                                                             at each submit
 *   load     consumer waiting in next()     -                 lent batches / (prefetch - 1),
 *                                                             at each next()
 *
 * bytes: framed bytes read (read), framed record bytes popped (shuffle),
 * output sample bytes (map), batch bytes handed to the loader (load).
 *
 * The shuffle and load stages run inside the workers and the consumer
 * (pipeline.c's DESIGN), serialized by the lock: one "thread" each.
 *
 * Threading: sl_pipeline_stats_get is called by the consumer thread; it
 * takes p->mu for a consistent snapshot.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pipeline/graph_int.h"

uint64_t sl_pipeline_window_peak(sl_pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t v = p->win_peak;
    pthread_mutex_unlock(&p->mu);
    return v;
}

static void stage_out(const sl_stage_acc *a, const char *name, unsigned threads,
                      sl_stage_stats *o)
{
    snprintf(o->name, sizeof o->name, "%s", name);
    o->threads = threads;
    o->items = a->items;
    o->bytes = a->bytes;
    o->busy_s = (double)a->busy_ns * 1e-9;
    o->wait_in_s = (double)a->wait_in_ns * 1e-9;
    o->wait_out_s = (double)a->wait_out_ns * 1e-9;
    o->queue_fill = a->fill_n ? a->fill_sum / (double)a->fill_n : 0.0;
}

int sl_pipeline_stats_get(sl_pipeline *p, sl_pipeline_stats *out)
{
    if (!p || !out)
        return sl_fail(SL_EINVAL, "sl_pipeline_stats_get: NULL argument");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&p->mu);
    out->elapsed_s = (double)(sl_now_ns() - p->t0_ns) * 1e-9;
    out->batches = p->next_index - p->base_index;
    out->samples = p->samples_out - p->base_samples;
    out->nstages = SL_STAGE_COUNT;
    stage_out(&p->acc[SL_STAGE_READ], "read", p->readers, &out->stages[SL_STAGE_READ]);
    stage_out(&p->acc[SL_STAGE_SHUFFLE], "shuffle", 1, &out->stages[SL_STAGE_SHUFFLE]);
    stage_out(&p->acc[SL_STAGE_MAP], "map", p->workers, &out->stages[SL_STAGE_MAP]);
    stage_out(&p->acc[SL_STAGE_LOAD], "load", 1, &out->stages[SL_STAGE_LOAD]);
    out->bad_records = p->bad_count;
    out->bad_records_out = p->bad_out;
    uint64_t nbad = p->bad_count < SL_PIPELINE_MAX_BAD_REPORT ? p->bad_count
                                                                : SL_PIPELINE_MAX_BAD_REPORT;
    for (uint64_t i = 0; i < nbad; i++)
        memcpy(out->bad[i], p->bad[i], sizeof out->bad[i]);
    out->shuffle_buffer = p->shuffle_cap;
    if (p->cfg.rank_split == SL_SPLIT_RECORDS) {
        out->records_per_epoch = sl_split_samples(p->src.total, p->cfg.rank, p->cfg.world);
        out->records_per_epoch_world = p->src.total;
    } else {
        out->records_per_epoch = p->src.total;
        out->records_per_epoch_world = p->src.world_total; /* every rank's shards, counted */
    }
    pthread_mutex_unlock(&p->mu);
    return SL_OK;
}

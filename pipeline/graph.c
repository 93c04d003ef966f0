/*
 * pipeline/graph.c - what every stage of the graph uses: the lock's
 * deferred wake-ups and waits, the sticky error, and the position
 * arithmetic (batch sizes, a rank's share, the ring's position). Below
 * every other file of the graph (reader.c, reader_remote.c, map.c,
 * pipeline.c, state.c, stats.c): it calls none of them. graph_int.h gives
 * the contracts; pipeline.c's DESIGN comment the lock and the ring.
 */
#include <stdio.h>

#include "pipeline/graph_int.h"

/* ------------------------------------------------------------ the lock */

/* Broadcast what bits name (mu held or not). */
static void wake(sl_pipeline *p, unsigned bits)
{
    if (bits & SL_WAKE_READ)
        pthread_cond_broadcast(&p->cv_read);
    if (bits & SL_WAKE_UNIT)
        pthread_cond_broadcast(&p->cv_unit);
    if (bits & SL_WAKE_SLOT)
        pthread_cond_broadcast(&p->cv_slot);
    if (bits & SL_WAKE_BATCH)
        pthread_cond_broadcast(&p->cv_batch);
}

void sl_pipeline_unlock(sl_pipeline *p)
{
    unsigned bits = p->wake;
    p->wake = 0;
    pthread_mutex_unlock(&p->mu);
    if (bits)
        wake(p, bits);
}

void sl_pipeline_wait(sl_pipeline *p, pthread_cond_t *cv)
{
    if (p->wake) {
        wake(p, p->wake);
        p->wake = 0;
    }
    pthread_cond_wait(cv, &p->mu);
}

int sl_pipeline_timed_wait(sl_pipeline *p, pthread_cond_t *cv, const struct timespec *deadline)
{
    if (p->wake) {
        wake(p, p->wake);
        p->wake = 0;
    }
    return pthread_cond_timedwait(cv, &p->mu, deadline);
}

void sl_pipeline_set_error_locked(sl_pipeline *p, int rc, const char *msg)
{
    if (!p->err) {
        p->err = rc;
        snprintf(p->errmsg, sizeof p->errmsg, "%s", msg && *msg ? msg : sl_strerror(rc));
    }
    p->wake |= SL_WAKE_READ | SL_WAKE_UNIT | SL_WAKE_SLOT | SL_WAKE_BATCH;
}

/* ------------------------------------------------------------ positions */

unsigned sl_pipeline_batch_size(const sl_pipeline *p, uint64_t b)
{
    uint64_t B = p->cfg.batch;
    if (p->sample_limit == UINT64_MAX)
        return (unsigned)B;
    /* batch b's first sample (b >= base_index: batches before it are never asked for) */
    uint64_t first = p->base_samples + (b - p->base_index) * B;
    if (first >= p->sample_limit)
        return 0;
    return p->sample_limit - first >= B ? (unsigned)B : (unsigned)(p->sample_limit - first);
}

uint64_t sl_split_samples(uint64_t global, unsigned rank, unsigned world)
{
    if (world == 0 || global <= rank)
        return 0;
    return (global - rank - 1) / world + 1; /* ceil((global - rank) / world) */
}

void sl_pipeline_set_position(sl_pipeline *p, uint64_t k, uint64_t s)
{
    unsigned P = p->prefetch;
    p->next_index = p->next_submit = p->base_index = k;
    p->samples_out = p->base_samples = s;
    p->next_sample = s;
    for (unsigned r = 0; r < P; r++) {
        sl_ring_slot *sl = &p->slots[r];
        sl->batch = k + (r + P - (unsigned)(k % P)) % P;
        sl->done = sl->bad = sl->holes = 0;
        sl->ready = sl->lent = 0;
    }
}

/*
 * pipeline/tune.c - online tuning of the active map workers and of the
 * prefetch depth from the pipeline's own stage figures (issue 43 item 2;
 * cfg.tune, pipeline.h).
 *
 * DESIGN
 *   Bounds, not guesses: create starts cfg.workers threads and allocates
 *   cfg.prefetch ring slots, as without tuning: what the CPU budget (the
 *   planner's --cpus) and the memory budget (memory.c counts them all)
 *   allow. Tuning only chooses how many of them are used: workers whose
 *   index is at or above `active` park (on cv_slot, which stop, errors and
 *   every release broadcast already, so a parked worker needs no wake-up of
 *   its own), and a worker whose sample belongs to a batch `ahead` or more
 *   batches past the one the consumer waits for waits before it decodes
 *   (the same wait as for its ring slot). So no thread, byte or slot is
 *   ever added, and a parked worker costs nothing but its stack.
 *   Determinism: samples are numbered in claim order under p->mu and a
 *   sample's bytes depend on (record, epoch, seed) only (pipeline.c's
 *   DESIGN): which worker decodes it, how many do, and how far ahead
 *   changes when a batch is ready, never what it holds.
 *   Deadlock: a worker parks only before it claims a sample (it holds
 *   none), and the batch the consumer waits for (next_index) is always
 *   allowed (ahead >= 2 > 0); batches are completed from the lowest up.
 *
 *   Policy (the consumer's thread, in next(), every SL_TUNE_WINDOW batches
 *   and at least SL_TUNE_MIN_NS, from the deltas of stats.c's sums):
 *     starving  the consumer waited in next() more than 5% of the window;
 *     busy      the active workers decoded more than 70% of it (map busy /
 *               active / window);
 *     blocked   they waited on ring slots more than 30% of it.
 *   starving and busy: one worker more (decode is the bottleneck);
 *   starving and blocked: one batch of prefetch more (the ring is too
 *   shallow for the consumer's bursts); starving otherwise: the readers
 *   are the bottleneck, nothing here helps. Not starving (< 1%) for
 *   SL_TUNE_CALM windows in a row: one worker fewer while they are busy
 *   less than half the time (the cores go to the training loop), and one
 *   batch of prefetch fewer while they are blocked on the ring most of the
 *   time; the calm count restarts after each change (hysteresis: a step
 *   down needs three quiet windows, a step up one starving window).
 *   The floors: one worker, a prefetch of 2.
 *
 *   A test knob, sl_tune_force (graph_int.h), replaces the policy by a
 *   schedule (active workers and ahead per batch), to prove that moving
 *   both up and down changes no byte (tests/pipeline/test_tune.c).
 *
 *   Requests in flight (SL_TUNE_INFLIGHT, remote shards; reader_remote.c
 *   asks sl_tune_inflight_locked for its limit each round). The bound is
 *   io's inflight, which the memory budget counts (memory.c: each reader's
 *   requests in flight x a unit's bytes): the limit starts there and moves
 *   within [1, bound]. Its own window: every SL_TUNE_IO_WINDOW units read
 *   (all readers) and at least SL_TUNE_IO_MIN_NS, from the read stage's
 *   sums (stats.c): waited = the readers' time blocked on a full reorder
 *   window (they were ahead of the workers: the reads are not the
 *   bottleneck) per reader, and the bytes/s read.
 *     waited > 30% for SL_TUNE_CALM windows: one request fewer (fewer
 *       connections and bytes held for the same batches);
 *     waited < 5% (the reads are what the pipeline waits for): one request
 *       more, and the next window checks it paid: under 5% more bytes/s
 *       takes it back and holds the limit for SL_TUNE_IO_HOLD windows (a
 *       server that serves no faster with more requests at a time, or
 *       the network's bandwidth, is the bound then, not the round trip).
 *   Order: units enter the reorder window in the order's sequence however
 *   many are in flight and whichever completes first (reader_remote.c), so
 *   the limit changes when bytes arrive, never which (test_remote.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/graph_int.h"

#define SL_TUNE_WINDOW 8u               /* batches between decisions */
#define SL_TUNE_MIN_NS 20000000ull      /* and at least 20 ms */
#define SL_TUNE_CALM 3u                 /* quiet windows before a step down */
#define SL_TUNE_IO_WINDOW 8u            /* units read between in-flight decisions */
#define SL_TUNE_IO_MIN_NS 50000000ull   /* and at least 50 ms */
#define SL_TUNE_IO_HOLD 8u              /* windows a step up that did not pay holds */

/* The in-flight tuner's state (mu), part of sl_tune. */
typedef struct sl_tune_io {
    unsigned max, limit, lo, hi;        /* max 0: not started (the first reader's call) */
    uint64_t units, units0, t0, bytes0, wait0;
    uint64_t windows, changes;
    unsigned calm, hold;
    int probing;                        /* the last change was a step up: check it */
    double bps_before;                  /* bytes/s in the window before the step up */
    char last[112];
    unsigned *force;                    /* sl_tune_force_inflight's schedule */
    size_t nforce;
} sl_tune_io;

struct sl_tune {
    unsigned knobs;                     /* SL_TUNE_* */
    unsigned active, ahead;             /* mu: workers used; batches decoded ahead */
    unsigned workers_lo, workers_hi, ahead_lo, ahead_hi; /* the range seen */
    uint64_t changes, windows;
    double worker_batches;              /* sum of active over batches (the mean) */
    uint64_t batches;
    /* the window's start: time and the sums it is measured from */
    uint64_t t0, cons_wait0, busy0, wait_out0, batch0;
    unsigned calm;
    char last[96];                      /* the last change and why */
    /* sl_tune_force's schedule (NULL: the policy) */
    unsigned *force_w, *force_a;
    size_t nforce;
    sl_tune_io io;                      /* knobs & SL_TUNE_INFLIGHT */
};

int sl_tune_create(sl_pipeline *p)
{
    unsigned knobs = p->cfg.tune & (SL_TUNE_WORKERS | SL_TUNE_PREFETCH);
    if ((p->cfg.tune & SL_TUNE_INFLIGHT) && p->remote)
        knobs |= SL_TUNE_INFLIGHT;
    if (!knobs)
        return SL_OK;
    sl_tune *t = calloc(1, sizeof *t);
    if (!t)
        return sl_fail(SL_ENOMEM, "sl_pipeline_create: out of memory");
    t->knobs = knobs;
    t->active = t->workers_lo = t->workers_hi = p->workers;
    t->ahead = t->ahead_lo = t->ahead_hi = p->prefetch;
    t->t0 = sl_now_ns();
    p->tune = t;
    return SL_OK;
}

void sl_tune_destroy(sl_pipeline *p)
{
    if (!p->tune)
        return;
    free(p->tune->force_w);
    free(p->tune->force_a);
    free(p->tune->io.force);
    free(p->tune);
    p->tune = NULL;
}

void sl_tune_gate_locked(sl_pipeline *p, unsigned worker)
{
    while (p->tune && worker >= p->tune->active && !p->stop && !p->err)
        sl_pipeline_wait(p, &p->cv_slot);
}

int sl_tune_holds_locked(const sl_pipeline *p, uint64_t b)
{
    return p->tune && b >= p->next_index + p->tune->ahead;
}

/* Set active and ahead (clamped to what was started); note a change. */
static void set(sl_pipeline *p, unsigned active, unsigned ahead, const char *why)
{
    sl_tune *t = p->tune;
    if (active < 1)
        active = 1;
    if (active > p->workers)
        active = p->workers;
    if (ahead < 2)
        ahead = 2;
    if (ahead > p->prefetch)
        ahead = p->prefetch;
    if (active == t->active && ahead == t->ahead)
        return;
    if (why)
        snprintf(t->last, sizeof t->last, "batch %llu: workers %u -> %u, prefetch %u -> %u: %s",
                 (unsigned long long)p->next_index, t->active, active, t->ahead, ahead, why);
    t->active = active;
    t->ahead = ahead;
    t->changes++;
    t->workers_lo = active < t->workers_lo ? active : t->workers_lo;
    t->workers_hi = active > t->workers_hi ? active : t->workers_hi;
    t->ahead_lo = ahead < t->ahead_lo ? ahead : t->ahead_lo;
    t->ahead_hi = ahead > t->ahead_hi ? ahead : t->ahead_hi;
    p->wake |= SL_WAKE_SLOT; /* parked workers and held-back samples look again */
}

/* One decision from the window's figures (the policy in the DESIGN). */
static void decide(sl_pipeline *p, uint64_t now)
{
    sl_tune *t = p->tune;
    double dt = (double)(now - t->t0);
    double cw = (double)(p->acc[SL_STAGE_LOAD].wait_in_ns - t->cons_wait0) / dt;
    double per = dt * t->active;
    double busy = (double)(p->acc[SL_STAGE_MAP].busy_ns - t->busy0) / per;
    double blocked = (double)(p->acc[SL_STAGE_MAP].wait_out_ns - t->wait_out0) / per;
    int tw = t->knobs & SL_TUNE_WORKERS, tp = t->knobs & SL_TUNE_PREFETCH;
    t->windows++;
    if (cw > 0.05) {
        t->calm = 0;
        if (tw && busy > 0.7 && t->active < p->workers)
            set(p, t->active + 1, t->ahead, "input waited on, workers busy");
        else if (tp && blocked > 0.3 && t->ahead < p->prefetch)
            set(p, t->active, t->ahead + 1, "input waited on, workers waited on the ring");
        return;
    }
    if (cw > 0.01 || ++t->calm < SL_TUNE_CALM)
        return;
    t->calm = 0;
    if (tw && busy < 0.5 && t->active > 1)
        set(p, t->active - 1, t->ahead, "no waits, workers idle half the time");
    else if (tp && blocked > 0.7 && t->ahead > 2)
        set(p, t->active, t->ahead - 1, "no waits, workers waited on the ring");
}

void sl_tune_step_locked(sl_pipeline *p)
{
    sl_tune *t = p->tune;
    if (!t)
        return;
    t->batches++;
    t->worker_batches += t->active;
    /* next_index moved: a sample held back for being too far ahead may go
     * now (nothing else wakes it while the consumer holds its batches) */
    p->wake |= SL_WAKE_SLOT;
    if (t->nforce) {
        size_t i = (size_t)(t->batches % t->nforce);
        set(p, t->force_w[i], t->force_a[i], "forced (test)");
        return;
    }
    uint64_t now = sl_now_ns();
    if (p->next_index - t->batch0 < SL_TUNE_WINDOW || now - t->t0 < SL_TUNE_MIN_NS)
        return;
    decide(p, now);
    t->t0 = now;
    t->batch0 = p->next_index;
    t->cons_wait0 = p->acc[SL_STAGE_LOAD].wait_in_ns;
    t->busy0 = p->acc[SL_STAGE_MAP].busy_ns;
    t->wait_out0 = p->acc[SL_STAGE_MAP].wait_out_ns;
}

/* The in-flight limit to v (clamped to [1, max]); note a change. */
static void set_inflight(sl_tune_io *io, unsigned v, const char *why)
{
    v = v < 1 ? 1 : v > io->max ? io->max : v;
    if (v == io->limit)
        return;
    snprintf(io->last, sizeof io->last, "unit %llu: requests in flight %u -> %u: %s",
             (unsigned long long)io->units, io->limit, v, why);
    io->limit = v;
    io->changes++;
    io->lo = v < io->lo ? v : io->lo;
    io->hi = v > io->hi ? v : io->hi;
}

/* One in-flight decision from the window's figures (the DESIGN's policy). */
static void decide_inflight(sl_pipeline *p, sl_tune_io *io, uint64_t now)
{
    const sl_stage_acc *a = &p->acc[SL_STAGE_READ];
    double dt = (double)(now - io->t0);
    double waited = (double)(a->wait_out_ns - io->wait0) / (dt * (p->readers ? p->readers : 1));
    double bps = (double)(a->bytes - io->bytes0) / dt;
    io->windows++;
    if (io->probing) {
        io->probing = 0;
        if (waited < 0.3 && bps < io->bps_before * 1.05) {
            set_inflight(io, io->limit - 1, "one more did not read faster");
            io->hold = SL_TUNE_IO_HOLD;
            return;
        }
    }
    if (waited > 0.3) {
        io->hold = 0;
        if (++io->calm >= SL_TUNE_CALM && io->limit > 1) {
            io->calm = 0;
            set_inflight(io, io->limit - 1, "the readers waited on the window");
        }
        return;
    }
    io->calm = 0;
    if (waited >= 0.05)
        return;
    if (io->hold) {
        io->hold--;
        return;
    }
    if (io->limit < io->max) {
        io->bps_before = bps;
        io->probing = 1;
        set_inflight(io, io->limit + 1, "the reads are the bottleneck");
    }
}

unsigned sl_tune_inflight_locked(sl_pipeline *p, unsigned max, unsigned completed)
{
    sl_tune *t = p->tune;
    if (!t || !(t->knobs & SL_TUNE_INFLIGHT))
        return max;
    sl_tune_io *io = &t->io;
    uint64_t now = sl_now_ns();
    if (!io->max) { /* the first reader's first round: start at the bound */
        io->max = io->lo = io->hi = max;
        if (!io->limit)
            io->limit = max;
        io->t0 = now;
        io->bytes0 = p->acc[SL_STAGE_READ].bytes;
        io->wait0 = p->acc[SL_STAGE_READ].wait_out_ns;
    }
    io->units += completed;
    if (io->nforce) {
        if (completed)
            set_inflight(io, io->force[io->units % io->nforce], "forced (test)");
        return io->limit;
    }
    if (io->units - io->units0 < SL_TUNE_IO_WINDOW || now - io->t0 < SL_TUNE_IO_MIN_NS)
        return io->limit;
    decide_inflight(p, io, now);
    io->t0 = now;
    io->units0 = io->units;
    io->bytes0 = p->acc[SL_STAGE_READ].bytes;
    io->wait0 = p->acc[SL_STAGE_READ].wait_out_ns;
    return io->limit;
}

int sl_tune_force_inflight(sl_pipeline *p, const unsigned *limits, size_t n)
{
    if (!p || !p->tune || !(p->tune->knobs & SL_TUNE_INFLIGHT) || !limits || !n)
        return sl_fail(SL_EINVAL, "sl_tune_force_inflight: a remote pipeline with "
                       "SL_TUNE_INFLIGHT, and a schedule");
    unsigned *f = malloc(n * sizeof *f);
    if (!f)
        return sl_fail(SL_ENOMEM, "sl_tune_force_inflight: out of memory");
    memcpy(f, limits, n * sizeof *f);
    pthread_mutex_lock(&p->mu);
    free(p->tune->io.force);
    p->tune->io.force = f;
    p->tune->io.nforce = n;
    if (p->tune->io.max)
        set_inflight(&p->tune->io, f[0], "forced (test)");
    else
        p->tune->io.limit = f[0]; /* the readers' first round starts there */
    sl_pipeline_unlock(p);
    return SL_OK;
}

int sl_tune_force(sl_pipeline *p, const unsigned *workers, const unsigned *ahead, size_t n)
{
    if (!p || !p->tune || !workers || !ahead || !n)
        return sl_fail(SL_EINVAL, "sl_tune_force: a pipeline with cfg.tune, and a schedule");
    unsigned *w = malloc(n * sizeof *w), *a = malloc(n * sizeof *a);
    if (!w || !a) {
        free(w);
        free(a);
        return sl_fail(SL_ENOMEM, "sl_tune_force: out of memory");
    }
    memcpy(w, workers, n * sizeof *w);
    memcpy(a, ahead, n * sizeof *a);
    pthread_mutex_lock(&p->mu);
    free(p->tune->force_w);
    free(p->tune->force_a);
    p->tune->force_w = w;
    p->tune->force_a = a;
    p->tune->nforce = n;
    set(p, w[0], a[0], "forced (test)");
    sl_pipeline_unlock(p);
    return SL_OK;
}

int sl_pipeline_tuning_get(sl_pipeline *p, sl_pipeline_tuning *out)
{
    if (!p || !out)
        return sl_fail(SL_EINVAL, "sl_pipeline_tuning_get: NULL argument");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&p->mu);
    const sl_tune *t = p->tune;
    out->workers_max = p->workers;
    out->prefetch_max = p->prefetch;
    if (t) {
        out->knobs = t->knobs;
        out->workers = t->active;
        out->workers_lo = t->workers_lo;
        out->workers_hi = t->workers_hi;
        out->prefetch = t->ahead;
        out->prefetch_lo = t->ahead_lo;
        out->prefetch_hi = t->ahead_hi;
        out->changes = t->changes;
        out->windows = t->windows;
        out->workers_mean = t->batches ? t->worker_batches / (double)t->batches : t->active;
        memcpy(out->last, t->last, sizeof out->last);
    } else {
        out->workers = out->workers_lo = out->workers_hi = p->workers;
        out->prefetch = out->prefetch_lo = out->prefetch_hi = p->prefetch;
        out->workers_mean = p->workers;
    }
    if (t && (t->knobs & SL_TUNE_INFLIGHT) && t->io.max) {
        out->inflight_max = t->io.max;
        out->inflight = t->io.limit;
        out->inflight_lo = t->io.lo;
        out->inflight_hi = t->io.hi;
        out->inflight_windows = t->io.windows;
        out->inflight_changes = t->io.changes;
        memcpy(out->inflight_last, t->io.last, sizeof out->inflight_last);
    } else if (p->remote) { /* fixed (or no reader has started) */
        unsigned n = p->io.inflight ? p->io.inflight : 1;
        out->inflight_max = out->inflight = out->inflight_lo = out->inflight_hi = n;
    }
    sl_pipeline_unlock(p);
    return SL_OK;
}

/*
 * pipeline/reader_remote.c - the read stage over remote shards (http(s)://,
 * s3://): the same units, order and window as reader.c, with many ranged
 * GETs in flight per reader thread.
 *
 * DESIGN
 *   Why a loop of its own: a local unit costs a madvise or a pread, so
 *   reader.c reads one unit at a time. A remote unit costs a round trip
 *   (0.1 ms on loopback, 20-100 ms to an object store), so a thread that
 *   waited for each would read block / RTT records a second. Each remote
 *   reader thread instead keeps up to sl_io_opts.inflight units in flight
 *   on its own sl_fetcher (bytesrc.h: curl_multi, connections reused), or
 *   the fewer tune.c's limit allows (cfg.tune's SL_TUNE_INFLIGHT: fewer
 *   while the readers wait on the window, more while the reads are the
 *   bottleneck, never more than that bound).
 *   Read-ahead is the window itself: units are claimed and admitted to the
 *   reorder window exactly as reader.c does (in order, while the window
 *   holds less than read_window bytes), so the bytes in flight are counted
 *   in the pipeline's memory bound and the stream is the order's stream
 *   whatever the completion order.
 *   Loop (mu held between fetches): claim units while fewer than inflight
 *   are in flight and the window has room; if none is in flight, wait for
 *   room (cv_read) or stop at the order's end; else unlock, hand the new
 *   units to the fetcher, wait for one completion, check its frames, lock
 *   and mark it ready.
 *   Faults: the fetcher retries each request (bytesrc.h) while the retry
 *   budget lasts (60 s from its first try by default): the failed unit
 *   backs off on the fetcher's list while this thread fetches the units
 *   after it into the window, and is asked for again when due. It keeps its
 *   place in the order, so a server that restarts within the budget costs
 *   time, never a record: the batches (and what a training run learns) are
 *   those of an undisturbed run. (Moving the unit later in the epoch would
 *   change every batch after it.)
 *   A unit that fails for good with an I/O error (SL_EIO: the budget spent
 *   on timeouts, resets, 5xx; a refusal the retries cannot mend) ends the
 *   run under either error policy, with the fetcher's message: the URL,
 *   the byte range, the last HTTP status, the tries and the time. A shard
 *   the server cannot serve is not a bad record, and skipping it would
 *   quietly train on another dataset. Under skip, the errors that are
 *   about the data (SL_ECORRUPT: the object is shorter than its index;
 *   SL_ENOENT: it was deleted; SL_EPERM) mark its records SL_FRAME_UNREAD
 *   with the message kept in un->err, so the map stage reports each as a
 *   bad record (and refills), never drops one silently; and its shard is
 *   unreachable from then on (p->unreachable): its later units are bad
 *   without a request, and refills pass over it (map.c), so a dead shard
 *   of n records costs n reports, not n failed requests per refill.
 *   Stop: units still in flight belong to the window; sl_fetcher_close
 *   cancels their transfers before the thread returns, so no transfer
 *   writes into a unit after the pipeline frees it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/graph_int.h"
#include "records/bytesrc.h"

/* Units claimed in one round at most (the fetcher queues beyond its own
 * in-flight limit; this bounds the array below). */
#define SL_REMOTE_CLAIM_MAX 64u

/* Every record of un unreadable, for why (copied; NULL when out of memory:
 * the records are still bad, with a shorter message). */
static void unit_unread(sl_unit *un, const char *why)
{
    un->err = strdup(why);
    for (uint32_t i = 0; i < un->u.nrec; i++)
        un->bad[i] = SL_FRAME_UNREAD;
}

/* A unit the fetcher could not read: fatal (an I/O error after the retry
 * budget, under either policy; anything under fail), or (skip, an error
 * about the object) its records bad and its shard unreachable for the rest
 * of the run (mu held). */
static int unit_failed_locked(sl_pipeline *p, sl_unit *un, int rc, const char *why)
{
    if (sl_remote_fatal(rc) || p->cfg.on_error != SL_ON_ERROR_SKIP)
        return rc;
    unit_unread(un, why);
    if (!p->unreachable[un->u.shard]) {
        char *w = strdup(why);
        __atomic_store_n(&p->unreachable[un->u.shard], w, __ATOMIC_RELEASE);
    }
    return SL_OK;
}

void *sl_reader_main_remote(void *arg)
{
    sl_reader_ctx *ctx = arg;
    sl_pipeline *p = ctx->p;
    sl_fetcher *f = NULL;
    sl_unit *fresh[SL_REMOTE_CLAIM_MAX];
    uint64_t busy = 0, wait_out = 0, items = 0, bytes = 0;
    unsigned inflight = 0, nfresh = 0, read_now = 0;
    int rc;

    /* the bound; the limit of a round is tune.c's within it (cfg.tune's
     * SL_TUNE_INFLIGHT), else the bound */
    unsigned bound = p->io.inflight ? p->io.inflight : 1, limit = bound;
    if (bound > SL_REMOTE_CLAIM_MAX)
        bound = SL_REMOTE_CLAIM_MAX;
    rc = sl_fetcher_open(&p->io, &f);
    sl_fetcher_set_stop(f, &p->stop_io); /* a stop does not wait for retries to end */
    pthread_mutex_lock(&p->mu);
    if (rc)
        sl_pipeline_set_error_locked(p, rc, sl_errmsg());
    while (!rc) {
        sl_stage_acc *a = &p->acc[SL_STAGE_READ];
        a->busy_ns += busy, a->wait_out_ns += wait_out, a->items += items, a->bytes += bytes;
        busy = wait_out = items = bytes = 0;
        if (p->stop || p->err)
            break;
        limit = sl_tune_inflight_locked(p, bound, read_now);
        read_now = 0;
        /* Claim what the window and the in-flight limit allow. */
        while (inflight + nfresh < limit) {
            int tp = sl_take_pending_locked(p);
            if (tp < 0)
                goto out_locked;
            if (tp == 0 ||
                (p->win_bytes > 0 && p->win_bytes + p->pending.bytes > p->read_window))
                break;
            sl_unit *un = sl_unit_claim_locked(p, &p->pending);
            if (!un || sl_window_push_locked(p, un)) {
                if (un)
                    sl_unit_release_locked(p, un);
                sl_pipeline_set_error_locked(p, SL_ENOMEM, "sl_pipeline: reader: out of memory");
                goto out_locked;
            }
            p->have_pending = 0;
            if (un->u.seq == p->skip_seq && p->skip_n) { /* resume: fed before the cut */
                un->pushed = p->skip_n;
                un->refs = un->u.nrec - p->skip_n;
            }
            fresh[nfresh++] = un;
        }
        if (inflight + nfresh == 0) {
            if (p->order_done && !p->have_pending)
                break;
            uint64_t t = sl_now_ns();
            sl_pipeline_wait(p, &p->cv_read); /* the window is full */
            wait_out += sl_now_ns() - t;
            continue;
        }
        sl_pipeline_unlock(p);

        /* Hand the new units to the fetcher (those of an unreachable
         * shard are bad at once); wait for one. */
        uint64_t t = sl_now_ns();
        unsigned nskip = 0;
        for (unsigned i = 0; i < nfresh && !rc; i++) {
            sl_unit *un = fresh[i];
            const char *why;
            if ((rc = sl_unit_prepare(p, un)))
                break;
            if ((why = sl_shard_unreachable(p, un->u.shard))) {
                unit_unread(un, why);
                fresh[nskip++] = un; /* reuses the slots already handed on */
                continue;
            }
            if (!(rc = sl_unit_buffer(p, un)))
                rc = sl_fetcher_add(f, p->src.shards[un->u.shard].path, un->u.offset, un->buf,
                                    (size_t)un->u.bytes, un);
            if (!rc)
                inflight++;
        }
        nfresh = 0;
        sl_unit *done = NULL;
        int frc = rc;
        char why[SL_ERRMSG_MAX] = "";
        if (!rc && inflight > 0) {
            void *tag = NULL;
            frc = sl_fetcher_wait(f, &tag);
            if (frc == SL_ECANCELED && !tag) { /* the pipeline stops */
                pthread_mutex_lock(&p->mu);
                break;
            }
            done = tag;
            inflight--;
            if (frc == SL_OK)
                sl_unit_check_frames(p, done);
            else
                snprintf(why, sizeof why, "%s", sl_errmsg());
        }
        uint64_t t1 = sl_now_ns();
        busy += t1 - t; /* waiting for the network is this stage's work */
        if (done) {
            read_now++;
            items += done->u.nrec;
            bytes += done->u.bytes;
            sl_trace_span(p, ctx->tid, "read", t, t1, done->u.seq);
        }

        pthread_mutex_lock(&p->mu);
        if (frc && done)
            frc = unit_failed_locked(p, done, frc, why);
        if (frc) {
            sl_pipeline_set_error_locked(p, frc, done ? why : sl_errmsg());
            break;
        }
        for (unsigned i = 0; i < nskip; i++)
            fresh[i]->ready = 1;
        if (done)
            done->ready = 1;
        p->wake |= SL_WAKE_UNIT;
    }
out_locked:;
    sl_stage_acc *a = &p->acc[SL_STAGE_READ];
    a->busy_ns += busy, a->wait_out_ns += wait_out, a->items += items, a->bytes += bytes;
    sl_pipeline_unlock(p);
    sl_fetcher_close(f); /* cancels what is still in flight */
    return NULL;
}

/*
 * pipeline/pipeline.c - the graph: config, create / next / release /
 * destroy. The stages' code is in reader.c (read), map.c (fused
 * shuffle-repeat and map-batch, in-order submit), state.c (resume),
 * stats.c and trace.c, over graph.c (the lock's wake-ups and waits, the
 * sticky error, batch positions); this comment is the design of the whole
 * graph.
 *
 * DESIGN
 *
 *   read units ─▶ [readers ×R] ─▶ reorder window ─▶ claim(): shuffle buffer ─▶
 *     [workers ×W: decode + augment into ring slot b % P, position s % B] ─▶
 *     in-order submit (load stage) ─▶ next() / release() (consumer)
 *
 * Threads: R readers (reader.c), W map workers (map.c), and the consumer
 *   (the caller of next/release/stats/state_save). The shuffle and load
 *   stages have no threads of their own: the shuffle runs inside claim(),
 *   called by a worker that wants a sample, and the load stage's submit is
 *   made by whichever worker completes the next batch in order.
 *
 * Queues (all bounded):
 *   - the reorder window (reader.c): units in read order, at most
 *     read_window bytes (one larger unit alone);
 *   - the shuffle buffer: at most shuffle_cap record handles (effective
 *     buffer, from the record budget and the byte budget); the records'
 *     bytes stay in their unit buffers, refcounted (a unit is freed when its
 *     last record has been decoded: no copy, no per-record allocation). So
 *     the bytes held are those of the units with a record in the buffer:
 *     at most block x the buffer's bytes, and in expectation about
 *     H(block) x (harmonic number: 3.4x for block 16), since a unit lives
 *     until the last of its `block` records, each popped after ~cap pops,
 *     leaves;
 *   - the batch ring: P = prefetch host batches (the loader's slots), each
 *     with B labels / record ids / epochs.
 *
 * Lock: one mutex p->mu guards every queue and counter (taken about once per
 *   sample by a worker and once per unit by a reader; decode, pread and CRC
 *   work run unlocked). p->fd_mu (reader.c) is only taken without p->mu.
 *   Condition variables: cv_read (window space), cv_unit (window head ready,
 *   order over), cv_slot (ring slot released), cv_batch (batch submitted);
 *   stop and errors broadcast all four. Wake-ups are deferred until the
 *   waker releases p->mu (sl_pipeline_unlock, graph_int.h says why).
 *
 * Ordering guarantees (what makes batches independent of thread timing):
 *   - the input stream is the sl_order's records in order: units enter the
 *     window in seq order and claim() feeds the shuffle from the window's
 *     head only, waiting for it to be read;
 *   - claim() runs the shuffle machine (fill until it takes no more, full
 *     or at the epoch barrier, or the input ends; pop one) and numbers the
 *     popped samples s = 0, 1, 2, ... under p->mu, so the sample stream
 *     depends only on (seed, order);
 *   - sample s goes to batch b = s / B, position k = s % B, ring slot
 *     b % P (after a start at batch k0, sample s0 (sl_pipeline_create_at):
 *     b = k0 + (s - s0) / B, k = (s - s0) % B): its bytes, label, id and
 *     epoch are a function of (record, epoch, seed) only (RNG
 *     sl_rng_for(seed, epoch, record id));
 *   - batches are submitted and handed out strictly in index order.
 *   Epochs are fused: after the last unit of epoch e the window just
 *   continues with epoch e+1's units, so the buffer never drains or refills
 *   at an epoch boundary; it drains only at the end of the last epoch. A
 *   buffer that holds a whole epoch is the exception: it takes an epoch at
 *   a time (the epoch barrier, pipeline_int.h), so it drains at each
 *   epoch's end and each epoch is a permutation.
 *
 * Ring slot protocol: slot r accepts batch sl->batch; a worker whose sample
 *   belongs to batch b waits (cv_slot) until slots[b % P].batch == b, i.e.
 *   until the consumer released batch b - P (and sl_loader_reuse returned).
 *   A batch is complete when `done` reaches its size; completed batches are
 *   submitted in order (sl_loader_submit, under p->mu: one thread at a time,
 *   in index order) and next() hands them out in order.
 *
 * Bad records (reader-flagged framing/CRC, undecodable Example or JPEG):
 *   FAIL makes the error sticky; SKIP counts it, keeps the first messages,
 *   and refills the slot with the next record id after it (id + 1, + 2, ...
 *   modulo the total), read with pread through the index and decoded with
 *   that id's RNG, so the batch stays full and the run stays deterministic.
 *   More than max_bad is fatal. Under SKIP a truncated shard is opened with
 *   its whole records only (source.c); the records it lost count as bad.
 *
 * Shutdown: stop (also the first step of destroy) sets stop, broadcasts
 *   every condition variable and joins all threads (none blocks anywhere but
 *   on those variables or a pread); the ring and the lent batches stay
 *   until destroy frees everything.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/image/gdec_int.h"
#include "pipeline/graph_int.h"
#include "records/bytesrc.h"

#define SL_MAX_SIDE 16384

/* ------------------------------------------------------------ config */

#define BAD_CFG(...) sl_fail(SL_EINVAL, "sl_pipeline_create: " __VA_ARGS__)

static int check_config(const sl_pipeline_config *c)
{
    if (!c->data || !*c->data)
        return BAD_CFG("data: no dataset path");
    if (!c->split || !*c->split)
        return BAD_CFG("split: empty");
    if (c->world == 0 || c->rank >= c->world)
        return BAD_CFG("rank %u, world %u: need rank < world", c->rank, c->world);
    if ((unsigned)c->rank_split > SL_SPLIT_RECORDS)
        return BAD_CFG("rank_split: unknown mode %d", (int)c->rank_split);
    if (c->batch == 0)
        return BAD_CFG("batch: 0 (need >= 1)");
    if (c->height < 1 || c->width < 1 || c->height > SL_MAX_SIDE || c->width > SL_MAX_SIDE)
        return BAD_CFG("height %d, width %d: need 1..%d", c->height, c->width, SL_MAX_SIDE);
    if ((unsigned)c->shuffle > SL_SHUFFLE_GLOBAL)
        return BAD_CFG("shuffle: unknown mode %d", (int)c->shuffle);
    if (c->shuffle == SL_SHUFFLE_BUFFER && c->shuffle_buffer == 0)
        return BAD_CFG("shuffle_buffer: 0 records (SL_SHUFFLE_NONE reads without shuffling)");
    if ((unsigned)c->transform > SL_TRANSFORM_EVAL)
        return BAD_CFG("transform: unknown mode %d", (int)c->transform);
    if (c->transform == SL_TRANSFORM_TRAIN) {
        if (!(c->scale_min > 0 && c->scale_min <= c->scale_max && c->scale_max <= 1))
            return BAD_CFG("scale_min %g, scale_max %g: need 0 < min <= max <= 1",
                           (double)c->scale_min, (double)c->scale_max);
        if (!(c->ratio_min > 0 && c->ratio_min <= c->ratio_max && isfinite(c->ratio_max)))
            return BAD_CFG("ratio_min %g, ratio_max %g: need 0 < min <= max", (double)c->ratio_min,
                           (double)c->ratio_max);
    } else if (!(c->crop_fraction > 0 && c->crop_fraction <= 1)) {
        return BAD_CFG("crop_fraction %g: need 0 < f <= 1", (double)c->crop_fraction);
    }
    if ((unsigned)c->layout > SL_LAYOUT_NCHW_F32)
        return BAD_CFG("layout: unknown %d", (int)c->layout);
    if (c->layout != SL_LAYOUT_NHWC_U8)
        for (int i = 0; i < 3; i++)
            if (!isfinite(c->mean[i]) || !isfinite(c->std[i]) || c->std[i] == 0)
                return BAD_CFG("mean[%d] %g, std[%d] %g: need finite values, std != 0", i,
                               (double)c->mean[i], i, (double)c->std[i]);
    if ((unsigned)c->on_error > SL_ON_ERROR_FAIL)
        return BAD_CFG("on_error: unknown policy %d", (int)c->on_error);
    if (c->prefetch == 1)
        return BAD_CFG("prefetch: 1 (need 0 for the default, or >= 2)");
    if (c->readers > SL_MAX_THREADS || c->workers > SL_MAX_THREADS)
        return BAD_CFG("readers %u, workers %u: at most %u each", c->readers, c->workers,
                       SL_MAX_THREADS);
    if (c->prefetch > 4096)
        return BAD_CFG("prefetch: %u batches (at most 4096)", c->prefetch);
    if ((unsigned)c->decode > SL_DECODE_AUTO)
        return BAD_CFG("decode: unknown mode %d", (int)c->decode);
    if (c->label_offset < -1)
        return BAD_CFG("label_offset: %lld (-1 = from dataset.json, or >= 0)",
                       (long long)c->label_offset);
    return SL_OK;
}

static void apply_defaults(sl_pipeline *p)
{
    const sl_pipeline_config *c = &p->cfg;
    sl_pipeline_config_defaults(&p->cfg);
    p->readers = c->readers;
    p->workers = c->workers;
    p->prefetch = c->prefetch;
    p->read_window = c->read_window_bytes;
}

/* Input records, samples and batches of the run (p->src and p->cfg set).
 * SL_SPLIT_FILES: the rank's own dataset, T = epochs x records. With
 * SL_SPLIT_RECORDS these are rank r's part of world 1's run with batch
 * N = B x W: world 1 reads T positions and hands out L = T (with
 * drop_remainder floor(T / N) x N) samples; the rank reads and hands out
 * the positions p < T and p < L with p % W == r (BUFFER's cut reads other
 * positions, as many of them: T is whole epochs). Since W divides N, with
 * drop_remainder every rank gets L / W = floor(T / N) x B samples. */
static int run_length(sl_pipeline *p)
{
    const sl_pipeline_config *c = &p->cfg;
    uint64_t R = p->src.total, B = c->batch;
    int split = c->rank_split == SL_SPLIT_RECORDS && c->world > 1;
    uint64_t W = split ? c->world : 1;
    if (R == 0) { /* nothing to read, even forever: SL_EOF at once */
        p->input_total = p->sample_limit = p->nbatches = 0;
        return SL_OK;
    }
    if (split && R < W)
        return sl_fail(SL_EINVAL, "sl_pipeline_create: %s: rank %u of %u: SL_SPLIT_RECORDS over "
                       "%llu records: some rank would get no record in an epoch (need records "
                       ">= world)", c->data, c->rank, c->world, (unsigned long long)R);
    if (c->epochs <= 0 || (uint64_t)c->epochs > (UINT64_MAX - 1) / R) {
        p->input_total = p->sample_limit = p->nbatches = UINT64_MAX;
        return SL_OK;
    }
    uint64_t T = R * (uint64_t)c->epochs, N = B * W; /* both < 2^32: no overflow */
    uint64_t L = c->drop_remainder ? T / N * N : T;
    p->input_total = sl_split_samples(T, split ? c->rank : 0, (unsigned)W);
    p->sample_limit = sl_split_samples(L, split ? c->rank : 0, (unsigned)W);
    p->nbatches = c->drop_remainder ? p->sample_limit / B : (p->sample_limit + B - 1) / B;
    return SL_OK;
}

/* --------------------------------------------------------- lifecycle */

static int alloc_ring(sl_pipeline *p)
{
    unsigned B = p->cfg.batch;
    if (!(p->slots = calloc(p->prefetch, sizeof *p->slots)))
        return SL_ENOMEM;
    for (unsigned r = 0; r < p->prefetch; r++) {
        sl_ring_slot *sl = &p->slots[r];
        sl->labels = calloc(B, sizeof *sl->labels);
        sl->ids = calloc(B, sizeof *sl->ids);
        sl->epochs = calloc(B, sizeof *sl->epochs);
        if (!sl->labels || !sl->ids || !sl->epochs)
            return SL_ENOMEM;
    }
    return SL_OK;
}

static int alloc_threads(sl_pipeline *p)
{
    p->threads = calloc(p->readers + p->workers, sizeof *p->threads);
    p->rctx = calloc(p->readers, sizeof *p->rctx);
    p->wk = calloc(p->workers, sizeof *p->wk);
    if (!p->threads || !p->rctx || !p->wk)
        return sl_fail(SL_ENOMEM, "sl_pipeline_create: out of memory");
    for (unsigned i = 0; i < p->readers; i++)
        p->rctx[i] = (sl_reader_ctx){.p = p, .index = i, .tid = 1 + i};
    for (unsigned i = 0; i < p->workers; i++) {
        sl_worker *w = &p->wk[i];
        *w = (sl_worker){.p = p, .index = i, .tid = 1 + p->readers + i};
        int rc = sl_decoder_create(&w->dec);
        if (rc)
            return sl_fail(rc, "sl_pipeline_create: %s", sl_errmsg());
        sl_decoder_set_max_pixels(w->dec, p->cfg.max_pixels);
        w->rec = malloc(p->src.max_record ? (size_t)p->src.max_record : 1);
        if (!w->rec)
            return sl_fail(SL_ENOMEM, "sl_pipeline_create: worker buffers: out of memory");
    }
    return SL_OK;
}

int sl_pipeline_build(const sl_pipeline_config *cfg, sl_pipeline **out)
{
    static const char fn[] = "sl_pipeline_create";
    sl_pipeline *p;
    int rc;

    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    if (!cfg)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if ((rc = sl_check_config_size(fn, cfg->size, sizeof *cfg)) || (rc = check_config(cfg)))
        return rc;
    if (!(p = calloc(1, sizeof *p)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->fd_mu, NULL);
    pthread_cond_init(&p->cv_read, NULL);
    pthread_cond_init(&p->cv_unit, NULL);
    pthread_cond_init(&p->cv_slot, NULL);
    pthread_cond_init(&p->cv_batch, NULL);
    p->t0_ns = sl_now_ns();
    p->cfg = *cfg;
    /* the redacted path (bytesrc.h, "Credentials"): every message and
     * report from here on names the data without a password or signature */
    if (sl_path_redact(cfg->data, &p->data)) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto fail;
    }
    p->split = strdup(cfg->split);
    if (!p->split) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto fail;
    }
    p->cfg.data = p->data;
    p->cfg.split = p->split;
    /* this pipeline's I/O settings, for its handles and fetchers (reader.c,
     * reader_remote.c, map.c) and, on this thread, the reads of the open */
    if ((rc = sl_io_resolve(cfg->io, &p->io)))
        goto fail;
    p->cfg.io = &p->io;
    apply_defaults(p);
    const sl_pipeline_config *c = &p->cfg;

    /* SL_SPLIT_RECORDS: every shard; the order keeps this rank's positions */
    int split = c->rank_split == SL_SPLIT_RECORDS;
    const sl_io_opts *io_was = sl_io_thread_use(&p->io);
    rc = sl_source_set_open_policy(c->data, c->split, split ? 0 : c->rank, split ? 1 : c->world,
                                   c->on_error, &p->src);
    sl_io_thread_use(io_was);
    if (rc)
        goto fail;
    p->label_offset = c->label_offset >= 0 ? c->label_offset : p->src.label_offset;
    p->shuffle_cap = sl_effective_shuffle_cap(c, &p->src);
    /* A buffer that holds a whole epoch (this rank's records of one; the
     * largest share, rank 0's, on every rank of a record split) was filled
     * from many epochs at once by the fused repeat: an "epoch" of batches
     * then held two thirds of the records (issue 38 item 5). It takes an
     * epoch at a time instead (the epoch barrier, pipeline_int.h), so each
     * epoch is a permutation of its records, still read in blocks (reading
     * it in the global mode's order made one ranged GET per record: 0.33x
     * the images/s behind 20 ms of latency, perf/remote-read). The buffer
     * is then that share: more would never fill. */
    uint64_t share = sl_split_samples(p->src.total, 0, split ? c->world : 1);
    int barrier = c->shuffle == SL_SHUFFLE_BUFFER && share > 0 && p->shuffle_cap >= share;
    if (barrier)
        p->shuffle_cap = share;
    if ((rc = run_length(p)) || (rc = sl_pipeline_memory_check(p)))
        goto fail;
    p->sample_bytes = sl_sample_bytes(c->height, c->width, c->layout);
    if (p->sample_bytes > SIZE_MAX / c->batch) {
        rc = sl_fail(SL_EINVAL, "%s: batch %u x %zu bytes: too large", fn, c->batch,
                     p->sample_bytes);
        goto fail;
    }

    sl_order_config oc = {.src = &p->src, .mode = c->shuffle, .cycle = c->cycle,
                          .block = c->block, .shuffle_files = c->shuffle_files,
                          .seed = c->seed, .epochs = c->epochs,
                          .split_rank = split ? c->rank : 0, .split_world = split ? c->world : 1};
    if ((rc = sl_order_create(&oc, &p->order)))
        goto fail;
    if ((rc = sl_shuffle_init(&p->shuf, p->shuffle_cap, c->seed)))
        goto fail;
    p->shuf.barrier = barrier;
    if ((rc = sl_loader_create(c->device, (size_t)c->batch * p->sample_bytes, p->prefetch,
                               &p->loader))) {
        rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
        goto fail;
    }
    if ((rc = sl_gdec_create(c, p->workers, p->prefetch, &p->src, &p->gdec))) {
        rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
        goto fail;
    }
    p->srcs = calloc(p->src.n ? p->src.n : 1, sizeof *p->srcs);
    p->maps = calloc(p->src.n ? p->src.n : 1, sizeof *p->maps);
    p->bad = calloc(SL_PIPELINE_MAX_BAD_REPORT, sizeof *p->bad);
    if (!p->srcs || !p->maps || !p->bad || alloc_ring(p)) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto fail;
    }
    /* what the source set left out (on_error skip: truncated shards) are
     * bad records like any other: counted, named, bounded by max_bad */
    p->bad_count = p->bad_out = p->src.bad;
    for (unsigned i = 0; i < p->src.nbad_msgs; i++)
        memcpy(p->bad[i], p->src.bad_msgs[i], sizeof p->bad[i]);
    if (p->src.bad > c->max_bad) {
        rc = sl_fail(SL_ECORRUPT, "%s: more than %llu bad records (max_bad); first: %s", fn,
                     (unsigned long long)c->max_bad, p->src.bad_msgs[0]);
        goto fail;
    }
    p->use_pread = sl_pipeline_reads_by_pread(c); /* reader.c: mmap unless */
    p->remote = p->src.n && p->src.remote; /* one data path: all or none */
    if (p->remote && !(p->unreachable = calloc(p->src.n, sizeof *p->unreachable))) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto fail;
    }
    if ((rc = alloc_threads(p)) || (rc = sl_tune_create(p)))
        goto fail;
    p->skip_seq = UINT64_MAX;
    sl_pipeline_set_position(p, 0, 0);
    *out = p;
    return SL_OK;
fail:
    sl_pipeline_destroy(p);
    return rc;
}

int sl_pipeline_start(sl_pipeline *p)
{
    /* the read loop: one unit at a time (reader.c), or many ranged GETs in
     * flight on each reader (reader_remote.c) */
    void *(*reader)(void *) = p->remote ? sl_reader_main_remote : sl_reader_main;
    for (unsigned i = 0; i < p->readers + p->workers; i++) {
        int e = i < p->readers
                    ? pthread_create(&p->threads[i], NULL, reader, &p->rctx[i])
                    : pthread_create(&p->threads[i], NULL, sl_worker_main, &p->wk[i - p->readers]);
        if (e)
            return sl_fail(SL_ENOMEM, "sl_pipeline_create: starting thread %u: %s", i,
                           strerror(e));
        p->nthreads = i + 1;
    }
    return SL_OK;
}

int sl_pipeline_create(const sl_pipeline_config *cfg, sl_pipeline **out)
{
    sl_pipeline *p;
    if (out)
        *out = NULL;
    int rc = sl_pipeline_build(cfg, out ? &p : NULL);
    if (rc)
        return rc;
    if ((rc = sl_pipeline_start(p))) {
        sl_pipeline_destroy(p);
        return rc;
    }
    *out = p;
    return SL_OK;
}

void sl_pipeline_stop(sl_pipeline *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    __atomic_store_n(&p->stop_io, 1, __ATOMIC_RELEASE); /* a fetch in flight returns */
    p->wake |= SL_WAKE_READ | SL_WAKE_UNIT | SL_WAKE_SLOT | SL_WAKE_BATCH;
    sl_pipeline_unlock(p);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0; /* joined: a second stop (or destroy) joins nothing */
}

void sl_pipeline_destroy(sl_pipeline *p)
{
    if (!p)
        return;
    sl_pipeline_stop(p);
    if (p->wk)
        for (unsigned i = 0; i < p->workers; i++) {
            sl_decoder_destroy(p->wk[i].dec);
            free(p->wk[i].rec);
        }
    free(p->wk);
    free(p->rctx);
    free(p->threads);
    sl_units_free_all(p);
    sl_tune_destroy(p);
    sl_shuffle_fini(&p->shuf);
    sl_order_destroy(p->order);
    sl_gdec_destroy(p->gdec); /* its stream records the loader's events: first */
    sl_loader_destroy(p->loader);
    if (p->slots)
        for (unsigned r = 0; r < p->prefetch; r++) {
            free(p->slots[r].labels);
            free(p->slots[r].ids);
            free(p->slots[r].epochs);
        }
    free(p->slots);
    free(p->bad);
    for (size_t i = 0; p->unreachable && i < p->src.n; i++)
        free(p->unreachable[i]);
    free(p->unreachable);
    sl_shard_srcs_close(p);
    sl_source_set_close(&p->src);
    sl_trace_free(p);
    pthread_cond_destroy(&p->cv_read);
    pthread_cond_destroy(&p->cv_unit);
    pthread_cond_destroy(&p->cv_slot);
    pthread_cond_destroy(&p->cv_batch);
    pthread_mutex_destroy(&p->fd_mu);
    pthread_mutex_destroy(&p->mu);
    free(p->data);
    free(p->split);
    free(p);
}

void sl_pipeline_decoder(sl_pipeline *p, char *buf, size_t cap)
{
    sl_gdec_describe(p ? p->gdec : NULL, buf, cap);
}

/* --------------------------------------------------------- consumer */

/* next() with an optional deadline (CLOCK_REALTIME, as cv_batch's clock):
 * NULL waits as long as it takes. */
static int next_until(sl_pipeline *p, sl_batch **out, const struct timespec *deadline)
{
    static const char fn[] = "sl_pipeline_next";
    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    if (!p)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    pthread_mutex_lock(&p->mu);
    int rc = SL_OK;
    if (p->err)
        goto error;
    if (p->stop) {
        sl_pipeline_unlock(p);
        return sl_fail(SL_ECANCELED, "%s: pipeline stopped", fn);
    }
    if (p->next_index >= p->nbatches) {
        sl_pipeline_unlock(p);
        return sl_fail(SL_EOF, "%s: end of data after %llu batches", fn,
                       (unsigned long long)p->next_index);
    }
    if (p->held + 1 >= p->prefetch) {
        unsigned held = p->held, P = p->prefetch;
        sl_pipeline_unlock(p);
        return sl_fail(SL_EINVAL, "%s: %u batches held with prefetch %u: release one first "
                       "(at most prefetch - 1 may be held)", fn, held, P);
    }
    uint64_t b = p->next_index;
    unsigned r = (unsigned)(b % p->prefetch);
    sl_ring_slot *sl = &p->slots[r];
    uint64_t t = sl_now_ns();
    while (!(sl->batch == b && sl->ready) && !p->err && !p->stop) {
        if (!deadline) {
            sl_pipeline_wait(p, &p->cv_batch);
        } else if (sl_pipeline_timed_wait(p, &p->cv_batch, deadline) == ETIMEDOUT &&
                   !(sl->batch == b && sl->ready) && !p->err && !p->stop) {
            p->acc[SL_STAGE_LOAD].wait_in_ns += sl_now_ns() - t;
            sl_pipeline_unlock(p);
            return sl_fail(SL_ETIMEDOUT, "%s: batch %llu not ready yet", fn,
                           (unsigned long long)b);
        }
    }
    uint64_t t1 = sl_now_ns();
    p->acc[SL_STAGE_LOAD].wait_in_ns += t1 - t;
    sl_trace_span(p, 0, "next", t, t1, b);
    if (p->err)
        goto error;
    if (p->stop) {
        sl_pipeline_unlock(p);
        return sl_fail(SL_ECANCELED, "%s: pipeline stopped", fn);
    }
    sl->ready = 0;
    sl->lent = 1;
    p->held++;
    sl_acc_fill(&p->acc[SL_STAGE_LOAD], (double)p->held / (double)(p->prefetch - 1));
    unsigned n = sl_pipeline_batch_size(p, b);
    sl_source_set_world_ids(&p->src, sl->ids, n); /* SL_SPLIT_FILES: the dataset's ids */
    sl->view = (sl_batch){
        .index = b, .n = n - sl->holes, .height = p->cfg.height, .width = p->cfg.width,
        .layout = p->cfg.layout, .data = sl_loader_host(p->loader, r),
        .sample_bytes = p->sample_bytes, .labels = sl->labels, .record_ids = sl->ids,
        .epochs = sl->epochs, .d_data = sl_loader_device(p->loader, r),
        .ready_event = sl_loader_event(p->loader, r), .skipped = sl->bad,
    };
    p->next_index++;
    sl_tune_step_locked(p);
    p->samples_out += n;
    p->bad_out += sl->bad;
    *out = &sl->view;
    sl_pipeline_unlock(p);
    return SL_OK;
error:
    rc = p->err;
    {
        char msg[SL_ERRMSG_MAX];
        memcpy(msg, p->errmsg, sizeof msg);
        sl_pipeline_unlock(p);
        return sl_fail(rc, "%s", msg);
    }
}

int sl_pipeline_next(sl_pipeline *p, sl_batch **out)
{
    return next_until(p, out, NULL);
}

int sl_pipeline_next_wait(sl_pipeline *p, unsigned timeout_ms, sl_batch **out)
{
    struct timespec deadline;
    sl_deadline_ms(&deadline, CLOCK_REALTIME, timeout_ms); /* cv_batch's clock */
    return next_until(p, out, &deadline);
}

void sl_pipeline_release(sl_pipeline *p, sl_batch *b)
{
    if (!p || !b)
        return;
    unsigned r = (unsigned)(b->index % p->prefetch);
    sl_ring_slot *sl = &p->slots[r];
    pthread_mutex_lock(&p->mu);
    if (b != &sl->view || !sl->lent || sl->batch != b->index) {
        sl_pipeline_unlock(p); /* not lent by this pipeline: nothing to give back */
        return;
    }
    sl->lent = 0;
    p->held--;
    sl_pipeline_unlock(p);
    /* The slot's previous host-to-device copy must be over before workers
     * write its host memory again. */
    uint64_t t = sl_now_ns();
    int rc = sl_loader_reuse(p->loader, r);
    uint64_t t1 = sl_now_ns();
    pthread_mutex_lock(&p->mu);
    p->acc[SL_STAGE_LOAD].busy_ns += t1 - t;
    if (rc)
        sl_pipeline_set_error_locked(p, rc, sl_errmsg());
    sl->batch += p->prefetch;
    sl->done = sl->bad = sl->holes = 0;
    p->wake |= SL_WAKE_SLOT;
    sl_pipeline_unlock(p);
}

/*
 * pipeline/map.c - the fused shuffle-repeat and map-batch stages: what a
 * map worker does for every sample.
 *
 * DESIGN (the whole graph: pipeline.c's DESIGN comment)
 *   Threads: W map workers (sl_worker_main). Each loops: claim() a sample
 *   under p->mu (feed the shuffle from the reorder window's head, pop one
 *   record, number it s), wait for ring slot (s / B) % P to accept batch
 *   s / B, decode and augment WITHOUT the lock straight into position s % B
 *   of that slot, then take p->mu again to drop the record's unit
 *   reference, count the sample and submit every batch that is complete
 *   and next in index order. One lock round trip per sample: the finish of
 *   sample i and the claim of sample i+1 share it.
 *   Queues: the shuffle buffer (input: the reorder window; output: the
 *   sample numbers) and the batch ring. Lock order: p->mu only (the fd
 *   mutex is taken without it).
 *   Ordering: samples are numbered in pop order under the lock, and a
 *   sample's bytes depend only on its record, epoch and the seed, so which
 *   worker decodes it, and when, changes nothing.
 *   Bad records (skip policy): under the train transform the slot is
 *   refilled from the next record ids (the batch stays full); under the
 *   eval transform it is left out (a hole, SL_SAMPLE_HOLE), and the worker
 *   that submits the batch moves the samples after each hole forward
 *   without the lock (submit_busy, as the GPU decode), so an evaluation
 *   never counts a record twice. Either way a bad record is counted and
 *   named once, at its own turn, never when a refill passes over it.
 *   A refill reads its record by pread through the index (a ranged GET
 *   for remote data): a damaged record there (framing, CRC, decode) is
 *   passed over to the next id, but a GET that fails for good with an
 *   outage ends the run under either policy, as in the readers
 *   (sl_remote_fatal, reader_remote.c); one about the object (a 404) makes
 *   its shard unreachable, and refills pass over that shard.
 */
#include <stdio.h>
#include <string.h>

#include "pipeline/image/gdec_int.h"
#include "pipeline/graph_int.h"
#include "records/bytesrc.h"
#include "pipeline/mapguard.h"
#include "records/wds.h"

/* --------------------------------------------------- shuffle (claim) */

/* Push the next input record into the shuffle (mu held): 1 pushed, 2 the
 * buffer takes no more now (full, or the epoch barrier: the head is of the
 * next epoch while the buffer holds this one's records; pop), 0 the input
 * is over, -1 the window's head is not read yet (wait on cv_unit). The
 * barrier is checked before the head's read is waited for: its epoch is
 * known when it is claimed. */
static int feed_one(sl_pipeline *p)
{
    if (sl_shuffle_full(&p->shuf))
        return 2;
    if (p->win_n == 0)
        return p->order_done && !p->have_pending ? 0 : -1;
    sl_unit *un = p->win[p->win_head];
    if (!sl_shuffle_takes(&p->shuf, un->u.epoch))
        return 2;
    if (!un->ready)
        return -1;
    sl_shuffle_push(&p->shuf, sl_handle(un->id, un->pushed++), un->u.epoch);
    if (un->pushed == un->u.nrec) { /* all in the shuffle: leaves the window */
        p->win_head = (p->win_head + 1) % p->win_cap;
        p->win_n--;
        p->win_bytes -= un->u.bytes;
        sl_acc_fill(&p->acc[SL_STAGE_READ], (double)p->win_bytes / (double)p->read_window);
        p->wake |= SL_WAKE_READ;
    }
    return 1;
}

/* The shuffle stage (mu held): fill the buffer until it takes no more
 * (full, or the epoch barrier) or the input ends, pop one record, number
 * it. SL_EOF when the run has no more samples, SL_ECANCELED on stop or
 * error. */
static int claim(sl_pipeline *p, sl_unit **un, uint32_t *idx, uint64_t *s)
{
    sl_stage_acc *a = &p->acc[SL_STAGE_SHUFFLE];
    uint64_t t0 = sl_now_ns(), waited = 0;
    int rc;
    for (;;) {
        if (p->stop || p->err) {
            rc = SL_ECANCELED;
            break;
        }
        if (p->next_sample >= p->sample_limit) {
            rc = SL_EOF;
            break;
        }
        int f;
        while ((f = feed_one(p)) == 1)
            ;
        if (f >= 0) {
            if (p->shuf.n == 0) {
                rc = SL_EOF;
                break;
            }
            sl_acc_fill(a, (double)p->shuf.n / (double)p->shuf.cap);
            uint64_t h = sl_shuffle_pop(&p->shuf);
            *un = p->live[h >> 32];
            *idx = (uint32_t)h;
            *s = p->next_sample++;
            a->items++;
            a->bytes += p->src.shards[(*un)->u.shard].idx[sl_unit_rec(&(*un)->u, *idx)].size;
            rc = SL_OK;
            break;
        }
        uint64_t t = sl_now_ns();
        sl_pipeline_wait(p, &p->cv_unit);
        waited += sl_now_ns() - t;
    }
    a->wait_in_ns += waited;
    a->busy_ns += sl_now_ns() - t0 - waited;
    return rc;
}

/* ------------------------------------------------------------- map */

/* One sample's work: what map_record needs and what it finds out, handed
 * from map_sample through transform_in (the SIGBUS guard) as one pointer.
 * It lives on the caller's stack, filled once per sample and its record's
 * fields again per refill: nothing is allocated for it. */
typedef struct {
    /* in */
    const sl_pipeline_config *c; /* transform, geometry, output size, layout */
    int64_t label_offset;        /* subtracted from the stored label */
    sl_decoder *dec;             /* the worker's own: header, then the CPU decode */
    sl_gdec *gdec;               /* --decode gpu's stage, or NULL: CPU only */
    unsigned wi, r, k;           /* gdec's entry: worker index, ring slot, position */
    sl_shard_kind kind;          /* how rec is laid out: an Example or a WDS span */
    const uint8_t *rec;          /* the payload (no TFRecord framing), len bytes */
    size_t len;
    int32_t epoch;               /* with c->seed and id, seeds the augmentation */
    uint64_t id;                 /* the record's global id */
    void *dst;                   /* sample k of slot r: where the CPU writes */
    /* the JPEG's header (sl_decoder_header), set by map_record: the crop's
     * geometry and sl_gdec_stage read it; the CPU decode continues from the
     * parse dec keeps */
    int W, H;
    unsigned jf; /* sl_jpeg_scan's SL_JPEG_* bits */
    /* out */
    int32_t label; /* the label less label_offset; set only on SL_OK */
} sl_sample_job;

/* The job's record into a sample at j->dst; j->label set. SL_ECORRUPT or
 * SL_EIMAGE mean "bad record"; anything else is fatal. With j->gdec
 * (--decode gpu), a JPEG nvJPEG can decode is staged for sample k of ring
 * slot r by worker wi instead (gdec_int.h), and dst is not written. */
static int map_record(sl_sample_job *j)
{
    const sl_pipeline_config *c = j->c;
    sl_image_example ex;
    sl_crop crop;
    int flip = 0, rc;

    /* a TFRecord payload (an Example) or a WebDataset sample's span */
    rc = j->kind == SL_SHARD_WDS ? sl_wds_sample_decode(j->rec, j->len, c->label_key, &ex)
                                 : sl_image_example_decode(j->rec, j->len, &ex);
    if (rc)
        return rc;
    int64_t l;
    if (__builtin_sub_overflow(ex.label, j->label_offset, &l) || l < INT32_MIN || l > INT32_MAX)
        return sl_fail(SL_ECORRUPT, "label %lld - offset %lld out of range", (long long)ex.label,
                       (long long)j->label_offset);
    /* Parsed once: the decode below continues from this header (decode.c). */
    if ((rc = sl_decoder_header(j->dec, ex.image, ex.image_len, &j->W, &j->H, &j->jf)))
        return rc;
    if (c->transform == SL_TRANSFORM_TRAIN) {
        /* Draw order: the crop's draws, then one for the flip. */
        sl_rng rng = sl_rng_for(c->seed, (uint64_t)j->epoch, j->id);
        sl_rrc_geometry(&rng, j->W, j->H, c->scale_min, c->scale_max, c->ratio_min, c->ratio_max,
                        &crop);
        flip = c->flip && sl_rng_uniform(&rng) < 0.5f;
    } else {
        sl_eval_geometry(j->W, j->H, c->height, c->width, c->crop_fraction, &crop);
    }
    /* --decode gpu: staged for nvJPEG when it can decode it (gdec_int.h) */
    if (j->gdec) {
        rc = sl_gdec_stage(j->gdec, j->wi, j->r, j->k, j->id, ex.image, ex.image_len, j->jf, j->W,
                           j->H, &crop, flip);
        if (rc == SL_OK)
            j->label = (int32_t)l;
        if (rc != SL_ENOTSUP)
            return rc;
    }
    /* Decode, resize, flip, normalize and lay out in one pass into the slot
     * (decode.c, resample.c). */
    sl_out_spec out = {.w = c->width, .h = c->height, .flip = flip, .layout = c->layout,
                       .mean = c->mean, .std = c->std, .dst = j->dst};
    rc = sl_decode_crop_sample(j->dec, ex.image, ex.image_len, &crop, &out);
    if (rc)
        return rc;
    j->label = (int32_t)l;
    return SL_OK;
}

/* Also the entry point of tests/fuzz/fuzz_roi.c (pipeline_int.h): a CPU
 * job of a TFRecord payload; *label written only on SL_OK, as the header
 * says. */
int sl_map_record(const sl_pipeline_config *c, int64_t label_offset, sl_decoder *dec,
                  const uint8_t *rec, size_t len, int32_t epoch, uint64_t id, void *dst,
                  int32_t *label)
{
    sl_sample_job j = {.c = c, .label_offset = label_offset, .dec = dec,
                       .kind = SL_SHARD_TFRECORD, .rec = rec, .len = len, .epoch = epoch,
                       .id = id, .dst = dst};
    int rc = map_record(&j);
    if (rc == SL_OK)
        *label = j.label;
    return rc;
}

/* map_record() on a job whose record may lie in shard's mapping: there,
 * under the SIGBUS guard (mapguard.h), and a fault is the fatal "file
 * changed" error (SL_EIO). The decoder and job a fault interrupts are not
 * used again: the error stops every worker, and sl_decoder_destroy frees a
 * decoder in any state. */
static int transform_in(sl_pipeline *p, uint32_t shard, sl_sample_job *j)
{
    const sl_shard_map *m = &p->maps[shard];
    if (!m->base || j->rec < m->base || j->rec >= m->base + m->len)
        return map_record(j);
    sl_mapguard g;
    if (sigsetjmp(g.jb, 1) == 0) {
        sl_mapguard_enter(&g, m->base, m->len);
        int rc = map_record(j);
        sl_mapguard_leave(&g);
        return rc;
    }
    return sl_shard_read_error(p, shard, (uint64_t)((const uint8_t *)g.fault - m->base),
                               "SIGBUS reading the mapped file");
}

/* A bad record met at its own turn under the error policy (takes mu):
 * counted, its message kept among the first few; SL_OK to refill or
 * leave out, otherwise the error to fail with. */
static int report_bad(sl_pipeline *p, const char *path, uint64_t rec, uint64_t off, uint64_t id,
                      const char *what)
{
    char msg[SL_ERRMSG_MAX];
    int n = snprintf(msg, sizeof msg, "%s: record %llu @ %llu (id %llu): %s", path,
                     (unsigned long long)rec, (unsigned long long)off, (unsigned long long)id,
                     what);
    if (n < 0)
        msg[0] = 0;
    if (p->cfg.on_error == SL_ON_ERROR_FAIL)
        return sl_fail(SL_ECORRUPT, "sl_pipeline_next: %s", msg);
    pthread_mutex_lock(&p->mu);
    uint64_t k = p->bad_count++;
    if (k < SL_PIPELINE_MAX_BAD_REPORT) { /* truncated to the report's width */
        size_t l = strnlen(msg, sizeof p->bad[k] - 1);
        memcpy(p->bad[k], msg, l);
        p->bad[k][l] = 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (k + 1 > p->cfg.max_bad)
        return sl_fail(SL_ECORRUPT, "sl_pipeline_next: more than %llu bad records (max_bad); "
                       "last: %s", (unsigned long long)p->cfg.max_bad, msg);
    return SL_OK;
}

/* Every record a refill tried is bad: the error names the first bad
 * record's reason (what the stats kept first), else this one's. */
static int none_left(sl_pipeline *p, const char *what)
{
    char first[SL_ERRMSG_MAX];
    pthread_mutex_lock(&p->mu);
    snprintf(first, sizeof first, "%s", p->bad_count ? p->bad[0] : what);
    pthread_mutex_unlock(&p->mu);
    return sl_fail(SL_ECORRUPT, "sl_pipeline_next: no good record left to refill with: all %llu "
                   "records are bad; the first: %.700s", (unsigned long long)p->src.total, first);
}

/* Decode record idx of un into ring slot r, position k, refilling from the
 * following record ids while records are bad (skip policy, train
 * transform: *bad = 1), or leaving the slot a hole (eval transform: *bad =
 * 2); *bad stays 0 when the record itself was good. */
static int map_sample(sl_worker *w, const sl_unit *un, uint32_t idx, unsigned r, unsigned k,
                      int *bad)
{
    sl_pipeline *p = w->p;
    sl_ring_slot *sl = &p->slots[r];
    /* what stays across refills; the record's fields are set per try */
    sl_sample_job j = {.c = &p->cfg, .label_offset = p->label_offset, .dec = w->dec,
                       .gdec = p->gdec, .wi = w->index, .r = r, .k = k, .epoch = un->u.epoch,
                       .dst = (uint8_t *)sl_loader_host(p->loader, r) +
                              (size_t)k * p->sample_bytes};
    uint32_t shard = un->u.shard;
    uint64_t recno = sl_unit_rec(&un->u, idx);
    const sl_index_entry *e = &p->src.shards[shard].idx[recno];
    uint64_t id = p->src.shards[shard].first_id + recno;
    const uint8_t *rec = un->data + (e->offset - un->u.offset);
    int frame = un->bad[idx];
    const char *unread = un->err; /* why a remote unit could not be read */
    char what[SL_ERRMSG_MAX], unread_buf[SL_ERRMSG_MAX];

    for (uint64_t tries = 0;; tries++) {
        int rc = SL_ECORRUPT;
        if (frame == SL_FRAME_UNREAD && unread) {
            snprintf(what, sizeof what, "could not be read: %.*s", (int)(sizeof what - 24),
                     unread);
        } else if (frame) {
            snprintf(what, sizeof what, "%s", sl_tfrecord_frame_what((sl_frame_status)frame));
        } else {
            /* TFRecord: the payload inside the framing; WebDataset: the span */
            j.kind = p->src.shards[shard].kind;
            int wds = j.kind == SL_SHARD_WDS;
            j.rec = wds ? rec : rec + 12;
            j.len = (size_t)(wds ? e->size : e->size - SL_TFRECORD_OVERHEAD);
            j.id = id;
            rc = transform_in(p, shard, &j);
            if (rc == SL_OK) {
                sl->labels[k] = j.label;
                sl->ids[k] = id;
                sl->epochs[k] = j.epoch;
                return SL_OK;
            }
            if (rc != SL_ECORRUPT && rc != SL_EIMAGE)
                return rc;
            snprintf(what, sizeof what, "%s", sl_errmsg());
        }
        /* A record that went bad because its file is being rewritten is
         * not a bad record of the dataset: stop, naming the file. */
        char why[160];
        if (sl_shard_changed(p, shard, why, sizeof why))
            return sl_fail(SL_EIO, "sl_pipeline: %s: file changed while the pipeline read it "
                           "(%s; record %llu @ %llu: %s)", p->src.shards[shard].path, why,
                           (unsigned long long)recno, (unsigned long long)e->offset, what);
        /* Counted and named at its own turn only: a refill that passes over
         * it meets it again, and so does its own turn later on. */
        if (tries == 0 && (rc = report_bad(p, p->src.shards[shard].path, recno, e->offset, id,
                                           what)))
            return rc;
        if (tries == 0 && p->cfg.transform == SL_TRANSFORM_EVAL) {
            /* evaluation: left out, never a duplicate of another record */
            sl->labels[k] = -1;
            sl->ids[k] = SL_SAMPLE_HOLE;
            sl->epochs[k] = j.epoch;
            *bad = 2;
            return SL_OK;
        }
        *bad = 1;
        if (tries + 1 >= p->src.total)
            return none_left(p, what);
        /* Refill: the next record id, by pread through the index. */
        id = (id + 1) % p->src.total;
        if ((rc = sl_source_set_locate(&p->src, id, &shard, &recno)))
            return rc;
        /* Refills pass over unreachable shards (reader_remote.c): their
         * records are each reported once, in their own turn. */
        for (size_t hop = 0; p->remote && sl_shard_unreachable(p, shard); hop++) {
            if (hop >= p->src.n)
                return sl_fail(SL_EIO, "sl_pipeline_next: no shard is reachable; last: %s", what);
            id = (p->src.shards[shard].first_id + p->src.shards[shard].nrec) % p->src.total;
            if ((rc = sl_source_set_locate(&p->src, id, &shard, &recno)))
                return rc;
        }
        e = &p->src.shards[shard].idx[recno];
        int wds = p->src.shards[shard].kind == SL_SHARD_WDS;
        if (e->size > p->src.max_record || (!wds && e->size < SL_TFRECORD_OVERHEAD)) {
            frame = SL_FRAME_SIZE;
            continue;
        }
        sl_bytesrc *src = NULL;
        if ((rc = sl_shard_src(p, shard, &src)))
            return rc;
        /* pread, or one ranged GET (retried by bytesrc) */
        rc = sl_bytesrc_read(src, w->rec, (size_t)e->size, e->offset);
        if (rc && !p->remote) { /* a local shard shorter than its index is fatal */
            if (rc == SL_ECORRUPT && sl_shard_changed(p, shard, why, sizeof why))
                return sl_shard_read_error(p, shard, e->offset + e->size, "short read");
            return rc;
        }
        /* An outage ends the run here too, as in the readers: the slot is
         * not refilled from elsewhere, nor the shard given up on. */
        if (sl_remote_fatal(rc))
            return rc;
        rec = w->rec;
        frame = rc    ? SL_FRAME_UNREAD
                : wds ? SL_FRAME_OK
                      : (int)sl_tfrecord_frame_check(rec, e->size);
        if (rc) { /* a remote shard that cannot be read: gone, as the reader decides */
            snprintf(unread_buf, sizeof unread_buf, "%s", sl_errmsg());
            unread = unread_buf;
            pthread_mutex_lock(&p->mu);
            if (!p->unreachable[shard])
                __atomic_store_n(&p->unreachable[shard], strdup(unread_buf), __ATOMIC_RELEASE);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Close up the holes of complete slot r's n samples (without the lock:
 * nothing else touches a complete slot that is not ready): each kept
 * sample, its label, id and epoch (and its GPU decode entry) move to the
 * first free position, in order. Returns the samples kept. */
static unsigned close_holes(sl_pipeline *p, unsigned r, unsigned n)
{
    sl_ring_slot *sl = &p->slots[r];
    uint8_t *host = sl_loader_host(p->loader, r);
    size_t sb = p->sample_bytes;
    unsigned m = 0;
    for (unsigned k = 0; k < n; k++) {
        if (sl->ids[k] == SL_SAMPLE_HOLE)
            continue;
        if (m != k) {
            memcpy(host + (size_t)m * sb, host + (size_t)k * sb, sb);
            sl->labels[m] = sl->labels[k];
            sl->ids[m] = sl->ids[k];
            sl->epochs[m] = sl->epochs[k];
            if (p->gdec)
                sl_gdec_move(p->gdec, r, k, m);
        }
        m++;
    }
    return m;
}

/* Submit completed batches in index order (mu held). */
static void complete_batches(sl_pipeline *p, uint32_t tid)
{
    while (p->next_submit < p->nbatches) {
        uint64_t b = p->next_submit;
        unsigned r = (unsigned)(b % p->prefetch), n = sl_pipeline_batch_size(p, b);
        sl_ring_slot *sl = &p->slots[r];
        /* another worker submits without the lock: it submits the batches
         * completed meanwhile when it comes back (this loop) */
        if (p->submit_busy || sl->batch != b || sl->done < n || sl->ready || sl->lent)
            return;
        uint64_t t = sl_now_ns();
        int rc;
        /* The GPU decode of a batch, and closing up a batch's holes (moves
         * of up to a batch of samples), run without the lock, by one
         * worker at a time. */
        int unlocked = p->gdec || sl->holes;
        unsigned holes = sl->holes, m = n - holes;
        if (unlocked) {
            p->submit_busy = 1;
            sl_pipeline_unlock(p);
        }
        if (holes)
            m = close_holes(p, r, n);
        if (p->gdec)
            rc = sl_gdec_submit(p->gdec, r, m, sl_loader_host(p->loader, r),
                                sl_loader_device(p->loader, r), sl_loader_event(p->loader, r));
        else
            rc = sl_loader_submit(p->loader, r, (size_t)m * p->sample_bytes);
        if (unlocked) {
            pthread_mutex_lock(&p->mu);
            p->submit_busy = 0;
        }
        uint64_t t1 = sl_now_ns();
        sl_trace_span(p, tid, "submit", t, t1, b);
        sl_stage_acc *a = &p->acc[SL_STAGE_LOAD];
        a->busy_ns += t1 - t;
        if (rc) {
            sl_pipeline_set_error_locked(p, rc, sl_errmsg());
            return;
        }
        a->items++;
        a->bytes += (uint64_t)m * p->sample_bytes;
        sl->ready = 1;
        p->next_submit++;
        sl_acc_fill(&p->acc[SL_STAGE_MAP],
                    (double)(p->next_submit - p->next_index) / (double)p->prefetch);
        p->wake |= SL_WAKE_BATCH;
    }
}

void *sl_worker_main(void *arg)
{
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage_acc *a = &p->acc[SL_STAGE_MAP];
    sl_unit *un = NULL;
    unsigned r = 0;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        uint32_t idx;
        uint64_t s, t = sl_now_ns();
        int rc = claim(p, &un, &idx, &s);
        uint64_t t1 = sl_now_ns();
        a->wait_in_ns += t1 - t;
        if (rc)
            break;
        /* Batches start at base_samples (a multiple of B unless created
         * with sl_pipeline_create_at): const since before the threads. */
        uint64_t b = p->base_index + (s - p->base_samples) / p->cfg.batch;
        unsigned k = (unsigned)((s - p->base_samples) % p->cfg.batch);
        r = (unsigned)(b % p->prefetch);
        while (p->slots[r].batch != b && !p->stop && !p->err)
            sl_pipeline_wait(p, &p->cv_slot);
        t = sl_now_ns();
        a->wait_out_ns += t - t1;
        if (p->stop || p->err)
            break;
        sl_pipeline_unlock(p);

        int bad = 0;
        rc = map_sample(w, un, idx, r, k, &bad);
        t1 = sl_now_ns();
        sl_trace_span(p, w->tid, "decode", t, t1, s);

        pthread_mutex_lock(&p->mu);
        a->busy_ns += t1 - t;
        if (rc) {
            sl_pipeline_set_error_locked(p, rc, sl_errmsg());
            break;
        }
        a->items++;
        a->bytes += p->sample_bytes;
        if (--un->refs == 0)
            sl_unit_release_locked(p, un);
        p->slots[r].done++;
        p->slots[r].bad += bad != 0;
        p->slots[r].holes += bad == 2;
        complete_batches(p, w->tid);
    }
    sl_pipeline_unlock(p);
    return NULL;
}

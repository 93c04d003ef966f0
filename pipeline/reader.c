/*
 * pipeline/reader.c - the read stage: R threads that claim read units in
 * order, pread them, check every record's framing and CRCs, and publish
 * them into the reorder window; plus the unit memory (live table, pool) and
 * the shared shard descriptors.
 *
 * DESIGN
 *   Threads: R reader threads (sl_reader_main), started by sl_pipeline_start.
 *   Queue: the reorder window p->win, a ring of units in seq order. A reader,
 *   holding p->mu, takes the next unit from the sl_order (p->pending holds
 *   one taken but not yet admitted), admits it at the window's tail while
 *   the window holds less than read_window bytes (a unit larger than the
 *   whole window is admitted alone), then reads it WITHOUT the lock and
 *   marks it ready. Units therefore enter the window in read order and
 *   become ready in any order; the shuffle stage (pipeline.c) consumes the
 *   window strictly from its head, waiting for the head to be ready, so the
 *   input stream is the order's stream whatever the timing.
 *   Backpressure: readers wait on cv_read while the window is full; the
 *   feeder removes a unit from the window when its last record has been
 *   pushed into the shuffle, and signals cv_read.
 *   Lock order: p->mu, then nothing (the fd mutex is only taken without
 *   p->mu). I/O and CRCs run unlocked.
 *   A record with bad framing or CRC is not an error here: it is flagged in
 *   un->bad and flows on, so stream positions never shift; the map stage
 *   applies the error policy. An I/O error or a file shorter than its index
 *   is fatal (sticky).
 *
 *   Shard handles: one byte source (records/bytesrc.h) per shard, opened on
 *   first use (double-checked under fd_mu, published with an atomic store)
 *   and shared by every thread (a local one is an O_RDONLY descriptor read
 *   with pread, which has no file position; a remote one keeps no state).
 *   Closed at destroy.
 *
 *   Shard mappings: a regular shard file is also mapped whole, read-only
 *   (sl_bytesrc_map)
 *   (MAP_SHARED: the page cache's pages, no copy), when its fd is opened.
 *   A unit is then a view into the mapping: one madvise(MADV_POPULATE_READ)
 *   maps its pages (Linux 5.14+; older kernels fault them in on first
 *   touch), and the CRC check and the decoder read the page cache in place.
 *   The pread path it replaces copied every byte into a unit buffer, and
 *   those buffers are fresh pages for as long as the shuffle buffer grows
 *   (a 10,000-record buffer over 5,000 records holds ~2,000 units of
 *   16): the kernel zeroed and faulted in every page first. Measured with
 *   `sluice profile --workers 1` on the 5000-image corpus shards (2-core
 *   EPYC VM, perf stat, the difference of a 2 s and a 5 s run): pread 9.7
 *   page faults and 570-600 us of process CPU per sample (17 % of it in
 *   the kernel); mapped 0.0 faults and 503-505 us (3 % kernel).
 *   Memory: units no longer hold anonymous memory, so the shuffle buffer
 *   costs its record handles plus page cache that the kernel can reclaim
 *   (and re-read: clean file pages).
 *   A shard truncated while a pipeline reads it would fault with SIGBUS
 *   (LMDB documents the same hazard for its readers). The populate call
 *   turns a file that is already short into an error, a file shorter than
 *   its index at open is read with pread, and every read of mapped bytes
 *   (the CRC check here, the decode in map.c) runs under a SIGBUS guard
 *   (mapguard.h) that turns a fault into the fatal error "file X changed
 *   while the pipeline read it" (the file's size, mtime and inode at open
 *   are compared with now: sl_shard_read_error). SLUICE_READ=pread (read
 *   at create) turns mapping off.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* madvise */
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/graph_int.h"
#include "pipeline/mapguard.h"
#include "records/bytesrc.h"

/* Units kept for reuse (with their buffers; at most read_window bytes in
 * all), and the largest buffer worth keeping. Why a pool: unit buffers are
 * large (block x record size, often over malloc's mmap threshold), so a
 * fresh malloc is fresh pages that the pread then faults in and the kernel
 * zeroes first; freeing returns them. In a steady state units are freed as
 * fast as they are read, so a small pool, searched best-fit, serves nearly
 * every claim without a syscall. */
#define SL_UNIT_POOL_MAX 64u
#define SL_UNIT_POOL_BYTES ((size_t)64 << 20)

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 uapi; older glibc headers lack it */
#endif

/* Note a freshly opened shard file's identity and map it (fd_mu held,
 * before srcs[shard] is published). Failure is not an error: the shard is
 * read with pread. Mapping needs the SIGBUS guard (mapguard.h). A remote
 * shard has neither. */
static void shard_map(sl_pipeline *p, uint32_t shard, sl_bytesrc *src)
{
    sl_bytesrc_id id;
    sl_shard_map *sm = &p->maps[shard];
    const uint8_t *base;
    size_t len;

    if (sl_bytesrc_is_remote(src))
        return;
    if (sl_bytesrc_identity(src, &id) != SL_OK) {
        sl_clear_error();
        return;
    }
    sm->dev = id.dev;
    sm->ino = id.ino;
    sm->size = id.size;
    sm->mtime_ns = id.mtime_ns;
    if (p->use_pread || id.size < p->src.shards[shard].bytes || sl_mapguard_install() != SL_OK)
        return;
    if (sl_bytesrc_map(src, &base, &len) != SL_OK) { /* not regular, empty, mmap failed */
        sl_clear_error();
        return;
    }
    sm->base = base;
    sm->len = len;
}

int sl_shard_changed(sl_pipeline *p, uint32_t shard, char *why, size_t n)
{
    const sl_shard_map *sm = &p->maps[shard];
    /* publishes maps[shard] */
    sl_bytesrc *src = __atomic_load_n(&p->srcs[shard], __ATOMIC_ACQUIRE);
    sl_bytesrc_id now;
    struct stat st;
    if (!src || sm->ino == 0)
        return 0;
    if (sl_bytesrc_identity(src, &now) == SL_OK && (now.size != sm->size ||
                                                    now.mtime_ns != sm->mtime_ns)) {
        if (now.size == sm->size)
            snprintf(why, n, "rewritten since it was opened: same size, new mtime");
        else
            snprintf(why, n, "%s from %llu to %llu bytes since it was opened",
                     now.size < sm->size ? "truncated" : "rewritten",
                     (unsigned long long)sm->size, (unsigned long long)now.size);
        return 1;
    }
    sl_clear_error();
    /* Replaced by rename: the open file is intact, but not what the path
     * names any more (and the index may describe the new one). */
    if (stat(p->src.shards[shard].path, &st) != 0) {
        snprintf(why, n, "removed since it was opened");
        return 1;
    }
    if ((uint64_t)st.st_ino != sm->ino || (uint64_t)st.st_dev != sm->dev) {
        snprintf(why, n, "replaced by another file since it was opened");
        return 1;
    }
    return 0;
}

int sl_shard_read_error(sl_pipeline *p, uint32_t shard, uint64_t off, const char *how)
{
    char why[160];
    const char *path = p->src.shards[shard].path;
    if (sl_shard_changed(p, shard, why, sizeof why))
        return sl_fail(SL_EIO, "sl_pipeline: %s: file changed while the pipeline read it (%s; "
                       "%s @ byte %llu)", path, why, how, (unsigned long long)off);
    return sl_fail(SL_EIO, "sl_pipeline: %s: %s @ byte %llu", path, how,
                   (unsigned long long)off);
}

/* Map the pages of [off, off + n) of a mapped shard in one call, so that the
 * CRC check does not fault page by page, and so that a file truncated since
 * open fails here rather than with SIGBUS later. */
static int shard_populate(sl_pipeline *p, const sl_shard_map *m, uint64_t off, size_t n,
                          const char *path)
{
    if (n == 0 || __atomic_load_n(&p->no_populate, __ATOMIC_RELAXED))
        return SL_OK;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)(m->base + off) & ~(pg - 1), b = (uintptr_t)(m->base + off + n);
    while (madvise((void *)a, b - a, MADV_POPULATE_READ) != 0) {
        if (errno == EINTR || errno == EAGAIN)
            continue;
        if (errno == EINVAL) { /* kernel without it: pages fault in on first touch */
            __atomic_store_n(&p->no_populate, 1, __ATOMIC_RELAXED);
            return SL_OK;
        }
        if (errno == EFAULT) /* SIGBUS territory: beyond the end of the file */
            return sl_fail(SL_ECORRUPT, "sl_pipeline: %s: file ends before byte %llu that its "
                           "index names (truncated while mapped)", path,
                           (unsigned long long)(off + n));
        return sl_fail(SL_EIO, "sl_pipeline: %s: read %zu bytes @ %llu (mapped): %s", path, n,
                       (unsigned long long)off, strerror(errno));
    }
    return SL_OK;
}

int sl_shard_src(sl_pipeline *p, uint32_t shard, sl_bytesrc **out)
{
    sl_bytesrc *src = __atomic_load_n(&p->srcs[shard], __ATOMIC_ACQUIRE);
    int rc = SL_OK;
    if (src) {
        *out = src;
        return SL_OK;
    }
    pthread_mutex_lock(&p->fd_mu);
    src = __atomic_load_n(&p->srcs[shard], __ATOMIC_ACQUIRE);
    if (!src) {
        const char *path = p->src.shards[shard].path;
        if ((rc = sl_bytesrc_open(path, &p->io, &src)))
            rc = sl_fail(rc, "sl_pipeline: %s", sl_errmsg());
        else {
            shard_map(p, shard, src);
            __atomic_store_n(&p->srcs[shard], src, __ATOMIC_RELEASE); /* publishes maps[shard] */
        }
    }
    pthread_mutex_unlock(&p->fd_mu);
    *out = src;
    return rc;
}

void sl_shard_srcs_close(sl_pipeline *p)
{
    if (!p->srcs)
        return;
    for (size_t i = 0; i < p->src.n; i++)
        sl_bytesrc_close(p->srcs[i]); /* and its mapping */
    free(p->srcs);
    free(p->maps);
    p->srcs = NULL;
    p->maps = NULL;
}

/* A free id in the live table, growing it (mu held). */
static int live_id(sl_pipeline *p, uint32_t *id)
{
    if (p->nfree == 0) {
        uint32_t ncap = p->live_cap ? p->live_cap * 2 : 256;
        if (ncap < p->live_cap || ncap > UINT32_MAX / 2)
            return SL_ENOMEM;
        sl_unit **nl = realloc(p->live, ncap * sizeof *nl);
        if (!nl)
            return SL_ENOMEM;
        p->live = nl;
        uint32_t *nf = realloc(p->free_ids, ncap * sizeof *nf);
        if (!nf)
            return SL_ENOMEM;
        p->free_ids = nf;
        /* Push the new ids so that the lowest comes out first. */
        for (uint32_t i = ncap; i > p->live_cap; i--) {
            p->live[i - 1] = NULL;
            p->free_ids[p->nfree++] = i - 1;
        }
        p->live_cap = ncap;
    }
    *id = p->free_ids[--p->nfree];
    return SL_OK;
}

/* Take the pooled unit whose buffer fits u->bytes most tightly, or else
 * the one with the largest buffer (it will be regrown); NULL when empty. */
static sl_unit *pool_take(sl_pipeline *p, uint64_t bytes)
{
    sl_unit **best = NULL, **largest = NULL;
    for (sl_unit **at = &p->pool; *at; at = &(*at)->next_free) {
        size_t cap = (*at)->cap;
        if (cap >= bytes && (!best || cap < (*best)->cap))
            best = at;
        if (!largest || cap > (*largest)->cap)
            largest = at;
    }
    sl_unit **at = best ? best : largest;
    if (!at)
        return NULL;
    sl_unit *un = *at;
    *at = un->next_free;
    p->npool--;
    p->pool_bytes -= un->cap;
    return un;
}

sl_unit *sl_unit_claim_locked(sl_pipeline *p, const sl_read_unit *u)
{
    uint32_t id;
    if (live_id(p, &id))
        return NULL;
    sl_unit *un = pool_take(p, u->bytes);
    if (!un && !(un = calloc(1, sizeof *un))) {
        p->free_ids[p->nfree++] = id;
        return NULL;
    }
    un->u = *u;
    un->id = id;
    un->pushed = 0;
    un->refs = u->nrec;
    un->ready = 0;
    un->next_free = NULL;
    p->live[id] = un;
    return un;
}

static void unit_free(sl_unit *un)
{
    free(un->buf);
    free(un->bad);
    free(un->err);
    free(un);
}

void sl_unit_release_locked(sl_pipeline *p, sl_unit *un)
{
    p->live[un->id] = NULL;
    p->free_ids[p->nfree++] = un->id;
    if (p->npool < SL_UNIT_POOL_MAX && un->cap <= SL_UNIT_POOL_BYTES &&
        p->pool_bytes + un->cap <= p->read_window) {
        un->next_free = p->pool;
        p->pool = un;
        p->npool++;
        p->pool_bytes += un->cap;
    } else {
        unit_free(un);
    }
}

void sl_units_free_all(sl_pipeline *p)
{
    for (uint32_t i = 0; i < p->live_cap; i++)
        if (p->live[i])
            unit_free(p->live[i]);
    while (p->pool) {
        sl_unit *n = p->pool->next_free;
        unit_free(p->pool);
        p->pool = n;
    }
    free(p->live);
    free(p->free_ids);
    free(p->win);
    p->live = NULL;
    p->free_ids = NULL;
    p->win = NULL;
    p->live_cap = p->nfree = p->npool = 0;
    p->pool_bytes = 0;
}

/* Every record's framing and CRCs into un->bad. */
void sl_unit_check_frames(sl_pipeline *p, sl_unit *un)
{
    const sl_read_unit *u = &un->u;
    const sl_shard_info *sh = &p->src.shards[u->shard];
    for (uint32_t i = 0; i < u->nrec; i++) {
        const sl_index_entry *e = &sh->idx[sl_unit_rec(u, i)]; /* kept records only */
        uint64_t o = e->offset - u->offset;
        if (e->offset < u->offset || e->size > u->bytes || o > u->bytes - e->size)
            un->bad[i] = SL_FRAME_SIZE;
        else if (sh->kind == SL_SHARD_WDS)
            un->bad[i] = SL_FRAME_OK; /* a tar sample: its headers are checked by the decode */
        else
            un->bad[i] = (uint8_t)sl_tfrecord_frame_check(un->data + o, e->size);
    }
}

/* check_frames on a view into mapping m: the pages were there a moment
 * ago, but a truncation since would fault (mapguard.h). */
static int check_frames_mapped(sl_pipeline *p, sl_unit *un, const sl_shard_map *m)
{
    sl_mapguard g;
    if (sigsetjmp(g.jb, 1) == 0) {
        sl_mapguard_enter(&g, m->base, m->len);
        sl_unit_check_frames(p, un);
        sl_mapguard_leave(&g);
        return SL_OK;
    }
    return sl_shard_read_error(p, un->u.shard, (uint64_t)((const uint8_t *)g.fault - m->base),
                               "SIGBUS reading the mapped file");
}

int sl_unit_prepare(sl_pipeline *p, sl_unit *un)
{
    const sl_read_unit *u = &un->u;
    const sl_shard_info *sh = &p->src.shards[u->shard];

    free(un->err);
    un->err = NULL;
    if (u->bytes > SIZE_MAX / 2)
        return sl_fail(SL_ECORRUPT, "sl_pipeline: %s: record %llu @ %llu: unit of %llu bytes",
                       sh->path, (unsigned long long)u->rec, (unsigned long long)u->offset,
                       (unsigned long long)u->bytes);
    if (un->bad_cap < u->nrec || !un->bad) {
        uint8_t *nb = malloc(u->nrec ? u->nrec : 1);
        if (!nb)
            return sl_fail(SL_ENOMEM, "sl_pipeline: out of memory");
        free(un->bad);
        un->bad = nb;
        un->bad_cap = u->nrec ? u->nrec : 1;
    }
    return SL_OK;
}

int sl_unit_buffer(sl_pipeline *p, sl_unit *un)
{
    const sl_read_unit *u = &un->u;
    if (un->cap < u->bytes || !un->buf) {
        /* Round up to 1/8 of the size's octave (at most 12.5 % slack), so
         * that pooled buffers fit the next units of similar size. */
        size_t want = u->bytes ? (size_t)u->bytes : 1, step = 4096;
        while (step * 16 <= want)
            step *= 2;
        want = (want + step - 1) / step * step;
        uint8_t *nd = malloc(want);
        if (!nd)
            return sl_fail(SL_ENOMEM, "sl_pipeline: %s: unit of %zu bytes: out of memory",
                           p->src.shards[u->shard].path, want);
        free(un->buf);
        un->buf = nd;
        un->cap = want;
    }
    un->data = un->buf;
    return SL_OK;
}

int sl_unit_read(sl_pipeline *p, sl_unit *un)
{
    const sl_read_unit *u = &un->u;
    sl_bytesrc *src = NULL;
    int rc;

    if ((rc = sl_unit_prepare(p, un)))
        return rc;
    if ((rc = sl_shard_src(p, u->shard, &src)))
        return rc;
    const sl_shard_map *m = &p->maps[u->shard];
    if (m->base && u->offset <= m->len && u->bytes <= m->len - u->offset) {
        if ((rc = shard_populate(p, m, u->offset, (size_t)u->bytes, sl_bytesrc_path(src))))
            return rc == SL_ECORRUPT ? sl_shard_read_error(p, u->shard, u->offset + u->bytes,
                                                           "mapped bytes gone")
                                     : rc;
        un->data = m->base + u->offset;
        return check_frames_mapped(p, un, m);
    }
    /* pread, or one ranged GET (the remote readers batch them: reader_remote.c) */
    if ((rc = sl_unit_buffer(p, un)))
        return rc;
    if ((rc = sl_bytesrc_read(src, un->buf, (size_t)u->bytes, u->offset))) {
        char why[160];
        if (rc == SL_ECORRUPT && sl_shard_changed(p, u->shard, why, sizeof why))
            return sl_shard_read_error(p, u->shard, u->offset + u->bytes, "short read");
        return rc;
    }
    sl_unit_check_frames(p, un);
    return SL_OK;
}

/* Append un at the window's tail (mu held). */
int sl_window_push_locked(sl_pipeline *p, sl_unit *un)
{
    if (p->win_n == p->win_cap) {
        size_t ncap = p->win_cap ? p->win_cap * 2 : 64;
        sl_unit **nw = malloc(ncap * sizeof *nw);
        if (!nw)
            return SL_ENOMEM;
        for (size_t i = 0; i < p->win_n; i++)
            nw[i] = p->win[(p->win_head + i) % p->win_cap];
        free(p->win);
        p->win = nw;
        p->win_cap = ncap;
        p->win_head = 0;
    }
    p->win[(p->win_head + p->win_n) % p->win_cap] = un;
    p->win_n++;
    p->win_bytes += un->u.bytes;
    if (p->win_bytes > p->win_peak)
        p->win_peak = p->win_bytes;
    sl_acc_fill(&p->acc[SL_STAGE_READ], (double)p->win_bytes / (double)p->read_window);
    return SL_OK;
}

/* Take the next unit from the order into p->pending (mu held). 1 when one
 * is pending, 0 when the order is over, < 0 on error (set on p). */
int sl_take_pending_locked(sl_pipeline *p)
{
    if (p->have_pending)
        return 1;
    if (p->order_done)
        return 0;
    int rc = sl_order_next_unit(p->order, &p->pending);
    if (rc == SL_EOF) {
        p->order_done = 1;
        p->wake |= SL_WAKE_UNIT; /* a claimer may wait for input that never comes */
        return 0;
    }
    if (rc) {
        sl_pipeline_set_error_locked(p, rc, sl_errmsg());
        return -1;
    }
    p->have_pending = 1;
    return 1;
}

void *sl_reader_main(void *arg)
{
    sl_reader_ctx *ctx = arg;
    sl_pipeline *p = ctx->p;
    uint64_t busy = 0, wait_out = 0, items = 0, bytes = 0;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* Flush the previous unit's figures (mu is held here anyway). */
        sl_stage_acc *a = &p->acc[SL_STAGE_READ];
        a->busy_ns += busy, a->wait_out_ns += wait_out, a->items += items, a->bytes += bytes;
        busy = wait_out = items = bytes = 0;
        if (p->stop || p->err)
            break;
        if (sl_take_pending_locked(p) <= 0)
            break;
        if (p->win_bytes > 0 && p->win_bytes + p->pending.bytes > p->read_window) {
            uint64_t t = sl_now_ns();
            sl_pipeline_wait(p, &p->cv_read);
            wait_out += sl_now_ns() - t;
            continue;
        }
        sl_unit *un = sl_unit_claim_locked(p, &p->pending);
        if (!un || sl_window_push_locked(p, un)) {
            if (un)
                sl_unit_release_locked(p, un);
            sl_pipeline_set_error_locked(p, SL_ENOMEM, "sl_pipeline: reader: out of memory");
            break;
        }
        p->have_pending = 0;
        if (un->u.seq == p->skip_seq && p->skip_n) { /* resume: fed before the cut */
            un->pushed = p->skip_n;
            un->refs = un->u.nrec - p->skip_n;
        }
        sl_pipeline_unlock(p);

        uint64_t t = sl_now_ns();
        int rc = sl_unit_read(p, un);
        uint64_t t1 = sl_now_ns();
        busy += t1 - t;
        items += un->u.nrec;
        bytes += un->u.bytes;
        sl_trace_span(p, ctx->tid, "read", t, t1, un->u.seq);

        pthread_mutex_lock(&p->mu);
        if (rc) {
            sl_pipeline_set_error_locked(p, rc, sl_errmsg());
            continue;
        }
        un->ready = 1;
        p->wake |= SL_WAKE_UNIT;
    }
    sl_pipeline_unlock(p);
    return NULL;
}

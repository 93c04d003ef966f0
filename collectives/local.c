/*
 * collectives/local.c - the `local` backend: world replicas as threads of
 * one process, all-reduce as a ring reduce-scatter then ring all-gather in
 * which each rank reads its predecessor's buffer directly (no staging
 * copies), synchronised by one monotonically increasing step counter per
 * rank (C11 atomics, acquire/release). No global lock.
 *
 * DESIGN
 *   Threads: the world rank threads (or their comms' progress threads,
 *   comm.c), one caller per comm at a time; sl_comm_abort from any thread.
 *   Shared state: the group (sl_comm_group: world slots + a failure record)
 *   and the callers' buffers. Rank r's slot holds `done`, the number of
 *   steps r has completed since the group was made, and the descriptor of
 *   r's current collective (kind, count, dtype, op/root, buffer pointers).
 *   Only r writes them; r's neighbours read them. Every rank takes the same
 *   number of steps in every collective (they depend on count, dtype and
 *   world only), so one counter says which step of which collective a rank
 *   is at, and a waiter compares it against an absolute target.
 *
 *   All-reduce, one collective starting at r's counter value b:
 *     step b        "arrive": r writes its descriptor, publishes done = b+1
 *                   (release). A reader that sees done >= b+1 (acquire) may
 *                   read the descriptor and r's input.
 *     per segment of S = cfg.segment_bytes (a cache-sized piece of the
 *     buffer, each split in world chunks 0..N-1; chunks may be empty when
 *     the segment has fewer than N elements), local steps t = 1 .. 2N-2:
 *       t = 1..N-1    (reduce-scatter) r adds chunk k = (r-t) mod N of rank
 *                     r-1's buffer into its own chunk k. After t = N-1 rank r
 *                     holds chunk (r+1) mod N summed over all ranks; for AVG
 *                     r scales it by 1/N right there, once.
 *       t = N..2N-2   (all-gather) r copies chunk k = (r-(t-N)) mod N of rank
 *                     r-1's buffer into its own.
 *     After each step r publishes done = (that step's number) + 1.
 *
 *   Hazards, with d = (r - k) mod N for chunk k of rank r's buffer:
 *     writes by r:    RS step d (d >= 1)          AG step N+d (d <= N-2)
 *     reads by r+1:   RS step d+1 (d <= N-2)      AG step N+d+1 (d <= N-3),
 *                                                 AG step N (d = N-1)
 *   (a) read after write: at step t, r reads what r-1 wrote at its step t-1
 *       (RS: the partial sum of t ranks; first AG step: r-1's fully reduced
 *       chunk; later AG steps: what r-1 copied at t-1; RS t=1: r-1's input,
 *       covered by its arrive). So before step t: wait until r-1 completed
 *       step t-1 (done[r-1] >= that step + 1).
 *   (b) write after read: the only read of a chunk by r+1 that comes before
 *       r writes that chunk is the RS read at step d+1 vs r's AG write at
 *       N+d: before AG step t, r+1 must have completed step t-N+1. (a)
 *       already guarantees it, so there is no second wait: r passed (a) for
 *       step t, so r-1 completed t-1, so (its own (a)) r-2 completed t-2,
 *       ..., so r-(N-1) = r+1 completed t-(N-1) (steps t-N+2 .. t-1 are
 *       >= 2: data steps, each entered through (a)). RS writes come
 *       before every read of the same chunk in the collective, and reads of
 *       r-1's buffer are protected by (b) on r-1's side.
 *   (c) across collectives: the caller may reuse the buffer, and r's next
 *       arrive rewrites the descriptor, so before returning r waits until
 *       r+1 completed the whole collective (its last read of r's buffer and
 *       descriptor is in it). r+1's completion waits only on (a), never
 *       on its own return wait, so the chain of return waits ends.
 *   Segments are disjoint memory; their steps just continue the count.
 *
 *   broadcast: arrive; step 2: a non-root waits for root's arrive and
 *   copies root's buffer; root waits until every rank completed step 2
 *   (nobody reads root's buffer any more). all-gather: arrive; step 2: r
 *   copies each peer's send (peers in the order r+1, r+2, ... so the ranks
 *   read different sources) once it arrived; then r waits until every rank
 *   completed step 2 (nobody reads r's send any more). barrier: arrive, then
 *   wait for every rank's arrive. Descriptors are checked where the (c)
 *   rule keeps them stable: all-reduce against r-1's, broadcast against
 *   root's, all-gather against everyone's; a mismatch fails the group with
 *   SL_EINVAL naming both calls.
 *
 *   Waiting: spin on the counter (acquire) ~5 us, then sched_yield ~20 us
 *   (the tests run 4 ranks on 2 cores: a spinner must give the core to the
 *   rank it waits for), then sleep on the awaited rank's condvar with the
 *   deadline. A publisher stores done (seq_cst) and, if that slot has
 *   sleepers (seq_cst load), broadcasts under the slot's mutex; a sleeper
 *   counts itself in and re-reads done under the same mutex, so a wake-up
 *   cannot be lost (Dekker: one of the two sees the other).
 *   Failure: the group keeps the first failure (code, message; under g->mu,
 *   then fail_code stored with release) and wakes every slot's sleepers.
 *   sl_comm_abort records SL_ECANCELED "rank N aborted: why"; a wait past
 *   cfg.timeout_ms records SL_ETIMEDOUT naming the rank waited for and the
 *   rank furthest behind (the lowest counter: the one that died or never
 *   arrived); a rank that closed its comm while others still need its
 *   steps records SL_ECANCELED. Every later collective of every rank of
 *   the group returns that failure: the group is broken (as comm.c's
 *   sticky error, but for all ranks at once).
 *   Locks: g->mu guards the failure record, a slot's mu its sleepers; no
 *   thread holds two at once.
 *
 * Precision: f16/bf16 partial sums are rounded to the dtype at every hop
 * (sl_reduce_add adds in f32 and rounds once per add), like NCCL's ring; a
 * sum over N ranks is rounded N-1 times, in ring order, which differs per
 * chunk. Each element is reduced once, by one chain, and copied to the
 * others, so every rank gets bitwise the same values.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/collectives_int.h"
#include "common/clock.h"

#define LINE 64
/* A waiter spins on the counter this long, then yields the core this long,
 * then sleeps. Measured with perf/allreduce on a loaded 2-core machine
 * (world 2 and 4): longer spins (20 + 200 us) doubled small-message times
 * and made 1 MiB at world 4 up to 8x slower, because spinners take the
 * core from the rank they wait for; a few microseconds cover the handoffs
 * where the neighbour is running. */
#define SPIN_NS 5000ull
#define YIELD_NS 20000ull

typedef enum { K_NONE = 0, K_ALLREDUCE, K_BROADCAST, K_ALLGATHER, K_BARRIER } coll_kind;

typedef enum { SLOT_FREE = 0, SLOT_OPEN, SLOT_CLOSED } slot_state;

/* One rank's shared state; three cache lines so that the counter the
 * neighbours poll does not share a line with the descriptor or the lock. */
typedef struct local_slot {
    _Alignas(LINE) _Atomic uint64_t done; /* steps completed since the group began */
    _Atomic uint64_t ncoll;               /* collectives entered */
    _Atomic int sleepers;                 /* threads asleep on cv waiting for done */
    _Atomic int state;                    /* slot_state */

    /* the current collective, written before its arrive step is published */
    _Alignas(LINE) _Atomic int kind;      /* coll_kind */
    _Atomic int dtype;
    _Atomic int arg;                      /* redop (all-reduce) or root (broadcast) */
    _Atomic size_t count;
    _Atomic(void *) buf;                  /* all-reduce / broadcast: buf; all-gather: recv */
    _Atomic(const void *) send;           /* all-gather */

    _Alignas(LINE) pthread_mutex_t mu;
    pthread_cond_t cv;
    int rank;
    struct sl_comm_group *g;
} local_slot;

struct sl_comm_group {
    int world;
    sl_comm_config cfg;          /* segment_bytes resolved */
    _Atomic int refs;            /* the group handle + each open comm */
    pthread_mutex_t mu;          /* writers of the failure record */
    _Atomic int fail_code;       /* 0, or the group's failure (set once) */
    char fail_msg[SL_ERRMSG_MAX];
    local_slot *slots;           /* world of them, LINE-aligned */
};

/* What a wait reports about the collective it is in. */
typedef struct coll_ctx {
    const char *fn;              /* public entry point, for messages */
    coll_kind kind;
    uint64_t base, nsteps;       /* arrive step; steps this collective takes */
    uint64_t coll;               /* its number on this rank (1-based) */
} coll_ctx;

static const char *kind_name(int k)
{
    switch (k) {
    case K_ALLREDUCE: return "allreduce";
    case K_BROADCAST: return "broadcast";
    case K_ALLGATHER: return "allgather";
    case K_BARRIER: return "barrier";
    }
    return "nothing";
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static local_slot *slot_of(sl_comm_group *g, int rank)
{
    return &g->slots[((rank % g->world) + g->world) % g->world];
}

/* ------------------------------------------------------------ failures */

/* Wake every sleeper of the group (after a failure or a close). */
static void wake_all(sl_comm_group *g)
{
    for (int i = 0; i < g->world; i++) {
        local_slot *s = &g->slots[i];
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Record the group's failure (the first one wins) and wake everyone. */
static void fail_group(sl_comm_group *g, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_group(sl_comm_group *g, int code, const char *fmt, ...)
{
    pthread_mutex_lock(&g->mu);
    if (!atomic_load_explicit(&g->fail_code, memory_order_relaxed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->fail_msg, sizeof g->fail_msg, fmt, ap);
        va_end(ap);
        atomic_store(&g->fail_code, code); /* seq_cst: see wait_done */
    }
    pthread_mutex_unlock(&g->mu);
    wake_all(g);
}

/* The group's failure as this rank's error, or SL_OK. fail_msg is written
 * once, before fail_code is stored, and never again. */
static int group_error(const local_slot *me, const char *fn)
{
    int code = atomic_load_explicit(&me->g->fail_code, memory_order_acquire);
    if (!code)
        return SL_OK;
    return sl_fail(code, "%s: local rank %d: %s", fn, me->rank, me->g->fail_msg);
}

/* The timeout's message: who we waited for and who is furthest behind. */
static int fail_timeout(local_slot *me, const local_slot *peer, uint64_t target,
                        const coll_ctx *x, double waited_s)
{
    sl_comm_group *g = me->g;
    int lag = peer->rank;
    uint64_t lag_done = UINT64_MAX;
    for (int i = 0; i < g->world; i++) {
        uint64_t d = atomic_load_explicit(&g->slots[i].done, memory_order_relaxed);
        if (d < lag_done) {
            lag_done = d;
            lag = i;
        }
    }
    const local_slot *ls = &g->slots[lag];
    int st = atomic_load_explicit(&ls->state, memory_order_relaxed);
    uint64_t lag_coll = atomic_load_explicit(&ls->ncoll, memory_order_relaxed);
    const char *why = st == SLOT_FREE     ? "; its comm was never opened"
                      : st == SLOT_CLOSED ? "; its comm is closed"
                                          : "";
    fail_group(g, SL_ETIMEDOUT,
               "rank %d waited %.1f s for rank %d (%s, collective #%llu, step %llu of %llu): "
               "rank %d is furthest behind (%llu collectives entered, against %llu on rank %d%s): "
               "a replica died or never arrived",
               me->rank, waited_s, peer->rank, kind_name(x->kind), (unsigned long long)x->coll,
               (unsigned long long)(target - x->base), (unsigned long long)x->nsteps, lag,
               (unsigned long long)lag_coll, (unsigned long long)x->coll, me->rank, why);
    return group_error(me, x->fn);
}

/* ------------------------------------------------------------- waiting */

/* Publish that me completed its steps up to done = v. */
static void publish(local_slot *me, uint64_t v)
{
    atomic_store(&me->done, v); /* seq_cst: pairs with the sleeper's count-in */
    if (atomic_load(&me->sleepers) > 0) {
        pthread_mutex_lock(&me->mu);
        pthread_cond_broadcast(&me->cv);
        pthread_mutex_unlock(&me->mu);
    }
}

/* Wait until peer's done >= target (acquire), the group fails, or the
 * deadline (cfg.timeout_ms from now) passes. */
static int wait_done(local_slot *me, local_slot *peer, uint64_t target, const coll_ctx *x,
                     int timeout_ms)
{
    if (atomic_load_explicit(&peer->done, memory_order_acquire) >= target)
        return SL_OK;
    sl_comm_group *g = me->g;
    uint64_t t0 = sl_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000ull;

    /* spin, then yield */
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&peer->done, memory_order_acquire) >= target)
            return SL_OK;
        if ((i & 63) == 0) {
            if (atomic_load_explicit(&g->fail_code, memory_order_relaxed))
                return group_error(me, x->fn);
            uint64_t el = sl_now_ns() - t0;
            if (el >= SPIN_NS + YIELD_NS)
                break;
            if (el >= SPIN_NS)
                sched_yield();
        }
        cpu_relax();
    }

    /* sleep on peer's condvar */
    struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
    int rc = SL_OK, closed = 0;
    pthread_mutex_lock(&peer->mu);
    atomic_fetch_add(&peer->sleepers, 1);
    for (;;) {
        if (atomic_load(&peer->done) >= target)
            break;
        if (atomic_load(&g->fail_code)) {
            rc = -1;
            break;
        }
        if (atomic_load(&peer->state) == SLOT_CLOSED) {
            closed = 1;
            break;
        }
        if (pthread_cond_timedwait(&peer->cv, &peer->mu, &ts) && sl_now_ns() >= deadline) {
            if (atomic_load(&peer->done) < target)
                rc = SL_ETIMEDOUT;
            break;
        }
    }
    atomic_fetch_sub(&peer->sleepers, 1);
    pthread_mutex_unlock(&peer->mu);

    if (closed) {
        fail_group(g, SL_ECANCELED,
                   "rank %d closed its comm after %llu collectives while rank %d waited for it "
                   "in %s #%llu",
                   peer->rank,
                   (unsigned long long)atomic_load_explicit(&peer->ncoll, memory_order_relaxed),
                   me->rank, kind_name(x->kind), (unsigned long long)x->coll);
        return group_error(me, x->fn);
    }
    if (rc == SL_ETIMEDOUT)
        return fail_timeout(me, peer, target, x, (double)(sl_now_ns() - t0) * 1e-9);
    if (rc)
        return group_error(me, x->fn);
    return SL_OK; /* the seq_cst load of done acquired peer's writes */
}

/* Begin a collective: write the descriptor, publish the arrive step.
 * Returns the arrive step's number (this rank's counter before it). */
static uint64_t arrive(local_slot *me, coll_kind k, size_t count, sl_dtype t, int arg,
                       void *buf, const void *send, coll_ctx *x, const char *fn, uint64_t nsteps)
{
    uint64_t b = atomic_load_explicit(&me->done, memory_order_relaxed);
    uint64_t n = atomic_load_explicit(&me->ncoll, memory_order_relaxed) + 1;
    atomic_store_explicit(&me->kind, (int)k, memory_order_relaxed);
    atomic_store_explicit(&me->dtype, (int)t, memory_order_relaxed);
    atomic_store_explicit(&me->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&me->count, count, memory_order_relaxed);
    atomic_store_explicit(&me->buf, buf, memory_order_relaxed);
    atomic_store_explicit(&me->send, send, memory_order_relaxed);
    atomic_store_explicit(&me->ncoll, n, memory_order_relaxed);
    *x = (coll_ctx){fn, k, b, nsteps, n};
    publish(me, b + 1);
    return b;
}

/* Check peer's descriptor (peer has arrived at this collective and cannot
 * leave it yet) against ours. */
static int check_peer(local_slot *me, const local_slot *peer, const coll_ctx *x, size_t count,
                      sl_dtype t, int arg)
{
    int pk = atomic_load_explicit(&peer->kind, memory_order_relaxed);
    int pt = atomic_load_explicit(&peer->dtype, memory_order_relaxed);
    int pa = atomic_load_explicit(&peer->arg, memory_order_relaxed);
    size_t pc = atomic_load_explicit(&peer->count, memory_order_relaxed);
    if (pk == (int)x->kind && pt == (int)t && pa == arg && pc == count)
        return SL_OK;
    const char *argn = x->kind == K_BROADCAST ? "root" : "op";
    fail_group(me->g, SL_EINVAL,
               "collective #%llu differs between ranks: rank %d called %s(count %zu, %s, %s %d) "
               "but rank %d called %s(count %zu, %s, %s %d)",
               (unsigned long long)x->coll, me->rank, kind_name(x->kind), count,
               sl_dtype_name(t), argn, arg, peer->rank, kind_name(pk), pc,
               sl_dtype_name((sl_dtype)pt), argn, pa);
    return group_error(me, x->fn);
}

/* ----------------------------------------------------------- all-reduce */

/* Chunk k of a segment of n elements split in N: [lo, hi). Chunks of more
 * than a cache line are rounded up to whole lines (align elements), so the
 * ranks' chunks do not share lines; the last chunks may then be short or
 * empty, as they are when n < N. */
static void chunk_range(size_t n, int N, int k, size_t align, size_t *lo, size_t *hi)
{
    size_t cs = (n + (size_t)N - 1) / (size_t)N;
    if (cs > align)
        cs = (cs + align - 1) / align * align;
    size_t a = (size_t)k * cs, b = a + cs;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

static int local_allreduce(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op)
{
    local_slot *me = c->impl;
    sl_comm_group *g = me->g;
    const char *fn = "sl_comm_allreduce";
    int N = g->world, r = me->rank, rc;
    if ((rc = group_error(me, fn)))
        return rc;
    if (N == 1)
        return SL_OK; /* sum of one; AVG scales by 1: both the identity */

    size_t esz = sl_dtype_size(t), align = LINE / esz;
    size_t seg = g->cfg.segment_bytes / esz;
    if (seg < 1)
        seg = 1;
    uint64_t nseg = (count + seg - 1) / seg, per_seg = 2 * (uint64_t)(N - 1);
    local_slot *prev = slot_of(g, r - 1), *next = slot_of(g, r + 1);
    int tmo = c->cfg.timeout_ms;
    coll_ctx x;
    uint64_t b = arrive(me, K_ALLREDUCE, count, t, (int)op, buf, NULL, &x, fn, 1 + nseg * per_seg);

    if ((rc = wait_done(me, prev, b + 1, &x, tmo)) ||
        (rc = check_peer(me, prev, &x, count, t, (int)op)))
        return rc;
    char *mine = buf;
    const char *theirs = atomic_load_explicit(&prev->buf, memory_order_relaxed);
    float scale = 1.0f / (float)N;

    uint64_t step = b + 1; /* global number of the next step */
    for (uint64_t j = 0; j < nseg; j++) {
        size_t off = (size_t)j * seg, n = count - off < seg ? count - off : seg;
        for (int ts = 1; ts <= 2 * N - 2; ts++, step++) {
            /* (a): r-1 completed step-1, which implies (b) (DESIGN) */
            if ((rc = wait_done(me, prev, step, &x, tmo)))
                return rc;
            int k = ts < N ? (r - ts + N) % N : (r - (ts - N) + N) % N;
            size_t lo, hi;
            chunk_range(n, N, k, align, &lo, &hi);
            if (hi > lo) {
                size_t at = (off + lo) * esz;
                if (ts < N) {
                    sl_reduce_add(t, mine + at, theirs + at, hi - lo);
                    if (ts == N - 1 && op == SL_RED_AVG)
                        sl_scale(t, mine + at, hi - lo, scale);
                } else {
                    memcpy(mine + at, theirs + at, (hi - lo) * esz);
                }
            }
            publish(me, step + 1);
        }
    }
    /* (c): r+1 finished reading this buffer */
    return wait_done(me, next, b + x.nsteps, &x, tmo);
}

/* ------------------------------------------------- broadcast, gather, barrier */

static int local_broadcast(sl_comm *c, void *buf, size_t count, sl_dtype t, int root)
{
    local_slot *me = c->impl;
    sl_comm_group *g = me->g;
    const char *fn = "sl_comm_broadcast";
    int rc, tmo = c->cfg.timeout_ms;
    if ((rc = group_error(me, fn)) || g->world == 1)
        return rc;
    coll_ctx x;
    uint64_t b = arrive(me, K_BROADCAST, count, t, root, buf, NULL, &x, fn, 2);
    if (me->rank != root) {
        local_slot *rs = &g->slots[root];
        if ((rc = wait_done(me, rs, b + 1, &x, tmo)) ||
            (rc = check_peer(me, rs, &x, count, t, root)))
            return rc;
        memcpy(buf, atomic_load_explicit(&rs->buf, memory_order_relaxed),
               count * sl_dtype_size(t));
        publish(me, b + 2);
        return SL_OK;
    }
    publish(me, b + 2);
    for (int i = 1; i < g->world; i++) /* nobody reads root's buffer any more */
        if ((rc = wait_done(me, slot_of(g, root + i), b + 2, &x, tmo)))
            return rc;
    return SL_OK;
}

static int local_allgather(sl_comm *c, const void *send, void *recv, size_t count, sl_dtype t)
{
    local_slot *me = c->impl;
    sl_comm_group *g = me->g;
    const char *fn = "sl_comm_allgather";
    int rc, tmo = c->cfg.timeout_ms, N = g->world, r = me->rank;
    size_t bytes = count * sl_dtype_size(t);
    if ((rc = group_error(me, fn)))
        return rc;
    char *out = recv;
    if (send != out + (size_t)r * bytes)
        memcpy(out + (size_t)r * bytes, send, bytes);
    if (N == 1)
        return SL_OK;
    coll_ctx x;
    uint64_t b = arrive(me, K_ALLGATHER, count, t, 0, recv, send, &x, fn, 2);
    for (int i = 1; i < N; i++) {
        local_slot *p = slot_of(g, r + i);
        if ((rc = wait_done(me, p, b + 1, &x, tmo)) || (rc = check_peer(me, p, &x, count, t, 0)))
            return rc;
        memcpy(out + (size_t)p->rank * bytes, atomic_load_explicit(&p->send, memory_order_relaxed),
               bytes);
    }
    publish(me, b + 2);
    for (int i = 1; i < N; i++) /* nobody reads this rank's send any more */
        if ((rc = wait_done(me, slot_of(g, r + i), b + 2, &x, tmo)))
            return rc;
    return SL_OK;
}

static int local_barrier(sl_comm *c)
{
    local_slot *me = c->impl;
    sl_comm_group *g = me->g;
    const char *fn = "sl_comm_barrier";
    int rc;
    if ((rc = group_error(me, fn)) || g->world == 1)
        return rc;
    coll_ctx x;
    uint64_t b = arrive(me, K_BARRIER, 0, SL_DTYPE_F32, 0, NULL, NULL, &x, fn, 1);
    for (int i = 1; i < g->world; i++)
        if ((rc = wait_done(me, slot_of(g, me->rank + i), b + 1, &x, c->cfg.timeout_ms)))
            return rc;
    return SL_OK;
}

/* ------------------------------------------------------- abort, lifetime */

static void local_abort(sl_comm *c, const char *why)
{
    local_slot *me = c->impl;
    fail_group(me->g, SL_ECANCELED, "rank %d aborted: %s", me->rank, why);
}

static void group_unref(sl_comm_group *g)
{
    if (atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    for (int i = 0; i < g->world; i++) {
        pthread_cond_destroy(&g->slots[i].cv);
        pthread_mutex_destroy(&g->slots[i].mu);
    }
    pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g);
}

static void local_destroy(sl_comm *c)
{
    local_slot *me = c->impl;
    if (!me)
        return;
    sl_comm_group *g = me->g;
    /* Waiters still needing this rank's steps wake and fail (wait_done). */
    pthread_mutex_lock(&me->mu);
    atomic_store(&me->state, SLOT_CLOSED);
    pthread_cond_broadcast(&me->cv);
    pthread_mutex_unlock(&me->mu);
    c->impl = NULL;
    group_unref(g);
}

static const sl_comm_vt local_vt = {
    .name = "local",
    .allreduce = local_allreduce,
    .broadcast = local_broadcast,
    .allgather = local_allgather,
    .barrier = local_barrier,
    .abort_peers = local_abort,
    .destroy = local_destroy,
};

int sl_comm_local_group_create(int world, const sl_comm_config *cfg, sl_comm_group **out)
{
    const char *fn = "sl_comm_local_group_create";
    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL output pointer", fn);
    *out = NULL;
    if (cfg && sl_check_config_size(fn, cfg->size, sizeof *cfg))
        return SL_EINVAL;
    if (world < 1 || world > 65536)
        return sl_fail(SL_EINVAL, "%s: world %d outside [1, 65536]", fn, world);
    sl_comm_group *g = calloc(1, sizeof *g);
    void *slots = NULL;
    if (!g || posix_memalign(&slots, LINE, (size_t)world * sizeof(local_slot))) {
        free(g);
        return sl_fail(SL_ENOMEM, "%s: world %d: out of memory", fn, world);
    }
    memset(slots, 0, (size_t)world * sizeof(local_slot));
    g->slots = slots;
    g->world = world;
    g->cfg = cfg ? *cfg : (sl_comm_config)SL_COMM_CONFIG_INIT;
    if (g->cfg.segment_bytes == 0)
        g->cfg.segment_bytes = ((size_t)1 << 20) * (size_t)world;
    atomic_init(&g->refs, 1);
    atomic_init(&g->fail_code, 0);

    pthread_condattr_t ca;
    int made = 0, ok = !pthread_mutex_init(&g->mu, NULL);
    if (ok && pthread_condattr_init(&ca) == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
        for (; made < world; made++) {
            local_slot *s = &g->slots[made];
            s->rank = made;
            s->g = g;
            if (pthread_mutex_init(&s->mu, NULL))
                break;
            if (pthread_cond_init(&s->cv, &ca)) {
                pthread_mutex_destroy(&s->mu);
                break;
            }
        }
        pthread_condattr_destroy(&ca);
    }
    if (!ok || made < world) {
        for (int i = 0; i < made; i++) {
            pthread_cond_destroy(&g->slots[i].cv);
            pthread_mutex_destroy(&g->slots[i].mu);
        }
        if (ok)
            pthread_mutex_destroy(&g->mu);
        free(g->slots);
        free(g);
        return sl_fail(SL_ENOMEM, "%s: world %d: cannot make the locks", fn, world);
    }
    *out = g;
    return SL_OK;
}

int sl_comm_local_open(sl_comm_group *g, int rank, sl_comm **out)
{
    const char *fn = "sl_comm_local_open";
    if (!g || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    if (rank < 0 || rank >= g->world)
        return sl_fail(SL_EINVAL, "%s: rank %d outside [0, %d)", fn, rank, g->world);
    local_slot *s = &g->slots[rank];
    int expect = SLOT_FREE;
    if (!atomic_compare_exchange_strong(&s->state, &expect, SLOT_OPEN))
        return sl_fail(SL_EINVAL, "%s: rank %d: already opened (each rank opens once)", fn,
                       rank);
    sl_comm *c = sl_comm_alloc(&local_vt, SL_COMM_LOCAL, rank, g->world, &g->cfg);
    if (!c) {
        atomic_store(&s->state, SLOT_CLOSED); /* its steps will never come */
        wake_all(g);
        return sl_fail(SL_ENOMEM, "%s: rank %d: %s", fn, rank, sl_errmsg());
    }
    atomic_fetch_add(&g->refs, 1);
    c->impl = s;
    *out = c;
    return SL_OK;
}

void sl_comm_local_group_destroy(sl_comm_group *g)
{
    if (g)
        group_unref(g); /* freed when its last comm is destroyed too */
}

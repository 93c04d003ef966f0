/*
 * collectives/comm.c - the public sl_comm_* entry points: argument checks,
 * sticky errors, the asynchronous all-reduce requests, then the backend's
 * table (collectives_int.h).
 *
 * DESIGN (threads). A communicator belongs to its rank's thread. The first
 * sl_comm_allreduce_start of a backend without native async starts one
 * progress thread for the comm; from then on every operation of the comm
 * runs there, in the order it was issued:
 *
 *   rank thread:  start(b1) start(b2) ... allreduce(x) ... wait(b1) wait(b2)
 *                    │         │               │ (enqueued, waited at once)
 *   progress:        ▼         ▼               ▼
 *                  run b1 -> run b2 -> ... -> run x        (FIFO, one at a time)
 *
 * so the backend sees one caller at a time and every rank issues the same
 * sequence (the rule that keeps ring and MPI collectives matched). Lock:
 * c->mu protects the queue, the request states and `stopping`; the backend
 * call itself runs without it. Backends with native async (nccl) are called
 * directly and keep their own order (one stream).
 *
 * Errors. The first failure marks the comm broken and keeps its message;
 * every later call returns the same code and message (NCCL's sticky async
 * error): after a failed collective the ranks no longer agree on where
 * they are, so going on would only hang or mix buffers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/collectives_int.h"

/* ------------------------------------------------------------------ names */

const char *sl_comm_backend_name(sl_comm_backend b)
{
    switch (b) {
    case SL_COMM_LOCAL: return "local";
    case SL_COMM_MPI: return "mpi";
    case SL_COMM_NCCL: return "nccl";
    }
    return "?";
}

int sl_comm_backend_parse(const char *name, sl_comm_backend *out)
{
    for (int b = SL_COMM_LOCAL; b <= SL_COMM_NCCL; b++)
        if (name && strcmp(name, sl_comm_backend_name((sl_comm_backend)b)) == 0) {
            *out = (sl_comm_backend)b;
            return SL_OK;
        }
    return sl_fail(SL_EINVAL, "sl_comm_backend_parse: '%s': expected local, mpi or nccl",
                   name ? name : "(null)");
}

int sl_comm_backend_available(sl_comm_backend b)
{
    switch (b) {
    case SL_COMM_LOCAL: return 1;
#ifdef SLUICE_WITH_MPI
    case SL_COMM_MPI: return 1;
#endif
#ifdef SLUICE_WITH_NCCL
    case SL_COMM_NCCL: return 1;
#endif
    default: return 0;
    }
}

/* ----------------------------------------------------------------- handle */

sl_comm *sl_comm_alloc(const sl_comm_vt *vt, sl_comm_backend b, int rank, int world,
                       const sl_comm_config *cfg)
{
    sl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        sl_fail(SL_ENOMEM, "sl_comm: %s rank %d: out of memory", vt->name, rank);
        return NULL;
    }
    if (pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        sl_fail(SL_ENOMEM, "sl_comm: %s rank %d: pthread_mutex_init failed", vt->name, rank);
        return NULL;
    }
    if (pthread_cond_init(&c->cv, NULL)) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        sl_fail(SL_ENOMEM, "sl_comm: %s rank %d: pthread_cond_init failed", vt->name, rank);
        return NULL;
    }
    c->vt = vt;
    c->backend = b;
    c->rank = c->local_rank = rank;
    c->world = c->local_world = world;
    c->cfg = cfg ? *cfg : (sl_comm_config)SL_COMM_CONFIG_INIT;
    if (c->cfg.timeout_ms <= 0)
        c->cfg.timeout_ms = 300000;
    if (c->cfg.segment_bytes == 0)
        c->cfg.segment_bytes = (size_t)1 << 20;
    return c;
}

void sl_comm_free(sl_comm *c)
{
    if (!c)
        return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int sl_comm_rank(const sl_comm *c) { return c ? c->rank : -1; }
int sl_comm_world(const sl_comm *c) { return c ? c->world : 0; }
int sl_comm_local_rank(const sl_comm *c) { return c ? c->local_rank : -1; }
int sl_comm_local_world(const sl_comm *c) { return c ? c->local_world : 0; }
sl_comm_backend sl_comm_backend_of(const sl_comm *c) { return c->backend; }

/* ---------------------------------------------------------- sticky errors */

/* Called on the thread that got rc from the backend (its message is in
 * sl_errmsg()); the first error wins. */
static int mark_broken(sl_comm *c, int rc)
{
    pthread_mutex_lock(&c->mu);
    if (!c->broken) {
        c->broken = rc;
        snprintf(c->broken_msg, sizeof c->broken_msg, "%s", sl_errmsg());
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int check_broken(sl_comm *c, const char *fn)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->broken;
    char msg[SL_ERRMSG_MAX];
    if (rc)
        memcpy(msg, c->broken_msg, sizeof msg);
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return sl_fail(rc, "%s: %s rank %d: communicator broken by an earlier error: %s", fn,
                       c->vt->name, c->rank, msg);
    return SL_OK;
}

/* ----------------------------------------------------------- progress thread */

typedef enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, OP_BARRIER } op_kind;

/* A queued operation: async all-reduces are sl_comm_req; blocking calls made
 * while the progress thread runs are queued as a req too (kind != allreduce
 * keeps its extra arguments here). */
typedef struct queued {
    sl_comm_req req;  /* first: a queued is an sl_comm_req */
    op_kind kind;
    const void *send;
    int root;
} queued;

static int run_op(sl_comm *c, queued *q)
{
    switch (q->kind) {
    case OP_ALLREDUCE: return c->vt->allreduce(c, q->req.buf, q->req.count, q->req.t, q->req.op);
    case OP_BROADCAST: return c->vt->broadcast(c, q->req.buf, q->req.count, q->req.t, q->root);
    case OP_ALLGATHER:
        return c->vt->allgather(c, q->send, q->req.buf, q->req.count, q->req.t);
    case OP_BARRIER: return c->vt->barrier(c);
    }
    return sl_fail(SL_EINVAL, "sl_comm: bad queued op");
}

static void *progress_main(void *arg)
{
    sl_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stopping)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head)
            break; /* stopping and drained */
        queued *q = (queued *)c->head;
        c->head = q->req.next;
        if (!c->head)
            c->tail = NULL;
        int broken = c->broken;
        pthread_mutex_unlock(&c->mu);
        int rc;
        char msg[SL_ERRMSG_MAX];
        if (broken) {
            rc = check_broken(c, "sl_comm_wait");
        } else {
            rc = run_op(c, q);
            if (rc)
                mark_broken(c, rc);
        }
        snprintf(msg, sizeof msg, "%s", rc ? sl_errmsg() : "");
        pthread_mutex_lock(&c->mu);
        q->req.rc = rc;
        memcpy(q->req.msg, msg, sizeof msg);
        q->req.done = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int ensure_thread(sl_comm *c)
{
    if (c->thread_started)
        return SL_OK;
    if (pthread_create(&c->thread, NULL, progress_main, c))
        return sl_fail(SL_ENOMEM, "sl_comm_allreduce_start: %s rank %d: cannot start the "
                       "progress thread", c->vt->name, c->rank);
    c->thread_started = 1;
    return SL_OK;
}

static void enqueue(sl_comm *c, queued *q)
{
    pthread_mutex_lock(&c->mu);
    q->req.next = NULL;
    if (c->tail)
        c->tail->next = &q->req;
    else
        c->head = &q->req;
    c->tail = &q->req;
    c->inflight++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Wait for q to run; frees nothing. */
static int await(sl_comm *c, queued *q)
{
    pthread_mutex_lock(&c->mu);
    while (!q->req.done)
        pthread_cond_wait(&c->cv, &c->mu);
    c->inflight--;
    int rc = q->req.rc;
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return sl_fail(rc, "%s", q->req.msg);
    return SL_OK;
}

/* Run an operation: directly when no progress thread exists, else queued
 * behind the in-flight ones and waited for. */
static int dispatch(sl_comm *c, const char *fn, queued *q)
{
    int rc = check_broken(c, fn);
    if (rc)
        return rc;
    if (!c->thread_started) {
        rc = run_op(c, q);
        return rc ? mark_broken(c, rc) : SL_OK;
    }
    enqueue(c, q);
    return await(c, q);
}

/* ------------------------------------------------------------- operations */

static int check_common(const sl_comm *c, const char *fn, const void *buf, size_t count,
                        sl_dtype t)
{
    if (!c)
        return sl_fail(SL_EINVAL, "%s: NULL communicator", fn);
    if ((unsigned)t > SL_DTYPE_LAST)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: unknown dtype %d", fn, c->vt->name, c->rank,
                       (int)t);
    if (count > 0 && !buf)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: NULL buffer for %zu elements", fn,
                       c->vt->name, c->rank, count);
    return SL_OK;
}

/* check_common, then the reduction (every all-reduce entry point). */
static int check_reduce(const sl_comm *c, const char *fn, const void *buf, size_t count,
                        sl_dtype t, sl_redop op)
{
    int rc = check_common(c, fn, buf, count, t);
    if (rc)
        return rc;
    if ((unsigned)op > SL_RED_AVG)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: unknown reduction %d", fn, c->vt->name,
                       c->rank, (int)op);
    return SL_OK;
}

int sl_comm_allreduce(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op)
{
    const char *fn = "sl_comm_allreduce";
    int rc = check_reduce(c, fn, buf, count, t, op);
    if (rc)
        return rc;
    if (count == 0)
        return check_broken(c, fn);
    queued q = {.req = {.buf = buf, .count = count, .t = t, .op = op}, .kind = OP_ALLREDUCE};
    return dispatch(c, fn, &q);
}

int sl_comm_broadcast(sl_comm *c, void *buf, size_t count, sl_dtype t, int root)
{
    const char *fn = "sl_comm_broadcast";
    int rc = check_common(c, fn, buf, count, t);
    if (rc)
        return rc;
    if (root < 0 || root >= c->world)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: root %d outside [0, %d)", fn, c->vt->name,
                       c->rank, root, c->world);
    if (count == 0)
        return check_broken(c, fn);
    queued q = {.req = {.buf = buf, .count = count, .t = t}, .kind = OP_BROADCAST, .root = root};
    return dispatch(c, fn, &q);
}

int sl_comm_allgather(sl_comm *c, const void *send, void *recv, size_t count, sl_dtype t)
{
    const char *fn = "sl_comm_allgather";
    int rc = check_common(c, fn, recv, count, t);
    if (rc)
        return rc;
    if (count > 0 && !send)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: NULL send buffer", fn, c->vt->name, c->rank);
    if (count == 0)
        return check_broken(c, fn);
    queued q = {.req = {.buf = recv, .count = count, .t = t}, .kind = OP_ALLGATHER, .send = send};
    return dispatch(c, fn, &q);
}

/* Exact integer sums. The backends reduce floats only: sl_dtype is the
 * vocabulary train/ and pipeline/ share (all float types), and the local
 * ring's hops, MPI's user ops and NCCL all add in float arithmetic. An
 * integer dtype would touch every one of them for a collective that runs a
 * few times per run on a few values. An all-gather moves elements without
 * arithmetic on every backend, so each rank sends its values as 16-bit
 * limbs, one per f32 element (0 .. 65535: exact in f32, and never a NaN
 * payload that a copy could alter), and every rank adds the world's values
 * in rank order in int64: exact, and bitwise the same everywhere. */
#define I64_LIMBS 4

int sl_comm_allreduce_i64(sl_comm *c, int64_t *buf, size_t count)
{
    const char *fn = "sl_comm_allreduce_i64";
    int rc = check_common(c, fn, buf, count, SL_DTYPE_F32);
    if (rc)
        return rc;
    if (c->backend == SL_COMM_NCCL)
        return sl_fail(SL_ENOTSUP, "%s: nccl rank %d: integer sums are for host buffers "
                       "(local or mpi)", fn, c->rank);
    if ((rc = check_broken(c, fn)) || count == 0)
        return rc;
    size_t world = (size_t)c->world, n = count * I64_LIMBS;
    if (count > SIZE_MAX / sizeof(float) / I64_LIMBS / (world + 1)) /* every rank's count */
        return sl_fail(SL_EINVAL, "%s: %s rank %d: %zu values are too many", fn, c->vt->name,
                       c->rank, count);
    float *mine = malloc(n * sizeof *mine), *all = malloc(world * n * sizeof *all);
    int64_t *sum = malloc(count * sizeof *sum);
    if (!mine || !all || !sum) {
        sl_comm_abort(c, "sl_comm_allreduce_i64: out of memory"); /* peers would wait */
        rc = sl_fail(SL_ENOMEM, "%s: %s rank %d: out of memory", fn, c->vt->name, c->rank);
        goto out_free;
    }
    for (size_t i = 0; i < count; i++)
        for (int l = 0; l < I64_LIMBS; l++)
            mine[i * I64_LIMBS + l] = (float)(((uint64_t)buf[i] >> (16 * l)) & 0xffffu);
    if ((rc = sl_comm_allgather(c, mine, all, n, SL_DTYPE_F32)))
        goto out_free;
    for (size_t i = 0; i < count; i++) {
        sum[i] = 0;
        for (size_t k = 0; k < world; k++) {
            const float *v = all + k * n + i * I64_LIMBS;
            uint64_t u = 0;
            for (int l = 0; l < I64_LIMBS; l++)
                u |= (uint64_t)v[l] << (16 * l);
            int64_t x;
            memcpy(&x, &u, sizeof x); /* the two's complement bits back */
            if (__builtin_add_overflow(sum[i], x, &sum[i])) {
                rc = sl_fail(SL_EINVAL, "%s: %s rank %d: element %zu: the sum over %zu ranks "
                             "is outside int64", fn, c->vt->name, c->rank, i, world);
                goto out_free;
            }
        }
    }
    memcpy(buf, sum, count * sizeof *sum);
out_free:
    free(sum);
    free(all);
    free(mine);
    return rc;
}

int sl_comm_barrier(sl_comm *c)
{
    if (!c)
        return sl_fail(SL_EINVAL, "sl_comm_barrier: NULL communicator");
    queued q = {.kind = OP_BARRIER};
    return dispatch(c, "sl_comm_barrier", &q);
}

/* Point to point bypasses the queue: the parameter server uses it on comms
 * that run no asynchronous all-reduce. */
int sl_comm_send(sl_comm *c, const void *buf, size_t count, sl_dtype t, int peer, int tag)
{
    const char *fn = "sl_comm_send";
    int rc = check_common(c, fn, buf, count, t);
    if (rc || (rc = check_broken(c, fn)))
        return rc;
    if (!c->vt->send)
        return sl_fail(SL_ENOTSUP, "%s: the %s backend has no point-to-point messages", fn,
                       c->vt->name);
    if (peer < 0 || peer >= c->world || peer == c->rank)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: bad peer %d (world %d)", fn, c->vt->name,
                       c->rank, peer, c->world);
    if (tag < 0)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: tag %d is negative", fn, c->vt->name,
                       c->rank, tag);
    if (c->thread_started)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: not allowed while asynchronous all-reduces "
                       "are in use on this communicator", fn, c->vt->name, c->rank);
    rc = c->vt->send(c, buf, count, t, peer, tag);
    return rc ? mark_broken(c, rc) : SL_OK;
}

int sl_comm_recv(sl_comm *c, void *buf, size_t count, sl_dtype t, int peer, int tag,
                 int timeout_ms, int *from, int *tag_out, size_t *got)
{
    const char *fn = "sl_comm_recv";
    int rc = check_common(c, fn, buf, count, t);
    if (rc || (rc = check_broken(c, fn)))
        return rc;
    if (!c->vt->recv)
        return sl_fail(SL_ENOTSUP, "%s: the %s backend has no point-to-point messages", fn,
                       c->vt->name);
    if (peer < -1 || peer >= c->world || peer == c->rank)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: bad peer %d (world %d)", fn, c->vt->name,
                       c->rank, peer, c->world);
    if (tag < -1)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: tag %d (want >= 0, or -1 for any)", fn,
                       c->vt->name, c->rank, tag);
    if (c->thread_started)
        return sl_fail(SL_EINVAL, "%s: %s rank %d: not allowed while asynchronous all-reduces "
                       "are in use on this communicator", fn, c->vt->name, c->rank);
    rc = c->vt->recv(c, buf, count, t, peer, tag, timeout_ms, from, tag_out, got);
    /* A receive that timed out breaks nothing: no peer is mid-operation. */
    if (rc && rc != SL_ETIMEDOUT)
        mark_broken(c, rc);
    return rc;
}

/* --------------------------------------------------------------- async */

int sl_comm_allreduce_start(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op,
                            sl_comm_req **req)
{
    const char *fn = "sl_comm_allreduce_start";
    if (!req)
        return sl_fail(SL_EINVAL, "%s: NULL request pointer", fn);
    *req = NULL;
    int rc = check_reduce(c, fn, buf, count, t, op);
    if (rc || (rc = check_broken(c, fn)))
        return rc;
    queued *q = calloc(1, sizeof *q);
    if (!q)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    q->req = (sl_comm_req){.buf = buf, .count = count, .t = t, .op = op};
    q->kind = OP_ALLREDUCE;
    if (count == 0) {
        q->req.done = 1;
        pthread_mutex_lock(&c->mu);
        c->inflight++;
        pthread_mutex_unlock(&c->mu);
    } else if (c->vt->allreduce_start) {
        rc = c->vt->allreduce_start(c, buf, count, t, op, &q->req.token);
        if (rc) {
            free(q);
            return mark_broken(c, rc);
        }
        pthread_mutex_lock(&c->mu);
        c->inflight++;
        pthread_mutex_unlock(&c->mu);
    } else {
        if ((rc = ensure_thread(c))) {
            free(q);
            return rc;
        }
        enqueue(c, q);
    }
    *req = &q->req;
    return SL_OK;
}

int sl_comm_wait(sl_comm *c, sl_comm_req *req)
{
    if (!c || !req)
        return sl_fail(SL_EINVAL, "sl_comm_wait: NULL argument");
    queued *q = (queued *)req;
    int rc;
    if (q->req.count == 0 && q->req.done) { /* empty request (count first: it never changes) */
        pthread_mutex_lock(&c->mu);
        c->inflight--;
        pthread_mutex_unlock(&c->mu);
        rc = check_broken(c, "sl_comm_wait");
    } else if (c->vt->allreduce_wait && q->req.token) {
        rc = c->vt->allreduce_wait(c, q->req.token);
        pthread_mutex_lock(&c->mu);
        c->inflight--;
        pthread_mutex_unlock(&c->mu);
        if (rc)
            mark_broken(c, rc);
    } else {
        rc = await(c, q);
    }
    free(q);
    return rc;
}

/* ------------------------------------------------------- stream-ordered */

int sl_comm_stream_ordered(const sl_comm *c) { return c && c->vt->allreduce_enqueue != NULL; }

int sl_comm_allreduce_enqueue(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op)
{
    const char *fn = "sl_comm_allreduce_enqueue";
    int rc = check_reduce(c, fn, buf, count, t, op);
    if (rc || (rc = check_broken(c, fn)))
        return rc;
    if (!c->vt->allreduce_enqueue)
        return sl_fail(SL_ENOTSUP, "%s: the %s backend's collectives are not stream-ordered", fn,
                       c->vt->name);
    if (count == 0)
        return SL_OK;
    rc = c->vt->allreduce_enqueue(c, buf, count, t, op);
    return rc ? mark_broken(c, rc) : SL_OK;
}

/* A request with count 0 and done 0: sl_comm_wait waits on its token (or,
 * with no token, finds it empty). */
int sl_comm_fence(sl_comm *c, sl_comm_req **req)
{
    const char *fn = "sl_comm_fence";
    if (!req)
        return sl_fail(SL_EINVAL, "%s: NULL request pointer", fn);
    *req = NULL;
    if (!c)
        return sl_fail(SL_EINVAL, "%s: NULL communicator", fn);
    int rc = check_broken(c, fn);
    if (rc)
        return rc;
    queued *q = calloc(1, sizeof *q);
    if (!q)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    q->kind = OP_ALLREDUCE;
    if (c->vt->fence && (rc = c->vt->fence(c, &q->req.token))) {
        free(q);
        return mark_broken(c, rc);
    }
    q->req.done = q->req.token == NULL;
    pthread_mutex_lock(&c->mu);
    c->inflight++;
    pthread_mutex_unlock(&c->mu);
    *req = &q->req;
    return SL_OK;
}

/* ------------------------------------------------------------ abort, end */

void sl_comm_abort(sl_comm *c, const char *why)
{
    if (!c)
        return;
    if (c->vt->abort_peers)
        c->vt->abort_peers(c, why ? why : "aborted");
}

void sl_comm_destroy(sl_comm *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    if (c->vt->destroy)
        c->vt->destroy(c);
    sl_comm_free(c);
}

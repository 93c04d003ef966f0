/*
 * collectives/nccl.c - the nccl backend: one rank per GPU, buffers in
 * device memory, collectives on a CUDA stream (built with SLUICE_WITH_NCCL).
 *
 * Bootstrap (who am I, and the ncclUniqueId that rank 0 makes):
 *   - started by mpirun (sl_comm_mpi_launched) in a build with MPI: rank,
 *     world and local rank from an mpi comm that this comm keeps until it is
 *     destroyed (MPI cannot start twice in a process, so finalizing it early
 *     would forbid any later mpi comm); the id is broadcast over it, with
 *     rank 0's status in front so that its failure reaches everyone;
 *   - else WORLD_SIZE set (torchrun and friends): RANK, WORLD_SIZE,
 *     LOCAL_RANK (default RANK), LOCAL_WORLD_SIZE (default WORLD_SIZE), and
 *     the id over sl_rendezvous_tcp(MASTER_ADDR (default 127.0.0.1),
 *     SLUICE_NCCL_PORT or else MASTER_PORT). Under torchrun the agent's
 *     TCPStore already holds MASTER_PORT: set SLUICE_NCCL_PORT there;
 *   - else rank 0 of 1.
 * The GPU is cfg.device, or the local rank; the stream cfg.stream, or one
 * of our own (non-blocking).
 *
 * Deadlines. The communicator is non-blocking (ncclConfig_t.blocking = 0,
 * NCCL >= 2.14): init and every call may return ncclInProgress, and we poll
 * ncclCommGetAsyncError until the call is enqueued, then a cudaEvent
 * recorded after it until the GPU is done, both against cfg.timeout_ms.
 * On timeout or an asynchronous NCCL error the communicator is aborted
 * (ncclCommAbort: its kernels stop) and the call returns SL_ETIMEDOUT or
 * SL_ENCCL; comm.c keeps the comm broken from then on. NCCL carries no
 * reason across: a peer of an aborted rank sees a remote error or times out.
 *
 * Async all-reduce (vt->allreduce_start / allreduce_wait): enqueued on the
 * stream at start with an event per request; wait polls the event (the
 * deadline counts from the wait). Requests complete in start order, the
 * stream's.
 *
 * Stream-ordered all-reduce (vt->allreduce_enqueue, for a step captured into
 * a CUDA graph: NCCL >= 2.9 captures collectives): ncclAllReduce on the
 * stream, then, for ncclInProgress, polling ncclCommGetAsyncError until it
 * is enqueued (no CUDA call: legal inside a capture); no event, no wait for
 * the GPU. The buffer's check (cudaPointerGetAttributes) is not a stream
 * operation and is allowed while capturing. vt->fence records an event on the
 * stream after whatever is queued there (a graph launch with its
 * collectives); allreduce_wait polls it with the deadline and the abort as
 * for an async request, so a dead peer inside a replayed graph still ends
 * in SL_ENCCL / SL_ETIMEDOUT rather than a hang.
 *
 * AVG is ncclAvg (NCCL scales each contribution by 1/world in the dtype,
 * so its rounding differs from the host backends' sum-then-scale; every rank
 * still gets the same bits).
 *
 * Threading. One caller at a time (comm.c's contract) plus sl_comm_abort
 * from any thread: im->mu is held around every NCCL/CUDA call that uses the
 * communicator, so an abort never frees it under a running call; waits
 * sleep without it. Every CUDA and NCCL return is checked (CU / NC record
 * the call, file and line).
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/collectives_int.h"
#include "common/clock.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "collectives/nccl.c needs NCCL 2.14 or newer (non-blocking communicators)"
#endif

#define SPIN_POLLS 256     /* polls before the first sleep */
#define SLEEP_MAX_US 100   /* longest sleep between polls */

typedef struct nccl_impl {
    pthread_mutex_t mu;    /* around every use of comm (abort may come from any thread) */
    ncclComm_t comm;       /* NULL once aborted or destroyed */
    int device;
    cudaStream_t stream;
    int own_stream;
    cudaEvent_t done;      /* blocking calls: recorded after the call */
    float *d_scratch;      /* barrier: one float */
    sl_comm *boot;         /* the mpi comm of an mpirun bootstrap, or NULL */
    atomic_int aborted;
    char why[256];         /* written once, before aborted is set */
} nccl_impl;

typedef struct nccl_token {
    cudaEvent_t ev;
    char what[96];
} nccl_token;

/* Where a failure happened: the public function and this rank. */
typedef struct where {
    const char *fn;
    int rank, world;
} where;

static int cuda_ok(cudaError_t e, const where *w, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return SL_OK;
    return sl_fail(SL_ECUDA, "%s: nccl rank %d of %d: %s: %s (%s:%d)", w->fn, w->rank, w->world,
                   call, cudaGetErrorString(e), file, line);
}

/* ncclInProgress is not an error: the caller waits for the comm's state. */
static int nccl_ok(ncclResult_t r, ncclComm_t comm, const where *w, const char *call,
                   const char *file, int line)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return SL_OK;
    const char *last = ncclGetLastError(comm);
    return sl_fail(SL_ENCCL, "%s: nccl rank %d of %d: %s: %s%s%s (%s:%d)", w->fn, w->rank,
                   w->world, call, ncclGetErrorString(r), last && *last ? ": " : "",
                   last ? last : "", file, line);
}

#define CU(w, call) cuda_ok((call), (w), #call, __FILE__, __LINE__)
#define NC(w, comm, call) nccl_ok((call), (comm), (w), #call, __FILE__, __LINE__)

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static ncclDataType_t nccl_type(sl_dtype t)
{
    return t == SL_DTYPE_F32 ? ncclFloat : t == SL_DTYPE_F16 ? ncclHalf : ncclBfloat16;
}

/* Abort the communicator once (under im->mu). */
static void abort_locked(nccl_impl *im)
{
    if (im->comm) {
        ncclCommAbort(im->comm); /* frees it whatever it returns */
        im->comm = NULL;
    }
}

static int canceled(const sl_comm *c, const where *w, const char *what)
{
    nccl_impl *im = c->impl;
    if (atomic_load(&im->aborted))
        return sl_fail(SL_ECANCELED, "%s: nccl rank %d of %d: %s: aborted on this rank: %s",
                       w->fn, w->rank, w->world, what, im->why);
    return sl_fail(SL_ECANCELED, "%s: nccl rank %d of %d: %s: the communicator was aborted",
                   w->fn, w->rank, w->world, what);
}

/* Wait until the comm's state leaves ncclInProgress (ev NULL: an init, an
 * enqueue or a finalize) or until ev completes, within timeout_ms. Any
 * failure aborts the communicator. */
static int wait_nccl(sl_comm *c, const where *w, const char *what, cudaEvent_t ev,
                     long timeout_ms)
{
    nccl_impl *im = c->impl;
    double t0 = sl_now_ms();
    long nap = 1;
    for (int round = 0;; round++) {
        if (atomic_load(&im->aborted))
            return canceled(c, w, what);
        ncclResult_t st = ncclSuccess;
        cudaError_t q = cudaSuccess;
        int rc = SL_OK;
        pthread_mutex_lock(&im->mu);
        if (!im->comm) {
            pthread_mutex_unlock(&im->mu);
            return canceled(c, w, what);
        }
        rc = NC(w, im->comm, ncclCommGetAsyncError(im->comm, &st));
        if (!rc && st != ncclSuccess && st != ncclInProgress)
            rc = nccl_ok(st, im->comm, w, what, __FILE__, __LINE__);
        if (!rc && ev && st == ncclSuccess) {
            q = cudaEventQuery(ev);
            if (q != cudaSuccess && q != cudaErrorNotReady)
                rc = cuda_ok(q, w, what, __FILE__, __LINE__);
        }
        if (rc)
            abort_locked(im);
        pthread_mutex_unlock(&im->mu);
        if (rc)
            return rc;
        if (st == ncclSuccess && (!ev || q == cudaSuccess))
            return SL_OK;
        if (timeout_ms >= 0 && sl_now_ms() - t0 >= (double)timeout_ms) {
            pthread_mutex_lock(&im->mu);
            abort_locked(im);
            pthread_mutex_unlock(&im->mu);
            return sl_fail(SL_ETIMEDOUT, "%s: nccl rank %d of %d: %s: timed out after %ld ms "
                           "waiting for the other %d rank(s) (communicator aborted)", w->fn,
                           w->rank, w->world, what, timeout_ms, w->world - 1);
        }
        if (round >= SPIN_POLLS) {
            sleep_us(nap);
            nap = nap * 2 > SLEEP_MAX_US ? SLEEP_MAX_US : nap * 2;
        }
    }
}

/* NCCL faults on host memory with an illegal address that breaks the whole
 * CUDA context: refuse it with a message instead. */
static int check_device_ptr(const where *w, const void *p, const char *name)
{
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear it: not sticky */
        return sl_fail(SL_EINVAL, "%s: nccl rank %d of %d: %s %p: not CUDA memory (%s)", w->fn,
                       w->rank, w->world, name, p, cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return sl_fail(SL_EINVAL, "%s: nccl rank %d of %d: %s %p is host memory; the nccl backend "
                       "takes device buffers", w->fn, w->rank, w->world, name, p);
    return SL_OK;
}

/* Lock, make the device current, check the comm is alive; SL_OK with
 * im->mu held, else unlocked. */
static int enter(sl_comm *c, const where *w, const char *what)
{
    nccl_impl *im = c->impl;
    pthread_mutex_lock(&im->mu);
    if (!im->comm || atomic_load(&im->aborted)) {
        pthread_mutex_unlock(&im->mu);
        return canceled(c, w, what);
    }
    int rc = CU(w, cudaSetDevice(im->device));
    if (rc)
        pthread_mutex_unlock(&im->mu);
    return rc;
}

/* After an enqueue call returned r (im->mu held): unlock, wait until it is
 * enqueued, then record ev on the stream. */
static int enqueued(sl_comm *c, const where *w, const char *what, ncclResult_t r, cudaEvent_t ev)
{
    nccl_impl *im = c->impl;
    int rc = nccl_ok(r, im->comm, w, what, __FILE__, __LINE__);
    if (rc)
        abort_locked(im);
    pthread_mutex_unlock(&im->mu);
    if (rc || (r == ncclInProgress && (rc = wait_nccl(c, w, what, NULL, c->cfg.timeout_ms))))
        return rc;
    pthread_mutex_lock(&im->mu);
    rc = CU(w, cudaEventRecord(ev, im->stream));
    pthread_mutex_unlock(&im->mu);
    return rc;
}

/* ------------------------------------------------------------ collectives */

/* ncclAllReduce in place on the comm's stream, after the pointer check and
 * enter(); *r is NCCL's answer when SL_OK. what (96 bytes) names the call. */
static int issue_allreduce(sl_comm *c, const where *w, char *what, const char *how, void *buf,
                           size_t count, sl_dtype t, sl_redop op, ncclResult_t *r)
{
    nccl_impl *im = c->impl;
    snprintf(what, 96, "ncclAllReduce (%s, %s, %zu elements%s)", op == SL_RED_AVG ? "avg" : "sum",
             sl_dtype_name(t), count, how);
    int rc = check_device_ptr(w, buf, "buffer");
    if (rc || (rc = enter(c, w, what)))
        return rc;
    *r = ncclAllReduce(buf, buf, count, nccl_type(t), op == SL_RED_AVG ? ncclAvg : ncclSum,
                       im->comm, im->stream);
    return SL_OK;
}

static int nccl_allreduce(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op)
{
    where w = {"sl_comm_allreduce", c->rank, c->world};
    nccl_impl *im = c->impl;
    char what[96];
    ncclResult_t r;
    int rc = issue_allreduce(c, &w, what, "", buf, count, t, op, &r);
    if (rc || (rc = enqueued(c, &w, what, r, im->done)))
        return rc;
    return wait_nccl(c, &w, what, im->done, c->cfg.timeout_ms);
}

static int nccl_broadcast(sl_comm *c, void *buf, size_t count, sl_dtype t, int root)
{
    where w = {"sl_comm_broadcast", c->rank, c->world};
    nccl_impl *im = c->impl;
    char what[96];
    snprintf(what, sizeof what, "ncclBroadcast (root %d, %s, %zu elements)", root,
             sl_dtype_name(t), count);
    int rc = check_device_ptr(&w, buf, "buffer");
    if (rc || (rc = enter(c, &w, what)))
        return rc;
    ncclResult_t r = ncclBroadcast(buf, buf, count, nccl_type(t), root, im->comm, im->stream);
    if ((rc = enqueued(c, &w, what, r, im->done)))
        return rc;
    return wait_nccl(c, &w, what, im->done, c->cfg.timeout_ms);
}

static int nccl_allgather(sl_comm *c, const void *send, void *recv, size_t count, sl_dtype t)
{
    where w = {"sl_comm_allgather", c->rank, c->world};
    nccl_impl *im = c->impl;
    char what[96];
    snprintf(what, sizeof what, "ncclAllGather (%s, %zu elements per rank)", sl_dtype_name(t),
             count);
    int rc = check_device_ptr(&w, send, "send buffer");
    if (rc || (rc = check_device_ptr(&w, recv, "receive buffer")) || (rc = enter(c, &w, what)))
        return rc;
    ncclResult_t r = ncclAllGather(send, recv, count, nccl_type(t), im->comm, im->stream);
    if ((rc = enqueued(c, &w, what, r, im->done)))
        return rc;
    return wait_nccl(c, &w, what, im->done, c->cfg.timeout_ms);
}

/* An all-reduce of one float: NCCL has no barrier. */
static int nccl_barrier(sl_comm *c)
{
    where w = {"sl_comm_barrier", c->rank, c->world};
    nccl_impl *im = c->impl;
    const char *what = "ncclAllReduce (barrier, 1 element)";
    int rc = enter(c, &w, what);
    if (rc)
        return rc;
    ncclResult_t r = ncclAllReduce(im->d_scratch, im->d_scratch, 1, ncclFloat, ncclSum, im->comm,
                                   im->stream);
    if ((rc = enqueued(c, &w, what, r, im->done)))
        return rc;
    return wait_nccl(c, &w, what, im->done, c->cfg.timeout_ms);
}

static int nccl_allreduce_start(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op,
                                void **token)
{
    where w = {"sl_comm_allreduce_start", c->rank, c->world};
    nccl_impl *im = c->impl;
    nccl_token *tk = calloc(1, sizeof *tk);
    if (!tk)
        return sl_fail(SL_ENOMEM, "%s: nccl rank %d: out of memory", w.fn, c->rank);
    snprintf(tk->what, sizeof tk->what, "ncclAllReduce (%s, %s, %zu elements, async)",
             op == SL_RED_AVG ? "avg" : "sum", sl_dtype_name(t), count);
    int rc = check_device_ptr(&w, buf, "buffer");
    if (rc || (rc = enter(c, &w, tk->what)))
        goto fail;
    rc = CU(&w, cudaEventCreateWithFlags(&tk->ev, cudaEventDisableTiming));
    if (rc) {
        tk->ev = NULL;
        pthread_mutex_unlock(&im->mu);
        goto fail;
    }
    ncclResult_t r = ncclAllReduce(buf, buf, count, nccl_type(t),
                                   op == SL_RED_AVG ? ncclAvg : ncclSum, im->comm, im->stream);
    if ((rc = enqueued(c, &w, tk->what, r, tk->ev)))
        goto fail;
    *token = tk;
    return SL_OK;
fail:
    if (tk->ev)
        cudaEventDestroy(tk->ev);
    free(tk);
    return rc;
}

static int nccl_allreduce_wait(sl_comm *c, void *token)
{
    where w = {"sl_comm_wait", c->rank, c->world};
    nccl_token *tk = token;
    int rc = wait_nccl(c, &w, tk->what, tk->ev, c->cfg.timeout_ms);
    cudaEventDestroy(tk->ev);
    free(tk);
    return rc;
}

static int nccl_allreduce_enqueue(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op)
{
    where w = {"sl_comm_allreduce_enqueue", c->rank, c->world};
    nccl_impl *im = c->impl;
    char what[96];
    ncclResult_t r;
    int rc = issue_allreduce(c, &w, what, ", stream-ordered", buf, count, t, op, &r);
    if (rc)
        return rc;
    rc = nccl_ok(r, im->comm, &w, what, __FILE__, __LINE__);
    if (rc)
        abort_locked(im);
    pthread_mutex_unlock(&im->mu);
    if (!rc && r == ncclInProgress)
        rc = wait_nccl(c, &w, what, NULL, c->cfg.timeout_ms);
    return rc;
}

static int nccl_fence(sl_comm *c, void **token)
{
    where w = {"sl_comm_fence", c->rank, c->world};
    nccl_impl *im = c->impl;
    nccl_token *tk = calloc(1, sizeof *tk);
    if (!tk)
        return sl_fail(SL_ENOMEM, "%s: nccl rank %d: out of memory", w.fn, c->rank);
    snprintf(tk->what, sizeof tk->what, "ncclAllReduce (the collectives queued on the stream, "
             "fence)");
    int rc = enter(c, &w, tk->what);
    if (rc) {
        free(tk);
        return rc;
    }
    rc = CU(&w, cudaEventCreateWithFlags(&tk->ev, cudaEventDisableTiming));
    if (!rc && (rc = CU(&w, cudaEventRecord(tk->ev, im->stream))))
        cudaEventDestroy(tk->ev);
    pthread_mutex_unlock(&im->mu);
    if (rc) {
        free(tk);
        return rc;
    }
    *token = tk;
    return SL_OK;
}

/* ----------------------------------------------------------- abort, destroy */

static void nccl_abort(sl_comm *c, const char *why)
{
    nccl_impl *im = c->impl;
    pthread_mutex_lock(&im->mu);
    if (!atomic_load(&im->aborted)) {
        snprintf(im->why, sizeof im->why, "%s", why);
        atomic_store(&im->aborted, 1);
    }
    abort_locked(im);
    pthread_mutex_unlock(&im->mu);
}

/* Also the cleanup of a create that failed half way (any field unset). */
static void nccl_destroy(sl_comm *c)
{
    nccl_impl *im = c->impl;
    if (!im)
        return;
    where w = {"sl_comm_destroy", c->rank, c->world};
    pthread_mutex_lock(&c->mu);
    int broken = c->broken;
    pthread_mutex_unlock(&c->mu);
    if (im->device >= 0)
        cudaSetDevice(im->device);
    if (im->comm && !broken) {
        /* finalize: flush and wait for the peers (bounded), then free */
        pthread_mutex_lock(&im->mu);
        ncclResult_t r = ncclCommFinalize(im->comm);
        pthread_mutex_unlock(&im->mu);
        int rc = NC(&w, im->comm, r);
        if (!rc && r == ncclInProgress)
            rc = wait_nccl(c, &w, "ncclCommFinalize", NULL, c->cfg.timeout_ms);
        pthread_mutex_lock(&im->mu);
        if (!rc && im->comm) {
            ncclCommDestroy(im->comm);
            im->comm = NULL;
        }
        pthread_mutex_unlock(&im->mu);
    }
    pthread_mutex_lock(&im->mu);
    abort_locked(im); /* broken, or the finalize failed */
    pthread_mutex_unlock(&im->mu);
    if (im->done)
        cudaEventDestroy(im->done);
    if (im->d_scratch)
        cudaFree(im->d_scratch);
    if (im->own_stream && im->stream)
        cudaStreamDestroy(im->stream);
    sl_comm_destroy(im->boot);
    pthread_mutex_destroy(&im->mu);
    free(im);
    c->impl = NULL;
}

static const sl_comm_vt nccl_vt = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .allreduce_start = nccl_allreduce_start,
    .allreduce_wait = nccl_allreduce_wait,
    .allreduce_enqueue = nccl_allreduce_enqueue,
    .fence = nccl_fence,
    .abort_peers = nccl_abort,
    .destroy = nccl_destroy,
};

/* ----------------------------------------------------------------- create */

/* An integer environment variable: SL_OK and *v (def when unset). */
static int env_int(const char *name, int def, int *v, const char *fn)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *v = def;
        return SL_OK;
    }
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < 0 || x > 1 << 24)
        return sl_fail(SL_EINVAL, "%s: nccl: %s='%s' is not a rank or a count", fn, name, s);
    *v = (int)x;
    return SL_OK;
}

/* rank 0's status and the id, as 33 f32 elements for sl_comm_broadcast */
typedef union boot_msg {
    struct {
        int32_t status;
        ncclUniqueId id;
    } m;
    float f[33];
} boot_msg;

/* Rank, world, local rank/world and the unique id (see the top comment). */
static int bootstrap(const sl_comm_config *cfg, int timeout_ms, int *rank, int *world,
                     int *lrank, int *lworld, ncclUniqueId *id, sl_comm **boot)
{
    const char *fn = "sl_comm_nccl_create";
    where w = {fn, 0, 1};
    int rc;
    *rank = *lrank = 0;
    *world = *lworld = 1;
    if (sl_comm_mpi_launched() && sl_comm_backend_available(SL_COMM_MPI)) {
        if ((rc = sl_comm_mpi_create(cfg, boot)))
            return sl_fail(rc, "%s: bootstrap over MPI: %s", fn, sl_errmsg());
        *rank = sl_comm_rank(*boot);
        *world = sl_comm_world(*boot);
        *lrank = sl_comm_local_rank(*boot);
        *lworld = sl_comm_local_world(*boot);
        w.rank = *rank;
        w.world = *world;
        boot_msg msg;
        memset(&msg, 0, sizeof msg);
        if (*rank == 0)
            msg.m.status = (int32_t)ncclGetUniqueId(&msg.m.id);
        if ((rc = sl_comm_broadcast(*boot, msg.f, 33, SL_DTYPE_F32, 0)))
            return sl_fail(rc, "%s: sending the NCCL id over MPI: %s", fn, sl_errmsg());
        if (msg.m.status != ncclSuccess)
            return sl_fail(SL_ENCCL, "%s: nccl rank %d of %d: rank 0 could not make the NCCL id: "
                           "ncclGetUniqueId: %s", fn, *rank, *world,
                           ncclGetErrorString((ncclResult_t)msg.m.status));
        *id = msg.m.id;
        return SL_OK;
    }
    if (getenv("WORLD_SIZE")) {
        if ((rc = env_int("WORLD_SIZE", 1, world, fn)) || (rc = env_int("RANK", 0, rank, fn)) ||
            (rc = env_int("LOCAL_RANK", *rank, lrank, fn)) ||
            (rc = env_int("LOCAL_WORLD_SIZE", *world, lworld, fn)))
            return rc;
        if (*world < 1 || *rank >= *world)
            return sl_fail(SL_EINVAL, "%s: nccl: RANK=%d outside WORLD_SIZE=%d", fn, *rank,
                           *world);
        w.rank = *rank;
        w.world = *world;
    }
    if (*rank == 0 && (rc = NC(&w, NULL, ncclGetUniqueId(id))))
        return rc;
    if (*world == 1)
        return SL_OK;
    const char *addr = getenv("MASTER_ADDR");
    int port = 0;
    if ((rc = env_int("SLUICE_NCCL_PORT", 0, &port, fn)) ||
        (!port && (rc = env_int("MASTER_PORT", 0, &port, fn))))
        return rc;
    if (!port)
        return sl_fail(SL_EINVAL, "%s: nccl rank %d of %d: MASTER_PORT (or SLUICE_NCCL_PORT) is "
                       "not set: the ranks cannot meet", fn, *rank, *world);
    if ((rc = sl_rendezvous_tcp(addr && *addr ? addr : "127.0.0.1", port, *rank, *world, id,
                                sizeof *id, timeout_ms)))
        return sl_fail(rc, "%s: sending the NCCL id: %s", fn, sl_errmsg());
    return SL_OK;
}

int sl_comm_nccl_create(const sl_comm_config *cfg, sl_comm **out)
{
    const char *fn = "sl_comm_nccl_create";
    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL out", fn);
    *out = NULL;
    if (cfg && sl_check_config_size(fn, cfg->size, sizeof *cfg))
        return SL_EINVAL;
    sl_comm_config cf = cfg ? *cfg : (sl_comm_config)SL_COMM_CONFIG_INIT;
    int timeout_ms = cf.timeout_ms > 0 ? cf.timeout_ms : 300000;
    int rank, world, lrank, lworld, rc;
    ncclUniqueId id;
    sl_comm *boot = NULL;
    memset(&id, 0, sizeof id);
    if ((rc = bootstrap(&cf, timeout_ms, &rank, &world, &lrank, &lworld, &id, &boot))) {
        sl_comm_destroy(boot);
        return rc;
    }
    sl_comm *c = sl_comm_alloc(&nccl_vt, SL_COMM_NCCL, rank, world, &cf);
    nccl_impl *im = c ? calloc(1, sizeof *im) : NULL;
    if (!im || pthread_mutex_init(&im->mu, NULL)) {
        free(im);
        sl_comm_free(c);
        sl_comm_destroy(boot);
        return sl_fail(SL_ENOMEM, "%s: nccl rank %d: out of memory", fn, rank);
    }
    c->local_rank = lrank;
    c->local_world = lworld;
    c->impl = im;
    im->boot = boot;
    im->device = -1;
    atomic_init(&im->aborted, 0);

    where w = {fn, rank, world};
    int ndev = 0, dev = cf.device >= 0 ? cf.device : lrank;
    if ((rc = CU(&w, cudaGetDeviceCount(&ndev))))
        goto fail;
    if (dev >= ndev) {
        rc = sl_fail(SL_EINVAL, "%s: nccl rank %d of %d: CUDA device %d, but %d visible%s", fn,
                     rank, world, dev, ndev, cf.device >= 0 ? "" : " (device = local rank)");
        goto fail;
    }
    if ((rc = CU(&w, cudaSetDevice(dev))))
        goto fail;
    im->device = dev;
    if (cf.stream) {
        im->stream = (cudaStream_t)cf.stream;
    } else {
        if ((rc = CU(&w, cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking))))
            goto fail;
        im->own_stream = 1;
    }
    if ((rc = CU(&w, cudaEventCreateWithFlags(&im->done, cudaEventDisableTiming))) ||
        (rc = CU(&w, cudaMalloc((void **)&im->d_scratch, sizeof(float)))) ||
        (rc = CU(&w, cudaMemset(im->d_scratch, 0, sizeof(float)))))
        goto fail;

    ncclConfig_t nc = NCCL_CONFIG_INITIALIZER;
    nc.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&im->comm, world, id, rank, &nc);
    if ((rc = NC(&w, im->comm, r))) {
        if (im->comm)
            ncclCommAbort(im->comm);
        im->comm = NULL;
        goto fail;
    }
    if (r == ncclInProgress && (rc = wait_nccl(c, &w, "ncclCommInitRankConfig", NULL, timeout_ms)))
        goto fail;
    *out = c;
    return SL_OK;
fail:
    nccl_destroy(c);
    sl_comm_free(c);
    return rc;
}

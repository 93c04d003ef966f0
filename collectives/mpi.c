/*
 * collectives/mpi.c - the mpi backend: ranks are processes (on one machine
 * or many) started by mpirun, over OpenMPI 4.1.
 *
 * Deadlines. MPI's blocking calls cannot be interrupted, so every operation
 * is a non-blocking call (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
 * MPI_Ibarrier, MPI_Isend, MPI_Irecv) polled with MPI_Test until it
 * completes, the deadline passes (SL_ETIMEDOUT), or an abort is seen
 * (SL_ECANCELED). OpenMPI makes progress on non-blocking collectives only
 * inside MPI calls (no progress thread): a shared-memory transfer moves a
 * fragment per test on each side. So for the first SPIN_MS of a wait the
 * poll tests back to back, with sched_yield() between tests (what a
 * blocking MPI call does with mpi_yield_when_idle: an oversubscribed core
 * goes to the peer it waits for); measured on 3 ranks / 2 cores, 1 Mi and
 * 16 Mi floats then take what MPI_Allreduce takes, while 200 us naps made
 * them 2-6x slower. After SPIN_MS the wait is most likely for a late peer,
 * and the poll sleeps between tests (1 us doubling to SLEEP_MAX_US) so that
 * a long wait, or the progress thread of an async all-reduce, does not burn
 * a core that the rank's compute needs.
 *
 * Types. f32 uses MPI_FLOAT and MPI_SUM. f16 and bf16 travel as
 * MPI_UINT16_T with a user-defined commutative op that adds in f32 and
 * rounds once (sl_reduce_add, as the local ring and NCCL do). AVG is SUM
 * then sl_scale(1/world), computed identically on every rank. MPI counts
 * are int: buffers over max_count (INT_MAX; SLUICE_MPI_MAX_COUNT lowers it
 * so tests reach the split path) go as several calls, the all-gather's
 * pieces through a resized type that strides over the receive blocks.
 *
 * Abort. MPI has no way to wake a peer blocked in a collective, so each
 * comm has a second duplicate of MPI_COMM_WORLD as an abort channel: a
 * receive from any rank is always posted on it, and sl_comm_abort sends
 * its reason to every peer there. Every poll also tests that receive, so
 * a peer's abort ends this rank's operation with SL_ECANCELED naming the
 * peer and its reason; an abort on this rank (any thread) ends its own
 * pending poll the same way.
 *
 * Failure leaves MPI in a state we cannot clean: a collective request that
 * timed out or was abandoned cannot be cancelled (MPI forbids cancelling
 * collectives) and may still read or write its buffer if the late peer
 * arrives. Such a comm is "poisoned": its destroy frees none of its MPI
 * objects and MPI_Finalize is never called in this process (it would wait
 * for the dead or late peer). The process is expected to end; mpirun then
 * reports the rank that exited without finalizing, or the tool calls
 * MPI_Abort. A receive that times out is cancelled cleanly instead and
 * breaks nothing.
 *
 * Life of MPI. The first create calls MPI_Init_thread(SERIALIZED) unless
 * the program did (then its level must be SERIALIZED or MULTIPLE); when we
 * started MPI, the destroy of the last comm calls MPI_Finalize (MPI cannot
 * start twice in a process: a later create fails with SL_EMPI).
 * Create itself uses blocking collectives (MPI_Comm_dup, split_type) and
 * has no deadline, like MPI_Init.
 *
 * Threading. g.mu serializes every MPI call made here, whichever comm and
 * thread make it (the rank thread, comm.c's progress thread, an abort from
 * any thread): that is what MPI_THREAD_SERIALIZED asks. The user op runs
 * inside MPI_Test, under g.mu, and calls no MPI. Sleeps happen outside it.
 */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/collectives_int.h"
#include "common/clock.h"

#define SPIN_MS 1000        /* test back to back (yielding) this long into a wait */
#define SLEEP_MAX_US 200    /* then sleep between tests, at most this long */
#define ABORT_TAG 7         /* on the abort channel (its own communicator) */
#define ABORT_MAX 256       /* bytes of an abort reason, NUL included */

/* Process-wide MPI state (one MPI per process). */
static struct {
    pthread_mutex_t mu; /* every MPI call below; lock order: c->mu (comm.c) is never held */
    int we_init;        /* we called MPI_Init_thread */
    int ncomms;         /* comms alive */
    int poisoned;       /* a comm abandoned requests: never finalize */
} g = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

#define LOCK() pthread_mutex_lock(&g.mu)
#define UNLOCK() pthread_mutex_unlock(&g.mu)

typedef struct mpi_impl {
    MPI_Comm comm;              /* dup of WORLD: collectives and point to point */
    MPI_Comm ctl;               /* dup of WORLD: the abort channel */
    MPI_Op op_f16, op_bf16;     /* user sums (MPI_OP_NULL until created) */
    int tag_ub;                 /* largest user tag (MPI_TAG_UB) */
    size_t max_count;           /* elements per MPI call */
    unsigned long long nops;    /* operations issued: "#n" in messages */
    int poisoned;               /* a request of this comm was abandoned */

    /* abort on this rank: why is written once, before aborted is set */
    atomic_int aborted;
    pthread_mutex_t why_mu;
    char why[ABORT_MAX];
    MPI_Request *abort_sends;   /* [world]: the notices sent to the peers */

    /* abort of a peer, seen by a poll */
    MPI_Request abort_recv;     /* posted on ctl; MPI_REQUEST_NULL once completed */
    char abort_in[ABORT_MAX];
    int peer_aborted;           /* the rank whose notice arrived, or -1 */
} mpi_impl;

int sl_comm_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* ---------------------------------------------------------------- helpers */

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static int mpi_fail(const sl_comm *c, const char *fn, const char *what, int err)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(err, s, &n) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", err);
    if (c)
        return sl_fail(SL_EMPI, "%s: mpi rank %d of %d: %s: %s", fn, c->rank, c->world, what, s);
    return sl_fail(SL_EMPI, "%s: mpi: %s: %s", fn, what, s);
}

static MPI_Datatype mpi_type(sl_dtype t) { return t == SL_DTYPE_F32 ? MPI_FLOAT : MPI_UINT16_T; }

/* The user ops: inout[i] += in[i], in f32, rounded once (dtype.c). */
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    sl_reduce_add(SL_DTYPE_F16, inout, in, (size_t)*len);
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    sl_reduce_add(SL_DTYPE_BF16, inout, in, (size_t)*len);
}

/* "[off, off+n) of count" when split, else "count elements". */
static void describe(char *s, size_t cap, const char *call, unsigned long long no,
                     const char *extra, sl_dtype t, size_t off, size_t n, size_t count)
{
    if (n == count)
        snprintf(s, cap, "%s #%llu (%s%s, %zu elements)", call, no, extra, sl_dtype_name(t), n);
    else
        snprintf(s, cap, "%s #%llu (%s%s, elements [%zu, %zu) of %zu)", call, no, extra,
                 sl_dtype_name(t), off, off + n, count);
}

/* Poll req until it completes (SL_OK, *st filled), timeout_ms passes
 * (SL_ETIMEDOUT; < 0: never), this rank or a peer aborts (SL_ECANCELED), or
 * MPI reports an error (SL_EMPI, *mpi_err set). On SL_ETIMEDOUT and
 * SL_ECANCELED req is still active: the caller cancels or abandons it.
 * waiting_for names the peer(s) for the timeout message. */
static int wait_req(sl_comm *c, MPI_Request *req, MPI_Status *st, long timeout_ms,
                    const char *fn, const char *what, const char *waiting_for, int *mpi_err)
{
    mpi_impl *im = c->impl;
    double t0 = sl_now_ms();
    long nap = 1;
    for (;;) {
        if (atomic_load(&im->aborted)) {
            char why[ABORT_MAX];
            pthread_mutex_lock(&im->why_mu);
            memcpy(why, im->why, sizeof why);
            pthread_mutex_unlock(&im->why_mu);
            return sl_fail(SL_ECANCELED, "%s: mpi rank %d of %d: %s: aborted on this rank: %s",
                           fn, c->rank, c->world, what, why);
        }
        int flag = 0, pflag = 0, rc, prc = MPI_SUCCESS;
        MPI_Status pst;
        LOCK();
        rc = MPI_Test(req, &flag, st);
        if (rc == MPI_SUCCESS && !flag && im->abort_recv != MPI_REQUEST_NULL)
            prc = MPI_Test(&im->abort_recv, &pflag, &pst);
        UNLOCK();
        if (rc != MPI_SUCCESS) {
            if (mpi_err)
                *mpi_err = rc;
            return mpi_fail(c, fn, what, rc);
        }
        if (flag)
            return SL_OK;
        if (prc != MPI_SUCCESS)
            return mpi_fail(c, fn, "MPI_Test (abort channel)", prc);
        if (pflag) {
            im->abort_in[ABORT_MAX - 1] = '\0';
            im->peer_aborted = pst.MPI_SOURCE;
        }
        if (im->peer_aborted >= 0)
            return sl_fail(SL_ECANCELED, "%s: mpi rank %d of %d: %s: rank %d aborted: %s", fn,
                           c->rank, c->world, what, im->peer_aborted, im->abort_in);
        double waited = sl_now_ms() - t0;
        if (timeout_ms >= 0 && waited >= (double)timeout_ms)
            return sl_fail(SL_ETIMEDOUT, "%s: mpi rank %d of %d: %s: timed out after %ld ms "
                           "waiting for %s", fn, c->rank, c->world, what, timeout_ms,
                           waiting_for);
        if (waited < SPIN_MS) {
            sched_yield();
        } else {
            sleep_us(nap);
            nap = nap * 2 > SLEEP_MAX_US ? SLEEP_MAX_US : nap * 2;
        }
    }
}

/* Refuse to start an operation on a comm that saw an abort (the peers have
 * given up on it) and count it. */
static int begin_op(sl_comm *c, const char *fn)
{
    mpi_impl *im = c->impl;
    im->nops++;
    if (atomic_load(&im->aborted) || im->peer_aborted >= 0) {
        char why[ABORT_MAX];
        pthread_mutex_lock(&im->why_mu);
        memcpy(why, im->why, sizeof why);
        pthread_mutex_unlock(&im->why_mu);
        if (im->peer_aborted >= 0)
            return sl_fail(SL_ECANCELED, "%s: mpi rank %d of %d: rank %d aborted: %s", fn,
                           c->rank, c->world, im->peer_aborted, im->abort_in);
        return sl_fail(SL_ECANCELED, "%s: mpi rank %d of %d: aborted on this rank: %s", fn,
                       c->rank, c->world, why);
    }
    return SL_OK;
}

/* Start one collective request (the call under g.mu) and wait for it with
 * the comm's deadline; any failure poisons the comm (the request is left
 * to MPI). */
static int finish_coll(sl_comm *c, int start_rc, MPI_Request *req, const char *fn,
                       const char *what)
{
    mpi_impl *im = c->impl;
    if (start_rc != MPI_SUCCESS) {
        im->poisoned = 1;
        return mpi_fail(c, fn, what, start_rc);
    }
    char peers[64];
    if (c->world == 2)
        snprintf(peers, sizeof peers, "rank %d", 1 - c->rank);
    else
        snprintf(peers, sizeof peers, "the other %d ranks (MPI does not say which is late)",
                 c->world - 1);
    int rc = wait_req(c, req, MPI_STATUS_IGNORE, c->cfg.timeout_ms, fn, what, peers, NULL);
    if (rc)
        im->poisoned = 1;
    return rc;
}

/* ------------------------------------------------------------ collectives */

static int mpi_allreduce(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op)
{
    const char *fn = "sl_comm_allreduce";
    mpi_impl *im = c->impl;
    int rc = begin_op(c, fn);
    if (rc)
        return rc;
    size_t es = sl_dtype_size(t);
    MPI_Op mop = t == SL_DTYPE_F32 ? MPI_SUM : t == SL_DTYPE_F16 ? im->op_f16 : im->op_bf16;
    for (size_t off = 0, n; off < count; off += n) {
        n = count - off < im->max_count ? count - off : im->max_count;
        char what[160];
        describe(what, sizeof what, "MPI_Iallreduce", im->nops, op == SL_RED_AVG ? "avg, " :
                 "sum, ", t, off, n, count);
        MPI_Request req = MPI_REQUEST_NULL;
        LOCK();
        int mrc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)n, mpi_type(t), mop,
                                 im->comm, &req);
        UNLOCK();
        if ((rc = finish_coll(c, mrc, &req, fn, what)))
            return rc;
    }
    if (op == SL_RED_AVG && c->world > 1)
        sl_scale(t, buf, count, 1.0f / (float)c->world);
    return SL_OK;
}

static int mpi_broadcast(sl_comm *c, void *buf, size_t count, sl_dtype t, int root)
{
    const char *fn = "sl_comm_broadcast";
    mpi_impl *im = c->impl;
    int rc = begin_op(c, fn);
    if (rc)
        return rc;
    size_t es = sl_dtype_size(t);
    char extra[32];
    snprintf(extra, sizeof extra, "root %d, ", root);
    for (size_t off = 0, n; off < count; off += n) {
        n = count - off < im->max_count ? count - off : im->max_count;
        char what[160];
        describe(what, sizeof what, "MPI_Ibcast", im->nops, extra, t, off, n, count);
        MPI_Request req = MPI_REQUEST_NULL;
        LOCK();
        int mrc = MPI_Ibcast((char *)buf + off * es, (int)n, mpi_type(t), root, im->comm, &req);
        UNLOCK();
        if ((rc = finish_coll(c, mrc, &req, fn, what)))
            return rc;
    }
    return SL_OK;
}

/* recv: world blocks of count elements. A piece [off, off+n) of every block
 * is received as one element of a type of n elements whose extent is a
 * whole block, so block r's piece lands at recv + (r*count + off). */
static int mpi_allgather(sl_comm *c, const void *send, void *recv, size_t count, sl_dtype t)
{
    const char *fn = "sl_comm_allgather";
    mpi_impl *im = c->impl;
    int rc = begin_op(c, fn);
    if (rc)
        return rc;
    size_t es = sl_dtype_size(t);
    MPI_Datatype dt = mpi_type(t);
    int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count * es;
    for (size_t off = 0, n; off < count; off += n) {
        n = count - off < im->max_count ? count - off : im->max_count;
        char what[160];
        describe(what, sizeof what, "MPI_Iallgather", im->nops, in_place ? "in place, " : "", t,
                 off, n, count);
        MPI_Request req = MPI_REQUEST_NULL;
        const void *sp = in_place ? MPI_IN_PLACE : (const char *)send + off * es;
        char *rp = (char *)recv + off * es;
        int mrc;
        LOCK();
        if (n == count) {
            mrc = MPI_Iallgather(sp, (int)n, dt, rp, (int)n, dt, im->comm, &req);
        } else {
            MPI_Datatype piece = MPI_DATATYPE_NULL, block = MPI_DATATYPE_NULL;
            mrc = MPI_Type_contiguous((int)n, dt, &piece);
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Type_create_resized(piece, 0, (MPI_Aint)(count * es), &block);
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Type_commit(&block);
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Iallgather(sp, (int)n, dt, rp, 1, block, im->comm, &req);
            /* freeing a type in use only marks it: the request keeps it */
            if (block != MPI_DATATYPE_NULL)
                MPI_Type_free(&block);
            if (piece != MPI_DATATYPE_NULL)
                MPI_Type_free(&piece);
        }
        UNLOCK();
        if ((rc = finish_coll(c, mrc, &req, fn, what)))
            return rc;
    }
    return SL_OK;
}

static int mpi_barrier(sl_comm *c)
{
    const char *fn = "sl_comm_barrier";
    mpi_impl *im = c->impl;
    int rc = begin_op(c, fn);
    if (rc)
        return rc;
    char what[64];
    snprintf(what, sizeof what, "MPI_Ibarrier #%llu", im->nops);
    MPI_Request req = MPI_REQUEST_NULL;
    LOCK();
    int mrc = MPI_Ibarrier(im->comm, &req);
    UNLOCK();
    return finish_coll(c, mrc, &req, fn, what);
}

/* ---------------------------------------------------------- point to point */

static int mpi_send(sl_comm *c, const void *buf, size_t count, sl_dtype t, int peer, int tag)
{
    const char *fn = "sl_comm_send";
    mpi_impl *im = c->impl;
    if (tag < 0 || tag > im->tag_ub)
        return sl_fail(SL_EINVAL, "%s: mpi rank %d of %d: tag %d outside [0, %d]", fn, c->rank,
                       c->world, tag, im->tag_ub);
    if (count > INT_MAX)
        return sl_fail(SL_EINVAL, "%s: mpi rank %d of %d: %zu elements to rank %d: a message "
                       "holds at most INT_MAX elements", fn, c->rank, c->world, count, peer);
    int rc = begin_op(c, fn);
    if (rc)
        return rc;
    char what[160], peer_s[32];
    snprintf(what, sizeof what, "MPI_Isend #%llu to rank %d (tag %d, %s, %zu elements)", im->nops,
             peer, tag, sl_dtype_name(t), count);
    snprintf(peer_s, sizeof peer_s, "rank %d to receive", peer);
    MPI_Request req = MPI_REQUEST_NULL;
    LOCK();
    int mrc = MPI_Isend(buf, (int)count, mpi_type(t), peer, tag, im->comm, &req);
    UNLOCK();
    if (mrc != MPI_SUCCESS)
        return mpi_fail(c, fn, what, mrc);
    rc = wait_req(c, &req, MPI_STATUS_IGNORE, c->cfg.timeout_ms, fn, what, peer_s, NULL);
    if (rc)
        im->poisoned = 1; /* MPI cannot reliably cancel a send: it stays with MPI */
    return rc;
}

static int mpi_recv(sl_comm *c, void *buf, size_t count, sl_dtype t, int peer, int tag,
                    int timeout_ms, int *from, int *tag_out, size_t *got)
{
    const char *fn = "sl_comm_recv";
    mpi_impl *im = c->impl;
    if (tag < -1 || tag > im->tag_ub)
        return sl_fail(SL_EINVAL, "%s: mpi rank %d of %d: tag %d outside [-1, %d]", fn, c->rank,
                       c->world, tag, im->tag_ub);
    if (count > INT_MAX)
        count = INT_MAX; /* a message holds at most INT_MAX elements */
    int rc = begin_op(c, fn);
    if (rc)
        return rc;
    char what[160], peer_s[48], tag_s[24];
    if (peer >= 0)
        snprintf(peer_s, sizeof peer_s, "rank %d", peer);
    else
        snprintf(peer_s, sizeof peer_s, "any rank");
    if (tag >= 0)
        snprintf(tag_s, sizeof tag_s, "tag %d", tag);
    else
        snprintf(tag_s, sizeof tag_s, "any tag");
    snprintf(what, sizeof what, "MPI_Irecv #%llu from %s (%s, %s, up to %zu elements)", im->nops,
             peer_s, tag_s, sl_dtype_name(t), count);
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    memset(&st, 0, sizeof st);
    LOCK();
    int mrc = MPI_Irecv(buf, (int)count, mpi_type(t), peer < 0 ? MPI_ANY_SOURCE : peer,
                        tag < 0 ? MPI_ANY_TAG : tag, im->comm, &req);
    UNLOCK();
    if (mrc != MPI_SUCCESS)
        return mpi_fail(c, fn, what, mrc);
    int merr = MPI_SUCCESS;
    rc = wait_req(c, &req, &st, timeout_ms, fn, what, peer_s, &merr);
    if (rc == SL_ETIMEDOUT || rc == SL_ECANCELED) {
        /* Cancelling a receive is local and always completes; a message
         * that arrived meanwhile is kept (the timeout then did not happen). */
        int cancelled = 1;
        LOCK();
        if (MPI_Cancel(&req) == MPI_SUCCESS && MPI_Wait(&req, &st) == MPI_SUCCESS)
            MPI_Test_cancelled(&st, &cancelled);
        else
            im->poisoned = 1;
        UNLOCK();
        if (cancelled || rc == SL_ECANCELED)
            return rc;
        sl_clear_error();
        rc = SL_OK;
    }
    if (rc == SL_EMPI) {
        int cls = 0;
        if (MPI_Error_class(merr, &cls) == MPI_SUCCESS && cls == MPI_ERR_TRUNCATE)
            return sl_fail(SL_EINVAL, "%s: mpi rank %d of %d: %s: the message from rank %d "
                           "(tag %d) is longer than the buffer", fn, c->rank, c->world, what,
                           st.MPI_SOURCE, st.MPI_TAG);
        return rc;
    }
    if (rc)
        return rc;
    int n = 0;
    LOCK();
    mrc = MPI_Get_count(&st, mpi_type(t), &n);
    UNLOCK();
    if (mrc != MPI_SUCCESS || n == MPI_UNDEFINED)
        return sl_fail(SL_EMPI, "%s: mpi rank %d of %d: %s: the message from rank %d (tag %d) "
                       "is not a whole number of %s elements", fn, c->rank, c->world, what,
                       st.MPI_SOURCE, st.MPI_TAG, sl_dtype_name(t));
    if (from)
        *from = st.MPI_SOURCE;
    if (tag_out)
        *tag_out = st.MPI_TAG;
    if (got)
        *got = (size_t)n;
    return SL_OK;
}

/* ----------------------------------------------------------- abort, destroy */

static void mpi_abort(sl_comm *c, const char *why)
{
    mpi_impl *im = c->impl;
    pthread_mutex_lock(&im->why_mu);
    int first = !atomic_load(&im->aborted);
    if (first) {
        snprintf(im->why, sizeof im->why, "%s", why);
        atomic_store(&im->aborted, 1);
    }
    pthread_mutex_unlock(&im->why_mu);
    if (!first)
        return;
    /* Best effort: a notice that cannot be sent leaves that peer to its
     * timeout. The reason (NUL included) goes to every peer. */
    LOCK();
    for (int r = 0; r < c->world; r++)
        if (r != c->rank)
            MPI_Isend(im->why, (int)strlen(im->why) + 1, MPI_CHAR, r, ABORT_TAG, im->ctl,
                      &im->abort_sends[r]);
    UNLOCK();
}

/* Give the abort notices up to 200 ms to leave; 1 when they all did (their
 * buffer may then be freed). */
static int drain_abort_sends(sl_comm *c)
{
    mpi_impl *im = c->impl;
    double t0 = sl_now_ms();
    for (;;) {
        int done = 0;
        LOCK();
        MPI_Testall(c->world, im->abort_sends, &done, MPI_STATUSES_IGNORE);
        UNLOCK();
        if (done)
            return 1;
        if (sl_now_ms() - t0 > 200)
            return 0;
        sleep_us(1000);
    }
}

/* The release shared by destroy and a create that fails half way:
 * everything that is not MPI_COMM_NULL / MPI_OP_NULL, then the process
 * count, then MPI_Finalize when we started MPI and this was the last comm. */
static void release_mpi(mpi_impl *im, int poisoned)
{
    LOCK();
    if (im->abort_recv != MPI_REQUEST_NULL) {
        /* local: the buffer is about to be freed, so it must be taken back */
        MPI_Cancel(&im->abort_recv);
        MPI_Wait(&im->abort_recv, MPI_STATUS_IGNORE);
    }
    if (poisoned) {
        g.poisoned = 1;
    } else {
        if (im->op_f16 != MPI_OP_NULL)
            MPI_Op_free(&im->op_f16);
        if (im->op_bf16 != MPI_OP_NULL)
            MPI_Op_free(&im->op_bf16);
        if (im->ctl != MPI_COMM_NULL)
            MPI_Comm_free(&im->ctl);
        if (im->comm != MPI_COMM_NULL)
            MPI_Comm_free(&im->comm);
    }
    if (--g.ncomms == 0 && g.we_init && !g.poisoned) {
        MPI_Finalize();
        g.we_init = 0;
    }
    UNLOCK();
}

static void mpi_destroy(sl_comm *c)
{
    mpi_impl *im = c->impl;
    if (!im)
        return;
    int aborted = atomic_load(&im->aborted);
    int keep = aborted && !drain_abort_sends(c); /* a notice still holds im->why */
    release_mpi(im, im->poisoned || aborted || im->peer_aborted >= 0);
    c->impl = NULL;
    if (keep)
        return; /* left to the ending process, on purpose */
    pthread_mutex_destroy(&im->why_mu);
    free(im->abort_sends);
    free(im);
}

static const sl_comm_vt mpi_vt = {
    .name = "mpi",
    .allreduce = mpi_allreduce,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .barrier = mpi_barrier,
    .send = mpi_send,
    .recv = mpi_recv,
    .abort_peers = mpi_abort,
    .destroy = mpi_destroy,
};

/* ----------------------------------------------------------------- create */

/* Under g.mu: start MPI unless it runs, check its thread level, count a comm. */
static int start_mpi(const char *fn)
{
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE, rc;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return sl_fail(SL_EMPI, "%s: mpi: MPI was finalized already in this process (it cannot "
                       "start twice; keep one communicator alive)", fn);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(NULL, fn, "MPI_Init_thread", rc);
        g.we_init = 1;
    } else if ((rc = MPI_Query_thread(&provided)) != MPI_SUCCESS) {
        return mpi_fail(NULL, fn, "MPI_Query_thread", rc);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        if (g.we_init && g.ncomms == 0) {
            MPI_Finalize();
            g.we_init = 0;
        }
        return sl_fail(SL_EMPI, "%s: mpi: MPI runs at thread level %d, below "
                       "MPI_THREAD_SERIALIZED (%d) that the progress thread needs", fn, provided,
                       MPI_THREAD_SERIALIZED);
    }
    g.ncomms++;
    return SL_OK;
}

/* Under g.mu: the communicators, ops and the posted abort receive. */
static int setup_impl(mpi_impl *im, int *rank, int *world, int *lrank, int *lworld,
                      const char *fn)
{
    int rc;
    const char *what;
#define TRY(call)                                                                                  \
    do {                                                                                           \
        what = #call;                                                                              \
        if ((rc = (call)) != MPI_SUCCESS)                                                          \
            goto fail;                                                                             \
    } while (0)
    TRY(MPI_Comm_dup(MPI_COMM_WORLD, &im->comm));
    TRY(MPI_Comm_set_errhandler(im->comm, MPI_ERRORS_RETURN));
    TRY(MPI_Comm_dup(MPI_COMM_WORLD, &im->ctl));
    TRY(MPI_Comm_set_errhandler(im->ctl, MPI_ERRORS_RETURN));
    TRY(MPI_Comm_rank(im->comm, rank));
    TRY(MPI_Comm_size(im->comm, world));
    MPI_Comm node = MPI_COMM_NULL;
    TRY(MPI_Comm_split_type(im->comm, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node));
    int r1 = MPI_Comm_rank(node, lrank), r2 = MPI_Comm_size(node, lworld);
    MPI_Comm_free(&node);
    TRY(r1 != MPI_SUCCESS ? r1 : r2);
    int *ub = NULL, flag = 0;
    TRY(MPI_Comm_get_attr(im->comm, MPI_TAG_UB, &ub, &flag));
    im->tag_ub = flag && ub ? *ub : 32767;
    TRY(MPI_Op_create(sum_f16, 1, &im->op_f16));
    TRY(MPI_Op_create(sum_bf16, 1, &im->op_bf16));
    TRY(MPI_Irecv(im->abort_in, ABORT_MAX, MPI_CHAR, MPI_ANY_SOURCE, ABORT_TAG, im->ctl,
                  &im->abort_recv));
    return SL_OK;
#undef TRY
fail:
    return mpi_fail(NULL, fn, what, rc);
}

int sl_comm_mpi_create(const sl_comm_config *cfg, sl_comm **out)
{
    const char *fn = "sl_comm_mpi_create";
    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL out", fn);
    *out = NULL;
    if (cfg && sl_check_config_size(fn, cfg->size, sizeof *cfg))
        return SL_EINVAL;
    mpi_impl *im = calloc(1, sizeof *im);
    if (!im)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    im->comm = im->ctl = MPI_COMM_NULL;
    im->op_f16 = im->op_bf16 = MPI_OP_NULL;
    im->abort_recv = MPI_REQUEST_NULL;
    im->peer_aborted = -1;
    im->max_count = INT_MAX;
    const char *mc = getenv("SLUICE_MPI_MAX_COUNT"); /* tests: reach the split path */
    if (mc && atol(mc) > 0 && atol(mc) < INT_MAX)
        im->max_count = (size_t)atol(mc);
    atomic_init(&im->aborted, 0);
    if (pthread_mutex_init(&im->why_mu, NULL)) {
        free(im);
        return sl_fail(SL_ENOMEM, "%s: pthread_mutex_init failed", fn);
    }

    int rank = 0, world = 1, lrank = 0, lworld = 1;
    LOCK();
    int rc = start_mpi(fn);
    if (rc) {
        UNLOCK();
        goto fail_im;
    }
    rc = setup_impl(im, &rank, &world, &lrank, &lworld, fn);
    UNLOCK();
    if (rc)
        goto fail_mpi;
    im->abort_sends = malloc((size_t)world * sizeof *im->abort_sends);
    if (!im->abort_sends) {
        rc = sl_fail(SL_ENOMEM, "%s: mpi rank %d: out of memory", fn, rank);
        goto fail_mpi;
    }
    for (int r = 0; r < world; r++)
        im->abort_sends[r] = MPI_REQUEST_NULL;
    sl_comm *c = sl_comm_alloc(&mpi_vt, SL_COMM_MPI, rank, world, cfg);
    if (!c) {
        rc = SL_ENOMEM;
        goto fail_mpi;
    }
    c->local_rank = lrank;
    c->local_world = lworld;
    c->impl = im;
    *out = c;
    return SL_OK;

fail_mpi:
    release_mpi(im, 0);
fail_im:
    pthread_mutex_destroy(&im->why_mu);
    free(im->abort_sends);
    free(im);
    return rc;
}

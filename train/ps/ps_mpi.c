/*
 * train/ps/ps_mpi.c - the parameter server across processes: server ranks
 * running sl_ps_serve, and the worker side of an sl_ps handle made by
 * sl_ps_create_mpi (train/ps/ps_int.h has the semantics): the backend table
 * sl_ps_mpi_open hands train/ps/ps.c, which calls through it after checking
 * the arguments and the sticky error. Nothing here calls ps.c.
 *
 * DESIGN.
 *   Ranks 0 .. S-1 are servers (server s holds shard s of the plan, which
 *   every rank computes alike from its template), ranks S .. world-1 are
 *   workers 0 .. W-1. Messages are point to point on the communicator
 *   (sl_comm_send / sl_comm_recv), counted in 4-byte words (f32):
 *
 *     worker -> server  TAG_REQ   ps_msg (kind, worker, lr, version, step, flags)
 *                       TAG_DATA  a payload in plan layout that follows PUSH
 *                                 (grads, buffers) and LOAD (values; then the
 *                                 momentum image when flags say so)
 *     server -> worker  TAG_REPLY ps_reply (status, version, step, stats, message)
 *                       TAG_RDATA payloads that follow an OK reply to PULL
 *                                 (values) and SNAP (values, then momentum)
 *
 *   A server is one thread: it receives requests from any worker, applies a
 *   PUSH at once (MPI's queue is its inbox, arrival order is apply order),
 *   and parks a PULL until it may be answered: every push of that worker
 *   is applied by then (a worker's messages arrive in the order sent) and
 *   the SSP bound, counted on this server's own tally of pushes applied
 *   per worker, holds. Parked pulls are re-examined after every request;
 *   one parked past timeout_ms is answered with SL_ETIMEDOUT. A server
 *   that met an error answers every later request with it, and keeps
 *   consuming pushes, so workers fail instead of hanging.
 *   A worker has one request kind outstanding at a time: it sends it to
 *   every server, then takes the replies in the order they come (any
 *   source), each followed by its data from the same server. A server
 *   blocked sending to a worker therefore only waits for that worker to
 *   reach its reply, never in a cycle.
 *
 * Deadlines: the server waits at most timeout_ms for any request (no
 * worker alive for that long is an error) and for a PUSH's data; a worker
 * waits 2 * timeout_ms + 1 s for a reply (a parked pull is answered within
 * timeout_ms); sends are bounded by the communicator's own timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ps/ps_int.h"

enum { TAG_REQ = 7101, TAG_DATA = 7102, TAG_REPLY = 7103, TAG_RDATA = 7104 };
enum { MSG_PULL = 1, MSG_PUSH, MSG_DONE, MSG_SNAP, MSG_LOAD, MSG_STATS };

typedef struct ps_msg {
    int32_t kind, worker;
    int32_t flags;          /* SNAP / LOAD: momentum too; STATS: reset */
    float lr;               /* PUSH */
    uint64_t version;       /* PUSH: this server's version at the worker's pull */
    int64_t step;           /* LOAD: the optimizer's step */
} ps_msg;

typedef struct ps_reply {
    int32_t status, pad;
    uint64_t version;       /* the server's version (PULL, SNAP, STATS) */
    int64_t step;           /* SNAP: the optimizer's step */
    sl_ps_stats stats;      /* STATS */
    char msg[512];          /* status != 0: what went wrong */
} ps_reply;

_Static_assert(sizeof(ps_msg) % 4 == 0 && sizeof(ps_reply) % 4 == 0, "whole f32 words");
#define WORDS(bytes) ((bytes) / 4)

static const char *kind_name(int k)
{
    static const char *const n[] = {"?", "pull", "push", "done", "snapshot", "load", "stats"};
    return k >= 0 && k <= MSG_STATS ? n[k] : "?";
}

/* =================================================================== server */

typedef struct server {
    const sl_ps_config *cfg;
    sl_comm *comm;
    int S, W, rank;
    sl_ps_plan plan;
    sl_ps_shard sh;
    size_t bytes;               /* this shard's payload */
    unsigned char *buf, *mom;   /* receive buffer, momentum image */
    uint64_t *applied;          /* [W] pushes applied per worker */
    char *done, *parked, *held; /* [W] held: a parked pull was not ready at once */
    double *park_t0;            /* [W] */
    int ndone;
    sl_ps_stats st;
    double stale_sum;
    int err;                    /* sticky: every later request gets it */
    char errmsg[512];
} server;

static int send_reply(server *v, int w, int status, const char *msg, int64_t step)
{
    ps_reply r;
    memset(&r, 0, sizeof r);
    r.status = status;
    r.version = v->sh.version;
    r.step = step;
    r.stats = v->st;
    r.stats.version = v->sh.version;
    if (msg)
        snprintf(r.msg, sizeof r.msg, "%s", msg);
    return sl_comm_send(v->comm, &r, WORDS(sizeof r), SL_DTYPE_F32, v->S + w, TAG_REPLY);
}

static int send_data(server *v, int w, const void *p)
{
    if (!v->bytes)
        return SL_OK;
    return sl_comm_send(v->comm, p, WORDS(v->bytes), SL_DTYPE_F32, v->S + w, TAG_RDATA);
}

static int recv_data(server *v, int w, void *p)
{
    if (!v->bytes)
        return SL_OK;
    size_t got = 0;
    int rc = sl_comm_recv(v->comm, p, WORDS(v->bytes), SL_DTYPE_F32, v->S + w, TAG_DATA,
                          v->cfg->timeout_ms, NULL, NULL, &got);
    if (rc)
        return rc;
    if (got != WORDS(v->bytes))
        return sl_fail(SL_ECORRUPT, "sl_ps_serve: server rank %d: worker %d sent %zu words, "
                       "the shard has %zu", v->rank, w, got, WORDS(v->bytes));
    return SL_OK;
}

/* How far worker w is ahead of the slowest other active worker, here. */
static uint64_t lead_of(const server *v, int w, int *slowest)
{
    int who = -1;
    uint64_t lo = 0;
    for (int j = 0; j < v->W; j++)
        if (j != w && !v->done[j] && (who < 0 || v->applied[j] < lo))
            who = j, lo = v->applied[j];
    if (slowest)
        *slowest = who;
    return (who >= 0 && v->applied[w] > lo) ? v->applied[w] - lo : 0;
}

/* Answer the parked pulls that may go now (and, with expire, those past
 * their deadline). */
static int serve_parked(server *v, int expire)
{
    int K = v->cfg->max_staleness;
    double now = sl_now_s();
    for (int w = 0; w < v->W; w++) {
        if (!v->parked[w])
            continue;
        int who;
        uint64_t lead = lead_of(v, w, &who);
        int rc;
        if (v->err) {
            rc = send_reply(v, w, v->err, v->errmsg, 0);
        } else if (K < 0 || lead <= (uint64_t)K) {
            if (v->held[w]) {
                v->st.ssp_waits++;
                v->st.ssp_wait_s += now - v->park_t0[w];
            }
            if (lead > v->st.max_lead)
                v->st.max_lead = lead;
            v->st.pulls++;
            rc = send_reply(v, w, SL_OK, NULL, 0);
            if (!rc)
                rc = send_data(v, w, v->sh.arena);
        } else if (expire && now - v->park_t0[w] >= v->cfg->timeout_ms * 1e-3) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "server rank %d: worker %d: at step %llu, %llu ahead of worker %d (step "
                     "%llu) after %d ms; max_staleness %d",
                     v->rank, w, (unsigned long long)v->applied[w], (unsigned long long)lead, who,
                     (unsigned long long)v->applied[who], v->cfg->timeout_ms, K);
            rc = send_reply(v, w, SL_ETIMEDOUT, msg, 0);
        } else {
            v->held[w] = 1;
            continue;
        }
        v->parked[w] = v->held[w] = 0;
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* Milliseconds until the first parked pull's deadline, or timeout_ms. */
static int next_wait_ms(const server *v)
{
    double now = sl_now_s(), best = v->cfg->timeout_ms * 1e-3;
    for (int w = 0; w < v->W; w++)
        if (v->parked[w]) {
            double left = v->park_t0[w] + v->cfg->timeout_ms * 1e-3 - now;
            if (left < best)
                best = left;
        }
    int ms = (int)(best * 1e3) + 1;
    return ms < 1 ? 1 : ms;
}

static void server_fail(server *v, int rc, const char *what)
{
    if (!v->err) {
        v->err = rc;
        snprintf(v->errmsg, sizeof v->errmsg, "server rank %d: %s", v->rank, what);
    }
}

static int handle(server *v, const ps_msg *q, int w)
{
    int rc = SL_OK;
    switch (q->kind) {
    case MSG_PULL:
        if (v->done[w])
            return send_reply(v, w, SL_EINVAL, "pull after sl_ps_worker_done", 0);
        v->parked[w] = 1;
        v->held[w] = 0;
        v->park_t0[w] = sl_now_s();
        return SL_OK;
    case MSG_PUSH:
        if ((rc = recv_data(v, w, v->buf)))
            return rc;
        if (!v->err) {
            uint64_t ver = v->sh.version;
            if ((rc = sl_ps_shard_apply(&v->sh, v->buf, q->lr))) {
                server_fail(v, rc, sl_errmsg());
                return SL_OK;
            }
            sl_ps_stats_sample(&v->st, &v->stale_sum, ver > q->version ? ver - q->version : 0);
            v->applied[w]++;
            v->st.pushes++;
            v->st.updates++;
        }
        return SL_OK;
    case MSG_DONE:
        if (!v->done[w])
            v->done[w] = 1, v->ndone++;
        return SL_OK;
    case MSG_SNAP:
        if ((rc = send_reply(v, w, v->err, v->err ? v->errmsg : NULL, *v->sh.step)) || v->err)
            return rc;
        if ((rc = send_data(v, w, v->sh.arena)) || !q->flags)
            return rc;
        memset(v->mom, 0, v->bytes);
        sl_ps_shard_momentum_out(&v->sh, v->mom);
        return send_data(v, w, v->mom);
    case MSG_LOAD:
        if ((rc = recv_data(v, w, v->buf)) || (q->flags && (rc = recv_data(v, w, v->mom))))
            return rc;
        if (!v->err) {
            memcpy(v->sh.arena, v->buf, v->bytes);
            if (!q->flags)
                memset(v->mom, 0, v->bytes);
            sl_ps_shard_momentum_in(&v->sh, v->mom);
            *v->sh.step = q->flags ? q->step : 0;
        }
        return send_reply(v, w, v->err, v->err ? v->errmsg : NULL, 0);
    case MSG_STATS:
        rc = send_reply(v, w, SL_OK, NULL, 0);
        if (q->flags) {
            memset(&v->st, 0, sizeof v->st);
            v->stale_sum = 0;
        }
        return rc;
    }
    return sl_fail(SL_ECORRUPT, "sl_ps_serve: server rank %d: request kind %d from worker %d",
                   v->rank, q->kind, w);
}

static int serve_loop(server *v)
{
    while (v->ndone < v->W) {
        int rc = serve_parked(v, 0);
        if (rc)
            return rc;
        int any_parked = 0;
        for (int w = 0; w < v->W; w++)
            any_parked |= v->parked[w];
        ps_msg q;
        int from = -1;
        size_t got = 0;
        rc = sl_comm_recv(v->comm, &q, WORDS(sizeof q), SL_DTYPE_F32, -1, TAG_REQ,
                          next_wait_ms(v), &from, NULL, &got);
        if (rc == SL_ETIMEDOUT && any_parked) {
            sl_clear_error();
            if ((rc = serve_parked(v, 1)))
                return rc;
            continue;
        }
        if (rc == SL_ETIMEDOUT)
            return sl_fail(rc, "sl_ps_serve: server rank %d: no request from any worker for "
                           "%d ms (%d of %d workers done)", v->rank, v->cfg->timeout_ms,
                           v->ndone, v->W);
        if (rc)
            return sl_fail(rc, "sl_ps_serve: server rank %d: %s", v->rank, sl_errmsg());
        int w = from - v->S;
        if (w < 0 || w >= v->W || got != WORDS(sizeof q) || q.worker != w)
            return sl_fail(SL_ECORRUPT, "sl_ps_serve: server rank %d: bad request from rank %d "
                           "(%zu words, worker field %d)", v->rank, from, got, (int)q.worker);
        if ((rc = handle(v, &q, w)))
            return sl_fail(rc, "sl_ps_serve: server rank %d: %s from worker %d: %s", v->rank,
                           kind_name(q.kind), w, sl_errmsg());
    }
    return SL_OK;
}

int sl_ps_serve(const sl_ps_config *cfg, sl_comm *comm, int ps_ranks, sl_model *tmpl,
                sl_ps_stats *stats)
{
    const char *fn = "sl_ps_serve";
    if (!cfg || !comm || !tmpl)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (sl_comm_backend_of(comm) != SL_COMM_MPI)
        return sl_fail(SL_ENOTSUP, "%s: a %s communicator: server ranks need the mpi backend's "
                       "point-to-point messages", fn,
                       sl_comm_backend_name(sl_comm_backend_of(comm)));
    int world = sl_comm_world(comm), rank = sl_comm_rank(comm);
    if (ps_ranks < 1 || ps_ranks >= world || rank >= ps_ranks)
        return sl_fail(SL_EINVAL, "%s: rank %d of %d with %d server ranks: not a server", fn,
                       rank, world, ps_ranks);
    if (cfg->servers != ps_ranks || cfg->workers != world - ps_ranks || cfg->timeout_ms <= 0 ||
        cfg->max_staleness < -1)
        return sl_fail(SL_EINVAL, "%s: rank %d: config has %d servers, %d workers, timeout %d "
                       "ms, max_staleness %d; the job %d and %d", fn, rank, cfg->servers,
                       cfg->workers, cfg->timeout_ms, cfg->max_staleness, ps_ranks,
                       world - ps_ranks);
    server v;
    memset(&v, 0, sizeof v);
    v.cfg = cfg;
    v.comm = comm;
    v.S = ps_ranks;
    v.W = world - ps_ranks;
    v.rank = rank;
    int rc = sl_ps_plan_init(&v.plan, tmpl, ps_ranks);
    if (rc)
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    if ((rc = sl_ps_shard_init(&v.sh, &v.plan, rank, tmpl, &cfg->sgd))) {
        rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
        goto free_plan;
    }
    v.bytes = v.plan.bytes[rank];
    v.buf = malloc(v.bytes ? v.bytes : 4);
    v.mom = calloc(1, v.bytes ? v.bytes : 4);
    v.applied = calloc((size_t)v.W, sizeof *v.applied);
    v.done = calloc((size_t)v.W, 1);
    v.parked = calloc((size_t)v.W, 1);
    v.held = calloc((size_t)v.W, 1);
    v.park_t0 = calloc((size_t)v.W, sizeof *v.park_t0);
    if (!v.buf || !v.mom || !v.applied || !v.done || !v.parked || !v.held || !v.park_t0) {
        rc = sl_fail(SL_ENOMEM, "%s: server rank %d: %zu-byte buffers", fn, rank, v.bytes);
        goto free_all;
    }
    rc = serve_loop(&v);
    if (stats) {
        *stats = v.st;
        stats->version = v.sh.version;
    }
free_all:
    free(v.buf);
    free(v.mom);
    free(v.applied);
    free(v.done);
    free(v.parked);
    free(v.held);
    free(v.park_t0);
    sl_ps_shard_fini(&v.sh);
free_plan:
    sl_ps_plan_fini(&v.plan);
    return rc;
}

/* ============================================================= worker side */

struct sl_ps_mpi {
    const sl_ps_plan *plan;
    const sl_ps_config *cfg;
    sl_comm *comm;
    int S, me;                 /* servers; this rank's worker id */
    unsigned char *buf, *mom;  /* the largest shard's payload, twice */
    uint64_t *pulled_ver;      /* [S] */
    uint64_t version;          /* what the last pull returned */
    int pulled, done;
    sl_ps_stats local;         /* pulls, pushes, pull_wait_s, push_wait_s */
};

int sl_ps_mpi_check(const sl_ps_config *cfg, sl_comm *comm, int ps_ranks, const char *fn)
{
    if (sl_comm_backend_of(comm) != SL_COMM_MPI)
        return sl_fail(SL_ENOTSUP, "%s: a %s communicator: the parameter server needs the mpi "
                       "backend's point-to-point messages", fn,
                       sl_comm_backend_name(sl_comm_backend_of(comm)));
    int world = sl_comm_world(comm), rank = sl_comm_rank(comm);
    if (ps_ranks < 1 || ps_ranks >= world || rank < ps_ranks)
        return sl_fail(SL_EINVAL, "%s: rank %d of %d with %d server ranks: not a worker (server "
                       "ranks call sl_ps_serve)", fn, rank, world, ps_ranks);
    if (cfg->servers != ps_ranks || cfg->workers != world - ps_ranks)
        return sl_fail(SL_EINVAL, "%s: rank %d: config has %d servers and %d workers, the job "
                       "%d and %d", fn, rank, cfg->servers, cfg->workers, ps_ranks,
                       world - ps_ranks);
    return SL_OK;
}

static void mpi_destroy(void *impl);
static const sl_ps_vt mpi_vt;

int sl_ps_mpi_open(const sl_ps_config *cfg, const sl_ps_plan *plan, sl_comm *comm, int ps_ranks,
                   const char *fn, const sl_ps_vt **vt, void **impl)
{
    sl_ps_mpi *x = calloc(1, sizeof *x);
    if (!x)
        return sl_fail(SL_ENOMEM, "%s: handle", fn);
    x->plan = plan;
    x->cfg = cfg;
    x->comm = comm;
    x->S = ps_ranks;
    x->me = sl_comm_rank(comm) - ps_ranks;
    size_t most = 4;
    for (int s = 0; s < x->S; s++)
        if (x->plan->bytes[s] > most)
            most = x->plan->bytes[s];
    x->buf = malloc(most);
    x->mom = calloc(1, most);
    x->pulled_ver = calloc((size_t)x->S, sizeof *x->pulled_ver);
    if (!x->buf || !x->mom || !x->pulled_ver) {
        mpi_destroy(x);
        return sl_fail(SL_ENOMEM, "%s: %zu-byte buffers", fn, most);
    }
    *vt = &mpi_vt;
    *impl = x;
    return SL_OK;
}

static int mpi_done(void *impl, int worker);

static void mpi_destroy(void *impl)
{
    sl_ps_mpi *x = impl;
    if (!x)
        return;
    if (!x->done && x->buf) /* leave the servers' count; errors cannot be reported here */
        mpi_done(x, x->me);
    free(x->buf);
    free(x->mom);
    free(x->pulled_ver);
    free(x);
}

static int check_me(sl_ps_mpi *x, int worker, const char *fn)
{
    if (worker != x->me)
        return sl_fail(SL_EINVAL, "%s: worker %d: this rank is worker %d", fn, worker, x->me);
    if (x->done)
        return sl_fail(SL_EINVAL, "%s: worker %d: called after sl_ps_worker_done", fn, worker);
    return SL_OK;
}

static int request(sl_ps_mpi *x, int s, int kind, int flags, float lr, uint64_t version,
                   int64_t step)
{
    ps_msg q = {kind, x->me, flags, lr, version, step};
    return sl_comm_send(x->comm, &q, WORDS(sizeof q), SL_DTYPE_F32, s, TAG_REQ);
}

static int send_payload(sl_ps_mpi *x, int s, const void *p)
{
    size_t b = x->plan->bytes[s];
    return b ? sl_comm_send(x->comm, p, WORDS(b), SL_DTYPE_F32, s, TAG_DATA) : SL_OK;
}

/* The next reply from any server not yet heard (seen[S]); *s = which. A
 * reply with an error status comes back as that error. */
static int next_reply(sl_ps_mpi *x, char *seen, ps_reply *r, int *s, const char *fn)
{
    int from = -1;
    size_t got = 0;
    int tmo = x->cfg->timeout_ms > (1 << 29) ? (1 << 30) : 2 * x->cfg->timeout_ms + 1000;
    int rc = sl_comm_recv(x->comm, r, WORDS(sizeof *r), SL_DTYPE_F32, -1, TAG_REPLY, tmo, &from,
                          NULL, &got);
    if (rc)
        return sl_fail(rc, "%s: worker %d: waiting for a server's reply: %s", fn, x->me,
                       sl_errmsg());
    if (from < 0 || from >= x->S || seen[from] || got != WORDS(sizeof *r))
        return sl_fail(SL_ECORRUPT, "%s: worker %d: unexpected reply from rank %d (%zu words)",
                       fn, x->me, from, got);
    seen[from] = 1;
    *s = from;
    r->msg[sizeof r->msg - 1] = 0;
    if (r->status)
        return sl_fail(r->status, "%s: worker %d: %s", fn, x->me, r->msg);
    return SL_OK;
}

static int recv_payload(sl_ps_mpi *x, int s, void *p, const char *fn)
{
    size_t b = x->plan->bytes[s], got = 0;
    if (!b)
        return SL_OK;
    int rc = sl_comm_recv(x->comm, p, WORDS(b), SL_DTYPE_F32, s, TAG_RDATA, x->cfg->timeout_ms,
                          NULL, NULL, &got);
    if (rc)
        return sl_fail(rc, "%s: worker %d: shard of server rank %d: %s", fn, x->me, s,
                       sl_errmsg());
    if (got != WORDS(b))
        return sl_fail(SL_ECORRUPT, "%s: worker %d: server rank %d sent %zu words, its shard "
                       "has %zu", fn, x->me, s, got, WORDS(b));
    return SL_OK;
}

/* Keep the first error (code and message) of a round that must finish. */
static void keep_first(int *first, char *msg, size_t cap, int rc)
{
    if (rc && !*first) {
        *first = rc;
        snprintf(msg, cap, "%s", sl_errmsg());
    }
}

static int mpi_pull(void *impl, int worker, sl_model *m, uint64_t *version)
{
    sl_ps_mpi *x = impl;
    const char *fn = "sl_ps_pull";
    int rc = check_me(x, worker, fn);
    if (rc)
        return rc;
    double t0 = sl_now_s();
    for (int s = 0; s < x->S; s++)
        if ((rc = request(x, s, MSG_PULL, 0, 0.0f, 0, 0)))
            return sl_fail(rc, "%s: worker %d: %s", fn, x->me, sl_errmsg());
    char seen[x->S], msg[SL_ERRMSG_MAX];
    memset(seen, 0, sizeof seen);
    int first = 0;
    uint64_t lo = UINT64_MAX;
    for (int i = 0; i < x->S; i++) {
        ps_reply r;
        int s = -1;
        rc = next_reply(x, seen, &r, &s, fn);
        if (rc == SL_OK && !(rc = recv_payload(x, s, x->buf, fn))) {
            sl_ps_plan_scatter(x->plan, s, x->buf, m);
            x->pulled_ver[s] = r.version;
            if (r.version < lo)
                lo = r.version;
        }
        keep_first(&first, msg, sizeof msg, rc);
        if (rc && s < 0) /* nothing more can be told apart */
            break;
    }
    x->local.pull_wait_s += sl_now_s() - t0;
    if (first)
        return sl_fail(first, "%s", msg);
    x->version = lo;
    x->pulled = 1;
    x->local.pulls++;
    if (version)
        *version = lo;
    return SL_OK;
}

static int mpi_push(void *impl, int worker, sl_model *m, uint64_t version, float lr)
{
    sl_ps_mpi *x = impl;
    const char *fn = "sl_ps_push";
    int rc = check_me(x, worker, fn);
    if (rc)
        return rc;
    if (!x->pulled)
        return sl_fail(SL_EINVAL, "%s: worker %d: push before any pull", fn, worker);
    if (version != x->version)
        return sl_fail(SL_EINVAL, "%s: worker %d: version %llu, but its last pull returned %llu",
                       fn, worker, (unsigned long long)version, (unsigned long long)x->version);
    double t0 = sl_now_s();
    for (int s = 0; s < x->S; s++) {
        sl_ps_plan_gather(x->plan, s, m, 1, x->buf);
        if ((rc = request(x, s, MSG_PUSH, 0, lr, x->pulled_ver[s], 0)) ||
            (rc = send_payload(x, s, x->buf)))
            return sl_fail(rc, "%s: worker %d: to server rank %d: %s", fn, worker, s,
                           sl_errmsg());
    }
    x->local.push_wait_s += sl_now_s() - t0;
    x->local.pushes++;
    return SL_OK;
}

static int mpi_done(void *impl, int worker)
{
    sl_ps_mpi *x = impl;
    const char *fn = "sl_ps_worker_done";
    if (worker != x->me)
        return sl_fail(SL_EINVAL, "%s: worker %d: this rank is worker %d", fn, worker, x->me);
    if (x->done)
        return SL_OK;
    x->done = 1;
    int first = 0;
    char msg[SL_ERRMSG_MAX];
    for (int s = 0; s < x->S; s++)
        keep_first(&first, msg, sizeof msg, request(x, s, MSG_DONE, 0, 0.0f, 0, 0));
    return first ? sl_fail(first, "%s: worker %d: %s", fn, worker, msg) : SL_OK;
}

static int mpi_snapshot(void *impl, sl_model *m, float **map, int64_t *step)
{
    sl_ps_mpi *x = impl;
    const char *fn = "sl_ps_snapshot";
    int rc = check_me(x, x->me, fn);
    if (rc)
        return rc;
    for (int s = 0; s < x->S; s++)
        if ((rc = request(x, s, MSG_SNAP, map != NULL, 0.0f, 0, 0)))
            return sl_fail(rc, "%s: worker %d: %s", fn, x->me, sl_errmsg());
    char seen[x->S], msg[SL_ERRMSG_MAX];
    memset(seen, 0, sizeof seen);
    int first = 0;
    for (int i = 0; i < x->S; i++) {
        ps_reply r;
        int s = -1;
        rc = next_reply(x, seen, &r, &s, fn);
        if (rc == SL_OK && !(rc = recv_payload(x, s, x->buf, fn))) {
            sl_ps_plan_scatter(x->plan, s, x->buf, m);
            if (map && !(rc = recv_payload(x, s, x->mom, fn))) {
                const sl_ps_plan *p = x->plan;
                for (int k = p->first[s]; k < p->first[s] + p->count[s]; k++)
                    if (map[p->ents[k].tensor])
                        memcpy(map[p->ents[k].tensor], x->mom + p->ents[k].off,
                               p->ents[k].bytes);
                if (s == 0 && step)
                    *step = r.step;
            }
        }
        keep_first(&first, msg, sizeof msg, rc);
        if (rc && s < 0)
            break;
    }
    return first ? sl_fail(first, "%s", msg) : SL_OK;
}

static int mpi_load(void *impl, sl_model *m, float **map, int64_t *step)
{
    sl_ps_mpi *x = impl;
    const char *fn = "sl_ps_load";
    int rc = check_me(x, x->me, fn);
    if (rc)
        return rc;
    const sl_ps_plan *p = x->plan;
    for (int s = 0; s < x->S; s++) {
        sl_ps_plan_gather(p, s, m, 0, x->buf);
        if ((rc = request(x, s, MSG_LOAD, map != NULL, 0.0f, 0, step ? *step : 0)) ||
            (rc = send_payload(x, s, x->buf)))
            return sl_fail(rc, "%s: worker %d: to server rank %d: %s", fn, x->me, s,
                           sl_errmsg());
        if (map) {
            memset(x->mom, 0, p->bytes[s]);
            for (int k = p->first[s]; k < p->first[s] + p->count[s]; k++)
                if (map[p->ents[k].tensor])
                    memcpy(x->mom + p->ents[k].off, map[p->ents[k].tensor], p->ents[k].bytes);
            if ((rc = send_payload(x, s, x->mom)))
                return sl_fail(rc, "%s: worker %d: to server rank %d: %s", fn, x->me, s,
                               sl_errmsg());
        }
    }
    char seen[x->S], msg[SL_ERRMSG_MAX];
    memset(seen, 0, sizeof seen);
    int first = 0;
    for (int i = 0; i < x->S; i++) {
        ps_reply r;
        int s = -1;
        rc = next_reply(x, seen, &r, &s, fn);
        keep_first(&first, msg, sizeof msg, rc);
        if (rc && s < 0)
            break;
    }
    return first ? sl_fail(first, "%s", msg) : SL_OK;
}

static int mpi_stats(void *impl, sl_ps_stats *out, int reset)
{
    sl_ps_mpi *x = impl;
    const char *fn = "sl_ps_stats_get";
    int rc;
    if (x->done)
        return sl_fail(SL_EINVAL, "%s: worker %d: called after sl_ps_worker_done", fn, x->me);
    for (int s = 0; s < x->S; s++)
        if ((rc = request(x, s, MSG_STATS, reset != 0, 0.0f, 0, 0)))
            return sl_fail(rc, "%s: worker %d: %s", fn, x->me, sl_errmsg());
    char seen[x->S], msg[SL_ERRMSG_MAX];
    memset(seen, 0, sizeof seen);
    int first = 0;
    /* Servers count pushes applied there (updates) and the staleness; this
     * worker its own pulls, pushes and waits. */
    sl_ps_stats sum;
    memset(&sum, 0, sizeof sum);
    sum.version = UINT64_MAX;
    uint64_t updates = UINT64_MAX;
    for (int i = 0; i < x->S; i++) {
        ps_reply r;
        int s = -1;
        rc = next_reply(x, seen, &r, &s, fn);
        if (rc == SL_OK) {
            if (r.stats.updates < updates)
                updates = r.stats.updates;
            r.stats.pulls = r.stats.pushes = 0;
            r.stats.pull_wait_s = r.stats.push_wait_s = 0;
            sl_ps_stats_merge(&sum, &r.stats);
        }
        keep_first(&first, msg, sizeof msg, rc);
        if (rc && s < 0)
            break;
    }
    if (first)
        return sl_fail(first, "%s", msg);
    sum.updates = updates;
    sum.pulls = x->local.pulls;
    sum.pushes = x->local.pushes;
    sum.pull_wait_s = x->local.pull_wait_s;
    sum.push_wait_s = x->local.push_wait_s;
    *out = sum;
    if (reset)
        memset(&x->local, 0, sizeof x->local);
    return SL_OK;
}

static const sl_ps_vt mpi_vt = {
    .name = "mpi",
    .pull = mpi_pull,
    .push = mpi_push,
    .done = mpi_done,
    .snapshot = mpi_snapshot,
    .load = mpi_load,
    .stats = mpi_stats,
    .destroy = mpi_destroy,
};

/*
 * train/ps/ps.c - the parameter server in process: S server threads, one per
 * shard (train/ps/ps_shard.c), fed by W worker threads, and the sl_ps_* entry
 * points. train/ps/ps_int.h has the semantics.
 *
 * DESIGN.
 *   Backends: a handle calls its backend through a table (sl_ps_vt, as
 *   collectives/comm.c's sl_comm_vt): the entry points check the arguments
 *   and the sticky error, then call ps->vt. The local table is this file's
 *   server threads (impl is the handle itself); sl_ps_create_mpi takes
 *   ps_mpi.c's from sl_ps_mpi_open, and ps_mpi.c calls nothing here.
 *   Threads: the callers (one per worker id, plus whoever snapshots) and S
 *   server threads, one per shard.
 *   Inbox: per server a ring of queue_depth slots, each one payload of the
 *   shard's size (plan layout). A push reserves the tail slot of every
 *   server in turn (FILLING, under the server's mu), copies m's grads and
 *   buffers into it without any lock, and marks it READY. The server takes
 *   the head slot once it is READY, applies it with its values write-locked
 *   (plock), and frees it. A push therefore waits only for a free slot of
 *   each server, never for another worker; slots are applied in reservation
 *   order, which is arrival order.
 *   Pull: read-locks each server's values in turn and copies its shard into
 *   m, noting the server's version (per server: that is what staleness is
 *   measured from).
 *   ps->mu guards the workers' clocks (pushes made, pushes applied per
 *   server), the push gate (snapshot/load hold back new pushes), the
 *   statistics and the sticky error; ps->cv is broadcast on every change.
 *   Lock order: never two of ps->mu, a server's mu, a server's plock at once
 *   (each is taken and released on its own), so there is no order to keep.
 *   Deadlines: every wait is a pthread_cond_timedwait on CLOCK_MONOTONIC
 *   against now + timeout_ms taken when the call began.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/ps/ps_int.h"

/* ================================================ servers in process */

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY };

typedef struct ps_slot {
    int state;
    int worker;
    uint64_t pulled;         /* the server's version when the worker pulled */
    float lr;
    unsigned char *payload;  /* plan layout: grads, buffers */
} ps_slot;

typedef struct ps_server {
    sl_ps *ps;
    int id;
    sl_ps_shard sh;
    pthread_rwlock_t plock;  /* sh's values and version: apply writes; pull, snapshot read */
    pthread_mutex_t mu;      /* the inbox below */
    pthread_cond_t cv;       /* a slot became ready or free, or stop */
    ps_slot *slots;
    int cap, head, count;    /* ring: slots [head, head + count) are reserved, in order */
    int stop;
    pthread_t thread;
    int started, inited;     /* thread running; locks and shard made */
} ps_server;

typedef struct ps_worker {
    int done, pulled;        /* done: left; pulled: a pull happened (push allowed) */
    uint64_t version;        /* what the last pull returned */
    uint64_t *pulled_ver;    /* [S] each server's version at the last pull (worker's thread) */
    uint64_t *applied;       /* [S] pushes applied per server (ps->mu) */
    uint64_t clock;          /* min of applied: pushes applied everywhere (ps->mu) */
    uint64_t pushes;         /* pushes made (ps->mu) */
} ps_worker;

struct sl_ps {
    sl_ps_config cfg;
    sl_ps_plan plan;
    ps_server *srv;          /* [S]; NULL for an MPI handle */
    ps_worker *wk;           /* [W] */
    pthread_mutex_t mu;      /* everything below */
    pthread_cond_t cv;
    int paused, pushing;     /* the push gate */
    sl_ps_stats st;
    double stale_sum;
    int err;                 /* sticky */
    char errmsg[SL_ERRMSG_MAX];
    int failed;              /* err != 0, read without ps->mu (__atomic) */
    int sync_inited;
    const sl_ps_vt *vt;      /* the backend: local_vt (below) or ps_mpi.c's */
    void *impl;              /* its state: the handle itself in process, ps_mpi.c's worker side */
};

static const sl_ps_vt local_vt; /* defined after its functions, below */


static int cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a))
        return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) || pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc ? -1 : 0;
}

/* Record the first error (code, message) on ps; callers see it from now on. */
static void set_sticky_locked(sl_ps *ps, int code, const char *msg)
{
    if (!ps->err) {
        ps->err = code;
        snprintf(ps->errmsg, sizeof ps->errmsg, "%s", msg);
        __atomic_store_n(&ps->failed, 1, __ATOMIC_RELEASE);
    }
    pthread_cond_broadcast(&ps->cv);
}

static void set_sticky(sl_ps *ps, int code, const char *msg)
{
    pthread_mutex_lock(&ps->mu);
    set_sticky_locked(ps, code, msg);
    pthread_mutex_unlock(&ps->mu);
    for (int s = 0; ps->srv && s < ps->cfg.servers; s++) { /* wake pushers waiting for a slot */
        pthread_mutex_lock(&ps->srv[s].mu);
        pthread_cond_broadcast(&ps->srv[s].cv);
        pthread_mutex_unlock(&ps->srv[s].mu);
    }
}

static int sticky_locked(sl_ps *ps)
{
    return ps->err ? sl_fail(ps->err, "%s", ps->errmsg) : SL_OK;
}

static int sticky(sl_ps *ps)
{
    pthread_mutex_lock(&ps->mu);
    int rc = sticky_locked(ps);
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

/* After server s applied a push of worker w from pulled version `pulled`
 * when it stood at version v. */
static void account_apply(sl_ps *ps, int s, int w, uint64_t pulled, uint64_t v)
{
    pthread_mutex_lock(&ps->mu);
    sl_ps_stats_sample(&ps->st, &ps->stale_sum, v > pulled ? v - pulled : 0);
    ps_worker *k = &ps->wk[w];
    k->applied[s]++;
    uint64_t c = k->applied[0];
    for (int j = 1; j < ps->cfg.servers; j++)
        if (k->applied[j] < c)
            c = k->applied[j];
    if (c > k->clock) {
        k->clock = c;
        ps->st.updates++;
    }
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
}

static void *server_main(void *arg)
{
    ps_server *sv = arg;
    sl_ps *ps = sv->ps;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->stop && (sv->count == 0 || sv->slots[sv->head].state != SLOT_READY))
            pthread_cond_wait(&sv->cv, &sv->mu);
        if (sv->stop)
            break;
        ps_slot *sl = &sv->slots[sv->head];
        pthread_mutex_unlock(&sv->mu);

        int failed = __atomic_load_n(&ps->failed, __ATOMIC_ACQUIRE);
        uint64_t v = 0;
        int rc = SL_OK;
        if (!failed) { /* after an error the inbox is only drained */
            pthread_rwlock_wrlock(&sv->plock);
            v = sv->sh.version;
            rc = sl_ps_shard_apply(&sv->sh, sl->payload, sl->lr);
            pthread_rwlock_unlock(&sv->plock);
        }
        if (rc) {
            char msg[SL_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "sl_ps server thread: %s", sl_errmsg());
            set_sticky(ps, rc, msg);
        } else if (!failed) {
            account_apply(ps, sv->id, sl->worker, sl->pulled, v);
        }

        pthread_mutex_lock(&sv->mu);
        sl->state = SLOT_FREE;
        sv->head = (sv->head + 1) % sv->cap;
        sv->count--;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

static int server_init(sl_ps *ps, int s, sl_model *tmpl)
{
    ps_server *sv = &ps->srv[s];
    sv->ps = ps;
    sv->id = s;
    sv->cap = ps->cfg.queue_depth;
    int rc = sl_ps_shard_init(&sv->sh, &ps->plan, s, tmpl, &ps->cfg.sgd);
    if (rc)
        return rc;
    if (pthread_rwlock_init(&sv->plock, NULL) == 0) {
        if (pthread_mutex_init(&sv->mu, NULL) == 0) {
            if (cond_init_mono(&sv->cv) == 0) {
                sv->inited = 1;
                goto locks_made;
            }
            pthread_mutex_destroy(&sv->mu);
        }
        pthread_rwlock_destroy(&sv->plock);
    }
    sl_ps_shard_fini(&sv->sh);
    return sl_fail(SL_ENOMEM, "sl_ps_create: server %d: locks", s);
locks_made:
    sv->slots = calloc((size_t)sv->cap, sizeof *sv->slots);
    if (!sv->slots)
        return sl_fail(SL_ENOMEM, "sl_ps_create: server %d: %d inbox slots", s, sv->cap);
    size_t bytes = ps->plan.bytes[s] ? ps->plan.bytes[s] : 64;
    for (int i = 0; i < sv->cap; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes))
            return sl_fail(SL_ENOMEM, "sl_ps_create: server %d: inbox slot of %zu bytes", s,
                           bytes);
        sv->slots[i].payload = p;
    }
    if (pthread_create(&sv->thread, NULL, server_main, sv))
        return sl_fail(SL_ENOMEM, "sl_ps_create: server %d: cannot start its thread", s);
    sv->started = 1;
    return SL_OK;
}

static int check_config(const sl_ps_config *c, const char *fn)
{
    if (c->servers < 1 || c->workers < 1 || c->max_staleness < -1 || c->queue_depth < 0 ||
        c->timeout_ms <= 0)
        return sl_fail(SL_EINVAL,
                       "%s: bad config: servers %d, workers %d, max_staleness %d, "
                       "queue_depth %d, timeout_ms %d (need >= 1, >= 1, >= -1, >= 0, > 0)",
                       fn, c->servers, c->workers, c->max_staleness, c->queue_depth,
                       c->timeout_ms);
    return SL_OK;
}

/* A handle with config, plan and workers but no backend yet. */
static int ps_alloc(const sl_ps_config *cfg, sl_model *tmpl, const char *fn, sl_ps **out)
{
    *out = NULL;
    int rc = check_config(cfg, fn);
    if (rc)
        return rc;
    sl_ps *ps = calloc(1, sizeof *ps);
    if (!ps)
        return sl_fail(SL_ENOMEM, "%s: handle", fn);
    ps->cfg = *cfg;
    if (ps->cfg.queue_depth == 0)
        ps->cfg.queue_depth = cfg->workers;
    if ((rc = sl_ps_plan_init(&ps->plan, tmpl, cfg->servers))) {
        free(ps);
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    }
    if (pthread_mutex_init(&ps->mu, NULL)) {
        sl_ps_plan_fini(&ps->plan);
        free(ps);
        return sl_fail(SL_ENOMEM, "%s: mutex", fn);
    }
    if (cond_init_mono(&ps->cv)) {
        pthread_mutex_destroy(&ps->mu);
        sl_ps_plan_fini(&ps->plan);
        free(ps);
        return sl_fail(SL_ENOMEM, "%s: condition variable", fn);
    }
    ps->sync_inited = 1;
    ps->wk = calloc((size_t)cfg->workers, sizeof *ps->wk);
    if (!ps->wk)
        goto nomem;
    for (int w = 0; w < cfg->workers; w++) {
        ps->wk[w].pulled_ver = calloc((size_t)cfg->servers, sizeof(uint64_t));
        ps->wk[w].applied = calloc((size_t)cfg->servers, sizeof(uint64_t));
        if (!ps->wk[w].pulled_ver || !ps->wk[w].applied)
            goto nomem;
    }
    *out = ps;
    return SL_OK;
nomem:
    sl_ps_destroy(ps);
    return sl_fail(SL_ENOMEM, "%s: %d workers", fn, cfg->workers);
}

int sl_ps_create(const sl_ps_config *cfg, sl_model *tmpl, sl_ps **out)
{
    const char *fn = "sl_ps_create";
    if (!cfg || !tmpl || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    sl_ps *ps;
    int rc = ps_alloc(cfg, tmpl, fn, &ps);
    if (rc)
        return rc;
    ps->vt = &local_vt;
    ps->impl = ps;
    ps->srv = calloc((size_t)cfg->servers, sizeof *ps->srv);
    if (!ps->srv) {
        sl_ps_destroy(ps);
        return sl_fail(SL_ENOMEM, "%s: %d servers", fn, cfg->servers);
    }
    for (int s = 0; s < cfg->servers; s++)
        if ((rc = server_init(ps, s, tmpl))) {
            char msg[SL_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", sl_errmsg());
            sl_ps_destroy(ps);
            return sl_fail(rc, "%s", msg);
        }
    *out = ps;
    return SL_OK;
}

int sl_ps_create_mpi(const sl_ps_config *cfg, sl_comm *comm, int ps_ranks, sl_model *tmpl,
                     sl_ps **out)
{
    const char *fn = "sl_ps_create_mpi";
    if (!cfg || !comm || !tmpl || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    sl_ps *ps;
    int rc = sl_ps_mpi_check(cfg, comm, ps_ranks, fn);
    if (rc || (rc = ps_alloc(cfg, tmpl, fn, &ps)))
        return rc;
    if ((rc = sl_ps_mpi_open(&ps->cfg, &ps->plan, comm, ps_ranks, fn, &ps->vt, &ps->impl))) {
        sl_ps_destroy(ps);
        return rc;
    }
    *out = ps;
    return SL_OK;
}

/* The local backend's end: stop the server threads and free them. */
static void local_destroy(void *impl)
{
    sl_ps *ps = impl;
    for (int s = 0; ps->srv && s < ps->cfg.servers; s++) {
        ps_server *sv = &ps->srv[s];
        if (sv->started) {
            pthread_mutex_lock(&sv->mu);
            sv->stop = 1;
            pthread_cond_broadcast(&sv->cv);
            pthread_mutex_unlock(&sv->mu);
            pthread_join(sv->thread, NULL);
        }
        for (int i = 0; sv->slots && i < sv->cap; i++)
            free(sv->slots[i].payload);
        free(sv->slots);
        if (sv->inited) {
            pthread_cond_destroy(&sv->cv);
            pthread_mutex_destroy(&sv->mu);
            pthread_rwlock_destroy(&sv->plock);
        }
        sl_ps_shard_fini(&sv->sh);
    }
    free(ps->srv);
}

void sl_ps_destroy(sl_ps *ps)
{
    if (!ps)
        return;
    if (ps->vt)
        ps->vt->destroy(ps->impl);
    for (int w = 0; ps->wk && w < ps->cfg.workers; w++) {
        free(ps->wk[w].pulled_ver);
        free(ps->wk[w].applied);
    }
    free(ps->wk);
    if (ps->sync_inited) {
        pthread_cond_destroy(&ps->cv);
        pthread_mutex_destroy(&ps->mu);
    }
    sl_ps_plan_fini(&ps->plan);
    free(ps);
}

int sl_ps_server_of(const sl_ps *ps, int tensor)
{
    if (!ps || tensor < 0 || tensor >= ps->plan.ntensors)
        return -1;
    return ps->plan.owner[tensor];
}

size_t sl_ps_server_bytes(const sl_ps *ps, int server)
{
    if (!ps || server < 0 || server >= ps->plan.servers)
        return 0;
    size_t b = 0;
    for (int k = ps->plan.first[server]; k < ps->plan.first[server] + ps->plan.count[server]; k++)
        b += ps->plan.ents[k].bytes;
    return b;
}

/* ------------------------------------------------------------ workers */

static int check_worker(sl_ps *ps, int w, const char *fn)
{
    if (w < 0 || w >= ps->cfg.workers)
        return sl_fail(SL_EINVAL, "%s: worker %d out of range 0 .. %d", fn, w,
                       ps->cfg.workers - 1);
    return SL_OK;
}

/* Smallest clock among active workers other than w, and which one; -1 if none. */
static int slowest_other(const sl_ps *ps, int w, uint64_t *clock)
{
    int who = -1;
    for (int j = 0; j < ps->cfg.workers; j++) {
        if (j == w || ps->wk[j].done)
            continue;
        if (who < 0 || ps->wk[j].clock < *clock)
            who = j, *clock = ps->wk[j].clock;
    }
    return who;
}

/* Under ps->mu: wait for w's own pushes to land, then for the SSP bound. */
static int pull_wait_locked(sl_ps *ps, int w, const struct timespec *dl, const char *fn)
{
    ps_worker *k = &ps->wk[w];
    double t0 = sl_now_s();
    int rc = 0;
    while (!ps->err && k->clock < k->pushes && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&ps->cv, &ps->mu, dl);
    ps->st.pull_wait_s += sl_now_s() - t0;
    if (ps->err)
        return sticky_locked(ps);
    if (k->clock < k->pushes)
        return sl_fail(SL_ETIMEDOUT,
                       "%s: worker %d: its pushes did not land within %d ms (%llu of %llu applied "
                       "on every server)",
                       fn, w, ps->cfg.timeout_ms, (unsigned long long)k->clock,
                       (unsigned long long)k->pushes);
    int K = ps->cfg.max_staleness;
    uint64_t lo = 0;
    int who = slowest_other(ps, w, &lo);
    uint64_t lead = (who >= 0 && k->pushes > lo) ? k->pushes - lo : 0;
    if (K >= 0 && lead > (uint64_t)K) {
        ps->st.ssp_waits++;
        t0 = sl_now_s();
        rc = 0;
        while (!ps->err && lead > (uint64_t)K && rc != ETIMEDOUT) {
            rc = pthread_cond_timedwait(&ps->cv, &ps->mu, dl);
            who = slowest_other(ps, w, &lo);
            lead = (who >= 0 && k->pushes > lo) ? k->pushes - lo : 0;
        }
        ps->st.ssp_wait_s += sl_now_s() - t0;
        if (ps->err)
            return sticky_locked(ps);
        if (lead > (uint64_t)K)
            return sl_fail(SL_ETIMEDOUT,
                           "%s: worker %d: at step %llu, %llu ahead of worker %d (step %llu) "
                           "after %d ms; max_staleness %d",
                           fn, w, (unsigned long long)k->pushes, (unsigned long long)lead, who,
                           (unsigned long long)lo, ps->cfg.timeout_ms, K);
    }
    if (lead > ps->st.max_lead)
        ps->st.max_lead = lead;
    return SL_OK;
}

int sl_ps_pull(sl_ps *ps, int worker, sl_model *m, uint64_t *version)
{
    const char *fn = "sl_ps_pull";
    if (!ps)
        return sl_fail(SL_EINVAL, "%s: NULL handle", fn);
    int rc;
    if ((rc = check_worker(ps, worker, fn)) || (rc = sl_ps_plan_check(&ps->plan, m, fn, worker)) ||
        (rc = sticky(ps)))
        return rc;
    return ps->vt->pull(ps->impl, worker, m, version);
}

static int local_pull(void *impl, int worker, sl_model *m, uint64_t *version)
{
    const char *fn = "sl_ps_pull";
    sl_ps *ps = impl;
    int rc;
    struct timespec dl;
    sl_deadline_ms(&dl, CLOCK_MONOTONIC, (unsigned long)ps->cfg.timeout_ms);
    pthread_mutex_lock(&ps->mu);
    if (!(rc = sticky_locked(ps))) {
        if (ps->wk[worker].done)
            rc = sl_fail(SL_EINVAL, "%s: worker %d: pull after sl_ps_worker_done", fn, worker);
        else
            rc = pull_wait_locked(ps, worker, &dl, fn);
    }
    pthread_mutex_unlock(&ps->mu);
    if (rc)
        return rc;
    ps_worker *k = &ps->wk[worker];
    uint64_t lo = UINT64_MAX;
    for (int s = 0; s < ps->cfg.servers; s++) {
        ps_server *sv = &ps->srv[s];
        pthread_rwlock_rdlock(&sv->plock);
        sl_ps_plan_scatter(&ps->plan, s, sv->sh.arena, m);
        k->pulled_ver[s] = sv->sh.version;
        pthread_rwlock_unlock(&sv->plock);
        if (k->pulled_ver[s] < lo)
            lo = k->pulled_ver[s];
    }
    k->version = lo;
    k->pulled = 1;
    if (version)
        *version = lo;
    pthread_mutex_lock(&ps->mu);
    ps->st.pulls++;
    pthread_mutex_unlock(&ps->mu);
    return SL_OK;
}

/* Reserve the tail slot of server s for worker w (waits for a free one). */
static int reserve_slot(sl_ps *ps, int s, int w, float lr, const struct timespec *dl,
                        const char *fn, ps_slot **out)
{
    ps_server *sv = &ps->srv[s];
    double t0 = sl_now_s();
    int rc = 0, err;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        err = __atomic_load_n(&ps->failed, __ATOMIC_ACQUIRE);
        if (err || sv->count < sv->cap || rc == ETIMEDOUT)
            break;
        rc = pthread_cond_timedwait(&sv->cv, &sv->mu, dl);
    }
    ps_slot *sl = NULL;
    if (!err && sv->count < sv->cap) {
        sl = &sv->slots[(sv->head + sv->count) % sv->cap];
        sv->count++;
        sl->state = SLOT_FILLING;
        sl->worker = w;
        sl->pulled = ps->wk[w].pulled_ver[s];
        sl->lr = lr;
    }
    pthread_mutex_unlock(&sv->mu);
    double waited = sl_now_s() - t0;
    pthread_mutex_lock(&ps->mu);
    ps->st.push_wait_s += waited;
    pthread_mutex_unlock(&ps->mu);
    if (err)
        return sticky(ps);
    if (!sl)
        return sl_fail(SL_ETIMEDOUT,
                       "%s: worker %d: server %d's inbox stayed full (%d slots) for %d ms", fn,
                       w, s, sv->cap, ps->cfg.timeout_ms);
    *out = sl;
    return SL_OK;
}

int sl_ps_push(sl_ps *ps, int worker, sl_model *m, uint64_t version, float lr)
{
    const char *fn = "sl_ps_push";
    if (!ps)
        return sl_fail(SL_EINVAL, "%s: NULL handle", fn);
    int rc;
    if ((rc = check_worker(ps, worker, fn)) || (rc = sl_ps_plan_check(&ps->plan, m, fn, worker)))
        return rc;
    if (!(lr >= 0.0f) || lr > 1e30f)
        return sl_fail(SL_EINVAL, "%s: worker %d: bad learning rate %g", fn, worker, (double)lr);
    if ((rc = sticky(ps)))
        return rc;
    return ps->vt->push(ps->impl, worker, m, version, lr);
}

static int local_push(void *impl, int worker, sl_model *m, uint64_t version, float lr)
{
    const char *fn = "sl_ps_push";
    sl_ps *ps = impl;
    int rc;
    ps_worker *k = &ps->wk[worker];
    struct timespec dl;
    sl_deadline_ms(&dl, CLOCK_MONOTONIC, (unsigned long)ps->cfg.timeout_ms);
    pthread_mutex_lock(&ps->mu);
    if ((rc = sticky_locked(ps)))
        goto unlock;
    if (k->done) {
        rc = sl_fail(SL_EINVAL, "%s: worker %d: push after sl_ps_worker_done", fn, worker);
        goto unlock;
    }
    if (!k->pulled) {
        rc = sl_fail(SL_EINVAL, "%s: worker %d: push before any pull", fn, worker);
        goto unlock;
    }
    if (version != k->version) {
        rc = sl_fail(SL_EINVAL, "%s: worker %d: version %llu, but its last pull returned %llu",
                     fn, worker, (unsigned long long)version, (unsigned long long)k->version);
        goto unlock;
    }
    int t = 0;
    while (!ps->err && ps->paused && t != ETIMEDOUT)
        t = pthread_cond_timedwait(&ps->cv, &ps->mu, &dl);
    if ((rc = sticky_locked(ps)))
        goto unlock;
    if (ps->paused) {
        rc = sl_fail(SL_ETIMEDOUT, "%s: worker %d: a snapshot/load held pushes for %d ms", fn,
                     worker, ps->cfg.timeout_ms);
        goto unlock;
    }
    ps->pushing++;
    pthread_mutex_unlock(&ps->mu);

    for (int s = 0; s < ps->cfg.servers && !rc; s++) {
        ps_slot *sl = NULL;
        if ((rc = reserve_slot(ps, s, worker, lr, &dl, fn, &sl))) {
            if (s > 0) /* some shards took the push, the others not: they now disagree */
                set_sticky(ps, rc, sl_errmsg());
            break;
        }
        sl_ps_plan_gather(&ps->plan, s, m, 1, sl->payload);
        ps_server *sv = &ps->srv[s];
        pthread_mutex_lock(&sv->mu);
        sl->state = SLOT_READY;
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
    }

    pthread_mutex_lock(&ps->mu);
    ps->pushing--;
    if (!rc) {
        k->pushes++;
        ps->st.pushes++;
    }
    pthread_cond_broadcast(&ps->cv);
unlock:
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

void sl_ps_abort(sl_ps *ps, const char *why)
{
    if (!ps)
        return;
    char msg[SL_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "sl_ps: aborted: %s", why ? why : "(no reason given)");
    set_sticky(ps, SL_ECANCELED, msg); /* wakes the server threads, where there are any */
}

int sl_ps_worker_done(sl_ps *ps, int worker)
{
    const char *fn = "sl_ps_worker_done";
    if (!ps)
        return sl_fail(SL_EINVAL, "%s: NULL handle", fn);
    int rc = check_worker(ps, worker, fn);
    return rc ? rc : ps->vt->done(ps->impl, worker);
}

static int local_done(void *impl, int worker)
{
    sl_ps *ps = impl;
    pthread_mutex_lock(&ps->mu);
    ps->wk[worker].done = 1;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    return SL_OK;
}

/* ------------------------------------------------- snapshot and load */

/* Hold back new pushes, wait for those being copied, then for every inbox
 * to empty. On success the gate stays closed: gate_open. */
static int gate_close_and_drain(sl_ps *ps, const char *fn)
{
    struct timespec dl;
    sl_deadline_ms(&dl, CLOCK_MONOTONIC, (unsigned long)ps->cfg.timeout_ms);
    int t = 0, rc;
    pthread_mutex_lock(&ps->mu);
    while (!ps->err && ps->paused && t != ETIMEDOUT) /* another snapshot or load */
        t = pthread_cond_timedwait(&ps->cv, &ps->mu, &dl);
    if ((rc = sticky_locked(ps)) || ps->paused) {
        if (!rc)
            rc = sl_fail(SL_ETIMEDOUT, "%s: another snapshot/load ran for %d ms", fn,
                         ps->cfg.timeout_ms);
        pthread_mutex_unlock(&ps->mu);
        return rc;
    }
    ps->paused = 1;
    while (!ps->err && ps->pushing > 0 && t != ETIMEDOUT)
        t = pthread_cond_timedwait(&ps->cv, &ps->mu, &dl);
    rc = sticky_locked(ps);
    if (!rc && ps->pushing > 0)
        rc = sl_fail(SL_ETIMEDOUT, "%s: %d pushes still copying after %d ms", fn, ps->pushing,
                     ps->cfg.timeout_ms);
    pthread_mutex_unlock(&ps->mu);
    for (int s = 0; s < ps->cfg.servers && !rc; s++) {
        ps_server *sv = &ps->srv[s];
        t = 0;
        pthread_mutex_lock(&sv->mu);
        while (sv->count > 0 && t != ETIMEDOUT)
            t = pthread_cond_timedwait(&sv->cv, &sv->mu, &dl);
        int left = sv->count;
        pthread_mutex_unlock(&sv->mu);
        if ((rc = sticky(ps)))
            break;
        if (left)
            rc = sl_fail(SL_ETIMEDOUT, "%s: server %d: %d pushes still queued after %d ms", fn,
                         s, left, ps->cfg.timeout_ms);
    }
    if (rc) {
        pthread_mutex_lock(&ps->mu);
        ps->paused = 0;
        pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
    }
    return rc;
}

static void gate_open(sl_ps *ps)
{
    pthread_mutex_lock(&ps->mu);
    ps->paused = 0;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
}

/* The local snapshot (out = 1): servers -> m, map, step; load (out = 0):
 * m, map, step -> servers (map NULL: no optimizer; momentum zeroed on load). */
static int local_transfer(sl_ps *ps, sl_model *m, float **map, int64_t *step, int out,
                          const char *fn)
{
    int rc;
    if ((rc = gate_close_and_drain(ps, fn)))
        return rc;
    int n;
    sl_tensor_info *t = sl_model_tensors(m, &n);
    for (int s = 0; s < ps->cfg.servers; s++) {
        ps_server *sv = &ps->srv[s];
        const sl_ps_plan *p = &ps->plan;
        if (out)
            pthread_rwlock_rdlock(&sv->plock);
        else
            pthread_rwlock_wrlock(&sv->plock);
        for (int k = 0; k < p->count[s]; k++) {
            const sl_ps_ent *e = &p->ents[p->first[s] + k];
            unsigned char *a = sv->sh.arena + e->off;
            if (out)
                memcpy(t[e->tensor].data, a, e->bytes);
            else
                memcpy(a, t[e->tensor].data, e->bytes);
            float *mb = sv->sh.mom[k];
            if (!mb)
                continue;
            if (out && map)
                memcpy(map[e->tensor], mb, e->bytes);
            else if (!out && map)
                memcpy(mb, map[e->tensor], e->bytes);
            else if (!out)
                memset(mb, 0, e->bytes);
        }
        if (out && step && s == 0)
            *step = *sv->sh.step; /* equal on every server once drained */
        else if (!out)
            *sv->sh.step = step ? *step : 0;
        pthread_rwlock_unlock(&sv->plock);
    }
    gate_open(ps);
    return SL_OK;
}

static int local_snapshot(void *impl, sl_model *m, float **map, int64_t *step)
{
    return local_transfer(impl, m, map, step, 1, "sl_ps_snapshot");
}

static int local_load(void *impl, sl_model *m, float **map, int64_t *step)
{
    return local_transfer(impl, m, map, step, 0, "sl_ps_load");
}

/* snapshot (out = 1): servers -> m, o; load (out = 0): m, o -> servers. */
static int transfer(sl_ps *ps, sl_model *m, sl_sgd *o, int out, const char *fn)
{
    if (!ps)
        return sl_fail(SL_EINVAL, "%s: NULL handle", fn);
    int rc = sl_ps_plan_check(&ps->plan, m, fn, -1);
    if (rc)
        return rc;
    float **map = NULL;
    int64_t *step = NULL;
    if (o) {
        map = calloc((size_t)ps->plan.ntensors, sizeof *map);
        if (!map)
            return sl_fail(SL_ENOMEM, "%s: optimizer map", fn);
        if ((rc = sl_ps_plan_opt_map(&ps->plan, o, map, &step, fn))) {
            free(map);
            return rc;
        }
    }
    if (!(rc = sticky(ps)))
        rc = out ? ps->vt->snapshot(ps->impl, m, map, step) : ps->vt->load(ps->impl, m, map, step);
    free(map);
    return rc;
}

int sl_ps_snapshot(sl_ps *ps, sl_model *m, sl_sgd *o)
{
    return transfer(ps, m, o, 1, "sl_ps_snapshot");
}

int sl_ps_load(sl_ps *ps, sl_model *m, sl_sgd *o)
{
    return transfer(ps, m, o, 0, "sl_ps_load");
}

int sl_ps_stats_get(sl_ps *ps, sl_ps_stats *out, int reset)
{
    if (!ps || !out)
        return sl_fail(SL_EINVAL, "sl_ps_stats_get: NULL argument");
    return ps->vt->stats(ps->impl, out, reset);
}

static int local_stats(void *impl, sl_ps_stats *out, int reset)
{
    sl_ps *ps = impl;
    uint64_t v = UINT64_MAX;
    for (int s = 0; s < ps->cfg.servers; s++) {
        pthread_rwlock_rdlock(&ps->srv[s].plock);
        if (ps->srv[s].sh.version < v)
            v = ps->srv[s].sh.version;
        pthread_rwlock_unlock(&ps->srv[s].plock);
    }
    pthread_mutex_lock(&ps->mu);
    *out = ps->st;
    out->version = v;
    if (reset) {
        memset(&ps->st, 0, sizeof ps->st);
        ps->stale_sum = 0;
    }
    pthread_mutex_unlock(&ps->mu);
    return SL_OK;
}

static const sl_ps_vt local_vt = {
    .name = "local",
    .pull = local_pull,
    .push = local_push,
    .done = local_done,
    .snapshot = local_snapshot,
    .load = local_load,
    .stats = local_stats,
    .destroy = local_destroy,
};

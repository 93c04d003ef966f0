/*
 * train/ps/ps_int.h - the asynchronous parameter-server engine (DESIGN.md
 * section 6, "parameter-server strategy"), private to train/ and the
 * trainer's --strategy ps (train/loop/strategy_ps.c). Files: train/ps/ps.c (server
 * threads in process, the sl_ps_* entry points), train/ps/ps_shard.c (the
 * plan, a shard's state, statistics), train/ps/ps_mpi.c (server ranks and
 * the worker side over MPI: a backend table that ps.c calls through).
 *
 * Model. The state dict of a template model is split over S servers by
 * whole tensors (greedy by bytes: biggest tensor first, each to the least
 * loaded server, ties to the lower server). A server owns its tensors'
 * values (params and BN buffers), the SGD momentum of its params (an
 * sl_sgd over its own buffers: PyTorch's SGD, weight decay only on
 * SL_TENSOR_DECAY tensors) and a version: the number of pushes it has
 * applied. W workers each hold a full model and loop
 *
 *     sl_ps_pull(ps, w, m, &v);    params + buffers into m; v = version
 *     forward, loss, backward on m (the worker's own batch)
 *     sl_ps_push(ps, w, m, v, lr); m's grads + buffers go to every server
 *
 * with no barrier between workers: each server applies pushes one at a
 * time, in arrival order, on its own thread (in process) or rank (MPI).
 *
 * Staleness of a push at a server = pushes that server applied between the
 * worker's pull (the moment its shard was copied) and this push; 0 means
 * the gradient was computed on exactly the parameters it updates. Stats
 * count one sample per (push, server).
 *
 * Read your own writes: a pull first waits until every earlier push of the
 * same worker has been applied on every server (it never waits for other
 * workers' pushes), so one worker alone runs exactly plain SGD.
 *
 * Bounded staleness (SSP, Ho et al. 2013, "More effective distributed ML
 * via a stale synchronous parallel parameter server"): with max_staleness
 * K >= 0, a worker's clock is its number of pushes applied on every
 * server; a pull by a worker at clock c waits until c - min(clock of every
 * other worker not yet done) <= K. Then a push's staleness is at most
 * (W - 1) * (2K + 1); K = 0 is lock-step rounds (staleness <= W - 1).
 *
 * BN running statistics are not averaged: a server keeps the buffers of
 * the last push it applied (each worker's buffers are the pulled ones
 * advanced by its own batch, so the chain of pushes is itself a running
 * average over every worker's batches, like the params); a pull hands
 * them out with the params. num_batches_tracked is handled the same way.
 *
 * Threading: each worker id is driven by one thread at a time; different
 * worker ids run concurrently. sl_ps_snapshot, sl_ps_load and sl_ps_stats_get
 * may be called from any thread, also while workers run (snapshot and load
 * briefly hold back new pushes); sl_ps_abort from any thread at any time.
 * sl_ps_create and sl_ps_destroy are not concurrent with anything. Server
 * threads (in process) are the ps's own; errors they meet are sticky on the
 * handle and come back from the next call of any thread. An MPI handle
 * serves the one worker of its rank and uses the communicator, which takes
 * one thread at a time: its calls come from one thread.
 *
 * Deadlines: every wait (a free inbox slot, the worker's own pushes to
 * land, the SSP bound, draining for a snapshot, a server's reply) lasts at
 * most cfg.timeout_ms, then SL_ETIMEDOUT names the worker, the server and
 * what was awaited.
 *
 * Errors: sl_status codes with sl_errmsg(); nothing here exits.
 */
#ifndef SL_PS_INT_H
#define SL_PS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/collectives.h"
#include "common/clock.h"
#include "train/ops/ops.h" /* the exec's struct; includes train.h */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_ps_config {
    int servers;        /* S >= 1 shards (in process: server threads); MPI: must equal ps_ranks */
    int workers;        /* W >= 1 worker ids, 0 .. W-1 */
    int max_staleness;  /* SSP bound K >= 0; -1 = none (fully asynchronous) */
    sl_sgd_config sgd;  /* each server's optimizer over its shard */
    int queue_depth;    /* in process: inbox slots per server (each one shard of grads
                         * and buffers); 0 = workers. A push waits while its inbox is full. */
    int timeout_ms;     /* > 0: the longest any call waits (see Deadlines) */
} sl_ps_config;

#define SL_PS_CONFIG_INIT                                                                     \
    {.servers = 1, .workers = 1, .max_staleness = -1, .sgd = SL_SGD_CONFIG_INIT,              \
     .queue_depth = 0, .timeout_ms = 300000}

/* Staleness histogram buckets: [0] = 0, [i] = 2^(i-1) .. 2^i - 1, the last
 * one open: 0 | 1 | 2-3 | 4-7 | 8-15 | 16-31 | 32-63 | 64+. */
#define SL_PS_HIST 8

typedef struct sl_ps_stats {
    uint64_t pulls, pushes;   /* calls that succeeded */
    uint64_t updates;         /* pushes applied on every server */
    uint64_t shard_updates;   /* (push, server) applications: the staleness samples */
    double staleness_mean;    /* over shard_updates; 0 when none */
    uint64_t staleness_max;
    uint64_t staleness_hist[SL_PS_HIST];
    uint64_t ssp_waits;       /* pulls held back by the staleness bound */
    double ssp_wait_s;        /* seconds spent in those */
    uint64_t max_lead;        /* largest (own clock - slowest other clock) a pull went on with */
    double pull_wait_s;       /* seconds pulls waited for the worker's own pushes to land */
    double push_wait_s;       /* seconds pushes waited for a free inbox slot */
    uint64_t version;         /* min over servers of pushes applied (not reset) */
} sl_ps_stats;

typedef struct sl_ps sl_ps;

/* An in-process parameter server: cfg->servers server threads holding the
 * shards of tmpl's state dict, initialized from tmpl's current values (tmpl
 * is only read here; it may be destroyed afterwards). Workers then pass
 * models of the same architecture (same state dict names, dtypes and
 * shapes). SL_EINVAL for a bad config (and more servers than tensors),
 * SL_ENOMEM. *out is owned by the caller: sl_ps_destroy. */
int sl_ps_create(const sl_ps_config *cfg, sl_model *tmpl, sl_ps **out);

/* Copy the current params and BN buffers of every shard into m (worker
 * w's model) and set *version (may be NULL) to the smallest server version
 * seen. Waits first for w's own earlier pushes to be applied, then for the
 * staleness bound. SL_EINVAL: bad worker, worker done, m's state dict not
 * the template's (names the tensor); SL_ETIMEDOUT: the bound or the
 * worker's pushes did not come within timeout_ms (names the slowest worker). */
int sl_ps_pull(sl_ps *ps, int worker, sl_model *m, uint64_t *version);

/* Hand m's grads (params) and BN buffers to every server with learning rate
 * lr; version must be what w's last pull returned (staleness is measured
 * from that pull, per server). Returns once the data are copied into every
 * server's inbox; the updates are applied later, in arrival order. m may be
 * changed as soon as this returns. SL_EINVAL: no pull yet, version mismatch,
 * bad lr, worker done, m not the template's; SL_ETIMEDOUT: an inbox stayed
 * full (sticky once any server took the push, as the shards then differ). */
int sl_ps_push(sl_ps *ps, int worker, sl_model *m, uint64_t version, float lr);

/* Worker w is finished: it leaves the SSP bound (others no longer wait for
 * it) and may not pull or push again. Its queued pushes are still applied. */
int sl_ps_worker_done(sl_ps *ps, int worker);

/* A consistent copy of the servers' state: hold back new pushes, wait until
 * every queued push is applied (all servers then have the same version),
 * copy params and buffers into m, and, when o is not NULL, the momentum
 * into o's "optimizer.<param>.momentum_buffer" entries and the servers'
 * step count into "optimizer.step" (o must be an optimizer over a model of
 * the template's architecture, e.g. sl_sgd_create over m's tensors). For
 * evaluation and checkpoints (sl_checkpoint_save(prefix, m, o, ...)). */
int sl_ps_snapshot(sl_ps *ps, sl_model *m, sl_sgd *o);

/* Resume: like snapshot, but the servers take m's params and buffers and
 * o's momentum and step (sl_checkpoint_load into m and o first); o = NULL
 * starts the momentum afresh (zero, step 0). Versions are not changed
 * (they count pushes applied by this ps). */
int sl_ps_load(sl_ps *ps, sl_model *m, sl_sgd *o);

/* Break the ps on purpose (a worker failed): calls waiting in any thread
 * and every later call return SL_ECANCELED with why (sticky); servers stop
 * applying. Any thread. For an MPI handle only this rank's handle breaks
 * (the servers and other workers go on; destroy sends this worker's done). */
void sl_ps_abort(sl_ps *ps, const char *why);

/* Counters since creation or the last reset (reset != 0 zeroes them after
 * copying; version is never reset). */
int sl_ps_stats_get(sl_ps *ps, sl_ps_stats *out, int reset);

/* Which server holds state-dict tensor i (-1 when out of range), and how
 * many bytes of params and buffers server s holds. */
int sl_ps_server_of(const sl_ps *ps, int tensor);
size_t sl_ps_server_bytes(const sl_ps *ps, int server);

/* Stop the server threads and free. Pushes still queued are dropped (take a
 * snapshot first to apply them). No call on ps may be running. NULL is a
 * no-op. For an MPI handle (worker side), tells the servers this worker is
 * done when it did not say so yet. */
void sl_ps_destroy(sl_ps *ps);

/* ------------------------------------------------------------------ MPI */
/* Server ranks: ranks 0 .. ps_ranks-1 of comm run sl_ps_serve; the others
 * are workers (worker id = rank - ps_ranks, cfg->workers = world -
 * ps_ranks, cfg->servers = ps_ranks) and use the sl_ps_* calls above on a
 * handle from sl_ps_create_mpi. Every rank builds the shards from a
 * template of the same architecture; server ranks take their initial
 * values from their own tmpl, so build it with the same seed everywhere
 * (or sl_ps_load from one worker). A push is an MPI message per server
 * (its shard of grads and buffers), a pull a request and a reply per
 * server. Each server applies pushes in arrival order on its rank; pulls
 * wait there for the worker's earlier pushes and the SSP bound.
 *
 * sl_ps_snapshot through an MPI handle copies each server's current state
 * (not a cut across servers: pushes of other workers in flight may have
 * reached one shard and not another); take it while the other workers
 * wait, or at the end. sl_ps_stats_get through an MPI handle combines this
 * worker's pulls, pushes and waits with the servers' counters, which all
 * workers share (a reset resets them for everyone); it needs the servers,
 * so call it before sl_ps_worker_done. SL_ENOTSUP from both functions
 * for a communicator that is not MPI (and so in a build without MPI). */
int sl_ps_create_mpi(const sl_ps_config *cfg, sl_comm *comm, int ps_ranks, sl_model *tmpl,
                     sl_ps **out);
/* Serve until every worker has called sl_ps_worker_done (or destroyed its
 * handle), then return SL_OK; *stats (may be NULL) gets this server's
 * counters. A worker silent for timeout_ms while others wait on it, or a
 * broken communicator, ends it with the error. */
int sl_ps_serve(const sl_ps_config *cfg, sl_comm *comm, int ps_ranks, sl_model *tmpl,
                sl_ps_stats *stats);

/* ------------------------------------- shared by train/ps/ps.c and ps_mpi.c */

/* The sharding plan. Server s's tensors are ents[first[s] .. first[s] +
 * count[s]) in state-dict order; each sits at byte offset off (64-byte
 * aligned) of the server's arena of bytes[s]. Every payload of a server
 * has that layout: its arena (params, buffers), a push (grads at the
 * params' offsets, buffers at theirs) and a momentum image (momentum at
 * the params' offsets, buffers' bytes unused). */
typedef struct sl_ps_ent {
    int tensor;               /* index in the state dict */
    size_t off, bytes;
} sl_ps_ent;

typedef struct sl_ps_plan {
    int servers, ntensors;
    sl_tensor_info *tmpl;     /* the template's entries (data, grad NULL; names owned) */
    char *names;
    int *owner;               /* [ntensors] */
    int *first, *count;       /* [servers] */
    sl_ps_ent *ents;          /* [ntensors], grouped by server */
    size_t *bytes;            /* [servers] */
} sl_ps_plan;

int sl_ps_plan_init(sl_ps_plan *p, sl_model *tmpl, int servers);
void sl_ps_plan_fini(sl_ps_plan *p);
/* SL_EINVAL unless m's state dict has the template's names, dtypes,
 * numels and flags (fn and worker go into the message). */
int sl_ps_plan_check(const sl_ps_plan *p, sl_model *m, const char *fn, int worker);
/* Server s's payload from m: grads = 1 takes param grads, 0 param values;
 * buffers are values either way. */
void sl_ps_plan_gather(const sl_ps_plan *p, int s, sl_model *m, int grads, void *dst);
/* Params and buffers of server s's arena image src into m. */
void sl_ps_plan_scatter(const sl_ps_plan *p, int s, const void *src, sl_model *m);
/* map[i] = o's momentum buffer of state-dict tensor i (NULL for buffers),
 * *step = o's "optimizer.step"; SL_EINVAL when o's entries are not the
 * template's params. map has ntensors entries. */
int sl_ps_plan_opt_map(const sl_ps_plan *p, sl_sgd *o, float **map, int64_t **step,
                       const char *fn);

/* One server's state: values, optimizer, version. Not locked: the caller
 * serializes (ps.c: a rwlock per server; ps_mpi.c: the server rank's loop). */
typedef struct sl_ps_shard {
    const sl_ps_plan *plan;
    int id;
    unsigned char *arena;     /* plan->bytes[id] */
    sl_tensor_info *local;    /* plan->count[id] entries over the arena */
    float **mom;              /* per local entry: its momentum buffer (NULL: a buffer) */
    int64_t *step;            /* the optimizer's step count */
    sl_sgd *opt;
    uint64_t version;         /* pushes applied */
} sl_ps_shard;

int sl_ps_shard_init(sl_ps_shard *sh, const sl_ps_plan *p, int id, sl_model *tmpl,
                     const sl_sgd_config *c);
void sl_ps_shard_fini(sl_ps_shard *sh);
/* Apply one push (payload in plan layout: grads, buffers): SGD step with
 * lr on the params, buffers replaced, version + 1. */
int sl_ps_shard_apply(sl_ps_shard *sh, const void *payload, float lr);
/* Momentum image out of / into the shard (plan layout). */
void sl_ps_shard_momentum_out(const sl_ps_shard *sh, void *dst);
void sl_ps_shard_momentum_in(sl_ps_shard *sh, const void *src);

/* A handle's backend, as collectives/comm.c's sl_comm_vt: ps.c's entry
 * points check the arguments (worker range, m against the plan, lr) and
 * the sticky error, then call through the table with the backend's impl.
 * The local table is ps.c's (its server threads); the MPI one ps_mpi.c's
 * (sl_ps_mpi_open), which calls nothing in ps.c. map/step as
 * sl_ps_plan_opt_map gives them, NULL without an optimizer. destroy frees
 * impl (the MPI worker side first tells the servers it is done). */
typedef struct sl_ps_vt {
    const char *name;
    int (*pull)(void *impl, int worker, sl_model *m, uint64_t *version);
    int (*push)(void *impl, int worker, sl_model *m, uint64_t version, float lr);
    int (*done)(void *impl, int worker);
    int (*snapshot)(void *impl, sl_model *m, float **map, int64_t *step);
    int (*load)(void *impl, sl_model *m, float **map, int64_t *step);
    int (*stats)(void *impl, sl_ps_stats *out, int reset);
    void (*destroy)(void *impl);
} sl_ps_vt;

/* ps_mpi.c, for sl_ps_create_mpi: check that comm, ps_ranks and cfg make
 * this rank a worker (SL_ENOTSUP for a communicator that is not MPI,
 * SL_EINVAL otherwise), then open the worker side over the handle's cfg
 * and plan (they outlive it): *vt and *impl on success. */
typedef struct sl_ps_mpi sl_ps_mpi;
int sl_ps_mpi_check(const sl_ps_config *cfg, sl_comm *comm, int ps_ranks, const char *fn);
int sl_ps_mpi_open(const sl_ps_config *cfg, const sl_ps_plan *plan, sl_comm *comm, int ps_ranks,
                   const char *fn, const sl_ps_vt **vt, void **impl);

/* Statistics: one staleness sample into st (sum keeps the mean's sum). */
void sl_ps_stats_sample(sl_ps_stats *st, double *sum, uint64_t staleness);
/* st += add (counts, sums, maxima; means re-weighted; version = min). */
void sl_ps_stats_merge(sl_ps_stats *st, const sl_ps_stats *add);

#ifdef __cplusplus
}
#endif

#endif /* SL_PS_INT_H */

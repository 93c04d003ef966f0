/*
 * train/loop/trainer_int.h - private to the training loop files:
 *
 *   config.c    strategy and precision names, sl_train_config_init
 *   run.c       sl_train_run: the world, the data and record counts, the
 *               replicas' set-up (resume); chooses the strategy's loop
 *   services.c  what every strategy's loop calls: evaluation, checkpoints
 *               (after an epoch, on a stop request, the rescue)
 *   strategy_mirrored.c  the mirrored (and single) strategy: the replicas'
 *               threads, the step loop, its timing and progress lines
 *   replica.c   one replica: its pipeline, model, optimizer; one step
 *               (forward, backward, bucketed all-reduce, SGD); the
 *               collectives a replica takes part in (statistics, BN buffers,
 *               distributed evaluation, the identical-weights check)
 *   strategy_ps.c  the parameter-server strategy's worker loop over
 *               train/ps/'s parameter server (ps_int.h)
 *
 * A checkpoint's state JSON, the rescue save and the resume plan are
 * io/resume.c's (io_int.h), on plain data run.c hands them.
 *
 * Ranks. A run has `world` replicas in all: nlocal of them are threads of
 * this process (replica index 0 .. nlocal-1 runs on the calling thread or
 * its own), with global ranks rank0 .. rank0 + nlocal - 1. Under mpirun a
 * process holds one replica (rank0 = MPI rank). The root (global rank 0)
 * prints, writes summaries and saves checkpoints.
 *
 * Every replica runs the same deterministic sequence of steps and
 * collectives (all-reduces of gradient buckets, of the progress window's
 * sums at log steps, of BN buffers before evaluations and checkpoints), so
 * the collectives always match; an error on one replica aborts its
 * communicator, which ends the others' waits with its reason.
 */
#ifndef SL_TRAINER_INT_H
#define SL_TRAINER_INT_H

#include <pthread.h>
#include <stdio.h>

#include "collectives/collectives.h"
#include "common/clock.h"
#include "train/device/dev_int.h"
#include "train/model/model_int.h"
#include "train/train.h"

typedef struct sl_run sl_run;

/* A gradient bucket: a contiguous span [off, off + n) of the grads arena
 * holding whole tensors; all-reduced once `pending` tensors are ready. */
typedef struct sl_bucket {
    size_t off, n;
    int tensors, pending;
    sl_comm_req *req;
} sl_bucket;

typedef struct sl_replica {
    sl_run *run;
    int idx;                   /* local index */
    int rank;                  /* global rank among the run's replicas */
    sl_exec e;
    int exec_ok;
    sl_pipeline_config data;   /* this replica's input (rank, world, local batch) */
    sl_pipeline *p;
    sl_model *m;
    sl_sgd *o;
    sl_comm *comm;             /* NULL when world == 1 */
    float *dlogits;            /* (batch, classes) in the exec's memory */
    int32_t *labels;
    /* on a device (cuda): the feed from the pipeline's load stage, the
     * optimizer, the loss sums (two doubles) and the current input */
    int dev;
    sl_dev_feed *feed;
    sl_dev_sgd *dsgd;
    double *d_acc;
    const void *x;
    const int32_t *d_labels;
    sl_comm *gcomm;            /* gradient buckets' comm: comm, or (cuda) an NCCL comm */
    float *grads;              /* the model's grads arena (buckets are spans of it) */
    sl_bucket *bk;
    int nbk;
    int *bucket_of;            /* per state-dict tensor: its bucket, -1 for buffers */
    int started;               /* buckets started in this backward */
    int *start_order;          /* bucket indices in the order they were started */
    /* the device step as a CUDA graph (replica.c's step_graph) */
    sl_dev_graph *graph;       /* captured and replayed; NULL before (or off) */
    int graph_off;             /* no capture: graph_why says why */
    int graph_tries;           /* captures attempted */
    int graph_n;               /* the batch size it holds */
    const void *graph_x;       /* the input it reads */
    int coll_stream;           /* this step's all-reduces are stream-ordered (step_coll) */
    int64_t dev_steps;         /* device steps run by this process */
    int64_t graph_replays;
    char graph_why[200];
    uint64_t bad_named;        /* its pipeline's bad records named on the progress stream
                                * so far (strategy_mirrored.c: the first
                                * SL_PIPELINE_MAX_BAD_REPORT) */
    double comm_wait_s;        /* time in all-reduce waits this window */
    double step_s;             /* time in steps this window */
    pthread_t thread;
    int thread_started;
    int rc;
    char msg[SL_ERRMSG_MAX];
} sl_replica;

struct sl_run {
    const sl_train_config *cfg;
    sl_pipeline_config data;   /* the global view: batch = global batch */
    int world, nlocal, rank0, is_root;
    int ps_ranks;              /* ps under mpirun: ranks [0, ps_ranks) serve, the rest work */
    int ps_server;             /* this process is a server rank */
    int timeout_ms;            /* --comm-timeout: the longest any wait on a peer lasts */
    unsigned local_batch;
    sl_comm_group *group;      /* local replicas */
    sl_comm *mpi;              /* under mpirun: this process's comm (replica 0 owns it) */
    sl_replica *rep;
    sl_summary *sum;
    sl_schedule sched;
    int classes;
    int64_t step0;             /* first step of this run (resume) */
    int64_t steps_per_epoch, total_steps, records;
    int64_t log_every;
    int resume_exact;          /* resume continues the same samples */
    int64_t saved_steps_per_epoch; /* of the checkpoint resumed from */
    char *resume_prefix;       /* checkpoint to load, NULL for none */
    FILE *out;
    double t0;
    sl_train_result *res;
    /* the data, checked before the first step (run.c resolve_data) */
    const char *eval_split;    /* the split evaluated after each epoch; NULL for none */
    char *eval_data;           /* where it is read: --data, or a glob's or file's folder */
    /* a checkpoint when an error stops the run (run.c replica_loop, io/resume.c sl_ckpt_rescue) */
    int64_t done_step;         /* the last step the root replica completed */
    char done_state[SL_PIPELINE_STATE_MAX]; /* its pipeline state after that step */
    int64_t saved_step;        /* the step of the last checkpoint written; -1 none */
    int64_t stopped;           /* the step a stop request (cfg->stop) ended the loop at; 0 none
                                  (written by each process's replica 0) */
    char rescue[4200];         /* where the rescue went (or why it failed); "" none */
};

/* replica.c */
/* Pipeline, model, optimizer, buckets for rep (run set up, rep->rank set).
 * start_samples: the replica's pipeline starts after that many samples
 * (resume); start_state: a saved pipeline state to continue exactly (world
 * 1 resume) or NULL. */
int sl_replica_setup(sl_replica *rep, uint64_t start_batches, uint64_t start_samples,
                     const char *start_state);
void sl_replica_fini(sl_replica *rep);
/* Forward, loss and backward on the replica's batch b: the gradients are
 * in the model (and, mirrored, their buckets' all-reduces started).
 * SL_EINVAL for a label outside the model's classes or a loss that is not
 * finite. */
int sl_replica_grads(sl_replica *rep, const sl_batch *b, float *loss, int *correct);
/* One SGD step on the replica's batch b: sl_replica_grads with the
 * buckets all-reduced (averaged) as they fill, then SGD. */
int sl_replica_step(sl_replica *rep, const sl_batch *b, float lr, float *loss, int *correct);
/* The loss and correct-count sums of the steps since the last take that
 * were kept on the device (0, 0 on the host, where sl_replica_step returns
 * them per step). */
int sl_replica_take(sl_replica *rep, double out[2]);
/* Sum n floats over all replicas (no-op for world 1). */
int sl_replica_sum(sl_replica *rep, float *v, int n);
/* Average the BN running statistics over replicas (no-op for world 1 and
 * with sync-BN, where they are identical already). */
int sl_replica_sync_buffers(sl_replica *rep);
/* What became of the CUDA graph of rep's device step: "on" (replays
 * counted), "off" or "fallback" (why), as the --json line says them. */
void sl_replica_graph_report(const sl_replica *rep, sl_train_result *res);
/* Evaluate on the eval split, each replica its share of the records;
 * the result (images, top1, top5, loss) is over all of them. */
int sl_replica_eval(sl_replica *rep, sl_eval_result *er);
/* Fail unless every replica's parameters are bitwise identical. */
int sl_replica_check_identical(sl_replica *rep, int64_t step);

/* services.c, for the strategies' loops: evaluate (root prints and logs),
 * save a checkpoint of rep's model and optimizer (root only; a no-op
 * without --ckpt-dir). strategy_ps.c and strategy_mirrored.c call them. */
int sl_run_evaluate(sl_run *r, sl_replica *rep, int64_t step);
int sl_run_save_checkpoint(sl_run *r, sl_replica *rep, int64_t step);
/* The checkpoint of a stop request at step: in ckpt_dir, else in the
 * rescue folder (made if need be); says where on the progress stream. */
int sl_run_save_stop(sl_run *r, sl_replica *rep, int64_t step);
/* The root's loop failed: a rescue checkpoint of r->done_step (io/resume.c's
 * sl_ckpt_rescue), what became of it in r->rescue. */
void sl_run_rescue(sl_run *r, sl_replica *rep);
/* What online tuning did to rep's pipeline so far into r->res->tuning and,
 * with a logdir, the tuning/ scalars of step (root: its log steps). */
int sl_run_log_tuning(sl_run *r, sl_replica *rep, int64_t step);
/* Whether the replicas' batches together are world 1's (the records split,
 * shuffle none or global): a checkpoint's rank_split "records". */
int sl_run_union_split(const sl_pipeline_config *d);

/* strategy_mirrored.c */
/* The mirrored (and single) strategy over the set-up run: every local
 * replica's step loop on its own thread (replica 0 on the caller's). */
int sl_mirrored_train(sl_run *r);
/* The step loop of one replica (single and mirrored strategies), from
 * r->step0 to r->total_steps; every replica runs it in lockstep. The root
 * notes each completed step for a rescue checkpoint and writes the run's
 * figures into r->res. */
int sl_run_steps(sl_replica *rep);

/* strategy_ps.c */
/* Steps of epoch `epoch` that worker w of world takes (the epoch's steps
 * dealt round-robin, the remainder rotating). */
int64_t sl_ps_worker_share(int64_t steps_per_epoch, int world, int w, int64_t epoch);
/* The batches worker w of world took in epochs 0 .. epochs-1: the sum of
 * its shares, in O(world) steps (resume). steps_per_epoch x epochs must
 * fit int64. */
int64_t sl_ps_worker_batches(int64_t steps_per_epoch, int world, int w, int64_t epochs);
/* The parameter-server loop over the set-up run (replicas = workers; under
 * mpirun one worker per rank from ps_ranks on). */
int sl_ps_train(sl_run *r);
/* Under mpirun, ranks below ps_ranks: serve the parameter shards. */
int sl_ps_serve_rank(sl_run *r);

#endif /* SL_TRAINER_INT_H */

/*
 * train/loop/run.c - sl_train_run: the world (replicas, ranks, the
 * strategy's communicators), the data and record counts, the replicas'
 * pipelines, models and optimizers (at the newest checkpoint when
 * resuming), and which strategy's loop runs them: the mirrored (and
 * single) one is strategy_mirrored.c's, the parameter-server one
 * strategy_ps.c's, both over services.c (evaluation, checkpoints); the
 * checkpoints' state and resume plan are io/resume.c's.
 *
 * Replicas (the mirrored strategy). Each replica has its own pipeline
 * (rank r of world W, batch = global batch / W), model and optimizer. The
 * ranks split the records (pipeline.h's SL_SPLIT_RECORDS) in every shuffle
 * mode: every replica has the same share of every epoch (ceil or floor of
 * R / W), whatever the shards' sizes, and one shard serves any number of
 * replicas (under --shuffle buffer each reads its own range of each epoch,
 * so the replicas read disjoint bytes; under global or none every W-th
 * record of world 1's stream). (They split
 * the shards under --shuffle buffer before issue 38: with uneven shards a
 * replica went through its own records more often than another, and fewer
 * shards than replicas was an error.) With --shuffle global or none the
 * union of the W replicas' k-th batches is then the k-th batch that one
 * replica with the whole global batch would get, so a run's data does not
 * depend on W (and with --sync-bn neither does its arithmetic, up to float
 * summation order); with --shuffle buffer each replica shuffles its share
 * in a buffer of its own.
 *
 * Threading: replica 0 runs on the calling thread, replicas 1.. on their
 * own; each replica's pipeline threads prepare its next batches meanwhile.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records/records.h"
#include "common/fileio.h" /* sl_mkdir_p */
#include "train/io/io_int.h" /* sl_resume_plan, SL_RESCUE_DIR */
#include "train/loop/trainer_int.h"

/* Say once that shards of split s have no index file (readers scan them). */
static void note_unindexed(sl_run *r, const sl_dataset_split *s)
{
    if (r->is_root && s && s->unindexed)
        fprintf(r->out, "train: note: %zu of %zu shards of %s have no index file (.idx): each "
                "is scanned when opened; sluice index DIR writes them\n", s->unindexed,
                s->nfiles, s->name);
}

/* Where the eval split `want` (not empty) is looked for, and its name
 * (NULL: none): beside the data when ds is a glob or one file; under
 * SL_EVAL_SPLIT_AUTO test, else validation, else none (a folder that does
 * not resolve: none). eds: the folder's resolution (the caller finis it).
 * An error only for a named split beside a folder that does not resolve. */
static int eval_choice(const sl_dataset *ds, const char *want, sl_dataset *eds,
                       const sl_dataset **where, const char **name)
{
    int autopick = !strcmp(want, SL_EVAL_SPLIT_AUTO), rc;
    *where = ds;
    *name = NULL;
    if (ds->kind == SL_DATASET_GLOB || ds->kind == SL_DATASET_FILE) {
        if ((rc = sl_dataset_resolve(ds->dir, NULL, eds))) {
            if (!autopick)
                return rc;
            sl_clear_error(); /* a folder of odd files: nothing to evaluate */
            sl_dataset_fini(eds);
        }
        *where = eds;
    }
    *name = autopick ? ((*where)->nsplits ? sl_dataset_eval_split(*where) : NULL) : want;
    return SL_OK;
}

int sl_train_eval_where(const sl_train_config *c, const char *data, char *dir, size_t dcap,
                        char *split, size_t scap)
{
    const char *want = c->eval_split, *name = NULL;
    if (dcap)
        dir[0] = '\0';
    if (scap)
        split[0] = '\0';
    if (!want || !*want)
        return 0;
    sl_dataset ds, eds;
    const sl_dataset *where;
    const sl_dataset_split *ev = NULL;
    memset(&eds, 0, sizeof eds);
    int has = 1; /* data that does not resolve: the run says why it fails */
    if (!sl_dataset_resolve(data, NULL, &ds)) {
        if (eval_choice(&ds, want, &eds, &where, &name))
            sl_clear_error(); /* a named split beside odd files: the run says why */
        else if (!name)
            has = 0;
        else if (sl_dataset_reader_split(where, name, &ev))
            sl_clear_error(); /* a split the data lacks: the run refuses it by name */
        else if (dcap && scap && strlen(where->path) < dcap && strlen(ev->name) < scap) {
            memcpy(dir, where->path, strlen(where->path) + 1);
            memcpy(split, ev->name, strlen(ev->name) + 1);
        }
    } else {
        sl_clear_error();
    }
    sl_dataset_fini(&eds);
    sl_dataset_fini(&ds);
    return has;
}

/* A model of `classes` outputs covers the labels dataset.json (or TensorFlow
 * Datasets' features.json) says ds has:
 * else the first record of a label past them would stop the run, an epoch
 * in perhaps; refused before the first step instead. */
static int classes_cover(const sl_dataset *ds, int classes)
{
    if (!ds->classes_path || ds->manifest.num_classes <= (uint32_t)classes)
        return SL_OK;
    return sl_fail(SL_EINVAL, "sl_train_run: %s records %u classes, the model has %d: a "
                   "record of label %d or more would stop the run when it is read; give "
                   "--classes %u (or leave it out: that count is the default)",
                   ds->classes_path, ds->manifest.num_classes, classes, classes,
                   ds->manifest.num_classes);
}

/* The data, checked before the first step: the train split exists, the
 * classes (dataset.json's, or a TensorFlow Datasets folder's, when the config
 * leaves them at 0), the eval split
 * (SL_EVAL_SPLIT_AUTO: test, else validation, else none; a named one must
 * exist), looked for beside the data when --data is a glob or one file.
 * The root says once which split it evaluates and which shards have no
 * index file. */
static int resolve_data(sl_run *r)
{
    const sl_train_config *c = r->cfg;
    sl_dataset ds, eds;
    const sl_dataset *where = &ds;
    const sl_dataset_split *tr = NULL, *ev = NULL;
    const char *want = c->eval_split, *name = NULL;
    int autopick = want && !strcmp(want, SL_EVAL_SPLIT_AUTO);
    memset(&eds, 0, sizeof eds);
    int rc = sl_dataset_resolve(r->data.data, NULL, &ds);
    if (!rc)
        rc = sl_dataset_reader_split(&ds, r->data.split, &tr);
    if (rc) {
        rc = sl_fail(rc, "sl_train_run: %s", sl_errmsg());
        goto out;
    }
    r->classes = c->model.classes;
    if (r->classes <= 0) {
        if (!ds.classes_path || ds.manifest.num_classes < 1) {
            rc = sl_fail(SL_EINVAL, "sl_train_run: %s: the number of classes comes from %s/%s, "
                         "which %s: give it (--classes K; TensorFlow's ImageNet shards: "
                         "--classes 1000 --label-offset 1)", r->data.data, ds.dir,
                         SL_MANIFEST_FILE, ds.has_manifest ? "says 0" : "is not there");
            goto out;
        }
        r->classes = (int)ds.manifest.num_classes;
    }
    if ((rc = classes_cover(&ds, r->classes)))
        goto out;
    if (want && *want) {
        if ((rc = eval_choice(&ds, want, &eds, &where, &name))) {
            rc = sl_fail(rc, "sl_train_run: --eval-split %s: %s", want, sl_errmsg());
            goto out;
        }
        if (name && (rc = sl_dataset_reader_split(where, name, &ev))) {
            rc = sl_fail(rc, "sl_train_run: --eval-split %s: %s", name, sl_errmsg());
            goto out;
        }
    }
    if (name && where != &ds && (rc = classes_cover(where, r->classes)))
        goto out;
    if (name) {
        if (!(r->eval_data = strdup(where->path))) {
            rc = sl_fail(SL_ENOMEM, "sl_train_run: out of memory");
            goto out;
        }
        snprintf(r->res->eval_split, sizeof r->res->eval_split, "%s", ev->name);
        r->eval_split = r->res->eval_split; /* outlives ds */
    }
    if (r->is_root && autopick) {
        if (name)
            fprintf(r->out, "train: evaluating split '%s' after each epoch%s (--eval-split NAME "
                    "or none to choose)\n", name,
                    strcmp(name, "test") ? " (there is no 'test' split)" : "");
        else
            fprintf(r->out, "train: no 'test' or 'validation' split beside %s: no evaluation "
                    "(--eval-split NAME to name one)\n", r->data.data);
    }
    note_unindexed(r, tr);
    note_unindexed(r, ev);
out:
    sl_dataset_fini(&eds);
    sl_dataset_fini(&ds);
    return rc;
}

/* ------------------------------------------------------ the loops' services */

/* ------------------------------------------------------------------ setup */

static int setup_world(sl_run *r)
{
    const sl_train_config *c = r->cfg;
    sl_comm_config cc = SL_COMM_CONFIG_INIT;
    r->timeout_ms = (c->comm_timeout_s > 0 ? c->comm_timeout_s : 300) * 1000;
    cc.timeout_ms = r->timeout_ms;
    r->world = r->nlocal = 1;
    r->rank0 = 0;
    if (c->strategy == SL_STRATEGY_MIRRORED) {
        if (sl_comm_mpi_launched()) {
            if (c->replicas > 1)
                return sl_fail(SL_EINVAL, "sl_train_run: under mpirun each process is one "
                               "replica (--replicas %d): start more processes instead",
                               c->replicas);
            int rc = sl_comm_mpi_create(&cc, &r->mpi);
            if (rc)
                return sl_fail(rc, "sl_train_run: mirrored under mpirun: %s", sl_errmsg());
            r->world = sl_comm_world(r->mpi);
            r->rank0 = sl_comm_rank(r->mpi);
        } else {
            int n = c->replicas > 0 ? c->replicas : (int)sysconf(_SC_NPROCESSORS_ONLN);
            r->world = r->nlocal = n > 0 ? n : 1;
            if (r->world > 1) {
                int rc = sl_comm_local_group_create(r->world, &cc, &r->group);
                if (rc)
                    return rc;
            }
        }
    }
    if (c->strategy == SL_STRATEGY_PS && sl_comm_mpi_launched()) {
        /* Ranks [0, ps_ranks) serve the parameter shards, the others are
         * one worker each. */
        if (c->replicas > 1)
            return sl_fail(SL_EINVAL, "sl_train_run: under mpirun each process is one ps "
                           "worker or server (--replicas %d): start more processes instead",
                           c->replicas);
        int rc = sl_comm_mpi_create(&cc, &r->mpi);
        if (rc)
            return sl_fail(rc, "sl_train_run: ps under mpirun: %s", sl_errmsg());
        int size = sl_comm_world(r->mpi), me = sl_comm_rank(r->mpi);
        r->ps_ranks = c->ps_ranks > 0 ? c->ps_ranks : 1;
        if (r->ps_ranks >= size)
            return sl_fail(SL_EINVAL, "sl_train_run: --ps-ranks %d leaves no worker among %d "
                           "processes", r->ps_ranks, size);
        r->world = size - r->ps_ranks;
        r->nlocal = 1;
        r->ps_server = me < r->ps_ranks;
        r->rank0 = r->ps_server ? -1 : me - r->ps_ranks;
    } else if (c->strategy == SL_STRATEGY_PS) {
        /* Workers are threads of this process; each step is one worker's
         * whole batch, so the batch is not split. */
        if (c->ps_ranks > 0)
            return sl_fail(SL_EINVAL, "sl_train_run: --ps-ranks needs mpirun (server ranks are "
                           "processes); in one process use --ps-servers");
        int n = c->replicas > 0 ? c->replicas : (int)sysconf(_SC_NPROCESSORS_ONLN);
        r->world = r->nlocal = n > 0 ? n : 1;
    }
    r->is_root = r->rank0 == 0;
    if (c->backend == SL_BACKEND_CUDA && c->strategy == SL_STRATEGY_PS)
        return sl_fail(SL_ENOTSUP, "sl_train_run: the ps strategy trains on the cpu backend "
                       "(its servers and pushes are host memory); use mirrored on GPUs");
    if (c->backend == SL_BACKEND_CUDA && r->nlocal > 1)
        return sl_fail(SL_ENOTSUP, "sl_train_run: on cuda, mirrored runs one process per GPU: "
                       "start them with mpirun -np <GPUs> instead of --replicas %d", r->nlocal);
    if (c->strategy == SL_STRATEGY_PS) {
        r->local_batch = r->data.batch;
    } else if (r->data.batch % (unsigned)r->world)
        return sl_fail(SL_EINVAL, "sl_train_run: global batch %u does not split evenly over %d "
                       "replicas", r->data.batch, r->world);
    else
        r->local_batch = r->data.batch / (unsigned)r->world;
    r->rep = calloc((size_t)r->nlocal, sizeof *r->rep);
    if (!r->rep)
        return sl_fail(SL_ENOMEM, "sl_train_run: replicas");
    for (int i = 0; i < r->nlocal; i++) {
        sl_replica *rep = &r->rep[i];
        rep->run = r;
        rep->idx = i;
        rep->rank = r->rank0 + i;
        if (c->strategy == SL_STRATEGY_PS) {
            /* ps workers share no collectives: the engine talks for them */
        } else if (r->mpi) {
            rep->comm = r->mpi;
        } else if (r->group) {
            int rc = sl_comm_local_open(r->group, i, &rep->comm);
            if (rc)
                return rc;
        }
    }
    return SL_OK;
}

/* Records per epoch over all replicas, the same figure on every rank: the
 * pipeline's count of the whole split (pipeline.h's
 * records_per_epoch_world). */
static int world_records(sl_run *r)
{
    sl_pipeline_stats ps;
    int rc = sl_pipeline_stats_get(r->rep[0].p, &ps);
    if (rc)
        return rc;
    r->records = (int64_t)ps.records_per_epoch_world;
    return SL_OK;
}

/* Read the newest checkpoint's state (io/resume.c's plan): r's first step
 * and how the pipelines restart. *state gets world 1's saved pipeline
 * state when it can be used as is (the caller frees it). */
static int resume_plan(sl_run *r, char **state)
{
    sl_resume_plan p = {
        .dir = r->cfg->ckpt_dir,
        .batch = r->data.batch,
        .world = r->world,
        .split_records = sl_run_union_split(&r->rep[0].data),
        .root = r->is_root,
        .out = r->out,
    };
    int rc = sl_resume_plan_make(&p);
    r->resume_prefix = p.prefix; /* run_fini frees it, also on error */
    *state = p.state;
    if (rc == SL_OK && p.prefix) {
        r->step0 = p.step0;
        r->saved_steps_per_epoch = p.saved_steps_per_epoch;
        r->resume_exact = p.exact;
    }
    return rc;
}

/* Each local replica's pipeline, model and optimizer; when resuming, at
 * the newest checkpoint's step and with its weights. */
static int setup_replicas(sl_run *r)
{
    const sl_train_config *c = r->cfg;
    char *state = NULL; /* world 1 resume: the saved pipeline state */
    char path[4200];
    int rc = SL_OK;
    for (int i = 0; i < r->nlocal; i++)
        r->rep[i].data = r->data; /* resume_plan reads rank_split from it */
    if (c->resume && c->ckpt_dir && (rc = resume_plan(r, &state)))
        goto out_state;
    for (int i = 0; i < r->nlocal && !rc; i++) {
        /* batches replica i has taken before step0 */
        uint64_t nb = (uint64_t)r->step0;
        if (c->strategy == SL_STRATEGY_PS && r->step0 > 0) {
            if (r->saved_steps_per_epoch < 1 || r->step0 % r->saved_steps_per_epoch) {
                rc = sl_fail(SL_EINVAL, "sl_train_run: resume from %s: the ps strategy "
                             "resumes from epoch ends only (step %" PRId64 ")",
                             r->resume_prefix, r->step0);
                goto out_state;
            }
            nb = (uint64_t)sl_ps_worker_batches(r->saved_steps_per_epoch, r->world, i,
                                                r->step0 / r->saved_steps_per_epoch);
        }
        rc = sl_replica_setup(&r->rep[i], nb, nb * r->local_batch, state);
    }
    if (rc || !r->resume_prefix)
        goto out_state;
    snprintf(path, sizeof path, "%s.safetensors", r->resume_prefix);
    for (int i = 0; i < r->nlocal && !rc; i++) {
        sl_replica *rep = &r->rep[i];
        if (!(rc = sl_checkpoint_load(path, rep->m, rep->o, 1)) &&
            !(rc = sl_model_push(rep->m)) && rep->dsgd)
            rc = sl_dev_sgd_push(rep->dsgd);
    }
out_state:
    free(state);
    return rc;
}

/* The split the run has (issue 43: chosen or given) into the logdir, once
 * at the first step: scalars, and with the CLI's plan (cfg->plan) the
 * budget, the start-up measurement and its seconds as scalars and why as
 * text (TensorBoard's Text tab; metrics.jsonl). */
static int log_parallelism(sl_run *r)
{
    const sl_par_plan *p = r->cfg->plan;
    const char *tags[] = {"parallelism/replicas", "parallelism/threads_per_replica",
                          "parallelism/workers", "parallelism/readers",
                          "parallelism/prefetch", "parallelism/cpus",
                          "parallelism/free_cores", "parallelism/probe_seconds"};
    double v[] = {r->world, r->rep[0].e.threads, r->data.workers, r->data.readers,
                  r->data.prefetch, p ? p->cpus : 0, p ? p->free_cores : 0,
                  p ? p->probe_s : 0};
    int rc = sl_summary_scalars(r->sum, r->step0, tags, v, p ? 8 : 5, NULL);
    if (rc || !p)
        return rc;
    char text[512];
    snprintf(text, sizeof text, "%s (%s)", p->reason, p->budget);
    return sl_summary_text(r->sum, r->step0, "parallelism/reason", text);
}

static int setup(sl_run *r)
{
    const sl_train_config *c = r->cfg;
    int rc;
    r->data = c->data;
    r->data.layout = SL_LAYOUT_NHWC_F32;
    r->data.epochs = 0; /* forever: the trainer counts steps */
    r->data.device = -1;
    if (r->data.batch < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: batch must be at least 1");
    if ((rc = setup_world(r)))
        return rc;
    r->data.rank_split = r->world > 1 ? SL_SPLIT_RECORDS : SL_SPLIT_FILES;
    if ((rc = resolve_data(r)))
        return rc;
    if (c->sync_bn && r->world == 1 && r->is_root && c->strategy != SL_STRATEGY_PS)
        fprintf(r->out, "train: --sync-bn with one replica: plain batch norm (there is nothing "
                "to synchronize)\n");
    if (r->ps_server)
        return SL_OK; /* a ps server rank needs the model's shape, no data */
    if ((rc = setup_replicas(r)))
        return rc;
    if ((rc = world_records(r)))
        return rc;
    if (r->records < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: %s: split '%s' has no records", r->data.data,
                       r->data.split);
    r->steps_per_epoch = (r->records + r->data.batch - 1) / r->data.batch;
    r->total_steps = c->max_steps > 0 ? c->max_steps : c->epochs * r->steps_per_epoch;
    if (r->total_steps < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: nothing to do (epochs %" PRId64 ", max steps "
                       "%" PRId64 ")", c->epochs, c->max_steps);
    r->log_every = c->log_every > 0 ? c->log_every
                                    : (r->steps_per_epoch >= 10 ? r->steps_per_epoch / 10 : 1);
    r->sched.kind = c->schedule;
    r->sched.peak_lr = c->base_lr * (double)r->data.batch / 256.0;
    r->sched.warmup_steps = (int64_t)llround(c->warmup_epochs * (double)r->steps_per_epoch);
    r->sched.total_steps = r->total_steps;

    if (r->is_root && c->ckpt_dir && (rc = sl_mkdir_p(c->ckpt_dir, "sl_train_run")))
        return rc;
    if (r->is_root && c->logdir && (rc = sl_summary_open(c->logdir, &r->sum)))
        return rc;
    if (r->sum && (rc = log_parallelism(r)))
        return rc;
    if (r->is_root) {
        sl_replica *rep = &r->rep[0];
        char prec[160];
        sl_train_precision_note(c, prec, sizeof prec); /* cpu: bf16 or why fp32 */
        fprintf(r->out, "train: %s (%" PRId64 " parameters, %.0f MiB) on %s%s%s%s%d, %" PRId64
                " records, batch %u, %" PRId64 " steps/epoch, %" PRId64 " steps, peak lr %.4g, "
                "%s schedule, warmup %" PRId64 " steps\n", sl_arch_name(c->model.arch),
                sl_model_param_count(rep->m), (double)sl_model_bytes(rep->m) / 1048576.0,
                sl_backend_name(c->backend), " ", prec,
                rep->dev ? " device " : " x", rep->dev ? sl_mem_device(&rep->e) : rep->e.threads,
                r->records, r->data.batch,
                r->steps_per_epoch, r->total_steps, r->sched.peak_lr,
                sl_sched_name(c->schedule), r->sched.warmup_steps);
        if (c->strategy == SL_STRATEGY_PS)
            fprintf(r->out, "train: parameter server: %d worker%s x batch %u, %d server "
                    "thread%s, staleness bound %s\n", r->world, r->world == 1 ? "" : "s",
                    r->local_batch, c->ps_servers > 0 ? c->ps_servers : 1,
                    c->ps_servers > 1 ? "s" : "", c->max_staleness >= 0 ? "set" : "none");
        else if (r->world > 1)
            fprintf(r->out, "train: mirrored over %d replicas (%s), %u images each, %d gradient "
                    "bucket%s, %s%s, records split by %s\n", r->world,
                    r->mpi ? "mpi" : "local threads", r->local_batch, rep->nbk,
                    rep->nbk == 1 ? "" : "s", c->no_overlap ? "no overlap" : "overlapped",
                    c->sync_bn ? ", sync-BN" : "",
                    r->data.rank_split == SL_SPLIT_RECORDS ? "record" : "shard");
        fflush(r->out);
    }
    return SL_OK;
}

static void run_fini(sl_run *r)
{
    sl_summary_close(r->sum);
    for (int i = 0; r->rep && i < r->nlocal; i++) {
        if (!r->mpi)
            sl_comm_destroy(r->rep[i].comm);
        sl_replica_fini(&r->rep[i]);
    }
    free(r->rep);
    sl_comm_destroy(r->mpi);
    sl_comm_local_group_destroy(r->group);
    free(r->resume_prefix);
    free(r->eval_data);
}

int sl_train_run(const sl_train_config *cfg, sl_train_result *res)
{
    memset(res, 0, sizeof *res);
    res->eval_top1 = res->eval_top5 = -1;
    int rc0 = sl_check_config_size("sl_train_run", cfg->size, sizeof *cfg);
    if (rc0)
        return rc0;
    sl_run r = {.cfg = cfg, .out = cfg->progress ? cfg->progress : stderr, .res = res,
                .saved_step = -1};
    r.t0 = sl_now_s();
    int rc = setup(&r);
    if (rc)
        goto out;
    res->world = r.world;
    res->root = r.is_root;
    res->steps = r.step0;
    if (cfg->strategy == SL_STRATEGY_PS) {
        rc = r.ps_server ? sl_ps_serve_rank(&r) : sl_ps_train(&r);
        goto out;
    }
    rc = sl_mirrored_train(&r);
out:
    if (rc && r.rescue[0]) {
        char msg[SL_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", sl_errmsg());
        rc = sl_fail(rc, "%.2000s (%s)", msg, r.rescue);
    }
    if (rc && r.mpi) {
        /* Tell the other processes (they would otherwise wait out their
         * timeout), and keep MPI_Finalize from waiting for them. */
        char msg[SL_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", sl_errmsg());
        sl_comm_abort(r.mpi, msg);
        rc = sl_fail(rc, "%s", msg);
    }
    res->seconds = sl_now_s() - r.t0;
    if (rc == SL_OK && r.sum)
        rc = sl_summary_close(r.sum);
    else
        sl_summary_close(r.sum);
    r.sum = NULL;
    /* a stop request: the run ended well, early (every process agreed on
     * the step, so none aborts the others above) */
    if (rc == SL_OK && r.stopped)
        rc = sl_fail(SL_ECANCELED, "sl_train_run: stopped on request after step %" PRId64
                     "; it is saved in %.3000s: continue with --ckpt-dir %.1000s --resume",
                     r.stopped, res->checkpoint[0] ? res->checkpoint : "(another process)",
                     cfg->ckpt_dir ? cfg->ckpt_dir : SL_RESCUE_DIR);
    res->stopped = r.stopped;
    run_fini(&r);
    return rc;
}

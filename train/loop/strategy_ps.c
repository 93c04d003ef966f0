/*
 * train/loop/strategy_ps.c - the parameter-server strategy's training loop
 * (--strategy ps): worker threads pull weights, compute gradients on their
 * own batches and push them to the parameter server below (train/ps/: its
 * server threads, or its server ranks under MPI), with no barrier between
 * steps (ps_int.h has the engine's semantics). Evaluation and checkpoints
 * are services.c's, as for the mirrored strategy.
 *
 * Epochs. An epoch is ceil(records / batch) updates, dealt round-robin
 * over the W workers (sl_ps_worker_share); each worker reads its own
 * records (rank w of W: shards, or records with --shuffle global/none).
 * The workers run freely within an epoch and meet at its end: the main
 * thread then takes a consistent snapshot of the servers (every push
 * applied) into worker 0's model and optimizer, evaluates it and saves a
 * checkpoint, so checkpoints (and resume) are at epoch ends. The learning
 * rate of a step follows the schedule at the servers' version the worker
 * pulled (updates applied so far).
 *
 * Progress. Worker 0 prints a line every log_every of the epoch's updates
 * (its own window: loss, accuracy; images/s of all workers from the
 * version count) and the staleness so far; the epoch line sums every
 * worker.
 *
 * Threading: W worker threads per epoch (joined at its end), the servers'
 * threads inside sl_ps, and the pipelines' threads.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/loop/trainer_int.h"
#include "train/ps/ps_int.h"

/* The remainder steps rotate over the workers from epoch to epoch, so that
 * no worker falls behind by more than one step over many epochs (with a
 * staleness bound, a worker far ahead would wait at an epoch's end for
 * workers that have already finished theirs). */
int64_t sl_ps_worker_share(int64_t steps_per_epoch, int world, int w, int64_t epoch)
{
    int64_t slot = ((int64_t)w - epoch % world + world) % world;
    return steps_per_epoch / world + (slot < steps_per_epoch % world ? 1 : 0);
}

/* Over any `world` consecutive epochs worker w holds every slot once, so
 * its shares add up to steps_per_epoch: whole cycles are counted at once
 * and only the last, partial one epoch by epoch (a checkpoint's step read
 * from a file cannot make this loop long). */
int64_t sl_ps_worker_batches(int64_t steps_per_epoch, int world, int w, int64_t epochs)
{
    int64_t full = epochs / world, n = full * steps_per_epoch;
    for (int64_t e = full * world; e < epochs; e++)
        n += sl_ps_worker_share(steps_per_epoch, world, w, e);
    return n;
}

typedef struct worker {
    sl_run *r;
    sl_replica *rep;
    sl_ps *ps;
    int64_t steps;            /* this epoch's share */
    double loss, correct, images;
    int rc;
    char msg[SL_ERRMSG_MAX];
    pthread_t thread;
} worker;

static int worker_epoch(worker *w)
{
    sl_run *r = w->r;
    sl_replica *rep = w->rep;
    int log = rep->idx == 0 && r->is_root;
    int64_t every = r->log_every / r->world > 0 ? r->log_every / r->world : 1;
    double wl = 0, wc = 0, wi = 0, t0 = sl_now_s();
    uint64_t v0 = 0;
    for (int64_t k = 0; k < w->steps; k++) {
        /* the batch first: the weights are pulled as late as possible */
        sl_batch *b;
        int rc = sl_pipeline_next(rep->p, &b);
        if (rc)
            return sl_fail(rc, "sl_train_run: worker %d: %s", rep->rank, sl_errmsg());
        uint64_t version;
        if ((rc = sl_ps_pull(w->ps, rep->rank, rep->m, &version))) {
            sl_pipeline_release(rep->p, b);
            return rc;
        }
        if (k == 0)
            v0 = version;
        float lr = (float)sl_schedule_lr(&r->sched, (int64_t)version), loss = 0;
        int correct = 0, n = (int)b->n;
        rc = sl_replica_grads(rep, b, &loss, &correct);
        sl_pipeline_release(rep->p, b);
        if (rc || (rc = sl_ps_push(w->ps, rep->rank, rep->m, version, lr)))
            return rc;
        w->loss += loss;
        w->correct += correct;
        w->images += n;
        wl += loss;
        wc += correct;
        wi += n;
        if (log && ((k + 1) % every == 0 || k + 1 == w->steps)) {
            sl_ps_stats st;
            sl_ps_stats_get(w->ps, &st, 0);
            double t = sl_now_s();
            double ips = (double)(version + 1 - v0) * r->local_batch / (t - t0);
            fprintf(r->out, "epoch %" PRId64 " step %" PRIu64 "/%" PRId64 " loss %.4f acc %.4f "
                    "%.0f img/s lr %.5f staleness mean %.2f max %" PRIu64 " (worker 0)\n",
                    (int64_t)version / r->steps_per_epoch + 1, version + 1, r->total_steps,
                    wl / (double)((k + 1) % every ? (k + 1) % every : every), wc / wi, ips, lr,
                    st.staleness_mean, st.staleness_max);
            fflush(r->out);
            wl = wc = wi = 0;
        }
    }
    return SL_OK;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    w->rc = worker_epoch(w);
    if (w->rc) {
        snprintf(w->msg, sizeof w->msg, "%s", sl_errmsg());
        sl_ps_abort(w->ps, w->msg); /* workers held by the staleness bound stop now */
    }
    return NULL;
}

/* One epoch: every worker its share, concurrently; joined at the end. */
static int run_epoch(sl_run *r, sl_ps *ps, worker *ws, int64_t epoch)
{
    int rc = SL_OK;
    for (int i = 0; i < r->nlocal; i++) {
        ws[i] = (worker){.r = r, .rep = &r->rep[i], .ps = ps,
                         .steps = sl_ps_worker_share(r->steps_per_epoch, r->world,
                                                     r->rep[i].rank, epoch)};
        if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
            rc = sl_fail(SL_ENOMEM, "sl_train_run: cannot start worker %d", i);
            for (int j = 0; j < i; j++)
                pthread_join(ws[j].thread, NULL);
            return rc;
        }
    }
    for (int i = 0; i < r->nlocal; i++)
        pthread_join(ws[i].thread, NULL);
    /* The root cause: the first failure that is not a timeout caused by
     * another worker having stopped. */
    int first = -1;
    for (int i = 0; i < r->nlocal; i++)
        if (ws[i].rc && (first < 0 || ((ws[first].rc == SL_ETIMEDOUT ||
                                        ws[first].rc == SL_ECANCELED) &&
                                       ws[i].rc != SL_ETIMEDOUT && ws[i].rc != SL_ECANCELED)))
            first = i;
    if (first >= 0)
        return sl_fail(ws[first].rc, "%s", ws[first].msg);
    return SL_OK;
}

/* Under mpirun, the workers' last epoch ends here: every worker but the
 * root makes sure its pushes are applied (a pull waits for them: read your
 * own writes) and tells the root, which then snapshots a state that holds
 * every worker's every push. */
#define TAG_FINISHED 7201

static int mpi_workers_finished(sl_run *r, sl_ps *ps)
{
    sl_replica *rep = &r->rep[0];
    float note = 1;
    int rc;
    if (!r->is_root) {
        uint64_t v;
        if ((rc = sl_ps_pull(ps, rep->rank, rep->m, &v)))
            return rc;
        return sl_comm_send(r->mpi, &note, 1, SL_DTYPE_F32, r->ps_ranks, TAG_FINISHED);
    }
    for (int k = 1; k < r->world; k++) {
        int from;
        if ((rc = sl_comm_recv(r->mpi, &note, 1, SL_DTYPE_F32, -1, TAG_FINISHED, r->timeout_ms,
                               &from, NULL, NULL)))
            return sl_fail(rc, "sl_train_run: waiting for the other ps workers to finish: %s",
                           sl_errmsg());
    }
    return SL_OK;
}

/* The engine's config for this run: server threads in process, or the
 * server ranks under mpirun. */
static sl_ps_config ps_config(const sl_run *r)
{
    const sl_train_config *c = r->cfg;
    sl_ps_config pc = SL_PS_CONFIG_INIT;
    pc.servers = r->mpi ? r->ps_ranks : c->ps_servers > 0 ? c->ps_servers : 1;
    pc.workers = r->world;
    pc.max_staleness = c->max_staleness;
    pc.sgd = c->sgd;
    pc.timeout_ms = r->timeout_ms;
    return pc;
}

/* Resume: the servers take the checkpoint's weights and momentum (rep 0
 * loaded them). Under mpirun only the root loads, and the other workers
 * wait for its word before their first pull, so none of them starts from
 * the servers' fresh initial weights. */
#define TAG_LOADED 7202

static int resume_servers(sl_run *r, sl_ps *ps)
{
    sl_replica *rep0 = &r->rep[0];
    float note = 1;
    int rc;
    if (!r->mpi)
        return sl_ps_load(ps, rep0->m, rep0->o);
    if (!r->is_root) {
        if ((rc = sl_comm_recv(r->mpi, &note, 1, SL_DTYPE_F32, r->ps_ranks, TAG_LOADED,
                               r->timeout_ms, NULL, NULL, NULL)))
            return sl_fail(rc, "sl_train_run: waiting for worker 0 to load the checkpoint "
                           "into the servers: %s", sl_errmsg());
        return SL_OK;
    }
    if ((rc = sl_ps_load(ps, rep0->m, rep0->o)))
        return rc;
    for (int w = 1; w < r->world; w++)
        if ((rc = sl_comm_send(r->mpi, &note, 1, SL_DTYPE_F32, r->ps_ranks + w, TAG_LOADED)))
            return rc;
    return SL_OK;
}

int sl_ps_train(sl_run *r)
{
    const sl_train_config *c = r->cfg;
    sl_replica *rep0 = &r->rep[0];
    sl_ps_config pc = ps_config(r);
    if (r->total_steps % r->steps_per_epoch)
        return sl_fail(SL_EINVAL, "sl_train_run: the ps strategy runs whole epochs (--max-steps "
                       "%" PRId64 " is not a multiple of the %" PRId64 " steps of an epoch)",
                       r->total_steps, r->steps_per_epoch);
    sl_ps *ps = NULL;
    worker *ws = calloc((size_t)r->nlocal, sizeof *ws);
    if (!ws)
        return sl_fail(SL_ENOMEM, "sl_train_run: workers");
    /* rep0 holds the initial (or resumed) weights and momentum */
    int rc = r->mpi ? sl_ps_create_mpi(&pc, r->mpi, r->ps_ranks, rep0->m, &ps)
                    : sl_ps_create(&pc, rep0->m, &ps);
    if (!rc && r->step0 > 0)
        rc = resume_servers(r, ps);
    double train_s = 0, images = 0, loss = 0, steps = 0;
    int64_t last = r->total_steps / r->steps_per_epoch;
    for (int64_t e = r->step0 / r->steps_per_epoch; !rc && e < last; e++) {
        double t0 = sl_now_s();
        if ((rc = run_epoch(r, ps, ws, e)))
            break;
        train_s += sl_now_s() - t0;
        double el = 0, ec = 0, ei = 0;
        for (int i = 0; i < r->nlocal; i++) {
            el += ws[i].loss;
            ec += ws[i].correct;
            ei += ws[i].images;
        }
        images += ei;
        /* the bad records the workers' pipelines skipped (each slot took the
         * next good record), counted and the first named at epoch ends: the
         * workers are joined (under mpirun: this process's worker only) */
        int64_t skipped = 0;
        for (int i = 0; i < r->nlocal && !rc; i++) {
            sl_pipeline_stats ps_st;
            if (!(rc = sl_pipeline_stats_get(r->rep[i].p, &ps_st))) {
                skipped += (int64_t)ps_st.bad_records_out;
                if (ps_st.bad_records && !r->res->skipped_first[0])
                    snprintf(r->res->skipped_first, sizeof r->res->skipped_first, "%s",
                             ps_st.bad[0]);
            }
        }
        if (rc)
            break;
        r->res->skipped = skipped;
        steps = (double)(e + 1) * (double)r->steps_per_epoch;
        int64_t step = (int64_t)steps;
        sl_ps_stats st;
        sl_ps_stats_get(ps, &st, 0);
        r->res->staleness_mean = st.staleness_mean;
        r->res->staleness_max = (int64_t)st.staleness_max;
        r->res->steps = step;
        if (r->mpi && e + 1 == last && (rc = mpi_workers_finished(r, ps)))
            break;
        if (!r->is_root)
            continue;
        /* In process the snapshot is a consistent cut (every push applied);
         * under mpirun the other workers go on meanwhile, except at the end. */
        if ((rc = sl_ps_snapshot(ps, rep0->m, rep0->o)))
            break;
        loss = el / (double)(ei / r->local_batch);
        fprintf(r->out, "epoch %" PRId64 " done: %" PRId64 " updates from %d workers, loss %.4f "
                "acc %.4f%s, staleness mean %.2f max %" PRIu64 ", %" PRIu64 " bounded waits",
                e + 1, r->steps_per_epoch, r->world, loss, ec / ei,
                r->mpi ? " (worker 0's share)" : "", st.staleness_mean, st.staleness_max,
                st.ssp_waits);
        if (skipped > 0)
            fprintf(r->out, ", skipped %" PRId64 "%s (the first: %s)", skipped,
                    r->mpi ? " (worker 0's)" : "", r->res->skipped_first);
        fputc('\n', r->out);
        fflush(r->out);
        r->res->final_loss = loss;
        r->res->epochs_done = e + 1;
        if (r->sum) {
            const char *tags[] = {"train/loss", "train/accuracy", "ps/staleness_mean",
                                  "ps/staleness_max"};
            double v[] = {loss, ec / ei, st.staleness_mean, (double)st.staleness_max};
            if ((rc = sl_summary_scalars(r->sum, step, tags, v, 4, NULL)))
                break;
        }
        if ((rc = sl_run_log_tuning(r, rep0, step)))
            break;
        if ((rc = sl_run_evaluate(r, rep0, step)))
            break;
        if (c->ckpt_dir && (rc = sl_run_save_checkpoint(r, rep0, step)))
            break;
    }
    r->res->images_per_sec = train_s > 0 ? images * (r->mpi ? r->world : 1) / train_s : 0;
    if (rc && r->mpi)
        sl_ps_abort(ps, sl_errmsg());
    sl_ps_destroy(ps);
    free(ws);
    return rc;
}

/* A server rank under mpirun: hold its shards until every worker is done. */
int sl_ps_serve_rank(sl_run *r)
{
    sl_ps_config pc = ps_config(r);
    sl_model_config mc = r->cfg->model;
    mc.classes = r->classes;
    sl_model *tmpl = NULL;
    int rc = sl_model_create(&mc, 1, r->data.height, r->data.width, &tmpl);
    sl_ps_stats st = {0};
    if (!rc)
        rc = sl_ps_serve(&pc, r->mpi, r->ps_ranks, tmpl, &st);
    if (!rc)
        fprintf(r->out, "ps server rank %d: %" PRIu64 " updates, staleness mean %.2f max "
                "%" PRIu64 "\n", sl_comm_rank(r->mpi), st.shard_updates, st.staleness_mean,
                st.staleness_max);
    sl_model_destroy(tmpl);
    return rc;
}

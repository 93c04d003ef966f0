/*
 * train/loop/strategy_mirrored.c - the single and mirrored strategies:
 * the replicas' threads (sl_mirrored_train) and one replica's step loop:
 * batch in, SGD step, and at the step's end the progress line, the
 * epoch's evaluation, checkpoints (services.c) and the identical-weights
 * check; its timing and logging are a meter's.
 *
 * Steps and epochs. The pipelines run forever (their fused shuffle-repeat
 * keeps the buffer full across epoch boundaries), and the loop counts: an
 * epoch is ceil(records / global batch) steps, the run is epochs x that
 * many steps or --max-steps (run.c works them out). Evaluation and (by
 * default) a checkpoint follow every epoch's last step.
 *
 * Timing. Warm-up steps (the first tenth) stay out of the steady figures:
 * cuDNN's algorithm choices, first touches, the pipeline filling. On a
 * device the host runs ahead of the GPU (by up to the launch queue), so a
 * step's host time is not its GPU time: every wait for the device (the
 * sums taken at a log line, the sync before a pause, the tail) counts as
 * step time, and the steady window opens with the device idle, so no
 * warm-up work spills into it. Evaluation and checkpoints stay out of
 * images/s.
 *
 * Skipped records. A bad record (on_error skip) gives its slot to the
 * next good one; each replica names those its pipeline met on the progress
 * stream at the next log line, and the line counts them over all replicas
 * ("skipped N", also train/skipped_records and the result's skipped):
 * none is dropped silently.
 *
 * Threading: every replica runs sl_run_steps on its own thread (replica 0
 * on the caller's, sl_mirrored_train), in lockstep: the same steps and
 * collectives.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "train/loop/trainer_int.h"

/* The progress window since the last log line (wait and busy: the run's
 * all-reduce wait and step time, summed at log lines). */
typedef struct window {
    double loss, correct, images, steps, wait, busy;
} window;

/* One replica's figures: the progress window, the epoch's loss, the run's
 * time and images. */
typedef struct meter {
    window w;
    double win_t;                        /* when the window opened */
    double ep_loss;                      /* the epoch's loss sum */
    int64_t ep_steps;
    double train_s, steady_s, in_wait_s; /* step time; after warm-up; waiting for input */
    int64_t images, steady_images;
    int64_t warm;                        /* steps left out of the steady figures */
} meter;

static void meter_start(meter *mt, const sl_run *r)
{
    int64_t left = r->total_steps - r->step0;
    *mt = (meter){.win_t = sl_now_s(), .warm = left >= 10 ? left / 10 : (left > 1)};
}

/* Step k of this run (0: its first) took dt seconds, tin of them waiting
 * for its batch of n images; its loss and correct count (0 when the device
 * keeps them: meter_take). */
static void meter_step(meter *mt, int64_t k, double dt, double tin, int n, float loss,
                       int correct)
{
    mt->train_s += dt;
    if (k >= mt->warm) {
        mt->steady_s += dt;
        mt->in_wait_s += tin;
        mt->steady_images += n;
    }
    mt->images += n;
    mt->w.loss += loss;
    mt->w.correct += correct;
    mt->w.images += n;
    mt->w.steps++;
    mt->ep_loss += loss;
    mt->ep_steps++;
}

/* The loss and correct sums the device kept since the last log line. */
static void meter_take(meter *mt, const double d[2])
{
    mt->w.loss += d[0], mt->w.correct += d[1], mt->ep_loss += d[0];
}

/* Time waiting for the device after step k (the log line's sums, the
 * sync before a pause): step time. */
static void meter_wait(meter *mt, int64_t k, double dt)
{
    mt->train_s += dt;
    if (k >= mt->warm)
        mt->steady_s += dt;
}

/* The bad records rep's pipeline met since the last log line, each named
 * once on the progress stream (of the first SL_PIPELINE_MAX_BAD_REPORT the
 * pipeline keeps, those not named in an earlier epoch; after them, once,
 * that the rest are only counted). Every
 * replica names its own (one fprintf a line: lines stay whole); the root's
 * first goes into the result. *count: those in the batches it trained on
 * so far (not the batches decoded ahead). */
static int name_skipped(sl_run *r, sl_replica *rep, uint64_t *count)
{
    sl_pipeline_stats st;
    int rc = sl_pipeline_stats_get(rep->p, &st);
    if (rc)
        return rc;
    *count = st.bad_records_out;
    uint64_t kept = st.bad_records < SL_PIPELINE_MAX_BAD_REPORT ? st.bad_records
                                                                 : SL_PIPELINE_MAX_BAD_REPORT;
    for (uint64_t i = rep->bad_named; i < kept; i++) {
        int again = 0; /* met in an earlier epoch (or refill), named then */
        for (uint64_t k = 0; k < i && !again; k++)
            again = !strcmp(st.bad[k], st.bad[i]);
        if (!again)
            fprintf(r->out, "train: replica %d skipped a bad record (the next good one took "
                    "its place): %s\n", rep->rank, st.bad[i]);
    }
    if (rep->bad_named <= SL_PIPELINE_MAX_BAD_REPORT && st.bad_records > kept)
        fprintf(r->out, "train: replica %d: more than %d bad records: the rest are counted "
                "(\"skipped\" on the progress lines), not named\n", rep->rank,
                SL_PIPELINE_MAX_BAD_REPORT);
    if (st.bad_records > rep->bad_named)
        fflush(r->out);
    /* kept named; one more: the note said the rest are only counted */
    rep->bad_named = st.bad_records > kept ? SL_PIPELINE_MAX_BAD_REPORT + 1 : kept;
    if (rep->idx == 0 && r->is_root && st.bad_records && !r->res->skipped_first[0])
        snprintf(r->res->skipped_first, sizeof r->res->skipped_first, "%s", st.bad[0]);
    return SL_OK;
}

/* The progress line of `step` (root) and its summary scalars: the window
 * summed over the replicas (a collective: every replica calls it), with
 * the bad records skipped so far (named by name_skipped first). */
static int log_progress(sl_run *r, sl_replica *rep, meter *mt, int64_t step, float lr)
{
    window *w = &mt->w;
    uint64_t bad = 0;
    int rc = name_skipped(r, rep, &bad);
    if (rc)
        goto out;
    /* counts in f32: exact below 2^24, as the window's images */
    float v[7] = {(float)w->loss, (float)w->correct, (float)w->images, (float)w->steps,
                  (float)rep->comm_wait_s, (float)rep->step_s, (float)bad};
    if ((rc = sl_replica_sum(rep, v, 7)))
        goto out;
    rep->comm_wait_s = rep->step_s = 0;
    w->wait += v[4];
    w->busy += v[5];
    *w = (window){.wait = w->wait, .busy = w->busy};
    if (!(rep->idx == 0 && r->is_root))
        goto out;
    double t = sl_now_s(), ips = v[2] / (t - mt->win_t);
    double mloss = v[0] / v[3], acc = v[1] / v[2];
    r->res->skipped = (int64_t)v[6];
    fprintf(r->out, "epoch %" PRId64 " step %" PRId64 "/%" PRId64 " loss %.4f acc %.4f "
            "%.0f img/s lr %.5f", (step - 1) / r->steps_per_epoch + 1, step, r->total_steps,
            mloss, acc, ips, lr);
    if (r->res->skipped > 0)
        fprintf(r->out, " skipped %" PRId64, r->res->skipped);
    if (r->world > 1)
        fprintf(r->out, " allreduce-wait %.1f%%", v[5] > 0 ? 100.0 * v[4] / v[5] : 0.0);
    fputc('\n', r->out);
    fflush(r->out);
    if (r->sum) {
        const char *tags[] = {"train/loss", "train/accuracy", "train/lr", "train/images_per_sec",
                              "train/skipped_records", "train/allreduce_wait"};
        double vals[] = {mloss, acc, lr, ips, (double)r->res->skipped,
                         v[5] > 0 ? v[4] / v[5] : 0.0};
        if ((rc = sl_summary_scalars(r->sum, step, tags, vals, r->world > 1 ? 6 : 5, NULL)))
            goto out;
    }
    if ((rc = sl_run_log_tuning(r, rep, step)))
        goto out;
    mt->win_t = t;
out:
    return rc;
}

/* The run's figures into r->res (root): throughput, steady throughput,
 * input and all-reduce wait, and what the device says of itself. */
static int meter_report(sl_run *r, sl_replica *rep, const meter *mt)
{
    sl_train_result *res = r->res;
    float scale = 1.0f;
    sl_mem_info mi;
    int rc = SL_OK;
    res->steps = r->stopped ? r->stopped : r->total_steps;
    res->stopped = r->stopped;
    res->images_per_sec = mt->train_s > 0 ? (double)mt->images * r->world / mt->train_s : 0;
    res->images_per_sec_steady = mt->steady_s > 0
                                     ? (double)mt->steady_images * r->world / mt->steady_s
                                     : res->images_per_sec;
    res->input_wait_frac = mt->steady_s > 0 ? mt->in_wait_s / mt->steady_s : 0;
    res->comm_wait_frac = mt->w.busy > 0 ? mt->w.wait / mt->w.busy : 0;
    if (rep->dsgd && (rc = sl_dev_sgd_skipped(rep->dsgd, &res->amp_skipped, &scale)))
        goto out;
    res->amp_scale = scale;
    if ((rc = sl_mem_usage(&rep->e, &mi)))
        goto out;
    res->peak_device_mib = mi.peak / 1048576.0;
    res->device_used_mib = mi.device_used / 1048576.0;
    sl_replica_graph_report(rep, res);
out:
    return rc;
}

/* cfg->stop as every replica sees it after `step`: each step with one
 * replica; with more, every SL_TRAIN_STOP_EVERY steps and summed over
 * them, so that all stop at the same step (one stopping alone would leave
 * the others waiting in their next all-reduce). */
static int stop_asked(sl_run *r, sl_replica *rep, int64_t step, int *stop)
{
    *stop = 0;
    if (!r->cfg->stop || step >= r->total_steps)
        return SL_OK;
    if (r->world == 1) {
        *stop = *r->cfg->stop != 0;
        return SL_OK;
    }
    if (step % SL_TRAIN_STOP_EVERY)
        return SL_OK;
    float v = *r->cfg->stop != 0;
    int rc = sl_replica_sum(rep, &v, 1);
    *stop = v > 0;
    return rc;
}

/* What follows `step` (counted): the log line, the epoch's end
 * (evaluation), a checkpoint, the identical-weights check; with stop (a
 * stop request every replica agreed on), the log line and a checkpoint of
 * this step, in ckpt_dir or else the rescue folder. */
static int after_step(sl_run *r, sl_replica *rep, meter *mt, int64_t step, float lr, int stop)
{
    const sl_train_config *cfg = r->cfg;
    int root = rep->idx == 0 && r->is_root, rc = SL_OK;
    int epoch_end = step % r->steps_per_epoch == 0 || step == r->total_steps;
    int ckpt = stop || (cfg->ckpt_dir && ((cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0) ||
                                          (cfg->ckpt_every <= 0 && epoch_end) ||
                                          step == r->total_steps));
    int check = cfg->check_every > 0 && step % cfg->check_every == 0;
    int logline = step % r->log_every == 0 || epoch_end || stop;
    double tw = sl_now_s();
    if (logline) {
        double d[2]; /* the sums kept on the device since the last log */
        if ((rc = sl_replica_take(rep, d)))
            goto out;
        meter_take(mt, d);
    }
    /* what follows (eval, checkpoint, check) is not step time: the
     * device finishes the steps first */
    if ((epoch_end || ckpt || check) && (rc = sl_mem_sync(&rep->e)))
        goto out;
    meter_wait(mt, step - 1 - r->step0, sl_now_s() - tw);
    if (logline && (rc = log_progress(r, rep, mt, step, lr)))
        goto out;
    double pause0 = sl_now_s();
    if (epoch_end || ckpt)
        if ((rc = sl_replica_sync_buffers(rep)))
            goto out;
    if (epoch_end) {
        float el[2] = {(float)mt->ep_loss, (float)mt->ep_steps};
        if ((rc = sl_replica_sum(rep, el, 2)))
            goto out;
        if (root) {
            r->res->final_loss = el[0] / el[1];
            r->res->epochs_done = step / r->steps_per_epoch;
        }
        mt->ep_loss = 0;
        mt->ep_steps = 0;
        if ((rc = sl_run_evaluate(r, rep, step)))
            goto out;
    }
    if (ckpt && root &&
        (rc = stop ? sl_run_save_stop(r, rep, step) : sl_run_save_checkpoint(r, rep, step)))
        goto out;
    if (check && (rc = sl_replica_check_identical(rep, step)))
        goto out;
    mt->win_t += sl_now_s() - pause0; /* eval and checkpoint time stay out of images/s */
out:
    return rc;
}

int sl_run_steps(sl_replica *rep)
{
    sl_run *r = rep->run;
    const sl_train_config *cfg = r->cfg;
    int root = rep->idx == 0 && r->is_root, rc = SL_OK;
    meter mt;
    sl_batch *held = NULL; /* --synthetic: the one batch */
    meter_start(&mt, r);
    for (int64_t step = r->step0; step < r->total_steps;) {
        sl_batch *b = held;
        double ts = sl_now_s();
        if (step - r->step0 == mt.warm && mt.warm > 0) {
            if ((rc = sl_mem_sync(&rep->e)))
                goto out_held;
            mt.train_s += sl_now_s() - ts;
            ts = sl_now_s();
        }
        if (!b && (rc = sl_pipeline_next(rep->p, &b))) {
            rc = sl_fail(rc, "sl_train_run: replica %d: %s", rep->rank, sl_errmsg());
            goto out_held;
        }
        double tin = sl_now_s() - ts;
        float lr = (float)sl_schedule_lr(&r->sched, step), loss = 0;
        int correct = 0, n = (int)b->n;
        rc = sl_replica_step(rep, b, lr, &loss, &correct);
        if (cfg->synthetic && !rc) {
            held = b;
        } else {
            sl_pipeline_release(rep->p, b); /* b may be held: it is gone now */
            held = NULL;
        }
        if (rc)
            goto out_held;
        meter_step(&mt, step - r->step0, sl_now_s() - ts, tin, n, loss, correct);
        step++;
        if (root) { /* what a checkpoint on error saves (sl_ckpt_rescue) */
            r->done_step = step;
            if ((rc = sl_pipeline_state_save(rep->p, r->done_state, sizeof r->done_state, NULL)))
                goto out_held;
        }
        int stop;
        if ((rc = stop_asked(r, rep, step, &stop)) ||
            (rc = after_step(r, rep, &mt, step, lr, stop)))
            goto out_held;
        if (stop) {
            if (rep->idx == 0)
                r->stopped = step;
            break;
        }
    }
    /* a device is up to one step behind the host: count its tail */
    double tsync = sl_now_s();
    if ((rc = sl_mem_sync(&rep->e)))
        goto out_held;
    mt.train_s += sl_now_s() - tsync;
    mt.steady_s += sl_now_s() - tsync;
    if (root)
        rc = meter_report(r, rep, &mt);
out_held:
    if (held) /* --synthetic: the batch every step reused */
        sl_pipeline_release(rep->p, held);
    return rc;
}

/* Replica rep's loop; when the root's fails, a rescue checkpoint of its
 * last completed step (services.c), kept in r->rescue for the final
 * message. */
static int replica_loop(sl_replica *rep)
{
    sl_run *r = rep->run;
    int rc = sl_run_steps(rep);
    if (rc && rep->idx == 0 && r->is_root)
        sl_run_rescue(r, rep);
    return rc;
}

static void *replica_thread(void *arg)
{
    sl_replica *rep = arg;
    rep->rc = replica_loop(rep);
    if (rep->rc) {
        snprintf(rep->msg, sizeof rep->msg, "%s", sl_errmsg());
        sl_comm_abort(rep->comm, rep->msg);
    }
    return NULL;
}

/* The mirrored (and single) strategy over the set-up run: replica 0 on the
 * calling thread, the others on their own, each through sl_run_steps; the
 * first replica that failed for its own reason gives the error. */
int sl_mirrored_train(sl_run *r)
{
    int rc = SL_OK;
    for (int i = 1; i < r->nlocal && !rc; i++) {
        if (pthread_create(&r->rep[i].thread, NULL, replica_thread, &r->rep[i]))
            rc = sl_fail(SL_ENOMEM, "sl_train_run: cannot start replica thread %d", i);
        else
            r->rep[i].thread_started = 1;
    }
    if (!rc) {
        rc = replica_loop(&r->rep[0]);
        if (rc) {
            snprintf(r->rep[0].msg, sizeof r->rep[0].msg, "%s", sl_errmsg());
            sl_comm_abort(r->rep[0].comm, r->rep[0].msg);
        }
    } else {
        for (int i = 0; i < r->nlocal; i++)
            sl_comm_abort(r->rep[i].comm, "a replica thread could not start");
    }
    r->rep[0].rc = rc;
    for (int i = 1; i < r->nlocal; i++)
        if (r->rep[i].thread_started)
            pthread_join(r->rep[i].thread, NULL);
    /* The root cause: the first replica that failed for its own reason, not
     * because a peer aborted. */
    int first = -1;
    for (int i = 0; i < r->nlocal; i++)
        if (r->rep[i].rc && (first < 0 || (r->rep[first].rc == SL_ECANCELED &&
                                           r->rep[i].rc != SL_ECANCELED)))
            first = i;
    if (first >= 0) {
        rc = sl_fail(r->rep[first].rc, "%s", r->rep[first].msg);
    }
    return rc;
}

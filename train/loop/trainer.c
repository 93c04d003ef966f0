/*
 * train/loop/trainer.c - the training loop: pipeline batches in, SGD steps out,
 * with progress lines, TensorBoard scalars, per-epoch evaluation and
 * checkpoints that resume exactly, on one replica or many (trainer_int.h).
 *
 * Steps and epochs. The pipelines run forever (their fused shuffle-repeat
 * keeps the buffer full across epoch boundaries), and the trainer counts:
 * an epoch is ceil(records / global batch) steps, the run is epochs x that
 * many steps or --max-steps. Evaluation and (by default) a checkpoint
 * follow every epoch's last step.
 *
 * Replicas (the mirrored strategy). Each replica has its own pipeline
 * (rank r of world W, batch = global batch / W), model and optimizer. With
 * --shuffle global or none the ranks split the records (pipeline.h's
 * SL_SPLIT_RECORDS): the union of the W replicas' k-th batches is then the
 * k-th batch that one replica with the whole global batch would get, so a
 * run's data does not depend on W (and with --sync-bn neither does its
 * arithmetic, up to float summation order). With --shuffle buffer they split
 * the shards, each shuffling its own.
 *
 * Exact resume. A checkpoint holds the weights, the BN buffers and the
 * momentum buffers bit for bit, the step and the global batch; the
 * schedule is a pure function of the step. World 1 resumes its pipeline
 * from the saved state; otherwise each replica's pipeline is rebuilt at
 * sample step * local batch (sl_pipeline_create_at), which is the same
 * data as the saved run's when the records are split (any W) or when W is
 * unchanged. The one copy of the weights in a checkpoint is replica 0's
 * (all replicas hold the same ones), so a run saved with N replicas
 * resumes with M.
 *
 * Threading: replica 0 runs on the calling thread, replicas 1.. on their
 * own; each replica's pipeline threads prepare its next batches meanwhile.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "records/records.h"
#include "common/fileio.h" /* sl_mkdir_p, sl_str_cat */
#include "common/json.h"
#include "train/loop/trainer_int.h"

const char *sl_strategy_name(sl_strategy s)
{
    switch (s) {
    case SL_STRATEGY_SINGLE: return "single";
    case SL_STRATEGY_MIRRORED: return "mirrored";
    case SL_STRATEGY_PS: return "ps";
    }
    return "?";
}

int sl_strategy_parse(const char *name, sl_strategy *out)
{
    for (int s = SL_STRATEGY_SINGLE; s <= SL_STRATEGY_PS; s++)
        if (name && strcmp(name, sl_strategy_name((sl_strategy)s)) == 0) {
            *out = (sl_strategy)s;
            return SL_OK;
        }
    return sl_fail(SL_EINVAL, "sl_strategy_parse: '%s': expected single, mirrored or ps",
                   name ? name : "(null)");
}

sl_dtype sl_train_precision(const sl_train_config *c)
{
    if (c->precision >= 0)
        return (sl_dtype)c->precision;
    return c->backend == SL_BACKEND_CUDA ? SL_DTYPE_BF16 : SL_DTYPE_F32;
}

const char *sl_precision_name(sl_dtype t)
{
    switch (t) {
    case SL_DTYPE_F32: return "fp32";
    case SL_DTYPE_BF16: return "bf16";
    case SL_DTYPE_F16: return "fp16";
    }
    return "?";
}

int sl_precision_parse(const char *name, sl_dtype *out)
{
    /* common/dtype.h's vocabulary, with the CLI's message */
    if (sl_dtype_parse(name, out))
        return sl_fail(SL_EINVAL, "unknown precision '%s' (want bf16, fp16 or fp32)",
                       name ? name : "(null)");
    return SL_OK;
}

void sl_train_config_init(sl_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->data = (sl_pipeline_config)SL_PIPELINE_CONFIG_INIT;
    c->data.layout = SL_LAYOUT_NHWC_F32;
    c->data.epochs = 0;
    c->eval_split = SL_EVAL_SPLIT_AUTO;
    c->model = (sl_model_config)SL_MODEL_CONFIG_INIT;
    c->model.classes = 0; /* from dataset.json */
    c->sgd = (sl_sgd_config)SL_SGD_CONFIG_INIT;
    c->backend = SL_BACKEND_CPU;
    c->precision = -1; /* bf16 on cuda, f32 elsewhere */
    c->epochs = 1;
    c->base_lr = 0.1;
    c->schedule = SL_SCHED_COSINE;
    c->strategy = SL_STRATEGY_SINGLE;
    c->bucket_mb = 25.0;
    c->max_staleness = -1;
}

/* Say once that shards of split s have no index file (readers scan them). */
static void note_unindexed(sl_run *r, const sl_dataset_split *s)
{
    if (r->is_root && s && s->unindexed)
        fprintf(r->out, "train: note: %zu of %zu shards of %s have no index file (.idx): each "
                "is scanned when opened; sluice index DIR writes them\n", s->unindexed,
                s->nfiles, s->name);
}

/* The data, checked before the first step: the train split exists, the
 * classes (dataset.json's when the config leaves them at 0), the eval split
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
        if (!ds.has_manifest || ds.manifest.num_classes < 1) {
            rc = sl_fail(SL_EINVAL, "sl_train_run: %s: the number of classes comes from %s/%s, "
                         "which %s: give it (--classes K; TensorFlow's ImageNet shards: "
                         "--classes 1000 --label-offset 1)", r->data.data, ds.dir,
                         SL_MANIFEST_FILE, ds.has_manifest ? "says 0" : "is not there");
            goto out;
        }
        r->classes = (int)ds.manifest.num_classes;
    }
    if (want && *want) {
        if (ds.kind == SL_DATASET_GLOB || ds.kind == SL_DATASET_FILE) {
            if ((rc = sl_dataset_resolve(ds.dir, NULL, &eds))) {
                if (!autopick) {
                    rc = sl_fail(rc, "sl_train_run: --eval-split %s: %s", want, sl_errmsg());
                    goto out;
                }
                sl_clear_error(); /* a folder of odd files: nothing to evaluate */
                rc = SL_OK;
                sl_dataset_fini(&eds);
            }
            where = &eds;
        }
        name = autopick ? (where->nsplits ? sl_dataset_eval_split(where) : NULL) : want;
        if (name && (rc = sl_dataset_reader_split(where, name, &ev))) {
            rc = sl_fail(rc, "sl_train_run: --eval-split %s: %s", name, sl_errmsg());
            goto out;
        }
    }
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

/* ------------------------------------------------------------ checkpoints */

/* The state JSON stored in a checkpoint (replica 0's pipeline state too:
 * world 1 resumes from it exactly, with its config checked). */
static char *state_json(sl_run *r, sl_replica *rep, int64_t step, const char *saved)
{
    char ps[SL_PIPELINE_STATE_MAX];
    size_t plen = 0;
    if (saved)
        snprintf(ps, sizeof ps, "%s", saved);
    else if (sl_pipeline_state_save(rep->p, ps, sizeof ps, &plen))
        return NULL;
    cJSON *j = cJSON_CreateObject();
    char *s = NULL;
    if (!j)
        return NULL;
    /* integers as exact text (common/json.h): resume reads them back checked */
    if (sl_json_add_int(j, "step", step) &&
        sl_json_add_int(j, "epoch", step / r->steps_per_epoch) &&
        sl_json_add_int(j, "steps_per_epoch", r->steps_per_epoch) &&
        sl_json_add_int(j, "total_steps", r->total_steps) &&
        cJSON_AddStringToObject(j, "schedule", sl_sched_name(r->sched.kind)) &&
        cJSON_AddNumberToObject(j, "peak_lr", r->sched.peak_lr) &&
        sl_json_add_int(j, "warmup_steps", r->sched.warmup_steps) &&
        sl_json_add_int(j, "batch", r->data.batch) &&
        sl_json_add_int(j, "world", r->world) &&
        cJSON_AddStringToObject(j, "strategy", sl_strategy_name(r->cfg->strategy)) &&
        cJSON_AddStringToObject(j, "rank_split",
                                rep->data.rank_split == SL_SPLIT_RECORDS ? "records" : "files") &&
        cJSON_AddStringToObject(j, "model", sl_arch_name(r->cfg->model.arch)) &&
        cJSON_AddStringToObject(j, "pipeline", ps))
        s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* Save rep's state as the checkpoint of `step` in dir, with the pipeline
 * state `ps` (NULL: the pipeline's state now). */
static int save_checkpoint(sl_run *r, sl_replica *rep, const char *dir, int64_t step,
                           const char *ps)
{
    char prefix[sizeof r->res->checkpoint];
    if (snprintf(prefix, sizeof prefix, "%s/ckpt-%09" PRId64, dir, step) >= (int)sizeof prefix)
        return sl_fail(SL_EINVAL, "sl_train_run: checkpoint path too long");
    int rc;
    /* on a device: the state dict's host copies first */
    if ((rc = sl_model_pull(rep->m)) || (rep->dsgd && (rc = sl_dev_sgd_pull(rep->dsgd))))
        return rc;
    char *st = state_json(r, rep, step, ps);
    if (!st)
        return sl_fail(SL_ENOMEM, "sl_train_run: checkpoint state: %s", sl_errmsg());
    rc = sl_checkpoint_save(prefix, rep->m, rep->o, rep->data.height, st);
    free(st);
    if (rc)
        return rc;
    memcpy(r->res->checkpoint, prefix, sizeof prefix);
    r->saved_step = step;
    return SL_OK;
}

int sl_run_save_checkpoint(sl_run *r, sl_replica *rep, int64_t step)
{
    if (!r->cfg->ckpt_dir)
        return SL_OK;
    return save_checkpoint(r, rep, r->cfg->ckpt_dir, step, NULL);
}

/* Where a checkpoint goes when an error stops the run and --ckpt-dir was
 * not given: the weights of hours of steps are worth a folder the user did
 * not ask for. */
#define RESCUE_DIR "sluice-rescue"

/* The root replica's loop failed with rc (its message in sl_errmsg()):
 * save the last completed step, unless it is saved already, and keep where
 * in r->rescue for the final message. The weights and momentum buffers are
 * the last completed step's (they change only in its last phase, the SGD
 * update); the pipeline state is the one noted after that step; BN running
 * statistics are this replica's own (averaging them over replicas is a
 * collective, which a failed run cannot do) and include the forward of a
 * step that failed in its backward. sl_errmsg() is left as it was. */
static void rescue_checkpoint(sl_run *r, sl_replica *rep)
{
    char msg[SL_ERRMSG_MAX];
    int64_t step = r->done_step;
    if (step <= r->step0)
        return; /* no step of this run completed: nothing new to keep */
    snprintf(msg, sizeof msg, "%s", sl_errmsg());
    const char *dir = r->cfg->ckpt_dir ? r->cfg->ckpt_dir : RESCUE_DIR;
    int rc = SL_OK;
    if (r->saved_step != step &&
        (rc = sl_mkdir_p(dir, "sl_train_run")) == SL_OK)
        rc = save_checkpoint(r, rep, dir, step, r->done_state);
    if (rc)
        snprintf(r->rescue, sizeof r->rescue, "saving step %" PRId64 " failed too: %.1000s",
                 step, sl_errmsg());
    else
        snprintf(r->rescue, sizeof r->rescue, "the last completed step, %" PRId64 ", is "
                 "saved in %.3000s.safetensors: continue with --ckpt-dir %.1000s --resume",
                 step, r->res->checkpoint, dir);
    fprintf(r->out, "train: stopped by an error after step %" PRId64 "; %s\n", step, r->rescue);
    fflush(r->out);
    sl_fail(SL_EINVAL, "%s", msg); /* the original message back (the code is the caller's) */
}

/* ----------------------------------------------------------------- resume */

/* Steps are written as JSON numbers (doubles: exact to 2^53); batch sizes
 * are unsigned; replica counts are ints. */
#define RESUME_STEP_MAX SL_JSON_INT_MAX

void sl_resume_info_fini(sl_resume_info *ri)
{
    if (!ri)
        return;
    free(ri->pipeline);
    memset(ri, 0, sizeof *ri);
}

/* The checks of sl_resume_info_read on the parsed state j of file. */
static int resume_info_parse(const cJSON *j, const char *file, sl_resume_info *ri)
{
    static const char fn[] = "sl_train_run";
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "pipeline");
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(j, "rank_split");
    int rc;
    if (!cJSON_IsObject(j))
        return sl_fail(SL_ECORRUPT, "%s: %s: state is not a JSON object", fn, file);
    if (!cJSON_GetObjectItemCaseSensitive(j, "step") || !cJSON_IsString(ps))
        return sl_fail(SL_ECORRUPT, "%s: %s: state lacks step or pipeline", fn, file);
    if ((rc = sl_json_get_int(j, "step", 1, 0, RESUME_STEP_MAX, &ri->step, fn, file)) ||
        (rc = sl_json_get_int(j, "steps_per_epoch", 0, 1, RESUME_STEP_MAX, &ri->steps_per_epoch,
                              fn, file)) ||
        (rc = sl_json_get_int(j, "world", 0, 1, INT_MAX, &ri->world, fn, file)) ||
        (rc = sl_json_get_int(j, "batch", 0, 1, UINT_MAX, &ri->batch, fn, file)))
        return rc;
    if (split && !cJSON_IsString(split))
        return sl_fail(SL_ECORRUPT, "%s: %s: rank_split: not a string", fn, file);
    ri->split_records = split && strcmp(split->valuestring, "records") == 0;
    if (!(ri->pipeline = strdup(ps->valuestring)))
        return sl_fail(SL_ENOMEM, "%s: %s: resume state", fn, file);
    return SL_OK;
}

int sl_resume_info_read(const char *prefix, sl_resume_info *ri)
{
    char *st = NULL, *file = NULL;
    cJSON *j = NULL;
    memset(ri, 0, sizeof *ri);
    ri->world = 1; /* checkpoints from before replicas */
    int rc = sl_checkpoint_read_state(prefix, &st);
    if (rc)
        goto out;
    if (!(file = sl_str_cat(prefix, ".json"))) {
        rc = sl_fail(SL_ENOMEM, "sl_train_run: %s.json: out of memory", prefix);
        goto out;
    }
    j = cJSON_Parse(st);
    rc = resume_info_parse(j, file, ri);
out:
    if (rc)
        sl_resume_info_fini(ri);
    cJSON_Delete(j);
    free(file);
    free(st);
    return rc;
}

/* Read the newest checkpoint's state: step, and how the pipelines restart.
 * *state gets world 1's saved pipeline state when it can be used as is. */
static int resume_plan(sl_run *r, char **state)
{
    sl_resume_info ri = {0};
    *state = NULL;
    int rc = sl_checkpoint_latest(r->cfg->ckpt_dir, &r->resume_prefix);
    if (rc == SL_ENOENT) {
        if (r->is_root)
            fprintf(r->out, "resume: no checkpoint in %s, starting from scratch\n",
                    r->cfg->ckpt_dir);
        sl_clear_error();
        return SL_OK;
    }
    if (rc || (rc = sl_resume_info_read(r->resume_prefix, &ri)))
        return rc;
    int saved_world = (int)ri.world;
    if (ri.batch && (unsigned)ri.batch != r->data.batch) {
        rc = sl_fail(SL_EINVAL, "sl_train_run: resume from %s: it was trained with global batch "
                     "%u, this run has %u (give the same --batch)", r->resume_prefix,
                     (unsigned)ri.batch, r->data.batch);
        goto out;
    }
    /* The samples taken before the step, per replica (step x local batch),
     * must be a count: at most step x global batch. */
    if (ri.step > INT64_MAX / (int64_t)r->data.batch) {
        rc = sl_fail(SL_ECORRUPT, "sl_train_run: %s.json: step: %" PRId64 " steps of batch %u "
                     "are more samples than 2^63", r->resume_prefix, ri.step, r->data.batch);
        goto out;
    }
    r->step0 = ri.step;
    r->saved_steps_per_epoch = ri.steps_per_epoch;
    int split_records = r->rep[0].data.rank_split == SL_SPLIT_RECORDS ||
                        (r->world == 1 && ri.split_records);
    if (saved_world == 1 && r->world == 1) {
        *state = ri.pipeline;
        ri.pipeline = NULL;
        r->resume_exact = 1;
    } else {
        r->resume_exact = saved_world == r->world || split_records;
    }
    if (r->is_root) {
        fprintf(r->out, "resume: %s (step %" PRId64 ", saved with %d replica%s, resuming with "
                "%d)\n", r->resume_prefix, r->step0, saved_world, saved_world == 1 ? "" : "s",
                r->world);
        if (!r->resume_exact)
            fprintf(r->out, "resume: warning: the replicas split the shards (--shuffle buffer) "
                    "and their number changed: the data continues from the same position in "
                    "each replica's own stream, not with the same samples (--shuffle global "
                    "resumes exactly with any number of replicas)\n");
    }
out:
    sl_resume_info_fini(&ri);
    return rc;
}

/* --------------------------------------------------------------- the loop */

typedef struct window {
    double loss, correct, images, steps, wait, busy;
} window;

static int log_progress(sl_run *r, sl_replica *rep, window *w, double *win_t, int64_t step,
                        float lr)
{
    float v[6] = {(float)w->loss, (float)w->correct, (float)w->images, (float)w->steps,
                  (float)rep->comm_wait_s, (float)rep->step_s};
    int rc = sl_replica_sum(rep, v, 6);
    if (rc)
        return rc;
    rep->comm_wait_s = rep->step_s = 0;
    w->wait += v[4];
    w->busy += v[5];
    *w = (window){.wait = w->wait, .busy = w->busy};
    if (!(rep->idx == 0 && r->is_root))
        return SL_OK;
    double t = sl_now_s(), ips = v[2] / (t - *win_t);
    double mloss = v[0] / v[3], acc = v[1] / v[2];
    fprintf(r->out, "epoch %" PRId64 " step %" PRId64 "/%" PRId64 " loss %.4f acc %.4f "
            "%.0f img/s lr %.5f", (step - 1) / r->steps_per_epoch + 1, step, r->total_steps,
            mloss, acc, ips, lr);
    if (r->world > 1)
        fprintf(r->out, " allreduce-wait %.1f%%", v[5] > 0 ? 100.0 * v[4] / v[5] : 0.0);
    fputc('\n', r->out);
    fflush(r->out);
    if (r->sum) {
        const char *tags[] = {"train/loss", "train/accuracy", "train/lr", "train/images_per_sec",
                              "train/allreduce_wait"};
        double vals[] = {mloss, acc, lr, ips, v[5] > 0 ? v[4] / v[5] : 0.0};
        if ((rc = sl_summary_scalars(r->sum, step, tags, vals, r->world > 1 ? 5 : 4, NULL)))
            return rc;
    }
    *win_t = t;
    return SL_OK;
}

int sl_run_evaluate(sl_run *r, sl_replica *rep, int64_t step)
{
    if (!r->eval_split)
        return SL_OK;
    sl_eval_result er;
    int rc = sl_replica_eval(rep, &er);
    if (rc || !(rep->idx == 0 && r->is_root))
        return rc;
    r->res->eval_top1 = er.top1;
    r->res->eval_top5 = er.top5;
    fprintf(r->out, "eval  epoch %" PRId64 " step %" PRId64 ": top1 %.4f top5 %.4f loss %.4f "
            "(%" PRId64 " images, %.1f s)\n", step / r->steps_per_epoch, step, er.top1, er.top5,
            er.loss, er.images, er.seconds);
    fflush(r->out);
    if (r->sum) {
        const char *tags[] = {"eval/top1", "eval/top5", "eval/loss"};
        double v[] = {er.top1, er.top5, er.loss};
        rc = sl_summary_scalars(r->sum, step, tags, v, 3, NULL);
    }
    return rc;
}

/* The step loop of one replica; every replica runs it in lockstep. */
static int replica_steps(sl_replica *rep)
{
    sl_run *r = rep->run;
    const sl_train_config *cfg = r->cfg;
    int root = rep->idx == 0 && r->is_root, rc = SL_OK;
    window w = {0};
    double win_t = sl_now_s(), ep_loss = 0, train_s = 0, steady_s = 0, in_wait_s = 0;
    int64_t ep_steps = 0, images = 0, steady_images = 0;
    /* warm-up left out of the steady figures: cuDNN's algorithm choices,
     * first touches, the pipeline filling */
    int64_t left = r->total_steps - r->step0, warm = left >= 10 ? left / 10 : (left > 1);
    sl_batch *held = NULL; /* --synthetic: the one batch */
    /* Step time on a device. The host runs ahead of the GPU (by up to the
     * launch queue), so a step's host time is not its GPU time: every wait
     * for the device (the sums taken at a log line, the sync before a pause,
     * the tail) counts as step time, and the steady window opens with the
     * device idle, so no warm-up work spills into it. */
    for (int64_t step = r->step0; step < r->total_steps;) {
        sl_batch *b = held;
        double ts = sl_now_s();
        if (step - r->step0 == warm && warm > 0) {
            if ((rc = sl_dev_sync(&rep->e)))
                goto out_held;
            train_s += sl_now_s() - ts;
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
        double dt = sl_now_s() - ts;
        train_s += dt;
        if (step - r->step0 >= warm) {
            steady_s += dt;
            in_wait_s += tin;
            steady_images += n;
        }
        step++;
        if (root) { /* what a checkpoint on error saves (rescue_checkpoint) */
            r->done_step = step;
            if ((rc = sl_pipeline_state_save(rep->p, r->done_state, sizeof r->done_state, NULL)))
                goto out_held;
        }
        images += n;
        w.loss += loss;
        w.correct += correct;
        w.images += n;
        w.steps++;
        ep_loss += loss;
        ep_steps++;
        int epoch_end = step % r->steps_per_epoch == 0 || step == r->total_steps;
        int ckpt = cfg->ckpt_dir && ((cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0) ||
                                     (cfg->ckpt_every <= 0 && epoch_end) ||
                                     step == r->total_steps);
        int check = cfg->check_every > 0 && step % cfg->check_every == 0;
        int logline = step % r->log_every == 0 || epoch_end;
        double tw = sl_now_s();
        if (logline) {
            double d[2]; /* the sums kept on the device since the last log */
            if ((rc = sl_replica_take(rep, d)))
                goto out_held;
            w.loss += d[0], w.correct += d[1], ep_loss += d[0];
        }
        /* what follows (eval, checkpoint, check) is not step time: the
         * device finishes the steps first */
        if ((epoch_end || ckpt || check) && (rc = sl_dev_sync(&rep->e)))
            goto out_held;
        tw = sl_now_s() - tw;
        train_s += tw;
        if (step - 1 - r->step0 >= warm)
            steady_s += tw;
        if (logline && (rc = log_progress(r, rep, &w, &win_t, step, lr)))
            goto out_held;
        double pause0 = sl_now_s();
        if (epoch_end || ckpt)
            if ((rc = sl_replica_sync_buffers(rep)))
                goto out_held;
        if (epoch_end) {
            float el[2] = {(float)ep_loss, (float)ep_steps};
            if ((rc = sl_replica_sum(rep, el, 2)))
                goto out_held;
            if (root) {
                r->res->final_loss = el[0] / el[1];
                r->res->epochs_done = step / r->steps_per_epoch;
            }
            ep_loss = 0;
            ep_steps = 0;
            if ((rc = sl_run_evaluate(r, rep, step)))
                goto out_held;
        }
        if (ckpt && root && (rc = sl_run_save_checkpoint(r, rep, step)))
            goto out_held;
        if (check && (rc = sl_replica_check_identical(rep, step)))
            goto out_held;
        win_t += sl_now_s() - pause0; /* eval and checkpoint time stay out of images/s */
    }
    /* a device is up to one step behind the host: count its tail */
    double tsync = sl_now_s();
    if ((rc = sl_dev_sync(&rep->e)))
        goto out_held;
    train_s += sl_now_s() - tsync;
    steady_s += sl_now_s() - tsync;
    if (root) {
        r->res->steps = r->total_steps;
        r->res->images_per_sec = train_s > 0 ? (double)images * r->world / train_s : 0;
        r->res->images_per_sec_steady =
            steady_s > 0 ? (double)steady_images * r->world / steady_s : r->res->images_per_sec;
        r->res->input_wait_frac = steady_s > 0 ? in_wait_s / steady_s : 0;
        r->res->comm_wait_frac = w.busy > 0 ? w.wait / w.busy : 0;
        float scale = 1.0f;
        if (rep->dsgd && (rc = sl_dev_sgd_skipped(rep->dsgd, &r->res->amp_skipped, &scale)))
            goto out_held;
        r->res->amp_scale = scale;
        sl_dev_mem_info mi;
        if ((rc = sl_dev_mem(&rep->e, &mi)))
            goto out_held;
        r->res->peak_device_mib = mi.peak / 1048576.0;
        r->res->device_used_mib = mi.device_used / 1048576.0;
        sl_replica_graph_report(rep, r->res);
    }
out_held:
    if (held) /* --synthetic: the batch every step reused */
        sl_pipeline_release(rep->p, held);
    return rc;
}

static int replica_loop(sl_replica *rep)
{
    int rc = replica_steps(rep);
    if (rc && rep->idx == 0 && rep->run->is_root)
        rescue_checkpoint(rep->run, rep);
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

/* Records per epoch over all replicas, the same figure on every rank. The
 * pipeline knows it when the records are split (or world is 1); with the
 * shards split, each rank knows its own: the local replicas' sum, summed
 * over the mirrored ranks, or (ps under mpirun, where the servers take
 * part in no collective) dataset.json's count for the split. */
static int world_records(sl_run *r)
{
    sl_pipeline_stats ps;
    int rc;
    if ((rc = sl_pipeline_stats_get(r->rep[0].p, &ps)))
        return rc;
    if (ps.records_per_epoch_world > 0) {
        r->records = (int64_t)ps.records_per_epoch_world;
        return SL_OK;
    }
    int64_t sum = 0; /* records are counted in integers: an f32 sum is exact only to 2^24 */
    for (int i = 0; i < r->nlocal; i++) {
        if ((rc = sl_pipeline_stats_get(r->rep[i].p, &ps)))
            return rc;
        sum += (int64_t)ps.records_per_epoch;
    }
    if (r->nlocal == r->world) {
        r->records = sum;
        return SL_OK;
    }
    if (r->cfg->strategy == SL_STRATEGY_MIRRORED) {
        if ((rc = sl_comm_allreduce_i64(r->mpi, &sum, 1)))
            return rc;
        r->records = sum;
        return SL_OK;
    }
    sl_manifest mf;
    if (sl_manifest_load(r->data.data, &mf))
        return sl_fail(SL_EINVAL, "sl_train_run: %s: ps under mpirun with the shards split over "
                       "the workers (--shuffle buffer) takes the records per epoch from %s, "
                       "which cannot be read (%s); use --shuffle global", r->data.data,
                       SL_MANIFEST_FILE, sl_errmsg());
    sl_manifest_split *sp = sl_manifest_split_find(&mf, r->data.split);
    r->records = sp ? (int64_t)sp->records : 0;
    sl_manifest_fini(&mf);
    return SL_OK;
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
    r->data.rank_split = r->world > 1 && r->data.shuffle != SL_SHUFFLE_BUFFER ? SL_SPLIT_RECORDS
                                                                            : SL_SPLIT_FILES;
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
    if (r->is_root) {
        sl_replica *rep = &r->rep[0];
        fprintf(r->out, "train: %s (%" PRId64 " parameters, %.0f MiB) on %s%s%s%s%d, %" PRId64
                " records, batch %u, %" PRId64 " steps/epoch, %" PRId64 " steps, peak lr %.4g, "
                "%s schedule, warmup %" PRId64 " steps\n", sl_arch_name(c->model.arch),
                sl_model_param_count(rep->m), (double)sl_model_bytes(rep->m) / 1048576.0,
                sl_backend_name(c->backend), rep->dev ? " " : "",
                rep->dev ? sl_precision_name(rep->e.act) : "",
                rep->dev ? " device " : " x", rep->dev ? sl_dev_device(&rep->e) : rep->e.threads,
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
    for (int i = 1; i < r.nlocal && !rc; i++) {
        if (pthread_create(&r.rep[i].thread, NULL, replica_thread, &r.rep[i]))
            rc = sl_fail(SL_ENOMEM, "sl_train_run: cannot start replica thread %d", i);
        else
            r.rep[i].thread_started = 1;
    }
    if (!rc) {
        rc = replica_loop(&r.rep[0]);
        if (rc) {
            snprintf(r.rep[0].msg, sizeof r.rep[0].msg, "%s", sl_errmsg());
            sl_comm_abort(r.rep[0].comm, r.rep[0].msg);
        }
    } else {
        for (int i = 0; i < r.nlocal; i++)
            sl_comm_abort(r.rep[i].comm, "a replica thread could not start");
    }
    r.rep[0].rc = rc;
    for (int i = 1; i < r.nlocal; i++)
        if (r.rep[i].thread_started)
            pthread_join(r.rep[i].thread, NULL);
    /* The root cause: the first replica that failed for its own reason, not
     * because a peer aborted. */
    int first = -1;
    for (int i = 0; i < r.nlocal; i++)
        if (r.rep[i].rc && (first < 0 || (r.rep[first].rc == SL_ECANCELED &&
                                          r.rep[i].rc != SL_ECANCELED)))
            first = i;
    if (first >= 0) {
        rc = sl_fail(r.rep[first].rc, "%s", r.rep[first].msg);
    }
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
    run_fini(&r);
    return rc;
}

/*
 * train/trainer.c - the training loop: pipeline batches in, SGD steps out,
 * with progress lines, TensorBoard scalars, per-epoch evaluation and
 * checkpoints that resume exactly.
 *
 * Steps and epochs. The pipeline runs forever (its fused shuffle-repeat
 * keeps the buffer full across epoch boundaries), and the trainer counts:
 * an epoch is ceil(records / batch) steps, the run is epochs x that many
 * steps or --max-steps. Evaluation and (by default) a checkpoint follow
 * every epoch's last step.
 *
 * Exact resume. A checkpoint holds the weights, the BN buffers and the
 * momentum buffers bit for bit, and the pipeline's resume state taken after
 * the last batch the saved step consumed; the schedule is a pure function of
 * the step. With the same config and the same thread count (OpenBLAS splits
 * the same way) the resumed run computes the same floats as the one that
 * was not interrupted (tests/train/test_trainer.c checks the loss curve).
 *
 * Threading: one thread runs the loop (and OpenBLAS's threads inside it);
 * the pipeline's readers and workers prepare the next batches meanwhile, so
 * input overlaps compute up to the prefetch depth.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "records/records.h"
#include "records/records_int.h" /* sl_mkdir_p */
#include "train/train.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sl_train_config_init(sl_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->data = (sl_pipeline_config)SL_PIPELINE_CONFIG_INIT;
    c->data.layout = SL_LAYOUT_NHWC_F32;
    c->data.epochs = 0;
    c->eval_split = "test";
    c->model = (sl_model_config)SL_MODEL_CONFIG_INIT;
    c->model.classes = 0; /* from dataset.json */
    c->sgd = (sl_sgd_config)SL_SGD_CONFIG_INIT;
    c->backend = SL_BACKEND_CPU;
    c->epochs = 1;
    c->base_lr = 0.1;
    c->schedule = SL_SCHED_COSINE;
}

/* Everything a run holds; freed by run_fini. */
typedef struct run {
    const sl_train_config *cfg;
    sl_pipeline_config data;
    sl_exec e;
    int exec_ok;
    sl_pipeline *p;
    sl_model *m;
    sl_sgd *o;
    sl_summary *sum;
    sl_schedule sched;
    int64_t step, steps_per_epoch, total_steps, records;
    float *dlogits;
    int32_t *labels;
    FILE *out;
} run;

static void run_fini(run *r)
{
    sl_summary_close(r->sum);
    sl_sgd_destroy(r->o);
    sl_model_destroy(r->m);
    sl_pipeline_destroy(r->p);
    if (r->exec_ok)
        sl_exec_fini(&r->e);
    free(r->dlogits);
    free(r->labels);
}

/* Classes from dataset.json when the config leaves them at 0. */
static int dataset_classes(const char *dir, int *classes)
{
    sl_manifest mf;
    int rc = sl_manifest_load(dir, &mf);
    if (rc)
        return sl_fail(rc, "sl_train_run: %s: the number of classes comes from %s (%s); "
                       "or give it explicitly", dir, SL_MANIFEST_FILE, sl_errmsg());
    *classes = (int)mf.num_classes;
    sl_manifest_fini(&mf);
    if (*classes < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: %s/%s says %d classes", dir, SL_MANIFEST_FILE,
                       *classes);
    return SL_OK;
}

/* The state JSON stored in a checkpoint. */
static char *state_json(run *r)
{
    char ps[SL_PIPELINE_STATE_MAX];
    size_t plen = 0;
    if (sl_pipeline_state_save(r->p, ps, sizeof ps, &plen))
        return NULL;
    cJSON *j = cJSON_CreateObject();
    char *s = NULL;
    if (!j)
        return NULL;
    if (cJSON_AddNumberToObject(j, "step", (double)r->step) &&
        cJSON_AddNumberToObject(j, "epoch", (double)(r->step / r->steps_per_epoch)) &&
        cJSON_AddNumberToObject(j, "steps_per_epoch", (double)r->steps_per_epoch) &&
        cJSON_AddNumberToObject(j, "total_steps", (double)r->total_steps) &&
        cJSON_AddStringToObject(j, "schedule", sl_sched_name(r->sched.kind)) &&
        cJSON_AddNumberToObject(j, "peak_lr", r->sched.peak_lr) &&
        cJSON_AddNumberToObject(j, "warmup_steps", (double)r->sched.warmup_steps) &&
        cJSON_AddNumberToObject(j, "batch", (double)r->data.batch) &&
        cJSON_AddStringToObject(j, "model", sl_arch_name(r->cfg->model.arch)) &&
        cJSON_AddStringToObject(j, "pipeline", ps))
        s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static int save_checkpoint(run *r, sl_train_result *res)
{
    if (!r->cfg->ckpt_dir)
        return SL_OK;
    char prefix[sizeof res->checkpoint];
    if (snprintf(prefix, sizeof prefix, "%s/ckpt-%09" PRId64, r->cfg->ckpt_dir, r->step) >=
        (int)sizeof prefix)
        return sl_fail(SL_EINVAL, "sl_train_run: checkpoint path too long");
    char *st = state_json(r);
    if (!st)
        return sl_fail(SL_ENOMEM, "sl_train_run: checkpoint state: %s", sl_errmsg());
    int rc = sl_checkpoint_save(prefix, r->m, r->o, r->data.height, st);
    free(st);
    if (rc)
        return rc;
    memcpy(res->checkpoint, prefix, sizeof prefix);
    return SL_OK;
}

/* Continue from the newest checkpoint in ckpt_dir: weights, momentum,
 * step, and a pipeline rebuilt from its saved position. */
static int resume(run *r)
{
    char *prefix = NULL, *st = NULL;
    cJSON *j = NULL;
    int rc = sl_checkpoint_latest(r->cfg->ckpt_dir, &prefix);
    if (rc == SL_ENOENT) {
        fprintf(r->out, "resume: no checkpoint in %s, starting from scratch\n", r->cfg->ckpt_dir);
        return SL_OK;
    }
    if (rc)
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s.safetensors", prefix);
    if ((rc = sl_checkpoint_load(path, r->m, r->o, 1)) ||
        (rc = sl_checkpoint_read_state(prefix, &st)))
        goto out;
    j = cJSON_Parse(st);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "pipeline");
    if (!cJSON_IsNumber(step) || !cJSON_IsString(ps)) {
        rc = sl_fail(SL_ECORRUPT, "sl_train_run: %s.json: state lacks step or pipeline", prefix);
        goto out;
    }
    r->step = (int64_t)step->valuedouble;
    sl_pipeline_destroy(r->p);
    r->p = NULL;
    rc = sl_pipeline_create_from_state(&r->data, ps->valuestring, strlen(ps->valuestring), &r->p);
    if (rc) {
        rc = sl_fail(rc, "sl_train_run: resume from %s: %s", prefix, sl_errmsg());
        goto out;
    }
    fprintf(r->out, "resume: %s (step %" PRId64 ")\n", prefix, r->step);
out:
    cJSON_Delete(j);
    free(st);
    free(prefix);
    return rc;
}

static int evaluate(run *r, sl_train_result *res)
{
    const sl_train_config *c = r->cfg;
    if (!c->eval_split || !*c->eval_split)
        return SL_OK;
    sl_pipeline_config ev = r->data;
    ev.split = c->eval_split;
    ev.transform = SL_TRANSFORM_EVAL;
    ev.shuffle = SL_SHUFFLE_NONE;
    ev.shuffle_files = 0;
    ev.epochs = 1;
    ev.drop_remainder = 0;
    ev.rank = 0;
    ev.world = 1;
    sl_eval_result er;
    int rc = sl_eval_run(r->m, &r->e, &ev, &er);
    if (rc)
        return sl_fail(rc, "sl_train_run: evaluating split '%s': %s", ev.split, sl_errmsg());
    res->eval_top1 = er.top1;
    res->eval_top5 = er.top5;
    fprintf(r->out, "eval  epoch %" PRId64 " step %" PRId64 ": top1 %.4f top5 %.4f loss %.4f "
            "(%" PRId64 " images, %.1f s)\n", r->step / r->steps_per_epoch, r->step, er.top1,
            er.top5, er.loss, er.images, er.seconds);
    fflush(r->out);
    if (r->sum) {
        const char *tags[] = {"eval/top1", "eval/top5", "eval/loss"};
        double v[] = {er.top1, er.top5, er.loss};
        rc = sl_summary_scalars(r->sum, r->step, tags, v, 3, NULL);
    }
    return rc;
}

/* Set up everything before the first step. */
static int setup(run *r)
{
    const sl_train_config *c = r->cfg;
    int rc;
    r->data = c->data;
    r->data.layout = SL_LAYOUT_NHWC_F32;
    r->data.epochs = 0; /* forever: the trainer counts steps */
    r->data.device = -1;
    if (r->data.batch < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: batch must be at least 1");
    if ((rc = sl_exec_init(&r->e, c->backend, c->threads)))
        return rc;
    r->exec_ok = 1;
    if ((rc = sl_pipeline_create(&r->data, &r->p)))
        return rc;
    sl_pipeline_stats ps;
    if ((rc = sl_pipeline_stats_get(r->p, &ps)))
        return rc;
    r->records = (int64_t)ps.records_per_epoch;
    if (r->records < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: %s: split '%s' has no records", r->data.data,
                       r->data.split);
    r->steps_per_epoch = (r->records + r->data.batch - 1) / r->data.batch;
    r->total_steps = c->max_steps > 0 ? c->max_steps : c->epochs * r->steps_per_epoch;
    if (r->total_steps < 1)
        return sl_fail(SL_EINVAL, "sl_train_run: nothing to do (epochs %" PRId64 ", max steps "
                       "%" PRId64 ")", c->epochs, c->max_steps);

    sl_model_config mc = c->model;
    if (mc.classes <= 0 && (rc = dataset_classes(r->data.data, &mc.classes)))
        return rc;
    if ((rc = sl_model_create(&mc, (int)r->data.batch, r->data.height, r->data.width, &r->m)))
        return rc;
    int nt;
    sl_tensor_info *t = sl_model_tensors(r->m, &nt);
    if ((rc = sl_sgd_create(&c->sgd, t, nt, &r->o)))
        return rc;
    r->dlogits = malloc(sizeof(float) * r->data.batch * (size_t)mc.classes);
    r->labels = malloc(sizeof(int32_t) * r->data.batch);
    if (!r->dlogits || !r->labels)
        return sl_fail(SL_ENOMEM, "sl_train_run: logits for batch %u", r->data.batch);

    r->sched.kind = c->schedule;
    r->sched.peak_lr = c->base_lr * (double)r->data.batch * (double)r->data.world / 256.0;
    r->sched.warmup_steps = (int64_t)llround(c->warmup_epochs * (double)r->steps_per_epoch);
    r->sched.total_steps = r->total_steps;

    if (c->ckpt_dir && (rc = sl_mkdir_p(c->ckpt_dir, "sl_train_run")))
        return rc;
    if (c->resume && c->ckpt_dir && (rc = resume(r)))
        return rc;
    if (c->logdir && (rc = sl_summary_open(c->logdir, &r->sum)))
        return rc;
    fprintf(r->out, "train: %s (%" PRId64 " parameters, %.0f MiB) on %s x%d, %" PRId64
            " records, batch %u, %" PRId64 " steps/epoch, %" PRId64 " steps, peak lr %.4g, "
            "%s schedule, warmup %" PRId64 " steps\n", sl_arch_name(mc.arch),
            sl_model_param_count(r->m), (double)sl_model_bytes(r->m) / 1048576.0,
            sl_backend_name(c->backend), r->e.threads, r->records, r->data.batch,
            r->steps_per_epoch, r->total_steps, r->sched.peak_lr, sl_sched_name(c->schedule),
            r->sched.warmup_steps);
    fflush(r->out);
    return SL_OK;
}

/* One SGD step on batch b: *loss and *correct of the forward pass. */
static int train_step(run *r, const sl_batch *b, float lr, float *loss, int *correct)
{
    int classes = sl_model_config_of(r->m)->classes, n = (int)b->n, rc;
    for (int i = 0; i < n; i++) {
        r->labels[i] = b->labels[i];
        if (r->labels[i] < 0 || r->labels[i] >= classes)
            return sl_fail(SL_EINVAL, "sl_train_run: record %llu has label %d, the model has "
                           "%d classes", (unsigned long long)b->record_ids[i], r->labels[i],
                           classes);
    }
    const float *logits;
    if ((rc = sl_model_forward(r->m, &r->e, (const float *)b->data, n, 1, &logits)) ||
        (rc = r->e.ops->xent_fwd_bwd(&r->e, n, classes, logits, r->labels,
                                     r->cfg->label_smoothing, loss, r->dlogits, correct)) ||
        (rc = sl_model_backward(r->m, &r->e, r->dlogits, NULL)) ||
        (rc = sl_sgd_step(r->o, lr)))
        return rc;
    if (!isfinite(*loss))
        return sl_fail(SL_EINVAL, "sl_train_run: step %" PRId64 ": loss is %f (diverged: "
                       "lower --lr or add --warmup-epochs)", r->step, (double)*loss);
    return SL_OK;
}

int sl_train_run(const sl_train_config *cfg, sl_train_result *res)
{
    memset(res, 0, sizeof *res);
    res->eval_top1 = res->eval_top5 = -1;
    run r = {.cfg = cfg, .out = cfg->progress ? cfg->progress : stderr};
    double t0 = now_s();
    int rc = setup(&r);
    if (rc)
        goto out;
    int64_t log_every = cfg->log_every > 0 ? cfg->log_every
                                           : (r.steps_per_epoch >= 10 ? r.steps_per_epoch / 10 : 1);
    double win_t = now_s(), win_loss = 0, ep_loss = 0, train_s = 0;
    int64_t win_img = 0, win_correct = 0, win_steps = 0, ep_steps = 0, images = 0;
    while (r.step < r.total_steps) {
        sl_batch *b;
        double ts = now_s();
        if ((rc = sl_pipeline_next(r.p, &b)))
            goto out;
        float lr = (float)sl_schedule_lr(&r.sched, r.step), loss = 0;
        int correct = 0, n = (int)b->n;
        rc = train_step(&r, b, lr, &loss, &correct);
        sl_pipeline_release(r.p, b);
        if (rc)
            goto out;
        train_s += now_s() - ts;
        r.step++;
        images += n;
        win_loss += loss;
        ep_loss += loss;
        win_img += n;
        win_correct += correct;
        win_steps++;
        ep_steps++;
        int epoch_end = r.step % r.steps_per_epoch == 0 || r.step == r.total_steps;
        if (r.step % log_every == 0 || epoch_end) {
            double t = now_s(), ips = win_img / (t - win_t);
            double mloss = win_loss / win_steps, acc = (double)win_correct / win_img;
            fprintf(r.out, "epoch %" PRId64 " step %" PRId64 "/%" PRId64 " loss %.4f acc %.4f "
                    "%.0f img/s lr %.5f\n", (r.step - 1) / r.steps_per_epoch + 1, r.step,
                    r.total_steps, mloss, acc, ips, lr);
            fflush(r.out);
            if (r.sum) {
                const char *tags[] = {"train/loss", "train/accuracy", "train/lr",
                                      "train/images_per_sec"};
                double v[] = {mloss, acc, lr, ips};
                if ((rc = sl_summary_scalars(r.sum, r.step, tags, v, 4, NULL)))
                    goto out;
            }
            win_t = t;
            win_loss = 0;
            win_img = win_correct = win_steps = 0;
        }
        double pause0 = now_s();
        if (epoch_end) {
            res->final_loss = ep_loss / (double)ep_steps;
            ep_loss = 0;
            ep_steps = 0;
            res->epochs_done = r.step / r.steps_per_epoch;
            if ((rc = evaluate(&r, res)))
                goto out;
        }
        if ((cfg->ckpt_every > 0 && r.step % cfg->ckpt_every == 0) ||
            (cfg->ckpt_every <= 0 && epoch_end) || r.step == r.total_steps)
            if ((rc = save_checkpoint(&r, res)))
                goto out;
        win_t += now_s() - pause0; /* eval and checkpoint time stay out of images/s */
    }
    res->images_per_sec = train_s > 0 ? (double)images / train_s : 0;
out:
    res->steps = r.step;
    res->seconds = now_s() - t0;
    if (rc == SL_OK && r.sum)
        rc = sl_summary_close(r.sum);
    else
        sl_summary_close(r.sum);
    r.sum = NULL;
    run_fini(&r);
    return rc;
}

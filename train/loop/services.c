/*
 * train/loop/services.c - what every strategy's loop calls on its run
 * (trainer_int.h): evaluation after an epoch (the root prints and logs
 * it), a checkpoint of a replica, the checkpoint of a stop request, and
 * the rescue checkpoint when the root's loop fails, all on io/resume.c's
 * plain-data checkpoint job (io_int.h). The strategies' loops are
 * strategy_mirrored.c's and strategy_ps.c's; run.c sets the run up and
 * chooses between them.
 *
 * Threading: the calling replica's thread (evaluation's collectives run on
 * every replica; the saves on the root's).
 */
#include <inttypes.h>
#include <stdio.h>

#include "train/io/io_int.h" /* sl_ckpt_*, SL_RESCUE_DIR */
#include "train/loop/trainer_int.h"

/* Whether the replicas' batches together are world 1's (pipeline.h's union
 * property: the records split, shuffle none or global): what a
 * checkpoint's rank_split "records" tells a resume with another number of
 * replicas (io/resume.c), which then continues with the same samples. A
 * buffered split is not: each replica's buffer is its own. */
int sl_run_union_split(const sl_pipeline_config *d)
{
    return d->rank_split == SL_SPLIT_RECORDS && d->shuffle != SL_SHUFFLE_BUFFER;
}

/* The checkpoint job of rep (io_int.h's sl_ckpt_job) in r. */
static sl_ckpt_job ckpt_job(sl_run *r, sl_replica *rep)
{
    return (sl_ckpt_job){
        .steps_per_epoch = r->steps_per_epoch,
        .total_steps = r->total_steps,
        .sched = &r->sched,
        .batch = r->data.batch,
        .world = r->world,
        .strategy = r->cfg->strategy,
        .arch = r->cfg->model.arch,
        .m = rep->m,
        .o = rep->o,
        .dsgd = rep->dsgd,
        .p = rep->p,
        .height = rep->data.height,
        .split_records = sl_run_union_split(&rep->data),
        .prefix = r->res->checkpoint,
        .prefix_cap = sizeof r->res->checkpoint,
        .saved_step = &r->saved_step,
    };
}

int sl_run_save_checkpoint(sl_run *r, sl_replica *rep, int64_t step)
{
    if (!r->cfg->ckpt_dir)
        return SL_OK;
    sl_ckpt_job j = ckpt_job(r, rep);
    return sl_ckpt_save(&j, r->cfg->ckpt_dir, step, NULL);
}

int sl_run_save_stop(sl_run *r, sl_replica *rep, int64_t step)
{
    sl_ckpt_job j = ckpt_job(r, rep);
    int rc = sl_ckpt_keep(&j, r->cfg->ckpt_dir, step, NULL);
    if (rc)
        return rc;
    fprintf(r->out, "train: stopped on request after step %" PRId64 "; it is saved in "
            "%.3000s.safetensors: continue with --ckpt-dir %.1000s --resume\n", step,
            r->res->checkpoint, r->cfg->ckpt_dir ? r->cfg->ckpt_dir : SL_RESCUE_DIR);
    fflush(r->out);
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
    r->res->eval_skipped = er.skipped;
    snprintf(r->res->eval_skipped_first, sizeof r->res->eval_skipped_first, "%s",
             er.skipped_first);
    fprintf(r->out, "eval  epoch %" PRId64 " step %" PRId64 ": top1 %.4f top5 %.4f loss %.4f "
            "(%" PRId64 " images, %.1f s)", step / r->steps_per_epoch, step, er.top1, er.top5,
            er.loss, er.images, er.seconds);
    if (er.skipped > 0) /* left out, not refilled: the figures count each good record once */
        fprintf(r->out, "; %" PRId64 " bad records left out, the first: %s", er.skipped,
                er.skipped_first[0] ? er.skipped_first : "(another process's share)");
    fputc('\n', r->out);
    fflush(r->out);
    if (r->sum) {
        const char *tags[] = {"eval/top1", "eval/top5", "eval/loss", "eval/skipped_records"};
        double v[] = {er.top1, er.top5, er.loss, (double)er.skipped};
        rc = sl_summary_scalars(r->sum, step, tags, v, 4, NULL);
    }
    return rc;
}

int sl_run_log_tuning(sl_run *r, sl_replica *rep, int64_t step)
{
    sl_pipeline_tuning *t = &r->res->tuning;
    int rc = rep->p ? sl_pipeline_tuning_get(rep->p, t) : SL_OK;
    if (rc || !rep->p || !r->sum)
        return rc;
    /* the active workers and the decode-ahead limit now, the changes so far */
    const char *tags[] = {"tuning/workers", "tuning/prefetch", "tuning/changes"};
    double v[] = {t->workers, t->prefetch, (double)t->changes};
    return sl_summary_scalars(r->sum, step, tags, v, 3, NULL);
}

void sl_run_rescue(sl_run *r, sl_replica *rep)
{
    sl_ckpt_job j = ckpt_job(r, rep);
    sl_ckpt_rescue(&j, r->cfg->ckpt_dir, r->done_step, r->step0, r->done_state, r->out,
                   r->rescue, sizeof r->rescue);
}

/*
 * train/io/resume.c - a training run's checkpoints beyond the weights: the
 * state JSON saved beside them, the save of one step, the rescue save when
 * an error stops a run, and the plan for resuming from the newest one
 * (io_int.h's "io/resume.c" section; the weights themselves are
 * checkpoint.c's).
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
 * Threading: none of its own; the caller's (io_int.h).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/fileio.h" /* sl_mkdir_p, sl_str_cat */
#include "common/json.h"
#include "train/device/dev_int.h" /* sl_dev_sgd_pull */
#include "train/io/io_int.h"
#include "train/model/model_int.h" /* sl_model_pull */

/* ------------------------------------------------------------ checkpoints */

/* The state JSON stored in a checkpoint (the saved replica's pipeline
 * state ps too: world 1 resumes from it exactly, with its config checked);
 * malloc'd, NULL on error. */
static char *state_json(const sl_ckpt_job *jb, int64_t step, const char *saved)
{
    char ps[SL_PIPELINE_STATE_MAX];
    size_t plen = 0;
    cJSON *j = NULL;
    char *s = NULL;
    if (saved)
        snprintf(ps, sizeof ps, "%s", saved);
    else if (sl_pipeline_state_save(jb->p, ps, sizeof ps, &plen))
        goto out;
    if (!(j = cJSON_CreateObject()))
        goto out;
    /* integers as exact text (common/json.h): resume reads them back checked */
    if (sl_json_add_int(j, "step", step) &&
        sl_json_add_int(j, "epoch", step / jb->steps_per_epoch) &&
        sl_json_add_int(j, "steps_per_epoch", jb->steps_per_epoch) &&
        sl_json_add_int(j, "total_steps", jb->total_steps) &&
        cJSON_AddStringToObject(j, "schedule", sl_sched_name(jb->sched->kind)) &&
        cJSON_AddNumberToObject(j, "peak_lr", jb->sched->peak_lr) &&
        sl_json_add_int(j, "warmup_steps", jb->sched->warmup_steps) &&
        sl_json_add_int(j, "batch", jb->batch) &&
        sl_json_add_int(j, "world", jb->world) &&
        cJSON_AddStringToObject(j, "strategy", sl_strategy_name(jb->strategy)) &&
        cJSON_AddStringToObject(j, "rank_split", jb->split_records ? "records" : "files") &&
        cJSON_AddStringToObject(j, "model", sl_arch_name(jb->arch)) &&
        cJSON_AddStringToObject(j, "pipeline", ps))
        s = cJSON_PrintUnformatted(j);
out:
    cJSON_Delete(j);
    return s;
}

int sl_ckpt_save(const sl_ckpt_job *j, const char *dir, int64_t step, const char *ps)
{
    char prefix[sizeof ((sl_train_result *)0)->checkpoint];
    char *st = NULL;
    int rc;
    if (j->prefix_cap > sizeof prefix ||
        snprintf(prefix, j->prefix_cap, "%s/ckpt-%09" PRId64, dir, step) >= (int)j->prefix_cap) {
        rc = sl_fail(SL_EINVAL, "sl_train_run: checkpoint path too long");
        goto out;
    }
    /* on a device: the state dict's host copies first */
    if ((rc = sl_model_pull(j->m)) || (j->dsgd && (rc = sl_dev_sgd_pull(j->dsgd))))
        goto out;
    if (!(st = state_json(j, step, ps))) {
        rc = sl_fail(SL_ENOMEM, "sl_train_run: checkpoint state: %s", sl_errmsg());
        goto out;
    }
    if ((rc = sl_checkpoint_save(prefix, j->m, j->o, j->height, st)))
        goto out;
    memcpy(j->prefix, prefix, j->prefix_cap);
    *j->saved_step = step;
out:
    free(st);
    return rc;
}

int sl_ckpt_keep(const sl_ckpt_job *j, const char *dir, int64_t step, const char *state)
{
    const char *to = dir ? dir : SL_RESCUE_DIR;
    if (*j->saved_step == step)
        return SL_OK;
    int rc = sl_mkdir_p(to, "sl_train_run");
    return rc ? rc : sl_ckpt_save(j, to, step, state);
}

/* The weights and momentum buffers are the last completed step's (they
 * change only in its last phase, the SGD update); the pipeline state is the
 * one noted after that step; BN running statistics are this replica's own
 * (averaging them over replicas is a collective, which a failed run cannot
 * do) and include the forward of a step that failed in its backward. */
void sl_ckpt_rescue(const sl_ckpt_job *j, const char *dir, int64_t step, int64_t step0,
                    const char *state, FILE *out, char *why, size_t cap)
{
    char msg[SL_ERRMSG_MAX];
    if (step <= step0)
        return; /* no step of this run completed: nothing new to keep */
    snprintf(msg, sizeof msg, "%s", sl_errmsg());
    const char *to = dir ? dir : SL_RESCUE_DIR;
    int rc = sl_ckpt_keep(j, dir, step, state);
    if (rc)
        snprintf(why, cap, "saving step %" PRId64 " failed too: %.1000s", step, sl_errmsg());
    else
        snprintf(why, cap, "the last completed step, %" PRId64 ", is saved in "
                 "%.3000s.safetensors: continue with --ckpt-dir %.1000s --resume",
                 step, j->prefix, to);
    fprintf(out, "train: stopped by an error after step %" PRId64 "; %s\n", step, why);
    fflush(out);
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


int sl_resume_plan_make(sl_resume_plan *p)
{
    sl_resume_info ri = {0};
    p->state = NULL;
    int rc = sl_checkpoint_latest(p->dir, &p->prefix);
    if (rc == SL_ENOENT) {
        if (p->root)
            fprintf(p->out, "resume: no checkpoint in %s, starting from scratch\n", p->dir);
        sl_clear_error();
        rc = SL_OK;
        goto out;
    }
    if (rc || (rc = sl_resume_info_read(p->prefix, &ri)))
        goto out;
    int saved_world = (int)ri.world;
    if (ri.batch && (unsigned)ri.batch != p->batch) {
        rc = sl_fail(SL_EINVAL, "sl_train_run: resume from %s: it was trained with global batch "
                     "%u, this run has %u (give the same --batch)", p->prefix,
                     (unsigned)ri.batch, p->batch);
        goto out;
    }
    /* The samples taken before the step, per replica (step x local batch),
     * must be a count: at most step x global batch. */
    if (ri.step > INT64_MAX / (int64_t)p->batch) {
        rc = sl_fail(SL_ECORRUPT, "sl_train_run: %s.json: step: %" PRId64 " steps of batch %u "
                     "are more samples than 2^63", p->prefix, ri.step, p->batch);
        goto out;
    }
    p->step0 = ri.step;
    p->saved_steps_per_epoch = ri.steps_per_epoch;
    int split_records = p->split_records || (p->world == 1 && ri.split_records);
    if (saved_world == 1 && p->world == 1) {
        p->state = ri.pipeline;
        ri.pipeline = NULL;
        p->exact = 1;
    } else {
        p->exact = saved_world == p->world || split_records;
    }
    if (p->root) {
        fprintf(p->out, "resume: %s (step %" PRId64 ", saved with %d replica%s, resuming with "
                "%d)\n", p->prefix, p->step0, saved_world, saved_world == 1 ? "" : "s",
                p->world);
        if (!p->exact)
            fprintf(p->out, "resume: warning: the replicas shuffle in buffers of their own "
                    "(--shuffle buffer) and their number changed: the data continues from the same position in "
                    "each replica's own stream, not with the same samples (--shuffle global "
                    "resumes exactly with any number of replicas)\n");
    }
out:
    sl_resume_info_fini(&ri);
    return rc;
}

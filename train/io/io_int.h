/*
 * train/io/io_int.h - the io room's header for the loop above it: a run's
 * checkpoints (io/resume.c) on plain data, so that io/ needs nothing of
 * loop/. The checkpoint files themselves are train.h's (sl_checkpoint_*,
 * io/checkpoint.c).
 */
#ifndef SL_IO_INT_H
#define SL_IO_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "train/train.h" /* sl_model, sl_sgd, sl_schedule, sl_pipeline, sl_strategy */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------- io/resume.c: checkpoints of a run
 * The loop's checkpoints on plain data (loop/run.c fills these from its run
 * and root replica), so that io/ needs nothing of loop/. Messages read
 * "sl_train_run: ...": they are the run's. Threading: the root replica's
 * thread (save, rescue) or the calling thread before the replicas start
 * (resume plan). */
typedef struct sl_dev_sgd sl_dev_sgd; /* device/dev_int.h */

/* One checkpoint to write: the run as its state JSON records it, the
 * replica whose weights, optimizer and pipeline state are saved, and where
 * the result is noted. Borrowed pointers, valid for the call. */
typedef struct sl_ckpt_job {
    /* the run */
    int64_t steps_per_epoch, total_steps;
    const sl_schedule *sched;
    unsigned batch;            /* global */
    int world;
    sl_strategy strategy;
    sl_arch arch;
    /* the replica saved */
    sl_model *m;
    sl_sgd *o;
    sl_dev_sgd *dsgd;          /* on a device: its optimizer state; NULL on the host */
    sl_pipeline *p;
    int height;                /* image size, recorded beside the weights */
    int split_records;         /* its pipeline's rank_split is SL_SPLIT_RECORDS */
    /* the result */
    char *prefix;              /* out: DIR/ckpt-STEP of the last one written */
    size_t prefix_cap;
    int64_t *saved_step;       /* out: its step (-1 before any) */
} sl_ckpt_job;

/* Save j's replica as the checkpoint of `step` in dir (which exists), with
 * the pipeline state ps (NULL: the pipeline's state now): DIR/ckpt-STEP
 * (nine digits).{safetensors,json}; j->prefix and *j->saved_step then name
 * it. SL_EINVAL for a path longer than j->prefix_cap, else the codes of
 * sl_checkpoint_save and of the device pulls. */
int sl_ckpt_save(const sl_ckpt_job *j, const char *dir, int64_t step, const char *ps);

/* Where a checkpoint goes when an error or a stop request ends the run
 * and no ckpt_dir was given: the weights of hours of steps are worth a
 * folder the user did not ask for. */
#define SL_RESCUE_DIR "sluice-rescue"

/* Save `step` in dir (NULL: SL_RESCUE_DIR, made if need be) unless it is
 * saved already (*j->saved_step): what an error's rescue and a stop
 * request keep. Codes as sl_ckpt_save's, or sl_mkdir_p's. */
int sl_ckpt_keep(const sl_ckpt_job *j, const char *dir, int64_t step, const char *state);

/* The run failed (its message in sl_errmsg()) after completing `step`
 * (state: the pipeline state noted after it); step0 is the run's first.
 * Save that step in dir (NULL: ./sluice-rescue) unless it is saved already or
 * no step of this run completed, say so on out, and write what became of
 * it into why (cap bytes; left as it was when nothing was saved).
 * sl_errmsg() is left as it was. */
void sl_ckpt_rescue(const sl_ckpt_job *j, const char *dir, int64_t step, int64_t step0,
                    const char *state, FILE *out, char *why, size_t cap);

/* Resuming: the newest checkpoint in dir and how the pipelines restart.
 * The caller sets the inputs; sl_resume_plan_make fills the outputs
 * (malloc'd strings: the caller frees them, also on error). */
typedef struct sl_resume_plan {
    /* in */
    const char *dir;           /* --ckpt-dir */
    unsigned batch;            /* global batch of this run */
    int world;                 /* replicas of this run */
    int split_records;         /* this run's replicas split the records */
    int root;                  /* print the resume lines on out */
    FILE *out;
    /* out */
    char *prefix;              /* the checkpoint; NULL: none there, start from scratch */
    int64_t step0;             /* its step: this run's first */
    int64_t saved_steps_per_epoch; /* 0 when not recorded */
    int exact;                 /* the data continues with the same samples */
    char *state;               /* world 1 from world 1: the saved pipeline state; else NULL */
} sl_resume_plan;
/* SL_OK with prefix NULL when dir holds no checkpoint; SL_EINVAL for a
 * different global batch; SL_ECORRUPT for a step too large for the batch;
 * the codes of sl_checkpoint_latest and sl_resume_info_read. */
int sl_resume_plan_make(sl_resume_plan *p);

/* What a checkpoint's state says about resuming from it (the state JSON
 * sl_ckpt_save writes: "step", "pipeline", and when present
 * "steps_per_epoch", "world", "batch", "rank_split"). */
typedef struct sl_resume_info {
    int64_t step;            /* the step saved, 0 .. 2^53: the resumed run's first */
    int64_t steps_per_epoch; /* of the saved run, 1 .. 2^53; 0 when not recorded */
    int64_t world;           /* replicas it was saved with, 1 .. INT_MAX (1 when not recorded) */
    int64_t batch;           /* its global batch, 1 .. UINT_MAX; 0 when not recorded */
    int split_records;       /* rank_split is "records" */
    char *pipeline;          /* replica 0's pipeline state (malloc'd) */
} sl_resume_info;
/* Read PREFIX.json (sl_checkpoint_read_state) into *ri, every number
 * checked for range and integrality before it is converted: SL_ECORRUPT
 * "sl_train_run: PREFIX.json: KEY: ..." for a missing step or pipeline, a
 * number out of range, a fraction or a field of the wrong type; the codes
 * of sl_checkpoint_read_state for the file itself. *ri is zeroed on error;
 * free with sl_resume_info_fini. Pure but for the file read: the fuzz
 * target tests/fuzz/fuzz_ckpt_json.c calls it. */
int sl_resume_info_read(const char *prefix, sl_resume_info *ri);
void sl_resume_info_fini(sl_resume_info *ri); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif

#endif /* SL_IO_INT_H */

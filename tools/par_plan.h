/*
 * tools/par_plan.h - the parallelism `sluice train`, `eval` and `profile`
 * run with (issue 43): the budget (--cpus, else common/cpus.h's usable
 * cores), the start-up measurement, train/loop/plan.c's choice applied to
 * the pipeline flags, and the line that says what was chosen and why.
 *
 * Threading: CLI thread only.
 */
#ifndef SL_PAR_PLAN_CLI_H
#define SL_PAR_PLAN_CLI_H

#include <stdio.h>

#include "pipeline_flags.h"
#include "train/train.h"

/* Fill q's budget, data and pipeline fields from f (q's job, backend,
 * model and compute fields are the caller's), measure the free cores when
 * the plan could use them (a cpu job whose threads are not given: about
 * 0.05 s), choose into p, set f->cfg's workers, readers and prefetch from
 * p, and print "<cmd>: parallelism: ..." on out. With --memory-budget, fit
 * the pipelines (one, or one per replica) in it (pipeline/memory.c's
 * sl_pipeline_memory_fit: prefetch, requests in flight, workers, the read
 * window shrunk unless given; f->cfg, f->mem, p's workers and prefetch
 * updated) before any record is read, and print "<cmd>: memory: ...".
 * 0, or -1 with the refusal printed (exit status 2). */
int par_plan_apply(const char *cmd, pf_flags *f, sl_par_request *q, sl_par_plan *p, FILE *out);

#endif

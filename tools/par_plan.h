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
 * p, and print "<cmd>: parallelism: ..." on out. */
void par_plan_apply(const char *cmd, pf_flags *f, sl_par_request *q, sl_par_plan *p,
                    FILE *out);

#endif

/*
 * tools/par_plan.c - the CLI side of the parallelism plan (par_plan.h):
 * budget, start-up measurement, choice, the line that reports it.
 */
#include "par_plan.h"

#include <time.h>

#include "common/cpus.h"

/* How long the start-up measurement spins (common/cpus.h's sl_cpus_free):
 * long enough for the scheduler to share the cores out (its latency is a
 * few ms), short beside any run. */
#define PAR_PROBE_S 0.05

void par_plan_apply(const char *cmd, pf_flags *f, sl_par_request *q, sl_par_plan *p,
                    FILE *out)
{
    sl_cpus c;
    sl_cpus_get(&c);
    q->cpus = f->cpus > 0 ? f->cpus : c.usable;
    q->batch = f->cfg.batch;
    q->height = f->cfg.height;
    q->image_width = f->cfg.width;
    q->workers = f->cfg.workers;
    q->readers = f->cfg.readers;
    q->prefetch = f->cfg.prefetch;
    if (q->job != SL_PAR_PIPELINE && q->backend != SL_BACKEND_CUDA && q->threads <= 0 &&
        q->cpus > 1)
        q->free_cores = sl_cpus_free(q->cpus, PAR_PROBE_S);
    sl_par_choose(q, p);
    f->cfg.workers = p->workers;
    f->cfg.readers = p->readers;
    f->cfg.prefetch = p->prefetch;
    char prefetch[32] = "auto";
    if (p->prefetch)
        snprintf(prefetch, sizeof prefetch, "%u", p->prefetch);
    char budget[160];
    if (f->cpus > 0)
        snprintf(budget, sizeof budget, "--cpus %d; this process may use %s", f->cpus, c.why);
    else
        snprintf(budget, sizeof budget, "%s usable", c.why);
    char measured[64] = "";
    if (p->free_cores > 0)
        snprintf(measured, sizeof measured, "; %.1f cores free at start-up (%.2f s)",
                 p->free_cores, PAR_PROBE_S);
    if (q->job == SL_PAR_PIPELINE)
        fprintf(out, "%s: parallelism: %u worker%s, %u reader%s, prefetch %s (%s; %s)\n", cmd,
                p->workers, p->workers == 1 ? "" : "s", p->readers, p->readers == 1 ? "" : "s",
                prefetch, budget, p->reason);
    else
        fprintf(out, "%s: parallelism: %s; %u worker%s and %u reader%s per pipeline, prefetch "
                "%s (%s%s)\n", cmd, p->reason, p->workers, p->workers == 1 ? "" : "s",
                p->readers, p->readers == 1 ? "" : "s", prefetch, budget, measured);
    fflush(out);
}

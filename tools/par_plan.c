/*
 * tools/par_plan.c - the CLI side of the parallelism plan (par_plan.h):
 * budget, start-up measurement, choice, the line that reports it.
 */
#include "par_plan.h"

#include <time.h>

#include "cli.h"
#include "common/clock.h"
#include "common/cpus.h"

/* How long the start-up measurement spins (common/cpus.h's sl_cpus_free):
 * long enough for the scheduler to share the cores out (its latency is a
 * few ms), short beside any run. */
#define PAR_PROBE_S 0.05

/* "512 MiB" */
static const char *mib(uint64_t b, char *buf, size_t cap)
{
    snprintf(buf, cap, b >= (uint64_t)10 << 20 ? "%.0f MiB" : "%.1f MiB", (double)b / 1048576.0);
    return buf;
}

/* --memory-budget: fit f->cfg's pipelines in it (par_plan.h). */
static int fit_memory(const char *cmd, pf_flags *f, const sl_par_request *q, sl_par_plan *p)
{
    char what[160];
    sl_memory_fit fit = {.budget = f->memory_budget, .cmd = "--memory-budget", .io = &f->mem_io,
                         .eval_beside = f->mem_eval,
                         .eval_data = f->mem_eval_data[0] ? f->mem_eval_data : NULL,
                         .eval_split = f->mem_eval_split[0] ? f->mem_eval_split : NULL};
    /* mirrored and ps replicas each run a pipeline in this process */
    fit.pipelines = q->job == SL_PAR_TRAIN && !q->mpi && p->replicas > 1 ? (unsigned)p->replicas
                                                                         : 1;
    fit.fixed = (q->workers ? SL_MEM_FIXED_WORKERS : 0) |
                (q->prefetch ? SL_MEM_FIXED_PREFETCH : 0) |
                (f->io.inflight ? SL_MEM_FIXED_INFLIGHT : 0) |
                (f->cfg.read_window_bytes ? SL_MEM_FIXED_READ_WINDOW : 0);
    if (sl_pipeline_memory_fit(&f->cfg, &fit, &f->mem, what, sizeof what)) {
        cli_error(cmd, "%s", sl_errmsg());
        return -1;
    }
    f->mem_pipelines = fit.pipelines;
    snprintf(f->mem_shrunk, sizeof f->mem_shrunk, "%s", what);
    p->workers = f->cfg.workers ? f->cfg.workers : p->workers;
    p->prefetch = f->cfg.prefetch;
    return 0;
}

/* "<cmd>: memory: ..." after a fit. */
static void say_memory(const char *cmd, const pf_flags *f, FILE *out)
{
    const char *what = f->mem_shrunk;
    unsigned np = f->mem_pipelines ? f->mem_pipelines : 1;
    char a[32], b[32], parts[400];
    size_t k = 0;
    for (int i = 0; i < SL_MEM_NPARTS && k < sizeof parts; i++) {
        char h[32];
        if (i == SL_MEM_REMOTE && !f->mem.remote)
            continue;
        int n = snprintf(parts + k, sizeof parts - k, "%s%s %s", k ? ", " : "",
                         sl_mem_part_name((sl_mem_part)i), mib(f->mem.part[i], h, sizeof h));
        k += n > 0 ? (size_t)n : 0;
    }
    char per[48] = "", ev[160] = "";
    if (np > 1)
        snprintf(per, sizeof per, "%u pipelines of ", np);
    if (f->mem.eval) {
        char e[32];
        int n = snprintf(ev, sizeof ev, "; beside each, an evaluation pipeline of %s",
                         mib(f->mem.eval, e, sizeof e));
        if (f->mem_eval_split[0] && n > 0 && (size_t)n < sizeof ev)
            snprintf(ev + n, sizeof ev - (size_t)n, " over split '%.60s'", f->mem_eval_split);
    }
    fprintf(out, "%s: memory: %s of --memory-budget %s (%s%s%s); %s%s\n", cmd,
            mib((f->mem.total + f->mem.eval) * np, a, sizeof a),
            mib(f->memory_budget, b, sizeof b), per, parts, ev,
            *what ? "shrunk to fit: " : "nothing shrunk", what);
}

int par_plan_apply(const char *cmd, pf_flags *f, sl_par_request *q, sl_par_plan *p, FILE *out)
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
        q->cpus > 1) {
        double t0 = sl_now_s();
        q->free_cores = sl_cpus_free(q->cpus, PAR_PROBE_S);
        q->probe_s = sl_now_s() - t0; /* what it took, said beside what it found */
    }
    sl_par_choose(q, p);
    f->cfg.workers = p->workers;
    f->cfg.readers = p->readers;
    f->cfg.prefetch = p->prefetch;
    /* what was not given is tuned online within what is started
     * (pipeline/tune.c): the workers chosen here, the ring's slots */
    f->cfg.tune = (q->workers ? 0 : SL_TUNE_WORKERS) | (q->prefetch ? 0 : SL_TUNE_PREFETCH) |
                  (f->io.inflight ? 0 : SL_TUNE_INFLIGHT); /* remote reads only */
    int fit = f->memory_budget && f->cfg.data;
    if (fit && fit_memory(cmd, f, q, p))
        return -1;
    char prefetch[32] = "auto";
    if (p->prefetch)
        snprintf(prefetch, sizeof prefetch, "%u", p->prefetch);
    char *budget = p->budget;
    if (f->cpus > 0)
        snprintf(budget, sizeof p->budget, "--cpus %d; this process may use %s", f->cpus, c.why);
    else
        snprintf(budget, sizeof p->budget, "%s usable", c.why);
    char measured[64] = "";
    if (p->free_cores > 0)
        snprintf(measured, sizeof measured, "; %.1f cores free at start-up (%.2f s)",
                 p->free_cores, p->probe_s);
    if (q->job == SL_PAR_PIPELINE)
        fprintf(out, "%s: parallelism: %u worker%s, %u reader%s, prefetch %s (%s; %s)\n", cmd,
                p->workers, p->workers == 1 ? "" : "s", p->readers, p->readers == 1 ? "" : "s",
                prefetch, budget, p->reason);
    else
        fprintf(out, "%s: parallelism: %s; %u worker%s and %u reader%s per pipeline, prefetch "
                "%s (%s%s)\n", cmd, p->reason, p->workers, p->workers == 1 ? "" : "s",
                p->readers, p->readers == 1 ? "" : "s", prefetch, budget, measured);
    if (fit) {
        say_memory(cmd, f, out);
        pf_rss_mark(f);
    }
    fflush(out);
    return 0;
}

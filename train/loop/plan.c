/*
 * train/loop/plan.c - sl_par_choose: replicas x threads, decode workers,
 * readers and prefetch within a CPU budget (train.h, issue 43).
 *
 * Why replicas before threads. A replica's threads meet at a barrier at
 * the end of every op (oneDNN's and sl_par_for's OpenMP regions, dozens a
 * step). When another process holds one of the cores, every barrier waits
 * for the thread that is not running: ResNet-20 at 28 px fell from 1,041
 * images/s to 176 with one busy shell loop beside it, while one thread
 * kept 546 and two replicas of one thread 642 (issue 43). This tree, on a
 * machine loaded by other builds plus one busy loop (40 steps, medians of
 * 3, interleaved): the all-core default 22 images/s, the same with
 * OMP_WAIT_POLICY=passive 44, one thread 142, two replicas of one thread
 * 222. A passive wait halves the loss, but the barrier still waits for a
 * thread without a core. Replicas of one thread each meet once a step (the
 * gradient all-reduce), so a busy core costs its share of the CPU and no
 * more; on a quiet machine they are as fast or faster (1,079 against
 * 1,041). So the budget goes to replicas, one per core, as far as the
 * global batch splits into slices of at least SL_PAR_MIN_SLICE images
 * (batch norm's statistics are over a replica's slice: below 16 they get
 * noisy; Wu & He 2018, "Group Normalization", fig. 1), and the cores left
 * go to threads per replica when a step is big enough to split
 * (SL_PAR_THREAD_GMAC), else to the decode workers.
 *
 * What may change what a run computes. The pipeline's workers, readers
 * and prefetch never do (pipeline.h, Determinism). Replicas do (each
 * replica's batch norm sees its slice; --sync-bn makes them agree up to
 * summation order), and so do the threads per replica: oneDNN's
 * convolutions give other bits on another thread count (its backward
 * reductions split by thread; the passes of train/ops/par_cpu.c do not),
 * measured: two replicas of one thread and of two differ after 3 steps,
 * in fp32 and bf16. So the whole split depends on the budget, the batch
 * and the model only: the same --cpus gives the same run. The start-up
 * measurement (common/cpus.h's sl_cpus_free, 0.05 s) is reported (a busy
 * machine is why a run is slower than the last), and changes nothing.
 *
 * The pipeline's threads. Decoding is a small share of a CPU training
 * step (a 28 px PNG decodes in microseconds, a step of ResNet-20 takes
 * about a millisecond an image on one core; a 224 px JPEG ~3 ms against
 * ResNet-50's ~100 ms an image), and a worker waiting on a full ring takes
 * no CPU, so each replica's pipeline gets one worker (more when cores are
 * left over) and the pipeline's two readers (they wait on reads more than
 * they compute: one reader under --shuffle global, a pread per record, cost
 * the demo's recipe a quarter of its rate on a loaded machine). On cuda the compute is the GPU's: one core drives it, the
 * others decode. The pipeline alone (profile, a Python loader) gets a
 * worker per core.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/train.h"

/* Smallest slice of the global batch a replica gets when the plan chooses
 * the replicas. */
#define SL_PAR_MIN_SLICE 16
/* Forward multiply-adds (G) of one replica's step below which its ops are
 * too small to split over threads (ResNet-20 width 8 at 28 px, 32 images:
 * 0.25 G, slower on two threads than one: train/ops/exec.c's figures). */
#define SL_PAR_THREAD_GMAC 4.0

/* Forward multiply-adds per image, G: torchvision's published figures
 * (resnet18 1.81, resnet50 4.09 "GFLOPS", which are multiply-adds, at 224
 * px width 64) and ResNet-20's 40.8 M at 32 px width 16 (He et al. 2016,
 * CIFAR-10), scaled by width squared and pixels. */
static double gmac_per_image(const sl_par_request *q)
{
    double base, w0, s0;
    switch (q->arch) {
    case SL_ARCH_RESNET20: base = 0.0408, w0 = 16, s0 = 32; break;
    case SL_ARCH_RESNET18: base = 1.814, w0 = 64, s0 = 224; break;
    case SL_ARCH_RESNET50: base = 4.089, w0 = 64, s0 = 224; break;
    default: return 0;
    }
    double w = q->width > 0 ? q->width : w0;
    double h = q->height ? q->height : s0, iw = q->image_width ? q->image_width : s0;
    return base * (w / w0) * (w / w0) * (h * iw) / (s0 * s0);
}

/* The replicas the plan chooses: one per core while the batch splits
 * evenly into slices of at least SL_PAR_MIN_SLICE. */
static int choose_replicas(unsigned batch, int cpus)
{
    for (int r = cpus; r > 1; r--)
        if (batch % (unsigned)r == 0 && batch / (unsigned)r >= SL_PAR_MIN_SLICE)
            return r;
    return 1;
}

/* Threads per replica when cores are left after the replicas: only for a
 * step big enough to split. *why gets what decided. */
static int choose_threads(const sl_par_request *q, int reps, double gmac_step,
                          const char **why)
{
    int t = q->cpus / reps > 0 ? q->cpus / reps : 1;
    *why = "";
    if (t > 1 && gmac_step < SL_PAR_THREAD_GMAC) {
        *why = "a step too small to split over threads";
        t = 1;
    }
    return t;
}

static void choose_compute(const sl_par_request *q, sl_par_plan *p, char *note, size_t cap)
{
    const char *why = "";
    double step;
    if (q->backend == SL_BACKEND_CUDA) {
        /* one process per GPU (mirrored on cuda runs under mpirun) */
        p->strategy = q->strategy >= 0 ? (sl_strategy)q->strategy : SL_STRATEGY_SINGLE;
        p->replicas = 1;
        p->threads = q->threads > 0 ? q->threads : 1;
        snprintf(note, cap, "the GPU computes: 1 core drives it, the others decode");
        return;
    }
    if (q->job == SL_PAR_EVAL) {
        p->strategy = SL_STRATEGY_SINGLE;
        p->replicas = 1;
        step = p->gmac_per_image * q->batch;
        p->threads = q->threads > 0 ? q->threads : choose_threads(q, 1, step, &why);
        snprintf(note, cap, "%s%s", q->threads > 0 ? "threads as given" : "", why);
        return;
    }
    /* train. --threads alone keeps its meaning: one replica of that many */
    if (q->strategy >= 0)
        p->strategy = (sl_strategy)q->strategy;
    else
        p->strategy = q->threads > 0 || q->mpi ? SL_STRATEGY_SINGLE : SL_STRATEGY_MIRRORED;
    if (p->strategy == SL_STRATEGY_SINGLE || q->mpi)
        p->replicas = 1;
    else if (q->replicas > 0)
        p->replicas = q->replicas;
    else if (p->strategy == SL_STRATEGY_PS)
        p->replicas = q->cpus; /* workers do not split the batch */
    else
        p->replicas = choose_replicas(q->batch, q->cpus);
    if (q->strategy < 0 && p->replicas == 1)
        p->strategy = SL_STRATEGY_SINGLE; /* one replica needs no all-reduce */
    unsigned slice = p->strategy == SL_STRATEGY_PS ? q->batch : q->batch / (unsigned)p->replicas;
    step = p->gmac_per_image * slice;
    if (q->threads > 0) {
        /* the config's threads are the total (loop/replica.c shares them) */
        p->threads = q->threads / p->replicas > 0 ? q->threads / p->replicas : 1;
        snprintf(note, cap, "threads as given");
        return;
    }
    p->threads = choose_threads(q, p->replicas, step, &why);
    if (q->strategy < 0 && p->replicas > 1 && p->threads == 1)
        snprintf(note, cap, "%u images each; replicas of one thread meet once a step, not at "
                 "every op", slice);
    else if (q->strategy < 0 && p->replicas > 1)
        snprintf(note, cap, "%u images each, a step big enough to split over threads", slice);
    else if (q->strategy < 0 && q->cpus > 1 && !q->mpi)
        snprintf(note, cap, "batch %u does not split into slices of %d or more%s%s", q->batch,
                 SL_PAR_MIN_SLICE, *why ? "; " : "", why);
    else if (q->strategy < 0)
        snprintf(note, cap, "%s%s%s", q->mpi ? "one replica per process (mpirun)" : "one core",
                 *why ? "; " : "", why);
    else
        snprintf(note, cap, "%s as given%s%s", sl_strategy_name(p->strategy), *why ? "; " : "",
                 why);
}

void sl_par_choose(const sl_par_request *q, sl_par_plan *p)
{
    char note[200] = "";
    memset(p, 0, sizeof *p);
    p->cpus = q->cpus > 0 ? q->cpus : 1;
    sl_par_request r = *q;
    r.cpus = p->cpus;
    p->free_cores = q->free_cores;
    p->probe_s = q->probe_s;
    p->prefetch = q->prefetch;
    if (q->job == SL_PAR_PIPELINE) {
        p->workers = q->workers ? q->workers : (unsigned)p->cpus;
        p->readers = q->readers ? q->readers : 2;
        snprintf(p->reason, sizeof p->reason, "%d core%s: the pipeline alone, a worker per core",
                 p->cpus, p->cpus == 1 ? "" : "s");
        return;
    }
    p->gmac_per_image = gmac_per_image(q);
    choose_compute(&r, p, note, sizeof note);
    /* the pipeline: the cores the compute leaves, shared by the replicas'
     * pipelines, at least one worker each */
    int used = q->backend == SL_BACKEND_CUDA ? 1 : p->replicas * p->threads;
    int spare = p->cpus - used;
    int w = spare / p->replicas;
    p->workers = q->workers ? q->workers : (unsigned)(w > 1 ? w : 1);
    p->readers = q->readers ? q->readers : 2;
    snprintf(p->reason, sizeof p->reason, "%d replica%s x %d thread%s on %d core%s: %s",
             p->replicas, p->replicas == 1 ? "" : "s", p->threads, p->threads == 1 ? "" : "s",
             p->cpus, p->cpus == 1 ? "" : "s", note);
}

/* s with '"' and '\\' escaped into buf (JSON string contents; the plan's
 * texts hold no control characters). */
static const char *json_esc(const char *s, char *buf, size_t cap)
{
    size_t k = 0;
    for (; *s && k + 3 < cap; s++) {
        if (*s == '"' || *s == '\\')
            buf[k++] = '\\';
        buf[k++] = *s;
    }
    buf[k] = '\0';
    return buf;
}

void sl_par_json(const sl_par_plan *p, char *buf, size_t cap)
{
    char why[512], budget[320];
    snprintf(buf, cap, "{\"cpus\": %d, \"strategy\": \"%s\", \"replicas\": %d, \"threads\": %d, "
             "\"workers\": %u, \"readers\": %u, \"prefetch\": %u, \"free_cores\": %.2f, "
             "\"probe_s\": %.3f, \"gmac_per_image\": %.4g, \"budget\": \"%s\", "
             "\"reason\": \"%s\"}", p->cpus, sl_strategy_name(p->strategy), p->replicas,
             p->threads, p->workers, p->readers, p->prefetch, p->free_cores, p->probe_s,
             p->gmac_per_image, json_esc(p->budget, budget, sizeof budget),
             json_esc(p->reason, why, sizeof why));
}

/*
 * perf/scaling.c - data-parallel scaling on this machine's CPUs: images/s
 * of the training loop (pipeline included) with one replica and with N
 * mirrored replicas, and the fraction of step time the replicas spend
 * waiting for the gradient all-reduce, with buckets overlapped with
 * backward and without (perf/RESULTS.md, scaling).
 *
 *   scaling --data DIR [--image-size 28] [--model resnet20] [--width 16]
 *           [--batch 128] [--steps 60] [--replicas 2] [--reps 3] [--bucket-mb 25]
 *           [--shuffle global]
 *
 * Configurations, each run --reps times in turn (so drifting load hits all
 * of them), medians reported:
 *   single-1t    one replica, one BLAS thread
 *   single-Nt    one replica, N BLAS threads (the same cores as N replicas)
 *   mirrored     N replicas x 1 thread, buckets all-reduced during backward
 *   no-overlap   N replicas x 1 thread, all-reduce after backward
 * images/s is sl_train_result.images_per_sec (training steps only: the
 * steps' wall time, pipeline waits included, evaluation excluded); the
 * wait fraction is sl_train_result.comm_wait_frac (time in all-reduce
 * waits / step time, mean over replicas). Validation first: every run's
 * final loss must be finite and each mirrored run's replicas must end with
 * identical weights (--check-every at the last step).
 *
 * Output: a table on stderr and one JSON line on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

static void die(const char *m)
{
    fprintf(stderr, "scaling: %s\n", m);
    exit(1);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { C_SINGLE1, C_SINGLEN, C_MIRRORED, C_NOOVERLAP, C_N };
static const char *const cname[C_N] = {"single-1t", "single-Nt", "mirrored", "no-overlap"};

int main(int argc, char **argv)
{
    const char *data = NULL, *model = "resnet20", *shuffle = "global";
    int size = 28, width = 16, batch = 128, steps = 60, replicas = 2, reps = 3;
    double bucket_mb = 25;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--data") && v) data = argv[++i];
        else if (!strcmp(a, "--image-size") && v) size = atoi(argv[++i]);
        else if (!strcmp(a, "--model") && v) model = argv[++i];
        else if (!strcmp(a, "--width") && v) width = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && v) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--steps") && v) steps = atoi(argv[++i]);
        else if (!strcmp(a, "--replicas") && v) replicas = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--bucket-mb") && v) bucket_mb = atof(argv[++i]);
        else if (!strcmp(a, "--shuffle") && v) shuffle = argv[++i];
        else {
            fprintf(stderr, "usage: scaling --data DIR [--image-size 28] [--model resnet20] "
                    "[--width 16] [--batch 128] [--steps 60] [--replicas 2] [--reps 3] "
                    "[--bucket-mb 25] [--shuffle global|buffer]\n");
            return 2;
        }
    }
    if (!data || reps < 1 || steps < 2 || replicas < 2 || batch % replicas)
        die("need --data, --reps >= 1, --steps >= 2, --replicas >= 2 dividing --batch");
    sl_arch arch;
    if (sl_arch_parse(model, &arch))
        die("bad --model");
    double ips[C_N][16], wait[C_N][16];
    if (reps > 16)
        reps = 16;
    FILE *devnull = fopen("/dev/null", "w");
    for (int rep = 0; rep < reps; rep++) {
        for (int c = 0; c < C_N; c++) {
            sl_train_config t;
            sl_train_config_init(&t);
            t.data.data = data;
            t.data.split = "train";
            t.data.height = t.data.width = size;
            t.data.batch = (unsigned)batch;
            t.data.shuffle = !strcmp(shuffle, "buffer") ? SL_SHUFFLE_BUFFER : SL_SHUFFLE_GLOBAL;
            t.data.scale_min = 1.0f;
            t.data.seed = 1;
            t.data.workers = 1;
            t.data.readers = 1;
            t.eval_split = NULL;
            t.model.arch = arch;
            t.model.width = width;
            t.max_steps = steps;
            t.base_lr = 0.1;
            t.progress = devnull;
            t.threads = c == C_SINGLE1 ? 1 : replicas;
            if (c >= C_MIRRORED) {
                t.strategy = SL_STRATEGY_MIRRORED;
                t.replicas = replicas;
                t.bucket_mb = bucket_mb;
                t.no_overlap = c == C_NOOVERLAP;
                t.check_every = steps;
            }
            sl_train_result r;
            if (sl_train_run(&t, &r)) {
                fprintf(stderr, "scaling: %s: %s\n", cname[c], sl_errmsg());
                return 1;
            }
            if (!isfinite(r.final_loss))
                die("a run's loss is not finite");
            ips[c][rep] = r.images_per_sec;
            wait[c][rep] = r.comm_wait_frac;
            fprintf(stderr, "scaling: rep %d %-10s %7.1f images/s  all-reduce wait %5.1f%%\n",
                    rep + 1, cname[c], r.images_per_sec, 100 * r.comm_wait_frac);
        }
    }
    fclose(devnull);
    double m[C_N], w[C_N];
    for (int c = 0; c < C_N; c++) {
        m[c] = median(ips[c], reps);
        w[c] = median(wait[c], reps);
    }
    fprintf(stderr, "\n%s width %d, %d px, global batch %d, %d steps, %d replicas, median of %d\n",
            model, width, size, batch, steps, replicas, reps);
    fprintf(stderr, "%-11s %10s %12s %12s %14s\n", "config", "images/s", "vs single-1t",
                    "vs single-Nt", "all-reduce wait");
    for (int c = 0; c < C_N; c++)
        fprintf(stderr, "%-11s %10.1f %11.2fx %11.2fx %13.1f%%\n", cname[c], m[c],
                m[c] / m[C_SINGLE1], m[c] / m[C_SINGLEN], 100 * w[c]);
    printf("{\"bench\":\"scaling\",\"model\":\"%s\",\"width\":%d,\"image_size\":%d,\"batch\":%d,"
           "\"steps\":%d,\"replicas\":%d,\"reps\":%d", model, width, size, batch, steps, replicas,
           reps);
    for (int c = 0; c < C_N; c++)
        printf(",\"%s\":{\"images_per_sec\":%.2f,\"allreduce_wait\":%.4f}", cname[c], m[c], w[c]);
    printf(",\"efficiency_vs_single_1t\":%.4f}\n", m[C_MIRRORED] / (replicas * m[C_SINGLE1]));
    return 0;
}

/*
 * perf/train_cpu.c - sluice's training step on the cpu backend, and the
 * OpenBLAS SGEMM ceiling it is measured against (perf/train-cpu runs both
 * beside PyTorch; perf/RESULTS.md, train-cpu, has the results).
 *
 *   train_cpu [--arch resnet50] [--batch 32] [--image-size 224] [--threads N]
 *             [--warmup 2] [--steps 3] [--lr 0.05] [--seed 1] [--precision fp32|bf16]
 *   train_cpu --sgemm [--threads N] [--reps 5]
 *   train_cpu --peak [--threads N]
 *
 * Training: synthetic input (one fixed batch, NHWC f32 U(-2, 2), labels
 * uniform over the classes), the default model config (zero_init_residual,
 * BN momentum 0.1) and SGD (momentum 0.9, weight decay 5e-5), threads = BLAS
 * threads (sl_exec_init). --precision (default: sluice train's, bf16 where
 * sl_cpu_bf16 says the CPU has bf16 dot products) sets the exec's
 * activation type and places the model on it, as sluice train does; the
 * JSON line names it, oneDNN's effective ISA and the implementations its
 * primitives chose (the same names ONEDNN_VERBOSE prints). A step is what sluice train does per batch:
 * sl_model_forward (train) + xent_fwd_bwd + sl_model_backward + sl_sgd_step.
 * It validates first: the --warmup steps (at least 2) must give finite
 * losses, the last lower than the first (the fixed batch is being learned);
 * then it times --steps steps, each of which must also keep the loss finite
 * and below the first. images/s = batch * steps / their wall time; images
 * per CPU-second divides by the process's CPU time over the same steps
 * (every thread), a figure other load on a shared machine disturbs less.
 *
 * SLUICE_TRAIN_PROFILE=1 wraps the backend's op table (the model calls every
 * op through sl_exec.ops) and adds, per op, the seconds and the calls per
 * timed step, plus the conv FLOPs (2*n*p*q*k*r*s*c per conv pass) and the
 * sgd step; "other" is the step's time outside any op (the model's own
 * glue). Two clock reads per op call, ~300 calls a step: nothing measurable
 * against seconds-long steps.
 *
 * --sgemm: cblas_sgemm GFLOP/s (2*M*N*K / s, median of --reps), row-major,
 * for a square 2048^3 and for four conv-as-GEMM shapes of ResNet-50 at batch
 * 32 in sluice's layout, y (n*p*q, k) = patches (n*p*q, r*s*c) x w^T
 * (NoTrans, Trans). The square's GFLOP per CPU-second is reported as well.
 *
 * --peak: the bf16 matrix units' peak on this machine, measured: each of
 * --threads threads runs a loop of independent vdpbf16ps zmm instructions
 * (AVX512-BF16's dot product: 16 lanes x 2 products + 2 adds = 64 flops;
 * 12 accumulators, more than latency x throughput) for about a second of
 * its own CPU time; flops/s = instructions x 64 / CPU-second, summed over
 * the threads (per CPU-second: a thread another job's process scheduled
 * out loses wall time, not the unit's throughput). Beside it, the core
 * clock measured by a chain of dependent integer adds (one cycle each on
 * every x86 core since the P6), also per CPU-second, so the report can
 * say instructions per cycle. The same for vfmadd231ps zmm (fp32's FMA
 * peak, 32 flops an instruction), the fp32 step's ceiling. On a CPU with
 * AMX the tiles' peak is higher and is not measured here (tdpbf16ps; the
 * dev machine has none). Without AVX512-BF16: an error.
 *
 * Output: one JSON line on stdout; progress on stderr.
 */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_NAME "train_cpu"
#include "perf/bench_util.h"
#include "train/train.h"
#include "train/ops/cpu_int.h" /* white-box: oneDNN's implementations */
#include "train/ops/ops.h"   /* white-box: stack sl_exec and its op table */

/* ------------------------------------------------------------ the profile */

enum {
    P_CONV_FWD, P_CONV_BWD_DATA, P_CONV_BWD_FILTER, P_BN_FWD_TRAIN, P_BN_FWD_EVAL, P_BN_BWD,
    P_BN_FWD_ACT, P_BN_BWD_ACT, P_RELU_FWD, P_RELU_BWD, P_ADD, P_MAXPOOL_FWD, P_MAXPOOL_BWD,
    P_GAP_FWD, P_GAP_BWD, P_FC_FWD, P_FC_BWD, P_XENT, P_N
};
static const char *const p_name[P_N] = {
    "conv_fwd", "conv_bwd_data", "conv_bwd_filter", "bn_fwd_train", "bn_fwd_eval", "bn_bwd",
    "bn_fwd_train_act", "bn_bwd_act", "relu_fwd", "relu_bwd", "add", "maxpool_fwd",
    "maxpool_bwd", "gap_fwd", "gap_bwd", "fc_fwd", "fc_bwd", "xent_fwd_bwd",
};
static struct {
    double sec[P_N];
    int64_t calls[P_N];
    double conv_flop[3]; /* fwd, bwd_data, bwd_filter */
} prof;
static const sl_ops *real; /* the backend's table, wrapped by prof_ops */

#define TIMED(slot, call)                      \
    do {                                       \
        double t0_ = now_s();                  \
        int rc_ = (call);                      \
        prof.sec[slot] += now_s() - t0_;       \
        prof.calls[slot]++;                    \
        return rc_;                            \
    } while (0)

static double conv_flop(const sl_conv_shape *s)
{
    return 2.0 * s->n * s->p * s->q * (double)s->k * s->r * s->s * s->c;
}
static int w_conv_fwd(sl_exec *e, const sl_conv_shape *s, const float *x, const float *w, float *y)
{
    prof.conv_flop[0] += conv_flop(s);
    TIMED(P_CONV_FWD, real->conv_fwd(e, s, x, w, y));
}
static int w_conv_bwd_data(sl_exec *e, const sl_conv_shape *s, const float *dy, const float *w,
                           float *dx)
{
    prof.conv_flop[1] += conv_flop(s);
    TIMED(P_CONV_BWD_DATA, real->conv_bwd_data(e, s, dy, w, dx));
}
static int w_conv_bwd_filter(sl_exec *e, const sl_conv_shape *s, const float *x, const float *dy,
                             float *dw)
{
    prof.conv_flop[2] += conv_flop(s);
    TIMED(P_CONV_BWD_FILTER, real->conv_bwd_filter(e, s, x, dy, dw));
}
static int w_bn_fwd_train(sl_exec *e, int64_t rows, int c, const float *x, const float *g,
                          const float *b, float mom, float eps, float *rm, float *rv, float *y,
                          float *sm, float *si)
{
    TIMED(P_BN_FWD_TRAIN, real->bn_fwd_train(e, rows, c, x, g, b, mom, eps, rm, rv, y, sm, si));
}
static int w_bn_fwd_eval(sl_exec *e, int64_t rows, int c, const float *x, const float *g,
                         const float *b, const float *rm, const float *rv, float eps, float *y)
{
    TIMED(P_BN_FWD_EVAL, real->bn_fwd_eval(e, rows, c, x, g, b, rm, rv, eps, y));
}
static int w_bn_bwd(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                    const float *g, const float *sm, const float *si, float *dx, float *dg,
                    float *db)
{
    TIMED(P_BN_BWD, real->bn_bwd(e, rows, c, x, dy, g, sm, si, dx, dg, db));
}
static int w_bn_fwd_act(sl_exec *e, int64_t rows, int c, const float *x, const float *g,
                        const float *b, float mom, float eps, float *rm, float *rv,
                        const float *r, int relu, float *y, float *sm, float *si)
{
    TIMED(P_BN_FWD_ACT,
          real->bn_fwd_train_act(e, rows, c, x, g, b, mom, eps, rm, rv, r, relu, y, sm, si));
}
static int w_bn_bwd_act(sl_exec *e, int64_t rows, int c, const float *x, const float *z,
                        float *dz, const float *g, const float *sm, const float *si, float *dx,
                        float *dg, float *db)
{
    TIMED(P_BN_BWD_ACT, real->bn_bwd_act(e, rows, c, x, z, dz, g, sm, si, dx, dg, db));
}
static int w_relu_fwd(sl_exec *e, int64_t n, const float *x, float *y)
{
    TIMED(P_RELU_FWD, real->relu_fwd(e, n, x, y));
}
static int w_relu_bwd(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    TIMED(P_RELU_BWD, real->relu_bwd(e, n, y, dy, dx));
}
static int w_add(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    TIMED(P_ADD, real->add(e, n, a, b, y));
}
static int w_maxpool_fwd(sl_exec *e, const sl_pool_shape *s, const float *x, float *y,
                         int32_t *arg)
{
    TIMED(P_MAXPOOL_FWD, real->maxpool_fwd(e, s, x, y, arg));
}
static int w_maxpool_bwd(sl_exec *e, const sl_pool_shape *s, const float *dy,
                         const int32_t *arg, float *dx)
{
    TIMED(P_MAXPOOL_BWD, real->maxpool_bwd(e, s, dy, arg, dx));
}
static int w_gap_fwd(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    TIMED(P_GAP_FWD, real->gap_fwd(e, n, hw, c, x, y));
}
static int w_gap_bwd(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    TIMED(P_GAP_BWD, real->gap_bwd(e, n, hw, c, dy, dx));
}
static int w_fc_fwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                    const float *b, float *y)
{
    TIMED(P_FC_FWD, real->fc_fwd(e, n, in, out, x, w, b, y));
}
static int w_fc_bwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db)
{
    TIMED(P_FC_BWD, real->fc_bwd(e, n, in, out, x, w, dy, dx, dw, db));
}
static int w_xent(sl_exec *e, int n, int classes, const float *logits, const int32_t *labels,
                  float smoothing, float *loss, float *dlogits, int *correct)
{
    TIMED(P_XENT, real->xent_fwd_bwd(e, n, classes, logits, labels, smoothing, loss, dlogits,
                                     correct));
}

/* The backend's table wrapped; its fused slots only where it has them (a
 * NULL slot makes the model run the unfused ops). */
static sl_ops prof_ops = {
    .name = "profiled", .conv_fwd = w_conv_fwd, .conv_bwd_data = w_conv_bwd_data,
    .conv_bwd_filter = w_conv_bwd_filter, .bn_fwd_train = w_bn_fwd_train,
    .bn_fwd_eval = w_bn_fwd_eval, .bn_bwd = w_bn_bwd, .relu_fwd = w_relu_fwd,
    .relu_bwd = w_relu_bwd, .add = w_add, .maxpool_fwd = w_maxpool_fwd,
    .maxpool_bwd = w_maxpool_bwd, .gap_fwd = w_gap_fwd, .gap_bwd = w_gap_bwd,
    .fc_fwd = w_fc_fwd, .fc_bwd = w_fc_bwd, .xent_fwd_bwd = w_xent,
};

/* ------------------------------------------------------------- training */

typedef struct opts {
    sl_arch arch;
    int batch, size, threads, warmup, steps, reps, sgemm, peak;
    sl_dtype precision; /* -1: sluice train's default */
    float lr;
    uint64_t seed;
} opts;

static float urand(uint64_t *s, float lo, float hi)
{
    *s += 0x9e3779b97f4a7c15ull; /* splitmix64 */
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)((double)(z >> 11) * 0x1.0p-53);
}

/* CPU seconds of the whole process (every thread: OpenBLAS's too). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One training step; returns the loss (dies on any error). */
static float step(sl_model *m, sl_exec *e, sl_sgd *o, const float *x, const int32_t *labels, int n,
                  float *dl, float lr, double *sgd_sec)
{
    int classes = sl_model_config_of(m)->classes;
    const float *logits = NULL;
    float loss = 0;
    if (sl_model_forward(m, e, x, n, 1, &logits) != SL_OK ||
        e->ops->xent_fwd_bwd(e, n, classes, logits, labels, 0.0f, &loss, dl, NULL) != SL_OK ||
        sl_model_backward(m, e, dl, NULL) != SL_OK)
        die("step: %s", sl_errmsg());
    double t0 = now_s();
    if (sl_sgd_step(o, lr) != SL_OK)
        die("sgd: %s", sl_errmsg());
    *sgd_sec += now_s() - t0;
    return loss;
}

static int run_train(const opts *op)
{
    int profile = getenv("SLUICE_TRAIN_PROFILE") && strcmp(getenv("SLUICE_TRAIN_PROFILE"), "0");
    sl_exec e;
    if (sl_exec_init(&e, SL_BACKEND_CPU, op->threads) != SL_OK)
        die("sl_exec_init: %s", sl_errmsg());
    sl_dtype act = op->precision;
    if ((int)act < 0) {
        sl_train_config tc;
        sl_train_config_init(&tc);
        act = sl_train_precision(&tc);
    }
    if (sl_exec_set_act(&e, act) != SL_OK)
        die("--precision %s: %s", sl_precision_name(act), sl_errmsg());
    if (profile) {
        real = e.ops;
        prof_ops.bn_fwd_train_act = real->bn_fwd_train_act ? w_bn_fwd_act : NULL;
        prof_ops.bn_bwd_act = real->bn_bwd_act ? w_bn_bwd_act : NULL;
        e.ops = &prof_ops;
    }
    sl_model_config cfg = SL_MODEL_CONFIG_INIT;
    cfg.arch = op->arch;
    cfg.seed = op->seed;
    sl_model *m = NULL;
    double t0 = now_s();
    if (sl_model_create(&cfg, op->batch, op->size, op->size, &m) != SL_OK ||
        sl_model_place(m, &e) != SL_OK)
        die("sl_model_create: %s", sl_errmsg());
    int nt = 0;
    sl_tensor_info *t = sl_model_tensors(m, &nt);
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    sl_sgd *o = NULL;
    if (sl_sgd_create(&sc, t, nt, &o) != SL_OK)
        die("sl_sgd_create: %s", sl_errmsg());
    const char *isa = NULL;
    sl_cpu_bf16(&isa);
    fprintf(stderr, "train_cpu: %s, %s (oneDNN ISA %s), %lld params, %.0f MiB, built in %.1f s\n",
            sl_arch_name(op->arch), sl_precision_name(act), sl_dnnl_isa(),
            (long long)sl_model_param_count(m),
            (double)sl_model_bytes(m) / 1048576.0, now_s() - t0);

    size_t xn = (size_t)op->batch * (size_t)op->size * (size_t)op->size * 3;
    float *x = malloc(xn * sizeof *x);
    int32_t *labels = malloc((size_t)op->batch * sizeof *labels);
    float *dl = malloc((size_t)op->batch * (size_t)cfg.classes * sizeof *dl);
    double *sec = malloc((size_t)op->steps * sizeof *sec);
    float *loss = malloc((size_t)(op->warmup + op->steps) * sizeof *loss);
    if (!x || !labels || !dl || !sec || !loss)
        die("out of memory for the batch");
    uint64_t s = op->seed;
    for (size_t i = 0; i < xn; i++)
        x[i] = urand(&s, -2.0f, 2.0f);
    for (int i = 0; i < op->batch; i++)
        labels[i] = (int32_t)(urand(&s, 0.0f, 1.0f) * (float)cfg.classes) % cfg.classes;

    /* validate (and warm up: scratch grown, pages touched) */
    double sgd_sec = 0;
    for (int i = 0; i < op->warmup; i++) {
        double ts = now_s();
        loss[i] = step(m, &e, o, x, labels, op->batch, dl, op->lr, &sgd_sec);
        fprintf(stderr, "train_cpu: warmup step %d: loss %.5f, %.2f s\n", i, (double)loss[i],
                now_s() - ts);
        if (!isfinite(loss[i]))
            die("validation: warmup step %d: loss %g", i, (double)loss[i]);
    }
    if (!(loss[op->warmup - 1] < loss[0]))
        die("validation: the loss on a fixed batch did not fall over %d steps (%g -> %g)",
            op->warmup, (double)loss[0], (double)loss[op->warmup - 1]);

    memset(&prof, 0, sizeof prof);
    sgd_sec = 0;
    double total = 0, c0 = cpu_s();
    for (int i = 0; i < op->steps; i++) {
        double ts = now_s();
        float l = step(m, &e, o, x, labels, op->batch, dl, op->lr, &sgd_sec);
        sec[i] = now_s() - ts;
        total += sec[i];
        loss[op->warmup + i] = l;
        fprintf(stderr, "train_cpu: step %d: loss %.5f, %.2f s\n", i, (double)l, sec[i]);
        if (!isfinite(l) || !(l < loss[0]))
            die("step %d: loss %g (first warmup step: %g)", i, (double)l, (double)loss[0]);
    }
    double cpu = cpu_s() - c0;

    char impls[1024];
    sl_dnnl_impls(impls, sizeof impls);
    printf("{\"system\":\"sluice-%s\",\"precision\":\"%s\",\"conv\":\"%s\",\"isa\":\"%s\","
           "\"impls\":\"%s\",\"arch\":\"%s\",\"batch\":%d,\"image_size\":%d,"
           "\"threads\":%d,\"steps\":%d,\"images_per_sec\":%.3f,\"seconds\":%.3f,"
           "\"cpu_seconds\":%.3f,\"images_per_cpu_sec\":%.4f,"
           "\"step_median_s\":%.3f,\"model_mib\":%.0f,\"losses\":[",
           sl_precision_name(act), sl_precision_name(act), sl_train_cpu_conv(), sl_dnnl_isa(),
           impls, sl_arch_name(op->arch), op->batch, op->size, e.threads, op->steps,
           op->batch * op->steps / total, total, cpu, op->batch * op->steps / cpu,
           median(sec, op->steps),
           (double)sl_model_bytes(m) / 1048576.0);
    for (int i = 0; i < op->warmup + op->steps; i++)
        printf("%s%.5f", i ? "," : "", (double)loss[i]);
    printf("]");
    if (profile) {
        /* per timed step */
        double in_ops = 0, k = 1.0 / op->steps;
        printf(",\"profile\":{");
        for (int i = 0; i < P_N; i++) {
            in_ops += prof.sec[i];
            printf("\"%s\":{\"s\":%.4f,\"calls\":%.0f},", p_name[i], prof.sec[i] * k,
                   (double)prof.calls[i] * k);
        }
        printf("\"sgd_step\":{\"s\":%.4f},\"other\":{\"s\":%.4f},\"conv_gflop\":[%.2f,%.2f,%.2f],"
               "\"conv_gflops\":[%.1f,%.1f,%.1f]}",
               sgd_sec * k, (total - in_ops - sgd_sec) * k, prof.conv_flop[0] * k * 1e-9,
               prof.conv_flop[1] * k * 1e-9, prof.conv_flop[2] * k * 1e-9,
               prof.conv_flop[0] / fmax(prof.sec[P_CONV_FWD], 1e-9) * 1e-9,
               prof.conv_flop[1] / fmax(prof.sec[P_CONV_BWD_DATA], 1e-9) * 1e-9,
               prof.conv_flop[2] / fmax(prof.sec[P_CONV_BWD_FILTER], 1e-9) * 1e-9);
    }
    printf("}\n");
    fflush(stdout);

    free(x), free(labels), free(dl), free(sec), free(loss);
    sl_sgd_destroy(o);
    sl_model_destroy(m);
    sl_exec_fini(&e);
    return 0;
}

/* ---------------------------------------------------------------- sgemm */

typedef struct gemm_shape {
    const char *name;
    int m, n, k, trans_b;
} gemm_shape;

/* ResNet-50, batch 32, 224x224, as sluice's convs call SGEMM (M = n*p*q,
 * N = k, K = r*s*c, B = weights (k, rsc) transposed). */
static const gemm_shape shapes[] = {
    {"square 2048x2048x2048", 2048, 2048, 2048, 0},
    {"layer1 3x3 (100352x64x576)", 32 * 56 * 56, 64, 576, 1},
    {"layer2 1x1 expand (25088x512x128)", 32 * 28 * 28, 512, 128, 1},
    {"layer3 3x3 (6272x256x2304)", 32 * 14 * 14, 256, 2304, 1},
    {"layer4 1x1 expand (1568x2048x512)", 32 * 7 * 7, 2048, 512, 1},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static int run_sgemm(const opts *op)
{
    openblas_set_num_threads(op->threads);
    size_t amax = 0, bmax = 0, cmax = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        size_t m = (size_t)shapes[i].m, n = (size_t)shapes[i].n, k = (size_t)shapes[i].k;
        amax = m * k > amax ? m * k : amax;
        bmax = k * n > bmax ? k * n : bmax;
        cmax = m * n > cmax ? m * n : cmax;
    }
    float *a = malloc(amax * sizeof *a), *b = malloc(bmax * sizeof *b),
          *c = malloc(cmax * sizeof *c);
    if (!a || !b || !c)
        die("out of memory for the SGEMM operands");
    uint64_t s = 1;
    for (size_t i = 0; i < amax; i++)
        a[i] = urand(&s, -1.0f, 1.0f);
    for (size_t i = 0; i < bmax; i++)
        b[i] = urand(&s, -1.0f, 1.0f);

    printf("{\"system\":\"sgemm\",\"threads\":%d,\"reps\":%d,\"shapes\":[", op->threads, op->reps);
    double conv_flop = 0, conv_sec = 0, square = 0, square_cpu = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        const gemm_shape *g = &shapes[i];
        double flop = 2.0 * g->m * g->n * (double)g->k, v[64], vc[64];
        int reps = op->reps > 64 ? 64 : op->reps;
        /* one untimed call (threads started, pages touched), then reps;
         * the first element is checked against a dot product */
        for (int r = -1; r < reps; r++) {
            double t0 = now_s(), c0 = cpu_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                        g->m, g->n, g->k, 1.0f, a, g->k, b, g->trans_b ? g->k : g->n, 0.0f, c,
                        g->n);
            if (r >= 0) {
                v[r] = flop / (now_s() - t0) * 1e-9;
                vc[r] = flop / (cpu_s() - c0) * 1e-9;
            }
        }
        double ref = 0;
        for (int kk = 0; kk < g->k; kk++)
            ref += (double)a[kk] * (double)b[g->trans_b ? (size_t)kk : (size_t)kk * (size_t)g->n];
        if (fabs(ref - c[0]) > 1e-3 * (1.0 + fabs(ref)))
            die("sgemm %s: c[0] = %g, want %g", g->name, (double)c[0], ref);
        double med = median(v, reps);
        if (i == 0)
            square = med, square_cpu = median(vc, reps);
        else
            conv_flop += flop, conv_sec += flop / (med * 1e9);
        printf("%s{\"name\":\"%s\",\"gflops\":%.1f}", i ? "," : "", g->name, med);
        fprintf(stderr, "train_cpu: sgemm %s: %.1f GFLOP/s\n", g->name, med);
    }
    printf("],\"gflops\":%.1f,\"gflops_per_cpu_sec\":%.1f,\"resnet_shapes_gflops\":%.1f}\n",
           square, square_cpu, conv_flop / conv_sec * 1e-9);
    fflush(stdout);
    free(a), free(b), free(c);
    return 0;
}

/* ----------------------------------------------------------------- peak */

#define DP_ACC 12 /* accumulators: vdpbf16ps latency (~6 cycles) x 2 per cycle at most */

/* iters x DP_ACC independent vdpbf16ps zmm (fma 0) or vfmadd231ps zmm
 * (fma 1: fp32's peak, 16 lanes x 2 = 32 flops); the sums go to *sink so
 * the loop is not dropped. */
__attribute__((target("avx512f,avx512bf16"), noinline)) static void dp_loop(uint64_t iters,
                                                                            int fma, float *sink)
{
    __m512 acc[DP_ACC];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a80); /* bf16 2^-10 */
    __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a80);
    __m512 fa = _mm512_set1_ps(0x1p-10f), fb = _mm512_set1_ps(0x1p-10f);
    for (int k = 0; k < DP_ACC; k++)
        acc[k] = _mm512_set1_ps((float)k);
    if (fma)
        for (uint64_t i = 0; i < iters; i++)
            for (int k = 0; k < DP_ACC; k++)
                acc[k] = _mm512_fmadd_ps(fa, fb, acc[k]);
    else
        for (uint64_t i = 0; i < iters; i++)
            for (int k = 0; k < DP_ACC; k++)
                acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
    __m512 t = acc[0];
    for (int k = 1; k < DP_ACC; k++)
        t = _mm512_add_ps(t, acc[k]);
    *sink = _mm512_reduce_add_ps(t);
}

typedef struct dp_arg {
    double seconds;   /* in: how long */
    int fma;          /* in: dp_loop's */
    double per_sec;   /* out: instructions per second of this thread's CPU time */
    float sink;
} dp_arg;

/* This thread's CPU time: on a shared machine a thread that is scheduled
 * out loses wall time, not cycles, so rates per CPU-second are the
 * hardware's. */
static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *dp_thread(void *p)
{
    dp_arg *a = p;
    uint64_t chunk = 1 << 20, n = 0;
    dp_loop(chunk, a->fma, &a->sink); /* warm: the unit powered up, the clock settled */
    double t0 = thread_cpu_s(), t;
    do {
        dp_loop(chunk, a->fma, &a->sink);
        n += chunk;
    } while ((t = thread_cpu_s()) - t0 < a->seconds);
    a->per_sec = (double)n * DP_ACC / (t - t0);
    return NULL;
}

/* The core clock: a chain of 16 dependent integer adds per iteration (one
 * cycle each), so cycles = 16 x iterations; the loop counter runs beside
 * it on another port. */
static double clock_hz(void)
{
    uint64_t iters = 50000000, x = 0;
    double t0 = thread_cpu_s();
    __asm__ volatile("1:\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "dec %1\n\tjnz 1b"
                     : "+r"(x), "+r"(iters)
                     :
                     : "cc");
    return 16.0 * 50000000.0 / (thread_cpu_s() - t0);
}

static int run_peak(const opts *op)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16"))
        die("--peak: this CPU has no AVX512-BF16 (vdpbf16ps)");
    double hz[3];
    for (int i = 0; i < 3; i++)
        hz[i] = clock_hz();
    int nt = op->threads;
    pthread_t *th = malloc((size_t)nt * sizeof *th);
    dp_arg *arg = calloc((size_t)nt, sizeof *arg);
    if (!th || !arg)
        die("out of memory");
    double per_sec[2] = {0, 0}; /* vdpbf16ps, vfmadd231ps */
    for (int fma = 0; fma < 2; fma++) {
        for (int i = 0; i < nt; i++) {
            arg[i] = (dp_arg){.seconds = 1.0, .fma = fma};
            if (pthread_create(&th[i], NULL, dp_thread, &arg[i]))
                die("pthread_create failed");
        }
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            per_sec[fma] += arg[i].per_sec;
        }
    }
    double clk = median(hz, 3), bf = per_sec[0] * 64.0, f32 = per_sec[1] * 32.0;
    fprintf(stderr, "train_cpu: vdpbf16ps zmm: %.3g per CPU-second on %d threads = %.1f GFLOP/s "
            "(%.2f per cycle per core); vfmadd231ps zmm: %.1f GFLOP/s (%.2f per cycle per core); "
            "clock %.2f GHz (dependent adds)\n", per_sec[0], nt, bf * 1e-9,
            per_sec[0] / (clk * nt), f32 * 1e-9, per_sec[1] / (clk * nt), clk * 1e-9);
    printf("{\"system\":\"peak\",\"threads\":%d,\"vdpbf16ps_per_sec\":%.4g,"
           "\"bf16_gflops\":%.1f,\"f32_fma_gflops\":%.1f,\"clock_ghz\":%.3f,"
           "\"vdpbf16ps_per_cycle_per_core\":%.3f,\"vfmadd_per_cycle_per_core\":%.3f}\n",
           nt, per_sec[0], bf * 1e-9, f32 * 1e-9, clk * 1e-9, per_sec[0] / (clk * nt),
           per_sec[1] / (clk * nt));
    fflush(stdout);
    free(th), free(arg);
    return 0;
}

/* ----------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr,
            "usage: train_cpu [--arch resnet50] [--batch 32] [--image-size 224] [--threads N]\n"
            "                 [--warmup 2] [--steps 3] [--lr 0.05] [--seed 1]\n"
            "                 [--precision fp32|bf16]\n"
            "       train_cpu --sgemm [--threads N] [--reps 5]\n"
            "       train_cpu --peak [--threads N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    opts op = {SL_ARCH_RESNET50, 32, 224, nproc > 0 ? (int)nproc : 1, 2, 3, 5, 0, 0,
               (sl_dtype)-1, 0.05f, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sgemm") || !strcmp(a, "--peak")) {
            *(a[2] == 's' ? &op.sgemm : &op.peak) = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--arch")) {
            if (sl_arch_parse(v, &op.arch) != SL_OK)
                die("%s", sl_errmsg());
        } else if (!strcmp(a, "--batch"))
            op.batch = atoi(v);
        else if (!strcmp(a, "--image-size"))
            op.size = atoi(v);
        else if (!strcmp(a, "--threads"))
            op.threads = atoi(v);
        else if (!strcmp(a, "--warmup"))
            op.warmup = atoi(v);
        else if (!strcmp(a, "--steps"))
            op.steps = atoi(v);
        else if (!strcmp(a, "--reps"))
            op.reps = atoi(v);
        else if (!strcmp(a, "--lr"))
            op.lr = (float)atof(v);
        else if (!strcmp(a, "--seed"))
            op.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--precision")) {
            if (sl_precision_parse(v, &op.precision) != SL_OK)
                die("%s", sl_errmsg());
        }
        else
            usage();
    }
    if (op.batch < 2 || op.size < 32 || op.threads < 1 || op.warmup < 2 || op.steps < 1 ||
        op.reps < 1 || !(op.lr > 0))
        die("bad options (batch >= 2, image size >= 32, threads >= 1, warmup >= 2, steps >= 1, "
            "reps >= 1, lr > 0)");
    return op.peak ? run_peak(&op) : op.sgemm ? run_sgemm(&op) : run_train(&op);
}

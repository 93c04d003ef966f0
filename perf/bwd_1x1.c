/*
 * perf/bwd_1x1.c - train/ops/conv_w1x1.c's 1x1 backward-filter alone (issue
 * 40): dW[k][c] = sum over the output positions m of dy[m][k] x[m][c], bf16
 * in, f32 out, on ResNet-50's 15 distinct 1x1 shapes at batch 16, 224 px
 * (one replica's share), one thread, timed best of reps, then NETWORK: each
 * shape times its uses in the network. Set beside `OMP_NUM_THREADS=1
 * build/dnnl_conv` (its 1x1 backward-weights lines, times the same uses):
 * perf/RESULTS.md has both, the measurement behind taking these kernels
 * from oneDNN.
 *
 *   bwd_1x1 [reps] [--check]
 *
 * --check compares 50 random dW values of each shape with a double sum of
 * the same bf16 products. Exits 0 with a line saying so where the kernel
 * does not run (no AVX512-BF16).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/ops/cpu_int.h" /* white-box: the kernel */
#include "train/ops/ops.h"     /* white-box: stack sl_exec */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double from_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x's row for output position m of sh (NHWC, 1x1, no padding) */
static const uint16_t *xrow(const sl_conv_shape *sh, const uint16_t *x, long m)
{
    long pq = (long)sh->p * sh->q, n = m / pq, r = m % pq;
    long y = r / sh->q * sh->stride, xx = r % sh->q * sh->stride;
    return x + ((n * sh->h + y) * sh->w + xx) * sh->c;
}

int main(int argc, char **argv)
{
    /* ResNet-50 v1.5's 1x1 convolutions (perf/dnnl_conv.c's table): h, c, k,
     * stride, uses */
    static const int shapes[][5] = {
        {56, 64, 64, 1, 1},     {56, 64, 256, 1, 4},   {56, 256, 64, 1, 2},
        {56, 256, 128, 1, 1},   {28, 128, 512, 1, 4},  {56, 256, 512, 2, 1},
        {28, 512, 128, 1, 3},   {28, 512, 256, 1, 1},  {14, 256, 1024, 1, 6},
        {28, 512, 1024, 2, 1},  {14, 1024, 256, 1, 5}, {14, 1024, 512, 1, 1},
        {7, 512, 2048, 1, 3},   {14, 1024, 2048, 2, 1}, {7, 2048, 512, 1, 2}};
    int reps = 3, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check"))
            check = 1;
        else
            reps = atoi(argv[i]) > 0 ? atoi(argv[i]) : 1;
    }
    sl_exec e;
    if (sl_exec_init(&e, SL_BACKEND_CPU, 1) || sl_exec_set_act(&e, SL_DTYPE_BF16)) {
        printf("bwd_1x1: no bf16 cpu exec here (%s): nothing to measure\n", sl_errmsg());
        return 0;
    }
    double net = 0, flops = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const int *g = shapes[i];
        sl_conv_shape sh;
        if (sl_conv_shape_init(&sh, 16, g[0], g[0], g[1], g[2], 1, 1, g[3], 0)) {
            fprintf(stderr, "bwd_1x1: %s\n", sl_errmsg());
            return 1;
        }
        if (!sl_conv_w1x1_ok(&e, &sh)) {
            printf("bwd_1x1: the kernel does not run here (no AVX512-BF16, or "
                   "SLUICE_CONV_W1X1=0): nothing to measure\n");
            return 0;
        }
        long M = (long)sh.n * sh.p * sh.q, nx = (long)sh.n * sh.h * sh.w * sh.c;
        uint16_t *x = aligned_alloc(64, (size_t)nx * 2), *dy = aligned_alloc(64, (size_t)M * sh.k * 2);
        float *dw = aligned_alloc(64, (size_t)sh.k * sh.c * 4);
        if (!x || !dy || !dw) {
            fprintf(stderr, "bwd_1x1: out of memory\n");
            return 1;
        }
        uint64_t r = 1;
        for (long j = 0; j < nx; j++)
            r = r * 6364136223846793005ULL + 1, x[j] = to_bf16((float)((r >> 40) & 0xffff) / 65536.0f - 0.5f);
        for (long j = 0; j < M * sh.k; j++)
            r = r * 6364136223846793005ULL + 1, dy[j] = to_bf16((float)((r >> 40) & 0xffff) / 65536.0f - 0.5f);
        double best = 1e30;
        for (int rep = 0; rep <= reps; rep++) {
            double t = now();
            if (sl_conv_w1x1_filter(&e, &sh, x, dy, dw)) {
                fprintf(stderr, "bwd_1x1: %s\n", sl_errmsg());
                return 1;
            }
            t = now() - t;
            if (rep && t < best)
                best = t;
        }
        double worst = 0;
        for (int t = 0; check && t < 50; t++) {
            r = r * 6364136223846793005ULL + 1;
            int k = (int)((r >> 33) % (uint64_t)sh.k), c = (int)((r >> 13) % (uint64_t)sh.c);
            double ref = 0, mag = 0;
            for (long m = 0; m < M; m++) {
                double v = from_bf16(dy[m * sh.k + k]) * from_bf16(xrow(&sh, x, m)[c]);
                ref += v, mag += fabs(v);
            }
            double err = fabs(ref - dw[(long)k * sh.c + c]) / (mag + 1e-30);
            worst = err > worst ? err : worst;
        }
        if (check && worst > 1e-5) {
            fprintf(stderr, "bwd_1x1: h%d c%d k%d: dW off the double sum by %.2e of its terms' "
                    "magnitude\n", sh.h, sh.c, sh.k, worst);
            rc = 1;
        }
        double gf = 2.0 * (double)M * sh.k * sh.c / 1e9;
        printf("bwd-weights h%-3d c%-5d k%-5d 1x1/%d  %8.3f ms %6.1f GFLOP/s%s\n", sh.h, sh.c,
               sh.k, sh.stride, best * 1e3, gf / best,
               check ? (worst > 1e-5 ? "  WRONG" : "  checked") : "");
        net += best * g[4], flops += gf * g[4];
        free(x), free(dy), free(dw);
    }
    printf("NETWORK 1x1 bwd-weights %.1f ms, %.1f GFLOP/s (each shape x its uses)\n", net * 1e3,
           flops / net);
    sl_exec_fini(&e);
    return rc;
}

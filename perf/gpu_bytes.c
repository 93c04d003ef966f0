/*
 * perf/gpu_bytes.c - the bytes each bandwidth-bound kernel of sluice's GPU
 * training step moves for a ResNet at a batch size, and the time that
 * takes at 75% and 100% of an H100 SXM's and an H200's memory bandwidth:
 * the expectation that a Nsight Compute profile (perf/train-gpu --profile)
 * is held to (issue 14).
 *
 *   gpu_bytes [--model resnet50] [--batch 256] [--image-size 224]
 *             [--act-bytes 2] [--h100-tbs 3.35] [--h200-tbs 4.8]
 *
 * The shapes come from the model itself (sl_model_create at batch 1 on the
 * host; train/model/model_int.h's list of conv+BN units and blocks, read here as
 * a tool that knows the model's layout). The bytes are each kernel's own
 * reads and writes, once each (train/ops/norm_cuda.cu's and act_cuda.cu's
 * DESIGN), in the lean fused step of train/model/model.c:
 *   forward   bn_stats (read y), bn_apply (read y [, the shortcut r],
 *             write z; ReLU fused), max-pool forward (read the stem's z,
 *             write the pool output and its int32 argmax);
 *   backward  bn_reduce (read y, z, dz, write the masked dz where a ReLU
 *             follows the BN; read y, dy where none does), bn_bwd_apply
 *             (read y, dz, write dx over y), the stem's ReLU mask at the
 *             max-pool output (relu_bwd there), max-pool backward (read dy
 *             and argmax, write dx);
 *   no residual add, forward or backward: the forward's is fused into the
 *   last BN of a block and the backward's into the first conv's
 *   backward-data (cuDNN's beta = 1), whose extra read of dx is the conv's.
 * Per-channel reads and the small finishing kernels are left out (KiB).
 * Prints a Markdown table (perf/RESULTS.md quotes it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model/model_int.h"

/* The table's rows, in step order. */
static const char *const kernels[] = {
    "bn_stats_kernel (fwd statistics)", "bn_apply_kernel (+ ReLU)",
    "bn_apply_kernel + shortcut + ReLU", "maxpool_fwd_kernel",
    "bn_reduce_kernel<dy_mask> (bwd sums)", "bn_reduce_kernel<dy>",
    "bn_bwd_apply_kernel (dx over y)", "act_kernel<relu_bwd> (stem mask)", "maxpool_bwd_kernel",
};
#define NK ((int)(sizeof kernels / sizeof kernels[0]))

typedef struct row {
    const char *kernel;
    int calls;
    double bytes;
} row;

static void usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: gpu_bytes [--model resnet50|resnet18|resnet20] [--batch 256] "
            "[--image-size 224]\n"
            "                 [--act-bytes 2] [--h100-tbs 3.35] [--h200-tbs 4.8]\n"
            "Bytes per training step of each bandwidth-bound GPU kernel and its time at 75%% "
            "and 100%% of\nthe memory bandwidth (TB/s = 1e12 bytes/s).\n");
    exit(rc);
}

static void add(row *rows, const char *k, double bytes)
{
    for (int i = 0; i < NK; i++)
        if (strcmp(rows[i].kernel, k) == 0) {
            rows[i].calls++;
            rows[i].bytes += bytes;
            return;
        }
    fprintf(stderr, "gpu_bytes: no row for %s\n", k);
    exit(1);
}

int main(int argc, char **argv)
{
    const char *model = "resnet50";
    int batch = 256, size = 224;
    double ab = 2, h100 = 3.35, h200 = 4.8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            usage(0);
        if (!v)
            usage(2);
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--batch"))
            batch = atoi(v);
        else if (!strcmp(a, "--image-size"))
            size = atoi(v);
        else if (!strcmp(a, "--act-bytes"))
            ab = atof(v);
        else if (!strcmp(a, "--h100-tbs"))
            h100 = atof(v);
        else if (!strcmp(a, "--h200-tbs"))
            h200 = atof(v);
        else
            usage(2);
        i++;
    }
    if (batch < 1 || size < 8 || !(ab > 0) || !(h100 > 0) || !(h200 > 0))
        usage(2);
    sl_model_config cfg = SL_MODEL_CONFIG_INIT;
    if (sl_arch_parse(model, &cfg.arch)) {
        fprintf(stderr, "gpu_bytes: %s\n", sl_errmsg());
        return 2;
    }
    cfg.classes = 1000;
    sl_model *m = NULL;
    if (sl_model_create(&cfg, 1, size, size, &m)) {
        fprintf(stderr, "gpu_bytes: %s\n", sl_errmsg());
        return 1;
    }
    row rows[NK];
    for (int i = 0; i < NK; i++)
        rows[i] = (row){kernels[i], 0, 0};
    /* every cbn: which BN backward it gets (masked or not) and which apply */
    for (int i = 0; i < m->ncbn; i++) {
        const sl_cbn *c = &m->cbn[i];
        double e = (double)batch * c->p * c->q * c->cout * ab; /* bytes of one (rows, c) tensor */
        int last = 0, stem = i == 0;
        for (int b = 0; b < m->nblock; b++)
            last |= i == m->blk[b].first + m->blk[b].nconv - 1;
        add(rows, "bn_stats_kernel (fwd statistics)", e);
        add(rows, last ? "bn_apply_kernel + shortcut + ReLU" : "bn_apply_kernel (+ ReLU)",
            (last ? 3 : 2) * e);
        int mask = (c->relu || last) && !(stem && m->stem_pool);
        add(rows, mask ? "bn_reduce_kernel<dy_mask> (bwd sums)" : "bn_reduce_kernel<dy>",
            (mask ? 4 : 2) * e);
        add(rows, "bn_bwd_apply_kernel (dx over y)", 3 * e);
    }
    if (m->stem_pool) {
        const sl_cbn *s = &m->cbn[0];
        double zin = (double)batch * s->p * s->q * s->cout, pout =
                     (double)batch * m->pool_h * m->pool_w * s->cout;
        add(rows, "maxpool_fwd_kernel", zin * ab + pout * (ab + 4));
        add(rows, "act_kernel<relu_bwd> (stem mask)", 3 * pout * ab);
        add(rows, "maxpool_bwd_kernel", pout * (ab + 4) + zin * ab);
    }
    printf("%s, batch %d, %dx%d, %g-byte activations: bytes per training step of the "
           "bandwidth-bound kernels and their time at a share of the memory bandwidth "
           "(H100 SXM %.2f TB/s, H200 %.2f TB/s)\n\n",
           model, batch, size, size, ab, h100, h200);
    printf("| kernel | calls | MB/step | H100 ms @100%% | H100 ms @75%% | H200 ms @100%% | H200 "
           "ms @75%% |\n|---|---|---|---|---|---|---|\n");
    double tot = 0;
    int calls = 0;
    for (int i = 0; i < NK; i++) {
        double b = rows[i].bytes;
        if (!rows[i].calls)
            continue;
        tot += b, calls += rows[i].calls;
        printf("| %s | %d | %.1f | %.3f | %.3f | %.3f | %.3f |\n", rows[i].kernel, rows[i].calls,
               b / 1e6, b / (h100 * 1e9), b / (0.75 * h100 * 1e9), b / (h200 * 1e9),
               b / (0.75 * h200 * 1e9));
    }
    printf("| **all** | %d | %.1f | %.3f | %.3f | %.3f | %.3f |\n", calls, tot / 1e6,
           tot / (h100 * 1e9), tot / (0.75 * h100 * 1e9), tot / (h200 * 1e9),
           tot / (0.75 * h200 * 1e9));
    sl_model_destroy(m);
    return 0;
}

/*
 * train/ops/exec.c - execution contexts: the backend tables, and an
 * sl_exec's life (init / create, fini / destroy, its threads, activation
 * type; its scratch memory is scratch.c's).
 *
 * DESIGN. The only file in train/ that knows which backends a build has
 * (DESIGN.md section 5: `#if` in one place). With SLUICE_TRAIN_CUDA (CUDA
 * and cuDNN found, CMakeLists.txt) the cuda table is the *_cuda.cu
 * functions and sl_exec_init makes their context (cuda_int.h): device 0,
 * or SLUICE_CUDA_DEVICE. Without it the cuda table has a name and no slots
 * (NULL; the entry points of ops.c answer SL_ENOTSUP, "the backend has no
 * such op (this build has no cuda backend)") and sl_exec_init refuses
 * SL_BACKEND_CUDA. The fused slots (bn_fwd_train_act, bn_bwd_act,
 * conv_bwd_data_acc) are in the cuda table, the first two in the cpu
 * table too; SLUICE_CUDA_FUSE=0, read by sl_cuda_ctx_create, gives a cuda
 * exec the same table without them (the model then runs the unfused ops).
 * The cuDNN-fusion slots (fuse_*, behind fuse.c's entry points) are the
 * cuda table's only.
 *
 * Threading (cpu backend). sl_exec.threads is the thread count of every
 * pass: oneDNN's convolutions (conv_dnnl.c, on the calling thread's OpenMP
 * team), the memory-bound passes (BN, ReLU, add, max pool: sl_par_for,
 * cpu_int.h, the same team) and OpenBLAS's SGEMMs (the FC layer, and the
 * convolutions in builds without oneDNN). Replica threads (issue 5) each
 * take their share: each replica's exec sizes its own team, no pool is
 * shared. Small nets still want one thread per replica: resnet20 width 8
 * at 28 px, batch 64, trains at 731 images/s on one OpenBLAS thread and
 * 236-432 on two (2026-11-21), and with oneDNN at 1,481 on one thread and
 * 371 on two, against 3,310 for two replicas of one thread (2026-12-04,
 * perf/RESULTS.md "Issue 29"): the hand-offs cost more than the split
 * saves. So the demo runs two replicas of one thread.
 *
 * An exec is one thread's: nothing here locks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "train/ops/cpu_int.h"
#include "train/ops/ops.h"
#ifdef SLUICE_TRAIN_CUDA
#include "train/ops/cuda_int.h"
#endif

/* fwd_act, bwd_act, dgrad_acc: the fused slots (cuda; cpu's BN ones; NULL
 * elsewhere). The cuDNN-fusion slots are the cuda table's only (CUDA_TABLE). */
#define OPS_SLOTS(sfx, fwd_act, bwd_act, dgrad_acc)                                          \
        .name = #sfx, .conv_fwd = sl_conv_fwd_##sfx, .conv_bwd_data = sl_conv_bwd_data_##sfx, \
        .conv_bwd_filter = sl_conv_bwd_filter_##sfx, .bn_fwd_train = sl_bn_fwd_train_##sfx,  \
        .bn_fwd_eval = sl_bn_fwd_eval_##sfx, .bn_bwd = sl_bn_bwd_##sfx,                      \
        .bn_fwd_train_act = fwd_act, .bn_bwd_act = bwd_act, .conv_bwd_data_acc = dgrad_acc,     \
        .relu_fwd = sl_relu_fwd_##sfx, .relu_bwd = sl_relu_bwd_##sfx, .add = sl_add_##sfx,   \
        .maxpool_fwd = sl_maxpool_fwd_##sfx, .maxpool_bwd = sl_maxpool_bwd_##sfx,            \
        .gap_fwd = sl_gap_fwd_##sfx, .gap_bwd = sl_gap_bwd_##sfx, .fc_fwd = sl_fc_fwd_##sfx, \
        .fc_bwd = sl_fc_bwd_##sfx, .xent_fwd_bwd = sl_xent_fwd_bwd_##sfx,                    \
        .bn_fwd_apply = sl_bn_fwd_apply_##sfx, .bn_bwd_reduce = sl_bn_bwd_reduce_##sfx,      \
        .bn_bwd_apply = sl_bn_bwd_apply_##sfx, .bn_moments = sl_bn_moments_##sfx,            \
        .bn_moments_merge = sl_bn_moments_merge_##sfx
#define OPS_TABLE(sfx, fwd_act, bwd_act, dgrad_acc)                                          \
    { OPS_SLOTS(sfx, fwd_act, bwd_act, dgrad_acc) }

const sl_ops sl_ops_ref = OPS_TABLE(ref, NULL, NULL, NULL);
/* The cpu table with the fused BN slots (norm_cpu.c: one pass where the
 * unfused ops take two or three, the same bits); no conv_bwd_data_acc
 * (oneDNN's backward-data takes no sum post-op). */
const sl_ops sl_ops_cpu = OPS_TABLE(cpu, sl_bn_fwd_train_act_cpu, sl_bn_bwd_act_cpu, NULL);

#ifdef SLUICE_TRAIN_CUDA
/* The cuda table with the fused slots (ops.h: BN + add + ReLU, ReLU +
 * BN backward, the accumulating backward-data), and without them for
 * SLUICE_CUDA_FUSE=0 (A/B runs: perf/train-gpu). */
#define CUDA_TABLE(fwd_act, bwd_act, dgrad_acc)                                               \
    {                                                                                        \
        OPS_SLOTS(cuda, fwd_act, bwd_act, dgrad_acc),                                        \
        .fuse_available = sl_graph_available_cuda, .fuse_prepare = sl_graph_prepare_cuda,    \
        .fuse_plan = sl_graph_plan_info_cuda, .fuse_conv_fwd = sl_graph_conv_fwd_cuda,       \
        .fuse_conv_wgrad = sl_graph_conv_wgrad_cuda,                                         \
        .fuse_conv_dgrad = sl_graph_conv_dgrad_cuda,                                         \
        .fuse_bn_finalize = sl_fuse_bn_finalize_cuda, .fuse_bn_fold = sl_fuse_bn_fold_cuda,  \
        .fuse_bn_apply = sl_fuse_bn_apply_cuda, .fuse_bn_dx = sl_fuse_bn_dx_cuda,            \
        .fuse_refusal = sl_graph_refusal_cuda,                                               \
    }
/* With SLUICE_CUDA_FUSE=0 the cuDNN-fusion slots stay (SLUICE_CUDNN_FUSION
 * is their switch: fuse_available). */
const sl_ops sl_ops_cuda = CUDA_TABLE(sl_bn_fwd_train_act_cuda, sl_bn_bwd_act_cuda,
                                      sl_conv_bwd_data_acc_cuda);
static const sl_ops sl_ops_cuda_unfused = CUDA_TABLE(NULL, NULL, NULL);
#else
/* The cuda table in a build without it: present, named, and honest about
 * being empty (sl_ops_missing says why; op_ok, op_check.h, for every slot). */
const sl_ops sl_ops_cuda = {.name = "cuda"};
#endif /* SLUICE_TRAIN_CUDA */

const char *sl_ops_missing(const sl_ops *o)
{
#ifndef SLUICE_TRAIN_CUDA
    if (o == &sl_ops_cuda)
        return "this build has no cuda backend";
#endif
    (void)o;
    return NULL;
}

#ifdef SLUICE_TRAIN_CUDA
/* SLUICE_CUDA_DEVICE: a device ordinal (default 0). */
static int cuda_device_of_env(int *device)
{
    const char *v = getenv("SLUICE_CUDA_DEVICE");
    if (!v || !*v)
        return SL_OK;
    char *end;
    errno = 0;
    long d = strtol(v, &end, 10);
    if (errno || *end || d < 0 || d > 1024)
        return sl_fail(SL_EINVAL, "SLUICE_CUDA_DEVICE=%s: want a device number", v);
    *device = (int)d;
    return SL_OK;
}
#endif

int sl_exec_init(sl_exec *e, sl_backend b, int threads) { return sl_exec_init_on(e, b, threads, -1); }

int sl_exec_init_on(sl_exec *e, sl_backend b, int threads, int device)
{
    memset(e, 0, sizeof *e);
    e->backend = b;
    switch (b) {
    case SL_BACKEND_REF: e->ops = &sl_ops_ref; break;
    case SL_BACKEND_CPU: e->ops = &sl_ops_cpu; break;
    case SL_BACKEND_CUDA: {
#ifdef SLUICE_TRAIN_CUDA
        int rc;
        sl_cuda_ctx *ctx = NULL;
        if (device < 0 && (device = 0, rc = cuda_device_of_env(&device)))
            return rc;
        // The caches attach themselves (the context calls none of its users).
        if ((rc = sl_cuda_ctx_create(device, &ctx)) || (rc = sl_conv_algo_cache_attach(ctx)) ||
            (rc = sl_graph_cache_attach(ctx))) {
            sl_cuda_ctx_destroy(ctx);
            return sl_fail(rc, "sl_exec_init: cuda: %s", sl_errmsg());
        }
        e->cuda = ctx;
        e->ops = ctx->fuse ? &sl_ops_cuda : &sl_ops_cuda_unfused;
        break;
#else
        (void)device;
        return sl_fail(SL_ENOTSUP, "sl_exec_init: this build has no CUDA backend (it needs "
                                   "CUDA and cuDNN)");
#endif
    }
    default:
        return sl_fail(SL_EINVAL, "sl_exec_init: unknown backend %d", (int)b);
    }
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    e->threads = threads;
    if (b == SL_BACKEND_CPU)
        openblas_set_num_threads(threads);
    return SL_OK;
}

int sl_exec_create(sl_backend b, int threads, int device, sl_exec **out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_exec_create: NULL out");
    *out = NULL;
    sl_exec *e = malloc(sizeof *e);
    if (!e)
        return sl_fail(SL_ENOMEM, "sl_exec_create: %zu bytes", sizeof *e);
    int rc = sl_exec_init_on(e, b, threads, device);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return SL_OK;
}

void sl_exec_destroy(sl_exec *e)
{
    if (!e)
        return;
    sl_exec_fini(e);
    free(e);
}

sl_backend sl_exec_backend(const sl_exec *e) { return e->backend; }

int sl_cpu_bf16(const char **why)
{
    const char *w;
    int ok = 0;
    if (!sl_dnnl_enabled())
        w = sl_dnnl_describe()[0] == 'n' ? "this build has no oneDNN"
                                         : "SLUICE_CPU_CONV=blas: convolutions on OpenBLAS";
    else if (!sl_dnnl_bf16())
        w = sl_dnnl_isa(); /* "avx512_core", "avx2", ...: no bf16 dot products */
    else
        w = sl_dnnl_isa(), ok = 1;
    if (why)
        *why = w;
    return ok;
}

int sl_exec_set_act(sl_exec *e, sl_dtype act)
{
    if (!e || (int)act < 0 || act > SL_DTYPE_LAST)
        return sl_fail(SL_EINVAL, "sl_exec_set_act: bad exec or type %d", e ? (int)act : -1);
    const char *why = NULL;
    if (act == SL_DTYPE_BF16 && e->backend == SL_BACKEND_CPU && !sl_cpu_bf16(&why))
        return sl_fail(SL_ENOTSUP, "sl_exec_set_act: cpu: bf16 needs oneDNN on a CPU with "
                       "bf16 dot products (AVX512-BF16 or AMX); here: %s (use fp32)", why);
    if (act != SL_DTYPE_F32 && e->backend != SL_BACKEND_CUDA &&
        !(act == SL_DTYPE_BF16 && e->backend == SL_BACKEND_CPU))
        return sl_fail(SL_ENOTSUP, "sl_exec_set_act: the %s backend computes in %s only "
                       "(%s needs --backend %s)", sl_backend_name(e->backend),
                       e->backend == SL_BACKEND_CPU ? "fp32 or bf16" : "fp32",
                       act == SL_DTYPE_BF16 ? "bf16" : "fp16",
                       act == SL_DTYPE_BF16 ? "cpu or cuda" : "cuda");
    e->act = act;
    return SL_OK;
}

size_t sl_exec_act_size(const sl_exec *e) { return e ? sl_dtype_size(e->act) : 4; }

void sl_exec_fini(sl_exec *e)
{
    if (!e)
        return;
#ifdef SLUICE_TRAIN_CUDA
    sl_cuda_ctx_destroy((sl_cuda_ctx *)e->cuda);
#endif
    e->cuda = NULL;
    free(e->scratch);
    e->scratch = NULL;
    e->scratch_cap = 0;
}

/*
 * train/ops/ops.h - the op room's header, for the rooms above it and white-box
 * tests: the execution context and the op table: forward and backward of every
 * layer ResNet needs, with one backend per file set (DESIGN.md section 5):
 *
 *   *_ref.c   naive loops, the oracle; always built
 *   *_cpu.c   convolutions through oneDNN (conv_dnnl.c, when built with it) or
 *             im2col + OpenBLAS SGEMM; the memory-bound passes split over the
 *             exec's threads (par_cpu.c)
 *   *_cuda.*  cuDNN / cuBLAS / own kernels on device pointers (train/ops/cuda_int.h);
 *             built with CUDA and cuDNN, else every slot returns SL_ENOTSUP.
 *             Not yet run on a GPU: their tests skip without one
 *
 * Layout: activations are NHWC f32, (n, h, w, c) with c fastest. Conv
 * weights are OHWI, (k, r, s, c): the im2col rows are then runs of c
 * contiguous floats, and cuDNN's NHWC filter format (KRSC) is the same, so
 * the CUDA backend shares it. Checkpoints transpose to torchvision's OIHW at
 * save/load (train/io/checkpoint.c). Linear weights are torch's (out, in).
 *
 * Activation type (mixed precision: cuda bf16 / f16, cpu bf16). sl_exec.act
 * is the element type of ACTIVATIONS: with SL_DTYPE_BF16 / SL_DTYPE_F16 the
 * float pointers
 * below that carry activations point at 2-byte elements (the pointer is
 * only an address), math inside the ops is f32 (cuDNN compute type float,
 * reductions in f32/double). Which arguments are activations (A) and which
 * stay f32 always (F):
 *   conv_fwd         x A, w A (the model's compute copy of the weights), y A
 *   conv_bwd_data    dy A, w A, dx A
 *   conv_bwd_filter  x A, dy A, dw F (the f32 grads)
 *   bn_fwd_train/eval, bn_bwd, sync-BN pieces, bn_fwd_train_act, bn_bwd_act:
 *                    x, y, dy, dx, r, z, dz A; gamma, beta,
 *                    running stats, saved stats, dgamma, dbeta, sums F
 *   relu_fwd/bwd, add, maxpool_fwd/bwd: every tensor A (argmax int32)
 *   gap_fwd          x A, y F;   gap_bwd  dy F, dx A
 *   fc_fwd/bwd, xent_fwd_bwd: F throughout
 * With SL_DTYPE_F32 (the default, and the only type of ref) every tensor
 * is f32. The cpu backend takes bf16 with the same roles (its convolutions
 * on oneDNN, its passes in norm_cpu.c / act_cpu.c reading and writing bf16
 * and computing in f32), so the model runs one recipe on both.
 *
 * Semantics shared by every op:
 *   - outputs are overwritten, never accumulated into (the model adds
 *     gradients of a tensor used twice with sl_ops.add);
 *   - all pointers are on the backend's device (host for ref/cpu);
 *   - ops return SL_OK, SL_ENOMEM (scratch), SL_ENOTSUP (missing slot) or
 *     SL_ECUDA and friends; arguments are checked once, by the entry
 *     points sl_<op>(e, ...) below (train/ops/ops.c), not by every backend.
 *
 * Threading: an sl_exec belongs to one thread at a time (its scratch buffer
 * is not shared); replicas (issue 5) each have their own. The cpu backend
 * runs sl_exec.threads threads: oneDNN's (or OpenBLAS's) inside a
 * convolution, and the calling thread's OpenMP team for its own passes;
 * train/ops/exec.c says when one thread is better.
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "train/train.h" /* sl_backend, sl_exec (opaque there), sl_exec_set_act */

#ifdef __cplusplus
extern "C" {
#endif

struct sl_ops;

/* Execution context: backend table + scratch memory + threads. Opaque in
 * train.h (sl_exec_create); inside train/ (and in white-box tests) it lives
 * in the caller's struct: sl_exec_init ... sl_exec_fini. */
struct sl_exec {
    const struct sl_ops *ops;
    sl_backend backend;
    int threads;        /* BLAS threads (cpu); 0 = all cores */
    void *scratch;      /* grown by sl_exec_scratch; freed by sl_exec_fini */
    size_t scratch_cap;
    void *cuda;         /* backend state (streams, handles) for cuda; NULL otherwise */
    sl_dtype act;       /* activation element type (below); SL_DTYPE_F32 unless set */
};

/* Set up e for a backend. SL_ENOTSUP for cuda in a build without it. For
 * cuda, SLUICE_CUDA_FUSE=0 in the environment (read by the context; 1 is
 * the default, anything else SL_EINVAL) leaves the fused slots NULL. */
int sl_exec_init(sl_exec *e, sl_backend b, int threads);
/* The same on CUDA device `device` (cuda only; -1: SLUICE_CUDA_DEVICE, or 0). */
int sl_exec_init_on(sl_exec *e, sl_backend b, int threads, int device);
void sl_exec_fini(sl_exec *e);
/* Scratch of at least bytes, valid until the next call on e (64-byte aligned).
 * NULL (with sl_fail(SL_ENOMEM, ...)) when allocation fails. */
void *sl_exec_scratch(sl_exec *e, size_t bytes);

/* Convolution geometry. Input x (n, h, w, c); weight (k, r, s, c);
 * output y (n, p, q, k), p = (h + 2*pad - r)/stride + 1, q likewise. */
typedef struct sl_conv_shape {
    int n, h, w, c;
    int k, r, s;
    int stride, pad;
    int p, q;
} sl_conv_shape;

/* Fill sh and compute p, q; SL_EINVAL when the output would be empty. */
int sl_conv_shape_init(sl_conv_shape *sh, int n, int h, int w, int c, int k, int r, int s,
                       int stride, int pad);

/* Max-pool geometry (torchvision stem: 3x3, stride 2, pad 1; padding never wins). */
typedef struct sl_pool_shape {
    int n, h, w, c;
    int r, stride, pad;
    int p, q;
} sl_pool_shape;
int sl_pool_shape_init(sl_pool_shape *sh, int n, int h, int w, int c, int r, int stride, int pad);

/* The cuDNN graph fusion's kinds and plan states (the section "cuDNN
 * graph fusion" below). */
enum { SL_FUSE_FPROP = 1, SL_FUSE_WGRAD = 2, SL_FUSE_DGRAD = 4 };
typedef struct sl_fuse_plan_info {
    int built;            /* 1 built, 0 refused */
    int engine;           /* built: the engine's global index (-1: cuDNN did not say) */
    int nondeterministic; /* built: its engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
                             (only with SLUICE_CUDNN_DETERMINISTIC=0) */
    int64_t workspace;    /* built: bytes */
    const char *form;     /* built: "FLOAT intermediates", "mean step SUB (cuDNN >= 9.8)", ... */
    const char *note;     /* refused: why, in cuDNN's words; built: a retry's story or "" */
} sl_fuse_plan_info;

/* A NULL slot is an op the backend does not have: its entry point says
 * SL_ENOTSUP ("sl_<op>: <backend>: the backend has no such op", then
 * sl_ops_missing's reason in parentheses when there is one). */
typedef struct sl_ops {
    const char *name;

    /* y = conv(x, w); no bias (ResNet convs have none). */
    int (*conv_fwd)(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w,
                    float *y);
    /* dx = conv_transpose(dy, w): (n, h, w, c). */
    int (*conv_bwd_data)(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                         float *dx);
    /* dw = sum over n, p, q of dy x patch: (k, r, s, c). */
    int (*conv_bwd_filter)(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *dy,
                           float *dw);

    /* Batch norm over rows = n*h*w rows of c channels (NHWC flattened).
     * Training: mean/var over the rows (biased var for normalizing, unbiased
     * for the running update, as PyTorch), y = gamma*(x-mean)*invstd + beta,
     * running = (1-momentum)*running + momentum*batch_stat; saves mean and
     * invstd (c each) for backward. */
    int (*bn_fwd_train)(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, float momentum, float eps, float *running_mean,
                        float *running_var, float *y, float *save_mean, float *save_invstd);
    /* Inference: normalize with the running statistics. */
    int (*bn_fwd_eval)(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                       const float *beta, const float *running_mean, const float *running_var,
                       float eps, float *y);
    /* dx, dgamma, dbeta from dy and the saved statistics of bn_fwd_train. */
    int (*bn_bwd)(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                  const float *gamma, const float *save_mean, const float *save_invstd,
                  float *dx, float *dgamma, float *dbeta);

    /* Fused batch norm + shortcut add + ReLU (cuda and cpu: NULL in ref,
     * and in cuda with SLUICE_CUDA_FUSE=0; the model then runs the
     * unfused ops, which these equal bit for bit on the same backend).
     * bn_fwd_train_act: bn_fwd_train's statistics, running update and
     *   saved mean/invstd; y = bn(x), then y = y + r when r is not NULL,
     *   then y = max(y, 0) (NaN passes) when relu; each step rounded to the
     *   activation type as the unfused ops store it. x, r, y are activations
     *   (A), the rest F as bn_fwd_train. y may be x or r. rows >= 2.
     * bn_bwd_act: dz := dz where z > 0 else 0, IN PLACE (relu_bwd(z, dz,
     *   dz): the model feeds the masked dz to the block's shortcut too),
     *   then dx, dgamma, dbeta as bn_bwd(x, masked dz). x (the BN input),
     *   z (the ReLU output), dz, dx are A. dx may be dz (the masked dz is
     *   then overwritten by dx); dgamma, dbeta may be NULL. rows >= 1. */
    int (*bn_fwd_train_act)(sl_exec *e, int64_t rows, int c, const float *x,
                            const float *gamma, const float *beta, float momentum, float eps,
                            float *running_mean, float *running_var, const float *r, int relu,
                            float *y, float *save_mean, float *save_invstd);
    int (*bn_bwd_act)(sl_exec *e, int64_t rows, int c, const float *x, const float *z,
                      float *dz, const float *gamma, const float *save_mean,
                      const float *save_invstd, float *dx, float *dgamma, float *dbeta);
    /* dx += conv_transpose(dy, w), accumulated into dx (cuda only: cuDNN's
     * beta = 1; NULL in ref and cpu and with SLUICE_CUDA_FUSE=0, where the
     * model runs conv_bwd_data into a buffer and add). The model folds the
     * residual-gradient add into the block's first conv with it. tmp: NULL
     * or a buffer of dx's size whose contents may be destroyed (a measured
     * algorithm search writes its output there rather than over dx). */
    int (*conv_bwd_data_acc)(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                             const float *w, float *dx, float *tmp);

    /* y = max(x, 0) over n elements (y may alias x). */
    int (*relu_fwd)(sl_exec *e, int64_t n, const float *x, float *y);
    /* dx = dy where y > 0 else 0 (dx may alias dy). */
    int (*relu_bwd)(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx);
    /* y = a + b over n elements (y may alias a or b). */
    int (*add)(sl_exec *e, int64_t n, const float *a, const float *b, float *y);

    /* Max pool: y (n, p, q, c); argmax (n*p*q*c) int32 index into x of the
     * winner (first maximum in scan order r then s), for backward. */
    int (*maxpool_fwd)(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                       int32_t *argmax);
    /* dx (n, h, w, c) = scatter of dy through argmax (dx zeroed first). */
    int (*maxpool_bwd)(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                       const int32_t *argmax, float *dx);

    /* Global average pool: x (n, hw, c) -> y (n, c); backward spreads dy/hw. */
    int (*gap_fwd)(sl_exec *e, int n, int hw, int c, const float *x, float *y);
    int (*gap_bwd)(sl_exec *e, int n, int hw, int c, const float *dy, float *dx);

    /* Fully connected: x (n, in), w (out, in) as torch, b (out): y = x w^T + b. */
    int (*fc_fwd)(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                  const float *b, float *y);
    /* dx = dy w (n, in); dw = dy^T x (out, in); db = sum_n dy (out). dx may be NULL. */
    int (*fc_bwd)(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                  const float *dy, float *dx, float *dw, float *db);

    /* Softmax cross-entropy with label smoothing s (PyTorch's definition:
     * target = (1-s)*onehot + s/classes). logits (n, classes), labels in
     * [0, classes). *loss = mean over n; dlogits = (softmax - target)/n;
     * correct (may be NULL) = number of rows whose argmax is the label. */
    int (*xent_fwd_bwd)(sl_exec *e, int n, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float *loss, float *dlogits,
                        int *correct);

    /* Synchronized batch norm (the mirrored strategy's --sync-bn), in
     * pieces so that the model can sum over replicas between them. rows are
     * this replica's, total is the rows of all replicas together (a double:
     * it may pass 2^24). The sums are this replica's only; the model
     * all-reduces them. Semantics equal bn_fwd_train / bn_bwd on the
     * concatenation of every replica's rows (the statistics come from
     * bn_moments / bn_moments_merge below):
     *   bn_fwd_apply:  invstd = 1/sqrt(var + eps), var the global biased
     *                  variance; save_mean = mean, save_invstd = invstd;
     *                  running_mean = (1-m)*running_mean + m*mean,
     *                  running_var  = (1-m)*running_var + m*var*total/(total-1);
     *                  y = gamma*(x - mean)*invstd + beta
     *   bn_bwd_reduce: sum_dy[c] = sum_rows dy, sum_dy_xhat[c] = sum_rows dy*xhat,
     *                  xhat = (x - save_mean)*save_invstd
     *   bn_bwd_apply:  dx = gamma*invstd/total * (total*dy - sum_dy - xhat*sum_dy_xhat)
     *                  with the all-reduced sums. */
    int (*bn_fwd_apply)(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, const float *mean, const float *var, double total,
                        float momentum, float eps, float *running_mean, float *running_var,
                        float *y, float *save_mean, float *save_invstd);
    int (*bn_bwd_reduce)(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                         const float *save_mean, const float *save_invstd, float *sum_dy,
                         float *sum_dy_xhat);
    int (*bn_bwd_apply)(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                        const float *gamma, const float *save_mean, const float *save_invstd,
                        const float *sum_dy, const float *sum_dy_xhat, double total,
                        float *dx);

    /* Sync-BN's forward statistics as PyTorch's SyncBatchNorm takes them
     * (batch_norm_stats, batch_norm_gather_stats_with_counts): each
     * replica's (count, mean, M2) combined with Chan et al.'s pairwise
     * formula ("Updating formulae and a pairwise algorithm for computing
     * sample variances", 1979), not a variance from float sums. One
     * all-reduce of world slots of SL_BN_MOMENT_FLOATS x c floats, which
     * stands in for an all-gather (the communicator has none): each
     * replica fills its own slot and zeros the others, and a sum adds
     * exact zeros, so every replica ends up with every slot bit for bit.
     *   bn_moments:       slot `rank` of slots (world, 3, c) = this
     *                     replica's mean as a float pair hi + lo (double
     *                     accuracy across a float all-reduce) and M2 =
     *                     sum_rows (x - mean)^2 (non-negative terms: a
     *                     float keeps it to 2^-24); every other slot 0.
     *   bn_moments_merge: the world slots, rows rows each, merged in slot
     *                     order in double: mean[c] and the biased var[c] =
     *                     M2 / (world*rows), as floats for bn_fwd_apply;
     *                     the same bits on every replica. */
    int (*bn_moments)(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                      float *slots);
    int (*bn_moments_merge)(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                            float *mean, float *var);

    /* cuDNN graph fusion (the section "cuDNN graph fusion" below: the
     * slots behind its entry points, train/ops/fuse.c, which check the
     * arguments): the cuda table's (graph_cuda.c, fuse_cuda.cu), with
     * SLUICE_CUDA_FUSE=0 too; NULL in ref and cpu and in builds without
     * CUDA. fuse_available says whether e can run the others at all (fp16
     * activations, SLUICE_CUDNN_FUSION not 0); fuse_plan takes the graph's
     * index (0 fprop, 1 wgrad, 2 dgrad); fuse_refusal gives the first
     * refusal's text. */
    int (*fuse_available)(const sl_exec *e);
    int (*fuse_prepare)(sl_exec *e, const sl_conv_shape *sh, unsigned kinds);
    int (*fuse_plan)(const sl_exec *e, int g, const sl_conv_shape *sh,
                     sl_fuse_plan_info *out);
    int (*fuse_conv_fwd)(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                         const float *w, float *y, float *sum, float *sqsum);
    int (*fuse_conv_wgrad)(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                           const float *dy, float *dw);
    int (*fuse_conv_dgrad)(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                           const float *w, const float *xc, const float *mean,
                           const float *invstd, const float *gamma, const float *beta,
                           float *da, float *dgamma, float *dbeta, float *coef);
    int (*fuse_bn_finalize)(sl_exec *e, int c, int64_t rows, const float *sum,
                            const float *sqsum, const float *gamma, const float *beta,
                            float momentum, float eps, float *running_mean,
                            float *running_var, float *save_mean, float *save_invstd,
                            float *consts, void *sb);
    int (*fuse_bn_fold)(sl_exec *e, int c, const float *gamma, const float *beta,
                        const float *save_mean, const float *save_invstd, float *consts,
                        void *sb);
    int (*fuse_bn_apply)(sl_exec *e, int64_t rows, int c, const float *y, const float *consts,
                         const float *r, int relu, float *z);
    int (*fuse_bn_dx)(sl_exec *e, int64_t rows, int c, const float *da, const float *xc,
                      const float *mean, float *coef, float *dx);
    const char *(*fuse_refusal)(const sl_exec *e);
} sl_ops;

/* Floats per channel in a sync-BN statistics slot: mean hi, mean lo, M2. */
#define SL_BN_MOMENT_FLOATS 3

/* The op entry points (train/ops/ops.c): sl_<op>(e, ...) checks the arguments
 * of sl_ops.<op> once, for every backend, then runs e's slot. SL_EINVAL
 * ("sl_<op>: <backend>: what") for a NULL exec, a shape that the
 * sl_*_shape_init functions would not make, counts out of range (the
 * limits are in the slots' comments above: training-mode BN wants rows >=
 * 2, sync-BN totals >= 2 forward and >= 1 backward and >= rows, ...),
 * label smoothing outside [0, 1], a label outside [0, classes) (host
 * backends; cuda checks its device labels in its kernel), a NULL tensor
 * (but where the slot's comment allows one, or the tensor has no
 * elements), or a tensor whose element or byte count overflows 64 bits
 * (issue 26); SL_ENOTSUP when e's backend has no such
 * slot (the fused ones outside cuda, every one of cuda's in a build without
 * it), before the other checks. The backends check only what is
 * theirs: their context, their scratch, argmax and device data. Callers
 * (the model, tests) go through these; a backend's slot called directly
 * trusts its arguments. */
int sl_conv_fwd(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w, float *y);
int sl_conv_bwd_data(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                     float *dx);
int sl_conv_bwd_filter(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *dy,
                       float *dw);
int sl_conv_bwd_data_acc(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                         float *dx, float *tmp);
int sl_bn_fwd_train(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                    const float *beta, float momentum, float eps, float *running_mean,
                    float *running_var, float *y, float *save_mean, float *save_invstd);
int sl_bn_fwd_eval(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                   const float *beta, const float *running_mean, const float *running_var,
                   float eps, float *y);
int sl_bn_bwd(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
              const float *gamma, const float *save_mean, const float *save_invstd, float *dx,
              float *dgamma, float *dbeta);
int sl_bn_fwd_train_act(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, float momentum, float eps, float *running_mean,
                        float *running_var, const float *r, int relu, float *y,
                        float *save_mean, float *save_invstd);
int sl_bn_bwd_act(sl_exec *e, int64_t rows, int c, const float *x, const float *z, float *dz,
                  const float *gamma, const float *save_mean, const float *save_invstd,
                  float *dx, float *dgamma, float *dbeta);
int sl_relu_fwd(sl_exec *e, int64_t n, const float *x, float *y);
int sl_relu_bwd(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx);
int sl_add(sl_exec *e, int64_t n, const float *a, const float *b, float *y);
int sl_maxpool_fwd(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                   int32_t *argmax);
int sl_maxpool_bwd(sl_exec *e, const sl_pool_shape *sh, const float *dy, const int32_t *argmax,
                   float *dx);
int sl_gap_fwd(sl_exec *e, int n, int hw, int c, const float *x, float *y);
int sl_gap_bwd(sl_exec *e, int n, int hw, int c, const float *dy, float *dx);
int sl_fc_fwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
              const float *b, float *y);
int sl_fc_bwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
              const float *dy, float *dx, float *dw, float *db);
/* The first of n host labels outside [0, classes), or -1 when all are in:
 * the one label check (train/ops/ops.c), under sl_xent_fwd_bwd's host
 * check and device/'s sl_labels_check (dev_int.h). */
int sl_labels_bad(const int32_t *labels, int n, int classes);
int sl_xent_fwd_bwd(sl_exec *e, int n, int classes, const float *logits, const int32_t *labels,
                    float smoothing, float *loss, float *dlogits, int *correct);
int sl_bn_fwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                    const float *beta, const float *mean, const float *var, double total,
                    float momentum, float eps, float *running_mean, float *running_var,
                    float *y, float *save_mean, float *save_invstd);
int sl_bn_bwd_reduce(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                     const float *save_mean, const float *save_invstd, float *sum_dy,
                     float *sum_dy_xhat);
int sl_bn_bwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                    const float *gamma, const float *save_mean, const float *save_invstd,
                    const float *sum_dy, const float *sum_dy_xhat, double total, float *dx);
int sl_bn_moments(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                  float *slots);
int sl_bn_moments_merge(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                        float *mean, float *var);


/* ------------------------------------------------ cuDNN graph fusion
 * MLPerf ResNet's conv + BN chain through cuDNN's graph API (issue 27;
 * the graphs as NVIDIA documents them: issue 37): a cuda exec with fp16
 * activations (e->act == SL_DTYPE_F16) and SLUICE_CUDNN_FUSION not 0
 * (read by the context; default 1). Entry points in train/ops/fuse.c
 * (argument checks as ops.c's), cuDNN's plans in graph_cuda.c (the graphs
 * and their sources in graph_build_cuda.c), the BN kernels in
 * fuse_cuda.cu; SL_ENOTSUP on every other exec and in builds without
 * CUDA. Activations (A: fp16 here) and f32 (F) as the op table's comment
 * says; S16 marks fp16 per-channel vectors (the prologue's scale and
 * bias, which cuDNN's ConvBNfprop / ConvBNwgrad engines take in fp16).
 *   sl_fuse_available  1 when e can run these at all, else 0.
 *   sl_fuse_prepare    the cuDNN plans of `kinds` (SL_FUSE_* bits) for sh
 *                      built (first call per shape, then cached): SL_OK,
 *                      or SL_ENOTSUP when cuDNN has no plan for one (the
 *                      caller runs that convolution unfused; every
 *                      refusal is kept with its reason, sl_fuse_plan),
 *                      other codes for errors.
 *   sl_fuse_plan       the state of one kind's plan for sh (SL_ENOENT
 *                      before sl_fuse_prepare asked for it): built or
 *                      refused, the engine and its determinism, and in
 *                      words why refused (cuDNN's own reason) or how
 *                      built (the form; a retry). Strings valid while e
 *                      is.
 *   sl_fuse_conv_fwd   y = conv(relu(x*s + b), w) with sum[k] = sum y and
 *                      sqsum[k] = sum y^2 over n, p, q (cuDNN's
 *                      ConvBNfprop: the BN statistics in the conv's
 *                      epilogue; cuDNN may sum y before or after its fp16
 *                      rounding). x A (n,h,w,c), sb S16 (2c: scale then
 *                      bias; ones and zeros pass x through when x >= 0),
 *                      w A, y A, sum / sqsum F (k).
 *   sl_fuse_conv_wgrad dw = conv_bwd_filter(relu(x*s + b), dy)
 *                      (ConvBNwgrad). x A, sb S16 (2c), dy A, dw F.
 *   sl_fuse_conv_dgrad (DgradDreluBNBwdWeight) g = conv_bwd_data(dy, w);
 *                      da = g where (xc - mean)*invstd*gamma + beta > 0
 *                      else 0 (the previous BN and its ReLU, recomputed in
 *                      f32 from its input xc); then that BN's weight
 *                      gradients and the coefficients of its input
 *                      gradient: dbeta = sum da, dgamma = sum da*xhat,
 *                      coef (8c floats, 16-byte aligned: eq_dy, eq_x,
 *                      eq_b (c each) with dx = eq_dy*da + eq_x*xc + eq_b
 *                      = bn_bwd's dx, then room for sl_fuse_bn_dx's
 *                      per-channel constants). dy A (n,p,q,k), w A, xc A
 *                      (n,h,w,c), mean, invstd, gamma, beta F (c), da A
 *                      (n,h,w,c), dgamma, dbeta, coef F.
 *   sl_fuse_bn_finalize from sum / sqsum of rows values a channel: the
 *                      biased variance sqsum/rows - mean^2 (in double,
 *                      clamped at 0), save_mean, save_invstd, the running
 *                      update as bn_fwd_train's, consts (4c floats: the
 *                      apply's (0, mean, gamma*invstd, beta) per channel)
 *                      and sb (S16 2c: gamma*invstd, beta -
 *                      mean*gamma*invstd) for the next conv's prologue.
 *                      rows >= 2.
 *   sl_fuse_bn_fold    consts and sb as the finalize makes them, from
 *                      statistics an unfused bn_fwd_train saved (a
 *                      convolution whose ConvBNfprop was refused, so that
 *                      the next one still fuses).
 *   sl_fuse_bn_apply   z = (y - mean)*scale + beta from consts, + r when r
 *                      is not NULL, then max(., 0) when relu (norm_cuda.cu's
 *                      apply pass, bn_fwd_train_act's rounding). y, r, z A.
 *   sl_fuse_bn_dx      dx = eq_dy*da + eq_x*xc + eq_b per channel from
 *                      sl_fuse_conv_dgrad's coef (8c; its second half
 *                      is written), mean F (c) the BN's saved mean
 *                      (the pass computes eq_x*(xc - mean) + ...); da,
 *                      xc, dx A (rows, c); dx may be xc or da.
 *   sl_fuse_refusal    the first refusal's text ("" when none). */
int sl_fuse_available(const sl_exec *e);
int sl_fuse_prepare(sl_exec *e, const sl_conv_shape *sh, unsigned kinds);
int sl_fuse_plan(const sl_exec *e, const sl_conv_shape *sh, unsigned kind,
                 sl_fuse_plan_info *out);
int sl_fuse_conv_fwd(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                     const float *w, float *y, float *sum, float *sqsum);
int sl_fuse_conv_wgrad(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                       const float *dy, float *dw);
int sl_fuse_conv_dgrad(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                       const float *xc, const float *mean, const float *invstd,
                       const float *gamma, const float *beta, float *da, float *dgamma,
                       float *dbeta, float *coef);
int sl_fuse_bn_finalize(sl_exec *e, int c, int64_t rows, const float *sum, const float *sqsum,
                        const float *gamma, const float *beta, float momentum, float eps,
                        float *running_mean, float *running_var, float *save_mean,
                        float *save_invstd, float *consts, void *sb);
int sl_fuse_bn_fold(sl_exec *e, int c, const float *gamma, const float *beta,
                    const float *save_mean, const float *save_invstd, float *consts, void *sb);
int sl_fuse_bn_apply(sl_exec *e, int64_t rows, int c, const float *y, const float *consts,
                     const float *r, int relu, float *z);
int sl_fuse_bn_dx(sl_exec *e, int64_t rows, int c, const float *da, const float *xc,
                  const float *mean, float *coef, float *dx);
const char *sl_fuse_refusal(const sl_exec *e);

/* The functions behind the tables, one set per backend file:
 *   conv_ref.c / conv_cpu.c      conv_fwd, conv_bwd_data, conv_bwd_filter
 *   linear_ref.c / linear_cpu.c  fc_fwd, fc_bwd
 *   norm_ref.c / norm_cpu.c      bn_fwd_train, bn_fwd_eval, bn_bwd
 *   act_ref.c / act_cpu.c        relu, add, maxpool, gap, xent
 *   norm_sync_ref.c / norm_sync_cpu.c  bn_fwd_apply, bn_bwd_reduce, bn_bwd_apply,
 *                                      bn_moments, bn_moments_merge
 *                                      (cuda: norm_cuda.cu, norm_sync_cuda.cu)
 * exec.c assembles sl_ops_ref / sl_ops_cpu / sl_ops_cuda from them. */
#define SL_DECLARE_OPS(sfx)                                                                   \
    int sl_conv_fwd_##sfx(sl_exec *, const sl_conv_shape *, const float *, const float *,     \
                          float *);                                                           \
    int sl_conv_bwd_data_##sfx(sl_exec *, const sl_conv_shape *, const float *, const float *,\
                               float *);                                                      \
    int sl_conv_bwd_filter_##sfx(sl_exec *, const sl_conv_shape *, const float *,             \
                                 const float *, float *);                                     \
    int sl_bn_fwd_train_##sfx(sl_exec *, int64_t, int, const float *, const float *,          \
                              const float *, float, float, float *, float *, float *, float *,\
                              float *);                                                       \
    int sl_bn_fwd_eval_##sfx(sl_exec *, int64_t, int, const float *, const float *,           \
                             const float *, const float *, const float *, float, float *);    \
    int sl_bn_bwd_##sfx(sl_exec *, int64_t, int, const float *, const float *, const float *, \
                        const float *, const float *, float *, float *, float *);             \
    int sl_relu_fwd_##sfx(sl_exec *, int64_t, const float *, float *);                        \
    int sl_relu_bwd_##sfx(sl_exec *, int64_t, const float *, const float *, float *);         \
    int sl_add_##sfx(sl_exec *, int64_t, const float *, const float *, float *);              \
    int sl_maxpool_fwd_##sfx(sl_exec *, const sl_pool_shape *, const float *, float *,        \
                             int32_t *);                                                      \
    int sl_maxpool_bwd_##sfx(sl_exec *, const sl_pool_shape *, const float *, const int32_t *,\
                             float *);                                                        \
    int sl_gap_fwd_##sfx(sl_exec *, int, int, int, const float *, float *);                   \
    int sl_gap_bwd_##sfx(sl_exec *, int, int, int, const float *, float *);                   \
    int sl_fc_fwd_##sfx(sl_exec *, int, int, int, const float *, const float *, const float *,\
                        float *);                                                             \
    int sl_fc_bwd_##sfx(sl_exec *, int, int, int, const float *, const float *, const float *,\
                        float *, float *, float *);                                           \
    int sl_xent_fwd_bwd_##sfx(sl_exec *, int, int, const float *, const int32_t *, float,     \
                              float *, float *, int *);                                        \
    int sl_bn_fwd_apply_##sfx(sl_exec *, int64_t, int, const float *, const float *,          \
                              const float *, const float *, const float *, double, float,     \
                              float, float *, float *, float *, float *, float *);            \
    int sl_bn_bwd_reduce_##sfx(sl_exec *, int64_t, int, const float *, const float *,         \
                               const float *, const float *, float *, float *);               \
    int sl_bn_bwd_apply_##sfx(sl_exec *, int64_t, int, const float *, const float *,          \
                              const float *, const float *, const float *, const float *,     \
                              const float *, double, float *);                                \
    int sl_bn_moments_##sfx(sl_exec *, int64_t, int, const float *, int, int, float *);       \
    int sl_bn_moments_merge_##sfx(sl_exec *, int64_t, int, int, const float *, float *,       \
                                  float *);

SL_DECLARE_OPS(ref)
SL_DECLARE_OPS(cpu)

/* norm_cpu.c's statistics pass, shared with norm_sync_cpu.c's bn_moments:
 * mean and m2 = sum (x - mean)^2 per channel of x (rows, c), in double
 * (blocked float partials merged with Chan's update); bmean, s1, s2 (c)
 * float scratch. rows 0 gives zeros. */
void sl_bn_stats_cpu(int64_t rows, int c, const float *x, double *mean, double *m2,
                     float *bmean, float *s1, float *s2);
/* norm_cpu.c's apply and backward passes, shared with norm_sync_cpu.c (x,
 * y, dy, dx (rows, c); the rest (c)):
 *   sl_bn_affine_cpu    y = (x - mean)*scale + beta
 *   sl_bn_bwd_sums_cpu  sdy = sum dy, sdxc = sum dy*(x - mean) in double
 *                       from blocked float partials (fdy, fdxc scratch)
 *   sl_bn_dx_cpu        dx = a*dy - k*(x - mean) - b (dx may be dy) */
void sl_bn_affine_cpu(int64_t rows, int c, const float *x, const float *mean,
                      const float *scale, const float *beta, float *y);
void sl_bn_bwd_sums_cpu(int64_t rows, int c, const float *x, const float *dy, const float *mean,
                        double *sdy, double *sdxc, float *fdy, float *fdxc);
void sl_bn_dx_cpu(int64_t rows, int c, const float *x, const float *dy, const float *mean,
                  const float *a, const float *k, const float *b, float *dx);

extern const sl_ops sl_ops_ref;
extern const sl_ops sl_ops_cpu;
extern const sl_ops sl_ops_cuda; /* no slots (NULL) in builds without CUDA + cuDNN */
/* Why every slot of table o is NULL (the cuda table of a build without
 * it: "this build has no cuda backend"), or NULL when o has ops (exec.c). */
const char *sl_ops_missing(const sl_ops *o);

#ifdef __cplusplus
}
#endif

#endif /* SL_OPS_H */

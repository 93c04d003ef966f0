/*
 * train/device/sgd_cuda.h - private to train/: SGD on the GPU, the update of
 * train/model/sgd.c (torch.optim.SGD with dampening 0) as one fused multi-tensor
 * kernel launch over every param tensor:
 *
 *   g   = grad + wd * p              (decay tensors only)
 *   buf = momentum * buf + g         (first step: buf = g)
 *   d   = nesterov ? g + momentum * buf : buf
 *   p  -= lr * d
 *
 * Source: torch/optim/sgd.py (_single_tensor_sgd); the float operations are
 * sgd.c's, in its order, without fused multiply-adds, so a step agrees with
 * sl_sgd_step on the host to the last bit where the host compiler does not
 * contract either.
 *
 * The caller (the cuda trainer) owns every buffer: the params, their grads,
 * one momentum buffer per param (numel floats each, zeroed or as loaded from
 * a checkpoint) and the tensor table, uploaded once to device memory since
 * the pointers do not change between steps. It counts steps itself and
 * passes first_step = (step == 0), as sl_sgd does.
 *
 * Loss scaling (fp16). With a loss scale state d_amp (train/ops/cuda_int.h's
 * sl_amp_state, device memory) the kernel reads the state itself, so the
 * host never waits for it: when found_inf is set (sl_amp_check_cuda found
 * an inf or nan among the grads) the whole step is a no-op - params and
 * momentum buffers keep every bit - and otherwise each gradient is
 * unscaled first, g = grad / scale (an IEEE division: exact for the
 * power-of-two scales GradScaler keeps), before the update above (torch's
 * GradScaler.unscale_ then step, which it skips on inf). The caller then
 * runs sl_amp_update_cuda. A skipped first step leaves the momentum
 * buffers as they were: zeroed buffers make the next step (first_step 0,
 * buf = momentum*0 + g) equal to a first one.
 *
 * Threading: one call enqueues one kernel on the exec's cuda stream
 * (ctx->stream) and returns without synchronizing; an sl_exec is used by one
 * thread at a time (train/ops/ops.h).
 */
#ifndef SL_SGD_CUDA_H
#define SL_SGD_CUDA_H

#include <stdint.h>

#include "train/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_amp_state sl_amp_state; /* train/ops/cuda_int.h */

/* One param tensor, all pointers device memory. */
typedef struct sl_sgd_cuda_tensor {
    float *param;          /* numel floats, updated in place */
    const float *grad;     /* numel floats, read only (left as it is, as sgd.c) */
    float *momentum;       /* numel floats: the momentum buffer */
    int64_t numel;         /* >= 0 */
    int decay;             /* nonzero: weight decay applies (SL_TENSOR_DECAY) */
} sl_sgd_cuda_tensor;

/* One SGD step over n tensors. t: a DEVICE array of n entries (not read by
 * the host). lr >= 0; momentum >= 0; wd >= 0 (applied to decay tensors
 * only); nesterov needs momentum > 0 (as torch.optim.SGD); first_step:
 * buf = g. d_amp: NULL (no loss scaling), or the device loss-scale state
 * (above: unscale, or skip the step on found_inf). SL_EINVAL for bad
 * hyperparameters or n (at most 65535 tensors), SL_ECUDA when the launch
 * fails (message names the kernel). n == 0 is a no-op. Built with the cuda
 * backend only (SLUICE_TRAIN_CUDA). */
int sl_sgd_step_cuda(sl_exec *e, const sl_sgd_cuda_tensor *t, int n, float lr, float momentum,
                     float wd, int nesterov, int first_step, const sl_amp_state *d_amp);
/* The same with the learning rate read by the kernel from d_lr (one device
 * float): a step captured into a CUDA graph then replays with whatever
 * the host has copied there since (the trainer's schedule). The value is
 * not checked (the host checks it before the copy). */
int sl_sgd_step_cuda_lr(sl_exec *e, const sl_sgd_cuda_tensor *t, int n, const float *d_lr,
                        float momentum, float wd, int nesterov, int first_step,
                        const sl_amp_state *d_amp);

#ifdef __cplusplus
}
#endif

#endif /* SL_SGD_CUDA_H */

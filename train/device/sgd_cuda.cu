// train/device/sgd_cuda.cu - the fused multi-tensor SGD step (sgd_cuda.h gives the
// contract; train/model/sgd.c is the host version it must agree with, and
// tests/train/device/test_sgd_cuda.c checks that over several steps).
//
// DESIGN
//   One launch for every tensor: grid (SGD_BLOCKS_X, n), block y owns tensor
//   y and its SGD_BLOCKS_X blocks stride over its elements. The table of
//   tensors lives in device memory (set up once by the caller), so a step is
//   one kernel launch whatever the model - ResNet-50's 161 params included -
//   and the host reads nothing. Blocks of small tensors find no work and
//   exit at once; the 128 blocks of the largest ResNet-50 tensor (2.4M
//   floats) give each thread ~72 elements. Memory-bound: 5 floats moved per
//   element (read p, grad, buf; write p, buf).
//   Arithmetic: sgd.c's expressions in its order with __fadd_rn/__fmul_rn,
//   which nvcc never fuses into FMAs: the same roundings as the host loop.
//   Loss scaling: a second instance of the kernel (UNSCALE) reads the
//   sl_amp_state first: found_inf set -> every thread returns before any
//   store; else g = __fdiv_rn(grad, scale) replaces grad. The plain
//   instance is the kernel as before, no extra loads.
#include <cuda_runtime.h>

#include <stdint.h>

#include "train/ops/cuda_int.h"
#include "train/device/sgd_cuda.h"

enum { SGD_THREADS = 256, SGD_BLOCKS_X = 128, SGD_MAX_TENSORS = 65535 };

// The gradient as the update sees it: grad, or grad / scale.
template <bool UNSCALE>
__device__ __forceinline__ float sgd_grad(const float *__restrict__ grad, int64_t i, float scale)
{
    return UNSCALE ? __fdiv_rn(grad[i], scale) : grad[i];
}

// One step of every tensor in tab (blockIdx.y picks the tensor). first:
// buf = g, torch's buffer starting as a copy of the gradient. UNSCALE: amp
// holds the loss scale (skip on found_inf, else divide by the scale).
// d_lr: NULL, or the learning rate in device memory (read instead of lr:
// a captured CUDA graph replays with the value the host wrote there).
template <bool UNSCALE>
__global__ void sgd_step_kernel(const sl_sgd_cuda_tensor *__restrict__ tab, float lr,
                                const float *__restrict__ d_lr, float mom, float wd_all,
                                int nesterov, int first, const sl_amp_state *__restrict__ amp)
{
    if (d_lr)
        lr = *d_lr;
    float scale = 1.0f;
    if (UNSCALE) {
        if (amp->found_inf)
            return; // the whole grid returns: params and momentum keep every bit
        scale = amp->scale;
    }
    sl_sgd_cuda_tensor t = tab[blockIdx.y];
    float *__restrict__ p = t.param;
    const float *__restrict__ grad = t.grad;
    float *__restrict__ buf = t.momentum;
    float wd = t.decay ? wd_all : 0.0f;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (first) {
        for (int64_t i = i0; i < t.numel; i += stride) {
            float g = __fadd_rn(sgd_grad<UNSCALE>(grad, i, scale), __fmul_rn(wd, p[i]));
            buf[i] = g;
            float d = nesterov ? __fadd_rn(g, __fmul_rn(mom, g)) : g;
            p[i] = __fsub_rn(p[i], __fmul_rn(lr, d));
        }
    } else if (nesterov) {
        for (int64_t i = i0; i < t.numel; i += stride) {
            float g = __fadd_rn(sgd_grad<UNSCALE>(grad, i, scale), __fmul_rn(wd, p[i]));
            float b = __fadd_rn(__fmul_rn(mom, buf[i]), g);
            buf[i] = b;
            p[i] = __fsub_rn(p[i], __fmul_rn(lr, __fadd_rn(g, __fmul_rn(mom, b))));
        }
    } else {
        for (int64_t i = i0; i < t.numel; i += stride) {
            float g = sgd_grad<UNSCALE>(grad, i, scale);
            float b = __fadd_rn(__fadd_rn(__fmul_rn(mom, buf[i]), g), __fmul_rn(wd, p[i]));
            buf[i] = b;
            p[i] = __fsub_rn(p[i], __fmul_rn(lr, b));
        }
    }
}

// Both entry points: lr or d_lr (the other 0 / NULL).
static int sgd_launch(const char *fn, sl_exec *e, const sl_sgd_cuda_tensor *t, int n, float lr,
                      const float *d_lr, float momentum, float wd, int nesterov, int first_step,
                      const sl_amp_state *d_amp)
{
    if (n < 0 || n > SGD_MAX_TENSORS || (n > 0 && !t))
        return sl_fail(SL_EINVAL, "%s: %d tensors (table %p): want 0..%d and a table", fn, n,
                       (const void *)t, SGD_MAX_TENSORS);
    if (!(lr >= 0.0f) || lr > 1e30f)
        return sl_fail(SL_EINVAL, "%s: bad learning rate %g", fn, (double)lr);
    if (!(momentum >= 0.0f) || !(wd >= 0.0f))
        return sl_fail(SL_EINVAL, "%s: bad momentum %g or weight_decay %g", fn,
                       (double)momentum, (double)wd);
    if (nesterov && momentum <= 0.0f) // as torch.optim.SGD
        return sl_fail(SL_EINVAL, "%s: Nesterov momentum requires a momentum", fn);
    sl_cuda_ctx *cx = e ? sl_cuda_of(e) : NULL;
    if (!cx)
        return sl_fail(SL_EINVAL, "%s: the exec has no cuda context", fn);
    if (n == 0)
        return SL_OK;
    int rc = SL_CUDA(cudaSetDevice(cx->device)); // current device: per host thread
    if (rc)
        return rc; // the message names this function and the call
    dim3 grid(SGD_BLOCKS_X, (unsigned)n);
    if (d_amp) {
        sgd_step_kernel<true><<<grid, SGD_THREADS, 0, cx->stream>>>(
            t, lr, d_lr, momentum, wd, nesterov != 0, first_step != 0, d_amp);
        rc = SL_LAUNCHED("sgd_step_kernel<unscale>");
    } else {
        sgd_step_kernel<false><<<grid, SGD_THREADS, 0, cx->stream>>>(
            t, lr, d_lr, momentum, wd, nesterov != 0, first_step != 0, nullptr);
        rc = SL_LAUNCHED("sgd_step_kernel");
    }
    if (rc)
        return sl_fail(rc, "%s: %d tensors: %s", fn, n, sl_errmsg());
    return SL_OK;
}

extern "C" int sl_sgd_step_cuda(sl_exec *e, const sl_sgd_cuda_tensor *t, int n, float lr,
                                float momentum, float wd, int nesterov, int first_step,
                                const sl_amp_state *d_amp)
{
    return sgd_launch("sl_sgd_step_cuda", e, t, n, lr, nullptr, momentum, wd, nesterov,
                      first_step, d_amp);
}

extern "C" int sl_sgd_step_cuda_lr(sl_exec *e, const sl_sgd_cuda_tensor *t, int n,
                                   const float *d_lr, float momentum, float wd, int nesterov,
                                   int first_step, const sl_amp_state *d_amp)
{
    if (!d_lr)
        return sl_fail(SL_EINVAL, "sl_sgd_step_cuda_lr: no learning rate");
    return sgd_launch("sl_sgd_step_cuda_lr", e, t, n, 0.0f, d_lr, momentum, wd, nesterov,
                      first_step, d_amp);
}

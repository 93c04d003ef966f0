// train/ops/amp_cuda.cu - mixed precision on the GPU (cuda_int.h gives the
// contracts): element casts between f32, bf16 and f16 (the model's compute
// copy of its weights, conv_cuda.cu's f32 weight gradients), and the
// dynamic loss scale of fp16 training - the inf/nan check of the gradients
// and the scale's update after a step, torch.cuda.amp.GradScaler's rules
// (torch/amp/grad_scaler.py; the update is aten's _amp_update_scale_,
// aten/src/ATen/native/cuda/AmpKernels.cu).
//
// DESIGN
//   Nothing here waits for the GPU or reads device memory on the host: a
//   step that scales its loss, checks its grads, steps SGD (which reads
//   found_inf itself, sgd_cuda.cu) and updates the scale is a queue of
//   kernels on ctx->stream, capturable into a CUDA graph.
//   Cast: a grid-stride loop, one element per iteration, through f32: the
//   widening of bf16 / f16 to f32 is exact, so bf16 <-> f16 rounds once
//   (__float2bfloat16_rn / __float2half_rn: round to nearest even,
//   overflow to inf, NaN kept a NaN). Memory-bound: ResNet-50's 25.6M
//   weights are 154 MB of traffic f32 -> bf16, ~0.05 ms on an H100.
//   Check: every thread scans its elements with one compare each
//   (!(|g| <= FLT_MAX) is true for inf and NaN), the block ORs the flags
//   (__syncthreads_or) and one thread of a block that saw one stores 1.
//   Stores of the same value from several blocks need no atomics; nothing
//   ever clears the flag but the update.
//   Update: one thread, after the step's kernels in stream order.
#include <cuda_runtime.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "train/ops/cuda_int.h"

enum { AMP_THREADS = 256, AMP_MAX_BLOCKS = 4096 };

static unsigned amp_blocks(int64_t n)
{
    int64_t b = (n + AMP_THREADS - 1) / AMP_THREADS;
    return (unsigned)(b < 1 ? 1 : b > AMP_MAX_BLOCKS ? (int64_t)AMP_MAX_BLOCKS : b);
}

static int amp_launched(const char *fn, const char *kernel, const char *file, int line)
{
    int rc = sl_cuda_launch_check(kernel, file, line);
    return rc ? sl_fail(rc, "%s: %s", fn, sl_errmsg()) : SL_OK;
}
#define AMP_LAUNCHED(fn, kernel) amp_launched((fn), (kernel), __FILE__, __LINE__)

// ------------------------------------------------------------------ cast

// dst[i] = D(src[i]) through f32.
template <typename S, typename D>
__global__ void cast_kernel(int64_t n, const S *__restrict__ src, D *__restrict__ dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        sl_st(dst + i, sl_ld(src + i));
}

static int dtype_ok(sl_dtype t) { return (int)t >= 0 && t <= SL_DTYPE_LAST; }

extern "C" int sl_cast_cuda(sl_exec *e, int64_t n, const void *src, sl_dtype st, void *dst,
                            sl_dtype dt)
{
    const char *fn = "sl_cast_cuda";
    if (n < 0 || !dtype_ok(st) || !dtype_ok(dt))
        return sl_fail(SL_EINVAL, "%s: %lld elements from type %d to type %d", fn,
                       (long long)n, (int)st, (int)dt);
    sl_cuda_ctx *cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &cx);
    if (rc || n == 0 || (src == dst && st == dt))
        return rc;
    cudaStream_t s = cx->stream;
    unsigned nb = amp_blocks(n);
    // Two nested switches give the nine (S, D) kernels.
    return sl_act_switch(fn, st, [&](auto sv) -> int {
        using S = decltype(sv);
        return sl_act_switch(fn, dt, [&](auto dv) -> int {
            using D = decltype(dv);
            cast_kernel<S, D><<<nb, AMP_THREADS, 0, s>>>(n, (const S *)src, (D *)dst);
            int r = AMP_LAUNCHED(fn, "cast_kernel");
            return r ? sl_fail(r, "%s (%lld elements, %s -> %s)", sl_errmsg(), (long long)n,
                               sl_dtype_name(st), sl_dtype_name(dt))
                     : SL_OK;
        });
    });
}

// ------------------------------------------------------------------ check

__global__ void amp_check_kernel(int64_t n, const float *__restrict__ g, sl_amp_state *amp)
{
    int bad = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        bad |= !(fabsf(g[i]) <= FLT_MAX); // inf and NaN
    // Every thread of the block reaches this (the loop above has no early exit).
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        amp->found_inf = 1;
}

extern "C" int sl_amp_check_cuda(sl_exec *e, const float *grads, int64_t n, sl_amp_state *d_amp)
{
    const char *fn = "sl_amp_check_cuda";
    if (n < 0 || !d_amp || (n > 0 && !grads))
        return sl_fail(SL_EINVAL, "%s: %lld grads at %p, state %p", fn, (long long)n,
                       (const void *)grads, (void *)d_amp);
    sl_cuda_ctx *cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &cx);
    if (rc || n == 0)
        return rc;
    amp_check_kernel<<<amp_blocks(n), AMP_THREADS, 0, cx->stream>>>(n, grads, d_amp);
    return AMP_LAUNCHED(fn, "amp_check_kernel");
}

// ------------------------------------------------------------------ update

// aten's _amp_update_scale_cuda_kernel, with the skipped-step count.
__global__ void amp_update_kernel(sl_amp_state *amp, float growth, float backoff, int interval)
{
    if (amp->found_inf) {
        amp->scale = amp->scale * backoff;
        amp->good_steps = 0;
        amp->skipped++;
    } else {
        int good = amp->good_steps + 1;
        if (good == interval) {
            float grown = amp->scale * growth;
            if (isfinite(grown))
                amp->scale = grown;
            good = 0;
        }
        amp->good_steps = good;
    }
    amp->found_inf = 0;
}

extern "C" int sl_amp_update_cuda(sl_exec *e, sl_amp_state *d_amp, float growth, float backoff,
                                  int interval)
{
    const char *fn = "sl_amp_update_cuda";
    if (!d_amp)
        return sl_fail(SL_EINVAL, "%s: no state", fn);
    if (!(growth >= 1.0f && growth <= FLT_MAX) || !(backoff > 0.0f && backoff <= 1.0f) ||
        interval < 1)
        return sl_fail(SL_EINVAL, "%s: growth %g, backoff %g, interval %d: want growth >= 1, "
                       "0 < backoff <= 1, interval >= 1", fn, (double)growth, (double)backoff,
                       interval);
    sl_cuda_ctx *cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &cx);
    if (rc)
        return rc;
    amp_update_kernel<<<1, 1, 0, cx->stream>>>(d_amp, growth, backoff, interval);
    return AMP_LAUNCHED(fn, "amp_update_kernel");
}

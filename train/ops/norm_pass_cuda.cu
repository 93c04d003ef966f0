// train/ops/norm_pass_cuda.cu - batch norm's elementwise passes, cuda
// backend: the y pass (normalize, scale and shift; the fused shortcut add
// and ReLU) and the input-gradient pass, from per-channel constants that
// someone else made: norm_cuda.cu's finishing and prep kernels for the BN
// ops, fuse_cuda.cu's for the cuDNN fusion (sl_bn_apply_k_cuda,
// sl_bn_dx_k_cuda), so that both run the same passes and roundings.
//
// DESIGN (norm_cuda.cu's DESIGN has the whole story: layout, vector loads,
// the cut of a pass)
//   A pass is memory-bound: each thread reads its V channels' float4
//   constants once into registers, then walks rows y*k + lane, + gy*k, ...
//   of its vector column, one 16-byte load per row and tensor (V = 1 when
//   c or a pointer does not allow it). Grid: about BN_APPLY_BLOCKS_PER_SM
//   blocks of BN_THREADS per SM (more than a reduction's 4: nothing to
//   merge, more loads in flight). Per-element arithmetic in f32, the
//   formulas of norm_cuda.cu's DESIGN; intermediates rounded to T where the
//   unfused ops store them (bn -> add -> relu keeps its bits fused).
//   Aliasing: y may be x or r, dx may be dy or x (each element is read
//   before it is written, and not read after). Runs on cx->stream;
//   nothing synchronizes the host.
#include <cuda_runtime.h>

#include <stdint.h>

#include "train/ops/cuda_int.h"
#include "train/ops/norm_cuda.h"

enum { BN_APPLY_BLOCKS_PER_SM = 8 }; // elementwise passes: blocks per SM

// v rounded to T and widened back (f32: v): what a store and a load give.
template <typename T>
__device__ __forceinline__ float bn_round(float v)
{
    T h;
    sl_st(&h, v);
    return sl_ld(&h);
}

// The float4 constants of vector column vc's V channels, unpacked into
// registers (an elementwise pass reads them once).
template <int V>
__device__ __forceinline__ void bn_consts(const float4 *__restrict__ k, int vc, float (&a)[V],
                                          float (&b)[V], float (&c)[V], float (&d)[V])
{
    #pragma unroll
    for (int v = 0; v < V; v++) {
        float4 q = k[vc * V + v];
        a[v] = q.x, b[v] = q.y, c[v] = q.z, d[v] = q.w;
    }
}

// y = ((x - K) - md)*scale + beta with ap[ch] = (K, md, scale, beta); with r
// (not NULL): y = T(y) + r in f32 as add_kernel; with relu: y = max(T(y),
// 0) as relu_fwd_kernel (NaN passes). Rounding to T where the unfused ops
// store keeps the fused result the bits of bn -> add -> relu. y may be x
// or r.
template <typename T, int V>
__global__ void __launch_bounds__(BN_THREADS)
    bn_apply_kernel(int64_t rows, int c, bn_plan p, const T *x, const float4 *__restrict__ ap,
                    const T *r, int relu, T *y)
{
    bn_pos w = bn_where(p);
    if (!w.live)
        return;
    float K[V], md[V], sc[V], bt[V];
    bn_consts<V>(ap, w.vc, K, md, sc, bt);
    int64_t col = (int64_t)w.vc * V, step = (int64_t)gridDim.y * p.k;
    #pragma unroll 4
    for (int64_t row = (int64_t)blockIdx.y * p.k + w.lane; row < rows; row += step) {
        int64_t i = row * c + col;
        float v8[V];
        sl_ldv<T, V>(x + i, v8);
        #pragma unroll
        for (int v = 0; v < V; v++)
            v8[v] = ((v8[v] - K[v]) - md[v]) * sc[v] + bt[v];
        if (r) {
            float rv[V];
            sl_ldv<T, V>(r + i, rv);
            #pragma unroll
            for (int v = 0; v < V; v++)
                v8[v] = bn_round<T>(v8[v]) + rv[v];
        }
        if (relu) {
            #pragma unroll
            for (int v = 0; v < V; v++) {
                float u = bn_round<T>(v8[v]);
                v8[v] = u < 0.0f ? 0.0f : u;
            }
        }
        sl_stv<T, V>(y + i, v8);
    }
}

// dx = A*dy - B*(x - mean) - C with coef[ch] = (mean, A, B, C). x, dy and
// dx may alias (dx written over x: the model's in-place backward).
template <typename T, int V>
__global__ void __launch_bounds__(BN_THREADS)
    bn_bwd_apply_kernel(int64_t rows, int c, bn_plan p, const T *x, const T *dy,
                        const float4 *__restrict__ coef, T *dx)
{
    bn_pos w = bn_where(p);
    if (!w.live)
        return;
    float mu[V], A[V], B[V], C[V];
    bn_consts<V>(coef, w.vc, mu, A, B, C);
    int64_t col = (int64_t)w.vc * V, step = (int64_t)gridDim.y * p.k;
    #pragma unroll 4
    for (int64_t r = (int64_t)blockIdx.y * p.k + w.lane; r < rows; r += step) {
        int64_t i = r * c + col;
        float xv[V], g[V];
        sl_ldv<T, V>(x + i, xv);
        sl_ldv<T, V>(dy + i, g);
        #pragma unroll
        for (int v = 0; v < V; v++)
            g[v] = (A[v] * g[v] - C[v]) - B[v] * (xv[v] - mu[v]);
        sl_stv<T, V>(dx + i, g);
    }
}

// ------------------------------------------------------------------ host side

// The elementwise plan of one call on cx's device.
static bn_plan bn_plan_apply(const sl_cuda_ctx *cx, int64_t rows, int c, int V)
{
    return bn_plan_make(rows, c, V, cx->sms * BN_APPLY_BLOCKS_PER_SM);
}

int sl_bn_y_pass(const char *fn, sl_cuda_ctx *cx, sl_dtype act, int64_t rows, int c,
                 const float *x, const float4 *k, const float *r, int relu, float *y)
{
    return bn_each(fn, act, c, {x, r, y}, [&](auto t, auto vw) -> int {
        using T = decltype(t);
        constexpr int V = decltype(vw)::value;
        bn_plan pa = bn_plan_apply(cx, rows, c, V);
        bn_apply_kernel<T, V><<<bn_grid(pa), BN_THREADS, 0, cx->stream>>>(
            rows, c, pa, (const T *)x, k, (const T *)r, relu, (T *)y);
        if (int rc = SL_LAUNCHED("bn_apply_kernel"))
            return bn_launch_fail(fn, rc, rows, c);
        return SL_OK;
    });
}

int sl_bn_dx_pass(const char *fn, sl_cuda_ctx *cx, sl_dtype act, int64_t rows, int c,
                  const float *x, const float *dy, const float4 *k, float *dx)
{
    return bn_each(fn, act, c, {x, dy, dx}, [&](auto t, auto vw) -> int {
        using T = decltype(t);
        constexpr int V = decltype(vw)::value;
        bn_plan pa = bn_plan_apply(cx, rows, c, V);
        bn_bwd_apply_kernel<T, V><<<bn_grid(pa), BN_THREADS, 0, cx->stream>>>(
            rows, c, pa, (const T *)x, (const T *)dy, k, (T *)dx);
        if (int rc = SL_LAUNCHED("bn_bwd_apply_kernel"))
            return bn_launch_fail(fn, rc, rows, c);
        return SL_OK;
    });
}

// ------------------------------------------- cuDNN fusion's passes (fuse_cuda.cu)
// The passes with per-channel constants made by fuse_cuda.cu's kernels
// (16-byte aligned float4s): y = ((x - K) - md)*scale + beta (+ r, ReLU)
// and dx = A*dy - B*(x - mu) - C, the same passes and roundings as the
// unfused ops'.
extern "C" int sl_bn_apply_k_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                  const void *k, const float *r, int relu, float *y)
{
    const char *fn = "sl_fuse_bn_apply";
    sl_cuda_ctx *cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &cx);
    if (rc || rows == 0)
        return rc;
    return sl_bn_y_pass(fn, cx, e->act, rows, c, x, (const float4 *)k, r, relu, y);
}

extern "C" int sl_bn_dx_k_cuda(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                               const void *k, float *dx)
{
    const char *fn = "sl_fuse_bn_dx";
    sl_cuda_ctx *cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &cx);
    if (rc || rows == 0)
        return rc;
    return sl_bn_dx_pass(fn, cx, e->act, rows, c, x, dy, (const float4 *)k, dx);
}

// train/ops/norm_cuda.h - private to norm_cuda.cu and norm_pass_cuda.cu
// (nvcc only, included after cuda_int.h): the cut of a (rows, c) batch-norm
// pass over the grid, a thread's place in it, the choice of element type
// and vector width, the launch check, and the two elementwise passes
// norm_pass_cuda.cu runs for norm_cuda.cu's ops and for the cuDNN fusion.
//
// DESIGN: norm_cuda.cu's comment says why the passes are cut this way
// (tiles of cw vector columns times k row lanes, gy row blocks sized for
// the device). Nothing here synchronizes the host; everything runs on the
// context's stream.
#ifndef SL_NORM_CUDA_H
#define SL_NORM_CUDA_H

#include <cuda_runtime.h>

#include <stdint.h>
#include <initializer_list>
#include <type_traits>

#include "train/ops/cuda_int.h"

enum { BN_THREADS = 256 };

// The cut of a (rows, c) pass (the file's DESIGN).
struct bn_plan {
    int cv, cw, k, tiles, gy;
};

static inline bn_plan bn_plan_make(int64_t rows, int c, int V, int max_blocks)
{
    bn_plan p;
    p.cv = c / V;
    p.cw = p.cv < BN_THREADS ? p.cv : BN_THREADS;
    p.k = BN_THREADS / p.cw;
    p.tiles = (p.cv + p.cw - 1) / p.cw;
    int64_t need = (rows + p.k - 1) / p.k; // row blocks that have a row
    int64_t cap = max_blocks / p.tiles;
    if (cap < 1)
        cap = 1;
    int64_t gy = need < cap ? need : cap;
    p.gy = (int)(gy < 1 ? 1 : gy > 65535 ? 65535 : gy);
    return p;
}

// This thread's place in a plan: row lane, vector column; false when it
// has no columns (a partial last tile, or lanes past k).
struct bn_pos {
    int lane, vc;
    bool live;
};
static __device__ __forceinline__ bn_pos bn_where(const bn_plan &p)
{
    bn_pos w;
    w.lane = (int)threadIdx.x / p.cw;
    w.vc = (int)blockIdx.x * p.cw + ((int)threadIdx.x - w.lane * p.cw);
    w.live = w.lane < p.k && w.vc < p.cv;
    return w;
}

static inline dim3 bn_grid(const bn_plan &p) { return dim3((unsigned)p.tiles, (unsigned)p.gy); }

// A failed launch (rc from SL_LAUNCHED), wrapped with the op and its shape.
static inline int bn_launch_fail(const char *fn, int rc, int64_t rows, int c)
{
    return sl_fail(rc, "%s: %lld rows of %d channels: %s", fn, (long long)rows, c, sl_errmsg());
}

// f(std::integral_constant<int, V>()) with V = sl_vw<T>() when c is a
// multiple of it and every pointer in ps is 16-byte aligned (or NULL),
// else V = 1.
template <typename T, typename F>
static inline int bn_vec(int c, std::initializer_list<const void *> ps, F f)
{
    bool vec = c % sl_vw<T>() == 0;
    for (const void *p : ps)
        vec = vec && sl_vec_ok(p);
    if (vec)
        return f(std::integral_constant<int, sl_vw<T>()>());
    return f(std::integral_constant<int, 1>());
}

// f(T(), std::integral_constant<int, V>()) with T the element type of act
// (sl_act_switch) and V its vector width over the pointers ps (bn_vec):
// the host side of every pass.
template <typename F>
static inline int bn_each(const char *fn, sl_dtype act, int c,
                          std::initializer_list<const void *> ps, F f)
{
    return sl_act_switch(fn, act, [&](auto t) -> int {
        using T = decltype(t);
        return bn_vec<T>(c, ps, [&](auto vw) -> int { return f(t, vw); });
    });
}

// norm_pass_cuda.cu's passes over the rows of x (act elements), with the per-channel float4 constants k (c of them,
// 16-byte aligned) on cx's stream; fn names the op in messages:
//   y pass   y = ((x - K) - md)*scale + beta from k = (K, md, scale, beta),
//            then + r (r not NULL), then max(., 0) (relu), rounded to act
//            where the unfused ops store; y may be x or r;
//   dx pass  dx = A*dy - B*(x - mu) - C from k = (mu, A, B, C); dx may be
//            x or dy.
int sl_bn_y_pass(const char *fn, sl_cuda_ctx *cx, sl_dtype act, int64_t rows, int c,
                 const float *x, const float4 *k, const float *r, int relu, float *y);
int sl_bn_dx_pass(const char *fn, sl_cuda_ctx *cx, sl_dtype act, int64_t rows, int c,
                  const float *x, const float *dy, const float4 *k, float *dx);

#endif /* SL_NORM_CUDA_H */

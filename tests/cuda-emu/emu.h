// emu.h - included first by every converted .cu file (conv.py): the device
// side of the host emulator. Kernels run as fibers (one per thread, one
// block at a time); __syncthreads is a fiber barrier; shuffles go through a
// slot array and a barrier. Launches are queued on their stream
// (emu_core.h) and run when the stream is flushed.
#pragma once
#include <cuda_runtime_api.h>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
using std::isnan;
#define __global__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
void emu_sync();
int emu_sync_or(int v);
double emu_shfl_down(double v, int o);
#define __syncthreads() emu_sync()
#define __syncthreads_or(v) emu_sync_or((v))
#define __shfl_down_sync(mask, v, o) emu_shfl_down((v), (o))
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
// one block at a time, threads interleave only at barriers: plain ops are atomic
static inline int atomicMin(int *p, int v) { int o = *p; if (v < o) *p = v; return o; }
static inline int atomicMax(int *p, int v) { int o = *p; if (v > o) *p = v; return o; }
static inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline double atomicAdd(double *p, double v) { double o = *p; *p = o + v; return o; }
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double v) { long long d; memcpy(&d, &v, 8); return d; }

// Launch: validated and queued on stream s; f runs every block later.
void emu_launch(const char *name, dim3 g, dim3 b, size_t shm, cudaStream_t s,
                std::function<void()> f);
// A kernel argument that is a pointer must be device (or pinned) memory.
void emu_check_kernel_ptr(const char *kernel, int arg, const void *p);
template <class T> static inline void emu_check_one(const char *k, int i, const T &v)
{
    if constexpr (std::is_pointer<T>::value)
        emu_check_kernel_ptr(k, i, (const void *)v);
}
template <class Tup> static inline void emu_check_args(const char *k, const Tup &t)
{
    std::apply([&](const auto &...a) { int i = 0; (emu_check_one(k, i++, a), ...); }, t);
}

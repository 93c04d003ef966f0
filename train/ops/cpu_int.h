/*
 * train/ops/cpu_int.h - private to the cpu backend's files (conv_cpu.c,
 * norm_cpu.c, norm_sync_cpu.c, act_cpu.c, linear_cpu.c): its two helpers.
 *
 *   conv_dnnl.c  oneDNN's convolutions (built with SLUICE_WITH_DNNL, which
 *                CMakeLists.txt sets when libdnnl-dev and OpenMP are found);
 *                without it the inline stubs below say SL_ENOTSUP and
 *                conv_cpu.c keeps its im2col + OpenBLAS path.
 *   par_cpu.c    sl_par_for: a loop split over the exec's threads (the
 *                memory-bound passes: BN, ReLU, add, pooling).
 *
 * Threading: both run on the calling thread plus, for sl_exec.threads > 1,
 * the OpenMP team of that thread (libgomp's, the one oneDNN's kernels use
 * too, so convolutions and passes share one set of worker threads instead of
 * two pools spinning against each other on the same cores). Each OS thread
 * that calls in (a replica) has its own team, sized by its exec.
 */
#ifndef SL_TRAIN_OPS_CPU_INT_H
#define SL_TRAIN_OPS_CPU_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h> /* getenv */
#include <string.h>

#include "train/ops/ops.h"

/* fn(arg, lo, hi) over [lo, hi) sub-ranges that tile [0, n): contiguous,
 * in order, at most e->threads of them, none shorter than grain items
 * (n < 2*grain runs as one call on the calling thread). The ranges are a
 * function of n, grain and e->threads only; fn must write disjoint memory
 * for disjoint ranges. Returns when every range is done. */
typedef void (*sl_par_fn)(void *arg, int64_t lo, int64_t hi);
void sl_par_for(const sl_exec *e, int64_t n, int64_t grain, sl_par_fn fn, void *arg);

/* norm_cpu.c's passes on the exec's threads, the same bits as their
 * single-threaded forms in ops.h (sl_bn_stats_cpu, sl_bn_affine_cpu,
 * sl_bn_bwd_sums_cpu, sl_bn_dx_cpu), which they run when e has one thread
 * or the tensor is small. x, dy, y, dx are activations in e->act (f32 or
 * bf16: the float pointers are addresses); the rest f32. The reductions need part, scratch of
 * sl_bn_par_floats(e, rows, c) floats (0: they run serially; part may then
 * be NULL); the caller carves it out of its one sl_exec_scratch request. */
int64_t sl_bn_par_floats(const sl_exec *e, int64_t rows, int c);
void sl_bn_stats_par(const sl_exec *e, int64_t rows, int c, const float *x, double *mean,
                     double *m2, float *bmean, float *s1, float *s2, float *part);
void sl_bn_bwd_sums_par(const sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                        const float *mean, double *sdy, double *sdxc, float *fdy, float *fdxc,
                        float *part);
void sl_bn_affine_par(const sl_exec *e, int64_t rows, int c, const float *x, const float *mean,
                      const float *scale, const float *beta, float *y);
void sl_bn_dx_par(const sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                  const float *mean, const float *a, const float *k, const float *b, float *dx);

/* The cpu table's fused BN slots (norm_cpu.c; ops.h's
 * bn_fwd_train_act, bn_bwd_act: the unfused ops' bits in one pass). */
int sl_bn_fwd_train_act_cpu(sl_exec *e, int64_t rows, int c, const float *x,
                            const float *gamma, const float *beta, float momentum, float eps,
                            float *running_mean, float *running_var, const float *r, int relu,
                            float *y, float *save_mean, float *save_invstd);
int sl_bn_bwd_act_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *z,
                      float *dz, const float *gamma, const float *save_mean,
                      const float *save_invstd, float *dx, float *dgamma, float *dbeta);

/* Items per range for element-wise passes over floats: below this a
 * hand-off to the second thread costs more than it saves (a few µs). */
#define SL_PAR_GRAIN_FLOATS 32768

/* bf16 activations (ops.h's mixed precision; sl_exec.act ==
 * SL_DTYPE_BF16): the passes read bf16, compute in f32 and round what they
 * store to the nearest even bf16 (a NaN stays a quiet NaN), as the cuda
 * backend's kernels and oneDNN do. Inline so the channel loops vectorize.
 * collectives/dtype.c has the same conversions out of line for the
 * all-reduce; these are the passes' own, for the vectorizer. */
static inline float sl_bf16_ld(uint16_t h)
{
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
/* f rounded to bf16 (nearest even; a NaN made quiet), in the high half of
 * the float's 32 bits: kept in 32-bit lanes, so a rounding that is not
 * stored costs no narrowing and widening (4 vector operations and a
 * select, where the 16-bit round trip took 10). */
static inline uint32_t sl_bf16_rbits(float f)
{
    union { float f; uint32_t u; } v = {f};
    uint32_t u = v.u;
    return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x400000u) & 0xffff0000u
                                          : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
static inline uint16_t sl_bf16_st(float f) { return (uint16_t)(sl_bf16_rbits(f) >> 16); }
/* f rounded to bf16's precision, kept as a float (a fused pass's
 * intermediate that its unfused ops would have stored). */
static inline float sl_bf16_round(float f)
{
    union { uint32_t u; float f; } v = {sl_bf16_rbits(f)};
    return v.f;
}
/* The passes' kernels (norm_kern_cpu.h, act_kern_cpu.h, cast_cpu.c) in two
 * builds, picked at load time by the CPU (gcc's target_clones, an ifunc):
 * x86-64-v4 (AVX-512 F/BW/DQ/VL: BW for the 16-bit lanes of bf16) where the
 * CPU has it, x86-64's
 * SSE2 baseline elsewhere. The build targets the baseline (no -march), and
 * these memory-bound loops are where the width pays: the bf16 widening and
 * rounding, ~6 operations an element, take twice the time of the f32 pass
 * on SSE2. Elsewhere (another compiler or architecture): the baseline.
 * x86-64-v4 has FMA, which gcc would contract a*b + c into (one rounding,
 * not two): fp-contract off keeps both builds' arithmetic the baseline's,
 * so a pass gives the same bits on every x86-64 CPU. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define SL_KCLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#pragma GCC optimize("fp-contract=off")
#else
#define SL_KCLONES
#endif
/* Before a channel loop whose output may be one of its inputs (y = x in
 * place), and before the rows loop around it (a constant channel count
 * unrolls the channel loop into the rows loop, which gcc then vectorizes
 * instead): the output is that input or disjoint from it, so no element is
 * written before a later one is read and vectors are safe; without the
 * assertion gcc versions the loop on an overlap test that in-place calls
 * fail, and they ran scalar (bn_dx_bf16, 10% of the demo's bf16 step). */
#if defined(__GNUC__) && !defined(__clang__)
#define SL_IVDEP _Pragma("GCC ivdep")
#else
#define SL_IVDEP
#endif
/* Before a reduction's channel loop: kept a loop, so gcc vectorizes it
 * across channels with a constant count too (unrolled, the rows loop
 * around it did not vectorize, and the 8 channels' sums ran scalar: 3x). */
#if defined(__GNUC__) && !defined(__clang__)
#define SL_NOUNROLL _Pragma("GCC unroll 1")
#else
#define SL_NOUNROLL
#endif
/* A kernel's body, inlined into each clone that calls it, and the call of
 * body f(c, ...) with the channel count c a constant where it is one of
 * the narrow layers' (norm_kern_cpu.h says why), else as given. */
#define SL_KBODY static inline __attribute__((always_inline))
#define SL_BY_C(f, ...)                                                                      \
    do {                                                                                     \
        switch (c) {                                                                         \
        case 8: f(8, __VA_ARGS__); break;                                                    \
        case 16: f(16, __VA_ARGS__); break;                                                  \
        case 32: f(32, __VA_ARGS__); break;                                                  \
        default: f(c, __VA_ARGS__); break;                                                   \
        }                                                                                    \
    } while (0)

/* n values: bf16 -> f32 and f32 -> bf16 (rounded). */
void sl_bf16_widen(int64_t n, const uint16_t *src, float *dst);
void sl_bf16_narrow(int64_t n, const float *src, uint16_t *dst);

/* norm_avx512.c: the bf16 batch-norm passes of norm_kern_cpu.h
 * (stats_block, bn_apply, sums_block, bn_dx: the same arguments, the same
 * bits) on AVX-512 for c a multiple of 32 up to 2048. ok: 1 when they take
 * c (the CPU has AVX-512 F/BW/DQ, SLUICE_BN_AVX512 is not 0: read once).
 * set: for tests, 0 off, 1 on where the CPU has it, -1 back to the
 * environment's choice. */
int sl_bn512_ok(int c);
void sl_bn512_set(int mode);
void sl_bn512_stats_block(int64_t nb, int c, const uint16_t *xb, float *bmean, float *s1,
                          float *s2);
void sl_bn512_apply(int64_t rows, int c, const uint16_t *x, const float *hi, const float *lo,
                    const float *scale, const float *beta, const uint16_t *r, int relu,
                    uint16_t *y);
void sl_bn512_sums_block(int64_t nb, int c, const uint16_t *xb, const uint16_t *zb,
                         uint16_t *gb, const float *mean, float *fdy, float *fdxc);
void sl_bn512_dx(int64_t rows, int c, const uint16_t *x, const uint16_t *dy, const float *mean,
                 const float *a, const float *k, const float *b, uint16_t *dx);

/* 1 when the CPU has AVX-512 F and BW and AVX512-BF16 (vdpbf16ps), which
 * conv_c8.c's and conv_w1x1.c's kernels use. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static inline int sl_cpu_avx512bf16(void)
{
    __builtin_cpu_init(); /* idempotent: replicas calling it together store the same */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}
#else
static inline int sl_cpu_avx512bf16(void) { return 0; }
#endif

/* An AVX512-BF16 kernel of ours runs: the CPU has it and the environment
 * variable `var` (SLUICE_CONV_C8, SLUICE_CONV_W1X1) is not "0". */
static inline int sl_own_bf16_kernel(const char *var)
{
    const char *v = getenv(var);
    return !(v && !strcmp(v, "0")) && sl_cpu_avx512bf16();
}

/* conv_c8.c: the 3x3 conv of 8 channels to 8 (stride 1, pad 1) in bf16 on
 * AVX512-BF16. ok: 1 when it takes sh on e (bf16 activations, the CPU has
 * the instructions, SLUICE_CONV_C8 is not 0). sl_conv_c8: forward (x -> y)
 * or, bwd_data, dy -> dx with the same OHWI bf16 weights w. _filter: dw
 * (OHWI f32) from x and dy, the same bits on any thread count. */
int sl_conv_c8_ok(const sl_exec *e, const sl_conv_shape *sh);
int sl_conv_c8(sl_exec *e, const sl_conv_shape *sh, const uint16_t *x, const uint16_t *w,
               uint16_t *y, int bwd_data);
int sl_conv_c8_filter(sl_exec *e, const sl_conv_shape *sh, const uint16_t *x, const uint16_t *dy,
                      float *dw);

/* conv_w1x1.c: backward-filter of a 1x1 conv (pad 0, stride 1 or 2) in bf16
 * on AVX512-BF16. ok: 1 when it takes sh on e (bf16 activations, the CPU
 * has the instructions, c % 32 == 0, k % 64 == 0, n x p x q even, work
 * for each of e's threads, SLUICE_CONV_W1X1 is not 0). _filter: dw (OHWI f32) from x and dy, the
 * same bits on any thread count. */
int sl_conv_w1x1_ok(const sl_exec *e, const sl_conv_shape *sh);
int sl_conv_w1x1_filter(sl_exec *e, const sl_conv_shape *sh, const uint16_t *x,
                        const uint16_t *dy, float *dw);

#ifdef SLUICE_WITH_DNNL
/* 1 when the oneDNN path is on: built, and SLUICE_CPU_CONV is not "blas"
 * (the env switch that forces the im2col path; tests use it). Read per
 * call. */
int sl_dnnl_enabled(void);
/* "oneDNN 2.6.3 (OpenMP)": the library loaded (sl_train_cpu_conv). */
const char *sl_dnnl_describe(void);
/* oneDNN's effective ISA ("avx512_core_bf16", "avx512_core_amx", ...:
 * the CPU's, capped by DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA), and 1 when
 * it has bf16 dot products (AVX512-BF16 or AMX), the condition for bf16
 * convolutions at the hardware's pace. */
const char *sl_dnnl_isa(void);
int sl_dnnl_bf16(void);
/* The implementations oneDNN chose for the primitives made so far,
 * "forward bf16 brg:avx512_core_bf16; ..." (distinct ones, "; "-joined),
 * into buf (cap bytes, NUL-terminated, cut at a whole entry). */
void sl_dnnl_impls(char *buf, size_t cap);
/* The three passes of ops.h's conv slots through oneDNN, NHWC f32
 * activations, OHWI weights; the primitives are made on first use of a
 * (shape, pass, threads) and cached for the life of the process (conv_dnnl.c
 * says why), their scratchpads come from sl_exec_scratch. */
int sl_conv_fwd_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w,
                     float *y);
int sl_conv_bwd_data_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                          const float *w, float *dx);
int sl_conv_bwd_filter_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *x,
                            const float *dy, float *dw);
#else
static inline int sl_dnnl_enabled(void) { return 0; }
static inline const char *sl_dnnl_describe(void) { return "none"; }
static inline const char *sl_dnnl_isa(void) { return "none"; }
static inline int sl_dnnl_bf16(void) { return 0; }
static inline void sl_dnnl_impls(char *buf, size_t cap)
{
    if (cap)
        buf[0] = 0;
}
#define SL_DNNL_NONE                                                                         \
    return sl_fail(SL_ENOTSUP, "%s: this build has no oneDNN (SLUICE_WITH_DNNL)", __func__)
static inline int sl_conv_fwd_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *x,
                                   const float *w, float *y)
{ (void)e; (void)sh; (void)x; (void)w; (void)y; SL_DNNL_NONE; }
static inline int sl_conv_bwd_data_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                                        const float *w, float *dx)
{ (void)e; (void)sh; (void)dy; (void)w; (void)dx; SL_DNNL_NONE; }
static inline int sl_conv_bwd_filter_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *x,
                                          const float *dy, float *dw)
{ (void)e; (void)sh; (void)x; (void)dy; (void)dw; SL_DNNL_NONE; }
#undef SL_DNNL_NONE
#endif

#endif /* SL_TRAIN_OPS_CPU_INT_H */

/*
 * train/ops/cuda_int.h - private to train/: the cuda backend's execution
 * context (sl_exec.cuda) and the helpers its op files share
 * (DESIGN.md section 5; the GPU issue).
 *
 *   cuda_ctx.cu     sl_cuda_ctx_create/destroy (device, stream, cuDNN and
 *                   cuBLAS handles, workspace), the math-mode switch
 *   conv_cuda.cu    convolution forward / backward-data / backward-filter
 *                   through cuDNN, NHWC (filters KRSC = our OHWI), the
 *                   algorithm chosen once per shape and cached here
 *   norm_cuda.cu    batch norm (train, eval, backward), the fused BN+add+ReLU
 *                   forward and ReLU+BN backward, and the sync-BN pieces;
 *                   norm_pass_cuda.cu their elementwise passes (norm_cuda.h)
 *   act_cuda.cu     relu, add, max-pool, global average pool, softmax
 *                   cross-entropy
 *   linear_cuda.cu  fully connected through cuBLAS
 *   amp_cuda.cu     mixed precision: element casts, the loss scale's
 *                   inf/nan check and update
 *
 * Activation type. Every op honours e->act (ops.h's "Activation
 * type" table): the kernels are templates on the element type (float,
 * __nv_bfloat16, __half) that load, compute in f32 (or double where the
 * f32 op already did) and round to nearest even on the store; cuDNN
 * convolutions take descriptors of that type with compute type float. The
 * C++ helpers for this are at the end of this header (nvcc only).
 *
 * Every op runs on ctx->stream and does not synchronize the host, except
 * where the op's contract returns a host value (xent's loss and correct
 * count: they are copied back and the stream is synchronized there).
 * Pointers passed to the ops are device pointers (d_ naming in the op
 * files); int32 labels of xent too.
 *
 * Math mode. Convolutions and GEMMs may use TF32 tensor cores (the
 * default: the speed the GPU issue is about). SLUICE_CUDA_TF32=0 in the
 * environment (read at context creation) forces full fp32 math, which the
 * tests against the ref backend use (TF32 keeps 10 mantissa bits). It
 * concerns f32 data only: bf16 / f16 convolutions always run cuDNN's
 * tensor-op math with f32 accumulation (conv_cuda.cu).
 *
 * Built when CUDA and cuDNN are (SLUICE_TRAIN_CUDA, CMakeLists.txt).
 *
 * Threading: a context belongs to one sl_exec, used by one thread at a
 * time (ops.h).
 */
#ifndef SL_CUDA_INT_H
#define SL_CUDA_INT_H

#include <stddef.h>
#include <stdint.h>

#include "train/ops/ops.h"

#ifdef SLUICE_TRAIN_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "common/cuda_check.h" /* SL_CUDA(call) */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_conv_algo_cache sl_conv_algo_cache; /* conv_cuda.cu */
typedef struct sl_graph_cache sl_graph_cache;         /* graph_cuda.c */
struct sl_cuda_block {
    void *p;
    size_t bytes;
};
/* A user's state the context frees on destroy (sl_cuda_ctx_own). */
struct sl_cuda_owned {
    void *obj;
    void (*free_fn)(void *obj);
};
#define SL_CUDA_OWNED_MAX 4

typedef struct sl_cuda_ctx {
    int device;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    int tf32;                  /* tensor-core TF32 allowed (SLUICE_CUDA_TF32 != 0) */
    int fuse;                  /* the fused BN slots in the exec's table (SLUICE_CUDA_FUSE != 0) */
    int graph;                 /* the trainer may capture its step (SLUICE_CUDA_GRAPH != 0) */
    int cudnn_fusion;          /* cuDNN graph fusion with fp16 activations (SLUICE_CUDNN_FUSION
                                  != 0; ops.h's "cuDNN graph fusion") */
    int sms;                   /* the device's multiprocessors (grids of the bandwidth-bound
                                  kernels are sized for them: 132 on an H100 SXM) */
    void *d_ws;                /* cuDNN / cuBLAS workspace, grown on demand */
    size_t ws_cap;
    size_t ws_max;             /* the most one convolution may take (SLUICE_CUDNN_WS_MB) */
    void *d_tmp;               /* small device scratch for op internals (reductions) */
    size_t tmp_cap;
    int stem_pad;              /* SLUICE_CUDA_STEM_PAD: 0, or 4 / 8: convolutions of fewer input
                                  channels in bf16 / f16 run on that many, zero-padded (tensor
                                  cores want c a multiple of 4 or 8; conv_cuda.cu) */
    void *d_pad;               /* their padded copies, grown on demand */
    size_t pad_cap;
    void *h_pinned;            /* SL_CUDA_PINNED_BYTES of pinned host memory (xent's loss
                                  and count) */
    /* Device memory this context allocated (sl_cuda_malloc: the workspace,
     * tmp, and sl_mem_alloc's model, optimizer and feed buffers): bytes
     * live now and at most, and the allocations with their sizes. */
    size_t mem_live, mem_peak;
    struct sl_cuda_block *blocks;
    int nblocks, cap_blocks;
    unsigned mem_gen;          /* bumped when the workspace or tmp moves (a captured
                                  CUDA graph holds their old addresses) */
    int find;                  /* SLUICE_CUDNN_FIND != 0 (conv_cuda.cu's cache) */
    int det;                   /* SLUICE_CUDNN_DETERMINISTIC != 0 (its cache, graph_cuda.c's) */
    sl_conv_algo_cache *algos; /* conv_cuda.cu's per-shape algorithm choices */
    sl_graph_cache *graphs;    /* graph_cuda.c's per-shape cuDNN fusion plans */
    struct sl_cuda_owned owned[SL_CUDA_OWNED_MAX]; /* freed by destroy (sl_cuda_ctx_own) */
    int nowned;
} sl_cuda_ctx;

#define SL_CUDA_PINNED_BYTES 4096
#define SL_CUDNN_WS_MB_DEFAULT 256
#define SL_CUBLAS_WS_MB 32 /* NVIDIA's recommendation for Hopper's cuBLAS workspace */

/* Create the context on device (cudaSetDevice, stream, handles bound to the
 * stream, cuBLAS math mode per tf32). SL_ECUDA with the failing call, or
 * "no CUDA device" when the runtime finds none; SL_EINVAL for a bad
 * SLUICE_CUDA_TF32 / SLUICE_CUDNN_FIND / SLUICE_CUDNN_DETERMINISTIC /
 * SLUICE_CUDA_FUSE / SLUICE_CUDA_GRAPH / SLUICE_CUDNN_FUSION value (read here, 0 or 1) or SLUICE_CUDNN_WS_MB (a
 * whole number of MiB, default SL_CUDNN_WS_MB_DEFAULT) or SLUICE_CUDA_STEM_PAD
 * (0, 4 or 8). */
int sl_cuda_ctx_create(int device, sl_cuda_ctx **out);
/* NULL is a no-op. Syncs the stream, frees what its users gave it
 * (sl_cuda_ctx_own) in the order given, then the handles and buffers. */
void sl_cuda_ctx_destroy(sl_cuda_ctx *c);
/* Give c a user's state to free on destroy: free_fn(obj) runs once the
 * stream is idle and before the cuDNN handle goes (cuDNN descriptors and
 * plans must die first). The context thereby calls none of its users: the
 * algorithm cache and the fusion plans attach themselves
 * (sl_conv_algo_cache_attach, sl_graph_cache_attach: exec.c calls both
 * after sl_cuda_ctx_create). SL_ENOMEM past SL_CUDA_OWNED_MAX, obj then
 * freed with free_fn at once: either way the caller no longer owns it. */
int sl_cuda_ctx_own(sl_cuda_ctx *c, void *obj, void (*free_fn)(void *obj));
/* The context of a cuda sl_exec. */
static inline sl_cuda_ctx *sl_cuda_of(sl_exec *e) { return (sl_cuda_ctx *)e->cuda; }
/* The context of the cuda exec e, its device made the calling thread's
 * current one (the runtime's current device is per host thread;
 * cuda_ctx.cu's DESIGN): what every op does first. SL_EINVAL "fn: the exec
 * has no cuda context", or the cudaSetDevice failure. */
int sl_cuda_exec_ctx(const char *fn, sl_exec *e, sl_cuda_ctx **out);
/* cudaMalloc / cudaFree with the context's accounting (mem_live,
 * mem_peak): *out = NULL and SL_ENOMEM naming the size and what the device
 * has free when it fails. Free of NULL is a no-op; of a pointer this
 * context did not allocate, plain cudaFree. */
int sl_cuda_malloc(sl_cuda_ctx *c, size_t bytes, void **out);
void sl_cuda_free(sl_cuda_ctx *c, void *p);
/* Device workspace / scratch of at least bytes (grown with cudaFree +
 * cudaMalloc after a stream sync); NULL with sl_fail(SL_ECUDA) on failure. */
void *sl_cuda_workspace(sl_cuda_ctx *c, size_t bytes);
void *sl_cuda_tmp(sl_cuda_ctx *c, size_t bytes);
void *sl_cuda_pad(sl_cuda_ctx *c, size_t bytes); /* conv_cuda.cu's padded stem buffers */
/* cuDNN / cuBLAS status checks in SL_CUDA's style (call text, file, line,
 * the library's error string). */
int sl_cudnn_check(cudnnStatus_t s, const char *call, const char *file, int line);
int sl_cublas_check(cublasStatus_t s, const char *call, const char *file, int line);
#define SL_CUDNN(call) sl_cudnn_check((call), #call, __FILE__, __LINE__)
#define SL_CUBLAS(call) sl_cublas_check((call), #call, __FILE__, __LINE__)
/* After a kernel launch: cudaGetLastError() as an sl status naming the kernel. */
int sl_cuda_launch_check(const char *kernel, const char *file, int line);
#define SL_LAUNCHED(name) sl_cuda_launch_check((name), __FILE__, __LINE__)

/* conv_cuda.cu's cache, made by sl_conv_algo_cache_attach (c->algos, with
 * c->find and c->det, freed by sl_cuda_ctx_destroy). find: time every algorithm once per shape with
 * cudnnFind*AlgorithmEx (SLUICE_CUDNN_FIND=1) instead of taking cuDNN's
 * heuristic ranking (the default: no timing, the same choice every run).
 * deterministic: prefer the first deterministic candidate in rank order
 * (SLUICE_CUDNN_DETERMINISTIC=1, the default: runs reproduce); 0 takes the
 * first candidate at all, atomics included, as PyTorch's
 * cudnn.deterministic = False does. */
int sl_conv_algo_cache_attach(sl_cuda_ctx *c);

/* What the cache chose, for tests and perf tools. The cache key is the
 * shape and the activation type (a bf16 convolution of a shape is another
 * entry than its f32 one). */
typedef enum sl_conv_dir { SL_CONV_FWD = 0, SL_CONV_BWD_DATA, SL_CONV_BWD_FILTER } sl_conv_dir;
typedef struct sl_conv_algo_info {
    int algo;              /* the direction's cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math;  /* the math type it runs with */
    int deterministic;     /* cuDNN reports it as deterministic */
    size_t ws_bytes;       /* workspace it needs */
} sl_conv_algo_info;
/* Entries (shape, type) held and algorithm searches run so far (one per
 * entry and direction). */
void sl_conv_algo_stats(const sl_cuda_ctx *c, int *shapes, long *searches);
/* The choice for (sh, act, dir): SL_OK, or SL_ENOENT when that has not run yet. */
int sl_conv_algo_lookup(const sl_cuda_ctx *c, const sl_conv_shape *sh, sl_dtype act,
                        sl_conv_dir dir, sl_conv_algo_info *out);

SL_DECLARE_OPS(cuda)
/* The fused BN slots of ops.h (cuda only; norm_cuda.cu). */
int sl_bn_fwd_train_act_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                             const float *gamma, const float *beta, float momentum, float eps,
                             float *running_mean, float *running_var, const float *r, int relu,
                             float *y, float *save_mean, float *save_invstd);
int sl_bn_bwd_act_cuda(sl_exec *e, int64_t rows, int c, const float *x, const float *z, float *dz,
                       const float *gamma, const float *save_mean, const float *save_invstd,
                       float *dx, float *dgamma, float *dbeta);
/* The accumulating backward-data slot (conv_cuda.cu). */
int sl_conv_bwd_data_acc_cuda(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                              const float *w, float *dx, float *tmp);

/* ------------------------------------------------ cuDNN graph fusion */
/* graph_cuda.c (graph_build_cuda.c its graphs): cuDNN's plans
 * (ConvBNfprop, ConvBNwgrad, DgradDreluBNBwdWeight) per (kind, shape),
 * built on first use and kept until the context goes; the functions
 * behind ops.h's sl_fuse_* entry points, which checked the
 * arguments. deterministic: engine configurations whose numerical notes
 * say NONDETERMINISTIC are skipped (SLUICE_CUDNN_DETERMINISTIC, as the
 * convolutions'). fuse_cuda.cu: the BN finalize, fold, apply and
 * input-gradient kernels. */
int sl_graph_cache_attach(sl_cuda_ctx *c); /* c->graphs, with c->det; freed by destroy */
/* The exec can run the fused plans at all: a cuda exec with fp16
 * activations whose context reads SLUICE_CUDNN_FUSION as not 0. */
int sl_graph_available_cuda(const sl_exec *e);
int sl_graph_prepare_cuda(sl_exec *e, const sl_conv_shape *sh, unsigned kinds);
int sl_graph_conv_fwd_cuda(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                           const float *w, float *y, float *sum, float *sqsum);
int sl_graph_conv_wgrad_cuda(sl_exec *e, const sl_conv_shape *sh, const float *x,
                             const void *sb, const float *dy, float *dw);
int sl_graph_conv_dgrad_cuda(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                             const float *w, const float *xc, const float *mean,
                             const float *invstd, const float *gamma, const float *beta,
                             float *da, float *dgamma, float *dbeta, float *coef);
/* The state of graph g's plan (0 ConvBNfprop, 1 ConvBNwgrad, 2
 * DgradDreluBNBwdWeight) for sh: SL_OK, or SL_ENOENT when none was asked
 * for yet. The strings live as long as the context. */
int sl_graph_plan_info_cuda(const sl_exec *e, int g, const sl_conv_shape *sh,
                            sl_fuse_plan_info *out);
const char *sl_graph_refusal_cuda(const sl_exec *e);
/* Plans built and refused so far (tests). */
void sl_graph_stats(const sl_cuda_ctx *c, int *built, int *refused);
int sl_fuse_bn_finalize_cuda(sl_exec *e, int c, int64_t rows, const float *sum,
                             const float *sqsum, const float *gamma, const float *beta,
                             float momentum, float eps, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd, float *consts, void *sb);
int sl_fuse_bn_fold_cuda(sl_exec *e, int c, const float *gamma, const float *beta,
                         const float *save_mean, const float *save_invstd, float *consts,
                         void *sb);
int sl_fuse_bn_apply_cuda(sl_exec *e, int64_t rows, int c, const float *y, const float *consts,
                          const float *r, int relu, float *z);
int sl_fuse_bn_dx_cuda(sl_exec *e, int64_t rows, int c, const float *da, const float *xc,
                       const float *mean, float *coef, float *dx);
/* norm_pass_cuda.cu's apply and input-gradient passes with per-channel float4
 * constants k (16-byte aligned, c of them) that fuse_cuda.cu made:
 * y = ((x - K) - md)*scale + beta (+ r, then ReLU) from (K, md, scale,
 * beta); dx = A*dy - B*(x - mu) - C from (mu, A, B, C). */
int sl_bn_apply_k_cuda(sl_exec *e, int64_t rows, int c, const float *x, const void *k,
                       const float *r, int relu, float *y);
int sl_bn_dx_k_cuda(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                    const void *k, float *dx);

/* ------------------------------------------------------ mixed precision */
/* Each enqueues its kernels on ctx->stream and returns without waiting for
 * the GPU (the stream can be captured into a CUDA graph). All pointers are
 * device memory. */

/* dst[i] = (dt) src[i] for n elements, types from SL_DTYPE_*; on ctx->stream.
 * Narrowing rounds to nearest even (overflow gives inf, NaN stays NaN);
 * widening is exact. dst must not overlap src unless it is src with the
 * same type (a no-op). SL_EINVAL for n < 0 or a bad type; n == 0 is a
 * no-op. (amp_cuda.cu) */
int sl_cast_cuda(sl_exec *e, int64_t n, const void *src, sl_dtype st, void *dst, sl_dtype dt);

/* Softmax cross-entropy as xent_fwd_bwd (f32 logits/dlogits, label smoothing), with NO host
 * synchronization: d_acc[0] += the batch's mean loss, d_acc[1] += its correct count (device
 * doubles, the caller zeroes and reads them); dlogits are the usual (softmax - target)/n,
 * multiplied by *d_scale when d_scale is not NULL (device float: fp16 loss scaling).
 * The product is taken in float after the usual f32 dlogits, so a power-of-two
 * scale gives exactly scale times xent_fwd_bwd's dlogits. A label outside
 * [0, classes) (the feed checks labels on the host before they come here)
 * cannot be reported without a wait: that batch adds NaN to d_acc[0] (seen
 * at the next read), nothing to d_acc[1], and its dlogits are all zero (no
 * NaN reaches the weights). SL_EINVAL for bad n, classes or smoothing.
 * (act_cuda.cu) */
int sl_xent_acc_cuda(sl_exec *e, int n, int classes, const float *logits,
                     const int32_t *labels, float smoothing, const float *d_scale,
                     float *dlogits, double *d_acc);

/* Dynamic loss scaling state, in device memory (one per replica). */
typedef struct sl_amp_state {
    float scale;    /* the loss is multiplied by it (xent's d_scale points here) */
    int good_steps; /* steps since the last inf/nan or growth */
    int found_inf;  /* set by sl_amp_check_cuda, cleared by sl_amp_update_cuda */
    int skipped;    /* steps skipped for inf/nan so far */
} sl_amp_state;
/* found_inf = 1 if any of the n grads is inf or nan (leaves it 1 if already set).
 * n == 0 is a no-op; SL_EINVAL for n < 0. (amp_cuda.cu) */
int sl_amp_check_cuda(sl_exec *e, const float *grads, int64_t n, sl_amp_state *d_amp);
/* After the step: found_inf ? (scale *= backoff, good_steps = 0, skipped++)
 *                : (++good_steps == interval ? scale *= growth, good_steps = 0);
 * then found_inf = 0. (torch.cuda.amp.GradScaler: growth 2, backoff 0.5, interval 2000.)
 * As torch's _amp_update_scale_, a grown scale that is not finite is not
 * taken (the scale stays, good_steps restarts). SL_EINVAL unless growth is
 * finite and >= 1, 0 < backoff <= 1 and interval >= 1. (amp_cuda.cu) */
int sl_amp_update_cuda(sl_exec *e, sl_amp_state *d_amp, float growth, float backoff, int interval);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* ------------------------------------------- element types (nvcc only) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* One activation element to f32 (exact) and an f32 back to the element
 * type (round to nearest even; NaN stays NaN, overflow is inf). */
static __device__ __forceinline__ float sl_ld(const float *p) { return *p; }
static __device__ __forceinline__ float sl_ld(const __nv_bfloat16 *p)
{
    return __bfloat162float(*p);
}
static __device__ __forceinline__ float sl_ld(const __half *p) { return __half2float(*p); }
static __device__ __forceinline__ void sl_st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void sl_st(__nv_bfloat16 *p, float v)
{
    *p = __float2bfloat16_rn(v);
}
static __device__ __forceinline__ void sl_st(__half *p, float v) { *p = __float2half_rn(v); }

/* f(T()) with T the C++ element type of act: the host side of a templated
 * op, e.g.
 *     return sl_act_switch(fn, e->act, [&](auto t) -> int {
 *         using T = decltype(t);
 *         relu_kernel<T><<<...>>>(n, (const T *)x, (T *)y);
 *         return SL_LAUNCHED("relu_kernel");
 *     });
 * SL_EINVAL naming fn for a value that is no sl_dtype. */
template <typename F>
static inline int sl_act_switch(const char *fn, sl_dtype act, F f)
{
    switch (act) {
    case SL_DTYPE_F32:
        return f(float());
    case SL_DTYPE_BF16:
        return f(__nv_bfloat16());
    case SL_DTYPE_F16:
        return f(__half());
    }
    return sl_fail(SL_EINVAL, "%s: activation type %d is none of f32, bf16, f16", fn, (int)act);
}

/* V consecutive elements of type T to and from f32: one 16-byte load or
 * store when V * sizeof(T) == 16 (8 bf16 / f16, 4 floats: the pointer must
 * then be 16-byte aligned, which sl_vec_ok checks on the host), else V
 * scalar accesses (V == 1: the path for channel counts that are no
 * multiple of the vector width). */
template <typename T, int V>
static __device__ __forceinline__ void sl_ldv(const T *p, float (&f)[V])
{
    if constexpr (V * sizeof(T) == 16) {
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        const T *e = reinterpret_cast<const T *>(&u);
        #pragma unroll
        for (int v = 0; v < V; v++)
            f[v] = sl_ld(e + v);
    } else {
        #pragma unroll
        for (int v = 0; v < V; v++)
            f[v] = sl_ld(p + v);
    }
}
template <typename T, int V>
static __device__ __forceinline__ void sl_stv(T *p, const float (&f)[V])
{
    if constexpr (V * sizeof(T) == 16) {
        uint4 u;
        T *e = reinterpret_cast<T *>(&u);
        #pragma unroll
        for (int v = 0; v < V; v++)
            sl_st(e + v, f[v]);
        *reinterpret_cast<uint4 *>(p) = u;
    } else {
        #pragma unroll
        for (int v = 0; v < V; v++)
            sl_st(p + v, f[v]);
    }
}
/* Elements of T per 16-byte vector. */
template <typename T> static constexpr int sl_vw() { return (int)(16 / sizeof(T)); }
/* p is NULL or 16-byte aligned (host side: may the vector path take it). */
static inline bool sl_vec_ok(const void *p) { return ((uintptr_t)p & 15) == 0; }
#endif /* __CUDACC__ */

#endif /* SLUICE_TRAIN_CUDA */
#endif /* SL_CUDA_INT_H */

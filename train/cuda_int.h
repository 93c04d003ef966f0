/*
 * train/cuda_int.h - private to train/: the cuda backend's execution
 * context (sl_exec.cuda) and the helpers its op files share
 * (DESIGN.md section 5; the GPU issue).
 *
 *   cuda_ctx.cu     sl_cuda_ctx_create/destroy (device, stream, cuDNN and
 *                   cuBLAS handles, workspace), the math-mode switch
 *   conv_cuda.cu    convolution forward / backward-data / backward-filter
 *                   through cuDNN, NHWC (filters KRSC = our OHWI), the
 *                   algorithm chosen once per shape and cached here
 *   norm_cuda.cu    batch norm (train, eval, backward) and the sync-BN pieces
 *   act_cuda.cu     relu, add, max-pool, global average pool, softmax
 *                   cross-entropy
 *   linear_cuda.cu  fully connected through cuBLAS
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
 * tests against the ref backend use (TF32 keeps 10 mantissa bits).
 *
 * Built when CUDA and cuDNN are (SLUICE_TRAIN_CUDA, CMakeLists.txt).
 *
 * Threading: a context belongs to one sl_exec, used by one thread at a
 * time (train_int.h).
 */
#ifndef SL_CUDA_INT_H
#define SL_CUDA_INT_H

#include <stddef.h>

#include "train/train_int.h"

#ifdef SLUICE_TRAIN_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "pipeline/cuda_check.h" /* SL_CUDA(call) */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_conv_algo_cache sl_conv_algo_cache; /* conv_cuda.cu */

typedef struct sl_cuda_ctx {
    int device;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    int tf32;                  /* tensor-core TF32 allowed (SLUICE_CUDA_TF32 != 0) */
    void *d_ws;                /* cuDNN / cuBLAS workspace, grown on demand */
    size_t ws_cap;
    void *d_tmp;               /* small device scratch for op internals (reductions) */
    size_t tmp_cap;
    void *h_pinned;            /* SL_CUDA_PINNED_BYTES of pinned host memory (xent's loss
                                  and count) */
    sl_conv_algo_cache *algos; /* conv_cuda.cu's per-shape algorithm choices */
} sl_cuda_ctx;

#define SL_CUDA_PINNED_BYTES 4096

/* Create the context on device (cudaSetDevice, stream, handles bound to the
 * stream, cuBLAS math mode per tf32). SL_ECUDA with the failing call, or
 * "no CUDA device" when the runtime finds none; SL_EINVAL for a bad
 * SLUICE_CUDA_TF32 / SLUICE_CUDNN_FIND value (read here, 0 or 1). */
int sl_cuda_ctx_create(int device, sl_cuda_ctx **out);
void sl_cuda_ctx_destroy(sl_cuda_ctx *c); /* NULL is a no-op; frees the algorithm cache */
/* The context of a cuda sl_exec. */
static inline sl_cuda_ctx *sl_cuda_of(sl_exec *e) { return (sl_cuda_ctx *)e->cuda; }
/* Device workspace / scratch of at least bytes (grown with cudaFree +
 * cudaMalloc after a stream sync); NULL with sl_fail(SL_ECUDA) on failure. */
void *sl_cuda_workspace(sl_cuda_ctx *c, size_t bytes);
void *sl_cuda_tmp(sl_cuda_ctx *c, size_t bytes);
/* cuDNN / cuBLAS status checks in SL_CUDA's style (call text, file, line,
 * the library's error string). */
int sl_cudnn_check(cudnnStatus_t s, const char *call, const char *file, int line);
int sl_cublas_check(cublasStatus_t s, const char *call, const char *file, int line);
#define SL_CUDNN(call) sl_cudnn_check((call), #call, __FILE__, __LINE__)
#define SL_CUBLAS(call) sl_cublas_check((call), #call, __FILE__, __LINE__)
/* After a kernel launch: cudaGetLastError() as an sl status naming the kernel. */
int sl_cuda_launch_check(const char *kernel, const char *file, int line);
#define SL_LAUNCHED(name) sl_cuda_launch_check((name), __FILE__, __LINE__)

/* conv_cuda.cu's cache, made by sl_cuda_ctx_create and freed by
 * sl_cuda_ctx_destroy. find: time every algorithm once per shape with
 * cudnnFind*AlgorithmEx (SLUICE_CUDNN_FIND=1) instead of taking cuDNN's
 * heuristic ranking (the default: no timing, the same choice every run). */
int sl_conv_algo_cache_create(int find, sl_conv_algo_cache **out);
void sl_conv_algo_cache_free(sl_conv_algo_cache *c);

/* What the cache chose, for tests and perf tools. */
typedef enum sl_conv_dir { SL_CONV_FWD = 0, SL_CONV_BWD_DATA, SL_CONV_BWD_FILTER } sl_conv_dir;
typedef struct sl_conv_algo_info {
    int algo;              /* the direction's cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math;  /* the math type it runs with */
    int deterministic;     /* cuDNN reports it as deterministic */
    size_t ws_bytes;       /* workspace it needs */
} sl_conv_algo_info;
/* Shapes held and algorithm searches run so far (one per shape and direction). */
void sl_conv_algo_stats(const sl_cuda_ctx *c, int *shapes, long *searches);
/* The choice for (sh, dir): SL_OK, or SL_ENOENT when that pair has not run yet. */
int sl_conv_algo_lookup(const sl_cuda_ctx *c, const sl_conv_shape *sh, sl_conv_dir dir,
                        sl_conv_algo_info *out);

SL_DECLARE_OPS(cuda)

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_TRAIN_CUDA */
#endif /* SL_CUDA_INT_H */

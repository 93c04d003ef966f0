/*
 * train/ops/mem.h - private to train/: an exec's memory, beside its
 * execution context (cuda_ctx.cu for cuda execs), so that the model
 * (train/model/) places its tensors without reaching up into
 * train/device/ (README's layout: ops, model, device, ...).
 *
 *   mem_cuda.c  on the CUDA runtime, built with the cuda backend; execs
 *               of the ref and cpu backends work there too
 *   mem_none.c  builds without the cuda backend
 *
 * For ref and cpu execs "device" memory is host memory (sl_mem_alloc =
 * calloc with 64-byte alignment, copies are memcpy); for cuda it is
 * cudaMalloc'ed memory of the exec's device, counted by its context
 * (sl_cuda_malloc), and copies go through its stream. sl_mem_on_device
 * says which.
 *
 * Threading: an exec's memory belongs to the exec, used by one thread at a
 * time (ops.h).
 */
#ifndef SL_OPS_MEM_H
#define SL_OPS_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops/ops.h" /* the exec's struct; includes train.h */

/* A host exec's sl_mem_alloc (mem_cuda.c and mem_none.c both): bytes of
 * zeroed host memory, 64-byte aligned and rounded up to 64 (64 for 0).
 * *out NULL and SL_ENOMEM when there is none. */
static inline int sl_mem_host_alloc(size_t bytes, void **out)
{
    size_t cap = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    void *p = NULL;
    *out = NULL;
    if (posix_memalign(&p, 64, cap))
        return sl_fail(SL_ENOMEM, "sl_mem_alloc: %zu bytes of host memory", bytes);
    memset(p, 0, cap);
    *out = p;
    return SL_OK;
}

/* A host exec's sl_mem_cast (mem_cuda.c and mem_none.c both; cast_cpu.c):
 * n f32 values at src to dst in type dt: f32 (a move) or bf16 (rounded to
 * nearest even; the cpu backend's compute copy of the weights).
 * SL_ENOTSUP for f16 (no host backend computes in it). */
int sl_mem_host_cast(int64_t n, const float *src, void *dst, sl_dtype dt);

int sl_mem_on_device(const sl_exec *e); /* 1 for a cuda exec */
int sl_mem_device(const sl_exec *e);    /* its CUDA device ordinal; -1 for host execs */
void *sl_mem_stream(const sl_exec *e);  /* its cudaStream_t; NULL for host execs */
/* bytes of zeroed memory (64-byte aligned on the host). SL_ENOMEM / SL_ECUDA. */
int sl_mem_alloc(sl_exec *e, size_t bytes, void **out);
void sl_mem_free(sl_exec *e, void *p); /* NULL is a no-op */
/* host src -> device dst; returns when dst holds the data. */
int sl_mem_copy_in(sl_exec *e, void *dst, const void *src, size_t bytes);
/* device src -> host dst, after the work queued on e so far. */
int sl_mem_copy_out(sl_exec *e, void *dst, const void *src, size_t bytes);
/* n f32 values at src (device) to dst (device) in type dt (cuda: a kernel
 * on the stream; host: sl_mem_host_cast). */
int sl_mem_cast(sl_exec *e, int64_t n, const float *src, void *dst, sl_dtype dt);
/* Wait for everything queued on e. */
int sl_mem_sync(sl_exec *e);
/* Device memory of e (all zero for host execs): the bytes e's context has
 * allocated (model, optimizer, feed, cuDNN workspace, scratch: everything
 * sl_mem_alloc and the op files' buffers take) now and at most, and the
 * device's used and total bytes by cudaMemGetInfo (which also counts the
 * CUDA context, cuDNN's and cuBLAS's own buffers and the pipeline's). */
typedef struct sl_mem_info {
    size_t live, peak, device_used, device_total;
} sl_mem_info;
int sl_mem_usage(sl_exec *e, sl_mem_info *out);
/* dst = src, n bytes, both device memory (cuda: on the stream, not waited
 * for; host: a move). */
int sl_mem_copy(sl_exec *e, void *dst, const void *src, size_t bytes);

#endif /* SL_OPS_MEM_H */

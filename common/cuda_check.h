/*
 * common/cuda_check.h - SL_CUDA(call): check a CUDA runtime return code
 * and turn a failure into sl_fail(SL_ECUDA, ...) naming the function, the
 * call as written, its file and line, and CUDA's name and text for the
 * error (STYLE.md: every CUDA return code is checked and recorded).
 *
 *     int rc;
 *     if ((rc = SL_CUDA(cudaMalloc(&d_x, bytes))))
 *         goto free_host;
 *
 * gives, on failure, a message like
 *     "sl_loader_create: cudaMalloc(&d_x, bytes): pipeline/load_cuda.cu:88:
 *      cudaErrorMemoryAllocation: out of memory"
 *
 * The runtime's per-thread "last error" is cleared on failure, so a later
 * cudaGetLastError() after a kernel launch reports that launch, not an old
 * failed call. Usable from C (cuda_runtime_api.h is C) and from .cu files.
 *
 * Used by pipeline/ (the loader, the GPU decoder) and train/ (the CUDA
 * backend), which both check CUDA calls the same way.
 *
 * Threading: sl_fail sets the calling thread's message only.
 */
#ifndef SL_CUDA_CHECK_H
#define SL_CUDA_CHECK_H

#include <string.h>

#include <cuda_runtime_api.h>

#include "common/status.h"

/* "a/b/src/pipeline/load_cuda.cu" -> "pipeline/load_cuda.cu": the build
 * passes absolute paths; the module directory is what a reader needs. */
static inline const char *sl_cuda_short_file(const char *file)
{
    const char *last = strrchr(file, '/');
    if (!last)
        return file;
    const char *p = last;
    while (p > file && p[-1] != '/')
        p--;
    return p;
}

static inline int sl_cuda_check(cudaError_t e, const char *call, const char *func,
                                const char *file, int line)
{
    if (e == cudaSuccess)
        return SL_OK;
    (void)cudaGetLastError(); /* reset the non-sticky last error */
    return sl_fail(SL_ECUDA, "%s: %s: %s:%d: %s: %s", func, call, sl_cuda_short_file(file), line,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

#define SL_CUDA(call) sl_cuda_check((call), #call, __func__, __FILE__, __LINE__)

#endif /* SL_CUDA_CHECK_H */

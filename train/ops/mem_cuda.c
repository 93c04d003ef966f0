/*
 * train/ops/mem_cuda.c - mem.h on the CUDA runtime: device memory of an
 * exec (zeroed allocations counted by its context), copies in, out and
 * within, casts, syncs and the memory report. Built with the cuda backend
 * (CMakeLists.txt builds the train *_cuda.c files with it); mem_none.c
 * replaces it otherwise.
 *
 * Execs of the ref and cpu backends work here too: their "device" memory
 * is host memory, as in mem_none.c.
 *
 * Streams. Everything is enqueued on the exec's stream (ctx->stream, a
 * non-blocking stream: it does not serialize with the legacy default
 * stream), so copies use cudaMemcpyAsync on it and a stream synchronize
 * where the host needs the data.
 *
 * Threading: an exec's thread (mem.h).
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"
#include "train/ops/mem.h"

int sl_mem_on_device(const sl_exec *e) { return e && e->backend == SL_BACKEND_CUDA; }

int sl_mem_device(const sl_exec *e) { return sl_mem_on_device(e) ? sl_cuda_of((sl_exec *)e)->device : -1; }

void *sl_mem_stream(const sl_exec *e)
{
    return sl_mem_on_device(e) ? (void *)sl_cuda_of((sl_exec *)e)->stream : NULL;
}

int sl_mem_alloc(sl_exec *e, size_t bytes, void **out)
{
    *out = NULL;
    if (!sl_mem_on_device(e))
        return sl_mem_host_alloc(bytes, out);
    sl_cuda_ctx *c = sl_cuda_of(e);
    void *p = NULL;
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(c->device))))
        return rc;
    if ((rc = sl_cuda_malloc(c, bytes, &p)))
        return sl_fail(rc, "sl_mem_alloc: %s", sl_errmsg());
    if ((rc = SL_CUDA(cudaMemsetAsync(p, 0, bytes ? bytes : 64, c->stream))) ||
        (rc = SL_CUDA(cudaStreamSynchronize(c->stream)))) {
        sl_cuda_free(c, p);
        return rc;
    }
    *out = p;
    return SL_OK;
}

void sl_mem_free(sl_exec *e, void *p)
{
    if (!p)
        return;
    if (sl_mem_on_device(e))
        sl_cuda_free(sl_cuda_of(e), p);
    else
        free(p);
}

int sl_mem_usage(sl_exec *e, sl_mem_info *out)
{
    memset(out, 0, sizeof *out);
    if (!sl_mem_on_device(e))
        return SL_OK;
    sl_cuda_ctx *c = sl_cuda_of(e);
    size_t fr = 0, tot = 0;
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(c->device))) || (rc = SL_CUDA(cudaMemGetInfo(&fr, &tot))))
        return rc;
    out->live = c->mem_live, out->peak = c->mem_peak;
    out->device_used = tot - fr, out->device_total = tot;
    return SL_OK;
}

/* A copy on e's stream, waited for (a plain move for host execs). */
static int copy_sync(sl_exec *e, void *dst, const void *src, size_t bytes,
                     enum cudaMemcpyKind kind)
{
    if (!sl_mem_on_device(e)) {
        memmove(dst, src, bytes);
        return SL_OK;
    }
    cudaStream_t s = sl_cuda_of(e)->stream;
    int rc;
    if ((rc = SL_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, s))) ||
        (rc = SL_CUDA(cudaStreamSynchronize(s))))
        return rc;
    return SL_OK;
}

int sl_mem_copy_in(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    return copy_sync(e, dst, src, bytes, cudaMemcpyHostToDevice);
}

int sl_mem_copy_out(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    return copy_sync(e, dst, src, bytes, cudaMemcpyDeviceToHost);
}

int sl_mem_cast(sl_exec *e, int64_t n, const float *src, void *dst, sl_dtype dt)
{
    if (!sl_mem_on_device(e))
        return sl_mem_host_cast(n, src, dst, dt);
    return sl_cast_cuda(e, n, src, SL_DTYPE_F32, dst, dt);
}

int sl_mem_copy(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    if (!sl_mem_on_device(e)) {
        memmove(dst, src, bytes);
        return SL_OK;
    }
    return SL_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                   sl_cuda_of(e)->stream));
}

int sl_mem_sync(sl_exec *e)
{
    if (!sl_mem_on_device(e))
        return SL_OK;
    return SL_CUDA(cudaStreamSynchronize(sl_cuda_of(e)->stream));
}

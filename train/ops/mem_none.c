/*
 * train/ops/mem_none.c - mem.h in a build without the cuda backend: every
 * exec is a host exec, so "device" memory is host memory (64-byte aligned,
 * zeroed) and copies are moves. mem_cuda.c replaces it with CUDA.
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/mem.h"

int sl_mem_on_device(const sl_exec *e)
{
    (void)e;
    return 0;
}

int sl_mem_device(const sl_exec *e)
{
    (void)e;
    return -1;
}

void *sl_mem_stream(const sl_exec *e)
{
    (void)e;
    return NULL;
}

int sl_mem_alloc(sl_exec *e, size_t bytes, void **out)
{
    (void)e;
    return sl_mem_host_alloc(bytes, out);
}

void sl_mem_free(sl_exec *e, void *p)
{
    (void)e;
    free(p);
}

int sl_mem_usage(sl_exec *e, sl_mem_info *out)
{
    (void)e;
    memset(out, 0, sizeof *out);
    return SL_OK;
}

int sl_mem_copy_in(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    (void)e;
    memmove(dst, src, bytes);
    return SL_OK;
}

int sl_mem_copy_out(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    (void)e;
    memmove(dst, src, bytes);
    return SL_OK;
}

int sl_mem_cast(sl_exec *e, int64_t n, const float *src, void *dst, sl_dtype dt)
{
    (void)e;
    return sl_mem_host_cast(n, src, dst, dt);
}

int sl_mem_copy(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    (void)e;
    memmove(dst, src, bytes);
    return SL_OK;
}

int sl_mem_sync(sl_exec *e)
{
    (void)e;
    return SL_OK;
}

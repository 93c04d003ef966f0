/*
 * python/src/device.c - the binding's CUDA runtime calls (ext.h's
 * pysl_dev_*): the one place with #if SLUICE_WITH_CUDA in python/. Without
 * CUDA each says SL_ENOTSUP (a pipeline with a device is refused before
 * any of them could be reached).
 *
 * Threading: called with the GIL released where they may wait (sync, copy);
 * each sets the device first (the runtime's current device is per thread).
 */
#include "ext.h"

#include "common/status.h"

#if SLUICE_WITH_CUDA
#include <cuda_runtime.h>

static int cuda_fail(const char *fn, const char *call, cudaError_t e)
{
    return sl_fail(SL_ECUDA, "%s: %s: %s", fn, call, cudaGetErrorString(e));
}

#define TRY(fn, call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail(fn, #call, e_);                                                       \
    } while (0)

int pysl_dev_stream_wait(int device, uintptr_t stream, void *event)
{
    static const char fn[] = "sluice.Tensor.__dlpack__";
    TRY(fn, cudaSetDevice(device));
    TRY(fn, cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return SL_OK;
}

int pysl_dev_streams_sync(int device, const uintptr_t *streams, int n)
{
    static const char fn[] = "sluice.Pipeline: releasing a device batch";
    TRY(fn, cudaSetDevice(device));
    for (int i = 0; i < n; i++) {
        /* an event recorded now on the stream: its work so far, not later work */
        cudaEvent_t ev;
        TRY(fn, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        cudaError_t e = cudaEventRecord(ev, (cudaStream_t)streams[i]);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(ev);
        (void)cudaEventDestroy(ev);
        if (e != cudaSuccess)
            return cuda_fail(fn, "cudaEventRecord/Synchronize on the consumer's stream", e);
    }
    return SL_OK;
}

int pysl_dev_alloc(int device, size_t n, void **out)
{
    static const char fn[] = "sluice: device copy";
    TRY(fn, cudaSetDevice(device));
    TRY(fn, cudaMalloc(out, n));
    return SL_OK;
}

void pysl_dev_free(int device, void *p)
{
    /* a deleter cannot report: the codes are dropped */
    (void)cudaSetDevice(device);
    (void)cudaFree(p);
    (void)cudaGetLastError();
}

int pysl_dev_copy(int device, void *dst, const void *src, size_t n, void *event)
{
    static const char fn[] = "sluice: device copy";
    TRY(fn, cudaSetDevice(device));
    if (event)
        TRY(fn, cudaEventSynchronize((cudaEvent_t)event));
    TRY(fn, cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
    return SL_OK;
}

int pysl_dev_check(int device)
{
    static const char fn[] = "sluice.Pipeline";
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || (e == cudaSuccess && n == 0)) {
        (void)cudaGetLastError();
        return sl_fail(SL_ECUDA, "%s: device='cuda:%d': no CUDA GPU on this machine (%s; "
                       "device=None gives host batches)", fn, device,
                       e == cudaSuccess ? "no device" : "no GPU driver loaded");
    }
    if (e != cudaSuccess)
        return cuda_fail(fn, "cudaGetDeviceCount", e);
    if (device >= n)
        return sl_fail(SL_ECUDA, "%s: device='cuda:%d': no such CUDA device (%d found: cuda:0 "
                       "to cuda:%d)", fn, device, n, n - 1);
    return SL_OK;
}

#else /* no CUDA */

int pysl_dev_check(int device)
{
    return sl_fail(SL_ENOTSUP, "sluice.Pipeline: device='cuda:%d': this build of sluice has no "
                   "CUDA (no GPU support; device=None gives host batches)", device);
}

static int no_cuda(void)
{
    return sl_fail(SL_ENOTSUP, "sluice: this build has no CUDA");
}

int pysl_dev_stream_wait(int device, uintptr_t stream, void *event)
{
    (void)device, (void)stream, (void)event;
    return no_cuda();
}

int pysl_dev_streams_sync(int device, const uintptr_t *streams, int n)
{
    (void)device, (void)streams, (void)n;
    return no_cuda();
}

int pysl_dev_alloc(int device, size_t n, void **out)
{
    (void)device, (void)n;
    *out = NULL;
    return no_cuda();
}

void pysl_dev_free(int device, void *p)
{
    (void)device, (void)p;
}

int pysl_dev_copy(int device, void *dst, const void *src, size_t n, void *event)
{
    (void)device, (void)dst, (void)src, (void)n, (void)event;
    return no_cuda();
}
#endif

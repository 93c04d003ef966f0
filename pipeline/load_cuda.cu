// pipeline/load_cuda.cu - the load stage with CUDA (pipeline_int.h's
// sl_loader_*) and the GPU normalize/convert of u8 batches (pipeline.h's
// sl_cuda_normalize). Built only when CUDA is found; load_nocuda.c is the
// build without it.
//
// DESIGN
//   Memory: nslots host batches and, with a device, nslots device batches of
//   slot_bytes each, allocated once at create (nothing per batch).
//   - device >= 0: host slots are pinned (cudaHostAlloc), so cudaMemcpyAsync
//     is a real DMA that overlaps compute; one non-blocking copy stream
//     (it never serializes with the legacy default stream the consumer may
//     use) and one event per slot (timing disabled: cheaper record/wait).
//   - device < 0: host slots from posix_memalign(64); submit and reuse are
//     no-ops, device and event are NULL - the same contract as load_nocuda.c.
//   Threads: submit (and reuse) are called by the one pipeline thread that
//     completes batches in order; the consumer reads sl_loader_device/event.
//     Slot k's host memory is not rewritten until sl_loader_reuse(k) has seen
//     its previous copy finish. The device buffer is rewritten by the copy
//     of the slot's next batch, which is ordered after nothing on the
//     consumer's stream: as pipeline.h says, a batch (d_data included) is
//     valid until release, so the consumer's GPU work that reads d_data must
//     have completed before sl_pipeline_release (e.g. release batch b after
//     the step that used it was synchronized; up to prefetch - 1 batches may
//     be held meanwhile).
//   Ordering: copies run in submit order on the single copy stream; the
//     consumer orders its kernels after a batch's copy with
//     cudaStreamWaitEvent(its stream, ready_event) - no host sync.
//   Current device: the CUDA runtime's current device is per host thread, so
//     every entry point that enqueues work calls cudaSetDevice(l->device)
//     first (cheap when it is already current).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "pipeline/pipeline_int.h"
}
#include "common/cuda_check.h"

struct sl_loader {
    int device;            // < 0: host slots only
    size_t slot_bytes;
    unsigned nslots;
    void **host;           // nslots host batches (pinned when device >= 0)
    void **dev;            // nslots device batches, or NULL
    cudaEvent_t *events;   // nslots "copy of this slot done" events, or NULL
    cudaStream_t stream;   // the copy stream, or NULL
};

// ------------------------------------------------------------------ loader
extern "C" void sl_loader_destroy(sl_loader *l)
{
    if (!l)
        return;
    if (l->device >= 0) {
        // Return codes are dropped on purpose: destroy cannot report them,
        // one failure must not stop the remaining frees, and sl_errmsg must
        // keep the message of the create failure that may have led here.
        (void)cudaSetDevice(l->device);
        if (l->stream)
            (void)cudaStreamSynchronize(l->stream); // no copy may outlive its buffers
        for (unsigned i = 0; i < l->nslots; i++) {
            if (l->events && l->events[i])
                (void)cudaEventDestroy(l->events[i]);
            if (l->dev && l->dev[i])
                (void)cudaFree(l->dev[i]);
            if (l->host && l->host[i])
                (void)cudaFreeHost(l->host[i]);
        }
        if (l->stream)
            (void)cudaStreamDestroy(l->stream);
        (void)cudaGetLastError();
    } else if (l->host) {
        for (unsigned i = 0; i < l->nslots; i++)
            free(l->host[i]);
    }
    free(l->host);
    free(l->dev);
    free(l->events);
    free(l);
}

// Pinned host batch, device batch and event of slot i. A failed call
// leaves its handle NULL so that destroy frees only what exists.
static int slot_alloc(sl_loader *l, unsigned i)
{
    int rc;
    if ((rc = SL_CUDA(cudaHostAlloc(&l->host[i], l->slot_bytes, cudaHostAllocDefault)))) {
        l->host[i] = NULL;
        return rc;
    }
    if ((rc = SL_CUDA(cudaMalloc(&l->dev[i], l->slot_bytes)))) {
        l->dev[i] = NULL;
        return rc;
    }
    if ((rc = SL_CUDA(cudaEventCreateWithFlags(&l->events[i], cudaEventDisableTiming)))) {
        l->events[i] = NULL;
        return rc;
    }
    return SL_OK;
}

extern "C" int sl_loader_create(int device, size_t slot_bytes, unsigned nslots, sl_loader **out)
{
    *out = NULL;
    if (slot_bytes == 0 || nslots == 0)
        return sl_fail(SL_EINVAL, "sl_loader_create: %u slots of %zu bytes: need at least one "
                                  "slot of at least one byte", nslots, slot_bytes);
    sl_loader *l = (sl_loader *)calloc(1, sizeof *l);
    if (!l)
        return sl_fail(SL_ENOMEM, "sl_loader_create: out of memory");
    l->device = device < 0 ? -1 : device;
    l->slot_bytes = slot_bytes;
    l->nslots = nslots;
    l->host = (void **)calloc(nslots, sizeof *l->host);
    int rc = SL_OK;
    if (!l->host) {
        rc = sl_fail(SL_ENOMEM, "sl_loader_create: %u slots: out of memory", nslots);
        goto destroy;
    }
    if (l->device >= 0) {
        if ((rc = SL_CUDA(cudaSetDevice(device)))) {
            rc = sl_fail(rc, "%s (device %d)", sl_errmsg(), device);
            goto destroy;
        }
        l->dev = (void **)calloc(nslots, sizeof *l->dev);
        l->events = (cudaEvent_t *)calloc(nslots, sizeof *l->events);
        if (!l->dev || !l->events) {
            rc = sl_fail(SL_ENOMEM, "sl_loader_create: %u slots: out of memory", nslots);
            goto destroy;
        }
        if ((rc = SL_CUDA(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking)))) {
            l->stream = NULL;
            goto destroy;
        }
        for (unsigned i = 0; i < nslots; i++)
            if ((rc = slot_alloc(l, i))) {
                rc = sl_fail(rc, "sl_loader_create: %s (device %d, slot %u of %u, %zu bytes)",
                             sl_errmsg(), device, i, nslots, slot_bytes);
                goto destroy;
            }
    } else {
        for (unsigned i = 0; i < nslots; i++) {
            int e = posix_memalign(&l->host[i], 64, slot_bytes);
            if (e) {
                l->host[i] = NULL;
                rc = sl_fail(SL_ENOMEM, "sl_loader_create: slot %u of %u (%zu bytes): %s", i,
                             nslots, slot_bytes, strerror(e));
                goto destroy;
            }
        }
    }
    *out = l;
    return SL_OK;
destroy:
    sl_loader_destroy(l);
    return rc;
}

extern "C" void *sl_loader_host(sl_loader *l, unsigned slot)
{
    return slot < l->nslots ? l->host[slot] : NULL;
}

extern "C" void *sl_loader_device(sl_loader *l, unsigned slot)
{
    return l->dev && slot < l->nslots ? l->dev[slot] : NULL;
}

extern "C" void *sl_loader_event(sl_loader *l, unsigned slot)
{
    return l->events && slot < l->nslots ? (void *)l->events[slot] : NULL;
}

extern "C" int sl_loader_submit(sl_loader *l, unsigned slot, size_t bytes)
{
    if (slot >= l->nslots || bytes > l->slot_bytes)
        return sl_fail(SL_EINVAL, "sl_loader_submit: slot %u of %u, %zu bytes of %zu: out of range",
                       slot, l->nslots, bytes, l->slot_bytes);
    if (l->device < 0)
        return SL_OK;
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(l->device))) ||
        (rc = SL_CUDA(cudaMemcpyAsync(l->dev[slot], l->host[slot], bytes, cudaMemcpyHostToDevice,
                                      l->stream))) ||
        (rc = SL_CUDA(cudaEventRecord(l->events[slot], l->stream))))
        return sl_fail(rc, "%s (slot %u, %zu bytes)", sl_errmsg(), slot, bytes);
    return SL_OK;
}

extern "C" int sl_loader_reuse(sl_loader *l, unsigned slot)
{
    if (slot >= l->nslots)
        return sl_fail(SL_EINVAL, "sl_loader_reuse: slot %u of %u: out of range", slot, l->nslots);
    if (l->device < 0)
        return SL_OK;
    // An event never recorded counts as complete, so the first use of a
    // slot does not wait.
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(l->device))) ||
        (rc = SL_CUDA(cudaEventSynchronize(l->events[slot]))))
        return sl_fail(rc, "%s (slot %u)", sl_errmsg(), slot);
    return SL_OK;
}

// --------------------------------------------------------------- normalize
// y = (x - mean[c]) * inv_std[c]; 1/std is computed once on the host, so the
// kernel multiplies (the CPU reference in tests/pipeline/test_load.c
// divides; they agree to a few ulp of f32).
struct sl_norm_params {
    float mean[3];
    float inv_std[3];
};

template <typename T> __device__ __forceinline__ T sl_from_float(float v);
template <> __device__ __forceinline__ float sl_from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 sl_from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half sl_from_float<__half>(float v)
{
    return __float2half_rn(v);
}

// d_in: (n, h, w, 3) u8. One thread per OUTPUT element i (grid-stride
// loop), so consecutive threads write consecutive addresses in either
// layout (coalesced stores; the output is the larger side: 2-4 bytes per
// element against 1).
//   NHWC: out (n, h, w, 3), element i reads in[i], channel c = i % 3.
//   NCHW: out (n, 3, h, w), i = (img * 3 + c) * hw + p reads
//         in[(img * hw + p) * 3 + c]; a warp's loads span 3 x 32 bytes of
//         the same cache lines, which the three channel planes share.
//   I: the index type - 32-bit when the batch has fewer than 2^32 elements
//   (the divisions by hw and 3 are then a few instructions, not a 64-bit
//   division routine), 64-bit otherwise.
template <typename T, bool NCHW, typename I>
__global__ void sl_normalize_kernel(const uint8_t *__restrict__ in, T *__restrict__ out, I total,
                                    I hw, sl_norm_params p)
{
    I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        I src;
        int c;
        if (NCHW) {
            I plane = i / hw, px = i - plane * hw; // plane = img * 3 + c
            I img = plane / 3;
            c = (int)(plane - img * 3);
            src = (img * hw + px) * 3 + (I)c;
        } else {
            src = i;
            c = (int)(i % 3);
        }
        out[i] = sl_from_float<T>(((float)in[src] - p.mean[c]) * p.inv_std[c]);
    }
}

template <typename T, bool NCHW>
static void sl_normalize_launch2(const uint8_t *in, T *out, size_t total, size_t hw,
                                 const sl_norm_params &p, cudaStream_t s)
{
    const unsigned threads = 256;
    // Enough blocks to fill any current GPU several times over; the
    // grid-stride loop covers the rest of a large batch.
    size_t want = (total + threads - 1) / threads;
    unsigned blocks = (unsigned)(want < 8192 ? want : 8192);
    // The loop's i + stride must not wrap either: keep 2^32 - total > stride.
    if (total <= 0xffffffffull - (size_t)blocks * threads)
        sl_normalize_kernel<T, NCHW, uint32_t>
            <<<blocks, threads, 0, s>>>(in, out, (uint32_t)total, (uint32_t)hw, p);
    else
        sl_normalize_kernel<T, NCHW, uint64_t>
            <<<blocks, threads, 0, s>>>(in, out, (uint64_t)total, (uint64_t)hw, p);
}

template <typename T>
static void sl_normalize_launch(const uint8_t *in, void *out, size_t total, size_t hw, bool nchw,
                                const sl_norm_params &p, cudaStream_t s)
{
    if (nchw)
        sl_normalize_launch2<T, true>(in, (T *)out, total, hw, p, s);
    else
        sl_normalize_launch2<T, false>(in, (T *)out, total, hw, p, s);
}

extern "C" int sl_cuda_normalize(const void *d_in, unsigned n, int h, int w, const float mean[3],
                                 const float std[3], sl_layout out_layout, sl_dtype dtype,
                                 void *d_out, void *stream)
{
    if (!d_in || !d_out || !mean || !std || n == 0 || h <= 0 || w <= 0)
        return sl_fail(SL_EINVAL, "sl_cuda_normalize: n=%u h=%d w=%d: empty batch or NULL buffer",
                       n, h, w);
    if (out_layout != SL_LAYOUT_NHWC_F32 && out_layout != SL_LAYOUT_NCHW_F32)
        return sl_fail(SL_EINVAL, "sl_cuda_normalize: out_layout %d: want SL_LAYOUT_NHWC_F32 or "
                                  "SL_LAYOUT_NCHW_F32", (int)out_layout);
    if (dtype != SL_DTYPE_F32 && dtype != SL_DTYPE_BF16 && dtype != SL_DTYPE_F16)
        return sl_fail(SL_EINVAL, "sl_cuda_normalize: dtype %d: unknown", (int)dtype);
    sl_norm_params p;
    for (int c = 0; c < 3; c++) {
        if (!(std[c] != 0.0f))
            return sl_fail(SL_EINVAL, "sl_cuda_normalize: std[%d] = %g: must be nonzero", c,
                           (double)std[c]);
        p.mean[c] = mean[c];
        p.inv_std[c] = 1.0f / std[c];
    }
    size_t hw = (size_t)h * (size_t)w, total = (size_t)n * hw * 3;
    bool nchw = out_layout == SL_LAYOUT_NCHW_F32;
    const uint8_t *in = (const uint8_t *)d_in;
    cudaStream_t s = (cudaStream_t)stream;
    switch (dtype) {
    case SL_DTYPE_F32: sl_normalize_launch<float>(in, d_out, total, hw, nchw, p, s); break;
    case SL_DTYPE_BF16: sl_normalize_launch<__nv_bfloat16>(in, d_out, total, hw, nchw, p, s); break;
    case SL_DTYPE_F16: sl_normalize_launch<__half>(in, d_out, total, hw, nchw, p, s); break;
    }
    int rc = SL_CUDA(cudaGetLastError()); // launch errors; faults surface on the stream later
    if (rc)
        return sl_fail(rc, "%s (n=%u h=%d w=%d)", sl_errmsg(), n, h, w);
    return SL_OK;
}

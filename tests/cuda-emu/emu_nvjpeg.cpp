// tests/cuda-emu/emu_nvjpeg.cpp - a fake libnvjpeg for the emulator: the
// subset of nvJPEG's C API that pipeline/image/gdec_cuda.cu calls
// (pipeline/image/nvjpeg_api.h), decoding with libjpeg-turbo on the host into
// emulated device memory. Built by run.sh as $OUT/libnvjpeg_emu.so and
// loaded by the pipeline through SLUICE_NVJPEG (it resolves
// cudaMemcpyAsync from the emulated program, linked -rdynamic), so the
// pipeline's --decode gpu path runs end to end without a GPU.
//
// What it models of the real library:
//   - NVJPEG_BACKEND_HARDWARE is accepted (an A100/H100-like GPU) unless
//     EMU_NVJPEG_HW=0 (a GPU without the JPEG engine: NVJPEG_STATUS_ARCH_MISMATCH),
//     then the caller must take NVJPEG_BACKEND_GPU_HYBRID;
//   - nvjpegDecodeBatchedSupported says "not supported" (nonzero) for what
//     the hardware decoder rejects: progressive and arithmetic-coded
//     JPEGs, 4:1:1 / 4:1:0, anything but 1 or 3 components; and
//     nvjpegDecodeBatched on a hardware handle given such an image is a
//     misuse report ("EMU: error", which fails run.sh's lanes) plus
//     NVJPEG_STATUS_JPEG_NOT_SUPPORTED, as the caller should have routed it
//     to the CPU;
//   - the batched API's protocol: nvjpegDecodeBatched without a matching
//     nvjpegDecodeBatchedInitialize is NVJPEG_STATUS_INVALID_PARAMETER
//     (and a report); only NVJPEG_OUTPUT_RGBI is implemented;
//   - output: full-size interleaved RGB (gray replicated), written with
//     cudaMemcpyAsync on the given stream, so the emulator checks that
//     each destination is device memory with room for pitch x height;
//   - a JPEG libjpeg-turbo warns about (truncated, corrupt entropy data) is
//     NVJPEG_STATUS_BAD_JPEG for the whole batch (nvJPEG's hardware decoder
//     may instead decode garbage: the real library is not that strict);
//   - EMU_NVJPEG_FAIL=1: every nvjpegDecodeBatched fails with
//     NVJPEG_STATUS_EXECUTION_FAILED (the caller's CPU fallback for a
//     failed batch).
// Not modelled: nvJPEG's own colour conversion and upsampling (libjpeg-turbo's
// are used), asynchrony of the decode itself, allocators, the other APIs.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "pipeline/image/nvjpeg_api.h"

struct nvjpegHandle {
    nvjpegBackend_t backend;
    int hw;
};
struct nvjpegJpegState {
    int n; // batch size from DecodeBatchedInitialize; 0 = none
};
struct nvjpegJpegStream {
    int ok, w, h, ncomp, sof, subsamp;
};

static int env_is(const char *name, const char *v)
{
    const char *e = getenv(name);
    return e && !strcmp(e, v);
}

static void report(const char *fmt, const char *a, int i)
{
    fprintf(stderr, "EMU: error: ");
    fprintf(stderr, fmt, a, i);
    fprintf(stderr, "\n");
}

// The frame marker (0xC0..0xCF but C4 / C8 / CC) of a JPEG; -1 if none.
static int sof_marker(const unsigned char *p, size_t n)
{
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return -1;
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF)
            return -1;
        int m = p[i + 1];
        if (m == 0xFF) {
            i++;
            continue;
        }
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC)
            return m;
        if (m == 0xD9 || m == 0xDA)
            return -1;
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        i += 2 + len;
    }
    return -1;
}

// Header through TurboJPEG: size, subsampling, components.
static int header(const unsigned char *data, size_t len, int *w, int *h, int *ss, int *nc)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return -1;
    int cs = 0;
    int r = tjDecompressHeader3(tj, data, (unsigned long)len, w, h, ss, &cs);
    tjDestroy(tj);
    if (r)
        return -1;
    *nc = cs == TJCS_GRAY ? 1 : (cs == TJCS_CMYK || cs == TJCS_YCCK) ? 4 : 3;
    return 0;
}

static int hw_rejects(int sof, int ss, int nc)
{
    // baseline (C0) and extended Huffman (C1) only; no 4:1:1 / 4:1:0
    return !(sof == 0xC0 || sof == 0xC1) || ss == TJSAMP_411 || (nc != 1 && nc != 3)
#ifdef TJSAMP_441
           || ss == TJSAMP_441
#endif
        ;
}

extern "C" {

nvjpegStatus_t nvjpegGetProperty(int type, int *value)
{
    if (!value)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    *value = type == SL_NVJPEG_PROP_MAJOR ? 13 : 0;
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegCreateEx(nvjpegBackend_t backend, nvjpegDevAllocator_t *dev,
                              nvjpegPinnedAllocator_t *pinned, unsigned flags, nvjpegHandle_t *h)
{
    (void)flags;
    if (!h || dev || pinned)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    if (backend == NVJPEG_BACKEND_HARDWARE && env_is("EMU_NVJPEG_HW", "0"))
        return NVJPEG_STATUS_ARCH_MISMATCH;
    if ((int)backend < 0 || (int)backend > NVJPEG_BACKEND_HARDWARE)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    *h = (nvjpegHandle_t)calloc(1, sizeof **h);
    if (!*h)
        return NVJPEG_STATUS_ALLOCATOR_FAILURE;
    (*h)->backend = backend;
    (*h)->hw = backend == NVJPEG_BACKEND_HARDWARE;
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegDestroy(nvjpegHandle_t h)
{
    free(h);
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegJpegStateCreate(nvjpegHandle_t h, nvjpegJpegState_t *st)
{
    if (!h || !st)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    *st = (nvjpegJpegState_t)calloc(1, sizeof **st);
    return *st ? NVJPEG_STATUS_SUCCESS : NVJPEG_STATUS_ALLOCATOR_FAILURE;
}

nvjpegStatus_t nvjpegJpegStateDestroy(nvjpegJpegState_t st)
{
    free(st);
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegGetImageInfo(nvjpegHandle_t h, const unsigned char *data, size_t len,
                                  int *nc, nvjpegChromaSubsampling_t *css, int *ws, int *hs)
{
    if (!h || !data || !nc || !css || !ws || !hs)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    int w, hh, ss, n;
    if (header(data, len, &w, &hh, &ss, &n))
        return NVJPEG_STATUS_BAD_JPEG;
    *nc = n;
    switch (ss) {
    case TJSAMP_444: *css = NVJPEG_CSS_444; break;
    case TJSAMP_422: *css = NVJPEG_CSS_422; break;
    case TJSAMP_420: *css = NVJPEG_CSS_420; break;
    case TJSAMP_GRAY: *css = NVJPEG_CSS_GRAY; break;
    case TJSAMP_440: *css = NVJPEG_CSS_440; break;
    case TJSAMP_411: *css = NVJPEG_CSS_411; break;
    default: *css = NVJPEG_CSS_UNKNOWN; break;
    }
    for (int i = 0; i < NVJPEG_MAX_COMPONENT; i++)
        ws[i] = hs[i] = 0;
    for (int i = 0; i < n && i < NVJPEG_MAX_COMPONENT; i++) {
        ws[i] = w; // chroma sizes are not used by the caller
        hs[i] = hh;
    }
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegJpegStreamCreate(nvjpegHandle_t h, nvjpegJpegStream_t *js)
{
    if (!h || !js)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    *js = (nvjpegJpegStream_t)calloc(1, sizeof **js);
    return *js ? NVJPEG_STATUS_SUCCESS : NVJPEG_STATUS_ALLOCATOR_FAILURE;
}

nvjpegStatus_t nvjpegJpegStreamDestroy(nvjpegJpegStream_t js)
{
    free(js);
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegJpegStreamParse(nvjpegHandle_t h, const unsigned char *data, size_t len,
                                     int save_metadata, int save_stream, nvjpegJpegStream_t js)
{
    (void)save_metadata, (void)save_stream;
    if (!h || !data || !js)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    js->ok = 0;
    js->sof = sof_marker(data, len);
    if (js->sof < 0 || header(data, len, &js->w, &js->h, &js->subsamp, &js->ncomp))
        return NVJPEG_STATUS_BAD_JPEG;
    js->ok = 1;
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegDecodeBatchedSupported(nvjpegHandle_t h, nvjpegJpegStream_t js, int *unsup)
{
    if (!h || !js || !unsup || !js->ok)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    *unsup = hw_rejects(js->sof, js->subsamp, js->ncomp);
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegDecodeBatchedInitialize(nvjpegHandle_t h, nvjpegJpegState_t st, int n,
                                             int threads, nvjpegOutputFormat_t fmt)
{
    if (!h || !st || n < 1 || threads < 1 || fmt != NVJPEG_OUTPUT_RGBI)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    st->n = n;
    return NVJPEG_STATUS_SUCCESS;
}

nvjpegStatus_t nvjpegDecodeBatched(nvjpegHandle_t h, nvjpegJpegState_t st,
                                   const unsigned char *const *data, const size_t *lens,
                                   nvjpegImage_t *dst, void *stream)
{
    if (!h || !st || !data || !lens || !dst)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    if (st->n < 1) {
        report("nvjpegDecodeBatched: %s (state %d)", "no nvjpegDecodeBatchedInitialize before it",
               0);
        return NVJPEG_STATUS_INVALID_PARAMETER;
    }
    if (env_is("EMU_NVJPEG_FAIL", "1"))
        return NVJPEG_STATUS_EXECUTION_FAILED;
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return NVJPEG_STATUS_ALLOCATOR_FAILURE;
    nvjpegStatus_t rc = NVJPEG_STATUS_SUCCESS;
    for (int i = 0; i < st->n && rc == NVJPEG_STATUS_SUCCESS; i++) {
        int w, hh, ss, nc;
        if (header(data[i], lens[i], &w, &hh, &ss, &nc)) {
            rc = NVJPEG_STATUS_BAD_JPEG;
            break;
        }
        if (h->hw && hw_rejects(sof_marker(data[i], lens[i]), ss, nc)) {
            report("nvjpegDecodeBatched: %s: image %d of the batch is one the hardware decoder "
                   "rejects (route it with nvjpegDecodeBatchedSupported)", "hardware backend", i);
            rc = NVJPEG_STATUS_JPEG_NOT_SUPPORTED;
            break;
        }
        size_t pitch = dst[i].pitch[0];
        if (!dst[i].channel[0] || pitch < (size_t)w * 3) {
            rc = NVJPEG_STATUS_INVALID_PARAMETER;
            break;
        }
        unsigned char *rgb = (unsigned char *)malloc((size_t)w * hh * 3);
        if (!rgb) {
            rc = NVJPEG_STATUS_ALLOCATOR_FAILURE;
            break;
        }
        // strict, as the pipeline's CPU path: a truncated or corrupt entropy segment fails
        if (tjDecompress2(tj, data[i], (unsigned long)lens[i], rgb, w, w * 3, hh, TJPF_RGB,
                          TJFLAG_STOPONWARNING)) {
            rc = NVJPEG_STATUS_BAD_JPEG;
        } else if (pitch == (size_t)w * 3) {
            if (cudaMemcpyAsync(dst[i].channel[0], rgb, (size_t)w * hh * 3,
                                cudaMemcpyHostToDevice, (cudaStream_t)stream) != cudaSuccess)
                rc = NVJPEG_STATUS_EXECUTION_FAILED;
        } else {
            for (int y = 0; y < hh && rc == NVJPEG_STATUS_SUCCESS; y++)
                if (cudaMemcpyAsync(dst[i].channel[0] + (size_t)y * pitch, rgb + (size_t)y * w * 3,
                                    (size_t)w * 3, cudaMemcpyHostToDevice,
                                    (cudaStream_t)stream) != cudaSuccess)
                    rc = NVJPEG_STATUS_EXECUTION_FAILED;
        }
        free(rgb); // pageable: the copy was staged at the call
    }
    tjDestroy(tj);
    return rc;
}

} // extern "C"

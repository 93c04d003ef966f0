/*
 * pipeline/image/nvjpeg_api.h - the part of nvJPEG's C API that the GPU decode
 * stage (pipeline/image/gdec_cuda.cu) uses, and its run-time loader
 * (pipeline/image/nvjpeg_load.c).
 *
 * Why declared here and not #include <nvjpeg.h>: the CUDA toolkit on the
 * build machines (/usr/local/cuda 13 here and in CI) ships without nvJPEG's
 * header and library, and the GPU machines have libnvjpeg only as a shared
 * library. So the build must not need the header, and the binary must not
 * need the library: it is dlopen'ed at run time (libnvjpeg.so.13, .so.12,
 * libnvjpeg.so) and `--decode auto` falls back to the CPU when it is absent.
 *
 * The declarations below are copied from NVIDIA's nvjpeg.h (nvJPEG 12.4.0.76,
 * CUDA 12.x, PyPI nvidia-nvjpeg-cu12; the same C API in CUDA 13's nvJPEG
 * 13.x): names, enum values and argument order are NVIDIA's documented,
 * stable C ABI (docs.nvidia.com/cuda/nvjpeg). cudaStream_t is a pointer to
 * an opaque struct in cuda_runtime_api.h; it is passed here as void *,
 * which has the same ABI. Only what sluice calls is declared; the values of
 * the enums used must never be renumbered (they are NVIDIA's).
 *
 * Threading: the loader is called once per pipeline create; the table is
 * read-only afterwards. nvJPEG's own rules: a handle may be shared by
 * threads for nvjpegGetImageInfo / nvjpegJpegStreamParse (one
 * nvjpegJpegStream_t per thread); a nvjpegJpegState_t is used by one
 * thread at a time.
 */
#ifndef SL_NVJPEG_API_H
#define SL_NVJPEG_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* nvjpegStatus_t (nvjpeg.h) */
typedef enum {
    NVJPEG_STATUS_SUCCESS = 0,
    NVJPEG_STATUS_NOT_INITIALIZED = 1,
    NVJPEG_STATUS_INVALID_PARAMETER = 2,
    NVJPEG_STATUS_BAD_JPEG = 3,
    NVJPEG_STATUS_JPEG_NOT_SUPPORTED = 4,
    NVJPEG_STATUS_ALLOCATOR_FAILURE = 5,
    NVJPEG_STATUS_EXECUTION_FAILED = 6,
    NVJPEG_STATUS_ARCH_MISMATCH = 7,
    NVJPEG_STATUS_INTERNAL_ERROR = 8,
    NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
    NVJPEG_STATUS_INCOMPLETE_BITSTREAM = 10,
} nvjpegStatus_t;

/* nvjpegChromaSubsampling_t */
typedef enum {
    NVJPEG_CSS_444 = 0,
    NVJPEG_CSS_422 = 1,
    NVJPEG_CSS_420 = 2,
    NVJPEG_CSS_440 = 3,
    NVJPEG_CSS_411 = 4,
    NVJPEG_CSS_410 = 5,
    NVJPEG_CSS_GRAY = 6,
    NVJPEG_CSS_410V = 7,
    NVJPEG_CSS_UNKNOWN = -1,
} nvjpegChromaSubsampling_t;

/* nvjpegOutputFormat_t (only the interleaved RGB output is used) */
typedef enum {
    NVJPEG_OUTPUT_RGBI = 5,
} nvjpegOutputFormat_t;

/* nvjpegBackend_t */
typedef enum {
    NVJPEG_BACKEND_DEFAULT = 0,
    NVJPEG_BACKEND_HYBRID = 1,
    NVJPEG_BACKEND_GPU_HYBRID = 2,
    NVJPEG_BACKEND_HARDWARE = 3,
} nvjpegBackend_t;

#define NVJPEG_MAX_COMPONENT 4

typedef struct {
    unsigned char *channel[NVJPEG_MAX_COMPONENT];
    size_t pitch[NVJPEG_MAX_COMPONENT];
} nvjpegImage_t;

typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
/* nvjpegDevAllocator_t / nvjpegPinnedAllocator_t: only NULL (the defaults)
 * is passed, so they stay opaque here. */
typedef struct nvjpegDevAllocator nvjpegDevAllocator_t;
typedef struct nvjpegPinnedAllocator nvjpegPinnedAllocator_t;

/* libraryPropertyType (library_types.h): MAJOR_VERSION 0, MINOR 1, PATCH 2 */
#define SL_NVJPEG_PROP_MAJOR 0
#define SL_NVJPEG_PROP_MINOR 1

/* The functions, as pointers filled by sl_nvjpeg_load. */
typedef struct sl_nvjpeg_lib {
    void *dl;            /* dlopen handle */
    char path[64];       /* the name that loaded */
    nvjpegStatus_t (*GetProperty)(int type, int *value);
    nvjpegStatus_t (*CreateEx)(nvjpegBackend_t backend, nvjpegDevAllocator_t *dev_allocator,
                               nvjpegPinnedAllocator_t *pinned_allocator, unsigned flags,
                               nvjpegHandle_t *handle);
    nvjpegStatus_t (*Destroy)(nvjpegHandle_t handle);
    nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t handle, nvjpegJpegState_t *state);
    nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t state);
    nvjpegStatus_t (*GetImageInfo)(nvjpegHandle_t handle, const unsigned char *data,
                                   size_t length, int *nComponents,
                                   nvjpegChromaSubsampling_t *subsampling, int *widths,
                                   int *heights);
    nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                              int batch_size, int max_cpu_threads,
                                              nvjpegOutputFormat_t output_format);
    nvjpegStatus_t (*DecodeBatched)(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                    const unsigned char *const *data, const size_t *lengths,
                                    nvjpegImage_t *destinations, void *stream);
    nvjpegStatus_t (*JpegStreamCreate)(nvjpegHandle_t handle, nvjpegJpegStream_t *jpeg_stream);
    nvjpegStatus_t (*JpegStreamDestroy)(nvjpegJpegStream_t jpeg_stream);
    nvjpegStatus_t (*JpegStreamParse)(nvjpegHandle_t handle, const unsigned char *data,
                                      size_t length, int save_metadata, int save_stream,
                                      nvjpegJpegStream_t jpeg_stream);
    /* *is_supported is set to 0 when the hardware batched decoder CAN
     * decode the parsed stream (nvjpeg.h's wording: "0 if decoder is
     * capable"), nonzero when it cannot. */
    nvjpegStatus_t (*DecodeBatchedSupported)(nvjpegHandle_t handle,
                                             nvjpegJpegStream_t jpeg_stream, int *is_supported);
} sl_nvjpeg_lib;

/* dlopen libnvjpeg and resolve every function above. Environment
 * SLUICE_NVJPEG=PATH loads exactly that file (the CUDA emulator's fake,
 * tests/cuda-emu/emu_nvjpeg.cpp); otherwise libnvjpeg.so.13, libnvjpeg.so.12,
 * libnvjpeg.so in the loader's search path, then in /usr/local/cuda/lib64. SL_ENOTSUP with
 * "libnvjpeg not found: <each name: dlerror>" or "<path>: no symbol X". */
int sl_nvjpeg_load(sl_nvjpeg_lib *lib);
void sl_nvjpeg_unload(sl_nvjpeg_lib *lib);
/* "NVJPEG_STATUS_BAD_JPEG" etc. (nvJPEG has no error-string function). */
const char *sl_nvjpeg_status_name(nvjpegStatus_t s);

#ifdef __cplusplus
}
#endif
#endif /* SL_NVJPEG_API_H */

// pipeline/image/gdec_cuda.cu - the GPU decode stage with nvJPEG (gdec_int.h has
// the design; nvjpeg_api.h why nvJPEG is loaded at run time).
//
// Backends: NVJPEG_BACKEND_HARDWARE (the A100 / H100 / H200 JPEG engines,
// batched) when nvjpegCreateEx accepts it, else NVJPEG_BACKEND_GPU_HYBRID
// (Huffman decode on the GPU for large batches). Both are driven through
// the batched API (nvjpegDecodeBatchedInitialize / nvjpegDecodeBatched) to
// interleaved RGB at full size, one device buffer for the batch's images.
// With the hybrid backend, nvjpegDecodeBatched runs part of the work on
// the calling thread (max_cpu_threads 1): it is the fallback for GPUs
// without the engine, not the fast path.
//
// The crop-resize kernel: one thread per output pixel of the batch
// (grid-stride), reading the decoded image through the same separable taps
// as records/resize.c's sl_resize_taps (area averaging when the crop
// shrinks by 2 or more in a direction, else bilinear with half-pixel
// centres), computed per output coordinate in the kernel by the same code
// (sl_resize_tap_at, records/resize_tap.h, __host__ __device__; its
// bilinear centre is kept unfused, so the taps are the CPU's bits;
// tests/records/test_resize_tap.c pins them). Not bit-equal
// to the CPU path: that one decodes at a DCT scale and resizes the Y/Cb/Cr
// planes before colour conversion (decode_yuv.c), this one resizes the RGB
// that nvJPEG made at full size; tests/pipeline/test_gdec.c bounds the
// difference.
//
// Streams: one stream of the stage; per batch, in order: the host-decoded
// samples' copies, nvjpegDecodeBatched's work, the kernel, the slot's
// event. The staging entries, the pinned kernel parameters of a slot and
// its host batch are rewritten only after sl_loader_reuse waited for that
// event, so nothing the stream reads changes under it. The decoded-image
// buffer is shared by all batches (stream order); growing it syncs the
// stream first.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "pipeline/image/gdec_int.h"
}
#include "common/cuda_check.h"
#include "pipeline/image/nvjpeg_api.h"
#include "records/resize_tap.h" // sl_resize_tap_at (also through gdec_int.h's records.h)

enum { GD_HOST = 0, GD_GPU = 1 };

// One batch position of one ring slot.
struct gd_entry {
    int kind;              // GD_HOST: decoded on the CPU into the host slot
    uint8_t *jpeg;         // GD_GPU: the JPEG's bytes (own copy)
    size_t len, cap;
    int W, H, flip;
    sl_crop crop;
    uint64_t id;           // record id (messages)
};

// The kernel's view of one staged image.
struct gd_param {
    unsigned long long src; // byte offset of its decoded RGB in the image buffer
    int W, H;               // decoded size (pitch W * 3)
    int cx, cy, cw, ch;     // crop
    int flip;
    unsigned k;             // position in the batch
};

struct gd_norm {
    float mean[3], inv_std[3];
};

struct sl_gdec {
    sl_nvjpeg_lib lib;
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    int hw;                        // hardware backend
    int inited_n;                  // batch size given to DecodeBatchedInitialize (0: none)
    int ver_major, ver_minor;
    unsigned workers;
    nvjpegJpegStream_t *wstream;   // (workers) parse objects, hardware backend only
    unsigned nslots, batch;
    gd_entry *e;                   // (nslots * batch)
    gd_param *h_par;               // (nslots * batch) pinned
    gd_param *d_par;               // (batch) device
    int oh, ow;
    sl_layout layout;
    float mean[3], std[3];
    gd_norm norm;
    size_t sample_bytes;
    int device;
    cudaStream_t stream;
    uint8_t *d_img;                // decoded images of one batch
    size_t img_cap;
    const unsigned char **data;    // (batch) nvjpegDecodeBatched's arguments
    size_t *lens;
    nvjpegImage_t *imgs;
    unsigned *gk;                  // (batch) positions of the staged images
    sl_decoder *dec;               // CPU decode when nvJPEG fails a batch
    const sl_source_set *src;      // the records' files (messages)
    unsigned long long n_gpu, n_cpu, n_batch_fallback; // atomics
};

// ------------------------------------------------------------------ kernel

__device__ __forceinline__ float gd_w(int j, int n, float w0, float wmid, float wn)
{
    return j == 0 ? w0 : j == n - 1 ? wn : wmid;
}

// L: 0 NHWC u8, 1 NHWC f32, 2 NCHW f32 (sl_layout's order).
template <int L>
__global__ void gd_resize_kernel(const uint8_t *__restrict__ img,
                                 const gd_param *__restrict__ par, unsigned long long total,
                                 int oh, int ow, gd_norm nm, uint8_t *__restrict__ out,
                                 unsigned long long sample_bytes)
{
    unsigned long long hw = (unsigned long long)oh * ow;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < total; i += stride) {
        unsigned long long j = i / hw, px = i - j * hw;
        int oy = (int)(px / ow), ox = (int)(px - (unsigned long long)oy * ow);
        gd_param P = par[j];
        int sx = P.flip ? ow - 1 - ox : ox;
        // the taps sl_resize_taps stores at tx[sx], ty[oy] (resize_tap.h)
        sl_resize_tap tx = sl_resize_tap_at(P.cw, ow, sx), ty = sl_resize_tap_at(P.ch, oh, oy);
        float acc[3] = {0, 0, 0};
        for (int a = 0; a < ty.n; a++) {
            float wy = gd_w(a, ty.n, ty.w0, ty.wmid, ty.wn);
            const uint8_t *row =
                img + P.src + ((size_t)(P.cy + ty.i0 + a) * P.W + (size_t)(P.cx + tx.i0)) * 3;
            float r[3] = {0, 0, 0};
            for (int b = 0; b < tx.n; b++) {
                float wx = gd_w(b, tx.n, tx.w0, tx.wmid, tx.wn);
                r[0] += wx * row[3 * b];
                r[1] += wx * row[3 * b + 1];
                r[2] += wx * row[3 * b + 2];
            }
            acc[0] += wy * r[0];
            acc[1] += wy * r[1];
            acc[2] += wy * r[2];
        }
        uint8_t *dst = out + (size_t)P.k * sample_bytes;
        if (L == 0) {
            for (int c = 0; c < 3; c++) {
                float v = acc[c] + 0.5f;
                v = v < 0 ? 0 : v > 255 ? 255 : v;
                dst[px * 3 + c] = (uint8_t)(int)v;
            }
        } else {
            float *d = (float *)dst;
            for (int c = 0; c < 3; c++) {
                float v = (acc[c] - nm.mean[c]) * nm.inv_std[c];
                if (L == 1)
                    d[px * 3 + c] = v;
                else
                    d[(size_t)c * hw + px] = v;
            }
        }
    }
}

static int gd_launch(sl_gdec *g, unsigned m, uint8_t *dev)
{
    unsigned long long total = (unsigned long long)m * g->oh * g->ow;
    const unsigned threads = 256;
    unsigned long long want = (total + threads - 1) / threads;
    unsigned blocks = (unsigned)(want < 16384 ? want : 16384);
    switch (g->layout) {
    case SL_LAYOUT_NHWC_U8:
        gd_resize_kernel<0><<<blocks, threads, 0, g->stream>>>(g->d_img, g->d_par, total, g->oh,
                                                               g->ow, g->norm, dev,
                                                               g->sample_bytes);
        break;
    case SL_LAYOUT_NHWC_F32:
        gd_resize_kernel<1><<<blocks, threads, 0, g->stream>>>(g->d_img, g->d_par, total, g->oh,
                                                               g->ow, g->norm, dev,
                                                               g->sample_bytes);
        break;
    case SL_LAYOUT_NCHW_F32:
        gd_resize_kernel<2><<<blocks, threads, 0, g->stream>>>(g->d_img, g->d_par, total, g->oh,
                                                               g->ow, g->norm, dev,
                                                               g->sample_bytes);
        break;
    }
    return SL_CUDA(cudaGetLastError());
}

// ------------------------------------------------------------ lifecycle

// SL_OK, or SL_ECUDA naming the nvJPEG call that returned s.
static int nvj_ok(const sl_gdec *g, nvjpegStatus_t s, const char *what)
{
    if (s == NVJPEG_STATUS_SUCCESS)
        return SL_OK;
    return sl_fail(SL_ECUDA, "--decode gpu: %s: %s (%s)", what, sl_nvjpeg_status_name(s),
                   g->lib.path);
}

extern "C" void sl_gdec_destroy(sl_gdec *g)
{
    if (!g)
        return;
    // Return codes dropped: destroy cannot report them, and every free must run.
    if (g->stream) {
        (void)cudaSetDevice(g->device);
        (void)cudaStreamSynchronize(g->stream);
    }
    if (g->wstream)
        for (unsigned i = 0; i < g->workers; i++)
            if (g->wstream[i])
                (void)g->lib.JpegStreamDestroy(g->wstream[i]);
    if (g->st)
        (void)g->lib.JpegStateDestroy(g->st);
    if (g->h)
        (void)g->lib.Destroy(g->h);
    if (g->e)
        for (size_t i = 0; i < (size_t)g->nslots * g->batch; i++)
            free(g->e[i].jpeg);
    if (g->h_par)
        (void)cudaFreeHost(g->h_par);
    if (g->d_par)
        (void)cudaFree(g->d_par);
    if (g->d_img)
        (void)cudaFree(g->d_img);
    if (g->stream)
        (void)cudaStreamDestroy(g->stream);
    (void)cudaGetLastError();
    sl_decoder_destroy(g->dec);
    sl_nvjpeg_unload(&g->lib);
    free(g->wstream);
    free(g->e);
    free(g->data);
    free(g->lens);
    free(g->imgs);
    free(g->gk);
    free(g);
}

extern "C" int sl_gdec_create(const sl_pipeline_config *cfg, unsigned workers, unsigned nslots,
                              const sl_source_set *src, sl_gdec **out)
{
    *out = NULL;
    if (cfg->decode == SL_DECODE_CPU)
        return SL_OK;
    int gpu = cfg->decode == SL_DECODE_GPU, ndev = 0, rc = SL_OK;
    if (cfg->device < 0) {
        if (!gpu)
            return SL_OK;
        return sl_fail(SL_EINVAL, "--decode gpu: the pipeline has no device batch (device %d): "
                                  "give --device D", cfg->device);
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= cfg->device) {
        (void)cudaGetLastError();
        if (!gpu)
            return SL_OK;
        return sl_fail(SL_ENOTSUP, "--decode gpu: no CUDA device %d (%d found)", cfg->device,
                       ndev);
    }
    sl_gdec *g = (sl_gdec *)calloc(1, sizeof *g);
    if (!g)
        return sl_fail(SL_ENOMEM, "--decode gpu: out of memory");
    if ((rc = sl_nvjpeg_load(&g->lib))) {
        free(g);
        if (!gpu)
            return SL_OK; // auto: the CPU path
        return sl_fail(rc, "--decode gpu: %s", sl_errmsg());
    }
    g->workers = workers;
    g->nslots = nslots;
    g->src = src;
    g->batch = cfg->batch;
    g->oh = cfg->height;
    g->ow = cfg->width;
    g->layout = cfg->layout;
    g->device = cfg->device;
    g->sample_bytes = sl_sample_bytes(cfg->height, cfg->width, cfg->layout);
    for (int c = 0; c < 3; c++) {
        g->mean[c] = cfg->mean[c];
        g->std[c] = cfg->std[c];
        g->norm.mean[c] = cfg->mean[c];
        g->norm.inv_std[c] = cfg->layout == SL_LAYOUT_NHWC_U8 ? 1.0f : 1.0f / cfg->std[c];
    }
    if (g->lib.GetProperty(SL_NVJPEG_PROP_MAJOR, &g->ver_major) != NVJPEG_STATUS_SUCCESS ||
        g->lib.GetProperty(SL_NVJPEG_PROP_MINOR, &g->ver_minor) != NVJPEG_STATUS_SUCCESS)
        g->ver_major = g->ver_minor = -1;
    size_t ne = (size_t)nslots * g->batch;
    g->e = (gd_entry *)calloc(ne, sizeof *g->e);
    g->wstream = (nvjpegJpegStream_t *)calloc(workers ? workers : 1, sizeof *g->wstream);
    g->data = (const unsigned char **)calloc(g->batch, sizeof *g->data);
    g->lens = (size_t *)calloc(g->batch, sizeof *g->lens);
    g->imgs = (nvjpegImage_t *)calloc(g->batch, sizeof *g->imgs);
    g->gk = (unsigned *)calloc(g->batch, sizeof *g->gk);
    if (!g->e || !g->wstream || !g->data || !g->lens || !g->imgs || !g->gk) {
        rc = sl_fail(SL_ENOMEM, "--decode gpu: out of memory");
        goto fail;
    }
    if ((rc = sl_decoder_create(&g->dec)))
        goto fail;
    sl_decoder_set_max_pixels(g->dec, cfg->max_pixels); // as the workers' decoders
    if ((rc = SL_CUDA(cudaSetDevice(g->device))) ||
        (rc = SL_CUDA(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking))) ||
        (rc = SL_CUDA(cudaHostAlloc((void **)&g->h_par, ne * sizeof *g->h_par,
                                    cudaHostAllocDefault))) ||
        (rc = SL_CUDA(cudaMalloc((void **)&g->d_par, g->batch * sizeof *g->d_par)))) {
        rc = sl_fail(rc, "--decode gpu: %s", sl_errmsg());
        goto fail;
    }
    // The hardware engine first; a GPU without one refuses it
    // (NVJPEG_STATUS_ARCH_MISMATCH or _JPEG_NOT_SUPPORTED): then the hybrid backend.
    g->hw = g->lib.CreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &g->h) ==
            NVJPEG_STATUS_SUCCESS;
    if (!g->hw) {
        g->h = NULL;
        if ((rc = nvj_ok(g, g->lib.CreateEx(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, 0, &g->h),
                         "nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID)")))
            goto fail;
    }
    if ((rc = nvj_ok(g, g->lib.JpegStateCreate(g->h, &g->st), "nvjpegJpegStateCreate")))
        goto fail;
    if (g->hw)
        for (unsigned i = 0; i < workers; i++)
            if ((rc = nvj_ok(g, g->lib.JpegStreamCreate(g->h, &g->wstream[i]),
                             "nvjpegJpegStreamCreate")))
                goto fail;
    *out = g;
    return SL_OK;
fail:
    sl_gdec_destroy(g);
    return gpu ? rc : SL_OK; // auto: the CPU path
}

extern "C" void sl_gdec_describe(sl_gdec *g, char *buf, size_t cap)
{
    if (!g) {
        snprintf(buf, cap, "cpu");
        return;
    }
    snprintf(buf, cap, "gpu: nvJPEG %d.%d %s backend (%s); %llu images on the GPU, %llu on the "
             "CPU (%llu after a failed nvJPEG batch)", g->ver_major, g->ver_minor,
             g->hw ? "hardware" : "GPU hybrid", g->lib.path,
             __atomic_load_n(&g->n_gpu, __ATOMIC_RELAXED),
             __atomic_load_n(&g->n_cpu, __ATOMIC_RELAXED),
             __atomic_load_n(&g->n_batch_fallback, __ATOMIC_RELAXED));
}

// --------------------------------------------------------------- stage

extern "C" int sl_gdec_stage(sl_gdec *g, unsigned worker, unsigned slot, unsigned k, uint64_t id,
                             const uint8_t *jpeg, size_t len, unsigned jflags, int W, int H,
                             const sl_crop *crop, int flip)
{
    gd_entry *e = &g->e[(size_t)slot * g->batch + k];
    e->kind = GD_HOST;
    // No DHT: libjpeg-turbo's standard tables (records/jpeg_scan.c), which
    // nvJPEG is not known to supply; the batch must not depend on --decode.
    if (jflags & SL_JPEG_STD_HUFF) {
        __atomic_fetch_add(&g->n_cpu, 1, __ATOMIC_RELAXED);
        return SL_ENOTSUP;
    }
    int nc = 0, ws[NVJPEG_MAX_COMPONENT] = {0}, hs[NVJPEG_MAX_COMPONENT] = {0};
    nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
    if (g->hw) {
        int unsupported = 1;
        nvjpegJpegStream_t js = g->wstream[worker];
        if (g->lib.JpegStreamParse(g->h, jpeg, len, 0, 0, js) != NVJPEG_STATUS_SUCCESS ||
            g->lib.DecodeBatchedSupported(g->h, js, &unsupported) != NVJPEG_STATUS_SUCCESS ||
            unsupported)
            goto cpu;
    }
    if (g->lib.GetImageInfo(g->h, jpeg, len, &nc, &css, ws, hs) != NVJPEG_STATUS_SUCCESS ||
        (nc != 1 && nc != 3) || css == NVJPEG_CSS_UNKNOWN || ws[0] != W || hs[0] != H)
        goto cpu;
    if (e->cap < len) {
        uint8_t *p = (uint8_t *)realloc(e->jpeg, len);
        if (!p)
            return sl_fail(SL_ENOMEM, "--decode gpu: staging %zu bytes: out of memory", len);
        e->jpeg = p;
        e->cap = len;
    }
    memcpy(e->jpeg, jpeg, len);
    e->len = len;
    e->W = W;
    e->H = H;
    e->crop = *crop;
    e->flip = flip;
    e->id = id;
    e->kind = GD_GPU;
    __atomic_fetch_add(&g->n_gpu, 1, __ATOMIC_RELAXED);
    return SL_OK;
cpu:
    __atomic_fetch_add(&g->n_cpu, 1, __ATOMIC_RELAXED);
    return SL_ENOTSUP;
}

// -------------------------------------------------------------- submit

extern "C" void sl_gdec_move(sl_gdec *g, unsigned slot, unsigned from, unsigned to)
{
    gd_entry *a = &g->e[(size_t)slot * g->batch + from], *b = &g->e[(size_t)slot * g->batch + to];
    gd_entry t = *a; // the JPEG buffers travel with their entries: nothing is freed twice
    *a = *b;
    *b = t;
}

// Copy host positions [k0, k1) of the slot to the device batch.
static int gd_copy_host(sl_gdec *g, const uint8_t *host, uint8_t *dev, unsigned k0, unsigned k1)
{
    size_t off = (size_t)k0 * g->sample_bytes, bytes = (size_t)(k1 - k0) * g->sample_bytes;
    return SL_CUDA(cudaMemcpyAsync(dev + off, host + off, bytes, cudaMemcpyHostToDevice,
                                   g->stream));
}

// nvJPEG failed the batch: decode its staged images on the CPU path into
// the host slot and copy them.
static int gd_cpu_batch(sl_gdec *g, unsigned slot, unsigned m, uint8_t *host, uint8_t *dev,
                        nvjpegStatus_t why_nv)
{
    for (unsigned j = 0; j < m; j++) {
        unsigned k = g->gk[j];
        gd_entry *e = &g->e[(size_t)slot * g->batch + k];
        uint8_t *dst = host + (size_t)k * g->sample_bytes;
        sl_out_spec out = {g->ow, g->oh, e->flip, g->layout, g->mean, g->std, dst};
        int rc = sl_decode_crop_sample(g->dec, e->jpeg, e->len, &e->crop, &out);
        if (rc) {
            char why[SL_ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", sl_errmsg());
            uint32_t shard = 0;
            uint64_t rec = 0;
            if (sl_source_set_locate(g->src, e->id, &shard, &rec))
                return sl_fail(rc, "--decode gpu: record id %llu: %s", (unsigned long long)e->id,
                               why);
            const sl_shard_info *sh = &g->src->shards[shard];
            return sl_fail(rc, "%s: record %llu @ %llu (id %llu): nvjpegDecodeBatched said %s "
                           "and the CPU decode: %s (--decode gpu does not refill a record "
                           "found bad only at batch decode; --decode cpu skips it)", sh->path,
                           (unsigned long long)rec, (unsigned long long)sh->idx[rec].offset,
                           (unsigned long long)e->id, sl_nvjpeg_status_name(why_nv), why);
        }
        if ((rc = gd_copy_host(g, host, dev, k, k + 1)))
            return rc;
    }
    __atomic_fetch_add(&g->n_batch_fallback, m, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g->n_cpu, m, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&g->n_gpu, m, __ATOMIC_RELAXED);
    return SL_OK;
}

static int gd_submit(sl_gdec *g, unsigned slot, unsigned n, uint8_t *host, uint8_t *dev,
                     cudaEvent_t event)
{
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(g->device))))
        return rc;
    // Host-decoded samples: one copy per run of consecutive positions.
    unsigned m = 0;
    size_t need = 0;
    for (unsigned k = 0; k < n;) {
        gd_entry *e = &g->e[(size_t)slot * g->batch + k];
        if (e->kind == GD_GPU) {
            g->gk[m++] = k;
            need += ((size_t)e->W * e->H * 3 + 255) & ~(size_t)255;
            k++;
            continue;
        }
        unsigned k1 = k + 1;
        while (k1 < n && g->e[(size_t)slot * g->batch + k1].kind == GD_HOST)
            k1++;
        if ((rc = gd_copy_host(g, host, dev, k, k1)))
            return rc;
        k = k1;
    }
    if (m > 0 && need > g->img_cap) { // grow: the stream's earlier batches may still read it
        if ((rc = SL_CUDA(cudaStreamSynchronize(g->stream))))
            return rc;
        if (g->d_img && (rc = SL_CUDA(cudaFree(g->d_img))))
            return rc;
        g->d_img = NULL;
        g->img_cap = 0;
        size_t cap = need + need / 4;
        if ((rc = SL_CUDA(cudaMalloc((void **)&g->d_img, cap))))
            return rc;
        g->img_cap = cap;
    }
    gd_param *par = g->h_par + (size_t)slot * g->batch;
    size_t off = 0;
    for (unsigned j = 0; j < m; j++) {
        gd_entry *e = &g->e[(size_t)slot * g->batch + g->gk[j]];
        g->data[j] = e->jpeg;
        g->lens[j] = e->len;
        memset(&g->imgs[j], 0, sizeof g->imgs[j]);
        g->imgs[j].channel[0] = g->d_img + off;
        g->imgs[j].pitch[0] = (size_t)e->W * 3;
        par[j] = gd_param{off, e->W, e->H, e->crop.x, e->crop.y, e->crop.w, e->crop.h, e->flip,
                          g->gk[j]};
        off += ((size_t)e->W * e->H * 3 + 255) & ~(size_t)255;
    }
    if (m > 0) {
        nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
        if ((int)m != g->inited_n) {
            s = g->lib.DecodeBatchedInitialize(g->h, g->st, (int)m, 1, NVJPEG_OUTPUT_RGBI);
            g->inited_n = s == NVJPEG_STATUS_SUCCESS ? (int)m : 0;
        }
        if (s == NVJPEG_STATUS_SUCCESS)
            s = g->lib.DecodeBatched(g->h, g->st, g->data, g->lens, g->imgs, g->stream);
        if (s != NVJPEG_STATUS_SUCCESS) {
            g->inited_n = 0; // nvjpeg.h: initialize again after a failed batch
            (void)cudaGetLastError();
            if ((rc = gd_cpu_batch(g, slot, m, host, dev, s)))
                return rc;
            m = 0;
        }
    }
    if (m > 0 &&
        ((rc = SL_CUDA(cudaMemcpyAsync(g->d_par, par, m * sizeof *par, cudaMemcpyHostToDevice,
                                       g->stream))) ||
         (rc = gd_launch(g, m, dev))))
        return rc;
    return SL_CUDA(cudaEventRecord(event, g->stream));
}

extern "C" int sl_gdec_submit(sl_gdec *g, unsigned slot, unsigned n, void *host, void *dev,
                              void *event)
{
    if (slot >= g->nslots || n > g->batch || !dev || !event)
        return sl_fail(SL_EINVAL, "sl_gdec_submit: slot %u of %u, %u samples of %u", slot,
                       g->nslots, n, g->batch);
    int rc = gd_submit(g, slot, n, (uint8_t *)host, (uint8_t *)dev, (cudaEvent_t)event);
    if (rc && rc != SL_EIMAGE && rc != SL_ECORRUPT)
        return sl_fail(rc, "%s (--decode gpu, slot %u)", sl_errmsg(), slot);
    return rc;
}

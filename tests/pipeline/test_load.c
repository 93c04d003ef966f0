/*
 * tests/pipeline/test_load.c - the load stage (sl_loader_*) and the GPU
 * normalize (sl_cuda_normalize) against a plain CPU reference (llm.c
 * style: the reference sits here, next to the check).
 *
 *   host        device -1: slots aligned, distinct, writable; submit/reuse are
 *               no-ops; device/event NULL; range checks
 *   no device   a device that does not exist: SL_ENOTSUP without CUDA,
 *               SL_ECUDA naming the call with CUDA
 *   reference   the CPU reference agrees with sl_store_sample (the CPU
 *               pipeline's own normalization), so GPU and CPU batches match
 *   GPU         (skipped without one) submit copies the right bytes in every
 *               slot, twice; normalize on odd shapes (3x7x5, 2x224x224) for
 *               every layout and dtype within atol + rtol*|ref|
 *
 * The tests are C: the CUDA runtime's C API (cuda_runtime_api.h) is used
 * only when SLUICE_WITH_CUDA is defined, and the device count is queried
 * inside each test, never in a constructor.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline.h"
#include "pipeline/pipeline_int.h"
#include "testutil.h"

#if SLUICE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static const float k_mean[3] = {123.675f, 116.28f, 103.53f};
static const float k_std[3] = {58.395f, 57.12f, 57.375f};

/* Usable CUDA devices; 0 in a build without CUDA or on a host without a GPU. */
static int gpu_count(void)
{
#if SLUICE_WITH_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

/* ---------------------------------------------------------- CPU reference */
/* in: (n, h, w, 3) u8 NHWC. out: (n, h, w, 3) f32 when !nchw, (n, 3, h, w)
 * f32 when nchw; out = (in - mean[c]) / std[c] (torchvision Normalize on
 * 0..255 values). */
static void normalize_ref(const uint8_t *in, unsigned n, int h, int w, const float mean[3],
                          const float std[3], int nchw, float *out)
{
    size_t hw = (size_t)h * (size_t)w;
    for (size_t img = 0; img < n; img++)
        for (size_t p = 0; p < hw; p++)
            for (size_t c = 0; c < 3; c++) {
                float v = ((float)in[(img * hw + p) * 3 + c] - mean[c]) / std[c];
                out[nchw ? (img * 3 + c) * hw + p : (img * hw + p) * 3 + c] = v;
            }
}

static uint8_t *random_u8(size_t len, uint64_t seed)
{
    uint8_t *b = malloc(len);
    cr_assert_not_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)tu_rand(&seed);
    b[0] = 0; /* the extremes of the range are always covered */
    b[len - 1] = 255;
    return b;
}

/* ------------------------------------------------------------- host path */
Test(pipeline_load, host_slots)
{
    const size_t bytes = 1003; /* not a multiple of the alignment */
    const unsigned nslots = 5;
    sl_loader *l;
    cr_assert_eq(sl_loader_create(-1, bytes, nslots, &l), SL_OK, "%s", sl_errmsg());
    uint8_t *p[5];
    for (unsigned i = 0; i < nslots; i++) {
        p[i] = sl_loader_host(l, i);
        cr_assert_not_null(p[i]);
        cr_assert_eq((uintptr_t)p[i] % 64, 0, "slot %u at %p is not 64-byte aligned", i, (void *)p[i]);
        cr_assert_null(sl_loader_device(l, i));
        cr_assert_null(sl_loader_event(l, i));
        memset(p[i], (int)(0xa0 + i), bytes);
    }
    /* distinct: no two slots overlap, and each kept its own pattern */
    for (unsigned i = 0; i < nslots; i++) {
        for (unsigned j = 0; j < nslots; j++)
            if (i != j)
                cr_assert(p[i] + bytes <= p[j] || p[j] + bytes <= p[i], "slots %u and %u overlap", i, j);
        for (size_t k = 0; k < bytes; k++)
            cr_assert_eq(p[i][k], 0xa0 + i, "slot %u byte %zu overwritten", i, k);
    }
    for (unsigned i = 0; i < nslots; i++) {
        cr_assert_eq(sl_loader_submit(l, i, bytes), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_loader_reuse(l, i), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(p[i][0], 0xa0 + i); /* no-ops: the data is untouched */
    }
    cr_assert_eq(sl_loader_submit(l, 0, bytes + 1), SL_EINVAL);
    cr_assert_eq(sl_loader_submit(l, nslots, 1), SL_EINVAL);
    cr_assert_eq(sl_loader_reuse(l, nslots), SL_EINVAL);
    cr_assert_null(sl_loader_host(l, nslots));
    sl_loader_destroy(l);
    sl_loader_destroy(NULL);

    cr_assert_eq(sl_loader_create(-1, 0, 2, &l), SL_EINVAL);
    cr_assert_null(l);
    cr_assert_eq(sl_loader_create(-1, 64, 0, &l), SL_EINVAL);
    cr_assert_null(l);
}

/* A device index that cannot exist: no CUDA -> SL_ENOTSUP; CUDA -> the
 * failing call is named (SL_CUDA records call, file and line). */
Test(pipeline_load, missing_device)
{
    int dev = gpu_count(); /* devices are 0..count-1 */
    sl_loader *l = (sl_loader *)&l;
    int rc = sl_loader_create(dev, 4096, 2, &l);
    cr_assert_null(l);
#if SLUICE_WITH_CUDA
    cr_assert_eq(rc, SL_ECUDA, "device %d: got %d: %s", dev, rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "cudaSetDevice") && strstr(sl_errmsg(), "load_cuda.cu:"),
              "message names neither the call nor the place: %s", sl_errmsg());
#else
    cr_assert_eq(rc, SL_ENOTSUP, "%s", sl_errmsg());
    cr_assert_eq(sl_loader_create(0, 4096, 2, &l), SL_ENOTSUP);
    cr_assert_null(l);
    uint8_t in[12] = {0};
    float out[12];
    cr_assert_eq(sl_cuda_normalize(in, 1, 2, 2, k_mean, k_std, SL_LAYOUT_NCHW_F32, SL_DTYPE_F32,
                                   out, NULL),
                 SL_ENOTSUP);
#endif
}

/* Arguments are checked before anything touches the GPU. */
Test(pipeline_load, normalize_bad_args)
{
#if SLUICE_WITH_CUDA
    uint8_t in[12] = {0};
    float out[12];
    const float zero_std[3] = {1, 0, 1};
    cr_assert_eq(sl_cuda_normalize(in, 1, 2, 2, k_mean, k_std, SL_LAYOUT_NHWC_U8, SL_DTYPE_F32,
                                   out, NULL),
                 SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "out_layout"), "%s", sl_errmsg());
    cr_assert_eq(sl_cuda_normalize(in, 1, 2, 2, k_mean, k_std, SL_LAYOUT_NCHW_F32, (sl_dtype)7,
                                   out, NULL),
                 SL_EINVAL);
    cr_assert_eq(sl_cuda_normalize(in, 0, 2, 2, k_mean, k_std, SL_LAYOUT_NCHW_F32, SL_DTYPE_F32,
                                   out, NULL),
                 SL_EINVAL);
    cr_assert_eq(sl_cuda_normalize(NULL, 1, 2, 2, k_mean, k_std, SL_LAYOUT_NCHW_F32,
                                   SL_DTYPE_F32, out, NULL),
                 SL_EINVAL);
    cr_assert_eq(sl_cuda_normalize(in, 1, 2, 2, k_mean, zero_std, SL_LAYOUT_NCHW_F32,
                                   SL_DTYPE_F32, out, NULL),
                 SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "std[1]"), "%s", sl_errmsg());
#else
    cr_skip_test("built without CUDA (missing_device checks SL_ENOTSUP)");
#endif
}

/* The reference is what the CPU pipeline stores (sl_store_sample, no flip):
 * a GPU-normalized u8 batch then equals a CPU-normalized f32 batch. */
Test(pipeline_load, reference_matches_store_sample)
{
    const int h = 7, w = 5;
    uint8_t *rgb = random_u8((size_t)h * w * 3, 11);
    float ref[7 * 5 * 3], got[7 * 5 * 3];
    for (int nchw = 0; nchw < 2; nchw++) {
        sl_layout lay = nchw ? SL_LAYOUT_NCHW_F32 : SL_LAYOUT_NHWC_F32;
        cr_assert_eq(sl_sample_bytes(h, w, lay), sizeof got);
        normalize_ref(rgb, 1, h, w, k_mean, k_std, nchw, ref);
        sl_store_sample(rgb, &(sl_out_spec){.w = w, .h = h, .flip = 0, .layout = lay,
                                            .mean = k_mean, .std = k_std, .dst = got});
        for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++)
            cr_assert(fabsf(got[i] - ref[i]) <= 1e-5f + 1e-5f * fabsf(ref[i]),
                      "%s element %zu: store_sample %.7g, reference %.7g", nchw ? "NCHW" : "NHWC",
                      i, (double)got[i], (double)ref[i]);
    }
    free(rgb);
}

/* ------------------------------------------------------------------ GPU */
#if SLUICE_WITH_CUDA
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                    \
    } while (0)

/* IEEE binary16 / bfloat16 bits to float (host side, exact). */
static float f16_to_f32(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(m | 0x400), e - 25);
    return s ? -v : v;
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#endif

Test(pipeline_load, submit_copies)
{
    if (gpu_count() <= 0)
        cr_skip_test("no CUDA device");
#if SLUICE_WITH_CUDA
    const size_t bytes = 100003;
    const unsigned nslots = 3;
    sl_loader *l;
    cr_assert_eq(sl_loader_create(0, bytes, nslots, &l), SL_OK, "%s", sl_errmsg());
    uint8_t *back = malloc(bytes);
    cr_assert_not_null(back);
    for (unsigned i = 0; i < nslots; i++) {
        cr_assert_not_null(sl_loader_device(l, i));
        cr_assert_not_null(sl_loader_event(l, i));
        cr_assert_eq((uintptr_t)sl_loader_host(l, i) % 64, 0);
        for (unsigned j = 0; j < i; j++)
            cr_assert_neq(sl_loader_device(l, i), sl_loader_device(l, j));
    }
    /* two rounds: the second reuses every slot with other data and a
     * shorter copy, whose tail must keep the first round's bytes */
    for (int round = 0; round < 2; round++) {
        size_t len = round ? bytes / 2 + 1 : bytes;
        for (unsigned i = 0; i < nslots; i++) {
            cr_assert_eq(sl_loader_reuse(l, i), SL_OK, "%s", sl_errmsg());
            uint8_t *h = sl_loader_host(l, i);
            uint64_t st = 1000 * round + i;
            for (size_t k = 0; k < len; k++)
                h[k] = (uint8_t)tu_rand(&st);
            cr_assert_eq(sl_loader_submit(l, i, len), SL_OK, "%s", sl_errmsg());
        }
        for (unsigned i = 0; i < nslots; i++) {
            CK(cudaEventSynchronize((cudaEvent_t)sl_loader_event(l, i)));
            CK(cudaMemcpy(back, sl_loader_device(l, i), bytes, cudaMemcpyDeviceToHost));
            uint64_t st = 1000 * round + i, st0 = i;
            for (size_t k = 0; k < bytes; k++) {
                uint8_t want0 = (uint8_t)tu_rand(&st0);
                uint8_t want = k < len ? (uint8_t)tu_rand(&st) : want0;
                cr_assert_eq(back[k], want, "round %d slot %u byte %zu: %u, want %u", round, i, k,
                             back[k], want);
            }
        }
    }
    cr_assert_eq(sl_loader_submit(l, 0, bytes + 1), SL_EINVAL);
    free(back);
    sl_loader_destroy(l);
#endif
}

#if SLUICE_WITH_CUDA
/* Normalize one random (n, h, w, 3) batch on the GPU in every layout and
 * dtype and compare with normalize_ref. */
static void check_normalize(unsigned n, int h, int w, uint64_t seed)
{
    size_t elems = (size_t)n * h * w * 3;
    uint8_t *in = random_u8(elems, seed);
    float *ref = malloc(elems * sizeof *ref);
    void *out = malloc(elems * sizeof(float));
    cr_assert(ref && out);
    void *d_in, *d_out;
    cudaStream_t s;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d_in, elems));
    CK(cudaMalloc(&d_out, elems * sizeof(float)));
    CK(cudaStreamCreate(&s));
    CK(cudaMemcpy(d_in, in, elems, cudaMemcpyHostToDevice));
    static const struct {
        sl_dtype dt;
        const char *name;
        size_t size;
        float atol, rtol;
    } types[] = {
        {SL_DTYPE_F32, "f32", 4, 1e-5f, 1e-5f},
        {SL_DTYPE_F16, "f16", 2, 1e-3f, 1e-3f},  /* 11-bit significand: 2^-11 relative */
        {SL_DTYPE_BF16, "bf16", 2, 1e-2f, 1e-2f}, /* 8-bit significand: 2^-8 relative */
    };
    for (int nchw = 0; nchw < 2; nchw++) {
        normalize_ref(in, n, h, w, k_mean, k_std, nchw, ref);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            CK(cudaMemset(d_out, 0xff, elems * sizeof(float))); /* NaN in every dtype */
            int rc = sl_cuda_normalize(d_in, n, h, w, k_mean, k_std,
                                       nchw ? SL_LAYOUT_NCHW_F32 : SL_LAYOUT_NHWC_F32,
                                       types[t].dt, d_out, s);
            cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(out, d_out, elems * types[t].size, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < elems; i++) {
                float g = types[t].dt == SL_DTYPE_F32    ? ((float *)out)[i]
                        : types[t].dt == SL_DTYPE_F16    ? f16_to_f32(((uint16_t *)out)[i])
                                                         : bf16_to_f32(((uint16_t *)out)[i]);
                cr_assert(fabsf(g - ref[i]) <= types[t].atol + types[t].rtol * fabsf(ref[i]),
                          "%ux%dx%d %s %s element %zu: gpu %.7g, reference %.7g", n, h, w,
                          nchw ? "NCHW" : "NHWC", types[t].name, i, (double)g, (double)ref[i]);
            }
        }
    }
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d_in));
    CK(cudaFree(d_out));
    free(in);
    free(ref);
    free(out);
}
#endif

Test(pipeline_load, normalize_odd_shape)
{
    if (gpu_count() <= 0)
        cr_skip_test("no CUDA device");
#if SLUICE_WITH_CUDA
    check_normalize(3, 7, 5, 1);
#endif
}

Test(pipeline_load, normalize_224)
{
    if (gpu_count() <= 0)
        cr_skip_test("no CUDA device");
#if SLUICE_WITH_CUDA
    check_normalize(2, 224, 224, 2);
#endif
}

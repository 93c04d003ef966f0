/* tests/train/cuda_testutil.h - helpers of the cuda op tests (test_ops_cuda.c,
 * test_norm_cuda.c, test_sgd_cuda.c): host arrays and comparisons, a cuda
 * exec or a skip, and device memory in and out with every CUDA return code
 * asserted. Built with the cuda backend only
 * (SLUICE_TRAIN_CUDA); the tests skip without it.
 *
 * The context's stream is non-blocking (train/cuda_ctx.cu), so it does not
 * order with cudaMemcpy on the legacy stream: tg_ready() (a device sync)
 * comes after uploads, before an op, and before downloads.
 *
 * Threading: test code, one thread. */
#ifndef SL_CUDA_TESTUTIL_H
#define SL_CUDA_TESTUTIL_H

#ifdef SLUICE_TRAIN_CUDA
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "testutil.h"
#include "train/cuda_int.h"

/* Host arrays and comparisons shared by the op tests. */
static inline float urand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_rand(st) >> 11) * (1.0 / 9007199254740992.0));
}

static inline float *falloc(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert(p, "malloc %lld floats", (long long)n);
    return p;
}

static inline float *fdup(const float *v, int64_t n)
{
    float *p = falloc(n);
    memcpy(p, v, (size_t)(n > 0 ? n : 0) * sizeof(float));
    return p;
}

static inline float *frand(int64_t n, uint64_t seed, float lo, float hi)
{
    float *p = falloc(n);
    uint64_t st = seed;
    for (int64_t i = 0; i < n; i++)
        p[i] = urand(&st, lo, hi);
    return p;
}

static inline void assert_close(const float *got, const float *want, int64_t n, double atol,
                         double rtol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        cr_assert(d <= atol + rtol * fabs(want[i]), "%s[%lld]: got %.9g want %.9g (diff %.3g)",
                  what, (long long)i, got[i], want[i], d);
    }
}

/* Bit equality of floats (signed zeros too); any two NaN count as equal,
 * as x86 and the GPU make different NaN payloads from inf - inf. */
static inline void assert_same(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) && !(isnan(got[i]) && isnan(want[i])))
            cr_assert_fail("%s[%lld]: got %.9g want %.9g (bits differ)", what, (long long)i,
                           got[i], want[i]);
}

/* A cuda exec on device 0 with full fp32 math (SLUICE_CUDA_TF32=0: TF32
 * keeps 10 mantissa bits, too few to compare with ref); skips the test when
 * the runtime sees no device. ops: the table e->ops points at (the tests'
 * host adaptors), or NULL. */
static inline void tg_open(sl_exec *e, const sl_ops *ops)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        cr_skip_test("no GPU (%s)", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    cr_assert_eq(setenv("SLUICE_CUDA_TF32", "0", 1), 0);
    sl_cuda_ctx *cx = NULL;
    cr_assert_eq(sl_cuda_ctx_create(0, &cx), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(cx->tf32, 0, "SLUICE_CUDA_TF32=0 must give full fp32 math");
    memset(e, 0, sizeof *e);
    e->ops = ops;
    e->backend = SL_BACKEND_CUDA;
    e->threads = 1;
    e->cuda = cx;
}

static inline void tg_close(sl_exec *e)
{
    sl_cuda_ctx_destroy((sl_cuda_ctx *)e->cuda);
    e->cuda = NULL;
}

/* Wait for everything queued (and catch a kernel's asynchronous fault). */
static inline void tg_ready(void)
{
    cudaError_t err = cudaDeviceSynchronize();
    cr_assert_eq(err, cudaSuccess, "cudaDeviceSynchronize: %s: %s", cudaGetErrorName(err),
                 cudaGetErrorString(err));
}

/* Device buffer of bytes (at least 16), filled with 0xff bytes (NaN as
 * floats, -1 as int32) so an output a kernel forgets stays visible. */
static inline void *tg_alloc(size_t bytes)
{
    void *d = NULL;
    cudaError_t err = cudaMalloc(&d, bytes ? bytes : 16);
    cr_assert_eq(err, cudaSuccess, "cudaMalloc %zu: %s", bytes, cudaGetErrorString(err));
    err = cudaMemset(d, 0xff, bytes ? bytes : 16);
    cr_assert_eq(err, cudaSuccess, "cudaMemset: %s", cudaGetErrorString(err));
    return d;
}

/* Device copy of count elements of elem bytes at h (h may be NULL when
 * count <= 0; the buffer is then a poisoned 16 bytes). */
static inline void *tg_up(const void *h, int64_t count, size_t elem)
{
    size_t bytes = count > 0 ? (size_t)count * elem : 0;
    void *d = tg_alloc(bytes);
    if (bytes) {
        cudaError_t err = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
        cr_assert_eq(err, cudaSuccess, "cudaMemcpy up %zu: %s", bytes, cudaGetErrorString(err));
    }
    return d;
}

static inline float *tg_upf(const float *h, int64_t n)
{
    return (float *)tg_up(h, n, sizeof(float));
}

static inline float *tg_newf(int64_t n)
{
    return (float *)tg_alloc(n > 0 ? (size_t)n * sizeof(float) : 0);
}

/* Copy count elements back (after tg_ready). */
static inline void tg_down(void *h, const void *d, int64_t count, size_t elem)
{
    if (count <= 0)
        return;
    tg_ready();
    cudaError_t err = cudaMemcpy(h, d, (size_t)count * elem, cudaMemcpyDeviceToHost);
    cr_assert_eq(err, cudaSuccess, "cudaMemcpy down: %s", cudaGetErrorString(err));
}

static inline void tg_downf(float *h, const float *d, int64_t n)
{
    tg_down(h, d, n, sizeof(float));
}

static inline void tg_free(void *d)
{
    if (d)
        cr_assert_eq(cudaFree(d), cudaSuccess);
}

#endif /* SLUICE_TRAIN_CUDA */
#endif /* SL_CUDA_TESTUTIL_H */

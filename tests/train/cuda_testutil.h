/* tests/train/cuda_testutil.h - helpers of the cuda op tests (test_ops_cuda.c,
 * test_norm_cuda.c, test_sgd_cuda.c, test_conv_cuda.c, test_amp_cuda.c):
 * host arrays and comparisons, a cuda exec or a skip, and device memory in
 * and out with every CUDA return code asserted. Built with the cuda backend
 * only (SLUICE_TRAIN_CUDA); the tests skip without it. The host rounding to
 * bf16 / f16 at the top is plain C and built always (its goldens run
 * without a GPU).
 *
 * The context's stream is non-blocking (train/ops/cuda_ctx.cu), so it does not
 * order with cudaMemcpy on the legacy stream: tg_ready() (a device sync)
 * comes after uploads, before an op, and before downloads.
 *
 * Threading: test code, one thread. */
#ifndef SL_CUDA_TESTUTIL_H
#define SL_CUDA_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype.h"

/* ------------------------------------------- host rounding to bf16 / f16 */
/* The host's model of the GPU's __float2bfloat16_rn / __float2half_rn:
 * IEEE round to nearest, ties to even, overflow to inf, NaN to a quiet
 * NaN, subnormals kept. bf16 is the top half of an f32 (8 significant bits,
 * f32's exponent range); f16 is binary16 (11 significant bits, largest
 * finite 65504, smallest subnormal 2^-24). */

static inline uint32_t tg_f32_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static inline float tg_bits_f32(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static inline uint16_t tg_bf16_bits(float v)
{
    uint32_t u = tg_f32_bits(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* add half an ulp of bf16 (less one), plus one more when the kept part
     * is odd: a tie then carries up to even, or stays at even */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline uint16_t tg_f16_bits(float v)
{
    uint32_t u = tg_f32_bits(v);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u)
        return sign | 0x7e00u; /* NaN */
    if (u >= 0x47800000u)      /* >= 2^16 (inf too): beyond f16's range */
        return sign | 0x7c00u;
    if (u < 0x38800000u) {
        /* below 2^-14: an f16 subnormal or zero. Adding 0.5 (2^-1) puts the
         * value's 2^-24 units in the low mantissa bits of the f32 sum, and
         * the f32 addition rounds to nearest even; the result's bits past
         * 0.5's are the f16 subnormal. (The classic trick of Giesen's
         * float_to_half_fast3_rtne.) */
        float f = tg_bits_f32(u) + 0.5f;
        return sign | (uint16_t)(tg_f32_bits(f) - 0x3f000000u);
    }
    /* normal: rebias the exponent (127 -> 15), round the 13 dropped bits to
     * nearest even; a carry out of the mantissa bumps the exponent, up to
     * inf for values in [65520, 65536) */
    uint32_t odd = (u >> 13) & 1u;
    u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return sign | (uint16_t)(u >> 13);
}

static inline float tg_bf16_f32(uint16_t b) { return tg_bits_f32((uint32_t)b << 16); }

static inline float tg_f16_f32(uint16_t b)
{
    int e = (b >> 10) & 0x1f, m = b & 0x3ff;
    float mag = e == 0    ? ldexpf((float)m, -24)
                : e == 31 ? (m ? NAN : INFINITY)
                          : ldexpf((float)(m | 0x400), e - 25);
    return b & 0x8000u ? -mag : mag;
}

/* The bits of v in type t (bf16 / f16), and their f32 value. */
static inline uint16_t tg_bits16(float v, sl_dtype t)
{
    return t == SL_DTYPE_BF16 ? tg_bf16_bits(v) : tg_f16_bits(v);
}

static inline float tg_from16(uint16_t b, sl_dtype t)
{
    return t == SL_DTYPE_BF16 ? tg_bf16_f32(b) : tg_f16_f32(b);
}

/* v rounded to t (f32: v). */
static inline float tg_round(float v, sl_dtype t)
{
    return t == SL_DTYPE_F32 ? v : tg_from16(tg_bits16(v, t), t);
}

static inline void tg_round_all(float *v, int64_t n, sl_dtype t)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = tg_round(v[i], t);
}

static inline size_t tg_esize(sl_dtype t) { return sl_dtype_size(t); }

static inline const char *tg_type_name(sl_dtype t)
{
    return t == SL_DTYPE_F32 ? "f32" : t == SL_DTYPE_BF16 ? "bf16" : "f16";
}

/* Significant bits of t (8 for bf16, 11 for f16, 24 for f32): one rounding
 * to t moves a value by at most 2^-bits of it (the unit roundoff), and one
 * ulp is at most 2^(1-bits) of it, for normal values. */
static inline int tg_bits(sl_dtype t)
{
    return t == SL_DTYPE_BF16 ? 8 : t == SL_DTYPE_F16 ? 11 : 24;
}

/* ------------------------------------------------ GPU runs (any build) */
/* The GPU tests that drive the CLI (test_train_cuda.c, test_train_nccl.c,
 * test_eval_cuda.c): whether a cuda exec can be made (no: the test skips),
 * and the losses a run logged. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "testutil.h"
#include "train/ops/ops.h"

static inline int tg_has_gpu(void)
{
    sl_exec e;
    if (sl_exec_init(&e, SL_BACKEND_CUDA, 1))
        return 0;
    sl_exec_fini(&e);
    return 1;
}

typedef struct tg_losses {
    double v[64];
    long step[64];
    int n;
} tg_losses;

/* step and train/loss of every line of LOGDIR/metrics.jsonl (the trainer
 * logs every --log-every steps and at each epoch's end). */
static inline void tg_read_losses(const char *logdir, tg_losses *l)
{
    char *path = tu_join(logdir, "metrics.jsonl");
    size_t len;
    char *text = (char *)tu_read_file(path, &len);
    cr_assert(text, "%s", path);
    memset(l, 0, sizeof *l);
    for (char *line = text; line && *line && l->n < 64;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *st = strstr(line, "\"step\":"), *lo = strstr(line, "\"train/loss\":");
        if (st && lo) {
            l->step[l->n] = atol(st + strlen("\"step\":"));
            l->v[l->n++] = atof(lo + strlen("\"train/loss\":"));
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    free(path);
}

#ifdef SLUICE_TRAIN_CUDA
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "testutil.h"
#include "train/ops/cuda_int.h"

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
    /* as sl_exec_init does: the caches attach themselves to the context */
    cr_assert_eq(sl_conv_algo_cache_attach(cx), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_graph_cache_attach(cx), SL_OK, "%s", sl_errmsg());
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

/* ------------------------------------------ activations in bf16 / f16 */

/* The exec's activation type, through sl_exec_set_act as the model sets it. */
static inline void tg_set_act(sl_exec *e, sl_dtype t)
{
    cr_assert_eq(sl_exec_set_act(e, t), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->act, t);
}

/* Device copy of n f32 values as type t (each rounded to nearest even:
 * round them on the host first where a comparison needs the same inputs). */
static inline void *tg_upa(const float *h, int64_t n, sl_dtype t)
{
    if (t == SL_DTYPE_F32)
        return tg_up(h, n, sizeof(float));
    uint16_t *b = malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
    cr_assert(b, "malloc %lld halves", (long long)n);
    for (int64_t i = 0; i < n; i++)
        b[i] = tg_bits16(h[i], t);
    void *d = tg_up(b, n, sizeof *b);
    free(b);
    return d;
}

/* Device buffer of n elements of t, poisoned (0xffff is a NaN in bf16 and
 * f16 too). */
static inline void *tg_newa(int64_t n, sl_dtype t)
{
    return tg_alloc(n > 0 ? (size_t)n * tg_esize(t) : 0);
}

/* n elements of type t at d, widened to f32 into h (after tg_ready). */
static inline void tg_downa(float *h, const void *d, int64_t n, sl_dtype t)
{
    if (t == SL_DTYPE_F32) {
        tg_down(h, d, n, sizeof(float));
        return;
    }
    if (n <= 0)
        return;
    uint16_t *b = malloc((size_t)n * sizeof *b);
    cr_assert(b, "malloc %lld halves", (long long)n);
    tg_down(b, d, n, sizeof *b);
    for (int64_t i = 0; i < n; i++)
        h[i] = tg_from16(b[i], t);
    free(b);
}

#endif /* SLUICE_TRAIN_CUDA */
#endif /* SL_CUDA_TESTUTIL_H */

/* tests/train/ops/test_conv_cuda.c - the cuda backend's context and its cuDNN
 * convolutions (train/ops/cuda_ctx.cu, train/ops/conv_cuda.cu):
 *
 *   errors     sl_exec_init(cuda) is SL_ENOTSUP in a build without the
 *              backend, SL_ECUDA "no CUDA device" without a device, and
 *              refuses bad SLUICE_CUDA_* values; the check helpers' messages
 *   fp32       (GPU) forward, backward-data and backward-filter against the
 *              ref loops on awkward shapes with SLUICE_CUDA_TF32=0, every
 *              algorithm running CUDNN_FMA_MATH; hand-computed golden values
 *   tf32       (GPU) the same shapes with TF32 allowed, looser tolerance
 *   bf16, f16  (GPU) the same shapes with bf16 / f16 activations (x, w, y,
 *              dy, dx in the type, dw f32), inputs rounded on the host;
 *              the golden values exactly; the measured ranking; the cache
 *              keeps one entry per (shape, type)
 *   cache      (GPU) one algorithm search per shape and direction, a new
 *              entry per shape (enough to grow the table), deterministic
 *              backward algorithms that reproduce bit for bit, the measured
 *              ranking (SLUICE_CUDNN_FIND=1) against ref too, cuDNN's view
 *              of the geometry checked against ours
 *
 * Tolerance. The ref sums in double, so its error is nil; the GPU's is a
 * rounding error of a sum of terms, bounded by a multiple of the sum of
 * |terms|, m (the ref op on |x|, |w|): K*eps*m for any order of K terms.
 * An element passes when
 *     |got - ref| <= rtol*|ref| + mtol*m + atol*max(m)
 * (llm.c's atol + rtol*|ref|, with the terms' magnitude: an element whose
 * terms cancel to near zero keeps the error of its terms, and Winograd or
 * FFT algorithms spread error over the whole output). fp32: 1e-4, 1e-5,
 * 1e-6. TF32 rounds both inputs to 10 mantissa bits, each product within
 * about 2^-10 relative: 1e-2, 2e-3, 1e-5. A layout or indexing bug is off
 * by about |ref| (terms of random sign: m/sqrt(K)), orders above both.
 * bf16 / f16 (p = 8 / 11 significant bits, u = 2^-p): the inputs are
 * rounded on the host before ref sees them, so ref is exact for the GPU's
 * inputs; products of two p-bit values are exact in f32, the f32 sum keeps
 * fp32's error, and the output is rounded once to the type: u*|ref|. Some
 * algorithms hold intermediates in the data type (Winograd's transformed
 * tiles, split-K partial sums), each rounding costing up to u of the terms'
 * magnitude: allow two. So rtol = u + 1e-4, mtol = 2u + 1e-5, atol 1e-5
 * (bf16: 0.0040, 0.0078; f16: 0.00059, 0.00099). dw is rounded to the
 * type by cuDNN and widened exactly: the same bound. The margin over a
 * layout bug shrinks to m/sqrt(K) against 2u*m: at least 5x for bf16 with
 * these shapes (K <= 576), 40x for f16.
 *
 * Run on a GPU machine:
 *   cmake -S . -B build-g1 && cmake --build build-g1 --target sluice_tests
 *   build-g1/sluice_tests --filter=train_conv_cuda/\* */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"
#ifdef SLUICE_TRAIN_CUDA
#include <cuda_runtime_api.h>

#include "train/cuda_testutil.h"
#include "train/ops/cuda_int.h"
#endif

typedef struct geom {
    int n, h, w, c, k, r, s, stride, pad;
} geom;

/* n 1/2/3, sizes 1..13 and odd, c 1/3/17/64, k 1/5/32/64, kernels 1/3/5/7
 * and non-square, stride 1/2, pad 0..3 (windows wholly in the padding,
 * kernels larger than the input), the ResNet stem (7x7/2 pad 3, 3 -> 64)
 * and its 1x1/2 downsample and 3x3 blocks. */
static const geom shapes[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 0},     /* one pixel, one channel */
    {3, 1, 1, 3, 5, 3, 3, 1, 1},     /* 1x1 input: only the centre tap */
    {1, 13, 13, 17, 32, 3, 3, 1, 1}, /* same-padded 3x3 */
    {3, 13, 11, 17, 5, 3, 3, 2, 1},  /* strided 3x3, odd sizes */
    {3, 7, 9, 3, 32, 7, 7, 2, 3},    /* the stem's geometry, small */
    {2, 32, 32, 3, 64, 7, 7, 2, 3},  /* the stem at 32 px */
    {3, 13, 13, 64, 32, 1, 1, 2, 0}, /* 1x1/2 downsample, odd size */
    {2, 12, 12, 64, 32, 1, 1, 2, 0}, /* 1x1/2 downsample, even size */
    {3, 9, 7, 17, 5, 1, 1, 1, 1},    /* 1x1 pad 1: a border of zeros */
    {1, 5, 5, 64, 1, 5, 5, 1, 0},    /* k = 1, the window is the input */
    {3, 2, 3, 1, 5, 3, 3, 1, 2},     /* pad 2 on a 2x3 input, c = 1 */
    {1, 4, 6, 3, 5, 7, 7, 1, 3},     /* kernel larger than the input */
    {3, 8, 6, 3, 5, 3, 3, 2, 0},     /* last row and column never read */
    {1, 13, 1, 3, 5, 3, 1, 2, 1},    /* non-square kernel, width 1 */
    {1, 10, 10, 17, 5, 3, 3, 1, 3},  /* pad 3 on a 3x3 */
    {2, 11, 13, 64, 64, 3, 3, 1, 1}, /* a ResNet 3x3 block conv */
    {3, 6, 10, 64, 32, 3, 3, 2, 1},  /* a stage-entry 3x3/2 */
};
#define NSHAPES (sizeof shapes / sizeof *shapes)

static sl_conv_shape make(const geom *g)
{
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, g->n, g->h, g->w, g->c, g->k, g->r, g->s, g->stride,
                                    g->pad),
                 SL_OK, "%s", sl_errmsg());
    return sh;
}

/* ------------------------------------------------------------ init errors */

Test(train_conv_cuda, init_errors)
{
    sl_exec e;
#ifndef SLUICE_TRAIN_CUDA
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_ENOTSUP);
    cr_assert_not_null(strstr(sl_errmsg(), "no CUDA backend"), "%s", sl_errmsg());
    cr_assert_null(e.cuda);
    sl_exec_fini(&e);
    /* the table is still there, and honest: no slots, and the entry
     * points say why */
    sl_conv_shape sh = make(&shapes[0]);
    float x = 1, w = 1, y = 0;
    sl_exec ce = {.ops = &sl_ops_cuda, .backend = SL_BACKEND_CUDA};
    cr_assert_null(sl_ops_cuda.conv_fwd);
    cr_assert_eq(sl_conv_fwd(&ce, &sh, &x, &w, &y), SL_ENOTSUP);
    cr_assert_not_null(strstr(sl_errmsg(), "sl_conv_fwd: cuda: the backend has no such op "
                                           "(this build has no cuda backend)"),
                       "%s", sl_errmsg());
#else
    /* Bad settings are refused before any device is touched. */
    cr_assert_eq(setenv("SLUICE_CUDA_DEVICE", "1x", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert_not_null(strstr(sl_errmsg(), "SLUICE_CUDA_DEVICE=1x"), "%s", sl_errmsg());
    cr_assert_eq(setenv("SLUICE_CUDA_DEVICE", "-1", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert_eq(unsetenv("SLUICE_CUDA_DEVICE"), 0);
    cr_assert_eq(setenv("SLUICE_CUDA_TF32", "yes", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert_not_null(strstr(sl_errmsg(), "SLUICE_CUDA_TF32=yes: want 0 or 1"), "%s",
                       sl_errmsg());
    cr_assert_null(e.cuda);
    cr_assert_eq(unsetenv("SLUICE_CUDA_TF32"), 0);
    cr_assert_eq(setenv("SLUICE_CUDNN_FIND", "2", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert_not_null(strstr(sl_errmsg(), "SLUICE_CUDNN_FIND"), "%s", sl_errmsg());
    cr_assert_eq(unsetenv("SLUICE_CUDNN_FIND"), 0);
    cr_assert_eq(setenv("SLUICE_CUDNN_DETERMINISTIC", "no", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert_not_null(strstr(sl_errmsg(), "SLUICE_CUDNN_DETERMINISTIC=no"), "%s", sl_errmsg());
    cr_assert_eq(unsetenv("SLUICE_CUDNN_DETERMINISTIC"), 0);

    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        count = 0;
    }
    if (count <= 0) {
        cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_ECUDA);
        cr_assert_not_null(strstr(sl_errmsg(), "no CUDA device"), "%s", sl_errmsg());
        cr_assert_not_null(strstr(sl_errmsg(), "sl_exec_init"), "%s", sl_errmsg());
        cr_assert_null(e.cuda);
        sl_exec_fini(&e);
        return; /* no GPU: the refusals above are what this host can check */
    }
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_OK, "%s", sl_errmsg());
    cr_assert_not_null(e.cuda);
    cr_assert_eq(e.ops, &sl_ops_cuda);
    cr_assert_str_eq(e.ops->name, "cuda");
    sl_cuda_ctx *c = sl_cuda_of(&e);
    cr_assert_eq(c->device, 0);
    cr_assert_eq(c->tf32, 1, "TF32 is the default");
    cr_assert_not_null(c->stream);
    cr_assert_not_null(c->cudnn);
    cr_assert_not_null(c->cublas);
    cr_assert_not_null(c->h_pinned);
    cr_assert_not_null(c->algos);
    cr_assert_eq(cudaStreamQuery(c->stream), cudaSuccess);
    sl_exec_fini(&e);
    cr_assert_null(e.cuda);
    sl_exec_fini(&e); /* twice is harmless */

    char dev[16];
    snprintf(dev, sizeof dev, "%d", count);
    cr_assert_eq(setenv("SLUICE_CUDA_DEVICE", dev, 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_ECUDA);
    char want[64];
    snprintf(want, sizeof want, "device %d: this host has %d", count, count);
    cr_assert_not_null(strstr(sl_errmsg(), want), "%s", sl_errmsg());
    cr_assert_eq(setenv("SLUICE_CUDA_DEVICE", "0", 1), 0);
    cr_assert_eq(setenv("SLUICE_CUDA_TF32", "0", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_cuda_of(&e)->tf32, 0);
    sl_exec_fini(&e);
#endif
}

#ifndef SLUICE_TRAIN_CUDA

/* A build without the backend: the GPU tests say why they do not run. */
#define GPU_TEST(name)                                                                      \
    Test(train_conv_cuda, name) { cr_skip_test("built without CUDA"); }
GPU_TEST(check_helpers_messages)
GPU_TEST(fp32_matches_ref)
GPU_TEST(tf32_matches_ref_loosely)
GPU_TEST(golden_values_by_hand)
GPU_TEST(algorithm_searched_once_per_shape)
GPU_TEST(backward_reproduces_bit_for_bit)
GPU_TEST(measured_ranking_matches_ref)
GPU_TEST(geometry_checked_against_cudnn)
GPU_TEST(workspace_and_tmp_grow)
GPU_TEST(bf16_matches_ref)
GPU_TEST(f16_matches_ref)
GPU_TEST(bf16_f16_golden_values)
GPU_TEST(bf16_measured_ranking_matches_ref)
GPU_TEST(cache_key_includes_type)
GPU_TEST(bwd_data_acc_adds_to_dx)
GPU_TEST(workspace_cap_from_env)
GPU_TEST(stem_padded_matches_unpadded)

#else /* SLUICE_TRAIN_CUDA */

/* ------------------------------------------------------------ host side */

static float *alloc_f(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert_not_null(p);
    return p;
}

static void fill(float *a, size_t n, uint64_t *st)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (float)((double)(tu_rand(st) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *abs_copy(const float *a, size_t n)
{
    float *b = alloc_f(n);
    for (size_t i = 0; i < n; i++)
        b[i] = fabsf(a[i]);
    return b;
}

static size_t nx_of(const sl_conv_shape *sh) { return (size_t)sh->n * sh->h * sh->w * sh->c; }
static size_t ny_of(const sl_conv_shape *sh) { return (size_t)sh->n * sh->p * sh->q * sh->k; }
static size_t nw_of(const sl_conv_shape *sh) { return (size_t)sh->k * sh->r * sh->s * sh->c; }

typedef struct tol {
    double rtol, mtol, atol;
} tol;

static const tol TOL_FP32 = {1e-4, 1e-5, 1e-6};
static const tol TOL_TF32 = {1e-2, 2e-3, 1e-5};
/* u = 2^-8 (bf16), 2^-11 (f16): the file comment derives these */
static const tol TOL_BF16 = {0.00390625 + 1e-4, 2 * 0.00390625 + 1e-5, 1e-5};
static const tol TOL_F16 = {0.00048828125 + 1e-4, 2 * 0.00048828125 + 1e-5, 1e-5};

/* The rule in the file comment; NaN fails. */
static void assert_conv_close(const char *what, const sl_conv_shape *sh, const float *got,
                              const float *want, const float *mag, size_t n, tol t)
{
    double mmax = 0;
    for (size_t i = 0; i < n; i++)
        mmax = fmax(mmax, mag[i]);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double bound = t.rtol * fabs(want[i]) + t.mtol * mag[i] + t.atol * mmax;
        if (!(d <= bound))
            cr_assert_fail("%s: n%d %dx%dx%d k%d %dx%d/%d pad %d: element %zu of %zu: got %.8g "
                           "want %.8g (|diff| %.3g > %.3g, terms' magnitude %.4g)",
                           what, sh->n, sh->h, sh->w, sh->c, sh->k, sh->r, sh->s, sh->stride,
                           sh->pad, i, n, got[i], want[i], d, bound, mag[i]);
    }
}

/* ------------------------------------------------------------ device side */

static void need_gpu(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        cr_skip_test("no GPU");
    }
}

/* A cuda sl_exec with SLUICE_CUDA_TF32 = tf32 and SLUICE_CUDNN_FIND = find
 * ("0"/"1"; NULL leaves the variable unset). Each Criterion test is its own
 * process, so the environment does not leak into other tests. */
static void cuda_init(sl_exec *e, const char *tf32, const char *find)
{
    if (tf32)
        cr_assert_eq(setenv("SLUICE_CUDA_TF32", tf32, 1), 0);
    else
        cr_assert_eq(unsetenv("SLUICE_CUDA_TF32"), 0);
    if (find)
        cr_assert_eq(setenv("SLUICE_CUDNN_FIND", find, 1), 0);
    else
        cr_assert_eq(unsetenv("SLUICE_CUDNN_FIND"), 0);
    cr_assert_eq(sl_exec_init(e, SL_BACKEND_CUDA, 1), SL_OK, "%s", sl_errmsg());
}

static float *dev_alloc(size_t n)
{
    void *p = NULL;
    cr_assert_eq(cudaMalloc(&p, (n ? n : 1) * sizeof(float)), cudaSuccess);
    return p;
}

static float *to_dev(const float *h, size_t n)
{
    float *d = dev_alloc(n);
    cr_assert_eq(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice), cudaSuccess);
    /* From pageable memory the copy may still be in flight on return, and
     * the context's stream does not wait for the default stream. */
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    return d;
}

/* All bits set: a NaN in every element, so an output the op skips or
 * accumulates into shows. */
static void dev_nan(float *d, size_t n)
{
    cr_assert_eq(cudaMemset(d, 0xff, n * sizeof *d), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess); /* as in to_dev */
}

/* Wait for the context's stream (non-blocking: cudaMemcpy on the default
 * stream does not), then copy back. */
static void from_dev(sl_exec *e, float *h, const float *d, size_t n)
{
    cr_assert_eq(cudaStreamSynchronize(sl_cuda_of(e)->stream), cudaSuccess);
    cr_assert_eq(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* One shape, all three passes, GPU against ref, with the exec's activation
 * type (inputs rounded to it first). fp32 without TF32 also requires every
 * chosen algorithm to run plain FMA math. */
static void check_vs_ref(sl_exec *e, const geom *g, uint64_t seed, tol t)
{
    sl_conv_shape sh = make(g);
    sl_dtype at = e->act;
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *x = alloc_f(nx), *w = alloc_f(nw), *dy = alloc_f(ny);
    uint64_t st = seed;
    fill(x, nx, &st);
    fill(w, nw, &st);
    fill(dy, ny, &st);
    tg_round_all(x, (int64_t)nx, at), tg_round_all(w, (int64_t)nw, at);
    tg_round_all(dy, (int64_t)ny, at);
    float *ax = abs_copy(x, nx), *aw = abs_copy(w, nw), *ady = abs_copy(dy, ny);
    float *y0 = alloc_f(ny), *dx0 = alloc_f(nx), *dw0 = alloc_f(nw);
    float *my = alloc_f(ny), *mdx = alloc_f(nx), *mdw = alloc_f(nw);
    float *y1 = alloc_f(ny), *dx1 = alloc_f(nx), *dw1 = alloc_f(nw);
    sl_exec ref;
    cr_assert_eq(sl_exec_init(&ref, SL_BACKEND_REF, 1), SL_OK);
    cr_assert_eq(ref.ops->conv_fwd(&ref, &sh, x, w, y0), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_data(&ref, &sh, dy, w, dx0), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_filter(&ref, &sh, x, dy, dw0), SL_OK);
    cr_assert_eq(ref.ops->conv_fwd(&ref, &sh, ax, aw, my), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_data(&ref, &sh, ady, aw, mdx), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_filter(&ref, &sh, ax, ady, mdw), SL_OK);
    sl_exec_fini(&ref);

    /* x, w, dy, y, dx in the activation type (poisoned outputs); dw f32 */
    void *d_x = tg_upa(x, (int64_t)nx, at), *d_w = tg_upa(w, (int64_t)nw, at),
         *d_dy = tg_upa(dy, (int64_t)ny, at), *d_y = tg_newa((int64_t)ny, at),
         *d_dx = tg_newa((int64_t)nx, at);
    float *d_dw = tg_newf((int64_t)nw);
    tg_ready();
    cr_assert_eq(e->ops->conv_fwd(e, &sh, d_x, d_w, d_y), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->ops->conv_bwd_data(e, &sh, d_dy, d_w, d_dx), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->ops->conv_bwd_filter(e, &sh, d_x, d_dy, d_dw), SL_OK, "%s", sl_errmsg());
    tg_downa(y1, d_y, (int64_t)ny, at);
    tg_downa(dx1, d_dx, (int64_t)nx, at);
    tg_downf(dw1, d_dw, (int64_t)nw);
    assert_conv_close("fwd", &sh, y1, y0, my, ny, t);
    assert_conv_close("bwd_data", &sh, dx1, dx0, mdx, nx, t);
    assert_conv_close("bwd_filter", &sh, dw1, dw0, mdw, nw, t);

    sl_cuda_ctx *c = sl_cuda_of(e);
    for (int d = 0; d < 3; d++) {
        sl_conv_algo_info in;
        cr_assert_eq(sl_conv_algo_lookup(c, &sh, at, (sl_conv_dir)d, &in), SL_OK, "%s",
                     sl_errmsg());
        if (at != SL_DTYPE_F32)
            continue; /* as cuDNN ranked it (conv_cuda.cu's "Math") */
        if (!c->tf32)
            cr_assert_eq(in.math, CUDNN_FMA_MATH, "direction %d runs math type %d", d,
                         (int)in.math);
        cr_assert_neq(in.math, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
    }
    tg_free(d_x), tg_free(d_w), tg_free(d_dy), tg_free(d_y), tg_free(d_dx), tg_free(d_dw);
    free(x), free(w), free(dy), free(ax), free(aw), free(ady);
    free(y0), free(dx0), free(dw0), free(my), free(mdx), free(mdw);
    free(y1), free(dx1), free(dw1);
}

/* ------------------------------------------------------------ helpers */

/* The check helpers' messages name the call, the short file, the line and
 * the library's error name; no device needed. */
Test(train_conv_cuda, check_helpers_messages)
{
    cr_assert_eq(sl_cudnn_check(CUDNN_STATUS_SUCCESS, "x()", "/a/train/f.cu", 1), SL_OK);
    cr_assert_eq(sl_cudnn_check(CUDNN_STATUS_BAD_PARAM, "cudnnFoo(h, d)", "/src/x/train/f.cu",
                                42),
                 SL_ECUDA);
    const char *m = sl_errmsg();
    cr_assert_not_null(strstr(m, "cudnnFoo(h, d): train/f.cu:42: CUDNN_STATUS_BAD_PARAM"), "%s",
                       m);
    cr_assert_eq(sl_cublas_check(CUBLAS_STATUS_SUCCESS, "x()", "f.cu", 1), SL_OK);
    cr_assert_eq(sl_cublas_check(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm(h)",
                                 "/src/x/train/g.cu", 7),
                 SL_ECUDA);
    m = sl_errmsg();
    cr_assert_not_null(strstr(m, "cublasSgemm(h): train/g.cu:7: CUBLAS_STATUS_INVALID_VALUE"),
                       "%s", m);
    cr_assert_eq(SL_CUDNN(CUDNN_STATUS_NOT_SUPPORTED), SL_ECUDA);
    cr_assert_not_null(strstr(sl_errmsg(), "test_conv_cuda.c"), "%s", sl_errmsg());
    cr_assert_not_null(strstr(sl_errmsg(), "CUDNN_STATUS_NOT_SUPPORTED"), "%s", sl_errmsg());
}

Test(train_conv_cuda, workspace_and_tmp_grow)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    sl_cuda_ctx *c = sl_cuda_of(&e);
    void *a = sl_cuda_workspace(c, 0);
    cr_assert_not_null(a, "%s", sl_errmsg());
    cr_assert_geq(c->ws_cap, (size_t)1);
    cr_assert_eq(sl_cuda_workspace(c, c->ws_cap), a, "a request within the capacity reuses");
    void *b = sl_cuda_workspace(c, c->ws_cap + 12345);
    cr_assert_not_null(b, "%s", sl_errmsg());
    cr_assert_geq(c->ws_cap, (size_t)(1 << 20) + 12345);
    cr_assert_eq(sl_cuda_workspace(c, 1), b, "never shrinks");
    cr_assert_eq(cudaMemsetAsync(b, 0, c->ws_cap, c->stream), cudaSuccess, "all of it is ours");
    void *t = sl_cuda_tmp(c, 100);
    cr_assert_not_null(t, "%s", sl_errmsg());
    cr_assert_neq(t, b);
    cr_assert_geq(c->tmp_cap, (size_t)100);
    /* An impossible size fails with a message and leaves the context usable. */
    cr_assert_null(sl_cuda_tmp(c, (size_t)1 << 62));
    cr_assert_not_null(strstr(sl_errmsg(), "sl_cuda_tmp"), "%s", sl_errmsg());
    cr_assert_not_null(sl_cuda_tmp(c, 100), "%s", sl_errmsg());
    cr_assert_eq(SL_LAUNCHED("none"), SL_OK, "no launch error pending");
    cr_assert_eq(cudaStreamSynchronize(c->stream), cudaSuccess);
    sl_exec_fini(&e);
}

/* ------------------------------------------------------------ against ref */

Test(train_conv_cuda, fp32_matches_ref)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    cr_assert_eq(sl_cuda_of(&e)->tf32, 0);
    for (size_t i = 0; i < NSHAPES; i++)
        check_vs_ref(&e, &shapes[i], 1000 + i, TOL_FP32);
    sl_exec_fini(&e);
}

Test(train_conv_cuda, tf32_matches_ref_loosely)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "1", NULL);
    cr_assert_eq(sl_cuda_of(&e)->tf32, 1);
    for (size_t i = 0; i < NSHAPES; i++)
        check_vs_ref(&e, &shapes[i], 2000 + i, TOL_TF32);
    sl_exec_fini(&e);
}

/* The measured ranking runs every candidate on the caller's buffers; the
 * result must still be the convolution (and NaN-free: beta = 0). */
Test(train_conv_cuda, measured_ranking_matches_ref)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", "1");
    const size_t pick[] = {2, 3, 5, 6, 8, 15, 16};
    for (size_t i = 0; i < sizeof pick / sizeof *pick; i++)
        check_vs_ref(&e, &shapes[pick[i]], 3000 + i, TOL_FP32);
    int nshapes;
    long searches;
    sl_conv_algo_stats(sl_cuda_of(&e), &nshapes, &searches);
    cr_assert_eq(nshapes, (int)(sizeof pick / sizeof *pick));
    cr_assert_eq(searches, 3L * nshapes);
    sl_exec_fini(&e);
}

/* ------------------------------------------------------------ golden */

/* got (copied back from d) equals want up to float rounding. */
static void expect(sl_exec *e, const char *what, const float *d, const float *want, size_t n)
{
    float got[64];
    cr_assert_leq(n, 64);
    from_dev(e, got, d, n);
    for (size_t i = 0; i < n; i++)
        cr_assert(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])),
                  "%s element %zu: got %g want %g", what, i, got[i], want[i]);
}

/* Forward (and, with dy, both backward passes) of one small case; outputs
 * start as NaN. */
static void run_golden(sl_exec *e, const int g[9], const float *x, const float *wt,
                       const float *dy, const float *want_y, const float *want_dx,
                       const float *want_dw)
{
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8]),
                 SL_OK);
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *d_x = to_dev(x, nx), *d_w = to_dev(wt, nw), *d_out = dev_alloc(nx + ny + nw);
    float *d_dy = dy ? to_dev(dy, ny) : NULL;
    dev_nan(d_out, nx + ny + nw);
    cr_assert_eq(e->ops->conv_fwd(e, &sh, d_x, d_w, d_out), SL_OK, "%s", sl_errmsg());
    expect(e, "fwd", d_out, want_y, ny);
    if (dy) {
        dev_nan(d_out, nx + ny + nw);
        cr_assert_eq(e->ops->conv_bwd_data(e, &sh, d_dy, d_w, d_out), SL_OK, "%s", sl_errmsg());
        expect(e, "bwd_data", d_out, want_dx, nx);
        dev_nan(d_out, nx + ny + nw);
        cr_assert_eq(e->ops->conv_bwd_filter(e, &sh, d_x, d_dy, d_out), SL_OK, "%s",
                     sl_errmsg());
        expect(e, "bwd_filter", d_out, want_dw, nw);
        cudaFree(d_dy);
    }
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_out);
}

/* The cases of test_conv.c's golden test, on the GPU (fp32 math). */
Test(train_conv_cuda, golden_values_by_hand)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    /* 2x2 kernel [[1,2],[3,4]], valid: [[37,47],[67,77]]. */
    const float w2[4] = {1, 2, 3, 4}, y2[4] = {37, 47, 67, 77};
    run_golden(&e, (const int[9]){1, 3, 3, 1, 1, 2, 2, 1, 0}, x, w2, NULL, y2, NULL, NULL);
    /* 3x3 ones, stride 2, pad 1: windows are the four 2x2 corners; with
     * dy = ones, dx counts the windows covering each pixel and dw[i][j]
     * sums x over ih in {i-1, i+1}, iw in {j-1, j+1}. */
    const float ones9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, ones4[4] = {1, 1, 1, 1};
    const float y3[4] = {12, 16, 24, 28};
    const float dx3[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
    const float dw3[9] = {5, 10, 5, 10, 20, 10, 5, 10, 5};
    run_golden(&e, (const int[9]){1, 3, 3, 1, 1, 3, 3, 2, 1}, x, ones9, ones4, y3, dx3, dw3);
    /* OHWI order: x (1,1,2,2) = pixels [1,10], [2,20]; filter 0 is
     * w[s=0] = [1, 0.1], w[s=1] = [100, 0.01] -> 202.2 (reading it as (c, s)
     * would give 1001.4); filter 1 = [0,1],[0,-1] -> 10 - 20. dy = [1, 2]:
     * dx[s][c] = w0[s][c] + 2*w1[s][c]; dw[o][s][c] = dy[o]*x[s][c]. */
    const float xo[4] = {1, 10, 2, 20};
    const float wo[8] = {1, 0.1f, 100, 0.01f, 0, 1, 0, -1};
    const float dyo[2] = {1, 2}, yo[2] = {202.2f, -10};
    const float dxo[4] = {1, 2.1f, 100, -1.99f};
    const float dwo[8] = {1, 10, 2, 20, 2, 20, 4, 40};
    run_golden(&e, (const int[9]){1, 1, 2, 2, 2, 1, 2, 1, 0}, xo, wo, dyo, yo, dxo, dwo);
    sl_exec_fini(&e);
}

/* ------------------------------------------------------------ the cache */

Test(train_conv_cuda, algorithm_searched_once_per_shape)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    sl_cuda_ctx *c = sl_cuda_of(&e);
    int nshapes;
    long searches;
    sl_conv_algo_stats(c, &nshapes, &searches);
    cr_assert_eq(nshapes + searches, 0);

    /* Forty batch sizes of one geometry: forty entries (the table grows
     * past its first 16 slots), one forward search each. */
    enum { NB = 40 };
    sl_conv_shape sh[NB];
    for (int i = 0; i < NB; i++)
        cr_assert_eq(sl_conv_shape_init(&sh[i], i + 1, 5, 7, 3, 5, 3, 3, 1, 1), SL_OK);
    size_t nx = nx_of(&sh[NB - 1]), ny = ny_of(&sh[NB - 1]), nw = nw_of(&sh[NB - 1]);
    float *hx = alloc_f(nx), *hw = alloc_f(nw), *y1 = alloc_f(ny), *y2 = alloc_f(ny);
    uint64_t st = 77;
    fill(hx, nx, &st);
    fill(hw, nw, &st);
    float *d_x = to_dev(hx, nx), *d_w = to_dev(hw, nw), *d_y = dev_alloc(ny);
    float *d_dx = dev_alloc(nx), *d_dw = dev_alloc(nw);

    sl_conv_algo_info in;
    cr_assert_eq(sl_conv_algo_lookup(c, &sh[0], SL_DTYPE_F32, SL_CONV_FWD, &in), SL_ENOENT);
    cr_assert_not_null(strstr(sl_errmsg(), "not run yet"), "%s", sl_errmsg());
    for (int i = 0; i < NB; i++) {
        cr_assert_eq(e.ops->conv_fwd(&e, &sh[i], d_x, d_w, d_y), SL_OK, "%s", sl_errmsg());
        sl_conv_algo_stats(c, &nshapes, &searches);
        cr_assert_eq(nshapes, i + 1, "batch %d is a new entry", i + 1);
        cr_assert_eq(searches, (long)i + 1);
    }
    /* Again: found, not searched; the same numbers come out. */
    from_dev(&e, y1, d_y, ny);
    for (int i = 0; i < NB; i++) {
        cr_assert_eq(e.ops->conv_fwd(&e, &sh[i], d_x, d_w, d_y), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_conv_algo_lookup(c, &sh[i], SL_DTYPE_F32, SL_CONV_FWD, &in), SL_OK, "%s",
                     sl_errmsg());
        cr_assert_eq(sl_conv_algo_lookup(c, &sh[i], SL_DTYPE_F32, SL_CONV_BWD_DATA, &in),
                     SL_ENOENT);
    }
    from_dev(&e, y2, d_y, ny);
    cr_assert_eq(memcmp(y1, y2, ny * sizeof *y1), 0, "a cached algorithm gives other numbers");
    sl_conv_algo_stats(c, &nshapes, &searches);
    cr_assert_eq(nshapes, NB);
    cr_assert_eq(searches, (long)NB);

    /* The other directions of one shape: one search each, same entry. */
    cr_assert_eq(e.ops->conv_bwd_data(&e, &sh[3], d_y, d_w, d_dx), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e.ops->conv_bwd_data(&e, &sh[3], d_y, d_w, d_dx), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e.ops->conv_bwd_filter(&e, &sh[3], d_x, d_y, d_dw), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e.ops->conv_bwd_filter(&e, &sh[3], d_x, d_y, d_dw), SL_OK, "%s", sl_errmsg());
    sl_conv_algo_stats(c, &nshapes, &searches);
    cr_assert_eq(nshapes, NB);
    cr_assert_eq(searches, (long)NB + 2);
    cr_assert_eq(sl_conv_algo_lookup(c, &sh[3], SL_DTYPE_F32, SL_CONV_BWD_DATA, &in), SL_OK);
    cr_assert_eq(sl_conv_algo_lookup(c, &sh[3], SL_DTYPE_F32, SL_CONV_BWD_FILTER, &in), SL_OK);
    cr_assert_eq(in.math, CUDNN_FMA_MATH);
    cr_assert_leq(in.ws_bytes, c->ws_cap, "the workspace was grown for it");

    /* Another geometry with the same element counts is another entry. */
    sl_conv_shape other;
    cr_assert_eq(sl_conv_shape_init(&other, 1, 7, 5, 3, 5, 3, 3, 1, 1), SL_OK);
    cr_assert_eq(e.ops->conv_fwd(&e, &other, d_x, d_w, d_y), SL_OK, "%s", sl_errmsg());
    sl_conv_algo_stats(c, &nshapes, &searches);
    cr_assert_eq(nshapes, NB + 1);
    cr_assert_eq(searches, (long)NB + 3);

    cr_assert_eq(cudaStreamSynchronize(c->stream), cudaSuccess);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_y), cudaFree(d_dx), cudaFree(d_dw);
    free(hx), free(hw), free(y1), free(y2);
    sl_exec_fini(&e);
}

/* Backward passes of a realistic layer (32 x 28x28, 64 -> 64, 3x3): the
 * chosen algorithms are deterministic and two runs agree bit for bit (an
 * atomics-based one would differ here). TF32 on, the training default. */
Test(train_conv_cuda, backward_reproduces_bit_for_bit)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, NULL, NULL);
    sl_cuda_ctx *c = sl_cuda_of(&e);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 32, 28, 28, 64, 64, 3, 3, 1, 1), SL_OK);
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *hx = alloc_f(nx), *hw = alloc_f(nw), *hdy = alloc_f(ny);
    float *a = alloc_f(nx > nw ? nx : nw), *b = alloc_f(nx > nw ? nx : nw);
    uint64_t st = 99;
    fill(hx, nx, &st);
    fill(hw, nw, &st);
    fill(hdy, ny, &st);
    float *d_x = to_dev(hx, nx), *d_w = to_dev(hw, nw), *d_dy = to_dev(hdy, ny);
    float *d_dx = dev_alloc(nx), *d_dw = dev_alloc(nw);

    cr_assert_eq(e.ops->conv_bwd_filter(&e, &sh, d_x, d_dy, d_dw), SL_OK, "%s", sl_errmsg());
    from_dev(&e, a, d_dw, nw);
    dev_nan(d_dw, nw);
    cr_assert_eq(e.ops->conv_bwd_filter(&e, &sh, d_x, d_dy, d_dw), SL_OK, "%s", sl_errmsg());
    from_dev(&e, b, d_dw, nw);
    cr_assert_eq(memcmp(a, b, nw * sizeof *a), 0, "bwd_filter differs between two runs");

    cr_assert_eq(e.ops->conv_bwd_data(&e, &sh, d_dy, d_w, d_dx), SL_OK, "%s", sl_errmsg());
    from_dev(&e, a, d_dx, nx);
    dev_nan(d_dx, nx);
    cr_assert_eq(e.ops->conv_bwd_data(&e, &sh, d_dy, d_w, d_dx), SL_OK, "%s", sl_errmsg());
    from_dev(&e, b, d_dx, nx);
    cr_assert_eq(memcmp(a, b, nx * sizeof *a), 0, "bwd_data differs between two runs");

    sl_conv_algo_info in;
    cr_assert_eq(sl_conv_algo_lookup(c, &sh, SL_DTYPE_F32, SL_CONV_BWD_FILTER, &in), SL_OK);
    cr_assert(in.deterministic, "bwd_filter algorithm %d is not deterministic", in.algo);
    cr_assert_eq(sl_conv_algo_lookup(c, &sh, SL_DTYPE_F32, SL_CONV_BWD_DATA, &in), SL_OK);
    cr_assert(in.deterministic, "bwd_data algorithm %d is not deterministic", in.algo);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_dy), cudaFree(d_dx), cudaFree(d_dw);
    free(hx), free(hw), free(hdy), free(a), free(b);
    sl_exec_fini(&e);
}

/* A shape whose p, q were not computed by sl_conv_shape_init: cuDNN's
 * output size disagrees, the op says so, and nothing is cached. */
Test(train_conv_cuda, geometry_checked_against_cudnn)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 6, 6, 3, 4, 3, 3, 1, 1), SL_OK);
    sl_conv_shape bad = sh;
    bad.p += 1;
    float *d = dev_alloc(1024);
    cr_assert_eq(e.ops->conv_fwd(&e, &bad, d, d + 256, d + 512), SL_EINVAL);
    cr_assert_not_null(strstr(sl_errmsg(), "sl_conv_fwd_cuda: n1 6x6x3 -> k4 3x3/1 pad 1"), "%s",
                       sl_errmsg());
    cr_assert_not_null(strstr(sl_errmsg(), "cuDNN's output is n1 k4 6x6, the shape says n1 k4 "
                                           "7x6"),
                       "%s", sl_errmsg());
    int nshapes;
    long searches;
    sl_conv_algo_stats(sl_cuda_of(&e), &nshapes, &searches);
    cr_assert_eq(nshapes + searches, 0);
    /* the good shape still runs */
    cr_assert_eq(e.ops->conv_fwd(&e, &sh, d, d + 256, d + 512), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(cudaStreamSynchronize(sl_cuda_of(&e)->stream), cudaSuccess);
    cudaFree(d);
    sl_exec_fini(&e);
}

/* ------------------------------------------------------------ bf16 / f16 */

Test(train_conv_cuda, bf16_matches_ref)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    tg_set_act(&e, SL_DTYPE_BF16);
    for (size_t i = 0; i < NSHAPES; i++)
        check_vs_ref(&e, &shapes[i], 4000 + i, TOL_BF16);
    sl_exec_fini(&e);
}

Test(train_conv_cuda, f16_matches_ref)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    tg_set_act(&e, SL_DTYPE_F16);
    for (size_t i = 0; i < NSHAPES; i++)
        check_vs_ref(&e, &shapes[i], 5000 + i, TOL_F16);
    sl_exec_fini(&e);
}

/* The measured ranking in bf16: backward-filter's candidates run on the
 * bf16 scratch, and the f32 dw still comes out right. */
Test(train_conv_cuda, bf16_measured_ranking_matches_ref)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, NULL, "1");
    tg_set_act(&e, SL_DTYPE_BF16);
    const size_t pick[] = {2, 5, 6, 15};
    for (size_t i = 0; i < sizeof pick / sizeof *pick; i++)
        check_vs_ref(&e, &shapes[pick[i]], 6000 + i, TOL_BF16);
    sl_exec_fini(&e);
}

/* Golden cases whose every value (inputs, products, sums) is a small
 * integer, exact in bf16 and f16: the results must be exact too, dw an
 * f32 array. */
static void golden_typed(sl_exec *e, const int g[9], const float *x, const float *wt,
                         const float *dy, const float *want_y, const float *want_dx,
                         const float *want_dw)
{
    sl_dtype t = e->act;
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8]),
                 SL_OK);
    int64_t nx = (int64_t)nx_of(&sh), ny = (int64_t)ny_of(&sh), nw = (int64_t)nw_of(&sh);
    void *d_x = tg_upa(x, nx, t), *d_w = tg_upa(wt, nw, t), *d_y = tg_newa(ny, t);
    void *d_dy = dy ? tg_upa(dy, ny, t) : NULL, *d_dx = tg_newa(nx, t);
    float *d_dw = tg_newf(nw), got[64];
    tg_ready();
    cr_assert_eq(e->ops->conv_fwd(e, &sh, d_x, d_w, d_y), SL_OK, "%s", sl_errmsg());
    tg_downa(got, d_y, ny, t);
    for (int64_t i = 0; i < ny; i++)
        cr_assert(got[i] == want_y[i], "%s fwd [%lld]: got %g want %g", tg_type_name(t),
                  (long long)i, (double)got[i], (double)want_y[i]);
    if (dy) {
        cr_assert_eq(e->ops->conv_bwd_data(e, &sh, d_dy, d_w, d_dx), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(e->ops->conv_bwd_filter(e, &sh, d_x, d_dy, d_dw), SL_OK, "%s",
                     sl_errmsg());
        tg_downa(got, d_dx, nx, t);
        for (int64_t i = 0; i < nx; i++)
            cr_assert(got[i] == want_dx[i], "%s bwd_data [%lld]: got %g want %g",
                      tg_type_name(t), (long long)i, (double)got[i], (double)want_dx[i]);
        tg_downf(got, d_dw, nw);
        for (int64_t i = 0; i < nw; i++)
            cr_assert(got[i] == want_dw[i], "%s bwd_filter (f32 dw) [%lld]: got %g want %g",
                      tg_type_name(t), (long long)i, (double)got[i], (double)want_dw[i]);
    }
    tg_free(d_x), tg_free(d_w), tg_free(d_y), tg_free(d_dy), tg_free(d_dx), tg_free(d_dw);
}

Test(train_conv_cuda, bf16_f16_golden_values)
{
    need_gpu();
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const float w2[4] = {1, 2, 3, 4}, y2[4] = {37, 47, 67, 77};
    const float ones9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, ones4[4] = {1, 1, 1, 1};
    const float y3[4] = {12, 16, 24, 28};
    const float dx3[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
    const float dw3[9] = {5, 10, 5, 10, 20, 10, 5, 10, 5};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cuda_init(&e, "0", NULL);
        tg_set_act(&e, k ? SL_DTYPE_F16 : SL_DTYPE_BF16);
        golden_typed(&e, (const int[9]){1, 3, 3, 1, 1, 2, 2, 1, 0}, x, w2, NULL, y2, NULL, NULL);
        golden_typed(&e, (const int[9]){1, 3, 3, 1, 1, 3, 3, 2, 1}, x, ones9, ones4, y3, dx3,
                     dw3);
        sl_exec_fini(&e);
    }
}

/* One shape in f32, bf16 and f16: three entries, one search per entry and
 * direction, each found by its own type only. */
Test(train_conv_cuda, cache_key_includes_type)
{
    need_gpu();
    sl_exec e;
    cuda_init(&e, "0", NULL);
    sl_cuda_ctx *c = sl_cuda_of(&e);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 9, 7, 16, 8, 3, 3, 1, 1), SL_OK);
    const sl_dtype ts[3] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};
    /* x (2016 elements) at 0, y at 2048 (1008), w at 4096 (1152), dw at 6144 */
    float *d = tg_newf(8192);
    tg_ready();
    sl_conv_algo_info in;
    for (int k = 0; k < 3; k++) {
        tg_set_act(&e, ts[k]);
        cr_assert_eq(sl_conv_algo_lookup(c, &sh, ts[k], SL_CONV_FWD, &in), SL_ENOENT);
        if (k)
            cr_assert(strstr(sl_errmsg(), tg_type_name(ts[k])), "%s", sl_errmsg());
        cr_assert_eq(e.ops->conv_fwd(&e, &sh, d, d + 4096, d + 2048), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(e.ops->conv_bwd_filter(&e, &sh, d, d + 2048, d + 6144), SL_OK, "%s",
                     sl_errmsg());
        int nshapes;
        long searches;
        sl_conv_algo_stats(c, &nshapes, &searches);
        cr_assert_eq(nshapes, k + 1, "type %s is a new entry", tg_type_name(ts[k]));
        cr_assert_eq(searches, 2L * (k + 1));
        for (int j = 0; j < 3; j++)
            cr_assert_eq(sl_conv_algo_lookup(c, &sh, ts[j], SL_CONV_FWD, &in),
                         j <= k ? SL_OK : SL_ENOENT, "lookup %s after %s",
                         tg_type_name(ts[j]), tg_type_name(ts[k]));
        cr_assert_eq(sl_conv_algo_lookup(c, &sh, ts[k], SL_CONV_BWD_DATA, &in), SL_ENOENT);
    }
    /* again in bf16: found, not searched */
    tg_set_act(&e, SL_DTYPE_BF16);
    cr_assert_eq(e.ops->conv_fwd(&e, &sh, d, d + 4096, d + 2048), SL_OK, "%s", sl_errmsg());
    int nshapes;
    long searches;
    sl_conv_algo_stats(c, &nshapes, &searches);
    cr_assert(nshapes == 3 && searches == 6, "%d entries, %ld searches", nshapes, searches);
    cr_assert_eq(cudaStreamSynchronize(c->stream), cudaSuccess);
    tg_free(d);
    sl_exec_fini(&e);
}

/* conv_bwd_data_acc: dx += conv_transpose(dy, w) (the model's residual-
 * gradient add folded into cuDNN, beta = 1): against conv_bwd_data plus
 * dx in f32 and bf16; with SLUICE_CUDNN_FIND=1 a measured search writes
 * into tmp, never over dx (with tmp NULL: the heuristic ranking), and the
 * slot is the fused table's only. */
Test(train_conv_cuda, bwd_data_acc_adds_to_dx)
{
    need_gpu();
    static const char *finds[2] = {"0", "1"};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 2; k++) {
            sl_dtype t = k ? SL_DTYPE_BF16 : SL_DTYPE_F32;
            for (int with_tmp = 0; with_tmp < 2; with_tmp++) {
                sl_exec e;
                cuda_init(&e, "0", finds[f]);
                tg_set_act(&e, t);
                cr_assert_not_null(e.ops->conv_bwd_data_acc);
                sl_conv_shape sh;
                cr_assert_eq(sl_conv_shape_init(&sh, 3, 9, 7, 16, 24, 3, 3, 2, 1), SL_OK);
                size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
                float *w = alloc_f(nw), *dy = alloc_f(ny), *dx0 = alloc_f(nx);
                float *got = alloc_f(nx), *want = alloc_f(nx), *conv = alloc_f(nx);
                uint64_t st = 41 + k;
                fill(w, nw, &st), fill(dy, ny, &st), fill(dx0, nx, &st);
                tg_round_all(w, nw, t), tg_round_all(dy, ny, t), tg_round_all(dx0, nx, t);
                void *dw = tg_upa(w, nw, t), *ddy = tg_upa(dy, ny, t), *ddx = tg_upa(dx0, nx, t);
                void *dc = tg_newa(nx, t), *dtmp = with_tmp ? tg_newa(nx, t) : NULL;
                tg_ready();
                cr_assert_eq(e.ops->conv_bwd_data_acc(&e, &sh, ddy, dw, ddx, dtmp), SL_OK, "%s",
                             sl_errmsg());
                cr_assert_eq(e.ops->conv_bwd_data(&e, &sh, ddy, dw, dc), SL_OK, "%s",
                             sl_errmsg());
                tg_downa(got, ddx, nx, t), tg_downa(conv, dc, nx, t);
                /* the sum in f32 of cuDNN's f32 result and dx, rounded once: within
                 * an ulp of t of the rounded conv plus dx */
                double ulp = t == SL_DTYPE_F32 ? 1e-6 : 0.0078125;
                for (size_t i = 0; i < nx; i++) {
                    want[i] = conv[i] + dx0[i];
                    double tol = 1e-5 + ulp * (fabs(conv[i]) + fabs(want[i]));
                    cr_assert(fabs((double)got[i] - want[i]) <= tol,
                              "%s find %s tmp %d: dx[%zu] %.7g, want %.7g + %.7g", tg_type_name(t),
                              finds[f], with_tmp, i, got[i], conv[i], dx0[i]);
                }
                tg_free(dw), tg_free(ddy), tg_free(ddx), tg_free(dc), tg_free(dtmp);
                free(w), free(dy), free(dx0), free(got), free(want), free(conv);
                sl_exec_fini(&e);
            }
        }
    cr_assert_eq(setenv("SLUICE_CUDA_FUSE", "0", 1), 0);
    sl_exec e;
    cuda_init(&e, "0", NULL);
    cr_assert_null(e.ops->conv_bwd_data_acc, "the unfused table adds with ops->add");
    sl_exec_fini(&e);
    unsetenv("SLUICE_CUDA_FUSE");
}

/* SLUICE_CUDNN_WS_MB caps an algorithm's workspace (default 256 MiB): 0
 * leaves only the algorithms that need none; a bad value is refused. */
Test(train_conv_cuda, workspace_cap_from_env)
{
    need_gpu();
    sl_exec e;
    unsetenv("SLUICE_CUDNN_WS_MB");
    cuda_init(&e, "0", NULL);
    cr_assert_eq(sl_cuda_of(&e)->ws_max, (size_t)256 << 20);
    sl_exec_fini(&e);
    cr_assert_eq(setenv("SLUICE_CUDNN_WS_MB", "0", 1), 0);
    cuda_init(&e, "0", NULL);
    sl_cuda_ctx *c = sl_cuda_of(&e);
    cr_assert_eq(c->ws_max, (size_t)0);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 8, 8, 8, 8, 3, 3, 1, 1), SL_OK);
    float *d = dev_alloc(4096);
    for (int dir = 0; dir < 3; dir++) {
        int rc = dir == 0   ? e.ops->conv_fwd(&e, &sh, d, d + 2048, d + 1024)
                 : dir == 1 ? e.ops->conv_bwd_data(&e, &sh, d + 1024, d + 2048, d)
                            : e.ops->conv_bwd_filter(&e, &sh, d, d + 1024, d + 2048);
        cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
        sl_conv_algo_info in;
        cr_assert_eq(sl_conv_algo_lookup(c, &sh, SL_DTYPE_F32, (sl_conv_dir)dir, &in), SL_OK);
        cr_assert_eq(in.ws_bytes, (size_t)0, "direction %d took %zu bytes", dir, in.ws_bytes);
    }
    cr_assert_eq(cudaStreamSynchronize(c->stream), cudaSuccess);
    cudaFree(d);
    sl_exec_fini(&e);
    cr_assert_eq(setenv("SLUICE_CUDNN_WS_MB", "lots", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "SLUICE_CUDNN_WS_MB=lots"), "%s", sl_errmsg());
    unsetenv("SLUICE_CUDNN_WS_MB");
}

/* SLUICE_CUDA_STEM_PAD=4 / 8: a bf16 / f16 convolution of 3 input channels
 * runs on zero-padded copies of 4 / 8 (the cache holds that shape) and
 * gives what the plain one gives: forward, both backwards and the
 * accumulating backward-data, to the rounding of the output type (the
 * zeros add nothing; the sum runs in another order; the padded dgrad is
 * rounded before it is added). f32 and c >= P are
 * left alone; a bad value is refused. */
Test(train_conv_cuda, stem_padded_matches_unpadded)
{
    need_gpu();
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 20, 18, 3, 16, 7, 7, 2, 3), SL_OK);
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *x = alloc_f(nx), *w = alloc_f(nw), *dy = alloc_f(ny), *dx0 = alloc_f(nx);
    uint64_t st = 77;
    fill(x, nx, &st), fill(w, nw, &st), fill(dy, ny, &st), fill(dx0, nx, &st);
    static const sl_dtype ts[2] = {SL_DTYPE_BF16, SL_DTYPE_F16};
    static const char *pads[3] = {"0", "4", "8"};
    float *out[3][4];
    size_t cnt[4] = {ny, nw, nx, nx};
    for (int k = 0; k < 2; k++) {
        sl_dtype t = ts[k];
        float *xr = fdup(x, nx), *wr = fdup(w, nw), *dyr = fdup(dy, ny), *dxr = fdup(dx0, nx);
        tg_round_all(xr, nx, t), tg_round_all(wr, nw, t), tg_round_all(dyr, ny, t);
        tg_round_all(dxr, nx, t);
        for (int p = 0; p < 3; p++) {
            cr_assert_eq(setenv("SLUICE_CUDA_STEM_PAD", pads[p], 1), 0);
            sl_exec e;
            cuda_init(&e, "0", NULL);
            tg_set_act(&e, t);
            cr_assert_eq(sl_cuda_of(&e)->stem_pad, atoi(pads[p]));
            void *dx_ = tg_upa(xr, nx, t), *dw_ = tg_upa(wr, nw, t), *ddy = tg_upa(dyr, ny, t);
            void *dy_ = tg_newa(ny, t), *ddx = tg_newa(nx, t), *dacc = tg_upa(dxr, nx, t);
            float *dgw = tg_newf(nw);
            tg_ready();
            cr_assert_eq(e.ops->conv_fwd(&e, &sh, dx_, dw_, dy_), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(e.ops->conv_bwd_filter(&e, &sh, dx_, ddy, dgw), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(e.ops->conv_bwd_data(&e, &sh, ddy, dw_, ddx), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(e.ops->conv_bwd_data_acc(&e, &sh, ddy, dw_, dacc, NULL), SL_OK, "%s",
                         sl_errmsg());
            for (int j = 0; j < 4; j++)
                out[p][j] = alloc_f(cnt[j]);
            tg_downa(out[p][0], dy_, ny, t), tg_downf(out[p][1], dgw, nw);
            tg_downa(out[p][2], ddx, nx, t), tg_downa(out[p][3], dacc, nx, t);
            sl_conv_shape ps = sh;
            ps.c = p ? atoi(pads[p]) : 3;
            sl_conv_algo_info in;
            cr_assert_eq(sl_conv_algo_lookup(sl_cuda_of(&e), &ps, t, SL_CONV_FWD, &in), SL_OK,
                         "STEM_PAD=%s: the convolution ran on %d channels", pads[p], ps.c);
            void *d[] = {dx_, dw_, ddy, dy_, ddx, dacc, dgw};
            for (size_t q = 0; q < sizeof d / sizeof d[0]; q++)
                tg_free(d[q]);
            sl_exec_fini(&e);
        }
        static const char *what[4] = {"y", "dw", "dx", "dx accumulated"};
        double ulp = t == SL_DTYPE_BF16 ? 0.0078125 : 0.0009765625;
        for (int p = 1; p < 3; p++)
            for (int j = 0; j < 4; j++)
                for (size_t i = 0; i < cnt[j]; i++) {
                    /* dx accumulated: the padded path rounds the convolution to t
                     * before the add (twice in all), so an ulp of each term */
                    double a = out[p][j][i], b = out[0][j][i];
                    double m = j == 3 ? fabs(out[0][2][i]) + fabs(dxr[i]) : j == 1 ? 0 : fabs(b);
                    cr_assert(fabs(a - b) <= 1e-5 + 1e-5 * fabs(b) + ulp * m,
                              "%s STEM_PAD=%s %s[%zu]: %.7g, unpadded %.7g", tg_type_name(t),
                              pads[p], what[j], i, a, b);
                }
        for (int p = 0; p < 3; p++)
            for (int j = 0; j < 4; j++)
                free(out[p][j]);
        free(xr), free(wr), free(dyr), free(dxr);
    }
    /* f32 keeps the plain path; a bad value is refused */
    cr_assert_eq(setenv("SLUICE_CUDA_STEM_PAD", "4", 1), 0);
    sl_exec e;
    cuda_init(&e, "0", NULL);
    float *d = dev_alloc(nx + nw + ny);
    cr_assert_eq(e.ops->conv_fwd(&e, &sh, d, d + nx, d + nx + nw), SL_OK, "%s", sl_errmsg());
    sl_conv_algo_info in;
    cr_assert_eq(sl_conv_algo_lookup(sl_cuda_of(&e), &sh, SL_DTYPE_F32, SL_CONV_FWD, &in), SL_OK);
    cr_assert_eq(cudaStreamSynchronize(sl_cuda_of(&e)->stream), cudaSuccess);
    cudaFree(d);
    sl_exec_fini(&e);
    cr_assert_eq(setenv("SLUICE_CUDA_STEM_PAD", "3", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "SLUICE_CUDA_STEM_PAD=3"), "%s", sl_errmsg());
    unsetenv("SLUICE_CUDA_STEM_PAD");
    free(x), free(w), free(dy), free(dx0);
}

#endif /* SLUICE_TRAIN_CUDA */

/* tests/train/ops/test_conv.c - convolution: the cpu backend against the ref
 * loops on awkward shapes, through both of its paths (oneDNN where the build
 * has it, and im2col + SGEMM, chunked, forced by SLUICE_CPU_CONV=blas):
 * chunk boundaries inside images and a remainder chunk, bounded scratch,
 * oneDNN's primitive cache across thread counts, finite-difference
 * gradients of the ref ops, hand-computed golden values, and the geometry
 * checks of sl_conv_shape_init. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

#define CHUNK_ENV "SL_CONV_CPU_CHUNK_ROWS"
#define PATH_ENV "SLUICE_CPU_CONV" /* "blas": im2col + SGEMM even with oneDNN */

typedef struct geom {
    int n, h, w, c, k, r, s, stride, pad;
} geom;

/* Odd sizes, c = 3, k = 5, every path of conv_cpu.c: padded 3x3 at both
 * strides, the 7x7/2 stem, direct 1x1, gathered 1x1/2, kernels that leave
 * input rows and columns no window reaches, non-square kernels, windows
 * that lie wholly in the padding (1x1 pad 1), channels not a multiple of 8. */
static const geom shapes[] = {
    {1, 7, 5, 3, 5, 3, 3, 1, 1},   {2, 7, 5, 3, 5, 3, 3, 2, 1},  {3, 11, 9, 3, 5, 7, 7, 2, 3},
    {2, 7, 5, 3, 5, 1, 1, 1, 0},   {2, 7, 5, 3, 5, 1, 1, 2, 0},  {2, 8, 6, 3, 5, 3, 3, 2, 0},
    {1, 5, 7, 4, 3, 2, 3, 1, 0},   {2, 6, 5, 3, 5, 3, 1, 3, 1},  {2, 5, 3, 3, 5, 1, 1, 1, 1},
    {2, 9, 7, 37, 19, 3, 3, 1, 1}, {1, 3, 3, 5, 7, 5, 5, 1, 2},  {3, 4, 6, 17, 5, 1, 1, 1, 0},
};
#define NSHAPES (sizeof shapes / sizeof *shapes)

static void fill(float *a, size_t n, uint64_t *st)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (float)((double)(tu_rand(st) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill_nan(float *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = NAN;
}

static float *alloc_f(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert_not_null(p);
    return p;
}

static sl_conv_shape make(const geom *g)
{
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, g->n, g->h, g->w, g->c, g->k, g->r, g->s, g->stride,
                                    g->pad),
                 SL_OK, "%s", sl_errmsg());
    return sh;
}

static size_t nx_of(const sl_conv_shape *sh) { return (size_t)sh->n * sh->h * sh->w * sh->c; }
static size_t ny_of(const sl_conv_shape *sh) { return (size_t)sh->n * sh->p * sh->q * sh->k; }
static size_t nw_of(const sl_conv_shape *sh) { return (size_t)sh->k * sh->r * sh->s * sh->c; }

/* |got - want| <= atol + rtol*|want| everywhere (NaN fails). */
static void assert_close(const char *what, const sl_conv_shape *sh, const float *got,
                         const float *want, size_t n, double atol, double rtol)
{
    int64_t i = tu_first_far(got, want, (int64_t)n, atol, rtol);
    if (i >= 0)
        cr_assert_fail("%s: n%d %dx%d c%d k%d %dx%d/%d pad %d: element %lld: got %.7g want "
                       "%.7g", what, sh->n, sh->h, sh->w, sh->c, sh->k, sh->r, sh->s, sh->stride,
                       sh->pad, (long long)i, got[i], want[i]);
}

/* cpu vs ref on one shape for all three passes; outputs of cpu start as NaN
 * so an op that accumulates into (or skips) an element is caught. */
static void check_cpu_vs_ref(const geom *g, uint64_t seed, sl_exec *cpu)
{
    sl_conv_shape sh = make(g);
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *x = alloc_f(nx), *w = alloc_f(nw), *dy = alloc_f(ny);
    float *y0 = alloc_f(ny), *y1 = alloc_f(ny), *dx0 = alloc_f(nx), *dx1 = alloc_f(nx);
    float *dw0 = alloc_f(nw), *dw1 = alloc_f(nw);
    uint64_t st = seed;
    fill(x, nx, &st);
    fill(w, nw, &st);
    fill(dy, ny, &st);
    fill_nan(y1, ny);
    fill_nan(dx1, nx);
    fill_nan(dw1, nw);
    sl_exec ref;
    cr_assert_eq(sl_exec_init(&ref, SL_BACKEND_REF, 1), SL_OK);
    cr_assert_eq(ref.ops->conv_fwd(&ref, &sh, x, w, y0), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_data(&ref, &sh, dy, w, dx0), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_filter(&ref, &sh, x, dy, dw0), SL_OK);
    cr_assert_eq(cpu->ops->conv_fwd(cpu, &sh, x, w, y1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(cpu->ops->conv_bwd_data(cpu, &sh, dy, w, dx1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(cpu->ops->conv_bwd_filter(cpu, &sh, x, dy, dw1), SL_OK, "%s", sl_errmsg());
    /* float32 sums of up to ~2000 terms of size <= 1 against double sums */
    assert_close("conv_fwd", &sh, y1, y0, ny, 1e-4, 1e-4);
    assert_close("conv_bwd_data", &sh, dx1, dx0, nx, 1e-4, 1e-4);
    assert_close("conv_bwd_filter", &sh, dw1, dw0, nw, 2e-4, 1e-4);
    sl_exec_fini(&ref);
    free(x), free(w), free(dy), free(y0), free(y1), free(dx0), free(dx1), free(dw0), free(dw1);
}

Test(train_conv, cpu_matches_ref_on_awkward_shapes)
{
    unsetenv(CHUNK_ENV);
    sl_exec cpu;
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    for (size_t i = 0; i < NSHAPES; i++)
        check_cpu_vs_ref(&shapes[i], 100 + i, &cpu);
    sl_exec_fini(&cpu);
}

/* Chunks of 7 rows (and of 1 row) split images, output rows and the
 * bwd_filter accumulation, and leave a remainder chunk: the results must
 * not change. The column buffer is exactly one chunk. */
Test(train_conv, cpu_chunk_boundaries_match_ref)
{
    setenv(PATH_ENV, "blas", 1);
    sl_exec cpu;
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    setenv(CHUNK_ENV, "7", 1);
    for (size_t i = 0; i < NSHAPES; i++) {
        sl_conv_shape sh = make(&shapes[i]);
        cr_assert_gt((int64_t)sh.n * sh.p * sh.q, 7, "shape %zu fits in one chunk", i);
        check_cpu_vs_ref(&shapes[i], 200 + i, &cpu);
    }
    sl_exec_fini(&cpu);
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 1), SL_OK);
    sl_conv_shape sh = make(&shapes[2]);
    check_cpu_vs_ref(&shapes[2], 300, &cpu);
    size_t K = (size_t)sh.r * sh.s * sh.c, want = (7 * K * sizeof(float) + 63) & ~(size_t)63;
    cr_assert_eq(cpu.scratch_cap, want, "scratch %zu bytes, one 7-row chunk is %zu",
                 cpu.scratch_cap, want);
    setenv(CHUNK_ENV, "1", 1);
    check_cpu_vs_ref(&shapes[1], 301, &cpu);
    check_cpu_vs_ref(&shapes[3], 302, &cpu); /* direct 1x1: one GEMM per row */
    unsetenv(CHUNK_ENV);
    unsetenv(PATH_ENV);
    sl_exec_fini(&cpu);
}

/* With the default budget: a 3x3 c=64 conv whose 2025 output rows exceed
 * one default chunk (K = 576 columns) gives the same result, and the
 * scratch stays below the full column matrix. The direct 1x1 path uses no
 * scratch at all. */
Test(train_conv, cpu_default_chunking_bounds_scratch)
{
    unsetenv(CHUNK_ENV);
    setenv(PATH_ENV, "blas", 1);
    sl_exec cpu;
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    const geom big = {3, 27, 25, 64, 5, 3, 3, 1, 1};
    sl_conv_shape sh = make(&big);
    check_cpu_vs_ref(&big, 400, &cpu);
    size_t full = (size_t)sh.n * sh.p * sh.q * sh.r * sh.s * sh.c * sizeof(float);
    cr_assert_gt(cpu.scratch_cap, 0);
    cr_assert_lt(cpu.scratch_cap, full, "scratch %zu bytes holds the whole %zu-byte im2col",
                 cpu.scratch_cap, full);
    sl_exec_fini(&cpu);
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    check_cpu_vs_ref(&shapes[11], 401, &cpu);
    cr_assert_eq(cpu.scratch_cap, 0, "direct 1x1 conv allocated %zu bytes", cpu.scratch_cap);
    unsetenv(PATH_ENV);
    sl_exec_fini(&cpu);
}

/* The im2col path on the awkward shapes too, in a build with oneDNN (where
 * the test above runs oneDNN's). */
Test(train_conv, cpu_blas_path_matches_ref)
{
    unsetenv(CHUNK_ENV);
    setenv(PATH_ENV, "blas", 1);
    cr_assert_str_eq(sl_train_cpu_conv(), "OpenBLAS im2col");
    sl_exec cpu;
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    for (size_t i = 0; i < NSHAPES; i++)
        check_cpu_vs_ref(&shapes[i], 500 + i, &cpu);
    unsetenv(PATH_ENV);
    sl_exec_fini(&cpu);
}

/* The shapes the networks run (ResNet-20 at width 8 on 28 px: the 3-channel
 * stem, 8/16/32 channels, the stride-2 3x3 and 1x1 shortcut; a ResNet-50-like
 * bottleneck at channel counts that are not multiples of oneDNN's 16-wide
 * blocks) on 1 and 2 threads, each pass twice (the second call takes the
 * cached primitive and must give the same bits), and the same bits whatever
 * the thread count for the forward pass. */
static const geom net_shapes[] = {
    {5, 28, 28, 3, 8, 3, 3, 1, 1},  {5, 28, 28, 8, 8, 3, 3, 1, 1},
    {5, 28, 28, 8, 16, 3, 3, 2, 1}, {5, 28, 28, 8, 16, 1, 1, 2, 0},
    {5, 14, 14, 16, 16, 3, 3, 1, 1}, {4, 7, 7, 32, 32, 3, 3, 1, 1},
    {2, 15, 13, 24, 40, 1, 1, 1, 0}, {2, 15, 13, 40, 24, 3, 3, 2, 1},
    {2, 23, 21, 3, 20, 7, 7, 2, 3},
};

Test(train_conv, cpu_net_shapes_cached_and_threads)
{
    unsetenv(CHUNK_ENV);
    unsetenv(PATH_ENV);
    for (int t = 1; t <= 2; t++) {
        sl_exec cpu;
        cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, t), SL_OK);
        for (size_t i = 0; i < sizeof net_shapes / sizeof *net_shapes; i++) {
            check_cpu_vs_ref(&net_shapes[i], 600 + i, &cpu);
            check_cpu_vs_ref(&net_shapes[i], 600 + i, &cpu);
        }
        sl_exec_fini(&cpu);
    }
    sl_exec e1, e2;
    cr_assert_eq(sl_exec_init(&e1, SL_BACKEND_CPU, 1), SL_OK);
    cr_assert_eq(sl_exec_init(&e2, SL_BACKEND_CPU, 2), SL_OK);
    sl_conv_shape sh = make(&net_shapes[1]);
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *x = alloc_f(nx), *w = alloc_f(nw), *y1 = alloc_f(ny), *y2 = alloc_f(ny);
    float *y3 = alloc_f(ny);
    uint64_t st = 7;
    fill(x, nx, &st);
    fill(w, nw, &st);
    cr_assert_eq(e1.ops->conv_fwd(&e1, &sh, x, w, y1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e2.ops->conv_fwd(&e2, &sh, x, w, y2), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e1.ops->conv_fwd(&e1, &sh, x, w, y3), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(memcmp(y1, y3, ny * sizeof *y1), 0, "a cached primitive changed the result");
    assert_close("conv_fwd 1 vs 2 threads", &sh, y2, y1, ny, 1e-6, 1e-6);
    free(x), free(w), free(y1), free(y2), free(y3);
    sl_exec_fini(&e1);
    sl_exec_fini(&e2);
}

/* L = sum(y * g) for the ref forward, in double. */
static double loss_of(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w,
                      const float *g, float *y)
{
    cr_assert_eq(e->ops->conv_fwd(e, sh, x, w, y), SL_OK);
    double l = 0.0;
    for (size_t i = 0; i < ny_of(sh); i++)
        l += (double)y[i] * g[i];
    return l;
}

/* Central differences of L = sum(conv(x, w) * g) against dL/dx =
 * bwd_data(g) and dL/dw = bwd_filter(x, g), every element. */
static void check_fd(const geom *gm, uint64_t seed)
{
    sl_exec ref;
    cr_assert_eq(sl_exec_init(&ref, SL_BACKEND_REF, 1), SL_OK);
    sl_conv_shape sh = make(gm);
    size_t nx = nx_of(&sh), ny = ny_of(&sh), nw = nw_of(&sh);
    float *x = alloc_f(nx), *w = alloc_f(nw), *g = alloc_f(ny), *y = alloc_f(ny);
    float *dx = alloc_f(nx), *dw = alloc_f(nw), *fdx = alloc_f(nx), *fdw = alloc_f(nw);
    uint64_t st = seed;
    fill(x, nx, &st);
    fill(w, nw, &st);
    fill(g, ny, &st);
    cr_assert_eq(ref.ops->conv_bwd_data(&ref, &sh, g, w, dx), SL_OK);
    cr_assert_eq(ref.ops->conv_bwd_filter(&ref, &sh, x, g, dw), SL_OK);
    const float eps = 1e-2f;
    for (size_t i = 0; i < nx; i++) {
        float keep = x[i];
        x[i] = keep + eps;
        double lp = loss_of(&ref, &sh, x, w, g, y);
        x[i] = keep - eps;
        double lm = loss_of(&ref, &sh, x, w, g, y);
        x[i] = keep;
        fdx[i] = (float)((lp - lm) / (2.0 * eps));
    }
    for (size_t i = 0; i < nw; i++) {
        float keep = w[i];
        w[i] = keep + eps;
        double lp = loss_of(&ref, &sh, x, w, g, y);
        w[i] = keep - eps;
        double lm = loss_of(&ref, &sh, x, w, g, y);
        w[i] = keep;
        fdw[i] = (float)((lp - lm) / (2.0 * eps));
    }
    assert_close("fd dx", &sh, dx, fdx, nx, 1e-3, 1e-2);
    assert_close("fd dw", &sh, dw, fdw, nw, 1e-3, 1e-2);
    sl_exec_fini(&ref);
    free(x), free(w), free(g), free(y), free(dx), free(dw), free(fdx), free(fdw);
}

Test(train_conv, ref_gradients_match_finite_differences)
{
    const geom fd[] = {
        {2, 5, 4, 3, 4, 3, 3, 1, 1}, /* same-padded 3x3 */
        {1, 7, 5, 2, 3, 3, 3, 2, 1}, /* strided, odd sizes */
        {1, 9, 7, 2, 3, 7, 7, 2, 3}, /* the stem's geometry */
        {2, 5, 5, 3, 5, 1, 1, 2, 0}, /* 1x1/2: input pixels with no gradient */
        {1, 8, 6, 3, 2, 3, 3, 2, 0}, /* leaves the last row and column unread */
    };
    for (size_t i = 0; i < sizeof fd / sizeof *fd; i++)
        check_fd(&fd[i], 500 + i);
}

/* Every backend on one hand-computed case. */
static void run_all(int (*body)(sl_exec *))
{
    const sl_backend bs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (size_t i = 0; i < 2; i++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, bs[i], 1), SL_OK);
        cr_assert_eq(body(&e), SL_OK, "backend %s", sl_backend_name(bs[i]));
        sl_exec_fini(&e);
    }
}

static void assert_exact(const char *what, sl_exec *e, const float *got, const float *want,
                         size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(fabsf(got[i] - want[i]) <= 1e-5f * (1.0f + fabsf(want[i])),
                  "%s (%s): element %zu: got %g want %g", what, e->ops->name, i, got[i],
                  want[i]);
}

/* x = [[1,2,3],[4,5,6],[7,8,9]] (one channel), 2x2 kernel [[1,2],[3,4]],
 * stride 1, no padding: y = [[1+4+12+20, 2+6+15+24], [4+10+21+32, 5+12+24+36]]. */
static int golden_valid_2x2(sl_exec *e)
{
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 2, 3, 4};
    const float want[4] = {37, 47, 67, 77};
    float y[4];
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 3, 3, 1, 1, 2, 2, 1, 0), SL_OK);
    cr_assert_eq(sh.p * 10 + sh.q, 22);
    cr_assert_eq(e->ops->conv_fwd(e, &sh, x, w, y), SL_OK);
    assert_exact("fwd 2x2", e, y, want, 4);
    return SL_OK;
}

/* Same x, 3x3 kernel of ones, stride 2, pad 1: 2x2 output whose windows
 * are the four 2x2 corners of x. Backward with dy = ones counts the windows
 * covering each pixel; dw[i][j] sums x over ih in {i-1, i+1}, iw in
 * {j-1, j+1} inside the 3x3 input (e.g. dw[1][1] = 1+3+7+9). */
static int golden_strided_3x3(sl_exec *e)
{
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float w[9], ones[4] = {1, 1, 1, 1}, corner[4] = {1, 0, 0, 0};
    for (int i = 0; i < 9; i++)
        w[i] = 1;
    const float want_y[4] = {12, 16, 24, 28};
    const float want_dx_ones[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
    const float want_dx_corner[9] = {1, 1, 0, 1, 1, 0, 0, 0, 0};
    const float want_dw[9] = {5, 10, 5, 10, 20, 10, 5, 10, 5};
    float y[4], dx[9], dw[9];
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 3, 3, 1, 1, 3, 3, 2, 1), SL_OK);
    cr_assert_eq(sh.p * 10 + sh.q, 22);
    cr_assert_eq(e->ops->conv_fwd(e, &sh, x, w, y), SL_OK);
    assert_exact("fwd 3x3/2", e, y, want_y, 4);
    cr_assert_eq(e->ops->conv_bwd_data(e, &sh, ones, w, dx), SL_OK);
    assert_exact("bwd_data ones", e, dx, want_dx_ones, 9);
    cr_assert_eq(e->ops->conv_bwd_data(e, &sh, corner, w, dx), SL_OK);
    assert_exact("bwd_data corner", e, dx, want_dx_corner, 9);
    cr_assert_eq(e->ops->conv_bwd_filter(e, &sh, x, ones, dw), SL_OK);
    assert_exact("bwd_filter ones", e, dw, want_dw, 9);
    return SL_OK;
}

/* OHWI order: x (1,1,2,2) = pixels [1,10], [2,20]; weight (1,1,2,2) laid
 * out w[s=0] = [1, 0.1], w[s=1] = [100, 0.01]:
 * y = 1*1 + 10*0.1 + 2*100 + 20*0.01 = 202.2 (reading it as (c, s) would
 * give 1001.4). Two filters (k = 2) check the output channel order. */
static int golden_channel_order(sl_exec *e)
{
    const float x[4] = {1, 10, 2, 20};
    const float w[8] = {1, 0.1f, 100, 0.01f, /* filter 1: */ 0, 1, 0, -1};
    const float want[2] = {202.2f, 10 - 20};
    float y[2];
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 1, 2, 2, 2, 1, 2, 1, 0), SL_OK);
    cr_assert_eq(e->ops->conv_fwd(e, &sh, x, w, y), SL_OK);
    assert_exact("fwd channel order", e, y, want, 2);
    return SL_OK;
}

Test(train_conv, golden_values_by_hand)
{
    run_all(golden_valid_2x2);
    run_all(golden_strided_3x3);
    run_all(golden_channel_order);
}

Test(train_conv, shape_init_geometry)
{
    sl_conv_shape sh;
    /* 224 -> 112 for the stem, 56 -> 28 for a 3x3/2 pad 1, 7x5 odd. */
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 224, 224, 3, 64, 7, 7, 2, 3), SL_OK);
    cr_assert_eq(sh.p, 112);
    cr_assert_eq(sh.q, 112);
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 7, 5, 3, 5, 3, 3, 2, 1), SL_OK);
    cr_assert_eq(sh.p, 4);
    cr_assert_eq(sh.q, 3);
    /* A kernel exactly as big as the padded input gives one pixel. */
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 3, 3, 1, 1, 5, 5, 1, 1), SL_OK);
    cr_assert_eq(sh.p * 10 + sh.q, 11);
}

Test(train_conv, shape_init_rejects_kernel_bigger_than_padded_input)
{
    sl_conv_shape sh;
    memset(&sh, 0x5a, sizeof sh);
    sl_conv_shape before = sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 3, 3, 1, 1, 5, 5, 1, 0), SL_EINVAL);
    cr_assert_not_null(strstr(sl_errmsg(), "larger"), "message: %s", sl_errmsg());
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 3, 3, 1, 1, 6, 6, 1, 1), SL_EINVAL);
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 8, 2, 1, 1, 1, 3, 1, 0), SL_EINVAL); /* width */
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 8, 8, 1, 1, 3, 3, 0, 1), SL_EINVAL); /* stride */
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 8, 8, 1, 1, 3, 3, 1, -1), SL_EINVAL); /* pad */
    cr_assert_eq(sl_conv_shape_init(&sh, 0, 8, 8, 1, 1, 3, 3, 1, 1), SL_EINVAL); /* batch */
    cr_assert_eq(memcmp(&sh, &before, sizeof sh), 0, "a rejected shape was written");
}

/* tests/train/ops/test_act.c - relu, add, max pool, global average pool and
 * softmax cross-entropy (train/ops/act_ref.c, train/ops/act_cpu.c): golden values
 * worked by hand (the xent numbers with Python's math module), cpu against
 * ref on awkward shapes, aliasing, ties, finite-difference gradients, bad
 * labels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

static const sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};

static float urand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_rand(st) >> 11) * (1.0 / 9007199254740992.0));
}

static void *xalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    cr_assert(p, "malloc %zu", bytes);
    return p;
}

static void exec_init(sl_exec *e, sl_backend b)
{
    cr_assert_eq(sl_exec_init(e, b, 1), SL_OK, "%s", sl_errmsg());
}

static void fd_check(double num, float ana, const char *what, int64_t i)
{
    cr_assert(fabs(num - ana) <= 1e-3 + 1e-2 * fabs(num),
              "%s[%lld]: finite difference %.6g, backward %.6g", what, (long long)i, num, ana);
}

/* ---------------------------------------------------------------- relu, add */

Test(train_act, relu_values_and_aliasing)
{
    static const int64_t sizes[] = {1, 7, 1003};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        for (size_t t = 0; t < 3; t++) {
            int64_t n = sizes[t];
            uint64_t st = 3 + t;
            float *x = xalloc(n * sizeof(float)), *y = xalloc(n * sizeof(float));
            float *dy = xalloc(n * sizeof(float)), *dx = xalloc(n * sizeof(float));
            for (int64_t i = 0; i < n; i++) {
                x[i] = urand(&st, -1, 1);
                dy[i] = urand(&st, -1, 1);
            }
            x[0] = n > 1 ? -0.25f : 0.5f;
            cr_assert_eq(e.ops->relu_fwd(&e, n, x, y), SL_OK);
            for (int64_t i = 0; i < n; i++)
                cr_assert(y[i] == (x[i] > 0 ? x[i] : 0), "%s relu y[%lld]", e.ops->name,
                          (long long)i);
            cr_assert_eq(e.ops->relu_bwd(&e, n, y, dy, dx), SL_OK);
            for (int64_t i = 0; i < n; i++)
                cr_assert(dx[i] == (x[i] > 0 ? dy[i] : 0), "%s relu dx[%lld]", e.ops->name,
                          (long long)i);
            /* In place: y == x and dx == dy give the same answers. */
            cr_assert_eq(e.ops->relu_fwd(&e, n, x, x), SL_OK);
            cr_assert(memcmp(x, y, n * sizeof(float)) == 0, "%s relu in place", e.ops->name);
            cr_assert_eq(e.ops->relu_bwd(&e, n, y, dy, dy), SL_OK);
            cr_assert(memcmp(dy, dx, n * sizeof(float)) == 0, "%s relu_bwd in place",
                      e.ops->name);
            free(x);
            free(y);
            free(dy);
            free(dx);
        }
        sl_exec_fini(&e);
    }
}

Test(train_act, relu_lets_nan_through)
{
    float x[5] = {NAN, -1, 2, -0.0f, NAN}, y[5];
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        cr_assert_eq(e.ops->relu_fwd(&e, 5, x, y), SL_OK);
        cr_assert(isnan(y[0]) && isnan(y[4]), "%s: NaN in, NaN out", e.ops->name);
        cr_assert(y[1] == 0 && y[2] == 2 && y[3] == 0);
        sl_exec_fini(&e);
    }
}

Test(train_act, relu_backward_finite_differences)
{
    enum { N = 23 };
    uint64_t st = 11;
    float x[N], w[N], y[N], dx[N];
    for (int i = 0; i < N; i++) {
        float m = urand(&st, 0.1f, 1);
        x[i] = (i % 3) ? m : -m; /* away from the kink at 0 */
        w[i] = urand(&st, -1, 1);
    }
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        cr_assert_eq(e.ops->relu_fwd(&e, N, x, y), SL_OK);
        cr_assert_eq(e.ops->relu_bwd(&e, N, y, w, dx), SL_OK);
        const float h = 1e-3f;
        for (int i = 0; i < N; i++) {
            float keep = x[i];
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                x[i] = keep + (sgn ? -h : h);
                cr_assert_eq(e.ops->relu_fwd(&e, N, x, y), SL_OK);
                l[sgn] = 0;
                for (int j = 0; j < N; j++)
                    l[sgn] += (double)w[j] * y[j];
            }
            x[i] = keep;
            fd_check((l[0] - l[1]) / (2.0 * h), dx[i], "relu dx", i);
        }
        sl_exec_fini(&e);
    }
}

Test(train_act, add_with_aliasing)
{
    enum { N = 1003 };
    static float a[N], b[N], want[N], y[N];
    uint64_t st = 21;
    for (int i = 0; i < N; i++) {
        a[i] = urand(&st, -2, 2);
        b[i] = urand(&st, -2, 2);
        want[i] = a[i] + b[i];
    }
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        cr_assert_eq(e.ops->add(&e, N, a, b, y), SL_OK);
        cr_assert(memcmp(y, want, sizeof y) == 0, "%s: y = a + b", e.ops->name);
        memcpy(y, a, sizeof y);
        cr_assert_eq(e.ops->add(&e, N, y, b, y), SL_OK);
        cr_assert(memcmp(y, want, sizeof y) == 0, "%s: y aliases a", e.ops->name);
        memcpy(y, b, sizeof y);
        cr_assert_eq(e.ops->add(&e, N, a, y, y), SL_OK);
        cr_assert(memcmp(y, want, sizeof y) == 0, "%s: y aliases b", e.ops->name);
        memcpy(y, a, sizeof y);
        cr_assert_eq(e.ops->add(&e, N, y, y, y), SL_OK);
        for (int i = 0; i < N; i++)
            cr_assert(y[i] == 2 * a[i], "%s: y = a + a in place, [%d]", e.ops->name, i);
        sl_exec_fini(&e);
    }
}

/* ---------------------------------------------------------------- max pool */

static void pool_run(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                     int32_t *am)
{
    cr_assert_eq(e->ops->maxpool_fwd(e, sh, x, y, am), SL_OK, "%s", sl_errmsg());
}

Test(train_act, maxpool_golden_7x5)
{
    /* 3x3 stride 2 pad 1 on 7x5 (c 1) -> 4x3; all negative, so a padding
     * zero that competed would win. Worked by hand; ties: the window at
     * (0,1) holds -3 twice (x 1 and 2), the one at (2,2) holds -2 at x 19
     * and 23 -> the first in r-then-s order. */
    static const float x[35] = {-5, -3, -3, -8, -1, -2, -9, -4, -4, -6, -7, -2, -1, -5, -5,
                                -3, -3, -6, -9, -2, -8, -1, -7, -2, -4, -6, -6, -3, -3, -9,
                                -4, -5, -8, -1, -7};
    static const float wy[12] = {-2, -3, -1, -2, -1, -2, -1, -1, -2, -4, -1, -1};
    static const int32_t wam[12] = {5, 1, 4, 5, 12, 19, 21, 21, 19, 30, 33, 33};
    sl_pool_shape sh;
    cr_assert_eq(sl_pool_shape_init(&sh, 1, 7, 5, 1, 3, 2, 1), SL_OK);
    cr_assert(sh.p == 4 && sh.q == 3);
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float y[12], dy[12], dx[35];
        int32_t am[12];
        pool_run(&e, &sh, x, y, am);
        for (int i = 0; i < 12; i++) {
            cr_assert(y[i] == wy[i], "%s y[%d] = %g want %g", e.ops->name, i, y[i], wy[i]);
            cr_assert(am[i] == wam[i], "%s argmax[%d] = %d want %d", e.ops->name, i, am[i],
                      wam[i]);
            dy[i] = 1.0f + (float)i;
        }
        /* Overlapping windows add: x 5 wins outputs 0 and 3, x 19 outputs
         * 5 and 8, x 21 outputs 6 and 7, x 33 outputs 10 and 11. */
        for (int i = 0; i < 35; i++)
            dx[i] = 99;
        cr_assert_eq(e.ops->maxpool_bwd(&e, &sh, dy, am, dx), SL_OK);
        float wdx[35] = {0};
        wdx[5] = 1 + 4;
        wdx[1] = 2;
        wdx[4] = 3;
        wdx[12] = 5;
        wdx[19] = 6 + 9;
        wdx[21] = 7 + 8;
        wdx[30] = 10;
        wdx[33] = 11 + 12;
        for (int i = 0; i < 35; i++)
            cr_assert(dx[i] == wdx[i], "%s dx[%d] = %g want %g", e.ops->name, i, dx[i], wdx[i]);
        sl_exec_fini(&e);
    }
}

Test(train_act, maxpool_golden_tiny_inputs)
{
    /* 1x1 (c 3) -> 1x1: the lone pixel wins even when negative. */
    static const float x1[3] = {-3, -0.5f, 2};
    /* 2x2 (c 2) -> 1x1: ch0 max 4 at pixels (0,1) and (1,0) -> x index 2
     * (first in scan order); ch1 max 5 at (0,0) and (0,1) -> index 1. */
    static const float x2[8] = {1, 5, 4, 5, 4, -1, 2, 0};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        sl_pool_shape sh;
        float y[3];
        int32_t am[3];
        cr_assert_eq(sl_pool_shape_init(&sh, 1, 1, 1, 3, 3, 2, 1), SL_OK);
        cr_assert(sh.p == 1 && sh.q == 1);
        pool_run(&e, &sh, x1, y, am);
        for (int ch = 0; ch < 3; ch++)
            cr_assert(y[ch] == x1[ch] && am[ch] == ch, "%s 1x1 ch %d", e.ops->name, ch);
        cr_assert_eq(sl_pool_shape_init(&sh, 1, 2, 2, 2, 3, 2, 1), SL_OK);
        cr_assert(sh.p == 1 && sh.q == 1);
        pool_run(&e, &sh, x2, y, am);
        cr_assert(y[0] == 4 && am[0] == 2, "%s 2x2 ch0: %g @ %d", e.ops->name, y[0], am[0]);
        cr_assert(y[1] == 5 && am[1] == 1, "%s 2x2 ch1: %g @ %d", e.ops->name, y[1], am[1]);
        sl_exec_fini(&e);
    }
}

Test(train_act, maxpool_nan_wins)
{
    static const float x[4] = {1, NAN, 3, NAN}; /* 2x2, c 1 */
    sl_pool_shape sh;
    cr_assert_eq(sl_pool_shape_init(&sh, 1, 2, 2, 1, 2, 2, 0), SL_OK);
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float y[1];
        int32_t am[1];
        pool_run(&e, &sh, x, y, am);
        cr_assert(isnan(y[0]) && am[0] == 1, "%s: first NaN wins, got %g @ %d", e.ops->name,
                  y[0], am[0]);
        sl_exec_fini(&e);
    }
}

Test(train_act, maxpool_cpu_matches_ref)
{
    /* n, h, w, c, r, stride, pad */
    static const int g[][7] = {{2, 7, 5, 3, 3, 2, 1},   {1, 1, 1, 5, 3, 2, 1},
                               {1, 2, 2, 17, 3, 2, 1},  {3, 9, 11, 17, 3, 2, 1},
                               {2, 8, 6, 5, 2, 2, 0},   {1, 6, 7, 3, 3, 1, 1},
                               {2, 13, 10, 64, 3, 2, 1}, {1, 5, 5, 3, 5, 2, 2}};
    sl_exec er, ec;
    exec_init(&er, SL_BACKEND_REF);
    exec_init(&ec, SL_BACKEND_CPU);
    for (size_t t = 0; t < sizeof g / sizeof g[0]; t++)
        for (int ties = 0; ties < 2; ties++) {
            sl_pool_shape sh;
            cr_assert_eq(sl_pool_shape_init(&sh, g[t][0], g[t][1], g[t][2], g[t][3], g[t][4],
                                            g[t][5], g[t][6]), SL_OK);
            size_t nx = (size_t)sh.n * sh.h * sh.w * sh.c, ny = (size_t)sh.n * sh.p * sh.q * sh.c;
            float *x = xalloc(nx * 4), *yr = xalloc(ny * 4), *yc = xalloc(ny * 4);
            float *dy = xalloc(ny * 4), *dxr = xalloc(nx * 4), *dxc = xalloc(nx * 4);
            int32_t *ar = xalloc(ny * 4), *ac = xalloc(ny * 4);
            uint64_t st = 100 + t;
            /* ties: small integers, so windows hold equal maxima. */
            for (size_t i = 0; i < nx; i++)
                x[i] = ties ? (float)(tu_rand(&st) % 4) - 2 : urand(&st, -3, 1);
            for (size_t i = 0; i < ny; i++)
                dy[i] = urand(&st, -1, 1);
            pool_run(&er, &sh, x, yr, ar);
            pool_run(&ec, &sh, x, yc, ac);
            cr_assert(memcmp(yr, yc, ny * 4) == 0, "shape %zu ties %d: y differs", t, ties);
            cr_assert(memcmp(ar, ac, ny * 4) == 0, "shape %zu ties %d: argmax differs", t, ties);
            for (size_t i = 0; i < ny; i++)
                cr_assert(x[ar[i]] == yr[i], "argmax points at the max");
            /* The cpu backward is the ref's scatter (train/ops/act_cpu.c), so
             * each is checked against the scatter written out here. */
            cr_assert_eq(er.ops->maxpool_bwd(&er, &sh, dy, ar, dxr), SL_OK);
            cr_assert_eq(ec.ops->maxpool_bwd(&ec, &sh, dy, ac, dxc), SL_OK);
            double *want = xalloc(nx * sizeof *want);
            memset(want, 0, nx * sizeof *want);
            for (size_t i = 0; i < ny; i++)
                want[ar[i]] += dy[i];
            for (size_t i = 0; i < nx; i++) {
                cr_assert(fabs(dxr[i] - want[i]) <= 1e-5, "shape %zu ties %d: ref dx[%zu] %g want %g",
                          t, ties, i, dxr[i], want[i]);
                cr_assert(fabs(dxc[i] - want[i]) <= 1e-5, "shape %zu ties %d: cpu dx[%zu] %g want %g",
                          t, ties, i, dxc[i], want[i]);
            }
            free(want);
            free(x), free(yr), free(yc), free(dy), free(dxr), free(dxc), free(ar), free(ac);
        }
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

Test(train_act, maxpool_backward_finite_differences)
{
    enum { H = 7, W = 5, C = 3, NX = 2 * H * W * C };
    sl_pool_shape sh;
    cr_assert_eq(sl_pool_shape_init(&sh, 2, H, W, C, 3, 2, 1), SL_OK);
    int ny = sh.n * sh.p * sh.q * sh.c;
    float x[NX], y[128], w[128], dx[NX];
    int32_t am[128];
    cr_assert(ny <= 128);
    /* Distinct values 0.01 apart (a shuffled ramp): no ties within 2h. */
    for (int i = 0; i < NX; i++)
        x[i] = 0.01f * (float)i - 1.0f;
    uint64_t st = 7;
    for (int i = NX - 1; i > 0; i--) {
        int j = (int)(tu_rand(&st) % (uint64_t)(i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    for (int i = 0; i < ny; i++)
        w[i] = urand(&st, -1, 1);
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        pool_run(&e, &sh, x, y, am);
        cr_assert_eq(e.ops->maxpool_bwd(&e, &sh, w, am, dx), SL_OK);
        const float h = 1e-3f;
        for (int i = 0; i < NX; i++) {
            float keep = x[i];
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                x[i] = keep + (sgn ? -h : h);
                pool_run(&e, &sh, x, y, am);
                l[sgn] = 0;
                for (int j = 0; j < ny; j++)
                    l[sgn] += (double)w[j] * y[j];
            }
            x[i] = keep;
            fd_check((l[0] - l[1]) / (2.0 * h), dx[i], "maxpool dx", i);
        }
        sl_exec_fini(&e);
    }
}

Test(train_act, maxpool_bwd_rejects_bad_argmax)
{
    sl_pool_shape sh;
    cr_assert_eq(sl_pool_shape_init(&sh, 1, 2, 2, 1, 2, 2, 0), SL_OK);
    float dy[1] = {1}, dx[4];
    int32_t bad[2] = {4, -1};
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 2; b++) {
            sl_exec e;
            exec_init(&e, backs[k]);
            cr_assert_eq(e.ops->maxpool_bwd(&e, &sh, dy, bad + b, dx), SL_EINVAL);
            cr_assert(strstr(sl_errmsg(), "argmax[0]"), "%s", sl_errmsg());
            sl_exec_fini(&e);
        }
}

/* ---------------------------------------------------------------- gap */

Test(train_act, gap_golden)
{
    /* n 2, hw 3, c 2. */
    static const float x[12] = {1, 10, 2, 20, 6, -30, -1, 0.5f, -2, 0.5f, 0, 2};
    static const float want[4] = {3, 0, -1, 1};
    static const float dy[4] = {3, -6, 1.5f, 0};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float y[4], dx[12];
        cr_assert_eq(e.ops->gap_fwd(&e, 2, 3, 2, x, y), SL_OK);
        tu_assert_close(y, want, 4, 1e-7, 0, "gap y");
        cr_assert_eq(e.ops->gap_bwd(&e, 2, 3, 2, dy, dx), SL_OK);
        for (int i = 0; i < 2; i++)
            for (int p = 0; p < 3; p++)
                for (int ch = 0; ch < 2; ch++)
                    cr_assert(dx[(i * 3 + p) * 2 + ch] == dy[i * 2 + ch] / 3.0f,
                              "%s gap dx (%d,%d,%d)", e.ops->name, i, p, ch);
        sl_exec_fini(&e);
    }
}

Test(train_act, gap_cpu_matches_ref_and_gradient)
{
    /* n, hw, c: hw 300 and 1000 cross the cpu's 256-row partial sums. */
    static const int g[][3] = {{1, 1, 1}, {2, 49, 17}, {3, 300, 5}, {1, 7, 64}, {2, 1000, 3}};
    sl_exec er, ec;
    exec_init(&er, SL_BACKEND_REF);
    exec_init(&ec, SL_BACKEND_CPU);
    for (size_t t = 0; t < sizeof g / sizeof g[0]; t++) {
        int n = g[t][0], hw = g[t][1], c = g[t][2];
        size_t nx = (size_t)n * hw * c, ny = (size_t)n * c;
        float *x = xalloc(nx * 4), *yr = xalloc(ny * 4), *yc = xalloc(ny * 4);
        float *dy = xalloc(ny * 4), *dxr = xalloc(nx * 4), *dxc = xalloc(nx * 4);
        uint64_t st = 40 + t;
        for (size_t i = 0; i < nx; i++)
            x[i] = 5.0f + urand(&st, -1, 1);
        for (size_t i = 0; i < ny; i++)
            dy[i] = urand(&st, -1, 1);
        cr_assert_eq(er.ops->gap_fwd(&er, n, hw, c, x, yr), SL_OK);
        cr_assert_eq(ec.ops->gap_fwd(&ec, n, hw, c, x, yc), SL_OK);
        tu_assert_close(yc, yr, ny, 0, 1e-6, "gap y");
        cr_assert_eq(er.ops->gap_bwd(&er, n, hw, c, dy, dxr), SL_OK);
        cr_assert_eq(ec.ops->gap_bwd(&ec, n, hw, c, dy, dxc), SL_OK);
        cr_assert(memcmp(dxr, dxc, nx * 4) == 0, "gap dx differs, shape %zu", t);
        /* Finite differences on a few entries (gap is linear: exact up to
         * rounding); L = sum dy*y. */
        for (size_t i = 0; i < nx; i += nx / 5 + 1) {
            float keep = x[i];
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                x[i] = keep + (sgn ? -0.01f : 0.01f);
                cr_assert_eq(er.ops->gap_fwd(&er, n, hw, c, x, yr), SL_OK);
                l[sgn] = 0;
                for (size_t j = 0; j < ny; j++)
                    l[sgn] += (double)dy[j] * yr[j];
            }
            x[i] = keep;
            fd_check((l[0] - l[1]) / (2.0 * 0.01f), dxr[i], "gap dx", (int64_t)i);
        }
        free(x), free(yr), free(yc), free(dy), free(dxr), free(dxc);
    }
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

/* ---------------------------------------------------------------- xent */

Test(train_act, xent_golden)
{
    /* Python, math module: m = max(l); lse = m + log(sum(exp(v - m)));
     * t = s/K + (1-s)*onehot; loss = -sum(t*(l - lse)); d = exp(l - lse) - t.
     * [1,2,3] label 2: s 0 -> 0.4076059644, d (0.0900305732, 0.2447284711,
     * -0.3347590442); s 0.1 -> 0.5076059644, d (0.0566972398, 0.2113951377,
     * -0.2680923776). Adding 1000 to every logit changes nothing. */
    static const float l1[3] = {1, 2, 3}, lbig[3] = {1001, 1002, 1003};
    static const float d0[3] = {0.0900305732f, 0.2447284711f, -0.3347590442f};
    static const float d1[3] = {0.0566972398f, 0.2113951377f, -0.2680923776f};
    /* Two rows, s 0.1: [1,2,3] label 2 and [3,1,2] label 1 (argmax 0: miss). */
    static const float l2[6] = {1, 2, 3, 3, 1, 2};
    static const float d2[6] = {0.0283486199f, 0.1056975689f, -0.1340461888f,
                                0.3159538112f, -0.4216513801f, 0.1056975689f};
    const int32_t lab1[1] = {2}, lab2[2] = {2, 1};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float loss, d[6];
        int correct = -1;
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, 1, 3, l1, lab1, 0.0f, &loss, d, &correct), SL_OK);
        cr_assert(fabs(loss - 0.4076059644) < 1e-6, "%s s 0: loss %.9g", e.ops->name, loss);
        tu_assert_close(d, d0, 3, 1e-7, 1e-6, "dlogits s 0");
        cr_assert_eq(correct, 1);
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, 1, 3, l1, lab1, 0.1f, &loss, d, NULL), SL_OK);
        cr_assert(fabs(loss - 0.5076059644) < 1e-6, "%s s 0.1: loss %.9g", e.ops->name, loss);
        tu_assert_close(d, d1, 3, 1e-7, 1e-6, "dlogits s 0.1");
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, 1, 3, lbig, lab1, 0.1f, &loss, d, NULL), SL_OK);
        cr_assert(fabs(loss - 0.5076059644) < 1e-5, "%s big logits: loss %.9g", e.ops->name,
                  loss);
        tu_assert_close(d, d1, 3, 1e-6, 1e-5, "dlogits big logits");
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, 2, 3, l2, lab2, 0.1f, &loss, d, &correct), SL_OK);
        cr_assert(fabs(loss - 1.4076059644) < 1e-6, "%s two rows: loss %.9g", e.ops->name,
                  loss);
        tu_assert_close(d, d2, 6, 1e-7, 1e-6, "dlogits two rows");
        cr_assert_eq(correct, 1, "%s: one of two rows right", e.ops->name);
        sl_exec_fini(&e);
    }
}

Test(train_act, xent_argmax_ties_take_the_first)
{
    static const float l[6] = {5, 5, 1, 0, 2, 2};
    const int32_t first[2] = {0, 1}, second[2] = {1, 2};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float loss, d[6];
        int correct = -1;
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, 2, 3, l, first, 0, &loss, d, &correct), SL_OK);
        cr_assert_eq(correct, 2, "%s: labels at the first maximum", e.ops->name);
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, 2, 3, l, second, 0, &loss, d, &correct), SL_OK);
        cr_assert_eq(correct, 0, "%s: labels at the second maximum", e.ops->name);
        sl_exec_fini(&e);
    }
}

Test(train_act, xent_rejects_bad_labels)
{
    static const float l[6] = {1, 2, 3, 4, 5, 6};
    const int32_t high[2] = {0, 3}, low[2] = {-1, 0};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float loss = 42, d[6];
        cr_assert_eq(sl_xent_fwd_bwd(&e, 2, 3, l, high, 0, &loss, d, NULL), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "row 1: label 3"), "%s", sl_errmsg());
        cr_assert_eq(sl_xent_fwd_bwd(&e, 2, 3, l, low, 0, &loss, d, NULL), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "row 0: label -1"), "%s", sl_errmsg());
        cr_assert(loss == 42, "nothing written on error");
        cr_assert_eq(sl_xent_fwd_bwd(&e, 2, 3, l, low + 1, 1.5f, &loss, d, NULL),
                     SL_EINVAL, "smoothing outside [0, 1]");
        sl_exec_fini(&e);
    }
}

Test(train_act, xent_backward_finite_differences)
{
    enum { N = 3, K = 5 };
    uint64_t st = 77;
    float l[N * K], d[N * K];
    const int32_t lab[N] = {4, 0, 2};
    for (int i = 0; i < N * K; i++)
        l[i] = urand(&st, -2, 2);
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float loss, lp, lm, dd[N * K];
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, N, K, l, lab, 0.1f, &loss, d, NULL), SL_OK);
        const float h = 1e-2f;
        for (int i = 0; i < N * K; i++) {
            float keep = l[i];
            l[i] = keep + h;
            cr_assert_eq(e.ops->xent_fwd_bwd(&e, N, K, l, lab, 0.1f, &lp, dd, NULL), SL_OK);
            l[i] = keep - h;
            cr_assert_eq(e.ops->xent_fwd_bwd(&e, N, K, l, lab, 0.1f, &lm, dd, NULL), SL_OK);
            l[i] = keep;
            fd_check(((double)lp - lm) / (2.0 * h), d[i], "xent dlogits", i);
        }
        sl_exec_fini(&e);
    }
}

Test(train_act, xent_cpu_matches_ref)
{
    static const int g[][2] = {{7, 1000}, {5, 13}, {1, 1}, {3, 2}};
    sl_exec er, ec;
    exec_init(&er, SL_BACKEND_REF);
    exec_init(&ec, SL_BACKEND_CPU);
    for (size_t t = 0; t < sizeof g / sizeof g[0]; t++) {
        int n = g[t][0], k = g[t][1];
        float *l = xalloc((size_t)n * k * 4), *dr = xalloc((size_t)n * k * 4);
        float *dc = xalloc((size_t)n * k * 4);
        int32_t *lab = xalloc((size_t)n * 4);
        uint64_t st = 300 + t;
        for (int i = 0; i < n * k; i++)
            l[i] = urand(&st, -8, 8);
        for (int i = 0; i < n; i++)
            lab[i] = (int32_t)(tu_rand(&st) % (uint64_t)k);
        for (int s = 0; s < 2; s++) {
            float sm = s ? 0.1f : 0.0f, lr, lc;
            int cr = -1, cc = -2;
            cr_assert_eq(er.ops->xent_fwd_bwd(&er, n, k, l, lab, sm, &lr, dr, &cr), SL_OK);
            cr_assert_eq(ec.ops->xent_fwd_bwd(&ec, n, k, l, lab, sm, &lc, dc, &cc), SL_OK);
            cr_assert(fabs(lc - lr) <= 1e-6 * fabs(lr) + 1e-7, "loss cpu %.9g ref %.9g", lc, lr);
            tu_assert_close(dc, dr, (int64_t)n * k, 1e-8, 1e-5, "dlogits");
            cr_assert_eq(cc, cr, "correct");
        }
        free(l), free(dr), free(dc), free(lab);
    }
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

/* ReLU, add and max pool on two threads (elements or images split:
 * act_cpu.c) against the ref, in every aliasing form, on tensors big
 * enough to be split and of sizes that split unevenly. */
Test(train_act, cpu_two_threads_match_ref)
{
    const int64_t n = 3 * 32768 + 17;
    float *a = xalloc(n * sizeof(float)), *b = xalloc(n * sizeof(float));
    float *y0 = xalloc(n * sizeof(float)), *y1 = xalloc(n * sizeof(float));
    float *t = xalloc(n * sizeof(float));
    uint64_t st = 77;
    for (int64_t i = 0; i < n; i++)
        a[i] = urand(&st, -1, 1), b[i] = urand(&st, -1, 1);
    sl_exec ref, cpu;
    exec_init(&ref, SL_BACKEND_REF);
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    size_t nb = (size_t)n * sizeof(float);
    cr_assert_eq(ref.ops->relu_fwd(&ref, n, a, y0), SL_OK);
    cr_assert_eq(cpu.ops->relu_fwd(&cpu, n, a, y1), SL_OK);
    cr_assert_eq(memcmp(y0, y1, nb), 0, "relu_fwd");
    memcpy(t, a, nb);
    cr_assert_eq(cpu.ops->relu_fwd(&cpu, n, t, t), SL_OK);
    cr_assert_eq(memcmp(y0, t, nb), 0, "relu_fwd in place");
    cr_assert_eq(ref.ops->relu_bwd(&ref, n, a, b, y0), SL_OK);
    cr_assert_eq(cpu.ops->relu_bwd(&cpu, n, a, b, y1), SL_OK);
    cr_assert_eq(memcmp(y0, y1, nb), 0, "relu_bwd");
    memcpy(t, b, nb);
    cr_assert_eq(cpu.ops->relu_bwd(&cpu, n, a, t, t), SL_OK);
    cr_assert_eq(memcmp(y0, t, nb), 0, "relu_bwd in place");
    cr_assert_eq(ref.ops->add(&ref, n, a, b, y0), SL_OK);
    cr_assert_eq(cpu.ops->add(&cpu, n, a, b, y1), SL_OK);
    cr_assert_eq(memcmp(y0, y1, nb), 0, "add");
    memcpy(t, a, nb);
    cr_assert_eq(cpu.ops->add(&cpu, n, t, b, t), SL_OK);
    cr_assert_eq(memcmp(y0, t, nb), 0, "add into a");
    sl_pool_shape sh;
    cr_assert_eq(sl_pool_shape_init(&sh, 5, 57, 31, 19, 3, 2, 1), SL_OK);
    int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c, ny = (int64_t)sh.n * sh.p * sh.q * sh.c;
    float *x = xalloc(nx * sizeof(float)), *p0 = xalloc(ny * sizeof(float));
    float *p1 = xalloc(ny * sizeof(float));
    int32_t *i0 = xalloc(ny * sizeof(int32_t)), *i1 = xalloc(ny * sizeof(int32_t));
    for (int64_t i = 0; i < nx; i++)
        x[i] = urand(&st, -1, 1);
    cr_assert_eq(ref.ops->maxpool_fwd(&ref, &sh, x, p0, i0), SL_OK);
    cr_assert_eq(cpu.ops->maxpool_fwd(&cpu, &sh, x, p1, i1), SL_OK);
    cr_assert_eq(memcmp(p0, p1, ny * sizeof(float)), 0, "maxpool y");
    cr_assert_eq(memcmp(i0, i1, ny * sizeof(int32_t)), 0, "maxpool argmax");
    sl_exec_fini(&ref);
    sl_exec_fini(&cpu);
    free(a), free(b), free(y0), free(y1), free(t), free(x), free(p0), free(p1), free(i0),
        free(i1);
}

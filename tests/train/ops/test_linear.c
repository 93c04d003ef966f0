/* tests/train/ops/test_linear.c - the fully connected layer: cpu (SGEMM)
 * against ref on awkward shapes, with and without dx, finite-difference
 * gradients of the ref op, and hand-computed golden values. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "testutil.h"
#include "train/ops/ops.h"

static void fill(float *a, size_t n, uint64_t *st)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (float)((double)(tu_rand(st) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *alloc_f(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert_not_null(p);
    return p;
}

static void fill_nan(float *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = NAN;
}

static void assert_close(const char *what, int n, int in, int out, const float *got,
                         const float *want, size_t len, double atol, double rtol)
{
    int64_t i = tu_first_far(got, want, (int64_t)len, atol, rtol);
    if (i >= 0)
        cr_assert_fail("%s: n%d in%d out%d: element %lld: got %.7g want %.7g", what, n, in, out,
                       (long long)i, got[i], want[i]);
}

/* cpu vs ref: y, dx, dw, db; cpu outputs start as NaN (overwritten, never
 * accumulated into). with_dx = 0 passes dx = NULL to cpu. */
static void check_cpu_vs_ref(int n, int in, int out, int with_dx, uint64_t seed)
{
    sl_exec ref, cpu;
    cr_assert_eq(sl_exec_init(&ref, SL_BACKEND_REF, 1), SL_OK);
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 2), SL_OK);
    size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *x = alloc_f(nx), *w = alloc_f(nw), *b = alloc_f(out), *dy = alloc_f(ny);
    float *y0 = alloc_f(ny), *y1 = alloc_f(ny), *dx0 = alloc_f(nx), *dx1 = alloc_f(nx);
    float *dw0 = alloc_f(nw), *dw1 = alloc_f(nw), *db0 = alloc_f(out), *db1 = alloc_f(out);
    uint64_t st = seed;
    fill(x, nx, &st);
    fill(w, nw, &st);
    fill(b, out, &st);
    fill(dy, ny, &st);
    fill_nan(y1, ny);
    fill_nan(dx1, nx);
    fill_nan(dw1, nw);
    fill_nan(db1, out);
    cr_assert_eq(ref.ops->fc_fwd(&ref, n, in, out, x, w, b, y0), SL_OK);
    cr_assert_eq(ref.ops->fc_bwd(&ref, n, in, out, x, w, dy, dx0, dw0, db0), SL_OK);
    cr_assert_eq(cpu.ops->fc_fwd(&cpu, n, in, out, x, w, b, y1), SL_OK);
    cr_assert_eq(cpu.ops->fc_bwd(&cpu, n, in, out, x, w, dy, with_dx ? dx1 : NULL, dw1, db1),
                 SL_OK);
    assert_close("fc_fwd", n, in, out, y1, y0, ny, 1e-4, 1e-4);
    if (with_dx)
        assert_close("fc_bwd dx", n, in, out, dx1, dx0, nx, 1e-4, 1e-4);
    else
        for (size_t i = 0; i < nx; i++)
            cr_assert(isnan(dx1[i]), "dx = NULL, yet the caller's buffer was written");
    assert_close("fc_bwd dw", n, in, out, dw1, dw0, nw, 1e-4, 1e-4);
    assert_close("fc_bwd db", n, in, out, db1, db0, out, 1e-4, 1e-4);
    sl_exec_fini(&ref);
    sl_exec_fini(&cpu);
    free(x), free(w), free(b), free(dy), free(y0), free(y1), free(dx0), free(dx1);
    free(dw0), free(dw1), free(db0), free(db1);
}

Test(train_linear, cpu_matches_ref)
{
    /* n = 1, tiny, odd; ResNet-20's head (64 -> 10); a torchvision-like
     * head at a small odd batch (2048 -> 1000 scaled down to 257 -> 1000). */
    check_cpu_vs_ref(1, 3, 5, 1, 1);
    check_cpu_vs_ref(7, 37, 11, 1, 2);
    check_cpu_vs_ref(13, 64, 10, 1, 3);
    check_cpu_vs_ref(5, 257, 1000, 1, 4);
    check_cpu_vs_ref(3, 1, 1, 1, 5);
}

Test(train_linear, cpu_without_dx)
{
    check_cpu_vs_ref(7, 37, 11, 0, 6);
    check_cpu_vs_ref(1, 3, 5, 0, 7);
}

/* L = sum(y * g) + nothing else, in double. */
static double loss_of(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                      const float *b, const float *g, float *y)
{
    cr_assert_eq(e->ops->fc_fwd(e, n, in, out, x, w, b, y), SL_OK);
    double l = 0.0;
    for (size_t i = 0; i < (size_t)n * out; i++)
        l += (double)y[i] * g[i];
    return l;
}

/* Central differences for every element of x, w and b. */
static void fd_param(sl_exec *e, int n, int in, int out, float *x, float *w, float *b,
                     const float *g, float *y, float *p, size_t len, const float *grad,
                     const char *what)
{
    const float eps = 1e-2f;
    for (size_t i = 0; i < len; i++) {
        float keep = p[i];
        p[i] = keep + eps;
        double lp = loss_of(e, n, in, out, x, w, b, g, y);
        p[i] = keep - eps;
        double lm = loss_of(e, n, in, out, x, w, b, g, y);
        p[i] = keep;
        double fd = (lp - lm) / (2.0 * eps);
        cr_assert(fabs(fd - grad[i]) <= 1e-3 + 1e-2 * fabs(fd),
                  "%s[%zu]: analytic %.6g, finite difference %.6g", what, i, grad[i], fd);
    }
}

Test(train_linear, ref_gradients_match_finite_differences)
{
    const int n = 3, in = 7, out = 5;
    sl_exec ref;
    cr_assert_eq(sl_exec_init(&ref, SL_BACKEND_REF, 1), SL_OK);
    float x[3 * 7], w[5 * 7], b[5], g[3 * 5], y[3 * 5], dx[3 * 7], dw[5 * 7], db[5];
    uint64_t st = 42;
    fill(x, sizeof x / sizeof *x, &st);
    fill(w, sizeof w / sizeof *w, &st);
    fill(b, 5, &st);
    fill(g, sizeof g / sizeof *g, &st);
    cr_assert_eq(ref.ops->fc_bwd(&ref, n, in, out, x, w, g, dx, dw, db), SL_OK);
    fd_param(&ref, n, in, out, x, w, b, g, y, x, sizeof x / sizeof *x, dx, "dx");
    fd_param(&ref, n, in, out, x, w, b, g, y, w, sizeof w / sizeof *w, dw, "dw");
    fd_param(&ref, n, in, out, x, w, b, g, y, b, 5, db, "db");
    sl_exec_fini(&ref);
}

/* x = [[1,2],[3,-1]], w = [[1,0],[2,-1],[0.5,0.5]], b = [0.1,0.2,0.3]:
 *   y  = [[1.1, 0.2, 1.8], [3.1, 7.2, 1.3]]
 * dy = [[1,-1,2],[0,1,0]]:
 *   dx = dy w = [[1-2+1, 1+1], [2, -1]] = [[0,2],[2,-1]]
 *   dw = dy^T x = [[1,2],[-1+3,-2-1],[2,4]] = [[1,2],[2,-3],[2,4]]
 *   db = [1, 0, 2] */
Test(train_linear, golden_values_by_hand)
{
    const float x[4] = {1, 2, 3, -1}, w[6] = {1, 0, 2, -1, 0.5f, 0.5f}, b[3] = {0.1f, 0.2f,
                                                                                 0.3f};
    const float dy[6] = {1, -1, 2, 0, 1, 0};
    const float want_y[6] = {1.1f, 0.2f, 1.8f, 3.1f, 7.2f, 1.3f};
    const float want_dx[4] = {0, 2, 2, -1}, want_dw[6] = {1, 2, 2, -3, 2, 4},
                want_db[3] = {1, 0, 2};
    const sl_backend bs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, bs[k], 1), SL_OK);
        float y[6], dx[4], dw[6], db[3];
        cr_assert_eq(e.ops->fc_fwd(&e, 2, 2, 3, x, w, b, y), SL_OK);
        cr_assert_eq(e.ops->fc_bwd(&e, 2, 2, 3, x, w, dy, dx, dw, db), SL_OK);
        assert_close(e.ops->name, 2, 2, 3, y, want_y, 6, 1e-6, 1e-6);
        assert_close(e.ops->name, 2, 2, 3, dx, want_dx, 4, 1e-6, 1e-6);
        assert_close(e.ops->name, 2, 2, 3, dw, want_dw, 6, 1e-6, 1e-6);
        assert_close(e.ops->name, 2, 2, 3, db, want_db, 3, 1e-6, 1e-6);
        sl_exec_fini(&e);
    }
}

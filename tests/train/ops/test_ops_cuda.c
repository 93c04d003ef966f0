/* tests/train/ops/test_ops_cuda.c - the cuda backend's small ops and fully
 * connected layer (train/ops/act_cuda.cu, train/ops/linear_cuda.cu) against the ref
 * backend (act_ref.c, linear_ref.c): awkward shapes with atol + rtol*|ref|,
 * bit equality where the kernels promise it (relu, add, max pool values,
 * argmax and gradients, global average pool), ties and NaN, aliasing,
 * cross-entropy with label smoothing and bad labels, argument errors.
 * Batch norm has test_norm_cuda.c, SGD test_sgd_cuda.c.
 *
 * Mixed precision: with e->act bf16 / f16 (train/ops/ops.h's table) relu, add,
 * max pool, gap run on inputs rounded to the type first on the host, and
 * must return ref's f32 result on those inputs rounded to nearest even -
 * bit for bit, as each kernel computes ref's f32 value and rounds it once
 * (the host rounding is cuda_testutil.h's, checked in test_amp_cuda.c). fc
 * and xent are f32 whatever the type. sl_xent_acc_cuda (the step's loss on
 * the device) against sl_xent_fwd_bwd_cuda, scaled and accumulated.
 *
 * The ops take device pointers; the "hg_" adaptors below give them ref's
 * host interface (upload in e->act, run, download), so one comparison loop
 * serves both. Skips without a GPU or in a build without the cuda backend;
 * the argument checks run anyway, as they never touch the device. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

#ifndef SLUICE_TRAIN_CUDA
Test(train_ops_cuda, ops_built_without_cuda)
{
    cr_skip_test("built without CUDA (the cuda backend needs CUDA and cuDNN)");
}
#else
#include "train/cuda_testutil.h"

/* ------------------------------------------------------------ host helpers */

static void assert_same_i32(const int32_t *got, const int32_t *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s[%lld]: got %d want %d", what, (long long)i, got[i],
                     want[i]);
}

static void ref_exec(sl_exec *e)
{
    cr_assert_eq(sl_exec_init(e, SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
}

/* ------------------------------------------- host adaptors of the cuda ops */
/* Inputs uploaded, outputs poisoned (NaN) then downloaded on success;
 * in/out arrays (running statistics) downloaded always, so a failed call
 * shows whether it wrote them. */

/* Activations (e->act) go up and come back through these. */
static void *up_a(const sl_exec *e, const float *h, int64_t n) { return tg_upa(h, n, e->act); }
static void *new_a(const sl_exec *e, int64_t n) { return tg_newa(n, e->act); }
static void down_a(const sl_exec *e, float *h, const void *d, int64_t n)
{
    tg_downa(h, d, n, e->act);
}

static int hg_relu_fwd(sl_exec *e, int64_t n, const float *x, float *y)
{
    void *dx = up_a(e, x, n), *dy = new_a(e, n);
    tg_ready();
    int rc = sl_relu_fwd_cuda(e, n, dx, dy);
    if (rc == SL_OK)
        down_a(e, y, dy, n);
    tg_free(dx), tg_free(dy);
    return rc;
}

static int hg_relu_bwd(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    void *d_y = up_a(e, y, n), *d_dy = up_a(e, dy, n), *d_dx = new_a(e, n);
    tg_ready();
    int rc = sl_relu_bwd_cuda(e, n, d_y, d_dy, d_dx);
    if (rc == SL_OK)
        down_a(e, dx, d_dx, n);
    tg_free(d_y), tg_free(d_dy), tg_free(d_dx);
    return rc;
}

static int hg_add(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    void *da = up_a(e, a, n), *db = up_a(e, b, n), *dy = new_a(e, n);
    tg_ready();
    int rc = sl_add_cuda(e, n, da, db, dy);
    if (rc == SL_OK)
        down_a(e, y, dy, n);
    tg_free(da), tg_free(db), tg_free(dy);
    return rc;
}

static int64_t pool_nx(const sl_pool_shape *sh)
{
    return (int64_t)sh->n * sh->h * sh->w * sh->c;
}

static int64_t pool_ny(const sl_pool_shape *sh)
{
    return (int64_t)sh->n * sh->p * sh->q * sh->c;
}

static int hg_maxpool_fwd(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                          int32_t *argmax)
{
    int64_t nx = pool_nx(sh), ny = pool_ny(sh);
    void *dx = up_a(e, x, nx), *dy = new_a(e, ny);
    int32_t *da = tg_alloc((size_t)ny * sizeof(int32_t));
    tg_ready();
    int rc = sl_maxpool_fwd_cuda(e, sh, dx, dy, da);
    if (rc == SL_OK)
        down_a(e, y, dy, ny), tg_down(argmax, da, ny, sizeof(int32_t));
    tg_free(dx), tg_free(dy), tg_free(da);
    return rc;
}

static int hg_maxpool_bwd(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                          const int32_t *argmax, float *dx)
{
    int64_t nx = pool_nx(sh), ny = pool_ny(sh);
    void *d_dy = up_a(e, dy, ny), *d_dx = new_a(e, nx);
    int32_t *da = tg_up(argmax, ny, sizeof(int32_t));
    tg_ready();
    int rc = sl_maxpool_bwd_cuda(e, sh, d_dy, da, d_dx);
    if (rc == SL_OK)
        down_a(e, dx, d_dx, nx);
    tg_free(d_dy), tg_free(d_dx), tg_free(da);
    return rc;
}

static int hg_gap_fwd(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    void *dx = up_a(e, x, (int64_t)n * hw * c);
    float *dy = tg_newf((int64_t)n * c); /* y is f32 */
    tg_ready();
    int rc = sl_gap_fwd_cuda(e, n, hw, c, dx, dy);
    if (rc == SL_OK)
        tg_downf(y, dy, (int64_t)n * c);
    tg_free(dx), tg_free(dy);
    return rc;
}

static int hg_gap_bwd(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    float *d_dy = tg_upf(dy, (int64_t)n * c); /* dy is f32 */
    void *d_dx = new_a(e, (int64_t)n * hw * c);
    tg_ready();
    int rc = sl_gap_bwd_cuda(e, n, hw, c, d_dy, d_dx);
    if (rc == SL_OK)
        down_a(e, dx, d_dx, (int64_t)n * hw * c);
    tg_free(d_dy), tg_free(d_dx);
    return rc;
}

static int hg_fc_fwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                     const float *b, float *y)
{
    float *dx = tg_upf(x, (int64_t)n * in), *dw = tg_upf(w, (int64_t)out * in),
          *db = tg_upf(b, out), *dy = tg_newf((int64_t)n * out);
    tg_ready();
    int rc = sl_fc_fwd_cuda(e, n, in, out, dx, dw, db, dy);
    if (rc == SL_OK)
        tg_downf(y, dy, (int64_t)n * out);
    tg_free(dx), tg_free(dw), tg_free(db), tg_free(dy);
    return rc;
}

static int hg_fc_bwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db)
{
    float *d_x = tg_upf(x, (int64_t)n * in), *d_w = tg_upf(w, (int64_t)out * in),
          *d_dy = tg_upf(dy, (int64_t)n * out), *d_dx = dx ? tg_newf((int64_t)n * in) : NULL,
          *d_dw = tg_newf((int64_t)out * in), *d_db = tg_newf(out);
    tg_ready();
    int rc = sl_fc_bwd_cuda(e, n, in, out, d_x, d_w, d_dy, d_dx, d_dw, d_db);
    if (rc == SL_OK) {
        if (dx)
            tg_downf(dx, d_dx, (int64_t)n * in);
        tg_downf(dw, d_dw, (int64_t)out * in), tg_downf(db, d_db, out);
    }
    tg_free(d_x), tg_free(d_w), tg_free(d_dy), tg_free(d_dx), tg_free(d_dw), tg_free(d_db);
    return rc;
}

static int hg_xent(sl_exec *e, int n, int classes, const float *logits, const int32_t *labels,
                   float smoothing, float *loss, float *dlogits, int *correct)
{
    int64_t nl = n > 0 && classes > 0 ? (int64_t)n * classes : 0;
    float *dl = tg_upf(logits, nl), *dd = tg_newf(nl);
    int32_t *dlab = tg_up(labels, n, sizeof(int32_t));
    tg_ready();
    int rc = sl_xent_fwd_bwd_cuda(e, n, classes, dl, dlab, smoothing, loss, dd, correct);
    if (rc == SL_OK)
        tg_downf(dlogits, dd, nl);
    tg_free(dl), tg_free(dd), tg_free(dlab);
    return rc;
}

/* The act and linear ops behind ref's host interface. */
static const sl_ops hg_ops = {
    .name = "cuda",
    .relu_fwd = hg_relu_fwd, .relu_bwd = hg_relu_bwd, .add = hg_add,
    .maxpool_fwd = hg_maxpool_fwd, .maxpool_bwd = hg_maxpool_bwd,
    .gap_fwd = hg_gap_fwd, .gap_bwd = hg_gap_bwd, .fc_fwd = hg_fc_fwd, .fc_bwd = hg_fc_bwd,
    .xent_fwd_bwd = hg_xent,
};

/* ------------------------------------------------------- relu, add */

/* Values with the edge cases: NaN, +-0, +-inf, negatives, denormals. */
static float *edgy(int64_t n, uint64_t seed)
{
    static const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, INFINITY, -INFINITY};
    float *p = frand(n, seed, -2, 2);
    uint64_t st = seed * 3 + 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = tu_rand(&st) % 16;
        if (r < 6)
            p[i] = special[r];
        else if (r == 6)
            p[i] = NAN;
    }
    return p;
}

Test(train_ops_cuda, relu_add_match_ref_bitwise)
{
    static const int64_t sizes[] = {1, 3, 1000 + 7, (1 << 20) + 3};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int64_t n = sizes[t];
        float *a = edgy(n, 10 + t), *b = edgy(n, 20 + t), *wr = falloc(n), *wg = falloc(n);
        const sl_exec *es[] = {&er, &eg};
        float *outs[] = {wr, wg};
        for (int k = 0; k < 2; k++)
            cr_assert_eq(es[k]->ops->relu_fwd((sl_exec *)es[k], n, a, outs[k]), SL_OK, "%s",
                         sl_errmsg());
        assert_same(wg, wr, n, "relu_fwd");
        float *y = fdup(wr, n); /* relu(a) as the saved output; dy = b */
        for (int k = 0; k < 2; k++)
            cr_assert_eq(es[k]->ops->relu_bwd((sl_exec *)es[k], n, y, b, outs[k]), SL_OK, "%s",
                         sl_errmsg());
        assert_same(wg, wr, n, "relu_bwd");
        for (int k = 0; k < 2; k++)
            cr_assert_eq(es[k]->ops->add((sl_exec *)es[k], n, a, b, outs[k]), SL_OK, "%s",
                         sl_errmsg());
        assert_same(wg, wr, n, "add");
        free(a), free(b), free(y), free(wr), free(wg);
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* y may alias x (relu), dx may alias dy (relu_bwd), y may alias a or b. */
Test(train_ops_cuda, relu_add_in_place)
{
    const int64_t n = 4099;
    sl_exec er, eg;
    tg_open(&eg, NULL);
    ref_exec(&er);
    float *a = edgy(n, 5), *b = edgy(n, 6), *want = falloc(n), *got = falloc(n);
    float *da = tg_upf(a, n), *db = tg_upf(b, n);
    tg_ready();
    cr_assert_eq(sl_relu_fwd_ref(&er, n, a, want), SL_OK);
    cr_assert_eq(sl_relu_fwd_cuda(&eg, n, da, da), SL_OK, "%s", sl_errmsg());
    tg_downf(got, da, n);
    assert_same(got, want, n, "relu_fwd y = x");
    /* now da holds y; dx = dy in db */
    float *dx = falloc(n);
    cr_assert_eq(sl_relu_bwd_ref(&er, n, want, b, dx), SL_OK);
    cr_assert_eq(sl_relu_bwd_cuda(&eg, n, da, db, db), SL_OK, "%s", sl_errmsg());
    tg_downf(got, db, n);
    assert_same(got, dx, n, "relu_bwd dx = dy");
    /* add: y = a (da = relu(a), db = relu_bwd) then y = b */
    float *sum = falloc(n);
    cr_assert_eq(sl_add_ref(&er, n, want, dx, sum), SL_OK);
    cr_assert_eq(sl_add_cuda(&eg, n, da, db, da), SL_OK, "%s", sl_errmsg());
    tg_downf(got, da, n);
    assert_same(got, sum, n, "add y = a");
    cr_assert_eq(sl_add_ref(&er, n, sum, dx, want), SL_OK);
    cr_assert_eq(sl_add_cuda(&eg, n, da, db, db), SL_OK, "%s", sl_errmsg());
    tg_downf(got, db, n);
    assert_same(got, want, n, "add y = b");
    /* n = 0 is a no-op */
    cr_assert_eq(sl_relu_fwd_cuda(&eg, 0, da, da), SL_OK, "%s", sl_errmsg());
    tg_free(da), tg_free(db);
    free(a), free(b), free(want), free(got), free(dx), free(sum);
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* ---------------------------------------------------------------- max pool */

Test(train_ops_cuda, maxpool_matches_ref_exactly)
{
    /* n, h, w, c, window, stride, pad: the ResNet stem (3x3/2 pad 1) on
     * odd sizes, overlapping stride 1, no padding, window 1, a big one */
    static const int shapes[][7] = {
        {1, 1, 1, 1, 3, 2, 1},   {2, 7, 7, 3, 3, 2, 1},    {3, 9, 11, 17, 3, 2, 1},
        {1, 5, 4, 64, 3, 2, 1},  {2, 9, 7, 3, 3, 1, 1},    {1, 8, 8, 5, 2, 2, 0},
        {2, 6, 5, 7, 5, 1, 2},   {1, 3, 3, 2, 1, 1, 0},    {1, 10, 10, 3, 3, 3, 0},
        {4, 113, 113, 64, 3, 2, 1},
    };
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *s = shapes[t];
        sl_pool_shape sh;
        cr_assert_eq(sl_pool_shape_init(&sh, s[0], s[1], s[2], s[3], s[4], s[5], s[6]), SL_OK,
                     "%s", sl_errmsg());
        int64_t nx = pool_nx(&sh), ny = pool_ny(&sh);
        cr_log_info("maxpool n%d %dx%d c%d %dx%d/%d pad %d -> %dx%d", sh.n, sh.h, sh.w, sh.c,
                    sh.r, sh.r, sh.stride, sh.pad, sh.p, sh.q);
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: values on a coarse grid (many ties: the first maximum
             * must win); pass 1: some NaN and -inf among them */
            uint64_t st = 100 + t * 2 + pass;
            float *x = falloc(nx), *dy = frand(ny, 7 + t, -1, 1);
            for (int64_t i = 0; i < nx; i++) {
                x[i] = (float)(int)urand(&st, -4, 4) * 0.5f;
                if (pass && tu_rand(&st) % 29 == 0)
                    x[i] = tu_rand(&st) % 2 ? NAN : -INFINITY;
            }
            float *yr = falloc(ny), *yg = falloc(ny), *dxr = falloc(nx), *dxg = falloc(nx);
            int32_t *ar = malloc((size_t)ny * 4), *ag = malloc((size_t)ny * 4);
            cr_assert(ar && ag);
            cr_assert_eq(er.ops->maxpool_fwd(&er, &sh, x, yr, ar), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(eg.ops->maxpool_fwd(&eg, &sh, x, yg, ag), SL_OK, "%s", sl_errmsg());
            assert_same_i32(ag, ar, ny, "argmax");
            assert_same(yg, yr, ny, "y");
            cr_assert_eq(er.ops->maxpool_bwd(&er, &sh, dy, ar, dxr), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(eg.ops->maxpool_bwd(&eg, &sh, dy, ag, dxg), SL_OK, "%s", sl_errmsg());
            /* the gather adds in ref's scatter order: the same bits */
            assert_same(dxg, dxr, nx, "dx");
            free(x), free(dy), free(yr), free(yg), free(dxr), free(dxg), free(ar), free(ag);
        }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* ----------------------------------------------------- global average pool */

Test(train_ops_cuda, gap_matches_ref_exactly)
{
    static const int ns[] = {1, 3, 33}, hws[] = {1, 49, 50}, cs[] = {1, 17, 513, 2048};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                int n = ns[i], hw = hws[j], c = cs[k];
                int64_t nx = (int64_t)n * hw * c, ny = (int64_t)n * c;
                float *x = frand(nx, 1 + i * 9 + j * 3 + k, -3, 5), *dy = frand(ny, 99 + k, -1, 1);
                float *yr = falloc(ny), *yg = falloc(ny), *dxr = falloc(nx), *dxg = falloc(nx);
                cr_assert_eq(er.ops->gap_fwd(&er, n, hw, c, x, yr), SL_OK);
                cr_assert_eq(eg.ops->gap_fwd(&eg, n, hw, c, x, yg), SL_OK, "%s", sl_errmsg());
                /* the same double sum in the same order */
                assert_same(yg, yr, ny, "gap y");
                cr_assert_eq(er.ops->gap_bwd(&er, n, hw, c, dy, dxr), SL_OK);
                cr_assert_eq(eg.ops->gap_bwd(&eg, n, hw, c, dy, dxg), SL_OK, "%s", sl_errmsg());
                assert_same(dxg, dxr, nx, "gap dx");
                free(x), free(dy), free(yr), free(yg), free(dxr), free(dxg);
            }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* ------------------------------------------------- bf16 / f16 activations */

static const sl_dtype lowp[2] = {SL_DTYPE_BF16, SL_DTYPE_F16};

/* ref's f32 outputs rounded to t: what the kernels must return. */
static void rounded(float *v, int64_t n, sl_dtype t) { tg_round_all(v, n, t); }

Test(train_ops_cuda, relu_add_bf16_f16_bitwise)
{
    static const int64_t sizes[] = {1, 3, 1000 + 7, (1 << 20) + 3};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int k = 0; k < 2; k++) {
        sl_dtype t = lowp[k];
        tg_set_act(&eg, t);
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            int64_t n = sizes[z];
            float *a = edgy(n, 30 + z), *b = edgy(n, 40 + z), *wr = falloc(n), *wg = falloc(n);
            /* some large values: their f32 sums pass 65504 and must round
             * to inf in f16 (ties and carries into the exponent elsewhere) */
            for (int64_t i = 0; i < n; i++)
                if (i % 11 == 3)
                    a[i] *= 2e4f, b[i] *= 2e4f;
            tg_round_all(a, n, t), tg_round_all(b, n, t);
            cr_log_info("relu/add %s n %lld", tg_type_name(t), (long long)n);
            cr_assert_eq(sl_relu_fwd_ref(&er, n, a, wr), SL_OK);
            cr_assert_eq(eg.ops->relu_fwd(&eg, n, a, wg), SL_OK, "%s", sl_errmsg());
            rounded(wr, n, t);
            assert_same(wg, wr, n, "relu_fwd");
            float *y = fdup(wr, n);
            cr_assert_eq(sl_relu_bwd_ref(&er, n, y, b, wr), SL_OK);
            cr_assert_eq(eg.ops->relu_bwd(&eg, n, y, b, wg), SL_OK, "%s", sl_errmsg());
            rounded(wr, n, t);
            assert_same(wg, wr, n, "relu_bwd");
            cr_assert_eq(sl_add_ref(&er, n, a, b, wr), SL_OK);
            cr_assert_eq(eg.ops->add(&eg, n, a, b, wg), SL_OK, "%s", sl_errmsg());
            rounded(wr, n, t);
            assert_same(wg, wr, n, "add");
            free(a), free(b), free(y), free(wr), free(wg);
        }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* In place in bf16: y = x, dx = dy, y = a (2-byte elements, same rules). */
Test(train_ops_cuda, relu_add_in_place_bf16)
{
    const int64_t n = 4099;
    const sl_dtype t = SL_DTYPE_BF16;
    sl_exec er, eg;
    tg_open(&eg, NULL);
    tg_set_act(&eg, t);
    ref_exec(&er);
    float *a = edgy(n, 15), *b = edgy(n, 16), *want = falloc(n), *got = falloc(n);
    tg_round_all(a, n, t), tg_round_all(b, n, t);
    void *da = tg_upa(a, n, t), *db = tg_upa(b, n, t);
    tg_ready();
    cr_assert_eq(sl_relu_fwd_ref(&er, n, a, want), SL_OK);
    cr_assert_eq(sl_relu_fwd_cuda(&eg, n, da, da), SL_OK, "%s", sl_errmsg());
    tg_downa(got, da, n, t);
    assert_same(got, want, n, "relu_fwd y = x");
    cr_assert_eq(sl_relu_bwd_ref(&er, n, want, b, a), SL_OK); /* a: the wanted dx */
    cr_assert_eq(sl_relu_bwd_cuda(&eg, n, da, db, db), SL_OK, "%s", sl_errmsg());
    tg_downa(got, db, n, t);
    assert_same(got, a, n, "relu_bwd dx = dy");
    cr_assert_eq(sl_add_ref(&er, n, want, a, b), SL_OK);
    rounded(b, n, t);
    cr_assert_eq(sl_add_cuda(&eg, n, da, db, da), SL_OK, "%s", sl_errmsg());
    tg_downa(got, da, n, t);
    assert_same(got, b, n, "add y = a");
    tg_free(da), tg_free(db);
    free(a), free(b), free(want), free(got);
    tg_close(&eg);
    sl_exec_fini(&er);
}

Test(train_ops_cuda, maxpool_bf16_f16_bitwise)
{
    static const int shapes[][7] = {
        {1, 1, 1, 1, 3, 2, 1}, {2, 7, 7, 3, 3, 2, 1}, {3, 9, 11, 17, 3, 2, 1},
        {2, 6, 5, 7, 5, 1, 2}, {1, 10, 10, 3, 3, 3, 0}, {4, 57, 57, 64, 3, 2, 1},
    };
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int k = 0; k < 2; k++) {
        sl_dtype t = lowp[k];
        tg_set_act(&eg, t);
        for (size_t z = 0; z < sizeof shapes / sizeof shapes[0]; z++) {
            const int *s = shapes[z];
            sl_pool_shape sh;
            cr_assert_eq(sl_pool_shape_init(&sh, s[0], s[1], s[2], s[3], s[4], s[5], s[6]),
                         SL_OK, "%s", sl_errmsg());
            int64_t nx = pool_nx(&sh), ny = pool_ny(&sh);
            cr_log_info("maxpool %s n%d %dx%d c%d", tg_type_name(t), sh.n, sh.h, sh.w, sh.c);
            uint64_t st = 200 + z;
            /* ties (a coarse grid, exact in both types), some NaN and -inf;
             * dy rounded to t */
            float *x = falloc(nx), *dy = frand(ny, 9 + z, -1, 1);
            for (int64_t i = 0; i < nx; i++) {
                x[i] = (float)(int)urand(&st, -4, 4) * 0.5f;
                if (tu_rand(&st) % 31 == 0)
                    x[i] = tu_rand(&st) % 2 ? NAN : -INFINITY;
            }
            tg_round_all(dy, ny, t);
            float *yr = falloc(ny), *yg = falloc(ny), *dxr = falloc(nx), *dxg = falloc(nx);
            int32_t *ar = malloc((size_t)ny * 4), *ag = malloc((size_t)ny * 4);
            cr_assert(ar && ag);
            cr_assert_eq(er.ops->maxpool_fwd(&er, &sh, x, yr, ar), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(eg.ops->maxpool_fwd(&eg, &sh, x, yg, ag), SL_OK, "%s", sl_errmsg());
            assert_same_i32(ag, ar, ny, "argmax");
            assert_same(yg, yr, ny, "y"); /* a value of x: exact */
            cr_assert_eq(er.ops->maxpool_bwd(&er, &sh, dy, ar, dxr), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(eg.ops->maxpool_bwd(&eg, &sh, dy, ag, dxg), SL_OK, "%s", sl_errmsg());
            rounded(dxr, nx, t); /* f32 sums in ref's order, rounded once */
            assert_same(dxg, dxr, nx, "dx");
            free(x), free(dy), free(yr), free(yg), free(dxr), free(dxg), free(ar), free(ag);
        }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* gap_fwd: x in the type, y f32 (the same double sum as ref); gap_bwd: dy
 * f32, dx ref's f32 quotient rounded. */
Test(train_ops_cuda, gap_bf16_f16_bitwise)
{
    static const int ns[] = {1, 3, 33}, hws[] = {1, 49}, cs[] = {1, 17, 2048};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int k = 0; k < 2; k++) {
        sl_dtype t = lowp[k];
        tg_set_act(&eg, t);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++)
                for (int z = 0; z < 3; z++) {
                    int n = ns[i], hw = hws[j], c = cs[z];
                    int64_t nx = (int64_t)n * hw * c, ny = (int64_t)n * c;
                    float *x = frand(nx, 60 + i * 9 + j * 3 + z, -3, 5);
                    float *dy = frand(ny, 80 + z, -1, 1);
                    tg_round_all(x, nx, t);
                    float *yr = falloc(ny), *yg = falloc(ny), *dxr = falloc(nx),
                          *dxg = falloc(nx);
                    cr_assert_eq(er.ops->gap_fwd(&er, n, hw, c, x, yr), SL_OK);
                    cr_assert_eq(eg.ops->gap_fwd(&eg, n, hw, c, x, yg), SL_OK, "%s",
                                 sl_errmsg());
                    assert_same(yg, yr, ny, "gap y (f32)");
                    cr_assert_eq(er.ops->gap_bwd(&er, n, hw, c, dy, dxr), SL_OK);
                    cr_assert_eq(eg.ops->gap_bwd(&eg, n, hw, c, dy, dxg), SL_OK, "%s",
                                 sl_errmsg());
                    rounded(dxr, nx, t);
                    assert_same(dxg, dxr, nx, "gap dx");
                    free(x), free(dy), free(yr), free(yg), free(dxr), free(dxg);
                }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* fc and xent are f32 whatever e->act says: the same bits as with f32. */
Test(train_ops_cuda, fc_xent_ignore_act)
{
    const int n = 33, in = 17, out = 10;
    float *x = frand(n * in, 1, -1, 1), *w = frand(out * in, 2, -1, 1), *b = frand(out, 3, -1, 1),
          *dy = frand(n * out, 4, -1, 1);
    int32_t lab[33];
    for (int i = 0; i < n; i++)
        lab[i] = (i * 3) % out;
    float *r[2][5];
    float loss[2];
    int correct[2];
    sl_exec eg;
    tg_open(&eg, &hg_ops);
    for (int k = 0; k < 2; k++) {
        tg_set_act(&eg, k ? SL_DTYPE_BF16 : SL_DTYPE_F32);
        r[k][0] = falloc(n * out), r[k][1] = falloc(n * in), r[k][2] = falloc(out * in);
        r[k][3] = falloc(out), r[k][4] = falloc(n * out);
        cr_assert_eq(eg.ops->fc_fwd(&eg, n, in, out, x, w, b, r[k][0]), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(eg.ops->fc_bwd(&eg, n, in, out, x, w, dy, r[k][1], r[k][2], r[k][3]), SL_OK,
                     "%s", sl_errmsg());
        cr_assert_eq(eg.ops->xent_fwd_bwd(&eg, n, out, r[k][0], lab, 0.1f, &loss[k], r[k][4],
                                          &correct[k]), SL_OK, "%s", sl_errmsg());
    }
    static const int64_t len[5] = {33 * 10, 33 * 17, 10 * 17, 10, 33 * 10};
    for (int j = 0; j < 5; j++)
        assert_same(r[1][j], r[0][j], len[j], "fc / xent output with act bf16");
    cr_assert(loss[0] == loss[1] && correct[0] == correct[1]);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 5; j++)
            free(r[k][j]);
    free(x), free(w), free(b), free(dy);
    tg_close(&eg);
}

/* A value of e->act that is no sl_dtype: refused, naming the op. */
Test(train_ops_cuda, bad_activation_type)
{
    sl_exec eg;
    tg_open(&eg, NULL);
    float *d = tg_newf(64);
    tg_ready();
    eg.act = (sl_dtype)5;
    cr_assert_eq(sl_relu_fwd_cuda(&eg, 16, d, d + 16), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_relu_fwd_cuda: activation type 5"), "%s", sl_errmsg());
    cr_assert_eq(sl_gap_fwd_cuda(&eg, 1, 4, 4, d, d + 16), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_gap_fwd_cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_exec_set_act(&eg, (sl_dtype)5), SL_EINVAL);
    tg_free(d);
    tg_close(&eg);
}

/* ------------------------------------------------------------- fully connected */

Test(train_ops_cuda, fc_matches_ref)
{
    static const int ns[] = {1, 3, 33}, ins[] = {1, 17, 2048}, outs[] = {1, 10, 1000};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++) {
                int n = ns[i], in = ins[j], out = outs[k];
                uint64_t seed = 1000 + 100 * i + 10 * j + k;
                float *x = frand((int64_t)n * in, seed, -1, 1);
                float *w = frand((int64_t)out * in, seed + 1, -1, 1);
                float *b = frand(out, seed + 2, -1, 1), *dy = frand((int64_t)n * out, seed + 3, -1, 1);
                float *yr = falloc((int64_t)n * out), *yg = falloc((int64_t)n * out);
                float *dxr = falloc((int64_t)n * in), *dxg = falloc((int64_t)n * in);
                float *dwr = falloc((int64_t)out * in), *dwg = falloc((int64_t)out * in);
                float *dbr = falloc(out), *dbg = falloc(out);
                cr_log_info("fc n %d in %d out %d", n, in, out);
                /* fp32 GEMMs (SLUICE_CUDA_TF32=0) against double sums of K
                 * terms in (-1, 1): rounding grows like sqrt(K) */
                cr_assert_eq(er.ops->fc_fwd(&er, n, in, out, x, w, b, yr), SL_OK);
                cr_assert_eq(eg.ops->fc_fwd(&eg, n, in, out, x, w, b, yg), SL_OK, "%s",
                             sl_errmsg());
                tu_assert_close(yg, yr, (int64_t)n * out, 2e-6 * sqrt((double)in + 1), 1e-5, "y");
                cr_assert_eq(er.ops->fc_bwd(&er, n, in, out, x, w, dy, dxr, dwr, dbr), SL_OK);
                cr_assert_eq(eg.ops->fc_bwd(&eg, n, in, out, x, w, dy, dxg, dwg, dbg), SL_OK, "%s",
                             sl_errmsg());
                tu_assert_close(dxg, dxr, (int64_t)n * in, 2e-6 * sqrt((double)out), 1e-5, "dx");
                tu_assert_close(dwg, dwr, (int64_t)out * in, 2e-6 * sqrt((double)n), 1e-5, "dw");
                tu_assert_close(dbg, dbr, out, 1e-7, 1e-6, "db");
                /* dx may be NULL: dw and db as before */
                memset(dwg, 0, (size_t)out * in * 4), memset(dbg, 0, (size_t)out * 4);
                cr_assert_eq(eg.ops->fc_bwd(&eg, n, in, out, x, w, dy, NULL, dwg, dbg), SL_OK, "%s",
                             sl_errmsg());
                tu_assert_close(dwg, dwr, (int64_t)out * in, 2e-6 * sqrt((double)n), 1e-5,
                             "dw (dx NULL)");
                tu_assert_close(dbg, dbr, out, 1e-7, 1e-6, "db (dx NULL)");
                free(x), free(w), free(b), free(dy), free(yr), free(yg), free(dxr), free(dxg);
                free(dwr), free(dwg), free(dbr), free(dbg);
            }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* ----------------------------------------------------------- cross-entropy */

Test(train_ops_cuda, xent_matches_ref)
{
    static const int ns[] = {1, 3, 33, 256}, ks[] = {1, 10, 1000};
    static const float smooth[] = {0.0f, 0.1f, 1.0f};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int s = 0; s < 3; s++) {
                int n = ns[i], k = ks[j];
                int64_t nl = (int64_t)n * k;
                uint64_t st = 500 + 31 * i + 7 * j + s;
                float *l = falloc(nl), *dr = falloc(nl), *dg = falloc(nl);
                int32_t *lab = malloc((size_t)n * 4);
                cr_assert(lab);
                for (int r = 0; r < n; r++) {
                    /* row kinds: plain, far from zero (exp would overflow
                     * in float without the max shift), coarse (ties) */
                    float off = r % 3 == 1 ? 80.0f : 0.0f;
                    for (int c = 0; c < k; c++) {
                        float v = urand(&st, -5, 5);
                        l[(int64_t)r * k + c] = r % 3 == 2 ? (float)(int)v : off + v;
                    }
                    lab[r] = (int32_t)(tu_rand(&st) % (uint64_t)k);
                }
                float lr_ = -1, lg = -2;
                int cr_ = -1, cg = -2;
                cr_assert_eq(er.ops->xent_fwd_bwd(&er, n, k, l, lab, smooth[s], &lr_, dr, &cr_),
                             SL_OK, "%s", sl_errmsg());
                cr_assert_eq(eg.ops->xent_fwd_bwd(&eg, n, k, l, lab, smooth[s], &lg, dg, &cg),
                             SL_OK, "%s", sl_errmsg());
                cr_log_info("xent n %d classes %d smoothing %g: loss %g correct %d", n, k,
                            (double)smooth[s], (double)lr_, cr_);
                cr_assert(fabs((double)lg - lr_) <= 1e-7 + 1e-6 * fabs(lr_),
                          "loss %.9g want %.9g", (double)lg, (double)lr_);
                cr_assert_eq(cg, cr_, "correct %d want %d", cg, cr_);
                tu_assert_close(dg, dr, nl, 1e-9, 1e-6, "dlogits");
                /* correct may be NULL */
                cr_assert_eq(eg.ops->xent_fwd_bwd(&eg, n, k, l, lab, smooth[s], &lg, dg, NULL),
                             SL_OK, "%s", sl_errmsg());
                free(l), free(dr), free(dg), free(lab);
            }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* A label outside [0, classes): SL_EINVAL naming the first such row, and
 * nothing written (dlogits, loss, correct); the next good call works. */
Test(train_ops_cuda, xent_bad_label)
{
    const int n = 12, k = 10;
    sl_exec eg;
    tg_open(&eg, NULL);
    float *l = frand((int64_t)n * k, 3, -2, 2), *sentinel = falloc((int64_t)n * k),
          *got = falloc((int64_t)n * k);
    int32_t lab[12];
    for (int r = 0; r < n; r++)
        lab[r] = r % k;
    lab[9] = k, lab[5] = -1; /* row 5 comes first */
    for (int64_t i = 0; i < (int64_t)n * k; i++)
        sentinel[i] = 1234.5f;
    float *dl = tg_upf(l, (int64_t)n * k), *dd = tg_upf(sentinel, (int64_t)n * k);
    int32_t *dlab = tg_up(lab, n, 4);
    tg_ready();
    float loss = 7;
    int correct = 7;
    int rc = sl_xent_fwd_bwd_cuda(&eg, n, k, dl, dlab, 0.1f, &loss, dd, &correct);
    cr_assert_eq(rc, SL_EINVAL, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "sl_xent_fwd_bwd_cuda: row 5: label -1 outside [0, 10)"),
              "%s", sl_errmsg());
    cr_assert(loss == 7 && correct == 7, "host outputs untouched");
    tg_downf(got, dd, (int64_t)n * k);
    assert_same(got, sentinel, (int64_t)n * k, "dlogits untouched");
    /* row 9 alone */
    lab[5] = 0;
    tg_free(dlab);
    dlab = tg_up(lab, n, 4);
    tg_ready();
    rc = sl_xent_fwd_bwd_cuda(&eg, n, k, dl, dlab, 0.1f, &loss, dd, &correct);
    cr_assert_eq(rc, SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "row 9: label 10 outside [0, 10)"), "%s", sl_errmsg());
    /* fixed: works, and matches ref */
    lab[9] = 3;
    tg_free(dlab);
    dlab = tg_up(lab, n, 4);
    tg_ready();
    cr_assert_eq(sl_xent_fwd_bwd_cuda(&eg, n, k, dl, dlab, 0.1f, &loss, dd, &correct), SL_OK, "%s",
                 sl_errmsg());
    sl_exec er;
    ref_exec(&er);
    float lr_, *dr = falloc((int64_t)n * k);
    int cr_;
    cr_assert_eq(sl_xent_fwd_bwd_ref(&er, n, k, l, lab, 0.1f, &lr_, dr, &cr_), SL_OK);
    cr_assert(fabs((double)loss - lr_) <= 1e-6 * fabs(lr_) && correct == cr_);
    tg_free(dl), tg_free(dd), tg_free(dlab);
    free(l), free(sentinel), free(got), free(dr);
    sl_exec_fini(&er);
    tg_close(&eg);
}

/* ------------------------------------------- cross-entropy on the device */

/* sl_xent_acc_cuda against sl_xent_fwd_bwd_cuda on the same logits: the
 * accumulated mean loss (a double: the float loss is its rounding), the
 * count, dlogits bit for bit, and scaled by a loss scale: a power of two
 * gives exactly scale * dlogits, any scale the f32 product. */
Test(train_ops_cuda, xent_acc_matches_xent)
{
    static const int ns[] = {1, 3, 33, 256}, ks[] = {1, 10, 1000};
    static const float smooth[] = {0.0f, 0.1f};
    static const float scales[] = {65536.0f, 3.5f};
    sl_exec eg;
    tg_open(&eg, NULL);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int sm = 0; sm < 2; sm++) {
                int n = ns[i], k = ks[j];
                int64_t nl = (int64_t)n * k;
                uint64_t st = 900 + 31 * i + 7 * j + sm;
                float *l = falloc(nl), *d1 = falloc(nl), *d2 = falloc(nl);
                int32_t *lab = malloc((size_t)n * 4);
                cr_assert(lab);
                for (int64_t e = 0; e < nl; e++)
                    l[e] = urand(&st, -5, 5) + (e / k % 3 == 1 ? 80.0f : 0.0f);
                for (int r = 0; r < n; r++)
                    lab[r] = (int32_t)(tu_rand(&st) % (uint64_t)k);
                float *d_l = tg_upf(l, nl), *d_dl = tg_newf(nl), *d_s = tg_newf(1);
                int32_t *d_lab = tg_up(lab, n, 4);
                double zero[2] = {0, 0}, acc[2];
                double *d_acc = tg_up(zero, 2, sizeof(double));
                tg_ready();
                float loss = -1;
                int correct = -1;
                cr_assert_eq(sl_xent_fwd_bwd_cuda(&eg, n, k, d_l, d_lab, smooth[sm], &loss, d_dl,
                                                  &correct), SL_OK, "%s", sl_errmsg());
                tg_downf(d1, d_dl, nl);
                /* twice into the same accumulator, no scale */
                for (int rep = 0; rep < 2; rep++) {
                    cr_assert_eq(cudaMemset(d_dl, 0xff, (size_t)nl * 4), cudaSuccess);
                    tg_ready();
                    cr_assert_eq(sl_xent_acc_cuda(&eg, n, k, d_l, d_lab, smooth[sm], NULL, d_dl,
                                                  d_acc), SL_OK, "%s", sl_errmsg());
                    tg_downf(d2, d_dl, nl);
                    assert_same(d2, d1, nl, "dlogits (acc, no scale)");
                }
                tg_down(acc, d_acc, 2, sizeof(double));
                cr_log_info("xent_acc n %d classes %d smoothing %g: loss %g (%.17g)", n, k,
                            (double)smooth[sm], (double)loss, acc[0] / 2);
                cr_assert((float)(acc[0] / 2) == loss, "acc loss %.17g (x2) want %.9g", acc[0],
                          (double)loss);
                cr_assert(acc[1] == 2.0 * correct, "acc count %g want 2 x %d", acc[1], correct);
                for (int z = 0; z < 2; z++) {
                    cr_assert_eq(cudaMemcpy(d_s, &scales[z], 4, cudaMemcpyHostToDevice),
                                 cudaSuccess);
                    tg_ready();
                    cr_assert_eq(sl_xent_acc_cuda(&eg, n, k, d_l, d_lab, smooth[sm], d_s, d_dl,
                                                  d_acc), SL_OK, "%s", sl_errmsg());
                    tg_downf(d2, d_dl, nl);
                    for (int64_t e = 0; e < nl; e++) {
                        float want = d1[e] * scales[z];
                        cr_assert(!memcmp(&d2[e], &want, 4), "scale %g: dlogits[%lld] %a want %a",
                                  (double)scales[z], (long long)e, (double)d2[e], (double)want);
                    }
                }
                tg_down(acc, d_acc, 2, sizeof(double));
                cr_assert(fabs(acc[0] / 4 - loss) <= 1e-7 * fabs(loss) + 1e-12 &&
                              acc[1] == 4.0 * correct,
                          "the scale changes dlogits only: acc %g %g", acc[0], acc[1]);
                tg_free(d_l), tg_free(d_dl), tg_free(d_s), tg_free(d_lab), tg_free(d_acc);
                free(l), free(d1), free(d2), free(lab);
            }
    tg_close(&eg);
}

/* A bad label cannot be reported without a wait: the loss accumulator
 * turns NaN, the count does not move, dlogits are zero (no NaN towards the
 * weights). A good batch afterwards adds its count; the NaN stays. */
Test(train_ops_cuda, xent_acc_bad_label)
{
    const int n = 12, k = 10;
    sl_exec eg;
    tg_open(&eg, NULL);
    float *l = frand((int64_t)n * k, 3, -2, 2), *got = falloc((int64_t)n * k);
    int32_t lab[12];
    for (int r = 0; r < n; r++)
        lab[r] = r % k;
    lab[7] = -3;
    float *d_l = tg_upf(l, (int64_t)n * k), *d_dl = tg_newf((int64_t)n * k);
    int32_t *d_lab = tg_up(lab, n, 4);
    double acc[2] = {1.5, 4.0};
    double *d_acc = tg_up(acc, 2, sizeof(double));
    tg_ready();
    cr_assert_eq(sl_xent_acc_cuda(&eg, n, k, d_l, d_lab, 0.1f, NULL, d_dl, d_acc), SL_OK, "%s",
                 sl_errmsg());
    tg_down(acc, d_acc, 2, sizeof(double));
    cr_assert(isnan(acc[0]) && acc[1] == 4.0, "acc %g %g", acc[0], acc[1]);
    tg_downf(got, d_dl, (int64_t)n * k);
    for (int64_t i = 0; i < (int64_t)n * k; i++)
        cr_assert(got[i] == 0.0f, "dlogits[%lld] = %g", (long long)i, (double)got[i]);
    lab[7] = 7;
    tg_free(d_lab);
    d_lab = tg_up(lab, n, 4);
    tg_ready();
    cr_assert_eq(sl_xent_acc_cuda(&eg, n, k, d_l, d_lab, 0.1f, NULL, d_dl, d_acc), SL_OK, "%s",
                 sl_errmsg());
    float loss;
    int correct;
    float *d_d2 = tg_newf((int64_t)n * k);
    tg_ready();
    cr_assert_eq(sl_xent_fwd_bwd_cuda(&eg, n, k, d_l, d_lab, 0.1f, &loss, d_d2, &correct), SL_OK,
                 "%s", sl_errmsg());
    tg_down(acc, d_acc, 2, sizeof(double));
    cr_assert(isnan(acc[0]) && acc[1] == 4.0 + correct, "acc %g %g (count %d)", acc[0], acc[1],
              correct);
    tg_free(d_l), tg_free(d_dl), tg_free(d_lab), tg_free(d_acc), tg_free(d_d2);
    free(l), free(got);
    tg_close(&eg);
}

/* ---------------------------------------------------------------- errors */

/* The argument checks (the entry points', train/ops/ops.c; sl_xent_acc_cuda,
 * outside the table, has its own) come before any device work, so they run
 * without a GPU: an exec with no context must not be touched past them
 * either. */
Test(train_ops_cuda, bad_arguments)
{
    sl_exec e;
    memset(&e, 0, sizeof e);
    e.backend = SL_BACKEND_CUDA; /* no context: e.cuda = NULL */
    e.ops = &sl_ops_cuda;        /* the entry points check, then run the cuda slot */
    float f[4] = {0};
    int32_t a[4] = {0};
    float loss;
    sl_pool_shape sh;
    cr_assert_eq(sl_relu_fwd(&e, -1, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_relu_fwd: cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_add(&e, 4, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_gap_fwd(&e, 1, 0, 3, f, f), SL_EINVAL);
    cr_assert_eq(sl_gap_bwd(&e, 0, 1, 3, f, f), SL_EINVAL);
    cr_assert_eq(sl_fc_fwd(&e, 0, 3, 3, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_fc_fwd: cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_fc_bwd(&e, 1, 3, -3, f, f, f, f, f, f), SL_EINVAL);
    cr_assert_eq(sl_xent_fwd_bwd(&e, 0, 10, f, a, 0.0f, &loss, f, NULL), SL_EINVAL);
    cr_assert_eq(sl_xent_fwd_bwd(&e, 2, 10, f, a, 1.5f, &loss, f, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "label smoothing 1.5 outside [0, 1]"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_fwd_bwd(&e, 2, 10, f, a, NAN, &loss, f, NULL), SL_EINVAL);
    double acc[2];
    cr_assert_eq(sl_xent_acc_cuda(&e, 0, 10, f, a, 0.0f, NULL, f, acc), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_xent_acc_cuda: 0 rows of 10 classes"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 0, f, a, 0.0f, NULL, f, acc), SL_EINVAL);
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 10, f, a, -0.5f, f, f, acc), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "label smoothing -0.5"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 10, f, a, 0.0f, NULL, f, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no accumulator"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 10, NULL, a, 0.0f, NULL, f, acc), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_xent_acc_cuda: NULL logits"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 10, f, NULL, 0.0f, NULL, f, acc), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "NULL labels"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 10, f, a, 0.0f, NULL, NULL, acc), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "NULL dlogits"), "%s", sl_errmsg());
    cr_assert_eq(sl_xent_acc_cuda(&e, 2, 10, f, a, 0.0f, NULL, f, acc), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    /* a pool shape not from sl_pool_shape_init, and one too big for int32 */
    cr_assert_eq(sl_pool_shape_init(&sh, 1, 7, 7, 3, 3, 2, 1), SL_OK);
    sh.p++;
    cr_assert_eq(sl_maxpool_fwd(&e, &sh, f, f, a), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "bad pool geometry"), "%s", sl_errmsg());
    cr_assert_eq(sl_pool_shape_init(&sh, 1 << 12, 256, 256, 64, 3, 2, 1), SL_OK);
    cr_assert_eq(sl_maxpool_fwd(&e, &sh, NULL, NULL, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "int32 argmax"), "%s", sl_errmsg());
    cr_assert_eq(sl_maxpool_bwd(&e, &sh, NULL, NULL, NULL), SL_EINVAL);
    cr_assert_eq(sl_maxpool_fwd(&e, NULL, NULL, NULL, NULL), SL_EINVAL);
}

#endif /* SLUICE_TRAIN_CUDA */

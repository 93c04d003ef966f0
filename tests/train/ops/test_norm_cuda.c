/* tests/train/ops/test_norm_cuda.c - batch norm on the cuda backend
 * (train/ops/norm_cuda.cu) against the ref backend (norm_ref.c,
 * norm_sync_ref.c): train, eval and backward on awkward shapes with
 * atol + rtol*|ref|, two training steps of running statistics, 3.2M rows of
 * data far from zero, the sync-BN pieces (bn_fwd_apply, bn_bwd_reduce,
 * bn_bwd_apply alone; with bn_moments / merge composed over two fake
 * replicas) against bn_fwd_train / bn_bwd, and aliasing; all of it
 * again (bar the 3.2M rows) with bf16 and f16 activations. The fused ops
 * (bn_fwd_train_act, bn_bwd_act) against ref's bn -> add -> relu and
 * relu_bwd -> bn_bwd and, bit for bit, against this backend's unfused ops;
 * the one-pass statistics on hostile data; SLUICE_CUDA_FUSE; the vector
 * and scalar paths, one row and 200k rows of 64 channels.
 *
 * Mixed precision (train/ops/ops.h's table): x, y, dy, dx in e->act, every
 * per-channel array f32. Inputs are rounded to the type on the host first,
 * so ref runs on the very values the GPU sees. Each kernel computes ref's
 * f32 value (in f32, summed in another order) and rounds it once to the
 * type; ref's f32 output rounded the same way may then differ by one ulp
 * of the type where the two f32 values straddle a rounding boundary. So an
 * activation output passes when
 *     |got - round(ref)| <= atol + (rtol + 2^(1-p)) * |ref|
 * with the f32 test's atol and rtol and p = 8 (bf16) / 11 (f16)
 * significant bits (one ulp is at most 2^(1-p) of a normal value; f16
 * subnormals below 2^-14 are 2^-24 apart, which atol covers at these
 * magnitudes). The f32 outputs (statistics, sums, dgamma, dbeta) keep the
 * f32 tolerances: their inputs are exact. The kernels accumulate in f32
 * (issue 14), so means and sums are held to a few ulp of the data's spread
 * (assert_mean_close, fsum_tol), not of double sums.
 *
 * The ops take device pointers; the "hg_" adaptors below give them ref's
 * host interface (upload, run, download), so one comparison loop serves
 * both. Skips without a GPU or in a build without the cuda backend. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

/* The fused slots are the cuda and cpu tables' (the cpu's since issue 40:
 * tests/train/ops/test_bf16_cpu.c holds them to the unfused ops bit for
 * bit); the ref backend, the oracle, stays unfused. */
Test(train_ops_cuda, fused_slots_not_ref)
{
    cr_assert_null(sl_ops_ref.bn_fwd_train_act);
    cr_assert_null(sl_ops_ref.bn_bwd_act);
    cr_assert_not_null(sl_ops_cpu.bn_fwd_train_act);
    cr_assert_not_null(sl_ops_cpu.bn_bwd_act);
#ifdef SLUICE_TRAIN_CUDA
    cr_assert_not_null(sl_ops_cuda.bn_fwd_train_act);
    cr_assert_not_null(sl_ops_cuda.bn_bwd_act);
#endif
}

#ifndef SLUICE_TRAIN_CUDA
Test(train_ops_cuda, norm_built_without_cuda)
{
    cr_skip_test("built without CUDA (the cuda backend needs CUDA and cuDNN)");
}
#else
#include "train/cuda_testutil.h"

/* ------------------------------------------------------------ host helpers */

static double max_gi(const float *gamma, const float *invstd, int c)
{
    double m = 0;
    for (int ch = 0; ch < c; ch++)
        m = fmax(m, fabs((double)gamma[ch]) * invstd[ch]);
    return m;
}

static double max_abs(const float *v, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)v[i]));
    return m;
}

static void ref_exec(sl_exec *e)
{
    cr_assert_eq(sl_exec_init(e, SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
}

/* A mean from norm_cuda.cu's f32 Welford pass against ref's double one:
 * the pass works on x - x[0, ch] in f32, so its error is a few ulp of that
 * channel's spread around row 0, max_r |x[r, ch] - x[0, ch]| (not of the
 * mean itself, which may be near zero), plus the value's own rounding to
 * f32 (an ulp or two of either side): |got - want| <= 3e-7*|want| +
 * 4e-7*spread. (running_mean = (1-m)*running + m*mean: the same bound.) */
static void assert_mean_close(const float *got, const float *want, const float *x, int64_t rows,
                              int c, const char *what)
{
    for (int ch = 0; ch < c; ch++) {
        double spread = 0;
        for (int64_t r = 0; r < rows; r++)
            spread = fmax(spread, fabs((double)x[r * c + ch] - x[ch]));
        double tol = 3e-7 * fabs((double)want[ch]) + 4e-7 * spread;
        cr_assert(fabs((double)got[ch] - want[ch]) <= tol,
                  "%s[%d]: got %.9g want %.9g (diff %.3g > %.3g: spread %.3g)", what, ch,
                  (double)got[ch], (double)want[ch], fabs((double)got[ch] - want[ch]), tol,
                  spread);
    }
}

/* Tolerance of an f32 sum of rows terms of magnitude up to m (per-thread
 * runs, then trees: rounding grows like sqrt(rows) in practice; 16 ulp of
 * m per sqrt(row) is far above what it does and far below a lost term). */
static double fsum_tol(int64_t rows, double m) { return 1e-6 * sqrt((double)rows + 1) * m; }

/* ------------------------------------------- host adaptors of the cuda ops */
/* Inputs uploaded, outputs poisoned (NaN) then downloaded on success;
 * in/out arrays (running statistics) downloaded always, so a failed call
 * shows whether it wrote them. */

static int64_t nel(int64_t rows, int c)
{
    return rows > 0 && c > 0 ? rows * c : 0;
}

/* Activations (e->act) go up and come back through these. */
static void *up_a(const sl_exec *e, const float *h, int64_t n) { return tg_upa(h, n, e->act); }
static void *new_a(const sl_exec *e, int64_t n) { return tg_newa(n, e->act); }
static void down_a(const sl_exec *e, float *h, const void *d, int64_t n)
{
    tg_downa(h, d, n, e->act);
}

static int hg_bn_fwd_train(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                           const float *beta, float momentum, float eps, float *rm, float *rv,
                           float *y, float *sm, float *si)
{
    int64_t n = nel(rows, c);
    void *dx = up_a(e, x, n), *dy = new_a(e, n);
    float *dg = tg_upf(gamma, c), *db = tg_upf(beta, c), *drm = tg_upf(rm, c),
          *drv = tg_upf(rv, c), *dsm = tg_newf(c), *dsi = tg_newf(c);
    tg_ready();
    int rc = sl_bn_fwd_train_cuda(e, rows, c, dx, dg, db, momentum, eps, drm, drv, dy, dsm, dsi);
    tg_downf(rm, drm, c), tg_downf(rv, drv, c);
    if (rc == SL_OK)
        down_a(e, y, dy, n), tg_downf(sm, dsm, c), tg_downf(si, dsi, c);
    tg_free(dx), tg_free(dg), tg_free(db), tg_free(drm), tg_free(drv), tg_free(dy);
    tg_free(dsm), tg_free(dsi);
    return rc;
}

static int hg_bn_fwd_eval(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                          const float *beta, const float *rm, const float *rv, float eps,
                          float *y)
{
    int64_t n = nel(rows, c);
    void *dx = up_a(e, x, n), *dy = new_a(e, n);
    float *dg = tg_upf(gamma, c), *db = tg_upf(beta, c), *drm = tg_upf(rm, c),
          *drv = tg_upf(rv, c);
    tg_ready();
    int rc = sl_bn_fwd_eval_cuda(e, rows, c, dx, dg, db, drm, drv, eps, dy);
    if (rc == SL_OK)
        down_a(e, y, dy, n);
    tg_free(dx), tg_free(dg), tg_free(db), tg_free(drm), tg_free(drv), tg_free(dy);
    return rc;
}

static int hg_bn_bwd(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                     const float *gamma, const float *sm, const float *si, float *dx,
                     float *dgamma, float *dbeta)
{
    int64_t n = nel(rows, c);
    void *d_x = up_a(e, x, n), *d_dy = up_a(e, dy, n), *d_dx = new_a(e, n);
    float *dg = tg_upf(gamma, c), *dsm = tg_upf(sm, c), *dsi = tg_upf(si, c),
          *ddg = tg_newf(c), *ddb = tg_newf(c);
    tg_ready();
    int rc = sl_bn_bwd_cuda(e, rows, c, d_x, d_dy, dg, dsm, dsi, d_dx, ddg, ddb);
    if (rc == SL_OK)
        down_a(e, dx, d_dx, n), tg_downf(dgamma, ddg, c), tg_downf(dbeta, ddb, c);
    tg_free(d_x), tg_free(d_dy), tg_free(dg), tg_free(dsm), tg_free(dsi), tg_free(d_dx);
    tg_free(ddg), tg_free(ddb);
    return rc;
}

static int hg_bn_moments(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                         float *slots)
{
    int64_t ns = (int64_t)world * SL_BN_MOMENT_FLOATS * c;
    void *dx = up_a(e, x, nel(rows, c));
    float *ds = tg_newf(ns);
    tg_ready();
    int rc = sl_bn_moments_cuda(e, rows, c, dx, world, rank, ds);
    if (rc == SL_OK)
        tg_downf(slots, ds, ns);
    tg_free(dx), tg_free(ds);
    return rc;
}

static int hg_bn_moments_merge(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                               float *mean, float *var)
{
    float *ds = tg_upf(slots, (int64_t)world * SL_BN_MOMENT_FLOATS * c), *dm = tg_newf(c),
          *dv = tg_newf(c);
    tg_ready();
    int rc = sl_bn_moments_merge_cuda(e, rows, c, world, ds, dm, dv);
    if (rc == SL_OK)
        tg_downf(mean, dm, c), tg_downf(var, dv, c);
    tg_free(ds), tg_free(dm), tg_free(dv);
    return rc;
}

static int hg_bn_fwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                           const float *beta, const float *mean, const float *var, double total,
                           float momentum, float eps, float *rm, float *rv, float *y, float *sm,
                           float *si)
{
    int64_t n = nel(rows, c);
    void *dx = up_a(e, x, n), *dy = new_a(e, n);
    float *dg = tg_upf(gamma, c), *db = tg_upf(beta, c), *dmean = tg_upf(mean, c),
          *dvar = tg_upf(var, c), *drm = tg_upf(rm, c), *drv = tg_upf(rv, c), *dsm = tg_newf(c),
          *dsi = tg_newf(c);
    tg_ready();
    int rc = sl_bn_fwd_apply_cuda(e, rows, c, dx, dg, db, dmean, dvar, total, momentum, eps, drm,
                                  drv, dy, dsm, dsi);
    tg_downf(rm, drm, c), tg_downf(rv, drv, c);
    if (rc == SL_OK)
        down_a(e, y, dy, n), tg_downf(sm, dsm, c), tg_downf(si, dsi, c);
    tg_free(dx), tg_free(dg), tg_free(db), tg_free(dmean), tg_free(dvar), tg_free(drm);
    tg_free(drv), tg_free(dy), tg_free(dsm), tg_free(dsi);
    return rc;
}

static int hg_bn_bwd_reduce(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                            const float *sm, const float *si, float *sum_dy, float *sum_dyx)
{
    int64_t n = nel(rows, c);
    void *d_x = up_a(e, x, n), *d_dy = up_a(e, dy, n);
    float *dsm = tg_upf(sm, c), *dsi = tg_upf(si, c), *d0 = tg_newf(c), *d1 = tg_newf(c);
    tg_ready();
    int rc = sl_bn_bwd_reduce_cuda(e, rows, c, d_x, d_dy, dsm, dsi, d0, d1);
    if (rc == SL_OK)
        tg_downf(sum_dy, d0, c), tg_downf(sum_dyx, d1, c);
    tg_free(d_x), tg_free(d_dy), tg_free(dsm), tg_free(dsi), tg_free(d0), tg_free(d1);
    return rc;
}

static int hg_bn_bwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                           const float *gamma, const float *sm, const float *si,
                           const float *sum_dy, const float *sum_dyx, double total, float *dx)
{
    int64_t n = nel(rows, c);
    void *d_x = up_a(e, x, n), *d_dy = up_a(e, dy, n), *d_dx = new_a(e, n);
    float *dg = tg_upf(gamma, c), *dsm = tg_upf(sm, c), *dsi = tg_upf(si, c),
          *d0 = tg_upf(sum_dy, c), *d1 = tg_upf(sum_dyx, c);
    tg_ready();
    int rc = sl_bn_bwd_apply_cuda(e, rows, c, d_x, d_dy, dg, dsm, dsi, d0, d1, total, d_dx);
    if (rc == SL_OK)
        down_a(e, dx, d_dx, n);
    tg_free(d_x), tg_free(d_dy), tg_free(dg), tg_free(dsm), tg_free(dsi), tg_free(d0);
    tg_free(d1), tg_free(d_dx);
    return rc;
}

/* The batch-norm ops behind ref's host interface. */
static const sl_ops hg_ops = {
    .name = "cuda",
    .bn_fwd_train = hg_bn_fwd_train, .bn_fwd_eval = hg_bn_fwd_eval, .bn_bwd = hg_bn_bwd,
    .bn_fwd_apply = hg_bn_fwd_apply, .bn_bwd_reduce = hg_bn_bwd_reduce,
    .bn_bwd_apply = hg_bn_bwd_apply, .bn_moments = hg_bn_moments,
    .bn_moments_merge = hg_bn_moments_merge,
};

/* mean and biased var (c) of x (rows, c) from ref's moments (one replica);
 * rows 0: mean 0.5, var 0. (The cuda moments are held to ref's in
 * test_norm_sync_cuda.c.) */
static void ref_stats(sl_exec *er, const float *x, int64_t rows, int c, float *mean, float *var)
{
    float *slots = falloc((int64_t)SL_BN_MOMENT_FLOATS * c);
    cr_assert_eq(er->ops->bn_moments(er, rows, c, x, 1, 0, slots), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(er->ops->bn_moments_merge(er, rows, c, 1, slots, mean, var), SL_OK, "%s",
                 sl_errmsg());
    if (rows == 0)
        for (int ch = 0; ch < c; ch++)
            mean[ch] = 0.5f;
    free(slots);
}

/* ------------------------------------------------------------- batch norm */

/* Inputs of one BN: x, dy (rows, c) with per-channel offsets and scales
 * around offset; gamma, beta, running stats (c). */
typedef struct bn_in {
    int64_t rows;
    int c;
    float *x, *dy, *gamma, *beta, *rmean, *rvar;
} bn_in;

static void bn_in_random(bn_in *b, int64_t rows, int c, uint64_t seed, float offset,
                         float noise)
{
    uint64_t st = seed;
    int64_t n = nel(rows, c);
    b->rows = rows, b->c = c;
    b->x = falloc(n), b->dy = falloc(n);
    b->gamma = falloc(c), b->beta = falloc(c), b->rmean = falloc(c), b->rvar = falloc(c);
    float *off = falloc(c), *sc = falloc(c);
    for (int ch = 0; ch < c; ch++) {
        off[ch] = offset + urand(&st, -3, 3);
        sc[ch] = noise * urand(&st, 0.2f, 4);
        b->gamma[ch] = urand(&st, 0.5f, 2);
        b->beta[ch] = urand(&st, -1, 1);
        b->rmean[ch] = urand(&st, -1, 1);
        b->rvar[ch] = urand(&st, 0.5f, 2);
    }
    for (int64_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            b->x[r * c + ch] = off[ch] + sc[ch] * urand(&st, -1, 1);
            b->dy[r * c + ch] = urand(&st, -1, 1);
        }
    free(off), free(sc);
}

static void bn_in_free(bn_in *b)
{
    free(b->x), free(b->dy), free(b->gamma), free(b->beta), free(b->rmean), free(b->rvar);
}

/* Outputs of train (+ a second train step) + bwd + eval on one backend. */
typedef struct bn_out {
    float *y, *y2, *rm, *rv, *sm, *si, *dx, *dg, *db, *ye;
} bn_out;

static void bn_run(sl_exec *e, const bn_in *b, const float *x2, bn_out *o)
{
    int64_t n = b->rows * b->c;
    int c = b->c;
    o->y = falloc(n), o->y2 = falloc(n), o->dx = falloc(n), o->ye = falloc(n);
    o->rm = fdup(b->rmean, c), o->rv = fdup(b->rvar, c);
    o->sm = falloc(c), o->si = falloc(c), o->dg = falloc(c), o->db = falloc(c);
    /* step 1 on x2 (moves the running stats), step 2 on x (saved for bwd) */
    cr_assert_eq(e->ops->bn_fwd_train(e, b->rows, c, x2, b->gamma, b->beta, 0.1f, 1e-5f, o->rm,
                                      o->rv, o->y2, o->sm, o->si), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->ops->bn_fwd_train(e, b->rows, c, b->x, b->gamma, b->beta, 0.1f, 1e-5f,
                                      o->rm, o->rv, o->y, o->sm, o->si), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(e->ops->bn_bwd(e, b->rows, c, b->x, b->dy, b->gamma, o->sm, o->si, o->dx,
                                o->dg, o->db), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->ops->bn_fwd_eval(e, b->rows, c, b->x, b->gamma, b->beta, o->rm, o->rv, 1e-5f,
                                     o->ye), SL_OK, "%s", sl_errmsg());
}

static void bn_out_free(bn_out *o)
{
    free(o->y), free(o->y2), free(o->rm), free(o->rv), free(o->sm), free(o->si), free(o->dx);
    free(o->dg), free(o->db), free(o->ye);
}

Test(train_ops_cuda, bn_matches_ref)
{
    static const int64_t rows[] = {2, 3, 1000 + 7, 256 * 7 * 7 + 3};
    static const int cs[] = {1, 3, 17, 64, 513};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
            int64_t R = rows[i], n = R * cs[j];
            int c = cs[j];
            cr_log_info("bn rows %lld c %d", (long long)R, c);
            bn_in b;
            bn_in_random(&b, R, c, 11 + 97 * i + j, 0.0f, 1.0f);
            float *x2 = frand(n, 5 + i + j, -2, 3);
            bn_out r, g;
            bn_run(&er, &b, x2, &r);
            bn_run(&eg, &b, x2, &g);
            tu_assert_close(g.y2, r.y2, n, 2e-6, 2e-6, "y step 1");
            tu_assert_close(g.y, r.y, n, 2e-6, 2e-6, "y step 2");
            assert_mean_close(g.sm, r.sm, b.x, R, c, "save_mean");
            tu_assert_close(g.si, r.si, c, 0, 1e-6, "save_invstd");
            assert_mean_close(g.rm, r.rm, b.x, R, c, "running_mean");
            tu_assert_close(g.rv, r.rv, c, 0, 1e-6, "running_var");
            tu_assert_close(g.dx, r.dx, n, 1e-6 * max_gi(b.gamma, r.si, c), 1e-5, "dx");
            double atol = 2e-6 * sqrt((double)R);
            tu_assert_close(g.dg, r.dg, c, atol, 1e-5, "dgamma");
            tu_assert_close(g.db, r.db, c, atol, 1e-5, "dbeta");
            tu_assert_close(g.ye, r.ye, n, 2e-6, 2e-6, "eval y");
            bn_out_free(&r), bn_out_free(&g);
            free(x2);
            bn_in_free(&b);
        }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* 256 images of 112x112 (ResNet's first BN) on data far from zero: a
 * float accumulator, or a one-pass sum of squares, loses the noise. */
Test(train_ops_cuda, bn_large_rows_far_from_zero)
{
    static const float offs[] = {1000.0f, -500.0f, 3000.0f};
    static const float noise[] = {0.1f, 0.02f, 0.5f};
    const int64_t R = 256 * 112 * 112;
    const int c = 3;
    int64_t n = R * c;
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    bn_in b;
    bn_in_random(&b, R, c, 77, 0.0f, 1.0f);
    uint64_t st = 78;
    for (int64_t i = 0; i < R; i++)
        for (int ch = 0; ch < c; ch++)
            b.x[i * c + ch] = offs[ch] + noise[ch] * urand(&st, -1, 1);
    bn_out r, g;
    bn_run(&er, &b, b.x, &r);
    bn_run(&eg, &b, b.x, &g);
    /* the GPU's own accuracy: y has mean 0 and variance var/(var + eps) */
    for (int ch = 0; ch < c; ch++) {
        double mx = 0, vx = 0, my = 0, vy = 0;
        for (int64_t i = 0; i < R; i++)
            mx += b.x[i * c + ch], my += g.y[i * c + ch];
        mx /= (double)R, my /= (double)R;
        for (int64_t i = 0; i < R; i++) {
            double dxx = b.x[i * c + ch] - mx, dyy = g.y[i * c + ch] - my;
            vx += dxx * dxx, vy += dyy * dyy;
        }
        vx /= (double)R, vy /= (double)R;
        double want = vx / (vx + 1e-5);
        /* gamma/beta are random here: undo them */
        double gm = b.gamma[ch], bt = b.beta[ch];
        double m0 = (my - bt) / gm, v0 = vy / (gm * gm);
        cr_assert(fabs(m0) < 1e-5 && fabs(v0 - want) < 1e-5 * want,
                  "cuda ch %d: normalized mean %g var %.9g want %.9g", ch, m0, v0, want);
        cr_assert(fabs(g.sm[ch] - mx) <= 1e-7 * fabs(mx), "cuda ch %d mean %.9g want %.9g", ch,
                  g.sm[ch], mx);
    }
    tu_assert_close(g.y, r.y, n, 1e-5, 1e-5, "y");
    tu_assert_close(g.sm, r.sm, c, 0, 1e-7, "save_mean");
    tu_assert_close(g.si, r.si, c, 0, 1e-6, "save_invstd");
    tu_assert_close(g.rv, r.rv, c, 0, 1e-6, "running_var");
    tu_assert_close(g.dx, r.dx, n, 1e-5 * max_gi(b.gamma, r.si, c), 1e-4, "dx");
    tu_assert_close(g.dg, r.dg, c, 2e-6 * sqrt((double)R), 1e-5, "dgamma");
    tu_assert_close(g.db, r.db, c, 2e-6 * sqrt((double)R), 1e-5, "dbeta");
    tu_assert_close(g.ye, r.ye, n, 1e-5, 1e-5, "eval y");
    bn_out_free(&r), bn_out_free(&g);
    bn_in_free(&b);
    tg_close(&eg);
    sl_exec_fini(&er);
}

Test(train_ops_cuda, bn_sync_pieces_match_ref)
{
    static const int64_t rows[] = {0, 1, 3, 1000 + 7, 256 * 7 * 7 + 3};
    static const int cs[] = {1, 3, 17, 64, 513};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
            int64_t R = rows[i];
            int c = cs[j];
            int64_t n = R * c;
            double total = (double)R * 3 + 2; /* as if other replicas had rows too */
            cr_log_info("sync pieces rows %lld c %d", (long long)R, c);
            bn_in b;
            bn_in_random(&b, R, c, 7 + 13 * i + j, 0.0f, 1.0f);
            float *mean = falloc(c), *var = falloc(c);
            ref_stats(&er, b.x, R, c, mean, var);
            for (int ch = 0; ch < c; ch++)
                var[ch] += 0.01f;

            float *rm_r = fdup(b.rmean, c), *rv_r = fdup(b.rvar, c), *rm_g = fdup(b.rmean, c),
                  *rv_g = fdup(b.rvar, c);
            float *yr = falloc(n), *yg = falloc(n), *smr = falloc(c), *smg = falloc(c),
                  *sir = falloc(c), *sig = falloc(c);
            cr_assert_eq(er.ops->bn_fwd_apply(&er, R, c, b.x, b.gamma, b.beta, mean, var, total,
                                              0.1f, 1e-5f, rm_r, rv_r, yr, smr, sir), SL_OK,
                         "%s", sl_errmsg());
            cr_assert_eq(eg.ops->bn_fwd_apply(&eg, R, c, b.x, b.gamma, b.beta, mean, var, total,
                                              0.1f, 1e-5f, rm_g, rv_g, yg, smg, sig), SL_OK,
                         "%s", sl_errmsg());
            tu_assert_close(yg, yr, n, 1e-6, 1e-6, "y");
            assert_same(smg, mean, c, "save_mean (= mean)");
            tu_assert_close(sig, sir, c, 0, 1e-7, "save_invstd");
            tu_assert_close(rm_g, rm_r, c, 0, 1e-7, "running_mean");
            tu_assert_close(rv_g, rv_r, c, 0, 1e-7, "running_var");

            float *d0r = falloc(c), *d0g = falloc(c), *d1r = falloc(c), *d1g = falloc(c);
            cr_assert_eq(er.ops->bn_bwd_reduce(&er, R, c, b.x, b.dy, smr, sir, d0r, d1r), SL_OK);
            cr_assert_eq(eg.ops->bn_bwd_reduce(&eg, R, c, b.x, b.dy, smr, sir, d0g, d1g), SL_OK,
                         "%s", sl_errmsg());
            double atol = fsum_tol(R, 1.0); /* |dy|, |dy*xhat|: a few at most */
            tu_assert_close(d0g, d0r, c, atol, 1e-6, "sum_dy");
            tu_assert_close(d1g, d1r, c, atol, 1e-6, "sum_dy_xhat");
            for (int ch = 0; ch < c; ch++) /* as if all-reduced */
                d0r[ch] *= 3, d1r[ch] *= 3;
            float *dxr = falloc(n), *dxg = falloc(n);
            cr_assert_eq(er.ops->bn_bwd_apply(&er, R, c, b.x, b.dy, b.gamma, smr, sir, d0r, d1r,
                                              total, dxr), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(eg.ops->bn_bwd_apply(&eg, R, c, b.x, b.dy, b.gamma, smr, sir, d0r, d1r,
                                              total, dxg), SL_OK, "%s", sl_errmsg());
            /* same expression in double on both sides: to the last float bit or so */
            tu_assert_close(dxg, dxr, n, 1e-7 * max_gi(b.gamma, sir, c), 1e-6, "dx");

            free(mean), free(var), free(rm_r), free(rv_r), free(rm_g);
            free(rv_g), free(yr), free(yg), free(smr), free(smg), free(sir), free(sig);
            free(d0r), free(d0g), free(d1r), free(d1g), free(dxr), free(dxg);
            bn_in_free(&b);
        }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* What the model does per BN over W replicas, the all-reduces done here in
 * rank order in float (test_norm_sync.c's run_sync). cut: W+1 row bounds,
 * W equal slices (the model's replicas have one batch size). */
typedef struct sync_out {
    float *y, *dx, *sm, *si, *rm, *rv, *dg, *db;
} sync_out;

static void run_sync(sl_exec *e, const bn_in *b, int W, const int64_t *cut, sync_out *o)
{
    int c = b->c;
    int64_t n = b->rows * c;
    double total = (double)b->rows;
    float *part = falloc((int64_t)W * 2 * c), *g = falloc(2 * c), *mean = falloc(c),
          *var = falloc(c);
#define SLICE(r) (cut[r + 1] - cut[r]), c
#define AT(v, r) ((v) + cut[r] * c)
    /* statistics: each replica's moments in its slot, the slots summed in
     * rank order (the all-reduce), merged by every replica */
    int64_t slice = b->rows / W, ns = (int64_t)W * SL_BN_MOMENT_FLOATS * c;
    float *slots = falloc((int64_t)W * ns), *sum = falloc(ns), *m2 = falloc(c),
          *v2 = falloc(c);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(cut[r + 1] - cut[r], slice, "replica %d: unequal slice", r);
        cr_assert_eq(e->ops->bn_moments(e, SLICE(r), AT(b->x, r), W, r, slots + r * ns), SL_OK,
                     "%s", sl_errmsg());
    }
    for (int64_t i = 0; i < ns; i++) {
        float s = 0;
        for (int r = 0; r < W; r++)
            s += slots[r * ns + i];
        sum[i] = s;
    }
    for (int r = 0; r < W; r++) {
        cr_assert_eq(e->ops->bn_moments_merge(e, slice, c, W, sum, r ? m2 : mean, r ? v2 : var),
                     SL_OK, "%s", sl_errmsg());
        if (r)
            assert_same(m2, mean, c, "replica mean"), assert_same(v2, var, c, "replica var");
    }
    free(slots), free(sum), free(m2), free(v2);
    o->y = falloc(n), o->dx = falloc(n);
    float *sm = falloc((int64_t)W * c), *si = falloc((int64_t)W * c),
          *rm = falloc((int64_t)W * c), *rv = falloc((int64_t)W * c);
    for (int r = 0; r < W; r++) {
        memcpy(rm + r * c, b->rmean, (size_t)c * sizeof(float));
        memcpy(rv + r * c, b->rvar, (size_t)c * sizeof(float));
        cr_assert_eq(e->ops->bn_fwd_apply(e, SLICE(r), AT(b->x, r), b->gamma, b->beta, mean, var,
                                          total, 0.1f, 1e-5f, rm + r * c, rv + r * c,
                                          AT(o->y, r), sm + r * c, si + r * c), SL_OK, "%s",
                     sl_errmsg());
    }
    for (int r = 1; r < W; r++) { /* every replica ends with the same statistics */
        assert_same(sm + r * c, sm, c, "replica save_mean");
        assert_same(si + r * c, si, c, "replica save_invstd");
        assert_same(rm + r * c, rm, c, "replica running_mean");
        assert_same(rv + r * c, rv, c, "replica running_var");
    }
    o->sm = fdup(sm, c), o->si = fdup(si, c), o->rm = fdup(rm, c), o->rv = fdup(rv, c);
    for (int r = 0; r < W; r++)
        cr_assert_eq(e->ops->bn_bwd_reduce(e, SLICE(r), AT(b->x, r), AT(b->dy, r), sm + r * c,
                                           si + r * c, part + 2 * r * c, part + 2 * r * c + c),
                     SL_OK, "%s", sl_errmsg());
    o->dg = falloc(c), o->db = falloc(c);
    for (int k = 0; k < 2 * c; k++) {
        float s = 0;
        double d = 0;
        for (int r = 0; r < W; r++)
            s += part[2 * r * c + k], d += part[2 * r * c + k];
        g[k] = s;
        if (k < c)
            o->db[k] = (float)d;
        else
            o->dg[k - c] = (float)d;
    }
    for (int r = 0; r < W; r++)
        cr_assert_eq(e->ops->bn_bwd_apply(e, SLICE(r), AT(b->x, r), AT(b->dy, r), b->gamma,
                                          sm + r * c, si + r * c, g, g + c, total, AT(o->dx, r)),
                     SL_OK, "%s", sl_errmsg());
#undef SLICE
#undef AT
    free(part), free(g), free(mean), free(var), free(sm), free(si), free(rm), free(rv);
}

static void sync_out_free(sync_out *o)
{
    free(o->y), free(o->dx), free(o->sm), free(o->si), free(o->rm), free(o->rv);
    free(o->dg), free(o->db);
}

Test(train_ops_cuda, bn_sync_pieces_compose_over_two_replicas)
{
    static const int64_t rows[] = {6, 1000 + 8, 256 * 7 * 7 + 4};
    static const int cs[] = {3, 17, 64};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
            int64_t R = rows[i];
            int c = cs[j];
            int64_t n = R * c;
            bn_in b;
            bn_in_random(&b, R, c, 300 + 7 * i + j, 0.0f, 1.0f);
            /* the whole batch on one GPU, and on ref */
            bn_out whole, ref;
            bn_run(&eg, &b, b.x, &whole);
            bn_run(&er, &b, b.x, &ref);
            /* half the rows each */
            int64_t cuts[1][3] = {{0, R / 2, R}};
            for (int k = 0; k < 1; k++) {
                cr_log_info("sync over 2 replicas: rows %lld (%lld + %lld) c %d", (long long)R,
                            (long long)cuts[k][1], (long long)(R - cuts[k][1]), c);
                sync_out o;
                run_sync(&eg, &b, 2, cuts[k], &o);
                /* bn_run ran two steps of running stats: redo one here */
                float *rm = fdup(b.rmean, c), *rv = fdup(b.rvar, c), *y = falloc(n),
                      *sm = falloc(c), *si = falloc(c), *dx = falloc(n), *dg = falloc(c),
                      *db = falloc(c);
                cr_assert_eq(eg.ops->bn_fwd_train(&eg, R, c, b.x, b.gamma, b.beta, 0.1f, 1e-5f,
                                                  rm, rv, y, sm, si), SL_OK, "%s", sl_errmsg());
                /* the merged mean reaches bn_fwd_apply as a float: ~ulp(max|x|) */
                double mtol = 4e-7 * max_abs(b.x, n), gi = max_gi(b.gamma, si, c);
                tu_assert_close(o.sm, sm, c, mtol, 0, "save_mean");
                tu_assert_close(o.si, si, c, 0, 1e-6, "save_invstd");
                tu_assert_close(o.rm, rm, c, mtol, 1e-6, "running_mean");
                tu_assert_close(o.rv, rv, c, 0, 1e-6, "running_var");
                tu_assert_close(o.y, y, n, 2e-6 + mtol * gi, 2e-6, "y vs bn_fwd_train");
                tu_assert_close(o.y, ref.y, n, 2e-6 + mtol * gi, 2e-6, "y vs ref");
                tu_assert_close(o.dx, whole.dx, n, 4e-7 * gi + 2 * mtol * gi * gi, 1e-5,
                             "dx vs bn_bwd");
                tu_assert_close(o.dx, ref.dx, n, 4e-7 * gi + 2 * mtol * gi * gi, 1e-5, "dx vs ref");
                double atol = 2e-6 * sqrt((double)R);
                tu_assert_close(o.dg, whole.dg, c, atol, 1e-5, "sum of local dgamma");
                tu_assert_close(o.db, whole.db, c, atol, 1e-5, "sum of local dbeta");
                sync_out_free(&o);
                free(rm), free(rv), free(y), free(sm), free(si), free(dx), free(dg), free(db);
            }
            bn_out_free(&whole), bn_out_free(&ref);
            bn_in_free(&b);
        }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* y may be x, dx may be dy, and bn_fwd_apply's mean/var may be its
 * save_mean/save_invstd: the same bits as with separate buffers. */
Test(train_ops_cuda, bn_aliasing)
{
    const int64_t R = 1000 + 7;
    const int c = 17;
    int64_t n = R * c;
    sl_exec eg;
    tg_open(&eg, NULL);
    bn_in b;
    bn_in_random(&b, R, c, 41, 2.0f, 1.0f);
    float h0[17], h1[17], hm[17], hv[17], wsm[17], wsi[17], gsm[17], gsi[17];
    for (int ch = 0; ch < c; ch++) {
        h0[ch] = 0.25f * ch - 1, h1[ch] = 0.5f - 0.125f * ch;
        hm[ch] = 2.0f + 0.1f * ch, hv[ch] = 0.5f + 0.05f * ch;
    }
    float *x = tg_upf(b.x, n), *xi = tg_upf(b.x, n), *dy = tg_upf(b.dy, n),
          *dyi = tg_upf(b.dy, n), *gm = tg_upf(b.gamma, c), *bt = tg_upf(b.beta, c),
          *rm = tg_upf(b.rmean, c), *rv = tg_upf(b.rvar, c), *s0 = tg_upf(h0, c),
          *s1 = tg_upf(h1, c), *m = tg_upf(hm, c), *v = tg_upf(hv, c), *m2 = tg_upf(hm, c),
          *v2 = tg_upf(hv, c);
    float *y = tg_newf(n), *sm = tg_newf(c), *si = tg_newf(c), *dx = tg_newf(n);
    float *want = falloc(n), *got = falloc(n);
    tg_ready();

    /* bn_fwd_train: y = x */
    cr_assert_eq(sl_bn_fwd_train_cuda(&eg, R, c, x, gm, bt, 0.1f, 1e-5f, rm, rv, y, sm, si), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(sl_bn_fwd_train_cuda(&eg, R, c, xi, gm, bt, 0.1f, 1e-5f, rm, rv, xi, sm, si),
                 SL_OK, "%s", sl_errmsg());
    tg_downf(want, y, n), tg_downf(got, xi, n);
    assert_same(got, want, n, "bn_fwd_train in place");

    /* bn_bwd_apply: dx = dy */
    cr_assert_eq(sl_bn_bwd_apply_cuda(&eg, R, c, x, dy, gm, sm, si, s0, s1, 3.0 * R, dx), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_apply_cuda(&eg, R, c, x, dyi, gm, sm, si, s0, s1, 3.0 * R, dyi), SL_OK,
                 "%s", sl_errmsg());
    tg_downf(want, dx, n), tg_downf(got, dyi, n);
    assert_same(got, want, n, "bn_bwd_apply in place");

    /* bn_fwd_apply: mean = save_mean, var = save_invstd (y, save_* do not
     * depend on the running stats, which both calls move) */
    cr_assert_eq(sl_bn_fwd_apply_cuda(&eg, R, c, x, gm, bt, m, v, 2.0 * R, 0.1f, 1e-5f, rm, rv, y,
                                      sm, si), SL_OK, "%s", sl_errmsg());
    tg_downf(want, y, n), tg_downf(wsm, sm, c), tg_downf(wsi, si, c);
    cr_assert_eq(sl_bn_fwd_apply_cuda(&eg, R, c, x, gm, bt, m2, v2, 2.0 * R, 0.1f, 1e-5f, rm, rv,
                                      y, m2, v2), SL_OK, "%s", sl_errmsg());
    tg_downf(got, y, n), tg_downf(gsm, m2, c), tg_downf(gsi, v2, c);
    assert_same(got, want, n, "bn_fwd_apply y, mean/var aliased");
    assert_same(gsm, wsm, c, "bn_fwd_apply save_mean aliased");
    assert_same(gsi, wsi, c, "bn_fwd_apply save_invstd aliased");

    float *d[] = {x, xi, dy, dyi, gm, bt, rm, rv, s0, s1, m, v, m2, v2, y, sm, si, dx};
    for (size_t k = 0; k < sizeof d / sizeof d[0]; k++)
        tg_free(d[k]);
    free(want), free(got);
    bn_in_free(&b);
    tg_close(&eg);
}

/* ------------------------------------------------- bf16 / f16 activations */

static const sl_dtype lowp[2] = {SL_DTYPE_BF16, SL_DTYPE_F16};

/* An activation output against ref's f32 output rounded to t, with the
 * f32 test's atol and rtol widened by one ulp of t (the file comment). */
static void assert_act(const float *got, const float *ref, int64_t n, double atol, double rtol,
                       sl_dtype t, const char *what)
{
    float *r = fdup(ref, n);
    tg_round_all(r, n, t);
    char buf[96];
    snprintf(buf, sizeof buf, "%s (%s)", what, tg_type_name(t));
    tu_assert_close(got, r, n, atol, rtol + ldexp(1.0, 1 - tg_bits(t)), buf);
    free(r);
}

Test(train_ops_cuda, bn_bf16_f16_match_ref)
{
    static const int64_t rows[] = {2, 3, 1000 + 7, 64 * 7 * 7 + 3};
    static const int cs[] = {1, 3, 17, 64, 513};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int k = 0; k < 2; k++) {
        sl_dtype t = lowp[k];
        tg_set_act(&eg, t);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
                int64_t R = rows[i], n = R * cs[j];
                int c = cs[j];
                cr_log_info("bn %s rows %lld c %d", tg_type_name(t), (long long)R, c);
                bn_in b;
                bn_in_random(&b, R, c, 411 + 97 * i + j, 0.0f, 1.0f);
                float *x2 = frand(n, 25 + i + j, -2, 3);
                tg_round_all(b.x, n, t), tg_round_all(b.dy, n, t), tg_round_all(x2, n, t);
                bn_out r, g;
                bn_run(&er, &b, x2, &r);
                bn_run(&eg, &b, x2, &g);
                assert_act(g.y2, r.y2, n, 2e-6, 2e-6, t, "y step 1");
                assert_act(g.y, r.y, n, 2e-6, 2e-6, t, "y step 2");
                assert_mean_close(g.sm, r.sm, b.x, R, c, "save_mean");
                tu_assert_close(g.si, r.si, c, 0, 1e-6, "save_invstd");
                assert_mean_close(g.rm, r.rm, b.x, R, c, "running_mean");
                tu_assert_close(g.rv, r.rv, c, 0, 1e-6, "running_var");
                assert_act(g.dx, r.dx, n, 1e-6 * max_gi(b.gamma, r.si, c), 1e-5, t, "dx");
                double atol = 2e-6 * sqrt((double)R);
                tu_assert_close(g.dg, r.dg, c, atol, 1e-5, "dgamma");
                tu_assert_close(g.db, r.db, c, atol, 1e-5, "dbeta");
                assert_act(g.ye, r.ye, n, 2e-6, 2e-6, t, "eval y");
                bn_out_free(&r), bn_out_free(&g);
                free(x2);
                bn_in_free(&b);
            }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

Test(train_ops_cuda, bn_sync_pieces_bf16_f16_match_ref)
{
    static const int64_t rows[] = {0, 1, 3, 1000 + 7, 64 * 7 * 7 + 3};
    static const int cs[] = {1, 17, 64};
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    for (int k = 0; k < 2; k++) {
        sl_dtype t = lowp[k];
        tg_set_act(&eg, t);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
                int64_t R = rows[i];
                int c = cs[j];
                int64_t n = R * c;
                double total = (double)R * 3 + 2;
                cr_log_info("sync pieces %s rows %lld c %d", tg_type_name(t), (long long)R, c);
                bn_in b;
                bn_in_random(&b, R, c, 70 + 13 * i + j, 0.0f, 1.0f);
                tg_round_all(b.x, n, t), tg_round_all(b.dy, n, t);
                float *mean = falloc(c), *var = falloc(c);
                ref_stats(&er, b.x, R, c, mean, var);
                for (int ch = 0; ch < c; ch++)
                    var[ch] += 0.01f;
                float *rm_r = fdup(b.rmean, c), *rv_r = fdup(b.rvar, c), *rm_g = fdup(b.rmean, c),
                      *rv_g = fdup(b.rvar, c);
                float *yr = falloc(n), *yg = falloc(n), *smr = falloc(c), *smg = falloc(c),
                      *sir = falloc(c), *sig = falloc(c);
                cr_assert_eq(er.ops->bn_fwd_apply(&er, R, c, b.x, b.gamma, b.beta, mean, var,
                                                  total, 0.1f, 1e-5f, rm_r, rv_r, yr, smr, sir),
                             SL_OK, "%s", sl_errmsg());
                cr_assert_eq(eg.ops->bn_fwd_apply(&eg, R, c, b.x, b.gamma, b.beta, mean, var,
                                                  total, 0.1f, 1e-5f, rm_g, rv_g, yg, smg, sig),
                             SL_OK, "%s", sl_errmsg());
                assert_act(yg, yr, n, 1e-6, 1e-6, t, "y");
                tu_assert_close(sig, sir, c, 0, 1e-7, "save_invstd");
                tu_assert_close(rv_g, rv_r, c, 0, 1e-7, "running_var");
                float *d0r = falloc(c), *d0g = falloc(c), *d1r = falloc(c), *d1g = falloc(c);
                cr_assert_eq(er.ops->bn_bwd_reduce(&er, R, c, b.x, b.dy, smr, sir, d0r, d1r),
                             SL_OK);
                cr_assert_eq(eg.ops->bn_bwd_reduce(&eg, R, c, b.x, b.dy, smr, sir, d0g, d1g),
                             SL_OK, "%s", sl_errmsg());
                double atol = fsum_tol(R, 1.0); /* |dy|, |dy*xhat|: a few at most */
                tu_assert_close(d0g, d0r, c, atol, 1e-6, "sum_dy");
                tu_assert_close(d1g, d1r, c, atol, 1e-6, "sum_dy_xhat");
                for (int ch = 0; ch < c; ch++)
                    d0r[ch] *= 3, d1r[ch] *= 3;
                float *dxr = falloc(n), *dxg = falloc(n);
                cr_assert_eq(er.ops->bn_bwd_apply(&er, R, c, b.x, b.dy, b.gamma, smr, sir, d0r,
                                                  d1r, total, dxr), SL_OK, "%s", sl_errmsg());
                cr_assert_eq(eg.ops->bn_bwd_apply(&eg, R, c, b.x, b.dy, b.gamma, smr, sir, d0r,
                                                  d1r, total, dxg), SL_OK, "%s", sl_errmsg());
                assert_act(dxg, dxr, n, 1e-7 * max_gi(b.gamma, sir, c), 1e-6, t, "dx");
                free(mean), free(var), free(rm_r), free(rv_r), free(rm_g);
                free(rv_g), free(yr), free(yg), free(smr), free(smg), free(sir), free(sig);
                free(d0r), free(d0g), free(d1r), free(d1g), free(dxr), free(dxg);
                bn_in_free(&b);
            }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* In place with 2-byte elements: y = x (train), dx = dy (bwd, bwd_apply)
 * give the bits of separate buffers. */
Test(train_ops_cuda, bn_aliasing_bf16)
{
    const int64_t R = 1000 + 7;
    const int c = 17;
    const sl_dtype t = SL_DTYPE_BF16;
    int64_t n = R * c;
    sl_exec eg;
    tg_open(&eg, NULL);
    tg_set_act(&eg, t);
    bn_in b;
    bn_in_random(&b, R, c, 43, 2.0f, 1.0f);
    float h0[17], h1[17];
    for (int ch = 0; ch < c; ch++)
        h0[ch] = 0.25f * ch - 1, h1[ch] = 0.5f - 0.125f * ch;
    void *x = tg_upa(b.x, n, t), *xi = tg_upa(b.x, n, t), *dy = tg_upa(b.dy, n, t),
         *dyi = tg_upa(b.dy, n, t), *dyj = tg_upa(b.dy, n, t), *y = tg_newa(n, t),
         *dx = tg_newa(n, t), *dx2 = tg_newa(n, t);
    float *gm = tg_upf(b.gamma, c), *bt = tg_upf(b.beta, c), *rm = tg_upf(b.rmean, c),
          *rv = tg_upf(b.rvar, c), *s0 = tg_upf(h0, c), *s1 = tg_upf(h1, c), *sm = tg_newf(c),
          *si = tg_newf(c), *dg = tg_newf(c), *db = tg_newf(c);
    float *want = falloc(n), *got = falloc(n);
    tg_ready();
    cr_assert_eq(sl_bn_fwd_train_cuda(&eg, R, c, x, gm, bt, 0.1f, 1e-5f, rm, rv, y, sm, si), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(sl_bn_fwd_train_cuda(&eg, R, c, xi, gm, bt, 0.1f, 1e-5f, rm, rv, xi, sm, si),
                 SL_OK, "%s", sl_errmsg());
    tg_downa(want, y, n, t), tg_downa(got, xi, n, t);
    assert_same(got, want, n, "bn_fwd_train in place (bf16)");
    cr_assert_eq(sl_bn_bwd_cuda(&eg, R, c, x, dy, gm, sm, si, dx, dg, db), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(sl_bn_bwd_cuda(&eg, R, c, x, dyi, gm, sm, si, dyi, dg, db), SL_OK, "%s",
                 sl_errmsg());
    tg_downa(want, dx, n, t), tg_downa(got, dyi, n, t);
    assert_same(got, want, n, "bn_bwd in place (bf16)");
    cr_assert_eq(sl_bn_bwd_apply_cuda(&eg, R, c, x, dy, gm, sm, si, s0, s1, 3.0 * R, dx2), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_apply_cuda(&eg, R, c, x, dyj, gm, sm, si, s0, s1, 3.0 * R, dyj), SL_OK,
                 "%s", sl_errmsg());
    tg_downa(want, dx2, n, t), tg_downa(got, dyj, n, t);
    assert_same(got, want, n, "bn_bwd_apply in place (bf16)");
    void *d[] = {x, xi, dy, dyi, dyj, y, dx, dx2, gm, bt, rm, rv, s0, s1, sm, si, dg, db};
    for (size_t k = 0; k < sizeof d / sizeof d[0]; k++)
        tg_free(d[k]);
    free(want), free(got);
    bn_in_free(&b);
    tg_close(&eg);
}

/* The argument checks (the entry points', train/ops/ops.c) come before any
 * device work, so they run without a GPU, on an exec with no context
 * (which must not be touched past them). */
Test(train_ops_cuda, bn_bad_arguments)
{
    sl_exec e;
    memset(&e, 0, sizeof e);
    e.backend = SL_BACKEND_CUDA;
    e.ops = &sl_ops_cuda; /* the entry points check, then run the cuda slot */
    float f[8] = {0};
    for (int64_t rows = 1; rows >= 0; rows--) {
        cr_assert_eq(sl_bn_fwd_train(&e, rows, 3, f, f, f, 0.1f, 1e-5f, f, f, f, f, f),
                     SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "sl_bn_fwd_train: cuda") &&
                  strstr(sl_errmsg(), "at least 2 values per channel"), "%s", sl_errmsg());
    }
    cr_assert_eq(sl_bn_fwd_train(&e, 4, 0, f, f, f, 0.1f, 1e-5f, f, f, f, f, f), SL_EINVAL);
    cr_assert_eq(sl_bn_fwd_eval(&e, -1, 3, f, f, f, f, f, 1e-5f, f), SL_EINVAL);
    cr_assert_eq(sl_bn_bwd(&e, 0, 3, f, f, f, f, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_bwd: cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_reduce(&e, 2, 0, f, f, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_bwd_reduce: cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_reduce(&e, -1, 3, f, f, f, f, f, f), SL_EINVAL);
    cr_assert_eq(sl_bn_bwd_reduce(&e, 2, -3, f, f, f, f, f, f), SL_EINVAL);
    /* forward statistics need 2 rows in all, and total >= this replica's rows */
    cr_assert_eq(sl_bn_fwd_apply(&e, 1, 3, f, f, f, f, f, 1.0, 0.1f, 1e-5f, f, f, f, f, f),
                 SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "at least 2 values per channel"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_fwd_apply(&e, 3, 1, f, f, f, f, f, 2.0, 0.1f, 1e-5f, f, f, f, f, f),
                 SL_EINVAL);
    cr_assert_eq(sl_bn_fwd_apply(&e, 1, 1, f, f, f, f, f, NAN, 0.1f, 1e-5f, f, f, f, f, f),
                 SL_EINVAL);
    cr_assert_eq(sl_bn_bwd_apply(&e, 0, 3, f, f, f, f, f, f, f, 0.5, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_bwd_apply: cuda"), "%s", sl_errmsg());
    /* good shapes, no context */
    cr_assert_eq(sl_bn_fwd_train(&e, 2, 3, f, f, f, 0.1f, 1e-5f, f, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_reduce(&e, 0, 3, f, f, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_reduce(NULL, 0, 3, f, f, f, f, f, f), SL_EINVAL);
}

/* ------------------------------------ fused BN + add + ReLU, ReLU + BN bwd */

static const sl_dtype all_types[3] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};

/* The unfused reference of bn_fwd_train_act on the host: bn_fwd_train_ref,
 * rounded to t as the GPU stores z, + r (add_ref, rounded), relu_ref. ybn
 * keeps ref's f32 bn output (for the tolerance). */
static void ref_fwd_act(sl_exec *er, const bn_in *b, const float *r, int relu, sl_dtype t,
                        float *rm, float *rv, float *y, float *ybn, float *sm, float *si)
{
    int64_t n = b->rows * b->c;
    cr_assert_eq(sl_bn_fwd_train_ref(er, b->rows, b->c, b->x, b->gamma, b->beta, 0.1f, 1e-5f, rm,
                                     rv, ybn, sm, si), SL_OK, "%s", sl_errmsg());
    memcpy(y, ybn, (size_t)n * sizeof(float));
    tg_round_all(y, n, t);
    if (r) {
        cr_assert_eq(sl_add_ref(er, n, y, r, y), SL_OK);
        tg_round_all(y, n, t);
    }
    if (relu)
        cr_assert_eq(sl_relu_fwd_ref(er, n, y, y), SL_OK);
}

/* |got - want| within the bn tolerance (atol 2e-6, rtol 2e-6 of the bn
 * output ybn) carried through the add, plus one ulp of t (2^(1-p)) of the
 * bn output and one of the result for the two roundings to t: the GPU's
 * f32 bn value may round to the neighbour of ref's. */
static void assert_fwd_act(const float *got, const float *want, const float *ybn, int64_t n,
                           sl_dtype t, const char *what)
{
    double ulp = t == SL_DTYPE_F32 ? ldexp(1.0, -23) : ldexp(1.0, 1 - tg_bits(t));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double tol = 2e-6 + 2e-6 * fabs(ybn[i]) + ulp * (fabs(ybn[i]) + fabs(want[i]));
        cr_assert(d <= tol, "%s (%s)[%lld]: got %.9g want %.9g (bn %.9g, diff %.3g)", what,
                  tg_type_name(t), (long long)i, got[i], want[i], ybn[i], d);
    }
}

/* Bits of two device activation buffers of n elements of t. */
static void assert_same_dev(const void *a, const void *b, int64_t n, sl_dtype t,
                            const char *what)
{
    float *ha = falloc(n), *hb = falloc(n);
    tg_downa(ha, a, n, t), tg_downa(hb, b, n, t);
    char buf[96];
    snprintf(buf, sizeof buf, "%s (%s)", what, tg_type_name(t));
    assert_same(ha, hb, n, buf);
    free(ha), free(hb);
}

/* bn_fwd_train_act against ref's bn -> add -> relu (every type, with and
 * without r and relu, awkward c and rows), and against the cuda backend's
 * own unfused ops bit for bit (values and statistics). */
Test(train_ops_cuda, bn_fused_fwd_matches_ref_and_unfused)
{
    static const int cs[] = {3, 17, 64, 2048};
    static const int64_t rows[] = {2, 37, 1000 + 7};
    sl_exec er, eg;
    tg_open(&eg, NULL);
    ref_exec(&er);
    for (int k = 0; k < 3; k++) {
        sl_dtype t = all_types[k];
        tg_set_act(&eg, t);
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++)
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
                int c = cs[j];
                int64_t R = rows[i], n = R * c;
                if (n > 80000)
                    continue; /* 2048 channels: 2 and 37 rows are enough */
                bn_in b;
                bn_in_random(&b, R, c, 901 + 31 * k + 7 * j + i, 0.5f, 1.0f);
                float *r = frand(n, 77 + i + j, -2, 2);
                tg_round_all(b.x, n, t), tg_round_all(r, n, t);
                void *dx = tg_upa(b.x, n, t), *dr = tg_upa(r, n, t);
                void *dy = tg_newa(n, t), *du = tg_newa(n, t);
                float *dg = tg_upf(b.gamma, c), *dbt = tg_upf(b.beta, c);
                float *wy = falloc(n), *ybn = falloc(n), *gy = falloc(n);
                float wsm[2048], wsi[2048], gsm[2048], gsi[2048], usm[2048], usi[2048];
                float grm[2048], grv[2048], urm[2048], urv[2048];
                for (int v = 0; v < 4; v++) {
                    int use_r = v & 1, relu = v >> 1;
                    cr_log_info("fused fwd %s rows %lld c %d r %d relu %d", tg_type_name(t),
                                (long long)R, c, use_r, relu);
                    float *wrm = fdup(b.rmean, c), *wrv = fdup(b.rvar, c);
                    ref_fwd_act(&er, &b, use_r ? r : NULL, relu, t, wrm, wrv, wy, ybn, wsm,
                                wsi);
                    float *drm = tg_upf(b.rmean, c), *drv = tg_upf(b.rvar, c);
                    float *dsm = tg_newf(c), *dsi = tg_newf(c);
                    tg_ready();
                    cr_assert_eq(sl_bn_fwd_train_act_cuda(&eg, R, c, dx, dg, dbt, 0.1f, 1e-5f, drm,
                                                          drv, use_r ? dr : NULL, relu, dy, dsm,
                                                          dsi), SL_OK, "%s", sl_errmsg());
                    tg_downa(gy, dy, n, t);
                    tg_downf(gsm, dsm, c), tg_downf(gsi, dsi, c);
                    tg_downf(grm, drm, c), tg_downf(grv, drv, c);
                    assert_fwd_act(gy, wy, ybn, n, t, "y");
                    assert_mean_close(gsm, wsm, b.x, R, c, "save_mean");
                    tu_assert_close(gsi, wsi, c, 0, 1e-6, "save_invstd");
                    assert_mean_close(grm, wrm, b.x, R, c, "running_mean");
                    tu_assert_close(grv, wrv, c, 0, 1e-6, "running_var");
                    /* the unfused cuda ops on the same inputs: the same bits */
                    cr_assert_eq(eg.act, t);
                    cr_assert_eq(cudaMemcpy(drm, b.rmean, c * sizeof(float),
                                            cudaMemcpyHostToDevice), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(drv, b.rvar, c * sizeof(float),
                                            cudaMemcpyHostToDevice), cudaSuccess);
                    tg_ready();
                    cr_assert_eq(sl_bn_fwd_train_cuda(&eg, R, c, dx, dg, dbt, 0.1f, 1e-5f, drm, drv,
                                                      du, dsm, dsi), SL_OK, "%s", sl_errmsg());
                    if (use_r)
                        cr_assert_eq(sl_add_cuda(&eg, n, du, dr, du), SL_OK, "%s", sl_errmsg());
                    if (relu)
                        cr_assert_eq(sl_relu_fwd_cuda(&eg, n, du, du), SL_OK, "%s", sl_errmsg());
                    assert_same_dev(dy, du, n, t, "fused y vs bn -> add -> relu on cuda");
                    tg_downf(usm, dsm, c), tg_downf(usi, dsi, c);
                    tg_downf(urm, drm, c), tg_downf(urv, drv, c);
                    assert_same(gsm, usm, c, "save_mean fused vs unfused");
                    assert_same(gsi, usi, c, "save_invstd fused vs unfused");
                    assert_same(grm, urm, c, "running_mean fused vs unfused");
                    assert_same(grv, urv, c, "running_var fused vs unfused");
                    tg_free(drm), tg_free(drv), tg_free(dsm), tg_free(dsi);
                    free(wrm), free(wrv);
                }
                tg_free(dx), tg_free(dr), tg_free(dy), tg_free(du), tg_free(dg), tg_free(dbt);
                free(wy), free(ybn), free(gy), free(r);
                bn_in_free(&b);
            }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* z as a ReLU output: >= 0 with about 40% exact zeros, some denormal-small
 * positives and a NaN (masked like a zero, as relu_bwd does). */
static float *relu_like(int64_t n, uint64_t seed, sl_dtype t)
{
    float *z = frand(n, seed, -1.5f, 2.5f);
    for (int64_t i = 0; i < n; i++)
        z[i] = z[i] < 0 ? 0.0f : z[i];
    if (n > 5)
        z[1] = 1e-30f, z[3] = NAN;
    tg_round_all(z, n, t);
    return z;
}

/* bn_bwd_act against ref's relu_bwd -> bn_bwd (the masked dz exactly), and
 * against the cuda backend's relu_bwd -> bn_bwd bit for bit. */
Test(train_ops_cuda, bn_fused_bwd_matches_ref_and_unfused)
{
    static const int cs[] = {3, 17, 64, 2048};
    static const int64_t rows[] = {1, 2, 37, 1000 + 7};
    sl_exec er, eg;
    tg_open(&eg, NULL);
    ref_exec(&er);
    for (int k = 0; k < 3; k++) {
        sl_dtype t = all_types[k];
        tg_set_act(&eg, t);
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++)
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
                int c = cs[j];
                int64_t R = rows[i], n = R * c;
                if (n > 80000)
                    continue;
                cr_log_info("fused bwd %s rows %lld c %d", tg_type_name(t), (long long)R, c);
                bn_in b;
                bn_in_random(&b, R, c, 333 + 31 * k + 7 * j + i, -0.5f, 1.0f);
                tg_round_all(b.x, n, t), tg_round_all(b.dy, n, t);
                float *z = relu_like(n, 55 + 3 * i + j, t);
                /* saved statistics: ref's of x (any values would do; rows 1: made up) */
                float *sm = falloc(c), *si = falloc(c), *rm = fdup(b.rmean, c),
                      *rv = fdup(b.rvar, c), *tmp = falloc(n);
                if (R >= 2) {
                    cr_assert_eq(sl_bn_fwd_train_ref(&er, R, c, b.x, b.gamma, b.beta, 0.1f, 1e-5f,
                                                     rm, rv, tmp, sm, si), SL_OK);
                } else {
                    for (int ch = 0; ch < c; ch++)
                        sm[ch] = 0.25f, si[ch] = 1.5f;
                }
                /* ref: mask, then bn_bwd */
                float *wdz = falloc(n), *wdx = falloc(n), *wdg = falloc(c), *wdb = falloc(c);
                cr_assert_eq(sl_relu_bwd_ref(&er, n, z, b.dy, wdz), SL_OK);
                cr_assert_eq(sl_bn_bwd_ref(&er, R, c, b.x, wdz, b.gamma, sm, si, wdx, wdg, wdb),
                             SL_OK, "%s", sl_errmsg());
                void *dx = tg_upa(b.x, n, t), *dz = tg_upa(z, n, t), *ddz = tg_upa(b.dy, n, t),
                     *ddz2 = tg_upa(b.dy, n, t), *ddx = tg_newa(n, t), *ddx2 = tg_newa(n, t);
                float *dgm = tg_upf(b.gamma, c), *dsm = tg_upf(sm, c), *dsi = tg_upf(si, c),
                      *ddg = tg_newf(c), *ddb = tg_newf(c), *ddg2 = tg_newf(c),
                      *ddb2 = tg_newf(c);
                tg_ready();
                cr_assert_eq(sl_bn_bwd_act_cuda(&eg, R, c, dx, dz, ddz, dgm, dsm, dsi, ddx, ddg,
                                                ddb), SL_OK, "%s", sl_errmsg());
                float *gdz = falloc(n), *gdx = falloc(n), *gdg = falloc(c), *gdb = falloc(c);
                tg_downa(gdz, ddz, n, t), tg_downa(gdx, ddx, n, t);
                tg_downf(gdg, ddg, c), tg_downf(gdb, ddb, c);
                assert_same(gdz, wdz, n, "masked dz in place");
                assert_act(gdx, wdx, n, 1e-6 * max_gi(b.gamma, si, c), 1e-5, t, "dx");
                double atol = 2e-6 * sqrt((double)R);
                tu_assert_close(gdg, wdg, c, atol, 1e-5, "dgamma");
                tu_assert_close(gdb, wdb, c, atol, 1e-5, "dbeta");
                /* the unfused cuda ops: the same bits */
                cr_assert_eq(sl_relu_bwd_cuda(&eg, n, dz, ddz2, ddz2), SL_OK, "%s", sl_errmsg());
                cr_assert_eq(sl_bn_bwd_cuda(&eg, R, c, dx, ddz2, dgm, dsm, dsi, ddx2, ddg2, ddb2),
                             SL_OK, "%s", sl_errmsg());
                assert_same_dev(ddz, ddz2, n, t, "masked dz vs relu_bwd on cuda");
                assert_same_dev(ddx, ddx2, n, t, "dx vs relu_bwd -> bn_bwd on cuda");
                float *udg = falloc(c), *udb = falloc(c);
                tg_downf(udg, ddg2, c), tg_downf(udb, ddb2, c);
                assert_same(gdg, udg, c, "dgamma fused vs unfused");
                assert_same(gdb, udb, c, "dbeta fused vs unfused");
                void *d[] = {dx, dz, ddz, ddz2, ddx, ddx2, dgm, dsm, dsi, ddg, ddb, ddg2, ddb2};
                for (size_t q = 0; q < sizeof d / sizeof d[0]; q++)
                    tg_free(d[q]);
                free(z), free(sm), free(si), free(rm), free(rv), free(tmp), free(wdz), free(wdx);
                free(wdg), free(wdb), free(gdz), free(gdx), free(gdg), free(gdb), free(udg);
                free(udb);
                bn_in_free(&b);
            }
    }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* What model.c and the contract allow: y = x and y = r (forward), dx = dz
 * (backward); dgamma / dbeta NULL. The bits of separate buffers. */
Test(train_ops_cuda, bn_fused_aliasing)
{
    const int64_t R = 257;
    const int c = 17;
    int64_t n = R * c;
    sl_exec eg;
    tg_open(&eg, NULL);
    for (int k = 0; k < 2; k++) {
        sl_dtype t = k ? SL_DTYPE_BF16 : SL_DTYPE_F32;
        tg_set_act(&eg, t);
        bn_in b;
        bn_in_random(&b, R, c, 61 + k, 1.0f, 1.0f);
        float *r = frand(n, 62, -2, 2), *z = relu_like(n, 63, t);
        void *x = tg_upa(b.x, n, t), *xa = tg_upa(b.x, n, t), *rr = tg_upa(r, n, t),
             *ra = tg_upa(r, n, t), *y = tg_newa(n, t);
        float *gm = tg_upf(b.gamma, c), *bt = tg_upf(b.beta, c), *rm = tg_upf(b.rmean, c),
              *rv = tg_upf(b.rvar, c), *sm = tg_newf(c), *si = tg_newf(c);
        tg_ready();
        cr_assert_eq(sl_bn_fwd_train_act_cuda(&eg, R, c, x, gm, bt, 0.1f, 1e-5f, rm, rv, rr, 1, y,
                                              sm, si), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_bn_fwd_train_act_cuda(&eg, R, c, xa, gm, bt, 0.1f, 1e-5f, rm, rv, rr, 1,
                                              xa, sm, si), SL_OK, "%s", sl_errmsg());
        assert_same_dev(xa, y, n, t, "bn_fwd_train_act y = x");
        cr_assert_eq(sl_bn_fwd_train_act_cuda(&eg, R, c, x, gm, bt, 0.1f, 1e-5f, rm, rv, ra, 1, ra,
                                              sm, si), SL_OK, "%s", sl_errmsg());
        assert_same_dev(ra, y, n, t, "bn_fwd_train_act y = r");
        /* backward: dx = dz, and NULL dgamma / dbeta */
        void *dz = tg_upa(b.dy, n, t), *dza = tg_upa(b.dy, n, t), *zz = tg_upa(z, n, t),
             *dx = tg_newa(n, t);
        float *dg = tg_newf(c), *db = tg_newf(c);
        tg_ready();
        cr_assert_eq(sl_bn_bwd_act_cuda(&eg, R, c, x, zz, dz, gm, sm, si, dx, dg, db), SL_OK, "%s",
                     sl_errmsg());
        cr_assert_eq(sl_bn_bwd_act_cuda(&eg, R, c, x, zz, dza, gm, sm, si, dza, NULL, NULL), SL_OK,
                     "%s", sl_errmsg());
        assert_same_dev(dza, dx, n, t, "bn_bwd_act dx = dz");
        void *d[] = {x, xa, rr, ra, y, gm, bt, rm, rv, sm, si, dz, dza, zz, dx, dg, db};
        for (size_t q = 0; q < sizeof d / sizeof d[0]; q++)
            tg_free(d[q]);
        free(r), free(z);
        bn_in_free(&b);
    }
    tg_close(&eg);
}

/* n activations of t uploaded at element offset off of a fresh buffer
 * (off 1: no longer 16-byte aligned, so the kernels take their scalar
 * path); *base gets the buffer to free. */
static void *up_at(const float *h, int64_t n, int off, sl_dtype t, void **base)
{
    float *pad = falloc(n + off);
    memcpy(pad + off, h, (size_t)n * sizeof(float));
    *base = tg_upa(pad, n + off, t);
    free(pad);
    return (char *)*base + (size_t)off * tg_esize(t);
}

/* The vector path (c a multiple of 8 / 4, aligned rows), the scalar one
 * (c = 20 in bf16, or every pointer one element off), one row, and very
 * many rows (gy at its cap, every thread walking hundreds of rows): the
 * fused forward, the fused backward and eval against ref. */
Test(train_ops_cuda, bn_vector_scalar_one_and_many_rows)
{
    /* rows, c, element offset, types (bit 0 f32, bit 1 bf16) */
    static const int64_t cases[][4] = {
        {256 * 28 * 28 + 5, 64, 0, 2}, {5003, 72, 0, 3}, {5003, 72, 1, 3},
        {4099, 20, 0, 3},              {1, 72, 0, 3},    {1, 20, 1, 2},
    };
    static const sl_dtype types[2] = {SL_DTYPE_F32, SL_DTYPE_BF16};
    sl_exec er, eg;
    tg_open(&eg, NULL);
    ref_exec(&er);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int k = 0; k < 2; k++) {
            if (!(cases[ci][3] >> k & 1))
                continue;
            int64_t R = cases[ci][0], n = R * cases[ci][1];
            int c = (int)cases[ci][1], off = (int)cases[ci][2];
            sl_dtype t = types[k];
            tg_set_act(&eg, t);
            cr_log_info("bn paths %s rows %lld c %d offset %d", tg_type_name(t), (long long)R, c,
                        off);
            bn_in b;
            bn_in_random(&b, R, c, 1201 + 17 * ci + k, 0.5f, 1.0f);
            float *r = frand(n, 1301 + ci, -2, 2), *z = relu_like(n, 1401 + ci, t);
            tg_round_all(b.x, n, t), tg_round_all(b.dy, n, t), tg_round_all(r, n, t);
            void *bx, *br, *by, *bz, *bdz, *bdx;
            void *dx = up_at(b.x, n, off, t, &bx), *dr = up_at(r, n, off, t, &br);
            void *dy = up_at(b.x, n, off, t, &by), *dz = up_at(z, n, off, t, &bz);
            void *ddz = up_at(b.dy, n, off, t, &bdz), *ddx = up_at(b.x, n, off, t, &bdx);
            float *dg = tg_upf(b.gamma, c), *dbt = tg_upf(b.beta, c), *drm = tg_upf(b.rmean, c),
                  *drv = tg_upf(b.rvar, c), *dsm = tg_newf(c), *dsi = tg_newf(c),
                  *dgg = tg_newf(c), *dgb = tg_newf(c);
            float *got = falloc(n), *want = falloc(n), *ybn = falloc(n), *sm = falloc(c),
                  *si = falloc(c), *gsm = falloc(c), *gsi = falloc(c), *rm = fdup(b.rmean, c),
                  *rv = fdup(b.rvar, c), *wdg = falloc(c), *wdb = falloc(c), *gdg = falloc(c),
                  *gdb = falloc(c);
            tg_ready();
            if (R >= 2) { /* training statistics need two rows */
                ref_fwd_act(&er, &b, r, 1, t, rm, rv, want, ybn, sm, si);
                cr_assert_eq(sl_bn_fwd_train_act_cuda(&eg, R, c, dx, dg, dbt, 0.1f, 1e-5f, drm,
                                                      drv, dr, 1, dy, dsm, dsi), SL_OK, "%s",
                             sl_errmsg());
                tg_downa(got, dy, n, t), tg_downf(gsm, dsm, c), tg_downf(gsi, dsi, c);
                assert_fwd_act(got, want, ybn, n, t, "fused y");
                assert_mean_close(gsm, sm, b.x, R, c, "save_mean");
                tu_assert_close(gsi, si, c, 0, 1e-6, "save_invstd");
            } else { /* any saved statistics do for backward */
                for (int ch = 0; ch < c; ch++)
                    sm[ch] = 0.25f, si[ch] = 1.5f;
                cr_assert_eq(cudaMemcpy(dsm, sm, c * sizeof(float), cudaMemcpyHostToDevice),
                             cudaSuccess);
                cr_assert_eq(cudaMemcpy(dsi, si, c * sizeof(float), cudaMemcpyHostToDevice),
                             cudaSuccess);
                tg_ready();
            }
            /* backward: ref's relu_bwd -> bn_bwd; the GPU's dx written over its x copy */
            float *wdz = falloc(n);
            cr_assert_eq(sl_relu_bwd_ref(&er, n, z, b.dy, wdz), SL_OK);
            cr_assert_eq(sl_bn_bwd_ref(&er, R, c, b.x, wdz, b.gamma, sm, si, want, wdg, wdb), SL_OK,
                         "%s", sl_errmsg());
            cr_assert_eq(sl_bn_bwd_act_cuda(&eg, R, c, ddx, dz, ddz, dg, dsm, dsi, ddx, dgg, dgb),
                         SL_OK, "%s", sl_errmsg());
            tg_downa(got, ddz, n, t);
            assert_same(got, wdz, n, "masked dz");
            tg_downa(got, ddx, n, t), tg_downf(gdg, dgg, c), tg_downf(gdb, dgb, c);
            assert_act(got, want, n, 1e-6 * max_gi(b.gamma, si, c), 1e-5, t, "dx over x");
            tu_assert_close(gdg, wdg, c, 2e-6 * sqrt((double)R), 1e-5, "dgamma");
            tu_assert_close(gdb, wdb, c, 2e-6 * sqrt((double)R), 1e-5, "dbeta");
            /* eval with the running statistics */
            cr_assert_eq(sl_bn_fwd_eval_ref(&er, R, c, b.x, b.gamma, b.beta, b.rmean, b.rvar,
                                            1e-5f, want), SL_OK);
            cr_assert_eq(cudaMemcpy(drm, b.rmean, c * sizeof(float), cudaMemcpyHostToDevice),
                         cudaSuccess);
            cr_assert_eq(cudaMemcpy(drv, b.rvar, c * sizeof(float), cudaMemcpyHostToDevice),
                         cudaSuccess);
            tg_ready();
            cr_assert_eq(sl_bn_fwd_eval_cuda(&eg, R, c, dx, dg, dbt, drm, drv, 1e-5f, dy), SL_OK,
                         "%s", sl_errmsg());
            tg_downa(got, dy, n, t);
            assert_act(got, want, n, 2e-6, 2e-6, t, "eval y");
            void *d[] = {bx, br, by, bz, bdz, bdx, dg, dbt, drm, drv, dsm, dsi, dgg, dgb};
            for (size_t q = 0; q < sizeof d / sizeof d[0]; q++)
                tg_free(d[q]);
            free(r), free(z), free(got), free(want), free(ybn), free(sm), free(si), free(gsm);
            free(gsi), free(rm), free(rv), free(wdg), free(wdb), free(gdg), free(gdb), free(wdz);
            bn_in_free(&b);
        }
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* The one-pass statistics on data that breaks naive formulas: a constant
 * channel (variance 0), a bimodal one (+-1000: every thread's shift far
 * from the mean), 1e4 + 1e-3 noise, a first row far out (the shifts of the
 * first threads are outliers), tiny values; against ref's two passes. */
Test(train_ops_cuda, bn_one_pass_stats_hard_inputs)
{
    const int64_t R = 4099;
    const int c = 5;
    int64_t n = R * c;
    sl_exec er, eg;
    tg_open(&eg, &hg_ops);
    ref_exec(&er);
    bn_in b;
    bn_in_random(&b, R, c, 5, 0.0f, 1.0f);
    uint64_t st = 6;
    for (int64_t i = 0; i < R; i++) {
        b.x[i * c + 0] = 3.25f;
        b.x[i * c + 1] = (i < R / 3 ? 1000.0f : -1000.0f) + urand(&st, -1, 1);
        b.x[i * c + 2] = 1e4f + 1e-3f * (float)(i % 7);
        b.x[i * c + 3] = i < 40 ? 5e3f : urand(&st, -1, 1);
        b.x[i * c + 4] = 1e-20f * urand(&st, -1, 1);
    }
    bn_out r, g;
    bn_run(&er, &b, b.x, &r);
    bn_run(&eg, &b, b.x, &g);
    assert_mean_close(g.sm, r.sm, b.x, R, c, "save_mean");
    tu_assert_close(g.si, r.si, c, 0, 1e-6, "save_invstd");
    tu_assert_close(g.rv, r.rv, c, 1e-30, 1e-6, "running_var");
    tu_assert_close(g.y, r.y, n, 2e-5, 2e-6, "y");
    cr_assert_eq(g.si[0], r.si[0], "constant channel: invstd %.9g want %.9g (1/sqrt(eps))",
                 g.si[0], r.si[0]);
    bn_out_free(&r), bn_out_free(&g);
    bn_in_free(&b);
    tg_close(&eg);
    sl_exec_fini(&er);
}

/* SLUICE_CUDA_FUSE picks the cuda table, read by sl_exec_init. */
Test(train_ops_cuda, fuse_switch)
{
    int cnt = 0;
    if (cudaGetDeviceCount(&cnt) != cudaSuccess || cnt <= 0) {
        (void)cudaGetLastError();
        cr_skip_test("no GPU");
    }
    sl_exec e;
    static const char *vals[] = {NULL, "1", "0"};
    for (int i = 0; i < 3; i++) {
        if (vals[i])
            cr_assert_eq(setenv("SLUICE_CUDA_FUSE", vals[i], 1), 0);
        else
            unsetenv("SLUICE_CUDA_FUSE");
        cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_OK, "%s", sl_errmsg());
        int fused = i < 2;
        cr_assert_str_eq(e.ops->name, "cuda");
        cr_assert_eq(e.ops == &sl_ops_cuda, fused);
        cr_assert_eq(e.ops->bn_fwd_train_act != NULL, fused, "SLUICE_CUDA_FUSE=%s", vals[i]);
        cr_assert_eq(e.ops->bn_bwd_act != NULL, fused);
        cr_assert(e.ops->bn_fwd_train && e.ops->bn_bwd && e.ops->relu_bwd && e.ops->conv_fwd);
        sl_exec_fini(&e);
    }
    cr_assert_eq(setenv("SLUICE_CUDA_FUSE", "yes", 1), 0);
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CUDA, 1), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "SLUICE_CUDA_FUSE=yes"), "%s", sl_errmsg());
    cr_assert_null(e.cuda);
    unsetenv("SLUICE_CUDA_FUSE");
}

/* Before any device work: shapes, NULL tensors, no context. */
Test(train_ops_cuda, bn_fused_bad_arguments)
{
    sl_exec e;
    memset(&e, 0, sizeof e);
    e.backend = SL_BACKEND_CUDA;
    e.ops = &sl_ops_cuda; /* the entry points check, then run the cuda slot */
    float f[8] = {0};
    cr_assert_eq(sl_bn_fwd_train_act(&e, 1, 3, f, f, f, 0.1f, 1e-5f, f, f, f, 1, f, f, f),
                 SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_fwd_train_act: cuda") &&
              strstr(sl_errmsg(), "at least 2 values per channel"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_fwd_train_act(&e, 4, 0, f, f, f, 0.1f, 1e-5f, f, f, NULL, 0, f, f, f),
                 SL_EINVAL);
    cr_assert_eq(sl_bn_fwd_train_act(&e, 4, 3, f, f, f, 0.1f, 1e-5f, f, f, f, 1, NULL, f, f),
                 SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "NULL tensor"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_fwd_train_act(&e, 4, 3, NULL, f, f, 0.1f, 1e-5f, f, f, f, 1, f, f, f),
                 SL_EINVAL);
    cr_assert_eq(sl_bn_fwd_train_act(&e, 4, 3, f, f, f, 0.1f, 1e-5f, f, f, NULL, 1, f, f, f),
                 SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_act(&e, 0, 3, f, f, f, f, f, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_bwd_act: cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_act(&e, 2, -1, f, f, f, f, f, f, f, f, f), SL_EINVAL);
    cr_assert_eq(sl_bn_bwd_act(&e, 2, 3, f, NULL, f, f, f, f, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "NULL tensor"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_act(&e, 2, 3, f, f, f, f, f, f, f, NULL, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_act(NULL, 2, 3, f, f, f, f, f, f, f, NULL, NULL), SL_EINVAL);
}

#endif /* SLUICE_TRAIN_CUDA */

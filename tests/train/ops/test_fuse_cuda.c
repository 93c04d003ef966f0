/* tests/train/ops/test_fuse_cuda.c - the cuDNN-fusion ops (train_int.h's
 * "cuDNN graph fusion": train/ops/fuse.c, graph_cuda.c, fuse_cuda.cu)
 * against the ref backend's unfused ops on the same fp16 inputs, on
 * awkward shapes (8 and 2048 channels, one row, 1x1 and 3x3, stride 2):
 *   conv_fwd     y = conv(relu(x*s + b), w) and the per-channel sum and
 *                sum of squares of y;
 *   conv_wgrad   dw = conv_bwd_filter(relu(x*s + b), dy);
 *   conv_dgrad   da = relu'(xc*s + b) conv_bwd_data(dy, w), dgamma, dbeta,
 *                and bn_dx's dx = bn_bwd's;
 *   finalize + apply = bn_fwd_train (+ shortcut + ReLU), running stats
 *                included, and the folded fp16 scale and bias.
 * The fused outputs are fp16 roundings of f32 math, so each is held to
 * the reference within an fp16 rounding (2^-11 relative) plus a small
 * absolute part for sums of many terms. Refusals: a shape cuDNN's engines
 * do not take (c = 4) and, on the emulator, EMU_CUDNN_GRAPH=0 (every
 * graph refused) give SL_ENOTSUP with the reason; execs that cannot fuse
 * (f32, bf16, SLUICE_CUDNN_FUSION=0, cpu) say so. Skips without a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/train_int.h"

#ifndef SLUICE_TRAIN_CUDA
Test(train_fuse_cuda, fusion_built_without_cuda)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 1), SL_OK);
    cr_assert_eq(sl_fuse_available(&e), 0);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 4, 4, 8, 8, 3, 3, 1, 1), SL_OK);
    cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP), SL_ENOTSUP);
    sl_exec_fini(&e);
}
#else
#include "train/cuda_testutil.h"
#include "train/ops/cuda_int.h"

/* A cuda exec with fp16 activations and the cuda table, or skip. */
static void fuse_exec(sl_exec *e)
{
    tg_open(e, &sl_ops_cuda);
    tg_set_act(e, SL_DTYPE_F16);
    cr_assert_eq(sl_fuse_available(e), 1, "a cuda fp16 exec fuses by default");
}

/* The device is tests/cuda-emu's (whose EMU_* switches then work). */
static int on_emulator(void)
{
    struct cudaDeviceProp p;
    return cudaGetDeviceProperties(&p, 0) == cudaSuccess &&
           strcmp(p.name, "sluice host emulator") == 0;
}

static void ref_exec(sl_exec *e)
{
    cr_assert_eq(sl_exec_init(e, SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
}

/* n values in [lo, hi), rounded to fp16. */
static float *rnd16(int64_t n, uint64_t seed, float lo, float hi)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    cr_assert(v);
    uint64_t st = seed;
    for (int64_t i = 0; i < n; i++)
        v[i] = tg_round(lo + (hi - lo) * (float)((tu_rand(&st) >> 11) * 0x1p-53), SL_DTYPE_F16);
    return v;
}

static float maxabs(const float *v, int64_t n)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
    return m;
}

/* |got - want| <= rtol*|want| + atol*max|want| everywhere. */
static void near(const float *got, const float *want, int64_t n, double rtol, double atol,
                 const char *what)
{
    double scale = maxabs(want, n);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        cr_assert(d <= rtol * fabs(want[i]) + atol * scale + 1e-30,
                  "%s[%lld]: got %.7g want %.7g (|d| %.3g, max|want| %.3g)", what, (long long)i,
                  got[i], want[i], d, scale);
    }
}

/* relu(x*s + b) per channel of x (rows, c), in f32 as the prologue. */
static float *prologue(const float *x, int64_t rows, int c, const float *s, const float *b)
{
    float *t = malloc((size_t)(rows * c) * sizeof *t);
    for (int64_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            float v = x[r * c + ch] * s[ch] + b[ch];
            t[r * c + ch] = v > 0.0f ? v : 0.0f;
        }
    return t;
}

/* The prologue's fp16 scale and bias (2c) on the device from host f32 s, b. */
static void *up_sb(const float *s, const float *b, int c)
{
    float *sb = malloc((size_t)2 * c * sizeof *sb);
    memcpy(sb, s, (size_t)c * sizeof *sb);
    memcpy(sb + c, b, (size_t)c * sizeof *sb);
    void *d = tg_upa(sb, 2 * c, SL_DTYPE_F16);
    free(sb);
    return d;
}

typedef struct shape {
    int n, h, w, c, k, r, stride, pad;
} shape;

/* The awkward shapes: few and many channels, one row, 1x1 / 3x3, stride 2. */
static const shape shapes[] = {
    {2, 5, 5, 8, 16, 3, 1, 1},  {2, 6, 6, 64, 8, 1, 2, 0}, {1, 1, 7, 16, 32, 3, 1, 1},
    {2, 3, 3, 2048, 8, 1, 1, 0}, {2, 7, 7, 32, 64, 3, 2, 1},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static sl_conv_shape conv_of(const shape *s)
{
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, s->n, s->h, s->w, s->c, s->k, s->r, s->r, s->stride,
                                    s->pad), SL_OK);
    return sh;
}

Test(train_fuse_cuda, conv_fwd_stats_match_unfused)
{
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    for (int t = 0; t < NSHAPES; t++) {
        sl_conv_shape sh = conv_of(&shapes[t]);
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c, nw = (int64_t)sh.k * sh.r * sh.s * sh.c,
                ny = (int64_t)sh.n * sh.p * sh.q * sh.k;
        float *x = rnd16(nx, 11 + t, -2, 2), *w = rnd16(nw, 12 + t, -0.5f, 0.5f);
        float *s = rnd16(sh.c, 13 + t, 0.5f, 1.5f), *b = rnd16(sh.c, 14 + t, -0.5f, 0.5f);
        cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP), SL_OK, "%s", sl_errmsg());
        void *dx = tg_upa(x, nx, SL_DTYPE_F16), *dw = tg_upa(w, nw, SL_DTYPE_F16);
        void *dsb = up_sb(s, b, sh.c), *dy = tg_newa(ny, SL_DTYPE_F16);
        float *dsum = tg_newf(sh.k), *dsq = tg_newf(sh.k);
        tg_ready();
        cr_assert_eq(sl_fuse_conv_fwd(&e, &sh, dx, dsb, dw, dy, dsum, dsq), SL_OK, "%s",
                     sl_errmsg());
        float *y = malloc((size_t)ny * 4), *sum = malloc((size_t)sh.k * 4),
              *sq = malloc((size_t)sh.k * 4), *want = malloc((size_t)ny * 4);
        tg_downa(y, dy, ny, SL_DTYPE_F16);
        tg_downf(sum, dsum, sh.k);
        tg_downf(sq, dsq, sh.k);
        float *tin = prologue(x, nx / sh.c, sh.c, s, b);
        cr_assert_eq(sl_conv_fwd(&ref, &sh, tin, w, want), SL_OK);
        near(y, want, ny, 1.0 / 1024, 1e-5, "y");
        double *hs = calloc((size_t)sh.k, sizeof *hs), *hq = calloc((size_t)sh.k, sizeof *hq);
        for (int64_t i = 0; i < ny; i++)
            hs[i % sh.k] += y[i], hq[i % sh.k] += (double)y[i] * y[i];
        for (int k = 0; k < sh.k; k++) {
            cr_assert(fabs(sum[k] - hs[k]) <= 1e-5 * (fabs(hs[k]) + 1) + 1e-6 * hq[k],
                      "shape %d sum[%d]: %g want %g", t, k, sum[k], hs[k]);
            cr_assert(fabs(sq[k] - hq[k]) <= 1e-5 * hq[k] + 1e-6, "shape %d sqsum[%d]: %g want %g",
                      t, k, sq[k], hq[k]);
        }
        free(hs), free(hq), free(tin), free(x), free(w), free(s), free(b), free(y), free(sum);
        free(sq), free(want);
        tg_free(dx), tg_free(dw), tg_free(dsb), tg_free(dy), tg_free(dsum), tg_free(dsq);
    }
    int built = 0, refused = 0;
    sl_graph_stats(sl_cuda_of(&e), &built, &refused);
    cr_assert_eq(built, NSHAPES, "one ConvBNfprop plan per shape, cached: %d", built);
    cr_assert_eq(refused, 0);
    sl_exec_fini(&ref);
    tg_close(&e);
}

Test(train_fuse_cuda, conv_wgrad_matches_unfused)
{
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    for (int t = 0; t < NSHAPES; t++) {
        sl_conv_shape sh = conv_of(&shapes[t]);
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c, nw = (int64_t)sh.k * sh.r * sh.s * sh.c,
                ny = (int64_t)sh.n * sh.p * sh.q * sh.k;
        float *x = rnd16(nx, 21 + t, -2, 2), *dy = rnd16(ny, 22 + t, -1, 1);
        float *s = rnd16(sh.c, 23 + t, 0.5f, 1.5f), *b = rnd16(sh.c, 24 + t, -0.5f, 0.5f);
        cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_WGRAD), SL_OK, "%s", sl_errmsg());
        void *dx = tg_upa(x, nx, SL_DTYPE_F16), *ddy = tg_upa(dy, ny, SL_DTYPE_F16);
        void *dsb = up_sb(s, b, sh.c);
        float *ddw = tg_newf(nw);
        tg_ready();
        cr_assert_eq(sl_fuse_conv_wgrad(&e, &sh, dx, dsb, ddy, ddw), SL_OK, "%s", sl_errmsg());
        float *dw = malloc((size_t)nw * 4), *want = malloc((size_t)nw * 4);
        tg_downf(dw, ddw, nw);
        float *tin = prologue(x, nx / sh.c, sh.c, s, b);
        cr_assert_eq(sl_conv_bwd_filter(&ref, &sh, tin, dy, want), SL_OK);
        near(dw, want, nw, 1.0 / 1024, 1e-4, "dw");
        free(tin), free(x), free(dy), free(s), free(b), free(dw), free(want);
        tg_free(dx), tg_free(ddy), tg_free(dsb), tg_free(ddw);
    }
    sl_exec_fini(&ref);
    tg_close(&e);
}

Test(train_fuse_cuda, conv_dgrad_bn_weights_and_dx_match_unfused)
{
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    for (int t = 0; t < NSHAPES; t++) {
        sl_conv_shape sh = conv_of(&shapes[t]);
        int c = sh.c;
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * c, nw = (int64_t)sh.k * sh.r * sh.s * c,
                ny = (int64_t)sh.n * sh.p * sh.q * sh.k, rows = nx / c;
        float *xc = rnd16(nx, 31 + t, -2, 2), *w = rnd16(nw, 32 + t, -0.5f, 0.5f);
        float *dy = rnd16(ny, 33 + t, -1, 1), *gamma = rnd16(c, 34 + t, 0.5f, 1.5f);
        float *beta = rnd16(c, 35 + t, -0.5f, 0.5f);
        /* the previous BN's statistics and its folding, as the forward made them */
        float *mean = malloc((size_t)c * 4), *invstd = malloc((size_t)c * 4),
              *s = malloc((size_t)c * 4), *b = malloc((size_t)c * 4);
        for (int ch = 0; ch < c; ch++) {
            double m = 0, q = 0;
            for (int64_t r = 0; r < rows; r++)
                m += xc[r * c + ch];
            m /= rows;
            for (int64_t r = 0; r < rows; r++)
                q += (xc[r * c + ch] - m) * (xc[r * c + ch] - m);
            mean[ch] = (float)m;
            invstd[ch] = (float)(1.0 / sqrt(q / rows + 1e-5));
            s[ch] = tg_round(gamma[ch] * invstd[ch], SL_DTYPE_F16);
            b[ch] = tg_round(beta[ch] - mean[ch] * gamma[ch] * invstd[ch], SL_DTYPE_F16);
        }
        cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_DGRAD), SL_OK, "%s", sl_errmsg());
        void *ddy = tg_upa(dy, ny, SL_DTYPE_F16), *dwt = tg_upa(w, nw, SL_DTYPE_F16);
        void *dxc = tg_upa(xc, nx, SL_DTYPE_F16), *dsb = up_sb(s, b, c);
        float *dmean = tg_upf(mean, c), *dinv = tg_upf(invstd, c), *dgam = tg_upf(gamma, c);
        void *dda = tg_newa(nx, SL_DTYPE_F16), *ddx = tg_newa(nx, SL_DTYPE_F16);
        float *ddg = tg_newf(c), *ddb = tg_newf(c), *dcoef = tg_newf(8 * c);
        tg_ready();
        cr_assert_eq(sl_fuse_conv_dgrad(&e, &sh, ddy, dwt, dxc, dsb, dmean, dinv, dgam, dda, ddg,
                                        ddb, dcoef), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_fuse_bn_dx(&e, rows, c, dda, dxc, dmean, dcoef, ddx), SL_OK, "%s",
                     sl_errmsg());
        float *da = malloc((size_t)nx * 4), *dx = malloc((size_t)nx * 4),
              *g = malloc((size_t)nx * 4), *dg = malloc((size_t)c * 4),
              *db = malloc((size_t)c * 4);
        tg_downa(da, dda, nx, SL_DTYPE_F16);
        tg_downa(dx, ddx, nx, SL_DTYPE_F16);
        tg_downf(dg, ddg, c);
        tg_downf(db, ddb, c);
        /* da: the data gradient masked by the BN output's sign */
        cr_assert_eq(sl_conv_bwd_data(&ref, &sh, dy, w, g), SL_OK);
        for (int64_t i = 0; i < nx; i++)
            g[i] = xc[i] * s[i % c] + b[i % c] > 0.0f ? g[i] : 0.0f;
        near(da, g, nx, 1.0 / 1024, 1e-5, "da");
        /* dgamma, dbeta, dx: bn_bwd on the fused da (the ref's own statistics) */
        float *wdx = malloc((size_t)nx * 4), *wdg = malloc((size_t)c * 4),
              *wdb = malloc((size_t)c * 4);
        cr_assert_eq(sl_bn_bwd(&ref, rows, c, xc, da, gamma, mean, invstd, wdx, wdg, wdb),
                     SL_OK);
        near(db, wdb, c, 1e-4, 1e-5, "dbeta");
        near(dg, wdg, c, 1e-4, 1e-5, "dgamma");
        near(dx, wdx, nx, 1.0 / 512, 1e-3, "dx");
        free(xc), free(w), free(dy), free(gamma), free(beta), free(mean), free(invstd), free(s);
        free(b), free(da), free(dx), free(g), free(dg), free(db), free(wdx), free(wdg), free(wdb);
        tg_free(ddy), tg_free(dwt), tg_free(dxc), tg_free(dsb), tg_free(dmean), tg_free(dinv);
        tg_free(dgam), tg_free(dda), tg_free(ddx), tg_free(ddg), tg_free(ddb), tg_free(dcoef);
    }
    sl_exec_fini(&ref);
    tg_close(&e);
}

Test(train_fuse_cuda, finalize_and_apply_match_bn_fwd_train)
{
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    const int64_t rows_of[] = {2, 50, 333};
    const int cs[] = {8, 64, 2048};
    for (int t = 0; t < 3; t++) {
        int64_t rows = rows_of[t];
        int c = cs[t];
        int64_t n = rows * c;
        float *y = rnd16(n, 41 + t, -1.5f, 2.5f), *r = rnd16(n, 42 + t, -1, 1);
        float *gamma = rnd16(c, 43 + t, 0.5f, 1.5f), *beta = rnd16(c, 44 + t, -0.5f, 0.5f);
        float *rm = rnd16(c, 45 + t, -0.1f, 0.1f), *rv = rnd16(c, 46 + t, 0.5f, 2);
        float *sum = malloc((size_t)c * 4), *sq = malloc((size_t)c * 4);
        for (int ch = 0; ch < c; ch++) {
            double a = 0, q = 0;
            for (int64_t i = 0; i < rows; i++)
                a += y[i * c + ch], q += (double)y[i * c + ch] * y[i * c + ch];
            sum[ch] = (float)a, sq[ch] = (float)q;
        }
        float *dsum = tg_upf(sum, c), *dsq = tg_upf(sq, c), *dgam = tg_upf(gamma, c);
        float *dbet = tg_upf(beta, c), *drm = tg_upf(rm, c), *drv = tg_upf(rv, c);
        float *dsm = tg_newf(c), *dsi = tg_newf(c), *dk = tg_newf(4 * c);
        void *dsb = tg_newa(2 * c, SL_DTYPE_F16), *dy = tg_upa(y, n, SL_DTYPE_F16);
        void *dr = tg_upa(r, n, SL_DTYPE_F16), *dz = tg_newa(n, SL_DTYPE_F16);
        tg_ready();
        cr_assert_eq(sl_fuse_bn_finalize(&e, c, rows, dsum, dsq, dgam, dbet, 0.1f, 1e-5f, drm,
                                         drv, dsm, dsi, dk, dsb), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_fuse_bn_apply(&e, rows, c, dy, dk, dr, 1, dz), SL_OK, "%s", sl_errmsg());
        float *z = malloc((size_t)n * 4), *sb = malloc((size_t)2 * c * 4);
        float *grm = malloc((size_t)c * 4), *grv = malloc((size_t)c * 4),
              *gsm = malloc((size_t)c * 4), *gsi = malloc((size_t)c * 4);
        tg_downa(z, dz, n, SL_DTYPE_F16);
        tg_downa(sb, dsb, 2 * c, SL_DTYPE_F16);
        tg_downf(grm, drm, c), tg_downf(grv, drv, c), tg_downf(gsm, dsm, c);
        tg_downf(gsi, dsi, c);
        /* the ref: bn_fwd_train, + r, relu */
        float *wz = malloc((size_t)n * 4), *wsm = malloc((size_t)c * 4),
              *wsi = malloc((size_t)c * 4);
        cr_assert_eq(sl_bn_fwd_train(&ref, rows, c, y, gamma, beta, 0.1f, 1e-5f, rm, rv, wz, wsm,
                                     wsi), SL_OK);
        for (int64_t i = 0; i < n; i++) {
            float v = tg_round(wz[i], SL_DTYPE_F16) + r[i];
            v = tg_round(v, SL_DTYPE_F16);
            wz[i] = v > 0 ? v : 0;
        }
        near(gsm, wsm, c, 1e-6, 1e-6, "save_mean");
        near(gsi, wsi, c, 1e-4, 0, "save_invstd");
        near(grm, rm, c, 1e-6, 1e-6, "running_mean");
        near(grv, rv, c, 1e-4, 0, "running_var");
        near(z, wz, n, 1.0 / 512, 2e-3, "z");
        for (int ch = 0; ch < c; ch++) {
            float scale = tg_round(gamma[ch] * wsi[ch], SL_DTYPE_F16);
            cr_assert(fabsf(sb[ch] - scale) <= 2e-3f * fabsf(scale), "sb scale[%d]: %g want %g",
                      ch, sb[ch], scale);
            float bias = beta[ch] - wsm[ch] * gamma[ch] * wsi[ch];
            cr_assert(fabsf(sb[c + ch] - bias) <= 2e-3f * (fabsf(bias) + 1), "sb bias[%d]", ch);
        }
        free(y), free(r), free(gamma), free(beta), free(rm), free(rv), free(sum), free(sq);
        free(z), free(sb), free(grm), free(grv), free(gsm), free(gsi), free(wz), free(wsm);
        free(wsi);
        tg_free(dsum), tg_free(dsq), tg_free(dgam), tg_free(dbet), tg_free(drm), tg_free(drv);
        tg_free(dsm), tg_free(dsi), tg_free(dk), tg_free(dsb), tg_free(dy), tg_free(dr);
        tg_free(dz);
    }
    sl_exec_fini(&ref);
    tg_close(&e);
}

Test(train_fuse_cuda, refusals_name_the_graph)
{
    sl_exec e;
    fuse_exec(&e);
    /* c = 4: the engines want multiples of 8 */
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 5, 5, 4, 8, 3, 3, 1, 1), SL_OK);
    cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP), SL_ENOTSUP);
    cr_assert(strstr(sl_fuse_refusal(&e), "ConvBNfprop refused for n=2 5x5 c=4 k=8"),
              "refusal: %s", sl_fuse_refusal(&e));
    /* refused once, remembered: no second build */
    cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP), SL_ENOTSUP);
    int built = 0, refused = 0;
    sl_graph_stats(sl_cuda_of(&e), &built, &refused);
    cr_assert_eq(refused, 1);
    /* arguments are checked before anything runs */
    cr_assert_eq(sl_fuse_prepare(&e, &sh, 0), SL_EINVAL);
    cr_assert_eq(sl_fuse_conv_fwd(&e, &sh, NULL, NULL, NULL, NULL, NULL, NULL), SL_EINVAL);
    tg_close(&e);
}

Test(train_fuse_cuda, emulator_refusing_every_graph)
{
    sl_exec e;
    fuse_exec(&e);
    if (!on_emulator())
        cr_skip_test("EMU_CUDNN_GRAPH=0 is the emulator's switch");
    cr_assert_eq(setenv("EMU_CUDNN_GRAPH", "0", 1), 0);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 5, 5, 8, 16, 3, 3, 1, 1), SL_OK);
    int rc = sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP | SL_FUSE_WGRAD | SL_FUSE_DGRAD);
    unsetenv("EMU_CUDNN_GRAPH");
    cr_assert_eq(rc, SL_ENOTSUP, "%s", sl_errmsg());
    cr_assert(strstr(sl_fuse_refusal(&e), "refused"), "%s", sl_fuse_refusal(&e));
    tg_close(&e);
}

Test(train_fuse_cuda, execs_that_do_not_fuse_say_so)
{
    sl_exec e;
    tg_open(&e, &sl_ops_cuda);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 5, 5, 8, 16, 3, 3, 1, 1), SL_OK);
    const sl_dtype other[] = {SL_DTYPE_F32, SL_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        tg_set_act(&e, other[i]);
        cr_assert_eq(sl_fuse_available(&e), 0);
        cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP), SL_ENOTSUP);
        cr_assert(strstr(sl_errmsg(), "fp16"), "%s", sl_errmsg());
    }
    tg_close(&e);
    cr_assert_eq(setenv("SLUICE_CUDNN_FUSION", "0", 1), 0);
    tg_open(&e, &sl_ops_cuda);
    unsetenv("SLUICE_CUDNN_FUSION");
    tg_set_act(&e, SL_DTYPE_F16);
    cr_assert_eq(sl_fuse_available(&e), 0, "SLUICE_CUDNN_FUSION=0 turns it off");
    tg_close(&e);
    sl_exec cpu;
    cr_assert_eq(sl_exec_init(&cpu, SL_BACKEND_CPU, 1), SL_OK);
    cr_assert_eq(sl_fuse_prepare(&cpu, &sh, SL_FUSE_FPROP), SL_ENOTSUP);
    sl_exec_fini(&cpu);
}
#endif

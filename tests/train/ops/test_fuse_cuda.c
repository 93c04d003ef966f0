/* tests/train/ops/test_fuse_cuda.c - the cuDNN-fusion ops (train/ops/ops.h's
 * "cuDNN graph fusion": train/ops/fuse.c, graph_cuda.c, graph_build_cuda.c,
 * fuse_cuda.cu) against the ref backend's unfused ops on the same fp16
 * inputs, holding them to what NVIDIA documents, not to what an emulator
 * happens to do:
 *   conv_fwd     y = conv(relu(x*s + b), w) and the per-channel sum and sum
 *                of squares of y (cuDNN may sum y before or after rounding
 *                it to fp16: the bound allows either);
 *   conv_wgrad   dw = conv_bwd_filter(relu(x*s + b), dy);
 *   conv_dgrad   da = relu'((xc - mean)*invstd*gamma + beta) conv_bwd_data(dy,
 *                w) (elements whose recompute is within rounding of 0 are
 *                not held: either mask is right), dgamma, dbeta, and
 *                bn_dx's dx = bn_bwd's;
 *   finalize + apply = bn_fwd_train (+ shortcut + ReLU), fold = finalize's
 *                constants from saved statistics.
 * Each fused output is an fp16 rounding of f32 math, held to the reference
 * within an fp16 rounding (2^-11 relative) plus a small absolute part for
 * sums of many terms. Which shapes cuDNN takes is cuDNN's call: on a GPU
 * a refused shape is skipped with its reason (which must name the graph
 * and say something); the emulator (tests/cuda-emu) takes them all.
 * The emulator's switches then show issue 37's items caught: a ten-
 * configuration answer, NONDETERMINISTIC configurations filtered (and
 * reported when allowed), ConvBNwgrad's HALF / FLOAT retry, the SUB / ADD
 * mean step by cuDNN version, a workspace cap named as the cause; its
 * graph selftest shows the old dgrad graph refused. Execs that cannot
 * fuse say so. Skips without a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

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

static const char *const kind_name[5] = {"", "ConvBNfprop", "ConvBNwgrad", "", "DgradDreluBNBwdWeight"};

/* kind's plan for sh: 1 built; 0 refused on a GPU (logged: cuDNN's call),
 * with a reason that names the graph. The emulator takes every shape
 * here, so a refusal there fails. */
static int prepared(sl_exec *e, const sl_conv_shape *sh, unsigned kind)
{
    int rc = sl_fuse_prepare(e, sh, kind);
    if (rc == SL_OK)
        return 1;
    cr_assert_eq(rc, SL_ENOTSUP, "%s", sl_errmsg());
    sl_fuse_plan_info pi;
    cr_assert_eq(sl_fuse_plan(e, sh, kind, &pi), SL_OK);
    cr_assert(!pi.built && strstr(pi.note, kind_name[kind]) && strlen(pi.note) > 40,
              "a refusal names its graph and says why: %s", pi.note);
    cr_assert(!on_emulator(), "the emulator takes the documented graph here: %s", pi.note);
    cr_log_warn("cuDNN refused it (the model runs this conv unfused): %s", pi.note);
    return 0;
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

/* ResNet's kinds of convolution at small sizes: 3x3 s1, 1x1 s1, a 1x1 s2
 * downsample, a 3x3 s2, ResNet-50's widest 1x1 (2048 in), one image row. */
static const shape shapes[] = {
    {2, 5, 5, 64, 64, 3, 1, 1},  {2, 6, 6, 64, 32, 1, 2, 0}, {1, 1, 7, 16, 32, 3, 1, 1},
    {2, 3, 3, 2048, 8, 1, 1, 0}, {2, 7, 7, 32, 64, 3, 2, 1}, {2, 4, 4, 8, 16, 1, 1, 0},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static sl_conv_shape conv_of(const shape *s)
{
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, s->n, s->h, s->w, s->c, s->k, s->r, s->r, s->stride,
                                    s->pad), SL_OK);
    return sh;
}

/* Elements of a convolution's x (n,h,w,c), w (k,r,s,c) and y (n,p,q,k). */
typedef struct counts {
    int64_t x, w, y;
} counts;

static counts counts_of(const sl_conv_shape *sh)
{
    counts n = {(int64_t)sh->n * sh->h * sh->w * sh->c, (int64_t)sh->k * sh->r * sh->s * sh->c,
                (int64_t)sh->n * sh->p * sh->q * sh->k};
    return n;
}

/* A prologue's input for sh from seeded data: x (n,h,w,c) in [-2, 2),
 * scale in [0.5, 1.5), bias in [-0.5, 0.5), on the host (f32 of fp16
 * values) and the device (x fp16, sb the fp16 scale then bias). */
typedef struct pro {
    float *x, *s, *b;
    void *dx, *dsb;
} pro;

static void pro_make(const sl_conv_shape *sh, uint64_t seed, pro *p)
{
    int64_t nx = counts_of(sh).x;
    p->x = rnd16(nx, seed, -2, 2);
    p->s = rnd16(sh->c, seed + 1, 0.5f, 1.5f), p->b = rnd16(sh->c, seed + 2, -0.5f, 0.5f);
    p->dx = tg_upa(p->x, nx, SL_DTYPE_F16), p->dsb = up_sb(p->s, p->b, sh->c);
}

static void pro_free(pro *p)
{
    free(p->x), free(p->s), free(p->b);
    tg_free(p->dx), tg_free(p->dsb);
}

/* ConvBNfprop of sh on e from seeded data, checked against ref; SL_OK
 * when run, SL_ENOTSUP when refused (prepared's rule). */
static int check_fwd(sl_exec *e, sl_exec *ref, const sl_conv_shape *shp, int seed)
{
    sl_conv_shape sh = *shp;
    if (!prepared(e, &sh, SL_FUSE_FPROP))
        return SL_ENOTSUP;
    counts cn = counts_of(&sh);
    int64_t nx = cn.x, nw = cn.w, ny = cn.y;
    pro in;
    pro_make(&sh, 11 + seed, &in);
    float *w = rnd16(nw, 14 + seed, -0.5f, 0.5f);
    void *dw = tg_upa(w, nw, SL_DTYPE_F16), *dy = tg_newa(ny, SL_DTYPE_F16);
    float *dsum = tg_newf(sh.k), *dsq = tg_newf(sh.k);
    tg_ready();
    cr_assert_eq(sl_fuse_conv_fwd(e, &sh, in.dx, in.dsb, dw, dy, dsum, dsq), SL_OK, "%s",
                 sl_errmsg());
    float *y = malloc((size_t)ny * 4), *sum = malloc((size_t)sh.k * 4),
          *sq = malloc((size_t)sh.k * 4), *want = malloc((size_t)ny * 4);
    tg_downa(y, dy, ny, SL_DTYPE_F16);
    tg_downf(sum, dsum, sh.k);
    tg_downf(sq, dsq, sh.k);
    float *tin = prologue(in.x, nx / sh.c, sh.c, in.s, in.b);
    cr_assert_eq(sl_conv_fwd(ref, &sh, tin, w, want), SL_OK);
    near(y, want, ny, 1.0 / 1024, 1e-5, "y");
    /* the sums: of y before or after its fp16 rounding (2^-11 relative a
     * term; y^2 twice that), in f32 (a few ulps of the absolute sum) */
    double *hs = calloc((size_t)sh.k, sizeof *hs), *hq = calloc((size_t)sh.k, sizeof *hq),
           *ha = calloc((size_t)sh.k, sizeof *ha);
    for (int64_t i = 0; i < ny; i++)
        hs[i % sh.k] += y[i], ha[i % sh.k] += fabs(y[i]), hq[i % sh.k] += (double)y[i] * y[i];
    for (int k = 0; k < sh.k; k++) {
        cr_assert(fabs(sum[k] - hs[k]) <= 0x1p-11 * ha[k] + 1e-5 * ha[k] + 1e-6,
                  "sum[%d]: %g want %g (sum|y| %g)", k, sum[k], hs[k], ha[k]);
        cr_assert(fabs(sq[k] - hq[k]) <= 0x1p-10 * hq[k] + 1e-5 * hq[k] + 1e-6,
                  "sqsum[%d]: %g want %g", k, sq[k], hq[k]);
    }
    free(hs), free(hq), free(ha), free(tin), free(w), free(y), free(sum), free(sq), free(want);
    pro_free(&in);
    tg_free(dw), tg_free(dy), tg_free(dsum), tg_free(dsq);
    return SL_OK;
}

/* ConvBNwgrad likewise. */
static int check_wgrad(sl_exec *e, sl_exec *ref, const sl_conv_shape *shp, int seed)
{
    sl_conv_shape sh = *shp;
    if (!prepared(e, &sh, SL_FUSE_WGRAD))
        return SL_ENOTSUP;
    counts cn = counts_of(&sh);
    int64_t nx = cn.x, nw = cn.w, ny = cn.y;
    pro in;
    pro_make(&sh, 21 + seed, &in);
    float *dy = rnd16(ny, 24 + seed, -1, 1);
    void *ddy = tg_upa(dy, ny, SL_DTYPE_F16);
    float *ddw = tg_newf(nw);
    tg_ready();
    cr_assert_eq(sl_fuse_conv_wgrad(e, &sh, in.dx, in.dsb, ddy, ddw), SL_OK, "%s", sl_errmsg());
    float *dw = malloc((size_t)nw * 4), *want = malloc((size_t)nw * 4);
    tg_downf(dw, ddw, nw);
    float *tin = prologue(in.x, nx / sh.c, sh.c, in.s, in.b);
    cr_assert_eq(sl_conv_bwd_filter(ref, &sh, tin, dy, want), SL_OK);
    /* HALF intermediates (NVIDIA's sample form) round relu(x*s + b) once more */
    near(dw, want, nw, 1.0 / 512, 1e-3, "dw");
    free(tin), free(dy), free(dw), free(want);
    pro_free(&in);
    tg_free(ddy), tg_free(ddw);
    return SL_OK;
}

/* DgradDreluBNBwdWeight and the dx pass likewise. */
static int check_dgrad(sl_exec *e, sl_exec *ref, const sl_conv_shape *shp, int seed)
{
    sl_conv_shape sh = *shp;
    if (!prepared(e, &sh, SL_FUSE_DGRAD))
        return SL_ENOTSUP;
    int c = sh.c;
    int64_t nx = (int64_t)sh.n * sh.h * sh.w * c, nw = (int64_t)sh.k * sh.r * sh.s * c,
            ny = (int64_t)sh.n * sh.p * sh.q * sh.k, rows = nx / c;
    float *xc = rnd16(nx, 31 + seed, -2, 2), *w = rnd16(nw, 32 + seed, -0.5f, 0.5f);
    float *dy = rnd16(ny, 33 + seed, -1, 1), *gamma = rnd16(c, 34 + seed, 0.5f, 1.5f);
    float *beta = rnd16(c, 35 + seed, -0.5f, 0.5f);
    /* the previous BN's statistics, as its forward saved them */
    float *mean = malloc((size_t)c * 4), *invstd = malloc((size_t)c * 4);
    for (int ch = 0; ch < c; ch++) {
        double m = 0, q = 0;
        for (int64_t r = 0; r < rows; r++)
            m += xc[r * c + ch];
        m /= rows;
        for (int64_t r = 0; r < rows; r++)
            q += (xc[r * c + ch] - m) * (xc[r * c + ch] - m);
        mean[ch] = (float)m;
        invstd[ch] = (float)(1.0 / sqrt(q / rows + 1e-5));
    }
    void *ddy = tg_upa(dy, ny, SL_DTYPE_F16), *dwt = tg_upa(w, nw, SL_DTYPE_F16);
    void *dxc = tg_upa(xc, nx, SL_DTYPE_F16);
    float *dmean = tg_upf(mean, c), *dinv = tg_upf(invstd, c), *dgam = tg_upf(gamma, c);
    float *dbet = tg_upf(beta, c);
    void *dda = tg_newa(nx, SL_DTYPE_F16), *ddx = tg_newa(nx, SL_DTYPE_F16);
    float *ddg = tg_newf(c), *ddb = tg_newf(c), *dcoef = tg_newf(8 * c);
    tg_ready();
    cr_assert_eq(sl_fuse_conv_dgrad(e, &sh, ddy, dwt, dxc, dmean, dinv, dgam, dbet, dda, ddg,
                                    ddb, dcoef), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_fuse_bn_dx(e, rows, c, dda, dxc, dmean, dcoef, ddx), SL_OK, "%s",
                 sl_errmsg());
    float *da = malloc((size_t)nx * 4), *dx = malloc((size_t)nx * 4), *g = malloc((size_t)nx * 4),
          *dg = malloc((size_t)c * 4), *db = malloc((size_t)c * 4);
    tg_downa(da, dda, nx, SL_DTYPE_F16);
    tg_downa(dx, ddx, nx, SL_DTYPE_F16);
    tg_downf(dg, ddg, c);
    tg_downf(db, ddb, c);
    /* da: the data gradient masked by the previous BN's output sign, that
     * BN recomputed in f32; where the recompute is within rounding of 0
     * either mask is right, so there the fused da is taken as it is */
    cr_assert_eq(sl_conv_bwd_data(ref, &sh, dy, w, g), SL_OK);
    int64_t ambiguous = 0;
    for (int64_t i = 0; i < nx; i++) {
        int ch = (int)(i % c);
        float t = (xc[i] - mean[ch]) * invstd[ch] * gamma[ch] + beta[ch];
        float mag = fabsf(xc[i] - mean[ch]) * invstd[ch] * fabsf(gamma[ch]) + fabsf(beta[ch]);
        if (fabsf(t) <= 1e-5f * mag)
            g[i] = da[i], ambiguous++;
        else
            g[i] = t > 0.0f ? g[i] : 0.0f;
    }
    cr_assert_leq(ambiguous, nx / 100 + 1, "%lld of %lld recomputed BN outputs at 0",
                  (long long)ambiguous, (long long)nx);
    near(da, g, nx, 1.0 / 1024, 1e-5, "da");
    /* dgamma, dbeta, dx: bn_bwd on the fused da (the ref's own statistics) */
    float *wdx = malloc((size_t)nx * 4), *wdg = malloc((size_t)c * 4),
          *wdb = malloc((size_t)c * 4);
    cr_assert_eq(sl_bn_bwd(ref, rows, c, xc, da, gamma, mean, invstd, wdx, wdg, wdb), SL_OK);
    near(db, wdb, c, 1e-4, 1e-5, "dbeta");
    near(dg, wdg, c, 1e-4, 1e-5, "dgamma");
    near(dx, wdx, nx, 1.0 / 512, 1e-3, "dx");
    free(xc), free(w), free(dy), free(gamma), free(beta), free(mean), free(invstd), free(da);
    free(dx), free(g), free(dg), free(db), free(wdx), free(wdg), free(wdb);
    tg_free(ddy), tg_free(dwt), tg_free(dxc), tg_free(dmean), tg_free(dinv), tg_free(dgam);
    tg_free(dbet), tg_free(dda), tg_free(ddx), tg_free(ddg), tg_free(ddb), tg_free(dcoef);
    return SL_OK;
}

Test(train_fuse_cuda, conv_fwd_stats_match_unfused)
{
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    int ran = 0;
    for (int t = 0; t < NSHAPES; t++) {
        sl_conv_shape sh = conv_of(&shapes[t]);
        ran += check_fwd(&e, &ref, &sh, t) == SL_OK;
    }
    int built = 0, refused = 0;
    sl_graph_stats(sl_cuda_of(&e), &built, &refused);
    cr_assert_eq(built, ran, "one ConvBNfprop plan per shape, cached: %d", built);
    cr_assert_eq(built + refused, NSHAPES);
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
        check_wgrad(&e, &ref, &sh, t);
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
        if (check_dgrad(&e, &ref, &sh, t) == SL_OK) {
            sl_fuse_plan_info pi;
            cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_DGRAD, &pi), SL_OK);
            /* the mean step cudnn-frontend's sample takes from cuDNN 9.8.0 on */
            cr_assert(strstr(pi.form, cudnnGetVersion() >= 90800 ? "SUB" : "ADD alpha2 -1"),
                      "cuDNN %zu: %s", cudnnGetVersion(), pi.form);
        }
    }
    sl_exec_fini(&ref);
    tg_close(&e);
}

Test(train_fuse_cuda, finalize_fold_and_apply_match_bn_fwd_train)
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
        float *dsm = tg_newf(c), *dsi = tg_newf(c), *dk = tg_newf(4 * c), *dk2 = tg_newf(4 * c);
        void *dsb = tg_newa(2 * c, SL_DTYPE_F16), *dsb2 = tg_newa(2 * c, SL_DTYPE_F16);
        void *dy = tg_upa(y, n, SL_DTYPE_F16);
        void *dr = tg_upa(r, n, SL_DTYPE_F16), *dz = tg_newa(n, SL_DTYPE_F16);
        tg_ready();
        cr_assert_eq(sl_fuse_bn_finalize(&e, c, rows, dsum, dsq, dgam, dbet, 0.1f, 1e-5f, drm,
                                         drv, dsm, dsi, dk, dsb), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_fuse_bn_apply(&e, rows, c, dy, dk, dr, 1, dz), SL_OK, "%s", sl_errmsg());
        /* the fold of the saved statistics gives the finalize's constants */
        cr_assert_eq(sl_fuse_bn_fold(&e, c, dgam, dbet, dsm, dsi, dk2, dsb2), SL_OK, "%s",
                     sl_errmsg());
        float *z = malloc((size_t)n * 4), *sb = malloc((size_t)2 * c * 4),
              *sb2 = malloc((size_t)2 * c * 4), *k = malloc((size_t)4 * c * 4),
              *k2 = malloc((size_t)4 * c * 4);
        float *grm = malloc((size_t)c * 4), *grv = malloc((size_t)c * 4),
              *gsm = malloc((size_t)c * 4), *gsi = malloc((size_t)c * 4);
        tg_downa(z, dz, n, SL_DTYPE_F16);
        tg_downa(sb, dsb, 2 * c, SL_DTYPE_F16);
        tg_downa(sb2, dsb2, 2 * c, SL_DTYPE_F16);
        tg_downf(k, dk, 4 * c), tg_downf(k2, dk2, 4 * c);
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
        near(k2, k, 4 * c, 1e-6, 1e-7, "folded constants");
        near(sb2, sb, 2 * c, 2e-3, 1e-4, "folded fp16 scale and bias");
        for (int ch = 0; ch < c; ch++) {
            float scale = tg_round(gamma[ch] * wsi[ch], SL_DTYPE_F16);
            cr_assert(fabsf(sb[ch] - scale) <= 2e-3f * fabsf(scale), "sb scale[%d]: %g want %g",
                      ch, sb[ch], scale);
            float bias = beta[ch] - wsm[ch] * gamma[ch] * wsi[ch];
            cr_assert(fabsf(sb[c + ch] - bias) <= 2e-3f * (fabsf(bias) + 1), "sb bias[%d]", ch);
        }
        free(y), free(r), free(gamma), free(beta), free(rm), free(rv), free(sum), free(sq);
        free(z), free(sb), free(sb2), free(k), free(k2), free(grm), free(grv), free(gsm);
        free(gsi), free(wz), free(wsm), free(wsi);
        tg_free(dsum), tg_free(dsq), tg_free(dgam), tg_free(dbet), tg_free(drm), tg_free(drv);
        tg_free(dsm), tg_free(dsi), tg_free(dk), tg_free(dk2), tg_free(dsb), tg_free(dsb2);
        tg_free(dy), tg_free(dr), tg_free(dz);
    }
    sl_exec_fini(&ref);
    tg_close(&e);
}

Test(train_fuse_cuda, refusals_name_the_graph_and_the_cause)
{
    sl_exec e;
    fuse_exec(&e);
    /* c = 4: not 16-byte aligned fp16 rows (refused without asking cuDNN) */
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 5, 5, 4, 8, 3, 3, 1, 1), SL_OK);
    cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP), SL_ENOTSUP);
    cr_assert(strstr(sl_fuse_refusal(&e), "ConvBNfprop refused for n=2 5x5 c=4 k=8"),
              "refusal: %s", sl_fuse_refusal(&e));
    /* refused once, remembered: no second build; every kind asked has its state */
    cr_assert_eq(sl_fuse_prepare(&e, &sh, SL_FUSE_FPROP | SL_FUSE_DGRAD), SL_ENOTSUP);
    int built = 0, refused = 0;
    sl_graph_stats(sl_cuda_of(&e), &built, &refused);
    cr_assert_eq(refused, 2);
    sl_fuse_plan_info pi;
    cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_DGRAD, &pi), SL_OK);
    cr_assert(!pi.built && strstr(pi.note, "DgradDreluBNBwdWeight refused"), "%s", pi.note);
    cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_WGRAD, &pi), SL_ENOENT, "never asked for");
    /* arguments are checked before anything runs */
    cr_assert_eq(sl_fuse_prepare(&e, &sh, 0), SL_EINVAL);
    cr_assert_eq(sl_fuse_plan(&e, &sh, 3, &pi), SL_EINVAL);
    cr_assert_eq(sl_fuse_conv_fwd(&e, &sh, NULL, NULL, NULL, NULL, NULL, NULL), SL_EINVAL);
    tg_close(&e);
}

/* Set name=value for one prepare of kinds (the emulator reads its
 * switches at the heuristics); the prepare's code. */
static int prepare_with(sl_exec *e, const sl_conv_shape *sh, unsigned kinds, const char *name,
                        const char *value)
{
    cr_assert_eq(setenv(name, value, 1), 0);
    int rc = sl_fuse_prepare(e, sh, kinds);
    unsetenv(name);
    return rc;
}

#define EMULATOR_ONLY(what)                                                                  \
    do {                                                                                     \
        if (!tg_has_gpu() || !on_emulator())                                                 \
            cr_skip_test("%s is the emulator's switch", what);                              \
    } while (0)

Test(train_fuse_cuda, emulator_refusing_every_graph)
{
    EMULATOR_ONLY("EMU_CUDNN_GRAPH=0");
    sl_exec e;
    fuse_exec(&e);
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 2, 5, 5, 8, 16, 3, 3, 1, 1), SL_OK);
    int rc = prepare_with(&e, &sh, SL_FUSE_FPROP | SL_FUSE_WGRAD | SL_FUSE_DGRAD,
                          "EMU_CUDNN_GRAPH", "0");
    cr_assert_eq(rc, SL_ENOTSUP, "%s", sl_errmsg());
    /* each refusal carries cuDNN's own words (cudnnGetLastErrorString) */
    for (unsigned k = SL_FUSE_FPROP; k <= SL_FUSE_DGRAD; k <<= 1) {
        sl_fuse_plan_info pi;
        cr_assert_eq(sl_fuse_plan(&e, &sh, k, &pi), SL_OK);
        cr_assert(!pi.built && strstr(pi.note, "EMU_CUDNN_GRAPH=0 refuses every graph"),
                  "%s", pi.note);
    }
    tg_close(&e);
}

/* Issue 37 item 2: cuDNN answering with many configurations (the emulator
 * up to 16): the first nine NONDETERMINISTIC, so that the plan is the
 * tenth, walked to past nine answers (a fixed table of 32 descriptors
 * could not hold the dgrad graph and ten configurations). */
Test(train_fuse_cuda, ten_engine_configurations)
{
    EMULATOR_ONLY("EMU_CUDNN_GRAPH_CONFIGS");
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    sl_conv_shape sh = conv_of(&shapes[0]);
    cr_assert_eq(setenv("EMU_CUDNN_GRAPH_CONFIGS", "10", 1), 0);
    int rc = prepare_with(&e, &sh, SL_FUSE_FPROP | SL_FUSE_WGRAD | SL_FUSE_DGRAD,
                          "EMU_CUDNN_GRAPH_NONDET", "9");
    unsetenv("EMU_CUDNN_GRAPH_CONFIGS");
    cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
    for (unsigned k = SL_FUSE_FPROP; k <= SL_FUSE_DGRAD; k <<= 1) {
        sl_fuse_plan_info pi;
        cr_assert_eq(sl_fuse_plan(&e, &sh, k, &pi), SL_OK);
        cr_assert(pi.built && pi.engine == 9 && !pi.nondeterministic, "%s: engine %d %s",
                  kind_name[k], pi.engine, pi.note);
    }
    cr_assert_eq(check_dgrad(&e, &ref, &sh, 7), SL_OK);
    sl_exec_fini(&ref);
    tg_close(&e);
}

/* Issue 37 item 4: NONDETERMINISTIC configurations skipped by default (the
 * runs repeat bit for bit), taken and reported with
 * SLUICE_CUDNN_DETERMINISTIC=0, and a refusal that says so when every
 * configuration is one. */
Test(train_fuse_cuda, nondeterministic_configurations_filtered)
{
    EMULATOR_ONLY("EMU_CUDNN_GRAPH_NONDET");
    sl_conv_shape sh = conv_of(&shapes[0]);
    for (int det = 1; det >= 0; det--) {
        sl_exec e;
        cr_assert_eq(setenv("SLUICE_CUDNN_DETERMINISTIC", det ? "1" : "0", 1), 0);
        fuse_exec(&e);
        unsetenv("SLUICE_CUDNN_DETERMINISTIC");
        cr_assert_eq(setenv("EMU_CUDNN_GRAPH_CONFIGS", "4", 1), 0);
        int rc = prepare_with(&e, &sh, SL_FUSE_FPROP, "EMU_CUDNN_GRAPH_NONDET", "2");
        unsetenv("EMU_CUDNN_GRAPH_CONFIGS");
        cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
        sl_fuse_plan_info pi;
        cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_FPROP, &pi), SL_OK);
        cr_assert_eq(pi.engine, det ? 2 : 0, "deterministic %d: engine %d", det, pi.engine);
        cr_assert_eq(pi.nondeterministic, !det);
        /* two runs of the same inputs: the sums bit for bit when deterministic
         * (the emulator's NONDETERMINISTIC engines sum in a moving order) */
        int64_t nw = counts_of(&sh).w, ny = counts_of(&sh).y;
        pro in;
        pro_make(&sh, 3, &in);
        float *w = rnd16(nw, 6, -0.5f, 0.5f);
        void *dw = tg_upa(w, nw, SL_DTYPE_F16), *dy = tg_newa(ny, SL_DTYPE_F16);
        float *ds[2] = {tg_newf(sh.k), tg_newf(sh.k)}, *dq = tg_newf(sh.k), *sum[2];
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(sl_fuse_conv_fwd(&e, &sh, in.dx, in.dsb, dw, dy, ds[i], dq), SL_OK, "%s",
                         sl_errmsg());
            sum[i] = malloc((size_t)sh.k * 4);
            tg_downf(sum[i], ds[i], sh.k);
        }
        if (det)
            assert_same(sum[1], sum[0], sh.k, "sums of two deterministic runs");
        else
            near(sum[1], sum[0], sh.k, 1e-5, 1e-6, "sums of two nondeterministic runs");
        free(w), free(sum[0]), free(sum[1]);
        pro_free(&in);
        tg_free(dw), tg_free(dy), tg_free(ds[0]), tg_free(ds[1]), tg_free(dq);
        if (det) {
            sl_conv_shape sh2 = conv_of(&shapes[1]);
            cr_assert_eq(setenv("EMU_CUDNN_GRAPH_CONFIGS", "3", 1), 0);
            rc = prepare_with(&e, &sh2, SL_FUSE_FPROP, "EMU_CUDNN_GRAPH_NONDET", "3");
            unsetenv("EMU_CUDNN_GRAPH_CONFIGS");
            cr_assert_eq(rc, SL_ENOTSUP);
            cr_assert_eq(sl_fuse_plan(&e, &sh2, SL_FUSE_FPROP, &pi), SL_OK);
            cr_assert(strstr(pi.note, "3 configuration(s), 3 NONDETERMINISTIC (skipped: "
                                      "SLUICE_CUDNN_DETERMINISTIC=1)"), "%s", pi.note);
        }
        tg_close(&e);
    }
}

/* Issue 37 item 5: ConvBNwgrad in NVIDIA's sample form (HALF
 * intermediates) and, where cuDNN refuses that, FLOAT (Paddle's), the
 * retry told in the plan's note; the gradient right either way. */
Test(train_fuse_cuda, wgrad_half_then_float_intermediates)
{
    EMULATOR_ONLY("EMU_CUDNN_GRAPH_WGRAD_VIRT");
    static const char *const only[3] = {"HALF", "FLOAT", "NONE"};
    for (int t = 0; t < 3; t++) {
        sl_exec e, ref;
        fuse_exec(&e);
        ref_exec(&ref);
        sl_conv_shape sh = conv_of(&shapes[4]);
        int rc = t < 2 ? prepare_with(&e, &sh, SL_FUSE_WGRAD, "EMU_CUDNN_GRAPH_WGRAD_VIRT", only[t])
                       : prepare_with(&e, &sh, SL_FUSE_WGRAD, "EMU_CUDNN_GRAPH", "0");
        sl_fuse_plan_info pi;
        cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_WGRAD, &pi), SL_OK);
        if (t == 2) { /* both refused: both reasons */
            cr_assert_eq(rc, SL_ENOTSUP);
            cr_assert(strstr(pi.note, "HALF intermediates: ") &&
                          strstr(pi.note, "; then FLOAT intermediates: "), "%s", pi.note);
        } else {
            cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
            cr_assert_str_eq(pi.form, t ? "FLOAT intermediates" : "HALF intermediates");
            if (t)
                cr_assert(strstr(pi.note, "HALF intermediates refused (") &&
                              strstr(pi.note, "EMU_CUDNN_GRAPH_WGRAD_VIRT"), "%s", pi.note);
            else
                cr_assert_str_eq(pi.note, "");
            cr_assert_eq(check_wgrad(&e, &ref, &sh, 9), SL_OK);
        }
        sl_exec_fini(&ref);
        tg_close(&e);
    }
}

/* The dgrad graph's mean step by cuDNN's version: SUB from 9.8.0
 * (cudnn-frontend v1.11.0's sample), ADD with alpha2 = -1 before
 * (Paddle's); the same gradients. */
Test(train_fuse_cuda, dgrad_mean_step_by_cudnn_version)
{
    EMULATOR_ONLY("EMU_CUDNN_VERSION");
    sl_exec e, ref;
    fuse_exec(&e);
    ref_exec(&ref);
    sl_conv_shape sh = conv_of(&shapes[4]);
    cr_assert_eq(setenv("EMU_CUDNN_VERSION", "90700", 1), 0);
    cr_assert_eq(cudnnGetVersion(), 90700);
    int rc = check_dgrad(&e, &ref, &sh, 3);
    unsetenv("EMU_CUDNN_VERSION");
    cr_assert_eq(rc, SL_OK);
    sl_fuse_plan_info pi;
    cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_DGRAD, &pi), SL_OK);
    cr_assert_str_eq(pi.form, "mean step ADD alpha2 -1");
    sl_exec_fini(&ref);
    tg_close(&e);
}

/* Every plan over the workspace cap: the refusal says so, with the cap and
 * what the least would need (not "the descriptor table is full"). */
Test(train_fuse_cuda, workspace_cap_named_as_the_cause)
{
    EMULATOR_ONLY("EMU_CUDNN_GRAPH_CONFIGS");
    sl_exec e;
    cr_assert_eq(setenv("SLUICE_CUDNN_WS_MB", "0", 1), 0);
    fuse_exec(&e);
    unsetenv("SLUICE_CUDNN_WS_MB");
    sl_conv_shape sh = conv_of(&shapes[0]);
    cr_assert_eq(prepare_with(&e, &sh, SL_FUSE_DGRAD, "EMU_CUDNN_GRAPH_CONFIGS", "1"), SL_ENOTSUP);
    sl_fuse_plan_info pi;
    cr_assert_eq(sl_fuse_plan(&e, &sh, SL_FUSE_DGRAD, &pi), SL_OK);
    cr_assert(strstr(pi.note, "1 configuration(s), 1 need more workspace than the 0 MiB cap "
                              "(SLUICE_CUDNN_WS_MB; the least 1 MiB)"), "%s", pi.note);
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
    sl_fuse_plan_info pi;
    cr_assert_eq(sl_fuse_plan(&cpu, &sh, SL_FUSE_FPROP, &pi), SL_ENOTSUP);
    sl_exec_fini(&cpu);
}
#endif

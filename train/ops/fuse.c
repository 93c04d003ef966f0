/*
 * train/ops/fuse.c - the entry points of the cuDNN-fusion ops
 * (ops.h's "cuDNN graph fusion"): each checks its arguments once, as
 * ops.c's entry points do (op_check.h), then runs the exec's slot behind
 * it (the op table's fuse_* slots: the cuda table's are graph_cuda.c's
 * cuDNN plans and fuse_cuda.cu's BN kernels; the other tables have none).
 * Every other exec, and every exec in a build without CUDA, gets
 * SL_ENOTSUP, so the model asks sl_fuse_available once and runs its
 * unfused ops.
 */
#include <stdint.h>
#include <string.h>

#include "train/ops/op_check.h"
#include "train/ops/ops.h"

int sl_fuse_available(const sl_exec *e)
{
    return e && e->ops && e->ops->fuse_available && e->ops->fuse_available(e);
}

/* The exec can fuse: SL_ENOTSUP naming why not. */
#define FUSE_OK(e)                                                                            \
    do {                                                                                      \
        int rc_ = op_ok(__func__, (e), 1);                                                    \
        if (rc_)                                                                              \
            return rc_;                                                                       \
        if (!sl_fuse_available(e))                                                            \
            return sl_fail(SL_ENOTSUP, "%s: %s: cuDNN fusion needs a cuda exec with fp16 "    \
                           "activations and SLUICE_CUDNN_FUSION not 0", __func__,            \
                           (e)->ops->name);                                                   \
    } while (0)

#define CHAN(e, t, c) TENSOR(e, t, c)

/* A BN's statistics and what folding them writes: the apply's constants
 * (4c floats, 16-byte aligned) and the fp16 prologue (2c). */
#define BN_FOLD_ARGS(e, c, gamma, beta, mean, invstd, consts, sb)                               \
    do {                                                                                      \
        CHAN(e, gamma, c);                                                                    \
        CHAN(e, beta, c);                                                                     \
        CHAN(e, mean, c);                                                                     \
        CHAN(e, invstd, c);                                                                   \
        CHAN(e, consts, 4 * (int64_t)(c));                                                    \
        CHECK(e, ((uintptr_t)(consts) & 15) == 0, "consts %p not 16-byte aligned",           \
              (const void *)(consts));                                                        \
        CHAN(e, sb, 2 * (int64_t)(c));                                                        \
    } while (0)

int sl_fuse_prepare(sl_exec *e, const sl_conv_shape *sh, unsigned kinds)
{
    FUSE_OK(e);
    CHECK_CONV(e, sh);
    CHECK(e, kinds != 0 && (kinds & ~7u) == 0, "kinds 0x%x", kinds);
    return e->ops->fuse_prepare(e, sh, kinds);
}

int sl_fuse_plan(const sl_exec *e, const sl_conv_shape *sh, unsigned kind,
                 sl_fuse_plan_info *out)
{
    if (!out || !sh)
        return sl_fail(SL_EINVAL, "sl_fuse_plan: NULL argument");
    memset(out, 0, sizeof *out);
    out->engine = -1;
    out->form = out->note = "";
    if (!sl_fuse_available(e))
        return sl_fail(SL_ENOTSUP, "sl_fuse_plan: the exec does not fuse");
    int g = kind == SL_FUSE_FPROP ? 0 : kind == SL_FUSE_WGRAD ? 1 : kind == SL_FUSE_DGRAD ? 2 : -1;
    if (g < 0)
        return sl_fail(SL_EINVAL, "sl_fuse_plan: kind 0x%x (one SL_FUSE_* bit)", kind);
    return e->ops->fuse_plan(e, g, sh, out);
}

int sl_fuse_conv_fwd(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                     const float *w, float *y, float *sum, float *sqsum)
{
    FUSE_OK(e);
    CHECK_CONV(e, sh);
    CONV_X(e, sh, x);
    CHAN(e, sb, 2 * (int64_t)sh->c);
    CONV_W(e, sh, w);
    CONV_Y(e, sh, y);
    CHAN(e, sum, sh->k);
    CHAN(e, sqsum, sh->k);
    return e->ops->fuse_conv_fwd(e, sh, x, sb, w, y, sum, sqsum);
}

int sl_fuse_conv_wgrad(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                       const float *dy, float *dw)
{
    FUSE_OK(e);
    CHECK_CONV(e, sh);
    CONV_X(e, sh, x);
    CHAN(e, sb, 2 * (int64_t)sh->c);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, dw);
    return e->ops->fuse_conv_wgrad(e, sh, x, sb, dy, dw);
}

int sl_fuse_conv_dgrad(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                       const float *xc, const float *mean, const float *invstd,
                       const float *gamma, const float *beta, float *da, float *dgamma,
                       float *dbeta, float *coef)
{
    FUSE_OK(e);
    CHECK_CONV(e, sh);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, w);
    CONV_X(e, sh, xc);
    CHAN(e, mean, sh->c);
    CHAN(e, invstd, sh->c);
    CHAN(e, gamma, sh->c);
    CHAN(e, beta, sh->c);
    CONV_X(e, sh, da);
    CHAN(e, dgamma, sh->c);
    CHAN(e, dbeta, sh->c);
    CHAN(e, coef, 8 * (int64_t)sh->c);
    CHECK(e, ((uintptr_t)coef & 15) == 0, "coef %p not 16-byte aligned", (const void *)coef);
    return e->ops->fuse_conv_dgrad(e, sh, dy, w, xc, mean, invstd, gamma, beta, da, dgamma,
                                   dbeta, coef);
}

int sl_fuse_bn_finalize(sl_exec *e, int c, int64_t rows, const float *sum, const float *sqsum,
                        const float *gamma, const float *beta, float momentum, float eps,
                        float *running_mean, float *running_var, float *save_mean,
                        float *save_invstd, float *consts, void *sb)
{
    FUSE_OK(e);
    CHECK(e, c >= 1, "%d channels", c);
    CHECK(e, rows >= 2, "%lld row(s) per channel: training-mode batch norm needs at least 2",
          (long long)rows);
    CHAN(e, sum, c);
    CHAN(e, sqsum, c);
    CHAN(e, running_mean, c);
    CHAN(e, running_var, c);
    BN_FOLD_ARGS(e, c, gamma, beta, save_mean, save_invstd, consts, sb);
    return e->ops->fuse_bn_finalize(e, c, rows, sum, sqsum, gamma, beta, momentum, eps,
                                    running_mean, running_var, save_mean, save_invstd, consts,
                                    sb);
}

int sl_fuse_bn_fold(sl_exec *e, int c, const float *gamma, const float *beta,
                    const float *save_mean, const float *save_invstd, float *consts, void *sb)
{
    FUSE_OK(e);
    CHECK(e, c >= 1, "%d channels", c);
    BN_FOLD_ARGS(e, c, gamma, beta, save_mean, save_invstd, consts, sb);
    return e->ops->fuse_bn_fold(e, c, gamma, beta, save_mean, save_invstd, consts, sb);
}

int sl_fuse_bn_apply(sl_exec *e, int64_t rows, int c, const float *y, const float *consts,
                     const float *r, int relu, float *z)
{
    FUSE_OK(e);
    CHECK(e, c >= 1 && rows >= 1, "%lld rows of %d channels", (long long)rows, c);
    TENSOR(e, y, rows, c);
    CHAN(e, consts, 4 * (int64_t)c);
    CHECK(e, ((uintptr_t)consts & 15) == 0, "consts %p not 16-byte aligned",
          (const void *)consts);
    TENSOR(e, z, rows, c);
    return e->ops->fuse_bn_apply(e, rows, c, y, consts, r, relu, z);
}

int sl_fuse_bn_dx(sl_exec *e, int64_t rows, int c, const float *da, const float *xc,
                  const float *mean, float *coef, float *dx)
{
    FUSE_OK(e);
    CHECK(e, c >= 1 && rows >= 1, "%lld rows of %d channels", (long long)rows, c);
    TENSOR(e, da, rows, c);
    TENSOR(e, xc, rows, c);
    CHAN(e, mean, c);
    CHAN(e, coef, 8 * (int64_t)c);
    CHECK(e, ((uintptr_t)coef & 15) == 0, "coef %p not 16-byte aligned", (const void *)coef);
    TENSOR(e, dx, rows, c);
    return e->ops->fuse_bn_dx(e, rows, c, da, xc, mean, coef, dx);
}

const char *sl_fuse_refusal(const sl_exec *e)
{
    return sl_fuse_available(e) ? e->ops->fuse_refusal(e) : "";
}

/*
 * train/ops/ops.c - the op entry points: each op's arguments checked once,
 * for every backend, then the exec's slot run; and the op geometry they
 * check against (sl_conv_shape_init, sl_pool_shape_init).
 *
 * DESIGN. Knows no backend: the exec's table (exec.c) says which runs, a
 * NULL slot is SL_ENOTSUP (op_ok, op_check.h). What is checked, and why
 * here, is the "dispatch" comment below. Threading: none of its own; an
 * entry point runs on the calling thread, on an exec that is that
 * thread's.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "train/ops/op_check.h"
#include "train/ops/ops.h"

/* The geometry is computed in int64 (h + 2*pad would overflow an int for a
 * hostile pad), and the padded input must fit an int: then every index the
 * backends form in int (oh*stride - pad + i) does too, and so do p, q. */
int sl_conv_shape_init(sl_conv_shape *sh, int n, int h, int w, int c, int k, int r, int s,
                       int stride, int pad)
{
    if (n < 1 || h < 1 || w < 1 || c < 1 || k < 1 || r < 1 || s < 1 || stride < 1 || pad < 0)
        return sl_fail(SL_EINVAL, "sl_conv_shape_init: bad geometry n%d h%d w%d c%d k%d %dx%d "
                       "stride %d pad %d", n, h, w, c, k, r, s, stride, pad);
    int64_t hp = (int64_t)h + 2 * (int64_t)pad, wp = (int64_t)w + 2 * (int64_t)pad;
    if (hp > INT_MAX || wp > INT_MAX)
        return sl_fail(SL_EINVAL, "sl_conv_shape_init: padded input %lldx%lld: more than "
                       "2^31-1 a side", (long long)hp, (long long)wp);
    if (hp < r || wp < s)
        return sl_fail(SL_EINVAL, "sl_conv_shape_init: %dx%d kernel larger than the padded "
                       "%dx%d input", r, s, h, w);
    int p = (int)((hp - r) / stride + 1), q = (int)((wp - s) / stride + 1);
    *sh = (sl_conv_shape){n, h, w, c, k, r, s, stride, pad, p, q};
    return SL_OK;
}

int sl_pool_shape_init(sl_pool_shape *sh, int n, int h, int w, int c, int r, int stride, int pad)
{
    if (n < 1 || h < 1 || w < 1 || c < 1 || r < 1 || stride < 1 || pad < 0 ||
        2 * (int64_t)pad > r)
        return sl_fail(SL_EINVAL, "sl_pool_shape_init: bad geometry n%d h%d w%d c%d %dx%d "
                       "stride %d pad %d", n, h, w, c, r, r, stride, pad);
    int64_t hp = (int64_t)h + 2 * (int64_t)pad, wp = (int64_t)w + 2 * (int64_t)pad;
    if (hp > INT_MAX || wp > INT_MAX)
        return sl_fail(SL_EINVAL, "sl_pool_shape_init: padded input %lldx%lld: more than "
                       "2^31-1 a side", (long long)hp, (long long)wp);
    if (hp < r || wp < r)
        return sl_fail(SL_EINVAL, "sl_pool_shape_init: %dx%d window larger than the padded "
                       "%dx%d input", r, r, h, w);
    int p = (int)((hp - r) / stride + 1), q = (int)((wp - r) / stride + 1);
    *sh = (sl_pool_shape){n, h, w, c, r, stride, pad, p, q};
    return SL_OK;
}

/* -------------------------------------------------------------- dispatch */
/*
 * The op entry points (ops.h): every argument check an op has is
 * here, once, before the backend's slot runs, as collectives/comm.c checks
 * before its backends:
 *   - the exec and its slot (op_ok);
 *   - the shape: geometry the sl_*_shape_init functions would make, counts
 *     in range;
 *   - each tensor's size: the product of its dimensions, and that many
 *     4-byte elements in bytes, fit in int64 (the backends index with
 *     int64_t and size_t and would wrap past it);
 *   - each tensor's pointer: NULL only where the slot's comment allows it
 *     (r of bn_fwd_train_act, dgamma / dbeta of bn_bwd_act, tmp of
 *     conv_bwd_data_acc, dx of fc_bwd, correct of xent_fwd_bwd) or where
 *     the tensor has no elements (rows 0 where rows may be 0, n 0).
 * The backends (*_ref.c, *_cpu.c, *_cuda.cu) trust what passed and check
 * only what is theirs: their own state (a cuda context), their scratch,
 * and the device data they read (cuda's labels; argmax). Host labels are
 * checked here.
 * Messages read "sl_<op>: <backend>: what", what naming the argument.
 */

static int pool_shape_ok(const sl_pool_shape *s)
{
    if (!s || s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->r < 1 || s->stride < 1 ||
        s->pad < 0 || 2 * (int64_t)s->pad > s->r)
        return 0;
    int64_t hp = (int64_t)s->h + 2 * (int64_t)s->pad, wp = (int64_t)s->w + 2 * (int64_t)s->pad;
    return hp <= INT_MAX && wp <= INT_MAX && s->p == (hp - s->r) / s->stride + 1 &&
           s->q == (wp - s->r) / s->stride + 1 && s->p >= 1 && s->q >= 1;
}


/* A pool shape, and its input (x, or dx: name) small enough for the int32
 * argmax. */
static int pool_check(const char *fn, const sl_exec *e, const sl_pool_shape *sh,
                      const char *name)
{
    if (!pool_shape_ok(sh))
        return op_fail(fn, e, "bad pool geometry (use sl_pool_shape_init)");
    const int64_t d[] = {sh->n, sh->h, sh->w, sh->c};
    int64_t nx = 0;
    int rc = tensor_elems(fn, e, name, 4, d, &nx);
    if (rc)
        return rc;
    if (nx > INT32_MAX)
        return op_fail(fn, e, "%s has %lld elements: the int32 argmax indexes at most 2^31-1",
                       name, (long long)nx);
    return SL_OK;
}

/* Pool tensors: x (n, h, w, c); y and argmax (n, p, q, c). */
#define POOL_X(e, sh, t) TENSOR(e, t, (sh)->n, (sh)->h, (sh)->w, (sh)->c)
#define POOL_Y(e, sh, t) TENSOR(e, t, (sh)->n, (sh)->p, (sh)->q, (sh)->c)

/* Batch statistics need two rows: the unbiased variance divides by rows-1. */
#define CHECK_BN_TRAIN(e, rows, c)                                                            \
    do {                                                                                      \
        CHECK(e, (c) >= 1, "%d channels", (c));                                               \
        CHECK(e, (rows) >= 2, "%lld row(s) per channel: training-mode batch norm needs at "    \
              "least 2 values per channel (PyTorch refuses 1 too)", (long long)(rows));        \
    } while (0)

#define CHECK_ROWS(e, rows, c, min)                                                           \
    CHECK(e, (c) >= 1 && (rows) >= (min), "%lld rows of %d channels", (long long)(rows), (c))

/* Sync-BN: total, the global row count of which this replica's rows are a
 * part. rows may be 0 (a replica with no rows adds nothing to the sums).
 * The forward needs total >= 2 (the unbiased running variance divides by
 * total - 1, and PyTorch refuses 1 in training too), the backward 1. */
#define CHECK_TOTAL(e, rows, c, total, min)                                                   \
    do {                                                                                      \
        CHECK_ROWS(e, rows, c, 0);                                                            \
        CHECK(e, (total) >= (min) && (total) >= (double)(rows),                               \
              "%g rows in all replicas, %lld here: training-mode batch norm needs at least "   \
              "%g values per channel and total >= rows", (total), (long long)(rows),           \
              (double)(min));                                                                 \
    } while (0)

/* Batch-norm tensors: rows of c channels (x, y, dy, dx), or one value per
 * channel (gamma, beta, statistics, sums). */
#define BN_ROWS(e, t) TENSOR(e, t, rows, c)
#define BN_CHAN(e, t) TENSOR(e, t, c)

int sl_conv_fwd(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w, float *y)
{
    OP_OK(e, conv_fwd);
    CHECK_CONV(e, sh);
    CONV_X(e, sh, x);
    CONV_W(e, sh, w);
    CONV_Y(e, sh, y);
    return e->ops->conv_fwd(e, sh, x, w, y);
}

int sl_conv_bwd_data(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                     float *dx)
{
    OP_OK(e, conv_bwd_data);
    CHECK_CONV(e, sh);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, w);
    CONV_X(e, sh, dx);
    return e->ops->conv_bwd_data(e, sh, dy, w, dx);
}

int sl_conv_bwd_filter(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *dy,
                       float *dw)
{
    OP_OK(e, conv_bwd_filter);
    CHECK_CONV(e, sh);
    CONV_X(e, sh, x);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, dw);
    return e->ops->conv_bwd_filter(e, sh, x, dy, dw);
}

/* tmp may be NULL. */
int sl_conv_bwd_data_acc(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                         float *dx, float *tmp)
{
    OP_OK(e, conv_bwd_data_acc);
    CHECK_CONV(e, sh);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, w);
    CONV_X(e, sh, dx);
    return e->ops->conv_bwd_data_acc(e, sh, dy, w, dx, tmp);
}

int sl_bn_fwd_train(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                    const float *beta, float momentum, float eps, float *running_mean,
                    float *running_var, float *y, float *save_mean, float *save_invstd)
{
    OP_OK(e, bn_fwd_train);
    CHECK_BN_TRAIN(e, rows, c);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    return e->ops->bn_fwd_train(e, rows, c, x, gamma, beta, momentum, eps, running_mean,
                                running_var, y, save_mean, save_invstd);
}

int sl_bn_fwd_eval(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                   const float *beta, const float *running_mean, const float *running_var,
                   float eps, float *y)
{
    OP_OK(e, bn_fwd_eval);
    CHECK_ROWS(e, rows, c, 0);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    return e->ops->bn_fwd_eval(e, rows, c, x, gamma, beta, running_mean, running_var, eps, y);
}

int sl_bn_bwd(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
              const float *gamma, const float *save_mean, const float *save_invstd, float *dx,
              float *dgamma, float *dbeta)
{
    OP_OK(e, bn_bwd);
    CHECK_ROWS(e, rows, c, 1);
    BN_ROWS(e, x);
    BN_ROWS(e, dy);
    BN_CHAN(e, gamma);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_ROWS(e, dx);
    BN_CHAN(e, dgamma);
    BN_CHAN(e, dbeta);
    return e->ops->bn_bwd(e, rows, c, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

/* r may be NULL (no shortcut add). */
int sl_bn_fwd_train_act(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, float momentum, float eps, float *running_mean,
                        float *running_var, const float *r, int relu, float *y,
                        float *save_mean, float *save_invstd)
{
    OP_OK(e, bn_fwd_train_act);
    CHECK_BN_TRAIN(e, rows, c);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    return e->ops->bn_fwd_train_act(e, rows, c, x, gamma, beta, momentum, eps, running_mean,
                                    running_var, r, relu != 0, y, save_mean, save_invstd);
}

/* dgamma, dbeta may be NULL (not wanted). */
int sl_bn_bwd_act(sl_exec *e, int64_t rows, int c, const float *x, const float *z, float *dz,
                  const float *gamma, const float *save_mean, const float *save_invstd,
                  float *dx, float *dgamma, float *dbeta)
{
    OP_OK(e, bn_bwd_act);
    CHECK_ROWS(e, rows, c, 1);
    BN_ROWS(e, x);
    BN_ROWS(e, z);
    BN_ROWS(e, dz);
    BN_CHAN(e, gamma);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_ROWS(e, dx);
    return e->ops->bn_bwd_act(e, rows, c, x, z, dz, gamma, save_mean, save_invstd, dx, dgamma,
                              dbeta);
}

int sl_relu_fwd(sl_exec *e, int64_t n, const float *x, float *y)
{
    OP_OK(e, relu_fwd);
    CHECK(e, n >= 0, "%lld elements", (long long)n);
    TENSOR(e, x, n);
    TENSOR(e, y, n);
    return e->ops->relu_fwd(e, n, x, y);
}

int sl_relu_bwd(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    OP_OK(e, relu_bwd);
    CHECK(e, n >= 0, "%lld elements", (long long)n);
    TENSOR(e, y, n);
    TENSOR(e, dy, n);
    TENSOR(e, dx, n);
    return e->ops->relu_bwd(e, n, y, dy, dx);
}

int sl_add(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    OP_OK(e, add);
    CHECK(e, n >= 0, "%lld elements", (long long)n);
    TENSOR(e, a, n);
    TENSOR(e, b, n);
    TENSOR(e, y, n);
    return e->ops->add(e, n, a, b, y);
}

int sl_maxpool_fwd(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                   int32_t *argmax)
{
    OP_OK(e, maxpool_fwd);
    int rc = pool_check(__func__, e, sh, "x");
    if (rc)
        return rc;
    POOL_X(e, sh, x);
    POOL_Y(e, sh, y);
    POOL_Y(e, sh, argmax);
    return e->ops->maxpool_fwd(e, sh, x, y, argmax);
}

int sl_maxpool_bwd(sl_exec *e, const sl_pool_shape *sh, const float *dy, const int32_t *argmax,
                   float *dx)
{
    OP_OK(e, maxpool_bwd);
    int rc = pool_check(__func__, e, sh, "dx");
    if (rc)
        return rc;
    POOL_Y(e, sh, dy);
    POOL_Y(e, sh, argmax);
    POOL_X(e, sh, dx);
    return e->ops->maxpool_bwd(e, sh, dy, argmax, dx);
}

int sl_gap_fwd(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    OP_OK(e, gap_fwd);
    CHECK(e, n >= 1 && hw >= 1 && c >= 1, "shape (%d, %d, %d)", n, hw, c);
    TENSOR(e, x, n, hw, c);
    TENSOR(e, y, n, c);
    return e->ops->gap_fwd(e, n, hw, c, x, y);
}

int sl_gap_bwd(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    OP_OK(e, gap_bwd);
    CHECK(e, n >= 1 && hw >= 1 && c >= 1, "shape (%d, %d, %d)", n, hw, c);
    TENSOR(e, dy, n, c);
    TENSOR(e, dx, n, hw, c);
    return e->ops->gap_bwd(e, n, hw, c, dy, dx);
}

int sl_fc_fwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
              const float *b, float *y)
{
    OP_OK(e, fc_fwd);
    CHECK(e, n >= 1 && in >= 1 && out >= 1, "shape n %d in %d out %d", n, in, out);
    TENSOR(e, x, n, in);
    TENSOR(e, w, out, in);
    TENSOR(e, b, out);
    TENSOR(e, y, n, out);
    return e->ops->fc_fwd(e, n, in, out, x, w, b, y);
}

/* dx may be NULL (the input's gradient not wanted). */
int sl_fc_bwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
              const float *dy, float *dx, float *dw, float *db)
{
    OP_OK(e, fc_bwd);
    CHECK(e, n >= 1 && in >= 1 && out >= 1, "shape n %d in %d out %d", n, in, out);
    TENSOR(e, x, n, in);
    TENSOR(e, w, out, in);
    TENSOR(e, dy, n, out);
    TENSOR(e, dw, out, in);
    TENSOR(e, db, out);
    return e->ops->fc_bwd(e, n, in, out, x, w, dy, dx, dw, db);
}

/* correct may be NULL. */
int sl_labels_bad(const int32_t *labels, int n, int classes)
{
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return i;
    return -1;
}

int sl_xent_fwd_bwd(sl_exec *e, int n, int classes, const float *logits, const int32_t *labels,
                    float smoothing, float *loss, float *dlogits, int *correct)
{
    OP_OK(e, xent_fwd_bwd);
    CHECK(e, n >= 1 && classes >= 1, "%d rows of %d classes", n, classes);
    CHECK(e, smoothing >= 0.0f && smoothing <= 1.0f, "label smoothing %g outside [0, 1]",
          (double)smoothing);
    TENSOR(e, logits, n, classes);
    TENSOR(e, labels, n);
    TENSOR(e, loss, 1);
    TENSOR(e, dlogits, n, classes);
    /* Every label before anything is written. Host backends' labels are
     * host memory, read here (sl_labels_bad above); cuda's are
     * device memory, which its kernel checks (the first bad row comes back
     * the same way). */
    int bad = e->backend != SL_BACKEND_CUDA ? sl_labels_bad(labels, n, classes) : -1;
    CHECK(e, bad < 0, "row %d: label %d outside [0, %d)", bad, bad < 0 ? 0 : (int)labels[bad],
          classes);
    return e->ops->xent_fwd_bwd(e, n, classes, logits, labels, smoothing, loss, dlogits,
                                correct);
}

int sl_bn_fwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                    const float *beta, const float *mean, const float *var, double total,
                    float momentum, float eps, float *running_mean, float *running_var,
                    float *y, float *save_mean, float *save_invstd)
{
    OP_OK(e, bn_fwd_apply);
    CHECK_TOTAL(e, rows, c, total, 2.0);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, mean);
    BN_CHAN(e, var);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    return e->ops->bn_fwd_apply(e, rows, c, x, gamma, beta, mean, var, total, momentum, eps,
                                running_mean, running_var, y, save_mean, save_invstd);
}

int sl_bn_bwd_reduce(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                     const float *save_mean, const float *save_invstd, float *sum_dy,
                     float *sum_dy_xhat)
{
    OP_OK(e, bn_bwd_reduce);
    CHECK_ROWS(e, rows, c, 0);
    BN_ROWS(e, x);
    BN_ROWS(e, dy);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_CHAN(e, sum_dy);
    BN_CHAN(e, sum_dy_xhat);
    return e->ops->bn_bwd_reduce(e, rows, c, x, dy, save_mean, save_invstd, sum_dy,
                                 sum_dy_xhat);
}

int sl_bn_bwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                    const float *gamma, const float *save_mean, const float *save_invstd,
                    const float *sum_dy, const float *sum_dy_xhat, double total, float *dx)
{
    OP_OK(e, bn_bwd_apply);
    CHECK_TOTAL(e, rows, c, total, 1.0);
    BN_ROWS(e, x);
    BN_ROWS(e, dy);
    BN_CHAN(e, gamma);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_CHAN(e, sum_dy);
    BN_CHAN(e, sum_dy_xhat);
    BN_ROWS(e, dx);
    return e->ops->bn_bwd_apply(e, rows, c, x, dy, gamma, save_mean, save_invstd, sum_dy,
                                sum_dy_xhat, total, dx);
}

/* slots: (world, SL_BN_MOMENT_FLOATS, c). */
int sl_bn_moments(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                  float *slots)
{
    OP_OK(e, bn_moments);
    CHECK_ROWS(e, rows, c, 0);
    CHECK(e, world >= 1 && rank >= 0 && rank < world, "replica %d of %d", rank, world);
    BN_ROWS(e, x);
    TENSOR(e, slots, world, SL_BN_MOMENT_FLOATS, c);
    return e->ops->bn_moments(e, rows, c, x, world, rank, slots);
}

int sl_bn_moments_merge(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                        float *mean, float *var)
{
    OP_OK(e, bn_moments_merge);
    CHECK_ROWS(e, rows, c, 0);
    CHECK(e, world >= 1, "%d replicas", world);
    TENSOR(e, slots, world, SL_BN_MOMENT_FLOATS, c);
    BN_CHAN(e, mean);
    BN_CHAN(e, var);
    return e->ops->bn_moments_merge(e, rows, c, world, slots, mean, var);
}

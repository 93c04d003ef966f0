/*
 * train/ops/op_check.h - private to train/ops/: the argument checks the op
 * entry points run once before a backend's slot (ops.c's "dispatch"
 * comment says what is checked), shared by ops.c (the op table's entry
 * points) and fuse.c (the cuDNN-fusion entry points). Every macro returns
 * from the calling entry point with SL_EINVAL ("<fn>: <backend>: what") or
 * SL_ENOTSUP.
 */
#ifndef SL_OP_CHECK_H
#define SL_OP_CHECK_H

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "train/ops/ops.h"

/* The exec and its slot: SL_EINVAL for no exec, SL_ENOTSUP for a slot the
 * backend does not have (NULL: the fused cuda slots elsewhere, every cuda
 * slot in a build without it, where sl_ops_missing says why). */
static inline int op_ok(const char *fn, const sl_exec *e, int has_slot)
{
    if (!e || !e->ops)
        return sl_fail(SL_EINVAL, "%s: no exec (sl_exec_init it first)", fn);
    if (!has_slot) {
        const char *why = sl_ops_missing(e->ops);
        return sl_fail(SL_ENOTSUP, "%s: %s: the backend has no such op%s%s%s", fn,
                       e->ops->name, why ? " (" : "", why ? why : "", why ? ")" : "");
    }
    return SL_OK;
}

#define OP_OK(e, slot)                                                                        \
    do {                                                                                      \
        int rc_ = op_ok(__func__, (e), (e) && (e)->ops && (e)->ops->slot != NULL);          \
        if (rc_)                                                                              \
            return rc_;                                                                       \
    } while (0)

#define CHECK(e, cond, ...)                                                                   \
    do {                                                                                      \
        if (!(cond))                                                                          \
            return op_fail(__func__, (e), __VA_ARGS__);                                       \
    } while (0)

__attribute__((format(printf, 3, 4))) static inline int op_fail(const char *fn,
                                                                const sl_exec *e,
                                                                const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sl_fail(SL_EINVAL, "%s: %s: %s", fn, e->ops->name, what);
}

/* Most dimensions of a tensor here: conv's and pool's NHWC / KRSC. */
#define MAX_DIMS 4

/* *n = the product of the k dimensions d (each >= 0, checked by the
 * caller's shape check), when it and its bytes as 4-byte elements (float,
 * int32) fit in int64; SL_EINVAL naming the tensor when they do not. */
static inline int tensor_elems(const char *fn, const sl_exec *e, const char *name, int k,
                        const int64_t *d, int64_t *n)
{
    int64_t prod = 1, bytes;
    for (int i = 0; i < k; i++)
        if (__builtin_mul_overflow(prod, d[i], &prod))
            goto overflow;
    if (__builtin_mul_overflow(prod, (int64_t)sizeof(float), &bytes))
        goto overflow;
    *n = prod;
    return SL_OK;
overflow:;
    char dims[MAX_DIMS * 24] = "";
    size_t at = 0;
    for (int i = 0; i < k && i < MAX_DIMS && at < sizeof dims; i++)
        at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%lld", i ? " x " : "",
                               (long long)d[i]);
    return op_fail(fn, e, "%s: %s elements: the size overflows 64 bits", name, dims);
}

/* Tensor t with the dimensions that follow: its size fits (tensor_elems),
 * and t is not NULL unless it has no elements. */
#define TENSOR(e, t, ...)                                                                     \
    do {                                                                                      \
        const int64_t d_[] = {__VA_ARGS__};                                                   \
        int64_t n_ = 0;                                                                       \
        _Static_assert(sizeof d_ / sizeof d_[0] <= MAX_DIMS, "at most MAX_DIMS dimensions");  \
        int rc_ = tensor_elems(__func__, (e), #t, (int)(sizeof d_ / sizeof d_[0]), d_, &n_); \
        if (rc_)                                                                              \
            return rc_;                                                                       \
        CHECK(e, (t) != NULL || n_ == 0, "NULL tensor " #t " (%lld elements)", (long long)n_); \
    } while (0)

/* The geometry sl_conv_shape_init / sl_pool_shape_init make: p, q
 * consistent with the rest (a hand-made shape with a wrong p would index
 * past y), the padded input within an int. In int64: h + 2*pad may pass
 * INT_MAX. */
static inline int conv_shape_ok(const sl_conv_shape *s)
{
    if (!s || s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->k < 1 || s->r < 1 ||
        s->s < 1 || s->stride < 1 || s->pad < 0)
        return 0;
    int64_t hp = (int64_t)s->h + 2 * (int64_t)s->pad, wp = (int64_t)s->w + 2 * (int64_t)s->pad;
    return hp <= INT_MAX && wp <= INT_MAX && hp >= s->r && wp >= s->s &&
           s->p == (hp - s->r) / s->stride + 1 && s->q == (wp - s->s) / s->stride + 1;
}


#define CHECK_CONV(e, sh) CHECK(e, conv_shape_ok(sh), "bad conv geometry (use sl_conv_shape_init)")

/* Conv tensors: x (n, h, w, c), w (k, r, s, c), y (n, p, q, k); the names
 * are the forward's (dx is x's shape, dy y's, dw w's). */
#define CONV_X(e, sh, t) TENSOR(e, t, (sh)->n, (sh)->h, (sh)->w, (sh)->c)
#define CONV_W(e, sh, t) TENSOR(e, t, (sh)->k, (sh)->r, (sh)->s, (sh)->c)
#define CONV_Y(e, sh, t) TENSOR(e, t, (sh)->n, (sh)->p, (sh)->q, (sh)->k)

#endif /* SL_OP_CHECK_H */

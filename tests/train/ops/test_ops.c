/* tests/train/ops/test_ops.c - the op entry points of train/ops/ops.c: the argument
 * checks every backend shares (once, before the slot runs), the missing
 * slots, and that a good call reaches the backend. The cuda side of the same
 * checks is in test_ops_cuda.c and test_norm_cuda.c (an exec without a
 * context). */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "train/ops/ops.h"

static const sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};

/* A NULL exec is refused by every entry point, before anything is read. */
Test(train_ops, null_exec)
{
    float f[4] = {0};
    sl_conv_shape cs;
    cr_assert_eq(sl_conv_shape_init(&cs, 1, 2, 2, 1, 1, 1, 1, 1, 0), SL_OK);
    cr_assert_eq(sl_conv_fwd(NULL, &cs, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_conv_fwd: no exec"), "%s", sl_errmsg());
    cr_assert_eq(sl_relu_fwd(NULL, 4, f, f), SL_EINVAL);
    cr_assert_eq(sl_bn_moments_merge(NULL, 1, 1, 1, f, f, f), SL_EINVAL);
    sl_exec zero;
    memset(&zero, 0, sizeof zero); /* never initialized: no table */
    cr_assert_eq(sl_add(&zero, 4, f, f, f), SL_EINVAL);
}

/* Shapes the *_shape_init functions would not make, and counts out of
 * range: SL_EINVAL naming the entry point and the backend, nothing written. */
Test(train_ops, bad_shapes_refused_for_every_backend)
{
    float f[64], y[64];
    int32_t a[64];
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK, "%s", sl_errmsg());
        for (int i = 0; i < 64; i++)
            f[i] = 1, y[i] = 42;
        sl_conv_shape cs;
        cr_assert_eq(sl_conv_shape_init(&cs, 1, 4, 4, 1, 1, 3, 3, 1, 1), SL_OK);
        cr_assert_eq(sl_conv_fwd(&e, &cs, f, f, y), SL_OK, "%s", sl_errmsg());
        cr_assert(y[0] != 42, "a good call reaches the backend");
        y[0] = 42;
        cs.p++; /* a p that does not follow from the rest */
        cr_assert_eq(sl_conv_fwd(&e, &cs, f, f, y), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "sl_conv_fwd") && strstr(sl_errmsg(), e.ops->name) &&
                  strstr(sl_errmsg(), "bad conv geometry"), "%s", sl_errmsg());
        cr_assert_eq(sl_conv_bwd_data(&e, &cs, f, f, y), SL_EINVAL);
        cr_assert_eq(sl_conv_bwd_filter(&e, &cs, f, f, y), SL_EINVAL);
        cr_assert_eq(sl_conv_fwd(&e, NULL, f, f, y), SL_EINVAL);
        cr_assert(y[0] == 42, "nothing written on refusal");

        sl_pool_shape ps;
        cr_assert_eq(sl_pool_shape_init(&ps, 1, 4, 4, 1, 3, 2, 1), SL_OK);
        ps.pad = 2; /* 2*pad > r: a window with no in-bounds tap */
        cr_assert_eq(sl_maxpool_fwd(&e, &ps, f, y, a), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "bad pool geometry"), "%s", sl_errmsg());
        cr_assert_eq(sl_pool_shape_init(&ps, 1 << 12, 256, 256, 64, 3, 2, 1), SL_OK);
        cr_assert_eq(sl_maxpool_bwd(&e, &ps, NULL, NULL, NULL), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "int32 argmax"), "%s", sl_errmsg());

        cr_assert_eq(sl_relu_bwd(&e, -1, f, f, y), SL_EINVAL);
        cr_assert_eq(sl_gap_fwd(&e, 1, 0, 3, f, y), SL_EINVAL);
        cr_assert_eq(sl_gap_bwd(&e, 0, 1, 3, f, y), SL_EINVAL);
        cr_assert_eq(sl_fc_fwd(&e, 1, 0, 3, f, f, f, y), SL_EINVAL);
        cr_assert_eq(sl_fc_bwd(&e, 1, 3, -1, f, f, f, y, y, y), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "sl_fc_bwd") && strstr(sl_errmsg(), "out -1"), "%s",
                  sl_errmsg());
        cr_assert_eq(sl_bn_fwd_eval(&e, -1, 3, f, f, f, f, f, 1e-5f, y), SL_EINVAL);
        cr_assert_eq(sl_bn_bwd(&e, 0, 3, f, f, f, f, f, y, y, y), SL_EINVAL);
        cr_assert_eq(sl_bn_moments(&e, 2, 3, f, 1, -1, y), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "replica -1 of 1"), "%s", sl_errmsg());
        cr_assert(y[0] == 42, "nothing written on refusal");
        sl_exec_fini(&e);
    }
}

/* The fused slots are cuda's, the BN ones the cpu's too: elsewhere the
 * entry point says so. */
Test(train_ops, missing_slot_is_enotsup)
{
    float f[8] = {0};
    sl_conv_shape cs;
    cr_assert_eq(sl_conv_shape_init(&cs, 1, 2, 2, 1, 1, 1, 1, 1, 0), SL_OK);
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK, "%s", sl_errmsg());
        int want = backs[k] == SL_BACKEND_CPU ? SL_OK : SL_ENOTSUP;
        cr_assert_eq(sl_bn_fwd_train_act(&e, 4, 2, f, f, f, 0.1f, 1e-5f, f, f, NULL, 1, f, f, f),
                     want, "%s", sl_errmsg());
        if (want)
            cr_assert(strstr(sl_errmsg(), "sl_bn_fwd_train_act") &&
                      strstr(sl_errmsg(), e.ops->name), "%s", sl_errmsg());
        cr_assert_eq(sl_bn_bwd_act(&e, 4, 2, f, f, f, f, f, f, f, NULL, NULL), want);
        cr_assert_eq(sl_conv_bwd_data_acc(&e, &cs, f, f, f, NULL), SL_ENOTSUP);
        sl_exec_fini(&e);
    }
}

/* The public, opaque exec (train.h): create, its backend and activation
 * size, destroy; refusals leave *out NULL. */
Test(train_ops, exec_create_destroy)
{
    sl_exec *e = (sl_exec *)&e;
    cr_assert_eq(sl_exec_create(SL_BACKEND_CPU, 1, -1, &e), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_exec_backend(e), SL_BACKEND_CPU);
    cr_assert_eq(sl_exec_act_size(e), 4);
    /* bf16 on the cpu where oneDNN's ISA has bf16 dot products (test_bf16_cpu.c) */
    cr_assert_eq(sl_exec_set_act(e, SL_DTYPE_F16), SL_ENOTSUP);
    cr_assert_eq(sl_exec_set_act(e, SL_DTYPE_BF16), sl_cpu_bf16(NULL) ? SL_OK : SL_ENOTSUP,
                 "%s", sl_errmsg());
    cr_assert_eq(sl_exec_set_act(e, SL_DTYPE_F32), SL_OK);
    float x[3] = {-1, 0, 2}, y[3];
    cr_assert_eq(sl_relu_fwd(e, 3, x, y), SL_OK);
    cr_assert(y[0] == 0 && y[2] == 2);
    sl_exec_destroy(e);
    sl_exec_destroy(NULL);
    e = (sl_exec *)&e;
    cr_assert_eq(sl_exec_create((sl_backend)9, 1, -1, &e), SL_EINVAL);
    cr_assert_null(e);
    cr_assert_eq(sl_exec_create(SL_BACKEND_REF, 1, -1, NULL), SL_EINVAL);
#ifndef SLUICE_TRAIN_CUDA
    e = (sl_exec *)&e;
    cr_assert_eq(sl_exec_create(SL_BACKEND_CUDA, 1, -1, &e), SL_ENOTSUP);
    cr_assert_null(e);
#endif
}

/* ------------------------------------------------ every op, every tensor
 *
 * Each entry point checks each tensor it is given: NULL is refused (where
 * the slot's comment does not allow it) and so is a shape whose element
 * count, or its bytes, overflow int64, with SL_EINVAL naming the op, the
 * backend and the argument, before the backend's slot runs. Before those
 * checks the backends dereferenced the NULL or indexed past the buffer with
 * a wrapped size: these tests crashed (or timed out) there. The backends:
 * ref, cpu, and cuda's table on an exec without a context (its slots
 * refuse to run, or are SL_ENOTSUP stubs in a build without CUDA, so only
 * the shared checks can answer what these tests ask). */

#define NT 12   /* most tensors of one op */
#define BUF 256 /* floats per tensor in the good calls */

typedef struct op_case {
    const char *op;
    const char *names[NT + 1]; /* tensors in argument order, NULL-terminated */
    unsigned optional;         /* bit i: tensor i may be NULL */
    const char *huge_names;    /* the tensor the overflowing shape names */
    /* The op on small good shapes (huge 0), or on shapes whose sizes
     * overflow int64 (huge 1); t[i] is tensor i. */
    int (*call)(sl_exec *e, void *const *t, int huge);
} op_case;

#define BIG64 (INT64_MAX / 2) /* rows or elements: times 3 channels or 4 bytes overflow */

static int conv_shape(sl_conv_shape *sh, int huge)
{
    /* huge: x (2^20, 2^16, 2^16, 2^16) = 2^68 elements; w and y fit */
    return huge ? sl_conv_shape_init(sh, 1 << 20, 1 << 16, 1 << 16, 1 << 16, 1, 1, 1, 1, 0)
                : sl_conv_shape_init(sh, 2, 5, 5, 3, 4, 3, 3, 1, 1);
}

static int call_conv_fwd(sl_exec *e, void *const *t, int huge)
{
    sl_conv_shape sh;
    cr_assert_eq(conv_shape(&sh, huge), SL_OK, "%s", sl_errmsg());
    return sl_conv_fwd(e, &sh, t[0], t[1], t[2]);
}

static int call_conv_bwd_data(sl_exec *e, void *const *t, int huge)
{
    sl_conv_shape sh;
    cr_assert_eq(conv_shape(&sh, huge), SL_OK, "%s", sl_errmsg());
    return sl_conv_bwd_data(e, &sh, t[0], t[1], t[2]);
}

static int call_conv_bwd_filter(sl_exec *e, void *const *t, int huge)
{
    sl_conv_shape sh;
    cr_assert_eq(conv_shape(&sh, huge), SL_OK, "%s", sl_errmsg());
    return sl_conv_bwd_filter(e, &sh, t[0], t[1], t[2]);
}

static int call_conv_bwd_data_acc(sl_exec *e, void *const *t, int huge)
{
    sl_conv_shape sh;
    cr_assert_eq(conv_shape(&sh, huge), SL_OK, "%s", sl_errmsg());
    return sl_conv_bwd_data_acc(e, &sh, t[0], t[1], t[2], t[3]);
}

static int call_bn_fwd_train(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_fwd_train(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], 0.1f, 1e-5f, t[3], t[4],
                           t[5], t[6], t[7]);
}

static int call_bn_fwd_eval(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_fwd_eval(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], t[3], t[4], 1e-5f, t[5]);
}

static int call_bn_bwd(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_bwd(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
}

static int call_bn_fwd_train_act(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_fwd_train_act(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], 0.1f, 1e-5f, t[3],
                               t[4], t[5], 1, t[6], t[7], t[8]);
}

static int call_bn_bwd_act(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_bwd_act(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                         t[8]);
}

static int call_relu_fwd(sl_exec *e, void *const *t, int huge)
{
    return sl_relu_fwd(e, huge ? BIG64 : 17, t[0], t[1]);
}

static int call_relu_bwd(sl_exec *e, void *const *t, int huge)
{
    return sl_relu_bwd(e, huge ? BIG64 : 17, t[0], t[1], t[2]);
}

static int call_add(sl_exec *e, void *const *t, int huge)
{
    return sl_add(e, huge ? BIG64 : 17, t[0], t[1], t[2]);
}

static int pool_shape(sl_pool_shape *sh, int huge)
{
    /* huge: x (2^20, 2^16, 2^16, 2^16) = 2^68 elements, which wraps to 0 in int64 */
    return huge ? sl_pool_shape_init(sh, 1 << 20, 1 << 16, 1 << 16, 1 << 16, 3, 2, 1)
                : sl_pool_shape_init(sh, 2, 7, 6, 3, 3, 2, 1);
}

static int call_maxpool_fwd(sl_exec *e, void *const *t, int huge)
{
    sl_pool_shape sh;
    cr_assert_eq(pool_shape(&sh, huge), SL_OK, "%s", sl_errmsg());
    return sl_maxpool_fwd(e, &sh, t[0], t[1], t[2]);
}

static int call_maxpool_bwd(sl_exec *e, void *const *t, int huge)
{
    sl_pool_shape sh;
    cr_assert_eq(pool_shape(&sh, huge), SL_OK, "%s", sl_errmsg());
    return sl_maxpool_bwd(e, &sh, t[0], t[1], t[2]);
}

/* huge: n = hw = c = 2^22, x 2^66 elements (y, dy 2^44 fit) */
static int call_gap_fwd(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_gap_fwd(e, 1 << 22, 1 << 22, 1 << 22, t[0], t[1])
                : sl_gap_fwd(e, 2, 9, 5, t[0], t[1]);
}

static int call_gap_bwd(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_gap_bwd(e, 1 << 22, 1 << 22, 1 << 22, t[0], t[1])
                : sl_gap_bwd(e, 2, 9, 5, t[0], t[1]);
}

/* huge: n = in = out = INT_MAX: 2^62 elements fit, their 2^64 bytes do not */
static int call_fc_fwd(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_fc_fwd(e, INT_MAX, INT_MAX, INT_MAX, t[0], t[1], t[2], t[3])
                : sl_fc_fwd(e, 3, 7, 5, t[0], t[1], t[2], t[3]);
}

static int call_fc_bwd(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_fc_bwd(e, INT_MAX, INT_MAX, INT_MAX, t[0], t[1], t[2], t[3], t[4], t[5])
                : sl_fc_bwd(e, 3, 7, 5, t[0], t[1], t[2], t[3], t[4], t[5]);
}

static int call_xent_fwd_bwd(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_xent_fwd_bwd(e, INT_MAX, INT_MAX, t[0], t[1], 0.1f, t[2], t[3], t[4])
                : sl_xent_fwd_bwd(e, 4, 10, t[0], t[1], 0.1f, t[2], t[3], t[4]);
}

static int call_bn_fwd_apply(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_fwd_apply(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], t[3], t[4],
                           huge ? 1e19 : 12.0, 0.1f, 1e-5f, t[5], t[6], t[7], t[8], t[9]);
}

static int call_bn_bwd_reduce(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_bwd_reduce(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], t[3], t[4], t[5]);
}

static int call_bn_bwd_apply(sl_exec *e, void *const *t, int huge)
{
    return sl_bn_bwd_apply(e, huge ? BIG64 : 6, 3, t[0], t[1], t[2], t[3], t[4], t[5], t[6],
                           huge ? 1e19 : 12.0, t[7]);
}

/* huge: world = c = INT_MAX, slots (world, 3, c) ~ 2^63.6 elements */
static int call_bn_moments(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_bn_moments(e, 2, INT_MAX, t[0], INT_MAX, 0, t[1])
                : sl_bn_moments(e, 6, 3, t[0], 2, 1, t[1]);
}

static int call_bn_moments_merge(sl_exec *e, void *const *t, int huge)
{
    return huge ? sl_bn_moments_merge(e, 2, INT_MAX, INT_MAX, t[0], t[1], t[2])
                : sl_bn_moments_merge(e, 6, 3, 2, t[0], t[1], t[2]);
}

static const op_case cases[] = {
    {"sl_conv_fwd", {"x", "w", "y"}, 0, "x", call_conv_fwd},
    {"sl_conv_bwd_data", {"dy", "w", "dx"}, 0, "dx", call_conv_bwd_data},
    {"sl_conv_bwd_filter", {"x", "dy", "dw"}, 0, "x", call_conv_bwd_filter},
    {"sl_conv_bwd_data_acc", {"dy", "w", "dx", "tmp"}, 1u << 3, "dx", call_conv_bwd_data_acc},
    {"sl_bn_fwd_train",
     {"x", "gamma", "beta", "running_mean", "running_var", "y", "save_mean", "save_invstd"},
     0, "x", call_bn_fwd_train},
    {"sl_bn_fwd_eval", {"x", "gamma", "beta", "running_mean", "running_var", "y"}, 0, "x",
     call_bn_fwd_eval},
    {"sl_bn_bwd",
     {"x", "dy", "gamma", "save_mean", "save_invstd", "dx", "dgamma", "dbeta"}, 0, "x",
     call_bn_bwd},
    {"sl_bn_fwd_train_act",
     {"x", "gamma", "beta", "running_mean", "running_var", "r", "y", "save_mean",
      "save_invstd"},
     1u << 5, "x", call_bn_fwd_train_act},
    {"sl_bn_bwd_act",
     {"x", "z", "dz", "gamma", "save_mean", "save_invstd", "dx", "dgamma", "dbeta"},
     1u << 7 | 1u << 8, "x", call_bn_bwd_act},
    {"sl_relu_fwd", {"x", "y"}, 0, "x", call_relu_fwd},
    {"sl_relu_bwd", {"y", "dy", "dx"}, 0, "y", call_relu_bwd},
    {"sl_add", {"a", "b", "y"}, 0, "a", call_add},
    {"sl_maxpool_fwd", {"x", "y", "argmax"}, 0, "x", call_maxpool_fwd},
    {"sl_maxpool_bwd", {"dy", "argmax", "dx"}, 0, "dx", call_maxpool_bwd},
    {"sl_gap_fwd", {"x", "y"}, 0, "x", call_gap_fwd},
    {"sl_gap_bwd", {"dy", "dx"}, 0, "dx", call_gap_bwd},
    {"sl_fc_fwd", {"x", "w", "b", "y"}, 0, "x", call_fc_fwd},
    {"sl_fc_bwd", {"x", "w", "dy", "dx", "dw", "db"}, 1u << 3, "x", call_fc_bwd},
    {"sl_xent_fwd_bwd", {"logits", "labels", "loss", "dlogits", "correct"}, 1u << 4, "logits",
     call_xent_fwd_bwd},
    {"sl_bn_fwd_apply",
     {"x", "gamma", "beta", "mean", "var", "running_mean", "running_var", "y", "save_mean",
      "save_invstd"},
     0, "x", call_bn_fwd_apply},
    {"sl_bn_bwd_reduce", {"x", "dy", "save_mean", "save_invstd", "sum_dy", "sum_dy_xhat"}, 0,
     "x", call_bn_bwd_reduce},
    {"sl_bn_bwd_apply",
     {"x", "dy", "gamma", "save_mean", "save_invstd", "sum_dy", "sum_dy_xhat", "dx"}, 0, "x",
     call_bn_bwd_apply},
    {"sl_bn_moments", {"x", "slots"}, 0, "slots", call_bn_moments},
    {"sl_bn_moments_merge", {"slots", "mean", "var"}, 0, "slots", call_bn_moments_merge},
};

static const op_case *find_case(const char *op)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(cases[i].op, op))
            return &cases[i];
    cr_assert_fail("no case for %s", op);
    return NULL;
}

/* Zeroed tensors (a zero is a good label, argmax and statistic), each of
 * its own buffer. */
static float bufs[NT][BUF];

static void fresh_tensors(void **t)
{
    memset(bufs, 0, sizeof bufs);
    for (int i = 0; i < NT; i++)
        t[i] = bufs[i];
}

static int untouched(void)
{
    for (int i = 0; i < NT; i++)
        for (int j = 0; j < BUF; j++)
            if (bufs[i][j] != 0)
                return 0;
    return 1;
}

/* The execs: ref, cpu, and cuda's table without a context. */
#define NEXEC 3

static void execs_init(sl_exec *e)
{
    cr_assert_eq(sl_exec_init(&e[0], SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_exec_init(&e[1], SL_BACKEND_CPU, 1), SL_OK, "%s", sl_errmsg());
    memset(&e[2], 0, sizeof e[2]);
    e[2].backend = SL_BACKEND_CUDA; /* e.cuda NULL: no context */
    e[2].ops = &sl_ops_cuda;
}

static void execs_fini(sl_exec *e)
{
    sl_exec_fini(&e[0]);
    sl_exec_fini(&e[1]);
}

/* The slot is there (the fused ones are cuda's, and only in a CUDA build). */
static int has_slot(const op_case *c, sl_exec *e)
{
    void *t[NT];
    fresh_tensors(t);
    t[0] = NULL; /* refused by the checks or the missing slot: nothing runs */
    int rc = c->call(e, t, 0);
    return !(rc == SL_ENOTSUP && strstr(sl_errmsg(), "no such op"));
}

static void null_tensors(const char *op)
{
    const op_case *c = find_case(op);
    sl_exec es[NEXEC];
    execs_init(es);
    int ran = 0;
    for (int k = 0; k < NEXEC; k++) {
        sl_exec *e = &es[k];
        if (!has_slot(c, e))
            continue;
        ran++;
        for (int i = 0; c->names[i]; i++) {
            if (c->optional & (1u << i))
                continue;
            void *t[NT];
            fresh_tensors(t);
            t[i] = NULL;
            cr_assert_eq(c->call(e, t, 0), SL_EINVAL, "%s: %s: NULL %s: %s", op, e->ops->name,
                         c->names[i], sl_errmsg());
            char want[96];
            snprintf(want, sizeof want, "%s: %s: NULL tensor %s (", op, e->ops->name,
                     c->names[i]);
            cr_assert(strstr(sl_errmsg(), want), "want \"%s\" in \"%s\"", want, sl_errmsg());
            cr_assert(untouched(), "%s: %s: nothing written on refusal", op, e->ops->name);
        }
        if (e->backend == SL_BACKEND_CUDA)
            continue; /* no context: a good call is refused by the slot */
        /* every tensor there, and then the optional ones NULL: both run */
        void *t[NT];
        fresh_tensors(t);
        cr_assert_eq(c->call(e, t, 0), SL_OK, "%s: %s: %s", op, e->ops->name, sl_errmsg());
        fresh_tensors(t);
        for (int i = 0; c->names[i]; i++)
            if (c->optional & (1u << i))
                t[i] = NULL;
        cr_assert_eq(c->call(e, t, 0), SL_OK, "%s: %s: %s", op, e->ops->name, sl_errmsg());
    }
    execs_fini(es);
    if (!ran)
        cr_skip_test("%s: no backend of this build has the slot", op);
}

static void size_overflow(const char *op)
{
    const op_case *c = find_case(op);
    sl_exec es[NEXEC];
    execs_init(es);
    int ran = 0;
    for (int k = 0; k < NEXEC; k++) {
        sl_exec *e = &es[k];
        if (!has_slot(c, e))
            continue;
        ran++;
        void *t[NT];
        fresh_tensors(t);
        cr_assert_eq(c->call(e, t, 1), SL_EINVAL, "%s: %s: %s", op, e->ops->name, sl_errmsg());
        char want[96];
        snprintf(want, sizeof want, "%s: %s: %s: ", op, e->ops->name, c->huge_names);
        cr_assert(strstr(sl_errmsg(), want) && strstr(sl_errmsg(), "overflows 64 bits"),
                  "want \"%s ... overflows 64 bits\" in \"%s\"", want, sl_errmsg());
        cr_assert(untouched(), "%s: %s: nothing written on refusal", op, e->ops->name);
    }
    execs_fini(es);
    if (!ran)
        cr_skip_test("%s: no backend of this build has the slot", op);
}

/* Before the checks, a call here read or wrote through the NULL, or ran
 * the loops of a wrapped size past small buffers: a crash, or a long
 * wander (hence the timeout). */
#define ARG_TESTS(op)                                                                         \
    Test(train_ops_args, op##_null_tensor, .timeout = 30) { null_tensors("sl_" #op); }      \
    Test(train_ops_args, op##_size_overflow, .timeout = 30) { size_overflow("sl_" #op); }

ARG_TESTS(conv_fwd)
ARG_TESTS(conv_bwd_data)
ARG_TESTS(conv_bwd_filter)
ARG_TESTS(conv_bwd_data_acc)
ARG_TESTS(bn_fwd_train)
ARG_TESTS(bn_fwd_eval)
ARG_TESTS(bn_bwd)
ARG_TESTS(bn_fwd_train_act)
ARG_TESTS(bn_bwd_act)
ARG_TESTS(relu_fwd)
ARG_TESTS(relu_bwd)
ARG_TESTS(add)
ARG_TESTS(maxpool_fwd)
ARG_TESTS(maxpool_bwd)
ARG_TESTS(gap_fwd)
ARG_TESTS(gap_bwd)
ARG_TESTS(fc_fwd)
ARG_TESTS(fc_bwd)
ARG_TESTS(xent_fwd_bwd)
ARG_TESTS(bn_fwd_apply)
ARG_TESTS(bn_bwd_reduce)
ARG_TESTS(bn_bwd_apply)
ARG_TESTS(bn_moments)
ARG_TESTS(bn_moments_merge)

/* Every slot of the table has its case: a new op gets its tests (sl_ops is
 * its name and one function pointer per op, then the cuDNN-fusion slots
 * from fuse_available on, whose entry points test_fuse_cuda.c checks). */
Test(train_ops_args, every_op_has_a_case)
{
    size_t slots = (offsetof(sl_ops, fuse_available) - sizeof(const char *)) /
                   sizeof(void (*)(void));
    cr_assert_eq(sizeof cases / sizeof cases[0], slots);
}

/* The conv's other tensors overflow alone too: w (k, r, s, c) and y (n, p, q, k). */
Test(train_ops_args, conv_weight_and_output_overflow, .timeout = 30)
{
    void *t[NT];
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
    sl_conv_shape sh;
    /* w: 2^20 x 2^14 x 2^14 x 2^16 = 2^64; x 2^44 and y 2^20 fit */
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 1 << 14, 1 << 14, 1 << 16, 1 << 20, 1 << 14, 1 << 14,
                                    1, 0), SL_OK, "%s", sl_errmsg());
    fresh_tensors(t);
    cr_assert_eq(sl_conv_fwd(&e, &sh, t[0], t[1], t[2]), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_conv_fwd: ref: w: 1048576 x 16384 x 16384 x 65536 "
                                  "elements: the size overflows 64 bits"), "%s", sl_errmsg());
    cr_assert_eq(sl_conv_bwd_filter(&e, &sh, t[0], t[1], t[2]), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_conv_bwd_filter: ref: dw: "), "%s", sl_errmsg());
    /* y: 2^20 x 2^16 x 2^16 x 2^16 = 2^68; x 2^52 and w 2^16 fit */
    cr_assert_eq(sl_conv_shape_init(&sh, 1 << 20, 1 << 16, 1 << 16, 1, 1 << 16, 1, 1, 1, 0),
                 SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_conv_fwd(&e, &sh, t[0], t[1], t[2]), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_conv_fwd: ref: y: "), "%s", sl_errmsg());
    cr_assert_eq(sl_conv_bwd_data(&e, &sh, t[0], t[1], t[2]), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_conv_bwd_data: ref: dy: "), "%s", sl_errmsg());
    cr_assert(untouched());
    sl_exec_fini(&e);
}

/* A tensor with no elements may be NULL: nothing is read or written. */
Test(train_ops_args, empty_tensors_may_be_null)
{
    void *t[NT];
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK, "%s", sl_errmsg());
        fresh_tensors(t);
        cr_assert_eq(sl_relu_fwd(&e, 0, NULL, NULL), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_add(&e, 0, NULL, NULL, NULL), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_bn_fwd_eval(&e, 0, 3, NULL, t[0], t[1], t[2], t[3], 1e-5f, NULL), SL_OK,
                     "%s", sl_errmsg());
        cr_assert_eq(sl_bn_bwd_reduce(&e, 0, 3, NULL, NULL, t[0], t[1], t[2], t[3]), SL_OK, "%s",
                     sl_errmsg());
        /* the per-channel tensors have elements: still refused */
        cr_assert_eq(sl_bn_bwd_reduce(&e, 0, 3, NULL, NULL, t[0], t[1], NULL, t[3]), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "NULL tensor sum_dy (3 elements)"), "%s", sl_errmsg());
        sl_exec_fini(&e);
    }
}

/* Geometry: a padded input past 2^31-1 a side (h + 2*pad overflowed an int
 * before), by sl_*_shape_init and by the entry points for a hand-made shape. */
Test(train_ops_args, padded_input_beyond_int)
{
    sl_conv_shape cs;
    sl_pool_shape ps;
    cr_assert_eq(sl_conv_shape_init(&cs, 1, 1, 1, 1, 1, 1, 1, INT_MAX, INT_MAX), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "padded input"), "%s", sl_errmsg());
    cr_assert_eq(sl_conv_shape_init(&cs, 1, INT_MAX, 1, 1, 1, 1, 1, 1, 1), SL_EINVAL);
    cr_assert_eq(sl_pool_shape_init(&ps, 1, INT_MAX, 4, 1, 3, 1, 1), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "padded input"), "%s", sl_errmsg());
    cr_assert_eq(sl_pool_shape_init(&ps, 1, 4, 4, 1, INT_MAX, 1, INT_MAX / 2), SL_EINVAL);
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
    float f[16] = {0};
    cs = (sl_conv_shape){1, 1, 1, 1, 1, 1, 1, INT_MAX, INT_MAX, 3, 3};
    cr_assert_eq(sl_conv_fwd(&e, &cs, f, f, f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "bad conv geometry"), "%s", sl_errmsg());
    ps = (sl_pool_shape){1, 2, 2, 1, INT_MAX, INT_MAX, INT_MAX / 2, 1, 1};
    cr_assert_eq(sl_maxpool_fwd(&e, &ps, f, f, (int32_t *)f), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "bad pool geometry"), "%s", sl_errmsg());
    sl_exec_fini(&e);
}

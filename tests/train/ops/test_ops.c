/* tests/train/ops/test_ops.c - the op entry points of train/ops/ops.c: the argument
 * checks every backend shares (once, before the slot runs), the missing
 * slots, and that a good call reaches the backend. The cuda side of the same
 * checks is in test_ops_cuda.c and test_norm_cuda.c (an exec without a
 * context). */
#include <criterion/criterion.h>
#include <string.h>

#include "train/train_int.h"

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

/* The fused slots are cuda's: elsewhere the entry point says so. */
Test(train_ops, missing_slot_is_enotsup)
{
    float f[8] = {0};
    sl_conv_shape cs;
    cr_assert_eq(sl_conv_shape_init(&cs, 1, 2, 2, 1, 1, 1, 1, 1, 0), SL_OK);
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_bn_fwd_train_act(&e, 4, 2, f, f, f, 0.1f, 1e-5f, f, f, NULL, 1, f, f, f),
                     SL_ENOTSUP);
        cr_assert(strstr(sl_errmsg(), "sl_bn_fwd_train_act") && strstr(sl_errmsg(), e.ops->name),
                  "%s", sl_errmsg());
        cr_assert_eq(sl_bn_bwd_act(&e, 4, 2, f, f, f, f, f, f, f, NULL, NULL), SL_ENOTSUP);
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
    cr_assert_eq(sl_exec_set_act(e, SL_DTYPE_BF16), SL_ENOTSUP);
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

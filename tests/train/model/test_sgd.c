/*
 * tests/train/model/test_sgd.c - SGD (train/model/sgd.c) against torch.optim.SGD's update
 * (dampening 0), worked by hand:
 *
 *   g = grad + wd*p (decay tensors only); buf = m*buf + g (first: buf = g);
 *   d = nesterov ? g + m*buf : buf; p -= lr*d
 *
 * Golden numbers below: p0 = 1, grads 0.5, -0.2, 0.1, lr 0.5, momentum 0.9,
 * weight decay 0.1.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testutil.h"
#include "train/train.h"

enum { NW = 5, NB = 3 };

/* A tiny "state dict": a decayed conv-like weight (OHWI), a BN weight
 * (no decay) and a buffer the optimizer must skip. */
typedef struct toy {
    float w[NW], gw[NW], bn[NB], gbn[NB], rv[NB];
    sl_tensor_info t[3];
} toy;

static void toy_init(toy *z)
{
    memset(z, 0, sizeof *z);
    for (int i = 0; i < NW; i++)
        z->w[i] = 1.0f;
    for (int i = 0; i < NB; i++)
        z->bn[i] = 1.0f, z->rv[i] = 7.0f;
    z->t[0] = (sl_tensor_info){"layer1.0.conv1.weight", SL_T_F32, z->w, z->gw, NW, 4,
                               {5, 1, 1, 1}, SL_TENSOR_PARAM | SL_TENSOR_DECAY | SL_TENSOR_OHWI};
    z->t[1] = (sl_tensor_info){"layer1.0.bn1.weight", SL_T_F32, z->bn, z->gbn, NB, 1, {NB},
                               SL_TENSOR_PARAM};
    z->t[2] = (sl_tensor_info){"layer1.0.bn1.running_var", SL_T_F32, z->rv, NULL, NB, 1, {NB},
                               SL_TENSOR_BUFFER};
}

static void toy_grad(toy *z, float g)
{
    for (int i = 0; i < NW; i++)
        z->gw[i] = g;
    for (int i = 0; i < NB; i++)
        z->gbn[i] = g;
}

static sl_sgd *mk(toy *z, float momentum, int nesterov, float wd)
{
    sl_sgd_config c = {momentum, nesterov, wd};
    sl_sgd *o = NULL;
    cr_assert_eq(sl_sgd_create(&c, z->t, 3, &o), SL_OK, "%s", sl_errmsg());
    return o;
}

#define NEAR(a, b) cr_assert_float_eq((a), (b), 1e-6, "%.9g != %.9g", (double)(a), (double)(b))

static const float grads[3] = {0.5f, -0.2f, 0.1f};

Test(train_sgd, momentum_three_steps)
{
    toy z;
    toy_init(&z);
    sl_sgd *o = mk(&z, 0.9f, 0, 0.1f);
    /* decayed weight:
     *   1: g = 0.5 + 0.1*1 = 0.6;        buf = 0.6;                 p = 1 - 0.3 = 0.7
     *   2: g = -0.2 + 0.07 = -0.13;      buf = 0.54 - 0.13 = 0.41;  p = 0.7 - 0.205 = 0.495
     *   3: g = 0.1 + 0.0495 = 0.1495;    buf = 0.369 + 0.1495 = 0.5185;
     *                                    p = 0.495 - 0.25925 = 0.23575
     * BN weight, no decay:
     *   1: buf 0.5, p 0.75;  2: buf 0.25, p 0.625;  3: buf 0.325, p 0.4625 */
    const float want_w[3] = {0.7f, 0.495f, 0.23575f}, want_bn[3] = {0.75f, 0.625f, 0.4625f};
    for (int s = 0; s < 3; s++) {
        toy_grad(&z, grads[s]);
        cr_assert_eq(sl_sgd_step(o, 0.5f), SL_OK);
        for (int i = 0; i < NW; i++)
            NEAR(z.w[i], want_w[s]);
        for (int i = 0; i < NB; i++) {
            NEAR(z.bn[i], want_bn[s]);
            cr_assert_eq(z.rv[i], 7.0f, "buffers untouched");
            cr_assert_eq(z.gbn[i], grads[s], "the grad is not modified");
        }
    }
    int n = 0;
    sl_tensor_info *st = sl_sgd_tensors(o, &n);
    cr_assert_eq(n, 3, "two momentum buffers and the step");
    cr_assert_str_eq(st[0].name, "optimizer.layer1.0.conv1.weight.momentum_buffer");
    cr_assert_str_eq(st[1].name, "optimizer.layer1.0.bn1.weight.momentum_buffer");
    cr_assert_str_eq(st[2].name, "optimizer.step");
    NEAR(((float *)st[0].data)[4], 0.5185f);
    NEAR(((float *)st[1].data)[2], 0.325f);
    cr_assert_eq(st[0].flags & SL_TENSOR_OHWI, SL_TENSOR_OHWI);
    cr_assert_eq(st[1].flags & SL_TENSOR_OHWI, 0u);
    cr_assert(st[0].ndim == 4 && st[0].shape[0] == 5 && st[0].numel == NW && !st[0].grad);
    cr_assert(st[1].ndim == 1 && st[1].shape[0] == NB && st[1].dtype == SL_T_F32);
    cr_assert(st[2].dtype == SL_T_I64 && st[2].ndim == 0 && st[2].numel == 1);
    cr_assert_eq(*(int64_t *)st[2].data, 3);
    sl_sgd_destroy(o);
}

Test(train_sgd, nesterov_three_steps)
{
    toy z;
    toy_init(&z);
    sl_sgd *o = mk(&z, 0.9f, 1, 0.1f);
    /* decayed weight, d = g + 0.9*buf:
     *   1: g = 0.6;       buf = 0.6;       d = 1.14;       p = 1 - 0.57 = 0.43
     *   2: g = -0.157;    buf = 0.383;     d = 0.1877;     p = 0.43 - 0.09385 = 0.33615
     *   3: g = 0.133615;  buf = 0.478315;  d = 0.5640985;  p = 0.05410075
     * BN weight: 1: buf 0.5, d 0.95, p 0.525;  2: buf 0.25, d 0.025, p 0.5125;
     *            3: buf 0.325, d 0.3925, p 0.31625 */
    const float want_w[3] = {0.43f, 0.33615f, 0.05410075f},
                want_bn[3] = {0.525f, 0.5125f, 0.31625f};
    for (int s = 0; s < 3; s++) {
        toy_grad(&z, grads[s]);
        cr_assert_eq(sl_sgd_step(o, 0.5f), SL_OK);
        NEAR(z.w[0], want_w[s]);
        NEAR(z.w[NW - 1], want_w[s]);
        NEAR(z.bn[0], want_bn[s]);
        NEAR(z.bn[NB - 1], want_bn[s]);
    }
    NEAR(((float *)sl_sgd_tensors(o, NULL)[0].data)[0], 0.478315f);
    sl_sgd_destroy(o);
}

/* Momentum 0 is plain SGD (with decay on the decayed tensor only). */
Test(train_sgd, plain_sgd)
{
    toy z;
    toy_init(&z);
    sl_sgd *o = mk(&z, 0.0f, 0, 0.1f);
    toy_grad(&z, 0.5f);
    cr_assert_eq(sl_sgd_step(o, 0.5f), SL_OK);
    cr_assert_eq(sl_sgd_step(o, 0.5f), SL_OK);
    /* w: 1 - 0.5*0.6 = 0.7; 0.7 - 0.5*(0.5 + 0.07) = 0.415.  bn: 1 - 0.25 - 0.25 = 0.5 */
    NEAR(z.w[2], 0.415f);
    NEAR(z.bn[1], 0.5f);
    sl_sgd_destroy(o);
}

/* A restored optimizer (buffers and step written through its state
 * entries, as a checkpoint load does) continues where it left off: step 3
 * of momentum_three_steps from step 2's state. */
Test(train_sgd, resumes_from_its_state)
{
    toy z;
    toy_init(&z);
    sl_sgd *o = mk(&z, 0.9f, 0, 0.1f);
    int n;
    sl_tensor_info *st = sl_sgd_tensors(o, &n);
    for (int i = 0; i < NW; i++)
        ((float *)st[0].data)[i] = 0.41f, z.w[i] = 0.495f;
    for (int i = 0; i < NB; i++)
        ((float *)st[1].data)[i] = 0.25f, z.bn[i] = 0.625f;
    *(int64_t *)st[2].data = 2;
    toy_grad(&z, 0.1f);
    cr_assert_eq(sl_sgd_step(o, 0.5f), SL_OK);
    NEAR(z.w[1], 0.23575f);
    NEAR(z.bn[1], 0.4625f);
    sl_sgd_destroy(o);
}

/* Every element, several tensors of awkward sizes, against a double
 * reference of the same formula over 4 steps with changing grads and LR. */
Test(train_sgd, matches_reference_on_awkward_sizes)
{
    enum { T = 4 };
    const int64_t sizes[T] = {1, 17, 300, 1031};
    const unsigned flags[T] = {SL_TENSOR_PARAM, SL_TENSOR_PARAM | SL_TENSOR_DECAY,
                               SL_TENSOR_PARAM, SL_TENSOR_PARAM | SL_TENSOR_DECAY};
    sl_tensor_info t[T];
    float *p[T], *g[T];
    double *rp[T], *rb[T];
    uint64_t s = 3;
    char names[T][16];
    for (int k = 0; k < T; k++) {
        p[k] = malloc(sizes[k] * sizeof(float)), g[k] = malloc(sizes[k] * sizeof(float));
        rp[k] = malloc(sizes[k] * sizeof(double)), rb[k] = calloc(sizes[k], sizeof(double));
        for (int64_t i = 0; i < sizes[k]; i++)
            p[k][i] = (float)((tu_rand(&s) >> 40) * 0x1p-24 - 0.5), rp[k][i] = p[k][i];
        snprintf(names[k], sizeof names[k], "t%d", k);
        t[k] = (sl_tensor_info){names[k], SL_T_F32, p[k], g[k], sizes[k], 1, {sizes[k]},
                                flags[k]};
    }
    for (int nest = 0; nest < 2; nest++) {
        sl_sgd_config c = {0.875f, nest, 0.01f};
        sl_sgd *o = NULL;
        cr_assert_eq(sl_sgd_create(&c, t, T, &o), SL_OK);
        for (int k = 0; k < T; k++)
            memset(rb[k], 0, sizes[k] * sizeof(double));
        for (int step = 0; step < 4; step++) {
            float lr = 0.1f * (step + 1);
            for (int k = 0; k < T; k++)
                for (int64_t i = 0; i < sizes[k]; i++)
                    g[k][i] = (float)((tu_rand(&s) >> 40) * 0x1p-24 - 0.5);
            cr_assert_eq(sl_sgd_step(o, lr), SL_OK);
            for (int k = 0; k < T; k++) {
                double wd = (flags[k] & SL_TENSOR_DECAY) ? 0.01 : 0.0;
                for (int64_t i = 0; i < sizes[k]; i++) {
                    double gg = g[k][i] + wd * rp[k][i];
                    rb[k][i] = step == 0 ? gg : 0.875 * rb[k][i] + gg;
                    rp[k][i] -= lr * (nest ? gg + 0.875 * rb[k][i] : rb[k][i]);
                    cr_assert_float_eq(p[k][i], rp[k][i], 1e-5, "nesterov %d step %d t%d[%lld]",
                                       nest, step, k, (long long)i);
                }
            }
        }
        sl_sgd_destroy(o);
    }
    for (int k = 0; k < T; k++)
        free(p[k]), free(g[k]), free(rp[k]), free(rb[k]);
}

/* Over a model: one momentum buffer per parameter, none for buffers, and
 * decay only where the model says (conv / fc weights). */
Test(train_sgd, over_a_model)
{
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = SL_ARCH_RESNET20, mc.classes = 10, mc.width = 4;
    sl_model *m = NULL;
    cr_assert_eq(sl_model_create(&mc, 1, 8, 8, &m), SL_OK);
    int count, n;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    sl_sgd_config c = SL_SGD_CONFIG_INIT;
    sl_sgd *o = NULL;
    cr_assert_eq(sl_sgd_create(&c, t, count, &o), SL_OK, "%s", sl_errmsg());
    sl_tensor_info *st = sl_sgd_tensors(o, &n);
    cr_assert_eq(n, 21 * 3 + 2 + 1, "21 convs + 21 BN x 2 + fc x 2, plus the step");
    cr_assert_str_eq(st[0].name, "optimizer.conv1.weight.momentum_buffer");
    cr_assert_str_eq(st[n - 2].name, "optimizer.fc.bias.momentum_buffer");
    cr_assert_eq(st[0].flags & SL_TENSOR_OHWI, SL_TENSOR_OHWI);
    /* zero grads: only decay moves weights; BN gammas and biases stay put */
    for (int i = 0; i < count; i++)
        if (t[i].grad)
            memset(t[i].grad, 0, t[i].numel * sizeof(float));
    float w0 = ((float *)t[0].data)[0], fb = ((float *)sl_model_tensor(m, "fc.bias")->data)[0];
    cr_assert_eq(sl_sgd_step(o, 1.0f), SL_OK);
    NEAR(((float *)t[0].data)[0], w0 * (1.0f - 5e-5f));
    cr_assert_eq(((float *)sl_model_tensor(m, "bn1.weight")->data)[0], 1.0f);
    cr_assert_eq(((float *)sl_model_tensor(m, "fc.bias")->data)[0], fb);
    sl_sgd_destroy(o);
    sl_model_destroy(m);
}

Test(train_sgd, bad_arguments)
{
    toy z;
    toy_init(&z);
    sl_sgd_config c = {0.0f, 1, 0.0f};
    sl_sgd *o = (sl_sgd *)&z;
    cr_assert_eq(sl_sgd_create(&c, z.t, 3, &o), SL_EINVAL, "nesterov needs momentum");
    cr_assert_null(o);
    c = (sl_sgd_config){-0.1f, 0, 0.0f};
    cr_assert_eq(sl_sgd_create(&c, z.t, 3, &o), SL_EINVAL);
    c = (sl_sgd_config){0.9f, 0, NAN};
    cr_assert_eq(sl_sgd_create(&c, z.t, 3, &o), SL_EINVAL);
    c = (sl_sgd_config)SL_SGD_CONFIG_INIT;
    cr_assert_eq(sl_sgd_create(NULL, z.t, 3, &o), SL_EINVAL);
    z.t[1].grad = NULL; /* a param without a grad */
    cr_assert_eq(sl_sgd_create(&c, z.t, 3, &o), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "layer1.0.bn1.weight"), "%s", sl_errmsg());
    z.t[1].grad = z.gbn;
    cr_assert_eq(sl_sgd_create(&c, z.t, 3, &o), SL_OK);
    cr_assert_eq(sl_sgd_step(o, -1.0f), SL_EINVAL);
    cr_assert_eq(sl_sgd_step(o, NAN), SL_EINVAL);
    cr_assert_eq(sl_sgd_step(NULL, 0.1f), SL_EINVAL);
    sl_sgd_destroy(o);
    sl_sgd_destroy(NULL);
}

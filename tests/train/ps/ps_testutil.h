/*
 * tests/train/ps/ps_testutil.h - helpers shared by the parameter server's
 * tests (test_ps.c, test_ps_mpi.c): a tiny ResNet-20, a learnable synthetic
 * task, one forward/backward, fake gradients, bitwise comparison of state
 * dicts and a config. No Criterion calls: the MPI ranks use them outside a
 * test.
 */
#ifndef SL_PS_TESTUTIL_H
#define SL_PS_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"
#include "train/ps/ps_int.h"

#define PS_UNUSED __attribute__((unused))

enum { H = 8, W = 8, K = 4 }; /* image size, classes */

/* ResNet-20 of the given width for (H, W) inputs and K classes; NULL on
 * failure (sl_errmsg() says why). */
static PS_UNUSED sl_model *model_new(int width, uint64_t seed, int max_batch)
{
    sl_model_config c = SL_MODEL_CONFIG_INIT;
    c.arch = SL_ARCH_RESNET20, c.classes = K, c.width = width, c.seed = seed;
    c.zero_init_residual = 0;
    sl_model *m = NULL;
    return sl_model_create(&c, max_batch, H, W, &m) ? NULL : m;
}

/* n images (H, W, 3) of K classes: per-channel means +-1 by class + N(0, 1). */
static PS_UNUSED void make_data(int n, uint64_t seed, float *x, int32_t *lab)
{
    static const float mean[K][3] = {{1, -1, 1}, {-1, 1, 1}, {1, 1, -1}, {-1, -1, -1}};
    uint64_t st = seed;
    for (int i = 0; i < n; i++) {
        lab[i] = i % K;
        for (int p = 0; p < H * W * 3; p++) {
            double u1 = ((tu_rand(&st) >> 11) + 0.5) / 9007199254740992.0;
            double u2 = ((tu_rand(&st) >> 11) + 0.5) / 9007199254740992.0;
            x[(size_t)i * H * W * 3 + p] =
                (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)) + mean[lab[i]][p % 3];
        }
    }
}

/* Forward (train), cross-entropy, backward: m's grads are set. */
static PS_UNUSED int fwd_bwd(sl_model *m, sl_exec *e, const float *x, const int32_t *lab,
                             int n, float *dl, float *loss)
{
    const float *lg;
    int rc = sl_model_forward(m, e, x, n, 1, &lg);
    if (!rc)
        rc = e->ops->xent_fwd_bwd(e, n, K, lg, lab, 0.0f, loss, dl, NULL);
    if (!rc)
        rc = sl_model_backward(m, e, dl, NULL);
    return rc;
}

/* Fake gradients: every param's grad = g (no forward needed). */
static PS_UNUSED void set_grads(sl_model *m, float g)
{
    int n;
    sl_tensor_info *t = sl_model_tensors(m, &n);
    for (int i = 0; i < n; i++)
        if (t[i].flags & SL_TENSOR_PARAM)
            for (int64_t j = 0; j < t[i].numel; j++)
                t[i].grad[j] = g;
}

/* The first tensor whose bytes differ between two state-dict arrays, or
 * NULL when all are equal. */
static PS_UNUSED const char *first_diff(const sl_tensor_info *ta, int na,
                                        const sl_tensor_info *tb, int nb)
{
    if (na != nb)
        return "(tensor count)";
    for (int i = 0; i < na; i++) {
        size_t bytes = (size_t)ta[i].numel * (ta[i].dtype == SL_T_I64 ? 8 : 4);
        if (strcmp(ta[i].name, tb[i].name) || ta[i].numel != tb[i].numel ||
            memcmp(ta[i].data, tb[i].data, bytes))
            return ta[i].name;
    }
    return NULL;
}

/* The first differing tensor of two models' state dicts (or optimizers'), NULL if none. */
static PS_UNUSED const char *model_diff(sl_model *a, sl_model *b)
{
    int na, nb;
    sl_tensor_info *ta = sl_model_tensors(a, &na), *tb = sl_model_tensors(b, &nb);
    return first_diff(ta, na, tb, nb);
}

static PS_UNUSED const char *opt_diff(sl_sgd *a, sl_sgd *b)
{
    int na, nb;
    sl_tensor_info *ta = sl_sgd_tensors(a, &na), *tb = sl_sgd_tensors(b, &nb);
    return first_diff(ta, na, tb, nb);
}

/* A config for the tests: momentum 0.9, weight decay 5e-4, 20 s deadlines. */
static PS_UNUSED sl_ps_config ps_cfg(int servers, int workers, int k)
{
    sl_ps_config c = SL_PS_CONFIG_INIT;
    c.servers = servers, c.workers = workers, c.max_staleness = k;
    c.sgd = (sl_sgd_config){0.9f, 0, 5e-4f};
    c.timeout_ms = 20000;
    return c;
}

#endif

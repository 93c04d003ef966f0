/* tests/train/device/test_sgd_cuda.c - the fused multi-tensor SGD kernel
 * (train/device/sgd_cuda.cu) against sl_sgd on the host (train/model/sgd.c, PyTorch's
 * SGD): several steps with changing gradients and learning rates, momentum
 * with and without Nesterov, momentum 0, a decay mask, tensors of 0 to 1M+
 * elements in one launch; test_sgd.c's hand-worked golden steps; with a
 * loss-scale state (fp16): a step on grads scaled by s equals, bit for bit,
 * the plain step on grad / s (a power of two and not), and a step with
 * found_inf set leaves every param and momentum bit as it was; argument
 * errors. Skips without a GPU (the argument checks run anyway) or in a
 * build without the cuda backend. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/device/sgd_cuda.h"
#include "train/train.h"

#ifndef SLUICE_TRAIN_CUDA
Test(train_sgd_cuda, built_without_cuda)
{
    cr_skip_test("built without CUDA (the cuda backend needs CUDA and cuDNN)");
}
#else
#include "train/cuda_testutil.h"

/* A model-like set: NT tensors on the host (sl_sgd's view, one of them a
 * buffer the optimizer must skip) and their params on the device with the
 * kernel's table. */
enum { NT = 8 };
static const int64_t sizes[NT] = {0, 1, 3, 64, 1000 + 7, 100003, 17, (1 << 20) + 5};

typedef struct sgd_set {
    sl_tensor_info t[NT];
    float *p[NT], *g[NT];           /* host data and grads */
    float *dp[NT], *dg[NT], *db[NT]; /* device param, grad, momentum */
    int param_of[NT];               /* host tensor -> table entry, or -1 (the buffer) */
    int np;
    sl_sgd_cuda_tensor *d_tab;
} sgd_set;

static void set_init(sgd_set *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    uint64_t st = seed;
    sl_sgd_cuda_tensor tab[NT];
    for (int i = 0; i < NT; i++) {
        int64_t n = sizes[i];
        s->p[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
        s->g[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
        cr_assert(s->p[i] && s->g[i]);
        for (int64_t k = 0; k < n; k++)
            s->p[i][k] = urand(&st, -1, 1);
        int buffer = i == 6; /* like a running_var: no grad, not stepped */
        unsigned flags = buffer ? SL_TENSOR_BUFFER
                                : SL_TENSOR_PARAM | (i % 2 ? SL_TENSOR_DECAY : 0u);
        s->t[i] = (sl_tensor_info){"t", SL_T_F32, s->p[i], buffer ? NULL : s->g[i], n, 1, {n},
                                   flags};
        s->dp[i] = tg_upf(s->p[i], n);
        if (buffer) {
            s->param_of[i] = -1;
            continue;
        }
        s->dg[i] = tg_newf(n);
        s->db[i] = tg_newf(n); /* poisoned: the first step must not read it */
        s->param_of[i] = s->np;
        tab[s->np++] = (sl_sgd_cuda_tensor){s->dp[i], s->dg[i], s->db[i], n, i % 2};
    }
    s->d_tab = tg_up(tab, s->np, sizeof tab[0]);
    tg_ready();
}

static void set_free(sgd_set *s)
{
    for (int i = 0; i < NT; i++) {
        free(s->p[i]), free(s->g[i]);
        tg_free(s->dp[i]), tg_free(s->dg[i]), tg_free(s->db[i]);
    }
    tg_free(s->d_tab);
}

static void assert_close_at(const float *got, const float *want, int64_t n, double atol,
                            double rtol, const char *what, int tensor, int step)
{
    int64_t i = tu_first_far(got, want, n, atol, rtol);
    if (i >= 0)
        cr_assert_fail("%s of tensor %d step %d [%lld]: got %.9g want %.9g (diff %.3g)", what,
                       tensor, step, (long long)i, got[i], want[i],
                       fabs((double)got[i] - want[i]));
}

Test(train_sgd_cuda, matches_host_sgd_over_steps)
{
    static const sl_sgd_config cfgs[] = {
        {0.9f, 0, 5e-5f}, {0.9f, 1, 1e-4f}, {0.0f, 0, 0.1f}, {0.875f, 1, 0.0f}, {0.5f, 0, 0.3f},
    };
    static const float lrs[] = {0.1f, 0.05f, 0.2f, 0.01f, 0.3f};
    sl_exec eg;
    tg_open(&eg, NULL);
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        const sl_sgd_config *cfg = &cfgs[k];
        cr_log_info("sgd momentum %g nesterov %d wd %g", (double)cfg->momentum, cfg->nesterov,
                    (double)cfg->weight_decay);
        sgd_set s;
        set_init(&s, 40 + k);
        sl_sgd *o = NULL;
        cr_assert_eq(sl_sgd_create(cfg, s.t, NT, &o), SL_OK, "%s", sl_errmsg());
        int nstate = 0;
        sl_tensor_info *state = sl_sgd_tensors(o, &nstate);
        cr_assert_eq(nstate, s.np + 1);
        uint64_t st = 90 + k;
        for (int step = 0; step < 5; step++) {
            for (int i = 0; i < NT; i++) {
                if (s.param_of[i] < 0)
                    continue;
                /* grads of changing sign and size */
                for (int64_t e = 0; e < sizes[i]; e++)
                    s.g[i][e] = urand(&st, -1, 1) * (step % 2 ? 0.3f : 2.0f);
                cr_assert_eq(cudaMemcpy(s.dg[i], s.g[i], (size_t)sizes[i] * 4,
                                        cudaMemcpyHostToDevice), cudaSuccess);
            }
            tg_ready();
            cr_assert_eq(sl_sgd_step(o, lrs[step]), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(sl_sgd_step_cuda(&eg, s.d_tab, s.np, lrs[step], cfg->momentum,
                                          cfg->weight_decay, cfg->nesterov, step == 0, NULL),
                         SL_OK, "%s", sl_errmsg());
            for (int i = 0; i < NT; i++) {
                int64_t n = sizes[i];
                float *got = malloc((size_t)(n ? n : 1) * sizeof(float));
                cr_assert(got);
                tg_downf(got, s.dp[i], n);
                /* the same float operations in the same order: equal, up
                 * to a host compiler that fuses multiply-adds */
                assert_close_at(got, s.p[i], n, 1e-7, 1e-6, "param", i, step);
                if (s.param_of[i] >= 0) {
                    tg_downf(got, s.db[i], n);
                    const float *buf = state[s.param_of[i]].data;
                    assert_close_at(got, buf, n, 1e-7, 1e-6, "momentum", i, step);
                    /* the grad is left as it is */
                    tg_downf(got, s.dg[i], n);
                    cr_assert(n == 0 || !memcmp(got, s.g[i], (size_t)n * 4), "grad %d changed",
                              i);
                }
                free(got);
            }
        }
        sl_sgd_destroy(o);
        set_free(&s);
    }
    tg_close(&eg);
}

/* test_sgd.c's hand-worked steps: p0 = 1, grads 0.5, -0.2, 0.1, lr 0.5,
 * momentum 0.9, weight decay 0.1 on the decayed tensor only. */
Test(train_sgd_cuda, golden_three_steps)
{
    static const float grads[3] = {0.5f, -0.2f, 0.1f};
    static const float want_w[2][3] = {{0.7f, 0.495f, 0.23575f}, {0.43f, 0.33615f, 0.05410075f}};
    static const float want_bn[2][3] = {{0.75f, 0.625f, 0.4625f}, {0.525f, 0.5125f, 0.31625f}};
    sl_exec eg;
    tg_open(&eg, NULL);
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        float one[5] = {1, 1, 1, 1, 1};
        float *w = tg_upf(one, 5), *bn = tg_upf(one, 3), *gw = tg_newf(5), *gb = tg_newf(3),
              *mw = tg_newf(5), *mb = tg_newf(3);
        sl_sgd_cuda_tensor tab[2] = {{w, gw, mw, 5, 1}, {bn, gb, mb, 3, 0}};
        sl_sgd_cuda_tensor *d_tab = tg_up(tab, 2, sizeof tab[0]);
        for (int s = 0; s < 3; s++) {
            float g[5] = {grads[s], grads[s], grads[s], grads[s], grads[s]};
            cr_assert_eq(cudaMemcpy(gw, g, sizeof g, cudaMemcpyHostToDevice), cudaSuccess);
            cr_assert_eq(cudaMemcpy(gb, g, 3 * 4, cudaMemcpyHostToDevice), cudaSuccess);
            tg_ready();
            cr_assert_eq(sl_sgd_step_cuda(&eg, d_tab, 2, 0.5f, 0.9f, 0.1f, nesterov, s == 0, NULL),
                         SL_OK, "%s", sl_errmsg());
            float hw[5], hb[3];
            tg_downf(hw, w, 5), tg_downf(hb, bn, 3);
            for (int i = 0; i < 5; i++)
                cr_assert_float_eq(hw[i], want_w[nesterov][s], 1e-6,
                                   "nesterov %d step %d weight %.9g want %.9g", nesterov, s,
                                   (double)hw[i], (double)want_w[nesterov][s]);
            for (int i = 0; i < 3; i++)
                cr_assert_float_eq(hb[i], want_bn[nesterov][s], 1e-6,
                                   "nesterov %d step %d bn %.9g want %.9g", nesterov, s,
                                   (double)hb[i], (double)want_bn[nesterov][s]);
        }
        tg_free(w), tg_free(bn), tg_free(gw), tg_free(gb), tg_free(mw), tg_free(mb);
        tg_free(d_tab);
    }
    tg_close(&eg);
}

/* sl_sgd_step_cuda_lr (the learning rate read from device memory: what a
 * captured CUDA graph replays with) gives the bits of sl_sgd_step_cuda, and
 * follows a new value written between two launches of the same call. */
Test(train_sgd_cuda, lr_from_device_equals_value)
{
    static const float lrs[3] = {0.5f, 0.125f, 0.3f};
    sl_exec eg;
    tg_open(&eg, NULL);
    float one[5] = {1, 1, 1, 1, 1}, g[5] = {0.5f, -0.25f, 0.1f, 3, -2};
    float *wa = tg_upf(one, 5), *wb = tg_upf(one, 5), *gr = tg_upf(g, 5), *ma = tg_newf(5),
          *mb = tg_newf(5), *dlr = tg_newf(1);
    sl_sgd_cuda_tensor ta = {wa, gr, ma, 5, 1}, tb = {wb, gr, mb, 5, 1};
    sl_sgd_cuda_tensor *da = tg_up(&ta, 1, sizeof ta), *db = tg_up(&tb, 1, sizeof tb);
    tg_ready();
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(cudaMemcpy(dlr, &lrs[s], sizeof(float), cudaMemcpyHostToDevice),
                     cudaSuccess);
        tg_ready();
        cr_assert_eq(sl_sgd_step_cuda(&eg, da, 1, lrs[s], 0.9f, 0.1f, 0, s == 0, NULL), SL_OK,
                     "%s", sl_errmsg());
        cr_assert_eq(sl_sgd_step_cuda_lr(&eg, db, 1, dlr, 0.9f, 0.1f, 0, s == 0, NULL), SL_OK,
                     "%s", sl_errmsg());
        float ha[5], hb[5];
        tg_downf(ha, wa, 5), tg_downf(hb, wb, 5);
        cr_assert(memcmp(ha, hb, sizeof ha) == 0, "step %d (lr %g): %.9g vs %.9g", s,
                  (double)lrs[s], (double)ha[0], (double)hb[0]);
        tg_downf(ha, ma, 5), tg_downf(hb, mb, 5);
        cr_assert(memcmp(ha, hb, sizeof ha) == 0, "step %d: momentum", s);
    }
    cr_assert_eq(sl_sgd_step_cuda_lr(&eg, db, 1, NULL, 0.9f, 0.1f, 0, 0, NULL), SL_EINVAL);
    void *d[] = {wa, wb, gr, ma, mb, dlr, da, db};
    for (size_t k = 0; k < sizeof d / sizeof d[0]; k++)
        tg_free(d[k]);
    tg_close(&eg);
}

/* ------------------------------------------------------ loss scaling */

/* Two identical model-like sets: A steps with a loss-scale state on grads
 * G, B plainly on G / scale (the host's f32 division, which the kernel's
 * __fdiv_rn must equal). Every param and momentum bit must agree, over
 * steps with momentum, Nesterov and weight decay. */
Test(train_sgd_cuda, amp_unscale_equals_plain_step)
{
    static const sl_sgd_config cfgs[] = {{0.9f, 0, 5e-5f}, {0.9f, 1, 1e-4f}, {0.0f, 0, 0.1f}};
    static const float scales[] = {65536.0f, 3.0f};
    sl_exec eg;
    tg_open(&eg, NULL);
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++)
        for (int z = 0; z < 2; z++) {
            const sl_sgd_config *cfg = &cfgs[k];
            float scale = scales[z];
            cr_log_info("sgd amp scale %g momentum %g nesterov %d wd %g", (double)scale,
                        (double)cfg->momentum, cfg->nesterov, (double)cfg->weight_decay);
            sgd_set a, b;
            set_init(&a, 140 + k), set_init(&b, 140 + k);
            sl_amp_state st0 = {scale, 7, 0, 1};
            sl_amp_state *d_amp = tg_up(&st0, 1, sizeof st0);
            uint64_t rs = 190 + k;
            for (int step = 0; step < 3; step++) {
                for (int i = 0; i < NT; i++) {
                    if (a.param_of[i] < 0)
                        continue;
                    float *gb = falloc(sizes[i]);
                    for (int64_t e = 0; e < sizes[i]; e++) {
                        a.g[i][e] = urand(&rs, -1, 1) * scale;
                        gb[e] = a.g[i][e] / scale;
                    }
                    cr_assert_eq(cudaMemcpy(a.dg[i], a.g[i], (size_t)sizes[i] * 4,
                                            cudaMemcpyHostToDevice), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(b.dg[i], gb, (size_t)sizes[i] * 4,
                                            cudaMemcpyHostToDevice), cudaSuccess);
                    free(gb);
                }
                tg_ready();
                cr_assert_eq(sl_sgd_step_cuda(&eg, a.d_tab, a.np, 0.1f, cfg->momentum,
                                              cfg->weight_decay, cfg->nesterov, step == 0, d_amp),
                             SL_OK, "%s", sl_errmsg());
                cr_assert_eq(sl_sgd_step_cuda(&eg, b.d_tab, b.np, 0.1f, cfg->momentum,
                                              cfg->weight_decay, cfg->nesterov, step == 0, NULL),
                             SL_OK, "%s", sl_errmsg());
                for (int i = 0; i < NT; i++) {
                    int64_t n = sizes[i];
                    float *ga = falloc(n), *gb = falloc(n);
                    tg_downf(ga, a.dp[i], n), tg_downf(gb, b.dp[i], n);
                    assert_same(ga, gb, n, "param (scaled vs plain)");
                    if (a.param_of[i] >= 0) {
                        tg_downf(ga, a.db[i], n), tg_downf(gb, b.db[i], n);
                        assert_same(ga, gb, n, "momentum (scaled vs plain)");
                    }
                    free(ga), free(gb);
                }
            }
            sl_amp_state st;
            tg_down(&st, d_amp, 1, sizeof st);
            cr_assert(!memcmp(&st, &st0, sizeof st), "the step only reads the state");
            tg_free(d_amp);
            set_free(&a), set_free(&b);
        }
    tg_close(&eg);
}

/* found_inf set: the step is a no-op, first step or not, Nesterov or not,
 * with inf / NaN among the grads (as they would be); clearing the flag
 * lets the next step run. */
Test(train_sgd_cuda, amp_found_inf_skips_step)
{
    sl_exec eg;
    tg_open(&eg, NULL);
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        sgd_set s;
        set_init(&s, 300 + nesterov);
        sl_amp_state st0 = {1024.0f, 0, 0, 0};
        sl_amp_state *d_amp = tg_up(&st0, 1, sizeof st0);
        uint64_t rs = 310;
        /* one real step first, so that the momentum buffers hold values */
        for (int i = 0; i < NT; i++) {
            if (s.param_of[i] < 0)
                continue;
            for (int64_t e = 0; e < sizes[i]; e++)
                s.g[i][e] = urand(&rs, -1, 1);
            cr_assert_eq(cudaMemcpy(s.dg[i], s.g[i], (size_t)sizes[i] * 4,
                                    cudaMemcpyHostToDevice), cudaSuccess);
        }
        tg_ready();
        cr_assert_eq(sl_sgd_step_cuda(&eg, s.d_tab, s.np, 0.1f, 0.9f, 1e-4f, nesterov, 1, d_amp),
                     SL_OK, "%s", sl_errmsg());
        float *before[NT], *mom[NT];
        for (int i = 0; i < NT; i++) {
            before[i] = falloc(sizes[i]), mom[i] = falloc(sizes[i]);
            tg_downf(before[i], s.dp[i], sizes[i]);
            if (s.param_of[i] >= 0)
                tg_downf(mom[i], s.db[i], sizes[i]);
            if (s.param_of[i] >= 0 && sizes[i] > 2) { /* inf and NaN among the grads */
                float bad[2] = {INFINITY, NAN};
                cr_assert_eq(cudaMemcpy(s.dg[i] + 1, bad, sizeof bad, cudaMemcpyHostToDevice),
                             cudaSuccess);
            }
        }
        tg_ready();
        cr_assert_eq(sl_amp_check_cuda(&eg, s.dg[7], sizes[7], d_amp), SL_OK, "%s", sl_errmsg());
        for (int first = 0; first < 2; first++)
            cr_assert_eq(sl_sgd_step_cuda(&eg, s.d_tab, s.np, 0.1f, 0.9f, 1e-4f, nesterov, first,
                                          d_amp), SL_OK, "%s", sl_errmsg());
        for (int i = 0; i < NT; i++) {
            int64_t n = sizes[i];
            float *got = falloc(n);
            tg_downf(got, s.dp[i], n);
            cr_assert(n == 0 || !memcmp(got, before[i], (size_t)n * 4),
                      "param %d changed by a skipped step", i);
            if (s.param_of[i] >= 0) {
                tg_downf(got, s.db[i], n);
                cr_assert(n == 0 || !memcmp(got, mom[i], (size_t)n * 4),
                          "momentum %d changed by a skipped step", i);
            }
            free(got);
        }
        /* the update clears the flag; a clean step then moves the params */
        cr_assert_eq(sl_amp_update_cuda(&eg, d_amp, 2.0f, 0.5f, 2000), SL_OK, "%s", sl_errmsg());
        for (int i = 0; i < NT; i++)
            if (s.param_of[i] >= 0)
                cr_assert_eq(cudaMemcpy(s.dg[i], s.g[i], (size_t)sizes[i] * 4,
                                        cudaMemcpyHostToDevice), cudaSuccess);
        tg_ready();
        cr_assert_eq(sl_sgd_step_cuda(&eg, s.d_tab, s.np, 0.1f, 0.9f, 1e-4f, nesterov, 0, d_amp),
                     SL_OK, "%s", sl_errmsg());
        float *got = falloc(sizes[7]);
        tg_downf(got, s.dp[7], sizes[7]);
        cr_assert(memcmp(got, before[7], (size_t)sizes[7] * 4), "the step after ran");
        sl_amp_state st;
        tg_down(&st, d_amp, 1, sizeof st);
        cr_assert(st.found_inf == 0 && st.skipped == 1 && st.scale == 512.0f, "state %d %d %g",
                  st.found_inf, st.skipped, (double)st.scale);
        free(got);
        for (int i = 0; i < NT; i++)
            free(before[i]), free(mom[i]);
        tg_free(d_amp);
        set_free(&s);
    }
    tg_close(&eg);
}

/* Checked before any device work: runs without a GPU. */
Test(train_sgd_cuda, bad_arguments)
{
    sl_exec e;
    memset(&e, 0, sizeof e);
    e.backend = SL_BACKEND_CUDA; /* no context */
    sl_sgd_cuda_tensor *t = (sl_sgd_cuda_tensor *)&e; /* never dereferenced on the host */
    cr_assert_eq(sl_sgd_step_cuda(&e, t, -1, 0.1f, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_sgd_step_cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_sgd_step_cuda(&e, NULL, 3, 0.1f, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 70000, 0.1f, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 3, -0.1f, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "learning rate"), "%s", sl_errmsg());
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 3, NAN, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 3, 0.1f, -0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 3, 0.1f, 0.9f, NAN, 0, 1, NULL), SL_EINVAL);
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 3, 0.1f, 0.0f, 0.0f, 1, 1, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "Nesterov momentum requires a momentum"), "%s", sl_errmsg());
    cr_assert_eq(sl_sgd_step_cuda(&e, t, 3, 0.1f, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_sgd_step_cuda(NULL, NULL, 0, 0.1f, 0.9f, 0.0f, 0, 1, NULL), SL_EINVAL);
}

#endif /* SLUICE_TRAIN_CUDA */

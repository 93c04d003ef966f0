/* tests/train/ops/test_norm.c - batch norm (train/ops/norm_ref.c, train/ops/norm_cpu.c):
 * golden values worked by hand from PyTorch's BatchNorm2d formulas, cpu
 * against ref on awkward shapes, finite-difference gradients, the rows == 1
 * refusal, and accuracy on data far from zero (x = mean + small noise). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

static float urand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_rand(st) >> 11) * (1.0 / 9007199254740992.0));
}

static float *falloc(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert(p, "malloc %lld floats", (long long)n);
    return p;
}

/* Everything one bn call reads and writes, for one backend. */
typedef struct bn_case {
    int64_t rows;
    int c;
    float *x, *gamma, *beta, *rmean, *rvar, *y, *smean, *sinv, *dy, *dx, *dgamma, *dbeta;
} bn_case;

static void bn_case_alloc(bn_case *b, int64_t rows, int c)
{
    memset(b, 0, sizeof *b);
    b->rows = rows;
    b->c = c;
    b->x = falloc(rows * c);
    b->y = falloc(rows * c);
    b->dy = falloc(rows * c);
    b->dx = falloc(rows * c);
    b->gamma = falloc(c);
    b->beta = falloc(c);
    b->rmean = falloc(c);
    b->rvar = falloc(c);
    b->smean = falloc(c);
    b->sinv = falloc(c);
    b->dgamma = falloc(c);
    b->dbeta = falloc(c);
}

static void bn_case_free(bn_case *b)
{
    float *p[] = {b->x, b->gamma, b->beta, b->rmean, b->rvar, b->y, b->smean, b->sinv,
                  b->dy, b->dx, b->dgamma, b->dbeta};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

/* Same inputs in two cases (one per backend). */
static void bn_case_copy_inputs(bn_case *dst, const bn_case *src)
{
    size_t n = (size_t)src->rows * src->c * sizeof(float), c = (size_t)src->c * sizeof(float);
    memcpy(dst->x, src->x, n);
    memcpy(dst->dy, src->dy, n);
    memcpy(dst->gamma, src->gamma, c);
    memcpy(dst->beta, src->beta, c);
    memcpy(dst->rmean, src->rmean, c);
    memcpy(dst->rvar, src->rvar, c);
}

static int bn_train(sl_exec *e, bn_case *b, float momentum, float eps)
{
    return e->ops->bn_fwd_train(e, b->rows, b->c, b->x, b->gamma, b->beta, momentum, eps,
                                b->rmean, b->rvar, b->y, b->smean, b->sinv);
}

static int bn_bwd(sl_exec *e, bn_case *b)
{
    return e->ops->bn_bwd(e, b->rows, b->c, b->x, b->dy, b->gamma, b->smean, b->sinv, b->dx,
                          b->dgamma, b->dbeta);
}

static void exec_pair(sl_exec *er, sl_exec *ec)
{
    cr_assert_eq(sl_exec_init(er, SL_BACKEND_REF, 1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_exec_init(ec, SL_BACKEND_CPU, 1), SL_OK, "%s", sl_errmsg());
}

Test(train_norm, golden_two_training_steps)
{
    /* rows 4, c 2; values from the formulas in norm_ref.c, worked in Python:
     * step 1 ch0 x = 1,2,3,4: mean 2.5, biased var 1.25, unbiased 5/3;
     * ch1 x = 10,10,10,14: mean 11, var 3, unbiased 4. momentum 0.1 from
     * running (0, 1): mean (0.25, 1.1), var (0.9+1/6, 0.9+0.4). */
    static const float x1[] = {1, 10, 2, 10, 3, 10, 4, 14};
    static const float x2[] = {0, 2, 4, -2, 8, 2, 12, -2};
    static const float y1[] = {-2.18327084f, -1.28867465f, -0.39442361f, -1.28867465f,
                               1.39442361f,  -1.28867465f, 3.18327084f,  -0.13397604f};
    static const float y2[] = {-2.18328090f, -0.50000062f, -0.39442697f, -1.49999938f,
                               1.39442697f,  -0.50000062f, 3.18328090f,  -1.49999938f};
    static const float rm1[] = {0.25f, 1.1f}, rv1[] = {1.066666667f, 1.3f};
    static const float rm2[] = {0.825f, 0.99f}, rv2[] = {3.626666667f, 1.703333333f};
    static const float mean1[] = {2.5f, 11.0f}, inv1[] = {0.8944236133f, 0.5773493069f};
    static const float mean2[] = {6.0f, 0.0f}, inv2[] = {0.2236067418f, 0.499999375f};
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK);
        float gamma[] = {2.0f, 0.5f}, beta[] = {0.5f, -1.0f}, rm[] = {0, 0}, rv[] = {1, 1};
        float y[8], sm[2], si[2];
        cr_assert_eq(e.ops->bn_fwd_train(&e, 4, 2, x1, gamma, beta, 0.1f, 1e-5f, rm, rv, y,
                                         sm, si), SL_OK, "%s", sl_errmsg());
        tu_assert_close(y, y1, 8, 1e-6, 1e-6, "y step 1");
        tu_assert_close(sm, mean1, 2, 0, 1e-7, "save_mean step 1");
        tu_assert_close(si, inv1, 2, 0, 1e-6, "save_invstd step 1");
        tu_assert_close(rm, rm1, 2, 1e-7, 1e-6, "running_mean step 1");
        tu_assert_close(rv, rv1, 2, 0, 1e-6, "running_var step 1");
        cr_assert_eq(e.ops->bn_fwd_train(&e, 4, 2, x2, gamma, beta, 0.1f, 1e-5f, rm, rv, y,
                                         sm, si), SL_OK, "%s", sl_errmsg());
        tu_assert_close(y, y2, 8, 1e-6, 1e-6, "y step 2");
        tu_assert_close(sm, mean2, 2, 1e-7, 1e-7, "save_mean step 2");
        tu_assert_close(si, inv2, 2, 0, 1e-6, "save_invstd step 2");
        tu_assert_close(rm, rm2, 2, 1e-7, 1e-6, "running_mean step 2");
        tu_assert_close(rv, rv2, 2, 0, 1e-6, "running_var step 2");
        sl_exec_fini(&e);
    }
}

Test(train_norm, golden_eval_uses_running_stats)
{
    /* y = gamma*(x - rm)/sqrt(rv + eps) + beta with eps 0: exact by hand. */
    static const float x[] = {5, -1.5f, -1, -2};
    static const float want[] = {6, 2, -3, 1};
    float gamma[] = {3, 1}, beta[] = {0, 1}, rm[] = {1, -2}, rv[] = {4, 0.25f}, y[4];
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK);
        cr_assert_eq(e.ops->bn_fwd_eval(&e, 2, 2, x, gamma, beta, rm, rv, 0.0f, y), SL_OK);
        tu_assert_close(y, want, 4, 1e-6, 0, e.ops->name);
        sl_exec_fini(&e);
    }
}

Test(train_norm, one_row_refused_in_training)
{
    float x[3] = {1, 2, 3}, gamma[3] = {1, 1, 1}, beta[3] = {0}, rm[3] = {7, 7, 7};
    float rv[3] = {9, 9, 9}, y[3], sm[3], si[3];
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK);
        for (int64_t rows = 1; rows >= 0; rows--) {
            int rc = sl_bn_fwd_train(&e, rows, 3, x, gamma, beta, 0.1f, 1e-5f, rm, rv, y,
                                         sm, si);
            cr_assert_eq(rc, SL_EINVAL, "%s rows %lld: rc %d", e.ops->name, (long long)rows, rc);
            cr_assert(strstr(sl_errmsg(), "at least 2 values per channel"), "%s", sl_errmsg());
            cr_assert(strstr(sl_errmsg(), e.ops->name), "names the backend: %s", sl_errmsg());
        }
        /* Nothing written: the running statistics are as they were. */
        for (int ch = 0; ch < 3; ch++)
            cr_assert(rm[ch] == 7 && rv[ch] == 9);
        sl_exec_fini(&e);
    }
}

/* Random case: per-channel offsets and scales so channels differ. */
static void bn_case_random(bn_case *b, uint64_t seed)
{
    uint64_t st = seed;
    float off[64], sc[64];
    cr_assert(b->c <= 64);
    for (int ch = 0; ch < b->c; ch++) {
        off[ch] = urand(&st, -3, 3);
        sc[ch] = urand(&st, 0.2f, 4);
        b->gamma[ch] = urand(&st, 0.5f, 2);
        b->beta[ch] = urand(&st, -1, 1);
        b->rmean[ch] = urand(&st, -1, 1);
        b->rvar[ch] = urand(&st, 0.5f, 2);
    }
    for (int64_t r = 0; r < b->rows; r++)
        for (int ch = 0; ch < b->c; ch++) {
            b->x[r * b->c + ch] = off[ch] + sc[ch] * urand(&st, -1, 1);
            b->dy[r * b->c + ch] = urand(&st, -1, 1);
        }
}

Test(train_norm, cpu_matches_ref_awkward_shapes)
{
    static const int64_t rows[] = {2, 7, 1000, 100003};
    /* 8, 16, 32 (after the first four, which keep their seeds): the narrow
     * layers' counts, which the kernels take as constants and the
     * element-wise passes as wide rows (norm_kern_cpu.h), 7 and 100003 rows
     * leaving a remainder to the narrow path. Not on 2 rows: two rows
     * normalize to -1, +1 whatever x, so dx there is all cancellation
     * (c 32's dx[6] is 0.0144 +- 3.5e-6 on the old kernels alike). */
    static const int cs[] = {3, 5, 17, 64, 8, 16, 32};
    sl_exec er, ec;
    exec_pair(&er, &ec);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
            if (rows[i] * cs[j] > 2000000 || (j >= 4 && rows[i] == 2))
                continue;
            bn_case r, c;
            bn_case_alloc(&r, rows[i], cs[j]);
            bn_case_alloc(&c, rows[i], cs[j]);
            bn_case_random(&r, 17 + i * 31 + j);
            bn_case_copy_inputs(&c, &r);
            int64_t n = rows[i] * cs[j];
            cr_assert_eq(bn_train(&er, &r, 0.1f, 1e-5f), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(bn_train(&ec, &c, 0.1f, 1e-5f), SL_OK, "%s", sl_errmsg());
            cr_log_info("bn rows %lld c %d", (long long)rows[i], cs[j]);
            tu_assert_close(c.y, r.y, n, 2e-6, 2e-6, "y");
            tu_assert_close(c.smean, r.smean, cs[j], 1e-7, 1e-6, "save_mean");
            tu_assert_close(c.sinv, r.sinv, cs[j], 0, 1e-6, "save_invstd");
            tu_assert_close(c.rmean, r.rmean, cs[j], 1e-7, 1e-6, "running_mean");
            tu_assert_close(c.rvar, r.rvar, cs[j], 0, 1e-6, "running_var");
            cr_assert_eq(bn_bwd(&er, &r), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(bn_bwd(&ec, &c), SL_OK, "%s", sl_errmsg());
            tu_assert_close(c.dx, r.dx, n, 1e-6, 1e-4, "dx");
            /* Sums of rows terms of size ~1: the error scales with sqrt(rows). */
            double atol = 2e-6 * sqrt((double)rows[i]);
            tu_assert_close(c.dgamma, r.dgamma, cs[j], atol, 1e-5, "dgamma");
            tu_assert_close(c.dbeta, r.dbeta, cs[j], atol, 1e-5, "dbeta");
            cr_assert_eq(er.ops->bn_fwd_eval(&er, r.rows, r.c, r.x, r.gamma, r.beta, r.rmean,
                                             r.rvar, 1e-5f, r.y), SL_OK);
            cr_assert_eq(ec.ops->bn_fwd_eval(&ec, c.rows, c.c, c.x, c.gamma, c.beta, r.rmean,
                                             r.rvar, 1e-5f, c.y), SL_OK);
            tu_assert_close(c.y, r.y, n, 2e-6, 2e-6, "eval y");
            bn_case_free(&r);
            bn_case_free(&c);
        }
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

/* L = sum w*y over the training-mode output, in double. */
static double bn_loss(sl_exec *e, bn_case *b, const float *w)
{
    cr_assert_eq(bn_train(e, b, 0.1f, 1e-5f), SL_OK, "%s", sl_errmsg());
    double l = 0;
    for (int64_t i = 0; i < b->rows * b->c; i++)
        l += (double)w[i] * b->y[i];
    return l;
}

static void fd_check(double num, float ana, const char *what, int64_t i)
{
    cr_assert(fabs(num - ana) <= 1e-3 + 1e-2 * fabs(num),
              "%s[%lld]: finite difference %.6g, backward %.6g", what, (long long)i, num, ana);
}

Test(train_norm, backward_matches_finite_differences)
{
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        cr_assert_eq(sl_exec_init(&e, backs[k], 1), SL_OK);
        bn_case b;
        bn_case_alloc(&b, 7, 3);
        bn_case_random(&b, 99 + k);
        int64_t n = b.rows * b.c;
        float *w = falloc(n);
        memcpy(w, b.dy, (size_t)n * sizeof(float));
        /* dL/dy = w: the analytic gradients. */
        bn_loss(&e, &b, w);
        cr_assert_eq(bn_bwd(&e, &b), SL_OK, "%s", sl_errmsg());
        const float h = 4e-3f;
        for (int64_t i = 0; i < n; i++) {
            float keep = b.x[i];
            b.x[i] = keep + h;
            double lp = bn_loss(&e, &b, w);
            b.x[i] = keep - h;
            double lm = bn_loss(&e, &b, w);
            b.x[i] = keep;
            fd_check((lp - lm) / (2.0 * h), b.dx[i], "dx", i);
        }
        float *params[] = {b.gamma, b.beta}, *grads[] = {b.dgamma, b.dbeta};
        for (int p = 0; p < 2; p++)
            for (int ch = 0; ch < b.c; ch++) {
                float keep = params[p][ch];
                params[p][ch] = keep + h;
                double lp = bn_loss(&e, &b, w);
                params[p][ch] = keep - h;
                double lm = bn_loss(&e, &b, w);
                params[p][ch] = keep;
                fd_check((lp - lm) / (2.0 * h), grads[p][ch], p ? "dbeta" : "dgamma", ch);
            }
        free(w);
        bn_case_free(&b);
        sl_exec_fini(&e);
    }
}

/* x = offset + small noise: a one-pass sum of squares (or a mean kept in a
 * single float) loses the noise; cpu must still match ref closely. */
Test(train_norm, large_offset_accuracy)
{
    static const float offs[] = {1000.0f, -500.0f, 3000.0f, 1000.0f, 0.5f};
    static const float noise[] = {0.1f, 0.1f, 0.5f, 0.02f, 1.0f};
    static const int64_t rows[] = {100000, (1 << 20) + 7};
    sl_exec er, ec;
    exec_pair(&er, &ec);
    for (int t = 0; t < 2; t++) {
        int c = t == 0 ? 5 : 3;
        bn_case r, cc;
        bn_case_alloc(&r, rows[t], c);
        bn_case_alloc(&cc, rows[t], c);
        uint64_t st = 5 + t;
        for (int ch = 0; ch < c; ch++) {
            r.gamma[ch] = 1;
            r.beta[ch] = 0;
            r.rmean[ch] = 0;
            r.rvar[ch] = 1;
        }
        for (int64_t i = 0; i < rows[t]; i++)
            for (int ch = 0; ch < c; ch++) {
                r.x[i * c + ch] = offs[ch] + noise[ch] * urand(&st, -1, 1);
                r.dy[i * c + ch] = urand(&st, -1, 1);
            }
        bn_case_copy_inputs(&cc, &r);
        int64_t n = rows[t] * c;
        cr_assert_eq(bn_train(&er, &r, 0.1f, 1e-5f), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(bn_train(&ec, &cc, 0.1f, 1e-5f), SL_OK, "%s", sl_errmsg());
        /* The oracle itself: the output has mean 0 and variance
         * var/(var + eps), var the variance of x (computed here in double). */
        for (int ch = 0; ch < c; ch++) {
            double mx = 0, vx = 0, my = 0, vy = 0;
            for (int64_t i = 0; i < rows[t]; i++) {
                mx += r.x[i * c + ch];
                my += r.y[i * c + ch];
            }
            mx /= (double)rows[t];
            my /= (double)rows[t];
            for (int64_t i = 0; i < rows[t]; i++) {
                vx += (r.x[i * c + ch] - mx) * (r.x[i * c + ch] - mx);
                vy += (r.y[i * c + ch] - my) * (r.y[i * c + ch] - my);
            }
            vx /= (double)rows[t];
            vy /= (double)rows[t];
            double want = vx / (vx + 1e-5);
            cr_assert(fabs(my) < 1e-5 && fabs(vy - want) < 1e-5 * want,
                      "ref ch %d: mean %g var %.9g want %.9g", ch, my, vy, want);
            cr_assert(fabs(r.smean[ch] - mx) <= 1e-7 * fabs(mx), "ref ch %d mean", ch);
        }
        tu_assert_close(cc.y, r.y, n, 1e-4, 1e-4, "y");
        tu_assert_close(cc.smean, r.smean, c, 0, 1e-7, "save_mean");
        tu_assert_close(cc.sinv, r.sinv, c, 0, 1e-5, "save_invstd");
        tu_assert_close(cc.rvar, r.rvar, c, 0, 1e-5, "running_var");
        cr_assert_eq(bn_bwd(&er, &r), SL_OK);
        cr_assert_eq(bn_bwd(&ec, &cc), SL_OK);
        tu_assert_close(cc.dx, r.dx, n, 1e-4, 1e-3, "dx");
        bn_case_free(&r);
        bn_case_free(&cc);
    }
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

/* The cpu backend on two threads (rows split, the statistics' blocks on
 * both threads and merged in order: norm_cpu.c) gives the bits of one
 * thread, on tensors big enough to be split (rows x c past two of
 * sl_par_for's grains), with a row count that is no multiple of the
 * blocks; the sync-BN pieces (norm_sync_cpu.c) too. */
Test(train_norm, cpu_two_threads_same_bits)
{
    const int64_t shapes[][2] = {{25088 + 37, 8}, {9001, 64}, {70001, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t rows = shapes[i][0];
        int c = (int)shapes[i][1];
        bn_case b1, b2;
        bn_case_alloc(&b1, rows, c);
        bn_case_alloc(&b2, rows, c);
        bn_case_random(&b1, 900 + i);
        bn_case_copy_inputs(&b2, &b1);
        sl_exec e1, e2;
        cr_assert_eq(sl_exec_init(&e1, SL_BACKEND_CPU, 1), SL_OK);
        cr_assert_eq(sl_exec_init(&e2, SL_BACKEND_CPU, 2), SL_OK);
        cr_assert_eq(bn_train(&e1, &b1, 0.1f, 1e-5f), SL_OK);
        cr_assert_eq(bn_train(&e2, &b2, 0.1f, 1e-5f), SL_OK);
        cr_assert_eq(bn_bwd(&e1, &b1), SL_OK);
        cr_assert_eq(bn_bwd(&e2, &b2), SL_OK);
        size_t nb = (size_t)rows * c * sizeof(float), cb = (size_t)c * sizeof(float);
        cr_assert_eq(memcmp(b1.y, b2.y, nb), 0, "y, %lld x %d", (long long)rows, c);
        cr_assert_eq(memcmp(b1.smean, b2.smean, cb), 0);
        cr_assert_eq(memcmp(b1.sinv, b2.sinv, cb), 0);
        cr_assert_eq(memcmp(b1.rmean, b2.rmean, cb), 0);
        cr_assert_eq(memcmp(b1.rvar, b2.rvar, cb), 0);
        cr_assert_eq(memcmp(b1.dx, b2.dx, nb), 0, "dx, %lld x %d", (long long)rows, c);
        cr_assert_eq(memcmp(b1.dgamma, b2.dgamma, cb), 0);
        cr_assert_eq(memcmp(b1.dbeta, b2.dbeta, cb), 0);
        cr_assert_eq(e1.ops->bn_fwd_eval(&e1, rows, c, b1.x, b1.gamma, b1.beta, b1.rmean,
                                         b1.rvar, 1e-5f, b1.y), SL_OK);
        cr_assert_eq(e2.ops->bn_fwd_eval(&e2, rows, c, b2.x, b2.gamma, b2.beta, b2.rmean,
                                         b2.rvar, 1e-5f, b2.y), SL_OK);
        cr_assert_eq(memcmp(b1.y, b2.y, nb), 0, "eval y");
        /* sync-BN: moments, reduce, apply on one replica of a world of 1 */
        float *s1 = falloc(3 * c), *s2 = falloc(3 * c), *m1 = falloc(4 * c), *m2 = falloc(4 * c);
        cr_assert_eq(e1.ops->bn_moments(&e1, rows, c, b1.x, 1, 0, s1), SL_OK);
        cr_assert_eq(e2.ops->bn_moments(&e2, rows, c, b2.x, 1, 0, s2), SL_OK);
        cr_assert_eq(memcmp(s1, s2, 3 * cb), 0, "bn_moments");
        cr_assert_eq(e1.ops->bn_bwd_reduce(&e1, rows, c, b1.x, b1.dy, b1.smean, b1.sinv, m1,
                                           m1 + c), SL_OK);
        cr_assert_eq(e2.ops->bn_bwd_reduce(&e2, rows, c, b2.x, b2.dy, b2.smean, b2.sinv, m2,
                                           m2 + c), SL_OK);
        cr_assert_eq(memcmp(m1, m2, 2 * cb), 0, "bn_bwd_reduce");
        cr_assert_eq(e1.ops->bn_bwd_apply(&e1, rows, c, b1.x, b1.dy, b1.gamma, b1.smean, b1.sinv,
                                          m1, m1 + c, (double)rows, b1.dx), SL_OK);
        cr_assert_eq(e2.ops->bn_bwd_apply(&e2, rows, c, b2.x, b2.dy, b2.gamma, b2.smean, b2.sinv,
                                          m2, m2 + c, (double)rows, b2.dx), SL_OK);
        cr_assert_eq(memcmp(b1.dx, b2.dx, nb), 0, "bn_bwd_apply");
        free(s1), free(s2), free(m1), free(m2);
        sl_exec_fini(&e1);
        sl_exec_fini(&e2);
        bn_case_free(&b1);
        bn_case_free(&b2);
    }
}

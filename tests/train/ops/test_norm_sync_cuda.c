/* tests/train/ops/test_norm_sync_cuda.c - sync-BN's forward statistics on the
 * cuda backend (train/ops/norm_sync_cuda.cu: bn_moments, bn_moments_merge)
 * against the ref backend (norm_sync_ref.c) on awkward shapes, in f32,
 * bf16 and f16 activations (inputs rounded to the type on the host first,
 * so ref sees the very values the GPU does), data far from zero among them;
 * argument errors. Skips without a GPU or in a build without the cuda
 * backend; tests/cuda-emu runs it on the host emulator. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

#ifndef SLUICE_TRAIN_CUDA
Test(train_norm_sync_cuda, built_without_cuda)
{
    cr_skip_test("built without CUDA (the cuda backend needs CUDA and cuDNN)");
}
#else
#include "train/cuda_testutil.h"

/* slots = the cuda bn_moments of x (rows, c) in type t, as replica rank of
 * world (downloaded; the buffer starts poisoned). */
static int cuda_moments(sl_exec *e, const float *x, int64_t rows, int c, int world, int rank,
                        float *slots)
{
    int64_t n = (int64_t)world * SL_BN_MOMENT_FLOATS * c;
    void *dx = tg_upa(x, rows * c, e->act);
    float *ds = tg_newf(n);
    tg_ready();
    int rc = sl_bn_moments_cuda(e, rows, c, dx, world, rank, ds);
    if (rc == SL_OK)
        tg_downf(slots, ds, n);
    tg_free(dx), tg_free(ds);
    return rc;
}

static int cuda_merge(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                      float *mean, float *var)
{
    float *ds = tg_upf(slots, (int64_t)world * SL_BN_MOMENT_FLOATS * c), *dm = tg_newf(c),
          *dv = tg_newf(c);
    tg_ready();
    int rc = sl_bn_moments_merge_cuda(e, rows, c, world, ds, dm, dv);
    if (rc == SL_OK)
        tg_downf(mean, dm, c), tg_downf(var, dv, c);
    tg_free(ds), tg_free(dm), tg_free(dv);
    return rc;
}

Test(train_norm_sync_cuda, moments_match_ref)
{
    static const int64_t rows[] = {0, 1, 3, 1000 + 7, 256 * 7 * 7 + 3};
    static const int cs[] = {1, 3, 33, 64, 513};
    static const sl_dtype types[] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};
    sl_exec eg, er;
    tg_open(&eg, NULL);
    cr_assert_eq(sl_exec_init(&er, SL_BACKEND_REF, 1), SL_OK);
    const int W = 3;
    for (size_t t = 0; t < 3; t++) {
        tg_set_act(&eg, types[t]);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
                int64_t R = rows[i], per = (int64_t)SL_BN_MOMENT_FLOATS * cs[j];
                int c = cs[j], rank = (int)(i + j) % W;
                /* per-channel offsets up to 1000 (f16 holds that), noise ~1 */
                uint64_t st = 17 + 31 * i + j;
                float *x = falloc(R * c), *off = frand(c, 5 + j, -1000, 1000);
                for (int64_t k = 0; k < R * c; k++)
                    x[k] = off[k % c] + urand(&st, -1, 1) * (float)(1 + k % 7);
                tg_round_all(x, R * c, types[t]);
                float *sg = falloc(W * per), *sr = falloc(W * per);
                cr_assert_eq(cuda_moments(&eg, x, R, c, W, rank, sg), SL_OK, "%s", sl_errmsg());
                cr_assert_eq(er.ops->bn_moments(&er, R, c, x, W, rank, sr), SL_OK);
                for (int r = 0; r < W; r++)
                    if (r != rank)
                        assert_same(sg + r * per, sr + r * per, per, "other slots (zero)");
                const float *g = sg + rank * per, *f = sr + rank * per;
                for (int ch = 0; ch < c; ch++) {
                    /* both in double, summed in other orders */
                    double mg = (double)g[ch] + g[c + ch], mr = (double)f[ch] + f[c + ch];
                    double sd = R ? sqrt(f[2 * c + ch] / (double)R) : 0;
                    cr_assert(fabs(mg - mr) <= 1e-12 * (fabs(mr) + sd),
                              "%s rows %lld c %d mean[%d]: %.17g vs ref %.17g",
                              tg_type_name(types[t]), (long long)R, c, ch, mg, mr);
                    cr_assert(fabs(g[2 * c + ch] - f[2 * c + ch]) <=
                                  1e-6 * f[2 * c + ch] + 1e-30,
                              "%s rows %lld c %d m2[%d]: %.9g vs ref %.9g",
                              tg_type_name(types[t]), (long long)R, c, ch, g[2 * c + ch],
                              f[2 * c + ch]);
                }
                /* the merge of every replica's slot (ref's slots, all filled) */
                float *all = falloc(W * per);
                for (int r = 0; r < W; r++) {
                    cr_assert_eq(er.ops->bn_moments(&er, R, c, x, W, r, sr), SL_OK);
                    memcpy(all + r * per, sr + r * per, (size_t)per * sizeof(float));
                }
                float *mg = falloc(c), *vg = falloc(c), *mr = falloc(c), *vr = falloc(c);
                cr_assert_eq(cuda_merge(&eg, R, c, W, all, mg, vg), SL_OK, "%s", sl_errmsg());
                cr_assert_eq(er.ops->bn_moments_merge(&er, R, c, W, all, mr, vr), SL_OK);
                tu_assert_close(mg, mr, c, 0, 1e-7, "merged mean");
                tu_assert_close(vg, vr, c, 0, 1e-7, "merged var");
                free(x), free(off), free(sg), free(sr), free(all);
                free(mg), free(vg), free(mr), free(vr);
            }
    }
    sl_exec_fini(&er);
    tg_close(&eg);
}

Test(train_norm_sync_cuda, moments_bad_arguments)
{
    sl_exec eg;
    tg_open(&eg, &sl_ops_cuda); /* the entry points run the exec's table */
    float *d = tg_newf(64);
    cr_assert_eq(sl_bn_moments(&eg, 2, 3, d, 2, 2, d), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_moments: cuda") && strstr(sl_errmsg(), "replica 2 of 2"),
              "%s", sl_errmsg());
    cr_assert_eq(sl_bn_moments(&eg, -1, 3, d, 1, 0, d), SL_EINVAL);
    cr_assert_eq(sl_bn_moments_merge(&eg, 2, 0, 1, d, d, d), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_bn_moments_merge: cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_bn_moments_merge(&eg, 2, 3, 0, d, d, d), SL_EINVAL);
    tg_free(d);
    tg_close(&eg);
}
#endif /* SLUICE_TRAIN_CUDA */

/*
 * train/ops/norm_sync_cpu.c - synchronized batch norm in pieces, cpu backend:
 * passes over x in memory order (row by row, c contiguous channels per row)
 * whose channel loops gcc -O3 vectorizes, on the exec's threads with the
 * same bits as on one (norm_cpu.c's *_par passes).
 * Same semantics as norm_sync_ref.c (the formulas are in its comment and in
 * ops.h).
 *
 * Layout: x, y, dy, dx (rows, c), rows = this replica's n*h*w; per-channel
 * arrays (c); total = rows of all replicas.
 *
 * Accuracy, as norm_cpu.c (whose passes this file shares): every sum runs
 * in float per channel over blocks of at most 256 rows and folds into
 * double per block, so float rounding never grows past a block (~1e-6
 * relative at any row count). The forward statistics are each replica's
 * (mean, M2) from norm_cpu.c's pass, the mean carried across the all-reduce
 * as a float pair hi + lo and the replicas merged with Chan's formula
 * (bn_moments / bn_moments_merge); the
 * merged mean reaches bn_fwd_apply as one float, so y is off by at most
 * ulp(mean)/2 times gamma*invstd on data far from zero (|mean| >> std).
 * test_norm_sync.c's large_offset_accuracy measures it.
 *
 * Per-channel scratch (a few c-sized arrays) comes from sl_exec_scratch.
 */
#include <math.h>
#include <string.h>

#include "train/ops/cpu_int.h"
#include "train/ops/ops.h"

/* Scratch of nd doubles followed by nf floats per channel (nf counts the
 * threaded passes' partials too, sl_bn_par_floats rounded up to whole c). */
static void *scratch(sl_exec *e, const char *fn, int c, int nd, int64_t nf)
{
    void *s = sl_exec_scratch(e, (size_t)c * ((size_t)nd * sizeof(double) +
                                              (size_t)nf * sizeof(float)));
    if (!s)
        sl_fail(SL_ENOMEM, "%s: scratch for %d channels: %s", fn, c, sl_errmsg());
    return s;
}

int sl_bn_fwd_apply_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, const float *mean, const float *var, double total,
                        float momentum, float eps, float *running_mean, float *running_var,
                        float *y, float *save_mean, float *save_invstd)
{
    const char *fn = "sl_bn_fwd_apply_cpu";
    float *s = scratch(e, fn, c, 0, 3);
    if (!s)
        return SL_ENOMEM;
    float *mu = s, *scale = s + c, *b = s + 2 * c;
    double m = momentum;
    /* Per channel in double; mean / var are read before save_mean /
     * save_invstd are written, so they may be the same arrays. */
    for (int ch = 0; ch < c; ch++) {
        double mc = mean[ch], v = var[ch];
        double invstd = 1.0 / sqrt(v + (double)eps);
        running_mean[ch] = (float)((1.0 - m) * running_mean[ch] + m * mc);
        running_var[ch] = (float)((1.0 - m) * running_var[ch] + m * v * total / (total - 1.0));
        mu[ch] = mean[ch];
        scale[ch] = (float)((double)gamma[ch] * invstd);
        b[ch] = beta[ch];
        save_mean[ch] = mu[ch];
        save_invstd[ch] = (float)invstd;
    }
    sl_bn_affine_par(e, rows, c, x, mu, scale, b, y);
    return SL_OK;
}

int sl_bn_bwd_reduce_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                         const float *save_mean, const float *save_invstd, float *sum_dy,
                         float *sum_dy_xhat)
{
    const char *fn = "sl_bn_bwd_reduce_cpu";
    int64_t np = sl_bn_par_floats(e, rows, c);
    double *sdy = scratch(e, fn, c, 2, 3 + (np + c - 1) / c);
    if (!sdy)
        return SL_ENOMEM;
    double *sdxc = sdy + c;
    float *fdy = (float *)(sdxc + c), *fdxc = fdy + c, *mu = fdxc + c;
    for (int ch = 0; ch < c; ch++)
        mu[ch] = save_mean[ch];
    /* sum dy and sum dy*(x - mean); sum dy*xhat = invstd * the latter */
    sl_bn_bwd_sums_par(e, rows, c, x, dy, mu, sdy, sdxc, fdy, fdxc, np ? mu + c : NULL);
    for (int ch = 0; ch < c; ch++) {
        sum_dy[ch] = (float)sdy[ch];
        sum_dy_xhat[ch] = (float)(sdxc[ch] * (double)save_invstd[ch]);
    }
    return SL_OK;
}

int sl_bn_bwd_apply_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                        const float *gamma, const float *save_mean, const float *save_invstd,
                        const float *sum_dy, const float *sum_dy_xhat, double total, float *dx)
{
    const char *fn = "sl_bn_bwd_apply_cpu";
    float *s = scratch(e, fn, c, 0, 4);
    if (!s)
        return SL_ENOMEM;
    float *mu = s, *a = s + c, *k = s + 2 * c, *b = s + 3 * c;
    /* dx = gamma*invstd/total * (total*dy - sum_dy - xhat*sum_dy_xhat) with
     * xhat = (x - mean)*invstd, expanded to a*dy - k*(x - mean) - b. */
    for (int ch = 0; ch < c; ch++) {
        double is = save_invstd[ch], gi = (double)gamma[ch] * is;
        mu[ch] = save_mean[ch];
        a[ch] = (float)gi;
        k[ch] = (float)(gi * is * (double)sum_dy_xhat[ch] / total);
        b[ch] = (float)(gi * (double)sum_dy[ch] / total);
    }
    sl_bn_dx_par(e, rows, c, x, dy, mu, a, k, b, dx);
    return SL_OK;
}

/* This replica's moments through norm_cpu.c's statistics pass (blocked
 * float partials merged in double: ~1e-7 relative at any row count, one
 * trip over x), put as norm_sync_ref.c puts them. */
int sl_bn_moments_cpu(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                      float *slots)
{
    const char *fn = "sl_bn_moments_cpu";
    int64_t np = sl_bn_par_floats(e, rows, c);
    double *mean = scratch(e, fn, c, 2, 3 + (np + c - 1) / c);
    if (!mean)
        return SL_ENOMEM;
    double *m2 = mean + c;
    float *f = (float *)(m2 + c);
    sl_bn_stats_par(e, rows, c, x, mean, m2, f, f + c, f + 2 * c, np ? f + 3 * c : NULL);
    memset(slots, 0, (size_t)world * SL_BN_MOMENT_FLOATS * (size_t)c * sizeof(float));
    float *mine = slots + (int64_t)rank * SL_BN_MOMENT_FLOATS * c;
    for (int ch = 0; ch < c; ch++) {
        mine[ch] = (float)mean[ch];
        mine[c + ch] = (float)(mean[ch] - (double)mine[ch]);
        mine[2 * c + ch] = (float)m2[ch];
    }
    return SL_OK;
}

/* world x c terms: nothing here for the cpu backend to do faster than the
 * reference's double loop, which is therefore the cpu's too. */
int sl_bn_moments_merge_cpu(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                            float *mean, float *var)
{
    return sl_bn_moments_merge_ref(e, rows, c, world, slots, mean, var);
}

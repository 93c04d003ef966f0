/*
 * train/ops/norm_sync_ref.c - synchronized batch norm in pieces, reference
 * backend: plain loops, one channel at a time, double accumulators. The
 * oracle for norm_sync_cpu.c.
 *
 * Layout: x, y, dy, dx are (rows, c), rows = n*h*w of THIS replica (NHWC
 * flattened); every per-channel array is (c). total is the rows of all
 * replicas together.
 *
 * The pieces (ops.h gives the contract) split norm_ref.c's
 * bn_fwd_train / bn_bwd where they need a sum over the whole batch, so the
 * model can all-reduce those sums between them (PyTorch's SyncBatchNorm,
 * torch/nn/modules/_functions.py, does the same with batch_norm_stats /
 * batch_norm_gather_stats / batch_norm_backward_reduce / _elemt):
 *   forward:   bn_moments (this replica's mean and M2 in its slot)
 *                                                  -> all-reduce (world*3c floats)
 *              bn_moments_merge -> mean, var (every replica the same bits)
 *              y      = gamma*(x - mean)*invstd + beta, invstd = 1/sqrt(var + eps)
 *   backward:  sum_dy = sum dy, sum_dy_xhat = sum dy*xhat
 *                                                  -> all-reduce (2c floats)
 *              dx = gamma*invstd/total * (total*dy - sum_dy - xhat*sum_dy_xhat)
 * With one replica (rows == total) the pieces compute what bn_fwd_train /
 * bn_bwd do (tests/train/ops/test_norm_sync.c checks that and the W-replica
 * composition).
 *
 * The statistics: each replica's mean and M2 in double, combined with Chan
 * et al.'s pairwise formula, as PyTorch's SyncBatchNorm combines (count,
 * mean, invstd):
 *   n = n_a + n_b, d = mean_b - mean_a,
 *   mean = mean_a + d*n_b/n, M2 = M2_a + M2_b + d^2*n_a*n_b/n.
 * Float sums of x and of (x - mean)^2 all-reduced (what the model did
 * before) lose digits where a channel's rows are many (50,000 a replica at
 * 224 px) and the values far from their mean's scale; the merge has no
 * difference of large sums in it.
 */
#include <math.h>

#include "train/ops/ops.h"

int sl_bn_fwd_apply_ref(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, const float *mean, const float *var, double total,
                        float momentum, float eps, float *running_mean, float *running_var,
                        float *y, float *save_mean, float *save_invstd)
{
    (void)e;
    double m = momentum;
    for (int ch = 0; ch < c; ch++) {
        /* read before writing: mean / var may be save_mean / save_invstd */
        double mu = mean[ch], v = var[ch];
        double invstd = 1.0 / sqrt(v + (double)eps);
        double g = gamma[ch], b = beta[ch];
        for (int64_t r = 0; r < rows; r++)
            y[r * c + ch] = (float)(g * (x[r * c + ch] - mu) * invstd + b);
        running_mean[ch] = (float)((1.0 - m) * running_mean[ch] + m * mu);
        running_var[ch] = (float)((1.0 - m) * running_var[ch] + m * v * total / (total - 1.0));
        save_mean[ch] = (float)mu;
        save_invstd[ch] = (float)invstd;
    }
    return SL_OK;
}

int sl_bn_bwd_reduce_ref(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                         const float *save_mean, const float *save_invstd, float *sum_dy,
                         float *sum_dy_xhat)
{
    (void)e;
    for (int ch = 0; ch < c; ch++) {
        double mean = save_mean[ch], invstd = save_invstd[ch], sdy = 0, sdyx = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = dy[r * c + ch];
            sdy += g;
            sdyx += g * (x[r * c + ch] - mean) * invstd;
        }
        sum_dy[ch] = (float)sdy;
        sum_dy_xhat[ch] = (float)sdyx;
    }
    return SL_OK;
}

int sl_bn_bwd_apply_ref(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                        const float *gamma, const float *save_mean, const float *save_invstd,
                        const float *sum_dy, const float *sum_dy_xhat, double total, float *dx)
{
    (void)e;
    for (int ch = 0; ch < c; ch++) {
        double mean = save_mean[ch], invstd = save_invstd[ch];
        double sdy = sum_dy[ch], sdyx = sum_dy_xhat[ch];
        double k = (double)gamma[ch] * invstd / total;
        for (int64_t r = 0; r < rows; r++) {
            double xhat = (x[r * c + ch] - mean) * invstd;
            dx[r * c + ch] = (float)(k * (total * dy[r * c + ch] - sdy - xhat * sdyx));
        }
    }
    return SL_OK;
}

/* ------------------------------------------------------- moments (Chan) */

/* d as the float pair hi + lo (hi = d rounded, lo = the rest rounded):
 * ~48 significant bits through a float all-reduce that adds only zeros. */
static void put_pair(double d, float *hi, float *lo)
{
    *hi = (float)d;
    *lo = (float)(d - (double)*hi);
}

int sl_bn_moments_ref(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                      float *slots)
{
    (void)e;
    for (int64_t i = 0; i < (int64_t)world * SL_BN_MOMENT_FLOATS * c; i++)
        slots[i] = 0;
    float *mine = slots + (int64_t)rank * SL_BN_MOMENT_FLOATS * c;
    for (int ch = 0; ch < c; ch++) {
        double s = 0, q = 0;
        for (int64_t r = 0; r < rows; r++)
            s += x[r * c + ch];
        double mean = rows ? s / (double)rows : 0.0;
        for (int64_t r = 0; r < rows; r++) {
            double d = x[r * c + ch] - mean;
            q += d * d;
        }
        put_pair(mean, &mine[ch], &mine[c + ch]);
        mine[2 * c + ch] = (float)q;
    }
    return SL_OK;
}

int sl_bn_moments_merge_ref(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                            float *mean, float *var)
{
    (void)e;
    for (int ch = 0; ch < c; ch++) {
        double n = 0, mu = 0, m2 = 0, nr = (double)rows;
        for (int r = 0; r < world && rows > 0; r++) {
            const float *s = slots + (int64_t)r * SL_BN_MOMENT_FLOATS * c;
            double mr = (double)s[ch] + (double)s[c + ch], qr = s[2 * c + ch];
            double tot = n + nr, d = mr - mu;
            mu += d * (nr / tot);
            m2 += qr + d * d * (n * nr / tot);
            n = tot;
        }
        mean[ch] = (float)mu;
        var[ch] = n > 0 ? (float)(m2 / n) : 0.0f;
    }
    return SL_OK;
}

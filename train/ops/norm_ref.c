/*
 * train/ops/norm_ref.c - batch normalization, reference backend: plain loops,
 * one channel at a time, double accumulators. The oracle that norm_cpu.c
 * (and the cuda kernels) are tested against.
 *
 * Layout: x, y, dy, dx are (rows, c) with rows = n*h*w (NHWC flattened);
 * gamma, beta, running and saved statistics are (c).
 *
 * Semantics are PyTorch's BatchNorm2d (torch/nn/modules/batchnorm.py and
 * aten/src/ATen/native/Normalization.cpp):
 *   training:  mean = sum x / rows, var = sum (x-mean)^2 / rows (biased),
 *              invstd = 1/sqrt(var + eps), y = gamma*(x-mean)*invstd + beta,
 *              running_mean = (1-m)*running_mean + m*mean,
 *              running_var  = (1-m)*running_var  + m*var*rows/(rows-1)
 *              (unbiased; PyTorch refuses rows == 1 in training, so do we);
 *   eval:      y = gamma*(x-running_mean)/sqrt(running_var+eps) + beta;
 *   backward:  xhat = (x-mean)*invstd,
 *              dx = gamma*invstd/rows * (rows*dy - sum dy - xhat*sum(dy*xhat)),
 *              dgamma = sum(dy*xhat), dbeta = sum(dy)
 *              (Ioffe & Szegedy 2015, section 3, with the sums folded).
 */
#include <math.h>

#include "train/ops/ops.h"

int sl_bn_fwd_train_ref(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, float momentum, float eps, float *running_mean,
                        float *running_var, float *y, float *save_mean, float *save_invstd)
{
    (void)e;
    for (int ch = 0; ch < c; ch++) {
        const float *xc = x + ch;
        double sum = 0;
        for (int64_t r = 0; r < rows; r++)
            sum += xc[r * c];
        double mean = sum / (double)rows;
        /* Two-pass variance: sum of squares minus squared sum cancels. */
        double sq = 0;
        for (int64_t r = 0; r < rows; r++) {
            double d = xc[r * c] - mean;
            sq += d * d;
        }
        double var = sq / (double)rows;
        double invstd = 1.0 / sqrt(var + (double)eps);
        double g = gamma[ch], b = beta[ch];
        for (int64_t r = 0; r < rows; r++)
            y[r * c + ch] = (float)(g * (xc[r * c] - mean) * invstd + b);
        double m = momentum;
        double unbiased = sq / (double)(rows - 1);
        running_mean[ch] = (float)((1.0 - m) * running_mean[ch] + m * mean);
        running_var[ch] = (float)((1.0 - m) * running_var[ch] + m * unbiased);
        save_mean[ch] = (float)mean;
        save_invstd[ch] = (float)invstd;
    }
    return SL_OK;
}

int sl_bn_fwd_eval_ref(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                       const float *beta, const float *running_mean, const float *running_var,
                       float eps, float *y)
{
    (void)e;
    for (int ch = 0; ch < c; ch++) {
        double mean = running_mean[ch];
        double invstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
        double g = gamma[ch], b = beta[ch];
        for (int64_t r = 0; r < rows; r++)
            y[r * c + ch] = (float)(g * (x[r * c + ch] - mean) * invstd + b);
    }
    return SL_OK;
}

int sl_bn_bwd_ref(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                  const float *gamma, const float *save_mean, const float *save_invstd,
                  float *dx, float *dgamma, float *dbeta)
{
    (void)e;
    for (int ch = 0; ch < c; ch++) {
        double mean = save_mean[ch], invstd = save_invstd[ch];
        double sdy = 0, sdyx = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = dy[r * c + ch];
            sdy += g;
            sdyx += g * (x[r * c + ch] - mean) * invstd;
        }
        double k = (double)gamma[ch] * invstd / (double)rows;
        for (int64_t r = 0; r < rows; r++) {
            double xhat = (x[r * c + ch] - mean) * invstd;
            dx[r * c + ch] = (float)(k * ((double)rows * dy[r * c + ch] - sdy - xhat * sdyx));
        }
        dgamma[ch] = (float)sdyx;
        dbeta[ch] = (float)sdy;
    }
    return SL_OK;
}

/*
 * train/ops/linear_ref.c - fully connected layer as plain loops: the oracle.
 *
 * x (n, in), w (out, in) as torch.nn.Linear, b (out), y (n, out):
 *   y = x w^T + b;  dx = dy w;  dw = dy^T x;  db = sum over n of dy.
 * Every output element is one sum accumulated in double and written once.
 *
 * Threading: runs on the calling thread; no scratch memory.
 */
#include <stddef.h>

#include "train/ops/ops.h"

int sl_fc_fwd_ref(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                  const float *b, float *y)
{
    (void)e;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            const float *xr = x + (size_t)i * in, *wr = w + (size_t)o * in;
            double acc = b[o];
            for (int j = 0; j < in; j++)
                acc += (double)xr[j] * wr[j];
            y[(size_t)i * out + o] = (float)acc;
        }
    return SL_OK;
}

int sl_fc_bwd_ref(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                  const float *dy, float *dx, float *dw, float *db)
{
    (void)e;
    if (dx) /* dx[i,j] = sum_o dy[i,o] w[o,j] */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < in; j++) {
                double acc = 0.0;
                for (int o = 0; o < out; o++)
                    acc += (double)dy[(size_t)i * out + o] * w[(size_t)o * in + j];
                dx[(size_t)i * in + j] = (float)acc;
            }
    for (int o = 0; o < out; o++) { /* dw[o,j] = sum_i dy[i,o] x[i,j]; db[o] = sum_i dy[i,o] */
        for (int j = 0; j < in; j++) {
            double acc = 0.0;
            for (int i = 0; i < n; i++)
                acc += (double)dy[(size_t)i * out + o] * x[(size_t)i * in + j];
            dw[(size_t)o * in + j] = (float)acc;
        }
        double acc = 0.0;
        for (int i = 0; i < n; i++)
            acc += dy[(size_t)i * out + o];
        db[o] = (float)acc;
    }
    return SL_OK;
}

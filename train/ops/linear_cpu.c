/*
 * train/ops/linear_cpu.c - fully connected layer on OpenBLAS SGEMM.
 *
 * x (n, in), w (out, in) as torch.nn.Linear, b (out), y (n, out), all
 * row-major, so every product is one cblas_sgemm with the transposes
 * spelled out below; no scratch and no copies.
 *
 * Threading: SGEMM uses OpenBLAS's threads (sl_exec.threads); the bias
 * broadcast and the bias-gradient column sums run on the calling thread
 * (n*out floats, nothing next to the GEMMs).
 */
#include <stddef.h>
#include <string.h>

#include <cblas.h>

#include "train/ops/ops.h"

int sl_fc_fwd_cpu(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                  const float *b, float *y)
{
    (void)e;
    if (n <= 0)
        return SL_OK;
    /* y (n, out) = b broadcast, then y += x (n, in) w^T (in, out). */
    for (int i = 0; i < n; i++)
        memcpy(y + (size_t)i * out, b, (size_t)out * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f,
                y, out);
    return SL_OK;
}

int sl_fc_bwd_cpu(sl_exec *e, int n, int in, int out, const float *x, const float *w,
                  const float *dy, float *dx, float *dw, float *db)
{
    (void)e;
    memset(db, 0, (size_t)out * sizeof *db);
    if (n <= 0) { /* an empty batch contributes no gradient */
        memset(dw, 0, (size_t)out * in * sizeof *dw);
        return SL_OK;
    }
    /* dx (n, in) = dy (n, out) w (out, in) */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                    0.0f, dx, in);
    /* dw (out, in) = dy^T (out, n) x (n, in) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 0.0f,
                dw, in);
    /* db (out) = column sums of dy, row by row so the inner loop is contiguous. */
    for (int i = 0; i < n; i++) {
        const float *dyr = dy + (size_t)i * out;
        for (int o = 0; o < out; o++)
            db[o] += dyr[o];
    }
    return SL_OK;
}

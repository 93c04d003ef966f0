/*
 * train/ops/conv_ref.c - convolution forward and backward as plain loops: the
 * oracle the cpu and cuda backends are tested against.
 *
 * Layouts (ops.h): x (n, h, w, c), weight (k, r, s, c), y (n, p, q, k).
 * Cross-correlation as in PyTorch's Conv2d (no kernel flip):
 *   y[b,oh,ow,o] = sum_{i,j,ci} x[b, oh*stride-pad+i, ow*stride-pad+j, ci] * w[o,i,j,ci]
 * with x read as zero outside the input. Each output element is one sum
 * accumulated in double, written once, so the results do not depend on loop
 * order and are as exact as float32 storage allows. Every pass is written as
 * a gather (one output element, all its terms), never a scatter, so no
 * output needs zeroing first and none is accumulated into.
 *
 * Threading: runs on the calling thread; no scratch memory.
 */
#include <stddef.h>

#include "train/ops/ops.h"

/* Offset of x[b, ih, iw, 0] (caller has checked the bounds). */
static size_t x_at(const sl_conv_shape *sh, int b, int ih, int iw)
{
    return (((size_t)b * sh->h + ih) * sh->w + iw) * sh->c;
}

/* Offset of w[o, i, j, 0]. */
static size_t w_at(const sl_conv_shape *sh, int o, int i, int j)
{
    return (((size_t)o * sh->r + i) * sh->s + j) * sh->c;
}

/* Offset of y[b, oh, ow, 0]. */
static size_t y_at(const sl_conv_shape *sh, int b, int oh, int ow)
{
    return (((size_t)b * sh->p + oh) * sh->q + ow) * sh->k;
}

int sl_conv_fwd_ref(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w,
                    float *y)
{
    (void)e;
    for (int b = 0; b < sh->n; b++)
        for (int oh = 0; oh < sh->p; oh++)
            for (int ow = 0; ow < sh->q; ow++)
                for (int o = 0; o < sh->k; o++) {
                    double acc = 0.0;
                    for (int i = 0; i < sh->r; i++) {
                        int ih = oh * sh->stride - sh->pad + i;
                        if (ih < 0 || ih >= sh->h)
                            continue;
                        for (int j = 0; j < sh->s; j++) {
                            int iw = ow * sh->stride - sh->pad + j;
                            if (iw < 0 || iw >= sh->w)
                                continue;
                            const float *xp = x + x_at(sh, b, ih, iw);
                            const float *wp = w + w_at(sh, o, i, j);
                            for (int ci = 0; ci < sh->c; ci++)
                                acc += (double)xp[ci] * wp[ci];
                        }
                    }
                    y[y_at(sh, b, oh, ow) + o] = (float)acc;
                }
    return SL_OK;
}

/* dx[b,ih,iw,ci] = sum over the (i, j, o) whose output position
 * (oh, ow) = ((ih+pad-i)/stride, (iw+pad-j)/stride) is exact and inside
 * the output, of dy[b,oh,ow,o] * w[o,i,j,ci]: the transpose of the forward
 * sum, gathered per input element. */
int sl_conv_bwd_data_ref(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                         float *dx)
{
    (void)e;
    for (int b = 0; b < sh->n; b++)
        for (int ih = 0; ih < sh->h; ih++)
            for (int iw = 0; iw < sh->w; iw++)
                for (int ci = 0; ci < sh->c; ci++) {
                    double acc = 0.0;
                    for (int i = 0; i < sh->r; i++) {
                        int th = ih + sh->pad - i;
                        if (th < 0 || th % sh->stride)
                            continue;
                        int oh = th / sh->stride;
                        if (oh >= sh->p)
                            continue;
                        for (int j = 0; j < sh->s; j++) {
                            int tw = iw + sh->pad - j;
                            if (tw < 0 || tw % sh->stride)
                                continue;
                            int ow = tw / sh->stride;
                            if (ow >= sh->q)
                                continue;
                            const float *dyp = dy + y_at(sh, b, oh, ow);
                            for (int o = 0; o < sh->k; o++)
                                acc += (double)dyp[o] * w[w_at(sh, o, i, j) + ci];
                        }
                    }
                    dx[x_at(sh, b, ih, iw) + ci] = (float)acc;
                }
    return SL_OK;
}

/* dw[o,i,j,ci] = sum_{b,oh,ow} dy[b,oh,ow,o] * x[b, oh*stride-pad+i, ow*stride-pad+j, ci]. */
int sl_conv_bwd_filter_ref(sl_exec *e, const sl_conv_shape *sh, const float *x,
                           const float *dy, float *dw)
{
    (void)e;
    for (int o = 0; o < sh->k; o++)
        for (int i = 0; i < sh->r; i++)
            for (int j = 0; j < sh->s; j++)
                for (int ci = 0; ci < sh->c; ci++) {
                    double acc = 0.0;
                    for (int b = 0; b < sh->n; b++)
                        for (int oh = 0; oh < sh->p; oh++) {
                            int ih = oh * sh->stride - sh->pad + i;
                            if (ih < 0 || ih >= sh->h)
                                continue;
                            for (int ow = 0; ow < sh->q; ow++) {
                                int iw = ow * sh->stride - sh->pad + j;
                                if (iw < 0 || iw >= sh->w)
                                    continue;
                                acc += (double)dy[y_at(sh, b, oh, ow) + o] *
                                       x[x_at(sh, b, ih, iw) + ci];
                            }
                        }
                    dw[w_at(sh, o, i, j) + ci] = (float)acc;
                }
    return SL_OK;
}

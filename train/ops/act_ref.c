/*
 * train/ops/act_ref.c - the small ops, reference backend: ReLU, add, max pool,
 * global average pool, softmax cross-entropy. Plain loops, double
 * accumulators; the oracle for act_cpu.c and the cuda kernels.
 *
 * Layout: activations NHWC f32 (n, h, w, c), c fastest.
 *
 * Choices shared with act_cpu.c (tests/train/ops/test_act.c pins them):
 *   - relu lets NaN through (x < 0 ? 0 : x), as torch.relu does, so a
 *     diverging run shows NaN in the loss instead of hiding it;
 *   - max pool: only in-bounds taps compete (padding never wins); the
 *     winner is the first maximum in scan order (r, then s); a NaN tap
 *     wins over numbers (PyTorch's CPU max_pool2d does the same);
 *     argmax is the flat NHWC index into x, so x must have fewer than
 *     2^31 elements;
 *   - cross-entropy is PyTorch's CrossEntropyLoss(label_smoothing=s):
 *     target = (1-s)*onehot(label) + s/classes,
 *     loss = mean over rows of -sum_j target_j * log_softmax(logits)_j.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "train/ops/ops.h"

int sl_relu_fwd_ref(sl_exec *e, int64_t n, const float *x, float *y)
{
    (void)e;
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
    return SL_OK;
}

int sl_relu_bwd_ref(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    (void)e;
    for (int64_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    return SL_OK;
}

int sl_add_ref(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    (void)e;
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
    return SL_OK;
}

/* v beats the current best: strictly greater (ties keep the first), or
 * the first NaN. */
static int pool_better(float v, float best)
{
    return v > best || (isnan(v) && !isnan(best));
}

int sl_maxpool_fwd_ref(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                       int32_t *argmax)
{
    (void)e;
    int64_t o = 0;
    for (int n = 0; n < sh->n; n++)
        for (int p = 0; p < sh->p; p++)
            for (int q = 0; q < sh->q; q++)
                for (int ch = 0; ch < sh->c; ch++, o++) {
                    float best = 0;
                    int64_t idx = -1;
                    for (int r = 0; r < sh->r; r++) {
                        int ih = p * sh->stride - sh->pad + r;
                        if (ih < 0 || ih >= sh->h)
                            continue;
                        for (int s = 0; s < sh->r; s++) {
                            int iw = q * sh->stride - sh->pad + s;
                            if (iw < 0 || iw >= sh->w)
                                continue;
                            int64_t i = (((int64_t)n * sh->h + ih) * sh->w + iw) * sh->c + ch;
                            if (idx < 0 || pool_better(x[i], best)) {
                                best = x[i];
                                idx = i;
                            }
                        }
                    }
                    /* sl_pool_shape_init's pad <= r/2 (sl_maxpool_fwd checks
                     * it) leaves every window at least one in-bounds tap:
                     * idx >= 0 here. */
                    y[o] = best;
                    argmax[o] = (int32_t)idx;
                }
    return SL_OK;
}

int sl_maxpool_bwd_ref(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                       const int32_t *argmax, float *dx)
{
    (void)e;
    int64_t nx = (int64_t)sh->n * sh->h * sh->w * sh->c;
    int64_t ny = (int64_t)sh->n * sh->p * sh->q * sh->c;
    memset(dx, 0, (size_t)nx * sizeof(float));
    /* Overlapping windows (stride < r) send several gradients to one x. */
    for (int64_t o = 0; o < ny; o++) {
        int32_t a = argmax[o];
        if (a < 0 || a >= nx)
            return sl_fail(SL_EINVAL, "sl_maxpool_bwd_ref: argmax[%lld] = %d outside x of "
                           "%lld elements", (long long)o, (int)a, (long long)nx);
        dx[a] += dy[o];
    }
    return SL_OK;
}

int sl_gap_fwd_ref(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    (void)e;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            double acc = 0;
            for (int k = 0; k < hw; k++)
                acc += x[((int64_t)i * hw + k) * c + ch];
            y[(int64_t)i * c + ch] = (float)(acc / hw);
        }
    return SL_OK;
}

int sl_gap_bwd_ref(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    (void)e;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < hw; k++)
            for (int ch = 0; ch < c; ch++)
                dx[((int64_t)i * hw + k) * c + ch] = (float)((double)dy[(int64_t)i * c + ch] / hw);
    return SL_OK;
}

int sl_xent_fwd_bwd_ref(sl_exec *e, int n, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float *loss, float *dlogits,
                        int *correct)
{
    (void)e; /* sl_xent_fwd_bwd checked the shape, smoothing and every label */
    double s = smoothing, off = s / classes, total = 0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *l = logits + (int64_t)i * classes;
        float *d = dlogits + (int64_t)i * classes;
        int best = 0;
        for (int j = 1; j < classes; j++)
            if (l[j] > l[best])
                best = j;
        hits += best == labels[i];
        /* log-sum-exp around the row max: exp never overflows. */
        double m = l[best], se = 0;
        for (int j = 0; j < classes; j++)
            se += exp((double)l[j] - m);
        double lse = m + log(se), row = 0;
        for (int j = 0; j < classes; j++) {
            double t = off + (j == labels[i] ? 1.0 - s : 0.0);
            double logp = (double)l[j] - lse;
            row -= t * logp;
            d[j] = (float)((exp(logp) - t) / n);
        }
        total += row;
    }
    *loss = (float)(total / n);
    if (correct)
        *correct = hits;
    return SL_OK;
}

/*
 * train/ops/act_cpu.c - the small ops, cpu backend: ReLU, add, max pool, global
 * average pool, softmax cross-entropy. Same semantics as act_ref.c (its
 * comment lists the choices: NaN through relu, first maximum wins, ...).
 *
 * Layout: activations NHWC (n, h, w, c), c fastest, in the exec's type (f32,
 * or bf16: act_kern_cpu.h's loops for both). Every loop here is
 * memory-bound, so each runs over memory in order with a channel-wide or
 * element-wide inner loop that gcc -O3 vectorizes. ReLU and add split their
 * elements, max pool (both ways) its images, over the exec's threads
 * (sl_par_for, train/ops/cpu_int.h): element-wise work, so the bits do not
 * depend on the split.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "train/ops/cpu_int.h"
#include "train/ops/ops.h"

/* Rows per float partial sum before folding into double (gap). */
#define GAP_ROWS 256

enum { EW_RELU, EW_RELU_BWD, EW_ADD };

/* The loops for f32 and bf16 activations (act_kern_cpu.h). */
#define SL_T float
#define SL_LD(v) (v)
#define SL_ST(f) (f)
#define SL_K(name) name##_f32
#include "train/ops/act_kern_cpu.h"
#undef SL_T
#undef SL_LD
#undef SL_ST
#undef SL_K
#define SL_T uint16_t
#define SL_LD(v) sl_bf16_ld(v)
#define SL_ST(f) sl_bf16_st(f)
#define SL_K(name) name##_bf16
#include "train/ops/act_kern_cpu.h"
#undef SL_T
#undef SL_LD
#undef SL_ST
#undef SL_K

/* An element-wise op's arguments for sl_par_for: range [lo, hi) of each,
 * in the exec's activation type (bf when bf16). */
typedef struct ew_job {
    int op, bf;
    const void *a, *b;
    void *y;
} ew_job;

static void ew_range(void *arg, int64_t lo, int64_t hi)
{
    const ew_job *j = arg;
    if (j->bf) {
        const uint16_t *a = j->a, *b = j->b;
        ew_run_bf16(j->op, hi - lo, a + lo, b ? b + lo : NULL, (uint16_t *)j->y + lo);
    } else {
        const float *a = j->a, *b = j->b;
        ew_run_f32(j->op, hi - lo, a + lo, b ? b + lo : NULL, (float *)j->y + lo);
    }
}

static void ew(const sl_exec *e, int op, int64_t n, const void *a, const void *b, void *y)
{
    ew_job j = {op, e->act == SL_DTYPE_BF16, a, b, y};
    sl_par_for(e, n, SL_PAR_GRAIN_FLOATS, ew_range, &j);
}

int sl_relu_fwd_cpu(sl_exec *e, int64_t n, const float *x, float *y)
{
    ew(e, EW_RELU, n, x, NULL, y);
    return SL_OK;
}

int sl_relu_bwd_cpu(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    ew(e, EW_RELU_BWD, n, y, dy, dx);
    return SL_OK;
}

int sl_add_cpu(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    ew(e, EW_ADD, n, a, b, y);
    return SL_OK;
}

typedef struct pool_job {
    const sl_pool_shape *sh;
    int bf;
    const void *x;
    void *y;
    const int32_t *argmax_in;
    int32_t *argmax;
    int64_t *bad; /* backward: per image, the first output whose argmax is not in
                     its window, or -1 */
} pool_job;

/* Element offset o of an activation of the job's type. */
#define PAT(j, p, o) ((j)->bf ? (void *)((uint16_t *)(p) + (o)) : (void *)((float *)(p) + (o)))
#define PCAT(j, p, o)                                                                        \
    ((j)->bf ? (const void *)((const uint16_t *)(p) + (o)) : (const void *)((const float *)(p) + (o)))

/* Images [n0, n1) of the max pool. */
static void maxpool_images(void *arg, int64_t n0, int64_t n1)
{
    const pool_job *j = arg;
    const sl_pool_shape *sh = j->sh;
    int32_t *argmax = j->argmax;
    int c = sh->c;
    for (int n = (int)n0; n < (int)n1; n++)
        for (int p = 0; p < sh->p; p++) {
            /* In-bounds window rows [r0, r1): padding never competes. */
            int h0 = p * sh->stride - sh->pad;
            int r0 = h0 < 0 ? -h0 : 0, r1 = sh->h - h0 < sh->r ? sh->h - h0 : sh->r;
            for (int q = 0; q < sh->q; q++) {
                int w0 = q * sh->stride - sh->pad;
                int s0 = w0 < 0 ? -w0 : 0, s1 = sh->w - w0 < sh->r ? sh->w - w0 : sh->r;
                /* r0 < r1 and s0 < s1: sl_maxpool_fwd checked pad <= r/2. */
                int64_t o = (((int64_t)n * sh->p + p) * sh->q + q) * c;
                int first = 1;
                for (int r = r0; r < r1; r++)
                    for (int s = s0; s < s1; s++) {
                        int32_t base =
                            (int32_t)((((int64_t)n * sh->h + h0 + r) * sh->w + w0 + s) * c);
                        const void *xp = PCAT(j, j->x, base);
                        void *yp = PAT(j, j->y, o);
                        if (j->bf && first)
                            pool_tap_first_bf16(c, xp, base, yp, argmax + o);
                        else if (j->bf)
                            pool_tap_bf16(c, xp, base, yp, argmax + o);
                        else if (first)
                            pool_tap_first_f32(c, xp, base, yp, argmax + o);
                        else
                            pool_tap_f32(c, xp, base, yp, argmax + o);
                        first = 0;
                    }
            }
        }
}

int sl_maxpool_fwd_cpu(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                       int32_t *argmax)
{
    pool_job j = {.sh = sh, .bf = e->act == SL_DTYPE_BF16, .x = x, .y = y, .argmax = argmax};
    int64_t per = (int64_t)sh->h * sh->w * sh->c, grain = SL_PAR_GRAIN_FLOATS / per;
    sl_par_for(e, sh->n, grain < 1 ? 1 : grain, maxpool_images, &j);
    return SL_OK;
}

/* Windows [lo, hi] of one axis that cover input coordinate i (size k,
 * stride st, padding pad, out windows); lo > hi when none does. */
static void pool_cover(int i, int k, int st, int pad, int out, int *lo, int *hi)
{
    int a = i + pad - k + 1; /* the first window's start must be >= this */
    *lo = a <= 0 ? 0 : (a + st - 1) / st;
    *hi = (i + pad) / st < out - 1 ? (i + pad) / st : out - 1;
}

/* The first output of image n whose argmax is not a pixel of its own
 * window and channel (maxpool_fwd's never is), or -1: the error's detail
 * once the gather below found fewer winners than windows. */
static int64_t pool_bad_argmax(const sl_pool_shape *sh, const int32_t *argmax, int n)
{
    int c = sh->c;
    for (int p = 0; p < sh->p; p++)
        for (int q = 0; q < sh->q; q++) {
            int64_t o = (((int64_t)n * sh->p + p) * sh->q + q) * c;
            int h0 = p * sh->stride - sh->pad, w0 = q * sh->stride - sh->pad;
            for (int ch = 0; ch < c; ch++) {
                int64_t a = argmax[o + ch], pix = a / c, w = pix % sh->w,
                        h = pix / sh->w % sh->h, img = pix / ((int64_t)sh->w * sh->h);
                if (a < 0 || a % c != ch || img != n || h < h0 || h >= h0 + sh->r || w < w0 ||
                    w >= w0 + sh->r)
                    return o + ch;
            }
        }
    return -1;
}

/* Images [n0, n1) of the max pool's backward, as a gather per input
 * pixel (act_kern_cpu.h's pool_gather): each element of dx is written
 * once by one thread, its sum in the order the reference's scatter adds,
 * so the bits are the reference's in f32 on any number of threads. An
 * argmax read only through the windows that cover a pixel would drop its
 * gradient silently if it pointed outside its own window: the winners
 * found must be one per window, else the image is marked bad. */
static void maxpool_bwd_images(void *arg, int64_t n0, int64_t n1)
{
    const pool_job *j = arg;
    const sl_pool_shape *sh = j->sh;
    int c = sh->c;
    int64_t ps = (int64_t)sh->q * c; /* a row of windows */
    float acc[256];
    for (int n = (int)n0; n < (int)n1; n++) {
        int64_t hits = 0;
        for (int h = 0; h < sh->h; h++) {
            int p0, p1;
            pool_cover(h, sh->r, sh->stride, sh->pad, sh->p, &p0, &p1);
            for (int w = 0; w < sh->w; w++) {
                int q0, q1;
                pool_cover(w, sh->r, sh->stride, sh->pad, sh->q, &q0, &q1);
                int64_t xo = (((int64_t)n * sh->h + h) * sh->w + w) * c;
                int64_t wo = (((int64_t)n * sh->p + p0) * sh->q + q0) * c;
                for (int c0 = 0; c0 < c; c0 += 256) { /* acc's channels at a time */
                    int cc = c - c0 < 256 ? c - c0 : 256;
                    const int32_t *aw = j->argmax_in + wo + c0;
                    int32_t base = (int32_t)(xo + c0);
                    if (j->bf)
                        hits += pool_gather_bf16(cc, PCAT(j, j->x, wo + c0), aw, base, p0, p1,
                                                 q0, q1, ps, acc, PAT(j, j->y, xo + c0));
                    else
                        hits += pool_gather_f32(cc, PCAT(j, j->x, wo + c0), aw, base, p0, p1,
                                                q0, q1, ps, acc, PAT(j, j->y, xo + c0));
                }
            }
        }
        j->bad[n] = hits == (int64_t)sh->p * sh->q * c ? -1 : pool_bad_argmax(sh, j->argmax_in, n);
    }
}

int sl_maxpool_bwd_cpu(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                       const int32_t *argmax, float *dx)
{
    int64_t *bad = sl_exec_scratch(e, (size_t)sh->n * sizeof *bad);
    if (!bad)
        return sl_fail(SL_ENOMEM, "sl_maxpool_bwd_cpu: scratch: %s", sl_errmsg());
    /* x: dy (the windows' gradients), y: dx */
    pool_job j = {.sh = sh, .bf = e->act == SL_DTYPE_BF16, .x = dy, .y = dx,
                  .argmax_in = argmax, .bad = bad};
    int64_t per = (int64_t)sh->h * sh->w * sh->c, grain = SL_PAR_GRAIN_FLOATS / per;
    sl_par_for(e, sh->n, grain < 1 ? 1 : grain, maxpool_bwd_images, &j);
    for (int n = 0; n < sh->n; n++) {
        if (bad[n] < 0)
            continue;
        /* Not maxpool_fwd's argmax. In f32 the reference's scatter takes
         * any index into x (its check and message too); in bf16 there is
         * no such scatter to fall back on (each add would round). */
        if (!j.bf)
            return sl_maxpool_bwd_ref(e, sh, dy, argmax, dx);
        return sl_fail(SL_EINVAL, "sl_maxpool_bwd_cpu: argmax[%lld] = %d is not in its "
                       "window (image %d): bf16 takes maxpool_fwd's argmax only",
                       (long long)bad[n], (int)argmax[bad[n]], n);
    }
    return SL_OK;
}

int sl_gap_fwd_cpu(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    char *s = sl_exec_scratch(e, (size_t)c * (sizeof(double) + sizeof(float)));
    if (!s)
        return sl_fail(SL_ENOMEM, "sl_gap_fwd_cpu: scratch for %d channels: %s", c,
                       sl_errmsg());
    double *dacc = (double *)s;
    float *facc = (float *)(dacc + c);
    int bf = e->act == SL_DTYPE_BF16;
    for (int i = 0; i < n; i++) {
        for (int ch = 0; ch < c; ch++)
            dacc[ch] = 0;
        for (int k0 = 0; k0 < hw; k0 += GAP_ROWS) {
            int nb = hw - k0 < GAP_ROWS ? hw - k0 : GAP_ROWS;
            int64_t o = ((int64_t)i * hw + k0) * c;
            if (bf)
                gap_rows_bf16(nb, c, (const uint16_t *)x + o, facc);
            else
                gap_rows_f32(nb, c, x + o, facc);
            for (int ch = 0; ch < c; ch++)
                dacc[ch] += facc[ch];
        }
        for (int ch = 0; ch < c; ch++)
            y[(int64_t)i * c + ch] = (float)(dacc[ch] / hw);
    }
    return SL_OK;
}

int sl_gap_bwd_cpu(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    float fhw = (float)hw;
    size_t esz = e->act == SL_DTYPE_BF16 ? 2 : 4;
    for (int i = 0; i < n; i++) {
        /* One row of dy/hw (the division rounds as the ref's), then copies. */
        char *row = (char *)dx + (size_t)i * (size_t)hw * (size_t)c * esz;
        if (esz == 2)
            for (int ch = 0; ch < c; ch++)
                ((uint16_t *)row)[ch] = sl_bf16_st(dy[(int64_t)i * c + ch] / fhw);
        else
            for (int ch = 0; ch < c; ch++)
                ((float *)row)[ch] = dy[(int64_t)i * c + ch] / fhw;
        for (int k = 1; k < hw; k++)
            memcpy(row + (size_t)k * (size_t)c * esz, row, (size_t)c * esz);
    }
    return SL_OK;
}

int sl_xent_fwd_bwd_cpu(sl_exec *e, int n, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float *loss, float *dlogits,
                        int *correct)
{
    (void)e; /* sl_xent_fwd_bwd checked the shape, smoothing and every label */
    /* Per row, with m the row max and se = sum exp(l - m):
     *   loss_row = log(se) - (1-s)*(l_label - m) - s/classes * sum (l_j - m)
     *   dlogits  = (exp(l - m)/se - s/classes - (1-s)*onehot) / n
     * exp(l - m) is parked in dlogits between the two passes. */
    float s = smoothing, off = s / (float)classes, invn = 1.0f / (float)n;
    double total = 0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *l = logits + (int64_t)i * classes;
        float *d = dlogits + (int64_t)i * classes;
        int best = 0;
        for (int j = 1; j < classes; j++)
            if (l[j] > l[best])
                best = j;
        hits += best == labels[i];
        float m = l[best];
        double se = 0, sl = 0;
        for (int j = 0; j < classes; j++) {
            float z = l[j] - m;
            d[j] = expf(z);
            se += d[j];
            sl += z;
        }
        total += log(se) - (1.0 - s) * ((double)l[labels[i]] - m) - (double)off * sl;
        float inv = (float)(1.0 / se);
        for (int j = 0; j < classes; j++)
            d[j] = (d[j] * inv - off) * invn;
        d[labels[i]] -= (1.0f - s) * invn;
    }
    *loss = (float)(total / n);
    if (correct)
        *correct = hits;
    return SL_OK;
}

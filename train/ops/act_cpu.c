/*
 * train/ops/act_cpu.c - the small ops, cpu backend: ReLU, add, max pool, global
 * average pool, softmax cross-entropy. Same semantics as act_ref.c (its
 * comment lists the choices: NaN through relu, first maximum wins, ...).
 *
 * Layout: activations NHWC f32 (n, h, w, c), c fastest. Every loop here is
 * memory-bound, so each runs over memory in order with a channel-wide or
 * element-wide inner loop that gcc -O3 vectorizes. ReLU and add split their
 * elements, max pool its images, over the exec's threads (sl_par_for,
 * train/ops/cpu_int.h): element-wise work, so the bits do not depend on
 * the split. Where an op allows aliasing (relu, add), the aliased case gets
 * its own in-place loop: with distinct restrict pointers in the other case
 * gcc needs no runtime overlap checks.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "train/ops/cpu_int.h"
#include "train/train_int.h"

/* Rows per float partial sum before folding into double (gap). */
#define GAP_ROWS 256

static void relu_inplace(int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

static void relu_copy(int64_t n, const float *restrict x, float *restrict y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* An element-wise op's arguments for sl_par_for: range [lo, hi) of each. */
typedef struct ew_job {
    int op;
    const float *a, *b;
    float *y;
} ew_job;
enum { EW_RELU, EW_RELU_BWD, EW_ADD };

static void relu_fwd_n(int64_t n, const float *x, float *y)
{
    if (x == y)
        relu_inplace(n, y);
    else
        relu_copy(n, x, y);
}

static void relu_bwd_n(int64_t n, const float *y, const float *dy, float *dx);
static void add_n(int64_t n, const float *a, const float *b, float *y);

static void ew_range(void *arg, int64_t lo, int64_t hi)
{
    const ew_job *j = arg;
    int64_t n = hi - lo;
    switch (j->op) {
    case EW_RELU: relu_fwd_n(n, j->a + lo, j->y + lo); break;
    case EW_RELU_BWD: relu_bwd_n(n, j->a + lo, j->b + lo, j->y + lo); break;
    default: add_n(n, j->a + lo, j->b + lo, j->y + lo); break;
    }
}

static void ew(const sl_exec *e, int op, int64_t n, const float *a, const float *b, float *y)
{
    ew_job j = {op, a, b, y};
    sl_par_for(e, n, SL_PAR_GRAIN_FLOATS, ew_range, &j);
}

int sl_relu_fwd_cpu(sl_exec *e, int64_t n, const float *x, float *y)
{
    ew(e, EW_RELU, n, x, NULL, y);
    return SL_OK;
}

static void relu_bwd_inplace(int64_t n, const float *restrict y, float *restrict g)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

static void relu_bwd_copy(int64_t n, const float *restrict y, const float *restrict dy,
                          float *restrict dx)
{
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i]; /* loaded unconditionally, so the select vectorizes */
        dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
}

static void relu_bwd_n(int64_t n, const float *y, const float *dy, float *dx)
{
    if (dx == dy)
        relu_bwd_inplace(n, y, dx);
    else
        relu_bwd_copy(n, y, dy, dx);
}

int sl_relu_bwd_cpu(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    ew(e, EW_RELU_BWD, n, y, dy, dx);
    return SL_OK;
}

static void add_inplace(int64_t n, float *restrict y, const float *restrict b)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += b[i];
}

static void add_self(int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += y[i];
}

static void add_copy(int64_t n, const float *restrict a, const float *restrict b,
                     float *restrict y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

static void add_n(int64_t n, const float *a, const float *b, float *y)
{
    if (y == a && y == b)
        add_self(n, y);
    else if (y == a)
        add_inplace(n, y, b);
    else if (y == b)
        add_inplace(n, y, a); /* float addition commutes exactly */
    else
        add_copy(n, a, b, y);
}

int sl_add_cpu(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    ew(e, EW_ADD, n, a, b, y);
    return SL_OK;
}

/* First in-bounds tap of a window: y, argmax (c) = x (c) at flat index base. */
static void pool_tap_first(int c, const float *restrict xp, int32_t base, float *restrict yp,
                           int32_t *restrict ap)
{
    for (int ch = 0; ch < c; ch++) {
        yp[ch] = xp[ch];
        ap[ch] = base + ch;
    }
}

/* Later taps win when strictly greater (ties keep the first) or the first
 * NaN; written as selects so the channel loop vectorizes. */
static void pool_tap(int c, const float *restrict xp, int32_t base, float *restrict yp,
                     int32_t *restrict ap)
{
    for (int ch = 0; ch < c; ch++) {
        float v = xp[ch], b = yp[ch];
        int win = (v > b) | ((v != v) & (b == b));
        yp[ch] = win ? v : b;
        ap[ch] = win ? base + ch : ap[ch];
    }
}

typedef struct pool_job {
    const sl_pool_shape *sh;
    const float *x;
    float *y;
    int32_t *argmax;
} pool_job;

/* Images [n0, n1) of the max pool. */
static void maxpool_images(void *arg, int64_t n0, int64_t n1)
{
    const pool_job *j = arg;
    const sl_pool_shape *sh = j->sh;
    const float *x = j->x;
    float *y = j->y;
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
                        if (first)
                            pool_tap_first(c, x + base, base, y + o, argmax + o);
                        else
                            pool_tap(c, x + base, base, y + o, argmax + o);
                        first = 0;
                    }
            }
        }
}

int sl_maxpool_fwd_cpu(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                       int32_t *argmax)
{
    pool_job j = {sh, x, y, argmax};
    int64_t per = (int64_t)sh->h * sh->w * sh->c, grain = SL_PAR_GRAIN_FLOATS / per;
    sl_par_for(e, sh->n, grain < 1 ? 1 : grain, maxpool_images, &j);
    return SL_OK;
}

/* The scatter of dy through argmax has nothing for the cpu backend to do
 * faster than the reference's loop (one add per output, in the same order,
 * so the sums match bit for bit): the reference's is the cpu's too, argmax
 * check included. */
int sl_maxpool_bwd_cpu(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                       const int32_t *argmax, float *dx)
{
    return sl_maxpool_bwd_ref(e, sh, dy, argmax, dx);
}

/* acc (c) += sum of rows x (rows, c) in float. */
static void gap_rows(int64_t rows, int c, const float *restrict x, float *restrict acc)
{
    for (int ch = 0; ch < c; ch++)
        acc[ch] = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++)
            acc[ch] += x[r * c + ch];
}

int sl_gap_fwd_cpu(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    char *s = sl_exec_scratch(e, (size_t)c * (sizeof(double) + sizeof(float)));
    if (!s)
        return sl_fail(SL_ENOMEM, "sl_gap_fwd_cpu: scratch for %d channels: %s", c,
                       sl_errmsg());
    double *dacc = (double *)s;
    float *facc = (float *)(dacc + c);
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * hw * c;
        for (int ch = 0; ch < c; ch++)
            dacc[ch] = 0;
        for (int k0 = 0; k0 < hw; k0 += GAP_ROWS) {
            int nb = hw - k0 < GAP_ROWS ? hw - k0 : GAP_ROWS;
            gap_rows(nb, c, xi + (int64_t)k0 * c, facc);
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
    (void)e;
    float fhw = (float)hw;
    for (int i = 0; i < n; i++) {
        /* One row of dy/hw (the division rounds as the ref's), then copies. */
        float *row = dx + (int64_t)i * hw * c;
        for (int ch = 0; ch < c; ch++)
            row[ch] = dy[(int64_t)i * c + ch] / fhw;
        for (int k = 1; k < hw; k++)
            memcpy(row + (int64_t)k * c, row, (size_t)c * sizeof(float));
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

// train/act_cuda.cu - the small ops, cuda backend: ReLU, add, max pool,
// global average pool, softmax cross-entropy with label smoothing
// (train_int.h gives the contract; act_ref.c is the oracle and
// tests/train/test_ops_cuda.c holds these kernels to it).
//
// Layout: activations NHWC f32 (n, h, w, c), c fastest; device pointers.
//
// DESIGN
//   Elementwise ops are grid-stride loops (at most 8192 blocks of 256; the
//   loop covers the rest), 64-bit indices.
//   Max pool forward: one thread per output (n, p, q, c), consecutive threads
//   on consecutive channels (coalesced); taps scanned r then s with ref's
//   rule (strictly greater wins, a first NaN wins over numbers), so y and the
//   int32 argmax equal ref's exactly.
//   Max pool backward is a gather, not a scatter: one thread per x element
//   walks the outputs whose windows hold it (p ascending, then q) and adds
//   dy[o] where argmax[o] is this element. No atomics, no zeroing pass, and
//   the additions happen in ref's order (ref scatters in increasing o), so dx
//   equals ref's bit for bit. The contract this relies on: argmax comes from
//   maxpool_fwd of the same shape (an index outside its own window would not
//   be seen; ref would scatter it anywhere in x).
//   Global average pool: one thread per (n, c) output summing hw values in
//   double (coalesced over c), as ref.
//   Cross-entropy: one block per row (argmax, log-sum-exp, then loss terms
//   and dlogits, in double as ref), then one block adds the rows' losses and
//   hits in a fixed order. The labels are checked on the device first: a
//   label outside [0, classes) makes the row kernel write nothing and comes
//   back as SL_EINVAL naming the first such row. The result (loss, count,
//   first bad row and its label) is copied to ctx->h_pinned and the stream
//   synchronized: xent is the one op here that returns host values.
//   Argmax ties go to the lowest index, as ref's first-maximum scan; rows
//   holding NaN may pick a different index than ref's scan (the loss is NaN
//   then anyway).
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "train/cuda_int.h"

enum { ACT_THREADS = 256, ACT_MAX_BLOCKS = 8192, XENT_THREADS = 256 };

static unsigned act_blocks(int64_t n)
{
    int64_t b = (n + ACT_THREADS - 1) / ACT_THREADS;
    return (unsigned)(b < 1 ? 1 : b > ACT_MAX_BLOCKS ? (int64_t)ACT_MAX_BLOCKS : b);
}

// The exec's context, its device made current (the runtime's current
// device is per host thread; cuda_ctx.cu's DESIGN).
static int act_ctx(const char *fn, sl_exec *e, sl_cuda_ctx **out)
{
    *out = e ? sl_cuda_of(e) : NULL;
    if (!*out)
        return sl_fail(SL_EINVAL, "%s: the exec has no cuda context", fn);
    int rc = SL_CUDA(cudaSetDevice((*out)->device));
    return rc ? sl_fail(rc, "%s: %s", fn, sl_errmsg()) : SL_OK;
}

// SL_LAUNCHED (the kernel's name, file and line) wrapped with the op's name.
static int act_launched(const char *fn, int rc)
{
    return rc ? sl_fail(rc, "%s: %s", fn, sl_errmsg()) : SL_OK;
}
#define ACT_LAUNCHED(fn, kernel) act_launched((fn), SL_LAUNCHED(kernel))

#define GRID_STRIDE(i, n)                                                                     \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
         i += (int64_t)gridDim.x * blockDim.x)

// ------------------------------------------------------------- elementwise

// y = max(x, 0), NaN passing (x < 0 ? 0 : x, as torch.relu and ref).
__global__ void relu_fwd_kernel(int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

// dx = dy where y > 0 else 0.
__global__ void relu_bwd_kernel(int64_t n, const float *y, const float *dy, float *dx)
{
    GRID_STRIDE(i, n)
    {
        float g = dy[i];
        dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
}

__global__ void add_kernel(int64_t n, const float *a, const float *b, float *y)
{
    GRID_STRIDE(i, n)
    {
        y[i] = a[i] + b[i];
    }
}

static int elementwise_check(const char *fn, sl_exec *e, int64_t n, sl_cuda_ctx **cx)
{
    if (n < 0)
        return sl_fail(SL_EINVAL, "%s: %lld elements", fn, (long long)n);
    return act_ctx(fn, e, cx);
}

extern "C" int sl_relu_fwd_cuda(sl_exec *e, int64_t n, const float *x, float *y)
{
    const char *fn = "sl_relu_fwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc = elementwise_check(fn, e, n, &cx);
    if (rc || n == 0)
        return rc;
    relu_fwd_kernel<<<act_blocks(n), ACT_THREADS, 0, cx->stream>>>(n, x, y);
    return ACT_LAUNCHED(fn, "relu_fwd_kernel");
}

extern "C" int sl_relu_bwd_cuda(sl_exec *e, int64_t n, const float *y, const float *dy,
                                float *dx)
{
    const char *fn = "sl_relu_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc = elementwise_check(fn, e, n, &cx);
    if (rc || n == 0)
        return rc;
    relu_bwd_kernel<<<act_blocks(n), ACT_THREADS, 0, cx->stream>>>(n, y, dy, dx);
    return ACT_LAUNCHED(fn, "relu_bwd_kernel");
}

extern "C" int sl_add_cuda(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    const char *fn = "sl_add_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc = elementwise_check(fn, e, n, &cx);
    if (rc || n == 0)
        return rc;
    add_kernel<<<act_blocks(n), ACT_THREADS, 0, cx->stream>>>(n, a, b, y);
    return ACT_LAUNCHED(fn, "add_kernel");
}

// ---------------------------------------------------------------- max pool

// v beats the current best: strictly greater (ties keep the first), or the
// first NaN (act_ref.c's pool_better).
__device__ __forceinline__ bool pool_better(float v, float best)
{
    return v > best || (isnan(v) && !isnan(best));
}

// x (n, h, w, c) -> y (n, p, q, c), argmax the flat index into x (< 2^31,
// checked on the host). One thread per output.
__global__ void maxpool_fwd_kernel(sl_pool_shape sh, const float *__restrict__ x,
                                   float *__restrict__ y, int32_t *__restrict__ argmax)
{
    int64_t ny = (int64_t)sh.n * sh.p * sh.q * sh.c;
    GRID_STRIDE(o, ny)
    {
        int ch = (int)(o % sh.c);
        int64_t t = o / sh.c;
        int q = (int)(t % sh.q);
        t /= sh.q;
        int p = (int)(t % sh.p);
        int n = (int)(t / sh.p);
        float best = 0.0f;
        int64_t idx = -1;
        for (int r = 0; r < sh.r; r++) {
            int ih = p * sh.stride - sh.pad + r;
            if (ih < 0 || ih >= sh.h)
                continue;
            for (int s = 0; s < sh.r; s++) {
                int iw = q * sh.stride - sh.pad + s;
                if (iw < 0 || iw >= sh.w)
                    continue;
                int64_t i = (((int64_t)n * sh.h + ih) * sh.w + iw) * sh.c + ch;
                float v = x[i];
                if (idx < 0 || pool_better(v, best)) {
                    best = v;
                    idx = i;
                }
            }
        }
        // The host checked that every window has an in-bounds tap.
        y[o] = best;
        argmax[o] = (int32_t)idx;
    }
}

// dx[i] = sum of dy[o] over the outputs o whose window holds i and whose
// argmax is i, added in increasing o (ref's scatter order).
__global__ void maxpool_bwd_kernel(sl_pool_shape sh, const float *__restrict__ dy,
                                   const int32_t *__restrict__ argmax, float *__restrict__ dx)
{
    int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c;
    GRID_STRIDE(i, nx)
    {
        int ch = (int)(i % sh.c);
        int64_t t = i / sh.c;
        int iw = (int)(t % sh.w);
        t /= sh.w;
        int ih = (int)(t % sh.h);
        int n = (int)(t / sh.h);
        // Outputs p with p*stride - pad <= ih <= p*stride - pad + r - 1.
        int hi_p = (ih + sh.pad) / sh.stride;
        int lo_num = ih + sh.pad - sh.r + 1;
        int lo_p = lo_num <= 0 ? 0 : (lo_num + sh.stride - 1) / sh.stride;
        int hi_q = (iw + sh.pad) / sh.stride;
        int lo_numq = iw + sh.pad - sh.r + 1;
        int lo_q = lo_numq <= 0 ? 0 : (lo_numq + sh.stride - 1) / sh.stride;
        if (hi_p > sh.p - 1)
            hi_p = sh.p - 1;
        if (hi_q > sh.q - 1)
            hi_q = sh.q - 1;
        float acc = 0.0f;
        for (int p = lo_p; p <= hi_p; p++)
            for (int q = lo_q; q <= hi_q; q++) {
                int64_t o = (((int64_t)n * sh.p + p) * sh.q + q) * sh.c + ch;
                if (argmax[o] == (int32_t)i)
                    acc += dy[o];
            }
        dx[i] = acc;
    }
}

// The geometry sl_pool_shape_init makes (p, q consistent, pad <= r/2 so
// every window has an in-bounds tap) and x small enough for int32 indices.
static int pool_check(const char *fn, const sl_pool_shape *sh)
{
    if (!sh || sh->n < 1 || sh->h < 1 || sh->w < 1 || sh->c < 1 || sh->r < 1 ||
        sh->stride < 1 || sh->pad < 0 || 2 * sh->pad > sh->r ||
        sh->p != (sh->h + 2 * sh->pad - sh->r) / sh->stride + 1 ||
        sh->q != (sh->w + 2 * sh->pad - sh->r) / sh->stride + 1 || sh->p < 1 || sh->q < 1)
        return sl_fail(SL_EINVAL, "%s: bad pool geometry (use sl_pool_shape_init)", fn);
    int64_t nx = (int64_t)sh->n * sh->h * sh->w * sh->c;
    if (nx > INT32_MAX)
        return sl_fail(SL_EINVAL, "%s: x has %lld elements: the int32 argmax indexes at most "
                       "2^31-1", fn, (long long)nx);
    return SL_OK;
}

extern "C" int sl_maxpool_fwd_cuda(sl_exec *e, const sl_pool_shape *sh, const float *x,
                                   float *y, int32_t *argmax)
{
    const char *fn = "sl_maxpool_fwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = pool_check(fn, sh)) || (rc = act_ctx(fn, e, &cx)))
        return rc;
    int64_t ny = (int64_t)sh->n * sh->p * sh->q * sh->c;
    maxpool_fwd_kernel<<<act_blocks(ny), ACT_THREADS, 0, cx->stream>>>(*sh, x, y, argmax);
    return ACT_LAUNCHED(fn, "maxpool_fwd_kernel");
}

extern "C" int sl_maxpool_bwd_cuda(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                                   const int32_t *argmax, float *dx)
{
    const char *fn = "sl_maxpool_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = pool_check(fn, sh)) || (rc = act_ctx(fn, e, &cx)))
        return rc;
    int64_t nx = (int64_t)sh->n * sh->h * sh->w * sh->c;
    maxpool_bwd_kernel<<<act_blocks(nx), ACT_THREADS, 0, cx->stream>>>(*sh, dy, argmax, dx);
    return ACT_LAUNCHED(fn, "maxpool_bwd_kernel");
}

// ----------------------------------------------------- global average pool

// x (n, hw, c) -> y (n, c): y = sum over hw in double / hw.
__global__ void gap_fwd_kernel(int n, int hw, int c, const float *__restrict__ x,
                               float *__restrict__ y)
{
    int64_t ny = (int64_t)n * c;
    GRID_STRIDE(o, ny)
    {
        int64_t i = o / c, ch = o - i * c;
        const float *xp = x + i * hw * c + ch;
        double acc = 0;
        for (int k = 0; k < hw; k++)
            acc += xp[(int64_t)k * c];
        y[o] = (float)(acc / hw);
    }
}

// dx (n, hw, c) = dy (n, c) / hw, spread over hw.
__global__ void gap_bwd_kernel(int n, int hw, int c, const float *__restrict__ dy,
                               float *__restrict__ dx)
{
    int64_t nx = (int64_t)n * hw * c;
    int64_t plane = (int64_t)hw * c;
    GRID_STRIDE(i, nx)
    {
        int64_t img = i / plane;
        int64_t ch = i % c;
        dx[i] = (float)((double)dy[img * c + ch] / hw);
    }
}

extern "C" int sl_gap_fwd_cuda(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    const char *fn = "sl_gap_fwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if (n < 1 || hw < 1 || c < 1)
        return sl_fail(SL_EINVAL, "%s: shape (%d, %d, %d)", fn, n, hw, c);
    if ((rc = act_ctx(fn, e, &cx)))
        return rc;
    gap_fwd_kernel<<<act_blocks((int64_t)n * c), ACT_THREADS, 0, cx->stream>>>(n, hw, c, x, y);
    return ACT_LAUNCHED(fn, "gap_fwd_kernel");
}

extern "C" int sl_gap_bwd_cuda(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    const char *fn = "sl_gap_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if (n < 1 || hw < 1 || c < 1)
        return sl_fail(SL_EINVAL, "%s: shape (%d, %d, %d)", fn, n, hw, c);
    if ((rc = act_ctx(fn, e, &cx)))
        return rc;
    gap_bwd_kernel<<<act_blocks((int64_t)n * hw * c), ACT_THREADS, 0, cx->stream>>>(n, hw, c,
                                                                                   dy, dx);
    return ACT_LAUNCHED(fn, "gap_bwd_kernel");
}

// ----------------------------------------------------------- cross-entropy

// What comes back to the host (through ctx->h_pinned).
struct xent_result {
    float loss;    // mean over rows
    int correct;   // rows whose argmax is the label
    int bad_row;   // first row with a label outside [0, classes), or >= n
    int bad_label; // its label
};

// Block-wide sum of a double (XENT_THREADS threads, fixed tree order); the
// result is returned to every thread. sh: XENT_THREADS doubles.
__device__ double xent_block_sum(double v, double *sh)
{
    int t = threadIdx.x;
    __syncthreads(); // sh may still be read by a previous call
    sh[t] = v;
    __syncthreads();
    for (int h = XENT_THREADS / 2; h > 0; h >>= 1) {
        if (t < h)
            sh[t] += sh[t + h];
        __syncthreads();
    }
    return sh[0];
}

// bad_row = min row whose label is outside [0, classes) (initialized to a
// large value by a memset).
__global__ void xent_check_kernel(int n, int classes, const int32_t *__restrict__ labels,
                                  int *__restrict__ bad_row)
{
    GRID_STRIDE(i, n)
    {
        int32_t l = labels[i];
        if (l < 0 || l >= classes)
            atomicMin(bad_row, (int)i);
    }
}

// One block per row i of logits (n, classes):
//   best = first argmax; lse = m + log(sum exp(l - m)), m = l[best];
//   t_j = s/classes + (j == label ? 1 - s : 0);
//   row_loss[i] = -sum t_j (l_j - lse); d_j = (exp(l_j - lse) - t_j)/n;
//   row_hit[i] = best == label.
// Writes nothing when any label is bad (bad_row < n).
__global__ void xent_row_kernel(int n, int classes, const float *logits,
                                const int32_t *__restrict__ labels, float smoothing,
                                const int *__restrict__ bad_row, float *dlogits,
                                double *__restrict__ row_loss, int *__restrict__ row_hit)
{
    __shared__ double sh[XENT_THREADS];
    __shared__ float sv[XENT_THREADS];
    __shared__ int sj[XENT_THREADS];
    if (*bad_row < n)
        return; // uniform over the grid
    int i = blockIdx.x, t = threadIdx.x;
    const float *l = logits + (int64_t)i * classes;
    float *d = dlogits + (int64_t)i * classes;
    int label = labels[i];

    // argmax: each thread's first maximum over j = t, t + T, ...; then pairs
    // combined keeping the larger value, the lower index on ties.
    float bv = 0.0f;
    int bj = -1;
    for (int j = t; j < classes; j += XENT_THREADS) {
        float v = l[j];
        if (bj < 0 || v > bv) {
            bv = v;
            bj = j;
        }
    }
    sv[t] = bv;
    sj[t] = bj;
    __syncthreads();
    for (int h = XENT_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
            int oj = sj[t + h];
            float ov = sv[t + h];
            if (oj >= 0 && (sj[t] < 0 || ov > sv[t] || (ov == sv[t] && oj < sj[t]))) {
                sv[t] = ov;
                sj[t] = oj;
            }
        }
        __syncthreads();
    }
    int best = sj[0];
    double m = sv[0];

    double se = 0;
    for (int j = t; j < classes; j += XENT_THREADS)
        se += exp((double)l[j] - m);
    double lse = m + log(xent_block_sum(se, sh));

    double s = smoothing, off = s / classes, row = 0;
    for (int j = t; j < classes; j += XENT_THREADS) {
        double tj = off + (j == label ? 1.0 - s : 0.0);
        double logp = (double)l[j] - lse;
        row -= tj * logp;
        d[j] = (float)((exp(logp) - tj) / n);
    }
    row = xent_block_sum(row, sh);
    if (t == 0) {
        row_loss[i] = row;
        row_hit[i] = best == label;
    }
}

// One block: the mean loss and the hit count in a fixed order, plus the
// first bad label (if any) for the host's message.
__global__ void xent_total_kernel(int n, const double *__restrict__ row_loss,
                                  const int *__restrict__ row_hit,
                                  const int32_t *__restrict__ labels,
                                  const int *__restrict__ bad_row, xent_result *out)
{
    __shared__ double sh[XENT_THREADS];
    int t = threadIdx.x;
    int bad = *bad_row;
    double loss = 0, hits = 0;
    if (bad >= n)
        for (int i = t; i < n; i += XENT_THREADS) {
            loss += row_loss[i];
            hits += row_hit[i];
        }
    loss = xent_block_sum(loss, sh);
    hits = xent_block_sum(hits, sh);
    if (t == 0) {
        out->loss = (float)(loss / n);
        out->correct = (int)hits;
        out->bad_row = bad;
        out->bad_label = bad < n ? (int)labels[bad] : 0;
    }
}

extern "C" int sl_xent_fwd_bwd_cuda(sl_exec *e, int n, int classes, const float *logits,
                                    const int32_t *labels, float smoothing, float *loss,
                                    float *dlogits, int *correct)
{
    const char *fn = "sl_xent_fwd_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if (n < 1 || classes < 1)
        return sl_fail(SL_EINVAL, "%s: %d rows of %d classes", fn, n, classes);
    if (!(smoothing >= 0.0f && smoothing <= 1.0f))
        return sl_fail(SL_EINVAL, "%s: label smoothing %g outside [0, 1]", fn,
                       (double)smoothing);
    if ((rc = act_ctx(fn, e, &cx)))
        return rc;
    if (!cx->h_pinned)
        return sl_fail(SL_EINVAL, "%s: the cuda context has no pinned host buffer", fn);
    // Scratch: row_loss (n doubles), the result, bad_row, row_hit (n ints).
    size_t off_res = (size_t)n * sizeof(double);
    size_t off_bad = off_res + sizeof(xent_result);
    size_t off_hit = off_bad + sizeof(int);
    size_t bytes = off_hit + (size_t)n * sizeof(int);
    char *tmp = (char *)sl_cuda_tmp(cx, bytes);
    if (!tmp)
        return sl_fail(SL_ECUDA, "%s: %zu bytes of scratch for %d rows: %s", fn, bytes, n,
                       sl_errmsg());
    double *row_loss = (double *)tmp;
    xent_result *d_res = (xent_result *)(tmp + off_res);
    int *bad_row = (int *)(tmp + off_bad), *row_hit = (int *)(tmp + off_hit);
    cudaStream_t s = cx->stream;
    // 0x7f7f7f7f: larger than any row.
    if ((rc = SL_CUDA(cudaMemsetAsync(bad_row, 0x7f, sizeof(int), s))))
        return rc; // the message names this function and the call
    xent_check_kernel<<<act_blocks(n), ACT_THREADS, 0, s>>>(n, classes, labels, bad_row);
    if ((rc = ACT_LAUNCHED(fn, "xent_check_kernel")))
        return rc;
    xent_row_kernel<<<(unsigned)n, XENT_THREADS, 0, s>>>(n, classes, logits, labels, smoothing,
                                                         bad_row, dlogits, row_loss, row_hit);
    if ((rc = ACT_LAUNCHED(fn, "xent_row_kernel")))
        return rc;
    xent_total_kernel<<<1, XENT_THREADS, 0, s>>>(n, row_loss, row_hit, labels, bad_row, d_res);
    if ((rc = ACT_LAUNCHED(fn, "xent_total_kernel")))
        return rc;
    static_assert(sizeof(xent_result) <= SL_CUDA_PINNED_BYTES, "pinned buffer too small");
    if ((rc = SL_CUDA(cudaMemcpyAsync(cx->h_pinned, d_res, sizeof(xent_result),
                                      cudaMemcpyDeviceToHost, s))) ||
        (rc = SL_CUDA(cudaStreamSynchronize(s))))
        return sl_fail(rc, "%s (%d rows of %d classes)", sl_errmsg(), n, classes);
    xent_result res;
    memcpy(&res, cx->h_pinned, sizeof res);
    if (res.bad_row < n)
        return sl_fail(SL_EINVAL, "%s: row %d: label %d outside [0, %d)", fn, res.bad_row,
                       res.bad_label, classes);
    *loss = res.loss;
    if (correct)
        *correct = res.correct;
    return SL_OK;
}

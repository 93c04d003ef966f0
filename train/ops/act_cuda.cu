// train/ops/act_cuda.cu - the small ops, cuda backend: ReLU, add, max pool,
// global average pool, softmax cross-entropy with label smoothing
// (ops.h gives the contract; act_ref.c is the oracle and
// tests/train/ops/test_ops_cuda.c holds these kernels to it).
//
// Layout: activations NHWC (n, h, w, c), c fastest; device pointers.
// Element type: relu, add and max pool take every tensor in e->act (the
// argmax stays int32); gap_fwd reads x in e->act and writes f32 y, gap_bwd
// reads f32 dy and writes dx in e->act; xent is f32 throughout
// (ops.h's table). The kernels are templates on the element type T:
// load to f32, compute as before, round to T on the store, so in bf16 / f16
// each op returns ref's f32 result (on the same, already rounded inputs)
// rounded to nearest even - the tests hold them to that bit for bit.
//
// DESIGN
//   Elementwise ops (relu, relu_bwd, add: one act_kernel) are grid-stride
//   loops (at most 8192 blocks of 256; the loop covers the rest), 64-bit
//   indices, over 16-byte vectors (8 bf16 / f16, 4 f32) when every pointer
//   is 16-byte aligned, then a scalar tail: they run at memory bandwidth
//   (issue 14; with the fused BN ops and the backward's accumulating
//   dgrad, the model's training step calls none of them).
//   Max pool forward: one thread per output pixel and V channels (V = the
//   vector width when c is a multiple of it, else 1), consecutive threads
//   on consecutive channels (coalesced); taps scanned r then s with ref's
//   rule (strictly greater wins, a first NaN wins over numbers), so y and the
//   int32 argmax equal ref's exactly.
//   Max pool backward is a gather, not a scatter: one thread per x pixel and V
//   channels walks the outputs whose windows hold it (p ascending, then q)
//   and adds dy[o] where argmax[o] is this element. No atomics, no zeroing pass, and
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
//   sl_xent_acc_cuda (the training step's loss) runs the same row kernel
//   with the loss scale and a finishing kernel that adds the batch's mean
//   loss and count to two device doubles: no copy, no sync. With a bad
//   label it zeroes dlogits and adds NaN to the loss (cuda_int.h).
//   Argmax ties go to the lowest index, as ref's first-maximum scan; rows
//   holding NaN may pick a different index than ref's scan (the loss is NaN
//   then anyway).
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <initializer_list>

#include "train/ops/cuda_int.h"

enum { ACT_THREADS = 256, ACT_MAX_BLOCKS = 8192, XENT_THREADS = 256 };

static unsigned act_blocks(int64_t n)
{
    int64_t b = (n + ACT_THREADS - 1) / ACT_THREADS;
    return (unsigned)(b < 1 ? 1 : b > ACT_MAX_BLOCKS ? (int64_t)ACT_MAX_BLOCKS : b);
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

// The vector part of an n-element pass: when every pointer is 16-byte
// aligned, nv = n / V vectors of V = sl_vw<T>() elements go through
// 16-byte loads and stores, and the last n - nv*V elements (fewer than V)
// are taken one by one; otherwise nv = 0 and every element is.
struct act_split {
    int64_t nv; // vectors
    int V;      // their width (1: no vector part)
};
template <typename T>
static act_split act_split_of(int64_t n, std::initializer_list<const void *> ps)
{
    bool ok = true;
    for (const void *p : ps)
        ok = ok && sl_vec_ok(p);
    act_split s;
    s.V = ok ? sl_vw<T>() : 1;
    s.nv = ok ? n / s.V : 0;
    return s;
}

// OP 0: y = max(a, 0), NaN passing (a < 0 ? 0 : a, as torch.relu and ref:
// exact in every type). OP 1: y = b where a > 0 else 0 (relu_bwd: a the
// forward's output, b the gradient). OP 2: y = a + b, the f32 sum rounded
// to T. Vectors [0, nv) of V elements, then the scalar tail [nv*V, n).
// y may alias a or b (each element is read before it is written).
template <int OP>
__device__ __forceinline__ float act_op(float a, float b)
{
    return OP == 0 ? (a < 0.0f ? 0.0f : a) : OP == 1 ? (a > 0.0f ? b : 0.0f) : a + b;
}
template <int OP, typename T, int V>
__global__ void act_kernel(int64_t n, int64_t nv, const T *a, const T *b, T *y)
{
    GRID_STRIDE(i, nv)
    {
        float av[V], bv[V];
        sl_ldv<T, V>(a + i * V, av);
        if (OP != 0)
            sl_ldv<T, V>(b + i * V, bv);
        #pragma unroll
        for (int v = 0; v < V; v++)
            av[v] = act_op<OP>(av[v], OP != 0 ? bv[v] : 0.0f);
        sl_stv<T, V>(y + i * V, av);
    }
    GRID_STRIDE(j, n - nv * V)
    {
        int64_t i = nv * V + j;
        sl_st(y + i, act_op<OP>(sl_ld(a + i), OP != 0 ? sl_ld(b + i) : 0.0f));
    }
}

// One elementwise op over n elements (n == 0: nothing).
template <int OP>
static int act_run(const char *fn, const char *kernel, sl_exec *e, int64_t n, const float *a,
                   const float *b, float *y)
{
    sl_cuda_ctx *cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &cx);
    if (rc || n == 0)
        return rc;
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        act_split sp = act_split_of<T>(n, {a, b, y});
        int64_t work = sp.nv > n - sp.nv * sp.V ? sp.nv : n - sp.nv * sp.V;
        unsigned g = act_blocks(work);
        if (sp.V > 1)
            act_kernel<OP, T, sl_vw<T>()><<<g, ACT_THREADS, 0, cx->stream>>>(
                n, sp.nv, (const T *)a, (const T *)b, (T *)y);
        else
            act_kernel<OP, T, 1><<<g, ACT_THREADS, 0, cx->stream>>>(n, 0, (const T *)a,
                                                                    (const T *)b, (T *)y);
        return ACT_LAUNCHED(fn, kernel);
    });
}

extern "C" int sl_relu_fwd_cuda(sl_exec *e, int64_t n, const float *x, float *y)
{
    return act_run<0>("sl_relu_fwd_cuda", "act_kernel<relu_fwd>", e, n, x, nullptr, y);
}

extern "C" int sl_relu_bwd_cuda(sl_exec *e, int64_t n, const float *y, const float *dy,
                                float *dx)
{
    return act_run<1>("sl_relu_bwd_cuda", "act_kernel<relu_bwd>", e, n, y, dy, dx);
}

extern "C" int sl_add_cuda(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    return act_run<2>("sl_add_cuda", "act_kernel<add>", e, n, a, b, y);
}

// ---------------------------------------------------------------- max pool

// v beats the current best: strictly greater (ties keep the first), or the
// first NaN (act_ref.c's pool_better).
__device__ __forceinline__ bool pool_better(float v, float best)
{
    return v > best || (isnan(v) && !isnan(best));
}

// x (n, h, w, c) -> y (n, p, q, c), argmax the flat index into x (< 2^31,
// checked on the host). One thread per output pixel and V consecutive
// channels (16-byte loads when V > 1), taps scanned r then s. y is one of
// the x values: exact in every type.
template <typename T, int V>
__global__ void maxpool_fwd_kernel(sl_pool_shape sh, const T *__restrict__ x, T *__restrict__ y,
                                   int32_t *__restrict__ argmax)
{
    int cv = sh.c / V;
    int64_t ny = (int64_t)sh.n * sh.p * sh.q * cv;
    GRID_STRIDE(o, ny)
    {
        int ch = (int)(o % cv) * V;
        int64_t pix = o / cv, t = pix;
        int q = (int)(t % sh.q);
        t /= sh.q;
        int p = (int)(t % sh.p);
        int n = (int)(t / sh.p);
        float best[V];
        int32_t idx[V];
        bool first = true;
        for (int r = 0; r < sh.r; r++) {
            int ih = p * sh.stride - sh.pad + r;
            if (ih < 0 || ih >= sh.h)
                continue;
            for (int s = 0; s < sh.r; s++) {
                int iw = q * sh.stride - sh.pad + s;
                if (iw < 0 || iw >= sh.w)
                    continue;
                int64_t i = (((int64_t)n * sh.h + ih) * sh.w + iw) * sh.c + ch;
                float v8[V];
                sl_ldv<T, V>(x + i, v8);
                #pragma unroll
                for (int v = 0; v < V; v++)
                    if (first || pool_better(v8[v], best[v])) {
                        best[v] = v8[v];
                        idx[v] = (int32_t)(i + v);
                    }
                first = false;
            }
        }
        // The host checked that every window has an in-bounds tap.
        int64_t yo = pix * sh.c + ch;
        sl_stv<T, V>(y + yo, best);
        #pragma unroll
        for (int v = 0; v < V; v++)
            argmax[yo + v] = idx[v];
    }
}

// dx[i] = sum of dy[o] over the outputs o whose window holds i and whose
// argmax is i, added in f32 in increasing o (ref's scatter order), rounded
// to T once at the end. One thread per input pixel and V channels.
template <typename T, int V>
__global__ void maxpool_bwd_kernel(sl_pool_shape sh, const T *__restrict__ dy,
                                   const int32_t *__restrict__ argmax, T *__restrict__ dx)
{
    int cv = sh.c / V;
    int64_t nx = (int64_t)sh.n * sh.h * sh.w * cv;
    GRID_STRIDE(k, nx)
    {
        int ch = (int)(k % cv) * V;
        int64_t t = k / cv;
        int iw = (int)(t % sh.w);
        t /= sh.w;
        int ih = (int)(t % sh.h);
        int n = (int)(t / sh.h);
        int64_t i = (((int64_t)n * sh.h + ih) * sh.w + iw) * sh.c + ch;
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
        float acc[V];
        #pragma unroll
        for (int v = 0; v < V; v++)
            acc[v] = 0.0f;
        for (int p = lo_p; p <= hi_p; p++)
            for (int q = lo_q; q <= hi_q; q++) {
                int64_t o = (((int64_t)n * sh.p + p) * sh.q + q) * sh.c + ch;
                float g[V];
                sl_ldv<T, V>(dy + o, g);
                #pragma unroll
                for (int v = 0; v < V; v++)
                    if (argmax[o + v] == (int32_t)(i + v))
                        acc[v] += g[v];
            }
        sl_stv<T, V>(dx + i, acc);
    }
}

// The vector width of a pool call: V when c is a multiple of it and every
// pointer (argmax included: V int32s) is 16-byte aligned, else 1.
template <typename T>
static bool pool_vec(const sl_pool_shape *sh, std::initializer_list<const void *> ps)
{
    bool ok = sh->c % sl_vw<T>() == 0;
    for (const void *p : ps)
        ok = ok && sl_vec_ok(p);
    return ok;
}

extern "C" int sl_maxpool_fwd_cuda(sl_exec *e, const sl_pool_shape *sh, const float *x,
                                   float *y, int32_t *argmax)
{
    const char *fn = "sl_maxpool_fwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    int64_t ny = (int64_t)sh->n * sh->p * sh->q * sh->c;
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        constexpr int VW = sl_vw<T>();
        if (pool_vec<T>(sh, {x, y, argmax}))
            maxpool_fwd_kernel<T, VW><<<act_blocks(ny / VW), ACT_THREADS, 0, cx->stream>>>(
                *sh, (const T *)x, (T *)y, argmax);
        else
            maxpool_fwd_kernel<T, 1><<<act_blocks(ny), ACT_THREADS, 0, cx->stream>>>(
                *sh, (const T *)x, (T *)y, argmax);
        return ACT_LAUNCHED(fn, "maxpool_fwd_kernel");
    });
}

extern "C" int sl_maxpool_bwd_cuda(sl_exec *e, const sl_pool_shape *sh, const float *dy,
                                   const int32_t *argmax, float *dx)
{
    const char *fn = "sl_maxpool_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    int64_t nx = (int64_t)sh->n * sh->h * sh->w * sh->c;
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        constexpr int VW = sl_vw<T>();
        if (pool_vec<T>(sh, {dy, argmax, dx}))
            maxpool_bwd_kernel<T, VW><<<act_blocks(nx / VW), ACT_THREADS, 0, cx->stream>>>(
                *sh, (const T *)dy, argmax, (T *)dx);
        else
            maxpool_bwd_kernel<T, 1><<<act_blocks(nx), ACT_THREADS, 0, cx->stream>>>(
                *sh, (const T *)dy, argmax, (T *)dx);
        return ACT_LAUNCHED(fn, "maxpool_bwd_kernel");
    });
}

// ----------------------------------------------------- global average pool

// x (n, hw, c) in T -> y (n, c) f32: y = sum over hw in double / hw.
template <typename T>
__global__ void gap_fwd_kernel(int n, int hw, int c, const T *__restrict__ x,
                               float *__restrict__ y)
{
    int64_t ny = (int64_t)n * c;
    GRID_STRIDE(o, ny)
    {
        int64_t i = o / c, ch = o - i * c;
        const T *xp = x + i * hw * c + ch;
        double acc = 0;
        for (int k = 0; k < hw; k++)
            acc += sl_ld(xp + (int64_t)k * c);
        y[o] = (float)(acc / hw);
    }
}

// dx (n, hw, c) in T = dy (n, c) f32 / hw, spread over hw (ref's f32
// quotient, rounded to T).
template <typename T>
__global__ void gap_bwd_kernel(int n, int hw, int c, const float *__restrict__ dy,
                               T *__restrict__ dx)
{
    int64_t nx = (int64_t)n * hw * c;
    int64_t plane = (int64_t)hw * c;
    GRID_STRIDE(i, nx)
    {
        int64_t img = i / plane;
        int64_t ch = i % c;
        sl_st(dx + i, (float)((double)dy[img * c + ch] / hw));
    }
}

extern "C" int sl_gap_fwd_cuda(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    const char *fn = "sl_gap_fwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        gap_fwd_kernel<T><<<act_blocks((int64_t)n * c), ACT_THREADS, 0, cx->stream>>>(
            n, hw, c, (const T *)x, y);
        return ACT_LAUNCHED(fn, "gap_fwd_kernel");
    });
}

extern "C" int sl_gap_bwd_cuda(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    const char *fn = "sl_gap_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        gap_bwd_kernel<T><<<act_blocks((int64_t)n * hw * c), ACT_THREADS, 0, cx->stream>>>(
            n, hw, c, dy, (T *)dx);
        return ACT_LAUNCHED(fn, "gap_bwd_kernel");
    });
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
//   row_loss[i] = -sum t_j (l_j - lse); d_j = (exp(l_j - lse) - t_j)/n,
//   then times *scale in float when scale is not NULL;
//   row_hit[i] = best == label.
// When any label is bad (bad_row < n) it writes nothing, or with
// zero_on_bad zeroes the row's dlogits.
__global__ void xent_row_kernel(int n, int classes, const float *logits,
                                const int32_t *__restrict__ labels, float smoothing,
                                const int *__restrict__ bad_row, const float *__restrict__ scale,
                                int zero_on_bad, float *dlogits, double *__restrict__ row_loss,
                                int *__restrict__ row_hit)
{
    __shared__ double sh[XENT_THREADS];
    __shared__ float sv[XENT_THREADS];
    __shared__ int sj[XENT_THREADS];
    int i = blockIdx.x, t = threadIdx.x;
    float *d = dlogits + (int64_t)i * classes;
    if (*bad_row < n) { // uniform over the grid
        if (zero_on_bad)
            for (int j = t; j < classes; j += XENT_THREADS)
                d[j] = 0.0f;
        return;
    }
    const float *l = logits + (int64_t)i * classes;
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
    float sc = scale ? *scale : 1.0f;
    for (int j = t; j < classes; j += XENT_THREADS) {
        double tj = off + (j == label ? 1.0 - s : 0.0);
        double logp = (double)l[j] - lse;
        row -= tj * logp;
        float dj = (float)((exp(logp) - tj) / n);
        d[j] = scale ? dj * sc : dj;
    }
    row = xent_block_sum(row, sh);
    if (t == 0) {
        row_loss[i] = row;
        row_hit[i] = best == label;
    }
}

// The sum of the rows' losses and hits by one block in a fixed order (the
// same in both finishing kernels); every thread gets the totals.
__device__ void xent_rows_total(int n, const double *__restrict__ row_loss,
                                const int *__restrict__ row_hit, double *sh, double *loss,
                                double *hits)
{
    double a = 0, b = 0;
    for (int i = threadIdx.x; i < n; i += XENT_THREADS) {
        a += row_loss[i];
        b += row_hit[i];
    }
    *loss = xent_block_sum(a, sh);
    *hits = xent_block_sum(b, sh);
}

// One block: the mean loss and the hit count, plus the first bad label (if
// any) for the host's message.
__global__ void xent_total_kernel(int n, const double *__restrict__ row_loss,
                                  const int *__restrict__ row_hit,
                                  const int32_t *__restrict__ labels,
                                  const int *__restrict__ bad_row, xent_result *out)
{
    __shared__ double sh[XENT_THREADS];
    int bad = *bad_row;
    double loss = 0, hits = 0;
    if (bad >= n) // uniform over the block
        xent_rows_total(n, row_loss, row_hit, sh, &loss, &hits);
    if (threadIdx.x == 0) {
        out->loss = (float)(loss / n);
        out->correct = (int)hits;
        out->bad_row = bad;
        out->bad_label = bad < n ? (int)labels[bad] : 0;
    }
}

// One block: acc[0] += mean loss, acc[1] += hits; a bad label adds NaN to
// acc[0] (the next read shows it) and nothing to acc[1].
__global__ void xent_acc_kernel(int n, const double *__restrict__ row_loss,
                                const int *__restrict__ row_hit, const int *__restrict__ bad_row,
                                double *acc)
{
    __shared__ double sh[XENT_THREADS];
    if (*bad_row < n) { // uniform over the block
        if (threadIdx.x == 0)
            acc[0] += __longlong_as_double(0x7ff8000000000000LL); // quiet NaN
        return;
    }
    double loss, hits;
    xent_rows_total(n, row_loss, row_hit, sh, &loss, &hits);
    if (threadIdx.x == 0) {
        acc[0] += loss / n;
        acc[1] += hits;
    }
}

// Argument checks of sl_xent_acc_cuda, the device loop's entry point
// outside the op table (sl_xent_fwd_bwd checks the table's slot).
static int xent_check_args(const char *fn, int n, int classes, float smoothing)
{
    if (n < 1 || classes < 1)
        return sl_fail(SL_EINVAL, "%s: %d rows of %d classes", fn, n, classes);
    if (!(smoothing >= 0.0f && smoothing <= 1.0f))
        return sl_fail(SL_EINVAL, "%s: label smoothing %g outside [0, 1]", fn,
                       (double)smoothing);
    return SL_OK;
}

// Device scratch of one xent call: row_loss (n doubles), the result,
// bad_row, row_hit (n ints).
struct xent_tmp {
    double *row_loss;
    xent_result *res;
    int *bad_row, *row_hit;
};

// The scratch, bad_row set past every row (0x7f7f7f7f), and the label
// check and row kernels enqueued: what both entry points share.
static int xent_rows(const char *fn, sl_cuda_ctx *cx, int n, int classes, const float *logits,
                     const int32_t *labels, float smoothing, const float *d_scale,
                     int zero_on_bad, float *dlogits, xent_tmp *tp)
{
    size_t off_res = (size_t)n * sizeof(double);
    size_t off_bad = off_res + sizeof(xent_result);
    size_t off_hit = off_bad + sizeof(int);
    size_t bytes = off_hit + (size_t)n * sizeof(int);
    char *tmp = (char *)sl_cuda_tmp(cx, bytes);
    if (!tmp)
        return sl_fail(SL_ECUDA, "%s: %zu bytes of scratch for %d rows: %s", fn, bytes, n,
                       sl_errmsg());
    tp->row_loss = (double *)tmp;
    tp->res = (xent_result *)(tmp + off_res);
    tp->bad_row = (int *)(tmp + off_bad);
    tp->row_hit = (int *)(tmp + off_hit);
    cudaStream_t s = cx->stream;
    int rc;
    if ((rc = SL_CUDA(cudaMemsetAsync(tp->bad_row, 0x7f, sizeof(int), s))))
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    xent_check_kernel<<<act_blocks(n), ACT_THREADS, 0, s>>>(n, classes, labels, tp->bad_row);
    if ((rc = ACT_LAUNCHED(fn, "xent_check_kernel")))
        return rc;
    xent_row_kernel<<<(unsigned)n, XENT_THREADS, 0, s>>>(n, classes, logits, labels, smoothing,
                                                         tp->bad_row, d_scale, zero_on_bad,
                                                         dlogits, tp->row_loss, tp->row_hit);
    return ACT_LAUNCHED(fn, "xent_row_kernel");
}

extern "C" int sl_xent_fwd_bwd_cuda(sl_exec *e, int n, int classes, const float *logits,
                                    const int32_t *labels, float smoothing, float *loss,
                                    float *dlogits, int *correct)
{
    const char *fn = "sl_xent_fwd_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    if (!cx->h_pinned)
        return sl_fail(SL_EINVAL, "%s: the cuda context has no pinned host buffer", fn);
    xent_tmp tp;
    if ((rc = xent_rows(fn, cx, n, classes, logits, labels, smoothing, nullptr, 0, dlogits,
                        &tp)))
        return rc;
    cudaStream_t s = cx->stream;
    xent_total_kernel<<<1, XENT_THREADS, 0, s>>>(n, tp.row_loss, tp.row_hit, labels, tp.bad_row,
                                                 tp.res);
    if ((rc = ACT_LAUNCHED(fn, "xent_total_kernel")))
        return rc;
    static_assert(sizeof(xent_result) <= SL_CUDA_PINNED_BYTES, "pinned buffer too small");
    if ((rc = SL_CUDA(cudaMemcpyAsync(cx->h_pinned, tp.res, sizeof(xent_result),
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

extern "C" int sl_xent_acc_cuda(sl_exec *e, int n, int classes, const float *logits,
                                const int32_t *labels, float smoothing, const float *d_scale,
                                float *dlogits, double *d_acc)
{
    const char *fn = "sl_xent_acc_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = xent_check_args(fn, n, classes, smoothing)))
        return rc;
    if (!d_acc)
        return sl_fail(SL_EINVAL, "%s: no accumulator", fn);
    if (!logits || !labels || !dlogits) /* as ops.c's checks of the table's xent slot */
        return sl_fail(SL_EINVAL, "%s: NULL %s", fn, !logits ? "logits" : !labels ? "labels"
                                                                                   : "dlogits");
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    xent_tmp tp;
    if ((rc = xent_rows(fn, cx, n, classes, logits, labels, smoothing, d_scale, 1, dlogits,
                        &tp)))
        return rc;
    xent_acc_kernel<<<1, XENT_THREADS, 0, cx->stream>>>(n, tp.row_loss, tp.row_hit, tp.bad_row,
                                                        d_acc);
    return ACT_LAUNCHED(fn, "xent_acc_kernel");
}

// train/norm_cuda.cu - batch norm, cuda backend: training forward, eval
// forward, backward, and the five synchronized-BN pieces (train_int.h gives
// the contract; norm_ref.c and norm_sync_ref.c are the oracles, and
// tests/train/test_ops_cuda.c holds these kernels to them).
//
// Layout: x, y, dy, dx are (rows, c), rows = n*h*w (NHWC flattened, c
// fastest); every per-channel array is (c). All pointers are device memory.
// Element type: x, y, dy, dx are in e->act (f32, bf16 or f16); gamma,
// beta, the running, saved and summed statistics, dgamma and dbeta are
// always f32 (train_int.h's table). The kernels touching rows are
// templates on the element type T: each element is widened on load (exact)
// and every sum and formula runs in double as before, the result rounded
// to f32 and then to T on the store - ref's f32 value rounded to T.
// cuDNN's legacy batch norm would take half x with f32 statistics too
// (cudnnDeriveBNTensorDescriptor gives a float descriptor for half data),
// but these kernels also serve the sync-BN pieces, which cuDNN has no
// counterpart for, they are deterministic, and one code path keeps every
// type in step with norm_ref.c; so they stay.
//
// DESIGN
//   Reductions (per-channel sums over rows) are two-level and deterministic:
//   no atomics, the same order every run.
//   - bn_reduce_kernel: grid (tiles, gy). A block of 256 threads covers a
//     tile of cw = min(c, 256) channels and k = 256/cw rows at a time, so a
//     block reads k*cw contiguous floats per step (coalesced for any c: c = 3
//     reads 85 rows of 3, c = 2048 eight tiles of 256). Block y walks rows
//     y*k, y*k + gy*k, ...; each thread accumulates in double, the block adds
//     its k row lanes (a tree in shared memory) and writes one partial per
//     channel: part[y*c + ch]. gy is at most 1024/tiles, so about 1024 blocks
//     cover the GPU whatever the shape, and a thread sums rows/(k*gy) values
//     (3.2M rows of 64 channels: ~780 per thread).
//   - a finishing kernel with one warp per channel adds the gy partials
//     (strided over lanes, then a shuffle tree) and applies the formula.
//   Training statistics take ONE pass over x (bn_stats_kernel): each thread
//   keeps (count, mean, M2) of its rows in double; the block, then the
//   finishing warp, merge them with Chan, Golub and LeVeque's pairwise
//   update (1979): n = na + nb, d = mb - ma, mean = ma + d*nb/n, M2 = M2a +
//   M2b + d^2*na*nb/n, in a fixed tree (deterministic). Within a thread it
//   is not Welford's update (a double division per element, ~10 FP64 ops:
//   about all an H100 has per bf16 element at full HBM rate, 34 TFLOP/s vs
//   1.7e12 elements/s) but sums shifted by the thread's first value K,
//   s1 = sum (x - K), s2 = sum (x - K)^2, mean = K + s1/n, M2 = s2 - s1^2/n.
//   Its cancellation is (K - mean)^2/var <= n - 1 (Samuelson's inequality:
//   K is one of the n values), so ~10^3 units of 2^-53 at most, where a sum
//   of squares minus a squared sum loses everything on data far from zero
//   (x ~ 1000, small noise: bn_large_rows_far_from_zero). norm_ref.c's two
//   passes (mean, then squared deviations) agree to a few ulp of double.
//   The sync-BN pieces keep two passes (bn_sum, then bn_sqdev_sum around
//   the global mean: the model all-reduces in between).
//   Fused ops (train_int.h): bn_fwd_train_act adds r and applies the ReLU in
//   the y pass; bn_bwd_act masks dz with z > 0 in the reduction pass and
//   writes the masked dz back there (the model feeds it to the shortcut),
//   the dx pass reads it. Intermediates are rounded to T where the unfused
//   ops store them: the fused ops give the bits of bn_fwd_train -> add ->
//   relu_fwd and of relu_bwd -> bn_bwd on this backend.
//   Passes over a (rows, c) tensor (R: one read, W: one write):
//     bn_fwd_train       2R+1W (stats, y)          was 3R+1W (sum, sqdev, y)
//     bn + relu          fused 2R+1W = 3           was 3R+1W + 1R+1W = 6
//     bn + add + relu    fused 3R+1W = 4 (x, r)    was 4 + 2R+1W + 2 = 9
//     relu_bwd + bn_bwd  fused 3R+1W (x, dz, z; masked dz) + 2R+1W (dx) = 7,
//                        was 2R+1W + 2R + 2R+1W = 8
//   The elementwise passes (y, dx) compute in double too, in ref's order; the
//   GPU is memory-bound here (a few FP64 operations per 8 bytes moved), and
//   the results then differ from ref only by the summation order.
//   Scratch: partials and per-channel double statistics live in the
//   context's tmp buffer (sl_cuda_tmp), (3*gy + 2)*c doubles at most.
//   Every kernel runs on ctx->stream; nothing synchronizes the host.
//   Aliasing: y may be x or r, dx may be dy or dz (every elementwise kernel
//   reads element i before writing it, and nothing reads it after);
//   bn_fwd_apply's mean / var may be save_mean / save_invstd (read first).
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "train/cuda_int.h"

enum { BN_THREADS = 256, BN_TARGET_BLOCKS = 1024, BN_FIN_THREADS = 256 };

// The cut of a (rows, c) pass: channel tiles of cw channels, k row lanes per
// block, gy row blocks (the partials per channel).
struct bn_plan {
    int cw, k, tiles, gy;
};

static bn_plan bn_plan_make(int64_t rows, int c)
{
    bn_plan p;
    p.cw = c < BN_THREADS ? c : BN_THREADS;
    p.k = BN_THREADS / p.cw;
    p.tiles = (int)(((int64_t)c + p.cw - 1) / p.cw);
    int64_t need = (rows + p.k - 1) / p.k; // row blocks that have a row
    int64_t cap = BN_TARGET_BLOCKS / p.tiles;
    if (cap < 1)
        cap = 1;
    int64_t gy = need < cap ? need : cap;
    p.gy = (int)(gy < 1 ? 1 : gy);
    return p;
}

// What bn_reduce_kernel sums per channel.
enum { BN_SUM = 0, BN_SQDEV = 1, BN_DY = 2, BN_DY_MASK = 3 };

// MODE BN_SUM:     part0 = sum x
//      BN_SQDEV:   part0 = sum (x - mean)^2
//      BN_DY:      part0 = sum dy, part1 = sum dy*(x - mean)*invstd
//      BN_DY_MASK: dz := (z > 0 ? dz : 0) in place (relu_bwd's mask, exact in
//                  T), then BN_DY's sums of the masked dz; dz is read and
//                  written through dzm (dy unused: it would alias dzm).
// M: the mean's type (double from this file's own pass, float from a caller).
// part0, part1: (gy, c) doubles.
// T: the element type of x, dy, z and dzm.
template <int MODE, typename M, typename T>
__global__ void bn_reduce_kernel(int64_t rows, int c, bn_plan p, const T *__restrict__ x,
                                 const T *__restrict__ dy, const M *__restrict__ mean,
                                 const float *__restrict__ invstd, double *__restrict__ part0,
                                 double *__restrict__ part1, const T *__restrict__ z, T *dzm)
{
    enum { TWO = MODE == BN_DY || MODE == BN_DY_MASK };
    __shared__ double sa[BN_THREADS];
    __shared__ double sb[TWO ? BN_THREADS : 1];
    int t = threadIdx.x;
    int lane = t / p.cw, cl = t - lane * p.cw;
    int ch = blockIdx.x * p.cw + cl;
    double a = 0, b = 0;
    if (lane < p.k && ch < c) {
        double mu = 0, is = 0;
        if (MODE != BN_SUM)
            mu = (double)mean[ch];
        if (TWO)
            is = (double)invstd[ch];
        int64_t step = (int64_t)gridDim.y * p.k;
        #pragma unroll 4 // independent loads in flight (latency, not FLOPs, bounds these loops)
        for (int64_t r = (int64_t)blockIdx.y * p.k + lane; r < rows; r += step) {
            int64_t i = r * c + ch;
            double v = sl_ld(x + i);
            if (MODE == BN_SUM) {
                a += v;
            } else if (MODE == BN_SQDEV) {
                double d = v - mu;
                a += d * d;
            } else {
                float gf;
                if (MODE == BN_DY_MASK) {
                    gf = sl_ld(z + i) > 0.0f ? sl_ld(dzm + i) : 0.0f;
                    sl_st(dzm + i, gf);
                } else {
                    gf = sl_ld(dy + i);
                }
                double g = gf;
                a += g;
                b += g * (v - mu) * is;
            }
        }
    }
    sa[t] = a;
    if (TWO)
        sb[t] = b;
    __syncthreads();
    // Tree over the k row lanes: lanes [0, n-h) add lanes [h, n).
    for (int n = p.k; n > 1;) {
        int h = (n + 1) / 2;
        if (lane < n - h) {
            sa[t] += sa[t + h * p.cw];
            if (TWO)
                sb[t] += sb[t + h * p.cw];
        }
        __syncthreads();
        n = h;
    }
    if (lane == 0 && ch < c) {
        part0[(int64_t)blockIdx.y * c + ch] = sa[t];
        if (TWO)
            part1[(int64_t)blockIdx.y * c + ch] = sb[t];
    }
}

// Chan's pairwise merge of (nb, mb, qb) into (n, m, q): count, mean, M2 =
// sum of squared deviations from the mean (the file's DESIGN). Either side
// may be empty.
__device__ __forceinline__ void bn_chan(double &n, double &m, double &q, double nb, double mb,
                                        double qb)
{
    if (nb == 0)
        return;
    if (n == 0) {
        n = nb, m = mb, q = qb;
        return;
    }
    double t = n + nb, d = mb - m;
    m += d * (nb / t);
    q += qb + d * d * (n * (nb / t));
    n = t;
}

// One pass of training statistics: per channel and row block y,
// (count, mean, M2) of the block's rows into pn, pm, pq ((gy, c) doubles).
// Same cut of the rows as bn_reduce_kernel. Each thread: shifted sums
// around its first value (DESIGN), then the k row lanes merge in a fixed
// tree.
template <typename T>
__global__ void bn_stats_kernel(int64_t rows, int c, bn_plan p, const T *__restrict__ x,
                                double *__restrict__ pn, double *__restrict__ pm,
                                double *__restrict__ pq)
{
    __shared__ double sn[BN_THREADS], sm[BN_THREADS], sq[BN_THREADS];
    int t = threadIdx.x;
    int lane = t / p.cw, cl = t - lane * p.cw;
    int ch = blockIdx.x * p.cw + cl;
    double n = 0, m = 0, q = 0;
    int64_t r = (int64_t)blockIdx.y * p.k + lane;
    if (lane < p.k && ch < c && r < rows) {
        int64_t step = (int64_t)gridDim.y * p.k;
        double k = sl_ld(x + r * c + ch), s1 = 0, s2 = 0;
        int64_t cnt = 1;
        #pragma unroll 4 // independent loads in flight (latency, not FLOPs, bounds these loops)
        for (r += step; r < rows; r += step, cnt++) {
            double d = (double)sl_ld(x + r * c + ch) - k;
            s1 += d;
            s2 += d * d;
        }
        n = (double)cnt;
        m = k + s1 / n;
        q = s2 - s1 * (s1 / n);
        if (q < 0) // rounding of an (almost) constant run
            q = 0;
    }
    sn[t] = n, sm[t] = m, sq[t] = q;
    __syncthreads();
    for (int w = p.k; w > 1;) {
        int h = (w + 1) / 2;
        if (lane < w - h) {
            int o = t + h * p.cw;
            double a = sn[t], b = sm[t], e = sq[t];
            bn_chan(a, b, e, sn[o], sm[o], sq[o]);
            sn[t] = a, sm[t] = b, sq[t] = e;
        }
        __syncthreads();
        w = h;
    }
    if (lane == 0 && ch < c) {
        int64_t o = (int64_t)blockIdx.y * c + ch;
        pn[o] = sn[t], pm[o] = sm[t], pq[o] = sq[t];
    }
}

// Sum of channel ch's gy partials by one warp (lanes stride over y, then a
// shuffle tree); the total is in lane 0.
__device__ __forceinline__ double bn_warp_total(const double *part, int gy, int c, int ch,
                                                int lane)
{
    double s = 0;
    for (int y = lane; y < gy; y += 32)
        s += part[(int64_t)y * c + ch];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    return s;
}

// One warp per channel: the warp's channel, or -1 past c (whole warps exit
// together, so the shuffles see all 32 lanes).
__device__ __forceinline__ int bn_warp_channel(int c)
{
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    return w < c ? (int)w : -1;
}

// bn_stats_kernel's gy partials of a channel merged by one warp (lanes walk
// y in order, then a shuffle tree); from the merged M2: invstd (double, for
// the y pass), the saved statistics and PyTorch's running update (unbiased
// variance), as norm_ref.c.
__global__ void bn_stats_fin_kernel(int64_t rows, int c, int gy, const double *__restrict__ pn,
                                    const double *__restrict__ pm,
                                    const double *__restrict__ pq, float momentum, float eps,
                                    double *__restrict__ mu, double *__restrict__ is,
                                    float *__restrict__ running_mean,
                                    float *__restrict__ running_var, float *__restrict__ save_mean,
                                    float *__restrict__ save_invstd)
{
    int ch = bn_warp_channel(c), lane = threadIdx.x & 31;
    if (ch < 0)
        return;
    double n = 0, m = 0, q = 0;
    for (int y = lane; y < gy; y += 32) {
        int64_t o = (int64_t)y * c + ch;
        bn_chan(n, m, q, pn[o], pm[o], pq[o]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        double nb = __shfl_down_sync(0xffffffffu, n, o);
        double mb = __shfl_down_sync(0xffffffffu, m, o);
        double qb = __shfl_down_sync(0xffffffffu, q, o);
        bn_chan(n, m, q, nb, mb, qb); // lanes >= 32 - o merge their own value: unread
    }
    if (lane != 0)
        return;
    double var = q / (double)rows;
    double invstd = 1.0 / sqrt(var + (double)eps);
    double mom = momentum;
    double unbiased = q / (double)(rows - 1);
    running_mean[ch] = (float)((1.0 - mom) * running_mean[ch] + mom * m);
    running_var[ch] = (float)((1.0 - mom) * running_var[ch] + mom * unbiased);
    save_mean[ch] = (float)m;
    save_invstd[ch] = (float)invstd;
    mu[ch] = m;
    is[ch] = invstd;
}

// Eval: the running statistics as (mu, is).
__global__ void bn_eval_prep_kernel(int c, const float *__restrict__ running_mean,
                                    const float *__restrict__ running_var, float eps,
                                    double *__restrict__ mu, double *__restrict__ is)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    mu[ch] = running_mean[ch];
    is[ch] = 1.0 / sqrt((double)running_var[ch] + (double)eps);
}

// Sync-BN forward: the all-reduced mean and biased var given (train_int.h).
// mean / var may alias save_mean / save_invstd: both are read first.
__global__ void bn_sync_prep_kernel(int c, const float *mean, const float *var, double total,
                                    float momentum, float eps, float *__restrict__ running_mean,
                                    float *__restrict__ running_var, float *save_mean,
                                    float *save_invstd, double *__restrict__ mu,
                                    double *__restrict__ is)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double m = momentum, u = mean[ch], v = var[ch];
    double invstd = 1.0 / sqrt(v + (double)eps);
    running_mean[ch] = (float)((1.0 - m) * running_mean[ch] + m * u);
    running_var[ch] = (float)((1.0 - m) * running_var[ch] + m * v * total / (total - 1.0));
    save_mean[ch] = (float)u;
    save_invstd[ch] = (float)invstd;
    mu[ch] = u;
    is[ch] = invstd;
}

// v rounded to T and widened back (f32: v): the value a store of v to T
// and a load give.
template <typename T>
__device__ __forceinline__ float bn_round(float v)
{
    T h;
    sl_st(&h, v);
    return sl_ld(&h);
}

// y = gamma*(x - mu)*is + beta, in double as norm_ref.c (then f32, then T);
// with r (not NULL): y = T(y) + r in f32 as add_kernel; with relu: y =
// max(T(y), 0) as relu_fwd_kernel (NaN passes). Rounding to T where the
// unfused ops store keeps the fused result the bits of bn -> add -> relu.
// Same grid as the reduction (every thread keeps one channel's constants in
// registers). y may be x or r.
template <typename T>
__global__ void bn_apply_kernel(int64_t rows, int c, bn_plan p, const T *x,
                                const float *__restrict__ gamma, const float *__restrict__ beta,
                                const double *__restrict__ mu, const double *__restrict__ is,
                                const T *r, int relu, T *y)
{
    int t = threadIdx.x;
    int lane = t / p.cw, cl = t - lane * p.cw;
    int ch = blockIdx.x * p.cw + cl;
    if (lane >= p.k || ch >= c)
        return;
    double g = gamma[ch], b = beta[ch], m = mu[ch], s = is[ch];
    int64_t step = (int64_t)gridDim.y * p.k;
    #pragma unroll 4 // independent loads in flight (latency, not FLOPs, bounds these loops)
    for (int64_t row = (int64_t)blockIdx.y * p.k + lane; row < rows; row += step) {
        int64_t i = row * c + ch;
        float v = (float)(g * ((double)sl_ld(x + i) - m) * s + b);
        if (r)
            v = bn_round<T>(v) + sl_ld(r + i);
        if (relu) {
            v = bn_round<T>(v);
            v = v < 0.0f ? 0.0f : v;
        }
        sl_st(y + i, v);
    }
}

// The backward sums (double, for dx) and dgamma = sum dy*xhat, dbeta = sum dy.
__global__ void bn_bwd_sums_kernel(int c, int gy, const double *__restrict__ part0,
                                   const double *__restrict__ part1, double *__restrict__ sdy,
                                   double *__restrict__ sdyx, float *__restrict__ dgamma,
                                   float *__restrict__ dbeta)
{
    int ch = bn_warp_channel(c), lane = threadIdx.x & 31;
    if (ch < 0)
        return;
    double a = bn_warp_total(part0, gy, c, ch, lane);
    double b = bn_warp_total(part1, gy, c, ch, lane);
    if (lane != 0)
        return;
    sdy[ch] = a;
    sdyx[ch] = b;
    if (dgamma)
        dgamma[ch] = (float)b;
    if (dbeta)
        dbeta[ch] = (float)a;
}

// A piece's per-channel sums as floats (bn_sum, bn_sqdev_sum, bn_bwd_reduce).
__global__ void bn_sums_out_kernel(int c, int gy, const double *__restrict__ part0,
                                   const double *__restrict__ part1, float *__restrict__ out0,
                                   float *__restrict__ out1)
{
    int ch = bn_warp_channel(c), lane = threadIdx.x & 31;
    if (ch < 0)
        return;
    double a = bn_warp_total(part0, gy, c, ch, lane);
    double b = part1 ? bn_warp_total(part1, gy, c, ch, lane) : 0.0;
    if (lane != 0)
        return;
    out0[ch] = (float)a;
    if (out1)
        out1[ch] = (float)b;
}

// dx = gamma*invstd/total * (total*dy - sdy - xhat*sdyx), xhat = (x - mean)*invstd,
// in double as norm_ref.c / norm_sync_ref.c. S: the sums' type (double from
// bn_bwd's own reduction, float from an all-reduce); T: x, dy, dx.
template <typename S, typename T>
__global__ void bn_bwd_apply_kernel(int64_t rows, int c, bn_plan p, const T *x, const T *dy,
                                    const float *__restrict__ gamma,
                                    const float *__restrict__ save_mean,
                                    const float *__restrict__ save_invstd,
                                    const S *__restrict__ sum_dy, const S *__restrict__ sum_dyx,
                                    double total, T *dx)
{
    int t = threadIdx.x;
    int lane = t / p.cw, cl = t - lane * p.cw;
    int ch = blockIdx.x * p.cw + cl;
    if (lane >= p.k || ch >= c)
        return;
    double mean = save_mean[ch], invstd = save_invstd[ch];
    double sdy = sum_dy[ch], sdyx = sum_dyx[ch];
    double k = (double)gamma[ch] * invstd / total;
    int64_t step = (int64_t)gridDim.y * p.k;
    #pragma unroll 4 // independent loads in flight (latency, not FLOPs, bounds these loops)
    for (int64_t r = (int64_t)blockIdx.y * p.k + lane; r < rows; r += step) {
        int64_t i = r * c + ch;
        double xhat = ((double)sl_ld(x + i) - mean) * invstd;
        sl_st(dx + i, (float)(k * (total * (double)sl_ld(dy + i) - sdy - xhat * sdyx)));
    }
}

// ------------------------------------------------------------------ host side

static unsigned bn_fin_blocks(int c)
{
    return (unsigned)(((int64_t)c * 32 + BN_FIN_THREADS - 1) / BN_FIN_THREADS);
}

static unsigned bn_chan_blocks(int c)
{
    return (unsigned)(((int64_t)c + BN_FIN_THREADS - 1) / BN_FIN_THREADS);
}

// The exec's context, its device made current (the runtime's current
// device is per host thread; cuda_ctx.cu's DESIGN).
static int bn_ctx(const char *fn, sl_exec *e, sl_cuda_ctx **out)
{
    *out = e ? sl_cuda_of(e) : NULL;
    if (!*out)
        return sl_fail(SL_EINVAL, "%s: the exec has no cuda context", fn);
    int rc = SL_CUDA(cudaSetDevice((*out)->device));
    return rc ? sl_fail(rc, "%s: %s", fn, sl_errmsg()) : SL_OK;
}

// Scratch: nparts (gy, c) partial arrays, then nstats (c) double arrays.
static int bn_tmp(sl_cuda_ctx *cx, const char *fn, const bn_plan &p, int c, int nparts,
                  int nstats, double **parts, double **stats)
{
    size_t per = (size_t)p.gy * (size_t)c;
    size_t n = (size_t)nparts * per + (size_t)nstats * (size_t)c;
    *parts = *stats = NULL; // set on every path: gcc -O3 (Release) warns otherwise
    double *d = (double *)sl_cuda_tmp(cx, n * sizeof(double));
    if (!d)
        return sl_fail(SL_ECUDA, "%s: %zu bytes of scratch for %d channels: %s", fn,
                       n * sizeof(double), c, sl_errmsg());
    *parts = d;
    *stats = d + (size_t)nparts * per;
    return SL_OK;
}

// A failed launch, wrapped with the op and its shape.
static int bn_launch_fail(const char *fn, int rc, int64_t rows, int c)
{
    return sl_fail(rc, "%s: %lld rows of %d channels: %s", fn, (long long)rows, c, sl_errmsg());
}

#define BN_LAUNCHED(kernel)                                                                   \
    do {                                                                                      \
        int rc_ = SL_LAUNCHED(kernel);                                                        \
        if (rc_)                                                                              \
            return bn_launch_fail(fn, rc_, rows, c);                                          \
    } while (0)

// As norm_ref.c: training-mode statistics need two rows per channel.
static int bn_check_train(const char *fn, int64_t rows, int c)
{
    if (c < 1)
        return sl_fail(SL_EINVAL, "%s: %d channels", fn, c);
    if (rows < 2)
        return sl_fail(SL_EINVAL, "%s: %lld row(s) per channel: training-mode batch norm needs "
                       "at least 2 values per channel (PyTorch refuses 1 too)", fn,
                       (long long)rows);
    return SL_OK;
}

static int bn_check_rows(const char *fn, int64_t rows, int c)
{
    if (c < 1 || rows < 0)
        return sl_fail(SL_EINVAL, "%s: %lld rows of %d channels", fn, (long long)rows, c);
    return SL_OK;
}

// As norm_sync_ref.c: total >= min and total >= this replica's rows.
static int bn_check_total(const char *fn, int64_t rows, int c, double total, double min)
{
    int rc = bn_check_rows(fn, rows, c);
    if (rc)
        return rc;
    if (!(total >= min) || total < (double)rows)
        return sl_fail(SL_EINVAL, "%s: %g rows in all replicas, %lld here: training-mode batch "
                       "norm needs at least %g values per channel and total >= rows", fn,
                       total, (long long)rows, min);
    return SL_OK;
}

// bn_fwd_train and bn_fwd_train_act: the one-pass statistics, their
// finish, then the y pass (with r and the ReLU when asked).
static int bn_fwd_train_run(const char *fn, sl_exec *e, int64_t rows, int c, const float *x,
                            const float *gamma, const float *beta, float momentum, float eps,
                            float *running_mean, float *running_var, const float *r, int relu,
                            float *y, float *save_mean, float *save_invstd)
{
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = bn_check_train(fn, rows, c)) || (rc = bn_ctx(fn, e, &cx)))
        return rc;
    bn_plan p = bn_plan_make(rows, c);
    double *part, *st;
    if ((rc = bn_tmp(cx, fn, p, c, 3, 2, &part, &st)))
        return rc;
    size_t per = (size_t)p.gy * c;
    double *pn = part, *pm = part + per, *pq = part + 2 * per, *mu = st, *is = st + c;
    cudaStream_t s = cx->stream;
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        const T *xt = (const T *)x;
        bn_stats_kernel<T><<<grid, BN_THREADS, 0, s>>>(rows, c, p, xt, pn, pm, pq);
        BN_LAUNCHED("bn_stats_kernel");
        bn_stats_fin_kernel<<<bn_fin_blocks(c), BN_FIN_THREADS, 0, s>>>(
            rows, c, p.gy, pn, pm, pq, momentum, eps, mu, is, running_mean, running_var,
            save_mean, save_invstd);
        BN_LAUNCHED("bn_stats_fin_kernel");
        bn_apply_kernel<T><<<grid, BN_THREADS, 0, s>>>(rows, c, p, xt, gamma, beta, mu, is,
                                                       (const T *)r, relu, (T *)y);
        BN_LAUNCHED("bn_apply_kernel");
        return SL_OK;
    });
}

extern "C" int sl_bn_fwd_train_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                    const float *gamma, const float *beta, float momentum,
                                    float eps, float *running_mean, float *running_var, float *y,
                                    float *save_mean, float *save_invstd)
{
    return bn_fwd_train_run("sl_bn_fwd_train_cuda", e, rows, c, x, gamma, beta, momentum, eps,
                            running_mean, running_var, nullptr, 0, y, save_mean, save_invstd);
}

extern "C" int sl_bn_fwd_train_act_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                        const float *gamma, const float *beta, float momentum,
                                        float eps, float *running_mean, float *running_var,
                                        const float *r, int relu, float *y, float *save_mean,
                                        float *save_invstd)
{
    const char *fn = "sl_bn_fwd_train_act_cuda";
    if (!x || !gamma || !beta || !running_mean || !running_var || !y || !save_mean ||
        !save_invstd)
        return sl_fail(SL_EINVAL, "%s: NULL tensor (only r may be NULL)", fn);
    return bn_fwd_train_run(fn, e, rows, c, x, gamma, beta, momentum, eps, running_mean,
                            running_var, r, relu != 0, y, save_mean, save_invstd);
}

extern "C" int sl_bn_fwd_eval_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                   const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var,
                                   float eps, float *y)
{
    const char *fn = "sl_bn_fwd_eval_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = bn_check_rows(fn, rows, c)) || (rc = bn_ctx(fn, e, &cx)))
        return rc;
    if (rows == 0)
        return SL_OK;
    bn_plan p = bn_plan_make(rows, c);
    double *part, *st;
    if ((rc = bn_tmp(cx, fn, p, c, 0, 2, &part, &st)))
        return rc;
    double *mu = st, *is = st + c;
    cudaStream_t s = cx->stream;
    bn_eval_prep_kernel<<<bn_chan_blocks(c), BN_FIN_THREADS, 0, s>>>(c, running_mean,
                                                                      running_var, eps, mu, is);
    BN_LAUNCHED("bn_eval_prep_kernel");
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        bn_apply_kernel<T><<<grid, BN_THREADS, 0, s>>>(rows, c, p, (const T *)x, gamma, beta, mu,
                                                       is, nullptr, 0, (T *)y);
        BN_LAUNCHED("bn_apply_kernel");
        return SL_OK;
    });
}

// bn_bwd, and bn_bwd_act when z is not NULL (dz masked in place in the
// reduction pass; dy is then dz).
static int bn_bwd_run(const char *fn, sl_exec *e, int64_t rows, int c, const float *x,
                      const float *z, float *dz, const float *dy, const float *gamma,
                      const float *save_mean, const float *save_invstd, float *dx,
                      float *dgamma, float *dbeta)
{
    sl_cuda_ctx *cx = NULL;
    int rc;
    if (c < 1 || rows < 1)
        return sl_fail(SL_EINVAL, "%s: %lld rows of %d channels", fn, (long long)rows, c);
    if ((rc = bn_ctx(fn, e, &cx)))
        return rc;
    bn_plan p = bn_plan_make(rows, c);
    double *part, *st;
    if ((rc = bn_tmp(cx, fn, p, c, 2, 2, &part, &st)))
        return rc;
    double *part1 = part + (size_t)p.gy * c, *sdy = st, *sdyx = st + c;
    cudaStream_t s = cx->stream;
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        const T *xt = (const T *)x, *dyt = (const T *)dy;
        if (z) {
            bn_reduce_kernel<BN_DY_MASK, float, T><<<grid, BN_THREADS, 0, s>>>(
                rows, c, p, xt, nullptr, save_mean, save_invstd, part, part1, (const T *)z,
                (T *)dz);
            BN_LAUNCHED("bn_reduce_kernel<dy_mask>");
        } else {
            bn_reduce_kernel<BN_DY, float, T><<<grid, BN_THREADS, 0, s>>>(
                rows, c, p, xt, dyt, save_mean, save_invstd, part, part1, nullptr, nullptr);
            BN_LAUNCHED("bn_reduce_kernel<dy>");
        }
        bn_bwd_sums_kernel<<<bn_fin_blocks(c), BN_FIN_THREADS, 0, s>>>(c, p.gy, part, part1, sdy,
                                                                        sdyx, dgamma, dbeta);
        BN_LAUNCHED("bn_bwd_sums_kernel");
        bn_bwd_apply_kernel<double, T><<<grid, BN_THREADS, 0, s>>>(
            rows, c, p, xt, dyt, gamma, save_mean, save_invstd, sdy, sdyx, (double)rows, (T *)dx);
        BN_LAUNCHED("bn_bwd_apply_kernel<double>");
        return SL_OK;
    });
}

extern "C" int sl_bn_bwd_cuda(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                              const float *gamma, const float *save_mean,
                              const float *save_invstd, float *dx, float *dgamma, float *dbeta)
{
    return bn_bwd_run("sl_bn_bwd_cuda", e, rows, c, x, nullptr, nullptr, dy, gamma, save_mean,
                      save_invstd, dx, dgamma, dbeta);
}

extern "C" int sl_bn_bwd_act_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                  const float *z, float *dz, const float *gamma,
                                  const float *save_mean, const float *save_invstd, float *dx,
                                  float *dgamma, float *dbeta)
{
    const char *fn = "sl_bn_bwd_act_cuda";
    if (!x || !z || !dz || !gamma || !save_mean || !save_invstd || !dx)
        return sl_fail(SL_EINVAL, "%s: NULL tensor (only dgamma, dbeta may be NULL)", fn);
    return bn_bwd_run(fn, e, rows, c, x, z, dz, dz, gamma, save_mean, save_invstd, dx, dgamma,
                      dbeta);
}

// ------------------------------------------------------------ sync-BN pieces

// Per-channel sum of x (KIND BN_SUM) or of (x - mean)^2 (BN_SQDEV) over
// the rows, into out (c) on the device: the two-level reduction of
// bn_reduce_kernel, then one value per channel.
template <int KIND>
static int bn_channel_sums(const char *fn, sl_exec *e, int64_t rows, int c, const float *x,
                           const float *mean, float *out)
{
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = bn_check_rows(fn, rows, c)) || (rc = bn_ctx(fn, e, &cx)))
        return rc;
    bn_plan p = bn_plan_make(rows, c);
    double *part, *st;
    if ((rc = bn_tmp(cx, fn, p, c, 1, 0, &part, &st)))
        return rc;
    cudaStream_t s = cx->stream;
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        bn_reduce_kernel<KIND, float, T><<<grid, BN_THREADS, 0, s>>>(
            rows, c, p, (const T *)x, nullptr, mean, nullptr, part, nullptr, nullptr, nullptr);
        BN_LAUNCHED(KIND == BN_SUM ? "bn_reduce_kernel<sum>" : "bn_reduce_kernel<sqdev>");
        bn_sums_out_kernel<<<bn_fin_blocks(c), BN_FIN_THREADS, 0, s>>>(c, p.gy, part, nullptr,
                                                                        out, nullptr);
        BN_LAUNCHED("bn_sums_out_kernel");
        return SL_OK;
    });
}

extern "C" int sl_bn_sum_cuda(sl_exec *e, int64_t rows, int c, const float *x, float *sum)
{
    return bn_channel_sums<BN_SUM>("sl_bn_sum_cuda", e, rows, c, x, nullptr, sum);
}

extern "C" int sl_bn_sqdev_sum_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                    const float *mean, float *sq)
{
    return bn_channel_sums<BN_SQDEV>("sl_bn_sqdev_sum_cuda", e, rows, c, x, mean, sq);
}

extern "C" int sl_bn_fwd_apply_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                    const float *gamma, const float *beta, const float *mean,
                                    const float *var, double total, float momentum, float eps,
                                    float *running_mean, float *running_var, float *y,
                                    float *save_mean, float *save_invstd)
{
    const char *fn = "sl_bn_fwd_apply_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = bn_check_total(fn, rows, c, total, 2.0)) || (rc = bn_ctx(fn, e, &cx)))
        return rc;
    bn_plan p = bn_plan_make(rows, c);
    double *part, *st;
    if ((rc = bn_tmp(cx, fn, p, c, 0, 2, &part, &st)))
        return rc;
    double *mu = st, *is = st + c;
    cudaStream_t s = cx->stream;
    bn_sync_prep_kernel<<<bn_chan_blocks(c), BN_FIN_THREADS, 0, s>>>(
        c, mean, var, total, momentum, eps, running_mean, running_var, save_mean, save_invstd,
        mu, is);
    BN_LAUNCHED("bn_sync_prep_kernel");
    if (rows == 0)
        return SL_OK;
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        bn_apply_kernel<T><<<grid, BN_THREADS, 0, s>>>(rows, c, p, (const T *)x, gamma, beta, mu,
                                                       is, nullptr, 0, (T *)y);
        BN_LAUNCHED("bn_apply_kernel");
        return SL_OK;
    });
}

extern "C" int sl_bn_bwd_reduce_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                     const float *dy, const float *save_mean,
                                     const float *save_invstd, float *sum_dy,
                                     float *sum_dy_xhat)
{
    const char *fn = "sl_bn_bwd_reduce_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = bn_check_rows(fn, rows, c)) || (rc = bn_ctx(fn, e, &cx)))
        return rc;
    bn_plan p = bn_plan_make(rows, c);
    double *part, *st;
    if ((rc = bn_tmp(cx, fn, p, c, 2, 0, &part, &st)))
        return rc;
    double *part1 = part + (size_t)p.gy * c;
    cudaStream_t s = cx->stream;
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        bn_reduce_kernel<BN_DY, float, T><<<grid, BN_THREADS, 0, s>>>(
            rows, c, p, (const T *)x, (const T *)dy, save_mean, save_invstd, part, part1,
            nullptr, nullptr);
        BN_LAUNCHED("bn_reduce_kernel<dy>");
        bn_sums_out_kernel<<<bn_fin_blocks(c), BN_FIN_THREADS, 0, s>>>(c, p.gy, part, part1,
                                                                        sum_dy, sum_dy_xhat);
        BN_LAUNCHED("bn_sums_out_kernel");
        return SL_OK;
    });
}

extern "C" int sl_bn_bwd_apply_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, const float *sum_dy,
                                    const float *sum_dy_xhat, double total, float *dx)
{
    const char *fn = "sl_bn_bwd_apply_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = bn_check_total(fn, rows, c, total, 1.0)) || (rc = bn_ctx(fn, e, &cx)))
        return rc;
    if (rows == 0)
        return SL_OK;
    bn_plan p = bn_plan_make(rows, c);
    dim3 grid((unsigned)p.tiles, (unsigned)p.gy);
    return sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        bn_bwd_apply_kernel<float, T><<<grid, BN_THREADS, 0, cx->stream>>>(
            rows, c, p, (const T *)x, (const T *)dy, gamma, save_mean, save_invstd, sum_dy,
            sum_dy_xhat, total, (T *)dx);
        BN_LAUNCHED("bn_bwd_apply_kernel<float>");
        return SL_OK;
    });
}

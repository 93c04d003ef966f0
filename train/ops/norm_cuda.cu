// train/ops/norm_cuda.cu - batch norm, cuda backend: the op entry points
// (training forward, eval forward, backward, the fused BN+add+ReLU forward
// and ReLU+BN backward, and three synchronized-BN pieces, bn_fwd_apply,
// bn_bwd_reduce and bn_bwd_apply) with their statistics and reductions and
// the per-channel kernels that turn those into the elementwise passes'
// constants; the passes themselves are norm_pass_cuda.cu's (shared with
// the cuDNN fusion), the pieces both files use norm_cuda.h. ops.h
// gives the contract; the sync-BN statistics pieces are in
// norm_sync_cuda.cu; norm_ref.c and norm_sync_ref.c are the oracles, and
// tests/train/ops/test_norm_cuda.c holds these kernels to them.
//
// Layout: x, y, dy, dx, r, z, dz are (rows, c), rows = n*h*w (NHWC
// flattened, c fastest); every per-channel array is (c). All pointers are
// device memory. Element type: the row tensors are in e->act (f32, bf16 or
// f16); gamma, beta, the running, saved and summed statistics, dgamma and
// dbeta are always f32 (ops.h's table). The kernels are templates on
// the element type T and the vector width V.
//
// DESIGN (issue 14: these passes move most of a ResNet step's bytes, so
// they must run at memory bandwidth)
//   Arithmetic: every per-element operation is f32 (no double on the hot
//   path: an H100 has 1/64 of its f32 rate in f64 and a bf16 element
//   arrives every 0.3 ns per SM). The per-channel finishing kernels (a few
//   hundred partials per channel) combine in double: they are not hot, and
//   the saved statistics and running update then come out as norm_ref.c's
//   to an ulp or two.
//   Vector loads: a thread owns V consecutive channels (V = 8 for bf16 /
//   f16, 4 for f32: one 16-byte load or store per row, sl_ldv / sl_stv in
//   cuda_int.h) when c is a multiple of V and every row pointer is 16-byte
//   aligned; otherwise V = 1 (a scalar path for c = 3, 17, 513, ...).
//   The cut of a (rows, c) pass (bn_plan): cv = c/V vector columns; a
//   block of 256 threads covers a tile of cw = min(cv, 256) of them and k =
//   256/cw row lanes, so a block reads k*cw*16 contiguous bytes per row
//   step (c = 64 bf16: 32 rows of 128 bytes; c = 2048: one row of 4 KiB).
//   Grid (tiles, gy): gy row blocks, sized for the device (ctx->sms): a
//   reduction about 4 blocks of 256 per SM (1,024 threads: with four
//   16-byte loads in flight each, 64 KiB per SM, over the ~18 KiB that
//   HBM3's latency x bandwidth asks of each of 132 SMs), an elementwise
//   pass 8. Block y walks rows y*k + lane, then + gy*k, ...
//   Statistics in one read of x (bn_stats_kernel): each thread runs
//   Welford's update (count, mean, M2) in f32 over its rows, on x - K with
//   K the channel's value in row 0 (the same shift for every thread of a
//   channel, so partial means are small numbers in one frame and combine
//   without the cancellation of means near 1000 with a spread of 0.01;
//   the shift's own error is eps*|x - K| <= eps*range, and Samuelson's
//   inequality bounds range/std by 2*sqrt(rows)). The count is the same for
//   the V channels of a thread: one division per row. The k row lanes of a
//   block merge with Chan, Golub and LeVeque's pairwise update (1979: n =
//   na + nb, d = mb - ma, mean = ma + d*nb/n, M2 = M2a + M2b + d^2*na*nb/n)
//   in a fixed tree; a finishing kernel, one warp per channel, merges the
//   gy partials (lanes walk y in order, then a shuffle tree), in double.
//   Deterministic: no atomics, the same order every run.
//   The elementwise passes read per-channel constants made by the
//   finishing kernels (a float4 per channel) once into registers:
//     forward  y = ((x - K) - md)*scale + beta, md = mean - K, scale =
//              gamma*invstd (x - K exact for x near K, so data far from
//              zero keeps its spread);
//     backward dx = A*dy - B*(x - mean) - C, A = gamma*invstd,
//              B = A*invstd*sum(dy*xhat)/N, C = A*sum(dy)/N: norm_ref.c's
//              gamma*invstd/N * (N*dy - sum dy - xhat*sum(dy*xhat)) expanded.
//   Fused ops (ops.h): bn_fwd_train_act adds r and applies the ReLU in
//   the y pass; bn_bwd_act masks dz with z > 0 in the reduction pass and
//   writes the masked dz back there (the model feeds it to the shortcut),
//   the dx pass reads it. Intermediates are rounded to T where the unfused
//   ops store them: the fused ops give the bits of bn_fwd_train -> add ->
//   relu_fwd and of relu_bwd -> bn_bwd on this backend.
//   Bytes per element of a (rows, c) tensor in T (2 for bf16), each pass
//   once over it:
//     bn_fwd_train        read x (stats); read x, write y           3 x 2
//     + add + relu fused  read x; read x, r, write y                4 x 2
//     relu_bwd + bn_bwd   read x, z, dz, write dz; read x, dz,      7 x 2
//     fused               write dx
//   perf/gpu_bytes prints them for ResNet-50 with the time each takes at
//   75% and 100% of an H100's / H200's bandwidth.
//   Scratch (sl_cuda_tmp): the partials, (2 or 3)*gy*c floats + gy counts,
//   and c float4 constants.
//   Every kernel runs on ctx->stream; nothing synchronizes the host (the
//   step can be captured into a CUDA graph).
//   Aliasing: y may be x or r, dx may be dy, dz or x (every elementwise
//   kernel reads element i before writing it, and nothing reads it after);
//   bn_fwd_apply's mean / var may be save_mean / save_invstd (read first).
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <initializer_list>

#include "train/ops/cuda_int.h"
#include "train/ops/norm_cuda.h"

enum {
    BN_BLOCKS_PER_SM = 4, // reductions: gy*tiles about this many blocks per SM
    BN_FIN_THREADS = 256,
};

// ------------------------------------------------------------ statistics

// Per channel and row block y: Welford's (mean, M2) of the block's rows of
// x - K into pm, pq ((gy, c) floats), the block's row count into pn[y].
// K = x[0, ch] (the DESIGN's shift).
template <typename T, int V>
__global__ void __launch_bounds__(BN_THREADS)
    bn_stats_kernel(int64_t rows, int c, bn_plan p, const T *__restrict__ x,
                    float *__restrict__ pn, float *__restrict__ pm, float *__restrict__ pq)
{
    __shared__ float sn[BN_THREADS], sm[V][BN_THREADS], sq[V][BN_THREADS];
    int t = threadIdx.x;
    bn_pos w = bn_where(p);
    float n = 0.0f, m[V], q[V];
    #pragma unroll
    for (int v = 0; v < V; v++)
        m[v] = q[v] = 0.0f;
    if (w.live) {
        const T *xc = x + (int64_t)w.vc * V;
        float K[V];
        sl_ldv<T, V>(xc, K);
        int64_t step = (int64_t)gridDim.y * p.k;
        #pragma unroll 4 // independent loads in flight: latency, not FLOPs, bounds this loop
        for (int64_t r = (int64_t)blockIdx.y * p.k + w.lane; r < rows; r += step) {
            float xv[V];
            sl_ldv<T, V>(xc + r * c, xv);
            n += 1.0f;
            float inv = 1.0f / n;
            #pragma unroll
            for (int v = 0; v < V; v++) {
                float d = xv[v] - K[v], e = d - m[v];
                m[v] += e * inv;
                q[v] += e * (d - m[v]);
            }
        }
    }
    if (w.lane < p.k) {
        sn[t] = n;
        #pragma unroll
        for (int v = 0; v < V; v++)
            sm[v][t] = m[v], sq[v][t] = q[v];
    }
    __syncthreads();
    // Tree over the k row lanes: lanes [0, n-h) merge lanes [h, n).
    for (int k = p.k; k > 1;) {
        int h = (k + 1) / 2;
        if (w.lane < k - h) {
            int o = t + h * p.cw;
            float na = sn[t], nb = sn[o];
            if (nb > 0.0f) {
                float tot = na + nb, f = nb / tot, g = na * f;
                #pragma unroll
                for (int v = 0; v < V; v++) {
                    float d = sm[v][o] - sm[v][t];
                    sm[v][t] += d * f;
                    sq[v][t] += sq[v][o] + d * d * g;
                }
                sn[t] = tot;
            }
        }
        __syncthreads();
        k = h;
    }
    if (w.lane == 0 && w.vc < p.cv) {
        int64_t o = (int64_t)blockIdx.y * c + (int64_t)w.vc * V;
        #pragma unroll
        for (int v = 0; v < V; v++)
            pm[o + v] = sm[v][t], pq[o + v] = sq[v][t];
        if (blockIdx.x == 0 && t == 0)
            pn[blockIdx.y] = sn[0]; // every column of a block covers the same rows
    }
}

// Chan's pairwise merge of (nb, mb, qb) into (n, m, q) in double; either
// side may be empty.
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

// One warp per channel: the warp's channel, or -1 past c (whole warps exit
// together, so the shuffles see all 32 lanes).
__device__ __forceinline__ int bn_warp_channel(int c)
{
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    return w < c ? (int)w : -1;
}

// bn_stats_kernel's gy partials of a channel merged by one warp; from the
// merged M2: the saved statistics and PyTorch's running update (unbiased
// variance) as norm_ref.c, and the y pass's constants ap[ch] = (K, md,
// scale, beta).
template <typename T>
__global__ void bn_stats_fin_kernel(int64_t rows, int c, int gy, const T *__restrict__ x,
                                    const float *__restrict__ pn, const float *__restrict__ pm,
                                    const float *__restrict__ pq, const float *__restrict__ gamma,
                                    const float *__restrict__ beta, float momentum, float eps,
                                    float *__restrict__ running_mean,
                                    float *__restrict__ running_var, float *__restrict__ save_mean,
                                    float *__restrict__ save_invstd, float4 *__restrict__ ap)
{
    int ch = bn_warp_channel(c), lane = threadIdx.x & 31;
    if (ch < 0)
        return;
    double n = 0, m = 0, q = 0;
    for (int y = lane; y < gy; y += 32) {
        int64_t o = (int64_t)y * c + ch;
        bn_chan(n, m, q, pn[y], pm[o], pq[o]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        double nb = __shfl_down_sync(0xffffffffu, n, o);
        double mb = __shfl_down_sync(0xffffffffu, m, o);
        double qb = __shfl_down_sync(0xffffffffu, q, o);
        bn_chan(n, m, q, nb, mb, qb); // lanes >= 32 - o merge their own value: unread
    }
    if (lane != 0)
        return;
    if (q < 0) // rounding of an (almost) constant channel
        q = 0;
    float K = sl_ld(x + ch);
    double mean = (double)K + m, var = q / (double)rows;
    double invstd = 1.0 / sqrt(var + (double)eps);
    double mom = momentum, unbiased = q / (double)(rows - 1);
    running_mean[ch] = (float)((1.0 - mom) * running_mean[ch] + mom * mean);
    running_var[ch] = (float)((1.0 - mom) * running_var[ch] + mom * unbiased);
    save_mean[ch] = (float)mean;
    save_invstd[ch] = (float)invstd;
    ap[ch] = make_float4(K, (float)m, (float)((double)gamma[ch] * invstd), beta[ch]);
}

// Eval: the running statistics as the y pass's constants.
__global__ void bn_eval_prep_kernel(int c, const float *__restrict__ gamma,
                                    const float *__restrict__ beta,
                                    const float *__restrict__ running_mean,
                                    const float *__restrict__ running_var, float eps,
                                    float4 *__restrict__ ap)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double invstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
    ap[ch] = make_float4(running_mean[ch], 0.0f, (float)((double)gamma[ch] * invstd), beta[ch]);
}

// Sync-BN forward: the all-reduced mean and biased var given (ops.h).
// mean / var may alias save_mean / save_invstd: both are read first.
__global__ void bn_sync_prep_kernel(int c, const float *__restrict__ gamma,
                                    const float *__restrict__ beta, const float *mean,
                                    const float *var, double total, float momentum, float eps,
                                    float *__restrict__ running_mean,
                                    float *__restrict__ running_var, float *save_mean,
                                    float *save_invstd, float4 *__restrict__ ap)
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
    ap[ch] = make_float4((float)u, 0.0f, (float)((double)gamma[ch] * invstd), beta[ch]);
}

// --------------------------------------------------------------- backward

// What bn_reduce_kernel sums per channel.
enum { BN_DY = 0, BN_DY_MASK = 1 };

// MODE BN_DY:      p0 = sum dy, p1 = sum dy*(x - mean)
//      BN_DY_MASK: dz := (z > 0 ? dz : 0) in place (relu_bwd's mask, exact in
//                  T), then BN_DY's sums of the masked dz; dz is read and
//                  written through dzm (dy unused: it would alias dzm).
// p0, p1: (gy, c) f32 partials, the row lanes added in a fixed tree.
template <int MODE, typename T, int V>
__global__ void __launch_bounds__(BN_THREADS)
    bn_reduce_kernel(int64_t rows, int c, bn_plan p, const T *__restrict__ x,
                     const T *__restrict__ dy, const float *__restrict__ mean,
                     const T *__restrict__ z, T *dzm, float *__restrict__ p0,
                     float *__restrict__ p1)
{
    __shared__ float s0[V][BN_THREADS], s1[V][BN_THREADS];
    int t = threadIdx.x;
    bn_pos w = bn_where(p);
    float a[V], b[V];
    #pragma unroll
    for (int v = 0; v < V; v++)
        a[v] = b[v] = 0.0f;
    if (w.live) {
        int64_t col = (int64_t)w.vc * V, step = (int64_t)gridDim.y * p.k;
        float mu[V];
        #pragma unroll
        for (int v = 0; v < V; v++)
            mu[v] = mean[col + v];
        #pragma unroll 4
        for (int64_t r = (int64_t)blockIdx.y * p.k + w.lane; r < rows; r += step) {
            int64_t i = r * c + col;
            float xv[V];
            sl_ldv<T, V>(x + i, xv);
            float g[V];
            if (MODE == BN_DY_MASK) {
                float zv[V];
                sl_ldv<T, V>(z + i, zv);
                sl_ldv<T, V>(dzm + i, g);
                #pragma unroll
                for (int v = 0; v < V; v++)
                    g[v] = zv[v] > 0.0f ? g[v] : 0.0f;
                sl_stv<T, V>(dzm + i, g);
            } else {
                sl_ldv<T, V>(dy + i, g);
            }
            #pragma unroll
            for (int v = 0; v < V; v++) {
                a[v] += g[v];
                b[v] += g[v] * (xv[v] - mu[v]);
            }
        }
    }
    if (w.lane < p.k) {
        #pragma unroll
        for (int v = 0; v < V; v++) {
            s0[v][t] = a[v];
            s1[v][t] = b[v];
        }
    }
    __syncthreads();
    for (int k = p.k; k > 1;) {
        int h = (k + 1) / 2;
        if (w.lane < k - h) {
            int o = t + h * p.cw;
            #pragma unroll
            for (int v = 0; v < V; v++) {
                s0[v][t] += s0[v][o];
                s1[v][t] += s1[v][o];
            }
        }
        __syncthreads();
        k = h;
    }
    if (w.lane == 0 && w.vc < p.cv) {
        int64_t o = (int64_t)blockIdx.y * c + (int64_t)w.vc * V;
        #pragma unroll
        for (int v = 0; v < V; v++) {
            p0[o + v] = s0[v][t];
            p1[o + v] = s1[v][t];
        }
    }
}

// Sum of channel ch's gy partials by one warp (lanes stride over y, then a
// shuffle tree), in double; the total is in lane 0.
__device__ __forceinline__ double bn_warp_total(const float *part, int gy, int c, int ch,
                                                int lane)
{
    double s = 0;
    for (int y = lane; y < gy; y += 32)
        s += part[(int64_t)y * c + ch];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    return s;
}

// The dx pass's constants coef[ch] = (mean, A, B, C) from the sums (the
// file's DESIGN), in double.
__device__ __forceinline__ float4 bn_coef(double gamma, double mean, double invstd, double sdy,
                                          double sdyx, double total)
{
    double a = gamma * invstd;
    return make_float4((float)mean, (float)a, (float)(a * invstd * sdyx / total),
                       (float)(a * sdy / total));
}

// bn_bwd's sums: dgamma = sum dy*xhat = invstd*sum dy*(x - mean), dbeta =
// sum dy (either may be NULL), and the dx pass's constants.
__global__ void bn_bwd_fin_kernel(int c, int gy, const float *__restrict__ p0,
                                  const float *__restrict__ p1, double total,
                                  const float *__restrict__ gamma,
                                  const float *__restrict__ save_mean,
                                  const float *__restrict__ save_invstd,
                                  float *__restrict__ dgamma, float *__restrict__ dbeta,
                                  float4 *__restrict__ coef)
{
    int ch = bn_warp_channel(c), lane = threadIdx.x & 31;
    if (ch < 0)
        return;
    double sdy = bn_warp_total(p0, gy, c, ch, lane);
    double sdxc = bn_warp_total(p1, gy, c, ch, lane);
    if (lane != 0)
        return;
    double is = save_invstd[ch], sdyx = sdxc * is;
    if (dgamma)
        dgamma[ch] = (float)sdyx;
    if (dbeta)
        dbeta[ch] = (float)sdy;
    coef[ch] = bn_coef(gamma[ch], save_mean[ch], is, sdy, sdyx, total);
}

// bn_bwd_reduce's per-channel sums as floats: out0 = sum p0 (sum dy), out1 =
// sum p1 times invstd (sum dy*xhat).
__global__ void bn_sums_out_kernel(int c, int gy, const float *__restrict__ p0,
                                   const float *__restrict__ p1,
                                   const float *__restrict__ invstd, float *__restrict__ out0,
                                   float *__restrict__ out1)
{
    int ch = bn_warp_channel(c), lane = threadIdx.x & 31;
    if (ch < 0)
        return;
    double a = bn_warp_total(p0, gy, c, ch, lane);
    double b = bn_warp_total(p1, gy, c, ch, lane);
    if (lane != 0)
        return;
    out0[ch] = (float)a;
    out1[ch] = (float)(b * (double)invstd[ch]);
}

// Sync-BN backward apply: the constants from the all-reduced sums.
__global__ void bn_bwd_prep_kernel(int c, const float *__restrict__ gamma,
                                   const float *__restrict__ save_mean,
                                   const float *__restrict__ save_invstd,
                                   const float *__restrict__ sum_dy,
                                   const float *__restrict__ sum_dyx, double total,
                                   float4 *__restrict__ coef)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    coef[ch] = bn_coef(gamma[ch], save_mean[ch], save_invstd[ch], sum_dy[ch], sum_dyx[ch], total);
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

// The scratch of one call: nparts (gy, c) partial arrays, gy counts, and c
// float4 constants.
struct bn_scratch {
    float *part[3];
    float *cnt;
    float4 *k;
};

static int bn_tmp(sl_cuda_ctx *cx, const char *fn, int gy, int c, int nparts, bn_scratch *s)
{
    size_t per = (size_t)gy * (size_t)c, k_off = (size_t)nparts * per + (size_t)gy;
    k_off = (k_off + 3) & ~(size_t)3; // float4 alignment
    size_t bytes = (k_off + 4 * (size_t)c) * sizeof(float);
    float *d = (float *)sl_cuda_tmp(cx, bytes);
    if (!d)
        return sl_fail(SL_ECUDA, "%s: %zu bytes of scratch for %d channels: %s", fn, bytes, c,
                       sl_errmsg());
    for (int i = 0; i < 3; i++)
        s->part[i] = i < nparts ? d + (size_t)i * per : nullptr;
    s->cnt = d + (size_t)nparts * per;
    s->k = (float4 *)(d + k_off);
    return SL_OK;
}

// The reduction plan of one call on cx's device.
static bn_plan bn_plan_reduce(const sl_cuda_ctx *cx, int64_t rows, int c, int V)
{
    return bn_plan_make(rows, c, V, cx->sms * BN_BLOCKS_PER_SM);
}

// At least the gy of any reduction plan of (rows, c) on cx (the count of
// partials the scratch holds): the block cap, or rows when fewer.
static int bn_gy_max(const sl_cuda_ctx *cx, int64_t rows)
{
    int64_t cap = (int64_t)cx->sms * BN_BLOCKS_PER_SM;
    return (int)(rows < 1 ? 1 : rows < cap ? rows : cap);
}

// What a call needs beyond its context: nothing, the scratch of its c
// float4 constants, or that and a reduction's partials (bn_tmp).
enum bn_need { BN_CTX, BN_CONSTS, BN_PARTIALS };

// One call's setup, the start of every entry point here: its name (for
// messages), the context with its device made current (sl_cuda_exec_ctx),
// the stream, the element type, and the scratch it needs.
struct bn_call {
    const char *fn;
    sl_cuda_ctx *cx;
    cudaStream_t st;
    sl_dtype act;
    bn_scratch s;
};

static int bn_begin(bn_call *k, const char *fn, sl_exec *e, int64_t rows, int c, bn_need need)
{
    k->fn = fn;
    k->cx = NULL;
    int rc = sl_cuda_exec_ctx(fn, e, &k->cx);
    if (rc)
        return rc;
    k->st = k->cx->stream;
    k->act = e->act;
    if (need == BN_PARTIALS)
        return bn_tmp(k->cx, fn, bn_gy_max(k->cx, rows), c, 2, &k->s);
    return need == BN_CONSTS ? bn_tmp(k->cx, fn, 0, c, 0, &k->s) : SL_OK;
}

// bn_fwd_train and bn_fwd_train_act: the one-pass statistics, their
// finish, then the y pass (with r and the ReLU when asked).
static int bn_fwd_train_run(const char *fn, sl_exec *e, int64_t rows, int c, const float *x,
                            const float *gamma, const float *beta, float momentum, float eps,
                            float *running_mean, float *running_var, const float *r, int relu,
                            float *y, float *save_mean, float *save_invstd)
{
    bn_call k;
    int rc = bn_begin(&k, fn, e, rows, c, BN_PARTIALS);
    if (rc)
        return rc;
    rc = bn_each(fn, k.act, c, {x}, [&](auto t, auto vw) -> int {
        using T = decltype(t);
        constexpr int V = decltype(vw)::value;
        bn_plan p = bn_plan_reduce(k.cx, rows, c, V);
        bn_stats_kernel<T, V><<<bn_grid(p), BN_THREADS, 0, k.st>>>(
            rows, c, p, (const T *)x, k.s.cnt, k.s.part[0], k.s.part[1]);
        if (int rc = SL_LAUNCHED("bn_stats_kernel"))
            return bn_launch_fail(fn, rc, rows, c);
        bn_stats_fin_kernel<T><<<bn_fin_blocks(c), BN_FIN_THREADS, 0, k.st>>>(
            rows, c, p.gy, (const T *)x, k.s.cnt, k.s.part[0], k.s.part[1], gamma, beta,
            momentum, eps, running_mean, running_var, save_mean, save_invstd, k.s.k);
        if (int rc = SL_LAUNCHED("bn_stats_fin_kernel"))
            return bn_launch_fail(fn, rc, rows, c);
        return SL_OK;
    });
    return rc ? rc : sl_bn_y_pass(fn, k.cx, k.act, rows, c, x, k.s.k, r, relu, y);
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
    return bn_fwd_train_run("sl_bn_fwd_train_act_cuda", e, rows, c, x, gamma, beta, momentum,
                            eps, running_mean, running_var, r, relu != 0, y, save_mean,
                            save_invstd);
}

extern "C" int sl_bn_fwd_eval_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                   const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var,
                                   float eps, float *y)
{
    const char *fn = "sl_bn_fwd_eval_cuda";
    bn_call k;
    int rc = bn_begin(&k, fn, e, rows, c, rows ? BN_CONSTS : BN_CTX); // no rows: nothing runs
    if (rc || rows == 0)
        return rc;
    bn_eval_prep_kernel<<<bn_chan_blocks(c), BN_FIN_THREADS, 0, k.st>>>(
        c, gamma, beta, running_mean, running_var, eps, k.s.k);
    if (int rc = SL_LAUNCHED("bn_eval_prep_kernel"))
        return bn_launch_fail(fn, rc, rows, c);
    return sl_bn_y_pass(fn, k.cx, k.act, rows, c, x, k.s.k, nullptr, 0, y);
}

// bn_bwd, and bn_bwd_act when z is not NULL (dz masked in place in the
// reduction pass; dy is then dz).
static int bn_bwd_run(const char *fn, sl_exec *e, int64_t rows, int c, const float *x,
                      const float *z, float *dz, const float *dy, const float *gamma,
                      const float *save_mean, const float *save_invstd, float *dx,
                      float *dgamma, float *dbeta)
{
    bn_call k;
    int rc = bn_begin(&k, fn, e, rows, c, BN_PARTIALS);
    if (rc)
        return rc;
    rc = bn_each(fn, k.act, c, {x, z, dy}, [&](auto t, auto vw) -> int {
        using T = decltype(t);
        constexpr int V = decltype(vw)::value;
        bn_plan p = bn_plan_reduce(k.cx, rows, c, V);
        if (z) {
            bn_reduce_kernel<BN_DY_MASK, T, V><<<bn_grid(p), BN_THREADS, 0, k.st>>>(
                rows, c, p, (const T *)x, nullptr, save_mean, (const T *)z, (T *)dz,
                k.s.part[0], k.s.part[1]);
            if (int rc = SL_LAUNCHED("bn_reduce_kernel<dy_mask>"))
                return bn_launch_fail(fn, rc, rows, c);
        } else {
            bn_reduce_kernel<BN_DY, T, V><<<bn_grid(p), BN_THREADS, 0, k.st>>>(
                rows, c, p, (const T *)x, (const T *)dy, save_mean, nullptr, nullptr,
                k.s.part[0], k.s.part[1]);
            if (int rc = SL_LAUNCHED("bn_reduce_kernel<dy>"))
                return bn_launch_fail(fn, rc, rows, c);
        }
        bn_bwd_fin_kernel<<<bn_fin_blocks(c), BN_FIN_THREADS, 0, k.st>>>(
            c, p.gy, k.s.part[0], k.s.part[1], (double)rows, gamma, save_mean, save_invstd,
            dgamma, dbeta, k.s.k);
        if (int rc = SL_LAUNCHED("bn_bwd_fin_kernel"))
            return bn_launch_fail(fn, rc, rows, c);
        return SL_OK;
    });
    return rc ? rc : sl_bn_dx_pass(fn, k.cx, k.act, rows, c, x, dy, k.s.k, dx);
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
    return bn_bwd_run("sl_bn_bwd_act_cuda", e, rows, c, x, z, dz, dz, gamma, save_mean, save_invstd, dx, dgamma,
                      dbeta);
}

// ------------------------------------------------------------ sync-BN pieces

extern "C" int sl_bn_fwd_apply_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                    const float *gamma, const float *beta, const float *mean,
                                    const float *var, double total, float momentum, float eps,
                                    float *running_mean, float *running_var, float *y,
                                    float *save_mean, float *save_invstd)
{
    const char *fn = "sl_bn_fwd_apply_cuda";
    bn_call k;
    int rc = bn_begin(&k, fn, e, rows, c, BN_CONSTS); // the running update even for no rows
    if (rc)
        return rc;
    bn_sync_prep_kernel<<<bn_chan_blocks(c), BN_FIN_THREADS, 0, k.st>>>(
        c, gamma, beta, mean, var, total, momentum, eps, running_mean, running_var, save_mean,
        save_invstd, k.s.k);
    if (int rc = SL_LAUNCHED("bn_sync_prep_kernel"))
        return bn_launch_fail(fn, rc, rows, c);
    if (rows == 0)
        return SL_OK;
    return sl_bn_y_pass(fn, k.cx, k.act, rows, c, x, k.s.k, nullptr, 0, y);
}

// This replica's sum dy and sum dy*xhat (xhat = (x - save_mean)*save_invstd)
// per channel, as floats on the device, for the model to all-reduce.
extern "C" int sl_bn_bwd_reduce_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                     const float *dy, const float *save_mean,
                                     const float *save_invstd, float *sum_dy,
                                     float *sum_dy_xhat)
{
    const char *fn = "sl_bn_bwd_reduce_cuda";
    bn_call k;
    int rc = bn_begin(&k, fn, e, rows, c, BN_PARTIALS);
    if (rc)
        return rc;
    return bn_each(fn, k.act, c, {x, dy}, [&](auto t, auto vw) -> int {
        using T = decltype(t);
        constexpr int V = decltype(vw)::value;
        bn_plan p = bn_plan_reduce(k.cx, rows, c, V);
        bn_reduce_kernel<BN_DY, T, V><<<bn_grid(p), BN_THREADS, 0, k.st>>>(
            rows, c, p, (const T *)x, (const T *)dy, save_mean, nullptr, nullptr, k.s.part[0],
            k.s.part[1]);
        if (int rc = SL_LAUNCHED("bn_reduce_kernel<dy>"))
            return bn_launch_fail(fn, rc, rows, c);
        bn_sums_out_kernel<<<bn_fin_blocks(c), BN_FIN_THREADS, 0, k.st>>>(
            c, p.gy, k.s.part[0], k.s.part[1], save_invstd, sum_dy, sum_dy_xhat);
        if (int rc = SL_LAUNCHED("bn_sums_out_kernel"))
            return bn_launch_fail(fn, rc, rows, c);
        return SL_OK;
    });
}

extern "C" int sl_bn_bwd_apply_cuda(sl_exec *e, int64_t rows, int c, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, const float *sum_dy,
                                    const float *sum_dy_xhat, double total, float *dx)
{
    const char *fn = "sl_bn_bwd_apply_cuda";
    bn_call k;
    int rc = bn_begin(&k, fn, e, rows, c, rows ? BN_CONSTS : BN_CTX); // no rows: nothing runs
    if (rc || rows == 0)
        return rc;
    bn_bwd_prep_kernel<<<bn_chan_blocks(c), BN_FIN_THREADS, 0, k.st>>>(
        c, gamma, save_mean, save_invstd, sum_dy, sum_dy_xhat, total, k.s.k);
    if (int rc = SL_LAUNCHED("bn_bwd_prep_kernel"))
        return bn_launch_fail(fn, rc, rows, c);
    return sl_bn_dx_pass(fn, k.cx, k.act, rows, c, x, dy, k.s.k, dx);
}

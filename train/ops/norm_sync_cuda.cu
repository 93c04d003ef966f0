// train/ops/norm_sync_cuda.cu - sync-BN's forward statistics, cuda backend:
// bn_moments (this replica's per-channel mean and M2 into its slot of the
// all-reduce buffer, the other slots zeroed) and bn_moments_merge (the
// world slots combined with Chan's formula). ops.h gives the
// contract, norm_sync_ref.c is the oracle, tests/train/ops/test_norm_sync_cuda.c
// holds these kernels to it. The other sync-BN pieces are norm_cuda.cu's.
//
// Layout: x is (rows, c) in e->act (f32, bf16 or f16), c fastest; slots is
// (world, SL_BN_MOMENT_FLOATS, c) f32: mean_hi, mean_lo, m2 per slot; mean
// and var are (c) f32. All device memory, every kernel on ctx->stream,
// nothing synchronizes the host.
//
// DESIGN
//   bn_moments is one pass over x and deterministic (no atomics):
//   - moments_part_kernel: grid (ceil(c/32), gy), blocks of 32 channels x 8
//     row lanes (a warp reads 32 consecutive channels of a row: 64-128
//     contiguous bytes). Block y walks rows (y*8 + lane) + k*gy*8. Each
//     thread keeps sums shifted by its first value K, s1 = sum (x - K), s2 =
//     sum (x - K)^2, in double: mean = K + s1/n, M2 = s2 - s1^2/n, whose
//     cancellation is at most (K - mean)^2/var <= n - 1 units of 2^-53
//     (Samuelson's inequality: K is one of the n values), where a float sum
//     of squares would lose everything on data far from zero. Lane 0 of each
//     channel then merges the 8 lanes' (n, mean, M2) with Chan et al.'s
//     update (n = na + nb, d = mb - ma, mean = ma + d*nb/n, M2 = M2a + M2b +
//     d^2*na*nb/n) and writes one partial: part[(y*c + ch)*3 + {0,1,2}].
//     gy is at most 1024 / tiles: about 1024 blocks whatever the shape.
//   - moments_slot_kernel, one thread a channel: merges the gy partials in
//     order, writes mean as the float pair hi + lo and M2 as a float into
//     slot `rank`, zeros into every other slot.
//   bn_moments_merge: moments_merge_kernel, one thread a channel, the world
//   slots in order with the same update, as norm_sync_ref.c (so the same
//   bits on every replica: each runs the same kernel on the same slots).
//   Scratch: the partials, 3 * gy * c doubles, in the context's tmp buffer.
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "train/ops/cuda_int.h"

enum { MOM_CH = 32, MOM_LANES = 8, MOM_TARGET_BLOCKS = 1024, MOM_FIN_THREADS = 256 };

// (n, mean, M2) += (nb, mb, qb): Chan, Golub and LeVeque's pairwise update.
__device__ __forceinline__ void mom_merge(double &n, double &mean, double &m2, double nb,
                                          double mb, double qb)
{
    if (nb <= 0)
        return;
    double tot = n + nb, d = mb - mean;
    mean += d * (nb / tot);
    m2 += qb + d * d * (n * nb / tot);
    n = tot;
}

// part: (gy, c, 3) doubles (n, mean, M2) of block y's rows of each channel.
template <typename T>
__global__ void moments_part_kernel(int64_t rows, int c, const T *__restrict__ x,
                                    double *__restrict__ part)
{
    __shared__ double sn[MOM_CH * MOM_LANES], sm[MOM_CH * MOM_LANES], sq[MOM_CH * MOM_LANES];
    int tx = threadIdx.x % MOM_CH, lane = threadIdx.x / MOM_CH;
    int ch = blockIdx.x * MOM_CH + tx;
    double n = 0, k = 0, s1 = 0, s2 = 0;
    if (ch < c) {
        int64_t step = (int64_t)gridDim.y * MOM_LANES;
        for (int64_t r = (int64_t)blockIdx.y * MOM_LANES + lane; r < rows; r += step) {
            double v = (double)sl_ld(x + r * c + ch);
            if (n == 0)
                k = v;
            double d = v - k;
            s1 += d;
            s2 += d * d;
            n += 1;
        }
    }
    double mean = n > 0 ? k + s1 / n : 0.0, m2 = n > 0 ? s2 - s1 * s1 / n : 0.0;
    sn[threadIdx.x] = n;
    sm[threadIdx.x] = mean;
    sq[threadIdx.x] = m2 > 0 ? m2 : 0.0;
    __syncthreads();
    if (lane != 0 || ch >= c)
        return;
    n = sn[tx], mean = sm[tx], m2 = sq[tx];
    for (int l = 1; l < MOM_LANES; l++) {
        int i = l * MOM_CH + tx;
        mom_merge(n, mean, m2, sn[i], sm[i], sq[i]);
    }
    double *p = part + ((int64_t)blockIdx.y * c + ch) * 3;
    p[0] = n, p[1] = mean, p[2] = m2;
}

__global__ void moments_slot_kernel(int c, int gy, const double *__restrict__ part, int world,
                                    int rank, float *__restrict__ slots)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double n = 0, mean = 0, m2 = 0;
    for (int y = 0; y < gy; y++) {
        const double *p = part + ((int64_t)y * c + ch) * 3;
        mom_merge(n, mean, m2, p[0], p[1], p[2]);
    }
    int64_t per = (int64_t)SL_BN_MOMENT_FLOATS * c;
    for (int r = 0; r < world; r++) {
        float *s = slots + r * per;
        if (r == rank) {
            float hi = (float)mean;
            s[ch] = hi;
            s[c + ch] = (float)(mean - (double)hi);
            s[2 * c + ch] = (float)m2;
        } else {
            s[ch] = s[c + ch] = s[2 * c + ch] = 0.0f;
        }
    }
}

__global__ void moments_merge_kernel(int64_t rows, int c, int world,
                                     const float *__restrict__ slots, float *__restrict__ mean,
                                     float *__restrict__ var)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double n = 0, mu = 0, m2 = 0;
    int64_t per = (int64_t)SL_BN_MOMENT_FLOATS * c;
    for (int r = 0; r < world; r++) {
        const float *s = slots + r * per;
        mom_merge(n, mu, m2, (double)rows, (double)s[ch] + (double)s[c + ch],
                  (double)s[2 * c + ch]);
    }
    mean[ch] = (float)mu;
    var[ch] = n > 0 ? (float)(m2 / n) : 0.0f;
}

// ------------------------------------------------------------------ host side

static unsigned mom_chan_blocks(int c)
{
    return (unsigned)(((int64_t)c + MOM_FIN_THREADS - 1) / MOM_FIN_THREADS);
}

extern "C" int sl_bn_moments_cuda(sl_exec *e, int64_t rows, int c, const float *x, int world,
                                  int rank, float *slots)
{
    const char *fn = "sl_bn_moments_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    unsigned tiles = (unsigned)((c + MOM_CH - 1) / MOM_CH);
    int64_t need = (rows + MOM_LANES - 1) / MOM_LANES, cap = MOM_TARGET_BLOCKS / tiles;
    int gy = (int)(need < cap ? need : cap);
    if (gy < 1)
        gy = 1;
    double *part = (double *)sl_cuda_tmp(cx, (size_t)gy * (size_t)c * 3 * sizeof(double));
    if (!part)
        return sl_fail(SL_ECUDA, "%s: scratch for %d x %d partials: %s", fn, gy, c,
                       sl_errmsg());
    cudaStream_t s = cx->stream;
    dim3 grid(tiles, (unsigned)gy);
    rc = sl_act_switch(fn, e->act, [&](auto t) -> int {
        using T = decltype(t);
        moments_part_kernel<T><<<grid, MOM_CH * MOM_LANES, 0, s>>>(rows, c, (const T *)x,
                                                                    part);
        return SL_LAUNCHED("moments_part_kernel");
    });
    if (rc)
        return sl_fail(rc, "%s: %lld rows of %d channels: %s", fn, (long long)rows, c,
                       sl_errmsg());
    moments_slot_kernel<<<mom_chan_blocks(c), MOM_FIN_THREADS, 0, s>>>(c, gy, part, world,
                                                                       rank, slots);
    return SL_LAUNCHED("moments_slot_kernel");
}

extern "C" int sl_bn_moments_merge_cuda(sl_exec *e, int64_t rows, int c, int world,
                                        const float *slots, float *mean, float *var)
{
    const char *fn = "sl_bn_moments_merge_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    moments_merge_kernel<<<mom_chan_blocks(c), MOM_FIN_THREADS, 0, cx->stream>>>(
        rows, c, world, slots, mean, var);
    return SL_LAUNCHED("moments_merge_kernel");
}

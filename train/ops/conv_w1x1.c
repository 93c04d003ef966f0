/*
 * train/ops/conv_w1x1.c - backward-filter of a 1x1 convolution (pad 0,
 * stride 1 or 2) in bf16 on AVX512-BF16: dw[k][c] = sum over the output
 * positions m of dy[m][k] x[m][c], bf16 in, f32 out. ResNet-50 has 15 such
 * shapes (35 of its 53 convolutions).
 *
 * Why our own kernel. It is a GEMM whose sum runs over the long dimension
 * (N x P x Q rows), and oneDNN 2.6's jit_bf16_1x1 ran ResNet-50's at
 * 137-215 GFLOP/s on one Zen 4 core where its forward and backward-data
 * kernels reach about 215. The same work here takes 0.87-0.89x oneDNN's
 * time over the network's 1x1 backward-filters (perf/bwd_1x1.c, this
 * kernel alone, against perf/dnnl_conv.c; perf/RESULTS.md): a bf16
 * ResNet-50 step 0.977x.
 *
 * The kernel. vdpbf16ps adds the products of pairs of bf16 to an f32 lane,
 * so both operands are packed with pairs along m, two rows side by side
 * (one vpermt2w interleaves two rows' 32 channels): x in panels of 32
 * channels ([panel][pair][32][2]), dy in panels of 8 output channels
 * ([panel][pair][8][2], each pair a 32-bit broadcast). A block is 128 pairs
 * of rows; while it is packed, the next block's rows are prefetched to L2,
 * so the pack does not wait on memory. An 8 x 32 tile of dw lives in 16
 * registers over a block's 128 pairs.
 *
 * Numbers: the products of bf16 pairs are exact in f32 and accumulate in
 * f32, as oneDNN's do, in another order, so dw differs from oneDNN's in its
 * last bits; tests/train/ops/test_bf16_cpu.c holds it to a double sum of the
 * same bf16 products within f32's accumulation bound. Every dw element is
 * summed over m in the same order whatever the thread count (threads take
 * whole tiles: output-channel groups of 64 and input-channel blocks of
 * 256), so any thread count gives the same bits.
 *
 * Used when the exec's activations are bf16, the CPU has AVX512-BF16
 * (conv_dnnl.c also asks oneDNN's ISA, so DNNL_MAX_CPU_ISA caps it too),
 * c % 32 == 0, k % 64 == 0, N x P x Q even, on more than one thread at
 * least as many pieces as threads (a piece: 256 input channels x a share of
 * the output-channel groups; oneDNN's kernel uses every thread on any
 * shape), and SLUICE_CONV_W1X1 is not 0 (0: oneDNN's kernels, for
 * comparison). On one replica of 2 threads at batch 32 the backward-filter
 * took 0.69-0.76 s a step against oneDNN's 0.82 (build/train_cpu --threads
 * 2, two alternations).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "train/ops/cpu_int.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define W1_BUILT 1
#include <immintrin.h>
#define W1_PACK __attribute__((target("avx512f,avx512bw")))
#define W1_DOT __attribute__((target("avx512f,avx512bw,avx512bf16")))
#else
#define W1_BUILT 0
#endif

#define MR 8   /* output channels a tile */
#define NR 32  /* input channels a tile: two vectors of 16 */
#define KC 128 /* pairs of rows a block */
#define CB 256 /* input channels a packed block of x */
#define KG 64  /* output channels a packed block of dy */

int sl_conv_w1x1_ok(const sl_exec *e, const sl_conv_shape *sh)
{
#if W1_BUILT
    if (e->act != SL_DTYPE_BF16 || sh->r != 1 || sh->s != 1 || sh->pad != 0 ||
        (sh->stride != 1 && sh->stride != 2) || sh->c % 32 || sh->k % KG ||
        ((int64_t)sh->n * sh->p * sh->q) % 2)
        return 0;
    /* threads take whole pieces (input-channel blocks x output-channel
     * groups, sl_conv_w1x1_filter): fewer pieces than threads would leave
     * threads idle where oneDNN uses them all */
    int threads = e->threads > 0 ? e->threads : 1, nkg = sh->k / KG;
    if (threads > 1 && (sh->c + CB - 1) / CB * (threads < nkg ? threads : nkg) < threads)
        return 0;
    return sl_own_bf16_kernel("SLUICE_CONV_W1X1");
#else
    (void)e, (void)sh;
    return 0;
#endif
}

#if W1_BUILT
typedef struct w1 {
    const sl_conv_shape *sh;
    const uint16_t *x, *dy;
    int64_t m; /* rows: n * p * q */
} w1;

/* x's row for output position m */
static const uint16_t *xrow(const w1 *a, int64_t m)
{
    const sl_conv_shape *sh = a->sh;
    int64_t pq = (int64_t)sh->p * sh->q, n = m / pq, r = m % pq;
    int64_t y = r / sh->q * sh->stride, x = r % sh->q * sh->stride;
    return a->x + ((n * sh->h + y) * sh->w + x) * sh->c;
}

/* vpermt2w indices: lo interleaves elements 0..15 of two rows, hi 16..31 */
#define LO_IDX                                                                                    \
    _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,  \
                     37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0)
#define HI_IDX                                                                                    \
    _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,  \
                     22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16)

/* x's rows m0 .. m0 + 2np, channels c0 .. c0 + cb, into NR-channel panels;
 * the next block's rows prefetched */
W1_PACK static void pack_x(const w1 *a, int64_t m0, int np, int c0, int cb, uint16_t *bp)
{
    const __m512i lo = LO_IDX, hi = HI_IDX;
    for (int p = 0; p < np; p++) {
        const uint16_t *r0 = xrow(a, m0 + 2 * p), *r1 = xrow(a, m0 + 2 * p + 1);
        for (int j = 0; j < 2 && m0 + 2 * np + 2 * p + j < a->m; j++) {
            const uint16_t *q = xrow(a, m0 + 2 * np + 2 * p + j) + c0;
            for (int c = 0; c < cb; c += 32)
                _mm_prefetch((const char *)(q + c), _MM_HINT_T1);
        }
        for (int c = 0; c < cb; c += 32) {
            __m512i u = _mm512_loadu_si512(r0 + c0 + c), v = _mm512_loadu_si512(r1 + c0 + c);
            uint16_t *d = bp + ((int64_t)(c / NR) * np + p) * NR * 2;
            _mm512_storeu_si512(d, _mm512_permutex2var_epi16(u, lo, v));
            _mm512_storeu_si512(d + 32, _mm512_permutex2var_epi16(u, hi, v));
        }
    }
}

/* dy's rows m0 .. m0 + 2np, channels k0 .. k0 + KG, into MR-channel panels;
 * the next block's rows prefetched */
W1_PACK static void pack_dy(const w1 *a, int64_t m0, int np, int k0, uint16_t *ap)
{
    const __m512i lo = LO_IDX, hi = HI_IDX;
    const int64_t k = a->sh->k;
    for (int p = 0; p < np; p++) {
        const uint16_t *r0 = a->dy + (m0 + 2 * p) * k + k0, *r1 = r0 + k;
        if (m0 + 2 * np + 2 * p + 1 < a->m)
            for (int j = 0; j < KG; j += 32) {
                _mm_prefetch((const char *)(r0 + 2 * np * k + j), _MM_HINT_T1);
                _mm_prefetch((const char *)(r1 + 2 * np * k + j), _MM_HINT_T1);
            }
        for (int j = 0; j < KG; j += 32) {
            __m512i u = _mm512_loadu_si512(r0 + j), v = _mm512_loadu_si512(r1 + j);
            __m512i l = _mm512_permutex2var_epi16(u, lo, v), h = _mm512_permutex2var_epi16(u, hi, v);
            __m256i part[4] = {_mm512_castsi512_si256(l), _mm512_extracti64x4_epi64(l, 1),
                               _mm512_castsi512_si256(h), _mm512_extracti64x4_epi64(h, 1)};
            for (int q = 0; q < 4; q++)
                _mm256_storeu_si256((__m256i *)(void *)(ap + ((int64_t)(j / MR + q) * np + p) *
                                                                 MR * 2),
                                    part[q]);
        }
    }
}

/* The MR x NR tile of dw (row stride ldw) += dy panel . x panel over np
 * pairs; first: = instead of += */
W1_DOT static void tile(const uint16_t *ap, const uint16_t *bp, int np, float *dw, int ldw,
                        int first)
{
    __m512 c[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            c[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(dw + (int64_t)i * ldw + 16 * j);
    const uint32_t *a = (const uint32_t *)(const void *)ap;
    for (int p = 0; p < np; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + (int64_t)p * NR * 2);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (int64_t)p * NR * 2 + 32);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[p * MR + i]);
            c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
            c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            _mm512_storeu_ps(dw + (int64_t)i * ldw + 16 * j, c[i][j]);
}

/* One piece of the work: input channels c0 .. c0 + cb, output channels of
 * the groups kg0 .. kg1 (KG each), every row, blocks in row order. */
static void piece(const w1 *a, int c0, int cb, int kg0, int kg1, float *dw, uint16_t *ap,
                  uint16_t *bp)
{
    const int c = a->sh->c;
    for (int64_t m0 = 0; m0 < a->m; m0 += 2 * KC) {
        int np = (int)((a->m - m0) / 2 < KC ? (a->m - m0) / 2 : KC);
        pack_x(a, m0, np, c0, cb, bp);
        for (int g = kg0; g < kg1; g++) {
            pack_dy(a, m0, np, g * KG, ap);
            for (int kq = 0; kq < KG / MR; kq++)
                for (int cq = 0; cq < cb / NR; cq++)
                    tile(ap + (int64_t)kq * np * MR * 2, bp + (int64_t)cq * np * NR * 2, np,
                         dw + (int64_t)(g * KG + kq * MR) * c + c0 + cq * NR, c, m0 == 0);
        }
    }
}
#endif

int sl_conv_w1x1_filter(sl_exec *e, const sl_conv_shape *sh, const uint16_t *x,
                        const uint16_t *dy, float *dw)
{
#if W1_BUILT
    w1 a = {sh, x, dy, (int64_t)sh->n * sh->p * sh->q};
    int threads = e->threads > 0 ? e->threads : 1;
    int ncb = (sh->c + CB - 1) / CB, nkg = sh->k / KG;
    /* pieces: every input-channel block, its output-channel groups split in
     * `split` runs (one run: x packed once a block) */
    int split = threads > 1 ? (threads < nkg ? threads : nkg) : 1;
    int pieces = ncb * split;
    if (threads > pieces)
        threads = pieces;
    size_t per = (size_t)KG * KC * 2 + (size_t)CB * KC * 2; /* uint16_t: dy and x panels */
    uint16_t *s = sl_exec_scratch(e, per * (size_t)threads * sizeof *s);
    if (!s)
        return sl_fail(SL_ENOMEM, "sl_conv_w1x1_filter: scratch: %s", sl_errmsg());
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int i = 0; i < pieces; i++) {
#ifdef _OPENMP
        uint16_t *ap = s + per * (size_t)omp_get_thread_num();
#else
        uint16_t *ap = s;
#endif
        int cbk = i / split, r = i % split, c0 = cbk * CB;
        int cb = sh->c - c0 < CB ? sh->c - c0 : CB;
        piece(&a, c0, cb, nkg * r / split, nkg * (r + 1) / split, dw, ap,
              ap + (size_t)KG * KC * 2);
    }
    return SL_OK;
#else
    (void)e, (void)sh, (void)x, (void)dy, (void)dw;
    return sl_fail(SL_ENOTSUP, "sl_conv_w1x1_filter: not built for this CPU");
#endif
}

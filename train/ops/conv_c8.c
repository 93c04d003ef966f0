/*
 * train/ops/conv_c8.c - the 3x3 convolution of 8 channels to 8 (stride 1,
 * pad 1) in bf16 on AVX512-BF16: forward, backward-data and
 * backward-filter, the demo's first stage (ResNet-20 at width 8 on 28 px:
 * six such convs a step).
 *
 * Why our own kernel. oneDNN's bf16 kernels block channels by 16 (its
 * jit_bf16 and brgconv take 8 channels as 16 with half the lanes idle), and
 * at 8 channels they ran at about half their 16-channel rate: 0.24 ms
 * forward, 0.30 backward-data and 0.30 backward-filter for batch 32 at
 * 28x28 on one Zen 4 core, against 0.11-0.16 for the same flops at 16
 * channels
 * (perf/dnnl_conv.c --demo --all lists every implementation oneDNN has;
 * none is faster). Here the 16 lanes are 16 pixels of a row instead, so no
 * lane idles but the tail of a row (28 = 16 + 12).
 *
 * The kernel. vdpbf16ps multiplies pairs of bf16 and adds both products to
 * an f32 lane. An input row is first laid out as four planes of channel
 * pairs (xp: plane j holds channels 2j and 2j+1 of every pixel, one 32-bit
 * word each, with a zero word on both sides for the padding, rows of zeros
 * above and below), so a vector of 16 consecutive pixels of one pair is
 * one load. Output channel o of 16 pixels accumulates, over the 3x3 taps
 * and the 4 pairs, dpbf16(pixels, broadcast weight pair (o, tap, pair)):
 * 36 products a pixel-vector and channel; two vectors of a row (32 pixels)
 * at once, 16 accumulators, each broadcast weight used twice. The 8
 * accumulators of 16 pixels are then rounded to bf16 (vcvtneps2bf16,
 * round-to-nearest-even, what oneDNN's kernels use) and transposed to NHWC
 * with two rounds of vpermt2w. Backward-data is the same convolution of dy
 * with the weights flipped and transposed, w'[c][r][s][o] = w[o][2-r][2-s][c].
 * Backward-filter sums over pixels, so there the pairs are pixel pairs
 * (filter_image says how) and the 16 lanes two input channels x 8 output
 * channels; each image's sums are kept apart and added in image order.
 *
 * Numbers: the products of bf16 pairs are exact in f32 and accumulate in
 * f32 as in oneDNN; tests/train/ops/test_bf16_cpu.c holds the output to
 * the ref's within bf16's rounding bound, and to oneDNN's own within one
 * bf16 ulp. Images are independent: any thread count gives the same bits.
 *
 * Used when the exec's activations are bf16, the CPU has AVX512-BF16
 * (conv_dnnl.c also asks oneDNN's ISA, so DNNL_MAX_CPU_ISA caps it too) and
 * SLUICE_CONV_C8 is not 0 (0: oneDNN's kernels, for comparison).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "train/ops/cpu_int.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define C8_BUILT 1
#include <immintrin.h>
#define C8_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#else
#define C8_BUILT 0
#endif

/* 32-bit words of one padded plane row: a zero word, the pixels, zeros;
 * the last pair of vectors (32 pixels from b0, shifted up to 2) reads up to
 * word b0 + 33, so whole 32s and 16 more. */
static int plane_words(int w) { return ((w - 1) / 32 + 1) * 32 + 16; }

static size_t image_words(const sl_conv_shape *sh)
{
    return (size_t)(sh->h + 2) * 4 * (size_t)plane_words(sh->w);
}

int sl_conv_c8_ok(const sl_exec *e, const sl_conv_shape *sh)
{
#if C8_BUILT
    if (e->act != SL_DTYPE_BF16 || sh->c != 8 || sh->k != 8 || sh->r != 3 || sh->s != 3 ||
        sh->stride != 1 || sh->pad != 1)
        return 0;
    return sl_own_bf16_kernel("SLUICE_CONV_C8");
#else
    (void)e, (void)sh;
    return 0;
#endif
}

#if C8_BUILT
/* The weight pairs w2[((r*3 + s)*4 + j)*8 + o] = (w[o][r][s][2j],
 * w[o][r][s][2j+1]) of OHWI bf16 weights, low half first as in memory;
 * flipped for backward-data: (w[2j][2-r][2-s][o], w[2j+1][2-r][2-s][o]). */
static void pack_weights(const uint16_t *w, int flip, uint32_t *w2)
{
    for (int r = 0; r < 3; r++)
        for (int s = 0; s < 3; s++)
            for (int j = 0; j < 4; j++)
                for (int o = 0; o < 8; o++) {
                    uint32_t lo, hi;
                    if (!flip) {
                        const uint16_t *t = w + ((o * 3 + r) * 3 + s) * 8 + 2 * j;
                        lo = t[0], hi = t[1];
                    } else {
                        lo = w[((2 * j * 3 + 2 - r) * 3 + 2 - s) * 8 + o];
                        hi = w[(((2 * j + 1) * 3 + 2 - r) * 3 + 2 - s) * 8 + o];
                    }
                    w2[((r * 3 + s) * 4 + j) * 8 + o] = lo | hi << 16;
                }
}

/* vpermt2w indices of the transpose: rows R[q] = (channel 2q | 2q+1) x 16
 * pixels -> A, B = 8 pixels x channels 0-3, 4-7 (t1[k], pixels 8k..) ->
 * 4 pixels x 8 channels, NHWC (t2[m], pixels 4m.. of the 8). */
static void transpose_index(uint16_t t1[2][32], uint16_t t2[2][32])
{
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 8; p++)
            for (int o = 0; o < 4; o++)
                t1[k][p * 4 + o] = (uint16_t)((o >> 1) * 32 + (o & 1) * 16 + 8 * k + p);
    for (int m = 0; m < 2; m++)
        for (int p = 0; p < 4; p++)
            for (int o = 0; o < 8; o++)
                t2[m][p * 8 + o] = (uint16_t)((o >> 2) * 32 + (4 * m + p) * 4 + (o & 3));
}

/* One image's rows as planes of channel pairs (above): 16 pixels' 4 pairs
 * are 4 vectors of 4 pixels x 4 pairs; a permute puts each vector's pairs
 * together and a 4x4 transpose of 128-bit lanes gives one vector per pair. */
C8_TARGET static void to_planes(const sl_conv_shape *sh, const uint32_t *x, uint32_t *xp)
{
    const int W = sh->w, WP = plane_words(W);
    const __m512i jm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    memset(xp, 0, (size_t)4 * WP * sizeof *xp);
    memset(xp + (size_t)(sh->h + 1) * 4 * WP, 0, (size_t)4 * WP * sizeof *xp);
    for (int h = 0; h < sh->h; h++) {
        uint32_t *row = xp + (size_t)(h + 1) * 4 * WP;
        const uint32_t *src = x + (size_t)h * W * 4;
        for (int j = 0; j < 4; j++)
            row[j * WP] = 0;
        for (int w = 0; w < WP - 1; w += 16) {
            __m512i v[4];
            for (int q = 0; q < 4; q++) {
                int p = w + 4 * q, np = W - p < 0 ? 0 : W - p > 4 ? 4 : W - p;
                v[q] = _mm512_permutexvar_epi32(
                    jm, _mm512_maskz_loadu_epi32((__mmask16)((1u << (4 * np)) - 1),
                                                 np ? src + 4 * p : src));
            }
            __m512i t0 = _mm512_shuffle_i32x4(v[0], v[1], 0x44),
                    t1 = _mm512_shuffle_i32x4(v[0], v[1], 0xee),
                    t2 = _mm512_shuffle_i32x4(v[2], v[3], 0x44),
                    t3 = _mm512_shuffle_i32x4(v[2], v[3], 0xee);
            int n = WP - 1 - w < 16 ? WP - 1 - w : 16;
            __mmask16 m = (__mmask16)((1u << n) - 1);
            _mm512_mask_storeu_epi32(row + 0 * WP + 1 + w, m, _mm512_shuffle_i32x4(t0, t2, 0x88));
            _mm512_mask_storeu_epi32(row + 1 * WP + 1 + w, m, _mm512_shuffle_i32x4(t0, t2, 0xdd));
            _mm512_mask_storeu_epi32(row + 2 * WP + 1 + w, m, _mm512_shuffle_i32x4(t1, t3, 0x88));
            _mm512_mask_storeu_epi32(row + 3 * WP + 1 + w, m, _mm512_shuffle_i32x4(t1, t3, 0xdd));
        }
    }
}

/* The 8 accumulators of 16 pixels from p0 as bf16, NHWC, into row y (W
 * pixels; those past W are not written). */
C8_TARGET static void store_nhwc(const __m512 *acc, const uint16_t t1[2][32],
                                 const uint16_t t2[2][32], int p0, int W, uint16_t *y)
{
    __m512i R[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        R[q] = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(acc[2 * q])),
                                  (__m256i)_mm512_cvtneps_pbh(acc[2 * q + 1]), 1);
    for (int k = 0; k < 2; k++) {
        __m512i i1 = _mm512_loadu_si512(t1[k]);
        __m512i A = _mm512_permutex2var_epi16(R[0], i1, R[1]);
        __m512i B = _mm512_permutex2var_epi16(R[2], i1, R[3]);
        for (int m = 0; m < 2; m++) {
            int p = p0 + 8 * k + 4 * m;
            if (p >= W)
                return;
            int np = W - p < 4 ? W - p : 4;
            __mmask32 mk = np == 4 ? 0xffffffffu : (1u << (np * 8)) - 1;
            _mm512_mask_storeu_epi16(y + (size_t)p * 8, mk,
                                     _mm512_permutex2var_epi16(A, _mm512_loadu_si512(t2[m]), B));
        }
    }
}

/* One image: x (h, w, 8) -> y (h, w, 8); xp its planes' scratch. */
C8_TARGET static void conv_image(const sl_conv_shape *sh, const uint16_t *x, const uint32_t *w2,
                                 const uint16_t t1[2][32], const uint16_t t2[2][32],
                                 uint16_t *y, uint32_t *xp)
{
    const int W = sh->w, WP = plane_words(W);
    to_planes(sh, (const uint32_t *)x, xp);
    for (int h = 0; h < sh->h; h++)
        for (int b0 = 0; b0 < W; b0 += 32) {
            __m512 a0[8], a1[8];
#pragma GCC unroll 8
            for (int o = 0; o < 8; o++)
                a0[o] = _mm512_setzero_ps(), a1[o] = _mm512_setzero_ps();
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    for (int j = 0; j < 4; j++) {
                        const uint32_t *src = xp + ((size_t)(h + r) * 4 + j) * WP + b0 + s;
                        __m512bh v0 = (__m512bh)_mm512_loadu_si512(src);
                        __m512bh v1 = (__m512bh)_mm512_loadu_si512(src + 16);
                        const uint32_t *wv = w2 + ((r * 3 + s) * 4 + j) * 8;
#pragma GCC unroll 8
                        for (int o = 0; o < 8; o++) {
                            __m512bh wb = (__m512bh)_mm512_set1_epi32((int)wv[o]);
                            a0[o] = _mm512_dpbf16_ps(a0[o], v0, wb);
                            a1[o] = _mm512_dpbf16_ps(a1[o], v1, wb);
                        }
                    }
            uint16_t *yrow = y + (size_t)h * W * 8;
            store_nhwc(a0, t1, t2, b0, W, yrow);
            if (b0 + 16 < W)
                store_nhwc(a1, t1, t2, b0 + 16, W, yrow);
        }
}

/* ---------------------------------------------------- backward-filter */

/* Words of one row of pixel pairs: (W + 1) / 2 pairs and one more (the
 * shifted pairs read one past), 8 channels each, rounded up to an even
 * count of pairs (to_pairs writes two at a time). */
static int pair_words(int w) { return ((w + 1) / 2 + 2) / 2 * 16; }

/* A row (W pixels of 8 bf16) as pixel pairs: out[wp*8 + c] = (row[2wp + off][c],
 * row[2wp + off + 1][c]), low half first; pixels outside the row are 0.
 * off 0: the even pairs, -1: the odd ones (-1, 0), (1, 2), ... Two pairs
 * (4 pixels, one 64-byte load) a step: vpermw interleaves their halves. */
C8_TARGET static void to_pairs(const uint16_t *row, int W, int off, uint32_t *out)
{
    static const uint16_t il[32] = {0,  8,  1,  9,  2,  10, 3,  11, 4,  12, 5,  13, 6,  14, 7,  15,
                                    16, 24, 17, 25, 18, 26, 19, 27, 20, 28, 21, 29, 22, 30, 23, 31};
    const __m512i ix = _mm512_loadu_si512(il);
    int np = (W + 1) / 2 + 1, wp = 0;
    if (off < 0) { /* (-1, 0): pixel 0 in the high halves */
        for (int c = 0; c < 8; c++)
            out[c] = W > 0 ? (uint32_t)row[c] << 16 : 0;
        wp = 1;
        if (wp < np) { /* and (1, 2) alone, so the loop below starts even */
            for (int c = 0; c < 8; c++)
                out[8 + c] = (W > 1 ? row[8 + c] : 0) | (uint32_t)(W > 2 ? row[16 + c] : 0) << 16;
            wp = 2;
        }
    }
    for (; wp < np; wp += 2) {
        int p = 2 * wp + off; /* >= 0 */
        uint32_t m = 0;
        for (int i = 0; i < 4; i++)
            if (p + i < W)
                m |= 0xffu << (8 * i);
        __m512i v = _mm512_maskz_loadu_epi16((__mmask32)m, m ? row + (size_t)p * 8 : row);
        _mm512_storeu_si512(out + wp * 8, _mm512_permutexvar_epi16(ix, v));
    }
}

/* One image's dw partial: part[((r*3 + s)*4 + g)*16 + l], lane l = (c - 2g)*8 + o,
 * the sum over the image's pixels of x[h+r-1][w+s-1][c] dy[h][w][o]. The
 * pairs run over pixels: lane (c, o) of dpbf16 multiplies (x[w'][c],
 * x[w'+1][c]) by (dy[w][o], dy[w+1][o]) for w even, w' = w + s - 1. Each x
 * row meets three dy rows (hh + 1, hh, hh - 1: r = 0, 1, 2; a row of
 * zeros past the edges): an x pair vector ([c x8 | c+1 x8], one vpermd) is
 * used by all three, so the 18 accumulators of half the channel pairs
 * stay in registers along the row; the two halves take turns. */
C8_TARGET static void filter_image(const sl_conv_shape *sh, const uint16_t *x, const uint16_t *dy,
                                   float *part, uint32_t *scratch)
{
    const int H = sh->h, W = sh->w, NP = (W + 1) / 2, PW = pair_words(W);
    /* xe, xo: the x row's even and odd pairs; dp: dy rows h % 3, and zeros */
    uint32_t *xe = scratch, *xo = xe + PW, *dp = xo + PW, *zero = dp + 3 * (size_t)PW;
    memset(zero, 0, (size_t)PW * sizeof *zero);
    __m512 acc[2][3][3][2]; /* [half][r][s][g within the half] */
    memset(acc, 0, sizeof acc);
    __m512i gi[4];
    for (int g = 0; g < 4; g++)
        gi[g] = _mm512_setr_epi32(2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g,
                                  2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1,
                                  2 * g + 1, 2 * g + 1, 2 * g + 1);
    if (H > 0)
        to_pairs(dy, W, 0, dp);
    for (int hh = 0; hh < H; hh++) {
        const uint16_t *xrow = x + (size_t)hh * W * 8;
        to_pairs(xrow, W, 0, xe);
        to_pairs(xrow, W, -1, xo);
        if (hh + 1 < H) /* dy row hh + 1, first met here */
            to_pairs(dy + (size_t)(hh + 1) * W * 8, W, 0, dp + (size_t)((hh + 1) % 3) * PW);
        const uint32_t *d[3]; /* r = 0, 1, 2: dy rows hh + 1, hh, hh - 1 */
        for (int r = 0; r < 3; r++) {
            int h = hh - r + 1;
            d[r] = h < 0 || h >= H ? zero : dp + (size_t)(h % 3) * PW;
        }
        for (int half = 0; half < 2; half++) {
            __m512 a[3][3][2];
            memcpy(a, acc[half], sizeof a);
            const __m512i g0 = gi[2 * half], g1 = gi[2 * half + 1];
            for (int wp = 0; wp < NP; wp++) {
                __m512bh b[3];
#pragma GCC unroll 3
                for (int r = 0; r < 3; r++)
                    b[r] = (__m512bh)_mm512_broadcast_i64x4(
                        _mm256_loadu_si256((const void *)(d[r] + wp * 8)));
                const uint32_t *src[3] = {xo + wp * 8, xe + wp * 8, xo + (wp + 1) * 8};
#pragma GCC unroll 3
                for (int s = 0; s < 3; s++) {
                    __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const void *)src[s]));
                    __m512bh v0 = (__m512bh)_mm512_permutexvar_epi32(g0, v);
                    __m512bh v1 = (__m512bh)_mm512_permutexvar_epi32(g1, v);
#pragma GCC unroll 3
                    for (int r = 0; r < 3; r++) {
                        a[r][s][0] = _mm512_dpbf16_ps(a[r][s][0], v0, b[r]);
                        a[r][s][1] = _mm512_dpbf16_ps(a[r][s][1], v1, b[r]);
                    }
                }
            }
            memcpy(acc[half], a, sizeof a);
        }
    }
    for (int half = 0; half < 2; half++)
        for (int r = 0; r < 3; r++)
            for (int s = 0; s < 3; s++)
                for (int g = 0; g < 2; g++)
                    _mm512_storeu_ps(part + ((r * 3 + s) * 4 + 2 * half + g) * 16,
                                     acc[half][r][s][g]);
}
#endif

#if C8_BUILT
/* The OpenMP team of a call: e's threads, at most one an image. */
static int team_size(const sl_exec *e, const sl_conv_shape *sh)
{
    int threads = e->threads > 0 ? e->threads : 1;
    return threads < sh->n ? threads : sh->n > 0 ? sh->n : 1;
}

static int team_rank(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
#endif

int sl_conv_c8(sl_exec *e, const sl_conv_shape *sh, const uint16_t *x, const uint16_t *w,
               uint16_t *y, int bwd_data)
{
#if C8_BUILT
    int threads = team_size(e, sh);
    size_t iw = (image_words(sh) + 15) / 16 * 16;
    uint32_t *s = sl_exec_scratch(e, (288 + 32 + iw * (size_t)threads) * sizeof *s);
    if (!s)
        return sl_fail(SL_ENOMEM, "sl_conv_c8: scratch: %s", sl_errmsg());
    uint32_t *w2 = s, *planes = s + 288 + 32;
    uint16_t t1[2][32], t2[2][32];
    pack_weights(w, bwd_data, w2);
    transpose_index(t1, t2);
    const size_t per = (size_t)sh->h * sh->w * 8;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int i = 0; i < sh->n; i++)
        conv_image(sh, x + i * per, w2, (const uint16_t(*)[32])t1, (const uint16_t(*)[32])t2,
                   y + i * per, planes + (size_t)team_rank() * iw);
    return SL_OK;
#else
    (void)e, (void)sh, (void)x, (void)w, (void)y, (void)bwd_data;
    return sl_fail(SL_ENOTSUP, "sl_conv_c8: not built for this CPU");
#endif
}

int sl_conv_c8_filter(sl_exec *e, const sl_conv_shape *sh, const uint16_t *x, const uint16_t *dy,
                      float *dw)
{
#if C8_BUILT
    int threads = team_size(e, sh);
    /* per thread: xe, xo, 3 dy rows and a row of zeros, 64-byte aligned */
    size_t sw = (size_t)6 * pair_words(sh->w);
    float *part = sl_exec_scratch(e, ((size_t)sh->n * 576 + sw * (size_t)threads) * 4 + 64);
    if (!part)
        return sl_fail(SL_ENOMEM, "sl_conv_c8_filter: scratch: %s", sl_errmsg());
    uint32_t *scr = (uint32_t *)(void *)(part + (size_t)sh->n * 576);
    const size_t per = (size_t)sh->h * sh->w * 8;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int i = 0; i < sh->n; i++)
        filter_image(sh, x + i * per, dy + i * per, part + (size_t)i * 576,
                     scr + (size_t)team_rank() * sw);
    /* the images' partials in image order (any thread count: the same
     * bits), lane (c - 2g)*8 + o of (r, s, g) -> dw[o][r][s][c] */
    for (int o = 0; o < 8; o++)
        for (int t = 0; t < 9; t++)
            for (int c = 0; c < 8; c++) {
                size_t at = ((size_t)t * 4 + c / 2) * 16 + (c & 1) * 8 + o;
                float sum = 0;
                for (int i = 0; i < sh->n; i++)
                    sum += part[(size_t)i * 576 + at];
                dw[(o * 9 + t) * 8 + c] = sum;
            }
    return SL_OK;
#else
    (void)e, (void)sh, (void)x, (void)dy, (void)dw;
    return sl_fail(SL_ENOTSUP, "sl_conv_c8_filter: not built for this CPU");
#endif
}

/*
 * train/ops/norm_avx512.c - norm_cpu.c's four bf16 training passes written
 * with AVX-512 intrinsics, for channel counts that are multiples of 32 up
 * to BN512_MAX_C (all of ResNet-50's): the statistics of a block, the apply
 * (+ shortcut, ReLU), the backward sums (ReLU mask) and dx. Each gives the
 * bits of its norm_kern_cpu.h kernel: the same float operations per element
 * in the same order (no FMA: fp-contract off below), the sums in row order
 * per channel, bf16 rounded to nearest even with cpu_int.h's
 * sl_bf16_rbits' integer steps (vcvtneps2bf16 flushes subnormals: not
 * used).
 *
 * Why not gcc's vectorization of norm_kern_cpu.h. With the channel count a
 * variable, gcc vectorizes each row's channel loop on its own, widening 16
 * bf16 with vpmovzxwd and narrowing with vpermt2w and masked tails, the
 * per-channel sums through memory every row; the passes ran at 0.5-0.8 ns
 * an element at ResNet-50's shapes, compute-bound (the same time with the
 * data in L2), 4-9x a copy of the same bytes (perf/RESULTS.md, issue 40,
 * 2026-12-07). Here one 64-byte load is 32 channels, and no lane crosses:
 * a shift and a mask make two float vectors of it, the even channels and
 * the odd ones (lane i: channels 2i and 2i + 1 of the group), and one
 * ternary-logic op packs two rounded vectors back into one store. The
 * per-channel constants are laid out the same way once a call (split),
 * and the sums are put back in channel order at the end of a block
 * (merge). The statistics' sums stay in registers over a block's rows,
 * 128 channels at a time; the backward sums over a slice of rows
 * (sums_slice), 64 at a time. Reentrant: the scratch is the stack.
 *
 * Used when the CPU has AVX-512 F, BW and DQ (__builtin_cpu_supports), c is
 * a multiple of 32 and at most BN512_MAX_C (the split constants live on
 * the stack), and SLUICE_BN_AVX512 is not 0 (read once; 0 gives
 * norm_kern_cpu.h's loops, for comparison); sl_bn512_set overrides that for
 * tests. Arguments as norm_kern_cpu.h's kernels.
 */
#include <stdint.h>
#include <stdlib.h> /* getenv */
#include <string.h>

#include "train/ops/cpu_int.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define BN512_BUILT 1
#include <immintrin.h>
#define BN512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq")))
#define BN512_INLINE BN512_TARGET static inline __attribute__((always_inline))
#ifndef __clang__
#pragma GCC optimize("fp-contract=off")
#endif
#else
#define BN512_BUILT 0
#endif

/* The most channels the split constants may have (4 arrays of floats on
 * the stack: 32 KiB). */
#define BN512_MAX_C 2048

static int bn512_mode = -1; /* -1 not yet read, 0 off, 1 on */

static int cpu_has(void)
{
#if BN512_BUILT
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

void sl_bn512_set(int mode)
{
    __atomic_store_n(&bn512_mode, mode < 0 ? -1 : mode && cpu_has(), __ATOMIC_RELAXED);
}

int sl_bn512_ok(int c)
{
    if (c % 32 || c > BN512_MAX_C)
        return 0;
    int m = __atomic_load_n(&bn512_mode, __ATOMIC_RELAXED);
    if (m < 0) { /* replicas may race here: each stores the same answer */
        const char *v = getenv("SLUICE_BN_AVX512");
        m = !(v && !strcmp(v, "0")) && cpu_has();
        __atomic_store_n(&bn512_mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

#if BN512_BUILT

/* 32 bf16 at p as two float vectors (exact): lane i of *e channel 2i, of
 * *o channel 2i + 1. */
BN512_INLINE void ld32(const uint16_t *p, __m512 *e, __m512 *o)
{
    __m512i w = _mm512_loadu_si512((const void *)p);
    *e = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    *o = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}

/* sl_bf16_rbits without its final mask: nearest even in the high half (a
 * NaN made quiet), the low half not yet cleared. */
BN512_INLINE __m512i rbits_hi(__m512 f)
{
    __m512i u = _mm512_castps_si512(f);
    __mmask16 nan = _mm512_fpclass_ps_mask(f, 0x81); /* QNaN | SNaN */
    __m512i rn = _mm512_add_epi32(
        _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
        _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    return _mm512_mask_or_epi32(rn, nan, u, _mm512_set1_epi32(0x400000));
}

/* f rounded to bf16, kept as a float (sl_bf16_round). */
BN512_INLINE __m512 rnd(__m512 f)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(rbits_hi(f), _mm512_set1_epi32((int)0xffff0000u)));
}

/* Store 32 bf16 from the high halves of e's and o's lanes (rbits_hi or
 * rnd values): (e >> 16) | (o & 0xffff0000). */
BN512_INLINE void st32(uint16_t *p, __m512i e, __m512i o)
{
    __m512i v = _mm512_ternarylogic_epi32(_mm512_srli_epi32(e, 16), o,
                                          _mm512_set1_epi32((int)0xffff0000u), 0xf8);
    _mm512_storeu_si512((void *)p, v);
}

/* v < 0 ? 0 : v (-0.0 and NaN pass, as the C expression). */
BN512_INLINE __m512 relu(__m512 v)
{
    __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(v, neg, _mm512_setzero_ps());
}

/* Per-channel constants in the load order: group j's 16 even channels,
 * then its 16 odd ones (s[32j + i] = p[32j + 2i], s[32j + 16 + i] =
 * p[32j + 2i + 1]). */
BN512_INLINE void split(int c, const float *p, float *s)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                         28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    for (int ch = 0; ch < c; ch += 32) {
        __m512 a = _mm512_loadu_ps(p + ch), b = _mm512_loadu_ps(p + ch + 16);
        _mm512_storeu_ps(s + ch, _mm512_permutex2var_ps(a, ie, b));
        _mm512_storeu_ps(s + ch + 16, _mm512_permutex2var_ps(a, io, b));
    }
}

/* The inverse for one group: p[0..32) in channel order from e and o. */
BN512_INLINE void merge(float *p, __m512 e, __m512 o)
{
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,
                                         23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    _mm512_storeu_ps(p, _mm512_permutex2var_ps(e, lo, o));
    _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(e, hi, o));
}

/* ------------------------------------------------------------ statistics */

/* Channels [0, 32*G) of stats_block (xb at the group's first channel):
 * the block's float mean, then the sums of d and d^2 (norm_kern_cpu.h
 * stats_block_c). The first look also prefetches the same channels of
 * the block after this one (stats_all's next; past the end harmless). */
BN512_INLINE void stats_group(const int G, int64_t nb, int c, const uint16_t *xb, float inv,
                              float *bmean, float *s1, float *s2)
{
    __m512 m[2 * 4], a1[2 * 4], a2[2 * 4];
    for (int g = 0; g < 2 * G; g++)
        m[g] = a1[g] = a2[g] = _mm512_setzero_ps();
    for (int64_t r = 0; r < nb; r++) {
        const uint16_t *xr = xb + r * c;
        for (int g = 0; g < G; g++) {
            __m512 e, o;
            _mm_prefetch((const char *)(xr + nb * c + 32 * g), _MM_HINT_T0);
            ld32(xr + 32 * g, &e, &o);
            m[2 * g] = _mm512_add_ps(m[2 * g], e);
            m[2 * g + 1] = _mm512_add_ps(m[2 * g + 1], o);
        }
    }
    __m512 vi = _mm512_set1_ps(inv);
    for (int g = 0; g < 2 * G; g++)
        m[g] = _mm512_mul_ps(m[g], vi);
    for (int64_t r = 0; r < nb; r++) {
        const uint16_t *xr = xb + r * c;
        for (int g = 0; g < G; g++) {
            __m512 v[2];
            ld32(xr + 32 * g, &v[0], &v[1]);
            for (int h = 0; h < 2; h++) {
                __m512 d = _mm512_sub_ps(v[h], m[2 * g + h]);
                a1[2 * g + h] = _mm512_add_ps(a1[2 * g + h], d);
                a2[2 * g + h] = _mm512_add_ps(a2[2 * g + h], _mm512_mul_ps(d, d));
            }
        }
    }
    for (int g = 0; g < G; g++) {
        merge(bmean + 32 * g, m[2 * g], m[2 * g + 1]);
        merge(s1 + 32 * g, a1[2 * g], a1[2 * g + 1]);
        merge(s2 + 32 * g, a2[2 * g], a2[2 * g + 1]);
    }
}

BN512_TARGET void sl_bn512_stats_block(int64_t nb, int c, const uint16_t *xb, float *bmean,
                                       float *s1, float *s2)
{
    float inv = 1.0f / (float)nb;
    int ch = 0;
    for (; ch + 128 <= c; ch += 128)
        stats_group(4, nb, c, xb + ch, inv, bmean + ch, s1 + ch, s2 + ch);
    for (; ch < c; ch += 32)
        stats_group(1, nb, c, xb + ch, inv, bmean + ch, s1 + ch, s2 + ch);
}

/* ----------------------------------------------------------------- apply */

/* One row of norm_kern_cpu.h bn_apply_c's case `mode` (0: y = bn;
 * 1: ReLU; 2: + r; 3: + r, ReLU), each step rounded where the unfused ops
 * store; h, l, s, b the split hi, lo, scale, beta. */
BN512_INLINE void apply_row(const int mode, int c, const uint16_t *xr, const float *h,
                            const float *l, const float *s, const float *b, const uint16_t *rr,
                            uint16_t *yr)
{
    for (int ch = 0; ch < c; ch += 32) {
        __m512 v[2], rv[2];
        __m512i out[2];
        ld32(xr + ch, &v[0], &v[1]);
        if (mode >= 2)
            ld32(rr + ch, &rv[0], &rv[1]);
        for (int k = 0; k < 2; k++) {
            const int o = ch + 16 * k;
            __m512 t = _mm512_add_ps(
                _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(v[k], _mm512_loadu_ps(h + o)),
                                            _mm512_loadu_ps(l + o)),
                              _mm512_loadu_ps(s + o)),
                _mm512_loadu_ps(b + o));
            if (mode == 0)
                out[k] = rbits_hi(t);
            else if (mode == 1)
                out[k] = _mm512_castps_si512(relu(rnd(t)));
            else if (mode == 2)
                out[k] = rbits_hi(_mm512_add_ps(rnd(t), rv[k]));
            else
                out[k] = _mm512_castps_si512(relu(rnd(_mm512_add_ps(rnd(t), rv[k]))));
        }
        st32(yr + ch, out[0], out[1]);
    }
}

BN512_INLINE void apply_rows(const int mode, int64_t rows, int c, const uint16_t *x,
                             const float *h, const float *l, const float *s, const float *b,
                             const uint16_t *r, uint16_t *y)
{
    for (int64_t i = 0; i < rows; i++)
        apply_row(mode, c, x + i * c, h, l, s, b, mode >= 2 ? r + i * c : NULL, y + i * c);
}

BN512_TARGET void sl_bn512_apply(int64_t rows, int c, const uint16_t *x, const float *hi,
                                 const float *lo, const float *scale, const float *beta,
                                 const uint16_t *r, int relu, uint16_t *y)
{
    float sp[4][BN512_MAX_C] __attribute__((aligned(64)));
    split(c, hi, sp[0]), split(c, lo, sp[1]), split(c, scale, sp[2]), split(c, beta, sp[3]);
    int mode = (r ? 2 : 0) + (relu ? 1 : 0);
    if (mode == 0)
        apply_rows(0, rows, c, x, sp[0], sp[1], sp[2], sp[3], r, y);
    else if (mode == 1)
        apply_rows(1, rows, c, x, sp[0], sp[1], sp[2], sp[3], r, y);
    else if (mode == 2)
        apply_rows(2, rows, c, x, sp[0], sp[1], sp[2], sp[3], r, y);
    else
        apply_rows(3, rows, c, x, sp[0], sp[1], sp[2], sp[3], r, y);
}

/* --------------------------------------------------------- backward sums */

/* Rows [0, nb) of channels [0, 32*G) of sums_block (pointers at the
 * group's first channel; ms the split mean there, acc1 / acc2 the split
 * running sums, loaded and stored back): with z, dy := dy where z > 0
 * else 0, stored back, and summed from the register (norm_kern_cpu.h
 * sums_block_c). */
BN512_INLINE void sums_group(const int G, int64_t nb, int c, const uint16_t *xb,
                             const uint16_t *zb, uint16_t *gb, const float *ms, float *acc1,
                             float *acc2)
{
    __m512 m[2 * 2], a1[2 * 2], a2[2 * 2];
    for (int g = 0; g < 2 * G; g++) {
        m[g] = _mm512_loadu_ps(ms + 16 * g);
        a1[g] = _mm512_loadu_ps(acc1 + 16 * g), a2[g] = _mm512_loadu_ps(acc2 + 16 * g);
    }
    for (int64_t r = 0; r < nb; r++)
        for (int g = 0; g < G; g++) {
            int64_t o = r * c + 32 * g;
            __m512 f[2], x[2];
            if (zb) {
                /* z > 0 as a float: bf16 bits in (0, 0x7f80] (+inf in, NaN out),
                 * so the 16-bit lanes mask dy directly */
                __m512i zv = _mm512_loadu_si512((const void *)(zb + o));
                __mmask32 pos = _mm512_cmple_epu16_mask(
                    _mm512_sub_epi16(zv, _mm512_set1_epi16(1)), _mm512_set1_epi16(0x7f7f));
                __m512i gv =
                    _mm512_maskz_mov_epi16(pos, _mm512_loadu_si512((const void *)(gb + o)));
                _mm512_storeu_si512((void *)(gb + o), gv);
                f[0] = _mm512_castsi512_ps(_mm512_slli_epi32(gv, 16));
                f[1] = _mm512_castsi512_ps(
                    _mm512_and_si512(gv, _mm512_set1_epi32((int)0xffff0000u)));
            } else {
                ld32(gb + o, &f[0], &f[1]);
            }
            ld32(xb + o, &x[0], &x[1]);
            for (int h = 0; h < 2; h++) {
                a1[2 * g + h] = _mm512_add_ps(a1[2 * g + h], f[h]);
                a2[2 * g + h] = _mm512_add_ps(
                    a2[2 * g + h], _mm512_mul_ps(f[h], _mm512_sub_ps(x[h], m[2 * g + h])));
            }
        }
    for (int g = 0; g < 2 * G; g++) {
        _mm512_storeu_ps(acc1 + 16 * g, a1[g]);
        _mm512_storeu_ps(acc2 + 16 * g, a2[g]);
    }
}

/* Rows a slice of sums_block goes through before the next 64 channels
 * (its sums in registers over the slice, in memory between slices): about
 * 1 KiB of each array, so a slice is read nearly in memory order (a whole
 * 256-row block per 64 channels went across rows at the row stride and ran
 * at half the speed of norm_kern_cpu.h's loop at 256-1024 channels). */
static int64_t sums_slice(int c) { return c >= 512 ? 1 : 512 / c; }

BN512_TARGET void sl_bn512_sums_block(int64_t nb, int c, const uint16_t *xb, const uint16_t *zb,
                                      uint16_t *gb, const float *mean, float *fdy, float *fdxc)
{
    float ms[BN512_MAX_C] __attribute__((aligned(64)));
    float acc[2][BN512_MAX_C] __attribute__((aligned(64)));
    split(c, mean, ms);
    memset(acc[0], 0, sizeof(float) * (size_t)c), memset(acc[1], 0, sizeof(float) * (size_t)c);
    int64_t sl = sums_slice(c);
    for (int64_t r0 = 0; r0 < nb; r0 += sl) {
        int64_t n = nb - r0 < sl ? nb - r0 : sl, o = r0 * c;
        const uint16_t *zs = zb ? zb + o : NULL;
        int ch = 0;
        for (; ch + 64 <= c; ch += 64)
            sums_group(2, n, c, xb + o + ch, zs ? zs + ch : NULL, gb + o + ch, ms + ch,
                       acc[0] + ch, acc[1] + ch);
        for (; ch < c; ch += 32)
            sums_group(1, n, c, xb + o + ch, zs ? zs + ch : NULL, gb + o + ch, ms + ch,
                       acc[0] + ch, acc[1] + ch);
    }
    for (int ch = 0; ch < c; ch += 32) {
        merge(fdy + ch, _mm512_load_ps(acc[0] + ch), _mm512_load_ps(acc[0] + ch + 16));
        merge(fdxc + ch, _mm512_load_ps(acc[1] + ch), _mm512_load_ps(acc[1] + ch + 16));
    }
}

/* -------------------------------------------------------------------- dx */

BN512_TARGET void sl_bn512_dx(int64_t rows, int c, const uint16_t *x, const uint16_t *dy,
                              const float *mean, const float *a, const float *k, const float *b,
                              uint16_t *dx)
{
    float sp[4][BN512_MAX_C] __attribute__((aligned(64)));
    split(c, mean, sp[0]), split(c, a, sp[1]), split(c, k, sp[2]), split(c, b, sp[3]);
    for (int64_t i = 0; i < rows; i++)
        for (int ch = 0; ch < c; ch += 32) {
            int64_t o = i * c + ch;
            __m512 g[2], xv[2];
            __m512i out[2];
            ld32(dy + o, &g[0], &g[1]);
            ld32(x + o, &xv[0], &xv[1]);
            for (int h = 0; h < 2; h++) {
                int p = ch + 16 * h;
                /* a*dy - k*(x - mean) - b, left to right */
                __m512 t = _mm512_sub_ps(
                    _mm512_mul_ps(_mm512_loadu_ps(sp[1] + p), g[h]),
                    _mm512_mul_ps(_mm512_loadu_ps(sp[2] + p),
                                  _mm512_sub_ps(xv[h], _mm512_loadu_ps(sp[0] + p))));
                out[h] = rbits_hi(_mm512_sub_ps(t, _mm512_loadu_ps(sp[3] + p)));
            }
            st32(dx + o, out[0], out[1]);
        }
}

#else /* !BN512_BUILT: never called (sl_bn512_ok is 0 there); empty for the linker */

void sl_bn512_stats_block(int64_t nb, int c, const uint16_t *xb, float *bmean, float *s1,
                          float *s2)
{
    (void)nb, (void)c, (void)xb, (void)bmean, (void)s1, (void)s2;
}
void sl_bn512_apply(int64_t rows, int c, const uint16_t *x, const float *hi, const float *lo,
                    const float *scale, const float *beta, const uint16_t *r, int relu,
                    uint16_t *y)
{
    (void)rows, (void)c, (void)x, (void)hi, (void)lo, (void)scale, (void)beta, (void)r,
        (void)relu, (void)y;
}
void sl_bn512_sums_block(int64_t nb, int c, const uint16_t *xb, const uint16_t *zb,
                         uint16_t *gb, const float *mean, float *fdy, float *fdxc)
{
    (void)nb, (void)c, (void)xb, (void)zb, (void)gb, (void)mean, (void)fdy, (void)fdxc;
}
void sl_bn512_dx(int64_t rows, int c, const uint16_t *x, const uint16_t *dy, const float *mean,
                 const float *a, const float *k, const float *b, uint16_t *dx)
{
    (void)rows, (void)c, (void)x, (void)dy, (void)mean, (void)a, (void)k, (void)b, (void)dx;
}

#endif

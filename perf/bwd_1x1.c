/*
 * perf/bwd_1x1.c - how much a hand-written backward-weights kernel for
 * ResNet-50's 1x1 convolutions would save over oneDNN's (issue 40): dW[k][c]
 * = sum over the output positions m of dy[m][k] x[m][c], bf16 in, f32 out,
 * batch 16 at 224 px (one replica's share), on one thread, timed best of
 * reps, then NETWORK: each shape times its uses in the network. Set beside
 * `OMP_NUM_THREADS=1 build/dnnl_conv` (its 1x1 backward-weights lines, times
 * the same uses): perf/RESULTS.md has both. Not used by the trainer: it is
 * the measurement behind leaving these kernels to oneDNN.
 *
 *   bwd_1x1 [reps] [--check]
 *
 * The kernel: AVX512-BF16's vdpbf16ps takes pairs along the sum, so both
 * operands are packed pair-interleaved along m (two rows' values side by
 * side): x in panels of 32 channels (two vectors), dy in panels of 8 output
 * channels (a 32-bit broadcast each), 128 pairs of rows a block, the next
 * block's rows prefetched to L2 while this one computes; an 8 x 32 tile of
 * dW in 16 registers. --check compares 50 random dW values with a double
 * sum. Exits 0 with a line saying so on a CPU without AVX512-BF16.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MR 8    /* output channels a tile */
#define NR 32   /* input channels a tile: two vectors of 16 */
#define KC 128  /* pairs of rows a block */
#define CB 256  /* input channels a packed block of x */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double from_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct shape {
    int h, c, k, stride, uses, p; /* p: output size */
    const uint16_t *x, *dy;
} shape;

/* x's row for output position m (NHWC, 1x1, no padding) */
static const uint16_t *xrow(const shape *s, long m)
{
    long pq = (long)s->p * s->p, n = m / pq, r = m % pq;
    long y = r / s->p * s->stride, x = r % s->p * s->stride;
    return s->x + ((n * s->h + y) * s->h + x) * s->c;
}

/* 16-bit interleave of two rows: lo takes elements 0..15 of each, hi 16..31 */
#define LO_IDX                                                                                    \
    _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,  \
                     37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0)
#define HI_IDX                                                                                    \
    _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,  \
                     22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16)

/* x's rows m0..m0+2np, channels c0..c0+CB, as panels [NR-panel][pair][NR][2];
 * the next block's rows prefetched */
__attribute__((target("avx512f,avx512bw"))) static void
pack_x(const shape *s, long m0, int np, long M, int c0, uint16_t *bp)
{
    const __m512i lo = LO_IDX, hi = HI_IDX;
    for (int p = 0; p < np; p++) {
        const uint16_t *r0 = xrow(s, m0 + 2 * p), *r1 = xrow(s, m0 + 2 * p + 1);
        for (int j = 0; j < 2 && m0 + 2 * np + 2 * p + j < M; j++) {
            const uint16_t *q = xrow(s, m0 + 2 * np + 2 * p + j);
            for (int c = 0; c < CB && c0 + c < s->c; c += 32)
                _mm_prefetch((const char *)(q + c0 + c), _MM_HINT_T1);
        }
        for (int c = 0; c < CB && c0 + c < s->c; c += 32) {
            __m512i a = _mm512_loadu_si512(r0 + c0 + c), b = _mm512_loadu_si512(r1 + c0 + c);
            uint16_t *d = bp + ((long)(c / NR) * np + p) * NR * 2;
            _mm512_storeu_si512(d, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(d + 32, _mm512_permutex2var_epi16(a, hi, b));
        }
    }
}

/* dy's rows m0..m0+2np, channels k0..k0+64, as panels [MR-panel][pair][MR][2] */
__attribute__((target("avx512f,avx512bw"))) static void
pack_dy(const shape *s, long m0, int np, long M, int k0, uint16_t *ap)
{
    const __m512i lo = LO_IDX, hi = HI_IDX;
    for (int p = 0; p < np; p++) {
        const uint16_t *r0 = s->dy + (m0 + 2 * p) * s->k + k0, *r1 = r0 + s->k;
        if (m0 + 2 * np + 2 * p + 1 < M)
            for (int k = 0; k < 64; k += 32) {
                _mm_prefetch((const char *)(r0 + 2L * np * s->k + k), _MM_HINT_T1);
                _mm_prefetch((const char *)(r1 + 2L * np * s->k + k), _MM_HINT_T1);
            }
        for (int k = 0; k < 64; k += 32) {
            __m512i a = _mm512_loadu_si512(r0 + k), b = _mm512_loadu_si512(r1 + k);
            __m512i l = _mm512_permutex2var_epi16(a, lo, b), h = _mm512_permutex2var_epi16(a, hi, b);
            __m256i part[4] = {_mm512_castsi512_si256(l), _mm512_extracti64x4_epi64(l, 1),
                               _mm512_castsi512_si256(h), _mm512_extracti64x4_epi64(h, 1)};
            for (int q = 0; q < 4; q++)
                _mm256_storeu_si256((__m256i *)(ap + ((long)(k / MR + q) * np + p) * MR * 2),
                                    part[q]);
        }
    }
}

/* the MR x NR tile of dw (row stride ldw) += panels a . b over np pairs
 * (first: = instead of +=) */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void
tile(const uint16_t *ap, const uint16_t *bp, int np, float *dw, int ldw, int first)
{
    __m512 c[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            c[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(dw + (long)i * ldw + 16 * j);
    const uint32_t *a = (const uint32_t *)ap;
    for (int p = 0; p < np; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + (long)p * NR * 2);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (long)p * NR * 2 + 32);
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
            _mm512_storeu_ps(dw + (long)i * ldw + 16 * j, c[i][j]);
}

static void bwd_weights(const shape *s, float *dw, uint16_t *ap, uint16_t *bp)
{
    long M = 16L * s->p * s->p;
    for (int c0 = 0; c0 < s->c; c0 += CB) {
        int cb = s->c - c0 < CB ? s->c - c0 : CB;
        for (long m0 = 0; m0 < M; m0 += 2 * KC) {
            int np = (int)((M - m0) / 2 < KC ? (M - m0) / 2 : KC);
            pack_x(s, m0, np, M, c0, bp);
            for (int k0 = 0; k0 < s->k; k0 += 64) {
                pack_dy(s, m0, np, M, k0, ap);
                for (int kq = 0; kq < 64 / MR; kq++)
                    for (int cq = 0; cq < cb / NR; cq++)
                        tile(ap + (long)kq * np * MR * 2, bp + (long)cq * np * NR * 2, np,
                             dw + (long)(k0 + kq * MR) * s->c + c0 + cq * NR, s->c, m0 == 0);
            }
        }
    }
}

int main(int argc, char **argv)
{
    /* ResNet-50 v1.5's 1x1 convolutions (perf/dnnl_conv.c's table): h, c, k,
     * stride, uses */
    static const int shapes[][5] = {
        {56, 64, 64, 1, 1},     {56, 64, 256, 1, 4},   {56, 256, 64, 1, 2},
        {56, 256, 128, 1, 1},   {28, 128, 512, 1, 4},  {56, 256, 512, 2, 1},
        {28, 512, 128, 1, 3},   {28, 512, 256, 1, 1},  {14, 256, 1024, 1, 6},
        {28, 512, 1024, 2, 1},  {14, 1024, 256, 1, 5}, {14, 1024, 512, 1, 1},
        {7, 512, 2048, 1, 3},   {14, 1024, 2048, 2, 1}, {7, 2048, 512, 1, 2}};
    int reps = 3, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check"))
            check = 1;
        else
            reps = atoi(argv[i]) > 0 ? atoi(argv[i]) : 1;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) {
        printf("bwd_1x1: this CPU has no AVX512-BF16: nothing to measure\n");
        return 0;
    }
    uint16_t *ap = aligned_alloc(64, 64L * KC * 2 * 2), *bp = aligned_alloc(64, (long)CB * KC * 2 * 2);
    double net = 0, flops = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        shape s = {shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4],
                   (shapes[i][0] - 1) / shapes[i][3] + 1, NULL, NULL};
        long M = 16L * s.p * s.p, nx = 16L * s.h * s.h * s.c;
        uint16_t *x = aligned_alloc(64, (size_t)nx * 2), *dy = aligned_alloc(64, (size_t)M * s.k * 2);
        float *dw = aligned_alloc(64, (size_t)s.k * s.c * 4);
        if (!ap || !bp || !x || !dy || !dw) {
            fprintf(stderr, "bwd_1x1: out of memory\n");
            return 1;
        }
        uint64_t r = 1;
        for (long j = 0; j < nx; j++)
            r = r * 6364136223846793005ULL + 1, x[j] = to_bf16((float)((r >> 40) & 0xffff) / 65536.0f - 0.5f);
        for (long j = 0; j < M * s.k; j++)
            r = r * 6364136223846793005ULL + 1, dy[j] = to_bf16((float)((r >> 40) & 0xffff) / 65536.0f - 0.5f);
        s.x = x, s.dy = dy;
        double best = 1e30;
        for (int rep = 0; rep <= reps; rep++) {
            double t = now();
            bwd_weights(&s, dw, ap, bp);
            t = now() - t;
            if (rep && t < best)
                best = t;
        }
        double worst = 0;
        for (int t = 0; check && t < 50; t++) {
            r = r * 6364136223846793005ULL + 1;
            int k = (int)((r >> 33) % (uint64_t)s.k), c = (int)((r >> 13) % (uint64_t)s.c);
            double ref = 0, mag = 0;
            for (long m = 0; m < M; m++) {
                double v = from_bf16(dy[m * s.k + k]) * from_bf16(xrow(&s, m)[c]);
                ref += v, mag += fabs(v);
            }
            double e = fabs(ref - dw[(long)k * s.c + c]) / (mag + 1e-30);
            worst = e > worst ? e : worst;
        }
        if (check && worst > 1e-5) {
            fprintf(stderr, "bwd_1x1: h%d c%d k%d: dW off the double sum by %.2e of its terms' "
                    "magnitude\n", s.h, s.c, s.k, worst);
            rc = 1;
        }
        double gf = 2.0 * (double)M * s.k * s.c / 1e9;
        printf("bwd-weights h%-3d c%-5d k%-5d 1x1/%d  %8.3f ms %6.1f GFLOP/s%s\n", s.h, s.c, s.k,
               s.stride, best * 1e3, gf / best, check ? (worst > 1e-5 ? "  WRONG" : "  checked") : "");
        net += best * s.uses, flops += gf * s.uses;
        free(x), free(dy), free(dw);
    }
    printf("NETWORK 1x1 bwd-weights %.1f ms, %.1f GFLOP/s (each shape x its uses)\n", net * 1e3,
           flops / net);
    free(ap), free(bp);
    return rc;
}

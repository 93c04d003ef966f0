/*
 * records/resize.c - RGB u8 resize for the converter (--resize-short).
 *
 * Per direction, with scale = src / dst:
 *   scale >= 2: area averaging (box filter with fractional edge weights, as
 *               OpenCV INTER_AREA): output pixel x covers source interval
 *               [x*scale, (x+1)*scale) and averages it, weighted by overlap.
 *   scale <  2: bilinear with half-pixel centres (OpenCV INTER_LINEAR):
 *               sx = (x + 0.5) * scale - 0.5, clamped to [0, src - 1].
 * The formulas live in resize_tap.h (sl_resize_tap_at), shared with the
 * GPU kernel (pipeline/image/gdec_cuda.cu) and pipeline/image/resample_planes.c.
 * Both are separable: each output pixel of a row is a weighted sum of a run
 * of consecutive source pixels, described by one "tap" per output
 * coordinate (first source index, run length, weights of the first pixel,
 * the interior pixels and the last pixel). For each output row the source
 * rows of its vertical tap are summed into one float row, which the
 * horizontal taps then reduce into the output row.
 *
 * Memory: taps for dw + dh outputs, one float row of sw*3 and, for the
 * bilinear horizontal pass, four tables of dw*3 entries. Up to
 * SL_RESIZE_STACK bytes live on the stack; above that one malloc per call.
 * If that malloc fails the function still produces an image, with nearest
 * neighbour sampling (the signature has no way to report the failure, and a
 * slightly worse thumbnail beats a missing one).
 *
 * Threading: reentrant.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "records.h"

#define SL_RESIZE_STACK (64 * 1024)

typedef sl_resize_tap sl_tap;

/* Taps for resizing a line of s pixels to d pixels (records.h): the shared
 * per-coordinate formula (resize_tap.h), which the GPU kernel evaluates
 * for one x at a time. */
void sl_resize_taps(sl_tap *t, int s, int d)
{
    for (int x = 0; x < d; x++)
        t[x] = sl_resize_tap_at(s, d, x);
}

/* Vertical pass on u8 source rows into a float row of n = sw*3 values:
 * acc = w * row (set) or acc += w * row (add). Contiguous, so gcc
 * vectorizes them (restrict: acc never aliases the source). */
static void vrow_set(float *restrict acc, const uint8_t *restrict row, float w, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] = w * (float)row[i];
}

static void vrow_add(float *restrict acc, const uint8_t *restrict row, float w, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] += w * (float)row[i];
}

/* Round to the nearest u8. Weights are non-negative and sum to 1, so v is
 * in [0, 255] up to float rounding: only the top needs a clamp, written as
 * "a < b ? a : b" so gcc emits minss, not a (mispredicted) branch. */
static uint8_t to_u8(float v)
{
    v += 0.5f;
    v = v < 255.0f ? v : 255.0f;
    return (uint8_t)(int)v;
}

/* Horizontal pass over one vertically filtered row (floats, RGB
 * interleaved) straight into the u8 output row. */
static void hrow_store(const sl_tap *restrict t, int dw, const float *restrict acc,
                       uint8_t *restrict dst)
{
    for (int x = 0; x < dw; x++) {
        const float *p = acc + (size_t)t[x].i0 * 3;
        int n = t[x].n;
        float r = t[x].w0 * p[0], g = t[x].w0 * p[1], b = t[x].w0 * p[2];
        if (n >= 2) {
            float mr = 0, mg = 0, mb = 0;
            for (int k = 1; k < n - 1; k++) {
                mr += p[k * 3 + 0];
                mg += p[k * 3 + 1];
                mb += p[k * 3 + 2];
            }
            const float *q = p + (size_t)(n - 1) * 3;
            r += t[x].wmid * mr + t[x].wn * q[0];
            g += t[x].wmid * mg + t[x].wn * q[1];
            b += t[x].wmid * mb + t[x].wn * q[2];
        }
        dst[x * 3 + 0] = to_u8(r);
        dst[x * 3 + 1] = to_u8(g);
        dst[x * 3 + 2] = to_u8(b);
    }
}

/* Horizontal pass when every tap has at most two pixels (bilinear, scale
 * < 2): per output element j (channel-interleaved), out = wa*acc[ia] +
 * wb*acc[ib], with the tables expanded per channel so the loop is one flat
 * gather that gcc vectorizes (vgatherdps in the AVX2 clone). */
static void hrow_linear(const int32_t *restrict ia, const int32_t *restrict ib,
                        const float *restrict wa, const float *restrict wb, int n,
                        const float *restrict acc, uint8_t *restrict dst)
{
    for (int j = 0; j < n; j++) {
        float v = wa[j] * acc[ia[j]] + wb[j] * acc[ib[j]] + 0.5f;
        v = v < 255.0f ? v : 255.0f;
        dst[j] = (uint8_t)(int)v;
    }
}

/* Expand horizontal taps (all n <= 2) into hrow_linear's tables. */
static void expand_linear(const sl_tap *t, int dw, int32_t *ia, int32_t *ib, float *wa, float *wb)
{
    for (int x = 0; x < dw; x++)
        for (int c = 0; c < 3; c++) {
            int j = x * 3 + c;
            ia[j] = t[x].i0 * 3 + c;
            ib[j] = t[x].n == 2 ? ia[j] + 3 : ia[j];
            wa[j] = t[x].w0;
            wb[j] = t[x].n == 2 ? t[x].wn : 0.0f;
        }
}

/* Fallback without memory: each output pixel takes the source pixel whose
 * centre is nearest to its own centre. */
static void resize_nearest(const uint8_t *src, int sw, int sh, int sp, uint8_t *dst, int dw,
                           int dh, int dp)
{
    for (int y = 0; y < dh; y++) {
        int sy = (int)(((int64_t)2 * y + 1) * sh / (2 * (int64_t)dh));
        const uint8_t *srow = src + (size_t)sy * sp;
        uint8_t *drow = dst + (size_t)y * dp;
        for (int x = 0; x < dw; x++) {
            int sx = (int)(((int64_t)2 * x + 1) * sw / (2 * (int64_t)dw));
            memcpy(drow + x * 3, srow + sx * 3, 3);
        }
    }
}

/* Built twice (ifunc-dispatched by glibc at load time): an AVX2 clone, where
 * the vertical pass converts and sums 8 floats an instruction and the
 * horizontal gather vectorizes, and the baseline x86-64 one. The static
 * helpers above are inlined into each clone. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                        \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
/* (Not under sanitizers: the ifunc resolver runs before their runtime is up
 * and crashes; the sanitized builds test the same source as one function.) */
__attribute__((target_clones("avx2", "default")))
#endif
void sl_resize_rgb_u8(const uint8_t *src, int sw, int sh, int sp, uint8_t *dst, int dw, int dh,
                      int dp)
{
    /* No status to return: invalid arguments leave dst untouched. */
    if (!src || !dst || sw <= 0 || sh <= 0 || dw <= 0 || dh <= 0 ||
        sp < sw * 3 || dp < dw * 3)
        return;
    if (sw == dw && sh == dh) {
        for (int y = 0; y < dh; y++)
            memcpy(dst + (size_t)y * dp, src + (size_t)y * sp, (size_t)dw * 3);
        return;
    }

    /* Vertical first: each output row sums its source rows (u8 -> float,
     * vectorized) into one float row of sw*3, then the horizontal taps
     * gather from that row into the output. Gathers (the slow, scalar part)
     * run dh times rather than sh times, and on floats rather than bytes. */
    size_t rowf = (size_t)sw * 3, roww = (size_t)dw * 3;
    size_t need = rowf * sizeof(float) + ((size_t)dw + dh) * sizeof(sl_tap) +
                  roww * (2 * sizeof(int32_t) + 2 * sizeof(float));
    _Alignas(16) unsigned char stackbuf[SL_RESIZE_STACK];
    unsigned char *mem = stackbuf;
    if (need > sizeof stackbuf) {
        mem = malloc(need);
        if (!mem) {
            resize_nearest(src, sw, sh, sp, dst, dw, dh, dp);
            return;
        }
    }
    /* Layout: the float row first, then the taps (both 4-byte aligned). */
    float *acc = (float *)mem;
    sl_tap *ht = (sl_tap *)(acc + rowf);
    sl_tap *vt = ht + dw;
    sl_resize_taps(ht, sw, dw);
    sl_resize_taps(vt, sh, dh);
    int linear = (double)sw / dw < 2.0; /* sl_resize_taps: bilinear, every n <= 2 */
    int32_t *ia = (int32_t *)(vt + dh), *ib = ia + roww;
    float *wa = (float *)(ib + roww), *wb = wa + roww;
    if (linear)
        expand_linear(ht, dw, ia, ib, wa, wb);

    int n = (int)rowf;
    for (int y = 0; y < dh; y++) {
        const sl_tap *t = &vt[y];
        const uint8_t *row = src + (size_t)t->i0 * sp;
        vrow_set(acc, row, t->w0, n);
        for (int k = 1; k < t->n; k++) {
            float w = k == t->n - 1 ? t->wn : t->wmid;
            vrow_add(acc, row + (size_t)k * sp, w, n);
        }
        if (linear)
            hrow_linear(ia, ib, wa, wb, (int)roww, acc, dst + (size_t)y * dp);
        else
            hrow_store(ht, dw, acc, dst + (size_t)y * dp);
    }
    if (mem != stackbuf)
        free(mem);
}

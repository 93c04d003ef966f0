/*
 * pipeline/image/resample_int.h - what the two one-pass resamplers share:
 * resample.c (sl_resample_sample, an RGB u8 strip) and resample_planes.c
 * (sl_resample_planes, Y/Cb/Cr planes at their own resolutions). Both run
 * a vertical pass into float plane rows, then a horizontal pass per plane
 * row that writes the final value; that horizontal pass is here: the
 * bilinear "window" (hplane, over the tables sl_resample_expand_linear
 * fills; resample.c's DESIGN comment explains the window) and the area
 * tap (area_tap), with the scratch sizes and the tap type.
 *
 * hplane and area_tap are always_inline so that each target_clones clone
 * of either resampler compiles its own copy (the AVX2 clone's window is
 * vpermps); neither file is built with FMA, so every copy computes the
 * same floats. sl_resample_expand_linear runs once per call, out of line
 * (resample.c).
 *
 * Threading: reentrant.
 */
#ifndef SL_RESAMPLE_INT_H
#define SL_RESAMPLE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pipeline/image/image.h"

/* Bytes of scratch on the stack; above that one malloc per call. */
#define SL_RESAMPLE_STACK (64 * 1024)
/* Floats after each plane row of acc: a window reads 16 from its base. */
#define SL_RESAMPLE_PAD 16

/* gcc vector extensions; __builtin_shuffle with a variable two-vector mask
 * is one vpermps per source vector and a blend with AVX2 (the "default"
 * clone lowers it to scalar moves, still correct). Other compilers take the
 * per-element path. */
#if defined(__GNUC__) && !defined(__clang__)
#define SL_RESAMPLE_WINDOW 1
#else
#define SL_RESAMPLE_WINDOW 0
#endif
typedef float sl_v8f __attribute__((vector_size(32)));
typedef int32_t sl_v8i __attribute__((vector_size(32)));

typedef sl_resize_tap sl_rtap; /* records.h: the same filter as sl_resize_rgb_u8 */

/* Eight consecutive bilinear outputs of one plane row: out[k] = wa[k] *
 * p[base + ka[k]] + wb[k] * p[base + kb[k]] + bias, ka, kb in 0..15. win 2:
 * ka, kb in 0..7 (an enlargement by 8/7 or more, e.g. 4:2:0 chroma to a
 * crop's size): one source vector and one permute per weight. win 0: the
 * indices spread further (does not happen for scale < 2, kept as a guard),
 * use the per-pixel tables. */
typedef struct sl_hblk {
    sl_v8i ka, kb;
    sl_v8f wa, wb;
    int32_t base, win;
} sl_hblk;

/* Bilinear horizontal pass over one plane row p into out (dw values):
 * wa*p[ia] + wb*p[ib] + bias, windows for the full blocks of 8, the
 * per-pixel tables for the rest. */
static inline __attribute__((always_inline)) void
hplane(const sl_hblk *restrict blk, const int32_t *restrict ia, const int32_t *restrict ib,
       const float *restrict wa, const float *restrict wb, float bias, int dw,
       const float *restrict p, float *restrict out)
{
    int x = 0;
#if SL_RESAMPLE_WINDOW
    sl_v8f vb = {bias, bias, bias, bias, bias, bias, bias, bias};
    for (; x + 8 <= dw; x += 8, blk++) {
        if (!blk->win)
            for (int k = x; k < x + 8; k++)
                out[k] = wa[k] * p[ia[k]] + wb[k] * p[ib[k]] + bias;
        else if (blk->win == 2) { /* every index in 0..7: one vector, one permute */
            sl_v8f lo;
            memcpy(&lo, p + blk->base, sizeof lo);
            sl_v8f a = __builtin_shuffle(lo, blk->ka);
            sl_v8f b = __builtin_shuffle(lo, blk->kb);
            sl_v8f v = blk->wa * a + blk->wb * b + vb;
            memcpy(out + x, &v, sizeof v);
        } else {
            sl_v8f lo, hi;
            memcpy(&lo, p + blk->base, sizeof lo);
            memcpy(&hi, p + blk->base + 8, sizeof hi);
            sl_v8f a = __builtin_shuffle(lo, hi, blk->ka);
            sl_v8f b = __builtin_shuffle(lo, hi, blk->kb);
            sl_v8f v = blk->wa * a + blk->wb * b + vb;
            memcpy(out + x, &v, sizeof v);
        }
    }
#else
    (void)blk;
#endif
    for (; x < dw; x++)
        out[x] = wa[x] * p[ia[x]] + wb[x] * p[ib[x]] + bias;
}

/* Expand horizontal taps (all n <= 2) into one plane's tables: per pixel
 * ia, ib, wa, wb (weights times sc), and the window blocks (dw / 8 of
 * them). */
void sl_resample_expand_linear(const sl_rtap *t, int dw, float sc, int32_t *ia, int32_t *ib,
                               float *wa, float *wb, sl_hblk *blk);

/* One output of an area (general) tap over p: resize.c's hrow_store
 * arithmetic. */
static inline __attribute__((always_inline)) float area_tap(const sl_rtap *t, const float *p)
{
    int n = t->n;
    float v = t->w0 * p[0];
    if (n >= 2) {
        float m = 0;
        for (int k = 1; k < n - 1; k++)
            m += p[k];
        v += t->wmid * m + t->wn * p[n - 1];
    }
    return v;
}

/* The one row writer of the resamplers (resample.c, resample_planes.c):
 * output row y of o from three rows of o->w floats r, g, b (the channel
 * values before the layout), in o's layout:
 *   NHWC u8:  min(v + ub, 255) truncated: resize.c's to_u8 with ub 0.5, or
 *             ub 0 where the pass's bias already holds the 0.5 (v >= 0);
 *             v + ub truncated where hi is 0: the caller clamped v to
 *             0..255 already (the same bytes, a cheaper loop);
 *   NHWC f32, NCHW f32: v * sc[c] + bi[c], or v as it is where sc is NULL
 *             (the pass folded the normalization into its weights).
 * The same operations per value as each store it replaced: the same
 * bytes. Inlined into each target clone of its callers. */
static inline __attribute__((always_inline)) void
sl_store_row(const sl_out_spec *o, int y, const float *restrict r, const float *restrict g,
             const float *restrict b, const float *sc, const float *bi, float ub, int hi)
{
    int dw = o->w;
    if (o->layout == SL_LAYOUT_NHWC_U8) {
        uint8_t *d = (uint8_t *)o->dst + (size_t)y * dw * 3;
        if (!hi)
            for (int x = 0; x < dw; x++) {
                d[3 * x] = (uint8_t)(int)(r[x] + ub);
                d[3 * x + 1] = (uint8_t)(int)(g[x] + ub);
                d[3 * x + 2] = (uint8_t)(int)(b[x] + ub);
            }
        else
            for (int x = 0; x < dw; x++) {
                float vr = r[x] + ub, vg = g[x] + ub, vb = b[x] + ub;
                d[3 * x] = (uint8_t)(int)(vr < 255.0f ? vr : 255.0f);
                d[3 * x + 1] = (uint8_t)(int)(vg < 255.0f ? vg : 255.0f);
                d[3 * x + 2] = (uint8_t)(int)(vb < 255.0f ? vb : 255.0f);
            }
    } else if (o->layout == SL_LAYOUT_NHWC_F32) {
        float *d = (float *)o->dst + (size_t)y * dw * 3;
        for (int x = 0; x < dw; x++) {
            d[3 * x] = sc ? r[x] * sc[0] + bi[0] : r[x];
            d[3 * x + 1] = sc ? g[x] * sc[1] + bi[1] : g[x];
            d[3 * x + 2] = sc ? b[x] * sc[2] + bi[2] : b[x];
        }
    } else {
        size_t plane = (size_t)o->h * dw;
        float *d = (float *)o->dst + (size_t)y * dw;
        for (int x = 0; x < dw; x++) {
            d[x] = sc ? r[x] * sc[0] + bi[0] : r[x];
            d[plane + x] = sc ? g[x] * sc[1] + bi[1] : g[x];
            d[2 * plane + x] = sc ? b[x] * sc[2] + bi[2] : b[x];
        }
    }
}

/* Round up to a multiple of 32 bytes (the vector tables' alignment). */

static inline size_t al32(size_t n)
{
    return (n + 31) & ~(size_t)31;
}

#endif /* SL_RESAMPLE_INT_H */

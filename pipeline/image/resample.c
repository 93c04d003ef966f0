/*
 * pipeline/image/resample.c - resize + flip + normalize + layout in one pass:
 * the decoded RGB crop strip straight into its slot of the batch buffer
 * (sl_resample_sample). Its sibling for Y, Cb, Cr planes at their own
 * resolutions (decode_yuv.c's path) is resample_planes.c; the horizontal
 * pass both use is in resample_int.h.
 *
 *   in:  src (sh, sw, 3) u8, row pitch sp bytes (the crop in the decoder's
 *        strip)
 *   out: SL_LAYOUT_NHWC_U8   (dh, dw, 3) u8
 *        SL_LAYOUT_NHWC_F32  (dh, dw, 3) f32  (v - mean[c]) / std[c]
 *        SL_LAYOUT_NCHW_F32  (3, dh, dw) f32  same values, one plane per channel
 *
 * Why: the old per-sample path resized into an RGB u8 scratch
 * (sl_resize_rgb_u8) and then read it again to mirror, normalize and
 * deinterleave it (sl_store_sample): a second pass over every output value.
 * Here the horizontal pass of the resize writes the final value.
 *
 * The filter is records/resize.c's, tap for tap (sl_resize_taps, records.h, is shared): per
 * direction, area averaging when shrinking by 2 or more, bilinear with
 * half-pixel centres otherwise; vertical first into a float row, then the
 * horizontal taps. Flip costs nothing: the horizontal taps are reversed
 * (output x takes tap dw-1-x), torchvision's RandomHorizontalFlip.
 *
 * Planes: the vertical pass deinterleaves as it goes (acc holds three
 * plane rows of sw floats; gcc vectorizes the stride-3 loads), so each
 * horizontal tap reads one plane. Bilinear output pixels x..x+7 of a plane
 * then read source pixels within 16 of each other (7 * scale + 1 < 15 for
 * scale < 2): two vector loads and a permute per weight (the "window",
 * vpermps in the AVX2 clone) instead of sixteen scalar loads. resize.c's
 * per-element gather was 80 % of this file's time: AMD's vgatherdps is no
 * faster than scalar loads, so gcc emits those. Where the eight outputs
 * read within 8 source pixels (an enlargement by 8/7 or more: 4:2:0
 * chroma, small crops) one vector and one permute per weight do. NCHW
 * writes the plane rows in place; NHWC f32 and u8 compute three plane rows
 * of dw floats and interleave them (sl_store_row, resample_int.h: the one
 * row writer of both resamplers, which the area pass uses for every
 * layout).
 *
 * Values:
 *   u8:  v rounded exactly as sl_resize_rgb_u8 rounds it (same operations
 *        in the same order, only the loads differ; neither file is built
 *        with FMA, so no contraction differs): bit-identical to
 *        resize-then-mirror.
 *   f32: (v - mean[c]) * (1/std[c]) from the UNROUNDED float v. The old
 *        path normalized the rounded u8, so the two differ by at most
 *        0.5/std[c] (about 0.009 for ImageNet's std): the new value is the
 *        more exact one. In the bilinear pass 1/std[c] is folded into the
 *        two weights and -mean[c]/std[c] is the bias, so a value is
 *        wa*a + wb*b + bias, the same expression as u8's (bias 0.5 there);
 *        that differs from the literal formula by float rounding only.
 *
 * Memory: taps for dw + dh outputs, three plane rows of sw (+16) floats,
 * for the bilinear horizontal pass per-pixel tables (source indices a and
 * b, weights a and b; three planes of dw) plus one window block per 8
 * pixels, and three plane rows of dw floats (NHWC). Up to
 * SL_RESAMPLE_STACK bytes live on the stack; above that one malloc per
 * call, and if that fails the sample is still written, by nearest
 * neighbour (the signature cannot report failure, and a blockier sample
 * beats a lost one, as in resize.c).
 *
 * Measured (one thread, header + crop geometry + decode + this, NCHW f32,
 * 224 x 224, 2000 corpus JPEGs, 2-core EPYC VM, thread CPU time, medians
 * of 3): 549 us per sample for sl_decode_crop + sl_store_sample; 516 us
 * fused with resize.c's per-element gather (this file 24 % of it in perf);
 * 476 us with the planes and the window (16 %).
 *
 * Threading: reentrant; distinct dst regions may be written concurrently.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/image/resample_int.h"

/* Vertical pass on one u8 RGB source row of n pixels into the three plane
 * rows r, g, b: set (acc = w * v) or add (acc += w * v), per element the
 * operations of resize.c's vrow_set / vrow_add. */
static inline __attribute__((always_inline)) void
vrow_set(float *restrict r, float *restrict g, float *restrict b, const uint8_t *restrict row,
         float w, int n)
{
    for (int i = 0; i < n; i++) {
        r[i] = w * (float)row[3 * i];
        g[i] = w * (float)row[3 * i + 1];
        b[i] = w * (float)row[3 * i + 2];
    }
}

static inline __attribute__((always_inline)) void
vrow_add(float *restrict r, float *restrict g, float *restrict b, const uint8_t *restrict row,
         float w, int n)
{
    for (int i = 0; i < n; i++) {
        r[i] += w * (float)row[3 * i];
        g[i] += w * (float)row[3 * i + 1];
        b[i] += w * (float)row[3 * i + 2];
    }
}

/* Expand horizontal taps (all n <= 2) into one plane's tables: per pixel
 * ia, ib, wa, wb (weights times sc), and the window blocks. Shared with
 * resample_planes.c (resample_int.h). */
void sl_resample_expand_linear(const sl_rtap *t, int dw, float sc, int32_t *ia, int32_t *ib,
                               float *wa, float *wb, sl_hblk *blk)
{
    for (int x = 0; x < dw; x++) {
        ia[x] = t[x].i0;
        ib[x] = t[x].n == 2 ? ia[x] + 1 : ia[x];
        /* u8: sc is 1, so these are resize.c's weights exactly */
        wa[x] = t[x].w0 * sc;
        wb[x] = t[x].n == 2 ? t[x].wn * sc : 0.0f;
    }
    for (int x = 0; x + 8 <= dw; x += 8, blk++) {
        int32_t lo = INT32_MAX, hi = 0;
        for (int k = x; k < x + 8; k++) {
            lo = ia[k] < lo ? ia[k] : lo;
            hi = ib[k] > hi ? ib[k] : hi;
        }
        blk->base = lo;
        blk->win = hi - lo < 8 ? 2 : hi - lo < 16;
        for (int k = 0; k < 8; k++) {
            blk->ka[k] = blk->win ? ia[x + k] - lo : 0;
            blk->kb[k] = blk->win ? ib[x + k] - lo : 0;
            blk->wa[k] = wa[x + k];
            blk->wb[k] = wb[x + k];
        }
    }
}

/* Area (general tap) horizontal pass over the plane rows acc (stride
 * pstride) into three rows of dw floats (out, dw apart): resize.c's
 * hrow_store arithmetic per channel; sl_store_row lays them out. */
static void harea_rows(const sl_rtap *restrict t, int dw, const float *restrict acc,
                       size_t pstride, float *restrict out)
{
    for (int x = 0; x < dw; x++)
        for (int c = 0; c < 3; c++)
            out[(size_t)c * dw + x] = area_tap(&t[x], acc + c * pstride + t[x].i0);
}

/* Fallback without memory: each output pixel takes the source pixel whose
 * centre is nearest to its own centre (resize.c's resize_nearest), then
 * the flip and layout. */
static void resample_nearest(const uint8_t *src, int sw, int sh, int sp, const sl_out_spec *o,
                             const float sc[3], const float bi[3])
{
    int dw = o->w, dh = o->h, flip = o->flip;
    sl_layout layout = o->layout;
    void *dst = o->dst;
    size_t plane = (size_t)dh * dw;
    for (int y = 0; y < dh; y++) {
        int sy = (int)(((int64_t)2 * y + 1) * sh / (2 * (int64_t)dh));
        for (int x = 0; x < dw; x++) {
            int xs = flip ? dw - 1 - x : x;
            int sx = (int)(((int64_t)2 * xs + 1) * sw / (2 * (int64_t)dw));
            const uint8_t *s = src + (size_t)sy * sp + (size_t)sx * 3;
            size_t at = (size_t)y * dw + x;
            for (int c = 0; c < 3; c++) {
                if (layout == SL_LAYOUT_NHWC_U8)
                    ((uint8_t *)dst)[at * 3 + c] = s[c];
                else if (layout == SL_LAYOUT_NHWC_F32)
                    ((float *)dst)[at * 3 + c] = (float)s[c] * sc[c] + bi[c];
                else
                    ((float *)dst)[c * plane + at] = (float)s[c] * sc[c] + bi[c];
            }
        }
    }
}

/* Built twice, as resize.c (see there): an AVX2 clone (vectorized vertical
 * pass and window permutes) and the baseline one; the always_inline
 * helpers are compiled into each. Neither enables FMA, which keeps u8
 * bit-identical to sl_resize_rgb_u8. Not under sanitizers: their runtime
 * is not up when the ifunc resolver runs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                        \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
void sl_resample_sample(const uint8_t *src, int sw, int sh, int sp, const sl_out_spec *o)
{
    /* No status to return: invalid arguments leave dst untouched. */
    if (!o)
        return;
    int dw = o->w, dh = o->h, flip = o->flip;
    sl_layout layout = o->layout;
    const float *mean = o->mean, *std = o->std;
    void *dst = o->dst;
    if (!src || !dst || sw <= 0 || sh <= 0 || dw <= 0 || dh <= 0 || sw > INT32_MAX / 3 ||
        dw > INT32_MAX / 3 || sp < sw * 3 || (unsigned)layout > SL_LAYOUT_NCHW_F32)
        return;
    int u8 = layout == SL_LAYOUT_NHWC_U8;
    if (!u8 && (!mean || !std))
        return;
    /* value = v * sc[c] + bi[c]; u8 keeps v (+0.5 in the bilinear bias,
     * the rounding of to_u8). */
    float sc[3] = {1, 1, 1}, bi[3] = {0.5f, 0.5f, 0.5f};
    if (!u8)
        for (int c = 0; c < 3; c++) {
            sc[c] = 1.0f / std[c];
            bi[c] = -mean[c] * sc[c];
        }

    int linear = (double)sw / dw < 2.0; /* sl_resize_taps: bilinear, every n <= 2 */
    int planar = layout == SL_LAYOUT_NCHW_F32;
    size_t pstride = (size_t)sw + SL_RESAMPLE_PAD, nblk = (size_t)dw / 8;
    size_t o_taps = al32(3 * pstride * sizeof(float));
    size_t o_blk = al32(o_taps + ((size_t)dw + dh) * sizeof(sl_rtap));
    size_t o_tab = o_blk + (linear ? 3 * nblk * sizeof(sl_hblk) : 0);
    size_t o_tmp = o_tab + (linear ? 3 * (size_t)dw * 4 * sizeof(int32_t) : 0);
    size_t need = o_tmp + (!linear || !planar ? 3 * (size_t)dw * sizeof(float) : 0);
    _Alignas(32) unsigned char stackbuf[SL_RESAMPLE_STACK];
    unsigned char *mem = stackbuf;
    if (need > sizeof stackbuf) {
        mem = aligned_alloc(32, al32(need));
        if (!mem) {
            resample_nearest(src, sw, sh, sp, o, sc, bi);
            return;
        }
    }
    float *acc = (float *)mem; /* three plane rows, pstride apart */
    float *accp[3] = {acc, acc + pstride, acc + 2 * pstride};
    for (int c = 0; c < 3; c++) /* windows read the pad: keep it defined */
        memset(accp[c] + sw, 0, SL_RESAMPLE_PAD * sizeof(float));
    sl_rtap *ht = (sl_rtap *)(mem + o_taps);
    sl_rtap *vt = ht + dw;
    sl_resize_taps(ht, sw, dw);
    sl_resize_taps(vt, sh, dh);
    if (flip) /* output x takes tap dw-1-x */
        for (int a = 0, b = dw - 1; a < b; a++, b--) {
            sl_rtap t = ht[a];
            ht[a] = ht[b];
            ht[b] = t;
        }
    /* Per plane c: blocks blk + c*nblk; tables ia, ib, wa, wb of dw each. */
    sl_hblk *blk = (sl_hblk *)(mem + o_blk);
    int32_t *tab = (int32_t *)(mem + o_tab);
    float *tmp = (float *)(mem + o_tmp);
    if (linear)
        for (int c = 0; c < 3; c++) {
            int32_t *t = tab + (size_t)c * 4 * dw;
            sl_resample_expand_linear(ht, dw, sc[c], t, t + dw, (float *)(t + 2 * dw),
                                      (float *)(t + 3 * dw), blk + c * nblk);
        }

    size_t plane = (size_t)dh * dw;
    for (int y = 0; y < dh; y++) {
        const sl_rtap *t = &vt[y];
        const uint8_t *row = src + (size_t)t->i0 * sp;
        vrow_set(accp[0], accp[1], accp[2], row, t->w0, sw);
        for (int k = 1; k < t->n; k++) {
            float w = k == t->n - 1 ? t->wn : t->wmid;
            vrow_add(accp[0], accp[1], accp[2], row + (size_t)k * sp, w, sw);
        }
        if (!linear) {
            harea_rows(ht, dw, acc, pstride, tmp);
            sl_store_row(o, y, tmp, tmp + dw, tmp + 2 * dw, sc, bi, 0.5f, 1);
            continue;
        }
        float *out[3];
        for (int c = 0; c < 3; c++)
            out[c] = planar ? (float *)dst + c * plane + (size_t)y * dw : tmp + (size_t)c * dw;
        for (int c = 0; c < 3; c++) {
            const int32_t *tc = tab + (size_t)c * 4 * dw;
            hplane(blk + c * nblk, tc, tc + dw, (const float *)(tc + 2 * dw),
                   (const float *)(tc + 3 * dw), bi[c], dw, accp[c], out[c]);
        }
        /* NCHW: the pass wrote the planes in place. NHWC: values already
         * normalized (f32) or holding the rounding's 0.5 (u8, in the bias). */
        if (!planar)
            sl_store_row(o, y, out[0], out[1], out[2], NULL, NULL, 0.0f, 1);
    }
    if (mem != stackbuf)
        free(mem);
}

/* tests/pipeline/test_resample.c - the fused resample (resize + flip +
 * normalize + layout) against the two-pass path it replaces:
 * sl_resize_rgb_u8 into an RGB scratch, then sl_store_sample.
 *
 *   u8:  bit-identical (same filter, same float operations, flip = mirrored
 *        taps).
 *   f32: the fused path normalizes the unrounded resized value, the old one
 *        the rounded u8, so they may differ by up to 0.5/std[c] (plus float
 *        rounding); and the f32 value, de-normalized and rounded, must give
 *        back the u8 output (the rounding is the only difference).
 * Sizes: odd ones and scale factors on both sides of 2 (bilinear and area),
 * mixed per direction, identity, 1x1 sources, row pitch larger than the row.
 * sl_decode_crop_sample is checked against sl_decode_crop + sl_store_sample
 * on a real JPEG, and on corrupt data.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "pipeline/image/image.h"
#include "testutil.h"

static const float mean[3] = {123.675f, 116.28f, 103.53f};
static const float stdv[3] = {58.395f, 57.12f, 57.375f};

#define GUARD 64

/* Random source with smooth and sharp parts (pitch sp >= sw*3, padding
 * bytes random too: reading them would show). */
static uint8_t *make_src(int sw, int sh, int sp, uint64_t seed)
{
    uint8_t *s = malloc((size_t)sp * sh);
    cr_assert_not_null(s);
    for (int y = 0; y < sh; y++)
        for (int i = 0; i < sp; i++) {
            int x = i / 3;
            uint8_t r = (uint8_t)tu_rand(&seed);
            /* channel 0 smooth, 1 noise, 2 hard steps with extremes */
            uint8_t v = i >= sw * 3 ? r
                      : i % 3 == 0 ? (uint8_t)((x * 7 + y * 5) & 0xFF)
                      : i % 3 == 1 ? r
                      : ((x / 3 + y / 2) & 1) ? 255 : 0;
            s[(size_t)y * sp + i] = v;
        }
    return s;
}

/* One size pair, every layout and flip: fused vs. two-pass. */
static void check(int sw, int sh, int pad, int dw, int dh, uint64_t seed)
{
    int sp = sw * 3 + pad;
    uint8_t *src = make_src(sw, sh, sp, seed);
    size_t px = (size_t)dw * dh;
    uint8_t *rgb = malloc(px * 3);
    uint8_t *old = malloc(px * 12), *neu = malloc(px * 12 + GUARD);
    uint8_t *u8 = malloc(px * 3);
    cr_assert(rgb && old && neu && u8);
    sl_resize_rgb_u8(src, sw, sh, sp, rgb, dw, dh, dw * 3);
    for (int flip = 0; flip < 2; flip++) {
        /* u8 output first: the f32 checks below compare against it */
        sl_store_sample(rgb, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                            .layout = SL_LAYOUT_NHWC_U8, .mean = mean, .std = stdv,
                                            .dst = u8});
        for (int layout = SL_LAYOUT_NHWC_U8; layout <= SL_LAYOUT_NCHW_F32; layout++) {
            size_t bytes = sl_sample_bytes(dh, dw, (sl_layout)layout);
            sl_store_sample(rgb, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                                .layout = (sl_layout)layout, .mean = mean,
                                                .std = stdv, .dst = old});
            memset(neu, 0xA5, bytes + GUARD);
            sl_resample_sample(src, sw, sh, sp, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                                               .layout = (sl_layout)layout,
                                                               .mean = mean, .std = stdv,
                                                               .dst = neu});
            for (int i = 0; i < GUARD; i++)
                cr_assert_eq(neu[bytes + i], 0xA5, "%dx%d->%dx%d layout %d: wrote past the sample",
                             sw, sh, dw, dh, layout);
            if (layout == SL_LAYOUT_NHWC_U8) {
                for (size_t i = 0; i < bytes; i++)
                    cr_assert_eq(neu[i], old[i], "%dx%d->%dx%d flip %d: u8 %zu: %d, want %d", sw,
                                 sh, dw, dh, flip, i, neu[i], old[i]);
                continue;
            }
            const float *a = (const float *)old, *b = (const float *)neu;
            for (size_t i = 0; i < px * 3; i++) {
                int c = layout == SL_LAYOUT_NHWC_F32 ? (int)(i % 3) : (int)(i / px);
                size_t p = layout == SL_LAYOUT_NHWC_F32 ? i / 3 : i % px; /* pixel */
                float tol = 0.5f / stdv[c] + 1e-4f;
                cr_assert(isfinite(b[i]) && fabsf(b[i] - a[i]) <= tol,
                          "%dx%d->%dx%d flip %d layout %d value %zu: %.7g, old %.7g", sw, sh, dw,
                          dh, flip, layout, i, b[i], a[i]);
                /* de-normalized and rounded it is the u8 value (within one
                 * level where v sits at .5 and float rounding decides) */
                double v = (double)b[i] * stdv[c] + mean[c];
                long r = lround(v < 0 ? 0 : v > 255 ? 255 : v);
                int want = u8[p * 3 + c];
                cr_assert(labs(r - want) <= (fabs(v - floor(v) - 0.5) < 1e-3 ? 1 : 0),
                          "%dx%d->%dx%d flip %d layout %d value %zu: rounds to %ld, u8 %d", sw,
                          sh, dw, dh, flip, layout, i, r, want);
            }
        }
    }
    free(src);
    free(rgb);
    free(old);
    free(neu);
    free(u8);
}

Test(pipeline_resample, matches_two_pass_path)
{
    static const int sz[][5] = {
        /* sw, sh, pad, dw, dh */
        {300, 331, 0, 224, 224}, /* bilinear both ways (the pipeline's usual case) */
        {17, 9, 5, 5, 7},        /* area across, bilinear down */
        {500, 500, 3, 224, 224}, /* area both ways */
        {1, 1, 0, 3, 3},         /* single pixel, enlarged */
        {100, 60, 0, 224, 224},  /* upscale */
        {224, 224, 1, 224, 224}, /* identity */
        {449, 223, 0, 224, 224}, /* just over 2 across, just under 1 down */
        {7, 13, 2, 1, 1},        /* to one pixel */
        {9, 31, 0, 13, 5},       /* bilinear across, area down */
        {1000, 10, 0, 3, 10},    /* long area taps, identity down */
    };
    for (size_t k = 0; k < sizeof sz / sizeof *sz; k++)
        check(sz[k][0], sz[k][1], sz[k][2], sz[k][3], sz[k][4], 77 + k);
}

/* A flip changes something (an upscale of an asymmetric image) and is its
 * own inverse: flipped f32 == unflipped f32 mirrored, exactly. */
Test(pipeline_resample, flip_mirrors_exactly)
{
    int sw = 37, sh = 21, dw = 53, dh = 19;
    uint8_t *src = make_src(sw, sh, sw * 3, 5);
    size_t px = (size_t)dw * dh;
    float *a = malloc(px * 12), *b = malloc(px * 12);
    cr_assert(a && b);
    for (int layout = SL_LAYOUT_NHWC_F32; layout <= SL_LAYOUT_NCHW_F32; layout++) {
        sl_resample_sample(src, sw, sh, sw * 3, &(sl_out_spec){.w = dw, .h = dh, .flip = 0,
                                                               .layout = (sl_layout)layout,
                                                               .mean = mean, .std = stdv,
                                                               .dst = a});
        sl_resample_sample(src, sw, sh, sw * 3, &(sl_out_spec){.w = dw, .h = dh, .flip = 1,
                                                               .layout = (sl_layout)layout,
                                                               .mean = mean, .std = stdv,
                                                               .dst = b});
        int differs = 0;
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++)
                for (int c = 0; c < 3; c++) {
                    size_t i, j;
                    if (layout == SL_LAYOUT_NHWC_F32) {
                        i = (((size_t)y * dw + x) * 3 + c);
                        j = (((size_t)y * dw + (dw - 1 - x)) * 3 + c);
                    } else {
                        i = (size_t)c * px + (size_t)y * dw + x;
                        j = (size_t)c * px + (size_t)y * dw + (dw - 1 - x);
                    }
                    cr_assert_eq(memcmp(&b[i], &a[j], sizeof(float)), 0,
                                 "layout %d (%d,%d,%d)", layout, y, x, c);
                    differs |= a[i] != b[i];
                }
        cr_assert(differs, "flip changed nothing");
    }
    free(src);
    free(a);
    free(b);
}

Test(pipeline_resample, invalid_arguments_leave_dst)
{
    uint8_t src[12] = {0}, dst[64];
    memset(dst, 0x33, sizeof dst);
    sl_resample_sample(NULL, 2, 2, 6, &(sl_out_spec){.w = 2, .h = 2, .flip = 0,
                                                     .layout = SL_LAYOUT_NHWC_U8, .mean = NULL,
                                                     .std = NULL, .dst = dst});
    sl_resample_sample(src, 0, 2, 6, &(sl_out_spec){.w = 2, .h = 2, .flip = 0,
                                                    .layout = SL_LAYOUT_NHWC_U8, .mean = NULL,
                                                    .std = NULL, .dst = dst});
    sl_resample_sample(src, 2, 2, 5, &(sl_out_spec){.w = 2, .h = 2, .flip = 0,
                                                    .layout = SL_LAYOUT_NHWC_U8, .mean = NULL,
                                                    .std = NULL, .dst = dst}); /* pitch */
    sl_resample_sample(src, 2, 2, 6, &(sl_out_spec){.w = 2, .h = 0, .flip = 0,
                                                    .layout = SL_LAYOUT_NHWC_U8, .mean = NULL,
                                                    .std = NULL, .dst = dst});
    sl_resample_sample(src, 2, 2, 6, &(sl_out_spec){.w = 2, .h = 2, .flip = 0,
                                                    .layout = SL_LAYOUT_NCHW_F32, .mean = NULL,
                                                    .std = NULL, .dst = dst}); /* no mean */
    sl_resample_sample(src, 2, 2, 6, &(sl_out_spec){.w = 2, .h = 2, .flip = 0,
                                                    .layout = (sl_layout)7, .mean = mean,
                                                    .std = stdv, .dst = dst});
    for (size_t i = 0; i < sizeof dst; i++)
        cr_assert_eq(dst[i], 0x33);
}

/* sl_decode_crop_sample on the RGB path (SLUICE_DECODE=rgb; the planar
 * default is tests/pipeline/test_decode_yuv.c's) = sl_decode_crop then the
 * fused store: same u8 bytes, f32 within the bound; corrupt data is
 * SL_EIMAGE. */
Test(pipeline_resample, decode_crop_sample_matches_decode_crop)
{
    int W = 317, H = 243;
    uint8_t *img = make_src(W, H, W * 3, 9);
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    cr_assert_eq(tjCompress2(tj, img, W, W * 3, H, TJPF_RGB, &jpeg, &len, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    sl_decoder *d;
    cr_assert_eq(setenv("SLUICE_DECODE", "rgb", 1), 0);
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    unsetenv("SLUICE_DECODE");
    const sl_crop crops[] = {
        {0, 0, W, H}, {31, 17, 150, 101}, {200, 100, 117, 143}, {5, 6, 40, 30}};
    const int outs[][2] = {{224, 224}, {64, 48}, {13, 7}};
    for (size_t k = 0; k < sizeof crops / sizeof *crops; k++)
        for (size_t o = 0; o < sizeof outs / sizeof *outs; o++) {
            int ow = outs[o][0], oh = outs[o][1];
            size_t px = (size_t)ow * oh;
            uint8_t *rgb = malloc(px * 3), *old = malloc(px * 12), *neu = malloc(px * 12);
            cr_assert(rgb && old && neu);
            cr_assert_eq(sl_decode_crop(d, jpeg, len, &crops[k], ow, oh, rgb, ow * 3), SL_OK,
                         "%s", sl_errmsg());
            for (int flip = 0; flip < 2; flip++)
                for (int layout = SL_LAYOUT_NHWC_U8; layout <= SL_LAYOUT_NCHW_F32; layout++) {
                    sl_store_sample(rgb, &(sl_out_spec){.w = ow, .h = oh, .flip = flip,
                                                        .layout = (sl_layout)layout, .mean = mean,
                                                        .std = stdv, .dst = old});
                    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &crops[k],
                                                       &(sl_out_spec){.w = ow, .h = oh,
                                                                      .flip = flip,
                                                                      .layout = (sl_layout)layout,
                                                                      .mean = mean, .std = stdv,
                                                                      .dst = neu}),
                                 SL_OK, "%s", sl_errmsg());
                    if (layout == SL_LAYOUT_NHWC_U8) {
                        cr_assert_eq(memcmp(neu, old, px * 3), 0, "crop %zu out %zu flip %d", k,
                                     o, flip);
                        continue;
                    }
                    const float *a = (const float *)old, *b = (const float *)neu;
                    for (size_t i = 0; i < px * 3; i++) {
                        int c = layout == SL_LAYOUT_NHWC_F32 ? (int)(i % 3) : (int)(i / px);
                        cr_assert(fabsf(a[i] - b[i]) <= 0.5f / stdv[c] + 1e-4f,
                                  "crop %zu out %zu flip %d layout %d value %zu", k, o, flip,
                                  layout, i);
                    }
                }
            free(rgb);
            free(old);
            free(neu);
        }
    /* Truncated stream and bad arguments. */
    uint8_t *out = malloc(224 * 224 * 12);
    cr_assert_not_null(out);
    int rc = sl_decode_crop_sample(d, jpeg, len / 2, &crops[0], &(sl_out_spec){.w = 224, .h = 224,
                                                                               .flip = 0,
                                                                               .layout = SL_LAYOUT_NCHW_F32,
                                                                               .mean = mean,
                                                                               .std = stdv,
                                                                               .dst = out});
    cr_assert_eq(rc, SL_EIMAGE, "truncated: %d %s", rc, sl_errmsg());
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &crops[0], &(sl_out_spec){.w = 224, .h = 224,
                                                                               .flip = 0,
                                                                               .layout = SL_LAYOUT_NCHW_F32,
                                                                               .mean = NULL,
                                                                               .std = stdv,
                                                                               .dst = out}),
                 SL_EINVAL);
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &crops[0], &(sl_out_spec){.w = 0, .h = 224,
                                                                               .flip = 0,
                                                                               .layout = SL_LAYOUT_NHWC_U8,
                                                                               .mean = NULL,
                                                                               .std = NULL,
                                                                               .dst = out}),
                 SL_EINVAL);
    const sl_crop outside = {W - 10, 0, 11, 5};
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &outside, &(sl_out_spec){.w = 8, .h = 8,
                                                                              .flip = 0,
                                                                              .layout = SL_LAYOUT_NHWC_U8,
                                                                              .mean = NULL,
                                                                              .std = NULL,
                                                                              .dst = out}),
                 SL_EINVAL);
    /* the decoder is still usable after the errors */
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &crops[1], &(sl_out_spec){.w = 224, .h = 224,
                                                                               .flip = 1,
                                                                               .layout = SL_LAYOUT_NHWC_U8,
                                                                               .mean = NULL,
                                                                               .std = NULL,
                                                                               .dst = out}),
                 SL_OK, "%s", sl_errmsg());
    free(out);
    sl_decoder_destroy(d);
    tjFree(jpeg);
    free(img);
}

/* sl_resample_planes on one gray plane, windowed on the whole plane, is
 * sl_resample_sample on the RGB image with R = G = B = that plane: the same
 * taps (window_taps on a whole-pixel window = sl_resize_taps: bit for bit
 * when bilinear; area edges found in double there, equal up to rounding
 * that moves no u8 here, records/resize_tap.h), the same
 * vertical value (prow_two's wa*a + wb*b = vrow_set then vrow_add, no FMA)
 * and the same horizontal blocks, so u8 is bit-identical and f32 differs by
 * float rounding only (the sample path folds 1/std into the weights). This
 * pins the planes path's own code exactly, which the YCbCr tests bound only
 * against libjpeg's: the AVX2 vertical pass (prow_two_avx2, widths not a
 * multiple of 8 for its tail), the one-vector window blocks of an
 * enlargement, the two-vector ones, area taps, flip, and the fused NCHW
 * row (224 wide, 32- and 16-byte aligned destinations). */
Test(pipeline_resample, planes_gray_matches_sample_path)
{
    static const int sz[][4] = {
        {300, 241, 224, 224}, /* bilinear, two-vector windows */
        {100, 60, 224, 224},  /* enlargement: one-vector windows */
        {301, 97, 224, 56},   /* odd width: the vertical pass's scalar tail */
        {500, 470, 224, 224}, /* area both ways */
        {93, 45, 40, 37},     /* small, width not a multiple of 8 */
    };
    for (size_t k = 0; k < sizeof sz / sizeof *sz; k++) {
        int sw = sz[k][0], sh = sz[k][1], dw = sz[k][2], dh = sz[k][3];
        uint8_t *rgb = make_src(sw, sh, sw * 3, 101 + k);
        uint8_t *y = malloc((size_t)sw * sh);
        cr_assert(y);
        for (size_t i = 0; i < (size_t)sw * sh; i++) /* the smooth and the noisy channel */
            y[i] = rgb[i * 3 + (i % 7 < 4 ? 0 : 1)];
        for (size_t i = 0; i < (size_t)sw * sh; i++)
            rgb[i * 3] = rgb[i * 3 + 1] = rgb[i * 3 + 2] = y[i];
        sl_plane_view pv = {y, sw, sh, sw, 0.0, 0.0, sw, sh};
        size_t px = (size_t)dw * dh;
        /* aligned_alloc wants a multiple of the alignment (C11; TSan refuses others) */
        size_t bytes = (px * 12 + 64 + 63) / 64 * 64;
        uint8_t *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
        cr_assert(a && b);
        for (int flip = 0; flip < 2; flip++) {
            sl_resample_sample(rgb, sw, sh, sw * 3, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                                                   .layout = SL_LAYOUT_NHWC_U8,
                                                                   .mean = NULL, .std = NULL,
                                                                   .dst = a});
            cr_assert_eq(sl_resample_planes(&pv, 1, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                                                   .layout = SL_LAYOUT_NHWC_U8,
                                                                   .mean = NULL, .std = NULL,
                                                                   .dst = b}), SL_OK);
            for (size_t i = 0; i < px * 3; i++)
                cr_assert_eq(b[i], a[i], "%dx%d->%dx%d flip %d: u8 %zu: %d, want %d", sw, sh, dw,
                             dh, flip, i, b[i], a[i]);
            /* NCHW f32 at 32- and 16-byte aligned destinations (streamed) */
            sl_resample_sample(rgb, sw, sh, sw * 3, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                                                   .layout = SL_LAYOUT_NCHW_F32,
                                                                   .mean = mean, .std = stdv,
                                                                   .dst = a});
            for (int off = 0; off <= 16; off += 16) {
                const float *fa = (const float *)a, *fb = (const float *)(b + off);
                cr_assert_eq(sl_resample_planes(&pv, 1, &(sl_out_spec){.w = dw, .h = dh,
                                                                       .flip = flip,
                                                                       .layout = SL_LAYOUT_NCHW_F32,
                                                                       .mean = mean, .std = stdv,
                                                                       .dst = b + off}), SL_OK);
                for (size_t i = 0; i < px * 3; i++)
                    cr_assert(fabsf(fb[i] - fa[i]) <= 1e-5f * (1 + fabsf(fa[i])),
                              "%dx%d->%dx%d flip %d offset %d: f32 %zu: %.8g, want %.8g", sw, sh,
                              dw, dh, flip, off, i, fb[i], fa[i]);
            }
        }
        free(rgb);
        free(y);
        free(a);
        free(b);
    }
}

/* Cr's taps are Cb's when the two planes share their grid (every JPEG) and
 * its own otherwise: a Cr window shifted by whole pixels from Cb's (both
 * inside the plane, no clamping) gives what the Cr plane shifted the other
 * way does on Cb's window, up to float rounding of the tap positions; a Cr
 * that took Cb's taps would be 7 x 5 pixels off. Bilinear (enlargement) and
 * area outputs. */
Test(pipeline_resample, planes_cr_own_window)
{
    int W = 200, H = 150, cw = 100, ch = 75, dx = 7, dy = 5;
    uint8_t *y = malloc((size_t)W * H), *u = malloc((size_t)cw * ch);
    uint8_t *v = malloc((size_t)cw * ch), *vs = calloc((size_t)cw * ch, 1);
    cr_assert(y && u && v && vs);
    uint64_t st = 1234;
    for (int i = 0; i < W * H; i++)
        y[i] = (uint8_t)tu_rand(&st);
    for (int i = 0; i < cw * ch; i++) {
        u[i] = (uint8_t)tu_rand(&st);
        v[i] = (uint8_t)tu_rand(&st);
    }
    for (int r = 0; r + dy < ch; r++)
        for (int c = 0; c + dx < cw; c++)
            vs[r * cw + c] = v[(r + dy) * cw + c + dx];
    sl_plane_view own[3] = {{y, W, H, W, 21.0, 16.5, 140.0, 100.0},
                            {u, cw, ch, cw, 10.5, 8.25, 70.0, 50.0},
                            {v, cw, ch, cw, 10.5 + dx, 8.25 + dy, 70.0, 50.0}};
    sl_plane_view shared[3] = {own[0], own[1], {vs, cw, ch, cw, 10.5, 8.25, 70.0, 50.0}};
    static const int outs[][2] = {{96, 64}, {32, 24}};
    for (size_t o = 0; o < sizeof outs / sizeof *outs; o++) {
        int dw = outs[o][0], dh = outs[o][1];
        size_t n = (size_t)dw * dh * 3;
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        cr_assert(a && b);
        for (int flip = 0; flip < 2; flip++) {
            cr_assert_eq(sl_resample_planes(own, 3, &(sl_out_spec){.w = dw, .h = dh, .flip = flip,
                                                                   .layout = SL_LAYOUT_NHWC_F32,
                                                                   .mean = mean, .std = stdv,
                                                                   .dst = a}), SL_OK);
            cr_assert_eq(sl_resample_planes(shared, 3, &(sl_out_spec){.w = dw, .h = dh,
                                                                      .flip = flip,
                                                                      .layout = SL_LAYOUT_NHWC_F32,
                                                                      .mean = mean, .std = stdv,
                                                                      .dst = b}), SL_OK);
            for (size_t i = 0; i < n; i++)
                cr_assert(fabsf(a[i] - b[i]) <= 1e-4f * (1 + fabsf(b[i])),
                          "%dx%d flip %d: value %zu: %.8g, shifted plane %.8g", dw, dh, flip, i,
                          a[i], b[i]);
        }
        free(a);
        free(b);
    }
    free(y);
    free(u);
    free(v);
    free(vs);
}

/* tests/pipeline/test_sample.c - sl_store_sample against a plain loop for
 * every layout and flip, on odd sizes (the vectorized paths' tails). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/image/image.h"
#include "testutil.h"

static const float mean[3] = {123.675f, 116.28f, 103.53f};
static const float stdv[3] = {58.395f, 57.12f, 57.375f};

/* Value of output channel c at (y, x): the input pixel (y, x) or, flipped,
 * (y, w-1-x), normalized in double precision. */
static double ref_value(const uint8_t *rgb, int w, int y, int x, int c, int flip, int norm)
{
    int sx = flip ? w - 1 - x : x;
    double v = rgb[((size_t)y * w + sx) * 3 + c];
    return norm ? (v - mean[c]) / stdv[c] : v;
}

static void check(int h, int w, int flip, sl_layout layout, uint64_t seed)
{
    size_t n = (size_t)h * w * 3, bytes = sl_sample_bytes(h, w, layout);
    cr_assert_eq(bytes, layout == SL_LAYOUT_NHWC_U8 ? n : n * 4);
    uint8_t *rgb = malloc(n);
    /* One guard element past the sample catches writes beyond it. */
    uint8_t *dst = malloc(bytes + 16);
    cr_assert(rgb && dst);
    for (size_t i = 0; i < n; i++)
        rgb[i] = (uint8_t)tu_rand(&seed);
    rgb[0] = 0;
    rgb[n - 1] = 255;
    memset(dst, 0x5A, bytes + 16);
    sl_store_sample(rgb, &(sl_out_spec){.w = w, .h = h, .flip = flip, .layout = layout,
                                        .mean = mean, .std = stdv, .dst = dst});
    for (int i = 0; i < 16; i++)
        cr_assert_eq(dst[bytes + i], 0x5A, "%dx%d layout %d: wrote past the sample", h, w, layout);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                if (layout == SL_LAYOUT_NHWC_U8) {
                    uint8_t got = dst[((size_t)y * w + x) * 3 + c];
                    cr_assert_eq(got, (uint8_t)ref_value(rgb, w, y, x, c, flip, 0),
                                 "%dx%d flip %d: u8 at (%d,%d,%d)", h, w, flip, y, x, c);
                    continue;
                }
                const float *f = (const float *)dst;
                size_t at = layout == SL_LAYOUT_NHWC_F32 ? ((size_t)y * w + x) * 3 + c
                                                         : ((size_t)c * h + y) * w + x;
                double want = ref_value(rgb, w, y, x, c, flip, 1);
                cr_assert(fabs(f[at] - want) <= 1e-5 * fabs(want) + 1e-6,
                          "%dx%d flip %d layout %d at (%d,%d,%d): %.9g want %.9g", h, w, flip,
                          layout, y, x, c, f[at], want);
            }
    free(rgb);
    free(dst);
}

Test(pipeline_sample, layouts_against_reference)
{
    /* (h, w); widths over 256 take several row chunks */
    static const int sizes[][2] = {{1, 1}, {3, 5},  {31, 17}, {17, 31}, {224, 224},
                                   {2, 16}, {5, 33}, {3, 600}, {2, 257}};
    static const sl_layout layouts[] = {SL_LAYOUT_NHWC_U8, SL_LAYOUT_NHWC_F32, SL_LAYOUT_NCHW_F32};
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t l = 0; l < 3; l++)
            for (int flip = 0; flip < 2; flip++)
                check(sizes[s][0], sizes[s][1], flip, layouts[l], seed++);
}

/* Flipping twice is the identity (u8), and a flip really moves pixels. */
Test(pipeline_sample, flip_is_a_mirror)
{
    const int h = 7, w = 13;
    uint8_t rgb[7 * 13 * 3], once[7 * 13 * 3], twice[7 * 13 * 3];
    uint64_t seed = 77;
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (uint8_t)tu_rand(&seed);
    sl_store_sample(rgb, &(sl_out_spec){.w = w, .h = h, .flip = 1, .layout = SL_LAYOUT_NHWC_U8,
                                        .mean = mean, .std = stdv, .dst = once});
    sl_store_sample(once, &(sl_out_spec){.w = w, .h = h, .flip = 1, .layout = SL_LAYOUT_NHWC_U8,
                                         .mean = NULL, .std = NULL,
                                         .dst = twice}); /* u8: not needed */
    cr_assert(memcmp(rgb, twice, sizeof rgb) == 0);
    cr_assert(memcmp(rgb, once, sizeof rgb) != 0);
    /* The middle column stays, as whole RGB triples. */
    for (int y = 0; y < h; y++)
        cr_assert(memcmp(rgb + (y * w + w / 2) * 3, once + (y * w + w / 2) * 3, 3) == 0);
}

Test(pipeline_sample, sample_bytes)
{
    cr_assert_eq(sl_sample_bytes(224, 224, SL_LAYOUT_NHWC_U8), (size_t)224 * 224 * 3);
    cr_assert_eq(sl_sample_bytes(224, 224, SL_LAYOUT_NHWC_F32), (size_t)224 * 224 * 3 * 4);
    cr_assert_eq(sl_sample_bytes(17, 31, SL_LAYOUT_NCHW_F32), (size_t)17 * 31 * 3 * 4);
    cr_assert_eq(sl_sample_bytes(0, 31, SL_LAYOUT_NCHW_F32), 0);
}

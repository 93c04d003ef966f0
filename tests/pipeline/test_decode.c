/* tests/pipeline/test_decode.c - ROI JPEG decode against full decodes.
 *
 * JPEGs are made here with tjCompress2 (quality 95) from a smooth synthetic
 * image. References:
 *
 *   scaled: plain libjpeg decode of the whole image at the DCT scale M/8 the
 *           contract picks (no crop_scanline, no skip_scanlines), then the
 *           scaled crop [round(x*M/8), round((x+w)*M/8)) x ... cut out and
 *           resized with sl_resize_rgb_u8. The ROI path decodes the same
 *           coefficients with the same IDCT, so it must match bit for bit:
 *           any slip in the strip offset from jpeg_crop_scanline, the rows
 *           skipped or the rounding shows as a mismatch. (The decoder widens
 *           its strip past the crop so chroma upsampling at the strip edges
 *           cannot differ; this test is what holds it to that.)
 *   plain:  tjDecompress2 at full size, crop, sl_resize_rgb_u8: what
 *           SLUICE_DECODE=full does, so that path must match it exactly
 *           (and the ROI path stays near it, see full_path_...).
 *   box:    the ideal: each output pixel's footprint in source pixels,
 *           averaged in double precision over the full-size decode. Below
 *           8/8 the reduced IDCT (a block-aligned low-pass over 8/M pixels)
 *           followed by an area or bilinear resize is a different filter,
 *           so this is a quality bound, not an identity: on this image
 *           (periods >= 97 px) the worst mean error measured is 2.7 levels
 *           (M = 1, where the 8-pixel blocks widen the filter most); the
 *           test allows TOL_QUALITY on 224 x 224 and 31 x 17 outputs from
 *           images of at least 64 x 64 (tiny ones are dominated by edge
 *           blocks).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h> /* before jpeglib.h */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

#include "pipeline/image/image.h"
#include "testutil.h"

#define TOL_QUALITY 4.0

typedef struct timg {
    int W, H, samp, flags;
    unsigned char *jpeg; /* tjAlloc'd */
    size_t len;
    uint8_t *full;       /* tjDecompress2 RGB, (H, W, 3) */
    uint8_t *scaled[9];  /* libjpeg decode at M/8, (ceil(H*M/8), ceil(W*M/8), 3), on demand */
} timg;

static const char *samp_name(int s)
{
    return s == TJSAMP_444 ? "444" : s == TJSAMP_420 ? "420" : s == TJSAMP_422 ? "422"
         : s == TJSAMP_440 ? "440" : s == TJSAMP_GRAY ? "gray" : "?";
}

/* Smooth RGB: two sinusoids and a ramp (the ramp is steep on small images,
 * so a misplaced crop shows there too). */
static uint8_t *synth(int W, int H)
{
    uint8_t *p = malloc((size_t)W * H * 3);
    cr_assert_not_null(p);
    double span = W + H > 2 ? W + H - 2 : 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *q = p + ((size_t)y * W + x) * 3;
            q[0] = (uint8_t)lround(128 + 90 * sin(2 * M_PI * (x / 151.0 + y / 223.0)));
            q[1] = (uint8_t)lround(40 + 170 * (x + y) / span);
            q[2] = (uint8_t)lround(128 + 90 * cos(2 * M_PI * x / 97.0) * cos(2 * M_PI * y / 131.0));
        }
    return p;
}

static void timg_make(timg *im, int W, int H, int samp, int flags)
{
    memset(im, 0, sizeof *im);
    im->W = W;
    im->H = H;
    im->samp = samp;
    im->flags = flags;
    uint8_t *rgb = synth(W, H);
    tjhandle c = tjInitCompress(), d = tjInitDecompress();
    cr_assert(c && d);
    unsigned long len = 0;
    cr_assert_eq(tjCompress2(c, rgb, W, 0, H, TJPF_RGB, &im->jpeg, &len, samp, 95, flags), 0,
                 "tjCompress2: %s", tjGetErrorStr2(c));
    im->len = len;
    im->full = malloc((size_t)W * H * 3);
    cr_assert_not_null(im->full);
    cr_assert_eq(tjDecompress2(d, im->jpeg, len, im->full, W, 0, H, TJPF_RGB, 0), 0,
                 "tjDecompress2: %s", tjGetErrorStr2(d));
    tjDestroy(c);
    tjDestroy(d);
    free(rgb);
}

static void timg_free(timg *im)
{
    tjFree(im->jpeg);
    free(im->full);
    for (int m = 0; m < 9; m++)
        free(im->scaled[m]);
}

/* The whole image at scale m/8 through plain libjpeg (valid test images:
 * the default error manager is fine). */
static const uint8_t *timg_scaled(timg *im, int m)
{
    if (im->scaled[m])
        return im->scaled[m];
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, im->jpeg, (unsigned long)im->len);
    cr_assert_eq(jpeg_read_header(&ci, TRUE), JPEG_HEADER_OK);
    ci.scale_num = (unsigned)m;
    ci.scale_denom = 8;
    ci.out_color_space = JCS_RGB;
    jpeg_start_decompress(&ci);
    cr_assert_eq(ci.output_width, (JDIMENSION)(im->W * m + 7) / 8);
    cr_assert_eq(ci.output_height, (JDIMENSION)(im->H * m + 7) / 8);
    size_t rowb = (size_t)ci.output_width * 3;
    uint8_t *p = malloc(rowb * ci.output_height);
    cr_assert_not_null(p);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = p + ci.output_scanline * rowb;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    im->scaled[m] = p;
    return p;
}

/* The decoder's scale choice, restated: the smallest of 1/8, 2/8, 4/8, 8/8
 * that covers the output; from 2/8 up for chroma subsampled in one
 * direction only (libjpeg-turbo replicates chroma at 1/8). */
static int want_scale(int samp, int cw, int ch, int ow, int oh)
{
    for (int m = samp == TJSAMP_422 || samp == TJSAMP_440 ? 2 : 1; m < 8; m *= 2)
        if (cw * m / 8 >= ow && ch * m / 8 >= oh)
            return m;
    return 8;
}

static void plain_ref(const timg *im, const sl_crop *c, int ow, int oh, uint8_t *out)
{
    const uint8_t *src = im->full + ((size_t)c->y * im->W + c->x) * 3;
    sl_resize_rgb_u8(src, c->w, c->h, im->W * 3, out, ow, oh, ow * 3);
}

/* Weights of source pixels over [a, b) split into n equal parts: part k
 * covers [a + k(b-a)/n, a + (k+1)(b-a)/n). lo[k], cnt[k] and w[k*stride..]. */
static void box_weights(double a, double b, int n, int limit, int *lo, int *cnt, double *w,
                        int stride)
{
    for (int k = 0; k < n; k++) {
        double s0 = a + k * (b - a) / n, s1 = a + (k + 1) * (b - a) / n;
        int i0 = (int)floor(s0), i1 = (int)ceil(s1);
        if (i1 > limit)
            i1 = limit;
        cr_assert(i1 - i0 <= stride && i1 > i0);
        lo[k] = i0;
        cnt[k] = i1 - i0;
        double tot = 0;
        for (int i = i0; i < i1; i++) {
            double o = fmin(s1, i + 1) - fmax(s0, i);
            w[k * stride + (i - i0)] = o > 0 ? o : 0;
            tot += w[k * stride + (i - i0)];
        }
        for (int i = 0; i < i1 - i0; i++)
            w[k * stride + i] /= tot;
    }
}

/* The crop at scale m/8 as the contract rounds it: r[0..3] = x0, x1, y0, y1
 * in scaled pixels, at least 1 x 1, inside ceil(W*m/8) x ceil(H*m/8). */
static void scaled_rect(const timg *im, const sl_crop *c, int m, int r[4])
{
    int SW = (im->W * m + 7) / 8, SH = (im->H * m + 7) / 8;
    int sx0 = (c->x * m + 4) / 8, sx1 = ((c->x + c->w) * m + 4) / 8;
    int sy0 = (c->y * m + 4) / 8, sy1 = ((c->y + c->h) * m + 4) / 8;
    sx0 = sx0 < SW - 1 ? sx0 : SW - 1;
    sy0 = sy0 < SH - 1 ? sy0 : SH - 1;
    sx1 = sx1 > SW ? SW : sx1 <= sx0 ? sx0 + 1 : sx1;
    sy1 = sy1 > SH ? SH : sy1 <= sy0 ? sy0 + 1 : sy1;
    r[0] = sx0;
    r[1] = sx1;
    r[2] = sy0;
    r[3] = sy1;
}

static void scaled_ref(timg *im, const sl_crop *c, int m, int ow, int oh, uint8_t *out)
{
    const uint8_t *p = timg_scaled(im, m);
    int r[4], SW = (im->W * m + 7) / 8;
    scaled_rect(im, c, m, r);
    sl_resize_rgb_u8(p + ((size_t)r[2] * SW + r[0]) * 3, r[1] - r[0], r[3] - r[2], SW * 3, out,
                     ow, oh, ow * 3);
}

/* Box reference (see the file comment). */
static void box_ref(const timg *im, const sl_crop *c, int m, int ow, int oh, double *out)
{
    int r[4];
    scaled_rect(im, c, m, r);
    int sx0 = r[0], sx1 = r[1], sy0 = r[2], sy1 = r[3];
    double ax = sx0 * 8.0 / m, bx = fmin(sx1 * 8.0 / m, im->W);
    double ay = sy0 * 8.0 / m, by = fmin(sy1 * 8.0 / m, im->H);
    int sx = (int)ceil((bx - ax) / ow) + 2, sy = (int)ceil((by - ay) / oh) + 2;
    int *xlo = malloc(sizeof(int) * ow), *xn = malloc(sizeof(int) * ow);
    int *ylo = malloc(sizeof(int) * oh), *yn = malloc(sizeof(int) * oh);
    double *wx = malloc(sizeof(double) * ow * sx), *wy = malloc(sizeof(double) * oh * sy);
    cr_assert(xlo && xn && ylo && yn && wx && wy);
    box_weights(ax, bx, ow, im->W, xlo, xn, wx, sx);
    box_weights(ay, by, oh, im->H, ylo, yn, wy, sy);
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int ch = 0; ch < 3; ch++) {
                double acc = 0;
                for (int j = 0; j < yn[y]; j++) {
                    const uint8_t *row = im->full + ((size_t)(ylo[y] + j) * im->W) * 3;
                    double rs = 0;
                    for (int i = 0; i < xn[x]; i++)
                        rs += wx[x * sx + i] * row[(xlo[x] + i) * 3 + ch];
                    acc += wy[y * sy + j] * rs;
                }
                out[((size_t)y * ow + x) * 3 + ch] = acc;
            }
    free(xlo);
    free(xn);
    free(ylo);
    free(yn);
    free(wx);
    free(wy);
}

typedef struct errstat {
    double mean;
    double max;
} errstat;

static errstat diff_u8(const uint8_t *a, int pitch, const uint8_t *b, int ow, int oh)
{
    uint64_t sum = 0;
    int max = 0;
    for (int y = 0; y < oh; y++)
        for (int i = 0; i < ow * 3; i++) {
            int d = abs((int)a[(size_t)y * pitch + i] - (int)b[(size_t)y * ow * 3 + i]);
            sum += (uint64_t)d;
            max = d > max ? d : max;
        }
    errstat e = {(double)sum / ((double)ow * oh * 3), max};
    return e;
}

static errstat diff_f64(const uint8_t *a, int pitch, const double *b, int ow, int oh)
{
    errstat e = {0, 0};
    for (int y = 0; y < oh; y++)
        for (int i = 0; i < ow * 3; i++) {
            double d = (double)a[(size_t)y * pitch + i] - b[(size_t)y * ow * 3 + i];
            d = d < 0 ? -d : d;
            e.mean += d;
            e.max = d > e.max ? d : e.max;
        }
    e.mean /= (double)ow * oh * 3;
    return e;
}

/* Half the mean absolute gradient of img (ow x oh, packed), in levels per
 * output pixel summed over x and y: what shifting the image by half an
 * output pixel in both directions changes, on average. */
static double half_gradient(const uint8_t *img, int ow, int oh)
{
    double g = 0;
    size_t n = 0;
    for (int y = 0; y + 1 < oh; y++)
        for (int x = 0; x + 1 < ow; x++)
            for (int ch = 0; ch < 3; ch++) {
                const uint8_t *p = img + ((size_t)y * ow + x) * 3 + ch;
                g += abs(p[3] - p[0]) + abs(p[(size_t)ow * 3] - p[0]);
                n++;
            }
    return n ? 0.5 * g / (double)n : 0;
}

/* Crops that hit the edge cases, plus seeded random-resized crops. */
static int make_crops(int W, int H, sl_crop *c, int max)
{
    int n = 0;
    uint64_t st = (uint64_t)W * 1000003u + (uint64_t)H;
#define ADD(X, Y, CW, CH)                                                                          \
    do {                                                                                           \
        sl_crop t_ = {(X), (Y), (CW), (CH)};                                                       \
        if (t_.w >= 1 && t_.h >= 1 && t_.x >= 0 && t_.y >= 0 && t_.x + t_.w <= W &&                \
            t_.y + t_.h <= H && n < max)                                                           \
            c[n++] = t_;                                                                           \
    } while (0)
    ADD(0, 0, W, H);                       /* whole image */
    ADD(0, 0, 1, 1);                       /* 1 x 1 corners */
    ADD(W - 1, H - 1, 1, 1);
    ADD(W / 2, H / 2, 1, 1);
    ADD(0, H - 1, W, 1);                   /* the last row, full width */
    ADD(W / 3, H - 3, W - W / 3, 3);       /* the bottom rows, to the right edge */
    ADD(W - 1, 0, 1, H);                   /* the last column */
    ADD(W - 5, H / 4, 5, H - H / 4);       /* right edge strip to the bottom */
    ADD(W / 5, 0, W - W / 5 - 1, H / 2);   /* top, odd offsets */
    ADD(17, 9, W - 17, H - 9);             /* to the bottom-right corner */
#undef ADD
    for (int i = 0; i < 5 && n < max; i++) {
        sl_rng r = sl_rng_for(tu_rand(&st), 0, (uint64_t)i);
        sl_rrc_geometry(&r, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c[n++]);
    }
    if (n < max)
        sl_eval_geometry(W, H, 224, 224, 0.875f, &c[n++]);
    return n;
}

/* Output sizes for one crop: fixed ones, and the edges of each scale. */
static int make_outputs(const sl_crop *c, int (*o)[2], int max)
{
    int n = 0;
    static const int fixed[][2] = {{224, 224}, {31, 17}, {1, 1}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < max; i++) {
        o[n][0] = fixed[i][0];
        o[n][1] = fixed[i][1];
        n++;
    }
    /* upscaling (M = 8, bilinear enlarge) */
    if (n < max) {
        o[n][0] = c->w * 2 + 1 < 400 ? c->w * 2 + 1 : 400;
        o[n][1] = c->h * 3 / 2 + 1 < 300 ? c->h * 3 / 2 + 1 : 300;
        n++;
    }
    /* floor(c*m/8) is the largest output decoded at m/8, one more needs the
     * next scale: both sides of each scale's edge. */
    for (int m = 1; m <= 8; m *= 2)
        for (int more = 0; more <= (m < 8); more++) {
            int ow = c->w * m / 8 + more, oh = c->h * m / 8 + more;
            if (ow >= 1 && oh >= 1 && ow <= 480 && oh <= 480 && n < max) {
                o[n][0] = ow;
                o[n][1] = oh;
                n++;
            }
        }
    return n;
}

/* Decode every crop x output of im with d and check it against the
 * references; returns the worst mean error seen per scale (index M). */
static void check_image(sl_decoder *d, timg *im, double worst[9])
{
    sl_crop crops[32];
    int nc = make_crops(im->W, im->H, crops, 32);
    for (int ci = 0; ci < nc; ci++) {
        const sl_crop *c = &crops[ci];
        int outs[16][2];
        int no = make_outputs(c, outs, 16);
        for (int oi = 0; oi < no; oi++) {
            int ow = outs[oi][0], oh = outs[oi][1], pitch = ow * 3 + 5;
            uint8_t *got = malloc((size_t)pitch * oh), *ref = malloc((size_t)ow * oh * 3);
            cr_assert(got && ref);
            memset(got, 0xAB, (size_t)pitch * oh);
            int rc = sl_decode_crop(d, im->jpeg, im->len, c, ow, oh, got, pitch);
            cr_assert_eq(rc, SL_OK, "%dx%d %s: crop %dx%d+%d+%d -> %dx%d: %s", im->W, im->H,
                         samp_name(im->samp), c->w, c->h, c->x, c->y, ow, oh, sl_errmsg());
            int pad_ok = 1;
            for (int y = 0; y < oh; y++)
                for (int i = ow * 3; i < pitch; i++)
                    pad_ok &= got[(size_t)y * pitch + i] == 0xAB;
            cr_assert(pad_ok, "pitch padding written");
            int m = want_scale(im->samp, c->w, c->h, ow, oh);
            scaled_ref(im, c, m, ow, oh, ref);
            errstat e = diff_u8(got, pitch, ref, ow, oh);
            cr_assert(e.max == 0,
                      "%dx%d %s%s: crop %dx%d+%d+%d -> %dx%d (M=%d): differs from the scaled "
                      "decode by up to %g (mean %g)",
                      im->W, im->H, samp_name(im->samp), im->flags ? " progressive" : "", c->w,
                      c->h, c->x, c->y, ow, oh, m, e.max, e.mean);
            /* The quality bound on the two usual outputs (224 x 224 and
             * 31 x 17, the first of make_outputs); its cost grows with the
             * crop's area, once per output size. */
            if (m < 8 && oi < 2 && im->W >= 64 && im->H >= 64) {
                double *bref = malloc(sizeof(double) * ow * oh * 3);
                cr_assert_not_null(bref);
                box_ref(im, c, m, ow, oh, bref);
                e = diff_f64(got, pitch, bref, ow, oh);
                free(bref);
                cr_assert(e.mean <= TOL_QUALITY,
                          "%dx%d %s: crop %dx%d+%d+%d -> %dx%d (M=%d): mean error %g (max %g) "
                          "against the ideal",
                          im->W, im->H, samp_name(im->samp), c->w, c->h, c->x, c->y, ow, oh, m,
                          e.mean, e.max);
            }
            if (e.mean > worst[m])
                worst[m] = e.mean;
            if (im->samp == TJSAMP_GRAY) {
                int gray_ok = 1;
                for (int y = 0; y < oh; y++)
                    for (int x = 0; x < ow; x++) {
                        const uint8_t *p = got + (size_t)y * pitch + x * 3;
                        gray_ok &= p[0] == p[1] && p[1] == p[2];
                    }
                cr_assert(gray_ok, "gray JPEG: a pixel with R, G, B not equal");
            }
            free(got);
            free(ref);
        }
    }
}

typedef struct jcfg {
    int W, H, samp, flags;
} jcfg;

static void check_configs(const jcfg *cfgs, size_t n)
{
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    double worst[9] = {0};
    for (size_t i = 0; i < n; i++) {
        timg im;
        timg_make(&im, cfgs[i].W, cfgs[i].H, cfgs[i].samp, cfgs[i].flags);
        check_image(d, &im, worst);
        timg_free(&im);
    }
    for (int m = 1; m < 8; m *= 2)
        cr_log_info("worst mean error against the ideal at scale %d/8: %.3f", m, worst[m]);
    sl_decoder_destroy(d);
}

/* Every chroma subsampling, baseline and progressive (4:2:0, gray). */
static void check_sizes(const int (*sizes)[2], size_t nsizes)
{
    static const int samps[] = {TJSAMP_420, TJSAMP_444, TJSAMP_GRAY, TJSAMP_422, TJSAMP_440};
    jcfg cfgs[64];
    size_t n = 0;
    for (size_t s = 0; s < nsizes && n + 7 <= 64; s++)
        for (size_t k = 0; k < 5; k++) {
            cfgs[n++] = (jcfg){sizes[s][0], sizes[s][1], samps[k], 0};
            if (samps[k] == TJSAMP_420 || samps[k] == TJSAMP_GRAY)
                cfgs[n++] = (jcfg){sizes[s][0], sizes[s][1], samps[k], TJFLAG_PROGRESSIVE};
        }
    check_configs(cfgs, n);
}

Test(pipeline_decode, roi_matches_reference)
{
    static const int sizes[][2] = {{333, 251}};
    check_sizes(sizes, 1);
}

/* Odd and tiny sizes: partial iMCUs everywhere, 1-pixel images. */
Test(pipeline_decode, roi_matches_reference_small)
{
    static const int sizes[][2] = {{64, 64}, {17, 9}, {1, 1}, {9, 17}};
    check_sizes(sizes, 4);
}

/* A large image, where crops decode at 1/8 .. 8/8. */
Test(pipeline_decode, roi_matches_reference_large)
{
    static const jcfg cfgs[] = {{1000, 750, TJSAMP_420, 0},
                                {1000, 750, TJSAMP_GRAY, TJFLAG_PROGRESSIVE}};
    check_configs(cfgs, 2);
}

/* SLUICE_DECODE=full: whole image at full size, crop, resize: exactly the
 * plain reference. The ROI path against it: identical at 8/8; below, two
 * things separate them: the filter (TOL_QUALITY, as against the ideal) and
 * the crop bounds, rounded to whole scaled pixels, which move the crop by
 * up to half an output pixel in x and in y. That shift changes a pixel by
 * about half the image's gradient per output pixel, so the allowance is
 * TOL_QUALITY + half_gradient (measured: at most 0.55 of it). */
Test(pipeline_decode, full_path_matches_plain_reference)
{
    sl_decoder *full, *roi;
    cr_assert_eq(setenv("SLUICE_DECODE", "full", 1), 0);
    cr_assert_eq(sl_decoder_create(&full), SL_OK);
    cr_assert_eq(unsetenv("SLUICE_DECODE"), 0);
    cr_assert_eq(sl_decoder_create(&roi), SL_OK);
    static const struct {
        int W, H, samp, flags;
    } cfgs[] = {{333, 251, TJSAMP_420, 0}, {333, 251, TJSAMP_GRAY, TJFLAG_PROGRESSIVE},
                {500, 375, TJSAMP_420, 0}, {17, 9, TJSAMP_422, 0}, {64, 64, TJSAMP_444, 0}};
    double worst = 0;
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        timg im;
        timg_make(&im, cfgs[k].W, cfgs[k].H, cfgs[k].samp, cfgs[k].flags);
        sl_crop crops[32];
        int nc = make_crops(im.W, im.H, crops, 32);
        for (int ci = 0; ci < nc; ci++) {
            const sl_crop *c = &crops[ci];
            int outs[16][2];
            int no = make_outputs(c, outs, 16);
            for (int oi = 0; oi < no; oi++) {
                int ow = outs[oi][0], oh = outs[oi][1];
                size_t n = (size_t)ow * oh * 3;
                uint8_t *a = malloc(n), *b = malloc(n), *ref = malloc(n);
                cr_assert(a && b && ref);
                cr_assert_eq(sl_decode_crop(full, im.jpeg, im.len, c, ow, oh, a, ow * 3), SL_OK,
                             "%s", sl_errmsg());
                plain_ref(&im, c, ow, oh, ref);
                cr_assert(memcmp(a, ref, n) == 0, "%dx%d: crop %dx%d+%d+%d -> %dx%d: full path "
                          "differs from tjDecompress2 + crop + resize", im.W, im.H, c->w, c->h,
                          c->x, c->y, ow, oh);
                cr_assert_eq(sl_decode_crop(roi, im.jpeg, im.len, c, ow, oh, b, ow * 3), SL_OK,
                             "%s", sl_errmsg());
                errstat e = diff_u8(b, ow * 3, a, ow, oh);
                int m = want_scale(im.samp, c->w, c->h, ow, oh);
                if (m == 8)
                    cr_assert(e.max == 0, "M=8: ROI and full paths differ");
                if (im.W >= 64 && im.H >= 64 && ow >= 8 && oh >= 8) {
                    double tol = TOL_QUALITY + half_gradient(a, ow, oh);
                    cr_assert(e.mean <= tol, "%dx%d %s: crop %dx%d+%d+%d -> %dx%d (M=%d): ROI vs "
                              "full mean error %g > %g", im.W, im.H, samp_name(im.samp), c->w,
                              c->h, c->x, c->y, ow, oh, m, e.mean, tol);
                    worst = fmax(worst, e.mean / tol);
                }
                free(a);
                free(b);
                free(ref);
            }
        }
        timg_free(&im);
    }
    cr_log_info("worst ROI vs full mean error / tolerance: %.3f", worst);
    sl_decoder_destroy(full);
    sl_decoder_destroy(roi);
}

/* Offset of the first entropy-coded byte (after the first SOS segment). */
static size_t entropy_start(const uint8_t *j, size_t len)
{
    size_t pos = 2;
    while (pos + 4 <= len) {
        cr_assert_eq(j[pos], 0xFF);
        uint8_t m = j[pos + 1];
        size_t seg = (size_t)j[pos + 2] << 8 | j[pos + 3];
        pos += 2 + seg;
        if (m == 0xDA)
            return pos;
    }
    cr_assert_fail("no SOS");
    return 0;
}

static void assert_eimage(int rc, const char *what, size_t at)
{
    cr_assert_eq(rc, SL_EIMAGE, "%s %zu: rc %d (%s)", what, at, rc, sl_errmsg());
    cr_assert(strncmp(sl_errmsg(), "sl_decode", 9) == 0, "%s %zu: message '%s'", what, at,
              sl_errmsg());
}

/* Every prefix of a JPEG fails as SL_EIMAGE, on both paths; the header
 * alone may succeed once the frame header is in (with the right size).
 * Prefixes cut inside the entropy-coded data and closed with an EOI marker
 * pass the structure check and reach libjpeg, whose "premature end of data
 * segment" warning must fail the decode too (libjpeg alone would fill the
 * rest with gray and succeed). */
Test(pipeline_decode, truncated_is_eimage)
{
    sl_decoder *roi, *full;
    cr_assert_eq(setenv("SLUICE_DECODE", "full", 1), 0);
    cr_assert_eq(sl_decoder_create(&full), SL_OK);
    cr_assert_eq(unsetenv("SLUICE_DECODE"), 0);
    cr_assert_eq(sl_decoder_create(&roi), SL_OK);
    static const struct {
        int W, H, samp, flags;
    } cfgs[] = {{64, 48, TJSAMP_420, 0}, {40, 24, TJSAMP_GRAY, TJFLAG_PROGRESSIVE},
                {33, 17, TJSAMP_444, 0}};
    uint8_t out[16 * 16 * 3];
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        timg im;
        timg_make(&im, cfgs[k].W, cfgs[k].H, cfgs[k].samp, cfgs[k].flags);
        sl_crop whole = {0, 0, im.W, im.H}, top = {0, 0, im.W, 8};
        uint8_t *buf = malloc(im.len + 2);
        cr_assert_not_null(buf);
        for (size_t n = 0; n < im.len; n++) {
            memcpy(buf, im.jpeg, n);
            /* The header checks the whole structure first (sl_jpeg_scan):
             * no prefix passes, not even one holding the whole header. */
            int w = 0, h = 0, rc = sl_decoder_header(roi, buf, n, &w, &h, NULL);
            cr_assert_eq(rc, SL_EIMAGE, "header of %zu bytes: rc %d", n, rc);
            assert_eimage(sl_decode_crop(roi, buf, n, &whole, 16, 16, out, 48), "ROI prefix", n);
            assert_eimage(sl_decode_crop(roi, buf, n, &top, 16, 16, out, 48), "ROI top prefix", n);
            assert_eimage(sl_decode_crop(full, buf, n, &top, 16, 16, out, 48), "full prefix", n);
        }
        if (!(im.flags & TJFLAG_PROGRESSIVE)) {
            /* Cut in the entropy data (not its last 2 bytes, which may be
             * padding), closed with EOI: the whole-image crop needs every
             * MCU. (Progressive files legitimately end after any scan.) */
            size_t first = entropy_start(im.jpeg, im.len);
            for (size_t n = first; n + 4 < im.len; n++) {
                memcpy(buf, im.jpeg, n);
                size_t m = n;
                if (buf[m - 1] == 0xFF) /* keep the stuffing pair whole */
                    buf[m++] = 0x00;
                buf[m++] = 0xFF;
                buf[m++] = 0xD9;
                assert_eimage(sl_decode_crop(roi, buf, m, &whole, 16, 16, out, 48), "ROI cut+EOI",
                              n);
                assert_eimage(sl_decode_crop(full, buf, m, &whole, 16, 16, out, 48),
                              "full cut+EOI", n);
            }
        }
        free(buf);
        timg_free(&im);
    }
    sl_decoder_destroy(roi);
    sl_decoder_destroy(full);
}

/* Random byte flips, decoded as the pipeline does (header, a crop from the
 * header's size, decode): SL_OK or SL_EIMAGE, never a crash or an ASan
 * report; both outcomes occur. A flip in entropy data that the crop never
 * reads is fine to miss (the ROI path stops early). After all that damage
 * the same decoder still decodes a good image exactly. */
Test(pipeline_decode, byte_flips)
{
    sl_decoder *d, *fresh;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    cr_assert_eq(sl_decoder_create(&fresh), SL_OK);
    static const struct {
        int W, H, samp, flags;
    } cfgs[] = {{333, 251, TJSAMP_420, 0}, {200, 120, TJSAMP_420, TJFLAG_PROGRESSIVE},
                {64, 64, TJSAMP_GRAY, 0}, {97, 61, TJSAMP_422, 0}};
    uint64_t st = 12345;
    int ok = 0, bad = 0;
    uint8_t out[64 * 48 * 3], want[64 * 48 * 3];
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        timg im;
        timg_make(&im, cfgs[k].W, cfgs[k].H, cfgs[k].samp, cfgs[k].flags);
        uint8_t *buf = malloc(im.len);
        cr_assert_not_null(buf);
        for (int t = 0; t < 1500; t++) {
            memcpy(buf, im.jpeg, im.len);
            int nflip = 1 + (int)(tu_rand(&st) % 4);
            for (int f = 0; f < nflip; f++) {
                /* Half the flips in the first 700 bytes (headers, tables). */
                size_t span = (tu_rand(&st) & 1) && im.len > 700 ? 700 : im.len;
                buf[tu_rand(&st) % span] ^= (uint8_t)(1 + tu_rand(&st) % 255);
            }
            int W, H, rc = sl_decoder_header(d, buf, im.len, &W, &H, NULL);
            cr_assert(rc == SL_OK || rc == SL_EIMAGE, "header rc %d", rc);
            if (rc != SL_OK) {
                bad++;
                continue;
            }
            sl_rng r = sl_rng_for(7, k, (uint64_t)t);
            sl_crop c;
            sl_rrc_geometry(&r, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
            rc = sl_decode_crop(d, buf, im.len, &c, 64, 48, out, 64 * 3);
            cr_assert(rc == SL_OK || rc == SL_EIMAGE, "decode rc %d: %s", rc, sl_errmsg());
            cr_assert(rc == SL_OK || sl_errmsg()[0], "SL_EIMAGE without a message");
            rc == SL_OK ? ok++ : bad++;
        }
        sl_crop c = {im.W / 4, im.H / 5, im.W / 2, im.H / 2};
        cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &c, 64, 48, out, 64 * 3), SL_OK);
        cr_assert_eq(sl_decode_crop(fresh, im.jpeg, im.len, &c, 64, 48, want, 64 * 3), SL_OK);
        cr_assert(memcmp(out, want, sizeof out) == 0, "decoder state leaked from corrupt inputs");
        free(buf);
        timg_free(&im);
    }
    cr_log_info("byte flips: %d decoded, %d rejected", ok, bad);
    cr_assert(ok > 0 && bad > 0, "ok %d bad %d", ok, bad);
    sl_decoder_destroy(d);
    sl_decoder_destroy(fresh);
}

/* A stray restart marker in the entropy data passes the structure check;
 * libjpeg only warns ("Corrupt JPEG data") and would carry on with gray
 * blocks. Here it is an error. */
Test(pipeline_decode, warnings_are_errors)
{
    timg im;
    timg_make(&im, 128, 96, TJSAMP_420, 0);
    size_t first = entropy_start(im.jpeg, im.len), at = first + (im.len - first) / 3;
    uint8_t *buf = malloc(im.len);
    cr_assert_not_null(buf);
    memcpy(buf, im.jpeg, im.len);
    while (buf[at - 1] == 0xFF || buf[at] == 0xFF || buf[at + 1] == 0x00)
        at++; /* keep stuffing pairs whole */
    /* The entropy-coded data ends a third of the way in, at an EOI: the
     * structure is whole, the data runs out (libjpeg's "premature end of
     * data segment" warning). A stray RST marker did this before issue 41;
     * sl_jpeg_scan now refuses restart markers a file's interval does not
     * call for. */
    buf[at] = 0xFF;
    buf[at + 1] = 0xD9;
    size_t len = at + 2;
    cr_assert_eq(sl_jpeg_scan(buf, len, NULL), SL_OK, "the structure is still valid");
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    uint8_t out[32 * 32 * 3];
    sl_crop whole = {0, 0, im.W, im.H};
    int rc = sl_decode_crop(d, buf, len, &whole, 32, 32, out, 96);
    cr_assert_eq(rc, SL_EIMAGE, "rc %d", rc);
    cr_assert(strstr(sl_errmsg(), "Corrupt JPEG data") != NULL, "message: %s", sl_errmsg());
    /* A crop of rows above the damage never meets it. */
    sl_crop top = {0, 0, im.W, 16};
    cr_assert_eq(sl_decode_crop(d, buf, len, &top, 32, 4, out, 96), SL_OK, "%s", sl_errmsg());
    sl_decoder_destroy(d);
    free(buf);
    timg_free(&im);
}

Test(pipeline_decode, cmyk_is_eimage)
{
    const int W = 40, H = 30;
    uint8_t *cmyk = malloc((size_t)W * H * 4);
    cr_assert_not_null(cmyk);
    for (int i = 0; i < W * H * 4; i++)
        cmyk[i] = (uint8_t)(i * 7);
    tjhandle c = tjInitCompress();
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    cr_assert_eq(tjCompress2(c, cmyk, W, 0, H, TJPF_CMYK, &jpeg, &len, TJSAMP_444, 95, 0), 0,
                 "%s", tjGetErrorStr2(c));
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    int w, h;
    cr_assert_eq(sl_decoder_header(d, jpeg, len, &w, &h, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "CMYK") != NULL, "message: %s", sl_errmsg());
    uint8_t out[8 * 8 * 3];
    sl_crop whole = {0, 0, W, H};
    cr_assert_eq(sl_decode_crop(d, jpeg, len, &whole, 8, 8, out, 24), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "CMYK") != NULL, "message: %s", sl_errmsg());
    sl_decoder_destroy(d);
    tjFree(jpeg);
    tjDestroy(c);
    free(cmyk);
}

Test(pipeline_decode, header_and_arguments)
{
    timg im;
    timg_make(&im, 333, 251, TJSAMP_420, 0);
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    int w = 0, h = 0;
    cr_assert_eq(sl_decoder_header(d, im.jpeg, im.len, &w, &h, NULL), SL_OK);
    cr_assert(w == 333 && h == 251);
    static const uint8_t junk[] = "GIF89a not a jpeg at all";
    cr_assert_eq(sl_decoder_header(d, junk, sizeof junk, &w, &h, NULL), SL_EIMAGE);
    cr_assert(strncmp(sl_errmsg(), "sl_decoder_header: ", 19) == 0, "%s", sl_errmsg());
    cr_assert_eq(sl_decoder_header(d, junk, 0, &w, &h, NULL), SL_EIMAGE);
    cr_assert_eq(sl_decoder_header(d, NULL, 0, &w, &h, NULL), SL_EIMAGE);
    cr_assert_eq(sl_decoder_header(NULL, im.jpeg, im.len, &w, &h, NULL), SL_EINVAL);
    cr_assert_eq(sl_decoder_header(d, im.jpeg, im.len, NULL, &h, NULL), SL_EINVAL);

    uint8_t out[10 * 10 * 3];
    sl_crop ok = {0, 0, 10, 10};
    static const sl_crop bad[] = {{-1, 0, 10, 10}, {0, -1, 10, 10}, {0, 0, 0, 10},
                                  {0, 0, 10, 0},   {324, 0, 10, 10}, {0, 242, 10, 10},
                                  {0, 0, 334, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &bad[i], 10, 10, out, 30), SL_EINVAL,
                     "crop %zu", i);
        cr_assert(strstr(sl_errmsg(), "outside") != NULL, "%s", sl_errmsg());
    }
    cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &ok, 0, 10, out, 30), SL_EINVAL);
    cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &ok, 10, -1, out, 30), SL_EINVAL);
    cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &ok, 10, 10, out, 29), SL_EINVAL);
    cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, NULL, 10, 10, out, 30), SL_EINVAL);
    cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &ok, 10, 10, NULL, 30), SL_EINVAL);
    cr_assert_eq(sl_decode_crop(d, im.jpeg, im.len, &ok, 10, 10, out, 30), SL_OK);
    sl_decoder_destroy(d);
    sl_decoder_destroy(NULL);
    cr_assert_eq(sl_decoder_create(NULL), SL_EINVAL);
    timg_free(&im);
}

/* One decoder through images of changing sizes and kinds, errors in
 * between: every result equals a fresh decoder's (nothing carries over),
 * and ASan sees no leak. */
Test(pipeline_decode, decoder_reuse)
{
    static const struct {
        int W, H, samp, flags;
    } cfgs[] = {{1000, 750, TJSAMP_420, 0}, {17, 9, TJSAMP_444, 0},
                {333, 251, TJSAMP_GRAY, TJFLAG_PROGRESSIVE}, {1, 1, TJSAMP_420, 0},
                {640, 480, TJSAMP_422, 0}, {64, 64, TJSAMP_420, TJFLAG_PROGRESSIVE}};
    enum { N = sizeof cfgs / sizeof cfgs[0] };
    timg im[N];
    for (int i = 0; i < N; i++)
        timg_make(&im[i], cfgs[i].W, cfgs[i].H, cfgs[i].samp, cfgs[i].flags);
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    uint8_t got[224 * 224 * 3], want[224 * 224 * 3];
    for (int t = 0; t < 60; t++) {
        timg *p = &im[(t * 5) % N];
        sl_rng r = sl_rng_for(99, 0, (uint64_t)t);
        sl_crop c;
        sl_rrc_geometry(&r, p->W, p->H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
        if (t % 7 == 3) { /* an error in between: truncated data, then a bad crop */
            cr_assert_eq(sl_decode_crop(d, p->jpeg, p->len / 2, &c, 224, 224, got, 672),
                         SL_EIMAGE);
            sl_crop outside = {p->W, 0, 1, 1};
            cr_assert_eq(sl_decode_crop(d, p->jpeg, p->len, &outside, 224, 224, got, 672),
                         SL_EINVAL);
        }
        cr_assert_eq(sl_decode_crop(d, p->jpeg, p->len, &c, 224, 224, got, 672), SL_OK, "%s",
                     sl_errmsg());
        sl_decoder *f;
        cr_assert_eq(sl_decoder_create(&f), SL_OK);
        cr_assert_eq(sl_decode_crop(f, p->jpeg, p->len, &c, 224, 224, want, 672), SL_OK);
        sl_decoder_destroy(f);
        cr_assert(memcmp(got, want, sizeof got) == 0, "image %d: reused decoder differs", t);
    }
    sl_decoder_destroy(d);
    for (int i = 0; i < N; i++)
        timg_free(&im[i]);
}

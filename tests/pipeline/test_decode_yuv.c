/* tests/pipeline/test_decode_yuv.c - the planar decode path (decode_yuv.c,
 * sl_resample_planes) against the RGB path it replaces as the default
 * (SLUICE_DECODE=rgb: libjpeg's upsampling and colour conversion, then
 * sl_resample_sample), which stays the reference.
 *
 * The two are different filters by design (chroma interpolated by the
 * output's bilinear taps instead of libjpeg's fancy upsampling, float
 * colour conversion after the resize, clamping after it; below DCT scale
 * 8/8 also the crop's edges: the RGB path rounds them to whole scaled
 * pixels, the planar path keeps them exact), so the checks are bounds, in
 * levels of u8 NHWC outputs, on
 *   photos:  the three camera JPEGs of tests/data/photos (4:2:2 and 4:2:0),
 *            also transcoded losslessly to progressive and to gray
 *            (tjTransform), random-resized crops (the pipeline's geometry)
 *            and edge/corner/whole-image crops, outputs 224x224, 64x48 and
 *            13x7;
 *   sampling: a noisy synthetic image at 4:4:4, 4:2:2, 4:4:0, 4:2:0 and gray,
 *            small outputs from large crops so DCT scales 1/8..1/2 are taken.
 * Samples decoded at 8/8 (every 224x224 sample of a 500x375 photo): mean
 * |yuv - rgb| per sample <= TOL_SAMPLE, over all of them <= TOL_MEAN, values
 * more than 8 levels apart <= TOL_FAR. Samples below 8/8, against the
 * ideal (each output pixel the exact average of its footprint in a
 * full-size tjDecompress2 decode): the planar path's mean error at most
 * TOL_WORSE above the RGB path's. (Not at 8/8: there the full decode's
 * chroma is libjpeg's fancy upsampling, which the RGB path shares.) Measured on this code, photos at 8/8: about 0.4
 * mean, worst sample 1.2, far 0.1 %; below 8/8 the planar path is the
 * closer of the two to the ideal (e.g. 4.9 against 10.0 levels at 1/4). A
 * strip offset by one chroma sample, rows shifted by one iMCU row, or Cb
 * and Cr swapped each break the bounds.
 * Exact checks: f32 layouts are the u8 values before rounding (within
 * float rounding of the normalization); flip is the exact mirror; two
 * decoders and a decoder reused across images give the same bytes; tiny
 * and thin images (1x1 to 33x1) decode at every sampling; an
 * RGB-colourspace JPEG (no YCbCr) takes the RGB path and equals it exactly;
 * truncated and corrupt files are SL_EIMAGE, a crop outside the image
 * SL_EINVAL, and the decoder keeps working after errors.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h> /* before jpeglib.h */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

#include "pipeline/image/image.h"
#include "photos.h"
#include "testutil.h"

#define TOL_SAMPLE 2.0
#define TOL_MEAN 0.8
#define TOL_FAR 0.005
#define TOL_WORSE 0.25

static const float mean[3] = {123.675f, 116.28f, 103.53f};
static const float stdv[3] = {58.395f, 57.12f, 57.375f};

static sl_decoder *decoder(const char *mode)
{
    sl_decoder *d;
    if (mode)
        cr_assert_eq(setenv("SLUICE_DECODE", mode, 1), 0);
    else
        unsetenv("SLUICE_DECODE");
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    unsetenv("SLUICE_DECODE");
    return d;
}

typedef struct tally {
    double sum, worst;
    size_t far, values, samples, scaled;
} tally;

/* A decoded image at full size (tjDecompress2), for the ideal. */
typedef struct fullimg {
    int W, H;
    uint8_t *rgb;
} fullimg;

static void full_decode(const uint8_t *jpeg, size_t len, fullimg *f)
{
    tjhandle tj = tjInitDecompress();
    int s, cs;
    cr_assert(tj && tjDecompressHeader3(tj, jpeg, (unsigned long)len, &f->W, &f->H, &s, &cs) == 0);
    f->rgb = malloc((size_t)f->W * f->H * 3);
    cr_assert_not_null(f->rgb);
    cr_assert_eq(tjDecompress2(tj, jpeg, (unsigned long)len, f->rgb, f->W, 0, f->H, TJPF_RGB, 0),
                 0);
    tjDestroy(tj);
}

/* Mean |out - ideal|: the ideal of output pixel (x, y) is the average of
 * its footprint in the crop (exact area weights over the full decode). */
static double err_ideal(const fullimg *f, const sl_crop *c, int ow, int oh, int flip,
                        const uint8_t *out)
{
    double e = 0;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int xs = flip ? ow - 1 - x : x;
            double x0 = c->x + (double)xs * c->w / ow, x1 = c->x + (double)(xs + 1) * c->w / ow;
            double y0 = c->y + (double)y * c->h / oh, y1 = c->y + (double)(y + 1) * c->h / oh;
            double s[3] = {0, 0, 0}, wt = 0;
            for (int yy = (int)y0; yy < (int)ceil(y1); yy++)
                for (int xx = (int)x0; xx < (int)ceil(x1); xx++) {
                    double w = (fmin(xx + 1, x1) - fmax(xx, x0)) * (fmin(yy + 1, y1) - fmax(yy, y0));
                    const uint8_t *p = f->rgb + ((size_t)yy * f->W + xx) * 3;
                    for (int k = 0; k < 3; k++)
                        s[k] += w * p[k];
                    wt += w;
                }
            for (int k = 0; k < 3; k++)
                e += fabs(out[((size_t)y * ow + x) * 3 + k] - s[k] / wt);
        }
    return e / ((double)ow * oh * 3);
}

/* yuv and rgb outputs of one crop, checked (see the file comment); the
 * 8/8 samples' differences go into t. */
static void compare(sl_decoder *yuv, sl_decoder *rgb, const uint8_t *jpeg, size_t len,
                    const fullimg *f, const sl_crop *c, int ow, int oh, int flip, tally *t,
                    const char *what)
{
    size_t n = (size_t)ow * oh * 3;
    uint8_t *a = malloc(n), *b = malloc(n);
    cr_assert(a && b);
    cr_assert_eq(sl_decode_crop_sample(yuv, jpeg, len, c, &(sl_out_spec){.w = ow, .h = oh,
                                                                         .flip = flip,
                                                                         .layout = SL_LAYOUT_NHWC_U8,
                                                                         .mean = NULL, .std = NULL,
                                                                         .dst = a}),
                 SL_OK, "%s: %s", what, sl_errmsg());
    cr_assert_eq(sl_decode_crop_sample(rgb, jpeg, len, c, &(sl_out_spec){.w = ow, .h = oh,
                                                                         .flip = flip,
                                                                         .layout = SL_LAYOUT_NHWC_U8,
                                                                         .mean = NULL, .std = NULL,
                                                                         .dst = b}),
                 SL_OK, "%s: %s", what, sl_errmsg());
    if (c->w / 2 >= ow && c->h / 2 >= oh) { /* a DCT scale below 8/8 */
        double ea = err_ideal(f, c, ow, oh, flip, a), eb = err_ideal(f, c, ow, oh, flip, b);
        cr_assert(ea <= eb + TOL_WORSE,
                  "%s: crop %dx%d at (%d,%d) -> %dx%d flip %d: error against the ideal %.2f "
                  "(rgb path %.2f)", what, c->w, c->h, c->x, c->y, ow, oh, flip, ea, eb);
        t->scaled++;
        free(a);
        free(b);
        return;
    }
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        int e = abs((int)a[i] - (int)b[i]);
        d += e;
        t->far += e > 8;
    }
    d /= (double)n;
    cr_assert(d <= TOL_SAMPLE, "%s: crop %dx%d at (%d,%d) -> %dx%d flip %d: mean |diff| %.2f", what,
              c->w, c->h, c->x, c->y, ow, oh, flip, d);
    t->sum += d;
    t->worst = d > t->worst ? d : t->worst;
    t->values += n;
    t->samples++;
    free(a);
    free(b);
}

/* Random-resized crops (the pipeline's geometry) and fixed ones of a W x H
 * image, at three output sizes. */
static void compare_crops(sl_decoder *yuv, sl_decoder *rgb, const uint8_t *jpeg, size_t len,
                          int nrand, tally *t, const char *what)
{
    fullimg f;
    full_decode(jpeg, len, &f);
    int W = f.W, H = f.H;
    const int outs[][2] = {{224, 224}, {64, 48}, {13, 7}};
    sl_crop fixed[] = {{0, 0, W, H}, {0, 0, W / 3 + 1, H / 3 + 1}, {W - 97, H - 61, 97, 61},
                       {1, H / 2, W / 2 + 3, H / 2 - 1}, {W / 2 + 1, 3, 21, 17}};
    for (int k = 0; k < nrand + 5; k++) {
        sl_crop c;
        if (k < 5) {
            c = fixed[k];
        } else {
            sl_rng r = sl_rng_for(11, 0, (uint64_t)k);
            sl_rrc_geometry(&r, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
        }
        const int *o = outs[k % 3];
        compare(yuv, rgb, jpeg, len, &f, &c, o[0], o[1], k & 1, t, what);
    }
    free(f.rgb);
}

static void check_tally(const tally *t, const char *what)
{
    cr_assert(t->samples > 0, "%s: no sample at 8/8", what);
    double m = t->sum / (double)t->samples, far = (double)t->far / (double)t->values;
    cr_log_info("%s: %zu samples at 8/8 (%zu below), mean |diff| %.3f, worst sample %.3f, "
                "far %.4f%%", what, t->samples, t->scaled, m, t->worst, 100 * far);
    cr_assert(m <= TOL_MEAN, "%s: mean |diff| %.3f over %zu samples", what, m, t->samples);
    cr_assert(far <= TOL_FAR, "%s: %.4f%% of values more than 8 levels apart", what, 100 * far);
}

Test(pipeline_decode_yuv, photos_near_rgb_path)
{
    static const char *names[] = {"fruits.jpg", "building.jpg", "messi5.jpg"};
    sl_decoder *yuv = decoder(NULL), *rgb = decoder("rgb");
    tally all = {0};
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        size_t len;
        uint8_t *jpeg = read_photo(names[f], &len);
        tally t = {0};
        compare_crops(yuv, rgb, jpeg, len, 24, &t, names[f]);
        check_tally(&t, names[f]);
        unsigned long plen;
        unsigned char *prog = transcode(jpeg, len, TJXOPT_PROGRESSIVE, &plen);
        compare_crops(yuv, rgb, prog, plen, 6, &t, "progressive");
        tjFree(prog);
        unsigned char *gray = transcode(jpeg, len, TJXOPT_GRAY, &plen);
        compare_crops(yuv, rgb, gray, plen, 6, &t, "gray");
        tjFree(gray);
        all.sum += t.sum;
        all.far += t.far;
        all.scaled += t.scaled;
        all.values += t.values;
        all.samples += t.samples;
        all.worst = t.worst > all.worst ? t.worst : all.worst;
        free(jpeg);
    }
    check_tally(&all, "all photos");
    sl_decoder_destroy(yuv);
    sl_decoder_destroy(rgb);
}

/* A photo-like synthetic image: smooth colour fields, edges, and noise. */
static uint8_t *synth(int W, int H, uint64_t seed)
{
    uint8_t *p = malloc((size_t)W * H * 3);
    cr_assert_not_null(p);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                double v = 128 + 80 * sin(2 * M_PI * (x / (90.0 + 30 * c) + y / 170.0)) +
                           (((x / 37 + y / 29) & 1) ? 30 : -30) + (double)(tu_rand(&seed) % 17) - 8;
                p[((size_t)y * W + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

Test(pipeline_decode_yuv, samplings_and_dct_scales)
{
    const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_440, TJSAMP_420, TJSAMP_GRAY};
    const int sizes[][2] = {{1000, 700}, {317, 243}};
    sl_decoder *yuv = decoder(NULL), *rgb = decoder("rgb");
    for (size_t z = 0; z < 2; z++) {
        int W = sizes[z][0], H = sizes[z][1];
        uint8_t *img = synth(W, H, 5 + z);
        for (size_t s = 0; s < sizeof samps / sizeof *samps; s++) {
            unsigned long len;
            unsigned char *jpeg = encode_rgb(img, W, H, samps[s], 95, 0, &len);
            char what[64];
            snprintf(what, sizeof what, "%dx%d samp %d", W, H, samps[s]);
            tally t = {0};
            compare_crops(yuv, rgb, jpeg, len, 9, &t, what);
            /* scales 1/8, 1/4, 1/2 of large crops */
            const sl_crop big = {3, 5, W - 9, H - 7};
            const int small[][2] = {{W / 9, H / 9}, {W / 5, H / 5}, {W / 3, H / 3}};
            fullimg f;
            full_decode(jpeg, len, &f);
            for (int k = 0; k < 3; k++)
                compare(yuv, rgb, jpeg, len, &f, &big, small[k][0], small[k][1], k & 1, &t, what);
            free(f.rgb);
            check_tally(&t, what);
            tjFree(jpeg);
        }
        free(img);
    }
    sl_decoder_destroy(yuv);
    sl_decoder_destroy(rgb);
}

/* f32 layouts hold the u8 values before rounding; flip mirrors exactly. */
Test(pipeline_decode_yuv, layouts_and_flip)
{
    size_t len;
    uint8_t *jpeg = read_photo("building.jpg", &len);
    sl_decoder *d = decoder(NULL);
    const sl_crop c = {101, 77, 431, 333};
    int ow = 61, oh = 45;
    size_t px = (size_t)ow * oh;
    uint8_t *u8 = malloc(px * 3), *mir = malloc(px * 3);
    float *nhwc = malloc(px * 12), *nchw = malloc(px * 12);
    cr_assert(u8 && mir && nhwc && nchw);
    for (int flip = 0; flip < 2; flip++) {
        cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &c, &(sl_out_spec){.w = ow, .h = oh,
                                                                            .flip = flip,
                                                                            .layout = SL_LAYOUT_NHWC_U8,
                                                                            .mean = NULL,
                                                                            .std = NULL,
                                                                            .dst = u8}), SL_OK);
        cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &c, &(sl_out_spec){.w = ow, .h = oh,
                                                                            .flip = flip,
                                                                            .layout = SL_LAYOUT_NHWC_F32,
                                                                            .mean = mean,
                                                                            .std = stdv,
                                                                            .dst = nhwc}), SL_OK);
        cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &c, &(sl_out_spec){.w = ow, .h = oh,
                                                                            .flip = flip,
                                                                            .layout = SL_LAYOUT_NCHW_F32,
                                                                            .mean = mean,
                                                                            .std = stdv,
                                                                            .dst = nchw}), SL_OK);
        for (size_t p = 0; p < px; p++)
            for (int ch = 0; ch < 3; ch++) {
                float v = nhwc[p * 3 + ch];
                cr_assert_eq(v, nchw[ch * px + p], "pixel %zu channel %d", p, ch);
                float back = v * stdv[ch] + mean[ch];
                cr_assert(fabsf(back - (float)u8[p * 3 + ch]) <= 0.5f + 1e-3f,
                          "pixel %zu channel %d: f32 %g (%g) vs u8 %d", p, ch, v, back,
                          u8[p * 3 + ch]);
            }
        if (flip == 0) {
            memcpy(mir, u8, px * 3);
            continue;
        }
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                cr_assert_eq(memcmp(u8 + ((size_t)y * ow + x) * 3,
                                    mir + ((size_t)y * ow + (ow - 1 - x)) * 3, 3),
                             0, "flip: pixel (%d,%d)", x, y);
    }
    free(u8);
    free(mir);
    free(nhwc);
    free(nchw);
    sl_decoder_destroy(d);
    free(jpeg);
}

/* Same bytes from a fresh decoder and from one reused across images. */
Test(pipeline_decode_yuv, deterministic_across_decoders)
{
    size_t la, lb;
    uint8_t *a = read_photo("messi5.jpg", &la), *b = read_photo("fruits.jpg", &lb);
    sl_decoder *d1 = decoder(NULL), *d2 = decoder(NULL);
    size_t n = (size_t)224 * 224 * 3 * 4;
    uint8_t *o1 = malloc(n), *o2 = malloc(n), *junk = malloc(n);
    cr_assert(o1 && o2 && junk);
    for (int k = 0; k < 8; k++) {
        sl_rng r = sl_rng_for(3, 1, (uint64_t)k);
        sl_crop c;
        sl_rrc_geometry(&r, 548, 342, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
        const sl_crop cb = {k * 7, k * 5, 300 - k * 9, 200 + k};
        cr_assert_eq(sl_decode_crop_sample(d1, a, la, &c, &(sl_out_spec){.w = 224, .h = 224,
                                                                         .flip = k & 1,
                                                                         .layout = SL_LAYOUT_NCHW_F32,
                                                                         .mean = mean, .std = stdv,
                                                                         .dst = o1}), SL_OK);
        cr_assert_eq(sl_decode_crop_sample(d2, b, lb, &cb, &(sl_out_spec){.w = 224, .h = 224,
                                                                          .flip = 0,
                                                                          .layout = SL_LAYOUT_NCHW_F32,
                                                                          .mean = mean, .std = stdv,
                                                                          .dst = junk}), SL_OK);
        cr_assert_eq(sl_decode_crop_sample(d2, a, la, &c, &(sl_out_spec){.w = 224, .h = 224,
                                                                         .flip = k & 1,
                                                                         .layout = SL_LAYOUT_NCHW_F32,
                                                                         .mean = mean, .std = stdv,
                                                                         .dst = o2}), SL_OK);
        cr_assert_eq(memcmp(o1, o2, n), 0, "crop %d", k);
    }
    free(o1);
    free(o2);
    free(junk);
    sl_decoder_destroy(d1);
    sl_decoder_destroy(d2);
    free(a);
    free(b);
}

/* An RGB-colourspace JPEG (libjpeg, jpeg_set_colorspace JCS_RGB: no YCbCr
 * transform) is not for the planar path: it takes the RGB path, exactly. */
Test(pipeline_decode_yuv, rgb_colourspace_takes_rgb_path)
{
    int W = 123, H = 77;
    uint8_t *img = synth(W, H, 9);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    jpeg_mem_dest(&ci, &jpeg, &len);
    ci.image_width = (JDIMENSION)W;
    ci.image_height = (JDIMENSION)H;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_colorspace(&ci, JCS_RGB);
    jpeg_set_quality(&ci, 92, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = img + (size_t)ci.next_scanline * W * 3;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    sl_decoder *yuv = decoder(NULL), *rgb = decoder("rgb");
    const sl_crop c = {7, 3, 100, 70};
    uint8_t a[40 * 30 * 3], b[40 * 30 * 3];
    cr_assert_eq(sl_decode_crop_sample(yuv, jpeg, len, &c, &(sl_out_spec){.w = 40, .h = 30,
                                                                          .flip = 1,
                                                                          .layout = SL_LAYOUT_NHWC_U8,
                                                                          .mean = NULL, .std = NULL,
                                                                          .dst = a}), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_decode_crop_sample(rgb, jpeg, len, &c, &(sl_out_spec){.w = 40, .h = 30,
                                                                          .flip = 1,
                                                                          .layout = SL_LAYOUT_NHWC_U8,
                                                                          .mean = NULL, .std = NULL,
                                                                          .dst = b}), SL_OK);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    sl_plane_view pv[3];
    int np;
    cr_assert_eq(sl_decode_crop_planes(yuv, jpeg, len, &c, 40, 30, pv, &np), SL_ENOTSUP);
    free(jpeg);
    free(img);
    sl_decoder_destroy(yuv);
    sl_decoder_destroy(rgb);
}

Test(pipeline_decode_yuv, errors_leave_the_decoder_usable)
{
    size_t len;
    uint8_t *jpeg = read_photo("messi5.jpg", &len);
    sl_decoder *d = decoder(NULL);
    uint8_t *out = malloc((size_t)224 * 224 * 12);
    cr_assert_not_null(out);
    const sl_crop whole = {0, 0, 548, 342}, outside = {500, 0, 49, 10};
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len / 2, &whole, &(sl_out_spec){.w = 224, .h = 224,
                                                                                .flip = 0,
                                                                                .layout = SL_LAYOUT_NCHW_F32,
                                                                                .mean = mean,
                                                                                .std = stdv,
                                                                                .dst = out}), SL_EIMAGE);
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &outside, &(sl_out_spec){.w = 32, .h = 32,
                                                                              .flip = 0,
                                                                              .layout = SL_LAYOUT_NHWC_U8,
                                                                              .mean = NULL,
                                                                              .std = NULL,
                                                                              .dst = out}), SL_EINVAL);
    /* corrupt entropy data in the crop's rows: a warning, so an error */
    uint8_t *bad = malloc(len);
    cr_assert_not_null(bad);
    memcpy(bad, jpeg, len);
    for (size_t i = len / 3; i < len / 3 + 200; i++)
        bad[i] = bad[i] == 0xFF ? 0x00 : (uint8_t)(bad[i] ^ 0x5A);
    int rc = sl_decode_crop_sample(d, bad, len, &whole, &(sl_out_spec){.w = 224, .h = 224,
                                                                       .flip = 0,
                                                                       .layout = SL_LAYOUT_NHWC_U8,
                                                                       .mean = NULL, .std = NULL,
                                                                       .dst = out});
    cr_assert_eq(rc, SL_EIMAGE, "corrupt data: %d %s", rc, sl_errmsg());
    cr_assert_eq(sl_decode_crop_sample(d, jpeg, len, &whole, &(sl_out_spec){.w = 224, .h = 224,
                                                                            .flip = 1,
                                                                            .layout = SL_LAYOUT_NCHW_F32,
                                                                            .mean = mean,
                                                                            .std = stdv,
                                                                            .dst = out}), SL_OK, "%s", sl_errmsg());
    free(bad);
    free(out);
    free(jpeg);
    sl_decoder_destroy(d);
}

/* Tiny and thin images at every sampling: whole-image and one-pixel crops
 * decode (ASan watches the strip arithmetic) and stay near the RGB path
 * (loosely: on a few pixels the edges are all there is). */
Test(pipeline_decode_yuv, tiny_and_thin_images)
{
    const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_440, TJSAMP_420, TJSAMP_GRAY};
    const int sizes[][2] = {{1, 1}, {2, 3}, {9, 17}, {17, 9}, {33, 1}, {1, 40}, {16, 16}};
    sl_decoder *yuv = decoder(NULL), *rgb = decoder("rgb");
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        int W = sizes[z][0], H = sizes[z][1];
        uint8_t *img = synth(W, H, 40 + z);
        for (size_t s = 0; s < sizeof samps / sizeof *samps; s++) {
            unsigned long len;
            unsigned char *jpeg = encode_rgb(img, W, H, samps[s], 95, 0, &len);
            const sl_crop crops[] = {{0, 0, W, H}, {W - 1, H - 1, 1, 1}, {W / 2, 0, W - W / 2, H}};
            const int outs[][2] = {{5, 4}, {1, 1}, {24, 24}};
            for (int k = 0; k < 3; k++) {
                int ow = outs[k][0], oh = outs[k][1];
                uint8_t a[24 * 24 * 3], b[24 * 24 * 3];
                cr_assert_eq(sl_decode_crop_sample(yuv, jpeg, len, &crops[k],
                                                   &(sl_out_spec){.w = ow, .h = oh, .flip = k & 1,
                                                                  .layout = SL_LAYOUT_NHWC_U8,
                                                                  .mean = NULL, .std = NULL,
                                                                  .dst = a}),
                             SL_OK, "%dx%d samp %d crop %d: %s", W, H, samps[s], k, sl_errmsg());
                cr_assert_eq(sl_decode_crop_sample(rgb, jpeg, len, &crops[k],
                                                   &(sl_out_spec){.w = ow, .h = oh, .flip = k & 1,
                                                                  .layout = SL_LAYOUT_NHWC_U8,
                                                                  .mean = NULL, .std = NULL,
                                                                  .dst = b}),
                             SL_OK);
                double d = 0;
                for (int i = 0; i < ow * oh * 3; i++)
                    d += abs((int)a[i] - (int)b[i]);
                d /= ow * oh * 3;
                cr_assert(d <= 12.0, "%dx%d samp %d crop %d: mean |diff| %.2f", W, H, samps[s],
                          k, d);
            }
            tjFree(jpeg);
        }
        free(img);
    }
    sl_decoder_destroy(yuv);
    sl_decoder_destroy(rgb);
}

/* sl_resample_planes streams an NCHW f32 sample into a 16-byte aligned
 * destination (non-temporal stores, dw % 4 == 0) and stores it plainly
 * otherwise: the two give the same bytes, for linear and area taps, flip,
 * gray and colour, and a width that is not a multiple of 8. */
Test(pipeline_decode_yuv, streamed_nchw_equals_plain_stores)
{
    static const int sizes[][4] = {{300, 240, 224, 224}, {900, 700, 224, 224}, {97, 61, 36, 20},
                                   {50, 50, 12, 12}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int W = sizes[s][0], H = sizes[s][1], ow = sizes[s][2], oh = sizes[s][3];
        int cw = (W + 1) / 2, ch = (H + 1) / 2;
        uint8_t *y = malloc((size_t)W * H), *u = malloc((size_t)cw * ch), *v = malloc((size_t)cw * ch);
        cr_assert(y && u && v);
        uint64_t st = 0x9e3779b97f4a7c15ull + (uint64_t)s;
        for (int i = 0; i < W * H; i++)
            y[i] = (uint8_t)tu_rand(&st);
        for (int i = 0; i < cw * ch; i++) {
            u[i] = (uint8_t)tu_rand(&st);
            v[i] = (uint8_t)tu_rand(&st);
        }
        sl_plane_view pv[3] = {{y, W, H, W, 3.5, 2.0, W - 7.0, H - 5.0},
                               {u, cw, ch, cw, 1.75, 1.0, (W - 7.0) / 2, (H - 5.0) / 2},
                               {v, cw, ch, cw, 1.75, 1.0, (W - 7.0) / 2, (H - 5.0) / 2}};
        size_t n = (size_t)3 * ow * oh;
        float *a = aligned_alloc(64, (n + 16) * sizeof(float));
        float *b = aligned_alloc(64, (n + 16) * sizeof(float));
        cr_assert(a && b);
        for (int np = 1; np <= 3; np += 2)
            for (int flip = 0; flip < 2; flip++) {
                memset(a, 0xa5, (n + 16) * sizeof(float));
                memset(b, 0x5a, (n + 16) * sizeof(float));
                cr_assert_eq(sl_resample_planes(pv, np, &(sl_out_spec){.w = ow, .h = oh,
                                                                       .flip = flip,
                                                                       .layout = SL_LAYOUT_NCHW_F32,
                                                                       .mean = mean, .std = stdv,
                                                                       .dst = a}), SL_OK);
                cr_assert_eq(sl_resample_planes(pv, np, &(sl_out_spec){.w = ow, .h = oh,
                                                                       .flip = flip,
                                                                       .layout = SL_LAYOUT_NCHW_F32,
                                                                       .mean = mean, .std = stdv,
                                                                       .dst = b + 1}), SL_OK); /* 4 bytes off: plain */
                cr_assert(memcmp(a, b + 1, n * sizeof(float)) == 0,
                          "%dx%d -> %dx%d, %d planes, flip %d: streamed != plain", W, H, ow, oh,
                          np, flip);
                uint32_t guard;
                memcpy(&guard, a + n, sizeof guard);
                cr_assert_eq(guard, 0xa5a5a5a5u, "streamed past the sample");
            }
        free(a);
        free(b);
        free(y);
        free(u);
        free(v);
    }
}

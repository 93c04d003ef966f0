/* tests/records/test_webp.c - WebP inputs (issue 38 item 10): the probe and
 * the transcoder on files written by libwebp's own encoder (lossy,
 * lossless, alpha; tests/webp_images.h), an animation from libwebpmux
 * (refused by name), a truncated file; and sluice's converter over a folder
 * of them. Without libwebp in the build (SLUICE_WITH_WEBP=0) a WebP is
 * refused naming libwebp. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"
#include "webp_images.h"

/* The smallest lossless WebP header (RIFF, "WEBP", a VP8L chunk of a 1x1
 * image), enough for the sniff; written by hand so that it exists in a
 * build without libwebp. */
static const uint8_t tiny_vp8l[] = {'R', 'I', 'F', 'F', 26, 0, 0, 0, 'W', 'E', 'B', 'P',
                                    'V', 'P', '8', 'L', 13, 0, 0, 0, 0x2f, 0, 0, 0, 0,
                                    0x07, 0x10, 0x11, 0x11, 0x88, 0x88, 0xfe, 0x07, 0};

Test(webp, sniffed_by_its_riff_header)
{
    sl_image_info info;
    int rc = sl_image_probe(tiny_vp8l, sizeof tiny_vp8l, &info);
#if SLUICE_WITH_WEBP
    cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
    cr_assert_eq(info.type, SL_IMAGE_WEBP);
    cr_assert_eq(info.width, 1);
    cr_assert_eq(info.height, 1);
#else
    cr_assert_eq(rc, SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "WebP") && strstr(sl_errmsg(), "libwebp"), "%s", sl_errmsg());
#endif
    /* RIFF of another kind (a WAV file) is no WebP */
    uint8_t wav[12];
    memcpy(wav, tiny_vp8l, 12);
    memcpy(wav + 8, "WAVE", 4);
    cr_assert_eq(sl_image_probe(wav, sizeof wav, &info), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "not a JPEG, PNG, BMP, PPM or WebP image"), "%s", sl_errmsg());
}

#if SLUICE_WITH_WEBP

#define WW 96
#define WH 64

/* RGBA test image: the left third opaque (hi_rgb's colours), the middle
 * third black at alpha 128, the right third fully transparent (its colour
 * bytes red, which must not show). */
static uint8_t *rgba_thirds(void)
{
    uint8_t *rgb = hi_rgb(WW, WH, 4), *p = malloc((size_t)WW * WH * 4);
    cr_assert_not_null(p);
    for (int y = 0; y < WH; y++)
        for (int x = 0; x < WW; x++) {
            const uint8_t *s = rgb + ((size_t)y * WW + x) * 3;
            uint8_t *d = p + ((size_t)y * WW + x) * 4;
            if (x < WW / 3) {
                memcpy(d, s, 3);
                d[3] = 255;
            } else if (x < 2 * WW / 3) {
                d[0] = d[1] = d[2] = 0;
                d[3] = 128;
            } else {
                d[0] = 255, d[1] = d[2] = 0;
                d[3] = 0;
            }
        }
    free(rgb);
    return p;
}

/* Transcode (quality 100, no resize) and decode the JPEG back (malloc'd
 * RGB, size checked). */
static uint8_t *transcode_pixels(sl_transcoder *t, const uint8_t *img, size_t len, int w, int h)
{
    const uint8_t *j;
    size_t jl;
    int ow, oh;
    cr_assert_eq(sl_transcode_jpeg(t, img, len, 100, 0, &j, &jl, &ow, &oh), SL_OK, "%s",
                 sl_errmsg());
    cr_assert(ow == w && oh == h, "%dx%d, want %dx%d", ow, oh, w, h);
    int dw, dh;
    uint8_t *px = hi_decode(j, jl, &dw, &dh);
    cr_assert_not_null(px);
    cr_assert(dw == w && dh == h);
    return px;
}

static double mad(const uint8_t *a, const uint8_t *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += abs((int)a[i] - (int)b[i]);
    return s / (double)n;
}

/* Mean of channel c over a region of an RGB image. */
static double region_mean(const uint8_t *rgb, int w, int x0, int x1, int y0, int y1, int c)
{
    double s = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            s += rgb[((size_t)y * w + x) * 3 + c];
    return s / ((double)(x1 - x0) * (y1 - y0));
}

Test(webp, probe_each_kind)
{
    uint8_t *rgb = hi_rgb(WW, WH, 1), *rgba = rgba_thirds();
    size_t n[4];
    uint8_t *f[4] = {wi_webp(rgb, WW, WH, 3, 80, &n[0]), wi_webp(rgb, WW, WH, 3, -1, &n[1]),
                     wi_webp(rgba, WW, WH, 4, -1, &n[2]), wi_webp(rgba, WW, WH, 4, 80, &n[3])};
    const int channels[4] = {3, 3, 4, 4};
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(f[i], "libwebp encoded file %d", i);
        sl_image_info info;
        cr_assert_eq(sl_image_probe(f[i], n[i], &info), SL_OK, "file %d: %s", i, sl_errmsg());
        cr_assert_eq(info.type, SL_IMAGE_WEBP);
        cr_assert(info.width == WW && info.height == WH, "file %d: %dx%d", i, info.width,
                  info.height);
        cr_assert_eq(info.channels, channels[i], "file %d", i);
        cr_assert_eq(info.jpeg_passthrough, 0);
        free(f[i]);
    }
    /* animated: refused by name, by the probe (the converter's first look) */
    size_t an;
    uint8_t *anim = wi_webp_anim(32, 24, 3, &an);
    cr_assert_not_null(anim);
    sl_image_info info;
    cr_assert_eq(sl_image_probe(anim, an, &info), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "WebP: animated"), "%s", sl_errmsg());
    free(anim);
    free(rgb);
    free(rgba);
}

Test(webp, transcodes_lossy_lossless_and_resized)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    uint8_t *rgb = hi_rgb(WW, WH, 2);
    size_t nl, ny;
    uint8_t *lossless = wi_webp(rgb, WW, WH, 3, -1, &nl), *lossy = wi_webp(rgb, WW, WH, 3, 90, &ny);
    cr_assert(lossless && lossy);
    /* lossless: only the JPEG's own loss; lossy: VP8's and the JPEG's */
    uint8_t *a = transcode_pixels(t, lossless, nl, WW, WH);
    double d = mad(a, rgb, (size_t)WW * WH * 3);
    cr_assert_lt(d, 2.0, "lossless: mean abs difference %.2f", d);
    uint8_t *b = transcode_pixels(t, lossy, ny, WW, WH);
    d = mad(b, rgb, (size_t)WW * WH * 3);
    cr_assert_lt(d, 4.0, "lossy: mean abs difference %.2f", d);
    /* the shrink to a shorter side, as for PNG */
    const uint8_t *j;
    size_t jl;
    int w, h;
    cr_assert_eq(sl_transcode_jpeg(t, lossless, nl, 90, 32, &j, &jl, &w, &h), SL_OK, "%s",
                 sl_errmsg());
    cr_assert(w == 48 && h == 32, "%dx%d", w, h);
    sl_image_info info;
    cr_assert_eq(sl_image_probe(j, jl, &info), SL_OK);
    cr_assert(info.type == SL_IMAGE_JPEG && info.jpeg_passthrough && info.width == 48);
    free(a);
    free(b);
    free(lossless);
    free(lossy);
    free(rgb);
    sl_transcoder_destroy(t);
}

Test(webp, alpha_composited_over_white_as_png)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    uint8_t *rgba = rgba_thirds();
    size_t nw, np;
    uint8_t *webp = wi_webp(rgba, WW, WH, 4, -1, &nw), *png = hi_png_pixels(rgba, WW, WH, PNG_FORMAT_RGBA, &np);
    cr_assert_not_null(webp);
    uint8_t *fw = transcode_pixels(t, webp, nw, WW, WH), *fp = transcode_pixels(t, png, np, WW, WH);
    /* the same pixels as the PNG path (libpng composites in linear light;
     * transcode.c's composite follows it within 2 levels) */
    double d = mad(fw, fp, (size_t)WW * WH * 3);
    cr_assert_lt(d, 0.5, "WebP and PNG of one RGBA image: mean abs difference %.2f", d);
    /* inside each third, away from the JPEG's edges: opaque keeps its
     * colour, black at alpha 128 is 186-188 (linear-light mix), the
     * transparent red is white */
    for (int c = 0; c < 3; c++) {
        double mid = region_mean(fw, WW, WW / 3 + 8, 2 * WW / 3 - 8, 8, WH - 8, c);
        double right = region_mean(fw, WW, 2 * WW / 3 + 8, WW - 8, 8, WH - 8, c);
        cr_assert(mid > 184 && mid < 190, "channel %d: half-transparent black is %.1f", c, mid);
        cr_assert_gt(right, 252, "channel %d: transparent is %.1f, not white", c, right);
    }
    uint8_t *rgb = hi_rgb(WW, WH, 4);
    double left = 0;
    for (int y = 0; y < WH; y++)
        for (int x = 0; x < WW / 3 - 8; x++)
            for (int c = 0; c < 3; c++)
                left += abs((int)fw[((size_t)y * WW + x) * 3 + c] -
                            (int)rgb[((size_t)y * WW + x) * 3 + c]);
    left /= (double)WH * (WW / 3 - 8) * 3;
    cr_assert_lt(left, 2.0, "opaque third: mean abs difference %.2f", left);
    free(rgb);
    free(fw);
    free(fp);
    free(webp);
    free(png);
    free(rgba);
    sl_transcoder_destroy(t);
}

Test(webp, truncated_and_animated_are_refused)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    uint8_t *rgb = hi_rgb(WW, WH, 3);
    size_t n;
    uint8_t *f = wi_webp(rgb, WW, WH, 3, 80, &n);
    cr_assert_not_null(f);
    const uint8_t *j;
    size_t jl;
    int w, h;
    /* cut in the bitstream: the header still reads, the decode does not */
    sl_image_info info;
    cr_assert_eq(sl_image_probe(f, n / 2, &info), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_transcode_jpeg(t, f, n / 2, 90, 0, &j, &jl, &w, &h), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "WebP decode: truncated data"), "%s", sl_errmsg());
    /* cut in the header */
    cr_assert_eq(sl_transcode_jpeg(t, f, 20, 90, 0, &j, &jl, &w, &h), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "WebP header"), "%s", sl_errmsg());
    size_t an;
    uint8_t *anim = wi_webp_anim(16, 16, 2, &an);
    cr_assert_eq(sl_transcode_jpeg(t, anim, an, 90, 0, &j, &jl, &w, &h), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "WebP: animated"), "%s", sl_errmsg());
    /* the transcoder goes on with a good file after each */
    cr_assert_eq(sl_transcode_jpeg(t, f, n, 90, 0, &j, &jl, &w, &h), SL_OK, "%s", sl_errmsg());
    /* the pixel bound holds before the decode */
    sl_transcoder_set_max_pixels(t, WW * WH - 1);
    cr_assert_eq(sl_transcode_jpeg(t, f, n, 90, 0, &j, &jl, &w, &h), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "max_pixels"), "%s", sl_errmsg());
    free(anim);
    free(f);
    free(rgb);
    sl_transcoder_destroy(t);
}

/* ------------------------------------------------------------ convert */

Test(webp, convert_takes_still_files_and_names_the_rest)
{
    uint8_t *rgb = hi_rgb(WW, WH, 5), *rgba = rgba_thirds();
    struct {
        const char *name, *skip; /* skip: NULL converts, else a part of the reason */
        uint8_t *bytes;
        size_t len;
    } f[5] = {{"a-lossy.webp", NULL},
              {"b-lossless.webp", NULL},
              {"c-alpha.webp", NULL},
              {"d-animated.webp", "WebP: animated"},
              {"e-truncated.webp", "WebP decode: truncated data"}};
    f[0].bytes = wi_webp(rgb, WW, WH, 3, 85, &f[0].len);
    f[1].bytes = wi_webp(rgb, WW, WH, 3, -1, &f[1].len);
    f[2].bytes = wi_webp(rgba, WW, WH, 4, 90, &f[2].len);
    f[3].bytes = wi_webp_anim(WW, WH, 2, &f[3].len);
    f[4].bytes = wi_webp(rgb, WW, WH, 3, 85, &f[4].len);
    f[4].len = f[4].len * 2 / 3;
    char *root = tu_tmpdir(), *in = tu_join(root, "in"), *cls = tu_join(in, "x"),
         *out = tu_join(root, "out");
    cr_assert_eq(mkdir(in, 0755), 0);
    cr_assert_eq(mkdir(cls, 0755), 0);
    for (int i = 0; i < 5; i++) {
        cr_assert_not_null(f[i].bytes, "%s encoded", f[i].name);
        char *p = tu_join(cls, f[i].name);
        cr_assert_eq(tu_write_file(p, f[i].bytes, f[i].len), 0);
        free(p);
    }
    hi_skips s = {0};
    sl_convert_config c = SL_CONVERT_CONFIG_INIT;
    c.input = in;
    c.out_dir = out;
    c.name = "train";
    c.shards = 1;
    c.threads = 2;
    c.shuffle = 0;
    c.fsync = 0;
    c.skipped = hi_on_skip;
    c.skipped_arg = &s;
    sl_convert_result res;
    cr_assert_eq(sl_convert_run(&c, &res), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(res.inputs, 5);
    cr_assert_eq(res.records, 3, "records %llu", (unsigned long long)res.records);
    cr_assert_eq(res.skipped, 2);
    cr_assert_eq(s.n, 2);
    for (int i = 3; i < 5; i++)
        hi_skips_assert(&s, f[i].name, f[i].skip);
    /* the three records are RGB JPEGs of the files' pixels (the pipeline's
     * decoder reads them) */
    char shard[4096];
    cr_assert_eq(sl_shard_path(shard, sizeof shard, out, "train", 0, 1), SL_OK);
    sl_tfrecord_reader *r;
    cr_assert_eq(sl_tfrecord_reader_open(shard, &r), SL_OK, "%s", sl_errmsg());
    const uint8_t *d;
    size_t nd;
    int nrec = 0;
    while (sl_tfrecord_reader_next(r, &d, &nd) == SL_OK) {
        sl_image_example ex;
        cr_assert_eq(sl_image_example_decode(d, nd, &ex), SL_OK);
        cr_assert(ex.format_len == 4 && !memcmp(ex.format, "JPEG", 4));
        int w, h;
        uint8_t *px = hi_decode(ex.image, ex.image_len, &w, &h);
        cr_assert(px && w == WW && h == WH);
        int alpha = ex.filename_len >= 12 &&
                    !memcmp(ex.filename + ex.filename_len - 12, "c-alpha.webp", 12);
        if (!alpha) {
            double m = mad(px, rgb, (size_t)WW * WH * 3);
            cr_assert_lt(m, 4.0, "%.*s: mean abs difference %.2f", (int)ex.filename_len,
                         ex.filename, m);
        } else {
            cr_assert_gt(region_mean(px, WW, 2 * WW / 3 + 8, WW - 8, 8, WH - 8, 1), 250,
                         "transparent pixels are white");
        }
        free(px);
        nrec++;
    }
    sl_tfrecord_reader_close(r);
    cr_assert_eq(nrec, 3);
    for (int i = 0; i < 5; i++)
        free(f[i].bytes);
    tu_rmrf(root);
    free(root);
    free(in);
    free(cls);
    free(out);
    free(rgb);
    free(rgba);
}

#endif

/* tests/records/test_image.c - sl_image_probe and the transcoder on images
 * made here: JPEGs from tjCompress2 (RGB, gray, CMYK) and libjpeg (odd
 * sampling factors), PNGs from libpng's simplified writer, BMP and PPM
 * built byte by byte. Decoded output is compared with the source pixels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>
#include <turbojpeg.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"

/* ----------------------------------------------------------- test images */

/* A smooth RGB image (gradients and a slow sine), easy on JPEG. */
static uint8_t *smooth_rgb(int w, int h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    cr_assert_not_null(p);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(20 + 200 * x / (w > 1 ? w - 1 : 1));
            q[1] = (uint8_t)(30 + 190 * y / (h > 1 ? h - 1 : 1));
            q[2] = (uint8_t)(128 + 90 * sin((x + 2 * y) * 0.05));
        }
    return p;
}

static uint8_t *rgb_to_gray(const uint8_t *rgb, int w, int h)
{
    uint8_t *g = malloc((size_t)w * h);
    cr_assert_not_null(g);
    for (size_t i = 0; i < (size_t)w * h; i++)
        g[i] = (uint8_t)((rgb[i * 3] * 299 + rgb[i * 3 + 1] * 587 + rgb[i * 3 + 2] * 114) / 1000);
    return g;
}

/* Compress with TurboJPEG; malloc'd copy of the JPEG. */
static uint8_t *make_jpeg(const uint8_t *pix, int w, int h, int pf, int samp, size_t *len)
{
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    cr_assert_eq(tjCompress2(tj, pix, w, 0, h, pf, &buf, &size, samp, 95, 0), 0, "%s",
                 tjGetErrorStr2(tj));
    uint8_t *out = malloc(size);
    cr_assert_not_null(out);
    memcpy(out, buf, size);
    *len = size;
    tjFree(buf);
    tjDestroy(tj);
    return out;
}

/* Decode a JPEG to RGB (malloc'd), checking it is a 3-component JPEG. */
static uint8_t *decode_rgb(const uint8_t *jpeg, size_t len, int *w, int *h)
{
    tjhandle tj = tjInitDecompress();
    cr_assert_not_null(tj);
    int ss, cs;
    cr_assert_eq(tjDecompressHeader3(tj, jpeg, len, w, h, &ss, &cs), 0, "%s", tjGetErrorStr2(tj));
    cr_assert(cs == TJCS_YCbCr, "output JPEG colorspace %d, YCbCr expected", cs);
    cr_assert_eq(ss, TJSAMP_420);
    uint8_t *p = malloc((size_t)*w * *h * 3);
    cr_assert_not_null(p);
    cr_assert_eq(tjDecompress2(tj, jpeg, len, p, *w, 0, *h, TJPF_RGB, 0), 0, "%s",
                 tjGetErrorStr2(tj));
    tjDestroy(tj);
    return p;
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += abs(a[i] - b[i]);
    return s / (double)n;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* BMP with a BITMAPINFOHEADER: bpp 24 or 32, or 8 with a grey palette
 * (pix is then one byte per pixel). */
static uint8_t *make_bmp(const uint8_t *pix, int w, int h, int bpp, int top_down, size_t *len)
{
    size_t row = ((size_t)w * bpp + 31) / 32 * 4;
    size_t pal = bpp == 8 ? 256 * 4 : 0;
    size_t off = 14 + 40 + pal, size = off + row * h;
    uint8_t *b = calloc(1, size);
    cr_assert_not_null(b);
    b[0] = 'B';
    b[1] = 'M';
    put_le32(b + 2, (uint32_t)size);
    put_le32(b + 10, (uint32_t)off);
    put_le32(b + 14, 40);
    put_le32(b + 18, (uint32_t)w);
    put_le32(b + 22, (uint32_t)(top_down ? -h : h));
    b[26] = 1;
    b[28] = (uint8_t)bpp;
    for (size_t i = 0; i < pal / 4; i++) {
        b[54 + i * 4] = b[54 + i * 4 + 1] = b[54 + i * 4 + 2] = (uint8_t)i;
    }
    for (int y = 0; y < h; y++) {
        int fy = top_down ? y : h - 1 - y;
        uint8_t *d = b + off + (size_t)fy * row;
        for (int x = 0; x < w; x++) {
            if (bpp == 8) {
                d[x] = pix[(size_t)y * w + x];
                continue;
            }
            const uint8_t *s = pix + ((size_t)y * w + x) * 3;
            uint8_t *q = d + (size_t)x * (bpp / 8);
            q[0] = s[2];
            q[1] = s[1];
            q[2] = s[0];
            if (bpp == 32)
                q[3] = 0xFF;
        }
    }
    *len = size;
    return b;
}

/* Binary PPM (channels 3) or PGM (1), with a comment in the header;
 * samples as given (1 byte) or scaled to maxval (2 bytes when > 255). */
static uint8_t *make_pnm(const uint8_t *pix, int w, int h, int channels, unsigned maxval,
                         size_t *len)
{
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "P%c\n# made by test_image\n%d %d\n%u\n",
                      channels == 1 ? '5' : '6', w, h, maxval);
    size_t bps = maxval > 255 ? 2 : 1, n = (size_t)w * h * channels;
    uint8_t *b = malloc((size_t)hl + n * bps);
    cr_assert_not_null(b);
    memcpy(b, hdr, (size_t)hl);
    for (size_t i = 0; i < n; i++) {
        unsigned v = maxval == 255 ? pix[i] : (pix[i] * maxval + 127) / 255;
        if (bps == 2) {
            b[hl + 2 * i] = (uint8_t)(v >> 8);
            b[hl + 2 * i + 1] = (uint8_t)v;
        } else {
            b[hl + i] = (uint8_t)v;
        }
    }
    *len = (size_t)hl + n * bps;
    return b;
}

/* Transcode and compare the decoded result with ref (w x h RGB). */
static void transcode_matches(const uint8_t *data, size_t len, const uint8_t *ref, int w, int h,
                              double tol, const char *what)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    const uint8_t *jpeg;
    size_t jlen;
    int ow, oh;
    int rc = sl_transcode_jpeg(t, data, len, 95, 0, &jpeg, &jlen, &ow, &oh);
    cr_assert_eq(rc, SL_OK, "%s: %s", what, sl_errmsg());
    cr_assert_eq(ow, w, "%s", what);
    cr_assert_eq(oh, h, "%s", what);
    sl_image_info info;
    cr_assert_eq(sl_image_probe(jpeg, jlen, &info), SL_OK);
    cr_assert(info.jpeg_passthrough && info.channels == 3, "%s: output not an RGB JPEG", what);
    int dw, dh;
    uint8_t *dec = decode_rgb(jpeg, jlen, &dw, &dh);
    cr_assert(dw == w && dh == h);
    double mad = mean_abs_diff(dec, ref, (size_t)w * h * 3);
    cr_assert_lt(mad, tol, "%s: mean abs error %.2f", what, mad);
    free(dec);
    sl_transcoder_destroy(t);
}

/* ------------------------------------------------------------------ probe */

/* Probe data and assert every field of the result. */
static void expect_probe(const uint8_t *data, size_t len, sl_image_type type, int w, int h,
                         int channels, int passthrough, const char *what)
{
    sl_image_info info;
    cr_assert_eq(sl_image_probe(data, len, &info), SL_OK, "%s: %s", what, sl_errmsg());
    cr_assert_eq(info.type, type, "%s: type %d", what, (int)info.type);
    cr_assert_eq(info.width, w, "%s: width %d", what, info.width);
    cr_assert_eq(info.height, h, "%s: height %d", what, info.height);
    cr_assert_eq(info.channels, channels, "%s: channels %d", what, info.channels);
    cr_assert_eq(info.jpeg_passthrough, passthrough, "%s: passthrough %d", what,
                 info.jpeg_passthrough);
}

Test(image, probe_jpeg_rgb_is_passthrough)
{
    uint8_t *rgb = smooth_rgb(37, 23);
    size_t len;
    uint8_t *j = make_jpeg(rgb, 37, 23, TJPF_RGB, TJSAMP_420, &len);
    expect_probe(j, len, SL_IMAGE_JPEG, 37, 23, 3, 1, "RGB JPEG");
    free(j);
    free(rgb);
}

Test(image, probe_jpeg_gray_and_cmyk_are_not_passthrough)
{
    uint8_t *rgb = smooth_rgb(16, 9);
    size_t len;
    uint8_t *j = make_jpeg(rgb, 16, 9, TJPF_RGB, TJSAMP_GRAY, &len);
    expect_probe(j, len, SL_IMAGE_JPEG, 16, 9, 1, 0, "gray JPEG");
    free(j);
    uint8_t cmyk[16 * 9 * 4];
    memset(cmyk, 100, sizeof cmyk);
    j = make_jpeg(cmyk, 16, 9, TJPF_CMYK, TJSAMP_444, &len);
    expect_probe(j, len, SL_IMAGE_JPEG, 16, 9, 4, 0, "CMYK JPEG");
    free(j);
    free(rgb);
}

Test(image, probe_png_bmp_ppm)
{
    uint8_t *rgb = smooth_rgb(5, 3);
    size_t len;
    uint8_t *p = hi_png_pixels(rgb, 5, 3, PNG_FORMAT_RGB, &len);
    expect_probe(p, len, SL_IMAGE_PNG, 5, 3, 3, 0, "RGB PNG");
    free(p);
    uint8_t rgba[5 * 3 * 4] = {0};
    p = hi_png_pixels(rgba, 5, 3, PNG_FORMAT_RGBA, &len);
    expect_probe(p, len, SL_IMAGE_PNG, 5, 3, 4, 0, "RGBA PNG");
    free(p);
    p = hi_png_pixels(rgba, 5, 3, PNG_FORMAT_GRAY, &len);
    expect_probe(p, len, SL_IMAGE_PNG, 5, 3, 1, 0, "gray PNG");
    free(p);

    for (int td = 0; td < 2; td++) {
        p = make_bmp(rgb, 5, 3, 24, td, &len);
        expect_probe(p, len, SL_IMAGE_BMP, 5, 3, 3, 0, td ? "top-down BMP" : "BMP");
        free(p);
    }
    p = make_pnm(rgb, 5, 3, 3, 255, &len);
    expect_probe(p, len, SL_IMAGE_PPM, 5, 3, 3, 0, "PPM");
    free(p);
    p = make_pnm(rgb, 5, 3, 1, 255, &len);
    expect_probe(p, len, SL_IMAGE_PPM, 5, 3, 1, 0, "PGM");
    free(p);
    free(rgb);
}

Test(image, probe_rejects_garbage)
{
    sl_image_info info;
    uint64_t seed = 3;
    uint8_t junk[256];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)tu_rand(&seed);
    junk[0] = 0; /* not 0xFF, 0x89, 'B' or 'P' */
    cr_assert_eq(sl_image_probe(junk, sizeof junk, &info), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "not a JPEG, PNG, BMP, PPM or WebP image"), "%s", sl_errmsg());
    cr_assert_eq(info.type, SL_IMAGE_UNKNOWN);
    cr_assert_eq(sl_image_probe(NULL, 0, &info), SL_EIMAGE);
    cr_assert_eq(sl_image_probe((const uint8_t *)"hello", 5, &info), SL_EIMAGE);

    /* Right magic, garbage after it. */
    uint8_t j[64] = {0xFF, 0xD8, 0xFF, 0x00, 0x13, 0x37};
    cr_assert_eq(sl_image_probe(j, sizeof j, &info), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "JPEG header: "), "%s", sl_errmsg());
    uint8_t bm[64] = "BM";
    cr_assert_eq(sl_image_probe(bm, sizeof bm, &info), SL_EIMAGE);
    cr_assert_eq(sl_image_probe((const uint8_t *)"P6\n-1 3\n255\n", 12, &info), SL_EIMAGE);
    cr_assert_eq(sl_image_probe((const uint8_t *)"P6 0 3 255\n", 11, &info), SL_EIMAGE);
    cr_assert_eq(sl_image_probe((const uint8_t *)"P5 70000 3 255\n", 15, &info), SL_EIMAGE);
    cr_assert_eq(sl_image_probe((const uint8_t *)"P6 4 3 255x", 11, &info), SL_EIMAGE);

    /* A PNG whose IHDR is damaged (CRC), or claims 0 or 70000 pixels. */
    uint8_t *rgb = smooth_rgb(5, 3);
    size_t len;
    uint8_t *p = hi_png_pixels(rgb, 5, 3, PNG_FORMAT_RGB, &len);
    p[20] ^= 1;
    cr_assert_eq(sl_image_probe(p, len, &info), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "CRC"), "%s", sl_errmsg());
    free(p);
    free(rgb);
}

Test(image, probe_dimension_limits)
{
    /* BMP claiming 70000 x 2 and 0 x 2. */
    uint8_t px[3] = {1, 2, 3};
    size_t len;
    uint8_t *b = make_bmp(px, 1, 1, 24, 0, &len);
    sl_image_info info;
    put_le32(b + 18, 70000);
    cr_assert_eq(sl_image_probe(b, len, &info), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "70000"), "%s", sl_errmsg());
    put_le32(b + 18, 0);
    cr_assert_eq(sl_image_probe(b, len, &info), SL_EIMAGE);
    free(b);
}

/* Every prefix of a valid image: SL_EIMAGE while the header is incomplete,
 * the right answer once it is, never a crash (ASan runs watch the reads). */
static void every_truncation(const uint8_t *data, size_t len, size_t header_end, int w, int h)
{
    sl_image_info info;
    for (size_t n = 0; n < len; n++) {
        /* A fresh heap copy of exactly n bytes so ASan sees over-reads. */
        uint8_t *cut = malloc(n ? n : 1);
        cr_assert_not_null(cut);
        memcpy(cut, data, n);
        int rc = sl_image_probe(cut, n, &info);
        if (n < header_end)
            cr_assert_eq(rc, SL_EIMAGE, "prefix %zu of %zu: rc %d", n, len, rc);
        else
            cr_assert(rc == SL_OK && info.width == w && info.height == h,
                      "prefix %zu of %zu: rc %d (%s)", n, len, rc, sl_errmsg());
        free(cut);
    }
}

/* Offset just past a JPEG's SOS segment header (what libjpeg reads). */
static size_t jpeg_header_end(const uint8_t *j, size_t len)
{
    size_t p = 2;
    while (p + 4 <= len) {
        cr_assert_eq(j[p], 0xFF);
        size_t seg = (size_t)j[p + 2] << 8 | j[p + 3];
        if (j[p + 1] == 0xDA)
            return p + 2 + seg;
        p += 2 + seg;
    }
    cr_assert_fail("no SOS");
    return 0;
}

Test(image, probe_every_truncation)
{
    uint8_t *rgb = smooth_rgb(11, 7);
    size_t len;
    uint8_t *j = make_jpeg(rgb, 11, 7, TJPF_RGB, TJSAMP_420, &len);
    every_truncation(j, len, jpeg_header_end(j, len), 11, 7);
    free(j);
    uint8_t *p = hi_png_pixels(rgb, 11, 7, PNG_FORMAT_RGB, &len);
    every_truncation(p, len, 33, 11, 7);
    free(p);
    uint8_t *b = make_bmp(rgb, 11, 7, 24, 0, &len);
    every_truncation(b, len, 54, 11, 7);
    free(b);
    uint8_t *m = make_pnm(rgb, 11, 7, 3, 255, &len);
    size_t hdr = (size_t)(strstr((char *)m, "255\n") - (char *)m) + 4;
    every_truncation(m, len, hdr, 11, 7);
    free(m);
    free(rgb);
}

Test(image, odd_sampling_factors_are_accepted)
{
    /* Luma sampled 1x4: TurboJPEG 2.1 has no TJSAMP_* for it and its header
     * call fails, but libjpeg decodes it (and so does TensorFlow). */
    int w = 33, h = 17;
    uint8_t *rgb = smooth_rgb(w, h);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &out, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 95, TRUE);
    c.comp_info[0].h_samp_factor = 1;
    c.comp_info[0].v_samp_factor = 4;
    for (int k = 1; k < 3; k++)
        c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW r = rgb + (size_t)c.next_scanline * w * 3;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);

    expect_probe(out, size, SL_IMAGE_JPEG, w, h, 3, 1, "1x4 luma JPEG");
    transcode_matches(out, size, rgb, w, h, 4.0, "1x4 luma JPEG");
    free(out);
    free(rgb);
}

/* -------------------------------------------------------------- transcode */

Test(image, transcode_png_bmp_ppm)
{
    int w = 61, h = 43; /* odd sizes: BMP row padding, partial MCUs */
    uint8_t *rgb = smooth_rgb(w, h);
    size_t len;
    uint8_t *d = hi_png_pixels(rgb, w, h, PNG_FORMAT_RGB, &len);
    transcode_matches(d, len, rgb, w, h, 3.0, "PNG RGB");
    free(d);
    for (int bpp = 24; bpp <= 32; bpp += 8)
        for (int td = 0; td < 2; td++) {
            d = make_bmp(rgb, w, h, bpp, td, &len);
            char what[64];
            snprintf(what, sizeof what, "BMP %d-bit %s", bpp, td ? "top-down" : "bottom-up");
            transcode_matches(d, len, rgb, w, h, 3.0, what);
            free(d);
        }
    d = make_pnm(rgb, w, h, 3, 255, &len);
    transcode_matches(d, len, rgb, w, h, 3.0, "PPM");
    free(d);
    d = make_pnm(rgb, w, h, 3, 1023, &len); /* 16-bit samples */
    transcode_matches(d, len, rgb, w, h, 3.0, "PPM maxval 1023");
    free(d);

    /* Gray sources come out as R = G = B. */
    uint8_t *gray = rgb_to_gray(rgb, w, h);
    uint8_t *gray3 = malloc((size_t)w * h * 3);
    cr_assert_not_null(gray3);
    for (size_t i = 0; i < (size_t)w * h; i++)
        gray3[3 * i] = gray3[3 * i + 1] = gray3[3 * i + 2] = gray[i];
    d = make_pnm(gray, w, h, 1, 255, &len);
    transcode_matches(d, len, gray3, w, h, 3.0, "PGM");
    free(d);
    d = hi_png_pixels(gray, w, h, PNG_FORMAT_GRAY, &len);
    transcode_matches(d, len, gray3, w, h, 3.0, "PNG gray");
    free(d);
    d = make_bmp(gray, w, h, 8, 0, &len);
    transcode_matches(d, len, gray3, w, h, 3.0, "BMP 8-bit palette");
    free(d);
    free(gray);
    free(gray3);
    free(rgb);
}

Test(image, transcode_png_alpha_over_white)
{
    int w = 32, h = 16;
    uint8_t *rgba = malloc((size_t)w * h * 4), *ref = malloc((size_t)w * h * 3);
    cr_assert(rgba && ref);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgba + ((size_t)y * w + x) * 4, *r = ref + ((size_t)y * w + x) * 3;
            p[0] = 10;
            p[1] = 120;
            p[2] = 200;
            p[3] = x < w / 2 ? 255 : 0; /* right half fully transparent */
            r[0] = x < w / 2 ? 10 : 255;
            r[1] = x < w / 2 ? 120 : 255;
            r[2] = x < w / 2 ? 200 : 255;
        }
    size_t len;
    uint8_t *d = hi_png_pixels(rgba, w, h, PNG_FORMAT_RGBA, &len);
    /* A hard edge costs JPEG some ringing; the mean stays small. */
    transcode_matches(d, len, ref, w, h, 3.0, "PNG RGBA");
    free(d);
    free(rgba);
    free(ref);
}

Test(image, transcode_gray_jpeg)
{
    int w = 48, h = 40;
    uint8_t *rgb = smooth_rgb(w, h);
    uint8_t *gray = rgb_to_gray(rgb, w, h), *gray3 = malloc((size_t)w * h * 3);
    cr_assert_not_null(gray3);
    for (size_t i = 0; i < (size_t)w * h; i++)
        gray3[3 * i] = gray3[3 * i + 1] = gray3[3 * i + 2] = gray[i];
    size_t len;
    uint8_t *j = make_jpeg(gray, w, h, TJPF_GRAY, TJSAMP_GRAY, &len);
    transcode_matches(j, len, gray3, w, h, 3.0, "gray JPEG");
    free(j);
    free(gray);
    free(gray3);
    free(rgb);
}

/* RGB -> inverted (Adobe) CMYK, the inverse of R = C*K/255
 * (libjpeg-turbo's cmyk.h rgb_to_cmyk). */
static void rgb_to_cmyk(const uint8_t *rgb, uint8_t *cmyk, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double c = 1 - rgb[3 * i] / 255.0, m = 1 - rgb[3 * i + 1] / 255.0,
               y = 1 - rgb[3 * i + 2] / 255.0;
        double k = fmin(c, fmin(m, y));
        if (k < 1) {
            c = (c - k) / (1 - k);
            m = (m - k) / (1 - k);
            y = (y - k) / (1 - k);
        } else {
            c = m = y = 0;
        }
        cmyk[4 * i] = (uint8_t)(255 - c * 255 + 0.5);
        cmyk[4 * i + 1] = (uint8_t)(255 - m * 255 + 0.5);
        cmyk[4 * i + 2] = (uint8_t)(255 - y * 255 + 0.5);
        cmyk[4 * i + 3] = (uint8_t)(255 - k * 255 + 0.5);
    }
}

Test(image, transcode_cmyk_jpeg)
{
    int w = 64, h = 48;
    uint8_t *rgb = smooth_rgb(w, h), *cmyk = malloc((size_t)w * h * 4);
    cr_assert_not_null(cmyk);
    rgb_to_cmyk(rgb, cmyk, (size_t)w * h);
    size_t len;
    uint8_t *j = make_jpeg(cmyk, w, h, TJPF_CMYK, TJSAMP_444, &len);
    transcode_matches(j, len, rgb, w, h, 3.0, "CMYK JPEG");
    /* DCT-scaled CMYK decode: 64x48 at 1/2 is exactly 32x24. */
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    const uint8_t *jpeg;
    size_t jlen;
    int ow, oh;
    cr_assert_eq(sl_transcode_jpeg(t, j, len, 95, 24, &jpeg, &jlen, &ow, &oh), SL_OK, "%s",
                 sl_errmsg());
    cr_assert(ow == 32 && oh == 24, "%dx%d", ow, oh);
    int dw, dh;
    uint8_t *dec = decode_rgb(jpeg, jlen, &dw, &dh), *ref = malloc(32 * 24 * 3);
    cr_assert_not_null(ref);
    sl_resize_rgb_u8(rgb, w, h, w * 3, ref, 32, 24, 32 * 3);
    double mad = mean_abs_diff(dec, ref, 32 * 24 * 3);
    cr_assert_lt(mad, 4.0, "mean abs error %.2f", mad);
    free(dec);
    free(ref);
    sl_transcoder_destroy(t);
    free(j);
    free(cmyk);
    free(rgb);
}

/* Transcode with resize_short and return the output size. */
static void transcode_size(const uint8_t *d, size_t len, int s, int *w, int *h, uint8_t **pix)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    const uint8_t *jpeg;
    size_t jlen;
    cr_assert_eq(sl_transcode_jpeg(t, d, len, 90, s, &jpeg, &jlen, w, h), SL_OK, "%s",
                 sl_errmsg());
    int dw, dh;
    uint8_t *dec = decode_rgb(jpeg, jlen, &dw, &dh);
    cr_assert(dw == *w && dh == *h);
    if (pix)
        *pix = dec;
    else
        free(dec);
    sl_transcoder_destroy(t);
}

Test(image, transcode_resize_short)
{
    uint8_t *rgb = smooth_rgb(640, 480);
    size_t len;
    int w, h;
    uint8_t *j = make_jpeg(rgb, 640, 480, TJPF_RGB, TJSAMP_420, &len);
    uint8_t *out;
    /* 640 * 256 / 480 = 341.33 -> 341; DCT-scaled decode (1/1.875 -> 5/8
     * would be 400x300, 1/2 is 320x240 < 256, so 5/8 or larger) then resize. */
    transcode_size(j, len, 256, &w, &h, &out);
    cr_assert(w == 341 && h == 256, "%dx%d", w, h);
    uint8_t *ref = malloc(341 * 256 * 3);
    cr_assert_not_null(ref);
    sl_resize_rgb_u8(rgb, 640, 480, 640 * 3, ref, 341, 256, 341 * 3);
    double mad = mean_abs_diff(out, ref, 341 * 256 * 3);
    cr_assert_lt(mad, 3.0, "resized content differs: mean abs error %.2f", mad);
    free(out);
    free(ref);
    free(j);

    /* Portrait, and a PNG (no DCT scaling): same rule. */
    uint8_t *tall = smooth_rgb(480, 640);
    j = make_jpeg(tall, 480, 640, TJPF_RGB, TJSAMP_420, &len);
    transcode_size(j, len, 256, &w, &h, NULL);
    cr_assert(w == 256 && h == 341, "%dx%d", w, h);
    free(j);
    j = hi_png_pixels(rgb, 640, 480, PNG_FORMAT_RGB, &len);
    transcode_size(j, len, 256, &w, &h, NULL);
    cr_assert(w == 341 && h == 256, "%dx%d", w, h);
    free(j);
    /* 1000 x 333 -> 256: 768.77 -> 769; decoded at 1/1 only above 256/333. */
    uint8_t *wide = smooth_rgb(1000, 333);
    j = make_jpeg(wide, 1000, 333, TJPF_RGB, TJSAMP_420, &len);
    transcode_size(j, len, 256, &w, &h, NULL);
    cr_assert(w == 769 && h == 256, "%dx%d", w, h);
    free(j);
    /* Exact 1/2 DCT scale: 1024x512 -> 512x256 with no resize pass. */
    uint8_t *big = smooth_rgb(1024, 512);
    j = make_jpeg(big, 1024, 512, TJPF_RGB, TJSAMP_420, &len);
    transcode_size(j, len, 256, &w, &h, NULL);
    cr_assert(w == 512 && h == 256, "%dx%d", w, h);
    free(j);

    /* Smaller than S (or equal): size kept, never enlarged. */
    uint8_t *small = smooth_rgb(200, 100);
    j = make_jpeg(small, 200, 100, TJPF_RGB, TJSAMP_420, &len);
    transcode_size(j, len, 256, &w, &h, NULL);
    cr_assert(w == 200 && h == 100, "%dx%d", w, h);
    transcode_size(j, len, 100, &w, &h, NULL);
    cr_assert(w == 200 && h == 100, "%dx%d", w, h);
    free(j);
    free(small);
    free(big);
    free(wide);
    free(tall);
    free(rgb);
}

Test(image, transcode_rejects_garbage_and_every_truncation)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    const uint8_t *jpeg;
    size_t jlen;
    int w, h;
    cr_assert_eq(sl_transcode_jpeg(t, (const uint8_t *)"hello", 5, 95, 0, &jpeg, &jlen, &w, &h),
                 SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "sl_transcode_jpeg: "), "%s", sl_errmsg());
    cr_assert_eq(sl_transcode_jpeg(t, (const uint8_t *)"hello", 5, 0, 0, &jpeg, &jlen, &w, &h),
                 SL_EINVAL);

    uint8_t *rgb = smooth_rgb(13, 9), *gray = rgb_to_gray(rgb, 13, 9);
    uint8_t *imgs[6];
    size_t lens[6];
    size_t png_iend = 12; /* the IEND chunk carries no data */
    imgs[0] = make_jpeg(rgb, 13, 9, TJPF_RGB, TJSAMP_420, &lens[0]);
    imgs[1] = hi_png_pixels(rgb, 13, 9, PNG_FORMAT_RGB, &lens[1]);
    imgs[2] = make_bmp(rgb, 13, 9, 24, 0, &lens[2]);
    imgs[3] = make_pnm(rgb, 13, 9, 3, 255, &lens[3]);
    imgs[4] = make_bmp(gray, 13, 9, 8, 1, &lens[4]);
    imgs[5] = make_pnm(rgb, 13, 9, 3, 300, &lens[5]);
    for (int k = 0; k < 6; k++) {
        for (size_t n = 0; n < lens[k]; n++) {
            uint8_t *cut = malloc(n ? n : 1);
            cr_assert_not_null(cut);
            memcpy(cut, imgs[k], n);
            int rc = sl_transcode_jpeg(t, cut, n, 95, 0, &jpeg, &jlen, &w, &h);
            if (k == 1 && n >= lens[k] - png_iend)
                cr_assert(rc == SL_OK || rc == SL_EIMAGE);
            else
                cr_assert_eq(rc, SL_EIMAGE, "image %d prefix %zu of %zu: rc %d", k, n,
                             lens[k], rc);
            free(cut);
        }
        /* And the whole file still works on the same transcoder. */
        cr_assert_eq(sl_transcode_jpeg(t, imgs[k], lens[k], 95, 0, &jpeg, &jlen, &w, &h), SL_OK,
                     "image %d: %s", k, sl_errmsg());
        cr_assert(w == 13 && h == 9);
        free(imgs[k]);
    }
    free(rgb);
    free(gray);
    sl_transcoder_destroy(t);
}

/* Each JPEG is transcoded as if it were the transcoder's first (issue 26):
 * a gray JPEG without DHT (re-encoded to RGB: the TurboJPEG path) gives the
 * same bytes after a JPEG with optimized tables as on a fresh transcoder
 * (its standard tables, not the last image's); one without DQT, and one
 * with fill bytes before a stuffed zero, are refused by name. */
Test(image, transcode_jpeg_alone_whatever_came_before)
{
    uint8_t *rgb = smooth_rgb(151, 97), *gray = rgb_to_gray(rgb, 151, 97);
    for (size_t i = 0; i < (size_t)151 * 97; i++) /* noise: long codes, stuffed FF 00 */
        gray[i] = (uint8_t)(gray[i] ^ (i * 2654435761u >> 13 & 63));
    size_t glen, blen, g90len, olen, qlen, flen;
    uint8_t *g = hi_jpeg_q(gray, 151, 97, TJPF_GRAY, TJSAMP_GRAY, 3, &glen);
    uint8_t *bare = hi_strip(g, glen, 0xC4, &blen);
    uint8_t *g90 = hi_jpeg_q(gray, 151, 97, TJPF_GRAY, TJSAMP_GRAY, 90, &g90len);
    uint8_t *opt = hi_jpeg_recode(g90, g90len, HI_OPTIMIZE, &olen);
    uint8_t *noq = hi_strip(g90, g90len, 0xDB, &qlen);
    uint8_t *fill = hi_fill_ff00(g90, g90len, g90len / 3, &flen);
    cr_assert_not_null(fill);
    sl_transcoder *fresh, *t;
    cr_assert_eq(sl_transcoder_create(&fresh), SL_OK);
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    const uint8_t *jpeg;
    size_t jlen, wlen;
    int w, h;
    cr_assert_eq(sl_transcode_jpeg(fresh, bare, blen, 90, 0, &jpeg, &wlen, &w, &h), SL_OK, "%s",
                 sl_errmsg());
    uint8_t *want = malloc(wlen);
    cr_assert_not_null(want);
    memcpy(want, jpeg, wlen);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(sl_transcode_jpeg(t, opt, olen, 90, 0, &jpeg, &jlen, &w, &h), SL_OK);
        cr_assert_eq(sl_transcode_jpeg(t, bare, blen, 90, 0, &jpeg, &jlen, &w, &h), SL_OK,
                     "after an optimized JPEG: %s", sl_errmsg());
        cr_assert(jlen == wlen && !memcmp(jpeg, want, wlen),
                  "after an optimized JPEG: other bytes (its tables)");
    }
    cr_assert_eq(sl_transcode_jpeg(t, noq, qlen, 90, 0, &jpeg, &jlen, &w, &h), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "sl_transcode_jpeg: ") && strstr(sl_errmsg(), "no DQT"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_transcode_jpeg(t, fill, flen, 90, 0, &jpeg, &jlen, &w, &h), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "fill bytes"), "%s", sl_errmsg());
    sl_transcoder_destroy(t);
    sl_transcoder_destroy(fresh);
    free(want);
    free(fill);
    free(noq);
    free(opt);
    free(g90);
    free(bare);
    free(g);
    free(gray);
    free(rgb);
}

Test(image, encode_jpeg_rgb_gray_and_pitch)
{
    int w = 30, h = 20, pitch = 40;
    uint8_t *rgb = smooth_rgb(w, h), *gray = rgb_to_gray(rgb, w, h);
    uint8_t *gp = calloc((size_t)pitch * h, 1), *g3 = malloc((size_t)w * h * 3);
    cr_assert(gp && g3);
    for (int y = 0; y < h; y++)
        memcpy(gp + (size_t)y * pitch, gray + (size_t)y * w, (size_t)w);
    for (size_t i = 0; i < (size_t)w * h; i++)
        g3[3 * i] = g3[3 * i + 1] = g3[3 * i + 2] = gray[i];
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    const uint8_t *jpeg;
    size_t jlen;
    cr_assert_eq(sl_encode_jpeg_rgb(t, gp, w, h, pitch, 1, 95, &jpeg, &jlen), SL_OK, "%s",
                 sl_errmsg());
    int dw, dh;
    uint8_t *dec = decode_rgb(jpeg, jlen, &dw, &dh);
    cr_assert(dw == w && dh == h);
    cr_assert_lt(mean_abs_diff(dec, g3, (size_t)w * h * 3), 3.0);
    free(dec);

    /* RGB rows with padding. */
    int rp = w * 3 + 9;
    uint8_t *rpad = calloc((size_t)rp * h, 1);
    cr_assert_not_null(rpad);
    for (int y = 0; y < h; y++)
        memcpy(rpad + (size_t)y * rp, rgb + (size_t)y * w * 3, (size_t)w * 3);
    cr_assert_eq(sl_encode_jpeg_rgb(t, rpad, w, h, rp, 3, 95, &jpeg, &jlen), SL_OK);
    dec = decode_rgb(jpeg, jlen, &dw, &dh);
    cr_assert_lt(mean_abs_diff(dec, rgb, (size_t)w * h * 3), 3.0);
    free(dec);

    cr_assert_eq(sl_encode_jpeg_rgb(t, rgb, w, h, w * 3, 2, 95, &jpeg, &jlen), SL_EINVAL);
    cr_assert_eq(sl_encode_jpeg_rgb(t, rgb, w, h, w * 3 - 1, 3, 95, &jpeg, &jlen), SL_EINVAL);
    cr_assert_eq(sl_encode_jpeg_rgb(t, rgb, 0, h, w * 3, 3, 95, &jpeg, &jlen), SL_EINVAL);
    cr_assert_eq(sl_encode_jpeg_rgb(t, rgb, w, h, w * 3, 3, 101, &jpeg, &jlen), SL_EINVAL);
    sl_transcoder_destroy(t);
    sl_transcoder_destroy(NULL);
    free(rpad);
    free(gp);
    free(g3);
    free(gray);
    free(rgb);
}

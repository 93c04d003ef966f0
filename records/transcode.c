/*
 * records/transcode.c - re-encode any supported image as an RGB JPEG
 * (the converter's path for everything that cannot be stored as is).
 *
 *   JPEG  TurboJPEG, straight to RGB; gray expands to RGB inside libjpeg;
 *         CMYK/YCCK decode to CMYK and convert here (see cmyk_to_rgb).
 *         With resize_short, decoded at the smallest DCT scaling factor
 *         (tjGetScalingFactors) whose shorter side still covers the target.
 *   PNG   libpng's simplified API (any bit depth, palette, gray, interlace,
 *         gamma), PNG_FORMAT_RGB with alpha composited over white.
 *   BMP   uncompressed 8-bit paletted, 24-bit BGR, 32-bit BGRX; bottom-up
 *         and top-down (header parsed by image_probe.c).
 *   PPM   binary P6 / PGM P5, any maxval (scaled to 0..255).
 *   WebP  libwebp's advanced decode API (lossy, lossless, alpha; animated
 *         refused by image_probe.c) straight into the buffer as RGB, or
 *         RGBA composited over white here as libpng does for PNG (in
 *         linear light: see composite_white). Only with SLUICE_WITH_WEBP.
 * then sl_resize_rgb_u8 to shorter side == resize_short (never enlarging),
 * then tjCompress2 at the given quality with 4:2:0 chroma subsampling.
 *
 * Memory: the transcoder keeps its decode, resize and JPEG buffers across
 * calls and only grows them, so a steady stream of images allocates nothing
 * but a TurboJPEG decode handle per JPEG (tj_ready says why).
 * The JPEG buffer is tjAlloc'd at tjBufSize() of the image (the worst case
 * TurboJPEG can produce) and passed with TJFLAG_NOREALLOC.
 *
 * Threading: one transcoder per thread.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <turbojpeg.h>
#if SLUICE_WITH_WEBP
#include <webp/decode.h>
#endif

#include "records_int.h"

/* Images whose header claims more than max_pixels (default
 * SL_MAX_PIXELS_DEFAULT, records.h) are refused before anything of their
 * size is allocated (a 20-byte PNG can claim 65535 x 65535 pixels). */
struct sl_transcoder {
    uint64_t max_pixels;
    tjhandle enc;            /* the decoder is one per JPEG: decode_jpeg */
    uint8_t *pix;            /* decoded image: RGB (CMYK before conversion) */
    size_t pix_cap;
    uint8_t *aux;            /* resized RGB, or gray expanded to RGB */
    size_t aux_cap;
    unsigned char *jpeg;     /* tjAlloc'd encoder output */
    unsigned long jpeg_cap;
};

int sl_transcoder_create(sl_transcoder **out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_transcoder_create: out is NULL");
    *out = NULL;
    sl_transcoder *t = calloc(1, sizeof *t);
    if (!t)
        return sl_fail(SL_ENOMEM, "sl_transcoder_create: out of memory");
    t->max_pixels = SL_MAX_PIXELS_DEFAULT;
    t->enc = tjInitCompress();
    if (!t->enc) {
        int rc = sl_fail(SL_ENOMEM, "sl_transcoder_create: TurboJPEG init: %s",
                         tjGetErrorStr2(NULL));
        sl_transcoder_destroy(t);
        return rc;
    }
    *out = t;
    return SL_OK;
}

void sl_transcoder_destroy(sl_transcoder *t)
{
    if (!t)
        return;
    if (t->enc)
        tjDestroy(t->enc);
    free(t->pix);
    free(t->aux);
    tjFree(t->jpeg);
    free(t);
}

/* Make *buf hold at least need bytes (contents not kept). */
static int reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return SL_OK;
    free(*buf);
    *buf = malloc(need);
    *cap = *buf ? need : 0;
    if (!*buf)
        return sl_fail(SL_ENOMEM, "out of memory (%zu bytes)", need);
    return SL_OK;
}

void sl_transcoder_set_max_pixels(sl_transcoder *t, uint64_t n)
{
    if (t)
        t->max_pixels = n ? n : SL_MAX_PIXELS_DEFAULT;
}

static int check_pixels(const sl_transcoder *t, int w, int h)
{
    if ((uint64_t)w * (uint64_t)h > t->max_pixels)
        return sl_fail(SL_EIMAGE, "image too large to decode: %dx%d = %llu pixels, more than "
                       "max_pixels %llu", w, h, (unsigned long long)w * (unsigned long long)h,
                       (unsigned long long)t->max_pixels);
    return SL_OK;
}

/* ------------------------------------------------------------------ JPEG */

/* Adobe CMYK as libjpeg-turbo hands it out (TJPF_CMYK) is inverted: each
 * byte is 255 - ink, as Photoshop stores it (YCCK is converted back to this
 * form by libjpeg). Without a colour-management system the usual conversion
 * is R = C*K/255 on those inverted values, i.e. R = 255 (1 - c)(1 - k) in
 * ink fractions (libjpeg-turbo's cmyk.h, cmyk_to_rgb). In place:
 * pixel i is read (4 bytes at 4i) before 3i..3i+2 are written. */
static void cmyk_to_rgb(uint8_t *p, size_t npix)
{
    for (size_t i = 0; i < npix; i++) {
        unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
        p[3 * i + 0] = (uint8_t)((c * k + 127) / 255);
        p[3 * i + 1] = (uint8_t)((m * k + 127) / 255);
        p[3 * i + 2] = (uint8_t)((y * k + 127) / 255);
    }
}

/* A TurboJPEG handle carries state from one image to the next: TurboJPEG
 * 2.1 returns from a failed tjDecompressHeader3 with libjpeg's state left
 * mid-stream (the next call on that handle then misreads a good file,
 * "Bogus DQT index"; see the truncation test), and libjpeg keeps the
 * Huffman and quantization tables of every image in a decode handle, so a
 * file without them (abbreviated: no DHT, no DQT) would decode with the
 * last image's (issue 26). So every JPEG gets a decode handle of its own
 * (decode_jpeg; about a microsecond, against milliseconds of decode and
 * encode), and an encoder that failed is replaced, to be safe; if that
 * allocation fails the slot stays NULL and is retried next call. */
static int tj_ready(tjhandle *h)
{
    if (*h)
        return SL_OK;
    *h = tjInitCompress();
    if (!*h)
        return sl_fail(SL_ENOMEM, "TurboJPEG init: %s", tjGetErrorStr2(NULL));
    return SL_OK;
}

static void tj_reset(tjhandle *h)
{
    if (*h)
        tjDestroy(*h);
    *h = NULL;
}

static int decode_jpeg_with(sl_transcoder *t, tjhandle dec, const uint8_t *data, size_t len,
                            int resize_short, int *ow, int *oh, int *sw, int *sh)
{
    /* Structure and tables first (records/jpeg_scan.c): a truncated or
     * abbreviated file, or fill bytes on which decoders disagree, is
     * refused with the byte it fails at. */
    int rc = sl_jpeg_scan(data, len, NULL);
    if (rc)
        return sl_fail(rc, "JPEG: %s", sl_errmsg());
    sl_image_info info;
    rc = sl_jpeg_header(dec, data, len, &info);
    if (rc)
        return rc;
    int w = info.width, h = info.height, short_side = w < h ? w : h;
    tjscalingfactor best = {1, 1};
    if (resize_short > 0 && short_side > resize_short) {
        int nsf = 0;
        tjscalingfactor *sf = tjGetScalingFactors(&nsf);
        for (int i = 0; sf && i < nsf; i++) {
            if (sf[i].num > sf[i].denom)
                continue; /* never decode larger than the file */
            if (TJSCALED(short_side, sf[i]) < resize_short)
                continue;
            if ((int64_t)sf[i].num * best.denom < (int64_t)best.num * sf[i].denom)
                best = sf[i];
        }
    }
    /* The header's size, not the scaled one: the bound is on what the file
     * claims (a progressive file's coefficients are kept at full size). */
    if ((rc = check_pixels(t, w, h)))
        return rc;
    int dw = TJSCALED(w, best), dh = TJSCALED(h, best);
    int cmyk = info.channels == 4;
    int pf = cmyk ? TJPF_CMYK : TJPF_RGB;
    if ((rc = reserve(&t->pix, &t->pix_cap, (size_t)dw * dh * tjPixelSize[pf])))
        return rc;
    /* Warnings (truncated or damaged data, which libjpeg pads with grey)
     * fail the image too: the converter skips and reports it. */
    if (tjDecompress2(dec, data, (unsigned long)len, t->pix, dw, 0, dh, pf, 0) != 0)
        return sl_fail(SL_EIMAGE, "JPEG decode: %s", tjGetErrorStr2(dec));
    if (cmyk)
        cmyk_to_rgb(t->pix, (size_t)dw * dh);
    *ow = w;
    *oh = h;
    *sw = dw;
    *sh = dh;
    return SL_OK;
}

/* Decode a JPEG into t->pix as RGB. *ow, *oh: full size from the header;
 * *sw, *sh: decoded size (scaled down when resize_short allows it). */
static int decode_jpeg(sl_transcoder *t, const uint8_t *data, size_t len, int resize_short,
                       int *ow, int *oh, int *sw, int *sh)
{
    tjhandle dec = tjInitDecompress(); /* nothing of the last image: see tj_ready */
    if (!dec)
        return sl_fail(SL_ENOMEM, "TurboJPEG init: %s", tjGetErrorStr2(NULL));
    int rc = decode_jpeg_with(t, dec, data, len, resize_short, ow, oh, sw, sh);
    tjDestroy(dec);
    return rc;
}

/* ------------------------------------------------------------------- PNG */

static int decode_png(sl_transcoder *t, const uint8_t *data, size_t len, int *w, int *h)
{
    /* Header first through our own parser, for uniform messages and the
     * size limits, before libpng allocates anything for the rows. */
    sl_image_info info;
    int rc = sl_png_parse_header(data, len, &info);
    if (rc)
        return rc;
    if ((rc = check_pixels(t, info.width, info.height)))
        return rc;
    /* The simplified API catches libpng's longjmp errors itself and frees
     * its state on failure; png_image_free is idempotent, so calling it on
     * every exit path leaks nothing. */
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len)) {
        rc = sl_fail(SL_EIMAGE, "PNG: %s", img.message);
        png_image_free(&img);
        return rc;
    }
    img.format = PNG_FORMAT_RGB;
    size_t stride = (size_t)img.width * 3;
    if ((rc = reserve(&t->pix, &t->pix_cap, stride * img.height))) {
        png_image_free(&img);
        return rc;
    }
    /* Transparent pixels are composited over white (sRGB), the colour most
     * viewers show them on; TensorFlow's decode_png(channels=3) instead
     * drops alpha and keeps whatever colour the transparent pixels had. */
    const png_color white = {255, 255, 255};
    if (!png_image_finish_read(&img, &white, t->pix, (png_int_32)stride, NULL)) {
        rc = sl_fail(SL_EIMAGE, "PNG: %s", img.message);
        png_image_free(&img);
        return rc;
    }
    png_image_free(&img);
    *w = (int)img.width;
    *h = (int)img.height;
    return SL_OK;
}

/* ------------------------------------------------------------------- BMP */

static int decode_bmp(sl_transcoder *t, const uint8_t *data, size_t len, int *w, int *h)
{
    sl_bmp_header bh;
    int rc = sl_bmp_parse_header(data, len, &bh);
    if (rc)
        return rc;
    if ((rc = check_pixels(t, bh.width, bh.height)))
        return rc;
    if (bh.data_off > len || (len - bh.data_off) / bh.row_bytes < (size_t)bh.height)
        return sl_fail(SL_EIMAGE, "BMP: truncated pixel data (%zu bytes, %zu needed)", len,
                       bh.data_off + bh.row_bytes * (size_t)bh.height);
    if ((rc = reserve(&t->pix, &t->pix_cap, (size_t)bh.width * bh.height * 3)))
        return rc;
    const uint8_t *pal = data + bh.palette_off;
    for (int y = 0; y < bh.height; y++) {
        int sy = bh.top_down ? y : bh.height - 1 - y;
        const uint8_t *s = data + bh.data_off + (size_t)sy * bh.row_bytes;
        uint8_t *d = t->pix + (size_t)y * bh.width * 3;
        if (bh.bpp == 8) {
            for (int x = 0; x < bh.width; x++) {
                if (s[x] >= bh.palette_len)
                    return sl_fail(SL_EIMAGE, "BMP: palette index %u out of range (%u colours)",
                                   s[x], bh.palette_len);
                const uint8_t *e = pal + (size_t)s[x] * bh.palette_entry; /* B G R (X) */
                d[3 * x + 0] = e[2];
                d[3 * x + 1] = e[1];
                d[3 * x + 2] = e[0];
            }
        } else {
            int step = bh.bpp / 8; /* BGR or BGRX */
            for (int x = 0; x < bh.width; x++) {
                d[3 * x + 0] = s[step * x + 2];
                d[3 * x + 1] = s[step * x + 1];
                d[3 * x + 2] = s[step * x + 0];
            }
        }
    }
    *w = bh.width;
    *h = bh.height;
    return SL_OK;
}

/* ------------------------------------------------------------------- PNM */

static int decode_pnm(sl_transcoder *t, const uint8_t *data, size_t len, int *w, int *h)
{
    sl_pnm_header ph;
    int rc = sl_pnm_parse_header(data, len, &ph);
    if (rc)
        return rc;
    if ((rc = check_pixels(t, ph.width, ph.height)))
        return rc;
    size_t bps = ph.maxval > 255 ? 2 : 1; /* big-endian 16-bit above 255 */
    size_t nsamp = (size_t)ph.width * ph.height * ph.channels;
    if (len - ph.data_off < nsamp * bps)
        return sl_fail(SL_EIMAGE, "PPM: truncated pixel data (%zu bytes, %zu needed)", len,
                       ph.data_off + nsamp * bps);
    if ((rc = reserve(&t->pix, &t->pix_cap, (size_t)ph.width * ph.height * 3)))
        return rc;
    const uint8_t *s = data + ph.data_off;
    size_t npix = (size_t)ph.width * ph.height;
    unsigned mv = ph.maxval;
    for (size_t i = 0; i < npix; i++) {
        for (int c = 0; c < 3; c++) {
            size_t k = ph.channels == 1 ? i : i * 3 + (size_t)c;
            unsigned v = bps == 2 ? (unsigned)s[2 * k] << 8 | s[2 * k + 1] : s[k];
            if (v > mv)
                v = mv; /* out-of-range samples saturate */
            t->pix[i * 3 + (size_t)c] = mv == 255 ? (uint8_t)v : (uint8_t)((v * 255u + mv / 2) / mv);
        }
    }
    *w = ph.width;
    *h = ph.height;
    return SL_OK;
}

/* ------------------------------------------------------------------ WebP */

#if SLUICE_WITH_WEBP
/* RGBA (4 bytes a pixel) to RGB over white, in place (pixel i's 4 bytes
 * are read before 3i..3i+2 are written). libpng's simplified API, which
 * the PNG path uses, composites in linear light (sRGB decoded, mixed,
 * encoded again: black at alpha 128 over white gives 186, not 128), so
 * this does too, with the sRGB transfer function (IEC 61966-2-1); the
 * result is within 2 levels of libpng's own tables (the test compares
 * the two). Opaque and fully transparent pixels take no arithmetic. */
static void composite_white(uint8_t *p, size_t npix)
{
    float lin[256];
    for (int v = 0; v < 256; v++) {
        float c = (float)v / 255.0f;
        lin[v] = c <= 0.04045f ? c / 12.92f : powf((c + 0.055f) / 1.055f, 2.4f);
    }
    for (size_t i = 0; i < npix; i++) {
        unsigned a = p[4 * i + 3];
        for (int c = 0; c < 3; c++) {
            uint8_t v = p[4 * i + (size_t)c], o;
            if (a == 255) {
                o = v;
            } else if (a == 0) {
                o = 255;
            } else {
                float al = (float)a / 255.0f, l = al * lin[v] + (1.0f - al);
                float e = l <= 0.0031308f ? 12.92f * l : 1.055f * powf(l, 1.0f / 2.4f) - 0.055f;
                o = (uint8_t)lrintf(fminf(fmaxf(e, 0.0f), 1.0f) * 255.0f);
            }
            p[3 * i + (size_t)c] = o;
        }
    }
}
#endif

static int decode_webp(sl_transcoder *t, const uint8_t *data, size_t len, int *w, int *h)
{
    /* The header first (sizes, alpha, animation refused by name), then the
     * size limit, before libwebp allocates anything of the image's size. */
    sl_image_info info;
    int rc = sl_webp_parse_header(data, len, &info);
    if (rc)
        return rc;
    if ((rc = check_pixels(t, info.width, info.height)))
        return rc;
#if SLUICE_WITH_WEBP
    int alpha = info.channels == 4, bpp = alpha ? 4 : 3;
    size_t stride = (size_t)info.width * (size_t)bpp, size = stride * (size_t)info.height;
    if ((rc = reserve(&t->pix, &t->pix_cap, size)))
        return rc;
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return sl_fail(SL_ENOTSUP, "WebP: libwebp's decoder ABI differs from its header's");
    /* decoded straight into t->pix (external memory: nothing to free) */
    cfg.output.colorspace = alpha ? MODE_RGBA : MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = t->pix;
    cfg.output.u.RGBA.stride = (int)stride;
    cfg.output.u.RGBA.size = size;
    VP8StatusCode st = WebPDecode(data, len, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (st != VP8_STATUS_OK)
        return sl_fail(st == VP8_STATUS_OUT_OF_MEMORY ? SL_ENOMEM : SL_EIMAGE, "WebP decode: %s",
                       sl_webp_status_what(st));
    if (alpha)
        composite_white(t->pix, (size_t)info.width * (size_t)info.height);
    *w = info.width;
    *h = info.height;
    return SL_OK;
#else
    (void)w;
    (void)h;
    return sl_fail(SL_EIMAGE, "WebP: this build has no libwebp");
#endif
}

/* ---------------------------------------------------------------- encode */

/* Compress packed RGB into t->jpeg; *len gets the JPEG's length. */
static int encode(sl_transcoder *t, const uint8_t *rgb, int w, int h, int pitch, int quality,
                  size_t *len)
{
    unsigned long need = tjBufSize(w, h, TJSAMP_420);
    if (need == (unsigned long)-1 || need > INT_MAX)
        return sl_fail(SL_EIMAGE, "JPEG encode: %dx%d is too large to encode", w, h);
    if (need > t->jpeg_cap) {
        tjFree(t->jpeg);
        t->jpeg_cap = 0;
        t->jpeg = tjAlloc((int)need);
        if (!t->jpeg)
            return sl_fail(SL_ENOMEM, "JPEG encode: out of memory (%lu bytes)", need);
        t->jpeg_cap = need;
    }
    int rc = tj_ready(&t->enc);
    if (rc)
        return rc;
    unsigned long size = t->jpeg_cap;
    if (tjCompress2(t->enc, rgb, w, pitch, h, TJPF_RGB, &t->jpeg, &size, TJSAMP_420, quality,
                    TJFLAG_NOREALLOC) != 0) {
        rc = sl_fail(SL_EIMAGE, "JPEG encode: %s", tjGetErrorStr2(t->enc));
        tj_reset(&t->enc);
        return rc;
    }
    *len = size;
    return SL_OK;
}

int sl_encode_jpeg_rgb(sl_transcoder *t, const uint8_t *pixels, int w, int h, int pitch,
                       int channels, int quality, const uint8_t **jpeg, size_t *jpeg_len)
{
    if (!t || !pixels || !jpeg || !jpeg_len)
        return sl_fail(SL_EINVAL, "sl_encode_jpeg_rgb: NULL argument");
    if (w <= 0 || h <= 0 || w > SL_IMAGE_MAX_DIM || h > SL_IMAGE_MAX_DIM ||
        (channels != 1 && channels != 3) || pitch < w * channels || quality < 1 || quality > 100)
        return sl_fail(SL_EINVAL, "sl_encode_jpeg_rgb: bad arguments (%dx%d, pitch %d, "
                       "%d channels, quality %d)", w, h, pitch, channels, quality);
    const uint8_t *rgb = pixels;
    int rgb_pitch = pitch;
    if (channels == 1) {
        if (reserve(&t->aux, &t->aux_cap, (size_t)w * h * 3))
            return sl_fail(SL_ENOMEM, "sl_encode_jpeg_rgb: %s", sl_errmsg());
        for (int y = 0; y < h; y++) {
            const uint8_t *s = pixels + (size_t)y * pitch;
            uint8_t *d = t->aux + (size_t)y * w * 3;
            for (int x = 0; x < w; x++)
                d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = s[x];
        }
        rgb = t->aux;
        rgb_pitch = w * 3;
    }
    size_t n;
    int rc = encode(t, rgb, w, h, rgb_pitch, quality, &n);
    if (rc)
        return sl_fail(rc, "sl_encode_jpeg_rgb: %s", sl_errmsg());
    *jpeg = t->jpeg;
    *jpeg_len = n;
    return SL_OK;
}

/* ------------------------------------------------------------- transcode */

/* Output size for resize_short s: shorter side exactly s, longer side
 * scaled and rounded to nearest; unchanged when the shorter side <= s. */
static void target_size(int w, int h, int s, int *tw, int *th)
{
    *tw = w;
    *th = h;
    if (s <= 0 || (w < h ? w : h) <= s)
        return;
    if (w <= h) {
        *tw = s;
        *th = (int)(((int64_t)h * s * 2 + w) / (2 * (int64_t)w));
    } else {
        *th = s;
        *tw = (int)(((int64_t)w * s * 2 + h) / (2 * (int64_t)h));
    }
}

int sl_transcode_jpeg(sl_transcoder *t, const uint8_t *data, size_t len, int quality,
                      int resize_short, const uint8_t **jpeg, size_t *jpeg_len, int *w, int *h)
{
    if (!t || !data || !jpeg || !jpeg_len || !w || !h)
        return sl_fail(SL_EINVAL, "sl_transcode_jpeg: NULL argument");
    if (quality < 1 || quality > 100 || resize_short < 0)
        return sl_fail(SL_EINVAL, "sl_transcode_jpeg: bad quality %d or resize_short %d",
                       quality, resize_short);
    int ow = 0, oh = 0, sw = 0, sh = 0, rc;
    switch (sl_image_sniff(data, len)) {
    case SL_IMAGE_JPEG:
        rc = decode_jpeg(t, data, len, resize_short, &ow, &oh, &sw, &sh);
        break;
    case SL_IMAGE_PNG:
        rc = decode_png(t, data, len, &sw, &sh);
        break;
    case SL_IMAGE_BMP:
        rc = decode_bmp(t, data, len, &sw, &sh);
        break;
    case SL_IMAGE_PPM:
        rc = decode_pnm(t, data, len, &sw, &sh);
        break;
    case SL_IMAGE_WEBP:
        rc = decode_webp(t, data, len, &sw, &sh);
        break;
    default:
        rc = sl_fail(SL_EIMAGE, "not a JPEG, PNG, BMP, PPM or WebP image");
        break;
    }
    if (rc)
        return sl_fail(rc, "sl_transcode_jpeg: %s", sl_errmsg());
    if (!ow) {
        ow = sw;
        oh = sh;
    }
    /* The target follows the full-size aspect ratio even when the JPEG was
     * decoded at a DCT scale (whose sizes are rounded up). */
    int tw, th;
    target_size(ow, oh, resize_short, &tw, &th);
    /* The DCT-scaled decode always covers the target (ceil(l * num / den)
     * >= round(l * s / short) since num / den >= s / short); this only
     * guards the resize against ever enlarging. */
    if (tw > sw || th > sh) {
        tw = sw;
        th = sh;
    }
    const uint8_t *rgb = t->pix;
    if (tw != sw || th != sh) {
        if ((rc = reserve(&t->aux, &t->aux_cap, (size_t)tw * th * 3)))
            return sl_fail(rc, "sl_transcode_jpeg: resize: %s", sl_errmsg());
        sl_resize_rgb_u8(t->pix, sw, sh, sw * 3, t->aux, tw, th, tw * 3);
        rgb = t->aux;
    }
    size_t n;
    if ((rc = encode(t, rgb, tw, th, tw * 3, quality, &n)))
        return sl_fail(rc, "sl_transcode_jpeg: %s", sl_errmsg());
    *jpeg = t->jpeg;
    *jpeg_len = n;
    *w = tw;
    *h = th;
    return SL_OK;
}

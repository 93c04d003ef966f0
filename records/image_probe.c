/*
 * records/image_probe.c - what kind of image a byte buffer holds, read from
 * its header alone (no pixel decode): JPEG (through TurboJPEG), PNG (the
 * IHDR chunk), BMP and binary PPM/PGM (parsed here), WebP (through
 * libwebp's WebPGetFeatures, when the build has it: SLUICE_WITH_WEBP).
 *
 * The converter probes every input: a JPEG that TensorFlow's decoder takes
 * as is (3 components, YCbCr or RGB) is stored untouched ("passthrough");
 * everything else is re-encoded by records/transcode.c. Gray and CMYK/YCCK
 * JPEGs are re-encoded to RGB, as TensorFlow's ImageNet converter
 * (build_imagenet_data.py) does, because the readers expect 3 channels.
 *
 * Threading: every function here is reentrant (sl_image_probe makes its own
 * short-lived TurboJPEG handle; creating one costs well under a microsecond).
 */
#include <stdio.h>
#include <string.h>

#include <turbojpeg.h>
#include <zlib.h>
#if SLUICE_WITH_WEBP
#include <webp/decode.h>
#endif

#include "records_int.h"

static uint32_t rd_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint32_t rd_le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static uint16_t rd_le16(const uint8_t *p) { return (uint16_t)(p[1] << 8 | p[0]); }

static const uint8_t png_sig[8] = {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A};

sl_image_type sl_image_sniff(const uint8_t *data, size_t len)
{
    if (!data)
        return SL_IMAGE_UNKNOWN;
    if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return SL_IMAGE_JPEG;
    if (len >= 8 && !memcmp(data, png_sig, 8))
        return SL_IMAGE_PNG;
    if (len >= 2 && data[0] == 'B' && data[1] == 'M')
        return SL_IMAGE_BMP;
    if (len >= 2 && data[0] == 'P' && (data[1] == '5' || data[1] == '6'))
        return SL_IMAGE_PPM;
    /* RIFF container: "RIFF" | u32 size | "WEBP" (WebP container spec) */
    if (len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4))
        return SL_IMAGE_WEBP;
    return SL_IMAGE_UNKNOWN;
}

static int check_dims(const char *what, long long w, long long h)
{
    if (w <= 0 || h <= 0 || w > SL_IMAGE_MAX_DIM || h > SL_IMAGE_MAX_DIM)
        return sl_fail(SL_EIMAGE, "%s: unsupported dimensions %lldx%lld (1..%d)", what, w, h,
                       SL_IMAGE_MAX_DIM);
    return SL_OK;
}

/* ------------------------------------------------------------------- JPEG */

int sl_jpeg_header(void *tj, const uint8_t *data, size_t len, sl_image_info *info)
{
    int w = 0, h = 0, subsamp = -1, cs = -1;
    if (tjDecompressHeader3((tjhandle)tj, data, (unsigned long)len, &w, &h, &subsamp, &cs) != 0) {
        /* TurboJPEG 2.1 reads the whole header, stores size and colorspace,
         * and only then refuses sampling factors it has no TJSAMP_* for
         * (e.g. 1x4 or 4x2 luma). tjDecompress2 decodes such files fine, so
         * accept the header when every output was filled in. Warnings
         * (TJERR_WARNING) are not accepted: they mean damaged data. */
        if (!(subsamp < 0 && w > 0 && h > 0 && cs >= 0 &&
              tjGetErrorCode((tjhandle)tj) == TJERR_FATAL))
            return sl_fail(SL_EIMAGE, "JPEG header: %s", tjGetErrorStr2((tjhandle)tj));
    }
    /* An abbreviated (tables-only) stream "succeeds" with no frame: 0x0. */
    int rc = check_dims("JPEG header", w, h);
    if (rc)
        return rc;
    memset(info, 0, sizeof *info);
    info->type = SL_IMAGE_JPEG;
    info->width = w;
    info->height = h;
    switch (cs) {
    case TJCS_GRAY:
        info->channels = 1;
        break;
    case TJCS_RGB:
    case TJCS_YCbCr:
        /* libjpeg assigns YCbCr/RGB only to 3-component frames. */
        info->channels = 3;
        info->jpeg_passthrough = 1;
        break;
    case TJCS_CMYK:
    case TJCS_YCCK:
        info->channels = 4;
        break;
    default:
        return sl_fail(SL_EIMAGE, "JPEG header: unknown colorspace %d", cs);
    }
    return SL_OK;
}

/* -------------------------------------------------------------------- PNG */

int sl_png_parse_header(const uint8_t *data, size_t len, sl_image_info *info)
{
    /* signature(8) | length(4) "IHDR"(4) | width(4) height(4) depth(1)
     * colour type(1) compression(1) filter(1) interlace(1) | crc(4)
     * (PNG spec, 11.2.2). IHDR must be the first chunk. */
    if (len < 33)
        return sl_fail(SL_EIMAGE, "PNG: truncated header (%zu of 33 bytes)", len);
    if (memcmp(data, png_sig, 8))
        return sl_fail(SL_EIMAGE, "PNG: bad signature");
    const uint8_t *c = data + 8;
    if (rd_be32(c) != 13 || memcmp(c + 4, "IHDR", 4))
        return sl_fail(SL_EIMAGE, "PNG: first chunk is not a 13-byte IHDR");
    uint32_t crc = (uint32_t)crc32(0L, c + 4, 17);
    if (crc != rd_be32(c + 21))
        return sl_fail(SL_EIMAGE, "PNG: IHDR CRC mismatch");
    uint32_t w = rd_be32(c + 8), h = rd_be32(c + 12);
    int rc = check_dims("PNG", w, h);
    if (rc)
        return rc;
    unsigned depth = c[16], ctype = c[17];
    int channels;
    unsigned depths; /* bit set of allowed depths (bit d for depth d) */
    switch (ctype) {
    case 0: channels = 1; depths = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8 | 1u << 16; break;
    case 2: channels = 3; depths = 1u << 8 | 1u << 16; break;
    case 3: channels = 3; depths = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8; break;
    case 4: channels = 2; depths = 1u << 8 | 1u << 16; break;
    case 6: channels = 4; depths = 1u << 8 | 1u << 16; break;
    default: return sl_fail(SL_EIMAGE, "PNG: bad colour type %u", ctype);
    }
    if (depth > 16 || !(depths >> depth & 1u))
        return sl_fail(SL_EIMAGE, "PNG: bad bit depth %u for colour type %u", depth, ctype);
    if (c[18] != 0 || c[19] != 0 || c[20] > 1)
        return sl_fail(SL_EIMAGE, "PNG: bad compression/filter/interlace method");
    memset(info, 0, sizeof *info);
    info->type = SL_IMAGE_PNG;
    info->width = (int)w;
    info->height = (int)h;
    info->channels = channels;
    return SL_OK;
}

/* -------------------------------------------------------------------- BMP */

int sl_bmp_parse_header(const uint8_t *data, size_t len, sl_bmp_header *h)
{
    /* BITMAPFILEHEADER: "BM" | u32 file size | u32 reserved | u32 bfOffBits,
     * then the DIB header starting with its own size (Microsoft's
     * "Bitmap Storage" reference). All little-endian. */
    if (len < 18)
        return sl_fail(SL_EIMAGE, "BMP: truncated file header (%zu bytes)", len);
    if (data[0] != 'B' || data[1] != 'M')
        return sl_fail(SL_EIMAGE, "BMP: bad signature");
    uint32_t off = rd_le32(data + 10), dib = rd_le32(data + 14);
    if (dib != 12 && dib != 40 && dib != 52 && dib != 56 && dib != 108 && dib != 124)
        return sl_fail(SL_EIMAGE, "BMP: unsupported DIB header size %u", dib);
    if (len < 14u + dib)
        return sl_fail(SL_EIMAGE, "BMP: truncated DIB header (%zu of %u bytes)", len, 14u + dib);
    long long w, hh;
    unsigned bpp, compression = 0, ncolors = 0, entry;
    if (dib == 12) { /* BITMAPCOREHEADER: u16 width, u16 height, planes, bpp */
        w = rd_le16(data + 18);
        hh = rd_le16(data + 20);
        bpp = rd_le16(data + 24);
        entry = 3;
    } else {         /* BITMAPINFOHEADER and later: i32 width, i32 height, ... */
        w = (int32_t)rd_le32(data + 18);
        hh = (int32_t)rd_le32(data + 22);
        bpp = rd_le16(data + 28);
        compression = rd_le32(data + 30);
        ncolors = rd_le32(data + 46);
        entry = 4;
    }
    memset(h, 0, sizeof *h);
    h->top_down = hh < 0;
    if (hh < 0)
        hh = -hh;
    int rc = check_dims("BMP", w, hh);
    if (rc)
        return rc;
    if (compression != 0 || (bpp != 8 && bpp != 24 && bpp != 32))
        return sl_fail(SL_EIMAGE, "BMP: unsupported: %u bits per pixel, compression %u "
                       "(only uncompressed 8, 24 and 32-bit)", bpp, compression);
    if (h->top_down && dib == 12)
        return sl_fail(SL_EIMAGE, "BMP: bad core header height");
    h->width = (int)w;
    h->height = (int)hh;
    h->bpp = (int)bpp;
    h->data_off = off;
    h->row_bytes = ((size_t)w * bpp + 31) / 32 * 4;
    if (off < 14u + dib)
        return sl_fail(SL_EIMAGE, "BMP: pixel offset %u inside the header", off);
    if (bpp == 8) {
        /* The palette sits between the DIB header and the pixels; take the
         * entries that are actually there (biClrUsed = 0 means 256). */
        size_t poff = 14u + dib;
        size_t avail = (off < len ? off : len) - poff;
        size_t want = ncolors ? ncolors : 256;
        if (want > 256)
            want = 256;
        if (want > avail / entry)
            want = avail / entry;
        if (want == 0)
            return sl_fail(SL_EIMAGE, "BMP: 8-bit image without a palette");
        h->palette_off = poff;
        h->palette_len = (unsigned)want;
        h->palette_entry = entry;
    }
    return SL_OK;
}

/* -------------------------------------------------------------------- PNM */

static int pnm_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Skip whitespace and '#' comments (to end of line), then read a decimal
 * number in 1..max. Netpbm's format description (netpbm.sourceforge.net). */
static int pnm_number(const uint8_t *d, size_t len, size_t *pos, unsigned max, const char *what,
                      unsigned *out)
{
    size_t p = *pos;
    for (;;) {
        while (p < len && pnm_space(d[p]))
            p++;
        if (p < len && d[p] == '#') {
            while (p < len && d[p] != '\n' && d[p] != '\r')
                p++;
            continue;
        }
        break;
    }
    if (p >= len)
        return sl_fail(SL_EIMAGE, "PPM: truncated header (before %s)", what);
    if (d[p] < '0' || d[p] > '9')
        return sl_fail(SL_EIMAGE, "PPM: bad %s", what);
    unsigned long v = 0;
    while (p < len && d[p] >= '0' && d[p] <= '9') {
        v = v * 10 + (unsigned)(d[p] - '0');
        if (v > max)
            return sl_fail(SL_EIMAGE, "PPM: %s out of range (1..%u)", what, max);
        p++;
    }
    if (v == 0)
        return sl_fail(SL_EIMAGE, "PPM: %s is 0", what);
    *pos = p;
    *out = (unsigned)v;
    return SL_OK;
}

int sl_pnm_parse_header(const uint8_t *data, size_t len, sl_pnm_header *h)
{
    if (len < 2 || data[0] != 'P' || (data[1] != '5' && data[1] != '6'))
        return sl_fail(SL_EIMAGE, "PPM: bad magic (P5 or P6 expected)");
    if (len < 3 || !pnm_space(data[2]))
        return sl_fail(SL_EIMAGE, "PPM: truncated header or no whitespace after the magic");
    size_t pos = 2;
    unsigned w, hh, maxval;
    int rc = pnm_number(data, len, &pos, SL_IMAGE_MAX_DIM, "width", &w);
    if (!rc)
        rc = pnm_number(data, len, &pos, SL_IMAGE_MAX_DIM, "height", &hh);
    if (!rc)
        rc = pnm_number(data, len, &pos, 65535, "maxval", &maxval);
    if (rc)
        return rc;
    /* Exactly one whitespace character separates maxval from the samples. */
    if (pos >= len)
        return sl_fail(SL_EIMAGE, "PPM: truncated header (after maxval)");
    if (!pnm_space(data[pos]))
        return sl_fail(SL_EIMAGE, "PPM: no whitespace after maxval");
    memset(h, 0, sizeof *h);
    h->width = (int)w;
    h->height = (int)hh;
    h->channels = data[1] == '5' ? 1 : 3;
    h->maxval = maxval;
    h->data_off = pos + 1;
    return SL_OK;
}

/* ------------------------------------------------------------------- WebP */

const char *sl_webp_status_what(int status)
{
    /* libwebp's VP8StatusCode (webp/decode.h), by value: the header may be
     * absent from this build */
    switch (status) {
    case 0: return "ok";
    case 1: return "out of memory (OUT_OF_MEMORY)";
    case 2: return "invalid parameter (INVALID_PARAM)";
    case 3: return "corrupt bitstream (BITSTREAM_ERROR)";
    case 4: return "unsupported feature (UNSUPPORTED_FEATURE)";
    case 5: return "suspended (SUSPENDED)";
    case 6: return "aborted (USER_ABORT)";
    case 7: return "truncated data (NOT_ENOUGH_DATA)";
    default: return "unknown status";
    }
}

int sl_webp_parse_header(const uint8_t *data, size_t len, sl_image_info *info)
{
#if SLUICE_WITH_WEBP
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, len, &f);
    if (st != VP8_STATUS_OK)
        return sl_fail(st == VP8_STATUS_OUT_OF_MEMORY ? SL_ENOMEM : SL_EIMAGE, "WebP header: %s",
                       sl_webp_status_what(st));
    if (f.has_animation)
        return sl_fail(SL_EIMAGE, "WebP: animated (an ANIM chunk): not supported, only still "
                       "images (extract one frame first, e.g. webpmux -get frame 1)");
    int rc = check_dims("WebP", f.width, f.height);
    if (rc)
        return rc;
    memset(info, 0, sizeof *info);
    info->type = SL_IMAGE_WEBP;
    info->width = f.width;
    info->height = f.height;
    info->channels = f.has_alpha ? 4 : 3;
    return SL_OK;
#else
    (void)data;
    (void)len;
    (void)info;
    return sl_fail(SL_EIMAGE, "WebP: this build has no libwebp (SLUICE_WITH_WEBP=OFF: install "
                   "libwebp-dev and rebuild)");
#endif
}

/* ------------------------------------------------------------------ probe */

int sl_image_probe(const uint8_t *data, size_t len, sl_image_info *out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_image_probe: out is NULL");
    memset(out, 0, sizeof *out);
    int rc;
    switch (sl_image_sniff(data, len)) {
    case SL_IMAGE_JPEG: {
        tjhandle tj = tjInitDecompress();
        if (!tj)
            return sl_fail(SL_ENOMEM, "sl_image_probe: tjInitDecompress: %s",
                           tjGetErrorStr2(NULL));
        rc = sl_jpeg_header(tj, data, len, out);
        tjDestroy(tj);
        break;
    }
    case SL_IMAGE_PNG:
        rc = sl_png_parse_header(data, len, out);
        break;
    case SL_IMAGE_BMP: {
        sl_bmp_header h;
        rc = sl_bmp_parse_header(data, len, &h);
        if (!rc) {
            out->type = SL_IMAGE_BMP;
            out->width = h.width;
            out->height = h.height;
            out->channels = 3;
        }
        break;
    }
    case SL_IMAGE_PPM: {
        sl_pnm_header h;
        rc = sl_pnm_parse_header(data, len, &h);
        if (!rc) {
            out->type = SL_IMAGE_PPM;
            out->width = h.width;
            out->height = h.height;
            out->channels = h.channels;
        }
        break;
    }
    case SL_IMAGE_WEBP:
        rc = sl_webp_parse_header(data, len, out);
        break;
    default:
        return sl_fail(SL_EIMAGE, "sl_image_probe: not a JPEG, PNG, BMP, PPM or WebP image");
    }
    if (rc) {
        memset(out, 0, sizeof *out);
        return sl_fail(rc, "sl_image_probe: %s", sl_errmsg());
    }
    return SL_OK;
}

/* tests/hostile_images.h - images that break naive readers, made in the
 * tests by the libraries that real files come from (issue 16): CMYK,
 * progressive and arithmetic-coded JPEGs (libjpeg-turbo's lossless
 * transcoding, as jpegtran does: same coefficients, so they decode to the
 * very pixels of the baseline file), a frame header patched to claim
 * 65500 x 65500, 16-bit and palette PNGs (libpng), truncations.
 *
 * Header-only (static functions) so that every test binary that includes it
 * (the Criterion suite, the TSan runner) gets its own copy without a
 * CMakeLists.txt change. */
#ifndef SL_TEST_HOSTILE_IMAGES_H
#define SL_TEST_HOSTILE_IMAGES_H

#include <criterion/criterion.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>
#include <turbojpeg.h>

/* Smooth RGB (w, h, 3) u8; seed shifts the pattern. */
static inline uint8_t *hi_rgb(int w, int h, int seed)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    cr_assert_not_null(p);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1));
            q[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1));
            q[2] = (uint8_t)((x + y + seed * 37) & 255);
        }
    return p;
}

/* TurboJPEG: pix in pixel format pf (TJPF_RGB, TJPF_CMYK) -> a baseline
 * JPEG (malloc'd). */
static inline uint8_t *hi_jpeg(const uint8_t *pix, int w, int h, int pf, int samp, size_t *len)
{
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    cr_assert_eq(tjCompress2(tj, pix, w, 0, h, pf, &buf, &size, samp, 90, 0), 0, "%s",
                 tjGetErrorStr2(tj));
    uint8_t *out = malloc(size);
    cr_assert_not_null(out);
    memcpy(out, buf, size);
    *len = size;
    tjFree(buf);
    tjDestroy(tj);
    return out;
}

/* A baseline RGB JPEG of hi_rgb(w, h, seed), 4:2:0. */
static inline uint8_t *hi_jpeg_rgb(int w, int h, int seed, size_t *len)
{
    uint8_t *pix = hi_rgb(w, h, seed);
    uint8_t *j = hi_jpeg(pix, w, h, TJPF_RGB, TJSAMP_420, len);
    free(pix);
    return j;
}

/* A CMYK JPEG (Adobe, as TurboJPEG writes it) of hi_rgb's pattern. */
static inline uint8_t *hi_jpeg_cmyk(int w, int h, size_t *len)
{
    uint8_t *rgb = hi_rgb(w, h, 1), *cmyk = malloc((size_t)w * h * 4);
    cr_assert_not_null(cmyk);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        /* inverted CMYK as libjpeg hands it out: c' = 255 - c etc., K = 255 */
        cmyk[4 * i + 0] = rgb[3 * i + 0];
        cmyk[4 * i + 1] = rgb[3 * i + 1];
        cmyk[4 * i + 2] = rgb[3 * i + 2];
        cmyk[4 * i + 3] = 255;
    }
    uint8_t *j = hi_jpeg(cmyk, w, h, TJPF_CMYK, TJSAMP_444, len);
    free(rgb);
    free(cmyk);
    return j;
}

typedef enum { HI_PROGRESSIVE = 1, HI_ARITHMETIC = 2 } hi_coding;

typedef struct hi_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} hi_jerr;

static inline void hi_jerr_exit(j_common_ptr c)
{
    c->err->format_message(c, ((hi_jerr *)c->err)->msg);
    longjmp(((hi_jerr *)c->err)->jb, 1);
}

/* Lossless re-coding of a JPEG (jpegtran -progressive / -arithmetic): the
 * same quantized coefficients with another entropy coding, so a decoder
 * must give the same pixels. malloc'd. */
static inline uint8_t *hi_jpeg_recode(const uint8_t *src, size_t len, int coding, size_t *out_len)
{
    struct jpeg_decompress_struct d;
    struct jpeg_compress_struct c;
    hi_jerr ed, ec;
    unsigned char *mem = NULL;
    unsigned long mem_len = 0;
    d.err = jpeg_std_error(&ed.pub);
    c.err = jpeg_std_error(&ec.pub);
    ed.pub.error_exit = hi_jerr_exit;
    ec.pub.error_exit = hi_jerr_exit;
    jpeg_create_decompress(&d);
    jpeg_create_compress(&c);
    if (setjmp(ed.jb))
        cr_assert_fail("libjpeg (read) failed while re-coding (coding %d): %s", coding, ed.msg);
    if (setjmp(ec.jb))
        cr_assert_fail("libjpeg (write) failed while re-coding (coding %d): %s", coding, ec.msg);
    jpeg_mem_src(&d, src, (unsigned long)len);
    jpeg_read_header(&d, TRUE);
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&d);
    jpeg_copy_critical_parameters(&d, &c);
    if (coding & HI_PROGRESSIVE)
        jpeg_simple_progression(&c);
    if (coding & HI_ARITHMETIC)
        c.arith_code = TRUE;
    jpeg_mem_dest(&c, &mem, &mem_len);
    jpeg_write_coefficients(&c, coef);
    jpeg_finish_compress(&c);
    jpeg_finish_decompress(&d);
    jpeg_destroy_compress(&c);
    jpeg_destroy_decompress(&d);
    uint8_t *out = malloc(mem_len);
    cr_assert_not_null(out);
    memcpy(out, mem, mem_len);
    free(mem);
    *out_len = mem_len;
    return out;
}

/* Offset of the first SOFn marker's segment (the FF byte), or 0. */
static inline size_t hi_sof_at(const uint8_t *j, size_t len)
{
    for (size_t i = 2; i + 9 < len;) {
        if (j[i] != 0xFF)
            return 0;
        uint8_t m = j[i + 1];
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC)
            return i;
        i += 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
    }
    return 0;
}

/* Make a JPEG's frame header claim w x h (the data stays that of the small
 * image: a 600-byte file that claims 4.3 gigapixels). In place. */
static inline void hi_patch_size(uint8_t *j, size_t len, unsigned w, unsigned h)
{
    size_t s = hi_sof_at(j, len);
    cr_assert(s > 0, "no SOF marker");
    j[s + 5] = (uint8_t)(h >> 8);
    j[s + 6] = (uint8_t)h;
    j[s + 7] = (uint8_t)(w >> 8);
    j[s + 8] = (uint8_t)w;
}

/* --------------------------------------------------------------- PNG */
typedef struct hi_membuf {
    uint8_t *p;
    size_t n, cap;
} hi_membuf;

static inline void hi_png_write(png_structp png, png_bytep data, png_size_t n)
{
    hi_membuf *m = png_get_io_ptr(png);
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
        cr_assert_not_null(m->p);
    }
    memcpy(m->p + m->n, data, n);
    m->n += n;
}

static inline void hi_png_flush(png_structp png)
{
    (void)png;
}

/* libpng's low-level writer: a 16-bit RGB PNG (sRGB chunk) of hi_rgb's
 * pattern (each 8-bit value v stored as v * 257), or an 8-bit palette PNG
 * whose palette holds the 256 grays (pixel value = its gray). malloc'd. */
static inline uint8_t *hi_png(int w, int h, int palette, size_t *len)
{
    hi_membuf m = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    cr_assert(png && info);
    uint8_t *rgb = hi_rgb(w, h, 2);
    size_t rowb = (size_t)w * (palette ? 1 : 6);
    uint8_t *row = malloc(rowb);
    cr_assert_not_null(row);
    if (setjmp(png_jmpbuf(png)))
        cr_assert_fail("libpng failed while writing");
    png_set_write_fn(png, &m, hi_png_write, hi_png_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, palette ? 8 : 16,
                 palette ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_color pal[256];
    if (palette) {
        for (int i = 0; i < 256; i++)
            pal[i].red = pal[i].green = pal[i].blue = (png_byte)i;
        png_set_PLTE(png, info, pal, 256);
    }
    png_set_sRGB(png, info, PNG_sRGB_INTENT_PERCEPTUAL);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const uint8_t *q = rgb + ((size_t)y * w + x) * 3;
            if (palette)
                row[x] = q[0];
            else
                for (int c = 0; c < 3; c++) {
                    row[6 * x + 2 * c] = q[c];     /* big-endian v * 257 = (v, v) */
                    row[6 * x + 2 * c + 1] = q[c];
                }
        }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    free(rgb);
    *len = m.n;
    return m.p;
}

/* Decode any JPEG to RGB (malloc'd) with TurboJPEG; NULL when it fails. */
static inline uint8_t *hi_decode(const uint8_t *j, size_t len, int *w, int *h)
{
    tjhandle tj = tjInitDecompress();
    int ss, cs;
    uint8_t *p = NULL;
    if (tj && tjDecompressHeader3(tj, j, (unsigned long)len, w, h, &ss, &cs) == 0 &&
        (p = malloc((size_t)*w * *h * 3)) &&
        tjDecompress2(tj, j, (unsigned long)len, p, *w, 0, *h, TJPF_RGB, TJFLAG_STOPONWARNING)) {
        free(p);
        p = NULL;
    }
    if (tj)
        tjDestroy(tj);
    return p;
}

#endif

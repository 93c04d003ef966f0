/* tests/hostile_images.h - images that break naive readers, made in the
 * tests by the libraries that real files come from (issue 16): CMYK,
 * progressive, arithmetic-coded and optimized-table JPEGs (libjpeg-turbo's
 * lossless transcoding, as jpegtran does: same coefficients, so they
 * decode to the very pixels of the baseline file), a frame header patched
 * to claim 65500 x 65500, 16-bit and palette PNGs (libpng), truncations;
 * and (issue 26) abbreviated JPEGs, their DHT or DQT segments cut out as
 * Motion-JPEG cameras and Pillow's streamtype=2 write them, and fill bytes
 * put in the entropy-coded data; and the libjpeg encoder (restart markers,
 * arithmetic coding) and a shard writer the decode tests share.
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

#include "records/records.h"
#include "testutil.h"

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

/* TurboJPEG: pix in pixel format pf (TJPF_RGB, TJPF_CMYK, TJPF_GRAY) -> a
 * baseline JPEG at quality q with the standard Huffman tables of T.81
 * Annex K (TurboJPEG does not optimize them), malloc'd. */
static inline uint8_t *hi_jpeg_q(const uint8_t *pix, int w, int h, int pf, int samp, int q,
                                 size_t *len)
{
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    cr_assert_eq(tjCompress2(tj, pix, w, 0, h, pf, &buf, &size, samp, q, 0), 0, "%s",
                 tjGetErrorStr2(tj));
    uint8_t *out = malloc(size);
    cr_assert_not_null(out);
    memcpy(out, buf, size);
    *len = size;
    tjFree(buf);
    tjDestroy(tj);
    return out;
}

/* hi_jpeg_q at quality 90. */
static inline uint8_t *hi_jpeg(const uint8_t *pix, int w, int h, int pf, int samp, size_t *len)
{
    return hi_jpeg_q(pix, w, h, pf, samp, 90, len);
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

typedef enum { HI_PROGRESSIVE = 1, HI_ARITHMETIC = 2, HI_OPTIMIZE = 4 } hi_coding;

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

/* Lossless re-coding of a JPEG (jpegtran -progressive / -arithmetic /
 * -optimize): the same quantized coefficients with another entropy coding
 * (HI_OPTIMIZE: Huffman tables made for this image), so a decoder must
 * give the same pixels. malloc'd. */
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
    if (coding & HI_OPTIMIZE)
        c.optimize_coding = TRUE;
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

/* libjpeg's compressor on RGB (w, h, 3) at quality 90, 4:2:0, with a
 * restart marker every restart_rows MCU rows (0: none) or arithmetic coding
 * (arith). malloc'd (libjpeg's jpeg_mem_dest buffer). */
static inline uint8_t *hi_jpeg_libjpeg(const uint8_t *rgb, int w, int h, int restart_rows,
                                       int arith, size_t *len)
{
    struct jpeg_compress_struct c;
    hi_jerr e;
    c.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = hi_jerr_exit;
    if (setjmp(e.jb))
        cr_assert_fail("libjpeg (write) failed: %s", e.msg);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &out, &n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    c.restart_in_rows = restart_rows;
    c.arith_code = arith ? TRUE : FALSE;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = n;
    return out;
}

/* One TFRecord shard DIR/NAME with its index: record i an image Example of
 * img[i] (len[i] bytes; NULL: empty), label i, format "JPEG". The path,
 * malloc'd. */
static inline char *hi_write_shard(const char *dir, const char *name, const uint8_t *const *img,
                                   const size_t *len, size_t n)
{
    char *path = tu_join(dir, name);
    sl_tfrecord_writer *w;
    cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK, "%s",
                 sl_errmsg());
    sl_example_builder eb;
    sl_example_builder_init(&eb);
    for (size_t i = 0; i < n; i++) {
        sl_image_example ex;
        memset(&ex, 0, sizeof ex);
        ex.image = img[i] ? img[i] : (const uint8_t *)"";
        ex.image_len = len[i];
        ex.label = (int64_t)i;
        ex.format = "JPEG";
        ex.format_len = 4;
        const uint8_t *rec;
        size_t rl;
        cr_assert_eq(sl_image_example_encode(&ex, &eb), SL_OK);
        cr_assert_eq(sl_example_finish(&eb, &rec, &rl), SL_OK);
        cr_assert_eq(sl_tfrecord_writer_write(w, rec, rl), SL_OK);
    }
    sl_example_builder_fini(&eb);
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    return path;
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

/* ------------------------------------------------- abbreviated, fill bytes */

/* Where the marker at j[i] (its FF) ends: past its segment, or for SOS past
 * the entropy-coded data that follows (at the next FF that is not FF 00 or
 * a restart marker). len when it runs off the end. */
static inline size_t hi_segment_end(const uint8_t *j, size_t len, size_t i)
{
    uint8_t m = j[i + 1];
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7))
        return i + 2;
    if (i + 4 > len)
        return len;
    size_t e = i + 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
    if (m != 0xDA)
        return e < len ? e : len;
    while (e + 1 < len && !(j[e] == 0xFF && j[e + 1] != 0x00 && (j[e + 1] < 0xD0 || j[e + 1] > 0xD7)))
        e++;
    return e + 1 < len ? e : len;
}

/* A copy of JPEG j without its segments of marker m (0xC4 DHT, 0xDB DQT):
 * an abbreviated stream, as Motion-JPEG frames (no DHT) and Pillow's
 * streamtype=2 (no tables at all) are. malloc'd. */
static inline uint8_t *hi_strip(const uint8_t *j, size_t len, uint8_t m, size_t *out_len)
{
    *out_len = 0;
    uint8_t *o = malloc(len);
    cr_assert_not_null(o);
    size_t n = 0, cut = 0;
    for (size_t i = 0; i < len;) {
        cr_assert(j[i] == 0xFF && i + 1 < len, "hi_strip: no marker at byte %zu", i);
        size_t e = hi_segment_end(j, len, i);
        if (j[i + 1] == m)
            cut++;
        else
            memcpy(o + n, j + i, e - i), n += e - i;
        i = e;
        if (j[e - 1] == 0xD9 && j[e - 2] == 0xFF)
            break;
    }
    cr_assert(cut > 0, "hi_strip: no FF%02X segment", m);
    *out_len = n;
    return o;
}

/* A copy of JPEG j with one more 0xFF before the first stuffed FF 00 of the
 * entropy-coded data at or after byte `from` (FF FF 00: fill bytes before
 * what is not a marker). malloc'd; NULL if there is no FF 00 there. */
static inline uint8_t *hi_fill_ff00(const uint8_t *j, size_t len, size_t from, size_t *out_len)
{
    *out_len = 0;
    size_t sos = 2;
    while (sos + 1 < len && j[sos + 1] != 0xDA)
        sos = hi_segment_end(j, len, sos);
    size_t at = sos + 2 + ((size_t)j[sos + 2] << 8 | j[sos + 3]);
    at = at > from ? at : from;
    while (at + 1 < len && !(j[at] == 0xFF && j[at + 1] == 0x00))
        at++;
    if (at + 1 >= len)
        return NULL;
    uint8_t *o = malloc(len + 1);
    cr_assert_not_null(o);
    memcpy(o, j, at);
    o[at] = 0xFF;
    memcpy(o + at + 1, j + at, len - at);
    *out_len = len + 1;
    return o;
}

/* A copy of JPEG j with n fill bytes 0xFF before its EOI (allowed before any
 * marker: the same image). j must end with FF D9. malloc'd. */
static inline uint8_t *hi_fill_eoi(const uint8_t *j, size_t len, size_t n, size_t *out_len)
{
    cr_assert(len > 2 && j[len - 2] == 0xFF && j[len - 1] == 0xD9);
    uint8_t *o = malloc(len + n);
    cr_assert_not_null(o);
    memcpy(o, j, len - 2);
    memset(o + len - 2, 0xFF, n);
    memcpy(o + len - 2 + n, j + len - 2, 2);
    *out_len = len + n;
    return o;
}

/* --------------------------------------------------------------- PNG */
/* pix (h, w) in libpng's simplified format (PNG_FORMAT_RGB, _RGBA, _GRAY,
 * ...) -> a PNG by png_image_write_to_memory, malloc'd. */
static inline uint8_t *hi_png_pixels(const uint8_t *pix, int w, int h, png_uint_32 format,
                                     size_t *len)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = format;
    png_alloc_size_t size = 0;
    cr_assert(png_image_write_get_memory_size(img, size, 0, pix, 0, NULL), "%s", img.message);
    uint8_t *out = malloc(size);
    cr_assert_not_null(out);
    cr_assert(png_image_write_to_memory(&img, out, &size, 0, pix, 0, NULL), "%s", img.message);
    *len = size;
    return out;
}

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

/* ------------------------------------------------------------ convert */
/* sl_convert_config.skipped's callback (arg: a hi_skips): the first 16
 * inputs convert skipped and why, and how many. */
typedef struct hi_skips {
    int n;
    char input[16][512], reason[16][512];
} hi_skips;

static inline void hi_on_skip(void *arg, const char *input, const char *reason)
{
    hi_skips *s = arg;
    if (s->n < 16) {
        snprintf(s->input[s->n], sizeof s->input[0], "%s", input);
        snprintf(s->reason[s->n], sizeof s->reason[0], "%s", reason);
    }
    s->n++;
}

/* Assert that an input whose path holds name was listed with a reason
 * that holds why. */
static inline void hi_skips_assert(const hi_skips *s, const char *name, const char *why)
{
    int hit = -1;
    for (int k = 0; k < s->n && k < 16; k++)
        if (strstr(s->input[k], name))
            hit = k;
    cr_assert_geq(hit, 0, "%s is listed as skipped", name);
    cr_assert(strstr(s->reason[hit], why), "%s: reason '%s' lacks '%s'", name, s->reason[hit],
              why);
}

#endif

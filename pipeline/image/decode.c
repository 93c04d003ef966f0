/*
 * pipeline/image/decode.c - ROI JPEG decode: only the pixels a crop needs, at the
 * smallest DCT scale that still covers the output, resized into a batch slot.
 *
 * Why: a training sample uses a random crop (8 % to 100 % of the area) that
 * is then shrunk to 224 x 224. Decoding the whole image at full size and
 * throwing most of it away is the usual cost of an input pipeline. libjpeg
 * (libjpeg-turbo's libjpeg API; TurboJPEG has no partial decode) can do
 * better on three axes:
 *   - DCT scaling: decode at M/8 of the size by running a reduced IDCT per
 *     8x8 block; we take the smallest M at which the scaled crop still has
 *     at least ow x oh pixels, so the resize never enlarges what a full
 *     decode would have shrunk (2/8 at least for chroma subsampled in one
 *     direction only, see min_scale). M is 1, 2, 4 or 8 although libjpeg
 *     takes any M: libjpeg-turbo 2.1 has SIMD IDCTs for those scales only,
 *     and the others are slower than not scaling at all. Whole-image
 *     decodes of the 300-500 px corpus (perf/make-corpus), 4:2:0, this box:
 *     M = 1: 470 us, 2: 580, 3: 720, 4: 650, 5: 1140, 6: 1290, 7: 1690,
 *     8: 810;
 *   - jpeg_crop_scanline: only the iMCU columns that hold the crop are
 *     decoded (the region widens left to an iMCU boundary: the returned
 *     xoffset/width say by how much), plus a column or two so that the
 *     strip's edges, where chroma upsampling lacks a neighbour, stay out of
 *     the crop;
 *   - jpeg_skip_scanlines above the crop (entropy decode only, no IDCT,
 *     upsampling or color conversion), and jpeg_abort_decompress after the
 *     crop's last row: the rows below are never touched.
 * Then sl_resize_rgb_u8 (sl_decode_crop) or sl_resample_sample
 * (sl_decode_crop_sample: the same filter, fused with flip, normalization
 * and layout, straight into a batch slot) maps the crop, in scaled
 * coordinates (bounds x*M/8 rounded to the nearest pixel), to ow x oh:
 * area averaging when that shrinks by 2 or more, bilinear otherwise. The
 * rounding moves the crop's edges by at most half a scaled pixel, which is
 * at most half an output pixel (the scaled crop has at least ow x oh
 * pixels): invisible to a random crop, and under a pixel for the eval
 * center crop.
 *
 * SLUICE_DECODE=full (read once, at sl_decoder_create) takes the plain path
 * instead: decode the whole image at scale 1 to the end (EOI), crop, resize.
 * Tests compare the two; benchmarks time both.
 * sl_decode_crop_sample takes the planar path of decode_yuv.c (Y/Cb/Cr
 * planes resized at their own resolutions, RGB at the output size) unless
 * SLUICE_DECODE is rgb (this file's ROI path to RGB, the reference) or full.
 *
 * Errors: a custom libjpeg error manager longjmps back into this file with
 * the message formatted (libjpeg's default error_exit prints it and ends
 * the process).
 * Warnings (msg_level -1: corrupt entropy data, premature end of file, ...)
 * are errors too, as TurboJPEG's TJFLAG_STOPONWARNING: libjpeg would
 * otherwise fill the damage with gray and carry on, and a training sample
 * of garbage pixels is worse than a skipped one. Two warnings about
 * metadata that never affects pixels (JFIF revision, ICC marker) are
 * allowed. Because the ROI path stops before the end of the data, each
 * stream's marker structure is checked first (sl_jpeg_scan: memchr speed),
 * so a truncated file fails the same way on both paths.
 *
 * Every image decodes as if it were the first (issue 26): libjpeg keeps
 * the Huffman and quantization tables an image defines in the decompress
 * object, for the next image to use if it lacks them (T.81's abbreviated
 * format), so a file without DHT or DQT segments would decode with
 * whatever image the same worker decoded before it, and a batch would
 * depend on thread timing. So each stream's header is read into a new
 * decompress object (fresh_object: jpeg_destroy_decompress, then
 * jpeg_create_decompress; about 0.15 us, against 0.5 us for the header and
 * hundreds for the decode), and sl_jpeg_scan refuses, before libjpeg
 * sees it, a stream whose scans use a table it does not define (but for
 * the standard Huffman tables libjpeg-turbo puts in slots 0 and 1 of a
 * sequential file without DHT, as Motion-JPEG wants) and fill bytes
 * before a stuffed zero, which libjpeg-turbo's two Huffman paths read
 * differently (records/jpeg_scan.c has both stories).
 *
 * The header is parsed once per sample: sl_decoder_header leaves it in the
 * object, and the sl_decode_* call that follows on the same bytes (the map
 * worker's next step, after the crop geometry) continues from it instead
 * of reading it again. The structure check that comes with it
 * (sl_jpeg_scan_restarts) also notes where the restart intervals start,
 * for the planar path's seek (decode_yuv.c, huff.c).
 *
 * Memory: the crop rows go to a scratch buffer that only grows. libjpeg's
 * own pools are allocated by libjpeg (per image, with the object). Images
 * over max_pixels (sl_decoder_set_max_pixels; SL_MAX_PIXELS_DEFAULT) are
 * refused after the header, before any buffer of their size exists
 * (jpeg_start_decompress allocates a progressive file's whole-image
 * coefficients: 2 bytes per sample, so about 3 bytes a pixel at 4:2:0, up
 * to 6 at 4:4:4).
 *
 * Threading: one decoder per thread; distinct decoders are independent.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h> /* JWRN_* message codes */

#include "pipeline/image/image.h"

/* Row pointers handed to jpeg_read_scanlines per call (>= any
 * rec_outbuf_height libjpeg uses). */
#define SL_DECODE_ROWS 16

typedef struct sl_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} sl_jerr;

struct sl_decoder {
    struct jpeg_decompress_struct cinfo;
    sl_jerr jerr;
    int full;                 /* SLUICE_DECODE=full */
    int rgb;                  /* SLUICE_DECODE=rgb: samples without decode_yuv.c */
    uint64_t max_pixels;      /* larger images are refused from the header */
    sl_yuv_buf yuv;           /* decode_yuv.c's planes */
    sl_jpeg_restarts rst;     /* the restart intervals of the stream being decoded */
    uint8_t *buf;             /* crop rows: (rows, row_width, 3) u8 */
    size_t cap;
    /* sl_decoder_header's stream, whose header cinfo holds (NULL: none):
     * the next sl_decode_* call on the same bytes starts from it. */
    const uint8_t *held;
    size_t held_len;
};

/* What one guarded call works on (the arguments of the public function). */
typedef struct sl_decode_job {
    const uint8_t *jpeg;
    size_t len;
    const sl_crop *crop;
    int ow, oh, pitch;
    uint8_t *dst;             /* sl_decode_crop: RGB u8 rows of pitch bytes */
    const sl_out_spec *out;   /* sl_decode_crop_sample: the sample (ow, oh its w, h) */
    const char *fn;           /* the public function, for messages */
    sl_plane_view *pv;        /* sl_decode_crop_planes' outputs */
    int *np;
    int *w, *h;               /* sl_decoder_header's outputs */
} sl_decode_job;

/* ------------------------------------------------------------ error manager */
static void on_error_exit(j_common_ptr c)
{
    sl_jerr *e = (sl_jerr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* libjpeg prints through this; a library stays quiet. */
static void on_output_message(j_common_ptr c)
{
    (void)c;
}

static void on_emit_message(j_common_ptr c, int level)
{
    if (level >= 0) /* trace messages */
        return;
    int code = c->err->msg_code;
    if (code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC) {
        c->err->num_warnings++;
        return;
    }
    on_error_exit(c);
}

/* ------------------------------------------------------------- lifecycle */
int sl_decoder_create(sl_decoder **out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_decoder_create: out is NULL");
    *out = NULL;
    sl_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return sl_fail(SL_ENOMEM, "sl_decoder_create: out of memory");
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error_exit;
    d->jerr.pub.output_message = on_output_message;
    d->jerr.pub.emit_message = on_emit_message;
    if (setjmp(d->jerr.jb)) {
        /* jpeg_create_decompress ran out of memory; destroy copes with a
         * half-made object (it checks cinfo->mem). */
        int rc = sl_fail(SL_ENOMEM, "sl_decoder_create: %s", d->jerr.msg);
        jpeg_destroy_decompress(&d->cinfo);
        free(d);
        return rc;
    }
    jpeg_create_decompress(&d->cinfo);
    const char *mode = getenv("SLUICE_DECODE");
    d->full = mode && strcmp(mode, "full") == 0;
    d->rgb = mode && strcmp(mode, "rgb") == 0;
    const char *huff = getenv("SLUICE_HUFF");
    d->yuv.libjpeg_huff = huff && strcmp(huff, "libjpeg") == 0;
    const char *seek = getenv("SLUICE_SEEK");
    d->yuv.no_seek = seek && strcmp(seek, "off") == 0;
    d->yuv.rst = &d->rst;
    d->max_pixels = SL_MAX_PIXELS_DEFAULT;
    *out = d;
    return SL_OK;
}

void sl_decoder_set_max_pixels(sl_decoder *d, uint64_t n)
{
    if (d)
        d->max_pixels = n ? n : SL_MAX_PIXELS_DEFAULT;
}

void sl_decoder_destroy(sl_decoder *d)
{
    if (!d)
        return;
    jpeg_destroy_decompress(&d->cinfo);
    free(d->buf);
    free(d->yuv.p);
    sl_huff_free(d->yuv.huff);
    sl_jpeg_restarts_free(&d->rst);
    free(d);
}

/* --------------------------------------------------------------- helpers */
/* Make d->buf hold need bytes (contents not kept). */
static int reserve(sl_decoder *d, size_t need)
{
    if (need <= d->cap)
        return SL_OK;
    free(d->buf);
    d->buf = malloc(need);
    d->cap = d->buf ? need : 0;
    if (!d->buf)
        return sl_fail(SL_ENOMEM, "sl_decode_crop: scratch of %zu bytes: out of memory", need);
    return SL_OK;
}

/* Smallest M in {mmin, .., 8} (powers of two, see the file comment) with
 * floor(c*M/8) >= o in both directions; 8 when even the full size is
 * smaller than the output (the resize then enlarges). */
static int pick_scale(int cw, int ch, int ow, int oh, int mmin)
{
    for (int m = mmin; m < 8; m *= 2)
        if ((int64_t)cw * m / 8 >= ow && (int64_t)ch * m / 8 >= oh)
            return m;
    return 8;
}

/* The smallest usable M for this file. At 1/8 libjpeg-turbo turns fancy
 * (interpolating) chroma upsampling off; 4:2:0 does not care, because its
 * chroma IDCT then runs at 2/8 and needs no upsampling, but chroma
 * subsampled in one direction only (4:2:2, 4:4:0, 4:1:1) would be
 * replicated in 16-pixel steps: a mean error of 4-9 levels against a full
 * decode on a smooth test image, instead of < 1 at 2/8. So those start at 2/8. */
static int min_scale(const struct jpeg_decompress_struct *ci)
{
    int mh = 1, mv = 1;
    for (int i = 0; i < ci->num_components; i++) {
        mh = ci->comp_info[i].h_samp_factor > mh ? ci->comp_info[i].h_samp_factor : mh;
        mv = ci->comp_info[i].v_samp_factor > mv ? ci->comp_info[i].v_samp_factor : mv;
    }
    for (int i = 0; i < ci->num_components; i++)
        if (mh * ci->comp_info[i].v_samp_factor != mv * ci->comp_info[i].h_samp_factor)
            return 2;
    return 1;
}

/* A source coordinate at scale m/8, rounded to the nearest pixel. */
static int scale_coord(int v, int m)
{
    return (int)(((int64_t)v * m + 4) / 8);
}

/* A new decompress object in place of the old one: nothing of the last
 * image (its tables above all) reaches the next (see the file comment).
 * Runs under the guard: jpeg_create_decompress out of memory longjmps, and
 * leaves an object that jpeg_abort_decompress and the next
 * jpeg_destroy_decompress take as it is (they check cinfo->mem). */
static void fresh_object(sl_decoder *d)
{
    jpeg_destroy_decompress(&d->cinfo); /* keeps cinfo.err */
    jpeg_create_decompress(&d->cinfo);
}

/* Read the header of the job's stream into a fresh d->cinfo and check what
 * this file can decode; or, once, take the header sl_decoder_header left
 * there for these bytes. Runs under the guard (libjpeg errors longjmp). */
static int read_header(sl_decoder *d, const sl_decode_job *j, const char *fn)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    if (d->held) { /* the public call checked that it is this stream's */
        d->held = NULL;
        return SL_OK;
    }
    fresh_object(d);
    jpeg_mem_src(ci, j->jpeg, (unsigned long)j->len);
    jpeg_read_header(ci, TRUE);
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK)
        return sl_fail(SL_EIMAGE, "%s: CMYK JPEG: not supported", fn);
    if (ci->num_components != 1 && ci->num_components != 3)
        return sl_fail(SL_EIMAGE, "%s: JPEG with %d components: not supported", fn,
                       ci->num_components);
    if ((uint64_t)ci->image_width * ci->image_height > d->max_pixels)
        return sl_fail(SL_EIMAGE, "%s: %ux%u JPEG: more than max_pixels %llu", fn,
                       ci->image_width, ci->image_height, (unsigned long long)d->max_pixels);
    return SL_OK;
}

/* ----------------------------------------------------------------- bodies */
static int header_body(sl_decoder *d, const sl_decode_job *j)
{
    int rc = read_header(d, j, "sl_decoder_header");
    if (rc == SL_OK) {
        *j->w = (int)d->cinfo.image_width;
        *j->h = (int)d->cinfo.image_height;
        d->held = j->jpeg; /* kept for the decode that follows (guarded) */
        d->held_len = j->len;
    }
    return rc;
}

/* Decode the crop (ROI or full path) into d->buf: *src points at its
 * first pixel, (*sh, *sw, 3) u8 with row pitch *sp bytes. */
static int decode_strip(sl_decoder *d, const sl_decode_job *j, const uint8_t **src, int *sw,
                        int *sh, int *sp)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    const sl_crop *c = j->crop;
    int rc = read_header(d, j, j->fn);
    if (rc)
        return rc;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    if (c->x < 0 || c->y < 0 || c->w < 1 || c->h < 1 || c->x > W - c->w || c->y > H - c->h)
        return sl_fail(SL_EINVAL, "%s: crop %dx%d at (%d,%d) outside the %dx%d image", j->fn,
                       c->w, c->h, c->x, c->y, W, H);

    int m = d->full ? 8 : pick_scale(c->w, c->h, j->ow, j->oh, min_scale(ci));
    ci->scale_num = (unsigned)m;
    ci->scale_denom = 8;
    ci->out_color_space = JCS_RGB; /* gray is expanded by the color converter */
    jpeg_start_decompress(ci);
    if (ci->output_components != 3)
        return sl_fail(SL_EIMAGE, "%s: decoder gives %d components, not RGB", j->fn,
                       ci->output_components);

    /* The crop at scale m/8: [sx0, sx1) x [sy0, sy1) in output pixels,
     * at least 1 x 1 and inside the scaled image (ceil(W*m/8) wide). */
    int SW = (int)ci->output_width, SH = (int)ci->output_height;
    int sx0 = scale_coord(c->x, m), sx1 = scale_coord(c->x + c->w, m);
    int sy0 = scale_coord(c->y, m), sy1 = scale_coord(c->y + c->h, m);
    sx0 = sx0 < SW - 1 ? sx0 : SW - 1;
    sy0 = sy0 < SH - 1 ? sy0 : SH - 1;
    sx1 = sx1 > SW ? SW : sx1 <= sx0 ? sx0 + 1 : sx1;
    sy1 = sy1 > SH ? SH : sy1 <= sy0 ? sy0 + 1 : sy1;

    /* Decoded region: columns [xoff, xoff + cols), rows [first, last). */
    JDIMENSION xoff = 0, cols = (JDIMENSION)SW, first = 0, last = (JDIMENSION)SH;
    if (!d->full) {
        /* One column more on the left and two on the right (inside the
         * image): fancy chroma upsampling replicates the strip's edge
         * samples in its first and last columns, which then fall outside
         * the crop, whose pixels are those of a full decode. */
        xoff = (JDIMENSION)(sx0 > 0 ? sx0 - 1 : 0);
        cols = (JDIMENSION)((sx1 + 2 < SW ? sx1 + 2 : SW)) - xoff;
        jpeg_crop_scanline(ci, &xoff, &cols); /* xoff moves left to an iMCU edge */
        first = (JDIMENSION)sy0;
        last = (JDIMENSION)sy1;
    }
    size_t rowb = (size_t)cols * 3;
    if ((rc = reserve(d, rowb * (last - first))) != SL_OK)
        return rc;
    if (first > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(ci, first);
        if (skipped != first)
            return sl_fail(SL_EIMAGE, "%s: skipped %u of %u rows", j->fn, skipped, first);
    }
    for (JDIMENSION y = first; y < last;) {
        JSAMPROW rows[SL_DECODE_ROWS];
        JDIMENSION n = last - y < SL_DECODE_ROWS ? last - y : SL_DECODE_ROWS;
        for (JDIMENSION k = 0; k < n; k++)
            rows[k] = d->buf + (size_t)(y - first + k) * rowb;
        JDIMENSION got = jpeg_read_scanlines(ci, rows, n);
        if (got == 0) /* only a suspending source returns 0; jpeg_mem_src does not */
            return sl_fail(SL_EIMAGE, "%s: no data for row %u", j->fn, y);
        y += got;
    }
    if (d->full)
        jpeg_finish_decompress(ci); /* read to EOI: damage after the crop counts too */

    *src = d->buf + (size_t)(sy0 - (int)first) * rowb + (size_t)(sx0 - (int)xoff) * 3;
    *sw = sx1 - sx0;
    *sh = sy1 - sy0;
    *sp = (int)rowb;
    return SL_OK;
}

/* sl_decode_crop: the strip resized into j->dst. */
static int crop_body(sl_decoder *d, const sl_decode_job *j)
{
    const uint8_t *src;
    int sw, sh, sp;
    int rc = decode_strip(d, j, &src, &sw, &sh, &sp);
    if (rc == SL_OK)
        sl_resize_rgb_u8(src, sw, sh, sp, j->dst, j->ow, j->oh, j->pitch);
    return rc;
}

/* sl_decode_crop_sample: the strip resampled into the sample at j->out. */
static int sample_body(sl_decoder *d, const sl_decode_job *j)
{
    const uint8_t *src;
    int sw, sh, sp, rc;
    if (!d->full && !d->rgb) {
        if ((rc = read_header(d, j, j->fn)) != SL_OK)
            return rc;
        d->yuv.jpeg = j->jpeg;
        d->yuv.len = j->len;
        rc = sl_decode_yuv(&d->cinfo, &d->yuv, j->crop, j->out, j->fn);
        if (rc != SL_ENOTSUP)
            return rc;
        jpeg_abort_decompress(&d->cinfo); /* not YCbCr or gray: the RGB path */
    }
    rc = decode_strip(d, j, &src, &sw, &sh, &sp);
    if (rc == SL_OK)
        sl_resample_sample(src, sw, sh, sp, j->out);
    return rc;
}

/* sl_decode_crop_planes: decode_yuv.c's first half. */
static int planes_body(sl_decoder *d, const sl_decode_job *j)
{
    int rc = read_header(d, j, j->fn);
    d->yuv.jpeg = j->jpeg;
    d->yuv.len = j->len;
    return rc ? rc : sl_decode_yuv_planes(&d->cinfo, &d->yuv, j->crop, j->ow, j->oh, j->pv, j->np,
                                          j->fn);
}

/* Run body with libjpeg errors caught: a longjmp lands here with the
 * message in d->jerr.msg. The object is left idle (reusable) either way,
 * but for a header body leaves held (the header kept for the next call). */
static int guarded(sl_decoder *d, int (*body)(sl_decoder *, const sl_decode_job *),
                   const sl_decode_job *j, const char *fn)
{
    if (setjmp(d->jerr.jb)) {
        d->held = NULL;
        jpeg_abort_decompress(&d->cinfo);
        return sl_fail(SL_EIMAGE, "%s: %s", fn, d->jerr.msg);
    }
    int rc = body(d, j);
    if (rc != SL_OK)
        d->held = NULL;
    if (!d->held)
        jpeg_abort_decompress(&d->cinfo);
    return rc;
}

/* Before a decode of jpeg: SL_OK when d holds its header (from
 * sl_decoder_header, the same pointer and length), else the structure
 * check every stream passes before libjpeg reads it (sl_jpeg_scan). */
static int begin(sl_decoder *d, const uint8_t *jpeg, size_t len, const char *fn)
{
    if (d->held && d->held == jpeg && d->held_len == len)
        return SL_OK;
    d->held = NULL;
    int rc = sl_jpeg_scan_restarts(jpeg, len, NULL, &d->rst);
    return rc ? sl_fail(rc, "%s: %s", fn, sl_errmsg()) : SL_OK;
}

/* ------------------------------------------------------------------- API */
int sl_decoder_header(sl_decoder *d, const uint8_t *jpeg, size_t len, int *w, int *h,
                      unsigned *flags)
{
    if (!d || !w || !h || (!jpeg && len))
        return sl_fail(SL_EINVAL, "sl_decoder_header: NULL argument");
    if (flags)
        *flags = 0;
    d->held = NULL; /* this stream's header is read again, from a fresh object */
    if (len == 0)
        return sl_fail(SL_EIMAGE, "sl_decoder_header: empty JPEG");
    unsigned fl = 0;
    int rc = sl_jpeg_scan_restarts(jpeg, len, &fl, &d->rst);
    if (rc)
        return sl_fail(rc, "sl_decoder_header: %s", sl_errmsg());
    sl_decode_job j = {.jpeg = jpeg, .len = len, .w = w, .h = h};
    rc = guarded(d, header_body, &j, "sl_decoder_header");
    if (rc == SL_OK && flags)
        *flags = fl;
    return rc;
}

int sl_decode_crop(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop, int ow,
                   int oh, uint8_t *dst, int pitch)
{
    if (!d || !crop || !dst || (!jpeg && len))
        return sl_fail(SL_EINVAL, "sl_decode_crop: NULL argument");
    if (ow < 1 || oh < 1 || ow > INT32_MAX / 3 || pitch < ow * 3)
        return sl_fail(SL_EINVAL, "sl_decode_crop: output %dx%d with pitch %d", ow, oh, pitch);
    int rc = begin(d, jpeg, len, "sl_decode_crop");
    if (rc)
        return rc;
    sl_decode_job j = {.jpeg = jpeg, .len = len, .crop = crop, .ow = ow, .oh = oh,
                       .pitch = pitch, .dst = dst, .fn = "sl_decode_crop"};
    return guarded(d, crop_body, &j, "sl_decode_crop");
}

int sl_decode_crop_sample(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop,
                          const sl_out_spec *out)
{
    if (!d || !crop || !out || !out->dst || (!jpeg && len) ||
        (out->layout != SL_LAYOUT_NHWC_U8 && (!out->mean || !out->std)))
        return sl_fail(SL_EINVAL, "sl_decode_crop_sample: NULL argument");
    int ow = out->w, oh = out->h;
    if (ow < 1 || oh < 1 || ow > INT32_MAX / 3 || (unsigned)out->layout > SL_LAYOUT_NCHW_F32)
        return sl_fail(SL_EINVAL, "sl_decode_crop_sample: output %dx%d in layout %d", ow, oh,
                       (int)out->layout);
    int rc = begin(d, jpeg, len, "sl_decode_crop_sample");
    if (rc)
        return rc;
    sl_decode_job j = {.jpeg = jpeg, .len = len, .crop = crop, .ow = ow, .oh = oh, .out = out,
                       .fn = "sl_decode_crop_sample"};
    return guarded(d, sample_body, &j, "sl_decode_crop_sample");
}

int sl_decode_crop_planes(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop,
                          int ow, int oh, sl_plane_view pv[3], int *np)
{
    if (!d || !crop || !pv || !np || (!jpeg && len) || ow < 1 || oh < 1)
        return sl_fail(SL_EINVAL, "sl_decode_crop_planes: bad argument");
    int rc = begin(d, jpeg, len, "sl_decode_crop_planes");
    if (rc)
        return rc;
    sl_decode_job j = {.jpeg = jpeg, .len = len, .crop = crop, .ow = ow, .oh = oh, .pv = pv,
                       .np = np, .fn = "sl_decode_crop_planes"};
    return guarded(d, planes_body, &j, "sl_decode_crop_planes");
}

/*
 * pipeline/image/decode_yuv.c - decode less than a full decode: the crop's rows
 * as Y, Cb, Cr planes, each resized at its own resolution, RGB only at the
 * output size.
 *
 * Why: after DCT scaling, the column crop and the row skip (decode.c), a
 * libjpeg decode to RGB still upsamples the chroma of every crop pixel
 * (fancy upsampling: a triangle filter, 4:2:0's two chroma planes to full
 * size) and converts every crop pixel from YCbCr, and the resize then reads
 * three values per crop pixel. A training crop is about twice as large as
 * its 224 x 224 output on 500 x 375 images, and larger on bigger ones. Here
 * libjpeg stops after the IDCT (raw-data output: jpeg_read_raw_data gives
 * the planes as they are stored, 1.5 values per pixel for 4:2:0), and
 * sl_resample_planes (resample_planes.c) resizes Y from the crop's luma
 * window and Cb, Cr from the same window in chroma coordinates, which need
 * not fall on whole chroma samples (an odd x is half a sample) and
 * converts to RGB at 224 x 224: the chroma is "upsampled" by the
 * output's bilinear taps and the conversion runs on the output's pixels
 * only.
 *
 * Cropping in raw mode: libjpeg's jpeg_crop_scanline and
 * jpeg_skip_scanlines refuse raw-data output (global state DSTATE_RAW_OK;
 * libjpeg-turbo 2.1 jdapistd.c). What jpeg_crop_scanline does to the
 * coefficient controller is to set four fields of the decompressor's master
 * record (jpegint.h, struct jpeg_decomp_master, libjpeg-turbo >= 1.5):
 * first_iMCU_col / last_iMCU_col (single-scan files: jdcoefct.c's
 * decompress_onepass IDCTs only the MCU columns in that range, writing the
 * first at column 0 of the output) and first_MCU_col[] / last_MCU_col[]
 * (multi-scan files: decompress_data's block range per component). We set
 * them the same way, for the crop's columns. Rows above the crop are read
 * with an empty range (first > last): the entropy decoder runs, no IDCT and
 * nothing is written, which is what jpeg_skip_scanlines does. After the
 * crop's last iMCU row the caller's jpeg_abort_decompress drops the rest.
 * (An iMCU column is max_h_samp_factor x 8 pixels at scale 1, 16 for 4:2:0.)
 * Where a future libjpeg changes these fields, tests/pipeline/test_decode_yuv.c
 * fails (the planar output is compared against the RGB path).
 *
 * The strip is widened by SL_YUV_MARGIN scaled pixels on each side (inside
 * the image) before rounding out to iMCU columns and rows, so each plane's
 * bilinear taps at the crop's edges find their neighbours in the strip.
 * DCT scaling picks the smallest M/8 (M = 1, 2, 4, 8) at which the scaled
 * crop still covers the output, as decode.c, and from 2/8 up for chroma
 * subsampled in one direction only (4:2:2, 4:4:0): at 1/8 their chroma
 * planes have half the output's resolution in that direction (libjpeg
 * scales a chroma IDCT up only where both directions allow), which costs
 * a level of error against a full decode on photographs (measured by
 * tests/pipeline/test_decode_yuv.c).
 *
 * Differences from the RGB path (tests/pipeline/test_decode_yuv.c bounds
 * them on photographs): the chroma filter (bilinear from the chroma samples
 * where the RGB path takes libjpeg's fancy upsampling, then the resize),
 * colour conversion in float after the resize instead of libjpeg's 16-bit
 * fixed point before it, and the clamp to 0..255 after the resize (a
 * saturated colour is averaged before clamping).
 *
 * Entropy decoding: for baseline single-scan files pipeline/image/huff.c's
 * decoder replaces libjpeg's (the same coefficients; it only reads past
 * the MCUs outside the strip's columns and above it), installed after
 * jpeg_start_decompress; SLUICE_HUFF=libjpeg (buf->libjpeg_huff) keeps
 * libjpeg's. A baseline file with restart markers (sluice convert
 * --restart, or a camera's) is read only in the restart intervals that
 * hold the strip, by either decoder (sl_huff_seek); the iMCU rows before
 * the first of them are passed over without a call (pass_rows), the
 * others cost a call per MCU that returns at once. SLUICE_SEEK=off
 * (buf->no_seek) decodes such files from the start with libjpeg's
 * decoder, as before restart markers were used.
 *
 * Files that are not YCbCr or gray (Adobe RGB-transform JPEGs) return
 * SL_ENOTSUP so decode.c takes the RGB path.
 *
 * Memory: the planes of the strip go to buf (grows, never shrinks); the
 * resize's scratch is on the stack up to resample_int.h's limit.
 *
 * Threading: reentrant on distinct decompress objects and buffers.
 */
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jpegint.h> /* struct jpeg_decomp_master: the crop columns */

#include "pipeline/image/image.h"

#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 1005000
#error "decode_yuv.c needs libjpeg-turbo >= 1.5 (jpeg_decomp_master's crop fields)"
#endif

/* Scaled luma pixels kept beyond the crop on each side (>= 2 chroma
 * samples of 4:2:0 for the bilinear taps). */
#define SL_YUV_MARGIN 4

/* Smallest M in {mmin, .., 8} with floor(c*M/8) >= o in both directions. */
static int yuv_scale(int cw, int ch, int ow, int oh, int mmin)
{
    for (int m = mmin; m < 8; m *= 2)
        if ((int64_t)cw * m / 8 >= ow && (int64_t)ch * m / 8 >= oh)
            return m;
    return 8;
}

/* Grow buf to need bytes (contents not kept). */
static int yuv_reserve(sl_yuv_buf *b, size_t need, const char *fn)
{
    if (need <= b->cap)
        return SL_OK;
    free(b->p);
    b->p = malloc(need);
    b->cap = b->p ? need : 0;
    if (!b->p)
        return sl_fail(SL_ENOMEM, "%s: planes of %zu bytes: out of memory", fn, need);
    return SL_OK;
}

/* Decode only MCU columns [first, last] (in iMCU columns of the scan) from
 * the next iMCU row on; first > last: none (entropy decoding only). The
 * fields and arithmetic of jpeg_crop_scanline (jdapistd.c). */
static void set_columns(struct jpeg_decompress_struct *ci, JDIMENSION first, JDIMENSION last,
                        int single)
{
    struct jpeg_decomp_master *m = ci->master;
    m->first_iMCU_col = first;
    m->last_iMCU_col = last;
    for (int c = 0; c < ci->num_components; c++) {
        JDIMENSION hsf = single ? 1 : (JDIMENSION)ci->comp_info[c].h_samp_factor;
        if (first > last) {
            m->first_MCU_col[c] = 1;
            m->last_MCU_col[c] = 0;
        } else {
            m->first_MCU_col[c] = first * hsf;
            m->last_MCU_col[c] = (last + 1) * hsf - 1;
        }
    }
}

/* Pass over iMCU rows [0, n) without calling the coefficient controller,
 * when huff.c's seek starts after them: what decompress_onepass does at
 * the end of a row is to advance input_iMCU_row and output_iMCU_row and
 * call start_iMCU_row, which for one MCU row per iMCU row (sl_huff_seek
 * asks no more) sets nothing that changes from row to row; and
 * jpeg_read_raw_data adds its rows to output_scanline. */
static void pass_rows(struct jpeg_decompress_struct *ci, JDIMENSION n, int ah)
{
    ci->input_iMCU_row += n;
    ci->output_iMCU_row += n;
    ci->output_scanline += n * (JDIMENSION)ah;
}

int sl_decode_yuv_planes(struct jpeg_decompress_struct *ci, sl_yuv_buf *buf, const sl_crop *c,
                         int ow, int oh, sl_plane_view pv[3], int *np, const char *fn)
{
    int nc = ci->num_components;
    if (!((nc == 3 && ci->jpeg_color_space == JCS_YCbCr) ||
          (nc == 1 && ci->jpeg_color_space == JCS_GRAYSCALE)))
        return sl_fail(SL_ENOTSUP, "%s: %d components in colour space %d: not YCbCr or gray",
                       fn, nc, (int)ci->jpeg_color_space);
    int W = (int)ci->image_width, H = (int)ci->image_height;
    if (c->x < 0 || c->y < 0 || c->w < 1 || c->h < 1 || c->x > W - c->w || c->y > H - c->h)
        return sl_fail(SL_EINVAL, "%s: crop %dx%d at (%d,%d) outside the %dx%d image", fn, c->w,
                       c->h, c->x, c->y, W, H);

    int mh = ci->max_h_samp_factor, mv = ci->max_v_samp_factor, mmin = 1;
    for (int k = 0; k < nc; k++) /* chroma subsampled in one direction only */
        if (mh * ci->comp_info[k].v_samp_factor != mv * ci->comp_info[k].h_samp_factor)
            mmin = 2;
    int m = yuv_scale(c->w, c->h, ow, oh, mmin);
    ci->scale_num = (unsigned)m;
    ci->scale_denom = 8;
    ci->raw_data_out = TRUE;
    jpeg_start_decompress(ci);

    /* iMCU geometry in scaled luma pixels (jpeg_crop_scanline's align). */
    int single = ci->comps_in_scan == 1 && nc == 1;
    int mdct = ci->min_DCT_scaled_size;
    int aw = single ? mdct : mdct * ci->max_h_samp_factor;
    int ah = mdct * ci->max_v_samp_factor; /* rows per jpeg_read_raw_data call */
    int SW = (int)ci->output_width, SH = (int)ci->output_height;
    /* The crop at scale m/8, widened by the margin, in scaled pixels. */
    double sx0 = c->x * m / 8.0, sx1 = (c->x + c->w) * m / 8.0;
    double sy0 = c->y * m / 8.0, sy1 = (c->y + c->h) * m / 8.0;
    int px0 = (int)sx0 - SL_YUV_MARGIN, px1 = (int)sx1 + 1 + SL_YUV_MARGIN;
    int py0 = (int)sy0 - SL_YUV_MARGIN, py1 = (int)sy1 + 1 + SL_YUV_MARGIN;
    px0 = px0 < 0 ? 0 : px0;
    py0 = py0 < 0 ? 0 : py0;
    px1 = px1 > SW ? SW : px1;
    py1 = py1 > SH ? SH : py1;
    JDIMENSION col0 = (JDIMENSION)(px0 / aw), col1 = (JDIMENSION)((px1 - 1) / aw);
    JDIMENSION row0 = (JDIMENSION)(py0 / ah), row1 = (JDIMENSION)((py1 - 1) / ah) + 1;
    if (row1 > ci->total_iMCU_rows)
        row1 = ci->total_iMCU_rows;
    int ncols = (int)(col1 - col0 + 1), nrows = (int)(row1 - row0);

    /* Per component: strip size and offset in its own pixels, where its
     * data goes in buf, and the row pointers for one iMCU row. */
    int pw[3], ph[3], rows_per[3], ox[3], oy[3];
    size_t at[3], need = 0;
    for (int k = 0; k < nc; k++) {
        const jpeg_component_info *cp = &ci->comp_info[k];
        int cdct = cp->DCT_scaled_size;
        int ux = single ? cdct : cp->h_samp_factor * cdct; /* its pixels per iMCU column */
        rows_per[k] = cp->v_samp_factor * cdct;
        if (single)
            rows_per[k] = ah;
        pw[k] = ncols * ux;
        ph[k] = nrows * rows_per[k];
        ox[k] = (int)col0 * ux;
        oy[k] = (int)row0 * rows_per[k];
        at[k] = need;
        need += (size_t)pw[k] * ph[k];
    }
    /* + one iMCU row of scratch for the skipped rows' pointers (never written) */
    size_t skip_at = need;
    int skip_rows = 0;
    for (int k = 0; k < nc; k++)
        skip_rows = rows_per[k] > skip_rows ? rows_per[k] : skip_rows;
    need += (size_t)skip_rows * (pw[0] > 0 ? pw[0] : 1);
    int rc = yuv_reserve(buf, need, fn);
    if (rc)
        return rc;

    JSAMPROW ptrs[3][4 * DCTSIZE];
    JSAMPARRAY planes[3] = {ptrs[0], ptrs[1], ptrs[2]};
    for (int k = 0; k < nc; k++)
        if (rows_per[k] > 4 * DCTSIZE)
            return sl_fail(SL_EIMAGE, "%s: component %d: %d rows per iMCU row", fn, k,
                           rows_per[k]);
    /* The entropy decoder of huff.c where it applies (its comment); with
     * restart markers, only the intervals the strip needs, from the first
     * of them (rows before it are not even entropy-decoded). */
    JDIMENSION from = 0;
    rc = SL_ENOTSUP;
    if (ci->restart_interval && !buf->no_seek && buf->rst) {
        sl_huff_plan plan = {.base = buf->jpeg, .len = buf->len, .rst = buf->rst, .row0 = row0,
                             .row1 = row1, .col0 = col0, .col1 = col1};
        rc = sl_huff_seek(ci, &buf->huff, &plan, buf->libjpeg_huff, &from);
    }
    if (rc == SL_ENOTSUP && !buf->libjpeg_huff)
        rc = sl_huff_install(ci, &buf->huff);
    if (rc == SL_ENOMEM)
        return rc;
    if (from > 0 && from <= row0)
        pass_rows(ci, from, ah);
    else
        from = 0;
    /* Rows above the strip: entropy decoding only (or, seeking, nothing
     * before the first interval it needs). */
    set_columns(ci, 1, 0, single);
    for (int k = 0; k < nc; k++)
        for (int r = 0; r < rows_per[k]; r++)
            ptrs[k][r] = buf->p + skip_at;
    for (JDIMENSION r = from; r < row0; r++)
        if (jpeg_read_raw_data(ci, planes, (JDIMENSION)ah) == 0)
            return sl_fail(SL_EIMAGE, "%s: no data for iMCU row %u", fn, r);
    /* The strip's rows, its columns only. */
    set_columns(ci, col0, col1, single);
    for (int r = 0; r < nrows; r++) {
        for (int k = 0; k < nc; k++)
            for (int i = 0; i < rows_per[k]; i++)
                ptrs[k][i] = buf->p + at[k] + (size_t)(r * rows_per[k] + i) * pw[k];
        if (jpeg_read_raw_data(ci, planes, (JDIMENSION)ah) == 0)
            return sl_fail(SL_EIMAGE, "%s: no data for iMCU row %u", fn, row0 + (unsigned)r);
    }

    /* The planes' valid pixels and the crop's window in each. */
    for (int k = 0; k < nc; k++) {
        const jpeg_component_info *cp = &ci->comp_info[k];
        int cdct = cp->DCT_scaled_size;
        /* its pixels per source pixel: downsampled_width = ceil(W * fx) */
        double fx = single ? cdct / 8.0
                           : (double)cp->h_samp_factor * cdct / (ci->max_h_samp_factor * 8.0);
        double fy = single ? cdct / 8.0
                           : (double)cp->v_samp_factor * cdct / (ci->max_v_samp_factor * 8.0);
        int vw = (int)cp->downsampled_width - ox[k], vh = (int)cp->downsampled_height - oy[k];
        pv[k].p = buf->p + at[k];
        pv[k].pitch = pw[k];
        pv[k].w = vw < pw[k] ? vw : pw[k];
        pv[k].h = vh < ph[k] ? vh : ph[k];
        pv[k].x0 = c->x * fx - ox[k];
        pv[k].y0 = c->y * fy - oy[k];
        pv[k].cw = c->w * fx;
        pv[k].ch = c->h * fy;
        /* float slack at the image's far edges */
        if (pv[k].x0 + pv[k].cw > pv[k].w)
            pv[k].cw = pv[k].w - pv[k].x0;
        if (pv[k].y0 + pv[k].ch > pv[k].h)
            pv[k].ch = pv[k].h - pv[k].y0;
        if (pv[k].w < 1 || pv[k].h < 1 || pv[k].x0 < 0 || pv[k].y0 < 0 || !(pv[k].cw > 0) ||
            !(pv[k].ch > 0))
            return sl_fail(SL_EIMAGE, "%s: component %d: crop window outside its %dx%d strip", fn,
                           k, pv[k].w, pv[k].h);
    }
    *np = nc;
    return SL_OK;
}

int sl_decode_yuv(struct jpeg_decompress_struct *ci, sl_yuv_buf *buf, const sl_crop *c,
                  const sl_out_spec *out, const char *fn)
{
    sl_plane_view pv[3];
    int np = 0;
    int rc = sl_decode_yuv_planes(ci, buf, c, out->w, out->h, pv, &np, fn);
    if (rc)
        return rc;
    rc = sl_resample_planes(pv, np, out);
    if (rc)
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    return SL_OK;
}

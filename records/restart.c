/*
 * records/restart.c - add restart markers to a JPEG losslessly: the
 * stored DCT coefficients read and written again with a restart interval,
 * no IDCT, no pixel changes (what `jpegtran -restart N -optimize -copy
 * all` does, as a library call per image).
 *
 * Why: a baseline JPEG's entropy-coded data can only be read from its
 * start, because each block's DC coefficient is coded as the difference
 * from the block before it. A restart marker (RST0..7, T.81 B.2.1) resets
 * those predictions and byte-aligns the data, so a decoder that knows
 * where an interval starts can begin there. The pipeline
 * (pipeline/image/huff.c) then entropy-decodes only the intervals a crop covers
 * instead of every MCU row above the crop's bottom edge.
 *
 * How (libjpeg's transcoding API, jctrans.c / jdtrans.c):
 * jpeg_read_coefficients reads the coefficients of every scan into virtual
 * block arrays; jpeg_copy_critical_parameters gives the compressor the
 * source's size, sampling, component ids and quantization tables;
 * jpeg_write_coefficients writes them as one interleaved baseline scan with
 * restart_interval MCUs (or restart_in_rows MCU rows) per interval.
 * Huffman tables: the source's own where they can code the rewrite (a
 * sequential one-scan file whose DC tables hold all 12 categories, as the
 * standard tables of cameras, cjpeg and TurboJPEG do: the DC of an
 * interval's first block is coded from 0 after a marker, and libjpeg's
 * encoder does not check for a missing code, jchuff.c emits it as zero
 * bits), so the entropy-coded data is the source's but for the markers,
 * their padding and those DC codes; otherwise tables optimized for the
 * image (optimize_coding: the coefficients gathered once for statistics,
 * then coded, as `jpegtran -optimize`). Keeping them measured faster to
 * write and, in the pipeline, to read (huff.c builds its lookup tables
 * once for files that share tables): perf/RESULTS.md, "Issue 41".
 * SLUICE_RESTART_TABLES=optimize (read at create) optimizes always.
 *
 * Pixels: the decoded pixels depend only on the coefficients, the
 * quantization tables, the sampling and the colour interpretation, all of
 * which are kept; every APPn and COM segment is copied (EXIF, ICC), the
 * JFIF and Adobe segments are written again by libjpeg exactly when the
 * source had them (so a decoder infers the same colour space).
 * tests/records/test_restart.c decodes both files and compares the
 * pixels on a corpus of many encoders.
 *
 * Progressive (and arithmetic-coded, and multi-scan sequential) files
 * become baseline: one sequential Huffman scan is what the pipeline can
 * seek in (its Huffman decoder reads baseline scans; a progressive file
 * needs every scan of the whole image before any pixel is known, so
 * restart markers there would save nothing). Made baseline, a complete
 * progressive file decodes to the same pixels, since libjpeg decodes the
 * same coefficients with the same IDCT. One exception is kept as it is:
 * a progressive file whose coefficients are not all known to their last
 * bit (a scan script that stops early) is decoded by libjpeg with block
 * smoothing (jdcoefct.c's smoothing_ok: coef_bits of the first 9 AC
 * coefficients not 0), which a baseline file never gets.
 *
 * Kept as they are (*out = the input, info->rewritten 0, info->why says
 * why): a file with a restart interval already; 12-bit data; a progressive
 * file as above; a file libjpeg decodes with a warning (damaged data: the
 * pipeline refuses it, and a rewrite would make the damage look whole);
 * anything libjpeg cannot transcode (a quantization table slot reused with
 * other values). Only running out of memory is an error.
 *
 * Memory: libjpeg's whole-image coefficient arrays (2 bytes a coefficient:
 * about 3 bytes a pixel at 4:2:0, 6 at 4:4:4), freed after each image; the
 * output buffer grows and is kept.
 *
 * Threading: one restarter per thread.
 */
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "records_int.h"

/* The default interval (SL_RESTART_AUTO): one marker every
 * max(RST_AUTO_MIN, ceil(MCUs per row / RST_AUTO_PER_ROW)) MCUs: every MCU
 * row cut into about RST_AUTO_PER_ROW intervals whatever the image's
 * width, but none shorter than RST_AUTO_MIN MCUs (on 500-px images 2 MCUs
 * decode no faster than 4 and cost twice the marker bytes).
 * perf/RESULTS.md ("Issue 41") has the measurements that chose it. */
#define RST_AUTO_PER_ROW 16
#define RST_AUTO_MIN 4

typedef struct rst_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warned;              /* a warning stopped the rewrite: keep the file */
    char msg[JMSG_LENGTH_MAX];
} rst_err;

struct sl_jpeg_restarter {
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    rst_err err;             /* both objects' */
    struct jpeg_destination_mgr dm;
    uint8_t *out;            /* the rewritten file; grows, kept */
    size_t cap;
    char why[JMSG_LENGTH_MAX + 64];
    int keep_tables;         /* the source's tables where they fit (see the file comment) */
};

/* ------------------------------------------------------- error manager */
static void on_error_exit(j_common_ptr c)
{
    rst_err *e = (rst_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void on_output_message(j_common_ptr c)
{
    (void)c;
}

/* Warnings (corrupt data, ...) stop the rewrite too, as they stop the
 * pipeline's decode (pipeline/image/decode.c): the two metadata warnings it
 * allows are allowed here. */
static void on_emit_message(j_common_ptr c, int level)
{
    if (level >= 0)
        return;
    int code = c->err->msg_code;
    if (code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC)
        return;
    ((rst_err *)c->err)->warned = 1;
    on_error_exit(c);
}

/* ---------------------------------------------- destination: r->out */
static int grow_out(sl_jpeg_restarter *r, size_t need)
{
    if (need <= r->cap)
        return 1;
    size_t c = r->cap ? r->cap : 65536;
    while (c < need)
        c *= 2;
    uint8_t *p = realloc(r->out, c);
    if (!p)
        return 0;
    r->out = p;
    r->cap = c;
    return 1;
}

static sl_jpeg_restarter *of_dst(j_compress_ptr c)
{
    return (sl_jpeg_restarter *)((char *)c - offsetof(sl_jpeg_restarter, dst));
}

static void dm_init(j_compress_ptr c)
{
    sl_jpeg_restarter *r = of_dst(c);
    c->dest->next_output_byte = r->out;
    c->dest->free_in_buffer = r->cap;
}

/* libjpeg filled the buffer: double it, go on after what is there. */
static boolean dm_empty(j_compress_ptr c)
{
    sl_jpeg_restarter *r = of_dst(c);
    size_t used = r->cap;
    if (!grow_out(r, used * 2))
        ERREXIT1(c, JERR_OUT_OF_MEMORY, 99);
    c->dest->next_output_byte = r->out + used;
    c->dest->free_in_buffer = r->cap - used;
    return TRUE;
}

static void dm_term(j_compress_ptr c)
{
    (void)c;
}

/* ----------------------------------------------------------- lifecycle */
int sl_jpeg_restarter_create(sl_jpeg_restarter **out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_jpeg_restarter_create: out is NULL");
    *out = NULL;
    sl_jpeg_restarter *r = calloc(1, sizeof *r);
    if (!r)
        return sl_fail(SL_ENOMEM, "sl_jpeg_restarter_create: out of memory");
    r->src.err = jpeg_std_error(&r->err.pub);
    r->dst.err = &r->err.pub;
    r->err.pub.error_exit = on_error_exit;
    r->err.pub.output_message = on_output_message;
    r->err.pub.emit_message = on_emit_message;
    r->dm.init_destination = dm_init;
    r->dm.empty_output_buffer = dm_empty;
    r->dm.term_destination = dm_term;
    const char *tables = getenv("SLUICE_RESTART_TABLES"); /* a measurement switch */
    r->keep_tables = !(tables && !strcmp(tables, "optimize"));
    if (setjmp(r->err.jb)) {
        int rc = sl_fail(SL_ENOMEM, "sl_jpeg_restarter_create: %s", r->err.msg);
        jpeg_destroy_decompress(&r->src);
        jpeg_destroy_compress(&r->dst);
        free(r);
        return rc;
    }
    jpeg_create_decompress(&r->src);
    jpeg_create_compress(&r->dst);
    if (!grow_out(r, 65536)) {
        sl_jpeg_restarter_destroy(r);
        return sl_fail(SL_ENOMEM, "sl_jpeg_restarter_create: out of memory");
    }
    *out = r;
    return SL_OK;
}

void sl_jpeg_restarter_destroy(sl_jpeg_restarter *r)
{
    if (!r)
        return;
    jpeg_destroy_decompress(&r->src);
    jpeg_destroy_compress(&r->dst);
    free(r->out);
    free(r);
}

/* ------------------------------------------------------------ helpers */
/* Would libjpeg decode this progressive file with block smoothing
 * (jdcoefct.c's smoothing_ok, once every scan is in)? Then a baseline
 * copy would not give its pixels. */
static int smoothed(const struct jpeg_decompress_struct *s)
{
    if (!s->progressive_mode || !s->coef_bits)
        return 0;
    for (int c = 0; c < s->num_components; c++)
        for (int k = 1; k < 10; k++) /* SAVED_COEFS - 1 AC coefficients */
            if (s->coef_bits[c][k] != 0)
                return 1;
    return 0;
}

/* MCUs per row of the one scan the output has (jcmaster.c's
 * per_scan_setup): blocks of the one component, or MCUs of max_h x 8. */
static unsigned mcus_per_row(const struct jpeg_decompress_struct *s)
{
    unsigned w = s->image_width;
    if (s->num_components == 1)
        return (w + 7) / 8;
    unsigned step = 8u * (unsigned)s->max_h_samp_factor;
    return (w + step - 1) / step;
}

/* Can the source's own Huffman tables code the rewrite? Its AC symbols are
 * the source's (a block's AC coefficients are coded alone); its DC
 * differences are too, but for the first block of each component in an
 * interval, coded from 0 after a marker: so every DC table used must hold
 * all 12 categories of 8-bit data (Annex K.3's standard tables do). A
 * sequential Huffman file of one scan only (a progressive or multi-scan
 * file's tables are per scan). */
static int tables_fit(const struct jpeg_decompress_struct *s)
{
    if (s->progressive_mode || s->arith_code || s->input_scan_number != 1 ||
        s->comps_in_scan != s->num_components)
        return 0;
    for (int c = 0; c < s->num_components; c++) {
        int dt = s->comp_info[c].dc_tbl_no, at = s->comp_info[c].ac_tbl_no;
        if (dt < 0 || dt >= NUM_HUFF_TBLS || at < 0 || at >= NUM_HUFF_TBLS ||
            !s->dc_huff_tbl_ptrs[dt] || !s->ac_huff_tbl_ptrs[at])
            return 0;
        const JHUFF_TBL *t = s->dc_huff_tbl_ptrs[dt];
        unsigned have = 0, n = 0;
        for (int l = 1; l <= 16; l++)
            n += t->bits[l];
        for (unsigned i = 0; i < n && i < 256; i++)
            if (t->huffval[i] < 12)
                have |= 1u << t->huffval[i];
        if (have != 0xFFFu)
            return 0;
    }
    return 1;
}

/* The source's Huffman tables and their assignment, for the compressor
 * (after jpeg_copy_critical_parameters, which set the standard ones). */
static void copy_tables(j_compress_ptr d, const struct jpeg_decompress_struct *s)
{
    for (int t = 0; t < NUM_HUFF_TBLS; t++) {
        JHUFF_TBL *const *src[2] = {&s->dc_huff_tbl_ptrs[t], &s->ac_huff_tbl_ptrs[t]};
        JHUFF_TBL **dst[2] = {&d->dc_huff_tbl_ptrs[t], &d->ac_huff_tbl_ptrs[t]};
        for (int k = 0; k < 2; k++) {
            if (!*src[k])
                continue;
            if (!*dst[k])
                *dst[k] = jpeg_alloc_huff_table((j_common_ptr)d);
            memcpy((*dst[k])->bits, (*src[k])->bits, sizeof (*dst[k])->bits);
            memcpy((*dst[k])->huffval, (*src[k])->huffval, sizeof (*dst[k])->huffval);
            (*dst[k])->sent_table = FALSE;
        }
    }
    for (int c = 0; c < s->num_components; c++) {
        d->comp_info[c].dc_tbl_no = s->comp_info[c].dc_tbl_no;
        d->comp_info[c].ac_tbl_no = s->comp_info[c].ac_tbl_no;
    }
}

/* Copy the saved APPn and COM segments (jpegtran's jcopy_markers_execute:
 * libjpeg writes JFIF and Adobe segments itself when asked). */
static void copy_markers(sl_jpeg_restarter *r)
{
    for (jpeg_saved_marker_ptr m = r->src.marker_list; m; m = m->next) {
        if (r->dst.write_JFIF_header && m->marker == JPEG_APP0 && m->data_length >= 5 &&
            !memcmp(m->data, "JFIF", 5))
            continue;
        if (r->dst.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
            !memcmp(m->data, "Adobe", 5))
            continue;
        jpeg_write_marker(&r->dst, m->marker, m->data, m->data_length);
    }
}

static int kept(sl_jpeg_restarter *r, const uint8_t *jpeg, size_t len, const uint8_t **out,
                size_t *out_len, sl_restart_info *info, const char *why)
{
    snprintf(r->why, sizeof r->why, "%s", why);
    info->why = r->why;
    *out = jpeg;
    *out_len = len;
    return SL_OK;
}

/* What one call works on (sl_jpeg_restart's arguments). */
typedef struct rst_job {
    const uint8_t *jpeg;
    size_t len;
    unsigned mcus, rows;
    const uint8_t **out;
    size_t *out_len;
    sl_restart_info *info;
} rst_job;

static int keep_as_is(sl_jpeg_restarter *r, const rst_job *j, const char *why)
{
    jpeg_abort_decompress(&r->src);
    return kept(r, j->jpeg, j->len, j->out, j->out_len, j->info, why);
}

/* The rewrite; libjpeg errors longjmp out to guarded(). */
static int body(sl_jpeg_restarter *r, const rst_job *j)
{
    struct jpeg_decompress_struct *s = &r->src;
    struct jpeg_compress_struct *d = &r->dst;
    /* A fresh decompress object: nothing of the last image's tables. */
    jpeg_destroy_decompress(s);
    jpeg_create_decompress(s);
    jpeg_mem_src(s, j->jpeg, (unsigned long)j->len);
    jpeg_save_markers(s, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; m++)
        jpeg_save_markers(s, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(s, TRUE);
    if (s->restart_interval)
        return keep_as_is(r, j, "has a restart interval already");
    if (s->data_precision != 8)
        return keep_as_is(r, j, "not 8-bit");
    jvirt_barray_ptr *coef = jpeg_read_coefficients(s);
    if (smoothed(s))
        return keep_as_is(r, j, "progressive with coefficients left incomplete (libjpeg smooths "
                          "its blocks)");
    jpeg_copy_critical_parameters(s, d);
    d->write_JFIF_header = s->saw_JFIF_marker;
    d->write_Adobe_marker = s->saw_Adobe_marker;
    if (r->keep_tables && tables_fit(s))
        copy_tables(d, s);
    else
        d->optimize_coding = TRUE;
    if (j->rows) {
        d->restart_in_rows = (int)j->rows;
    } else {
        unsigned n = j->mcus;
        if (n == SL_RESTART_AUTO) {
            unsigned mpr = mcus_per_row(s);
            n = (mpr + RST_AUTO_PER_ROW - 1) / RST_AUTO_PER_ROW;
            n = n < RST_AUTO_MIN ? RST_AUTO_MIN : n;
        }
        d->restart_interval = n > 65535 ? 65535 : n;
    }
    d->dest = &r->dm;
    jpeg_write_coefficients(d, coef);
    copy_markers(r);
    jpeg_finish_compress(d);
    size_t n_out = r->cap - d->dest->free_in_buffer;
    /* Intervals of the one scan, less the first: the RST markers written. */
    uint64_t mcus_total = (uint64_t)d->MCUs_per_row * d->MCU_rows_in_scan;
    uint64_t ri = d->restart_interval ? d->restart_interval : mcus_total;
    j->info->interval = (unsigned)ri;
    j->info->markers = ri ? (mcus_total + ri - 1) / ri - 1 : 0;
    jpeg_finish_decompress(s);
    j->info->rewritten = 1;
    j->info->bytes_out = n_out;
    *j->out = r->out;
    *j->out_len = n_out;
    return SL_OK;
}

/* body() with libjpeg's errors caught: out of memory is SL_ENOMEM, any
 * other error or warning keeps the input as it is. */
static int guarded(sl_jpeg_restarter *r, const rst_job *j)
{
    if (setjmp(r->err.jb)) {
        int oom = r->err.pub.msg_code == JERR_OUT_OF_MEMORY;
        jpeg_abort_compress(&r->dst);
        jpeg_abort_decompress(&r->src);
        if (oom)
            return sl_fail(SL_ENOMEM, "sl_jpeg_restart: %s", r->err.msg);
        char why[JMSG_LENGTH_MAX + 32];
        snprintf(why, sizeof why, "libjpeg: %s", r->err.msg);
        return kept(r, j->jpeg, j->len, j->out, j->out_len, j->info, why);
    }
    return body(r, j);
}

/* --------------------------------------------------------------- API */
int sl_jpeg_restart(sl_jpeg_restarter *r, const uint8_t *jpeg, size_t len, unsigned mcus,
                    unsigned rows, const uint8_t **out, size_t *out_len, sl_restart_info *info)
{
    if (!r || !jpeg || !out || !out_len || !info || len == 0 || (mcus && rows) ||
        (!mcus && !rows))
        return sl_fail(SL_EINVAL, "sl_jpeg_restart: bad argument");
    memset(info, 0, sizeof *info);
    info->bytes_in = len;
    info->bytes_out = len;
    r->err.warned = 0;
    rst_job j = {.jpeg = jpeg, .len = len, .mcus = mcus, .rows = rows, .out = out,
                 .out_len = out_len, .info = info};
    return guarded(r, &j);
}

/* tests/pipeline/test_huff.c - the planar path's entropy decoder
 * (pipeline/image/huff.c) against libjpeg's (SLUICE_HUFF=libjpeg), which it
 * replaces for baseline single-scan files.
 *
 * The coefficients must be libjpeg's, so the decoded planes must be the
 * same bytes: on the camera photos of tests/data/photos, on the same
 * photos with optimized (per-image) Huffman tables and as gray, on
 * synthetic images at every chroma sampling and at qualities 30, 90 and
 * 100 (long codes and 10-bit magnitudes), for random crops at every
 * position (MCUs skipped above, left and right of the crop, stored
 * inside) and outputs that take DCT scales 1/8 to 8/8. Where it applies:
 * sl_huff_install takes baseline files and leaves progressive,
 * restart-marker and arithmetic-coded ones to libjpeg (SL_ENOTSUP), and a
 * file it takes has libjpeg's decode_mcu replaced. Damage: entropy bytes
 * changed at random, several thousand times; whenever this decoder gives
 * planes, libjpeg gives the same planes, and where libjpeg fails, so does
 * it; truncated data fails.
 */
#include <criterion/criterion.h>
#include <stdio.h> /* before jpeglib.h */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>
#include <jpegint.h> /* jpeg_entropy_decoder */

#include "hostile_images.h"
#include "pipeline/image/image.h"
#include "photos.h"
#include "testutil.h"

static sl_decoder *decoder(int libjpeg)
{
    sl_decoder *d;
    if (libjpeg)
        cr_assert_eq(setenv("SLUICE_HUFF", "libjpeg", 1), 0);
    else
        unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_DECODE");
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    unsetenv("SLUICE_HUFF");
    return d;
}

/* Noise on colour fields: many nonzero AC coefficients. */
static uint8_t *synth(int W, int H, uint64_t seed)
{
    uint8_t *p = malloc((size_t)W * H * 3);
    cr_assert_not_null(p);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                int v = ((x / (7 + c) + y / 11) & 1 ? 170 : 60) + (int)(tu_rand(&seed) % 61) - 30;
                p[((size_t)y * W + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* The planes of one crop by both decoders: SL_OK from ours means SL_OK
 * from libjpeg's and the same bytes; an error from libjpeg's means one
 * from ours. Returns ours's rc. */
static int same_planes(sl_decoder *ours, sl_decoder *ref, const uint8_t *jpeg, size_t len,
                       const sl_crop *c, int ow, int oh, const char *what)
{
    sl_plane_view a[3], b[3];
    int na = 0, nb = 0;
    int ra = sl_decode_crop_planes(ours, jpeg, len, c, ow, oh, a, &na);
    int rb = sl_decode_crop_planes(ref, jpeg, len, c, ow, oh, b, &nb);
    if (rb != SL_OK)
        cr_assert_neq(ra, SL_OK, "%s: crop %dx%d at (%d,%d): libjpeg fails (%d) but huff.c "
                      "decodes", what, c->w, c->h, c->x, c->y, rb);
    if (ra != SL_OK)
        return ra;
    cr_assert_eq(rb, SL_OK, "%s: crop %dx%d at (%d,%d): huff.c decodes, libjpeg fails (%d)", what,
                 c->w, c->h, c->x, c->y, rb);
    cr_assert_eq(na, nb);
    for (int k = 0; k < na; k++) {
        cr_assert(a[k].w == b[k].w && a[k].h == b[k].h && a[k].x0 == b[k].x0 &&
                  a[k].y0 == b[k].y0, "%s: plane %d geometry", what, k);
        for (int y = 0; y < a[k].h; y++)
            if (memcmp(a[k].p + (size_t)y * a[k].pitch, b[k].p + (size_t)y * b[k].pitch,
                       (size_t)a[k].w) != 0)
                cr_assert_fail("%s: crop %dx%d at (%d,%d) -> %dx%d: plane %d row %d differs", what,
                        c->w, c->h, c->x, c->y, ow, oh, k, y);
    }
    return SL_OK;
}

/* n random crops (the pipeline's geometry) with outputs from 224 down to
 * 1/10 of the crop, plus the whole image and its corners. */
static void crops(sl_decoder *ours, sl_decoder *ref, const uint8_t *jpeg, size_t len, int n,
                  uint64_t seed, const char *what)
{
    int W, H;
    cr_assert_eq(sl_decoder_header(ours, jpeg, len, &W, &H, NULL), SL_OK, "%s: %s", what, sl_errmsg());
    for (int i = 0; i < n + 3; i++) {
        sl_crop c;
        if (i == n)
            c = (sl_crop){0, 0, W, H};
        else if (i == n + 1)
            c = (sl_crop){0, 0, W / 3 + 1, H / 3 + 1};
        else if (i == n + 2)
            c = (sl_crop){W - W / 3 - 1, H - H / 4 - 1, W / 3 + 1, H / 4 + 1};
        else {
            sl_rng rng = sl_rng_for(seed, 0, (uint64_t)i);
            sl_rrc_geometry(&rng, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
        }
        int ow = 224, oh = 224;
        if (i % 3 == 1) { /* smaller outputs: DCT scales below 8/8 */
            ow = c.w / (2 + i % 9) + 1;
            oh = c.h / (2 + i % 7) + 1;
        }
        cr_assert_eq(same_planes(ours, ref, jpeg, len, &c, ow, oh, what), SL_OK, "%s: %s", what,
                     sl_errmsg());
    }
}

Test(pipeline_huff, photos_same_planes_as_libjpeg)
{
    static const char *names[] = {"fruits.jpg", "building.jpg", "messi5.jpg"};
    sl_decoder *ours = decoder(0), *ref = decoder(1);
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        size_t len;
        uint8_t *jpeg = read_photo(names[f], &len);
        crops(ours, ref, jpeg, len, 40, f, names[f]);
        size_t plen;
        uint8_t *opt = hi_jpeg_recode(jpeg, len, HI_OPTIMIZE, &plen);
        cr_assert(plen < len, "%s: optimized tables %zu bytes, baseline %zu", names[f], plen, len);
        crops(ours, ref, opt, plen, 20, f + 10, "optimized tables");
        free(opt);
        unsigned long olen;
        unsigned char *gray = transcode(jpeg, len, TJXOPT_GRAY, &olen);
        crops(ours, ref, gray, olen, 20, f + 20, "gray");
        tjFree(gray);
        free(jpeg);
    }
    sl_decoder_destroy(ours);
    sl_decoder_destroy(ref);
}

Test(pipeline_huff, samplings_and_qualities_same_planes)
{
    const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_440, TJSAMP_420, TJSAMP_411, TJSAMP_GRAY};
    const int qs[] = {30, 90, 100};
    const int sizes[][2] = {{523, 391}, {64, 17}, {9, 1}};
    sl_decoder *ours = decoder(0), *ref = decoder(1);
    for (size_t z = 0; z < 3; z++) {
        uint8_t *img = synth(sizes[z][0], sizes[z][1], 7 + z);
        for (size_t s = 0; s < sizeof samps / sizeof *samps; s++)
            for (size_t q = 0; q < 3; q++) {
                unsigned long len;
                unsigned char *jpeg =
                    encode_rgb(img, sizes[z][0], sizes[z][1], samps[s], qs[q], 0, &len);
                char what[64];
                snprintf(what, sizeof what, "%dx%d samp %d q %d", sizes[z][0], sizes[z][1],
                         samps[s], qs[q]);
                crops(ours, ref, jpeg, len, z == 0 ? 12 : 4, s * 3 + q, what);
                tjFree(jpeg);
            }
        free(img);
    }
    sl_decoder_destroy(ours);
    sl_decoder_destroy(ref);
}

/* A decompressor set up as decode_yuv.c does, up to sl_huff_install. */
static void start_raw(struct jpeg_decompress_struct *ci, struct jpeg_error_mgr *jerr,
                      const uint8_t *jpeg, size_t len)
{
    ci->err = jpeg_std_error(jerr);
    jpeg_create_decompress(ci);
    jpeg_mem_src(ci, jpeg, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    ci->raw_data_out = TRUE;
    jpeg_start_decompress(ci);
}

/* sl_huff_install on a decompressor set up as decode_yuv.c does: SL_OK
 * and decode_mcu replaced, or SL_ENOTSUP and libjpeg's left. */
static int install(const uint8_t *jpeg, size_t len, int *replaced)
{
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    start_raw(&ci, &jerr, jpeg, len);
    void *before = (void *)ci.entropy->decode_mcu;
    sl_huff *h = NULL;
    int rc = sl_huff_install(&ci, &h);
    *replaced = (void *)ci.entropy->decode_mcu != before;
    jpeg_abort_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    sl_huff_free(h);
    return rc;
}

Test(pipeline_huff, installed_only_where_it_applies)
{
    size_t len;
    uint8_t *jpeg = read_photo("fruits.jpg", &len);
    int replaced;
    cr_assert_eq(install(jpeg, len, &replaced), SL_OK);
    cr_assert(replaced);
    unsigned long plen;
    unsigned char *prog = transcode(jpeg, len, TJXOPT_PROGRESSIVE, &plen);
    cr_assert_eq(install(prog, plen, &replaced), SL_ENOTSUP);
    cr_assert(!replaced);
    tjFree(prog);
    free(jpeg);

    /* restart markers (libjpeg's compressor, restart_in_rows) and
     * arithmetic coding: libjpeg's decoder stays, and the planes are the
     * same as with SLUICE_HUFF=libjpeg (both libjpeg's) */
    uint8_t *img = synth(200, 120, 3);
    for (int mode = 0; mode < 2; mode++) {
        size_t olen;
        uint8_t *out = hi_jpeg_libjpeg(img, 200, 120, mode == 0, mode == 1, &olen);
        cr_assert_eq(install(out, olen, &replaced), SL_ENOTSUP, "mode %d", mode);
        cr_assert(!replaced);
        sl_decoder *ours = decoder(0), *ref = decoder(1);
        crops(ours, ref, out, olen, 5, 99, mode ? "arithmetic" : "restarts");
        sl_decoder_destroy(ours);
        sl_decoder_destroy(ref);
        free(out);
    }
    free(img);
}

/* An over-full Huffman table (more codes of one length than fit below the
 * all-ones code) is refused by sl_huff_install before any lookup entry of
 * it is written (issue 26: the check came after the entries, which then
 * land up to 255 KiB past the table: ASan's heap-buffer-overflow). libjpeg
 * refuses such a table at start_pass, so it is made over-full after
 * jpeg_start_decompress, as a table libjpeg missed would reach huff.c. */
Test(pipeline_huff, over_full_table_refused_before_it_is_built)
{
    size_t len;
    uint8_t *jpeg = read_photo("fruits.jpg", &len);
    for (int ac = 0; ac < 2; ac++)
        for (int comp = 0; comp < 2; comp++) {
            struct jpeg_decompress_struct ci;
            struct jpeg_error_mgr jerr;
            start_raw(&ci, &jerr, jpeg, len);
            const jpeg_component_info *cp = ci.cur_comp_info[comp];
            JHUFF_TBL *t = ac ? ci.ac_huff_tbl_ptrs[cp->ac_tbl_no] : ci.dc_huff_tbl_ptrs[cp->dc_tbl_no];
            memset(t->bits, 0, sizeof t->bits);
            t->bits[1] = 250; /* 250 one-bit codes */
            memset(t->huffval, 0, sizeof t->huffval);
            sl_huff *h = NULL;
            cr_assert_eq(sl_huff_install(&ci, &h), SL_ENOTSUP, "%s table of component %d",
                         ac ? "AC" : "DC", comp);
            jpeg_abort_decompress(&ci);
            jpeg_destroy_decompress(&ci);
            sl_huff_free(h);
        }
    free(jpeg);
}

/* The first byte of entropy-coded data (after the SOS segment). */
static size_t scan_start(const uint8_t *j, size_t len)
{
    for (size_t i = 2; i + 4 < len;) {
        cr_assert_eq(j[i], 0xFF);
        size_t seg = (size_t)j[i + 2] << 8 | j[i + 3];
        if (j[i + 1] == 0xDA)
            return i + 2 + seg;
        i += 2 + seg;
    }
    cr_assert_fail("no SOS");
    return 0;
}

Test(pipeline_huff, damaged_entropy_data)
{
    size_t len;
    uint8_t *jpeg = read_photo("fruits.jpg", &len);
    uint8_t *bad = malloc(len);
    cr_assert_not_null(bad);
    size_t s0 = scan_start(jpeg, len);
    sl_decoder *ours = decoder(0), *ref = decoder(1);
    int W, H;
    cr_assert_eq(sl_decoder_header(ours, jpeg, len, &W, &H, NULL), SL_OK);
    uint64_t seed = 42;
    int failed = 0, decoded = 0;
    for (int i = 0; i < 3000; i++) {
        memcpy(bad, jpeg, len);
        int n = 1 + (int)(tu_rand(&seed) % 4);
        for (int k = 0; k < n; k++) {
            size_t at = s0 + (size_t)(tu_rand(&seed) % (len - 2 - s0));
            bad[at] = (uint8_t)tu_rand(&seed);
        }
        sl_crop c;
        sl_rng rng = sl_rng_for(seed, 0, (uint64_t)i);
        sl_rrc_geometry(&rng, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
        int rc = same_planes(ours, ref, bad, len, &c, 224, 224, "damaged");
        if (rc == SL_OK)
            decoded++;
        else {
            cr_assert_eq(rc, SL_EIMAGE, "rc %d: %s", rc, sl_errmsg());
            failed++;
        }
    }
    /* both outcomes occur (a change below the crop is never read) */
    cr_assert(failed >= 20 && decoded >= 1000, "failed %d decoded %d", failed, decoded);
    /* truncated inside the scan */
    const sl_crop whole = {0, 0, W, H};
    sl_plane_view pv[3];
    int np;
    cr_assert_eq(sl_decode_crop_planes(ours, jpeg, s0 + (len - s0) / 2, &whole, 224, 224, pv, &np),
                 SL_EIMAGE);
    /* and the decoder still decodes */
    cr_assert_eq(same_planes(ours, ref, jpeg, len, &whole, 224, 224, "after damage"), SL_OK);
    sl_decoder_destroy(ours);
    sl_decoder_destroy(ref);
    free(bad);
    free(jpeg);
}

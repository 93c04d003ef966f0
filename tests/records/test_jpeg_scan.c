/* tests/records/test_jpeg_scan.c - the structural JPEG check used on
 * pass-through inputs: every prefix of a real JPEG is refused, whole files
 * (baseline, progressive, gray, with trailing bytes) pass; every table a
 * scan uses must be defined before it (issue 26), but for the standard
 * Huffman tables of a sequential file without DHT; fill bytes are allowed
 * before markers only. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"

/* A w x h RGB JPEG of a smooth pattern with some noise; malloc'd. */
static uint8_t *make_jpeg(int w, int h, int subsamp, int flags, size_t *len)
{
    uint64_t s = 42;
    uint8_t *px = malloc((size_t)w * h * 3);
    cr_assert_not_null(px);
    for (int i = 0; i < w * h * 3; i++)
        px[i] = (uint8_t)((i / 3 % w) * 2 + (i / 3 / w) + (tu_rand(&s) & 15));
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long n = 0;
    cr_assert_eq(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &out, &n, subsamp, 85, flags), 0, "%s",
                 tjGetErrorStr2(tj));
    uint8_t *copy = malloc(n);
    memcpy(copy, out, n);
    tjFree(out);
    tjDestroy(tj);
    free(px);
    *len = n;
    return copy;
}

static void check_all_prefixes_fail(const uint8_t *jpg, size_t len)
{
    cr_assert_eq(sl_jpeg_scan(jpg, len, NULL), SL_OK, "%s", sl_errmsg());
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *p = malloc(cut ? cut : 1); /* exact size: ASan sees over-reads */
        memcpy(p, jpg, cut);
        cr_assert_eq(sl_jpeg_scan(p, cut, NULL), SL_EIMAGE, "prefix of %zu/%zu bytes accepted",
                     cut, len);
        free(p);
    }
}

Test(jpeg_scan, baseline_420_whole_ok_every_prefix_refused)
{
    size_t len;
    uint8_t *jpg = make_jpeg(67, 45, TJSAMP_420, 0, &len);
    check_all_prefixes_fail(jpg, len);
    free(jpg);
}

Test(jpeg_scan, progressive_and_gray)
{
    size_t len;
    uint8_t *jpg = make_jpeg(40, 33, TJSAMP_444, TJFLAG_PROGRESSIVE, &len);
    check_all_prefixes_fail(jpg, len);
    free(jpg);
    jpg = make_jpeg(31, 17, TJSAMP_GRAY, 0, &len);
    check_all_prefixes_fail(jpg, len);
    free(jpg);
}

Test(jpeg_scan, trailing_bytes_after_eoi_are_accepted)
{
    size_t len;
    uint8_t *jpg = make_jpeg(16, 16, TJSAMP_420, 0, &len);
    uint8_t *more = malloc(len + 100);
    memcpy(more, jpg, len);
    memset(more + len, 0xAB, 100);
    cr_assert_eq(sl_jpeg_scan(more, len + 100, NULL), SL_OK, "%s", sl_errmsg());
    free(more);
    free(jpg);
}

Test(jpeg_scan, broken_structure_is_refused_with_an_offset)
{
    size_t len;
    uint8_t *jpg = make_jpeg(16, 16, TJSAMP_420, 0, &len);
    /* The first segment after SOI (APP0/JFIF or DQT) gets an overlong length. */
    uint8_t *bad = malloc(len);
    memcpy(bad, jpg, len);
    bad[4] = 0xFF;
    bad[5] = 0xFF;
    cr_assert_eq(sl_jpeg_scan(bad, len, NULL), SL_EIMAGE);
    /* A length below 2 is impossible. */
    memcpy(bad, jpg, len);
    bad[4] = 0;
    bad[5] = 1;
    cr_assert_eq(sl_jpeg_scan(bad, len, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "@ byte 2"), "%s", sl_errmsg());
    /* Not a marker where one must be. */
    memcpy(bad, jpg, len);
    bad[2] = 0x12;
    cr_assert_eq(sl_jpeg_scan(bad, len, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "expected a marker @ byte 2"), "%s", sl_errmsg());
    /* SOI + EOI alone: no frame. */
    static const uint8_t empty[] = {0xFF, 0xD8, 0xFF, 0xD9};
    cr_assert_eq(sl_jpeg_scan(empty, sizeof empty, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "before any frame"), "%s", sl_errmsg());
    /* Not a JPEG at all. */
    cr_assert_eq(sl_jpeg_scan((const uint8_t *)"\x89PNG\r\n\x1a\n", 8, NULL), SL_EIMAGE);
    free(bad);
    free(jpg);
}

/* Which tables a stream needs from itself: all DQT; DHT too, but for a
 * sequential Huffman file's tables 0 and 1, which the standard tables
 * stand in for (SL_JPEG_STD_HUFF); a progressive file has no such rule,
 * an arithmetic-coded one needs no DHT. */
Test(jpeg_scan, tables_each_stream_must_define)
{
    size_t len, n, m;
    unsigned fl = 99;
    uint8_t *jpg = make_jpeg(64, 48, TJSAMP_420, 0, &len);
    cr_assert_eq(sl_jpeg_scan(jpg, len, &fl), SL_OK);
    cr_assert_eq(fl, 0u);
    uint8_t *bare = hi_strip(jpg, len, 0xC4, &n);
    cr_assert_eq(sl_jpeg_scan(bare, n, &fl), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(fl, SL_JPEG_STD_HUFF);
    check_all_prefixes_fail(bare, n);
    uint8_t *noq = hi_strip(jpg, len, 0xDB, &m);
    cr_assert_eq(sl_jpeg_scan(noq, m, &fl), SL_EIMAGE);
    cr_assert_eq(fl, 0u, "flags are 0 on failure");
    cr_assert(strstr(sl_errmsg(), "component 1 uses quantization table 0, which no DQT before it "
                     "defines"), "%s", sl_errmsg());
    free(noq);
    free(bare);

    /* DQT after the scan that needs it: too late */
    size_t sos = 2;
    while (!(jpg[sos] == 0xFF && jpg[sos + 1] == 0xDA))
        sos = hi_segment_end(jpg, len, sos);
    size_t q = 2;
    while (!(jpg[q] == 0xFF && jpg[q + 1] == 0xDB))
        q = hi_segment_end(jpg, len, q);
    size_t qe = hi_segment_end(jpg, len, q), scan_end = hi_segment_end(jpg, len, sos);
    uint8_t *late = malloc(len);
    cr_assert_not_null(late);
    size_t k = 0;
    memcpy(late + k, jpg, q), k += q;                              /* up to the DQT */
    memcpy(late + k, jpg + qe, scan_end - qe), k += scan_end - qe; /* ... SOS + data */
    memcpy(late + k, jpg + q, qe - q), k += qe - q;                /* the DQT */
    memcpy(late + k, jpg + scan_end, len - scan_end), k += len - scan_end; /* EOI */
    cr_assert_eq(k, len);
    cr_assert_eq(sl_jpeg_scan(late, len, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "no DQT"), "%s", sl_errmsg());
    free(late);

    /* progressive without DHT: no standard tables */
    size_t plen, pn;
    uint8_t *prog = make_jpeg(64, 48, TJSAMP_420, TJFLAG_PROGRESSIVE, &plen);
    cr_assert_eq(sl_jpeg_scan(prog, plen, &fl), SL_OK);
    cr_assert_eq(fl, 0u);
    uint8_t *pbare = hi_strip(prog, plen, 0xC4, &pn);
    cr_assert_eq(sl_jpeg_scan(pbare, pn, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "DC Huffman table 0, which no DHT before it defines"), "%s",
              sl_errmsg());
    free(pbare);
    free(prog);

    /* arithmetic coding: no Huffman tables at all */
    size_t alen;
    uint8_t *arith = hi_jpeg_recode(jpg, len, HI_ARITHMETIC | HI_PROGRESSIVE, &alen);
    cr_assert_eq(sl_jpeg_scan(arith, alen, &fl), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(fl, 0u);
    free(arith);
    free(jpg);
}

/* Fill bytes: before a marker (EOI, a restart marker) they are allowed;
 * before a stuffed zero they are not (FF FF 00). */
Test(jpeg_scan, fill_bytes_only_before_markers)
{
    size_t len, n;
    uint8_t *jpg = make_jpeg(200, 150, TJSAMP_420, 0, &len);
    uint8_t *e = hi_fill_eoi(jpg, len, 5, &n);
    cr_assert_eq(sl_jpeg_scan(e, n, NULL), SL_OK, "%s", sl_errmsg());
    free(e);
    uint8_t *f = hi_fill_ff00(jpg, len, 0, &n);
    cr_assert_not_null(f, "no FF 00 in the scan");
    cr_assert_eq(sl_jpeg_scan(f, n, NULL), SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "fill bytes FF FF before a stuffed zero @ byte"), "%s",
              sl_errmsg());
    /* more fill bytes: the same */
    uint8_t *f2 = hi_fill_ff00(f, n, 0, &n);
    cr_assert_eq(sl_jpeg_scan(f2, n, NULL), SL_EIMAGE);
    free(f2);
    free(f);

    /* restart markers (libjpeg, restart_in_rows), each after fill bytes */
    uint8_t *px = hi_rgb(64, 48, 2);
    size_t olen;
    uint8_t *out = hi_jpeg_libjpeg(px, 64, 48, 1, 0, &olen);
    uint8_t *r = malloc(olen * 2);
    cr_assert_not_null(r);
    size_t k = 0, rst = 0;
    for (size_t i = 0; i < olen; i++) {
        if (i + 1 < olen && out[i] == 0xFF && out[i + 1] >= 0xD0 && out[i + 1] <= 0xD7) {
            r[k++] = 0xFF; /* a fill byte */
            rst++;
        }
        r[k++] = out[i];
    }
    cr_assert_geq(rst, 2u);
    cr_assert_eq(sl_jpeg_scan(r, k, NULL), SL_OK, "%s", sl_errmsg());
    free(r);
    free(out);
    free(px);
    free(jpg);
}

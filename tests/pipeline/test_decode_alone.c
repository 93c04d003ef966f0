/* tests/pipeline/test_decode_alone.c - every image decodes the same
 * whatever its decoder decoded before it (issue 26).
 *
 * libjpeg keeps an image's Huffman and quantization tables in the
 * decompress object, for an abbreviated stream that follows to use; a
 * decoder reused across images must not let them through. On every decode
 * path (the planar path with pipeline/image/huff.c, the same with libjpeg's
 * Huffman decoder, the RGB reference and the full decode):
 *   - a baseline file without DHT (Motion-JPEG's way: the standard tables
 *     of T.81 Annex K.3) decodes to the very sample of the same file with
 *     its DHT, alone and after images with optimized tables;
 *   - a file without DQT, or without any table (Pillow's streamtype=2), is
 *     a bad image, alone and after another image;
 *   - fill bytes before a stuffed zero (FF FF 00, which libjpeg-turbo's two
 *     Huffman paths read differently) are refused; fill bytes before a
 *     marker are not damage and change nothing;
 * and in a whole pipeline over a shard mixing all of them with optimized
 * and standard files, the batches are byte-identical for any worker count
 * and either Huffman decoder, and the bad records are named.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile_images.h"
#include "pipeline/image/image.h"
#include "testutil.h"

enum { OW = 48, OH = 40, NMODE = 4 };
static const char *const mode_name[NMODE] = {"planar+huff.c", "planar+libjpeg huff",
                                             "SLUICE_DECODE=rgb", "SLUICE_DECODE=full"};

/* A decoder of one mode (its environment is read at create). */
static sl_decoder *decoder(int mode)
{
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_DECODE");
    if (mode == 1)
        cr_assert_eq(setenv("SLUICE_HUFF", "libjpeg", 1), 0);
    if (mode == 2)
        cr_assert_eq(setenv("SLUICE_DECODE", "rgb", 1), 0);
    if (mode == 3)
        cr_assert_eq(setenv("SLUICE_DECODE", "full", 1), 0);
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_DECODE");
    return d;
}

/* What a map worker does: header, a crop from its size, the sample (NHWC
 * u8, OW x OH) into out. */
static int sample(sl_decoder *d, const uint8_t *j, size_t len, uint8_t *out)
{
    int W, H, rc = sl_decoder_header(d, j, len, &W, &H, NULL);
    if (rc)
        return rc;
    sl_crop c = {W / 5, H / 6, W * 3 / 5, H * 2 / 3};
    return sl_decode_crop_sample(d, j, len, &c, &(sl_out_spec){.w = OW, .h = OH, .flip = 0,
                                                               .layout = SL_LAYOUT_NHWC_U8,
                                                               .mean = NULL, .std = NULL,
                                                               .dst = out});
}

/* Noise over colour fields: many nonzero AC coefficients, long codes, and
 * many stuffed FF 00 in the entropy-coded data. */
static uint8_t *noisy(int W, int H, int ch, uint64_t seed)
{
    uint8_t *p = malloc((size_t)W * H * ch);
    cr_assert_not_null(p);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < ch; c++) {
                int v = ((x / (5 + c) + y / 9) & 1 ? 180 : 50) + (int)(tu_rand(&seed) % 81) - 40;
                p[((size_t)y * W + x) * ch + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

typedef struct img {
    uint8_t *p;
    size_t len;
} img;

/* A standard-table baseline JPEG of noise (TurboJPEG), RGB or gray. */
static img std_jpeg(int W, int H, int gray, int samp, int q, uint64_t seed)
{
    img m;
    uint8_t *px = noisy(W, H, gray ? 1 : 3, seed);
    m.p = hi_jpeg_q(px, W, H, gray ? TJPF_GRAY : TJPF_RGB, gray ? TJSAMP_GRAY : samp, q, &m.len);
    free(px);
    return m;
}

/* Images with their own optimized Huffman tables: a camera photo and
 * noise at 4:4:4, both re-coded with optimize_coding. */
static void optimized(img out[2])
{
    size_t len;
    char *path = tu_join(SLUICE_SOURCE_DIR, "tests/data/photos/building.jpg");
    uint8_t *photo = tu_read_file(path, &len);
    cr_assert_not_null(photo, "%s", path);
    out[0].p = hi_jpeg_recode(photo, len, HI_OPTIMIZE, &out[0].len);
    img n = std_jpeg(211, 157, 0, TJSAMP_444, 97, 5);
    out[1].p = hi_jpeg_recode(n.p, n.len, HI_OPTIMIZE, &out[1].len);
    free(n.p);
    free(photo);
    free(path);
}

Test(pipeline_decode_alone, no_dht_decodes_as_with_its_tables_after_any_image)
{
    img opt[2];
    optimized(opt);
    /* The issue's case (cjpeg -quality 2, DHT removed) and more: 4:2:0 q2,
     * 4:2:2 q75, gray q90. */
    static const struct {
        int W, H, gray, samp, q;
    } cfg[] = {{173, 131, 0, TJSAMP_420, 2}, {150, 97, 0, TJSAMP_422, 75}, {99, 120, 1, 0, 90}};
    uint8_t want[OW * OH * 3], got[OW * OH * 3], junk[OW * OH * 3];
    int before = 0;
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        img full = std_jpeg(cfg[k].W, cfg[k].H, cfg[k].gray, cfg[k].samp, cfg[k].q, 11 + k);
        img bare = {NULL, 0};
        bare.p = hi_strip(full.p, full.len, 0xC4, &bare.len);
        unsigned fl = 0;
        cr_assert_eq(sl_jpeg_scan(bare.p, bare.len, &fl), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(fl, SL_JPEG_STD_HUFF, "no DHT: the standard tables stand in");
        cr_assert_eq(sl_jpeg_scan(full.p, full.len, &fl), SL_OK);
        cr_assert_eq(fl, 0u, "its own DHT");
        for (int mode = 0; mode < NMODE; mode++) {
            sl_decoder *fresh = decoder(mode), *d = decoder(mode);
            cr_assert_eq(sample(fresh, full.p, full.len, want), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(sample(fresh, bare.p, bare.len, got), SL_OK, "%s: %s", mode_name[mode],
                         sl_errmsg());
            cr_assert(!memcmp(got, want, sizeof want), "%s, cfg %zu: without DHT, another sample",
                          mode_name[mode], k);
            for (int o = 0; o < 2; o++) {
                cr_assert_eq(sample(d, opt[o].p, opt[o].len, junk), SL_OK, "%s", sl_errmsg());
                int rc = sample(d, bare.p, bare.len, got);
                cr_assert_eq(rc, SL_OK, "%s, cfg %zu, after optimized image %d: %s",
                             mode_name[mode], k, o, sl_errmsg());
                cr_assert(!memcmp(got, want, sizeof want), "%s, cfg %zu: after optimized image "
                          "%d, another sample (the last image's tables)", mode_name[mode], k, o);
                before++;
            }
            /* and the optimized image after it is itself */
            uint8_t a[OW * OH * 3], b[OW * OH * 3];
            cr_assert_eq(sample(d, bare.p, bare.len, got), SL_OK);
            cr_assert_eq(sample(d, opt[0].p, opt[0].len, a), SL_OK);
            cr_assert_eq(sample(fresh, opt[0].p, opt[0].len, b), SL_OK);
            cr_assert(!memcmp(a, b, sizeof a), "%s: the optimized image after a bare one",
                      mode_name[mode]);
            sl_decoder_destroy(fresh);
            sl_decoder_destroy(d);
        }
        free(bare.p);
        free(full.p);
    }
    cr_assert_eq(before, 3 * NMODE * 2);
    free(opt[0].p);
    free(opt[1].p);
}

/* A missing DQT is a bad image whatever came before: alone, after a good
 * image, in every entry point and in the structure check. */
Test(pipeline_decode_alone, no_dqt_refused_alone_and_after_another)
{
    img opt[2];
    optimized(opt);
    img full = std_jpeg(120, 88, 0, TJSAMP_420, 80, 3), noq, none;
    noq.p = hi_strip(full.p, full.len, 0xDB, &noq.len);
    none.p = hi_strip(noq.p, noq.len, 0xC4, &none.len); /* Pillow's streamtype=2 */
    const img *bad[2] = {&noq, &none};
    uint8_t out[OW * OH * 3];
    for (int b = 0; b < 2; b++) {
        cr_assert_eq(sl_jpeg_scan(bad[b]->p, bad[b]->len, NULL), SL_EIMAGE);
        cr_assert(strstr(sl_errmsg(), "quantization table 0") &&
                  strstr(sl_errmsg(), "no DQT"), "%s", sl_errmsg());
        for (int mode = 0; mode < NMODE; mode++) {
            sl_decoder *d = decoder(mode);
            for (int after = 0; after < 2; after++) {
                if (after)
                    cr_assert_eq(sample(d, opt[0].p, opt[0].len, out), SL_OK);
                int rc = sample(d, bad[b]->p, bad[b]->len, out);
                cr_assert_eq(rc, SL_EIMAGE, "%s, %s, after %d: rc %d", mode_name[mode],
                             b ? "no tables" : "no DQT", after, rc);
                cr_assert(strstr(sl_errmsg(), "sl_decoder_header: sl_jpeg_scan: ") &&
                          strstr(sl_errmsg(), "quantization table"), "%s", sl_errmsg());
                /* The decode entry points check on their own, too. */
                if (after)
                    cr_assert_eq(sample(d, opt[1].p, opt[1].len, out), SL_OK);
                sl_crop c = {0, 0, 120, 88};
                cr_assert_eq(sl_decode_crop_sample(d, bad[b]->p, bad[b]->len, &c,
                                                   &(sl_out_spec){.w = OW, .h = OH, .flip = 0,
                                                                  .layout = SL_LAYOUT_NHWC_U8,
                                                                  .mean = NULL, .std = NULL,
                                                                  .dst = out}),
                             SL_EIMAGE);
                cr_assert_eq(sl_decode_crop(d, bad[b]->p, bad[b]->len, &c, OW, OH, out, OW * 3),
                             SL_EIMAGE);
            }
            sl_decoder_destroy(d);
        }
    }
    free(none.p);
    free(noq.p);
    free(full.p);
    free(opt[0].p);
    free(opt[1].p);
}

/* FF FF 00 in the entropy-coded data: refused on every path, early in
 * the scan (where libjpeg-turbo's fast Huffman path runs) and near its
 * end (its slow path). Fill bytes before the EOI marker change nothing. */
Test(pipeline_decode_alone, fill_bytes)
{
    img full = std_jpeg(256, 192, 0, TJSAMP_420, 92, 9);
    /* libjpeg-turbo's fast path runs while 512 bytes a block of the MCU
     * remain (3 KiB at 4:2:0), its slow path after */
    size_t at[2] = {full.len / 8, full.len - 2500};
    uint8_t want[OW * OH * 3], out[OW * OH * 3];
    for (int mode = 0; mode < NMODE; mode++) {
        sl_decoder *d = decoder(mode);
        cr_assert_eq(sample(d, full.p, full.len, want), SL_OK);
        for (int i = 0; i < 2; i++) {
            img f = {NULL, 0};
            f.p = hi_fill_ff00(full.p, full.len, at[i], &f.len);
            cr_assert_not_null(f.p, "no FF 00 after byte %zu", at[i]);
            int rc = sample(d, f.p, f.len, out);
            cr_assert_eq(rc, SL_EIMAGE, "%s, FF FF 00 near byte %zu: rc %d", mode_name[mode],
                         at[i], rc);
            cr_assert(strstr(sl_errmsg(), "fill bytes FF FF before a stuffed zero"), "%s",
                      sl_errmsg());
            free(f.p);
        }
        img e = {NULL, 0};
        e.p = hi_fill_eoi(full.p, full.len, 3, &e.len);
        cr_assert_eq(sample(d, e.p, e.len, out), SL_OK, "%s: %s", mode_name[mode], sl_errmsg());
        cr_assert(!memcmp(out, want, sizeof out), "%s: fill bytes before EOI changed the sample",
                  mode_name[mode]);
        free(e.p);
        sl_decoder_destroy(d);
    }
    free(full.p);
}

/* The map worker parses each header once: sl_decoder_header leaves it for
 * the decode of the same bytes; a decode of other bytes (or a second one)
 * reads its own. The sample is the same as from a decode alone. */
Test(pipeline_decode_alone, header_parsed_once_and_kept_for_its_bytes_only)
{
    img a = std_jpeg(160, 120, 0, TJSAMP_420, 85, 1), b = std_jpeg(90, 70, 1, 0, 60, 2);
    sl_decoder *d = decoder(0), *ref = decoder(0);
    uint8_t want_a[OW * OH * 3], want_b[OW * OH * 3], out[OW * OH * 3];
    sl_crop ca = {10, 5, 120, 100}, cb = {0, 0, 90, 70};
    cr_assert_eq(sl_decode_crop_sample(ref, a.p, a.len, &ca, &(sl_out_spec){.w = OW, .h = OH,
                                                                            .flip = 0,
                                                                            .layout = SL_LAYOUT_NHWC_U8,
                                                                            .mean = NULL,
                                                                            .std = NULL,
                                                                            .dst = want_a}), SL_OK);
    cr_assert_eq(sl_decode_crop_sample(ref, b.p, b.len, &cb, &(sl_out_spec){.w = OW, .h = OH,
                                                                            .flip = 0,
                                                                            .layout = SL_LAYOUT_NHWC_U8,
                                                                            .mean = NULL,
                                                                            .std = NULL,
                                                                            .dst = want_b}), SL_OK);
    int W, H;
    /* header of a, decode of b: b is read afresh */
    cr_assert_eq(sl_decoder_header(d, a.p, a.len, &W, &H, NULL), SL_OK);
    cr_assert(W == 160 && H == 120);
    cr_assert_eq(sl_decode_crop_sample(d, b.p, b.len, &cb, &(sl_out_spec){.w = OW, .h = OH,
                                                                          .flip = 0,
                                                                          .layout = SL_LAYOUT_NHWC_U8,
                                                                          .mean = NULL, .std = NULL,
                                                                          .dst = out}), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(out, want_b, sizeof out));
    /* header of a, decode of a, and again (the second reads it afresh) */
    cr_assert_eq(sl_decoder_header(d, a.p, a.len, &W, &H, NULL), SL_OK);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(sl_decode_crop_sample(d, a.p, a.len, &ca, &(sl_out_spec){.w = OW, .h = OH,
                                                                              .flip = 0,
                                                                              .layout = SL_LAYOUT_NHWC_U8,
                                                                              .mean = NULL,
                                                                              .std = NULL,
                                                                              .dst = out}), SL_OK, "%s", sl_errmsg());
        cr_assert(!memcmp(out, want_a, sizeof out), "decode %d of a", k);
    }
    /* the same length at another address is other bytes */
    uint8_t *copy = malloc(b.len);
    cr_assert_not_null(copy);
    memcpy(copy, b.p, b.len);
    cr_assert_eq(sl_decoder_header(d, b.p, b.len, &W, &H, NULL), SL_OK);
    cr_assert_eq(sl_decode_crop_sample(d, copy, b.len, &cb, &(sl_out_spec){.w = OW, .h = OH,
                                                                           .flip = 0,
                                                                           .layout = SL_LAYOUT_NHWC_U8,
                                                                           .mean = NULL,
                                                                           .std = NULL,
                                                                           .dst = out}), SL_OK);
    cr_assert(!memcmp(out, want_b, sizeof out));
    /* a failed header leaves nothing held */
    cr_assert_eq(sl_decoder_header(d, a.p, a.len / 2, &W, &H, NULL), SL_EIMAGE);
    cr_assert_eq(sl_decode_crop_sample(d, a.p, a.len, &ca, &(sl_out_spec){.w = OW, .h = OH,
                                                                          .flip = 0,
                                                                          .layout = SL_LAYOUT_NHWC_U8,
                                                                          .mean = NULL, .std = NULL,
                                                                          .dst = out}), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(out, want_a, sizeof out));
    free(copy);
    sl_decoder_destroy(d);
    sl_decoder_destroy(ref);
    free(a.p);
    free(b.p);
}

/* ------------------------------------------------------------- pipeline */

/* One shard of the images (labels = record number) with its index. */
static char *write_shard(const char *dir, const img *r, size_t n)
{
    const uint8_t *p[32];
    size_t len[32];
    cr_assert_leq(n, 32u);
    for (size_t i = 0; i < n; i++)
        p[i] = r[i].p, len[i] = r[i].len;
    return hi_write_shard(dir, "mixed-00000-of-00001.tfrecord", p, len, n);
}

/* Every batch of two epochs (train transform: random crops and flips,
 * buffer shuffle) as one byte string: samples, labels, record ids. */
typedef struct run_out {
    uint8_t *bytes;
    size_t len;
    uint64_t bad;
    char bad_msg[8][SL_ERRMSG_MAX];
} run_out;

static void run(const char *shard, unsigned workers, int libjpeg_huff, run_out *o)
{
    sl_pipeline_config c = SL_PIPELINE_CONFIG_INIT;
    c.data = shard;
    c.transform = SL_TRANSFORM_TRAIN;
    c.shuffle = SL_SHUFFLE_BUFFER;
    c.shuffle_buffer = 8;
    c.seed = 2026;
    c.epochs = 2;
    c.height = 24;
    c.width = 32;
    c.layout = SL_LAYOUT_NCHW_F32;
    c.batch = 5;
    c.readers = 1;
    c.workers = workers;
    c.label_offset = 0;
    unsetenv("SLUICE_HUFF");
    if (libjpeg_huff)
        cr_assert_eq(setenv("SLUICE_HUFF", "libjpeg", 1), 0);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    unsetenv("SLUICE_HUFF");
    memset(o, 0, sizeof *o);
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        size_t add = b->n * (b->sample_bytes + sizeof(int32_t) + sizeof(uint64_t));
        o->bytes = realloc(o->bytes, o->len + add);
        cr_assert_not_null(o->bytes);
        memcpy(o->bytes + o->len, b->data, b->n * b->sample_bytes);
        o->len += b->n * b->sample_bytes;
        memcpy(o->bytes + o->len, b->labels, b->n * sizeof(int32_t));
        o->len += b->n * sizeof(int32_t);
        memcpy(o->bytes + o->len, b->record_ids, b->n * sizeof(uint64_t));
        o->len += b->n * sizeof(uint64_t);
        sl_pipeline_release(p, b);
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    o->bad = st.bad_records;
    for (uint64_t k = 0; k < st.bad_records && k < 8 && k < SL_PIPELINE_MAX_BAD_REPORT; k++)
        snprintf(o->bad_msg[k], sizeof o->bad_msg[k], "%s", st.bad[k]);
    sl_pipeline_destroy(p);
}

Test(pipeline_decode_alone, batches_same_for_any_workers_and_huffman_decoder)
{
    img opt[2];
    optimized(opt);
    img s2 = std_jpeg(173, 131, 0, TJSAMP_420, 2, 21), s90 = std_jpeg(140, 100, 0, TJSAMP_420, 90, 22);
    img g = std_jpeg(99, 120, 1, 0, 90, 23), s75 = std_jpeg(150, 97, 0, TJSAMP_422, 75, 24);
    img bare[3], noq, none, fill = {NULL, 0};
    bare[0].p = hi_strip(s2.p, s2.len, 0xC4, &bare[0].len);
    bare[1].p = hi_strip(g.p, g.len, 0xC4, &bare[1].len);
    bare[2].p = hi_strip(s75.p, s75.len, 0xC4, &bare[2].len);
    noq.p = hi_strip(s90.p, s90.len, 0xDB, &noq.len);
    none.p = hi_strip(noq.p, noq.len, 0xC4, &none.len);
    fill.p = hi_fill_ff00(s90.p, s90.len, s90.len / 4, &fill.len);
    cr_assert_not_null(fill.p);
    /* Abbreviated files right after optimized ones, twice over: 20
     * records, 3 bad (no DQT, no tables, fill bytes). */
    const img rec[] = {opt[0], bare[0], opt[1], bare[1], s90,  bare[2], noq,  opt[0], bare[0], g,
                       none,   opt[1],  bare[2], s2,     fill, opt[0],  bare[1], s75,  opt[1], bare[0]};
    const size_t nrec = sizeof rec / sizeof rec[0];
    const int bad_ids[3] = {6, 10, 14};
    char *dir = tu_tmpdir(), *shard = write_shard(dir, rec, nrec);

    run_out ref, o;
    run(shard, 1, 0, &ref);
    cr_assert_eq(ref.bad, 2 * 3, "3 bad records, two epochs");
    for (int i = 0; i < 3; i++) {
        char at[64];
        snprintf(at, sizeof at, "record %d @", bad_ids[i]);
        int hit = 0;
        for (int k = 0; k < 6; k++)
            hit |= strstr(ref.bad_msg[k], "mixed-00000-of-00001.tfrecord") &&
                   strstr(ref.bad_msg[k], at) != NULL;
        cr_assert(hit, "record %d not named; first report: %s", bad_ids[i], ref.bad_msg[0]);
    }
    /* bad records' slots are refilled with the next good records */
    cr_assert_eq(ref.len, nrec * 2 * (24 * 32 * 3 * sizeof(float) + 4 + 8), "%zu bytes", ref.len);
    static const struct {
        unsigned workers;
        int libjpeg;
    } runs[] = {{1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 1}, {2, 0}, {3, 0}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        run(shard, runs[k].workers, runs[k].libjpeg, &o);
        cr_assert_eq(o.bad, ref.bad, "run %zu", k);
        cr_assert_eq(o.len, ref.len, "run %zu", k);
        cr_assert(!memcmp(o.bytes, ref.bytes, ref.len), "%u workers, %s Huffman decoder: other "
                  "batches than 1 worker with huff.c", runs[k].workers,
                  runs[k].libjpeg ? "libjpeg's" : "huff.c's");
        free(o.bytes);
    }
    free(ref.bytes);
    tu_rmrf(dir);
    free(dir);
    free(shard);
    const img *own[] = {&s2, &s90, &g, &s75, &bare[0], &bare[1], &bare[2], &noq, &none, &fill,
                        &opt[0], &opt[1]};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        free(own[i]->p);
}

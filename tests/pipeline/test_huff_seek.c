/* tests/pipeline/test_huff_seek.c - restart intervals (issue 41): the
 * planar path reads only the intervals a crop needs (pipeline/image/huff.c's
 * sl_huff_seek), with huff.c's decoder and around libjpeg's
 * (SLUICE_HUFF=libjpeg).
 *
 * The planes must be the bytes of a decode from the start: on the photos
 * of tests/data/photos and on synthetic images at every chroma sampling
 * and as gray, re-written with restart markers by records/restart.c at
 * intervals of 1, 2, 3, 7, 16 MCUs, the default, 1 and 2 MCU rows, and
 * encoded with markers by libjpeg's compressor directly (as other
 * encoders write them), for random crops at every DCT scale: huff.c's
 * seek = libjpeg's seek = libjpeg from the start (SLUICE_SEEK=off) = the
 * original file without markers through today's path. A bad restart
 * sequence (a marker missing, out of order, one too many, an interval
 * cut short or with bytes left over) is refused, by the structure check
 * or by both decoders alike, and in a pipeline it is a bad record named
 * by file and record while the good records' batches stay those of the
 * files without markers.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h> /* before jpeglib.h */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

#include "hostile_images.h"
#include "pipeline/image/image.h"
#include "photos.h"
#include "pipeline_testdata.h"
#include "testutil.h"

enum { HUFF, LIBJPEG, NOSEEK, NDEC };

static sl_decoder *decoder(int mode)
{
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_DECODE");
    unsetenv("SLUICE_SEEK");
    if (mode == LIBJPEG)
        cr_assert_eq(setenv("SLUICE_HUFF", "libjpeg", 1), 0);
    if (mode == NOSEEK)
        cr_assert_eq(setenv("SLUICE_SEEK", "off", 1), 0);
    sl_decoder *d;
    cr_assert_eq(sl_decoder_create(&d), SL_OK);
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_SEEK");
    return d;
}

/* jpeg with restart markers by records/restart.c (malloc'd). */
static uint8_t *with_restarts(sl_jpeg_restarter *r, const uint8_t *jpeg, size_t len,
                              unsigned mcus, unsigned rows, size_t *out_len)
{
    const uint8_t *o;
    sl_restart_info info;
    cr_assert_eq(sl_jpeg_restart(r, jpeg, len, mcus, rows, &o, out_len, &info), SL_OK, "%s",
                 sl_errmsg());
    cr_assert(info.rewritten, "not rewritten: %s", info.why);
    cr_assert_gt(info.markers, 0);
    uint8_t *p = malloc(*out_len);
    cr_assert_not_null(p);
    memcpy(p, o, *out_len);
    return p;
}

/* rgb (or gray, comps 1) encoded by libjpeg's compressor with a restart
 * interval of mcus MCUs or rows MCU rows, sampling h x v for luma:
 * markers as other encoders write them. malloc'd. */
static uint8_t *encode_rst(const uint8_t *px, int W, int H, int comps, int h, int v, int q,
                           unsigned mcus, unsigned rows, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = (JDIMENSION)W;
    c.image_height = (JDIMENSION)H;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, q, TRUE);
    if (comps == 3) {
        c.comp_info[0].h_samp_factor = h;
        c.comp_info[0].v_samp_factor = v;
    }
    c.restart_interval = mcus;
    c.restart_in_rows = (int)rows;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * W * comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *p = malloc(n);
    cr_assert_not_null(p);
    memcpy(p, buf, n);
    free(buf);
    *len = n;
    return p;
}

/* Noise on colour fields (many nonzero AC coefficients). */
static uint8_t *synth(int W, int H, int comps, uint64_t seed)
{
    uint8_t *p = malloc((size_t)W * H * comps);
    cr_assert_not_null(p);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < comps; c++) {
                int v = ((x / (7 + c) + y / 11) & 1 ? 170 : 60) + (int)(tu_rand(&seed) % 61) - 30;
                p[((size_t)y * W + x) * comps + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* Planes of one crop; rc. Copied out (the views die with the next call). */
typedef struct planes {
    int n, w[3], h[3];
    uint8_t *p[3];
} planes;

static int get_planes(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *c, int ow,
                      int oh, planes *out)
{
    sl_plane_view v[3];
    memset(out, 0, sizeof *out);
    int rc = sl_decode_crop_planes(d, jpeg, len, c, ow, oh, v, &out->n);
    if (rc)
        return rc;
    for (int k = 0; k < out->n; k++) {
        out->w[k] = v[k].w;
        out->h[k] = v[k].h;
        out->p[k] = malloc((size_t)v[k].w * v[k].h + 1);
        cr_assert_not_null(out->p[k]);
        for (int y = 0; y < v[k].h; y++)
            memcpy(out->p[k] + (size_t)y * v[k].w, v[k].p + (size_t)y * v[k].pitch,
                   (size_t)v[k].w);
    }
    return SL_OK;
}

static void free_planes(planes *p)
{
    for (int k = 0; k < 3; k++)
        free(p->p[k]);
}

static void assert_same(const planes *a, const planes *b, const char *what, const sl_crop *c,
                        const char *who)
{
    cr_assert_eq(a->n, b->n, "%s: %s: planes", what, who);
    for (int k = 0; k < a->n; k++) {
        cr_assert(a->w[k] == b->w[k] && a->h[k] == b->h[k], "%s: %s: plane %d size", what, who, k);
        cr_assert(!memcmp(a->p[k], b->p[k], (size_t)a->w[k] * a->h[k]),
                  "%s: crop %dx%d at (%d,%d): %s: plane %d differs", what, c->w, c->h, c->x, c->y,
                  who, k);
    }
}

/* orig (no markers) and rst (the same coefficients with markers): for n
 * random crops and the corners, every decoder's planes of rst are those
 * of orig through today's path. */
static void same_as_original(sl_decoder *dec[NDEC], const uint8_t *orig, size_t olen,
                             const uint8_t *rst, size_t rlen, int n, uint64_t seed,
                             const char *what)
{
    int W, H, W2, H2;
    unsigned fl = 0;
    cr_assert_eq(sl_decoder_header(dec[HUFF], orig, olen, &W, &H, NULL), SL_OK, "%s: %s", what,
                 sl_errmsg());
    cr_assert_eq(sl_decoder_header(dec[HUFF], rst, rlen, &W2, &H2, &fl), SL_OK, "%s: %s", what,
                 sl_errmsg());
    cr_assert(W == W2 && H == H2);
    cr_assert(fl & SL_JPEG_RESTART, "%s: no restart markers found", what);
    for (int i = 0; i < n + 3; i++) {
        sl_crop c;
        if (i == n)
            c = (sl_crop){0, 0, W, H};
        else if (i == n + 1)
            c = (sl_crop){W - W / 3 - 1, 0, W / 3 + 1, H / 3 + 1};
        else if (i == n + 2)
            c = (sl_crop){W / 2, H - H / 4 - 1, W / 5 + 1, H / 4 + 1};
        else {
            sl_rng rng = sl_rng_for(seed, 0, (uint64_t)i);
            sl_rrc_geometry(&rng, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
        }
        int ow = 224, oh = 224;
        if (i % 3 == 1) { /* DCT scales below 8/8 */
            ow = c.w / (2 + i % 9) + 1;
            oh = c.h / (2 + i % 7) + 1;
        }
        planes ref, got;
        cr_assert_eq(get_planes(dec[HUFF], orig, olen, &c, ow, oh, &ref), SL_OK, "%s: %s", what,
                     sl_errmsg());
        static const char *const who[NDEC] = {"huff.c seek", "libjpeg seek",
                                               "libjpeg from the start"};
        for (int m = 0; m < NDEC; m++) {
            cr_assert_eq(get_planes(dec[m], rst, rlen, &c, ow, oh, &got), SL_OK, "%s: %s: %s",
                         what, who[m], sl_errmsg());
            assert_same(&ref, &got, what, &c, who[m]);
            free_planes(&got);
        }
        free_planes(&ref);
    }
}

static const struct {
    unsigned mcus, rows;
} intervals[] = {{1, 0}, {2, 0}, {3, 0}, {7, 0}, {16, 0}, {SL_RESTART_AUTO, 0}, {0, 1}, {0, 2}};
#define NINTERVALS (sizeof intervals / sizeof intervals[0])

Test(pipeline_huff_seek, photos_with_markers_decode_as_the_originals)
{
    sl_decoder *dec[NDEC];
    for (int m = 0; m < NDEC; m++)
        dec[m] = decoder(m);
    sl_jpeg_restarter *r;
    cr_assert_eq(sl_jpeg_restarter_create(&r), SL_OK);
    static const char *const names[] = {"fruits.jpg", "building.jpg", "messi5.jpg"};
    for (size_t f = 0; f < 3; f++) {
        size_t len;
        uint8_t *orig = read_photo(names[f], &len);
        for (size_t k = 0; k < NINTERVALS; k++) {
            size_t rl;
            uint8_t *rst = with_restarts(r, orig, len, intervals[k].mcus, intervals[k].rows, &rl);
            char what[96];
            snprintf(what, sizeof what, "%s, interval %u MCUs / %u rows", names[f],
                     intervals[k].mcus, intervals[k].rows);
            same_as_original(dec, orig, len, rst, rl, 12, 41 + f, what);
            free(rst);
        }
        free(orig);
    }
    sl_jpeg_restarter_destroy(r);
    for (int m = 0; m < NDEC; m++)
        sl_decoder_destroy(dec[m]);
}

Test(pipeline_huff_seek, every_sampling_and_gray_and_other_encoders)
{
    sl_decoder *dec[NDEC];
    for (int m = 0; m < NDEC; m++)
        dec[m] = decoder(m);
    sl_jpeg_restarter *r;
    cr_assert_eq(sl_jpeg_restarter_create(&r), SL_OK);
    /* luma h x v (chroma 1x1): 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1; and gray */
    static const int samp[][3] = {{1, 1, 3}, {2, 1, 3}, {2, 2, 3}, {1, 2, 3}, {4, 1, 3}, {1, 1, 1}};
    for (size_t s = 0; s < sizeof samp / sizeof samp[0]; s++) {
        int W = 203 + 37 * (int)s, H = 141 + 19 * (int)s, comps = samp[s][2];
        uint8_t *px = synth(W, H, comps, 7 + s);
        size_t ol;
        uint8_t *orig = encode_rst(px, W, H, comps, samp[s][0], samp[s][1], 85, 0, 0, &ol);
        for (size_t k = 0; k < NINTERVALS; k++) {
            size_t rl;
            uint8_t *rst = with_restarts(r, orig, ol, intervals[k].mcus, intervals[k].rows, &rl);
            char what[96];
            snprintf(what, sizeof what, "%dx%d, %dx%d sampling, %d comps, rewritten %u/%u", W, H,
                     samp[s][0], samp[s][1], comps, intervals[k].mcus, intervals[k].rows);
            same_as_original(dec, orig, ol, rst, rl, 8, 100 + s, what);
            free(rst);
        }
        /* markers from the encoder itself (libjpeg's compressor, standard
         * tables): the same coefficients as orig */
        static const unsigned enc[][2] = {{1, 0}, {5, 0}, {0, 1}, {0, 3}};
        for (size_t k = 0; k < 4; k++) {
            size_t rl;
            uint8_t *rst = encode_rst(px, W, H, comps, samp[s][0], samp[s][1], 85, enc[k][0],
                                      enc[k][1], &rl);
            char what[96];
            snprintf(what, sizeof what, "%dx%d, %dx%d sampling, encoded with %u/%u", W, H,
                     samp[s][0], samp[s][1], enc[k][0], enc[k][1]);
            same_as_original(dec, orig, ol, rst, rl, 8, 200 + s, what);
            free(rst);
        }
        free(orig);
        free(px);
    }
    sl_jpeg_restarter_destroy(r);
    for (int m = 0; m < NDEC; m++)
        sl_decoder_destroy(dec[m]);
}

/* ------------------------------------------------------ bad sequences */

/* Offsets of the RST markers in a file (the FF of each). */
static size_t find_rst(const uint8_t *p, size_t len, size_t *at, size_t cap)
{
    size_t n = 0, sos = 0;
    for (size_t i = 2; i + 1 < len; i++)
        if (p[i] == 0xFF && p[i + 1] == 0xDA) {
            sos = i;
            break;
        }
    for (size_t i = sos; i + 1 < len && n < cap; i++)
        if (p[i] == 0xFF && p[i + 1] >= 0xD0 && p[i + 1] <= 0xD7)
            at[n++] = i;
    return n;
}

/* p with bytes [at, at + cut) replaced by ins (nins bytes). malloc'd. */
static uint8_t *splice(const uint8_t *p, size_t len, size_t at, size_t cut, const uint8_t *ins,
                       size_t nins, size_t *out)
{
    *out = len - cut + nins;
    uint8_t *q = malloc(*out);
    cr_assert_not_null(q);
    memcpy(q, p, at);
    if (nins)
        memcpy(q + at, ins, nins);
    memcpy(q + at + nins, p + at + cut, len - at - cut);
    return q;
}

/* Whole-image planes by every decoder: all refuse (SL_EIMAGE). */
static void all_refuse(sl_decoder *dec[NDEC], const uint8_t *p, size_t len, const char *what,
                       const char *needle)
{
    int W = 0, H = 0;
    int rh = sl_decoder_header(dec[HUFF], p, len, &W, &H, NULL);
    if (rh != SL_OK) {
        cr_assert_eq(rh, SL_EIMAGE, "%s", what);
        if (needle)
            cr_assert(strstr(sl_errmsg(), needle), "%s: message '%s' lacks '%s'", what,
                      sl_errmsg(), needle);
        return;
    }
    cr_assert_null(needle, "%s: the structure check took it", what);
    sl_crop c = {0, 0, W, H};
    for (int m = 0; m < NDEC; m++) {
        planes got;
        int rc = get_planes(dec[m], p, len, &c, 224, 224, &got);
        cr_assert_eq(rc, SL_EIMAGE, "%s: decoder %d decodes it (%d)", what, m, rc);
        free_planes(&got);
    }
}

Test(pipeline_huff_seek, bad_restart_sequences_are_refused)
{
    sl_decoder *dec[NDEC];
    for (int m = 0; m < NDEC; m++)
        dec[m] = decoder(m);
    int W = 160, H = 96;
    uint8_t *px = synth(W, H, 3, 5);
    size_t len;
    uint8_t *j = encode_rst(px, W, H, 3, 2, 2, 90, 3, 0, &len); /* 10x6 MCUs: 20 intervals */
    size_t at[64];
    size_t n = find_rst(j, len, at, 64);
    cr_assert_eq(n, 19);
    size_t bl;
    uint8_t *b;
    /* a marker out of order: RST2 where RST1 belongs */
    b = splice(j, len, at[1] + 1, 1, (const uint8_t[]){0xD2}, 1, &bl);
    all_refuse(dec, b, bl, "out of order", "where RST1 was expected");
    free(b);
    /* a marker missing (its 2 bytes gone: the intervals' data join) */
    b = splice(j, len, at[8], 2, NULL, 0, &bl);
    all_refuse(dec, b, bl, "missing", "RST");
    free(b);
    /* the last marker missing: every number still in turn, one interval short */
    b = splice(j, len, at[18], 2, NULL, 0, &bl);
    all_refuse(dec, b, bl, "last missing", "restart interval");
    free(b);
    /* eight markers gone with their intervals' data (the numbers in turn
     * again): the count says it */
    b = splice(j, len, at[4], at[12] - at[4], NULL, 0, &bl);
    all_refuse(dec, b, bl, "eight missing", "restart interval");
    free(b);
    /* a marker inside an interval, numbered as the next one */
    {
        size_t mid = (at[5] + at[6]) / 2;
        while (j[mid] == 0xFF || j[mid - 1] == 0xFF)
            mid++;
        uint8_t ins[2] = {0xFF, (uint8_t)(0xD0 + 6)};
        b = splice(j, len, mid, 0, ins, 2, &bl);
        all_refuse(dec, b, bl, "one too many", "RST");
        free(b);
    }
    /* an interval cut short (its last bytes gone, markers right): the
     * decoders that read it run into the marker */
    {
        size_t cut = 3;
        b = splice(j, len, at[9] - cut, cut, NULL, 0, &bl);
        all_refuse(dec, b, bl, "cut short", NULL);
        free(b);
    }
    /* bytes left over at an interval's end: read in one go, the marker is
     * not where the interval ends */
    {
        uint8_t junk[3] = {0x12, 0x34, 0x56};
        b = splice(j, len, at[9], 0, junk, 3, &bl);
        all_refuse(dec, b, bl, "bytes left over", NULL);
        free(b);
    }
    free(j);
    free(px);
    for (int m = 0; m < NDEC; m++)
        sl_decoder_destroy(dec[m]);
}

/* ------------------------------------------------------------ pipeline */

/* Every batch of two epochs (pipeline_testdata.h's collector: samples,
 * labels, ids), and the bad records' reports. */
typedef struct run_out {
    pl_run r;
    uint64_t bad;
    char bad_msg[4][SL_ERRMSG_MAX];
} run_out;

static void run(const char *shard, unsigned workers, int mode, run_out *o)
{
    sl_pipeline_config c = SL_PIPELINE_CONFIG_INIT;
    c.data = shard;
    c.transform = SL_TRANSFORM_TRAIN;
    c.shuffle = SL_SHUFFLE_BUFFER;
    c.shuffle_buffer = 4;
    c.seed = 41;
    c.epochs = 2;
    c.height = 40;
    c.width = 48;
    c.layout = SL_LAYOUT_NCHW_F32;
    c.batch = 3;
    c.readers = 1;
    c.workers = workers;
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_SEEK");
    if (mode == LIBJPEG)
        cr_assert_eq(setenv("SLUICE_HUFF", "libjpeg", 1), 0);
    if (mode == NOSEEK)
        cr_assert_eq(setenv("SLUICE_SEEK", "off", 1), 0);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_SEEK");
    memset(o, 0, sizeof *o);
    pl_collect(p, &o->r, SIZE_MAX, 1);
    cr_assert_eq(o->r.end_rc, SL_EOF, "%s", sl_errmsg());
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    o->bad = st.bad_records;
    for (uint64_t k = 0; k < st.bad_records && k < 4 && k < SL_PIPELINE_MAX_BAD_REPORT; k++)
        snprintf(o->bad_msg[k], sizeof o->bad_msg[k], "%s", st.bad[k]);
    sl_pipeline_destroy(p);
}

/* The same batches, sample bytes included. */
static int same_run(const pl_run *a, const pl_run *b)
{
    return a->nb == b->nb && a->ns == b->ns &&
           !memcmp(a->digest, b->digest, a->nb * sizeof *a->digest) &&
           !memcmp(a->data, b->data, a->ns * a->sample_bytes);
}

Test(pipeline_huff_seek, pipeline_batches_same_as_without_markers_bad_record_named)
{
    sl_jpeg_restarter *r;
    cr_assert_eq(sl_jpeg_restarter_create(&r), SL_OK);
    enum { N = 9 };
    const uint8_t *orig[N], *rst[N];
    size_t olen[N], rlen[N];
    static const char *const names[] = {"fruits.jpg", "building.jpg", "messi5.jpg"};
    for (int i = 0; i < N; i++) {
        uint8_t *o = read_photo(names[i % 3], &olen[i]);
        orig[i] = o;
        rst[i] = with_restarts(r, o, olen[i], i < 3 ? SL_RESTART_AUTO : (unsigned)(i - 2) * (i % 2),
                               i >= 3 && i % 2 == 0 ? 1 : 0, &rlen[i]);
    }
    char *dir = tu_tmpdir();
    char *a = hi_write_shard(dir, "plain-00000-of-00001.tfrecord", orig, olen, N);
    char *b = hi_write_shard(dir, "rst-00000-of-00001.tfrecord", rst, rlen, N);
    run_out ref, o;
    run(a, 1, HUFF, &ref);
    cr_assert_eq(ref.bad, 0);
    cr_assert_eq(ref.r.ns, 2 * N);
    static const struct {
        unsigned workers;
        int mode;
    } runs[] = {{1, HUFF}, {2, HUFF}, {2, LIBJPEG}, {1, NOSEEK}};
    for (size_t k = 0; k < 4; k++) {
        run(b, runs[k].workers, runs[k].mode, &o);
        cr_assert_eq(o.bad, 0, "%s", o.bad_msg[0]);
        cr_assert(same_run(&o.r, &ref.r), "run %zu (%u workers, mode %d): other batches than "
                  "the files without markers", k, runs[k].workers, runs[k].mode);
        pl_run_free(&o.r);
    }
    /* record 4 with a marker out of order: a bad record, named */
    size_t at[8];
    cr_assert_geq(find_rst(rst[4], rlen[4], at, 8), 3);
    uint8_t *bad = (uint8_t *)rst[4];
    bad[at[2] + 1] = 0xD7;
    char *c = hi_write_shard(dir, "bad-00000-of-00001.tfrecord", rst, rlen, N);
    for (int mode = HUFF; mode <= LIBJPEG; mode++) {
        run(c, 2, mode, &o);
        cr_assert_eq(o.bad, 2, "one bad record in each of two epochs");
        cr_assert(strstr(o.bad_msg[0], "bad-00000-of-00001.tfrecord") &&
                  strstr(o.bad_msg[0], "record 4 @") && strstr(o.bad_msg[0], "RST7"),
                  "report: %s", o.bad_msg[0]);
        pl_run_free(&o.r);
    }
    pl_run_free(&ref.r);
    tu_rmrf(dir);
    free(dir);
    free(a);
    free(b);
    free(c);
    for (int i = 0; i < N; i++) {
        free((void *)orig[i]);
        free((void *)rst[i]);
    }
    sl_jpeg_restarter_destroy(r);
}

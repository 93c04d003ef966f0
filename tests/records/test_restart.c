/* tests/records/test_restart.c - restart markers written losslessly
 * (records/restart.c, issue 41), on JPEGs of many encoders.
 *
 * The corpus is made by tests/data/encoders.sh from the camera photos of
 * tests/data/photos: cjpeg (default, optimized, progressive, arithmetic,
 * 4:2:2, 4:4:4 q100, gray, float DCT, one with markers already), jpegtran
 * (optimized, progressive, arithmetic), ImageMagick (4:2:0, 4:4:4,
 * progressive, gray, odd size), Pillow (4:4:4, optimized progressive, odd
 * size 4:2:0, EXIF + ICC) and ffmpeg's MJPEG encoder (4:2:0, 4:2:2, 4:4:4).
 * For each file and several intervals: the rewrite decodes (libjpeg-turbo,
 * TurboJPEG, full size, RGB and the file's own planes) to the original's
 * very pixels; it is one baseline Huffman scan with the interval asked for
 * and the markers sl_jpeg_scan finds, numbered and counted right; the
 * APPn/COM segments are there byte for byte; a file with markers already
 * is kept as it is. And `sluice convert --restart` stores such files,
 * says so in its summary, and sluice verify / inspect / index count them.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "records/records.h"
#include "testutil.h"

static char *corpus(void)
{
    char *dir = tu_tmpdir(), *out = NULL;
    int st = tu_run(&out, "%s/tests/data/encoders.sh %s/enc", SLUICE_SOURCE_DIR, dir);
    cr_assert_eq(st, 0, "tests/data/encoders.sh failed: %s", out ? out : "");
    free(out);
    return dir;
}

/* Full-size decode of jpeg: RGB, and the planes as stored (YUV, no
 * upsampling), malloc'd. */
static void decode(tjhandle tj, const uint8_t *jpeg, size_t len, uint8_t **rgb, size_t *rgb_len,
                   uint8_t **yuv, size_t *yuv_len, const char *what)
{
    int w, h, ss, cs;
    cr_assert_eq(tjDecompressHeader3(tj, jpeg, (unsigned long)len, &w, &h, &ss, &cs), 0, "%s: %s",
                 what, tjGetErrorStr2(tj));
    *rgb_len = (size_t)w * h * 3;
    *rgb = malloc(*rgb_len);
    cr_assert_not_null(*rgb);
    cr_assert_eq(tjDecompress2(tj, jpeg, (unsigned long)len, *rgb, w, 0, h, TJPF_RGB, 0), 0,
                 "%s: %s", what, tjGetErrorStr2(tj));
    *yuv_len = tjBufSizeYUV2(w, 1, h, ss);
    *yuv = malloc(*yuv_len);
    cr_assert_not_null(*yuv);
    cr_assert_eq(tjDecompressToYUV2(tj, jpeg, (unsigned long)len, *yuv, w, 1, h, 0), 0, "%s: %s",
                 what, tjGetErrorStr2(tj));
}

/* The frame marker (SOFn) of a file. */
static int frame_marker(const uint8_t *p, size_t len)
{
    for (size_t i = 2; i + 3 < len;) {
        if (p[i] != 0xFF)
            return -1;
        int m = p[i + 1];
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC)
            return m;
        i += 2 + ((size_t)p[i + 2] << 8 | p[i + 3]);
    }
    return -1;
}

/* Does needle (n bytes) occur in p? */
static int contains(const uint8_t *p, size_t len, const void *needle, size_t n)
{
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(p + i, needle, n))
            return 1;
    return 0;
}

Test(records_restart, many_encoders_same_pixels)
{
    char *dir = corpus(), *enc = tu_join(dir, "enc");
    DIR *d = opendir(enc);
    cr_assert_not_null(d);
    tjhandle tj = tjInitDecompress();
    sl_jpeg_restarter *r;
    cr_assert_eq(sl_jpeg_restarter_create(&r), SL_OK);
    static const struct {
        unsigned mcus, rows;
    } iv[] = {{SL_RESTART_AUTO, 0}, {1, 0}, {5, 0}, {0, 1}};
    size_t files = 0, rewritten = 0, progressive = 0, arith = 0, kept = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".jpg"))
            continue;
        char *path = tu_join(enc, e->d_name);
        size_t len;
        uint8_t *orig = tu_read_file(path, &len);
        cr_assert_not_null(orig, "%s", path);
        files++;
        uint8_t *rgb0, *yuv0;
        size_t nrgb0, nyuv0;
        decode(tj, orig, len, &rgb0, &nrgb0, &yuv0, &nyuv0, e->d_name);
        int sof0 = frame_marker(orig, len);
        for (size_t k = 0; k < sizeof iv / sizeof iv[0]; k++) {
            const uint8_t *out;
            size_t olen;
            sl_restart_info info;
            cr_assert_eq(sl_jpeg_restart(r, orig, len, iv[k].mcus, iv[k].rows, &out, &olen, &info),
                         SL_OK, "%s: %s", e->d_name, sl_errmsg());
            if (strstr(e->d_name, "-cjpeg-rst")) { /* markers already: kept */
                cr_assert(!info.rewritten && out == orig && olen == len, "%s", e->d_name);
                cr_assert(strstr(info.why, "restart interval"), "%s: %s", e->d_name, info.why);
                kept += k == 0;
                continue;
            }
            cr_assert(info.rewritten, "%s: kept: %s", e->d_name, info.why);
            rewritten += k == 0;
            progressive += k == 0 && sof0 == 0xC2;
            arith += k == 0 && (sof0 == 0xC9 || sof0 == 0xCA);
            char what[300];
            snprintf(what, sizeof what, "%s rewritten (%u MCUs / %u rows)", e->d_name, iv[k].mcus,
                     iv[k].rows);
            /* one baseline (or extended) Huffman scan */
            int sof = frame_marker(out, olen);
            cr_assert(sof == 0xC0 || sof == 0xC1, "%s: frame FF%02X", what, sof);
            /* its markers: found, in turn and counted (sl_jpeg_scan checks) */
            sl_jpeg_restarts rs = {0};
            unsigned fl = 0;
            cr_assert_eq(sl_jpeg_scan_restarts(out, olen, &fl, &rs), SL_OK, "%s: %s", what,
                         sl_errmsg());
            cr_assert_eq(rs.scans, 1, "%s", what);
            cr_assert_eq(rs.n, info.markers + 1, "%s: %zu intervals, %llu markers written", what,
                         rs.n, (unsigned long long)info.markers);
            cr_assert(info.markers > 0 && (fl & SL_JPEG_RESTART), "%s", what);
            cr_assert_eq(rs.interval, info.interval, "%s", what);
            if (iv[k].mcus && iv[k].mcus != SL_RESTART_AUTO)
                cr_assert_eq(info.interval, iv[k].mcus, "%s", what);
            sl_jpeg_restarts_free(&rs);
            /* the same pixels, and the same planes before upsampling */
            uint8_t *rgb1, *yuv1;
            size_t nrgb1, nyuv1;
            decode(tj, out, olen, &rgb1, &nrgb1, &yuv1, &nyuv1, what);
            cr_assert(nrgb0 == nrgb1 && !memcmp(rgb0, rgb1, nrgb0), "%s: other RGB pixels", what);
            cr_assert(nyuv0 == nyuv1 && !memcmp(yuv0, yuv1, nyuv0), "%s: other planes", what);
            free(rgb1);
            free(yuv1);
            /* APPn segments copied */
            if (strstr(e->d_name, "exif-icc")) {
                cr_assert(contains(out, olen, "sluice-test-camera", 18), "%s: EXIF lost", what);
                cr_assert(contains(out, olen, "ICC_PROFILE", 11) &&
                          contains(out, olen, "sluice-icc-test", 15), "%s: ICC lost", what);
            }
            cr_assert_eq(info.bytes_in, len);
            cr_assert_eq(info.bytes_out, olen);
        }
        free(rgb0);
        free(yuv0);
        free(orig);
        free(path);
    }
    closedir(d);
    /* 3 photos x 25 files, of which 3 had markers; 4 kinds were progressive
     * (cjpeg, jpegtran, ImageMagick, Pillow), 2 arithmetic */
    cr_assert_eq(files, 75, "%zu files", files);
    cr_assert_eq(kept, 3);
    cr_assert_eq(rewritten, 72);
    cr_assert_eq(progressive, 12, "%zu progressive", progressive);
    cr_assert_eq(arith, 6, "%zu arithmetic", arith);
    sl_jpeg_restarter_destroy(r);
    tjDestroy(tj);
    tu_rmrf(dir);
    free(enc);
    free(dir);
}

Test(records_restart, kept_and_refused)
{
    sl_jpeg_restarter *r;
    cr_assert_eq(sl_jpeg_restarter_create(&r), SL_OK);
    const uint8_t *out;
    size_t olen;
    sl_restart_info info;
    uint8_t junk[64] = {0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00};
    /* not a JPEG libjpeg reads: kept as it is, with libjpeg's reason */
    cr_assert_eq(sl_jpeg_restart(r, junk, sizeof junk, 4, 0, &out, &olen, &info), SL_OK);
    cr_assert(!info.rewritten && out == junk && olen == sizeof junk);
    cr_assert(strstr(info.why, "libjpeg"), "%s", info.why);
    /* both intervals, or neither: a bad argument */
    cr_assert_eq(sl_jpeg_restart(r, junk, sizeof junk, 4, 1, &out, &olen, &info), SL_EINVAL);
    cr_assert_eq(sl_jpeg_restart(r, junk, sizeof junk, 0, 0, &out, &olen, &info), SL_EINVAL);
    sl_jpeg_restarter_destroy(r);
    sl_jpeg_restarter_destroy(NULL);
}

/* convert --restart over the corpus; verify, inspect and index count. */
Test(records_restart, convert_verify_inspect_index_count_markers)
{
    char *dir = corpus(), *out = NULL;
    int st = tu_run(&out, "cd %s && mkdir -p f/all && cp enc/*.jpg f/all/ && "
                    "%s convert --from folder f --out plain --name train --shards 2 --no-fsync "
                    "--quiet && %s convert --from folder f --out rst --name train --shards 2 "
                    "--no-fsync --quiet --restart auto", dir, tu_sluice(), tu_sluice());
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "restart markers: 72 JPEGs re-written with"), "%s", out);
    cr_assert(strstr(out, "3 kept as they were"), "%s", out);
    free(out);
    st = tu_run(&out, "%s convert --from folder %s/f --out %s/x --name train --restart 4 "
                "--restart-rows 2", tu_sluice(), dir, dir);
    cr_assert_eq(st, 2, "%s", out);
    free(out);
    /* 3 camera files with markers of their own (cjpeg -restart) in both */
    st = tu_run(&out, "%s verify %s/rst && %s verify %s/plain", tu_sluice(), dir, tu_sluice(), dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "75 of 75 records carry restart markers"), "%s", out);
    cr_assert(strstr(out, "3 of 75 records carry restart markers"), "%s", out);
    free(out);
    st = tu_run(&out, "%s inspect %s/rst && %s inspect %s/rst --json", tu_sluice(), dir,
                tu_sluice(), dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "restart markers: 75 of 75 records"), "%s", out);
    const char *j = strstr(out, "\"restart_records\":");
    cr_assert_not_null(j, "%s", out);
    cr_assert_eq(strtol(j + 18, NULL, 10), 75, "%s", out);
    free(out);
    st = tu_run(&out, "rm %s/rst/*.idx && %s index %s/rst", dir, tu_sluice(), dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "75 of 75 records indexed carry restart markers"), "%s", out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

/* A plan cut into tasks (--plan-out, records/convert_planfile.c) carries
 * --restart: the tasks' shards are the one-machine convert's bytes. */
Test(records_restart, plan_tasks_carry_restart)
{
    char *dir = tu_tmpdir(), *out = NULL;
    const char *s = tu_sluice();
    int st = tu_run(&out, "cd %s && mkdir -p in/a && cp %s/tests/data/photos/*.jpg in/a/ && "
                    "%s convert --from folder in --out one --name train --shards 2 --no-fsync "
                    "--quiet --restart 3 && %s convert --from folder in --out two --name train "
                    "--shards 2 --restart 3 --plan-out plan.json --tasks 2 && "
                    "%s convert --plan plan.json --task 1 --tasks 2 && "
                    "%s convert --plan plan.json --task 0 --tasks 2 && "
                    "%s convert --plan plan.json --finish && "
                    "cmp one/train-00000-of-00002.tfrecord two/train-00000-of-00002.tfrecord && "
                    "cmp one/train-00001-of-00002.tfrecord two/train-00001-of-00002.tfrecord && "
                    "%s verify two", dir, SLUICE_SOURCE_DIR, s, s, s, s, s, s);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "3 of 3 records carry restart markers"), "%s", out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

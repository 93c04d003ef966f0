/* tests/pipeline/test_hostile.c - the pipeline on hostile images (issue 16):
 * progressive and arithmetic-coded JPEGs decode to the baseline file's very
 * samples; CMYK, a header claiming 65500 x 65500, a truncated JPEG, an empty
 * image/encoded and a PNG are bad records, skipped and named in the stats;
 * max_pixels bounds the peak memory (measured in forked children). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile_images.h"
#include "pipeline/image/image.h"
#include "testutil.h"

typedef struct hrec {
    uint8_t *img;
    size_t len;
    const char *why;  /* NULL: decodes; else a substring of its bad-record report */
} hrec;

/* One shard (with its .idx) of the given images, labels = record number. */
static char *write_shard(const char *dir, const hrec *r, size_t n)
{
    const uint8_t *img[16];
    size_t len[16];
    cr_assert_leq(n, 16u);
    for (size_t i = 0; i < n; i++)
        img[i] = r[i].img, len[i] = r[i].len;
    return hi_write_shard(dir, "hostile-00000-of-00001.tfrecord", img, len, n);
}

static void config(sl_pipeline_config *c, const char *data)
{
    sl_pipeline_config init = SL_PIPELINE_CONFIG_INIT;
    *c = init;
    c->data = data;
    c->transform = SL_TRANSFORM_EVAL;
    c->shuffle = SL_SHUFFLE_NONE;
    c->height = 32;
    c->width = 40;
    c->layout = SL_LAYOUT_NHWC_U8;
    c->batch = 4;
    c->readers = 1;
    c->workers = 2;
    c->label_offset = 0;
}

enum { R_BASE, R_PROG, R_ARITH, R_PROG_ARITH, R_CMYK, R_HUGE, R_TRUNC, R_EMPTY, R_PNG, R_BASE2,
       R_N };

Test(pipeline_hostile, each_decodes_or_is_reported)
{
    hrec r[R_N];
    memset(r, 0, sizeof r);
    r[R_BASE].img = hi_jpeg_rgb(120, 90, 5, &r[R_BASE].len);
    r[R_PROG].img = hi_jpeg_recode(r[R_BASE].img, r[R_BASE].len, HI_PROGRESSIVE, &r[R_PROG].len);
    r[R_ARITH].img = hi_jpeg_recode(r[R_BASE].img, r[R_BASE].len, HI_ARITHMETIC, &r[R_ARITH].len);
    r[R_PROG_ARITH].img = hi_jpeg_recode(r[R_BASE].img, r[R_BASE].len,
                                         HI_PROGRESSIVE | HI_ARITHMETIC, &r[R_PROG_ARITH].len);
    r[R_CMYK].img = hi_jpeg_cmyk(120, 90, &r[R_CMYK].len);
    r[R_CMYK].why = "CMYK JPEG: not supported";
    r[R_HUGE].img = hi_jpeg_rgb(120, 90, 5, &r[R_HUGE].len);
    hi_patch_size(r[R_HUGE].img, r[R_HUGE].len, 65500, 65500);
    r[R_HUGE].why = "65500x65500 JPEG: more than max_pixels 67108864";
    r[R_TRUNC].img = hi_jpeg_rgb(120, 90, 5, &r[R_TRUNC].len);
    r[R_TRUNC].len /= 2;
    r[R_TRUNC].why = "truncated JPEG";
    r[R_EMPTY].why = "empty JPEG";
    r[R_PNG].img = hi_png(50, 40, 0, &r[R_PNG].len);
    r[R_PNG].why = "not a JPEG file";
    r[R_BASE2].img = hi_jpeg_rgb(120, 90, 5, &r[R_BASE2].len);

    char *dir = tu_tmpdir(), *shard = write_shard(dir, r, R_N);
    sl_pipeline_config c;
    config(&c, shard);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b;
    int rc;
    size_t ns = 0, sb = 0;
    uint64_t ids[R_N];
    uint8_t *data = NULL;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        sb = b->sample_bytes;
        data = realloc(data, (ns + b->n) * sb);
        memcpy(data + ns * sb, b->data, b->n * sb);
        for (unsigned i = 0; i < b->n; i++)
            ids[ns + i] = b->record_ids[i];
        ns += b->n;
        sl_pipeline_release(p, b);
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    /* the eval transform: the bad records are left out, not refilled */
    cr_assert_eq(ns, R_N - 5, "only the good records come out (%zu samples)", ns);
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    sl_pipeline_destroy(p);

    /* Every bad record is named (file and record number) with its reason. */
    for (int i = 0; i < R_N; i++) {
        if (!r[i].why)
            continue;
        char rec[64];
        snprintf(rec, sizeof rec, "record %d @", i);
        int hit = 0;
        for (uint64_t k = 0; k < st.bad_records && k < SL_PIPELINE_MAX_BAD_REPORT; k++)
            hit |= strstr(st.bad[k], "hostile-00000-of-00001.tfrecord") && strstr(st.bad[k], rec) &&
                   strstr(st.bad[k], r[i].why);
        cr_assert(hit, "record %d (%s) is not reported; last report: %s", i, r[i].why,
                  st.bad[st.bad_records < 16 ? st.bad_records - 1 : 15]);
    }
    /* Samples in order: the four codings of one image give one sample. */
    cr_assert_eq(ids[0], R_BASE);
    for (int i = R_PROG; i <= R_PROG_ARITH; i++) {
        cr_assert_eq(ids[i], (uint64_t)i, "record %d decoded in its own slot", i);
        cr_assert(!memcmp(data + (size_t)i * sb, data, sb), "record %d: the baseline's sample", i);
    }
    cr_assert_eq(ids[R_CMYK], R_BASE2, "the bad records' slots closed up, in order");
    cr_assert_eq(st.bad_records, 5, "each bad record counted once: %llu",
                 (unsigned long long)st.bad_records);
    free(data);
    for (int i = 0; i < R_N; i++)
        free(r[i].img);
    tu_rmrf(dir);
    free(dir);
    free(shard);
}

/* ------------------------------------------------------------- memory */

/* Peak RSS growth (KiB) of a pipeline run over data with max_pixels, in a
 * forked child; *bad gets its bad-record count. */
static long run_rss(const char *data, uint64_t max_pixels, uint64_t *bad)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        sl_pipeline_config c;
        config(&c, data);
        c.workers = 1;
        c.max_pixels = max_pixels;
        sl_pipeline *p;
        long out[2] = {-1, -1};
        if (sl_pipeline_create(&c, &p) == SL_OK) {
            sl_batch *b;
            int rc;
            while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
                sl_pipeline_release(p, b);
            sl_pipeline_stats st;
            sl_pipeline_stats_get(p, &st);
            sl_pipeline_destroy(p);
            getrusage(RUSAGE_SELF, &r1);
            if (rc == SL_EOF)
                out[0] = r1.ru_maxrss - r0.ru_maxrss, out[1] = (long)st.bad_records;
        }
        if (write(fds[1], out, sizeof out) != sizeof out)
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    long out[2] = {-1, -1};
    cr_assert_eq(read(fds[0], out, sizeof out), (ssize_t)sizeof out);
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert_geq(out[0], 0, "the run failed");
    *bad = (uint64_t)out[1];
    return out[0];
}

/* A real 2048 x 2048 (2^22 px) progressive JPEG: libjpeg keeps its whole
 * coefficient array (2 bytes a sample, 3 bytes a pixel at 4:2:0) for the
 * run. max_pixels 2^21 refuses it from the header: the peak stays that of a
 * small image; 2^22 decodes it, within the documented 12 bytes a pixel
 * (records.h, SL_MAX_PIXELS_DEFAULT) per worker. */
Test(pipeline_hostile, max_pixels_bounds_peak_memory)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    cr_skip_test("RSS under a sanitizer counts its shadow memory");
#endif
    const int S = 2048;
    hrec r[2];
    size_t blen;
    uint8_t *base = hi_jpeg_rgb(S, S, 7, &blen);
    r[0].img = hi_jpeg_recode(base, blen, HI_PROGRESSIVE, &r[0].len);
    r[0].why = NULL;
    r[1].img = hi_jpeg_rgb(64, 48, 1, &r[1].len);
    free(base);
    char *dir = tu_tmpdir(), *shard = write_shard(dir, r, 2);
    uint64_t bad_small, bad_big;
    long refused = run_rss(shard, (uint64_t)1 << 21, &bad_small);
    long decoded = run_rss(shard, (uint64_t)1 << 22, &bad_big);
    cr_assert_eq(bad_small, 1, "2^21: the big image is a bad record");
    cr_assert_eq(bad_big, 0, "2^22: it decodes");
    long px = (long)1 << 22, bound_kib = 12 * px / 1024;
    cr_log_info("peak RSS growth: refused %ld KiB, decoded %ld KiB, bound %ld KiB", refused,
                decoded, bound_kib);
    cr_assert_lt(decoded, bound_kib, "decoding 2^22 px grew RSS by %ld KiB (bound %ld)", decoded,
                 bound_kib);
    /* the measure sees the decode: at least the coefficients (3 B/px) */
    cr_assert_gt(decoded - refused, 3 * px / 1024 * 3 / 4, "refused %ld KiB, decoded %ld KiB",
                 refused, decoded);
    cr_assert_lt(refused, 3 * px / 1024 / 2, "refused from the header: %ld KiB", refused);
    for (int i = 0; i < 2; i++)
        free(r[i].img);
    tu_rmrf(dir);
    free(dir);
    free(shard);
}

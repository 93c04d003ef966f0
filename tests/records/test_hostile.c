/* tests/records/test_hostile.c - sl_convert_run and the transcoder on hostile
 * images (issue 16): each converts correctly or is listed as skipped with
 * a reason (fatal under strict); nothing is decoded past max_pixels. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"

typedef struct hfile {
    const char *name;
    uint8_t *bytes;
    size_t len;
    const char *skip;  /* NULL: converts; else a substring of the skip reason */
} hfile;

enum { H_BASE, H_PROG, H_ARITH, H_PROG_ARITH, H_CMYK, H_PNG16, H_PALETTE, H_HUGE, H_TRUNC,
       H_EMPTY, H_NFILES };

#define HW 96
#define HH 64

static void make_files(hfile *f)
{
    memset(f, 0, H_NFILES * sizeof *f);
    f[H_BASE].name = "a-base.jpg";
    f[H_BASE].bytes = hi_jpeg_rgb(HW, HH, 3, &f[H_BASE].len);
    f[H_PROG].name = "b-progressive.jpg";
    f[H_PROG].bytes = hi_jpeg_recode(f[H_BASE].bytes, f[H_BASE].len, HI_PROGRESSIVE, &f[H_PROG].len);
    f[H_ARITH].name = "c-arithmetic.jpg";
    f[H_ARITH].bytes = hi_jpeg_recode(f[H_BASE].bytes, f[H_BASE].len, HI_ARITHMETIC, &f[H_ARITH].len);
    f[H_PROG_ARITH].name = "d-progressive-arithmetic.jpg";
    f[H_PROG_ARITH].bytes = hi_jpeg_recode(f[H_BASE].bytes, f[H_BASE].len,
                                           HI_PROGRESSIVE | HI_ARITHMETIC, &f[H_PROG_ARITH].len);
    f[H_CMYK].name = "e-cmyk.jpg";
    f[H_CMYK].bytes = hi_jpeg_cmyk(HW, HH, &f[H_CMYK].len);
    f[H_PNG16].name = "f-16bit.png";
    f[H_PNG16].bytes = hi_png(HW, HH, 0, &f[H_PNG16].len);
    f[H_PALETTE].name = "g-palette.png";
    f[H_PALETTE].bytes = hi_png(HW, HH, 1, &f[H_PALETTE].len);
    f[H_HUGE].name = "h-65500x65500.jpg";
    f[H_HUGE].bytes = hi_jpeg_rgb(HW, HH, 3, &f[H_HUGE].len);
    hi_patch_size(f[H_HUGE].bytes, f[H_HUGE].len, 65500, 65500);
    f[H_HUGE].skip = "65500x65500 = 4290250000 pixels: more than --max-pixels 67108864";
    f[H_TRUNC].name = "i-truncated.jpg";
    f[H_TRUNC].len = f[H_BASE].len / 2;
    f[H_TRUNC].bytes = malloc(f[H_TRUNC].len);
    memcpy(f[H_TRUNC].bytes, f[H_BASE].bytes, f[H_TRUNC].len);
    f[H_TRUNC].skip = "truncated";
    f[H_EMPTY].name = "j-empty.jpg";
    f[H_EMPTY].bytes = malloc(1);
    f[H_EMPTY].skip = "not a JPEG, PNG, BMP, PPM or WebP";
    /* the codings really differ */
    cr_assert_neq(f[H_PROG].bytes[hi_sof_at(f[H_PROG].bytes, f[H_PROG].len) + 1], 0xC0);
    cr_assert_eq(f[H_ARITH].bytes[hi_sof_at(f[H_ARITH].bytes, f[H_ARITH].len) + 1], 0xC9);
    cr_assert_eq(f[H_PROG].bytes[hi_sof_at(f[H_PROG].bytes, f[H_PROG].len) + 1], 0xC2);
    cr_assert_eq(f[H_PROG_ARITH].bytes[hi_sof_at(f[H_PROG_ARITH].bytes, f[H_PROG_ARITH].len) + 1],
                 0xCA);
}

static void free_files(hfile *f)
{
    for (int i = 0; i < H_NFILES; i++)
        free(f[i].bytes);
}

/* DIR/x/<files> (one class). */
static char *write_tree(const char *root, const hfile *f)
{
    char *in = tu_join(root, "in"), *cls = tu_join(in, "x");
    cr_assert_eq(mkdir(in, 0755), 0);
    cr_assert_eq(mkdir(cls, 0755), 0);
    for (int i = 0; i < H_NFILES; i++) {
        char *p = tu_join(cls, f[i].name);
        cr_assert_eq(tu_write_file(p, f[i].bytes, f[i].len), 0);
        free(p);
    }
    free(cls);
    return in;
}

static void config(sl_convert_config *c, const char *in, const char *out, hi_skips *s)
{
    sl_convert_config init = SL_CONVERT_CONFIG_INIT;
    *c = init;
    c->input = in;
    c->out_dir = out;
    c->name = "train";
    c->shards = 1;
    c->threads = 2;
    c->shuffle = 0;
    c->fsync = 0;
    c->skipped = hi_on_skip;
    c->skipped_arg = s;
}

/* The record whose image/filename ends with name. */
static int find(const char *shard, const char *name, uint8_t **img, size_t *len)
{
    sl_tfrecord_reader *r;
    cr_assert_eq(sl_tfrecord_reader_open(shard, &r), SL_OK, "%s", sl_errmsg());
    const uint8_t *d;
    size_t n;
    int found = 0;
    while (!found && sl_tfrecord_reader_next(r, &d, &n) == SL_OK) {
        sl_image_example ex;
        cr_assert_eq(sl_image_example_decode(d, n, &ex), SL_OK);
        size_t nl = strlen(name);
        if (ex.filename_len >= nl && !memcmp(ex.filename + ex.filename_len - nl, name, nl)) {
            *img = malloc(ex.image_len);
            memcpy(*img, ex.image, ex.image_len);
            *len = ex.image_len;
            found = 1;
        }
    }
    sl_tfrecord_reader_close(r);
    return found;
}

static double mad(const uint8_t *a, const uint8_t *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += abs((int)a[i] - (int)b[i]);
    return s / (double)n;
}

Test(hostile, convert_lists_or_converts_each)
{
    hfile f[H_NFILES];
    make_files(f);
    char *root = tu_tmpdir(), *in = write_tree(root, f), *out = tu_join(root, "out");
    hi_skips s = {0};
    sl_convert_config c;
    config(&c, in, out, &s);
    sl_convert_result res;
    cr_assert_eq(sl_convert_run(&c, &res), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(res.inputs, H_NFILES);
    cr_assert_eq(res.skipped, 3, "skipped %llu", (unsigned long long)res.skipped);
    cr_assert_eq(res.records, H_NFILES - 3);
    cr_assert_eq(s.n, 3);
    for (int i = 0; i < H_NFILES; i++)
        if (f[i].skip)
            hi_skips_assert(&s, f[i].name, f[i].skip);

    char shard[4096];
    cr_assert_eq(sl_shard_path(shard, sizeof shard, out, "train", 0, 1), SL_OK);
    int w, h, bw, bh;
    uint8_t *base_px = hi_decode(f[H_BASE].bytes, f[H_BASE].len, &bw, &bh);
    cr_assert_not_null(base_px);
    /* Progressive and arithmetic files are stored byte for byte (TensorFlow
     * decodes them) and decode to the baseline's very pixels. */
    for (int i = H_PROG; i <= H_PROG_ARITH; i++) {
        uint8_t *img;
        size_t len;
        cr_assert(find(shard, f[i].name, &img, &len), "%s converted", f[i].name);
        cr_assert(len == f[i].len && !memcmp(img, f[i].bytes, len), "%s passed through",
                  f[i].name);
        uint8_t *px = hi_decode(img, len, &w, &h);
        cr_assert_not_null(px, "%s decodes", f[i].name);
        cr_assert(w == HW && h == HH && !memcmp(px, base_px, (size_t)HW * HH * 3),
                  "%s: the same pixels as the baseline file", f[i].name);
        free(px);
        free(img);
    }
    /* CMYK and both PNGs: re-encoded RGB JPEGs, close to the source. */
    uint8_t *rgb1 = hi_rgb(HW, HH, 1), *rgb2 = hi_rgb(HW, HH, 2);
    uint8_t *gray = malloc((size_t)HW * HH * 3);
    for (size_t i = 0; i < (size_t)HW * HH; i++)
        memset(gray + 3 * i, rgb2[3 * i], 3);
    const struct { int i; const uint8_t *want; } re[] = {
        {H_CMYK, rgb1}, {H_PNG16, rgb2}, {H_PALETTE, gray}};
    for (size_t k = 0; k < sizeof re / sizeof re[0]; k++) {
        uint8_t *img;
        size_t len;
        cr_assert(find(shard, f[re[k].i].name, &img, &len), "%s converted", f[re[k].i].name);
        uint8_t *px = hi_decode(img, len, &w, &h);
        cr_assert_not_null(px);
        cr_assert(w == HW && h == HH);
        double d = mad(px, re[k].want, (size_t)HW * HH * 3);
        cr_assert_lt(d, 3.0, "%s: mean abs difference %.2f from the source", f[re[k].i].name, d);
        free(px);
        free(img);
    }
    free(rgb1);
    free(rgb2);
    free(gray);
    free(base_px);
    tu_rmrf(root);
    free(root);
    free(in);
    free(out);
    free_files(f);
}

Test(hostile, strict_names_the_first_bad_file)
{
    hfile f[H_NFILES];
    make_files(f);
    char *root = tu_tmpdir(), *in = write_tree(root, f), *out = tu_join(root, "out");
    hi_skips s = {0};
    sl_convert_config c;
    config(&c, in, out, &s);
    c.strict = 1;
    sl_convert_result res;
    cr_assert_eq(sl_convert_run(&c, &res), SL_EIMAGE);
    /* no shuffle: output order is the sorted file order; h- comes first */
    cr_assert(strstr(sl_errmsg(), "h-65500x65500.jpg") && strstr(sl_errmsg(), "max-pixels"), "%s",
              sl_errmsg());
    char shard[4096];
    cr_assert_eq(sl_shard_path(shard, sizeof shard, out, "train", 0, 1), SL_OK);
    struct stat st;
    cr_assert_neq(stat(shard, &st), 0, "no shard under its final name");
    tu_rmrf(root);
    free(root);
    free(in);
    free(out);
    free_files(f);
}

/* max_pixels is inclusive: W x H == max converts, one pixel more does not;
 * the same bound holds in the transcoder for every format. */
Test(hostile, max_pixels_bound_is_exact)
{
    hfile f[H_NFILES];
    make_files(f);
    const uint64_t px = (uint64_t)HW * HH;
    char *root = tu_tmpdir(), *in = write_tree(root, f);
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "out%d", k);
        char *out = tu_join(root, name);
        hi_skips s = {0};
        sl_convert_config c;
        config(&c, in, out, &s);
        c.max_pixels = px - (uint64_t)k;
        sl_convert_result res;
        cr_assert_eq(sl_convert_run(&c, &res), SL_OK, "%s", sl_errmsg());
        /* k = 1: every image but the broken ones is now one pixel too many */
        cr_assert_eq(res.records, k ? 0 : H_NFILES - 3, "max %llu: %llu records",
                     (unsigned long long)c.max_pixels, (unsigned long long)res.records);
        free(out);
    }
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    for (int i = 0; i < H_NFILES; i++) {
        if (f[i].skip)
            continue;
        const uint8_t *j;
        size_t jl;
        int w, h;
        sl_transcoder_set_max_pixels(t, px);
        cr_assert_eq(sl_transcode_jpeg(t, f[i].bytes, f[i].len, 90, 0, &j, &jl, &w, &h), SL_OK,
                     "%s: %s", f[i].name, sl_errmsg());
        sl_transcoder_set_max_pixels(t, px - 1);
        cr_assert_eq(sl_transcode_jpeg(t, f[i].bytes, f[i].len, 90, 0, &j, &jl, &w, &h),
                     SL_EIMAGE, "%s", f[i].name);
        cr_assert(strstr(sl_errmsg(), "max_pixels"), "%s", sl_errmsg());
    }
    /* resize_short decodes at 1/8 but the bound is on the header's size */
    const uint8_t *j;
    size_t jl;
    int w, h;
    sl_transcoder_set_max_pixels(t, 0); /* the default */
    cr_assert_eq(sl_transcode_jpeg(t, f[H_HUGE].bytes, f[H_HUGE].len, 90, 64, &j, &jl, &w, &h),
                 SL_EIMAGE);
    cr_assert(strstr(sl_errmsg(), "65500x65500"), "%s", sl_errmsg());
    sl_transcoder_destroy(t);
    tu_rmrf(root);
    free(root);
    free(in);
    free_files(f);
}

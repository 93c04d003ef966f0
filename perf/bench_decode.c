/*
 * perf/bench_decode.c - what a training sample costs on each decode path,
 * against a plain full decode, one thread.
 *
 *   bench_decode DIR [--reps 5] [--size 224] [--seed 1]
 *
 * DIR is any tree of JPEG files (*.jpg / *.jpeg, e.g.
 * ~/.cache/sluice/corpus-2000-s1 from perf/make-corpus); all are read into
 * memory first. Steps, each over every image, images/s and us per image:
 *   (1) ceiling: tjDecompress2 of the whole image to RGB at full size, what
 *       a plain pipeline pays before it crops;
 *   (2) yuv: a training sample as the pipeline makes it now:
 *       sl_decoder_header, sl_rrc_geometry (0.08-1, 3/4-4/3, rng (seed, 0,
 *       image number), flip from the same stream), sl_decode_crop_sample to
 *       size x size NCHW f32 (decode_yuv.c: raw Y/Cb/Cr planes of the
 *       crop's strip, each resized at its own resolution, RGB at the output);
 *   (3) the same sample in its parts, each timed per image (clock around
 *       each call): (3a) header + geometry (sl_decoder_header checks the
 *       structure, sl_jpeg_scan, and reads the header once, issue 26),
 *       (3b) sl_decode_crop_planes (the libjpeg half, from that header),
 *       (3c) sl_resample_planes (resize + RGB + normalize);
 *   (4) rgb: the same sample with SLUICE_DECODE=rgb (the ROI decode to RGB
 *       with upsampling and colour conversion in libjpeg, then
 *       sl_resample_sample): the reference path, what the pipeline did
 *       before decode_yuv.c;
 *   (5) full: SLUICE_DECODE=full (full-size decode to the end, crop, resize);
 *   (6) sl_jpeg_scan alone: the structure check (2), (4) and (5) include;
 *   (7) yuv-lj: step (2) with SLUICE_HUFF=libjpeg: libjpeg's Huffman
 *       decoder instead of pipeline/image/huff.c's, what (2) was before huff.c
 *       (the same bytes: validation checks it).
 * Method: the same crops in every step and repetition; the steps alternate
 * within each repetition (1, 2, ..., 6, 1, 2, ...) so drifting load on a
 * shared box hits all of them; times are the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), which other processes on a shared box inflate
 * much less than wall time (they still share its caches); figures are
 * medians over the repetitions.
 * Validation before timing: every image decodes on every path; as u8 NHWC
 * outputs, rgb stays close to full (they differ by the DCT-scaled filter
 * and by at most half an output pixel of crop placement, see
 * pipeline/image/decode.c) and yuv close to rgb (chroma filter and conversion
 * order, see pipeline/image/decode_yuv.c); yuv against full is printed too (the
 * planar path keeps the crop's edges exact below DCT scale 8/8, where the
 * rgb path rounds them): mean |diff| per image, and the share of values
 * more than 8 levels apart.
 *
 * Exit: 0 after printing; 1 (with a message) if a check fails.
 */
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <turbojpeg.h>

#include "pipeline/image/image.h"
#include "records/records.h"

#define BENCH_NAME "bench_decode"
#include "bench_util.h"

#define MAX_REPS 64

typedef struct corpus {
    uint8_t **data;
    size_t *size;
    size_t n, cap;
    uint64_t bytes;
} corpus;

static corpus g_corpus;

static int is_jpeg_name(const char *p)
{
    const char *dot = strrchr(p, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

/* nftw callback: read each JPEG file into g_corpus (walk order; the order
 * does not matter, every step sees the same one). */
static int load_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag != FTW_F || !is_jpeg_name(p))
        return 0;
    corpus *c = &g_corpus;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->data = realloc(c->data, c->cap * sizeof *c->data);
        c->size = realloc(c->size, c->cap * sizeof *c->size);
        if (!c->data || !c->size)
            die("out of memory");
    }
    FILE *f = fopen(p, "rb");
    if (!f)
        die("%s: %s", p, strerror(errno));
    size_t n = (size_t)sb->st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        die("out of memory");
    if (fread(buf, 1, n, f) != n)
        die("%s: short read", p);
    fclose(f);
    c->data[c->n] = buf;
    c->size[c->n++] = n;
    c->bytes += n;
    return 0;
}

typedef struct bench {
    const corpus *c;
    tjhandle tj;
    uint8_t *full;            /* tjDecompress2 output, grown to the largest image */
    size_t full_cap;
    sl_decoder *yuv, *rgb, *plain; /* created with SLUICE_DECODE unset, rgb, full */
    sl_decoder *yuvlj;        /* SLUICE_HUFF=libjpeg */
    int size;
    uint64_t seed;
    uint8_t *out;             /* size x size x 3 (u8) or x 4 (f32) */
    double t_head, t_planes, t_resample; /* step (3)'s parts, summed */
} bench;

static const float g_mean[3] = {123.675f, 116.28f, 103.53f};
static const float g_std[3] = {58.395f, 57.12f, 57.375f};

static void tj_decode(bench *b, size_t i)
{
    int w, h, sub, cs;
    if (tjDecompressHeader3(b->tj, b->c->data[i], b->c->size[i], &w, &h, &sub, &cs) != 0)
        die("image %zu: %s", i, tjGetErrorStr2(b->tj));
    size_t need = (size_t)w * h * 3;
    if (need > b->full_cap) {
        free(b->full);
        if (!(b->full = malloc(need)))
            die("out of memory");
        b->full_cap = need;
    }
    if (tjDecompress2(b->tj, b->c->data[i], b->c->size[i], b->full, w, 0, h, TJPF_RGB, 0) != 0)
        die("image %zu: tjDecompress2: %s", i, tjGetErrorStr2(b->tj));
}

/* CPU seconds of the calling thread. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Header and geometry of image i (map.c's transform: crop draws, flip). */
static void geometry(bench *b, sl_decoder *d, size_t i, sl_crop *crop, int *flip)
{
    int w, h;
    if (sl_decoder_header(d, b->c->data[i], b->c->size[i], &w, &h, NULL) != SL_OK)
        die("image %zu: %s", i, sl_errmsg());
    sl_rng r = sl_rng_for(b->seed, 0, i);
    sl_rrc_geometry(&r, w, h, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, crop);
    *flip = sl_rng_uniform(&r) < 0.5f;
}

/* One training sample the pipeline's way, in layout. */
static void sample(bench *b, sl_decoder *d, size_t i, sl_layout layout)
{
    sl_crop crop;
    int flip;
    geometry(b, d, i, &crop, &flip);
    if (sl_decode_crop_sample(d, b->c->data[i], b->c->size[i], &crop, &(sl_out_spec){.w = b->size,
                                                                                     .h = b->size,
                                                                                     .flip = flip,
                                                                                     .layout = layout,
                                                                                     .mean = g_mean,
                                                                                     .std = g_std,
                                                                                     .dst = b->out}) != SL_OK)
        die("image %zu: %s", i, sl_errmsg());
}

/* Step (3): sample() on the yuv path in its parts, each timed. */
static void sample_parts(bench *b, size_t i)
{
    sl_crop crop;
    sl_plane_view pv[3];
    int flip, np;
    double t0 = cpu_s();
    geometry(b, b->yuv, i, &crop, &flip);
    double t1 = cpu_s();
    if (sl_decode_crop_planes(b->yuv, b->c->data[i], b->c->size[i], &crop, b->size, b->size, pv,
                              &np) != SL_OK)
        die("image %zu: %s", i, sl_errmsg());
    double t2 = cpu_s();
    if (sl_resample_planes(pv, np, &(sl_out_spec){.w = b->size, .h = b->size, .flip = flip,
                                                  .layout = SL_LAYOUT_NCHW_F32, .mean = g_mean,
                                                  .std = g_std, .dst = b->out}) != SL_OK)
        die("image %zu: %s", i, sl_errmsg());
    double t3 = cpu_s();
    b->t_head += t1 - t0;
    b->t_planes += t2 - t1;
    b->t_resample += t3 - t2;
}

/* Mean |a - b| over n bytes; *far += values more than 8 apart. */
static double mad(const uint8_t *a, const uint8_t *b, size_t n, size_t *far)
{
    double d = 0;
    for (size_t k = 0; k < n; k++) {
        int e = abs((int)a[k] - (int)b[k]);
        d += e;
        *far += e > 8;
    }
    return d / (double)n;
}

static void validate(bench *b)
{
    size_t n = (size_t)b->size * b->size * 3;
    uint8_t *full = malloc(n), *rgb = malloc(n), *lj = malloc(n);
    if (!full || !rgb || !lj)
        die("out of memory");
    double sum[3] = {0, 0, 0}, worst[3] = {0, 0, 0};
    size_t far[3] = {0, 0, 0};
    for (size_t i = 0; i < b->c->n; i++) {
        tj_decode(b, i);
        sample(b, b->plain, i, SL_LAYOUT_NHWC_U8);
        memcpy(full, b->out, n);
        sample(b, b->rgb, i, SL_LAYOUT_NHWC_U8);
        memcpy(rgb, b->out, n);
        sample(b, b->yuvlj, i, SL_LAYOUT_NHWC_U8);
        memcpy(lj, b->out, n);
        sample(b, b->yuv, i, SL_LAYOUT_NHWC_U8);
        if (memcmp(lj, b->out, n) != 0)
            die("image %zu: huff.c and libjpeg's Huffman decoder give different samples", i);
        double d[3] = {mad(rgb, full, n, &far[0]), mad(b->out, rgb, n, &far[1]),
                       mad(b->out, full, n, &far[2])};
        for (int k = 0; k < 3; k++) {
            sum[k] += d[k];
            worst[k] = d[k] > worst[k] ? d[k] : worst[k];
        }
        if (sl_jpeg_scan(b->c->data[i], b->c->size[i], NULL) != SL_OK)
            die("image %zu: %s", i, sl_errmsg());
    }
    free(full);
    free(rgb);
    free(lj);
    double mean[3] = {sum[0] / (double)b->c->n, sum[1] / (double)b->c->n,
                      sum[2] / (double)b->c->n};
    double all = (double)n * (double)b->c->n;
    printf("validation: %zu images decode on all paths; yuv = yuv-lj byte for byte; u8 outputs,"
           " mean |diff| per image:\n"
           "  rgb vs full: %.2f levels (worst image %.2f), %.3f%% of values > 8 apart\n"
           "  yuv vs rgb:  %.2f levels (worst image %.2f), %.3f%% of values > 8 apart\n"
           "  yuv vs full: %.2f levels (worst image %.2f), %.3f%% of values > 8 apart\n",
           b->c->n, mean[0], worst[0], 100.0 * (double)far[0] / all, mean[1], worst[1],
           100.0 * (double)far[1] / all, mean[2], worst[2], 100.0 * (double)far[2] / all);
    if (mean[0] > 4.0)
        die("rgb output strays from the full path (mean |diff| %.2f > 4)", mean[0]);
    if (mean[1] > 4.0)
        die("yuv output strays from the rgb path (mean |diff| %.2f > 4)", mean[1]);
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int reps = 5, size = 224;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            size = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else
            die("usage: bench_decode DIR [--reps 5] [--size 224] [--seed 1]");
    }
    if (!dir || reps < 1 || reps > MAX_REPS || size < 1 || size > 4096)
        die("usage: bench_decode DIR [--reps 5 (1..%d)] [--size 224] [--seed 1]", MAX_REPS);
    if (nftw(dir, load_entry, 32, FTW_PHYS) != 0)
        die("%s: %s", dir, strerror(errno));
    if (g_corpus.n == 0)
        die("%s: no .jpg/.jpeg files", dir);

    bench b = {.c = &g_corpus, .size = size, .seed = seed};
    if (!(b.tj = tjInitDecompress()))
        die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    if (unsetenv("SLUICE_DECODE") != 0 || sl_decoder_create(&b.yuv) != SL_OK ||
        setenv("SLUICE_DECODE", "rgb", 1) != 0 || sl_decoder_create(&b.rgb) != SL_OK ||
        setenv("SLUICE_DECODE", "full", 1) != 0 || sl_decoder_create(&b.plain) != SL_OK ||
        unsetenv("SLUICE_DECODE") != 0 || setenv("SLUICE_HUFF", "libjpeg", 1) != 0 ||
        sl_decoder_create(&b.yuvlj) != SL_OK || unsetenv("SLUICE_HUFF") != 0)
        die("decoder setup: %s", sl_errmsg());
    unsetenv("SLUICE_DECODE");
    if (!(b.out = malloc((size_t)size * size * 3 * sizeof(float))))
        die("out of memory");

    printf("corpus: %s: %zu JPEGs, %.1f MB; output %dx%d, seed %llu, %d reps, 1 thread\n", dir,
           g_corpus.n, (double)g_corpus.bytes / 1e6, size, size, (unsigned long long)seed, reps);
    validate(&b);

#define NSTEP 7
    double t[NSTEP + 3][MAX_REPS]; /* steps 1..7, then 3a, 3b, 3c */
    size_t n = g_corpus.n;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_s();
        for (size_t i = 0; i < n; i++)
            tj_decode(&b, i);
        double t1 = cpu_s();
        for (size_t i = 0; i < n; i++)
            sample(&b, b.yuv, i, SL_LAYOUT_NCHW_F32);
        double t2 = cpu_s();
        b.t_head = b.t_planes = b.t_resample = 0;
        for (size_t i = 0; i < n; i++)
            sample_parts(&b, i);
        double t3 = cpu_s();
        for (size_t i = 0; i < n; i++)
            sample(&b, b.rgb, i, SL_LAYOUT_NCHW_F32);
        double t4 = cpu_s();
        for (size_t i = 0; i < n; i++)
            sample(&b, b.plain, i, SL_LAYOUT_NCHW_F32);
        double t5 = cpu_s();
        for (size_t i = 0; i < n; i++)
            if (sl_jpeg_scan(g_corpus.data[i], g_corpus.size[i], NULL) != SL_OK)
                die("image %zu: %s", i, sl_errmsg());
        double t6 = cpu_s();
        for (size_t i = 0; i < n; i++)
            sample(&b, b.yuvlj, i, SL_LAYOUT_NCHW_F32);
        double t7 = cpu_s();
        double ts[NSTEP + 3] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6,
                                b.t_head, b.t_planes, b.t_resample};
        for (int k = 0; k < NSTEP + 3; k++)
            t[k][r] = ts[k];
    }
    double us[NSTEP + 3];
    for (int k = 0; k < NSTEP + 3; k++)
        us[k] = 1e6 * median(t[k], reps) / (double)n;
    static const char *what[NSTEP + 3] = {
        "(1) ceiling: tjDecompress2 full decode to RGB     ",
        "(2) yuv: sl_decode_crop_sample, NCHW f32 (now)     ",
        "(3) yuv in parts, per-image clocks (sum)           ",
        "(4) rgb: SLUICE_DECODE=rgb, same samples (before)  ",
        "(5) full: SLUICE_DECODE=full, same samples         ",
        "(6) sl_jpeg_scan alone (inside 2-5)                ",
        "(7) yuv-lj: (2) with libjpeg's Huffman decoder     ",
        "    (3a) sl_decoder_header + geometry              ",
        "    (3b) sl_decode_crop_planes (libjpeg raw planes)",
        "    (3c) sl_resample_planes (resize, RGB, f32)     ",
    };
    us[2] = us[7] + us[8] + us[9];
    for (int k = 0; k < NSTEP + 3; k++)
        printf("%s %9.0f images/s %8.1f us/image\n", what[k], 1e6 / us[k], us[k]);
    printf("ratio (per image, one thread): yuv/ceiling %.2f   yuv/rgb %.2f   rgb/ceiling %.2f   "
           "full/ceiling %.2f   yuv/yuv-lj %.2f\n",
           us[0] / us[1], us[3] / us[1], us[0] / us[3], us[0] / us[4], us[6] / us[1]);

    sl_decoder_destroy(b.yuv);
    sl_decoder_destroy(b.rgb);
    sl_decoder_destroy(b.plain);
    sl_decoder_destroy(b.yuvlj);
    tjDestroy(b.tj);
    free(b.full);
    free(b.out);
    for (size_t i = 0; i < g_corpus.n; i++)
        free(g_corpus.data[i]);
    free(g_corpus.data);
    free(g_corpus.size);
    return 0;
}

/*
 * perf/bench_restart.c - what restart markers cost and buy, one thread
 * (issue 41): per restart interval, the bytes and the convert time of the
 * rewrite (records/restart.c) and a training sample's decode on the files
 * with markers against today's path on the originals and a bare full
 * decode of the originals.
 *
 *   bench_restart DIR [--reps 5] [--size 224] [--seed 1] [--specs auto,1,4,r1] [--only 1]
 *
 * DIR: any tree of JPEG files, read into memory first (perf/make-corpus's
 * corpus, or perf/photo-corpus's large photos). --specs: restart intervals
 * to try, comma-separated: N MCUs, rN MCU rows, auto (SL_RESTART_AUTO),
 * 0 none (the rewrite without markers: what optimized tables alone do).
 * Steps, alternating within each repetition so drifting load hits all
 * (thread CPU time, CLOCK_THREAD_CPUTIME_ID; medians over repetitions):
 *   ceiling  tjDecompress2 of the original to full-size RGB;
 *   today    the sample as the pipeline made it before issue 41 from the
 *            original (sl_decoder_header, sl_rrc_geometry (0.08-1, 3/4-4/3)
 *            and flip from sl_rng_for(seed, 0, i), sl_decode_crop_sample to
 *            size x size NCHW f32, SLUICE_SEEK=off: huff.c, and libjpeg from
 *            the start for files that came with restart markers);
 *   SPEC     the same sample from the file re-written with SPEC's markers
 *            (huff.c's seek).
 * Validation before timing: every file with markers gives the original's
 * sample byte for byte (the pipeline's claim). Printed per spec: the files
 * re-written (others kept: why), the markers and the bytes (total, and the
 * marker bytes), the rewrite's time per image, the sample's time per image
 * and the ratios today / SPEC and ceiling / SPEC.
 *
 * --only 1 times the specs' samples alone (the other figures are then
 * meaningless): for a profiler.
 * Exit: 0 after printing; 1 (with a message) if a check fails.
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <turbojpeg.h>

#include "pipeline/image/image.h"
#include "records/records.h"

#define BENCH_NAME "bench_restart"
#include "bench_util.h"

#define MAX_FILES 100000
#define MAX_SPECS 12

typedef struct blob {
    uint8_t *p;
    size_t len;
} blob;

static blob files[MAX_FILES];
static size_t nfiles;

static int add(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)f;
    size_t n = strlen(path);
    if (type != FTW_F || nfiles == MAX_FILES ||
        !(n > 4 && (!strcasecmp(path + n - 4, ".jpg") || !strcasecmp(path + n - 5, ".jpeg"))))
        return 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    rewind(fp);
    uint8_t *p = malloc((size_t)len);
    if (!p || fread(p, 1, (size_t)len, fp) != (size_t)len)
        die("read failed");
    fclose(fp);
    files[nfiles++] = (blob){p, (size_t)len};
    return 0;
}

static double now_thread(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const float mean[3] = {0.485f * 255, 0.456f * 255, 0.406f * 255};
static const float stdv[3] = {0.229f * 255, 0.224f * 255, 0.225f * 255};

/* One training sample of image i (the pipeline's map step). */
static void sample(sl_decoder *d, const blob *b, size_t i, uint64_t seed, int size, float *out)
{
    int W, H;
    if (sl_decoder_header(d, b->p, b->len, &W, &H, NULL))
        die("%s", sl_errmsg());
    sl_rng rng = sl_rng_for(seed, 0, i);
    sl_crop c;
    sl_rrc_geometry(&rng, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
    int flip = sl_rng_uniform(&rng) < 0.5f;
    if (sl_decode_crop_sample(d, b->p, b->len, &c, &(sl_out_spec){.w = size, .h = size,
                                                                  .flip = flip,
                                                                  .layout = SL_LAYOUT_NCHW_F32,
                                                                  .mean = mean, .std = stdv,
                                                                  .dst = out}))
        die("%s", sl_errmsg());
}

typedef struct spec {
    char name[16];
    unsigned mcus, rows;
    blob *out;                 /* the files with markers (kept ones: the original) */
    size_t rewritten, markers, bytes_in, bytes_out;
    double convert_s;          /* the rewrites, one pass */
    char why[160];
} spec;

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: bench_restart DIR [--reps 5] [--size 224] [--seed 1] [--specs auto,1,4,r1]");
    int reps = 5, size = 224;
    uint64_t seed = 1;
    const char *specs_arg = "auto,1,2,4,8,r1";
    int only = 0; /* --only 1: the specs' samples alone (for a profiler) */
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--size"))
            size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--specs"))
            specs_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--only"))
            only = atoi(argv[i + 1]);
        else
            die("unknown option");
    }
    if (reps < 1)
        reps = 1;
    nftw(argv[1], add, 16, FTW_PHYS);
    if (!nfiles)
        die("no JPEG files");
    spec sp[MAX_SPECS];
    int ns = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", specs_arg);
    for (char *t = strtok(buf, ","); t && ns < MAX_SPECS; t = strtok(NULL, ",")) {
        spec *s = &sp[ns++];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", t);
        if (!strcmp(t, "auto"))
            s->mcus = SL_RESTART_AUTO;
        else if (t[0] == 'r')
            s->rows = (unsigned)atoi(t + 1);
        else
            s->mcus = (unsigned)atoi(t);
        if (!s->mcus && !s->rows)
            s->rows = 65535; /* "0": one interval: the rewrite without markers */
    }
    size_t total = 0;
    for (size_t i = 0; i < nfiles; i++)
        total += files[i].len;

    /* The rewrites, timed once each. */
    sl_jpeg_restarter *rs;
    if (sl_jpeg_restarter_create(&rs))
        die("%s", sl_errmsg());
    for (int k = 0; k < ns; k++) {
        spec *s = &sp[k];
        s->out = calloc(nfiles, sizeof *s->out);
        if (!s->out)
            die("out of memory");
        for (size_t i = 0; i < nfiles; i++) {
            const uint8_t *o;
            size_t ol;
            sl_restart_info info;
            double t0 = now_thread();
            if (sl_jpeg_restart(rs, files[i].p, files[i].len, s->mcus, s->rows, &o, &ol, &info))
                die("%s", sl_errmsg());
            s->convert_s += now_thread() - t0;
            s->out[i].p = malloc(ol);
            if (!s->out[i].p)
                die("out of memory");
            memcpy(s->out[i].p, o, ol);
            s->out[i].len = ol;
            if (info.rewritten) {
                s->rewritten++;
                s->markers += s->rows == 65535 ? 0 : info.markers;
                s->bytes_in += info.bytes_in;
                s->bytes_out += info.bytes_out;
            } else if (!s->why[0]) {
                snprintf(s->why, sizeof s->why, "%s", info.why);
            }
        }
    }
    sl_jpeg_restarter_destroy(rs);

    /* Validation: the same samples. d: the pipeline now; d0: as before
     * restart markers were read (SLUICE_SEEK=off: files that came with
     * markers are decoded from the start, by libjpeg). */
    sl_decoder *d, *d0;
    if (sl_decoder_create(&d))
        die("%s", sl_errmsg());
    setenv("SLUICE_SEEK", "off", 1);
    if (sl_decoder_create(&d0))
        die("%s", sl_errmsg());
    unsetenv("SLUICE_SEEK");
    size_t nout = (size_t)3 * size * size;
    float *a = malloc(nout * sizeof *a), *b = malloc(nout * sizeof *b);
    if (!a || !b)
        die("out of memory");
    for (size_t i = 0; i < nfiles; i++) {
        sample(d, &files[i], i, seed, size, a);
        for (int k = 0; k < ns; k++) {
            sample(d, &sp[k].out[i], i, seed, size, b);
            if (memcmp(a, b, nout * sizeof *a)) {
                fprintf(stderr, "image %zu, spec %s: other sample than the original's\n", i,
                        sp[k].name);
                return 1;
            }
        }
    }

    /* Timing. */
    tjhandle tj = tjInitDecompress();
    int maxw = 0, maxh = 0;
    for (size_t i = 0; i < nfiles; i++) {
        int w, h, ss, cs;
        if (tjDecompressHeader3(tj, files[i].p, (unsigned long)files[i].len, &w, &h, &ss, &cs))
            die("%s", tjGetErrorStr2(tj));
        maxw = w > maxw ? w : maxw;
        maxh = h > maxh ? h : maxh;
    }
    uint8_t *rgb = malloc((size_t)maxw * maxh * 3);
    double *tc = calloc((size_t)reps, sizeof *tc), *tt = calloc((size_t)reps, sizeof *tt);
    double *ts = calloc((size_t)reps * ns, sizeof *ts);
    if (!rgb || !tc || !tt || !ts)
        die("out of memory");
    for (int r = 0; r < reps; r++) {
        double t0 = now_thread();
        for (size_t i = 0; i < nfiles && !only; i++) {
            int w, h, ss, cs;
            tjDecompressHeader3(tj, files[i].p, (unsigned long)files[i].len, &w, &h, &ss, &cs);
            if (tjDecompress2(tj, files[i].p, (unsigned long)files[i].len, rgb, w, 0, h, TJPF_RGB,
                              0))
                die("%s", tjGetErrorStr2(tj));
        }
        tc[r] = now_thread() - t0;
        t0 = now_thread();
        for (size_t i = 0; i < nfiles && !only; i++)
            sample(d0, &files[i], i, seed, size, a);
        tt[r] = now_thread() - t0;
        for (int k = 0; k < ns; k++) {
            t0 = now_thread();
            for (size_t i = 0; i < nfiles; i++)
                sample(d, &sp[k].out[i], i, seed, size, a);
            ts[(size_t)k * reps + r] = now_thread() - t0;
        }
    }
    double mc = median(tc, reps), mt = median(tt, reps);
    printf("bench_restart: %s: %zu JPEGs, %.1f MB, %.1f KB each; %d reps, %dx%d samples, one "
           "thread, medians of thread CPU time\n",
           argv[1], nfiles, total / 1e6, total / 1e3 / nfiles, reps, size, size);
    printf("  ceiling (full decode of the originals)  %8.1f us/image\n", mc / nfiles * 1e6);
    printf("  today (huff.c, originals)               %8.1f us/image   %.2fx ceiling\n",
           mt / nfiles * 1e6, mc / mt);
    printf("  %-6s %9s %9s %11s %9s %10s %9s %9s %9s   %s\n", "spec", "rewritten", "markers",
           "marker B", "bytes", "convert us", "sample us", "/today", "/ceiling", "kept: why");
    for (int k = 0; k < ns; k++) {
        spec *s = &sp[k];
        double m = median(ts + (size_t)k * reps, reps);
        printf("  %-6s %9zu %9zu %10.2f%% %+8.2f%% %10.1f %9.1f %8.2fx %8.2fx   %s\n", s->name,
               s->rewritten, s->markers,
               s->bytes_in ? 200.0 * (double)s->markers / (double)s->bytes_in : 0.0,
               s->bytes_in ? 100.0 * ((double)s->bytes_out - (double)s->bytes_in) / s->bytes_in
                           : 0.0,
               s->convert_s / nfiles * 1e6, m / nfiles * 1e6, mt / m, mc / m,
               s->why[0] ? s->why : "-");
    }
    return 0;
}

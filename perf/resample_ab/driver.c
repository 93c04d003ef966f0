/*
 * perf/resample_ab/driver.c - sl_resample_planes of two commits, A/B in one
 * process (perf/resample-ab builds it; not a CMake target: it needs the two
 * copies of pipeline/resample*.c that the script compiles under other names).
 *
 *   driver DIR N REPS [LAYOUT 0|1|2 (default 2: NCHW f32)] [RING (default 64)]
 *
 * The first N JPEGs under DIR (walk order) are decoded once to their crop's
 * Y/Cb/Cr planes as bench_decode step (3b) does (sl_rrc_geometry, seed 1,
 * flip from the same stream, 224 x 224), and the planes copied. Check: for
 * every layout, both versions' outputs are compared value by value (count
 * and largest difference printed). Timing: per repetition, every sample is
 * resampled by both versions, in alternating order, each call clocked with
 * the thread's CPU time, into a ring of RING samples (64: 37 MiB of NCHW f32,
 * past the caches, as the pipeline's batch ring); printed: the medians over
 * repetitions of us per sample and of the per-repetition ratio A / B.
 */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "pipeline/image/image.h"

/* B (the working tree) takes the output spec; A too from issue 44 on
 * (AB_OLD_SPEC, set by perf/resample-ab), before it positional arguments. */
int ab_new_resample_planes(const sl_plane_view *pl, int np, const sl_out_spec *out);
#if AB_OLD_SPEC
int ab_old_resample_planes(const sl_plane_view *pl, int np, const sl_out_spec *out);
#else
int ab_old_resample_planes(const sl_plane_view *pl, int np, int dw, int dh, int flip,
                           sl_layout layout, const float mean[3], const float std[3], void *dst);
#endif
typedef int (*resample_fn)(const sl_plane_view *, int, int, int, int, sl_layout, const float *,
                           const float *, void *);
static int new_fn(const sl_plane_view *pl, int np, int dw, int dh, int flip, sl_layout layout,
                  const float *mean, const float *std, void *dst)
{
    sl_out_spec o = {dw, dh, flip, layout, mean, std, dst};
    return ab_new_resample_planes(pl, np, &o);
}
static int old_fn(const sl_plane_view *pl, int np, int dw, int dh, int flip, sl_layout layout,
                  const float *mean, const float *std, void *dst)
{
#if AB_OLD_SPEC
    sl_out_spec o = {dw, dh, flip, layout, mean, std, dst};
    return ab_old_resample_planes(pl, np, &o);
#else
    return ab_old_resample_planes(pl, np, dw, dh, flip, layout, mean, std, dst);
#endif
}

static const float g_mean[3] = {123.675f, 116.28f, 103.53f};
static const float g_std[3] = {58.395f, 57.12f, 57.375f};

typedef struct item {
    sl_plane_view pv[3];
    int np, flip;
} item;

static char **g_files;
static size_t g_nfiles;

static int walk(const char *p, const struct stat *sb, int fl, struct FTW *f)
{
    (void)sb, (void)f;
    const char *d = strrchr(p, '.');
    if (fl == FTW_F && d && (!strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg"))) {
        g_files = realloc(g_files, sizeof *g_files * (g_nfiles + 1));
        if (!g_files || !(g_files[g_nfiles++] = strdup(p)))
            return 1;
    }
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fail(const char *m)
{
    fprintf(stderr, "resample-ab: %s\n", m);
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        fail("usage: driver DIR N REPS [LAYOUT] [RING]");
    int want = atoi(argv[2]), reps = atoi(argv[3]), size = 224;
    int layout = argc > 4 ? atoi(argv[4]) : SL_LAYOUT_NCHW_F32;
    int ring = argc > 5 ? atoi(argv[5]) : 64;
    if (want < 1 || reps < 1 || reps > 1000 || layout < 0 || layout > 2 || ring < 1)
        fail("bad arguments");
    if (nftw(argv[1], walk, 16, FTW_PHYS) != 0 || !g_nfiles)
        fail("no JPEGs");
    sl_decoder *d;
    if (sl_decoder_create(&d) != SL_OK)
        fail("decoder");
    item *items = calloc((size_t)want, sizeof *items);
    int n = 0;
    for (size_t i = 0; i < g_nfiles && n < want; i++) {
        FILE *f = fopen(g_files[i], "rb");
        if (!f)
            fail(g_files[i]);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        rewind(f);
        uint8_t *buf = malloc((size_t)len);
        if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len)
            fail(g_files[i]);
        fclose(f);
        int w, h;
        if (sl_decoder_header(d, buf, (size_t)len, &w, &h, NULL) != SL_OK)
            fail(g_files[i]);
        sl_rng r = sl_rng_for(1, 0, i);
        sl_crop crop;
        sl_rrc_geometry(&r, w, h, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &crop);
        item *it = &items[n];
        it->flip = sl_rng_uniform(&r) < 0.5f;
        if (sl_decode_crop_planes(d, buf, (size_t)len, &crop, size, size, it->pv, &it->np) !=
            SL_OK)
            fail(g_files[i]);
        for (int c = 0; c < it->np; c++) {
            size_t b = (size_t)it->pv[c].pitch * it->pv[c].h;
            uint8_t *q = malloc(b);
            if (!q)
                fail("out of memory");
            memcpy(q, it->pv[c].p, b);
            it->pv[c].p = q;
        }
        n++;
        free(buf);
    }
    size_t sb = (size_t)size * size * 3 * sizeof(float);
    float *ra = aligned_alloc(64, sb * ring), *rb = aligned_alloc(64, sb * ring);
    if (!ra || !rb)
        fail("out of memory");
    memset(ra, 0, sb * ring);
    memset(rb, 0, sb * ring);
    printf("%d samples from %s, 224x224, ring %d\n", n, argv[1], ring);
    for (int L = 0; L < 3; L++) {
        double maxd = 0;
        long diffs = 0;
        for (int i = 0; i < n; i++) {
            item *it = &items[i];
            if (old_fn(it->pv, it->np, size, size, it->flip, L, g_mean, g_std, ra) != SL_OK ||
                new_fn(it->pv, it->np, size, size, it->flip, L, g_mean, g_std, rb) != SL_OK)
                fail("resample failed");
            for (size_t k = 0; k < (size_t)size * size * 3; k++) {
                double e = L == SL_LAYOUT_NHWC_U8
                               ? fabs((double)((uint8_t *)ra)[k] - ((uint8_t *)rb)[k])
                               : fabs((double)ra[k] - rb[k]);
                diffs += e > 0 || memcmp(&ra[k], &rb[k], L == SL_LAYOUT_NHWC_U8 ? 0 : 4);
                maxd = e > maxd ? e : maxd;
            }
        }
        printf("layout %d: %ld values differ (bytes), largest difference %g\n", L, diffs, maxd);
    }
    double *ta = malloc(sizeof(double) * reps), *tb = malloc(sizeof(double) * reps);
    double *rr = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        double sa = 0, sbt = 0;
        for (int i = 0; i < n; i++) {
            item *it = &items[i];
            for (int pass = 0; pass < 2; pass++) {
                int b = (i + r + pass) & 1;
                resample_fn fn = b ? new_fn : old_fn;
                void *dst = (char *)(b ? rb : ra) + sb * (size_t)(i % ring);
                double t0 = now();
                fn(it->pv, it->np, size, size, it->flip, (sl_layout)layout, g_mean, g_std, dst);
                double t = now() - t0;
                if (b)
                    sbt += t;
                else
                    sa += t;
            }
        }
        ta[r] = sa / n * 1e6;
        tb[r] = sbt / n * 1e6;
        rr[r] = ta[r] / tb[r];
    }
    qsort(ta, reps, sizeof *ta, cmpd);
    qsort(tb, reps, sizeof *tb, cmpd);
    qsort(rr, reps, sizeof *rr, cmpd);
    printf("layout %d, %d reps: A %.1f us/sample, B %.1f us/sample, A/B %.3f (per-rep ratios "
           "%.3f-%.3f)\n", layout, reps, ta[reps / 2], tb[reps / 2], rr[reps / 2], rr[0],
           rr[reps - 1]);
    return 0;
}

/*
 * perf/bench_header.c - what a fresh libjpeg decompress object per image
 * costs (issue 26: pipeline/image/decode.c reads every stream with a new object,
 * so that no table of one image reaches the next), against the header
 * parse it comes with.
 *
 *   bench_header FILE.jpg [--iters 100000] [--reps 5]
 *
 * Times, one thread, median of reps: (a) jpeg_read_header + abort on one
 * reused object (what decode.c did per parse, twice a sample); (b) the same
 * with jpeg_destroy_decompress + jpeg_create_decompress before each (what it
 * does now, once a sample). Prints microseconds per iteration and (b) - (a).
 */
#define BENCH_NAME "bench_header"
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <string.h>

#include <jpeglib.h>

#include "bench_util.h"

#define MAX_REPS 21

int main(int argc, char **argv)
{
    long iters = 100000;
    int reps = 5;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            die("usage: bench_header FILE.jpg [--iters N] [--reps R]");
    }
    if (!path || iters < 1 || reps < 1 || reps > MAX_REPS)
        die("usage: bench_header FILE.jpg [--iters N] [--reps R (1..%d)]", MAX_REPS);
    FILE *f = fopen(path, "rb");
    if (!f)
        die("%s: cannot open", path);
    static unsigned char buf[1 << 24];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr; /* libjpeg's default: a bad file ends the benchmark */
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&ci);
    double t[2][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int mode = 0; mode < 2; mode++) {
            double t0 = now_s();
            for (long i = 0; i < iters; i++) {
                if (mode) {
                    jpeg_destroy_decompress(&ci);
                    jpeg_create_decompress(&ci);
                }
                jpeg_mem_src(&ci, buf, (unsigned long)n);
                jpeg_read_header(&ci, TRUE);
                jpeg_abort_decompress(&ci);
            }
            t[mode][r] = (now_s() - t0) / (double)iters * 1e6;
        }
    jpeg_destroy_decompress(&ci);
    double a = median(t[0], reps), b = median(t[1], reps);
    printf("%s (%zu bytes), %ld iterations, median of %d:\n", path, n, iters, reps);
    printf("  (a) header on a reused object          %7.3f us\n", a);
    printf("  (b) fresh object + header               %7.3f us\n", b);
    printf("  a fresh object costs                    %7.3f us an image\n", b - a);
    return 0;
}

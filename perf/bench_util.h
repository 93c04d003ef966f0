/*
 * perf/bench_util.h - the few helpers every benchmark in perf/ needs.
 * Header-only: CMake builds each perf .c file as its own program, so there is no
 * shared object file to link. Benchmarks may die; the library never does.
 * Define BENCH_NAME before including it (the prefix of die's messages).
 */
#ifndef SL_BENCH_UTIL_H
#define SL_BENCH_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "records/records.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including perf/bench_util.h"
#endif

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn, unused));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, BENCH_NAME ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

__attribute__((unused)) static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench_cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n), 1 <= n <= 256 (v is not changed). */
__attribute__((unused)) static double median(const double *v, int n)
{
    double s[256];
    n = n < 1 ? 1 : n > 256 ? 256 : n;
    for (int i = 0; i < n; i++)
        s[i] = v[i];
    qsort(s, (size_t)n, sizeof *s, bench_cmp_dbl);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* Call fn(ex, shard path, record number, arg) for every record of a split's
 * shards, in order; dies naming the file and record on any error. */
__attribute__((unused)) static void bench_for_each_image(
    const char *dir, const char *split,
    void (*fn)(const sl_image_example *ex, const char *shard, uint64_t rec, void *arg), void *arg)
{
    char **shards = NULL;
    size_t ns = 0;
    if (sl_dataset_shards(dir, split, &shards, &ns) != SL_OK)
        die("%s: split %s: %s", dir, split, sl_errmsg());
    for (size_t s = 0; s < ns; s++) {
        sl_tfrecord_reader *r = NULL;
        if (sl_tfrecord_reader_open(shards[s], &r) != SL_OK)
            die("%s", sl_errmsg());
        const uint8_t *rec;
        size_t len;
        int rc;
        while ((rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK) {
            sl_image_example ex;
            uint64_t recno = sl_tfrecord_reader_record(r);
            if (sl_image_example_decode(rec, len, &ex) != SL_OK)
                die("%s: record %llu: %s", shards[s], (unsigned long long)recno, sl_errmsg());
            fn(&ex, shards[s], recno, arg);
        }
        if (rc != SL_EOF)
            die("%s", sl_errmsg());
        sl_tfrecord_reader_close(r);
    }
    sl_paths_free(shards, ns);
}

#endif

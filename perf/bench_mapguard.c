/*
 * perf/bench_mapguard.c - what the SIGBUS guard (pipeline/mapguard.h) costs
 * the pipeline's reads from mapped shards, side by side with the same reads
 * unguarded, one thread.
 *
 *   bench_mapguard [--records N] [--size BYTES] [--reps R] [--block B]
 *
 * Writes one TFRecord shard of N records of BYTES random bytes (default
 * 2000 x 110,000: ImageNet's mean JPEG) in a temp dir, maps it read-only as
 * the reader does, pages it in, then times, each over every record:
 *   (1) plain: sl_tfrecord_frame_check of each record (the reader's CRC
 *       check), no guard: the ceiling;
 *   (2) per unit: one guard (sigsetjmp(jb, 1) + enter + leave) around each
 *       block of B records (B = 16, the pipeline's default block), as
 *       reader.c guards a read unit;
 *   (3) per record: one guard around each record's check, as map.c guards
 *       each sample's decode;
 *   (4) the guard alone (no body), per guard: its fixed cost.
 * Method: steps alternate within each repetition so drifting load on a
 * shared box hits all; times are the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID); medians over R repetitions (default 7).
 * Validation before timing: every record's frame checks OK on every path.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/mapguard.h"
#include "records/records.h"

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct bench {
    const uint8_t *base;
    size_t len;
    sl_index_entry *idx;
    size_t n;
    unsigned block;
} bench;

static unsigned check_range(const bench *b, size_t i0, size_t i1)
{
    unsigned bad = 0;
    for (size_t i = i0; i < i1; i++)
        bad += sl_tfrecord_frame_check(b->base + b->idx[i].offset, b->idx[i].size) != SL_FRAME_OK;
    return bad;
}

static unsigned guarded_range(const bench *b, size_t i0, size_t i1)
{
    sl_mapguard g;
    if (sigsetjmp(g.jb, 1) == 0) {
        sl_mapguard_enter(&g, b->base, b->len);
        unsigned bad = check_range(b, i0, i1);
        sl_mapguard_leave(&g);
        return bad;
    }
    return 1u << 30;
}

static unsigned step(const bench *b, int which)
{
    unsigned bad = 0;
    switch (which) {
    case 0: bad = check_range(b, 0, b->n); break;
    case 1:
        for (size_t i = 0; i < b->n; i += b->block)
            bad += guarded_range(b, i, i + b->block < b->n ? i + b->block : b->n);
        break;
    case 2:
        for (size_t i = 0; i < b->n; i++)
            bad += guarded_range(b, i, i + 1);
        break;
    case 3:
        for (size_t i = 0; i < b->n; i++)
            bad += guarded_range(b, i, i);
        break;
    }
    return bad;
}

int main(int argc, char **argv)
{
    size_t nrec = 2000, size = 110000;
    int reps = 7;
    unsigned block = 16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--records") && i + 1 < argc)
            nrec = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--block") && i + 1 < argc)
            block = (unsigned)atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_mapguard [--records N] [--size BYTES] [--reps R] "
                            "[--block B]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 99 || !nrec || !size || !block) {
        fprintf(stderr, "bench_mapguard: bad arguments\n");
        return 2;
    }
    char dir[] = "/tmp/sluice-bench-mapguard-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[256], ipath[300];
    snprintf(path, sizeof path, "%s/bench-00000-of-00001.tfrecord", dir);
    snprintf(ipath, sizeof ipath, "%s.idx", path);
    uint8_t *rec = malloc(size);
    sl_tfrecord_writer *w;
    if (!rec || sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w)) {
        fprintf(stderr, "bench_mapguard: %s\n", sl_errmsg());
        return 1;
    }
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < nrec; i++) {
        for (size_t k = 0; k < size; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            rec[k] = (uint8_t)r;
        }
        if (sl_tfrecord_writer_write(w, rec, size)) {
            fprintf(stderr, "bench_mapguard: %s\n", sl_errmsg());
            return 1;
        }
    }
    if (sl_tfrecord_writer_close(w)) {
        fprintf(stderr, "bench_mapguard: %s\n", sl_errmsg());
        return 1;
    }
    free(rec);
    bench b = {.block = block};
    if (sl_index_load(ipath, &b.idx, &b.n) || sl_mapguard_install()) {
        fprintf(stderr, "bench_mapguard: %s\n", sl_errmsg());
        return 1;
    }
    int fd = open(path, O_RDONLY);
    b.len = (size_t)lseek(fd, 0, SEEK_END);
    b.base = mmap(NULL, b.len, PROT_READ, MAP_SHARED, fd, 0);
    if (b.base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    close(fd);

    for (int s = 0; s < 4; s++) /* validate (and page everything in) */
        if (step(&b, s)) {
            fprintf(stderr, "bench_mapguard: step %d: a record fails its check\n", s + 1);
            return 1;
        }
    static const char *names[4] = {"plain (no guard)", "guard per unit", "guard per record",
                                   "guard alone"};
    double t[4][99];
    for (int k = 0; k < reps; k++)
        for (int s = 0; s < 4; s++) {
            double t0 = cpu_s();
            unsigned bad = step(&b, s);
            t[s][k] = cpu_s() - t0;
            if (bad)
                return 1;
        }
    double med[4];
    for (int s = 0; s < 4; s++)
        med[s] = median(t[s], reps);
    printf("bench_mapguard: %zu records of %zu bytes (%.1f MiB mapped), block %u, %d reps, "
           "medians of thread CPU time\n", b.n, size, (double)b.len / 1048576.0, block, reps);
    for (int s = 0; s < 3; s++)
        printf("  (%d) %-18s %9.1f ns/record  %7.2f GB/s  %.4f x plain\n", s + 1, names[s],
               med[s] / (double)b.n * 1e9, (double)b.len / med[s] * 1e-9, med[s] / med[0]);
    printf("  (4) %-18s %9.1f ns/guard\n", names[3], med[3] / (double)b.n * 1e9);
    munmap((void *)b.base, b.len);
    free(b.idx);
    unlink(ipath);
    unlink(path);
    rmdir(dir);
    return 0;
}

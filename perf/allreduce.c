/*
 * perf/allreduce.c - all-reduce bandwidth of a collectives backend against
 * the memory copy bandwidth measured in the same run.
 *
 *   allreduce [--backend local|mpi] [--world 2] [--min 4K] [--max 256M]
 *             [--reps 10] [--dtype f32] [--segment BYTES] [--json FILE]
 *
 * local: --world replica threads in this process; mpi: run it under
 * `mpirun --oversubscribe --allow-run-as-root -np N` (the world is MPI's).
 * For each size from --min to --max (x4 a step), every rank:
 *   1. validates: one SUM all-reduce of small integers (exact in every
 *      dtype) checked element by element against the expected sum; any
 *      wrong element on any rank ends the run (exit 1);
 *   2. times --reps all-reduces (SUM, in place; the input is restored
 *      between reps, outside the timed region), each entered together
 *      after a barrier; a rep's time is the slowest rank's; the median
 *      over reps is reported;
 *   3. rank 0 times --reps single-thread memcpy()s of the same number of
 *      bytes between two buffers of its own (median): the ceiling a
 *      shared-memory ring is up against.
 * Reported (NCCL's definitions, nccl-tests doc/PERFORMANCE.md):
 *   algbw = bytes / time;  busbw = algbw * 2(n-1)/n  (the bytes each rank
 *   moves in a ring, per unit of time; independent of n for a perfect
 *   ring), memcpy = bytes / memcpy time, and busbw / memcpy.
 * Rank 0 prints the table; --json writes one JSON object per size (JSON
 * Lines) with the same numbers. Benchmarks may die; the library never does.
 */
#define BENCH_NAME "allreduce"
#include "perf/bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "collectives/collectives.h"

typedef struct opts {
    sl_comm_backend backend;
    int world, reps;
    size_t min, max, segment;
    sl_dtype t;
    const char *json;
} opts;

#define MAX_ROWS 64

/* One row of the report (rank 0). */
typedef struct row {
    size_t bytes, count;
    double time_s, algbw, busbw, memcpy_bw;
} row;

static void usage(void)
{
    fprintf(stderr,
            "usage: allreduce [--backend local|mpi] [--world N] [--min 4K] [--max 256M]\n"
            "                 [--reps R] [--dtype f32|bf16|f16] [--segment BYTES] [--json FILE]\n");
    exit(2);
}

/* "4096", "4K", "256M", "1G" (powers of 1024) */
static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        die("bad size '%s'", s);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end && strcmp(end, "B") && strcmp(end, "iB"))
        die("bad size '%s'", s);
    return (size_t)v;
}

static void fmt_size(size_t b, char *out, size_t n)
{
    if (b >= (1u << 30) && b % (1u << 30) == 0)
        snprintf(out, n, "%zuG", b >> 30);
    else if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(out, n, "%zuM", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(out, n, "%zuK", b >> 10);
    else
        snprintf(out, n, "%zu", b);
}

/* ------------------------------------------------------------ data */

static float to_f32(sl_dtype t, const void *p, size_t i)
{
    if (t == SL_DTYPE_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == SL_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    /* f16: the inputs are small integers, so normal numbers or zero */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u = exp ? sign | ((exp + 112u) << 23) | (man << 13) : sign;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Small integers v in [-4, 4] are exact in every dtype (bf16: v's f32 top
 * half; f16: exponent and mantissa of an integer of at most 3 bits). */
static void put_int(sl_dtype t, void *p, size_t i, int v)
{
    float f = (float)v;
    if (t == SL_DTYPE_F32) {
        ((float *)p)[i] = f;
        return;
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    if (t == SL_DTYPE_BF16) {
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        return;
    }
    uint16_t h = (uint16_t)((u >> 16) & 0x8000u);
    if (v)
        h |= (uint16_t)((((u >> 23) & 0xffu) - 112u) << 10 | ((u >> 13) & 0x3ffu));
    ((uint16_t *)p)[i] = h;
}

static int ival(int rank, size_t i) { return (int)((i * 7u + (size_t)rank * 3u) % 9u) - 4; }

/* ------------------------------------------------------- one rank */

typedef struct rank_arg {
    const opts *o;
    sl_comm *c;
    row *rows; /* rank 0 fills them */
    int nrows;
} rank_arg;

static void check(int rc, const char *what, int rank)
{
    if (rc)
        die("rank %d: %s: %s (%s)", rank, what, sl_errmsg(), sl_strerror(rc));
}

static void *xmalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1))
        die("out of memory (%zu bytes)", n);
    memset(p, 0, n); /* first touch on this rank's thread */
    return p;
}

static void bench_rank(rank_arg *a)
{
    const opts *o = a->o;
    sl_comm *c = a->c;
    int rank = sl_comm_rank(c), world = sl_comm_world(c), reps = o->reps;
    size_t esz = sl_dtype_size(o->t);
    char *buf = xmalloc(o->max), *saved = xmalloc(o->max);
    char *m_src = rank == 0 ? xmalloc(o->max) : NULL, *m_dst = rank == 0 ? xmalloc(o->max) : NULL;
    float *times = xmalloc((size_t)reps * 4), *all = xmalloc((size_t)reps * 4 * (size_t)world);
    double *med = xmalloc((size_t)reps * sizeof(double));

    for (size_t bytes = o->min; bytes <= o->max; bytes *= 4) {
        size_t count = bytes / esz ? bytes / esz : 1;
        size_t nb = count * esz;
        for (size_t i = 0; i < count; i++)
            put_int(o->t, saved, i, ival(rank, i));

        /* 1. validate */
        memcpy(buf, saved, nb);
        check(sl_comm_allreduce(c, buf, count, o->t, SL_RED_SUM), "validation all-reduce", rank);
        float bad = 0;
        for (size_t i = 0; i < count; i++) {
            int want = 0;
            for (int r = 0; r < world; r++)
                want += ival(r, i);
            if (to_f32(o->t, buf, i) != (float)want) {
                if (bad == 0)
                    fprintf(stderr, "allreduce: rank %d: %zu bytes: element %zu is %g, expected %d\n",
                            rank, nb, i, (double)to_f32(o->t, buf, i), want);
                bad++;
            }
        }
        check(sl_comm_allreduce(c, &bad, 1, SL_DTYPE_F32, SL_RED_SUM), "validation sum", rank);
        if (bad > 0)
            die("rank %d: %zu bytes: %.0f wrong elements over all ranks: not timing a wrong "
                "all-reduce", rank, nb, (double)bad);

        /* 2. time */
        for (int k = 0; k < reps; k++) {
            memcpy(buf, saved, nb);
            check(sl_comm_barrier(c), "barrier", rank);
            double t0 = now_s();
            check(sl_comm_allreduce(c, buf, count, o->t, SL_RED_SUM), "timed all-reduce", rank);
            times[k] = (float)(now_s() - t0);
        }
        check(sl_comm_allgather(c, times, all, (size_t)reps, SL_DTYPE_F32), "allgather", rank);

        /* 3. memcpy ceiling (rank 0; the others wait in the barrier) */
        if (rank == 0) {
            memset(m_src, 1, nb);
            for (int k = 0; k < reps; k++) {
                double t0 = now_s();
                memcpy(m_dst, m_src, nb);
                med[k] = now_s() - t0;
                __asm__ __volatile__("" ::"r"(m_dst) : "memory"); /* keep the copy */
            }
            double mc = median(med, reps);
            for (int k = 0; k < reps; k++) {
                double mx = 0;
                for (int r = 0; r < world; r++)
                    mx = (double)all[r * reps + k] > mx ? (double)all[r * reps + k] : mx;
                med[k] = mx;
            }
            double ts = median(med, reps);
            if (a->nrows >= MAX_ROWS)
                die("more than %d sizes: raise --min or lower --max", MAX_ROWS);
            row *w = &a->rows[a->nrows++];
            w->bytes = nb;
            w->count = count;
            w->time_s = ts;
            w->algbw = (double)nb / ts;
            w->busbw = w->algbw * 2.0 * (world - 1) / world;
            w->memcpy_bw = (double)nb / mc;
        }
        check(sl_comm_barrier(c), "barrier", rank);
        if (bytes > o->max / 4)
            break;
    }
    free(buf);
    free(saved);
    free(m_src);
    free(m_dst);
    free(times);
    free(all);
    free(med);
}

/* ------------------------------------------------------- the runs */

typedef struct local_thread {
    rank_arg a;
    sl_comm_group *g;
    int rank;
    pthread_t th;
} local_thread;

static void *local_main(void *p)
{
    local_thread *t = p;
    check(sl_comm_local_open(t->g, t->rank, &t->a.c), "sl_comm_local_open", t->rank);
    bench_rank(&t->a);
    sl_comm_destroy(t->a.c);
    return NULL;
}

static void report(const opts *o, int world, const row *rows, int n)
{
    char seg[32];
    if (o->backend == SL_COMM_LOCAL)
        fmt_size(o->segment ? o->segment : ((size_t)1 << 20) * (size_t)world, seg, sizeof seg);
    printf("allreduce: backend %s, world %d, %s, SUM in place, median of %d reps%s%s\n",
           sl_comm_backend_name(o->backend), world, sl_dtype_name(o->t), o->reps,
           o->backend == SL_COMM_LOCAL ? ", segment " : "",
           o->backend == SL_COMM_LOCAL ? seg : "");
    printf("%10s %11s %10s %11s %11s %12s %13s\n", "bytes", "count", "time us", "algbw GB/s",
           "busbw GB/s", "memcpy GB/s", "busbw/memcpy");
    for (int i = 0; i < n; i++) {
        char b[32];
        fmt_size(rows[i].bytes, b, sizeof b);
        printf("%10s %11zu %10.1f %11.2f %11.2f %12.2f %13.3f\n", b, rows[i].count,
               rows[i].time_s * 1e6, rows[i].algbw * 1e-9, rows[i].busbw * 1e-9,
               rows[i].memcpy_bw * 1e-9, rows[i].busbw / rows[i].memcpy_bw);
    }
    printf("(algbw = bytes / time; busbw = algbw x 2(n-1)/n as in nccl-tests; memcpy = one "
           "thread's memcpy of the same bytes, this run; every size validated first)\n");
    if (!o->json)
        return;
    FILE *f = fopen(o->json, "w");
    if (!f)
        die("%s: %s", o->json, strerror(errno));
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"backend\":\"%s\",\"world\":%d,\"dtype\":\"%s\",\"reps\":%d,\"bytes\":%zu,"
                "\"count\":%zu,\"time_us\":%.3f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,"
                "\"memcpy_gbps\":%.4f,\"busbw_over_memcpy\":%.4f,\"validated\":true}\n",
                sl_comm_backend_name(o->backend), world, sl_dtype_name(o->t), o->reps,
                rows[i].bytes, rows[i].count, rows[i].time_s * 1e6, rows[i].algbw * 1e-9,
                rows[i].busbw * 1e-9, rows[i].memcpy_bw * 1e-9,
                rows[i].busbw / rows[i].memcpy_bw);
    if (fclose(f))
        die("%s: write failed: %s", o->json, strerror(errno));
}

int main(int argc, char **argv)
{
    opts o = {SL_COMM_LOCAL, 2, 10, 4096, (size_t)256 << 20, 0, SL_DTYPE_F32, NULL};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(k, "--backend")) {
            if (sl_comm_backend_parse(v, &o.backend) || o.backend == SL_COMM_NCCL)
                die("--backend %s: expected local or mpi", v);
        } else if (!strcmp(k, "--world")) {
            o.world = atoi(v);
        } else if (!strcmp(k, "--min")) {
            o.min = parse_size(v);
        } else if (!strcmp(k, "--max")) {
            o.max = parse_size(v);
        } else if (!strcmp(k, "--reps")) {
            o.reps = atoi(v);
        } else if (!strcmp(k, "--segment")) {
            o.segment = parse_size(v);
        } else if (!strcmp(k, "--dtype")) {
            if (sl_dtype_parse(v, &o.t))
                die("--dtype %s: expected f32, bf16 or f16", v);
        } else if (!strcmp(k, "--json")) {
            o.json = v;
        } else {
            usage();
        }
        i++;
    }
    if (o.world < 1 || o.world > 64 || o.reps < 1 || o.reps > 256 || o.min < 1 || o.min > o.max)
        die("need 1 <= --world <= 64, 1 <= --reps <= 256, 1 <= --min <= --max");
    if (o.max < sl_dtype_size(o.t))
        die("--max %zu: less than one %s element", o.max, sl_dtype_name(o.t));

    sl_comm_config cfg = SL_COMM_CONFIG_INIT;
    cfg.segment_bytes = o.segment;
    cfg.timeout_ms = 120000;
    row rows[MAX_ROWS];
    int nrows = 0, world = o.world;

    if (o.backend == SL_COMM_LOCAL) {
        sl_comm_group *g = NULL;
        check(sl_comm_local_group_create(o.world, &cfg, &g), "sl_comm_local_group_create", 0);
        local_thread *t = calloc((size_t)o.world, sizeof *t);
        if (!t)
            die("out of memory");
        for (int r = 0; r < o.world; r++) {
            t[r] = (local_thread){{&o, NULL, rows, 0}, g, r, 0};
            if (pthread_create(&t[r].th, NULL, local_main, &t[r]))
                die("pthread_create failed");
        }
        for (int r = 0; r < o.world; r++)
            pthread_join(t[r].th, NULL);
        nrows = t[0].a.nrows;
        free(t);
        sl_comm_local_group_destroy(g);
        report(&o, world, rows, nrows);
    } else {
        if (!sl_comm_backend_available(SL_COMM_MPI))
            die("this build has no MPI backend (configure with SLUICE_WITH_MPI=ON)");
        if (!sl_comm_mpi_launched())
            fprintf(stderr, "allreduce: not started by mpirun: world 1\n");
        rank_arg a = {&o, NULL, rows, 0};
        check(sl_comm_mpi_create(&cfg, &a.c), "sl_comm_mpi_create", -1);
        world = sl_comm_world(a.c);
        int rank = sl_comm_rank(a.c);
        bench_rank(&a);
        sl_comm_destroy(a.c);
        if (rank == 0)
            report(&o, world, rows, a.nrows);
    }
    return 0;
}

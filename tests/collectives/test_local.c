/*
 * tests/collectives/test_local.c - the local backend (collectives/local.c):
 * world ranks as threads of this process, through the public API.
 *
 * Each test runs run_group(): one thread per rank opens its comm, runs the
 * test's rank function, closes; assertions run on the test's thread after
 * the join (rank functions report through their return code and message).
 * Inputs are integers small enough that every partial sum is exact in the
 * dtype, so the expected result is exact and computed here independently
 * of the ring's order; random non-integer inputs are compared with a
 * tolerance and checked bitwise identical across ranks.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "collectives/collectives_int.h" /* the f16/bf16 conversions */
#include "testutil.h"

#define MAXW 4
#define TMO_MS 20000 /* a bug fails a test in 20 s rather than hanging it for 5 min */

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#else
#define UNDER_TSAN 0
#endif

/* -------------------------------------------------------------- harness */

/* A rank's work: SL_OK, an sl_status (message in sl_errmsg()), or -1 with
 * the check that failed written to msg (SL_ERRMSG_MAX bytes). */
typedef int (*rank_fn)(sl_comm *c, int rank, void *arg, char *msg);

typedef struct group_run {
    int world;
    sl_comm_config cfg;
    rank_fn fn;
    void *arg;
    int skip_open[MAXW]; /* this rank never opens its comm */
    int rc[MAXW];
    char msg[MAXW][SL_ERRMSG_MAX];
} group_run;

typedef struct rank_thread {
    group_run *run;
    sl_comm_group *g;
    int rank;
} rank_thread;

static void *rank_main(void *p)
{
    rank_thread *t = p;
    group_run *run = t->run;
    int r = t->rank;
    sl_comm *c = NULL;
    int rc = sl_comm_local_open(t->g, r, &c);
    if (rc == SL_OK)
        rc = run->fn(c, r, run->arg, run->msg[r]);
    if (rc > 0 && !run->msg[r][0])
        snprintf(run->msg[r], SL_ERRMSG_MAX, "%s", sl_errmsg());
    run->rc[r] = rc;
    sl_comm_destroy(c);
    return NULL;
}

static void run_group(group_run *run)
{
    sl_comm_group *g = NULL;
    if (!run->cfg.timeout_ms)
        run->cfg.timeout_ms = TMO_MS;
    cr_assert_eq(sl_comm_local_group_create(run->world, &run->cfg, &g), SL_OK, "%s",
                 sl_errmsg());
    pthread_t th[MAXW];
    rank_thread rt[MAXW];
    for (int r = 0; r < run->world; r++) {
        rt[r] = (rank_thread){run, g, r};
        run->rc[r] = 0;
        run->msg[r][0] = 0;
        if (!run->skip_open[r])
            cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &rt[r]), 0);
    }
    for (int r = 0; r < run->world; r++)
        if (!run->skip_open[r])
            pthread_join(th[r], NULL);
    sl_comm_local_group_destroy(g);
}

static void assert_all_ok(const group_run *run, const char *what)
{
    for (int r = 0; r < run->world; r++)
        cr_assert_eq(run->rc[r], 0, "%s: world %d rank %d: rc %d: %s", what, run->world, r,
                     run->rc[r], run->msg[r]);
}

static group_run *new_run(int world, rank_fn fn, void *arg)
{
    group_run *run = calloc(1, sizeof *run);
    cr_assert_not_null(run);
    run->world = world;
    run->cfg = (sl_comm_config)SL_COMM_CONFIG_INIT;
    run->cfg.timeout_ms = TMO_MS;
    run->fn = fn;
    run->arg = arg;
    return run;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------------- data */

/* A small integer, different per rank and element: every sum of up to 4
 * of them (|x| <= 4*range) is exact in f32, and in f16/bf16 for range <= 8. */
static float ival(int rank, size_t i, int range)
{
    size_t m = (size_t)(2 * range + 1);
    return (float)((int)((i * 31u + (size_t)rank * 17u + (i >> 7)) % m) - range);
}

static int range_of(sl_dtype t) { return t == SL_DTYPE_F32 ? 20 : 4; }

static void put(sl_dtype t, void *buf, size_t i, float v)
{
    if (t == SL_DTYPE_F32)
        ((float *)buf)[i] = v;
    else if (t == SL_DTYPE_F16)
        ((uint16_t *)buf)[i] = sl_f32_to_f16(v);
    else
        ((uint16_t *)buf)[i] = sl_f32_to_bf16(v);
}

static float get(sl_dtype t, const void *buf, size_t i)
{
    if (t == SL_DTYPE_F32)
        return ((const float *)buf)[i];
    if (t == SL_DTYPE_F16)
        return sl_f16_to_f32(((const uint16_t *)buf)[i]);
    return sl_bf16_to_f32(((const uint16_t *)buf)[i]);
}

/* v as t holds it */
static float rounded(sl_dtype t, float v)
{
    if (t == SL_DTYPE_F16)
        return sl_f16_to_f32(sl_f32_to_f16(v));
    if (t == SL_DTYPE_BF16)
        return sl_bf16_to_f32(sl_f32_to_bf16(v));
    return v;
}

static void fill(sl_dtype t, void *buf, size_t count, int rank, int salt)
{
    for (size_t i = 0; i < count; i++)
        put(t, buf, i, ival(rank + salt, i, range_of(t)));
}

/* The exact all-reduce of fill(.., rank, salt) over world ranks, in t. */
static void *reference(sl_dtype t, size_t count, int world, sl_redop op, int salt)
{
    size_t esz = sl_dtype_size(t);
    void *ref = malloc(count * esz + 1);
    cr_assert_not_null(ref);
    float s = 1.0f / (float)world;
    for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (int r = 0; r < world; r++)
            sum += ival(r + salt, i, range_of(t));
        put(t, ref, i, sum); /* exact */
        if (op == SL_RED_AVG && world > 1)
            put(t, ref, i, get(t, ref, i) * s); /* rounded once, as sl_scale */
    }
    return ref;
}

/* First differing element of two buffers of count elements, or -1. */
static long first_diff(sl_dtype t, const void *a, const void *b, size_t count)
{
    size_t esz = sl_dtype_size(t);
    if (!memcmp(a, b, count * esz))
        return -1;
    for (size_t i = 0; i < count; i++)
        if (memcmp((const char *)a + i * esz, (const char *)b + i * esz, esz))
            return (long)i;
    return -1;
}

/* ------------------------------------------------------------ all-reduce */

typedef struct ar_case {
    sl_dtype t;
    sl_redop op;
    size_t count;
    int salt;
    void *out[MAXW]; /* each rank's buffer, kept for the checks after the join */
} ar_case;

static int ar_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    ar_case *a = arg;
    (void)msg;
    void *buf = malloc(a->count * sl_dtype_size(a->t) + 1);
    if (!buf)
        return sl_fail(SL_ENOMEM, "test: buffer");
    a->out[rank] = buf;
    fill(a->t, buf, a->count, rank, a->salt);
    return sl_comm_allreduce(c, buf, a->count, a->t, a->op);
}

/* One all-reduce over world ranks; every rank's result equals the exact
 * reference bit for bit. */
static void check_allreduce(int world, sl_dtype t, sl_redop op, size_t count, size_t seg_bytes)
{
    ar_case a = {t, op, count, (int)(count % 5), {0}};
    group_run *run = new_run(world, ar_rank, &a);
    run->cfg.segment_bytes = seg_bytes;
    run_group(run);
    char what[160];
    snprintf(what, sizeof what, "allreduce %s %s count %zu segment %zu", sl_dtype_name(t),
             op == SL_RED_SUM ? "sum" : "avg", count, seg_bytes);
    assert_all_ok(run, what);
    void *ref = reference(t, count, world, op, a.salt);
    for (int r = 0; r < world; r++) {
        long i = first_diff(t, a.out[r], ref, count);
        cr_assert_eq(i, -1, "%s: world %d rank %d: element %ld is %g, expected %g", what, world,
                     r, i, (double)get(t, a.out[r], (size_t)(i < 0 ? 0 : i)),
                     (double)get(t, ref, (size_t)(i < 0 ? 0 : i)));
    }
    for (int r = 0; r < world; r++)
        free(a.out[r]);
    free(ref);
    free(run);
}

static const size_t SIZES[] = {1, 2, 3, 7, 1000, (1u << 16) + 1, (1u << 20) + 3};

static void allreduce_sizes(sl_dtype t)
{
    for (int w = 1; w <= MAXW; w++)
        for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++) {
            /* under TSan (5-15x slower) the largest size runs once per dtype */
            if (UNDER_TSAN && SIZES[s] > (1u << 16) && w != 3)
                continue;
            check_allreduce(w, t, SL_RED_SUM, SIZES[s], 0);
            check_allreduce(w, t, SL_RED_AVG, SIZES[s], 0);
        }
}

Test(collectives_local, allreduce_f32) { allreduce_sizes(SL_DTYPE_F32); }
Test(collectives_local, allreduce_f16) { allreduce_sizes(SL_DTYPE_F16); }
Test(collectives_local, allreduce_bf16) { allreduce_sizes(SL_DTYPE_BF16); }

/* 2^24+3 f32 (64 MiB a rank) at world 3: many default-sized segments, the
 * last one short and unevenly chunked. */
Test(collectives_local, allreduce_big)
{
    size_t n = ((size_t)1 << 24) + 3;
    if (UNDER_TSAN)
        n = ((size_t)1 << 21) + 3; /* TSan's shadow of 4 x 64 MiB is too slow to fill */
    check_allreduce(3, SL_DTYPE_F32, SL_RED_SUM, n, 0);
}

/* Tiny segments (fewer bytes than world elements, a few elements a chunk,
 * odd sizes) put chunk and segment boundaries everywhere. */
Test(collectives_local, segment_boundaries)
{
    static const size_t segs[] = {1, 6, 64, 100, 4096};
    static const size_t counts[] = {1, 5, 16, 17, 63, 1000, 4099};
    for (int w = 2; w <= MAXW; w++)
        for (size_t si = 0; si < sizeof segs / sizeof *segs; si++)
            for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
                if (segs[si] < 64 && counts[ci] > 1000)
                    continue; /* one step per element: slow, and nothing new */
                sl_dtype t = (sl_dtype)((si + ci) % 3);
                check_allreduce(w, t, (ci & 1) ? SL_RED_AVG : SL_RED_SUM, counts[ci], segs[si]);
            }
}

/* Non-integer inputs: rounding happens, so compare with a tolerance against
 * a double-precision sum, and require the ranks to agree bit for bit. */
typedef struct rnd_case {
    sl_dtype t;
    size_t count;
    void *out[MAXW];
} rnd_case;

static float rnd_val(int rank, size_t i)
{
    uint64_t s = (uint64_t)rank * 1000003u + i * 7919u + 1;
    return (float)((double)(tu_rand(&s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static int rnd_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    rnd_case *a = arg;
    (void)msg;
    void *buf = malloc(a->count * 4);
    if (!buf)
        return sl_fail(SL_ENOMEM, "test: buffer");
    a->out[rank] = buf;
    for (size_t i = 0; i < a->count; i++)
        put(a->t, buf, i, rnd_val(rank, i));
    return sl_comm_allreduce(c, buf, a->count, a->t, SL_RED_AVG);
}

Test(collectives_local, allreduce_rounded_identical)
{
    for (int w = 2; w <= MAXW; w++)
        for (int ti = 0; ti < 3; ti++) {
            rnd_case a = {(sl_dtype)ti, 10007, {0}};
            group_run *run = new_run(w, rnd_rank, &a);
            run->cfg.segment_bytes = 1000;
            run_group(run);
            assert_all_ok(run, "random allreduce");
            /* f16: 11 bits, bf16: 8 bits; inputs rounded, then w-1 roundings of sums <= w */
            double tol = a.t == SL_DTYPE_F32 ? 1e-6 : a.t == SL_DTYPE_F16 ? 4e-3 : 3e-2;
            for (size_t i = 0; i < a.count; i++) {
                double ref = 0;
                for (int r = 0; r < w; r++)
                    ref += (double)rounded(a.t, rnd_val(r, i)); /* the input as stored */
                ref /= w;
                double got = (double)get(a.t, a.out[0], i);
                cr_assert(fabs(got - ref) <= tol, "%s world %d element %zu: %g, expected %g (tol %g)",
                          sl_dtype_name(a.t), w, i, got, ref, tol);
            }
            for (int r = 1; r < w; r++)
                cr_assert_eq(first_diff(a.t, a.out[r], a.out[0], a.count), -1,
                             "%s world %d: rank %d differs from rank 0", sl_dtype_name(a.t), w,
                             r);
            for (int r = 0; r < w; r++)
                free(a.out[r]);
            free(run);
        }
}

/* ------------------------------------------------- broadcast, all-gather */

typedef struct bc_case {
    sl_dtype t;
    size_t count;
    int root;
} bc_case;

static int bc_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    bc_case *a = arg;
    size_t bytes = a->count * sl_dtype_size(a->t);
    void *buf = malloc(bytes), *want = malloc(bytes);
    int rc = -1;
    if (!buf || !want) {
        rc = sl_fail(SL_ENOMEM, "test: buffers");
        goto out;
    }
    fill(a->t, buf, a->count, rank, 3);
    fill(a->t, want, a->count, a->root, 3);
    if ((rc = sl_comm_broadcast(c, buf, a->count, a->t, a->root)))
        goto out;
    long i = first_diff(a->t, buf, want, a->count);
    if (i >= 0) {
        snprintf(msg, SL_ERRMSG_MAX, "rank %d: element %ld differs from root %d's", rank, i,
                 a->root);
        rc = -1;
    }
out:
    free(buf);
    free(want);
    return rc;
}

Test(collectives_local, broadcast_each_root)
{
    static const size_t counts[] = {1, 7, 1000, 65537};
    for (int w = 1; w <= MAXW; w++)
        for (int root = 0; root < w; root++)
            for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
                bc_case a = {(sl_dtype)((root + ci) % 3), counts[ci], root};
                group_run *run = new_run(w, bc_rank, &a);
                run_group(run);
                char what[96];
                snprintf(what, sizeof what, "broadcast %s count %zu root %d",
                         sl_dtype_name(a.t), a.count, root);
                assert_all_ok(run, what);
                free(run);
            }
}

typedef struct ag_case {
    sl_dtype t;
    size_t count;
    int in_place;
} ag_case;

static int ag_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    ag_case *a = arg;
    int world = sl_comm_world(c), rc = -1;
    size_t esz = sl_dtype_size(a->t), bytes = a->count * esz;
    char *recv = malloc(bytes * (size_t)world), *send = a->in_place ? NULL : malloc(bytes);
    void *want = malloc(bytes);
    if (!recv || !want || (!a->in_place && !send)) {
        rc = sl_fail(SL_ENOMEM, "test: buffers");
        goto out;
    }
    memset(recv, 0xab, bytes * (size_t)world);
    char *src = a->in_place ? recv + (size_t)rank * bytes : send;
    fill(a->t, src, a->count, rank, 1);
    if ((rc = sl_comm_allgather(c, src, recv, a->count, a->t)))
        goto out;
    for (int p = 0; p < world; p++) {
        fill(a->t, want, a->count, p, 1);
        long i = first_diff(a->t, recv + (size_t)p * bytes, want, a->count);
        if (i >= 0) {
            snprintf(msg, SL_ERRMSG_MAX, "rank %d: block of rank %d, element %ld differs", rank,
                     p, i);
            rc = -1;
            goto out;
        }
    }
out:
    free(recv);
    free(send);
    free(want);
    return rc;
}

Test(collectives_local, allgather)
{
    static const size_t counts[] = {1, 3, 1000, 40001};
    for (int w = 1; w <= MAXW; w++)
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
            for (int ip = 0; ip < 2; ip++) {
                ag_case a = {(sl_dtype)((ci + (size_t)ip) % 3), counts[ci], ip};
                group_run *run = new_run(w, ag_rank, &a);
                run_group(run);
                char what[96];
                snprintf(what, sizeof what, "allgather %s count %zu%s", sl_dtype_name(a.t),
                         a.count, ip ? " in place" : "");
                assert_all_ok(run, what);
                free(run);
            }
}

/* -------------------------------------------------------- exact int sums */

/* Rank r's value i: around 2^24 + 1 (where an f32 sum starts rounding:
 * 16777217 + 16777217 is 33554432 in f32), around 2^40, negative, and
 * both halves of int64's range. */
static int64_t i64_val(int rank, size_t i)
{
    static const int64_t base[] = {16777217, ((int64_t)1 << 40) + 1, -16777219,
                                   INT64_MAX / 8 - 3, INT64_MIN / 8 + 5, 0, 1};
    return base[i % 7] + (int64_t)rank * (int64_t)(i + 1);
}

typedef struct i64_case {
    size_t count;
    int overflow; /* every rank sends INT64_MAX / 2 + 1 */
} i64_case;

static int i64_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    i64_case *a = arg;
    int world = sl_comm_world(c), rc = -1;
    int64_t *v = malloc(a->count * sizeof *v);
    if (!v)
        return sl_fail(SL_ENOMEM, "test: buffers");
    for (size_t i = 0; i < a->count; i++)
        v[i] = a->overflow ? INT64_MAX / 2 + 1 : i64_val(rank, i);
    if ((rc = sl_comm_allreduce_i64(c, v, a->count)))
        goto out;
    for (size_t i = 0; i < a->count; i++) {
        int64_t want = 0;
        for (int p = 0; p < world; p++)
            want += i64_val(p, i);
        if (v[i] != want) {
            snprintf(msg, SL_ERRMSG_MAX, "rank %d: element %zu: %" PRId64 ", want %" PRId64,
                     rank, i, v[i], want);
            rc = -1;
            goto out;
        }
    }
    /* the comm still works after */
    float f = 1;
    rc = sl_comm_allreduce(c, &f, 1, SL_DTYPE_F32, SL_RED_SUM);
    if (!rc && f != (float)world) {
        snprintf(msg, SL_ERRMSG_MAX, "rank %d: f32 sum after: %g", rank, (double)f);
        rc = -1;
    }
out:
    free(v);
    return rc;
}

/* Record counts above 2^24 summed over ranks come out exact (the trainer's
 * epoch length: run.c world_records), on every rank, for every world. */
Test(collectives_local, allreduce_i64_is_exact)
{
    static const size_t counts[] = {1, 7, 1001};
    for (int w = 1; w <= MAXW; w++)
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
            i64_case a = {counts[ci], 0};
            group_run *run = new_run(w, i64_rank, &a);
            run_group(run);
            char what[96];
            snprintf(what, sizeof what, "allreduce_i64 count %zu", a.count);
            assert_all_ok(run, what);
            free(run);
        }
}

/* A sum outside int64 is refused on every rank, with the comm intact. */
Test(collectives_local, allreduce_i64_overflow)
{
    i64_case a = {1, 1};
    group_run *run = new_run(2, i64_rank, &a);
    run_group(run);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(run->rc[r], SL_EINVAL, "rank %d: rc %d: %s", r, run->rc[r], run->msg[r]);
        cr_assert(strstr(run->msg[r], "sl_comm_allreduce_i64: local rank") &&
                  strstr(run->msg[r], "outside int64"), "%s", run->msg[r]);
    }
    free(run);
}

/* ----------------------------------------------------------------- barrier */

#define BAR_ROUNDS 300

typedef struct bar_case {
    _Atomic int arrived[BAR_ROUNDS];
} bar_case;

static int bar_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    bar_case *a = arg;
    int world = sl_comm_world(c);
    uint64_t st = (uint64_t)rank + 99;
    for (int k = 0; k < BAR_ROUNDS; k++) {
        if ((k + rank) % 4 == 0)
            usleep((useconds_t)(tu_rand(&st) % 300));
        atomic_fetch_add(&a->arrived[k], 1);
        int rc = sl_comm_barrier(c);
        if (rc)
            return rc;
        int n = atomic_load(&a->arrived[k]);
        if (n != world) {
            snprintf(msg, SL_ERRMSG_MAX, "rank %d left barrier %d when %d of %d had arrived",
                     rank, k, n, world);
            return -1;
        }
    }
    return SL_OK;
}

Test(collectives_local, barrier)
{
    for (int w = 1; w <= MAXW; w++) {
        bar_case *a = calloc(1, sizeof *a);
        cr_assert_not_null(a);
        group_run *run = new_run(w, bar_rank, a);
        run_group(run);
        assert_all_ok(run, "barrier");
        free(run);
        free(a);
    }
}

/* ------------------------------------------------------- mixed, stressed */

/* Checks buf against the all-reduce of fill(.., salt) over world ranks. */
static int check_reduced(sl_dtype t, sl_redop op, int world, int salt, const void *buf,
                         size_t count, int rank, char *msg)
{
    float s = 1.0f / (float)world;
    for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (int r = 0; r < world; r++)
            sum += ival(r + salt, i, range_of(t));
        float want = rounded(t, sum);
        if (op == SL_RED_AVG && world > 1)
            want = rounded(t, want * s);
        float got = get(t, buf, i);
        if (got != want) {
            snprintf(msg, SL_ERRMSG_MAX,
                     "rank %d: allreduce %s %s count %zu: element %zu is %g, expected %g", rank,
                     sl_dtype_name(t), op == SL_RED_SUM ? "sum" : "avg", count, i, (double)got,
                     (double)want);
            return -1;
        }
    }
    return SL_OK;
}

typedef struct mix_case {
    int iters;
    size_t maxcount;
    uint64_t seed;
} mix_case;

/* Every rank draws the same sequence of collectives (same seed), each of a
 * random kind, dtype and size, and refills its buffers right after each
 * returns: a rank that returned while a neighbour still read its buffer
 * would corrupt the neighbour's result (and TSan would see the race). */
static int mix_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    mix_case *a = arg;
    int world = sl_comm_world(c), rc = SL_OK;
    char *buf = malloc(a->maxcount * 4 * (size_t)world), *want = malloc(a->maxcount * 4);
    if (!buf || !want) {
        rc = sl_fail(SL_ENOMEM, "test: buffers");
        goto out;
    }
    uint64_t st = a->seed;
    for (int it = 0; it < a->iters && !rc; it++) {
        int kind = (int)(tu_rand(&st) % 10);
        sl_dtype t = (sl_dtype)(tu_rand(&st) % 3);
        size_t cap = tu_rand(&st) % 4 == 0 ? a->maxcount : 300;
        size_t count = 1 + (size_t)(tu_rand(&st) % cap);
        sl_redop op = (sl_redop)(tu_rand(&st) % 2);
        int root = (int)(tu_rand(&st) % (uint64_t)world);
        size_t bytes = count * sl_dtype_size(t);
        if (kind < 6) {
            fill(t, buf, count, rank, it);
            if (!(rc = sl_comm_allreduce(c, buf, count, t, op)))
                rc = check_reduced(t, op, world, it, buf, count, rank, msg);
        } else if (kind < 8) {
            fill(t, buf, count, rank, it);
            fill(t, want, count, root, it);
            if (!(rc = sl_comm_broadcast(c, buf, count, t, root)) &&
                first_diff(t, buf, want, count) >= 0) {
                snprintf(msg, SL_ERRMSG_MAX, "rank %d: iteration %d: broadcast from %d wrong",
                         rank, it, root);
                rc = -1;
            }
        } else if (kind < 9) {
            fill(t, want, count, rank, it);
            if (!(rc = sl_comm_allgather(c, want, buf, count, t)))
                for (int p = 0; p < world && !rc; p++) {
                    fill(t, want, count, p, it);
                    if (memcmp(buf + (size_t)p * bytes, want, bytes)) {
                        snprintf(msg, SL_ERRMSG_MAX,
                                 "rank %d: iteration %d: allgather block %d wrong", rank, it, p);
                        rc = -1;
                    }
                }
        } else {
            rc = sl_comm_barrier(c);
        }
        /* scribble over everything at once: the next collective starts clean */
        memset(buf, 0x5a, bytes * (kind == 8 ? (size_t)world : 1));
    }
out:
    free(buf);
    free(want);
    return rc;
}

Test(collectives_local, mixed_back_to_back)
{
    static const size_t segs[] = {256, 0};
    for (int w = 2; w <= MAXW; w++)
        for (int si = 0; si < 2; si++) {
            mix_case a = {UNDER_TSAN ? 60 : 200, si ? 70000 : 3000, 12345u + (uint64_t)w};
            group_run *run = new_run(w, mix_rank, &a);
            run->cfg.segment_bytes = segs[si];
            run_group(run);
            assert_all_ok(run, "mixed collectives");
            free(run);
        }
}

/* --------------------------------------------------------------- async */

#define NB 6

static int async_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    (void)arg;
    int world = sl_comm_world(c), rc = SL_OK;
    uint64_t st = 777;
    float *b[NB + 1] = {0};
    size_t n[NB + 1];
    for (int round = 0; round < 10 && !rc; round++) {
        sl_comm_req *req[NB] = {0};
        for (int k = 0; k <= NB; k++) {
            n[k] = 1 + (size_t)(tu_rand(&st) % 20000);
            b[k] = malloc(n[k] * 4);
            if (!b[k])
                return sl_fail(SL_ENOMEM, "test: buffers");
            fill(SL_DTYPE_F32, b[k], n[k], rank, round * 10 + k);
        }
        for (int k = 0; k < NB && !rc; k++) {
            rc = sl_comm_allreduce_start(c, b[k], n[k], SL_DTYPE_F32, SL_RED_SUM, &req[k]);
            if (!rc && k == NB / 2) /* a blocking call queues behind the started ones */
                rc = sl_comm_allreduce(c, b[NB], n[NB], SL_DTYPE_F32, SL_RED_AVG);
        }
        for (int k = 0; k < NB; k++)
            if (req[k]) {
                int w = sl_comm_wait(c, req[k]);
                rc = rc ? rc : w;
            }
        for (int k = 0; k <= NB && !rc; k++)
            rc = check_reduced(SL_DTYPE_F32, k == NB ? SL_RED_AVG : SL_RED_SUM, world,
                               round * 10 + k, b[k], n[k], rank, msg);
        for (int k = 0; k <= NB; k++)
            free(b[k]);
    }
    return rc;
}

Test(collectives_local, async_start_wait)
{
    for (int w = 1; w <= MAXW; w++) {
        group_run *run = new_run(w, async_rank, NULL);
        run->cfg.segment_bytes = 4096;
        run_group(run);
        assert_all_ok(run, "async allreduce");
        free(run);
    }
}

/* ------------------------------------------------------------- failures */

typedef struct fail_case {
    int odd_rank;            /* the rank that misbehaves */
    int mode;                /* what it does, per test */
    _Atomic int finished;    /* well-behaved ranks done */
    double elapsed[MAXW];    /* the failing call */
    int rc2[MAXW];           /* a later call (sticky) */
    char msg2[MAXW][SL_ERRMSG_MAX];
} fail_case;

/* Well-behaved ranks: one all-reduce (timed), then a barrier that must
 * fail the same way. */
static int good_rank(sl_comm *c, int rank, fail_case *a)
{
    float buf[1000];
    fill(SL_DTYPE_F32, buf, 1000, rank, 0);
    double t0 = now_s();
    int rc = sl_comm_allreduce(c, buf, 1000, SL_DTYPE_F32, SL_RED_SUM);
    a->elapsed[rank] = now_s() - t0;
    char first[SL_ERRMSG_MAX];
    snprintf(first, sizeof first, "%s", sl_errmsg());
    a->rc2[rank] = sl_comm_barrier(c);
    snprintf(a->msg2[rank], SL_ERRMSG_MAX, "%s", sl_errmsg());
    atomic_fetch_add(&a->finished, 1);
    sl_fail(rc, "%s", first);
    return rc;
}

/* The late rank of the timeout test: arrives after everyone else failed. */
static int late_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    fail_case *a = arg;
    (void)msg;
    if (rank != a->odd_rank)
        return good_rank(c, rank, a);
    for (int i = 0; i < 30000 && atomic_load(&a->finished) < sl_comm_world(c) - 1; i++)
        usleep(1000);
    float buf[1000] = {0};
    return sl_comm_allreduce(c, buf, 1000, SL_DTYPE_F32, SL_RED_SUM);
}

static void check_timeout(int skip_open)
{
    enum { W = 3, TMO = 300 };
    fail_case *a = calloc(1, sizeof *a);
    cr_assert_not_null(a);
    a->odd_rank = 2;
    group_run *run = new_run(W, late_rank, a);
    run->cfg.timeout_ms = TMO;
    run->skip_open[2] = skip_open;
    run_group(run);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(run->rc[r], SL_ETIMEDOUT, "rank %d: rc %d: %s", r, run->rc[r], run->msg[r]);
        cr_assert(strstr(run->msg[r], "sl_comm_allreduce: local rank") &&
                      strstr(run->msg[r], "rank 2 is furthest behind") &&
                      strstr(run->msg[r], "a replica died or never arrived"),
                  "rank %d: %s", r, run->msg[r]);
        if (skip_open)
            cr_assert(strstr(run->msg[r], "its comm was never opened"), "%s", run->msg[r]);
        cr_assert(a->elapsed[r] <= TMO / 1000.0 + 3.0, "rank %d timed out after %.3f s "
                  "(timeout %d ms)", r, a->elapsed[r], TMO);
        /* sticky */
        cr_assert_eq(a->rc2[r], SL_ETIMEDOUT, "rank %d: later barrier rc %d: %s", r, a->rc2[r],
                     a->msg2[r]);
        cr_assert(strstr(a->msg2[r], "sl_comm_barrier") &&
                      strstr(a->msg2[r], "rank 2 is furthest behind"),
                  "%s", a->msg2[r]);
    }
    /* not early: the rank that timed out first waited the whole timeout (the
     * other may have started its call later, so it can see less) */
    double first = a->elapsed[0] > a->elapsed[1] ? a->elapsed[0] : a->elapsed[1];
    cr_assert(first >= TMO / 1000.0, "timed out after %.3f s, before the %d ms timeout", first,
              TMO);
    if (!skip_open) /* the late rank finds the group broken */
        cr_assert_eq(run->rc[2], SL_ETIMEDOUT, "late rank: rc %d: %s", run->rc[2], run->msg[2]);
    free(run);
    free(a);
}

Test(collectives_local, timeout_names_missing_rank) { check_timeout(0); }
Test(collectives_local, timeout_never_opened) { check_timeout(1); }

static int abort_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    fail_case *a = arg;
    (void)msg;
    if (rank != a->odd_rank)
        return good_rank(c, rank, a);
    usleep(50000);
    sl_comm_abort(c, "loss is NaN at step 7");
    float buf[4] = {0};
    return sl_comm_allreduce(c, buf, 4, SL_DTYPE_F32, SL_RED_SUM);
}

Test(collectives_local, abort_cancels_peers)
{
    enum { W = 3 };
    fail_case *a = calloc(1, sizeof *a);
    cr_assert_not_null(a);
    a->odd_rank = 1;
    group_run *run = new_run(W, abort_rank, a);
    run_group(run);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(run->rc[r], SL_ECANCELED, "rank %d: rc %d: %s", r, run->rc[r], run->msg[r]);
        cr_assert(strstr(run->msg[r], "rank 1 aborted: loss is NaN at step 7"), "rank %d: %s", r,
                  run->msg[r]);
        if (r == 1)
            continue;
        cr_assert(a->elapsed[r] < 5.0, "rank %d took %.2f s to see the abort", r, a->elapsed[r]);
        cr_assert_eq(a->rc2[r], SL_ECANCELED, "rank %d: later barrier: %s", r, a->msg2[r]);
        cr_assert(strstr(a->msg2[r], "rank 1 aborted: loss is NaN at step 7"), "%s", a->msg2[r]);
    }
    free(run);
    free(a);
}

/* Abort from the rank's thread while its progress thread is blocked in an
 * asynchronous all-reduce that the peer never joins. */
static int abort_async_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    fail_case *a = arg;
    (void)msg;
    if (rank == 1) { /* never joins; waits for rank 0 to finish */
        for (int i = 0; i < 20000 && !atomic_load(&a->finished); i++)
            usleep(1000);
        return sl_comm_barrier(c);
    }
    float buf[100];
    fill(SL_DTYPE_F32, buf, 100, rank, 0);
    sl_comm_req *req = NULL;
    int rc = sl_comm_allreduce_start(c, buf, 100, SL_DTYPE_F32, SL_RED_SUM, &req);
    if (rc)
        return rc;
    usleep(30000);
    double t0 = now_s();
    sl_comm_abort(c, "stopping early");
    rc = sl_comm_wait(c, req);
    a->elapsed[0] = now_s() - t0;
    atomic_store(&a->finished, 1);
    return rc;
}

Test(collectives_local, abort_wakes_async)
{
    fail_case *a = calloc(1, sizeof *a);
    cr_assert_not_null(a);
    group_run *run = new_run(2, abort_async_rank, a);
    run_group(run);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(run->rc[r], SL_ECANCELED, "rank %d: rc %d: %s", r, run->rc[r], run->msg[r]);
        cr_assert(strstr(run->msg[r], "rank 0 aborted: stopping early"), "%s", run->msg[r]);
    }
    cr_assert(a->elapsed[0] < 5.0, "the wait took %.2f s after the abort", a->elapsed[0]);
    free(run);
    free(a);
}

/* A rank that closes its comm without joining: the others fail at once. */
static int close_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    fail_case *a = arg;
    (void)msg;
    if (rank == a->odd_rank)
        return SL_OK; /* the harness destroys the comm */
    return good_rank(c, rank, a);
}

Test(collectives_local, closed_peer)
{
    fail_case *a = calloc(1, sizeof *a);
    cr_assert_not_null(a);
    a->odd_rank = 1;
    group_run *run = new_run(3, close_rank, a);
    run_group(run);
    for (int r = 0; r < 3; r += 2) {
        cr_assert_eq(run->rc[r], SL_ECANCELED, "rank %d: rc %d: %s", r, run->rc[r], run->msg[r]);
        cr_assert(strstr(run->msg[r], "rank 1 closed its comm after 0 collectives"), "%s",
                  run->msg[r]);
        cr_assert(a->elapsed[r] < 5.0, "rank %d took %.2f s", r, a->elapsed[r]);
    }
    free(run);
    free(a);
}

/* Ranks that disagree on the call fail with SL_EINVAL naming both calls. */
static int mismatch_rank(sl_comm *c, int rank, void *arg, char *msg)
{
    int mode = *(int *)arg;
    (void)msg;
    float buf[16] = {0};
    if (rank == 0)
        return sl_comm_allreduce(c, buf, 10, SL_DTYPE_F32, SL_RED_SUM);
    switch (mode) {
    case 0: return sl_comm_allreduce(c, buf, 11, SL_DTYPE_F32, SL_RED_SUM);
    case 1: return sl_comm_allreduce(c, buf, 10, SL_DTYPE_F16, SL_RED_SUM);
    case 2: return sl_comm_allreduce(c, buf, 10, SL_DTYPE_F32, SL_RED_AVG);
    default: return sl_comm_broadcast(c, buf, 10, SL_DTYPE_F32, 0);
    }
}

Test(collectives_local, mismatched_calls)
{
    static const char *want[] = {"count 11", "f16", "op 1", "broadcast("};
    for (int mode = 0; mode < 4; mode++) {
        group_run *run = new_run(2, mismatch_rank, &mode);
        run_group(run);
        for (int r = 0; r < 2; r++) {
            cr_assert_eq(run->rc[r], SL_EINVAL, "mode %d rank %d: rc %d: %s", mode, r,
                         run->rc[r], run->msg[r]);
            cr_assert(strstr(run->msg[r], "differs between ranks") &&
                          strstr(run->msg[r], want[mode]),
                      "mode %d rank %d: %s", mode, r, run->msg[r]);
        }
        free(run);
    }
}

/* ------------------------------------------------------- handles, world 1 */

Test(collectives_local, open_errors_and_lifetime)
{
    sl_comm_group *g = NULL;
    sl_comm *c0 = NULL, *dup = NULL;
    cr_assert_eq(sl_comm_local_group_create(0, NULL, &g), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "world 0"), "%s", sl_errmsg());
    cr_assert_eq(sl_comm_local_group_create(2, NULL, NULL), SL_EINVAL);
    cr_assert_eq(sl_comm_local_group_create(2, NULL, &g), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_comm_local_open(g, 2, &c0), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "rank 2 outside [0, 2)"), "%s", sl_errmsg());
    cr_assert_eq(sl_comm_local_open(g, -1, &c0), SL_EINVAL);
    cr_assert_eq(sl_comm_local_open(g, 1, &c0), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_comm_local_open(g, 1, &dup), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "rank 1: already opened"), "%s", sl_errmsg());
    cr_assert_null(dup);
    cr_assert_eq(sl_comm_rank(c0), 1);
    cr_assert_eq(sl_comm_world(c0), 2);
    cr_assert_eq(sl_comm_local_rank(c0), 1);
    cr_assert_eq(sl_comm_local_world(c0), 2);
    cr_assert_eq(sl_comm_backend_of(c0), SL_COMM_LOCAL);
    cr_assert_eq(sl_comm_send(c0, "x", 1, SL_DTYPE_F32, 0, 0), SL_ENOTSUP);
    /* the group outlives its handle while a comm is open (ASan checks) */
    sl_comm_local_group_destroy(g);
    sl_comm_destroy(c0);
    sl_comm_local_group_destroy(NULL);
}

Test(collectives_local, world_one)
{
    sl_comm_group *g = NULL;
    sl_comm *c = NULL;
    cr_assert_eq(sl_comm_local_group_create(1, NULL, &g), SL_OK);
    cr_assert_eq(sl_comm_local_open(g, 0, &c), SL_OK);
    float v[3] = {1.5f, -2.0f, 3.25f}, w[3];
    memcpy(w, v, sizeof v);
    cr_assert_eq(sl_comm_allreduce(c, v, 3, SL_DTYPE_F32, SL_RED_AVG), SL_OK);
    cr_assert_arr_eq(v, w, sizeof v);
    cr_assert_eq(sl_comm_broadcast(c, v, 3, SL_DTYPE_F32, 0), SL_OK);
    cr_assert_arr_eq(v, w, sizeof v);
    float out[3] = {0};
    cr_assert_eq(sl_comm_allgather(c, v, out, 3, SL_DTYPE_F32), SL_OK);
    cr_assert_arr_eq(out, w, sizeof v);
    cr_assert_eq(sl_comm_barrier(c), SL_OK);
    sl_comm_abort(c, "done here");
    cr_assert_eq(sl_comm_barrier(c), SL_ECANCELED);
    cr_assert(strstr(sl_errmsg(), "rank 0 aborted: done here"), "%s", sl_errmsg());
    sl_comm_destroy(c);
    sl_comm_local_group_destroy(g);
}

/* ------------------------------------------------- stream-ordered calls */

/* The local ring has no stream: sl_comm_allreduce_enqueue is refused with
 * SL_ENOTSUP (nothing reduced, the comm still works) and sl_comm_fence gives
 * a request that is complete at once. */
static int rank_stream_calls(sl_comm *c, int rank, void *arg, char *msg)
{
    (void)arg;
    float v[3] = {1, 2, (float)rank};
    if (sl_comm_stream_ordered(c)) {
        snprintf(msg, SL_ERRMSG_MAX, "local comm says it is stream-ordered");
        return -1;
    }
    int rc = sl_comm_allreduce_enqueue(c, v, 3, SL_DTYPE_F32, SL_RED_SUM);
    if (rc != SL_ENOTSUP || !strstr(sl_errmsg(), "not stream-ordered")) {
        snprintf(msg, SL_ERRMSG_MAX, "enqueue: rc %d: %s", rc, sl_errmsg());
        return -1;
    }
    if (v[2] != (float)rank) {
        snprintf(msg, SL_ERRMSG_MAX, "a refused enqueue changed the buffer");
        return -1;
    }
    sl_comm_req *f = NULL;
    if ((rc = sl_comm_fence(c, &f)) || (rc = sl_comm_wait(c, f)))
        return rc;
    /* the comm is not broken by the refusal */
    if ((rc = sl_comm_allreduce(c, v, 3, SL_DTYPE_F32, SL_RED_SUM)))
        return rc;
    if (v[2] != 1.0f) { /* 0 + 1 */
        snprintf(msg, SL_ERRMSG_MAX, "allreduce after the refusal: %g", (double)v[2]);
        return -1;
    }
    return SL_OK;
}

Test(collectives_local, stream_ordered_calls_refused_fence_completes)
{
    group_run *run = new_run(2, rank_stream_calls, NULL);
    run_group(run);
    assert_all_ok(run, "stream calls");
    free(run);
    cr_assert_eq(sl_comm_fence(NULL, NULL), SL_EINVAL);
}

/* A config whose size is not this library's (built against other headers)
 * is refused by the create functions; NULL still means the defaults. */
Test(collectives_local, config_of_another_size_is_refused)
{
    sl_comm_config cfg = SL_COMM_CONFIG_INIT;
    cr_assert_eq(cfg.size, sizeof cfg);
    cfg.size = sizeof cfg + 8;
    char want[256];
    snprintf(want, sizeof want, "sl_comm_local_group_create: config of %zu bytes, this library's "
             "is %zu: rebuild against this sluice's headers", cfg.size, sizeof cfg);
    sl_comm_group *g = NULL;
    cr_assert_eq(sl_comm_local_group_create(2, &cfg, &g), SL_EINVAL);
    cr_assert_null(g);
    cr_assert_str_eq(sl_errmsg(), want);
    cfg.size = sizeof cfg;
    cr_assert_eq(sl_comm_local_group_create(2, &cfg, &g), SL_OK, "%s", sl_errmsg());
    sl_comm_local_group_destroy(g);
}

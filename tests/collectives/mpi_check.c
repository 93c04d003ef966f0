/*
 * tests/collectives/mpi_check.c - the program that tests/collectives/test_mpi.c
 * starts under mpirun (sluice_mpi_check MODE); every rank runs the same
 * checks on an mpi communicator and prints "rank R: MODE: ok" or what went
 * wrong.
 *
 * Modes and exit codes (0 = every check passed, 1 = a check failed,
 * 2 = usage / setup):
 *   allreduce  sum and avg of f32/f16/bf16, sizes 1 .. 2^24+3: integer
 *              inputs whose sums are exact, so every rank compares bitwise
 *              with the expected values; random inputs against a double
 *              reference with a tolerance; and on both, the result's hash
 *              all-gathered so that every rank checks that all hold the
 *              same bits
 *   split      SLUICE_MPI_MAX_COUNT=1000: all-reduce, broadcast and
 *              all-gather go as several MPI calls (the INT_MAX split path)
 *   broadcast  every root, every dtype
 *   allgather  in place and not; the exact int64 sum built on it
 *              (sl_comm_allreduce_i64)
 *   barrier    rank r enters r*150 ms late; nobody leaves before the last
 *              one entered (CLOCK_REALTIME: one machine)
 *   async      several all-reduces started, a blocking one behind them,
 *              waited in order
 *   sendrecv   a ring with tags, any-source/any-tag, a receive that times
 *              out and leaves the comm usable, then a too-small buffer
 *   timeout    timeout 2 s; rank 2 never calls the all-reduce (it sleeps):
 *              ranks 0-1 get SL_ETIMEDOUT naming the operation, print
 *              "rank R: timeout: got SL_ETIMEDOUT after N ms: MSG" and exit 3
 *   abort      rank 1 waits in a receive that a second thread aborts; ranks
 *              0 and 2 wait in an all-reduce without it: all get
 *              SL_ECANCELED with rank 1's reason; exit 5
 *   kill       rank 1 SIGKILLs itself while the others loop on all-reduces:
 *              mpirun must end the job (the test checks how)
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/collectives.h"
#include "collectives/collectives_int.h"

static int g_rank = -1;
static const char *g_mode = "?";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s: FAIL: %s\n", g_rank, g_mode, buf);
    fflush(stderr);
    exit(1);
}

#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_)                                                                                   \
            die("%s: %s (%s)", #call, sl_strerror(rc_), sl_errmsg());                              \
    } while (0)

static double now_ms(int realtime)
{
    struct timespec ts;
    clock_gettime(realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------- elements */

static const sl_dtype DTYPES[] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};

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

/* A small integer, exact in every dtype, and so are sums of 3 of them. */
static int ival(int rank, size_t i) { return (int)((i * 7 + (size_t)rank * 13) % 61) - 30; }

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* uniform in [-1, 1), a function of (rank, i) */
static float rval(int rank, size_t i)
{
    uint64_t h = splitmix(((uint64_t)rank << 40) ^ i);
    return (float)((double)(h >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Every rank holds the same bits in buf: all-gather its hash (8 bytes = 2
 * f32 elements, copied, never added). */
static void check_same_bits(sl_comm *c, const void *buf, size_t bytes, const char *what)
{
    int world = sl_comm_world(c);
    uint64_t mine = fnv1a(buf, bytes), *all = calloc((size_t)world, sizeof *all);
    if (!all)
        die("out of memory");
    CHECK_OK(sl_comm_allgather(c, &mine, all, 2, SL_DTYPE_F32));
    for (int r = 0; r < world; r++)
        if (all[r] != mine)
            die("%s: rank %d's result differs from this rank's (hash %016llx vs %016llx)", what,
                r, (unsigned long long)all[r], (unsigned long long)mine);
    free(all);
}

/* ----------------------------------------------------------------- modes */

static void allreduce_exact(sl_comm *c, sl_dtype t, sl_redop op, size_t n)
{
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    size_t es = sl_dtype_size(t);
    void *buf = malloc(n * es), *want = malloc(n * es);
    if (!buf || !want)
        die("out of memory for %zu elements", n);
    for (size_t i = 0; i < n; i++) {
        int s = 0;
        for (int r = 0; r < world; r++)
            s += ival(r, i);
        put(t, buf, i, (float)ival(rank, i));
        put(t, want, i, (float)s);
    }
    if (op == SL_RED_AVG)
        sl_scale(t, want, n, 1.0f / (float)world); /* the contract: sum, then scale */
    char what[96];
    snprintf(what, sizeof what, "allreduce %s %s n=%zu", op == SL_RED_AVG ? "avg" : "sum",
             sl_dtype_name(t), n);
    CHECK_OK(sl_comm_allreduce(c, buf, n, t, op));
    if (memcmp(buf, want, n * es)) {
        for (size_t i = 0; i < n; i++)
            if (memcmp((char *)buf + i * es, (char *)want + i * es, es))
                die("%s: element %zu is %g, expected %g", what, i, get(t, buf, i),
                    get(t, want, i));
    }
    check_same_bits(c, buf, n * es, what);
    free(buf);
    free(want);
}

static void allreduce_random(sl_comm *c, sl_dtype t, sl_redop op, size_t n)
{
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    size_t es = sl_dtype_size(t);
    void *buf = malloc(n * es);
    if (!buf)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        put(t, buf, i, rval(rank, i));
    CHECK_OK(sl_comm_allreduce(c, buf, n, t, op));
    /* each rounding costs at most half an ulp of the partial sum (< 2^-p
     * relative, p = 24, 11, 8 significant bits) plus the inputs' own
     * rounding; world-1 adds and the scale */
    double ulp = t == SL_DTYPE_F32 ? 0x1p-24 : t == SL_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
    for (size_t i = 0; i < n; i++) {
        double s = 0, mag = 0;
        for (int r = 0; r < world; r++) {
            float x = rval(r, i);
            put(t, &x, 0, x); /* the input as the dtype holds it */
            x = get(t, &x, 0);
            s += x;
            mag += fabs(x);
        }
        if (op == SL_RED_AVG) {
            s /= world;
            mag /= world;
        }
        double got = get(t, buf, i), tol = (world + 1) * ulp * (mag + 1e-3) + 1e-6;
        if (fabs(got - s) > tol)
            die("allreduce random %s %s n=%zu: element %zu is %.9g, reference %.9g (tolerance "
                "%.3g)", op == SL_RED_AVG ? "avg" : "sum", sl_dtype_name(t), n, i, got, s, tol);
    }
    check_same_bits(c, buf, n * es, "allreduce random");
    free(buf);
}

static void mode_allreduce(sl_comm *c, int big)
{
    static const size_t sizes[] = {1, 2, 3, 7, 33, 1000, 4099, 65537, (1u << 20) + 1};
    for (size_t k = 0; k < sizeof DTYPES / sizeof *DTYPES; k++)
        for (int op = SL_RED_SUM; op <= SL_RED_AVG; op++) {
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
                allreduce_exact(c, DTYPES[k], (sl_redop)op, sizes[s]);
            allreduce_random(c, DTYPES[k], (sl_redop)op, 10007);
        }
    if (big) { /* the largest size once per dtype: 64 MiB of f32 per rank */
        allreduce_exact(c, SL_DTYPE_F32, SL_RED_SUM, (1u << 24) + 3);
        allreduce_exact(c, SL_DTYPE_BF16, SL_RED_AVG, (1u << 22) + 3);
    }
}

static void mode_broadcast(sl_comm *c)
{
    static const size_t sizes[] = {1, 5, 1000, 65537};
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    for (size_t k = 0; k < sizeof DTYPES / sizeof *DTYPES; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (int root = 0; root < world; root++) {
                sl_dtype t = DTYPES[k];
                size_t n = sizes[s], es = sl_dtype_size(t);
                void *buf = malloc(n * es), *want = malloc(n * es);
                if (!buf || !want)
                    die("out of memory");
                for (size_t i = 0; i < n; i++) {
                    put(t, buf, i, (float)ival(rank, i));
                    put(t, want, i, (float)ival(root, i));
                }
                CHECK_OK(sl_comm_broadcast(c, buf, n, t, root));
                if (memcmp(buf, want, n * es))
                    die("broadcast %s n=%zu root %d: differs from the root's buffer",
                        sl_dtype_name(t), n, root);
                free(buf);
                free(want);
            }
}

static void mode_allgather(sl_comm *c)
{
    static const size_t sizes[] = {1, 5, 1000, 65537};
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    for (size_t k = 0; k < sizeof DTYPES / sizeof *DTYPES; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (int in_place = 0; in_place < 2; in_place++) {
                sl_dtype t = DTYPES[k];
                size_t n = sizes[s], es = sl_dtype_size(t);
                char *send = malloc(n * es), *recv = malloc((size_t)world * n * es);
                char *want = malloc((size_t)world * n * es);
                if (!send || !recv || !want)
                    die("out of memory");
                memset(recv, 0xee, (size_t)world * n * es);
                for (int r = 0; r < world; r++)
                    for (size_t i = 0; i < n; i++)
                        put(t, want, (size_t)r * n + i, (float)ival(r, i) + 0.5f);
                char *sp = in_place ? recv + (size_t)rank * n * es : send;
                for (size_t i = 0; i < n; i++)
                    put(t, sp, i, (float)ival(rank, i) + 0.5f);
                CHECK_OK(sl_comm_allgather(c, sp, recv, n, t));
                if (memcmp(recv, want, (size_t)world * n * es))
                    die("allgather %s n=%zu%s: result differs", sl_dtype_name(t), n,
                        in_place ? " in place" : "");
                free(send);
                free(recv);
                free(want);
            }
    /* The exact int64 sum built on the all-gather: counts above 2^24 (the
     * trainer's records per epoch over ranks), large, negative. */
    static const size_t isizes[] = {1, 1001};
    for (size_t s = 0; s < sizeof isizes / sizeof *isizes; s++) {
        size_t n = isizes[s];
        int64_t *v = malloc(n * sizeof *v);
        if (!v)
            die("out of memory");
        for (size_t i = 0; i < n; i++)
            v[i] = (i % 2 ? -((int64_t)1 << 44) : 16777217) + (int64_t)rank * (int64_t)i;
        CHECK_OK(sl_comm_allreduce_i64(c, v, n));
        for (size_t i = 0; i < n; i++) {
            int64_t want = 0;
            for (int r = 0; r < world; r++)
                want += (i % 2 ? -((int64_t)1 << 44) : 16777217) + (int64_t)r * (int64_t)i;
            if (v[i] != want)
                die("allreduce_i64 n=%zu: element %zu is %lld, want %lld", n, i,
                    (long long)v[i], (long long)want);
        }
        free(v);
    }
}

static void mode_barrier(sl_comm *c)
{
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    for (int round = 0; round < 2; round++) {
        CHECK_OK(sl_comm_barrier(c));
        sleep_ms(rank * 150);
        double t[2];
        t[0] = now_ms(1);
        CHECK_OK(sl_comm_barrier(c));
        t[1] = now_ms(1);
        double *all = malloc((size_t)world * sizeof t);
        if (!all)
            die("out of memory");
        CHECK_OK(sl_comm_allgather(c, t, all, 4, SL_DTYPE_F32)); /* 2 doubles = 4 f32 */
        double last_in = 0;
        for (int r = 0; r < world; r++)
            last_in = all[2 * r] > last_in ? all[2 * r] : last_in;
        for (int r = 0; r < world; r++)
            if (all[2 * r + 1] < last_in - 1.0)
                die("barrier: rank %d left %.1f ms before rank %d entered", r,
                    last_in - all[2 * r + 1], world - 1);
        free(all);
    }
}

static void mode_async(sl_comm *c)
{
    enum { N = 6 };
    static const size_t sizes[N] = {1, 1000, 65537, 3, 300001, 17};
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    void *bufs[N];
    sl_comm_req *reqs[N];
    for (int k = 0; k < N; k++) {
        sl_dtype t = DTYPES[k % 3];
        bufs[k] = malloc(sizes[k] * sl_dtype_size(t));
        if (!bufs[k])
            die("out of memory");
        for (size_t i = 0; i < sizes[k]; i++)
            put(t, bufs[k], i, (float)ival(rank + k, i));
        CHECK_OK(sl_comm_allreduce_start(c, bufs[k], sizes[k], t, SL_RED_SUM, &reqs[k]));
    }
    /* a blocking call queues behind the in-flight ones */
    float x = (float)(rank + 1);
    CHECK_OK(sl_comm_allreduce(c, &x, 1, SL_DTYPE_F32, SL_RED_SUM));
    if (x != (float)(world * (world + 1) / 2))
        die("async: blocking all-reduce behind the requests gave %g", x);
    for (int k = 0; k < N; k++) {
        CHECK_OK(sl_comm_wait(c, reqs[k]));
        sl_dtype t = DTYPES[k % 3];
        for (size_t i = 0; i < sizes[k]; i++) {
            int s = 0;
            for (int r = 0; r < world; r++)
                s += ival(r + k, i);
            if (get(t, bufs[k], i) != (float)s)
                die("async: request %d (%s, n=%zu): element %zu is %g, expected %d", k,
                    sl_dtype_name(t), sizes[k], i, get(t, bufs[k], i), s);
        }
        free(bufs[k]);
    }
}

static void mode_sendrecv(sl_comm *c)
{
    int rank = sl_comm_rank(c), world = sl_comm_world(c);
    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    /* ring: send to next with tag 10+rank, receive from prev with any tag */
    float out[100], in[128];
    for (int i = 0; i < 100; i++)
        out[i] = (float)(rank * 1000 + i);
    int from = -1, tag = -1;
    size_t got = 0;
    if (rank % 2 == 0) { /* ordered so that the ring cannot deadlock */
        CHECK_OK(sl_comm_send(c, out, 100 - (size_t)rank, SL_DTYPE_F32, next, 10 + rank));
        CHECK_OK(sl_comm_recv(c, in, 128, SL_DTYPE_F32, prev, -1, 10000, &from, &tag, &got));
    } else {
        CHECK_OK(sl_comm_recv(c, in, 128, SL_DTYPE_F32, prev, -1, 10000, &from, &tag, &got));
        CHECK_OK(sl_comm_send(c, out, 100 - (size_t)rank, SL_DTYPE_F32, next, 10 + rank));
    }
    if (from != prev || tag != 10 + prev || got != 100 - (size_t)prev)
        die("ring: got from %d tag %d %zu elements, expected %d, %d, %d", from, tag, got, prev,
            10 + prev, 100 - prev);
    for (size_t i = 0; i < got; i++)
        if (in[i] != (float)(prev * 1000 + (int)i))
            die("ring: element %zu is %g", i, in[i]);
    CHECK_OK(sl_comm_barrier(c));

    /* any source, any tag: rank 0 hears every other rank once (f16) */
    if (rank == 0) {
        int seen[64] = {0};
        for (int k = 1; k < world; k++) {
            uint16_t h[8];
            CHECK_OK(sl_comm_recv(c, h, 8, SL_DTYPE_F16, -1, -1, 10000, &from, &tag, &got));
            if (from < 1 || from >= world || seen[from]++ || tag != 500 + from || got != 3 ||
                sl_f16_to_f32(h[2]) != (float)from)
                die("any-source: from %d tag %d got %zu value %g", from, tag, got,
                    sl_f16_to_f32(h[2]));
        }
    } else {
        uint16_t h[3] = {0, 0, sl_f32_to_f16((float)rank)};
        CHECK_OK(sl_comm_send(c, h, 3, SL_DTYPE_F16, 0, 500 + rank));
    }
    CHECK_OK(sl_comm_barrier(c));

    /* a receive that times out names the peer and breaks nothing */
    if (rank == 0) {
        double t0 = now_ms(0);
        int rc = sl_comm_recv(c, in, 4, SL_DTYPE_F32, 1, 999, 300, NULL, NULL, NULL);
        double dt = now_ms(0) - t0;
        if (rc != SL_ETIMEDOUT || !strstr(sl_errmsg(), "rank 1") || !strstr(sl_errmsg(), "tag 999"))
            die("recv timeout: rc %d (%s): %s", rc, sl_strerror(rc), sl_errmsg());
        if (dt < 290 || dt > 5000)
            die("recv timeout: returned after %.0f ms for a 300 ms timeout", dt);
        printf("rank 0: sendrecv: receive timed out as asked: %s\n", sl_errmsg());
    }
    CHECK_OK(sl_comm_barrier(c));

    /* a message longer than the buffer: SL_EINVAL naming the sender */
    if (rank == 1)
        CHECK_OK(sl_comm_send(c, out, 10, SL_DTYPE_F32, 0, 7));
    if (rank == 0) {
        int rc = sl_comm_recv(c, in, 5, SL_DTYPE_F32, 1, 7, 10000, NULL, NULL, NULL);
        if (rc != SL_EINVAL || !strstr(sl_errmsg(), "longer than the buffer") ||
            !strstr(sl_errmsg(), "rank 1"))
            die("truncation: rc %d (%s): %s", rc, sl_strerror(rc), sl_errmsg());
        printf("rank 0: sendrecv: too-small buffer refused: %s\n", sl_errmsg());
    }
}

static void mode_timeout(sl_comm *c)
{
    int rank = sl_comm_rank(c);
    CHECK_OK(sl_comm_barrier(c));
    if (rank == 2) {
        sleep(60); /* never calls the all-reduce; mpirun ends us */
        die("rank 2 was not stopped by mpirun");
    }
    float buf[1000] = {0};
    double t0 = now_ms(0);
    int rc = sl_comm_allreduce(c, buf, 1000, SL_DTYPE_F32, SL_RED_SUM);
    double dt = now_ms(0) - t0;
    if (rc != SL_ETIMEDOUT)
        die("expected SL_ETIMEDOUT, got %d (%s): %s", rc, sl_strerror(rc), sl_errmsg());
    printf("rank %d: timeout: got SL_ETIMEDOUT after %.0f ms: %s\n", rank, dt, sl_errmsg());
    /* sticky: the next call returns the same error without waiting */
    t0 = now_ms(0);
    rc = sl_comm_barrier(c);
    if (rc != SL_ETIMEDOUT || !strstr(sl_errmsg(), "broken") || now_ms(0) - t0 > 100)
        die("after a timeout the comm should be broken: rc %d: %s", rc, sl_errmsg());
    fflush(stdout);
    sl_comm_destroy(c);
    sleep_ms(500); /* let the other rank print before mpirun ends the job */
    exit(3);
}

typedef struct aborter {
    sl_comm *c;
    int delay_ms;
} aborter;

static void *abort_later(void *arg)
{
    aborter *a = arg;
    sleep_ms(a->delay_ms);
    sl_comm_abort(a->c, "test abort: loss is NaN");
    return NULL;
}

static void mode_abort(sl_comm *c)
{
    int rank = sl_comm_rank(c);
    CHECK_OK(sl_comm_barrier(c));
    double t0 = now_ms(0);
    int rc;
    if (rank == 1) {
        pthread_t th;
        aborter a = {c, 300};
        if (pthread_create(&th, NULL, abort_later, &a))
            die("pthread_create");
        float in[4];
        rc = sl_comm_recv(c, in, 4, SL_DTYPE_F32, 0, 77, 20000, NULL, NULL, NULL);
        pthread_join(th, NULL);
        if (rc != SL_ECANCELED || !strstr(sl_errmsg(), "aborted on this rank") ||
            !strstr(sl_errmsg(), "loss is NaN"))
            die("own abort: rc %d (%s): %s", rc, sl_strerror(rc), sl_errmsg());
    } else {
        float buf[100] = {0};
        rc = sl_comm_allreduce(c, buf, 100, SL_DTYPE_F32, SL_RED_SUM);
        if (rc != SL_ECANCELED || !strstr(sl_errmsg(), "rank 1 aborted") ||
            !strstr(sl_errmsg(), "loss is NaN"))
            die("peer abort: rc %d (%s): %s", rc, sl_strerror(rc), sl_errmsg());
    }
    double dt = now_ms(0) - t0;
    if (dt > 10000)
        die("abort took %.0f ms to arrive", dt);
    printf("rank %d: abort: got SL_ECANCELED after %.0f ms: %s\n", rank, dt, sl_errmsg());
    fflush(stdout);
    sl_comm_destroy(c);
    sleep_ms(500);
    exit(5);
}

static void mode_kill(sl_comm *c)
{
    int rank = sl_comm_rank(c);
    CHECK_OK(sl_comm_barrier(c));
    float buf[1000];
    for (int k = 0;; k++) {
        if (rank == 1 && k == 20) {
            printf("rank 1: kill: raising SIGKILL\n");
            fflush(stdout);
            raise(SIGKILL);
        }
        for (int i = 0; i < 1000; i++)
            buf[i] = 1.0f;
        int rc = sl_comm_allreduce(c, buf, 1000, SL_DTYPE_F32, SL_RED_SUM);
        if (rc) {
            printf("rank %d: kill: all-reduce %d failed: %s\n", rank, k, sl_errmsg());
            fflush(stdout);
            exit(4);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: sluice_mpi_check allreduce|split|broadcast|allgather|barrier|"
                        "async|sendrecv|timeout|abort|kill\n");
        return 2;
    }
    g_mode = argv[1];
    if (!sl_comm_mpi_launched()) {
        fprintf(stderr, "sluice_mpi_check: start me with mpirun\n");
        return 2;
    }
    if (!strcmp(g_mode, "split"))
        setenv("SLUICE_MPI_MAX_COUNT", "1000", 1);
    sl_comm_config cfg = SL_COMM_CONFIG_INIT;
    cfg.timeout_ms = strcmp(g_mode, "timeout") == 0 ? 2000 : strcmp(g_mode, "kill") == 0 ? 5000
                                                                                        : 60000;
    sl_comm *c = NULL;
    int rc = sl_comm_mpi_create(&cfg, &c);
    if (rc) {
        fprintf(stderr, "sluice_mpi_check: %s\n", sl_errmsg());
        return 2;
    }
    g_rank = sl_comm_rank(c);
    if (sl_comm_world(c) != 3 || sl_comm_backend_of(c) != SL_COMM_MPI ||
        sl_comm_local_world(c) != 3 || sl_comm_local_rank(c) != g_rank)
        die("expected 3 ranks on one machine: world %d local %d/%d", sl_comm_world(c),
            sl_comm_local_rank(c), sl_comm_local_world(c));

    if (!strcmp(g_mode, "allreduce"))
        mode_allreduce(c, 1);
    else if (!strcmp(g_mode, "split")) {
        mode_allreduce(c, 0);
        mode_broadcast(c);
        mode_allgather(c);
    } else if (!strcmp(g_mode, "broadcast"))
        mode_broadcast(c);
    else if (!strcmp(g_mode, "allgather"))
        mode_allgather(c);
    else if (!strcmp(g_mode, "barrier"))
        mode_barrier(c);
    else if (!strcmp(g_mode, "async"))
        mode_async(c);
    else if (!strcmp(g_mode, "sendrecv"))
        mode_sendrecv(c);
    else if (!strcmp(g_mode, "timeout"))
        mode_timeout(c);
    else if (!strcmp(g_mode, "abort"))
        mode_abort(c);
    else if (!strcmp(g_mode, "kill"))
        mode_kill(c);
    else
        die("unknown mode");
    printf("rank %d: %s: ok\n", g_rank, g_mode);
    fflush(stdout);
    sl_comm_destroy(c);
    return 0;
}

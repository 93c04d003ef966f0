/*
 * tests/collectives/test_rendezvous.c - sl_rendezvous_tcp
 * (collectives/rendezvous.c): every rank of a world as a thread of this
 * process on 127.0.0.1 and a port that was free a moment ago (bound to port
 * 0, read back, closed). Rank 0 starts last, so the others' connect
 * retries are exercised. Failures: a rank that never comes, no rank 0, a
 * hello with another world or length, a rank twice, a stranger's bytes, a
 * port probe (ignored), bad arguments.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "collectives/collectives.h"
#include "testutil.h"

#define MAXW 8

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0, "socket failed");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind failed");
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0, "getsockname failed");
    close(fd);
    return ntohs(a.sin_port);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct rank_run {
    int port, rank, world, timeout_ms, delay_ms;
    size_t len;
    unsigned char *blob;
    int rc;
    double ms; /* how long the call took */
    char msg[SL_ERRMSG_MAX];
} rank_run;

static void *rank_main(void *p)
{
    rank_run *r = p;
    sleep_ms(r->delay_ms);
    double t0 = now_ms();
    r->rc = sl_rendezvous_tcp("127.0.0.1", r->port, r->rank, r->world, r->blob, r->len,
                              r->timeout_ms);
    r->ms = now_ms() - t0;
    snprintf(r->msg, sizeof r->msg, "%s", r->rc ? sl_errmsg() : "");
    return NULL;
}

/* Run the given ranks (runs[i].rank etc. filled) as threads and join. */
static void run_ranks(rank_run *runs, int n)
{
    pthread_t th[MAXW];
    for (int i = 0; i < n; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, rank_main, &runs[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* world ranks, rank 0 100 ms late, len bytes: every blob ends as rank 0's. */
static void world_roundtrip(int world, size_t len)
{
    rank_run runs[MAXW];
    int port = free_port();
    uint64_t seed = (uint64_t)world * 1000 + len;
    for (int r = 0; r < world; r++) {
        runs[r] = (rank_run){.port = port, .rank = r, .world = world, .timeout_ms = 10000,
                             .delay_ms = r == 0 ? 100 : 0, .len = len};
        runs[r].blob = malloc(len ? len : 1);
        cr_assert_not_null(runs[r].blob);
        for (size_t i = 0; i < len; i++)
            runs[r].blob[i] = r == 0 ? (unsigned char)tu_rand(&seed) : 0;
    }
    run_ranks(runs, world);
    for (int r = 0; r < world; r++) {
        cr_assert_eq(runs[r].rc, SL_OK, "world %d rank %d: %s", world, r, runs[r].msg);
        cr_assert_arr_eq(runs[r].blob, runs[0].blob, len, "world %d rank %d: blob differs", world,
                         r);
    }
    for (int r = 0; r < world; r++)
        free(runs[r].blob);
}

Test(collectives_rendezvous, world_one)
{
    unsigned char blob[16] = {1, 2, 3};
    /* nothing to exchange: no socket, not even for a port in use */
    cr_assert_eq(sl_rendezvous_tcp(NULL, 1, 0, 1, blob, sizeof blob, 10), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(blob[0], 1);
    cr_assert_eq(blob[2], 3);
}

Test(collectives_rendezvous, world_two) { world_roundtrip(2, 128); }
Test(collectives_rendezvous, world_four) { world_roundtrip(4, 128); }
Test(collectives_rendezvous, world_four_large_blob) { world_roundtrip(4, 3 << 20); }
Test(collectives_rendezvous, empty_blob) { world_roundtrip(3, 0); }

/* Rank 2 of 3 never comes: rank 0 times out naming it; rank 1, with a
 * longer timeout, learns at once that rank 0 gave up. */
Test(collectives_rendezvous, missing_rank)
{
    unsigned char b0[32] = {7}, b1[32] = {0};
    int port = free_port();
    rank_run runs[2] = {
        {.port = port, .rank = 0, .world = 3, .timeout_ms = 600, .len = 32, .blob = b0},
        {.port = port, .rank = 1, .world = 3, .timeout_ms = 10000, .len = 32, .blob = b1},
    };
    run_ranks(runs, 2);
    cr_assert_eq(runs[0].rc, SL_ETIMEDOUT, "rank 0: %d %s", runs[0].rc, runs[0].msg);
    cr_assert(strstr(runs[0].msg, "rank 0 of 3"), "%s", runs[0].msg);
    cr_assert(strstr(runs[0].msg, "timed out after 600 ms"), "%s", runs[0].msg);
    cr_assert(strstr(runs[0].msg, "1 of 2 ranks connected; missing rank(s) 2"), "%s",
              runs[0].msg);
    char port_s[32];
    snprintf(port_s, sizeof port_s, "port %d", port);
    cr_assert(strstr(runs[0].msg, port_s), "%s", runs[0].msg);
    cr_assert(runs[0].ms >= 590 && runs[0].ms < 3000, "rank 0 took %.0f ms", runs[0].ms);
    cr_assert_eq(runs[1].rc, SL_EIO, "rank 1: %d %s", runs[1].rc, runs[1].msg);
    cr_assert(strstr(runs[1].msg, "closed the connection without an answer"), "%s",
              runs[1].msg);
    cr_assert_lt(runs[1].ms, 3000.0, "rank 1 waited %.0f ms after rank 0 gave up", runs[1].ms);
}

/* Nobody listens: the rank retries until its deadline, then names the
 * address and the last error. */
Test(collectives_rendezvous, no_rank_zero)
{
    unsigned char b[8];
    int port = free_port();
    rank_run run = {.port = port, .rank = 1, .world = 2, .timeout_ms = 400, .len = 8, .blob = b};
    run_ranks(&run, 1);
    cr_assert_eq(run.rc, SL_ETIMEDOUT, "%d %s", run.rc, run.msg);
    char where[64];
    snprintf(where, sizeof where, "rank 1 of 2: cannot reach rank 0 at 127.0.0.1:%d within 400 ms",
             port);
    cr_assert(strstr(run.msg, where), "%s", run.msg);
    cr_assert(strstr(run.msg, "Connection refused"), "%s", run.msg);
    cr_assert(run.ms >= 390 && run.ms < 3000, "took %.0f ms", run.ms);
}

/* A rank with another world (or length) is refused, and both sides say why. */
static void mismatch(int client_world, size_t client_len, const char *server_says,
                     const char *client_says)
{
    unsigned char b0[64] = {1}, b1[64] = {0};
    int port = free_port();
    rank_run runs[2] = {
        {.port = port, .rank = 0, .world = 2, .timeout_ms = 5000, .len = 16, .blob = b0},
        {.port = port, .rank = 1, .world = client_world, .timeout_ms = 5000, .len = client_len,
         .blob = b1},
    };
    run_ranks(runs, 2);
    cr_assert_eq(runs[0].rc, SL_EINVAL, "rank 0: %d %s", runs[0].rc, runs[0].msg);
    cr_assert(strstr(runs[0].msg, server_says), "rank 0: %s", runs[0].msg);
    cr_assert_eq(runs[1].rc, SL_EINVAL, "rank 1: %d %s", runs[1].rc, runs[1].msg);
    cr_assert(strstr(runs[1].msg, client_says), "rank 1: %s", runs[1].msg);
    cr_assert_lt(runs[0].ms, 3000.0, "rank 0 took %.0f ms to refuse", runs[0].ms);
    cr_assert_eq(b1[0], 0, "a refused rank got the blob");
}

Test(collectives_rendezvous, wrong_world_refused)
{
    mismatch(3, 16, "says world 3 and 16 bytes, this job has world 2 and 16 bytes",
             "rank 0 at 127.0.0.1");
}

Test(collectives_rendezvous, wrong_length_refused)
{
    mismatch(2, 32, "says world 2 and 32 bytes, this job has world 2 and 16 bytes",
             "refused this rank: it has world 2 and 16 bytes, this rank world 2 and 32 bytes");
}

Test(collectives_rendezvous, same_rank_twice)
{
    unsigned char b0[8] = {1}, b1[8], b2[8];
    int port = free_port();
    rank_run runs[3] = {
        {.port = port, .rank = 0, .world = 3, .timeout_ms = 5000, .len = 8, .blob = b0,
         .delay_ms = 100},
        {.port = port, .rank = 1, .world = 3, .timeout_ms = 5000, .len = 8, .blob = b1},
        {.port = port, .rank = 1, .world = 3, .timeout_ms = 5000, .len = 8, .blob = b2},
    };
    run_ranks(runs, 3);
    cr_assert_eq(runs[0].rc, SL_EINVAL, "rank 0: %d %s", runs[0].rc, runs[0].msg);
    cr_assert(strstr(runs[0].msg, "rank 1 connected twice"), "%s", runs[0].msg);
    cr_assert_neq(runs[1].rc, SL_OK, "a duplicate rank 1 succeeded");
    cr_assert_neq(runs[2].rc, SL_OK, "a duplicate rank 1 succeeded");
}

typedef struct raw_client {
    int port;
    const char *send; /* NULL: connect and close at once (a port probe) */
} raw_client;

static void *raw_main(void *p)
{
    raw_client *rc = p;
    for (int tries = 0; tries < 200; tries++) { /* rank 0 may not listen yet */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)rc->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            if (rc->send && send(fd, rc->send, strlen(rc->send), MSG_NOSIGNAL) < 0)
                perror("send");
            sleep_ms(rc->send ? 300 : 0);
            close(fd);
            return NULL;
        }
        if (fd >= 0)
            close(fd);
        sleep_ms(10);
    }
    return NULL;
}

/* Bytes that are not our hello: rank 0 fails, naming the peer. */
Test(collectives_rendezvous, stranger_refused)
{
    unsigned char b0[8] = {1};
    int port = free_port();
    raw_client rc = {port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n......"};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, raw_main, &rc), 0);
    int st = sl_rendezvous_tcp("127.0.0.1", port, 0, 2, b0, 8, 5000);
    char msg[SL_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", sl_errmsg());
    pthread_join(th, NULL);
    cr_assert_eq(st, SL_EIO, "%d %s", st, msg);
    cr_assert(strstr(msg, "is not a sluice rendezvous"), "%s", msg);
    cr_assert(strstr(msg, "127.0.0.1:"), "the peer is not named: %s", msg);
}

/* A connection that closes without a word (a health check) is ignored. */
Test(collectives_rendezvous, probe_ignored)
{
    unsigned char b0[16], b1[16] = {0};
    for (int i = 0; i < 16; i++)
        b0[i] = (unsigned char)(i * 11 + 1);
    int port = free_port();
    raw_client probe = {port, NULL};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, raw_main, &probe), 0);
    rank_run runs[2] = {
        {.port = port, .rank = 0, .world = 2, .timeout_ms = 5000, .len = 16, .blob = b0},
        {.port = port, .rank = 1, .world = 2, .timeout_ms = 5000, .len = 16, .blob = b1,
         .delay_ms = 200},
    };
    run_ranks(runs, 2);
    pthread_join(th, NULL);
    cr_assert_eq(runs[0].rc, SL_OK, "%s", runs[0].msg);
    cr_assert_eq(runs[1].rc, SL_OK, "%s", runs[1].msg);
    cr_assert_arr_eq(b1, b0, 16);
}

Test(collectives_rendezvous, bad_arguments)
{
    unsigned char b[4];
    cr_assert_eq(sl_rendezvous_tcp("127.0.0.1", 5000, 2, 2, b, 4, 10), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "rank 2 outside world 2"), "%s", sl_errmsg());
    cr_assert_eq(sl_rendezvous_tcp("127.0.0.1", 0, 1, 2, b, 4, 10), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "port 0 outside"), "%s", sl_errmsg());
    cr_assert_eq(sl_rendezvous_tcp(NULL, 5000, 1, 2, b, 4, 10), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no address"), "%s", sl_errmsg());
    cr_assert_eq(sl_rendezvous_tcp("127.0.0.1", 5000, 1, 2, NULL, 4, 10), SL_EINVAL);
    cr_assert_eq(sl_rendezvous_tcp("127.0.0.1", 5000, 0, 0, b, 4, 10), SL_EINVAL);
}

/* Rank 0 cannot listen on a port that a live socket holds. */
Test(collectives_rendezvous, port_in_use)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    int v6 = fd >= 0;
    if (!v6)
        fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    int zero = 0;
    if (v6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = v6 ? sizeof a6 : sizeof a4;
    struct sockaddr *sa = v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4;
    cr_assert(bind(fd, sa, len) == 0 && listen(fd, 1) == 0 && getsockname(fd, sa, &len) == 0);
    int port = ntohs(v6 ? a6.sin6_port : a4.sin_port);
    unsigned char b[4] = {0};
    int rc = sl_rendezvous_tcp("127.0.0.1", port, 0, 2, b, 4, 300);
    close(fd);
    cr_assert_eq(rc, SL_EIO, "%d %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "cannot listen on port"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "Address already in use"), "%s", sl_errmsg());
}

/* tests/records/test_bytesrc_hostile.c - the byte source (records/bytesrc.h)
 * against servers that restart, misbehave or lie (issue 39), on loopback:
 * nginx restarted mid-read, with TLS from a private CA and redirects,
 * tests/servers/hostile.py (Range ignored, a 206 longer than asked, bodies
 * without end, stalls, a slow but healthy server, a listing whose
 * continuation tokens loop, the connection's identity for fork()), and the
 * addressing and redaction rules that need no server. Each test fails on
 * the tree before issue 39's fixes. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/status.h"
#include "records/bytesrc.h"
#include "records/bytesrc_int.h"
#if SLUICE_WITH_CURL
#include "records/remote_int.h" /* sl_s3_parse */
#endif
#include "servers.h"
#include "testutil.h"

#define SIZE 300007

static void need_curl(void)
{
    if (!SLUICE_WITH_CURL)
        cr_skip_test("built without libcurl (SLUICE_WITH_CURL=OFF)");
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *url_of(const srv *s, const char *path)
{
    char *u = malloc(strlen(s->url) + strlen(path) + 2);
    cr_assert_not_null(u);
    sprintf(u, "%s/%s", s->url, path);
    return u;
}

/* ---------------------------------------------------------------- settings */

Test(bytesrc_hostile, defaults_budget_and_env_retries_zero)
{
    sl_io_opts o;
    /* SLUICE_IO_RETRIES=0 means no retry (it meant the default, 5); read
     * once per process, and each Criterion test is a process of its own */
    setenv("SLUICE_IO_RETRIES", "0", 1);
    sl_io_configure(NULL);
    sl_io_get_opts(&o);
    cr_assert_eq(o.retries, SL_IO_NO_RETRY, "SLUICE_IO_RETRIES=0 gave %u", o.retries);
    cr_assert_eq(sl_io_tries(&o), 1);
    unsetenv("SLUICE_IO_RETRIES");
    cr_assert_eq(o.retry_ms, 60000, "a budget that rides out a restart of tens of seconds");
    cr_assert_eq(o.timeout_ms, 30000);

    /* the budget, not a count, decides by default; the last wait is cut to
     * the budget's end */
    o.retries = 0;
    o.retry_ms = 1000;
    o.backoff_ms = 5000;
    uint64_t wait, t0 = sl_now_ns();
    cr_assert_eq(sl_io_tries(&o), UINT32_MAX);
    cr_assert(sl_io_retry_next(&o, 40, t0, &wait), "a 40th try within the budget");
    cr_assert_leq(wait, 1000000000ull);
    cr_assert(!sl_io_retry_next(&o, 2, t0 - 1100000000ull, &wait), "past the budget");
    o.retries = 3;
    cr_assert(sl_io_retry_next(&o, 3, t0, &wait));
    cr_assert(!sl_io_retry_next(&o, 4, t0, &wait), "the count, when set, too");
}

/* ---------------------------------------------------------------- a restart */

/* The reads of the restart test, on a thread of their own: the restart
 * runs on the test's main thread, since a server started from a thread
 * would die with it (PR_SET_PDEATHSIG follows the forking thread). */
typedef struct reads {
    const char *url;
    const uint8_t *want;
    int rc;
    double seconds;
    char msg[SL_ERRMSG_MAX];
} reads;

static void *reads_main(void *arg)
{
    reads *r = arg;
    static uint8_t bufs[8][20000];
    double t0 = now_s();
    r->rc = sl_bytes_read(r->url, bufs[0], 1000, 1234);
    if (!r->rc && memcmp(bufs[0], r->want + 1234, 1000))
        r->rc = -1;
    /* the fetcher: eight requests, each backing off on its own */
    sl_fetcher *f = NULL;
    if (!r->rc)
        r->rc = sl_fetcher_open(NULL, &f);
    for (uintptr_t i = 0; i < 8 && !r->rc; i++)
        r->rc = sl_fetcher_add(f, r->url, i * 20000, bufs[i], 20000, (void *)i);
    for (int k = 0; k < 8 && !r->rc; k++) {
        void *tag;
        if (!(r->rc = sl_fetcher_wait(f, &tag)) &&
            memcmp(bufs[(uintptr_t)tag], r->want + (uintptr_t)tag * 20000, 20000))
            r->rc = -1;
    }
    sl_fetcher_close(f);
    snprintf(r->msg, sizeof r->msg, "%s", sl_errmsg());
    r->seconds = now_s() - t0;
    return NULL;
}

/* nginx killed and back 3 s later: with the default budget every read
 * (blocking and in the fetcher) waits it out and gets its bytes. (The old
 * 5 retries backed off 1.5 s on average: a 1 s restart failed 3 runs in 7.) */
Test(bytesrc_hostile, restart_ridden_out_by_default)
{
    need_curl();
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "f.bin", SIZE, 1);
    srv ng;
    srv_nginx_start(dir, &ng);
    sl_io_configure(NULL); /* the defaults, as a user has them */
    char *url = url_of(&ng, "f.bin");
    uint8_t b[1000];
    cr_assert_eq(sl_bytes_read(url, b, sizeof b, 0), SL_OK, "%s", sl_errmsg());

    reads r = {.url = url, .want = want};
    pthread_t th;
    srv_nginx_restart(&ng, -1); /* down (a crash) */
    cr_assert_eq(pthread_create(&th, NULL, reads_main, &r), 0);
    usleep(3000 * 1000);
    srv_nginx_restart(&ng, 0); /* and back, 3 s later, on the same port */
    pthread_join(th, NULL);
    cr_assert_eq(r.rc, SL_OK, "%s", r.msg);
    cr_assert_gt(r.seconds, 2.0, "the reads did not wait for the server");
    srv_stop(&ng);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* A server that stays down: the error comes after the budget, not a
 * count, and says how long and how often it tried. */
Test(bytesrc_hostile, budget_spent_then_named)
{
    need_curl();
    char *dir = tu_tmpdir();
    free(tu_random_file(dir, "f.bin", 1000, 2));
    srv ng;
    srv_nginx_start(dir, &ng);
    char *url = url_of(&ng, "f.bin");
    srv_stop(&ng); /* refused from now on */
    sl_io_configure(&(sl_io_opts){.retry_ms = 1500, .backoff_ms = 50});
    uint8_t b[10];
    double t0 = now_s();
    int rc = sl_bytes_read(url, b, sizeof b, 0);
    double t = now_s() - t0;
    cr_assert_eq(rc, SL_EIO, "%s", sl_errmsg());
    cr_assert(t > 1.4 && t < 6, "gave up after %.2f s with a 1.5 s budget", t);
    const char *m = sl_errmsg();
    cr_assert(strstr(m, url) && strstr(m, "tries in 1.") && strstr(m, "bytes 0-9"), "%s", m);
    sl_io_configure(NULL);
    free(url);
    tu_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- bounds */

/* A server that ignores Range: each object crosses the network once (it
 * crossed up to each block's end for every block: quadratic), blocking
 * reads and the fetcher alike, the bytes right. */
Test(bytesrc_hostile, range_ignored_object_read_once)
{
    need_curl();
    enum { BIG = 4 << 20, BLOCK = 64 << 10 };
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "big.bin", BIG, 3);
    free(tu_random_file(dir, "two.bin", BIG, 4));
    srv h;
    srv_hostile_start(dir, "norange", &h);
    sl_io_configure(&(sl_io_opts){.backoff_ms = 1, .inflight = 8});
    sl_norange_drop_all();
    char *url = url_of(&h, "big.bin");
    static uint8_t b[BLOCK];
    for (size_t off = 0; off < BIG; off += BLOCK) {
        cr_assert_eq(sl_bytes_read(url, b, BLOCK, off), SL_OK, "%s", sl_errmsg());
        cr_assert(!memcmp(b, want + off, BLOCK), "block @ %zu", off);
    }
    long conns, reqs, bytes;
    srv_hostile_stats(&h, &conns, &reqs, &bytes);
    cr_assert_lt(bytes, 2L * BIG, "%ld bytes served for a %d-byte object read in blocks", bytes,
                 BIG);
    /* past the end of the copy: named, as from a server that honours Range */
    cr_assert_eq(sl_bytes_read(url, b, 100, BIG - 50), SL_ECORRUPT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "ends before byte"), "%s", sl_errmsg());

    /* the fetcher, 64 blocks of another object, 8 in flight */
    char *url2 = url_of(&h, "two.bin");
    uint8_t *want2 = malloc(BIG), *got = malloc(BIG);
    char *p2 = tu_join(dir, "two.bin");
    size_t l2;
    free(want2);
    want2 = tu_read_file(p2, &l2);
    sl_fetcher *f;
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < BIG / BLOCK; i++)
        cr_assert_eq(sl_fetcher_add(f, url2, i * BLOCK, got + i * BLOCK, BLOCK, (void *)i), SL_OK);
    for (size_t k = 0; k < BIG / BLOCK; k++) {
        void *tag;
        cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
    }
    sl_fetcher_close(f);
    cr_assert(!memcmp(got, want2, BIG));
    long bytes2;
    srv_hostile_stats(&h, &conns, &reqs, &bytes2);
    cr_assert_lt(bytes2 - bytes, 10L * BIG, "%ld bytes served for the fetcher's object",
                 bytes2 - bytes);
    srv_stop(&h);
    free(p2);
    free(got);
    free(want2);
    free(url2);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* A 206 that goes on past the range (64 MiB more): the range is taken and
 * the rest not read. */
Test(bytesrc_hostile, long_206_not_read_to_its_end)
{
    need_curl();
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "f.bin", SIZE, 5);
    srv h;
    srv_hostile_start(dir, "long206", &h);
    sl_io_configure(&(sl_io_opts){.backoff_ms = 1, .retries = 2});
    sl_io_stats_reset();
    char *url = url_of(&h, "f.bin");
    uint8_t b[1000];
    cr_assert_eq(sl_bytes_read(url, b, sizeof b, 777), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 777, sizeof b));
    sl_io_stats s;
    sl_io_stats_get(&s);
    cr_assert_lt(s.bytes, 16u << 20, "%llu body bytes received for 1000 asked",
                 (unsigned long long)s.bytes);
    srv_stop(&h);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* Whole-object GETs (dataset.json, an index, a listing page) stop at
 * SL_BYTES_GET_MAX: refused from Content-Length, or once the stream passes
 * it, with a message naming the object. */
Test(bytesrc_hostile, whole_get_capped)
{
    need_curl();
    char *dir = tu_tmpdir();
    srv h;
    srv_hostile_start(dir, "huge", &h);
    sl_io_configure(&(sl_io_opts){.backoff_ms = 1, .retries = 2});
    sl_io_stats_reset();
    char *url = url_of(&h, "dataset.json");
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = sl_bytes_get(url, &buf, &len);
    cr_assert_eq(rc, SL_ECORRUPT, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), url) && strstr(sl_errmsg(), "64 MiB") &&
              strstr(sl_errmsg(), "Content-Length"), "%s", sl_errmsg());
    sl_io_stats s;
    sl_io_stats_get(&s);
    cr_assert_lt(s.bytes, 1u << 20, "refused before the body: %llu bytes read",
                 (unsigned long long)s.bytes);

    srv_proxy_mode(&h, "hugeclose");
    sl_io_stats_reset();
    rc = sl_bytes_get(url, &buf, &len);
    cr_assert_eq(rc, SL_ECORRUPT, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "64 MiB"), "%s", sl_errmsg());
    sl_io_stats_get(&s);
    cr_assert_lt(s.bytes, 80u << 20, "%llu bytes read", (unsigned long long)s.bytes);
    srv_stop(&h);
    free(url);
    tu_rmrf(dir);
    free(dir);
}

/* An S3 listing whose continuation token comes back (at once, or after a
 * round of three) is refused; it grew without end before. */
Test(bytesrc_hostile, listing_with_repeated_token_refused)
{
    need_curl();
    char *dir = tu_tmpdir();
    srv h;
    srv_hostile_start(dir, "looptoken=1", &h);
    setenv("AWS_ENDPOINT_URL", h.url, 1);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_ENDPOINT_URL_S3");
    sl_io_configure(&(sl_io_opts){.backoff_ms = 1, .retries = 1});
    char **names = NULL;
    size_t n = 0;
    for (int k = 1; k <= 3; k += 2) {
        char mode[32];
        snprintf(mode, sizeof mode, "looptoken=%d", k);
        srv_proxy_mode(&h, mode);
        int rc = sl_bytes_list("s3://bkt/p/", &names, &n);
        cr_assert_eq(rc, SL_ECORRUPT, "%s: rc %d: %s", mode, rc, sl_errmsg());
        cr_assert(strstr(sl_errmsg(), "s3://bkt/p/") && strstr(sl_errmsg(), "loop") &&
                  strstr(sl_errmsg(), "NextContinuationToken"), "%s", sl_errmsg());
    }
    srv_stop(&h);
    unsetenv("AWS_ENDPOINT_URL");
    tu_rmrf(dir);
    free(dir);
}

/* A stall (headers, then nothing) is cut after the timeout; a slow but
 * steady transfer that takes longer than the timeout is not (it was: the
 * timeout covered the whole transfer). */
Test(bytesrc_hostile, stall_cut_slow_transfer_kept)
{
    need_curl();
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "f.bin", 600000, 6);
    srv h;
    srv_hostile_start(dir, "stall", &h);
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY, .timeout_ms = 1000});
    char *url = url_of(&h, "f.bin");
    uint8_t *b = malloc(600000);
    double t0 = now_s();
    int rc = sl_bytes_read(url, b, 1000, 0);
    double t = now_s() - t0;
    cr_assert_eq(rc, SL_EIO, "rc %d: %s", rc, sl_errmsg());
    cr_assert_lt(t, 5.0, "a stall was cut after %.1f s with a 1 s timeout", t);
    cr_assert(strstr(sl_errmsg(), url), "%s", sl_errmsg());

    srv_proxy_mode(&h, "slow=250000"); /* 600 kB at 250 kB/s: 2.4 s */
    t0 = now_s();
    cr_assert_eq(sl_bytes_read(url, b, 600000, 0), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want, 600000));
    cr_assert_gt(now_s() - t0, 1.5, "the transfer was not slow: the test proves nothing");
    srv_stop(&h);
    free(b);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- TLS */

/* A private CA: refused without it; trusted through --ca-bundle
 * (sl_io_opts.ca_bundle), CURL_CA_BUNDLE, SSL_CERT_FILE, SSL_CERT_DIR, and
 * AWS_CA_BUNDLE for s3:// (path style to the https endpoint); a missing
 * bundle named. A redirect from https to http is refused, to https
 * followed. */
Test(bytesrc_hostile, private_ca_and_redirects)
{
    need_curl();
    static const char *const vars[] = {"CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR",
                                       "AWS_CA_BUNDLE"};
    for (size_t i = 0; i < 4; i++)
        unsetenv(vars[i]);
    char *dir = tu_tmpdir(), *tls = tu_tmpdir(), ca[600], cadir[600], extra[600];
    uint8_t *want = tu_random_file(dir, "f.bin", SIZE, 7);
    char *bkt = tu_join(dir, "bkt");
    cr_assert_eq(mkdir(bkt, 0755), 0);
    free(tu_random_file(bkt, "k.bin", 1000, 8));
    srv_tls_make(tls);
    snprintf(ca, sizeof ca, "%s/ca.pem", tls);
    snprintf(cadir, sizeof cadir, "%s/cadir", tls);
    srv plain, ng;
    srv_nginx_start(dir, &plain);
    snprintf(extra, sizeof extra, "location /down/ { return 302 %s/f.bin; } "
             "location /up/ { return 302 /f.bin; }", plain.url);
    srv_nginx_start_ex(dir, extra, tls, &ng);
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY});
    char *url = url_of(&ng, "f.bin");
    uint8_t b[1000];

    int rc = sl_bytes_read(url, b, sizeof b, 10);
    cr_assert_eq(rc, SL_EIO, "a certificate from an unknown CA was accepted");
    cr_assert(strstr(sl_errmsg(), url), "%s", sl_errmsg());
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY, .ca_bundle = ca});
    cr_assert_eq(sl_bytes_read(url, b, sizeof b, 10), SL_OK, "--ca-bundle: %s", sl_errmsg());
    cr_assert(!memcmp(b, want + 10, sizeof b));
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY});
    const char *vals[] = {ca, ca, cadir};
    for (size_t i = 0; i < 3; i++) {
        setenv(vars[i], vals[i], 1);
        cr_assert_eq(sl_bytes_read(url, b, sizeof b, 20), SL_OK, "%s: %s", vars[i], sl_errmsg());
        cr_assert(!memcmp(b, want + 20, sizeof b));
        unsetenv(vars[i]);
    }
    /* AWS_CA_BUNDLE: s3:// only (as the AWS SDKs read it) */
    setenv("AWS_CA_BUNDLE", ca, 1);
    cr_assert_eq(sl_bytes_read(url, b, sizeof b, 0), SL_EIO, "AWS_CA_BUNDLE applied to https://");
    setenv("AWS_ENDPOINT_URL", ng.url, 1);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_ENDPOINT_URL_S3");
    cr_assert_eq(sl_bytes_read("s3://bkt/k.bin", b, 100, 0), SL_OK, "AWS_CA_BUNDLE: %s",
                 sl_errmsg());
    unsetenv("AWS_CA_BUNDLE");
    unsetenv("AWS_ENDPOINT_URL");
    /* a bundle that is not there: named, not a TLS failure */
    setenv("CURL_CA_BUNDLE", "/nowhere/ca.pem", 1);
    cr_assert_eq(sl_bytes_read(url, b, 10, 0), SL_EINVAL, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "/nowhere/ca.pem") && strstr(sl_errmsg(), "CURL_CA_BUNDLE"),
              "%s", sl_errmsg());
    setenv("CURL_CA_BUNDLE", ca, 1);

    /* redirects: to https followed, to http refused */
    char *up = url_of(&ng, "up/x"), *down = url_of(&ng, "down/x");
    cr_assert_eq(sl_bytes_read(up, b, sizeof b, 30), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 30, sizeof b));
    rc = sl_bytes_read(down, b, sizeof b, 30);
    cr_assert_neq(rc, SL_OK, "an https URL was followed to http://");
    cr_assert(strstr(sl_errmsg(), down), "%s", sl_errmsg());
    unsetenv("CURL_CA_BUNDLE");
    sl_io_configure(NULL);
    srv_stop(&ng);
    srv_stop(&plain);
    free(up);
    free(down);
    free(url);
    free(bkt);
    free(want);
    tu_rmrf(dir);
    tu_rmrf(tls);
    free(dir);
    free(tls);
}

/* ---------------------------------------------------------------- S3 addressing */

/* The bucket is checked before it goes into a URL ("s3://HOST:PORT?/k" sent
 * signed requests to HOST:PORT); a name that is not a DNS label (dots,
 * '_', capitals) is addressed by path on AWS; AWS_SESSION_TOKEN never goes
 * over http:// to another host. */
Test(bytesrc_hostile, s3_bucket_checked_and_token_kept)
{
    need_curl();
    char *dir = tu_tmpdir();
    char *bkt = tu_join(dir, "bkt");
    cr_assert_eq(mkdir(bkt, 0755), 0);
    uint8_t *want = tu_random_file(bkt, "k.bin", 1000, 9);
    srv h;
    srv_hostile_start(dir, "pass", &h);
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_SESSION_TOKEN");
    setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY, .timeout_ms = 2000});
    char path[128];
    uint8_t b[100];
    snprintf(path, sizeof path, "s3://127.0.0.1:%d?/k", h.port);
    long conns0, conns, reqs, bytes;
    srv_hostile_stats(&h, &conns0, &reqs, &bytes);
    int rc = sl_bytes_read(path, b, 10, 0);
    cr_assert_eq(rc, SL_EINVAL, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "not a bucket name"), "%s", sl_errmsg());
    srv_hostile_stats(&h, &conns, &reqs, &bytes);
    cr_assert_eq(conns, conns0 + 1, "a signed request went to the host in the bucket's place "
                 "(%ld connections besides the stats')", conns - conns0 - 1);
    cr_assert_eq(sl_bytes_read("s3://ab/k", b, 1, 0), SL_EINVAL, "a 2-byte bucket");

#if SLUICE_WITH_CURL
    char *base = NULL, *key = NULL;
    cr_assert_eq(sl_s3_parse("t", "s3://my.data.bucket/a/b", &base, &key), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_str_eq(base, "https://s3.us-east-1.amazonaws.com/my.data.bucket");
    free(base);
    free(key);
    cr_assert_eq(sl_s3_parse("t", "s3://plain-bucket/a", &base, &key), SL_OK);
    cr_assert_str_eq(base, "https://plain-bucket.s3.us-east-1.amazonaws.com");
    free(base);
    free(key);
#endif

    /* the session token: refused towards a non-loopback http:// endpoint
     * before any connection; to the loopback it goes (and the read works) */
    setenv("AWS_SESSION_TOKEN", "FQoGZXIvYXdzEXAMPLETOKEN", 1);
    setenv("AWS_ENDPOINT_URL", "http://192.0.2.1:9", 1); /* TEST-NET-1: nothing answers */
    double t0 = now_s();
    rc = sl_bytes_read("s3://bkt/k.bin", b, 10, 0);
    cr_assert_eq(rc, SL_EPERM, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "AWS_SESSION_TOKEN") && strstr(sl_errmsg(), "https://") &&
              !strstr(sl_errmsg(), "EXAMPLETOKEN"), "%s", sl_errmsg());
    cr_assert_lt(now_s() - t0, 1.0, "it tried to connect first");
    setenv("AWS_ENDPOINT_URL", h.url, 1);
    cr_assert_eq(sl_bytes_read("s3://bkt/k.bin", b, 100, 0), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want, 100));
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    sl_io_configure(NULL);
    srv_stop(&h);
    free(want);
    free(bkt);
    tu_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- redaction */

/* A path enters once through sl_path_redact: its name has no password and
 * no signature, and the requests still carry them (nginx checks the
 * password; the query goes with the one object it belongs to). A name
 * beside a presigned object is not fetched. */
Test(bytesrc_hostile, redacted_names_keep_their_secrets)
{
    need_curl();
    char *dir = tu_tmpdir(), extra[700], *pw = tu_join(dir, "htpasswd"), *out = NULL;
    uint8_t *want = tu_random_file(dir, "f.bin", SIZE, 10);
    cr_assert_eq(tu_run(&out, "printf 'user:%%s\\n' \"$(openssl passwd -apr1 hunter2)\" > '%s'",
                        pw), 0, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "auth_basic sluice; auth_basic_user_file %s;", pw);
    srv ng;
    srv_nginx_start_ex(dir, extra, NULL, &ng);
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY});
    char given[256], *name = NULL;
    snprintf(given, sizeof given, "http://user:hunter2@127.0.0.1:%d/f.bin", ng.port);
    cr_assert_eq(sl_path_redact(given, &name), SL_OK);
    char bare[128];
    snprintf(bare, sizeof bare, "http://127.0.0.1:%d/f.bin", ng.port);
    cr_assert_str_eq(name, bare);
    uint8_t b[1000];
    cr_assert_eq(sl_bytes_read(name, b, sizeof b, 5), SL_OK, "the password was not sent: %s",
                 sl_errmsg());
    cr_assert(!memcmp(b, want + 5, sizeof b));
    /* another object on that origin gets it too, and its error names it bare */
    char other[128];
    snprintf(other, sizeof other, "http://127.0.0.1:%d/nope.bin", ng.port);
    cr_assert_eq(sl_bytes_read(other, b, 1, 0), SL_ENOENT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), other) && !strstr(sl_errmsg(), "hunter2"), "%s", sl_errmsg());
    free(name);

    /* a presigned-style query: kept for that object, gone from its name */
    snprintf(given, sizeof given, "http://user:hunter2@127.0.0.1:%d/f.bin?X-Amz-Signature=abcd"
             "&X-Amz-Expires=60", ng.port);
    cr_assert_eq(sl_path_redact(given, &name), SL_OK);
    cr_assert_str_eq(name, bare);
    cr_assert_eq(sl_bytes_read(name, b, sizeof b, 7), SL_OK, "%s", sl_errmsg());
    uint64_t size = 0;
    cr_assert_eq(sl_bytes_size(name, &size), SL_OK, "%s", sl_errmsg()); /* by GET: a presigned
                                                                          * URL signs GET */
    cr_assert_eq(size, SIZE);
    char idx[160];
    snprintf(idx, sizeof idx, "%s.idx", bare);
    cr_assert_eq(sl_bytes_get(idx, (uint8_t **)&out, &(size_t){0}), SL_ENOENT, "%s",
                 sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "presigned") && !strstr(sl_errmsg(), "abcd"), "%s",
              sl_errmsg());
    free(name);
    sl_secrets_forget();
    cr_assert_eq(sl_bytes_read(bare, b, 1, 0), SL_EPERM, "forgotten: no password any more");
    sl_io_configure(NULL);
    srv_stop(&ng);
    free(pw);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- fork */

/* A child's requests go on a connection of its own, and the parent's
 * connection survives the child (nothing cleaned up on its socket); a
 * fetcher opened before the fork is refused in the child. */
Test(bytesrc_hostile, fork_child_has_its_own_connection)
{
    need_curl();
    char *dir = tu_tmpdir();
    srv h;
    srv_hostile_start(dir, "peer", &h);
    sl_io_configure(&(sl_io_opts){.retries = 2, .backoff_ms = 1});
    char *url = url_of(&h, "peer");
    uint8_t *body = NULL;
    size_t len = 0;
    cr_assert_eq(sl_bytes_get(url, &body, &len), SL_OK, "%s", sl_errmsg());
    long parent_port = strtol((char *)body, NULL, 10);
    free(body);
    sl_fetcher *f;
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    uint8_t one;
    cr_assert_eq(sl_fetcher_add(f, url, 0, &one, 1, NULL), SL_OK);
    void *tag;
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());

    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        long port = -1;
        int status = 1;
        for (int i = 0; i < 20; i++) { /* many: a shared connection would cross */
            uint8_t *b = NULL;
            size_t l = 0;
            if (sl_bytes_get(url, &b, &l) != SL_OK)
                _exit(3);
            long p = strtol((char *)b, NULL, 10);
            free(b);
            if (port >= 0 && p != port)
                _exit(4);
            port = p;
        }
        /* the parent's fetcher: refused here */
        if (sl_fetcher_add(f, url, 0, &one, 1, NULL) == SL_EINVAL &&
            strstr(sl_errmsg(), "fork"))
            status = 0;
        sl_fetcher_close(f); /* frees memory, touches no handle */
        if (write(fds[1], &port, sizeof port) != sizeof port)
            _exit(5);
        _exit(status);
    }
    close(fds[1]);
    long child_port = -1;
    int st;
    cr_assert_eq(read(fds[0], &child_port, sizeof child_port), (ssize_t)sizeof child_port);
    close(fds[0]);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    cr_assert_neq(child_port, parent_port, "the child used the parent's connection (port %ld)",
                  parent_port);
    cr_assert_eq(sl_bytes_get(url, &body, &len), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(strtol((char *)body, NULL, 10), parent_port,
                 "the parent's connection did not survive the child");
    free(body);
    cr_assert_eq(sl_fetcher_add(f, url, 0, &one, 1, NULL), SL_OK);
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
    sl_fetcher_close(f);
    sl_io_configure(NULL);
    srv_stop(&h);
    free(url);
    tu_rmrf(dir);
    free(dir);
}

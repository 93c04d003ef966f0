/* tests/records/test_bytesrc.c - the byte source (records/bytesrc.h) on
 * local files and on real servers on loopback (tests/servers.h): nginx for
 * http://, moto's S3 server (signatures checked) for s3://, and the fault
 * proxy for 503s, resets, short bodies and timeouts. Backoffs are set to a
 * few ms so that the retries cost no time. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/status.h"
#include "records/bytesrc.h"
#include "records/bytesrc_int.h"
#include "records/records.h"
#include "servers.h"
#include "testutil.h"

#define FILE_SIZE 300007 /* not a multiple of any buffer size */

/* The remote tests need libcurl (SLUICE_WITH_CURL, from sl_records). */
static void need_curl(void)
{
    if (!SLUICE_WITH_CURL)
        cr_skip_test("built without libcurl (SLUICE_WITH_CURL=OFF)");
}

/* Fast retries: retries tries after the first, 1 ms backoff. */
static void io_fast(unsigned retries, unsigned timeout_ms, unsigned inflight)
{
    need_curl();
    sl_io_opts o = {.retries = retries, .timeout_ms = timeout_ms, .backoff_ms = 1,
                    .inflight = inflight};
    sl_io_configure(&o);
    sl_io_stats_reset();
}

static char *cat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    cr_assert_not_null(s);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* Random ranges, a range at the end, one past the end, size and get of
 * path, whose bytes are want[0..size). */
static void check_object(const char *path, const uint8_t *want, size_t size)
{
    uint64_t seed = 7, got_size = 0;
    uint8_t *buf = malloc(size);
    cr_assert_not_null(buf);

    for (int i = 0; i < 40; i++) {
        uint64_t off = tu_rand(&seed) % size;
        size_t n = 1 + (size_t)(tu_rand(&seed) % (size - off < 70000 ? size - off : 70000));
        cr_assert_eq(sl_bytes_read(path, buf, n, off), SL_OK, "%s", sl_errmsg());
        cr_assert(!memcmp(buf, want + off, n), "%s: bytes %llu+%zu differ", path,
                  (unsigned long long)off, n);
    }
    cr_assert_eq(sl_bytes_read(path, buf, 1000, size - 1000), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(buf, want + size - 1000, 1000));
    cr_assert_eq(sl_bytes_read(path, buf, size, 0), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(buf, want, size));

    /* past the end: straddling it, and wholly after it */
    int rc = sl_bytes_read(path, buf, 100, size - 50);
    cr_assert_eq(rc, SL_ECORRUPT, "%s: rc %d: %s", path, rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), path) && strstr(sl_errmsg(), "ends before byte"), "%s",
              sl_errmsg());
    rc = sl_bytes_read(path, buf, 10, size + 10);
    cr_assert_eq(rc, SL_ECORRUPT, "%s: rc %d: %s", path, rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), path), "%s", sl_errmsg());

    cr_assert_eq(sl_bytes_size(path, &got_size), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(got_size, size);
    uint8_t *all = NULL;
    size_t len = 0;
    cr_assert_eq(sl_bytes_get(path, &all, &len), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(len, size);
    cr_assert(!memcmp(all, want, size));
    cr_assert_eq(all[len], 0, "NUL-terminated");
    free(all);
    free(buf);
}

/* path does not exist: SL_ENOENT naming it, from size, get and read. */
static void check_missing(const char *path)
{
    uint64_t sz;
    uint8_t *b = NULL, one;
    size_t len;
    cr_assert_eq(sl_bytes_size(path, &sz), SL_ENOENT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), path), "%s", sl_errmsg());
    cr_assert_eq(sl_bytes_get(path, &b, &len), SL_ENOENT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), path), "%s", sl_errmsg());
    cr_assert_eq(sl_bytes_read(path, &one, 1, 0), SL_ENOENT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), path), "%s", sl_errmsg());
}

Test(bytesrc, classify_and_opts)
{
    sl_io_opts o;
    cr_assert(sl_path_is_remote("http://h/x"));
    cr_assert(sl_path_is_remote("https://h/x"));
    cr_assert(sl_path_is_remote("s3://b/k"));
    cr_assert(!sl_path_is_remote("/data/x"));
    cr_assert(!sl_path_is_remote("s3:/b"));
    cr_assert(!sl_path_is_remote("httpx://h"));
    sl_io_configure(NULL);
    sl_io_get_opts(&o);
    cr_assert_eq(o.retries, 0, "no count: the retry budget decides");
    cr_assert_eq(o.retry_ms, 60000);
    cr_assert_eq(o.timeout_ms, 30000);
    cr_assert_eq(o.backoff_ms, 100);
    cr_assert_eq(o.inflight, 8);
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY, .inflight = 3});
    sl_io_get_opts(&o);
    cr_assert_eq(sl_io_tries(&o), 1);
    cr_assert_eq(o.inflight, 3);
    cr_assert_eq(o.timeout_ms, 30000);
    /* full jitter, capped at 5 s */
    o.backoff_ms = 100;
    for (unsigned t = 1; t < 40; t++)
        cr_assert_leq(sl_io_backoff_ns(&o, t), 5000000000ull);
}

Test(bytesrc, without_curl)
{
    uint8_t b;
    sl_fetcher *f;
    void *tag;
    if (SLUICE_WITH_CURL)
        cr_skip_test("built with libcurl");
    cr_assert_eq(sl_bytes_read("s3://b/k", &b, 1, 0), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "s3://b/k: this sluice was built without libcurl"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, "http://h/x", 0, &b, 1, NULL), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "http://h/x"), "%s", sl_errmsg());
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EOF);
    sl_fetcher_close(f);
}

Test(bytesrc, local_files)
{
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "a.bin", FILE_SIZE, 1);
    char *path = tu_join(dir, "a.bin");
    check_object(path, want, FILE_SIZE);
    char *missing = tu_join(dir, "nope.bin");
    check_missing(missing);

    /* list: sorted, folders end in '/' */
    free(tu_random_file(dir, "B", 3, 2));
    char *sub = tu_join(dir, "sub");
    cr_assert_eq(mkdir(sub, 0755), 0);
    char **names;
    size_t n;
    cr_assert_eq(sl_bytes_list(dir, &names, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 3);
    cr_assert_str_eq(names[0], "B");
    cr_assert_str_eq(names[1], "a.bin");
    cr_assert_str_eq(names[2], "sub/");
    sl_bytes_names_free(names, n);
    cr_assert_eq(sl_bytes_list(missing, &names, &n), SL_ENOENT);

    /* local reads are not counted */
    sl_io_stats s;
    sl_io_stats_reset();
    uint8_t b[10];
    cr_assert_eq(sl_bytes_read(path, b, 10, 5), SL_OK);
    sl_io_stats_get(&s);
    cr_assert_eq(s.requests, 0);

    /* the fetcher on local files: completes at once, errors per request */
    sl_fetcher *f;
    uint8_t bufs[4][100];
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < 3; i++)
        cr_assert_eq(sl_fetcher_add(f, path, 1000 * i, bufs[i], 100, (void *)i), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, missing, 0, bufs[3], 100, (void *)3), SL_OK);
    cr_assert_eq(sl_fetcher_pending(f), 4);
    for (int k = 0; k < 3; k++) {
        void *tag;
        cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
        uintptr_t i = (uintptr_t)tag;
        cr_assert(!memcmp(bufs[i], want + 1000 * i, 100));
    }
    void *tag;
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_ENOENT);
    cr_assert_eq((uintptr_t)tag, 3);
    cr_assert(strstr(sl_errmsg(), missing), "%s", sl_errmsg());
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EOF);
    sl_fetcher_close(f);

    free(sub);
    free(missing);
    free(path);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* A fresh folder *dir holding one shard of FILE_SIZE random bytes (seed),
 * served by nginx (*ng) under fast retries (inflight); *url the shard's
 * URL. Returns the bytes. */
#define SHARD "train-00000-of-00001.tfrecord"
static uint8_t *serve_shard(uint64_t seed, unsigned inflight, char **dir, srv *ng, char **url)
{
    *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(*dir, SHARD, FILE_SIZE, seed);
    io_fast(2, 5000, inflight);
    srv_nginx_start(*dir, ng);
    *url = cat(ng->url, "/" SHARD);
    return want;
}

Test(bytesrc, nginx_reads, .timeout = 30)
{
    char *dir, *url;
    srv ng;
    uint8_t *want = serve_shard(3, 8, &dir, &ng, &url);
    check_object(url, want, FILE_SIZE);
    char *missing = cat(ng.url, "/nope.tfrecord");
    check_missing(missing);
    cr_assert(strstr(sl_errmsg(), "HTTP 404"), "%s", sl_errmsg());

    /* no listing over plain HTTP */
    char **names;
    size_t n;
    cr_assert_eq(sl_bytes_list(ng.url, &names, &n), SL_ENOTSUP);

    /* credentials in the URL never reach a message */
    char cred[128];
    snprintf(cred, sizeof cred, "http://user:hunter2@127.0.0.1:%d/nope?sig=abc", ng.port);
    uint8_t b;
    cr_assert_eq(sl_bytes_read(cred, &b, 1, 0), SL_ENOENT, "%s", sl_errmsg());
    cr_assert(!strstr(sl_errmsg(), "hunter2") && !strstr(sl_errmsg(), "sig=abc"), "%s",
              sl_errmsg());

    sl_io_stats s;
    sl_io_stats_get(&s);
    cr_assert_gt(s.requests, 40);
    cr_assert_eq(s.retries, 0);
    cr_assert_eq(s.inflight, 0);
    cr_assert_gt(s.bytes, FILE_SIZE);
    srv_stop(&ng);
    free(missing);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* One fetcher over local and remote paths in turn: the byte source's
 * handle says which each is (no scheme test in the fetcher), a missing
 * local file is that request's error at wait, and the bytes are right. */
Test(bytesrc, fetcher_local_and_remote_in_turn, .timeout = 30)
{
    char *dir, *url;
    srv ng;
    uint8_t *want = serve_shard(5, 4, &dir, &ng, &url);
    char *local = cat(dir, "/" SHARD);
    char *gone = cat(dir, "/gone.tfrecord");
    const char *paths[] = {local, url, local, gone, url, local};
    enum { N = sizeof paths / sizeof *paths };
    static uint8_t bufs[N][4000];
    sl_fetcher *f;
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < N; i++)
        cr_assert_eq(sl_fetcher_add(f, paths[i], 1000 * i, bufs[i], 4000, (void *)i), SL_OK,
                     "%s", sl_errmsg());
    cr_assert_eq(sl_fetcher_pending(f), N);
    for (int k = 0; k < N; k++) {
        void *tag = NULL;
        int rc = sl_fetcher_wait(f, &tag);
        uintptr_t i = (uintptr_t)tag;
        if (paths[i] == gone) {
            cr_assert_eq(rc, SL_ENOENT, "%s", sl_errmsg());
            cr_assert(strstr(sl_errmsg(), "sl_fetcher_wait: ") && strstr(sl_errmsg(), "gone"),
                      "%s", sl_errmsg());
            continue;
        }
        cr_assert_eq(rc, SL_OK, "%s: %s", paths[i], sl_errmsg());
        cr_assert(!memcmp(bufs[i], want + 1000 * i, 4000), "request %lu", (unsigned long)i);
    }
    void *tag;
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EOF);
    sl_fetcher_close(f);

    /* a dataset asks once, at resolve: a URL's is remote, a folder's is not */
    sl_dataset ds;
    char *braces = cat(ng.url, "/train-{00000..00000}-of-00001.tfrecord");
    cr_assert_eq(sl_dataset_resolve(braces, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert(ds.remote);
    cr_assert_eq(ds.kind, SL_DATASET_GLOB);
    cr_assert_eq(ds.nsplits, 1);
    cr_assert_eq(ds.splits[0].nfiles, 1);
    cr_assert_eq(ds.splits[0].unindexed, 0, "no HEAD per remote shard");
    sl_dataset_fini(&ds);
    cr_assert_eq(sl_dataset_resolve(dir, NULL, &ds), SL_OK, "%s", sl_errmsg());
    cr_assert_not(ds.remote);
    cr_assert_eq(ds.splits[0].unindexed, 1);
    sl_dataset_fini(&ds);

    srv_stop(&ng);
    free(braces);
    free(gone);
    free(local);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* Count the distinct connections in nginx's access log ("$connection ..."). */
static size_t log_connections(const char *log, size_t *requests)
{
    size_t len = 0, nconn = 0;
    uint8_t *b = tu_read_file(log, &len);
    unsigned long seen[4096];
    *requests = 0;
    cr_assert_not_null(b, "%s", log);
    for (char *line = (char *)b, *nl; line < (char *)b + len; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            break;
        unsigned long c = strtoul(line, NULL, 10);
        size_t i = 0;
        while (i < nconn && seen[i] != c)
            i++;
        if (i == nconn && nconn < 4096)
            seen[nconn++] = c;
        (*requests)++;
    }
    free(b);
    return nconn;
}

Test(bytesrc, nginx_fetcher_inflight, .timeout = 30)
{
    enum { NREQ = 96, INFLIGHT = 32 };
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "s.bin", FILE_SIZE, 4);
    srv ng;
    io_fast(2, 5000, INFLIGHT);
    srv_nginx_start(dir, &ng);
    char *url = cat(ng.url, "/s.bin");
    static uint8_t bufs[NREQ][5000];
    uint64_t offs[NREQ], seed = 11;
    int seen[NREQ] = {0};
    sl_fetcher *f;

    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < NREQ; i++) {
        offs[i] = tu_rand(&seed) % (FILE_SIZE - 5000);
        cr_assert_eq(sl_fetcher_add(f, url, offs[i], bufs[i], 5000, (void *)i), SL_OK, "%s",
                     sl_errmsg());
    }
    cr_assert_eq(sl_fetcher_pending(f), NREQ);
    for (int k = 0; k < NREQ; k++) {
        void *tag = NULL;
        cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
        uintptr_t i = (uintptr_t)tag;
        cr_assert_lt(i, NREQ);
        cr_assert(!seen[i]);
        seen[i] = 1;
        cr_assert(!memcmp(bufs[i], want + offs[i], 5000), "request %lu", (unsigned long)i);
    }
    void *tag;
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EOF);
    cr_assert_eq(sl_fetcher_pending(f), 0);

    /* a missing object and a range past the end fail on their own */
    uint8_t b1[10], b2[10], b3[10];
    char *missing = cat(ng.url, "/nope");
    cr_assert_eq(sl_fetcher_add(f, missing, 0, b1, 10, (void *)1), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, url, FILE_SIZE - 5, b2, 10, (void *)2), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, url, 5, b3, 10, (void *)3), SL_OK);
    int got = 0;
    for (int k = 0; k < 3; k++) {
        int rc = sl_fetcher_wait(f, &tag);
        uintptr_t i = (uintptr_t)tag;
        got |= 1 << i;
        if (i == 1) {
            cr_assert_eq(rc, SL_ENOENT, "%s", sl_errmsg());
            cr_assert(strstr(sl_errmsg(), missing), "%s", sl_errmsg());
        } else if (i == 2) {
            cr_assert_eq(rc, SL_ECORRUPT, "%s", sl_errmsg());
            cr_assert(strstr(sl_errmsg(), url), "%s", sl_errmsg());
        } else {
            cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
            cr_assert(!memcmp(b3, want + 5, 10));
        }
    }
    cr_assert_eq(got, 0xe);
    sl_fetcher_close(f);

    sl_io_stats s;
    sl_io_stats_get(&s);
    cr_assert_eq(s.requests, NREQ + 3);
    cr_assert_leq(s.inflight_peak, INFLIGHT);
    cr_assert_gt(s.inflight_peak, 1);
    cr_assert_eq(s.inflight, 0);
    cr_assert_gt(s.busy_ns, 0);

    /* connection reuse: the access log names each request's connection */
    size_t requests = 0, conns = 0;
    for (int i = 0; i < 100 && requests < NREQ + 3; i++) { /* the log is written at the end */
        conns = log_connections(ng.log, &requests);
        if (requests < NREQ + 3)
            usleep(10000);
    }
    cr_assert_eq(requests, NREQ + 3);
    cr_assert_leq(conns, INFLIGHT, "%zu connections for %zu requests", conns, requests);

    /* closing with requests in flight */
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < 8; i++)
        cr_assert_eq(sl_fetcher_add(f, url, 0, bufs[i], 5000, (void *)i), SL_OK);
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
    sl_fetcher_close(f);
    sl_io_stats_get(&s);
    cr_assert_eq(s.inflight, 0);

    srv_stop(&ng);
    free(missing);
    free(url);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- S3 */

Test(bytesrc, s3_list_and_read, .timeout = 60)
{
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "train-00000-of-00002.tfrecord", FILE_SIZE, 5);
    free(tu_random_file(dir, "train-00001-of-00002.tfrecord", 1000, 6));
    free(tu_random_file(dir, "dataset.json", 20, 7));
    char *sub = tu_join(dir, "idx");
    cr_assert_eq(mkdir(sub, 0755), 0);
    free(tu_random_file(sub, "a b+c.idx", 10, 8)); /* a key that needs escaping */
    srv s3;
    io_fast(2, 10000, 8);
    srv_s3_start(&s3);
    srv_s3_put_dir(&s3, "bkt", "data/v1/", dir);
    srv_s3_env(&s3, NULL);

    char **names;
    size_t n;
    cr_assert_eq(sl_bytes_list("s3://bkt/data/v1/", &names, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 4);
    cr_assert_str_eq(names[0], "dataset.json");
    cr_assert_str_eq(names[1], "idx/");
    cr_assert_str_eq(names[2], "train-00000-of-00002.tfrecord");
    cr_assert_str_eq(names[3], "train-00001-of-00002.tfrecord");
    sl_bytes_names_free(names, n);
    cr_assert_eq(sl_bytes_list("s3://bkt/data", &names, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 1);
    cr_assert_str_eq(names[0], "v1/");
    sl_bytes_names_free(names, n);
    /* continuation tokens: pages of one key */
    sl_remote_set_list_page(1);
    cr_assert_eq(sl_bytes_list("s3://bkt/data/v1", &names, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 4);
    cr_assert_str_eq(names[1], "idx/");
    sl_bytes_names_free(names, n);
    sl_remote_set_list_page(0);
    cr_assert_eq(sl_bytes_list("s3://bkt/nothing/", &names, &n), SL_ENOENT, "%s", sl_errmsg());

    check_object("s3://bkt/data/v1/train-00000-of-00002.tfrecord", want, FILE_SIZE);
    uint64_t sz;
    cr_assert_eq(sl_bytes_size("s3://bkt/data/v1/idx/a b+c.idx", &sz), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sz, 10);
    check_missing("s3://bkt/data/v1/nope");
    cr_assert(strstr(sl_errmsg(), "NoSuchKey"), "%s", sl_errmsg());

    /* the fetcher, signed */
    sl_fetcher *f;
    uint8_t bufs[16][3000];
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < 16; i++)
        cr_assert_eq(sl_fetcher_add(f, "s3://bkt/data/v1/train-00000-of-00002.tfrecord",
                                    i * 7777, bufs[i], 3000, (void *)i), SL_OK);
    for (int k = 0; k < 16; k++) {
        void *tag;
        cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
        uintptr_t i = (uintptr_t)tag;
        cr_assert(!memcmp(bufs[i], want + i * 7777, 3000));
    }
    sl_fetcher_close(f);

    /* through the proxy: 503 SlowDown twice, then the signed request passes
     * (the proxy keeps Host, so the signature made for it verifies) */
    srv px;
    srv_proxy_start(s3.url, "503=2", &px);
    srv_s3_env(&s3, px.url);
    sl_io_stats_reset();
    uint8_t b[100];
    cr_assert_eq(sl_bytes_read("s3://bkt/data/v1/train-00000-of-00002.tfrecord", b, 100, 50),
                 SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 50, 100));
    sl_io_stats st;
    sl_io_stats_get(&st);
    cr_assert_eq(st.retries, 2);
    srv_stop(&px);

    /* a wrong secret: refused, clearly, without the key or the secret */
    srv_s3_env(&s3, NULL);
    setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789", 1);
    int rc = sl_bytes_read("s3://bkt/data/v1/dataset.json", b, 10, 0);
    cr_assert_eq(rc, SL_EPERM, "rc %d: %s", rc, sl_errmsg());
    const char *m = sl_errmsg();
    cr_assert(strstr(m, "s3://bkt/data/v1/dataset.json") && strstr(m, "HTTP 403") &&
              strstr(m, "AWS_SECRET_ACCESS_KEY"), "%s", m);
    cr_assert(!strstr(m, s3.key) && !strstr(m, "wrong-secret") && !strstr(m, s3.secret), "%s", m);
    cr_assert_eq(sl_bytes_list("s3://bkt/data/v1/", &names, &n), SL_EPERM, "%s", sl_errmsg());
    /* and an unknown key id */
    setenv("AWS_ACCESS_KEY_ID", "AKIANOTAKEY000000000", 1);
    cr_assert_eq(sl_bytes_size("s3://bkt/data/v1/dataset.json", &sz), SL_EPERM, "%s",
                 sl_errmsg());
    cr_assert(!strstr(sl_errmsg(), "AKIANOTAKEY"), "%s", sl_errmsg());

    srv_stop(&s3);
    free(sub);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- faults */

/* nginx serving one file behind the proxy; *url the file through the proxy. */
static uint8_t *faulty(srv *ng, srv *px, const char *mode, char **dir, char **url)
{
    *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(*dir, "f.bin", FILE_SIZE, 9);
    srv_nginx_start(*dir, ng);
    srv_proxy_start(ng->url, mode, px);
    *url = cat(px->url, "/f.bin");
    return want;
}

static void faulty_done(srv *ng, srv *px, char *dir, char *url, uint8_t *want)
{
    srv_stop(px);
    srv_stop(ng);
    tu_rmrf(dir);
    free(dir);
    free(url);
    free(want);
}

Test(bytesrc, fault_503_then_ok, .timeout = 30)
{
    srv ng, px;
    char *dir, *url;
    sl_io_stats s;
    uint8_t b[20000];
    io_fast(3, 5000, 8);
    uint8_t *want = faulty(&ng, &px, "503=2", &dir, &url);

    cr_assert_eq(sl_bytes_read(url, b, sizeof b, 1234), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 1234, sizeof b));
    sl_io_stats_get(&s);
    cr_assert_eq(s.retries, 2);
    cr_assert_eq(s.requests, 3);
    cr_assert_eq(s.failures, 0);

    /* the same in the fetcher: each request retried on its own (five 503s
     * in all, so none runs out of its five retries) */
    srv_proxy_mode(&px, "503=5");
    io_fast(5, 5000, 8);
    sl_fetcher *f;
    static uint8_t bufs[10][20000];
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < 10; i++)
        cr_assert_eq(sl_fetcher_add(f, url, i * 20000, bufs[i], 20000, (void *)i), SL_OK);
    for (int k = 0; k < 10; k++) {
        void *tag;
        cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
        cr_assert(!memcmp(bufs[(uintptr_t)tag], want + (uintptr_t)tag * 20000, 20000));
    }
    sl_fetcher_close(f);
    sl_io_stats_get(&s);
    cr_assert_eq(s.retries, 5);
    cr_assert_eq(s.requests, 15);
    cr_assert_eq(s.failures, 0);
    faulty_done(&ng, &px, dir, url, want);
}

Test(bytesrc, fault_reset_and_short_body, .timeout = 30)
{
    srv ng, px;
    char *dir, *url;
    sl_io_stats s;
    static uint8_t b[FILE_SIZE];
    io_fast(3, 5000, 8);
    uint8_t *want = faulty(&ng, &px, "reset=1", &dir, &url);

    cr_assert_eq(sl_bytes_read(url, b, 200000, 100), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 100, 200000));
    sl_io_stats_get(&s);
    cr_assert_eq(s.retries, 1);

    srv_proxy_mode(&px, "short=1");
    sl_io_stats_reset();
    cr_assert_eq(sl_bytes_read(url, b, 200000, 7), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 7, 200000));
    sl_io_stats_get(&s);
    cr_assert_eq(s.retries, 1);

    /* whole GET and the fetcher through a reset */
    srv_proxy_mode(&px, "reset=2");
    uint8_t *all;
    size_t len;
    cr_assert_eq(sl_bytes_get(url, &all, &len), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(len, FILE_SIZE);
    cr_assert(!memcmp(all, want, FILE_SIZE));
    free(all);
    srv_proxy_mode(&px, "short=3");
    sl_fetcher *f;
    static uint8_t bufs[6][40000];
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    for (uintptr_t i = 0; i < 6; i++)
        cr_assert_eq(sl_fetcher_add(f, url, i * 40000, bufs[i], 40000, (void *)i), SL_OK);
    for (int k = 0; k < 6; k++) {
        void *tag;
        cr_assert_eq(sl_fetcher_wait(f, &tag), SL_OK, "%s", sl_errmsg());
        cr_assert(!memcmp(bufs[(uintptr_t)tag], want + (uintptr_t)tag * 40000, 40000));
    }
    sl_fetcher_close(f);
    faulty_done(&ng, &px, dir, url, want);
}

Test(bytesrc, fault_503_always_gives_up, .timeout = 30)
{
    srv ng, px;
    char *dir, *url;
    sl_io_stats s;
    uint8_t b[100];
    io_fast(2, 5000, 8);
    uint8_t *want = faulty(&ng, &px, "503every=1", &dir, &url);

    int rc = sl_bytes_read(url, b, 100, 0);
    cr_assert_eq(rc, SL_EIO, "rc %d: %s", rc, sl_errmsg());
    const char *m = sl_errmsg();
    cr_assert(strstr(m, url) && strstr(m, "bytes 0-99") && strstr(m, "HTTP 503") &&
              strstr(m, "SlowDown") && strstr(m, "after 3 tries"), "%s", m);
    sl_io_stats_get(&s);
    cr_assert_eq(s.requests, 3);
    cr_assert_eq(s.retries, 2);
    cr_assert_eq(s.failures, 1);

    /* no retry at all */
    sl_io_configure(&(sl_io_opts){.retries = SL_IO_NO_RETRY, .backoff_ms = 1});
    sl_io_stats_reset();
    cr_assert_eq(sl_bytes_read(url, b, 100, 0), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "after 1 try"), "%s", sl_errmsg());
    sl_io_stats_get(&s);
    cr_assert_eq(s.requests, 1);

    /* the fetcher's request fails for good with the same message */
    io_fast(2, 5000, 8);
    sl_fetcher *f;
    void *tag;
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, url, 0, b, 100, (void *)7), SL_OK);
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EIO);
    cr_assert_eq((uintptr_t)tag, 7);
    m = sl_errmsg();
    cr_assert(strstr(m, url) && strstr(m, "HTTP 503") && strstr(m, "after 3 tries"), "%s", m);
    sl_fetcher_close(f);
    faulty_done(&ng, &px, dir, url, want);
}

Test(bytesrc, fault_timeout, .timeout = 30)
{
    srv ng, px;
    char *dir, *url;
    uint8_t b[100];
    io_fast(1, 300, 8);
    uint8_t *want = faulty(&ng, &px, "delay=1500", &dir, &url);

    int rc = sl_bytes_read(url, b, 100, 0);
    cr_assert_eq(rc, SL_EIO, "rc %d: %s", rc, sl_errmsg());
    const char *m = sl_errmsg();
    cr_assert(strstr(m, url) && strstr(m, "imeout") && strstr(m, "after 2 tries"), "%s", m);

    sl_fetcher *f;
    void *tag;
    cr_assert_eq(sl_fetcher_open(NULL, &f), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, url, 0, b, 100, NULL), SL_OK);
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "imeout") && strstr(sl_errmsg(), "after 2 tries"), "%s",
              sl_errmsg());
    sl_fetcher_close(f);

    /* a refused connection is retried too, then named */
    srv_stop(&px);
    rc = sl_bytes_read(url, b, 100, 0);
    cr_assert_eq(rc, SL_EIO);
    cr_assert(strstr(sl_errmsg(), url) && strstr(sl_errmsg(), "after 2 tries"), "%s",
              sl_errmsg());
    faulty_done(&ng, &px, dir, url, want);
}

/* A host that does not resolve is retried like any other failure, and the
 * retries say so. (libcurl 7.88 refused CURLOPT_BUFFERSIZE on a handle whose
 * last try failed to resolve: every retry then failed with "bad argument".) */
Test(bytesrc, unresolvable_host_retried)
{
    if (!SLUICE_WITH_CURL)
        cr_skip_test("built without libcurl");
    sl_io_configure(&(sl_io_opts){.retries = 2, .backoff_ms = 1, .timeout_ms = 3000});
    uint8_t buf[16];
    int rc = sl_bytes_read("http://sluice-test.invalid/x", buf, sizeof buf, 0);
    cr_assert_eq(rc, SL_EIO, "%d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "resolve") && strstr(sl_errmsg(), "3 tries") &&
              !strstr(sl_errmsg(), "bad argument"), "%s", sl_errmsg());
    sl_io_configure(NULL);
}

/* The handle (sl_bytesrc_open) on a local file: read, size, whole get under
 * a bound, map and identity are the file's; errors name it. */
Test(bytesrc, handle_local)
{
    char *dir = tu_tmpdir();
    uint8_t *want = tu_random_file(dir, "a.bin", FILE_SIZE, 3);
    char *path = tu_join(dir, "a.bin"), *missing = tu_join(dir, "nope.bin");
    sl_bytesrc *s;
    uint8_t b[5000], *all;
    const uint8_t *base;
    size_t len;
    uint64_t size;
    sl_bytesrc_id id;

    cr_assert_eq(sl_bytesrc_open(missing, NULL, &s), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), missing), "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_open(path, NULL, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_str_eq(sl_bytesrc_path(s), path);
    cr_assert_eq(sl_bytesrc_is_remote(s), 0);
    cr_assert_eq(sl_bytesrc_size(s, &size), SL_OK);
    cr_assert_eq(size, FILE_SIZE);
    cr_assert_eq(sl_bytesrc_read(s, b, sizeof b, 12345), SL_OK, "%s", sl_errmsg());
    cr_assert(!memcmp(b, want + 12345, sizeof b));
    cr_assert_eq(sl_bytesrc_read(s, b, 100, FILE_SIZE - 50), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "ends before byte"), "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_get(s, FILE_SIZE - 1, &all, &len), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), path) && strstr(sl_errmsg(), "larger than"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_bytesrc_get(s, FILE_SIZE, &all, &len), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(len, FILE_SIZE);
    cr_assert(!memcmp(all, want, FILE_SIZE) && all[len] == 0);
    free(all);
    cr_assert_eq(sl_bytesrc_map(s, &base, &len), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(len, FILE_SIZE);
    cr_assert(!memcmp(base, want, FILE_SIZE));
    cr_assert_eq(sl_bytesrc_identity(s, &id), SL_OK);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert(id.regular && id.size == FILE_SIZE && id.ino == (uint64_t)st.st_ino);
    /* truncated under the handle: the identity says so, a read past it fails */
    cr_assert_eq(truncate(path, 1000), 0);
    cr_assert_eq(sl_bytesrc_identity(s, &id), SL_OK);
    cr_assert_eq(id.size, 1000);
    cr_assert_eq(sl_bytesrc_read(s, b, 100, 2000), SL_ECORRUPT);
    sl_bytesrc_close(s);
    sl_bytesrc_close(NULL);

    /* a folder is not a file to get; an empty file is not mapped */
    cr_assert_eq(sl_bytesrc_open(dir, NULL, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_get(s, 0, &all, &len), SL_EIO);
    sl_bytesrc_close(s);
    free(tu_random_file(dir, "empty", 0, 1));
    char *empty = tu_join(dir, "empty");
    cr_assert_eq(sl_bytesrc_open(empty, NULL, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_map(s, &base, &len), SL_ENOTSUP);
    cr_assert_eq(sl_bytesrc_get(s, 0, &all, &len), SL_OK);
    cr_assert_eq(len, 0);
    free(all);
    sl_bytesrc_close(s);

    free(empty);
    free(missing);
    free(path);
    free(want);
    tu_rmrf(dir);
    free(dir);
}

/* Options travel with the handle and the fetcher: the process-wide
 * settings (sl_io_configure) apply to those opened with NULL only, and a
 * change of them after an open does not reach an open handle. */
Test(bytesrc, handle_options_are_its_own, .timeout = 30)
{
    srv ng, px;
    char *dir, *url;
    uint8_t b[100];
    sl_bytesrc *mine, *deflt;
    sl_io_stats s;
    io_fast(2, 5000, 8); /* process-wide: 3 tries */
    uint8_t *want = faulty(&ng, &px, "503every=1", &dir, &url);
    sl_io_opts one = {.retries = SL_IO_NO_RETRY, .backoff_ms = 1};

    cr_assert_eq(sl_bytesrc_open(url, &one, &mine), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_is_remote(mine), 1);
    cr_assert_eq(sl_bytesrc_open(url, NULL, &deflt), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_read(mine, b, 100, 0), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "after 1 try"), "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_read(deflt, b, 100, 0), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "after 3 tries"), "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_map(mine, &(const uint8_t *){0}, &(size_t){0}), SL_ENOTSUP);

    /* the process-wide settings change: the open handles keep theirs */
    sl_io_configure(&(sl_io_opts){.retries = 4, .backoff_ms = 1});
    sl_io_stats_reset();
    cr_assert_eq(sl_bytesrc_read(mine, b, 100, 0), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "after 1 try"), "%s", sl_errmsg());
    cr_assert_eq(sl_bytesrc_read(deflt, b, 100, 0), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "after 3 tries"), "%s", sl_errmsg());
    sl_io_stats_get(&s);
    cr_assert_eq(s.requests, 4);
    sl_bytesrc_close(mine);
    sl_bytesrc_close(deflt);

    /* a fetcher with its own: 2 tries, whatever the process says (5) */
    sl_fetcher *f;
    void *tag;
    cr_assert_eq(sl_fetcher_open(&(sl_io_opts){.retries = 1, .backoff_ms = 1}, &f), SL_OK);
    cr_assert_eq(sl_fetcher_add(f, url, 0, b, 100, (void *)1), SL_OK);
    cr_assert_eq(sl_fetcher_wait(f, &tag), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "after 2 tries"), "%s", sl_errmsg());
    sl_fetcher_close(f);

    /* verify's options (sl_verify_options.io): its reads (dataset.json of
     * the served folder here) under them, the process's untouched */
    char *folder = cat(px.url, "/");
    sl_verify_options vo = {.io = &one};
    sl_verify_result vr;
    sl_io_configure(&(sl_io_opts){.retries = 2, .backoff_ms = 1});
    cr_assert_neq(sl_verify_path(folder, &vo, &vr), SL_OK);
    cr_assert(strstr(sl_errmsg(), "after 1 try"), "%s", sl_errmsg());
    vo.io = NULL;
    cr_assert_neq(sl_verify_path(folder, &vo, &vr), SL_OK);
    cr_assert(strstr(sl_errmsg(), "after 3 tries"), "%s", sl_errmsg());
    cr_assert_null(sl_io_thread_opts(), "the call put the thread's settings back");
    free(folder);
    sl_io_configure(NULL);
    faulty_done(&ng, &px, dir, url, want);
}

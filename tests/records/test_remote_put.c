/*
 * tests/records/test_remote_put.c - records/remote_put.h against moto's S3
 * server (SigV4 checked) and the fault proxy (tests/servers.h).
 *
 *   put_get_delete   an object PUT reads back byte for byte; DELETE removes
 *                    it; deleting what is not there is fine
 *   multipart_parts  a file in 5 parts through a proxy that answers every
 *                    third request 503: each failed request retried on its
 *                    own (5 parts uploaded, not 10), the object whole
 *   multipart_abort  a part that fails for good: the error names the part,
 *                    the upload is aborted (none left in progress) and no
 *                    object appears
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "records/bytesrc.h"
#include "records/remote_put.h"
#include "servers.h"
#include "testutil.h"

static char *dir;
static srv s3, px;

static void setup(void)
{
    dir = tu_tmpdir();
    memset(&s3, 0, sizeof s3);
    memset(&px, 0, sizeof px);
}

static void teardown(void)
{
    srv_stop(&px);
    srv_stop(&s3);
    tu_rmrf(dir);
    free(dir);
}

TestSuite(remote_put, .init = setup, .fini = teardown, .timeout = 120);

/* moto with bucket "bkt"; requests go to endpoint (NULL: moto itself). */
static void start(const char *proxy_mode)
{
    srv_s3_start(&s3);
    char *empty = tu_join(dir, "empty");
    cr_assert_eq(tu_run(NULL, "mkdir -p '%s'", empty), 0);
    srv_s3_put_dir(&s3, "bkt", "x/", empty);
    free(empty);
    if (proxy_mode)
        srv_proxy_start(s3.url, proxy_mode, &px);
    srv_s3_env(&s3, proxy_mode ? px.url : NULL);
    sl_io_opts o = {.backoff_ms = 1, .timeout_ms = 20000};
    sl_io_configure(&o);
}

static uint8_t *random_file(const char *path, size_t n)
{
    uint8_t *b = malloc(n);
    uint64_t st = 42;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)tu_rand(&st);
    cr_assert_eq(tu_write_file(path, b, n), 0);
    return b;
}

static void assert_object(const char *url, const uint8_t *want, size_t n)
{
    srv_s3_env(&s3, NULL); /* read back from moto itself */
    uint8_t *got = NULL;
    size_t len = 0;
    cr_assert_eq(sl_bytes_get(url, &got, &len), SL_OK, "%s", sl_errmsg());
    cr_assert(len == n && !memcmp(got, want, n), "%s: %zu bytes back, %zu put", url, len, n);
    free(got);
}

Test(remote_put, put_get_delete)
{
    start(NULL);
    static const char text[] = "{\"hello\": \"s3\"}\n";
    cr_assert_eq(sl_put_bytes("s3://bkt/dir/small.json", text, sizeof text - 1), SL_OK, "%s",
                 sl_errmsg());
    assert_object("s3://bkt/dir/small.json", (const uint8_t *)text, sizeof text - 1);
    cr_assert_eq(sl_put_delete("s3://bkt/dir/small.json"), SL_OK, "%s", sl_errmsg());
    uint64_t size;
    cr_assert_eq(sl_bytes_size("s3://bkt/dir/small.json", &size), SL_ENOENT);
    cr_assert_eq(sl_put_delete("s3://bkt/dir/small.json"), SL_OK, "absent is fine: %s", sl_errmsg());
}

Test(remote_put, multipart_each_part_retried_alone)
{
    start("503every=3");
    setenv("SLUICE_PUT_PART_BYTES", "65536", 1);
    char *path = tu_join(dir, "big.bin");
    size_t n = 4 * 65536 + 1234; /* 5 parts, the last short */
    uint8_t *b = random_file(path, n);
    sl_put_stats a, z;
    sl_put_stats_get(&a);
    cr_assert_eq(sl_put_file("s3://bkt/shards/big.bin", path), SL_OK, "%s", sl_errmsg());
    sl_put_stats_get(&z);
    cr_assert_eq(z.parts - a.parts, 5, "parts uploaded: %llu",
                 (unsigned long long)(z.parts - a.parts));
    cr_assert_eq(z.objects - a.objects, 1);
    cr_assert_geq(z.retries - a.retries, 2, "the proxy's 503s were not retried");
    cr_assert_eq(z.aborted, a.aborted);
    cr_assert_eq(srv_s3_uploads(&s3, "bkt"), 0, "an upload left in progress");
    assert_object("s3://bkt/shards/big.bin", b, n);
    free(b);
    free(path);
}

Test(remote_put, multipart_failure_aborts_the_upload)
{
    start("503every=2"); /* the start passes, part 1 fails, the abort passes */
    setenv("SLUICE_PUT_PART_BYTES", "65536", 1);
    sl_io_opts o = {.backoff_ms = 1, .retries = SL_IO_NO_RETRY};
    sl_io_configure(&o);
    char *path = tu_join(dir, "big.bin");
    uint8_t *b = random_file(path, 5 * 65536);
    sl_put_stats a, z;
    sl_put_stats_get(&a);
    int rc = sl_put_file("s3://bkt/shards/failed.bin", path);
    sl_put_stats_get(&z);
    cr_assert_eq(rc, SL_EIO, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "s3://bkt/shards/failed.bin") && strstr(sl_errmsg(), "part 1 of 5") &&
              strstr(sl_errmsg(), "503") && strstr(sl_errmsg(), "aborted"),
              "names the object, the part, the status: %s", sl_errmsg());
    cr_assert_eq(z.aborted - a.aborted, 1);
    cr_assert_eq(srv_s3_uploads(&s3, "bkt"), 0, "the failed upload was not aborted");
    srv_s3_env(&s3, NULL);
    uint64_t size;
    cr_assert_eq(sl_bytes_size("s3://bkt/shards/failed.bin", &size), SL_ENOENT,
                 "a failed upload left an object");
    free(b);
    free(path);
}

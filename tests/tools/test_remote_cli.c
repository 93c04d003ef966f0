/*
 * tests/tools/test_remote_cli.c - remote data through the sluice binary
 * (records/bytesrc.h; issue 30), against real servers on loopback
 * (tests/servers.h): nginx for http://, moto's S3 server for s3:// with
 * signed requests.
 *
 *   digest     one folder converted to TFRecord and to WebDataset tars, each
 *              read from local disk, over HTTP and from S3, and over HTTP
 *              without dataset.json through a brace pattern: eight runs of
 *              `profile --digest`, one digest
 *   tools      verify, inspect and profile --json on remote data: the same
 *              counts as local, profile's "remote" figures present; a shard
 *              flipped on the server is exit 1 naming its URL and record
 *   refused    a wrong secret key: exit non-zero, a message that says to
 *              check the keys and contains neither the key id nor the secret
 *
 * Suite "remote_cli" (not pipeline*): it runs the binary.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servers.h"
#include "testutil.h"

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

TestSuite(remote_cli, .init = setup, .fini = teardown, .timeout = 180);

/* DIR/in/<class>/: the test photos, 3 classes; DIR/data/tf and DIR/data/wds
 * converted from it with the same flags. */
static void make_data(void)
{
    char *out = NULL;
    int rc = tu_run(&out,
                    "set -e; cd '%s'; for c in a b c; do mkdir -p in/$c; i=0; "
                    "for p in '%s'/tests/data/photos/*.jpg; do i=$((i+1)); cp \"$p\" in/$c/$i.jpg; "
                    "cp \"$p\" in/$c/x$i.jpg; done; done; mkdir -p data",
                    dir, SLUICE_SOURCE_DIR);
    cr_assert_eq(rc, 0, "%s", out ? out : "");
    free(out);
    const char *to[2] = {"tf", "wds"};
    for (int i = 0; i < 2; i++) {
        rc = tu_run(&out, "'%s' convert --from folder '%s/in' --out '%s/data/%s' --name train "
                    "--shards 3 --threads 2 %s", tu_sluice(), dir, dir, to[i],
                    i ? "--to wds" : "");
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
    }
}

/* The environment of a command for s3 (srv_s3_env's variables) as a
 * shell prefix. */
static void s3_env(const srv *s, const char *secret, char *buf, size_t cap)
{
    snprintf(buf, cap, "AWS_ENDPOINT_URL='%s' AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' "
             "AWS_REGION=us-east-1 SLUICE_IO_BACKOFF_MS=1", s->url, s->key, secret);
}

static char *digest(const char *env, const char *data)
{
    char *out = NULL;
    int rc = tu_run(&out, "%s '%s' profile --data '%s' --image-size 32 --batch 4 --epochs 2 "
                    "--shuffle buffer:8 --seed 5 --digest", env, tu_sluice(), data);
    cr_assert_eq(rc, 0, "profile %s: %s", data, out);
    char *d = strstr(out, "digest: ");
    cr_assert_not_null(d, "%s", out);
    char *r = strndup(d + 8, 32);
    free(out);
    return r;
}

Test(remote_cli, same_digest_local_http_s3_tfrecord_wds)
{
    make_data();
    srv ng = {0}, s = {0};
    char env[1024], data[512], *want = NULL;
    srv_nginx_start(dir, &ng);
    srv_s3_start(&s);
    char src[512];
    snprintf(src, sizeof src, "%s/data", dir);
    srv_s3_put_dir(&s, "dsets", "sets/", src);
    s3_env(&s, s.secret, env, sizeof env);
    const char *fmt[2] = {"tf", "wds"};
    for (int f = 0; f < 2; f++) {
        for (int where = 0; where < 3; where++) {
            if (where == 0)
                snprintf(data, sizeof data, "%s/data/%s", dir, fmt[f]);
            else if (where == 1)
                snprintf(data, sizeof data, "%s/data/%s", ng.url, fmt[f]);
            else
                snprintf(data, sizeof data, "s3://dsets/sets/%s", fmt[f]);
            char *d = digest(where == 2 ? env : "", data);
            if (!want)
                want = d;
            else {
                cr_assert_str_eq(d, want, "%s gives other batches than local TFRecord", data);
                free(d);
            }
        }
    }
    /* No dataset.json on the server: the shards named by a brace pattern
     * (WebDataset's notation), TFRecord and tar alike. */
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "cd '%s/data' && cp -r tf tf-bare && cp -r wds wds-bare && "
                        "rm tf-bare/dataset.json wds-bare/dataset.json", dir), 0, "%s", out);
    free(out);
    int rc = tu_run(&out, "'%s' profile --data '%s/data/tf-bare' --batches 1", tu_sluice(),
                    ng.url);
    cr_assert_neq(rc, 0, "a folder over HTTP without dataset.json was read");
    cr_assert(strstr(out, "dataset.json") && strstr(out, "{00000..00015}"),
              "says to write a dataset.json or name the shards: %s", out);
    free(out);
    const char *pat[2] = {"tf-bare/train-{00000..00002}-of-00003.tfrecord",
                          "wds-bare/train-{00000..00002}-of-00003.tar"};
    for (int f = 0; f < 2; f++) {
        snprintf(data, sizeof data, "%s/data/%s", ng.url, pat[f]);
        char *d = digest("", data);
        cr_assert_str_eq(d, want, "%s gives other batches than local TFRecord", data);
        free(d);
    }
    free(want);
    srv_stop(&s);
    srv_stop(&ng);
}

Test(remote_cli, verify_inspect_profile_remote)
{
    make_data();
    srv ng = {0};
    srv_nginx_start(dir, &ng);
    char *out = NULL;
    for (int f = 0; f < 2; f++) {
        const char *fmt = f ? "wds" : "tf";
        cr_assert_eq(tu_run(&out, "'%s' verify '%s/data/%s'", tu_sluice(), ng.url, fmt), 0,
                     "verify over http (%s): %s", fmt, out);
        free(out);
        cr_assert_eq(tu_run(&out, "'%s' inspect --json '%s/data/%s'", tu_sluice(), ng.url, fmt),
                     0, "%s", out);
        cr_assert(strstr(out, "\"records\":\t18") || strstr(out, "\"records\": 18") ||
                  strstr(out, "\"records\":18"), "inspect over http (%s) counts 18: %s", fmt,
                  out);
        free(out);
    }
    cr_assert_eq(tu_run(&out, "'%s' profile --data '%s/data/tf' --image-size 32 --batch 4 "
                        "--epochs 1 --warmup 0 --json --quiet", tu_sluice(), ng.url), 0, "%s", out);
    cr_assert(strstr(out, "\"remote\":") && strstr(out, "\"requests\":") &&
              !strstr(out, "\"remote\":null"), "profile --json reports remote I/O: %s", out);
    free(out);

    /* A payload byte of record 2 of shard 1 flipped on the server. */
    cr_assert_eq(tu_run(&out, "f='%s/data/tf/train-00001-of-00003.tfrecord'; "
                        "off=$(sed -n 3p \"$f.idx\" | cut -d' ' -f1); "
                        "printf '\\x55' | dd of=\"$f\" bs=1 seek=$((off + 40)) conv=notrunc "
                        "2>/dev/null", dir), 0);
    free(out);
    int rc = tu_run(&out, "'%s' verify '%s/data/tf'", tu_sluice(), ng.url);
    cr_assert_eq(rc, 1, "verify of a damaged remote shard: %d: %s", rc, out);
    cr_assert(strstr(out, "/data/tf/train-00001-of-00003.tfrecord") && strstr(out, "record 2"),
              "names the URL and record: %s", out);
    free(out);
    srv_stop(&ng);
}

Test(remote_cli, wrong_key_refused_clearly)
{
    make_data();
    srv s = {0};
    srv_s3_start(&s);
    char src[512], env[1024];
    snprintf(src, sizeof src, "%s/data", dir);
    srv_s3_put_dir(&s, "dsets", "sets/", src);
    s3_env(&s, "wrong-secret-0123456789", env, sizeof env);
    char *out = NULL;
    int rc = tu_run(&out, "%s '%s' profile --data s3://dsets/sets/tf --image-size 32 --batch 4 "
                    "--epochs 1", env, tu_sluice());
    cr_assert_neq(rc, 0, "a wrong key was accepted: %s", out);
    cr_assert(strstr(out, "403") && strstr(out, "AWS_SECRET_ACCESS_KEY"),
              "says what was refused and what to check: %s", out);
    cr_assert(!strstr(out, "wrong-secret-0123456789") && !strstr(out, s.key),
              "a credential in the message: %s", out);
    free(out);
    srv_stop(&s);
}

/* ------------------------------------------------------------ issue 39 */

/* Run a shell script (a format) with the binary as $S; its output. */
static char *shell(int *rc, const char *fmt, const char *a, const char *b)
{
    char *out = NULL, cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    *rc = tu_run(&out, "S='%s'; cd '%s'; %s", tu_sluice(), dir, cmd);
    return out;
}

/* SLUICE_IO_RETRIES=0 means no retry (it meant the default, 5). */
Test(remote_cli, env_retries_zero_is_none)
{
    make_data();
    srv ng = {0}, px = {0};
    srv_nginx_start(dir, &ng);
    srv_proxy_start(ng.url, "503every=1", &px);
    int rc;
    char *out = shell(&rc, "SLUICE_IO_RETRIES=0 \"$S\" inspect '%s/data/tf%s'", px.url, "");
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "HTTP 503") && strstr(out, "after 1 try"), "%s", out);
    free(out);
    srv_stop(&px);
    srv_stop(&ng);
}

/* A password in the URL and a presigned URL's signature never reach
 * stdout or stderr (profile's text and --json, inspect, verify, errors,
 * bad-record lists), and both still work: the requests carry them. */
Test(remote_cli, credentials_never_printed)
{
    make_data();
    int rc;
    char *pw = tu_join(dir, "htpasswd"), extra[700], url[256], *out;
    out = shell(&rc, "printf 'user:%%s\\n' \"$(openssl passwd -apr1 hunter2)\" > '%s'%s", pw, "");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "auth_basic sluice; auth_basic_user_file %s;", pw);
    srv ng = {0};
    srv_nginx_start_ex(dir, extra, NULL, &ng);
    snprintf(url, sizeof url, "http://user:hunter2@127.0.0.1:%d/data", ng.port);
    const char *ok[] = {
        "\"$S\" profile --data '%s/tf%s' --image-size 32 --batch 4 --epochs 1 --warmup 0",
        "\"$S\" profile --data '%s/wds%s' --image-size 32 --batch 4 --epochs 1 --json --quiet",
        "\"$S\" inspect --json '%s/tf%s'", "\"$S\" verify '%s/wds%s'"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        out = shell(&rc, ok[i], url, "");
        cr_assert_eq(rc, 0, "%s: %s", ok[i], out);
        cr_assert(!strstr(out, "hunter2") && (i == 3 || strstr(out, "127.0.0.1")), "%s: %s",
                  ok[i], out);
        free(out);
    }
    /* errors: a missing folder, a wrong password, a damaged record */
    out = shell(&rc, "\"$S\" profile --data '%s/nope%s' --image-size 32 --batches 1", url, "");
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(!strstr(out, "hunter2") && strstr(out, "/data/nope"), "%s", out);
    free(out);
    out = shell(&rc, "\"$S\" inspect 'http://user:Wr0ngPass@127.0.0.1:%s/data/tf%s'",
                strrchr(ng.url, ':') + 1, "");
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(!strstr(out, "Wr0ngPass") && strstr(out, "401"), "%s", out);
    free(out);
    out = shell(&rc, "f=data/tf/train-00001-of-00003.tfrecord; off=$(sed -n 3p \"$f.idx\" | "
                "cut -d' ' -f1); printf '\\x55' | dd of=\"$f\" bs=1 seek=$((off + 40)) "
                "conv=notrunc 2>/dev/null; \"$S\" profile --data '%s/tf%s' --image-size 32 "
                "--batch 4 --epochs 1 --warmup 0", url, "");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "bad records: 1") && !strstr(out, "hunter2"), "%s", out);
    free(out);
    srv_stop(&ng);

    /* a presigned URL of one tar shard: nginx refuses any request without
     * the signature, so the query must go with every request of that
     * object, and no name beside it (its .idx, dataset.json) is asked for
     * unsigned. (moto's IAM checks do not take query-string signatures: a
     * KeyError on HTTP_AUTHORIZATION, HTTP 500.) */
    srv_nginx_start_ex(dir, "if ($args !~ \"X-Amz-Signature=5ec2e7\") { return 403; }", NULL,
                       &ng);
    char pre_url[512];
    snprintf(pre_url, sizeof pre_url, "%s/data/wds/train-00000-of-00003.tar?X-Amz-Algorithm="
             "AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%%2F20260101%%2Fus-east-1%%2Fs3%%2F"
             "aws4_request&X-Amz-Expires=600&X-Amz-SignedHeaders=host&X-Amz-Signature=5ec2e7",
             ng.url);
    const char *pre[] = {"\"$S\" inspect '%s'%s",
                         "\"$S\" profile --data '%s'%s --image-size 32 --batch 2 --epochs 1 "
                         "--json --quiet",
                         "\"$S\" verify '%s'%s"};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        out = shell(&rc, pre[i], pre_url, "");
        cr_assert_eq(rc, 0, "%s: %s", pre[i], out);
        cr_assert(!strstr(out, "5ec2e7") && !strstr(out, "X-Amz") &&
                  (i == 2 || strstr(out, "train-00000-of-00003.tar")), "%s: %s", pre[i], out);
        free(out);
    }
    srv_stop(&ng);
    free(pw);
}

/* Ctrl-C while every ranged read stalls: profile stops within a second and
 * reports (it waited for the stalled read, 30 s and its retries); while it
 * opens a dataset whose server stalls, a second Ctrl-C ends it at once. */
Test(remote_cli, profile_ctrl_c_while_reads_stall)
{
    make_data();
    srv h = {0};
    srv_hostile_start(dir, "stallrange", &h);
    /* profile in the background, Ctrl-C (and maybe a second), then at most
     * 5 s for it to end */
    const char *script =
        "\"$S\" profile --data '%s/data/tf' --image-size 32 --batch 4 --seconds 60 --quiet "
        "> p.out 2>&1 & p=$!; sleep 2; kill -INT $p; %s"
        "for i in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.05; done; "
        "if kill -0 $p 2>/dev/null; then kill -9 $p; echo STILL RUNNING; fi; wait $p; "
        "echo rc=$?; cat p.out";
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, script, h.url, "");
    tu_run(&out, "S='%s'; cd '%s'; %s", tu_sluice(), dir, cmd);
    cr_assert(!strstr(out, "STILL RUNNING") && strstr(out, "rc=0") && strstr(out, "interrupted"),
              "Ctrl-C during a stalled read: %s", out);
    free(out);
    srv_proxy_mode(&h, "stall"); /* now dataset.json stalls too: create blocks */
    snprintf(cmd, sizeof cmd, script, h.url, "sleep 0.3; kill -INT $p; ");
    tu_run(&out, "S='%s'; cd '%s'; %s", tu_sluice(), dir, cmd);
    cr_assert(!strstr(out, "STILL RUNNING") && strstr(out, "rc=130"),
              "a second Ctrl-C did not end it: %s", out);
    free(out);
    srv_stop(&h);
}

/* A glob on s3:// is matched against the prefix's listing (it said "HTTP
 * 404"); over http(s) it says why it cannot be. */
Test(remote_cli, s3_glob_and_http_glob)
{
    make_data();
    srv s = {0}, ng = {0};
    srv_s3_start(&s);
    char src[512], env[1024];
    snprintf(src, sizeof src, "%s/data", dir);
    srv_s3_put_dir(&s, "dsets", "sets/", src);
    s3_env(&s, s.secret, env, sizeof env);
    int rc;
    char *out = shell(&rc, "%s \"$S\" inspect 's3://dsets/sets/wds/train-0000[01]-*.tar'%s", env,
                      "");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "12 records in 2 shards"), "%s", out);
    free(out);
    out = shell(&rc, "%s \"$S\" profile --data 's3://dsets/sets/tf/*.tfrecord'%s --image-size 32 "
                "--batch 4 --epochs 1 --warmup 0", env, "");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "18 records per epoch"), "%s", out);
    free(out);
    out = shell(&rc, "%s \"$S\" inspect 's3://dsets/sets/wds/nothing-*.tar'%s", env, "");
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "no object matches"), "%s", out);
    free(out);
    srv_nginx_start(dir, &ng);
    out = shell(&rc, "\"$S\" inspect '%s/data/wds/*.tar'%s", ng.url, "");
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "a glob needs a listing") && strstr(out, "{000000..000099}"), "%s", out);
    free(out);
    srv_stop(&ng);
    srv_stop(&s);
}

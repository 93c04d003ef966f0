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

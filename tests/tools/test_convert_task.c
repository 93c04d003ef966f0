/*
 * tests/tools/test_convert_task.c - the planned conversion through the
 * sluice binary (`convert --plan-out`, `--plan PLAN --task K --tasks N`,
 * `--plan PLAN --finish`; records/convert_planfile.c, convert_task.c,
 * convert_finish.c), each output compared byte for byte with a one-machine
 * `sluice convert` of the same inputs and options.
 *
 *   identity    TFRecord and WebDataset, 1, 2 and 5 tasks, tasks run out of
 *               order and again: every shard, index and dataset.json equal
 *   race        two workers on one task at once, a task killed after its
 *               shard but before its receipt, a stale private folder, an
 *               index removed: finish repairs and the bytes are equal
 *   refused     a plan of another format or version, --tasks other than the
 *               plan's, OUT planned with other options (at plan and task
 *               time), options with --plan, LMDB and IDX plans
 *   incomplete  finish with a task not run (exit 1, the shards and the task
 *               named, no dataset.json), with a damaged shard, skipped
 *               inputs summed per task, --strict
 *   s3          plan and output in moto's S3 server, shards in multipart
 *               uploads, the tasks' requests through the fault proxy (503s
 *               retried per part): downloaded, the one-machine bytes
 *   urls        a list of http:// inputs served by nginx (one 404): the skip
 *               named with its status, the same bytes as one machine; the
 *               same with s3:// inputs in moto (signed GETs)
 *
 * Suite "convert_task" (runs the binary; real servers on loopback).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "servers.h"
#include "testutil.h"

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

TestSuite(convert_task, .init = setup, .fini = teardown, .timeout = 240);

/* DIR/in/<a|b|c>/: the test photos four times each, and a file that is no
 * image (a skip). */
static void make_inputs(void)
{
    char *out = NULL;
    int rc = tu_run(&out,
                    "set -e; cd '%s'; for c in a b c; do mkdir -p in/$c; i=0; "
                    "for p in '%s'/tests/data/photos/*.jpg; do i=$((i+1)); for k in 1 2 3 4; do "
                    "cp \"$p\" in/$c/$i-$k.jpg; done; done; done; printf 'junk' > in/b/bad.jpg",
                    dir, SLUICE_SOURCE_DIR);
    cr_assert_eq(rc, 0, "%s", out ? out : "");
    free(out);
}

/* Run a shell command line (in DIR); returns its exit status, output in *out. */
static int sh(char **out, const char *cmd)
{
    return tu_run(out, "cd '%s' && %s", dir, cmd);
}

static void sh_ok(const char *cmd)
{
    char *out = NULL;
    int rc = sh(&out, cmd);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", cmd, rc, out);
    free(out);
}

/* Every visible file of DIR/a is in DIR/b with the same bytes, and b has no
 * other visible file. */
static void same_files(const char *a, const char *b)
{
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        DIR *d = opendir(pass ? pb : pa);
        cr_assert_not_null(d, "%s", pass ? pb : pa);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char *fa = tu_join(pa, e->d_name), *fb = tu_join(pb, e->d_name);
            size_t la = 0, lb = 0;
            uint8_t *da = tu_read_file(fa, &la), *db = tu_read_file(fb, &lb);
            cr_assert_not_null(pass ? db : da);
            cr_assert_not_null(pass ? da : db, "%s has %s, %s does not", pass ? b : a, e->d_name,
                               pass ? a : b);
            cr_assert(la == lb && !memcmp(da, db, la), "%s/%s and %s/%s differ (%zu, %zu bytes)", a,
                      e->d_name, b, e->d_name, la, lb);
            n += !pass;
            free(da);
            free(db);
            free(fa);
            free(fb);
        }
        closedir(d);
    }
    cr_assert_gt(n, 2, "%s: only %d files", a, n);
}

#define CONVERT_OPTS "--shards 5 --resize-short 96 --shuffle-seed 7 --no-fsync --quiet"

Test(convert_task, identity_any_split_any_order)
{
    make_inputs();
    char cmd[2048];
    static const char *const to[2] = {"", "--to wds"};
    for (int f = 0; f < 2; f++) {
        snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out one%d --name train %s %s",
                 tu_sluice(), f, CONVERT_OPTS, to[f]);
        sh_ok(cmd);
        static const unsigned tasks[3] = {1, 2, 5};
        for (int t = 0; t < 3; t++) {
            if (f && t != 1)
                continue; /* WebDataset: one split */
            unsigned n = tasks[t];
            snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out d%d-%u --name train %s %s "
                     "--plan-out plan%d-%u.json --tasks %u", tu_sluice(), f, n, CONVERT_OPTS, to[f],
                     f, n, n);
            sh_ok(cmd);
            /* the last task first, the first one twice */
            for (int k = (int)n - 1; k >= -1; k--) {
                snprintf(cmd, sizeof cmd, "'%s' convert --plan plan%d-%u.json --task %d --tasks %u "
                         "--threads 2 --no-fsync --quiet", tu_sluice(), f, n, k < 0 ? 0 : k, n);
                sh_ok(cmd);
            }
            snprintf(cmd, sizeof cmd, "'%s' convert --plan plan%d-%u.json --finish --quiet",
                     tu_sluice(), f, n);
            sh_ok(cmd);
            char a[32], b[32];
            snprintf(a, sizeof a, "one%d", f);
            snprintf(b, sizeof b, "d%d-%u", f, n);
            same_files(a, b);
        }
    }
    /* the second run of task 0 kept its shards */
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan0-2.json --task 0 --tasks 2 --no-fsync",
             tu_sluice());
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "whole before this run, kept"), "a re-run rewrote its shards: %s", out);
    free(out);
}

Test(convert_task, racing_workers_and_killed_tasks)
{
    make_inputs();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out one --name train %s",
             tu_sluice(), CONVERT_OPTS);
    sh_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out d --name train %s "
             "--plan-out plan.json --tasks 2", tu_sluice(), CONVERT_OPTS);
    sh_ok(cmd);
    /* two workers on task 0 at once, twice over; task 1 alone */
    snprintf(cmd, sizeof cmd, "S='%s'; for r in 1 2; do "
             "$S convert --plan plan.json --task 0 --tasks 2 --threads 1 --no-fsync --quiet & "
             "$S convert --plan plan.json --task 0 --tasks 2 --threads 1 --no-fsync --quiet & "
             "wait $! || exit 1; wait || exit 1; rm -f d/.train-0000[01]*.receipt; done; "
             "$S convert --plan plan.json --task 0 --tasks 2 --no-fsync --quiet && "
             "$S convert --plan plan.json --task 1 --tasks 2 --no-fsync --quiet", tu_sluice());
    sh_ok(cmd);
    /* task 1 killed after publishing shard 3 but before its receipt, and
     * its private folder left behind */
    sh_ok("rm d/.train-00003-of-00005.tfrecord.receipt && "
          "mkdir d/.train.tmp-host-1-abcdef && echo junk > d/.train.tmp-host-1-abcdef/x.tmp");
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --finish", tu_sluice());
    int rc = sh(&out, cmd);
    cr_assert_eq(rc, 1, "finish without shard 3's receipt: %d: %s", rc, out);
    cr_assert(strstr(out, "shard 3 (train-00003-of-00005.tfrecord, task 1)") &&
              strstr(out, "no receipt"), "names the shard, its task and why: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 1 --tasks 2 --no-fsync",
             tu_sluice());
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "2 whole before this run, kept"), "rewrote more than shard 3: %s", out);
    free(out);
    sh_ok("rm d/train-00004-of-00005.tfrecord.idx"); /* an index lost: finish writes it */
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --finish", tu_sluice());
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "1 index written"), "the lost index rewritten: %s", out);
    free(out);
    same_files("one", "d");
    struct stat sb;
    char stale[1024];
    snprintf(stale, sizeof stale, "%s/d/.train.tmp-host-1-abcdef", dir);
    cr_assert_neq(stat(stale, &sb), 0, "finish left a killed task's folder");
    /* finish again: still complete, nothing rewritten */
    sh_ok(cmd);
    same_files("one", "d");
}

/* The plan file with sed's substitution applied, as PLAN2. */
static void edit_plan(const char *from, const char *to, const char *sed)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sed '%s' %s > %s", sed, from, to);
    sh_ok(cmd);
}

static void refused(const char *cmd, int want_rc, const char *needle)
{
    char *out = NULL;
    int rc = sh(&out, cmd);
    cr_assert_eq(rc, want_rc, "%s: exit %d, want %d: %s", cmd, rc, want_rc, out);
    cr_assert(strstr(out, needle), "%s: the message does not say '%s': %s", cmd, needle, out);
    free(out);
}

Test(convert_task, bad_plans_refused_naming_the_difference)
{
    make_inputs();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out d --name train %s "
             "--plan-out plan.json --tasks 2", tu_sluice(), CONVERT_OPTS);
    sh_ok(cmd);
    edit_plan("plan.json", "v9.json", "1s/\"made_by\":\"sluice [^\"]*\"/\"made_by\":\"sluice 9.9.9\"/");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan v9.json --task 0 --tasks 2", tu_sluice());
    refused(cmd, 2, "made by sluice 9.9.9");
    edit_plan("plan.json", "f2.json", "1s/\"sluice_plan\":1/\"sluice_plan\":2/");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan f2.json --finish", tu_sluice());
    refused(cmd, 2, "plan format 2");
    edit_plan("plan.json", "hand.json", "1s/\"quality\":95/\"quality\":90/");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan hand.json --task 0 --tasks 2", tu_sluice());
    refused(cmd, 2, "made with"); /* the header's options and its text disagree */
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 0 --tasks 3", tu_sluice());
    refused(cmd, 2, "was cut for 2 tasks");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 2 --tasks 2", tu_sluice());
    refused(cmd, 2, "tasks 0..1");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 0 --tasks 2 --quality 80",
             tu_sluice());
    refused(cmd, 2, "--quality does not go with --plan");
    /* OUT planned again with other options: refused at plan time ... */
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out d --name train --shards 5 "
             "--resize-short 96 --shuffle-seed 8 --plan-out other.json", tu_sluice());
    refused(cmd, 2, "seed: 7 then, 8 now");
    /* ... and a task of the old plan when OUT says otherwise */
    sh_ok("sed -i 's/^quality 95$/quality 90/' d/.train.plan");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 1 --tasks 2", tu_sluice());
    refused(cmd, 2, "quality: 90 then, 95 now");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --finish", tu_sluice());
    refused(cmd, 2, "other inputs or options");
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out l --name train --to lmdb "
             "--plan-out l.json", tu_sluice());
    refused(cmd, 2, "LMDB");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json", tu_sluice());
    refused(cmd, 2, "--task K --tasks N");
}

/* The header's options must say what its text says: a plan whose text and
 * options disagree was edited (the digest covers the text; the task checks
 * the options it would use against the text through OUT's marker). */

Test(convert_task, finish_names_what_is_missing_or_damaged)
{
    make_inputs();
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out d --name train %s "
             "--plan-out plan.json --tasks 2", tu_sluice(), CONVERT_OPTS);
    sh_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 0 --tasks 2 --no-fsync "
             "--quiet", tu_sluice());
    sh_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --finish", tu_sluice());
    int rc = sh(&out, cmd);
    cr_assert_eq(rc, 1, "an incomplete set finished: %d: %s", rc, out);
    cr_assert(strstr(out, "shard 2 (train-00002-of-00005.tfrecord, task 1): missing") &&
              strstr(out, "shard 4 (train-00004-of-00005.tfrecord, task 1): missing") &&
              strstr(out, "3 of 5 shards missing") && strstr(out, "run task 1 of 2 again"),
              "names each missing shard and the task: %s", out);
    free(out);
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/d/dataset.json", dir);
    cr_assert_neq(stat(path, &sb), 0, "dataset.json written for an incomplete set");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 1 --tasks 2 --no-fsync "
             "--quiet", tu_sluice());
    sh_ok(cmd);
    /* a payload byte of shard 1's second record flipped */
    sh_ok("f=d/train-00001-of-00005.tfrecord; off=$(sed -n 2p $f.idx | cut -d' ' -f1); "
          "printf '\\x55' | dd of=$f bs=1 seek=$((off + 40)) conv=notrunc 2>/dev/null");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --finish", tu_sluice());
    rc = sh(&out, cmd);
    cr_assert_eq(rc, 1, "a damaged shard finished: %d: %s", rc, out);
    cr_assert(strstr(out, "shard 1 (train-00001-of-00005.tfrecord, task 0): record 1 @") &&
              strstr(out, "CRC") && strstr(out, "1 damaged"), "names the record: %s", out);
    /* the skipped input, listed with its task and summed */
    cr_assert(strstr(out, "bad.jpg") && strstr(out, "skipped inputs per task:") &&
              strstr(out, "1 in all"), "skips per task: %s", out);
    free(out);
    /* the shard's task run again: the receipt is whole but the shard is
     * not what it says, so finish keeps failing until it is rewritten */
    sh_ok("rm d/.train-00001-of-00005.tfrecord.receipt");
    snprintf(cmd, sizeof cmd, "'%s' convert --plan plan.json --task 0 --tasks 2 --no-fsync --quiet "
             "&& '%s' convert --plan plan.json --finish --quiet", tu_sluice(), tu_sluice());
    sh_ok(cmd);
    /* --strict: the bad input stops its task (exit 1) */
    snprintf(cmd, sizeof cmd, "rm -rf d2 && '%s' convert --from folder in --out d2 --name train %s "
             "--plan-out p2.json --tasks 5 && for k in 0 1 2 3 4; do '%s' convert --plan p2.json "
             "--task $k --tasks 5 --strict --no-fsync --quiet || echo \"task $k: $?\"; done",
             tu_sluice(), CONVERT_OPTS, tu_sluice());
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, ": 1\n") && strstr(out, "strict"), "--strict on a task: %s", out);
    free(out);
}

/* ------------------------------------------------------------ servers */
static void s3_env(const srv *s, const char *endpoint, char *buf, size_t cap)
{
    snprintf(buf, cap, "AWS_ENDPOINT_URL='%s' AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' "
             "AWS_REGION=us-east-1 SLUICE_IO_BACKOFF_MS=1 SLUICE_PUT_PART_BYTES=65536",
             endpoint ? endpoint : s->url, s->key, s->secret);
}

Test(convert_task, s3_plan_and_output_multipart_through_faults)
{
    make_inputs();
    char cmd[4096], env[1024], penv[1024], local[1024];
    srv s = {0}, px = {0};
    srv_s3_start(&s);
    srv_proxy_start(s.url, "503every=5", &px);
    sh_ok("mkdir -p empty");
    snprintf(local, sizeof local, "%s/empty", dir);
    srv_s3_put_dir(&s, "out", "x/", local); /* makes the bucket */
    s3_env(&s, NULL, env, sizeof env);
    s3_env(&s, px.url, penv, sizeof penv);
    snprintf(cmd, sizeof cmd, "'%s' convert --from folder in --out one --name train %s",
             tu_sluice(), CONVERT_OPTS);
    sh_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s '%s' convert --from folder in --out s3://out/ds --name train %s "
             "--plan-out s3://out/plans/train.json --tasks 2", env, tu_sluice(), CONVERT_OPTS);
    sh_ok(cmd);
    for (int k = 1; k >= 0; k--) {
        snprintf(cmd, sizeof cmd, "%s '%s' convert --plan s3://out/plans/train.json --task %d "
                 "--tasks 2 --quiet", penv, tu_sluice(), k);
        sh_ok(cmd);
    }
    snprintf(cmd, sizeof cmd, "%s '%s' convert --plan s3://out/plans/train.json --finish", env,
             tu_sluice());
    sh_ok(cmd);
    cr_assert_eq(srv_s3_uploads(&s, "out"), 0, "multipart uploads left open");
    snprintf(local, sizeof local, "%s/got", dir);
    cr_assert_geq(srv_s3_get_dir(&s, "out", "ds/", local), 11);
    same_files("one", "got");
    /* and the data set reads back through the byte source */
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "%s '%s' verify s3://out/ds", env, tu_sluice());
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    free(out);
    srv_stop(&px);
    srv_stop(&s);
}

Test(convert_task, http_inputs_listed)
{
    make_inputs();
    srv ng = {0};
    srv_nginx_start(dir, &ng);
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd in && for f in */*.jpg; do l=0; case $f in b/*) l=1;; c/*) l=2;; "
             "esac; printf '%s/in/%%s\\t%%s\\n' $f $l; done > ../urls.txt && "
             "printf '%s/in/a/gone.jpg\\t0\\n' >> ../urls.txt", ng.url, ng.url);
    sh_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' convert --from list urls.txt --out one --name train %s",
             tu_sluice(), CONVERT_OPTS);
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "a/gone.jpg: HTTP 404"), "the 404 named with its status: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' convert --from list urls.txt --out d --name train %s "
             "--plan-out plan.json --tasks 3 && for k in 2 0 1; do '%s' convert --plan plan.json "
             "--task $k --tasks 3 --no-fsync --quiet; done && '%s' convert --plan plan.json "
             "--finish", tu_sluice(), CONVERT_OPTS, tu_sluice(), tu_sluice());
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "gone.jpg: HTTP 404: not found") && strstr(out, "2 in all"),
              "the skips per task (bad.jpg and the 404): %s", out);
    free(out);
    same_files("one", "d");
    srv_stop(&ng);
}

Test(convert_task, s3_inputs_listed)
{
    make_inputs();
    srv s = {0};
    srv_s3_start(&s);
    char cmd[4096], env[1024], src[1024], *out = NULL;
    snprintf(src, sizeof src, "%s/in", dir);
    srv_s3_put_dir(&s, "imgs", "photos/", src);
    s3_env(&s, NULL, env, sizeof env);
    sh_ok("cd in && for f in */*.jpg; do l=0; case $f in b/*) l=1;; c/*) l=2;; esac; "
          "printf 's3://imgs/photos/%s\\t%s\\n' $f $l; done > ../s3.txt && "
          "printf 's3://imgs/photos/a/gone.jpg\\t0\\n' >> ../s3.txt");
    snprintf(cmd, sizeof cmd, "%s '%s' convert --from list s3.txt --out one --name train %s",
             env, tu_sluice(), CONVERT_OPTS);
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "s3://imgs/photos/a/gone.jpg: HTTP 404"), "the 404 named: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "export %s; S='%s'; $S convert --from list s3.txt --out d --name train "
             "%s --plan-out plan.json --tasks 2 && $S convert --plan plan.json --task 1 --tasks 2 "
             "--no-fsync --quiet && $S convert --plan plan.json --task 0 --tasks 2 --no-fsync --quiet "
             "&& $S convert --plan plan.json --finish", env, tu_sluice(), CONVERT_OPTS);
    cr_assert_eq(sh(&out, cmd), 0, "%s", out);
    cr_assert(strstr(out, "gone.jpg: HTTP 404") && strstr(out, "2 in all"), "%s", out);
    cr_assert(!strstr(out, s.secret) && !strstr(out, s.key), "a credential in the output: %s", out);
    free(out);
    same_files("one", "d");
    /* a wrong secret refuses every input alike: the run stops naming the
     * keys, it does not turn the data set into skips */
    char bad[1024];
    snprintf(bad, sizeof bad, "AWS_ENDPOINT_URL='%s' AWS_ACCESS_KEY_ID='%s' "
             "AWS_SECRET_ACCESS_KEY=wrong-secret-0123456789 AWS_REGION=us-east-1", s.url, s.key);
    snprintf(cmd, sizeof cmd, "%s '%s' convert --from list s3.txt --out w --name train %s", bad,
             tu_sluice(), CONVERT_OPTS);
    int rc = sh(&out, cmd);
    cr_assert_eq(rc, 2, "a wrong secret: exit %d: %s", rc, out);
    cr_assert(strstr(out, "SignatureDoesNotMatch") && strstr(out, "AWS_SECRET_ACCESS_KEY") &&
              !strstr(out, "skipped: s3://imgs/photos/a/1-1.jpg") &&
              !strstr(out, "wrong-secret-0123456789"), "%s", out);
    free(out);
    srv_stop(&s);
}

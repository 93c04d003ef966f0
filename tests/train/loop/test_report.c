/*
 * tests/train/loop/test_report.c - `sluice train` and `eval` say what they
 * chose and what online tuning did (issue 43 item 4): --json's parallelism
 * (the split, the budget, the start-up measurement and its seconds, why)
 * and tuning objects, and the same in the logdir's TensorBoard event file
 * (parallelism/ scalars and the reason as text at the first step, tuning/
 * scalars at every log step), read back with sl_events_read_all; for the
 * split the CLI chooses and for one forced by hand.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_testdata.h"
#include "testutil.h"
#include "train/train.h"

#define STEPS 3

/* What the event file holds: the parallelism/ scalars and text of step 0,
 * the tuning/ scalars of each step 1..STEPS (NAN: none). */
typedef struct seen {
    double replicas, threads, workers, readers, prefetch, cpus, free_cores, probe_s;
    char reason[600];
    int reason_step;
    double tw[STEPS + 1], tp[STEPS + 1], tc[STEPS + 1];
} seen;

static int on_scalar(void *ctx, int64_t step, double wall, const char *tag, float v)
{
    (void)wall;
    seen *s = ctx;
    struct { const char *tag; double *dst; } par[] = {
        {"parallelism/replicas", &s->replicas}, {"parallelism/threads_per_replica", &s->threads},
        {"parallelism/workers", &s->workers}, {"parallelism/readers", &s->readers},
        {"parallelism/prefetch", &s->prefetch}, {"parallelism/cpus", &s->cpus},
        {"parallelism/free_cores", &s->free_cores},
        {"parallelism/probe_seconds", &s->probe_s}};
    for (size_t i = 0; i < sizeof par / sizeof par[0]; i++)
        if (!strcmp(tag, par[i].tag)) {
            cr_assert_eq(step, 0, "%s at step %lld", tag, (long long)step);
            *par[i].dst = v;
        }
    if (!strncmp(tag, "tuning/", 7)) {
        cr_assert(step >= 1 && step <= STEPS, "%s at step %lld", tag, (long long)step);
        double *d = !strcmp(tag, "tuning/workers")    ? s->tw
                    : !strcmp(tag, "tuning/prefetch") ? s->tp
                    : !strcmp(tag, "tuning/changes")  ? s->tc
                                                      : NULL;
        cr_assert(d, "unknown tag %s", tag);
        d[step] = v;
    }
    return 0;
}

static int on_text(void *ctx, int64_t step, double wall, const char *tag, const char *text)
{
    (void)wall;
    seen *s = ctx;
    if (!strcmp(tag, "parallelism/reason")) {
        snprintf(s->reason, sizeof s->reason, "%s", text);
        s->reason_step = (int)step;
    }
    return 0;
}

static void read_events(const char *logdir, seen *s)
{
    char *path = tu_events_file(logdir);
    memset(s, 0, sizeof *s);
    s->reason_step = -1;
    for (int i = 0; i <= STEPS; i++)
        s->tw[i] = s->tp[i] = s->tc[i] = NAN;
    cr_assert_eq(sl_events_read_all(path, on_scalar, on_text, s), SL_OK, "%s", sl_errmsg());
    free(path);
}

static cJSON *jobj(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsObject(v), "no object %s", name);
    return (cJSON *)v;
}

static double jnum(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsNumber(v), "field %s missing or not a number", name);
    return v->valuedouble;
}

static const char *jstr(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsString(v), "field %s missing or not a string", name);
    return v->valuestring;
}

/* The knobs array as "workers,prefetch" ("" for none). */
static void knobs(const cJSON *tuning, char *buf, size_t cap)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(tuning, "knobs"), *e;
    cr_assert(cJSON_IsArray(k), "no knobs");
    buf[0] = '\0';
    cJSON_ArrayForEach(e, k)
    {
        cr_assert(cJSON_IsString(e));
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? "," : "", e->valuestring);
    }
}

/* Run a sluice command whose stdout is one JSON object (stderr to a file). */
static cJSON *run_json(const char *tmp, const char *fmt_args, const char *data)
{
    char *out = NULL;
    int rc = tu_run(&out, "(%s %s 2>%s/err)", tu_sluice(), fmt_args, tmp);
    char *err = NULL;
    tu_run(&err, "cat %s/err", tmp);
    cr_assert_eq(rc, 0, "%s\n%s", out, err);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "no JSON from %s on %s: %s", fmt_args, data, out);
    free(out);
    free(err);
    return j;
}

/* The tuning/ scalars agree with --json's tuning at the end, and each log
 * step has them within the range the run used. */
static void check_tuning_scalars(const seen *s, const cJSON *tuning)
{
    for (int st = 1; st <= STEPS; st++) {
        cr_assert(!isnan(s->tw[st]) && !isnan(s->tp[st]) && !isnan(s->tc[st]),
                  "no tuning/ scalars at step %d", st);
        cr_assert(s->tw[st] >= jnum(tuning, "workers_lo") &&
                  s->tw[st] <= jnum(tuning, "workers_hi"), "step %d: %g workers", st, s->tw[st]);
        cr_assert(s->tp[st] >= jnum(tuning, "prefetch_lo") &&
                  s->tp[st] <= jnum(tuning, "prefetch_hi"), "step %d: prefetch %g", st,
                  s->tp[st]);
        cr_assert(st == 1 || s->tc[st] >= s->tc[st - 1], "changes only grow");
    }
    cr_assert_eq(s->tw[STEPS], jnum(tuning, "workers"));
    cr_assert_eq(s->tp[STEPS], jnum(tuning, "prefetch"));
    cr_assert_eq(s->tc[STEPS], jnum(tuning, "changes"));
}

Test(train_report, chosen_split_and_tuning_in_json_and_tensorboard, .timeout = 300)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    char *tmp = tu_tmpdir();
    char args[1024], kn[64];
    const char *common = "--image-size 16 --batch 32 --width 4 --classes 10 --max-steps 3 "
                         "--log-every 1 --eval-split none --json";

    /* the default: the CLI chooses within --cpus 2 and measures the cores */
    snprintf(args, sizeof args, "train --data %s %s --cpus 2 --logdir %s/a", d.dir, common, tmp);
    cJSON *j = run_json(tmp, args, d.dir);
    const cJSON *par = jobj(j, "parallelism"), *tun = jobj(j, "tuning");
    cr_assert_eq(jnum(par, "cpus"), 2);
    cr_assert_str_eq(jstr(par, "strategy"), "mirrored");
    cr_assert_eq(jnum(par, "replicas"), 2);
    cr_assert_eq(jnum(par, "threads"), 1);
    cr_assert_eq(jnum(par, "workers"), 1);
    cr_assert_eq(jnum(par, "readers"), 2);
    double probe = jnum(par, "probe_s"), free_cores = jnum(par, "free_cores");
    cr_assert(probe >= 0.04 && probe < 2.0, "the start-up measurement took %g s", probe);
    cr_assert(free_cores > 0 && free_cores <= 2.0, "%g cores free", free_cores);
    cr_assert(jnum(par, "gmac_per_image") > 0);
    cr_assert(!strncmp(jstr(par, "budget"), "--cpus 2; this process may use ", 31), "%s",
              jstr(par, "budget"));
    const char *reason = jstr(par, "reason");
    cr_assert(strstr(reason, "2 replicas x 1 thread on 2 cores: 16 images each"), "%s", reason);
    knobs(tun, kn, sizeof kn);
    cr_assert_str_eq(kn, "workers,prefetch", "tuned: what was not given");
    cr_assert_eq(jnum(tun, "workers_max"), 1, "within the workers started");
    cr_assert(jnum(tun, "prefetch_max") >= jnum(tun, "prefetch_hi"));
    cr_assert(jnum(tun, "changes") <= jnum(tun, "windows"));
    /* TensorBoard: the same at step 0, the tuning at each log step */
    seen s;
    char logdir[512];
    snprintf(logdir, sizeof logdir, "%s/a", tmp);
    read_events(logdir, &s);
    cr_assert_eq(s.replicas, 2);
    cr_assert_eq(s.threads, 1);
    cr_assert_eq(s.workers, 1);
    cr_assert_eq(s.readers, 2);
    cr_assert_eq(s.cpus, 2);
    cr_assert_float_eq(s.free_cores, free_cores, 0.006, "%g against %g", s.free_cores,
                       free_cores);
    cr_assert_float_eq(s.probe_s, probe, 0.0006, "%g against %g", s.probe_s, probe);
    cr_assert_eq(s.reason_step, 0);
    cr_assert(!strncmp(s.reason, reason, strlen(reason)), "%s", s.reason);
    cr_assert(strstr(s.reason, "--cpus 2"), "the budget too: %s", s.reason);
    check_tuning_scalars(&s, tun);
    cJSON_Delete(j);
    /* metrics.jsonl holds the text too */
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "grep -c '\"parallelism/reason\":\"2 replicas x 1 thread' "
                        "%s/a/metrics.jsonl", tmp), 0, "%s", out);
    free(out);

    /* forced by hand: no measurement, no tuning, said so */
    snprintf(args, sizeof args, "train --data %s %s --strategy mirrored --replicas 2 --threads 2 "
             "--workers 2 --readers 1 --prefetch 5 --logdir %s/b", d.dir, common, tmp);
    j = run_json(tmp, args, d.dir);
    par = jobj(j, "parallelism");
    tun = jobj(j, "tuning");
    cr_assert_eq(jnum(par, "replicas"), 2);
    cr_assert_eq(jnum(par, "threads"), 1);
    cr_assert_eq(jnum(par, "workers"), 2);
    cr_assert_eq(jnum(par, "readers"), 1);
    cr_assert_eq(jnum(par, "prefetch"), 5);
    cr_assert_eq(jnum(par, "probe_s"), 0, "threads given: nothing measured");
    cr_assert_eq(jnum(par, "free_cores"), 0);
    cr_assert(strstr(jstr(par, "reason"), "threads as given"), "%s", jstr(par, "reason"));
    knobs(tun, kn, sizeof kn);
    cr_assert_str_eq(kn, "", "--workers and --prefetch given: nothing tuned");
    cr_assert_eq(jnum(tun, "workers"), 2);
    cr_assert_eq(jnum(tun, "workers_lo"), 2);
    cr_assert_eq(jnum(tun, "workers_hi"), 2);
    cr_assert_eq(jnum(tun, "prefetch"), 5);
    cr_assert_eq(jnum(tun, "changes"), 0);
    snprintf(logdir, sizeof logdir, "%s/b", tmp);
    read_events(logdir, &s);
    cr_assert_eq(s.workers, 2);
    cr_assert_eq(s.readers, 1);
    cr_assert_eq(s.prefetch, 5);
    cr_assert_eq(s.probe_s, 0);
    cr_assert(strstr(s.reason, "threads as given"), "%s", s.reason);
    check_tuning_scalars(&s, tun);
    for (int st = 1; st <= STEPS; st++) {
        cr_assert_eq(s.tw[st], 2);
        cr_assert_eq(s.tp[st], 5);
        cr_assert_eq(s.tc[st], 0);
    }
    cJSON_Delete(j);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

Test(train_report, eval_json_says_the_tuning, .timeout = 300)
{
    pl_dataset d;
    pl_make_dataset(&d, 64, 2, 0, NULL);
    char *tmp = tu_tmpdir();
    char args[1024], kn[64];
    snprintf(args, sizeof args, "train --data %s --image-size 16 --batch 16 --width 4 "
             "--classes 10 --max-steps 1 --eval-split none --threads 1 --ckpt-dir %s/ck --json",
             d.dir, tmp);
    cJSON_Delete(run_json(tmp, args, d.dir));
    const char *ck = "ck/ckpt-000000001.safetensors";
    snprintf(args, sizeof args, "eval --data %s --split train --checkpoint %s/%s --batch 8 "
             "--cpus 2 --json", d.dir, tmp, ck);
    cJSON *j = run_json(tmp, args, d.dir);
    const cJSON *par = jobj(j, "parallelism"), *tun = jobj(j, "tuning");
    cr_assert(strstr(jstr(par, "budget"), "--cpus 2"), "%s", jstr(par, "budget"));
    cr_assert(jnum(par, "probe_s") > 0, "one exec's threads chosen: measured");
    knobs(tun, kn, sizeof kn);
    cr_assert_str_eq(kn, "workers,prefetch");
    cr_assert_eq(jnum(tun, "workers_max"), jnum(par, "workers"));
    cr_assert(jnum(tun, "workers") >= 1 && jnum(tun, "workers") <= jnum(tun, "workers_max"));
    cJSON_Delete(j);
    snprintf(args, sizeof args, "eval --data %s --split train --checkpoint %s/%s --batch 8 "
             "--threads 1 --workers 2 --prefetch 3 --json", d.dir, tmp, ck);
    j = run_json(tmp, args, d.dir);
    tun = jobj(j, "tuning");
    knobs(tun, kn, sizeof kn);
    cr_assert_str_eq(kn, "");
    cr_assert_eq(jnum(tun, "workers"), 2);
    cr_assert_eq(jnum(tun, "prefetch"), 3);
    cr_assert_eq(jnum(tun, "changes"), 0);
    char *err = NULL;
    tu_run(&err, "cat %s/err", tmp);
    cr_assert(strstr(err, "eval: tuning: off (2 workers, prefetch 3"), "%s", err);
    free(err);
    cJSON_Delete(j);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

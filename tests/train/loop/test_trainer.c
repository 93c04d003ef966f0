/*
 * tests/train/loop/test_trainer.c - the training loop end to end on a small
 * JPEG dataset: exact resume (same weights and the same loss curve as the
 * run that was not interrupted), summaries and checkpoints where they
 * should be, evaluation, and the CLI around it; damaged checkpoint states
 * refused with the key named, and the error paths' cleanup.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_testdata.h"
#include "testutil.h"
#include "train/io/io_int.h" /* sl_resume_info_read */
#include "train/loop/trainer_int.h"
#include "train/train.h"

/* Under ASan: a leak check now, so that a test fails on what it leaked
 * (LeakSanitizer's report at a test process's exit does not fail the test:
 * Criterion has its result by then). 0 elsewhere. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_LSAN 1
#endif
#endif
#ifdef TEST_LSAN
#include <sanitizer/lsan_interface.h>
#define leaks_now() __lsan_do_recoverable_leak_check()
#else
#define leaks_now() 0
#endif

/* 96 records, 12 steps of 8 per epoch, 2 epochs; resnet20 at width 4 on
 * 16x16 inputs: small enough for ASan, big enough to move the weights. */
static void small_config(sl_train_config *t, const pl_dataset *d, const char *logdir,
                         const char *ckdir)
{
    sl_train_config_init(t);
    t->data.data = d->dir;
    t->data.split = "train";
    t->data.height = t->data.width = 16;
    t->data.batch = 8;
    t->data.readers = 2;
    t->data.workers = 2;
    t->data.shuffle_buffer = 40;
    t->data.seed = 11;
    t->eval_split = NULL;
    t->model.arch = SL_ARCH_RESNET20;
    t->model.width = 4;
    t->model.classes = 10;
    t->model.seed = 5;
    t->threads = 1;
    t->epochs = 2;
    t->base_lr = 0.8;
    t->warmup_epochs = 0.5;
    t->label_smoothing = 0.1f;
    t->logdir = logdir;
    t->ckpt_dir = ckdir;
    t->ckpt_every = 10;
    t->log_every = 1;
    t->progress = fopen("/dev/null", "w");
}

typedef struct curve {
    double loss[64];
    int n;
    int64_t first_step;
} curve;

static int on_scalar(void *ctx, int64_t step, double wall, const char *tag, float value)
{
    (void)wall;
    curve *c = ctx;
    if (strcmp(tag, "train/loss"))
        return 0;
    if (c->n == 0)
        c->first_step = step;
    if (c->n < 64)
        c->loss[c->n++] = value;
    return 0;
}

static void read_curve(const char *logdir, curve *c)
{
    char *out = tu_events_file(logdir);
    memset(c, 0, sizeof *c);
    cr_assert_eq(sl_events_read(out, on_scalar, c), SL_OK, "%s", sl_errmsg());
    free(out);
}

Test(train_trainer, resume_is_exact)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir();
    char *logA = tu_join(tmp, "logA"), *ckA = tu_join(tmp, "ckA");
    char *logB = tu_join(tmp, "logB"), *ckB = tu_join(tmp, "ckB");

    sl_train_config t;
    sl_train_result ra, rb;
    small_config(&t, &d, logA, ckA);
    cr_assert_eq(sl_train_run(&t, &ra), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    cr_assert_eq(ra.steps, 24);
    cr_assert_eq(ra.epochs_done, 2);
    cr_assert(strstr(ra.checkpoint, "ckpt-000000024"), "%s", ra.checkpoint);

    /* An interruption after step 10: only that checkpoint survives. */
    cr_assert_eq(tu_run(NULL, "mkdir -p %s && cp %s/ckpt-000000010.* %s/", ckB, ckA, ckB), 0);
    small_config(&t, &d, logB, ckB);
    t.resume = 1;
    cr_assert_eq(sl_train_run(&t, &rb), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    cr_assert_eq(rb.steps, 24);

    /* The final weights, BN statistics and momentum are the same bytes. */
    cr_assert_eq(tu_run(NULL, "cmp -s %s/ckpt-000000024.safetensors %s/ckpt-000000024.safetensors",
                        ckA, ckB), 0, "resumed weights differ");
    /* And the loss curve after the resume point is the same floats. */
    curve ca, cb;
    read_curve(logA, &ca);
    read_curve(logB, &cb);
    cr_assert_eq(ca.n, 24);
    cr_assert_eq(ca.first_step, 1);
    cr_assert_eq(cb.n, 14);
    cr_assert_eq(cb.first_step, 11);
    for (int i = 0; i < 14; i++)
        cr_assert_eq(ca.loss[10 + i], cb.loss[i], "step %d: %.9g vs %.9g", 11 + i,
                     ca.loss[10 + i], cb.loss[i]);
    /* The weights moved between the two checkpoints (labels here are i % 10
     * of unrelated images, so the loss itself need not fall; test_model.c
     * checks learning on a learnable problem). */
    cr_assert_neq(tu_run(NULL, "cmp -s %s/ckpt-000000010.safetensors %s/ckpt-000000024.safetensors",
                         ckA, ckA), 0, "weights did not change");

    free(logA); free(ckA); free(logB); free(ckB);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

Test(train_trainer, resume_with_changed_data_is_refused)
{
    pl_dataset d;
    pl_make_dataset(&d, 48, 2, 0, NULL);
    char *tmp = tu_tmpdir();
    char *ck = tu_join(tmp, "ck");
    sl_train_config t;
    sl_train_result r;
    small_config(&t, &d, NULL, ck);
    t.max_steps = 3;
    t.ckpt_every = 3;
    cr_assert_eq(sl_train_run(&t, &r), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    /* Another batch size cannot continue that pipeline position. */
    small_config(&t, &d, NULL, ck);
    t.max_steps = 6;
    t.resume = 1;
    t.data.batch = 6;
    int rc = sl_train_run(&t, &r);
    fclose(t.progress);
    cr_assert_neq(rc, SL_OK);
    cr_assert(strstr(sl_errmsg(), "batch"), "%s", sl_errmsg());
    free(ck);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

Test(train_trainer, cli_train_then_eval)
{
    pl_dataset d;
    pl_make_dataset(&d, 64, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    /* The dataset's only split is train: evaluate on it. */
    int rc = tu_run(&out, "%s train --data %s --image-size 16 --batch 8 --width 4 --classes 10 "
                    "--epochs 1 --eval-split train --threads 1 --logdir %s/log --ckpt-dir %s/ck "
                    "2>&1", tu_sluice(), d.dir, tmp, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "epoch 1 step 8/8"), "%s", out);
    cr_assert(strstr(out, "eval  epoch 1 step 8: top1"), "%s", out);
    cr_assert(strstr(out, "ckpt-000000008.safetensors"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "%s eval --data %s --split train --checkpoint %s/ck/ckpt-000000008.safetensors "
                "--batch 8 --threads 1 --json", tu_sluice(), d.dir, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"images\":64"), "%s", out);
    cr_assert(strstr(out, "\"model\":\"resnet20\""), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "test -s %s/log/metrics.jsonl && ls %s/log", tmp, tmp), 0, "%s", out);
    cr_assert(strstr(out, "events.out.tfevents."), "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

typedef struct par_seen {
    double replicas, threads;
} par_seen;

static int on_par(void *ctx, int64_t step, double wall, const char *tag, float value)
{
    (void)wall;
    par_seen *p = ctx;
    if (!strncmp(tag, "parallelism/", 12))
        cr_assert_eq(step, 0, "%s", tag);
    if (!strcmp(tag, "parallelism/replicas"))
        p->replicas = value;
    if (!strcmp(tag, "parallelism/threads_per_replica"))
        p->threads = value;
    return 0;
}

/* Issue 43: with no parallelism options the CLI chooses within --cpus and
 * says so (the start-up line, --json's "parallelism"); explicit options
 * win; and the chosen split trains the bytes of the same replicas x
 * threads set by hand with other workers, readers and prefetch (threads
 * per replica change oneDNN's bits: train/loop/plan.c). */
Test(train_trainer, cli_parallelism_chosen_said_and_deterministic)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    const char *common = "--image-size 16 --batch 32 --width 4 --classes 10 --max-steps 3 "
                         "--eval-split none --shuffle global --json";
    int rc = tu_run(&out, "%s train --data %s %s --cpus 2 --ckpt-dir %s/a --logdir %s/log 2>&1",
                    tu_sluice(), d.dir, common, tmp, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "train: parallelism: 2 replicas x 1 thread on 2 cores: 16 images each"),
              "%s", out);
    cr_assert(strstr(out, "\"parallelism\": {\"cpus\": 2, \"strategy\": \"mirrored\", "
                          "\"replicas\": 2, \"threads\": 1, \"workers\": 1, \"readers\": 2, "
                          "\"prefetch\": 0, \"free_cores\": "), "%s", out);
    cr_assert(strstr(out, "\"world\": 2"), "%s", out);
    free(out);
    /* TensorBoard: the split as scalars at the first step */
    char *log = tu_join(tmp, "log");
    out = tu_events_file(log);
    free(log);
    par_seen ps = {0};
    cr_assert_eq(sl_events_read(out, on_par, &ps), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ps.replicas, 2);
    cr_assert_eq(ps.threads, 1);
    free(out);
    out = NULL;
    /* the same split by hand, other threads per replica and pipeline sizes */
    rc = tu_run(&out, "%s train --data %s %s --strategy mirrored --replicas 2 --threads 2 "
                "--workers 2 --readers 1 --prefetch 5 --ckpt-dir %s/b 2>&1", tu_sluice(), d.dir,
                common, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"replicas\": 2, \"threads\": 1, \"workers\": 2, \"readers\": 1, "
                          "\"prefetch\": 5"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "cmp %s/a/ckpt-000000003.safetensors %s/b/ckpt-000000003.safetensors 2>&1",
                tmp, tmp);
    cr_assert_eq(rc, 0, "the chosen split's weights differ from the fixed one's: %s", out);
    free(out);
    out = NULL;
    /* eval: one thread for this small net, the other core decodes */
    rc = tu_run(&out, "%s eval --data %s --split train --checkpoint "
                "%s/a/ckpt-000000003.safetensors --batch 32 --cpus 2 --json", tu_sluice(), d.dir,
                tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"parallelism\":{\"cpus\": 2, \"strategy\": \"single\", "
                          "\"replicas\": 1, \"threads\": 1, \"workers\": 1, \"readers\": 2"),
              "%s", out);
    free(out);
    out = NULL;
    /* one core: one replica; --threads alone: one replica of that many */
    rc = tu_run(&out, "%s train --data %s %s --cpus 1 2>&1", tu_sluice(), d.dir, common);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"cpus\": 1, \"strategy\": \"single\", \"replicas\": 1, "
                          "\"threads\": 1"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "%s train --data %s %s --threads 2 --workers 3 2>&1", tu_sluice(), d.dir,
                common);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"strategy\": \"single\", \"replicas\": 1, \"threads\": 2, "
                          "\"workers\": 3"), "%s", out);
    cr_assert(strstr(out, "threads as given"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "%s train --data %s --cpus 0 2>&1", tu_sluice(), d.dir), 2);
    cr_assert(strstr(out, "--cpus"), "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

Test(train_trainer, cli_usage_errors)
{
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "%s train --help", tu_sluice()), 0);
    cr_assert(strstr(out, "--ckpt-dir"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "%s eval --help", tu_sluice()), 0);
    cr_assert(strstr(out, "--checkpoint"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "%s train --data /nonexistent --model resnet99 2>&1", tu_sluice()), 2);
    cr_assert(strstr(out, "--model: bad value 'resnet99'"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "%s train --data /x --resume 2>&1", tu_sluice()), 2);
    cr_assert(strstr(out, "--resume needs --ckpt-dir"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "%s eval --data /x 2>&1", tu_sluice()), 2);
    cr_assert(strstr(out, "--checkpoint is required"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "%s train --data /nonexistent/dir 2>&1", tu_sluice()), 2);
    cr_assert(strstr(out, "/nonexistent/dir"), "%s", out);
    free(out);
}

/* The eval split: test, else validation, else none, said once at the
 * start; one that is not there stops the run before its first step, with
 * nothing written. */
Test(train_trainer, eval_split_default_and_missing)
{
    pl_dataset d;
    pl_make_dataset(&d, 48, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    const char *common = "--image-size 16 --batch 8 --width 4 --classes 10 --epochs 1 "
                         "--threads 1";
    /* train only: no evaluation, said so */
    int rc = tu_run(&out, "%s train --data %s %s --ckpt-dir %s/ck 2>&1", tu_sluice(), d.dir,
                    common, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "no 'test' or 'validation' split beside"), "%s", out);
    cr_assert_null(strstr(out, "eval  epoch"), "%s", out);
    cr_assert(strstr(out, "ckpt-000000006.safetensors"), "%s", out);
    free(out);
    out = NULL;
    /* named and missing: an error before the first step, no checkpoint */
    rc = tu_run(&out, "%s train --data %s %s --eval-split test --ckpt-dir %s/ck2 2>&1",
                tu_sluice(), d.dir, common, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "--eval-split test") && strstr(out, "no split 'test'") &&
              strstr(out, "has: train"), "%s", out);
    cr_assert_null(strstr(out, "step 1/"), "%s", out);
    free(out);
    out = NULL;
    cr_assert_neq(tu_run(NULL, "ls %s/ck2/ckpt-* 2>/dev/null", tmp), 0, "a checkpoint was written");
    /* fewer classes than dataset.json records (10): refused before the first
     * step, not when a record of label 5 or more first comes up */
    rc = tu_run(&out, "%s train --data %s --image-size 16 --batch 8 --width 4 --classes 5 "
                "--epochs 1 --threads 1 --ckpt-dir %s/ck3 2>&1", tu_sluice(), d.dir, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "dataset.json records 10 classes, the model has 5") &&
                  strstr(out, "give --classes 10"), "%s", out);
    cr_assert_null(strstr(out, "step 1/"), "%s", out);
    free(out);
    out = NULL;
    /* a validation split beside it (named like TensorFlow's): picked */
    cr_assert_eq(tu_run(NULL, "cp %s %s/validation-00000-of-00001.tfrecord", d.shard_path[0],
                        d.dir), 0);
    rc = tu_run(&out, "%s train --data %s %s 2>&1", tu_sluice(), d.dir, common);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "evaluating split 'validation' after each epoch (there is no 'test'"),
              "%s", out);
    cr_assert(strstr(out, "eval  epoch 1 step 6: top1"), "%s", out);
    free(out);
    out = NULL;
    /* and test over validation; 'none' turns it off */
    cr_assert_eq(tu_run(NULL, "cp %s %s/test-00000-of-00001.tfrecord", d.shard_path[1], d.dir), 0);
    rc = tu_run(&out, "%s train --data %s %s --max-steps 1 2>&1", tu_sluice(), d.dir, common);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "evaluating split 'test' after each epoch (--eval-split"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "%s train --data %s %s --max-steps 1 --eval-split none 2>&1", tu_sluice(),
                d.dir, common);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_null(strstr(out, "eval"), "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

/* An error after steps have run saves the last completed step first, and
 * that checkpoint resumes exactly. The case: the first evaluation
 * fails (a validation record that is not a JPEG, --on-error fail) after an
 * epoch of steps, before that epoch's checkpoint; --resume from the rescue
 * (evaluation off) ends on the same bytes as a run that never stopped. */
Test(train_trainer, error_after_steps_keeps_a_checkpoint)
{
    uint8_t bad[16] = {0};
    bad[5] = PL_BAD_NOT_JPEG;
    pl_dataset d, v;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    pl_make_dataset(&v, 16, 1, 0, bad);
    cr_assert_eq(tu_run(NULL, "cp %s %s/validation-00000-of-00001.tfrecord && cp %s.idx "
                        "%s/validation-00000-of-00001.tfrecord.idx", v.shard_path[0], d.dir,
                        v.shard_path[0], d.dir), 0);
    char *tmp = tu_tmpdir();
    char *ckA = tu_join(tmp, "ckA"), *ckB = tu_join(tmp, "ckB");
    sl_train_config t;
    sl_train_result ra, rb;
    small_config(&t, &d, NULL, ckA);
    t.ckpt_every = 0;
    t.data.on_error = SL_ON_ERROR_FAIL;
    cr_assert_eq(sl_train_run(&t, &ra), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    cr_assert_eq(ra.steps, 24);

    small_config(&t, &d, NULL, ckB);
    t.ckpt_every = 0;
    t.data.on_error = SL_ON_ERROR_FAIL;
    t.eval_split = SL_EVAL_SPLIT_AUTO; /* validation */
    int rc = sl_train_run(&t, &rb);
    fclose(t.progress);
    cr_assert_neq(rc, SL_OK);
    const char *msg = sl_errmsg();
    char want[4200];
    snprintf(want, sizeof want, "the last completed step, 12, is saved in "
             "%s/ckpt-000000012.safetensors", ckB);
    cr_assert(strstr(msg, "evaluating split 'validation'") && strstr(msg, "(id 5)") &&
              strstr(msg, want), "%s", msg);
    cr_assert_eq(tu_run(NULL, "test -s %s/ckpt-000000012.safetensors", ckB), 0);

    small_config(&t, &d, NULL, ckB);
    t.ckpt_every = 0;
    t.data.on_error = SL_ON_ERROR_FAIL;
    t.resume = 1;
    cr_assert_eq(sl_train_run(&t, &rb), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    cr_assert_eq(rb.steps, 24);
    cr_assert_eq(tu_run(NULL, "cmp -s %s/ckpt-000000024.safetensors %s/ckpt-000000024.safetensors",
                        ckA, ckB), 0, "the run resumed from the rescue differs");
    free(ckA), free(ckB);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
    pl_dataset_free(&v);
}

/* A stop request (cfg->stop, the CLI's Ctrl-C) ends the run at a step
 * every replica agrees on (one replica: after step 1, the first it looks;
 * two mirrored: after step SL_TRAIN_STOP_EVERY, their first agreement),
 * saves that step with the bytes a checkpoint of the run never stopped has
 * there, says SL_ECANCELED naming it, and resumes from it to that run's
 * final bytes (both checkpoint at the same steps: a checkpoint averages the
 * replicas' BN running statistics, which moves their last bits). */
Test(train_trainer, stop_request_saves_a_step_that_resumes_exactly)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir();
    for (int replicas = 1; replicas <= 2; replicas++) {
        char name[32];
        snprintf(name, sizeof name, "ckA%d", replicas);
        char *ckA = tu_join(tmp, name);
        snprintf(name, sizeof name, "ckB%d", replicas);
        char *ckB = tu_join(tmp, name);
        sl_train_config t;
        sl_train_result ra, rb;
        int64_t at = replicas == 1 ? 1 : SL_TRAIN_STOP_EVERY;
        small_config(&t, &d, NULL, ckA);
        t.ckpt_every = at; /* a checkpoint where B will stop, to compare with */
        if (replicas > 1)
            t.strategy = SL_STRATEGY_MIRRORED, t.replicas = replicas;
        volatile int stop = 0;
        t.stop = &stop; /* never set: no effect */
        cr_assert_eq(sl_train_run(&t, &ra), SL_OK, "%s", sl_errmsg());
        fclose(t.progress);
        cr_assert_eq(ra.steps, 24);
        cr_assert_eq(ra.stopped, 0);

        small_config(&t, &d, NULL, ckB);
        t.ckpt_every = 0;
        if (replicas > 1)
            t.strategy = SL_STRATEGY_MIRRORED, t.replicas = replicas;
        stop = 1; /* asked before the first step: the first look stops it */
        t.stop = &stop;
        cr_assert_eq(sl_train_run(&t, &rb), SL_ECANCELED, "%s", sl_errmsg());
        fclose(t.progress);
        cr_assert_eq(rb.stopped, at);
        cr_assert_eq(rb.steps, at);
        char want[4400];
        snprintf(want, sizeof want, "stopped on request after step %lld; it is saved in "
                 "%s/ckpt-%09lld: continue with --ckpt-dir %s --resume", (long long)at, ckB,
                 (long long)at, ckB);
        cr_assert(strstr(sl_errmsg(), want), "%s\nwant: %s", sl_errmsg(), want);
        cr_assert_eq(tu_run(NULL, "test -s %s/ckpt-%09lld.safetensors && ls %s | wc -l | "
                            "grep -qx 2", ckB, (long long)at, ckB), 0,
                     "one checkpoint, of the step it stopped at");
        for (int k = 0; k < 2; k++)
            cr_assert_eq(tu_run(NULL, "cmp -s %s/ckpt-%09lld.%s %s/ckpt-%09lld.%s", ckA,
                                (long long)at, k ? "json" : "safetensors", ckB, (long long)at,
                                k ? "json" : "safetensors"), 0,
                         "%d replicas: the stop's checkpoint is not the run's own at step %lld",
                         replicas, (long long)at);

        small_config(&t, &d, NULL, ckB);
        t.ckpt_every = at; /* as A: each checkpoint averages the BN statistics */
        if (replicas > 1)
            t.strategy = SL_STRATEGY_MIRRORED, t.replicas = replicas;
        t.resume = 1;
        stop = 0;
        t.stop = &stop;
        cr_assert_eq(sl_train_run(&t, &rb), SL_OK, "%s", sl_errmsg());
        fclose(t.progress);
        cr_assert_eq(rb.steps, 24);
        cr_assert_eq(tu_run(NULL, "cmp -s %s/ckpt-000000024.safetensors "
                            "%s/ckpt-000000024.safetensors", ckA, ckB), 0,
                     "%d replicas: the run resumed after the stop differs", replicas);
        free(ckA), free(ckB);
    }
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

/* Without --ckpt-dir the rescue goes to ./sluice-rescue; --sync-bn on one
 * replica is plain batch norm, accepted with a notice. */
Test(train_trainer, cli_rescue_and_sync_bn_alone)
{
    uint8_t bad[64] = {0};
    bad[50] = PL_BAD_NOT_JPEG;
    pl_dataset d;
    pl_make_dataset(&d, 64, 2, 0, bad);
    char *tmp = tu_tmpdir(), *out = NULL;
    int rc = tu_run(&out, "cd %s && %s train --data %s --image-size 16 --batch 8 --width 4 "
                    "--classes 10 --epochs 1 --threads 1 --on-error fail --shuffle none --sync-bn 2>&1", tmp,
                    tu_sluice(), d.dir);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "--sync-bn with one replica: plain batch norm"), "%s", out);
    cr_assert(strstr(out, "train: stopped by an error after step "), "%s", out);
    cr_assert(strstr(out, "is saved in sluice-rescue/ckpt-") &&
              strstr(out, "--ckpt-dir sluice-rescue --resume"), "%s", out);
    /* mid-epoch: the step and the pipeline position saved agree */
    const char *at = strstr(out, "stopped by an error after step ");
    int step = atoi(at + strlen("stopped by an error after step "));
    cr_assert(step >= 1 && step < 8, "%s", out);
    free(out);
    out = NULL;
    cr_assert_eq(tu_run(&out, "cat %s/sluice-rescue/ckpt-%09d.json", tmp, step), 0);
    char s1[64], s2[64];
    snprintf(s1, sizeof s1, "\"step\":%d,", step);
    snprintf(s2, sizeof s2, "\\\"batches\\\":\\\"%d\\\"", step);
    cr_assert(strstr(out, s1) && strstr(out, s2), "want %s and %s in %s", s1, s2, out);
    free(out);
    out = NULL;
    /* mirrored with one replica too */
    pl_dataset g;
    pl_make_dataset(&g, 32, 2, 0, NULL);
    rc = tu_run(&out, "%s train --data %s --image-size 16 --batch 8 --width 4 --classes 10 "
                "--max-steps 2 --threads 1 --strategy mirrored --replicas 1 --sync-bn 2>&1",
                tu_sluice(), g.dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "--sync-bn with one replica: plain batch norm"), "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
    pl_dataset_free(&g);
}

/* ------------------------------------------------------- damaged checkpoints */

/* dir/ckpt-000000003.json with the trainer state `state` (a JSON object's
 * text), beside a weights file that only has to exist: every case below is
 * refused before the weights are read. */
static void write_sidecar(const char *dir, const char *state)
{
    char path[4200], text[4096];
    cr_assert_eq(tu_run(NULL, "mkdir -p %s", dir), 0);
    snprintf(path, sizeof path, "%s/ckpt-000000003.safetensors", dir);
    cr_assert_eq(tu_write_file(path, "x", 1), 0);
    snprintf(path, sizeof path, "%s/ckpt-000000003.json", dir);
    int n = snprintf(text, sizeof text, "{\"format\":1,\"weights\":\"ckpt-000000003.safetensors\","
                     "\"state\":%s}", state);
    cr_assert_eq(tu_write_file(path, text, (size_t)n), 0);
}

/* A state as the trainer writes it, with field `key`'s value text replaced
 * by `value` (NULL: the field left out). */
static void state_with(char *out, size_t cap, const char *key, const char *value)
{
    static const char *const fields[][2] = {
        {"step", "3"}, {"epoch", "0"}, {"steps_per_epoch", "6"}, {"total_steps", "12"},
        {"batch", "8"}, {"world", "1"}, {"rank_split", "\"files\""}, {"pipeline", "\"{}\""}};
    size_t n = (size_t)snprintf(out, cap, "{");
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        const char *v = strcmp(fields[i][0], key) ? fields[i][1] : value;
        if (v)
            n += (size_t)snprintf(out + n, cap - n, "%s\"%s\":%s", n > 1 ? "," : "",
                                  fields[i][0], v);
    }
    snprintf(out + n, cap - n, "}");
}

/* Every number of a checkpoint's state is checked for range and
 * integrality before it is converted (issue 26: (int64_t)1e300 was
 * undefined behaviour, which UBSan's float-cast-overflow reports):
 * sl_resume_info_read refuses each with the file and the key named. */
Test(train_trainer, resume_state_numbers_are_checked)
{
    static const struct {
        const char *key, *value, *want;
    } bad[] = {
        {"step", "1e300", "step: 1e+300 is not an integer in 0..2^53"},
        {"step", "-1", "step: -1 is not an integer in 0..2^53"},
        {"step", "2.5", "step: 2.5 is not an integer in 0..2^53"},
        {"step", "1e999", "step: inf is not an integer in 0..2^53"},
        {"step", "-1e999", "step: -inf is not an integer"},
        {"step", "9007199254740994", "step: 9007199254740994 is not an integer in 0..2^53"},
        {"step", "18446744073709551616", "step: 1.8446744073709552e+19 is not an integer"},
        {"step", "\"3\"", "step: not a number"},
        {"step", NULL, "state lacks step or pipeline"},
        {"pipeline", NULL, "state lacks step or pipeline"},
        {"batch", "1e20", "batch: 1e+20 is not an integer in 1..4294967295"},
        {"batch", "0", "batch: 0 is not an integer in 1..4294967295"},
        {"batch", "8.5", "batch: 8.5 is not an integer"},
        {"batch", "4294967296", "batch: 4294967296 is not an integer in 1..4294967295"},
        {"world", "1e10", "world: 1e+10 is not an integer in 1..2147483647"},
        {"world", "2147483648", "world: 2147483648 is not an integer in 1..2147483647"},
        {"world", "0", "world: 0 is not an integer"},
        {"world", "1.5", "world: 1.5 is not an integer"},
        {"world", "null", "world: not a number"},
        {"steps_per_epoch", "-3", "steps_per_epoch: -3 is not an integer in 1..2^53"},
        {"steps_per_epoch", "1e300", "steps_per_epoch: 1e+300 is not an integer"},
        {"rank_split", "5", "rank_split: not a string"},
    };
    char *tmp = tu_tmpdir(), *ck = tu_join(tmp, "ck"), state[1024], prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/ckpt-000000003", ck);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        state_with(state, sizeof state, bad[i].key, bad[i].value);
        write_sidecar(ck, state);
        sl_resume_info ri;
        int rc = sl_resume_info_read(prefix, &ri);
        cr_assert_eq(rc, SL_ECORRUPT, "%s: %s: rc %d: %s", bad[i].key, bad[i].value, rc,
                     sl_errmsg());
        char want[4400];
        snprintf(want, sizeof want, "sl_train_run: %s.json: %s", prefix, bad[i].want);
        cr_assert(strstr(sl_errmsg(), want), "%s = %s: want '%s' in '%s'", bad[i].key,
                  bad[i].value, want, sl_errmsg());
        cr_assert_null(ri.pipeline);
    }
    /* the edges that are fine, and the defaults of fields left out */
    static const struct {
        const char *key, *value;
    } good[] = {{"step", "0"}, {"step", "9007199254740992"}, {"step", "-0"}, {"step", "3.0"},
                {"batch", "4294967295"}, {"world", "2147483647"}, {"world", NULL},
                {"batch", NULL}, {"steps_per_epoch", NULL}, {"rank_split", "\"records\""}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        state_with(state, sizeof state, good[i].key, good[i].value);
        write_sidecar(ck, state);
        sl_resume_info ri;
        cr_assert_eq(sl_resume_info_read(prefix, &ri), SL_OK, "%s = %s: %s", good[i].key,
                     good[i].value, sl_errmsg());
        cr_assert_str_eq(ri.pipeline, "{}");
        if (!strcmp(good[i].key, "world"))
            cr_assert_eq(ri.world, good[i].value ? 2147483647 : 1);
        if (!strcmp(good[i].key, "batch"))
            cr_assert_eq(ri.batch, good[i].value ? 4294967295 : 0);
        if (!strcmp(good[i].key, "steps_per_epoch"))
            cr_assert_eq(ri.steps_per_epoch, 0);
        if (!strcmp(good[i].key, "step"))
            cr_assert_eq(ri.step, good[i].value[0] == '9' ? (int64_t)1 << 53
                                  : good[i].value[0] == '3' ? 3 : 0);
        cr_assert_eq(ri.split_records, !strcmp(good[i].key, "rank_split"));
        sl_resume_info_fini(&ri);
    }
    free(ck);
    tu_rmrf(tmp);
    free(tmp);
}

/* The same through sl_train_run --resume, the way a user meets it: the
 * run stops before its first step with the file and the key named, not
 * with whatever a cast of 1e300 gives. */
Test(train_trainer, resume_refuses_a_damaged_checkpoint)
{
    pl_dataset d;
    pl_make_dataset(&d, 48, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *ck = tu_join(tmp, "ck"), state[1024];
    static const struct {
        const char *key, *value, *want;
    } bad[] = {
        {"step", "1e300", "step: 1e+300 is not an integer in 0..2^53"},
        {"step", "-1", "step: -1 is not an integer in 0..2^53"},
        {"batch", "1e20", "batch: 1e+20 is not an integer in 1..4294967295"},
        {"world", "1e10", "world: 1e+10 is not an integer in 1..2147483647"},
        {"step", "9007199254740992", "step: 9007199254740992 steps of batch 4096 are more "
                                     "samples than 2^63"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int big = strstr(bad[i].want, "batch 4096") != NULL;
        state_with(state, sizeof state, bad[i].key, bad[i].value);
        if (big) /* the state's batch must match the run's */
            snprintf(state, sizeof state, "{\"step\":%s,\"batch\":4096,\"pipeline\":\"{}\"}",
                     bad[i].value);
        write_sidecar(ck, state);
        sl_train_config t;
        sl_train_result r;
        small_config(&t, &d, NULL, ck);
        t.resume = 1;
        if (big)
            t.data.batch = 4096;
        int rc = sl_train_run(&t, &r);
        fclose(t.progress);
        cr_assert_eq(rc, SL_ECORRUPT, "%s = %s: rc %d: %s", bad[i].key, bad[i].value, rc,
                     sl_errmsg());
        cr_assert(strstr(sl_errmsg(), "ckpt-000000003.json: ") &&
                  strstr(sl_errmsg(), bad[i].want), "want '%s' in '%s'", bad[i].want,
                  sl_errmsg());
        cr_assert_eq(r.steps, 0);
    }
    free(ck);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

/* setup's failing path after the resume state is held (the ps strategy
 * resumes from epoch ends only; this state is at step 3 of 6): refused,
 * and nothing leaks (ASan's leak check runs over every test). */
Test(train_trainer, ps_resume_mid_epoch_is_refused_without_a_leak)
{
    pl_dataset d;
    pl_make_dataset(&d, 48, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *ck = tu_join(tmp, "ck"), state[1024];
    state_with(state, sizeof state, "", NULL);
    write_sidecar(ck, state);
    sl_train_config t;
    sl_train_result r;
    small_config(&t, &d, NULL, ck);
    t.resume = 1;
    t.strategy = SL_STRATEGY_PS;
    t.replicas = 1;
    int rc = sl_train_run(&t, &r);
    fclose(t.progress);
    cr_assert_eq(rc, SL_EINVAL, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "resumes from epoch ends only (step 3)"), "%s", sl_errmsg());
    cr_assert_eq(leaks_now(), 0, "sl_train_run leaked on this path (LeakSanitizer's report above)");
    free(ck);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

/* --synthetic holds one batch for the whole run; a run that stops with an
 * error (here its first evaluation: a validation record that is not a
 * JPEG, --on-error fail) goes through the one cleanup path that gives it
 * back, and says so like any other. */
Test(train_trainer, synthetic_run_stopped_by_an_error)
{
    uint8_t bad[16] = {0};
    bad[3] = PL_BAD_NOT_JPEG;
    pl_dataset d, v;
    pl_make_dataset(&d, 48, 2, 0, NULL);
    pl_make_dataset(&v, 16, 1, 0, bad);
    cr_assert_eq(tu_run(NULL, "cp %s %s/validation-00000-of-00001.tfrecord && cp %s.idx "
                        "%s/validation-00000-of-00001.tfrecord.idx", v.shard_path[0], d.dir,
                        v.shard_path[0], d.dir), 0);
    char *tmp = tu_tmpdir(), *ck = tu_join(tmp, "ck");
    sl_train_config t;
    sl_train_result r;
    small_config(&t, &d, NULL, ck);
    t.synthetic = 1;
    t.epochs = 1;
    t.ckpt_every = 0;
    t.data.on_error = SL_ON_ERROR_FAIL;
    t.eval_split = SL_EVAL_SPLIT_AUTO; /* validation */
    int rc = sl_train_run(&t, &r);
    fclose(t.progress);
    cr_assert_neq(rc, SL_OK);
    cr_assert(strstr(sl_errmsg(), "evaluating split 'validation'") &&
              strstr(sl_errmsg(), "the last completed step, 6, is saved"), "%s", sl_errmsg());
    free(ck);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
    pl_dataset_free(&v);
}

/* A config whose size is not this library's (a caller built against other
 * headers, or one not started from sl_train_config_init) is refused before
 * anything is opened. */
Test(train_trainer, config_of_another_size_is_refused)
{
    sl_train_config t;
    sl_train_config_init(&t);
    cr_assert_eq(t.size, sizeof t);
    cr_assert_eq(t.data.size, sizeof t.data);
    t.data.data = "/nonexistent/sluice-config-size";
    t.size = sizeof t - 8;
    char want[256];
    snprintf(want, sizeof want, "sl_train_run: config of %zu bytes, this library's is %zu: "
             "rebuild against this sluice's headers", t.size, sizeof t);
    sl_train_result r;
    cr_assert_eq(sl_train_run(&t, &r), SL_EINVAL);
    cr_assert_str_eq(sl_errmsg(), want);
}

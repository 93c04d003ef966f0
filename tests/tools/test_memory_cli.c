/*
 * tests/tools/test_memory_cli.c - --memory-budget on `sluice train` and
 * `sluice eval` (issue 43 item 3; profile's cases are in test_profile.c):
 *
 *   train_fits     the replicas' pipelines share the budget (2 pipelines),
 *                  the start-up line and --json say the parts and what was
 *                  shrunk, and the weights are the bytes of the same run
 *                  without a budget (pread and a shallower ring change no
 *                  batch)
 *   train_refused  a budget below what cannot shrink exits 2 at start-up,
 *                  before any step, naming each part and how to fix it
 *   eval           --json's memory object
 *   train_counts_the_evaluation
 *                  each replica's evaluation pipeline lives beside its
 *                  training pipeline: a split to evaluate is in the fit (the
 *                  line, --json's eval, the total within the budget), a
 *                  budget that holds the training pipelines alone is refused
 *                  with it and taken with --eval-split none, and data with no
 *                  split to evaluate reserves nothing
 *   train_counts_the_evaluated_split
 *                  the evaluation pipeline in the fit is that pipeline's own
 *                  estimate over the split it reads, whose records may be far
 *                  larger than the training split's: a budget that holds the
 *                  training split's sizes twice is refused at start-up, naming
 *                  the split (it used to train an epoch, then fail to create
 *                  the evaluation pipeline), and the budget the refusal names
 *                  trains and evaluates
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "pipeline/pipeline_testdata.h"
#include "testutil.h"

TestSuite(memory_cli, .timeout = 300);

static const char *common = "--image-size 16 --batch 32 --width 4 --classes 10 --max-steps 3 "
                            "--eval-split none --cpus 2 --json";

Test(memory_cli, train_fits)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    int rc = tu_run(&out, "%s train --data %s %s --ckpt-dir %s/a 2>&1", tu_sluice(), d.dir,
                    common, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"memory\": null"), "no budget, no memory object: %s", out);
    free(out);
    rc = tu_run(&out, "%s train --data %s %s --memory-budget 20M --ckpt-dir %s/b 2>&1",
                tu_sluice(), d.dir, common, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "train: memory: ") && strstr(out, "of --memory-budget 20 MiB (2 "
                                                            "pipelines of read window"),
              "%s", out);
    cr_assert(strstr(out, "\"memory\": {\"budget\": 20971520, \"pipelines\": 2, "), "%s", out);
    cr_assert(strstr(out, "\"shrunk\": \"prefetch"), "%s", out);
    free(out);
    rc = tu_run(&out, "cmp %s/a/ckpt-000000003.safetensors %s/b/ckpt-000000003.safetensors 2>&1",
                tmp, tmp);
    cr_assert_eq(rc, 0, "the budget changed the weights: %s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

Test(memory_cli, train_refused)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    int rc = tu_run(&out, "%s train --data %s %s --memory-budget 2M --ckpt-dir %s/a 2>&1",
                    tu_sluice(), d.dir, common, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    const char *want[] = {"sluice train: --memory-budget 2.0 MiB: the input pipeline needs",
                          "(2 pipelines of", "read window", "shuffle buffer", "decode workers",
                          "prefetch ring", "what cannot shrink: the shuffle buffer",
                          "Give a budget of"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]), "'%s' not in:\n%s", want[i], out);
    cr_assert(!strstr(out, "step"), "it trained:\n%s", out);
    free(out);
    rc = tu_run(&out, "test -e %s/a", tmp);
    cr_assert_neq(rc, 0, "the checkpoint directory was made before the refusal");
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

Test(memory_cli, eval)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    int rc = tu_run(&out, "%s train --data %s %s --ckpt-dir %s/a 2>&1", tu_sluice(), d.dir, common,
                    tmp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = tu_run(&out, "%s eval --data %s --split train --checkpoint "
                "%s/a/ckpt-000000003.safetensors --batch 32 --cpus 2 --memory-budget 64M --json",
                tu_sluice(), d.dir, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "eval: memory: ") &&
                  strstr(out, "\"memory\":{\"budget\": 67108864, \"pipelines\": 1, "),
              "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

/* The --json line of a train run's output (stderr mixed in), parsed. */
static cJSON *train_json(const char *out)
{
    const char *l = out;
    while (l && *l != '{')
        l = (l = strchr(l, '\n')) ? l + 1 : NULL;
    cr_assert(l, "no JSON line in:\n%s", out);
    cJSON *j = cJSON_ParseWithOpts(l, NULL, 0);
    cr_assert_not_null(j, "not JSON:\n%s", l);
    return j;
}

static double jnum(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsNumber(v), "field %s missing or not a number", name);
    return v->valuedouble;
}

/* The bytes of a refusal's "needs 12.3 MiB" (pipeline/memory.c's human). */
static double needs(const char *out)
{
    const char *p = strstr(out, "the input pipeline needs ");
    cr_assert(p, "no refusal in:\n%s", out);
    double v;
    char unit[8];
    cr_assert_eq(sscanf(p + strlen("the input pipeline needs "), "%lf %7s", &v, unit), 2, "%s", p);
    double scale = !strcmp(unit, "KiB") ? 1024.0 : !strcmp(unit, "MiB") ? 1048576.0
                   : !strcmp(unit, "GiB") ? 1073741824.0 : 1.0;
    return v * scale;
}

Test(memory_cli, train_counts_the_evaluation)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    const char *base = "--image-size 16 --batch 32 --width 4 --classes 10 --max-steps 3 "
                       "--cpus 2 --json";
    char *tmp = tu_tmpdir(), *out = NULL;
    /* a split to evaluate: beside each of the 2 pipelines, in the total */
    int rc = tu_run(&out, "%s train --data %s %s --eval-split train --memory-budget 48M "
                    "--ckpt-dir %s/a 2>&1", tu_sluice(), d.dir, base, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "; beside each, an evaluation pipeline of "), "%s", out);
    cJSON *j = train_json(out);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory");
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(mem, "parts");
    cr_assert(cJSON_IsObject(parts), "%s", out);
    double sum = 0;
    for (const cJSON *p = parts->child; p; p = p->next)
        sum += p->valuedouble;
    double ev = jnum(mem, "eval");
    cr_assert_gt(ev, 0, "%s", out);
    cr_assert_eq(ev, sum - jnum(parts, "shuffle"), "eval: the parts less the shuffle buffer");
    cr_assert_eq(jnum(mem, "total"), 2 * (sum + ev), "%s", out);
    cr_assert_leq(jnum(mem, "total"), 48 << 20);
    cJSON_Delete(j);
    free(out);
    /* the least each needs, from the refusals at 1 MiB: with the evaluation
     * and without */
    rc = tu_run(&out, "%s train --data %s %s --eval-split train --memory-budget 1M "
                "--ckpt-dir %s/b 2>&1", tu_sluice(), d.dir, base, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "beside each, an evaluation pipeline of ") &&
                  strstr(out, "(--eval-split none leaves it out)"), "%s", out);
    double with = needs(out);
    free(out);
    rc = tu_run(&out, "%s train --data %s %s --eval-split none --memory-budget 1M "
                "--ckpt-dir %s/b 2>&1", tu_sluice(), d.dir, base, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(!strstr(out, "evaluation pipeline"), "%s", out);
    double without = needs(out);
    free(out);
    cr_assert_gt(with, without + (1 << 20), "with %.0f, without %.0f", with, without);
    /* between the two: refused with the evaluation, taken without */
    long long mid = (long long)((with + without) / 2);
    rc = tu_run(&out, "%s train --data %s %s --eval-split train --memory-budget %lld "
                "--ckpt-dir %s/c 2>&1", tu_sluice(), d.dir, base, mid, tmp);
    cr_assert_eq(rc, 2, "%lld bytes: %s", mid, out);
    free(out);
    rc = tu_run(&out, "%s train --data %s %s --eval-split none --memory-budget %lld "
                "--ckpt-dir %s/c 2>&1", tu_sluice(), d.dir, base, mid, tmp);
    cr_assert_eq(rc, 0, "%lld bytes: %s", mid, out);
    free(out);
    /* the default (auto) on data with no test or validation split evaluates
     * nothing, and reserves nothing */
    rc = tu_run(&out, "%s train --data %s %s --memory-budget 20M --ckpt-dir %s/d 2>&1",
                tu_sluice(), d.dir, base, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"eval\": 0,") && !strstr(out, "evaluation pipeline"), "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

/* dir/name: a w x h JPEG of noise at quality 95 (about a byte a pixel: the
 * size of a camera photo's record, not of the test datasets' thumbnails);
 * its size. */
static unsigned long noise_jpeg(const char *dir, const char *name, int w, int h, uint64_t seed)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    cr_assert_not_null(px);
    for (size_t i = 0; i < (size_t)w * h * 3; i++)
        px[i] = (uint8_t)(tu_rand(&seed) >> 56);
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    cr_assert_eq(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, &len, TJSAMP_420, 95, 0), 0,
                 "tjCompress2: %s", tjGetErrorStr2(tj));
    char *p = tu_join(dir, name);
    cr_assert_eq(tu_write_file(p, jpeg, len), 0, "%s", p);
    free(p);
    tjFree(jpeg);
    tjDestroy(tj);
    free(px);
    return len;
}

Test(memory_cli, train_counts_the_evaluated_split)
{
    pl_dataset d;
    pl_make_dataset(&d, 96, 2, 0, NULL);
    const char *base = "--image-size 16 --batch 32 --width 4 --classes 10 --max-steps 3 "
                       "--cpus 2 --json";
    char *tmp = tu_tmpdir(), *out = NULL;
    /* a test split of three 600 KB records beside the train split's 1-20 KB */
    char *src = tu_join(tmp, "big"), *cls = tu_join(src, "a");
    cr_assert_eq(tu_run(NULL, "mkdir -p '%s'", cls), 0);
    unsigned long big = 0;
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "%d.jpg", i);
        unsigned long n = noise_jpeg(cls, name, 720, 720, 40 + (uint64_t)i);
        big = n > big ? n : big;
    }
    cr_assert_gt(big, 400000, "the noise JPEGs are %lu bytes", big);
    int rc = tu_run(&out, "%s convert --from folder '%s' --out '%s' --name test 2>&1",
                    tu_sluice(), src, d.dir);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* the least each needs: evaluating the train split, and the test split */
    rc = tu_run(&out, "%s train --data %s %s --eval-split train --memory-budget 1M "
                "--ckpt-dir %s/a 2>&1", tu_sluice(), d.dir, base, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    double small = needs(out);
    free(out);
    rc = tu_run(&out, "%s train --data %s %s --eval-split test --memory-budget 1M "
                "--ckpt-dir %s/a 2>&1", tu_sluice(), d.dir, base, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "an evaluation pipeline of ") &&
                  strstr(out, " over split 'test', records up to ") &&
                  strstr(out, "(--eval-split none leaves it out)"), "%s", out);
    double large = needs(out);
    free(out);
    /* each of the 2 pipelines' evaluation holds at least one test record
     * being decoded where the stand-in held a train record */
    cr_assert_gt(large, small + 2.0 * ((double)big - 65536), "test split %.0f, train split %.0f, "
                 "largest test record %lu", large, small, big);
    /* between the two: refused before any step */
    long long mid = (long long)((small + large) / 2);
    rc = tu_run(&out, "%s train --data %s %s --eval-split test --memory-budget %lld "
                "--ckpt-dir %s/b 2>&1", tu_sluice(), d.dir, base, mid, tmp);
    cr_assert_eq(rc, 2, "%lld bytes: %s", mid, out);
    cr_assert(!strstr(out, "step"), "it trained before the refusal:\n%s", out);
    free(out);
    /* what the refusal asks for is enough: the run trains, then its
     * evaluation pipeline passes create's own check of the same budget;
     * the default (auto) picks the test split, and the line names it */
    rc = tu_run(&out, "%s train --data %s %s --memory-budget %lld --ckpt-dir %s/c 2>&1",
                tu_sluice(), d.dir, base, (long long)large + (1 << 20), tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "an evaluation pipeline of ") && strstr(out, " over split 'test')"),
              "%s", out);
    cr_assert(strstr(out, "test top1 "), "it did not evaluate the test split: %s", out);
    cJSON *j = train_json(out);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory");
    cr_assert_leq(jnum(mem, "total"), large + (1 << 20), "%s", out);
    cr_assert_gt(jnum(mem, "eval"), 2.0 * ((double)big - 65536), "%s", out);
    cJSON_Delete(j);
    free(out);
    free(src), free(cls);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

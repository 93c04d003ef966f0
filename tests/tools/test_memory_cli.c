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
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

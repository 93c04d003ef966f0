/*
 * tests/train/loop/test_eval_cuda.c - `sluice eval --backend cuda`: a checkpoint
 * trained on the cpu, evaluated on the GPU (the model placed, u8 batches fed
 * to the device and normalized there, logits copied back) against the same
 * checkpoint evaluated on the cpu; the errors of a build without the cuda
 * backend and of bad --backend / --precision values.
 *
 * The GPU tests skip without a GPU (or in a build without the cuda backend:
 * sl_exec_init says so); the CUDA-off error test skips in a build with it;
 * ref against cpu and the flag errors run everywhere.
 * Under tests/cuda-emu they run on the emulated GPU (run.sh globs this file).
 *
 * Tolerances. fp32 with SLUICE_CUDA_TF32=0: cuDNN and OpenBLAS sum in other
 * orders, a few ulp per output; the logits of this 20-layer net then differ
 * by ~1e-6 relative, so the mean loss agrees to 1e-4 relative (the emulator:
 * equal in all 6 printed digits) and no top-1 / top-5 decision flips (the
 * trained model's logit margins are far wider). bf16 keeps 8 significant
 * bits: each stored activation is rounded by up to 2^-9 (2e-3) relative;
 * ~20 stored layers grow that like a random walk to about sqrt(20) * 2e-3 ~
 * 1e-2 relative on the logits (|logit| <~ 3 here: 3e-2); the cross-entropy's
 * gradient in the logits has an L1 norm of at most 2, so one sample's loss
 * moves by up to ~6e-2, and the mean over 100 samples with independent
 * roundings by ~6e-3. Bound: |loss_bf16 - loss_cpu| <= 0.01 + 0.01 *
 * loss_cpu (~0.02 here; the emulator measures 4e-4), top-1 / top-5 within 3
 * of the 100 samples (a decision whose logit margin is under ~3e-2 may flip;
 * the emulator flips 1). fp16 keeps 11 bits (2^-12): the same bound, with 8x
 * room. A feed that skips the normalization, or logits read before the
 * stream has them, miss these by orders of magnitude.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_testdata.h"
#include "train/cuda_testutil.h"
#include "testutil.h"
#include "train/train.h"

#define IMAGES 100
#define SIDE 20

/* A number after "key": in a JSON line; the test fails when absent. */
static double json_num(const char *out, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(out, pat);
    cr_assert(p, "no %s in: %s", pat, out);
    return strtod(p + strlen(pat), NULL);
}

typedef struct evres {
    double images, top1, top5, loss;
    char backend[16], precision[16];
} evres;

static void json_str(const char *out, const char *key, char *dst, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(out, pat);
    cr_assert(p, "no %s in: %s", pat, out);
    p += strlen(pat);
    size_t n = strcspn(p, "\"");
    cr_assert_lt(n, cap, "%s", out);
    memcpy(dst, p, n);
    dst[n] = '\0';
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* TMP/d: IMAGES gray SIDE x SIDE images that a small net learns in a
 * hundred steps (class k: brightness 25 + 22 k, noise of +-12, a diagonal
 * ramp), written as IDX files and converted by the CLI into 2 shards.
 * Learnable matters: a model at chance has near-equal logits, whose top-k
 * order flips on rounding noise. */
static void make_data(const char *tmp)
{
    size_t ni = 16 + (size_t)IMAGES * SIDE * SIDE, nl = 8 + IMAGES;
    uint8_t *img = malloc(ni), *lab = malloc(nl);
    cr_assert(img && lab);
    be32(img, 0x803), be32(img + 4, IMAGES), be32(img + 8, SIDE), be32(img + 12, SIDE);
    be32(lab, 0x801), be32(lab + 4, IMAGES);
    uint64_t st = 11;
    for (int i = 0; i < IMAGES; i++) {
        int k = i % 10;
        lab[8 + i] = (uint8_t)k;
        for (int p = 0; p < SIDE * SIDE; p++) {
            int v = 25 + 22 * k + (int)(tu_rand(&st) % 25) - 12 + (p / SIDE + p % SIDE) / 4 - 5;
            img[16 + (size_t)i * SIDE * SIDE + p] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    char *pi = tu_join(tmp, "images.idx"), *pl = tu_join(tmp, "labels.idx"), *out = NULL;
    cr_assert_eq(tu_write_file(pi, img, ni), 0, "%s", pi);
    cr_assert_eq(tu_write_file(pl, lab, nl), 0, "%s", pl);
    int rc = tu_run(&out, "%s convert --from idx --images %s --labels %s --out %s/d --name "
                    "train --shards 2 2>&1", tu_sluice(), pi, pl, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out), free(pi), free(pl), free(img), free(lab);
}

/* make_data, then a resnet20 (width 8, at the images' own 20 px) trained
 * 100 steps on the cpu (1-2 s; ~75% top-1 on its training images, so the
 * ranks matter): TMP/ck/ckpt-100. Eval at the stored size does not resize:
 * the GPU path's u8 batches then hold exactly the cpu path's pixels (a
 * resize gives the cpu path f32 pixels, the GPU path the same rounded to
 * u8: ~3e-5 relative on this loss, a difference by design). */
static void train_cpu(const char *tmp)
{
    make_data(tmp);
    char *out = NULL;
    int rc = tu_run(&out, "%s train --data %s/d --image-size %d --model resnet20 --width 8 "
                    "--batch 10 --max-steps 100 --shuffle global --seed 3 --eval-split none "
                    "--lr 0.4 --threads 1 --ckpt-dir %s/ck 2>&1", tu_sluice(), tmp, SIDE, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* sluice eval of that checkpoint on the train split with args; --batch 16
 * (not the training batch, and a last batch of 4). */
static void eval(const char *tmp, const char *args, evres *r)
{
    char *out = NULL;
    int rc = tu_run(&out, "SLUICE_CUDA_TF32=0 %s eval --data %s/d --split train --checkpoint "
                    "%s/ck/ckpt-000000100.safetensors --batch 16 --threads 1 --json %s "
                    "2>&1", tu_sluice(), tmp, tmp, args);
    cr_assert_eq(rc, 0, "eval %s: %s", args, out);
    r->images = json_num(out, "images");
    r->top1 = json_num(out, "top1") * r->images;
    r->top5 = json_num(out, "top5") * r->images;
    r->loss = json_num(out, "loss");
    json_str(out, "backend", r->backend, sizeof r->backend);
    json_str(out, "precision", r->precision, sizeof r->precision);
    cr_log_info("eval %s: %.0f images, top1 %.0f, top5 %.0f, loss %.9g", args, r->images,
                r->top1, r->top5, r->loss);
    free(out);
}

/* The cpu result, the test's reference: every image, and a model that
 * learned (well above chance, 10 of 100). */
static void eval_cpu(const char *tmp, evres *r)
{
    eval(tmp, "--backend cpu --precision fp32", r);
    cr_assert_eq(r->images, IMAGES);
    cr_assert_str_eq(r->backend, "cpu");
    cr_assert_str_eq(r->precision, "fp32");
    cr_assert_lt(r->loss, 0.8 * log(10.0), "the model did not learn: loss %f", r->loss);
    cr_assert_geq(r->top1, 40, "the model did not learn: top1 %.0f of 100", r->top1);
}

/* eval with args (backend: what its JSON must say, fp32) gives the cpu's
 * answer: same images, same top-1 / top-5 counts, loss within 1e-4
 * relative. */
static void expect_cpu_answer(const char *args, const char *backend)
{
    char *tmp = tu_tmpdir();
    train_cpu(tmp);
    evres c, g;
    eval_cpu(tmp, &c);
    eval(tmp, args, &g);
    cr_expect_str_eq(g.backend, backend);
    cr_expect_str_eq(g.precision, "fp32");
    cr_expect_eq(g.images, c.images);
    cr_expect_eq(g.top1, c.top1, "top1: %s %.0f, cpu %.0f", backend, g.top1, c.top1);
    cr_expect_eq(g.top5, c.top5, "top5: %s %.0f, cpu %.0f", backend, g.top5, c.top5);
    cr_expect_leq(fabs(g.loss - c.loss), 1e-4 * c.loss, "loss: %s %.6f, cpu %.6f", backend,
                  g.loss, c.loss);
    tu_rmrf(tmp);
    free(tmp);
}

/* fp32 on the GPU gives the cpu's answer. */
Test(train_gpu, eval_cuda_fp32_matches_cpu)
{
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    expect_cpu_answer("--backend cuda --precision fp32", "cuda");
}

/* bf16 (the cuda default: no --precision) and fp16 near the cpu's answer
 * (the header gives the bounds). */
Test(train_gpu, eval_cuda_half_near_cpu)
{
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    char *tmp = tu_tmpdir();
    train_cpu(tmp);
    evres c, g[2];
    eval_cpu(tmp, &c);
    const char *args[2] = {"--backend cuda", "--backend cuda --precision fp16"};
    const char *want[2] = {"bf16", "fp16"};
    for (int k = 0; k < 2; k++) {
        eval(tmp, args[k], &g[k]);
        cr_expect_str_eq(g[k].precision, want[k]);
        cr_expect_eq(g[k].images, c.images, "%s", want[k]);
        cr_expect_leq(fabs(g[k].top1 - c.top1), 3, "%s top1: %.0f, cpu %.0f", want[k],
                      g[k].top1, c.top1);
        cr_expect_leq(fabs(g[k].top5 - c.top5), 3, "%s top5: %.0f, cpu %.0f", want[k],
                      g[k].top5, c.top5);
        cr_expect_leq(fabs(g[k].loss - c.loss), 0.01 + 0.01 * c.loss,
                      "%s loss: %.6f, cpu %.6f", want[k], g[k].loss, c.loss);
        /* and it did run in half precision: the rounding shows (fp32 on the
         * GPU gives the cpu's loss to ~1e-7 relative, half ~1e-5 and more) */
        cr_expect_gt(fabs(g[k].loss - c.loss), 5e-7 * c.loss,
                     "%s loss %.9g is the cpu's %.9g: the activations were not %s", want[k],
                     g[k].loss, c.loss, want[k]);
    }
    tu_rmrf(tmp);
    free(tmp);
}

/* Without a GPU too: the plain-loop oracle (--backend ref) gives the cpu's
 * answer through the same flags and JSON fields. */
Test(train_gpu, eval_ref_matches_cpu) { expect_cpu_answer("--backend ref", "ref"); }

/* A build without the cuda backend: --backend cuda fails at once (before
 * the checkpoint is read) with exit 2 and the message sluice train gives. */
Test(train_gpu, eval_cuda_in_cuda_off_build_fails)
{
#ifdef SLUICE_TRAIN_CUDA
    cr_skip_test("this build has the cuda backend");
#endif
    pl_dataset d;
    pl_make_dataset(&d, 16, 1, 0, NULL);
    char *out = NULL, *tout = NULL;
    int rc = tu_run(&out, "%s eval --data %s --split train --checkpoint /nonexistent/x."
                    "safetensors --backend cuda 2>&1", tu_sluice(), d.dir);
    cr_assert_eq(rc, 2, "%s", out);
    const char *msg = "this build has no CUDA backend (it needs CUDA and cuDNN)";
    cr_expect(strstr(out, "sluice eval: "), "%s", out);
    cr_expect(strstr(out, msg), "%s", out);
    cr_expect(!strstr(out, "/nonexistent"), "%s", out);
    rc = tu_run(&tout, "%s train --data %s --image-size 16 --width 4 --classes 10 --batch 8 "
                "--max-steps 1 --eval-split none --backend cuda 2>&1", tu_sluice(), d.dir);
    cr_assert_eq(rc, 2, "%s", tout);
    cr_expect(strstr(tout, msg), "train says: %s", tout);
    free(out);
    free(tout);
    pl_dataset_free(&d);
}

/* Bad values: exit 2, the flag and the value named, before any work. */
Test(train_gpu, eval_flag_errors)
{
    static const struct { const char *args, *want; } cases[] = {
        {"--backend gpu", "--backend: bad value 'gpu' (want cpu, cuda or ref)"},
        {"--backend ''", "--backend: bad value '' (want cpu, cuda or ref)"},
        {"--precision bf17", "--precision: bad value 'bf17' (want bf16, fp16 or fp32)"},
        {"--backend cuda --precision fp64", "--precision: bad value 'fp64'"},
        /* as sluice train: fp16 is for the GPU, bf16 for the GPU and the cpu backend */
        {"--backend cpu --precision fp16", "fp16 needs --backend cuda"},
        {"--backend ref --precision bf16", "bf16 needs --backend cpu or cuda"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = tu_run(&out, "%s eval --data /nonexistent --checkpoint /nonexistent/x."
                        "safetensors %s 2>&1", tu_sluice(), cases[i].args);
        cr_expect_eq(rc, 2, "%s: exit %d: %s", cases[i].args, rc, out);
        cr_expect(strstr(out, cases[i].want), "%s: %s", cases[i].args, out);
        cr_expect(strstr(out, "sluice eval: "), "%s: %s", cases[i].args, out);
        free(out);
    }
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "%s eval --help", tu_sluice()), 0);
    cr_expect(strstr(out, "--backend B"), "%s", out);
    cr_expect(strstr(out, "--precision P"), "%s", out);
    free(out);
}

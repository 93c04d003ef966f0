/*
 * tests/train/loop/test_train_cuda.c - training on the GPU against the cpu
 * backend: a ResNet-20 step placed on a cuda device (sl_model_place, the
 * device optimizer, the loss summed on the device) against the same step
 * on the host, in fp32 and in bf16 / fp16; 200 steps of bf16 on
 * Fashion-MNIST following the fp32 loss curve; resume on the GPU; the CLI's
 * --synthetic --json; a short fp32 run through the GPU feed logging the
 * cpu backend's losses. Every test skips without a GPU (or in a build
 * without the cuda backend: sl_exec_init says so).
 *
 * Tolerances. fp32 (SLUICE_CUDA_TF32=0): cuDNN and OpenBLAS sum in other
 * orders, a few ulp per output, grown by the depth of backward: relative
 * L2 differences of 1e-4 on gradients. bf16 keeps 8 bits of mantissa
 * (relative rounding 2^-9 = 2e-3 per stored activation), and every layer
 * stores its output: 5e-2 on the gradients of a 20-layer net, or 3 times
 * the gradients' own sensitivity to that rounding where it is larger
 * (compare() measures it on the cpu: ~0.2 for bf16 here, relu masks flip).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cuda_testutil.h" /* tg_round: host rounding to bf16 / f16 */
#include "pipeline/pipeline_testdata.h"
#include "testutil.h"
#include "train/device/dev_int.h"
#include "train/model/model_int.h"

/* A cuda exec with activations act, or skip. fp32 math (no TF32) so that
 * fp32 compares with the cpu backend. */
static void gpu_exec_or_skip(sl_exec *e, sl_dtype act)
{
    setenv("SLUICE_CUDA_TF32", "0", 1);
    int rc = sl_exec_init(e, SL_BACKEND_CUDA, 1);
    if (rc)
        cr_skip_test("no cuda device: %s", sl_errmsg());
    cr_assert_eq(sl_exec_set_act(e, act), SL_OK, "%s", sl_errmsg());
}

/* Relative L2 distance of b from a. */
static double rel_l2(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(d) / (sqrt(s) > 1e-12 ? sqrt(s) : 1e-12);
}

#define N 8
#define HW 16
#define CLASSES 10

typedef struct step_out {
    float loss;
    float *logits;  /* (N, CLASSES) */
    float *grads;   /* the grads arena (arena_floats) */
    float *params;  /* the params arena after one SGD step */
    float *bufs;    /* BN buffers after the step */
} step_out;

static void out_free(step_out *o)
{
    free(o->logits), free(o->grads), free(o->params), free(o->bufs);
}

static sl_model *make_model(void)
{
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = SL_ARCH_RESNET20;
    mc.width = 8;
    mc.classes = CLASSES;
    mc.seed = 3;
    mc.zero_init_residual = 0; /* every block path live in the first step */
    sl_model *m;
    cr_assert_eq(sl_model_create(&mc, N, HW, HW, &m), SL_OK, "%s", sl_errmsg());
    return m;
}

static void inputs(float *x, int32_t *labels)
{
    uint64_t st = 17;
    for (int i = 0; i < N * HW * HW * 3; i++)
        x[i] = (float)((tu_rand(&st) >> 11) * 0x1p-53) * 4.0f - 2.0f;
    for (int i = 0; i < N; i++)
        labels[i] = (int32_t)(tu_rand(&st) % CLASSES);
}

static const sl_sgd_config sgd_cfg = {0.9f, 0, 5e-4f};

/* One step on the cpu backend; round: the input and the initial params
 * rounded to that type first (SL_DTYPE_F32: as they are). */
static void cpu_step(step_out *o, sl_dtype round)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 1), SL_OK);
    sl_model *m = make_model();
    float x[N * HW * HW * 3], dl[N * CLASSES];
    int32_t labels[N];
    inputs(x, labels);
    tg_round_all(x, N * HW * HW * 3, round);
    tg_round_all(m->params, m->arena_floats, round);
    const float *logits;
    int correct;
    cr_assert_eq(sl_model_forward(m, &e, x, N, 1, &logits), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e.ops->xent_fwd_bwd(&e, N, CLASSES, logits, labels, 0.1f, &o->loss, dl,
                                     &correct), SL_OK);
    o->logits = malloc(sizeof dl);
    memcpy(o->logits, logits, sizeof dl);
    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_OK, "%s", sl_errmsg());
    size_t pb = (size_t)m->arena_floats * sizeof(float), bb = (size_t)m->bufs_floats * 4;
    o->grads = malloc(pb);
    memcpy(o->grads, m->grads, pb);
    int nt;
    sl_sgd *sgd;
    /* the table first: an argument list that sets nt and reads it is unsequenced */
    sl_tensor_info *tensors = sl_model_tensors(m, &nt);
    cr_assert_eq(sl_sgd_create(&sgd_cfg, tensors, nt, &sgd), SL_OK, "%s", sl_errmsg());
    (void)nt;
    cr_assert_eq(sl_sgd_step(sgd, 0.1f), SL_OK);
    o->params = malloc(pb);
    memcpy(o->params, m->params, pb);
    o->bufs = malloc(bb);
    memcpy(o->bufs, m->bufs, bb);
    sl_sgd_destroy(sgd);
    sl_model_destroy(m);
    sl_exec_fini(&e);
}

/* The same step with the model placed on the GPU (activations act). */
static void gpu_step(sl_exec *e, step_out *o)
{
    sl_model *m = make_model();
    cr_assert_eq(sl_model_place(m, e), SL_OK, "%s", sl_errmsg());
    cr_assert(sl_model_on_device(m));
    float x[N * HW * HW * 3];
    int32_t labels[N];
    inputs(x, labels);
    /* the input in the activation type: up as f32, cast on the device */
    void *dx32, *dx, *dlab, *ddl, *dacc;
    cr_assert_eq(sl_mem_alloc(e, sizeof x, &dx32), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_mem_alloc(e, sizeof x, &dx), SL_OK);
    cr_assert_eq(sl_mem_alloc(e, sizeof labels, &dlab), SL_OK);
    cr_assert_eq(sl_mem_alloc(e, sizeof(float) * N * CLASSES, &ddl), SL_OK);
    cr_assert_eq(sl_mem_alloc(e, 2 * sizeof(double), &dacc), SL_OK);
    cr_assert_eq(sl_mem_copy_in(e, dx32, x, sizeof x), SL_OK);
    cr_assert_eq(sl_mem_cast(e, N * HW * HW * 3, dx32, dx, e->act), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_mem_copy_in(e, dlab, labels, sizeof labels), SL_OK);

    int nt;
    sl_sgd *sgd;
    sl_dev_sgd *dsgd;
    /* the table first: an argument list that sets nt and reads it is unsequenced */
    sl_tensor_info *tensors = sl_model_tensors(m, &nt);
    cr_assert_eq(sl_sgd_create(&sgd_cfg, tensors, nt, &sgd), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_dev_sgd_create(e, &sgd_cfg, sgd, m, &dsgd), SL_OK, "%s", sl_errmsg());

    const float *logits;
    cr_assert_eq(sl_model_forward(m, e, dx, N, 1, &logits), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_dev_xent_acc(e, N, CLASSES, logits, dlab, 0.1f, sl_dev_sgd_scale(dsgd), ddl,
                                 dacc), SL_OK, "%s", sl_errmsg());
    o->logits = malloc(sizeof(float) * N * CLASSES);
    cr_assert_eq(sl_mem_copy_out(e, o->logits, logits, sizeof(float) * N * CLASSES), SL_OK);
    cr_assert_eq(sl_model_backward(m, e, ddl, NULL), SL_OK, "%s", sl_errmsg());
    size_t pb = (size_t)m->arena_floats * sizeof(float), bb = (size_t)m->bufs_floats * 4;
    o->grads = malloc(pb);
    cr_assert_eq(sl_mem_copy_out(e, o->grads, m->grads, pb), SL_OK);
    const float *scale = sl_dev_sgd_scale(dsgd);
    if (scale) { /* fp16: the grads carry the loss scale */
        float s;
        cr_assert_eq(sl_mem_copy_out(e, &s, scale, sizeof s), SL_OK);
        for (int64_t i = 0; i < m->arena_floats; i++)
            o->grads[i] /= s;
    }
    cr_assert_eq(sl_dev_sgd_step(dsgd, 0.1f), SL_OK, "%s", sl_errmsg());
    double acc[2];
    cr_assert_eq(sl_dev_loss_take(e, dacc, acc), SL_OK);
    o->loss = (float)acc[0];
    /* the state dict's host copies, as a checkpoint reads them */
    cr_assert_eq(sl_model_pull(m), SL_OK, "%s", sl_errmsg());
    o->params = malloc(pb);
    memcpy(o->params, m->h_params, pb);
    o->bufs = malloc(bb);
    memcpy(o->bufs, m->h_bufs, bb);
    cr_assert_eq(sl_dev_sgd_pull(dsgd), SL_OK);
    int64_t step = *(int64_t *)sl_sgd_tensors(sgd, &nt)[nt - 1].data;
    cr_assert_eq(step, 1, "optimizer.step after one device step: %lld", (long long)step);

    sl_dev_sgd_destroy(dsgd);
    sl_sgd_destroy(sgd);
    sl_mem_free(e, dx32), sl_mem_free(e, dx), sl_mem_free(e, dlab), sl_mem_free(e, ddl);
    sl_mem_free(e, dacc);
    sl_model_destroy(m);
}

static void compare(sl_dtype act, double tol_logits, double tol_grads, double tol_update)
{
    sl_exec e;
    gpu_exec_or_skip(&e, act);
    step_out c = {0}, g = {0}, r = {0};
    cpu_step(&c, SL_DTYPE_F32);
    gpu_step(&e, &g);
    sl_model *m = make_model(); /* for the sizes and the initial params */
    int64_t np = m->arena_floats;
    double dl = rel_l2(c.logits, g.logits, N * CLASSES), dg = rel_l2(c.grads, g.grads, np);
    /* The gradients of this net at init are ill-conditioned (relu masks
     * flip: on the cpu, the input times 1 +- 1e-4 moves them by ~2%; the
     * input and weights rounded to bf16 once, by ~20%). In bf16 / f16 the
     * tolerance on gradients and update is therefore at least 3 times what
     * rounding only the input and the initial weights does on the cpu. A
     * wrong gradient is off by ~100%. */
    if (act != SL_DTYPE_F32) {
        cpu_step(&r, act);
        double sens = rel_l2(c.grads, r.grads, np);
        cr_log_info("cpu grads with input and weights rounded to %s: %.2e", tg_type_name(act),
                    sens);
        if (3 * sens > tol_grads)
            tol_grads = 3 * sens;
        out_free(&r);
    }
    /* the update p1 - p0, where the two runs' differences show */
    float *uc = malloc(sizeof(float) * np), *ug = malloc(sizeof(float) * np);
    for (int64_t i = 0; i < np; i++)
        uc[i] = c.params[i] - m->params[i], ug[i] = g.params[i] - m->params[i];
    double du = rel_l2(uc, ug, np), db = rel_l2(c.bufs, g.bufs, m->bufs_floats);
    cr_log_info("cuda %s vs cpu: loss %.6f / %.6f, logits %.2e, grads %.2e, update %.2e, "
                "BN buffers %.2e", act == SL_DTYPE_F32 ? "fp32" : act == SL_DTYPE_BF16 ? "bf16"
                : "fp16", g.loss, c.loss, dl, dg, du, db);
    /* the param tensor whose gradient differs most, for the message */
    int nt, worst = -1;
    double wd = 0;
    sl_tensor_info *ti = sl_model_tensors(m, &nt);
    for (int i = 0; i < nt; i++) {
        if (!(ti[i].flags & SL_TENSOR_PARAM))
            continue;
        int64_t at = (const float *)ti[i].data - m->params;
        double d = rel_l2(c.grads + at, g.grads + at, ti[i].numel);
        if (d > wd)
            wd = d, worst = i;
    }
    cr_log_info("worst gradient: %s, %.2e", worst >= 0 ? ti[worst].name : "-", wd);
    cr_expect_float_eq(g.loss, c.loss, tol_logits * 10 * fabsf(c.loss) + 1e-6f, "loss");
    cr_expect_lt(dl, tol_logits, "logits: %.3e", dl);
    cr_expect_lt(dg, tol_grads, "grads: %.3e (worst tensor %s: %.3e)", dg,
                 worst >= 0 ? ti[worst].name : "-", wd);
    cr_expect_lt(du, tol_grads, "update: %.3e", du);
    cr_expect_lt(db, tol_update, "BN running stats: %.3e", db);
    free(uc), free(ug);
    sl_model_destroy(m);
    out_free(&c), out_free(&g);
    sl_exec_fini(&e);
}

Test(train_gpu, resnet20_step_fp32_matches_cpu) { compare(SL_DTYPE_F32, 1e-5, 1e-4, 1e-5); }

Test(train_gpu, resnet20_step_bf16_near_cpu) { compare(SL_DTYPE_BF16, 2e-2, 5e-2, 2e-2); }

Test(train_gpu, resnet20_step_fp16_near_cpu) { compare(SL_DTYPE_F16, 5e-3, 2e-2, 5e-3); }

/* A placed model refuses a host exec and sync-BN, and a host model a
 * cuda exec: the pointers would be the wrong kind. */
Test(train_gpu, placement_is_checked)
{
    sl_exec e, h;
    gpu_exec_or_skip(&e, SL_DTYPE_F32);
    cr_assert_eq(sl_exec_init(&h, SL_BACKEND_CPU, 1), SL_OK);
    sl_model *m = make_model(), *hm = make_model();
    float x[N * HW * HW * 3] = {0};
    const float *logits;
    cr_assert_eq(sl_model_forward(hm, &e, x, N, 0, &logits), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "host memory"), "%s", sl_errmsg());
    cr_assert_eq(sl_model_place(m, &e), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_place(m, &e), SL_EINVAL);
    cr_assert_eq(sl_model_forward(m, &h, x, N, 0, &logits), SL_EINVAL);
    sl_bn_sync s = {NULL, NULL, 2}; /* sync-BN on a device: allowed (train_nccl) */
    s.allreduce_sum = (int (*)(void *, float *, int))1; /* never called */
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_set_bn_sync(m, NULL), SL_OK);
    sl_model_destroy(m);
    sl_model_destroy(hm);
    sl_exec_fini(&h);
    sl_exec_fini(&e);
}

/* --------------------------------------------------------- the CLI runs */

/* Fashion-MNIST's test images (t10k): Debian's package, or a copy named by
 * SLUICE_FMNIST_T10K_DIR (the GPU machine has no package registry). */
static const char *t10k_dir(void)
{
    const char *d = getenv("SLUICE_FMNIST_T10K_DIR");
    if (d && *d)
        return d;
    return tu_fmnist_dir();
}

/* a and b logged the same steps, at least min lines, the last at last. */
static void same_steps(const tg_losses *a, const tg_losses *b, int min, long last)
{
    cr_assert_geq(a->n, min, "%d loss lines", a->n);
    cr_assert_eq(a->n, b->n, "%d and %d loss lines", a->n, b->n);
    for (int i = 0; i < a->n; i++)
        cr_assert_eq(a->step[i], b->step[i], "line %d: step %ld and %ld", i, a->step[i],
                     b->step[i]);
    cr_assert_eq(a->step[a->n - 1], last, "last line at step %ld", a->step[a->n - 1]);
}

/* 200 steps of ResNet-20 on Fashion-MNIST in bf16 follow the fp32 run's
 * loss curve (same seed, same batches): every logged window within 0.1 +
 * 10%, and both learn (the last window under 60% of the first). */
Test(train_gpu, bf16_follows_fp32_fashion_mnist)
{
    const char *fm = t10k_dir();
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    if (!fm)
        cr_skip_test("no Fashion-MNIST t10k files (dataset-fashion-mnist or "
                     "SLUICE_FMNIST_T10K_DIR)");
    char *tmp = tu_tmpdir(), *out = NULL;
    int rc = tu_run(&out, "%s convert --from idx --images %s/t10k-images-idx3-ubyte.gz "
                    "--labels %s/t10k-labels-idx1-ubyte.gz --out %s/d --name train --shards 4 "
                    "2>&1", tu_sluice(), fm, fm, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    tg_losses l[2];
    const char *prec[2] = {"fp32", "bf16"};
    for (int k = 0; k < 2; k++) {
        out = NULL;
        rc = tu_run(&out, "SLUICE_CUDA_TF32=0 %s train --data %s/d --image-size 28 --model "
                    "resnet20 --width 16 --max-steps 200 --batch 64 --lr 0.4 --warmup-epochs 0.1 "
                    "--min-scale 1 --eval-split none --shuffle global --seed 7 --backend cuda "
                    "--precision %s --log-every 20 --logdir %s/log-%s 2>&1", tu_sluice(), tmp,
                    prec[k], tmp, prec[k]);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        char logdir[4200];
        snprintf(logdir, sizeof logdir, "%s/log-%s", tmp, prec[k]);
        tg_read_losses(logdir, &l[k]);
    }
    /* every 20 steps and at the end of the 157-step epoch */
    same_steps(&l[0], &l[1], 10, 200);
    int last = l[0].n - 1;
    for (int i = 0; i <= last; i++) {
        cr_log_info("step %ld: fp32 %.4f bf16 %.4f", l[0].step[i], l[0].v[i], l[1].v[i]);
        cr_expect_leq(fabs(l[1].v[i] - l[0].v[i]), 0.1 + 0.1 * l[0].v[i], "step %ld",
                      l[0].step[i]);
    }
    cr_expect_lt(l[0].v[last], 0.6 * l[0].v[0], "fp32 does not learn");
    cr_expect_lt(l[1].v[last], 0.6 * l[1].v[0], "bf16 does not learn");
    tu_rmrf(tmp);
    free(tmp);
}

/* Resume on the GPU: 24 steps straight against 12 + resume + 12, the
 * checkpoints' weights equal (deterministic kernels: cuDNN's deterministic
 * algorithms are preferred, our reductions have a fixed order). */
Test(train_gpu, resume_matches_straight_run)
{
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    const char *common = "--image-size 16 --model resnet20 --width 4 --classes 10 --batch 8 "
                         "--shuffle global --seed 3 --eval-split none --backend cuda "
                         "--precision bf16 --lr 0.4";
    int rc = tu_run(&out, "%s train --data %s %s --max-steps 24 --ckpt-dir %s/a 2>&1 && "
                    "%s train --data %s %s --max-steps 24 --ckpt-every 12 --ckpt-dir %s/b 2>&1 "
                    "&& rm %s/b/ckpt-000000024.* && %s train --data %s %s --max-steps 24 "
                    "--ckpt-dir %s/b --resume 2>&1", tu_sluice(), d.dir, common, tmp,
                    tu_sluice(), d.dir, common, tmp, tmp, tu_sluice(), d.dir, common, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/a/ckpt-000000024.safetensors", tmp);
    snprintf(pb, sizeof pb, "%s/b/ckpt-000000024.safetensors", tmp);
    sl_safetensors *a, *b;
    cr_assert_eq(sl_safetensors_open(pa, &a), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_safetensors_open(pb, &b), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_safetensors_count(a), sl_safetensors_count(b));
    double worst = 0;
    for (int i = 0; i < sl_safetensors_count(a); i++) {
        sl_st_tensor ta, tb;
        cr_assert_eq(sl_safetensors_at(a, i, &ta), SL_OK);
        cr_assert_eq(sl_safetensors_find(b, ta.name, &tb), SL_OK, "%s", ta.name);
        if (ta.dtype != SL_T_F32)
            continue;
        int64_t n = 1;
        for (int k = 0; k < ta.ndim; k++)
            n *= ta.shape[k];
        double r = rel_l2(ta.data, tb.data, n);
        worst = r > worst ? r : worst;
    }
    cr_log_info("resume on GPU: worst relative difference %.3e", worst);
    cr_expect_lt(worst, 1e-6);
    sl_safetensors_close(a);
    sl_safetensors_close(b);
    pl_dataset_free(&d);
    tu_rmrf(tmp);
    free(tmp);
}

/* --synthetic --json: one JSON line with a throughput; the loss falls on
 * the one batch. The steady figure agrees with the progress lines' img/s
 * after the warm-up: the host runs ahead of the device, so a rate that left
 * out the waits for it (the sums taken at a log line, the tail) would count
 * only the launches (it once read 1000x the log lines' rate on the
 * emulator, whose streams run only when waited on). */
Test(train_gpu, synthetic_json)
{
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *out = NULL;
    int rc = tu_run(&out, "%s train --data %s --image-size 32 --model resnet18 --classes 10 "
                    "--batch 16 --max-steps 30 --log-every 10 --synthetic --json --eval-split none "
                    "--backend cuda --lr 0.1 2>/dev/null", tu_sluice(), d.dir);
    cr_assert_eq(rc, 0, "%s", out);
    const char *j = strstr(out, "\"images_per_sec_steady\": ");
    cr_assert(j, "%s", out);
    double steady = atof(j + strlen("\"images_per_sec_steady\": "));
    cr_expect_gt(steady, 0.0, "%s", out);
    double lo = 0, hi = 0; /* img/s of the progress lines after step 10 */
    int lines = 0;
    for (const char *p = out; (p = strstr(p, " step ")); p++) {
        long step = 0;
        double ips = 0;
        if (sscanf(p, " step %ld/30 loss %*f acc %*f %lf img/s", &step, &ips) == 2 && step > 10) {
            lo = lines ? fmin(lo, ips) : ips;
            hi = lines ? fmax(hi, ips) : ips;
            lines++;
        }
    }
    cr_assert_geq(lines, 2, "progress lines after step 10: %s", out);
    cr_expect(steady >= lo / 3 && steady <= hi * 3,
              "images_per_sec_steady %.1f against the progress lines' %.1f..%.1f img/s: %s",
              steady, lo, hi, out);
    cr_expect(strstr(out, "\"precision\": \"bf16\""), "%s", out);
    /* the device memory it reports is the plan's: every byte but the cuDNN
     * workspace and the op scratch is known in advance, and those stay
     * under their bounds */
    j = strstr(out, "\"peak_device_mib\": ");
    cr_assert(j, "%s", out);
    double peak = atof(j + strlen("\"peak_device_mib\": ")) * 1048576.0;
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = SL_ARCH_RESNET18, mc.classes = 10;
    sl_dev_plan pl;
    cr_assert_eq(sl_dev_plan_train(&mc, 16, 32, 32, SL_DTYPE_BF16, (size_t)256 << 20, 132, &pl),
                 SL_OK, "%s", sl_errmsg());
    double fixed = (double)(pl.model + pl.optimizer + pl.io);
    cr_log_info("peak %.0f bytes; plan: fixed %.0f, workspace <= %zu, scratch <= %zu", peak,
                fixed, pl.workspace, pl.scratch);
    cr_expect(peak >= fixed - 0.1 * 1048576 && peak <= (double)pl.total + 0.1 * 1048576,
              "peak_device_mib %.1f outside the plan's [%.1f, %.1f] MiB: %s", peak / 1048576,
              fixed / 1048576, pl.total / 1048576.0, out);
    free(out);
    pl_dataset_free(&d);
}

/* The input gradient-free grads of one train step of arch (width w, n
 * images of hw x hw) on exec e, with backward's buffers placed in memory
 * activations also use (tail 0, the default) or all in the arena's tail
 * (tail 1, SLUICE_MODEL_GRAD_TAIL=1): *grads gets the grads arena (*cnt
 * floats) and the logits' sum, so a forward that read a clobbered
 * activation shows too. */
static void lean_step(sl_exec *e, sl_arch arch, int w, int n, int hw, int tail, float **grads,
                      size_t *cnt)
{
    cr_assert_eq(setenv("SLUICE_MODEL_GRAD_TAIL", tail ? "1" : "0", 1), 0);
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = arch, mc.width = w, mc.classes = CLASSES, mc.seed = 5;
    mc.zero_init_residual = 0;
    sl_model *m;
    cr_assert_eq(sl_model_create(&mc, n, hw, hw, &m), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_place(m, e), SL_OK, "%s", sl_errmsg());
    unsetenv("SLUICE_MODEL_GRAD_TAIL");
    int64_t nx = (int64_t)n * hw * hw * 3;
    float *hx = malloc((size_t)nx * sizeof(float)), *x32 = NULL, *dl = NULL;
    int32_t hl[16], *dlab = NULL;
    void *x = NULL;
    uint64_t st = 23;
    cr_assert(hx);
    for (int64_t i = 0; i < nx; i++)
        hx[i] = (float)((tu_rand(&st) >> 11) * 0x1p-53) * 4.0f - 2.0f;
    for (int i = 0; i < n; i++)
        hl[i] = (int32_t)(tu_rand(&st) % CLASSES);
    cr_assert_eq(sl_mem_alloc(e, (size_t)nx * 4, (void **)&x32), SL_OK);
    cr_assert_eq(sl_mem_alloc(e, (size_t)nx * sl_exec_act_size(e), &x), SL_OK);
    cr_assert_eq(sl_mem_alloc(e, (size_t)n * 4, (void **)&dlab), SL_OK);
    cr_assert_eq(sl_mem_alloc(e, (size_t)n * CLASSES * 4, (void **)&dl), SL_OK);
    cr_assert_eq(sl_mem_copy_in(e, x32, hx, (size_t)nx * 4), SL_OK);
    cr_assert_eq(sl_mem_copy_in(e, dlab, hl, (size_t)n * 4), SL_OK);
    cr_assert_eq(sl_mem_cast(e, nx, x32, x, e->act), SL_OK, "%s", sl_errmsg());
    const float *logits;
    float loss;
    cr_assert_eq(sl_model_forward(m, e, x, n, 1, &logits), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(e->ops->xent_fwd_bwd(e, n, CLASSES, logits, dlab, 0.1f, &loss, dl, NULL), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(sl_model_backward(m, e, dl, NULL), SL_OK, "%s", sl_errmsg());
    float *params, *g;
    sl_model_arenas(m, &params, &g, cnt);
    *grads = malloc((*cnt + 1) * sizeof(float));
    cr_assert(*grads);
    cr_assert_eq(sl_mem_copy_out(e, *grads, g, *cnt * sizeof(float)), SL_OK);
    (*grads)[*cnt] = loss;
    sl_mem_free(e, x32), sl_mem_free(e, x), sl_mem_free(e, dlab), sl_mem_free(e, dl);
    sl_model_destroy(m);
    free(hx);
}

/* Backward's gradient buffers in the memory of blocks backward is done
 * with, and the forward's scratch in blocks not yet written (model_int.h),
 * change nothing: the loss and every gradient are the bits of the layout
 * that shares no memory, for the three architectures on the cpu backend
 * and for ResNet-50 in bf16 on cuda (where conv_bwd_data_acc also takes
 * its search scratch from there). */
Test(train_gpu, grad_buffers_in_dead_memory_change_nothing)
{
    static const struct { sl_arch arch; int w, n, hw; } nets[] = {
        {SL_ARCH_RESNET50, 4, 2, 64}, {SL_ARCH_RESNET18, 4, 2, 64}, {SL_ARCH_RESNET20, 4, 3, 16}};
    for (int k = 0; k < 4; k++) {
        int cuda = k == 3;
        sl_exec e;
        if (cuda) {
            if (!tg_has_gpu()) {
                cr_log_info("no cuda device: the cuda half skipped");
                break;
            }
            gpu_exec_or_skip(&e, SL_DTYPE_BF16);
        } else {
            cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 1), SL_OK);
        }
        int a = cuda ? 0 : k, w = cuda ? 8 : nets[a].w;
        float *g0, *g1;
        size_t c0, c1;
        lean_step(&e, nets[a].arch, w, nets[a].n, nets[a].hw, 1, &g0, &c0);
        lean_step(&e, nets[a].arch, w, nets[a].n, nets[a].hw, 0, &g1, &c1);
        cr_assert_eq(c0, c1);
        cr_log_info("%s %s: loss %.6f, %zu grads", sl_arch_name(nets[a].arch),
                    sl_backend_name(e.backend), g0[c0], c0);
        for (size_t i = 0; i <= c0; i++)
            cr_assert(memcmp(&g0[i], &g1[i], sizeof(float)) == 0,
                      "%s: %s %zu: %.9g with shared memory, %.9g with the tail only",
                      sl_arch_name(nets[a].arch), i == c0 ? "loss" : "grad", i, g1[i], g0[i]);
        free(g0), free(g1);
        sl_exec_fini(&e);
    }
}

/* Issue 14's budget, from the plan (no device needed): ResNet-50 at batch
 * 256, 224x224, bf16, trains in no more device memory than PyTorch eager's
 * peak for the same step, 11.0 GiB (torch.cuda.max_memory_allocated on an
 * H100, /work/shared/gpu/2026-11-26), workspace cap and op scratch
 * included. The plan is held to the real allocations by synthetic_json. */
Test(train_gpu, resnet50_batch256_plan_within_pytorch_peak)
{
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = SL_ARCH_RESNET50, mc.classes = 1000;
    sl_dev_plan pl;
    cr_assert_eq(sl_dev_plan_train(&mc, 256, 224, 224, SL_DTYPE_BF16, (size_t)256 << 20, 132,
                                   &pl), SL_OK, "%s", sl_errmsg());
    double gib = 1073741824.0;
    cr_log_info("resnet50 b256 bf16 plan: model %.3f, optimizer %.3f, io %.3f, workspace %.3f, "
                "scratch %.3f; total %.3f GiB", pl.model / gib, pl.optimizer / gib, pl.io / gib,
                pl.workspace / gib, pl.scratch / gib, pl.total / gib);
    cr_expect_leq(pl.total / gib, 11.0, "%.3f GiB planned", pl.total / gib);
    /* what the layout keeps per image: y for every unit, z for all but the
     * downsamples and the pooled stem, in 2 bytes; the two gradient
     * buffers of the stem's 112x112x64 */
    cr_expect_gt(pl.model / gib, 9.0, "the plan lost activations: %.3f GiB", pl.model / gib);
}

/* The GPU feed (pinned ring -> copy stream -> event -> normalize on the
 * compute stream) gives the model the same batches as the host path: a
 * short fp32 run on cuda logs the losses of the same run on cpu. A batch
 * read before its copy landed, or labels of another batch, show here. */
Test(train_gpu, cuda_run_logs_cpu_losses)
{
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    const char *backend[2] = {"cpu", "cuda"};
    tg_losses l[2];
    for (int k = 0; k < 2; k++) {
        int rc = tu_run(&out, "SLUICE_CUDA_TF32=0 %s train --data %s --image-size 16 --model "
                        "resnet20 --width 4 --classes 10 --batch 8 --max-steps 12 --log-every 2 "
                        "--shuffle global --seed 3 --eval-split none --lr 0.1 --backend %s "
                        "--precision fp32 --logdir %s/log-%s 2>&1", tu_sluice(), d.dir,
                        backend[k], tmp, backend[k]);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        out = NULL;
        char logdir[4200];
        snprintf(logdir, sizeof logdir, "%s/log-%s", tmp, backend[k]);
        tg_read_losses(logdir, &l[k]);
    }
    same_steps(&l[0], &l[1], 6, 12);
    for (int i = 0; i < l[0].n; i++) {
        cr_log_info("step %ld: cpu %.6f cuda %.6f", l[0].step[i], l[0].v[i], l[1].v[i]);
        cr_expect_leq(fabs(l[1].v[i] - l[0].v[i]), 1e-4 + 1e-3 * fabs(l[0].v[i]), "step %ld",
                      l[0].step[i]);
    }
    pl_dataset_free(&d);
    tu_rmrf(tmp);
    free(tmp);
}

/* A whole file's bytes (malloc'd), or fail the test. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    cr_assert(b && fread(b, 1, (size_t)n, f) == (size_t)n, "%s", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The steady step as a CUDA graph (captured on the second step and
 * replayed after: SLUICE_CUDA_GRAPH=1, the default) against the step run
 * uncaptured (=0), and against captures the driver refuses
 * (EMU_CAPTURE_FAIL, the emulator's fault injection: after three tries the
 * step runs uncaptured): the same loss at every logged step and
 * byte-identical checkpoints (weights, momentum, BN running statistics and
 * num_batches_tracked, the optimizer's step: the host's share of a
 * replayed step), the JSON line saying which ran. The cosine schedule
 * moves the learning rate every step (a graph reads it from device
 * memory; one that kept the captured value would drift). */
Test(train_gpu, cuda_graph_matches_uncaptured)
{
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir(), *out = NULL;
    static const char *env[3] = {"SLUICE_CUDA_GRAPH=0", "SLUICE_CUDA_GRAPH=1",
                                 "SLUICE_CUDA_GRAPH=1 EMU_CAPTURE_FAIL=1"};
    static const char *want[3] = {"\"cuda_graph\": \"off\"", "\"cuda_graph\": \"on\"",
                                  "\"cuda_graph\": \"fallback\""};
    tg_losses l[3];
    char *ck[3];
    size_t cklen[3];
    for (int k = 0; k < 3; k++) {
        int rc = tu_run(&out, "%s %s train --data %s --image-size 16 --model resnet20 --width 4 "
                        "--classes 10 --batch 8 --max-steps 12 --log-every 2 --shuffle global "
                        "--seed 3 --eval-split none --lr 3.2 --backend cuda --precision bf16 "
                        "--logdir %s/log%d --ckpt-dir %s/ck%d --json 2>&1", env[k], tu_sluice(),
                        d.dir, tmp, k, tmp, k);
        cr_assert_eq(rc, 0, "%s", out);
        cr_assert(strstr(out, want[k]), "%s: want %s: %s", env[k], want[k], out);
        if (k == 1)
            cr_expect(strstr(out, "\"cuda_graph_replays\": 11"), "captured at step 2 of 12: %s",
                      out);
        free(out);
        out = NULL;
        char path[4200];
        snprintf(path, sizeof path, "%s/log%d", tmp, k);
        tg_read_losses(path, &l[k]);
        snprintf(path, sizeof path, "%s/ck%d/ckpt-000000012.safetensors", tmp, k);
        ck[k] = slurp(path, &cklen[k]);
    }
    for (int k = 1; k < 3; k++) {
        same_steps(&l[0], &l[k], 6, 12);
        for (int i = 0; i < l[0].n; i++)
            cr_expect_eq(l[k].v[i], l[0].v[i], "%s: step %ld: loss %.9g, uncaptured %.9g",
                         env[k], l[0].step[i], l[k].v[i], l[0].v[i]);
        cr_expect(cklen[k] == cklen[0] && memcmp(ck[k], ck[0], cklen[0]) == 0,
                  "%s: the checkpoint differs from the uncaptured run's", env[k]);
    }
    for (int k = 0; k < 3; k++)
        free(ck[k]);
    pl_dataset_free(&d);
    tu_rmrf(tmp);
    free(tmp);
}

/* --device picks the GPU that trains (not only the pipeline's copies): an
 * ordinal past the machine's fails at startup naming it, and with two
 * devices --device 1 trains on device 1 (the emulator has two with
 * EMU_DEVICES=2; a real machine needs two GPUs for that half). */
Test(train_gpu, device_flag_picks_the_gpu)
{
    setenv("EMU_DEVICES", "2", 0); /* read by tests/cuda-emu only */
    if (!tg_has_gpu())
        cr_skip_test("no cuda device");
    pl_dataset d;
    pl_make_dataset(&d, 32, 2, 0, NULL);
    char *out = NULL;
    const char *args = "--image-size 32 --model resnet20 --width 8 --classes 10 --batch 8 "
                       "--max-steps 2 --synthetic --eval-split none --backend cuda";
    int rc = tu_run(&out, "%s train --data %s %s --device 1023 2>&1", tu_sluice(), d.dir, args);
    cr_expect_neq(rc, 0, "--device 1023 trained: %s", out);
    cr_expect(strstr(out, "1023"), "the error names the device: %s", out);
    free(out);
    sl_exec e1; /* a device 1? */
    int two = sl_exec_init_on(&e1, SL_BACKEND_CUDA, 1, 1) == SL_OK;
    if (two)
        sl_exec_fini(&e1);
    if (two) {
        rc = tu_run(&out, "%s train --data %s %s --device 1 2>&1", tu_sluice(), d.dir, args);
        cr_expect_eq(rc, 0, "%s", out);
        cr_expect(strstr(out, "cuda bf16 device 1,"), "the run header names device 1: %s", out);
        free(out);
    } else {
        cr_log_info("one GPU: --device 1 not tried");
    }
    pl_dataset_free(&d);
}

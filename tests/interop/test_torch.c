/*
 * tests/interop/test_torch.c - sluice's models and checkpoints against real
 * PyTorch / torchvision (DESIGN.md section 5: a checkpoint loads with
 * load_state_dict(strict=True) and computes the same function).
 *
 * PyTorch's side is tests/interop/torch_check.py under the interpreter in
 * SLUICE_TORCH_PYTHON (tools/dev test sets /usr/bin/python3, Debian's
 * python3-torch and python3-torchvision); without it, or when that Python
 * cannot import torch and torchvision, every test is skipped.
 *   - sluice -> torch: a model trained a few SGD steps (and its BN affine and
 *     running statistics perturbed) is saved with sl_checkpoint_save;
 *     torchvision's resnet18 / resnet50 (and the CIFAR resnet20 built from
 *     torchvision's BasicBlock) load it strictly and their eval logits on
 *     the same input match ours;
 *   - torch -> sluice: a torchvision resnet18 with torch.manual_seed(0) and
 *     random BN statistics saved as safetensors loads with
 *     sl_checkpoint_load(strict = 1) and gives torch's eval logits;
 *   - training: each of two SGD steps (momentum, weight decay on conv and fc
 *     weights) moves every parameter, running statistic, num_batches_tracked
 *     and momentum buffer as torch.optim.SGD does from the same state.
 * Inputs cross as raw little-endian float32 NHWC (torch permutes to NCHW).
 * Logits agree within atol 1e-3 + rtol 1e-3, elementwise.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "train/train.h"
#include "train/ops/ops.h" /* white-box: a stack sl_exec */

#define SCRIPT SLUICE_SOURCE_DIR "/tests/interop/torch_check.py"
/* Bounded by coreutils timeout, not Criterion's .timeout (test_tf_interop.c
 * says why: libcriterion's timer record leaks under ASan). */
#define PY_TIMEOUT "timeout 300 "

static const char *torch_or_skip(void)
{
    const char *py = getenv("SLUICE_TORCH_PYTHON");
    if (!py || !*py)
        cr_skip_test("SLUICE_TORCH_PYTHON not set (tools/dev test sets it to Debian's python3 "
                     "with python3-torch)");
    if (access(py, X_OK) != 0)
        cr_skip_test("SLUICE_TORCH_PYTHON=%s is not executable", py);
    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' -c 'import torch, torchvision'", py);
    if (rc != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", out ? out : "");
        free(out);
        cr_skip_test("SLUICE_TORCH_PYTHON=%s cannot import torch, torchvision: %s", py, msg);
    }
    free(out);
    return py;
}

/* The {"ok": true, ...} line of torch_check.py's output (warnings may precede it). */
static cJSON *summary_of(const char *out)
{
    for (const char *p = out; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 1 && p[0] == '{') {
            cJSON *j = cJSON_ParseWithLength(p, len);
            if (j && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")))
                return j;
            cJSON_Delete(j);
        }
        p = end ? end + 1 : NULL;
    }
    cr_assert_fail("no {\"ok\": true} line in torch_check.py's output:\n%s", out);
    return NULL;
}

static double json_num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    cr_assert(cJSON_IsNumber(v), "torch_check.py: field %s missing or not a number", key);
    return v->valuedouble;
}

/* Run torch_check.py with args (printf format); its summary line. */
static cJSON *torch_check(const char *py, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cJSON *torch_check(const char *py, const char *fmt, ...)
{
    char args[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s' %s", py, SCRIPT, args);
    cr_assert_eq(rc, 0, "torch_check.py %s failed (%d):\n%s", args, rc, out);
    cJSON *j = summary_of(out);
    free(out);
    return j;
}

/* Uniform in [lo, hi) from the test's PRNG. */
static float urand(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(tu_rand(s) >> 11) * 0x1.0p-53);
}

/* x: (n, h, w, 3) NHWC, roughly an ImageNet-normalized image: U(-2, 2). */
static float *random_input(int n, int h, int w, uint64_t seed)
{
    size_t cnt = (size_t)n * (size_t)h * (size_t)w * 3;
    float *x = malloc(cnt * sizeof *x);
    cr_assert_not_null(x);
    for (size_t i = 0; i < cnt; i++)
        x[i] = urand(&seed, -2.0f, 2.0f);
    return x;
}

static void write_floats(const char *path, const void *p, size_t bytes)
{
    cr_assert_eq(tu_write_file(path, p, bytes), 0, "writing %s", path);
}

/* A model for (n <= max_batch, h, w, 3) inputs; zero_init_residual off so
 * every residual branch counts in the logits from the first step. */
static sl_model *new_model_w(sl_arch arch, int width, int classes, int max_batch, int h, int w,
                             uint64_t seed, float bn_momentum)
{
    sl_model_config cfg = SL_MODEL_CONFIG_INIT;
    cfg.arch = arch;
    cfg.width = width;
    cfg.classes = classes;
    cfg.zero_init_residual = 0;
    cfg.bn_momentum = bn_momentum;
    cfg.seed = seed;
    sl_model *m = NULL;
    cr_assert_eq(sl_model_create(&cfg, max_batch, h, w, &m), SL_OK, "sl_model_create %s: %s",
                 sl_arch_name(arch), sl_errmsg());
    return m;
}

static sl_model *new_model(sl_arch arch, int classes, int max_batch, int h, int w, uint64_t seed,
                           float bn_momentum)
{
    return new_model_w(arch, 0, classes, max_batch, h, w, seed, bn_momentum);
}

static sl_sgd *new_sgd(sl_model *m, float momentum, float wd)
{
    int nt = 0;
    sl_tensor_info *t = sl_model_tensors(m, &nt);
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    sc.momentum = momentum;
    sc.weight_decay = wd;
    sl_sgd *o = NULL;
    cr_assert_eq(sl_sgd_create(&sc, t, nt, &o), SL_OK, "sl_sgd_create: %s", sl_errmsg());
    return o;
}

/* One train-mode SGD step on (x, labels): forward, softmax cross-entropy,
 * backward, sgd step; the loss. */
static float train_step(sl_model *m, sl_exec *e, sl_sgd *o, const float *x,
                        const int32_t *labels, int n, float lr)
{
    int classes = sl_model_config_of(m)->classes;
    float *dl = malloc((size_t)n * (size_t)classes * sizeof *dl);
    cr_assert_not_null(dl);
    const float *logits = NULL;
    float loss = 0;
    cr_assert_eq(sl_model_forward(m, e, x, n, 1, &logits), SL_OK, "forward: %s", sl_errmsg());
    cr_assert_eq(e->ops->xent_fwd_bwd(e, n, classes, logits, labels, 0.0f, &loss, dl, NULL),
                 SL_OK, "xent: %s", sl_errmsg());
    cr_assert(isfinite(loss), "loss %g", (double)loss);
    cr_assert_eq(sl_model_backward(m, e, dl, NULL), SL_OK, "backward: %s", sl_errmsg());
    cr_assert_eq(sl_sgd_step(o, lr), SL_OK, "sgd: %s", sl_errmsg());
    free(dl);
    return loss;
}

/* Every BN gets its own affine (gamma 1 / beta 0 would hide a swapped or
 * dropped pair) and its running statistics a nudge. Each block's last BN
 * gamma is scaled by 0.2 as well: residual branches then add to the
 * identity rather than doubling the variance block after block, which keeps
 * resnet50's eval activations and float32 gradients well-conditioned (a
 * mild form of zero_init_residual that still trains every branch). */
static void perturb_bn(sl_model *m, uint64_t seed)
{
    int nt = 0;
    sl_tensor_info *t = sl_model_tensors(m, &nt);
    const char *last = sl_model_config_of(m)->arch == SL_ARCH_RESNET50 ? ".bn3.weight"
                                                                      : ".bn2.weight";
    int touched = 0;
    for (int i = 0; i < nt; i++) {
        const char *nm = t[i].name;
        size_t len = strlen(nm);
        float *d = t[i].data;
        if (t[i].dtype != SL_T_F32 || t[i].ndim != 1 || strncmp(nm, "fc.", 3) == 0)
            continue;
        int is_last = len > 11 && strcmp(nm + len - 11, last) == 0 && strncmp(nm, "layer", 5) == 0;
        for (int64_t k = 0; k < t[i].numel; k++) {
            if (len > 7 && strcmp(nm + len - 7, ".weight") == 0)
                d[k] *= urand(&seed, 0.7f, 1.3f) * (is_last ? 0.2f : 1.0f);
            else if (len > 5 && strcmp(nm + len - 5, ".bias") == 0)
                d[k] += urand(&seed, -0.2f, 0.2f);
            else if (strstr(nm, "running_mean"))
                d[k] += urand(&seed, -0.05f, 0.05f);
            else if (strstr(nm, "running_var"))
                d[k] *= urand(&seed, 0.9f, 1.1f);
        }
        touched++;
    }
    cr_assert_gt(touched, 4, "no BN tensors found to perturb");
}

/* ours vs torch's logits, elementwise atol 1e-3 + rtol 1e-3; and the logits
 * must depend on the input (two images differ), so the check is not met by
 * the fc bias alone. */
static void expect_logits_close(const char *what, const float *ours, const char *torch_path,
                                int n, int classes)
{
    size_t len = 0;
    float *ref = (float *)tu_read_file(torch_path, &len);
    cr_assert_not_null(ref, "%s: reading %s", what, torch_path);
    cr_assert_eq(len, (size_t)n * (size_t)classes * sizeof(float), "%s: %s has %zu bytes", what,
                 torch_path, len);
    double maxd = 0, maxabs = 0, spread = 0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)classes; i++) {
        double d = fabs((double)ours[i] - (double)ref[i]);
        if (!(d <= 1e-3 + 1e-3 * fabs((double)ref[i])))
            bad++;
        if (!(d <= maxd))
            maxd = d, worst = i;
        maxabs = fmax(maxabs, fabs((double)ref[i]));
    }
    for (int k = 0; n > 1 && k < classes; k++)
        spread = fmax(spread, fabs((double)ref[k] - (double)ref[classes + k]));
    cr_log_info("%s: max |ours - torch| = %.3g over %d x %d logits (max |logit| %.3g)", what, maxd,
                n, classes, maxabs);
    cr_expect_eq(bad, 0, "%s: %zu of %d logits beyond atol 1e-3 + rtol 1e-3; max abs diff %.3g "
                 "at [%zu][%zu]: ours %.6g torch %.6g", what, bad, n * classes, maxd,
                 worst / (size_t)classes, worst % (size_t)classes, (double)ours[worst],
                 (double)ref[worst]);
    if (n > 1)
        cr_expect_gt(spread, 1e-2, "%s: both images give the same logits (spread %.3g): the "
                     "comparison would not see the convolutions", what, spread);
    free(ref);
}

/* sluice -> torch: perturb, train, save; torchvision loads strictly and agrees. */
static void ours_to_torch(sl_arch arch, int classes, int n, int h, int w, uint64_t seed)
{
    const char *py = torch_or_skip();
    char *dir = tu_tmpdir();
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 0), SL_OK);
    /* bn_momentum 0.9: running statistics close to the real ones, so eval
     * activations stay normalized through 50 layers and no branch fades */
    sl_model *m = new_model(arch, classes, n, h, w, seed, 0.9f);
    float *xt = random_input(n, h, w, seed + 1);
    int32_t labels[8];
    uint64_t ls = seed + 2;
    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)(tu_rand(&ls) % (uint64_t)classes);
    perturb_bn(m, seed + 3);
    sl_sgd *o = new_sgd(m, 0.9f, 1e-4f);
    for (int s = 0; s < 2; s++)
        train_step(m, &e, o, xt, labels, n, 0.02f);

    /* one more train forward, on the eval input: the running statistics
     * (momentum 0.9) then fit the weights the steps left, not the ones
     * before them */
    float *x = random_input(n, h, w, seed + 4);
    const float *logits = NULL;
    cr_assert_eq(sl_model_forward(m, &e, x, n, 1, &logits), SL_OK, "forward: %s", sl_errmsg());
    cr_assert_eq(sl_model_forward(m, &e, x, n, 0, &logits), SL_OK, "eval: %s", sl_errmsg());
    char *prefix = tu_join(dir, "ckpt"), *xin = tu_join(dir, "x.f32"),
         *yout = tu_join(dir, "y.f32");
    cr_assert_eq(sl_checkpoint_save(prefix, m, o, h, "{}"), SL_OK, "save: %s", sl_errmsg());
    write_floats(xin, x, (size_t)n * (size_t)h * (size_t)w * 3 * sizeof(float));

    cJSON *j = torch_check(py, "logits --arch %s --classes %d --state '%s.safetensors' "
                           "--input '%s' --shape %d,%d,%d --out '%s'", sl_arch_name(arch),
                           classes, prefix, xin, n, h, w, yout);
    int nt = 0;
    sl_model_tensors(m, &nt);
    cr_expect_eq((int)json_num(j, "tensors"), nt, "torch loaded %d tensors, ours has %d",
                 (int)json_num(j, "tensors"), nt);
    cr_expect_gt(json_num(j, "optimizer_entries"), 0, "the optimizer's entries are missing");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "metadata");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(meta, "sluice.arch");
    cr_expect(cJSON_IsString(a) && strcmp(a->valuestring, sl_arch_name(arch)) == 0,
              "metadata sluice.arch missing or wrong");
    expect_logits_close(sl_arch_name(arch), logits, yout, n, classes);

    cJSON_Delete(j);
    free(prefix), free(xin), free(yout), free(x), free(xt);
    sl_sgd_destroy(o);
    sl_model_destroy(m);
    sl_exec_fini(&e);
    tu_rmrf(dir);
    free(dir);
}

Test(interop_torch, resnet18_checkpoint_loads_in_torchvision)
{
    ours_to_torch(SL_ARCH_RESNET18, 1000, 2, 64, 64, 11);
}

/* 48x48 keeps layer4 at 2x2 (a 1x1 map would use only the 3x3 kernels'
 * centre taps) and the run short under ASan. */
Test(interop_torch, resnet50_checkpoint_loads_in_torchvision)
{
    ours_to_torch(SL_ARCH_RESNET50, 1000, 2, 48, 48, 12);
}

/* resnet20 has no torchvision class: torch_check.py builds it from
 * torchvision's BasicBlock with the same names. */
Test(interop_torch, resnet20_checkpoint_loads_in_torch)
{
    ours_to_torch(SL_ARCH_RESNET20, 10, 2, 32, 32, 13);
}

/* torch -> sluice: torchvision's resnet18 (manual_seed 0, random BN
 * statistics, I64 num_batches_tracked) at an odd, non-square size. */
Test(interop_torch, torchvision_resnet18_loads_in_sluice)
{
    const char *py = torch_or_skip();
    const int n = 2, h = 71, w = 57, classes = 1000;
    char *dir = tu_tmpdir();
    char *st = tu_join(dir, "torch.safetensors"), *xin = tu_join(dir, "x.f32"),
         *yout = tu_join(dir, "y.f32");
    float *x = random_input(n, h, w, 21);
    write_floats(xin, x, (size_t)n * h * w * 3 * sizeof(float));
    cJSON *j = torch_check(py, "make --arch resnet18 --classes %d --seed 0 --state '%s' "
                           "--input '%s' --shape %d,%d,%d --out '%s'", classes, st, xin, n, h, w,
                           yout);

    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 0), SL_OK);
    sl_model *m = new_model(SL_ARCH_RESNET18, classes, n, h, w, 99, 0.1f);
    cr_assert_eq(sl_checkpoint_load(st, m, NULL, 1), SL_OK, "sl_checkpoint_load: %s",
                 sl_errmsg());
    const sl_tensor_info *nbt = sl_model_tensor(m, "bn1.num_batches_tracked");
    cr_assert_not_null(nbt);
    cr_expect_eq(nbt->dtype, SL_T_I64);
    cr_expect_eq(*(const int64_t *)nbt->data, (int64_t)json_num(j, "nbt_first"),
                 "num_batches_tracked %lld, torch saved %lld",
                 (long long)*(const int64_t *)nbt->data, (long long)json_num(j, "nbt_first"));
    const float *logits = NULL;
    cr_assert_eq(sl_model_forward(m, &e, x, n, 0, &logits), SL_OK, "eval: %s", sl_errmsg());
    expect_logits_close("torchvision resnet18 in sluice", logits, yout, n, classes);

    /* strict: the same file less one running_var is refused; not strict, it loads */
    sl_safetensors *f = NULL;
    cr_assert_eq(sl_safetensors_open(st, &f), SL_OK, "%s", sl_errmsg());
    int cnt = sl_safetensors_count(f), kept = 0;
    sl_st_tensor *tv = calloc((size_t)cnt, sizeof *tv);
    cr_assert_not_null(tv);
    for (int i = 0; i < cnt; i++) {
        cr_assert_eq(sl_safetensors_at(f, i, &tv[kept]), SL_OK);
        if (strcmp(tv[kept].name, "layer3.1.bn2.running_var") != 0)
            kept++;
    }
    cr_assert_eq(kept, cnt - 1, "torch's file has no layer3.1.bn2.running_var");
    char *less = tu_join(dir, "less.safetensors");
    cr_assert_eq(sl_safetensors_write(less, tv, kept, NULL, 0), SL_OK, "%s", sl_errmsg());
    sl_safetensors_close(f);
    cr_expect_neq(sl_checkpoint_load(less, m, NULL, 1), SL_OK,
                  "strict load of a file without layer3.1.bn2.running_var succeeded");
    cr_expect(strstr(sl_errmsg(), "layer3.1.bn2.running_var") != NULL,
              "the error does not name the missing tensor: %s", sl_errmsg());
    cr_expect_eq(sl_checkpoint_load(less, m, NULL, 0), SL_OK, "non-strict load: %s", sl_errmsg());
    free(tv), free(less);

    cJSON_Delete(j);
    sl_model_destroy(m);
    sl_exec_fini(&e);
    free(x), free(st), free(xin), free(yout);
    tu_rmrf(dir);
    free(dir);
}

/* Two SGD steps on one batch here; torch takes each of them from our state
 * before it (torch_check.py step): the updates, running statistics,
 * num_batches_tracked and momentum buffers agree, measured against torch in
 * float64. Weight decay is large enough (1e-2) that decaying the wrong
 * tensors shows; the second step checks the momentum. A 1% change in lr, wd
 * 0 instead of 1e-2, momentum 0.8 or BN momentum 0.2 on torch's side each
 * fail it by 5x to 250x (tried once by hand).
 *
 * ReLU ties: a ReLU input within float32 noise of 0 in float64 goes either
 * way in any float32 forward, and the gradient keeps or drops that whole
 * element. On an AMD EPYC with OpenBLAS's Haswell kernels (the machine sets
 * OPENBLAS_CORETYPE=Haswell) resnet20's second step met one: layer2.2's
 * output at (0, 28, 8, 11) was 2.9e-9 in float64, +1.6e-7 in torch's
 * float32, <= 0 in ours, which put layer2.2.bn2.bias 4.2e-3 of its largest
 * update off float64 (2x the allowance; its gradient is a sum over the
 * batch that cancels). Float64 with that one mask bit flipped agreed with
 * ours to 2e-6 (torch's float32 error there: 7e-6), so the arithmetic was
 * not weaker; the tie is inherent to float32. torch_check.py therefore
 * takes each float64 tie (|input| <= 2x torch float32's largest deviation
 * in that activation, at most 16 per step) the way that matches ours
 * better, and the log lists them; the allowance itself is unchanged. */
/* width: resnet20's base width (0: its default, 16) */
static void train_step_matches_torch(sl_arch arch, int width, int classes, int n, int h, int w,
                                     uint64_t seed)
{
    const char *py = torch_or_skip();
    const int steps = 2;
    const float lr = 0.05f, mom = 0.9f, wd = 1e-2f, bnm = 0.1f;
    char *dir = tu_tmpdir();
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 0), SL_OK);
    sl_model *m = new_model_w(arch, width, classes, n, h, w, seed, bnm);
    perturb_bn(m, seed + 1);
    char *before = tu_join(dir, "before"), *xin = tu_join(dir, "x.f32"),
         *lab = tu_join(dir, "labels.i32");
    cr_assert_eq(sl_checkpoint_save(before, m, NULL, h, "{}"), SL_OK, "save: %s", sl_errmsg());

    float *x = random_input(n, h, w, seed + 2);
    int32_t labels[16];
    uint64_t ls = seed + 3;
    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)(tu_rand(&ls) % (uint64_t)classes);
    write_floats(xin, x, (size_t)n * h * w * 3 * sizeof(float));
    write_floats(lab, labels, (size_t)n * sizeof labels[0]);
    /* the state after each step, with the momentum buffers: torch takes
     * each step from ours (torch_check.py step says why) */
    float losses[4];
    cr_assert_leq(steps, 4);
    char *list = calloc(1, 4 * (strlen(dir) + 32));
    cr_assert_not_null(list);
    sl_sgd *o = new_sgd(m, mom, wd);
    for (int s = 0; s < steps; s++) {
        losses[s] = train_step(m, &e, o, x, labels, n, lr);
        char name[16];
        snprintf(name, sizeof name, "after%d", s + 1);
        char *after = tu_join(dir, name);
        cr_assert_eq(sl_checkpoint_save(after, m, o, h, "{}"), SL_OK, "save: %s", sl_errmsg());
        sprintf(list + strlen(list), "%s%s.safetensors", s ? "," : "", after);
        free(after);
    }

    cJSON *j = torch_check(py, "step --arch %s --width %d --classes %d --state '%s.safetensors' "
                           "--after '%s' --input '%s' --labels '%s' --shape %d,%d,%d "
                           "--lr %g --momentum %g --wd %g --bn-momentum %g",
                           sl_arch_name(arch), width ? width : 16, classes, before, list, xin,
                           lab, n, h, w, (double)lr, (double)mom, (double)wd, (double)bnm);
    const cJSON *l32 = cJSON_GetObjectItemCaseSensitive(j, "losses"),
                *l64 = cJSON_GetObjectItemCaseSensitive(j, "losses64");
    cr_assert_eq(cJSON_GetArraySize(l32), steps);
    cr_assert_eq(cJSON_GetArraySize(l64), steps);
    for (int s = 0; s < steps; s++) {
        double t = cJSON_GetArrayItem(l64, s)->valuedouble,
               t32 = cJSON_GetArrayItem(l32, s)->valuedouble;
        cr_expect(fabs(t - losses[s]) <= 1e-4 + 1e-4 * fabs(t) + 4 * fabs(t32 - t),
                  "step %d: loss %.7g, torch %.7g (float64), %.7g (float32)", s,
                  (double)losses[s], t, t32);
    }
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "missing")), 0,
                 "torch tensors missing from ours (or shaped differently)");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "nbt_ok")),
              "num_batches_tracked differs from torch's");
    static const char *const kinds[] = {"param", "buffer", "momentum"};
    for (int k = 0; k < 3; k++) {
        char key[64];
        snprintf(key, sizeof key, "worst_%s", kinds[k]);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, key);
        cr_assert(cJSON_IsString(nm), "no %s in the summary", key);
        snprintf(key, sizeof key, "worst_%s_err", kinds[k]);
        double eo = json_num(j, key);
        snprintf(key, sizeof key, "worst_%s_torch32_err", kinds[k]);
        double et = json_num(j, key);
        snprintf(key, sizeof key, "worst_%s_ratio", kinds[k]);
        double ratio = json_num(j, key);
        cr_log_info("%s train steps: worst %s %s: ours %.3g, torch float32 %.3g off float64 "
                    "(of its largest %s), %.2f of the allowance", sl_arch_name(arch),
                    kinds[k], nm->valuestring, eo, et, k ? "value" : "update", ratio);
        /* ours within 2e-3 + 4 x torch's own float32 error; a wrong gradient
         * or statistic is off by O(1) */
        cr_expect_lt(ratio, 1.0, "%s: %s %s off float64 by %.3g of its largest %s; torch's "
                     "float32 by %.3g", sl_arch_name(arch), kinds[k], nm->valuestring, eo,
                     k ? "value" : "update", et);
    }
    char *flips = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "ties_flipped"));
    cr_log_info("%s train steps: %d ReLU input(s) within float32 noise of 0, taken the other way "
                "in the float64 reference: %s", sl_arch_name(arch),
                (int)json_num(j, "relu_ties"), flips ? flips : "?");
    free(flips);
    char *top = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "top"));
    cr_log_info("%s train steps: loss %.5f -> %.5f; largest [tensor, share of allowance, ours, "
                "torch float32]: %s", sl_arch_name(arch), (double)losses[0],
                (double)losses[steps - 1], top ? top : "?");
    free(top);

    cJSON_Delete(j);
    sl_sgd_destroy(o);
    sl_model_destroy(m);
    sl_exec_fini(&e);
    free(x), free(before), free(xin), free(lab), free(list);
    tu_rmrf(dir);
    free(dir);
}

Test(interop_torch, resnet20_sgd_steps_match_torch)
{
    train_step_matches_torch(SL_ARCH_RESNET20, 0, 10, 4, 32, 32, 31);
}

/* the demo's width: 8, 16 and 32 channels, the batch-norm passes' constant
 * counts and wide rows (train/ops/norm_kern_cpu.h), checked by PyTorch's
 * own step; 28 px as the demo */
Test(interop_torch, resnet20_width8_sgd_steps_match_torch)
{
    train_step_matches_torch(SL_ARCH_RESNET20, 8, 10, 4, 28, 28, 34);
}

/* the 7x7 stem, max pool and BasicBlocks; 40x40 leaves layer4 2x2 x 3 images */
Test(interop_torch, resnet18_sgd_steps_match_torch)
{
    train_step_matches_torch(SL_ARCH_RESNET18, 0, 1000, 3, 40, 40, 32);
}

Test(interop_torch, resnet50_sgd_steps_match_torch)
{
    train_step_matches_torch(SL_ARCH_RESNET50, 0, 1000, 2, 40, 40, 33);
}

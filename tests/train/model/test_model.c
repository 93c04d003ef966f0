/*
 * tests/train/model/test_model.c - the ResNet models (train/model/resnet.c, train/model/model.c):
 * torchvision's state dicts (names, order, shapes, counts), initialization,
 * gradients by finite differences, ref vs cpu, eval vs train mode, and a
 * few SGD steps that must lower the loss.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "testutil.h"
#include "train/train.h"
#include "train/ops/ops.h" /* white-box: stack sl_exec and its op table */
#include "train/model/model_int.h" /* sl_model_plan_bytes */

/* torchvision.models.resnet18 / resnet50 modules in state-dict order:
 * convs {name, out, in, kernel}, batch norms {name, channels, 0, 0}; fc
 * (classes, 512 * expansion) follows. Their parameters add up to torchvision's
 * published counts, 11,689,512 and 25,557,032 (asserted below). */
typedef struct tv_mod {
    const char *name;
    int out, in, k;
} tv_mod;

static const tv_mod r18_mods[] = {
    {"conv1", 64, 3, 7}, {"bn1", 64, 0, 0}, {"layer1.0.conv1", 64, 64, 3},
    {"layer1.0.bn1", 64, 0, 0}, {"layer1.0.conv2", 64, 64, 3}, {"layer1.0.bn2", 64, 0, 0},
    {"layer1.1.conv1", 64, 64, 3}, {"layer1.1.bn1", 64, 0, 0}, {"layer1.1.conv2", 64, 64, 3},
    {"layer1.1.bn2", 64, 0, 0}, {"layer2.0.conv1", 128, 64, 3}, {"layer2.0.bn1", 128, 0, 0},
    {"layer2.0.conv2", 128, 128, 3}, {"layer2.0.bn2", 128, 0, 0},
    {"layer2.0.downsample.0", 128, 64, 1}, {"layer2.0.downsample.1", 128, 0, 0},
    {"layer2.1.conv1", 128, 128, 3}, {"layer2.1.bn1", 128, 0, 0}, {"layer2.1.conv2", 128, 128, 3},
    {"layer2.1.bn2", 128, 0, 0}, {"layer3.0.conv1", 256, 128, 3}, {"layer3.0.bn1", 256, 0, 0},
    {"layer3.0.conv2", 256, 256, 3}, {"layer3.0.bn2", 256, 0, 0},
    {"layer3.0.downsample.0", 256, 128, 1}, {"layer3.0.downsample.1", 256, 0, 0},
    {"layer3.1.conv1", 256, 256, 3}, {"layer3.1.bn1", 256, 0, 0}, {"layer3.1.conv2", 256, 256, 3},
    {"layer3.1.bn2", 256, 0, 0}, {"layer4.0.conv1", 512, 256, 3}, {"layer4.0.bn1", 512, 0, 0},
    {"layer4.0.conv2", 512, 512, 3}, {"layer4.0.bn2", 512, 0, 0},
    {"layer4.0.downsample.0", 512, 256, 1}, {"layer4.0.downsample.1", 512, 0, 0},
    {"layer4.1.conv1", 512, 512, 3}, {"layer4.1.bn1", 512, 0, 0}, {"layer4.1.conv2", 512, 512, 3},
    {"layer4.1.bn2", 512, 0, 0},
};
static const tv_mod r50_mods[] = {
    {"conv1", 64, 3, 7}, {"bn1", 64, 0, 0}, {"layer1.0.conv1", 64, 64, 1},
    {"layer1.0.bn1", 64, 0, 0}, {"layer1.0.conv2", 64, 64, 3}, {"layer1.0.bn2", 64, 0, 0},
    {"layer1.0.conv3", 256, 64, 1}, {"layer1.0.bn3", 256, 0, 0},
    {"layer1.0.downsample.0", 256, 64, 1}, {"layer1.0.downsample.1", 256, 0, 0},
    {"layer1.1.conv1", 64, 256, 1}, {"layer1.1.bn1", 64, 0, 0}, {"layer1.1.conv2", 64, 64, 3},
    {"layer1.1.bn2", 64, 0, 0}, {"layer1.1.conv3", 256, 64, 1}, {"layer1.1.bn3", 256, 0, 0},
    {"layer1.2.conv1", 64, 256, 1}, {"layer1.2.bn1", 64, 0, 0}, {"layer1.2.conv2", 64, 64, 3},
    {"layer1.2.bn2", 64, 0, 0}, {"layer1.2.conv3", 256, 64, 1}, {"layer1.2.bn3", 256, 0, 0},
    {"layer2.0.conv1", 128, 256, 1}, {"layer2.0.bn1", 128, 0, 0}, {"layer2.0.conv2", 128, 128, 3},
    {"layer2.0.bn2", 128, 0, 0}, {"layer2.0.conv3", 512, 128, 1}, {"layer2.0.bn3", 512, 0, 0},
    {"layer2.0.downsample.0", 512, 256, 1}, {"layer2.0.downsample.1", 512, 0, 0},
    {"layer2.1.conv1", 128, 512, 1}, {"layer2.1.bn1", 128, 0, 0}, {"layer2.1.conv2", 128, 128, 3},
    {"layer2.1.bn2", 128, 0, 0}, {"layer2.1.conv3", 512, 128, 1}, {"layer2.1.bn3", 512, 0, 0},
    {"layer2.2.conv1", 128, 512, 1}, {"layer2.2.bn1", 128, 0, 0}, {"layer2.2.conv2", 128, 128, 3},
    {"layer2.2.bn2", 128, 0, 0}, {"layer2.2.conv3", 512, 128, 1}, {"layer2.2.bn3", 512, 0, 0},
    {"layer2.3.conv1", 128, 512, 1}, {"layer2.3.bn1", 128, 0, 0}, {"layer2.3.conv2", 128, 128, 3},
    {"layer2.3.bn2", 128, 0, 0}, {"layer2.3.conv3", 512, 128, 1}, {"layer2.3.bn3", 512, 0, 0},
    {"layer3.0.conv1", 256, 512, 1}, {"layer3.0.bn1", 256, 0, 0}, {"layer3.0.conv2", 256, 256, 3},
    {"layer3.0.bn2", 256, 0, 0}, {"layer3.0.conv3", 1024, 256, 1}, {"layer3.0.bn3", 1024, 0, 0},
    {"layer3.0.downsample.0", 1024, 512, 1}, {"layer3.0.downsample.1", 1024, 0, 0},
    {"layer3.1.conv1", 256, 1024, 1}, {"layer3.1.bn1", 256, 0, 0}, {"layer3.1.conv2", 256, 256, 3},
    {"layer3.1.bn2", 256, 0, 0}, {"layer3.1.conv3", 1024, 256, 1}, {"layer3.1.bn3", 1024, 0, 0},
    {"layer3.2.conv1", 256, 1024, 1}, {"layer3.2.bn1", 256, 0, 0}, {"layer3.2.conv2", 256, 256, 3},
    {"layer3.2.bn2", 256, 0, 0}, {"layer3.2.conv3", 1024, 256, 1}, {"layer3.2.bn3", 1024, 0, 0},
    {"layer3.3.conv1", 256, 1024, 1}, {"layer3.3.bn1", 256, 0, 0}, {"layer3.3.conv2", 256, 256, 3},
    {"layer3.3.bn2", 256, 0, 0}, {"layer3.3.conv3", 1024, 256, 1}, {"layer3.3.bn3", 1024, 0, 0},
    {"layer3.4.conv1", 256, 1024, 1}, {"layer3.4.bn1", 256, 0, 0}, {"layer3.4.conv2", 256, 256, 3},
    {"layer3.4.bn2", 256, 0, 0}, {"layer3.4.conv3", 1024, 256, 1}, {"layer3.4.bn3", 1024, 0, 0},
    {"layer3.5.conv1", 256, 1024, 1}, {"layer3.5.bn1", 256, 0, 0}, {"layer3.5.conv2", 256, 256, 3},
    {"layer3.5.bn2", 256, 0, 0}, {"layer3.5.conv3", 1024, 256, 1}, {"layer3.5.bn3", 1024, 0, 0},
    {"layer4.0.conv1", 512, 1024, 1}, {"layer4.0.bn1", 512, 0, 0}, {"layer4.0.conv2", 512, 512, 3},
    {"layer4.0.bn2", 512, 0, 0}, {"layer4.0.conv3", 2048, 512, 1}, {"layer4.0.bn3", 2048, 0, 0},
    {"layer4.0.downsample.0", 2048, 1024, 1}, {"layer4.0.downsample.1", 2048, 0, 0},
    {"layer4.1.conv1", 512, 2048, 1}, {"layer4.1.bn1", 512, 0, 0}, {"layer4.1.conv2", 512, 512, 3},
    {"layer4.1.bn2", 512, 0, 0}, {"layer4.1.conv3", 2048, 512, 1}, {"layer4.1.bn3", 2048, 0, 0},
    {"layer4.2.conv1", 512, 2048, 1}, {"layer4.2.bn1", 512, 0, 0}, {"layer4.2.conv2", 512, 512, 3},
    {"layer4.2.bn2", 512, 0, 0}, {"layer4.2.conv3", 2048, 512, 1}, {"layer4.2.bn3", 2048, 0, 0},
};

/* ------------------------------------------------------------- helpers */

static sl_model *mk(sl_arch a, int classes, int width, int zir, uint64_t seed, int nb, int h,
                    int w)
{
    sl_model_config c = SL_MODEL_CONFIG_INIT;
    c.arch = a, c.classes = classes, c.width = width, c.zero_init_residual = zir, c.seed = seed;
    sl_model *m = NULL;
    int rc = sl_model_create(&c, nb, h, w, &m);
    cr_assert_eq(rc, SL_OK, "sl_model_create: %s", sl_errmsg());
    return m;
}

static float *randn(int64_t n, uint64_t seed, float mean, float std)
{
    float *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u1 = ((tu_rand(&s) >> 11) + 1) * 0x1p-53, u2 = (tu_rand(&s) >> 11) * 0x1p-53;
        v[i] = mean + std * (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    }
    return v;
}

static sl_tensor_info *tensor(sl_model *m, const char *name)
{
    sl_tensor_info *t = sl_model_tensor(m, name);
    cr_assert_not_null(t, "no tensor %s", name);
    return t;
}

static void expect_entry(const sl_tensor_info *t, const char *name, const char *leaf,
                         sl_dtype_tag dt, int ndim, const int64_t *shape, unsigned flags)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", name, leaf);
    cr_assert_str_eq(t->name, full);
    cr_assert_eq(t->dtype, dt, "%s dtype", full);
    cr_assert_eq(t->ndim, ndim, "%s ndim", full);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        cr_assert_eq(t->shape[d], shape[d], "%s shape[%d] %lld != %lld", full, d,
                     (long long)t->shape[d], (long long)shape[d]);
        numel *= shape[d];
    }
    cr_assert_eq(t->numel, numel, "%s numel", full);
    cr_assert_eq(t->flags, flags, "%s flags %u != %u", full, t->flags, flags);
    cr_assert_not_null(t->data, "%s data", full);
    cr_assert_eq(t->grad != NULL, (flags & SL_TENSOR_PARAM) != 0, "%s grad", full);
}

/* The model's state dict must be exactly torchvision's: mods, then fc. */
static void check_torchvision(sl_model *m, const tv_mod *mods, int nmods, int classes,
                              int feat, int expect_count, int expect_params,
                              int64_t expect_scalars)
{
    const unsigned W = SL_TENSOR_PARAM | SL_TENSOR_DECAY, P = SL_TENSOR_PARAM,
                   B = SL_TENSOR_BUFFER;
    int count = 0, i = 0, nparams = 0, nbufs = 0;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    cr_assert_eq(count, expect_count, "entries %d != %d", count, expect_count);
    for (int k = 0; k < nmods; k++) {
        const tv_mod *md = &mods[k];
        int64_t s4[4] = {md->out, md->in, md->k, md->k}, s1[1] = {md->out};
        if (md->k) {
            expect_entry(&t[i++], md->name, "weight", SL_T_F32, 4, s4, W | SL_TENSOR_OHWI);
            continue;
        }
        expect_entry(&t[i++], md->name, "weight", SL_T_F32, 1, s1, P);
        expect_entry(&t[i++], md->name, "bias", SL_T_F32, 1, s1, P);
        expect_entry(&t[i++], md->name, "running_mean", SL_T_F32, 1, s1, B);
        expect_entry(&t[i++], md->name, "running_var", SL_T_F32, 1, s1, B);
        expect_entry(&t[i++], md->name, "num_batches_tracked", SL_T_I64, 0, s1, B);
    }
    int64_t fw[2] = {classes, feat};
    expect_entry(&t[i++], "fc", "weight", SL_T_F32, 2, fw, W);
    expect_entry(&t[i++], "fc", "bias", SL_T_F32, 1, fw, P);
    cr_assert_eq(i, count);
    for (i = 0; i < count; i++) {
        nparams += (t[i].flags & SL_TENSOR_PARAM) != 0;
        nbufs += (t[i].flags & SL_TENSOR_BUFFER) != 0;
        cr_assert_eq(sl_model_tensor(m, t[i].name), &t[i], "lookup %s", t[i].name);
    }
    cr_assert_eq(nparams, expect_params);
    cr_assert_eq(nbufs, count - expect_params);
    cr_assert_eq(sl_model_param_count(m), expect_scalars, "params %lld != %lld",
                 (long long)sl_model_param_count(m), (long long)expect_scalars);
    cr_assert_null(sl_model_tensor(m, "layer9.0.conv1.weight"));
}

#define NMODS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------ structure */

Test(train_model, arch_names)
{
    const char *names[] = {"resnet20", "resnet18", "resnet50"};
    for (int i = 0; i < 3; i++) {
        sl_arch a = SL_ARCH_RESNET50;
        cr_assert_str_eq(sl_arch_name((sl_arch)i), names[i]);
        cr_assert_eq(sl_arch_parse(names[i], &a), SL_OK);
        cr_assert_eq((int)a, i);
    }
    sl_arch a = SL_ARCH_RESNET18;
    cr_assert_eq(sl_arch_parse("resnet34", &a), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "resnet34"));
    cr_assert_eq(sl_arch_parse(NULL, &a), SL_EINVAL);
    cr_assert_eq((int)a, SL_ARCH_RESNET18, "untouched on failure");
}

Test(train_model, resnet18_state_dict_is_torchvisions)
{
    sl_model *m = mk(SL_ARCH_RESNET18, 1000, 0, 1, 1, 1, 32, 32);
    /* 20 convs + 20 BNs x 5 + fc x 2 = 122 entries; 62 parameters */
    check_torchvision(m, r18_mods, NMODS(r18_mods), 1000, 512, 122, 62, 11689512);
    cr_assert_eq(sl_model_config_of(m)->width, 64, "width 0 resolves to 64");
    sl_model_destroy(m);
}

Test(train_model, resnet50_state_dict_is_torchvisions_and_fits)
{
    sl_model *m = mk(SL_ARCH_RESNET50, 1000, 0, 1, 1, 32, 224, 224);
    /* 53 convs + 53 BNs x 5 + fc x 2 = 320 entries: 161 parameter tensors
     * (53 + 2*53 + 2) and 159 buffers (53 x 3) */
    check_torchvision(m, r50_mods, NMODS(r50_mods), 1000, 2048, 320, 161, 25557032);
    size_t bytes = sl_model_bytes(m);
    cr_log_info("resnet50 batch 32 at 224x224: sl_model_bytes %.3f GiB", bytes / 1073741824.0);
    /* weights and grads alone are 2 x 102 MB; activations dominate: the
     * kept conv and BN outputs come to about 2 x 11M floats per image */
    cr_assert_gt(bytes, (size_t)2 * 25557032 * 4);
    cr_assert_lt(bytes, (size_t)4 << 30, "%zu bytes", bytes);
    int h = 0, w = 0;
    cr_assert_eq(sl_model_input_size(m, &h, &w), SL_OK);
    cr_assert_eq(h, 224);
    cr_assert_eq(w, 224);
    sl_model_destroy(m);
}

Test(train_model, resnet20_shape_and_count)
{
    sl_model *m = mk(SL_ARCH_RESNET20, 10, 0, 1, 1, 128, 28, 28);
    /* width 16, option-B shortcuts, 10 classes:
     *   conv1 3*16*9 = 432, bn1 2*16 = 32
     *   layer1: 3 x (2 x 16*16*9 + 2 x 32)                     = 14,016
     *   layer2: 16*32*9 + 32*32*9 + 2*64 + ds 16*32 + 64 = 14,528
     *           + 2 x (2 x 32*32*9 + 2 x 64)                   = 51,648
     *   layer3: 32*64*9 + 64*64*9 + 2*128 + ds 32*64 + 128 = 57,728
     *           + 2 x (2 x 64*64*9 + 2 x 128)                  = 205,696
     *   fc 64*10 + 10 = 650
     *   total 432 + 32 + 14,016 + 51,648 + 205,696 + 650      = 272,474 */
    cr_assert_eq(sl_model_param_count(m), 272474);
    cr_assert_eq(sl_model_config_of(m)->width, 16);
    int count = 0;
    sl_model_tensors(m, &count);
    cr_assert_eq(count, 21 * 6 + 2, "1 + 9*2 + 2 downsample conv+BN units");
    cr_assert_eq(tensor(m, "conv1.weight")->shape[2], 3, "3x3 stem");
    cr_assert_null(sl_model_tensor(m, "layer1.0.downsample.0.weight"));
    cr_assert_null(sl_model_tensor(m, "layer4.0.conv1.weight"));
    sl_tensor_info *d2 = tensor(m, "layer2.0.downsample.0.weight"),
                   *d3 = tensor(m, "layer3.0.downsample.0.weight");
    cr_assert(d2->shape[0] == 32 && d2->shape[1] == 16 && d2->shape[2] == 1);
    cr_assert(d3->shape[0] == 64 && d3->shape[1] == 32 && d3->shape[3] == 1);
    cr_assert_eq(tensor(m, "fc.weight")->shape[1], 64);
    cr_log_info("resnet20 batch 128 at 28x28: sl_model_bytes %.1f MiB",
                sl_model_bytes(m) / 1048576.0);
    cr_assert_lt(sl_model_bytes(m), (size_t)400 << 20);
    sl_model_destroy(m);

    m = mk(SL_ARCH_RESNET20, 7, 4, 1, 1, 2, 8, 8); /* width scales every stage */
    cr_assert_eq(tensor(m, "conv1.weight")->shape[0], 4);
    cr_assert_eq(tensor(m, "layer3.2.conv2.weight")->shape[0], 16);
    cr_assert_eq(tensor(m, "fc.weight")->shape[0], 7);
    cr_assert_eq(tensor(m, "fc.weight")->shape[1], 16);
    sl_model_destroy(m);
}

static void moments(const sl_tensor_info *t, double *mean, double *std, double *amax)
{
    const float *v = t->data;
    double s = 0, s2 = 0, mx = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        s += v[i], s2 += (double)v[i] * v[i];
        mx = fabs(v[i]) > mx ? fabs(v[i]) : mx;
    }
    *mean = s / t->numel;
    *std = sqrt(s2 / t->numel - *mean * *mean);
    *amax = mx;
}

Test(train_model, init_like_torchvision)
{
    sl_model *m = mk(SL_ARCH_RESNET18, 100, 0, 1, 42, 1, 32, 32);
    double mean, std, amax;
    /* kaiming_normal_(fan_out, relu): std = sqrt(2 / (k*r*s)) */
    sl_tensor_info *w = tensor(m, "layer3.0.conv2.weight"); /* 589,824 values */
    moments(w, &mean, &std, &amax);
    cr_assert_lt(fabs(std / sqrt(2.0 / (256 * 9)) - 1), 0.01, "std %g", std);
    cr_assert_lt(fabs(mean), 4 * std / sqrt((double)w->numel));
    moments(tensor(m, "conv1.weight"), &mean, &std, &amax);
    cr_assert_lt(fabs(std / sqrt(2.0 / (64 * 49)) - 1), 0.05, "std %g", std);
    moments(tensor(m, "layer2.0.downsample.0.weight"), &mean, &std, &amax);
    cr_assert_lt(fabs(std / sqrt(2.0 / 128) - 1), 0.05, "std %g", std);
    /* fc: U(-1/sqrt(512), 1/sqrt(512)), variance bound^2 / 3 */
    double bound = 1 / sqrt(512.0);
    moments(tensor(m, "fc.weight"), &mean, &std, &amax);
    cr_assert_leq(amax, bound);
    cr_assert_gt(amax, 0.99 * bound);
    cr_assert_lt(fabs(std / (bound / sqrt(3.0)) - 1), 0.02);
    moments(tensor(m, "fc.bias"), &mean, &std, &amax);
    cr_assert(amax <= bound && amax > 0);
    /* BN: gamma 1 (0 for each block's last BN), beta 0, stats 0 / 1 */
    int count;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    for (int i = 0; i < count; i++) {
        const char *nm = t[i].name;
        if (!strstr(nm, "bn") && !strstr(nm, "downsample.1"))
            continue;
        float want = 0;
        if (strstr(nm, ".weight"))
            want = strstr(nm, "bn2") ? 0.0f : 1.0f;
        else if (strstr(nm, "running_var"))
            want = 1.0f;
        if (t[i].dtype == SL_T_I64) {
            cr_assert_eq(*(int64_t *)t[i].data, 0, "%s", nm);
            continue;
        }
        for (int64_t j = 0; j < t[i].numel; j++)
            cr_assert_eq(((float *)t[i].data)[j], want, "%s[%lld]", nm, (long long)j);
    }
    sl_model_destroy(m);
    /* deterministic from the seed */
    m = mk(SL_ARCH_RESNET20, 10, 0, 1, 42, 1, 8, 8);
    t = sl_model_tensors(m, &count);
    sl_model *same = mk(SL_ARCH_RESNET20, 10, 0, 1, 42, 1, 8, 8),
             *other = mk(SL_ARCH_RESNET20, 10, 0, 0, 43, 1, 8, 8);
    sl_tensor_info *ts = sl_model_tensors(same, &count), *to = sl_model_tensors(other, &count);
    for (int i = 0; i < count; i++)
        cr_assert_eq(memcmp(t[i].data, ts[i].data, (size_t)t[i].numel * 4), 0, "%s", t[i].name);
    cr_assert_neq(memcmp(t[0].data, to[0].data, (size_t)t[0].numel * 4), 0);
    cr_assert_eq(((float *)tensor(other, "layer1.0.bn2.weight")->data)[0], 1.0f,
                 "zero_init_residual = 0 keeps gamma 1");
    sl_model_destroy(m);
    sl_model_destroy(same);
    sl_model_destroy(other);
}

/* ------------------------------------------------------------ gradients */

/* Mean softmax cross-entropy of the train-mode logits, in double; dlogits
 * (may be NULL) = (softmax - onehot) / n. */
static double xent_loss(sl_model *m, sl_exec *e, const float *x, int n, const int32_t *lab,
                        float *dlogits)
{
    const float *lg = NULL;
    cr_assert_eq(sl_model_forward(m, e, x, n, 1, &lg), SL_OK, "%s", sl_errmsg());
    int k = sl_model_config_of(m)->classes;
    double L = 0;
    for (int i = 0; i < n; i++) {
        double mx = lg[i * k], s = 0;
        for (int j = 1; j < k; j++)
            mx = lg[i * k + j] > mx ? lg[i * k + j] : mx;
        for (int j = 0; j < k; j++)
            s += exp(lg[i * k + j] - mx);
        double lse = mx + log(s);
        L += lse - lg[i * k + lab[i]];
        for (int j = 0; dlogits && j < k; j++)
            dlogits[i * k + j] = (float)((exp(lg[i * k + j] - lse) - (j == lab[i])) / n);
    }
    return L / n;
}

/* Does g match the loss's slope in v[i]? ReLU kinks are dense in a network
 * this narrow (a weight moved by 1e-4 can already flip an activation, and
 * the one-sided slopes then differ by a few percent), so g passes when it
 * matches one of the central, left or right differences at eps 1e-3 or
 * 3e-4; a wrong gradient matches none. v is restored. */
static int fd_match(sl_model *m, sl_exec *e, float *v, int64_t i, double g, const float *x,
                    int n, const int32_t *lab, double *best)
{
    const float epss[2] = {1e-3f, 3e-4f};
    float keep = v[i];
    double l0 = xent_loss(m, e, x, n, lab, NULL);
    *best = NAN;
    for (int k = 0; k < 2; k++) {
        float eps = epss[k];
        v[i] = keep + eps;
        double lp = xent_loss(m, e, x, n, lab, NULL);
        v[i] = keep - eps;
        double lm = xent_loss(m, e, x, n, lab, NULL);
        v[i] = keep;
        double est[3] = {(lp - lm) / (2.0 * eps), (l0 - lm) / eps, (lp - l0) / eps};
        for (int j = 0; j < 3; j++) {
            if (isnan(*best) || fabs(est[j] - g) < fabs(*best - g))
                *best = est[j];
            if (fabs(est[j] - g) <= 5e-4 + 1e-2 * fabs(est[j]))
                return 1;
        }
    }
    return 0;
}

Test(train_model, gradcheck_tiny_resnet20)
{
    enum { N = 3, H = 8, W = 8, K = 5 };
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK);
    /* zero_init_residual off: with gamma 0 the main paths get no gradient */
    sl_model *m = mk(SL_ARCH_RESNET20, K, 3, 0, 5, N, H, W);
    float *x = randn(N * H * W * 3, 11, 0.5f, 1.0f), dl[N * K], dx[N * H * W * 3];
    int32_t lab[N] = {3, 0, 4};
    /* move gammas and betas off their init so their gradients are generic */
    int count;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    uint64_t s = 99;
    for (int i = 0; i < count; i++)
        if (strstr(t[i].name, "bn") && (strstr(t[i].name, "weight") || strstr(t[i].name, "bias")))
            for (int64_t j = 0; j < t[i].numel; j++)
                ((float *)t[i].data)[j] += 0.5f * ((tu_rand(&s) >> 40) * 0x1p-24f - 0.5f);
    xent_loss(m, &e, x, N, lab, dl);
    cr_assert_eq(sl_model_backward(m, &e, dl, dx), SL_OK, "%s", sl_errmsg());

    const char *names[] = {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight",
                           "layer1.1.bn2.weight", "layer1.2.conv2.weight",
                           "layer2.0.conv1.weight", "layer2.0.downsample.0.weight",
                           "layer2.0.downsample.1.bias", "layer2.1.conv2.weight",
                           "layer3.0.bn1.bias", "layer3.0.conv2.weight",
                           "layer3.2.conv1.weight", "layer3.2.bn2.weight", "fc.weight",
                           "fc.bias"};
    int checked = 0;
    for (size_t ti = 0; ti < sizeof names / sizeof names[0]; ti++) {
        sl_tensor_info *p = tensor(m, names[ti]);
        float *an = malloc((size_t)p->numel * sizeof *an);
        memcpy(an, p->grad, (size_t)p->numel * sizeof *an); /* the FD forwards keep grads, */
        double gmax = 0;                                      /* but be independent of it */
        for (int64_t j = 0; j < p->numel; j++)
            gmax = fabs(an[j]) > gmax ? fabs(an[j]) : gmax;
        cr_assert_gt(gmax, 1e-4, "%s: no gradient", names[ti]);
        for (int r = 0; r < 4; r++) {
            int64_t j = (int64_t)(tu_rand(&s) % (uint64_t)p->numel);
            double num;
            cr_assert(fd_match(m, &e, p->data, j, an[j], x, N, lab, &num),
                      "%s[%lld]: backward %g, finite difference %g", names[ti], (long long)j,
                      an[j], num);
            checked++;
        }
        free(an);
    }
    for (int r = 0; r < 8; r++) { /* the input gradient */
        int64_t j = (int64_t)(tu_rand(&s) % (N * H * W * 3));
        double num;
        cr_assert(fd_match(m, &e, x, j, dx[j], x, N, lab, &num), "dx[%lld]: %g vs %g",
                  (long long)j, dx[j], num);
    }
    cr_assert_eq(checked, 60);
    free(x);
    sl_model_destroy(m);
    sl_exec_fini(&e);
}

/* ---------------------------------------------------------- ref vs cpu */

static void expect_close(const char *what, const float *a, const float *ref, int64_t n,
                         double rtol)
{
    double mx = 0, err = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    for (int64_t i = 0; i < n; i++)
        if (fabs(a[i] - ref[i]) > err)
            err = fabs(a[i] - ref[i]), at = i;
    cr_assert_gt(mx, 0, "%s: all zero", what);
    cr_assert_leq(err, rtol * mx, "%s[%lld]: cpu %g, ref %g (max |ref| %g)", what,
                  (long long)at, a[at], ref[at], mx);
}

/* Same weights and input on both backends: logits, every param's grad, the
 * running statistics and dx agree to 1e-3 of each tensor's largest value. */
static void ref_vs_cpu(sl_arch arch, int width, int classes, int n, int h, int w)
{
    sl_exec er, ec;
    cr_assert_eq(sl_exec_init(&er, SL_BACKEND_REF, 1), SL_OK);
    cr_assert_eq(sl_exec_init(&ec, SL_BACKEND_CPU, 2), SL_OK);
    sl_model *mr = mk(arch, classes, width, 0, 3, n, h, w),
             *mc = mk(arch, classes, width, 0, 3, n, h, w);
    int64_t xn = (int64_t)n * h * w * 3;
    float *x = randn(xn, 21, 0.2f, 1.0f), *dl = randn(n * classes, 22, 0.0f, 0.3f);
    float *dxr = malloc(xn * sizeof *dxr), *dxc = malloc(xn * sizeof *dxc);
    float *lr_copy = malloc(n * classes * sizeof *lr_copy);
    const float *lr = NULL, *lc = NULL;
    cr_assert_eq(sl_model_forward(mr, &er, x, n, 1, &lr), SL_OK, "%s", sl_errmsg());
    memcpy(lr_copy, lr, n * classes * sizeof *lr_copy);
    cr_assert_eq(sl_model_forward(mc, &ec, x, n, 1, &lc), SL_OK, "%s", sl_errmsg());
    expect_close("logits", lc, lr_copy, n * classes, 1e-3);
    cr_assert_eq(sl_model_backward(mr, &er, dl, dxr), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_backward(mc, &ec, dl, dxc), SL_OK, "%s", sl_errmsg());
    expect_close("dx", dxc, dxr, xn, 1e-3);
    int count;
    sl_tensor_info *tr = sl_model_tensors(mr, &count), *tc = sl_model_tensors(mc, &count);
    for (int i = 0; i < count; i++) {
        if (tr[i].dtype == SL_T_I64) {
            cr_assert_eq(*(int64_t *)tc[i].data, 1, "%s", tc[i].name);
            continue;
        }
        if (tr[i].grad)
            expect_close(tr[i].name, tc[i].grad, tr[i].grad, tr[i].numel, 1e-3);
        else
            expect_close(tr[i].name, tc[i].data, tr[i].data, tr[i].numel, 1e-3);
    }
    free(x), free(dl), free(dxr), free(dxc), free(lr_copy);
    sl_model_destroy(mr);
    sl_model_destroy(mc);
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

Test(train_model, ref_vs_cpu_resnet20)
{
    ref_vs_cpu(SL_ARCH_RESNET20, 5, 7, 3, 13, 11); /* 13x11 -> 7x6 -> 4x3 */
}

/* 36x36, not 32x32: at 32 layer4 is 1x1 and with n = 2 each BN there sees two
 * values per channel, whose normalized gradient is exactly zero (so every
 * earlier main-path gradient would be rounding noise). 36 -> 18 -> 9 -> 9, 5,
 * 3, 2 keeps every stage above that and the sizes odd. */
Test(train_model, ref_vs_cpu_resnet18)
{
    ref_vs_cpu(SL_ARCH_RESNET18, 0, 10, 2, 36, 36);
}

/* ------------------------------------------------------ eval vs train */

Test(train_model, eval_uses_running_stats)
{
    enum { N = 3, H = 9, W = 9, K = 6 };
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK);
    sl_model *m = mk(SL_ARCH_RESNET20, K, 4, 0, 8, N, H, W);
    float *x = randn(N * H * W * 3, 5, 2.0f, 3.0f), train_lg[N * K], eval_lg[N * K], dl[N * K];
    const float *lg;
    sl_tensor_info *rm = tensor(m, "bn1.running_mean"), *rv = tensor(m, "bn1.running_var");
    int64_t *nbt = tensor(m, "layer3.2.bn2.num_batches_tracked")->data;

    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_EINVAL, "no forward yet");
    cr_assert_eq(sl_model_forward(m, &e, x, N, 1, &lg), SL_OK, "%s", sl_errmsg());
    memcpy(train_lg, lg, sizeof train_lg);
    cr_assert_eq(*nbt, 1);
    cr_assert_eq(*(int64_t *)tensor(m, "bn1.num_batches_tracked")->data, 1);
    float rm1[4], rv1[4];
    memcpy(rm1, rm->data, sizeof rm1);
    memcpy(rv1, rv->data, sizeof rv1);
    int moved = 0;
    for (int c = 0; c < 4; c++)
        moved += rm1[c] != 0.0f && rv1[c] != 1.0f;
    cr_assert_eq(moved, 4, "running stats updated by the train forward");

    cr_assert_eq(sl_model_forward(m, &e, x, N, 0, &lg), SL_OK, "%s", sl_errmsg());
    memcpy(eval_lg, lg, sizeof eval_lg);
    double diff = 0;
    for (int i = 0; i < N * K; i++)
        diff = fmax(diff, fabs(eval_lg[i] - train_lg[i]));
    cr_assert_gt(diff, 1e-2, "eval logits equal the train ones");
    cr_assert_eq(*nbt, 1, "eval counts no batch");
    cr_assert_eq(memcmp(rm1, rm->data, sizeof rm1), 0, "eval leaves running_mean");
    cr_assert_eq(memcmp(rv1, rv->data, sizeof rv1), 0, "eval leaves running_var");
    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_EINVAL, "backward after eval");

    /* eval is per image: image 0 alone gives the row it got in the batch;
     * in train mode its row depends on the rest of the batch */
    cr_assert_eq(sl_model_forward(m, &e, x, 1, 0, &lg), SL_OK);
    for (int j = 0; j < K; j++)
        cr_assert_leq(fabs(lg[j] - eval_lg[j]), 1e-5 * (1 + fabs(eval_lg[j])));
    cr_assert_eq(sl_model_forward(m, &e, x, 2, 1, &lg), SL_OK);
    double d2 = 0;
    for (int j = 0; j < K; j++)
        d2 = fmax(d2, fabs(lg[j] - train_lg[j]));
    cr_assert_gt(d2, 1e-3, "train mode uses batch statistics");
    cr_assert_eq(*nbt, 2);
    free(x);
    sl_model_destroy(m);
    sl_exec_fini(&e);
}

/* --------------------------------------------------------- it learns */

Test(train_model, sgd_lowers_the_loss_cpu)
{
    enum { N = 64, H = 10, W = 10, K = 4, STEPS = 30, B = 32 };
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 2), SL_OK);
    sl_model *m = mk(SL_ARCH_RESNET20, K, 4, 1, 17, N, H, W);
    /* class c: per-channel means +-1 (a fixed pattern per class) + N(0, 1) */
    float *x = randn(N * H * W * 3, 77, 0.0f, 1.0f), dl[N * K];
    int32_t lab[N];
    const float mean[K][3] = {{1, -1, 1}, {-1, 1, 1}, {1, 1, -1}, {-1, -1, -1}};
    for (int i = 0; i < N; i++) {
        lab[i] = i % K;
        for (int p = 0; p < H * W; p++)
            for (int c = 0; c < 3; c++)
                x[(i * H * W + p) * 3 + c] += mean[lab[i]][c];
    }
    int count;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    sl_sgd *o = NULL;
    cr_assert_eq(sl_sgd_create(&sc, t, count, &o), SL_OK, "%s", sl_errmsg());
    const float *lg;
    float loss = 0, first = 0;
    int correct = 0;
    for (int s = 0; s < STEPS; s++) {
        int off = (s % (N / B)) * B;
        cr_assert_eq(sl_model_forward(m, &e, x + off * H * W * 3, B, 1, &lg), SL_OK);
        cr_assert_eq(e.ops->xent_fwd_bwd(&e, B, K, lg, lab + off, 0.0f, &loss, dl, NULL), SL_OK);
        if (s == 0)
            first = loss;
        cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_sgd_step(o, 0.05f), SL_OK);
    }
    cr_assert_eq(sl_model_forward(m, &e, x, N, 1, &lg), SL_OK);
    cr_assert_eq(e.ops->xent_fwd_bwd(&e, N, K, lg, lab, 0.0f, &loss, dl, &correct), SL_OK);
    cr_log_info("resnet20 w4: loss %.3f -> %.3f, %d/%d right", first, loss, correct, N);
    cr_assert_gt(first, 1.0f, "starts near ln 4");
    cr_assert_lt(loss, 0.5f * first);
    cr_assert_geq(correct, 56);
    sl_sgd_destroy(o);
    free(x);
    sl_model_destroy(m);
    sl_exec_fini(&e);
}

/* ----------------------------------------------------------- errors */

Test(train_model, bad_arguments)
{
    sl_model_config c = SL_MODEL_CONFIG_INIT;
    sl_model *m = (sl_model *)&c;
    cr_assert_eq(sl_model_create(NULL, 1, 8, 8, &m), SL_EINVAL);
    c.classes = 0;
    cr_assert_eq(sl_model_create(&c, 1, 8, 8, &m), SL_EINVAL);
    cr_assert_null(m, "out cleared on failure");
    cr_assert(strstr(sl_errmsg(), "sl_model_create"));
    c = (sl_model_config)SL_MODEL_CONFIG_INIT;
    c.arch = (sl_arch)7;
    cr_assert_eq(sl_model_create(&c, 1, 8, 8, &m), SL_EINVAL);
    c.arch = SL_ARCH_RESNET20;
    cr_assert_eq(sl_model_create(&c, 0, 8, 8, &m), SL_EINVAL);
    cr_assert_eq(sl_model_create(&c, 1, 0, 8, &m), SL_EINVAL);
    c.bn_eps = 0;
    cr_assert_eq(sl_model_create(&c, 1, 8, 8, &m), SL_EINVAL);
    /* a config from other headers (or not started from the _INIT) is
     * refused before any field is read, by both entry points */
    c = (sl_model_config)SL_MODEL_CONFIG_INIT;
    c.arch = SL_ARCH_RESNET20;
    for (int d = -1; d <= 1; d += 2) {
        c.size = sizeof c + (size_t)(d * 8);
        char want[160];
        snprintf(want, sizeof want, "sl_model_create: config of %zu bytes, this library's is %zu: "
                 "rebuild against this sluice's headers", c.size, sizeof c);
        cr_assert_eq(sl_model_create(&c, 1, 8, 8, &m), SL_EINVAL);
        cr_assert_null(m);
        cr_assert_str_eq(sl_errmsg(), want);
        sl_model_mem mem;
        cr_assert_eq(sl_model_plan_bytes(&c, 1, 8, 8, 4, 0, &mem), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "config of"), "%s", sl_errmsg());
    }
    c.size = sizeof c;
    cr_assert_eq(sl_model_create(&c, 1, 8, 8, &m), SL_OK, "%s", sl_errmsg());
    sl_model_destroy(m);

    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK);
    m = mk(SL_ARCH_RESNET18, 3, 4, 1, 1, 2, 32, 32);
    float x[2 * 32 * 32 * 3] = {0};
    const float *lg = NULL;
    cr_assert_eq(sl_model_forward(m, &e, x, 3, 1, &lg), SL_EINVAL, "batch over max_batch");
    cr_assert_eq(sl_model_forward(m, &e, x, 0, 0, &lg), SL_EINVAL);
    cr_assert_eq(sl_model_forward(m, &e, NULL, 1, 0, &lg), SL_EINVAL);
    /* layer4 is 1x1 at 32x32: one image gives one value per channel */
    cr_assert_eq(sl_model_forward(m, &e, x, 1, 1, &lg), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "layer4"), "%s", sl_errmsg());
    cr_assert_eq(sl_model_forward(m, &e, x, 1, 0, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_forward(m, &e, x, 2, 1, &lg), SL_OK, "%s", sl_errmsg());
    sl_model_destroy(m);
    sl_model_destroy(NULL);
    sl_exec_fini(&e);
}

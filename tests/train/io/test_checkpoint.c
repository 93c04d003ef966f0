/*
 * tests/train/io/test_checkpoint.c - train/io/checkpoint.c with a real model
 * (resnet20, width 4, 10 classes) and optimizer: save / load byte-equal
 * round trips, torchvision's OIHW layout on disk (checked element by
 * element against the model's OHWI), metadata and the state JSON kept
 * verbatim, shape / dtype / missing / extra tensors rejected (and the model
 * left untouched), damaged files as SL_ECORRUPT, and the choice of the
 * newest complete checkpoint.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "train/train.h"

static sl_model *make_model(int classes, uint64_t seed)
{
    sl_model_config cfg = SL_MODEL_CONFIG_INIT;
    cfg.arch = SL_ARCH_RESNET20;
    cfg.width = 4;
    cfg.classes = classes;
    cfg.seed = seed;
    sl_model *m = NULL;
    cr_assert_eq(sl_model_create(&cfg, 1, 8, 8, &m), SL_OK, "%s", sl_errmsg());
    return m;
}

static size_t tbytes(const sl_tensor_info *t)
{
    return (size_t)t->numel * (t->dtype == SL_T_I64 ? 8 : 4);
}

/* Give every tensor of ts distinct values from seed (buffers too, so a
 * load that skipped them would show). */
static void scramble(sl_tensor_info *ts, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        for (int64_t k = 0; k < ts[i].numel; k++) {
            uint64_t r = tu_rand(&seed);
            if (ts[i].dtype == SL_T_I64)
                ((int64_t *)ts[i].data)[k] = (int64_t)(r % 100000);
            else
                ((float *)ts[i].data)[k] = (float)((double)(r >> 40) / 16777216.0 - 0.5);
        }
    }
}

/* A copy of every tensor's bytes, to show a failed load changed nothing. */
static uint8_t **snapshot(sl_tensor_info *ts, int n)
{
    uint8_t **s = calloc((size_t)n, sizeof *s);
    cr_assert_not_null(s);
    for (int i = 0; i < n; i++) {
        s[i] = malloc(tbytes(&ts[i]) + 1);
        cr_assert_not_null(s[i]);
        memcpy(s[i], ts[i].data, tbytes(&ts[i]));
    }
    return s;
}

static void assert_unchanged(uint8_t **snap, sl_tensor_info *ts, int n)
{
    for (int i = 0; i < n; i++) {
        cr_assert_eq(memcmp(snap[i], ts[i].data, tbytes(&ts[i])), 0, "%s changed",
                     ts[i].name);
        free(snap[i]);
    }
    free(snap);
}

static void assert_tensors_equal(sl_tensor_info *a, int na, sl_tensor_info *b, int nb)
{
    cr_assert_eq(na, nb);
    for (int i = 0; i < na; i++) {
        cr_assert_str_eq(a[i].name, b[i].name);
        cr_assert_eq(memcmp(a[i].data, b[i].data, tbytes(&a[i])), 0, "%s differs", a[i].name);
    }
}

typedef struct fixture {
    char *dir, *prefix, *st_path;
    sl_model *m;
    sl_sgd *o;
} fixture;

static const char state_text[] =
    "{\"epoch\": 3, \"rng\": 18446744073709551615, \"s\": \"a,}\\\"]\", \"l\": [1, {\"x\": 2}]}";

/* m (seed 1) with scrambled buffers, an optimizer at step 17 with
 * scrambled momentum, saved to DIR/ckpt-000000010. */
static void fixture_init(fixture *f)
{
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    int n, no;
    f->dir = tu_tmpdir();
    f->prefix = tu_join(f->dir, "ckpt-000000010");
    f->st_path = malloc(strlen(f->prefix) + 20);
    cr_assert_not_null(f->st_path);
    sprintf(f->st_path, "%s.safetensors", f->prefix);
    f->m = make_model(10, 1);
    sl_tensor_info *ts = sl_model_tensors(f->m, &n);
    for (int i = 0; i < n; i++)
        if (ts[i].flags & SL_TENSOR_BUFFER)
            scramble(&ts[i], 1, 100 + (uint64_t)i);
    cr_assert_eq(sl_sgd_create(&sc, ts, n, &f->o), SL_OK, "%s", sl_errmsg());
    sl_tensor_info *os = sl_sgd_tensors(f->o, &no);
    scramble(os, no, 7);
    *(int64_t *)os[no - 1].data = 17;
    cr_assert_eq(sl_checkpoint_save(f->prefix, f->m, f->o, 8, state_text), SL_OK, "%s",
                 sl_errmsg());
}

static void fixture_fini(fixture *f)
{
    sl_sgd_destroy(f->o);
    sl_model_destroy(f->m);
    free(f->st_path);
    free(f->prefix);
    tu_rmrf(f->dir);
    free(f->dir);
}

Test(train_checkpoint, round_trip_byte_equal)
{
    fixture f;
    fixture_init(&f);
    sl_model *m2 = make_model(10, 2);
    int n1, n2, no1, no2;
    sl_tensor_info *t1 = sl_model_tensors(f.m, &n1), *t2 = sl_model_tensors(m2, &n2);
    sl_sgd *o2 = NULL;
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    cr_assert_eq(sl_sgd_create(&sc, t2, n2, &o2), SL_OK);
    sl_tensor_info *c1 = sl_model_tensor(f.m, "conv1.weight"), *c2 = sl_model_tensor(m2, "conv1.weight");
    cr_assert_neq(memcmp(c1->data, c2->data, tbytes(c1)), 0, "seeds 1 and 2 give the same net");

    cr_assert_eq(sl_checkpoint_load(f.st_path, m2, o2, 1), SL_OK, "%s", sl_errmsg());
    assert_tensors_equal(t1, n1, t2, n2);
    sl_tensor_info *os1 = sl_sgd_tensors(f.o, &no1), *os2 = sl_sgd_tensors(o2, &no2);
    assert_tensors_equal(os1, no1, os2, no2);
    cr_assert_eq(*(int64_t *)os2[no2 - 1].data, 17);

    /* The state comes back as the very text given (a 64-bit integer a
     * double would round included). */
    char *state = NULL;
    cr_assert_eq(sl_checkpoint_read_state(f.prefix, &state), SL_OK, "%s", sl_errmsg());
    cr_assert_str_eq(state, state_text);
    free(state);

    /* PREFIX.json names the weights by basename. */
    char json_path[4096];
    snprintf(json_path, sizeof json_path, "%s.json", f.prefix);
    size_t len;
    char *text = (char *)tu_read_file(json_path, &len);
    cr_assert_not_null(text);
    cJSON *j = cJSON_ParseWithLength(text, len);
    cr_assert_not_null(j, "%.*s", (int)len, text);
    cr_assert_eq(cJSON_GetObjectItem(j, "format")->valuedouble, 1);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "weights")->valuestring,
                     "ckpt-000000010.safetensors");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "state")));
    cJSON_Delete(j);
    free(text);

    /* The model config from the metadata. */
    sl_model_config cfg;
    int isize = -1;
    cr_assert_eq(sl_checkpoint_model_config(f.st_path, &cfg, &isize), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(cfg.arch, SL_ARCH_RESNET20);
    cr_assert_eq(cfg.width, 4);
    cr_assert_eq(cfg.classes, 10);
    cr_assert_eq(isize, 8);
    sl_model_config def = SL_MODEL_CONFIG_INIT;
    cr_assert_eq(cfg.bn_eps, def.bn_eps);
    cr_assert_eq(cfg.zero_init_residual, def.zero_init_residual);

    sl_sgd_destroy(o2);
    sl_model_destroy(m2);
    fixture_fini(&f);
}

/* On disk: torchvision's names, order and OIHW shapes, element by element;
 * optimizer entries after the model's; the metadata. */
Test(train_checkpoint, torchvision_layout_on_disk)
{
    fixture f;
    fixture_init(&f);
    int n, no;
    sl_tensor_info *ts = sl_model_tensors(f.m, &n);
    sl_tensor_info *os = sl_sgd_tensors(f.o, &no);
    sl_safetensors *st = NULL;
    cr_assert_eq(sl_safetensors_open(f.st_path, &st), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_safetensors_count(st), n + no);
    cr_assert_str_eq(sl_safetensors_meta(st, "sluice.arch"), "resnet20");
    cr_assert_str_eq(sl_safetensors_meta(st, "sluice.width"), "4");
    cr_assert_str_eq(sl_safetensors_meta(st, "sluice.classes"), "10");
    cr_assert_str_eq(sl_safetensors_meta(st, "sluice.image_size"), "8");
    cr_assert_str_eq(sl_safetensors_meta(st, "sluice.format"), "1");
    int ohwi = 0;
    for (int i = 0; i < n + no; i++) {
        const sl_tensor_info *t = i < n ? &ts[i] : &os[i - n];
        sl_st_tensor x;
        cr_assert_eq(sl_safetensors_at(st, i, &x), SL_OK);
        cr_assert_str_eq(x.name, t->name, "entry %d", i);
        cr_assert_eq(x.dtype, t->dtype, "%s", t->name);
        cr_assert_eq(x.ndim, t->ndim, "%s", t->name);
        for (int d = 0; d < x.ndim; d++)
            cr_assert_eq(x.shape[d], t->shape[d], "%s dim %d", t->name, d);
        if (!(t->flags & SL_TENSOR_OHWI)) {
            cr_assert_eq(memcmp(x.data, t->data, tbytes(t)), 0, "%s", t->name);
            continue;
        }
        ohwi++;
        int64_t k = t->shape[0], c = t->shape[1], r = t->shape[2], s = t->shape[3];
        const float *file = x.data, *held = t->data;
        for (int64_t o = 0; o < k; o++)
            for (int64_t ci = 0; ci < c; ci++)
                for (int64_t y = 0; y < r; y++)
                    for (int64_t xx = 0; xx < s; xx++)
                        cr_assert_eq(file[((o * c + ci) * r + y) * s + xx],
                                     held[((o * r + y) * s + xx) * c + ci],
                                     "%s [%lld,%lld,%lld,%lld]", t->name, (long long)o,
                                     (long long)ci, (long long)y, (long long)xx);
    }
    /* resnet20: 19 convs + 2 downsample convs, each with its momentum. */
    cr_assert_eq(ohwi, 2 * 21);
    sl_st_tensor x;
    cr_assert_eq(sl_safetensors_find(st, "layer2.0.downsample.0.weight", &x), SL_OK);
    cr_assert(x.ndim == 4 && x.shape[0] == 8 && x.shape[1] == 4 && x.shape[2] == 1 &&
              x.shape[3] == 1);
    cr_assert_eq(sl_safetensors_find(st, "bn1.num_batches_tracked", &x), SL_OK);
    cr_assert(x.dtype == SL_T_I64 && x.ndim == 0);
    cr_assert_eq(sl_safetensors_find(st, "optimizer.step", &x), SL_OK);
    cr_assert_eq(*(const int64_t *)x.data, 17);
    sl_safetensors_close(st);
    fixture_fini(&f);
}

Test(train_checkpoint, shape_mismatch_rejected_model_untouched)
{
    fixture f;
    fixture_init(&f);
    sl_model *m7 = make_model(7, 3);
    int n;
    sl_tensor_info *ts = sl_model_tensors(m7, &n);
    uint8_t **snap = snapshot(ts, n);
    int rc = sl_checkpoint_load(f.st_path, m7, NULL, 1);
    cr_assert_eq(rc, SL_EINVAL, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "tensor fc.weight: shape [10, 16] in the file, [7, 16] in the "
                     "model"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "ckpt-000000010.safetensors"), "%s", sl_errmsg());
    /* Non-strict too: a present tensor of the wrong shape is never skipped. */
    cr_assert_eq(sl_checkpoint_load(f.st_path, m7, NULL, 0), SL_EINVAL);
    assert_unchanged(snap, ts, n);
    sl_model_destroy(m7);
    fixture_fini(&f);
}

/* Rewrite the checkpoint's file without `drop` and with an extra tensor
 * `add` (either may be NULL), or with `retype` stored as F32. */
static void rewrite(const char *src, const char *dst, const char *drop, const char *add,
                    const char *retype)
{
    sl_safetensors *st = NULL;
    cr_assert_eq(sl_safetensors_open(src, &st), SL_OK, "%s", sl_errmsg());
    int n = sl_safetensors_count(st), k = 0;
    sl_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    static const float one[1] = {1};
    cr_assert_not_null(t);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(sl_safetensors_at(st, i, &t[k]), SL_OK);
        if (drop && !strcmp(t[k].name, drop))
            continue;
        if (retype && !strcmp(t[k].name, retype)) {
            t[k].dtype = SL_T_F32;
            t[k].data = one;
        }
        k++;
    }
    if (add)
        t[k++] = (sl_st_tensor){.name = add, .dtype = SL_T_F32, .ndim = 1, .shape = {1}, .data = one};
    cr_assert_eq(sl_safetensors_write(dst, t, k, NULL, 0), SL_OK, "%s", sl_errmsg());
    free(t);
    sl_safetensors_close(st);
}

Test(train_checkpoint, strict_missing_extra_and_dtype)
{
    fixture f;
    fixture_init(&f);
    char *other = tu_join(f.dir, "other.safetensors");
    sl_model *m2 = make_model(10, 2);
    int n;
    sl_tensor_info *ts = sl_model_tensors(m2, &n);
    sl_tensor_info *var = sl_model_tensor(m2, "bn1.running_var");
    cr_assert_not_null(var);
    float var0 = ((float *)var->data)[0];

    rewrite(f.st_path, other, "bn1.running_var", NULL, NULL);
    uint8_t **snap = snapshot(ts, n);
    cr_assert_eq(sl_checkpoint_load(other, m2, NULL, 1), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "bn1.running_var: missing"), "%s", sl_errmsg());
    assert_unchanged(snap, ts, n);
    /* Non-strict: everything present is loaded, the missing one kept. */
    cr_assert_eq(sl_checkpoint_load(other, m2, NULL, 0), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(((float *)var->data)[0], var0);
    sl_tensor_info *w1 = sl_model_tensor(f.m, "layer3.2.conv2.weight");
    sl_tensor_info *w2 = sl_model_tensor(m2, "layer3.2.conv2.weight");
    cr_assert_eq(memcmp(w1->data, w2->data, tbytes(w1)), 0);

    /* An extra model-looking tensor: strict refuses; optimizer.* extras
     * (this model has no optimizer here) are fine. */
    rewrite(f.st_path, other, NULL, "layer9.0.conv1.weight", NULL);
    cr_assert_eq(sl_checkpoint_load(other, m2, NULL, 1), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "layer9.0.conv1.weight: not in the model"), "%s", sl_errmsg());
    cr_assert_eq(sl_checkpoint_load(other, m2, NULL, 0), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_checkpoint_load(f.st_path, m2, NULL, 1), SL_OK, "%s", sl_errmsg());

    /* num_batches_tracked stored as F32. */
    rewrite(f.st_path, other, NULL, NULL, "layer1.0.bn1.num_batches_tracked");
    cr_assert_eq(sl_checkpoint_load(other, m2, NULL, 0), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "dtype F32 in the file, I64 in the model"), "%s", sl_errmsg());

    /* A file without optimizer state leaves the optimizer alone. */
    sl_sgd *o2 = NULL;
    sl_sgd_config sc = SL_SGD_CONFIG_INIT;
    cr_assert_eq(sl_sgd_create(&sc, ts, n, &o2), SL_OK);
    int no;
    sl_tensor_info *os = sl_sgd_tensors(o2, &no);
    scramble(os, no, 99);
    uint8_t **osnap = snapshot(os, no);
    rewrite(f.st_path, other, "optimizer.step", NULL, NULL);
    cr_assert_eq(sl_checkpoint_load(other, m2, o2, 1), SL_OK, "%s", sl_errmsg());
    assert_unchanged(osnap, os, no);

    sl_sgd_destroy(o2);
    sl_model_destroy(m2);
    free(other);
    fixture_fini(&f);
}

Test(train_checkpoint, corrupt_file_rejected)
{
    fixture f;
    fixture_init(&f);
    char *bad = tu_join(f.dir, "bad.safetensors");
    size_t len;
    uint8_t *orig = tu_read_file(f.st_path, &len);
    cr_assert_not_null(orig);
    sl_model *m2 = make_model(10, 2);
    int n;
    sl_tensor_info *ts = sl_model_tensors(m2, &n);
    uint8_t **snap = snapshot(ts, n);
    sl_model_config cfg;

    /* A flipped header byte: the JSON's opening brace, then a quote. */
    size_t flips[] = {8, 9};
    for (size_t i = 0; i < 2; i++) {
        orig[flips[i]] ^= 0x01;
        cr_assert_eq(tu_write_file(bad, orig, len), 0);
        orig[flips[i]] ^= 0x01;
        cr_assert_eq(sl_checkpoint_load(bad, m2, NULL, 1), SL_ECORRUPT, "flip %zu: %s", flips[i],
                     sl_errmsg());
        cr_assert(strstr(sl_errmsg(), "sl_checkpoint_load"), "%s", sl_errmsg());
        cr_assert_eq(sl_checkpoint_model_config(bad, &cfg, NULL), SL_ECORRUPT);
    }
    /* The header length's low byte. */
    orig[0] ^= 0x08;
    cr_assert_eq(tu_write_file(bad, orig, len), 0);
    orig[0] ^= 0x08;
    cr_assert_eq(sl_checkpoint_load(bad, m2, NULL, 1), SL_ECORRUPT, "%s", sl_errmsg());
    /* Truncated: by one byte and to half. */
    cr_assert_eq(tu_write_file(bad, orig, len - 1), 0);
    cr_assert_eq(sl_checkpoint_load(bad, m2, NULL, 1), SL_ECORRUPT, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "past the end"), "%s", sl_errmsg());
    cr_assert_eq(tu_write_file(bad, orig, len / 2), 0);
    cr_assert_eq(sl_checkpoint_load(bad, m2, NULL, 1), SL_ECORRUPT, "%s", sl_errmsg());
    assert_unchanged(snap, ts, n);

    /* A state JSON that is not one. */
    char jp[4096];
    snprintf(jp, sizeof jp, "%s.json", f.prefix);
    cr_assert_eq(tu_write_file(jp, "{\"format\":1,\"state\":", 20), 0);
    char *state = NULL;
    cr_assert_eq(sl_checkpoint_read_state(f.prefix, &state), SL_ECORRUPT);
    cr_assert_null(state);
    char *none = tu_join(f.dir, "ckpt-none");
    cr_assert_eq(sl_checkpoint_read_state(none, &state), SL_ENOENT);
    free(none);

    free(orig);
    free(bad);
    sl_model_destroy(m2);
    fixture_fini(&f);
}

Test(train_checkpoint, save_rejects_bad_state)
{
    char *dir = tu_tmpdir();
    char *prefix = tu_join(dir, "ckpt-000000001");
    sl_model *m = make_model(10, 1);
    cr_assert_eq(sl_checkpoint_save(prefix, m, NULL, 8, "[1, 2]"), SL_EINVAL);
    cr_assert_eq(sl_checkpoint_save(prefix, m, NULL, 8, "{\"a\": 1} x"), SL_EINVAL);
    char p[4096];
    snprintf(p, sizeof p, "%s.safetensors", prefix);
    cr_assert_neq(access(p, F_OK), 0, "nothing written for a bad state");
    /* NULL state: an empty object; no optimizer: no optimizer.* entries. */
    cr_assert_eq(sl_checkpoint_save(prefix, m, NULL, 8, NULL), SL_OK, "%s", sl_errmsg());
    char *state = NULL;
    cr_assert_eq(sl_checkpoint_read_state(prefix, &state), SL_OK, "%s", sl_errmsg());
    cr_assert_str_eq(state, "{}");
    free(state);
    sl_safetensors *st = NULL;
    sl_st_tensor x;
    cr_assert_eq(sl_safetensors_open(p, &st), SL_OK);
    cr_assert_eq(sl_safetensors_find(st, "optimizer.step", &x), SL_ENOENT);
    sl_safetensors_close(st);
    sl_model_destroy(m);
    free(prefix);
    tu_rmrf(dir);
    free(dir);
}

Test(train_checkpoint, latest_picks_newest_complete)
{
    char *dir = tu_tmpdir();
    char *prefix = NULL;
    cr_assert_eq(sl_checkpoint_latest(dir, &prefix), SL_ENOENT);
    cr_assert_null(prefix);
    char *missing = tu_join(dir, "missing");
    cr_assert_eq(sl_checkpoint_latest(missing, &prefix), SL_ENOENT);
    free(missing);

    sl_model *m = make_model(10, 1);
    char p[4096];
    snprintf(p, sizeof p, "%s/ckpt-000000200", dir);
    cr_assert_eq(sl_checkpoint_save(p, m, NULL, 8, "{\"step\": 200}"), SL_OK, "%s", sl_errmsg());
    snprintf(p, sizeof p, "%s/ckpt-000000010", dir);
    cr_assert_eq(sl_checkpoint_save(p, m, NULL, 8, "{\"step\": 10}"), SL_OK, "%s", sl_errmsg());
    /* Incomplete or foreign: weights without JSON (a save cut short), JSON
     * without weights, a temp file, names that are not ckpt-<digits>. */
    snprintf(p, sizeof p, "%s/ckpt-000000300.safetensors", dir);
    cr_assert_eq(tu_write_file(p, "x", 1), 0);
    snprintf(p, sizeof p, "%s/ckpt-000000400.json", dir);
    cr_assert_eq(tu_write_file(p, "{}", 2), 0);
    snprintf(p, sizeof p, "%s/ckpt-000000500.json.tmp", dir);
    cr_assert_eq(tu_write_file(p, "{}", 2), 0);
    snprintf(p, sizeof p, "%s/ckpt-000000500.safetensors", dir);
    cr_assert_eq(tu_write_file(p, "x", 1), 0);
    snprintf(p, sizeof p, "%s/ckpt-9x9.json", dir);
    cr_assert_eq(tu_write_file(p, "{}", 2), 0);
    snprintf(p, sizeof p, "%s/ckpt-9x9.safetensors", dir);
    cr_assert_eq(tu_write_file(p, "x", 1), 0);

    cr_assert_eq(sl_checkpoint_latest(dir, &prefix), SL_OK, "%s", sl_errmsg());
    snprintf(p, sizeof p, "%s/ckpt-000000200", dir);
    cr_assert_str_eq(prefix, p);
    char *state = NULL;
    cr_assert_eq(sl_checkpoint_read_state(prefix, &state), SL_OK);
    cr_assert_str_eq(state, "{\"step\": 200}");
    free(state);
    free(prefix);

    /* Steps compare as numbers, not as names. */
    snprintf(p, sizeof p, "%s/ckpt-1000", dir);
    cr_assert_eq(sl_checkpoint_save(p, m, NULL, 8, "{}"), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_checkpoint_latest(dir, &prefix), SL_OK, "%s", sl_errmsg());
    cr_assert_str_eq(prefix, p);
    free(prefix);

    sl_model_destroy(m);
    tu_rmrf(dir);
    free(dir);
}

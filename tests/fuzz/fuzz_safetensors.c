/*
 * tests/fuzz/fuzz_safetensors.c - the safetensors loader (sl_safetensors_open:
 * header length, JSON header, dtype / shape / offsets checked against the
 * file), every tensor it hands out (first and last byte read), and the
 * checkpoint paths on top of it: the model config from the metadata
 * (sl_checkpoint_model_config) and a load into a small ResNet-20
 * (sl_checkpoint_load: names, shapes, layout conversion). Input: a
 * .safetensors file.
 */
#include <stdlib.h>

#include "train/train.h"
#include "util.h"

static sl_model *model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model) {
        sl_model_config mc = SL_MODEL_CONFIG_INIT;
        mc.arch = SL_ARCH_RESNET20;
        mc.classes = 10;
        mc.width = 4;
        if (sl_model_create(&mc, 1, 8, 8, &model) != SL_OK)
            abort();
    }
    char path[512];
    fz_path("w.safetensors", path, sizeof path);
    fz_write(path, data, size);
    sl_safetensors *f = NULL;
    if (sl_safetensors_open(path, &f) == SL_OK) {
        int n = sl_safetensors_count(f);
        volatile uint8_t sink = 0;
        for (int i = 0; i < n; i++) {
            sl_st_tensor t, u;
            int rc = sl_safetensors_at(f, i, &t);
            if (rc == SL_ENOTSUP)
                continue; /* a dtype other than F32 / I64, or > 4 dimensions: not handed out */
            if (rc != SL_OK)
                abort(); /* counted, so it must be there */
            size_t numel = 1;
            for (int d = 0; d < t.ndim; d++)
                numel *= (size_t)t.shape[d];
            size_t bytes = numel * (t.dtype == SL_T_I64 ? 8 : 4);
            if (bytes) {
                sink ^= ((const uint8_t *)t.data)[0];
                sink ^= ((const uint8_t *)t.data)[bytes - 1];
            }
            if (sl_safetensors_find(f, t.name, &u) != SL_OK)
                abort();
        }
        (void)sink;
        (void)sl_safetensors_meta(f, "format");
        (void)sl_safetensors_meta(f, "sluice.arch");
        sl_safetensors_close(f);
    }
    sl_model_config cfg;
    int image_size;
    (void)sl_checkpoint_model_config(path, &cfg, &image_size);
    (void)sl_checkpoint_load(path, model, NULL, 0);
    sl_clear_error();
    return 0;
}

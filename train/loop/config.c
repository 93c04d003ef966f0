/*
 * train/loop/config.c - the training run's vocabulary: strategy and
 * precision names (parse and print, as the CLI and the --json line say
 * them), the precision a config trains at, and sl_train_config_init, the
 * defaults every field starts from (train.h).
 *
 * Threading: pure functions; sl_strategy_parse and sl_precision_parse set
 * the calling thread's error message.
 */
#include <stdio.h>
#include <string.h>

#include "train/train.h"

const char *sl_strategy_name(sl_strategy s)
{
    switch (s) {
    case SL_STRATEGY_SINGLE: return "single";
    case SL_STRATEGY_MIRRORED: return "mirrored";
    case SL_STRATEGY_PS: return "ps";
    }
    return "?";
}

int sl_strategy_parse(const char *name, sl_strategy *out)
{
    for (int s = SL_STRATEGY_SINGLE; s <= SL_STRATEGY_PS; s++)
        if (name && strcmp(name, sl_strategy_name((sl_strategy)s)) == 0) {
            *out = (sl_strategy)s;
            return SL_OK;
        }
    return sl_fail(SL_EINVAL, "sl_strategy_parse: '%s': expected single, mirrored or ps",
                   name ? name : "(null)");
}

/* The default: bf16 where the matrix units take it (cuda; cpu where
 * oneDNN's ISA has bf16 dot products: sl_cpu_bf16), fp32 elsewhere. */
sl_dtype sl_train_precision(const sl_train_config *c)
{
    if (c->precision >= 0)
        return (sl_dtype)c->precision;
    if (c->backend == SL_BACKEND_CUDA)
        return SL_DTYPE_BF16;
    return c->backend == SL_BACKEND_CPU && sl_cpu_bf16(NULL) ? SL_DTYPE_BF16 : SL_DTYPE_F32;
}

void sl_train_precision_note(const sl_train_config *c, char *buf, size_t cap)
{
    sl_dtype t = sl_train_precision(c);
    const char *why = NULL;
    int bf = c->backend == SL_BACKEND_CPU && sl_cpu_bf16(&why);
    if (c->backend != SL_BACKEND_CPU)
        snprintf(buf, cap, "%s", sl_precision_name(t));
    else if (bf)
        snprintf(buf, cap, "%s (oneDNN ISA %s%s)", sl_precision_name(t), why,
                 t == SL_DTYPE_BF16 ? "" : ", which has bf16: --precision chose fp32");
    else if (!strchr(why, ' ')) /* an ISA name, not a sentence */
        snprintf(buf, cap, "%s (oneDNN ISA %s: no bf16 dot products)", sl_precision_name(t),
                 why);
    else
        snprintf(buf, cap, "%s (%s)", sl_precision_name(t), why);
}

const char *sl_precision_name(sl_dtype t)
{
    switch (t) {
    case SL_DTYPE_F32: return "fp32";
    case SL_DTYPE_BF16: return "bf16";
    case SL_DTYPE_F16: return "fp16";
    }
    return "?";
}

int sl_precision_parse(const char *name, sl_dtype *out)
{
    /* common/dtype.h's vocabulary, with the CLI's message */
    if (sl_dtype_parse(name, out))
        return sl_fail(SL_EINVAL, "unknown precision '%s' (want bf16, fp16 or fp32)",
                       name ? name : "(null)");
    return SL_OK;
}

void sl_train_config_init(sl_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->size = sizeof *c;
    c->data = (sl_pipeline_config)SL_PIPELINE_CONFIG_INIT;
    c->data.layout = SL_LAYOUT_NHWC_F32;
    c->data.epochs = 0;
    c->eval_split = SL_EVAL_SPLIT_AUTO;
    c->model = (sl_model_config)SL_MODEL_CONFIG_INIT;
    c->model.classes = 0; /* from dataset.json */
    c->sgd = (sl_sgd_config)SL_SGD_CONFIG_INIT;
    c->backend = SL_BACKEND_CPU;
    c->precision = -1; /* bf16 on cuda and on a cpu with bf16 dot products, f32 elsewhere */
    c->epochs = 1;
    c->base_lr = 0.1;
    c->schedule = SL_SCHED_COSINE;
    c->strategy = SL_STRATEGY_SINGLE;
    c->bucket_mb = 25.0;
    c->max_staleness = -1;
}
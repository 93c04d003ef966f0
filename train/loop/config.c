/*
 * train/loop/config.c - a training run's configuration: the precision a
 * config trains at (and the note that says why), and sl_train_config_init,
 * the defaults every field starts from (train.h). The names of strategies,
 * precisions and backends are train/names.c's.
 *
 * Threading: pure functions.
 */
#include <stdio.h>
#include <string.h>

#include "train/train.h"

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
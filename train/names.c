/*
 * train/names.c - the training vocabulary's words, under every room: the
 * names of backends, strategies and precisions as the CLI, the --json
 * line and the checkpoints' state say them, and their parsers (train.h).
 * Pure functions on train.h's enums, so any room (ops/'s messages, io/'s
 * state JSON, loop/'s lines) calls them without reaching into another.
 *
 * Threading: pure; the parsers set the calling thread's error message.
 */
#include <string.h>

#include "common/dtype.h"
#include "train/train.h"

const char *sl_backend_name(sl_backend b)
{
    switch (b) {
    case SL_BACKEND_REF: return "ref";
    case SL_BACKEND_CPU: return "cpu";
    case SL_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

int sl_backend_parse(const char *name, sl_backend *out)
{
    for (int b = SL_BACKEND_REF; b <= SL_BACKEND_CUDA; b++)
        if (name && !strcmp(name, sl_backend_name((sl_backend)b))) {
            *out = (sl_backend)b;
            return SL_OK;
        }
    return sl_fail(SL_EINVAL, "sl_backend_parse: '%s': expected cpu, cuda or ref",
                   name ? name : "(null)");
}

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

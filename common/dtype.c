/*
 * common/dtype.c - sizes, names and parsing of the element types
 * (common/dtype.h). The conversions and reduce kernels are the
 * collectives' (collectives/dtype.c) and the GPU's (train/ops/cuda_int.h).
 */
#include "common/dtype.h"

#include <string.h>

#include "common/status.h"

size_t sl_dtype_size(sl_dtype t)
{
    switch (t) {
    case SL_DTYPE_F32: return 4;
    case SL_DTYPE_BF16:
    case SL_DTYPE_F16: return 2;
    }
    return 0;
}

const char *sl_dtype_name(sl_dtype t)
{
    switch (t) {
    case SL_DTYPE_F32: return "f32";
    case SL_DTYPE_BF16: return "bf16";
    case SL_DTYPE_F16: return "f16";
    }
    return "?";
}

int sl_dtype_parse(const char *name, sl_dtype *out)
{
    static const struct {
        const char *name;
        sl_dtype t;
    } names[] = {
        {"f32", SL_DTYPE_F32}, {"fp32", SL_DTYPE_F32}, {"bf16", SL_DTYPE_BF16},
        {"f16", SL_DTYPE_F16}, {"fp16", SL_DTYPE_F16},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].t;
            return SL_OK;
        }
    return sl_fail(SL_EINVAL, "sl_dtype_parse: '%s': want f32 (fp32), bf16 or f16 (fp16)",
                   name ? name : "(null)");
}

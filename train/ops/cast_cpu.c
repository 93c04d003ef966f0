/*
 * train/ops/cast_cpu.c - f32 <-> bf16 on the host: the cpu backend's bf16
 * copies (the weights the convolutions read, the stem's input) and the
 * passes' whole-buffer conversions, with cpu_int.h's rounding (nearest
 * even, NaN kept quiet: what oneDNN's reorders and the cuda cast kernel
 * do). Threading: pure loops on the calling thread.
 */
#include "train/ops/cpu_int.h"
#include "train/ops/mem.h"

SL_KCLONES void sl_bf16_widen(int64_t n, const uint16_t *restrict src, float *restrict dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = sl_bf16_ld(src[i]);
}

SL_KCLONES void sl_bf16_narrow(int64_t n, const float *restrict src, uint16_t *restrict dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = sl_bf16_st(src[i]);
}

int sl_mem_host_cast(int64_t n, const float *src, void *dst, sl_dtype dt)
{
    switch (dt) {
    case SL_DTYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        return SL_OK;
    case SL_DTYPE_BF16:
        sl_bf16_narrow(n, src, dst);
        return SL_OK;
    default:
        return sl_fail(SL_ENOTSUP, "sl_mem_cast: host memory holds f32 or bf16, not %s",
                       sl_dtype_name(dt));
    }
}

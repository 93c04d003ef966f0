/*
 * collectives/dtype.c - element types of the collectives (their sizes and
 * names are common/dtype.h's): f16/bf16 <-> f32 conversion, and the reduce and scale kernels every
 * backend shares (the local ring's hops, MPI's user op for f16/bf16).
 *
 * f16 and bf16 are reduced in f32 and rounded back once per add, as NCCL
 * does at every ring hop: a sum over W ranks is rounded W-1 times.
 * Conversions round to nearest even; they are written out here rather than
 * taken from _Float16 / __bf16 so that the bits are the same on every
 * compiler and target (gcc 12 has no __bf16 arithmetic on x86).
 *
 * Threading: pure functions.
 */
#include <math.h>
#include <string.h>

#include "collectives/collectives_int.h"

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float sl_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t sl_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);              /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float sl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)                              /* inf / NaN */
        return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {                               /* zero / subnormal: man * 2^-24 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t sl_f32_to_f16(float f)
{
    uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                          /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)                         /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {                        /* below 2^-14: subnormal or zero */
        /* value = a_f; in units of 2^-24, rounded to nearest even */
        float v = u2f(a) * 0x1p24f;               /* exact: a power-of-two scale */
        float r = nearbyintf(v);                  /* default rounding: to nearest even */
        return (uint16_t)(sign | (uint32_t)r);
    }
    /* normal: rebias the exponent, round the 13 dropped mantissa bits */
    uint32_t h = ((a - 0x38000000u) >> 13);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;                                      /* may carry into the exponent: still right */
    return (uint16_t)(sign | h);
}

void sl_reduce_add3(sl_dtype t, void *dst, const void *a, const void *b, size_t n)
{
    if (t == SL_DTYPE_F32) {
        float *d = dst;
        const float *x = a, *y = b;
        for (size_t i = 0; i < n; i++)
            d[i] = x[i] + y[i];
        return;
    }
    uint16_t *d = dst;
    const uint16_t *x = a, *y = b;
    if (t == SL_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            d[i] = sl_f32_to_bf16(sl_bf16_to_f32(x[i]) + sl_bf16_to_f32(y[i]));
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = sl_f32_to_f16(sl_f16_to_f32(x[i]) + sl_f16_to_f32(y[i]));
    }
}

void sl_reduce_add(sl_dtype t, void *dst, const void *src, size_t n)
{
    sl_reduce_add3(t, dst, dst, src, n);
}

void sl_scale(sl_dtype t, void *buf, size_t n, float s)
{
    if (t == SL_DTYPE_F32) {
        float *d = buf;
        for (size_t i = 0; i < n; i++)
            d[i] *= s;
        return;
    }
    uint16_t *d = buf;
    if (t == SL_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            d[i] = sl_f32_to_bf16(sl_bf16_to_f32(d[i]) * s);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = sl_f32_to_f16(sl_f16_to_f32(d[i]) * s);
    }
}

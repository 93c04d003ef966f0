/* tests/collectives/test_dtype.c - f16/bf16 conversions and the reduce
 * kernels the collectives share (collectives/dtype.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "collectives/collectives_int.h"

static __attribute__((unused)) uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

Test(collectives_dtype, golden_f16)
{
    cr_assert_eq(sl_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(sl_f32_to_f16(-2.0f), 0xc000);
    cr_assert_eq(sl_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(sl_f32_to_f16(65519.0f), 0x7bff);   /* below the halfway point */
    cr_assert_eq(sl_f32_to_f16(65520.0f), 0x7c00);   /* halfway rounds to even: inf */
    cr_assert_eq(sl_f32_to_f16(0x1p-24f), 0x0001);   /* smallest subnormal */
    cr_assert_eq(sl_f32_to_f16(0x1p-25f), 0x0000);   /* halfway to 0: even */
    cr_assert_eq(sl_f32_to_f16(0x1.8p-25f), 0x0001);
    cr_assert_eq(sl_f32_to_f16(0.1f), 0x2e66);
    cr_assert_eq(sl_f32_to_f16(INFINITY), 0x7c00);
    cr_assert(isnan(sl_f16_to_f32(sl_f32_to_f16(NAN))));
    cr_assert_eq(sl_f16_to_f32(0x3555), 0x1.554p-2f);
    cr_assert_eq(sl_f16_to_f32(0x0001), 0x1p-24f);
}

Test(collectives_dtype, golden_bf16)
{
    cr_assert_eq(sl_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(sl_f32_to_bf16(0x1.01p0f), 0x3f80);   /* 1 + 2^-8: halfway, to even */
    cr_assert_eq(sl_f32_to_bf16(0x1.03p0f), 0x3f82);   /* 1 + 3*2^-8: halfway, to even (up) */
    cr_assert_eq(sl_f32_to_bf16(0x1.0101p0f), 0x3f81); /* just above halfway */
    cr_assert(isnan(sl_bf16_to_f32(sl_f32_to_bf16(NAN))));
    cr_assert_eq(sl_bf16_to_f32(0xc040), -3.0f);
}

/* Every f16 / bf16 value survives the trip through f32. */
Test(collectives_dtype, round_trip_all)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sl_f16_to_f32((uint16_t)h);
        if (!isnan(f))
            cr_assert_eq(sl_f32_to_f16(f), h, "f16 %04x", h);
        float g = sl_bf16_to_f32((uint16_t)h);
        if (!isnan(g))
            cr_assert_eq(sl_f32_to_bf16(g), h, "bf16 %04x", h);
    }
}

#if defined(__FLT16_MAX__)
/* Against the compiler's own _Float16 conversion on many f32 bit patterns. */
Test(collectives_dtype, f16_matches_compiler)
{
    uint32_t x = 12345;
    for (int i = 0; i < 2000000; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t u = (x & 0x8fffffffu) | ((x >> 3) & 0x30000000u); /* many near f16 range */
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
        _Float16 h = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        cr_assert_eq(sl_f32_to_f16(f), hb, "f32 %08x (%g)", bits(f), (double)f);
    }
}
#endif

Test(collectives_dtype, reduce_and_scale)
{
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -2, 1e-3f, 4, 0};
    sl_reduce_add(SL_DTYPE_F32, a, b, 5);
    cr_assert_eq(a[0], 1.5f);
    cr_assert_eq(a[1], 0.0f);
    cr_assert_eq(a[2], 3.0f + 1e-3f);
    sl_scale(SL_DTYPE_F32, a, 5, 0.5f);
    cr_assert_eq(a[3], 4.0f);
    uint16_t h[3], g[3];
    float hv[3] = {1, 2048, 0.25f}, gv[3] = {2, 1, 0.5f};
    for (int i = 0; i < 3; i++) {
        h[i] = sl_f32_to_f16(hv[i]);
        g[i] = sl_f32_to_bf16(gv[i]);
    }
    uint16_t h2[3] = {sl_f32_to_f16(2), sl_f32_to_f16(1), sl_f32_to_f16(0.5f)};
    sl_reduce_add(SL_DTYPE_F16, h, h2, 3);
    cr_assert_eq(sl_f16_to_f32(h[0]), 3.0f);
    cr_assert_eq(sl_f16_to_f32(h[1]), 2048.0f); /* 2049 rounds to even in f16 */
    cr_assert_eq(sl_f16_to_f32(h[2]), 0.75f);
    sl_scale(SL_DTYPE_BF16, g, 3, 3.0f);
    cr_assert_eq(sl_bf16_to_f32(g[0]), 6.0f);
    cr_assert_eq(sl_bf16_to_f32(g[2]), 1.5f);
    cr_assert_eq(sl_dtype_size(SL_DTYPE_F32), 4);
    cr_assert_eq(sl_dtype_size(SL_DTYPE_BF16), 2);
    cr_assert_str_eq(sl_dtype_name(SL_DTYPE_F16), "f16");
}

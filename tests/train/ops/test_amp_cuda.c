/* tests/train/ops/test_amp_cuda.c - mixed precision on the GPU (train/ops/amp_cuda.cu):
 *
 *   host        the tests' own f32 -> bf16 / f16 rounding (cuda_testutil.h,
 *               the model every other mixed-precision test compares with)
 *               against hand-worked round-to-nearest-even goldens; runs in
 *               every build, no GPU
 *   cast        (GPU) sl_cast_cuda: the goldens through every type pair;
 *               every one of the 65536 bf16 and f16 bit patterns widened
 *               exactly and narrowed back to itself; random f32 values
 *               narrowed as the host model says; odd lengths, same-type
 *               copies, n = 0
 *   check       (GPU) sl_amp_check_cuda: clean, +inf, -inf, NaN at the last
 *               element of an odd length, FLT_MAX is finite, a set flag
 *               stays set
 *   update      (GPU) sl_amp_update_cuda: GradScaler's goldens - backoff and
 *               skip count on inf, growth after exactly `interval` clean
 *               steps (3 and the default 2000), a growth to inf not taken
 *   graph       (GPU) one fp16 step's tail (scaled xent into the loss
 *               accumulator, the check, SGD reading the flag, the update, a
 *               weight cast) enqueued under CUDA stream capture: capture
 *               refuses host synchronization, so this proves none of them
 *               waits for the GPU; the captured graph then runs twice and
 *               its results are checked
 *   arguments   refusals before any device work (no GPU needed)
 *
 * sl_xent_acc_cuda's comparison with sl_xent_fwd_bwd_cuda is in
 * test_ops_cuda.c (act_cuda.cu), SGD's unscale and skip in test_sgd_cuda.c. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cuda_testutil.h"
#include "testutil.h"
#include "train/ops/ops.h"
#ifdef SLUICE_TRAIN_CUDA
#include "train/device/sgd_cuda.h"
#endif

/* ------------------------------------------------------------- goldens */

/* f32 input, its bf16 bits, its f16 bits (round to nearest even). */
typedef struct golden {
    float x;
    uint16_t bf16, f16;
} golden;

/* Powers of two written as such so that the ties are exact. */
#define P2(e) ldexpf(1.0f, (e))
static void goldens(golden *g, int *n)
{
    int k = 0;
#define G(v, b, h) (g[k++] = (golden){(v), (b), (h)})
    G(1.0f, 0x3f80, 0x3c00);
    G(-2.0f, 0xc000, 0xc000);
    G(0.0f, 0x0000, 0x0000);
    G(-0.0f, 0x8000, 0x8000);
    /* bf16 ulp at 1 is 2^-7: 1 + 2^-8 is a tie -> even (1); 1 + 3*2^-8 a tie
     * between 1+2^-7 (odd) and 1+2^-6 (even) -> up; just above a tie -> up.
     * f16 keeps 1 + 2^-8 exactly (ulp 2^-10). */
    G(1.0f + P2(-8), 0x3f80, 0x3c04);
    G(1.0f + 3 * P2(-8), 0x3f82, 0x3c0c);
    G(1.0f + P2(-8) + P2(-20), 0x3f81, 0x3c04);
    G(1.0f + P2(-8) - P2(-20), 0x3f80, 0x3c04);
    /* f16 ulp at 1 is 2^-10: ties 1 + 2^-11 -> 1, 1 + 3*2^-11 -> 1 + 2^-9 */
    G(1.0f + P2(-11), 0x3f80, 0x3c00);
    G(1.0f + 3 * P2(-11), 0x3f80, 0x3c02);
    /* f16's top: 65504 is the largest finite, 65519.99 rounds to it, 65520
     * (the tie with 65536) to inf; bf16 holds them at 8 bits: 65504 ->
     * 65536 (0x4780), 65520 -> 65536 */
    G(65504.0f, 0x4780, 0x7bff);
    G(65519.0f, 0x4780, 0x7bff);
    G(65520.0f, 0x4780, 0x7c00);
    G(-1e6f, 0xc974, 0xfc00);
    /* f32's largest finite rounds up to inf in bf16 (mantissa all ones) */
    G(FLT_MAX, 0x7f80, 0x7c00);
    G(tg_bits_f32(0x7f7f0000u), 0x7f7f, 0x7c00); /* bf16's largest finite, exact */
    G(INFINITY, 0x7f80, 0x7c00);
    G(-INFINITY, 0xff80, 0xfc00);
    /* f16 subnormals: 2^-24 is the smallest; 2^-25 ties with 0 -> 0;
     * 3*2^-25 ties between 1 and 2 units -> 2; 2^-14 - 2^-25 rounds up to
     * the smallest normal 0x0400; 1e-8 is 0.17 units -> 0 */
    G(P2(-24), 0x3380, 0x0001);
    G(P2(-25), 0x3300, 0x0000);
    G(3 * P2(-25), 0x33c0, 0x0002);
    G(P2(-14) - P2(-25), 0x3880, 0x0400);
    G(-1e-8f, 0xb22c, 0x8000);
    /* an f32 subnormal: bf16 keeps f32's exponent range (0x000116c2 ->
     * 0x0001), f16 flushes it to zero by rounding */
    G(1e-40f, 0x0001, 0x0000);
    G(0.1f, 0x3dcd, 0x2e66);
    G(-3.14159265f, 0xc049, 0xc248);
#undef G
    *n = k;
}

static int is_nan16(uint16_t b, sl_dtype t)
{
    if (t == SL_DTYPE_BF16)
        return (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    return (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
}

/* The host model the other tests round with, against the goldens. */
Test(train_amp_cuda, host_rounding_goldens)
{
    golden g[64];
    int n;
    goldens(g, &n);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(tg_bf16_bits(g[i].x), g[i].bf16, "bf16(%a) = %04x, want %04x", (double)g[i].x,
                     tg_bf16_bits(g[i].x), g[i].bf16);
        cr_assert_eq(tg_f16_bits(g[i].x), g[i].f16, "f16(%a) = %04x, want %04x", (double)g[i].x,
                     tg_f16_bits(g[i].x), g[i].f16);
        /* widening is exact and narrowing it again gives the same bits */
        cr_assert_eq(tg_bf16_bits(tg_bf16_f32(g[i].bf16)), g[i].bf16);
        cr_assert_eq(tg_f16_bits(tg_f16_f32(g[i].f16)), g[i].f16);
    }
    cr_assert(isnan(tg_round(NAN, SL_DTYPE_BF16)) && isnan(tg_round(-NAN, SL_DTYPE_F16)));
    cr_assert(is_nan16(tg_bf16_bits(NAN), SL_DTYPE_BF16));
    cr_assert(is_nan16(tg_f16_bits(NAN), SL_DTYPE_F16));
    /* every f16 pattern: widened value narrows back to itself (NaN to NaN) */
    for (uint32_t b = 0; b < 65536; b++) {
        float v = tg_f16_f32((uint16_t)b);
        uint16_t back = tg_f16_bits(v);
        cr_assert(is_nan16((uint16_t)b, SL_DTYPE_F16) ? is_nan16(back, SL_DTYPE_F16) : back == b,
                  "f16 %04x -> %a -> %04x", b, (double)v, back);
    }
    cr_assert_eq(tg_f16_f32(0x7bff), 65504.0f);
    cr_assert_eq(tg_f16_f32(0x0001), P2(-24));
    cr_assert_eq(tg_f16_f32(0x8400), -P2(-14));
    cr_assert_eq(tg_bits(SL_DTYPE_BF16), 8);
    cr_assert_eq(tg_bits(SL_DTYPE_F16), 11);
}

/* Checked before any device work: runs without a GPU. */
Test(train_amp_cuda, bad_arguments)
{
#ifndef SLUICE_TRAIN_CUDA
    cr_skip_test("built without CUDA (the cuda backend needs CUDA and cuDNN)");
#else
    sl_exec e;
    memset(&e, 0, sizeof e);
    e.backend = SL_BACKEND_CUDA; /* no context */
    float f[4] = {0};
    sl_amp_state *st = (sl_amp_state *)f; /* never dereferenced on the host */
    cr_assert_eq(sl_cast_cuda(&e, -1, f, SL_DTYPE_F32, f, SL_DTYPE_BF16), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_cast_cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_cast_cuda(&e, 4, f, (sl_dtype)7, f, SL_DTYPE_BF16), SL_EINVAL);
    cr_assert_eq(sl_cast_cuda(&e, 4, f, SL_DTYPE_F32, f, (sl_dtype)-1), SL_EINVAL);
    cr_assert_eq(sl_cast_cuda(&e, 4, f, SL_DTYPE_F32, f + 2, SL_DTYPE_BF16), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_amp_check_cuda(&e, f, -1, st), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_amp_check_cuda"), "%s", sl_errmsg());
    cr_assert_eq(sl_amp_check_cuda(&e, f, 4, NULL), SL_EINVAL);
    cr_assert_eq(sl_amp_check_cuda(&e, NULL, 4, st), SL_EINVAL);
    cr_assert_eq(sl_amp_check_cuda(&e, f, 4, st), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_amp_update_cuda(&e, NULL, 2.0f, 0.5f, 2000), SL_EINVAL);
    cr_assert_eq(sl_amp_update_cuda(&e, st, 0.5f, 0.5f, 2000), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "growth 0.5, backoff 0.5, interval 2000"), "%s", sl_errmsg());
    cr_assert_eq(sl_amp_update_cuda(&e, st, INFINITY, 0.5f, 2000), SL_EINVAL);
    cr_assert_eq(sl_amp_update_cuda(&e, st, 2.0f, 0.0f, 2000), SL_EINVAL);
    cr_assert_eq(sl_amp_update_cuda(&e, st, 2.0f, 1.5f, 2000), SL_EINVAL);
    cr_assert_eq(sl_amp_update_cuda(&e, st, 2.0f, NAN, 2000), SL_EINVAL);
    cr_assert_eq(sl_amp_update_cuda(&e, st, 2.0f, 0.5f, 0), SL_EINVAL);
    cr_assert_eq(sl_amp_update_cuda(&e, st, 2.0f, 0.5f, 2000), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no cuda context"), "%s", sl_errmsg());
    cr_assert_eq(sl_amp_update_cuda(NULL, st, 2.0f, 0.5f, 2000), SL_EINVAL);
#endif
}

#ifndef SLUICE_TRAIN_CUDA

#define GPU_TEST(name)                                                                      \
    Test(train_amp_cuda, name) { cr_skip_test("built without CUDA"); }
GPU_TEST(cast_goldens_on_device)
GPU_TEST(cast_every_16_bit_pattern)
GPU_TEST(cast_random_and_lengths)
GPU_TEST(check_goldens)
GPU_TEST(update_goldens)
GPU_TEST(step_is_graph_capturable)

#else /* SLUICE_TRAIN_CUDA */

static const sl_dtype types[3] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};

/* n elements of type t at host h as f32 (h: f32 or 16-bit patterns). */
static float host_val(const void *h, int64_t i, sl_dtype t)
{
    if (t == SL_DTYPE_F32)
        return ((const float *)h)[i];
    return tg_from16(((const uint16_t *)h)[i], t);
}

/* Bits of the device result element i of type t and of the host model's,
 * equal (any NaN for a NaN). */
static void expect_elem(const void *got, int64_t i, float want, sl_dtype t, const char *what)
{
    if (t == SL_DTYPE_F32) {
        float g = ((const float *)got)[i];
        cr_assert(isnan(want) ? isnan(g) : !memcmp(&g, &want, 4), "%s[%lld]: got %a want %a",
                  what, (long long)i, (double)g, (double)want);
        return;
    }
    uint16_t g = ((const uint16_t *)got)[i], w = tg_bits16(want, t);
    cr_assert(isnan(want) ? is_nan16(g, t) : g == w, "%s[%lld]: got %04x want %04x (%a)", what,
              (long long)i, g, w, (double)want);
}

/* Device cast of n values (host src of type st) to dt; the result bytes. */
static void *cast_on_device(sl_exec *e, const void *src, int64_t n, sl_dtype st, sl_dtype dt)
{
    void *d_src = tg_up(src, n, tg_esize(st)), *d_dst = tg_alloc((size_t)n * tg_esize(dt));
    tg_ready();
    cr_assert_eq(sl_cast_cuda(e, n, d_src, st, d_dst, dt), SL_OK, "%s", sl_errmsg());
    void *h = malloc((size_t)(n > 0 ? n : 1) * tg_esize(dt));
    cr_assert(h);
    tg_down(h, d_dst, n, tg_esize(dt));
    tg_free(d_src), tg_free(d_dst);
    return h;
}

/* The goldens through the device, f32 -> bf16 / f16, and every other pair
 * from the rounded values. */
Test(train_amp_cuda, cast_goldens_on_device)
{
    sl_exec e;
    tg_open(&e, NULL);
    golden g[64];
    int n;
    goldens(g, &n);
    float x[64];
    for (int i = 0; i < n; i++)
        x[i] = g[i].x;
    uint16_t *b = cast_on_device(&e, x, n, SL_DTYPE_F32, SL_DTYPE_BF16);
    uint16_t *h = cast_on_device(&e, x, n, SL_DTYPE_F32, SL_DTYPE_F16);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i], g[i].bf16, "device bf16(%a) = %04x, want %04x", (double)x[i], b[i],
                     g[i].bf16);
        cr_assert_eq(h[i], g[i].f16, "device f16(%a) = %04x, want %04x", (double)x[i], h[i],
                     g[i].f16);
    }
    /* from each 16-bit type to every type: the host model of the value */
    for (int s = 1; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            const uint16_t *src = s == 1 ? b : h;
            void *out = cast_on_device(&e, src, n, types[s], types[d]);
            char what[32];
            snprintf(what, sizeof what, "%s -> %s", tg_type_name(types[s]),
                     tg_type_name(types[d]));
            for (int i = 0; i < n; i++)
                expect_elem(out, i, host_val(src, i, types[s]), types[d], what);
            free(out);
        }
    free(b), free(h);
    tg_close(&e);
}

/* All 65536 patterns of each 16-bit type: widening is exact (the host's
 * value), and narrowing the widened value gives the pattern back; f16 <->
 * bf16 as the host model. */
Test(train_amp_cuda, cast_every_16_bit_pattern)
{
    sl_exec e;
    tg_open(&e, NULL);
    uint16_t *all = malloc(65536 * sizeof *all);
    cr_assert(all);
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    for (int s = 1; s < 3; s++) {
        sl_dtype t = types[s];
        float *wide = cast_on_device(&e, all, 65536, t, SL_DTYPE_F32);
        for (int64_t i = 0; i < 65536; i++)
            expect_elem(wide, i, tg_from16((uint16_t)i, t), SL_DTYPE_F32, "widen");
        uint16_t *back = cast_on_device(&e, wide, 65536, SL_DTYPE_F32, t);
        for (int64_t i = 0; i < 65536; i++)
            cr_assert(is_nan16((uint16_t)i, t) ? is_nan16(back[i], t) : back[i] == i,
                      "%s %04llx -> f32 -> %04x", tg_type_name(t), (long long)i, back[i]);
        sl_dtype o = s == 1 ? SL_DTYPE_F16 : SL_DTYPE_BF16;
        uint16_t *other = cast_on_device(&e, all, 65536, t, o);
        for (int64_t i = 0; i < 65536; i++)
            expect_elem(other, i, tg_from16((uint16_t)i, t), o, "16 -> 16");
        free(wide), free(back), free(other);
    }
    free(all);
    tg_close(&e);
}

/* Random f32 values of every magnitude (random bit patterns, NaN and inf
 * among them) narrowed as the host model says, over odd lengths (one
 * block, a ragged last block, the grid-stride loop); same-type copies;
 * n = 0 and the in-place same-type call touch nothing. */
Test(train_amp_cuda, cast_random_and_lengths)
{
    static const int64_t ns[] = {1, 3, 257, (1 << 20) + 3, (1 << 21) + 1};
    sl_exec e;
    tg_open(&e, NULL);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        float *x = falloc(n);
        uint64_t st = 70 + k;
        for (int64_t i = 0; i < n; i++) {
            uint64_t r = tu_rand(&st);
            /* half random bits (all exponents), half values near 1 */
            x[i] = r & 1 ? tg_bits_f32((uint32_t)(r >> 32)) : urand(&st, -4, 4);
        }
        for (int d = 0; d < 3; d++) {
            void *out = cast_on_device(&e, x, n, SL_DTYPE_F32, types[d]);
            for (int64_t i = 0; i < n; i++)
                expect_elem(out, i, x[i], types[d], tg_type_name(types[d]));
            free(out);
        }
        free(x);
    }
    /* n = 0 and src == dst with the same type: no-ops, the buffer keeps
     * its poison */
    uint16_t *d = tg_alloc(64), h[32];
    tg_ready();
    cr_assert_eq(sl_cast_cuda(&e, 0, d, SL_DTYPE_F32, d + 16, SL_DTYPE_BF16), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(sl_cast_cuda(&e, 32, d, SL_DTYPE_F16, d, SL_DTYPE_F16), SL_OK, "%s",
                 sl_errmsg());
    tg_down(h, d, 32, 2);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(h[i], 0xffff);
    /* a bad type with a context: refused with the function named */
    cr_assert_eq(sl_cast_cuda(&e, 4, d, (sl_dtype)3, d + 16, SL_DTYPE_F32), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "sl_cast_cuda"), "%s", sl_errmsg());
    tg_free(d);
    tg_close(&e);
}

/* ------------------------------------------------------------- check */

static sl_amp_state *state_up(float scale, int good, int found, int skipped)
{
    sl_amp_state s = {scale, good, found, skipped};
    return tg_up(&s, 1, sizeof s);
}

static sl_amp_state state_down(const sl_amp_state *d)
{
    sl_amp_state s;
    tg_down(&s, d, 1, sizeof s);
    return s;
}

Test(train_amp_cuda, check_goldens)
{
    const int64_t n = (1 << 20) + 3;
    sl_exec e;
    tg_open(&e, NULL);
    float *g = frand(n, 5, -1e3f, 1e3f);
    g[7] = FLT_MAX, g[8] = -FLT_MAX, g[9] = 1e-45f, g[10] = -0.0f; /* all finite */
    float *d_g = tg_upf(g, n);
    sl_amp_state *d_s = state_up(1024.0f, 5, 0, 2);
    tg_ready();
    cr_assert_eq(sl_amp_check_cuda(&e, d_g, n, d_s), SL_OK, "%s", sl_errmsg());
    sl_amp_state s = state_down(d_s);
    cr_assert(s.found_inf == 0 && s.scale == 1024.0f && s.good_steps == 5 && s.skipped == 2,
              "clean grads: found_inf %d (scale %g good %d skipped %d)", s.found_inf,
              (double)s.scale, s.good_steps, s.skipped);
    /* one bad value at the very end (the grid-stride loop's last element),
     * at the start, in the middle of a block */
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    const int64_t at[3] = {n - 1, 0, 4097};
    for (int b = 0; b < 3; b++)
        for (int a = 0; a < 3; a++) {
            float keep = g[at[a]];
            cr_assert_eq(cudaMemcpy(d_g + at[a], &bad[b], 4, cudaMemcpyHostToDevice),
                         cudaSuccess);
            sl_amp_state *d = state_up(1024.0f, 5, 0, 2);
            tg_ready();
            cr_assert_eq(sl_amp_check_cuda(&e, d_g, n, d), SL_OK, "%s", sl_errmsg());
            s = state_down(d);
            cr_assert_eq(s.found_inf, 1, "%g at %lld not found", (double)bad[b],
                         (long long)at[a]);
            cr_assert(s.scale == 1024.0f && s.good_steps == 5 && s.skipped == 2,
                      "check touched only found_inf");
            /* a set flag stays set on a clean array */
            cr_assert_eq(cudaMemcpy(d_g + at[a], &keep, 4, cudaMemcpyHostToDevice), cudaSuccess);
            tg_ready();
            cr_assert_eq(sl_amp_check_cuda(&e, d_g, n, d), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(state_down(d).found_inf, 1);
            tg_free(d);
        }
    /* n = 0 reads nothing */
    cr_assert_eq(sl_amp_check_cuda(&e, NULL, 0, d_s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(state_down(d_s).found_inf, 0);
    tg_free(d_g), tg_free(d_s);
    free(g);
    tg_close(&e);
}

/* ------------------------------------------------------------- update */

static sl_amp_state update(sl_exec *e, sl_amp_state *d, int found, float growth, float backoff,
                           int interval)
{
    if (found) {
        int one = 1;
        cr_assert_eq(cudaMemcpy((char *)d + offsetof(sl_amp_state, found_inf), &one, sizeof one,
                                cudaMemcpyHostToDevice), cudaSuccess);
        tg_ready();
    }
    cr_assert_eq(sl_amp_update_cuda(e, d, growth, backoff, interval), SL_OK, "%s", sl_errmsg());
    return state_down(d);
}

Test(train_amp_cuda, update_goldens)
{
    sl_exec e;
    tg_open(&e, NULL);
    sl_amp_state *d = state_up(65536.0f, 0, 0, 0);
    tg_ready();
    sl_amp_state s;
    /* interval 3: two clean steps count, the third grows */
    s = update(&e, d, 0, 2.0f, 0.5f, 3);
    cr_assert(s.scale == 65536.0f && s.good_steps == 1 && s.found_inf == 0 && s.skipped == 0);
    s = update(&e, d, 0, 2.0f, 0.5f, 3);
    cr_assert(s.scale == 65536.0f && s.good_steps == 2);
    s = update(&e, d, 0, 2.0f, 0.5f, 3);
    cr_assert(s.scale == 131072.0f && s.good_steps == 0, "scale %g good %d", (double)s.scale,
              s.good_steps);
    /* inf: back off, restart the count, count the skip, clear the flag */
    s = update(&e, d, 0, 2.0f, 0.5f, 3);
    cr_assert(s.good_steps == 1);
    s = update(&e, d, 1, 2.0f, 0.5f, 3);
    cr_assert(s.scale == 65536.0f && s.good_steps == 0 && s.found_inf == 0 && s.skipped == 1,
              "scale %g good %d found %d skipped %d", (double)s.scale, s.good_steps, s.found_inf,
              s.skipped);
    s = update(&e, d, 1, 2.0f, 0.25f, 3);
    cr_assert(s.scale == 16384.0f && s.skipped == 2);
    tg_free(d);

    /* GradScaler's defaults: 1999 clean steps keep the scale, the 2000th
     * doubles it */
    d = state_up(65536.0f, 0, 0, 0);
    tg_ready();
    for (int i = 0; i < 1999; i++)
        cr_assert_eq(sl_amp_update_cuda(&e, d, 2.0f, 0.5f, 2000), SL_OK, "%s", sl_errmsg());
    s = state_down(d);
    cr_assert(s.scale == 65536.0f && s.good_steps == 1999, "scale %g good %d", (double)s.scale,
              s.good_steps);
    s = update(&e, d, 0, 2.0f, 0.5f, 2000);
    cr_assert(s.scale == 131072.0f && s.good_steps == 0 && s.skipped == 0);
    tg_free(d);

    /* a growth to inf is not taken (torch's isfinite check); the count
     * restarts */
    d = state_up(P2(127), 1, 0, 0);
    tg_ready();
    s = update(&e, d, 0, 2.0f, 0.5f, 2);
    cr_assert(s.scale == P2(127) && s.good_steps == 0, "scale %g good %d", (double)s.scale,
              s.good_steps);
    tg_free(d);
    tg_close(&e);
}

/* ------------------------------------------------------------- graph */

/* The tail of one fp16 training step, enqueued on the exec's stream: loss
 * (scaled by the state's own scale) into acc, the check of the grads (here
 * dlogits stand for them), the unscaling SGD step on a param of the same
 * size, the scale's update, the compute copy of the param in f16. */
static void step_tail(sl_exec *e, int n, int k, const float *d_logits, const int32_t *d_lab,
                      float *d_dl, double *d_acc, sl_amp_state *d_amp,
                      const sl_sgd_cuda_tensor *d_tab, float *d_p, void *d_p16)
{
    cr_assert_eq(sl_xent_acc_cuda(e, n, k, d_logits, d_lab, 0.1f, &d_amp->scale, d_dl, d_acc),
                 SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_amp_check_cuda(e, d_dl, (int64_t)n * k, d_amp), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_sgd_step_cuda(e, d_tab, 1, 0.1f, 0.9f, 0.0f, 0, 0, d_amp), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(sl_amp_update_cuda(e, d_amp, 2.0f, 0.5f, 2000), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_cast_cuda(e, (int64_t)n * k, d_p, SL_DTYPE_F32, d_p16, SL_DTYPE_F16), SL_OK,
                 "%s", sl_errmsg());
}

Test(train_amp_cuda, step_is_graph_capturable)
{
    const int n = 33, k = 10;
    const int64_t nl = (int64_t)n * k;
    sl_exec e;
    tg_open(&e, NULL);
    cudaStream_t s = sl_cuda_of(&e)->stream;
    float *l = frand(nl, 3, -3, 3), *p = frand(nl, 4, -1, 1), *zero = calloc((size_t)nl, 4);
    int32_t lab[33];
    for (int i = 0; i < n; i++)
        lab[i] = (i * 7) % k;
    float *d_l = tg_upf(l, nl), *d_dl = tg_newf(nl), *d_p = tg_upf(p, nl), *d_m = tg_upf(zero, nl);
    int32_t *d_lab = tg_up(lab, n, 4);
    void *d_p16 = tg_newa(nl, SL_DTYPE_F16);
    double z[2] = {0, 0};
    double *d_acc = tg_up(z, 2, sizeof(double));
    sl_amp_state *d_amp = state_up(1024.0f, 0, 0, 0);
    sl_sgd_cuda_tensor tab = {d_p, d_dl, d_m, nl, 0};
    sl_sgd_cuda_tensor *d_tab = tg_up(&tab, 1, sizeof tab);
    tg_ready();

    /* once outside capture: grows the context's scratch (cudaMalloc may
     * not run inside a capture) and gives the numbers to compare with */
    step_tail(&e, n, k, d_l, d_lab, d_dl, d_acc, d_amp, d_tab, d_p, d_p16);
    double acc1[2];
    tg_down(acc1, d_acc, 2, sizeof(double));
    float *p1 = falloc(nl);
    tg_downf(p1, d_p, nl);

    /* captured: a host synchronization inside would fail the capture */
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    step_tail(&e, n, k, d_l, d_lab, d_dl, d_acc, d_amp, d_tab, d_p, d_p16);
    cudaError_t err = cudaStreamEndCapture(s, &graph);
    cr_assert_eq(err, cudaSuccess, "capture: %s: %s", cudaGetErrorName(err),
                 cudaGetErrorString(err));
    double acc_mid[2];
    tg_down(acc_mid, d_acc, 2, sizeof(double));
    cr_assert(acc_mid[0] == acc1[0] && acc_mid[1] == acc1[1], "capturing ran nothing");
    err = cudaGraphInstantiate(&exec, graph, 0);
    cr_assert_eq(err, cudaSuccess, "instantiate: %s", cudaGetErrorString(err));
    for (int r = 0; r < 2; r++)
        cr_assert_eq(cudaGraphLaunch(exec, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    double acc3[2];
    tg_down(acc3, d_acc, 2, sizeof(double));
    /* the same batch three times: three times the first loss and count */
    cr_assert(fabs(acc3[0] - 3 * acc1[0]) <= 1e-12 * fabs(acc1[0]) && acc3[1] == 3 * acc1[1],
              "acc %.17g %g after 3 steps, %.17g %g after 1", acc3[0], acc3[1], acc1[0], acc1[1]);
    sl_amp_state st = state_down(d_amp);
    cr_assert(st.good_steps == 3 && st.found_inf == 0 && st.skipped == 0 && st.scale == 1024.0f,
              "good %d found %d skipped %d scale %g", st.good_steps, st.found_inf, st.skipped,
              (double)st.scale);
    /* the params moved on each replay; the f16 copy is the last of them */
    float *p3 = falloc(nl), *h16 = falloc(nl);
    tg_downf(p3, d_p, nl);
    tg_downa(h16, d_p16, nl, SL_DTYPE_F16);
    int moved = 0;
    for (int64_t i = 0; i < nl; i++) {
        moved += p3[i] != p1[i];
        cr_assert(h16[i] == tg_round(p3[i], SL_DTYPE_F16), "f16 copy [%lld]", (long long)i);
    }
    cr_assert_gt(moved, nl / 2, "the replayed SGD steps moved %d of %lld params", moved,
                 (long long)nl);
    cr_assert_eq(cudaGraphExecDestroy(exec), cudaSuccess);
    cr_assert_eq(cudaGraphDestroy(graph), cudaSuccess);
    tg_free(d_l), tg_free(d_dl), tg_free(d_p), tg_free(d_m), tg_free(d_lab), tg_free(d_p16);
    tg_free(d_acc), tg_free(d_amp), tg_free(d_tab);
    free(l), free(p), free(zero), free(p1), free(p3), free(h16);
    tg_close(&e);
}

#endif /* SLUICE_TRAIN_CUDA */

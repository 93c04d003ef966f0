/* tests/pipeline/test_geometry.c - random-resized-crop and eval geometry:
 * against a plain transcription of torchvision's get_params that consumes
 * the same draws, statistics of the draws, the fallback center crops, and
 * worked eval examples. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipeline/image/image.h"
#include "testutil.h"

/* --- reference: torchvision RandomResizedCrop.get_params, line by line --- */
static double ref_uniform(sl_rng *r, double a, double b)
{
    return a + (b - a) * (double)sl_rng_uniform(r);
}

static int ref_round(double v) /* the documented rounding: half up */
{
    return (int)floor(v + 0.5);
}

static sl_crop ref_rrc(sl_rng *rng, int width, int height, float smin, float smax, float rmin,
                       float rmax)
{
    sl_crop c;
    double area = (double)height * width;
    double log_ratio[2] = {log((double)rmin), log((double)rmax)};
    for (int t = 0; t < 10; t++) {
        double target_area = area * ref_uniform(rng, smin, smax);
        double aspect_ratio = exp(ref_uniform(rng, log_ratio[0], log_ratio[1]));
        double wf = floor(sqrt(target_area * aspect_ratio) + 0.5);
        double hf = floor(sqrt(target_area / aspect_ratio) + 0.5);
        if (0 < wf && wf <= width && 0 < hf && hf <= height) {
            c.w = (int)wf;
            c.h = (int)hf;
            c.y = (int)sl_rng_below(rng, (uint64_t)(height - c.h + 1)); /* i first */
            c.x = (int)sl_rng_below(rng, (uint64_t)(width - c.w + 1));
            return c;
        }
    }
    double in_ratio = (double)width / height;
    double lo = fmin(rmin, rmax), hi = fmax(rmin, rmax);
    if (in_ratio < lo) {
        c.w = width;
        c.h = ref_round(c.w / lo);
    } else if (in_ratio > hi) {
        c.h = height;
        c.w = ref_round(c.h * hi);
    } else {
        c.w = width;
        c.h = height;
    }
    c.y = (height - c.h) / 2;
    c.x = (width - c.w) / 2;
    return c;
}

static void assert_inside(const sl_crop *c, int W, int H)
{
    cr_assert(c->w >= 1 && c->h >= 1 && c->x >= 0 && c->y >= 0 && c->x + c->w <= W &&
                  c->y + c->h <= H,
              "crop %dx%d+%d+%d outside %dx%d", c->w, c->h, c->x, c->y, W, H);
}

Test(pipeline_geometry, rrc_matches_reference)
{
    static const int sizes[][2] = {{1, 1},      {1, 500},  {500, 1},  {333, 101}, {101, 333},
                                   {4000, 3000}, {17, 9},  {224, 224}, {2, 3},     {1000, 750}};
    static const float params[][4] = {{0.08f, 1.0f, 0.75f, 4.0f / 3.0f},
                                      {0.25f, 0.5f, 1.0f, 1.0f},
                                      {0.9f, 1.0f, 0.5f, 2.0f},
                                      {0.01f, 0.02f, 0.2f, 5.0f}};
    int fallbacks = 0, total = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int W = sizes[s][0], H = sizes[s][1];
        for (size_t p = 0; p < sizeof params / sizeof params[0]; p++) {
            const float *q = params[p];
            for (uint64_t seed = 0; seed < 1500; seed++) {
                sl_rng a = sl_rng_for(seed, p, s), b = a;
                sl_crop got, want = ref_rrc(&b, W, H, q[0], q[1], q[2], q[3]);
                sl_rrc_geometry(&a, W, H, q[0], q[1], q[2], q[3], &got);
                cr_assert(got.x == want.x && got.y == want.y && got.w == want.w &&
                              got.h == want.h,
                          "%dx%d params %zu seed %llu: got %dx%d+%d+%d want %dx%d+%d+%d", W, H, p,
                          (unsigned long long)seed, got.w, got.h, got.x, got.y, want.w, want.h,
                          want.x, want.y);
                /* Same number of draws: the streams end in the same state. */
                cr_assert_eq(a.s, b.s, "%dx%d seed %llu: draw count differs", W, H,
                             (unsigned long long)seed);
                assert_inside(&got, W, H);
                total++;
                /* A fallback consumes exactly 20 draws (so does a success on
                 * the 9th try: this only shows both kinds occur). */
                sl_rng c = sl_rng_for(seed, p, s);
                for (int k = 0; k < 20; k++)
                    sl_rng_next(&c);
                fallbacks += c.s == a.s;
            }
        }
    }
    /* Both branches were exercised. */
    cr_assert(fallbacks > 0 && fallbacks < total, "fallbacks %d of %d", fallbacks, total);
}

/* With smax small enough that every first try fits, the draws are the
 * textbook distributions: area fraction ~ U(smin, smax), log ratio ~
 * U(log rmin, log rmax), position uniform over the free range. */
Test(pipeline_geometry, rrc_statistics)
{
    const int W = 2000, H = 2000, N = 20000;
    const float smin = 0.08f, smax = 0.5f, rmin = 0.75f, rmax = 4.0f / 3.0f;
    double sum_a = 0, sum_lr = 0, sum_lr2 = 0, sum_px = 0, amin = 1, amax = 0;
    int npx = 0;
    for (int i = 0; i < N; i++) {
        sl_rng r = sl_rng_for(42, 0, (uint64_t)i);
        sl_crop c;
        sl_rrc_geometry(&r, W, H, smin, smax, rmin, rmax, &c);
        assert_inside(&c, W, H);
        double a = (double)c.w * c.h / ((double)W * H), lr = log((double)c.w / c.h);
        sum_a += a;
        sum_lr += lr;
        sum_lr2 += lr * lr;
        amin = fmin(amin, a);
        amax = fmax(amax, a);
        if (c.w < W) {
            sum_px += (double)c.x / (W - c.w);
            npx++;
        }
    }
    /* Rounding w and h (>= 283 px here) moves the area by < 0.4 %. */
    cr_assert(amin >= smin * 0.996 && amax <= smax * 1.004, "area range [%g, %g]", amin, amax);
    double mean_a = sum_a / N, want_a = (smin + smax) / 2;
    double se_a = (smax - smin) / sqrt(12.0) / sqrt(N);
    cr_assert(fabs(mean_a - want_a) < 5 * se_a + 0.002, "mean area %g want %g", mean_a, want_a);
    double span = log(rmax) - log(rmin);
    double mean_lr = sum_lr / N, var_lr = sum_lr2 / N - mean_lr * mean_lr;
    cr_assert(fabs(mean_lr) < 5 * span / sqrt(12.0) / sqrt(N), "mean log ratio %g", mean_lr);
    cr_assert(fabs(var_lr - span * span / 12) < 0.05 * span * span / 12, "var log ratio %g want %g",
              var_lr, span * span / 12);
    double mean_px = sum_px / npx;
    cr_assert(fabs(mean_px - 0.5) < 5 / sqrt(12.0) / sqrt(npx), "mean position %g", mean_px);
}

/* Images too thin for any try: the documented center crop, every seed. */
Test(pipeline_geometry, rrc_fallback_center_crop)
{
    static const struct {
        int W, H;
        sl_crop want;
    } cases[] = {
        {1, 1000, {0, 499, 1, 1}},     /* W/H < 3/4: w = W, h = round(1 / 0.75) = 1 */
        {1000, 1, {499, 0, 1, 1}},     /* W/H > 4/3: h = H, w = round(4/3) = 1 */
        {2, 3000, {0, 1498, 2, 3}},    /* h = round(2 / 0.75) = round(2.67) = 3 */
        {3000, 2, {1498, 0, 3, 2}},    /* w = round(2 * 4/3) = 3 */
        {1, 1, {0, 0, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (uint64_t seed = 0; seed < 200; seed++) {
            sl_rng r = sl_rng_for(seed, 1, 2);
            sl_crop c;
            sl_rrc_geometry(&r, cases[i].W, cases[i].H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &c);
            const sl_crop *w = &cases[i].want;
            cr_assert(c.x == w->x && c.y == w->y && c.w == w->w && c.h == w->h,
                      "%dx%d seed %llu: got %dx%d+%d+%d", cases[i].W, cases[i].H,
                      (unsigned long long)seed, c.w, c.h, c.x, c.y);
        }
    }
    /* Ratio inside [rmin, rmax] but the area never fits: the whole image. */
    for (uint64_t seed = 0; seed < 200; seed++) {
        sl_rng r = sl_rng_for(seed, 3, 4);
        sl_crop c;
        sl_rrc_geometry(&r, 350, 300, 1.5f, 2.0f, 0.75f, 4.0f / 3.0f, &c);
        cr_assert(c.x == 0 && c.y == 0 && c.w == 350 && c.h == 300, "got %dx%d+%d+%d", c.w, c.h,
                  c.x, c.y);
    }
}

Test(pipeline_geometry, eval_worked_examples)
{
    static const struct {
        int W, H, oh, ow;
        float cf;
        sl_crop want;
    } cases[] = {
        /* S = round(224 / 0.875) = 256; 224 * 375/256 = 328.1 -> 328, centered. */
        {500, 375, 224, 224, 0.875f, {86, 23, 328, 328}},
        {375, 500, 224, 224, 0.875f, {23, 86, 328, 328}},
        /* 224 * 224/256 = 196 */
        {224, 224, 224, 224, 0.875f, {14, 14, 196, 196}},
        /* oh 224 ow 160: S = 256, px = 375/256: 160 px = 234.4 -> 234 */
        {500, 375, 224, 160, 0.875f, {133, 23, 234, 328}},
        /* crop_fraction 1: the shorter side is the crop */
        {256, 256, 224, 224, 1.0f, {0, 0, 256, 256}},
        /* tiny sources: 224 * 3/256 = 2.6 -> 3 */
        {7, 3, 224, 224, 0.875f, {2, 0, 3, 3}},
        {1, 1, 224, 224, 0.875f, {0, 0, 1, 1}},
        {1, 500, 31, 17, 0.875f, {0, 249, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_crop c;
        sl_eval_geometry(cases[i].W, cases[i].H, cases[i].oh, cases[i].ow, cases[i].cf, &c);
        const sl_crop *w = &cases[i].want;
        cr_assert(c.x == w->x && c.y == w->y && c.w == w->w && c.h == w->h,
                  "case %zu %dx%d: got %dx%d+%d+%d want %dx%d+%d+%d", i, cases[i].W, cases[i].H,
                  c.w, c.h, c.x, c.y, w->w, w->h, w->x, w->y);
    }
}

/* Every size: inside, centered, and the size the two-step transform implies. */
Test(pipeline_geometry, eval_sweep)
{
    uint64_t st = 7;
    for (int i = 0; i < 20000; i++) {
        int W = 1 + (int)(tu_rand(&st) % 3000), H = 1 + (int)(tu_rand(&st) % 3000);
        int oh = 1 + (int)(tu_rand(&st) % 400), ow = 1 + (int)(tu_rand(&st) % 400);
        float cf = 0.5f + 0.5f * (float)(tu_rand(&st) % 1000) / 1000.0f;
        sl_crop c;
        sl_eval_geometry(W, H, oh, ow, cf, &c);
        assert_inside(&c, W, H);
        cr_assert(abs((W - c.w - c.x) - c.x) <= 1 && abs((H - c.h - c.y) - c.y) <= 1,
                  "%dx%d: crop %dx%d+%d+%d not centered", W, H, c.w, c.h, c.x, c.y);
        double S = floor((oh > ow ? oh : ow) / (double)cf + 0.5);
        double px = (W < H ? W : H) / S;
        double ew = fmin(fmax(ow * px, 1), W), eh = fmin(fmax(oh * px, 1), H);
        cr_assert(fabs(c.w - ew) <= 0.5 + 1e-9 && fabs(c.h - eh) <= 0.5 + 1e-9,
                  "%dx%d out %dx%d cf %g: crop %dx%d want %.2fx%.2f", W, H, ow, oh, cf, c.w, c.h,
                  ew, eh);
    }
}

/* tests/records/test_resize_tap.c - records/resize_tap.h, the resize
 * filter's one formula: the CPU's tap tables (sl_resize_taps) against the
 * GPU kernel's per-pixel path (gdec_cuda.cu calls sl_resize_tap_at(s, d, x)
 * for each output x; the function is __host__ __device__, so this host call
 * is the kernel's code), bit for bit; the taps' bits against a digest taken
 * from the formulas before they were shared (records/resize.c's
 * sl_resize_taps and gdec_cuda.cu's gd_tap, identical then), so an edit that
 * moves any tap by an ulp fails; the bilinear centre unfused (cases where a
 * fused multiply-add gives other taps); and the taps' invariants.
 *
 * Sizes: every s, d in 1..SWEEP (area from s >= 2d, bilinear shrink and
 * enlargement, s == d, d == 1), then the large and edge pairs of `big`.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "records/resize_tap.h"

#define SWEEP 200

/* {s, d}: JPEG's largest side, scale exactly 2 and just below it (area /
 * bilinear switch), 1-pixel lines, huge enlargements and shrinks. */
static const int big[][2] = {
    {65535, 224},   {65535, 1},     {65500, 32750}, {65499, 32750}, {65500, 32751},
    {224, 65500},   {1, 65535},     {1 << 20, 3},   {3, 1 << 16},   {8192, 8191},
    {8191, 8192},   {46341, 46340}, {4096, 2048},   {4095, 2048},   {600, 224},
    {868, 224},     {342, 256},     {548, 224},     {1, 1},         {2, 1},
};
#define NBIG (sizeof big / sizeof *big)

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int tap_eq(sl_resize_tap a, sl_resize_tap b)
{
    return a.i0 == b.i0 && a.n == b.n && fbits(a.w0) == fbits(b.w0) &&
           fbits(a.wmid) == fbits(b.wmid) && fbits(a.wn) == fbits(b.wn);
}

/* FNV-1a over i0, n and the weights' bit patterns, little-endian. */
static uint64_t fnv_u32(uint64_t h, uint32_t v)
{
    for (int k = 0; k < 4; k++) {
        h ^= (v >> (8 * k)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_taps(uint64_t h, const sl_resize_tap *t, int d)
{
    for (int x = 0; x < d; x++) {
        h = fnv_u32(h, (uint32_t)t[x].i0);
        h = fnv_u32(h, (uint32_t)t[x].n);
        h = fnv_u32(h, fbits(t[x].w0));
        h = fnv_u32(h, fbits(t[x].wmid));
        h = fnv_u32(h, fbits(t[x].wn));
    }
    return h;
}

/* Calls f(s, d) for the sweep, then for big. */
static void each_pair(void (*f)(int s, int d, void *arg), void *arg)
{
    for (int s = 1; s <= SWEEP; s++)
        for (int d = 1; d <= SWEEP; d++)
            f(s, d, arg);
    for (size_t k = 0; k < NBIG; k++)
        f(big[k][0], big[k][1], arg);
}

static sl_resize_tap *table(int s, int d)
{
    sl_resize_tap *t = malloc(sizeof *t * (size_t)d);
    cr_assert_not_null(t);
    sl_resize_taps(t, s, d);
    return t;
}

static void cpu_vs_kernel(int s, int d, void *arg)
{
    (void)arg;
    sl_resize_tap *t = table(s, d);
    for (int x = 0; x < d; x++) {
        sl_resize_tap g = sl_resize_tap_at(s, d, x); /* gd_resize_kernel's call */
        cr_assert(tap_eq(t[x], g),
                  "%d -> %d, x %d: table {%d, %d, %a, %a, %a}, kernel {%d, %d, %a, %a, %a}", s,
                  d, x, t[x].i0, t[x].n, t[x].w0, t[x].wmid, t[x].wn, g.i0, g.n, g.w0, g.wmid,
                  g.wn);
    }
    free(t);
}

/* The CPU's tables and the GPU kernel's taps are the same bits. */
Test(resize_tap, table_equals_kernel_per_x)
{
    cr_assert_eq(sizeof(sl_resize_tap), 20, "sl_resize_tap has padding");
    each_pair(cpu_vs_kernel, NULL);
}

static void hash_pair(int s, int d, void *arg)
{
    sl_resize_tap *t = table(s, d);
    *(uint64_t *)arg = hash_taps(*(uint64_t *)arg, t, d);
    free(t);
}

/* Every tap of the sweep and of big, as the formulas gave them before they
 * were shared (the digest was taken from that code): the shared one is the
 * same filter to the bit, and stays so. */
Test(resize_tap, bits_unchanged)
{
    uint64_t h = 0xcbf29ce484222325ull;
    each_pair(hash_pair, &h);
    cr_assert_eq(h, 0x86eb529a609bbb43ull, "taps' digest %#llx: a tap moved",
                 (unsigned long long)h);
}

/* The bilinear centre (x + 0.5) * scale - 0.5 rounds the product, then the
 * sum. Fused into one fma (nvcc's default on the device, which
 * sl_resize_mul prevents there; gcc's too if these files were built with
 * FMA), these centres land an ulp lower and the taps change: the first
 * would take pixel 0 with a weight of 1e-16 besides pixel 1, the second
 * two pixels instead of one, the third w0 2^-53 instead of 2^-52. */
Test(resize_tap, bilinear_centre_not_fused)
{
    static const struct {
        int s, d, x;
        sl_resize_tap want;
    } c[] = {
        {2, 6, 4, {1, 1, 1.0f, 0, 0}},
        {2, 10, 2, {0, 1, 1.0f, 0, 0}},
        {2, 98, 73, {0, 2, 0x1p-52f, 0, 1.0f}},
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        sl_resize_tap g = sl_resize_tap_at(c[k].s, c[k].d, c[k].x);
        cr_assert(tap_eq(g, c[k].want), "%d -> %d, x %d: {%d, %d, %a, %a, %a}", c[k].s, c[k].d,
                  c[k].x, g.i0, g.n, g.w0, g.wmid, g.wn);
        /* the case is a real one: fma's centre is another number */
        double scale = (double)c[k].s / c[k].d;
        volatile double p = (c[k].x + 0.5) * scale; /* volatile: rounded here */
        cr_assert(fma(c[k].x + 0.5, scale, -0.5) != p - 0.5, "%d -> %d, x %d: no fma case",
                  c[k].s, c[k].d, c[k].x);
    }
}

static void invariants(int s, int d, void *arg)
{
    (void)arg;
    sl_resize_tap *t = table(s, d);
    int area = (double)s / d >= 2.0;
    for (int x = 0; x < d; x++) {
        const sl_resize_tap *p = &t[x];
        cr_assert(p->i0 >= 0 && p->n >= 1 && p->i0 + p->n <= s, "%d -> %d, x %d: %d + %d", s, d,
                  x, p->i0, p->n);
        double sum = p->n == 1 ? p->w0 : p->w0 + (double)(p->n - 2) * p->wmid + p->wn;
        cr_assert(fabs(sum - 1) < 1e-5, "%d -> %d, x %d: weights sum to %.9g", s, d, x, sum);
        if (area) {
            cr_assert(p->n >= 2 && p->w0 > 0 && p->wn > 0 && p->w0 <= p->wmid &&
                          p->wn <= p->wmid,
                      "%d -> %d, x %d: area tap {%d, %a, %a, %a}", s, d, x, p->n, p->w0, p->wmid,
                      p->wn);
            /* consecutive intervals meet: the next starts in this one's last pixel or after */
            if (x + 1 < d)
                cr_assert(t[x + 1].i0 == p->i0 + p->n - 1 || t[x + 1].i0 == p->i0 + p->n,
                          "%d -> %d, x %d: gap or overlap", s, d, x);
        } else {
            cr_assert(p->n <= 2 && p->wmid == 0 && p->w0 > 0, "%d -> %d, x %d: bilinear %d %a",
                      s, d, x, p->n, p->w0);
        }
    }
    free(t);
}

/* In range, weights summing to 1, area intervals tiling the line. */
Test(resize_tap, invariants)
{
    each_pair(invariants, NULL);
}

/* tests/train/ops/test_bf16_cpu.c - the cpu backend with bf16 activations
 * (issue 40): the rounding (golden bits), every pass against the f32 pass
 * on the same (bf16-representable) inputs (norm_kern_cpu.h and
 * act_kern_cpu.h promise the f32 arithmetic on the widened values with one
 * rounding per store, so the bf16 output is the f32 output rounded, bit for
 * bit, and the f32 statistics are equal), the fused BN slots against the
 * unfused ops in both types, two threads against one, the convolutions
 * against the ref loops within a bound derived from bf16's rounding, and
 * the choice of precision: bf16 where oneDNN's ISA has bf16 dot products,
 * fp32 by name where it has not (DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA
 * forced down, as on a CPU without AVX512-BF16).
 *
 * The passes are tested on an exec whose act is set directly (white-box),
 * so they run on any CPU; the convolutions need oneDNN's bf16 kernels and
 * skip without them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/cpu_int.h"
#include "train/ops/ops.h"

static float urand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_rand(st) >> 11) * (1.0 / 9007199254740992.0));
}

static void *xalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert(p, "calloc %zu", bytes);
    return p;
}

/* n values in [lo, hi) that bf16 holds exactly (so both types see the same). */
static float *rnd_bf(int64_t n, float lo, float hi, uint64_t *st)
{
    float *p = xalloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = sl_bf16_round(urand(st, lo, hi));
    return p;
}

static uint16_t *to_bf(int64_t n, const float *f)
{
    uint16_t *p = xalloc((size_t)n * sizeof *p);
    sl_bf16_narrow(n, f, p);
    return p;
}

/* The bf16 tensor got equals the f32 tensor want rounded, bit for bit. */
static void eq_rounded(const uint16_t *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], sl_bf16_st(want[i]), "%s[%lld]: bf16 %#06x, f32 %.9g rounds to %#06x",
                     what, (long long)i, got[i], (double)want[i], sl_bf16_st(want[i]));
}

static void eq_bits(const void *a, const void *b, size_t bytes, const char *what)
{
    cr_assert_eq(memcmp(a, b, bytes), 0, "%s differ", what);
}

static void exec_act(sl_exec *e, int threads, sl_dtype act)
{
    cr_assert_eq(sl_exec_init(e, SL_BACKEND_CPU, threads), SL_OK, "%s", sl_errmsg());
    e->act = act; /* white-box: the passes without asking oneDNN for bf16 */
}

/* ------------------------------------------------------------ rounding */

Test(train_bf16, rounding_golden)
{
    static const struct {
        uint32_t f;
        uint16_t h;
    } g[] = {
        {0x3f800000, 0x3f80}, /* 1 */
        {0x3f808000, 0x3f80}, /* 1 + 2^-8: a tie, to even (down) */
        {0x3f818000, 0x3f82}, /* 1 + 3*2^-8: a tie, to even (up) */
        {0x3f808001, 0x3f81}, /* just above the tie */
        {0x80000000, 0x8000}, /* -0 */
        {0x7f800000, 0x7f80}, /* inf */
        {0x7f7fffff, 0x7f80}, /* the largest float rounds to inf */
        {0x7fc00000, 0x7fc0}, /* quiet NaN */
        {0x7f800001, 0x7fc0}, /* signalling NaN: quiet, not inf */
        {0xffc00001, 0xffc0}, /* negative NaN keeps its sign */
        {0x00008000, 0x0000}, /* denormal tie to even */
        {0x00018000, 0x0002}, /* denormal tie to even (up) */
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
        float f;
        memcpy(&f, &g[i].f, 4);
        cr_assert_eq(sl_bf16_st(f), g[i].h, "%#010x -> %#06x, want %#06x", g[i].f,
                     sl_bf16_st(f), g[i].h);
        uint32_t back = (uint32_t)g[i].h << 16, w;
        float fb = sl_bf16_ld(g[i].h);
        memcpy(&w, &fb, 4);
        cr_assert_eq(w, back);
    }
    /* the out-of-line loops match the inline ones */
    uint64_t st = 3;
    float v[301];
    for (int i = 0; i < 301; i++)
        v[i] = urand(&st, -1e3f, 1e3f);
    uint16_t h[301];
    float w[301];
    sl_bf16_narrow(301, v, h);
    sl_bf16_widen(301, h, w);
    for (int i = 0; i < 301; i++)
        cr_assert(h[i] == sl_bf16_st(v[i]) && w[i] == sl_bf16_round(v[i]));
}

/* ---------------------------------------------------------- batch norm */

/* One BN case: inputs bf16-exact, f32 outputs per type. */
typedef struct bnc {
    int64_t rows;
    int c;
    float *x, *dy, *z, *r, *gamma, *beta;
} bnc;

static void bnc_make(bnc *b, int64_t rows, int c, uint64_t seed)
{
    uint64_t st = seed;
    b->rows = rows, b->c = c;
    int64_t n = rows * c;
    b->x = rnd_bf(n, -3, 3, &st);
    b->dy = rnd_bf(n, -1, 1, &st);
    b->z = rnd_bf(n, -1, 1, &st); /* a ReLU mask source: half of it <= 0 */
    b->r = rnd_bf(n, -2, 2, &st);
    b->gamma = rnd_bf(c, 0.5f, 2, &st);
    b->beta = rnd_bf(c, -1, 1, &st);
    for (int64_t i = 0; i < n; i++) /* per-channel offsets: channels differ */
        b->x[i] = sl_bf16_round(b->x[i] + (float)(i % c) * 0.25f);
}

static void bnc_free(bnc *b)
{
    free(b->x), free(b->dy), free(b->z), free(b->r), free(b->gamma), free(b->beta);
}

/* Per-channel f32 state of one run: running stats in, saved stats, grads out. */
typedef struct bns {
    float *rm, *rv, *sm, *si, *dg, *db;
} bns;

static void bns_make(bns *s, int c)
{
    float **p[] = {&s->rm, &s->rv, &s->sm, &s->si, &s->dg, &s->db};
    for (size_t i = 0; i < 6; i++)
        *p[i] = xalloc((size_t)c * sizeof(float));
    for (int ch = 0; ch < c; ch++)
        s->rm[ch] = 0.5f, s->rv[ch] = 2.0f;
}

static void bns_eq(const bns *a, const bns *b, int c)
{
    size_t cb = (size_t)c * sizeof(float);
    eq_bits(a->rm, b->rm, cb, "running mean");
    eq_bits(a->rv, b->rv, cb, "running var");
    eq_bits(a->sm, b->sm, cb, "saved mean");
    eq_bits(a->si, b->si, cb, "saved invstd");
    eq_bits(a->dg, b->dg, cb, "dgamma");
    eq_bits(a->db, b->db, cb, "dbeta");
}

static void bns_free(bns *s)
{
    free(s->rm), free(s->rv), free(s->sm), free(s->si), free(s->dg), free(s->db);
}

/* Shapes: tiny, a row count no multiple of the blocks, wide channels,
 * one big enough for two threads to split; 8 and 32 channels (constants in
 * the kernels, 8 as wide rows of 32 with 3 rows left over). */
static const int64_t bn_shapes[][2] = {{2, 3},           {1001, 13}, {77, 2048},
                                       {25088 + 37, 16}, {1003, 8},  {333, 32}};
#define N_BN (sizeof bn_shapes / sizeof *bn_shapes)

Test(train_bf16, bn_passes_are_f32_rounded)
{
    for (size_t k = 0; k < N_BN; k++) {
        bnc b;
        bnc_make(&b, bn_shapes[k][0], (int)bn_shapes[k][1], 40 + k);
        int64_t n = b.rows * b.c;
        int c = b.c;
        sl_exec e32, e16;
        exec_act(&e32, 1, SL_DTYPE_F32);
        exec_act(&e16, 1, SL_DTYPE_BF16);
        bns s32, s16;
        bns_make(&s32, c), bns_make(&s16, c);
        float *y32 = xalloc((size_t)n * 4), *dx32 = xalloc((size_t)n * 4);
        uint16_t *x16 = to_bf(n, b.x), *dy16 = to_bf(n, b.dy), *y16 = xalloc((size_t)n * 2),
                 *dx16 = xalloc((size_t)n * 2);
        /* train forward, backward */
        cr_assert_eq(sl_bn_fwd_train(&e32, b.rows, c, b.x, b.gamma, b.beta, 0.1f, 1e-5f, s32.rm,
                                     s32.rv, y32, s32.sm, s32.si), SL_OK);
        cr_assert_eq(sl_bn_fwd_train(&e16, b.rows, c, (float *)x16, b.gamma, b.beta, 0.1f,
                                     1e-5f, s16.rm, s16.rv, (float *)y16, s16.sm, s16.si), SL_OK);
        eq_rounded(y16, y32, n, "bn y");
        cr_assert_eq(sl_bn_bwd(&e32, b.rows, c, b.x, b.dy, b.gamma, s32.sm, s32.si, dx32, s32.dg,
                               s32.db), SL_OK);
        cr_assert_eq(sl_bn_bwd(&e16, b.rows, c, (float *)x16, (float *)dy16, b.gamma, s16.sm,
                               s16.si, (float *)dx16, s16.dg, s16.db), SL_OK);
        eq_rounded(dx16, dx32, n, "bn dx");
        bns_eq(&s32, &s16, c);
        /* eval */
        cr_assert_eq(sl_bn_fwd_eval(&e32, b.rows, c, b.x, b.gamma, b.beta, s32.rm, s32.rv, 1e-5f,
                                    y32), SL_OK);
        cr_assert_eq(sl_bn_fwd_eval(&e16, b.rows, c, (float *)x16, b.gamma, b.beta, s16.rm,
                                    s16.rv, 1e-5f, (float *)y16), SL_OK);
        eq_rounded(y16, y32, n, "bn eval y");
        /* sync-BN's pieces on a world of one */
        float *sl32 = xalloc((size_t)c * 12), *sl16 = xalloc((size_t)c * 12);
        float *mv32 = xalloc((size_t)c * 8), *mv16 = xalloc((size_t)c * 8);
        cr_assert_eq(sl_bn_moments(&e32, b.rows, c, b.x, 1, 0, sl32), SL_OK);
        cr_assert_eq(sl_bn_moments(&e16, b.rows, c, (float *)x16, 1, 0, sl16), SL_OK);
        eq_bits(sl32, sl16, (size_t)c * 12, "bn_moments");
        cr_assert_eq(sl_bn_moments_merge(&e32, b.rows, c, 1, sl32, mv32, mv32 + c), SL_OK);
        cr_assert_eq(sl_bn_moments_merge(&e16, b.rows, c, 1, sl16, mv16, mv16 + c), SL_OK);
        cr_assert_eq(sl_bn_fwd_apply(&e32, b.rows, c, b.x, b.gamma, b.beta, mv32, mv32 + c,
                                     (double)b.rows, 0.1f, 1e-5f, s32.rm, s32.rv, y32, s32.sm,
                                     s32.si), SL_OK);
        cr_assert_eq(sl_bn_fwd_apply(&e16, b.rows, c, (float *)x16, b.gamma, b.beta, mv16,
                                     mv16 + c, (double)b.rows, 0.1f, 1e-5f, s16.rm, s16.rv,
                                     (float *)y16, s16.sm, s16.si), SL_OK);
        eq_rounded(y16, y32, n, "bn_fwd_apply y");
        cr_assert_eq(sl_bn_bwd_reduce(&e32, b.rows, c, b.x, b.dy, s32.sm, s32.si, mv32,
                                      mv32 + c), SL_OK);
        cr_assert_eq(sl_bn_bwd_reduce(&e16, b.rows, c, (float *)x16, (float *)dy16, s16.sm,
                                      s16.si, mv16, mv16 + c), SL_OK);
        eq_bits(mv32, mv16, (size_t)c * 8, "bn_bwd_reduce");
        cr_assert_eq(sl_bn_bwd_apply(&e32, b.rows, c, b.x, b.dy, b.gamma, s32.sm, s32.si, mv32,
                                     mv32 + c, (double)b.rows, dx32), SL_OK);
        cr_assert_eq(sl_bn_bwd_apply(&e16, b.rows, c, (float *)x16, (float *)dy16, b.gamma,
                                     s16.sm, s16.si, mv16, mv16 + c, (double)b.rows,
                                     (float *)dx16), SL_OK);
        eq_rounded(dx16, dx32, n, "bn_bwd_apply dx");
        bns_eq(&s32, &s16, c);
        free(sl32), free(sl16), free(mv32), free(mv16);
        free(y32), free(dx32), free(x16), free(dy16), free(y16), free(dx16);
        bns_free(&s32), bns_free(&s16);
        sl_exec_fini(&e32), sl_exec_fini(&e16);
        bnc_free(&b);
    }
}

/* The fused slots (bn_fwd_train_act with and without the shortcut and the
 * ReLU, bn_bwd_act) against the unfused ops, bit for bit, in both types
 * and on one and two threads. */
static void fused_case(const bnc *b, sl_dtype act, int threads)
{
    int64_t n = b->rows * b->c;
    int c = b->c;
    size_t es = act == SL_DTYPE_BF16 ? 2 : 4, nb = (size_t)n * es;
    char *x = xalloc(nb), *r = xalloc(nb), *z = xalloc(nb), *dy = xalloc(nb);
    char *yf = xalloc(nb), *yu = xalloc(nb), *dzf = xalloc(nb), *dzu = xalloc(nb),
         *dxf = xalloc(nb), *dxu = xalloc(nb);
    const float *src[] = {b->x, b->r, b->z, b->dy};
    char *dst[] = {x, r, z, dy};
    for (int i = 0; i < 4; i++)
        if (es == 2)
            sl_bf16_narrow(n, src[i], (uint16_t *)dst[i]);
        else
            memcpy(dst[i], src[i], nb);
    sl_exec e;
    exec_act(&e, threads, act);
    for (int mode = 0; mode < 3; mode++) { /* relu only, shortcut only, both */
        const float *rp = mode ? (const float *)r : NULL;
        int relu = mode != 1;
        bns f, u;
        bns_make(&f, c), bns_make(&u, c);
        cr_assert_eq(sl_bn_fwd_train_act(&e, b->rows, c, (float *)x, b->gamma, b->beta, 0.1f,
                                         1e-5f, f.rm, f.rv, rp, relu, (float *)yf, f.sm, f.si),
                     SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_bn_fwd_train(&e, b->rows, c, (float *)x, b->gamma, b->beta, 0.1f, 1e-5f,
                                     u.rm, u.rv, (float *)yu, u.sm, u.si), SL_OK);
        if (rp)
            cr_assert_eq(sl_add(&e, n, (float *)yu, rp, (float *)yu), SL_OK);
        if (relu)
            cr_assert_eq(sl_relu_fwd(&e, n, (float *)yu, (float *)yu), SL_OK);
        eq_bits(yf, yu, nb, "fused forward y");
        /* backward: the ReLU mask from z, dz masked in place, dx */
        memcpy(dzf, dy, nb), memcpy(dzu, dy, nb);
        cr_assert_eq(sl_bn_bwd_act(&e, b->rows, c, (float *)x, (float *)z, (float *)dzf,
                                   b->gamma, f.sm, f.si, (float *)dxf, f.dg, f.db), SL_OK);
        cr_assert_eq(sl_relu_bwd(&e, n, (float *)z, (float *)dzu, (float *)dzu), SL_OK);
        cr_assert_eq(sl_bn_bwd(&e, b->rows, c, (float *)x, (float *)dzu, b->gamma, u.sm, u.si,
                               (float *)dxu, u.dg, u.db), SL_OK);
        eq_bits(dzf, dzu, nb, "masked dz");
        eq_bits(dxf, dxu, nb, "fused backward dx");
        bns_eq(&f, &u, c);
        /* dx over dz itself, grads not wanted */
        cr_assert_eq(sl_bn_bwd_act(&e, b->rows, c, (float *)x, (float *)z, (float *)dzf,
                                   b->gamma, f.sm, f.si, (float *)dzf, NULL, NULL), SL_OK);
        eq_bits(dzf, dxu, nb, "fused backward dx in place");
        bns_free(&f), bns_free(&u);
    }
    sl_exec_fini(&e);
    free(x), free(r), free(z), free(dy), free(yf), free(yu), free(dzf), free(dzu), free(dxf);
    free(dxu);
}

Test(train_bf16, fused_bn_is_unfused_bits)
{
    for (size_t k = 0; k < N_BN; k++) {
        bnc b;
        bnc_make(&b, bn_shapes[k][0], (int)bn_shapes[k][1], 50 + k);
        for (int t = 1; t <= 2; t++) {
            fused_case(&b, SL_DTYPE_F32, t);
            fused_case(&b, SL_DTYPE_BF16, t);
        }
        bnc_free(&b);
    }
}

/* ------------------------------------------------- relu, add, pooling */

Test(train_bf16, elementwise_and_pool_passes_are_f32_rounded)
{
    uint64_t st = 7;
    const int64_t n = 70001;
    float *a = rnd_bf(n, -2, 2, &st), *b = rnd_bf(n, -2, 2, &st), *y32 = xalloc(n * 4);
    uint16_t *a16 = to_bf(n, a), *b16 = to_bf(n, b), *y16 = xalloc(n * 2);
    a[5] = NAN; /* NaN through relu, its bits kept quiet */
    a16[5] = sl_bf16_st(NAN);
    sl_exec e32, e16;
    exec_act(&e32, 1, SL_DTYPE_F32);
    exec_act(&e16, 1, SL_DTYPE_BF16);
    cr_assert_eq(sl_relu_fwd(&e32, n, a, y32), SL_OK);
    cr_assert_eq(sl_relu_fwd(&e16, n, (float *)a16, (float *)y16), SL_OK);
    eq_rounded(y16, y32, n, "relu");
    cr_assert_eq(sl_relu_bwd(&e32, n, a, b, y32), SL_OK);
    cr_assert_eq(sl_relu_bwd(&e16, n, (float *)a16, (float *)b16, (float *)y16), SL_OK);
    eq_rounded(y16, y32, n, "relu_bwd");
    cr_assert_eq(sl_add(&e32, n, a, b, y32), SL_OK);
    cr_assert_eq(sl_add(&e16, n, (float *)a16, (float *)b16, (float *)y16), SL_OK);
    eq_rounded(y16, y32, n, "add");
    /* aliased: y = a (in place), y = a + a */
    memcpy(y16, a16, n * 2);
    cr_assert_eq(sl_add(&e16, n, (float *)y16, (float *)b16, (float *)y16), SL_OK);
    eq_rounded(y16, y32, n, "add in place");
    cr_assert_eq(sl_add(&e32, n, a, a, y32), SL_OK);
    memcpy(y16, a16, n * 2);
    cr_assert_eq(sl_add(&e16, n, (float *)y16, (float *)y16, (float *)y16), SL_OK);
    eq_rounded(y16, y32, n, "add self");

    /* max pool 3x3/2 pad 1 (ResNet's stem) and 2x2/2, both ways */
    const int pools[][4] = {{3, 3, 2, 1}, {2, 2, 2, 0}};
    for (int k = 0; k < 2; k++) {
        sl_pool_shape sh;
        cr_assert_eq(sl_pool_shape_init(&sh, 3, 13, 11, 19, pools[k][0], pools[k][2],
                                        pools[k][3]), SL_OK);
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c, ny = (int64_t)sh.n * sh.p * sh.q * sh.c;
        float *px = rnd_bf(nx, -4, 4, &st), *pdy = rnd_bf(ny, -1, 1, &st);
        for (int64_t i = 0; i < nx; i += 7)
            px[i] = px[i / 2]; /* ties: the first maximum wins in both */
        float *py = xalloc(ny * 4), *pdx = xalloc(nx * 4);
        uint16_t *px16 = to_bf(nx, px), *pdy16 = to_bf(ny, pdy), *py16 = xalloc(ny * 2),
                 *pdx16 = xalloc(nx * 2);
        int32_t *arg32 = xalloc(ny * 4), *arg16 = xalloc(ny * 4);
        cr_assert_eq(sl_maxpool_fwd(&e32, &sh, px, py, arg32), SL_OK);
        cr_assert_eq(sl_maxpool_fwd(&e16, &sh, (float *)px16, (float *)py16, arg16), SL_OK);
        eq_rounded(py16, py, ny, "maxpool y");
        eq_bits(arg32, arg16, ny * 4, "maxpool argmax");
        cr_assert_eq(sl_maxpool_bwd(&e32, &sh, pdy, arg32, pdx), SL_OK);
        cr_assert_eq(sl_maxpool_bwd(&e16, &sh, (float *)pdy16, arg16, (float *)pdx16), SL_OK);
        eq_rounded(pdx16, pdx, nx, "maxpool dx");
        /* an argmax outside its window is refused, not dropped */
        arg16[ny / 2] = 0;
        cr_assert_eq(sl_maxpool_bwd(&e16, &sh, (float *)pdy16, arg16, (float *)pdx16),
                     SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "not in its window"), "%s", sl_errmsg());
        free(px), free(pdy), free(py), free(pdx), free(px16), free(pdy16), free(py16);
        free(pdx16), free(arg32), free(arg16);
    }
    /* global average pool: x bf16 -> y f32; dy f32 -> dx bf16 */
    const int gn = 3, ghw = 300, gc = 37;
    float *gx = rnd_bf((int64_t)gn * ghw * gc, -3, 3, &st), *gdy = rnd_bf(gn * gc, -1, 1, &st);
    float *gy32 = xalloc(gn * gc * 4), *gy16 = xalloc(gn * gc * 4);
    float *gdx = xalloc((size_t)gn * ghw * gc * 4);
    uint16_t *gx16 = to_bf((int64_t)gn * ghw * gc, gx), *gdx16 = xalloc((size_t)gn * ghw * gc * 2);
    cr_assert_eq(sl_gap_fwd(&e32, gn, ghw, gc, gx, gy32), SL_OK);
    cr_assert_eq(sl_gap_fwd(&e16, gn, ghw, gc, (float *)gx16, gy16), SL_OK);
    eq_bits(gy32, gy16, gn * gc * 4, "gap y");
    cr_assert_eq(sl_gap_bwd(&e32, gn, ghw, gc, gdy, gdx), SL_OK);
    cr_assert_eq(sl_gap_bwd(&e16, gn, ghw, gc, gdy, (float *)gdx16), SL_OK);
    eq_rounded(gdx16, gdx, (int64_t)gn * ghw * gc, "gap dx");
    free(gx), free(gdy), free(gy32), free(gy16), free(gdx), free(gx16), free(gdx16);
    free(a), free(b), free(y32), free(a16), free(b16), free(y16);
    sl_exec_fini(&e32), sl_exec_fini(&e16);
}

/* Every bf16 pass on two threads gives the bits of one (the reductions
 * are blocked independently of the split, norm_cpu.c). */
Test(train_bf16, two_threads_same_bits)
{
    bnc b;
    bnc_make(&b, 25088 + 37, 24, 60);
    int64_t n = b.rows * b.c;
    int c = b.c;
    uint16_t *x = to_bf(n, b.x), *dy = to_bf(n, b.dy), *y[2], *dx[2];
    bns s[2];
    for (int t = 0; t < 2; t++) {
        sl_exec e;
        exec_act(&e, t + 1, SL_DTYPE_BF16);
        y[t] = xalloc(n * 2), dx[t] = xalloc(n * 2);
        bns_make(&s[t], c);
        cr_assert_eq(sl_bn_fwd_train(&e, b.rows, c, (float *)x, b.gamma, b.beta, 0.1f, 1e-5f,
                                     s[t].rm, s[t].rv, (float *)y[t], s[t].sm, s[t].si), SL_OK);
        cr_assert_eq(sl_bn_bwd(&e, b.rows, c, (float *)x, (float *)dy, b.gamma, s[t].sm,
                               s[t].si, (float *)dx[t], s[t].dg, s[t].db), SL_OK);
        cr_assert_eq(sl_add(&e, n, (float *)y[t], (float *)dx[t], (float *)y[t]), SL_OK);
        cr_assert_eq(sl_relu_fwd(&e, n, (float *)y[t], (float *)y[t]), SL_OK);
        sl_pool_shape sh;
        cr_assert_eq(sl_pool_shape_init(&sh, 4, 112, 56, c, 3, 2, 1), SL_OK);
        cr_assert((int64_t)sh.n * sh.h * sh.w * c <= n);
        int32_t *arg = xalloc((size_t)n * 4);
        cr_assert_eq(sl_maxpool_fwd(&e, &sh, (float *)x, (float *)dx[t], arg), SL_OK);
        cr_assert_eq(sl_maxpool_bwd(&e, &sh, (float *)dy, arg, (float *)dx[t]), SL_OK);
        free(arg);
        sl_exec_fini(&e);
    }
    eq_bits(y[0], y[1], n * 2, "bn + add + relu y");
    eq_bits(dx[0], dx[1], n * 2, "maxpool dx");
    bns_eq(&s[0], &s[1], c);
    for (int t = 0; t < 2; t++)
        free(y[t]), free(dx[t]), bns_free(&s[t]);
    free(x), free(dy);
    bnc_free(&b);
}

/* norm_avx512.c's kernels (c a multiple of 32) against norm_kern_cpu.h's
 * loops (sl_bn512_set(0)), bit for bit, through the public slots: every
 * case of the fused forward, the masked and the plain backward, in place
 * and not, on 1 and 2 threads. The data reaches the rounding's corners:
 * channels whose gamma makes y and dx subnormal (where vcvtneps2bf16 would
 * flush), shortcut and dy values that are NaN, +-inf and -0, z values of
 * +-0, subnormals, +-inf, quiet and signalling NaNs for the mask. Channel counts: one group
 * of 32, 64, three groups (a 64 and a 32 tail), 256 (slices of 2 rows),
 * 2048 (the largest the kernels take); rows no multiple of any block. */
static void bn512_case(int64_t rows, int c, int threads, uint64_t seed)
{
    bnc b;
    bnc_make(&b, rows, c, seed);
    int64_t n = rows * c;
    static const uint32_t odd[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                   0x00000000u, 0x00010000u, 0x80010000u, 0x7f810000u};
    for (int ch = 0; ch < c; ch += 7) /* subnormal outputs */
        b.gamma[ch] = 1e-39f, b.beta[ch] = 0;
    for (int64_t i = 0; i < n; i += 97) {
        float f;
        memcpy(&f, &odd[(i / 97) % 8], 4);
        b.r[i] = f;
        b.z[(i * 3) % n] = f;
        if (i % 5 == 0)
            b.dy[(i * 7) % n] = f;
    }
    uint16_t *x = to_bf(n, b.x), *r = to_bf(n, b.r), *z = to_bf(n, b.z), *dy = to_bf(n, b.dy);
    /* signalling NaNs (no rounding makes them) and the largest subnormal in z */
    static const uint16_t zodd[] = {0x7f81, 0xff81, 0x7fbf, 0x007f, 0x7f80, 0x7f7f};
    for (int64_t i = 5; i < n; i += 61)
        z[i] = zodd[(i / 61) % 6];
    size_t nb = (size_t)n * 2;
    uint16_t *y[2], *dz[2], *dx[2], *dxi[2];
    for (int k = 0; k < 2; k++) { /* k: 0 the kernels, 1 the loops */
        y[k] = xalloc(nb * 4), dz[k] = xalloc(nb * 2), dx[k] = xalloc(nb * 2),
        dxi[k] = xalloc(nb);
    }
    bns s[2][4];
    for (int k = 0; k < 2; k++) {
        sl_bn512_set(!k);
        sl_exec e;
        exec_act(&e, threads, SL_DTYPE_BF16);
        for (int mode = 0; mode < 4; mode++) { /* relu: bit 0, shortcut: bit 1 */
            bns_make(&s[k][mode], c);
            cr_assert_eq(sl_bn_fwd_train_act(&e, rows, c, (float *)x, b.gamma, b.beta, 0.1f,
                                             1e-5f, s[k][mode].rm, s[k][mode].rv,
                                             mode & 2 ? (const float *)r : NULL, mode & 1,
                                             (float *)(y[k] + mode * n), s[k][mode].sm,
                                             s[k][mode].si),
                         SL_OK, "%s", sl_errmsg());
        }
        /* masked backward (dz in place), plain backward, and dx over dz */
        memcpy(dz[k], dy, nb);
        cr_assert_eq(sl_bn_bwd_act(&e, rows, c, (float *)x, (float *)z, (float *)dz[k],
                                   b.gamma, s[k][1].sm, s[k][1].si, (float *)dx[k],
                                   s[k][1].dg, s[k][1].db), SL_OK);
        cr_assert_eq(sl_bn_bwd(&e, rows, c, (float *)x, (float *)dy, b.gamma, s[k][0].sm,
                               s[k][0].si, (float *)(dx[k] + n), s[k][0].dg, s[k][0].db),
                     SL_OK);
        memcpy(dxi[k], dy, nb);
        cr_assert_eq(sl_bn_bwd_act(&e, rows, c, (float *)x, (float *)z, (float *)dxi[k],
                                   b.gamma, s[k][2].sm, s[k][2].si, (float *)dxi[k], NULL,
                                   NULL), SL_OK);
        sl_exec_fini(&e);
    }
    sl_bn512_set(-1);
    char what[96];
    snprintf(what, sizeof what, "%lld x %d on %d thread(s): y", (long long)rows, c, threads);
    for (int mode = 0; mode < 4; mode++) {
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(y[0][mode * n + i], y[1][mode * n + i],
                         "%s, case %d [%lld]: kernels %#06x, loops %#06x", what, mode,
                         (long long)i, y[0][mode * n + i], y[1][mode * n + i]);
        bns_eq(&s[0][mode], &s[1][mode], c);
    }
    eq_bits(dz[0], dz[1], nb, "masked dz");
    eq_bits(dx[0], dx[1], nb * 2, "dx (masked, plain)");
    eq_bits(dxi[0], dxi[1], nb, "dx over dz");
    for (int k = 0; k < 2; k++) {
        free(y[k]), free(dz[k]), free(dx[k]), free(dxi[k]);
        for (int mode = 0; mode < 4; mode++)
            bns_free(&s[k][mode]);
    }
    free(x), free(r), free(z), free(dy);
    bnc_free(&b);
}

Test(train_bf16, bn_avx512_is_the_loops_bits)
{
    sl_bn512_set(1);
    int on = sl_bn512_ok(64);
    sl_bn512_set(-1);
    if (!on)
        cr_skip_test("no AVX-512 F/BW/DQ on this CPU: norm_avx512.c's kernels do not run");
    static const int64_t shapes[][2] = {{517, 32}, {1003, 64}, {333, 96}, {259, 256}, {37, 2048}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int t = 1; t <= 2; t++)
            bn512_case(shapes[k][0], (int)shapes[k][1], t, 70 + k);
    /* 2 threads split the rows only when there are enough of them */
    bn512_case(25088 + 37, 64, 2, 80);
    cr_assert_eq(sl_bn512_ok(48), 0, "48 channels are no multiple of 32");
    cr_assert_eq(sl_bn512_ok(4096), 0, "4096 channels are over the kernels' limit");
}

/* ------------------------------------------------------- convolutions */

typedef struct geom {
    int n, h, w, c, k, r, stride, pad;
} geom;

/* ResNet's kinds (the 7x7/2 stem with c = 3, 3x3 at both strides, 1x1
 * direct and strided) at awkward sizes, channels no multiple of 16. */
static const geom conv_shapes[] = {
    {2, 23, 19, 3, 16, 7, 2, 3}, {3, 9, 7, 37, 19, 3, 1, 1}, {2, 10, 9, 24, 40, 3, 2, 1},
    {2, 7, 5, 40, 72, 1, 1, 0},  {3, 8, 6, 33, 64, 1, 2, 0},
    /* 8 -> 8, 3x3/1 (conv_c8.c's kernel, forward and backward-data): the
     * demo's 28 px (a row = 16 + 12 pixels), a row of 37 (two vector pairs,
     * a tail of 5), rows of 1 and 3 pixels and a single row */
    {3, 28, 28, 8, 8, 3, 1, 1},  {2, 6, 37, 8, 8, 3, 1, 1},  {2, 5, 1, 8, 8, 3, 1, 1},
    {2, 1, 3, 8, 8, 3, 1, 1},
    /* 1x1 backward-filter on conv_w1x1.c's kernel: 64 -> 128, and 288 ->
     * 192 at stride 2 (a 256-channel block and a 32 one, three groups of
     * 64 output channels, a last block of rows shorter than the rest) */
    {2, 7, 5, 64, 128, 1, 1, 0}, {3, 9, 7, 288, 192, 1, 2, 0},
};

/* The bound, per element: oneDNN's bf16 kernels multiply bf16 pairs exactly
 * into f32 (8 x 8 significant bits fit in 24) and accumulate in f32, so
 * against the ref's f32 sum of the same products the accumulation error is
 * at most K*2^-24 * sum|products| (K terms, a generous Higham bound); a
 * bf16 output adds one rounding, |y| 2^-8 (half an ulp of 8 significant
 * bits). sumabs is the ref's conv of |x| and |w|. */
static void conv_close(const uint16_t *y16, const float *y32, const float *yref,
                       const float *sumabs, int64_t n, int64_t terms, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double got = y16 ? sl_bf16_ld(y16[i]) : y32[i], want = yref[i];
        double tol = (double)terms * 0x1p-24 * sumabs[i] + (y16 ? 0x1p-8 * fabs(want) : 0);
        cr_assert(fabs(got - want) <= tol + 1e-30, "%s[%lld]: %.9g, ref %.9g, bound %.3g", what,
                  (long long)i, got, want, tol);
    }
}

Test(train_bf16, conv_within_bf16_bound_of_ref)
{
    if (!sl_cpu_bf16(NULL))
        cr_skip_test("oneDNN has no bf16 dot products here (%s)", sl_dnnl_isa());
    for (size_t k = 0; k < sizeof conv_shapes / sizeof *conv_shapes; k++) {
        const geom *g = &conv_shapes[k];
        sl_conv_shape sh;
        cr_assert_eq(sl_conv_shape_init(&sh, g->n, g->h, g->w, g->c, g->k, g->r, g->r,
                                        g->stride, g->pad), SL_OK);
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c, ny = (int64_t)sh.n * sh.p * sh.q * sh.k,
                nw = (int64_t)sh.k * sh.r * sh.s * sh.c;
        uint64_t st = 70 + k;
        float *x = rnd_bf(nx, -1, 1, &st), *w = rnd_bf(nw, -1, 1, &st), *dy = rnd_bf(ny, -1, 1, &st);
        float *ax = xalloc(nx * 4), *aw = xalloc(nw * 4), *ady = xalloc(ny * 4);
        for (int64_t i = 0; i < nx; i++)
            ax[i] = fabsf(x[i]);
        for (int64_t i = 0; i < nw; i++)
            aw[i] = fabsf(w[i]);
        for (int64_t i = 0; i < ny; i++)
            ady[i] = fabsf(dy[i]);
        float *yr = xalloc(ny * 4), *ys = xalloc(ny * 4), *dxr = xalloc(nx * 4),
              *dxs = xalloc(nx * 4), *dwr = xalloc(nw * 4), *dws = xalloc(nw * 4),
              *dw16 = xalloc(nw * 4);
        uint16_t *x16 = to_bf(nx, x), *w16 = to_bf(nw, w), *dy16 = to_bf(ny, dy),
                 *y16 = xalloc(ny * 2), *dx16 = xalloc(nx * 2);
        sl_exec er, e16;
        cr_assert_eq(sl_exec_init(&er, SL_BACKEND_REF, 1), SL_OK);
        cr_assert_eq(sl_exec_init(&e16, SL_BACKEND_CPU, 2), SL_OK);
        cr_assert_eq(sl_exec_set_act(&e16, SL_DTYPE_BF16), SL_OK, "%s", sl_errmsg());
        /* the ref's values and, for the bound, its sums of |terms| */
        cr_assert_eq(sl_conv_fwd(&er, &sh, x, w, yr), SL_OK);
        cr_assert_eq(sl_conv_fwd(&er, &sh, ax, aw, ys), SL_OK);
        cr_assert_eq(sl_conv_bwd_data(&er, &sh, dy, w, dxr), SL_OK);
        cr_assert_eq(sl_conv_bwd_data(&er, &sh, ady, aw, dxs), SL_OK);
        cr_assert_eq(sl_conv_bwd_filter(&er, &sh, x, dy, dwr), SL_OK);
        cr_assert_eq(sl_conv_bwd_filter(&er, &sh, ax, ady, dws), SL_OK);
        cr_assert_eq(sl_conv_fwd(&e16, &sh, (float *)x16, (float *)w16, (float *)y16), SL_OK,
                     "%s", sl_errmsg());
        cr_assert_eq(sl_conv_bwd_data(&e16, &sh, (float *)dy16, (float *)w16, (float *)dx16),
                     SL_OK, "%s", sl_errmsg());
        cr_assert_eq(sl_conv_bwd_filter(&e16, &sh, (float *)x16, (float *)dy16, dw16), SL_OK,
                     "%s", sl_errmsg());
        int64_t kt = (int64_t)sh.r * sh.s * sh.c, dt = (int64_t)sh.r * sh.s * sh.k,
                wt = (int64_t)sh.n * sh.p * sh.q;
        conv_close(y16, NULL, yr, ys, ny, kt, "fwd y");
        conv_close(dx16, NULL, dxr, dxs, nx, dt, "bwd-data dx");
        conv_close(NULL, dw16, dwr, dws, nw, wt, "bwd-filter dw (f32)");
        free(x), free(w), free(dy), free(ax), free(aw), free(ady), free(yr), free(ys), free(dxr);
        free(dxs), free(dwr), free(dws), free(dw16), free(x16), free(w16), free(dy16), free(y16);
        free(dx16);
        sl_exec_fini(&er), sl_exec_fini(&e16);
    }
    char impls[1024];
    sl_dnnl_impls(impls, sizeof impls);
    cr_assert(strstr(impls, "bf16"), "%s", impls);
    cr_assert(!strstr(impls, "bf16 ref"), "a reference kernel ran: %s", impls);
}

/* conv_c8.c's kernels against oneDNN's (SLUICE_CONV_C8=0) on the demo's
 * shape and a ragged one: forward and backward-data within one bf16 ulp
 * (both round the same exact products' f32 sums; their orders may differ),
 * backward-filter's f32 dw within the accumulation bound, and on 1 and 3
 * threads the same bits (images are independent; dw adds them in order). */
Test(train_bf16, conv_c8_matches_onednn)
{
    if (!sl_cpu_bf16(NULL))
        cr_skip_test("oneDNN has no bf16 dot products here (%s)", sl_dnnl_isa());
    static const geom shapes[] = {{32, 28, 28, 8, 8, 3, 1, 1}, {5, 9, 45, 8, 8, 3, 1, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const geom *g = &shapes[k];
        sl_conv_shape sh;
        cr_assert_eq(sl_conv_shape_init(&sh, g->n, g->h, g->w, 8, 8, 3, 3, 1, 1), SL_OK);
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * 8, nw = 8 * 9 * 8;
        uint64_t st = 90 + k;
        float *x = rnd_bf(nx, -2, 2, &st), *w = rnd_bf(nw, -1, 1, &st);
        uint16_t *x16 = to_bf(nx, x), *w16 = to_bf(nw, w);
        uint16_t *out[2][3]; /* [pass][kernel: c8 1 thread, c8 3 threads, oneDNN] */
        float *dw[3], *dy = rnd_bf(nx, -1, 1, &st), *ady = xalloc(nx * 4), *ax = xalloc(nx * 4);
        uint16_t *dy16 = to_bf(nx, dy);
        sl_exec e1, e3;
        cr_assert_eq(sl_exec_init(&e1, SL_BACKEND_CPU, 1), SL_OK);
        cr_assert_eq(sl_exec_init(&e3, SL_BACKEND_CPU, 3), SL_OK);
        cr_assert_eq(sl_exec_set_act(&e1, SL_DTYPE_BF16), SL_OK);
        cr_assert_eq(sl_exec_set_act(&e3, SL_DTYPE_BF16), SL_OK);
        cr_assert(sl_conv_c8_ok(&e1, &sh), "the c8 kernel should take this shape here");
        for (int v = 0; v < 3; v++) {
            sl_exec *e = v == 1 ? &e3 : &e1;
            if (v == 2)
                setenv("SLUICE_CONV_C8", "0", 1);
            dw[v] = xalloc(nw * 4);
            cr_assert_eq(sl_conv_bwd_filter(e, &sh, (float *)x16, (float *)dy16, dw[v]), SL_OK,
                         "%s", sl_errmsg());
            for (int pass = 0; pass < 2; pass++) {
                out[pass][v] = xalloc(nx * 2);
                int rc = pass ? sl_conv_bwd_data(e, &sh, (float *)x16, (float *)w16,
                                                 (float *)out[pass][v])
                              : sl_conv_fwd(e, &sh, (float *)x16, (float *)w16,
                                            (float *)out[pass][v]);
                cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
            }
            unsetenv("SLUICE_CONV_C8");
        }
        char impls[1024];
        sl_dnnl_impls(impls, sizeof impls);
        cr_assert(strstr(impls, "forward bf16 jit") && strstr(impls, "backward-data bf16 jit") &&
                      strstr(impls, "backward-filter bf16 jit"),
                  "oneDNN ran not every pass with SLUICE_CONV_C8=0: %s", impls);
        cr_assert(strstr(impls, "forward bf16 sluice_c8") &&
                      strstr(impls, "backward-data bf16 sluice_c8") &&
                      strstr(impls, "backward-filter bf16 sluice_c8"),
                  "the c8 kernel's passes are not reported: %s", impls);
        /* dw: f32 sums of 9*8*8 sums of n*h*w exact products in two orders,
         * each within K 2^-24 sum|products| of the exact (conv_close's
         * bound), so of each other within twice that; sum|products| from
         * the ref's conv of |x| and |dy|. The thread counts: the same bits. */
        sl_exec er;
        cr_assert_eq(sl_exec_init(&er, SL_BACKEND_REF, 1), SL_OK);
        for (int64_t i = 0; i < nx; i++)
            ax[i] = fabsf(x[i]), ady[i] = fabsf(dy[i]);
        float *dws = xalloc(nw * 4);
        cr_assert_eq(sl_conv_bwd_filter(&er, &sh, ax, ady, dws), SL_OK);
        cr_assert_eq(memcmp(dw[0], dw[1], nw * 4), 0, "dw: 1 and 3 threads differ");
        int64_t terms = (int64_t)sh.n * sh.h * sh.w;
        for (int64_t i = 0; i < nw; i++)
            cr_assert(fabs((double)dw[0][i] - dw[2][i]) <= 2.0 * terms * 0x1p-24 * dws[i] + 1e-30,
                      "dw[%lld]: c8 %.9g, oneDNN %.9g, sum|p| %.6g", (long long)i, dw[0][i],
                      dw[2][i], dws[i]);
        free(dws), free(dw[0]), free(dw[1]), free(dw[2]), free(dy), free(ady), free(ax);
        free(dy16);
        sl_exec_fini(&er);
        for (int pass = 0; pass < 2; pass++) {
            cr_assert_eq(memcmp(out[pass][0], out[pass][1], nx * 2), 0,
                         "pass %d: 1 and 3 threads differ", pass);
            int64_t differ = 0;
            for (int64_t i = 0; i < nx; i++) {
                int d = abs((int)(int16_t)out[pass][0][i] - (int)(int16_t)out[pass][2][i]);
                cr_assert(d <= 1, "pass %d [%lld]: c8 %#x, oneDNN %#x", pass, (long long)i,
                          out[pass][0][i], out[pass][2][i]);
                differ += d != 0;
            }
            cr_log_info("shape %zu pass %d: %lld of %lld outputs 1 ulp from oneDNN's", k, pass,
                        (long long)differ, (long long)nx);
            free(out[pass][0]), free(out[pass][1]), free(out[pass][2]);
        }
        free(x), free(w), free(x16), free(w16);
        sl_exec_fini(&e1), sl_exec_fini(&e3);
    }
}

/* conv_w1x1.c's 1x1 backward-filter against oneDNN's (SLUICE_CONV_W1X1=0):
 * dw within the f32 accumulation bound of each other (two orders of the
 * same exact products), the same bits on 1, 2 and 3 threads (whole tiles a
 * thread, rows summed in order), reported by sl_dnnl_impls; shapes it does
 * not take (odd channel counts, an odd number of rows, fewer pieces of work
 * than threads) go to oneDNN. The
 * sizes cover more than one block of 128 row pairs and a short last one. */
Test(train_bf16, conv_w1x1_matches_onednn)
{
    if (!sl_cpu_bf16(NULL))
        cr_skip_test("oneDNN has no bf16 dot products here (%s)", sl_dnnl_isa());
    static const geom shapes[] = {{4, 14, 13, 64, 256, 1, 1, 0},
                                  {2, 28, 27, 256, 192, 1, 2, 0},
                                  {1, 24, 22, 544, 64, 1, 1, 0}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const geom *g = &shapes[k];
        sl_conv_shape sh;
        cr_assert_eq(sl_conv_shape_init(&sh, g->n, g->h, g->w, g->c, g->k, 1, 1, g->stride, 0),
                     SL_OK);
        int64_t nx = (int64_t)sh.n * sh.h * sh.w * sh.c, ny = (int64_t)sh.n * sh.p * sh.q * sh.k,
                nw = (int64_t)sh.k * sh.c;
        uint64_t st = 120 + k;
        float *x = rnd_bf(nx, -2, 2, &st), *dy = rnd_bf(ny, -1, 1, &st);
        uint16_t *x16 = to_bf(nx, x), *dy16 = to_bf(ny, dy);
        float *dw[4]; /* 1, 2, 3 threads; oneDNN */
        sl_exec e[3];
        for (int t = 0; t < 3; t++) {
            cr_assert_eq(sl_exec_init(&e[t], SL_BACKEND_CPU, t + 1), SL_OK);
            cr_assert_eq(sl_exec_set_act(&e[t], SL_DTYPE_BF16), SL_OK);
        }
        for (int t = 0; t < 3; t++)
            cr_assert(sl_conv_w1x1_ok(&e[t], &sh), "the 1x1 kernel should take shape %zu on %d "
                      "threads here", k, t + 1);
        for (int v = 0; v < 4; v++) {
            if (v == 3)
                setenv("SLUICE_CONV_W1X1", "0", 1);
            dw[v] = xalloc(nw * 4);
            memset(dw[v], 0xff, nw * 4); /* NaNs: every element must be written, not added to */
            cr_assert_eq(sl_conv_bwd_filter(&e[v < 3 ? v : 0], &sh, (float *)x16, (float *)dy16,
                                            dw[v]), SL_OK, "%s", sl_errmsg());
            unsetenv("SLUICE_CONV_W1X1");
        }
        char impls[1024];
        sl_dnnl_impls(impls, sizeof impls);
        cr_assert(strstr(impls, "backward-filter bf16 sluice_1x1:avx512_bf16") &&
                      strstr(impls, "backward-filter bf16 jit"),
                  "both kernels should be reported: %s", impls);
        sl_exec er;
        cr_assert_eq(sl_exec_init(&er, SL_BACKEND_REF, 1), SL_OK);
        float *ax = xalloc(nx * 4), *ady = xalloc(ny * 4), *dws = xalloc(nw * 4);
        for (int64_t i = 0; i < nx; i++)
            ax[i] = fabsf(x[i]);
        for (int64_t i = 0; i < ny; i++)
            ady[i] = fabsf(dy[i]);
        cr_assert_eq(sl_conv_bwd_filter(&er, &sh, ax, ady, dws), SL_OK);
        for (int t = 1; t < 3; t++)
            cr_assert_eq(memcmp(dw[0], dw[t], nw * 4), 0, "dw: 1 and %d threads differ", t + 1);
        int64_t terms = (int64_t)sh.n * sh.p * sh.q;
        for (int64_t i = 0; i < nw; i++)
            cr_assert(fabs((double)dw[0][i] - dw[3][i]) <= 2.0 * terms * 0x1p-24 * dws[i] + 1e-30,
                      "shape %zu dw[%lld]: 1x1 kernel %.9g, oneDNN %.9g, sum|p| %.6g", k,
                      (long long)i, dw[0][i], dw[3][i], dws[i]);
        for (int v = 0; v < 4; v++)
            free(dw[v]);
        free(x), free(dy), free(x16), free(dy16), free(ax), free(ady), free(dws);
        sl_exec_fini(&er);
        for (int t = 0; t < 3; t++)
            sl_exec_fini(&e[t]);
    }
    /* what it leaves to oneDNN */
    sl_exec e1;
    cr_assert_eq(sl_exec_init(&e1, SL_BACKEND_CPU, 1), SL_OK);
    cr_assert_eq(sl_exec_set_act(&e1, SL_DTYPE_BF16), SL_OK);
    static const geom no[] = {{2, 7, 5, 48, 128, 1, 1, 0},  /* c % 32 */
                              {2, 7, 5, 64, 96, 1, 1, 0},   /* k % 64 */
                              {1, 7, 5, 64, 128, 1, 1, 0},  /* 35 rows */
                              {2, 7, 5, 64, 128, 3, 1, 1}}; /* 3x3 */
    for (size_t k = 0; k < sizeof no / sizeof *no; k++) {
        sl_conv_shape sh;
        cr_assert_eq(sl_conv_shape_init(&sh, no[k].n, no[k].h, no[k].w, no[k].c, no[k].k,
                                        no[k].r, no[k].r, no[k].stride, no[k].pad), SL_OK);
        cr_assert(!sl_conv_w1x1_ok(&e1, &sh), "shape %zu should go to oneDNN", k);
    }
    /* and on 2 threads a shape of one piece (256 input channels, 64 output
     * channels): one thread would idle; on 1 thread it is taken */
    sl_exec e2;
    cr_assert_eq(sl_exec_init(&e2, SL_BACKEND_CPU, 2), SL_OK);
    cr_assert_eq(sl_exec_set_act(&e2, SL_DTYPE_BF16), SL_OK);
    sl_conv_shape one;
    cr_assert_eq(sl_conv_shape_init(&one, 2, 7, 5, 256, 64, 1, 1, 1, 0), SL_OK);
    cr_assert(sl_conv_w1x1_ok(&e1, &one) && !sl_conv_w1x1_ok(&e2, &one));
    sl_exec_fini(&e2);
    sl_exec_fini(&e1);
}

/* ------------------------------------------------ choosing the precision */

Test(train_bf16, precision_follows_the_isa)
{
    const char *why = NULL;
    int bf = sl_cpu_bf16(&why);
    cr_assert_not_null(why);
    sl_train_config tc;
    sl_train_config_init(&tc);
    cr_assert_eq(sl_train_precision(&tc), bf ? SL_DTYPE_BF16 : SL_DTYPE_F32);
    tc.backend = SL_BACKEND_REF;
    cr_assert_eq(sl_train_precision(&tc), SL_DTYPE_F32);
    tc.backend = SL_BACKEND_CPU;
    tc.precision = SL_DTYPE_F32;
    cr_assert_eq(sl_train_precision(&tc), SL_DTYPE_F32);
    char note[160];
    tc.precision = -1;
    sl_train_precision_note(&tc, note, sizeof note);
    cr_assert(strstr(note, bf ? "bf16 (oneDNN ISA " : "fp32 ("), "%s", note);
    cr_assert(strstr(note, why), "%s lacks %s", note, why);
#ifdef SLUICE_WITH_DNNL
    __builtin_cpu_init();
    /* this CPU's own answer: AVX512-BF16 (or AMX, which comes with it) */
    cr_assert_eq(bf, !!__builtin_cpu_supports("avx512bf16"), "oneDNN says %s", why);
#endif
}

/* A CPU without bf16 dot products, as oneDNN sees one with its ISA capped
 * (2.6 reads DNNL_MAX_CPU_ISA, later versions ONEDNN_MAX_CPU_ISA): the
 * default falls back to fp32 and says why, an explicit bf16 is refused
 * before any work, and fp32 still trains. Each Criterion test is its own
 * process, so oneDNN reads the variable afresh here. */
Test(train_bf16, falls_back_to_fp32_without_bf16_isa)
{
#ifndef SLUICE_WITH_DNNL
    cr_skip_test("this build has no oneDNN");
#endif
    setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE", 1);
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);
    const char *why = NULL;
    cr_assert_eq(sl_cpu_bf16(&why), 0);
    cr_assert(!strcmp(why, "avx512_core") || !strcmp(why, "avx2") || !strcmp(why, "avx") ||
              !strcmp(why, "sse41"), "%s", why);
    sl_train_config tc;
    sl_train_config_init(&tc);
    cr_assert_eq(sl_train_precision(&tc), SL_DTYPE_F32);
    char note[160];
    sl_train_precision_note(&tc, note, sizeof note);
    cr_assert(strstr(note, "fp32 (oneDNN ISA ") && strstr(note, "no bf16 dot products"), "%s",
              note);
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 1), SL_OK);
    cr_assert_eq(sl_exec_set_act(&e, SL_DTYPE_BF16), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "AVX512-BF16") && strstr(sl_errmsg(), why), "%s",
              sl_errmsg());
    /* fp32 on the capped ISA */
    sl_conv_shape sh;
    cr_assert_eq(sl_conv_shape_init(&sh, 1, 5, 5, 3, 4, 3, 3, 1, 1), SL_OK);
    float x[75], w[108], y[100];
    for (int i = 0; i < 75; i++)
        x[i] = (float)(i % 7) - 3;
    for (int i = 0; i < 108; i++)
        w[i] = (float)(i % 5) - 2;
    cr_assert_eq(sl_conv_fwd(&e, &sh, x, w, y), SL_OK, "%s", sl_errmsg());
    char impls[1024];
    sl_dnnl_impls(impls, sizeof impls);
    cr_assert(strstr(impls, "f32") && !strstr(impls, "bf16"), "%s", impls);
    sl_exec_fini(&e);
}

Test(train_bf16, blas_path_is_fp32)
{
    setenv("SLUICE_CPU_CONV", "blas", 1);
    const char *why = NULL;
    cr_assert_eq(sl_cpu_bf16(&why), 0);
    cr_assert(strchr(why, ' '), "a reason, not an ISA: %s", why);
    sl_train_config tc;
    sl_train_config_init(&tc);
    cr_assert_eq(sl_train_precision(&tc), SL_DTYPE_F32);
}

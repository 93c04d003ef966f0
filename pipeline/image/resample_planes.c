/*
 * pipeline/image/resample_planes.c - sl_resample_planes: the decode_yuv.c path's
 * resize + colour conversion + flip + normalize + layout in one pass, from
 * the crop's Y, Cb, Cr planes (or one gray plane) straight into its slot
 * of the batch buffer. resample.c does the same from an RGB strip (the
 * reference path, SLUICE_DECODE=rgb); the horizontal pass (the bilinear
 * window, the area tap) is shared through resample_int.h, and resample.c's
 * DESIGN comment explains it.
 *
 *   in:  pl[np] u8 planes (sl_plane_view, image.h), each with its
 *        own window in its own pixel coordinates
 *   out: SL_LAYOUT_NHWC_U8 / NHWC_F32 / NCHW_F32, as resample.c
 *
 * Each plane (Y, Cb,
 * Cr at their own resolutions, or one gray plane) is resized to dw x dh
 * with its own taps over its own window, which need not start or end on a
 * pixel edge (4:2:0 chroma of a crop at an odd x starts mid-sample); only
 * then are the three values converted to RGB (JFIF full-range YCbCr, the
 * constants of libjpeg's jdcolor.c), clamped to 0..255 and written in the
 * layout. Resizing and the colour conversion are both linear, so this
 * equals convert-then-resize except where a clamp bites (saturated colours)
 * and in the chroma filter (libjpeg's fancy upsampling is a triangle filter
 * too, at 2x; here bilinear straight from the chroma samples to the output).
 *
 * Filter per direction and plane, as sl_resize_taps on an exact window:
 * area averaging over [a + x*s, a + (x+1)*s) when the plane's scale s =
 * window / output >= 2 (first and last source pixel weighted by their
 * overlap), otherwise bilinear at centre a + (x + 0.5)*s - 0.5, clamped to
 * the plane (window_taps, on records/resize_tap.h's bilinear tap and area
 * weights). On a whole-pixel window of a whole plane the bilinear taps are
 * sl_resize_taps' bit for bit; the area taps are its formulas with edges
 * in double rather than integers, equal up to rounding (resize_tap.h).
 *
 * Two AVX2 helpers are picked at run time (__builtin_cpu_supports;
 * target("avx2") functions, since the target_clones clone cannot use
 * intrinsics the default one lacks): the bilinear vertical pass
 * (prow_two_avx2: vpmovzxbd + vcvtdq2ps, where gcc's own vectorization
 * widens through words with extracts) and the NCHW f32 row
 * (nchw_fused_avx2: colour, clamp and normalization in one pass, then
 * 32-byte streamed stores). Same operations per value, no FMA: same bytes.
 * The one-vector windows and the two AVX2 helpers: sl_resample_planes
 * 1.1-1.4x faster (perf/RESULTS.md, "A cheaper sl_resample_planes",
 * issue 17).
 *
 * The pass: check_args, scratch_plan and plane_setup (taps and tables per
 * plane), then per output row plane_row (vertical then horizontal pass of
 * each plane), rgb_rows (colour conversion and clamp) and the layout:
 * sl_store_row (resample_int.h, shared with resample.c), nchw_stream, or
 * nchw_fused_avx2 in place of the last two.
 *
 * Memory: per plane its taps, window tables and one acc row, then three
 * output rows of dw floats; up to SL_RESAMPLE_STACK bytes on the stack,
 * above that one malloc per call (SL_ENOMEM when it fails, dst untouched).
 *
 * Threading: reentrant; distinct dst regions may be written concurrently.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/image/resample_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h> /* _mm_stream_ps, _mm_sfence: SSE, every x86-64 */
#define SL_RESAMPLE_STREAM 1
#else
#define SL_RESAMPLE_STREAM 0
#endif
/* nchw_fused_avx2: gcc on x86-64 (a target("avx2") function, chosen at run
 * time with __builtin_cpu_supports). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define SL_RESAMPLE_AVX2 1
#else
#define SL_RESAMPLE_AVX2 0
#endif

/* JFIF YCbCr -> RGB (libjpeg jdcolor.c), shared by the plain row and
 * nchw_fused_avx2, which must give the same floats. */
#define SL_YCC_R_CR 1.40200f
#define SL_YCC_G_CB 0.34414f
#define SL_YCC_G_CR 0.71414f
#define SL_YCC_B_CB 1.77200f

/* Taps for d outputs over the window [a, a + len) of a line of s pixels
 * (0 <= a, a + len <= s; len > 0). The bilinear tap and the area weights
 * are records/resize_tap.h's; the area interval's edges are found in
 * double here, since a fractional window has no exact integer form
 * (resize_tap.h says why), and clamped to the plane against rounding. */
static void window_taps(sl_rtap *t, double a, double len, int s, int d)
{
    double sc = len / d;
    for (int x = 0; x < d; x++) {
        if (sc >= 2.0) {
            double lo = a + x * sc, hi = lo + sc;
            int first = (int)floor(lo), last = (int)ceil(hi) - 1;
            first = first < 0 ? 0 : first > s - 1 ? s - 1 : first;
            last = last < first ? first : last > s - 1 ? s - 1 : last;
            sl_resize_tap_area(&t[x], first, last, first + 1 - lo, hi - last, 1.0, sc);
            continue;
        }
        sl_resize_tap_linear(&t[x], a, sc, x, s);
    }
}

/* Vertical pass on one u8 plane row: acc[i] = w * row[i] or += (n values). */
static inline __attribute__((always_inline)) void
prow_set(float *restrict acc, const uint8_t *restrict row, float w, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] = w * (float)row[i];
}

static inline __attribute__((always_inline)) void
prow_add(float *restrict acc, const uint8_t *restrict row, float w, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] += w * (float)row[i];
}

/* The bilinear vertical tap in one pass: acc[i] = wa * a[i] + wb * b[i]
 * (the same value as prow_set then prow_add: neither file contracts to
 * FMA). */
static inline __attribute__((always_inline)) void
prow_two(float *restrict acc, const uint8_t *restrict a, const uint8_t *restrict b, float wa,
         float wb, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] = wa * (float)a[i] + wb * (float)b[i];
}

#if SL_RESAMPLE_AVX2
/* prow_two where the CPU has AVX2: eight bytes to eight floats with
 * vpmovzxbd + vcvtdq2ps, where gcc's vectorization of prow_two's loop widens
 * sixteen bytes through words with extracts (half again the instructions;
 * __builtin_convertvector from eight u8 is scalar in gcc 12). The same
 * operations per element (no FMA), so the same floats. */
__attribute__((target("avx2"))) static void
prow_two_avx2(float *restrict acc, const uint8_t *restrict a, const uint8_t *restrict b, float wa,
              float wb, int n)
{
    const __m256 va = _mm256_set1_ps(wa), vb = _mm256_set1_ps(wb);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 fa = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(a + i))));
        __m256 fb = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(b + i))));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_mul_ps(va, fa), _mm256_mul_ps(vb, fb)));
    }
    for (; i < n; i++)
        acc[i] = wa * (float)a[i] + wb * (float)b[i];
}
#endif

/* Area horizontal pass of one plane row (general taps) plus bias. */
static void harea_plane(const sl_rtap *restrict t, int dw, const float *restrict p, float bias,
                        float *restrict out)
{
    for (int x = 0; x < dw; x++)
        out[x] = area_tap(&t[x], p + t[x].i0) + bias;
}

/* One output row of the three NCHW f32 planes, normalized, with
 * non-temporal stores (d and plane * 4 bytes 16-byte aligned, dw % 4 == 0;
 * the caller fences). Same arithmetic as the plain loop: a multiply, then
 * an add, so the bytes are the same. */
static inline __attribute__((always_inline)) void
nchw_stream(float *d, const float *r, const float *g, const float *b, const float sc[3],
            const float bi[3], size_t plane, int dw)
{
#if SL_RESAMPLE_STREAM
    const float *src[3] = {r, g, b};
    for (int c = 0; c < 3; c++) {
        __m128 m = _mm_set1_ps(sc[c]), a = _mm_set1_ps(bi[c]);
        float *o = d + (size_t)c * plane;
        for (int x = 0; x < dw; x += 4)
            _mm_stream_ps(o + x, _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(src[c] + x), m), a));
    }
#else
    (void)d, (void)r, (void)g, (void)b, (void)sc, (void)bi, (void)plane, (void)dw;
#endif
}

/* The AVX2 form of one NCHW f32 output row: YCbCr -> RGB (np 3) or gray
 * (np 1), the clamp and the normalization in one pass over the plane rows
 * y, cb, cr, eight values at a time, leaving R, G, B in place of them (in
 * L1); then each channel row streamed to its plane, eight at a time. The
 * plain form makes two passes of compute (convert, then normalize while
 * streaming four at a time). Streaming the three planes interleaved, eight
 * values each, measured 10 % slower than one plane row after the other.
 * The same operations in the same order (no FMA: target avx2 does not
 * enable it), so the same bytes (tests/pipeline/test_decode_yuv.c
 * streamed_nchw_equals_plain_stores compares the two): min(v, 255) then
 * max(0, .) is the plain clamp exactly (maxps returns its second operand
 * on equality, so -0.0 stays -0.0). d and plane * 4 bytes 16-byte aligned,
 * dw % 8 == 0; 32-byte stores when d is 32-byte aligned too. Called only
 * where the CPU has AVX2. */
#if SL_RESAMPLE_AVX2
__attribute__((target("avx2"))) static void
nchw_fused_avx2(float *d, float *y, float *cb, float *cr, int np, const float sc[3],
                const float bi[3], size_t plane, int dw)
{
    const __m256 k0 = _mm256_setzero_ps(), k255 = _mm256_set1_ps(255.0f);
    const __m256 kr = _mm256_set1_ps(SL_YCC_R_CR), kgb = _mm256_set1_ps(SL_YCC_G_CB),
                 kgr = _mm256_set1_ps(SL_YCC_G_CR), kb = _mm256_set1_ps(SL_YCC_B_CB);
    const __m256 m0 = _mm256_set1_ps(sc[0]), m1 = _mm256_set1_ps(sc[1]),
                 m2 = _mm256_set1_ps(sc[2]), a0 = _mm256_set1_ps(bi[0]),
                 a1 = _mm256_set1_ps(bi[1]), a2 = _mm256_set1_ps(bi[2]);
    for (int x = 0; x < dw; x += 8) {
        __m256 Y = _mm256_loadu_ps(y + x), r = Y, g = Y, b = Y;
        if (np == 3) {
            __m256 u = _mm256_loadu_ps(cb + x), v = _mm256_loadu_ps(cr + x);
            r = _mm256_add_ps(Y, _mm256_mul_ps(kr, v));
            g = _mm256_sub_ps(_mm256_sub_ps(Y, _mm256_mul_ps(kgb, u)), _mm256_mul_ps(kgr, v));
            b = _mm256_add_ps(Y, _mm256_mul_ps(kb, u));
        }
        r = _mm256_add_ps(_mm256_mul_ps(_mm256_max_ps(k0, _mm256_min_ps(r, k255)), m0), a0);
        g = _mm256_add_ps(_mm256_mul_ps(_mm256_max_ps(k0, _mm256_min_ps(g, k255)), m1), a1);
        b = _mm256_add_ps(_mm256_mul_ps(_mm256_max_ps(k0, _mm256_min_ps(b, k255)), m2), a2);
        _mm256_storeu_ps(y + x, r);
        _mm256_storeu_ps(cb + x, g);
        _mm256_storeu_ps(cr + x, b);
    }
    const float *src[3] = {y, cb, cr};
    int wide = ((uintptr_t)d & 31) == 0;
    for (int c = 0; c < 3; c++) {
        float *o = d + (size_t)c * plane;
        if (wide)
            for (int x = 0; x < dw; x += 8)
                _mm256_stream_ps(o + x, _mm256_loadu_ps(src[c] + x));
        else
            for (int x = 0; x < dw; x += 4)
                _mm_stream_ps(o + x, _mm_loadu_ps(src[c] + x));
    }
}
#endif

/* What one plane needs during the pass (in mem). */
typedef struct sl_pstate {
    sl_rtap *ht, *vt;         /* dw horizontal taps (relative to lo), dh vertical */
    int lo, n;                /* columns [lo, lo + n) are read */
    int linear;
    sl_hblk *blk;             /* linear: dw / 8 blocks, then the tables */
    int32_t *tab;             /* ia, ib, wa, wb: dw each */
    float *acc;               /* n + pad floats */
} sl_pstate;

/* The arguments checked: SL_OK, or SL_EINVAL saying what is wrong. */
static int check_args(const sl_plane_view *pl, int np, const sl_out_spec *o)
{
    if (!o || !pl || !o->dst || (np != 1 && np != 3) || o->w <= 0 || o->h <= 0 ||
        o->w > INT32_MAX / 3 || (unsigned)o->layout > SL_LAYOUT_NCHW_F32 ||
        (o->layout != SL_LAYOUT_NHWC_U8 && (!o->mean || !o->std)))
        return sl_fail(SL_EINVAL, "sl_resample_planes: bad arguments");
    for (int c = 0; c < np; c++) {
        const sl_plane_view *v = &pl[c];
        if (!v->p || v->w < 1 || v->h < 1 || v->pitch < v->w || !(v->cw > 0) || !(v->ch > 0) ||
            !(v->x0 >= 0) || !(v->y0 >= 0) || v->x0 + v->cw > v->w + 1e-6 ||
            v->y0 + v->ch > v->h + 1e-6)
            return sl_fail(SL_EINVAL, "sl_resample_planes: plane %d: window %gx%g at (%g,%g) "
                           "outside %dx%d", c, v->cw, v->ch, v->x0, v->y0, v->w, v->h);
    }
    return SL_OK;
}

/* The scratch's layout: per plane c its taps (off[c][0]), window blocks
 * and tables (off[c][1]) and acc row (off[c][2]), then three output rows
 * of dw floats at *o_out. Returns the bytes needed. */
static size_t scratch_plan(const sl_plane_view *pl, int np, int dw, int dh, size_t off[3][4],
                           size_t *o_out)
{
    size_t nblk = (size_t)dw / 8, need = 0;
    for (int c = 0; c < np; c++) {
        int cols = pl[c].w; /* upper bound on the columns read */
        off[c][0] = need;
        need = al32(need + ((size_t)dw + dh) * sizeof(sl_rtap));
        off[c][1] = need;
        need = al32(need + nblk * sizeof(sl_hblk) + (size_t)dw * 4 * sizeof(int32_t));
        off[c][2] = need;
        need = al32(need + ((size_t)cols + SL_RESAMPLE_PAD) * sizeof(float));
    }
    *o_out = need;
    return need + 3 * (size_t)dw * sizeof(float);
}

/* Plane c's taps (mirrored when flip), the columns it reads and, when
 * every tap is bilinear, its tables, in mem at off. Cr on Cb's grid (every
 * JPEG) takes Cb's taps and tables (ps[1]) with its own acc row. */
static void plane_setup(sl_pstate *ps, const sl_plane_view *pl, int c, const sl_out_spec *o,
                        unsigned char *mem, const size_t off[4])
{
    const sl_plane_view *v = &pl[c];
    sl_pstate *s = &ps[c];
    int dw = o->w;
    size_t nblk = (size_t)dw / 8;
    s->ht = (sl_rtap *)(mem + off[0]);
    s->vt = s->ht + dw;
    s->blk = (sl_hblk *)(mem + off[1]);
    s->tab = (int32_t *)(s->blk + nblk);
    s->acc = (float *)(mem + off[2]);
    if (c == 2 && v->w == pl[1].w && v->h == pl[1].h && v->x0 == pl[1].x0 &&
        v->y0 == pl[1].y0 && v->cw == pl[1].cw && v->ch == pl[1].ch) {
        float *acc = s->acc;
        *s = ps[1];
        s->acc = acc;
        memset(s->acc + s->n, 0, SL_RESAMPLE_PAD * sizeof(float));
        return;
    }
    window_taps(s->ht, v->x0, v->cw, v->w, dw);
    window_taps(s->vt, v->y0, v->ch, v->h, o->h);
    if (o->flip)
        for (int a = 0, b = dw - 1; a < b; a++, b--) {
            sl_rtap t = s->ht[a];
            s->ht[a] = s->ht[b];
            s->ht[b] = t;
        }
    int lo = INT32_MAX, hi = 0;
    s->linear = 1;
    for (int x = 0; x < dw; x++) {
        lo = s->ht[x].i0 < lo ? s->ht[x].i0 : lo;
        hi = s->ht[x].i0 + s->ht[x].n > hi ? s->ht[x].i0 + s->ht[x].n : hi;
        s->linear &= s->ht[x].n <= 2 && s->ht[x].wmid == 0;
    }
    for (int x = 0; x < dw; x++)
        s->ht[x].i0 -= lo;
    s->lo = lo;
    s->n = hi - lo;
    memset(s->acc + s->n, 0, SL_RESAMPLE_PAD * sizeof(float)); /* windows read the pad */
    if (s->linear) {
        int32_t *t = s->tab;
        sl_resample_expand_linear(s->ht, dw, 1.0f, t, t + dw, (float *)(t + 2 * dw),
                                  (float *)(t + 3 * dw), s->blk);
    }
}

/* Output row y of one plane, v's rows through s's taps: the vertical pass
 * into s->acc, then the horizontal one plus bias into out (dw floats). */
static inline __attribute__((always_inline)) void
plane_row(const sl_pstate *s, const sl_plane_view *v, int y, int dw, float bias, int avx2,
          float *out)
{
    const sl_rtap *t = &s->vt[y];
    const uint8_t *row = v->p + (size_t)t->i0 * v->pitch + s->lo;
    if (t->n == 2) {
#if SL_RESAMPLE_AVX2
        if (avx2)
            prow_two_avx2(s->acc, row, row + v->pitch, t->w0, t->wn, s->n);
        else
#endif
        prow_two(s->acc, row, row + v->pitch, t->w0, t->wn, s->n);
    } else {
        prow_set(s->acc, row, t->w0, s->n);
        for (int k = 1; k < t->n; k++) {
            float w = k == t->n - 1 ? t->wn : t->wmid;
            prow_add(s->acc, row + (size_t)k * v->pitch, w, s->n);
        }
    }
    (void)avx2;
    if (s->linear) {
        const int32_t *tc = s->tab;
        hplane(s->blk, tc, tc + dw, (const float *)(tc + 2 * dw), (const float *)(tc + 3 * dw),
               bias, dw, s->acc, out);
    } else {
        harea_plane(s->ht, dw, s->acc, bias, out);
    }
}

/* RGB in place of the resized planes: JFIF YCbCr -> RGB (libjpeg
 * jdcolor.c; np 3), or R = G = B = Y (np 1), clamped to 0..255. */
static inline __attribute__((always_inline)) void
rgb_rows(float *restrict r, float *restrict g, float *restrict b, int np, int dw)
{
    if (np == 3) {
        for (int x = 0; x < dw; x++) {
            float Y = r[x], cb = g[x], cr = b[x];
            float vr = Y + SL_YCC_R_CR * cr;
            float vg = Y - SL_YCC_G_CB * cb - SL_YCC_G_CR * cr;
            float vb = Y + SL_YCC_B_CB * cb;
            r[x] = vr < 0.0f ? 0.0f : vr > 255.0f ? 255.0f : vr;
            g[x] = vg < 0.0f ? 0.0f : vg > 255.0f ? 255.0f : vg;
            b[x] = vb < 0.0f ? 0.0f : vb > 255.0f ? 255.0f : vb;
        }
    } else {
        for (int x = 0; x < dw; x++) {
            float Y = r[x] < 0.0f ? 0.0f : r[x] > 255.0f ? 255.0f : r[x];
            r[x] = g[x] = b[x] = Y;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                        \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
int sl_resample_planes(const sl_plane_view *pl, int np, const sl_out_spec *o)
{
    int rc = check_args(pl, np, o);
    if (rc)
        return rc;
    int dw = o->w, dh = o->h;
    float sc[3] = {1, 1, 1}, bi[3] = {0, 0, 0};
    if (o->layout != SL_LAYOUT_NHWC_U8)
        for (int c = 0; c < 3; c++) {
            sc[c] = 1.0f / o->std[c];
            bi[c] = -o->mean[c] * sc[c];
        }
    size_t off[3][4], o_out, need = scratch_plan(pl, np, dw, dh, off, &o_out);
    _Alignas(32) unsigned char stackbuf[SL_RESAMPLE_STACK];
    unsigned char *mem = stackbuf;
    if (need > sizeof stackbuf && !(mem = aligned_alloc(32, al32(need))))
        return sl_fail(SL_ENOMEM, "sl_resample_planes: %zu bytes: out of memory", need);
    sl_pstate ps[3];
    for (int c = 0; c < np; c++)
        plane_setup(ps, pl, c, o, mem, off[c]);
    float *r = (float *)(mem + o_out), *g = r + dw, *b = g + dw, *rows[3] = {r, g, b};
    size_t plane = (size_t)dh * dw;
    /* A 224 x 224 f32 sample is 588 KiB, written once and read next by the
     * consumer, after the rest of the batch (tens of MiB): streamed stores
     * skip reading each destination line into the cache first. */
    int stream = SL_RESAMPLE_STREAM && o->layout == SL_LAYOUT_NCHW_F32 && dw % 4 == 0 &&
                 ((uintptr_t)o->dst & 15) == 0;
    /* Chroma leaves the planes centred on 0 (the bias), the conversion
     * wants Cb - 128 and Cr - 128. */
    const float pbias[3] = {0.0f, -128.0f, -128.0f};
    int avx2 = 0;
#if SL_RESAMPLE_AVX2
    avx2 = __builtin_cpu_supports("avx2");
    int fused = avx2 && stream && dw % 8 == 0;
#endif
    for (int y = 0; y < dh; y++) {
        for (int c = 0; c < np; c++)
            plane_row(&ps[c], &pl[c], y, dw, pbias[c], avx2, rows[c]);
#if SL_RESAMPLE_AVX2
        if (fused) {
            nchw_fused_avx2((float *)o->dst + (size_t)y * dw, r, g, b, np, sc, bi, plane, dw);
            continue;
        }
#endif
        rgb_rows(r, g, b, np, dw);
        if (stream)
            nchw_stream((float *)o->dst + (size_t)y * dw, r, g, b, sc, bi, plane, dw);
        else
            sl_store_row(o, y, r, g, b, sc, bi, 0.5f, 0); /* rgb_rows clamped */
    }
#if SL_RESAMPLE_STREAM
    if (stream)
        _mm_sfence(); /* order the streamed stores before whatever publishes the sample */
#endif
    if (mem != stackbuf)
        free(mem);
    return SL_OK;
}

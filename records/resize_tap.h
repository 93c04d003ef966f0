/*
 * records/resize_tap.h - the resize filter's tap for one output coordinate,
 * written once for every place that resizes: records/resize.c
 * (sl_resize_taps, the converter's and the CPU pipeline's tables),
 * pipeline/image/gdec_cuda.cu (the GPU crop-resize kernel, one tap per output
 * pixel) and pipeline/image/resample_planes.c (window_taps, on a window that need
 * not start or end on a pixel edge). gcc (C11) and nvcc both compile it, so
 * the CPU tables and the kernel compute the same taps by the same code;
 * tests/records/test_resize_tap.c pins that and the taps' bits.
 *
 * Filter, per direction, with scale = s / d (s source pixels, d outputs):
 *   scale >= 2: area averaging (OpenCV INTER_AREA): output x averages the
 *               source interval [x*scale, (x+1)*scale), each pixel weighted
 *               by its overlap / scale: first pixel w0, the interior ones
 *               wmid, the last one wn.
 *   scale <  2: bilinear with half-pixel centres (OpenCV INTER_LINEAR):
 *               centre c = (x + 0.5) * scale - 0.5 clamped to [0, s - 1],
 *               pixels floor(c) and floor(c) + 1 weighted 1 - f and f.
 *
 * What window_taps shares and what not: its bilinear tap is this one with
 * the window's start a added to the centre (sl_resize_tap_linear; a = 0
 * here, and 0 + p is p exactly, so the same bits). Its area tap shares the
 * weights (sl_resize_tap_area) but not the interval edges: sl_resize_tap_at
 * finds first and last pixel in exact integers (units of 1/d pixel, so no
 * rounding decides whether an edge pixel is touched), which a fractional
 * window (4:2:0 chroma of a crop at an odd x starts mid-sample) cannot be
 * written in; window_taps takes floor / ceil of the interval in double and
 * clamps them to the plane against rounding past its edge. So on a whole
 * plane its area taps are sl_resize_taps' only up to that rounding: for s,
 * d <= 1500 about 0.15 % of them differ, by an edge landing an ulp past a
 * pixel boundary (one more pixel, of weight below 1e-12) or a weight's last
 * bit. Giving window_taps the integer edges would change the planar
 * decode path's output, so it keeps its own.
 *
 * FMA: the bilinear centre is a product then a sum. nvcc fuses such a pair
 * into one fma by default (-fmad=true), which rounds once where the CPU
 * rounds twice and so moves some centres by an ulp, enough to change a tap
 * (s = 2, d = 6, x = 4: 1.0 on the CPU, just below 1.0 fused: i0 0 with a
 * weight of 1e-16 on pixel 0 instead of i0 1). sl_resize_mul keeps the
 * product unfused on the device (__dmul_rn); the C files are built without
 * FMA (no -mfma, no -march), as resample_int.h also relies on.
 *
 * Threading: pure functions, reentrant.
 */
#ifndef SL_RESIZE_TAP_H
#define SL_RESIZE_TAP_H

#include <stdint.h>

/* Callable from host and device code under nvcc; empty for gcc and for the
 * CUDA emulator's g++ build (tests/cuda-emu), where it is all host code. */
#ifdef __CUDACC__
#define SL_HOST_DEVICE __host__ __device__
#else
#define SL_HOST_DEVICE
#endif

/* Output coordinate x of d takes source pixels i0 .. i0+n-1 with weights
 * w0, wmid, ..., wmid, wn (n == 1: w0 only; n == 2: w0 and wn). */
typedef struct sl_resize_tap {
    int32_t i0, n;
    float w0, wmid, wn;
} sl_resize_tap;

/* a * b rounded once, never fused with the sum that follows (see FMA). */
static inline SL_HOST_DEVICE double sl_resize_mul(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

/* Bilinear tap of output x at scale (source pixels per output) over a
 * window that starts at source coordinate a, in a line of s pixels: centre
 * a + (x + 0.5) * scale - 0.5 clamped to [0, s - 1], split into pixel i0
 * and fraction f (n == 1 when f is 0 or i0 is the last pixel). */
static inline SL_HOST_DEVICE void sl_resize_tap_linear(sl_resize_tap *t, double a, double scale,
                                                       int x, int s)
{
    double c = a + sl_resize_mul(x + 0.5, scale) - 0.5;
    c = c < 0 ? 0 : c > s - 1 ? s - 1 : c;
    int i0 = (int)c;
    double f = c - i0;
    t->i0 = i0;
    t->wmid = 0;
    if (f == 0 || i0 + 1 >= s) {
        t->n = 1;
        t->w0 = 1;
        t->wn = 0;
    } else {
        t->n = 2;
        t->w0 = (float)(1 - f);
        t->wn = (float)f;
    }
}

/* Area tap over source pixels first .. last: e0 and e1 are the overlaps of
 * the first and the last pixel with the interval, unit one whole pixel and
 * len the interval's length, all in the same unit (1/d pixel for
 * sl_resize_tap_at, pixels for window_taps). A single pixel (only where a
 * caller clamped the interval) takes weight 1. */
static inline SL_HOST_DEVICE void sl_resize_tap_area(sl_resize_tap *t, int first, int last,
                                                     double e0, double e1, double unit,
                                                     double len)
{
    t->i0 = first;
    t->n = last - first + 1;
    if (t->n == 1) {
        t->w0 = 1;
        t->wmid = t->wn = 0;
        return;
    }
    t->w0 = (float)(e0 / len);
    t->wmid = (float)(unit / len);
    t->wn = (float)(e1 / len);
}

/* The tap of output coordinate x (0 <= x < d) when s pixels are resized to
 * d (s, d >= 1): what sl_resize_taps (records.h) stores at t[x] and what
 * the GPU kernel computes for x. Area intervals in exact integers: output
 * x covers [x*s, (x+1)*s) in units of 1/d pixel, so first = x*s / d and
 * last = ((x+1)*s - 1) / d, and weights are overlap_units / s (there n >= 2
 * always: the interval is at least two pixels long). */
static inline SL_HOST_DEVICE sl_resize_tap sl_resize_tap_at(int s, int d, int x)
{
    sl_resize_tap t;
    double scale = (double)s / d;
    if (scale >= 2.0) {
        int64_t a = (int64_t)x * s, b = (int64_t)(x + 1) * s; /* in 1/d units */
        int64_t first = a / d, last = (b - 1) / d;            /* pixels touched */
        sl_resize_tap_area(&t, (int)first, (int)last, (double)((first + 1) * d - a),
                           (double)(b - last * d), (double)d, (double)s);
        return t;
    }
    sl_resize_tap_linear(&t, 0.0, scale, x, s);
    return t;
}

#endif /* SL_RESIZE_TAP_H */

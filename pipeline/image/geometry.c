/*
 * pipeline/image/geometry.c - which source pixels a sample is made from.
 *
 * Train: torchvision's RandomResizedCrop.get_params (torchvision
 * transforms/transforms.py), draw for draw:
 *
 *   for 10 tries:
 *       a = W*H * U(smin, smax)                   target area
 *       r = exp(U(log rmin, log rmax))            log-uniform aspect ratio w/h
 *       w = round(sqrt(a*r)), h = round(sqrt(a/r))
 *       if 0 < w <= W and 0 < h <= H:
 *           y = U{0 .. H-h}, x = U{0 .. W-w}      (torchvision draws i = top first)
 *           return (x, y, w, h)
 *   fallback, a center crop with the ratio clamped to [min r, max r]:
 *       W/H < min r: w = W, h = round(w / min r)
 *       W/H > max r: h = H, w = round(h * max r)
 *       else the whole image;  x = (W-w) // 2, y = (H-h) // 2
 *
 * Draws come from the sample's sl_rng: two sl_rng_uniform per try, then two
 * sl_rng_below for the position, so a crop depends only on the stream (the
 * same crop whatever thread computes it). The arithmetic is in double from
 * the float draws, as torchvision's Python floats are.
 *
 * Rounding: round(v) here is floor(v + 0.5) (ties away from zero for the
 * positive values involved). Python's round() ties to even; the two differ
 * only when sqrt(a*r) or w / rmin lands exactly on k + 0.5, which the
 * continuous draws practically never produce. The random numbers are not
 * torch's anyway: the distribution is the same, the exact crops are not.
 *
 * Eval: "resize the shorter side to S = round(max(oh, ow) / crop_fraction),
 * center crop oh x ow" (torchvision Resize + CenterCrop, timm's eval
 * transform) maps back to a source region of (ow / scale) x (oh / scale),
 * scale = S / min(W, H), centered: the decoder then resizes exactly that
 * region to oh x ow, one resampling instead of two.
 *
 * Threading: reentrant (no state besides the caller's rng).
 */
#include <math.h>

#include "pipeline/image/image.h"

#define SL_RRC_TRIES 10

/* floor(v + 0.5), see "Rounding" above; v is finite and modest here. */
static int round_half_up(double v)
{
    return (int)floor(v + 0.5);
}

static int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void sl_rrc_geometry(sl_rng *rng, int W, int H, float smin, float smax, float rmin, float rmax,
                     sl_crop *out)
{
    if (W < 1)
        W = 1;
    if (H < 1)
        H = 1;
    double area = (double)W * H;
    double lr0 = log((double)rmin), lr1 = log((double)rmax);
    for (int t = 0; t < SL_RRC_TRIES; t++) {
        double u_area = sl_rng_uniform(rng);
        double u_ratio = sl_rng_uniform(rng);
        double a = area * (smin + (smax - (double)smin) * u_area);
        double r = exp(lr0 + (lr1 - lr0) * u_ratio);
        /* Compare in double first: a degenerate config (huge smax) must not
         * overflow the int conversion. */
        double wf = floor(sqrt(a * r) + 0.5), hf = floor(sqrt(a / r) + 0.5);
        if (!(wf >= 1 && wf <= W && hf >= 1 && hf <= H))
            continue;
        int w = (int)wf, h = (int)hf;
        out->y = (int)sl_rng_below(rng, (uint64_t)(H - h) + 1);
        out->x = (int)sl_rng_below(rng, (uint64_t)(W - w) + 1);
        out->w = w;
        out->h = h;
        return;
    }
    /* Fallback: central crop at the nearest allowed ratio. */
    double lo = rmin < rmax ? rmin : rmax, hi = rmin < rmax ? rmax : rmin;
    double in_ratio = (double)W / H;
    int w = W, h = H;
    if (in_ratio < lo)
        h = clamp_int(round_half_up(w / lo), 1, H);
    else if (in_ratio > hi)
        w = clamp_int(round_half_up(h * hi), 1, W);
    out->w = w;
    out->h = h;
    out->x = (W - w) / 2;
    out->y = (H - h) / 2;
}

void sl_eval_geometry(int W, int H, int oh, int ow, float crop_fraction, sl_crop *out)
{
    if (W < 1)
        W = 1;
    if (H < 1)
        H = 1;
    if (oh < 1)
        oh = 1;
    if (ow < 1)
        ow = 1;
    double cf = crop_fraction > 0 ? crop_fraction : 1.0;
    int big = oh > ow ? oh : ow;
    /* S stays a double: a tiny crop_fraction must not overflow an int. */
    double S = floor(big / cf + 0.5);
    if (S < 1)
        S = 1;
    /* One resized pixel is min(W,H) / S source pixels. */
    double px = (W < H ? W : H) / S;
    int w = (int)fmin(fmax(floor(ow * px + 0.5), 1), W);
    int h = (int)fmin(fmax(floor(oh * px + 0.5), 1), H);
    out->w = w;
    out->h = h;
    out->x = (W - w) / 2;
    out->y = (H - h) / 2;
}

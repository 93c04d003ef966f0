/*
 * train/ops/act_kern_cpu.h - act_cpu.c's loops, written once for both
 * activation types: act_cpu.c includes this file twice, with SL_T, SL_LD,
 * SL_ST and SL_K as norm_kern_cpu.h says (f32: float and the identity;
 * bf16: uint16_t, the exact widening and the rounding store). ReLU and the
 * ReLU mask copy the element itself (a bf16 is exact), so only the add and
 * the pool's gradient sum round. Not a header of its own: no include
 * guard, nothing outside act_cpu.c.
 */

/* y = max(x, 0); NaN passes (x < 0 is false for it). Where an op allows
 * aliasing, the aliased case has its own in-place loop: with distinct
 * restrict pointers in the other case gcc needs no runtime overlap checks. */
SL_KCLONES static void SL_K(relu_inplace)(int64_t n, SL_T *y)
{
    for (int64_t i = 0; i < n; i++) {
        SL_T v = y[i];
        y[i] = SL_LD(v) < 0.0f ? (SL_T)0 : v;
    }
}

SL_KCLONES static void SL_K(relu_copy)(int64_t n, const SL_T *restrict x, SL_T *restrict y)
{
    for (int64_t i = 0; i < n; i++) {
        SL_T v = x[i];
        y[i] = SL_LD(v) < 0.0f ? (SL_T)0 : v;
    }
}

/* dx = dy where y > 0 else 0. */
SL_KCLONES static void SL_K(relu_bwd_inplace)(int64_t n, const SL_T *restrict y, SL_T *restrict g)
{
    for (int64_t i = 0; i < n; i++) {
        SL_T v = g[i];
        g[i] = SL_LD(y[i]) > 0.0f ? v : (SL_T)0;
    }
}

SL_KCLONES static void SL_K(relu_bwd_copy)(int64_t n, const SL_T *restrict y, const SL_T *restrict dy,
                                SL_T *restrict dx)
{
    for (int64_t i = 0; i < n; i++) {
        SL_T g = dy[i]; /* loaded unconditionally, so the select vectorizes */
        dx[i] = SL_LD(y[i]) > 0.0f ? g : (SL_T)0;
    }
}

/* y += b; y += y; y = a + b (float addition commutes exactly). */
SL_KCLONES static void SL_K(add_inplace)(int64_t n, SL_T *restrict y, const SL_T *restrict b)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = SL_ST(SL_LD(y[i]) + SL_LD(b[i]));
}

SL_KCLONES static void SL_K(add_self)(int64_t n, SL_T *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = SL_ST(SL_LD(y[i]) + SL_LD(y[i]));
}

SL_KCLONES static void SL_K(add_copy)(int64_t n, const SL_T *restrict a, const SL_T *restrict b,
                           SL_T *restrict y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = SL_ST(SL_LD(a[i]) + SL_LD(b[i]));
}

/* The three element-wise ops of ew_range (act_cpu.c) on n elements. */
SL_KCLONES static void SL_K(ew_run)(int op, int64_t n, const SL_T *a, const SL_T *b, SL_T *y)
{
    switch (op) {
    case EW_RELU:
        if (a == y)
            SL_K(relu_inplace)(n, y);
        else
            SL_K(relu_copy)(n, a, y);
        break;
    case EW_RELU_BWD: /* a is y, b is dy */
        if (b == y)
            SL_K(relu_bwd_inplace)(n, a, y);
        else
            SL_K(relu_bwd_copy)(n, a, b, y);
        break;
    default:
        if (y == a && y == b)
            SL_K(add_self)(n, y);
        else if (y == a)
            SL_K(add_inplace)(n, y, b);
        else if (y == b)
            SL_K(add_inplace)(n, y, a);
        else
            SL_K(add_copy)(n, a, b, y);
        break;
    }
}

/* First in-bounds tap of a window: y, argmax (c) = x (c) at flat index base. */
SL_KCLONES static void SL_K(pool_tap_first)(int c, const SL_T *restrict xp, int32_t base,
                                 SL_T *restrict yp, int32_t *restrict ap)
{
    for (int ch = 0; ch < c; ch++) {
        yp[ch] = xp[ch];
        ap[ch] = base + ch;
    }
}

/* Later taps win when strictly greater (ties keep the first) or the first
 * NaN; written as selects so the channel loop vectorizes. */
SL_KCLONES static void SL_K(pool_tap)(int c, const SL_T *restrict xp, int32_t base, SL_T *restrict yp,
                           int32_t *restrict ap)
{
    for (int ch = 0; ch < c; ch++) {
        SL_T xv = xp[ch], yv = yp[ch];
        float v = SL_LD(xv), b = SL_LD(yv);
        int win = (v > b) | ((v != v) & (b == b));
        yp[ch] = win ? xv : yv;
        ap[ch] = win ? base + ch : ap[ch];
    }
}

/* acc (c) = sum of rows x (rows, c) in float. */
SL_KCLONES static void SL_K(gap_rows)(int64_t rows, int c, const SL_T *restrict x, float *restrict acc)
{
    for (int ch = 0; ch < c; ch++)
        acc[ch] = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++)
            acc[ch] += SL_LD(x[r * c + ch]);
}

/* One pixel's channels of the max pool's input gradient as a gather:
 * acc = the dy of every window (in (p, q) order, the order the reference's
 * scatter adds them in) whose winner is this pixel's channel, from 0, in
 * float, then stored. dyw, aw: the first window's (c) rows; the windows
 * [p0, p1] x [q0, q1] have strides ps (a row of windows) and c. Returns
 * how many winners it found (act_cpu.c checks that every window's was). */
SL_KCLONES static int64_t SL_K(pool_gather)(int c, const SL_T *dyw, const int32_t *aw, int32_t base,
                                 int p0, int p1, int q0, int q1, int64_t ps,
                                 float *restrict acc, SL_T *restrict dx)
{
    int hits = 0;
    for (int ch = 0; ch < c; ch++)
        acc[ch] = 0;
    for (int p = p0; p <= p1; p++)
        for (int q = q0; q <= q1; q++) {
            int64_t o = (int64_t)(p - p0) * ps + (int64_t)(q - q0) * c;
            const SL_T *g = dyw + o;
            const int32_t *a = aw + o;
            for (int ch = 0; ch < c; ch++) {
                float v = SL_LD(g[ch]);
                int hit = a[ch] == base + ch;
                acc[ch] += hit ? v : 0.0f;
                hits += hit;
            }
        }
    for (int ch = 0; ch < c; ch++)
        dx[ch] = SL_ST(acc[ch]);
    return hits;
}

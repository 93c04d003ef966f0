/*
 * train/ops/norm_kern_cpu.h - norm_cpu.c's per-row kernels, written once for
 * both activation types: norm_cpu.c includes this file twice, with
 *   SL_T       the element type of x, y, dy, dx, r, z (float or uint16_t)
 *   SL_LD(v)   an element as a float (bf16: the exact widening)
 *   SL_ST(f)   a float as an element (bf16: rounded to nearest even)
 *   SL_RND(f)  f rounded as SL_ST would store it, kept as a float
 *   SL_K(name) the kernel's name for this type (name##_f32, name##_bf16)
 * so the bf16 passes are the f32 passes' arithmetic on the widened values,
 * with a rounding wherever a tensor is stored (cpu_int.h: sl_bf16_st).
 * Per-channel arrays (mean, scale, sums) are f32 / double in both. The
 * restrict channel arrays let gcc vectorize without alias versioning.
 * Not a header of its own: no include guard, nothing outside norm_cpu.c.
 *
 * SL_K512(call): for bf16, the training passes hand channel counts that
 * are multiples of 32 to norm_avx512.c's kernels (the same bits; that file
 * says why) where sl_bn512_ok says so; nothing for f32.
 *
 * Each kernel is a body (SL_KBODY, inlined) taking the channel count c
 * first, and a clone (SL_KCLONES) that calls it through SL_KCALL: for bf16
 * SL_BY_C, with c a constant 8, 16 or 32 (the narrow layers: ResNet-20's
 * 8/16/32 at width 8) and with c as given otherwise; for f32 with c as
 * given (there the constants measured slower: a row of 8 floats fills the
 * vector already). gcc vectorizes the channel loop by the
 * narrowest element (16 bf16 lanes in a 256-bit vector), so a row of 8 bf16
 * channels never reached the vector loop and ran scalar, 4.4 ns an element
 * against 0.57 for f32 (perf: half the demo's bf16 step); with the count
 * known it picks vectors that fit. The element-wise passes (apply, affine,
 * dx) go further below SL_WIDE_C channels: k rows are one row of
 * SL_WIDE_C channels with the per-channel arrays repeated k times
 * (sl_wide_rows, sl_wide_params in norm_cpu.c), the width their vectors
 * run best at. The arithmetic is the same expression in the same order
 * either way: the same bits.
 */

/* y = ((x - hi) - lo)*scale + beta per channel; then, when r is not NULL,
 * y = y + r, then, when relu, y = max(y, 0) (NaN passes), each step
 * rounded as the unfused ops (bn, add, relu) store it, so the fused
 * bn_fwd_train_act gives their bits. x, r, y (rows, c); y may be x or r
 * (exactly: SL_IVDEP), else disjoint from both. */
SL_KBODY void SL_K(bn_apply_c)(int c, int64_t rows, const SL_T *x, const float *restrict hi,
                                     const float *restrict lo, const float *restrict scale,
                                     const float *restrict beta, const SL_T *r, int relu,
                                     SL_T *y)
{
/* one value of the affine map, as a float; the loops over rows i of the
 * x (xr), r (rr) and y (yr) rows, one loop nest per case, each without
 * branches, so each vectorizes (with a constant c, across rows) */
#define BN_V(ch) (((SL_LD(xr[ch]) - hi[ch]) - lo[ch]) * scale[ch] + beta[ch])
#define BN_ROWS(R, BODY)                                                                     \
    SL_IVDEP                                                                                 \
    for (int64_t i = 0; i < rows; i++) {                                                     \
        const SL_T *xr = x + i * c, *rr = R;                                                 \
        SL_T *yr = y + i * c;                                                                \
        (void)rr;                                                                            \
        SL_IVDEP                                                                             \
        for (int ch = 0; ch < c; ch++) {                                                     \
            BODY;                                                                            \
        }                                                                                    \
    }
    if (r && relu) {
        BN_ROWS(r + i * c, float v = SL_RND(SL_RND(BN_V(ch)) + SL_LD(rr[ch]));
                yr[ch] = SL_ST(v < 0.0f ? 0.0f : v))
    } else if (r) {
        BN_ROWS(r + i * c, yr[ch] = SL_ST(SL_RND(BN_V(ch)) + SL_LD(rr[ch])))
    } else if (relu) {
        BN_ROWS(NULL, float v = SL_RND(BN_V(ch)); yr[ch] = SL_ST(v < 0.0f ? 0.0f : v))
    } else {
        BN_ROWS(NULL, yr[ch] = SL_ST(BN_V(ch)))
    }
#undef BN_ROWS
#undef BN_V
}
SL_KCLONES static void SL_K(bn_apply)(int64_t rows, int c, const SL_T *x, const float *restrict hi,
                           const float *restrict lo, const float *restrict scale,
                           const float *restrict beta, const SL_T *r, int relu, SL_T *y)
{
    SL_K512(sl_bn512_apply(rows, c, x, hi, lo, scale, beta, r, relu, y));
    float w[4][SL_WIDE_C];
    int64_t k = sl_wide_rows(c, rows);
    if (k) { /* k rows as one of SL_WIDE_C channels, then the rest */
        const float *p[4] = {hi, lo, scale, beta};
        sl_wide_params(c, 4, p, w);
        SL_K(bn_apply_c)(SL_WIDE_C, rows / k, x, w[0], w[1], w[2], w[3], r, relu, y);
        int64_t done = rows / k * k;
        x += done * c, y += done * c, r = r ? r + done * c : NULL, rows -= done;
    }
    SL_KCALL(SL_K(bn_apply_c), rows, x, hi, lo, scale, beta, r, relu, y);
}

/* One block of nb rows of x: its float mean bmean and the sums s1, s2 of
 * d = x - bmean and d^2 per channel (the two looks while it is in cache). */
SL_KBODY void SL_K(stats_block_c)(int c, int64_t nb, const SL_T *restrict xb,
                                        float *restrict bmean, float *restrict s1,
                                        float *restrict s2)
{
    for (int ch = 0; ch < c; ch++)
        bmean[ch] = s1[ch] = s2[ch] = 0;
    for (int64_t r = 0; r < nb; r++)
        for (int ch = 0; ch < c; ch++)
            bmean[ch] += SL_LD(xb[r * c + ch]);
    float inv = 1.0f / (float)nb;
    for (int ch = 0; ch < c; ch++)
        bmean[ch] *= inv;
    for (int64_t r = 0; r < nb; r++)
        for (int ch = 0; ch < c; ch++) {
            float d = SL_LD(xb[r * c + ch]) - bmean[ch];
            s1[ch] += d;
            s2[ch] += d * d;
        }
}
SL_KCLONES static void SL_K(stats_block)(int64_t nb, int c, const SL_T *restrict xb,
                              float *restrict bmean, float *restrict s1, float *restrict s2)
{
    SL_K512(sl_bn512_stats_block(nb, c, xb, bmean, s1, s2));
    SL_KCALL(SL_K(stats_block_c), nb, xb, bmean, s1, s2);
}

/* mean, m2 (c) of x (rows, c): blocks of bn_stats_block(c) rows merged in
 * order (stats_merge); bmean, s1, s2 (c) float scratch. */
SL_KCLONES static void SL_K(stats_all)(int64_t rows, int c, const SL_T *restrict x, double *restrict mean,
                            double *restrict m2, float *restrict bmean, float *restrict s1,
                            float *restrict s2)
{
    int64_t blk = bn_stats_block(c);
    for (int ch = 0; ch < c; ch++)
        mean[ch] = m2[ch] = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += blk) {
        int64_t nb = rows - r0 < blk ? rows - r0 : blk;
        SL_K(stats_block)(nb, c, x + r0 * c, bmean, s1, s2);
        stats_merge(r0, nb, c, bmean, s1, s2, mean, m2);
    }
}

/* y = (x - mean)*scale + beta per channel. */
SL_KBODY void SL_K(affine_c)(int c, int64_t rows, const SL_T *x,
                                   const float *restrict mean, const float *restrict scale,
                                   const float *restrict beta, SL_T *y)
{
    SL_IVDEP
    for (int64_t r = 0; r < rows; r++) {
        const SL_T *xr = x + r * c;
        SL_T *yr = y + r * c;
        SL_IVDEP
        for (int ch = 0; ch < c; ch++)
            yr[ch] = SL_ST((SL_LD(xr[ch]) - mean[ch]) * scale[ch] + beta[ch]);
    }
}
SL_KCLONES static void SL_K(affine)(int64_t rows, int c, const SL_T *x, const float *restrict mean,
                         const float *restrict scale, const float *restrict beta, SL_T *y)
{
    float w[3][SL_WIDE_C];
    int64_t k = sl_wide_rows(c, rows);
    if (k) {
        const float *p[3] = {mean, scale, beta};
        sl_wide_params(c, 3, p, w);
        SL_K(affine_c)(SL_WIDE_C, rows / k, x, w[0], w[1], w[2], y);
        int64_t done = rows / k * k;
        x += done * c, y += done * c, rows -= done;
    }
    SL_KCALL(SL_K(affine_c), rows, x, mean, scale, beta, y);
}

/* One block of nb rows: float sums of dy and dy*(x - mean) per channel.
 * With z (the fused bn_bwd_act): dy := dy where z > 0 else 0 first,
 * stored back (relu_bwd in place, the same bits), and summed masked. */
SL_KBODY void SL_K(sums_block_c)(int c, int64_t nb, const SL_T *restrict xb,
                                       const SL_T *zb, SL_T *gb, const float *restrict mean,
                                       float *restrict fdy, float *restrict fdxc)
{
    for (int ch = 0; ch < c; ch++)
        fdy[ch] = fdxc[ch] = 0;
    /* the masked dy is summed from the register it is stored from (read
     * back, it waited on the store: 0.86 ns an element at 16 channels) */
    if (zb)
        for (int64_t r = 0; r < nb; r++) {
            SL_T *gr = gb + r * c;
            const SL_T *zr = zb + r * c, *xr = xb + r * c;
            SL_IVDEP
            SL_NOUNROLL
            for (int ch = 0; ch < c; ch++) {
                SL_T g = gr[ch]; /* loaded unconditionally, so the select vectorizes */
                g = SL_LD(zr[ch]) > 0.0f ? g : (SL_T)0;
                gr[ch] = g;
                float f = SL_LD(g);
                fdy[ch] += f;
                fdxc[ch] += f * (SL_LD(xr[ch]) - mean[ch]);
            }
        }
    else
        for (int64_t r = 0; r < nb; r++) {
            const SL_T *gr = gb + r * c, *xr = xb + r * c;
            SL_NOUNROLL
            for (int ch = 0; ch < c; ch++) {
                float f = SL_LD(gr[ch]);
                fdy[ch] += f;
                fdxc[ch] += f * (SL_LD(xr[ch]) - mean[ch]);
            }
        }
}
SL_KCLONES static void SL_K(sums_block)(int64_t nb, int c, const SL_T *restrict xb, const SL_T *zb,
                             SL_T *gb, const float *restrict mean, float *restrict fdy,
                             float *restrict fdxc)
{
    SL_K512(sl_bn512_sums_block(nb, c, xb, zb, gb, mean, fdy, fdxc));
    SL_KCALL(SL_K(sums_block_c), nb, xb, zb, gb, mean, fdy, fdxc);
}

/* sdy, sdxc (c) over all rows in blocks of BN_ROWS_MAX, folded into
 * double in order; z as sums_block's. */
SL_KCLONES static void SL_K(sums_all)(int64_t rows, int c, const SL_T *restrict x, const SL_T *z, SL_T *dy,
                           const float *restrict mean, double *restrict sdy,
                           double *restrict sdxc, float *restrict fdy, float *restrict fdxc)
{
    for (int ch = 0; ch < c; ch++)
        sdy[ch] = sdxc[ch] = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += BN_ROWS_MAX) {
        int64_t nb = rows - r0 < BN_ROWS_MAX ? rows - r0 : BN_ROWS_MAX;
        SL_K(sums_block)(nb, c, x + r0 * c, z ? z + r0 * c : NULL, dy + r0 * c, mean, fdy, fdxc);
        for (int ch = 0; ch < c; ch++) {
            sdy[ch] += fdy[ch];
            sdxc[ch] += fdxc[ch];
        }
    }
}

/* dx = a*dy - k*(x - mean) - b per channel. dx may be dy (exactly: each
 * element is read before it is written, SL_IVDEP), else disjoint. */
SL_KBODY void SL_K(bn_dx_c)(int c, int64_t rows, const SL_T *x, const SL_T *dy,
                                  const float *restrict mean, const float *restrict a,
                                  const float *restrict k, const float *restrict b, SL_T *dx)
{
    SL_IVDEP
    for (int64_t r = 0; r < rows; r++) {
        const SL_T *xr = x + r * c, *gr = dy + r * c;
        SL_T *dr = dx + r * c;
        SL_IVDEP
        for (int ch = 0; ch < c; ch++)
            dr[ch] = SL_ST(a[ch] * SL_LD(gr[ch]) - k[ch] * (SL_LD(xr[ch]) - mean[ch]) - b[ch]);
    }
}
SL_KCLONES static void SL_K(bn_dx)(int64_t rows, int c, const SL_T *x, const SL_T *dy,
                        const float *restrict mean, const float *restrict a,
                        const float *restrict k, const float *restrict b, SL_T *dx)
{
    SL_K512(sl_bn512_dx(rows, c, x, dy, mean, a, k, b, dx));
    float w[4][SL_WIDE_C];
    int64_t kr = sl_wide_rows(c, rows);
    if (kr) {
        const float *p[4] = {mean, a, k, b};
        sl_wide_params(c, 4, p, w);
        SL_K(bn_dx_c)(SL_WIDE_C, rows / kr, x, dy, w[0], w[1], w[2], w[3], dx);
        int64_t done = rows / kr * kr;
        x += done * c, dy += done * c, dx += done * c, rows -= done;
    }
    SL_KCALL(SL_K(bn_dx_c), rows, x, dy, mean, a, k, b, dx);
}

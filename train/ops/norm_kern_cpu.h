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
 */

/* y = ((x - hi) - lo)*scale + beta per channel; then, when r is not NULL,
 * y = y + r, then, when relu, y = max(y, 0) (NaN passes), each step
 * rounded as the unfused ops (bn, add, relu) store it, so the fused
 * bn_fwd_train_act gives their bits. x, r, y (rows, c); y may be x or r. */
SL_KCLONES static void SL_K(bn_apply)(int64_t rows, int c, const SL_T *x, const float *restrict hi,
                           const float *restrict lo, const float *restrict scale,
                           const float *restrict beta, const SL_T *r, int relu, SL_T *y)
{
/* one value of the affine map, as a float */
#define BN_V(ch) (((SL_LD(xr[ch]) - hi[ch]) - lo[ch]) * scale[ch] + beta[ch])
    /* one loop per case, each without branches, so each vectorizes */
    for (int64_t i = 0; i < rows; i++) {
        const SL_T *xr = x + i * c, *rr = r ? r + i * c : NULL;
        SL_T *yr = y + i * c;
        if (rr && relu)
            for (int ch = 0; ch < c; ch++) {
                float v = SL_RND(SL_RND(BN_V(ch)) + SL_LD(rr[ch]));
                yr[ch] = SL_ST(v < 0.0f ? 0.0f : v);
            }
        else if (rr)
            for (int ch = 0; ch < c; ch++)
                yr[ch] = SL_ST(SL_RND(BN_V(ch)) + SL_LD(rr[ch]));
        else if (relu)
            for (int ch = 0; ch < c; ch++) {
                float v = SL_RND(BN_V(ch));
                yr[ch] = SL_ST(v < 0.0f ? 0.0f : v);
            }
        else
            for (int ch = 0; ch < c; ch++)
                yr[ch] = SL_ST(BN_V(ch));
    }
#undef BN_V
}

/* One block of nb rows of x: its float mean bmean and the sums s1, s2 of
 * d = x - bmean and d^2 per channel (the two looks while it is in cache). */
SL_KCLONES static void SL_K(stats_block)(int64_t nb, int c, const SL_T *restrict xb,
                              float *restrict bmean, float *restrict s1, float *restrict s2)
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
SL_KCLONES static void SL_K(affine)(int64_t rows, int c, const SL_T *x, const float *restrict mean,
                         const float *restrict scale, const float *restrict beta, SL_T *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const SL_T *xr = x + r * c;
        SL_T *yr = y + r * c;
        for (int ch = 0; ch < c; ch++)
            yr[ch] = SL_ST((SL_LD(xr[ch]) - mean[ch]) * scale[ch] + beta[ch]);
    }
}

/* One block of nb rows: float sums of dy and dy*(x - mean) per channel.
 * With z (the fused bn_bwd_act): dy := dy where z > 0 else 0 first,
 * stored back (relu_bwd in place, the same bits), and summed masked. */
SL_KCLONES static void SL_K(sums_block)(int64_t nb, int c, const SL_T *restrict xb, const SL_T *zb,
                             SL_T *gb, const float *restrict mean, float *restrict fdy,
                             float *restrict fdxc)
{
    for (int ch = 0; ch < c; ch++)
        fdy[ch] = fdxc[ch] = 0;
    for (int64_t r = 0; r < nb; r++) {
        SL_T *gr = gb + r * c;
        if (zb) {
            const SL_T *zr = zb + r * c;
            for (int ch = 0; ch < c; ch++) {
                SL_T g = gr[ch]; /* loaded unconditionally, so the select vectorizes */
                gr[ch] = SL_LD(zr[ch]) > 0.0f ? g : (SL_T)0;
            }
        }
        for (int ch = 0; ch < c; ch++) {
            float g = SL_LD(gr[ch]);
            fdy[ch] += g;
            fdxc[ch] += g * (SL_LD(xb[r * c + ch]) - mean[ch]);
        }
    }
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

/* dx = a*dy - k*(x - mean) - b per channel. dx may be dy (each element is
 * read before it is written). */
SL_KCLONES static void SL_K(bn_dx)(int64_t rows, int c, const SL_T *x, const SL_T *dy,
                        const float *restrict mean, const float *restrict a,
                        const float *restrict k, const float *restrict b, SL_T *dx)
{
    for (int64_t r = 0; r < rows; r++) {
        const SL_T *xr = x + r * c, *gr = dy + r * c;
        SL_T *dr = dx + r * c;
        for (int ch = 0; ch < c; ch++)
            dr[ch] = SL_ST(a[ch] * SL_LD(gr[ch]) - k[ch] * (SL_LD(xr[ch]) - mean[ch]) - b[ch]);
    }
}

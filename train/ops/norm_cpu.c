/*
 * train/ops/norm_cpu.c - batch normalization, cpu backend: passes over x in
 * memory order (row by row, c contiguous channels per row) whose channel
 * loops gcc -O3 vectorizes, split by rows over the exec's threads
 * (sl_par_for, train/ops/cpu_int.h). Same semantics as norm_ref.c
 * (PyTorch's BatchNorm2d; the formulas are in that file's comment).
 *
 * Threads and bits: the element-wise passes (apply, dx) give each thread a
 * range of rows. The reductions (statistics, backward sums) are already
 * blocked (below); on several threads each thread computes the float
 * partials of a range of blocks into scratch, and one thread merges them in
 * block order exactly as the single-threaded loop does, so the result is
 * the same to the bit on any number of threads.
 *
 * Layout: x, y, dy, dx (rows, c), rows = n*h*w; per-channel arrays (c).
 *
 * Why the passes look the way they do: these loops are memory-bound (a few
 * flops per float), so the goal is to touch x as few times as possible
 * while staying accurate for rows up to ~1e6 and for data far from zero
 * (BN after a layer with a large bias: x = 1000 + small noise).
 *   - Sums run in float per channel over blocks of at most 256 rows and
 *     fold into double per block, so float rounding never grows past a
 *     block (pairwise-style accuracy, ~1e-6 relative at any row count).
 *   - Training statistics: each block is read twice while it sits in
 *     cache: once for its float mean m_b, once for the sums of d = x - m_b
 *     and d^2. The block's exact mean and centered sum of squares follow
 *     (m_b + sum d/n_b and sum d^2 - (sum d)^2/n_b, the corrected two-pass
 *     algorithm) and merge into the running totals in double with Chan et
 *     al.'s pairwise update ("Updating formulae and a pairwise algorithm for
 *     computing sample variances", 1979). One trip to memory, no
 *     sum-of-squares cancellation.
 *   - Normalizing subtracts the mean as a float pair hi + lo: x - hi is
 *     exact when x is near the mean (Sterbenz), so the output keeps its
 *     precision even when |mean| >> std; a single float mean would lose
 *     ulp(1000)/std of it.
 * Per-channel scratch (a few c-sized arrays) comes from sl_exec_scratch.
 */
#include <math.h>

#include "train/ops/cpu_int.h"
#include "train/ops/ops.h"

/* Rows per float partial sum (accuracy) and the target block size in
 * floats for the two looks of the stats pass (stays in L1/L2). */
#define BN_ROWS_MAX 256
#define BN_BLOCK_FLOATS 8192
#define BN_ROWS_MIN 8

static int64_t bn_stats_block(int c)
{
    int64_t b = BN_BLOCK_FLOATS / c;
    return b < BN_ROWS_MIN ? BN_ROWS_MIN : b > BN_ROWS_MAX ? BN_ROWS_MAX : b;
}

/* Chan's merge of the running (seen, mean, m2) with a block (nb, bm, bq);
 * the first block (seen == 0) lands as is. */
static void stats_merge(int64_t seen, int64_t nb, int c, const float *restrict bmean,
                        const float *restrict s1, const float *restrict s2,
                        double *restrict mean, double *restrict m2)
{
    double fb = (double)nb, tot = (double)(seen + nb);
    double wmean = fb / tot, wm2 = (double)seen * fb / tot;
    for (int ch = 0; ch < c; ch++) {
        double bm = (double)bmean[ch] + (double)s1[ch] / fb;
        double bq = (double)s2[ch] - (double)s1[ch] * (double)s1[ch] / fb;
        bq = bq > 0 ? bq : 0;
        double d = bm - mean[ch];
        mean[ch] += d * wmean;
        m2[ch] += bq + d * d * wm2;
    }
}

/* Narrow rows as wide ones (norm_kern_cpu.h): k = SL_WIDE_C / c rows of c
 * channels are one row of SL_WIDE_C when c divides it and there are k rows
 * or more (0 otherwise); w[i] is p[i] repeated k times. */
#define SL_WIDE_C 32

static int64_t sl_wide_rows(int c, int64_t rows)
{
    if (c >= SL_WIDE_C || SL_WIDE_C % c || rows < SL_WIDE_C / c)
        return 0;
    return SL_WIDE_C / c;
}

static void sl_wide_params(int c, int n, const float *const *p, float (*w)[SL_WIDE_C])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < SL_WIDE_C; j++)
            w[i][j] = p[i][j % c];
}

/* The per-row kernels for f32 and bf16 activations (norm_kern_cpu.h). */
#define SL_T float
#define SL_LD(v) (v)
#define SL_ST(f) (f)
#define SL_RND(f) (f)
#define SL_K(name) name##_f32
#define SL_KCALL(f, ...) f(c, __VA_ARGS__)
#define SL_K512(call)
#include "train/ops/norm_kern_cpu.h"
#undef SL_T
#undef SL_LD
#undef SL_ST
#undef SL_RND
#undef SL_K
#undef SL_KCALL
#undef SL_K512
#define SL_T uint16_t
#define SL_LD(v) sl_bf16_ld(v)
#define SL_ST(f) sl_bf16_st(f)
#define SL_RND(f) sl_bf16_round(f)
#define SL_K(name) name##_bf16
#define SL_KCALL SL_BY_C
#define SL_K512(call)                                                                        \
    do {                                                                                     \
        if (sl_bn512_ok(c)) {                                                               \
            call;                                                                            \
            return;                                                                          \
        }                                                                                    \
    } while (0)
#include "train/ops/norm_kern_cpu.h"
#undef SL_T
#undef SL_LD
#undef SL_ST
#undef SL_RND
#undef SL_K
#undef SL_KCALL
#undef SL_K512

/* mean, m2 (c): mean and sum of squared deviations of x (rows, c).
 * bmean, s1, s2 (c): float scratch. (ops.h: the f32 entry point.) */
void sl_bn_stats_cpu(int64_t rows, int c, const float *restrict x, double *restrict mean,
                     double *restrict m2, float *restrict bmean, float *restrict s1,
                     float *restrict s2)
{
    stats_all_f32(rows, c, x, mean, m2, bmean, s1, s2);
}

/* ---------------------------------------------------- on the exec's threads */

static int64_t nblocks(int64_t rows, int64_t blk) { return (rows + blk - 1) / blk; }

static int use_threads(const sl_exec *e, int64_t rows, int c)
{
    return e->threads > 1 && rows * c >= 2 * (int64_t)SL_PAR_GRAIN_FLOATS;
}

int64_t sl_bn_par_floats(const sl_exec *e, int64_t rows, int c)
{
    if (!use_threads(e, rows, c))
        return 0;
    int64_t a = nblocks(rows, bn_stats_block(c)) * 3 * c, b = nblocks(rows, BN_ROWS_MAX) * 2 * c;
    return a > b ? a : b;
}

/* Blocks per sl_par_for item: ranges of about SL_PAR_GRAIN_FLOATS floats. */
static int64_t block_grain(int64_t blk, int c)
{
    int64_t g = SL_PAR_GRAIN_FLOATS / (blk * c);
    return g < 1 ? 1 : g;
}

/* One pass's arguments for sl_par_for: the activations x, dy (in / out: a
 * masked dy is stored back), z, r and y in the exec's type (bf16 when bf
 * is 1, else f32; void: the kernels pick theirs), mean and per-channel
 * p0..p2 in, part out; fn the per-rows kernel of by_rows. */
typedef struct bn_job bn_job;
typedef void (*rows_fn)(const bn_job *j, int64_t r0, int64_t r1);
struct bn_job {
    int64_t rows, blk;
    int c, bf, relu;
    const void *x, *z, *r;
    void *dy, *y;
    const float *mean, *p0, *p1, *p2;
    float *part;
    rows_fn fn;
};

/* Element offset o of an activation of the job's type. */
#define AT(j, p, o) ((j)->bf ? (void *)((uint16_t *)(p) + (o)) : (void *)((float *)(p) + (o)))
#define CAT(j, p, o)                                                                         \
    ((j)->bf ? (const void *)((const uint16_t *)(p) + (o)) : (const void *)((const float *)(p) + (o)))

static void stats_range(void *arg, int64_t b0, int64_t b1)
{
    const bn_job *j = arg;
    int c = j->c;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * j->blk, nb = j->rows - r0 < j->blk ? j->rows - r0 : j->blk;
        float *pb = j->part + b * 3 * c;
        if (j->bf)
            stats_block_bf16(nb, c, CAT(j, j->x, r0 * c), pb, pb + c, pb + 2 * c);
        else
            stats_block_f32(nb, c, CAT(j, j->x, r0 * c), pb, pb + c, pb + 2 * c);
    }
}

void sl_bn_stats_par(const sl_exec *e, int64_t rows, int c, const float *x, double *mean,
                     double *m2, float *bmean, float *s1, float *s2, float *part)
{
    int bf = e->act == SL_DTYPE_BF16;
    if (!part || !use_threads(e, rows, c)) {
        if (bf)
            stats_all_bf16(rows, c, (const uint16_t *)x, mean, m2, bmean, s1, s2);
        else
            stats_all_f32(rows, c, x, mean, m2, bmean, s1, s2);
        return;
    }
    int64_t blk = bn_stats_block(c), nblk = nblocks(rows, blk);
    bn_job j = {.rows = rows, .blk = blk, .c = c, .bf = bf, .x = x, .part = part};
    sl_par_for(e, nblk, block_grain(blk, c), stats_range, &j);
    for (int ch = 0; ch < c; ch++)
        mean[ch] = m2[ch] = 0;
    for (int64_t b = 0; b < nblk; b++) {
        int64_t r0 = b * blk, nb = rows - r0 < blk ? rows - r0 : blk;
        const float *pb = part + b * 3 * c;
        stats_merge(r0, nb, c, pb, pb + c, pb + 2 * c, mean, m2);
    }
}

static void apply_rows(const bn_job *j, int64_t r0, int64_t r1)
{
    /* p0 hi, p1 lo, p2 scale; mean holds beta */
    int64_t o = r0 * j->c;
    const void *r = j->r ? CAT(j, j->r, o) : NULL;
    if (j->bf)
        bn_apply_bf16(r1 - r0, j->c, CAT(j, j->x, o), j->p0, j->p1, j->p2, j->mean, r, j->relu,
                      AT(j, j->y, o));
    else
        bn_apply_f32(r1 - r0, j->c, CAT(j, j->x, o), j->p0, j->p1, j->p2, j->mean, r, j->relu,
                     AT(j, j->y, o));
}

/* x-shaped passes by rows: each range of rows is the serial loop on its
 * own rows (element-wise, so the bits do not depend on the split). */
static void rows_range(void *arg, int64_t r0, int64_t r1)
{
    const bn_job *j = arg;
    j->fn(j, r0, r1);
}

static void by_rows(const sl_exec *e, bn_job *j, rows_fn fn)
{
    int64_t grain = SL_PAR_GRAIN_FLOATS / j->c;
    j->fn = fn;
    j->bf = e->act == SL_DTYPE_BF16;
    sl_par_for(e, j->rows, grain < 1 ? 1 : grain, rows_range, j);
}

/* bn_fwd_train, and with r / relu the fused bn_fwd_train_act (ops.h:
 * + r, then ReLU, the unfused ops' bits). */
static int fwd_train(sl_exec *e, const char *fn, int64_t rows, int c, const float *x,
                     const float *gamma, const float *beta, float momentum, float eps,
                     float *running_mean, float *running_var, const float *r, int relu,
                     float *y, float *save_mean, float *save_invstd)
{
    int64_t np = sl_bn_par_floats(e, rows, c);
    char *s = sl_exec_scratch(e, (size_t)c * (2 * sizeof(double) + 3 * sizeof(float)) +
                                     (size_t)np * sizeof(float));
    if (!s)
        return sl_fail(SL_ENOMEM, "%s: scratch for %d channels: %s", fn, c, sl_errmsg());
    double *mean = (double *)s, *m2 = mean + c;
    float *hi = (float *)(m2 + c), *lo = hi + c, *scale = lo + c;
    sl_bn_stats_par(e, rows, c, x, mean, m2, hi, lo, scale, np ? scale + c : NULL);

    double m = momentum;
    for (int ch = 0; ch < c; ch++) {
        double invstd = 1.0 / sqrt(m2[ch] / (double)rows + (double)eps);
        double unbiased = m2[ch] / (double)(rows - 1);
        running_mean[ch] = (float)((1.0 - m) * running_mean[ch] + m * mean[ch]);
        running_var[ch] = (float)((1.0 - m) * running_var[ch] + m * unbiased);
        save_mean[ch] = (float)mean[ch];
        save_invstd[ch] = (float)invstd;
        hi[ch] = (float)mean[ch];
        lo[ch] = (float)(mean[ch] - (double)hi[ch]);
        scale[ch] = (float)((double)gamma[ch] * invstd);
    }
    bn_job j = {.rows = rows, .c = c, .x = x, .r = r, .relu = relu, .p0 = hi, .p1 = lo,
                .p2 = scale, .mean = beta, .y = y};
    by_rows(e, &j, apply_rows);
    return SL_OK;
}

int sl_bn_fwd_train_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, float momentum, float eps, float *running_mean,
                        float *running_var, float *y, float *save_mean, float *save_invstd)
{
    return fwd_train(e, __func__, rows, c, x, gamma, beta, momentum, eps, running_mean,
                     running_var, NULL, 0, y, save_mean, save_invstd);
}

int sl_bn_fwd_train_act_cpu(sl_exec *e, int64_t rows, int c, const float *x,
                            const float *gamma, const float *beta, float momentum, float eps,
                            float *running_mean, float *running_var, const float *r, int relu,
                            float *y, float *save_mean, float *save_invstd)
{
    return fwd_train(e, __func__, rows, c, x, gamma, beta, momentum, eps, running_mean,
                     running_var, r, relu, y, save_mean, save_invstd);
}

/* y = (x - mean)*scale + beta per channel (ops.h: the f32 entry
 * point; norm_sync_cpu.c's bn_fwd_apply takes sl_bn_affine_par). */
void sl_bn_affine_cpu(int64_t rows, int c, const float *x, const float *mean,
                      const float *scale, const float *beta, float *y)
{
    affine_f32(rows, c, x, mean, scale, beta, y);
}

static void affine_rows(const bn_job *j, int64_t r0, int64_t r1)
{
    int64_t o = r0 * j->c;
    if (j->bf)
        affine_bf16(r1 - r0, j->c, CAT(j, j->x, o), j->mean, j->p0, j->p1, AT(j, j->y, o));
    else
        affine_f32(r1 - r0, j->c, CAT(j, j->x, o), j->mean, j->p0, j->p1, AT(j, j->y, o));
}

void sl_bn_affine_par(const sl_exec *e, int64_t rows, int c, const float *x, const float *mean,
                      const float *scale, const float *beta, float *y)
{
    bn_job j = {.rows = rows, .c = c, .x = x, .mean = mean, .p0 = scale, .p1 = beta, .y = y};
    by_rows(e, &j, affine_rows);
}

int sl_bn_fwd_eval_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                       const float *beta, const float *running_mean, const float *running_var,
                       float eps, float *y)
{
    float *scale = sl_exec_scratch(e, (size_t)c * sizeof(float));
    if (!scale)
        return sl_fail(SL_ENOMEM, "sl_bn_fwd_eval_cpu: scratch for %d channels: %s", c,
                       sl_errmsg());
    for (int ch = 0; ch < c; ch++)
        scale[ch] = (float)((double)gamma[ch] / sqrt((double)running_var[ch] + (double)eps));
    sl_bn_affine_par(e, rows, c, x, running_mean, scale, beta, y);
    return SL_OK;
}

/* sdy, sdxc (c): sum dy and sum dy*(x - mean) over the rows, blocked float
 * partials (fdy, fdxc) folded into double (ops.h: the f32 entry
 * point). */
void sl_bn_bwd_sums_cpu(int64_t rows, int c, const float *x, const float *dy, const float *mean,
                        double *sdy, double *sdxc, float *fdy, float *fdxc)
{
    sums_all_f32(rows, c, x, NULL, (float *)dy, mean, sdy, sdxc, fdy, fdxc);
}

static void sums_range(void *arg, int64_t b0, int64_t b1)
{
    const bn_job *j = arg;
    int c = j->c;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * BN_ROWS_MAX, nb = j->rows - r0 < BN_ROWS_MAX ? j->rows - r0 : BN_ROWS_MAX;
        int64_t o = r0 * c;
        float *pb = j->part + b * 2 * c;
        const void *z = j->z ? CAT(j, j->z, o) : NULL;
        if (j->bf)
            sums_block_bf16(nb, c, CAT(j, j->x, o), z, AT(j, j->dy, o), j->mean, pb, pb + c);
        else
            sums_block_f32(nb, c, CAT(j, j->x, o), z, AT(j, j->dy, o), j->mean, pb, pb + c);
    }
}

/* The backward sums; with z not NULL dy is masked by z > 0 in place first
 * (bn_bwd_act). dy is written only then. */
static void sums_par(const sl_exec *e, int64_t rows, int c, const void *x, const void *z,
                     void *dy, const float *mean, double *sdy, double *sdxc, float *fdy,
                     float *fdxc, float *part)
{
    int bf = e->act == SL_DTYPE_BF16;
    if (!part || !use_threads(e, rows, c)) {
        if (bf)
            sums_all_bf16(rows, c, x, z, dy, mean, sdy, sdxc, fdy, fdxc);
        else
            sums_all_f32(rows, c, x, z, dy, mean, sdy, sdxc, fdy, fdxc);
        return;
    }
    int64_t nblk = nblocks(rows, BN_ROWS_MAX);
    bn_job j = {.rows = rows, .c = c, .bf = bf, .x = x, .z = z, .dy = dy, .mean = mean,
                .part = part};
    sl_par_for(e, nblk, block_grain(BN_ROWS_MAX, c), sums_range, &j);
    for (int ch = 0; ch < c; ch++)
        sdy[ch] = sdxc[ch] = 0;
    for (int64_t b = 0; b < nblk; b++) {
        const float *pb = part + b * 2 * c;
        for (int ch = 0; ch < c; ch++) {
            sdy[ch] += pb[ch];
            sdxc[ch] += pb[c + ch];
        }
    }
}

void sl_bn_bwd_sums_par(const sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                        const float *mean, double *sdy, double *sdxc, float *fdy, float *fdxc,
                        float *part)
{
    /* without z, sums_block only reads dy */
    sums_par(e, rows, c, x, NULL, (void *)dy, mean, sdy, sdxc, fdy, fdxc, part);
}

/* dx = a*dy - k*(x - mean) - b per channel (ops.h: the f32 entry
 * point; norm_sync_cpu.c's bn_bwd_apply takes sl_bn_dx_par). */
void sl_bn_dx_cpu(int64_t rows, int c, const float *x, const float *dy, const float *mean,
                  const float *a, const float *k, const float *b, float *dx)
{
    bn_dx_f32(rows, c, x, dy, mean, a, k, b, dx);
}

static void dx_rows(const bn_job *j, int64_t r0, int64_t r1)
{
    int64_t o = r0 * j->c;
    if (j->bf)
        bn_dx_bf16(r1 - r0, j->c, CAT(j, j->x, o), CAT(j, j->dy, o), j->mean, j->p0, j->p1,
                   j->p2, AT(j, j->y, o));
    else
        bn_dx_f32(r1 - r0, j->c, CAT(j, j->x, o), CAT(j, j->dy, o), j->mean, j->p0, j->p1,
                  j->p2, AT(j, j->y, o));
}

void sl_bn_dx_par(const sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                  const float *mean, const float *a, const float *k, const float *b, float *dx)
{
    bn_job j = {.rows = rows, .c = c, .x = x, .dy = (void *)dy, .mean = mean, .p0 = a, .p1 = k,
                .p2 = b, .y = dx};
    by_rows(e, &j, dx_rows);
}

/* bn_bwd, and with z the fused bn_bwd_act (dz masked in place by z > 0
 * first; dgamma, dbeta may then be NULL). */
static int bwd(sl_exec *e, const char *fn, int64_t rows, int c, const float *x, const float *z,
               float *dy, const float *gamma, const float *save_mean, const float *save_invstd,
               float *dx, float *dgamma, float *dbeta)
{
    int64_t np = sl_bn_par_floats(e, rows, c);
    char *s = sl_exec_scratch(e, (size_t)c * (2 * sizeof(double) + 3 * sizeof(float)) +
                                     (size_t)np * sizeof(float));
    if (!s)
        return sl_fail(SL_ENOMEM, "%s: scratch for %d channels: %s", fn, c, sl_errmsg());
    double *sdy = (double *)s, *sdxc = sdy + c;
    float *a = (float *)(sdxc + c), *k = a + c, *b = k + c;
    sums_par(e, rows, c, x, z, dy, save_mean, sdy, sdxc, a, k, np ? b + c : NULL);

    /* dx = gamma*invstd/rows * (rows*dy - sdy - xhat*sum(dy*xhat)) with
     * xhat = (x-mean)*invstd and sum(dy*xhat) = invstd*sdxc, expanded to
     * dx = a*dy - k*(x-mean) - b per channel. */
    for (int ch = 0; ch < c; ch++) {
        double is = save_invstd[ch], gi = (double)gamma[ch] * is;
        double sdyxhat = sdxc[ch] * is;
        a[ch] = (float)gi;
        k[ch] = (float)(gi * is * sdyxhat / (double)rows);
        b[ch] = (float)(gi * sdy[ch] / (double)rows);
        if (dgamma)
            dgamma[ch] = (float)sdyxhat;
        if (dbeta)
            dbeta[ch] = (float)sdy[ch];
    }
    sl_bn_dx_par(e, rows, c, x, dy, save_mean, a, k, b, dx);
    return SL_OK;
}

int sl_bn_bwd_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                  const float *gamma, const float *save_mean, const float *save_invstd,
                  float *dx, float *dgamma, float *dbeta)
{
    /* without z, dy is only read */
    return bwd(e, __func__, rows, c, x, NULL, (float *)dy, gamma, save_mean, save_invstd, dx,
               dgamma, dbeta);
}

int sl_bn_bwd_act_cpu(sl_exec *e, int64_t rows, int c, const float *x, const float *z,
                      float *dz, const float *gamma, const float *save_mean,
                      const float *save_invstd, float *dx, float *dgamma, float *dbeta)
{
    return bwd(e, __func__, rows, c, x, z, dz, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

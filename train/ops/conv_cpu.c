/*
 * train/ops/conv_cpu.c - convolution on the CPU: oneDNN's NHWC kernels where
 * the build has them (conv_dnnl.c; SLUICE_CPU_CONV=blas in the environment
 * forces the path below, which tests use), else im2col + OpenBLAS SGEMM, the
 * rest of this comment.
 *
 * Layouts (ops.h): x (n, h, w, c), weight (k, r, s, c), y (n, p, q, k).
 * Rows are output pixels, M = n*p*q, indexed m = (b*p + oh)*q + ow; the
 * column matrix has K = r*s*c columns ordered (i, j, ci), the weight's own
 * order, so W is already the (k, K) row-major matrix and
 *   forward        y  (M, k) = cols (M, K) x W^T (K, k)
 *   backward data  dcols (M, K) = dy (M, k) x W (k, K), col2im-added into dx
 *   backward filt. dW (k, K) = dy^T (k, M) x cols (M, K)
 * (Chellapilla et al., "High Performance Convolutional Neural Networks for
 * Document Processing", 2006; Caffe's im2col, transposed to channels-last).
 *
 * Why NHWC and (i, j, ci) columns: for one output pixel and one kernel row
 * i, the s taps read x[b, ih, iw0 .. iw0+s-1, :], which in NHWC is one
 * contiguous run of s*c floats, so building a row of cols is r memcpys
 * (plus memsets where the window hangs over the padding), and col2im is r
 * contiguous vector adds. In NCHW the same row would be r*s*c scattered
 * loads, or a transpose. The output of the GEMM is y in NHWC with no
 * reordering (rows = pixels, columns = k), so the next layer (batch norm
 * over rows of c) reads it as is. cuDNN's NHWC filter format (KRSC) is this
 * same OHWI order, so the cuda backend shares weights and checkpoints.
 *
 * Why one GEMM per chunk of rows over the whole batch: M runs across image
 * boundaries, so the GEMM is tall (thousands of rows) even for the small
 * late layers of ResNet-20 (7x7 pixels per image at 28 px input) where
 * per-image GEMMs would be 49 rows tall, too short for OpenBLAS's threads
 * to split, and W would be re-packed once per image.
 * 1x1 stride-1 unpadded convs (the bottleneck projections of ResNet-50) skip
 * im2col: x already is the (M, c) matrix. 1x1 stride-2 convs (downsampling
 * shortcuts) go through im2col with K = c: one memcpy of c floats per row,
 * a gather of the subsampled pixels.
 *
 * Why chunks: the full column matrix is r*s times the input (231 MB for
 * ResNet-50's 3x3 convs at 56x56, batch 32; 236 MB for its 7x7 stem), which
 * would be written once and read back from DRAM. A chunk of rows whose
 * column buffer stays small is packed and consumed by SGEMM while still in
 * cache, and the scratch stays bounded. The budget was chosen by timing
 * fwd / bwd_data / bwd_filter (GFLOP/s, best of 8, one OpenBLAS thread;
 * SGEMM 2048^3 reaches 104) on the dev machine (AMD EPYC, 2 MiB L2 per
 * core, 32 MiB L3, OpenBLAS 0.3.21) for column budgets of
 *                             1 MiB      2 MiB      4 MiB      16 MiB   unchunked
 *   R20 3x3 c16 28x28 b128  53/56/52   52/56/52   52/56/51   39/51/45   28/40/32
 *   R20 3x3 c32 14x14 b128  76/74/75   76/73/75   75/75/75   52/65/58   43/51/47
 *   R20 3x3 c64  7x7  b128  87/87/90   89/89/90   87/89/89   75/78/78   70/73/73
 *   R50 7x7/2 stem 224 b8   70/70/64   70/70/63   69/70/63   55/64/55   55/64/54
 *   R50 3x3 c64 56x56 b8    88/87/90   91/88/89   90/88/88   76/83/80   63/78/68
 *   R50 3x3 c256 14x14 b8   94/97/103  96/100/104 98/102/103 97/101/99 95/100/98
 * (R50 1x1 64->256 at 56x56 b8, direct: 83/74/73.) 1 to 4 MiB is a
 * plateau; 16 MiB loses up to 30% and the unchunked matrix up to 45% where
 * K is small (the GEMM streams cols from DRAM instead of cache); with two
 * threads (the other core shared with other jobs, so noisier) the ranking
 * was the same: 4 MiB 88/88/87 against 59/62/68 unchunked for R50 c64, and
 * 38/49/39 against 21/24/27 for R20 c16. 4 MiB keeps 455 rows per chunk at
 * K = 2304 (the small-M, large-K end) and is one 2 MiB L2 share per thread.
 * Backward filter accumulates dW over chunks (beta = 1 after the first).
 *
 * SL_CONV_CPU_CHUNK_ROWS=<rows> in the environment overrides the chunk
 * (tests use it to put chunk boundaries inside an image and inside an
 * output row, and a remainder chunk at the end).
 *
 * Threading: SGEMM runs on OpenBLAS's threads (sl_exec.threads of them);
 * im2col and col2im run on the calling thread (memory-bound; train/ops/ops.c).
 * The column buffer is e's scratch, so one sl_exec per thread.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "train/ops/cpu_int.h"
#include "train/ops/ops.h"

/* Column-buffer budget per chunk (see the measurement above). */
#define CHUNK_BYTES ((size_t)4 << 20)

/* Rows per chunk: for a K-column buffer (K > 0) the budget, at least one
 * row; for the direct 1x1 path (K == 0, no buffer) all of them. Never more
 * than M or INT_MAX (SGEMM's dimensions are int). */
static int64_t chunk_rows(int64_t M, int64_t K)
{
    int64_t rows = K > 0 ? (int64_t)(CHUNK_BYTES / ((size_t)K * sizeof(float))) : M;
    const char *env = getenv("SL_CONV_CPU_CHUNK_ROWS");
    if (env && *env) {
        char *end;
        long long v = strtoll(env, &end, 10);
        if (*end == '\0' && v > 0)
            rows = v;
    }
    if (rows < 1)
        rows = 1;
    if (rows > M)
        rows = M;
    if (rows > INT_MAX)
        rows = INT_MAX;
    return rows;
}

static int is_direct(const sl_conv_shape *sh)
{
    return sh->r == 1 && sh->s == 1 && sh->stride == 1 && sh->pad == 0;
}

/* Walks output pixels m0, m0+1, ... across image boundaries: image b and
 * output position (oh, ow) of row m. */
typedef struct pix_walk {
    const sl_conv_shape *sh;
    int b, oh, ow;
} pix_walk;

static void walk_start(pix_walk *pw, const sl_conv_shape *sh, int64_t m0)
{
    int64_t pq = (int64_t)sh->p * sh->q, rem = m0 % pq;
    pw->sh = sh;
    pw->b = (int)(m0 / pq);
    pw->oh = (int)(rem / sh->q);
    pw->ow = (int)(rem % sh->q);
}

static void walk_next(pix_walk *pw)
{
    if (++pw->ow == pw->sh->q) {
        pw->ow = 0;
        if (++pw->oh == pw->sh->p) {
            pw->oh = 0;
            pw->b++;
        }
    }
}

/* Kernel columns j with 0 <= iw0 + j < w. */
static void tap_range(const sl_conv_shape *sh, int iw0, int *jlo, int *jhi)
{
    int lo = iw0 < 0 ? -iw0 : 0, hi = sh->w - iw0;
    if (hi > sh->s)
        hi = sh->s;
    if (hi < lo)
        hi = lo;
    *jlo = lo;
    *jhi = hi;
}

/* cols (mc, K) <- the windows of output pixels m0 .. m0+mc-1, zeros where a
 * window covers padding. x: (n, h, w, c). */
static void im2col(const sl_conv_shape *sh, const float *x, int64_t m0, int64_t mc, float *cols)
{
    const size_t c = (size_t)sh->c, sc = (size_t)sh->s * c, K = (size_t)sh->r * sc;
    pix_walk pw;
    walk_start(&pw, sh, m0);
    for (int64_t m = 0; m < mc; m++, walk_next(&pw)) {
        float *row = cols + (size_t)m * K;
        int ih0 = pw.oh * sh->stride - sh->pad, iw0 = pw.ow * sh->stride - sh->pad;
        int jlo, jhi;
        tap_range(sh, iw0, &jlo, &jhi);
        for (int i = 0; i < sh->r; i++) {
            float *dst = row + (size_t)i * sc;
            int ih = ih0 + i;
            if (ih < 0 || ih >= sh->h || jlo == jhi) {
                memset(dst, 0, sc * sizeof *dst);
                continue;
            }
            const float *src = x + (((size_t)pw.b * sh->h + ih) * sh->w + (iw0 + jlo)) * c;
            memset(dst, 0, (size_t)jlo * c * sizeof *dst);
            memcpy(dst + (size_t)jlo * c, src, (size_t)(jhi - jlo) * c * sizeof *dst);
            memset(dst + (size_t)jhi * c, 0, (size_t)(sh->s - jhi) * c * sizeof *dst);
        }
    }
}

/* dx += the windows of dcols (mc, K) for output pixels m0 .. m0+mc-1, taps
 * over padding dropped: the transpose of im2col. dx: (n, h, w, c). */
static void col2im_add(const sl_conv_shape *sh, const float *dcols, int64_t m0, int64_t mc,
                       float *dx)
{
    const size_t c = (size_t)sh->c, sc = (size_t)sh->s * c, K = (size_t)sh->r * sc;
    pix_walk pw;
    walk_start(&pw, sh, m0);
    for (int64_t m = 0; m < mc; m++, walk_next(&pw)) {
        const float *row = dcols + (size_t)m * K;
        int ih0 = pw.oh * sh->stride - sh->pad, iw0 = pw.ow * sh->stride - sh->pad;
        int jlo, jhi;
        tap_range(sh, iw0, &jlo, &jhi);
        if (jlo == jhi)
            continue;
        size_t len = (size_t)(jhi - jlo) * c;
        for (int i = 0; i < sh->r; i++) {
            int ih = ih0 + i;
            if (ih < 0 || ih >= sh->h)
                continue;
            const float *src = row + (size_t)i * sc + (size_t)jlo * c;
            float *dst = dx + (((size_t)pw.b * sh->h + ih) * sh->w + (iw0 + jlo)) * c;
            for (size_t t = 0; t < len; t++)
                dst[t] += src[t];
        }
    }
}

static float *col_buffer(sl_exec *e, int64_t rows, int64_t K)
{
    return sl_exec_scratch(e, (size_t)rows * (size_t)K * sizeof(float));
}

int sl_conv_fwd_cpu(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w,
                    float *y)
{
    if (sl_dnnl_enabled())
        return sl_conv_fwd_dnnl(e, sh, x, w, y);
    const int64_t M = (int64_t)sh->n * sh->p * sh->q;
    const int k = sh->k, K = sh->r * sh->s * sh->c;
    if (is_direct(sh)) { /* y (M, k) = x (M, c) W^T (c, k) */
        int64_t rows = chunk_rows(M, 0);
        for (int64_t m0 = 0; m0 < M; m0 += rows) {
            int mc = (int)(M - m0 < rows ? M - m0 : rows);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mc, k, K, 1.0f,
                        x + (size_t)m0 * K, K, w, K, 0.0f, y + (size_t)m0 * k, k);
        }
        return SL_OK;
    }
    int64_t rows = chunk_rows(M, K);
    float *cols = col_buffer(e, rows, K);
    if (!cols)
        return sl_fail(SL_ENOMEM, "sl_conv_fwd_cpu: im2col buffer: %s", sl_errmsg());
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
        int mc = (int)(M - m0 < rows ? M - m0 : rows);
        im2col(sh, x, m0, mc, cols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mc, k, K, 1.0f, cols, K, w, K,
                    0.0f, y + (size_t)m0 * k, k);
    }
    return SL_OK;
}

int sl_conv_bwd_data_cpu(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                         float *dx)
{
    if (sl_dnnl_enabled())
        return sl_conv_bwd_data_dnnl(e, sh, dy, w, dx);
    const int64_t M = (int64_t)sh->n * sh->p * sh->q;
    const int k = sh->k, K = sh->r * sh->s * sh->c;
    if (is_direct(sh)) { /* dx (M, c) = dy (M, k) W (k, c) */
        int64_t rows = chunk_rows(M, 0);
        for (int64_t m0 = 0; m0 < M; m0 += rows) {
            int mc = (int)(M - m0 < rows ? M - m0 : rows);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mc, K, k, 1.0f,
                        dy + (size_t)m0 * k, k, w, K, 0.0f, dx + (size_t)m0 * K, K);
        }
        return SL_OK;
    }
    int64_t rows = chunk_rows(M, K);
    float *dcols = col_buffer(e, rows, K);
    if (!dcols)
        return sl_fail(SL_ENOMEM, "sl_conv_bwd_data_cpu: col2im buffer: %s", sl_errmsg());
    /* Strided or padded convs leave input pixels no window touches; every
     * other pixel is a sum over windows, so start from zero. */
    memset(dx, 0, (size_t)sh->n * sh->h * sh->w * sh->c * sizeof *dx);
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
        int mc = (int)(M - m0 < rows ? M - m0 : rows);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mc, K, k, 1.0f,
                    dy + (size_t)m0 * k, k, w, K, 0.0f, dcols, K);
        col2im_add(sh, dcols, m0, mc, dx);
    }
    return SL_OK;
}

int sl_conv_bwd_filter_cpu(sl_exec *e, const sl_conv_shape *sh, const float *x,
                           const float *dy, float *dw)
{
    if (sl_dnnl_enabled())
        return sl_conv_bwd_filter_dnnl(e, sh, x, dy, dw);
    const int64_t M = (int64_t)sh->n * sh->p * sh->q;
    const int k = sh->k, K = sh->r * sh->s * sh->c;
    if (is_direct(sh)) { /* dW (k, c) = dy^T (k, M) x (M, c) */
        int64_t rows = chunk_rows(M, 0);
        for (int64_t m0 = 0; m0 < M; m0 += rows) {
            int mc = (int)(M - m0 < rows ? M - m0 : rows);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, K, mc, 1.0f,
                        dy + (size_t)m0 * k, k, x + (size_t)m0 * K, K, m0 ? 1.0f : 0.0f, dw, K);
        }
        return SL_OK;
    }
    int64_t rows = chunk_rows(M, K);
    float *cols = col_buffer(e, rows, K);
    if (!cols)
        return sl_fail(SL_ENOMEM, "sl_conv_bwd_filter_cpu: im2col buffer: %s", sl_errmsg());
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
        int mc = (int)(M - m0 < rows ? M - m0 : rows);
        im2col(sh, x, m0, mc, cols);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, K, mc, 1.0f,
                    dy + (size_t)m0 * k, k, cols, K, m0 ? 1.0f : 0.0f, dw, K);
    }
    return SL_OK;
}

const char *sl_train_cpu_conv(void)
{
    return sl_dnnl_enabled() ? sl_dnnl_describe() : "OpenBLAS im2col";
}

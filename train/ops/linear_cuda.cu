// train/ops/linear_cuda.cu - fully connected layer, cuda backend: cuBLAS SGEMM
// for the products, two small kernels for the bias (linear_ref.c is the
// oracle; tests/train/ops/test_ops_cuda.c holds these to it).
//
// Shapes (row-major, as torch.nn.Linear): x (n, in), w (out, in), b (out),
// y and dy (n, out):
//   y = x w^T + b;  dx = dy w (n, in);  dw = dy^T x (out, in);  db = sum_n dy.
//
// Row-major <-> column-major. cuBLAS is column-major: a row-major (r, k)
// array with leading dimension k is, to cuBLAS, the column-major (k, r)
// matrix - its transpose - with the same ld. So each row-major product
// C = A B is computed as the column-major C^T = B^T A^T, with every row-major
// array passed as it is:
//   y  (n, out):  y^T (out x n)  = w (out x in)   . x^T (in x n)
//                 w row-major is w^T to cuBLAS   -> op T, lda = in
//                 x row-major is x^T to cuBLAS   -> op N, ldb = in
//                 sgemm(T, N, m = out, n = n, k = in, w, in, x, in, y, out)
//   dx (n, in):   dx^T (in x n)  = w^T (in x out) . dy^T (out x n)
//                 sgemm(N, N, m = in, n = n, k = out, w, in, dy, out, dx, in)
//   dw (out, in): dw^T (in x out) = x^T (in x n)  . dy (n x out)
//                 dy row-major is dy^T to cuBLAS -> op T
//                 sgemm(N, T, m = in, n = out, k = n, x, in, dy, out, dw, in)
// (the cuBLAS documentation, "cublas<t>gemm()"; the same mapping as
// llm.c's matmul_forward / matmul_backward).
//
// Math mode: the context's cuBLAS handle is set up for TF32 or full FP32
// (cuda_int.h, SLUICE_CUDA_TF32); the tests run with full FP32.
// Every call runs on ctx->stream (the handle is bound to it); no host sync.
#include <cuda_runtime.h>

#include <stdint.h>

#include "train/ops/cuda_int.h"

enum { FC_THREADS = 256, FC_MAX_BLOCKS = 8192 };

static unsigned fc_blocks(int64_t n)
{
    int64_t b = (n + FC_THREADS - 1) / FC_THREADS;
    return (unsigned)(b < 1 ? 1 : b > FC_MAX_BLOCKS ? (int64_t)FC_MAX_BLOCKS : b);
}

// y (n, out) += b broadcast over rows.
__global__ void fc_bias_add_kernel(int n, int out, const float *__restrict__ b,
                                   float *__restrict__ y)
{
    int64_t total = (int64_t)n * out;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[i % out];
}

// db[o] = sum over rows of dy[i, o], in double as linear_ref.c; one thread per
// o (consecutive threads read consecutive o: coalesced).
__global__ void fc_bias_grad_kernel(int n, int out, const float *__restrict__ dy,
                                    float *__restrict__ db)
{
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < out;
         o += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0;
        for (int i = 0; i < n; i++)
            acc += dy[(int64_t)i * out + o];
        db[o] = (float)acc;
    }
}

// A failed cuBLAS call or launch, wrapped with the op and its shape.
static int fc_fail(const char *fn, int rc, int n, int in, int out)
{
    return sl_fail(rc, "%s: n %d in %d out %d: %s", fn, n, in, out, sl_errmsg());
}

extern "C" int sl_fc_fwd_cuda(sl_exec *e, int n, int in, int out, const float *x,
                              const float *w, const float *b, float *y)
{
    const char *fn = "sl_fc_fwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    const float one = 1.0f, zero = 0.0f;
    // y^T (out x n) = op_T(w) . x^T  (the header comment derives it)
    if ((rc = SL_CUBLAS(cublasSgemm(cx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w,
                                    in, x, in, &zero, y, out))))
        return fc_fail(fn, rc, n, in, out);
    fc_bias_add_kernel<<<fc_blocks((int64_t)n * out), FC_THREADS, 0, cx->stream>>>(n, out, b, y);
    if ((rc = SL_LAUNCHED("fc_bias_add_kernel")))
        return fc_fail(fn, rc, n, in, out);
    return SL_OK;
}

extern "C" int sl_fc_bwd_cuda(sl_exec *e, int n, int in, int out, const float *x,
                              const float *w, const float *dy, float *dx, float *dw, float *db)
{
    const char *fn = "sl_fc_bwd_cuda";
    sl_cuda_ctx *cx = NULL;
    int rc;
    if ((rc = sl_cuda_exec_ctx(fn, e, &cx)))
        return rc;
    const float one = 1.0f, zero = 0.0f;
    // dx^T (in x n) = w^T . dy^T
    if (dx && (rc = SL_CUBLAS(cublasSgemm(cx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out,
                                          &one, w, in, dy, out, &zero, dx, in))))
        return fc_fail(fn, rc, n, in, out);
    // dw^T (in x out) = x^T . op_T(dy^T)
    if ((rc = SL_CUBLAS(cublasSgemm(cx->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                    in, dy, out, &zero, dw, in))))
        return fc_fail(fn, rc, n, in, out);
    fc_bias_grad_kernel<<<fc_blocks(out), FC_THREADS, 0, cx->stream>>>(n, out, dy, db);
    if ((rc = SL_LAUNCHED("fc_bias_grad_kernel")))
        return fc_fail(fn, rc, n, in, out);
    return SL_OK;
}

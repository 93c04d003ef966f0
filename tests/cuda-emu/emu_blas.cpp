// emu_blas.cpp - the cuBLAS subset linear_cuda.cu uses: handles bound to a
// stream, math mode (TF32 rounds the inputs to 10 mantissa bits), a user
// workspace (cublasSetWorkspace: checked live at every call, scribbled on),
// SGEMM (OpenBLAS) with pointer and extent checks, queued on the handle's
// stream.
#include "emu.h"
#include "emu_core.h"
#include <cublas_v2.h>
#include <cblas.h>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

using namespace emu;
struct cublasContext { cudaStream_t stream; cublasMath_t math; int dead; void *ws; size_t ws_bytes; };
static std::set<cublasContext *> handles;
static bool live(cublasContext *h) { return h && handles.count(h) && !h->dead; }

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    EMU_LOCK; emu::init();
    *h = new cublasContext{NULL, CUBLAS_DEFAULT_MATH, 0, NULL, 0};
    handles.insert(*h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    EMU_LOCK;
    if (!live(h)) { report("cublasDestroy: bad or destroyed handle %p", (void *)h); return CUBLAS_STATUS_NOT_INITIALIZED; }
    h->dead = 1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    EMU_LOCK;
    if (!live(h)) { report("cublasSetStream: bad handle"); return CUBLAS_STATUS_NOT_INITIALIZED; }
    bool ok;
    stream_of(s, "cublasSetStream", &ok);
    if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) { *s = h->stream; return CUBLAS_STATUS_SUCCESS; }
// The workspace cuBLAS is to use (so that it never allocates, e.g. in a
// CUDA graph capture): device memory of that extent; every SGEMM checks it
// is still live (a workspace freed and not replaced is a use after free).
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
{
    EMU_LOCK; emu::init();
    if (!live(h)) { report("cublasSetWorkspace: bad handle"); return CUBLAS_STATUS_NOT_INITIALIZED; }
    if (bytes && !check_range("cublasSetWorkspace", "workspace", ws, bytes, DEVICE)) return CUBLAS_STATUS_INVALID_VALUE;
    h->ws = bytes ? ws : NULL;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    EMU_LOCK;
    if (!live(h)) { report("cublasSetMathMode: bad handle"); return CUBLAS_STATUS_NOT_INITIALIZED; }
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *m) { *m = h->math; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    default: return "CUBLAS_STATUS_(emu other)";
    }
}
const char *cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS failure"; }

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc)
{
    EMU_LOCK; emu::init();
    const char *api = "cublasSgemm";
    if (!live(h)) { report("%s: bad or destroyed handle", api); return CUBLAS_STATUS_NOT_INITIALIZED; }
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m || ldc < 1) {
        warn("%s: m %d n %d k %d lda %d ldb %d ldc %d: invalid", api, m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    // column-major extents: A is (ta==N ? m x k : k x m)
    int acols = ta == CUBLAS_OP_N ? k : m, arows = ta == CUBLAS_OP_N ? m : k;
    int bcols = tb == CUBLAS_OP_N ? n : k, brows = tb == CUBLAS_OP_N ? k : n;
    bool ok = true;
    if (k) {
        ok &= check_range(api, "A", A, ((size_t)lda * (acols - 1) + arows) * 4, DEVICE);
        ok &= check_range(api, "B", B, ((size_t)ldb * (bcols - 1) + brows) * 4, DEVICE);
    }
    ok &= check_range(api, "C", C, ((size_t)ldc * (n - 1) + m) * 4, DEVICE);
    if (h->ws) ok &= check_range(api, "the workspace (cublasSetWorkspace)", h->ws, h->ws_bytes, DEVICE);
    if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
    float al = *alpha, be = *beta;
    void *ws = h->ws;
    size_t wsb = h->ws_bytes;
    bool t32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    bool sok;
    Stream *s = stream_of(h->stream, api, &sok);
    if (!sok) return CUBLAS_STATUS_INVALID_VALUE;
    enqueue(s, [=]() {
        const float *a = A, *b = B;
        std::vector<float> ta32, tb32;
        if (t32 && k) {
            size_t na = (size_t)lda * (acols - 1) + arows, nb = (size_t)ldb * (bcols - 1) + brows;
            ta32.assign(A, A + na), tb32.assign(B, B + nb);
            for (auto &v : ta32) v = tf32(v);
            for (auto &v : tb32) v = tf32(v);
            a = ta32.data(), b = tb32.data();
        }
        if (ws) memset(ws, 0x5a, wsb < 4096 ? wsb : 4096); // cuBLAS scribbles on it
        if (be == 0.0f) // C is not read (NaN there must not leak)
            for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) C[i + (size_t)j * ldc] = 0.0f;
        if (k)
            cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                        tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al, a, lda, b, ldb, be, C, ldc);
        else if (be != 1.0f)
            for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) C[i + (size_t)j * ldc] *= be;
    }, api);
    return CUBLAS_STATUS_SUCCESS;
}
}

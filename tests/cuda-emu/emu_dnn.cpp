// emu_dnn.cpp - the cuDNN subset conv_cuda.cu uses, on the host:
// handles, tensor / filter / convolution descriptors, algorithm queries
// (a fixed small ranking: some deterministic, some not, some needing a
// workspace), workspace sizes, and the three convolutions (im2col + OpenBLAS
// sgemm in f32; bf16 / f16 data widened to f32, results rounded to nearest
// even; f32 data rounded to TF32 first when the math type allows tensor
// cores). Every call checks its descriptors, pointers (device memory,
// extents) and workspace, and is queued on the handle's stream.
#include "emu.h"
#include "emu_core.h"
#include <cudnn.h>
#include <cblas.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

using namespace emu;

struct cudnnContext { cudaStream_t stream; int dead; GraphKnobs knobs; };
struct cudnnTensorStruct { int set, dead; cudnnTensorFormat_t fmt; cudnnDataType_t dt; int n, c, h, w; };
struct cudnnFilterStruct { int set, dead; cudnnTensorFormat_t fmt; cudnnDataType_t dt; int k, c, r, s; };
struct cudnnConvolutionStruct { int set, dead; int ph, pw, sh, sw, dh, dw; cudnnConvolutionMode_t mode; cudnnDataType_t ct; cudnnMathType_t math; };

static std::set<void *> objs;
static thread_local char last_msg[512];

// cuDNN's own log (docs, "Error Reporting And API Logging"):
// CUDNN_LOGLEVEL_DBG >= 2 (warning and error) writes each warning to
// CUDNN_LOGDEST_DBG (stdout, stderr or a file, appended), so that a script
// that wires the log in (perf/train-gpu) sees a file appear here too.
static void dbg_log(const char *msg)
{
    const char *lv = getenv("CUDNN_LOGLEVEL_DBG"), *dest = getenv("CUDNN_LOGDEST_DBG");
    if (!lv || atoi(lv) < 2 || !dest || !*dest)
        return;
    FILE *f = !strcmp(dest, "stdout") ? stdout : !strcmp(dest, "stderr") ? stderr : fopen(dest, "a");
    if (!f)
        return;
    fprintf(f, "W! CuDNN (v%ld, emulated) %s\n", dnn_version(), msg);
    if (f != stdout && f != stderr)
        fclose(f);
}

static cudnnStatus_t bad(cudnnStatus_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    warn("cuDNN: %s", last_msg);
    dbg_log(last_msg);
    return s;
}

template <class T> static bool live(T *p) { return p && objs.count((void *)p) && !p->dead; }

int emu::dnn_handle_state(cudnnContext *h, cudaStream_t *stream, GraphKnobs *knobs)
{
    if (!h || !objs.count((void *)h)) return -1;
    if (h->dead) return 0;
    *stream = h->stream;
    if (knobs) *knobs = h->knobs;
    return 1;
}
void emu::dnn_error(const char *msg) { bad(CUDNN_STATUS_SUCCESS, "%s", msg); }

long emu::dnn_version()
{
    const char *v = getenv("EMU_CUDNN_VERSION");
    return v && *v ? atol(v) : CUDNN_VERSION;
}

// ---------------------------------------------------------------- numbers
using emu::bf16_to_f;
using emu::f_to_bf16;
using emu::h_to_f;
using emu::f_to_h;
static size_t esize(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT ? 4 : 2; }
static void load(const void *p, size_t n, cudnnDataType_t t, bool round_tf32, std::vector<float> &out)
{
    out.resize(n);
    if (t == CUDNN_DATA_FLOAT) {
        memcpy(out.data(), p, n * 4);
        if (round_tf32) for (auto &v : out) v = tf32(v);
    } else {
        const uint16_t *h = (const uint16_t *)p;
        for (size_t i = 0; i < n; i++) out[i] = t == CUDNN_DATA_BFLOAT16 ? bf16_to_f(h[i]) : h_to_f(h[i]);
    }
}
static float get1(const void *p, size_t i, cudnnDataType_t t)
{
    if (t == CUDNN_DATA_FLOAT) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == CUDNN_DATA_BFLOAT16 ? bf16_to_f(h) : h_to_f(h);
}
// out = alpha * v + beta * out (beta == 0: out is not read)
static void store(void *p, const std::vector<float> &v, cudnnDataType_t t, float alpha, float beta)
{
    for (size_t i = 0; i < v.size(); i++) {
        float r = alpha * v[i];
        if (beta != 0.0f) r += beta * get1(p, i, t);
        if (t == CUDNN_DATA_FLOAT) ((float *)p)[i] = r;
        else ((uint16_t *)p)[i] = t == CUDNN_DATA_BFLOAT16 ? f_to_bf16(r) : f_to_h(r);
    }
}

// ---------------------------------------------------------------- geometry
// emu_core.h's ConvShape plus the data type and TF32 rounding of one call
struct Geo : ConvShape { cudnnDataType_t dt; bool tf; };

static cudnnStatus_t geo_of(const char *api, cudnnTensorStruct *x, cudnnFilterStruct *f,
                            cudnnConvolutionStruct *cd, cudnnTensorStruct *y, Geo *g)
{
    if (!live(x) || !live(f) || !live(cd) || !live(y) || !x->set || !f->set || !cd->set || !y->set)
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: a descriptor is not created, set, or was destroyed", api);
    if (x->dt != f->dt || y->dt != x->dt)
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: data types differ: x %d w %d y %d", api, x->dt, f->dt, y->dt);
    if (x->dt != CUDNN_DATA_FLOAT && x->dt != CUDNN_DATA_HALF && x->dt != CUDNN_DATA_BFLOAT16)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: data type %d not emulated", api, x->dt);
    if (cd->ct != CUDNN_DATA_FLOAT)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: compute type %d (emulated: float)", api, cd->ct);
    if (x->fmt != CUDNN_TENSOR_NHWC || y->fmt != CUDNN_TENSOR_NHWC || f->fmt != CUDNN_TENSOR_NHWC)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: only NHWC tensors / KRSC filters are emulated", api);
    if (cd->mode != CUDNN_CROSS_CORRELATION)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: only cross-correlation is emulated", api);
    if (x->c != f->c)
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: x has %d channels, the filter %d", api, x->c, f->c);
    int p = (x->h + 2 * cd->ph - cd->dh * (f->r - 1) - 1) / cd->sh + 1;
    int q = (x->w + 2 * cd->pw - cd->dw * (f->s - 1) - 1) / cd->sw + 1;
    if (y->n != x->n || y->c != f->k || y->h != p || y->w != q)
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: y is n%d c%d %dx%d, the convolution gives n%d c%d %dx%d",
                   api, y->n, y->c, y->h, y->w, x->n, f->k, p, q);
    *g = Geo{{x->n, x->h, x->w, x->c, f->k, f->r, f->s, p, q, cd->ph, cd->pw, cd->sh, cd->sw, cd->dh, cd->dw},
             x->dt, x->dt == CUDNN_DATA_FLOAT && cd->math != CUDNN_FMA_MATH &&
                        !(getenv("NVIDIA_TF32_OVERRIDE") && getenv("NVIDIA_TF32_OVERRIDE")[0] == '0')};
    return CUDNN_STATUS_SUCCESS;
}

// col (n*p*q, r*s*c) of x (n, h, w, c)
static void im2col(const ConvShape &g, const float *x, float *col)
{
    size_t rsc = (size_t)g.r * g.s * g.c;
    for (int n = 0; n < g.n; n++)
        for (int p = 0; p < g.p; p++)
            for (int q = 0; q < g.q; q++) {
                float *row = col + (((size_t)n * g.p + p) * g.q + q) * rsc;
                for (int r = 0; r < g.r; r++)
                    for (int s = 0; s < g.s; s++) {
                        int ih = p * g.sh - g.ph + r * g.dh, iw = q * g.sw - g.pw + s * g.dw;
                        float *dst = row + ((size_t)r * g.s + s) * g.c;
                        if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) memset(dst, 0, g.c * 4);
                        else memcpy(dst, x + (((size_t)n * g.h + ih) * g.w + iw) * g.c, g.c * 4);
                    }
            }
}

static void col2im(const ConvShape &g, const float *col, float *x)
{
    size_t rsc = (size_t)g.r * g.s * g.c;
    memset(x, 0, (size_t)g.n * g.h * g.w * g.c * 4);
    for (int n = 0; n < g.n; n++)
        for (int p = 0; p < g.p; p++)
            for (int q = 0; q < g.q; q++) {
                const float *row = col + (((size_t)n * g.p + p) * g.q + q) * rsc;
                for (int r = 0; r < g.r; r++)
                    for (int s = 0; s < g.s; s++) {
                        int ih = p * g.sh - g.ph + r * g.dh, iw = q * g.sw - g.pw + s * g.dw;
                        if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                        const float *src = row + ((size_t)r * g.s + s) * g.c;
                        float *dst = x + (((size_t)n * g.h + ih) * g.w + iw) * g.c;
                        for (int c = 0; c < g.c; c++) dst[c] += src[c];
                    }
            }
}

using Dir = ConvDir;
constexpr Dir FWD = CONV_FWD, BWD_DATA = CONV_BWD_DATA, BWD_FILTER = CONV_BWD_FILTER;

// The three convolutions in f32 (emu_core.h; emu_dnn_graph.cpp's fused
// graphs use them too): im2col + OpenBLAS sgemm, col2im for the data
// gradient.
void emu::conv_f32(ConvDir d, const ConvShape &g, const float *a, const float *b, float *out)
{
    size_t npq = (size_t)g.n * g.p * g.q, rsc = (size_t)g.r * g.s * g.c;
    std::vector<float> col(npq * rsc);
    if (d == CONV_FWD) { // a = x, b = w, out = y
        im2col(g, a, col.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)npq, g.k, (int)rsc, 1.0f, col.data(),
                    (int)rsc, b, (int)rsc, 0.0f, out, g.k);
    } else if (d == CONV_BWD_DATA) { // a = w, b = dy, out = dx
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)npq, (int)rsc, g.k, 1.0f, b,
                    g.k, a, (int)rsc, 0.0f, col.data(), (int)rsc);
        col2im(g, col.data(), out);
    } else { // a = x, b = dy, out = dw
        im2col(g, a, col.data());
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.k, (int)rsc, (int)npq, 1.0f, b, g.k,
                    col.data(), (int)rsc, 0.0f, out, (int)rsc);
    }
}

static void conv_exec(Dir d, const Geo &g, const void *a, const void *b, void *out, float alpha, float beta)
{
    size_t nx = (size_t)g.n * g.h * g.w * g.c, nw = (size_t)g.k * g.r * g.s * g.c,
           ny = (size_t)g.n * g.p * g.q * g.k;
    std::vector<float> A, B, res;
    if (d == FWD) { // a = x, b = w, out = y
        load(a, nx, g.dt, g.tf, A);
        load(b, nw, g.dt, g.tf, B);
        res.resize(ny);
    } else if (d == BWD_DATA) { // a = w, b = dy, out = dx
        load(a, nw, g.dt, g.tf, A);
        load(b, ny, g.dt, g.tf, B);
        res.resize(nx);
    } else { // a = x, b = dy, out = dw
        load(a, nx, g.dt, g.tf, A);
        load(b, ny, g.dt, g.tf, B);
        res.resize(nw);
    }
    conv_f32(d, g, A.data(), B.data(), res.data());
    store(out, res, g.dt, alpha, beta);
}

// ---------------------------------------------------------------- algorithms
// The emulated ranking per direction: (algo, deterministic, needs workspace, supported)
struct AlgoRow { int algo, det, ws, ok; };
static const AlgoRow fwd_rows[] = {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 1, 1, 1},
                                   {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 1, 0, 1},
                                   {CUDNN_CONVOLUTION_FWD_ALGO_FFT, 1, 1, 0}};
static const AlgoRow bwd_data_rows[] = {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, 0, 0, 1},
                                        {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 1, 1, 1}};
static const AlgoRow bwd_filter_rows[] = {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 0, 0, 1},
                                          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, 0, 1, 1},
                                          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 1, 1, 1}};
static const AlgoRow *rows_of(Dir d, int *n)
{
    if (d == FWD) { *n = 3; return fwd_rows; }
    if (d == BWD_DATA) { *n = 2; return bwd_data_rows; }
    *n = 3; return bwd_filter_rows;
}
static size_t ws_of(const Geo &g, const AlgoRow &r) { return r.ws ? (size_t)g.k * g.r * g.s * g.c * 4 + 65536 : 0; }

template <class Perf> static void fill(Dir d, const Geo &g, cudnnMathType_t math, int req, int *ret, Perf *perf)
{
    int n;
    const AlgoRow *rows = rows_of(d, &n);
    int k = 0;
    for (int i = 0; i < n && k < req; i++, k++) {
        memset(&perf[k], 0, sizeof perf[k]);
        perf[k].algo = (decltype(perf[k].algo))rows[i].algo;
        perf[k].status = rows[i].ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
        perf[k].time = rows[i].ok ? 0.1f * (i + 1) : -1.0f;
        perf[k].memory = ws_of(g, rows[i]);
        perf[k].determinism = rows[i].det ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
        perf[k].mathType = math;
    }
    *ret = k;
}

static const AlgoRow *row_for(Dir d, int algo)
{
    int n;
    const AlgoRow *rows = rows_of(d, &n);
    for (int i = 0; i < n; i++) if (rows[i].algo == algo && rows[i].ok) return &rows[i];
    return NULL;
}

static const char *dir_api[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter"};

// Check and queue one convolution. x/f/y descriptors in forward terms.
static cudnnStatus_t conv_call(Dir d, cudnnHandle_t h, const void *alpha, cudnnTensorStruct *xd,
                               const void *xa, cudnnFilterStruct *fd, cudnnConvolutionStruct *cd,
                               cudnnTensorStruct *yd, const void *yb, int algo, void *ws, size_t wsb,
                               const void *beta, void *out, bool run_now)
{
    const char *api = dir_api[d];
    if (!live(h)) return bad(CUDNN_STATUS_BAD_PARAM, "%s: bad or destroyed handle", api);
    Geo g;
    cudnnStatus_t st = geo_of(api, xd, fd, cd, yd, &g);
    if (st) return st;
    const AlgoRow *row = row_for(d, algo);
    if (!row) return bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: algorithm %d is not supported (emulated ranking)", api, algo);
    size_t need = ws_of(g, *row);
    if (wsb < need) return bad(CUDNN_STATUS_BAD_PARAM, "%s: algorithm %d needs %zu workspace bytes, got %zu", api, algo, need, wsb);
    size_t es = esize(g.dt), nx = (size_t)g.n * g.h * g.w * g.c * es, nw = (size_t)g.k * g.r * g.s * g.c * es,
           ny = (size_t)g.n * g.p * g.q * g.k * es;
    bool ok = true;
    if (d == FWD) ok = check_range(api, "x", xa, nx, DEVICE) & check_range(api, "w", yb, nw, DEVICE) & check_range(api, "y", out, ny, DEVICE);
    if (d == BWD_DATA) ok = check_range(api, "w", xa, nw, DEVICE) & check_range(api, "dy", yb, ny, DEVICE) & check_range(api, "dx", out, nx, DEVICE);
    if (d == BWD_FILTER) ok = check_range(api, "x", xa, nx, DEVICE) & check_range(api, "dy", yb, ny, DEVICE) & check_range(api, "dw", out, nw, DEVICE);
    if (need) ok &= check_range(api, "workspace", ws, need, DEVICE);
    if (!ok) return bad(CUDNN_STATUS_BAD_PARAM, "%s: bad pointer (see the report above)", api);
    float al = *(const float *)alpha, be = *(const float *)beta;
    auto fn = [=]() {
        if (need) memset(ws, 0xa5, need); // the workspace holds garbage afterwards
        conv_exec(d, g, xa, yb, out, al, be);
    };
    bool sok;
    Stream *s = stream_of(h->stream, api, &sok);
    if (!sok) return bad(CUDNN_STATUS_BAD_PARAM, "%s: the handle's stream is gone", api);
    enqueue(s, fn, api);
    if (run_now) flush(s);
    return CUDNN_STATUS_SUCCESS;
}

// Find*Ex: runs every supported algorithm that fits (blocking), as cuDNN does.
template <class Perf>
static cudnnStatus_t find_ex(Dir d, cudnnHandle_t h, cudnnTensorStruct *xd, const void *a, cudnnFilterStruct *fd,
                             cudnnConvolutionStruct *cd, cudnnTensorStruct *yd, const void *b, void *out, int req, int *ret,
                             Perf *perf, void *ws, size_t wsb)
{
    Geo g;
    cudnnStatus_t st = geo_of("cudnnFind*AlgorithmEx", xd, fd, cd, yd, &g);
    if (st) return st;
    fill(d, g, cd->math, req, ret, perf);
    const float one = 1, zero = 0;
    for (int i = 0; i < *ret; i++) {
        if (perf[i].status) continue;
        if (perf[i].memory > wsb) { perf[i].status = CUDNN_STATUS_BAD_PARAM; perf[i].time = -1; continue; }
        cudnnStatus_t s = conv_call(d, h, &one, xd, a, fd, cd, yd, b, (int)perf[i].algo, ws, wsb, &zero, out, true);
        if (s) return s;
    }
    return CUDNN_STATUS_SUCCESS;
}

#define DNN_BEGIN EMU_LOCK; emu::init()

// The three descriptor kinds: made live, destroyed once (NULL is a no-op;
// a bad or destroyed one is reported).
template <class T> static cudnnStatus_t create_desc(T **d)
{
    DNN_BEGIN;
    *d = new T();
    objs.insert(*d);
    return CUDNN_STATUS_SUCCESS;
}
template <class T> static cudnnStatus_t destroy_desc(T *d, const char *api)
{
    DNN_BEGIN;
    if (!d) return CUDNN_STATUS_SUCCESS;
    if (!live(d)) return bad(CUDNN_STATUS_BAD_PARAM, "%s: bad or destroyed descriptor", api);
    d->dead = 1;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" {
size_t cudnnGetVersion(void) { return (size_t)dnn_version(); }
const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN: return "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_(emu other)";
    }
}
void cudnnGetLastErrorString(char *m, size_t n) { if (n) { snprintf(m, n, "%s", last_msg); last_msg[0] = 0; } }

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    DNN_BEGIN;
    *h = new cudnnContext{NULL, 0, graph_knobs_from_env()};
    objs.insert(*h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    DNN_BEGIN;
    if (!live(h)) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: bad or destroyed handle");
    h->dead = 1;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    DNN_BEGIN;
    if (!live(h)) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: bad handle");
    bool ok;
    stream_of(s, "cudnnSetStream", &ok);
    if (!ok) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: bad stream");
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *s) { *s = h->stream; return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { return create_desc(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    return destroy_desc(d, "cudnnDestroyTensorDescriptor");
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                                         int n, int c, int h, int w)
{
    DNN_BEGIN;
    if (!live(d)) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: bad descriptor");
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: dims %d %d %d %d", n, c, h, w);
    *d = cudnnTensorStruct{1, 0, f, t, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { return create_desc(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    return destroy_desc(d, "cudnnDestroyFilterDescriptor");
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                         int k, int c, int h, int w)
{
    DNN_BEGIN;
    if (!live(d)) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilter4dDescriptor: bad descriptor");
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilter4dDescriptor: dims");
    *d = cudnnFilterStruct{1, 0, f, t, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) { return create_desc(d); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    return destroy_desc(d, "cudnnDestroyConvolutionDescriptor");
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw,
                                              int dh, int dw, cudnnConvolutionMode_t mode, cudnnDataType_t ct)
{
    DNN_BEGIN;
    if (!live(d)) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolution2dDescriptor: bad descriptor");
    if (ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolution2dDescriptor: pad/stride/dilation");
    cudnnMathType_t m = d->math;
    *d = cudnnConvolutionStruct{1, 0, ph, pw, sh, sw, dh, dw, mode, ct, m};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    DNN_BEGIN;
    if (!live(d)) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: bad descriptor");
    if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && m != CUDNN_FMA_MATH)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: math %d", m);
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t f, int *n, int *c, int *h, int *w)
{
    DNN_BEGIN;
    if (!live(cd) || !live(x) || !live(f) || !cd->set || !x->set || !f->set)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolution2dForwardOutputDim: descriptor not set");
    if (x->c != f->c) return bad(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolution2dForwardOutputDim: channels %d vs %d", x->c, f->c);
    *n = x->n, *c = f->k;
    *h = (x->h + 2 * cd->ph - cd->dh * (f->r - 1) - 1) / cd->sh + 1;
    *w = (x->w + 2 * cd->pw - cd->dw * (f->s - 1) - 1) / cd->sw + 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
                                                     const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t y, int req, int *ret,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf)
{
    DNN_BEGIN;
    Geo g;
    if (!live(h)) return bad(CUDNN_STATUS_BAD_PARAM, "bad handle");
    cudnnStatus_t st = geo_of("cudnnGetConvolutionForwardAlgorithm_v7", x, f, cd, y, &g);
    if (st) return st;
    fill(FWD, g, cd->math, req, ret, perf);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t f, const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dx, int req,
                                                          int *ret, cudnnConvolutionBwdDataAlgoPerf_t *perf)
{
    DNN_BEGIN;
    Geo g;
    if (!live(h)) return bad(CUDNN_STATUS_BAD_PARAM, "bad handle");
    cudnnStatus_t st = geo_of("cudnnGetConvolutionBackwardDataAlgorithm_v7", dx, f, cd, dy, &g);
    if (st) return st;
    fill(BWD_DATA, g, cd->math, req, ret, perf);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t f, int req,
                                                            int *ret, cudnnConvolutionBwdFilterAlgoPerf_t *perf)
{
    DNN_BEGIN;
    Geo g;
    if (!live(h)) return bad(CUDNN_STATUS_BAD_PARAM, "bad handle");
    cudnnStatus_t st = geo_of("cudnnGetConvolutionBackwardFilterAlgorithm_v7", x, f, cd, dy, &g);
    if (st) return st;
    fill(BWD_FILTER, g, cd->math, req, ret, perf);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t ws_size(Dir d, const char *api, cudnnTensorStruct *x, cudnnFilterStruct *f, cudnnConvolutionStruct *cd,
                             cudnnTensorStruct *y, int algo, size_t *bytes)
{
    Geo g;
    cudnnStatus_t st = geo_of(api, x, f, cd, y, &g);
    if (st) return st;
    const AlgoRow *r = row_for(d, algo);
    if (!r) return bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: algorithm %d not supported", api, algo);
    *bytes = ws_of(g, *r);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
                                                      const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t a, size_t *b)
{
    DNN_BEGIN;
    return ws_size(FWD, "cudnnGetConvolutionForwardWorkspaceSize", x, f, cd, y, a, b);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t f, const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t a, size_t *b)
{
    DNN_BEGIN;
    return ws_size(BWD_DATA, "cudnnGetConvolutionBackwardDataWorkspaceSize", dx, f, cd, dy, a, b);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t f,
                                                             cudnnConvolutionBwdFilterAlgo_t a, size_t *b)
{
    DNN_BEGIN;
    return ws_size(BWD_FILTER, "cudnnGetConvolutionBackwardFilterWorkspaceSize", x, f, cd, dy, a, b);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t wsb, const void *beta,
                                      const cudnnTensorDescriptor_t yd, void *y)
{
    DNN_BEGIN;
    return conv_call(FWD, h, alpha, xd, x, wd, cd, yd, w, algo, ws, wsb, beta, y, false);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t wsb, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx)
{
    DNN_BEGIN;
    return conv_call(BWD_DATA, h, alpha, dxd, w, wd, cd, dyd, dy, algo, ws, wsb, beta, dx, false);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsb, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw)
{
    DNN_BEGIN;
    return conv_call(BWD_FILTER, h, alpha, xd, x, dwd, cd, dyd, dy, algo, ws, wsb, beta, dw, false);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                     const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd,
                                                     const cudnnTensorDescriptor_t yd, void *y, int req, int *ret,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf, void *ws, size_t wsb)
{
    DNN_BEGIN;
    return find_ex(FWD, h, xd, x, wd, cd, yd, w, y, req, ret, perf, ws, wsb);
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
                                                          const cudnnTensorDescriptor_t dyd, const void *dy,
                                                          const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd,
                                                          void *dx, int req, int *ret, cudnnConvolutionBwdDataAlgoPerf_t *perf,
                                                          void *ws, size_t wsb)
{
    DNN_BEGIN;
    return find_ex(BWD_DATA, h, dxd, w, wd, cd, dyd, dy, dx, req, ret, perf, ws, wsb);
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                            const cudnnTensorDescriptor_t dyd, const void *dy,
                                                            const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd,
                                                            void *dw, int req, int *ret, cudnnConvolutionBwdFilterAlgoPerf_t *perf,
                                                            void *ws, size_t wsb)
{
    DNN_BEGIN;
    return find_ex(BWD_FILTER, h, xd, x, dwd, cd, dyd, dy, dw, req, ret, perf, ws, wsb);
}
} // extern "C"

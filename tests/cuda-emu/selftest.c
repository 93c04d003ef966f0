/* selftest.c - the emulator's misuse checks, one per argv[1]:
 *   host_deref  free_host  double_free  kind  range  stream_after_destroy
 *   event_never_recorded  lazy_pinned  ok
 *   capture (the driver's rules for stream capture: one line per case,
 *   "ok" when the emulator answered as a driver does)
 *   nccl_ok  nccl_mismatch  nccl_timeout  nccl_host_ptr  nccl_after_destroy
 *   nccl_dup_device  nccl_peer_exit
 *   graph (cuDNN's backend graph API, emu_dnn_graph.cpp: one line per case,
 *   "ok" when the emulator computed or refused as it should)
 * Each prints what the emulator reports (run.sh selftest runs them all).
 * The nccl cases fork two ranks (one emulated device each) that meet
 * through emu_nccl.cpp's shared memory. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <cudnn.h>

/* bf16 of small integers is exact: i % 64 - 32 */
static unsigned short bf16_of(float f)
{
    unsigned int u;
    memcpy(&u, &f, 4);
    return (unsigned short)(u >> 16);
}

/* One rank of the nccl cases; returns its exit status. */
static int nccl_rank(const char *w, int rank, ncclUniqueId id)
{
    setenv("EMU_DEVICES", "2", 1);
    cudaSetDevice(!strcmp(w, "nccl_dup_device") ? 0 : rank);
    ncclComm_t comm = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = rank; /* rank 0 blocking, rank 1 polls */
    ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &cfg);
    while (r == ncclInProgress)
        ncclCommGetAsyncError(comm, &r);
    printf("rank %d: init: %s\n", rank, ncclGetErrorString(r));
    if (r != ncclSuccess)
        return 1;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    size_t n = (3u << 20) / 4 + 7; /* 3 MiB + 28 bytes of f32: 4 chunks of 1 MiB */
    float *h = malloc(n * 4), *d, *g;
    unsigned short *hb = malloc(n * 2), *db;
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)(i % 1000) + rank * 0.5f;
        hb[i] = bf16_of((float)(i % 64) - 32 + rank);
    }
    cudaMalloc((void **)&d, n * 4);
    cudaMalloc((void **)&g, 2 * n * 4);
    cudaMalloc((void **)&db, n * 2);
    cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, n * 2, cudaMemcpyHostToDevice);
    if (!strcmp(w, "nccl_timeout") && rank == 1) {
        sleep(3); /* alive, but never calls: rank 0 gives up after EMU_NCCL_TIMEOUT_S */
        return 0;
    }
    if (!strcmp(w, "nccl_peer_exit") && rank == 1) {
        fflush(stdout);
        _exit(0); /* gone: rank 0 gets ncclRemoteError */
    }
    size_t cnt = !strcmp(w, "nccl_mismatch") && rank == 1 ? n - 1 : n;
    float *buf = !strcmp(w, "nccl_host_ptr") ? h : d;
    r = ncclAllReduce(buf, buf, cnt, ncclFloat, ncclSum, comm, s);
    printf("rank %d: ncclAllReduce: %s\n", rank, ncclGetErrorString(r));
    if (r == ncclSuccess || r == ncclInProgress) {
        cudaError_t e;
        while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
            ncclResult_t a;
            ncclCommGetAsyncError(comm, &a);
            if (a != ncclSuccess) {
                printf("rank %d: async error: %s: %s\n", rank, ncclGetErrorString(a),
                       ncclGetLastError(comm));
                ncclCommAbort(comm);
                return 1;
            }
        }
    }
    if (!strcmp(w, "nccl_ok")) {
        r = ncclAllReduce(db, db, n, ncclBfloat16, ncclAvg, comm, s);
        r = ncclBroadcast(d, d, n, ncclFloat, 1, comm, s);
        cudaMemcpyAsync(g + rank * n, d, n * 4, cudaMemcpyDeviceToDevice, s);
        r = ncclAllGather(g + rank * n, g, n, ncclFloat, comm, s); /* in place */
        cudaStreamSynchronize(s);
        float *back = malloc(2 * n * 4);
        unsigned short *bb = malloc(n * 2);
        cudaMemcpy(back, g, 2 * n * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(bb, db, n * 2, cudaMemcpyDeviceToHost);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float sum = 2.0f * (float)(i % 1000) + 0.5f; /* the sum, broadcast, gathered twice */
            unsigned short avg = bf16_of((float)(i % 64) - 32 + 0.5f);
            bad += back[i] != sum || back[n + i] != sum || bb[i] != avg;
        }
        printf("rank %d: sum, bf16 avg, broadcast, all-gather of %zu elements: %zu wrong\n", rank,
               n, bad);
        free(back);
        free(bb);
    }
    if (!strcmp(w, "nccl_after_destroy")) {
        ncclCommDestroy(comm);
        r = ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, s);
        printf("rank %d: ncclAllReduce after destroy: %s\n", rank, ncclGetErrorString(r));
        return 0;
    }
    r = ncclCommFinalize(comm);
    while (r == ncclInProgress)
        ncclCommGetAsyncError(comm, &r);
    printf("rank %d: finalize: %s\n", rank, ncclGetErrorString(r));
    ncclCommDestroy(comm);
    return 0;
}

static int nccl_case(const char *w)
{
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    if (!strcmp(w, "nccl_timeout"))
        setenv("EMU_NCCL_TIMEOUT_S", "1", 1);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        int rc = nccl_rank(w, 1, id);
        fflush(stdout);
        _exit(rc);
    }
    int rc = nccl_rank(w, 0, id), st = 0;
    fflush(stdout);
    waitpid(p, &st, 0);
    return rc;
}

/* capture cases: another thread's cudaMalloc during a capture */
static cudaError_t other_malloc_rc;
static void *other_malloc(void *arg)
{
    void *p = NULL;
    (void)arg;
    other_malloc_rc = cudaMalloc(&p, 64);
    if (p)
        cudaFree(p);
    return NULL;
}

static void capture_case(const char *name, cudaError_t got, cudaError_t want)
{
    printf("capture: %s: %s (%s)\n", name, got == want ? "ok" : "WRONG", cudaGetErrorName(got));
}

/* The driver's rules for stream capture, as the trainer's CUDA graph meets
 * them: a captured memset replays; the capturing thread's cudaMalloc, host
 * sync and pageable copy fail and invalidate the capture; another thread's
 * cudaMalloc is fine in ThreadLocal mode and invalidates in Global mode;
 * EMU_CAPTURE_FAIL=1 invalidates every capture. */
static int capture_cases(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    unsigned char *d = NULL, h[64];
    cudaMalloc((void **)&d, 64);
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge;
    pthread_t t;
    /* a capture that replays */
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMemsetAsync(d, 7, 64, s);
    pthread_create(&t, NULL, other_malloc, NULL);
    pthread_join(t, NULL);
    capture_case("thread-local: another thread's cudaMalloc", other_malloc_rc, cudaSuccess);
    capture_case("end", cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaMemset(d, 0, 64);
    cudaDeviceSynchronize();
    capture_case("instantiate", cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    capture_case("launch", cudaGraphLaunch(ge, s), cudaSuccess);
    cudaStreamSynchronize(s);
    cudaMemcpy(h, d, 64, cudaMemcpyDeviceToHost);
    capture_case("replayed memset", h[0] == 7 && h[63] == 7 ? cudaSuccess : cudaErrorUnknown,
                 cudaSuccess);
    /* what the capturing thread may not do */
    static const char *what[3] = {"cudaMalloc", "cudaStreamSynchronize", "pageable copy"};
    for (int k = 0; k < 3; k++) {
        void *p = NULL;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        cudaError_t e = k == 0   ? cudaMalloc(&p, 64)
                        : k == 1 ? cudaStreamSynchronize(s)
                                 : cudaMemcpyAsync(d, h, 64, cudaMemcpyHostToDevice, s);
        char name[96];
        snprintf(name, sizeof name, "%s while capturing", what[k]);
        capture_case(name, e, cudaErrorStreamCaptureUnsupported);
        snprintf(name, sizeof name, "end after %s", what[k]);
        capture_case(name, cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    }
    /* global mode: another thread's cudaMalloc is refused too */
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    pthread_create(&t, NULL, other_malloc, NULL);
    pthread_join(t, NULL);
    capture_case("global: another thread's cudaMalloc", other_malloc_rc,
                 cudaErrorStreamCaptureUnsupported);
    capture_case("end after it", cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    /* fault injection */
    setenv("EMU_CAPTURE_FAIL", "1", 1);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMemsetAsync(d, 1, 64, s);
    capture_case("EMU_CAPTURE_FAIL=1: end", cudaStreamEndCapture(s, &g),
                 cudaErrorStreamCaptureInvalidated);
    return 0;
}

/* ---------------------------------------------------------------- graph
 * cuDNN's backend graph API (emu_dnn_graph.cpp), "selftest graph": the
 * three fused patterns executed against direct loops, refusals, fault
 * injection, misuse reports, a captured execution. One line per case:
 * "graph: NAME: ok" (run.sh's graph lane counts them). Data are small
 * multiples of 1/8 and 1/16, so every f32 sum is exact and the fp16
 * outputs can be compared to rounded double references. */
typedef cudnnBackendDescriptor_t bdesc;
static int g_setfail;

static bdesc mk(cudnnBackendDescriptorType_t t)
{
    bdesc d = NULL;
    cudnnBackendCreateDescriptor(t, &d);
    return d;
}
static void set(bdesc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
    cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
    if (s) {
        printf("graph: SetAttribute %d: %s\n", (int)a, cudnnGetErrorString(s));
        g_setfail++;
    }
}
static void setd(bdesc d, cudnnBackendAttributeName_t a, bdesc v)
{
    set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}
static bdesc fin(bdesc d)
{
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s) {
        printf("graph: Finalize: %s\n", cudnnGetErrorString(s));
        g_setfail++;
    }
    return d;
}
/* logical (n,c,h,w), NHWC packed */
static bdesc tensor(int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w, int virt)
{
    int64_t dim[4] = {n, c, h, w}, str[4] = {h * w * c, 1, w * c, c}, al = 16;
    bool v = virt;
    bdesc t = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    return fin(t);
}
static bdesc pw_op2(cudnnPointwiseMode_t m, bdesc x, bdesc b, bdesc y, float alpha2);
static bdesc pw_op(cudnnPointwiseMode_t m, bdesc x, bdesc b, bdesc y) { return pw_op2(m, x, b, y, 0); }
/* alpha2 0: not set (cuDNN's default 1) */
static bdesc pw_op2(cudnnPointwiseMode_t m, bdesc x, bdesc b, bdesc y, float alpha2)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    bdesc pw = mk(CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &m);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f);
    setd(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, fin(pw));
    if (m == CUDNN_POINTWISE_RELU_BWD) { /* b = dy, y = dx */
        setd(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
        setd(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, b);
        setd(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, y);
    } else {
        setd(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
        if (b)
            setd(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
        setd(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    }
    if (alpha2 != 0)
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2);
    return fin(op);
}
/* a conv op of type t: (x, w, y) in forward terms; pad / stride both ways */
static bdesc conv_op(cudnnBackendDescriptorType_t t, bdesc x, bdesc w, bdesc y, int64_t pad, int64_t stride)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t cm = CUDNN_CROSS_CORRELATION;
    int64_t sd = 2, one[2] = {1, 1}, pd[2] = {pad, pad}, st[2] = {stride, stride};
    double alpha = 1, beta = 0;
    bdesc cd = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), op = mk(t);
    set(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    set(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &cm);
    set(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
    set(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one);
    set(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, st);
    set(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pd);
    set(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pd);
    fin(cd);
    if (t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR) {
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_DOUBLE, 1, &beta);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, cd);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
    } else if (t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR) {
        float a = 1, b = 0; /* FLOAT alpha / beta here, DOUBLE elsewhere */
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &a);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &b);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, cd);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y);
    } else {
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_DOUBLE, 1, &beta);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, cd);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w);
        setd(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, y);
    }
    return fin(op);
}

/* The shape of a case: x (n,c,h,w), w (k,c,r,r), y (n,k,p,q) */
struct gshape { int n, c, h, w, k, r, pad, st, p, q; };
static struct gshape gshape_of(int n, int c, int hw, int k, int r, int pad, int st)
{
    struct gshape g = {n, c, hw, hw, k, r, pad, st, (hw + 2 * pad - r) / st + 1, (hw + 2 * pad - r) / st + 1};
    return g;
}
/* Uids: the real tensors 1.., virtuals 100.. */
enum { U_X = 1, U_S, U_B, U_W, U_Y, U_SUM, U_SQ, U_DY, U_DW, U_XC, U_DA, U_MEAN, U_INV, U_GAMMA, U_DSC, U_DBI, U_EQDY,
       U_EQX, U_EQB, U_BETA, U_MEAN2, U_NREAL, U_V1 = 100, U_V2, U_V3, U_V4, U_V5 };

/* A graph of n ops (in the order given), finalized */
static bdesc graph_of(cudnnHandle_t h, bdesc *ops, int n)
{
    bdesc g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops);
    return fin(g);
}
/* x*s+b -> relu into `out`; ops[0..2] (virtual type vt) */
static void prologue_ops(struct gshape g, cudnnDataType_t vt, bdesc out, bdesc *ops)
{
    bdesc x = tensor(U_X, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w, 0);
    bdesc s = tensor(U_S, CUDNN_DATA_HALF, 1, g.c, 1, 1, 0), b = tensor(U_B, CUDNN_DATA_HALF, 1, g.c, 1, 1, 0);
    bdesc v1 = tensor(U_V1, vt, g.n, g.c, g.h, g.w, 1), v2 = tensor(U_V2, vt, g.n, g.c, g.h, g.w, 1);
    ops[0] = pw_op(CUDNN_POINTWISE_MUL, x, s, v1);
    ops[1] = pw_op(CUDNN_POINTWISE_ADD, v1, b, v2);
    ops[2] = pw_op(CUDNN_POINTWISE_RELU_FWD, v2, NULL, out);
}
/* F: [prologue ->] conv fwd -> genstats, ops reversed when rev */
static bdesc graph_F(cudnnHandle_t h, struct gshape g, int prologue, cudnnDataType_t vt, cudnnDataType_t xdt, int rev)
{
    bdesc ops[5];
    int n = 0;
    bdesc xin = prologue ? tensor(U_V3, vt, g.n, g.c, g.h, g.w, 1) : tensor(U_X, xdt, g.n, g.c, g.h, g.w, 0);
    if (prologue)
        prologue_ops(g, vt, xin, ops), n = 3;
    bdesc w = tensor(U_W, CUDNN_DATA_HALF, g.k, g.c, g.r, g.r, 0), y = tensor(U_Y, CUDNN_DATA_HALF, g.n, g.k, g.p, g.q, 0);
    ops[n++] = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, xin, w, y, g.pad, g.st);
    bdesc gs = mk(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    cudnnGenStatsMode_t m = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &m);
    set(gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f);
    setd(gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y);
    setd(gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, tensor(U_SUM, CUDNN_DATA_FLOAT, 1, g.k, 1, 1, 0));
    setd(gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, tensor(U_SQ, CUDNN_DATA_FLOAT, 1, g.k, 1, 1, 0));
    ops[n++] = fin(gs);
    for (int i = 0; rev && i < n / 2; i++) {
        bdesc t = ops[i];
        ops[i] = ops[n - 1 - i], ops[n - 1 - i] = t;
    }
    return graph_of(h, ops, n);
}
static bdesc graph_W(cudnnHandle_t h, struct gshape g, cudnnDataType_t vt)
{
    bdesc ops[4], t = tensor(U_V3, vt, g.n, g.c, g.h, g.w, 1);
    prologue_ops(g, vt, t, ops);
    ops[3] = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, t,
                     tensor(U_DW, CUDNN_DATA_HALF, g.k, g.c, g.r, g.r, 0), tensor(U_DY, CUDNN_DATA_HALF, g.n, g.k, g.p, g.q, 0),
                     g.pad, g.st);
    return graph_of(h, ops, 4);
}
/* D as sluice built it before issue 37: the previous BN folded into fp16
 * scale / bias, two ops, BN_BWD_WEIGHTS on tensors of its own (refused) */
static bdesc graph_D_old(cudnnHandle_t h, struct gshape g, cudnnDataType_t vt)
{
    bdesc ops[5], gr = tensor(U_V1, vt, g.n, g.c, g.h, g.w, 1), xc = tensor(U_XC, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w, 0);
    bdesc v2 = tensor(U_V2, vt, g.n, g.c, g.h, g.w, 1), t = tensor(U_V3, vt, g.n, g.c, g.h, g.w, 1);
    bdesc da = tensor(U_DA, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w, 0);
    ops[0] = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, gr,
                     tensor(U_W, CUDNN_DATA_HALF, g.k, g.c, g.r, g.r, 0), tensor(U_DY, CUDNN_DATA_HALF, g.n, g.k, g.p, g.q, 0),
                     g.pad, g.st);
    ops[1] = pw_op(CUDNN_POINTWISE_MUL, xc, tensor(U_S, CUDNN_DATA_HALF, 1, g.c, 1, 1, 0), v2);
    ops[2] = pw_op(CUDNN_POINTWISE_ADD, v2, tensor(U_B, CUDNN_DATA_HALF, 1, g.c, 1, 1, 0), t);
    ops[3] = pw_op(CUDNN_POINTWISE_RELU_BWD, t, gr, da);
    bdesc bn = mk(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, xc);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, da);
    static const cudnnBackendAttributeName_t a[8] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS};
    for (int i = 0; i < 8; i++)
        setd(bn, a[i], tensor(U_MEAN + i, CUDNN_DATA_FLOAT, 1, g.c, 1, 1, 0));
    ops[4] = fin(bn);
    /* given out of order: the bn op first, the dgrad last */
    bdesc o[5] = {ops[4], ops[3], ops[1], ops[2], ops[0]};
    return graph_of(h, o, 5);
}

/* D as NVIDIA documents it (emu_dnn_graph.cpp's match_D), in form:
 * 's' SUB mean, 'a' ADD mean with alpha2 -1, 'p' plain ADD (x + mean), 'h'
 * fp16 mean / invstd / scale / bias, 'o' a BN_BWD_WEIGHTS with a mean of
 * its own ('p', 'h', 'o' are refused); the ops given out of order */
static bdesc graph_D(cudnnHandle_t h, struct gshape g, cudnnDataType_t vt, char form)
{
    cudnnDataType_t bt = form == 'h' ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    bdesc gr = tensor(U_V1, vt, g.n, g.c, g.h, g.w, 1), xc = tensor(U_XC, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w, 0);
    bdesc da = tensor(U_DA, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w, 0), v[4];
    bdesc mean = tensor(U_MEAN, bt, 1, g.c, 1, 1, 0), inv = tensor(U_INV, bt, 1, g.c, 1, 1, 0);
    bdesc gam = tensor(U_GAMMA, bt, 1, g.c, 1, 1, 0), bet = tensor(U_BETA, bt, 1, g.c, 1, 1, 0);
    for (int i = 0; i < 4; i++)
        v[i] = tensor(U_V2 + i, vt, g.n, g.c, g.h, g.w, 1);
    bdesc ops[7];
    ops[0] = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, gr,
                     tensor(U_W, CUDNN_DATA_HALF, g.k, g.c, g.r, g.r, 0), tensor(U_DY, CUDNN_DATA_HALF, g.n, g.k, g.p, g.q, 0),
                     g.pad, g.st);
    if (form == 'a' || form == 'p')
        ops[1] = pw_op2(CUDNN_POINTWISE_ADD, xc, mean, v[0], form == 'a' ? -1.0f : 0.0f);
    else
        ops[1] = pw_op(CUDNN_POINTWISE_SUB, xc, mean, v[0]);
    ops[2] = pw_op(CUDNN_POINTWISE_MUL, v[0], inv, v[1]);
    ops[3] = pw_op(CUDNN_POINTWISE_MUL, v[1], gam, v[2]);
    ops[4] = pw_op(CUDNN_POINTWISE_ADD, v[2], bet, v[3]);
    ops[5] = pw_op(CUDNN_POINTWISE_RELU_BWD, v[3], gr, da);
    bdesc bn = mk(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, xc);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, da);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, form == 'o' ? tensor(U_MEAN2, bt, 1, g.c, 1, 1, 0) : mean);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, inv);
    setd(bn, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, gam);
    static const cudnnBackendAttributeName_t a[5] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS};
    for (int i = 0; i < 5; i++)
        setd(bn, a[i], tensor(U_DSC + i, CUDNN_DATA_FLOAT, 1, g.c, 1, 1, 0));
    ops[6] = fin(bn);
    /* given out of order: the bn op first, the dgrad last */
    bdesc o[7] = {ops[6], ops[5], ops[3], ops[1], ops[4], ops[2], ops[0]};
    return graph_of(h, o, 7);
}

/* The heuristics' results for g (mode A): count, cfgs filled */
static int64_t heur(bdesc g, bdesc *cfgs)
{
    cudnnBackendHeurMode_t m = CUDNN_HEUR_MODE_A;
    int64_t got = -1;
    bdesc he = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    setd(he, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g);
    set(he, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m);
    fin(he);
    cfgs[0] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), cfgs[1] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, &got, cfgs);
    cudnnBackendDestroyDescriptor(he);
    return got;
}
static bdesc plan_of(cudnnHandle_t h, bdesc cfg, int64_t *ws)
{
    bdesc p = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    int64_t n;
    set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    setd(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    fin(p);
    cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, ws);
    return p;
}
/* the device buffers of every real uid (256 B past each tensor's end is
 * still its allocation's page: sizes are exact) and the workspace */
static void *g_dev[U_NREAL];
static cudnnStatus_t exec_plan(cudnnHandle_t h, bdesc plan, const int *uids, int n, void *ws)
{
    int64_t u[U_NREAL];
    void *p[U_NREAL];
    for (int i = 0; i < n; i++)
        u[i] = uids[i], p[i] = g_dev[uids[i]];
    bdesc vp = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, u);
    set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, p);
    set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    fin(vp);
    cudnnStatus_t s = cudnnBackendExecute(h, plan, vp);
    cudnnBackendDestroyDescriptor(vp);
    return s;
}

/* host data: fp16 / f32 arrays, uploaded into g_dev[uid] */
static _Float16 *hh[U_NREAL];
static float *hf[U_NREAL];
static void up_h(int uid, size_t n, int seed, float scale)
{
    hh[uid] = realloc(hh[uid], n * 2);
    for (size_t i = 0; i < n; i++)
        hh[uid][i] = (_Float16)((float)((int)((i * 7 + seed) % 17) - 8) * scale);
    cudaFree(g_dev[uid]);
    cudaMalloc(&g_dev[uid], n * 2);
    cudaMemcpy(g_dev[uid], hh[uid], n * 2, cudaMemcpyHostToDevice);
}
static void up_f(int uid, size_t n, const float *v)
{
    hf[uid] = realloc(hf[uid], n * 4);
    if (v)
        memcpy(hf[uid], v, n * 4);
    cudaFree(g_dev[uid]);
    cudaMalloc(&g_dev[uid], n * 4);
    if (v)
        cudaMemcpy(g_dev[uid], v, n * 4, cudaMemcpyHostToDevice);
}
static void out_h(int uid, size_t n)
{
    hh[uid] = realloc(hh[uid], n * 2);
    cudaFree(g_dev[uid]);
    cudaMalloc(&g_dev[uid], n * 2);
}
static _Float16 *down_h(int uid, size_t n)
{
    cudaMemcpy(hh[uid], g_dev[uid], n * 2, cudaMemcpyDeviceToHost);
    return hh[uid];
}
static float *down_f(int uid, size_t n)
{
    cudaMemcpy(hf[uid], g_dev[uid], n * 4, cudaMemcpyDeviceToHost);
    return hf[uid];
}
static int close_to(double got, double want, double atol, double rtol)
{
    return fabs(got - want) <= atol + rtol * fabs(want);
}
static void graph_case(const char *name, int ok, const char *detail)
{
    printf("graph: %s: %s%s%s\n", name, ok ? "ok" : "WRONG", ok ? "" : " ", ok ? "" : detail);
}

/* t = relu(x*s+b) on the host (exact in any precision here) */
static double prol(int i, int c, int C)
{
    double t = (double)hh[U_X][i] * (double)hh[U_S][c] + (double)hh[U_B][c];
    (void)C;
    return t > 0 ? t : 0;
}
/* x (n,h,w,c) index of tap (r,s) of output (p,q); -1 in the padding */
static int tap(struct gshape g, int n, int p, int q, int r, int s, int c)
{
    int ih = p * g.st - g.pad + r, iw = q * g.st - g.pad + s;
    if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w)
        return -1;
    return ((n * g.h + ih) * g.w + iw) * g.c + c;
}

static void upload_inputs(struct gshape g)
{
    size_t nx = (size_t)g.n * g.h * g.w * g.c, nw = (size_t)g.k * g.r * g.r * g.c, ny = (size_t)g.n * g.p * g.q * g.k;
    float mean[64], inv[64], gam[64], bet[64];
    for (int c = 0; c < g.c; c++)
        mean[c] = (float)(c % 3 - 1) / 8, inv[c] = 1 + (float)(c % 4) / 4, gam[c] = 0.5f + (float)(c % 5) / 8,
        bet[c] = (float)(c % 3 - 1) / 4;
    up_h(U_X, nx, 3, 1.0f / 8), up_h(U_XC, nx, 5, 1.0f / 8), up_h(U_W, nw, 1, 1.0f / 16), up_h(U_DY, ny, 2, 1.0f / 8);
    up_h(U_S, g.c, 11, 1.0f / 16), up_h(U_B, g.c, 4, 1.0f / 8);
    for (int c = 0; c < g.c; c++) /* positive scales */
        hh[U_S][c] = (_Float16)(0.25f + (float)(c % 5) / 8);
    cudaMemcpy(g_dev[U_S], hh[U_S], g.c * 2, cudaMemcpyHostToDevice);
    up_f(U_MEAN, g.c, mean), up_f(U_INV, g.c, inv), up_f(U_GAMMA, g.c, gam), up_f(U_BETA, g.c, bet);
    out_h(U_Y, ny), out_h(U_DW, nw), out_h(U_DA, nx);
    for (int u = U_SUM; u <= U_SQ; u++)
        up_f(u, g.k, NULL);
    for (int u = U_DSC; u <= U_EQB; u++)
        up_f(u, g.c, NULL);
}

/* F against the direct loops: y, then sum / sqsum of the rounded y */
static int check_F(struct gshape g, int prologue, char *why)
{
    size_t ny = (size_t)g.n * g.p * g.q * g.k;
    _Float16 *y = down_h(U_Y, ny);
    float *sum = down_f(U_SUM, g.k), *sq = down_f(U_SQ, g.k);
    double rs[64] = {0}, rq[64] = {0};
    for (int n = 0; n < g.n; n++)
        for (int p = 0; p < g.p; p++)
            for (int q = 0; q < g.q; q++)
                for (int k = 0; k < g.k; k++) {
                    double acc = 0;
                    for (int r = 0; r < g.r; r++)
                        for (int s = 0; s < g.r; s++)
                            for (int c = 0; c < g.c; c++) {
                                int i = tap(g, n, p, q, r, s, c);
                                if (i >= 0)
                                    acc += (prologue ? prol(i, c, g.c) : (double)hh[U_X][i]) *
                                           (double)hh[U_W][((k * g.r + r) * g.r + s) * g.c + c];
                            }
                    size_t o = (((size_t)n * g.p + p) * g.q + q) * g.k + k;
                    _Float16 want = (_Float16)acc;
                    if (y[o] != want) {
                        sprintf(why, "y[%zu] = %g, want %g", o, (double)y[o], (double)want);
                        return 0;
                    }
                    rs[k] += (double)want, rq[k] += (double)want * (double)want;
                }
    (void)ny;
    for (int k = 0; k < g.k; k++)
        if (!close_to(sum[k], rs[k], 1e-5, 1e-6) || !close_to(sq[k], rq[k], 1e-5, 1e-6)) {
            sprintf(why, "channel %d: sum %g sqsum %g, want %g %g", k, sum[k], sq[k], rs[k], rq[k]);
            return 0;
        }
    return 1;
}
static int check_W(struct gshape g, char *why)
{
    _Float16 *dw = down_h(U_DW, (size_t)g.k * g.r * g.r * g.c);
    for (int k = 0; k < g.k; k++)
        for (int r = 0; r < g.r; r++)
            for (int s = 0; s < g.r; s++)
                for (int c = 0; c < g.c; c++) {
                    double acc = 0;
                    for (int n = 0; n < g.n; n++)
                        for (int p = 0; p < g.p; p++)
                            for (int q = 0; q < g.q; q++) {
                                int i = tap(g, n, p, q, r, s, c);
                                if (i >= 0)
                                    acc += prol(i, c, g.c) * (double)hh[U_DY][(((size_t)n * g.p + p) * g.q + q) * g.k + k];
                            }
                    size_t o = (((size_t)k * g.r + r) * g.r + s) * g.c + c;
                    if (dw[o] != (_Float16)acc) {
                        sprintf(why, "dw[%zu] = %g, want %g", o, (double)dw[o], acc);
                        return 0;
                    }
                }
    return 1;
}
/* D: da, the batch norm sums and coefficients; then dx from them against
 * batch norm's input gradient written out: gamma*invstd/M * (M*da - sum da
 * - xhat * sum(da*xhat)) */
static int check_D(struct gshape g, char *why)
{
    size_t nx = (size_t)g.n * g.h * g.w * g.c;
    _Float16 *da = down_h(U_DA, nx);
    float *dsc = down_f(U_DSC, g.c), *dbi = down_f(U_DBI, g.c), *eqdy = down_f(U_EQDY, g.c), *eqx = down_f(U_EQX, g.c),
          *eqb = down_f(U_EQB, g.c), *mean = hf[U_MEAN], *inv = hf[U_INV], *gam = hf[U_GAMMA];
    double rb[64] = {0}, rsc[64] = {0}, M = (double)g.n * g.h * g.w;
    static double ref_da[1 << 16];
    for (int n = 0; n < g.n; n++)
        for (int h = 0; h < g.h; h++)
            for (int w = 0; w < g.w; w++)
                for (int c = 0; c < g.c; c++) {
                    double acc = 0; /* dgrad: every (p,q,r,s) whose tap is (h,w) */
                    for (int p = 0; p < g.p; p++)
                        for (int q = 0; q < g.q; q++)
                            for (int r = 0; r < g.r; r++)
                                for (int s = 0; s < g.r; s++)
                                    if (tap(g, n, p, q, r, s, c) == ((n * g.h + h) * g.w + w) * g.c + c)
                                        for (int k = 0; k < g.k; k++)
                                            acc += (double)hh[U_DY][(((size_t)n * g.p + p) * g.q + q) * g.k + k] *
                                                   (double)hh[U_W][((k * g.r + r) * g.r + s) * g.c + c];
                    size_t i = (((size_t)n * g.h + h) * g.w + w) * g.c + c;
                    /* the previous BN recomputed (exact in f32 and f16 with these data) */
                    double t = ((double)hh[U_XC][i] - hf[U_MEAN][c]) * hf[U_INV][c] * hf[U_GAMMA][c] + hf[U_BETA][c];
                    _Float16 want = (_Float16)(t > 0 ? acc : 0);
                    if (da[i] != want) {
                        sprintf(why, "da[%zu] = %g, want %g", i, (double)da[i], (double)want);
                        return 0;
                    }
                    ref_da[i] = (double)want;
                    rb[c] += (double)want, rsc[c] += (double)want * ((double)hh[U_XC][i] - mean[c]) * inv[c];
                }
    for (int c = 0; c < g.c; c++) {
        double gi = (double)gam[c] * inv[c];
        if (!close_to(dsc[c], rsc[c], 1e-5, 1e-6) || !close_to(dbi[c], rb[c], 1e-5, 1e-6) || !close_to(eqdy[c], gi, 0, 1e-6) ||
            !close_to(eqx[c], -gi * inv[c] * rsc[c] / M, 1e-7, 1e-5) ||
            !close_to(eqb[c], gi * (mean[c] * inv[c] * rsc[c] - rb[c]) / M, 1e-7, 1e-5)) {
            sprintf(why, "channel %d: dscale %g dbias %g eq %g %g %g", c, dsc[c], dbi[c], eqdy[c], eqx[c], eqb[c]);
            return 0;
        }
    }
    for (size_t i = 0; i < nx; i++) {
        int c = (int)(i % g.c);
        double xhat = ((double)hh[U_XC][i] - mean[c]) * inv[c];
        double want = gam[c] * inv[c] / M * (M * ref_da[i] - rb[c] - xhat * rsc[c]);
        double got = eqdy[c] * ref_da[i] + eqx[c] * (double)hh[U_XC][i] + eqb[c];
        if (!close_to(got, want, 1e-6, 1e-5)) {
            sprintf(why, "dx[%zu] from the coefficients %g, batch norm's gradient %g", i, got, want);
            return 0;
        }
    }
    return 1;
}

static const int F_UIDS[] = {U_X, U_S, U_B, U_W, U_Y, U_SUM, U_SQ};
static const int W_UIDS[] = {U_X, U_S, U_B, U_DY, U_DW};
static const int D_UIDS[] = {U_DY, U_W, U_XC, U_MEAN, U_INV, U_GAMMA, U_BETA, U_DA, U_DSC, U_DBI, U_EQDY, U_EQX, U_EQB};

/* Build, plan (engine e), execute, sync, check one pattern ('F' / 'f'
 * without prologue, 'W', 'D' with SUB, 'd' with ADD alpha2 -1). */
static void run_pattern(cudnnHandle_t h, const char *name, char pat, struct gshape g, cudnnDataType_t vt, int e)
{
    char why[256] = "";
    upload_inputs(g);
    char D = pat == 'd' ? 'a' : 's';
    if (pat == 'd')
        pat = 'D';
    bdesc gr = pat == 'W' ? graph_W(h, g, vt) : pat == 'D' ? graph_D(h, g, vt, D) : graph_F(h, g, pat == 'F', vt, CUDNN_DATA_HALF, 1);
    bdesc cfg[2];
    int64_t ws = -1, got = heur(gr, cfg);
    void *dws = NULL;
    if (got != 2) {
        sprintf(why, "%lld heuristic results", (long long)got);
        graph_case(name, 0, why);
        return;
    }
    bdesc plan = plan_of(h, cfg[e], &ws);
    if (ws)
        cudaMalloc(&dws, ws);
    const int *u = pat == 'W' ? W_UIDS : pat == 'D' ? D_UIDS : F_UIDS;
    int nu = pat == 'W' ? 5 : pat == 'D' ? 13 : 7;
    static const int f_uids[] = {U_X, U_W, U_Y, U_SUM, U_SQ}; /* no scale / bias in the graph */
    if (pat == 'f')
        u = f_uids, nu = 5;
    cudnnStatus_t s = exec_plan(h, plan, u, nu, dws);
    cudaDeviceSynchronize();
    int ok = s == CUDNN_STATUS_SUCCESS && ws == (e == 0 ? 4096 * (pat == 'D' ? g.c : g.k) : 0);
    if (!ok)
        sprintf(why, "execute: %s, workspace %lld", cudnnGetErrorString(s), (long long)ws);
    else
        ok = pat == 'W' ? check_W(g, why) : pat == 'D' ? check_D(g, why) : check_F(g, pat == 'F', why);
    graph_case(name, ok, why);
    cudaFree(dws);
}

/* count of heuristic results for a graph variant, and whether an ENGINE
 * built by index for it finalizes */
static void refused_case(const char *name, bdesc gr)
{
    bdesc cfg[2], eng = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t got = heur(gr, cfg), zero = 0;
    setd(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, gr);
    set(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &zero);
    cudnnStatus_t s = cudnnBackendFinalize(eng);
    char why[128];
    sprintf(why, "%lld results, ENGINE finalize %s", (long long)got, cudnnGetErrorString(s));
    graph_case(name, got == 0 && s == CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, why);
}

static int graph_cases(void)
{
    cudnnHandle_t h;
    cudaStream_t st;
    cudnnCreate(&h);
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudnnSetStream(h, st);
    struct gshape g3 = gshape_of(2, 8, 5, 16, 3, 1, 1), g1 = gshape_of(2, 8, 5, 16, 1, 0, 2);
    char why[256];
    int64_t k1;

    /* the three patterns, two shapes each, both engines, both virtual types */
    run_pattern(h, "F 3x3 s1 (ops reversed, f32 virtuals, engine 0)", 'F', g3, CUDNN_DATA_FLOAT, 0);
    run_pattern(h, "F 1x1 s2 (f16 virtuals, engine 1)", 'F', g1, CUDNN_DATA_HALF, 1);
    run_pattern(h, "F without scale/bias/ReLU, 1x1 s2", 'f', g1, CUDNN_DATA_FLOAT, 0);
    run_pattern(h, "W 3x3 s1 (engine 0)", 'W', g3, CUDNN_DATA_FLOAT, 0);
    run_pattern(h, "W 1x1 s2 (f16 virtuals, engine 1)", 'W', g1, CUDNN_DATA_HALF, 1);
    run_pattern(h, "D 3x3 s1 (SUB mean, ops shuffled, engine 0)", 'D', g3, CUDNN_DATA_FLOAT, 0);
    run_pattern(h, "D 1x1 s2 (ADD mean alpha2 -1, f16 virtuals, engine 1)", 'd', g1, CUDNN_DATA_HALF, 1);

    /* refusals: the op graph finalizes, no engine serves it */
    {
        bdesc ops[3], v = tensor(U_V3, CUDNN_DATA_FLOAT, 2, 8, 5, 5, 1), v1 = tensor(U_V1, CUDNN_DATA_FLOAT, 2, 8, 5, 5, 1);
        ops[0] = pw_op(CUDNN_POINTWISE_MUL, tensor(U_X, CUDNN_DATA_HALF, 2, 8, 5, 5, 0),
                       tensor(U_S, CUDNN_DATA_HALF, 1, 8, 1, 1, 0), v1);
        ops[1] = pw_op(CUDNN_POINTWISE_RELU_FWD, v1, NULL, v);
        ops[2] = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, v,
                         tensor(U_W, CUDNN_DATA_HALF, 16, 8, 3, 3, 0), tensor(U_Y, CUDNN_DATA_HALF, 2, 16, 5, 5, 0), 1, 1);
        refused_case("refused: MUL -> RELU -> conv (no ADD, no GEN_STATS)", graph_of(h, ops, 3));
    }
    refused_case("refused: F with a BF16 x", graph_F(h, g3, 0, CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16, 0));
    refused_case("refused: F with C = 4", graph_F(h, gshape_of(2, 4, 5, 16, 3, 1, 1), 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0));
    refused_case("refused: W with K = 12", graph_W(h, gshape_of(2, 8, 5, 12, 3, 1, 1), CUDNN_DATA_FLOAT));
    /* D: the documented graph only (emu_dnn_graph.cpp's match_D) */
    refused_case("refused: D as sluice built it before issue 37 (fp16 folded scale/bias, 5 ops)",
                 graph_D_old(h, g3, CUDNN_DATA_FLOAT));
    refused_case("refused: D with fp16 mean/invstd/scale/bias", graph_D(h, g3, CUDNN_DATA_FLOAT, 'h'));
    refused_case("refused: D with a plain ADD of the mean (x + mean)", graph_D(h, g3, CUDNN_DATA_FLOAT, 'p'));
    refused_case("refused: D whose BN_BWD_WEIGHTS reads a mean of its own", graph_D(h, g3, CUDNN_DATA_FLOAT, 'o'));
    {
        bdesc cfg[2];
        setenv("EMU_CUDNN_VERSION", "90700", 1);
        bdesc sub = graph_D(h, g3, CUDNN_DATA_FLOAT, 's');
        refused_case("refused: D's SUB mean before cuDNN 9.8.0 (EMU_CUDNN_VERSION=90700)", sub);
        int64_t got = heur(graph_D(h, g3, CUDNN_DATA_FLOAT, 'a'), cfg);
        unsetenv("EMU_CUDNN_VERSION");
        sprintf(why, "%lld results", (long long)got);
        graph_case("D's ADD mean alpha2 -1 at cuDNN 9.7.0: accepted", got == 2, why);
    }
    /* fault injection: in the environment at cudnnCreate or at the heuristics */
    {
        bdesc cfg[2];
        cudnnHandle_t h0, h8, h16;
        setenv("EMU_CUDNN_GRAPH", "0", 1);
        cudnnCreate(&h0);
        unsetenv("EMU_CUDNN_GRAPH");
        refused_case("EMU_CUDNN_GRAPH=0 at cudnnCreate refuses", graph_F(h0, g3, 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0));
        bdesc later = graph_F(h, g3, 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0);
        setenv("EMU_CUDNN_GRAPH", "0", 1);
        refused_case("EMU_CUDNN_GRAPH=0 at the heuristics refuses", later);
        unsetenv("EMU_CUDNN_GRAPH");
        int64_t got;
        setenv("EMU_CUDNN_GRAPH_MAX_C", "8", 1);
        cudnnCreate(&h8);
        setenv("EMU_CUDNN_GRAPH_MAX_C", "16", 1);
        cudnnCreate(&h16);
        unsetenv("EMU_CUDNN_GRAPH_MAX_C");
        refused_case("EMU_CUDNN_GRAPH_MAX_C=8 refuses K = 16", graph_D(h8, g3, CUDNN_DATA_FLOAT, 's'));
        got = heur(graph_D(h16, g3, CUDNN_DATA_FLOAT, 's'), cfg);
        sprintf(why, "%lld results", (long long)got);
        graph_case("EMU_CUDNN_GRAPH_MAX_C=16 accepts C 8, K 16", got == 2, why);
        cudnnDestroy(h0), cudnnDestroy(h8), cudnnDestroy(h16);
    }
    /* many configurations, some NONDETERMINISTIC; 1x1 stride 2; ConvBNwgrad's intermediates */
    {
        setenv("EMU_CUDNN_GRAPH_CONFIGS", "10", 1);
        setenv("EMU_CUDNN_GRAPH_NONDET", "3", 1);
        bdesc gr = graph_D(h, g3, CUDNN_DATA_FLOAT, 's'), cfg[16], he = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        cudnnBackendHeurMode_t m = CUDNN_HEUR_MODE_A;
        int64_t n = -1, gc = -1;
        setd(he, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, gr);
        set(he, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m);
        fin(he);
        for (int i = 0; i < 16; i++)
            cfg[i] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 16, &n, cfg);
        cudnnBackendGetAttribute(gr, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &k1, &gc);
        unsetenv("EMU_CUDNN_GRAPH_CONFIGS"), unsetenv("EMU_CUDNN_GRAPH_NONDET");
        int nd = 0, order = 1;
        for (int64_t i = 0; i < n && i < 16; i++) {
            bdesc eng = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
            int64_t nn = 0, gi = -1, one;
            cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &one, &eng);
            cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes);
            cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &one, &gi);
            int this_nd = 0;
            for (int64_t k = 0; k < nn; k++)
                this_nd |= notes[k] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
            nd += this_nd;
            order &= gi == i && this_nd == (i < 3);
        }
        sprintf(why, "%lld results, global count %lld, %d NONDETERMINISTIC, order %d", (long long)n, (long long)gc, nd,
                order);
        graph_case("EMU_CUDNN_GRAPH_CONFIGS=10 NONDET=3: ten configurations, engines 0-2 NONDETERMINISTIC",
                   n == 10 && gc == 10 && nd == 3 && order, why);
        setenv("EMU_CUDNN_GRAPH_1X1S2", "0", 1);
        refused_case("EMU_CUDNN_GRAPH_1X1S2=0 refuses F 1x1 s2", graph_F(h, g1, 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0));
        int64_t got = heur(graph_F(h, g3, 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0), cfg);
        unsetenv("EMU_CUDNN_GRAPH_1X1S2");
        sprintf(why, "%lld results", (long long)got);
        graph_case("EMU_CUDNN_GRAPH_1X1S2=0 accepts F 3x3 s1", got == 2, why);
        setenv("EMU_CUDNN_GRAPH_REFUSE", "D", 1);
        refused_case("EMU_CUDNN_GRAPH_REFUSE=D refuses D", graph_D(h, g3, CUDNN_DATA_FLOAT, 's'));
        got = heur(graph_W(h, g3, CUDNN_DATA_FLOAT), cfg);
        unsetenv("EMU_CUDNN_GRAPH_REFUSE");
        sprintf(why, "%lld results", (long long)got);
        graph_case("EMU_CUDNN_GRAPH_REFUSE=D accepts W", got == 2, why);
        setenv("EMU_CUDNN_GRAPH_WGRAD_VIRT", "FLOAT", 1);
        refused_case("EMU_CUDNN_GRAPH_WGRAD_VIRT=FLOAT refuses W with HALF intermediates", graph_W(h, g3, CUDNN_DATA_HALF));
        got = heur(graph_W(h, g3, CUDNN_DATA_FLOAT), cfg);
        unsetenv("EMU_CUDNN_GRAPH_WGRAD_VIRT");
        sprintf(why, "%lld results", (long long)got);
        graph_case("EMU_CUDNN_GRAPH_WGRAD_VIRT=FLOAT accepts W with FLOAT intermediates", got == 2, why);
    }

    /* the API's rules */
    {
        int64_t uid = 7, n = -1;
        cudnnStatus_t s1, s2, s3, s4, s5;
        bdesc t = tensor(U_X, CUDNN_DATA_HALF, 2, 8, 5, 5, 0), raw = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR), mm = NULL;
        bdesc op = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        s1 = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
        s2 = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
        s3 = cudnnBackendGetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &uid);
        s4 = cudnnBackendSetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT32, 1, &uid);
        s5 = cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &mm);
        sprintf(why, "%d %d %d %d %d", s1, s2, s3, s4, s5);
        graph_case("set on a finalized / unfinalized operand / get from unfinalized / wrong type: BAD_PARAM; MATMUL: NOT_SUPPORTED",
                   s1 == CUDNN_STATUS_BAD_PARAM && s2 == CUDNN_STATUS_BAD_PARAM && s3 == CUDNN_STATUS_BAD_PARAM &&
                       s4 == CUDNN_STATUS_BAD_PARAM && s5 == CUDNN_STATUS_NOT_SUPPORTED,
                   why);
        /* the count query (0, NULL), and a tensor read back */
        cudnnBackendHeurMode_t m = CUDNN_HEUR_MODE_FALLBACK;
        bdesc he = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), back = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        bdesc gr = graph_F(h, g3, 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0);
        setd(he, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, gr);
        set(he, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m);
        fin(he);
        s1 = cudnnBackendGetAttribute(he, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
        int64_t nops = -1, u2 = -1, k;
        s2 = cudnnBackendGetAttribute(gr, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &nops, NULL);
        bdesc op0 = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        s3 = cudnnBackendGetAttribute(gr, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &nops, &op0);
        s4 = cudnnBackendGetAttribute(op0, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, &back);
        s5 = cudnnBackendGetAttribute(back, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &k, &u2);
        sprintf(why, "%d %d %d %d %d: %lld results, %lld ops, uid %lld", s1, s2, s3, s4, s5, (long long)n, (long long)nops,
                (long long)u2);
        graph_case("count query (0, NULL) and descriptors read back", !s1 && !s2 && !s3 && !s4 && !s5 && n == 2 && nops == 5 && u2 == U_X,
                   why);
    }

    /* misuse at execute: each reported (run.sh checks the reports) */
    {
        bdesc cfg[2];
        int64_t ws;
        upload_inputs(g3);
        heur(graph_F(h, g3, 1, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, 0), cfg);
        bdesc plan = plan_of(h, cfg[0], &ws);
        void *small = NULL, *big = NULL;
        cudaMalloc(&small, 1024), cudaMalloc(&big, ws);
        static const int no_w[] = {U_X, U_S, U_B, U_Y, U_SUM, U_SQ};
        cudnnStatus_t s = exec_plan(h, plan, no_w, 6, big);
        graph_case("missing pointer (w): BAD_PARAM, reported", s == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(s));
        s = exec_plan(h, plan, F_UIDS, 7, small);
        graph_case("workspace of 1 KiB for 64 KiB: BAD_PARAM, reported", s == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(s));
        cudnnBackendDestroyDescriptor(cfg[1]);
        s = cudnnBackendDestroyDescriptor(cfg[1]);
        graph_case("descriptor destroyed twice: BAD_PARAM, reported", s == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(s));

        /* captured: the graph replays the execution with its pointers */
        cudaGraph_t cg = NULL;
        cudaGraphExec_t ge;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        s = exec_plan(h, plan, F_UIDS, 7, big);
        cudaError_t e = cudaStreamEndCapture(st, &cg);
        size_t ny = (size_t)g3.n * g3.p * g3.q * g3.k;
        cudaMemset(g_dev[U_Y], 0, ny * 2);
        cudaMemset(g_dev[U_SUM], 0, g3.k * 4);
        cudaDeviceSynchronize(); /* the legacy stream's memsets before st's replay */
        cudaGraphInstantiate(&ge, cg, 0);
        cudaGraphLaunch(ge, st);
        cudaStreamSynchronize(st);
        int ok = s == CUDNN_STATUS_SUCCESS && e == cudaSuccess && check_F(g3, 1, why);
        graph_case("captured execution, graph launched: the same y and sums", ok, why);
        cudaFree(small), cudaFree(big);
    }
    if (g_setfail)
        printf("graph: %d setup call(s) failed: WRONG\n", g_setfail);
    return 0;
}

int main(int argc, char **argv)
{
    const char *w = argc > 1 ? argv[1] : "ok";
    if (!strncmp(w, "nccl_", 5))
        return nccl_case(w);
    if (!strcmp(w, "capture"))
        return capture_cases();
    if (!strcmp(w, "graph"))
        return graph_cases();
    float *d = NULL, h[4] = {1, 2, 3, 4};
    cudaError_t e = cudaMalloc((void **)&d, sizeof h);
    printf("cudaMalloc: %s\n", cudaGetErrorName(e));
    if (!strcmp(w, "host_deref")) {
        printf("host reads device memory...\n");
        fflush(stdout);
        printf("%g\n", d[0]); /* faults with a report */
    } else if (!strcmp(w, "free_host")) {
        printf("cudaFree(host): %s\n", cudaGetErrorName(cudaFree(h)));
    } else if (!strcmp(w, "double_free")) {
        cudaFree(d);
        printf("second cudaFree: %s\n", cudaGetErrorName(cudaFree(d)));
    } else if (!strcmp(w, "kind")) {
        printf("H2D with swapped pointers: %s\n",
               cudaGetErrorName(cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice)));
    } else if (!strcmp(w, "range")) {
        printf("copy of 5 floats into 4: %s\n",
               cudaGetErrorName(cudaMemcpy(d, h, 5 * sizeof(float), cudaMemcpyHostToDevice)));
    } else if (!strcmp(w, "stream_after_destroy")) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaStreamDestroy(s);
        printf("sync of a destroyed stream: %s\n", cudaGetErrorName(cudaStreamSynchronize(s)));
    } else if (!strcmp(w, "event_never_recorded")) {
        cudaEvent_t ev;
        cudaStream_t s;
        cudaEventCreate(&ev);
        cudaStreamCreate(&s);
        printf("wait on a never-recorded event: %s\n", cudaGetErrorName(cudaStreamWaitEvent(s, ev, 0)));
    } else if (!strcmp(w, "lazy_pinned")) {
        /* D2H into pinned memory, read before the stream sync: in lazy mode
         * the host sees the old (poisoned) bytes */
        float *p;
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaHostAlloc((void **)&p, sizeof h, 0);
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        cudaMemcpyAsync(p, d, sizeof h, cudaMemcpyDeviceToHost, s);
        printf("pinned before sync: %g (lazy: NaN poison), ", p[0]);
        cudaStreamSynchronize(s);
        printf("after sync: %g\n", p[0]);
    } else {
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        float back[4];
        cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost);
        printf("round trip: %g %g %g %g\n", back[0], back[1], back[2], back[3]);
    }
    return 0;
}

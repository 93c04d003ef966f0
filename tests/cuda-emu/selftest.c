/* selftest.c - the emulator's misuse checks, one per argv[1]:
 *   host_deref  free_host  double_free  kind  range  stream_after_destroy
 *   event_never_recorded  lazy_pinned  ok
 *   capture (the driver's rules for stream capture: one line per case,
 *   "ok" when the emulator answered as a driver does)
 *   nccl_ok  nccl_mismatch  nccl_timeout  nccl_host_ptr  nccl_after_destroy
 *   nccl_dup_device  nccl_peer_exit
 * Each prints what the emulator reports (run.sh selftest runs them all).
 * The nccl cases fork two ranks (one emulated device each) that meet
 * through emu_nccl.cpp's shared memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

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

int main(int argc, char **argv)
{
    const char *w = argc > 1 ? argv[1] : "ok";
    if (!strncmp(w, "nccl_", 5))
        return nccl_case(w);
    if (!strcmp(w, "capture"))
        return capture_cases();
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

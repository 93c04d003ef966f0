/*
 * tests/collectives/test_nccl.c - the nccl backend (collectives/nccl.c) as
 * one rank on one GPU: all-reduce, broadcast, all-gather, barrier and the
 * asynchronous all-reduce on device buffers, compared with a host
 * reference (for one rank: the input itself, bit for bit, with sum and avg,
 * f32/f16/bf16, sizes that are not multiples of anything). Skipped without
 * a GPU ("no GPU"); a build without NCCL checks the SL_ENOTSUP stub.
 *
 * Not covered here: several ranks (NCCL refuses two ranks on one device, and
 * CUDA cannot be used in a child forked after the parent touched it); run
 * the trainer under mpirun or torchrun on a multi-GPU host for that.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "collectives/collectives.h"
#include "testutil.h"

#ifdef SLUICE_WITH_NCCL
#include <cuda_runtime_api.h>

static void need_gpu(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        cr_skip_test("no GPU");
    }
    /* one rank of one: neither mpirun's nor torchrun's world applies */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("WORLD_SIZE");
}

static sl_comm *open_one(void)
{
    sl_comm_config cfg = SL_COMM_CONFIG_INIT;
    cfg.timeout_ms = 60000;
    cfg.device = 0;
    sl_comm *c = NULL;
    int rc = sl_comm_nccl_create(&cfg, &c);
    cr_assert_eq(rc, SL_OK, "sl_comm_nccl_create: %s", sl_errmsg());
    cr_assert_eq(sl_comm_rank(c), 0);
    cr_assert_eq(sl_comm_world(c), 1);
    cr_assert_eq(sl_comm_backend_of(c), SL_COMM_NCCL);
    return c;
}

/* n elements of t with a pattern of (seed, i), as raw bits. */
static void *pattern(sl_dtype t, size_t n, uint64_t seed)
{
    size_t es = sl_dtype_size(t);
    unsigned char *h = malloc(n * es);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = tu_rand(&seed);
        if (t == SL_DTYPE_F32) {
            float f = (float)((int)(r % 2001) - 1000) / 64.0f;
            memcpy(h + i * 4, &f, 4);
        } else {
            /* a finite f16 / bf16: clear the top exponent bit */
            uint16_t b = (uint16_t)(r & 0xbfffu);
            memcpy(h + i * 2, &b, 2);
        }
    }
    return h;
}

static void *to_device(const void *h, size_t bytes)
{
    void *d = NULL;
    cr_assert_eq(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
    cr_assert_eq(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void expect_device(const void *d, const void *want, size_t bytes, const char *what)
{
    void *h = malloc(bytes);
    cr_assert_not_null(h);
    cr_assert_eq(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_arr_eq(h, want, bytes, "%s: device result differs from the host reference", what);
    free(h);
}

static const sl_dtype DTYPES[] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};
static const size_t SIZES[] = {1, 3, 1000, 65537, (1u << 20) + 5};

Test(collectives_nccl, allreduce_one_rank)
{
    need_gpu();
    sl_comm *c = open_one();
    for (size_t k = 0; k < 3; k++)
        for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++)
            for (int op = SL_RED_SUM; op <= SL_RED_AVG; op++) {
                sl_dtype t = DTYPES[k];
                size_t n = SIZES[s], bytes = n * sl_dtype_size(t);
                void *h = pattern(t, n, k * 100 + s), *d = to_device(h, bytes);
                cr_assert_eq(sl_comm_allreduce(c, d, n, t, (sl_redop)op), SL_OK, "%s",
                             sl_errmsg());
                char what[64];
                snprintf(what, sizeof what, "allreduce %s %s n=%zu", op ? "avg" : "sum",
                         sl_dtype_name(t), n);
                expect_device(d, h, bytes, what); /* one rank: x, and x * 1/1 */
                cudaFree(d);
                free(h);
            }
    sl_comm_destroy(c);
}

Test(collectives_nccl, broadcast_allgather_barrier)
{
    need_gpu();
    sl_comm *c = open_one();
    for (size_t k = 0; k < 3; k++) {
        sl_dtype t = DTYPES[k];
        size_t n = 4099, bytes = n * sl_dtype_size(t);
        void *h = pattern(t, n, 7 + k), *d = to_device(h, bytes);
        cr_assert_eq(sl_comm_broadcast(c, d, n, t, 0), SL_OK, "%s", sl_errmsg());
        expect_device(d, h, bytes, "broadcast");
        void *r = NULL;
        cr_assert_eq(cudaMalloc(&r, bytes), cudaSuccess);
        cr_assert_eq(sl_comm_allgather(c, d, r, n, t), SL_OK, "%s", sl_errmsg());
        expect_device(r, h, bytes, "allgather");
        cr_assert_eq(sl_comm_allgather(c, r, r, n, t), SL_OK, "%s", sl_errmsg()); /* in place */
        expect_device(r, h, bytes, "allgather in place");
        cudaFree(r);
        cudaFree(d);
        free(h);
    }
    cr_assert_eq(sl_comm_barrier(c), SL_OK, "%s", sl_errmsg());
    sl_comm_destroy(c);
}

Test(collectives_nccl, async_in_order)
{
    need_gpu();
    sl_comm *c = open_one();
    enum { N = 5 };
    void *h[N], *d[N];
    sl_comm_req *req[N];
    for (int k = 0; k < N; k++) {
        sl_dtype t = DTYPES[k % 3];
        size_t n = SIZES[k % 5];
        h[k] = pattern(t, n, 99 + k);
        d[k] = to_device(h[k], n * sl_dtype_size(t));
        cr_assert_eq(sl_comm_allreduce_start(c, d[k], n, t, SL_RED_SUM, &req[k]), SL_OK, "%s",
                     sl_errmsg());
    }
    float one = 1.0f;
    void *x = to_device(&one, 4);
    cr_assert_eq(sl_comm_allreduce(c, x, 1, SL_DTYPE_F32, SL_RED_AVG), SL_OK, "%s", sl_errmsg());
    expect_device(x, &one, 4, "blocking allreduce behind async ones");
    for (int k = 0; k < N; k++) {
        cr_assert_eq(sl_comm_wait(c, req[k]), SL_OK, "%s", sl_errmsg());
        expect_device(d[k], h[k], SIZES[k % 5] * sl_dtype_size(DTYPES[k % 3]), "async");
        cudaFree(d[k]);
        free(h[k]);
    }
    cudaFree(x);
    sl_comm_destroy(c);
}

/* Stream-ordered all-reduces (the trainer's CUDA-graph step): enqueued on
 * the comm's stream and fenced; then captured into a graph with the stream
 * (cudaStreamCaptureModeThreadLocal, as the trainer does) and the graph
 * launched twice, a blocking all-reduce after: every collective ran, in
 * order (the emulator numbers a captured one at each launch and checks the
 * order), and one rank's all-reduce leaves the data as it was. */
Test(collectives_nccl, stream_ordered_enqueue_fence_and_graph)
{
    need_gpu();
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    sl_comm_config cfg = SL_COMM_CONFIG_INIT;
    cfg.timeout_ms = 60000;
    cfg.device = 0;
    cfg.stream = s;
    sl_comm *c = NULL;
    cr_assert_eq(sl_comm_nccl_create(&cfg, &c), SL_OK, "%s", sl_errmsg());
    cr_assert(sl_comm_stream_ordered(c));
    size_t n = 65537;
    void *h = pattern(SL_DTYPE_F32, n, 7), *d = to_device(h, n * 4);
    cr_assert_eq(sl_comm_allreduce_enqueue(c, d, n, SL_DTYPE_F32, SL_RED_AVG), SL_OK, "%s",
                 sl_errmsg());
    sl_comm_req *f = NULL;
    cr_assert_eq(sl_comm_fence(c, &f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_comm_wait(c, f), SL_OK, "%s", sl_errmsg());
    expect_device(d, h, n * 4, "enqueued avg");
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cr_assert_eq(sl_comm_allreduce_enqueue(c, d, n, SL_DTYPE_F32, SL_RED_SUM), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(sl_comm_allreduce_enqueue(c, d, 3, SL_DTYPE_F32, SL_RED_AVG), SL_OK, "%s",
                 sl_errmsg());
    cudaGraph_t g = NULL;
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaGraphExec_t ge;
    cr_assert_eq(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    cudaGraphDestroy(g);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(cudaGraphLaunch(ge, s), cudaSuccess);
    cr_assert_eq(sl_comm_fence(c, &f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_comm_wait(c, f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_comm_allreduce(c, d, n, SL_DTYPE_F32, SL_RED_SUM), SL_OK, "%s", sl_errmsg());
    expect_device(d, h, n * 4, "after two replays");
    cudaGraphExecDestroy(ge);
    cudaFree(d);
    free(h);
    sl_comm_destroy(c);
    cudaStreamDestroy(s);
}

/* Host memory is refused with a message, not handed to a kernel. */
Test(collectives_nccl, host_buffer_refused)
{
    need_gpu();
    sl_comm *c = open_one();
    float host[8] = {0};
    int rc = sl_comm_allreduce(c, host, 8, SL_DTYPE_F32, SL_RED_SUM);
    cr_assert_eq(rc, SL_EINVAL, "%d %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "host memory") || strstr(sl_errmsg(), "not CUDA memory"), "%s",
              sl_errmsg());
    sl_comm_destroy(c);
}

/* An abort stops the communicator: later calls return SL_ECANCELED. */
Test(collectives_nccl, abort_then_canceled)
{
    need_gpu();
    sl_comm *c = open_one();
    sl_comm_abort(c, "test says stop");
    void *d = NULL;
    cr_assert_eq(cudaMalloc(&d, 16), cudaSuccess);
    int rc = sl_comm_allreduce(c, d, 4, SL_DTYPE_F32, SL_RED_SUM);
    cr_assert_eq(rc, SL_ECANCELED, "%d %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "test says stop"), "%s", sl_errmsg());
    cudaFree(d);
    sl_comm_destroy(c);
}

#else /* !SLUICE_WITH_NCCL */

Test(collectives_nccl, gpu_tests) { cr_skip_test("built without NCCL"); }

#endif

Test(collectives_nccl, not_built)
{
    if (sl_comm_backend_available(SL_COMM_NCCL))
        cr_skip_test("built with NCCL");
    sl_comm *c = (sl_comm *)1;
    int rc = sl_comm_nccl_create(NULL, &c);
    cr_assert_eq(rc, SL_ENOTSUP);
    cr_assert_null(c);
    cr_assert(strstr(sl_errmsg(), "built without NCCL"), "%s", sl_errmsg());
}

// train/ops/cuda_ctx.cu - the cuda backend's execution context (cuda_int.h's
// sl_cuda_ctx): device, stream, cuDNN and cuBLAS handles, math mode,
// workspace and scratch, and the status checks the op files share.
//
// DESIGN
//   One non-blocking stream per context: it never serializes with the
//   legacy default stream (the loader's copies, other replicas' work), and
//   both library handles are bound to it, so every op of one sl_exec runs
//   in issue order with no host sync.
//   Math mode (SLUICE_CUDA_TF32, read once here): on (the default), cuBLAS
//   runs CUBLAS_TF32_TENSOR_OP_MATH and conv_cuda.cu lets cuDNN pick TF32
//   tensor-core kernels; 0 gives CUBLAS_DEFAULT_MATH (fp32 FMA for SGEMM)
//   and CUDNN_FMA_MATH convolutions, the math the tests against the ref
//   backend need.
//   Memory: the workspace (cuDNN's algorithms, capped by SLUICE_CUDNN_WS_MB;
//   cuBLAS's too, SL_CUBLAS_WS_MB at least, so that it never allocates in a
//   captured CUDA graph) and the scratch grow to the largest request and stay: a few growths in
//   the first step, none after. Growing syncs the stream first, since
//   kernels in flight may still read the old buffer. Every allocation of
//   the context and of sl_mem_alloc goes through sl_cuda_malloc, which
//   keeps the bytes live and their peak (the trainer's --json reports it:
//   issue 14's budget is PyTorch's 11.0 GiB for ResNet-50 at batch 256).
//   Current device: the CUDA runtime's current device is per host thread;
//   create, destroy and the convolutions set it (cheap when it is current
//   already); every op of the backend must, for an sl_exec driven by a
//   thread other than its creator's on a device other than 0.
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"

// ------------------------------------------------------------------ checks
extern "C" int sl_cudnn_check(cudnnStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return SL_OK;
    // cuDNN 9 keeps a per-thread text with the reason (which descriptor,
    // which limit); it is often the useful half of the message.
    char why[256];
    why[0] = '\0';
    cudnnGetLastErrorString(why, sizeof why);
    return sl_fail(SL_ECUDA, "%s: %s:%d: %s%s%s", call, sl_cuda_short_file(file), line,
                   cudnnGetErrorString(s), why[0] ? ": " : "", why);
}

extern "C" int sl_cublas_check(cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return SL_OK;
    return sl_fail(SL_ECUDA, "%s: %s:%d: %s: %s", call, sl_cuda_short_file(file), line,
                   cublasGetStatusName(s), cublasGetStatusString(s));
}

extern "C" int sl_cuda_launch_check(const char *kernel, const char *file, int line)
{
    cudaError_t e = cudaGetLastError(); // also clears it
    if (e == cudaSuccess)
        return SL_OK;
    return sl_fail(SL_ECUDA, "%s: launch: %s:%d: %s: %s", kernel, sl_cuda_short_file(file), line,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

// ------------------------------------------------------------------ env
// A 0/1 switch from the environment: unset or empty gives dflt; anything
// but 0, 1 is refused (a typo must not silently pick the other math).
static int env_switch(const char *name, int dflt, int *out)
{
    const char *v = getenv(name);
    *out = dflt; // on every path: gcc -O3 (Release) warns otherwise
    if (!v || !*v)
        return SL_OK;
    if (strcmp(v, "0") && strcmp(v, "1"))
        return sl_fail(SL_EINVAL, "sl_cuda_ctx_create: %s=%s: want 0 or 1", name, v);
    *out = v[0] == '1';
    return SL_OK;
}

// A whole number of MiB from the environment (unset or empty: dflt).
static int env_mib(const char *name, size_t dflt, size_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = dflt << 20;
        return SL_OK;
    }
    char *end = NULL;
    unsigned long long mb = strtoull(v, &end, 10);
    if (*end || v[0] == '-' || mb > (1ull << 24))
        return sl_fail(SL_EINVAL, "sl_cuda_ctx_create: %s=%s: want a whole number of MiB", name,
                       v);
    *out = (size_t)mb << 20;
    return SL_OK;
}

// ------------------------------------------------------------------ context
extern "C" void sl_cuda_ctx_destroy(sl_cuda_ctx *c)
{
    if (!c)
        return;
    // Return codes are dropped on purpose, as in pipeline/load_cuda.cu:
    // destroy cannot report them, one failure must not stop the remaining
    // frees, and sl_errmsg keeps the message of a create failure that may
    // have led here.
    (void)cudaSetDevice(c->device);
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream); // no kernel may outlive its buffers
    for (int i = 0; i < c->nowned; i++)         // cuDNN descriptors and plans: before the handle
        c->owned[i].free_fn(c->owned[i].obj);
    if (c->cudnn)
        (void)cudnnDestroy(c->cudnn);
    if (c->cublas)
        (void)cublasDestroy(c->cublas);
    sl_cuda_free(c, c->d_ws);
    sl_cuda_free(c, c->d_tmp);
    sl_cuda_free(c, c->d_pad);
    free(c->blocks);
    if (c->h_pinned)
        (void)cudaFreeHost(c->h_pinned);
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

extern "C" int sl_cuda_ctx_create(int device, sl_cuda_ctx **out)
{
    *out = NULL;
    int tf32 = 1, find = 0, det = 1, fuse = 1, graph = 1, cfuse = 1, rc; // set below; for gcc -O3
    size_t ws_max = 0;
    if ((rc = env_switch("SLUICE_CUDA_TF32", 1, &tf32)) ||
        (rc = env_switch("SLUICE_CUDNN_FIND", 0, &find)) ||
        (rc = env_switch("SLUICE_CUDNN_DETERMINISTIC", 1, &det)) ||
        (rc = env_switch("SLUICE_CUDA_FUSE", 1, &fuse)) ||
        (rc = env_switch("SLUICE_CUDA_GRAPH", 1, &graph)) ||
        (rc = env_switch("SLUICE_CUDNN_FUSION", 1, &cfuse)) ||
        (rc = env_mib("SLUICE_CUDNN_WS_MB", SL_CUDNN_WS_MB_DEFAULT, &ws_max)))
        return rc;
    const char *sp = getenv("SLUICE_CUDA_STEM_PAD");
    int stem_pad = 0;
    if (sp && *sp) {
        if (strcmp(sp, "0") && strcmp(sp, "4") && strcmp(sp, "8"))
            return sl_fail(SL_EINVAL, "sl_cuda_ctx_create: SLUICE_CUDA_STEM_PAD=%s: want 0, 4 "
                           "or 8", sp);
        stem_pad = atoi(sp);
    }
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        // No driver at all reads "driver version is insufficient" from the
        // runtime: say what a user without a GPU needs to hear first.
        return sl_fail(SL_ECUDA, "sl_cuda_ctx_create: no CUDA device%s (cudaGetDeviceCount: %s)",
                       ce == cudaErrorInsufficientDriver ? ": no NVIDIA GPU or driver on this "
                                                           "machine" : "",
                       ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    }
    if (device < 0 || device >= count)
        return sl_fail(SL_ECUDA, "sl_cuda_ctx_create: device %d: this host has %d (0..%d)",
                       device, count, count - 1);

    sl_cuda_ctx *c = (sl_cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return sl_fail(SL_ENOMEM, "sl_cuda_ctx_create: out of memory");
    c->device = device;
    c->tf32 = tf32;
    c->sms = 132; // an H100 SXM's, if the query below fails
    c->fuse = fuse;
    c->graph = graph;
    c->cudnn_fusion = cfuse;
    c->ws_max = ws_max;
    c->stem_pad = stem_pad;
    c->find = find;
    c->det = det;
    // Each step names the call that failed; a failed create leaves the
    // handle NULL so that destroy frees only what exists.
    if ((rc = SL_CUDA(cudaSetDevice(device))))
        goto fail;
    if ((rc = SL_CUDA(cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, device))))
        goto fail;
    if (c->sms < 1)
        c->sms = 1;
    if ((rc = SL_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)))) {
        c->stream = NULL;
        goto fail;
    }
    if ((rc = SL_CUDNN(cudnnCreate(&c->cudnn)))) {
        c->cudnn = NULL;
        goto fail;
    }
    if ((rc = SL_CUDNN(cudnnSetStream(c->cudnn, c->stream))))
        goto fail;
    if ((rc = SL_CUBLAS(cublasCreate(&c->cublas)))) {
        c->cublas = NULL;
        goto fail;
    }
    if ((rc = SL_CUBLAS(cublasSetStream(c->cublas, c->stream))) ||
        (rc = SL_CUBLAS(cublasSetMathMode(c->cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                          : CUBLAS_DEFAULT_MATH))))
        goto fail;
    // cuBLAS shares the workspace (same stream, one call at a time): with a
    // workspace of its own it may allocate inside a CUDA graph capture.
    if (!sl_cuda_workspace(c, (size_t)SL_CUBLAS_WS_MB << 20)) {
        rc = SL_ECUDA;
        goto fail;
    }
    if ((rc = SL_CUDA(cudaHostAlloc(&c->h_pinned, SL_CUDA_PINNED_BYTES, cudaHostAllocDefault)))) {
        c->h_pinned = NULL;
        goto fail;
    }
    *out = c;
    return SL_OK;
fail:
    rc = sl_fail(rc, "sl_cuda_ctx_create: device %d: %s", device, sl_errmsg());
    sl_cuda_ctx_destroy(c);
    return rc;
}

extern "C" int sl_cuda_ctx_own(sl_cuda_ctx *c, void *obj, void (*free_fn)(void *obj))
{
    if (c->nowned == SL_CUDA_OWNED_MAX) {
        free_fn(obj);
        return sl_fail(SL_ENOMEM, "sl_cuda_ctx_own: device %d: already %d owned objects",
                       c->device, SL_CUDA_OWNED_MAX);
    }
    c->owned[c->nowned++] = sl_cuda_owned{obj, free_fn};
    return SL_OK;
}

extern "C" int sl_cuda_exec_ctx(const char *fn, sl_exec *e, sl_cuda_ctx **out)
{
    *out = e ? sl_cuda_of(e) : NULL;
    if (!*out)
        return sl_fail(SL_EINVAL, "%s: the exec has no cuda context", fn);
    int rc = SL_CUDA(cudaSetDevice((*out)->device));
    return rc ? sl_fail(rc, "%s: %s", fn, sl_errmsg()) : SL_OK;
}

// ------------------------------------------------------------------ memory
extern "C" int sl_cuda_malloc(sl_cuda_ctx *c, size_t bytes, void **out)
{
    *out = NULL;
    if (c->nblocks == c->cap_blocks) {
        int ncap = c->cap_blocks ? 2 * c->cap_blocks : 32;
        sl_cuda_block *nb =
            (sl_cuda_block *)realloc(c->blocks, (size_t)ncap * sizeof *nb);
        if (!nb)
            return sl_fail(SL_ENOMEM, "sl_cuda_malloc: a table of %d allocations", ncap);
        c->blocks = nb, c->cap_blocks = ncap;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        (void)cudaMemGetInfo(&fr, &tot);
        return sl_fail(SL_ENOMEM, "cudaMalloc of %.1f MiB on device %d failed (%.1f of %.1f GiB "
                       "free; this context holds %.1f MiB): lower --batch", bytes / 1048576.0,
                       c->device, fr / 1073741824.0, tot / 1073741824.0,
                       c->mem_live / 1048576.0);
    }
    c->blocks[c->nblocks++] = sl_cuda_block{p, bytes};
    c->mem_live += bytes;
    if (c->mem_live > c->mem_peak)
        c->mem_peak = c->mem_live;
    *out = p;
    return SL_OK;
}

extern "C" void sl_cuda_free(sl_cuda_ctx *c, void *p)
{
    if (!p)
        return;
    for (int i = 0; i < c->nblocks; i++)
        if (c->blocks[i].p == p) {
            c->mem_live -= c->blocks[i].bytes;
            c->blocks[i] = c->blocks[--c->nblocks];
            break;
        }
    (void)cudaFree(p);
}

// Grow *buf to at least bytes (rounded up to 1 MiB: a few growths, not one
// per size). The old buffer may still be read by queued kernels: sync the
// stream before freeing it. NULL with sl_fail on failure; *buf is then
// empty, so the next call tries again. A move bumps mem_gen.
static void *grow(sl_cuda_ctx *c, void **buf, size_t *cap, size_t bytes, const char *what)
{
    if (bytes <= *cap && *buf)
        return *buf;
    const size_t mib = (size_t)1 << 20;
    size_t want = bytes < mib ? mib : (bytes + mib - 1) / mib * mib;
    int rc;
    c->mem_gen++;
    if (*buf) {
        if ((rc = SL_CUDA(cudaStreamSynchronize(c->stream))))
            goto fail;
        sl_cuda_free(c, *buf);
        *buf = NULL;
        *cap = 0;
    }
    if ((rc = sl_cuda_malloc(c, want, buf)))
        goto fail;
    *cap = want;
    return *buf;
fail:
    sl_fail(rc, "sl_cuda_%s: device %d: %zu bytes: %s", what, c->device, bytes, sl_errmsg());
    return NULL;
}

extern "C" void *sl_cuda_workspace(sl_cuda_ctx *c, size_t bytes)
{
    void *old = c->d_ws;
    void *p = grow(c, &c->d_ws, &c->ws_cap, bytes, "workspace");
    if (p && p != old && c->cublas &&
        SL_CUBLAS(cublasSetWorkspace(c->cublas, c->d_ws, c->ws_cap)))
        return NULL;
    return p;
}

extern "C" void *sl_cuda_tmp(sl_cuda_ctx *c, size_t bytes)
{
    return grow(c, &c->d_tmp, &c->tmp_cap, bytes, "tmp");
}

extern "C" void *sl_cuda_pad(sl_cuda_ctx *c, size_t bytes)
{
    return grow(c, &c->d_pad, &c->pad_cap, bytes, "pad");
}

// train/ops/conv_cuda.cu - convolution forward, backward-data and
// backward-filter through cuDNN (the legacy cudnnConvolution* API), and
// the per-shape algorithm cache behind them (cuda_int.h).
//
// Layouts (ops.h): x (n, h, w, c) and y (n, p, q, k) are cuDNN NHWC
// tensors; the weight (k, r, s, c), our OHWI, is cuDNN's NHWC filter
// format (KRSC), so nothing is transposed. Cross-correlation (no kernel
// flip), as PyTorch's Conv2d and conv_ref.c. beta = 0 in every call but
// the accumulating backward-data (conv_bwd_data_acc: dx += ..., beta = 1,
// the model's residual-gradient add folded into cuDNN's epilogue): cuDNN
// then never reads the output, which is overwritten as the op table
// requires (a NaN left there does not leak in).
//
// Element type (ops.h's table): x, w, y, dy, dx are in e->act; dw is
// f32 always. The descriptors are of that type (CUDNN_DATA_FLOAT,
// _BFLOAT16, _HALF) with compute type CUDNN_DATA_FLOAT in the convolution
// descriptor: cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations (half or
// bf16 data, f32 accumulation; bf16 needs sm_80+), as PyTorch sets them
// (aten/src/ATen/cudnn/Descriptors.h). cuDNN's legacy API wants one type for
// x, dy and dw, so backward-filter in bf16 / f16 writes a dw of that type
// into the context's tmp buffer and sl_cast_cuda widens it into the f32 dw
// (exact; the rounding to 8 / 11 bits happened in cuDNN's store). Tensor-
// core kernels want 16-byte aligned buffers and c, k multiples of 8; other
// shapes run slower kernels, which the heuristic ranking picks.
//
// Algorithms. Chosen once per (shape, type, direction), on the first call,
// and kept in a hash map keyed by the whole sl_conv_shape and the element
// type (a last batch of another size is another shape, a bf16 convolution
// another entry than its f32 one); the descriptors live in the same entry.
//   - Candidates: cuDNN's heuristic ranking (cudnnGet*Algorithm_v7), or
//     with SLUICE_CUDNN_FIND=1 the measured ranking of cudnnFind*Ex, run
//     on the caller's buffers (it writes the output, which the real call
//     then overwrites) with a workspace as large as the biggest candidate.
//     An accumulating backward-data call searches with its tmp buffer as
//     the output (the search must not overwrite dx), or, given none, takes
//     the heuristic ranking for that shape.
//   - Preference: the first deterministic candidate in rank order, then
//     any. Backward-filter and backward-data have non-deterministic
//     algorithms (atomics); a deterministic one makes runs reproduce. The
//     heuristic ranking also makes the same choice on every run, which
//     timing cannot promise; hence it is the default.
//     SLUICE_CUDNN_DETERMINISTIC=0 drops the preference (rank order only),
//     as PyTorch's default; with SLUICE_CUDNN_FIND=1 that is the fastest
//     algorithm measured, what cudnn.benchmark = True picks.
//   - Math, f32 data: with tf32 (cuda_int.h) the descriptor allows
//     CUDNN_TENSOR_OP_MATH (TF32 tensor cores for fp32 data) and each
//     algorithm runs with the math type cuDNN ranked it with. Not
//     CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: that also lets cuDNN convert
//     fp32 data to fp16 (fp16's range, not just TF32's mantissa). Without
//     tf32 every algorithm runs CUDNN_FMA_MATH, plain fp32 FMA
//     (CUDNN_DEFAULT_MATH would still allow TF32 on A100+).
//   - Math, bf16 / f16 data: CUDNN_TENSOR_OP_MATH whatever tf32 says (the
//     data has its 8 / 11 bits already; TF32 is about f32 data), and each
//     algorithm runs with the math type it was ranked with, ALLOW_CONVERSION
//     included: there is no f32 data to down-convert.
//   - Workspace: an algorithm needing more than ws_limit() is passed over:
//     the context's cap (SLUICE_CUDNN_WS_MB, default 256 MiB: part of the
//     memory plan, train/device/dev_plan.c) or half of what the device has free;
//     the chosen one's bytes come from sl_cuda_workspace (grown, shared by
//     every conv of the context: they run one at a time on its stream).
//
// The stem on tensor cores (SLUICE_CUDA_STEM_PAD=4 or 8, off by default:
// only a measurement can say whether it pays). A bf16 / f16 convolution of
// fewer input channels (ResNet's stem: 3) runs as one of that many, the
// input and the weights copied with zero channels appended (pad_kernel)
// into ctx->d_pad, so cuDNN can take its tensor-core kernels, which want c
// a multiple of 4 or 8 (the stem then costs about what a 64-channel layer
// does, not the scalar-ish kernels of c = 3). The zeros add nothing to any
// output; the weight gradient of the padded channels is computed and
// dropped (slice_kernel keeps the first c), and so is the data gradient's.
// The padded input is made again for backward-filter rather than kept (a
// pass over n*h*w*P elements, not P*2 bytes per pixel held all step).
//
// Threading: the cache belongs to its context (one thread at a time).
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"

enum { NDIR = 3, MAX_CANDS = 16 };
static_assert((int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= (int)MAX_CANDS &&
                  (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= (int)MAX_CANDS &&
                  (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= (int)MAX_CANDS,
              "MAX_CANDS holds every algorithm of a direction");
static const char *const dir_name[NDIR] = {"fwd", "bwd_data", "bwd_filter"};

typedef struct conv_entry {
    sl_conv_shape key;
    sl_dtype act;                     // element type of x, w, y (the key's second half)
    cudnnTensorDescriptor_t xd;       // x / dx: (n, h, w, c) NHWC
    cudnnTensorDescriptor_t yd;       // y / dy: (n, p, q, k) NHWC
    cudnnFilterDescriptor_t wd;       // w / dw: (k, r, s, c) KRSC
    cudnnConvolutionDescriptor_t cd;  // pad, stride, cross-correlation, fp32 compute
    int chosen[NDIR];
    sl_conv_algo_info info[NDIR];
} conv_entry;

struct sl_conv_algo_cache {
    int find;            // cudnnFind*Ex instead of the heuristic ranking
    int det;             // deterministic candidates first (else rank order only)
    conv_entry **slots;  // open addressing, cap a power of two; NULL = empty
    int cap, count;
    long searches;
};

// A ranked candidate, the same for the three directions' perf structs.
typedef struct cand {
    int algo;
    size_t memory;
    int det;
    cudnnMathType_t math;
} cand;

// The operands of one call: fwd (x, w -> y), bwd_data (w, dy -> dx),
// bwd_filter (x, dy -> dw), in cuDNN's argument order.
typedef struct conv_args {
    const void *a, *b;
    void *out;
} conv_args;

// "n2 7x5x3 -> k5 3x3/2 pad 1" (and " bf16" unless f32): the object every
// message names.
static const char *shape_text(const sl_conv_shape *sh, sl_dtype act, char *buf, size_t len)
{
    snprintf(buf, len, "n%d %dx%dx%d -> k%d %dx%d/%d pad %d%s%s", sh->n, sh->h, sh->w, sh->c,
             sh->k, sh->r, sh->s, sh->stride, sh->pad, act == SL_DTYPE_F32 ? "" : " ",
             act == SL_DTYPE_F32 ? "" : sl_dtype_name(act));
    return buf;
}

// The cuDNN data type of an activation type.
static cudnnDataType_t cudnn_type(sl_dtype act)
{
    return act == SL_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
           : act == SL_DTYPE_F16 ? CUDNN_DATA_HALF
                                 : CUDNN_DATA_FLOAT;
}

// ------------------------------------------------------------------ cache
// The key's fields: the shape's eleven and the element type.
enum { NKEY = 12 };
static void key_fields(const sl_conv_shape *sh, sl_dtype act, int v[NKEY])
{
    v[0] = sh->n, v[1] = sh->h, v[2] = sh->w, v[3] = sh->c, v[4] = sh->k, v[5] = sh->r;
    v[6] = sh->s, v[7] = sh->stride, v[8] = sh->pad, v[9] = sh->p, v[10] = sh->q;
    v[11] = (int)act;
}

static int key_eq(const conv_entry *e, const sl_conv_shape *sh, sl_dtype act)
{
    int va[NKEY], vb[NKEY];
    key_fields(&e->key, e->act, va);
    key_fields(sh, act, vb);
    return memcmp(va, vb, sizeof va) == 0;
}

// FNV-1a over the fields, then a final mix so the low bits (the slot)
// depend on every field.
static uint64_t key_hash(const sl_conv_shape *sh, sl_dtype act)
{
    int v[NKEY];
    key_fields(sh, act, v);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < NKEY; i++) {
        h ^= (uint32_t)v[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 31);
}

// The slot holding (sh, act), or the empty slot where it would go.
static int slot_of(const sl_conv_algo_cache *c, const sl_conv_shape *sh, sl_dtype act)
{
    int mask = c->cap - 1, i = (int)(key_hash(sh, act) & (uint64_t)mask);
    while (c->slots[i] && !key_eq(c->slots[i], sh, act))
        i = (i + 1) & mask;
    return i;
}

static conv_entry *cache_get(const sl_conv_algo_cache *c, const sl_conv_shape *sh, sl_dtype act)
{
    return c && c->cap ? c->slots[slot_of(c, sh, act)] : NULL;
}

static void entry_free(conv_entry *e)
{
    if (!e)
        return;
    if (e->xd)
        (void)cudnnDestroyTensorDescriptor(e->xd);
    if (e->yd)
        (void)cudnnDestroyTensorDescriptor(e->yd);
    if (e->wd)
        (void)cudnnDestroyFilterDescriptor(e->wd);
    if (e->cd)
        (void)cudnnDestroyConvolutionDescriptor(e->cd);
    free(e);
}

// Insert e (not present yet), doubling the table past half full.
static int cache_put(sl_conv_algo_cache *c, conv_entry *e)
{
    if (2 * (c->count + 1) > c->cap) {
        int ncap = c->cap ? 2 * c->cap : 16;
        conv_entry **nslots = (conv_entry **)calloc((size_t)ncap, sizeof *nslots);
        if (!nslots)
            return sl_fail(SL_ENOMEM, "conv algorithm cache: %d slots: out of memory", ncap);
        conv_entry **old = c->slots;
        int ocap = c->cap;
        c->slots = nslots;
        c->cap = ncap;
        for (int i = 0; i < ocap; i++)
            if (old[i])
                c->slots[slot_of(c, &old[i]->key, old[i]->act)] = old[i];
        free(old);
    }
    c->slots[slot_of(c, &e->key, e->act)] = e;
    c->count++;
    return SL_OK;
}

static void cache_free(void *obj)
{
    sl_conv_algo_cache *c = (sl_conv_algo_cache *)obj;
    if (!c)
        return;
    for (int i = 0; i < c->cap; i++)
        entry_free(c->slots[i]);
    free(c->slots);
    free(c);
}

// The context frees it (sl_cuda_ctx_own): it never calls this file.
extern "C" int sl_conv_algo_cache_attach(sl_cuda_ctx *cx)
{
    sl_conv_algo_cache *c = (sl_conv_algo_cache *)calloc(1, sizeof *c);
    if (!c)
        return sl_fail(SL_ENOMEM, "sl_conv_algo_cache_attach: out of memory");
    c->find = cx->find;
    c->det = cx->det;
    int rc = sl_cuda_ctx_own(cx, c, cache_free); // frees c when it fails
    if (!rc)
        cx->algos = c;
    return rc;
}

extern "C" void sl_conv_algo_stats(const sl_cuda_ctx *c, int *shapes, long *searches)
{
    *shapes = c->algos ? c->algos->count : 0;
    *searches = c->algos ? c->algos->searches : 0;
}

extern "C" int sl_conv_algo_lookup(const sl_cuda_ctx *c, const sl_conv_shape *sh, sl_dtype act,
                                   sl_conv_dir dir, sl_conv_algo_info *out)
{
    const conv_entry *e = cache_get(c->algos, sh, act);
    char s[112];
    if ((unsigned)dir >= NDIR)
        return sl_fail(SL_EINVAL, "sl_conv_algo_lookup: direction %d", (int)dir);
    if (!e || !e->chosen[dir])
        return sl_fail(SL_ENOENT, "sl_conv_algo_lookup: %s: %s: not run yet",
                       shape_text(sh, act, s, sizeof s), dir_name[dir]);
    *out = e->info[dir];
    return SL_OK;
}

// ------------------------------------------------------------------ descriptors
// The entry for (sh, act) with its four descriptors; cuDNN's output size
// must be ours (p, q), or the two disagree about the geometry.
static int entry_new(const sl_conv_shape *sh, sl_dtype act, conv_entry **out)
{
    *out = NULL;
    conv_entry *e = (conv_entry *)calloc(1, sizeof *e);
    if (!e)
        return sl_fail(SL_ENOMEM, "conv algorithm cache: out of memory");
    e->key = *sh;
    e->act = act;
    cudnnDataType_t dt = cudnn_type(act);
    int rc, n, k, p, q;
    // A failed create leaves its descriptor NULL so entry_free skips it.
    if ((rc = SL_CUDNN(cudnnCreateTensorDescriptor(&e->xd)))) {
        e->xd = NULL;
        goto fail;
    }
    if ((rc = SL_CUDNN(cudnnCreateTensorDescriptor(&e->yd)))) {
        e->yd = NULL;
        goto fail;
    }
    if ((rc = SL_CUDNN(cudnnCreateFilterDescriptor(&e->wd)))) {
        e->wd = NULL;
        goto fail;
    }
    if ((rc = SL_CUDNN(cudnnCreateConvolutionDescriptor(&e->cd)))) {
        e->cd = NULL;
        goto fail;
    }
    // Dimensions are given as (n, c, h, w) whatever the format; the
    // convolution computes in float for every data type (file comment).
    if ((rc = SL_CUDNN(cudnnSetTensor4dDescriptor(e->xd, CUDNN_TENSOR_NHWC, dt, sh->n, sh->c,
                                                  sh->h, sh->w))) ||
        (rc = SL_CUDNN(cudnnSetTensor4dDescriptor(e->yd, CUDNN_TENSOR_NHWC, dt, sh->n, sh->k,
                                                  sh->p, sh->q))) ||
        (rc = SL_CUDNN(cudnnSetFilter4dDescriptor(e->wd, dt, CUDNN_TENSOR_NHWC, sh->k, sh->c,
                                                  sh->r, sh->s))) ||
        (rc = SL_CUDNN(cudnnSetConvolution2dDescriptor(e->cd, sh->pad, sh->pad, sh->stride,
                                                       sh->stride, 1, 1,
                                                       CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT))) ||
        (rc = SL_CUDNN(cudnnGetConvolution2dForwardOutputDim(e->cd, e->xd, e->wd, &n, &k, &p,
                                                             &q))))
        goto fail;
    if (n != sh->n || k != sh->k || p != sh->p || q != sh->q) {
        rc = sl_fail(SL_EINVAL, "cuDNN's output is n%d k%d %dx%d, the shape says n%d k%d %dx%d",
                     n, k, p, q, sh->n, sh->k, sh->p, sh->q);
        goto fail;
    }
    *out = e;
    return SL_OK;
fail:
    entry_free(e);
    return rc;
}

// ------------------------------------------------------------------ search
// Largest workspace a convolution may take: the context's cap, or half of
// what the device could give it (free memory plus the workspace already
// held).
static int ws_limit(sl_cuda_ctx *c, size_t *limit)
{
    size_t free_b = 0, total_b = 0;
    int rc = SL_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (rc)
        return rc;
    size_t avail = (free_b + c->ws_cap) / 2;
    *limit = avail < c->ws_max ? avail : c->ws_max;
    return SL_OK;
}

// Copy the successful rows of a perf array (any of the three structs: the
// fields have the same names) into cands, keeping cuDNN's rank order.
template <typename Perf>
static int take(const Perf *perf, int returned, cand *cands)
{
    int n = 0;
    for (int i = 0; i < returned && n < MAX_CANDS; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS)
            cands[n++] = cand{(int)perf[i].algo, perf[i].memory,
                              perf[i].determinism == CUDNN_DETERMINISTIC, perf[i].mathType};
    return n;
}

// cuDNN's heuristic ranking for dir.
static int rank_heuristic(sl_cuda_ctx *c, conv_entry *e, sl_conv_dir dir, cand *cands, int *n)
{
    int got = 0, rc = SL_OK;
    switch (dir) {
    case SL_CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_CANDS];
        rc = SL_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(c->cudnn, e->xd, e->wd, e->cd,
                                                             e->yd, MAX_CANDS, &got, perf));
        *n = rc ? 0 : take(perf, got, cands);
        break;
    }
    case SL_CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_CANDS];
        rc = SL_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->cudnn, e->wd, e->yd, e->cd,
                                                                  e->xd, MAX_CANDS, &got, perf));
        *n = rc ? 0 : take(perf, got, cands);
        break;
    }
    case SL_CONV_BWD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_CANDS];
        rc = SL_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            c->cudnn, e->xd, e->yd, e->cd, e->wd, MAX_CANDS, &got, perf));
        *n = rc ? 0 : take(perf, got, cands);
        break;
    }
    }
    return rc;
}

// cuDNN's measured ranking for dir: every algorithm that fits in ws_bytes
// is run on the caller's buffers (blocking the host until done).
static int rank_measured(sl_cuda_ctx *c, conv_entry *e, sl_conv_dir dir, const conv_args *a,
                         size_t ws_bytes, cand *cands, int *n)
{
    void *ws = NULL;
    if (ws_bytes && !(ws = sl_cuda_workspace(c, ws_bytes)))
        return SL_ECUDA;
    int got = 0, rc = SL_OK;
    switch (dir) {
    case SL_CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_CANDS];
        rc = SL_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
            c->cudnn, e->xd, a->a, e->wd, a->b, e->cd, e->yd, a->out, MAX_CANDS, &got, perf, ws,
            ws_bytes));
        *n = rc ? 0 : take(perf, got, cands);
        break;
    }
    case SL_CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_CANDS];
        rc = SL_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
            c->cudnn, e->wd, a->a, e->yd, a->b, e->cd, e->xd, a->out, MAX_CANDS, &got, perf, ws,
            ws_bytes));
        *n = rc ? 0 : take(perf, got, cands);
        break;
    }
    case SL_CONV_BWD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_CANDS];
        rc = SL_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            c->cudnn, e->xd, a->a, e->yd, a->b, e->cd, e->wd, a->out, MAX_CANDS, &got, perf, ws,
            ws_bytes));
        *n = rc ? 0 : take(perf, got, cands);
        break;
    }
    }
    return rc;
}

// Workspace bytes of algo under the descriptor's current math type.
static cudnnStatus_t ws_size(sl_cuda_ctx *c, conv_entry *e, sl_conv_dir dir, int algo,
                             size_t *bytes)
{
    switch (dir) {
    case SL_CONV_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, e->xd, e->wd, e->cd, e->yd,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case SL_CONV_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            c->cudnn, e->wd, e->yd, e->cd, e->xd, (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    case SL_CONV_BWD_FILTER:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            c->cudnn, e->xd, e->yd, e->cd, e->wd, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
    return CUDNN_STATUS_BAD_PARAM;
}

// Rank the candidates for (e, dir) and keep the first that is deterministic
// (else the first at all), runs with the context's math and fits the
// workspace limit. a->out NULL: no buffer to measure on (heuristic only).
static int search(sl_cuda_ctx *c, conv_entry *e, sl_conv_dir dir, const conv_args *a)
{
    int lowp = e->act != SL_DTYPE_F32; // bf16 / f16: tensor cores whatever tf32 says
    cudnnMathType_t want = lowp || c->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    cand cands[MAX_CANDS];
    int n = 0, rc;
    size_t limit;
    c->algos->searches++;
    if ((rc = ws_limit(c, &limit)) || (rc = SL_CUDNN(cudnnSetConvolutionMathType(e->cd, want))) ||
        (rc = rank_heuristic(c, e, dir, cands, &n)))
        return rc;
    if (c->algos->find && n > 0 && a->out) {
        size_t need = 0; // room for the biggest candidate that may be chosen at all
        for (int i = 0; i < n; i++)
            if (cands[i].memory <= limit && cands[i].memory > need)
                need = cands[i].memory;
        if ((rc = rank_measured(c, e, dir, a, need, cands, &n)))
            return rc;
    }
    for (int pass = c->algos->det ? 0 : 1; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const cand *k = &cands[i];
            if (pass == 0 && !k->det)
                continue;
            // f32 data: without tf32 every candidate runs as plain FMA;
            // with it, as ranked (never the fp16-converting mode, see the
            // top). bf16 / f16 data: as ranked.
            cudnnMathType_t math = lowp || c->tf32 ? k->math : CUDNN_FMA_MATH;
            if (!lowp && math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
                continue;
            size_t bytes = 0;
            if (cudnnSetConvolutionMathType(e->cd, math) != CUDNN_STATUS_SUCCESS ||
                ws_size(c, e, dir, k->algo, &bytes) != CUDNN_STATUS_SUCCESS)
                continue; // this algorithm does not run this way: try the next
            if (k->memory > bytes)
                bytes = k->memory;
            if (bytes > limit)
                continue;
            e->info[dir] = sl_conv_algo_info{k->algo, math, k->det, bytes};
            e->chosen[dir] = 1;
            return SL_OK;
        }
    return sl_fail(SL_ECUDA, "no cuDNN algorithm runs it (%d ranked, %s math, workspace limit "
                             "%zu bytes)", n, lowp ? "tensor-op" : c->tf32 ? "tf32" : "fp32",
                   limit);
}

// The entry for (sh, act) with an algorithm for dir, searching on first use.
static int plan(sl_cuda_ctx *c, const sl_conv_shape *sh, sl_dtype act, sl_conv_dir dir,
                const conv_args *a, conv_entry **out)
{
    conv_entry *e = cache_get(c->algos, sh, act);
    int rc;
    if (!e) {
        if ((rc = entry_new(sh, act, &e)))
            return rc;
        if ((rc = cache_put(c->algos, e))) {
            entry_free(e);
            return rc;
        }
    }
    if (!e->chosen[dir] && (rc = search(c, e, dir, a)))
        return rc; // nothing cached: the next call searches (and reports) again
    *out = e;
    return SL_OK;
}

// ------------------------------------------------------------------ ops
// alpha and beta are floats for every data type here (cuDNN takes float
// scaling factors for HALF, BFLOAT16 and FLOAT data, double for DOUBLE). A
// bf16 / f16 backward-filter runs cuDNN into the context's tmp buffer (nw
// elements of the type; a.out points there, dw keeps the caller's f32
// array) and then widens that into dw with sl_cast_cuda, on the same
// stream. beta: 0 (overwrite) or 1 (accumulate: backward-data only);
// search_out: where an algorithm search of this call may write its output
// (a.out for beta 0; the caller's scratch or NULL for beta 1).
static int conv_run(sl_exec *ex, const sl_conv_shape *sh, sl_conv_dir dir, conv_args a,
                    float beta, void *search_out)
{
    sl_cuda_ctx *c = sl_cuda_of(ex);
    sl_dtype act = ex->act;
    conv_entry *e = NULL;
    void *ws = NULL, *dw = NULL;
    const float one = 1.0f;
    int64_t nw = (int64_t)sh->k * sh->r * sh->s * sh->c;
    int rc;
    if ((int)act < 0 || act > SL_DTYPE_LAST) {
        rc = sl_fail(SL_EINVAL, "activation type %d is none of f32, bf16, f16", (int)act);
        act = SL_DTYPE_F32; // for the message
        goto fail;
    }
    if ((rc = SL_CUDA(cudaSetDevice(c->device))))
        goto fail;
    if (dir == SL_CONV_BWD_FILTER && act != SL_DTYPE_F32) {
        dw = a.out;
        if (!(a.out = sl_cuda_tmp(c, (size_t)nw * 2))) {
            rc = SL_ECUDA;
            goto fail;
        }
        search_out = a.out;
    }
    {
        conv_args sa = a;
        sa.out = search_out;
        if ((rc = plan(c, sh, act, dir, &sa, &e)))
            goto fail;
    }
    {
        const sl_conv_algo_info *in = &e->info[dir];
        if (in->ws_bytes && !(ws = sl_cuda_workspace(c, in->ws_bytes))) {
            rc = SL_ECUDA;
            goto fail;
        }
        // The descriptor is shared by the three directions: set this one's math.
        if ((rc = SL_CUDNN(cudnnSetConvolutionMathType(e->cd, in->math))))
            goto fail;
        switch (dir) {
        case SL_CONV_FWD:
            rc = SL_CUDNN(cudnnConvolutionForward(c->cudnn, &one, e->xd, a.a, e->wd, a.b, e->cd,
                                                  (cudnnConvolutionFwdAlgo_t)in->algo, ws,
                                                  in->ws_bytes, &beta, e->yd, a.out));
            break;
        case SL_CONV_BWD_DATA:
            rc = SL_CUDNN(cudnnConvolutionBackwardData(
                c->cudnn, &one, e->wd, a.a, e->yd, a.b, e->cd,
                (cudnnConvolutionBwdDataAlgo_t)in->algo, ws, in->ws_bytes, &beta, e->xd, a.out));
            break;
        case SL_CONV_BWD_FILTER:
            rc = SL_CUDNN(cudnnConvolutionBackwardFilter(
                c->cudnn, &one, e->xd, a.a, e->yd, a.b, e->cd,
                (cudnnConvolutionBwdFilterAlgo_t)in->algo, ws, in->ws_bytes, &beta, e->wd,
                a.out));
            break;
        }
        if (rc)
            goto fail;
    }
    if (dw && (rc = sl_cast_cuda(ex, nw, a.out, act, dw, SL_DTYPE_F32)))
        goto fail;
    return SL_OK;
fail:
    char s[112];
    return sl_fail(rc, "sl_conv_%s_cuda: %s: %s", dir_name[dir],
                   shape_text(sh, act, s, sizeof s), sl_errmsg());
}

// ------------------------------------------------------------ padded stem
// dst (rows, P) = src (rows, c) with P - c zero channels appended.
template <typename T>
__global__ void pad_kernel(int64_t rows, int c, int P, const T *__restrict__ src,
                           T *__restrict__ dst)
{
    int64_t n = rows * P;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / P;
        int j = (int)(i - r * P);
        if (j < c)
            dst[i] = src[r * c + j];
        else
            sl_st(dst + i, 0.0f);
    }
}

// dst (rows, c) = (acc ? dst + : ) the first c channels of src (rows, P),
// the sum in f32 rounded to T once.
template <typename T>
__global__ void slice_kernel(int64_t rows, int c, int P, const T *__restrict__ src,
                             T *__restrict__ dst, int acc)
{
    int64_t n = rows * c;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / c;
        int j = (int)(i - r * c);
        float v = sl_ld(src + r * P + j);
        sl_st(dst + i, acc ? v + sl_ld(dst + i) : v);
    }
}

static unsigned pad_blocks(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

// The convolution on P-channel copies (the file's top comment): the caller
// checked that c < P and the type is bf16 / f16.
static int conv_padded(sl_exec *ex, const sl_conv_shape *sh, sl_conv_dir dir, conv_args a,
                       float beta)
{
    sl_cuda_ctx *c = sl_cuda_of(ex);
    int P = c->stem_pad;
    sl_conv_shape ps = *sh;
    ps.c = P;
    int64_t px = (int64_t)sh->n * sh->h * sh->w, pw = (int64_t)sh->k * sh->r * sh->s;
    int cin = sh->c; // (no "->" in a launch's <<< >>>: tests/cuda-emu/conv.py splits at '>')
    size_t xb = (size_t)px * P * 2, wb = ((size_t)pw * P * 2 + 255) & ~(size_t)255;
    size_t db = dir == SL_CONV_BWD_FILTER ? (size_t)pw * P * sizeof(float) : 0;
    char *buf = (char *)sl_cuda_pad(c, wb + xb + db);
    if (!buf)
        return SL_ECUDA;
    void *wp = buf, *xp = buf + wb, *dwp = buf + wb + xb;
    cudaStream_t s = c->stream;
    return sl_act_switch("conv_padded", ex->act, [&](auto t) -> int {
        using T = decltype(t);
        int rc;
        switch (dir) {
        case SL_CONV_FWD:
            pad_kernel<T><<<pad_blocks(px * P), 256, 0, s>>>(px, cin, P, (const T *)a.a, (T *)xp);
            if ((rc = SL_LAUNCHED("pad_kernel")))
                return rc;
            pad_kernel<T><<<pad_blocks(pw * P), 256, 0, s>>>(pw, cin, P, (const T *)a.b, (T *)wp);
            if ((rc = SL_LAUNCHED("pad_kernel")))
                return rc;
            return conv_run(ex, &ps, dir, conv_args{xp, wp, a.out}, 0.0f, a.out);
        case SL_CONV_BWD_FILTER:
            pad_kernel<T><<<pad_blocks(px * P), 256, 0, s>>>(px, cin, P, (const T *)a.a, (T *)xp);
            if ((rc = SL_LAUNCHED("pad_kernel")) ||
                (rc = conv_run(ex, &ps, dir, conv_args{xp, a.b, dwp}, 0.0f, dwp)))
                return rc;
            slice_kernel<float><<<pad_blocks(pw * cin), 256, 0, s>>>(
                pw, cin, P, (const float *)dwp, (float *)a.out, 0);
            return SL_LAUNCHED("slice_kernel<f32>");
        case SL_CONV_BWD_DATA:
            pad_kernel<T><<<pad_blocks(pw * P), 256, 0, s>>>(pw, cin, P, (const T *)a.a, (T *)wp);
            if ((rc = SL_LAUNCHED("pad_kernel")) ||
                (rc = conv_run(ex, &ps, dir, conv_args{wp, a.b, xp}, 0.0f, xp)))
                return rc;
            slice_kernel<T><<<pad_blocks(px * cin), 256, 0, s>>>(px, cin, P, (const T *)xp,
                                                                  (T *)a.out, beta != 0.0f);
            return SL_LAUNCHED("slice_kernel");
        }
        return sl_fail(SL_EINVAL, "conv_padded: direction %d", (int)dir);
    });
}

// The padded path for this call (the file's top comment).
static bool padded(const sl_exec *ex, const sl_conv_shape *sh)
{
    const sl_cuda_ctx *c = sl_cuda_of((sl_exec *)ex);
    return c && c->stem_pad && sh->c < c->stem_pad &&
           (ex->act == SL_DTYPE_BF16 || ex->act == SL_DTYPE_F16);
}

// x (n,h,w,c), w (k,r,s,c) -> y (n,p,q,k); device pointers.
extern "C" int sl_conv_fwd_cuda(sl_exec *e, const sl_conv_shape *sh, const float *d_x,
                                const float *d_w, float *d_y)
{
    if (padded(e, sh))
        return conv_padded(e, sh, SL_CONV_FWD, conv_args{d_x, d_w, d_y}, 0.0f);
    return conv_run(e, sh, SL_CONV_FWD, conv_args{d_x, d_w, d_y}, 0.0f, d_y);
}

// dy (n,p,q,k), w (k,r,s,c) -> dx (n,h,w,c).
extern "C" int sl_conv_bwd_data_cuda(sl_exec *e, const sl_conv_shape *sh, const float *d_dy,
                                     const float *d_w, float *d_dx)
{
    if (padded(e, sh))
        return conv_padded(e, sh, SL_CONV_BWD_DATA, conv_args{d_w, d_dy, d_dx}, 0.0f);
    return conv_run(e, sh, SL_CONV_BWD_DATA, conv_args{d_w, d_dy, d_dx}, 0.0f, d_dx);
}

// dx += the same (beta = 1); d_tmp (dx's size, may be NULL) takes the
// output of a measured algorithm search.
extern "C" int sl_conv_bwd_data_acc_cuda(sl_exec *e, const sl_conv_shape *sh, const float *d_dy,
                                         const float *d_w, float *d_dx, float *d_tmp)
{
    if (padded(e, sh))
        return conv_padded(e, sh, SL_CONV_BWD_DATA, conv_args{d_w, d_dy, d_dx}, 1.0f);
    return conv_run(e, sh, SL_CONV_BWD_DATA, conv_args{d_w, d_dy, d_dx}, 1.0f, d_tmp);
}

// x (n,h,w,c), dy (n,p,q,k) -> dw (k,r,s,c) = sum over n, p, q of dy x patch;
// dw is f32 whatever e->act.
extern "C" int sl_conv_bwd_filter_cuda(sl_exec *e, const sl_conv_shape *sh, const float *d_x,
                                       const float *d_dy, float *d_dw)
{
    if (padded(e, sh))
        return conv_padded(e, sh, SL_CONV_BWD_FILTER, conv_args{d_x, d_dy, d_dw}, 0.0f);
    return conv_run(e, sh, SL_CONV_BWD_FILTER, conv_args{d_x, d_dy, d_dw}, 0.0f, d_dw);
}

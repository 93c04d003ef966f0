/*
 * train/ops/ops.c - the backend tables, execution contexts and op geometry.
 *
 * The only file in train/ that knows which backends a build has. With
 * SLUICE_TRAIN_CUDA (CUDA and cuDNN found, CMakeLists.txt) the cuda table is
 * the *_cuda.cu functions and sl_exec_init makes their context
 * (cuda_int.h): device 0, or SLUICE_CUDA_DEVICE. Without it the cuda slots
 * return SL_ENOTSUP and sl_exec_init refuses SL_BACKEND_CUDA. The fused
 * slots (bn_fwd_train_act, bn_bwd_act, conv_bwd_data_acc) are in the cuda
 * table only; SLUICE_CUDA_FUSE=0, read by sl_cuda_ctx_create, gives a cuda
 * exec the same table without them (the model then runs the unfused ops).
 *
 * Threading (cpu backend). sl_exec.threads is the thread count of every
 * pass: oneDNN's convolutions (conv_dnnl.c, on the calling thread's OpenMP
 * team), the memory-bound passes (BN, ReLU, add, max pool: sl_par_for,
 * cpu_int.h, the same team) and OpenBLAS's SGEMMs (the FC layer, and the
 * convolutions in builds without oneDNN). Replica threads (issue 5) each
 * take their share: each replica's exec sizes its own team, no pool is
 * shared. Small nets still want one thread per replica: resnet20 width 8
 * at 28 px, batch 64, trains at 731 images/s on one OpenBLAS thread and
 * 236-432 on two (2026-11-21), and with oneDNN at 1,481 on one thread and
 * 371 on two, against 3,310 for two replicas of one thread (2026-12-04,
 * perf/RESULTS.md "Issue 29"): the hand-offs cost more than the split
 * saves. So the demo runs two replicas of one thread.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "train/ops/op_check.h"
#include "train/train_int.h"
#ifdef SLUICE_TRAIN_CUDA
#include "train/ops/cuda_int.h"
#endif

/* fwd_act, bwd_act, dgrad_acc: the fused slots (cuda only; NULL elsewhere). */
#define OPS_TABLE(sfx, fwd_act, bwd_act, dgrad_acc)                                          \
    {                                                                                        \
        .name = #sfx, .conv_fwd = sl_conv_fwd_##sfx, .conv_bwd_data = sl_conv_bwd_data_##sfx, \
        .conv_bwd_filter = sl_conv_bwd_filter_##sfx, .bn_fwd_train = sl_bn_fwd_train_##sfx,  \
        .bn_fwd_eval = sl_bn_fwd_eval_##sfx, .bn_bwd = sl_bn_bwd_##sfx,                      \
        .bn_fwd_train_act = fwd_act, .bn_bwd_act = bwd_act, .conv_bwd_data_acc = dgrad_acc,     \
        .relu_fwd = sl_relu_fwd_##sfx, .relu_bwd = sl_relu_bwd_##sfx, .add = sl_add_##sfx,   \
        .maxpool_fwd = sl_maxpool_fwd_##sfx, .maxpool_bwd = sl_maxpool_bwd_##sfx,            \
        .gap_fwd = sl_gap_fwd_##sfx, .gap_bwd = sl_gap_bwd_##sfx, .fc_fwd = sl_fc_fwd_##sfx, \
        .fc_bwd = sl_fc_bwd_##sfx, .xent_fwd_bwd = sl_xent_fwd_bwd_##sfx,                    \
        .bn_fwd_apply = sl_bn_fwd_apply_##sfx, .bn_bwd_reduce = sl_bn_bwd_reduce_##sfx,      \
        .bn_bwd_apply = sl_bn_bwd_apply_##sfx, .bn_moments = sl_bn_moments_##sfx,            \
        .bn_moments_merge = sl_bn_moments_merge_##sfx,                                       \
    }

const sl_ops sl_ops_ref = OPS_TABLE(ref, NULL, NULL, NULL);
const sl_ops sl_ops_cpu = OPS_TABLE(cpu, NULL, NULL, NULL);

#ifdef SLUICE_TRAIN_CUDA
/* The cuda table with the fused slots (train_int.h: BN + add + ReLU, ReLU +
 * BN backward, the accumulating backward-data), and without them for
 * SLUICE_CUDA_FUSE=0 (A/B runs: perf/train-gpu). */
const sl_ops sl_ops_cuda = OPS_TABLE(cuda, sl_bn_fwd_train_act_cuda, sl_bn_bwd_act_cuda,
                                     sl_conv_bwd_data_acc_cuda);
static const sl_ops sl_ops_cuda_unfused = OPS_TABLE(cuda, NULL, NULL, NULL);
#else
/* The cuda slots in a build without it: present, named, and honest about
 * being empty. */
#define NOTSUP(fn) return sl_fail(SL_ENOTSUP, fn ": this build has no cuda backend")
static int cu_conv(sl_exec *e, const sl_conv_shape *s, const float *a, const float *b, float *c)
{ (void)e; (void)s; (void)a; (void)b; (void)c; NOTSUP("conv"); }
static int cu_bn_train(sl_exec *e, int64_t r, int c, const float *x, const float *g,
                       const float *b, float m, float eps, float *rm, float *rv, float *y,
                       float *sm, float *si)
{ (void)e; (void)r; (void)c; (void)x; (void)g; (void)b; (void)m; (void)eps; (void)rm;
  (void)rv; (void)y; (void)sm; (void)si; NOTSUP("bn_fwd_train"); }
static int cu_bn_eval(sl_exec *e, int64_t r, int c, const float *x, const float *g,
                      const float *b, const float *rm, const float *rv, float eps, float *y)
{ (void)e; (void)r; (void)c; (void)x; (void)g; (void)b; (void)rm; (void)rv; (void)eps;
  (void)y; NOTSUP("bn_fwd_eval"); }
static int cu_bn_bwd(sl_exec *e, int64_t r, int c, const float *x, const float *dy,
                     const float *g, const float *sm, const float *si, float *dx, float *dg,
                     float *db)
{ (void)e; (void)r; (void)c; (void)x; (void)dy; (void)g; (void)sm; (void)si; (void)dx;
  (void)dg; (void)db; NOTSUP("bn_bwd"); }
static int cu_unary(sl_exec *e, int64_t n, const float *x, float *y)
{ (void)e; (void)n; (void)x; (void)y; NOTSUP("relu_fwd"); }
static int cu_binary(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{ (void)e; (void)n; (void)a; (void)b; (void)y; NOTSUP("relu_bwd/add"); }
static int cu_pool_fwd(sl_exec *e, const sl_pool_shape *s, const float *x, float *y, int32_t *a)
{ (void)e; (void)s; (void)x; (void)y; (void)a; NOTSUP("maxpool_fwd"); }
static int cu_pool_bwd(sl_exec *e, const sl_pool_shape *s, const float *dy, const int32_t *a,
                       float *dx)
{ (void)e; (void)s; (void)dy; (void)a; (void)dx; NOTSUP("maxpool_bwd"); }
static int cu_gap(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{ (void)e; (void)n; (void)hw; (void)c; (void)x; (void)y; NOTSUP("gap"); }
static int cu_fc_fwd(sl_exec *e, int n, int i, int o, const float *x, const float *w,
                     const float *b, float *y)
{ (void)e; (void)n; (void)i; (void)o; (void)x; (void)w; (void)b; (void)y; NOTSUP("fc_fwd"); }
static int cu_fc_bwd(sl_exec *e, int n, int i, int o, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db)
{ (void)e; (void)n; (void)i; (void)o; (void)x; (void)w; (void)dy; (void)dx; (void)dw;
  (void)db; NOTSUP("fc_bwd"); }
static int cu_xent(sl_exec *e, int n, int k, const float *l, const int32_t *y, float s,
                   float *loss, float *dl, int *c)
{ (void)e; (void)n; (void)k; (void)l; (void)y; (void)s; (void)loss; (void)dl; (void)c;
  NOTSUP("xent_fwd_bwd"); }
static int cu_bn_fwd_apply(sl_exec *e, int64_t r, int c, const float *x, const float *g,
                           const float *b, const float *mean, const float *var, double t,
                           float m, float eps, float *rm, float *rv, float *y, float *sm,
                           float *si)
{ (void)e; (void)r; (void)c; (void)x; (void)g; (void)b; (void)mean; (void)var; (void)t;
  (void)m; (void)eps; (void)rm; (void)rv; (void)y; (void)sm; (void)si;
  NOTSUP("bn_fwd_apply"); }
static int cu_bn_bwd_reduce(sl_exec *e, int64_t r, int c, const float *x, const float *dy,
                            const float *sm, const float *si, float *sdy, float *sdyx)
{ (void)e; (void)r; (void)c; (void)x; (void)dy; (void)sm; (void)si; (void)sdy; (void)sdyx;
  NOTSUP("bn_bwd_reduce"); }
static int cu_bn_bwd_apply(sl_exec *e, int64_t r, int c, const float *x, const float *dy,
                           const float *g, const float *sm, const float *si, const float *sdy,
                           const float *sdyx, double t, float *dx)
{ (void)e; (void)r; (void)c; (void)x; (void)dy; (void)g; (void)sm; (void)si; (void)sdy;
  (void)sdyx; (void)t; (void)dx; NOTSUP("bn_bwd_apply"); }

static int cu_bn_moments(sl_exec *e, int64_t r, int c, const float *x, int w, int k, float *s)
{ (void)e; (void)r; (void)c; (void)x; (void)w; (void)k; (void)s; NOTSUP("bn_moments"); }
static int cu_bn_moments_merge(sl_exec *e, int64_t r, int c, int w, const float *s, float *m,
                               float *v)
{ (void)e; (void)r; (void)c; (void)w; (void)s; (void)m; (void)v; NOTSUP("bn_moments_merge"); }

const sl_ops sl_ops_cuda = {
    .name = "cuda", .conv_fwd = cu_conv, .conv_bwd_data = cu_conv, .conv_bwd_filter = cu_conv,
    .bn_fwd_train = cu_bn_train, .bn_fwd_eval = cu_bn_eval, .bn_bwd = cu_bn_bwd,
    .relu_fwd = cu_unary, .relu_bwd = cu_binary, .add = cu_binary,
    .maxpool_fwd = cu_pool_fwd, .maxpool_bwd = cu_pool_bwd, .gap_fwd = cu_gap,
    .gap_bwd = cu_gap, .fc_fwd = cu_fc_fwd, .fc_bwd = cu_fc_bwd, .xent_fwd_bwd = cu_xent,
    .bn_fwd_apply = cu_bn_fwd_apply,
    .bn_bwd_reduce = cu_bn_bwd_reduce, .bn_bwd_apply = cu_bn_bwd_apply,
    .bn_moments = cu_bn_moments, .bn_moments_merge = cu_bn_moments_merge,
};
#endif /* SLUICE_TRAIN_CUDA */

const char *sl_backend_name(sl_backend b)
{
    switch (b) {
    case SL_BACKEND_REF: return "ref";
    case SL_BACKEND_CPU: return "cpu";
    case SL_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

int sl_backend_parse(const char *name, sl_backend *out)
{
    for (int b = SL_BACKEND_REF; b <= SL_BACKEND_CUDA; b++)
        if (name && !strcmp(name, sl_backend_name((sl_backend)b))) {
            *out = (sl_backend)b;
            return SL_OK;
        }
    return sl_fail(SL_EINVAL, "sl_backend_parse: '%s': expected cpu, cuda or ref",
                   name ? name : "(null)");
}

#ifdef SLUICE_TRAIN_CUDA
/* SLUICE_CUDA_DEVICE: a device ordinal (default 0). */
static int cuda_device_of_env(int *device)
{
    const char *v = getenv("SLUICE_CUDA_DEVICE");
    if (!v || !*v)
        return SL_OK;
    char *end;
    errno = 0;
    long d = strtol(v, &end, 10);
    if (errno || *end || d < 0 || d > 1024)
        return sl_fail(SL_EINVAL, "SLUICE_CUDA_DEVICE=%s: want a device number", v);
    *device = (int)d;
    return SL_OK;
}
#endif

int sl_exec_init(sl_exec *e, sl_backend b, int threads) { return sl_exec_init_on(e, b, threads, -1); }

int sl_exec_init_on(sl_exec *e, sl_backend b, int threads, int device)
{
    memset(e, 0, sizeof *e);
    e->backend = b;
    switch (b) {
    case SL_BACKEND_REF: e->ops = &sl_ops_ref; break;
    case SL_BACKEND_CPU: e->ops = &sl_ops_cpu; break;
    case SL_BACKEND_CUDA: {
#ifdef SLUICE_TRAIN_CUDA
        int rc;
        sl_cuda_ctx *ctx = NULL;
        if (device < 0 && (device = 0, rc = cuda_device_of_env(&device)))
            return rc;
        if ((rc = sl_cuda_ctx_create(device, &ctx)))
            return sl_fail(rc, "sl_exec_init: cuda: %s", sl_errmsg());
        e->cuda = ctx;
        e->ops = ctx->fuse ? &sl_ops_cuda : &sl_ops_cuda_unfused;
        break;
#else
        (void)device;
        return sl_fail(SL_ENOTSUP, "sl_exec_init: this build has no CUDA backend (it needs "
                                   "CUDA and cuDNN)");
#endif
    }
    default:
        return sl_fail(SL_EINVAL, "sl_exec_init: unknown backend %d", (int)b);
    }
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    e->threads = threads;
    if (b == SL_BACKEND_CPU)
        openblas_set_num_threads(threads);
    return SL_OK;
}

int sl_exec_create(sl_backend b, int threads, int device, sl_exec **out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_exec_create: NULL out");
    *out = NULL;
    sl_exec *e = malloc(sizeof *e);
    if (!e)
        return sl_fail(SL_ENOMEM, "sl_exec_create: %zu bytes", sizeof *e);
    int rc = sl_exec_init_on(e, b, threads, device);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return SL_OK;
}

void sl_exec_destroy(sl_exec *e)
{
    if (!e)
        return;
    sl_exec_fini(e);
    free(e);
}

sl_backend sl_exec_backend(const sl_exec *e) { return e->backend; }

int sl_exec_set_act(sl_exec *e, sl_dtype act)
{
    if (!e || (int)act < 0 || act > SL_DTYPE_LAST)
        return sl_fail(SL_EINVAL, "sl_exec_set_act: bad exec or type %d", e ? (int)act : -1);
    if (act != SL_DTYPE_F32 && e->backend != SL_BACKEND_CUDA)
        return sl_fail(SL_ENOTSUP, "sl_exec_set_act: the %s backend computes in f32 only "
                       "(bf16 / fp16 need --backend cuda)", sl_backend_name(e->backend));
    e->act = act;
    return SL_OK;
}

size_t sl_exec_act_size(const sl_exec *e) { return e ? sl_dtype_size(e->act) : 4; }

void sl_exec_fini(sl_exec *e)
{
    if (!e)
        return;
#ifdef SLUICE_TRAIN_CUDA
    sl_cuda_ctx_destroy((sl_cuda_ctx *)e->cuda);
#endif
    e->cuda = NULL;
    free(e->scratch);
    e->scratch = NULL;
    e->scratch_cap = 0;
}

void *sl_exec_scratch(sl_exec *e, size_t bytes)
{
    if (bytes <= e->scratch_cap)
        return e->scratch;
    size_t cap = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap ? cap : 64)) {
        sl_fail(SL_ENOMEM, "sl_exec_scratch: %zu bytes", bytes);
        return NULL;
    }
    free(e->scratch);
    e->scratch = p;
    e->scratch_cap = cap;
    return p;
}

/* The geometry is computed in int64 (h + 2*pad would overflow an int for a
 * hostile pad), and the padded input must fit an int: then every index the
 * backends form in int (oh*stride - pad + i) does too, and so do p, q. */
int sl_conv_shape_init(sl_conv_shape *sh, int n, int h, int w, int c, int k, int r, int s,
                       int stride, int pad)
{
    if (n < 1 || h < 1 || w < 1 || c < 1 || k < 1 || r < 1 || s < 1 || stride < 1 || pad < 0)
        return sl_fail(SL_EINVAL, "sl_conv_shape_init: bad geometry n%d h%d w%d c%d k%d %dx%d "
                       "stride %d pad %d", n, h, w, c, k, r, s, stride, pad);
    int64_t hp = (int64_t)h + 2 * (int64_t)pad, wp = (int64_t)w + 2 * (int64_t)pad;
    if (hp > INT_MAX || wp > INT_MAX)
        return sl_fail(SL_EINVAL, "sl_conv_shape_init: padded input %lldx%lld: more than "
                       "2^31-1 a side", (long long)hp, (long long)wp);
    if (hp < r || wp < s)
        return sl_fail(SL_EINVAL, "sl_conv_shape_init: %dx%d kernel larger than the padded "
                       "%dx%d input", r, s, h, w);
    int p = (int)((hp - r) / stride + 1), q = (int)((wp - s) / stride + 1);
    *sh = (sl_conv_shape){n, h, w, c, k, r, s, stride, pad, p, q};
    return SL_OK;
}

int sl_pool_shape_init(sl_pool_shape *sh, int n, int h, int w, int c, int r, int stride, int pad)
{
    if (n < 1 || h < 1 || w < 1 || c < 1 || r < 1 || stride < 1 || pad < 0 ||
        2 * (int64_t)pad > r)
        return sl_fail(SL_EINVAL, "sl_pool_shape_init: bad geometry n%d h%d w%d c%d %dx%d "
                       "stride %d pad %d", n, h, w, c, r, r, stride, pad);
    int64_t hp = (int64_t)h + 2 * (int64_t)pad, wp = (int64_t)w + 2 * (int64_t)pad;
    if (hp > INT_MAX || wp > INT_MAX)
        return sl_fail(SL_EINVAL, "sl_pool_shape_init: padded input %lldx%lld: more than "
                       "2^31-1 a side", (long long)hp, (long long)wp);
    if (hp < r || wp < r)
        return sl_fail(SL_EINVAL, "sl_pool_shape_init: %dx%d window larger than the padded "
                       "%dx%d input", r, r, h, w);
    int p = (int)((hp - r) / stride + 1), q = (int)((wp - r) / stride + 1);
    *sh = (sl_pool_shape){n, h, w, c, r, stride, pad, p, q};
    return SL_OK;
}

/* -------------------------------------------------------------- dispatch */
/*
 * The op entry points (train_int.h): every argument check an op has is
 * here, once, before the backend's slot runs, as collectives/comm.c checks
 * before its backends:
 *   - the exec and its slot (op_ok);
 *   - the shape: geometry the sl_*_shape_init functions would make, counts
 *     in range;
 *   - each tensor's size: the product of its dimensions, and that many
 *     4-byte elements in bytes, fit in int64 (the backends index with
 *     int64_t and size_t and would wrap past it);
 *   - each tensor's pointer: NULL only where the slot's comment allows it
 *     (r of bn_fwd_train_act, dgamma / dbeta of bn_bwd_act, tmp of
 *     conv_bwd_data_acc, dx of fc_bwd, correct of xent_fwd_bwd) or where
 *     the tensor has no elements (rows 0 where rows may be 0, n 0).
 * The backends (*_ref.c, *_cpu.c, *_cuda.cu) trust what passed and check
 * only what is theirs: their own state (a cuda context), their scratch,
 * and the device data they read (cuda's labels; argmax). Host labels are
 * checked here.
 * Messages read "sl_<op>: <backend>: what", what naming the argument.
 */

static int pool_shape_ok(const sl_pool_shape *s)
{
    if (!s || s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->r < 1 || s->stride < 1 ||
        s->pad < 0 || 2 * (int64_t)s->pad > s->r)
        return 0;
    int64_t hp = (int64_t)s->h + 2 * (int64_t)s->pad, wp = (int64_t)s->w + 2 * (int64_t)s->pad;
    return hp <= INT_MAX && wp <= INT_MAX && s->p == (hp - s->r) / s->stride + 1 &&
           s->q == (wp - s->r) / s->stride + 1 && s->p >= 1 && s->q >= 1;
}


/* A pool shape, and its input (x, or dx: name) small enough for the int32
 * argmax. */
static int pool_check(const char *fn, const sl_exec *e, const sl_pool_shape *sh,
                      const char *name)
{
    if (!pool_shape_ok(sh))
        return op_fail(fn, e, "bad pool geometry (use sl_pool_shape_init)");
    const int64_t d[] = {sh->n, sh->h, sh->w, sh->c};
    int64_t nx = 0;
    int rc = tensor_elems(fn, e, name, 4, d, &nx);
    if (rc)
        return rc;
    if (nx > INT32_MAX)
        return op_fail(fn, e, "%s has %lld elements: the int32 argmax indexes at most 2^31-1",
                       name, (long long)nx);
    return SL_OK;
}

/* Pool tensors: x (n, h, w, c); y and argmax (n, p, q, c). */
#define POOL_X(e, sh, t) TENSOR(e, t, (sh)->n, (sh)->h, (sh)->w, (sh)->c)
#define POOL_Y(e, sh, t) TENSOR(e, t, (sh)->n, (sh)->p, (sh)->q, (sh)->c)

/* Batch statistics need two rows: the unbiased variance divides by rows-1. */
#define CHECK_BN_TRAIN(e, rows, c)                                                            \
    do {                                                                                      \
        CHECK(e, (c) >= 1, "%d channels", (c));                                               \
        CHECK(e, (rows) >= 2, "%lld row(s) per channel: training-mode batch norm needs at "    \
              "least 2 values per channel (PyTorch refuses 1 too)", (long long)(rows));        \
    } while (0)

#define CHECK_ROWS(e, rows, c, min)                                                           \
    CHECK(e, (c) >= 1 && (rows) >= (min), "%lld rows of %d channels", (long long)(rows), (c))

/* Sync-BN: total, the global row count of which this replica's rows are a
 * part. rows may be 0 (a replica with no rows adds nothing to the sums).
 * The forward needs total >= 2 (the unbiased running variance divides by
 * total - 1, and PyTorch refuses 1 in training too), the backward 1. */
#define CHECK_TOTAL(e, rows, c, total, min)                                                   \
    do {                                                                                      \
        CHECK_ROWS(e, rows, c, 0);                                                            \
        CHECK(e, (total) >= (min) && (total) >= (double)(rows),                               \
              "%g rows in all replicas, %lld here: training-mode batch norm needs at least "   \
              "%g values per channel and total >= rows", (total), (long long)(rows),           \
              (double)(min));                                                                 \
    } while (0)

/* Batch-norm tensors: rows of c channels (x, y, dy, dx), or one value per
 * channel (gamma, beta, statistics, sums). */
#define BN_ROWS(e, t) TENSOR(e, t, rows, c)
#define BN_CHAN(e, t) TENSOR(e, t, c)

int sl_conv_fwd(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w, float *y)
{
    OP_OK(e, conv_fwd);
    CHECK_CONV(e, sh);
    CONV_X(e, sh, x);
    CONV_W(e, sh, w);
    CONV_Y(e, sh, y);
    return e->ops->conv_fwd(e, sh, x, w, y);
}

int sl_conv_bwd_data(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                     float *dx)
{
    OP_OK(e, conv_bwd_data);
    CHECK_CONV(e, sh);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, w);
    CONV_X(e, sh, dx);
    return e->ops->conv_bwd_data(e, sh, dy, w, dx);
}

int sl_conv_bwd_filter(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *dy,
                       float *dw)
{
    OP_OK(e, conv_bwd_filter);
    CHECK_CONV(e, sh);
    CONV_X(e, sh, x);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, dw);
    return e->ops->conv_bwd_filter(e, sh, x, dy, dw);
}

/* tmp may be NULL. */
int sl_conv_bwd_data_acc(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                         float *dx, float *tmp)
{
    OP_OK(e, conv_bwd_data_acc);
    CHECK_CONV(e, sh);
    CONV_Y(e, sh, dy);
    CONV_W(e, sh, w);
    CONV_X(e, sh, dx);
    return e->ops->conv_bwd_data_acc(e, sh, dy, w, dx, tmp);
}

int sl_bn_fwd_train(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                    const float *beta, float momentum, float eps, float *running_mean,
                    float *running_var, float *y, float *save_mean, float *save_invstd)
{
    OP_OK(e, bn_fwd_train);
    CHECK_BN_TRAIN(e, rows, c);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    return e->ops->bn_fwd_train(e, rows, c, x, gamma, beta, momentum, eps, running_mean,
                                running_var, y, save_mean, save_invstd);
}

int sl_bn_fwd_eval(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                   const float *beta, const float *running_mean, const float *running_var,
                   float eps, float *y)
{
    OP_OK(e, bn_fwd_eval);
    CHECK_ROWS(e, rows, c, 0);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    return e->ops->bn_fwd_eval(e, rows, c, x, gamma, beta, running_mean, running_var, eps, y);
}

int sl_bn_bwd(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
              const float *gamma, const float *save_mean, const float *save_invstd, float *dx,
              float *dgamma, float *dbeta)
{
    OP_OK(e, bn_bwd);
    CHECK_ROWS(e, rows, c, 1);
    BN_ROWS(e, x);
    BN_ROWS(e, dy);
    BN_CHAN(e, gamma);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_ROWS(e, dx);
    BN_CHAN(e, dgamma);
    BN_CHAN(e, dbeta);
    return e->ops->bn_bwd(e, rows, c, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

/* r may be NULL (no shortcut add). */
int sl_bn_fwd_train_act(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                        const float *beta, float momentum, float eps, float *running_mean,
                        float *running_var, const float *r, int relu, float *y,
                        float *save_mean, float *save_invstd)
{
    OP_OK(e, bn_fwd_train_act);
    CHECK_BN_TRAIN(e, rows, c);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    return e->ops->bn_fwd_train_act(e, rows, c, x, gamma, beta, momentum, eps, running_mean,
                                    running_var, r, relu != 0, y, save_mean, save_invstd);
}

/* dgamma, dbeta may be NULL (not wanted). */
int sl_bn_bwd_act(sl_exec *e, int64_t rows, int c, const float *x, const float *z, float *dz,
                  const float *gamma, const float *save_mean, const float *save_invstd,
                  float *dx, float *dgamma, float *dbeta)
{
    OP_OK(e, bn_bwd_act);
    CHECK_ROWS(e, rows, c, 1);
    BN_ROWS(e, x);
    BN_ROWS(e, z);
    BN_ROWS(e, dz);
    BN_CHAN(e, gamma);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_ROWS(e, dx);
    return e->ops->bn_bwd_act(e, rows, c, x, z, dz, gamma, save_mean, save_invstd, dx, dgamma,
                              dbeta);
}

int sl_relu_fwd(sl_exec *e, int64_t n, const float *x, float *y)
{
    OP_OK(e, relu_fwd);
    CHECK(e, n >= 0, "%lld elements", (long long)n);
    TENSOR(e, x, n);
    TENSOR(e, y, n);
    return e->ops->relu_fwd(e, n, x, y);
}

int sl_relu_bwd(sl_exec *e, int64_t n, const float *y, const float *dy, float *dx)
{
    OP_OK(e, relu_bwd);
    CHECK(e, n >= 0, "%lld elements", (long long)n);
    TENSOR(e, y, n);
    TENSOR(e, dy, n);
    TENSOR(e, dx, n);
    return e->ops->relu_bwd(e, n, y, dy, dx);
}

int sl_add(sl_exec *e, int64_t n, const float *a, const float *b, float *y)
{
    OP_OK(e, add);
    CHECK(e, n >= 0, "%lld elements", (long long)n);
    TENSOR(e, a, n);
    TENSOR(e, b, n);
    TENSOR(e, y, n);
    return e->ops->add(e, n, a, b, y);
}

int sl_maxpool_fwd(sl_exec *e, const sl_pool_shape *sh, const float *x, float *y,
                   int32_t *argmax)
{
    OP_OK(e, maxpool_fwd);
    int rc = pool_check(__func__, e, sh, "x");
    if (rc)
        return rc;
    POOL_X(e, sh, x);
    POOL_Y(e, sh, y);
    POOL_Y(e, sh, argmax);
    return e->ops->maxpool_fwd(e, sh, x, y, argmax);
}

int sl_maxpool_bwd(sl_exec *e, const sl_pool_shape *sh, const float *dy, const int32_t *argmax,
                   float *dx)
{
    OP_OK(e, maxpool_bwd);
    int rc = pool_check(__func__, e, sh, "dx");
    if (rc)
        return rc;
    POOL_Y(e, sh, dy);
    POOL_Y(e, sh, argmax);
    POOL_X(e, sh, dx);
    return e->ops->maxpool_bwd(e, sh, dy, argmax, dx);
}

int sl_gap_fwd(sl_exec *e, int n, int hw, int c, const float *x, float *y)
{
    OP_OK(e, gap_fwd);
    CHECK(e, n >= 1 && hw >= 1 && c >= 1, "shape (%d, %d, %d)", n, hw, c);
    TENSOR(e, x, n, hw, c);
    TENSOR(e, y, n, c);
    return e->ops->gap_fwd(e, n, hw, c, x, y);
}

int sl_gap_bwd(sl_exec *e, int n, int hw, int c, const float *dy, float *dx)
{
    OP_OK(e, gap_bwd);
    CHECK(e, n >= 1 && hw >= 1 && c >= 1, "shape (%d, %d, %d)", n, hw, c);
    TENSOR(e, dy, n, c);
    TENSOR(e, dx, n, hw, c);
    return e->ops->gap_bwd(e, n, hw, c, dy, dx);
}

int sl_fc_fwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
              const float *b, float *y)
{
    OP_OK(e, fc_fwd);
    CHECK(e, n >= 1 && in >= 1 && out >= 1, "shape n %d in %d out %d", n, in, out);
    TENSOR(e, x, n, in);
    TENSOR(e, w, out, in);
    TENSOR(e, b, out);
    TENSOR(e, y, n, out);
    return e->ops->fc_fwd(e, n, in, out, x, w, b, y);
}

/* dx may be NULL (the input's gradient not wanted). */
int sl_fc_bwd(sl_exec *e, int n, int in, int out, const float *x, const float *w,
              const float *dy, float *dx, float *dw, float *db)
{
    OP_OK(e, fc_bwd);
    CHECK(e, n >= 1 && in >= 1 && out >= 1, "shape n %d in %d out %d", n, in, out);
    TENSOR(e, x, n, in);
    TENSOR(e, w, out, in);
    TENSOR(e, dy, n, out);
    TENSOR(e, dw, out, in);
    TENSOR(e, db, out);
    return e->ops->fc_bwd(e, n, in, out, x, w, dy, dx, dw, db);
}

/* correct may be NULL. */
int sl_xent_fwd_bwd(sl_exec *e, int n, int classes, const float *logits, const int32_t *labels,
                    float smoothing, float *loss, float *dlogits, int *correct)
{
    OP_OK(e, xent_fwd_bwd);
    CHECK(e, n >= 1 && classes >= 1, "%d rows of %d classes", n, classes);
    CHECK(e, smoothing >= 0.0f && smoothing <= 1.0f, "label smoothing %g outside [0, 1]",
          (double)smoothing);
    TENSOR(e, logits, n, classes);
    TENSOR(e, labels, n);
    TENSOR(e, loss, 1);
    TENSOR(e, dlogits, n, classes);
    /* Every label before anything is written. Host backends' labels are
     * host memory, read here; cuda's are device memory, which its kernel
     * checks (the first bad row comes back the same way). */
    for (int i = 0; e->backend != SL_BACKEND_CUDA && i < n; i++)
        CHECK(e, labels[i] >= 0 && labels[i] < classes, "row %d: label %d outside [0, %d)", i,
              (int)labels[i], classes);
    return e->ops->xent_fwd_bwd(e, n, classes, logits, labels, smoothing, loss, dlogits,
                                correct);
}

int sl_bn_fwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *gamma,
                    const float *beta, const float *mean, const float *var, double total,
                    float momentum, float eps, float *running_mean, float *running_var,
                    float *y, float *save_mean, float *save_invstd)
{
    OP_OK(e, bn_fwd_apply);
    CHECK_TOTAL(e, rows, c, total, 2.0);
    BN_ROWS(e, x);
    BN_CHAN(e, gamma);
    BN_CHAN(e, beta);
    BN_CHAN(e, mean);
    BN_CHAN(e, var);
    BN_CHAN(e, running_mean);
    BN_CHAN(e, running_var);
    BN_ROWS(e, y);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    return e->ops->bn_fwd_apply(e, rows, c, x, gamma, beta, mean, var, total, momentum, eps,
                                running_mean, running_var, y, save_mean, save_invstd);
}

int sl_bn_bwd_reduce(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                     const float *save_mean, const float *save_invstd, float *sum_dy,
                     float *sum_dy_xhat)
{
    OP_OK(e, bn_bwd_reduce);
    CHECK_ROWS(e, rows, c, 0);
    BN_ROWS(e, x);
    BN_ROWS(e, dy);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_CHAN(e, sum_dy);
    BN_CHAN(e, sum_dy_xhat);
    return e->ops->bn_bwd_reduce(e, rows, c, x, dy, save_mean, save_invstd, sum_dy,
                                 sum_dy_xhat);
}

int sl_bn_bwd_apply(sl_exec *e, int64_t rows, int c, const float *x, const float *dy,
                    const float *gamma, const float *save_mean, const float *save_invstd,
                    const float *sum_dy, const float *sum_dy_xhat, double total, float *dx)
{
    OP_OK(e, bn_bwd_apply);
    CHECK_TOTAL(e, rows, c, total, 1.0);
    BN_ROWS(e, x);
    BN_ROWS(e, dy);
    BN_CHAN(e, gamma);
    BN_CHAN(e, save_mean);
    BN_CHAN(e, save_invstd);
    BN_CHAN(e, sum_dy);
    BN_CHAN(e, sum_dy_xhat);
    BN_ROWS(e, dx);
    return e->ops->bn_bwd_apply(e, rows, c, x, dy, gamma, save_mean, save_invstd, sum_dy,
                                sum_dy_xhat, total, dx);
}

/* slots: (world, SL_BN_MOMENT_FLOATS, c). */
int sl_bn_moments(sl_exec *e, int64_t rows, int c, const float *x, int world, int rank,
                  float *slots)
{
    OP_OK(e, bn_moments);
    CHECK_ROWS(e, rows, c, 0);
    CHECK(e, world >= 1 && rank >= 0 && rank < world, "replica %d of %d", rank, world);
    BN_ROWS(e, x);
    TENSOR(e, slots, world, SL_BN_MOMENT_FLOATS, c);
    return e->ops->bn_moments(e, rows, c, x, world, rank, slots);
}

int sl_bn_moments_merge(sl_exec *e, int64_t rows, int c, int world, const float *slots,
                        float *mean, float *var)
{
    OP_OK(e, bn_moments_merge);
    CHECK_ROWS(e, rows, c, 0);
    CHECK(e, world >= 1, "%d replicas", world);
    TENSOR(e, slots, world, SL_BN_MOMENT_FLOATS, c);
    BN_CHAN(e, mean);
    BN_CHAN(e, var);
    return e->ops->bn_moments_merge(e, rows, c, world, slots, mean, var);
}

/*
 * train/ops/conv_dnnl.c - convolution on the CPU through oneDNN (the C API
 * of dnnl.h: Debian's libdnnl 2.6, or a oneDNN 3 that -DSLUICE_DNNL_ROOT or
 * a newer distribution gives): forward, backward-data and
 * backward-filter in NHWC f32, the kernels PyTorch's channels_last CPU path
 * runs. Built with SLUICE_WITH_DNNL; conv_cpu.c calls in here unless
 * SLUICE_CPU_CONV=blas, and keeps im2col + OpenBLAS for builds without it.
 *
 * Layouts. Activations are given to oneDNN as they are: x (n, h, w, c) is
 * the logical (n, c, h, w) tensor with tag nhwc, y likewise. The weights
 * (k, r, s, c) are tag ohwi, a plain format the fast (jit) kernels do not
 * take: they want blocked weights (OIhw16i16o and kin). So each primitive
 * is made with weights "any", oneDNN picks its format, and a reorder
 * primitive converts: OHWI -> the kernel's format before forward and
 * backward-data (their formats may differ), the kernel's diff-weights
 * format -> OHWI after backward-filter. The reordered weights live in the
 * exec's scratch; a weights tensor is small next to the activations (at
 * ResNet-50 batch 32 the reorders move 0.3 GB a step against ~30 GB of
 * activation traffic). When oneDNN picks OHWI itself the reorder is skipped.
 * Padding: oneDNN wants padding_r such that the output size follows; ours
 * is symmetric with floor division (p = (h + 2*pad - r)/stride + 1), which is
 * oneDNN's formula with padding_r = pad, so pad goes on both sides.
 *
 * Why a process-wide cache of primitives. Making a primitive descriptor and
 * its primitive (implementation search, JIT code generation) costs tens to
 * hundreds of microseconds, about a conv's run time at demo sizes, so each
 * (shape, pass, thread count) is made once. sl_exec (ops.h) has no
 * slot for cpu state, and replicas run the same shapes, so the cache is one
 * table for the process, under a mutex, holding at most CACHE_MAX entries;
 * past that a primitive is made for the call and destroyed after it. Entries
 * are never evicted while the process lives: a primitive another replica is
 * executing is never freed under it. oneDNN's primitives are immutable once
 * made and may execute concurrently from several threads as long as each
 * call has its own scratchpad: attr scratchpad_mode user, and the
 * scratchpad (with the reordered weights) is the calling exec's
 * sl_exec_scratch. Memory objects and the stream are made per call (a few
 * small allocations; they hold the call's pointers).
 *
 * Threads: oneDNN's CPU runtime here is OpenMP (libgomp); a kernel splits
 * over omp_get_max_threads() of the calling thread, read when the primitive
 * is made and again when it runs. So every entry point sets the calling
 * thread's OpenMP thread count to e->threads (a per-thread setting: a
 * replica thread with one thread leaves the main thread's at two) and the
 * thread count is part of the cache key.
 *
 * Two APIs: oneDNN 3 made a memory descriptor an object (created, cloned,
 * destroyed; dn_md below) and dropped the operation descriptors (a
 * primitive descriptor is made from the shapes directly); everything else
 * this file calls is the same in both (tools/dev compiles this file
 * against 3.2's headers). 3.2 (PyPI's GNU-OpenMP build) runs a ResNet-50
 * step's convolutions no faster than 2.6 on a quiet machine here
 * (perf/dnnl-versions: 0.97x), so the builds keep Debian's.
 *
 * Errors: every dnnl_* status is checked: SL_ENOTSUP when oneDNN has no
 * implementation (dnnl_unimplemented), SL_ENOMEM for dnnl_out_of_memory,
 * else SL_EINVAL, the message naming the pass, the shape and the call.
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>
#include <dnnl_debug.h>

#include "train/ops/cpu_int.h"

/* A memory descriptor held by a dn_prim: the struct itself in oneDNN 2, a
 * handle it owns in oneDNN 3 (md_free). md_ref is what the calls take. */
#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t dn_md;
typedef const_dnnl_memory_desc_t md_ref;
#define MD(m) (m)
static dnnl_status_t md_tag(dn_md *m, const dnnl_dims_t d, dnnl_data_type_t t,
                            dnnl_format_tag_t tag)
{
    return dnnl_memory_desc_create_with_tag(m, 4, d, t, tag);
}
static dnnl_status_t md_copy(dn_md *m, md_ref from) { return dnnl_memory_desc_clone(m, from); }
static void md_free(dn_md m) { dnnl_memory_desc_destroy(m); }
#else
typedef dnnl_memory_desc_t dn_md;
typedef const dnnl_memory_desc_t *md_ref;
#define MD(m) (&(m))
static dnnl_status_t md_tag(dn_md *m, const dnnl_dims_t d, dnnl_data_type_t t,
                            dnnl_format_tag_t tag)
{
    return dnnl_memory_desc_init_by_tag(m, 4, d, t, tag);
}
static dnnl_status_t md_copy(dn_md *m, md_ref from)
{
    *m = *from;
    return dnnl_success;
}
#endif

#define CACHE_MAX 256
#define ALIGN64(b) (((b) + 63) & ~(size_t)63)

enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_FILTER };
static const char *const pass_name[] = {"forward", "backward-data", "backward-filter"};

/* One pass of one shape. wmd_user is OHWI; wmd_prim the primitive's
 * (diff-)weights format; reorder is NULL when they are equal, else
 * user -> prim (fwd, bwd data) or prim -> user (bwd filter). */
typedef struct dn_prim {
    sl_conv_shape sh;
    int pass, threads;
    sl_dtype act;         /* the activations' type (f32 or bf16) */
    char impl[48];        /* oneDNN's implementation, "brg:avx512_core_amx" ... */
    dnnl_primitive_t prim, reorder;
    dn_md xmd, ymd, wmd_user, wmd_prim, pad_md, rpad_md; /* pad_md, rpad_md: when *_bytes */
    size_t wbytes, pad_bytes, rpad_bytes; /* the exec-scratch pieces */
} dn_prim;

static pthread_once_t eng_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t eng;
static dnnl_status_t eng_status;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static dn_prim *cache[CACHE_MAX];
static int ncache;

static void eng_init(void) { eng_status = dnnl_engine_create(&eng, dnnl_cpu, 0); }

/* A oneDNN status as ours: SL_OK for dnnl_success, else the code with what
 * failed named. */
static int dn_ok(dnnl_status_t st, const char *what)
{
    if (st == dnnl_success)
        return SL_OK;
    int code = st == dnnl_unimplemented ? SL_ENOTSUP
               : st == dnnl_out_of_memory ? SL_ENOMEM
                                          : SL_EINVAL;
    return sl_fail(code, "%s: oneDNN status %d", what, (int)st);
}

int sl_dnnl_enabled(void)
{
    const char *v = getenv("SLUICE_CPU_CONV");
    return !(v && !strcmp(v, "blas"));
}

/* oneDNN's type of an activation type: f32, or bf16 (SL_DTYPE_F16 is
 * refused before it gets here: sl_exec_set_act). */
static dnnl_data_type_t dn_type(sl_dtype t) { return t == SL_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32; }

static int same_shape(const sl_conv_shape *a, const sl_conv_shape *b)
{
    return a->n == b->n && a->h == b->h && a->w == b->w && a->c == b->c && a->k == b->k &&
           a->r == b->r && a->s == b->s && a->stride == b->stride && a->pad == b->pad;
}

static void prim_free(dn_prim *p)
{
    if (!p)
        return;
    dnnl_primitive_destroy(p->prim);
    dnnl_primitive_destroy(p->reorder);
#if DNNL_VERSION_MAJOR >= 3
    dn_md *m[] = {&p->xmd, &p->ymd, &p->wmd_user, &p->wmd_prim, &p->pad_md, &p->rpad_md};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        if (*m[i])
            md_free(*m[i]);
#endif
    free(p);
}

/* A conv of at most this many input and output channels skips the brgemm
 * implementations ("brgconv", "brg_fwd+brgconv") for the next (jit_bf16 /
 * jit). On oneDNN 3.2 at 8-32 channels their per-call host code (ker_vpad,
 * init_batch: 7% of the demo's step in perf) outweighs their kernels, and
 * ResNet-20 at width 8 took 10% more CPU a step than on 2.6; skipping them
 * gives it 2.6's (600 steps, 20.0 against 20.4 CPU-seconds in two
 * alternations). On 2.6 the forward pass picks brgconv too, and its
 * jit_bf16 runs the demo's convs faster (perf/dnnl_conv.c --demo, one
 * thread, batch 32: 0.243 against 0.314 ms at 8 channels, 0.114 / 0.156 at
 * 16, 0.101 / 0.119 at 32, 0.137 / 0.196 for the 3-channel stem).
 * ResNet-50's convs all have 64 or more. */
#define BRG_MIN_C 32

/* The primitive descriptor of one pass (weights "any"; strides and pads
 * from sh; hint: forward's, for the backward passes): its first
 * implementation in oneDNN's order of preference, except one. In 2.6.3
 * the jit 1x1 backward-weights kernel with stride > 1 ("jit_1x1:avx512_core",
 * which first copies the strided input to a dense one, its "rtus" buffer)
 * writes past the scratchpad it declares when it runs on more than one
 * thread (3 KiB past 13.5 KiB for n5 28x28 c8 -> k16 stride 2 on 2
 * threads; found by tests/train/ops/test_conv.c's net shapes). Such a conv
 * takes the next implementation (the general jit kernel), on 3.2 as well:
 * its 1x1 kernels keep the rtus design. And narrow convs skip the
 * brgemm ones (BRG_MIN_C). */
/* Whether pd's implementation is one pd_pick passes over. */
static int skip_impl(const_dnnl_primitive_desc_t pd, int avoid_1x1, int avoid_brg)
{
    const char *impl = NULL;
    if ((!avoid_1x1 && !avoid_brg) ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl)
        return 0;
    return (avoid_1x1 && strstr(impl, "1x1")) || (avoid_brg && strstr(impl, "brg"));
}

static dnnl_status_t pd_pick(int pass, const sl_conv_shape *sh, md_ref xmd, md_ref wany,
                             md_ref ymd, const_dnnl_primitive_attr_t attr,
                             const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *out)
{
    const dnnl_dims_t strides = {sh->stride, sh->stride}, pads = {sh->pad, sh->pad};
    int avoid_1x1 = pass == PASS_BWD_FILTER && sh->r == 1 && sh->s == 1 && sh->stride > 1;
    int avoid_brg = sh->c <= BRG_MIN_C && sh->k <= BRG_MIN_C;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st;
#if DNNL_VERSION_MAJOR >= 3
    const dnnl_dims_t dil = {0, 0};
    switch (pass) {
    case PASS_FWD:
        st = dnnl_convolution_forward_primitive_desc_create(
            &pd, eng, dnnl_forward_training, dnnl_convolution_direct, xmd, wany, NULL, ymd,
            strides, dil, pads, pads, attr);
        break;
    case PASS_BWD_DATA:
        st = dnnl_convolution_backward_data_primitive_desc_create(
            &pd, eng, dnnl_convolution_direct, xmd, wany, ymd, strides, dil, pads, pads, hint,
            attr);
        break;
    default:
        st = dnnl_convolution_backward_weights_primitive_desc_create(
            &pd, eng, dnnl_convolution_direct, xmd, wany, NULL, ymd, strides, dil, pads, pads,
            hint, attr);
        break;
    }
    /* next_impl turns pd into the next implementation in place */
    while (st == dnnl_success && skip_impl(pd, avoid_1x1, avoid_brg))
        st = dnnl_primitive_desc_next_impl(pd);
    if (st != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        return st == dnnl_last_impl_reached ? dnnl_unimplemented : st;
    }
    *out = pd;
    return dnnl_success;
#else
    dnnl_convolution_desc_t cd;
    switch (pass) {
    case PASS_FWD:
        st = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                                dnnl_convolution_direct, xmd, wany, NULL, ymd,
                                                strides, pads, pads);
        break;
    case PASS_BWD_DATA:
        st = dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, xmd, wany,
                                                      ymd, strides, pads, pads);
        break;
    default:
        st = dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, xmd,
                                                         wany, NULL, ymd, strides, pads, pads);
        break;
    }
    if (st != dnnl_success)
        return st;
    if (!avoid_1x1 && !avoid_brg)
        return dnnl_primitive_desc_create(out, &cd, attr, eng, hint);
    /* 2.6 has no next_impl: its iterator, past the ones skipped */
    dnnl_primitive_desc_iterator_t it;
    st = dnnl_primitive_desc_iterator_create(&it, &cd, attr, eng, hint);
    if (st != dnnl_success)
        return st;
    *out = NULL;
    do {
        pd = dnnl_primitive_desc_iterator_fetch(it);
        if (!pd) {
            st = dnnl_out_of_memory;
            break;
        }
        if (!skip_impl(pd, avoid_1x1, avoid_brg)) {
            *out = pd;
            break;
        }
        dnnl_primitive_desc_destroy(pd);
    } while ((st = dnnl_primitive_desc_iterator_next(it)) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (*out)
        return dnnl_success;
    return st == dnnl_iterator_ends ? dnnl_unimplemented : st;
#endif
}

/* Make the primitive of (sh, pass, act) for the calling thread's OpenMP
 * thread count: the conv (with a forward hint for the backward passes), its
 * weights format, the weights reorder and the scratch sizes. With bf16
 * activations (ops.h's mixed precision) x, y (dy, dx) and the
 * weights of forward and backward-data are bf16, and backward-filter's dw
 * is f32 (the master weights' gradient): oneDNN accumulates in f32 and
 * writes dw without a bf16 rounding. */
static int prim_make(const sl_conv_shape *sh, int pass, int threads, sl_dtype act,
                     dn_prim **out)
{
    int rc = SL_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL, hint = NULL, rpd = NULL;
    dn_prim *p = calloc(1, sizeof *p);
    if (!p)
        return sl_fail(SL_ENOMEM, "conv_dnnl: %zu bytes", sizeof *p);
    p->sh = *sh;
    p->pass = pass;
    p->threads = threads;
    p->act = act;
    dnnl_data_type_t at = dn_type(act), wt = pass == PASS_BWD_FILTER ? dnnl_f32 : at;
    const dnnl_dims_t xd = {sh->n, sh->c, sh->h, sh->w}, yd = {sh->n, sh->k, sh->p, sh->q},
                      wd = {sh->k, sh->c, sh->r, sh->s};
#if DNNL_VERSION_MAJOR >= 3
    dn_md wany = NULL, hany = NULL; /* made below; NULL: nothing to free */
#else
    dn_md wany, hany;
#endif
    if ((rc = dn_ok(md_tag(&p->xmd, xd, at, dnnl_nhwc), "x descriptor")) ||
        (rc = dn_ok(md_tag(&p->ymd, yd, at, dnnl_nhwc), "y descriptor")) ||
        (rc = dn_ok(md_tag(&p->wmd_user, wd, wt, dnnl_ohwi), "w descriptor")) ||
        (rc = dn_ok(md_tag(&wany, wd, wt, dnnl_format_tag_any), "w descriptor (any)")) ||
        (rc = dn_ok(md_tag(&hany, wd, at, dnnl_format_tag_any), "w descriptor (hint)")) ||
        (rc = dn_ok(dnnl_primitive_attr_create(&attr), "attr")) ||
        (rc = dn_ok(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
                    "attr")))
        goto out;

    if (pass != PASS_FWD &&
        (rc = dn_ok(pd_pick(PASS_FWD, sh, MD(p->xmd), MD(hany), MD(p->ymd), NULL, NULL, &hint),
                    "forward hint")))
        goto out;
    if ((rc = dn_ok(pd_pick(pass, sh, MD(p->xmd), MD(wany), MD(p->ymd), attr, hint, &pd),
                    "conv primitive descriptor")))
        goto out;
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(p->impl, sizeof p->impl, "%s", impl);
    md_ref wm = dnnl_primitive_desc_query_md(
        pd, pass == PASS_BWD_FILTER ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    md_ref sm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if ((rc = dn_ok(md_copy(&p->wmd_prim, wm), "weights descriptor")))
        goto out;
    if (sm && (p->pad_bytes = dnnl_memory_desc_get_size(sm)) &&
        (rc = dn_ok(md_copy(&p->pad_md, sm), "scratchpad descriptor")))
        goto out;
    if ((rc = dn_ok(dnnl_primitive_create(&p->prim, pd), "conv primitive")))
        goto out;

    if (!dnnl_memory_desc_equal(MD(p->wmd_user), MD(p->wmd_prim))) {
        p->wbytes = dnnl_memory_desc_get_size(MD(p->wmd_prim));
        md_ref from = pass == PASS_BWD_FILTER ? MD(p->wmd_prim) : MD(p->wmd_user),
               to = pass == PASS_BWD_FILTER ? MD(p->wmd_user) : MD(p->wmd_prim);
        if ((rc = dn_ok(dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, attr),
                        "weights reorder descriptor")))
            goto out;
        md_ref rs = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
        if (rs && (p->rpad_bytes = dnnl_memory_desc_get_size(rs)) &&
            (rc = dn_ok(md_copy(&p->rpad_md, rs), "reorder scratchpad descriptor")))
            goto out;
        if ((rc = dn_ok(dnnl_primitive_create(&p->reorder, rpd), "weights reorder")))
            goto out;
    }
out:
    dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(hint);
    dnnl_primitive_attr_destroy(attr);
#if DNNL_VERSION_MAJOR >= 3
    if (wany)
        md_free(wany);
    if (hany)
        md_free(hany);
#endif
    if (rc) {
        prim_free(p);
        return sl_fail(rc, "conv_dnnl: %s %s n%d %dx%d c%d k%d %dx%d/%d pad %d: %s",
                       sl_dtype_name(act), pass_name[pass], sh->n, sh->h, sh->w, sh->c, sh->k, sh->r, sh->s,
                       sh->stride, sh->pad, sl_errmsg());
    }
    *out = p;
    return SL_OK;
}

/* The cached primitive of (sh, pass, threads), made on a miss. *owned is 1
 * when the cache was full and the caller must prim_free it. Made under the
 * lock: two replicas missing together make it once. */
static int prim_get(const sl_conv_shape *sh, int pass, int threads, sl_dtype act, dn_prim **out,
                    int *owned)
{
    pthread_once(&eng_once, eng_init);
    if (eng_status != dnnl_success)
        return dn_ok(eng_status, "conv_dnnl: cpu engine");
    *owned = 0;
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < ncache; i++)
        if (cache[i]->pass == pass && cache[i]->threads == threads && cache[i]->act == act &&
            same_shape(&cache[i]->sh, sh)) {
            *out = cache[i];
            pthread_mutex_unlock(&cache_mu);
            return SL_OK;
        }
    int rc = prim_make(sh, pass, threads, act, out);
    if (!rc) {
        if (ncache < CACHE_MAX)
            cache[ncache++] = *out;
        else
            *owned = 1;
    }
    pthread_mutex_unlock(&cache_mu);
    return rc;
}

/* Run one pass: x, w, y are the user's buffers in their roles (for the
 * backward passes y is dy, and x is dx for backward-data, w is dw for
 * backward-filter). */
static int run(sl_exec *e, const sl_conv_shape *sh, int pass, void *x, void *w, void *y)
{
    if (omp_get_max_threads() != e->threads)
        omp_set_num_threads(e->threads);
    dn_prim *p = NULL;
    int owned = 0, rc = prim_get(sh, pass, e->threads, e->act, &p, &owned);
    if (rc)
        return rc;
    dnnl_stream_t stream = NULL;
    dnnl_memory_t mx = NULL, my = NULL, mwu = NULL, mwp = NULL, mpad = NULL, mrpad = NULL;
    size_t wb = ALIGN64(p->wbytes), pb = ALIGN64(p->pad_bytes);
    char *s = sl_exec_scratch(e, wb + pb + ALIGN64(p->rpad_bytes));
    if (!s) {
        rc = sl_fail(SL_ENOMEM, "conv_dnnl: %s scratch: %s", pass_name[pass], sl_errmsg());
        goto out;
    }
    if ((rc = dn_ok(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags), "stream")) ||
        (rc = dn_ok(dnnl_memory_create(&mx, MD(p->xmd), eng, x), "x memory")) ||
        (rc = dn_ok(dnnl_memory_create(&my, MD(p->ymd), eng, y), "y memory")) ||
        (rc = dn_ok(dnnl_memory_create(&mwu, MD(p->wmd_user), eng, w), "w memory")))
        goto out;
    if (!p->reorder)
        mwp = mwu;
    else if ((rc = dn_ok(dnnl_memory_create(&mwp, MD(p->wmd_prim), eng, s),
                         "w memory (kernel format)")))
        goto out;
    if (p->pad_bytes && (rc = dn_ok(dnnl_memory_create(&mpad, MD(p->pad_md), eng, s + wb),
                                    "scratchpad")))
        goto out;
    if (p->rpad_bytes && (rc = dn_ok(dnnl_memory_create(&mrpad, MD(p->rpad_md), eng, s + wb + pb),
                                     "reorder scratchpad")))
        goto out;

    if (p->reorder && pass != PASS_BWD_FILTER) {
        dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, mwu}, {DNNL_ARG_TO, mwp},
                                {DNNL_ARG_SCRATCHPAD, mrpad}};
        if ((rc = dn_ok(dnnl_primitive_execute(p->reorder, stream, mrpad ? 3 : 2, ra),
                        "weights reorder")))
            goto out;
    }
    dnnl_exec_arg_t a[4];
    switch (pass) {
    case PASS_FWD:
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mx};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mwp};
        a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, my};
        break;
    case PASS_BWD_DATA:
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, mx};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mwp};
        a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, my};
        break;
    default:
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mx};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, mwp};
        a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, my};
        break;
    }
    a[3] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mpad};
    if ((rc = dn_ok(dnnl_primitive_execute(p->prim, stream, mpad ? 4 : 3, a), pass_name[pass])))
        goto out;
    if (p->reorder && pass == PASS_BWD_FILTER) {
        dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, mwp}, {DNNL_ARG_TO, mwu},
                                {DNNL_ARG_SCRATCHPAD, mrpad}};
        if ((rc = dn_ok(dnnl_primitive_execute(p->reorder, stream, mrpad ? 3 : 2, ra),
                        "weights reorder")))
            goto out;
    }
    if ((rc = dn_ok(dnnl_stream_wait(stream), "stream wait")))
        goto out;
out:
    if (mwp != mwu)
        dnnl_memory_destroy(mwp);
    dnnl_memory_destroy(mwu);
    dnnl_memory_destroy(mx);
    dnnl_memory_destroy(my);
    dnnl_memory_destroy(mpad);
    dnnl_memory_destroy(mrpad);
    dnnl_stream_destroy(stream);
    if (owned)
        prim_free(p);
    if (rc)
        return sl_fail(rc, "sl_conv_%s_cpu: oneDNN: %s", pass == PASS_FWD ? "fwd"
                           : pass == PASS_BWD_DATA ? "bwd_data" : "bwd_filter", sl_errmsg());
    return SL_OK;
}

/* 8 channels to 8 in bf16 go to conv_c8.c's kernel where oneDNN's ISA has
 * bf16 dot products (so DNNL_MAX_CPU_ISA caps both); c8_ran says which
 * passes it has run, for sl_dnnl_impls. */
static int c8_ran[3];
/* conv_w1x1.c's backward-filter has run (1x1 convs in bf16) */
static int w1x1_ran;

/* *flag = 1 once (replicas share the line: stored only when not yet set);
 * returns 1 */
static int ran(int *flag)
{
    if (!__atomic_load_n(flag, __ATOMIC_RELAXED))
        __atomic_store_n(flag, 1, __ATOMIC_RELAXED);
    return 1;
}

static int take_c8(const sl_exec *e, const sl_conv_shape *sh, int pass)
{
    if (!sl_conv_c8_ok(e, sh) || !sl_dnnl_bf16())
        return 0;
    return ran(&c8_ran[pass]);
}

/* oneDNN takes non-const handles; it does not write the inputs. */

int sl_conv_fwd_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *x, const float *w,
                     float *y)
{
    if (take_c8(e, sh, PASS_FWD))
        return sl_conv_c8(e, sh, (const uint16_t *)x, (const uint16_t *)w, (uint16_t *)y, 0);
    return run(e, sh, PASS_FWD, (void *)x, (void *)w, y);
}

int sl_conv_bwd_data_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *dy, const float *w,
                          float *dx)
{
    if (take_c8(e, sh, PASS_BWD_DATA))
        return sl_conv_c8(e, sh, (const uint16_t *)dy, (const uint16_t *)w, (uint16_t *)dx, 1);
    return run(e, sh, PASS_BWD_DATA, dx, (void *)w, (void *)dy);
}

int sl_conv_bwd_filter_dnnl(sl_exec *e, const sl_conv_shape *sh, const float *x,
                            const float *dy, float *dw)
{
    if (take_c8(e, sh, PASS_BWD_FILTER))
        return sl_conv_c8_filter(e, sh, (const uint16_t *)x, (const uint16_t *)dy, dw);
    if (sl_conv_w1x1_ok(e, sh) && sl_dnnl_bf16() && ran(&w1x1_ran))
        return sl_conv_w1x1_filter(e, sh, (const uint16_t *)x, (const uint16_t *)dy, dw);
    return run(e, sh, PASS_BWD_FILTER, (void *)x, dw, (void *)dy);
}

static char describe_buf[64];

static void describe_once(void)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(describe_buf, sizeof describe_buf, "oneDNN %d.%d.%d (OpenMP)", v->major, v->minor,
             v->patch);
}

/* "oneDNN 2.6.3 (OpenMP)": the library this process runs (sluice --version). */
const char *sl_dnnl_describe(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, describe_once);
    return describe_buf;
}

/* ------------------------------------------------------------ the ISA */

/* oneDNN's effective ISA: the CPU's, capped by ONEDNN_MAX_CPU_ISA /
 * DNNL_MAX_CPU_ISA (2.6 reads the latter) when set. Its bits include
 * those of every ISA it extends (dnnl_types.h), so avx512_core_amx has
 * avx512_core_bf16's. */
const char *sl_dnnl_isa(void)
{
    const char *s = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    return strncmp(s, "cpu_isa_", 8) ? s : s + 8; /* 2.6 says "cpu_isa_avx512_core_bf16" */
}

int sl_dnnl_bf16(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

/* Append "; one" (or one, first) to buf at *len; 0, and buf as it was,
 * when it does not fit in cap. */
static int add_entry(char *buf, size_t cap, size_t *len, const char *one)
{
    int n = snprintf(buf + *len, cap - *len, "%s%s", *len ? "; " : "", one);
    if (n < 0 || (size_t)n >= cap - *len) {
        buf[*len] = 0;
        return 0;
    }
    *len += (size_t)n;
    return 1;
}

/* The distinct implementations of the cached primitives, "pass dtype
 * impl" joined by "; ", in the order first made, then conv_c8.c's passes
 * that ran ("forward bf16 sluice_c8:avx512_bf16"). */

void sl_dnnl_impls(char *buf, size_t cap)
{
    size_t len = 0;
    if (!cap)
        return;
    buf[0] = 0;
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < ncache; i++) {
        char one[96];
        snprintf(one, sizeof one, "%s %s %s", pass_name[cache[i]->pass],
                 sl_dtype_name(cache[i]->act), cache[i]->impl);
        if (strstr(buf, one))
            continue;
        if (!add_entry(buf, cap, &len, one))
            break;
    }
    pthread_mutex_unlock(&cache_mu);
    for (int pass = 0; pass < 3; pass++) {
        char one[96];
        snprintf(one, sizeof one, "%s bf16 sluice_c8:avx512_bf16", pass_name[pass]);
        if (__atomic_load_n(&c8_ran[pass], __ATOMIC_RELAXED) && !add_entry(buf, cap, &len, one))
            return;
    }
    if (__atomic_load_n(&w1x1_ran, __ATOMIC_RELAXED))
        add_entry(buf, cap, &len, "backward-filter bf16 sluice_1x1:avx512_bf16");
}

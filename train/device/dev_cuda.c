/*
 * train/device/dev_cuda.c - train/device/dev_int.h on the CUDA runtime: device memory,
 * the pipeline feed, the loss accumulated on the device and the device
 * optimizer (dev_int.h has the design). Built with the cuda backend
 * (CMakeLists.txt builds the train *_cuda.c files with it); dev_none.c
 * replaces it otherwise.
 *
 * Execs of the ref and cpu backends work here too: their "device" memory
 * is host memory, as in dev_none.c.
 *
 * Streams. Everything is enqueued on the exec's stream (ctx->stream, a
 * non-blocking stream: it does not serialize with the legacy default
 * stream), so copies use cudaMemcpyAsync on it and a stream synchronize
 * where the host needs the data.
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"
#include "train/device/dev_int.h"
#include "train/model/model_int.h"
#include "train/device/sgd_cuda.h"

/* ------------------------------------------------------------- memory */

int sl_dev_on_device(const sl_exec *e) { return e && e->backend == SL_BACKEND_CUDA; }

int sl_dev_device(const sl_exec *e) { return sl_dev_on_device(e) ? sl_cuda_of((sl_exec *)e)->device : -1; }

void *sl_dev_stream(const sl_exec *e)
{
    return sl_dev_on_device(e) ? (void *)sl_cuda_of((sl_exec *)e)->stream : NULL;
}

static int host_alloc(size_t bytes, void **out)
{
    size_t cap = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap ? cap : 64))
        return sl_fail(SL_ENOMEM, "sl_dev_alloc: %zu bytes of host memory", bytes);
    memset(p, 0, cap ? cap : 64);
    *out = p;
    return SL_OK;
}

int sl_dev_alloc(sl_exec *e, size_t bytes, void **out)
{
    *out = NULL;
    if (!sl_dev_on_device(e))
        return host_alloc(bytes, out);
    sl_cuda_ctx *c = sl_cuda_of(e);
    void *p = NULL;
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(c->device))))
        return rc;
    if ((rc = sl_cuda_malloc(c, bytes, &p)))
        return sl_fail(rc, "sl_dev_alloc: %s", sl_errmsg());
    if ((rc = SL_CUDA(cudaMemsetAsync(p, 0, bytes ? bytes : 64, c->stream))) ||
        (rc = SL_CUDA(cudaStreamSynchronize(c->stream)))) {
        sl_cuda_free(c, p);
        return rc;
    }
    *out = p;
    return SL_OK;
}

void sl_dev_free(sl_exec *e, void *p)
{
    if (!p)
        return;
    if (sl_dev_on_device(e))
        sl_cuda_free(sl_cuda_of(e), p);
    else
        free(p);
}

int sl_dev_mem(sl_exec *e, sl_dev_mem_info *out)
{
    memset(out, 0, sizeof *out);
    if (!sl_dev_on_device(e))
        return SL_OK;
    sl_cuda_ctx *c = sl_cuda_of(e);
    size_t fr = 0, tot = 0;
    int rc;
    if ((rc = SL_CUDA(cudaSetDevice(c->device))) || (rc = SL_CUDA(cudaMemGetInfo(&fr, &tot))))
        return rc;
    out->live = c->mem_live, out->peak = c->mem_peak;
    out->device_used = tot - fr, out->device_total = tot;
    return SL_OK;
}

/* A copy on e's stream, waited for (a plain move for host execs). */
static int copy_sync(sl_exec *e, void *dst, const void *src, size_t bytes,
                     enum cudaMemcpyKind kind)
{
    if (!sl_dev_on_device(e)) {
        memmove(dst, src, bytes);
        return SL_OK;
    }
    cudaStream_t s = sl_cuda_of(e)->stream;
    int rc;
    if ((rc = SL_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, s))) ||
        (rc = SL_CUDA(cudaStreamSynchronize(s))))
        return rc;
    return SL_OK;
}

int sl_dev_copy_in(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    return copy_sync(e, dst, src, bytes, cudaMemcpyHostToDevice);
}

int sl_dev_copy_out(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    return copy_sync(e, dst, src, bytes, cudaMemcpyDeviceToHost);
}

int sl_dev_cast(sl_exec *e, int64_t n, const float *src, void *dst, sl_dtype dt)
{
    if (!sl_dev_on_device(e)) {
        if (dt != SL_DTYPE_F32)
            return sl_fail(SL_ENOTSUP, "sl_dev_cast: host memory holds f32 only");
        memmove(dst, src, (size_t)n * sizeof(float));
        return SL_OK;
    }
    return sl_cast_cuda(e, n, src, SL_DTYPE_F32, dst, dt);
}

int sl_dev_copy(sl_exec *e, void *dst, const void *src, size_t bytes)
{
    if (!sl_dev_on_device(e)) {
        memmove(dst, src, bytes);
        return SL_OK;
    }
    return SL_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                   sl_cuda_of(e)->stream));
}

int sl_dev_sync(sl_exec *e)
{
    if (!sl_dev_on_device(e))
        return SL_OK;
    return SL_CUDA(cudaStreamSynchronize(sl_cuda_of(e)->stream));
}

/* --------------------------------------------------------------- feed */

struct sl_dev_feed {
    sl_exec *e;
    int max_batch, h, w;
    float mean[3], std[3];
    void *d_x;             /* (max_batch, h, w, 3) in e->act */
    int32_t *d_labels;
    int32_t *h_labels;     /* pinned staging of the labels */
    cudaEvent_t consumed;  /* recorded after the last put's normalization and label copy */
    int has_event;
    int pending;           /* a put not yet followed by done */
};

int sl_dev_feed_create(sl_exec *e, int max_batch, int h, int w, const float mean[3],
                       const float std[3], sl_dev_feed **out)
{
    const char *fn = "sl_dev_feed_create";
    *out = NULL;
    if (!sl_dev_on_device(e))
        return sl_fail(SL_ENOTSUP, "%s: the %s backend takes host batches", fn,
                       sl_backend_name(e->backend));
    if (max_batch < 1 || h < 1 || w < 1)
        return sl_fail(SL_EINVAL, "%s: bad batch %d or size %dx%d", fn, max_batch, h, w);
    sl_dev_feed *f = calloc(1, sizeof *f);
    if (!f)
        return sl_fail(SL_ENOMEM, "%s: feed struct", fn);
    f->e = e, f->max_batch = max_batch, f->h = h, f->w = w;
    memcpy(f->mean, mean, sizeof f->mean);
    memcpy(f->std, std, sizeof f->std);
    size_t xb = (size_t)max_batch * h * w * 3 * sl_exec_act_size(e);
    int rc;
    if ((rc = sl_dev_alloc(e, xb, &f->d_x)) ||
        (rc = sl_dev_alloc(e, (size_t)max_batch * sizeof(int32_t), (void **)&f->d_labels)) ||
        (rc = SL_CUDA(cudaHostAlloc((void **)&f->h_labels, (size_t)max_batch * sizeof(int32_t),
                                    cudaHostAllocDefault))) ||
        (rc = SL_CUDA(cudaEventCreateWithFlags(&f->consumed, cudaEventDisableTiming)))) {
        sl_dev_feed_destroy(f);
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    }
    f->has_event = 1;
    *out = f;
    return SL_OK;
}

void sl_dev_feed_destroy(sl_dev_feed *f)
{
    if (!f)
        return;
    if (f->has_event) {
        (void)cudaEventSynchronize(f->consumed);
        cudaEventDestroy(f->consumed);
    }
    if (f->h_labels)
        cudaFreeHost(f->h_labels);
    sl_dev_free(f->e, f->d_labels);
    sl_dev_free(f->e, f->d_x);
    free(f);
}

int sl_dev_feed_put(sl_dev_feed *f, const sl_batch *b, int classes, const void **x,
                    const int32_t **labels)
{
    const char *fn = "sl_dev_feed_put";
    if (f->pending)
        return sl_fail(SL_EINVAL, "%s: the previous batch was not marked done", fn);
    if (!b->d_data || b->layout != SL_LAYOUT_NHWC_U8)
        return sl_fail(SL_EINVAL, "%s: batch %llu is not a device NHWC u8 batch (the pipeline "
                       "needs device >= 0 and layout nhwc-u8)", fn,
                       (unsigned long long)b->index);
    if ((int)b->n > f->max_batch || b->height != f->h || b->width != f->w)
        return sl_fail(SL_EINVAL, "%s: batch %llu is %u x %dx%d, the feed takes %d x %dx%d", fn,
                       (unsigned long long)b->index, b->n, b->height, b->width, f->max_batch,
                       f->h, f->w);
    int rc;
    if ((rc = sl_labels_check("sl_train_run", b, classes)))
        return rc;
    for (unsigned i = 0; i < b->n; i++)
        f->h_labels[i] = b->labels[i];
    sl_exec *e = f->e;
    cudaStream_t s = sl_cuda_of(e)->stream;
    if (b->ready_event &&
        (rc = SL_CUDA(cudaStreamWaitEvent(s, (cudaEvent_t)b->ready_event, 0))))
        return rc;
    if ((rc = sl_cuda_normalize(b->d_data, b->n, f->h, f->w, f->mean, f->std,
                                SL_LAYOUT_NHWC_F32, e->act, f->d_x, s)))
        return sl_fail(rc, "%s: batch %llu: %s", fn, (unsigned long long)b->index, sl_errmsg());
    if ((rc = SL_CUDA(cudaMemcpyAsync(f->d_labels, f->h_labels, b->n * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s))) ||
        (rc = SL_CUDA(cudaEventRecord(f->consumed, s))))
        return rc;
    f->pending = 1;
    *x = f->d_x;
    *labels = f->d_labels;
    return SL_OK;
}

int sl_dev_feed_done(sl_dev_feed *f)
{
    if (!f->pending)
        return SL_OK;
    f->pending = 0;
    return SL_CUDA(cudaEventSynchronize(f->consumed));
}

/* --------------------------------------------------------------- loss */

int sl_dev_xent_acc(sl_exec *e, int n, int classes, const float *logits,
                    const int32_t *labels, float smoothing, const float *d_scale,
                    float *dlogits, double *acc)
{
    if (!sl_dev_on_device(e))
        return sl_fail(SL_ENOTSUP, "sl_dev_xent_acc: %s backend", sl_backend_name(e->backend));
    return sl_xent_acc_cuda(e, n, classes, logits, labels, smoothing, d_scale, dlogits, acc);
}

int sl_dev_loss_take(sl_exec *e, double *acc, double out[2])
{
    int rc;
    if ((rc = sl_dev_copy_out(e, out, acc, 2 * sizeof(double))))
        return rc;
    if (!sl_dev_on_device(e)) {
        acc[0] = acc[1] = 0;
        return SL_OK;
    }
    return SL_CUDA(cudaMemsetAsync(acc, 0, 2 * sizeof(double), sl_cuda_of(e)->stream));
}

/* ---------------------------------------------------------- optimizer */

struct sl_dev_sgd {
    sl_exec *e;
    sl_sgd_config cfg;
    sl_sgd *o;
    sl_model *m;
    int n;                    /* param tensors */
    sl_sgd_cuda_tensor *d_t;  /* their table in device memory */
    float **h_mom;            /* o's host momentum buffers, param order */
    float **d_mom;            /* the device ones */
    int64_t *numel;
    int64_t *step;            /* o's "optimizer.step" */
    float *d_mom_arena;
    sl_amp_state *d_amp;      /* fp16 loss scaling; NULL otherwise */
    float *d_lr;              /* the learning rate the kernel reads */
    float *h_lr;              /* LR_SLOTS pinned staging slots of it, in turn */
    cudaEvent_t lr_done[8];   /* recorded after each slot's copy */
    int lr_events, lr_next;
};

/* Pinned slots of the learning rate: the host runs at most this many
 * steps ahead of the device (sl_dev_sgd_set_lr waits for the copy that
 * last used the slot). */
#define LR_SLOTS 4

/* The loss scale torch.cuda.amp.GradScaler starts from, and its rules. */
#define AMP_INIT_SCALE 65536.0f
#define AMP_GROWTH 2.0f
#define AMP_BACKOFF 0.5f
#define AMP_INTERVAL 2000

int sl_dev_sgd_create(sl_exec *e, const sl_sgd_config *cfg, sl_sgd *o, sl_model *m,
                      sl_dev_sgd **out)
{
    const char *fn = "sl_dev_sgd_create";
    *out = NULL;
    if (!sl_dev_on_device(e) || !m->dev_e)
        return sl_fail(SL_EINVAL, "%s: the model is not on a cuda device", fn);
    int nt, ns, rc;
    sl_tensor_info *t = sl_model_tensors(m, &nt);
    sl_tensor_info *st = sl_sgd_tensors(o, &ns);
    sl_dev_sgd *d = calloc(1, sizeof *d);
    if (!d)
        return sl_fail(SL_ENOMEM, "%s: struct", fn);
    d->e = e, d->cfg = *cfg, d->o = o, d->m = m, d->n = ns - 1;
    d->step = (int64_t *)st[ns - 1].data;
    sl_sgd_cuda_tensor *ht = calloc((size_t)d->n + 1, sizeof *ht);
    d->h_mom = calloc((size_t)d->n + 1, sizeof *d->h_mom);
    d->d_mom = calloc((size_t)d->n + 1, sizeof *d->d_mom);
    d->numel = calloc((size_t)d->n + 1, sizeof *d->numel);
    if (!ht || !d->h_mom || !d->d_mom || !d->numel) {
        rc = sl_fail(SL_ENOMEM, "%s: tables for %d tensors", fn, d->n);
        goto fail;
    }
    int64_t total = 0;
    for (int k = 0; k < d->n; k++)
        total += (st[k].numel + 15) & ~(int64_t)15;
    if ((rc = sl_dev_alloc(e, (size_t)(total > 0 ? total : 1) * sizeof(float),
                           (void **)&d->d_mom_arena)))
        goto fail;
    int64_t off = 0;
    int k = 0;
    for (int i = 0; i < nt && k <= d->n; i++) {
        if (!(t[i].flags & SL_TENSOR_PARAM))
            continue;
        if (k == d->n || st[k].numel != t[i].numel) {
            rc = sl_fail(SL_EINVAL, "%s: %s: the optimizer does not match the model", fn,
                         t[i].name);
            goto fail;
        }
        int64_t at = (const float *)t[i].data - m->h_params; /* offset in both arenas */
        ht[k] = (sl_sgd_cuda_tensor){m->params + at, m->grads + at, d->d_mom_arena + off,
                                     t[i].numel, (t[i].flags & SL_TENSOR_DECAY) != 0};
        d->h_mom[k] = st[k].data;
        d->d_mom[k] = d->d_mom_arena + off;
        d->numel[k] = st[k].numel;
        off += (st[k].numel + 15) & ~(int64_t)15;
        k++;
    }
    if (k != d->n) {
        rc = sl_fail(SL_EINVAL, "%s: %d params in the model, %d in the optimizer", fn, k, d->n);
        goto fail;
    }
    if ((rc = sl_dev_alloc(e, (size_t)(d->n > 0 ? d->n : 1) * sizeof *ht, (void **)&d->d_t)) ||
        (rc = sl_dev_copy_in(e, d->d_t, ht, (size_t)d->n * sizeof *ht)) ||
        (rc = sl_dev_alloc(e, sizeof(float), (void **)&d->d_lr)) ||
        (rc = SL_CUDA(cudaHostAlloc((void **)&d->h_lr, LR_SLOTS * sizeof(float),
                                    cudaHostAllocDefault))) ||
        (rc = sl_dev_sgd_push(d)))
        goto fail;
    for (; d->lr_events < LR_SLOTS; d->lr_events++)
        if ((rc = SL_CUDA(cudaEventCreateWithFlags(&d->lr_done[d->lr_events],
                                                   cudaEventDisableTiming))))
            goto fail;
    if (e->act == SL_DTYPE_F16) {
        sl_amp_state a = {AMP_INIT_SCALE, 0, 0, 0};
        if ((rc = sl_dev_alloc(e, sizeof a, (void **)&d->d_amp)) ||
            (rc = sl_dev_copy_in(e, d->d_amp, &a, sizeof a)))
            goto fail;
    }
    free(ht);
    *out = d;
    return SL_OK;
fail:
    free(ht);
    sl_dev_sgd_destroy(d);
    return rc;
}

void sl_dev_sgd_destroy(sl_dev_sgd *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->lr_events; i++) {
        (void)cudaEventSynchronize(d->lr_done[i]);
        cudaEventDestroy(d->lr_done[i]);
    }
    if (d->h_lr)
        cudaFreeHost(d->h_lr);
    sl_dev_free(d->e, d->d_lr);
    sl_dev_free(d->e, d->d_t);
    sl_dev_free(d->e, d->d_mom_arena);
    sl_dev_free(d->e, d->d_amp);
    free(d->h_mom);
    free(d->d_mom);
    free(d->numel);
    free(d);
}

int sl_dev_sgd_set_lr(sl_dev_sgd *d, float lr)
{
    if (!(lr >= 0.0f) || lr > 1e30f)
        return sl_fail(SL_EINVAL, "sl_dev_sgd_set_lr: bad learning rate %g", (double)lr);
    cudaStream_t s = sl_cuda_of(d->e)->stream;
    int k = d->lr_next, rc;
    d->lr_next = (k + 1) % LR_SLOTS;
    /* the slot's last copy has run (or was never recorded: complete) */
    if ((rc = SL_CUDA(cudaEventSynchronize(d->lr_done[k]))))
        return rc;
    d->h_lr[k] = lr;
    if ((rc = SL_CUDA(cudaMemcpyAsync(d->d_lr, &d->h_lr[k], sizeof(float),
                                      cudaMemcpyHostToDevice, s))) ||
        (rc = SL_CUDA(cudaEventRecord(d->lr_done[k], s))))
        return rc;
    return SL_OK;
}

int sl_dev_sgd_enqueue(sl_dev_sgd *d)
{
    sl_exec *e = d->e;
    sl_model *m = d->m;
    int rc;
    if (d->d_amp && (rc = sl_amp_check_cuda(e, m->grads, m->arena_floats, d->d_amp)))
        return rc;
    if ((rc = sl_sgd_step_cuda_lr(e, d->d_t, d->n, d->d_lr, d->cfg.momentum,
                                  d->cfg.weight_decay, d->cfg.nesterov, *d->step == 0,
                                  d->d_amp)))
        return rc;
    if (d->d_amp &&
        (rc = sl_amp_update_cuda(e, d->d_amp, AMP_GROWTH, AMP_BACKOFF, AMP_INTERVAL)))
        return rc;
    return sl_model_refresh(m);
}

/* A skipped fp16 step still counts (torch's optimizer.step is not called
 * then, but the momentum buffers start at zero, so buf = g on the first
 * applied step either way). */
void sl_dev_sgd_count(sl_dev_sgd *d) { (*d->step)++; }

int64_t sl_dev_sgd_steps(const sl_dev_sgd *d) { return *d->step; }

int sl_dev_sgd_step(sl_dev_sgd *d, float lr)
{
    int rc;
    if ((rc = sl_dev_sgd_set_lr(d, lr)) || (rc = sl_dev_sgd_enqueue(d)))
        return rc;
    sl_dev_sgd_count(d);
    return SL_OK;
}

const float *sl_dev_sgd_scale(sl_dev_sgd *d) { return d && d->d_amp ? &d->d_amp->scale : NULL; }

int sl_dev_sgd_skipped(sl_dev_sgd *d, int64_t *skipped, float *scale)
{
    *skipped = 0, *scale = 1.0f;
    if (!d->d_amp)
        return SL_OK;
    sl_amp_state a;
    int rc = sl_dev_copy_out(d->e, &a, d->d_amp, sizeof a);
    if (rc)
        return rc;
    *skipped = a.skipped, *scale = a.scale;
    return SL_OK;
}

int sl_dev_sgd_pull(sl_dev_sgd *d)
{
    for (int k = 0; k < d->n; k++) {
        int rc = sl_dev_copy_out(d->e, d->h_mom[k], d->d_mom[k],
                                 (size_t)d->numel[k] * sizeof(float));
        if (rc)
            return rc;
    }
    return SL_OK;
}

int sl_dev_sgd_push(sl_dev_sgd *d)
{
    for (int k = 0; k < d->n; k++) {
        int rc = sl_dev_copy_in(d->e, d->d_mom[k], d->h_mom[k],
                                (size_t)d->numel[k] * sizeof(float));
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* -------------------------------------------------------- CUDA graphs */

struct sl_dev_graph {
    sl_exec *e;
    cudaGraphExec_t exec;
    unsigned gen; /* the context's mem_gen at the capture */
};

int sl_dev_graph_wanted(sl_exec *e) { return sl_dev_on_device(e) && sl_cuda_of(e)->graph; }

int sl_dev_capture_begin(sl_exec *e)
{
    if (!sl_dev_on_device(e))
        return sl_fail(SL_ENOTSUP, "sl_dev_capture_begin: %s backend", sl_backend_name(e->backend));
    int rc = SL_CUDA(cudaStreamBeginCapture(sl_cuda_of(e)->stream,
                                            cudaStreamCaptureModeThreadLocal));
    return rc ? sl_fail(rc, "sl_dev_capture_begin: %s", sl_errmsg()) : SL_OK;
}

int sl_dev_capture_end(sl_exec *e, int ok, sl_dev_graph **out)
{
    *out = NULL;
    sl_cuda_ctx *c = sl_cuda_of(e);
    cudaGraph_t g = NULL;
    cudaError_t ce = cudaStreamEndCapture(c->stream, &g);
    int rc;
    if (ce != cudaSuccess || !g) {
        (void)cudaGetLastError();
        if (g)
            cudaGraphDestroy(g);
        return sl_fail(SL_ECUDA, "sl_dev_capture_end: cudaStreamEndCapture: %s%s",
                       cudaGetErrorString(ce), ok ? "" : " (after a failed call)");
    }
    if (!ok) {
        cudaGraphDestroy(g);
        return sl_fail(SL_ECUDA, "sl_dev_capture_end: a call failed while capturing");
    }
    sl_dev_graph *dg = calloc(1, sizeof *dg);
    if (!dg) {
        cudaGraphDestroy(g);
        return sl_fail(SL_ENOMEM, "sl_dev_capture_end: out of memory");
    }
    rc = SL_CUDA(cudaGraphInstantiate(&dg->exec, g, 0));
    cudaGraphDestroy(g);
    if (rc) {
        free(dg);
        return sl_fail(rc, "sl_dev_capture_end: %s", sl_errmsg());
    }
    dg->e = e;
    dg->gen = c->mem_gen;
    *out = dg;
    return SL_OK;
}

int sl_dev_graph_launch(sl_dev_graph *g)
{
    return SL_CUDA(cudaGraphLaunch(g->exec, sl_cuda_of(g->e)->stream));
}

int sl_dev_graph_stale(const sl_dev_graph *g) { return g->gen != sl_cuda_of(g->e)->mem_gen; }

int sl_dev_capture_intact(sl_exec *e)
{
    if (!sl_dev_on_device(e))
        return SL_OK;
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t ce = cudaStreamIsCapturing(sl_cuda_of(e)->stream, &st);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return sl_fail(SL_ECUDA, "sl_dev_capture_intact: cudaStreamIsCapturing: %s",
                       cudaGetErrorString(ce));
    }
    if (st == cudaStreamCaptureStatusInvalidated)
        return sl_fail(SL_ECUDA, "sl_dev_capture_intact: the stream's capture was invalidated "
                       "(a call the driver refuses while capturing)");
    return SL_OK;
}

void sl_dev_graph_destroy(sl_dev_graph *g)
{
    if (!g)
        return;
    (void)cudaStreamSynchronize(sl_cuda_of(g->e)->stream); /* no replay in flight */
    cudaGraphExecDestroy(g->exec);
    free(g);
}

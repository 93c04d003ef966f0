/*
 * train/device/dev_sgd_cuda.c - dev_int.h's device optimizer: momentum
 * buffers in device memory and sl_sgd_step_cuda (sgd_cuda.cu) over the
 * model's device params, the learning rate through a ring of pinned
 * slots, fp16's dynamic loss scale (torch.cuda.amp.GradScaler's rules),
 * and the copies to and from the host sl_sgd a checkpoint holds. Built
 * with the cuda backend; dev_none.c replaces it otherwise.
 *
 * Threading: an exec's thread (dev_int.h).
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"
#include "train/device/dev_int.h"
#include "train/model/model_int.h"
#include "train/device/sgd_cuda.h"

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
    if (!sl_mem_on_device(e) || !m->dev_e)
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
    if ((rc = sl_mem_alloc(e, (size_t)(total > 0 ? total : 1) * sizeof(float),
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
    if ((rc = sl_mem_alloc(e, (size_t)(d->n > 0 ? d->n : 1) * sizeof *ht, (void **)&d->d_t)) ||
        (rc = sl_mem_copy_in(e, d->d_t, ht, (size_t)d->n * sizeof *ht)) ||
        (rc = sl_mem_alloc(e, sizeof(float), (void **)&d->d_lr)) ||
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
        if ((rc = sl_mem_alloc(e, sizeof a, (void **)&d->d_amp)) ||
            (rc = sl_mem_copy_in(e, d->d_amp, &a, sizeof a)))
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
    sl_mem_free(d->e, d->d_lr);
    sl_mem_free(d->e, d->d_t);
    sl_mem_free(d->e, d->d_mom_arena);
    sl_mem_free(d->e, d->d_amp);
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
    int rc = sl_mem_copy_out(d->e, &a, d->d_amp, sizeof a);
    if (rc)
        return rc;
    *skipped = a.skipped, *scale = a.scale;
    return SL_OK;
}

int sl_dev_sgd_pull(sl_dev_sgd *d)
{
    for (int k = 0; k < d->n; k++) {
        int rc = sl_mem_copy_out(d->e, d->h_mom[k], d->d_mom[k],
                                 (size_t)d->numel[k] * sizeof(float));
        if (rc)
            return rc;
    }
    return SL_OK;
}

int sl_dev_sgd_push(sl_dev_sgd *d)
{
    for (int k = 0; k < d->n; k++) {
        int rc = sl_mem_copy_in(d->e, d->d_mom[k], d->h_mom[k],
                                (size_t)d->numel[k] * sizeof(float));
        if (rc)
            return rc;
    }
    return SL_OK;
}

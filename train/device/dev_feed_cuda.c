/*
 * train/device/dev_feed_cuda.c - dev_int.h's feed on the CUDA runtime: a
 * device batch from the pipeline's load stage becomes the model's input
 * (normalized into the exec's activation type on its stream) and its
 * labels, checked on the host (dev_labels.c) and copied up through pinned
 * staging; the host stays at most one step ahead (dev_int.h has the
 * design). Built with the cuda backend; dev_none.c replaces it otherwise.
 *
 * Threading: an exec's thread (dev_int.h).
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"
#include "train/device/dev_int.h"

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
    if (!sl_mem_on_device(e))
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
    if ((rc = sl_mem_alloc(e, xb, &f->d_x)) ||
        (rc = sl_mem_alloc(e, (size_t)max_batch * sizeof(int32_t), (void **)&f->d_labels)) ||
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
    sl_mem_free(f->e, f->d_labels);
    sl_mem_free(f->e, f->d_x);
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

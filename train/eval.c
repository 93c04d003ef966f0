/*
 * train/eval.c - top-1 / top-5 / loss of a model over every record of a
 * split, read in order with the eval transform.
 *
 * The pipeline hands NHWC f32 batches; the model runs in inference mode
 * (running batch-norm statistics), so the result does not depend on the
 * batch size. Top-k counts a sample as right when its label is among the k
 * largest logits, ties going to the lower class index (torch.topk's order
 * for equal values is unspecified; this one is at least stable).
 *
 * Threading: the caller's thread drives the model; the pipeline runs its
 * own threads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/train.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Rank of the label's logit among the row: how many classes beat it. */
static int label_rank(const float *row, int classes, int label)
{
    float v = row[label];
    int rank = 0;
    for (int j = 0; j < classes; j++)
        if (row[j] > v || (row[j] == v && j < label))
            rank++;
    return rank;
}

int sl_eval_run(sl_model *m, sl_exec *e, const sl_pipeline_config *data, sl_eval_result *res)
{
    memset(res, 0, sizeof *res);
    const sl_model_config *mc = sl_model_config_of(m);
    int classes = mc->classes, mh, mw;
    sl_model_input_size(m, &mh, &mw);
    if (data->height != mh || data->width != mw || data->layout != SL_LAYOUT_NHWC_F32)
        return sl_fail(SL_EINVAL, "sl_eval_run: the pipeline gives %dx%d %s batches, the model "
                       "takes %dx%d NHWC f32", data->height, data->width,
                       data->layout == SL_LAYOUT_NHWC_F32 ? "NHWC f32" : "non-NHWC-f32", mh, mw);
    double t0 = now_s();
    sl_pipeline *p = NULL;
    float *dlogits = NULL;
    int32_t *labels = NULL;
    int rc = sl_pipeline_create(data, &p);
    if (rc)
        return rc;
    dlogits = malloc(sizeof(float) * (size_t)data->batch * (size_t)classes);
    labels = malloc(sizeof(int32_t) * data->batch);
    if (!dlogits || !labels) {
        rc = sl_fail(SL_ENOMEM, "sl_eval_run: %u x %d logits", data->batch, classes);
        goto out;
    }
    double loss_sum = 0;
    int64_t top1 = 0, top5 = 0;
    for (;;) {
        sl_batch *b;
        rc = sl_pipeline_next(p, &b);
        if (rc == SL_EOF) {
            rc = SL_OK;
            break;
        }
        if (rc)
            goto out;
        const float *logits;
        int n = (int)b->n;
        for (int i = 0; i < n; i++) {
            labels[i] = b->labels[i];
            if (labels[i] < 0 || labels[i] >= classes) {
                sl_pipeline_release(p, b);
                rc = sl_fail(SL_EINVAL, "sl_eval_run: record %llu has label %d, the model has "
                             "%d classes", (unsigned long long)b->record_ids[i], labels[i],
                             classes);
                goto out;
            }
        }
        rc = sl_model_forward(m, e, (const float *)b->data, n, 0, &logits);
        sl_pipeline_release(p, b);
        if (rc)
            goto out;
        float loss;
        rc = e->ops->xent_fwd_bwd(e, n, classes, logits, labels, 0.0f, &loss, dlogits, NULL);
        if (rc)
            goto out;
        loss_sum += (double)loss * n;
        for (int i = 0; i < n; i++) {
            int r = label_rank(logits + (size_t)i * classes, classes, labels[i]);
            top1 += r < 1;
            top5 += r < 5;
        }
        res->images += n;
    }
    if (res->images > 0) {
        res->top1 = (double)top1 / (double)res->images;
        res->top5 = (double)top5 / (double)res->images;
        res->loss = loss_sum / (double)res->images;
    }
out:
    res->seconds = now_s() - t0;
    free(dlogits);
    free(labels);
    sl_pipeline_destroy(p);
    return rc;
}

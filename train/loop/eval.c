/*
 * train/loop/eval.c - top-1 / top-5 / loss of a model over every record of a
 * split, read in order with the eval transform.
 *
 * The pipeline hands NHWC f32 batches; the model runs in inference mode
 * (running batch-norm statistics), so the result does not depend on the
 * batch size. Top-k counts a sample as right when its label is among the k
 * largest logits, ties going to the lower class index (torch.topk's order
 * for equal values is unspecified; this one is at least stable).
 *
 * On a device (a placed model, cuda exec) the pipeline copies u8 batches
 * to the GPU and the feed normalizes them there (train/device/dev_int.h); the
 * logits come back to the host, where the loss and the ranks are taken.
 *
 * Bad records (on_error skip) are left out by the eval transform's
 * pipeline (a batch is then shorter, possibly empty) and counted in the
 * result: top-1 is over the good records, each once.
 *
 * Threading: the caller's thread drives the model; the pipeline runs its
 * own threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "train/device/dev_int.h"
#include "train/train.h"

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

/* Softmax cross-entropy of one row (no smoothing), in double. */
static double row_xent(const float *row, int classes, int label)
{
    double mx = row[0], s = 0;
    for (int j = 1; j < classes; j++)
        mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < classes; j++)
        s += exp((double)row[j] - mx);
    return log(s) + mx - (double)row[label];
}

int sl_eval_run(sl_model *m, sl_exec *e, const sl_pipeline_config *data_in,
                sl_eval_result *res)
{
    memset(res, 0, sizeof *res);
    const sl_model_config *mc = sl_model_config_of(m);
    int classes = mc->classes, mh, mw, dev = sl_mem_on_device(e);
    sl_model_input_size(m, &mh, &mw);
    sl_pipeline_config dd = *data_in;
    const sl_pipeline_config *data = &dd;
    if (dev) {
        dd.device = sl_mem_device(e);
        dd.layout = SL_LAYOUT_NHWC_U8;
    }
    if (data->height != mh || data->width != mw ||
        data->layout != (dev ? SL_LAYOUT_NHWC_U8 : SL_LAYOUT_NHWC_F32))
        return sl_fail(SL_EINVAL, "sl_eval_run: the pipeline gives %dx%d %s batches, the model "
                       "takes %dx%d NHWC f32", data->height, data->width,
                       data->layout == SL_LAYOUT_NHWC_F32 ? "NHWC f32" : "non-NHWC-f32", mh, mw);
    double t0 = sl_now_s();
    sl_pipeline *p = NULL;
    sl_dev_feed *feed = NULL;
    float *dlogits = NULL;
    int32_t *labels = NULL;
    int rc = sl_pipeline_create(data, &p);
    if (rc)
        return rc;
    if (dev && (rc = sl_dev_feed_create(e, (int)data->batch, mh, mw, data->mean, data->std,
                                        &feed)))
        goto out;
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
        if (n == 0) { /* every record of the batch was bad (left out) */
            sl_pipeline_release(p, b);
            continue;
        }
        if ((rc = sl_labels_check("sl_eval_run", b, classes))) {
            sl_pipeline_release(p, b);
            goto out;
        }
        for (int i = 0; i < n; i++)
            labels[i] = b->labels[i];
        if (dev) {
            /* dlogits holds the logits copied back */
            const void *x;
            const int32_t *dl;
            if (!(rc = sl_dev_feed_put(feed, b, classes, &x, &dl)) &&
                !(rc = sl_model_forward(m, e, x, n, 0, &logits)))
                rc = sl_mem_copy_out(e, dlogits, logits, sizeof(float) * (size_t)n * classes);
            int r2 = sl_dev_feed_done(feed);
            rc = rc ? rc : r2;
            logits = dlogits;
        } else {
            rc = sl_model_forward(m, e, (const float *)b->data, n, 0, &logits);
        }
        sl_pipeline_release(p, b);
        if (rc)
            goto out;
        for (int i = 0; i < n; i++)
            loss_sum += row_xent(logits + (size_t)i * classes, classes, labels[i]);
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
    /* the bad records the pipeline left out (never refilled under the eval
     * transform, so the figures above count each good record once) */
    sl_pipeline_stats st;
    if ((rc = sl_pipeline_stats_get(p, &st)))
        goto out;
    if ((rc = sl_pipeline_tuning_get(p, &res->tuning)))
        goto out;
    res->skipped = (int64_t)st.bad_records_out; /* all of bad_records: the run is over */
    if (st.bad_records)
        snprintf(res->skipped_first, sizeof res->skipped_first, "%s", st.bad[0]);
    if (res->images == 0 && res->skipped > 0 && data->world <= 1)
        rc = sl_fail(SL_ECORRUPT, "sl_eval_run: %s: split '%s': all %lld records are bad; the "
                     "first: %s", data->data, data->split, (long long)res->skipped,
                     res->skipped_first);
out:
    res->seconds = sl_now_s() - t0;
    free(dlogits);
    free(labels);
    sl_dev_feed_destroy(feed);
    sl_pipeline_destroy(p);
    return rc;
}

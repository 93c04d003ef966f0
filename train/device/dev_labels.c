/*
 * train/device/dev_labels.c - a batch's host labels checked against the
 * model's classes, for every path that gives labels to a model: the host
 * step (replica.c), the device feed (dev_feed_cuda.c: checked on the host
 * before the copy up) and eval (eval.c), over the op room's one label
 * check (sl_labels_bad, train/ops/ops.c, which the host backends'
 * cross-entropy entry point runs too). cuda's device labels are checked
 * by its kernel instead (act_cuda.cu). Built in every build.
 *
 * Threading: none of its own; reads the caller's labels.
 */
#include "train/device/dev_int.h"

int sl_labels_check(const char *fn, const sl_batch *b, int classes)
{
    int i = sl_labels_bad(b->labels, (int)b->n, classes);
    if (i < 0)
        return SL_OK;
    int32_t l = b->labels[i];
    return sl_fail(SL_EINVAL, "%s: record %llu has label %d, the model has %d classes%s", fn,
                   (unsigned long long)b->record_ids[i], l, classes,
                   l == classes ? " (labels counted from 1, as in TensorFlow's ImageNet "
                                  "shards? --label-offset 1)"
                   : l < 0     ? " (--label-offset too large?)"
                               : "");
}

/*
 * train/device/dev_loss_cuda.c - dev_int.h's loss on the CUDA runtime: the
 * step's softmax cross-entropy adds its loss and correct count to two
 * device doubles (sl_xent_acc_cuda), read and zeroed when the loop logs,
 * so no step waits for its loss. Built with the cuda backend; dev_none.c
 * replaces it otherwise.
 *
 * Threading: an exec's thread (dev_int.h).
 */
#include "train/ops/cuda_int.h"
#include "train/device/dev_int.h"

int sl_dev_xent_acc(sl_exec *e, int n, int classes, const float *logits,
                    const int32_t *labels, float smoothing, const float *d_scale,
                    float *dlogits, double *acc)
{
    if (!sl_mem_on_device(e))
        return sl_fail(SL_ENOTSUP, "sl_dev_xent_acc: %s backend", sl_backend_name(e->backend));
    return sl_xent_acc_cuda(e, n, classes, logits, labels, smoothing, d_scale, dlogits, acc);
}

int sl_dev_loss_take(sl_exec *e, double *acc, double out[2])
{
    int rc;
    if ((rc = sl_mem_copy_out(e, out, acc, 2 * sizeof(double))))
        return rc;
    if (!sl_mem_on_device(e)) {
        acc[0] = acc[1] = 0;
        return SL_OK;
    }
    return SL_CUDA(cudaMemsetAsync(acc, 0, 2 * sizeof(double), sl_cuda_of(e)->stream));
}

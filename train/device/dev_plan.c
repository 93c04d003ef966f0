/*
 * train/device/dev_plan.c - the device memory plan of a training replica
 * (dev_int.h's sl_dev_plan): the bytes sl_model_place, the device
 * optimizer, the feed and the cuda context allocate, from the model's
 * layout alone (no device, no allocation). Built in every build: the
 * budget test runs on any machine.
 *
 * Sources of each figure (keep them in step):
 *   model      sl_model_plan_bytes (resnet.c: sl_model_place's arenas)
 *   optimizer  dev_sgd_cuda.c's sl_dev_sgd_create: one f32 momentum buffer per
 *              param tensor padded as the params arena (so param_floats
 *              floats), its tensor table, the loss scale (fp16), the
 *              learning rate
 *   io         dev_feed_cuda.c's feed (x in the activation type, int32
 *              labels), replica.c's dlogits (f32) and loss sums (2 doubles)
 *   workspace  conv_cuda.cu's cap (SLUICE_CUDNN_WS_MB)
 *   scratch    the largest sl_cuda_tmp request (cuda_ctx.cu rounds it up to
 *              MiB): norm_cuda.cu's partials (2 * gy * c floats, gy counts,
 *              c float4 constants, gy <= 4 blocks per SM), conv_cuda.cu's
 *              bf16 / f16 weight gradient (2 bytes a weight), act_cuda.cu's
 *              xent rows (12 bytes a row and a result)
 */
#include <string.h>

#include "train/device/dev_int.h"
#include "train/model/model_int.h"

static size_t mib_up(size_t b)
{
    const size_t mib = (size_t)1 << 20;
    return b < mib ? mib : (b + mib - 1) / mib * mib;
}

int sl_dev_plan_train(const sl_model_config *cfg, int batch, int h, int w, sl_dtype act,
                      size_t ws_max, int sms, sl_dev_plan *out)
{
    const char *fn = "sl_dev_plan_train";
    if (!cfg || !out || sms < 0)
        return sl_fail(SL_EINVAL, "%s: NULL argument or %d SMs", fn, sms);
    memset(out, 0, sizeof *out);
    size_t asz = sl_dtype_size(act);
    sl_model_mem mm;
    int rc = sl_model_plan_bytes(cfg, batch, h, w, asz, 1, &mm); /* the fused cuda table */
    if (rc)
        return rc;
    /* the shapes again for the scratch: the widest BN and the largest conv */
    sl_model *m = NULL;
    if ((rc = sl_model_create(cfg, 1, h, w, &m)))
        return rc;
    int64_t cmax = 1, wmax = 1;
    for (int i = 0; i < m->ncbn; i++) {
        const sl_cbn *c = &m->cbn[i];
        int64_t wn = (int64_t)c->cout * c->r * c->r * c->cin;
        cmax = c->cout > cmax ? c->cout : cmax;
        wmax = wn > wmax ? wn : wmax;
    }
    int ntensors = 0, classes = m->cfg.classes;
    for (int i = 0; i < m->ntensors; i++)
        ntensors += (m->tensors[i].flags & SL_TENSOR_PARAM) != 0;
    sl_model_destroy(m);
    size_t gy = (size_t)(sms ? sms : 132) * 4;
    size_t bn = (2 * gy * (size_t)cmax + gy + 4) * sizeof(float) + 16 * (size_t)cmax;
    size_t dw = act == SL_DTYPE_F32 ? 0 : (size_t)wmax * 2;
    size_t xent = (size_t)batch * 12 + 64;
    size_t tmp = bn > dw ? bn : dw;
    tmp = tmp > xent ? tmp : xent;

    out->model = mm.params + mm.bufs + mm.acts;
    /* sl_sgd_cuda_tensor: 3 pointers, an int64 and an int (40 bytes) */
    out->optimizer = (size_t)mm.param_floats * sizeof(float) + (size_t)ntensors * 40 + 64;
    out->io = (size_t)batch * h * w * 3 * asz + (size_t)batch * 4 +
              (size_t)batch * classes * sizeof(float) + 2 * sizeof(double);
    out->workspace = ws_max;
    out->scratch = mib_up(tmp);
    out->total = out->model + out->optimizer + out->io + out->workspace + out->scratch;
    return SL_OK;
}

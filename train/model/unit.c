/*
 * train/model/unit.c - one conv+BN unit (sl_cbn) of a ResNet: its forward
 * (conv, BN, ReLU, or the fused BN slot), the BN and conv halves of its
 * backward with their grad-ready hooks, and synchronized BN.
 *
 * DESIGN. The bottom of the running half: model.c (blocks, the whole
 * forward and backward), model_fuse.c (the cuDNN-fused blocks) and
 * resnet.c (destroy frees the sync-BN slots) call it, it calls none of
 * them, so calls in train/model/ go one way. Every op goes through
 * e->ops (train/ops/ops.h). model.c's top comment gives the order the
 * units run in and what each buffer holds.
 *
 * Synchronized BN (sl_model_set_bn_sync; the mirrored strategy's --sync-bn,
 * PyTorch's SyncBatchNorm): W replicas, each with n of the W*n images, and
 * total = W * rows per BN. Per BN, in train mode:
 *   forward:  bn_moments (this replica's mean and M2 in its slot, the
 *             others zero) -> one all-reduce of the W slots ->
 *             bn_moments_merge (Chan's formula in double: the global mean
 *             and var, the same bits on every replica) -> bn_fwd_apply
 *             (running stats with them, so every replica keeps the same).
 *             Not a variance from float sums: at 224 px a replica's BN has
 *             ~50,000 rows a channel, and sums of that many floats lose the
 *             digits a running variance keeps (train/ops/ops.h).
 *   backward: bn_bwd_reduce -> the LOCAL sum_dy, sum_dy_xhat are this
 *             replica's dbeta, dgamma; a copy of both (2c floats, one call)
 *             is all-reduced; bn_bwd_apply(global sums) -> dx.
 * Why the local sums for the param grads: replica r's loss is the mean over
 * its n images, L_r = (1/n) sum_{i in r} l_i, while one model on the whole
 * batch has L = (1/(W n)) sum_i l_i, so dL_r/dlogits_i = W dL/dlogits_i for
 * i in r. Backward is linear in dlogits, and with the all-reduced sums it
 * is the single model's backward row for row, so every activation gradient
 * on replica r is W times the single model's on those rows. Then
 *   dgamma_r = sum_{rows of r} dy_r*xhat = W sum_{rows of r} dy*xhat
 * and the strategy's average over replicas, (1/W) sum_r dgamma_r, is the
 * single model's dgamma (likewise dbeta, and every conv weight's gradient).
 * Using the global sums as dgamma would make that average W times too big.
 */
#include <stdlib.h>

#include "train/ops/mem.h"
#include "train/model/model_int.h"

const float *sl_model_input_of(const sl_model *m, const sl_cbn *c)
{
    if (c->input == -2)
        return m->x;
    if (c->input == -1)
        return m->pool_y;
    return m->cbn[c->input].z;
}

int sl_model_conv_shape(const sl_cbn *c, int n, sl_conv_shape *sh)
{
    return sl_conv_shape_init(sh, n, c->ih, c->iw, c->cin, c->cout, c->r, c->r, c->stride,
                              c->pad);
}

/* ------------------------------------------------------------- bn sync */

/* buf (cnt floats) = its sum over the replicas, through the caller's
 * all-reduce; its failure comes back with its code and the BN named. */
static int sync_sum(sl_model *m, const char *fn, const sl_cbn *c, float *buf, int cnt)
{
    sl_clear_error();
    int rc = m->sync.allreduce_sum(m->sync.ctx, buf, cnt);
    if (rc)
        return sl_fail(rc, "%s: %s: sync-BN all-reduce of %d floats failed (%s): %s", fn,
                       c->bn_name, cnt, sl_strerror(rc), sl_errmsg());
    return SL_OK;
}

/* The statistics slots for m->sync.world replicas, made in e's memory on
 * first use (the world is known from sl_model_set_bn_sync on; e is the
 * model's device exec when it is placed, whose memory destroy frees). */
static int sync_slots(sl_model *m, sl_exec *e, const char *fn, float **out)
{
    int64_t need = (int64_t)m->sync.world * SL_BN_MOMENT_FLOATS * (m->sync_floats / 2);
    if (m->sync_slots && m->sync_slots_floats >= need) {
        *out = m->sync_slots;
        return SL_OK;
    }
    if (m->dev_e && e != m->dev_e)
        return sl_fail(SL_EINVAL, "%s: the model is placed on another exec", fn);
    void *p = NULL;
    int rc;
    if (m->dev_e)
        rc = sl_mem_alloc(e, (size_t)need * sizeof(float), &p);
    else
        rc = (p = calloc((size_t)need, sizeof(float))) ? SL_OK : SL_ENOMEM;
    if (rc)
        return sl_fail(rc, "%s: sync-BN statistics for %d replicas: %s", fn, m->sync.world,
                       rc == SL_ENOMEM ? "out of memory" : sl_errmsg());
    sl_model_sync_free(m);
    m->sync_slots = p;
    m->sync_slots_floats = need;
    *out = p;
    return SL_OK;
}

void sl_model_sync_free(sl_model *m)
{
    if (m->dev_e)
        sl_mem_free(m->dev_e, m->sync_slots);
    else
        free(m->sync_slots);
    m->sync_slots = NULL;
    m->sync_slots_floats = 0;
}

/* Synchronized train-mode BN forward of c over rows of this replica: z
 * from y with the statistics of all replicas' rows. */
static int bn_sync_fwd(sl_model *m, sl_exec *e, sl_cbn *c, int64_t rows)
{
    const char *fn = "sl_model_forward";
    int C = c->cout, W = m->sync.world, rc;
    double total = (double)rows * W;
    float *mean = m->sync_buf, *var = m->sync_buf + C, *slots = NULL;
    if ((rc = sync_slots(m, e, fn, &slots)))
        return rc;
    if ((rc = sl_bn_moments(e, rows, C, c->y, W, m->sync.rank, slots)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    if ((rc = sync_sum(m, fn, c, slots, W * SL_BN_MOMENT_FLOATS * C)))
        return rc;
    if ((rc = sl_bn_moments_merge(e, rows, C, W, slots, mean, var)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    if ((rc = sl_bn_fwd_apply(e, rows, C, c->y, c->gamma, c->beta, mean, var,
                                   total, m->cfg.bn_momentum, m->cfg.bn_eps,
                                   c->rmean, c->rvar, c->z, c->smean, c->sinvstd)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    return SL_OK;
}

/* Synchronized BN backward: dy -> dx (tmp), the local dgamma / dbeta into
 * c's grads (the top comment says why local). */
static int bn_sync_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int64_t rows, const float *dy,
                       float *dx)
{
    const char *fn = "sl_model_backward";
    int C = c->cout, rc;
    double total = (double)rows * m->sync.world;
    float *sdy = m->sync_buf, *sdyx = m->sync_buf + C;
    if ((rc = sl_bn_bwd_reduce(e, rows, C, c->y, dy, c->smean, c->sinvstd,
                                    c->gbeta, c->ggamma)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    if ((rc = sl_mem_copy(e, sdy, c->gbeta, (size_t)C * sizeof(float))))
        return sl_model_op_fail(rc, fn, c->bn_name);
    if ((rc = sl_mem_copy(e, sdyx, c->ggamma, (size_t)C * sizeof(float))))
        return sl_model_op_fail(rc, fn, c->bn_name);
    if ((rc = sync_sum(m, fn, c, sdy, 2 * C)))
        return rc;
    if ((rc = sl_bn_bwd_apply(e, rows, C, c->y, dy, c->gamma, c->smean,
                                   c->sinvstd, sdy, sdyx, total, dx)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    return SL_OK;
}

/* ---------------------------------------------------------------- forward */

/* y = conv(x); z = bn(y) (batch or running statistics); z = relu(z).
 * Fused (fuse_fwd): z = relu(bn(y) + r) in one op when the cbn has its
 * own ReLU (r NULL) or r is the block's shortcut (its last cbn); r is
 * NULL otherwise. */
int sl_model_cbn_fwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int train, const float *r)
{
    const char *fn = "sl_model_forward";
    sl_conv_shape sh;
    int rc;
    if ((rc = sl_model_conv_shape(c, n, &sh)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_conv_fwd(e, &sh, sl_model_input_of(m, c), c->wc, c->y)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    int64_t rows = (int64_t)n * c->p * c->q;
    if (sl_model_fuse_fwd(m, e, train) && (c->relu || r)) {
        if ((rc = sl_bn_fwd_train_act(e, rows, c->cout, c->y, c->gamma, c->beta,
                                           m->cfg.bn_momentum, m->cfg.bn_eps,
                                           c->rmean, c->rvar, r, 1, c->z, c->smean,
                                           c->sinvstd)))
            return sl_model_op_fail(rc, fn, c->bn_name);
        (*c->nbt)++;
        return SL_OK;
    }
    if (train && m->sync_on) {
        if ((rc = bn_sync_fwd(m, e, c, rows)))
            return rc;
        (*c->nbt)++;
    } else if (train) {
        if ((rc = sl_bn_fwd_train(e, rows, c->cout, c->y, c->gamma, c->beta,
                                       m->cfg.bn_momentum, m->cfg.bn_eps, c->rmean,
                                       c->rvar, c->z, c->smean, c->sinvstd)))
            return sl_model_op_fail(rc, fn, c->bn_name);
        (*c->nbt)++; /* as PyTorch: counted on every train forward */
    } else {
        if ((rc = sl_bn_fwd_eval(e, rows, c->cout, c->y, c->gamma, c->beta,
                                      c->rmean, c->rvar, m->cfg.bn_eps, c->z)))
            return sl_model_op_fail(rc, fn, c->bn_name);
    }
    if (c->relu && (rc = sl_relu_fwd(e, rows * c->cout, c->z, c->z)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    return SL_OK;
}

/* --------------------------------------------------------------- backward */

int sl_model_grad_ready(sl_model *m, int t)
{
    if (!m->hook)
        return SL_OK;
    sl_clear_error();
    int rc = m->hook(m->hook_ctx, t);
    if (rc)
        return sl_fail(rc, "sl_model_backward: %s: grad-ready hook returned %d (%s): %s",
                       m->tensors[t].name, rc, sl_strerror(rc), sl_errmsg());
    return SL_OK;
}

/* From dz = d(z) (ReLU not yet undone): dz = relu'(dz) in place when relu
 * (the cbn's own ReLU, or the block output's for its last cbn); d(y) by the
 * BN backward, written over y (dgamma, dbeta into the grads, then their
 * hooks). Without sync-BN, bn_bwd_act (when the table has it) does the
 * mask and bn_bwd in one op, the masked dz left in dz all the same. */
int sl_model_bn_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int relu, float *dz)
{
    const char *fn = "sl_model_backward";
    int64_t rows = (int64_t)n * c->p * c->q;
    int rc;
    if (relu && !m->sync_on && e->ops->bn_bwd_act) {
        if ((rc = sl_bn_bwd_act(e, rows, c->cout, c->y, c->z, dz, c->gamma,
                                     c->smean, c->sinvstd, c->y, c->ggamma, c->gbeta)))
            return sl_model_op_fail(rc, fn, c->bn_name);
    } else {
        if (relu && (rc = sl_relu_bwd(e, rows * c->cout, c->z, dz, dz)))
            return sl_model_op_fail(rc, fn, c->bn_name);
        if (m->sync_on) {
            if ((rc = bn_sync_bwd(m, e, c, rows, dz, c->y)))
                return rc;
        } else {
            if ((rc = sl_bn_bwd(e, rows, c->cout, c->y, dz, c->gamma, c->smean,
                                     c->sinvstd, c->y, c->ggamma, c->gbeta)))
                return sl_model_op_fail(rc, fn, c->bn_name);
        }
    }
    if ((rc = sl_model_grad_ready(m, c->tensor + 1)) || (rc = sl_model_grad_ready(m, c->tensor + 2)))
        return rc;
    return SL_OK;
}

int sl_model_cbn_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int relu, float *dz, float *dx,
                     int how, float *tmp)
{
    int rc = sl_model_bn_bwd(m, e, c, n, relu, dz);
    return rc ? rc : sl_model_conv_bwd(m, e, c, n, dx, how, tmp);
}

int sl_model_conv_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, float *dx, int how, float *tmp)
{
    const char *fn = "sl_model_backward";
    int rc;
    sl_conv_shape sh;
    if ((rc = sl_model_conv_shape(c, n, &sh)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_conv_bwd_filter(e, &sh, sl_model_input_of(m, c), c->y, c->gw)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_model_grad_ready(m, c->tensor)))
        return rc;
    if (how == SL_DX_SET)
        rc = sl_conv_bwd_data(e, &sh, c->y, c->wc, dx);
    else if (how == SL_DX_ADD && e->ops->conv_bwd_data_acc)
        rc = sl_conv_bwd_data_acc(e, &sh, c->y, c->wc, dx, tmp);
    else if (how == SL_DX_ADD && !(rc = sl_conv_bwd_data(e, &sh, c->y, c->wc, tmp)))
        rc = sl_add(e, (int64_t)n * c->ih * c->iw * c->cin, dx, tmp, dx);
    return rc ? sl_model_op_fail(rc, fn, c->conv_name) : SL_OK; /* SL_DX_NONE: rc is 0 here */
}

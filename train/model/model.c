/*
 * train/model/model.c - running a ResNet built by train/model/resnet.c: forward,
 * backward and the accessors of train.h's models section.
 *
 * Every op goes through e->ops (train/ops/ops.h), so the same code runs on the
 * ref, cpu and cuda tables. Shapes: activations (n, h, w, c) NHWC f32.
 *
 * Forward, per block (torchvision's BasicBlock / Bottleneck):
 *   z_j = relu(bn_j(conv_j(z_{j-1})))            j < last
 *   out = relu(bn_last(conv_last(.)) + s)         s = bn_ds(conv_ds(in)) or in
 * with out written over z_last, so each BN output is kept once.
 *
 * Backward writes each BN's input gradient d(y) over y itself (y is read
 * by the BN backward only: the conv's weight gradient reads the conv's
 * input, its data gradient d(y)), and keeps the other activation
 * gradients in buffers that model_int.h places in the memory of blocks
 * backward is done with. Per block, A = d(block output) in:
 *   last cbn:  relu_bwd on A in place (the shortcut reads the masked A),
 *              bn_bwd(A -> y), conv_bwd_filter, conv_bwd_data(y -> gd)
 *   downsample (if any): bn_bwd(A -> y_ds), conv_bwd_filter,
 *              conv_bwd_data(y_ds -> gout): the shortcut's d(block input)
 *              (identity: gout is A itself)
 *   main path, last but one to first: relu_bwd(gd) in place, bn_bwd(gd ->
 *              y), conv_bwd_filter, conv_bwd_data(y -> gd), except the
 *              first cbn's: gout += conv_bwd_data(y) = d(block input), the
 *              next (earlier) block's d(output).
 * The gradient of a tensor used twice (the block input) is the sum of its
 * two paths: += with conv_bwd_data_acc where the table has it (cuda:
 * cuDNN's beta = 1, no separate pass), else conv_bwd_data into gd and
 * ops->add(gout, gd), the order the sum always had. The stem after a max
 * pool: relu_bwd(pool output, A) in place (relu(maxpool(v)) =
 * maxpool(relu(v)), and every input a pool output routes its gradient to
 * holds that output's value, so this is the stem ReLU's own mask, bit for
 * bit), max-pool backward into gpool, the stem's bn_bwd without a ReLU.
 * The stem's z and each downsample's z live in scratch during the forward
 * (model_int.h's ztemp).
 *
 * Fused batch norm (a table with bn_fwd_train_act / bn_bwd_act: cuda,
 * unless SLUICE_CUDA_FUSE=0). A train forward without sync-BN runs
 * z = relu(bn(y)) as one op, and a block's downsample cbn first, then its
 * main path, the last BN fused with the shortcut add and the ReLU:
 * out = relu(bn_last(y) + s) in one op, written to z_last as above.
 * Backward (without sync-BN) runs relu_bwd + bn_bwd as one bn_bwd_act,
 * which leaves the masked dz in place: A, for the block's last cbn, then
 * feeds the shortcut as above; the cbn's dx is written over y. The values
 * are the unfused ops' bit for bit
 * (train/ops/ops.h); eval forwards and sync-BN keep the unfused ops.
 *
 * cuDNN fusion (sl_fuse_available: a cuda exec with fp16 activations;
 * train/ops/ops.h's "cuDNN graph fusion"): a train forward without sync-BN
 * runs each residual block with at least one cuDNN plan through
 * model_fuse.c (MLPerf's chain; a refused convolution runs unfused inside
 * it, the rest stays fused; its top comment), and every other block as
 * above.
 *
 * The input x of a train forward is not copied: it must stay unchanged
 * until the matching backward (the stem's weight gradient reads it).
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
 *
 * The grad-ready hook (sl_model_set_grad_hook) is called for each trainable
 * tensor right after the op that writes its grad, in backward order: fc
 * weight and bias after fc_bwd; per cbn (blocks last to first; in a block
 * the last cbn, the downsample, then the rest of the main path last to
 * first; the stem last) BN weight and
 * bias after the BN backward (and its all-reduce when synchronized), conv
 * weight after conv_bwd_filter. No grad is written twice, so each call
 * comes once and the grad it names is final.
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/mem.h"
#include "train/model/model_int.h"

#define OP SL_MODEL_OP

const float *sl_model_input_of(const sl_model *m, const sl_cbn *c)
{
    if (c->input == -2)
        return m->x;
    if (c->input == -1)
        return m->pool_y;
    return m->cbn[c->input].z;
}

/* The exec's ops reach the model's memory: a placed model runs on the exec
 * it was placed with, a host model on a host backend of its activation
 * type (f32, or the type sl_model_place laid it out for). */
static int same_memory(const sl_model *m, const sl_exec *e)
{
    return m->dev_e ? e == m->dev_e : e->backend != SL_BACKEND_CUDA && e->act == m->act;
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
    OP(fn, c->bn_name, sl_bn_moments(e, rows, C, c->y, W, m->sync.rank, slots));
    if ((rc = sync_sum(m, fn, c, slots, W * SL_BN_MOMENT_FLOATS * C)))
        return rc;
    OP(fn, c->bn_name, sl_bn_moments_merge(e, rows, C, W, slots, mean, var));
    OP(fn, c->bn_name, sl_bn_fwd_apply(e, rows, C, c->y, c->gamma, c->beta, mean, var,
                                            total, m->cfg.bn_momentum, m->cfg.bn_eps,
                                            c->rmean, c->rvar, c->z, c->smean, c->sinvstd));
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
    OP(fn, c->bn_name, sl_bn_bwd_reduce(e, rows, C, c->y, dy, c->smean, c->sinvstd,
                                             c->gbeta, c->ggamma));
    OP(fn, c->bn_name, sl_mem_copy(e, sdy, c->gbeta, (size_t)C * sizeof(float)));
    OP(fn, c->bn_name, sl_mem_copy(e, sdyx, c->ggamma, (size_t)C * sizeof(float)));
    if ((rc = sync_sum(m, fn, c, sdy, 2 * C)))
        return rc;
    OP(fn, c->bn_name, sl_bn_bwd_apply(e, rows, C, c->y, dy, c->gamma, c->smean,
                                            c->sinvstd, sdy, sdyx, total, dx));
    return SL_OK;
}

/* ---------------------------------------------------------------- forward */

/* The forward runs the fused bn_fwd_train_act: a train forward without
 * sync-BN on a table that has it (the top comment). */
static int fuse_fwd(const sl_model *m, const sl_exec *e, int train)
{
    return train && !m->sync_on && e->ops->bn_fwd_train_act;
}

/* y = conv(x); z = bn(y) (batch or running statistics); z = relu(z).
 * Fused (fuse_fwd): z = relu(bn(y) + r) in one op when the cbn has its
 * own ReLU (r NULL) or r is the block's shortcut (its last cbn); r is
 * NULL otherwise. */
int sl_model_cbn_fwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int train, const float *r)
{
    const char *fn = "sl_model_forward";
    sl_conv_shape sh;
    OP(fn, c->conv_name, sl_model_conv_shape(c, n, &sh));
    OP(fn, c->conv_name, sl_conv_fwd(e, &sh, sl_model_input_of(m, c), c->wc, c->y));
    int64_t rows = (int64_t)n * c->p * c->q;
    if (fuse_fwd(m, e, train) && (c->relu || r)) {
        OP(fn, c->bn_name, sl_bn_fwd_train_act(e, rows, c->cout, c->y, c->gamma, c->beta,
                                                    m->cfg.bn_momentum, m->cfg.bn_eps,
                                                    c->rmean, c->rvar, r, 1, c->z, c->smean,
                                                    c->sinvstd));
        (*c->nbt)++;
        return SL_OK;
    }
    if (train && m->sync_on) {
        int rc = bn_sync_fwd(m, e, c, rows);
        if (rc)
            return rc;
        (*c->nbt)++;
    } else if (train) {
        OP(fn, c->bn_name, sl_bn_fwd_train(e, rows, c->cout, c->y, c->gamma, c->beta,
                                                m->cfg.bn_momentum, m->cfg.bn_eps, c->rmean,
                                                c->rvar, c->z, c->smean, c->sinvstd));
        (*c->nbt)++; /* as PyTorch: counted on every train forward */
    } else {
        OP(fn, c->bn_name, sl_bn_fwd_eval(e, rows, c->cout, c->y, c->gamma, c->beta,
                                               c->rmean, c->rvar, m->cfg.bn_eps, c->z));
    }
    if (c->relu)
        OP(fn, c->bn_name, sl_relu_fwd(e, rows * c->cout, c->z, c->z));
    return SL_OK;
}

/* Unfused: the main path, the downsample, add, relu. Fused: the downsample
 * first, then the main path, its last BN taking the shortcut add and the
 * ReLU. */
static int block_fwd(sl_model *m, sl_exec *e, const sl_block *b, int n, int train)
{
    const char *fn = "sl_model_forward";
    int fuse = fuse_fwd(m, e, train), rc;
    const float *shortcut = sl_model_input_of(m, &m->cbn[b->first]);
    if (fuse && b->ds >= 0) {
        if ((rc = sl_model_cbn_fwd(m, e, &m->cbn[b->ds], n, train, NULL)))
            return rc;
        shortcut = m->cbn[b->ds].z;
    }
    for (int j = 0; j < b->nconv; j++) {
        const float *r = fuse && j == b->nconv - 1 ? shortcut : NULL;
        if ((rc = sl_model_cbn_fwd(m, e, &m->cbn[b->first + j], n, train, r)))
            return rc;
    }
    if (fuse)
        return SL_OK;
    sl_cbn *last = &m->cbn[b->first + b->nconv - 1];
    int64_t cnt = (int64_t)n * last->p * last->q * last->cout;
    if (b->ds >= 0) {
        if ((rc = sl_model_cbn_fwd(m, e, &m->cbn[b->ds], n, train, NULL)))
            return rc;
        shortcut = m->cbn[b->ds].z;
    }
    OP(fn, last->bn_name, sl_add(e, cnt, last->z, shortcut, last->z));
    OP(fn, last->bn_name, sl_relu_fwd(e, cnt, last->z, last->z));
    return SL_OK;
}

int sl_model_forward(sl_model *m, sl_exec *e, const float *x, int n, int train,
                     const float **logits)
{
    const char *fn = "sl_model_forward";
    if (!m || !e || !e->ops || !x || !logits)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (n < 1 || n > m->max_batch)
        return sl_fail(SL_EINVAL, "%s: batch %d outside [1, %d]", fn, n, m->max_batch);
    if (!same_memory(m, e))
        return sl_fail(SL_EINVAL, "%s: the model %s%s; the exec is %s %s (sl_model_place)", fn,
                       m->dev_e ? "is on a device with another exec" : "is in host memory in ",
                       m->dev_e ? "" : sl_precision_name(m->act), sl_backend_name(e->backend),
                       sl_precision_name(e->act));
    if (train) {
        /* PyTorch refuses batch statistics over a single value per channel
         * (the unbiased running variance would divide by zero); with sync,
         * the statistics are over every replica's rows. */
        int world = m->sync_on ? m->sync.world : 1;
        for (int i = 0; i < m->ncbn; i++)
            if ((int64_t)n * m->cbn[i].p * m->cbn[i].q * world < 2)
                return sl_fail(SL_EINVAL, "%s: %s: batch %d%s gives one value per channel in "
                               "training", fn, m->cbn[i].bn_name, n,
                               m->sync_on ? " x 1 replica (sync-BN)" : "");
    }
    m->train_n = 0; /* the kept activations are about to change */
    m->x = x;
    int rc;
    if (m->xin) {
        /* host bf16 (resnet.c's place_host): the convs' weights from the
         * master weights as they are now (an optimizer step changed them
         * since), the input in bf16 for the stem; backward reads both */
        size_t xn = (size_t)n * (size_t)m->h * (size_t)m->w * (size_t)m->cbn[0].cin;
        if ((rc = sl_model_refresh(m)) ||
            (rc = sl_mem_host_cast((int64_t)xn, x, m->xin, m->act)))
            return sl_fail(rc, "%s: %s", fn, sl_errmsg());
        m->x = m->xin;
    }
    rc = sl_model_cbn_fwd(m, e, &m->cbn[0], n, train, NULL);
    if (rc)
        return rc;
    if (m->stem_pool) {
        sl_pool_shape ps;
        OP(fn, "maxpool", sl_pool_shape_init(&ps, n, m->cbn[0].p, m->cbn[0].q, m->cbn[0].cout,
                                             3, 2, 1));
        OP(fn, "maxpool", sl_maxpool_fwd(e, &ps, m->cbn[0].z, m->pool_y, m->pool_arg));
    }
    if (train)
        m->fuse_units = m->fuse_total = 0;
    for (int b = 0; b < m->nblock; b++) {
        sl_block *k = &m->blk[b];
        if (train && (rc = sl_model_fuse_plan(m, e, k, n)) < 0)
            return sl_fail(-rc, "%s: block %d: %s", fn, b, sl_errmsg());
        rc = k->fused && train ? sl_model_block_fwd_fused(m, e, k, n) : block_fwd(m, e, k, n, train);
        if (rc)
            return rc;
    }
    const sl_block *lb = &m->blk[m->nblock - 1];
    const float *feat = m->cbn[lb->first + lb->nconv - 1].z;
    OP(fn, "avgpool", sl_gap_fwd(e, n, m->feat_hw, m->feat, feat, m->pooled));
    OP(fn, "fc", sl_fc_fwd(e, n, m->feat, m->cfg.classes, m->pooled, m->fc_w, m->fc_b,
                                m->logits));
    if (train)
        m->train_n = n;
    *logits = m->logits;
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
        OP(fn, c->bn_name, sl_bn_bwd_act(e, rows, c->cout, c->y, c->z, dz, c->gamma,
                                              c->smean, c->sinvstd, c->y, c->ggamma, c->gbeta));
    } else {
        if (relu)
            OP(fn, c->bn_name, sl_relu_bwd(e, rows * c->cout, c->z, dz, dz));
        if (m->sync_on) {
            if ((rc = bn_sync_bwd(m, e, c, rows, dz, c->y)))
                return rc;
        } else {
            OP(fn, c->bn_name, sl_bn_bwd(e, rows, c->cout, c->y, dz, c->gamma, c->smean,
                                              c->sinvstd, c->y, c->ggamma, c->gbeta));
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
    OP(fn, c->conv_name, sl_model_conv_shape(c, n, &sh));
    OP(fn, c->conv_name, sl_conv_bwd_filter(e, &sh, sl_model_input_of(m, c), c->y, c->gw));
    if ((rc = sl_model_grad_ready(m, c->tensor)))
        return rc;
    if (how == SL_DX_SET)
        OP(fn, c->conv_name, sl_conv_bwd_data(e, &sh, c->y, c->wc, dx));
    else if (how == SL_DX_ADD && e->ops->conv_bwd_data_acc)
        OP(fn, c->conv_name, sl_conv_bwd_data_acc(e, &sh, c->y, c->wc, dx, tmp));
    else if (how == SL_DX_ADD) {
        OP(fn, c->conv_name, sl_conv_bwd_data(e, &sh, c->y, c->wc, tmp));
        OP(fn, c->conv_name, sl_add(e, (int64_t)n * c->ih * c->iw * c->cin, dx, tmp, dx));
    }
    return SL_OK;
}

/* A = d(block output) in; d(block input) out in b->gout (A itself for an
 * identity block); b->gd the chain through the main path (the top comment
 * gives the order). */
static int block_bwd(sl_model *m, sl_exec *e, const sl_block *b, int n, float *A)
{
    /* the block output's ReLU is undone on A in place (the shortcut reads it) */
    sl_cbn *last = &m->cbn[b->first + b->nconv - 1];
    int rc = sl_model_cbn_bwd(m, e, last, n, 1, A, b->gd, SL_DX_SET, NULL);
    if (!rc && b->ds >= 0)
        rc = sl_model_cbn_bwd(m, e, &m->cbn[b->ds], n, m->cbn[b->ds].relu, A, b->gout, SL_DX_SET, NULL);
    for (int j = b->nconv - 2; !rc && j >= 1; j--) {
        sl_cbn *c = &m->cbn[b->first + j];
        rc = sl_model_cbn_bwd(m, e, c, n, c->relu, b->gd, b->gd, SL_DX_SET, NULL);
    }
    if (!rc) {
        sl_cbn *first = &m->cbn[b->first];
        rc = sl_model_cbn_bwd(m, e, first, n, first->relu, b->gd, b->gout, SL_DX_ADD, b->gtmp);
    }
    return rc;
}

int sl_model_backward(sl_model *m, sl_exec *e, const float *dlogits, float *dx)
{
    const char *fn = "sl_model_backward";
    if (!m || !e || !e->ops || !dlogits)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    int n = m->train_n;
    if (!same_memory(m, e))
        return sl_fail(SL_EINVAL, "%s: the model and the exec are not on the same device", fn);
    if (n < 1)
        return sl_fail(SL_EINVAL, "%s: no train forward since the last backward (a backward "
                       "consumes the activations it reads)", fn);
    m->train_n = 0; /* each y will hold its gradient, whatever happens below */
    float *A = m->ghead;
    /* head: logits = fc(gap(out)) */
    OP(fn, "fc", sl_fc_bwd(e, n, m->feat, m->cfg.classes, m->pooled, m->fc_w, dlogits,
                                m->dpooled, m->fc_gw, m->fc_gb));
    int rc;
    if ((rc = sl_model_grad_ready(m, m->fc_tensor)) || (rc = sl_model_grad_ready(m, m->fc_tensor + 1)))
        return rc;
    OP(fn, "avgpool", sl_gap_bwd(e, n, m->feat_hw, m->feat, m->dpooled, A));
    for (int b = m->nblock - 1; b >= 0; b--) {
        const sl_block *k = &m->blk[b];
        if ((rc = k->fused ? sl_model_block_bwd_fused(m, e, k, n, A) : block_bwd(m, e, k, n, A)))
            return rc;
        A = m->blk[b].gout;
    }
    /* stem: A = d(max-pool output) or d(stem z) */
    sl_cbn *stem = &m->cbn[0];
    int how = dx ? SL_DX_SET : SL_DX_NONE;
    if (m->stem_pool) {
        sl_pool_shape ps;
        OP(fn, "maxpool", sl_pool_shape_init(&ps, n, stem->p, stem->q, stem->cout, 3, 2, 1));
        /* the stem's ReLU mask, taken at the pool output (the top comment) */
        if (stem->relu)
            OP(fn, "maxpool", sl_relu_bwd(e, (int64_t)n * ps.p * ps.q * ps.c, m->pool_y, A,
                                               A));
        OP(fn, "maxpool", sl_maxpool_bwd(e, &ps, A, m->pool_arg, m->gpool));
        rc = sl_model_cbn_bwd(m, e, stem, n, 0, m->gpool, dx, how, NULL);
    } else {
        rc = sl_model_cbn_bwd(m, e, stem, n, stem->relu, A, dx, how, NULL);
    }
    return rc;
}

void sl_model_note_replay(sl_model *m, const float *x, int n)
{
    m->x = x;
    m->train_n = n;
    for (int i = 0; i < m->ncbn; i++)
        (*m->cbn[i].nbt)++; /* as cbn_fwd counts a train forward */
}

/* -------------------------------------------------------------- accessors */

const sl_model_config *sl_model_config_of(const sl_model *m) { return &m->cfg; }

sl_tensor_info *sl_model_tensors(sl_model *m, int *count)
{
    if (count)
        *count = m->ntensors;
    return m->tensors;
}

sl_tensor_info *sl_model_tensor(sl_model *m, const char *name)
{
    for (int i = 0; name && i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

int64_t sl_model_param_count(const sl_model *m) { return m->n_params; }

size_t sl_model_bytes(const sl_model *m) { return m->bytes; }

int sl_model_input_size(const sl_model *m, int *h, int *w)
{
    if (!m)
        return sl_fail(SL_EINVAL, "sl_model_input_size: NULL model");
    if (h)
        *h = m->h;
    if (w)
        *w = m->w;
    return SL_OK;
}

/* ------------------------------------------------------- sync and hooks */

int sl_model_set_bn_sync(sl_model *m, const sl_bn_sync *s)
{
    if (!m)
        return sl_fail(SL_EINVAL, "sl_model_set_bn_sync: NULL model");
    if (s && !s->allreduce_sum)
        return sl_fail(SL_EINVAL, "sl_model_set_bn_sync: allreduce_sum is NULL");
    if (s && s->world < 1)
        return sl_fail(SL_EINVAL, "sl_model_set_bn_sync: world %d < 1", s->world);
    if (s && (s->rank < 0 || s->rank >= s->world))
        return sl_fail(SL_EINVAL, "sl_model_set_bn_sync: rank %d of %d", s->rank, s->world);
    /* A backward must use the statistics its forward used: a change in
     * between makes that backward refuse to run. */
    m->train_n = 0;
    m->sync_on = s != NULL;
    if (s)
        m->sync = *s;
    else
        memset(&m->sync, 0, sizeof m->sync);
    return SL_OK;
}

void sl_model_set_grad_hook(sl_model *m, sl_grad_ready_fn fn, void *ctx)
{
    if (!m)
        return;
    m->hook = fn;
    m->hook_ctx = fn ? ctx : NULL;
}

void sl_model_arenas(sl_model *m, float **params, float **grads, size_t *n)
{
    if (params)
        *params = m ? m->params : NULL;
    if (grads)
        *grads = m ? m->grads : NULL;
    if (n)
        *n = m ? (size_t)m->arena_floats : 0;
}

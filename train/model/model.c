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
 * One unit (conv, BN, ReLU), either half of its backward and synchronized
 * BN (sl_model_set_bn_sync) are unit.c's, below this file and model_fuse.c.
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
#include <string.h>

#include "train/ops/mem.h"
#include "train/model/model_int.h"

/* The exec's ops reach the model's memory: a placed model runs on the exec
 * it was placed with, a host model on a host backend of its activation
 * type (f32, or the type sl_model_place laid it out for). */
static int same_memory(const sl_model *m, const sl_exec *e)
{
    return m->dev_e ? e == m->dev_e : e->backend != SL_BACKEND_CUDA && e->act == m->act;
}

/* ---------------------------------------------------------------- forward */

/* Unfused: the main path, the downsample, add, relu. Fused: the downsample
 * first, then the main path, its last BN taking the shortcut add and the
 * ReLU. */
static int block_fwd(sl_model *m, sl_exec *e, const sl_block *b, int n, int train)
{
    const char *fn = "sl_model_forward";
    int fuse = sl_model_fuse_fwd(m, e, train), rc;
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
    if ((rc = sl_add(e, cnt, last->z, shortcut, last->z)))
        return sl_model_op_fail(rc, fn, last->bn_name);
    if ((rc = sl_relu_fwd(e, cnt, last->z, last->z)))
        return sl_model_op_fail(rc, fn, last->bn_name);
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
        if ((rc = sl_pool_shape_init(&ps, n, m->cbn[0].p, m->cbn[0].q, m->cbn[0].cout,
                                     3, 2, 1)))
            return sl_model_op_fail(rc, fn, "maxpool");
        if ((rc = sl_maxpool_fwd(e, &ps, m->cbn[0].z, m->pool_y, m->pool_arg)))
            return sl_model_op_fail(rc, fn, "maxpool");
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
    if ((rc = sl_gap_fwd(e, n, m->feat_hw, m->feat, feat, m->pooled)))
        return sl_model_op_fail(rc, fn, "avgpool");
    if ((rc = sl_fc_fwd(e, n, m->feat, m->cfg.classes, m->pooled, m->fc_w, m->fc_b,
                             m->logits)))
        return sl_model_op_fail(rc, fn, "fc");
    if (train)
        m->train_n = n;
    *logits = m->logits;
    return SL_OK;
}

/* --------------------------------------------------------------- backward */

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
    int rc;
    /* head: logits = fc(gap(out)) */
    if ((rc = sl_fc_bwd(e, n, m->feat, m->cfg.classes, m->pooled, m->fc_w, dlogits,
                             m->dpooled, m->fc_gw, m->fc_gb)))
        return sl_model_op_fail(rc, fn, "fc");
    if ((rc = sl_model_grad_ready(m, m->fc_tensor)) || (rc = sl_model_grad_ready(m, m->fc_tensor + 1)))
        return rc;
    if ((rc = sl_gap_bwd(e, n, m->feat_hw, m->feat, m->dpooled, A)))
        return sl_model_op_fail(rc, fn, "avgpool");
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
        if ((rc = sl_pool_shape_init(&ps, n, stem->p, stem->q, stem->cout, 3, 2, 1)))
            return sl_model_op_fail(rc, fn, "maxpool");
        /* the stem's ReLU mask, taken at the pool output (the top comment) */
        if (stem->relu &&
            (rc = sl_relu_bwd(e, (int64_t)n * ps.p * ps.q * ps.c, m->pool_y, A, A)))
            return sl_model_op_fail(rc, fn, "maxpool");
        if ((rc = sl_maxpool_bwd(e, &ps, A, m->pool_arg, m->gpool)))
            return sl_model_op_fail(rc, fn, "maxpool");
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

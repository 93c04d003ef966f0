/*
 * train/model/model.c - running a ResNet built by train/model/resnet.c: forward,
 * backward and the accessors of train.h's models section.
 *
 * Every op goes through e->ops (train_int.h), so the same code runs on the
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
 * (train_int.h); eval forwards and sync-BN keep the unfused ops.
 *
 * cuDNN fusion (sl_fuse_available: a cuda exec with fp16 activations;
 * train_int.h's "cuDNN graph fusion"). A train forward without sync-BN
 * runs each residual block whose cuDNN plans exist at its shapes
 * (sl_fuse_prepare; a refused block runs as above) as MLPerf's chain:
 *   unit j:  y_j = conv_j(relu(y_{j-1}*s_{j-1} + b_{j-1})), with the sum
 *            and sum of squares of y_j from the conv's epilogue
 *            (ConvBNfprop); unit 0 and the downsample read the block input
 *            through the identity prologue (s = 1, b = 0: the input is a
 *            ReLU's output, so relu passes it); then BN finalize: the
 *            statistics, running update and (s_j, b_j) = BN_j folded, so
 *            the BN'd, ReLU'd z_j of a main-path unit is never written;
 *   last:    out = relu(bn(y_last) + shortcut) by the apply pass into z_last;
 *   ds:      z_ds = bn(y_ds) (the apply pass, no ReLU).
 * Backward (A = d(out)): bn_bwd_act on the last unit as above; each unit
 * j >= 1's weight gradient recomputes its input relu(y_{j-1}*s + b)
 * (ConvBNwgrad); its data gradient comes with the previous BN's ReLU mask
 * and weight gradients (DgradDreluBNBwdWeight: da in gd, dgamma, dbeta,
 * and the coefficients of d(y_{j-1}) = eq_dy*da + eq_x*y_{j-1} + eq_b,
 * which sl_fuse_bn_dx writes over y_{j-1}); unit 0 and the downsample as
 * unfused. The grad-ready hooks come in the unfused order. Fused steps
 * match the unfused ones within fp16 tolerance, not bits (the variance
 * from sums, not Welford's); with every plan refused the step is the
 * unfused one bit for bit (tests/train/ops/test_fuse_cuda.c).
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
 *             digits a running variance keeps (train_int.h).
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

/* Run one op; on failure wrap its message with the function and layer. */
#define OP(fn, what, call)                                                                  \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_)                                                                            \
            return sl_fail(rc_, "%s: %s: %s", fn, what, sl_errmsg());                       \
    } while (0)

/* The activation a cbn reads: the model input, the max-pool output or the
 * z of an earlier cbn. */
static const float *input_of(const sl_model *m, const sl_cbn *c)
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

static int conv_shape(const sl_cbn *c, int n, sl_conv_shape *sh)
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
        rc = sl_dev_alloc(e, (size_t)need * sizeof(float), &p);
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
        sl_dev_free(m->dev_e, m->sync_slots);
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
    OP(fn, c->bn_name, sl_dev_copy(e, sdy, c->gbeta, (size_t)C * sizeof(float)));
    OP(fn, c->bn_name, sl_dev_copy(e, sdyx, c->ggamma, (size_t)C * sizeof(float)));
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
static int cbn_fwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int train, const float *r)
{
    const char *fn = "sl_model_forward";
    sl_conv_shape sh;
    OP(fn, c->conv_name, conv_shape(c, n, &sh));
    OP(fn, c->conv_name, sl_conv_fwd(e, &sh, input_of(m, c), c->wc, c->y));
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
    const float *shortcut = input_of(m, &m->cbn[b->first]);
    if (fuse && b->ds >= 0) {
        if ((rc = cbn_fwd(m, e, &m->cbn[b->ds], n, train, NULL)))
            return rc;
        shortcut = m->cbn[b->ds].z;
    }
    for (int j = 0; j < b->nconv; j++) {
        const float *r = fuse && j == b->nconv - 1 ? shortcut : NULL;
        if ((rc = cbn_fwd(m, e, &m->cbn[b->first + j], n, train, r)))
            return rc;
    }
    if (fuse)
        return SL_OK;
    sl_cbn *last = &m->cbn[b->first + b->nconv - 1];
    int64_t cnt = (int64_t)n * last->p * last->q * last->cout;
    if (b->ds >= 0) {
        if ((rc = cbn_fwd(m, e, &m->cbn[b->ds], n, train, NULL)))
            return rc;
        shortcut = m->cbn[b->ds].z;
    }
    OP(fn, last->bn_name, sl_add(e, cnt, last->z, shortcut, last->z));
    OP(fn, last->bn_name, sl_relu_fwd(e, cnt, last->z, last->z));
    return SL_OK;
}

/* The cuDNN plans block b needs at batch n (the top comment): SL_OK, or
 * SL_ENOTSUP when the model does not fuse or cuDNN refuses one. */
static int fuse_ready(sl_model *m, sl_exec *e, const sl_block *b, int n)
{
    if (!m->fuse_arena || b->nconv < 2)
        return SL_ENOTSUP;
    sl_conv_shape sh;
    int rc;
    for (int j = 0; j < b->nconv; j++) {
        const sl_cbn *c = &m->cbn[b->first + j];
        if (j < b->nconv - 1 && !c->relu)
            return SL_ENOTSUP;
        unsigned kinds = j ? SL_FUSE_FPROP | SL_FUSE_WGRAD | SL_FUSE_DGRAD : SL_FUSE_FPROP;
        if ((rc = conv_shape(c, n, &sh)) || (rc = sl_fuse_prepare(e, &sh, kinds)))
            return rc;
    }
    if (b->ds >= 0 && ((rc = conv_shape(&m->cbn[b->ds], n, &sh)) ||
                       (rc = sl_fuse_prepare(e, &sh, SL_FUSE_FPROP))))
        return rc;
    return SL_OK;
}

/* A unit's fused conv + statistics + BN finalize, its input x through the
 * prologue sb (fp16 scale then bias of x's channels). */
static int unit_fwd_fused(sl_model *m, sl_exec *e, sl_cbn *c, int n, const float *x,
                          const void *sb)
{
    const char *fn = "sl_model_forward";
    sl_conv_shape sh;
    OP(fn, c->conv_name, conv_shape(c, n, &sh));
    OP(fn, c->conv_name, sl_fuse_conv_fwd(e, &sh, x, sb, c->wc, c->y, c->fsum, c->fsq));
    OP(fn, c->bn_name, sl_fuse_bn_finalize(e, c->cout, (int64_t)n * c->p * c->q, c->fsum,
                                           c->fsq, c->gamma, c->beta, m->cfg.bn_momentum,
                                           m->cfg.bn_eps, c->rmean, c->rvar, c->smean,
                                           c->sinvstd, c->fk, c->fsb));
    (*c->nbt)++;
    return SL_OK;
}

/* The identity prologue of c input channels: ones, then zeros (model_int.h). */
static const void *fuse_id(const sl_model *m, int c)
{
    return (const char *)m->fuse_id + (size_t)(m->fuse_idc - c) * 2;
}

/* Block b through the fused plans (the top comment). */
static int block_fwd_fused(sl_model *m, sl_exec *e, const sl_block *b, int n)
{
    const char *fn = "sl_model_forward";
    sl_cbn *u = &m->cbn[b->first], *last = u + b->nconv - 1;
    const float *xin = input_of(m, u), *shortcut = xin;
    int rc;
    if (b->ds >= 0) {
        sl_cbn *d = &m->cbn[b->ds];
        if ((rc = unit_fwd_fused(m, e, d, n, xin, fuse_id(m, d->cin))))
            return rc;
        OP(fn, d->bn_name, sl_fuse_bn_apply(e, (int64_t)n * d->p * d->q, d->cout, d->y, d->fk,
                                            NULL, 0, d->z));
        shortcut = d->z;
    }
    for (int j = 0; j < b->nconv; j++) {
        const float *x = j ? u[j - 1].y : xin;
        const void *sb = j ? u[j - 1].fsb : fuse_id(m, u[0].cin);
        if ((rc = unit_fwd_fused(m, e, &u[j], n, x, sb)))
            return rc;
    }
    OP(fn, last->bn_name, sl_fuse_bn_apply(e, (int64_t)n * last->p * last->q, last->cout,
                                           last->y, last->fk, shortcut, 1, last->z));
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
            (rc = sl_host_cast((int64_t)xn, x, m->xin, m->act)))
            return sl_fail(rc, "%s: %s", fn, sl_errmsg());
        m->x = m->xin;
    }
    rc = cbn_fwd(m, e, &m->cbn[0], n, train, NULL);
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
        int convs = k->nconv + (k->ds >= 0);
        if (train && !m->sync_on) {
            rc = fuse_ready(m, e, k, n);
            if (rc && rc != SL_ENOTSUP)
                return sl_fail(rc, "%s: block %d: %s", fn, b, sl_errmsg());
            k->fused = rc == SL_OK;
            m->fuse_total += convs;
            m->fuse_units += k->fused ? convs : 0;
        } else if (train) {
            k->fused = 0;
            m->fuse_total += convs;
        }
        rc = k->fused && train ? block_fwd_fused(m, e, k, n) : block_fwd(m, e, k, n, train);
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

/* Tell the grad-ready hook (if any) that tensor t's grad is final. A
 * non-zero return stops backward with that code. */
static int grad_ready(sl_model *m, int t)
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

/* What cbn_bwd does with the gradient of the cbn's input. */
enum { DX_NONE, DX_SET, DX_ADD };

static int conv_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, float *dx, int how, float *tmp);

/* From dz = d(z) (ReLU not yet undone): dz = relu'(dz) in place when relu
 * (the cbn's own ReLU, or the block output's for its last cbn); d(y) by the
 * BN backward, written over y (dgamma, dbeta into the grads); dw; then
 * d(input): DX_SET dx = conv_bwd_data(d(y)), DX_ADD dx += it (tmp: a free
 * buffer of dx's size), DX_NONE nothing. dx may be dz: the BN backward has
 * consumed dz before conv_bwd_data writes. Without sync-BN, bn_bwd_act
 * (when the table has it) does the mask and bn_bwd in one op, the masked dz
 * left in dz all the same. */
static int cbn_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int relu, float *dz, float *dx,
                   int how, float *tmp)
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
    if ((rc = grad_ready(m, c->tensor + 1)) || (rc = grad_ready(m, c->tensor + 2)))
        return rc;
    return conv_bwd(m, e, c, n, dx, how, tmp);
}

/* c's conv backward from d(y) in y: dw (then its hook), and d(input) as
 * cbn_bwd says. */
static int conv_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, float *dx, int how, float *tmp)
{
    const char *fn = "sl_model_backward";
    int rc;
    sl_conv_shape sh;
    OP(fn, c->conv_name, conv_shape(c, n, &sh));
    OP(fn, c->conv_name, sl_conv_bwd_filter(e, &sh, input_of(m, c), c->y, c->gw));
    if ((rc = grad_ready(m, c->tensor)))
        return rc;
    if (how == DX_SET)
        OP(fn, c->conv_name, sl_conv_bwd_data(e, &sh, c->y, c->wc, dx));
    else if (how == DX_ADD && e->ops->conv_bwd_data_acc)
        OP(fn, c->conv_name, sl_conv_bwd_data_acc(e, &sh, c->y, c->wc, dx, tmp));
    else if (how == DX_ADD) {
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
    int rc = cbn_bwd(m, e, last, n, 1, A, b->gd, DX_SET, NULL);
    if (!rc && b->ds >= 0)
        rc = cbn_bwd(m, e, &m->cbn[b->ds], n, m->cbn[b->ds].relu, A, b->gout, DX_SET, NULL);
    for (int j = b->nconv - 2; !rc && j >= 1; j--) {
        sl_cbn *c = &m->cbn[b->first + j];
        rc = cbn_bwd(m, e, c, n, c->relu, b->gd, b->gd, DX_SET, NULL);
    }
    if (!rc) {
        sl_cbn *first = &m->cbn[b->first];
        rc = cbn_bwd(m, e, first, n, first->relu, b->gd, b->gout, DX_ADD, b->gtmp);
    }
    return rc;
}

/* Unit c's weight gradient from its input relu(p->y*s + b) recomputed
 * (ConvBNwgrad), then its hook. */
static int wgrad_fused(sl_model *m, sl_exec *e, sl_cbn *c, const sl_cbn *p, int n)
{
    const char *fn = "sl_model_backward";
    sl_conv_shape sh;
    OP(fn, c->conv_name, conv_shape(c, n, &sh));
    OP(fn, c->conv_name, sl_fuse_conv_wgrad(e, &sh, p->y, p->fsb, c->y, c->gw));
    return grad_ready(m, c->tensor);
}

/* block_bwd for a block its forward fused (the top comment). */
static int block_bwd_fused(sl_model *m, sl_exec *e, const sl_block *b, int n, float *A)
{
    const char *fn = "sl_model_backward";
    sl_cbn *u = &m->cbn[b->first];
    int L = b->nconv - 1, rc;
    sl_cbn *last = &u[L];
    OP(fn, last->bn_name, sl_bn_bwd_act(e, (int64_t)n * last->p * last->q, last->cout, last->y,
                                        last->z, A, last->gamma, last->smean, last->sinvstd,
                                        last->y, last->ggamma, last->gbeta));
    if ((rc = grad_ready(m, last->tensor + 1)) || (rc = grad_ready(m, last->tensor + 2)) ||
        (rc = wgrad_fused(m, e, last, &u[L - 1], n)))
        return rc;
    if (b->ds >= 0 &&
        (rc = cbn_bwd(m, e, &m->cbn[b->ds], n, m->cbn[b->ds].relu, A, b->gout, DX_SET, NULL)))
        return rc;
    for (int j = L; j >= 1; j--) {
        sl_cbn *c = &u[j], *p = &u[j - 1];
        if (j < L && (rc = wgrad_fused(m, e, c, p, n)))
            return rc;
        sl_conv_shape sh;
        OP(fn, c->conv_name, conv_shape(c, n, &sh));
        OP(fn, c->conv_name, sl_fuse_conv_dgrad(e, &sh, c->y, c->wc, p->y, p->fsb, p->smean,
                                                p->sinvstd, p->gamma, b->gd, p->ggamma,
                                                p->gbeta, p->fcoef));
        if ((rc = grad_ready(m, p->tensor + 1)) || (rc = grad_ready(m, p->tensor + 2)))
            return rc;
        OP(fn, p->bn_name, sl_fuse_bn_dx(e, (int64_t)n * p->p * p->q, p->cout, b->gd, p->y,
                                         p->smean, p->fcoef, p->y));
    }
    return conv_bwd(m, e, &u[0], n, b->gout, DX_ADD, b->gtmp);
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
    if ((rc = grad_ready(m, m->fc_tensor)) || (rc = grad_ready(m, m->fc_tensor + 1)))
        return rc;
    OP(fn, "avgpool", sl_gap_bwd(e, n, m->feat_hw, m->feat, m->dpooled, A));
    for (int b = m->nblock - 1; b >= 0; b--) {
        const sl_block *k = &m->blk[b];
        if ((rc = k->fused ? block_bwd_fused(m, e, k, n, A) : block_bwd(m, e, k, n, A)))
            return rc;
        A = m->blk[b].gout;
    }
    /* stem: A = d(max-pool output) or d(stem z) */
    sl_cbn *stem = &m->cbn[0];
    int how = dx ? DX_SET : DX_NONE;
    if (m->stem_pool) {
        sl_pool_shape ps;
        OP(fn, "maxpool", sl_pool_shape_init(&ps, n, stem->p, stem->q, stem->cout, 3, 2, 1));
        /* the stem's ReLU mask, taken at the pool output (the top comment) */
        if (stem->relu)
            OP(fn, "maxpool", sl_relu_bwd(e, (int64_t)n * ps.p * ps.q * ps.c, m->pool_y, A,
                                               A));
        OP(fn, "maxpool", sl_maxpool_bwd(e, &ps, A, m->pool_arg, m->gpool));
        rc = cbn_bwd(m, e, stem, n, 0, m->gpool, dx, how, NULL);
    } else {
        rc = cbn_bwd(m, e, stem, n, stem->relu, A, dx, how, NULL);
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

void sl_model_fusion(const sl_model *m, int *fused, int *total)
{
    *fused = m ? m->fuse_units : 0;
    *total = m ? m->fuse_total : 0;
}

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

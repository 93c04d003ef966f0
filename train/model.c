/*
 * train/model.c - running a ResNet built by train/resnet.c: forward,
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
 * Backward keeps three activation-gradient buffers A, B, C (the size of the
 * largest activation) instead of one per activation:
 *   A = d(block output); relu_bwd in place (it needs only the output)
 *   main path, last to first:  bn_bwd(dz -> B), conv_bwd_filter(B),
 *                              conv_bwd_data(B -> C), relu_bwd(C) in place
 *   shortcut:  downsample: bn_bwd(A -> B), conv_bwd_filter(B),
 *              conv_bwd_data(B -> A); identity: A as it is
 *   A = A + C = d(block input), the next (earlier) block's d(output).
 * The gradient of a tensor used twice (the block input) is the sum of its
 * two paths, taken with ops->add since ops overwrite their outputs.
 *
 * The input x of a train forward is not copied: it must stay unchanged
 * until the matching backward (the stem's weight gradient reads it).
 */
#include <string.h>

#include "train/model_int.h"

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

static int conv_shape(const sl_cbn *c, int n, sl_conv_shape *sh)
{
    return sl_conv_shape_init(sh, n, c->ih, c->iw, c->cin, c->cout, c->r, c->r, c->stride,
                              c->pad);
}

/* ---------------------------------------------------------------- forward */

/* y = conv(x); z = bn(y) (batch or running statistics); z = relu(z). */
static int cbn_fwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int train)
{
    const char *fn = "sl_model_forward";
    sl_conv_shape sh;
    OP(fn, c->conv_name, conv_shape(c, n, &sh));
    OP(fn, c->conv_name, e->ops->conv_fwd(e, &sh, input_of(m, c), c->w, c->y));
    int64_t rows = (int64_t)n * c->p * c->q;
    if (train) {
        OP(fn, c->bn_name, e->ops->bn_fwd_train(e, rows, c->cout, c->y, c->gamma, c->beta,
                                                m->cfg.bn_momentum, m->cfg.bn_eps, c->rmean,
                                                c->rvar, c->z, c->smean, c->sinvstd));
        (*c->nbt)++; /* as PyTorch: counted on every train forward */
    } else {
        OP(fn, c->bn_name, e->ops->bn_fwd_eval(e, rows, c->cout, c->y, c->gamma, c->beta,
                                               c->rmean, c->rvar, m->cfg.bn_eps, c->z));
    }
    if (c->relu)
        OP(fn, c->bn_name, e->ops->relu_fwd(e, rows * c->cout, c->z, c->z));
    return SL_OK;
}

static int block_fwd(sl_model *m, sl_exec *e, const sl_block *b, int n, int train)
{
    const char *fn = "sl_model_forward";
    for (int j = 0; j < b->nconv; j++) {
        int rc = cbn_fwd(m, e, &m->cbn[b->first + j], n, train);
        if (rc)
            return rc;
    }
    sl_cbn *last = &m->cbn[b->first + b->nconv - 1];
    int64_t cnt = (int64_t)n * last->p * last->q * last->cout;
    const float *shortcut = input_of(m, &m->cbn[b->first]);
    if (b->ds >= 0) {
        int rc = cbn_fwd(m, e, &m->cbn[b->ds], n, train);
        if (rc)
            return rc;
        shortcut = m->cbn[b->ds].z;
    }
    OP(fn, last->bn_name, e->ops->add(e, cnt, last->z, shortcut, last->z));
    OP(fn, last->bn_name, e->ops->relu_fwd(e, cnt, last->z, last->z));
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
    if (train) {
        /* PyTorch refuses batch statistics over a single value per channel
         * (the unbiased running variance would divide by zero). */
        for (int i = 0; i < m->ncbn; i++)
            if ((int64_t)n * m->cbn[i].p * m->cbn[i].q < 2)
                return sl_fail(SL_EINVAL, "%s: %s: batch %d gives one value per channel in "
                               "training", fn, m->cbn[i].bn_name, n);
    }
    m->train_n = 0; /* the kept activations are about to change */
    m->x = x;
    int rc = cbn_fwd(m, e, &m->cbn[0], n, train);
    if (rc)
        return rc;
    if (m->stem_pool) {
        sl_pool_shape ps;
        OP(fn, "maxpool", sl_pool_shape_init(&ps, n, m->cbn[0].p, m->cbn[0].q, m->cbn[0].cout,
                                             3, 2, 1));
        OP(fn, "maxpool", e->ops->maxpool_fwd(e, &ps, m->cbn[0].z, m->pool_y, m->pool_arg));
    }
    for (int b = 0; b < m->nblock; b++) {
        rc = block_fwd(m, e, &m->blk[b], n, train);
        if (rc)
            return rc;
    }
    const sl_block *lb = &m->blk[m->nblock - 1];
    const float *feat = m->cbn[lb->first + lb->nconv - 1].z;
    OP(fn, "avgpool", e->ops->gap_fwd(e, n, m->feat_hw, m->feat, feat, m->pooled));
    OP(fn, "fc", e->ops->fc_fwd(e, n, m->feat, m->cfg.classes, m->pooled, m->fc_w, m->fc_b,
                                m->logits));
    if (train)
        m->train_n = n;
    *logits = m->logits;
    return SL_OK;
}

/* --------------------------------------------------------------- backward */

/* From dz = d(z) (ReLU not yet undone): dz = relu'(dz) in place when the
 * cbn has its own ReLU; tmp = d(y) by bn_bwd (dgamma, dbeta into the
 * grads); dw; dx = d(input) when dx is not NULL. dx may be dz: bn_bwd has
 * consumed dz before conv_bwd_data writes. */
static int cbn_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, float *dz, float *tmp,
                   float *dx)
{
    const char *fn = "sl_model_backward";
    int64_t rows = (int64_t)n * c->p * c->q;
    if (c->relu)
        OP(fn, c->bn_name, e->ops->relu_bwd(e, rows * c->cout, c->z, dz, dz));
    OP(fn, c->bn_name, e->ops->bn_bwd(e, rows, c->cout, c->y, dz, c->gamma, c->smean,
                                      c->sinvstd, tmp, c->ggamma, c->gbeta));
    sl_conv_shape sh;
    OP(fn, c->conv_name, conv_shape(c, n, &sh));
    OP(fn, c->conv_name, e->ops->conv_bwd_filter(e, &sh, input_of(m, c), tmp, c->gw));
    if (dx)
        OP(fn, c->conv_name, e->ops->conv_bwd_data(e, &sh, tmp, c->w, dx));
    return SL_OK;
}

/* A = d(block output) in, d(block input) out; B and C are scratch. */
static int block_bwd(sl_model *m, sl_exec *e, const sl_block *b, int n, float *A, float *B,
                     float *C)
{
    const char *fn = "sl_model_backward";
    sl_cbn *last = &m->cbn[b->first + b->nconv - 1];
    int64_t cnt = (int64_t)n * last->p * last->q * last->cout;
    OP(fn, last->bn_name, e->ops->relu_bwd(e, cnt, last->z, A, A));
    int rc = cbn_bwd(m, e, last, n, A, B, C);
    for (int j = b->nconv - 2; !rc && j >= 0; j--)
        rc = cbn_bwd(m, e, &m->cbn[b->first + j], n, C, B, C);
    if (!rc && b->ds >= 0)
        rc = cbn_bwd(m, e, &m->cbn[b->ds], n, A, B, A);
    if (rc)
        return rc;
    const sl_cbn *first = &m->cbn[b->first];
    int64_t in_cnt = (int64_t)n * first->ih * first->iw * first->cin;
    OP(fn, first->conv_name, e->ops->add(e, in_cnt, A, C, A));
    return SL_OK;
}

int sl_model_backward(sl_model *m, sl_exec *e, const float *dlogits, float *dx)
{
    const char *fn = "sl_model_backward";
    if (!m || !e || !e->ops || !dlogits)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    int n = m->train_n;
    if (n < 1)
        return sl_fail(SL_EINVAL, "%s: the last forward was not a train forward", fn);
    float *A = m->gbuf[0], *B = m->gbuf[1], *C = m->gbuf[2];
    /* head: logits = fc(gap(out)) */
    OP(fn, "fc", e->ops->fc_bwd(e, n, m->feat, m->cfg.classes, m->pooled, m->fc_w, dlogits,
                                m->dpooled, m->fc_gw, m->fc_gb));
    OP(fn, "avgpool", e->ops->gap_bwd(e, n, m->feat_hw, m->feat, m->dpooled, A));
    for (int b = m->nblock - 1; b >= 0; b--) {
        int rc = block_bwd(m, e, &m->blk[b], n, A, B, C);
        if (rc)
            return rc;
    }
    /* stem: A = d(max-pool output) or d(stem z) */
    sl_cbn *stem = &m->cbn[0];
    if (m->stem_pool) {
        sl_pool_shape ps;
        OP(fn, "maxpool", sl_pool_shape_init(&ps, n, stem->p, stem->q, stem->cout, 3, 2, 1));
        OP(fn, "maxpool", e->ops->maxpool_bwd(e, &ps, A, m->pool_arg, B));
        return cbn_bwd(m, e, stem, n, B, C, dx);
    }
    return cbn_bwd(m, e, stem, n, A, B, dx);
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

/*
 * train/model/resnet.c - building a ResNet: the architectures, the
 * initialization, the state dict, creating and placing (train/model/model_int.h
 * has the layout; train/model/layout.c the memory plan; train/model/model.c
 * runs it).
 *
 * Architectures, as torchvision.models.resnet (names, state-dict order and
 * shapes match it, so a checkpoint loads into PyTorch):
 *   resnet18  BasicBlock x [2, 2, 2, 2], widths w, 2w, 4w, 8w (w = 64)
 *   resnet50  Bottleneck x [3, 4, 6, 3], planes w..8w, expansion 4; v1.5:
 *             the stride sits on conv2 (the 3x3), not conv1
 *   both:     conv1 7x7/2 pad 3, bn1, relu, maxpool 3x3/2 pad 1, layer1..4,
 *             avgpool, fc
 *   resnet20  He et al. 2016 ("Deep Residual Learning", sec. 4.2, CIFAR):
 *             conv1 3x3/1 pad 1, bn1, relu, no max pool, 3 stages x 3
 *             BasicBlocks at w, 2w, 4w (w = 16), stride 2 at the first block
 *             of layer2 and layer3; the projection shortcut (option B,
 *             1x1 conv + BN) wherever the shape changes, named as
 *             torchvision's downsample.
 * A block gets a downsample (layerX.0.downsample.{0,1}) when its stride is
 * not 1 or its input width differs from its output's, as torchvision.
 *
 * Initialization, as torchvision's ResNet.__init__: convs
 * kaiming_normal_(mode="fan_out", nonlinearity="relu"), i.e. N(0, 2/(k*r*s));
 * BN gamma 1, beta 0, running stats 0 / 1; fc as nn.Linear's default,
 * U(-1/sqrt(in), 1/sqrt(in)) for weight and bias; zero_init_residual sets
 * each block's last BN gamma to 0 (Goyal et al. 2017). Normals are drawn in
 * torchvision's OIHW order and stored OHWI, so a seed gives the same network
 * whatever the memory layout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops/mem.h"
#include "train/model/model_int.h"

typedef struct arch_desc {
    const char *name;
    int stages;
    int blocks[4];
    int bottleneck;   /* Bottleneck (expansion 4) instead of BasicBlock */
    int cifar;        /* 3x3 stem, no max pool */
    int width;        /* default base width */
} arch_desc;

static const arch_desc arch_table[] = {
    [SL_ARCH_RESNET20] = {"resnet20", 3, {3, 3, 3, 0}, 0, 1, 16},
    [SL_ARCH_RESNET18] = {"resnet18", 4, {2, 2, 2, 2}, 0, 0, 64},
    [SL_ARCH_RESNET50] = {"resnet50", 4, {3, 4, 6, 3}, 1, 0, 64},
};
#define N_ARCH ((int)(sizeof arch_table / sizeof arch_table[0]))

const char *sl_arch_name(sl_arch a)
{
    if ((int)a < 0 || (int)a >= N_ARCH)
        return "?";
    return arch_table[a].name;
}

int sl_arch_parse(const char *name, sl_arch *out)
{
    for (int i = 0; name && i < N_ARCH; i++) {
        if (strcmp(name, arch_table[i].name) == 0) {
            *out = (sl_arch)i;
            return SL_OK;
        }
    }
    return sl_fail(SL_EINVAL, "sl_arch_parse: unknown architecture '%s' (resnet20, resnet18, "
                   "resnet50)", name ? name : "(null)");
}

/* ------------------------------------------------------------------ plan */

/* Append one conv+BN unit; its output size comes from the conv geometry. */
static int add_cbn(sl_model *m, const char *prefix, const char *conv, const char *bn, int input,
                   int cin, int cout, int r, int stride, int pad, int h, int w, int relu)
{
    sl_conv_shape sh;
    int rc = sl_conv_shape_init(&sh, 1, h, w, cin, cout, r, r, stride, pad);
    if (rc)
        return sl_fail(rc, "sl_model_create: %s%s: input %dx%d too small: %s", prefix, conv, h,
                       w, sl_errmsg());
    sl_cbn *c = &m->cbn[m->ncbn++];
    snprintf(c->conv_name, sizeof c->conv_name, "%s%s", prefix, conv);
    snprintf(c->bn_name, sizeof c->bn_name, "%s%s", prefix, bn);
    c->cin = cin, c->cout = cout, c->r = r, c->stride = stride, c->pad = pad;
    c->ih = h, c->iw = w, c->p = sh.p, c->q = sh.q;
    c->relu = relu;
    c->input = input;
    return SL_OK;
}

/* Fill m->cbn and m->blk with the architecture's geometry (no memory yet). */
static int plan(sl_model *m, const arch_desc *a)
{
    int wd = m->cfg.width, exp = a->bottleneck ? 4 : 1, rc;
    if (a->cifar)
        rc = add_cbn(m, "", "conv1", "bn1", -2, 3, wd, 3, 1, 1, m->h, m->w, 1);
    else
        rc = add_cbn(m, "", "conv1", "bn1", -2, 3, wd, 7, 2, 3, m->h, m->w, 1);
    if (rc)
        return rc;
    int h = m->cbn[0].p, w = m->cbn[0].q, in = 0; /* in: cbn whose z feeds the next block */
    if (!a->cifar) {
        sl_pool_shape ps;
        rc = sl_pool_shape_init(&ps, 1, h, w, wd, 3, 2, 1);
        if (rc)
            return sl_fail(rc, "sl_model_create: maxpool: %s", sl_errmsg());
        m->stem_pool = 1;
        m->cbn[0].ztemp = 1; /* read by the pool only (model_int.h) */
        m->pool_h = h = ps.p, m->pool_w = w = ps.q;
        in = -1;
    }
    int inplanes = wd;
    for (int s = 0; s < a->stages; s++) {
        int planes = wd << s;
        for (int b = 0; b < a->blocks[s]; b++) {
            char pfx[48];
            snprintf(pfx, sizeof pfx, "layer%d.%d.", s + 1, b);
            int stride = (s > 0 && b == 0) ? 2 : 1;
            sl_block *blk = &m->blk[m->nblock++];
            blk->first = m->ncbn;
            blk->ds = -1;
            int c1 = m->ncbn;
            if (a->bottleneck) {
                /* 1x1 reduce, 3x3 (stride: v1.5), 1x1 expand */
                rc = add_cbn(m, pfx, "conv1", "bn1", in, inplanes, planes, 1, 1, 0, h, w, 1);
                if (!rc)
                    rc = add_cbn(m, pfx, "conv2", "bn2", c1, planes, planes, 3, stride, 1, h, w,
                                 1);
                if (!rc)
                    rc = add_cbn(m, pfx, "conv3", "bn3", c1 + 1, planes, planes * exp, 1, 1, 0,
                                 m->cbn[c1 + 1].p, m->cbn[c1 + 1].q, 0);
                blk->nconv = 3;
            } else {
                rc = add_cbn(m, pfx, "conv1", "bn1", in, inplanes, planes, 3, stride, 1, h, w, 1);
                if (!rc)
                    rc = add_cbn(m, pfx, "conv2", "bn2", c1, planes, planes, 3, 1, 1,
                                 m->cbn[c1].p, m->cbn[c1].q, 0);
                blk->nconv = 2;
            }
            if (!rc && (stride != 1 || inplanes != planes * exp)) {
                blk->ds = m->ncbn;
                rc = add_cbn(m, pfx, "downsample.0", "downsample.1", in, inplanes, planes * exp,
                             1, stride, 0, h, w, 0);
                if (!rc)
                    m->cbn[blk->ds].ztemp = 1; /* read by the shortcut add only */
            }
            if (rc)
                return rc;
            const sl_cbn *last = &m->cbn[blk->first + blk->nconv - 1];
            if (blk->ds >= 0 && (m->cbn[blk->ds].p != last->p || m->cbn[blk->ds].q != last->q))
                return sl_fail(SL_EINVAL, "sl_model_create: %sdownsample: %dx%d output does not "
                               "match the block's %dx%d", pfx, m->cbn[blk->ds].p,
                               m->cbn[blk->ds].q, last->p, last->q);
            in = blk->first + blk->nconv - 1;
            h = last->p, w = last->q;
            inplanes = planes * exp;
        }
    }
    m->feat = inplanes;
    m->feat_hw = h * w;
    return SL_OK;
}

static float *falloc(int64_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float)))
        return NULL;
    return p;
}

/* --------------------------------------------------------------- init */

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; } /* [0, 1) */

/* n normals N(0, std^2) by Box-Muller, both values of each pair used. */
static void fill_normal(rng *r, float *v, int64_t n, double std)
{
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - rng_unit(r), u2 = rng_unit(r); /* u1 in (0, 1] */
        double rad = std * sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
        v[i] = (float)(rad * cos(th));
        if (i + 1 < n)
            v[i + 1] = (float)(rad * sin(th));
    }
}

static void init_weights(sl_model *m, float *tmp)
{
    rng r;
    uint64_t sm = m->cfg.seed;
    for (int i = 0; i < 4; i++)
        r.s[i] = splitmix64(&sm);
    for (int i = 0; i < m->ncbn; i++) {
        sl_cbn *c = &m->cbn[i];
        int K = c->cout, C = c->cin, R = c->r;
        /* tmp: (k, c, r, s) as torch draws it -> w: (k, r, s, c) */
        fill_normal(&r, tmp, (int64_t)K * C * R * R, sqrt(2.0 / ((double)K * R * R)));
        for (int k = 0; k < K; k++)
            for (int ci = 0; ci < C; ci++)
                for (int rs = 0; rs < R * R; rs++)
                    c->w[((int64_t)k * R * R + rs) * C + ci] =
                        tmp[((int64_t)k * C + ci) * R * R + rs];
        for (int k = 0; k < K; k++) {
            c->gamma[k] = 1.0f, c->beta[k] = 0.0f;
            c->rmean[k] = 0.0f, c->rvar[k] = 1.0f;
        }
        *c->nbt = 0;
    }
    if (m->cfg.zero_init_residual)
        for (int b = 0; b < m->nblock; b++) {
            sl_cbn *last = &m->cbn[m->blk[b].first + m->blk[b].nconv - 1];
            memset(last->gamma, 0, sizeof(float) * (size_t)last->cout);
        }
    double bound = 1.0 / sqrt((double)m->feat);
    int64_t fw = (int64_t)m->cfg.classes * m->feat;
    for (int64_t i = 0; i < fw; i++)
        m->fc_w[i] = (float)(bound * (2.0 * rng_unit(&r) - 1.0));
    for (int i = 0; i < m->cfg.classes; i++)
        m->fc_b[i] = (float)(bound * (2.0 * rng_unit(&r) - 1.0));
}

/* ------------------------------------------------------------ state dict */

static sl_tensor_info *entry(sl_model *m, const char *base, const char *leaf, sl_dtype_tag dt,
                             void *data, float *grad, int ndim, const int64_t *shape,
                             unsigned flags)
{
    int i = m->ntensors++;
    sl_tensor_info *t = &m->tensors[i];
    snprintf(m->names[i], sizeof m->names[i], "%s.%s", base, leaf);
    t->name = m->names[i];
    t->dtype = dt, t->data = data, t->grad = grad;
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d], t->numel *= shape[d];
    t->flags = flags;
    return t;
}

static void build_state_dict(sl_model *m)
{
    const unsigned W = SL_TENSOR_PARAM | SL_TENSOR_DECAY, P = SL_TENSOR_PARAM,
                   B = SL_TENSOR_BUFFER;
    for (int i = 0; i < m->ncbn; i++) {
        sl_cbn *c = &m->cbn[i];
        int64_t ws[4] = {c->cout, c->cin, c->r, c->r}, cs[1] = {c->cout};
        c->tensor = m->ntensors; /* model.c's grad-ready hook names tensors by index */
        entry(m, c->conv_name, "weight", SL_T_F32, c->w, c->gw, 4, ws, W | SL_TENSOR_OHWI);
        entry(m, c->bn_name, "weight", SL_T_F32, c->gamma, c->ggamma, 1, cs, P);
        entry(m, c->bn_name, "bias", SL_T_F32, c->beta, c->gbeta, 1, cs, P);
        entry(m, c->bn_name, "running_mean", SL_T_F32, c->rmean, NULL, 1, cs, B);
        entry(m, c->bn_name, "running_var", SL_T_F32, c->rvar, NULL, 1, cs, B);
        entry(m, c->bn_name, "num_batches_tracked", SL_T_I64, c->nbt, NULL, 0, NULL, B);
    }
    int64_t fs[2] = {m->cfg.classes, m->feat};
    m->fc_tensor = m->ntensors;
    entry(m, "fc", "weight", SL_T_F32, m->fc_w, m->fc_gw, 2, fs, W);
    entry(m, "fc", "bias", SL_T_F32, m->fc_b, m->fc_gb, 1, fs, P);
    m->n_params = 0;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tensors[i].flags & SL_TENSOR_PARAM)
            m->n_params += m->tensors[i].numel;
}

/* ------------------------------------------------------------- create */

/* A model of cfg with its plan (units, blocks, sync-BN's buffer size) and
 * no arenas: sl_model_create's first half, and all sl_model_plan_bytes
 * needs. */
static int model_new(const char *fn, const sl_model_config *cfg, int max_batch, int h, int w,
                     sl_model **out)
{
    *out = NULL;
    int rc = sl_check_config_size(fn, cfg->size, sizeof *cfg);
    if (rc)
        return rc;
    if ((int)cfg->arch < 0 || (int)cfg->arch >= N_ARCH)
        return sl_fail(SL_EINVAL, "%s: unknown architecture %d", fn, (int)cfg->arch);
    const arch_desc *a = &arch_table[cfg->arch];
    if (cfg->classes < 1 || cfg->width < 0 || cfg->width > 4096)
        return sl_fail(SL_EINVAL, "%s: %s: bad classes %d or width %d", fn, a->name,
                       cfg->classes, cfg->width);
    if (!(cfg->bn_momentum >= 0.0f && cfg->bn_momentum <= 1.0f) || !(cfg->bn_eps > 0.0f))
        return sl_fail(SL_EINVAL, "%s: %s: bad bn_momentum %g or bn_eps %g", fn, a->name,
                       (double)cfg->bn_momentum, (double)cfg->bn_eps);
    if (max_batch < 1 || h < 1 || w < 1 || h > 65536 || w > 65536)
        return sl_fail(SL_EINVAL, "%s: %s: bad max_batch %d or input %dx%d", fn, a->name,
                       max_batch, h, w);
    int nblocks = 0, stages = a->stages;
    for (int s = 0; s < stages; s++)
        nblocks += a->blocks[s];
    int cap = 1 + nblocks * (a->bottleneck ? 3 : 2) + stages; /* at most one ds per stage */
    sl_model *m = calloc(1, sizeof *m);
    if (!m)
        return sl_fail(SL_ENOMEM, "%s: model struct", fn);
    m->cfg = *cfg;
    if (m->cfg.width == 0)
        m->cfg.width = a->width;
    m->max_batch = max_batch, m->h = h, m->w = w;
    m->cbn = calloc((size_t)cap, sizeof *m->cbn);
    m->blk = calloc((size_t)nblocks, sizeof *m->blk);
    if (!m->cbn || !m->blk) {
        sl_model_destroy(m);
        return sl_fail(SL_ENOMEM, "%s: %s: the plan's tables", fn, a->name);
    }
    if ((rc = plan(m, a))) {
        sl_model_destroy(m);
        return rc;
    }
    int64_t cmax = 1;
    for (int i = 0; i < m->ncbn; i++)
        cmax = m->cbn[i].cout > cmax ? m->cbn[i].cout : cmax;
    m->sync_floats = 2 * cmax;
    *out = m;
    return SL_OK;
}

/* Bytes of the argmax of the stem's max pool. */
static size_t argmax_bytes(const sl_model *m)
{
    return m->stem_pool ? (size_t)m->max_batch * m->pool_h * m->pool_w * m->cbn[0].cout *
                              sizeof(int32_t)
                        : 0;
}

int sl_model_create(const sl_model_config *cfg, int max_batch, int h, int w, sl_model **out)
{
    const char *fn = "sl_model_create";
    if (!cfg || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    sl_model *m = NULL;
    int rc = model_new(fn, cfg, max_batch, h, w, &m);
    if (rc)
        return rc;
    float *tmp = NULL;
    sl_arena_use u;
    if ((rc = sl_model_layout(m, &u, sizeof(float), 0))) { /* count */
        sl_model_destroy(m);
        return rc;
    }
    m->params = falloc(u.params);
    m->grads = falloc(u.params);
    m->bufs = falloc(u.bufs);
    m->acts = (char *)falloc((int64_t)(u.acts / sizeof(float)));
    m->nbts = calloc((size_t)m->ncbn, sizeof *m->nbts);
    m->pool_arg = m->stem_pool ? malloc(argmax_bytes(m)) : NULL;
    m->tensors = calloc((size_t)m->ncbn * 6 + 2, sizeof *m->tensors);
    m->names = calloc((size_t)m->ncbn * 6 + 2, sizeof *m->names);
    int64_t wmax = (int64_t)m->cfg.classes * m->feat;
    for (int i = 0; i < m->ncbn; i++) {
        int64_t wn = (int64_t)m->cbn[i].cout * m->cbn[i].cin * m->cbn[i].r * m->cbn[i].r;
        wmax = wn > wmax ? wn : wmax;
    }
    tmp = falloc(wmax + 1);
    m->sync_buf = falloc(m->sync_floats);
    if (!m->params || !m->grads || !m->bufs || !m->acts || !m->nbts || !tmp ||
        (m->stem_pool && !m->pool_arg) || !m->tensors || !m->names || !m->sync_buf) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: batch %d at %dx%d: out of memory", fn,
                     sl_arch_name(cfg->arch), max_batch, h, w);
        free(tmp);
        sl_model_destroy(m);
        return rc;
    }
    /* Padding between tensors stays zero in both arenas (a flat all-reduce
     * or optimizer pass over them then sees zeros there). The activation
     * arena is left untouched: every activation is written before it is
     * read, and untouched pages of a large allocation cost nothing. */
    memset(m->params, 0, (size_t)u.params * sizeof(float));
    memset(m->grads, 0, (size_t)u.params * sizeof(float));
    memset(m->bufs, 0, (size_t)u.bufs * sizeof(float));
    if ((rc = sl_model_layout(m, &u, sizeof(float), 1))) { /* assign */
        free(tmp);
        sl_model_destroy(m);
        return rc;
    }
    m->arena_floats = u.params;
    m->bufs_floats = u.bufs;
    m->acts_bytes = u.acts;
    for (int i = 0; i < m->ncbn; i++)
        m->cbn[i].wc = m->cbn[i].w;
    init_weights(m, tmp);
    build_state_dict(m);
    m->bytes = (size_t)(2 * u.params + u.bufs) * sizeof(float) + u.acts +
               (size_t)m->ncbn * sizeof(int64_t) + argmax_bytes(m);
    free(tmp);
    *out = m;
    return SL_OK;
}

int sl_model_plan_bytes(const sl_model_config *cfg, int max_batch, int h, int w,
                        size_t act_size, int acc, sl_model_mem *out)
{
    sl_model *m = NULL;
    if (!cfg || !out || (act_size != 2 && act_size != 4))
        return sl_fail(SL_EINVAL, "sl_model_plan_bytes: NULL argument or %zu-byte activations",
                       act_size);
    int rc = model_new("sl_model_plan_bytes", cfg, max_batch, h, w, &m);
    if (rc)
        return rc;
    sl_arena_use u;
    m->acc = acc != 0;
    if ((rc = sl_model_layout(m, &u, act_size, 0))) {
        sl_model_destroy(m);
        return rc;
    }
    /* sl_model_place: params, grads (f32) and the compute copy in the
     * activation type; bufs and the sync buffer; activations and argmax */
    out->param_floats = u.params;
    out->params = (size_t)u.params * (2 * sizeof(float) + (act_size == 4 ? 0 : act_size));
    out->bufs = (size_t)(u.bufs + m->sync_floats) * sizeof(float);
    out->acts = u.acts + argmax_bytes(m);
    sl_model_destroy(m);
    return SL_OK;
}

/* ------------------------------------------------------------- placing */

/* On an exec that fuses (sl_fuse_available): each BN's fusion vectors
 * (model_int.h) in one device arena, 16-byte aligned each, and the
 * identity prologue (fp16 ones, then zeros, for the widest input). A few
 * hundred KiB for ResNet-50. */
static int place_fusion(sl_model *m, sl_exec *e)
{
    if (!sl_fuse_available(e))
        return SL_OK;
    int64_t floats = 0;
    int idc = 8;
    for (int i = 0; i < m->ncbn; i++) {
        floats += 15 * sl_al(m->cbn[i].cout); /* sum, sq, 4 k, 8 coef, 2 fp16 sb */
        idc = m->cbn[i].cin > idc ? m->cbn[i].cin : idc;
    }
    size_t bytes = (size_t)floats * sizeof(float) + (size_t)idc * 2 * sizeof(uint16_t);
    uint16_t *id = malloc((size_t)idc * 2 * sizeof *id);
    void *arena = NULL;
    int rc = id ? sl_mem_alloc(e, bytes, &arena) : SL_ENOMEM;
    if (!rc) {
        for (int i = 0; i < idc; i++)
            id[i] = 0x3c00, id[idc + i] = 0; /* fp16 1.0 and 0.0 */
        rc = sl_mem_copy_in(e, (char *)arena + (size_t)floats * sizeof(float), id,
                            (size_t)idc * 2 * sizeof *id);
    }
    free(id);
    if (rc) {
        sl_mem_free(e, arena);
        return sl_fail(rc, "sl_model_place: cuDNN fusion's %zu bytes: %s", bytes, sl_errmsg());
    }
    float *f = arena;
    for (int i = 0; i < m->ncbn; i++) {
        sl_cbn *c = &m->cbn[i];
        int64_t C = sl_al(c->cout);
        c->fsum = f, c->fsq = f + C, c->fk = f + 2 * C, c->fcoef = f + 6 * C;
        c->fsb = f + 14 * C;
        f += 15 * C;
    }
    m->fuse_arena = arena;
    m->fuse_id = f;
    m->fuse_idc = idc;
    m->bytes += bytes;
    return SL_OK;
}

/* On a host exec with a 2-byte activation type (the cpu backend's bf16):
 * the activation arena again in that type, the convs' copy of the weights
 * and the stem's copy of the input (model.c's forward renews both from the
 * f32 params and the caller's f32 x). The params, grads and buffers stay
 * where they are, f32: the state dict's, which the optimizer steps as on
 * an f32 exec (fp32 master weights, the cuda backend's recipe). */
static int place_host(sl_model *m, sl_exec *e)
{
    const char *fn = "sl_model_place";
    if (m->act != SL_DTYPE_F32)
        return sl_fail(SL_EINVAL, "%s: the model is placed already", fn);
    size_t asz = sl_exec_act_size(e);
    size_t xb = (size_t)m->max_batch * (size_t)m->h * (size_t)m->w * (size_t)m->cbn[0].cin * asz;
    sl_arena_use u;
    int rc = sl_model_layout(m, &u, asz, 0);
    if (rc)
        return rc;
    void *acts = NULL, *wc = NULL, *xin = NULL;
    if ((rc = sl_mem_host_alloc(u.acts, &acts)) ||
        (rc = sl_mem_host_alloc((size_t)m->arena_floats * asz, &wc)) ||
        (rc = sl_mem_host_alloc(xb, &xin))) {
        free(acts), free(wc), free(xin);
        return sl_fail(rc, "%s: %s %s batch %d at %dx%d: %s", fn, sl_arch_name(m->cfg.arch),
                       sl_precision_name(e->act), m->max_batch, m->h, m->w, sl_errmsg());
    }
    free(m->acts);
    m->acts = acts, m->acts_bytes = u.acts, m->wc_arena = wc, m->xin = xin, m->act = e->act;
    if ((rc = sl_model_layout(m, &u, asz, 1))) /* the same params; acts in the new arena */
        return rc;
    for (int i = 0; i < m->ncbn; i++)
        m->cbn[i].wc = (float *)((char *)wc + (size_t)(m->cbn[i].w - m->params) * asz);
    m->bytes = (size_t)(2 * u.params + u.bufs) * sizeof(float) + u.acts +
               (size_t)u.params * asz + xb + (size_t)m->ncbn * sizeof(int64_t) +
               argmax_bytes(m);
    m->train_n = 0;
    return SL_OK;
}

int sl_model_place(sl_model *m, sl_exec *e)
{
    const char *fn = "sl_model_place";
    if (!m || !e)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (!sl_mem_on_device(e))
        return e->act == SL_DTYPE_F32 ? SL_OK : place_host(m, e);
    if (m->dev_e)
        return sl_fail(SL_EINVAL, "%s: the model is on a device already", fn);
    size_t asz = sl_exec_act_size(e), pb = (size_t)m->arena_floats * sizeof(float);
    sl_arena_use u;
    int rc, host_acc = m->acc;
    /* the device's activation arena: asz-byte elements, laid out for its table */
    m->acc = e->ops && e->ops->conv_bwd_data_acc;
    if ((rc = sl_model_layout(m, &u, asz, 0))) {
        m->acc = host_acc;
        return rc;
    }
    float *dp = NULL, *dg = NULL, *db = NULL, *ds = NULL;
    char *da = NULL;
    int32_t *darg = NULL;
    void *dwc = NULL;
    if ((rc = sl_mem_alloc(e, pb, (void **)&dp)) || (rc = sl_mem_alloc(e, pb, (void **)&dg)) ||
        (rc = sl_mem_alloc(e, (size_t)m->bufs_floats * sizeof(float), (void **)&db)) ||
        (rc = sl_mem_alloc(e, u.acts, (void **)&da)) ||
        (rc = sl_mem_alloc(e, (size_t)m->sync_floats * sizeof(float), (void **)&ds)) ||
        (m->stem_pool && (rc = sl_mem_alloc(e, argmax_bytes(m), (void **)&darg))) ||
        (e->act != SL_DTYPE_F32 &&
         (rc = sl_mem_alloc(e, (size_t)m->arena_floats * asz, &dwc))) ||
        (rc = sl_mem_copy_in(e, dp, m->params, pb)) ||
        (rc = sl_mem_copy_in(e, db, m->bufs, (size_t)m->bufs_floats * sizeof(float)))) {
        sl_mem_free(e, dp), sl_mem_free(e, dg), sl_mem_free(e, db), sl_mem_free(e, da);
        sl_mem_free(e, darg), sl_mem_free(e, dwc), sl_mem_free(e, ds);
        m->acc = host_acc;
        return sl_fail(rc, "%s: %s %s batch %d at %dx%d: %s", fn, sl_arch_name(m->cfg.arch),
                       sl_backend_name(e->backend), m->max_batch, m->h, m->w, sl_errmsg());
    }
    /* The host arenas stay as the state dict's copies; the activations
     * and argmax are not needed on the host any more. */
    m->h_params = m->params, m->h_grads = m->grads, m->h_bufs = m->bufs;
    free(m->acts);
    free(m->pool_arg);
    m->params = dp, m->grads = dg, m->bufs = db, m->acts = da, m->pool_arg = darg;
    m->h_sync_buf = m->sync_buf, m->sync_buf = ds; /* sync-BN's all-reduces: on the device */
    m->wc_arena = dwc;
    m->dev_e = e;
    m->acts_bytes = u.acts;
    if ((rc = sl_model_layout(m, &u, asz, 1))) /* every pointer again, now into the device arenas */
        return rc; /* only the plan's small table can fail: the counting pass made it */
    for (int i = 0; i < m->ncbn; i++) {
        sl_cbn *c = &m->cbn[i];
        c->wc = dwc ? (float *)((char *)dwc + (size_t)(c->w - m->params) * asz) : c->w;
    }
    m->bytes = (size_t)(2 * u.params + u.bufs + m->sync_floats) * sizeof(float) + u.acts +
               (dwc ? (size_t)u.params * asz : 0) + argmax_bytes(m);
    m->train_n = 0;
    if ((rc = place_fusion(m, e)))
        return rc;
    return sl_model_refresh(m);
}

int sl_model_on_device(const sl_model *m) { return m && m->dev_e != NULL; }

int sl_model_refresh(sl_model *m)
{
    if (!m || !m->wc_arena)
        return SL_OK;
    if (!m->dev_e) { /* placed on a host exec in bf16 (place_host) */
        return sl_mem_host_cast(m->arena_floats, m->params, m->wc_arena, m->act);
    }
    return sl_mem_cast(m->dev_e, m->arena_floats, m->params, m->wc_arena, m->dev_e->act);
}

int sl_model_pull(sl_model *m)
{
    if (!m || !m->dev_e)
        return SL_OK;
    int rc = sl_mem_copy_out(m->dev_e, m->h_params, m->params,
                             (size_t)m->arena_floats * sizeof(float));
    if (!rc)
        rc = sl_mem_copy_out(m->dev_e, m->h_bufs, m->bufs,
                             (size_t)m->bufs_floats * sizeof(float));
    return rc ? sl_fail(rc, "sl_model_pull: %s", sl_errmsg()) : SL_OK;
}

int sl_model_push(sl_model *m)
{
    if (!m || !m->dev_e)
        return SL_OK;
    int rc = sl_mem_copy_in(m->dev_e, m->params, m->h_params,
                            (size_t)m->arena_floats * sizeof(float));
    if (!rc)
        rc = sl_mem_copy_in(m->dev_e, m->bufs, m->h_bufs,
                            (size_t)m->bufs_floats * sizeof(float));
    if (!rc)
        rc = sl_model_refresh(m);
    return rc ? sl_fail(rc, "sl_model_push: %s", sl_errmsg()) : SL_OK;
}

void sl_model_destroy(sl_model *m)
{
    if (!m)
        return;
    sl_model_sync_free(m);
    if (m->dev_e) {
        sl_exec *e = m->dev_e;
        sl_mem_free(e, m->params), sl_mem_free(e, m->grads), sl_mem_free(e, m->bufs);
        sl_mem_free(e, m->acts), sl_mem_free(e, m->pool_arg), sl_mem_free(e, m->wc_arena);
        sl_mem_free(e, m->sync_buf), sl_mem_free(e, m->fuse_arena);
        m->params = m->h_params, m->grads = m->h_grads, m->bufs = m->h_bufs;
        m->sync_buf = m->h_sync_buf;
        m->acts = NULL, m->pool_arg = NULL;
    }
    if (!m->dev_e)
        free(m->wc_arena); /* place_host's */
    free(m->xin);
    free(m->cbn);
    free(m->blk);
    free(m->params);
    free(m->grads);
    free(m->bufs);
    free(m->acts);
    free(m->nbts);
    free(m->pool_arg);
    free(m->tensors);
    free(m->names);
    free(m->sync_buf);
    free(m);
}

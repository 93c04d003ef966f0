/*
 * train/model/layout.c - the memory plan of a ResNet (model_int.h's
 * "Memory"): where each parameter, buffer, activation and gradient buffer
 * lies in its arena, the same walk counting the arenas (sl_model_create,
 * sl_model_place, sl_model_plan_bytes) and handing out pointers into them.
 * Gradient and scratch buffers go into activation memory that is dead
 * while they are used (plan_grads), as PyTorch's caching allocator would
 * reuse it, and only the rest into a tail at the arena's end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/model/model_int.h"

/* Bytes rounded up to 64. */
static size_t alb(size_t n) { return (n + 63) & ~(size_t)63; }

/* A half-open byte range of the activation arena. */
typedef struct span {
    size_t lo, hi;
} span;

/* The first 64-byte aligned offset >= lo where need bytes fit below hi
 * without touching any of the nb busy spans; SIZE_MAX when none does. */
static size_t fit(size_t lo, size_t hi, size_t need, const span *busy, int nb)
{
    size_t at = alb(lo);
    for (int moved = 1; moved;) {
        moved = 0;
        for (int k = 0; k < nb; k++)
            if (busy[k].lo < at + need && at < busy[k].hi) {
                at = alb(busy[k].hi);
                moved = 1;
            }
    }
    return hi >= need && at <= hi - need ? at : SIZE_MAX;
}

/* need bytes in the dead span [lo, hi) if they fit there, else in the tail
 * (the arena's end, [tail, *tail_end) so far, grown as needed); the busy
 * spans avoided in both. */
/* SLUICE_MODEL_GRAD_TAIL=1: every scratch and gradient buffer in the tail,
 * none in memory an activation also uses (tests compare the two layouts
 * bit for bit). */
static int tail_only(void)
{
    const char *v = getenv("SLUICE_MODEL_GRAD_TAIL");
    return v && strcmp(v, "1") == 0;
}

static size_t place(size_t lo, size_t hi, size_t need, const span *busy, int nb, size_t tail,
                    size_t *tail_end)
{
    size_t at = tail_only() ? SIZE_MAX : fit(lo, hi, need, busy, nb);
    if (at == SIZE_MAX) {
        at = fit(tail, SIZE_MAX, need, busy, nb);
        if (at + need > *tail_end)
            *tail_end = at + need;
    }
    return at;
}

/* Bytes of cbn i's activation (y or z) at the model's batch. */
static size_t act_bytes(const sl_model *m, int i, size_t asz)
{
    const sl_cbn *c = &m->cbn[i];
    return (size_t)m->max_batch * c->p * c->q * c->cout * asz;
}

/* Offsets of the scratch and gradient buffers (model_int.h's "grads"). */
typedef struct grad_plan {
    size_t head, pool, stemz; /* ghead, gpool, the pooled stem's z */
    size_t *gd, *gout, *gtmp, *dsz; /* per block; gtmp SIZE_MAX: none */
} grad_plan;

/* Place them for blocks whose memory spans [bstart[b], bend[b]); every
 * block after b is dead while b's backward runs, and not yet written while
 * b's forward runs. Returns the arena's size (the tail's end). */
static size_t plan_grads(const sl_model *m, size_t asz, const size_t *bstart, const size_t *bend,
                         size_t tail, grad_plan *g)
{
    size_t tail_end = tail, end = bend[m->nblock - 1];
    const sl_block *lb = &m->blk[m->nblock - 1];
    span ain = {0, 0};
    ain.lo = g->head = place(0, 0, act_bytes(m, lb->first + lb->nconv - 1, asz), NULL, 0, tail,
                             &tail_end);
    ain.hi = ain.lo + act_bytes(m, lb->first + lb->nconv - 1, asz);
    for (int b = m->nblock - 1; b >= 0; b--) {
        const sl_block *k = &m->blk[b];
        const sl_cbn *f = &m->cbn[k->first];
        size_t in = (size_t)m->max_batch * f->ih * f->iw * f->cin * asz, dsz = 0;
        for (int j = 0; j + 1 < k->nconv; j++)
            dsz = act_bytes(m, k->first + j, asz) > dsz ? act_bytes(m, k->first + j, asz) : dsz;
        if (!m->acc && in > dsz) /* conv_bwd_data into gd, then add */
            dsz = in;
        span busy[3] = {ain};
        g->gd[b] = place(bend[b], end, dsz, busy, 1, tail, &tail_end);
        busy[1] = (span){g->gd[b], g->gd[b] + dsz};
        if (k->ds >= 0)
            g->gout[b] = place(bend[b], end, in, busy, 2, tail, &tail_end);
        else
            g->gout[b] = ain.lo; /* accumulated in place */
        busy[2] = (span){g->gout[b], g->gout[b] + in};
        /* a measured search's output: only where it is free anyway */
        g->gtmp[b] = !m->acc ? g->gd[b] : tail_only() ? SIZE_MAX : fit(bend[b], end, in, busy, 3);
        ain = busy[2];
        /* forward: a downsample's z, in blocks not yet written */
        if (k->ds >= 0)
            g->dsz[b] = place(bend[b], end, act_bytes(m, k->ds, asz), NULL, 0, tail, &tail_end);
    }
    if (m->stem_pool) {
        g->pool = place(bstart[0], end, act_bytes(m, 0, asz), &ain, 1, tail, &tail_end);
        g->stemz = place(bstart[0], end, act_bytes(m, 0, asz), NULL, 0, tail, &tail_end);
    }
    return alb(tail_end);
}

/* Activations in forward order (stem, pool, each block's units, the head's
 * f32 tensors), then the tail of plan_grads. */
int sl_model_layout(sl_model *m, sl_arena_use *u, size_t asz, int assign)
{
    int64_t P = 0, B = 0, nb = m->max_batch;
    size_t A = 0;
    size_t *tabs = calloc((size_t)m->nblock * 6, sizeof *tabs);
    if (!tabs)
        return sl_fail(SL_ENOMEM, "sl_model: the memory plan of %d blocks", m->nblock);
    size_t *bstart = tabs, *bend = tabs + m->nblock;
    grad_plan g = {0, 0, 0, tabs + 2 * m->nblock, tabs + 3 * m->nblock, tabs + 4 * m->nblock,
                   tabs + 5 * m->nblock};
#define TAKE(ptr, arena, off, n)                          \
    do {                                                  \
        if (assign)                                       \
            (ptr) = m->arena + (off);                     \
        (off) += sl_al(n);                                \
    } while (0)
#define TAKEA(ptr, elems, esz)                            \
    do {                                                  \
        if (assign)                                       \
            (ptr) = (void *)(m->acts + A);                \
        A += alb((size_t)(elems) * (esz));                \
    } while (0)
    int blk = -1; /* the block cbn i belongs to (-1: the stem) */
    for (int i = 0; i < m->ncbn; i++) {
        sl_cbn *c = &m->cbn[i];
        for (int b = 0; b < m->nblock; b++)
            if (i == m->blk[b].first) {
                blk = b;
                bstart[b] = A;
            }
        int64_t wn = (int64_t)c->cout * c->r * c->r * c->cin, an = nb * c->p * c->q * c->cout;
        if (assign) {
            c->gw = m->grads + P;
            c->ggamma = m->grads + P + sl_al(wn);
            c->gbeta = m->grads + P + sl_al(wn) + sl_al(c->cout);
            c->nbt = &m->nbts[i];
        }
        TAKE(c->w, params, P, wn);
        TAKE(c->gamma, params, P, c->cout);
        TAKE(c->beta, params, P, c->cout);
        TAKE(c->rmean, bufs, B, c->cout);
        TAKE(c->rvar, bufs, B, c->cout);
        TAKE(c->smean, bufs, B, c->cout);
        TAKE(c->sinvstd, bufs, B, c->cout);
        TAKEA(c->y, an, asz);
        if (!c->ztemp)
            TAKEA(c->z, an, asz);
        if (i == 0 && m->stem_pool)
            TAKEA(m->pool_y, nb * m->pool_h * m->pool_w * c->cout, asz);
        if (blk >= 0)
            bend[blk] = A;
    }
    int64_t fw = (int64_t)m->cfg.classes * m->feat;
    if (assign) {
        m->fc_gw = m->grads + P;
        m->fc_gb = m->grads + P + sl_al(fw);
    }
    TAKE(m->fc_w, params, P, fw);
    TAKE(m->fc_b, params, P, m->cfg.classes);
    TAKEA(m->pooled, nb * m->feat, sizeof(float));
    TAKEA(m->dpooled, nb * m->feat, sizeof(float));
    TAKEA(m->logits, nb * m->cfg.classes, sizeof(float));
#undef TAKE
#undef TAKEA
    u->params = P, u->bufs = B;
    u->acts = plan_grads(m, asz, bstart, bend, A, &g);
    if (assign) {
#define AT(off) ((float *)(void *)(m->acts + (off)))
        m->ghead = AT(g.head);
        for (int b = 0; b < m->nblock; b++) {
            sl_block *k = &m->blk[b];
            k->gd = AT(g.gd[b]), k->gout = AT(g.gout[b]);
            k->gtmp = g.gtmp[b] == SIZE_MAX ? NULL : AT(g.gtmp[b]);
            if (k->ds >= 0)
                m->cbn[k->ds].z = AT(g.dsz[b]);
        }
        if (m->stem_pool) {
            m->gpool = AT(g.pool);
            m->cbn[0].z = AT(g.stemz);
        }
#undef AT
    }
    free(tabs);
    return SL_OK;
}

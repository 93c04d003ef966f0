/*
 * train/model/model_fuse.c - a residual block's train step through cuDNN's
 * fused conv + BN plans (train/ops/ops.h's "cuDNN graph fusion"), one
 * convolution at a time: a convolution whose plan cuDNN refuses runs
 * unfused in place, the others stay fused; and the report of what ran how.
 *
 * Plans (sl_model_fuse_plan, every train forward; cached per shape by the
 * exec). A block fuses at all on an exec that fuses, without sync-BN,
 * with 2 or 3 main-path units whose BNs but the last have a ReLU. Then
 * each convolution wants (fuse_want):
 *   unit 0 and the downsample: ConvBNfprop (the block input through the
 *       identity prologue: s = 1, b = 0; it is a ReLU's output, so relu
 *       passes it); their backward is the unfused one (their input is
 *       materialized; no BN of this block before them);
 *   unit j >= 1: ConvBNfprop (input relu(bn_{j-1}(y_{j-1})) recomputed
 *       from y_{j-1} and BN j-1 folded into fp16 (s, b)), ConvBNwgrad (the
 *       same prologue), DgradDreluBNBwdWeight (conv j's data gradient,
 *       BN j-1's ReLU mask and weight gradients, recomputing BN j-1 in f32
 *       from y_{j-1}, mean, invstd, gamma, beta).
 * and gets (fuse_got) those cuDNN built. A block with none built runs
 * model.c's unfused block, bit for bit the unfused step.
 *
 * Forward (A = the block input; the main path u[0..L], L = nconv - 1):
 *   ds:  fused: y_ds, its sums (ConvBNfprop), BN finalize, z_ds =
 *        bn(y_ds) by the apply pass; refused: unit.c's cbn forward.
 *   u[j]: before it, z_{j-1} = relu(bn(y_{j-1})) is written when any of
 *        u[j]'s plans was refused (the unfused conv forward, weight
 *        gradient or BN backward of u[j-1] reads it; a fused chain never
 *        writes it). Fused: y_j and its sums (ConvBNfprop on y_{j-1} with
 *        (s, b)_{j-1}, or on A for j = 0), then the finalize: statistics,
 *        running update, (s, b)_j and the apply's constants. Refused:
 *        unit.c's cbn forward (conv on z_{j-1} or A, BN, ReLU), then the
 *        fold of its saved statistics into (s, b)_j, so that u[j+1] fuses.
 *   out: relu(bn_L(y_L) + shortcut) by the apply pass into z_L.
 * Backward (A = d(out)): BN L's backward with the block ReLU (masked A
 * left in place, the shortcut reads it); conv L's weight gradient; the
 * downsample unfused; then for j = L..1: conv j's weight gradient
 * (ConvBNwgrad from y_{j-1} and (s, b)_{j-1}, or unfused from z_{j-1}),
 * its data gradient with BN j-1's backward (DgradDreluBNBwdWeight: da in
 * gd, dgamma, dbeta, the coefficients of d(y_{j-1}) = eq_dy*da +
 * eq_x*y_{j-1} + eq_b that sl_fuse_bn_dx writes over y_{j-1}; or unfused:
 * conv_bwd_data into gd, then BN j-1's backward with its ReLU mask from
 * z_{j-1}); finally unit 0 unfused, its data gradient added into the
 * block input's. The grad-ready hooks come in model.c's unfused order.
 * Fused steps match the unfused ones within fp16 tolerance, not bits (the
 * variance from sums, not Welford's; cuDNN's own summation order).
 *
 * The report (sl_model_fusion_json): the last train forward's state as
 *   {"deterministic": true|false,
 *    "convs": [{"conv": "layer1.0.conv2", "fused": true|false,
 *               "fprop": S, "wgrad": S, "dgrad": S}, ...],
 *    "notes": ["ConvBNwgrad refused for n=... : <why, cuDNN's words>", ...]}
 * one entry per convolution of the residual blocks, S one of "fused",
 * "fused #i" (built, note i tells how: a retry), "refused #i" (note i says
 * why), "unfused" (not attempted: unit 0's and the downsample's
 * backward, or a block that does not fuse); "fused" true when every plan
 * the conv wants was built; "deterministic" false when a plan's engine
 * carries NONDETERMINISTIC (possible only with
 * SLUICE_CUDNN_DETERMINISTIC=0). Empty on an exec that does not fuse (the
 * caller's cudnn_fusion "off" and its why say so).
 *
 * Threading: as model.c (one thread per model and exec).
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "train/model/model_int.h"

enum { ALL3 = SL_FUSE_FPROP | SL_FUSE_WGRAD | SL_FUSE_DGRAD };

/* ------------------------------------------------------------------ plans */

/* The plans of kinds `want` for c at batch n into c->fuse_got; SL_OK, or
 * the error (a refusal is not one). */
static int plan_cbn(sl_exec *e, sl_cbn *c, int n, unsigned want)
{
    sl_conv_shape sh;
    int rc = sl_model_conv_shape(c, n, &sh);
    c->fuse_want = want, c->fuse_got = 0;
    for (unsigned k = 1; !rc && k <= SL_FUSE_DGRAD; k <<= 1) {
        if (!(want & k))
            continue;
        rc = sl_fuse_prepare(e, &sh, k);
        if (rc == SL_OK)
            c->fuse_got |= k;
        else if (rc == SL_ENOTSUP)
            rc = SL_OK; /* refused: that piece runs unfused */
    }
    return rc ? sl_fail(rc, "%s: %s", c->conv_name, sl_errmsg()) : SL_OK;
}

/* Whether block b can fuse at all (the top comment). */
static int block_can_fuse(const sl_model *m, const sl_exec *e, const sl_block *b)
{
    if (!m->fuse_arena || m->sync_on || b->nconv < 2 || !sl_fuse_available(e))
        return 0;
    for (int j = 0; j < b->nconv - 1; j++)
        if (!m->cbn[b->first + j].relu)
            return 0;
    return 1;
}

int sl_model_fuse_plan(sl_model *m, sl_exec *e, sl_block *b, int n)
{
    int convs = b->nconv + (b->ds >= 0), can = block_can_fuse(m, e, b), rc = SL_OK;
    for (int j = 0; j < b->nconv; j++)
        m->cbn[b->first + j].fuse_want = m->cbn[b->first + j].fuse_got = 0;
    if (b->ds >= 0)
        m->cbn[b->ds].fuse_want = m->cbn[b->ds].fuse_got = 0;
    b->fused = 0;
    m->fuse_total += convs;
    m->fuse_n = n;
    if (!can)
        return SL_OK;
    for (int j = 0; !rc && j < b->nconv; j++)
        rc = plan_cbn(e, &m->cbn[b->first + j], n, j ? ALL3 : SL_FUSE_FPROP);
    if (!rc && b->ds >= 0)
        rc = plan_cbn(e, &m->cbn[b->ds], n, SL_FUSE_FPROP);
    if (rc)
        return -rc;
    for (int i = 0; i < convs; i++) {
        const sl_cbn *c = &m->cbn[i < b->nconv ? b->first + i : b->ds];
        b->fused |= c->fuse_got != 0;
        m->fuse_units += c->fuse_got == c->fuse_want;
    }
    return SL_OK; /* b->fused 0 (nothing built): model.c's unfused block, bit for bit */
}

/* --------------------------------------------------------------- forward */

/* The identity prologue of c input channels: ones, then zeros (model_int.h). */
static const void *fuse_id(const sl_model *m, int c)
{
    return (const char *)m->fuse_id + (size_t)(m->fuse_idc - c) * 2;
}

/* A unit's fused conv + statistics + BN finalize, its input x through the
 * prologue sb (fp16 scale then bias of x's channels). */
static int unit_fwd_fused(sl_model *m, sl_exec *e, sl_cbn *c, int n, const float *x,
                          const void *sb)
{
    const char *fn = "sl_model_forward";
    sl_conv_shape sh;
    int rc;
    if ((rc = sl_model_conv_shape(c, n, &sh)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_fuse_conv_fwd(e, &sh, x, sb, c->wc, c->y, c->fsum, c->fsq)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_fuse_bn_finalize(e, c->cout, (int64_t)n * c->p * c->q, c->fsum,
                                  c->fsq, c->gamma, c->beta, m->cfg.bn_momentum,
                                  m->cfg.bn_eps, c->rmean, c->rvar, c->smean,
                                  c->sinvstd, c->fk, c->fsb)))
        return sl_model_op_fail(rc, fn, c->bn_name);
    (*c->nbt)++;
    return SL_OK;
}

/* A unit whose ConvBNfprop was refused: unit.c's conv + BN (+ ReLU) on
 * its materialized input, then its BN folded for the next fused conv. */
static int unit_fwd_unfused(sl_model *m, sl_exec *e, sl_cbn *c, int n)
{
    int rc = sl_model_cbn_fwd(m, e, c, n, 1, NULL);
    if (rc)
        return rc;
    rc = sl_fuse_bn_fold(e, c->cout, c->gamma, c->beta, c->smean, c->sinvstd, c->fk, c->fsb);
    return rc ? sl_model_op_fail(rc, "sl_model_forward", c->bn_name) : SL_OK;
}

int sl_model_block_fwd_fused(sl_model *m, sl_exec *e, const sl_block *b, int n)
{
    const char *fn = "sl_model_forward";
    sl_cbn *u = &m->cbn[b->first];
    const float *xin = sl_model_input_of(m, u), *shortcut = xin;
    int L = b->nconv - 1, rc;
    if (b->ds >= 0) {
        sl_cbn *d = &m->cbn[b->ds];
        if (d->fuse_got & SL_FUSE_FPROP) {
            if ((rc = unit_fwd_fused(m, e, d, n, xin, fuse_id(m, d->cin))))
                return rc;
            if ((rc = sl_fuse_bn_apply(e, (int64_t)n * d->p * d->q, d->cout, d->y,
                                       d->fk, NULL, 0, d->z)))
                return sl_model_op_fail(rc, fn, d->bn_name);
        } else if ((rc = sl_model_cbn_fwd(m, e, d, n, 1, NULL))) {
            return rc;
        }
        shortcut = d->z;
    }
    for (int j = 0; j <= L; j++) {
        sl_cbn *c = &u[j], *p = j ? &u[j - 1] : NULL;
        /* z_{j-1} for whatever of unit j runs unfused (the top comment) */
        if (p && c->fuse_got != c->fuse_want && (p->fuse_got & SL_FUSE_FPROP) &&
            (rc = sl_fuse_bn_apply(e, (int64_t)n * p->p * p->q, p->cout, p->y, p->fk, NULL, 1,
                                   p->z)))
            return sl_model_op_fail(rc, fn, p->bn_name);
        if (!(c->fuse_got & SL_FUSE_FPROP))
            rc = unit_fwd_unfused(m, e, c, n);
        else
            rc = unit_fwd_fused(m, e, c, n, p ? p->y : xin, p ? p->fsb : fuse_id(m, u[0].cin));
        if (rc)
            return rc;
    }
    sl_cbn *last = &u[L];
    if ((rc = sl_fuse_bn_apply(e, (int64_t)n * last->p * last->q, last->cout,
                               last->y, last->fk, shortcut, 1, last->z)))
        return sl_model_op_fail(rc, fn, last->bn_name);
    return SL_OK;
}

/* -------------------------------------------------------------- backward */

/* Unit c's weight gradient, then its hook: from its input relu(p->y*s + b)
 * recomputed (ConvBNwgrad), or unfused from the materialized z of p. */
static int wgrad(sl_model *m, sl_exec *e, sl_cbn *c, const sl_cbn *p, int n)
{
    const char *fn = "sl_model_backward";
    if (!(c->fuse_got & SL_FUSE_WGRAD))
        return sl_model_conv_bwd(m, e, c, n, NULL, SL_DX_NONE, NULL);
    sl_conv_shape sh;
    int rc;
    if ((rc = sl_model_conv_shape(c, n, &sh)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_fuse_conv_wgrad(e, &sh, p->y, p->fsb, c->y, c->gw)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    return sl_model_grad_ready(m, c->tensor);
}

/* Unit c's data gradient into gd with BN p's backward (d(y_p) over y_p,
 * its weight gradients and hooks): DgradDreluBNBwdWeight + the dx pass,
 * or conv_bwd_data and p's unfused BN backward (mask from p's z). */
static int dgrad(sl_model *m, sl_exec *e, sl_cbn *c, sl_cbn *p, int n, float *gd)
{
    const char *fn = "sl_model_backward";
    sl_conv_shape sh;
    int rc;
    if ((rc = sl_model_conv_shape(c, n, &sh)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if (!(c->fuse_got & SL_FUSE_DGRAD)) {
        if ((rc = sl_conv_bwd_data(e, &sh, c->y, c->wc, gd)))
            return sl_model_op_fail(rc, fn, c->conv_name);
        return sl_model_bn_bwd(m, e, p, n, 1, gd);
    }
    if ((rc = sl_fuse_conv_dgrad(e, &sh, c->y, c->wc, p->y, p->smean, p->sinvstd,
                                 p->gamma, p->beta, gd, p->ggamma, p->gbeta,
                                 p->fcoef)))
        return sl_model_op_fail(rc, fn, c->conv_name);
    if ((rc = sl_model_grad_ready(m, p->tensor + 1)) ||
        (rc = sl_model_grad_ready(m, p->tensor + 2)))
        return rc;
    if ((rc = sl_fuse_bn_dx(e, (int64_t)n * p->p * p->q, p->cout, gd, p->y, p->smean,
                            p->fcoef, p->y)))
        return sl_model_op_fail(rc, fn, p->bn_name);
    return SL_OK;
}

int sl_model_block_bwd_fused(sl_model *m, sl_exec *e, const sl_block *b, int n, float *A)
{
    sl_cbn *u = &m->cbn[b->first];
    int L = b->nconv - 1, rc;
    /* the block output's ReLU undone on A in place (the shortcut reads it) */
    if ((rc = sl_model_bn_bwd(m, e, &u[L], n, 1, A)) || (rc = wgrad(m, e, &u[L], &u[L - 1], n)))
        return rc;
    if (b->ds >= 0 && (rc = sl_model_cbn_bwd(m, e, &m->cbn[b->ds], n, m->cbn[b->ds].relu, A,
                                             b->gout, SL_DX_SET, NULL)))
        return rc;
    for (int j = L; j >= 1; j--) {
        if ((j < L && (rc = wgrad(m, e, &u[j], &u[j - 1], n))) ||
            (rc = dgrad(m, e, &u[j], &u[j - 1], n, b->gd)))
            return rc;
    }
    return sl_model_conv_bwd(m, e, &u[0], n, b->gout, SL_DX_ADD, b->gtmp);
}

/* ---------------------------------------------------------------- report */

void sl_model_fusion(const sl_model *m, int *fused, int *total)
{
    *fused = m ? m->fuse_units : 0;
    *total = m ? m->fuse_total : 0;
}

/* The notes of a report: each plan's words once, by index. */
typedef struct notes {
    cJSON *arr;
    const char **text;
    int n, cap;
} notes;

/* The index of t among the notes (added when new); -1 when out of memory. */
static int note_of(notes *ns, const char *t)
{
    for (int i = 0; i < ns->n; i++)
        if (strcmp(ns->text[i], t) == 0)
            return i;
    if (ns->n == ns->cap) {
        int ncap = ns->cap ? 2 * ns->cap : 16;
        const char **nt = realloc(ns->text, (size_t)ncap * sizeof *nt);
        if (!nt)
            return -1;
        ns->text = nt, ns->cap = ncap;
    }
    if (!cJSON_AddItemToArray(ns->arr, cJSON_CreateString(t)))
        return -1;
    ns->text[ns->n] = t;
    return ns->n++;
}

/* c's state of plan kind k as the top comment's S; *nondet set when a
 * built plan's engine is nondeterministic. */
static void kind_state(const sl_exec *e, const sl_cbn *c, const sl_conv_shape *sh, unsigned k,
                       notes *ns, int *nondet, char *out, size_t cap)
{
    sl_fuse_plan_info pi;
    if (!(c->fuse_want & k) || sl_fuse_plan(e, sh, k, &pi) != SL_OK) {
        snprintf(out, cap, "unfused");
        return;
    }
    *nondet |= pi.built && pi.nondeterministic;
    int i = pi.note[0] ? note_of(ns, pi.note) : -1;
    snprintf(out, cap, "%s", pi.built ? "fused" : "refused");
    if (i >= 0)
        snprintf(out + strlen(out), cap - strlen(out), " #%d", i);
}

/* The report of m's last train forward as cJSON (NULL: out of memory);
 * notes cut to cut_at characters (0: whole). */
static cJSON *report(const sl_model *m, const sl_exec *e, size_t cut_at)
{
    static const char *const kname[3] = {"fprop", "wgrad", "dgrad"};
    cJSON *root = cJSON_CreateObject(), *convs = cJSON_CreateArray();
    notes ns = {cJSON_CreateArray(), NULL, 0, 0};
    int nondet = 0, ok = root && convs && ns.arr;
    for (int b = 0; ok && b < m->nblock; b++) {
        const sl_block *k = &m->blk[b];
        for (int i = 0; ok && i < k->nconv + (k->ds >= 0); i++) {
            const sl_cbn *c = &m->cbn[i < k->nconv ? k->first + i : k->ds];
            sl_conv_shape sh;
            cJSON *o = cJSON_CreateObject();
            ok = o && cJSON_AddItemToArray(convs, o) && !sl_model_conv_shape(c, m->fuse_n, &sh) &&
                 cJSON_AddStringToObject(o, "conv", c->conv_name) &&
                 cJSON_AddBoolToObject(o, "fused", c->fuse_want && c->fuse_got == c->fuse_want);
            for (int kk = 0; ok && kk < 3; kk++) {
                char st[32];
                kind_state(e, c, &sh, 1u << kk, &ns, &nondet, st, sizeof st);
                ok = cJSON_AddStringToObject(o, kname[kk], st) != NULL;
            }
        }
    }
    for (int i = 0; ok && cut_at && i < ns.n; i++) {
        if (strlen(ns.text[i]) <= cut_at)
            continue;
        char *t = strndup(ns.text[i], cut_at);
        ok = t && cJSON_ReplaceItemInArray(ns.arr, i, cJSON_CreateString(t));
        free(t);
    }
    free(ns.text);
    if (ok && cJSON_AddBoolToObject(root, "deterministic", !nondet) &&
        cJSON_AddItemToObject(root, "convs", convs)) {
        convs = NULL; /* root's now */
        if (cJSON_AddItemToObject(root, "notes", ns.arr))
            return root;
    } else {
        cJSON_Delete(convs);
    }
    cJSON_Delete(ns.arr);
    cJSON_Delete(root);
    return NULL;
}

void sl_model_fusion_json(const sl_model *m, const sl_exec *e, char *buf, size_t cap)
{
    if (!cap)
        return;
    buf[0] = '\0';
    if (!m || !e || m->fuse_total == 0 || !sl_fuse_available(e))
        return;
    /* whole notes, then cut to 300 and 80 characters, until it fits */
    static const size_t cuts[] = {0, 300, 80};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        cJSON *r = report(m, e, cuts[i]);
        char *s = r ? cJSON_PrintUnformatted(r) : NULL;
        cJSON_Delete(r);
        if (s && strlen(s) < cap) {
            memcpy(buf, s, strlen(s) + 1);
            free(s);
            return;
        }
        free(s);
    }
    snprintf(buf, cap, "{\"error\": \"the fusion report does not fit in %zu bytes\"}", cap);
}

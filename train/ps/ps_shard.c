/*
 * train/ps/ps_shard.c - the parameter server's pieces that do not depend on
 * where a server runs (train/ps/ps_int.h): the sharding plan (which server
 * holds which tensor, at which offset of its payloads), a shard's state
 * (values, sl_sgd over them, version) and the staleness statistics. Used by
 * the in-process servers (train/ps/ps.c) and the MPI server ranks
 * (train/ps/ps_mpi.c).
 *
 * Grads of a push are not copied again at apply time: the shard's tensor
 * entries (which its sl_sgd reads at every step, sgd.c) get their grad
 * pointers aimed into the payload being applied.
 *
 * Threading: none inside; a shard is serialized by its owner (ps.c: a
 * rwlock per server; ps_mpi.c: the server rank's single loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/ps/ps_int.h"

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

static size_t tensor_bytes(const sl_tensor_info *t)
{
    return (size_t)t->numel * (t->dtype == SL_T_I64 ? sizeof(int64_t) : sizeof(float));
}

/* ============================================================ the plan */

typedef struct by_size {
    size_t bytes;
    int i;
} by_size;

static int cmp_by_size(const void *a, const void *b)
{
    const by_size *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1; /* biggest first */
    return x->i - y->i;
}

int sl_ps_plan_init(sl_ps_plan *p, sl_model *tmpl, int servers)
{
    const char *fn = "sl_ps_plan_init";
    memset(p, 0, sizeof *p);
    int n = 0;
    sl_tensor_info *t = tmpl ? sl_model_tensors(tmpl, &n) : NULL;
    if (!t || n < 1)
        return sl_fail(SL_EINVAL, "%s: template model has no tensors", fn);
    if (servers < 1 || servers > n)
        return sl_fail(SL_EINVAL, "%s: %d servers for %d tensors (need 1 .. %d)", fn, servers,
                       n, n);
    size_t name_bytes = 0;
    for (int i = 0; i < n; i++) {
        if ((t[i].dtype != SL_T_F32 && t[i].dtype != SL_T_I64) || t[i].numel < 0 || !t[i].data ||
            ((t[i].flags & SL_TENSOR_PARAM) && (t[i].dtype != SL_T_F32 || !t[i].grad)))
            return sl_fail(SL_EINVAL, "%s: tensor %d (%s): bad dtype, size or data", fn, i,
                           t[i].name ? t[i].name : "?");
        name_bytes += strlen(t[i].name ? t[i].name : "") + 1;
    }
    p->servers = servers;
    p->ntensors = n;
    p->tmpl = calloc((size_t)n, sizeof *p->tmpl);
    p->names = malloc(name_bytes);
    p->owner = calloc((size_t)n, sizeof *p->owner);
    p->first = calloc((size_t)servers, sizeof *p->first);
    p->count = calloc((size_t)servers, sizeof *p->count);
    p->ents = calloc((size_t)n, sizeof *p->ents);
    p->bytes = calloc((size_t)servers, sizeof *p->bytes);
    by_size *order = calloc((size_t)n, sizeof *order);
    if (!p->tmpl || !p->names || !p->owner || !p->first || !p->count || !p->ents || !p->bytes ||
        !order) {
        free(order);
        sl_ps_plan_fini(p);
        return sl_fail(SL_ENOMEM, "%s: plan for %d tensors", fn, n);
    }
    char *nm = p->names;
    for (int i = 0; i < n; i++) {
        p->tmpl[i] = t[i];
        p->tmpl[i].data = NULL;
        p->tmpl[i].grad = NULL;
        size_t len = strlen(t[i].name ? t[i].name : "");
        memcpy(nm, t[i].name ? t[i].name : "", len + 1);
        p->tmpl[i].name = nm;
        nm += len + 1;
        order[i] = (by_size){tensor_bytes(&t[i]), i};
    }
    /* Greedy (longest processing time first): each tensor, biggest first,
     * to the server with the fewest bytes so far. Max load - min load is
     * then at most the largest tensor. */
    qsort(order, (size_t)n, sizeof *order, cmp_by_size);
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int s = 1; s < servers; s++)
            if (p->bytes[s] < p->bytes[best])
                best = s;
        p->owner[order[k].i] = best;
        p->bytes[best] += ALIGN64(order[k].bytes);
        p->count[best]++;
    }
    free(order);
    /* Lay out each server's tensors in state-dict order. */
    for (int s = 1; s < servers; s++)
        p->first[s] = p->first[s - 1] + p->count[s - 1];
    int *fill = calloc((size_t)servers, sizeof *fill);
    if (!fill) {
        sl_ps_plan_fini(p);
        return sl_fail(SL_ENOMEM, "%s: plan for %d tensors", fn, n);
    }
    for (int s = 0; s < servers; s++)
        p->bytes[s] = 0;
    for (int i = 0; i < n; i++) {
        int s = p->owner[i];
        sl_ps_ent *e = &p->ents[p->first[s] + fill[s]++];
        e->tensor = i;
        e->bytes = tensor_bytes(&t[i]);
        e->off = p->bytes[s];
        p->bytes[s] += ALIGN64(e->bytes);
    }
    free(fill);
    return SL_OK;
}

void sl_ps_plan_fini(sl_ps_plan *p)
{
    if (!p)
        return;
    free(p->tmpl);
    free(p->names);
    free(p->owner);
    free(p->first);
    free(p->count);
    free(p->ents);
    free(p->bytes);
    memset(p, 0, sizeof *p);
}

int sl_ps_plan_check(const sl_ps_plan *p, sl_model *m, const char *fn, int worker)
{
    char who[32] = "model";
    if (worker >= 0)
        snprintf(who, sizeof who, "worker %d", worker);
    int n = 0;
    sl_tensor_info *t = m ? sl_model_tensors(m, &n) : NULL;
    if (!t)
        return sl_fail(SL_EINVAL, "%s: %s: NULL model", fn, who);
    if (n != p->ntensors)
        return sl_fail(SL_EINVAL, "%s: %s: %d tensors, the template %d", fn, who, n,
                       p->ntensors);
    for (int i = 0; i < n; i++) {
        const sl_tensor_info *a = &t[i], *b = &p->tmpl[i];
        if (strcmp(a->name ? a->name : "", b->name) || a->dtype != b->dtype ||
            a->numel != b->numel || (a->flags & SL_TENSOR_PARAM) != (b->flags & SL_TENSOR_PARAM))
            return sl_fail(SL_EINVAL,
                           "%s: %s: tensor %d is %s (%lld elements), the template's %s (%lld "
                           "elements)",
                           fn, who, i, a->name ? a->name : "?", (long long)a->numel, b->name,
                           (long long)b->numel);
        if (!a->data || ((a->flags & SL_TENSOR_PARAM) && !a->grad))
            return sl_fail(SL_EINVAL, "%s: %s: tensor %s has no data or grad", fn, who,
                           b->name);
    }
    return SL_OK;
}

void sl_ps_plan_gather(const sl_ps_plan *p, int s, sl_model *m, int grads, void *dst)
{
    int n;
    sl_tensor_info *t = sl_model_tensors(m, &n);
    unsigned char *d = dst;
    for (int k = p->first[s]; k < p->first[s] + p->count[s]; k++) {
        const sl_ps_ent *e = &p->ents[k];
        const sl_tensor_info *x = &t[e->tensor];
        const void *src = (grads && (x->flags & SL_TENSOR_PARAM)) ? (const void *)x->grad : x->data;
        memcpy(d + e->off, src, e->bytes);
    }
}

void sl_ps_plan_scatter(const sl_ps_plan *p, int s, const void *src, sl_model *m)
{
    int n;
    sl_tensor_info *t = sl_model_tensors(m, &n);
    const unsigned char *from = src;
    for (int k = p->first[s]; k < p->first[s] + p->count[s]; k++) {
        const sl_ps_ent *e = &p->ents[k];
        memcpy(t[e->tensor].data, from + e->off, e->bytes);
    }
}

int sl_ps_plan_opt_map(const sl_ps_plan *p, sl_sgd *o, float **map, int64_t **step,
                       const char *fn)
{
    int n = 0;
    sl_tensor_info *st = sl_sgd_tensors(o, &n);
    int k = 0;
    char want[512];
    for (int i = 0; i < p->ntensors; i++) {
        map[i] = NULL;
        if (!(p->tmpl[i].flags & SL_TENSOR_PARAM))
            continue;
        snprintf(want, sizeof want, "optimizer.%s.momentum_buffer", p->tmpl[i].name);
        if (k >= n - 1 || strcmp(st[k].name, want) || st[k].numel != p->tmpl[i].numel ||
            st[k].dtype != SL_T_F32)
            return sl_fail(SL_EINVAL, "%s: optimizer entry %d is %s, expected %s", fn, k,
                           k < n - 1 ? st[k].name : "(none)", want);
        map[i] = st[k].data;
        k++;
    }
    if (k != n - 1 || strcmp(st[n - 1].name, "optimizer.step") || st[n - 1].dtype != SL_T_I64)
        return sl_fail(SL_EINVAL, "%s: optimizer has %d momentum entries, the template %d params",
                       fn, n - 1, k);
    *step = st[n - 1].data;
    return SL_OK;
}

/* =========================================================== a shard */

int sl_ps_shard_init(sl_ps_shard *sh, const sl_ps_plan *p, int id, sl_model *tmpl,
                     const sl_sgd_config *c)
{
    const char *fn = "sl_ps_shard_init";
    memset(sh, 0, sizeof *sh);
    sh->plan = p;
    sh->id = id;
    int cnt = p->count[id];
    void *mem = NULL;
    if (posix_memalign(&mem, 64, p->bytes[id] ? p->bytes[id] : 64))
        mem = NULL;
    sh->arena = mem;
    sh->local = calloc((size_t)cnt + 1, sizeof *sh->local);
    sh->mom = calloc((size_t)cnt + 1, sizeof *sh->mom);
    if (!sh->arena || !sh->local || !sh->mom) {
        sl_ps_shard_fini(sh);
        return sl_fail(SL_ENOMEM, "%s: server %d: %zu bytes", fn, id, p->bytes[id]);
    }
    memset(sh->arena, 0, p->bytes[id] ? p->bytes[id] : 64);
    int n;
    sl_tensor_info *t = sl_model_tensors(tmpl, &n);
    for (int k = 0; k < cnt; k++) {
        const sl_ps_ent *e = &p->ents[p->first[id] + k];
        sl_tensor_info *l = &sh->local[k];
        *l = p->tmpl[e->tensor];
        l->data = sh->arena + e->off;
        memcpy(l->data, t[e->tensor].data, e->bytes);
        /* Any valid memory until the first apply aims it at a payload. */
        l->grad = (l->flags & SL_TENSOR_PARAM) ? (float *)l->data : NULL;
    }
    int rc = sl_sgd_create(c, sh->local, cnt, &sh->opt);
    if (rc) {
        sl_ps_shard_fini(sh);
        return sl_fail(rc, "%s: server %d: %s", fn, id, sl_errmsg());
    }
    int ns;
    sl_tensor_info *st = sl_sgd_tensors(sh->opt, &ns);
    int j = 0;
    for (int k = 0; k < cnt; k++)
        if (sh->local[k].flags & SL_TENSOR_PARAM)
            sh->mom[k] = st[j++].data;
    sh->step = st[ns - 1].data;
    return SL_OK;
}

void sl_ps_shard_fini(sl_ps_shard *sh)
{
    if (!sh)
        return;
    sl_sgd_destroy(sh->opt);
    free(sh->arena);
    free(sh->local);
    free(sh->mom);
    memset(sh, 0, sizeof *sh);
}

int sl_ps_shard_apply(sl_ps_shard *sh, const void *payload, float lr)
{
    const sl_ps_plan *p = sh->plan;
    const unsigned char *src = payload;
    int cnt = p->count[sh->id];
    for (int k = 0; k < cnt; k++) {
        const sl_ps_ent *e = &p->ents[p->first[sh->id] + k];
        if (sh->local[k].flags & SL_TENSOR_PARAM)
            sh->local[k].grad = (float *)(uintptr_t)(src + e->off);
    }
    int rc = sl_sgd_step(sh->opt, lr);
    if (rc)
        return sl_fail(rc, "server %d: %s", sh->id, sl_errmsg());
    for (int k = 0; k < cnt; k++) {
        const sl_ps_ent *e = &p->ents[p->first[sh->id] + k];
        if (!(sh->local[k].flags & SL_TENSOR_PARAM))
            memcpy(sh->arena + e->off, src + e->off, e->bytes);
    }
    sh->version++;
    return SL_OK;
}

void sl_ps_shard_momentum_out(const sl_ps_shard *sh, void *dst)
{
    const sl_ps_plan *p = sh->plan;
    for (int k = 0; k < p->count[sh->id]; k++) {
        const sl_ps_ent *e = &p->ents[p->first[sh->id] + k];
        if (sh->mom[k])
            memcpy((unsigned char *)dst + e->off, sh->mom[k], e->bytes);
    }
}

void sl_ps_shard_momentum_in(sl_ps_shard *sh, const void *src)
{
    const sl_ps_plan *p = sh->plan;
    for (int k = 0; k < p->count[sh->id]; k++) {
        const sl_ps_ent *e = &p->ents[p->first[sh->id] + k];
        if (sh->mom[k])
            memcpy(sh->mom[k], (const unsigned char *)src + e->off, e->bytes);
    }
}

/* ====================================================== statistics */

void sl_ps_stats_sample(sl_ps_stats *st, double *sum, uint64_t s)
{
    int b = 0;
    while (b < SL_PS_HIST - 1 && s >= ((uint64_t)1 << b))
        b++;
    st->staleness_hist[b]++;
    st->shard_updates++;
    *sum += (double)s;
    st->staleness_mean = *sum / (double)st->shard_updates;
    if (s > st->staleness_max)
        st->staleness_max = s;
}

void sl_ps_stats_merge(sl_ps_stats *st, const sl_ps_stats *a)
{
    uint64_t n = st->shard_updates + a->shard_updates;
    st->staleness_mean = n ? (st->staleness_mean * (double)st->shard_updates +
                              a->staleness_mean * (double)a->shard_updates) / (double)n
                           : 0.0;
    st->shard_updates = n;
    st->pulls += a->pulls;
    st->pushes += a->pushes;
    st->updates += a->updates;
    if (a->staleness_max > st->staleness_max)
        st->staleness_max = a->staleness_max;
    for (int i = 0; i < SL_PS_HIST; i++)
        st->staleness_hist[i] += a->staleness_hist[i];
    st->ssp_waits += a->ssp_waits;
    st->ssp_wait_s += a->ssp_wait_s;
    if (a->max_lead > st->max_lead)
        st->max_lead = a->max_lead;
    st->pull_wait_s += a->pull_wait_s;
    st->push_wait_s += a->push_wait_s;
    if (a->version < st->version)
        st->version = a->version;
}


/*
 * train/model/sgd.c - SGD with momentum (and Nesterov), torch.optim.SGD's update
 * with dampening 0:
 *
 *   g   = grad + wd * p              (only SL_TENSOR_DECAY tensors: conv and
 *                                     fc weights; BN and biases get none)
 *   buf = momentum * buf + g         (the first step: buf = g)
 *   d   = nesterov ? g + momentum * buf : buf
 *   p  -= lr * d
 *
 * Source: torch/optim/sgd.py (_single_tensor_sgd). The param's grad is left
 * as it is (PyTorch adds the decay into a new tensor too). The loops keep
 * each tensor's flags out of the inner loop, so gcc vectorizes them.
 *
 * State: one momentum buffer per param (f32, the param's numel, in one
 * arena) and the step count, exposed as state-dict entries for checkpoints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

typedef struct sgd_slot {
    sl_tensor_info *t; /* the param (data, grad, numel, flags) */
    float *buf;        /* momentum buffer, numel floats */
} sgd_slot;

struct sl_sgd {
    sl_sgd_config cfg;
    int n;
    sgd_slot *slots;
    float *bufs;       /* the momentum arena */
    int64_t step;      /* steps taken (i64, "optimizer.step") */
    sl_tensor_info *state;  /* n momentum entries + the step */
    char *names;       /* storage of the state entries' names */
};

int sl_sgd_create(const sl_sgd_config *cfg, sl_tensor_info *tensors, int count, sl_sgd **out)
{
    const char *fn = "sl_sgd_create";
    if (!cfg || !out || (count > 0 && !tensors) || count < 0)
        return sl_fail(SL_EINVAL, "%s: NULL argument or bad count %d", fn, count);
    *out = NULL;
    if (!(cfg->momentum >= 0.0f) || !(cfg->weight_decay >= 0.0f))
        return sl_fail(SL_EINVAL, "%s: bad momentum %g or weight_decay %g", fn,
                       (double)cfg->momentum, (double)cfg->weight_decay);
    if (cfg->nesterov && cfg->momentum <= 0.0f) /* as torch.optim.SGD */
        return sl_fail(SL_EINVAL, "%s: Nesterov momentum requires a momentum", fn);

    int n = 0;
    int64_t total = 0;
    size_t name_bytes = sizeof "optimizer.step";
    for (int i = 0; i < count; i++) {
        sl_tensor_info *t = &tensors[i];
        if (!(t->flags & SL_TENSOR_PARAM))
            continue;
        if (t->dtype != SL_T_F32 || !t->data || !t->grad || t->numel < 0)
            return sl_fail(SL_EINVAL, "%s: %s: a param must be f32 with data and grad", fn,
                           t->name ? t->name : "(unnamed)");
        n++;
        total += (t->numel + 15) & ~(int64_t)15; /* 64-byte aligned starts */
        name_bytes += strlen(t->name ? t->name : "") + sizeof "optimizer..momentum_buffer";
    }

    sl_sgd *o = calloc(1, sizeof *o);
    if (!o)
        return sl_fail(SL_ENOMEM, "%s: optimizer struct", fn);
    o->cfg = *cfg;
    o->n = n;
    o->slots = calloc((size_t)n + 1, sizeof *o->slots);
    o->state = calloc((size_t)n + 1, sizeof *o->state);
    o->names = malloc(name_bytes);
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(total > 0 ? total : 1) * sizeof(float)))
        p = NULL;
    o->bufs = p;
    if (!o->slots || !o->state || !o->names || !o->bufs) {
        sl_sgd_destroy(o);
        return sl_fail(SL_ENOMEM, "%s: %d momentum buffers, %lld floats", fn, n,
                       (long long)total);
    }
    memset(o->bufs, 0, (size_t)(total > 0 ? total : 1) * sizeof(float));

    int64_t off = 0;
    char *nm = o->names;
    int k = 0;
    for (int i = 0; i < count; i++) {
        sl_tensor_info *t = &tensors[i];
        if (!(t->flags & SL_TENSOR_PARAM))
            continue;
        o->slots[k] = (sgd_slot){t, o->bufs + off};
        off += (t->numel + 15) & ~(int64_t)15;
        sl_tensor_info *s = &o->state[k];
        int len = sprintf(nm, "optimizer.%s.momentum_buffer", t->name ? t->name : "");
        s->name = nm;
        nm += len + 1;
        s->dtype = SL_T_F32;
        s->data = o->slots[k].buf;
        s->grad = NULL;
        s->numel = t->numel;
        s->ndim = t->ndim;
        memcpy(s->shape, t->shape, sizeof s->shape);
        s->flags = SL_TENSOR_BUFFER | (t->flags & SL_TENSOR_OHWI);
        k++;
    }
    sl_tensor_info *st = &o->state[n];
    strcpy(nm, "optimizer.step");
    st->name = nm;
    st->dtype = SL_T_I64;
    st->data = &o->step;
    st->numel = 1;
    st->ndim = 0;
    st->flags = SL_TENSOR_BUFFER;
    *out = o;
    return SL_OK;
}

void sl_sgd_destroy(sl_sgd *o)
{
    if (!o)
        return;
    free(o->slots);
    free(o->state);
    free(o->names);
    free(o->bufs);
    free(o);
}

/* One tensor. first: buf = g (torch's buffer starts as a copy of the
 * gradient). wd is 0 for tensors without decay. */
static void update(float *restrict p, const float *restrict grad, float *restrict buf,
                   int64_t n, float lr, float mom, float wd, int nesterov, int first)
{
    if (first) {
        for (int64_t i = 0; i < n; i++) {
            float g = grad[i] + wd * p[i];
            buf[i] = g;
            p[i] -= lr * (nesterov ? g + mom * g : g);
        }
    } else if (nesterov) {
        for (int64_t i = 0; i < n; i++) {
            float g = grad[i] + wd * p[i];
            float b = mom * buf[i] + g;
            buf[i] = b;
            p[i] -= lr * (g + mom * b);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float b = mom * buf[i] + grad[i] + wd * p[i];
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

int sl_sgd_step(sl_sgd *o, float lr)
{
    if (!o)
        return sl_fail(SL_EINVAL, "sl_sgd_step: NULL optimizer");
    if (!(lr >= 0.0f) || lr > 1e30f)
        return sl_fail(SL_EINVAL, "sl_sgd_step: bad learning rate %g", (double)lr);
    int first = o->step == 0;
    for (int i = 0; i < o->n; i++) {
        sl_tensor_info *t = o->slots[i].t;
        float wd = (t->flags & SL_TENSOR_DECAY) ? o->cfg.weight_decay : 0.0f;
        update(t->data, t->grad, o->slots[i].buf, t->numel, lr, o->cfg.momentum, wd,
               o->cfg.nesterov, first);
    }
    o->step++;
    return SL_OK;
}

sl_tensor_info *sl_sgd_tensors(sl_sgd *o, int *count)
{
    if (count)
        *count = o->n + 1;
    return o->state;
}

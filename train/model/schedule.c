/*
 * train/model/schedule.c - learning-rate schedules: gradual linear warmup (Goyal
 * et al. 2017, "Accurate, Large Minibatch SGD", sec. 2.2) then a decay over
 * the remaining steps.
 *
 *   step < W:   lr = peak * (step + 1) / W      (peak/W at step 0, peak at W-1)
 *   otherwise:  t  = (step - W) / (T - W) in [0, 1], T = total_steps
 *     cosine    lr = peak * 0.5 * (1 + cos(pi * t))        (Loshchilov & Hutter)
 *     step      lr = peak * 0.1^k, k = milestones passed among t = 1/3, 2/3,
 *               8/9 (epochs 30, 60, 80 of 90, as the ImageNet recipe)
 *     poly      lr = peak * (1 - t)^2
 * Steps past the end hold t = 1; a schedule with no steps after warmup
 * (T <= W) is at its end (t = 1) once warmup is over.
 */
#include <math.h>
#include <string.h>

#include "train/train.h"

static const char *const sched_names[] = {
    [SL_SCHED_COSINE] = "cosine",
    [SL_SCHED_STEP] = "step",
    [SL_SCHED_POLY] = "poly",
};
#define N_SCHED ((int)(sizeof sched_names / sizeof sched_names[0]))

const char *sl_sched_name(sl_sched_kind k)
{
    if ((int)k < 0 || (int)k >= N_SCHED)
        return "?";
    return sched_names[k];
}

int sl_sched_parse(const char *name, sl_sched_kind *out)
{
    for (int i = 0; name && i < N_SCHED; i++) {
        if (strcmp(name, sched_names[i]) == 0) {
            *out = (sl_sched_kind)i;
            return SL_OK;
        }
    }
    return sl_fail(SL_EINVAL, "sl_sched_parse: unknown schedule '%s' (cosine, step, poly)",
                   name ? name : "(null)");
}

double sl_schedule_lr(const sl_schedule *s, int64_t step)
{
    int64_t W = s->warmup_steps > 0 ? s->warmup_steps : 0;
    if (step < 0)
        step = 0;
    if (step < W)
        return s->peak_lr * (double)(step + 1) / (double)W;
    int64_t span = s->total_steps - W, done = step - W; /* done >= 0 */
    if (span <= 0 || done > span)
        done = span = 1; /* at or past the end: t = 1 */
    double t = (double)done / (double)span;
    switch (s->kind) {
    case SL_SCHED_COSINE:
        return s->peak_lr * 0.5 * (1.0 + cos(M_PI * t));
    case SL_SCHED_STEP: {
        /* milestones in integers, so step 30 of 90 is exactly 1/3 */
        double lr = s->peak_lr;
        if (3 * done >= span)
            lr *= 0.1;
        if (3 * done >= 2 * span)
            lr *= 0.1;
        if (9 * done >= 8 * span)
            lr *= 0.1;
        return lr;
    }
    case SL_SCHED_POLY:
        return s->peak_lr * (1.0 - t) * (1.0 - t);
    }
    return s->peak_lr;
}

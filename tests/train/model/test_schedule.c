/*
 * tests/train/model/test_schedule.c - LR schedules (train/model/schedule.c): golden values
 * of the Goyal et al. warmup and of the cosine, step and poly decays.
 */
#include <math.h>

#include <criterion/criterion.h>

#include "train/train.h"

#define LR_EQ(s, step, want)                                                               \
    cr_assert_float_eq(sl_schedule_lr((s), (step)), (want), 1e-12 + 1e-9 * fabs(want),    \
                       "step %lld: %.12g != %.12g", (long long)(step),                    \
                       sl_schedule_lr((s), (step)), (double)(want))

Test(train_schedule, names)
{
    const char *names[] = {"cosine", "step", "poly"};
    for (int i = 0; i < 3; i++) {
        sl_sched_kind k = SL_SCHED_POLY;
        cr_assert_str_eq(sl_sched_name((sl_sched_kind)i), names[i]);
        cr_assert_eq(sl_sched_parse(names[i], &k), SL_OK);
        cr_assert_eq((int)k, i);
    }
    sl_sched_kind k = SL_SCHED_STEP;
    cr_assert_eq(sl_sched_parse("linear", &k), SL_EINVAL);
    cr_assert_eq(sl_sched_parse(NULL, &k), SL_EINVAL);
    cr_assert_eq((int)k, SL_SCHED_STEP);
}

/* Goyal et al.: peak = 0.1 * 8192 / 256 = 3.2, 5 warmup steps:
 * 0.64, 1.28, 1.92, 2.56, 3.2, then the decay starts at peak. */
Test(train_schedule, warmup)
{
    sl_schedule s = {SL_SCHED_COSINE, 0.1 * 8192 / 256, 5, 105};
    LR_EQ(&s, 0, 0.64);
    LR_EQ(&s, 1, 1.28);
    LR_EQ(&s, 3, 2.56);
    LR_EQ(&s, 4, 3.2);
    LR_EQ(&s, 5, 3.2);
    LR_EQ(&s, -3, 0.64); /* before the start: the first step's */
    s.warmup_steps = 0;  /* no warmup: peak from step 0 */
    LR_EQ(&s, 0, 3.2);
}

Test(train_schedule, cosine)
{
    /* 5 warmup + 100 decay steps; t = (step - 5) / 100 */
    sl_schedule s = {SL_SCHED_COSINE, 0.4, 5, 105};
    LR_EQ(&s, 55, 0.2);                                   /* t = 1/2 */
    LR_EQ(&s, 80, 0.2 * (1 - sqrt(0.5)));                 /* t = 3/4: 0.0585786... */
    LR_EQ(&s, 30, 0.2 * (1 + sqrt(0.5)));                 /* t = 1/4: 0.3414213... */
    LR_EQ(&s, 105, 0.0);                                  /* t = 1 */
    LR_EQ(&s, 500, 0.0);                                  /* past the end */
    for (int64_t i = 5; i < 105; i++)
        cr_assert_gt(sl_schedule_lr(&s, i), sl_schedule_lr(&s, i + 1), "decreasing at %lld",
                     (long long)i);
}

Test(train_schedule, step_milestones)
{
    /* 90 steps: x0.1 at 30, 60, 80 (the ImageNet 30/60/80-of-90 epochs) */
    sl_schedule s = {SL_SCHED_STEP, 1.0, 0, 90};
    LR_EQ(&s, 0, 1.0);
    LR_EQ(&s, 29, 1.0);
    LR_EQ(&s, 30, 0.1);
    LR_EQ(&s, 59, 0.1);
    LR_EQ(&s, 60, 0.1 * 0.1);
    LR_EQ(&s, 79, 0.1 * 0.1);
    LR_EQ(&s, 80, 0.1 * 0.1 * 0.1);
    LR_EQ(&s, 89, 0.1 * 0.1 * 0.1);
    /* after 10 warmup steps the milestones shift: 40, 70, 90 of 100 */
    s = (sl_schedule){SL_SCHED_STEP, 2.0, 10, 100};
    LR_EQ(&s, 9, 2.0);
    LR_EQ(&s, 39, 2.0);
    LR_EQ(&s, 40, 0.2);
    LR_EQ(&s, 69, 0.2);
    LR_EQ(&s, 70, 0.2 * 0.1);
    LR_EQ(&s, 90, 0.2 * 0.1 * 0.1);
}

Test(train_schedule, poly)
{
    sl_schedule s = {SL_SCHED_POLY, 1.0, 0, 10};
    LR_EQ(&s, 0, 1.0);
    LR_EQ(&s, 2, 0.64); /* (1 - 0.2)^2 */
    LR_EQ(&s, 5, 0.25);
    LR_EQ(&s, 9, 0.01);
    LR_EQ(&s, 10, 0.0);
    s = (sl_schedule){SL_SCHED_POLY, 0.5, 4, 14};
    LR_EQ(&s, 0, 0.125);
    LR_EQ(&s, 3, 0.5);
    LR_EQ(&s, 9, 0.125); /* t = 0.5 */
}

/* No steps after warmup: the schedule is at its end once warmup is over. */
Test(train_schedule, degenerate_spans)
{
    sl_schedule s = {SL_SCHED_COSINE, 1.0, 4, 4};
    LR_EQ(&s, 3, 1.0);
    LR_EQ(&s, 4, 0.0);
    s.total_steps = 0;
    s.kind = SL_SCHED_STEP;
    LR_EQ(&s, 7, 0.001);
}

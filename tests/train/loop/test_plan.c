/* tests/train/loop/test_plan.c - train/loop/plan.c: the split chosen from
 * the budget, the batch and the model (core counts 1, 2, 16; a batch that
 * does not split), what the start-up measurement may change (threads, never
 * replicas), explicit options winning one by one, cuda, eval and the
 * pipeline alone, and the JSON. */
#include <criterion/criterion.h>
#include <string.h>

#include "train/train.h"

static sl_par_request req(int cpus, sl_arch arch, int width, unsigned px, unsigned batch)
{
    sl_par_request q = SL_PAR_REQUEST_INIT;
    q.job = SL_PAR_TRAIN;
    q.backend = SL_BACKEND_CPU;
    q.cpus = cpus;
    q.arch = arch;
    q.width = width;
    q.height = q.image_width = px;
    q.batch = batch;
    return q;
}

Test(par_plan, small_net_two_cores_two_replicas_of_one_thread)
{
    sl_par_request q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    sl_par_plan p;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.strategy, SL_STRATEGY_MIRRORED);
    cr_assert_eq(p.replicas, 2);
    cr_assert_eq(p.threads, 1);
    cr_assert_eq(p.workers, 1);
    cr_assert_eq(p.readers, 2);
    cr_assert_eq(p.prefetch, 0);
    cr_assert_eq(p.cpus, 2);
    cr_assert(strstr(p.reason, "2 replicas x 1 thread on 2 cores: 32 images each"), "%s",
              p.reason);
}

Test(par_plan, one_core_is_one_replica)
{
    sl_par_request q = req(1, SL_ARCH_RESNET50, 0, 224, 32);
    sl_par_plan p;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.strategy, SL_STRATEGY_SINGLE, "one replica needs no all-reduce");
    cr_assert_eq(p.replicas, 1);
    cr_assert_eq(p.threads, 1);
    cr_assert_eq(p.workers, 1);
    cr_assert_eq(p.replicas * p.threads, 1, "never more compute threads than cores");
    cr_assert(strstr(p.reason, "one core"), "%s", p.reason);
}

Test(par_plan, many_cores_slices_of_16_then_threads_for_a_big_step)
{
    /* 16 cores, batch 64: 4 replicas of 16 images; ResNet-50 at 224 px is
     * ~65 G multiply-adds a slice: the other cores become threads */
    sl_par_request q = req(16, SL_ARCH_RESNET50, 0, 224, 64);
    sl_par_plan p;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 4);
    cr_assert_eq(p.threads, 4);
    cr_assert_eq(p.workers, 1);
    cr_assert_float_eq(p.gmac_per_image, 4.089, 1e-9);
    /* a small net: the cores left over decode instead */
    q = req(16, SL_ARCH_RESNET20, 8, 28, 64);
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 4);
    cr_assert_eq(p.threads, 1);
    cr_assert_eq(p.workers, 3);
    cr_assert_leq(p.replicas * (p.threads + (int)p.workers), 16);
}

Test(par_plan, a_batch_that_does_not_split)
{
    sl_par_request q = req(2, SL_ARCH_RESNET20, 8, 28, 31); /* odd */
    sl_par_plan p;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 1);
    cr_assert_eq(p.threads, 1, "a small step is not split over threads");
    cr_assert(strstr(p.reason, "does not split"), "%s", p.reason);
    q = req(3, SL_ARCH_RESNET20, 8, 28, 32); /* 3 does not divide 32; 2 does */
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 2);
}

Test(par_plan, the_measurement_changes_nothing)
{
    /* threads and replicas both change a run's bits: neither may follow
     * the start-up measurement */
    sl_par_request q = req(16, SL_ARCH_RESNET50, 0, 224, 64);
    sl_par_plan quiet, busy;
    q.free_cores = 15.9;
    sl_par_choose(&q, &quiet);
    q.free_cores = 3.0;
    sl_par_choose(&q, &busy);
    cr_assert_eq(quiet.replicas, busy.replicas);
    cr_assert_eq(quiet.threads, busy.threads);
    cr_assert_eq(busy.workers, quiet.workers);
    cr_assert_float_eq(busy.free_cores, 3.0, 1e-12, "reported as measured");
    q = req(2, SL_ARCH_RESNET50, 0, 224, 64);
    q.strategy = SL_STRATEGY_SINGLE;
    sl_par_choose(&q, &quiet);
    cr_assert_eq(quiet.replicas, 1);
    cr_assert_eq(quiet.threads, 2, "single, a big step: the cores as threads");
}

Test(par_plan, explicit_options_win)
{
    sl_par_plan p;
    sl_par_request q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    q.threads = 2; /* --threads alone: one replica of that many, as before */
    sl_par_choose(&q, &p);
    cr_assert_eq(p.strategy, SL_STRATEGY_SINGLE);
    cr_assert_eq(p.replicas, 1);
    cr_assert_eq(p.threads, 2);
    q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    q.strategy = SL_STRATEGY_MIRRORED;
    q.replicas = 4;
    q.threads = 4;
    q.workers = 3;
    q.readers = 5;
    q.prefetch = 7;
    q.free_cores = 0.5; /* measured busy: explicit threads still win */
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 4);
    cr_assert_eq(p.threads, 1, "the total of 4 over 4 replicas");
    cr_assert_eq(p.workers, 3);
    cr_assert_eq(p.readers, 5);
    cr_assert_eq(p.prefetch, 7);
    q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    q.strategy = SL_STRATEGY_SINGLE;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 1);
    cr_assert_eq(p.threads, 1, "single on a small net: one thread");
    q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    q.mpi = 1; /* under mpirun one replica per process */
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 1);
    q = req(4, SL_ARCH_RESNET20, 8, 28, 64);
    q.strategy = SL_STRATEGY_PS;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 4, "ps: a worker per core, the batch not split");
}

Test(par_plan, cuda_eval_and_the_pipeline_alone)
{
    sl_par_plan p;
    sl_par_request q = req(8, SL_ARCH_RESNET50, 0, 224, 256);
    q.backend = SL_BACKEND_CUDA;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 1);
    cr_assert_eq(p.workers, 7, "one core drives the GPU, the others decode");
    q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    q.job = SL_PAR_EVAL;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.replicas, 1);
    cr_assert_eq(p.threads, 1);
    cr_assert_eq(p.workers, 1);
    q = req(4, SL_ARCH_RESNET50, 0, 224, 64);
    q.job = SL_PAR_EVAL;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.threads, 4);
    q.job = SL_PAR_PIPELINE;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.workers, 4);
    cr_assert_eq(p.readers, 2);
    q.workers = 1;
    sl_par_choose(&q, &p);
    cr_assert_eq(p.workers, 1);
}

Test(par_plan, json)
{
    sl_par_request q = req(2, SL_ARCH_RESNET20, 8, 28, 64);
    q.free_cores = 1.31;
    q.probe_s = 0.0512;
    sl_par_plan p;
    sl_par_choose(&q, &p);
    cr_assert_str_eq(p.budget, "", "the caller's to fill");
    snprintf(p.reason, sizeof p.reason, "a \"quoted\" \\ reason");
    snprintf(p.budget, sizeof p.budget, "2 cores (\"affinity\")");
    char buf[1024];
    sl_par_json(&p, buf, sizeof buf);
    cr_assert_str_eq(buf, "{\"cpus\": 2, \"strategy\": \"mirrored\", \"replicas\": 2, "
                          "\"threads\": 1, \"workers\": 1, \"readers\": 2, \"prefetch\": 0, "
                          "\"free_cores\": 1.31, \"probe_s\": 0.051, \"gmac_per_image\": "
                          "0.007809, \"budget\": \"2 cores (\\\"affinity\\\")\", "
                          "\"reason\": \"a \\\"quoted\\\" \\\\ reason\"}");
}

/*
 * tests/train/loop/test_train_nccl.c - the mirrored strategy on GPUs under
 * mpirun: two ranks, one CUDA device each, gradients in device memory
 * all-reduced by NCCL on the exec's stream, bucket by bucket while backward
 * runs (train/loop/replica.c, collectives/nccl.c). Checked against the same
 * run on the cpu backend (gradients over MPI on the host):
 *   - the logged losses match (fp32, no TF32: the kernels sum in other
 *     orders, a few ulp per op, grown over 12 steps: 1e-4 relative seen,
 *     3e-4 allowed);
 *   - --check-every 1: the two ranks' weights are compared (a hash of the
 *     whole parameter arena, all-gathered) after every step: the replicas
 *     stay bitwise in sync, or the run fails;
 *   - --no-overlap (buckets all-reduced after backward, no grad hook) ends
 *     with the same checkpoint, bit for bit, as the overlapped run: the
 *     same reductions in the same order, only scheduled differently;
 *   - --sync-bn on cuda (each BN's sums all-reduced by NCCL in device
 *     memory) logs the losses of --sync-bn on cpu (MPI, host sums);
 *   - the step as a CUDA graph with its all-reduces inside (2 and 3 ranks,
 *     overlapped, --no-overlap, --sync-bn, fp16 loss scaling): the bits of
 *     the uncaptured step (SLUICE_CUDA_GRAPH=0), --json saying it ran.
 * Only rank 0 writes checkpoints and logs, so "both ranks end with the
 * same weights" is --check-every's job (it fails the run otherwise).
 *
 * Needs a build with the cuda backend, NCCL and MPI, mpirun, and two CUDA
 * devices: a multi-GPU host, or tests/cuda-emu (run.sh; EMU_DEVICES=2 is
 * set here, the real runtime ignores it). Skips cleanly otherwise.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/collectives.h"
#include "pipeline/pipeline_testdata.h"
#include "train/cuda_testutil.h"
#include "testutil.h"
#include "train/ops/ops.h"

#ifdef SLUICE_TRAIN_CUDA
#include <cuda_runtime_api.h>
static int cuda_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
#else
static int cuda_devices(void) { return 0; }
#endif

#define MPIRUN "SLUICE_CUDA_TF32=0 EMU_DEVICES=2 ASAN_OPTIONS=detect_leaks=0 " \
               "OMPI_MCA_btl=self,vader timeout 600 mpirun --oversubscribe --allow-run-as-root " \
               "--bind-to none -np 2 "

/* 12 steps of ResNet-20 (17.5k parameters) in 7 gradient buckets of
 * 10 kB; peak lr 0.025: twice the gradient (a sum for an average) moves
 * the losses by 2e-3 to 1e-2 from step 4 on (measured on the cpu). */
static const char *ARGS = "--image-size 16 --model resnet20 --width 4 --classes 10 --batch 8 "
                          "--max-steps 12 --log-every 2 --shuffle global --seed 3 "
                          "--eval-split none --lr 0.8 --threads 1 --workers 1 --readers 1 "
                          "--strategy mirrored --bucket-mb 0.01";

/* Skip unless a cuda exec, NCCL, MPI, mpirun and two devices are here. */
static void need_two_gpus(void)
{
    setenv("EMU_DEVICES", "2", 0); /* the emulator's device count */
    sl_exec e;
    if (sl_exec_init(&e, SL_BACKEND_CUDA, 1))
        cr_skip_test("no cuda device: %s", sl_errmsg());
    sl_exec_fini(&e);
    if (!sl_comm_backend_available(SL_COMM_NCCL) || !sl_comm_backend_available(SL_COMM_MPI))
        cr_skip_test("built without NCCL or MPI");
    if (tu_run(NULL, "command -v mpirun >/dev/null 2>&1"))
        cr_skip_test("mpirun not found");
    if (cuda_devices() < 2)
        cr_skip_test("%d CUDA device(s), 2 needed", cuda_devices());
}

/* One mpirun -np 2 training run into TMP/NAME (logdir) and TMP/NAME-ck
 * (checkpoints); its output must show both ranks working together. */
static void train(const char *tmp, const char *data, const char *name, const char *extra)
{
    char *out = NULL;
    int rc = tu_run(&out, MPIRUN "%s train --data %s %s %s --logdir %s/%s --ckpt-dir %s/%s-ck "
                    "2>&1", tu_sluice(), data, ARGS, extra, tmp, name, tmp, name);
    cr_assert_eq(rc, 0, "%s: exit %d:\n%s", name, rc, out);
    cr_assert(strstr(out, "mirrored over 2 replicas (mpi)"), "%s:\n%s", name, out);
    cr_assert(!strstr(out, "EMU: error"), "%s: the emulator reported misuse:\n%s", name, out);
    free(out);
}

/* The losses runs TMP/A and TMP/B logged. */
static void read_pair(const char *tmp, const char *a, const char *b, tg_losses *la,
                      tg_losses *lb)
{
    char da[4200], db[4200];
    snprintf(da, sizeof da, "%s/%s", tmp, a);
    snprintf(db, sizeof db, "%s/%s", tmp, b);
    tg_read_losses(da, la);
    tg_read_losses(db, lb);
}

static void expect_losses(const char *tmp, const char *a, const char *b)
{
    tg_losses la, lb;
    read_pair(tmp, a, b, &la, &lb);
    cr_assert_geq(la.n, 6, "%s: %d loss lines", a, la.n);
    cr_assert_eq(la.n, lb.n, "%s: %d loss lines, %s: %d", a, la.n, b, lb.n);
    for (int i = 0; i < la.n; i++) {
        cr_assert_eq(la.step[i], lb.step[i], "line %d: step %ld and %ld", i, la.step[i],
                     lb.step[i]);
        double d = fabs(lb.v[i] - la.v[i]);
        cr_log_info("step %ld: %s %.7f %s %.7f (rel %.2e)", la.step[i], a, la.v[i], b, lb.v[i],
                    d / fabs(la.v[i]));
        cr_expect_leq(d, 3e-4 * fabs(la.v[i]), "step %ld: %s loss %.7f, %s %.7f", la.step[i], a,
                      la.v[i], b, lb.v[i]);
    }
}

static void expect_same_file(const char *pa, const char *pb)
{
    size_t na, nb;
    uint8_t *a = tu_read_file(pa, &na), *b = tu_read_file(pb, &nb);
    cr_assert(a && b, "%s, %s", pa, pb);
    cr_assert_eq(na, nb, "%s: %zu bytes, %s: %zu", pa, na, pb, nb);
    size_t first = na;
    for (size_t i = 0; i < na && first == na; i++)
        if (a[i] != b[i])
            first = i;
    cr_expect_eq(first, na, "%s and %s differ from byte %zu", pa, pb, first);
    free(a);
    free(b);
}

/* cpu (MPI) vs cuda (NCCL), overlapped and not: losses, replicas in sync,
 * the two cuda runs' checkpoints identical. */
Test(train_nccl, mirrored_cuda_matches_cpu)
{
    need_two_gpus();
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir();
    train(tmp, d.dir, "cpu", "--backend cpu");
    train(tmp, d.dir, "cuda", "--backend cuda --precision fp32 --check-every 1");
    train(tmp, d.dir, "cuda-no", "--backend cuda --precision fp32 --check-every 1 --no-overlap");
    expect_losses(tmp, "cpu", "cuda");
    expect_losses(tmp, "cpu", "cuda-no");
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/cuda-ck/ckpt-000000012.safetensors", tmp);
    snprintf(pb, sizeof pb, "%s/cuda-no-ck/ckpt-000000012.safetensors", tmp);
    expect_same_file(pa, pb);
    pl_dataset_free(&d);
    tu_rmrf(tmp);
    free(tmp);
}

/* --sync-bn on the GPU: each BN's statistics slots (train/ops/ops.h
 * bn_moments) and backward sums all-reduced through NCCL on the exec's
 * stream, in device memory (bn_moments_merge combines them there):
 * the losses of the cpu's sync-BN (MPI, host sums), replicas in sync. At
 * lr 0.2 (not ARGS' 0.8, where sync-BN's 12 steps are chaotic enough that
 * fp32 rounding grows to 5e-4): 6e-5 seen. */
Test(train_nccl, sync_bn_cuda_matches_cpu)
{
    need_two_gpus();
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir();
    train(tmp, d.dir, "cpu-sync", "--backend cpu --sync-bn --lr 0.2");
    train(tmp, d.dir, "cuda-sync", "--backend cuda --precision fp32 --sync-bn --check-every 1 "
          "--lr 0.2");
    expect_losses(tmp, "cpu-sync", "cuda-sync");
    /* the check can fail: per-replica statistics (no --sync-bn) move the
     * losses by 1e-3 to 1e-2 (measured), 4x the tolerance and more */
    train(tmp, d.dir, "cpu-local", "--backend cpu --lr 0.2");
    tg_losses ls, ll;
    read_pair(tmp, "cpu-sync", "cpu-local", &ls, &ll);
    double worst = 0;
    for (int i = 0; i < ls.n && i < ll.n; i++)
        worst = fmax(worst, fabs(ll.v[i] - ls.v[i]) / fabs(ls.v[i]));
    cr_expect_gt(worst, 1.2e-3, "sync-BN and per-replica BN logged the same losses (%.2e)", worst);
    pl_dataset_free(&d);
    tu_rmrf(tmp);
    free(tmp);
}

/* One mpirun -np NP run with env in front and --json into TMP/NAME and
 * TMP/NAME-ck; returns its output (every rank's stderr, the root's --json). */
static char *train_np(const char *tmp, const char *data, const char *name, int np,
                      const char *env, const char *args)
{
    char *out = NULL;
    int rc = tu_run(&out, "SLUICE_CUDA_TF32=0 EMU_DEVICES=%d %s ASAN_OPTIONS=detect_leaks=0 "
                    "OMPI_MCA_btl=self,vader timeout 600 mpirun --oversubscribe "
                    "--allow-run-as-root --bind-to none -np %d %s train --data %s %s --json "
                    "--logdir %s/%s --ckpt-dir %s/%s-ck 2>&1", np, env, np, tu_sluice(), data,
                    args, tmp, name, tmp, name);
    cr_assert_eq(rc, 0, "%s: exit %d:\n%s", name, rc, out);
    char want[64];
    snprintf(want, sizeof want, "mirrored over %d replicas (mpi)", np);
    cr_assert(strstr(out, want), "%s:\n%s", name, out);
    cr_assert(!strstr(out, "EMU: error"), "%s: the emulator reported misuse:\n%s", name, out);
    return out;
}

/* How many times s occurs in out. */
static int count_of(const char *out, const char *s)
{
    int n = 0;
    for (const char *p = strstr(out, s); p; p = strstr(p + 1, s))
        n++;
    return n;
}

/* The step captured into a CUDA graph with its all-reduces (replica.c's
 * step_graph: the gradient buckets and --sync-bn's sums enqueued on the
 * exec's stream, no host wait inside; the optimizer and fp16's loss-scale
 * check and update on the device behind them) and replayed, against the
 * same run with SLUICE_CUDA_GRAPH=0 (buckets started and waited for by the
 * host): the losses and the final checkpoint (weights, momentum, BN
 * statistics) the same bits, --check-every 1 holding the replicas
 * identical after every step, and the root's --json saying the graph ran
 * (captured at step 2, so steps - 1 launches) with no replica reporting a
 * failed capture. Two ranks (fp32, 12 steps, overlapped and --no-overlap)
 * and, where three devices are (the emulator always), three (fp16 with its
 * loss scale, --sync-bn, a batch of 12, 6 steps: the emulator's slowest). */
Test(train_nccl, cuda_graph_with_allreduce_matches_uncaptured)
{
    need_two_gpus();
    setenv("EMU_DEVICES", "3", 1);
    int three = cuda_devices() >= 3;
    setenv("EMU_DEVICES", "2", 1);
    pl_dataset d;
    pl_make_dataset(&d, 96, 3, 0, NULL);
    char *tmp = tu_tmpdir();
    static const struct {
        int np, steps;
        const char *name, *args;
    } runs[] = {
        {2, 12, "fp32", "--backend cuda --precision fp32 --check-every 1"},
        {2, 12, "noov", "--backend cuda --precision fp32 --check-every 1 --no-overlap"},
        {3, 6, "fp16-sync", "--backend cuda --precision fp16 --check-every 1 --sync-bn --lr 0.2 "
                            "--batch 12"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (runs[i].np == 3 && !three) {
            cr_log_warn("fewer than 3 CUDA devices: the 3-rank run is skipped");
            continue;
        }
        char args[600], plain[64], graph[64], replays[64];
        int steps = runs[i].steps;
        snprintf(args, sizeof args, "%s %s --max-steps %d", ARGS, runs[i].args, steps);
        snprintf(replays, sizeof replays, "\"cuda_graph_replays\": %d", steps - 1);
        snprintf(plain, sizeof plain, "%s-plain", runs[i].name);
        snprintf(graph, sizeof graph, "%s-graph", runs[i].name);
        char *po = train_np(tmp, d.dir, plain, runs[i].np, "SLUICE_CUDA_GRAPH=0", args);
        char *go = train_np(tmp, d.dir, graph, runs[i].np, "SLUICE_CUDA_GRAPH=1", args);
        cr_assert(strstr(po, "\"cuda_graph\": \"off\""), "%s:\n%s", plain, po);
        /* the root's report; a replica whose capture failed would say so */
        cr_assert_eq(count_of(go, "\"cuda_graph\": \"on\""), 1, "%s:\n%s", graph, go);
        cr_assert_eq(count_of(go, replays), 1, "%s: captured at step 2 of %d:\n%s", graph, steps,
                     go);
        cr_assert(!strstr(go, "capture failed"), "%s:\n%s", graph, go);
        tg_losses lp, lg;
        read_pair(tmp, plain, graph, &lp, &lg);
        cr_assert_geq(lp.n, steps / 2, "%s: %d loss lines", plain, lp.n);
        cr_assert_eq(lp.n, lg.n, "%s: %d loss lines, %s: %d", plain, lp.n, graph, lg.n);
        for (int k = 0; k < lp.n; k++)
            cr_expect(lp.step[k] == lg.step[k] && lp.v[k] == lg.v[k],
                      "%s: step %ld: loss %.9g, uncaptured %.9g", graph, lg.step[k], lg.v[k],
                      lp.v[k]);
        char pa[4200], pb[4200];
        snprintf(pa, sizeof pa, "%s/%s-ck/ckpt-%09d.safetensors", tmp, plain, steps);
        snprintf(pb, sizeof pb, "%s/%s-ck/ckpt-%09d.safetensors", tmp, graph, steps);
        expect_same_file(pa, pb);
        free(po);
        free(go);
    }
    pl_dataset_free(&d);
    tu_rmrf(tmp);
    free(tmp);
}

/* Rank 1 is killed mid-run while its launcher stays alive (mpirun does not
 * notice): rank 0's NCCL all-reduce must fail (a remote error, or
 * --comm-timeout) and end the job with a message naming the collective. */
Test(train_nccl, dead_rank_fails_fast)
{
    need_two_gpus();
    pl_dataset d;
    pl_make_dataset(&d, 400, 3, 0, NULL); /* 50 steps an epoch: no epoch-end collective */
    char *tmp = tu_tmpdir(), *out = NULL;
    char *script = tu_join(tmp, "rank.sh");
    FILE *f = fopen(script, "w");
    cr_assert(f);
    fprintf(f,
            "#!/bin/sh\n"
            "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n"
            "  \"$@\" > %s/rank1.log 2>&1 &\n"
            "  p=$!\n"
            "  for i in $(seq 600); do grep -q 'step 6/' %s/rank0.log 2>/dev/null && break; "
            "sleep 0.05; done\n"
            "  kill -9 $p\n"
            "  sleep 120\n"
            "else\n"
            "  \"$@\" > %s/rank0.log 2>&1; s=$?\n"
            "  cat %s/rank0.log\n"
            "  exit $s\n"
            "fi\n", tmp, tmp, tmp, tmp);
    fclose(f);
    /* log every 6 steps: rank 0 meets rank 1 next in an all-reduce of
     * gradients (NCCL), not in the logging's sum (MPI) */
    int rc = tu_run(&out, "chmod +x %s && " MPIRUN "%s %s train --data %s %s --backend cuda "
                    "--max-steps 100000 --log-every 6 --comm-timeout 10 2>&1; echo exit=$?",
                    script, script, tu_sluice(), d.dir, ARGS);
    (void)rc;
    cr_log_info("%s", out);
    cr_assert(strstr(out, "exit=") && !strstr(out, "exit=0"), "%s", out);
    cr_assert(!strstr(out, "exit=124"), "the job hung until the outer timeout:\n%s", out);
    cr_assert(strstr(out, "ncclAllReduce"), "the failure does not name the NCCL all-reduce:\n%s",
              out);
    /* the first failure's reason, not a later bucket's "aborted" */
    cr_assert(strstr(out, "exited") || strstr(out, "timed out"), "%s", out);
    free(out);
    free(script);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&d);
}

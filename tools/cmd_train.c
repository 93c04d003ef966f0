/*
 * tools/cmd_train.c - `sluice train`: train a ResNet from record shards.
 *
 * A thin client of train/train.h: options into an sl_train_config (the
 * pipeline options are the ones `sluice profile` takes, tools/pipeline_flags.c),
 * defaults that suit the model and the data, then sl_train_run. Progress
 * lines go to stderr; the last lines name the checkpoint and the logs.
 *
 * Defaults by input size: images of 32 px or less (Fashion-MNIST, CIFAR)
 * get resnet20, a mild random-resized-crop (area 0.35..1: the 0.08 lower
 * bound that suits ImageNet leaves a few pixels of a 28 px image) and an
 * eval transform that keeps the whole image (crop fraction 1); larger
 * images get resnet50 and torchvision's ImageNet recipe.
 *
 * Ctrl-C (SIGINT) and SIGTERM ask the run to stop (sl_train_config's
 * stop, tools/signals.c): the replicas agree on a step, save it as a
 * checkpoint (--ckpt-dir, else ./sluice-rescue) and the progress says how
 * to continue with --resume. A second Ctrl-C kills at once. The ps
 * strategy does not take the request: Ctrl-C ends it as any program.
 *
 * Exit status: 0 done, 2 usage or runtime error, 128 + the signal (130 for
 * Ctrl-C) when a signal stopped it.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "collectives/collectives.h"
#include "par_plan.h"
#include "pipeline_flags.h"
#include "train/train.h"

#define CMD "train"

/* --json's cpu_isa: oneDNN's effective ISA (or why there is none) on the
 * cpu backend, "" elsewhere. */
static const char *cpu_isa(const sl_train_config *t)
{
    const char *why = "";
    if (t->backend == SL_BACKEND_CPU)
        sl_cpu_bf16(&why);
    return why;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice train --data DIR [--model resnet20|resnet18|resnet50] [options]\n"
            "\n"
            "Train a ResNet on the shards in DIR (split --split, default train) with SGD, evaluate\n"
            "it on --eval-split after every epoch, write TensorBoard events and metrics.jsonl to\n"
            "--logdir and safetensors checkpoints (PyTorch loads them) to --ckpt-dir.\n"
            "\n"
            "model and recipe:\n"
            "  --model NAME          resnet20 (CIFAR-style, small images), resnet18, resnet50\n"
            "                        (default: resnet20 for images <= 32 px, else resnet50)\n"
            "  --width W             base width (resnet20: 16, others: 64)\n"
            "  --classes K           classes (default: from dataset.json)\n"
            "  --epochs E            epochs (default 5 for resnet20, 90 otherwise)\n"
            "  --max-steps N         stop after N steps instead\n"
            "  --lr L                base LR per 256 images; peak = L * batch / 256  (default 0.1)\n"
            "  --momentum M          SGD momentum                                  (default 0.9)\n"
            "  --nesterov            Nesterov momentum\n"
            "  --wd W                weight decay (not on BN or biases)            (default 5e-5)\n"
            "  --warmup-epochs E     linear warmup                                 (default 0)\n"
            "  --schedule S          cosine, step or poly                          (default cosine)\n"
            "  --label-smoothing S   (default 0.1)\n"
            "  --no-zero-init        do not start each block's last BN gamma at 0\n"
            "  --min-scale A         random-resized-crop smallest area fraction\n"
            "                        (default 0.08; 0.35 for images <= 32 px)\n"
            "  --crop-fraction F     eval: center crop of the resized image   (default 0.875; 1 for <= 32 px)\n"
            "  --no-flip             no random horizontal flip\n"
            "  --eval-split NAME     evaluated after each epoch; 'none' for none (default: test,\n"
            "                        else validation, else none; with a glob or a file as\n"
            "                        --data, looked for in its folder)\n"
            "  --threads N           compute threads in all (default: chosen within --cpus; alone,\n"
            "                        one replica of N threads)\n"
            "  --backend B           cpu, cuda or ref (ref: the plain-loop oracle, slow)\n"
            "                        (default cpu)\n"
            "  --precision P         cuda: bf16, fp16 (dynamic loss scaling) or fp32 activations,\n"
            "                        fp32 master weights always (default bf16); cpu: bf16 or\n"
            "                        fp32 (default bf16 where oneDNN's ISA has bf16 dot products,\n"
            "                        AVX512-BF16 or AMX, else fp32: the start-up line says which);\n"
            "                        ref: fp32\n"
            "  --synthetic           benchmark: train on the first batch over and over\n"
            "                        (the speed without input cost)\n"
            "  --json                print a JSON summary line on stdout at the end (with the\n"
            "                        parallelism chosen and why, and what tuning did)\n"
            "\n"
            "outputs:\n"
            "  --logdir D            TensorBoard events and metrics.jsonl (loss, lr, ...; the\n"
            "                        parallelism chosen and why at the first step, the tuned\n"
            "                        workers and prefetch at every log step)\n"
            "  --ckpt-dir D          checkpoints D/ckpt-<step>.{safetensors,json}; an error after\n"
            "                        steps have run saves the last completed step there first,\n"
            "                        and so does Ctrl-C (a second one quits at once)\n"
            "                        (without --ckpt-dir: in ./sluice-rescue)\n"
            "  --ckpt-every N        steps between checkpoints (default: every epoch and at the end)\n"
            "  --resume              continue from the newest checkpoint in --ckpt-dir\n"
            "  --log-every N         steps between progress lines (default: 10 per epoch)\n"
            "\n"
            "distribution (the result does not depend on how many replicas share --batch):\n"
            "  --strategy S          single, mirrored (synchronous data parallel) or ps\n"
            "                        (asynchronous parameter server) (default: chosen: mirrored\n"
            "                        over one replica of one thread per core, as far as --batch\n"
            "                        splits into slices of 16 or more; single with --threads or\n"
            "                        under mpirun; the replicas depend on --cpus, --batch and the\n"
            "                        model only, so the same --cpus trains the same bits)\n"
            "  --replicas N          mirrored: replica threads; ps: worker threads\n"
            "                        (default: chosen as above; ps: one per core; under mpirun\n"
            "                        one per process)\n"
            "  --sync-bn             mirrored: batch-norm statistics over the global batch\n"
            "                        (one replica: plain batch norm, accepted with a notice)\n"
            "  --bucket-mb M         mirrored: gradient all-reduce bucket size  (default 25)\n"
            "  --no-overlap          mirrored: all-reduce after backward instead of during it\n"
            "  --check-every N       mirrored: verify every N steps that all replicas hold\n"
            "                        identical weights (debug)\n"
            "  --ps-servers N        ps: parameter server threads               (default 1)\n"
            "  --ps-ranks N          ps under mpirun: ranks 0..N-1 serve, the rest are workers\n"
            "                        (default 1)\n"
            "  --max-staleness K     ps: a worker waits rather than run more than K steps\n"
            "                        ahead of the slowest one               (default: no bound)\n"
            "  --comm-timeout S      seconds a collective waits for its peers (default 300)\n"
            "  Multi-worker: mpirun -np K sluice train ... --strategy mirrored (each rank one\n"
            "  replica, the same share of each epoch on every rank). With --shuffle buffer each\n"
            "  reads its own range of each epoch and shuffles it in its own buffer; with\n"
            "  --shuffle global (or none) each reads every K-th record, and any number of\n"
            "  replicas sees the same global batches.\n"
            "  -h, --help            this text\n"
            "\n");
    pf_usage(f);
    fprintf(f,
            "\n"
            "examples:\n"
            "  sluice train --data data/fmnist --image-size 28 --epochs 5 --logdir runs/a --ckpt-dir ck/a\n"
            "  sluice train --data data/imagenet --model resnet50 --batch 32 --max-steps 100\n"
            "  sluice train --data /data/imagenet-tf --classes 1000 --label-offset 1   (TensorFlow's\n"
            "      shards: train-00000-of-01024 ..., validation evaluated)\n");
}

enum {
    OPT_MODEL = 0x2000, OPT_WIDTH, OPT_CLASSES, OPT_MAX_STEPS, OPT_LR, OPT_MOMENTUM,
    OPT_NESTEROV, OPT_WD, OPT_WARMUP, OPT_SCHEDULE, OPT_SMOOTH, OPT_NO_ZERO_INIT,
    OPT_MIN_SCALE, OPT_CROP_FRACTION, OPT_NO_FLIP, OPT_EVAL_SPLIT, OPT_THREADS, OPT_BACKEND,
    OPT_LOGDIR, OPT_CKPT_DIR, OPT_CKPT_EVERY, OPT_RESUME, OPT_LOG_EVERY, OPT_STRATEGY,
    OPT_REPLICAS, OPT_SYNC_BN, OPT_BUCKET_MB, OPT_NO_OVERLAP, OPT_CHECK_EVERY, OPT_PS_SERVERS,
    OPT_MAX_STALENESS, OPT_COMM_TIMEOUT, OPT_PS_RANKS, OPT_PRECISION, OPT_SYNTHETIC, OPT_JSON,
};

static const struct option own_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"width", required_argument, NULL, OPT_WIDTH},
    {"classes", required_argument, NULL, OPT_CLASSES},
    {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"nesterov", no_argument, NULL, OPT_NESTEROV},
    {"wd", required_argument, NULL, OPT_WD},
    {"warmup-epochs", required_argument, NULL, OPT_WARMUP},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"label-smoothing", required_argument, NULL, OPT_SMOOTH},
    {"no-zero-init", no_argument, NULL, OPT_NO_ZERO_INIT},
    {"min-scale", required_argument, NULL, OPT_MIN_SCALE},
    {"crop-fraction", required_argument, NULL, OPT_CROP_FRACTION},
    {"no-flip", no_argument, NULL, OPT_NO_FLIP},
    {"eval-split", required_argument, NULL, OPT_EVAL_SPLIT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"synthetic", no_argument, NULL, OPT_SYNTHETIC},
    {"json", no_argument, NULL, OPT_JSON},
    {"logdir", required_argument, NULL, OPT_LOGDIR},
    {"ckpt-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"ckpt-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"strategy", required_argument, NULL, OPT_STRATEGY},
    {"replicas", required_argument, NULL, OPT_REPLICAS},
    {"sync-bn", no_argument, NULL, OPT_SYNC_BN},
    {"bucket-mb", required_argument, NULL, OPT_BUCKET_MB},
    {"no-overlap", no_argument, NULL, OPT_NO_OVERLAP},
    {"check-every", required_argument, NULL, OPT_CHECK_EVERY},
    {"ps-servers", required_argument, NULL, OPT_PS_SERVERS},
    {"ps-ranks", required_argument, NULL, OPT_PS_RANKS},
    {"max-staleness", required_argument, NULL, OPT_MAX_STALENESS},
    {"comm-timeout", required_argument, NULL, OPT_COMM_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* A finite number in [lo, hi]; -1 after printing the error. */
static int parse_num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_error(CMD, "%s: bad value '%s' (want a number in %g..%g)", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct train_opts {
    pf_flags pf;
    sl_train_config t;
    int arch_given, min_scale_given, crop_given, json, strategy_given;
    double min_scale, crop_fraction;
} train_opts;

static int own_option(train_opts *o, int c, const char *arg)
{
    sl_train_config *t = &o->t;
    double v;
    uint64_t u;
    int i;
    switch (c) {
    case OPT_MODEL:
        if (sl_arch_parse(arg, &t->model.arch)) {
            cli_error(CMD, "--model: bad value '%s' (want resnet20, resnet18 or resnet50)", arg);
            return -1;
        }
        o->arch_given = 1;
        return 0;
    case OPT_WIDTH:
        if (cli_parse_int(CMD, "--width", arg, 1, 4096, &t->model.width))
            return -1;
        return 0;
    case OPT_CLASSES:
        return cli_parse_int(CMD, "--classes", arg, 1, 1 << 20, &t->model.classes);
    case OPT_MAX_STEPS:
        if (cli_parse_u64(CMD, "--max-steps", arg, &u))
            return -1;
        t->max_steps = (int64_t)u;
        return 0;
    case OPT_LR:
        if (parse_num("--lr", arg, 0, 1e3, &v))
            return -1;
        t->base_lr = v;
        return 0;
    case OPT_MOMENTUM:
        if (parse_num("--momentum", arg, 0, 1, &v))
            return -1;
        t->sgd.momentum = (float)v;
        return 0;
    case OPT_NESTEROV: t->sgd.nesterov = 1; return 0;
    case OPT_WD:
        if (parse_num("--wd", arg, 0, 1, &v))
            return -1;
        t->sgd.weight_decay = (float)v;
        return 0;
    case OPT_WARMUP:
        if (parse_num("--warmup-epochs", arg, 0, 1e6, &v))
            return -1;
        t->warmup_epochs = v;
        return 0;
    case OPT_SCHEDULE:
        if (sl_sched_parse(arg, &t->schedule)) {
            cli_error(CMD, "--schedule: bad value '%s' (want cosine, step or poly)", arg);
            return -1;
        }
        return 0;
    case OPT_SMOOTH:
        if (parse_num("--label-smoothing", arg, 0, 0.999, &v))
            return -1;
        t->label_smoothing = (float)v;
        return 0;
    case OPT_NO_ZERO_INIT: t->model.zero_init_residual = 0; return 0;
    case OPT_MIN_SCALE:
        if (parse_num("--min-scale", arg, 0.001, 1, &o->min_scale))
            return -1;
        o->min_scale_given = 1;
        return 0;
    case OPT_CROP_FRACTION:
        if (parse_num("--crop-fraction", arg, 0.05, 1, &o->crop_fraction))
            return -1;
        o->crop_given = 1;
        return 0;
    case OPT_NO_FLIP: o->pf.cfg.flip = 0; return 0;
    case OPT_EVAL_SPLIT: t->eval_split = strcmp(arg, "none") ? arg : NULL; return 0;
    case OPT_THREADS:
        if (cli_parse_int(CMD, "--threads", arg, 1, 1024, &i))
            return -1;
        t->threads = i;
        return 0;
    case OPT_BACKEND:
        if (sl_backend_parse(arg, &t->backend)) {
            cli_error(CMD, "--backend: bad value '%s' (want cpu, cuda or ref)", arg);
            return -1;
        }
        return 0;
    case OPT_PRECISION: {
        sl_dtype pt;
        if (sl_precision_parse(arg, &pt)) {
            cli_error(CMD, "--precision: bad value '%s' (want bf16, fp16 or fp32)", arg);
            return -1;
        }
        t->precision = (int)pt;
        return 0;
    }
    case OPT_SYNTHETIC: t->synthetic = 1; return 0;
    case OPT_JSON: o->json = 1; return 0;
    case OPT_LOGDIR: t->logdir = arg; return 0;
    case OPT_CKPT_DIR: t->ckpt_dir = arg; return 0;
    case OPT_CKPT_EVERY:
        if (cli_parse_u64(CMD, "--ckpt-every", arg, &u))
            return -1;
        t->ckpt_every = (int64_t)u;
        return 0;
    case OPT_RESUME: t->resume = 1; return 0;
    case OPT_LOG_EVERY:
        if (cli_parse_u64(CMD, "--log-every", arg, &u))
            return -1;
        t->log_every = (int64_t)u;
        return 0;
    case OPT_STRATEGY:
        if (sl_strategy_parse(arg, &t->strategy)) {
            cli_error(CMD, "--strategy: bad value '%s' (want single, mirrored or ps)", arg);
            return -1;
        }
        o->strategy_given = 1;
        return 0;
    case OPT_REPLICAS: return cli_parse_int(CMD, "--replicas", arg, 1, 1024, &t->replicas);
    case OPT_SYNC_BN: t->sync_bn = 1; return 0;
    case OPT_BUCKET_MB:
        if (parse_num("--bucket-mb", arg, 0.001, 1e5, &v))
            return -1;
        t->bucket_mb = v;
        return 0;
    case OPT_NO_OVERLAP: t->no_overlap = 1; return 0;
    case OPT_CHECK_EVERY:
        if (cli_parse_u64(CMD, "--check-every", arg, &u))
            return -1;
        t->check_every = (int64_t)u;
        return 0;
    case OPT_PS_SERVERS: return cli_parse_int(CMD, "--ps-servers", arg, 1, 1024, &t->ps_servers);
    case OPT_PS_RANKS: return cli_parse_int(CMD, "--ps-ranks", arg, 1, 1 << 20, &t->ps_ranks);
    case OPT_MAX_STALENESS:
        return cli_parse_int(CMD, "--max-staleness", arg, 0, 1 << 30, &t->max_staleness);
    case OPT_COMM_TIMEOUT:
        return cli_parse_int(CMD, "--comm-timeout", arg, 1, 1 << 20, &t->comm_timeout_s);
    }
    cli_error(CMD, "internal: option %d", c);
    return -1;
}

/* 0 ok, 2 usage error (printed), -1 --help printed. */
static int parse(int argc, char **argv, train_opts *o)
{
    for (int c; (c = pf_getopt(&o->pf, argc, argv, own_opts)) != -1;) {
        switch (c) {
        case PF_GETOPT_ERROR: return 2;
        case 'h': usage(stdout); return -1;
        default:
            if (own_option(o, c, optarg))
                return 2;
        }
    }
    if (optind < argc) {
        cli_error(CMD, "unexpected argument '%s' (see sluice train --help)", argv[optind]);
        return 2;
    }
    if (pf_finish(&o->pf))
        return 2;
    /* --sync-bn on one replica is plain batch norm (PyTorch and TensorFlow
     * take it so): the trainer says so. Asynchronous ps workers share no
     * batch to synchronize over. */
    if (o->t.strategy == SL_STRATEGY_PS && o->t.sync_bn) {
        cli_error(CMD, "--sync-bn needs --strategy mirrored (ps workers share no batch)");
        return 2;
    }
    if (o->t.strategy != SL_STRATEGY_MIRRORED && (o->t.no_overlap || o->t.check_every)) {
        cli_error(CMD, "--no-overlap and --check-every need --strategy mirrored");
        return 2;
    }
    if (o->t.strategy == SL_STRATEGY_SINGLE && o->t.replicas > 1) {
        cli_error(CMD, "--replicas needs --strategy mirrored or ps");
        return 2;
    }
    if (o->t.strategy != SL_STRATEGY_PS &&
        (o->t.ps_servers || o->t.ps_ranks || o->t.max_staleness >= 0)) {
        cli_error(CMD, "--ps-servers, --ps-ranks and --max-staleness need --strategy ps");
        return 2;
    }
    if (o->t.resume && !o->t.ckpt_dir) {
        cli_error(CMD, "--resume needs --ckpt-dir");
        return 2;
    }
    return 0;
}

/* Model and recipe defaults that depend on the input size. */
static void apply_defaults(train_opts *o)
{
    sl_train_config *t = &o->t;
    sl_pipeline_config *c = &o->pf.cfg;
    int small = c->height <= 32 && c->width <= 32;
    if (!o->arch_given)
        t->model.arch = small ? SL_ARCH_RESNET20 : SL_ARCH_RESNET50;
    if (t->epochs <= 0)
        t->epochs = t->model.arch == SL_ARCH_RESNET20 ? 5 : 90;
    c->scale_min = (float)(o->min_scale_given ? o->min_scale : small ? 0.35 : 0.08);
    c->crop_fraction = (float)(o->crop_given ? o->crop_fraction : small ? 1.0 : 0.875);
    t->data = *c;
}

/* Replicas x threads, workers, readers and prefetch within --cpus
 * (tools/par_plan.c): what the options left open. */
static int plan(train_opts *o, sl_par_plan *p)
{
    sl_train_config *t = &o->t;
    sl_par_request q = SL_PAR_REQUEST_INIT;
    q.job = SL_PAR_TRAIN;
    q.backend = t->backend;
    q.arch = t->model.arch;
    q.width = t->model.width;
    q.mpi = sl_comm_mpi_launched();
    q.strategy = o->strategy_given ? (int)t->strategy : -1;
    q.replicas = t->replicas;
    q.threads = t->threads;
    /* each replica evaluates beside its training pipeline (loop/replica.c) */
    o->pf.mem_eval = o->pf.memory_budget &&
                     sl_train_eval_where(t, o->pf.cfg.data, o->pf.mem_eval_data,
                                         sizeof o->pf.mem_eval_data, o->pf.mem_eval_split,
                                         sizeof o->pf.mem_eval_split);
    if (par_plan_apply(CMD, &o->pf, &q, p, stderr))
        return -1;
    t->strategy = p->strategy;
    if (!q.mpi && p->strategy != SL_STRATEGY_SINGLE)
        t->replicas = p->replicas;
    t->threads = p->replicas * p->threads; /* the total: loop/replica.c shares it */
    t->data.workers = o->pf.cfg.workers;
    t->data.readers = o->pf.cfg.readers;
    t->data.prefetch = o->pf.cfg.prefetch;
    t->data.read_window_bytes = o->pf.cfg.read_window_bytes;
    t->data.memory_budget = o->pf.cfg.memory_budget;
    t->data.tune = o->pf.cfg.tune;
    t->data.io = o->pf.cfg.io;
    t->plan = p; /* to the logdir: the split and why */
    return 0;
}

int cmd_train(int argc, char **argv)
{
    train_opts o;
    memset(&o, 0, sizeof o);
    pf_init(&o.pf, CMD);
    sl_train_config_init(&o.t);
    o.t.label_smoothing = 0.1f;
    o.pf.cfg.epochs = 0; /* --epochs given: the trainer's epochs */
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    o.t.epochs = o.pf.cfg.epochs;
    apply_defaults(&o);
    sl_par_plan par;
    if (plan(&o, &par))
        return 2;
    sl_train_result res;
    /* ps does not read the stop request: there Ctrl-C keeps its default */
    cli_stop stop;
    int ps = o.t.strategy == SL_STRATEGY_PS;
    o.t.stop = ps ? NULL : cli_stop_catch(&stop);
    rc = sl_train_run(&o.t, &res);
    int sig = ps ? 0 : cli_stop_restore(&stop);
    if (rc == SL_ECANCELED && sig && res.stopped) {
        /* the progress named the checkpoint and the resume already */
        if (res.root)
            cli_error(CMD, "stopped by %s after step %lld", cli_stop_name(sig),
                      (long long)res.stopped);
        return 128 + sig;
    }
    if (rc)
        return cli_fail(CMD, rc);
    if (!res.root)
        return 0; /* under mpirun the root process reports for the job */
    fprintf(stderr, "train: %lld steps in %.1f s, %.0f images/s", (long long)res.steps,
            res.seconds, res.images_per_sec);
    if (res.eval_top1 >= 0)
        fprintf(stderr, ", %s top1 %.4f top5 %.4f", res.eval_split, res.eval_top1,
                res.eval_top5);
    fprintf(stderr, "\n");
    if (o.t.synthetic == 0) {
        char tuning[768];
        pf_tuning_text(&res.tuning, tuning, sizeof tuning);
        fprintf(stderr, "train: tuning%s: %s\n", res.world > 1 ? " (replica 0's pipeline)" : "",
                tuning);
    }
    if (res.world > 1 && o.t.strategy == SL_STRATEGY_MIRRORED)
        fprintf(stderr, "train: %d replicas, %.1f%% of step time waiting for all-reduce\n",
                res.world, 100.0 * res.comm_wait_frac);
    if (o.t.strategy == SL_STRATEGY_PS && res.steps > 0)
        fprintf(stderr, "train: %d workers, staleness mean %.2f max %lld\n", res.world,
                res.staleness_mean, (long long)res.staleness_max);
    if (res.checkpoint[0])
        fprintf(stderr, "train: checkpoint %s.safetensors (+ .json)\n", res.checkpoint);
    if (o.t.logdir)
        fprintf(stderr, "train: logs in %s (tensorboard --logdir %s; metrics.jsonl)\n",
                o.t.logdir, o.t.logdir);
    if (o.t.backend == SL_BACKEND_CUDA && res.cuda_graph[0])
        fprintf(stderr, "train: CUDA graph: %s (%s)\n", res.cuda_graph, res.cuda_graph_why);
    if (o.t.backend == SL_BACKEND_CUDA && res.cudnn_fusion[0])
        fprintf(stderr, "train: cuDNN fusion: %s%s%s%s\n", res.cudnn_fusion,
                res.cudnn_fusion_why[0] ? " (" : "", res.cudnn_fusion_why,
                res.cudnn_fusion_why[0] ? ")" : "");
    if (res.amp_skipped > 0)
        fprintf(stderr, "train: fp16: %lld steps skipped for inf/nan gradients, loss scale %g\n",
                (long long)res.amp_skipped, res.amp_scale);
    /* bad records: never dropped without a word (the progress named each) */
    if (res.skipped > 0)
        fprintf(stderr, "train: %lld bad records skipped (the next good record took each one's "
                "place; counted every epoch), the first: %s\n", (long long)res.skipped,
                res.skipped_first[0] ? res.skipped_first : "(another process's)");
    if (res.eval_skipped > 0)
        fprintf(stderr, "train: the last evaluation left out %lld bad records of %s (top1 counts "
                "the others), the first: %s\n", (long long)res.eval_skipped, res.eval_split,
                res.eval_skipped_first[0] ? res.eval_skipped_first : "(another process's)");
    if (o.json) {
        char par_json[1024], mem_json[1024], tune_json[1024];
        sl_par_json(&par, par_json, sizeof par_json);
        pf_memory_json(&o.pf, mem_json, sizeof mem_json);
        pf_tuning_json(&res.tuning, tune_json, sizeof tune_json);
        printf("{\"steps\": %lld, \"seconds\": %.3f, \"images_per_sec\": %.2f, "
               "\"images_per_sec_steady\": %.2f, \"input_wait_frac\": %.4f, "
               "\"final_loss\": %.6g, \"eval_top1\": %.6g, \"world\": %d, "
               "\"backend\": \"%s\", \"precision\": \"%s\", \"synthetic\": %s, "
               "\"batch\": %u, \"model\": \"%s\", \"amp_skipped\": %lld, "
               "\"peak_device_mib\": %.1f, \"device_used_mib\": %.1f, \"cuda_graph\": \"%s\", "
               "\"cuda_graph_replays\": %lld, \"cudnn_fusion\": \"%s\", "
               "\"skipped_records\": %lld, \"eval_skipped_records\": %lld, \"cpu_isa\": \"%s\", "
               "\"cudnn_fusion_detail\": %s, \"parallelism\": %s, \"memory\": %s, "
               "\"tuning\": %s}\n",
               (long long)res.steps, res.seconds, res.images_per_sec, res.images_per_sec_steady,
               res.input_wait_frac, res.final_loss, res.eval_top1, res.world,
               sl_backend_name(o.t.backend), sl_precision_name(sl_train_precision(&o.t)), o.t.synthetic ? "true" : "false",
               o.t.data.batch, sl_arch_name(o.t.model.arch), (long long)res.amp_skipped,
               res.peak_device_mib, res.device_used_mib, res.cuda_graph,
               (long long)res.cuda_graph_replays, res.cudnn_fusion, (long long)res.skipped,
               (long long)res.eval_skipped, cpu_isa(&o.t),
               res.cudnn_fusion_detail[0] ? res.cudnn_fusion_detail : "null", par_json, mem_json,
               tune_json);
        fflush(stdout);
    }
    return 0;
}

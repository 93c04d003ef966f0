/*
 * tools/cmd_eval.c - `sluice eval`: top-1 and top-5 of a checkpoint on a
 * split, every record once, in order, with the eval transform.
 *
 * The model is rebuilt from the checkpoint's metadata (arch, width,
 * classes, image size), so a .safetensors file is all it needs; a file
 * written by PyTorch (torchvision names) works when --model and --classes
 * say what it is.
 *
 * --backend cuda evaluates on the GPU the way `sluice train --backend cuda`
 * trains (train/loop/replica.c): a cuda exec with the activation type of
 * --precision (default bf16 there and on a cpu with bf16 dot products, fp32
 * elsewhere: sl_train_precision),
 * the model placed on the device after the checkpoint is loaded into its
 * host copy, u8 batches copied to the GPU and normalized there
 * (sl_eval_run). The GPU is --device when given (the pipeline flag, which
 * then names the GPU of the model too), else SLUICE_CUDA_DEVICE, else 0.
 *
 * Exit status: 0 done, 2 usage or runtime error.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "par_plan.h"
#include "pipeline_flags.h"
#include "records/records.h"
#include "train/train.h"

#define CMD "eval"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice eval --data DIR --checkpoint FILE.safetensors [--split NAME] [options]\n"
            "\n"
            "Evaluate a checkpoint on every record of a split (in order, eval transform: resize the\n"
            "shorter side, center crop) and print top-1, top-5 and the mean loss.\n"
            "\n"
            "  --checkpoint F        a checkpoint written by sluice train (F.safetensors), or a\n"
            "                        torchvision state dict saved as safetensors (with --model)\n"
            "  --model NAME          resnet20, resnet18 or resnet50 (default: from the checkpoint)\n"
            "  --width W             base width (default: from the checkpoint)\n"
            "  --classes K           (default: from the checkpoint, else 1000)\n"
            "  --crop-fraction F     center crop fraction (default 1 for <= 32 px, else 0.875)\n"
            "  --threads N           compute threads (default: chosen within --cpus: one for a\n"
            "                        small net, every core for a big one)\n"
            "  --backend B           cpu, cuda or ref (ref: the plain-loop oracle, slow)\n"
            "                        (default cpu; cuda: GPU --device, else SLUICE_CUDA_DEVICE,\n"
            "                        else 0)\n"
            "  --precision P         bf16, fp16 (cuda) or fp32 activations, as sluice train\n"
            "                        (default bf16 on cuda and on a cpu with bf16 dot products,\n"
            "                        else fp32; ref: fp32)\n"
            "  --json                print one JSON object (the figures, the parallelism\n"
            "                        chosen and why, what tuning did)\n"
            "  -h, --help            this text\n"
            "\n");
    pf_usage(f);
    fprintf(f,
            "\n"
            "(--split defaults to test here, or validation when the data has no test split;\n"
            "--image-size defaults to the checkpoint's.)\n"
            "example:\n"
            "  sluice eval --data data/fmnist --checkpoint ck/a/ckpt-000001170.safetensors\n"
            "  sluice eval --data data/fmnist --checkpoint ck/a/ckpt-000001170.safetensors "
            "--backend cuda\n");
}

enum { OPT_CKPT = 0x2000, OPT_MODEL, OPT_WIDTH, OPT_CLASSES, OPT_CROP, OPT_THREADS, OPT_JSON,
       OPT_BACKEND, OPT_PRECISION };

static const struct option own_opts[] = {
    {"checkpoint", required_argument, NULL, OPT_CKPT},
    {"model", required_argument, NULL, OPT_MODEL},
    {"width", required_argument, NULL, OPT_WIDTH},
    {"classes", required_argument, NULL, OPT_CLASSES},
    {"crop-fraction", required_argument, NULL, OPT_CROP},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"json", no_argument, NULL, OPT_JSON},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int cmd_eval(int argc, char **argv)
{
    pf_flags pf;
    pf_init(&pf, CMD);
    pf.cfg.split = "test";
    pf.cfg.height = pf.cfg.width = 0;
    const char *ckpt = NULL, *model = NULL;
    int width = 0, classes = 0, threads = 0, json = 0, size_given;
    double crop = 0;
    /* backend and precision resolved as sluice train does (sl_train_precision) */
    sl_train_config tc;
    sl_train_config_init(&tc);
    for (int c; (c = pf_getopt(&pf, argc, argv, own_opts)) != -1;) {
        switch (c) {
        case PF_GETOPT_ERROR: return 2;
        case 'h': usage(stdout); return 0;
        case OPT_CKPT: ckpt = optarg; break;
        case OPT_MODEL: model = optarg; break;
        case OPT_WIDTH:
            if (cli_parse_int(CMD, "--width", optarg, 1, 4096, &width))
                return 2;
            break;
        case OPT_CLASSES:
            if (cli_parse_int(CMD, "--classes", optarg, 1, 1 << 20, &classes))
                return 2;
            break;
        case OPT_CROP: {
            char *end;
            crop = strtod(optarg, &end);
            if (end == optarg || *end || !(crop >= 0.05 && crop <= 1)) {
                cli_error(CMD, "--crop-fraction: bad value '%s' (want 0.05..1)", optarg);
                return 2;
            }
            break;
        }
        case OPT_THREADS:
            if (cli_parse_int(CMD, "--threads", optarg, 1, 1024, &threads))
                return 2;
            break;
        case OPT_JSON: json = 1; break;
        case OPT_BACKEND:
            if (sl_backend_parse(optarg, &tc.backend)) {
                cli_error(CMD, "--backend: bad value '%s' (want cpu, cuda or ref)", optarg);
                return 2;
            }
            break;
        case OPT_PRECISION: {
            sl_dtype pt;
            if (sl_precision_parse(optarg, &pt)) {
                cli_error(CMD, "--precision: bad value '%s' (want bf16, fp16 or fp32)", optarg);
                return 2;
            }
            tc.precision = (int)pt;
            break;
        }
        }
    }
    if (optind < argc) {
        cli_error(CMD, "unexpected argument '%s' (see sluice eval --help)", argv[optind]);
        return 2;
    }
    if (!ckpt) {
        cli_error(CMD, "--checkpoint is required (see sluice eval --help)");
        return 2;
    }
    size_given = pf.cfg.height > 0;
    if (!size_given)
        pf.cfg.height = pf.cfg.width = 224;
    if (pf_finish(&pf))
        return 2;
    if (!pf.split_given) { /* test, else validation (TensorFlow's ImageNet name) */
        sl_dataset ds;
        int r = sl_dataset_resolve(pf.cfg.data, NULL, &ds);
        const char *es = r ? NULL : sl_dataset_eval_split(&ds);
        pf.cfg.split = es ? es : "test"; /* none: pf_check_data names what there is */
        sl_dataset_fini(&ds);
    }

    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    int image_size = 0, rc = sl_checkpoint_model_config(ckpt, &mc, &image_size);
    if (rc && rc != SL_ENOENT)
        return cli_fail(CMD, rc);
    if (model && sl_arch_parse(model, &mc.arch)) {
        cli_error(CMD, "--model: bad value '%s' (want resnet20, resnet18 or resnet50)", model);
        return 2;
    }
    if (width)
        mc.width = width;
    if (classes)
        mc.classes = classes;
    if (!size_given && image_size > 0)
        pf.cfg.height = pf.cfg.width = image_size;
    sl_pipeline_config *d = &pf.cfg;
    int small = d->height <= 32 && d->width <= 32;
    d->transform = SL_TRANSFORM_EVAL;
    d->shuffle = SL_SHUFFLE_NONE;
    d->shuffle_files = 0;
    d->epochs = 1;
    d->drop_remainder = 0;
    d->layout = SL_LAYOUT_NHWC_F32;
    d->crop_fraction = (float)(crop > 0 ? crop : small ? 1.0 : 0.875);
    /* threads, workers and readers within --cpus (tools/par_plan.c) */
    sl_par_request q = SL_PAR_REQUEST_INIT;
    q.job = SL_PAR_EVAL;
    q.backend = tc.backend;
    q.arch = mc.arch;
    q.width = mc.width;
    q.threads = threads;
    sl_par_plan par;
    if (par_plan_apply(CMD, &pf, &q, &par, stderr))
        return 2;
    threads = par.threads;
    char par_json[1024], mem_json[1024];
    sl_par_json(&par, par_json, sizeof par_json);
    pf_memory_json(&pf, mem_json, sizeof mem_json);

    sl_model *m = NULL;
    sl_exec *e = NULL;
    int data_bad = 0;
    sl_eval_result er;
    sl_dtype act = sl_train_precision(&tc);
    /* the exec first: no GPU (or no CUDA in this build) fails before any
     * work; the checkpoint goes into the host copy, placing moves it */
    int gpu = tc.backend == SL_BACKEND_CUDA ? d->device : -1;
    if ((rc = sl_exec_create(tc.backend, threads, gpu, &e)))
        goto out;
    if ((rc = sl_exec_set_act(e, act)))
        goto out;
    /* the data after the flags' own errors (--precision on the cpu), before any work */
    if (pf_check_data(&pf)) {
        data_bad = 1;
        goto out;
    }
    if ((rc = sl_model_create(&mc, (int)d->batch, d->height, d->width, &m)) ||
        (rc = sl_checkpoint_load(ckpt, m, NULL, 1)) || (rc = sl_model_place(m, e)) ||
        (rc = sl_eval_run(m, e, d, &er)))
        goto out;
    char tune_json[1024], tune_text[768];
    pf_tuning_json(&er.tuning, tune_json, sizeof tune_json);
    pf_tuning_text(&er.tuning, tune_text, sizeof tune_text);
    fprintf(stderr, "eval: tuning: %s\n", tune_text);
    if (json)
        printf("{\"checkpoint\":\"%s\",\"split\":\"%s\",\"model\":\"%s\",\"backend\":\"%s\","
               "\"precision\":\"%s\",\"images\":%lld,\"top1\":%.6f,\"top5\":%.6f,\"loss\":%.9g,"
               "\"seconds\":%.3f,\"skipped_records\":%lld,\"parallelism\":%s,\"memory\":%s,"
               "\"tuning\":%s}\n", ckpt, d->split,
               sl_arch_name(mc.arch), sl_backend_name(tc.backend), sl_precision_name(act),
               (long long)er.images, er.top1, er.top5, er.loss, er.seconds,
               (long long)er.skipped, par_json, mem_json, tune_json);
    else
        printf("%s on %s/%s (%s, %s): %lld images, top1 %.4f, top5 %.4f, loss %.4f (%.1f s)%s\n",
               ckpt, d->data, d->split, sl_backend_name(tc.backend), sl_precision_name(act),
               (long long)er.images, er.top1, er.top5, er.loss, er.seconds,
               er.skipped ? ", bad records left out (below)" : "");
    /* bad records (--on-error skip): left out, never counted twice, never
     * without a word */
    if (er.skipped > 0)
        fprintf(stderr, "eval: %lld bad records left out (top1 and top5 count the %lld others), "
                "the first: %s\n", (long long)er.skipped, (long long)er.images,
                er.skipped_first);
out:
    sl_model_destroy(m); /* before its exec: a placed model frees device memory */
    sl_exec_destroy(e);
    return data_bad ? 2 : rc ? cli_fail(CMD, rc) : 0;
}

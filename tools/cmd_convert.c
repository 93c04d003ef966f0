/*
 * tools/cmd_convert.c - `sluice convert`: a thin client of sl_convert_run
 * (records/records.h). Parses options, draws the progress line, lists the
 * skipped inputs and prints the summary.
 *
 * Class names: the IDX format carries none, so `--class-names FILE` (one
 * name per line, line k names label k) supplies them, for any source; they
 * go into image/class/text and dataset.json. An explicit file was chosen
 * over recognizing Fashion-MNIST by its path: nothing is guessed, and the
 * same option serves MNIST, list files and relabelled folders.
 *
 * Ctrl-C (SIGINT) and SIGTERM stop the run through sl_convert_config's
 * cancel (tools/signals.c): the shard being written is dropped with its
 * temp files, the finished shards stay whole, and the same command with
 * --resume finishes the job. A second Ctrl-C kills at once.
 *
 * --plan-out, and --plan PLAN with --task or --finish (a conversion cut
 * into tasks for a cluster), are tools/cmd_convert_task.c's.
 *
 * Exit status: 0 converted (skipped inputs are listed, not fatal), 1 an
 * input was undecodable under --strict, 2 usage or runtime error, 128 + the
 * signal (130 for Ctrl-C) when a signal stopped it.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "convert_progress.h"
#include "cmd_convert_task.h"
#include "records/records.h"

#define CMD "convert"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice convert --from folder DIR  --out DIR --name NAME [options]\n"
            "       sluice convert --from list FILE   --out DIR --name NAME [options]\n"
            "       sluice convert --from idx --images F --labels F --out DIR --name NAME [options]\n"
            "       sluice convert --from tfrecord PATH [--split S] --out DIR --name NAME [options]\n"
            "\n"
            "Convert images into TFRecord shards (DIR/NAME-00000-of-0000N.tfrecord, each with a\n"
            "DALI .idx index) or an LMDB store (DIR/NAME.lmdb), and record the split in\n"
            "DIR/dataset.json. Each record is a tf.train.Example with TensorFlow's ImageNet\n"
            "feature names. Shards appear atomically; a run stopped by Ctrl-C or killed can be\n"
            "finished with --resume.\n"
            "\n"
            "source (one of):\n"
            "  --from folder DIR     DIR/<class>/<image> (images in folders under a class folder too,\n"
            "                        at any depth, as torchvision's ImageFolder); class folders\n"
            "                        sorted by name are labels 0..K-1, or, into a dataset whose\n"
            "                        other splits named classes, their labels by name\n"
            "  --from list FILE      lines \"path<TAB>label\"; relative paths are relative to FILE's folder\n"
            "  --from idx            MNIST-style IDX files, gzip or plain, with:\n"
            "    --images F            the images (idx3-ubyte)\n"
            "    --labels F            the labels (idx1-ubyte)\n"
            "  --from tfrecord PATH  the Examples of one split of TFRecord shards: a folder of\n"
            "                        TensorFlow's or TensorFlow Datasets' shards (tfds.load's\n"
            "                        ~/tensorflow_datasets/NAME/VERSION), a glob or one shard;\n"
            "                        their images re-encoded where not JPEG (TFDS's mnist, cifar10\n"
            "                        are PNG), their labels and class names kept\n"
            "    --split S             the split to read (default: the one named like --name,\n"
            "                          else the only one)\n"
            "\n"
            "output:\n"
            "  --out DIR             output directory, created if missing            (required)\n"
            "  --name NAME           split name: train, test, ...                   (required)\n"
            "  --format F, --to F    tfrecord, lmdb or wds (WebDataset tar shards NAME-00000-of-0000N.tar:\n"
            "                        KEY.jpg, KEY.cls, KEY.json per record, KEY the record number,\n"
            "                        an index NAME-...tar.idx in DALI's format beside each)\n"
            "                                                                        (default tfrecord)\n"
            "  --shards N            TFRecord or tar shards; 0 = about 128 MiB each  (default 0)\n"
            "  --class-names FILE    names of labels 0..K-1, one per line; for IDX and list sources,\n"
            "                        or to rename folder classes                     (default none)\n"
            "  --label-offset K      added to every label written (TF's ImageNet: 1) (default 0)\n"
            "\n"
            "images:\n"
            "  --quality Q           JPEG quality of re-encoded images, 1..100       (default 95)\n"
            "  --resize-short S      shrink so the shorter side is at most S; 0 keeps (default 0)\n"
            "                        RGB JPEGs that fit are stored byte for byte; PNG, BMP, PPM, WebP\n"
            "                        (still; needs libwebp), gray or CMYK JPEGs and IDX pixels become\n"
            "                        RGB JPEGs (transparency over white).\n"
            "  --max-pixels N        skip (list) an image whose header claims more than N pixels,\n"
            "                        before decoding it; bounds memory at about 12 bytes x N per\n"
            "                        thread                         (default 67108864 = 2^26, 8192^2)\n"
            "  --restart N|auto      store every JPEG with a restart marker every N MCUs (auto: the\n"
            "                        measured default, 16 intervals per MCU row, 4 MCUs at least),\n"
            "                        re-written losslessly (the same pixels; progressive becomes\n"
            "                        baseline) when it has none: the pipeline then entropy-decodes\n"
            "                        only the intervals a crop covers. Worth it for large photos\n"
            "                        (README, \"Restart markers\"); costs a few %% of bytes and a\n"
            "                        rewrite per image at convert time\n"
            "                                                                        (default off)\n"
            "  --restart-rows R      the same with a marker every R MCU rows\n"
            "\n"
            "order:\n"
            "  --shuffle-seed S      seed of the record order across shards          (default 0)\n"
            "  --no-shuffle          keep the source order\n"
            "\n"
            "run:\n"
            "  --threads N           worker threads; 0 = one per core                (default 0)\n"
            "  --resume              keep the finished shards of an interrupted run of the same\n"
            "                        inputs and options, write the rest (nothing, when the killed\n"
            "                        run had finished)\n"
            "  --strict              stop at the first undecodable input (exit 1) instead of skipping\n"
            "  --no-fsync            do not fsync shards (scratch output; not crash safe)\n"
            "  --quiet               no progress line (the summary is still printed)\n"
            "  -h, --help            this text\n"
            "\n"
            "on a cluster (README.md \"Converting on a cluster\"; Ray, Slurm arrays, Kubernetes Jobs):\n"
            "  --plan-out PLAN       list, order and assign the inputs to shards and the shards to tasks;\n"
            "                        write PLAN (JSON, a path or s3:// URL) and convert nothing\n"
            "  --tasks N             with --plan-out: tasks to cut the shards into  (default: one per shard)\n"
            "  sluice convert --plan PLAN --task K --tasks N [--threads T]\n"
            "                        write the shards of task K (0..N-1); re-runs keep whole shards\n"
            "  sluice convert --plan PLAN --finish\n"
            "                        check every shard, write the indexes and dataset.json; exit 1\n"
            "                        naming each missing or damaged shard and its task\n"
            "  (see sluice convert --plan PLAN --help)\n"
            "  --out s3://BUCKET/PREFIX writes by PUT (multipart above SLUICE_PUT_PART_BYTES, 64 MiB);\n"
            "  --from list lines may be http://, https:// or s3:// URLs (a 404/403 is a skip)\n"
            "\n"
            "Undecodable inputs are skipped and listed on stderr (\"skipped: PATH: reason\"); the exit\n"
            "status stays 0. Output is the same for any --threads. Exit: 0 done, 1 an input was\n"
            "undecodable under --strict, 2 usage or runtime error.\n"
            "\n"
            "example:\n"
            "  printf '%%s\\n' T-shirt/top Trouser Pullover Dress Coat Sandal Shirt Sneaker Bag \\\n"
            "      'Ankle boot' > fmnist-classes.txt\n"
            "  sluice convert --from idx --images t10k-images-idx3-ubyte.gz \\\n"
            "      --labels t10k-labels-idx1-ubyte.gz --class-names fmnist-classes.txt \\\n"
            "      --out data/fmnist --name test --shards 2\n");
}

/* ------------------------------------------------------- class names */
typedef struct names_file {
    char **names;
    uint32_t n;
} names_file;

static void names_free(names_file *nf)
{
    for (uint32_t i = 0; i < nf->n; i++)
        free(nf->names[i]);
    free(nf->names);
    nf->names = NULL;
    nf->n = 0;
}

/* One name per line; "\r\n" accepted; an empty line before the last name
 * would shift every later label, so it is an error. */
static int names_load(const char *path, names_file *nf)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_error(CMD, "--class-names: %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, blank_at = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0) {
            blank_at = blank_at ? blank_at : lineno;
            continue;
        }
        if (blank_at) {
            cli_error(CMD, "--class-names: %s:%zu: empty line (line k names label k-1)", path, blank_at);
            rc = -1;
            break;
        }
        char **p = realloc(nf->names, (nf->n + 1) * sizeof *p);
        if (!p || !(p[nf->n] = strdup(line))) {
            if (p)
                nf->names = p;
            cli_error(CMD, "--class-names: out of memory");
            rc = -1;
            break;
        }
        nf->names = p;
        nf->n++;
    }
    free(line);
    fclose(f);
    if (!rc && nf->n == 0) {
        cli_error(CMD, "--class-names: %s: no names", path);
        rc = -1;
    }
    if (rc)
        names_free(nf);
    return rc;
}

/* ------------------------------------------------------- options */
enum {
    OPT_FROM = 256, OPT_IMAGES, OPT_LABELS, OPT_OUT, OPT_NAME, OPT_SHARDS, OPT_FORMAT, OPT_THREADS,
    OPT_QUALITY, OPT_RESIZE, OPT_SEED, OPT_NO_SHUFFLE, OPT_OFFSET, OPT_RESUME, OPT_STRICT,
    OPT_NO_FSYNC, OPT_QUIET, OPT_CLASSES, OPT_MAX_PIXELS, OPT_RESTART, OPT_RESTART_ROWS,
    OPT_PLAN_OUT, OPT_TASKS, /* --plan-out: tools/cmd_convert_task.c */
    OPT_SPLIT,
};

static const struct option long_opts[] = {
    {"from", required_argument, NULL, OPT_FROM},
    {"images", required_argument, NULL, OPT_IMAGES},
    {"labels", required_argument, NULL, OPT_LABELS},
    {"split", required_argument, NULL, OPT_SPLIT},
    {"out", required_argument, NULL, OPT_OUT},
    {"name", required_argument, NULL, OPT_NAME},
    {"shards", required_argument, NULL, OPT_SHARDS},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"to", required_argument, NULL, OPT_FORMAT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"quality", required_argument, NULL, OPT_QUALITY},
    {"resize-short", required_argument, NULL, OPT_RESIZE},
    {"max-pixels", required_argument, NULL, OPT_MAX_PIXELS},
    {"restart", required_argument, NULL, OPT_RESTART},
    {"restart-rows", required_argument, NULL, OPT_RESTART_ROWS},
    {"shuffle-seed", required_argument, NULL, OPT_SEED},
    {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE},
    {"label-offset", required_argument, NULL, OPT_OFFSET},
    {"class-names", required_argument, NULL, OPT_CLASSES},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"strict", no_argument, NULL, OPT_STRICT},
    {"no-fsync", no_argument, NULL, OPT_NO_FSYNC},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"plan-out", required_argument, NULL, OPT_PLAN_OUT},
    {"tasks", required_argument, NULL, OPT_TASKS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Fill cfg from argv; returns 0, 2 (usage error, message printed) or -1
 * (--help printed: exit 0). */
static int parse(int argc, char **argv, sl_convert_config *cfg, const char **classes, int *quiet,
                 convert_plan_opts *po)
{
    int from = -1, v;
    uint64_t u;
    opterr = 0;
    optind = 1;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", long_opts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'h': usage(stdout); return -1;
        case OPT_FROM:
            if (!strcmp(optarg, "folder"))
                from = SL_SOURCE_FOLDER;
            else if (!strcmp(optarg, "list"))
                from = SL_SOURCE_LIST;
            else if (!strcmp(optarg, "idx"))
                from = SL_SOURCE_IDX;
            else if (!strcmp(optarg, "tfrecord"))
                from = SL_SOURCE_TFRECORD;
            else {
                cli_error(CMD, "--from: bad value '%s' (want folder, list, idx or tfrecord)",
                          optarg);
                return 2;
            }
            break;
        case OPT_IMAGES: cfg->idx_images = optarg; break;
        case OPT_LABELS: cfg->idx_labels = optarg; break;
        case OPT_SPLIT: cfg->input_split = optarg; break;
        case OPT_OUT: cfg->out_dir = optarg; break;
        case OPT_NAME: cfg->name = optarg; break;
        case OPT_FORMAT:
            if (!strcmp(optarg, "tfrecord"))
                cfg->format = SL_FORMAT_TFRECORD;
            else if (!strcmp(optarg, "lmdb"))
                cfg->format = SL_FORMAT_LMDB;
            else if (!strcmp(optarg, "wds") || !strcmp(optarg, "webdataset"))
                cfg->format = SL_FORMAT_WDS;
            else {
                cli_error(CMD, "--format: bad value '%s' (want tfrecord, lmdb or wds)", optarg);
                return 2;
            }
            break;
        case OPT_SHARDS:
            if (cli_parse_int(CMD, "--shards", optarg, 0, 99999, &v))
                return 2;
            cfg->shards = (unsigned)v;
            break;
        case OPT_THREADS:
            if (cli_parse_int(CMD, "--threads", optarg, 0, 256, &v))
                return 2;
            cfg->threads = (unsigned)v;
            break;
        case OPT_QUALITY:
            if (cli_parse_int(CMD, "--quality", optarg, 1, 100, &cfg->quality))
                return 2;
            break;
        case OPT_RESIZE:
            if (cli_parse_int(CMD, "--resize-short", optarg, 0, 65535, &cfg->resize_short))
                return 2;
            break;
        case OPT_MAX_PIXELS:
            if (cli_parse_u64(CMD, "--max-pixels", optarg, &u))
                return 2;
            if (u == 0) {
                cli_error(CMD, "--max-pixels: bad value '%s' (want a pixel count >= 1)", optarg);
                return 2;
            }
            cfg->max_pixels = u;
            break;
        case OPT_RESTART:
            if (!strcmp(optarg, "auto"))
                cfg->restart_mcus = SL_RESTART_AUTO;
            else if (cli_parse_int(CMD, "--restart", optarg, 1, 65535, &v))
                return 2;
            else
                cfg->restart_mcus = (unsigned)v;
            break;
        case OPT_RESTART_ROWS:
            if (cli_parse_int(CMD, "--restart-rows", optarg, 1, 65535, &v))
                return 2;
            cfg->restart_rows = (unsigned)v;
            break;
        case OPT_SEED:
            if (cli_parse_u64(CMD, "--shuffle-seed", optarg, &u))
                return 2;
            cfg->shuffle_seed = u;
            break;
        case OPT_OFFSET:
            if (cli_parse_int(CMD, "--label-offset", optarg, -1000000, 1000000, &cfg->label_offset))
                return 2;
            break;
        case OPT_CLASSES: *classes = optarg; break;
        case OPT_NO_SHUFFLE: cfg->shuffle = 0; break;
        case OPT_RESUME: cfg->resume = 1; break;
        case OPT_STRICT: cfg->strict = 1; break;
        case OPT_NO_FSYNC: cfg->fsync = 0; break;
        case OPT_QUIET: *quiet = 1; break;
        case OPT_PLAN_OUT: po->plan_out = optarg; break;
        case OPT_TASKS:
            if (cli_parse_int(CMD, "--tasks", optarg, 1, 99999, &v))
                return 2;
            po->tasks = (unsigned)v;
            break;
        case ':':
            cli_error(CMD, "%s: needs a value (see sluice convert --help)", argv[optind - 1]);
            return 2;
        default:
            cli_error(CMD, "unknown option '%s' (see sluice convert --help)", argv[optind - 1]);
            return 2;
        }
    }
    int npos = argc - optind;
    if (from < 0) {
        cli_error(CMD, "--from is required: folder DIR, list FILE, idx or tfrecord PATH (see "
                  "sluice convert --help)");
        return 2;
    }
    cfg->source = (sl_source_kind)from;
    if (from == SL_SOURCE_IDX) {
        if (npos) {
            cli_error(CMD, "unexpected argument '%s' (--from idx takes --images and --labels)", argv[optind]);
            return 2;
        }
        if (!cfg->idx_images || !cfg->idx_labels) {
            cli_error(CMD, "--from idx needs --images F and --labels F");
            return 2;
        }
    } else {
        const char *what = from == SL_SOURCE_LIST       ? "list FILE"
                           : from == SL_SOURCE_TFRECORD ? "tfrecord PATH"
                                                        : "folder DIR";
        if (npos != 1) {
            if (npos)
                cli_error(CMD, "--from %s: one input expected, got %d", what, npos);
            else
                cli_error(CMD, "--from %s: the input is missing", what);
            return 2;
        }
        if (cfg->idx_images || cfg->idx_labels) {
            cli_error(CMD, "--images/--labels apply to --from idx only");
            return 2;
        }
        cfg->input = argv[optind];
    }
    if (cfg->input_split && from != SL_SOURCE_TFRECORD) {
        cli_error(CMD, "--split applies to --from tfrecord only");
        return 2;
    }
    if (!cfg->out_dir) {
        cli_error(CMD, "--out DIR is required");
        return 2;
    }
    if (!cfg->name) {
        cli_error(CMD, "--name NAME is required (the split: train, test, ...)");
        return 2;
    }
    if (cfg->restart_mcus && cfg->restart_rows) {
        cli_error(CMD, "--restart and --restart-rows: give one or the other");
        return 2;
    }
    if (po->tasks && !po->plan_out) {
        cli_error(CMD, "--tasks goes with --plan-out (cutting a plan) or --plan PLAN --task K");
        return 2;
    }
    if (cfg->format == SL_FORMAT_LMDB && cfg->shards > 1) {
        cli_error(CMD, "--shards: an LMDB split is one store; leave --shards out with --format lmdb");
        return 2;
    }
    return 0;
}

int cmd_convert(int argc, char **argv)
{
    if (convert_is_planned(argc, argv)) /* --plan PLAN: tools/cmd_convert_task.c */
        return cmd_convert_planned(argc, argv);
    sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
    const char *classes = NULL;
    int quiet = 0;
    convert_plan_opts po = {NULL, 0};
    int rc = parse(argc, argv, &cfg, &classes, &quiet, &po);
    if (rc)
        return rc < 0 ? 0 : rc;

    names_file nf = {NULL, 0};
    if (classes && names_load(classes, &nf))
        return 2;
    cfg.class_names = (const char *const *)nf.names;
    cfg.num_class_names = nf.n;

    progress p;
    progress_init(&p, quiet);
    cfg.progress = on_progress;
    cfg.progress_arg = &p;
    cfg.skipped = on_skipped;
    cfg.skipped_arg = &p;

    if (po.plan_out) {
        rc = convert_plan_out(&cfg, &po);
        names_free(&nf);
        return rc;
    }
    sl_convert_result res;
    cli_stop stop;
    cfg.cancel = cli_stop_catch(&stop);
    rc = sl_convert_run(&cfg, &res);
    int sig = cli_stop_restore(&stop);
    clear_line(&p);
    names_free(&nf);
    if (rc == SL_ECANCELED && sig) {
        cli_fail(CMD, rc);
        cli_error(CMD, "stopped by %s: run the same command with --resume to finish",
                  cli_stop_name(sig));
        return 128 + sig;
    }
    if (rc) {
        cli_fail(CMD, rc);
        return rc == SL_EIMAGE && cfg.strict ? 1 : 2;
    }

    char b[32];
    printf("converted %llu inputs -> %llu records in ", (unsigned long long)res.inputs,
           (unsigned long long)res.records);
    if (cfg.format == SL_FORMAT_LMDB)
        printf("%s/%s.lmdb", cfg.out_dir, cfg.name);
    else
        printf("%u shard%s", res.shards, res.shards == 1 ? "" : "s");
    printf(" (%s) in %.1f s; %llu skipped", cli_bytes(b, sizeof b, res.bytes), sl_now_s() - p.t0,
           (unsigned long long)res.skipped);
    if (res.shards_kept)
        printf("; %u %s kept from the interrupted run", res.shards_kept,
               res.shards_kept == 1 ? "shard" : "shards");
    printf("\n");
    if (cfg.restart_mcus || cfg.restart_rows) {
        char b2[32], b3[32];
        int64_t grow = (int64_t)res.restart_bytes_out - (int64_t)res.restart_bytes_in;
        printf("restart markers: %llu JPEGs re-written with %llu markers (%s of marker bytes), "
               "%s -> %s (%+.2f%%); %llu kept as they were\n",
               (unsigned long long)res.restarted, (unsigned long long)res.restart_markers,
               cli_bytes(b, sizeof b, 2 * res.restart_markers),
               cli_bytes(b2, sizeof b2, res.restart_bytes_in),
               cli_bytes(b3, sizeof b3, res.restart_bytes_out),
               res.restart_bytes_in ? 100.0 * (double)grow / (double)res.restart_bytes_in : 0.0,
               (unsigned long long)res.restart_kept);
    }
    return 0;
}

/*
 * tools/cmd_verify.c - `sluice verify PATH...`: read every record of a
 * dataset and check what a training run would trip over later. A thin
 * client of records.h's sl_verify_path, which does the checks (CRCs,
 * Examples, JPEG headers and sizes, label ranges, index files, dataset.json
 * counts); this file parses options, prints each problem and the summary.
 *
 * Problems go to stdout as "<file>: record N @ OFFSET: <what>" (LMDB records
 * have no offset: "<dir>: record N: <what>"); file-level ones as
 * "<file>: <what>". Exit 0 clean, 1 on a problem, 2 on bad usage or when a
 * PATH cannot be opened at all.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline_flags.h"
#include "walk_progress.h"

#define CMD "verify"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice verify PATH... [--split NAME] [--all] [--quiet] [--label-range LO:HI]\n"
            "                            [--label-key NAME]\n"
            "\n"
            "Reads every record and checks CRCs, Examples (image/encoded and\n"
            "image/class/label present), JPEG headers (and that their size matches\n"
            "image/height and image/width), shard index files (when there are; shards\n"
            "without one are noted: sluice index writes them), label ranges and the\n"
            "counts in dataset.json. PATH is a dataset directory (with dataset.json, or\n"
            "shards NAME-NNNNN-of-NNNNN with or without .tfrecord, as TensorFlow's\n"
            "ImageNet converter writes them), a quoted glob, one shard, or an LMDB store\n"
            "directory; or the same on a server: https://HOST/DIR, s3://BUCKET/PREFIX\n"
            "(sluice profile --help says which variables S3 reads). WebDataset .tar\n"
            "shards: each sample's members parse and hold an image and a .cls label\n"
            "(or the --label-key field of its .json), checked as above; problems read\n"
            "\"<file>: sample N 'KEY' @ OFFSET: <what>\". Their index is X.tar.idx, or\n"
            "DALI's X.idx. A password or signature in a URL is never printed.\n"
            "\n"
            "  --split NAME          only this split\n"
            "  --all                 go on past problems, list them all and count them\n"
            "  --quiet               no progress and no \"ok\" line; problems only\n"
            "  --label-range LO:HI   stored labels must lie in LO..HI (inclusive); the\n"
            "                        default comes from dataset.json (num_classes and\n"
            "                        label_offset), no check without it\n"
            "  --label-key NAME      WebDataset (.tar) shards: the label is the integer field\n"
            "                        NAME of each sample's .json member (default: its .cls)\n"
            "\n"
            "Prints \"ok: N records in M files\" and exits 0 when clean; otherwise prints\n"
            "\"<file>: record N @ OFFSET: <what>\" and exits 1 (at the first problem\n"
            "unless --all). Exit 2: bad usage or a PATH that cannot be opened.\n"
            "\n"
            "example:\n"
            "  sluice verify /data/fmnist --all\n"
            "  sluice verify /data/imagenet/train-00003-of-01024.tfrecord --label-range 1:1000\n");
}

/* Each problem as the library finds it: one line on stdout. */
static void on_problem(void *arg, const sl_verify_problem *p)
{
    walk_line_clear(arg);
    puts(p->message);
    fflush(stdout);
}

static int parse_range(const char *s, int64_t *lo, int64_t *hi)
{
    char *end;
    const char *colon = s ? strchr(s, ':') : NULL;
    if (!colon || colon == s || !colon[1])
        goto bad;
    *lo = strtoll(s, &end, 10);
    if (end != colon)
        goto bad;
    *hi = strtoll(colon + 1, &end, 10);
    if (*end || *lo > *hi)
        goto bad;
    return 0;
bad:
    cli_error(CMD, "--label-range: bad value '%s' (want LO:HI with LO <= HI)", s ? s : "");
    return -1;
}

int cmd_verify(int argc, char **argv)
{
    sl_verify_options o = {.problem = on_problem};
    sl_verify_result res;
    walk_line line;
    int quiet = 0;
    char **paths = calloc((size_t)argc + 1, sizeof *paths);
    int npaths = 0, rc = 0;

    if (!paths) {
        cli_error(CMD, "out of memory");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        int missing = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            goto done;
        } else if (!strcmp(a, "--all")) {
            o.all = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
        } else if ((val = cli_opt_value(argc, argv, &i, "--split", &missing))) {
            o.split = val;
        } else if ((val = cli_opt_value(argc, argv, &i, "--label-range", &missing))) {
            if (parse_range(val, &o.label_lo, &o.label_hi)) {
                rc = 2;
                goto done;
            }
            o.label_range = 1;
        } else if (!missing && (val = cli_opt_value(argc, argv, &i, "--label-key", &missing))) {
            if (!*val) {
                cli_error(CMD, "--label-key: bad value '' (want a JSON field name)");
                rc = 2;
                goto done;
            }
            o.label_key = val;
        } else if (missing) {
            cli_error(CMD, "%s needs a value", a);
            rc = 2;
            goto done;
        } else if (a[0] == '-' && a[1]) {
            cli_error(CMD, "unknown option '%s' (sluice verify --help)", a);
            rc = 2;
            goto done;
        } else if (!(paths[npaths++] = (char *)pf_redacted(CMD, argv[i]))) { /* where it enters */
            rc = 2;
            goto done;
        }
    }
    if (npaths == 0) {
        usage(stderr);
        rc = 2;
        goto done;
    }
    memset(&res, 0, sizeof res);
    walk_line_init(&line, quiet ? NULL : CMD);
    o.progress = walk_line_draw;
    o.arg = &line;
    for (int i = 0; i < npaths; i++) {
        int r = sl_verify_path(paths[i], &o, &res);
        walk_line_clear(&line);
        if (r) {
            cli_fail(CMD, r);
            rc = 2;
            goto done;
        }
        if (res.problems && !o.all)
            break;
    }
    if (res.unindexed && !quiet)
        fprintf(stderr, "verify: note: %" PRIu64 " shard%s no index file (.idx): readers scan "
                "%s each time; sluice index PATH writes them\n", res.unindexed,
                res.unindexed == 1 ? " has" : "s have", res.unindexed == 1 ? "it" : "them");
    if (res.problems == 0) {
        if (!quiet) {
            printf("ok: %" PRIu64 " records in %" PRIu64 " file%s\n", res.records, res.files,
                   res.files == 1 ? "" : "s");
            printf("%" PRIu64 " of %" PRIu64 " records carry restart markers\n",
                   res.restart_records, res.records);
        }
        rc = 0;
    } else {
        if (o.all)
            printf("%" PRIu64 " problem%s in %" PRIu64 " records in %" PRIu64 " file%s\n",
                   res.problems, res.problems == 1 ? "" : "s", res.records, res.files,
                   res.files == 1 ? "" : "s");
        rc = 1;
    }
done:
    free(paths);
    return rc;
}

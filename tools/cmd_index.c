/*
 * tools/cmd_index.c - `sluice index PATH...`: write the DALI index file
 * "<shard>.idx" of every TFRecord shard that has none (and DALI's
 * WebDataset index of every .tar shard, records/wds.h), so that readers
 * (global shuffle, the pipeline's block reads, DALI) need not scan the
 * shards each time. TensorFlow's own ImageNet shards come without them.
 *
 * A thin client of records.h: sl_dataset_resolve finds the shards (a
 * dataset directory with or without dataset.json, a glob, one shard),
 * sl_dataset_index scans each (CRCs checked) and writes its index
 * atomically. An index that does not cover its shard exactly is rewritten;
 * --force rewrites every one.
 *
 * Exit status: 0 done, 1 a shard is damaged (named with record and offset),
 * 2 usage error or a PATH that cannot be opened or written.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline_flags.h"
#include "records/bytesrc.h"
#include "records/records.h"

#define CMD "index"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice index PATH... [--split NAME] [--force] [--quiet]\n"
            "\n"
            "Writes \"<shard>.idx\" (DALI's text format: one \"offset size\" line per record)\n"
            "beside every TFRecord shard of PATH that has none, by reading the shard (CRCs\n"
            "checked); each file appears whole or not at all. Readers use the index files to\n"
            "find records without scanning: train, eval and profile scan shards that have\n"
            "none, every time. PATH is a dataset directory (with dataset.json or shards named\n"
            "NAME-NNNNN-of-NNNNN, with or without .tfrecord, as TensorFlow's ImageNet\n"
            "converter writes them), a quoted glob, or one shard.\n"
            "\n"
            "WebDataset shards (NAME-NNNNN-of-NNNNN.tar, *.tar) get \"<shard>.idx\" in DALI's\n"
            "WebDataset index format (\"v1.2 N\", then per sample \"ext offset size filename\"\n"
            "for each member, as DALI's wds2idx writes it), by reading the tar headers.\n"
            "\n"
            "  --split NAME          only this split of a directory\n"
            "  --force               rewrite every index file (default: write the missing\n"
            "                        ones and those that do not cover their shard exactly)\n"
            "  --quiet               no progress and no summary line\n"
            "\n"
            "Exit 0 done, 1 a shard is damaged (file: record N @ OFFSET: what), 2 usage or\n"
            "a PATH that cannot be opened.\n"
            "\n"
            "example:\n"
            "  sluice index /data/imagenet-tf     (train-00000-of-01024 ... validation-00127-of-00128)\n");
}

typedef struct index_ctx {
    int tty;
    const char *path;
} index_ctx;

static void on_progress(void *arg, const char *shard, size_t done, size_t total, int written)
{
    index_ctx *c = arg;
    (void)shard;
    (void)written;
    if (c->tty) {
        fprintf(stderr, "\rindex: %s: %zu/%zu shards\033[K", c->path, done, total);
        if (done == total)
            fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

int cmd_index(int argc, char **argv)
{
    const char *split = NULL, *val;
    int force = 0, quiet = 0, rc = 0, npaths = 0;
    char **paths = calloc((size_t)argc + 1, sizeof *paths);
    if (!paths) {
        cli_error(CMD, "out of memory");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int missing = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            goto done;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
        } else if ((val = cli_opt_value(argc, argv, &i, "--split", &missing))) {
            split = val;
        } else if (missing || (a[0] == '-' && a[1])) {
            cli_error(CMD, missing ? "%s needs a value" : "unknown option '%s' (sluice index --help)",
                      a);
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
    }
    for (int i = 0; i < npaths && rc == 0; i++) {
        const char *a = paths[i];
        sl_dataset ds;
        size_t written = 0, kept = 0;
        index_ctx c = {.tty = !quiet && cli_stderr_tty(), .path = a};
        int remote = sl_path_is_remote(a); /* refused before any request */
        int r = remote ? SL_ENOTSUP : sl_dataset_resolve(a, split, &ds);
        if (remote) {
            memset(&ds, 0, sizeof ds);
            cli_error(CMD, "%s: index files are written beside the shards, and remote data is "
                      "read-only here: index the shards before uploading them (sluice convert "
                      "writes them too)", a);
            rc = 2;
        } else if (r) {
            rc = cli_fail(CMD, r);
        } else if ((r = sl_dataset_index(&ds, force, on_progress, &c, &written, &kept))) {
            if (c.tty)
                fputs("\r\033[K", stderr);
            cli_fail(CMD, r);
            rc = r == SL_ECORRUPT ? 1 : 2;
        } else if (!quiet) {
            printf("index: %s: wrote %zu index file%s, %zu already up to date\n", a, written,
                   written == 1 ? "" : "s", kept);
            /* a second read of the records (the index scan reads framing only) */
            uint64_t nrec = 0, with = 0;
            if ((r = sl_dataset_count_restarts(&ds, &nrec, &with)) == SL_OK) {
                printf("index: %s: %" PRIu64 " of %" PRIu64 " records indexed carry restart "
                       "markers\n", a, with, nrec);
            } else {
                cli_fail(CMD, r);
                rc = r == SL_ECORRUPT ? 1 : 2;
            }
        }
        sl_dataset_fini(&ds);
    }
done:
    free(paths);
    return rc;
}

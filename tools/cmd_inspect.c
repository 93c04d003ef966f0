/*
 * tools/cmd_inspect.c - `sluice inspect PATH`: what is in a dataset. A thin
 * client of records.h's sl_dataset_inspect, which reads every record once
 * (CRCs checked by the reader) and counts per split and in total: records,
 * shards, payload bytes, the label histogram, image width/height
 * min/mean/max, the image/format values seen; this file prints them as a
 * table (with class names from dataset.json and a warning when its counts
 * differ from what was read) or, with --json, sl_inspect_json's document.
 * A corrupt record stops it with exit 2 and a message naming file, record
 * and offset; `sluice verify` is the thorough check.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline_flags.h"
#include "walk_progress.h"

#define CMD "inspect"
/* Label tables longer than this are summarized in the human output. */
#define MAX_LABEL_ROWS 40

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice inspect PATH [--split NAME] [--label-key NAME] [--json]\n"
            "\n"
            "Reads every record and shows per split and in total: records, shards,\n"
            "payload bytes, mean record size, the label histogram (with class names\n"
            "from dataset.json), image width/height min/mean/max and the formats seen,\n"
            "and warns when dataset.json's counts differ from what is on disk.\n"
            "PATH is a dataset directory, a directory of *.tfrecord files, one\n"
            ".tfrecord file, WebDataset .tar shards, or an LMDB store directory; or\n"
            "the same on a server: https://HOST/DIR, s3://BUCKET/PREFIX, a glob on\n"
            "s3:// ('s3://B/P/*.tar'), a presigned URL (a password or signature in a\n"
            "URL is never printed). Compressed shards (.tar.gz ...) are refused by name.\n"
            "\n"
            "  --split NAME       only this split\n"
            "  --label-key NAME   WebDataset (.tar) shards: the label is the integer field\n"
            "                     NAME of each sample's .json member   (default: its .cls)\n"
            "  --json             one JSON object on stdout instead of the table\n"
            "\n"
            "Exit 0 when every record was read; 2 on a corrupt record (file, record\n"
            "and offset named), a missing PATH or bad usage.\n"
            "\n"
            "example:\n"
            "  sluice inspect /data/fmnist\n"
            "  sluice inspect /data/fmnist --split test --json | jq .splits.test.labels\n");
}

/* ---------------------------------------------------------------- output */

static double mean_of(const sl_inspect_dim *d) { return d->n ? d->sum / (double)d->n : 0.0; }

static const char *class_name(const sl_dataset *ds, int64_t label)
{
    const sl_manifest *m = &ds->manifest;
    int64_t k = label - m->label_offset;
    if (!m->class_names || k < 0 || k >= (int64_t)m->num_classes)
        return NULL;
    return m->class_names[k];
}

static void print_labels(const sl_dataset *ds, const sl_inspect_stats *s)
{
    if (s->nlabels == 0)
        return;
    if (s->nlabels > MAX_LABEL_ROWS) {
        size_t lo = 0, hi = 0;
        for (size_t i = 1; i < s->nlabels; i++) {
            if (s->label_counts[i] < s->label_counts[lo])
                lo = i;
            if (s->label_counts[i] > s->label_counts[hi])
                hi = i;
        }
        printf("  labels: %zu distinct, %" PRId64 "..%" PRId64 "; fewest %" PRIu64
               " (label %" PRId64 "), most %" PRIu64 " (label %" PRId64 "); --json lists all\n",
               s->nlabels, s->labels[0], s->labels[s->nlabels - 1], s->label_counts[lo], s->labels[lo], s->label_counts[hi],
               s->labels[hi]);
        return;
    }
    printf("  labels: %zu distinct\n", s->nlabels);
    int named = ds->manifest.class_names != NULL;
    for (size_t i = 0; i < s->nlabels; i++) {
        const char *name = class_name(ds, s->labels[i]);
        printf("    %6" PRId64 "  ", s->labels[i]);
        if (named)
            printf("%-24s ", name ? name : "?");
        printf("%10" PRIu64 "  %5.1f%%\n", s->label_counts[i],
               100.0 * (double)s->label_counts[i] / (double)(s->records ? s->records : 1));
    }
}

static void print_block(const sl_dataset *ds, const char *title, const char *fmt,
                        const sl_inspect_stats *s)
{
    char b1[32], b2[32];
    printf("%s: %" PRIu64 " records in %" PRIu64 " %s%s, %s payload, mean %s/record\n", title,
           s->records, s->files, fmt && !strcmp(fmt, "lmdb") ? "store" : "shard",
           s->files == 1 ? "" : "s", cli_bytes(b1, sizeof b1, s->bytes),
           cli_bytes(b2, sizeof b2, s->records ? s->bytes / s->records : 0));
    if (s->width.n)
        printf("  image width %" PRId64 "..%" PRId64 " (mean %.1f), height %" PRId64 "..%" PRId64
               " (mean %.1f)\n",
               s->width.min, s->width.max, mean_of(&s->width), s->height.min, s->height.max, mean_of(&s->height));
    if (s->unknown_size)
        printf("  %" PRIu64 " image%s of unknown size\n", s->unknown_size, s->unknown_size == 1 ? "" : "s");
    if (s->records)
        printf("  restart markers: %" PRIu64 " of %" PRIu64 " records (sluice convert --restart)\n",
               s->restart, s->records);
    if (s->records) {
        printf("  formats:");
        for (size_t i = 0; i <= SL_INSPECT_MAX_FORMATS; i++)
            if (s->formats[i].n)
                printf(" %s %" PRIu64, s->formats[i].name, s->formats[i].n);
        putchar('\n');
    }
    print_labels(ds, s);
}

static void print_human(const sl_dataset *ds, const sl_inspect_result *r)
{
    char warn[2048];
    printf("%s", ds->path);
    if (ds->classes_path) {
        const char *b = strrchr(ds->classes_path, '/');
        printf(" (%s: %" PRIu32 " classes", b ? b + 1 : ds->classes_path,
               ds->manifest.num_classes);
        if (ds->manifest.label_offset)
            printf(", label offset %" PRId64, ds->manifest.label_offset);
        printf(")");
    }
    printf("\n\n");
    for (size_t i = 0; i < ds->nsplits; i++) {
        sl_format f = ds->splits[i].format;
        const char *fmt = f == SL_FORMAT_LMDB ? "lmdb" : f == SL_FORMAT_WDS ? "wds" : "tfrecord";
        char title[96];
        snprintf(title, sizeof title, "%s [%s]", ds->splits[i].name, fmt);
        print_block(ds, title, fmt, &r->splits[i]);
        putchar('\n');
    }
    if (ds->nsplits > 1) {
        print_block(ds, "total", NULL, &r->total);
        putchar('\n');
    }
    for (size_t i = 0; i < ds->nsplits; i++)
        if (sl_inspect_warnings(ds, i, &r->splits[i], warn, sizeof warn))
            for (char *line = strtok(warn, "\n"); line; line = strtok(NULL, "\n"))
                printf("warning: %s\n", line);
    for (size_t i = 0; i < ds->nsplits; i++)
        if (ds->splits[i].unindexed)
            printf("note: %zu of %zu shards of %s have no index file (.idx): readers scan them; "
                   "sluice index writes them\n", ds->splits[i].unindexed, ds->splits[i].nfiles,
                   ds->splits[i].name);
}

/* ------------------------------------------------------------------ main */

/* The library's message less its "sl_dataset_inspect: " (the command's own
 * name leads the line). */
static const char *without_fn(const char *msg)
{
    static const char fn[] = "sl_dataset_inspect: ";
    return strncmp(msg, fn, sizeof fn - 1) ? msg : msg + sizeof fn - 1;
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL, *split = NULL, *label_key = NULL;
    int json = 0, rc = 0;
    sl_dataset ds;
    sl_inspect_result res = {0};
    walk_line line;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        int missing = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if ((val = cli_opt_value(argc, argv, &i, "--split", &missing))) {
            split = val;
        } else if (!missing && (val = cli_opt_value(argc, argv, &i, "--label-key", &missing))) {
            if (!*val) {
                cli_error(CMD, "--label-key: bad value '' (want a JSON field name)");
                return 2;
            }
            label_key = val;
        } else if (missing) {
            cli_error(CMD, "%s needs a value", a);
            return 2;
        } else if (a[0] == '-' && a[1]) {
            cli_error(CMD, "unknown option '%s' (sluice inspect --help)", a);
            return 2;
        } else if (path) {
            const char *b = pf_redacted(CMD, a);
            if (b)
                cli_error(CMD, "one PATH at a time ('%s' and '%s')", path, b);
            return 2;
        } else if (!(path = pf_redacted(CMD, a))) { /* where the path enters */
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }

    if ((rc = sl_dataset_resolve(path, split, &ds))) {
        rc = cli_fail(CMD, rc);
        goto out;
    }
    ds.label_key = label_key;
    walk_line_init(&line, CMD);
    rc = sl_dataset_inspect(&ds, walk_line_draw, &line, &res);
    walk_line_clear(&line);
    if (rc) {
        const char *m = sl_errmsg();
        cli_error(CMD, "%s", m[0] ? without_fn(m) : sl_strerror(rc));
        rc = 2;
        goto out;
    }
    if (json) {
        char *text = sl_inspect_json(&ds, &res);
        if (!text) {
            cli_error(CMD, "out of memory");
            rc = 2;
            goto out;
        }
        puts(text);
        free(text);
    } else {
        print_human(&ds, &res);
    }
out:
    sl_inspect_result_fini(&res);
    sl_dataset_fini(&ds);
    return rc;
}

/*
 * tools/cmd_inspect.c - `sluice inspect PATH`: what is in a dataset.
 *
 * Reads every record once (CRCs checked by the reader) and reports per split
 * and in total: records, shards, payload bytes, mean record size, the label
 * histogram (with class names from dataset.json), image width/height
 * min/mean/max (from image/width and image/height, or the JPEG header when
 * those are absent), the image/format values seen, and a warning when
 * dataset.json's counts differ from what was read. --json prints the same as
 * one JSON object. A corrupt record stops it with exit 2 and a message naming
 * file, record and offset; `sluice verify` is the thorough check.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "dataset_walk.h"

#define CMD "inspect"
/* Label tables longer than this are summarized in the human output. */
#define MAX_LABEL_ROWS 40
#define MAX_FORMATS 8
/* Callback result that stops the walk after a message was printed. */
#define INSPECT_STOP 1000

typedef struct label_hist {
    int64_t *label; /* sorted ascending */
    uint64_t *count;
    size_t n, cap;
} label_hist;

typedef struct dim_stat {
    int64_t min, max;
    double sum;
    uint64_t n;
} dim_stat;

typedef struct split_stats {
    uint64_t records, bytes, files;
    label_hist labels;
    dim_stat w, h;
    uint64_t no_size; /* records whose image size could not be read */
    struct {
        char name[24];
        uint64_t n;
    } fmt[MAX_FORMATS + 1]; /* the last slot collects "other" */
    size_t nfmt;
} split_stats;

typedef struct inspect_ctx {
    const sl_dataset *ds;
    split_stats *st; /* per split */
} inspect_ctx;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice inspect PATH [--split NAME] [--json]\n"
            "\n"
            "Reads every record and shows per split and in total: records, shards,\n"
            "payload bytes, mean record size, the label histogram (with class names\n"
            "from dataset.json), image width/height min/mean/max and the formats seen,\n"
            "and warns when dataset.json's counts differ from what is on disk.\n"
            "PATH is a dataset directory, a directory of *.tfrecord files, one\n"
            ".tfrecord file, or an LMDB store directory.\n"
            "\n"
            "  --split NAME   only this split\n"
            "  --json         one JSON object on stdout instead of the table\n"
            "\n"
            "Exit 0 when every record was read; 2 on a corrupt record (file, record\n"
            "and offset named), a missing PATH or bad usage.\n"
            "\n"
            "example:\n"
            "  sluice inspect /data/fmnist\n"
            "  sluice inspect /data/fmnist --split test --json | jq .splits.test.labels\n");
}

/* ------------------------------------------------------------- statistics */

static int hist_add(label_hist *h, int64_t label, uint64_t count)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->label[mid] < label)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < h->n && h->label[lo] == label) {
        h->count[lo] += count;
        return 0;
    }
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        int64_t *l = realloc(h->label, cap * sizeof *l);
        if (!l)
            return -1;
        h->label = l;
        uint64_t *c = realloc(h->count, cap * sizeof *c);
        if (!c)
            return -1;
        h->count = c;
        h->cap = cap;
    }
    memmove(h->label + lo + 1, h->label + lo, (h->n - lo) * sizeof *h->label);
    memmove(h->count + lo + 1, h->count + lo, (h->n - lo) * sizeof *h->count);
    h->label[lo] = label;
    h->count[lo] = count;
    h->n++;
    return 0;
}

static void dim_add(dim_stat *d, int64_t v)
{
    if (d->n == 0 || v < d->min)
        d->min = v;
    if (d->n == 0 || v > d->max)
        d->max = v;
    d->sum += (double)v;
    d->n++;
}

static void dim_merge(dim_stat *d, const dim_stat *s)
{
    if (s->n == 0)
        return;
    if (d->n == 0 || s->min < d->min)
        d->min = s->min;
    if (d->n == 0 || s->max > d->max)
        d->max = s->max;
    d->sum += s->sum;
    d->n += s->n;
}

static void fmt_add(split_stats *s, const char *name, size_t len, uint64_t n)
{
    char buf[sizeof s->fmt[0].name];
    snprintf(buf, sizeof buf, "%.*s", (int)len, name);
    for (size_t i = 0; i < s->nfmt; i++)
        if (!strcmp(s->fmt[i].name, buf)) {
            s->fmt[i].n += n;
            return;
        }
    if (s->nfmt < MAX_FORMATS) {
        snprintf(s->fmt[s->nfmt].name, sizeof buf, "%s", buf);
        s->fmt[s->nfmt++].n = n;
        return;
    }
    snprintf(s->fmt[MAX_FORMATS].name, sizeof buf, "other");
    s->fmt[MAX_FORMATS].n += n;
}

static int merge_into(split_stats *t, const split_stats *s)
{
    t->records += s->records;
    t->bytes += s->bytes;
    t->files += s->files;
    t->no_size += s->no_size;
    dim_merge(&t->w, &s->w);
    dim_merge(&t->h, &s->h);
    for (size_t i = 0; i <= MAX_FORMATS; i++)
        if (s->fmt[i].n)
            fmt_add(t, s->fmt[i].name, strlen(s->fmt[i].name), s->fmt[i].n);
    for (size_t i = 0; i < s->labels.n; i++)
        if (hist_add(&t->labels, s->labels.label[i], s->labels.count[i]))
            return -1;
    return 0;
}

static void stats_fini(split_stats *s)
{
    free(s->labels.label);
    free(s->labels.count);
}

/* -------------------------------------------------------------- the walk */

static int on_record(void *arg, const dw_record *r)
{
    inspect_ctx *c = arg;
    split_stats *s = &c->st[r->split - c->ds->splits];
    sl_image_example ex;

    if (sl_image_example_decode(r->data, r->len, &ex)) {
        if (r->offset == DW_NO_OFFSET)
            cli_error(CMD, "%s: record %" PRIu64 ": bad Example: %s", r->file, r->recno,
                      dw_detail(sl_errmsg(), NULL));
        else
            cli_error(CMD, "%s: record %" PRIu64 " @ %" PRIu64 ": bad Example: %s", r->file,
                      r->recno, r->offset, dw_detail(sl_errmsg(), NULL));
        return INSPECT_STOP;
    }
    s->records++;
    s->bytes += r->len;
    if (hist_add(&s->labels, ex.label, 1)) {
        cli_error(CMD, "out of memory");
        return INSPECT_STOP;
    }
    int64_t w = ex.width, h = ex.height;
    if (w <= 0 || h <= 0) {
        sl_image_info info;
        if (sl_image_probe(ex.image, ex.image_len, &info) == SL_OK) {
            w = w > 0 ? w : info.width;
            h = h > 0 ? h : info.height;
        }
    }
    if (w > 0 && h > 0) {
        dim_add(&s->w, w);
        dim_add(&s->h, h);
    } else {
        s->no_size++;
    }
    if (ex.format && ex.format_len)
        fmt_add(s, ex.format, ex.format_len, 1);
    else
        fmt_add(s, "(none)", 6, 1);
    return 0;
}

static int on_file_error(void *arg, const dw_record *at, int rc, const char *what)
{
    (void)arg;
    (void)rc;
    if (at->recno == DW_NO_RECORD)
        cli_error(CMD, "%s: cannot open: %s", at->file, what);
    else if (at->offset == DW_NO_OFFSET)
        cli_error(CMD, "%s: record %" PRIu64 ": %s", at->file, at->recno, what);
    else
        cli_error(CMD, "%s: record %" PRIu64 " @ %" PRIu64 ": %s", at->file, at->recno,
                  at->offset, what);
    return INSPECT_STOP;
}

static int on_file_end(void *arg, const sl_dataset_split *s, const char *file, uint64_t n, int clean)
{
    inspect_ctx *c = arg;
    (void)file;
    (void)n;
    (void)clean;
    c->st[s - c->ds->splits].files++;
    return 0;
}

/* ---------------------------------------------------------------- output */

static const char *class_name(const sl_dataset *ds, int64_t label)
{
    const sl_manifest *m = &ds->manifest;
    int64_t k = label - m->label_offset;
    if (!ds->has_manifest || !m->class_names || k < 0 || k >= (int64_t)m->num_classes)
        return NULL;
    return m->class_names[k];
}

static double mean_of(const dim_stat *d) { return d->n ? d->sum / (double)d->n : 0.0; }

/* Mismatch warnings of split i into warn (one per line), count returned. */
static int listed_warnings(const sl_dataset *ds, size_t i, const split_stats *s, char *warn,
                           size_t cap)
{
    const sl_manifest_split *m = ds->splits[i].listed;
    size_t len = 0;
    int n = 0;
    warn[0] = '\0';
    if (!ds->counts_listed || !m)
        return 0;
#define WARN(...)                                                                              \
    do {                                                                                       \
        if (len < cap)                                                                         \
            len += (size_t)snprintf(warn + len, cap - len, __VA_ARGS__);                       \
        n++;                                                                                   \
    } while (0)
    if (m->records != s->records)
        WARN("%s: split %s: dataset.json says %" PRIu64 " records, found %" PRIu64 "\n",
             ds->path, ds->splits[i].name, m->records, s->records);
    if (m->shards != s->files)
        WARN("%s: split %s: dataset.json says %" PRIu32 " shards, found %" PRIu64 "\n",
             ds->path, ds->splits[i].name, m->shards, s->files);
    if (m->bytes != s->bytes)
        WARN("%s: split %s: dataset.json says %" PRIu64 " payload bytes, found %" PRIu64 "\n",
             ds->path, ds->splits[i].name, m->bytes, s->bytes);
#undef WARN
    return n;
}

static cJSON *json_dim(const dim_stat *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "min", d->n ? (double)d->min : 0);
    cJSON_AddNumberToObject(o, "max", d->n ? (double)d->max : 0);
    cJSON_AddNumberToObject(o, "mean", mean_of(d));
    return o;
}

/* Fill o with the members shared by a split and the total. */
static void json_stats(cJSON *o, const split_stats *s)
{
    char key[32];
    cJSON_AddNumberToObject(o, "records", (double)s->records);
    cJSON_AddNumberToObject(o, "shards", (double)s->files);
    cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(o, "mean_record_bytes",
                            s->records ? (double)s->bytes / (double)s->records : 0);
    cJSON *labels = cJSON_AddObjectToObject(o, "labels");
    for (size_t i = 0; i < s->labels.n; i++) {
        snprintf(key, sizeof key, "%" PRId64, s->labels.label[i]);
        cJSON_AddNumberToObject(labels, key, (double)s->labels.count[i]);
    }
    cJSON_AddItemToObject(o, "width", json_dim(&s->w));
    cJSON_AddItemToObject(o, "height", json_dim(&s->h));
    cJSON *fmts = cJSON_AddObjectToObject(o, "formats");
    for (size_t i = 0; i <= MAX_FORMATS; i++)
        if (s->fmt[i].n)
            cJSON_AddNumberToObject(fmts, s->fmt[i].name, (double)s->fmt[i].n);
    if (s->no_size)
        cJSON_AddNumberToObject(o, "unknown_size", (double)s->no_size);
}

static int print_json(const sl_dataset *ds, const split_stats *st, const split_stats *total)
{
    char warn[2048];
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return -1;
    cJSON_AddStringToObject(root, "path", ds->path);
    json_stats(root, total);
    if (ds->has_manifest) {
        cJSON_AddNumberToObject(root, "num_classes", ds->manifest.num_classes);
        cJSON_AddNumberToObject(root, "label_offset", (double)ds->manifest.label_offset);
        if (ds->manifest.class_names)
            cJSON_AddItemToObject(root, "class_names",
                                  cJSON_CreateStringArray((const char *const *)ds->manifest
                                                              .class_names,
                                                          (int)ds->manifest.num_classes));
    }
    cJSON *splits = cJSON_AddObjectToObject(root, "splits");
    cJSON *warnings = cJSON_AddArrayToObject(root, "warnings");
    for (size_t i = 0; i < ds->nsplits; i++) {
        cJSON *o = cJSON_AddObjectToObject(splits, ds->splits[i].name);
        cJSON_AddStringToObject(o, "format",
                                ds->splits[i].format == SL_FORMAT_LMDB ? "lmdb" : "tfrecord");
        cJSON_AddNumberToObject(o, "shards_without_index", (double)ds->splits[i].unindexed);
        json_stats(o, &st[i]);
        const sl_manifest_split *m = ds->splits[i].listed;
        if (m && ds->counts_listed) {
            cJSON *l = cJSON_AddObjectToObject(o, "listed");
            cJSON_AddNumberToObject(l, "records", (double)m->records);
            cJSON_AddNumberToObject(l, "shards", m->shards);
            cJSON_AddNumberToObject(l, "bytes", (double)m->bytes);
        }
        if (listed_warnings(ds, i, &st[i], warn, sizeof warn)) {
            for (char *line = strtok(warn, "\n"); line; line = strtok(NULL, "\n"))
                cJSON_AddItemToArray(warnings, cJSON_CreateString(line));
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return -1;
    puts(text);
    cJSON_free(text);
    return 0;
}

static void print_labels(const sl_dataset *ds, const split_stats *s)
{
    const label_hist *h = &s->labels;
    if (h->n == 0)
        return;
    if (h->n > MAX_LABEL_ROWS) {
        size_t lo = 0, hi = 0;
        for (size_t i = 1; i < h->n; i++) {
            if (h->count[i] < h->count[lo])
                lo = i;
            if (h->count[i] > h->count[hi])
                hi = i;
        }
        printf("  labels: %zu distinct, %" PRId64 "..%" PRId64 "; fewest %" PRIu64
               " (label %" PRId64 "), most %" PRIu64 " (label %" PRId64 "); --json lists all\n",
               h->n, h->label[0], h->label[h->n - 1], h->count[lo], h->label[lo], h->count[hi],
               h->label[hi]);
        return;
    }
    printf("  labels: %zu distinct\n", h->n);
    int named = ds->has_manifest && ds->manifest.class_names;
    for (size_t i = 0; i < h->n; i++) {
        const char *name = class_name(ds, h->label[i]);
        printf("    %6" PRId64 "  ", h->label[i]);
        if (named)
            printf("%-24s ", name ? name : "?");
        printf("%10" PRIu64 "  %5.1f%%\n", h->count[i],
               100.0 * (double)h->count[i] / (double)(s->records ? s->records : 1));
    }
}

static void print_block(const sl_dataset *ds, const char *title, const char *fmt,
                        const split_stats *s)
{
    char b1[32], b2[32];
    printf("%s: %" PRIu64 " records in %" PRIu64 " %s%s, %s payload, mean %s/record\n", title,
           s->records, s->files, fmt && !strcmp(fmt, "lmdb") ? "store" : "shard",
           s->files == 1 ? "" : "s", cli_bytes(b1, sizeof b1, s->bytes),
           cli_bytes(b2, sizeof b2, s->records ? s->bytes / s->records : 0));
    if (s->w.n)
        printf("  image width %" PRId64 "..%" PRId64 " (mean %.1f), height %" PRId64 "..%" PRId64
               " (mean %.1f)\n",
               s->w.min, s->w.max, mean_of(&s->w), s->h.min, s->h.max, mean_of(&s->h));
    if (s->no_size)
        printf("  %" PRIu64 " image%s of unknown size\n", s->no_size, s->no_size == 1 ? "" : "s");
    if (s->records) {
        printf("  formats:");
        for (size_t i = 0; i <= MAX_FORMATS; i++)
            if (s->fmt[i].n)
                printf(" %s %" PRIu64, s->fmt[i].name, s->fmt[i].n);
        putchar('\n');
    }
    print_labels(ds, s);
}

static void print_human(const sl_dataset *ds, const split_stats *st, const split_stats *total)
{
    char warn[2048];
    printf("%s", ds->path);
    if (ds->has_manifest) {
        printf(" (dataset.json: %" PRIu32 " classes", ds->manifest.num_classes);
        if (ds->manifest.label_offset)
            printf(", label offset %" PRId64, ds->manifest.label_offset);
        printf(")");
    }
    printf("\n\n");
    for (size_t i = 0; i < ds->nsplits; i++) {
        const char *fmt = ds->splits[i].format == SL_FORMAT_LMDB ? "lmdb" : "tfrecord";
        char title[96];
        snprintf(title, sizeof title, "%s [%s]", ds->splits[i].name, fmt);
        print_block(ds, title, fmt, &st[i]);
        putchar('\n');
    }
    if (ds->nsplits > 1) {
        print_block(ds, "total", NULL, total);
        putchar('\n');
    }
    for (size_t i = 0; i < ds->nsplits; i++)
        if (listed_warnings(ds, i, &st[i], warn, sizeof warn))
            for (char *line = strtok(warn, "\n"); line; line = strtok(NULL, "\n"))
                printf("warning: %s\n", line);
    for (size_t i = 0; i < ds->nsplits; i++)
        if (ds->splits[i].unindexed)
            printf("note: %zu of %zu shards of %s have no index file (.idx): readers scan them; "
                   "sluice index writes them\n", ds->splits[i].unindexed, ds->splits[i].nfiles,
                   ds->splits[i].name);
}

/* ------------------------------------------------------------------ main */

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL, *split = NULL;
    int json = 0, rc = 0;
    sl_dataset ds;
    split_stats total = {0};
    inspect_ctx c = {0};

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
        } else if (missing) {
            cli_error(CMD, "--split needs a value");
            return 2;
        } else if (a[0] == '-' && a[1]) {
            cli_error(CMD, "unknown option '%s' (sluice inspect --help)", a);
            return 2;
        } else if (path) {
            cli_error(CMD, "one PATH at a time ('%s' and '%s')", path, a);
            return 2;
        } else {
            path = a;
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
    c.ds = &ds;
    if (!(c.st = calloc(ds.nsplits ? ds.nsplits : 1, sizeof *c.st))) {
        cli_error(CMD, "out of memory");
        rc = 2;
        goto out;
    }
    dw_visitor v = {
        .record = on_record,
        .file_error = on_file_error,
        .file_end = on_file_end,
        .arg = &c,
        .progress = "inspect",
    };
    if ((rc = dw_walk(&ds, &v))) {
        if (rc != INSPECT_STOP)
            cli_fail(CMD, rc);
        rc = 2;
        goto out;
    }
    for (size_t i = 0; i < ds.nsplits; i++)
        if (merge_into(&total, &c.st[i])) {
            cli_error(CMD, "out of memory");
            rc = 2;
            goto out;
        }
    if (json) {
        if (print_json(&ds, c.st, &total)) {
            cli_error(CMD, "out of memory");
            rc = 2;
        }
    } else {
        print_human(&ds, c.st, &total);
    }
out:
    if (c.st)
        for (size_t i = 0; i < ds.nsplits; i++)
            stats_fini(&c.st[i]);
    free(c.st);
    stats_fini(&total);
    sl_dataset_fini(&ds);
    return rc;
}

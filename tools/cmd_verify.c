/*
 * tools/cmd_verify.c - `sluice verify PATH...`: read every record of a
 * dataset and check what a training run would trip over later.
 *
 * Per record: both TFRecord CRCs (the reader checks them), the Example
 * (image/encoded and image/class/label present, protobuf well formed), the
 * image header (a JPEG the pipeline can decode, its size equal to
 * image/height x image/width when those are set), the label range (from
 * dataset.json's num_classes and label_offset, or --label-range). Per shard:
 * its DALI index file, when it has one, lists exactly the offsets and sizes
 * read (shards without one, as TensorFlow writes them, are noted once).
 * Per split: the counts in dataset.json match what was read.
 *
 * Problems go to stdout as "<file>: record N @ OFFSET: <what>" (LMDB records
 * have no offset: "<dir>: record N: <what>"); file-level ones as
 * "<file>: <what>". Exit 0 clean, 1 on a problem, 2 on bad usage or when a
 * PATH cannot be opened at all.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dataset_walk.h"

#define CMD "verify"
/* Callback result that stops the walk at the first problem (not a status). */
#define VERIFY_STOP 1000

typedef struct split_count {
    uint64_t records, bytes, files;
    int incomplete; /* a file could not be read to its end */
} split_count;

typedef struct verify_ctx {
    int all, quiet;
    int range_given;     /* --label-range */
    int64_t lo, hi;      /* allowed stored labels, inclusive, when range_on */
    int range_on;
    const sl_dataset *ds;
    split_count *counts; /* per split of ds */
    uint64_t problems, records, files;
    uint64_t unindexed;  /* shards without an index file */
    /* The shard being read: its index file, loaded at file_begin. */
    char *idx_path;
    sl_index_entry *idx;
    size_t nidx;
    int idx_checked; /* idx loaded: compare entries with what is read */
} verify_ctx;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice verify PATH... [--split NAME] [--all] [--quiet] [--label-range LO:HI]\n"
            "\n"
            "Reads every record and checks CRCs, Examples (image/encoded and\n"
            "image/class/label present), JPEG headers (and that their size matches\n"
            "image/height and image/width), shard index files (when there are; shards\n"
            "without one are noted: sluice index writes them), label ranges and the\n"
            "counts in dataset.json. PATH is a dataset directory (with dataset.json, or\n"
            "shards NAME-NNNNN-of-NNNNN with or without .tfrecord, as TensorFlow's\n"
            "ImageNet converter writes them), a quoted glob, one shard, or an LMDB store\n"
            "directory.\n"
            "\n"
            "  --split NAME          only this split\n"
            "  --all                 go on past problems, list them all and count them\n"
            "  --quiet               no progress and no \"ok\" line; problems only\n"
            "  --label-range LO:HI   stored labels must lie in LO..HI (inclusive); the\n"
            "                        default comes from dataset.json (num_classes and\n"
            "                        label_offset), no check without it\n"
            "\n"
            "Prints \"ok: N records in M files\" and exits 0 when clean; otherwise prints\n"
            "\"<file>: record N @ OFFSET: <what>\" and exits 1 (at the first problem\n"
            "unless --all). Exit 2: bad usage or a PATH that cannot be opened.\n"
            "\n"
            "example:\n"
            "  sluice verify /data/fmnist --all\n"
            "  sluice verify /data/imagenet/train-00003-of-01024.tfrecord --label-range 1:1000\n");
}

static int problem_at(verify_ctx *c, const char *file, uint64_t recno, uint64_t offset,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Print one problem; VERIFY_STOP unless --all. recno DW_NO_RECORD: about the
 * file itself. */
static int problem_at(verify_ctx *c, const char *file, uint64_t recno, uint64_t offset,
                      const char *fmt, ...)
{
    va_list ap;
    c->problems++;
    if (recno == DW_NO_RECORD)
        printf("%s: ", file);
    else if (offset == DW_NO_OFFSET)
        printf("%s: record %" PRIu64 ": ", file, recno);
    else
        printf("%s: record %" PRIu64 " @ %" PRIu64 ": ", file, recno, offset);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    return c->all ? 0 : VERIFY_STOP;
}

static const char *type_name(sl_image_type t)
{
    switch (t) {
    case SL_IMAGE_JPEG: return "JPEG";
    case SL_IMAGE_PNG: return "PNG";
    case SL_IMAGE_BMP: return "BMP";
    case SL_IMAGE_PPM: return "PPM";
    default: return "unknown";
    }
}

static void drop_index(verify_ctx *c)
{
    free(c->idx);
    free(c->idx_path);
    c->idx = NULL;
    c->idx_path = NULL;
    c->nidx = 0;
    c->idx_checked = 0;
}

static int on_file_begin(void *arg, const sl_dataset_split *s, const char *file)
{
    verify_ctx *c = arg;
    drop_index(c);
    /* A missing shard is reported by the walk; its index is beside the point. */
    if (s->format != SL_FORMAT_TFRECORD || access(file, F_OK) != 0)
        return 0;
    if (asprintf(&c->idx_path, "%s.idx", file) < 0) {
        c->idx_path = NULL;
        return sl_fail(SL_ENOMEM, "verify: out of memory");
    }
    if (access(c->idx_path, F_OK) != 0) {
        /* Not a problem: shards from other tools (TensorFlow's ImageNet
         * converter) have none, and readers scan them; said once at the end. */
        c->unindexed++;
        return 0;
    }
    int rc = sl_index_load(c->idx_path, &c->idx, &c->nidx);
    if (rc)
        return problem_at(c, c->idx_path, DW_NO_RECORD, 0, "bad index file: %s",
                          dw_detail(sl_errmsg(), c->idx_path));
    c->idx_checked = 1;
    return 0;
}

static int check_index(verify_ctx *c, const dw_record *r)
{
    uint64_t size = SL_TFRECORD_OVERHEAD + (uint64_t)r->len;
    if (r->recno >= c->nidx) {
        c->idx_checked = 0; /* one complaint per index file */
        return problem_at(c, r->file, r->recno, r->offset,
                          "missing from index file %s (it has %zu entries)", c->idx_path,
                          c->nidx);
    }
    const sl_index_entry *e = &c->idx[r->recno];
    if (e->offset != r->offset || e->size != size) {
        c->idx_checked = 0;
        return problem_at(c, r->file, r->recno, r->offset,
                          "index file %s says offset %" PRIu64 " size %" PRIu64
                          ", the record has size %" PRIu64,
                          c->idx_path, e->offset, e->size, size);
    }
    return 0;
}

static int on_record(void *arg, const dw_record *r)
{
    verify_ctx *c = arg;
    sl_image_example ex;
    sl_image_info info;
    int rc;

    c->records++;
    split_count *sc = &c->counts[r->split - c->ds->splits];
    sc->records++;
    sc->bytes += r->len;

    if (c->idx_checked && (rc = check_index(c, r)))
        return rc;
    if (sl_image_example_decode(r->data, r->len, &ex))
        return problem_at(c, r->file, r->recno, r->offset, "bad Example: %s",
                          dw_detail(sl_errmsg(), NULL));
    if (sl_image_probe(ex.image, ex.image_len, &info))
        return problem_at(c, r->file, r->recno, r->offset, "image/encoded: %s",
                          dw_detail(sl_errmsg(), NULL));
    if (info.type != SL_IMAGE_JPEG)
        return problem_at(c, r->file, r->recno, r->offset,
                          "image/encoded is %s, not JPEG (%zu bytes)", type_name(info.type),
                          ex.image_len);
    if (sl_jpeg_scan(ex.image, ex.image_len))
        return problem_at(c, r->file, r->recno, r->offset, "image/encoded: %s",
                          dw_detail(sl_errmsg(), NULL));
    if (info.channels == 4) /* TurboJPEG cannot turn CMYK/YCCK into RGB */
        return problem_at(c, r->file, r->recno, r->offset,
                          "image/encoded is a CMYK JPEG; the pipeline decodes RGB/YCbCr/gray");
    if ((ex.height > 0 && ex.height != info.height) || (ex.width > 0 && ex.width != info.width))
        return problem_at(c, r->file, r->recno, r->offset,
                          "image/height x image/width say %" PRId64 "x%" PRId64
                          ", the JPEG is %dx%d",
                          ex.height, ex.width, info.height, info.width);
    if (c->range_on && (ex.label < c->lo || ex.label > c->hi))
        return problem_at(c, r->file, r->recno, r->offset,
                          "label %" PRId64 " outside %" PRId64 "..%" PRId64 "%s", ex.label, c->lo,
                          c->hi, c->range_given ? " (--label-range)" : " (dataset.json)");
    return 0;
}

static int on_file_error(void *arg, const dw_record *at, int rc, const char *what)
{
    verify_ctx *c = arg;
    (void)rc;
    c->counts[at->split - c->ds->splits].incomplete = 1;
    if (at->recno == DW_NO_RECORD)
        return problem_at(c, at->file, DW_NO_RECORD, 0, "cannot open: %s", what);
    return problem_at(c, at->file, at->recno, at->offset, "%s", what);
}

static int on_file_end(void *arg, const sl_dataset_split *s, const char *file, uint64_t records,
                       int clean)
{
    verify_ctx *c = arg;
    c->files++;
    c->counts[s - c->ds->splits].files++;
    if (c->idx_checked && clean && records != c->nidx) {
        c->idx_checked = 0;
        return problem_at(c, file, DW_NO_RECORD, 0,
                          "index file %s has %zu entries, the shard has %" PRIu64 " records",
                          c->idx_path, c->nidx, records);
    }
    return 0;
}

/* dataset.json's counts against what was read (only splits read whole). */
static int check_counts(verify_ctx *c)
{
    const sl_dataset *ds = c->ds;
    int rc;
    if (!ds->counts_listed)
        return 0;
    for (size_t i = 0; i < ds->nsplits; i++) {
        const sl_dataset_split *s = &ds->splits[i];
        const split_count *sc = &c->counts[i];
        const sl_manifest_split *m = s->listed;
        if (!m || sc->incomplete)
            continue;
        if (m->records != sc->records &&
            (rc = problem_at(c, ds->manifest_path, DW_NO_RECORD, 0,
                             "split %s: lists %" PRIu64 " records, found %" PRIu64, s->name,
                             m->records, sc->records)))
            return rc;
        if (s->format == SL_FORMAT_TFRECORD && m->shards != s->nfiles &&
            (rc = problem_at(c, ds->manifest_path, DW_NO_RECORD, 0,
                             "split %s: lists %" PRIu32 " shards, found %zu", s->name, m->shards,
                             s->nfiles)))
            return rc;
        if (m->bytes != sc->bytes &&
            (rc = problem_at(c, ds->manifest_path, DW_NO_RECORD, 0,
                             "split %s: lists %" PRIu64 " payload bytes, found %" PRIu64,
                             s->name, m->bytes, sc->bytes)))
            return rc;
    }
    return 0;
}

/* Verify one PATH. Returns 0 (walked; problems counted in c), VERIFY_STOP,
 * or 2 after printing why the PATH could not be opened. */
static int verify_path(verify_ctx *c, const char *path, const char *split)
{
    sl_dataset ds;
    int rc = sl_dataset_resolve(path, split, &ds);
    if (rc == SL_ECORRUPT) { /* dataset.json broken: a data problem */
        rc = problem_at(c, path, DW_NO_RECORD, 0, "%s", sl_errmsg());
        goto out;
    }
    if (rc) {
        cli_fail(CMD, rc);
        rc = 2;
        goto out;
    }
    c->ds = &ds;
    if (ds.has_manifest && ds.manifest.num_classes > 0 && !c->range_given) {
        c->range_on = 1;
        c->lo = ds.manifest.label_offset;
        c->hi = ds.manifest.label_offset + (int64_t)ds.manifest.num_classes - 1;
    } else if (!c->range_given) {
        c->range_on = 0;
    }
    if (!(c->counts = calloc(ds.nsplits ? ds.nsplits : 1, sizeof *c->counts))) {
        cli_error(CMD, "out of memory");
        rc = 2;
        goto out;
    }
    dw_visitor v = {
        .file_begin = on_file_begin,
        .record = on_record,
        .file_error = on_file_error,
        .file_end = on_file_end,
        .arg = c,
        .progress = c->quiet ? NULL : "verify",
    };
    rc = dw_walk(&ds, &v);
    if (!rc)
        rc = check_counts(c);
    if (rc && rc != VERIFY_STOP) {
        cli_fail(CMD, rc);
        rc = 2;
    }
out:
    drop_index(c);
    free(c->counts);
    c->counts = NULL;
    c->ds = NULL;
    sl_dataset_fini(&ds);
    return rc;
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
    verify_ctx c = {0};
    const char *split = NULL;
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
            c.all = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            c.quiet = 1;
        } else if ((val = cli_opt_value(argc, argv, &i, "--split", &missing))) {
            split = val;
        } else if ((val = cli_opt_value(argc, argv, &i, "--label-range", &missing))) {
            if (parse_range(val, &c.lo, &c.hi)) {
                rc = 2;
                goto done;
            }
            c.range_given = c.range_on = 1;
        } else if (missing) {
            cli_error(CMD, "%s needs a value", a);
            rc = 2;
            goto done;
        } else if (a[0] == '-' && a[1]) {
            cli_error(CMD, "unknown option '%s' (sluice verify --help)", a);
            rc = 2;
            goto done;
        } else {
            paths[npaths++] = argv[i];
        }
    }
    if (npaths == 0) {
        usage(stderr);
        rc = 2;
        goto done;
    }
    for (int i = 0; i < npaths; i++) {
        rc = verify_path(&c, paths[i], split);
        if (rc == 2)
            goto done;
        if (rc == VERIFY_STOP)
            break;
    }
    if (c.unindexed && !c.quiet)
        fprintf(stderr, "verify: note: %" PRIu64 " shard%s no index file (.idx): readers scan "
                "%s each time; sluice index PATH writes them\n", c.unindexed,
                c.unindexed == 1 ? " has" : "s have", c.unindexed == 1 ? "it" : "them");
    if (c.problems == 0) {
        if (!c.quiet)
            printf("ok: %" PRIu64 " records in %" PRIu64 " file%s\n", c.records, c.files,
                   c.files == 1 ? "" : "s");
        rc = 0;
    } else {
        if (c.all)
            printf("%" PRIu64 " problem%s in %" PRIu64 " records in %" PRIu64 " file%s\n",
                   c.problems, c.problems == 1 ? "" : "s", c.records, c.files,
                   c.files == 1 ? "" : "s");
        rc = 1;
    }
done:
    free(paths);
    return rc;
}

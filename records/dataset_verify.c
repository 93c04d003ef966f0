/*
 * records/dataset_verify.c - sl_verify_path (records.h, "verifying"): read
 * every record of a dataset and check what a training run would trip over
 * later. `sluice verify` prints what this finds; sluice.verify returns it.
 *
 * Per record: both TFRecord CRCs (the reader checks them), the Example
 * (image/encoded and image/class/label present, protobuf well formed), the
 * image header (a JPEG the pipeline can decode, its size equal to
 * image/height x image/width when those are set), the label range (from
 * dataset.json's num_classes and label_offset, or the caller's). Per shard:
 * its DALI index file, when it has one, lists exactly the offsets and sizes
 * read. Per split: the counts in dataset.json match what was read.
 *
 * WebDataset (.tar) shards: per sample, its members parse (the walk's scan
 * checked every header; a damaged one or a truncation is one problem naming
 * shard, member and byte offset), sl_wds_sample_decode finds an image and a
 * label, the image passes the same checks as image/encoded; the shard's
 * "X.tar.idx", when there is one, lists exactly the members read. Problems
 * read "<file>: sample N 'KEY' @ OFFSET: <what>".
 *
 * Threading: reentrant; callbacks run on the calling thread.
 */
#include "records_int.h"
#include "bytesrc.h"
#include "wds.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Callback result that stops the walk at the first problem (not a status). */
#define VERIFY_STOP (-1000)

typedef struct split_count {
    uint64_t records, bytes, files;
    int incomplete; /* a file could not be read to its end */
} split_count;

typedef struct verify_ctx {
    const sl_verify_options *o;
    sl_verify_result *res;
    int range_on;        /* check labels in lo..hi */
    int64_t lo, hi;
    const sl_dataset *ds;
    split_count *counts; /* per split of ds */
    /* The shard being read: its index file, loaded at file_begin. */
    char *idx_path;
    sl_index_entry *idx;
    size_t nidx;
    int idx_checked; /* idx loaded: compare entries with what is read */
    sl_wds_index wix; /* a .tar shard's index (then idx is NULL, nidx its samples) */
    const char *key;  /* the WebDataset sample a problem is about (NULL: none) */
} verify_ctx;

static int problem_at(verify_ctx *c, const char *split, const char *file, uint64_t recno,
                      uint64_t offset, int status, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Record one problem; VERIFY_STOP unless o->all. recno SL_WALK_NO_RECORD:
 * about the file itself. */
static int problem_at(verify_ctx *c, const char *split, const char *file, uint64_t recno,
                      uint64_t offset, int status, const char *fmt, ...)
{
    char what[SL_ERRMSG_MAX], msg[SL_ERRMSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (recno == SL_WALK_NO_RECORD)
        snprintf(msg, sizeof msg, "%s: %s", file, what);
    else if (c->key) /* a WebDataset sample: its number, key and span offset */
        snprintf(msg, sizeof msg, "%s: sample %" PRIu64 "%s%s%s @ %" PRIu64 ": %s", file, recno,
                 c->key[0] ? " '" : "", c->key, c->key[0] ? "'" : "", offset, what);
    else if (offset == SL_WALK_NO_OFFSET)
        snprintf(msg, sizeof msg, "%s: record %" PRIu64 ": %s", file, recno, what);
    else
        snprintf(msg, sizeof msg, "%s: record %" PRIu64 " @ %" PRIu64 ": %s", file, recno,
                 offset, what);
    if (c->res->problems++ == 0) {
        c->res->first_status = status;
        snprintf(c->res->first, sizeof c->res->first, "%.*s", (int)sizeof c->res->first - 1, msg);
    }
    if (c->o->problem) {
        sl_verify_problem p = {.split = split, .file = file, .recno = recno, .offset = offset,
                               .status = status, .what = what, .message = msg};
        c->o->problem(c->o->arg, &p);
    }
    return c->o->all ? 0 : VERIFY_STOP;
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
    sl_wds_index_fini(&c->wix);
    c->nidx = 0;
    c->idx_checked = 0;
}

/* A .tar shard's "X.tar.idx" or "X.idx" (DALI's WebDataset index), when
 * there is one. */
static int wds_file_begin(verify_ctx *c, const sl_dataset_split *s, const char *file)
{
    uint64_t size;
    if (sl_bytes_size(file, &size) != SL_OK) { /* the walk reports the shard */
        sl_clear_error();
        return 0;
    }
    int rc = sl_wds_index_load_beside(file, size, &c->wix, &c->idx_path);
    if (rc == SL_ENOMEM)
        return rc;
    if (rc == SL_ENOENT) {
        sl_clear_error();
        c->res->unindexed++;
        return 0;
    }
    if (rc)
        return problem_at(c, s->name, c->idx_path, SL_WALK_NO_RECORD, 0, SL_ECORRUPT,
                          "bad index file: %s", sl_msg_detail(sl_errmsg(), c->idx_path));
    c->nidx = c->wix.nsamples;
    c->idx_checked = 1;
    return 0;
}

static int on_file_begin(void *arg, const sl_dataset_split *s, const char *file)
{
    verify_ctx *c = arg;
    drop_index(c);
    if (s->format == SL_FORMAT_WDS)
        return wds_file_begin(c, s, file);
    /* A missing shard is reported by the walk; its index is beside the point. */
    uint64_t size;
    if (s->format != SL_FORMAT_TFRECORD || sl_bytes_size(file, &size) != SL_OK) {
        sl_clear_error();
        return 0;
    }
    if (!(c->idx_path = sl_str_cat(file, ".idx")))
        return sl_fail(SL_ENOMEM, "sl_verify_path: out of memory");
    int rc = sl_index_load(c->idx_path, &c->idx, &c->nidx);
    if (rc == SL_ENOENT) {
        /* Not a problem (asked of the server for a remote shard): shards
         * from other tools (TensorFlow's ImageNet converter) have none, and
         * readers scan them. */
        sl_clear_error();
        c->res->unindexed++;
        return 0;
    }
    if (rc)
        return problem_at(c, s->name, c->idx_path, SL_WALK_NO_RECORD, 0, SL_ECORRUPT,
                          "bad index file: %s", sl_msg_detail(sl_errmsg(), c->idx_path));
    c->idx_checked = 1;
    return 0;
}

static int check_index(verify_ctx *c, const sl_walk_record *r)
{
    uint64_t size = SL_TFRECORD_OVERHEAD + (uint64_t)r->len;
    if (r->recno >= c->nidx) {
        c->idx_checked = 0; /* one complaint per index file */
        return problem_at(c, r->split->name, r->file, r->recno, r->offset, SL_ECORRUPT,
                          "missing from index file %s (it has %zu entries)", c->idx_path,
                          c->nidx);
    }
    const sl_index_entry *e = &c->idx[r->recno];
    if (e->offset != r->offset || e->size != size) {
        c->idx_checked = 0;
        return problem_at(c, r->split->name, r->file, r->recno, r->offset, SL_ECORRUPT,
                          "index file %s says offset %" PRIu64 " size %" PRIu64
                          ", the record has size %" PRIu64,
                          c->idx_path, e->offset, e->size, size);
    }
    return 0;
}

/* Sample r->recno of the .tar index against the members of the span read. */
static int check_wds_index(verify_ctx *c, const sl_walk_record *r)
{
    sl_tar_iter it;
    sl_tar_member *m = malloc(sizeof *m);
    const sl_wds_sample *s = r->recno < c->nidx ? &c->wix.samples[r->recno] : NULL;
    char what[SL_TAR_NAME_MAX + 256] = "";
    size_t k = 0;
    if (!m)
        return sl_fail(SL_ENOMEM, "sl_verify_path: out of memory");
    sl_tar_iter_mem(&it, r->data, r->len, 1, r->file);
    while (s && !what[0] && sl_tar_next(&it, m) == SL_OK) {
        const sl_wds_member *e = k < s->n ? &c->wix.members[s->first + k] : NULL;
        const char *ext = m->name + sl_wds_key_len(m->name);
        ext += *ext == '.';
        if (!e)
            snprintf(what, sizeof what, "index file %s has %zu members for it, the tar has "
                     "member '%s' after them", c->idx_path, s->n, m->name);
        else if (e->offset != r->offset + m->data_off || e->size != m->size ||
                 (strcmp(e->ext, ext) && !(e->ext[0] == '-' && !e->ext[1] && !ext[0])) ||
                 (e->name && strcmp(e->name, m->name)))
            snprintf(what, sizeof what, "index file %s says member '%s' @ %" PRIu64 " size %"
                     PRIu64 ", the tar has '%s' @ %" PRIu64 " size %" PRIu64, c->idx_path,
                     e->name ? e->name : e->ext, e->offset, e->size, m->name,
                     r->offset + m->data_off, m->size);
        k++;
    }
    sl_clear_error(); /* a bad span is the decoder's to report */
    free(m);
    if (!s)
        snprintf(what, sizeof what, "missing from index file %s (it has %zu samples)",
                 c->idx_path, c->nidx);
    else if (!what[0] && k < s->n)
        snprintf(what, sizeof what, "index file %s has %zu members for it, the tar %zu",
                 c->idx_path, s->n, k);
    if (!what[0])
        return 0;
    c->idx_checked = 0; /* one complaint per index file */
    return problem_at(c, r->split->name, r->file, r->recno, r->offset, SL_ECORRUPT, "%s", what);
}

/* The detail of sl_wds_sample_decode's message: without "sample 'KEY': ",
 * which the problem's place already says. */
static const char *wds_detail(const char *msg, const char *key)
{
    size_t k = strlen(key);
    if (!strncmp(msg, "sample '", 8) && !strncmp(msg + 8, key, k) &&
        !strncmp(msg + 8 + k, "': ", 3))
        return msg + 8 + k + 3;
    return sl_msg_detail(msg, NULL);
}

static int check_record(verify_ctx *c, const sl_walk_record *r)
{
    const char *sp = r->split->name;
    const char *img = r->key ? "image" : "image/encoded";
    sl_image_example ex;
    sl_image_info info;
    int rc;

    c->res->records++;
    split_count *sc = &c->counts[r->split - c->ds->splits];
    sc->records++;
    sc->bytes += r->len;

    if (c->idx_checked && (rc = r->key ? check_wds_index(c, r) : check_index(c, r)))
        return rc;
    if (r->key && sl_wds_sample_decode(r->data, r->len, r->label_key, &ex))
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_ECORRUPT, "%s",
                          wds_detail(sl_errmsg(), r->key));
    if (!r->key && sl_image_example_decode(r->data, r->len, &ex))
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_ECORRUPT, "bad Example: %s",
                          sl_msg_detail(sl_errmsg(), NULL));
    if (sl_image_probe(ex.image, ex.image_len, &info))
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_EIMAGE, "%s: %s", img,
                          sl_msg_detail(sl_errmsg(), NULL));
    if (info.type != SL_IMAGE_JPEG)
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_EIMAGE,
                          "%s is %s, not JPEG (%zu bytes)%s", img, type_name(info.type),
                          ex.image_len, r->key ? "" : "; sluice convert --from tfrecord "
                          "re-encodes such shards");
    unsigned fl = 0;
    if (sl_jpeg_scan(ex.image, ex.image_len, &fl))
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_EIMAGE, "%s: %s", img,
                          sl_msg_detail(sl_errmsg(), NULL));
    if (fl & SL_JPEG_RESTART) /* counted as good records are: problems return first */
        c->res->restart_records++;
    if (info.channels == 4) /* TurboJPEG cannot turn CMYK/YCCK into RGB */
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_EIMAGE,
                          "%s is a CMYK JPEG; the pipeline decodes RGB/YCbCr/gray", img);
    if ((ex.height > 0 && ex.height != info.height) || (ex.width > 0 && ex.width != info.width))
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_ECORRUPT,
                          "image/height x image/width say %" PRId64 "x%" PRId64
                          ", the JPEG is %dx%d",
                          ex.height, ex.width, info.height, info.width);
    if (c->range_on && (ex.label < c->lo || ex.label > c->hi))
        return problem_at(c, sp, r->file, r->recno, r->offset, SL_ECORRUPT,
                          "label %" PRId64 " outside %" PRId64 "..%" PRId64 " (%s)", ex.label,
                          c->lo, c->hi, c->o->label_range ? "--label-range"
                                        : sl_name_base(c->ds->classes_path));
    return 0;
}

static int on_record(void *arg, const sl_walk_record *r)
{
    verify_ctx *c = arg;
    c->key = r->key;
    int rc = check_record(c, r);
    c->key = NULL;
    return rc;
}

static int on_file_error(void *arg, const sl_walk_record *at, int rc, const char *what)
{
    verify_ctx *c = arg;
    c->counts[at->split - c->ds->splits].incomplete = 1;
    if (at->recno == SL_WALK_NO_RECORD)
        return problem_at(c, at->split->name, at->file, SL_WALK_NO_RECORD, 0, rc,
                          "cannot open: %s", what);
    c->key = at->key;
    rc = problem_at(c, at->split->name, at->file, at->recno, at->offset, rc, "%s", what);
    c->key = NULL;
    return rc;
}

static int on_file_end(void *arg, const sl_dataset_split *s, const char *file, uint64_t records,
                       int clean)
{
    verify_ctx *c = arg;
    c->res->files++;
    c->counts[s - c->ds->splits].files++;
    if (c->idx_checked && clean && records != c->nidx) {
        c->idx_checked = 0;
        return problem_at(c, s->name, file, SL_WALK_NO_RECORD, 0, SL_ECORRUPT,
                          "index file %s has %zu entries, the shard has %" PRIu64 " records",
                          c->idx_path, c->nidx, records);
    }
    return 0;
}

static int on_progress(void *arg, const sl_walk_progress *p)
{
    verify_ctx *c = arg;
    return c->o->progress(c->o->arg, p);
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
            (rc = problem_at(c, s->name, ds->manifest_path, SL_WALK_NO_RECORD, 0, SL_ECORRUPT,
                             "split %s: lists %" PRIu64 " records, found %" PRIu64, s->name,
                             m->records, sc->records)))
            return rc;
        if (s->format != SL_FORMAT_LMDB && m->shards != s->nfiles &&
            (rc = problem_at(c, s->name, ds->manifest_path, SL_WALK_NO_RECORD, 0, SL_ECORRUPT,
                             "split %s: lists %" PRIu32 " shards, found %zu", s->name,
                             m->shards, s->nfiles)))
            return rc;
        /* a .tar's samples are spans (headers, members); dataset.json has
         * the Examples convert wrote them from */
        if (s->format != SL_FORMAT_WDS && m->bytes != sc->bytes &&
            (rc = problem_at(c, s->name, ds->manifest_path, SL_WALK_NO_RECORD, 0, SL_ECORRUPT,
                             "split %s: lists %" PRIu64 " payload bytes, found %" PRIu64,
                             s->name, m->bytes, sc->bytes)))
            return rc;
    }
    return 0;
}

static int verify_path(const char *path, const sl_verify_options *o, sl_verify_result *res)
{
    static const sl_verify_options none = {0};
    verify_ctx c = {.o = o ? o : &none, .res = res};
    sl_dataset ds;
    int rc;
    if (!res)
        return sl_fail(SL_EINVAL, "sl_verify_path: NULL result");
    o = c.o;
    rc = sl_dataset_resolve(path, o->split, &ds);
    ds.label_key = o->label_key;
    if (rc == SL_ECORRUPT) { /* dataset.json broken: a data problem */
        char msg[SL_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", sl_errmsg());
        problem_at(&c, NULL, path, SL_WALK_NO_RECORD, 0, SL_ECORRUPT, "%s", msg);
        rc = SL_OK;
        goto out;
    }
    if (rc)
        goto out;
    c.ds = &ds;
    if (o->label_range) {
        c.range_on = 1;
        c.lo = o->label_lo;
        c.hi = o->label_hi;
    } else if (ds.classes_path && ds.manifest.num_classes > 0) { /* dataset.json, TFDS's */
        c.range_on = 1;
        c.lo = ds.manifest.label_offset;
        c.hi = ds.manifest.label_offset + (int64_t)ds.manifest.num_classes - 1;
    }
    if (!(c.counts = calloc(ds.nsplits ? ds.nsplits : 1, sizeof *c.counts))) {
        rc = sl_fail(SL_ENOMEM, "sl_verify_path: out of memory");
        goto out;
    }
    sl_walk_visitor v = {
        .file_begin = on_file_begin,
        .record = on_record,
        .file_error = on_file_error,
        .file_end = on_file_end,
        .progress = o->progress ? on_progress : NULL,
        .arg = &c,
    };
    rc = sl_dataset_walk(&ds, &v);
    if (!rc)
        rc = check_counts(&c);
    if (rc == VERIFY_STOP)
        rc = SL_OK;
out:
    drop_index(&c);
    free(c.counts);
    sl_dataset_fini(&ds);
    return rc;
}

int sl_verify_path(const char *path, const sl_verify_options *o, sl_verify_result *res)
{
    /* o->io for every read of the call (they are all on this thread) */
    const sl_io_opts *was = o && o->io ? sl_io_thread_use(o->io) : NULL;
    int rc = verify_path(path, o, res);
    if (o && o->io)
        sl_io_thread_use(was);
    return rc;
}

/*
 * records/dataset_inspect.c - sl_dataset_inspect (records.h, "inspecting"):
 * what is in a dataset, from reading every record once (CRCs checked by
 * the reader): per split and in total, records, shards, payload bytes, the
 * label histogram, image width/height min/mean/max (from image/width and
 * image/height, or the image header when those are absent) and the
 * image/format values seen; the differences from dataset.json's counts;
 * the whole as JSON (cJSON, as the manifest), which `sluice inspect --json`
 * prints and sluice.inspect returns as a dict.
 *
 * WebDataset (.tar) shards: a record is a sample (sl_wds_sample_decode:
 * image and .cls label), its bytes its span (headers and members, what the
 * pipeline reads), its size from the image header, its format the image
 * type ("jpeg", "png"); dataset.json's payload bytes (the Examples convert
 * wrote the samples from) are not compared.
 *
 * Threading: reentrant; the progress callback runs on the calling thread.
 */
#include "records_int.h"
#include "wds.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char fn[] = "sl_dataset_inspect";

/* ------------------------------------------------------------- statistics */

static int hist_add(sl_inspect_stats *h, int64_t label, uint64_t count)
{
    size_t lo = 0, hi = h->nlabels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->labels[mid] < label)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < h->nlabels && h->labels[lo] == label) {
        h->label_counts[lo] += count;
        return 0;
    }
    if (h->nlabels == h->label_cap) {
        size_t cap = h->label_cap ? 2 * h->label_cap : 64;
        int64_t *l = realloc(h->labels, cap * sizeof *l);
        if (!l)
            return -1;
        h->labels = l;
        uint64_t *c = realloc(h->label_counts, cap * sizeof *c);
        if (!c)
            return -1;
        h->label_counts = c;
        h->label_cap = cap;
    }
    memmove(h->labels + lo + 1, h->labels + lo, (h->nlabels - lo) * sizeof *h->labels);
    memmove(h->label_counts + lo + 1, h->label_counts + lo,
            (h->nlabels - lo) * sizeof *h->label_counts);
    h->labels[lo] = label;
    h->label_counts[lo] = count;
    h->nlabels++;
    return 0;
}

static void dim_add(sl_inspect_dim *d, int64_t v)
{
    if (d->n == 0 || v < d->min)
        d->min = v;
    if (d->n == 0 || v > d->max)
        d->max = v;
    d->sum += (double)v;
    d->n++;
}

static void dim_merge(sl_inspect_dim *d, const sl_inspect_dim *s)
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

static void fmt_add(sl_inspect_stats *s, const char *name, size_t len, uint64_t n)
{
    char buf[sizeof s->formats[0].name];
    snprintf(buf, sizeof buf, "%.*s", (int)len, name);
    for (size_t i = 0; i < s->nformats; i++)
        if (!strcmp(s->formats[i].name, buf)) {
            s->formats[i].n += n;
            return;
        }
    if (s->nformats < SL_INSPECT_MAX_FORMATS) {
        snprintf(s->formats[s->nformats].name, sizeof buf, "%s", buf);
        s->formats[s->nformats++].n = n;
        return;
    }
    snprintf(s->formats[SL_INSPECT_MAX_FORMATS].name, sizeof buf, "other");
    s->formats[SL_INSPECT_MAX_FORMATS].n += n;
}

static int merge_into(sl_inspect_stats *t, const sl_inspect_stats *s)
{
    t->records += s->records;
    t->bytes += s->bytes;
    t->files += s->files;
    t->unknown_size += s->unknown_size;
    t->restart += s->restart;
    dim_merge(&t->width, &s->width);
    dim_merge(&t->height, &s->height);
    for (size_t i = 0; i <= SL_INSPECT_MAX_FORMATS; i++)
        if (s->formats[i].n)
            fmt_add(t, s->formats[i].name, strlen(s->formats[i].name), s->formats[i].n);
    for (size_t i = 0; i < s->nlabels; i++)
        if (hist_add(t, s->labels[i], s->label_counts[i]))
            return -1;
    return 0;
}

static void stats_fini(sl_inspect_stats *s)
{
    free(s->labels);
    free(s->label_counts);
    memset(s, 0, sizeof *s);
}

void sl_inspect_result_fini(sl_inspect_result *res)
{
    if (!res)
        return;
    for (size_t i = 0; res->splits && i < res->nsplits; i++)
        stats_fini(&res->splits[i]);
    free(res->splits);
    stats_fini(&res->total);
    memset(res, 0, sizeof *res);
}

/* -------------------------------------------------------------- the walk */

typedef struct inspect_ctx {
    const sl_dataset *ds;
    sl_inspect_result *res;
    sl_walk_progress_fn progress;
    void *arg;
} inspect_ctx;

/* "FILE: record N @ OFFSET", "FILE: record N" (LMDB) or "FILE: sample N
 * 'KEY' @ OFFSET" (WebDataset) into buf. */
static const char *where(char *buf, size_t cap, const sl_walk_record *r)
{
    if (r->key)
        snprintf(buf, cap, "%s: sample %" PRIu64 "%s%s%s @ %" PRIu64, r->file, r->recno,
                 r->key[0] ? " '" : "", r->key, r->key[0] ? "'" : "", r->offset);
    else if (r->offset == SL_WALK_NO_OFFSET)
        snprintf(buf, cap, "%s: record %" PRIu64, r->file, r->recno);
    else
        snprintf(buf, cap, "%s: record %" PRIu64 " @ %" PRIu64, r->file, r->recno, r->offset);
    return buf;
}

static int on_record(void *arg, const sl_walk_record *r)
{
    inspect_ctx *c = arg;
    sl_inspect_stats *s = &c->res->splits[r->split - c->ds->splits];
    sl_image_example ex;
    char at[4200];

    if (r->key ? sl_wds_sample_decode(r->data, r->len, r->label_key, &ex)
               : sl_image_example_decode(r->data, r->len, &ex))
        return sl_fail(SL_ECORRUPT, "%s: %s: bad %s: %s", fn, where(at, sizeof at, r),
                       r->key ? "sample" : "Example", sl_msg_detail(sl_errmsg(), NULL));
    s->records++;
    s->bytes += r->len;
    if (hist_add(s, ex.label, 1))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    int64_t w = ex.width, h = ex.height;
    if (w <= 0 || h <= 0) {
        sl_image_info info;
        if (sl_image_probe(ex.image, ex.image_len, &info) == SL_OK) {
            w = w > 0 ? w : info.width;
            h = h > 0 ? h : info.height;
            if (r->key) { /* a sample has no image/format: the header's type */
                static const char *const names[] = {[SL_IMAGE_JPEG] = "jpeg",
                                                    [SL_IMAGE_PNG] = "png",
                                                    [SL_IMAGE_BMP] = "bmp",
                                                    [SL_IMAGE_PPM] = "ppm",
                                                    [SL_IMAGE_WEBP] = "webp"};
                const char *t = (size_t)info.type < sizeof names / sizeof *names &&
                                names[info.type] ? names[info.type] : "unknown";
                ex.format = t;
                ex.format_len = strlen(t);
            }
        }
    }
    unsigned fl = 0; /* restart markers: the structure walk says (memchr speed) */
    if (ex.image_len > 2 && ex.image[0] == 0xFF && ex.image[1] == 0xD8 &&
        sl_jpeg_scan(ex.image, ex.image_len, &fl) == SL_OK && (fl & SL_JPEG_RESTART))
        s->restart++;
    sl_clear_error();
    if (w > 0 && h > 0) {
        dim_add(&s->width, w);
        dim_add(&s->height, h);
    } else {
        s->unknown_size++;
    }
    if (ex.format && ex.format_len)
        fmt_add(s, ex.format, ex.format_len, 1);
    else
        fmt_add(s, "(none)", 6, 1);
    return 0;
}

static int on_file_error(void *arg, const sl_walk_record *at, int rc, const char *what)
{
    char buf[4200];
    (void)arg;
    if (at->recno == SL_WALK_NO_RECORD)
        return sl_fail(rc, "%s: %s: cannot open: %s", fn, at->file, what);
    return sl_fail(rc, "%s: %s: %s", fn, where(buf, sizeof buf, at), what);
}

static int on_file_end(void *arg, const sl_dataset_split *s, const char *file, uint64_t n,
                       int clean)
{
    inspect_ctx *c = arg;
    (void)file;
    (void)n;
    (void)clean;
    c->res->splits[s - c->ds->splits].files++;
    return 0;
}

static int on_progress(void *arg, const sl_walk_progress *p)
{
    inspect_ctx *c = arg;
    return c->progress(c->arg, p);
}

int sl_dataset_inspect(const sl_dataset *ds, sl_walk_progress_fn progress, void *arg,
                       sl_inspect_result *res)
{
    inspect_ctx c = {.ds = ds, .res = res, .progress = progress, .arg = arg};
    if (!res)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    memset(res, 0, sizeof *res);
    if (!ds)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (!(res->splits = calloc(ds->nsplits ? ds->nsplits : 1, sizeof *res->splits)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    res->nsplits = ds->nsplits;
    sl_walk_visitor v = {
        .record = on_record,
        .file_error = on_file_error,
        .file_end = on_file_end,
        .progress = progress ? on_progress : NULL,
        .arg = &c,
    };
    int rc = sl_dataset_walk(ds, &v);
    if (rc)
        return rc;
    for (size_t i = 0; i < ds->nsplits; i++)
        if (merge_into(&res->total, &res->splits[i]))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    return SL_OK;
}

/* ---------------------------------------------------------------- output */

int sl_inspect_warnings(const sl_dataset *ds, size_t i, const sl_inspect_stats *s, char *warn,
                        size_t cap)
{
    const sl_manifest_split *m = ds->splits[i].listed;
    size_t len = 0;
    int n = 0;
    if (cap)
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
    if (m->bytes != s->bytes && ds->splits[i].format != SL_FORMAT_WDS) /* spans, not Examples */
        WARN("%s: split %s: dataset.json says %" PRIu64 " payload bytes, found %" PRIu64 "\n",
             ds->path, ds->splits[i].name, m->bytes, s->bytes);
#undef WARN
    return n;
}

static double mean_of(const sl_inspect_dim *d) { return d->n ? d->sum / (double)d->n : 0.0; }

static cJSON *json_dim(const sl_inspect_dim *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "min", d->n ? (double)d->min : 0);
    cJSON_AddNumberToObject(o, "max", d->n ? (double)d->max : 0);
    cJSON_AddNumberToObject(o, "mean", mean_of(d));
    return o;
}

/* Fill o with the members shared by a split and the total. */
static void json_stats(cJSON *o, const sl_inspect_stats *s)
{
    char key[32];
    cJSON_AddNumberToObject(o, "records", (double)s->records);
    cJSON_AddNumberToObject(o, "shards", (double)s->files);
    cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(o, "mean_record_bytes",
                            s->records ? (double)s->bytes / (double)s->records : 0);
    cJSON *labels = cJSON_AddObjectToObject(o, "labels");
    for (size_t i = 0; i < s->nlabels; i++) {
        snprintf(key, sizeof key, "%" PRId64, s->labels[i]);
        cJSON_AddNumberToObject(labels, key, (double)s->label_counts[i]);
    }
    cJSON_AddItemToObject(o, "width", json_dim(&s->width));
    cJSON_AddItemToObject(o, "height", json_dim(&s->height));
    cJSON *fmts = cJSON_AddObjectToObject(o, "formats");
    for (size_t i = 0; i <= SL_INSPECT_MAX_FORMATS; i++)
        if (s->formats[i].n)
            cJSON_AddNumberToObject(fmts, s->formats[i].name, (double)s->formats[i].n);
    if (s->unknown_size)
        cJSON_AddNumberToObject(o, "unknown_size", (double)s->unknown_size);
    cJSON_AddNumberToObject(o, "restart_records", (double)s->restart);
}

char *sl_inspect_json(const sl_dataset *ds, const sl_inspect_result *res)
{
    char warn[2048];
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "path", ds->path);
    json_stats(root, &res->total);
    if (ds->classes_path) { /* dataset.json, or a TensorFlow Datasets folder's files */
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
    for (size_t i = 0; i < ds->nsplits && i < res->nsplits; i++) {
        const sl_inspect_stats *st = &res->splits[i];
        cJSON *o = cJSON_AddObjectToObject(splits, ds->splits[i].name);
        sl_format f = ds->splits[i].format;
        cJSON_AddStringToObject(o, "format", f == SL_FORMAT_LMDB  ? "lmdb"
                                             : f == SL_FORMAT_WDS ? "wds"
                                                                  : "tfrecord");
        cJSON_AddNumberToObject(o, "shards_without_index", (double)ds->splits[i].unindexed);
        json_stats(o, st);
        const sl_manifest_split *m = ds->splits[i].listed;
        if (m && ds->counts_listed) {
            cJSON *l = cJSON_AddObjectToObject(o, "listed");
            cJSON_AddNumberToObject(l, "records", (double)m->records);
            cJSON_AddNumberToObject(l, "shards", m->shards);
            cJSON_AddNumberToObject(l, "bytes", (double)m->bytes);
        }
        if (sl_inspect_warnings(ds, i, st, warn, sizeof warn)) {
            char *save = NULL;
            for (char *line = strtok_r(warn, "\n", &save); line;
                 line = strtok_r(NULL, "\n", &save))
                cJSON_AddItemToArray(warnings, cJSON_CreateString(line));
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return NULL;
    char *out = strdup(text); /* the caller frees with free(), whatever cJSON's hooks */
    cJSON_free(text);
    return out;
}

/* ----------------------------------------------- restart markers, alone */

typedef struct count_ctx {
    uint64_t records, with;
} count_ctx;

static int count_record(void *arg, const sl_walk_record *r)
{
    count_ctx *c = arg;
    sl_image_example ex;
    unsigned fl = 0;
    c->records++;
    if ((r->key ? sl_wds_sample_decode(r->data, r->len, NULL, &ex)
                : sl_image_example_decode(r->data, r->len, &ex)) == SL_OK &&
        sl_jpeg_scan(ex.image, ex.image_len, &fl) == SL_OK && (fl & SL_JPEG_RESTART))
        c->with++;
    sl_clear_error();
    return 0;
}

int sl_dataset_count_restarts(const sl_dataset *ds, uint64_t *records, uint64_t *with_markers)
{
    count_ctx c = {0, 0};
    sl_walk_visitor v = {.record = count_record, .file_error = on_file_error, .arg = &c};
    int rc = sl_dataset_walk(ds, &v);
    if (records)
        *records = c.records;
    if (with_markers)
        *with_markers = c.with;
    return rc;
}

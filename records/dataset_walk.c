/*
 * records/dataset_walk.c - walk every record of a resolved dataset
 * (records.h, "walking records"): the one reader loop of sl_verify_path,
 * sl_dataset_inspect and whoever else reads a dataset whole, in order.
 *
 * Progress is a callback, not a line on stderr: the CLI draws it, Python
 * checks for Ctrl-C in it.
 *
 * Threading: single-threaded; callbacks run on the calling thread.
 */
#include "records_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bytesrc.h"
#include "common/clock.h"
#include "wds.h"

#define WDS_WINDOW ((size_t)4 << 20) /* bytes of consecutive sample spans read at once */

static const char *base_of(const char *p)
{
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

static size_t file_count(const sl_dataset *ds)
{
    size_t n = 0;
    for (size_t i = 0; i < ds->nsplits; i++)
        n += ds->splits[i].nfiles;
    return n;
}

/* ------------------------------------------------------------ messages */

/* Length of "record D+ @ D+: " or "record D+: " at p, 0 if not there. */
static size_t record_prefix(const char *p)
{
    const char *q = p;
    if (strncmp(q, "record ", 7))
        return 0;
    q += 7;
    if (!isdigit((unsigned char)*q))
        return 0;
    while (isdigit((unsigned char)*q))
        q++;
    if (!strncmp(q, " @ ", 3)) {
        q += 3;
        if (!isdigit((unsigned char)*q))
            return 0;
        while (isdigit((unsigned char)*q))
            q++;
    }
    if (strncmp(q, ": ", 2))
        return 0;
    return (size_t)(q + 2 - p);
}

const char *sl_msg_detail(const char *msg, const char *file)
{
    const char *best = NULL;
    for (const char *p = strstr(msg, "record "); p; p = strstr(p + 1, "record ")) {
        size_t n = record_prefix(p);
        if (n)
            best = p + n;
    }
    if (best)
        return best;
    const char *p = msg;
    /* "sl_something: " - a function name has no spaces or slashes. */
    size_t fn = strcspn(p, ": /");
    if (fn > 0 && !strncmp(p + fn, ": ", 2) && !strncmp(p, "sl_", 3))
        p += fn + 2;
    if (file) {
        size_t lf = strlen(file);
        const char *b = base_of(file);
        size_t lb = strlen(b);
        if (!strncmp(p, file, lf) && !strncmp(p + lf, ": ", 2))
            p += lf + 2;
        else if (!strncmp(p, b, lb) && !strncmp(p + lb, ": ", 2))
            p += lb + 2;
    }
    return p;
}

/* ---------------------------------------------------------------- walking */

typedef struct walk_ctx {
    const sl_walk_visitor *v;
    size_t files_done, files_total;
    uint64_t records, bytes;
    double start, last_call;
} walk_ctx;

/* The progress callback: not before 0.5 s (small datasets finish first),
 * then ~8 times a second. */
static int progress(walk_ctx *c)
{
    if (!c->v->progress)
        return 0;
    double t = sl_now_s();
    if (t - c->start < 0.5 || t - c->last_call < 0.125)
        return 0;
    c->last_call = t;
    sl_walk_progress p = {.records = c->records, .bytes = c->bytes,
                          .files_done = c->files_done, .files_total = c->files_total,
                          .elapsed_s = t - c->start};
    return c->v->progress(c->v->arg, &p);
}

/* A read failed at `at`: hand it to file_error (copying the message first,
 * since the callback may set its own) or stop with rc. */
static int report(walk_ctx *c, const sl_walk_record *at, int rc)
{
    char msg[SL_ERRMSG_MAX];
    if (!c->v->file_error)
        return rc;
    snprintf(msg, sizeof msg, "%s", sl_errmsg()[0] ? sl_errmsg() : sl_strerror(rc));
    return c->v->file_error(c->v->arg, at, rc, sl_msg_detail(msg, at->file));
}

static int visit(walk_ctx *c, sl_walk_record *rec)
{
    int rc;
    c->records++;
    c->bytes += rec->len;
    if ((c->records & 255) == 0 && (rc = progress(c)))
        return rc;
    return c->v->record ? c->v->record(c->v->arg, rec) : 0;
}

/* Visit the records of one open file: a TFRecord shard (tf) or an LMDB
 * store (lm), the other NULL. *n counts the records read; *clean is set when
 * the file was read to its end. */
static int walk_records(walk_ctx *c, sl_walk_record *rec, sl_tfrecord_reader *tf,
                        sl_lmdb_reader *lm, uint64_t *n, int *clean)
{
    uint64_t next_off = 0; /* TFRecord: where the record after the last good one starts */
    for (;;) {
        const uint8_t *data;
        size_t len;
        int rc = tf ? sl_tfrecord_reader_next(tf, &data, &len)
                    : sl_lmdb_reader_next(lm, &data, &len);
        if (rc == SL_EOF) {
            *clean = 1;
            return SL_OK;
        }
        if (rc) {
            /* The bad record is the one after the last good one. */
            rec->recno = *n;
            if (tf)
                rec->offset = next_off; /* LMDB keeps SL_WALK_NO_OFFSET */
            rec->data = NULL;
            rec->len = 0;
            return report(c, rec, rc);
        }
        if (tf) {
            rec->recno = sl_tfrecord_reader_record(tf);
            rec->offset = sl_tfrecord_reader_offset(tf);
            next_off = rec->offset + SL_TFRECORD_OVERHEAD + len;
        } else {
            rec->recno = sl_lmdb_reader_record(lm);
        }
        rec->data = data;
        rec->len = len;
        (*n)++;
        if ((rc = visit(c, rec)))
            return rc;
    }
}

static int walk_tfrecord(walk_ctx *c, sl_walk_record *rec, uint64_t *n, int *clean)
{
    sl_tfrecord_reader *r = NULL;
    int rc = sl_tfrecord_reader_open(rec->file, &r);
    if (rc) {
        rec->recno = SL_WALK_NO_RECORD;
        return report(c, rec, rc);
    }
    rc = walk_records(c, rec, r, NULL, n, clean);
    sl_tfrecord_reader_close(r);
    return rc;
}

static int walk_lmdb(walk_ctx *c, sl_walk_record *rec, uint64_t *n, int *clean)
{
    sl_lmdb_env *env = NULL;
    sl_lmdb_reader *r = NULL;
    int rc = sl_lmdb_env_open(rec->file, &env);
    if (!rc)
        rc = sl_lmdb_reader_open(env, &r);
    if (rc) {
        rec->recno = SL_WALK_NO_RECORD;
        rc = report(c, rec, rc);
    } else {
        rc = walk_records(c, rec, NULL, r, n, clean);
    }
    sl_lmdb_reader_close(r);
    sl_lmdb_env_close(env);
    return rc;
}

/* A WebDataset shard: scan its headers (sl_wds_index_build_prefix, through
 * sl_bytes_read), then visit each sample's span, read a window of
 * consecutive spans at a time. A damaged header or a truncation is one
 * file_error after the samples before it, with the scan's message (shard,
 * member, byte offset): about the last sample when the damage cut it short
 * (it does not decode: the damaged member was one of its own), else about
 * the place after it (recno the next sample, key ""). */
static int walk_wds(walk_ctx *c, sl_walk_record *rec, uint64_t *n, int *clean)
{
    sl_wds_index ix;
    char msg[SL_ERRMSG_MAX], *key = NULL;
    uint8_t *win = NULL;
    uint64_t woff = 0, wlen = 0, end;
    size_t cap = 0;
    int rc, cut = 0, scan = sl_wds_index_build_prefix(rec->file, &ix);

    if (scan && scan != SL_ECORRUPT) {
        rec->recno = SL_WALK_NO_RECORD;
        return report(c, rec, scan);
    }
    snprintf(msg, sizeof msg, "%s", scan ? sl_errmsg() : "");
    end = ix.nsamples ? ix.samples[ix.nsamples - 1].span_end : 0;
    if (!(key = malloc(SL_TAR_NAME_MAX))) {
        rc = sl_fail(SL_ENOMEM, "sl_dataset_walk: out of memory");
        goto out;
    }
    rec->key = key;
    for (size_t i = 0; i < ix.nsamples; i++) {
        const sl_wds_sample *sm = &ix.samples[i];
        const char *name = ix.members[sm->first].name;
        size_t k = sl_wds_key_len(name);
        uint64_t len = sm->span_end - sm->span_off;
        snprintf(key, SL_TAR_NAME_MAX, "%.*s", (int)k, name);
        rec->recno = i;
        rec->offset = sm->span_off;
        if (sm->span_off < woff || sm->span_end > woff + wlen) {
            uint64_t want = end - sm->span_off < WDS_WINDOW ? end - sm->span_off : WDS_WINDOW;
            if (want < len)
                want = len;
            if (want > cap) {
                uint8_t *nw = realloc(win, (size_t)want);
                if (!nw) {
                    rc = sl_fail(SL_ENOMEM, "sl_dataset_walk: %s: out of memory", rec->file);
                    goto out;
                }
                win = nw;
                cap = (size_t)want;
            }
            wlen = 0;
            if ((rc = sl_bytes_read(rec->file, win, (size_t)want, sm->span_off))) {
                rec->data = NULL;
                rec->len = 0;
                rc = report(c, rec, rc);
                goto out;
            }
            woff = sm->span_off;
            wlen = want;
        }
        rec->data = win + (sm->span_off - woff);
        rec->len = (size_t)len;
        if (scan && i + 1 == ix.nsamples) {
            sl_image_example ex;
            if ((cut = sl_wds_sample_decode(rec->data, rec->len, rec->label_key, &ex) != SL_OK))
                break;
        }
        (*n)++;
        if ((rc = visit(c, rec)))
            goto out;
    }
    if (scan) {
        if (!cut) {
            rec->recno = ix.nsamples;
            rec->offset = end;
            key[0] = 0;
        }
        rec->data = NULL;
        rec->len = 0;
        sl_fail(scan, "%s", msg);
        rc = report(c, rec, scan);
        goto out;
    }
    *clean = 1;
    rc = SL_OK;
out:
    rec->key = NULL;
    free(key);
    free(win);
    sl_wds_index_fini(&ix);
    return rc;
}

int sl_dataset_walk(const sl_dataset *ds, const sl_walk_visitor *v)
{
    walk_ctx c = {.v = v};
    int rc = SL_OK;
    if (!ds || !v)
        return sl_fail(SL_EINVAL, "sl_dataset_walk: NULL argument");
    c.files_total = file_count(ds);
    c.start = c.last_call = sl_now_s();
    for (size_t si = 0; si < ds->nsplits && !rc; si++) {
        const sl_dataset_split *s = &ds->splits[si];
        for (size_t fi = 0; fi < s->nfiles && !rc; fi++) {
            sl_walk_record rec = {.split = s, .file = s->files[fi], .file_index = fi,
                                  .label_key = ds->label_key};
            uint64_t n = 0;
            int clean = 0;
            if (s->format == SL_FORMAT_LMDB)
                rec.offset = SL_WALK_NO_OFFSET;
            if (v->file_begin && (rc = v->file_begin(v->arg, s, rec.file)))
                break;
            if (s->format == SL_FORMAT_WDS) /* records/wds.h */
                rc = walk_wds(&c, &rec, &n, &clean);
            else if (s->format == SL_FORMAT_LMDB)
                rc = walk_lmdb(&c, &rec, &n, &clean);
            else
                rc = walk_tfrecord(&c, &rec, &n, &clean);
            c.files_done++;
            if (!rc && v->file_end)
                rc = v->file_end(v->arg, s, rec.file, n, clean);
            if (!rc)
                rc = progress(&c);
        }
    }
    return rc;
}

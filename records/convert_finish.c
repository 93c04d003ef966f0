/*
 * records/convert_finish.c - sl_convert_finish_plan (records.h): check
 * every shard of a plan's output, write the indexes that are missing or
 * wrong and dataset.json, or name what is missing or damaged and the task
 * that writes it.
 *
 * DESIGN
 *   Per shard (on tc->threads threads, each claiming the next shard):
 *   its receipt (records/convert_task.h) must be there and this plan's;
 *   the shard is read once, start to end, through the byte source (local
 *   or s3://), its CRC-32C and size compared with the receipt's; a
 *   TFRecord shard's records are walked frame by frame, both CRCs of each
 *   checked (sl_tfrecord_frame_check), a WebDataset tar is scanned member
 *   by member (sl_wds_index_build: header checksums, sizes, the end
 *   blocks); the record count must be the receipt's, and the receipt's
 *   records plus its skipped inputs the plan's inputs for the shard. The
 *   index that this scan gives is the one the writer writes (the same
 *   append, records/wds.c; the same DALI lines); an index that is absent
 *   or differs is written. So a shard set that passes is the set a
 *   one-machine convert writes, index for index.
 *   Nothing is written to dataset.json unless every shard passes; then the
 *   split goes in as sl_convert_run puts it (convert_plan.c's
 *   sl_convert_manifest_update), and OUT/.NAME.plan becomes .NAME.done.
 *   Left-over private folders of killed tasks (OUT/.NAME.tmp-*) are
 *   removed: the finish runs when no task does.
 *
 * Threading: the workers share only the claim counter (under mu); each
 * writes its own shard's slot; reports are made on the calling thread
 * after the join, in shard order.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytesrc.h"
#include "convert_task.h"
#include "remote_put.h"
#include "wds.h"

static const char fn[] = "sl_convert_finish_plan";

#define WIN_CHUNK ((size_t)8 << 20)
#define FIN_MAX_THREADS 64

enum { SH_OK, SH_MISSING, SH_DAMAGED };

typedef struct fin_shard {
    int state;
    int have_receipt;
    int idx_written;
    char what[768];
    sl_receipt r;
} fin_shard;

typedef struct fin_ctx {
    const sl_plan *p;
    int fsync;
    fin_shard *sh;
    pthread_mutex_t mu;
    unsigned next;
    int err;             /* a failure that is not the shard's (memory, writing an index) */
    char errmsg[SL_ERRMSG_MAX];
} fin_ctx;

/* ---------------------------------------------------------------- a window on a file */
typedef struct win {
    const char *path;
    uint64_t size, boff;
    uint8_t *buf;
    size_t cap, blen;
    uint32_t crc;        /* of bytes [0, boff + blen) */
} win;

/* [off, off + n) of w's file in memory at *out; reads forward only. */
static int win_get(win *w, uint64_t off, size_t n, const uint8_t **out)
{
    if (off >= w->boff && off + n <= w->boff + w->blen) {
        *out = w->buf + (off - w->boff);
        return SL_OK;
    }
    uint64_t end = w->boff + w->blen;
    size_t keep = off < end ? (size_t)(end - off) : 0;
    if (keep)
        memmove(w->buf, w->buf + (w->blen - keep), keep);
    w->boff = end - keep;
    w->blen = keep;
    size_t need = n > WIN_CHUNK ? n : WIN_CHUNK;
    if (need > w->cap) {
        uint8_t *nb = realloc(w->buf, need);
        if (!nb)
            return sl_fail(SL_ENOMEM, "%s: %s: out of memory (%zu bytes)", fn, w->path, need);
        w->buf = nb;
        w->cap = need;
    }
    uint64_t left = w->size - (w->boff + w->blen);
    size_t want = w->cap - w->blen < left ? w->cap - w->blen : (size_t)left;
    if (want) {
        int rc = sl_bytes_read(w->path, w->buf + w->blen, want, w->boff + w->blen);
        if (rc)
            return rc;
        w->crc = sl_crc32c(w->crc, w->buf + w->blen, want);
        w->blen += want;
    }
    if (off + n > w->boff + w->blen)
        return SL_ECORRUPT; /* the caller names it */
    *out = w->buf + (off - w->boff);
    return SL_OK;
}

/* ---------------------------------------------------------------- one shard */
static void damaged(fin_shard *sh, int state, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void damaged(fin_shard *sh, int state, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sh->what, sizeof sh->what, fmt, ap);
    va_end(ap);
    sh->state = state;
}

/* TFRecord: walk the frames; the DALI index text into *idx. */
static int walk_tfrecord(win *w, fin_shard *sh, uint64_t *records, char **idx, size_t *idx_len)
{
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    uint64_t pos = 0, n = 0;
    if (!text)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    while (pos < w->size) {
        const uint8_t *h;
        if (w->size - pos < SL_TFRECORD_OVERHEAD || win_get(w, pos, 12, &h) == SL_ECORRUPT) {
            damaged(sh, SH_DAMAGED, "record %llu @ %llu: truncated", (unsigned long long)n,
                    (unsigned long long)pos);
            break;
        }
        uint64_t l = 0;
        for (int i = 0; i < 8; i++)
            l |= (uint64_t)h[i] << (8 * i);
        if (l > SL_TFRECORD_MAX_LEN || l + SL_TFRECORD_OVERHEAD > w->size - pos) {
            damaged(sh, SH_DAMAGED, "record %llu @ %llu: length %llu past the end of the file",
                    (unsigned long long)n, (unsigned long long)pos, (unsigned long long)l);
            break;
        }
        const uint8_t *rec;
        int rc = win_get(w, pos, (size_t)(l + SL_TFRECORD_OVERHEAD), &rec);
        if (rc && rc != SL_ECORRUPT) {
            free(text);
            return rc;
        }
        sl_frame_status fs = rc ? SL_FRAME_SIZE : sl_tfrecord_frame_check(rec, l + SL_TFRECORD_OVERHEAD);
        if (fs != SL_FRAME_OK) {
            damaged(sh, SH_DAMAGED, "record %llu @ %llu: %s", (unsigned long long)n,
                    (unsigned long long)pos, sl_tfrecord_frame_what(fs));
            break;
        }
        if (len + SL_INDEX_LINE_MAX > cap) {
            char *nt = realloc(text, cap *= 2);
            if (!nt) {
                free(text);
                return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
            }
            text = nt;
        }
        len += sl_put_index_line(text + len, pos, l + SL_TFRECORD_OVERHEAD);
        pos += l + SL_TFRECORD_OVERHEAD;
        n++;
    }
    *records = n;
    *idx = text;
    *idx_len = len;
    return SL_OK;
}

/* The rest of the file through the window (its CRC). */
static int win_drain(win *w)
{
    const uint8_t *p;
    while (w->boff + w->blen < w->size) {
        int rc = win_get(w, w->boff + w->blen, 1, &p);
        if (rc)
            return rc;
    }
    return SL_OK;
}

static int check_index(fin_ctx *c, fin_shard *sh, const char *name, const char *text, size_t len)
{
    char idx[560], *path;
    uint8_t *old = NULL;
    size_t olen = 0;
    snprintf(idx, sizeof idx, "%s.idx", name);
    if (!(path = sl_out_join(c->p->out, idx)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    int rc = sl_bytes_get(path, &old, &olen);
    free(path);
    if (rc == SL_ENOENT)
        sl_clear_error();
    else if (rc)
        return rc;
    int same = !rc && olen == len && !memcmp(old, text, len);
    free(old);
    if (same)
        return SL_OK;
    sh->idx_written = 1;
    return sl_out_put(c->p->out, idx, text, len, c->fsync);
}

static int check_shard(fin_ctx *c, unsigned s, fin_shard *sh)
{
    const sl_plan *p = c->p;
    char name[512], *path = NULL, *text = NULL;
    size_t tlen = 0;
    uint64_t records = 0, items = sl_convert_shard_begin(p->inputs, p->shards, s + 1) -
                                  sl_convert_shard_begin(p->inputs, p->shards, s);
    win w = {0};
    int rc = sl_plan_shard_name(p, s, name, sizeof name);
    if (rc)
        return rc;
    if (!(path = sl_out_join(p->out, name)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    w.path = path;
    rc = sl_bytes_size(path, &w.size);
    int lr = sl_receipt_load(p, s, &sh->r);
    sh->have_receipt = lr == SL_OK;
    if (rc == SL_ENOENT) {
        damaged(sh, SH_MISSING, "missing");
        rc = SL_OK;
        goto out;
    }
    if (rc)
        goto out;
    if (lr == SL_ENOENT) {
        damaged(sh, SH_MISSING, "no receipt (its task stopped before it was published)");
        goto out;
    }
    if (lr) {
        damaged(sh, SH_DAMAGED, "%s", sl_errmsg());
        goto out;
    }
    if (p->format == SL_FORMAT_WDS) {
        sl_wds_index ix;
        if ((rc = win_drain(&w)) == SL_OK) {
            rc = sl_wds_index_build(path, &ix);
            if (rc == SL_ECORRUPT) {
                damaged(sh, SH_DAMAGED, "%s", sl_errmsg());
                rc = SL_OK;
                goto out;
            }
            if (!rc) {
                records = ix.nsamples;
                rc = sl_wds_index_format(&ix, &text, &tlen);
                sl_wds_index_fini(&ix);
            }
        }
    } else {
        rc = walk_tfrecord(&w, sh, &records, &text, &tlen);
        if (!rc && sh->state == SH_OK)
            rc = win_drain(&w);
    }
    if (rc == SL_ECORRUPT) {
        damaged(sh, SH_DAMAGED, "%s", sl_errmsg());
        rc = SL_OK;
    }
    if (rc || sh->state != SH_OK)
        goto out;
    if (w.size != sh->r.size || w.crc != sh->r.crc)
        damaged(sh, SH_DAMAGED, "%llu bytes with CRC-32C %08x; its receipt says %llu bytes, %08x",
                (unsigned long long)w.size, w.crc, (unsigned long long)sh->r.size, sh->r.crc);
    else if (records != sh->r.records)
        damaged(sh, SH_DAMAGED, "%llu records; its receipt says %llu", (unsigned long long)records,
                (unsigned long long)sh->r.records);
    else if (records + sh->r.nskipped != items)
        damaged(sh, SH_DAMAGED, "%llu records and %zu skipped inputs; the plan gives it %llu inputs",
                (unsigned long long)records, sh->r.nskipped, (unsigned long long)items);
    else
        rc = check_index(c, sh, name, text, tlen);
out:
    if (lr && lr != SL_ENOENT)
        sl_clear_error();
    free(text);
    free(w.buf);
    free(path);
    return rc;
}

static void *worker(void *arg)
{
    fin_ctx *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        unsigned s = c->err ? c->p->shards : c->next++;
        pthread_mutex_unlock(&c->mu);
        if (s >= c->p->shards)
            break;
        int rc = check_shard(c, s, &c->sh[s]);
        if (rc) {
            pthread_mutex_lock(&c->mu);
            if (!c->err) {
                c->err = rc;
                snprintf(c->errmsg, sizeof c->errmsg, "%s", sl_errmsg());
            }
            pthread_mutex_unlock(&c->mu);
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- finishing */
/* OUT/.NAME.tmp-*: private folders of tasks that were killed. */
static void remove_task_folders(const sl_plan *p)
{
    char prefix[600];
    snprintf(prefix, sizeof prefix, ".%s.tmp-", p->name);
    char **names;
    size_t n;
    if (sl_bytes_list(p->out, &names, &n) == SL_OK) {
        for (size_t i = 0; i < n; i++)
            if (!strncmp(names[i], prefix, strlen(prefix))) {
                char *sub = sl_path_join(p->out, names[i]); /* "…/" of a folder: rm -r */
                if (sub)
                    sl_convert_remove_dir(sub);
                free(sub);
            }
        sl_bytes_names_free(names, n);
    }
    sl_clear_error();
}

/* dataset.json and the done marker. */
static int write_manifest(const sl_plan *p, const sl_convert_result *total, int do_sync)
{
    sl_convert_state st;
    sl_convert_config cfg = p->cfg;
    cfg.fsync = do_sync;
    memset(&st, 0, sizeof st);
    st.cfg = &cfg;
    st.class_names = (const char *const *)p->class_names;
    st.nclass_names = p->nclass_names;
    st.num_classes = p->num_classes;
    size_t pl = strlen(p->out) + strlen(p->name) + 16;
    if (!(st.plan_path = malloc(pl)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    snprintf(st.plan_path, pl, "%s/.%s.plan", p->out, p->name);
    int rc;
    if (!sl_out_remote(p->out)) {
        rc = sl_convert_finish(&st, total);
    } else {
        char tmpl[] = "/tmp/sluice-finish-XXXXXX", name[600];
        const char *dir = mkdtemp(tmpl);
        char *local = dir ? sl_path_join(dir, SL_MANIFEST_FILE) : NULL;
        char *remote = sl_out_join(p->out, SL_MANIFEST_FILE);
        rc = !dir ? sl_fail(SL_EIO, "%s: mkdtemp: %s", fn, tmpl)
             : !local || !remote ? sl_fail(SL_ENOMEM, "%s: out of memory", fn)
                                 : sl_convert_manifest_update(&st, total, dir);
        if (!rc)
            rc = sl_put_file(remote, local);
        snprintf(name, sizeof name, ".%s.done", p->name);
        if (!rc)
            rc = sl_out_put(p->out, name, p->text, strlen(p->text), do_sync);
        if (!rc)
            rc = sl_put_delete(st.plan_path);
        if (dir)
            sl_convert_remove_dir(dir);
        free(local);
        free(remote);
    }
    free(st.plan_path);
    return rc;
}

int sl_convert_finish_plan(const sl_convert_task_config *tc, sl_convert_finish_result *res)
{
    if (!tc || !res)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    memset(res, 0, sizeof *res);
    int rc;
    sl_plan p;
    fin_ctx c;
    int done = 0;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    if ((rc = sl_plan_begin(fn, tc, &p)) || (rc = sl_plan_check_out(fn, &p, &done)))
        goto out;
    c.p = &p;
    c.fsync = tc->fsync;
    if (!(c.sh = calloc(p.shards, sizeof *c.sh))) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    long nt = tc->threads ? (long)tc->threads : sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > FIN_MAX_THREADS ? FIN_MAX_THREADS : nt;
    nt = nt > (long)p.shards ? (long)p.shards : nt;
    pthread_t th[FIN_MAX_THREADS];
    long started = 0;
    for (long i = 1; i < nt; i++, started++)
        if (pthread_create(&th[i - 1], NULL, worker, &c))
            break;
    worker(&c);
    for (long i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (c.err) {
        rc = sl_fail(c.err, "%s", c.errmsg);
        goto out;
    }
    char tasks_list[256] = "";
    size_t tl = 0;
    unsigned last_task = (unsigned)-1;
    res->total.inputs = p.inputs;
    res->total.shards = p.shards;
    for (unsigned s = 0; s < p.shards; s++) {
        fin_shard *sh = &c.sh[s];
        unsigned task = sl_plan_shard_task(&p, s);
        if (sh->have_receipt) {
            res->total.records += sh->r.records;
            res->total.bytes += sh->r.bytes;
            res->total.skipped += sh->r.nskipped;
            for (size_t i = 0; tc->task_skipped && i < sh->r.nskipped; i++)
                tc->task_skipped(tc->report_arg, task, sh->r.skipped_input[i], sh->r.skipped_reason[i]);
        }
        res->indexes_written += (unsigned)sh->idx_written;
        if (sh->state == SH_OK)
            continue;
        if (sh->state == SH_MISSING)
            res->missing++;
        else
            res->damaged++;
        if (tc->problem) {
            char name[512];
            sl_plan_shard_name(&p, s, name, sizeof name);
            tc->problem(tc->report_arg, s, task, name, sh->what);
        }
        if (task != last_task && tl + 16 < sizeof tasks_list)
            tl += (size_t)snprintf(tasks_list + tl, sizeof tasks_list - tl, "%s%u", tl ? ", " : "", task);
        last_task = task;
    }
    if (res->missing || res->damaged) {
        rc = sl_fail(res->missing ? SL_ENOENT : SL_ECORRUPT,
                     "%s: %s: %u of %u shards missing, %u damaged: run task%s %s of %u again, then "
                     "--finish", fn, p.out, res->missing, p.shards, res->damaged,
                     strchr(tasks_list, ',') ? "s" : "", tasks_list, p.tasks);
        goto out;
    }
    res->total.shards_kept = p.shards;
    if ((rc = write_manifest(&p, &res->total, tc->fsync)))
        goto out;
    if (!sl_out_remote(p.out))
        remove_task_folders(&p);
out:
    for (unsigned s = 0; c.sh && s < p.shards; s++)
        sl_receipt_fini(&c.sh[s].r);
    free(c.sh);
    pthread_mutex_destroy(&c.mu);
    sl_plan_fini(&p);
    return rc;
}

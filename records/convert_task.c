/*
 * records/convert_task.c - sl_convert_task (records.h): the shards of one
 * task of a plan (records/convert_planfile.c), written by the converter's
 * own workers (records/convert.c), then published.
 *
 * DESIGN
 *   State. The plan's first line gives the options; the task reads only
 *   its own shard lines (convert_planfile.c's sl_plan_state: its inputs,
 *   at their output positions); every other task's shard is marked kept,
 *   so sl_convert_write's chunks cover this task's shards only. The bytes
 *   of a shard are therefore those of sl_convert_run: same inputs at the
 *   same positions, same options, same code.
 *
 *   Idempotent, race-safe publishing. Each run writes into a private
 *   folder (st->write_dir): OUT/.NAME.tmp-HOST-PID-XXXXXX for a local OUT
 *   (same file system: a rename publishes), a folder under TMPDIR for an
 *   s3:// OUT. At each shard's close (st->on_shard, on the committing
 *   thread) the task computes the file's CRC-32C, writes its receipt
 *   (convert_task.h) there too, and publishes index, shard, receipt in
 *   that order: local by rename(2) (atomic, and over an equal file when a
 *   re-run or a racing worker published first), s3 by PUT (an object
 *   appears only whole). A shard with its receipt is whole; a shard
 *   without one is rewritten by the next run, with the same bytes. A
 *   run keeps a shard whose receipt is this plan's and whose file and index
 *   are there with the receipt's size. Temp names never collide (a private
 *   folder per run), so two workers on one task never write into each
 *   other's files; they only rename equal files over each other.
 *
 *   Uploads (s3:// OUT) run on one publisher thread, so the next shard is
 *   converted while the last one goes up. Its queue holds shard numbers;
 *   its first error is sticky: the next shard's close returns it (the run
 *   stops as on a writer's error) and so does the end of the run.
 *
 *   Skipped inputs reach cfg->skipped in output order on the committing
 *   thread (convert.c); they are kept per shard for its receipt and passed
 *   on to tc->skipped.
 *
 * Threading: the calling thread commits and publishes (locally); the
 * publisher thread uploads. mu guards the queue, stop, and the sticky error;
 * the publisher holds it only to take a shard number or record an error.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytesrc.h"
#include "common/json.h"
#include "convert_task.h"
#include "remote_put.h"

static const char fn[] = "sl_convert_task";

typedef struct task_ctx {
    const sl_convert_task_config *tc;
    sl_plan *p;
    unsigned k;
    uint64_t inputs;            /* this task's */
    char *tmp;                  /* the private folder */
    int remote;
    /* the skips of the shard being written, in order */
    char **sk_in, **sk_why;
    size_t nsk, capsk;
    int sk_oom;
    /* the publisher (s3) */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned *queue;
    size_t qhead, qtail;
    int stop, err;
    char errmsg[SL_ERRMSG_MAX];
} task_ctx;

/* ---------------------------------------------------------------- skips */
static void on_skip(void *arg, const char *input, const char *reason)
{
    task_ctx *c = arg;
    if (c->nsk == c->capsk) {
        size_t cap = c->capsk ? 2 * c->capsk : 16;
        char **a = realloc(c->sk_in, cap * sizeof *a), **b = a ? realloc(c->sk_why, cap * sizeof *b) : NULL;
        if (a)
            c->sk_in = a;
        if (b)
            c->sk_why = b;
        if (!a || !b) {
            c->sk_oom = 1;
            return;
        }
        c->capsk = cap;
    }
    c->sk_in[c->nsk] = strdup(input);
    c->sk_why[c->nsk] = strdup(reason);
    if (!c->sk_in[c->nsk] || !c->sk_why[c->nsk])
        c->sk_oom = 1;
    c->nsk++;
    if (c->tc->skipped)
        c->tc->skipped(c->tc->skipped_arg, input, reason);
}

static void skips_clear(task_ctx *c)
{
    for (size_t i = 0; i < c->nsk; i++) {
        free(c->sk_in[i]);
        free(c->sk_why[i]);
    }
    c->nsk = 0;
}

static void on_progress(void *arg, uint64_t done, uint64_t total, uint64_t bytes)
{
    task_ctx *c = arg;
    if (c->tc->progress)
        c->tc->progress(c->tc->progress_arg, done >= total ? c->inputs : done, c->inputs, bytes);
}

/* ---------------------------------------------------------------- publish */
/* tmp/name -> OUT/name: rename, or PUT then remove. */
static int publish_one(task_ctx *c, const char *name)
{
    char *src = sl_path_join(c->tmp, name), *dst = sl_out_join(c->p->out, name);
    int rc = SL_OK;
    if (!src || !dst)
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    else if (c->remote) {
        if (!(rc = sl_put_file(dst, src)))
            unlink(src);
    } else if (rename(src, dst) != 0) {
        rc = sl_fail(SL_EIO, "%s: rename %s to %s: %s", fn, src, dst, strerror(errno));
    }
    free(src);
    free(dst);
    return rc;
}

/* Index, shard, receipt of shard s. */
static int publish(task_ctx *c, unsigned s)
{
    char name[512], idx[560], rec[600];
    int rc = sl_plan_shard_name(c->p, s, name, sizeof name);
    if (!rc)
        rc = sl_plan_receipt_name(c->p, s, rec, sizeof rec);
    snprintf(idx, sizeof idx, "%s.idx", name);
    if (!rc)
        rc = publish_one(c, idx);
    if (!rc)
        rc = publish_one(c, name);
    if (!rc)
        rc = publish_one(c, rec);
    if (!rc && !c->remote && c->tc->fsync)
        rc = sl_fsync_dir(c->p->out, fn);
    return rc;
}

static void *publisher(void *arg)
{
    task_ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->qhead == c->qtail && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->qhead == c->qtail || c->err)
            break;
        unsigned s = c->queue[c->qhead];
        pthread_mutex_unlock(&c->mu);
        int rc = publish(c, s);
        pthread_mutex_lock(&c->mu);
        c->qhead++;
        if (rc && !c->err) {
            c->err = rc;
            snprintf(c->errmsg, sizeof c->errmsg, "%s", sl_errmsg());
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int sticky(task_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->err ? sl_fail(c->err, "%s", c->errmsg) : SL_OK;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* The receipt of shard s (whole in the private folder) next to it. */
static int write_receipt(task_ctx *c, unsigned s, uint64_t records, uint64_t bytes)
{
    char name[512], rec[600], hex[24], crc[16];
    uint64_t size;
    uint32_t sum;
    int rc = sl_plan_shard_name(c->p, s, name, sizeof name);
    if (!rc)
        rc = sl_plan_receipt_name(c->p, s, rec, sizeof rec);
    char *path = rc ? NULL : sl_path_join(c->tmp, name);
    if (!rc && !path)
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    if (!rc)
        rc = sl_out_crc(path, &size, &sum);
    free(path);
    if (rc)
        return rc;
    if (c->sk_oom)
        return sl_fail(SL_ENOMEM, "%s: out of memory for the skipped inputs", fn);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->p->digest);
    snprintf(crc, sizeof crc, "%08x", sum);
    cJSON *o = cJSON_CreateObject(), *a = NULL;
    int ok = o && cJSON_AddStringToObject(o, "plan", hex) && sl_json_add_int(o, "shard", s) &&
             sl_json_add_int(o, "task", c->k) && cJSON_AddStringToObject(o, "file", name) &&
             sl_json_add_int(o, "records", (int64_t)records) &&
             sl_json_add_int(o, "bytes", (int64_t)bytes) && sl_json_add_int(o, "size", (int64_t)size) &&
             cJSON_AddStringToObject(o, "crc32c", crc) && (a = cJSON_AddArrayToObject(o, "skipped"));
    for (size_t i = 0; ok && i < c->nsk; i++) {
        const char *pair[2] = {c->sk_in[i], c->sk_why[i]};
        cJSON *x = cJSON_CreateStringArray(pair, 2);
        ok = x && cJSON_AddItemToArray(a, x);
        if (!ok)
            cJSON_Delete(x);
    }
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    rc = sl_out_put(c->tmp, rec, text, strlen(text), c->tc->fsync);
    cJSON_free(text);
    skips_clear(c);
    return rc;
}

static int on_shard(void *arg, unsigned s, uint64_t records, uint64_t bytes)
{
    task_ctx *c = arg;
    int rc = c->remote ? sticky(c) : SL_OK;
    if (!rc)
        rc = write_receipt(c, s, records, bytes);
    if (rc)
        return rc;
    if (!c->remote)
        return publish(c, s);
    pthread_mutex_lock(&c->mu);
    c->queue[c->qtail++] = s;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return SL_OK;
}

/* ---------------------------------------------------------------- keep */
/* Own shards already whole with this plan's receipt are kept. */
static int keep_whole(task_ctx *c, sl_convert_state *st, unsigned f, unsigned e)
{
    for (unsigned s = 0; s < st->nshards; s++)
        st->kept[s] = s < f || s >= e;
    for (unsigned s = f; s < e; s++) {
        sl_receipt r;
        char name[512], idx[560];
        uint64_t size, isize;
        int rc = sl_receipt_load(c->p, s, &r);
        if (rc) { /* absent or not this plan's: written again */
            sl_clear_error();
            continue;
        }
        char *path = NULL, *ipath = NULL;
        int keep = !sl_plan_shard_name(c->p, s, name, sizeof name);
        snprintf(idx, sizeof idx, "%s.idx", name);
        keep = keep && (path = sl_out_join(c->p->out, name)) && (ipath = sl_out_join(c->p->out, idx)) &&
               sl_bytes_size(path, &size) == SL_OK && size == r.size &&
               sl_bytes_size(ipath, &isize) == SL_OK;
        sl_clear_error();
        free(path);
        free(ipath);
        if (keep) {
            uint64_t items = sl_convert_shard_begin(st->in.n, st->nshards, s + 1) -
                             sl_convert_shard_begin(st->in.n, st->nshards, s);
            st->kept[s] = 1;
            st->nkept++;
            st->kept_records += r.records;
            st->kept_bytes += r.bytes;
            st->kept_skipped += r.nskipped;
            st->kept_inputs += items;
        }
        sl_receipt_fini(&r);
    }
    return SL_OK;
}

/* ---------------------------------------------------------------- the folder */
static int make_tmp(task_ctx *c)
{
    char host[64] = "host", *t;
    gethostname(host, sizeof host - 1);
    host[strcspn(host, "/.")] = 0;
    if (c->remote) {
        const char *base = getenv("TMPDIR");
        size_t n = strlen(base && *base ? base : "/tmp") + 32;
        if (!(t = malloc(n)))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        snprintf(t, n, "%s/sluice-task-XXXXXX", base && *base ? base : "/tmp");
    } else {
        size_t n = strlen(c->p->out) + strlen(c->p->name) + strlen(host) + 64;
        if (!(t = malloc(n)))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        snprintf(t, n, "%s/.%s.tmp-%s-%ld-XXXXXX", c->p->out, c->p->name, host, (long)getpid());
    }
    if (!mkdtemp(t)) {
        int rc = sl_fail(SL_EIO, "%s: mkdtemp %s: %s", fn, t, strerror(errno));
        free(t);
        return rc;
    }
    c->tmp = t;
    return SL_OK;
}

int sl_convert_task(const sl_convert_task_config *tc, sl_convert_result *res)
{
    if (!tc || !res)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    memset(res, 0, sizeof *res);
    int rc;
    sl_plan p;
    sl_convert_state st;
    task_ctx c;
    unsigned f = 0, e = 0;
    int done = 0; /* a finished split: its shards are kept as any whole ones */
    memset(&st, 0, sizeof st);
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    c.tc = tc;
    c.p = &p;
    c.k = tc->task;
    if ((rc = sl_plan_begin(fn, tc, &p)))
        goto out;
    if (tc->tasks != p.tasks) {
        rc = sl_fail(SL_EINVAL, "%s: --tasks %u: %s was cut for %u tasks (0..%u); a different split "
                     "needs a new plan (--plan-out ... --tasks %u)", fn, tc->tasks, tc->plan, p.tasks,
                     p.tasks - 1, tc->tasks);
        goto out;
    }
    if (tc->task >= p.tasks) {
        rc = sl_fail(SL_EINVAL, "%s: --task %u: %s has tasks 0..%u", fn, tc->task, tc->plan,
                     p.tasks - 1);
        goto out;
    }
    if ((rc = sl_plan_check_out(fn, &p, &done)))
        goto out;
    p.cfg.threads = tc->threads;
    p.cfg.strict = tc->strict;
    p.cfg.fsync = tc->fsync;
    p.cfg.progress = on_progress;
    p.cfg.progress_arg = &c;
    p.cfg.skipped = on_skip;
    p.cfg.skipped_arg = &c;
    p.cfg.cancel = tc->cancel;
    if ((rc = sl_plan_state(fn, &p, tc->task, &st)))
        goto out;
    sl_plan_task_shards(&p, tc->task, &f, &e);
    c.inputs = sl_convert_shard_begin(p.inputs, p.shards, e) - sl_convert_shard_begin(p.inputs, p.shards, f);
    c.remote = sl_out_remote(p.out);
    if ((rc = keep_whole(&c, &st, f, e)))
        goto out;
    if (st.nkept < e - f) {
        if ((rc = make_tmp(&c)))
            goto out;
        st.write_dir = c.tmp;
        st.on_shard = on_shard;
        st.on_shard_arg = &c;
        if (c.remote) {
            if (!(c.queue = calloc(p.shards, sizeof *c.queue))) {
                rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
                goto out;
            }
            int pe = pthread_create(&c.th, NULL, publisher, &c);
            if (pe) {
                rc = sl_fail(SL_ENOMEM, "%s: pthread_create: %s", fn, strerror(pe));
                goto out;
            }
            c.th_started = 1;
        }
    }
    rc = sl_convert_write(&st, res);
out:
    if (c.th_started) {
        pthread_mutex_lock(&c.mu);
        c.stop = 1;
        if (rc && !c.err)
            c.err = rc; /* the run failed: publish nothing more */
        pthread_cond_broadcast(&c.cv);
        pthread_mutex_unlock(&c.mu);
        pthread_join(c.th, NULL);
        if (!rc)
            rc = sticky(&c);
    }
    if (c.tmp) {
        char keep[SL_ERRMSG_MAX];
        snprintf(keep, sizeof keep, "%s", sl_errmsg());
        sl_convert_remove_dir(c.tmp); /* what a failed run left; empty otherwise */
        if (rc)
            sl_fail(rc, "%s", keep);
        free(c.tmp);
    }
    res->inputs = c.inputs;
    res->shards = e - f;
    res->shards_kept = st.nkept;
    skips_clear(&c);
    free(c.sk_in);
    free(c.sk_why);
    free(c.queue);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    sl_plan_state_fini(&p, tc->task, &st);
    sl_plan_fini(&p);
    return rc;
}

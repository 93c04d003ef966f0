/*
 * records/convert.c - sl_convert_run: images (folder, list, IDX) into
 * TFRecord shards or an LMDB store, in parallel, deterministically,
 * atomically and resumably. Planning, resume and the manifest live in
 * records/convert_plan.c; this file runs the workers and commits.
 *
 * DESIGN
 *
 *   Output order. The inputs are permuted once (seeded Fisher-Yates, or the
 *   identity with shuffle = 0); output position pos holds input order[pos],
 *   and shard s holds positions [n*s/N, n*(s+1)/N). The positions of every
 *   shard that is not kept by --resume are cut into chunks of CV_CHUNK
 *   consecutive positions (a chunk never spans two shards; an empty shard is
 *   one empty chunk so that its file is still written). Chunk k's records
 *   are committed before chunk k+1's, so the bytes of every shard depend on
 *   (inputs, seed, options) alone, never on the thread count or timing.
 *
 *   Threads. cfg->threads workers (0 = one per core) fill chunks; the
 *   calling thread is the only committer. A worker claims the next chunk
 *   number, reads / probes / transcodes / encodes its inputs into that
 *   chunk's slot (a reusable buffer of serialized Examples), marks it done
 *   and claims the next. The committer waits for the chunk at the head of
 *   the order, appends its records to the current shard writer (opening each
 *   shard at its first chunk, closing = atomically renaming it into place at
 *   its last), frees the slot and moves on. The writer lives on one thread
 *   because an LMDB write transaction belongs to the thread that began it
 *   (lmdb.h: a transaction must only be used by a single thread), and
 *   because it keeps all writer state single-threaded.
 *
 *   Queue / memory bound. Slots form a ring of W = 4 * threads chunks
 *   (CV_WINDOW_MAX at most): chunk k may be claimed only once chunk k - W is
 *   committed, so at most W chunks of encoded records exist at once.
 *
 *   Lock order. One mutex (job.mu) guards the claim counter, the commit
 *   head, the slots' done flags, the stop flag and the sticky error;
 *   cv_done wakes the committer (a chunk is done, or a worker failed),
 *   cv_space wakes workers (the head moved, or stop). mu is never held
 *   during file I/O, image work or callbacks. A slot is written only by the
 *   worker that claimed its chunk, then read only by the committer after it
 *   sees done under mu. The progress and skipped callbacks run on the
 *   calling thread, in output order.
 *
 *   Errors. An input that cannot be read or decoded is skipped (reported
 *   through cfg->skipped by the committer, in output order, and counted);
 *   with cfg->strict the first skip in output order is the error. Any other
 *   failure (I/O on the output, memory) is sticky: the first one is kept with
 *   its message, every worker stops at its next claim, the committer stops,
 *   and after the join the open writer is aborted (its temp files
 *   removed). Shards already closed are whole and stay; the plan file stays
 *   too, so --resume can finish the job. A stop request (cfg->cancel, read
 *   by the committer before each chunk) ends the run the same way, with
 *   SL_ECANCELED: Ctrl-C in a binding costs at most the open shard.
 *
 *   Restart markers (cfg->restart_mcus / restart_rows): a worker passes
 *   every JPEG it stores through its own sl_jpeg_restarter (records/
 *   restart.c) after reading or re-encoding it; the counts travel in the
 *   chunk's items to the committer like the rest.
 *
 *   Tasks (records/convert_task.c) run this same machinery through
 *   sl_convert_write on a state of their own: the other tasks' shards
 *   marked kept, the writers pointed at a private folder (st->write_dir),
 *   and st->on_shard called on the committing thread after each shard's
 *   close to publish it. A listed URL is read through the byte source
 *   (records/convert_url.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bytesrc.h"
#include "common/clock.h"
#include "records_int.h"
#include "wds.h"

#define CV_CHUNK 64                    /* inputs per chunk */
#define CV_WINDOW_MAX 64               /* chunks in flight, at most */
#define CV_MAX_THREADS 256
#define CV_MAX_FILE ((uint64_t)1 << 30) /* a bigger "image" is skipped */
#define CV_PROGRESS_NS 100000000ll     /* 10 progress calls a second at most */
#define CV_REASON 320

typedef struct cv_item {
    size_t off, len;        /* the serialized Example in the slot's buffer */
    int skipped;
    int passthrough;        /* JPEG stored as read */
    int restart;            /* restart markers: 1 written, -1 kept as it was, 0 not asked */
    uint64_t markers;       /* RST markers written */
    size_t jpeg_in, jpeg_out; /* the JPEG's bytes before and after they were */
    char reason[CV_REASON]; /* why it was skipped */
} cv_item;

typedef struct cv_slot {
    int done;               /* filled and waiting for the committer (under mu) */
    cv_item items[CV_CHUNK];
    size_t nitems;
    uint8_t *buf;
    size_t len, cap;
} cv_slot;

typedef struct cv_range {
    unsigned shard;
    uint64_t begin, end;    /* output positions */
} cv_range;

typedef struct cv_job {
    const sl_convert_state *st;
    const sl_convert_config *cfg;
    cv_range *chunks;
    size_t nchunks;
    cv_slot *slots;
    size_t window;

    pthread_mutex_t mu;
    pthread_cond_t cv_done;         /* committer: a chunk is done, or stop */
    pthread_cond_t cv_space;        /* workers: the commit head moved, or stop */
    size_t next_claim, next_commit; /* under mu */
    int stop;                       /* under mu */
    int err;                        /* first error, under mu */
    char errmsg[SL_ERRMSG_MAX];

    /* Committer state: the calling thread's alone. */
    sl_tfrecord_writer *tfw;
    sl_lmdb_writer *lmw;
    sl_wds_writer *wdw;             /* --to wds: records/wds.h */
    uint64_t done, records, bytes, skipped, passthrough, reencoded;
    uint64_t restarted, restart_kept, restart_markers, restart_in, restart_out;
    uint64_t shard_records, shard_bytes; /* at the last shard close: st->on_shard's deltas */
    unsigned shards_closed;         /* whole shards written by this run */
    uint64_t last_progress;         /* sl_now_ns of the last progress call */
} cv_job;

typedef struct cv_worker {
    cv_job *job;
    pthread_t tid;
    sl_transcoder *tc;
    sl_jpeg_restarter *rs;          /* restart markers (NULL unless asked for) */
    sl_example_builder eb;
    uint8_t *file, *scratch;        /* file bytes; IDX RGB pixels */
    size_t file_cap, scratch_cap;
    char *rec_path;                 /* --from tfrecord: the shard last read (NULL: none), */
    int rec_fd;                     /* open on rec_fd for the next record of the same one */
} cv_worker;

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return SL_OK;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    uint8_t *p = realloc(*buf, c);
    if (!p)
        return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory (%zu bytes)", c);
    *buf = p;
    *cap = c;
    return SL_OK;
}

/* ------------------------------------------------------------ inputs */
/* Whole file into w->file. Unreadable inputs are skips (SL_EIMAGE). The
 * byte source's handle says what path is: a listed URL is fetched whole
 * (records/convert_url.c), a local file read into the worker's buffer. */
static int read_input(cv_worker *w, const char *path, size_t *len)
{
    char why[SL_ERRMSG_MAX];
    sl_bytesrc *src = NULL;
    sl_bytesrc_id id;
    int rc = sl_bytesrc_open(path, NULL, &src); /* the run's options: sl_io_thread_use */
    if (rc) { /* "sl_bytesrc_open: PATH: open: WHY" */
        snprintf(why, sizeof why, "%s", sl_msg_detail(sl_errmsg(), path));
        return rc == SL_ENOMEM ? rc : sl_fail(SL_EIMAGE, "cannot %s", why);
    }
    if (sl_bytesrc_is_remote(src)) {
        sl_bytesrc_close(src);
        return sl_convert_read_url(path, CV_MAX_FILE, &w->file, &w->file_cap, len);
    }
    if (sl_bytesrc_identity(src, &id) != SL_OK || !id.regular) {
        rc = sl_fail(SL_EIMAGE, "not a readable regular file");
        goto out;
    }
    if (id.size > CV_MAX_FILE) {
        rc = sl_fail(SL_EIMAGE, "%llu bytes: too large for an image", (unsigned long long)id.size);
        goto out;
    }
    uint64_t size = id.size;
    if ((rc = grow(&w->file, &w->file_cap, (size_t)size + 1)) != SL_OK)
        goto out;
    rc = sl_bytesrc_read(src, w->file, (size_t)size, 0);
    if (rc == SL_ECORRUPT) { /* it ends before the size fstat gave */
        rc = sl_fail(SL_EIMAGE, "changed size while being read");
    } else if (rc) { /* "sl_bytesrc_read: PATH: bytes A-B: read: WHY" */
        snprintf(why, sizeof why, "%s", sl_msg_detail(sl_errmsg(), path));
        rc = sl_fail(SL_EIMAGE, "%s", why);
    } else if (sl_bytesrc_identity(src, &id) != SL_OK || id.size != size) {
        rc = sl_fail(SL_EIMAGE, "changed size while being read"); /* grew, or replaced */
    }
    *len = (size_t)size;
out:
    sl_bytesrc_close(src);
    return rc;
}

static uint64_t max_pixels(const sl_convert_config *cfg)
{
    return cfg->max_pixels ? cfg->max_pixels : SL_MAX_PIXELS_DEFAULT;
}

/* An image's bytes (data, len; in w->file): passthrough or transcode. *img
 * points into data or the transcoder. */
static int encode_bytes(cv_worker *w, const uint8_t *data, size_t len, const uint8_t **img,
                        size_t *img_len, int *width, int *height, int *pass)
{
    const sl_convert_config *cfg = w->job->cfg;
    sl_image_info info;
    int rc = sl_image_probe(data, len, &info);
    if (rc)
        return rc == SL_ENOMEM ? rc : SL_EIMAGE;
    /* Every image, stored as is or not: the pipeline that reads it later
     * holds the same bound (sl_pipeline_config.max_pixels). */
    uint64_t px = (uint64_t)info.width * (uint64_t)info.height, maxpx = max_pixels(cfg);
    if (px > maxpx)
        return sl_fail(SL_EIMAGE, "%dx%d = %llu pixels: more than --max-pixels %llu", info.width,
                       info.height, (unsigned long long)px, (unsigned long long)maxpx);
    int short_side = info.width < info.height ? info.width : info.height;
    if (info.type == SL_IMAGE_JPEG && info.jpeg_passthrough &&
        (cfg->resize_short == 0 || short_side <= cfg->resize_short)) {
        if ((rc = sl_jpeg_scan(data, len, NULL)) != SL_OK)
            return rc;
        *img = data;
        *img_len = len;
        *width = info.width;
        *height = info.height;
        *pass = 1;
        return SL_OK;
    }
    return sl_transcode_jpeg(w->tc, data, len, cfg->quality, cfg->resize_short, img, img_len, width,
                             height);
}

/* A file input. */
static int encode_file(cv_worker *w, const char *path, const uint8_t **img, size_t *img_len,
                       int *width, int *height, int *pass)
{
    size_t len = 0;
    int rc = read_input(w, path, &len);
    return rc ? rc : encode_bytes(w, w->file, len, img, img_len, width, height, pass);
}

/* A record of a TFRecord shard (SL_SOURCE_TFRECORD, records/convert_records.c):
 * read at its offset (both CRCs checked; the shard stays open on the worker for
 * the next record of the same one), its Example's image encoded as a
 * file's would be; *name gets the Example's file name, when it has one. A
 * record that cannot be read or has no usable image and label is a skip. */
static int encode_record(cv_worker *w, const sl_input *it, const uint8_t **img, size_t *img_len,
                         int *width, int *height, int *pass, char *name, size_t cap)
{
    if (it->size < 16 || it->size - 16 > CV_MAX_FILE)
        return sl_fail(SL_EIMAGE, "a record of %llu bytes", (unsigned long long)it->size);
    int rc = grow(&w->file, &w->file_cap, (size_t)it->size);
    if (rc)
        return rc;
    if (!w->rec_path || strcmp(w->rec_path, it->path)) { /* another shard */
        if (w->rec_path) {
            close(w->rec_fd);
            free(w->rec_path);
            w->rec_path = NULL;
        }
        int fd = open(it->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return sl_fail(SL_EIMAGE, "cannot open: %s", strerror(errno));
        if (!(w->rec_path = strdup(it->path))) {
            close(fd);
            return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory");
        }
        w->rec_fd = fd;
    }
    size_t len = 0;
    rc = sl_tfrecord_read_at(w->rec_fd, it->off, it->size, w->file, w->file_cap, &len, it->path,
                             it->idx);
    char why[SL_ERRMSG_MAX];
    if (rc == SL_ENOMEM)
        return rc;
    if (rc) { /* "PATH: record N @ OFF: data CRC mismatch" */
        snprintf(why, sizeof why, "%s", sl_msg_detail(sl_errmsg(), it->path));
        return sl_fail(SL_EIMAGE, "%s", why);
    }
    sl_image_example ex;
    if ((rc = sl_image_example_decode(w->file, len, &ex))) {
        snprintf(why, sizeof why, "%s", sl_msg_detail(sl_errmsg(), NULL));
        return sl_fail(SL_EIMAGE, "%s", why);
    }
    if (it->label < 0)
        return sl_fail(SL_EIMAGE, "label %lld below the source's label offset",
                       (long long)ex.label);
    if (ex.filename_len && ex.filename_len < cap && !memchr(ex.filename, '\0', ex.filename_len))
        snprintf(name, cap, "%.*s", (int)ex.filename_len, ex.filename);
    return encode_bytes(w, ex.image, ex.image_len, img, img_len, width, height, pass);
}

/* An IDX image: gray pixels -> RGB JPEG, shrunk first when resize_short
 * asks for it (short side to resize_short, aspect kept). */
static int encode_idx(cv_worker *w, const sl_input *it, const uint8_t **img, size_t *img_len,
                      int *width, int *height)
{
    const sl_convert_state *st = w->job->st;
    const sl_convert_config *cfg = w->job->cfg;
    int cols = (int)st->in.idx_cols, rows = (int)st->in.idx_rows;
    const uint8_t *px = st->in.idx_pixels + (size_t)it->idx * cols * rows;
    int rs = cfg->resize_short, short_side = cols < rows ? cols : rows;
    if (rs == 0 || short_side <= rs) {
        *width = cols;
        *height = rows;
        return sl_encode_jpeg_rgb(w->tc, px, cols, rows, cols, 1, cfg->quality, img, img_len);
    }
    int dw = cols == short_side ? rs : (int)(((int64_t)cols * rs + short_side / 2) / short_side);
    int dh = rows == short_side ? rs : (int)(((int64_t)rows * rs + short_side / 2) / short_side);
    size_t src = (size_t)cols * rows * 3;
    int rc = grow(&w->scratch, &w->scratch_cap, src + (size_t)dw * dh * 3);
    if (rc)
        return rc;
    for (size_t i = 0; i < (size_t)cols * rows; i++)
        memset(w->scratch + 3 * i, px[i], 3);
    sl_resize_rgb_u8(w->scratch, cols, rows, cols * 3, w->scratch + src, dw, dh, dw * 3);
    *width = dw;
    *height = dh;
    return sl_encode_jpeg_rgb(w->tc, w->scratch + src, dw, dh, dw * 3, 3, cfg->quality, img, img_len);
}

/* The JPEG to store with restart markers (sl_convert_config.restart_*):
 * *img then points into the restarter, or stays where it was. */
static int add_restarts(cv_worker *w, cv_item *ci, const uint8_t **img, size_t *img_len)
{
    const sl_convert_config *cfg = w->job->cfg;
    const uint8_t *out;
    size_t out_len;
    sl_restart_info info;
    int rc = sl_jpeg_restart(w->rs, *img, *img_len, cfg->restart_mcus, cfg->restart_rows, &out,
                             &out_len, &info);
    if (rc)
        return rc;
    ci->restart = info.rewritten ? 1 : -1;
    ci->markers = info.markers;
    ci->jpeg_in = *img_len;
    ci->jpeg_out = out_len;
    *img = out;
    *img_len = out_len;
    return SL_OK;
}

/* One output position into the slot: an Example, or a skip with its reason. */
static int fill_item(cv_worker *w, cv_slot *slot, uint64_t pos)
{
    const sl_convert_state *st = w->job->st;
    size_t i = st->order[pos];
    const sl_input *it = &st->in.items[i];
    cv_item *ci = &slot->items[slot->nitems++];
    memset(ci, 0, sizeof *ci);

    const uint8_t *img = NULL;
    size_t img_len = 0;
    int width = 0, height = 0;
    sl_clear_error();
    char fname[512] = "";
    int rc = it->rec    ? encode_record(w, it, &img, &img_len, &width, &height, &ci->passthrough,
                                        fname, sizeof fname)
             : it->path ? encode_file(w, it->path, &img, &img_len, &width, &height, &ci->passthrough)
                        : encode_idx(w, it, &img, &img_len, &width, &height);
    if (rc == SL_OK && w->rs)
        rc = add_restarts(w, ci, &img, &img_len);
    if (rc == SL_EIMAGE) {
        ci->skipped = 1;
        snprintf(ci->reason, sizeof ci->reason, "%s", sl_errmsg()[0] ? sl_errmsg() : "cannot decode");
        return SL_OK;
    }
    if (rc)
        return rc;

    if (!fname[0]) /* a record's own file name stays */
        sl_convert_input_name(st, i, 0, fname, sizeof fname);
    sl_image_example ex;
    memset(&ex, 0, sizeof ex);
    ex.image = img;
    ex.image_len = img_len;
    ex.label = it->label + w->job->cfg->label_offset;
    ex.width = width;
    ex.height = height;
    ex.format = "JPEG";
    ex.format_len = 4;
    ex.filename = fname;
    ex.filename_len = strlen(fname);
    if (st->class_names && it->label >= 0 && (uint64_t)it->label < st->nclass_names) {
        ex.text = st->class_names[it->label];
        ex.text_len = strlen(ex.text);
    }
    const uint8_t *rec;
    size_t rec_len;
    if ((rc = sl_image_example_encode(&ex, &w->eb)) != SL_OK ||
        (rc = sl_example_finish(&w->eb, &rec, &rec_len)) != SL_OK)
        return rc;
    if ((rc = grow(&slot->buf, &slot->cap, slot->len + rec_len)) != SL_OK)
        return rc;
    memcpy(slot->buf + slot->len, rec, rec_len);
    ci->off = slot->len;
    ci->len = rec_len;
    slot->len += rec_len;
    return SL_OK;
}

static int fill_chunk(cv_worker *w, size_t k)
{
    cv_job *j = w->job;
    const cv_range *r = &j->chunks[k];
    cv_slot *slot = &j->slots[k % j->window];
    slot->nitems = 0;
    slot->len = 0;
    for (uint64_t pos = r->begin; pos < r->end; pos++) {
        int rc = fill_item(w, slot, pos);
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* ------------------------------------------------------------ commit */

static int open_writer(cv_job *j, unsigned shard)
{
    const sl_convert_config *cfg = j->cfg;
    /* st->write_dir: a task's private folder (records/convert_task.c) */
    const char *dir = j->st->write_dir ? j->st->write_dir : cfg->out_dir;
    char path[4096];
    int rc;
    if (cfg->format == SL_FORMAT_LMDB) {
        if ((rc = sl_lmdb_path(path, sizeof path, dir, cfg->name)) != SL_OK)
            return rc;
        return sl_lmdb_writer_open(path, &j->lmw);
    }
    if ((rc = sl_shard_path_fmt(path, sizeof path, dir, cfg->name, shard, j->st->nshards,
                                cfg->format)) != SL_OK)
        return rc;
    if (cfg->format == SL_FORMAT_WDS)
        return sl_wds_writer_open(path, cfg->fsync ? 0u : SL_TFW_NOSYNC, &j->wdw);
    return sl_tfrecord_writer_open(path, SL_TFW_INDEX | (cfg->fsync ? 0u : SL_TFW_NOSYNC), &j->tfw);
}

static int close_writer(cv_job *j)
{
    int rc;
    if (j->lmw) {
        rc = sl_lmdb_writer_close(j->lmw);
        j->lmw = NULL;
    } else if (j->wdw) {
        rc = sl_wds_writer_close(j->wdw);
        j->wdw = NULL;
    } else {
        rc = sl_tfrecord_writer_close(j->tfw);
        j->tfw = NULL;
    }
    return rc;
}

/* Append chunk k (done, at the head of the order) to the output. Runs
 * without mu, on the calling thread. */
static int commit_chunk(cv_job *j, size_t k)
{
    const sl_convert_config *cfg = j->cfg;
    const sl_convert_state *st = j->st;
    const cv_range *r = &j->chunks[k];
    const cv_slot *slot = &j->slots[k % j->window];
    int rc;
    if (!j->tfw && !j->lmw && !j->wdw && (rc = open_writer(j, r->shard)) != SL_OK)
        return rc;
    for (size_t i = 0; i < slot->nitems; i++) {
        const cv_item *ci = &slot->items[i];
        if (ci->skipped) {
            char name[4096];
            sl_convert_input_name(st, st->order[r->begin + i], 1, name, sizeof name);
            j->skipped++;
            if (cfg->skipped)
                cfg->skipped(cfg->skipped_arg, name, ci->reason);
            if (cfg->strict)
                return sl_fail(SL_EIMAGE, "sl_convert_run: %s: %s (strict: no input may be skipped)",
                               name, ci->reason);
            continue;
        }
        const uint8_t *rec = slot->buf + ci->off;
        if (j->wdw) {
            /* key: the output position, zero-padded: unique, sorts in
             * order, the same whatever was skipped before it */
            char key[32];
            snprintf(key, sizeof key, "%0*llu", SL_LMDB_KEY_DIGITS,
                     (unsigned long long)(r->begin + i));
            rc = sl_wds_writer_write_example(j->wdw, key, rec, ci->len);
        } else {
            rc = j->lmw ? sl_lmdb_writer_put(j->lmw, rec, ci->len)
                        : sl_tfrecord_writer_write(j->tfw, rec, ci->len);
        }
        if (rc)
            return rc;
        j->records++;
        j->bytes += ci->len;
        if (ci->passthrough)
            j->passthrough++;
        else
            j->reencoded++;
        if (ci->restart > 0) {
            j->restarted++;
            j->restart_markers += ci->markers;
            j->restart_in += ci->jpeg_in;
            j->restart_out += ci->jpeg_out;
        } else if (ci->restart < 0) {
            j->restart_kept++;
        }
    }
    j->done += r->end - r->begin;
    if (r->end == sl_convert_shard_begin(st->in.n, st->nshards, r->shard + 1)) {
        if ((rc = close_writer(j)))
            return rc;
        j->shards_closed++;
        if (st->on_shard &&
            (rc = st->on_shard(st->on_shard_arg, r->shard, j->records - j->shard_records,
                               j->bytes - j->shard_bytes)) != SL_OK)
            return rc;
        j->shard_records = j->records;
        j->shard_bytes = j->bytes;
    }
    if (cfg->progress) {
        uint64_t now = sl_now_ns();
        if ((int64_t)(now - j->last_progress) >= CV_PROGRESS_NS) {
            j->last_progress = now;
            cfg->progress(cfg->progress_arg, st->kept_inputs + j->done, st->in.n, st->kept_bytes + j->bytes);
        }
    }
    return SL_OK;
}

/* ------------------------------------------------------------ workers */
static void fail_locked(cv_job *j, int rc)
{
    if (!j->err) {
        j->err = rc;
        const char *m = sl_errmsg();
        snprintf(j->errmsg, sizeof j->errmsg, "%s", m[0] ? m : sl_strerror(rc));
    }
    j->stop = 1;
    pthread_cond_broadcast(&j->cv_space);
    pthread_cond_signal(&j->cv_done);
}

static void *worker_main(void *arg)
{
    cv_worker *w = arg;
    cv_job *j = w->job;
    if (j->cfg->io) /* the run's I/O settings for this thread's reads (listed URLs) */
        sl_io_thread_use(j->cfg->io);
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stop && j->next_claim < j->nchunks && j->next_claim >= j->next_commit + j->window)
            pthread_cond_wait(&j->cv_space, &j->mu);
        if (j->stop || j->next_claim >= j->nchunks)
            break;
        size_t k = j->next_claim++;
        pthread_mutex_unlock(&j->mu);
        int rc = fill_chunk(w, k);
        pthread_mutex_lock(&j->mu);
        if (rc) {
            fail_locked(j, rc);
            break;
        }
        j->slots[k % j->window].done = 1;
        if (k == j->next_commit)
            pthread_cond_signal(&j->cv_done);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* The committer loop, on the calling thread: chunks in order until all are
 * written or something failed. */
static void commit_all(cv_job *j)
{
    pthread_mutex_lock(&j->mu);
    while (!j->stop && j->next_commit < j->nchunks) {
        cv_slot *slot = &j->slots[j->next_commit % j->window];
        if (j->cfg->cancel && *j->cfg->cancel) {
            /* the open writer (a shard not yet whole) is aborted after the join */
            fail_locked(j, sl_fail(SL_ECANCELED, "sl_convert_run: %s: canceled: %u of %u "
                                   "shards whole (resume finishes the job)", j->cfg->out_dir,
                                   j->shards_closed + j->st->nkept, j->st->nshards));
            break;
        }
        if (!slot->done) {
            pthread_cond_wait(&j->cv_done, &j->mu);
            continue;
        }
        pthread_mutex_unlock(&j->mu);
        int rc = commit_chunk(j, j->next_commit);
        pthread_mutex_lock(&j->mu);
        slot->done = 0;
        j->next_commit++;
        if (rc)
            fail_locked(j, rc);
        pthread_cond_broadcast(&j->cv_space);
    }
    pthread_mutex_unlock(&j->mu);
}

/* Chunks of the shards still to write (see DESIGN). */
static int plan_chunks(cv_job *j)
{
    const sl_convert_state *st = j->st;
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        count = 0;
        for (unsigned s = 0; s < st->nshards; s++) {
            if (st->kept[s])
                continue;
            uint64_t b = sl_convert_shard_begin(st->in.n, st->nshards, s);
            uint64_t e = sl_convert_shard_begin(st->in.n, st->nshards, s + 1);
            uint64_t p = b;
            do {
                uint64_t q = e - p > CV_CHUNK ? p + CV_CHUNK : e;
                if (pass)
                    j->chunks[count] = (cv_range){.shard = s, .begin = p, .end = q};
                count++;
                p = q;
            } while (p < e);
        }
        if (!pass && count && !(j->chunks = calloc(count, sizeof *j->chunks)))
            return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory for %zu chunks", count);
    }
    j->nchunks = count;
    return SL_OK;
}

static unsigned thread_count(const sl_convert_config *cfg, size_t nchunks)
{
    long n = cfg->threads ? (long)cfg->threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > CV_MAX_THREADS)
        n = CV_MAX_THREADS;
    if ((size_t)n > nchunks)
        n = (long)nchunks;
    return (unsigned)(n < 1 ? 1 : n);
}

static int worker_init(cv_worker *w, cv_job *j)
{
    memset(w, 0, sizeof *w);
    w->job = j;
    sl_example_builder_init(&w->eb);
    int rc = sl_transcoder_create(&w->tc);
    if (rc)
        return rc;
    sl_transcoder_set_max_pixels(w->tc, max_pixels(j->cfg));
    if ((j->cfg->restart_mcus || j->cfg->restart_rows) &&
        (rc = sl_jpeg_restarter_create(&w->rs)) != SL_OK)
        return rc;
    return SL_OK;
}

static void worker_fini(cv_worker *w)
{
    sl_transcoder_destroy(w->tc);
    sl_jpeg_restarter_destroy(w->rs);
    sl_example_builder_fini(&w->eb);
    free(w->file);
    free(w->scratch);
    if (w->rec_path)
        close(w->rec_fd);
    free(w->rec_path);
}

/* Run the workers over every chunk; the first error comes back with its
 * message on the calling thread. */
static int run_workers(cv_job *j)
{
    if (j->nchunks == 0)
        return SL_OK;
    unsigned nt = thread_count(j->cfg, j->nchunks);
    j->window = 4 * (size_t)nt;
    if (j->window > CV_WINDOW_MAX)
        j->window = CV_WINDOW_MAX;
    if (j->window < 2)
        j->window = 2;
    cv_worker *w = calloc(nt, sizeof *w);
    j->slots = calloc(j->window, sizeof *j->slots);
    if (!w || !j->slots) {
        free(w);
        return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory for %u workers", nt);
    }
    int rc = SL_OK;
    unsigned started = 0;
    for (unsigned i = 0; i < nt && !rc; i++)
        rc = worker_init(&w[i], j);
    j->last_progress = sl_now_ns();
    for (unsigned i = 0; i < nt && !rc; i++) {
        int e = pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
        if (e) {
            /* Fewer threads still finish the job; none at all cannot. */
            if (started == 0)
                rc = sl_fail(SL_ENOMEM, "sl_convert_run: pthread_create: %s", strerror(e));
            break;
        }
        started++;
    }
    if (started)
        commit_all(j);
    for (unsigned i = 0; i < started; i++)
        pthread_join(w[i].tid, NULL);
    for (unsigned i = 0; i < nt; i++)
        worker_fini(&w[i]);
    free(w);
    if (!rc && j->err)
        rc = sl_fail(j->err, "%s", j->errmsg);
    return rc;
}

int sl_convert_write(const sl_convert_state *st, sl_convert_result *res)
{
    const sl_convert_config *cfg = st->cfg;
    cv_job j;
    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv_done, NULL);
    pthread_cond_init(&j.cv_space, NULL);
    j.cfg = cfg;
    j.st = st;

    int rc = plan_chunks(&j);
    if (!rc)
        rc = run_workers(&j);

    res->inputs = st->in.n;
    res->records = st->kept_records + j.records;
    res->skipped = st->kept_skipped + j.skipped;
    res->bytes = st->kept_bytes + j.bytes;
    res->passthrough = j.passthrough;
    res->reencoded = j.reencoded;
    res->shards = st->nshards;
    res->shards_kept = st->nkept;
    res->restarted = j.restarted;
    res->restart_kept = j.restart_kept;
    res->restart_markers = j.restart_markers;
    res->restart_bytes_in = j.restart_in;
    res->restart_bytes_out = j.restart_out;
    if (!rc && cfg->progress)
        cfg->progress(cfg->progress_arg, st->in.n, st->in.n, res->bytes);

    /* Only an error leaves a writer open: drop its temp files. */
    sl_tfrecord_writer_abort(j.tfw);
    sl_lmdb_writer_abort(j.lmw);
    sl_wds_writer_abort(j.wdw);
    free(j.chunks);
    if (j.slots)
        for (size_t i = 0; i < j.window; i++)
            free(j.slots[i].buf);
    free(j.slots);
    pthread_cond_destroy(&j.cv_done);
    pthread_cond_destroy(&j.cv_space);
    pthread_mutex_destroy(&j.mu);
    return rc;
}

int sl_convert_run(const sl_convert_config *cfg, sl_convert_result *res)
{
    if (!cfg || !res)
        return sl_fail(SL_EINVAL, "sl_convert_run: NULL argument");
    memset(res, 0, sizeof *res);
    int rc = sl_check_config_size("sl_convert_run", cfg->size, sizeof *cfg);
    if (rc)
        return rc;
    sl_convert_state st;
    /* cfg->io for the reads on this thread (the workers set it on theirs) */
    const sl_io_opts *io_was = cfg->io ? sl_io_thread_use(cfg->io) : NULL;
    rc = sl_convert_prepare(cfg, &st);
    if (!rc)
        rc = sl_convert_write(&st, res);
    else
        res->inputs = st.in.n;
    if (!rc)
        rc = sl_convert_finish(&st, res);
    sl_convert_state_fini(&st);
    if (cfg->io)
        sl_io_thread_use(io_was);
    return rc;
}

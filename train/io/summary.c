/*
 * train/io/summary.c - TensorBoard event files and metrics.jsonl.
 *
 * An event file is a TFRecord file (records/ frames it) of Event protos,
 * tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto:
 *   message Event   { double wall_time = 1; int64 step = 2;
 *                     oneof what { string file_version = 3; ... Summary summary = 5; ... } }
 *   message Summary { repeated Value value = 1; }
 *   message Value   { string tag = 1; oneof value { float simple_value = 2; ... } }
 * The first record is {wall_time, file_version: "brain.Event:2"}, as
 * tf.summary's writer starts every file; TensorBoard reads simple_value as
 * a scalar (tensorboard/data_compat.py migrates it to its tensor form).
 * Text (sl_summary_text: the chosen parallelism and why, issue 43) is the
 * text plugin's form, a DT_STRING scalar tensor with plugin_name "text".
 *
 * The protos are encoded and decoded by hand: five fixed fields, and no
 * protobuf library among the dependencies (records/ walks tf.train.Example
 * the same way).
 *
 * Writes are plain write(2)s of whole records on an O_APPEND descriptor, one
 * per call, no user-space buffering and no temp+rename: TensorBoard tails
 * the file while the job runs, and a crash loses at most the record being
 * written. The reader therefore treats a partial LAST record as not yet
 * written (TensorFlow's record reader does the same: it reports
 * OUT_OF_RANGE there and the loader retries later), while a CRC mismatch or
 * a bad proto is SL_ECORRUPT.
 *
 * Threading: a writer is used by one thread at a time; sl_events_read is
 * reentrant.
 */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "records/records.h"
#include "common/clock.h"
#include "common/fileio.h" /* sl_write_all, sl_path_join, sl_mkdir_p */

/* Protobuf wire types (protobuf.dev/programming-guides/encoding). */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

struct sl_summary {
    char *logdir;
    char *path;        /* the event file */
    char *jsonl_path;  /* LOGDIR/metrics.jsonl */
    int fd;            /* event file, O_APPEND */
    int jfd;           /* metrics.jsonl, O_APPEND */
    uint8_t *buf;      /* one framed record under construction */
    size_t len, cap;
    int err;           /* sticky: the buffer could not grow */
};

/* --------------------------------------------------------------- encoder */

static void put(sl_summary *s, const void *p, size_t n)
{
    if (s->err)
        return;
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n)
            cap *= 2;
        uint8_t *nb = realloc(s->buf, cap);
        if (!nb) {
            s->err = 1;
            return;
        }
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void put_varint(sl_summary *s, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    put(s, b, n);
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >>= 7)
        n++;
    return n;
}

static void put_key(sl_summary *s, unsigned field, unsigned wt)
{
    put_varint(s, (uint64_t)field << 3 | wt);
}

static void put_le(sl_summary *s, uint64_t v, size_t n)
{
    uint8_t b[8];
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(s, b, n);
}

static void put_double(sl_summary *s, unsigned field, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    put_key(s, field, WT_I64);
    put_le(s, u, 8);
}

static void put_bytes(sl_summary *s, unsigned field, const void *p, size_t n)
{
    put_key(s, field, WT_LEN);
    put_varint(s, n);
    put(s, p, n);
}

/* Value {tag = 1; simple_value = 2}: its encoded size. */
static size_t value_len(const char *tag)
{
    size_t t = strlen(tag);
    return 1 + varint_len(t) + t + 1 + 4;
}

/* Frame the Event built at buf[12..len) in place (header before it, CRC
 * after) and append it to the file in one write. */
static int emit_record(sl_summary *s, const char *fn)
{
    uint8_t ftr[4];
    if (s->err)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, s->path);
    size_t n = s->len - 12;
    sl_tfrecord_frame_header(s->buf, n);
    sl_tfrecord_frame_footer(ftr, s->buf + 12, n);
    put(s, ftr, 4);
    if (s->err)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, s->path);
    return sl_write_all(s->fd, s->buf, s->len, fn, s->path);
}

/* Start a record: 12 bytes for the frame header, then wall_time (and step). */
static void begin_event(sl_summary *s, double wall_time)
{
    static const uint8_t zero[12];
    s->len = 0;
    s->err = 0;
    put(s, zero, 12);
    put_double(s, 1, wall_time);
}

/* ------------------------------------------------------------------ open */

int sl_summary_open(const char *logdir, sl_summary **out)
{
    static const char fn[] = "sl_summary_open";
    char host[256] = "localhost", name[512];
    int rc;

    *out = NULL;
    if (!logdir || !*logdir)
        return sl_fail(SL_EINVAL, "%s: empty logdir", fn);
    rc = sl_mkdir_p(logdir, fn);
    if (rc)
        return rc;
    sl_summary *s = calloc(1, sizeof *s);
    if (!s)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, logdir);
    s->fd = s->jfd = -1;
    s->logdir = strdup(logdir);
    s->jsonl_path = sl_path_join(logdir, "metrics.jsonl");
    if (!s->logdir || !s->jsonl_path) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, logdir);
        goto fail;
    }
    if (gethostname(host, sizeof host) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/')
            *c = '_';
    double t0 = sl_wall_s();
    /* TensorFlow's name, events.out.tfevents.<secs>.<host>.<pid>...; a
     * second writer of this process in the same second gets .<k> before
     * the suffix rather than appending to the first one's file. */
    for (int k = 0; k < 100; k++) {
        if (k)
            snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.%d.sluice",
                     (long long)t0, host, (int)getpid(), k);
        else
            snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.sluice", (long long)t0,
                     host, (int)getpid());
        free(s->path);
        s->path = sl_path_join(logdir, name);
        if (!s->path) {
            rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, logdir);
            goto fail;
        }
        s->fd = open(s->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (s->fd >= 0 || errno != EEXIST)
            break;
    }
    if (s->fd < 0) {
        rc = sl_fail(SL_EIO, "%s: %s: create: %s", fn, s->path, strerror(errno));
        goto fail;
    }
    /* metrics.jsonl is appended to: a resumed run continues the same file. */
    s->jfd = open(s->jsonl_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (s->jfd < 0) {
        rc = sl_fail(SL_EIO, "%s: %s: open: %s", fn, s->jsonl_path, strerror(errno));
        goto fail;
    }
    static const char version[] = "brain.Event:2";
    begin_event(s, t0);
    put_bytes(s, 3, version, sizeof version - 1);
    rc = emit_record(s, fn);
    if (rc)
        goto fail;
    *out = s;
    return SL_OK;

fail:
    if (s->fd >= 0)
        unlink(s->path); /* ours: created with O_EXCL */
    sl_summary_close(s);
    return rc;
}

/* ------------------------------------------------------------- scalars */

/* One metrics.jsonl line: {"step", "wall_time", tags..., extra's members}
 * (extra, parsed by the caller, is emptied). */
static int write_jsonl(sl_summary *s, int64_t step, double t, const char *const *tags,
                       const double *values, int n, cJSON *extra)
{
    static const char fn[] = "sl_summary_scalars";
    cJSON *line = cJSON_CreateObject();
    char *text = NULL, *buf = NULL;
    int rc;

    if (!line)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, s->jsonl_path);
    int ok = cJSON_AddNumberToObject(line, "step", (double)step) &&
             cJSON_AddNumberToObject(line, "wall_time", t) != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = cJSON_AddNumberToObject(line, tags[i], values[i]) != NULL;
    while (ok && extra && extra->child) {
        cJSON *item = cJSON_DetachItemViaPointer(extra, extra->child);
        /* cJSON copies the key before it frees item's own. */
        ok = item->string && cJSON_AddItemToObject(line, item->string, item);
        if (!ok)
            cJSON_Delete(item);
    }
    text = ok ? cJSON_PrintUnformatted(line) : NULL;
    if (!text) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, s->jsonl_path);
        goto out;
    }
    /* One write per line: O_APPEND keeps concurrent appenders' lines whole. */
    size_t len = strlen(text);
    buf = malloc(len + 1);
    if (!buf) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, s->jsonl_path);
        goto out;
    }
    memcpy(buf, text, len);
    buf[len] = '\n';
    rc = sl_write_all(s->jfd, buf, len + 1, fn, s->jsonl_path);
out:
    free(buf);
    cJSON_free(text);
    cJSON_Delete(line);
    return rc;
}

int sl_summary_scalars(sl_summary *s, int64_t step, const char *const *tags,
                       const double *values, int n, const char *extra_json)
{
    static const char fn[] = "sl_summary_scalars";
    if (!s || n < 0 || (n > 0 && (!tags || !values)))
        return sl_fail(SL_EINVAL, "%s: bad arguments", fn);
    for (int i = 0; i < n; i++)
        if (!tags[i] || !*tags[i])
            return sl_fail(SL_EINVAL, "%s: %s: tag %d is empty", fn, s->path, i);
    cJSON *extra = NULL;
    if (extra_json) {
        /* Checked before anything is written, so a bad call writes nothing. */
        extra = cJSON_Parse(extra_json);
        if (!cJSON_IsObject(extra)) {
            cJSON_Delete(extra);
            return sl_fail(SL_EINVAL, "%s: extra_json is not a JSON object: %.80s", fn,
                           extra_json);
        }
    }
    double t = sl_wall_s();

    /* Event {wall_time, step, summary {value {tag, simple_value}...}} */
    size_t body = 0;
    for (int i = 0; i < n; i++) {
        size_t v = value_len(tags[i]);
        body += 1 + varint_len(v) + v;
    }
    begin_event(s, t);
    put_key(s, 2, WT_VARINT);
    put_varint(s, (uint64_t)step); /* int64: negatives as 10-byte two's complement */
    put_key(s, 5, WT_LEN);
    put_varint(s, body);
    for (int i = 0; i < n; i++) {
        size_t tl = strlen(tags[i]);
        float f = (float)values[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        put_key(s, 1, WT_LEN);
        put_varint(s, value_len(tags[i]));
        put_bytes(s, 1, tags[i], tl);
        put_key(s, 2, WT_I32);
        put_le(s, u, 4);
    }
    int rc = emit_record(s, fn);
    if (!rc)
        rc = write_jsonl(s, step, t, tags, values, n, extra);
    cJSON_Delete(extra);
    return rc;
}

/* The text plugin's summary (tensorboard/plugins/text/summary_v2.py writes
 * the same): Value {tag = 1; metadata = 9 {plugin_data = 1 {plugin_name =
 * 1: "text"}}; tensor = 8 {dtype = 1: DT_STRING (7); tensor_shape = 2: {}
 * (a scalar); string_val = 8: text}} (tensor.proto, types.proto). */
int sl_summary_text(sl_summary *s, int64_t step, const char *tag, const char *text)
{
    static const char fn[] = "sl_summary_text";
    static const char plugin[] = "text";
    if (!s || !tag || !*tag || !text)
        return sl_fail(SL_EINVAL, "%s: bad arguments", fn);
    size_t tl = strlen(tag), xl = strlen(text), pl = sizeof plugin - 1;
    size_t pdata = 1 + varint_len(pl) + pl;           /* PluginData */
    size_t meta = 1 + varint_len(pdata) + pdata;      /* SummaryMetadata */
    size_t tensor = 2 + 2 + 1 + varint_len(xl) + xl; /* TensorProto */
    size_t value = 1 + varint_len(tl) + tl + 1 + varint_len(meta) + meta + 1 +
                   varint_len(tensor) + tensor;
    size_t body = 1 + varint_len(value) + value;      /* Summary */
    double t = sl_wall_s();
    begin_event(s, t);
    put_key(s, 2, WT_VARINT);
    put_varint(s, (uint64_t)step);
    put_key(s, 5, WT_LEN);
    put_varint(s, body);
    put_key(s, 1, WT_LEN);
    put_varint(s, value);
    put_bytes(s, 1, tag, tl);
    put_key(s, 9, WT_LEN);
    put_varint(s, meta);
    put_key(s, 1, WT_LEN);
    put_varint(s, pdata);
    put_bytes(s, 1, plugin, pl);
    put_key(s, 8, WT_LEN);
    put_varint(s, tensor);
    put_key(s, 1, WT_VARINT);
    put_varint(s, 7); /* DT_STRING */
    put_key(s, 2, WT_LEN);
    put_varint(s, 0); /* shape {}: a scalar */
    put_bytes(s, 8, text, xl);
    int rc = emit_record(s, fn);
    cJSON *extra = rc ? NULL : cJSON_CreateObject();
    if (!rc && (!extra || !cJSON_AddStringToObject(extra, tag, text)))
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, s->jsonl_path);
    if (!rc)
        rc = write_jsonl(s, step, t, NULL, NULL, 0, extra);
    cJSON_Delete(extra);
    return rc;
}

const char *sl_summary_path(const sl_summary *s)
{
    return s->path;
}

/* fsync and close fd (-1: nothing to do); SL_EIO naming path. */
static int close_synced(int fd, const char *path)
{
    int rc = SL_OK;
    if (fd < 0)
        return SL_OK;
    if (fsync(fd) != 0)
        rc = sl_fail(SL_EIO, "sl_summary_close: %s: fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = sl_fail(SL_EIO, "sl_summary_close: %s: close: %s", path, strerror(errno));
    return rc;
}

int sl_summary_close(sl_summary *s)
{
    if (!s)
        return SL_OK;
    /* Durable at the end of the run; per-call fsyncs would cost a disk
     * flush per logged step for little (a crash loses the tail anyway). */
    int rc = close_synced(s->fd, s->path);
    int rc2 = close_synced(s->jfd, s->jsonl_path);
    if (!rc)
        rc = rc2;
    free(s->buf);
    free(s->jsonl_path);
    free(s->path);
    free(s->logdir);
    free(s);
    return rc;
}

/* --------------------------------------------------------------- reader */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1; /* more than 10 bytes */
}

/* Next field: *field, *wt; for WT_LEN, *sub gets the payload. Fixed and
 * varint payloads are left at b->p for the caller to read or skip. */
static int pb_key(pb *b, unsigned *field, unsigned *wt)
{
    uint64_t k;
    if (pb_varint(b, &k) || (k >> 3) == 0 || (k >> 3) > 0x1fffffff)
        return -1;
    *field = (unsigned)(k >> 3);
    *wt = (unsigned)(k & 7);
    return 0;
}

static int pb_len(pb *b, pb *sub)
{
    uint64_t n;
    if (pb_varint(b, &n) || n > (uint64_t)(b->end - b->p))
        return -1;
    sub->p = b->p;
    sub->end = b->p + n;
    b->p += n;
    return 0;
}

static int pb_fixed(pb *b, size_t n, uint64_t *v)
{
    if ((size_t)(b->end - b->p) < n)
        return -1;
    uint64_t x = 0;
    for (size_t i = n; i-- > 0;)
        x = x << 8 | b->p[i];
    b->p += n;
    *v = x;
    return 0;
}

/* Skip a field's payload by wire type; groups (3, 4) are not in these
 * protos and are treated as damage. */
static int pb_skip(pb *b, unsigned wt)
{
    uint64_t v;
    pb sub;
    switch (wt) {
    case WT_VARINT: return pb_varint(b, &v);
    case WT_I64: return pb_fixed(b, 8, &v);
    case WT_LEN: return pb_len(b, &sub);
    case WT_I32: return pb_fixed(b, 4, &v);
    default: return -1;
    }
}

typedef struct ev_walk {
    sl_event_fn fn;
    sl_event_text_fn text_fn; /* NULL: text values are skipped */
    void *ctx;
    int fn_rc;      /* fn's non-zero return, when it stopped the walk */
    char *tag;      /* NUL-terminated copy of the current tag */
    size_t tag_cap;
    char *text;     /* and of the current text */
    size_t text_cap;
} ev_walk;

/* What the walkers return (fn's own value goes to w->fn_rc). */
enum { WALK_OK = 0, WALK_BAD, WALK_NOMEM, WALK_STOP };

/* NUL-terminated copy of [p, end) into *buf (grown): 0, or -1 out of memory. */
static int walk_copy(char **buf, size_t *cap, pb v)
{
    size_t n = v.p ? (size_t)(v.end - v.p) : 0;
    if (n + 1 > *cap) {
        char *t = realloc(*buf, n + 1);
        if (!t)
            return -1;
        *buf = t;
        *cap = n + 1;
    }
    if (n)
        memcpy(*buf, v.p, n);
    (*buf)[n] = '\0';
    return 0;
}

/* TensorProto {dtype = 1, string_val = 8}: *text the first string of a
 * DT_STRING (7) tensor; 0, or -1 for a bad proto. */
static int walk_tensor_text(pb b, pb *text)
{
    unsigned field, wt;
    uint64_t dtype = 0;
    pb first = {NULL, NULL}, sv;
    while (b.p < b.end) {
        if (pb_key(&b, &field, &wt))
            return -1;
        if (field == 1 && wt == WT_VARINT) {
            if (pb_varint(&b, &dtype))
                return -1;
        } else if (field == 8 && wt == WT_LEN) {
            if (pb_len(&b, &sv))
                return -1;
            if (!first.p)
                first = sv;
        } else if (pb_skip(&b, wt)) {
            return -1;
        }
    }
    if (dtype == 7 && first.p)
        *text = first;
    return 0;
}

/* Value {tag = 1, simple_value = 2, tensor = 8}: calls fn when it is a
 * simple_value, text_fn (when set) when a string tensor (the text plugin's). */
static int walk_value(ev_walk *w, pb b, int64_t step, double wall_time)
{
    unsigned field, wt;
    pb tag = {NULL, NULL}, tensor = {NULL, NULL}, text = {NULL, NULL};
    uint64_t u;
    int have_value = 0;
    float value = 0;

    while (b.p < b.end) {
        if (pb_key(&b, &field, &wt))
            return WALK_BAD;
        if (field == 1 && wt == WT_LEN) {
            if (pb_len(&b, &tag))
                return WALK_BAD;
        } else if (field == 2 && wt == WT_I32) {
            if (pb_fixed(&b, 4, &u))
                return WALK_BAD;
            uint32_t u32 = (uint32_t)u;
            memcpy(&value, &u32, 4);
            have_value = 1;
        } else if (field == 8 && wt == WT_LEN) {
            if (pb_len(&b, &tensor))
                return WALK_BAD;
        } else if (pb_skip(&b, wt)) {
            return WALK_BAD;
        }
    }
    if (tensor.p && w->text_fn && walk_tensor_text(tensor, &text))
        return WALK_BAD;
    if (!have_value && !text.p)
        return WALK_OK; /* an image, histogram, other tensor ...: neither */
    if (walk_copy(&w->tag, &w->tag_cap, tag))
        return WALK_NOMEM;
    if (have_value && w->fn)
        w->fn_rc = w->fn(w->ctx, step, wall_time, w->tag, value);
    if (!have_value) {
        if (walk_copy(&w->text, &w->text_cap, text))
            return WALK_NOMEM;
        w->fn_rc = w->text_fn(w->ctx, step, wall_time, w->tag, w->text);
    }
    return w->fn_rc ? WALK_STOP : WALK_OK;
}

/* Event: wall_time 1, step 2, summary 5 (read after the whole event, since
 * fields may come in any order). */
static int walk_event(ev_walk *w, pb b)
{
    unsigned field, wt;
    uint64_t u;
    double wall_time = 0;
    int64_t step = 0;
    pb summary = {NULL, NULL};

    while (b.p < b.end) {
        if (pb_key(&b, &field, &wt))
            return WALK_BAD;
        if (field == 1 && wt == WT_I64) {
            if (pb_fixed(&b, 8, &u))
                return WALK_BAD;
            memcpy(&wall_time, &u, 8);
        } else if (field == 2 && wt == WT_VARINT) {
            if (pb_varint(&b, &u))
                return WALK_BAD;
            step = (int64_t)u;
        } else if (field == 5 && wt == WT_LEN) {
            if (pb_len(&b, &summary))
                return WALK_BAD;
        } else if (pb_skip(&b, wt)) {
            return WALK_BAD;
        }
    }
    /* Summary: repeated Value value = 1. */
    while (summary.p && summary.p < summary.end) {
        pb v;
        if (pb_key(&summary, &field, &wt))
            return WALK_BAD;
        if (field == 1 && wt == WT_LEN) {
            if (pb_len(&summary, &v))
                return WALK_BAD;
            int rc = walk_value(w, v, step, wall_time);
            if (rc)
                return rc;
        } else if (pb_skip(&summary, wt)) {
            return WALK_BAD;
        }
    }
    return WALK_OK;
}

/* After the reader failed at offset off: is the record there merely cut
 * short by the end of the file (a writer still appending, or killed
 * mid-write)? True when fewer than 12 bytes are left, or the header is
 * intact (its CRC right) and claims more bytes than are left. */
static int truncated_tail(const char *path, uint64_t off)
{
    uint8_t hdr[12];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int yes = 0;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= off) {
        uint64_t left = (uint64_t)st.st_size - off;
        if (left < 12) {
            yes = left > 0;
        } else if (pread(fd, hdr, 12, (off_t)off) == 12) {
            uint64_t n = 0;
            uint32_t crc = (uint32_t)hdr[8] | (uint32_t)hdr[9] << 8 | (uint32_t)hdr[10] << 16 |
                           (uint32_t)hdr[11] << 24;
            for (int i = 7; i >= 0; i--)
                n = n << 8 | hdr[i];
            yes = sl_crc_mask(sl_crc32c(0, hdr, 8)) == crc && n <= SL_TFRECORD_MAX_LEN &&
                  n + SL_TFRECORD_OVERHEAD > left;
        }
    }
    close(fd);
    return yes;
}

int sl_events_read(const char *path, sl_event_fn fn, void *ctx)
{
    if (!path || !fn)
        return sl_fail(SL_EINVAL, "sl_events_read: no path or callback");
    return sl_events_read_all(path, fn, NULL, ctx);
}

int sl_events_read_all(const char *path, sl_event_fn fn, sl_event_text_fn text_fn, void *ctx)
{
    static const char fname[] = "sl_events_read";
    sl_tfrecord_reader *r = NULL;
    ev_walk w = {.fn = fn, .text_fn = text_fn, .ctx = ctx};
    uint64_t recno = 0, next_off = 0;
    int rc;

    if (!path || (!fn && !text_fn))
        return sl_fail(SL_EINVAL, "%s: no path or callback", fname);
    rc = sl_tfrecord_reader_open(path, &r);
    if (rc)
        return sl_fail(rc, "%s: %s", fname, sl_errmsg());
    for (;; recno++) {
        const uint8_t *data;
        size_t len;
        rc = sl_tfrecord_reader_next(r, &data, &len);
        if (rc == SL_EOF) {
            rc = SL_OK;
            break;
        }
        if (rc == SL_ECORRUPT && truncated_tail(path, next_off)) {
            rc = SL_OK; /* the last record is still being written */
            break;
        }
        if (rc) {
            rc = sl_fail(rc, "%s: %s", fname, sl_errmsg());
            break;
        }
        next_off = sl_tfrecord_reader_offset(r) + len + SL_TFRECORD_OVERHEAD;
        pb b = {data, data + len};
        rc = walk_event(&w, b);
        if (rc == WALK_BAD) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: record %llu @ %llu: bad Event proto", fname, path,
                         (unsigned long long)recno,
                         (unsigned long long)sl_tfrecord_reader_offset(r));
            break;
        }
        if (rc == WALK_NOMEM) {
            rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fname, path);
            break;
        }
        if (rc == WALK_STOP) {
            rc = w.fn_rc;
            break;
        }
    }
    free(w.tag);
    free(w.text);
    sl_tfrecord_reader_close(r);
    return rc;
}

/*
 * records/convert_planfile.c - the plan of a planned conversion
 * (sl_convert_plan, records.h): writing it, reading it back for a task or
 * the finish (records/convert_task.h; the output's names, marker and
 * receipts are records/convert_out.c's).
 *
 * The plan file (JSON, one document; UTF-8 as the paths are):
 *
 *   {"sluice_plan":1,"made_by":"sluice 0.1.0","digest":"5f0c...",
 *    "text":"sluice convert plan 1\ninputs 2000\n...",      (convert_plan.c)
 *    "out":"/data/out","name":"train","source":"list","input":"/in/list.txt",
 *    "format":"tfrecord","shuffle":1,"seed":"0","quality":95,"resize_short":0,
 *    "label_offset":0,"max_pixels":"67108864","inputs":2000,"shards":4,
 *    "tasks":2,"num_classes":10,"class_names":[...] or null,
 *    "explicit_names":0,"task_bytes":[[0,123456],[123456,120001]],
 *    "shard_list":[
 *   {"shard":0,"task":0,"file":"train-00000-of-00004.tfrecord","first":0,
 *    "inputs":[["/in/a/1.jpg",0,51234],...]},
 *   ...
 *   ]}
 *
 * The first line is everything up to "shard_list":[ ; then one line per
 * shard, in shard order, its inputs in output order (path, label, size);
 * then "]}". task_bytes gives each task's lines as [offset, length] from the
 * start of the second line, so a task reads the first line and its own
 * lines (ranged reads of an s3:// plan), never the whole plan: a 100 M-input
 * plan is about 10 GB, a task's part of it one N-th of that.
 *
 * digest: FNV-1a 64 of "text", the options' text that sl_convert_run's
 * --resume keeps in OUT/.NAME.plan: exactly the parameters that decide the
 * bytes (inputs hash, shuffle, seed, shards, format, quality, ...). The
 * plan writes that text to OUT/.NAME.plan too; a task and the finish
 * refuse, naming the first difference, when OUT's says otherwise (OUT
 * planned again with other options), and a plan refuses to overwrite it.
 * made_by: a plan is only run by the sluice version that made it (another
 * encoder would write other bytes for the same options).
 *
 * Input paths are made absolute (the tasks run elsewhere, from another
 * folder); the options' text keeps the inputs hash of the paths as listed,
 * so it matches what sl_convert_run writes for the same command.
 *
 * Threading: reentrant.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytesrc.h"
#include "common/json.h"
#include "convert_task.h"
#include "remote_put.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.1.0"
#endif

#define PLAN_HEAD_MAX ((size_t)64 << 20) /* a first line longer than this is not a plan */

static uint64_t fnv64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static const char *format_name(sl_format f)
{
    return f == SL_FORMAT_WDS ? "wds" : f == SL_FORMAT_LMDB ? "lmdb" : "tfrecord";
}

/* ---------------------------------------------------------------- buffers */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1 << 16;
        while (c < b->len + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* s as a JSON string: '"', '\\' and control bytes escaped; other bytes as
 * they are (cJSON reads them back unchanged). */
static void sb_json(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const char *r = s; *r; r++) {
        unsigned char c = (unsigned char)*r;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, r, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* ---------------------------------------------------------------- tasks */
void sl_plan_task_shards(const sl_plan *p, unsigned k, unsigned *first, unsigned *end)
{
    *first = (unsigned)((uint64_t)p->shards * k / p->tasks);
    *end = (unsigned)((uint64_t)p->shards * (k + 1) / p->tasks);
}

unsigned sl_plan_shard_task(const sl_plan *p, unsigned s)
{
    /* the k with shards*k/tasks <= s < shards*(k+1)/tasks */
    unsigned k = (unsigned)(((uint64_t)s * p->tasks) / p->shards);
    unsigned f, e;
    for (;;) {
        sl_plan_task_shards(p, k, &f, &e);
        if (s < f)
            k--;
        else if (s >= e)
            k++;
        else
            return k;
    }
}

/* ---------------------------------------------------------------- writing */
/* The absolute form of an input's path (URLs and absolute paths as they are). */
static char *absolute(const sl_input *it, const char *cwd)
{
    const char *path = it->path;
    if (path[0] == '/' || it->url)
        return strdup(path);
    return sl_path_join(cwd, path[0] == '.' && path[1] == '/' ? path + 2 : path);
}

/* One line per shard into body; task_off/len per task. */
static int write_body(const sl_convert_state *st, unsigned tasks, const char *cwd, sbuf *body,
                      uint64_t *task_off, uint64_t *task_len)
{
    const sl_convert_config *cfg = st->cfg;
    sl_plan p = {.name = (char *)cfg->name, .shards = st->nshards, .tasks = tasks,
                 .format = cfg->format};
    char num[96], name[512];
    for (unsigned k = 0; k < tasks; k++) {
        unsigned f, e;
        sl_plan_task_shards(&p, k, &f, &e);
        task_off[k] = body->len;
        for (unsigned s = f; s < e; s++) {
            uint64_t b = sl_convert_shard_begin(st->in.n, st->nshards, s);
            uint64_t end = sl_convert_shard_begin(st->in.n, st->nshards, s + 1);
            int rc = sl_plan_shard_name(&p, s, name, sizeof name);
            if (rc)
                return rc;
            snprintf(num, sizeof num, "{\"shard\":%u,\"task\":%u,\"file\":", s, k);
            sb_str(body, num);
            sb_json(body, name);
            snprintf(num, sizeof num, ",\"first\":%llu,\"inputs\":[", (unsigned long long)b);
            sb_str(body, num);
            for (uint64_t pos = b; pos < end; pos++) {
                const sl_input *it = &st->in.items[st->order[pos]];
                char *ap = absolute(it, cwd);
                if (!ap)
                    return sl_fail(SL_ENOMEM, "sl_convert_plan: out of memory");
                sb_str(body, pos == b ? "[" : ",[");
                sb_json(body, ap);
                free(ap);
                snprintf(num, sizeof num, ",%lld,%llu]", (long long)it->label,
                         (unsigned long long)it->size);
                sb_str(body, num);
            }
            sb_str(body, s + 1 < st->nshards ? "]},\n" : "]}\n");
        }
        task_len[k] = body->len - task_off[k];
    }
    return body->oom ? sl_fail(SL_ENOMEM, "sl_convert_plan: out of memory") : SL_OK;
}

static int add_str(cJSON *o, const char *k, const char *v)
{
    return cJSON_AddStringToObject(o, k, v ? v : "") != NULL;
}

/* The first line (without "shard_list":[ and its newline). */
static char *head_json(const sl_convert_state *st, unsigned tasks, const char *text,
                       const char *out, const uint64_t *task_off, const uint64_t *task_len)
{
    const sl_convert_config *c = st->cfg;
    char hex[24], n1[24], n2[24];
    cJSON *o = cJSON_CreateObject(), *a;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv64(text));
    snprintf(n1, sizeof n1, "%llu", (unsigned long long)c->shuffle_seed);
    snprintf(n2, sizeof n2, "%llu",
             (unsigned long long)(c->max_pixels ? c->max_pixels : SL_MAX_PIXELS_DEFAULT));
    int ok = o && sl_json_add_int(o, "sluice_plan", SL_PLAN_FORMAT) &&
             add_str(o, "made_by", "sluice " SLUICE_VERSION) && add_str(o, "digest", hex) &&
             add_str(o, "text", text) && add_str(o, "out", out) && add_str(o, "name", c->name) &&
             add_str(o, "source", c->source == SL_SOURCE_LIST ? "list" : "folder") &&
             add_str(o, "input", c->input) && add_str(o, "format", format_name(c->format)) &&
             sl_json_add_int(o, "shuffle", c->shuffle ? 1 : 0) && add_str(o, "seed", n1) &&
             sl_json_add_int(o, "quality", c->quality) &&
             sl_json_add_int(o, "resize_short", c->resize_short) &&
             sl_json_add_int(o, "label_offset", c->label_offset) && add_str(o, "max_pixels", n2) &&
             sl_json_add_int(o, "inputs", (int64_t)st->in.n) &&
             sl_json_add_int(o, "shards", st->nshards) && sl_json_add_int(o, "tasks", tasks) &&
             sl_json_add_int(o, "num_classes", st->num_classes) &&
             sl_json_add_int(o, "explicit_names", c->class_names != NULL) &&
             sl_json_add_int(o, "restart_mcus", c->restart_mcus) &&
             sl_json_add_int(o, "restart_rows", c->restart_rows);
    if (ok && st->class_names) {
        ok = (a = cJSON_AddArrayToObject(o, "class_names")) != NULL;
        for (uint32_t i = 0; ok && i < st->nclass_names; i++) {
            cJSON *sname = cJSON_CreateString(st->class_names[i]);
            ok = sname && cJSON_AddItemToArray(a, sname);
            if (!ok)
                cJSON_Delete(sname);
        }
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "class_names") != NULL;
    }
    if (ok)
        ok = (a = cJSON_AddArrayToObject(o, "task_bytes")) != NULL;
    for (unsigned k = 0; ok && k < tasks; k++) {
        cJSON *pair = cJSON_CreateArray();
        ok = pair && cJSON_AddItemToArray(a, pair);
        if (!ok)
            cJSON_Delete(pair);
        cJSON *x = ok ? cJSON_CreateNumber((double)task_off[k]) : NULL;
        ok = x && cJSON_AddItemToArray(pair, x);
        cJSON *y = ok ? cJSON_CreateNumber((double)task_len[k]) : NULL;
        ok = ok && y && cJSON_AddItemToArray(pair, y);
    }
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* OUT: made absolute when local (created), checked against an earlier plan. */
static int check_out_before(const sl_convert_state *st, const char *text, char **out)
{
    const sl_convert_config *cfg = st->cfg;
    static const char fn[] = "sl_convert_plan";
    int rc;
    if (sl_out_remote(cfg->out_dir)) {
        *out = strdup(cfg->out_dir);
    } else {
        char real[PATH_MAX];
        if ((rc = sl_mkdir_p(cfg->out_dir, fn)))
            return rc;
        if (!realpath(cfg->out_dir, real))
            return sl_fail(SL_EIO, "%s: %s: %s", fn, cfg->out_dir, strerror(errno));
        *out = strdup(real);
    }
    if (!*out)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    sl_plan p = {.out = *out, .name = (char *)cfg->name, .text = (char *)text};
    int done = 0;
    rc = sl_plan_check_out(fn, &p, &done);
    if (rc == SL_ENOENT) { /* not planned yet: the split must not be there either */
        sl_clear_error();
        char name[512], *path;
        sl_plan q = {.name = (char *)cfg->name, .shards = st->nshards, .format = cfg->format};
        uint64_t size;
        if ((rc = sl_plan_shard_name(&q, 0, name, sizeof name)))
            return rc;
        if (!(path = sl_out_join(*out, name)))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        rc = sl_bytes_size(path, &size);
        if (rc == SL_OK)
            rc = sl_fail(SL_EEXIST, "%s: %s already holds split '%s' (%s) made otherwise: remove "
                         "that split's files to plan it again", fn, *out, cfg->name, name);
        else if (rc == SL_ENOENT) {
            sl_clear_error();
            rc = SL_OK;
        }
        free(path);
        return rc;
    }
    if (!rc && done)
        rc = sl_fail(SL_EEXIST, "%s: %s: split '%s' is finished (.%s.done): remove that split's "
                     "files to convert it again", fn, *out, cfg->name, cfg->name);
    return rc;
}

/* The plan file: head (without its closing brace), the shard lines, the
 * end, streamed into plan (replaced atomically) or, for a URL, into a
 * local temp file then uploaded (sl_put_file: in parts past the part size;
 * S3 takes at most 5 GB in one PUT, and a plan of 100 M inputs is ~10 GB). */
static int write_plan(const char *plan, const char *head, const sbuf *body, int do_sync,
                      uint64_t *bytes)
{
    static const char fn[] = "sl_convert_plan";
    static const char mid[] = ",\"shard_list\":[\n", end[] = "]}\n";
    char tmpl[] = "/tmp/sluice-plan-XXXXXX", *local = NULL, *dir = NULL;
    int remote = sl_out_remote(plan), rc;
    if (remote) {
        if (!(dir = mkdtemp(tmpl)))
            return sl_fail(SL_EIO, "%s: mkdtemp %s: %s", fn, tmpl, strerror(errno));
        if (!(local = sl_path_join(dir, "plan.json"))) {
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
            goto out;
        }
    }
    size_t hl = strlen(head);
    sl_atomic_file af;
    if ((rc = sl_atomic_open(&af, remote ? local : plan, fn)))
        goto out;
    rc = sl_atomic_write(&af, head, hl > 1 ? hl - 1 : 0);
    if (!rc)
        rc = sl_atomic_write(&af, mid, sizeof mid - 1);
    if (!rc)
        rc = sl_atomic_write(&af, body->p, body->len);
    if (!rc)
        rc = sl_atomic_write(&af, end, sizeof end - 1);
    if (rc) {
        sl_atomic_abort(&af);
        goto out;
    }
    if ((rc = sl_atomic_commit(&af, do_sync && !remote)))
        goto out;
    *bytes = (hl > 1 ? hl - 1 : 0) + sizeof mid - 1 + body->len + sizeof end - 1;
    if (remote)
        rc = sl_put_file(plan, local);
out:
    if (dir)
        sl_convert_remove_dir(dir);
    free(local);
    return rc;
}

int sl_convert_plan(const sl_convert_config *cfg, const char *plan, unsigned tasks,
                    sl_convert_plan_result *res)
{
    static const char fn[] = "sl_convert_plan";
    if (!cfg || !plan || !res)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    memset(res, 0, sizeof *res);
    int rc = sl_check_config_size(fn, cfg->size, sizeof *cfg);
    if (rc)
        return rc;
    if (cfg->format == SL_FORMAT_LMDB)
        return sl_fail(SL_EINVAL, "%s: an LMDB split is one store written by one process: convert "
                       "it on one machine (sluice convert without --plan-out)", fn);
    if (cfg->source == SL_SOURCE_IDX || cfg->source == SL_SOURCE_TFRECORD)
        return sl_fail(SL_EINVAL, "%s: --from %s: the images are inside %s, not files a task "
                       "could read: convert it on one machine", fn,
                       cfg->source == SL_SOURCE_IDX ? "idx" : "tfrecord",
                       cfg->source == SL_SOURCE_IDX ? "the IDX file" : "the shards");
    sl_convert_state st;
    sbuf body = {0};
    char text[SL_CONVERT_PLAN_MAX], cwd[PATH_MAX], *out = NULL, *head = NULL;
    uint64_t *toff = NULL, *tlen = NULL;
    rc = sl_convert_prepare_inputs(cfg, &st);
    if (rc)
        goto out;
    if (tasks == 0)
        tasks = st.nshards;
    if (tasks > st.nshards) {
        rc = sl_fail(SL_EINVAL, "%s: %u tasks for %u shards: a shard is written by one task, so at "
                     "most %u tasks (or more shards: --shards)", fn, tasks, st.nshards, st.nshards);
        goto out;
    }
    sl_convert_plan_text(&st, text, sizeof text);
    if ((rc = check_out_before(&st, text, &out)))
        goto out;
    if (!getcwd(cwd, sizeof cwd)) {
        rc = sl_fail(SL_EIO, "%s: getcwd: %s", fn, strerror(errno));
        goto out;
    }
    toff = calloc(tasks, sizeof *toff);
    tlen = calloc(tasks, sizeof *tlen);
    if (!toff || !tlen) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    if ((rc = write_body(&st, tasks, cwd, &body, toff, tlen)))
        goto out;
    if (!(head = head_json(&st, tasks, text, out, toff, tlen))) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    /* OUT's marker first: a plan file then always has its output planned */
    char marker[600];
    snprintf(marker, sizeof marker, ".%s.plan", cfg->name);
    if ((rc = sl_out_put(out, marker, text, strlen(text), cfg->fsync)))
        goto out;
    uint64_t bytes = 0;
    if ((rc = write_plan(plan, head, &body, cfg->fsync, &bytes)))
        goto out;
    res->inputs = st.in.n;
    res->shards = st.nshards;
    res->tasks = tasks;
    res->plan_bytes = bytes;
out:
    cJSON_free(head);
    free(body.p);
    free(toff);
    free(tlen);
    free(out);
    sl_convert_state_fini(&st);
    return rc;
}

/* ---------------------------------------------------------------- reading */
void sl_plan_fini(sl_plan *p)
{
    free(p->path);
    free(p->text);
    free(p->out);
    free(p->name);
    free(p->input);
    free(p->idx_labels);
    for (uint32_t i = 0; p->class_names && i < p->nclass_names; i++)
        free(p->class_names[i]);
    free(p->class_names);
    free(p->task_off);
    free(p->task_len);
    memset(p, 0, sizeof *p);
}

/* The first line of the plan at path (malloc'd, NUL-terminated, without
 * its newline); *body_off the byte after it. */
static int read_head(const char *fn, const char *path, char **line, uint64_t *body_off)
{
    uint64_t size;
    size_t want = 1 << 16, have = 0;
    char *buf = NULL;
    int rc = sl_bytes_size(path, &size);
    if (rc)
        return sl_fail(rc, "%s: the plan: %s", fn, sl_errmsg());
    for (;;) {
        size_t n = size < want ? (size_t)size : want;
        char *nb = realloc(buf, n + 1);
        if (!nb) {
            free(buf);
            return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
        }
        buf = nb;
        if (n > have && (rc = sl_bytes_read(path, buf + have, n - have, have))) {
            free(buf);
            return sl_fail(rc, "%s: the plan: %s", fn, sl_errmsg());
        }
        have = n;
        buf[have] = 0;
        char *nl = memchr(buf, '\n', have);
        if (nl) {
            *nl = 0;
            *line = buf;
            *body_off = (uint64_t)(nl - buf) + 1;
            return SL_OK;
        }
        if (have == size || want >= PLAN_HEAD_MAX) {
            free(buf);
            return sl_fail(SL_ECORRUPT, "%s: %s: not a sluice plan (no first line)", fn, path);
        }
        want *= 2;
    }
}

static int get_str(const char *fn, const char *path, const cJSON *o, const char *k, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v))
        return sl_fail(SL_ECORRUPT, "%s: %s: %s: missing or not a string", fn, path, k);
    if (!(*out = strdup(v->valuestring)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    return SL_OK;
}

static int get_u64s(const char *fn, const char *path, const cJSON *o, const char *k, uint64_t *v)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, k);
    const char *t = cJSON_IsString(s) ? s->valuestring : NULL;
    const char *end = t ? t + strlen(t) : NULL;
    if (!t || sl_parse_u64(&t, end, v) || t != end)
        return sl_fail(SL_ECORRUPT, "%s: %s: %s: missing or not a decimal string", fn, path, k);
    return SL_OK;
}

static int get_int(const char *fn, const char *path, const cJSON *o, const char *k, int64_t lo,
                   int64_t hi, int64_t *v)
{
    return sl_json_get_int(o, k, 1, lo, hi, v, fn, path);
}

static int parse_head(const char *fn, sl_plan *p, cJSON *o)
{
    const char *path = p->path;
    int64_t v;
    char *s = NULL, *made = NULL;
    int rc = get_int(fn, path, o, "sluice_plan", 0, INT32_MAX, &v);
    if (rc)
        return sl_fail(SL_EINVAL, "%s: %s: not a sluice plan (%s)", fn, path, sl_errmsg());
    if (v != SL_PLAN_FORMAT)
        return sl_fail(SL_EINVAL, "%s: %s: plan format %lld; this sluice (%s) reads format %d: "
                       "plan again with this sluice", fn, path, (long long)v, SLUICE_VERSION,
                       SL_PLAN_FORMAT);
    if ((rc = get_str(fn, path, o, "made_by", &made)))
        return rc;
    snprintf(p->made_by, sizeof p->made_by, "%s", made);
    free(made);
    if (strcmp(p->made_by, "sluice " SLUICE_VERSION))
        return sl_fail(SL_EINVAL, "%s: %s: made by %s; this is sluice %s, whose encoder may write "
                       "other bytes: plan again with this sluice, or run the tasks with the one "
                       "that made the plan", fn, path, p->made_by, SLUICE_VERSION);
    if ((rc = get_str(fn, path, o, "text", &p->text)) || (rc = get_str(fn, path, o, "out", &p->out)) ||
        (rc = get_str(fn, path, o, "name", &p->name)) ||
        (rc = get_str(fn, path, o, "input", &p->input)) || (rc = get_str(fn, path, o, "digest", &s)))
        goto out;
    char hex[24];
    p->digest = fnv64(p->text);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)p->digest);
    if (strcmp(hex, s)) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: digest %s does not match its options' text (%s): the "
                     "plan was changed by hand or damaged", fn, path, s, hex);
        goto out;
    }
    free(s);
    s = NULL;
    if ((rc = get_str(fn, path, o, "source", &s)))
        goto out;
    p->source = !strcmp(s, "list") ? SL_SOURCE_LIST : SL_SOURCE_FOLDER;
    free(s);
    s = NULL;
    if ((rc = get_str(fn, path, o, "format", &s)))
        goto out;
    p->format = !strcmp(s, "wds") ? SL_FORMAT_WDS : SL_FORMAT_TFRECORD;
    if ((rc = get_u64s(fn, path, o, "seed", &p->seed)) ||
        (rc = get_u64s(fn, path, o, "max_pixels", &p->max_pixels)))
        goto out;
    /* the integer fields, each in its range (read in this order: the first
     * bad one is named), then stored: every value fits its field */
    enum { I_SHUFFLE, I_QUALITY, I_RESIZE, I_LABEL_OFFSET, I_INPUTS, I_SHARDS, I_TASKS,
           I_CLASSES, I_EXPLICIT, I_N };
    static const struct {
        const char *key;
        int64_t lo, hi;
    } ints[I_N] = {
        [I_SHUFFLE] = {"shuffle", 0, 1},
        [I_QUALITY] = {"quality", 1, 100},
        [I_RESIZE] = {"resize_short", 0, 65535},
        [I_LABEL_OFFSET] = {"label_offset", INT32_MIN, INT32_MAX},
        [I_INPUTS] = {"inputs", 1, UINT32_MAX},
        [I_SHARDS] = {"shards", 1, 99999},
        [I_TASKS] = {"tasks", 1, 99999},
        [I_CLASSES] = {"num_classes", 0, UINT32_MAX},
        [I_EXPLICIT] = {"explicit_names", 0, 1},
    };
    int64_t iv[I_N];
    for (int i = 0; i < I_N; i++)
        if ((rc = get_int(fn, path, o, ints[i].key, ints[i].lo, ints[i].hi, &iv[i])))
            goto out;
    p->shuffle = (int)iv[I_SHUFFLE];
    p->quality = (int)iv[I_QUALITY];
    p->resize_short = (int)iv[I_RESIZE];
    p->label_offset = (int)iv[I_LABEL_OFFSET];
    p->inputs = (uint64_t)iv[I_INPUTS];
    p->shards = (unsigned)iv[I_SHARDS];
    p->tasks = (unsigned)iv[I_TASKS];
    p->num_classes = (uint32_t)iv[I_CLASSES];
    p->explicit_names = (int)iv[I_EXPLICIT];
    /* restart markers (issue 41): optional, plans made before have none */
    v = 0;
    if ((rc = sl_json_get_int(o, "restart_mcus", 0, 0, UINT32_MAX, &v, fn, path)))
        goto out;
    p->restart_mcus = (unsigned)v;
    v = 0;
    if ((rc = sl_json_get_int(o, "restart_rows", 0, 0, 65535, &v, fn, path)))
        goto out;
    p->restart_rows = (unsigned)v;
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(o, "class_names");
    if (cJSON_IsArray(names)) {
        int n = cJSON_GetArraySize(names);
        if (!(p->class_names = calloc((size_t)n + 1, sizeof *p->class_names))) {
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
            goto out;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, names)
        {
            if (!cJSON_IsString(it) || !(p->class_names[p->nclass_names] = strdup(it->valuestring))) {
                rc = sl_fail(SL_ECORRUPT, "%s: %s: class_names: not strings", fn, path);
                goto out;
            }
            p->nclass_names++;
        }
    }
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(o, "task_bytes");
    if (!cJSON_IsArray(tb) || cJSON_GetArraySize(tb) != (int)p->tasks) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: task_bytes: want %u pairs", fn, path, p->tasks);
        goto out;
    }
    p->task_off = calloc(p->tasks, sizeof *p->task_off);
    p->task_len = calloc(p->tasks, sizeof *p->task_len);
    if (!p->task_off || !p->task_len) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    for (unsigned k = 0; k < p->tasks; k++) {
        const cJSON *pair = cJSON_GetArrayItem(tb, (int)k);
        int64_t a, b;
        if (!sl_json_is_int(cJSON_GetArrayItem(pair, 0), 0, SL_JSON_INT_MAX, &a) ||
            !sl_json_is_int(cJSON_GetArrayItem(pair, 1), 0, SL_JSON_INT_MAX, &b)) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: task_bytes[%u]: not two byte counts", fn, path, k);
            goto out;
        }
        p->task_off[k] = (uint64_t)a;
        p->task_len[k] = (uint64_t)b;
    }
    if (p->tasks > p->shards)
        rc = sl_fail(SL_ECORRUPT, "%s: %s: %u tasks for %u shards", fn, path, p->tasks, p->shards);
out:
    free(s);
    return rc;
}

/* The header's options (what a task converts with) must be those its text
 * (and so its digest, and OUT's marker) was made with. */
static int check_options(const char *fn, const sl_plan *p)
{
    const char *h = strstr(p->text, "\ninputs_hash ");
    char now[SL_CONVERT_PLAN_MAX], diff[512];
    if (!h)
        return sl_fail(SL_ECORRUPT, "%s: %s: its text has no inputs_hash", fn, p->path);
    uint64_t ihash = strtoull(h + 13, NULL, 16);
    sl_convert_plan_text_of(&p->cfg, p->inputs, ihash, p->shards,
                            (const char *const *)p->class_names, p->nclass_names, now, sizeof now);
    if (!strcmp(now, p->text))
        return SL_OK;
    sl_convert_plan_diff(p->text, now, diff, sizeof diff);
    return sl_fail(SL_EINVAL, "%s: %s: its options differ from those it was made with (%s): the "
                   "plan was edited; cut a new one with --plan-out", fn, p->path, diff);
}

int sl_plan_load(const char *fn, const char *path, sl_plan *p)
{
    char *line = NULL;
    memset(p, 0, sizeof *p);
    if (!(p->path = strdup(path)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    int rc = read_head(fn, path, &line, &p->body_off);
    if (rc)
        return rc;
    static const char tail[] = ",\"shard_list\":[";
    size_t n = strlen(line), tl = sizeof tail - 1;
    if (n < tl || strcmp(line + n - tl, tail)) {
        free(line);
        return sl_fail(SL_ECORRUPT, "%s: %s: not a sluice plan (its first line does not end in "
                       "\"shard_list\":[)", fn, path);
    }
    line[n - tl] = '}';
    line[n - tl + 1] = 0;
    cJSON *o = cJSON_Parse(line);
    free(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return sl_fail(SL_ECORRUPT, "%s: %s: not a sluice plan (its first line is not JSON)", fn, path);
    }
    rc = parse_head(fn, p, o);
    cJSON_Delete(o);
    if (rc)
        return rc;
    sl_convert_config c = SL_CONVERT_CONFIG_INIT;
    c.source = p->source;
    c.input = p->input;
    c.out_dir = p->out;
    c.name = p->name;
    c.shards = p->shards;
    c.format = p->format;
    c.quality = p->quality;
    c.resize_short = p->resize_short;
    c.max_pixels = p->max_pixels;
    c.shuffle_seed = p->seed;
    c.shuffle = p->shuffle;
    c.label_offset = p->label_offset;
    c.restart_mcus = p->restart_mcus;
    c.restart_rows = p->restart_rows;
    if (p->explicit_names) {
        c.class_names = (const char *const *)p->class_names;
        c.num_class_names = p->nclass_names;
    }
    p->cfg = c;
    return check_options(fn, p);
}

int sl_plan_begin(const char *fn, const sl_convert_task_config *tc, sl_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!tc || !tc->plan)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    int rc = sl_check_config_size(fn, tc->size, sizeof *tc);
    return rc ? rc : sl_plan_load(fn, tc->plan, p);
}

/* One shard line of task k into st. */
static int parse_line(const char *fn, const sl_plan *p, unsigned k, char *line,
                      sl_convert_state *st, unsigned *seen)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == ',' || line[n - 1] == '\r' || line[n - 1] == ' '))
        line[--n] = 0;
    cJSON *o = cJSON_Parse(line);
    int64_t s, t, first;
    int rc = SL_OK;
    if (!cJSON_IsObject(o) || !sl_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "shard"), 0, p->shards - 1, &s) ||
        !sl_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "task"), 0, p->tasks - 1, &t) ||
        !sl_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "first"), 0, SL_JSON_INT_MAX, &first)) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: task %u's lines: a line that is not a shard's", fn, p->path, k);
        goto out;
    }
    uint64_t b = sl_convert_shard_begin(p->inputs, p->shards, (unsigned)s);
    uint64_t e = sl_convert_shard_begin(p->inputs, p->shards, (unsigned)s + 1);
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(o, "inputs");
    if ((unsigned)t != k || sl_plan_shard_task(p, (unsigned)s) != k || (uint64_t)first != b ||
        !cJSON_IsArray(ins) || (uint64_t)cJSON_GetArraySize(ins) != e - b) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: shard %lld: its line does not match the plan's header "
                     "(task %lld, first %lld, %d inputs)", fn, p->path, (long long)s, (long long)t,
                     (long long)first, cJSON_GetArraySize(ins));
        goto out;
    }
    uint64_t pos = b;
    const cJSON *it;
    cJSON_ArrayForEach(it, ins)
    {
        const cJSON *ps = cJSON_GetArrayItem(it, 0);
        int64_t label, size;
        if (!cJSON_IsString(ps) || !sl_json_is_int(cJSON_GetArrayItem(it, 1), 0, INT32_MAX, &label) ||
            !sl_json_is_int(cJSON_GetArrayItem(it, 2), 0, SL_JSON_INT_MAX, &size)) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: shard %lld: input %llu: want [path, label, size]", fn,
                         p->path, (long long)s, (unsigned long long)(pos - b));
            goto out;
        }
        sl_input *in = &st->in.items[st->order[pos++]];
        if (in->path) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: shard %lld listed twice", fn, p->path, (long long)s);
            goto out;
        }
        if (!(in->path = strdup(ps->valuestring))) {
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
            goto out;
        }
        in->label = label;
        in->size = (uint64_t)size;
    }
    (*seen)++;
out:
    cJSON_Delete(o);
    return rc;
}

/* Task k's output positions: [*first, *end). */
static void task_positions(const sl_plan *p, unsigned k, uint64_t *first, uint64_t *end)
{
    unsigned f = 0, e = 0;
    *first = *end = 0;
    if (k >= p->tasks || !p->shards) /* no plan loaded: none */
        return;
    sl_plan_task_shards(p, k, &f, &e);
    *first = sl_convert_shard_begin(p->inputs, p->shards, f);
    *end = sl_convert_shard_begin(p->inputs, p->shards, e);
}

void sl_plan_state_fini(const sl_plan *p, unsigned k, sl_convert_state *st)
{
    uint64_t first, end;
    task_positions(p, k, &first, &end);
    for (uint64_t i = 0; st->in.items && i < end - first; i++)
        free(st->in.items[i].path);
    free(st->in.items);
    st->in.items = NULL;
    st->in.n = 0;
    st->cfg = NULL;
    sl_convert_state_fini(st);
}

int sl_plan_state(const char *fn, const sl_plan *p, unsigned k, sl_convert_state *st)
{
    uint64_t first, end;
    memset(st, 0, sizeof *st);
    task_positions(p, k, &first, &end);
    st->cfg = &p->cfg;
    st->in.n = p->inputs;
    st->nshards = p->shards;
    /* items: the task's inputs only; order[pos] indexes them (the others'
     * positions are never read: their shards are kept) */
    st->in.items = calloc(end > first ? end - first : 1, sizeof *st->in.items);
    st->order = malloc(p->inputs * sizeof *st->order);
    st->kept = calloc(p->shards, 1);
    size_t pl = strlen(p->out) + strlen(p->name) + 16;
    st->plan_path = malloc(pl);
    if (!st->in.items || !st->order || !st->kept || !st->plan_path)
        return sl_fail(SL_ENOMEM, "%s: out of memory for %llu inputs", fn,
                       (unsigned long long)p->inputs);
    snprintf(st->plan_path, pl, "%s/.%s.plan", p->out, p->name);
    for (uint64_t i = 0; i < p->inputs; i++)
        st->order[i] = i >= first && i < end ? (uint32_t)(i - first) : 0;
    st->class_names = (const char *const *)p->class_names;
    st->nclass_names = p->nclass_names;
    st->num_classes = p->num_classes;
    if (k >= p->tasks || p->task_len[k] == 0)
        return SL_OK;
    char *buf = malloc(p->task_len[k] + 1);
    if (!buf)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory for task %u's lines", fn, p->path, k);
    int rc = sl_bytes_read(p->path, buf, p->task_len[k], p->body_off + p->task_off[k]);
    if (rc) {
        free(buf);
        return sl_fail(rc, "%s: the plan: %s", fn, sl_errmsg());
    }
    buf[p->task_len[k]] = 0;
    unsigned f, e, seen = 0;
    sl_plan_task_shards(p, k, &f, &e);
    for (char *line = buf, *nl; !rc && *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            nl = line + strlen(line) - 1;
        else
            *nl = 0;
        rc = parse_line(fn, p, k, line, st, &seen);
    }
    free(buf);
    if (!rc && seen != e - f)
        rc = sl_fail(SL_ECORRUPT, "%s: %s: task %u has %u shard lines, its shards are %u", fn,
                     p->path, k, seen, e - f);
    return rc;
}

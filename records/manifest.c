/*
 * records/manifest.c - DIR/dataset.json: what a dataset directory holds and
 * how it was made. Parsed and printed with cJSON (libcjson).
 *
 *   {
 *     "version": 1,
 *     "created_by": "sluice 0.1.0",
 *     "label_offset": 0,
 *     "num_classes": 10,
 *     "classes": ["T-shirt/top", "Trouser", ...],          optional
 *     "splits": {
 *       "train": {"format": "tfrecord", "records": 60000, "shards": 4,
 *                 "bytes": 31457280, "skipped": 0, "source": "idx ..."}
 *     }
 *   }
 *
 * Required: version (1), num_classes, splits; in a split format ("tfrecord"
 * or "lmdb"), records and shards. The rest default to 0 / "" when absent.
 * Anything present with the wrong type or an out-of-range value is
 * SL_ECORRUPT naming the file and the field ("splits.train.records"), since a
 * reader that guessed would read the wrong shards.
 *
 * Counts are JSON numbers, i.e. doubles: exact up to 2^53, which save checks.
 * Save writes "dataset.json.tmp", fsyncs it, renames it over dataset.json and
 * fsyncs the directory (sl_write_file_atomic), so readers see the old or the
 * new file, never half.
 */
#include "records_int.h"
#include "bytesrc.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

/* JSON numbers are doubles: integers are exact up to here. */
#define JSON_INT_MAX SL_JSON_INT_MAX /* 2^53 */
/* dataset.json is small; anything bigger is not ours. */
#define MANIFEST_MAX_BYTES (64u << 20)

static const char *format_name(sl_format f)
{
    return f == SL_FORMAT_LMDB ? "lmdb" : f == SL_FORMAT_WDS ? "wds" : "tfrecord";
}

void sl_manifest_init(sl_manifest *m)
{
    memset(m, 0, sizeof *m);
    m->version = 1;
}

void sl_manifest_fini(sl_manifest *m)
{
    if (!m || !m->class_names)
        return;
    for (uint32_t i = 0; i < m->num_classes; i++)
        free(m->class_names[i]);
    free(m->class_names);
    m->class_names = NULL;
}

sl_manifest_split *sl_manifest_split_find(sl_manifest *m, const char *name)
{
    if (!m || !name)
        return NULL;
    for (size_t i = 0; i < m->nsplits; i++)
        if (strcmp(m->splits[i].name, name) == 0)
            return &m->splits[i];
    return NULL;
}

int sl_manifest_split_put(sl_manifest *m, const sl_manifest_split *s)
{
    sl_manifest_split *dst;
    if (!m || !s)
        return sl_fail(SL_EINVAL, "sl_manifest_split_put: NULL argument");
    if (!s->name[0] || !memchr(s->name, '\0', sizeof s->name))
        return sl_fail(SL_EINVAL, "sl_manifest_split_put: split name empty or not terminated");
    if (!memchr(s->source, '\0', sizeof s->source))
        return sl_fail(SL_EINVAL, "sl_manifest_split_put: split %s: source not terminated",
                       s->name);
    dst = sl_manifest_split_find(m, s->name);
    if (!dst) {
        if (m->nsplits >= SL_MANIFEST_MAX_SPLITS)
            return sl_fail(SL_EINVAL, "sl_manifest_split_put: split %s: already %d splits", s->name,
                           SL_MANIFEST_MAX_SPLITS);
        dst = &m->splits[m->nsplits++];
    }
    if (dst != s)
        *dst = *s;
    return SL_OK;
}

int sl_manifest_set_classes(sl_manifest *m, const char *const *names, uint32_t n)
{
    char **copy = NULL;
    if (!m)
        return sl_fail(SL_EINVAL, "sl_manifest_set_classes: NULL manifest");
    if (names && n) {
        copy = calloc(n, sizeof *copy);
        if (!copy)
            return sl_fail(SL_ENOMEM, "sl_manifest_set_classes: out of memory");
        for (uint32_t i = 0; i < n; i++) {
            if (!names[i] || !(copy[i] = strdup(names[i]))) {
                int rc = names[i] ? SL_ENOMEM : SL_EINVAL;
                for (uint32_t j = 0; j < i; j++)
                    free(copy[j]);
                free(copy);
                return sl_fail(rc, "sl_manifest_set_classes: class %u: %s", i,
                               rc == SL_EINVAL ? "NULL name" : "out of memory");
            }
        }
    }
    sl_manifest_fini(m);
    m->class_names = copy;
    m->num_classes = n;
    return SL_OK;
}

/* ---------------------------------------------------------------- load */

typedef struct load_ctx {
    const char *file; /* for messages */
} load_ctx;

static int bad(const load_ctx *c, const char *field, const char *what)
{
    return sl_fail(SL_ECORRUPT, "sl_manifest_load: %s: field %s: %s", c->file, field, what);
}

/* A non-negative integer field (<= max; common/json.h checks it before it
 * is converted). required: absence is an error; otherwise *v keeps its
 * value. */
static int get_uint(const load_ctx *c, const cJSON *obj, const char *key, const char *field,
                    int required, int64_t max, uint64_t *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    char name[200];
    int64_t x;
    if (!it && !required)
        return SL_OK;
    snprintf(name, sizeof name, "field %s", field);
    int rc = sl_json_int(it, 0, max, &x, "sl_manifest_load", c->file, name);
    if (rc)
        return rc;
    *v = (uint64_t)x;
    return SL_OK;
}

/* A string field copied into dst[cap]; absence keeps dst. */
static int get_str(const load_ctx *c, const cJSON *obj, const char *key, const char *field,
                   int required, char *dst, size_t cap)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it)
        return required ? bad(c, field, "missing") : SL_OK;
    if (!cJSON_IsString(it) || !it->valuestring)
        return bad(c, field, "not a string");
    size_t n = strlen(it->valuestring);
    if (n >= cap)
        return bad(c, field, "string too long");
    memcpy(dst, it->valuestring, n + 1);
    return SL_OK;
}

static int load_split(const load_ctx *c, const cJSON *js, sl_manifest_split *s)
{
    char field[160], fmt[16] = "";
    uint64_t shards = 0;
    int rc;

    snprintf(field, sizeof field, "splits.%s", js->string);
    if (!cJSON_IsObject(js))
        return bad(c, field, "not an object");
    if (strlen(js->string) == 0 || strlen(js->string) >= sizeof s->name)
        return bad(c, field, "split name empty or too long");
    memset(s, 0, sizeof *s);
    memcpy(s->name, js->string, strlen(js->string) + 1);

#define FIELD(k) (snprintf(field, sizeof field, "splits.%s.%s", s->name, k), field)
    if ((rc = get_str(c, js, "format", FIELD("format"), 1, fmt, sizeof fmt)))
        return rc;
    if (strcmp(fmt, "tfrecord") == 0)
        s->format = SL_FORMAT_TFRECORD;
    else if (strcmp(fmt, "lmdb") == 0)
        s->format = SL_FORMAT_LMDB;
    else if (strcmp(fmt, "wds") == 0)
        s->format = SL_FORMAT_WDS;
    else
        return bad(c, field, "not \"tfrecord\", \"lmdb\" or \"wds\"");
    if ((rc = get_uint(c, js, "records", FIELD("records"), 1, JSON_INT_MAX, &s->records)) ||
        (rc = get_uint(c, js, "shards", FIELD("shards"), 1, UINT32_MAX, &shards)) ||
        (rc = get_uint(c, js, "bytes", FIELD("bytes"), 0, JSON_INT_MAX, &s->bytes)) ||
        (rc = get_uint(c, js, "skipped", FIELD("skipped"), 0, JSON_INT_MAX, &s->skipped)) ||
        (rc = get_str(c, js, "source", FIELD("source"), 0, s->source, sizeof s->source)))
        return rc;
#undef FIELD
    s->shards = (uint32_t)shards;
    return SL_OK;
}

static int load_classes(const load_ctx *c, const cJSON *arr, sl_manifest *m)
{
    const cJSON *it;
    size_t n = 0;

    if (cJSON_IsNull(arr))
        return SL_OK;
    if (!cJSON_IsArray(arr))
        return bad(c, "classes", "not an array");
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsString(it) || !it->valuestring)
            return bad(c, "classes", "element not a string");
        n++;
    }
    if (n != m->num_classes)
        return bad(c, "classes", "length differs from num_classes");
    if (n == 0)
        return SL_OK;
    const char **names = malloc(n * sizeof *names);
    if (!names)
        return sl_fail(SL_ENOMEM, "sl_manifest_load: %s: out of memory", c->file);
    n = 0;
    cJSON_ArrayForEach(it, arr) names[n++] = it->valuestring;
    int rc = sl_manifest_set_classes(m, names, (uint32_t)n);
    free(names);
    return rc;
}

static int load_json(const load_ctx *c, const cJSON *root, sl_manifest *m)
{
    const cJSON *it, *splits;
    uint64_t u;
    int rc;

    if (!cJSON_IsObject(root))
        return sl_fail(SL_ECORRUPT, "sl_manifest_load: %s: top level is not an object", c->file);
    if ((rc = get_uint(c, root, "version", "version", 1, JSON_INT_MAX, &u)))
        return rc;
    if (u != 1)
        return sl_fail(SL_ENOTSUP, "sl_manifest_load: %s: version %llu (this build reads 1)",
                       c->file, (unsigned long long)u);
    m->version = 1;
    if ((rc = get_str(c, root, "created_by", "created_by", 0, m->created_by,
                      sizeof m->created_by)))
        return rc;
    it = cJSON_GetObjectItemCaseSensitive(root, "label_offset");
    if (it && (rc = sl_json_int(it, -JSON_INT_MAX, JSON_INT_MAX, &m->label_offset,
                                "sl_manifest_load", c->file, "field label_offset")))
        return rc;
    if ((rc = get_uint(c, root, "num_classes", "num_classes", 1, UINT32_MAX, &u)))
        return rc;
    m->num_classes = (uint32_t)u;
    it = cJSON_GetObjectItemCaseSensitive(root, "classes");
    if (it && (rc = load_classes(c, it, m)))
        return rc;

    splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
    if (!splits)
        return bad(c, "splits", "missing");
    if (!cJSON_IsObject(splits))
        return bad(c, "splits", "not an object");
    cJSON_ArrayForEach(it, splits) {
        sl_manifest_split s;
        if (m->nsplits >= SL_MANIFEST_MAX_SPLITS)
            return bad(c, "splits", "too many splits");
        if (sl_manifest_split_find(m, it->string))
            return bad(c, "splits", "split named twice");
        if ((rc = load_split(c, it, &s)))
            return rc;
        m->splits[m->nsplits++] = s;
    }
    return SL_OK;
}

int sl_manifest_load(const char *dir, sl_manifest *m)
{
    char path[4096];
    char *text = NULL;
    cJSON *root = NULL;
    int rc;
    load_ctx c = {.file = path};

    if (!dir || !m)
        return sl_fail(SL_EINVAL, "sl_manifest_load: NULL argument");
    sl_manifest_init(m);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, SL_MANIFEST_FILE) >= sizeof path)
        return sl_fail(SL_EINVAL, "sl_manifest_load: %s: path too long", dir);
    size_t got = 0;
    sl_bytesrc *src = NULL;
    /* a local file, a web server's or an object store's alike (bytesrc.h);
     * one larger than MANIFEST_MAX_BYTES is refused before it is read */
    if ((rc = sl_bytesrc_open(path, NULL, &src)))
        return sl_fail(rc, "sl_manifest_load: %s", sl_errmsg());
    rc = sl_bytesrc_get(src, MANIFEST_MAX_BYTES, (uint8_t **)&text, &got);
    sl_bytesrc_close(src);
    if (rc)
        return sl_fail(rc, "sl_manifest_load: %s", sl_errmsg());
    const char *end = NULL;
    /* ParseWithLengthOpts reports the error position through end, unlike
     * cJSON_GetErrorPtr, which is a process-wide global. */
    root = cJSON_ParseWithLengthOpts(text, got, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + got ? (size_t)(end - text) : 0;
        rc = sl_fail(SL_ECORRUPT, "sl_manifest_load: %s: not valid JSON (near byte %zu)", path,
                     at);
        goto out;
    }
    rc = load_json(&c, root, m);

out:
    if (rc)
        sl_manifest_fini(m);
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- save */

/* Add a count, refusing values a double cannot hold exactly, written as
 * exact decimal text (cJSON's printer keeps 15 digits of 9007199254740992:
 * it would load back as 9007199254740990). */
static int add_count(cJSON *obj, const char *key, uint64_t v, const char *split)
{
    if (v > ((uint64_t)1 << 53))
        return sl_fail(SL_EINVAL, "sl_manifest_save: split %s: %s %llu exceeds 2^53", split, key,
                       (unsigned long long)v);
    if (!sl_json_add_int(obj, key, (int64_t)v))
        return sl_fail(SL_ENOMEM, "sl_manifest_save: out of memory");
    return SL_OK;
}

static int build_json(const sl_manifest *m, cJSON **out)
{
    cJSON *root = cJSON_CreateObject(), *splits, *arr;
    int rc = SL_OK;

    *out = NULL;
    if (!root)
        return sl_fail(SL_ENOMEM, "sl_manifest_save: out of memory");
    if (!memchr(m->created_by, '\0', sizeof m->created_by)) {
        rc = sl_fail(SL_EINVAL, "sl_manifest_save: created_by not terminated");
        goto fail;
    }
    if (m->label_offset < -JSON_INT_MAX || m->label_offset > JSON_INT_MAX) {
        rc = sl_fail(SL_EINVAL, "sl_manifest_save: label_offset %lld is outside -2^53..2^53",
                     (long long)m->label_offset);
        goto fail;
    }
    if (!cJSON_AddNumberToObject(root, "version", m->version) ||
        !cJSON_AddStringToObject(root, "created_by", m->created_by) ||
        !sl_json_add_int(root, "label_offset", m->label_offset) ||
        !cJSON_AddNumberToObject(root, "num_classes", m->num_classes))
        goto nomem;
    if (m->class_names) {
        if (!(arr = cJSON_AddArrayToObject(root, "classes")))
            goto nomem;
        for (uint32_t i = 0; i < m->num_classes; i++) {
            cJSON *s = cJSON_CreateString(m->class_names[i] ? m->class_names[i] : "");
            if (!s || !cJSON_AddItemToArray(arr, s)) {
                cJSON_Delete(s);
                goto nomem;
            }
        }
    }
    if (!(splits = cJSON_AddObjectToObject(root, "splits")))
        goto nomem;
    for (size_t i = 0; i < m->nsplits; i++) {
        const sl_manifest_split *s = &m->splits[i];
        if (!memchr(s->name, '\0', sizeof s->name) || !s->name[0] ||
            !memchr(s->source, '\0', sizeof s->source)) {
            rc = sl_fail(SL_EINVAL, "sl_manifest_save: split %zu: name or source not terminated",
                         i);
            goto fail;
        }
        cJSON *js = cJSON_AddObjectToObject(splits, s->name);
        if (!js || !cJSON_AddStringToObject(js, "format", format_name(s->format)))
            goto nomem;
        if ((rc = add_count(js, "records", s->records, s->name)) ||
            (rc = add_count(js, "shards", s->shards, s->name)) ||
            (rc = add_count(js, "bytes", s->bytes, s->name)) ||
            (rc = add_count(js, "skipped", s->skipped, s->name)))
            goto fail;
        if (!cJSON_AddStringToObject(js, "source", s->source))
            goto nomem;
    }
    *out = root;
    return SL_OK;

nomem:
    rc = sl_fail(SL_ENOMEM, "sl_manifest_save: out of memory");
fail:
    cJSON_Delete(root);
    return rc;
}

int sl_manifest_save(const char *dir, const sl_manifest *m)
{
    static const char fn[] = "sl_manifest_save";
    char path[4096];
    cJSON *root = NULL;
    char *text = NULL, *file = NULL;
    int rc;

    if (!dir || !m)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, SL_MANIFEST_FILE) >= sizeof path)
        return sl_fail(SL_EINVAL, "%s: %s: path too long", fn, dir);
    if ((rc = build_json(m, &root)))
        return rc;
    text = cJSON_Print(root);
    /* The file is the printed JSON and a final newline. */
    file = text ? sl_str_cat(text, "\n") : NULL;
    if (!file)
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    else
        rc = sl_write_file_atomic(path, file, strlen(file), 1, fn);
    free(file);
    free(text);
    cJSON_Delete(root);
    return rc;
}

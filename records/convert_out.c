/*
 * records/convert_out.c - a planned conversion's output (convert_task.h):
 * the names of its shards and receipts, writing a small object or file
 * there, the CRC-32C of one, OUT's plan marker checked against a plan,
 * and the receipts read back. Local folders and s3:// prefixes alike,
 * through the byte source (records/bytesrc.h) and records/remote_put.h.
 *
 * Threading: reentrant.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytesrc.h"
#include "common/json.h"
#include "convert_task.h"
#include "remote_put.h"

/* ---------------------------------------------------------------- output names */
char *sl_out_join(const char *out, const char *name)
{
    return sl_path_join(out, name);
}

int sl_out_remote(const char *out) { return sl_path_is_remote(out); }

int sl_plan_shard_name(const sl_plan *p, unsigned s, char *buf, size_t cap)
{
    char path[4096];
    int rc = sl_shard_path_fmt(path, sizeof path, "", p->name, s, p->shards, p->format);
    if (!rc && (size_t)snprintf(buf, cap, "%s", path[0] == '/' ? path + 1 : path) >= cap)
        rc = sl_fail(SL_EINVAL, "sl_convert_task: shard name too long");
    return rc;
}

int sl_plan_receipt_name(const sl_plan *p, unsigned s, char *buf, size_t cap)
{
    char name[512];
    int rc = sl_plan_shard_name(p, s, name, sizeof name);
    if (!rc && (size_t)snprintf(buf, cap, ".%s.receipt", name) >= cap)
        rc = sl_fail(SL_EINVAL, "sl_convert_task: receipt name too long");
    return rc;
}

int sl_out_put(const char *out, const char *name, const void *data, size_t len, int do_sync)
{
    char *path = sl_out_join(out, name);
    if (!path)
        return sl_fail(SL_ENOMEM, "sl_out_put: out of memory");
    int rc = sl_out_remote(path) ? sl_put_bytes(path, data, len)
                                 : sl_write_file_atomic(path, data, len, do_sync, "sl_out_put");
    free(path);
    return rc;
}

int sl_out_crc(const char *path, uint64_t *size, uint32_t *crc)
{
    const size_t chunk = (size_t)4 << 20;
    uint8_t *buf = NULL;
    int rc = sl_bytes_size(path, size);
    *crc = 0;
    if (rc)
        return rc;
    if (!(buf = malloc(chunk)))
        return sl_fail(SL_ENOMEM, "sl_out_crc: out of memory");
    for (uint64_t off = 0; off < *size && !rc; off += chunk) {
        size_t n = *size - off < chunk ? (size_t)(*size - off) : chunk;
        if (!(rc = sl_bytes_read(path, buf, n, off)))
            *crc = sl_crc32c(*crc, buf, n);
    }
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- the marker */
int sl_plan_check_out(const char *fn, const sl_plan *p, int *done)
{
    char name[600], *path;
    uint8_t *text = NULL;
    size_t len;
    int rc = SL_OK;
    *done = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, ".%s.%s", p->name, i ? "done" : "plan");
        if (!(path = sl_out_join(p->out, name)))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        rc = sl_bytes_get(path, &text, &len);
        free(path);
        if (rc != SL_ENOENT)
            break;
        sl_clear_error();
        *done = 1;
    }
    if (rc == SL_ENOENT) {
        *done = 0;
        return sl_fail(SL_ENOENT, "%s: %s has no .%s.plan: it was not planned (sluice convert "
                       "--plan-out writes it) or the marker was removed", fn, p->out, p->name);
    }
    if (rc)
        return rc;
    if (strcmp((const char *)text, p->text)) {
        char diff[512];
        sl_convert_plan_diff((const char *)text, p->text, diff, sizeof diff);
        rc = sl_fail(SL_EINVAL, "%s: %s/%s says the split was planned with other inputs or options "
                     "than %s (%s): use the plan that made it, or remove the split and plan again",
                     fn, p->out, name, p->path ? p->path : "this plan", diff);
    }
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- receipts */
void sl_receipt_fini(sl_receipt *r)
{
    for (size_t i = 0; i < r->nskipped; i++) {
        free(r->skipped_input[i]);
        free(r->skipped_reason[i]);
    }
    free(r->skipped_input);
    free(r->skipped_reason);
    memset(r, 0, sizeof *r);
}

int sl_receipt_load(const sl_plan *p, unsigned s, sl_receipt *r)
{
    static const char fn[] = "sl_convert_finish_plan";
    char name[600], *path;
    uint8_t *text = NULL;
    size_t len;
    memset(r, 0, sizeof *r);
    int rc = sl_plan_receipt_name(p, s, name, sizeof name);
    if (rc)
        return rc;
    if (!(path = sl_out_join(p->out, name)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    rc = sl_bytes_get(path, &text, &len);
    if (rc) {
        free(path);
        return rc;
    }
    cJSON *o = cJSON_Parse((const char *)text);
    free(text);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "plan");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "crc32c");
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(o, "skipped");
    int64_t v[5];
    static const char *keys[5] = {"shard", "task", "records", "bytes", "size"};
    for (int i = 0; i < 5 && !rc; i++)
        if (!sl_json_is_int(cJSON_GetObjectItemCaseSensitive(o, keys[i]), 0, SL_JSON_INT_MAX, &v[i]))
            rc = sl_fail(SL_ECORRUPT, "%s: %s: %s: missing or not a count", fn, path, keys[i]);
    const char *de = cJSON_IsString(d) ? d->valuestring : NULL, *ce = cJSON_IsString(c) ? c->valuestring : NULL;
    if (!rc && (!de || !ce || !cJSON_IsArray(sk)))
        rc = sl_fail(SL_ECORRUPT, "%s: %s: not a receipt", fn, path);
    if (!rc) {
        r->digest = strtoull(de, NULL, 16);
        r->crc = (uint32_t)strtoul(ce, NULL, 16);
        r->shard = (unsigned)v[0];
        r->task = (unsigned)v[1];
        r->records = (uint64_t)v[2];
        r->bytes = (uint64_t)v[3];
        r->size = (uint64_t)v[4];
        if (r->digest != p->digest)
            rc = sl_fail(SL_ECORRUPT, "%s: %s: written under another plan (digest %s, this plan's "
                         "%016llx)", fn, path, de, (unsigned long long)p->digest);
        else if (r->shard != s)
            rc = sl_fail(SL_ECORRUPT, "%s: %s: the receipt of shard %u", fn, path, r->shard);
    }
    int n = rc ? 0 : cJSON_GetArraySize(sk);
    if (n > 0) {
        r->skipped_input = calloc((size_t)n, sizeof *r->skipped_input);
        r->skipped_reason = calloc((size_t)n, sizeof *r->skipped_reason);
        if (!r->skipped_input || !r->skipped_reason)
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    }
    for (int i = 0; i < n && !rc; i++) {
        const cJSON *pair = cJSON_GetArrayItem(sk, i);
        const cJSON *a = cJSON_GetArrayItem(pair, 0), *b = cJSON_GetArrayItem(pair, 1);
        if (!cJSON_IsString(a) || !cJSON_IsString(b)) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: skipped[%d]: want [input, reason]", fn, path, i);
            break;
        }
        r->skipped_input[i] = strdup(a->valuestring);
        r->skipped_reason[i] = strdup(b->valuestring);
        r->nskipped++;
        if (!r->skipped_input[i] || !r->skipped_reason[i])
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    }
    cJSON_Delete(o);
    free(path);
    if (rc)
        sl_receipt_fini(r);
    return rc;
}

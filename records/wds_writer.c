/*
 * records/wds_writer.c - the WebDataset shard writer of `sluice convert
 * --to wds` (records/wds.h): one sample per Example record, as ustar
 * members KEY.<ext>, KEY.cls, KEY.json.
 *
 * DESIGN
 *   Reproducible bytes: sl_tar_header writes mode 0644, uid/gid 0, mtime 0,
 *   empty uname/gname, so the same records give the same shard. Atomic:
 *   the tar is written to "path.tmp" (common/fileio.h's sl_atomic_file),
 *   closed with two zero blocks, fsynced and renamed; its index (kept in
 *   memory as the members are written) then goes to "path.idx" the same
 *   way. A shard without its index is not whole for convert --resume.
 *
 * Threading: a writer belongs to one thread.
 */
#include "records/wds.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records_int.h"

#define WBUF ((size_t)1 << 20)

struct sl_wds_writer {
    sl_atomic_file af;
    char *path;
    unsigned flags;
    uint8_t *buf;
    size_t len;
    uint64_t off;           /* bytes written so far (buffered included) */
    sl_wds_index ix;
    size_t mcap, scap;
};

static int wflush(sl_wds_writer *w)
{
    int rc = w->len ? sl_atomic_write(&w->af, w->buf, w->len) : SL_OK;
    w->len = 0;
    return rc;
}

static int wput(sl_wds_writer *w, const void *p, size_t n)
{
    if (w->len + n > WBUF) {
        int rc = wflush(w);
        if (rc)
            return rc;
        if (n > WBUF) {
            w->off += n;
            return sl_atomic_write(&w->af, p, n);
        }
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    w->off += n;
    return SL_OK;
}

int sl_wds_writer_open(const char *path, unsigned flags, sl_wds_writer **out)
{
    sl_wds_writer *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w || !(w->path = strdup(path)) || !(w->buf = malloc(WBUF))) {
        if (w)
            free(w->path);
        free(w);
        return sl_fail(SL_ENOMEM, "sl_wds_writer_open: %s: out of memory", path);
    }
    w->flags = flags;
    int rc = sl_atomic_open(&w->af, w->path, "sl_wds_writer_open");
    if (rc) {
        free(w->buf);
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return SL_OK;
}

static int put_member(sl_wds_writer *w, const char *key, const char *ext, const void *data,
                      size_t n, int first)
{
    static const uint8_t zeros[SL_TAR_BLOCK];
    uint8_t h[SL_TAR_BLOCK];
    char name[128];
    int rc;
    if (snprintf(name, sizeof name, "%s.%s", key, ext) >= (int)sizeof name)
        return sl_fail(SL_EINVAL, "sl_wds_writer: %s: key '%s' too long", w->path, key);
    if ((rc = sl_tar_header(h, name, n)) || (rc = wput(w, h, sizeof h)))
        return rc;
    uint64_t data_off = w->off;
    if ((rc = wput(w, data, n)) || (rc = wput(w, zeros, (size_t)(sl_tar_pad(n) - n))))
        return rc;
    return sl_wds_index_add(&w->ix, &w->mcap, &w->scap, ext, name, data_off, n, !first);
}

int sl_wds_writer_write_example(sl_wds_writer *w, const char *key, const uint8_t *rec, size_t len)
{
    sl_image_example ex;
    char num[32], *js = NULL;
    int rc = sl_image_example_decode(rec, len, &ex);
    if (rc)
        return rc;
    const char *ext = "jpg";
    switch (sl_image_sniff(ex.image, ex.image_len)) {
    case SL_IMAGE_PNG: ext = "png"; break;
    case SL_IMAGE_BMP: ext = "bmp"; break;
    case SL_IMAGE_PPM: ext = "ppm"; break;
    case SL_IMAGE_WEBP: ext = "webp"; break;
    default: break;
    }
    snprintf(num, sizeof num, "%lld", (long long)ex.label);
    cJSON *o = cJSON_CreateObject();
    if (o) {
        char *fname = ex.filename ? strndup(ex.filename, ex.filename_len) : NULL;
        char *text = ex.text ? strndup(ex.text, ex.text_len) : NULL;
        int ok = cJSON_AddNumberToObject(o, "label", (double)ex.label) != NULL &&
                 (!ex.filename || (fname && cJSON_AddStringToObject(o, "filename", fname))) &&
                 (!ex.text || (text && cJSON_AddStringToObject(o, "class", text)));
        free(fname);
        free(text);
        js = ok ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
    }
    if (!js)
        return sl_fail(SL_ENOMEM, "sl_wds_writer: %s: out of memory", w->path);
    if (!(rc = put_member(w, key, ext, ex.image, ex.image_len, 1)) &&
        !(rc = put_member(w, key, "cls", num, strlen(num), 0)))
        rc = put_member(w, key, "json", js, strlen(js), 0);
    cJSON_free(js);
    return rc;
}

uint64_t sl_wds_writer_count(const sl_wds_writer *w) { return w->ix.nsamples; }

static void writer_free(sl_wds_writer *w)
{
    sl_wds_index_fini(&w->ix);
    free(w->buf);
    free(w->path);
    free(w);
}

int sl_wds_writer_close(sl_wds_writer *w)
{
    static const uint8_t zeros[2 * SL_TAR_BLOCK];
    char *idx = sl_str_cat(w->path, ".idx");
    int rc = idx ? SL_OK : sl_fail(SL_ENOMEM, "sl_wds_writer_close: out of memory");
    if (!rc)
        rc = wput(w, zeros, sizeof zeros);
    if (!rc)
        rc = wflush(w);
    if (!rc)
        rc = sl_atomic_commit(&w->af, !(w->flags & SL_TFW_NOSYNC));
    else
        sl_atomic_abort(&w->af);
    if (!rc) {
        char *text;
        size_t len;
        if (!(rc = sl_wds_index_format(&w->ix, &text, &len))) {
            rc = sl_write_file_atomic(idx, text, len, !(w->flags & SL_TFW_NOSYNC),
                                      "sl_wds_writer_close");
            free(text);
        }
    }
    free(idx);
    writer_free(w);
    return rc;
}

void sl_wds_writer_abort(sl_wds_writer *w)
{
    if (!w)
        return;
    sl_atomic_abort(&w->af);
    writer_free(w);
}

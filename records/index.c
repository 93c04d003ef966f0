/*
 * records/index.c - per-shard index files in DALI's text format.
 *
 * "<shard>.idx" has one line per record, "offset size\n", where offset is the
 * byte offset of the record's framing and size its framed size (16 + data
 * length), exactly as DALI's tools/tfrecord2idx writes it:
 *     idx_file.write(str(current) + ' ' + str(tfrecord_file.tell() - current) + '\n')
 * DALI's readers and our global-shuffle mode pread records through it, so a
 * bad index must be caught at load time, not as a wrong record later: parsing
 * is strict (decimal digits, blanks, decimal digits, newline), the first
 * entry starts at 0, and each entry starts where the previous one ends.
 *
 * Threading: all functions are reentrant.
 */
#include "records_int.h"
#include "bytesrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDX_OUT_BUF ((size_t)64 << 10) /* first text buffer of sl_index_write */

int sl_parse_u64(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    if (s == end || *s < '0' || *s > '9')
        return -1;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *p = s;
    *v = x;
    return 0;
}

int sl_index_load(const char *idx_path, sl_index_entry **entries, size_t *n)
{
    static const char fn[] = "sl_index_load";
    char *text = NULL;
    size_t len = 0, lines = 0, count = 0;
    sl_index_entry *e = NULL;
    int rc;

    *entries = NULL;
    *n = 0;
    /* local or remote alike (bytesrc.h) */
    if ((rc = sl_bytes_get(idx_path, (uint8_t **)&text, &len)))
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    e = malloc((lines + 1) * sizeof *e); /* +1: last line without newline */
    if (!e) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, idx_path);
        goto fail;
    }
    const char *p = text, *end = text + len;
    for (size_t line = 1; p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *ls = p; /* the line, for messages */
        int show = (int)(eol - ls > 60 ? 60 : eol - ls);
        uint64_t off, size;
        if (memchr(p, '\0', (size_t)(eol - p))) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: NUL byte", fn, idx_path, line);
            goto fail;
        }
        if (sl_parse_u64(&p, eol, &off) != 0 || p == eol || (*p != ' ' && *p != '\t')) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: expected \"offset size\", got \"%.*s\"",
                         fn, idx_path, line, show, ls);
            goto fail;
        }
        while (p < eol && (*p == ' ' || *p == '\t'))
            p++;
        if (sl_parse_u64(&p, eol, &size) != 0 || p != eol) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: bad size field in \"%.*s\"", fn,
                         idx_path, line, show, ls);
            goto fail;
        }
        if (size < SL_TFRECORD_OVERHEAD || size - SL_TFRECORD_OVERHEAD > SL_TFRECORD_MAX_LEN) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: impossible record size %llu", fn,
                         idx_path, line, (unsigned long long)size);
            goto fail;
        }
        uint64_t expect = count ? e[count - 1].offset + e[count - 1].size : 0;
        if (off != expect) {
            rc = sl_fail(SL_ECORRUPT,
                         "%s: %s: line %zu: offset %llu does not follow the previous entry "
                         "(expected %llu)",
                         fn, idx_path, line, (unsigned long long)off, (unsigned long long)expect);
            goto fail;
        }
        if (off + size < off) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: offset + size overflows", fn, idx_path,
                         line);
            goto fail;
        }
        e[count].offset = off;
        e[count].size = size;
        count++;
        p = eol < end ? eol + 1 : end;
    }
    free(text);
    *entries = e;
    *n = count;
    return SL_OK;

fail:
    free(e);
    free(text);
    return rc;
}

/* keep_prefix: on a bad record, hand back the whole records before it
 * along with the error (sl_index_build_prefix). */
static int index_build(const char *fn, const char *shard_path, int keep_prefix,
                       sl_index_entry **entries, size_t *n)
{
    sl_tfrecord_reader *r = NULL;
    sl_index_entry *e = NULL;
    size_t count = 0, cap = 1024;
    const uint8_t *data;
    size_t len;
    int rc;

    *entries = NULL;
    *n = 0;
    rc = sl_tfrecord_reader_open(shard_path, &r);
    if (rc)
        return rc;
    e = malloc(cap * sizeof *e);
    if (!e) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, shard_path);
        goto fail;
    }
    while ((rc = sl_tfrecord_reader_next(r, &data, &len)) == SL_OK) {
        if (count == cap) {
            sl_index_entry *ne = realloc(e, 2 * cap * sizeof *e);
            if (!ne) {
                rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, shard_path);
                goto fail;
            }
            e = ne;
            cap *= 2;
        }
        e[count].offset = sl_tfrecord_reader_offset(r);
        e[count].size = (uint64_t)len + SL_TFRECORD_OVERHEAD;
        count++;
    }
    if (rc != SL_EOF) {
        /* the reader's message names file, record and offset */
        if (!keep_prefix || rc == SL_ENOMEM || rc == SL_EIO)
            goto fail;
        sl_tfrecord_reader_close(r);
        *entries = e;
        *n = count;
        return rc;
    }
    sl_tfrecord_reader_close(r);
    *entries = e;
    *n = count;
    return SL_OK;

fail:
    free(e);
    sl_tfrecord_reader_close(r);
    return rc;
}

int sl_index_build(const char *shard_path, sl_index_entry **entries, size_t *n)
{
    return index_build("sl_index_build", shard_path, 0, entries, n);
}

int sl_index_build_prefix(const char *shard_path, sl_index_entry **entries, size_t *n)
{
    return index_build("sl_index_build_prefix", shard_path, 1, entries, n);
}

/* Writing: the DALI line of one record (tfrecord_writer.c streams them,
 * sl_index_write below writes a whole file). */

/* Decimal digits of v at p (no NUL); returns their count (1..20). snprintf
 * costs more than the rest of a small record's framing. */
static size_t put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

size_t sl_put_index_line(char *p, uint64_t offset, uint64_t size)
{
    size_t k = put_u64(p, offset);
    p[k++] = ' ';
    k += put_u64(p + k, size);
    p[k++] = '\n';
    return k;
}


int sl_index_write(const char *idx_path, const sl_index_entry *entries, size_t n)
{
    static const char fn[] = "sl_index_write";
    /* The whole text is built in memory and replaces the file in one step:
     * lines are 4 to 42 bytes, typically 15 to 20 for shards under 4 GB, so
     * it is about as large as the entries array (16 bytes an entry). */
    size_t cap = IDX_OUT_BUF, len = 0;
    char *out = malloc(cap);
    int rc;

    if (!out)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, idx_path);
    for (size_t i = 0; i < n; i++) {
        if (cap - len < SL_INDEX_LINE_MAX) {
            char *nb = cap <= SIZE_MAX / 2 ? realloc(out, cap * 2) : NULL;
            if (!nb) {
                free(out);
                return sl_fail(SL_ENOMEM, "%s: %s: out of memory (%zu entries)", fn, idx_path, n);
            }
            out = nb;
            cap *= 2;
        }
        len += sl_put_index_line(out + len, entries[i].offset, entries[i].size);
    }
    rc = sl_write_file_atomic(idx_path, out, len, 1, fn);
    free(out);
    return rc;
}

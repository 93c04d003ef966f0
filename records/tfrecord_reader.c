/*
 * records/tfrecord_reader.c - checked TFRecord reading: sequential and by
 * index entry.
 *
 * Format (TensorFlow core/lib/io/record_reader.cc), little-endian:
 *   u64 length | u32 masked_crc32c(length bytes) | data | u32 masked_crc32c(data)
 * Every byte of a file is covered by one of the two CRCs, so any single
 * damaged byte is detected.
 *
 * Order of checks, so that damage is reported and never trusted:
 *   1. 12 header bytes present (else truncated, unless 0 bytes: clean EOF);
 *   2. length CRC (before the length is used for anything);
 *   3. length <= SL_TFRECORD_MAX_LEN (else "absurd length");
 *   4. the whole record present (else truncated; checked against the file
 *      size before the buffer is grown, so a bad length allocates nothing);
 *   5. data CRC.
 *
 * The sequential reader reads big chunks through the byte source
 * (bytesrc.h: pread of a local file, ranged GETs of an object) into one
 * buffer (1 MiB locally, 4 MiB remotely, or the size of a smaller file, at
 * least 4 KiB; grown for larger records) and hands out views into it. The first error is sticky:
 * later calls return it again with the same message.
 *
 * Threading: a reader is used by one thread at a time;
 * sl_tfrecord_read_at() only uses pread and may share an fd across threads.
 */
#include "records.h"
#include "bytesrc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define TFR_BUF_SIZE ((size_t)1 << 20)
#define TFR_BUF_MIN ((size_t)4 << 10) /* >= one record header (12 bytes) */
/* A remote shard's chunk: one ranged GET each, so larger than a local
 * read's (at 20 ms a request, 4 MiB is 200 MB/s). */
#define TFR_REMOTE_CHUNK ((size_t)4 << 20)

struct sl_tfrecord_reader {
    char *path;
    sl_bytesrc *src;    /* the shard (bytesrc.h): pread, or ranged GETs */
    uint8_t *buf;       /* unread bytes are buf[pos..end) */
    size_t cap, pos, end;
    int eof;            /* every byte of the file or object is in */
    int remote;
    uint64_t size;      /* the object's size; a local file's, as of the last look */
    uint64_t file_pos;  /* bytes read so far (buf[end] is this offset) */
    uint64_t next_rec;  /* number and offset of the record at buf[pos] */
    uint64_t next_off;
    uint64_t last_rec;  /* the record most recently returned */
    uint64_t last_off;
    int err;            /* sticky first error */
    char errmsg[SL_ERRMSG_MAX];
};

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

sl_frame_status sl_tfrecord_frame_check(const uint8_t *rec, uint64_t size)
{
    if (size < SL_TFRECORD_OVERHEAD)
        return SL_FRAME_SIZE;
    uint64_t n = size - SL_TFRECORD_OVERHEAD;
    if (sl_crc_mask(sl_crc32c(0, rec, 8)) != load_le32(rec + 8))
        return SL_FRAME_LENGTH_CRC;
    if (load_le64(rec) != n)
        return SL_FRAME_LENGTH;
    if (sl_crc_mask(sl_crc32c(0, rec + 12, (size_t)n)) != load_le32(rec + 12 + n))
        return SL_FRAME_DATA_CRC;
    return SL_FRAME_OK;
}

const char *sl_tfrecord_frame_what(sl_frame_status code)
{
    switch (code) {
    case SL_FRAME_OK: return "ok";
    case SL_FRAME_SIZE: return "index size impossible";
    case SL_FRAME_LENGTH: return "length field does not match the index";
    case SL_FRAME_LENGTH_CRC: return "length CRC mismatch";
    case SL_FRAME_DATA_CRC: return "data CRC mismatch";
    case SL_FRAME_UNREAD: return "could not be read";
    }
    return "bad record";
}

int sl_tfrecord_reader_open(const char *path, sl_tfrecord_reader **out)
{
    static const char fn[] = "sl_tfrecord_reader_open";
    sl_tfrecord_reader *r;
    int rc;

    *out = NULL;
    if (!path || !*path)
        return sl_fail(SL_EINVAL, "%s: empty path", fn);
    r = calloc(1, sizeof *r);
    if (!r)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    r->path = strdup(path);
    if (!r->path) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
        goto fail;
    }
    if ((rc = sl_bytesrc_open(path, NULL, &r->src)) || (rc = sl_bytesrc_size(r->src, &r->size))) {
        rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
        goto fail;
    }
    r->remote = sl_bytesrc_is_remote(r->src);
    /* An object is fetched in chunks of TFR_REMOTE_CHUNK by ranged GETs; a
     * small local shard (an eval split, a test's, a fuzzer's input) does not
     * need the 1 MiB window. A record longer than the window grows it. */
    r->cap = r->remote ? TFR_REMOTE_CHUNK : TFR_BUF_SIZE;
    if (r->size < r->cap)
        r->cap = (size_t)r->size;
    if (r->cap < TFR_BUF_MIN)
        r->cap = TFR_BUF_MIN;
    if (!(r->buf = malloc(r->cap))) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
        goto fail;
    }
    *out = r;
    return SL_OK;

fail:
    sl_bytesrc_close(r->src);
    free(r->buf);
    free(r->path);
    free(r);
    return rc;
}

/* Set the sticky error from the thread's message. */
static int tfr_sticky(sl_tfrecord_reader *r, int code)
{
    r->err = code;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", sl_errmsg());
    return code;
}

/* Make at least need bytes available at buf[pos] (fewer only at EOF).
 * need <= cap. */
static int tfr_fill(sl_tfrecord_reader *r, size_t need)
{
    if (r->end - r->pos >= need)
        return SL_OK;
    if (r->pos) {
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->pos = 0;
    }
    while (r->end < need && !r->eof) {
        uint64_t left = r->size - r->file_pos;
        /* a local file may have grown since it was last sized: read to
         * its end as it is now */
        if (left == 0 && !r->remote) {
            int rc = sl_bytesrc_size(r->src, &r->size);
            if (rc)
                return sl_fail(rc, "sl_tfrecord_reader_next: %s", sl_errmsg());
            left = r->size > r->file_pos ? r->size - r->file_pos : 0;
        }
        size_t want = r->cap - r->end < left ? r->cap - r->end : (size_t)left;
        if (want == 0) {
            r->eof = 1;
            break;
        }
        int rc = sl_bytesrc_read(r->src, r->buf + r->end, want, r->file_pos);
        if (rc)
            return sl_fail(rc, "sl_tfrecord_reader_next: record %llu @ %llu: %s",
                           (unsigned long long)r->next_rec, (unsigned long long)r->next_off,
                           sl_errmsg());
        r->end += want;
        r->file_pos += want;
    }
    return SL_OK;
}

/* Grow the buffer to hold total bytes, unless the file is too short to hold
 * them anyway: then *file_left gets the bytes left in the file (else
 * UINT64_MAX) and nothing is allocated, whatever a damaged length claims. */
static int tfr_reserve(sl_tfrecord_reader *r, uint64_t total, uint64_t *file_left)
{
    *file_left = UINT64_MAX;
    if (total <= r->cap)
        return SL_OK;
    int rc = r->remote ? SL_OK : sl_bytesrc_size(r->src, &r->size); /* a file as it is now */
    if (rc)
        return sl_fail(rc, "sl_tfrecord_reader_next: %s", sl_errmsg());
    uint64_t size = r->size;
    if (size < r->next_off + total) {
        *file_left = size > r->next_off ? size - r->next_off : 0;
        return SL_OK;
    }
    size_t cap = r->cap;
    while (cap < total)
        cap *= 2;
    uint8_t *nb = realloc(r->buf, cap);
    if (!nb)
        return sl_fail(SL_ENOMEM, "sl_tfrecord_reader_next: %s: record %llu @ %llu: "
                       "%llu-byte buffer: out of memory", r->path,
                       (unsigned long long)r->next_rec, (unsigned long long)r->next_off,
                       (unsigned long long)cap);
    r->buf = nb;
    r->cap = cap;
    return SL_OK;
}

int sl_tfrecord_reader_next(sl_tfrecord_reader *r, const uint8_t **data, size_t *len)
{
    const char *fn = "sl_tfrecord_reader_next";
    unsigned long long rec = (unsigned long long)r->next_rec;
    unsigned long long off = (unsigned long long)r->next_off;
    uint64_t file_left;
    int rc;

    if (r->err)
        return sl_fail(r->err, "%s", r->errmsg);
    rc = tfr_fill(r, 12);
    if (rc)
        return tfr_sticky(r, rc);
    size_t avail = r->end - r->pos;
    if (avail == 0)
        return SL_EOF; /* clean end: at a record boundary */
    if (avail < 12)
        return tfr_sticky(r, sl_fail(SL_ECORRUPT,
                                     "%s: %s: record %llu @ %llu: truncated record: "
                                     "%zu bytes of a 12-byte header",
                                     fn, r->path, rec, off, avail));
    const uint8_t *p = r->buf + r->pos;
    uint64_t n = load_le64(p);
    if (sl_crc_mask(sl_crc32c(0, p, 8)) != load_le32(p + 8))
        return tfr_sticky(r, sl_fail(SL_ECORRUPT, "%s: %s: record %llu @ %llu: length CRC mismatch",
                                     fn, r->path, rec, off));
    if (n > SL_TFRECORD_MAX_LEN)
        return tfr_sticky(r, sl_fail(SL_ECORRUPT,
                                     "%s: %s: record %llu @ %llu: absurd length %llu (limit %llu)",
                                     fn, r->path, rec, off, (unsigned long long)n,
                                     (unsigned long long)SL_TFRECORD_MAX_LEN));
    uint64_t total = n + SL_TFRECORD_OVERHEAD;
    rc = tfr_reserve(r, total, &file_left);
    if (rc)
        return tfr_sticky(r, rc);
    if (file_left == UINT64_MAX) {
        rc = tfr_fill(r, (size_t)total);
        if (rc)
            return tfr_sticky(r, rc);
        if (r->end - r->pos < total)
            file_left = r->end - r->pos;
    }
    if (file_left != UINT64_MAX)
        return tfr_sticky(r, sl_fail(SL_ECORRUPT,
                                     "%s: %s: record %llu @ %llu: truncated record: "
                                     "%llu bytes of %llu",
                                     fn, r->path, rec, off, (unsigned long long)file_left,
                                     (unsigned long long)total));
    p = r->buf + r->pos;
    if (sl_crc_mask(sl_crc32c(0, p + 12, (size_t)n)) != load_le32(p + 12 + n))
        return tfr_sticky(r, sl_fail(SL_ECORRUPT, "%s: %s: record %llu @ %llu: data CRC mismatch",
                                     fn, r->path, rec, off));
    *data = p + 12;
    *len = (size_t)n;
    r->last_rec = r->next_rec;
    r->last_off = r->next_off;
    r->next_rec++;
    r->next_off += total;
    r->pos += (size_t)total;
    return SL_OK;
}

uint64_t sl_tfrecord_reader_record(const sl_tfrecord_reader *r) { return r->last_rec; }

uint64_t sl_tfrecord_reader_offset(const sl_tfrecord_reader *r) { return r->last_off; }

const char *sl_tfrecord_reader_path(const sl_tfrecord_reader *r) { return r->path; }

void sl_tfrecord_reader_close(sl_tfrecord_reader *r)
{
    if (!r)
        return;
    sl_bytesrc_close(r->src);
    free(r->buf);
    free(r->path);
    free(r);
}

/* preadv all of iov[0..n) from offset; returns bytes read (short only at
 * end of file) or -1 with errno set. iov is consumed. */
static ssize_t preadv_full(int fd, struct iovec *iov, int n, uint64_t offset)
{
    size_t done = 0;
    while (n > 0) {
        ssize_t got = preadv(fd, iov, n, (off_t)(offset + done));
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (got == 0)
            break;
        done += (size_t)got;
        size_t left = (size_t)got;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return (ssize_t)done;
}

int sl_tfrecord_read_at(int fd, uint64_t offset, uint64_t size, uint8_t *buf, size_t cap,
                        size_t *len, const char *path, uint64_t recno)
{
    static const char fn[] = "sl_tfrecord_read_at";
    unsigned long long rec = (unsigned long long)recno, off = (unsigned long long)offset;
    uint8_t hdr[12], ftr[4];

    if (!path)
        path = "?";
    if (size < SL_TFRECORD_OVERHEAD || size - SL_TFRECORD_OVERHEAD > SL_TFRECORD_MAX_LEN)
        return sl_fail(SL_ECORRUPT, "%s: %s: record %llu @ %llu: index size %llu impossible",
                       fn, path, rec, off, (unsigned long long)size);
    uint64_t n = size - SL_TFRECORD_OVERHEAD;
    if (n > cap)
        return sl_fail(SL_EINVAL, "%s: %s: record %llu @ %llu: %llu-byte record, buffer holds %zu",
                       fn, path, rec, off, (unsigned long long)n, cap);
    /* One syscall: header to the stack, payload straight into buf. */
    struct iovec iov[3] = {{hdr, 12}, {buf, (size_t)n}, {ftr, 4}};
    ssize_t got = preadv_full(fd, iov, 3, offset);
    if (got < 0)
        return sl_fail(SL_EIO, "%s: %s: record %llu @ %llu: read: %s", fn, path, rec, off,
                       strerror(errno));
    if ((uint64_t)got >= 12) {
        /* Check the header first: a wrong length says more than a short read. */
        if (sl_crc_mask(sl_crc32c(0, hdr, 8)) != load_le32(hdr + 8))
            return sl_fail(SL_ECORRUPT, "%s: %s: record %llu @ %llu: length CRC mismatch", fn,
                           path, rec, off);
        if (load_le64(hdr) != n)
            return sl_fail(SL_ECORRUPT,
                           "%s: %s: record %llu @ %llu: length %llu does not match index size %llu",
                           fn, path, rec, off, (unsigned long long)load_le64(hdr),
                           (unsigned long long)size);
    }
    if ((uint64_t)got < size)
        return sl_fail(SL_ECORRUPT,
                       "%s: %s: record %llu @ %llu: truncated record: %llu bytes of %llu", fn,
                       path, rec, off, (unsigned long long)got, (unsigned long long)size);
    if (sl_crc_mask(sl_crc32c(0, buf, (size_t)n)) != load_le32(ftr))
        return sl_fail(SL_ECORRUPT, "%s: %s: record %llu @ %llu: data CRC mismatch", fn, path,
                       rec, off);
    *len = (size_t)n;
    return SL_OK;
}

/*
 * records/remote_put.h - writing objects: PUT to s3:// (SigV4, as
 * records/bytesrc.h reads them) and http(s)://, S3's multipart upload for
 * large files, DELETE. The output side of `sluice convert --out s3://...`
 * (records/convert_task.c): shards, their indexes, receipts, the plan,
 * dataset.json.
 *
 * Addressing, credentials, redaction, retries (opts.retries, capped
 * jittered backoff) and error codes are the byte source's (bytesrc.h):
 * 404 SL_ENOENT, 401/403 SL_EPERM, the rest SL_EIO, messages naming the
 * URL (never a key) and the request ("PUT part 3 of 7").
 *
 * Atomicity: S3 makes an object visible only when its PUT (or the
 * multipart upload's completion) succeeds, whole; a failed upload leaves
 * the previous object, or none. A multipart upload that fails is aborted
 * (its parts deleted); its message is the first failure's.
 *
 * Threading: reentrant; each call uses its own libcurl handle.
 */
#ifndef SLUICE_RECORDS_REMOTE_PUT_H
#define SLUICE_RECORDS_REMOTE_PUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Part size of multipart uploads, and the size from which a file goes up
 * in parts: SLUICE_PUT_PART_BYTES when set (tests; S3 wants at least 5 MiB
 * for every part but the last), else 64 MiB. */
uint64_t sl_put_part_bytes(void);

/* data[0..len) as the object url (one PUT). */
int sl_put_bytes(const char *url, const void *data, size_t len);

/* The local file as the object url: one PUT up to sl_put_part_bytes(),
 * a multipart upload above it (each part retried on its own; the upload
 * aborted on failure). */
int sl_put_file(const char *url, const char *local_path);

/* Remove the object url; one that is not there is SL_OK. */
int sl_put_delete(const char *url);

/* Process-wide counters, for tests and the perf script. */
typedef struct sl_put_stats {
    uint64_t objects;   /* objects written (PUT or completed multipart uploads) */
    uint64_t parts;     /* parts uploaded */
    uint64_t retries;   /* requests that were retries */
    uint64_t aborted;   /* multipart uploads aborted */
} sl_put_stats;
void sl_put_stats_get(sl_put_stats *s);

#ifdef __cplusplus
}
#endif

#endif

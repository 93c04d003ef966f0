/*
 * records/bytesrc.h - where shard bytes come from: one interface for a local
 * file (pread) and a remote object (libcurl ranged GETs: http://, https://,
 * s3://), used by every reader: the pipeline's block reads, the index and
 * manifest loads, verify and inspect.
 *
 * Paths: anything that does not start with "http://", "https://" or "s3://"
 * is a local path. s3://BUCKET/KEY is addressed through AWS_ENDPOINT_URL
 * (path style: ENDPOINT/BUCKET/KEY; MinIO, Ceph, R2, GCS's S3 endpoint) or,
 * without it, https://BUCKET.s3.REGION.amazonaws.com/KEY (AWS_REGION, default
 * us-east-1). S3 requests are signed by libcurl (CURLOPT_AWS_SIGV4) with
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (the
 * x-amz-security-token header); unsigned when no key is set (public
 * buckets). Credentials never appear in a message, a log or a stats line:
 * names in errors are the URL as given (s3://bucket/key), without userinfo
 * or query string.
 *
 * Faults: a timeout, a connection refused or reset, a 5xx (503 SlowDown
 * included), a 429, or a body shorter than asked for is retried with capped
 * exponential backoff and full jitter (opts.retries times after the first
 * try); a 4xx other than 429 is not retried. When the tries are spent the
 * error names the URL, the byte range and the last HTTP status or curl's
 * text: "https://h/d/train-00001-of-00004.tfrecord: bytes 0-65535: HTTP 503
 * after 6 tries". 404 is SL_ENOENT, 401/403 SL_EPERM ("refused: check
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"), the rest SL_EIO.
 *
 * Threading: sl_bytes_* calls are reentrant (each thread keeps one libcurl
 * handle, and so its open connections, for its next call; it is freed when
 * the thread exits). An sl_fetcher belongs to one thread at a time (its own
 * curl_multi and connections). The counters of sl_io_stats_get are
 * process-wide atomics.
 *
 * Built without libcurl (SLUICE_WITH_CURL off), remote paths fail with
 * SL_ENOTSUP: "PATH: this sluice was built without libcurl".
 */
#ifndef SLUICE_RECORDS_BYTESRC_H
#define SLUICE_RECORDS_BYTESRC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Remote I/O settings; zeros mean the defaults below. Process-wide:
 * sl_io_configure sets them for every later request (the CLI's --io-retries,
 * --io-timeout; the Python Pipeline's io_retries). */
typedef struct sl_io_opts {
    unsigned retries;      /* tries after the first (default 5; SL_IO_NO_RETRY for none) */
    unsigned timeout_ms;   /* one request, connect to last byte (default 30000) */
    unsigned backoff_ms;   /* first backoff (default 100); doubles, capped at 5000, jittered */
    unsigned inflight;     /* ranged GETs in flight per fetcher (default 8) */
} sl_io_opts;

#define SL_IO_NO_RETRY 0xffffffffu

void sl_io_configure(const sl_io_opts *o);
void sl_io_get_opts(sl_io_opts *o); /* the settings in force, defaults filled in */

/* 1 when path is http://, https:// or s3://. */
int sl_path_is_remote(const char *path);

/* Whole small object or file (dataset.json, an index) into a malloc'd
 * buffer (NUL-terminated one past *len). SL_ENOENT when it does not exist. */
int sl_bytes_get(const char *path, uint8_t **buf, size_t *len);

/* Size in bytes (stat, or HEAD). SL_ENOENT when it does not exist. */
int sl_bytes_size(const char *path, uint64_t *size);

/* The names directly under directory or prefix dir ("d/", "s3://b/p/"),
 * sorted bytewise, malloc'd (free each and the array, or call
 * sl_bytes_names_free). A subdirectory (local) or common prefix (s3://)
 * ends in '/' ("sub/"); "." and ".." are left out. Local: readdir;
 * s3://: ListObjectsV2 with delimiter "/" (continuation tokens followed;
 * a prefix with nothing under it is SL_ENOENT: S3 has no empty folders);
 * http(s)://: SL_ENOTSUP (a remote directory over HTTP is read through its
 * dataset.json). */
int sl_bytes_list(const char *dir, char ***names, size_t *n);
/* Free what sl_bytes_list returned (NULL is a no-op). */
void sl_bytes_names_free(char **names, size_t n);

/* n bytes at off of path into buf, all or an error (a short object is
 * SL_ECORRUPT "ends before byte X"). Local: pread. Remote: one ranged GET,
 * retried as above. */
int sl_bytes_read(const char *path, void *buf, size_t n, uint64_t off);

/* ---------------------------------------------------------------- fetcher
 * Many ranged GETs in flight on one thread (curl_multi; connections reused
 * between requests). Add requests, then wait for completions in any order.
 * Each request is retried on its own; a request that fails for good
 * completes with its error (sl_errmsg() holds the message when
 * sl_fetcher_wait returns). Local paths are read with pread at add time and
 * complete at once, so one code path serves both. */
typedef struct sl_fetcher sl_fetcher;

int sl_fetcher_open(sl_fetcher **out);
/* Queue n bytes at off of path into buf (which must stay valid until the
 * request completes); tag comes back from sl_fetcher_wait. */
int sl_fetcher_add(sl_fetcher *f, const char *path, uint64_t off, void *buf, size_t n,
                   void *tag);
/* Requests added and not yet returned by sl_fetcher_wait. */
unsigned sl_fetcher_pending(const sl_fetcher *f);
/* Block until one request completes: *tag is its tag; returns its status
 * (SL_OK, or the error after retries). SL_EOF when nothing is pending. */
int sl_fetcher_wait(sl_fetcher *f, void **tag);
/* Cancel what is in flight and free. */
void sl_fetcher_close(sl_fetcher *f);
/* A flag another thread sets (with an atomic store) to stop f: a wait in
 * progress or to come then returns SL_ECANCELED within about 100 ms with
 * *tag untouched, whatever is in flight or backing off (the pipeline's
 * stop). NULL removes it. */
void sl_fetcher_set_stop(sl_fetcher *f, const int *stop);

/* Process-wide counters of remote I/O (local reads are not counted). */
typedef struct sl_io_stats {
    uint64_t requests;   /* HTTP requests sent, retries included */
    uint64_t bytes;      /* body bytes received */
    uint64_t retries;    /* requests that were retries */
    uint64_t failures;   /* requests that failed for good */
    uint32_t inflight;   /* in flight now */
    uint32_t inflight_peak;
    uint64_t busy_ns;    /* wall time with at least one request in flight */
} sl_io_stats;

void sl_io_stats_get(sl_io_stats *s);
void sl_io_stats_reset(void);

#ifdef __cplusplus
}
#endif

#endif

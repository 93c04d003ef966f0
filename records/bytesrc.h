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
 * or query string (see Credentials below).
 *
 * Faults: a timeout, a stall, a connection refused or reset, a 5xx (503
 * SlowDown included), a 429, or a body shorter than asked for is retried
 * with capped exponential backoff and full jitter, for as long as the retry
 * budget lasts (opts.retry_ms, counted from the request's first try: 60 s
 * by default, so a server restart of tens of seconds is ridden out, as
 * object-store clients do) and, when opts.retries is set, at most that
 * many times; a 4xx other than 429 is not retried. When the budget or the
 * tries are spent the error names the URL, the byte range, the last HTTP
 * status or curl's text, the tries and the time: "https://h/d/train-00001-
 * of-00004.tfrecord: bytes 0-65535: HTTP 503 after 14 tries in 60.2 s".
 * 404 is SL_ENOENT, 401/403 SL_EPERM ("refused: check AWS_ACCESS_KEY_ID /
 * AWS_SECRET_ACCESS_KEY"), the rest SL_EIO.
 *
 * Bounds (a hostile or broken server cannot make a read unbounded): a
 * whole-object GET (sl_bytes_get: dataset.json, index files, listing pages)
 * stops past SL_BYTES_GET_MAX with SL_ECORRUPT naming the object; a ranged
 * read takes n bytes, however long the 206 (the rest is not read); a
 * server that ignores Range (200 to a ranged GET) has each object fetched
 * whole once into a temporary file ($TMPDIR, unlinked) and every range
 * read from there; a transfer slower than SL_IO_LOW_SPEED bytes/s for
 * opts.timeout_ms is cut (and retried); an S3 listing that repeats a
 * continuation token or passes SL_LIST_MAX names is refused.
 *
 * Trust: https is always verified. The CAs are the system's unless a file
 * or folder is named: opts.ca_bundle (--ca-bundle), else AWS_CA_BUNDLE
 * (s3:// only, as the AWS SDKs read it), else CURL_CA_BUNDLE, else
 * SSL_CERT_FILE; SSL_CERT_DIR names a folder of hashed certificates
 * (c_rehash). A named file replaces the system's store, as in curl. A
 * redirect never leaves https for http. AWS_SESSION_TOKEN is never sent
 * over http:// to a host other than the loopback (SL_EPERM: it would go in
 * clear); SigV4 signatures (which reveal no secret) are.
 *
 * Credentials: a path enters the program through sl_path_redact (done by
 * sl_dataset_resolve and the CLI's arguments), which keeps its userinfo
 * ("https://user:pass@h/...") and its query string (a presigned URL's
 * "?X-Amz-Signature=...") in a process-wide table and hands back the path
 * without them; every name after that (errors, reports, --json, bad-record
 * lists, Python exceptions) is the redacted one, and the requests take the
 * secrets back from the table: the userinfo for any path on that origin
 * (scheme, host and port), the query for that exact object. A name derived
 * from a presigned object (its .idx beside it) has no signature of its own
 * and is SL_ENOENT without a request.
 *
 * fork(): connections are per process. A child's first request opens its
 * own (the handle inherited from the parent is left alone: cleaning it up
 * would close or write to the parent's socket); an sl_fetcher opened before
 * a fork is refused in the child.
 *
 * Threading: sl_bytes_* calls are reentrant (each thread keeps one libcurl
 * handle, and so its open connections, for its next call; it is freed when
 * the thread exits). An sl_bytesrc may be read and sized from many threads
 * at once; its map is made before it is shared. An sl_fetcher belongs to one thread at a time (its own
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

/* Remote I/O settings; zeros mean the defaults below. They travel with the
 * caller: sl_bytesrc_open, sl_bytesrc_list and sl_fetcher_open take them
 * (as the pipeline's, convert's and verify's configs carry them: the Python
 * Pipeline's io_retries is that pipeline's alone). NULL there means the
 * process-wide settings, which sl_io_configure sets (the CLI's --io-retries,
 * --io-timeout, --io-retry-budget, --ca-bundle) and the sl_bytes_* calls
 * use. SLUICE_IO_RETRIES, SLUICE_IO_TIMEOUT_MS, SLUICE_IO_BACKOFF_MS,
 * SLUICE_IO_INFLIGHT and SLUICE_IO_RETRY_MS stand in for fields left at zero
 * (SLUICE_IO_RETRIES=0: no retry). */
typedef struct sl_io_opts {
    unsigned retries;      /* most tries after the first; 0: no count, the budget alone
                            * (default); SL_IO_NO_RETRY: none */
    unsigned timeout_ms;   /* the connect, and a stall: a transfer below SL_IO_LOW_SPEED
                            * bytes/s for this long is cut (default 30000) */
    unsigned backoff_ms;   /* first backoff (default 100); doubles, capped at 5000, jittered */
    unsigned inflight;     /* ranged GETs in flight per fetcher (default 8) */
    unsigned retry_ms;     /* retry budget: a failing request is retried until this long after
                            * its first try (default 60000) */
    const char *ca_bundle; /* PEM file of the CAs to trust (NULL: the environment's, else the
                            * system's); copied by sl_io_configure */
} sl_io_opts;

#define SL_IO_NO_RETRY 0xffffffffu
#define SL_IO_LOW_SPEED 1024u                  /* bytes/s: below it for timeout_ms is a stall */
#define SL_BYTES_GET_MAX ((size_t)64 << 20)     /* the largest whole-object GET of a remote path */
#define SL_LIST_MAX 10000000u                  /* the most names one listing may hold */

/* SL_OK, or SL_ENOMEM copying ca_bundle (the rest is set). NULL: all defaults. */
int sl_io_configure(const sl_io_opts *o);
void sl_io_get_opts(sl_io_opts *o); /* the settings in force, defaults filled in */
/* The settings a request under in makes: in's fields, those left at zero
 * from SLUICE_IO_*, else the defaults (the process-wide settings are not
 * consulted); in NULL: sl_io_get_opts. out->ca_bundle is a copy kept for
 * the process's life. SL_OK, or SL_ENOMEM copying ca_bundle. */
int sl_io_resolve(const sl_io_opts *in, sl_io_opts *out);

/* The options NULL stands for on the calling thread, until the next call:
 * o (resolved or not) in place of the process-wide settings; NULL: back to
 * those. Returns the previous, for the caller to put back. A library that
 * calls into records/ on its caller's thread with functions that take no
 * options (sl_dataset_resolve, sl_index_load, sl_manifest_load, ...) uses it
 * to make them read under its config's options (the pipeline's create).
 * o must stay valid while in use. A thread started to do part of such a
 * call (the pipeline's index loaders, convert's workers) is given the
 * caller's: sl_io_thread_use(sl_io_thread_opts()'s value) at its start. */
const sl_io_opts *sl_io_thread_use(const sl_io_opts *o);
/* What sl_io_thread_use set on the calling thread (NULL: none). */
const sl_io_opts *sl_io_thread_opts(void);

/* 1 when path is http://, https:// or s3://. Asked where a path enters
 * (sl_dataset_resolve: sl_dataset.remote; a converter's listed input and
 * its output; the CLI's refusals before any request); a reader asks its
 * handle (sl_bytesrc_is_remote) or the dataset instead of the scheme. */
int sl_path_is_remote(const char *path);

/* The name of path from now on (see Credentials above): *out is path less
 * its userinfo and query string (malloc'd); those are kept for the
 * requests. A local path, or a remote one without secrets, comes back
 * copied as it is. Call it once where a path enters (a command's argument,
 * a library entry point), and use only *out after. Thread-safe. */
int sl_path_redact(const char *path, char **out);

/* ---------------------------------------------------------------- handle
 * One file or object, opened once and then read, sized, fetched whole or
 * mapped (the shape of SQLite's VFS: xRead, xFileSize, and xFetch for a
 * mapping, which is a method of the one interface, not a second path).
 *
 * sl_bytesrc_open: a local path is opened (SL_ENOENT when it does not
 * exist); a remote one is not requested until the first call (its SL_ENOENT
 * comes from there). opts as above (NULL: the process-wide settings, as at
 * the open). The handle owns a copy of path. */
typedef struct sl_bytesrc sl_bytesrc;

int sl_bytesrc_open(const char *path, const sl_io_opts *opts, sl_bytesrc **out);
/* Close and free (NULL is a no-op); a mapping is unmapped. */
void sl_bytesrc_close(sl_bytesrc *s);
/* The path as opened (valid until close), and whether it is remote: what
 * a reader asks of the handle when the two differ in what they allow (a
 * fetcher's queue, a mapping, an fstat, a whole GET instead of a size and
 * a read). */
const char *sl_bytesrc_path(const sl_bytesrc *s);
int sl_bytesrc_is_remote(const sl_bytesrc *s);
/* n bytes at off into buf, all or an error (a short file or object is
 * SL_ECORRUPT "ends before byte X"). Local: pread; remote: one ranged GET,
 * retried as above. */
int sl_bytesrc_read(sl_bytesrc *s, void *buf, size_t n, uint64_t off);
/* Size in bytes now (fstat, or HEAD). */
int sl_bytesrc_size(sl_bytesrc *s, uint64_t *size);
/* The whole file or object into a malloc'd buffer, NUL-terminated one past
 * *len. One larger than max bytes is SL_ECORRUPT (max 0: no bound locally,
 * SL_BYTES_GET_MAX remotely, which also caps a larger max); a local path
 * that is not a regular file is SL_EIO. */
int sl_bytesrc_get(sl_bytesrc *s, size_t max, uint8_t **buf, size_t *len);
/* A read-only mapping of the whole local regular file (made at the first
 * call, kept until close): *base, *len its size then. SL_ENOTSUP for a
 * remote object, an empty or irregular file or a failed mmap: read instead.
 * Touching a page past a later truncation raises SIGBUS (the pipeline's
 * mapguard.h catches it). Not thread-safe against itself: map before
 * sharing the handle. */
int sl_bytesrc_map(sl_bytesrc *s, const uint8_t **base, size_t *len);
/* What the open local file is now (fstat): device, inode, size, mtime and
 * whether it is a regular file, so that a reader can tell a file rewritten,
 * truncated or replaced under it. SL_ENOTSUP for a remote object. */
typedef struct sl_bytesrc_id {
    uint64_t dev, ino, size;
    int64_t mtime_ns;
    int regular;
} sl_bytesrc_id;
int sl_bytesrc_identity(sl_bytesrc *s, sl_bytesrc_id *id);
/* sl_bytes_list under opts (see sl_bytes_list). */
int sl_bytesrc_list(const char *dir, const sl_io_opts *opts, char ***names, size_t *n);

/* ---------------------------------------------------------------- one call
 * Each opens a handle for one request with the process-wide settings. */

/* Whole small object or file (dataset.json, an index) into a malloc'd
 * buffer (NUL-terminated one past *len). SL_ENOENT when it does not exist;
 * a remote one larger than SL_BYTES_GET_MAX is SL_ECORRUPT. */
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

/* opts as for sl_bytesrc_open (NULL: the process-wide settings at the
 * open); opts->inflight is the most transfers at a time. */
int sl_fetcher_open(const sl_io_opts *opts, sl_fetcher **out);
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

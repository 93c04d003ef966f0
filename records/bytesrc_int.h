/*
 * records/bytesrc_int.h - between bytesrc.c (the handle, local files,
 * dispatch), bytesrc_base.c (the options, the retry policy, the counters),
 * fetcher.c and the remote backend: remote_curl.c, remote_multi.c,
 * remote_s3list.c and remote_url.c with libcurl, or remote_nocurl.c without
 * it (CMake picks one set). Calls go down only: bytesrc.c and fetcher.c
 * call the backend and bytesrc_base.c, the backend calls bytesrc_base.c.
 *
 * Threading: as bytesrc.h. The sl_io_note_* counters are atomics; the
 * remote functions are reentrant; an sl_remote_multi belongs to one thread
 * at a time.
 */
#ifndef SLUICE_RECORDS_BYTESRC_INT_H
#define SLUICE_RECORDS_BYTESRC_INT_H

#include "common/status.h"
#include "records/bytesrc.h"

/* ---------------------------------------------------------------- handle
 * bytesrc.c's open and read with fn naming the public function in messages
 * (fetcher.c's "sl_fetcher_wait: PATH: ..."); otherwise sl_bytesrc_open and
 * sl_bytesrc_read. */
int sl_bytesrc_open_as(const char *fn, const char *path, const sl_io_opts *opts,
                       sl_bytesrc **out);
int sl_bytesrc_read_as(const char *fn, sl_bytesrc *s, void *buf, size_t n, uint64_t off);

/* ---------------------------------------------------------------- counters
 * bytesrc_base.c, as the retry policy below. */
void sl_io_note_start(int is_retry);   /* a request sent */
void sl_io_note_end(uint64_t body_bytes); /* a request ended (any outcome) */
void sl_io_note_failure(void);         /* a request failed for good */

/* Tries in all (1 + retries) under the options o; UINT32_MAX when only the
 * time budget counts. */
unsigned sl_io_tries(const sl_io_opts *o);
/* After try number `tries` (>= 1) of a request first tried at first_ns
 * failed in a way worth another: 1 with *wait_ns the backoff before the
 * next try (cut to the budget's end), 0 when the tries or the budget are
 * spent. */
int sl_io_retry_next(const sl_io_opts *o, unsigned tries, uint64_t first_ns, uint64_t *wait_ns);
/* The backoff before try number `tries + 1` (tries >= 1 already made), in
 * ns: uniform in [0, min(5000 ms, backoff_ms * 2^(tries-1))] (full jitter). */
uint64_t sl_io_backoff_ns(const sl_io_opts *o, unsigned tries);

/* ---------------------------------------------------------------- remote
 * fn names the public function in messages; o is resolved (sl_io_resolve:
 * every field set) and read during the call only. Same contracts as the
 * sl_bytes_* functions of bytesrc.h for a remote path. */
int sl_remote_get(const char *fn, const char *path, const sl_io_opts *o, uint8_t **buf,
                  size_t *len);
int sl_remote_size(const char *fn, const char *path, const sl_io_opts *o, uint64_t *size);
int sl_remote_list(const char *fn, const char *dir, const sl_io_opts *o, char ***names,
                   size_t *n);
int sl_remote_read(const char *fn, const char *path, const sl_io_opts *o, void *buf, size_t n,
                   uint64_t off);

/* The fetcher's remote half (o resolved, copied): one curl_multi, o->inflight transfers at a
 * time (the rest queued), each request retried on its own. wait blocks until
 * one request completes and returns its status; on error the thread's
 * sl_errmsg() holds its message. SL_EOF when nothing is pending. */
typedef struct sl_remote_multi sl_remote_multi;
int sl_remote_multi_open(const sl_io_opts *o, sl_remote_multi **out);
int sl_remote_multi_add(sl_remote_multi *m, const char *path, uint64_t off, void *buf, size_t n,
                        void *tag);
unsigned sl_remote_multi_pending(const sl_remote_multi *m);
int sl_remote_multi_wait(sl_remote_multi *m, void **tag, const int *stop);
void sl_remote_multi_close(sl_remote_multi *m);

/* ---------------------------------------------------------------- secrets
 * remote_redact.c (both builds). sl_url_redact: path without userinfo and
 * query string (malloc'd; NULL when out of memory). sl_secret_url: the URL
 * to request for the (redacted) http(s) path, the table's userinfo and
 * query put back (malloc'd); SL_ENOENT for a name beside a presigned
 * object. sl_secrets_forget: empty the table (tests). */
char *sl_url_redact(const char *path);
int sl_secret_url(const char *fn, const char *path, char **url);
void sl_secrets_forget(void);

/* Tests only: forget the objects kept whole for servers that ignore Range
 * (remote_norange.c), so that a test starts from none. */
void sl_norange_drop_all(void);

/* Tests only: the max-keys of each ListObjectsV2 page (0: the server's
 * default, 1000), so that a test walks continuation tokens on a few keys. */
void sl_remote_set_list_page(unsigned max_keys);

#endif

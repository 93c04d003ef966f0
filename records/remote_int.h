/*
 * records/remote_int.h - shared by the libcurl backend's files:
 * remote_url.c (addressing), remote_curl.c (one transfer: options,
 * callbacks, the verdict on a try, the blocking calls with retries),
 * remote_multi.c (the fetcher's curl_multi), remote_s3list.c
 * (ListObjectsV2) and remote_norange.c (servers that ignore Range). Built
 * only with SLUICE_WITH_CURL (remote_nocurl.c otherwise); the redaction
 * table (remote_redact.c) is in both builds.
 *
 * Threading: an sl_xfer and its easy handle belong to one thread.
 */
#ifndef SLUICE_RECORDS_REMOTE_INT_H
#define SLUICE_RECORDS_REMOTE_INT_H

#include <curl/curl.h>

#include "records/bytesrc_int.h"

/* ---------------------------------------------------------------- remote_url.c */
typedef struct sl_rurl {
    char *url;       /* what libcurl requests */
    char *name;      /* for messages: the path as given, no userinfo, no query */
    int s3;          /* signed with SigV4 when AWS_ACCESS_KEY_ID is set */
    char region[64]; /* s3: AWS_REGION, AWS_DEFAULT_REGION or us-east-1 */
} sl_rurl;

/* The request URL of an http(s):// or s3:// object path. */
int sl_rurl_object(const char *fn, const char *path, sl_rurl *u);
void sl_rurl_fini(sl_rurl *u);
/* s3://BUCKET/KEY: *base "ENDPOINT/BUCKET" (path style) or
 * "https://BUCKET.s3.REGION.amazonaws.com" (or, for a bucket name that is
 * not a DNS label, "https://s3.REGION.amazonaws.com/BUCKET"), *key KEY
 * unescaped; malloc'd. A bucket that is not a bucket name is SL_EINVAL. */
int sl_s3_parse(const char *fn, const char *path, char **base, char **key);
void sl_s3_region(char region[64]);
/* AWS URI encoding (unreserved bytes kept; '/' kept when keep_slash). */
char *sl_url_escape(const char *s, int keep_slash);

/* ---------------------------------------------------------------- remote_norange.c
 * Objects whose server ignores Range, kept whole in a temporary file.
 * sl_norange_read, before a ranged GET of url: 1 when the object is held
 * (the range read from it, *rc its status, name for messages), 2 when
 * another request is fetching it whole (ask again shortly), 0 when it is
 * not held (send the request). sl_norange_begin, on a 200 to a ranged GET
 * of url: the entry this transfer is to fill (sl_norange_put each body
 * chunk at its position, then sl_norange_done: ok with the size, or not,
 * which forgets it), or NULL when another transfer fills it or no
 * temporary file could be made (then take the slice only). */
typedef struct sl_norange sl_norange;
int sl_norange_read(const char *url, const char *name, void *dst, size_t n, uint64_t off,
                    int *rc);
sl_norange *sl_norange_begin(const char *url);
int sl_norange_put(sl_norange *e, const void *p, size_t len, uint64_t pos);
void sl_norange_done(sl_norange *e, int ok, uint64_t size);

/* ---------------------------------------------------------------- remote_curl.c */
enum { SL_XF_RANGE, SL_XF_WHOLE, SL_XF_HEAD };

typedef struct sl_xfer {
    /* the request */
    int kind;
    const sl_rurl *u;
    const sl_io_opts *o; /* resolved (sl_io_resolve); NULL: sl_io_resolve(NULL) at the run */
    const char *what;    /* for messages instead of "bytes A-B" / "GET" / "HEAD" */
    uint8_t *dst;        /* SL_XF_RANGE: n bytes at off into dst */
    size_t n;
    uint64_t off;
    uint8_t *body;       /* SL_XF_WHOLE: the body, NUL-terminated (caller frees) */
    size_t len, cap;
    /* this try */
    CURL *e;
    struct curl_slist *hdrs;
    char range[48];
    long status;         /* of the last status line seen */
    uint64_t seen;       /* body bytes received */
    size_t got;          /* SL_XF_RANGE: bytes of the range placed */
    int have_cr;         /* Content-Range: bytes FIRST-LAST/TOTAL seen */
    uint64_t cr_first, cr_total;
    int cr_total_known;
    int done_early;      /* a 200 with the whole object, or a 206 longer than asked: stopped
                          * once the range was in */
    int too_big;         /* SL_XF_WHOLE: the body passed SL_BYTES_GET_MAX */
    int err_cut;         /* an error response's long body: stopped reading it */
    sl_norange *nr;      /* a 200 to this ranged GET, kept whole (remote_norange.c) */
    int nr_tried;
    int oom;
    char ebody[768];     /* an error response's body (S3's <Code>) */
    size_t elen;
    char cerr[CURL_ERROR_SIZE];
    /* the verdict */
    int retry;           /* the failure is worth another try */
    char why[384];
    /* the request */
    uint64_t first_ns;   /* its first try (the retry budget, messages) */
    int size_by_get;     /* SL_XF_HEAD as "GET bytes=0-0" (a presigned URL signs its method:
                          * a HEAD of a GET URL is refused); the size from Content-Range */
} sl_xfer;

/* curl_global_init once per process. */
int sl_curl_global(const char *fn);
/* How many fork()s this process descends from (a child's count is its
 * parent's + 1): a handle made under another count is the parent's. */
unsigned sl_curl_fork_gen(void);
/* Keep a handle of the parent's (after a fork) reachable and untouched:
 * cleaning it up would close or write to the parent's connections. */
void sl_curl_abandon(void *handle);
/* Set e's options for one try of x (per-try state cleared). */
int sl_xfer_setup(sl_xfer *x, CURL *e, const sl_io_opts *o);
/* SL_OK, or the try's error code with x->why and x->retry set. */
int sl_xfer_verdict(sl_xfer *x, CURLcode cc);
/* "fn: name: bytes A-B: why[ after N tries in S s]" into out. */
void sl_xfer_message(const sl_xfer *x, const char *fn, int code, unsigned tries, char *out,
                     size_t cap);
/* Free the try's header list (not the body); an object still being kept
 * whole is forgotten. */
void sl_xfer_fini(sl_xfer *x);
/* One request with retries on the calling thread's easy handle. */
int sl_xfer_run(const char *fn, sl_xfer *x);

#endif

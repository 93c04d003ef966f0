/*
 * records/remote_curl.c - one HTTP(S) / S3 request through libcurl: the
 * easy handle's options, the body and header callbacks, the verdict on a
 * try (done, retry, or fail with which code), the message, and the blocking
 * calls of bytesrc.h (sl_remote_read/get/size) with their retries.
 *
 * DESIGN
 *   Ranged GET: "Range: bytes=A-B". A 206 is checked against its
 *   Content-Range (it must start at A; fewer than n bytes with a TOTAL that
 *   covers the range is a short body and retried, a TOTAL that ends first is
 *   SL_ECORRUPT "ends before byte"); a 416 is SL_ECORRUPT too. A 206 longer
 *   than asked is cut once n bytes are in (a server could otherwise stream
 *   without end into a bounded read). A server that ignores Range answers
 *   200 with the whole object: the first such answer is kept whole
 *   (remote_norange.c) and later ranges of the object are read from that
 *   copy; when it cannot be kept, the slice [A, B] is taken as it streams
 *   by and the transfer stopped once it is in.
 *   A short body against Content-Length is libcurl's CURLE_PARTIAL_FILE.
 *   Bounds: a whole-object GET stops past SL_BYTES_GET_MAX (checked against
 *   Content-Length first, then as it streams), an error body is read up to
 *   64 KiB, and a transfer below SL_IO_LOW_SPEED bytes/s for the timeout
 *   is cut (CURLOPT_LOW_SPEED_*; the connect has the timeout too): no whole-
 *   transfer timeout, which would cut a large object on a slow link and
 *   let a stalled one sit for its full length.
 *   Trust: the CA file or folder of bytesrc.h ("Trust"), checked readable
 *   first (a typo is named, not a TLS failure); redirects from https go to
 *   https only; AWS_SESSION_TOKEN goes over http:// to the loopback only.
 *   Retried: timeouts, refused / reset / dropped connections, short bodies,
 *   HTTP 5xx, 429 and 408; not retried: other 4xx, a wrong range, libcurl
 *   misuse. 404/410 are SL_ENOENT, 401/403 SL_EPERM, the rest SL_EIO.
 *   S3: CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3" with the key as user name and
 *   the secret as password; x-amz-content-sha256 (the empty body's hash)
 *   is sent and so signed, as S3 requires and libcurl 7.88 only does when
 *   the header is given; x-amz-security-token for AWS_SESSION_TOKEN.
 *   Messages carry the redacted name (remote_url.c), the range, the HTTP
 *   status and S3's error <Code>, never a header or the error body itself
 *   (which may echo the access key id).
 *   Connections: each thread keeps one easy handle (a pthread key whose
 *   destructor cleans it up), so its connections and TLS sessions are
 *   reused by its next call; the fetcher has its own (remote_multi.c).
 *   fork(): the handle a child inherits holds the parent's sockets (and
 *   TLS state): used, the two processes' requests and responses cross on
 *   one connection; cleaned up, it would close or write to the parent's.
 *   A pthread_atfork child handler counts forks; a handle made under
 *   another count is abandoned (kept reachable, never touched) and a new
 *   one made.
 *
 * Threading: reentrant; the easy handle is per thread.
 */
#include "records/remote_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

/* SHA-256 of the empty string: the payload hash of a bodiless request. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---------------------------------------------------------------- global */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc;
static pthread_key_t g_easy_key;
static int g_key_ok;
static unsigned g_fork_gen; /* bumped in each child (pthread_atfork) */

/* Handles a parent made, abandoned in a child: kept reachable (a leak
 * checker's "still reachable", not a leak) and never cleaned up. */
typedef struct abandoned {
    struct abandoned *next;
    void *handle;
} abandoned;
static pthread_mutex_t g_ab_mu = PTHREAD_MUTEX_INITIALIZER;
static abandoned *g_abandoned;

/* The calling thread's handle and the fork count it was made under. */
typedef struct easy_slot {
    CURL *e;
    unsigned gen;
} easy_slot;

static void on_fork_child(void) { __atomic_add_fetch(&g_fork_gen, 1, __ATOMIC_RELAXED); }

unsigned sl_curl_fork_gen(void) { return __atomic_load_n(&g_fork_gen, __ATOMIC_RELAXED); }

void sl_curl_abandon(void *handle)
{
    abandoned *a = malloc(sizeof *a);
    if (!a)
        return; /* dropped: still never cleaned up */
    a->handle = handle;
    pthread_mutex_lock(&g_ab_mu);
    a->next = g_abandoned;
    g_abandoned = a;
    pthread_mutex_unlock(&g_ab_mu);
}

static void easy_destroy(void *p)
{
    easy_slot *sl = p;
    if (sl->gen == sl_curl_fork_gen())
        curl_easy_cleanup(sl->e);
    else
        sl_curl_abandon(sl->e);
    free(sl);
}

static void global_init(void)
{
    g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    g_key_ok = pthread_key_create(&g_easy_key, easy_destroy) == 0 &&
               pthread_atfork(NULL, NULL, on_fork_child) == 0;
}

int sl_curl_global(const char *fn)
{
    pthread_once(&g_once, global_init);
    if (g_init_rc != CURLE_OK)
        return sl_fail(SL_EIO, "%s: curl_global_init: %s", fn, curl_easy_strerror(g_init_rc));
    if (!g_key_ok)
        return sl_fail(SL_ENOMEM, "%s: pthread_key_create failed", fn);
    return SL_OK;
}

/* The calling thread's easy handle (a new one in a child of the process
 * that made the old). */
static int thread_easy(const char *fn, CURL **out)
{
    easy_slot *sl;
    int rc = sl_curl_global(fn);
    unsigned gen = sl_curl_fork_gen();

    if (rc)
        return rc;
    if ((sl = pthread_getspecific(g_easy_key)) && sl->e && sl->gen == gen) {
        *out = sl->e;
        return SL_OK;
    }
    if (!sl) {
        if (!(sl = calloc(1, sizeof *sl)))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        if (pthread_setspecific(g_easy_key, sl)) {
            free(sl);
            return sl_fail(SL_ENOMEM, "%s: pthread_setspecific failed", fn);
        }
    } else if (sl->e) {
        sl_curl_abandon(sl->e); /* the parent's: its connections are not ours */
        sl->e = NULL;
    }
    if (!(sl->e = curl_easy_init()))
        return sl_fail(SL_ENOMEM, "%s: curl_easy_init failed", fn);
    sl->gen = gen;
    *out = sl->e;
    return SL_OK;
}

/* ---------------------------------------------------------------- callbacks */

/* The most of an error response's body read (its <Code> is near the top). */
#define ERR_BODY_MAX ((uint64_t)64 << 10)

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    sl_xfer *x = ud;
    size_t len = size * nmemb;
    uint64_t pos = x->seen;

    x->seen += len;
    if (x->status < 200 || x->status >= 300) {
        size_t room = sizeof x->ebody - 1 - x->elen, take = len < room ? len : room;
        memcpy(x->ebody + x->elen, p, take);
        x->elen += take;
        x->ebody[x->elen] = 0;
        if (x->seen > ERR_BODY_MAX) {
            x->err_cut = 1;
            return 0; /* the status says enough: stop (CURLE_WRITE_ERROR) */
        }
        return len;
    }
    if (x->kind == SL_XF_WHOLE) {
        if (len > SL_BYTES_GET_MAX - x->len) {
            x->too_big = 1;
            return 0;
        }
        if (x->len + len + 1 > x->cap) {
            size_t cap = x->cap ? x->cap : 64 << 10;
            while (cap < x->len + len + 1)
                cap *= 2;
            uint8_t *nb = realloc(x->body, cap);
            if (!nb) {
                x->oom = 1;
                return 0;
            }
            x->body = nb;
            x->cap = cap;
        }
        memcpy(x->body + x->len, p, len);
        x->len += len;
        return len;
    }
    if (x->kind == SL_XF_HEAD) { /* size_by_get: one byte, or a 200 with the whole object */
        if (x->status == 200) {
            x->done_early = 1;
            return 0;
        }
        return len;
    }
    if (x->kind != SL_XF_RANGE)
        return len;
    if (x->status == 206) {
        size_t take = x->n - x->got < len ? x->n - x->got : len;
        memcpy(x->dst + x->got, p, take);
        x->got += take;
        if (take < len) { /* longer than asked: the range is in, the rest is not read */
            x->done_early = 1;
            return 0;
        }
        return len;
    }
    /* 200: the whole object. Kept whole for the next ranges when it can be
     * (remote_norange.c); [off, off + n) taken either way. */
    if (!x->nr_tried && pos == 0) {
        x->nr_tried = 1;
        x->nr = sl_norange_begin(x->u->url);
    }
    if (x->nr && sl_norange_put(x->nr, p, len, pos)) {
        sl_norange_done(x->nr, 0, 0); /* no room on the disk: the slice only */
        x->nr = NULL;
    }
    uint64_t lo = pos > x->off ? pos : x->off;
    uint64_t hi = pos + len < x->off + x->n ? pos + len : x->off + x->n;
    if (lo < hi) {
        memcpy(x->dst + (lo - x->off), p + (lo - pos), (size_t)(hi - lo));
        x->got += (size_t)(hi - lo);
    }
    if (x->got == x->n && !x->nr) {
        x->done_early = 1;
        return 0; /* the rest is not needed: stop (CURLE_WRITE_ERROR) */
    }
    return len;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    sl_xfer *x = ud;
    size_t len = size * nmemb;
    char line[256];
    size_t l = len < sizeof line - 1 ? len : sizeof line - 1;

    memcpy(line, p, l);
    line[l] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (after a 100 or a redirect) */
        const char *sp = strchr(line, ' ');
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->have_cr = x->cr_total_known = 0;
    } else if (!strncasecmp(line, "content-range:", 14)) {
        const char *s = line + 14;
        unsigned long long a, b, t;
        while (*s == ' ' || *s == '\t')
            s++;
        if (sscanf(s, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            x->have_cr = x->cr_total_known = 1;
            x->cr_first = a;
            x->cr_total = t;
        } else if (sscanf(s, "bytes %llu-%llu/", &a, &b) == 2) {
            x->have_cr = 1;
            x->cr_first = a;
        } else if (sscanf(s, "bytes */%llu", &t) == 1) {
            x->cr_total_known = 1;
            x->cr_total = t;
        }
    } else if (x->kind == SL_XF_WHOLE && x->status >= 200 && x->status < 300 &&
               !strncasecmp(line, "content-length:", 15)) {
        unsigned long long cl = strtoull(line + 15, NULL, 10);
        if (cl > SL_BYTES_GET_MAX) { /* refused before a byte of the body */
            x->too_big = 1;
            x->cr_total = cl; /* for the message */
            x->cr_total_known = 1;
            return 0;
        }
    }
    return len;
}

/* ---------------------------------------------------------------- one try */

/* Is the host of url ("http://HOST[:PORT]/...") the loopback (the name or
 * the address as written: no lookup, which could be spoofed)? */
static int loopback_host(const char *url)
{
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    const char *at = memchr(h, '@', strcspn(h, "/?#"));
    if (at)
        h = at + 1;
    size_t n = strcspn(h, "/?#");
    if (n >= 5 && h[0] == '[') /* [::1]:port */
        return !strncmp(h, "[::1]", 5);
    n = strcspn(h, ":/?#");
    if (n == 9 && !strncasecmp(h, "localhost", 9))
        return 1;
    if (n < 7 || strncmp(h, "127.", 4))
        return 0;
    for (size_t i = 4; i < n; i++)
        if ((h[i] < '0' || h[i] > '9') && h[i] != '.')
            return 0;
    return 1;
}

/* The CA file and folder to trust (bytesrc.h "Trust"), each checked
 * readable; NULLs: the system's. */
static int ca_paths(const sl_xfer *x, const sl_io_opts *o, const char **file, const char **dir)
{
    static const char *const file_vars[] = {"AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"};
    const char *from = "--ca-bundle", *v;

    *file = o->ca_bundle && *o->ca_bundle ? o->ca_bundle : NULL;
    for (size_t i = 0; !*file && i < sizeof file_vars / sizeof file_vars[0]; i++)
        if ((i > 0 || x->u->s3) && (v = getenv(file_vars[i])) && *v) {
            *file = v;
            from = file_vars[i];
        }
    *dir = (v = getenv("SSL_CERT_DIR")) && *v ? v : NULL;
    if (*file && access(*file, R_OK) != 0)
        return sl_fail(SL_EINVAL, "%s: CA bundle %s (%s): %s", x->u->name, *file, from,
                       strerror(errno));
    if (*dir && access(*dir, R_OK | X_OK) != 0)
        return sl_fail(SL_EINVAL, "%s: CA folder %s (SSL_CERT_DIR): %s", x->u->name, *dir,
                       strerror(errno));
    return SL_OK;
}

int sl_xfer_setup(sl_xfer *x, CURL *e, const sl_io_opts *o)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    const char *ca_file = NULL, *ca_dir = NULL;
    int https = !strncmp(x->u->url, "https://", 8), rc;
    CURLcode cc = CURLE_OK;

    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    if (x->nr) { /* the last try's copy, unfinished */
        sl_norange_done(x->nr, 0, 0);
        x->nr = NULL;
    }
    x->e = e;
    x->status = 0;
    x->seen = x->got = x->len = x->elen = 0;
    x->have_cr = x->cr_total_known = x->done_early = x->oom = x->retry = 0;
    x->too_big = x->err_cut = x->nr_tried = 0;
    x->ebody[0] = x->cerr[0] = x->why[0] = 0;
    if (https && (rc = ca_paths(x, o, &ca_file, &ca_dir)))
        return rc;

    int bad_opt = 0;
    long stall_s = (long)((o->timeout_ms + 999) / 1000);
#define SET(opt, val)                                                                          \
    if (cc == CURLE_OK && (cc = curl_easy_setopt(e, opt, val)) != CURLE_OK)                    \
    bad_opt = (int)(opt)
    SET(CURLOPT_URL, x->u->url);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
    SET(CURLOPT_LOW_SPEED_LIMIT, (long)SL_IO_LOW_SPEED);
    SET(CURLOPT_LOW_SPEED_TIME, stall_s > 0 ? stall_s : 1L);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, https ? "https" : "http,https"); /* never down to http */
    SET(CURLOPT_FOLLOWLOCATION, x->u->s3 ? 0L : 1L); /* a redirect would drop the signature */
    SET(CURLOPT_MAXREDIRS, 5L);
    SET(CURLOPT_USERAGENT, "sluice/" SLUICE_VERSION);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    if (ca_file)
        SET(CURLOPT_CAINFO, ca_file);
    if (ca_dir)
        SET(CURLOPT_CAPATH, ca_dir);
    /* A hint (fewer, larger write callbacks). libcurl 7.88 refuses it with
     * "bad argument" on a handle whose previous try failed to resolve its
     * host, which must not turn a retry into a failure: not checked. */
    (void)curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L << 10);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, x);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, x);
    SET(CURLOPT_ERRORBUFFER, x->cerr);
    SET(CURLOPT_PRIVATE, x);
    if (x->kind == SL_XF_RANGE) {
        snprintf(x->range, sizeof x->range, "%llu-%llu", (unsigned long long)x->off,
                 (unsigned long long)(x->off + x->n - 1));
        SET(CURLOPT_RANGE, x->range);
    } else if (x->kind == SL_XF_HEAD && x->size_by_get) {
        SET(CURLOPT_RANGE, "0-0");
    } else if (x->kind == SL_XF_HEAD) {
        SET(CURLOPT_NOBODY, 1L);
    }
    if (x->u->s3 && key && *key) {
        char sigv4[96];
        if (token && *token && !https && !loopback_host(x->u->url))
            return sl_fail(SL_EPERM, "%s: AWS_SESSION_TOKEN would go in clear over http:// to "
                           "another host than this one: use an https:// endpoint (or unset "
                           "AWS_SESSION_TOKEN)", x->u->name);
        snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", x->u->region);
        SET(CURLOPT_AWS_SIGV4, sigv4);
        SET(CURLOPT_USERNAME, key);
        SET(CURLOPT_PASSWORD, secret ? secret : "");
        struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
        x->hdrs = h;
        if (h && token && *token) {
            size_t tl = strlen(token) + 32;
            char *th = malloc(tl);
            if (th) {
                snprintf(th, tl, "x-amz-security-token: %s", token);
                h = curl_slist_append(x->hdrs, th);
                free(th);
            } else {
                h = NULL;
            }
            if (h)
                x->hdrs = h;
            else
                x->oom = 1;
        }
        if (!x->hdrs || x->oom)
            return sl_fail(SL_ENOMEM, "%s: out of memory", x->u->name);
        SET(CURLOPT_HTTPHEADER, x->hdrs);
    }
#undef SET
    if (cc != CURLE_OK)
        return sl_fail(SL_EIO, "%s: curl_easy_setopt(option %d): %s", x->u->name, bad_opt,
                       curl_easy_strerror(cc));
    return SL_OK;
}

static int curl_retriable(CURLcode cc)
{
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_QUIC_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}

/* " (S3Code)" from an S3 error body, or "". Only the code: the body may
 * echo the access key id. */
static void s3_code(const sl_xfer *x, char *out, size_t cap)
{
    const char *c = strstr(x->ebody, "<Code>");
    size_t n = 0;

    out[0] = 0;
    if (!c)
        return;
    c += 6;
    while (n < 64 && ((c[n] >= 'A' && c[n] <= 'Z') || (c[n] >= 'a' && c[n] <= 'z') ||
                      (c[n] >= '0' && c[n] <= '9') || c[n] == '.'))
        n++;
    if (n && c[n] == '<')
        snprintf(out, cap, " (%.*s)", (int)n, c);
}

static int ends_before(sl_xfer *x, uint64_t size, int size_known)
{
    if (size_known)
        snprintf(x->why, sizeof x->why, "the object ends before byte %llu (size %llu)",
                 (unsigned long long)(x->off + x->n - 1), (unsigned long long)size);
    else
        snprintf(x->why, sizeof x->why, "the object ends before byte %llu",
                 (unsigned long long)(x->off + x->n - 1));
    return SL_ECORRUPT;
}

int sl_xfer_verdict(sl_xfer *x, CURLcode cc)
{
    long http = 0;
    char code[80];

    if (x->nr) { /* a 200 kept whole: complete when the transfer is */
        sl_norange_done(x->nr, cc == CURLE_OK && x->status == 200, x->seen);
        x->nr = NULL;
    }
    if (x->oom) {
        snprintf(x->why, sizeof x->why, "out of memory");
        return SL_ENOMEM;
    }
    if (x->too_big) {
        if (x->cr_total_known)
            snprintf(x->why, sizeof x->why, "%llu bytes (Content-Length): more than the %zu MiB "
                     "sluice fetches whole (an index, a manifest or a listing page is smaller)",
                     (unsigned long long)x->cr_total, SL_BYTES_GET_MAX >> 20);
        else
            snprintf(x->why, sizeof x->why, "more than the %zu MiB sluice fetches whole (an "
                     "index, a manifest or a listing page is smaller): stopped there",
                     SL_BYTES_GET_MAX >> 20);
        return SL_ECORRUPT;
    }
    if (cc == CURLE_WRITE_ERROR && (x->done_early || x->err_cut))
        cc = CURLE_OK; /* stopped on purpose: judged below by the status and the bytes */
    if (cc != CURLE_OK) {
        snprintf(x->why, sizeof x->why, "%s%s%s", curl_easy_strerror(cc), x->cerr[0] ? ": " : "",
                 x->cerr);
        x->retry = curl_retriable(cc);
        return SL_EIO;
    }
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &http);
    s3_code(x, code, sizeof code);
    if (http == 404 || http == 410) {
        snprintf(x->why, sizeof x->why, "HTTP %ld%s: not found", http, code);
        return SL_ENOENT;
    }
    if (http == 401 || http == 403) {
        const char *key = getenv("AWS_ACCESS_KEY_ID");
        snprintf(x->why, sizeof x->why, "HTTP %ld%s: refused: %s", http, code,
                 !x->u->s3 ? "check the URL's access rights"
                 : key && *key ? "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
                               : "unsigned request (AWS_ACCESS_KEY_ID is not set)");
        return SL_EPERM;
    }
    if (http == 416 && x->kind == SL_XF_RANGE)
        return ends_before(x, x->cr_total, x->cr_total_known);
    if (http == 416 && x->kind == SL_XF_HEAD && x->size_by_get) {
        x->cr_total = x->cr_total_known ? x->cr_total : 0; /* byte 0 is past the end: empty */
        return SL_OK;
    }
    if (http == 408 || http == 429 || http >= 500) {
        snprintf(x->why, sizeof x->why, "HTTP %ld%s", http, code);
        x->retry = 1;
        return SL_EIO;
    }
    if (http < 200 || http >= 300) {
        snprintf(x->why, sizeof x->why, "HTTP %ld%s", http, code);
        return SL_EIO;
    }
    if (x->kind == SL_XF_HEAD && http == 206) {
        if (!x->cr_total_known) {
            snprintf(x->why, sizeof x->why, "HTTP 206 without the object's size in Content-Range");
            return SL_EIO;
        }
        return SL_OK;
    }
    if (x->kind == SL_XF_HEAD) {
        curl_off_t cl = -1;
        curl_easy_getinfo(x->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        if (cl < 0) {
            snprintf(x->why, sizeof x->why, "HTTP %ld without a Content-Length", http);
            return SL_EIO;
        }
        x->cr_total = (uint64_t)cl;
        return SL_OK;
    }
    if (x->kind != SL_XF_RANGE)
        return SL_OK;
    if (http == 206) {
        if (x->have_cr && x->cr_first != x->off) {
            snprintf(x->why, sizeof x->why, "HTTP 206 with bytes from %llu",
                     (unsigned long long)x->cr_first);
            return SL_EIO;
        }
        if (x->got < x->n) {
            if (x->cr_total_known && x->cr_total < x->off + x->n)
                return ends_before(x, x->cr_total, 1);
            snprintf(x->why, sizeof x->why, "short body: %zu of %zu bytes", x->got, x->n);
            x->retry = 1;
            return SL_EIO;
        }
        return SL_OK;
    }
    /* 200 with the whole object: complete (libcurl checked Content-Length),
     * or stopped once the range was in */
    if (x->got < x->n)
        return ends_before(x, x->seen, 1);
    return SL_OK;
}

void sl_xfer_message(const sl_xfer *x, const char *fn, int code, unsigned tries, char *out,
                     size_t cap)
{
    char what[64];
    const char *w = x->what;

    if (!w) {
        if (x->kind == SL_XF_RANGE)
            snprintf(what, sizeof what, "bytes %llu-%llu", (unsigned long long)x->off,
                     (unsigned long long)(x->off + x->n - 1));
        else
            snprintf(what, sizeof what, "%s",
                     x->kind != SL_XF_HEAD ? "GET" : x->size_by_get ? "size" : "HEAD");
        w = what;
    }
    if (x->retry || (code == SL_EIO && tries > 1)) {
        uint64_t now = sl_now_ns();
        double s = x->first_ns && now > x->first_ns ? (double)(now - x->first_ns) * 1e-9 : 0;
        snprintf(out, cap, "%s: %s: %s: %s after %u %s in %.1f s", fn, x->u->name, w, x->why,
                 tries, tries == 1 ? "try" : "tries", s);
    } else {
        snprintf(out, cap, "%s: %s: %s: %s", fn, x->u->name, w, x->why);
    }
}

void sl_xfer_fini(sl_xfer *x)
{
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    if (x->nr) {
        sl_norange_done(x->nr, 0, 0);
        x->nr = NULL;
    }
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* How long a request waits for another that fetches its object whole. */
#define NORANGE_WAIT_NS (20ull * 1000000ull)

int sl_xfer_run(const char *fn, sl_xfer *x)
{
    sl_io_opts o;
    CURL *e = NULL;
    unsigned t;
    int rc = thread_easy(fn, &e);

    if (rc)
        return rc;
    if (x->o)
        o = *x->o;
    else if ((rc = sl_io_resolve(NULL, &o)))
        return rc;
    x->first_ns = sl_now_ns();
    for (t = 1;; t++) {
        if (x->kind == SL_XF_RANGE) { /* an object whose server ignores Range: its copy */
            int held, hrc = SL_OK;
            while ((held = sl_norange_read(x->u->url, x->u->name, x->dst, x->n, x->off, &hrc)) == 2)
                sleep_ns(NORANGE_WAIT_NS);
            if (held) {
                rc = hrc ? sl_fail(hrc, "%s: %s", fn, sl_errmsg()) : SL_OK;
                break;
            }
        }
        curl_easy_reset(e); /* keeps the connections */
        if ((rc = sl_xfer_setup(x, e, &o))) {
            sl_xfer_fini(x);
            return sl_fail(rc, "%s: %s", fn, sl_errmsg());
        }
        sl_io_note_start(t > 1);
        CURLcode cc = curl_easy_perform(e);
        sl_io_note_end(x->seen);
        rc = sl_xfer_verdict(x, cc);
        if (rc == SL_OK)
            break;
        uint64_t wait;
        if (x->retry && sl_io_retry_next(&o, t, x->first_ns, &wait)) {
            sleep_ns(wait);
            continue;
        }
        char msg[SL_ERRMSG_MAX];
        sl_io_note_failure();
        sl_xfer_message(x, fn, rc, t, msg, sizeof msg);
        sl_fail(rc, "%s", msg);
        break;
    }
    curl_easy_reset(e); /* no pointer into x left on the handle */
    sl_xfer_fini(x);
    return rc;
}

/* ---------------------------------------------------------------- bytesrc.h */

int sl_remote_read(const char *fn, const char *path, const sl_io_opts *o, void *buf, size_t n,
                   uint64_t off)
{
    sl_rurl u;
    sl_xfer x = {.kind = SL_XF_RANGE, .u = &u, .o = o, .dst = buf, .n = n, .off = off};
    int rc = sl_rurl_object(fn, path, &u);

    if (rc)
        return rc;
    rc = sl_xfer_run(fn, &x);
    sl_rurl_fini(&u);
    return rc;
}

int sl_remote_size(const char *fn, const char *path, const sl_io_opts *o, uint64_t *size)
{
    sl_rurl u;
    sl_xfer x = {.kind = SL_XF_HEAD, .u = &u, .o = o};
    int rc = sl_rurl_object(fn, path, &u);

    if (rc)
        return rc;
    x.size_by_get = strchr(u.url, '?') != NULL; /* a query may sign the method (GET) */
    if (!(rc = sl_xfer_run(fn, &x)))
        *size = x.cr_total;
    sl_rurl_fini(&u);
    return rc;
}

int sl_remote_get(const char *fn, const char *path, const sl_io_opts *o, uint8_t **buf,
                  size_t *len)
{
    sl_rurl u;
    sl_xfer x = {.kind = SL_XF_WHOLE, .u = &u, .o = o};
    int rc = sl_rurl_object(fn, path, &u);

    if (rc)
        return rc;
    rc = sl_xfer_run(fn, &x);
    if (!rc && !x.body && !(x.body = malloc(1)))
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, u.name);
    if (rc) {
        free(x.body);
    } else {
        x.body[x.len] = 0;
        *buf = x.body;
        *len = x.len;
    }
    sl_rurl_fini(&u);
    return rc;
}

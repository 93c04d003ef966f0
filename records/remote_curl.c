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
 *   SL_ECORRUPT "ends before byte"); a 416 is SL_ECORRUPT too. A server that
 *   ignores Range answers 200 with the whole object: the slice [A, B] is
 *   taken as it streams by and the transfer stopped once it is in.
 *   A short body against Content-Length is libcurl's CURLE_PARTIAL_FILE.
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

/* SHA-256 of the empty string: the payload hash of a bodiless request. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---------------------------------------------------------------- global */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc;
static pthread_key_t g_easy_key;
static int g_key_ok;

static void easy_destroy(void *e) { curl_easy_cleanup(e); }

static void global_init(void)
{
    g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    g_key_ok = pthread_key_create(&g_easy_key, easy_destroy) == 0;
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

/* The calling thread's easy handle. */
static int thread_easy(const char *fn, CURL **out)
{
    CURL *e;
    int rc = sl_curl_global(fn);

    if (rc)
        return rc;
    if ((e = pthread_getspecific(g_easy_key))) {
        *out = e;
        return SL_OK;
    }
    if (!(e = curl_easy_init()))
        return sl_fail(SL_ENOMEM, "%s: curl_easy_init failed", fn);
    if (pthread_setspecific(g_easy_key, e)) {
        curl_easy_cleanup(e);
        return sl_fail(SL_ENOMEM, "%s: pthread_setspecific failed", fn);
    }
    *out = e;
    return SL_OK;
}

/* ---------------------------------------------------------------- callbacks */

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
        return len;
    }
    if (x->kind == SL_XF_WHOLE) {
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
    if (x->kind != SL_XF_RANGE)
        return len;
    if (x->status == 206) {
        size_t take = x->n - x->got < len ? x->n - x->got : len;
        memcpy(x->dst + x->got, p, take);
        x->got += take;
        return len;
    }
    /* 200: the whole object; keep [off, off + n) */
    uint64_t lo = pos > x->off ? pos : x->off;
    uint64_t hi = pos + len < x->off + x->n ? pos + len : x->off + x->n;
    if (lo < hi) {
        memcpy(x->dst + (lo - x->off), p + (lo - pos), (size_t)(hi - lo));
        x->got += (size_t)(hi - lo);
    }
    if (x->got == x->n) {
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
    }
    return len;
}

/* ---------------------------------------------------------------- one try */

int sl_xfer_setup(sl_xfer *x, CURL *e, const sl_io_opts *o)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    CURLcode cc = CURLE_OK;

    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    x->e = e;
    x->status = 0;
    x->seen = x->got = x->len = x->elen = 0;
    x->have_cr = x->cr_total_known = x->done_early = x->oom = x->retry = 0;
    x->ebody[0] = x->cerr[0] = x->why[0] = 0;

    int bad_opt = 0;
#define SET(opt, val)                                                                          \
    if (cc == CURLE_OK && (cc = curl_easy_setopt(e, opt, val)) != CURLE_OK)                    \
    bad_opt = (int)(opt)
    SET(CURLOPT_URL, x->u->url);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, x->u->s3 ? 0L : 1L); /* a redirect would drop the signature */
    SET(CURLOPT_MAXREDIRS, 5L);
    SET(CURLOPT_USERAGENT, "sluice/" SLUICE_VERSION);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
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
    } else if (x->kind == SL_XF_HEAD) {
        SET(CURLOPT_NOBODY, 1L);
    }
    if (x->u->s3 && key && *key) {
        char sigv4[96];
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

    if (x->oom) {
        snprintf(x->why, sizeof x->why, "out of memory");
        return SL_ENOMEM;
    }
    if (cc == CURLE_WRITE_ERROR && x->done_early)
        return SL_OK;
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
    if (http == 408 || http == 429 || http >= 500) {
        snprintf(x->why, sizeof x->why, "HTTP %ld%s", http, code);
        x->retry = 1;
        return SL_EIO;
    }
    if (http < 200 || http >= 300) {
        snprintf(x->why, sizeof x->why, "HTTP %ld%s", http, code);
        return SL_EIO;
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
    /* 200 with the whole object, complete (libcurl checked Content-Length) */
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
            snprintf(what, sizeof what, "%s", x->kind == SL_XF_HEAD ? "HEAD" : "GET");
        w = what;
    }
    if (x->retry || (code == SL_EIO && tries > 1))
        snprintf(out, cap, "%s: %s: %s: %s after %u %s", fn, x->u->name, w, x->why, tries,
                 tries == 1 ? "try" : "tries");
    else
        snprintf(out, cap, "%s: %s: %s: %s", fn, x->u->name, w, x->why);
}

void sl_xfer_fini(sl_xfer *x)
{
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int sl_xfer_run(const char *fn, sl_xfer *x)
{
    sl_io_opts o;
    CURL *e = NULL;
    unsigned max, t;
    int rc = thread_easy(fn, &e);

    if (rc)
        return rc;
    sl_io_get_opts(&o);
    max = sl_io_tries(&o);
    for (t = 1;; t++) {
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
        if (x->retry && t < max) {
            sleep_ns(sl_io_backoff_ns(&o, t));
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

int sl_remote_read(const char *fn, const char *path, void *buf, size_t n, uint64_t off)
{
    sl_rurl u;
    sl_xfer x = {.kind = SL_XF_RANGE, .u = &u, .dst = buf, .n = n, .off = off};
    int rc = sl_rurl_object(fn, path, &u);

    if (rc)
        return rc;
    rc = sl_xfer_run(fn, &x);
    sl_rurl_fini(&u);
    return rc;
}

int sl_remote_size(const char *fn, const char *path, uint64_t *size)
{
    sl_rurl u;
    sl_xfer x = {.kind = SL_XF_HEAD, .u = &u};
    int rc = sl_rurl_object(fn, path, &u);

    if (rc)
        return rc;
    if (!(rc = sl_xfer_run(fn, &x)))
        *size = x.cr_total;
    sl_rurl_fini(&u);
    return rc;
}

int sl_remote_get(const char *fn, const char *path, uint8_t **buf, size_t *len)
{
    sl_rurl u;
    sl_xfer x = {.kind = SL_XF_WHOLE, .u = &u};
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

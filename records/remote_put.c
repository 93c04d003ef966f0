/*
 * records/remote_put.c - PUT, S3 multipart upload and DELETE through
 * libcurl (records/remote_put.h), on the byte source's request machinery
 * (remote_curl.c: addressing, SigV4, the verdict on a try, messages).
 *
 * DESIGN
 *   One request = sl_xfer_setup (URL, timeouts, SigV4, callbacks), then
 *   this file's part of the set-up: the method and its body (UPLOAD with a
 *   read callback over memory for PUT, POSTFIELDS for POST, CUSTOMREQUEST
 *   for DELETE), "x-amz-content-sha256: UNSIGNED-PAYLOAD" in place of the
 *   empty body's hash (libcurl 7.88 signs the header's value as the
 *   payload hash; S3 accepts an unsigned payload on a signed request, and
 *   the body's integrity is checked end to end by `convert --finish`,
 *   which reads every shard back and checks its CRCs), and a header
 *   callback that also keeps the ETag. No "Expect:" header to turn off
 *   100-continue: libcurl 7.88 signs the empty header it does not send
 *   (SignatureDoesNotMatch); a short EXPECT_100_TIMEOUT instead. Tries and backoff as remote_curl.c's sl_xfer_run, which cannot
 *   take a body: a loop of the same shape here.
 *   Multipart (S3 API, CreateMultipartUpload / UploadPart /
 *   CompleteMultipartUpload / AbortMultipartUpload): POST ?uploads gives
 *   the UploadId; part k (1-based) of the file is read into one buffer
 *   and PUT with ?partNumber=k&uploadId=ID, retried on its own; the
 *   completion POSTs the parts' ETags. S3 may answer the completion 200
 *   with an <Error> body: that is a failure (retried). Any failure after
 *   the start aborts the upload (DELETE ?uploadId=ID), so no parts are
 *   left billed.
 *
 * Threading: reentrant; a call makes and frees its own easy handle.
 */
#include "records/remote_int.h"
#include "records/remote_put.h"

#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PART_DEFAULT ((uint64_t)64 << 20)

static _Atomic uint64_t n_objects, n_parts, n_retries, n_aborted;

void sl_put_stats_get(sl_put_stats *s)
{
    s->objects = atomic_load(&n_objects);
    s->parts = atomic_load(&n_parts);
    s->retries = atomic_load(&n_retries);
    s->aborted = atomic_load(&n_aborted);
}

uint64_t sl_put_part_bytes(void)
{
    const char *v = getenv("SLUICE_PUT_PART_BYTES");
    char *end;
    if (v && *v) {
        unsigned long long n = strtoull(v, &end, 10);
        if (!*end && n >= 1024)
            return n;
    }
    return PART_DEFAULT;
}

/* ---------------------------------------------------------------- one request */

typedef struct put_req {
    sl_xfer x;
    const char *method;     /* "PUT", "POST", "DELETE" */
    const uint8_t *data;    /* the body */
    size_t len, pos;
    char etag[160];         /* the response's ETag, quotes kept */
} put_req;

static size_t on_read(char *buf, size_t size, size_t nitems, void *ud)
{
    put_req *r = ud;
    size_t room = size * nitems, left = r->len - r->pos, n = left < room ? left : room;
    memcpy(buf, r->data + r->pos, n);
    r->pos += n;
    return n;
}

/* remote_curl.c's header callback keeps the status and Content-Range; a
 * PUT needs the status (its error body is kept by on_body through it) and
 * the ETag. */
static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    put_req *r = ud;
    size_t len = size * nmemb;
    if (len > 5 && !strncmp(p, "HTTP/", 5)) {
        const char *sp = memchr(p, ' ', len);
        r->x.status = sp ? strtol(sp + 1, NULL, 10) : 0;
    } else if (len > 5 && !strncasecmp(p, "etag:", 5)) {
        size_t i = 5;
        while (i < len && (p[i] == ' ' || p[i] == '\t'))
            i++;
        size_t n = len - i;
        while (n && (p[i + n - 1] == '\r' || p[i + n - 1] == '\n' || p[i + n - 1] == ' '))
            n--;
        if (n < sizeof r->etag) {
            memcpy(r->etag, p + i, n);
            r->etag[n] = 0;
        }
    }
    return len;
}

/* The request's own options, after sl_xfer_setup. */
static int send_setup(put_req *r, CURL *e)
{
    struct curl_slist *h = NULL, *t;
    CURLcode cc = CURLE_OK;
    /* The headers sl_xfer_setup made, less its payload hash */
    for (t = r->x.hdrs; t; t = t->next)
        if (strncasecmp(t->data, "x-amz-content-sha256:", 21) && !(h = curl_slist_append(h, t->data)))
            goto oom;
    if (r->x.u->s3 && !(t = curl_slist_append(h, "x-amz-content-sha256: UNSIGNED-PAYLOAD")))
        goto oom;
    h = r->x.u->s3 ? t : h;
    /* a POST body is S3's XML, not a form (a form-reading server, moto's
     * werkzeug, would consume it as one) */
    if (!strcmp(r->method, "POST") && !(h = curl_slist_append(h, "Content-Type: application/xml")))
        goto oom;
    curl_slist_free_all(r->x.hdrs);
    r->x.hdrs = h;
    r->pos = 0;
    r->etag[0] = 0;
#define SET(opt, val)                                                                              \
    if (cc == CURLE_OK)                                                                            \
    cc = curl_easy_setopt(e, opt, val)
    SET(CURLOPT_HTTPHEADER, h);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, r);
    /* libcurl asks "Expect: 100-continue" before a large body; a server
     * that does not answer it costs this wait, not a second */
    SET(CURLOPT_EXPECT_100_TIMEOUT_MS, 100L);
    if (!strcmp(r->method, "PUT")) {
        SET(CURLOPT_UPLOAD, 1L);
        SET(CURLOPT_READFUNCTION, on_read);
        SET(CURLOPT_READDATA, r);
        SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->len);
    } else if (!strcmp(r->method, "POST")) {
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDS, r->data ? (const char *)r->data : "");
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->len);
    } else {
        SET(CURLOPT_CUSTOMREQUEST, r->method);
    }
#undef SET
    if (cc != CURLE_OK)
        return sl_fail(SL_EIO, "%s: %s: curl_easy_setopt: %s", r->x.u->name, r->method,
                       curl_easy_strerror(cc));
    return SL_OK;
oom:
    curl_slist_free_all(h);
    return sl_fail(SL_ENOMEM, "%s: out of memory", r->x.u->name);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* One request with retries: method to path + query (query "" or "?..."),
 * body data[0..len). what names it in messages. The response body is kept
 * in r->x.body (caller frees) and the ETag in r->etag. */
static int request(const char *fn, const char *path, const char *query, put_req *r, const char *what)
{
    sl_rurl u;
    sl_io_opts o;
    CURL *e = NULL;
    int rc = sl_curl_global(fn);
    if (!rc) /* the process's options, or the thread's (sl_io_thread_use) */
        rc = sl_io_resolve(NULL, &o);
    if (!rc)
        rc = sl_rurl_object(fn, path, &u);
    if (rc)
        return rc;
    if (*query) {
        char *q = sl_str_cat(u.url, query);
        if (!q) {
            sl_rurl_fini(&u);
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        }
        free(u.url);
        u.url = q;
    }
    if (!(e = curl_easy_init())) {
        sl_rurl_fini(&u);
        return sl_fail(SL_ENOMEM, "%s: curl_easy_init failed", fn);
    }
    r->x.kind = SL_XF_WHOLE;
    r->x.u = &u;
    r->x.what = what;
    unsigned max = sl_io_tries(&o);
    for (unsigned t = 1;; t++) {
        curl_easy_reset(e);
        if ((rc = sl_xfer_setup(&r->x, e, &o)) || (rc = send_setup(r, e))) {
            rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
            break;
        }
        sl_io_note_start(t > 1);
        if (t > 1)
            atomic_fetch_add(&n_retries, 1);
        CURLcode cc = curl_easy_perform(e);
        sl_io_note_end(r->x.seen);
        rc = sl_xfer_verdict(&r->x, cc);
        /* CompleteMultipartUpload: 200 with an <Error> body is a failure */
        if (!rc && r->x.body && r->x.len && strstr((const char *)r->x.body, "<Error>")) {
            snprintf(r->x.why, sizeof r->x.why, "HTTP %ld with an <Error> body", r->x.status);
            r->x.retry = 1;
            rc = SL_EIO;
        }
        if (rc == SL_OK)
            break;
        if (r->x.retry && t < max) {
            sleep_ns(sl_io_backoff_ns(&o, t));
            continue;
        }
        char msg[SL_ERRMSG_MAX];
        sl_io_note_failure();
        sl_xfer_message(&r->x, fn, rc, t, msg, sizeof msg);
        sl_fail(rc, "%s", msg);
        break;
    }
    if (r->x.body && r->x.len < r->x.cap)
        r->x.body[r->x.len] = 0;
    curl_easy_cleanup(e);
    sl_xfer_fini(&r->x);
    r->x.u = NULL;
    sl_rurl_fini(&u);
    return rc;
}

static void req_fini(put_req *r)
{
    free(r->x.body);
    r->x.body = NULL;
}

/* ---------------------------------------------------------------- remote_put.h */

int sl_put_bytes(const char *url, const void *data, size_t len)
{
    put_req r = {.method = "PUT", .data = data, .len = len};
    int rc = request("sl_put_bytes", url, "", &r, "PUT");
    req_fini(&r);
    if (!rc)
        atomic_fetch_add(&n_objects, 1);
    return rc;
}

int sl_put_delete(const char *url)
{
    put_req r = {.method = "DELETE"};
    int rc = request("sl_put_delete", url, "", &r, "DELETE");
    req_fini(&r);
    if (rc == SL_ENOENT) {
        sl_clear_error();
        rc = SL_OK;
    }
    return rc;
}

/* pread all n bytes at off. */
static int read_at(const char *path, int fd, uint8_t *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return sl_fail(SL_EIO, "sl_put_file: %s: read: %s", path, k ? strerror(errno) : "short file");
        got += (size_t)k;
    }
    return SL_OK;
}

/* The text between <tag> and </tag> in body, malloc'd; NULL when absent. */
static char *xml_text(const char *body, const char *tag)
{
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = body ? strstr(body, open) : NULL, *b;
    if (!a || !(b = strstr(a += strlen(open), close)))
        return NULL;
    return strndup(a, (size_t)(b - a));
}

/* The multipart upload of fd (size bytes) to url, in parts of part bytes. */
static int put_multipart(const char *url, const char *path, int fd, uint64_t size, uint64_t part)
{
    static const char fn[] = "sl_put_file";
    uint64_t nparts = (size + part - 1) / part;
    char what[96], query[1024], *id = NULL, *eid = NULL, *xml = NULL;
    uint8_t *buf = NULL;
    size_t xlen = 0, xcap = 0;
    put_req r = {.method = "POST"};
    /* "uploads=": libcurl 7.88 signs the query as written, and SigV4 canonicalizes
     * a bare "uploads" to "uploads=" */
    int rc = request(fn, url, "?uploads=", &r, "POST ?uploads (start a multipart upload)");
    if (!rc && (!(id = xml_text((const char *)r.x.body, "UploadId")) || !*id))
        rc = sl_fail(SL_EIO, "%s: %s: the multipart upload's start gave no UploadId", fn, url);
    req_fini(&r);
    if (rc) {
        free(id);
        return rc;
    }
    if (!(eid = sl_url_escape(id, 0)) || !(buf = malloc(part)) || !(xml = malloc(xcap = 4096))) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, url);
        goto abort;
    }
    xlen = (size_t)snprintf(xml, xcap, "<CompleteMultipartUpload>");
    for (uint64_t k = 1; k <= nparts && !rc; k++) {
        uint64_t off = (k - 1) * part, n = size - off < part ? size - off : part;
        if ((rc = read_at(path, fd, buf, (size_t)n, off)))
            break;
        snprintf(query, sizeof query, "?partNumber=%llu&uploadId=%s", (unsigned long long)k, eid);
        snprintf(what, sizeof what, "PUT part %llu of %llu", (unsigned long long)k,
                 (unsigned long long)nparts);
        put_req p = {.method = "PUT", .data = buf, .len = (size_t)n};
        rc = request(fn, url, query, &p, what);
        req_fini(&p);
        if (!rc && !p.etag[0])
            rc = sl_fail(SL_EIO, "%s: %s: %s: no ETag in the answer", fn, url, what);
        if (rc)
            break;
        atomic_fetch_add(&n_parts, 1);
        size_t need = xlen + strlen(p.etag) + 96;
        if (need > xcap) {
            char *nx = realloc(xml, xcap = 2 * need);
            if (!nx) {
                rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, url);
                break;
            }
            xml = nx;
        }
        xlen += (size_t)snprintf(xml + xlen, xcap - xlen,
                                 "<Part><PartNumber>%llu</PartNumber><ETag>%s</ETag></Part>",
                                 (unsigned long long)k, p.etag);
    }
    if (!rc && xlen + 32 > xcap) {
        char *nx = realloc(xml, xcap = xlen + 32);
        if (!nx)
            rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, url);
        else
            xml = nx;
    }
    if (!rc) {
        xlen += (size_t)snprintf(xml + xlen, xcap - xlen, "</CompleteMultipartUpload>");
        snprintf(query, sizeof query, "?uploadId=%s", eid);
        put_req c = {.method = "POST", .data = (const uint8_t *)xml, .len = xlen};
        rc = request(fn, url, query, &c, "POST ?uploadId (complete the multipart upload)");
        req_fini(&c);
    }
    if (!rc) {
        atomic_fetch_add(&n_objects, 1);
        goto out;
    }
abort:
    if (eid) { /* best effort: the first failure is what the caller hears */
        char keep[SL_ERRMSG_MAX];
        snprintf(keep, sizeof keep, "%s", sl_errmsg());
        snprintf(query, sizeof query, "?uploadId=%s", eid);
        put_req d = {.method = "DELETE"};
        if (request(fn, url, query, &d, "DELETE ?uploadId (abort the multipart upload)") == SL_OK)
            atomic_fetch_add(&n_aborted, 1);
        req_fini(&d);
        sl_fail(rc, "%s (the multipart upload was aborted)", keep);
    }
out:
    free(buf);
    free(xml);
    free(eid);
    free(id);
    return rc;
}

int sl_put_file(const char *url, const char *local_path)
{
    static const char fn[] = "sl_put_file";
    struct stat sb;
    uint8_t *buf = NULL;
    int rc, fd = open(local_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_fail(SL_EIO, "%s: %s: open: %s", fn, local_path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: fstat: %s", fn, local_path, strerror(errno));
        goto out;
    }
    uint64_t size = (uint64_t)sb.st_size, part = sl_put_part_bytes();
    if (size > part) {
        rc = put_multipart(url, local_path, fd, size, part);
        goto out;
    }
    if (!(buf = malloc(size ? size : 1))) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory (%llu bytes)", fn, local_path,
                     (unsigned long long)size);
        goto out;
    }
    if (!(rc = read_at(local_path, fd, buf, (size_t)size, 0)))
        rc = sl_put_bytes(url, buf, (size_t)size);
out:
    free(buf);
    close(fd);
    return rc;
}

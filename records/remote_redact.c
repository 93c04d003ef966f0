/*
 * records/remote_redact.c - credentials out of names (bytesrc.h,
 * "Credentials"): sl_path_redact where a path enters, and the table the
 * requests take them back from (sl_secret_url). Built with and without
 * libcurl (redaction is string work).
 *
 * DESIGN
 *   Why a table: a message can only leak what the string it prints holds.
 *   Redacting at each print (what the code did) missed a dozen places
 *   (profile's text and --json, bad-record lists, eval, Python exceptions);
 *   redacting once where a path enters leaves no string downstream that
 *   holds a secret, so no later message can. The secrets live here only,
 *   and only the request URL handed to libcurl (never printed: messages
 *   use sl_rurl.name) gets them back.
 *   Two kinds: a userinfo ("user:pass") belongs to its origin (scheme, host
 *   and port, as curl sends it to that origin and no other), so the names
 *   derived from a path (dataset.json, the shards it lists, their .idx)
 *   carry it too; a query string belongs to its one object (a presigned
 *   URL signs one key). A name beside a presigned object that is not
 *   itself registered (its .idx, dataset.json) has no signature of its own:
 *   SL_ENOENT without a request (an unsigned request would be a 403, which
 *   would end the run rather than mean "no index").
 *   A path that still carries its own userinfo or query (a library caller
 *   that never called sl_path_redact) is requested as it is, and named
 *   without them (sl_url_redact) as before.
 *
 * Threading: one mutex over the table; an entry count read without it
 * keeps the common case (no secret at all) free of the lock.
 */
#include "records/bytesrc_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct secret {
    struct secret *next;
    char *key;   /* origin "scheme://host[:port]", or the redacted object path */
    char *val;   /* "user:pass", or the query string without its '?' */
    int query;   /* 1: a query of the object key */
    int signed_; /* query: a signature (presigned URL) */
} secret;

static pthread_mutex_t sec_mu = PTHREAD_MUTEX_INITIALIZER;
static secret *sec_head;
static int sec_count;

/* The parts of an http(s) URL: [0, host) "scheme://", the userinfo (without
 * its '@') when there is one, the authority host[:port], the path, the
 * query (without '?'). Lengths are 0 when absent. */
typedef struct url_parts {
    size_t scheme_len;           /* "https://" */
    const char *user; size_t user_len;
    const char *host; size_t host_len;
    const char *path; size_t path_len;
    const char *query; size_t query_len;
} url_parts;

static void split_url(const char *s, url_parts *u)
{
    const char *se = strstr(s, "://");
    memset(u, 0, sizeof *u);
    const char *a = se ? se + 3 : s;
    u->scheme_len = (size_t)(a - s);
    size_t alen = strcspn(a, "/?#");
    const char *at = NULL;
    for (size_t i = alen; i > 0; i--) /* the last '@': a password may hold one */
        if (a[i - 1] == '@') {
            at = a + i - 1;
            break;
        }
    if (at) {
        u->user = a;
        u->user_len = (size_t)(at - a);
        u->host = at + 1;
        u->host_len = alen - u->user_len - 1;
    } else {
        u->host = a;
        u->host_len = alen;
    }
    u->path = a + alen;
    u->path_len = strcspn(u->path, "?#");
    if (u->path[u->path_len] == '?') {
        u->query = u->path + u->path_len + 1;
        u->query_len = strcspn(u->query, "#");
    }
}

char *sl_url_redact(const char *path)
{
    url_parts u;
    split_url(path, &u);
    size_t n = u.scheme_len + u.host_len + u.path_len;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    memcpy(out, path, u.scheme_len);
    memcpy(out + u.scheme_len, u.host, u.host_len);
    memcpy(out + u.scheme_len + u.host_len, u.path, u.path_len);
    out[n] = 0;
    return out;
}

static int is_http(const char *p)
{
    return !strncmp(p, "http://", 7) || !strncmp(p, "https://", 8);
}

/* Does query q (n bytes) carry a signature (S3/GCS presigned, Azure SAS)? */
static int has_signature(const char *q, size_t n)
{
    static const char *const keys[] = {"x-amz-signature=", "x-goog-signature=", "signature=",
                                       "sig="};
    for (size_t i = 0; i < n; i++) {
        if (i && q[i - 1] != '&')
            continue;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t kl = strlen(keys[k]);
            if (n - i >= kl && !strncasecmp(q + i, keys[k], kl))
                return 1;
        }
    }
    return 0;
}

/* Find an entry (mu held); origin entries compare case-insensitively. */
static secret *find_locked(const char *key, size_t klen, int query)
{
    for (secret *s = sec_head; s; s = s->next)
        if (s->query == query && strlen(s->key) == klen &&
            (query ? !strncmp(s->key, key, klen) : !strncasecmp(s->key, key, klen)))
            return s;
    return NULL;
}

/* Set key -> val (replacing an older value). */
static int put(const char *key, size_t klen, const char *val, size_t vlen, int query)
{
    char *v = strndup(val, vlen);
    if (!v)
        return SL_ENOMEM;
    pthread_mutex_lock(&sec_mu);
    secret *s = find_locked(key, klen, query);
    if (s) {
        free(s->val);
    } else if (!(s = calloc(1, sizeof *s)) || !(s->key = strndup(key, klen))) {
        pthread_mutex_unlock(&sec_mu);
        free(s);
        free(v);
        return SL_ENOMEM;
    } else {
        s->query = query;
        s->next = sec_head;
        sec_head = s;
        __atomic_store_n(&sec_count, sec_count + 1, __ATOMIC_RELEASE);
    }
    s->val = v;
    s->signed_ = query && has_signature(val, vlen);
    pthread_mutex_unlock(&sec_mu);
    return SL_OK;
}

int sl_path_redact(const char *path, char **out)
{
    url_parts u;
    int rc = SL_OK;

    if (!path || !out)
        return sl_fail(SL_EINVAL, "sl_path_redact: NULL argument");
    *out = NULL;
    if (!is_http(path)) {
        if (!(*out = strdup(path)))
            return sl_fail(SL_ENOMEM, "sl_path_redact: out of memory");
        return SL_OK;
    }
    split_url(path, &u);
    if (!(*out = sl_url_redact(path)))
        return sl_fail(SL_ENOMEM, "sl_path_redact: out of memory");
    if (u.user) { /* the origin as "scheme://host[:port]" */
        size_t ol = u.scheme_len + u.host_len;
        char *origin = malloc(ol + 1);
        if (!origin)
            rc = SL_ENOMEM;
        else {
            memcpy(origin, path, u.scheme_len);
            memcpy(origin + u.scheme_len, u.host, u.host_len);
            origin[ol] = 0;
            rc = put(origin, ol, u.user, u.user_len, 0);
            free(origin);
        }
    }
    if (!rc && u.query_len)
        rc = put(*out, strlen(*out), u.query, u.query_len, 1);
    if (rc) {
        free(*out);
        *out = NULL;
        return sl_fail(SL_ENOMEM, "sl_path_redact: out of memory");
    }
    return SL_OK;
}

int sl_secret_url(const char *fn, const char *path, char **url)
{
    url_parts u;
    *url = NULL;
    split_url(path, &u);
    if (!is_http(path) || u.user || u.query || !__atomic_load_n(&sec_count, __ATOMIC_ACQUIRE)) {
        if (!(*url = strdup(path)))
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        return SL_OK; /* nothing to add, or it carries its own */
    }
    int rc = SL_OK;
    pthread_mutex_lock(&sec_mu);
    const secret *user = find_locked(path, u.scheme_len + u.host_len, 0);
    const secret *q = find_locked(path, strlen(path), 1);
    if (!q) { /* beside a presigned object? (same URL up to the last '/') */
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
        for (const secret *s = sec_head; s && dl; s = s->next)
            if (s->query && s->signed_ && !strncmp(s->key, path, dl) && !strchr(s->key + dl, '/'))
                rc = SL_ENOENT;
    }
    if (!rc) {
        size_t ul = user ? strlen(user->val) + 1 : 0, ql = q ? strlen(q->val) + 1 : 0;
        size_t n = strlen(path) + ul + ql;
        if ((*url = malloc(n + 1))) {
            char *o = *url;
            memcpy(o, path, u.scheme_len);
            o += u.scheme_len;
            if (user) {
                memcpy(o, user->val, ul - 1);
                o += ul - 1;
                *o++ = '@';
            }
            strcpy(o, path + u.scheme_len);
            if (q) {
                strcat(o, "?");
                strcat(o, q->val);
            }
        }
    }
    pthread_mutex_unlock(&sec_mu);
    if (rc == SL_ENOENT)
        return sl_fail(SL_ENOENT, "%s: %s: not fetched: it lies beside a presigned URL, whose "
                       "signature covers that object alone", fn, path);
    if (!*url)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    return SL_OK;
}

void sl_secrets_forget(void)
{
    pthread_mutex_lock(&sec_mu);
    while (sec_head) {
        secret *s = sec_head;
        sec_head = s->next;
        free(s->key);
        free(s->val);
        free(s);
    }
    __atomic_store_n(&sec_count, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sec_mu);
}

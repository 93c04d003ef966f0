/*
 * records/remote_url.c - remote paths to request URLs and back to names fit
 * for a message: s3:// addressing (AWS_ENDPOINT_URL path style, or the AWS
 * virtual-host name), AWS's URI encoding, and redaction.
 *
 * DESIGN
 *   A message names the path as the user gave it, cut at the query string
 *   and without userinfo ("https://u:p@h/x?X-Amz-Signature=..." is named
 *   "https://h/x"), so neither a password nor a presigned URL's signature
 *   ever reaches a log; the request URL takes them back from the table of
 *   remote_redact.c. s3:// paths carry no credentials to begin with.
 *   Buckets: a bucket name is checked (letters, digits, '.', '-', '_'; 3
 *   to 255 bytes; a letter or digit at each end) before it goes into a
 *   URL: "s3://HOST:PORT?/key" would otherwise send signed requests to
 *   HOST:PORT. AWS itself is addressed by virtual host
 *   (BUCKET.s3.REGION.amazonaws.com) when the name is a DNS label
 *   (lowercase, no dot, at most 63 bytes), else by path
 *   (s3.REGION.amazonaws.com/BUCKET), as the AWS SDKs do: a dotted name
 *   does not match the *.s3.REGION.amazonaws.com certificate.
 *   Keys are percent-encoded as SigV4's canonical URI wants them (every byte
 *   but A-Z a-z 0-9 - _ . ~ and '/'), which libcurl then signs as sent: the
 *   URL libcurl requests and the one it signs are the same string.
 *
 * Threading: reentrant (getenv at each call).
 */
#include "records/remote_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sl_url_escape(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;

    if (!out)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = 0;
    return out;
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void sl_s3_region(char region[64])
{
    const char *r = env_nonempty("AWS_REGION");

    if (!r)
        r = env_nonempty("AWS_DEFAULT_REGION");
    snprintf(region, 64, "%s", r ? r : "us-east-1");
}

/* A region goes into a host name: letters, digits and '-' only. */
static int region_ok(const char *r)
{
    if (!*r)
        return 0;
    for (; *r; r++)
        if (!((*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') || (*r >= '0' && *r <= '9') ||
              *r == '-'))
            return 0;
    return 1;
}

static int alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* 0: not a bucket name; 1: one, but only for path-style requests; 2: a DNS
 * label too (virtual-host requests). */
static int bucket_kind(const char *b, size_t n)
{
    int dns = n <= 63;
    if (n < 3 || n > 255 || !alnum(b[0]) || !alnum(b[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!alnum(c) && c != '.' && c != '-' && c != '_')
            return 0;
        if (c == '.' || c == '_' || (c >= 'A' && c <= 'Z'))
            dns = 0;
    }
    return dns ? 2 : 1;
}

int sl_s3_parse(const char *fn, const char *path, char **base, char **key)
{
    const char *b = path + 5, *slash = strchr(b, '/');
    size_t blen = slash ? (size_t)(slash - b) : strlen(b);
    const char *ep = env_nonempty("AWS_ENDPOINT_URL_S3");
    char region[64], *bucket = NULL;
    int kind, len;

    *base = *key = NULL;
    if (strncmp(path, "s3://", 5) || blen == 0)
        return sl_fail(SL_EINVAL, "%s: %s: no bucket (s3://BUCKET/KEY)", fn, path);
    if (!(kind = bucket_kind(b, blen)))
        return sl_fail(SL_EINVAL, "%s: %s: '%.*s' is not a bucket name (3 to 255 letters, digits, "
                       "'.', '-' or '_', a letter or digit at each end)", fn, path,
                       (int)(blen > 80 ? 80 : blen), b);
    if (!ep)
        ep = env_nonempty("AWS_ENDPOINT_URL");
    if (!(bucket = strndup(b, blen)) || !(*key = strdup(slash ? slash + 1 : "")))
        goto oom;
    if (ep) {
        size_t eplen = strlen(ep);
        while (eplen && ep[eplen - 1] == '/')
            eplen--;
        len = snprintf(NULL, 0, "%.*s/%s", (int)eplen, ep, bucket);
        if (!(*base = malloc((size_t)len + 1)))
            goto oom;
        snprintf(*base, (size_t)len + 1, "%.*s/%s", (int)eplen, ep, bucket);
    } else {
        sl_s3_region(region);
        if (!region_ok(region)) {
            free(bucket);
            free(*key);
            *key = NULL;
            return sl_fail(SL_EINVAL, "%s: %s: AWS_REGION '%s' is not a region name", fn, path,
                           region);
        }
        /* virtual host for a DNS label, else path style */
        len = kind == 2 ? asprintf(base, "https://%s.s3.%s.amazonaws.com", bucket, region)
                        : asprintf(base, "https://s3.%s.amazonaws.com/%s", region, bucket);
        if (len < 0) {
            *base = NULL;
            goto oom;
        }
    }
    free(bucket);
    return SL_OK;
oom:
    free(bucket);
    free(*key);
    free(*base);
    *base = *key = NULL;
    return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
}

int sl_rurl_object(const char *fn, const char *path, sl_rurl *u)
{
    memset(u, 0, sizeof *u);
    if (!(u->name = sl_url_redact(path)))
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    if (strncmp(path, "s3://", 5)) {
        int rc = sl_secret_url(fn, path, &u->url); /* userinfo, query: remote_redact.c */
        if (rc)
            sl_rurl_fini(u);
        return rc;
    }
    char *base, *key, *ekey;
    int rc = sl_s3_parse(fn, path, &base, &key);
    if (rc) {
        sl_rurl_fini(u);
        return rc;
    }
    u->s3 = 1;
    sl_s3_region(u->region);
    ekey = sl_url_escape(key, 1);
    if (ekey) {
        size_t len = strlen(base) + strlen(ekey) + 2;
        if ((u->url = malloc(len)))
            snprintf(u->url, len, "%s/%s", base, ekey);
    }
    free(base);
    free(key);
    free(ekey);
    if (u->url)
        return SL_OK;
    sl_rurl_fini(u);
    return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
}

void sl_rurl_fini(sl_rurl *u)
{
    free(u->url);
    free(u->name);
    u->url = u->name = NULL;
}

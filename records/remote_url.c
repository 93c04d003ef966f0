/*
 * records/remote_url.c - remote paths to request URLs and back to names fit
 * for a message: s3:// addressing (AWS_ENDPOINT_URL path style, or the AWS
 * virtual-host name), AWS's URI encoding, and redaction.
 *
 * DESIGN
 *   A message names the path as the user gave it, cut at the query string
 *   and without userinfo ("https://u:p@h/x?X-Amz-Signature=..." is named
 *   "https://h/x"), so neither a password nor a presigned URL's signature
 *   ever reaches a log. s3:// paths carry no credentials to begin with.
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

char *sl_url_redact(const char *path)
{
    const char *scheme_end = strstr(path, "://");
    const char *host = scheme_end ? scheme_end + 3 : path;
    size_t hostlen = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hostlen);
    size_t pre = (size_t)(host - path);
    const char *rest;
    char *out;

    if (at) {
        hostlen -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    rest = host + hostlen;
    size_t restlen = strcspn(rest, "?#");
    if (!(out = malloc(pre + hostlen + restlen + 1)))
        return NULL;
    memcpy(out, path, pre);
    memcpy(out + pre, host, hostlen);
    memcpy(out + pre + hostlen, rest, restlen);
    out[pre + hostlen + restlen] = 0;
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

int sl_s3_parse(const char *fn, const char *path, char **base, char **key)
{
    const char *b = path + 5, *slash = strchr(b, '/');
    size_t blen = slash ? (size_t)(slash - b) : strlen(b);
    const char *ep = env_nonempty("AWS_ENDPOINT_URL_S3");
    char region[64], *bucket = NULL;
    int len;

    *base = *key = NULL;
    if (strncmp(path, "s3://", 5) || blen == 0)
        return sl_fail(SL_EINVAL, "%s: %s: no bucket (s3://BUCKET/KEY)", fn, path);
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
        len = snprintf(NULL, 0, "https://%s.s3.%s.amazonaws.com", bucket, region);
        if (!(*base = malloc((size_t)len + 1)))
            goto oom;
        snprintf(*base, (size_t)len + 1, "https://%s.s3.%s.amazonaws.com", bucket, region);
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
        if (!(u->url = strdup(path)))
            goto oom;
        return SL_OK;
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
oom:
    sl_rurl_fini(u);
    return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
}

void sl_rurl_fini(sl_rurl *u)
{
    free(u->url);
    free(u->name);
    u->url = u->name = NULL;
}

/*
 * records/remote_s3list.c - sl_bytes_list of an s3:// prefix: ListObjectsV2
 * (GET /?list-type=2&prefix=P&delimiter=/), continuation tokens followed,
 * names relative to the prefix (objects "x", common prefixes "sub/"),
 * sorted bytewise.
 *
 * DESIGN
 *   The reply is read with a small tolerant scan for the four elements that
 *   matter (<Key>, <Prefix> inside <CommonPrefixes>, <IsTruncated>,
 *   <NextContinuationToken>) and the five XML entities plus numeric
 *   references, not with libxml2: four tags of a fixed AWS schema do not
 *   justify a parser dependency (and its attack surface) in the library.
 *   Unknown elements are skipped, so MinIO's or Ceph's extra fields do no
 *   harm.
 *   libcurl 7.88 signs the query string as sent (it does not sort it), and
 *   SigV4 wants it canonical: parameters in name order, values
 *   URI-encoded (remote_url.c's sl_url_escape), so the URL is built that way.
 *   An empty listing is SL_ENOENT: S3 has no empty folders, and a
 *   mistyped prefix is the likely cause.
 *   Bounds: each page is a whole-object GET (SL_BYTES_GET_MAX); a
 *   continuation token seen before (a server in a loop would have the
 *   listing grow without end: 3.4 GB in 20 s) is refused, as are more than
 *   SL_LIST_MAX names or LIST_MAX_PAGES pages. Tokens are remembered by a
 *   64-bit hash (FNV-1a) in an open-addressing set: a repeat costs O(1) to
 *   find, and two distinct tokens colliding in a listing is a 1e-10 event.
 *
 * Threading: reentrant (sl_xfer_run on the thread's easy handle); the
 * test-only page size is a plain static set before requests start.
 */
#include "records/remote_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_list_page;

void sl_remote_set_list_page(unsigned max_keys) { g_list_page = max_keys; }

/* The text between <tag> and </tag>, searching [p, end); *after past the
 * close tag. NULL when absent. */
static const char *xml_elem(const char *p, const char *end, const char *tag, size_t *len,
                            const char **after)
{
    char open[48], close[48];
    size_t ol = (size_t)snprintf(open, sizeof open, "<%s>", tag);
    size_t cl = (size_t)snprintf(close, sizeof close, "</%s>", tag);
    const char *s = memmem(p, (size_t)(end - p), open, ol), *e;

    if (!s)
        return NULL;
    s += ol;
    if (!(e = memmem(s, (size_t)(end - s), close, cl)))
        return NULL;
    *len = (size_t)(e - s);
    *after = e + cl;
    return s;
}

/* Decode XML text (entities, character references) into a malloc'd string. */
static char *xml_text(const char *s, size_t n)
{
    char *out = malloc(n + 1), *o = out;
    const char *end = s + n;

    if (!out)
        return NULL;
    while (s < end) {
        if (*s != '&') {
            *o++ = *s++;
            continue;
        }
        const char *semi = memchr(s, ';', (size_t)(end - s));
        size_t el = semi ? (size_t)(semi - s) + 1 : 0;
        if (el == 5 && !memcmp(s, "&amp;", 5))
            *o++ = '&';
        else if (el == 4 && !memcmp(s, "&lt;", 4))
            *o++ = '<';
        else if (el == 4 && !memcmp(s, "&gt;", 4))
            *o++ = '>';
        else if (el == 6 && !memcmp(s, "&quot;", 6))
            *o++ = '"';
        else if (el == 6 && !memcmp(s, "&apos;", 6))
            *o++ = '\'';
        else if (el > 3 && s[1] == '#') {
            unsigned long c = s[2] == 'x' ? strtoul(s + 3, NULL, 16) : strtoul(s + 2, NULL, 10);
            if (c == 0 || c > 0x10ffff) {
                c = '?';
            }
            if (c < 0x80) { /* UTF-8 */
                *o++ = (char)c;
            } else if (c < 0x800) {
                *o++ = (char)(0xc0 | (c >> 6));
                *o++ = (char)(0x80 | (c & 0x3f));
            } else if (c < 0x10000) {
                *o++ = (char)(0xe0 | (c >> 12));
                *o++ = (char)(0x80 | ((c >> 6) & 0x3f));
                *o++ = (char)(0x80 | (c & 0x3f));
            } else {
                *o++ = (char)(0xf0 | (c >> 18));
                *o++ = (char)(0x80 | ((c >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((c >> 6) & 0x3f));
                *o++ = (char)(0x80 | (c & 0x3f));
            }
        } else {
            el = 1; /* a stray '&': kept */
            *o++ = '&';
        }
        s += el;
    }
    *o = 0;
    return out; /* a reference's UTF-8 (<= 4 bytes) is never longer than its text */
}

typedef struct names {
    char **v;
    size_t n, cap;
} names;

/* Add key (relative to the prefix of length plen) unless it is the prefix. */
static int names_add(names *nm, const char *s, size_t len, size_t plen)
{
    char *t = xml_text(s, len);

    if (!t)
        return SL_ENOMEM;
    if (strlen(t) <= plen) { /* the prefix's own marker object */
        free(t);
        return SL_OK;
    }
    if (nm->n == nm->cap) {
        size_t cap = nm->cap ? 2 * nm->cap : 64;
        char **nv = realloc(nm->v, cap * sizeof *nv);
        if (!nv) {
            free(t);
            return SL_ENOMEM;
        }
        nm->v = nv;
        nm->cap = cap;
    }
    memmove(t, t + plen, strlen(t + plen) + 1);
    nm->v[nm->n++] = t;
    return SL_OK;
}

/* One page: the names into nm, *token the next continuation token (malloc'd)
 * or NULL when the listing is complete. */
static int parse_page(const char *xml, size_t len, size_t plen, names *nm, char **token)
{
    const char *end = xml + len, *p, *s, *after;
    size_t l;

    *token = NULL;
    for (p = xml; (s = xml_elem(p, end, "Key", &l, &after)); p = after)
        if (names_add(nm, s, l, plen))
            return SL_ENOMEM;
    for (p = xml; (s = xml_elem(p, end, "CommonPrefixes", &l, &after)); p = after) {
        const char *in, *in_after;
        size_t il;
        if ((in = xml_elem(s, s + l, "Prefix", &il, &in_after)) && names_add(nm, in, il, plen))
            return SL_ENOMEM;
    }
    if ((s = xml_elem(xml, end, "IsTruncated", &l, &after)) && l >= 4 && !memcmp(s, "true", 4)) {
        if (!(s = xml_elem(xml, end, "NextContinuationToken", &l, &after)) || l == 0)
            return SL_ECORRUPT;
        if (!(*token = xml_text(s, l)))
            return SL_ENOMEM;
    }
    return SL_OK;
}

/* Pages one listing may take (S3 serves up to 1,000 keys a page: this is
 * ten times SL_LIST_MAX's worth of full pages). */
#define LIST_MAX_PAGES 100000u

/* The continuation tokens seen: a set of 64-bit hashes (0 marks a free
 * slot; a hash of 0 is stored as 1). */
typedef struct token_set {
    uint64_t *h;
    size_t n, cap;
} token_set;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h ? h : 1;
}

/* Add tok: 1 when it was there already, 0 when added, -1 out of memory. */
static int token_seen(token_set *t, const char *tok)
{
    uint64_t h = fnv1a(tok);
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        uint64_t *nh = calloc(cap, sizeof *nh);
        if (!nh)
            return -1;
        for (size_t i = 0; i < t->cap; i++)
            if (t->h[i])
                for (size_t j = t->h[i] & (cap - 1);; j = (j + 1) & (cap - 1))
                    if (!nh[j]) {
                        nh[j] = t->h[i];
                        break;
                    }
        free(t->h);
        t->h = nh;
        t->cap = cap;
    }
    for (size_t j = h & (t->cap - 1);; j = (j + 1) & (t->cap - 1)) {
        if (t->h[j] == h)
            return 1;
        if (!t->h[j]) {
            t->h[j] = h;
            t->n++;
            return 0;
        }
    }
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* base?continuation-token=T&delimiter=%2F&list-type=2[&max-keys=N]&prefix=P
 * (parameters in name order: SigV4's canonical query). */
static char *list_url(const char *base, const char *prefix, const char *token)
{
    char *ep = sl_url_escape(prefix, 0), *et = token ? sl_url_escape(token, 0) : NULL, *url = NULL;
    char mk[32] = "";

    if (ep && (et || !token)) {
        if (g_list_page)
            snprintf(mk, sizeof mk, "&max-keys=%u", g_list_page);
        size_t len = strlen(base) + strlen(ep) + (et ? strlen(et) : 0) + 128;
        if ((url = malloc(len)))
            snprintf(url, len, "%s/?%s%s%sdelimiter=%%2F&list-type=2%s&prefix=%s", base,
                     et ? "continuation-token=" : "", et ? et : "", et ? "&" : "", mk, ep);
    }
    free(ep);
    free(et);
    return url;
}

int sl_remote_list(const char *fn, const char *dir, const sl_io_opts *o, char ***out,
                   size_t *nout)
{
    sl_rurl u = {0};
    names nm = {0};
    token_set seen = {0};
    char *base = NULL, *key = NULL, *prefix = NULL, *token = NULL;
    int rc;
    unsigned pages = 0;

    if (strncmp(dir, "s3://", 5))
        return sl_fail(SL_ENOTSUP, "%s: %s: listing needs s3:// (a remote directory over HTTP "
                       "is read through its dataset.json)", fn, dir);
    if ((rc = sl_s3_parse(fn, dir, &base, &key)))
        return rc;
    size_t kl = strlen(key);
    if (!(prefix = malloc(kl + 2)) || !(u.name = sl_url_redact(dir))) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, dir);
        goto done;
    }
    memcpy(prefix, key, kl);
    strcpy(prefix + kl, kl && key[kl - 1] != '/' ? "/" : "");
    u.s3 = 1;
    sl_s3_region(u.region);
    do {
        sl_xfer x = {.kind = SL_XF_WHOLE, .u = &u, .o = o, .what = "ListObjectsV2"};
        char *next = NULL;
        free(u.url);
        if (!(u.url = list_url(base, prefix, token))) {
            rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, dir);
            goto done;
        }
        rc = sl_xfer_run(fn, &x);
        if (!rc) {
            rc = parse_page(x.body ? (const char *)x.body : "", x.len, strlen(prefix), &nm, &next);
            if (rc == SL_ENOMEM)
                rc = sl_fail(rc, "%s: %s: out of memory", fn, dir);
            else if (rc)
                rc = sl_fail(rc, "%s: %s: ListObjectsV2 page %u: IsTruncated without a "
                             "NextContinuationToken", fn, u.name, pages + 1);
        }
        free(x.body);
        free(token);
        token = next;
        pages++;
        if (rc || !token)
            continue;
        int again = token_seen(&seen, token);
        if (again < 0)
            rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, dir);
        else if (again)
            rc = sl_fail(SL_ECORRUPT, "%s: %s: ListObjectsV2 page %u: its NextContinuationToken "
                         "came before: the server's listing goes round in a loop", fn, u.name,
                         pages);
        else if (nm.n > SL_LIST_MAX || pages >= LIST_MAX_PAGES)
            rc = sl_fail(SL_ECORRUPT, "%s: %s: ListObjectsV2: more than %u names or %u pages: "
                         "list a narrower prefix", fn, u.name, SL_LIST_MAX, LIST_MAX_PAGES);
    } while (!rc && token);
    if (!rc && nm.n == 0)
        rc = sl_fail(SL_ENOENT, "%s: %s: no objects under this prefix", fn, u.name);
    if (!rc) {
        qsort(nm.v, nm.n, sizeof *nm.v, name_cmp);
        *out = nm.v;
        *nout = nm.n;
        nm.v = NULL;
        nm.n = 0;
    }
done:
    free(seen.h);
    sl_bytes_names_free(nm.v, nm.n);
    sl_rurl_fini(&u);
    free(token);
    free(prefix);
    free(key);
    free(base);
    return rc;
}

/*
 * records/wds.c - WebDataset shards (records/wds.h): the sample index (scan,
 * DALI's text format both ways), the sample decoder the pipeline calls for
 * every sample, and the shard writer of `sluice convert --to wds`.
 *
 * DESIGN
 *   Samples and spans. A scan groups consecutive regular members by key;
 *   sample i's span starts where sample i-1's ends (0 for the first) and
 *   ends after its last member's padded data. Spans are contiguous, so the
 *   headers that precede a member (GNU 'L', pax 'x', 'g', directories) are
 *   inside the span of the sample they precede, and a span loaded from a
 *   DALI index (which lists data offsets only) is the same span a scan
 *   gives. The end-of-archive blocks are outside every span.
 *   Index format: DALI's (wds.h has the lines and why v1.2).
 *   Decode: the span is parsed again (sl_tar_iter over memory, checksums
 *   checked), members must all share one key; zero-copy views into span.
 *   Writer: ustar members through an sl_atomic_file (tmp, fsync, rename);
 *   the index is kept in memory and written beside the tar at close.
 *
 * Threading: reentrant; a writer belongs to one thread.
 */
#include "records/wds.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "records/bytesrc.h"
#include "records/records_int.h"
#include "records/records_int.h"

#define SCAN_BUF ((size_t)1 << 20)

int sl_wds_is_shard(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 4 && !strcmp(path + n - 4, ".tar");
}

/* ------------------------------------------------------------ the key */

/* Length of the key of name: up to the first dot of its basename. */
static size_t key_len(const char *name)
{
    const char *b = strrchr(name, '/');
    b = b ? b + 1 : name;
    const char *dot = strchr(b, '.');
    return dot ? (size_t)(dot - name) : strlen(name);
}

static const char *ext_of(const char *name)
{
    size_t k = key_len(name);
    return name[k] == '.' ? name + k + 1 : name + k;
}

/* ------------------------------------------------------------ the index */

void sl_wds_index_fini(sl_wds_index *ix)
{
    if (!ix)
        return;
    for (size_t i = 0; i < ix->nmembers; i++) {
        free(ix->members[i].ext);
        free(ix->members[i].name);
    }
    free(ix->members);
    free(ix->samples);
    memset(ix, 0, sizeof *ix);
}

/* Append a member (ext and name copied; name may be NULL); it joins the
 * last sample when same is set, else starts one. span_off of a new sample
 * is the previous span's end. */
int sl_wds_index_add(sl_wds_index *ix, size_t *mcap, size_t *scap, const char *ext,
                     const char *name, uint64_t off, uint64_t size, int same)
{
    int join = same && ix->nsamples;
    uint64_t span_off = join ? ix->samples[ix->nsamples - 1].span_off
                        : ix->nsamples ? ix->samples[ix->nsamples - 1].span_end : 0;
    if (size > SL_WDS_SAMPLE_MAX || off + sl_tar_pad(size) - span_off > SL_WDS_SAMPLE_MAX)
        return sl_fail(SL_ECORRUPT, "sample %zu: member of %llu bytes @ %llu: the sample passes "
                       "the %llu MiB a sample may hold", ix->nsamples - (size_t)join,
                       (unsigned long long)size, (unsigned long long)off,
                       (unsigned long long)(SL_WDS_SAMPLE_MAX >> 20));
    if (ix->nmembers == *mcap) {
        size_t c = *mcap ? 2 * *mcap : 256;
        sl_wds_member *nm = realloc(ix->members, c * sizeof *nm);
        if (!nm)
            return sl_fail(SL_ENOMEM, "sl_wds_index: out of memory");
        ix->members = nm;
        *mcap = c;
    }
    if (!join) {
        if (ix->nsamples == *scap) {
            size_t c = *scap ? 2 * *scap : 128;
            sl_wds_sample *ns = realloc(ix->samples, c * sizeof *ns);
            if (!ns)
                return sl_fail(SL_ENOMEM, "sl_wds_index: out of memory");
            ix->samples = ns;
            *scap = c;
        }
        sl_wds_sample *s = &ix->samples[ix->nsamples];
        s->span_off = span_off;
        s->first = ix->nmembers;
        s->n = 0;
        ix->nsamples++;
    }
    sl_wds_member *m = &ix->members[ix->nmembers];
    m->ext = strdup(ext);
    m->name = name ? strdup(name) : NULL;
    if (!m->ext || (name && !m->name)) {
        free(m->ext);
        free(m->name);
        return sl_fail(SL_ENOMEM, "sl_wds_index: out of memory");
    }
    m->offset = off;
    m->size = size;
    ix->nmembers++;
    sl_wds_sample *s = &ix->samples[ix->nsamples - 1];
    s->n++;
    s->span_end = off + sl_tar_pad(size);
    return SL_OK;
}

typedef struct scan_src {
    const char *path;
    uint8_t *buf;
    uint64_t boff;
    size_t blen;
    uint64_t size;
} scan_src;

/* Buffered reads through sl_bytes_read: a scan reads one header per
 * member, so whole MiBs are fetched at a time. */
static int scan_read(void *arg, void *buf, size_t n, uint64_t off)
{
    scan_src *s = arg;
    if (off >= s->boff && off - s->boff <= s->blen && n <= s->blen - (off - s->boff)) {
        memcpy(buf, s->buf + (off - s->boff), n);
        return SL_OK;
    }
    if (n > SCAN_BUF)
        return sl_bytes_read(s->path, buf, n, off);
    size_t want = s->size - off < SCAN_BUF ? (size_t)(s->size - off) : SCAN_BUF;
    if (want < n)
        want = n;
    int rc = sl_bytes_read(s->path, s->buf, want, off);
    if (rc) {
        s->blen = 0;
        return rc;
    }
    s->boff = off;
    s->blen = want;
    memcpy(buf, s->buf, n);
    return SL_OK;
}

size_t sl_wds_key_len(const char *name) { return key_len(name); }

/* The scan of sl_wds_index_build(_prefix): keep_prefix keeps the samples
 * read before a damaged header (SL_ECORRUPT) in ix. */
static int index_scan(const char *path, sl_wds_index *ix, int keep_prefix)
{
    scan_src src = {.path = path};
    sl_tar_iter it;
    sl_tar_member *m = NULL;
    size_t mcap = 0, scap = 0;
    int rc;

    memset(ix, 0, sizeof *ix);
    if ((rc = sl_bytes_size(path, &src.size)))
        return rc;
    src.buf = malloc(SCAN_BUF);
    m = malloc(sizeof *m);
    if (!src.buf || !m) {
        rc = sl_fail(SL_ENOMEM, "sl_wds_index_build: %s: out of memory", path);
        goto out;
    }
    sl_tar_iter_init(&it, scan_read, &src, src.size, 0, path);
    char prev_key[SL_TAR_NAME_MAX] = "";
    while ((rc = sl_tar_next(&it, m)) == SL_OK) {
        size_t k = key_len(m->name);
        int same = ix->nsamples && strlen(prev_key) == k && !memcmp(prev_key, m->name, k);
        memcpy(prev_key, m->name, k);
        prev_key[k] = 0;
        if ((rc = sl_wds_index_add(ix, &mcap, &scap, ext_of(m->name), m->name, m->data_off, m->size,
                         same))) {
            if (rc == SL_ECORRUPT) /* a sample too large: name the shard and the member */
                rc = sl_fail(rc, "%s: member '%s' @ %llu: %s", path, m->name,
                             (unsigned long long)m->data_off, sl_errmsg());
            goto out;
        }
    }
    if (rc == SL_EOF)
        rc = SL_OK;
out:
    free(src.buf);
    free(m);
    if (rc && !(keep_prefix && rc == SL_ECORRUPT))
        sl_wds_index_fini(ix);
    return rc;
}

int sl_wds_index_build(const char *path, sl_wds_index *ix)
{
    return index_scan(path, ix, 0);
}

int sl_wds_index_build_prefix(const char *path, sl_wds_index *ix)
{
    return index_scan(path, ix, 1);
}


/* The next blank-separated token of [*p, end) into out (cap bytes). */
static int token(const char **p, const char *end, char *out, size_t cap)
{
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    const char *t = s;
    while (s < end && *s != ' ' && *s != '\t')
        s++;
    if (s == t || (size_t)(s - t) >= cap)
        return -1;
    memcpy(out, t, (size_t)(s - t));
    out[s - t] = 0;
    *p = s;
    return 0;
}

static int tok_u64(const char **p, const char *end, uint64_t *v)
{
    char t[32];
    const char *q = t;
    if (token(p, end, t, sizeof t) != 0 || sl_parse_u64(&q, t + strlen(t), v) != 0 || *q)
        return -1;
    return 0;
}

int sl_wds_index_parse(const char *text, size_t len, uint64_t tar_size, const char *what,
                       sl_wds_index *ix)
{
    static const char fn[] = "sl_wds_index_load";
    const char *p = text, *end = text + len;
    size_t mcap = 0, scap = 0, line = 1;
    uint64_t nsamples = 0, prev_end = 0;
    int group, rc = SL_OK;
    char *tok = malloc(SL_TAR_NAME_MAX), *ext = malloc(SL_TAR_NAME_MAX);

    memset(ix, 0, sizeof *ix);
    if (!tok || !ext) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, what);
        goto out;
    }
    if (memchr(text, '\0', len)) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: NUL byte", fn, what);
        goto out;
    }
    const char *eol = memchr(p, '\n', len);
    if (!eol)
        eol = end;
    if (eol - p > 5 && !memcmp(p, "v1.1 ", 5))
        group = 3;
    else if (eol - p > 5 && !memcmp(p, "v1.2 ", 5))
        group = 4;
    else {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: line 1: expected \"v1.1 N\" or \"v1.2 N\" (DALI's "
                     "WebDataset index), got \"%.*s\"", fn, what,
                     (int)(eol - p > 40 ? 40 : eol - p), p);
        goto out;
    }
    p += 5;
    while (p < eol && *p == ' ')
        p++;
    int bad = sl_parse_u64(&p, eol, &nsamples) != 0;
    while (!bad && p < eol && (*p == ' ' || *p == '\t' || *p == '\r')) /* text has no NUL */
        p++;
    if (bad || p != eol) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: line 1: bad sample count", fn, what);
        goto out;
    }
    p = eol < end ? eol + 1 : end;
    for (line = 2; p < end; line++) {
        eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *le = eol;
        if (le > p && le[-1] == '\r')
            le--;
        if (le == p && eol == end)
            break;
        if (ix->nsamples == nsamples) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: more samples than the %" PRIu64
                         " of line 1", fn, what, line, nsamples);
            goto out;
        }
        int same = 0;
        for (;;) {
            while (p < le && (*p == ' ' || *p == '\t'))
                p++;
            if (p == le)
                break;
            uint64_t off, size;
            if (token(&p, le, ext, SL_TAR_NAME_MAX) != 0 || tok_u64(&p, le, &off) != 0 ||
                tok_u64(&p, le, &size) != 0 ||
                (group == 4 && token(&p, le, tok, SL_TAR_NAME_MAX) != 0)) {
                rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: expected groups of \"%s\"", fn, what,
                             line, group == 4 ? "ext offset size filename" : "ext offset size");
                goto out;
            }
            if (off % SL_TAR_BLOCK || off < prev_end + SL_TAR_BLOCK || size > SL_TAR_MEMBER_MAX) {
                rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: member '%s' @ %" PRIu64 " size %" PRIu64
                             ": not a data block after the previous member (which ends at %" PRIu64 ")",
                             fn, what, line, ext, off, size, prev_end);
                goto out;
            }
            if (tar_size != UINT64_MAX && (off > tar_size || sl_tar_pad(size) > tar_size - off)) {
                rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: member '%s' @ %" PRIu64 " size %" PRIu64
                             " runs past the end of the tar (%" PRIu64 " bytes)",
                             fn, what, line, ext, off, size, tar_size);
                goto out;
            }
            if ((rc = sl_wds_index_add(ix, &mcap, &scap, ext, group == 4 ? tok : NULL, off, size, same))) {
                if (rc == SL_ECORRUPT)
                    rc = sl_fail(rc, "%s: %s: line %zu: %s", fn, what, line, sl_errmsg());
                goto out;
            }
            prev_end = off + sl_tar_pad(size);
            same = 1;
        }
        if (!same) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: empty sample", fn, what, line);
            goto out;
        }
        p = eol < end ? eol + 1 : end;
    }
    if (ix->nsamples != nsamples)
        rc = sl_fail(SL_ECORRUPT, "%s: %s: line %zu: %zu samples, line 1 says %" PRIu64, fn, what,
                     line, ix->nsamples, nsamples);
out:
    free(tok);
    free(ext);
    if (rc)
        sl_wds_index_fini(ix);
    return rc;
}

int sl_wds_index_load(const char *idx_path, uint64_t tar_size, sl_wds_index *ix)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(ix, 0, sizeof *ix);
    int rc = sl_bytes_get(idx_path, &buf, &len);
    if (rc)
        return rc;
    rc = sl_wds_index_parse((const char *)buf, len, tar_size, idx_path, ix);
    free(buf);
    return rc;
}

char *sl_wds_dali_idx_path(const char *tar)
{
    size_t n = strlen(tar);
    if (n > 4 && !strcmp(tar + n - 4, ".tar"))
        n -= 4;
    char *p = malloc(n + 5);
    if (p) {
        memcpy(p, tar, n);
        memcpy(p + n, ".idx", 5);
    }
    return p;
}

int sl_wds_index_load_beside(const char *tar, uint64_t tar_size, sl_wds_index *ix, char **which)
{
    char *ours = NULL, *dali = NULL;
    int rc;
    if (which)
        *which = NULL;
    if (asprintf(&ours, "%s.idx", tar) < 0)
        return sl_fail(SL_ENOMEM, "sl_wds_index_load: out of memory");
    rc = sl_wds_index_load(ours, tar_size, ix);
    if (rc == SL_ENOENT) { /* DALI's wds2idx names it X.idx by default */
        if (!(dali = sl_wds_dali_idx_path(tar))) {
            free(ours);
            return sl_fail(SL_ENOMEM, "sl_wds_index_load: out of memory");
        }
        sl_clear_error();
        rc = sl_wds_index_load(dali, tar_size, ix);
        if (rc == SL_ENOENT)
            rc = sl_fail(SL_ENOENT, "sl_wds_index_load: %s: no %s or %s beside it", tar, ours,
                         dali);
    }
    if (which && rc != SL_ENOENT) {
        *which = dali && rc != SL_ENOENT ? dali : ours;
        if (*which == dali)
            dali = NULL;
        else
            ours = NULL;
    }
    free(ours);
    free(dali);
    return rc;
}

int sl_wds_index_format(const sl_wds_index *ix, char **text, size_t *len)
{
    int v12 = 1;
    size_t cap = 32;
    for (size_t i = 0; i < ix->nmembers; i++) {
        const sl_wds_member *m = &ix->members[i];
        if (strpbrk(m->ext, " \t\r\n"))
            return sl_fail(SL_EINVAL, "sl_wds_index_format: extension '%s' has a blank (DALI's "
                           "index cannot hold it)", m->ext);
        if (!m->name || !m->name[0] || strpbrk(m->name, " \t\r\n"))
            v12 = 0;
        cap += strlen(m->ext) + (m->name ? strlen(m->name) : 0) + 48;
    }
    char *out = malloc(cap), *q = out;
    if (!out)
        return sl_fail(SL_ENOMEM, "sl_wds_index_format: out of memory");
    q += sprintf(q, "%s %zu\n", v12 ? "v1.2" : "v1.1", ix->nsamples);
    for (size_t s = 0; s < ix->nsamples; s++) {
        const sl_wds_sample *sm = &ix->samples[s];
        for (size_t k = 0; k < sm->n; k++) {
            const sl_wds_member *m = &ix->members[sm->first + k];
            /* DALI splits on blanks: an empty extension cannot be written as
             * nothing, "-" stands for it (DALI never asks for it) */
            q += sprintf(q, "%s%s %" PRIu64 " %" PRIu64, k ? " " : "", m->ext[0] ? m->ext : "-",
                         m->offset, m->size);
            if (v12)
                q += sprintf(q, " %s", m->name);
        }
        *q++ = '\n';
    }
    *text = out;
    *len = (size_t)(q - out);
    return SL_OK;
}

int sl_wds_index_write(const char *idx_path, const sl_wds_index *ix)
{
    char *text;
    size_t len;
    int rc = sl_wds_index_format(ix, &text, &len);
    if (rc)
        return rc;
    rc = sl_write_file_atomic(idx_path, text, len, 1, "sl_wds_index_write");
    free(text);
    return rc;
}

int sl_wds_index_entries(const sl_wds_index *ix, sl_index_entry **entries, size_t *n)
{
    sl_index_entry *e = malloc((ix->nsamples ? ix->nsamples : 1) * sizeof *e);
    if (!e)
        return sl_fail(SL_ENOMEM, "sl_wds_index_entries: out of memory");
    for (size_t i = 0; i < ix->nsamples; i++) {
        e[i].offset = ix->samples[i].span_off;
        e[i].size = ix->samples[i].span_end - ix->samples[i].span_off;
    }
    *entries = e;
    *n = ix->nsamples;
    return SL_OK;
}

/* ------------------------------------------------------------ decoding */

static int is_image_ext(const char *e)
{
    return !strcasecmp(e, "jpg") || !strcasecmp(e, "jpeg") || !strcasecmp(e, "png") ||
           !strcasecmp(e, "webp");
}

/* Decimal integer with blanks around it. */
static int parse_label(const uint8_t *p, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t x = 0;
    while (n && isspace(p[n - 1]))
        n--;
    while (i < n && isspace(p[i]))
        i++;
    if (i < n && (p[i] == '-' || p[i] == '+'))
        neg = p[i++] == '-';
    if (i == n)
        return -1;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || x > (uint64_t)INT64_MAX / 10)
            return -1;
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    if (x > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? -(int64_t)x : (int64_t)x;
    return 0;
}

static int json_label(const uint8_t *p, size_t n, const char *key, int64_t *out)
{
    cJSON *js = cJSON_ParseWithLength((const char *)p, n);
    int rc = -1;
    if (js) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(js, key);
        if (cJSON_IsNumber(v) && v->valuedouble >= -9.0e15 && v->valuedouble <= 9.0e15 &&
            v->valuedouble == (double)(int64_t)v->valuedouble) {
            *out = (int64_t)v->valuedouble;
            rc = 0;
        }
        cJSON_Delete(js);
    }
    return rc;
}

int sl_wds_sample_decode(const uint8_t *span, size_t n, const char *label_key,
                         sl_image_example *out)
{
    sl_tar_iter it;
    sl_tar_member m;
    const uint8_t *cls = NULL, *json = NULL;
    size_t cls_len = 0, json_len = 0, klen = 0;
    uint64_t first_data = 0;
    const char *key = NULL;
    char keybuf[SL_TAR_NAME_MAX];
    int rc;

    memset(out, 0, sizeof *out);
    sl_tar_iter_mem(&it, span, n, 1, "sample");
    while ((rc = sl_tar_next(&it, &m)) == SL_OK) {
        size_t k = key_len(m.name);
        if (!key) {
            memcpy(keybuf, m.name, k);
            keybuf[k] = 0;
            key = keybuf;
            klen = k;
            first_data = m.data_off;
        } else if (k != klen || memcmp(m.name, key, k)) {
            return sl_fail(SL_ECORRUPT, "sample '%s': member '%s' has another key", key, m.name);
        }
        const char *e = ext_of(m.name);
        const uint8_t *d = span + m.data_off;
        if (!out->image && is_image_ext(e)) {
            out->image = d;
            out->image_len = (size_t)m.size;
        } else if (!cls && !strcmp(e, "cls")) {
            cls = d;
            cls_len = (size_t)m.size;
        } else if (!json && !strcmp(e, "json")) {
            json = d;
            json_len = (size_t)m.size;
        }
    }
    if (rc != SL_EOF)
        return rc;
    if (!key)
        return sl_fail(SL_ECORRUPT, "sample: no member");
    if (!out->image)
        return sl_fail(SL_ECORRUPT, "sample '%s': no image member (.jpg, .jpeg, .png, .webp)", key);
    if (label_key) {
        if (!json)
            return sl_fail(SL_ECORRUPT, "sample '%s': no .json member (for --label-key %s)", key,
                           label_key);
        if (json_label(json, json_len, label_key, &out->label) != 0)
            return sl_fail(SL_ECORRUPT, "sample '%s': %s.json: field \"%s\" is not an integer",
                           key, key, label_key);
    } else {
        if (!cls)
            return sl_fail(SL_ECORRUPT, "sample '%s': no .cls member (and no --label-key)", key);
        if (parse_label(cls, cls_len, &out->label) != 0)
            return sl_fail(SL_ECORRUPT, "sample '%s': %s.cls: \"%.*s\" is not an integer label",
                           key, key, (int)(cls_len > 32 ? 32 : cls_len), (const char *)cls);
    }
    /* filename: the key, as a view into the span: it is in the headers
     * before the first member's data (its name field, 'L' data or pax path) */
    const uint8_t *hit = klen ? memmem(span, (size_t)first_data, key, klen) : NULL;
    if (hit) {
        out->filename = (const char *)hit;
        out->filename_len = klen;
    }
    return SL_OK;
}

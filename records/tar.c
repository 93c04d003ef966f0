/*
 * records/tar.c - the tar member parser and the ustar header writer of the
 * WebDataset store (records/tar.h).
 *
 * DESIGN
 *   Formats read: POSIX ustar ("ustar\0" "00": prefix + '/' + name), GNU
 *   ("ustar  \0": its prefix area holds times, not a name; 'L' members
 *   carry the next member's long name), pax ('x' headers: path= and size=
 *   apply to the next member; 'g' global headers are skipped), and v7
 *   (no magic). Numbers are octal (leading blanks, NUL or blank ended) or
 *   GNU base-256 (first byte 0x80; negative 0xff is refused). The header
 *   checksum is the sum of the 512 bytes with the chksum field as blanks,
 *   accepted as unsigned or as signed char sums, as GNU tar does (old
 *   Sun tars summed signed chars).
 *   Types: '0', '\0' and '7' are regular files and returned; '1'-'6'
 *   (links, devices, directories, FIFOs) have no data and are skipped;
 *   any other type's data is skipped (POSIX: read unknown types as files,
 *   but a WebDataset sample is made of '0' members).
 *   Strictness: the bytes come from other tools and the network, so every
 *   malformed field is SL_ECORRUPT naming the archive and the member (its
 *   name when the header has one, else the byte offset): a member past the
 *   end, a truncated header, a long name or pax record larger than the
 *   bounds below, a whole archive without its two zero blocks.
 *   Sources: POSIX.1-2017 pax "ustar Interchange Format"; GNU tar manual
 *   "Basic Tar Format" (base-256, 'L', the checksum note).
 *
 * Threading: reentrant; an iterator belongs to one thread.
 */
#include "records/tar.h"

#include "common/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAX_MAX ((uint64_t)1 << 20) /* a pax header or GNU long name larger is refused */

static int it_read(sl_tar_iter *it, void *buf, size_t n, uint64_t off)
{
    if (off > it->size || n > it->size - off)
        return sl_fail(SL_ECORRUPT, "ends before byte %llu", (unsigned long long)(off + n));
    if (it->mem) {
        memcpy(buf, it->mem + off, n);
        return SL_OK;
    }
    return it->read(it->arg, buf, n, off);
}

void sl_tar_iter_init(sl_tar_iter *it, sl_tar_read_fn read, void *arg, uint64_t size, int span,
                      const char *what)
{
    memset(it, 0, sizeof *it);
    it->read = read;
    it->arg = arg;
    it->size = size;
    it->span = span;
    it->what = what ? what : "tar";
}

void sl_tar_iter_mem(sl_tar_iter *it, const uint8_t *buf, size_t len, int span, const char *what)
{
    sl_tar_iter_init(it, NULL, NULL, len, span, what);
    it->mem = buf;
}

/* An octal or base-256 number field of len bytes: 0 ok, -1 malformed. */
static int parse_num(const uint8_t *f, size_t len, uint64_t *v)
{
    uint64_t x = 0;
    size_t i = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80) /* 0xff: negative; anything else is not GNU's */
            return -1;
        for (i = 1; i < len; i++) {
            if (x >> 56)
                return -1;
            x = (x << 8) | f[i];
        }
        *v = x;
        return 0;
    }
    while (i < len && f[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (x >> 61)
            return -1;
        x = (x << 3) | (uint64_t)(f[i] - '0');
    }
    /* ended by NUL or blanks (or the field's end) */
    for (; i < len; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    if (digits == 0)
        return -1;
    *v = x;
    return 0;
}

static int zero_block(const uint8_t *h)
{
    for (size_t i = 0; i < SL_TAR_BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* Header checksum: unsigned or signed sum with the field as blanks. */
static int checksum_ok(const uint8_t *h)
{
    uint64_t want;
    long us = 0, ss = 0;
    if (parse_num(h + 148, 8, &want) != 0)
        return 0;
    for (size_t i = 0; i < SL_TAR_BLOCK; i++) {
        unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
        us += c;
        ss += (signed char)c;
    }
    return (uint64_t)us == want || (ss >= 0 && (uint64_t)ss == want);
}

/* A name into out (NUL-terminated, cap bytes): the field up to its NUL. */
static void field_str(char *out, size_t cap, const uint8_t *f, size_t len)
{
    size_t n = strnlen((const char *)f, len);
    if (n > cap - 1)
        n = cap - 1;
    memcpy(out, f, n);
    out[n] = 0;
}

/* pax records "LEN key=value\n": path= into path (set *have_path), size=
 * into *size (set *have_size). -1 when malformed. */
static int parse_pax(const char *p, size_t n, char *path, size_t cap, int *have_path,
                     uint64_t *size, int *have_size)
{
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9') {
            len = len * 10 + (size_t)(p[j] - '0');
            if (len > n)
                return -1;
            j++;
        }
        if (j == i || j >= n || p[j] != ' ' || len < (j - i) + 3 || len > n - i ||
            p[i + len - 1] != '\n')
            return -1;
        const char *kv = p + j + 1, *end = p + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return -1;
        size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
        if (kl == 4 && !memcmp(kv, "path", 4)) {
            if (vl == 0 || vl >= cap || memchr(eq + 1, 0, vl))
                return -1;
            memcpy(path, eq + 1, vl);
            path[vl] = 0;
            *have_path = 1;
        } else if (kl == 4 && !memcmp(kv, "size", 4)) {
            uint64_t x = 0;
            if (vl == 0 || vl > 19)
                return -1;
            for (size_t k = 0; k < vl; k++) {
                char c = eq[1 + k];
                if (c < '0' || c > '9')
                    return -1;
                x = x * 10 + (uint64_t)(c - '0');
            }
            *size = x;
            *have_size = 1;
        }
        i += len;
    }
    return 0;
}

#define BAD(...) sl_fail(SL_ECORRUPT, __VA_ARGS__)

/* A compressed stream's magic at an archive's first byte ("gzip", ...),
 * or NULL: a .tar.gz named .tar is refused by name, not as a bad header. */
static const char *compressed_magic(const uint8_t *h)
{
    if (h[0] == 0x1f && h[1] == 0x8b)
        return "gzip";
    if (h[0] == 0x28 && h[1] == 0xb5 && h[2] == 0x2f && h[3] == 0xfd)
        return "zstd";
    if (h[0] == 'B' && h[1] == 'Z' && h[2] == 'h')
        return "bzip2";
    if (h[0] == 0xfd && !memcmp(h + 1, "7zXZ", 4))
        return "xz";
    return NULL;
}

int sl_tar_next(sl_tar_iter *it, sl_tar_member *m)
{
    uint8_t h[SL_TAR_BLOCK];
    char longname[SL_TAR_NAME_MAX];
    int have_long = 0, have_pax_size = 0;
    uint64_t pax_size = 0, first = it->pos;
    int rc;

    if (it->done)
        return SL_EOF;
    for (;;) {
        uint64_t at = it->pos;
        if (it->span && at == it->size) {
            if (have_long || have_pax_size)
                return BAD("%s: member @ %llu: extended header without its member", it->what,
                           (unsigned long long)first);
            it->done = 1;
            return SL_EOF;
        }
        if (at > it->size || it->size - at < SL_TAR_BLOCK)
            return BAD("%s: member @ %llu: truncated header (the %s ends at byte %llu)",
                       it->what, (unsigned long long)at, it->span ? "span" : "file",
                       (unsigned long long)it->size);
        if ((rc = it_read(it, h, SL_TAR_BLOCK, at)))
            return sl_fail(rc, "%s: member @ %llu: %s", it->what, (unsigned long long)at,
                           sl_errmsg());
        if (zero_block(h)) {
            if (it->span)
                return BAD("%s: member @ %llu: zero block inside a sample", it->what,
                           (unsigned long long)at);
            uint8_t h2[SL_TAR_BLOCK];
            if (it->size - at < 2 * SL_TAR_BLOCK)
                return BAD("%s: @ %llu: truncated: one zero block, not the two that end an "
                           "archive", it->what, (unsigned long long)at);
            if ((rc = it_read(it, h2, SL_TAR_BLOCK, at + SL_TAR_BLOCK)))
                return sl_fail(rc, "%s: @ %llu: %s", it->what,
                               (unsigned long long)(at + SL_TAR_BLOCK), sl_errmsg());
            if (!zero_block(h2))
                return BAD("%s: member @ %llu: zero block followed by data", it->what,
                           (unsigned long long)(at + SL_TAR_BLOCK));
            if (have_long || have_pax_size)
                return BAD("%s: member @ %llu: extended header without its member", it->what,
                           (unsigned long long)first);
            it->done = 1;
            it->pos = at + 2 * SL_TAR_BLOCK;
            return SL_EOF;
        }
        const char *z = at == 0 && !it->span && !checksum_ok(h) ? compressed_magic(h) : NULL;
        if (z)
            return sl_fail(SL_ENOTSUP, "%s: a %s-compressed tar: sluice reads tars in place, "
                           "seeking to each sample, which a compressed stream does not allow; "
                           "decompress it first (%s -d)", it->what, z, z);
        char hname[101];
        field_str(hname, sizeof hname, h, 100);
        const char *who = have_long ? longname : hname;
        if (!checksum_ok(h))
            return BAD("%s: member '%s' @ %llu: header checksum mismatch", it->what, who,
                       (unsigned long long)at);
        uint64_t size;
        if (parse_num(h + 124, 12, &size) != 0)
            return BAD("%s: member '%s' @ %llu: bad size field", it->what, who,
                       (unsigned long long)at);
        char type = (char)h[156];
        if (have_pax_size && (type == '0' || type == '\0' || type == '7'))
            size = pax_size;
        if (type >= '1' && type <= '6')
            size = 0; /* no data follows, whatever the field says */
        if (size > SL_TAR_MEMBER_MAX)
            return BAD("%s: member '%s' @ %llu: absurd size %llu", it->what, who,
                       (unsigned long long)at, (unsigned long long)size);
        uint64_t data = at + SL_TAR_BLOCK, padded = sl_tar_pad(size);
        if (padded > it->size - data)
            return BAD("%s: member '%s' @ %llu: %llu bytes of data run past the end (byte %llu)",
                       it->what, who, (unsigned long long)at, (unsigned long long)size,
                       (unsigned long long)it->size);
        it->pos = data + padded;
        if (type == 'L' || type == 'x') {
            /* the next member's long name (GNU) or pax attributes */
            char buf[4096];
            char *p = buf;
            if (size > PAX_MAX || (type == 'L' && size > SL_TAR_NAME_MAX))
                return BAD("%s: member @ %llu: %s header of %llu bytes (too large)", it->what,
                           (unsigned long long)at, type == 'L' ? "GNU long-name" : "pax",
                           (unsigned long long)size);
            if (size > sizeof buf && !(p = malloc((size_t)size)))
                return sl_fail(SL_ENOMEM, "%s: out of memory", it->what);
            if ((rc = it_read(it, p, (size_t)size, data))) {
                if (p != buf)
                    free(p);
                return sl_fail(rc, "%s: member @ %llu: %s", it->what, (unsigned long long)at,
                               sl_errmsg());
            }
            int ok = 1;
            if (type == 'L') {
                size_t l = strnlen(p, (size_t)size);
                if (l == 0 || l >= SL_TAR_NAME_MAX)
                    ok = 0;
                else {
                    memcpy(longname, p, l);
                    longname[l] = 0;
                    have_long = 1;
                }
            } else {
                ok = parse_pax(p, (size_t)size, longname, sizeof longname, &have_long, &pax_size,
                               &have_pax_size) == 0;
            }
            if (p != buf)
                free(p);
            if (!ok)
                return BAD("%s: member @ %llu: malformed %s header", it->what,
                           (unsigned long long)at, type == 'L' ? "GNU long-name" : "pax");
            if (!have_long && !have_pax_size)
                first = it->pos;
            continue;
        }
        if (type != '0' && type != '\0' && type != '7') {
            /* directories, links, 'g' global headers, vendor types: skipped,
             * and what they set for a next member goes with them */
            have_long = have_pax_size = 0;
            first = it->pos;
            continue;
        }
        if (have_long) {
            memcpy(m->name, longname, strlen(longname) + 1);
        } else if (!memcmp(h + 257, "ustar\0", 6) && h[345]) {
            char prefix[156];
            field_str(prefix, sizeof prefix, h + 345, 155);
            snprintf(m->name, sizeof m->name, "%s/%s", prefix, hname);
        } else {
            memcpy(m->name, hname, strlen(hname) + 1);
        }
        if (!m->name[0])
            return BAD("%s: member @ %llu: empty name", it->what, (unsigned long long)at);
        m->header_off = first;
        m->data_off = data;
        m->size = size;
        return SL_OK;
    }
}

int sl_tar_header(uint8_t h[SL_TAR_BLOCK], const char *name, uint64_t size)
{
    size_t n = strlen(name);
    if (n == 0 || n > 100)
        return sl_fail(SL_EINVAL, "sl_tar_header: '%s': a name of 1 to 100 bytes", name);
    if (size >= ((uint64_t)1 << 33))
        return sl_fail(SL_EINVAL, "sl_tar_header: '%s': %llu bytes (8 GiB at most)", name,
                       (unsigned long long)size);
    memset(h, 0, SL_TAR_BLOCK);
    memcpy(h, name, n);
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "00000000000", 11);
    h[156] = '0';
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < SL_TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum); /* 6 digits, NUL, then the blank kept */
    h[155] = ' ';
    return SL_OK;
}

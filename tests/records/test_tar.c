/*
 * tests/records/test_tar.c - records/tar.c, the tar member parser and the
 * ustar header writer of the WebDataset store (records/tar.h).
 *
 *   golden     a tar written by Python's tarfile (ustar, GNU and pax
 *              formats) reads back with its names, sizes and data offsets
 *   gnu_long   a 150-byte name through GNU tar's 'L' member
 *   pax_path   a 150-byte name through a pax 'x' header's path=; 'g' skipped
 *   dirs       directories and symlinks are skipped
 *   checksum   one flipped byte in a header is a checksum mismatch naming
 *              the member; a signed-sum checksum is accepted
 *   truncate   the archive cut at every 512-byte boundary is SL_ECORRUPT
 *   base256    a GNU base-256 size field reads; a negative one is refused
 *   octal      a non-octal digit in the size field is SL_ECORRUPT
 *   writer     sl_tar_header bytes read back by our parser and by tar(1)
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "records/tar.h"
#include "testutil.h"

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

TestSuite(wds_tar, .init = setup, .fini = teardown);

/* Run python3 code with DIR as argv[1]. */
static void py(const char *code)
{
    char *path = tu_join(dir, "gen.py"), *out = NULL;
    cr_assert_eq(tu_write_file(path, code, strlen(code)), 0);
    int rc = tu_run(&out, "python3 '%s' '%s'", path, dir);
    cr_assert_eq(rc, 0, "python3 failed: %s", out ? out : "");
    free(out);
    free(path);
}

typedef struct got {
    char names[16][SL_TAR_NAME_MAX];
    uint64_t size[16], data[16];
    int n;
} got;

/* All members of buf; returns the status that ended the walk. */
static int walk(const uint8_t *buf, size_t len, got *g)
{
    sl_tar_iter it;
    sl_tar_member m;
    int rc;
    memset(g, 0, sizeof *g);
    sl_tar_iter_mem(&it, buf, len, 0, "t.tar");
    while ((rc = sl_tar_next(&it, &m)) == SL_OK && g->n < 16) {
        snprintf(g->names[g->n], SL_TAR_NAME_MAX, "%s", m.name);
        g->size[g->n] = m.size;
        g->data[g->n] = m.data_off;
        cr_assert_eq(m.data_off % 512, 0);
        g->n++;
    }
    return rc;
}

static const char gen_formats[] =
    "import io, sys, tarfile\n"
    "d = sys.argv[1]\n"
    "for fmt, name in ((tarfile.USTAR_FORMAT, 'ustar'), (tarfile.GNU_FORMAT, 'gnu'),\n"
    "                  (tarfile.PAX_FORMAT, 'pax')):\n"
    "    with tarfile.open(d + '/' + name + '.tar', 'w', format=fmt) as t:\n"
    "        for key, data in (('a', b'x' * 700), ('b', b'12\\n'), ('sub/c', b'')):\n"
    "            i = tarfile.TarInfo(key + '.jpg'); i.size = len(data)\n"
    "            t.addfile(i, io.BytesIO(data))\n"
    "    long = 'L' * 140 + '/k.cls'\n"
    "    if fmt != tarfile.USTAR_FORMAT:\n"
    "        with tarfile.open(d + '/' + name + '_long.tar', 'w', format=fmt) as t:\n"
    "            i = tarfile.TarInfo('d'); i.type = tarfile.DIRTYPE; t.addfile(i)\n"
    "            i = tarfile.TarInfo('M' * 150 + '.jpg'); i.size = 3\n"
    "            t.addfile(i, io.BytesIO(b'abc'))\n"
    "            i = tarfile.TarInfo('ln'); i.type = tarfile.SYMTYPE; i.linkname = 'x'; t.addfile(i)\n"
    "            i = tarfile.TarInfo('M' * 150 + '.cls'); i.size = 1\n"
    "            t.addfile(i, io.BytesIO(b'7'))\n";

static uint8_t *load(const char *name, size_t *len)
{
    char *p = tu_join(dir, name);
    uint8_t *b = tu_read_file(p, len);
    cr_assert_not_null(b, "%s", p);
    free(p);
    return b;
}

Test(wds_tar, golden)
{
    py(gen_formats);
    const char *names[] = {"ustar.tar", "gnu.tar", "pax.tar"};
    for (int f = 0; f < 3; f++) {
        size_t len;
        uint8_t *b = load(names[f], &len);
        got g;
        cr_assert_eq(walk(b, len, &g), SL_EOF, "%s: %s", names[f], sl_errmsg());
        cr_assert_eq(g.n, 3, "%s", names[f]);
        cr_assert_str_eq(g.names[0], "a.jpg");
        cr_assert_str_eq(g.names[1], "b.jpg");
        cr_assert_str_eq(g.names[2], "sub/c.jpg");
        cr_assert_eq(g.size[0], 700);
        cr_assert_eq(g.size[1], 3);
        cr_assert_eq(g.size[2], 0);
        cr_assert_eq(memcmp(b + g.data[1], "12\n", 3), 0, "%s", names[f]);
        free(b);
    }
}

Test(wds_tar, gnu_long_and_pax_path)
{
    py(gen_formats);
    const char *names[] = {"gnu_long.tar", "pax_long.tar"};
    char want[200];
    snprintf(want, sizeof want, "%0150d.jpg", 0);
    memset(want, 'M', 150);
    for (int f = 0; f < 2; f++) {
        size_t len;
        uint8_t *b = load(names[f], &len);
        got g;
        cr_assert_eq(walk(b, len, &g), SL_EOF, "%s: %s", names[f], sl_errmsg());
        cr_assert_eq(g.n, 2, "%s: directory and symlink are skipped", names[f]);
        cr_assert_str_eq(g.names[0], want, "%s", names[f]);
        cr_assert_eq(memcmp(b + g.data[0], "abc", 3), 0);
        cr_assert_eq(strlen(g.names[1]), 154);
        cr_assert_eq(b[g.data[1]], '7');
        free(b);
    }
}

Test(wds_tar, pax_global_header_skipped)
{
    py("import io, sys, tarfile\n"
       "with tarfile.open(sys.argv[1] + '/g.tar', 'w', format=tarfile.PAX_FORMAT,\n"
       "                  pax_headers={'comment': 'hello'}) as t:\n"
       "    i = tarfile.TarInfo('k.cls'); i.size = 2; t.addfile(i, io.BytesIO(b'42'))\n");
    size_t len;
    uint8_t *b = load("g.tar", &len);
    got g;
    cr_assert_eq(walk(b, len, &g), SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(g.n, 1);
    cr_assert_str_eq(g.names[0], "k.cls");
    free(b);
}

/* a ustar archive of our own writer: two members */
static size_t make_ours(uint8_t *buf, size_t cap)
{
    size_t o = 0;
    cr_assert(cap >= 512 * 8);
    memset(buf, 0, cap);
    cr_assert_eq(sl_tar_header(buf, "000.jpg", 600), SL_OK);
    memset(buf + 512, 'j', 600);
    o = 512 + 1024;
    cr_assert_eq(sl_tar_header(buf + o, "000.cls", 1), SL_OK);
    buf[o + 512] = '3';
    o += 1024;
    return o + 1024; /* the two zero blocks */
}

Test(wds_tar, checksum)
{
    uint8_t buf[8192];
    size_t len = make_ours(buf, sizeof buf);
    got g;
    cr_assert_eq(walk(buf, len, &g), SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(g.n, 2);
    buf[1536 + 3] ^= 1; /* the second member's name */
    cr_assert_eq(walk(buf, len, &g), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "checksum"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "t.tar") && strstr(sl_errmsg(), "@ 1536"), "%s", sl_errmsg());
    buf[1536 + 3] ^= 1;
    /* a signed-sum checksum (a byte >= 0x80 in the header): accepted */
    uint8_t *h = buf + 1536;
    h[500] = 0xf0; /* in the unused tail of the header */
    long ss = 0;
    for (int i = 0; i < 512; i++)
        ss += (i >= 148 && i < 156) ? ' ' : (signed char)h[i];
    snprintf((char *)h + 148, 8, "%06lo", ss);
    h[155] = ' ';
    cr_assert_eq(walk(buf, len, &g), SL_EOF, "signed sum: %s", sl_errmsg());
    cr_assert_eq(g.n, 2);
}

Test(wds_tar, truncate_every_block)
{
    uint8_t buf[8192];
    size_t len = make_ours(buf, sizeof buf);
    got g;
    for (size_t cut = 0; cut < len; cut += 512) {
        int rc = walk(buf, cut, &g);
        cr_assert_eq(rc, SL_ECORRUPT, "cut at %zu: %d", cut, rc);
        cr_assert(strstr(sl_errmsg(), "t.tar"), "%s", sl_errmsg());
    }
    for (size_t cut = 1; cut < len; cut += 97)
        cr_assert_eq(walk(buf, cut, &g), SL_ECORRUPT, "cut at %zu", cut);
}

Test(wds_tar, base256_and_octal)
{
    uint8_t buf[8192];
    size_t len = make_ours(buf, sizeof buf);
    uint8_t *h = buf + 1536;
    /* size 1 in base-256 */
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[135] = 1;
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    got g;
    cr_assert_eq(walk(buf, len, &g), SL_EOF, "base-256: %s", sl_errmsg());
    cr_assert_eq(g.size[1], 1);
    /* a huge base-256 size: past the end */
    h[130] = 0x10;
    sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    cr_assert_eq(walk(buf, len, &g), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "000.cls"), "names the member: %s", sl_errmsg());
    /* negative base-256 and a non-octal digit */
    len = make_ours(buf, sizeof buf);
    h[124] = 0xff;
    cr_assert_eq(walk(buf, len, &g), SL_ECORRUPT);
    len = make_ours(buf, sizeof buf);
    h[130] = '9';
    cr_assert_eq(walk(buf, len, &g), SL_ECORRUPT);
}

Test(wds_tar, writer_reads_with_tar)
{
    uint8_t buf[8192];
    size_t len = make_ours(buf, sizeof buf);
    char *p = tu_join(dir, "ours.tar"), *out = NULL;
    cr_assert_eq(tu_write_file(p, buf, len), 0);
    cr_assert_eq(tu_run(&out, "tar tvf '%s'", p), 0, "%s", out ? out : "");
    cr_assert(strstr(out, "000.jpg") && strstr(out, "000.cls"), "%s", out);
    cr_assert(strstr(out, "1970-01-01"), "mtime 0: %s", out);
    free(out);
    free(p);
    uint8_t h[512];
    char name[102];
    memset(name, 'n', 101);
    name[101] = 0;
    cr_assert_eq(sl_tar_header(h, name, 1), SL_EINVAL, "names over 100 bytes are refused");
}

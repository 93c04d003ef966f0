/* tests/records/test_index.c - DALI text index files: round trip, strict
 * parsing with line numbers, files in DALI's own format, the line formatter. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records_int.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_tmpdir(); }

static void teardown(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
}

/* Write text to DIR/name and load it as an index. */
static int load_text(const char *text, sl_index_entry **e, size_t *n)
{
    char *path = tu_join(g_dir, "t.idx");
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0);
    int rc = sl_index_load(path, e, n);
    free(path);
    return rc;
}

TestSuite(index, .init = setup, .fini = teardown);

Test(index, write_load_round_trip)
{
    enum { N = 5000 };
    sl_index_entry *in = malloc(N * sizeof *in), *out;
    cr_assert_not_null(in);
    uint64_t s = 42, off = 0;
    for (size_t i = 0; i < N; i++) {
        in[i].offset = off;
        in[i].size = 16 + tu_rand(&s) % 5000000;
        off += in[i].size;
    }
    char *path = tu_join(g_dir, "rt.idx");
    size_t n;
    cr_assert_eq(sl_index_write(path, in, N), SL_OK, "%s", sl_errmsg());
    char *tmp = tu_join(g_dir, "rt.idx.tmp");
    struct stat st;
    cr_assert_neq(stat(tmp, &st), 0, "temp file left behind");
    cr_assert_eq(sl_index_load(path, &out, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, N);
    cr_assert(memcmp(in, out, N * sizeof *in) == 0);
    free(out);

    /* Text is exactly "offset size\n" per line. */
    size_t len;
    char *text = (char *)tu_read_file(path, &len);
    cr_assert_not_null(text);
    char first[64];
    int k = snprintf(first, sizeof first, "0 %llu\n%llu %llu\n", (unsigned long long)in[0].size,
                     (unsigned long long)in[1].offset, (unsigned long long)in[1].size);
    cr_assert_eq(memcmp(text, first, (size_t)k), 0);
    cr_assert_eq(text[len - 1], '\n');
    free(text);

    /* Empty index: empty file, zero entries. */
    cr_assert_eq(sl_index_write(path, in, 0), SL_OK);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, 0);
    cr_assert_eq(sl_index_load(path, &out, &n), SL_OK);
    cr_assert_eq(n, 0);
    free(out);
    free(tmp);
    free(path);
    free(in);
}

Test(index, dali_format_string)
{
    /* As DALI's tools/tfrecord2idx writes it for records of 100, 0 and 3
     * payload bytes; the last line may also lack its newline. */
    sl_index_entry *e;
    size_t n;
    cr_assert_eq(load_text("0 116\n116 16\n132 19\n", &e, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 3);
    cr_assert_eq(e[0].offset, 0);
    cr_assert_eq(e[0].size, 116);
    cr_assert_eq(e[1].offset, 116);
    cr_assert_eq(e[1].size, 16);
    cr_assert_eq(e[2].offset, 132);
    cr_assert_eq(e[2].size, 19);
    free(e);
    cr_assert_eq(load_text("0 116\n116 16", &e, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 2);
    free(e);
    /* A tab between the fields is accepted too. */
    cr_assert_eq(load_text("0\t20\n20 30\n", &e, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 2);
    cr_assert_eq(e[1].size, 30);
    free(e);
    /* Missing file: SL_ENOENT. */
    char *missing = tu_join(g_dir, "none.idx");
    cr_assert_eq(sl_index_load(missing, &e, &n), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), missing));
    free(missing);
}

Test(index, malformed_lines)
{
    static const struct {
        const char *text;
        int line;
    } bad[] = {
        {"garbage\n", 1},
        {"0 20\nhello world\n", 2},
        {"0 20\n-20 16\n", 2},      /* negative */
        {"0 -16\n", 1},             /* negative size */
        {"0 20\n20\n", 2},          /* missing field */
        {"0 20\n20 \n", 2},         /* missing field, trailing blank */
        {"0 20\n 20 16\n", 2},      /* leading blank */
        {"0 20\n20 16 7\n", 2},     /* extra field */
        {"0 20\n20 16x\n", 2},      /* trailing junk */
        {"0 20\n\n20 16\n", 2},     /* empty line */
        {"0 20\n20 16\r\n", 2},     /* CR */
        {"0 20\n30 16\n", 2},       /* gap: not contiguous */
        {"0 20\n10 16\n", 2},       /* overlapping */
        {"0 20\n20 16\n20 16\n", 3},/* repeated */
        {"16 16\n", 1},             /* does not start at 0 */
        {"0 20\n20 15\n", 2},       /* size < 16 */
        {"0 0\n", 1},               /* size 0 */
        {"0 99999999999999999999999\n", 1}, /* overflows u64 */
        {"0 20\n20 18446744073709551615\n", 2}, /* beyond any record */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_index_entry *e = (sl_index_entry *)1;
        size_t n = 7;
        int rc = load_text(bad[i].text, &e, &n);
        cr_assert_eq(rc, SL_ECORRUPT, "case %zu (%s): got %d", i, bad[i].text, rc);
        char want[32];
        snprintf(want, sizeof want, "line %d:", bad[i].line);
        cr_assert(strstr(sl_errmsg(), want) && strstr(sl_errmsg(), "t.idx"),
                  "case %zu: \"%s\" lacks \"%s\"", i, sl_errmsg(), want);
        cr_assert_null(e);
        cr_assert_eq(n, 0);
    }
}

Test(index, build_matches_shard_and_write)
{
    char *shard = tu_join(g_dir, "s.tfrecord");
    char *idx = tu_join(g_dir, "s.tfrecord.idx");
    sl_tfrecord_writer *w;
    uint8_t buf[1000];
    memset(buf, 0x42, sizeof buf);
    cr_assert_eq(sl_tfrecord_writer_open(shard, SL_TFW_NOSYNC, &w), SL_OK);
    for (size_t i = 0; i < 300; i++)
        cr_assert_eq(sl_tfrecord_writer_write(w, buf, (i * 37) % 1000), SL_OK);
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK);

    sl_index_entry *e, *back;
    size_t n, nb;
    cr_assert_eq(sl_index_build(shard, &e, &n), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(n, 300);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(e[i].offset, off);
        cr_assert_eq(e[i].size, 16 + (i * 37) % 1000);
        off += e[i].size;
    }
    cr_assert_eq(sl_index_write(idx, e, n), SL_OK);
    cr_assert_eq(sl_index_load(idx, &back, &nb), SL_OK);
    cr_assert_eq(nb, n);
    cr_assert(memcmp(e, back, n * sizeof *e) == 0);
    free(back);
    free(e);

    /* A corrupt shard cannot be indexed: the reader's message comes back. */
    size_t len;
    uint8_t *bytes = tu_read_file(shard, &len);
    cr_assert_not_null(bytes);
    bytes[off / 2] ^= 0x10;
    cr_assert_eq(tu_write_file(shard, bytes, len), 0);
    cr_assert_eq(sl_index_build(shard, &e, &n), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), shard) && strstr(sl_errmsg(), "record "), "%s", sl_errmsg());
    free(bytes);
    free(idx);
    free(shard);
}

/* The line tfrecord_writer.c and sl_index_write emit (records_int.h). */
Test(index, put_index_line_golden)
{
    static const struct {
        uint64_t off, size;
        const char *want;
    } cases[] = {
        {0, 0, "0 0\n"},
        {0, 16, "0 16\n"},
        {9, 10, "9 10\n"},
        {116, 1234567, "116 1234567\n"},
        {4294967296ull, 4294967295ull, "4294967296 4294967295\n"},
        {10000000000000000000ull, 9999999999999999999ull,
         "10000000000000000000 9999999999999999999\n"},
        {UINT64_MAX, UINT64_MAX, "18446744073709551615 18446744073709551615\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[SL_INDEX_LINE_MAX + 8];
        memset(buf, '#', sizeof buf);
        size_t n = sl_put_index_line(buf, cases[i].off, cases[i].size);
        cr_assert_eq(n, strlen(cases[i].want), "case %zu: length %zu", i, n);
        cr_assert_leq(n, SL_INDEX_LINE_MAX);
        cr_assert(memcmp(buf, cases[i].want, n) == 0, "case %zu: \"%.*s\"", i, (int)n, buf);
        cr_assert_eq(buf[n], '#', "case %zu: wrote past the line", i);
    }
    /* Agrees with printf over a spread of values. */
    uint64_t s = 99;
    for (int i = 0; i < 10000; i++) {
        uint64_t a = tu_rand(&s) >> (tu_rand(&s) % 64), b = tu_rand(&s) >> (tu_rand(&s) % 64);
        char got[SL_INDEX_LINE_MAX], want[64];
        size_t n = sl_put_index_line(got, a, b);
        int k = snprintf(want, sizeof want, "%llu %llu\n", (unsigned long long)a,
                         (unsigned long long)b);
        cr_assert(n == (size_t)k && memcmp(got, want, n) == 0, "%llu %llu", (unsigned long long)a,
                  (unsigned long long)b);
    }
}

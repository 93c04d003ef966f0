/*
 * tests/records/test_wds.c - records/wds.c and wds_writer.c: the sample
 * index, DALI's index format, the sample decoder and the shard writer.
 *
 *   foreign      a WebDataset tar made by Python's tarfile (GNU format, a
 *                long name, a directory) scans into samples by key with
 *                spans that decode to the right image and label
 *   round_trip   build -> write -> load gives the same samples and spans;
 *                the text is DALI's v1.2
 *   dali_v11     a v1.1 index (no filenames) as DALI's wds2idx writes it
 *   bad_index    header, counts, offsets, garbage: SL_ECORRUPT with line
 *   decode       .cls with blanks, --label-key from .json, case-insensitive
 *                image extension; missing image / label, non-integer label
 *                are SL_ECORRUPT naming the key
 *   writer       sl_wds_writer output: tar(1) lists it, its index loads and
 *                matches a scan
 *   prefix       sl_wds_index_build_prefix of a tar cut or damaged after
 *                sample 1: samples 0 and 1 kept, SL_ECORRUPT naming shard,
 *                member and offset; build refuses the same tar whole
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records/wds.h"
#include "testutil.h"

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

TestSuite(wds, .init = setup, .fini = teardown);

static void py(const char *code)
{
    char *path = tu_join(dir, "gen.py"), *out = NULL;
    cr_assert_eq(tu_write_file(path, code, strlen(code)), 0);
    int rc = tu_run(&out, "python3 '%s' '%s'", path, dir);
    cr_assert_eq(rc, 0, "python3 failed: %s", out ? out : "");
    free(out);
    free(path);
}

static const char gen_foreign[] =
    "import io, sys, tarfile\n"
    "with tarfile.open(sys.argv[1] + '/f.tar', 'w', format=tarfile.GNU_FORMAT) as t:\n"
    "    i = tarfile.TarInfo('dir'); i.type = tarfile.DIRTYPE; t.addfile(i)\n"
    "    def add(name, data):\n"
    "        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\n"
    "    add('s/k1.JPG', b'\\xff\\xd8one'); add('s/k1.cls', b' 3\\n')\n"
    "    add('s/k1.json', b'{\"y\": 11}')\n"
    "    add('s/k2.json', b'{\"y\": 12}'); add('s/k2.png', b'png2'); add('s/k2.cls', b'4')\n"
    "    long = 'x' * 120\n"
    "    add(long + '.cls', b'5'); add(long + '.seg.png', b'not'); add(long + '.jpeg', b'img3')\n";

static uint8_t *slurp_span(const char *path, const sl_wds_sample *s)
{
    size_t len;
    uint8_t *b = tu_read_file(path, &len);
    cr_assert_not_null(b);
    cr_assert(s->span_end <= len);
    uint8_t *span = malloc((size_t)(s->span_end - s->span_off) + 1);
    memcpy(span, b + s->span_off, (size_t)(s->span_end - s->span_off));
    free(b);
    return span;
}

Test(wds, foreign)
{
    py(gen_foreign);
    char *tar = tu_join(dir, "f.tar");
    sl_wds_index ix;
    cr_assert_eq(sl_wds_index_build(tar, &ix), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ix.nsamples, 3);
    cr_assert_eq(ix.samples[0].n, 3);
    cr_assert_str_eq(ix.members[0].ext, "JPG");
    cr_assert_eq(ix.samples[2].n, 3);
    cr_assert_str_eq(ix.members[ix.samples[2].first + 1].ext, "seg.png");
    cr_assert_eq(ix.samples[0].span_off, 0);
    for (size_t i = 1; i < 3; i++)
        cr_assert_eq(ix.samples[i].span_off, ix.samples[i - 1].span_end, "contiguous spans");
    const char *img[] = {"\xff\xd8one", "png2", "img3"};
    const int64_t cls[] = {3, 4, 5}, y[] = {11, 12, -1};
    const char *keys[] = {"s/k1", "s/k2", NULL};
    for (size_t i = 0; i < 3; i++) {
        uint8_t *span = slurp_span(tar, &ix.samples[i]);
        size_t n = (size_t)(ix.samples[i].span_end - ix.samples[i].span_off);
        sl_image_example ex;
        cr_assert_eq(sl_wds_sample_decode(span, n, NULL, &ex), SL_OK, "%zu: %s", i, sl_errmsg());
        cr_assert_eq(ex.image_len, strlen(img[i]));
        cr_assert_eq(memcmp(ex.image, img[i], ex.image_len), 0, "sample %zu image", i);
        cr_assert_eq(ex.label, cls[i]);
        if (keys[i]) {
            cr_assert_eq(ex.filename_len, strlen(keys[i]));
            cr_assert_eq(memcmp(ex.filename, keys[i], ex.filename_len), 0);
        }
        int rc = sl_wds_sample_decode(span, n, "y", &ex);
        if (y[i] >= 0) {
            cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
            cr_assert_eq(ex.label, y[i]);
        } else {
            cr_assert_eq(rc, SL_ECORRUPT);
            cr_assert(strstr(sl_errmsg(), "no .json"), "%s", sl_errmsg());
        }
        free(span);
    }
    sl_wds_index_fini(&ix);
    free(tar);
}

Test(wds, round_trip)
{
    py(gen_foreign);
    char *tar = tu_join(dir, "f.tar"), *idx = tu_join(dir, "f.tar.idx");
    sl_wds_index a, b;
    cr_assert_eq(sl_wds_index_build(tar, &a), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_wds_index_write(idx, &a), SL_OK, "%s", sl_errmsg());
    size_t len;
    char *text = (char *)tu_read_file(idx, &len);
    cr_assert(len > 5 && !memcmp(text, "v1.2 3\n", 7), "%.*s", (int)len, text);
    cr_assert(strstr(text, "JPG 1024 5 s/k1.JPG cls 2048 3 s/k1.cls"), "%s", text);
    free(text);
    cr_assert_eq(sl_wds_index_load(idx, UINT64_MAX, &b), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(a.nsamples, b.nsamples);
    cr_assert_eq(a.nmembers, b.nmembers);
    for (size_t i = 0; i < a.nsamples; i++) {
        cr_assert_eq(a.samples[i].span_off, b.samples[i].span_off);
        cr_assert_eq(a.samples[i].span_end, b.samples[i].span_end);
    }
    for (size_t i = 0; i < a.nmembers; i++) {
        cr_assert_str_eq(a.members[i].ext, b.members[i].ext);
        cr_assert_str_eq(a.members[i].name, b.members[i].name);
        cr_assert_eq(a.members[i].offset, b.members[i].offset);
        cr_assert_eq(a.members[i].size, b.members[i].size);
    }
    sl_index_entry *e;
    size_t n;
    cr_assert_eq(sl_wds_index_entries(&b, &e, &n), SL_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(e[1].offset, b.samples[0].span_end);
    free(e);
    sl_wds_index_fini(&a);
    sl_wds_index_fini(&b);
    free(tar);
    free(idx);
}

Test(wds, dali_v11)
{
    const char t[] = "v1.1 2\njpg 512 100 cls 1536 1\njpg 2560 3 cls 3584 2\n";
    sl_wds_index ix;
    cr_assert_eq(sl_wds_index_parse(t, strlen(t), 5000, "x.idx", &ix), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ix.nsamples, 2);
    cr_assert_null(ix.members[0].name);
    cr_assert_eq(ix.samples[0].span_end, 2048);
    cr_assert_eq(ix.samples[1].span_off, 2048);
    cr_assert_eq(ix.samples[1].span_end, 4096);
    sl_wds_index_fini(&ix);
}

Test(wds, bad_index)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "line 1"},
        {"v2.0 1\njpg 512 1\n", "line 1"},
        {"v1.1 x\n", "line 1"},
        {"v1.1 2\njpg 512 1\n", "samples, line 1 says 2"},
        {"v1.1 1\njpg 512 1\njpg 2048 1\n", "line 3"},
        {"v1.1 1\njpg 500 1\n", "line 2"},
        {"v1.1 2\njpg 1024 1\njpg 1024 1\n", "line 3"},
        {"v1.1 1\njpg 512 99999999\n", "past the end"},
        {"v1.1 1\njpg 512\n", "line 2"},
        {"v1.2 1\njpg 512 1\n", "line 2"},
        {"v1.1 1\njpg 512 1 cls\n", "line 2"},
        {"v1.1 1\n\n", "line 2"},
        {"v1.1 1\njpg 512 -1\n", "line 2"},
        {"v1.1 1\njpg 512 18446744073709551616\n", "line 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_wds_index ix;
        int rc = sl_wds_index_parse(cases[i].text, strlen(cases[i].text), 4096, "bad.idx", &ix);
        cr_assert_eq(rc, SL_ECORRUPT, "case %zu (%s): %d", i, cases[i].text, rc);
        cr_assert(strstr(sl_errmsg(), "bad.idx"), "%s", sl_errmsg());
        cr_assert(strstr(sl_errmsg(), cases[i].want), "case %zu: want '%s' in: %s", i,
                  cases[i].want, sl_errmsg());
    }
    sl_wds_index ix;
    cr_assert_eq(sl_wds_index_parse("v1.1 0\0", 7, 4096, "nul.idx", &ix), SL_ECORRUPT);
}

/* One sample span of members name[i] with data[i]. */
static size_t span_of(uint8_t *buf, size_t cap, const char *const *names,
                      const char *const *data, int n)
{
    size_t o = 0;
    memset(buf, 0, cap);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(data[i]);
        cr_assert(o + 512 + sl_tar_pad(l) <= cap);
        cr_assert_eq(sl_tar_header(buf + o, names[i], l), SL_OK);
        memcpy(buf + o + 512, data[i], l);
        o += 512 + sl_tar_pad(l);
    }
    return o;
}

Test(wds, decode_errors)
{
    uint8_t buf[8192];
    sl_image_example ex;
    const char *n1[] = {"abc.cls", "abc.json"}, *d1[] = {"1", "{}"};
    size_t n = span_of(buf, sizeof buf, n1, d1, 2);
    cr_assert_eq(sl_wds_sample_decode(buf, n, NULL, &ex), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "sample 'abc'") && strstr(sl_errmsg(), "no image"), "%s",
              sl_errmsg());
    const char *n2[] = {"abc.webp", "abc.json"}, *d2[] = {"W", "{\"l\": 2.5}"};
    n = span_of(buf, sizeof buf, n2, d2, 2);
    cr_assert_eq(sl_wds_sample_decode(buf, n, NULL, &ex), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "sample 'abc': no .cls member (and no --label-key)"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_wds_sample_decode(buf, n, "l", &ex), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "not an integer"), "%s", sl_errmsg());
    const char *n3[] = {"abc.webp", "abc.cls"}, *d3[] = {"W", "1x"};
    n = span_of(buf, sizeof buf, n3, d3, 2);
    cr_assert_eq(sl_wds_sample_decode(buf, n, NULL, &ex), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "abc.cls") && strstr(sl_errmsg(), "not an integer"), "%s",
              sl_errmsg());
    const char *n4[] = {"abc.webp", "abd.cls"}, *d4[] = {"W", "1"};
    n = span_of(buf, sizeof buf, n4, d4, 2);
    cr_assert_eq(sl_wds_sample_decode(buf, n, NULL, &ex), SL_ECORRUPT, "two keys in one span");
    const char *n5[] = {"abc.webp", "abc.cls"}, *d5[] = {"W", "\t-7 \n"};
    n = span_of(buf, sizeof buf, n5, d5, 2);
    cr_assert_eq(sl_wds_sample_decode(buf, n, NULL, &ex), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ex.label, -7);
    buf[5] ^= 1; /* header checksum */
    cr_assert_eq(sl_wds_sample_decode(buf, n, NULL, &ex), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "checksum"), "%s", sl_errmsg());
    for (size_t cut = 0; cut < n; cut += 256)
        cr_assert_eq(sl_wds_sample_decode(buf, cut, NULL, &ex), SL_ECORRUPT, "cut %zu", cut);
}

Test(wds, writer)
{
    sl_example_builder b;
    sl_example_builder_init(&b);
    char *tar = tu_join(dir, "train-00000-of-00001.tar"), *out = NULL;
    sl_wds_writer *w;
    cr_assert_eq(sl_wds_writer_open(tar, SL_TFW_NOSYNC, &w), SL_OK, "%s", sl_errmsg());
    for (int i = 0; i < 3; i++) {
        static const uint8_t jpg[] = {0xff, 0xd8, 0xff, 0xe0, 1, 2, 3};
        sl_image_example ex = {.image = jpg, .image_len = sizeof jpg, .label = 10 + i,
                               .filename = "f.jpg", .filename_len = 5, .text = "cat",
                               .text_len = 3};
        const uint8_t *rec;
        size_t len;
        char key[16];
        cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
        cr_assert_eq(sl_example_finish(&b, &rec, &len), SL_OK);
        snprintf(key, sizeof key, "%04d", i);
        cr_assert_eq(sl_wds_writer_write_example(w, key, rec, len), SL_OK, "%s", sl_errmsg());
    }
    cr_assert_eq(sl_wds_writer_count(w), 3);
    cr_assert_eq(sl_wds_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);
    cr_assert_eq(tu_run(&out, "tar tf '%s'", tar), 0);
    cr_assert(strstr(out, "0002.jpg\n0002.cls\n0002.json"), "%s", out);
    free(out);
    char *idx = tu_join(dir, "train-00000-of-00001.tar.idx");
    sl_wds_index a, c;
    cr_assert_eq(sl_wds_index_load(idx, UINT64_MAX, &a), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_wds_index_build(tar, &c), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(a.nsamples, 3);
    cr_assert_eq(c.nsamples, 3);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(a.samples[i].span_end, c.samples[i].span_end);
    uint8_t *span = slurp_span(tar, &c.samples[2]);
    sl_image_example ex;
    cr_assert_eq(sl_wds_sample_decode(span, (size_t)(c.samples[2].span_end - c.samples[2].span_off),
                                      "label", &ex), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ex.label, 12);
    free(span);
    sl_wds_index_fini(&a);
    sl_wds_index_fini(&c);
    free(idx);
    free(tar);
}

Test(wds, prefix)
{
    py(gen_foreign);
    char *tar = tu_join(dir, "f.tar"), want[256];
    sl_wds_index whole, ix;
    cr_assert_eq(sl_wds_index_build(tar, &whole), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(whole.nsamples, 3);
    /* sample 2's first header: its GNU long-name header starts at sample 1's end */
    uint64_t at = whole.samples[1].span_end;
    size_t len;
    uint8_t *b = tu_read_file(tar, &len);
    cr_assert_not_null(b);
    b[at + 148] ^= 0x01; /* its checksum field */
    cr_assert_eq(tu_write_file(tar, b, len), 0);
    cr_assert_eq(sl_wds_index_build(tar, &ix), SL_ECORRUPT);
    cr_assert_eq(ix.nsamples, 0);
    cr_assert_eq(sl_wds_index_build_prefix(tar, &ix), SL_ECORRUPT);
    snprintf(want, sizeof want, "%s: member '././@LongLink' @ %llu: header checksum mismatch", tar,
             (unsigned long long)at);
    cr_assert(strstr(sl_errmsg(), want), "%s", sl_errmsg());
    cr_assert_eq(ix.nsamples, 2);
    cr_assert_eq(ix.samples[1].span_end, at);
    cr_assert_eq(ix.samples[1].n, 3);
    sl_wds_index_fini(&ix);
    /* cut in the middle of sample 1's last member's data */
    b[at + 148] ^= 0x01;
    const sl_wds_member *last = &whole.members[whole.samples[1].first + 2];
    cr_assert_eq(tu_write_file(tar, b, (size_t)last->offset + 1), 0);
    cr_assert_eq(sl_wds_index_build_prefix(tar, &ix), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), tar) && strstr(sl_errmsg(), "s/k2.cls") &&
                  strstr(sl_errmsg(), "run past the end"), "%s", sl_errmsg());
    cr_assert_eq(ix.nsamples, 2);
    cr_assert_eq(ix.samples[1].n, 2); /* what of sample 1 was whole */
    sl_wds_index_fini(&ix);
    /* a missing file is not SL_ECORRUPT: nothing kept */
    cr_assert_neq(unlink(tar), -1);
    cr_assert_eq(sl_wds_index_build_prefix(tar, &ix), SL_ENOENT, "%s", sl_errmsg());
    cr_assert_eq(ix.nsamples, 0);
    sl_wds_index_fini(&whole);
    free(b);
    free(tar);
}

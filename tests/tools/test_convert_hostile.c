/* tests/tools/test_convert_hostile.c - `sluice convert` on hostile images
 * (issue 16): --max-pixels refuses a large image from its header, so the
 * process's peak memory (wait4's ru_maxrss of the real binary) stays that of
 * a small image, and an image at the bound converts within the documented
 * 12 bytes a pixel; --strict exits 1 naming the file. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"

/* Run sluice convert --from folder IN --out OUT --name train with extra
 * arguments (NULL-terminated); stdout+stderr into *log (malloc'd). Returns
 * the exit status (-1 when killed); *maxrss_kib the child's peak RSS. */
static int convert(const char *in, const char *out, long *maxrss_kib, char **log, ...)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = tu_sluice();
    argv[n++] = "convert";
    argv[n++] = "--from";
    argv[n++] = "folder";
    argv[n++] = in;
    argv[n++] = "--out";
    argv[n++] = out;
    argv[n++] = "--name";
    argv[n++] = "train";
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--no-fsync";
    argv[n++] = "--quiet";
    va_list ap;
    va_start(ap, log);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 31)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char tmpl[] = "/tmp/sluice-log-XXXXXX";
    int fd = mkstemp(tmpl);
    cr_assert_geq(fd, 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fd);
    int st;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &st, 0, &ru), pid);
    *maxrss_kib = ru.ru_maxrss;
    size_t len;
    *log = (char *)tu_read_file(tmpl, &len);
    cr_assert_not_null(*log);
    *log = realloc(*log, len + 1);
    (*log)[len] = 0;
    unlink(tmpl);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *tree_with(const char *root, const char *sub, const char *name, const uint8_t *d,
                       size_t len)
{
    char *in = tu_join(root, sub), *cls = tu_join(in, "c"), *p = tu_join(cls, name);
    cr_assert_eq(mkdir(in, 0755), 0);
    cr_assert_eq(mkdir(cls, 0755), 0);
    cr_assert_eq(tu_write_file(p, d, len), 0);
    free(cls);
    free(p);
    return in;
}

typedef struct convert_job {
    const char *in, *out;
    uint64_t max_pixels;
} convert_job;

/* In a child (tu_in_child): the convert, and {the peak RSS growth (KiB)
 * from the child's start, the records written}, -1s when it failed. */
static void convert_in_child(void *arg, int fd)
{
    const convert_job *j = arg;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    sl_convert_config c = SL_CONVERT_CONFIG_INIT;
    c.input = j->in;
    c.out_dir = j->out;
    c.name = "train";
    c.threads = 1;
    c.fsync = 0;
    c.max_pixels = j->max_pixels;
    sl_convert_result res;
    long v[2] = {-1, -1};
    if (sl_convert_run(&c, &res) == SL_OK) {
        getrusage(RUSAGE_SELF, &r1);
        v[0] = r1.ru_maxrss - r0.ru_maxrss;
        v[1] = (long)res.records;
    }
    if (write(fd, v, sizeof v) != (ssize_t)sizeof v)
        _exit(2);
}

/* Peak RSS growth (KiB) of the library's convert of in into out with
 * max_pixels, in a forked child, measured from the child's own start: the
 * CLI's ru_maxrss would be its start-up peak in a CUDA build (the CUDA
 * libraries' initializers, ~220 MiB), larger than what an image adds.
 * *records gets the records written. */
static long convert_rss(const char *in, const char *out, uint64_t max_pixels, uint64_t *records)
{
    convert_job j = {in, out, max_pixels};
    size_t n;
    long v[2];
    char *got = tu_in_child(convert_in_child, &j, &n);
    cr_assert_eq(n, sizeof v, "the child wrote %zu bytes", n);
    memcpy(v, got, sizeof v);
    free(got);
    cr_assert_geq(v[0], 0, "the convert of %s failed", in);
    *records = (uint64_t)v[1];
    return v[0];
}

/* A 2048 x 2048 (2^22 px) 16-bit PNG: decoded to RGB (3 B/px) and
 * re-encoded; with --max-pixels 2^21 it is listed and never decoded. */
Test(convert_hostile, max_pixels_bounds_peak_memory)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    cr_skip_test("RSS under a sanitizer counts its shadow memory");
#endif
    char *root = tu_tmpdir();
    size_t slen, blen;
    uint8_t *small = hi_png(64, 48, 0, &slen), *big = hi_png(2048, 2048, 0, &blen);
    char *in_small = tree_with(root, "small", "s.png", small, slen);
    char *in_big = tree_with(root, "big", "b.png", big, blen);
    char *o1 = tu_join(root, "o1"), *o2 = tu_join(root, "o2"), *o3 = tu_join(root, "o3");
    long base, refused, decoded;
    char *log;
    cr_assert_eq(convert(in_small, o1, &base, &log, NULL), 0, "%s", log);
    free(log);
    cr_assert_eq(convert(in_big, o2, &refused, &log, "--max-pixels", "2097152", NULL), 0, "%s",
                 log);
    cr_assert(strstr(log, "skipped: ") && strstr(log, "b.png") &&
              strstr(log, "2048x2048 = 4194304 pixels: more than --max-pixels 2097152"), "%s", log);
    free(log);
    cr_assert_eq(convert(in_big, o3, &decoded, &log, "--max-pixels", "4194304", NULL), 0, "%s",
                 log);
    cr_assert(strstr(log, "0 skipped"), "%s", log);
    free(log);
    /* the memory, from the library in a child (convert_rss) */
    char *o4 = tu_join(root, "o4"), *o5 = tu_join(root, "o5"), *o6 = tu_join(root, "o6");
    uint64_t n_small, n_refused, n_decoded;
    base = convert_rss(in_small, o4, 0, &n_small);
    refused = convert_rss(in_big, o5, (uint64_t)1 << 21, &n_refused);
    decoded = convert_rss(in_big, o6, (uint64_t)1 << 22, &n_decoded);
    cr_assert(n_small == 1 && n_refused == 0 && n_decoded == 1, "%llu %llu %llu",
              (unsigned long long)n_small, (unsigned long long)n_refused,
              (unsigned long long)n_decoded);
    free(o4);
    free(o5);
    free(o6);
    long px = (long)1 << 22, bound_kib = 12 * px / 1024;
    cr_log_info("convert peak RSS growth: small image %ld KiB, 2^22 px refused %ld KiB, "
                "decoded %ld KiB", base, refused, decoded);
    /* refused: the PNG file (blen) is read, nothing of its pixels' size */
    cr_assert_lt(refused - base, (long)(blen / 1024) + 4096, "refused: %ld KiB over %ld", refused,
                 base);
    cr_assert_lt(decoded - base, bound_kib, "decoded: %ld KiB over %ld (bound %ld KiB)", decoded,
                 base, bound_kib);
    cr_assert_gt(decoded - refused, 3 * px / 1024 * 3 / 4, "the measure sees the decode");
    free(small);
    free(big);
    tu_rmrf(root);
    free(root);
    free(in_small);
    free(in_big);
    free(o1);
    free(o2);
    free(o3);
}

Test(convert_hostile, strict_exits_1_naming_the_file)
{
    char *root = tu_tmpdir();
    size_t len;
    uint8_t *j = hi_jpeg_rgb(64, 48, 1, &len);
    hi_patch_size(j, len, 65500, 65500);
    char *in = tree_with(root, "in", "huge.jpg", j, len), *out = tu_join(root, "out");
    long rss;
    char *log;
    cr_assert_eq(convert(in, out, &rss, &log, "--strict", NULL), 1, "%s", log);
    cr_assert(strstr(log, "huge.jpg") && strstr(log, "65500x65500"), "%s", log);
    free(log);
    cr_assert_eq(convert(in, out, &rss, &log, "--max-pixels", "0", NULL), 2, "%s", log);
    cr_assert(strstr(log, "--max-pixels"), "%s", log);
    free(log);
    cr_assert_eq(convert(in, out, &rss, &log, "--help", NULL), 0);
    cr_assert(strstr(log, "--max-pixels N") && strstr(log, "67108864"), "%s", log);
    free(log);
    free(j);
    tu_rmrf(root);
    free(root);
    free(in);
    free(out);
}

/* Abbreviated JPEGs and fill bytes (issue 26), `sluice convert --from
 * folder`: a JPEG without DHT is stored (the standard tables apply, and a
 * decoder starting afresh reads it alone); one without DQT, one without any
 * table (Pillow's streamtype=2) and one with FF FF 00 in its scan are
 * skipped, each named with the reason, checked before anything is written;
 * and what was written verifies. */
Test(convert_hostile, abbreviated_and_fill_byte_jpegs)
{
    char *root = tu_tmpdir(), *in = tu_join(root, "in"), *cls = tu_join(in, "c");
    char *out = tu_join(root, "out");
    cr_assert_eq(mkdir(in, 0755), 0);
    cr_assert_eq(mkdir(cls, 0755), 0);
    uint8_t *px = hi_rgb(160, 120, 3);
    for (size_t i = 0; i < (size_t)160 * 120 * 3; i++) /* noise: stuffed FF 00 in the scan */
        px[i] = (uint8_t)(px[i] ^ (i * 2654435761u >> 11 & 127));
    size_t len, n[5];
    uint8_t *j = hi_jpeg_q(px, 160, 120, TJPF_RGB, TJSAMP_420, 90, &len), *f[5];
    f[0] = hi_strip(j, len, 0xC4, &n[0]);
    f[1] = hi_strip(j, len, 0xDB, &n[1]);
    f[2] = hi_strip(f[1], n[1], 0xC4, &n[2]);
    f[3] = hi_fill_ff00(j, len, len / 2, &n[3]);
    cr_assert_not_null(f[3]);
    f[4] = j;
    n[4] = len;
    static const char *const name[5] = {"no-dht.jpg", "no-dqt.jpg", "no-tables.jpg",
                                        "fill.jpg", "good.jpg"};
    for (int k = 0; k < 5; k++) {
        char *p = tu_join(cls, name[k]);
        cr_assert_eq(tu_write_file(p, f[k], n[k]), 0);
        free(p);
    }
    long rss;
    char *log;
    cr_assert_eq(convert(in, out, &rss, &log, NULL), 0, "%s", log);
    cr_assert(strstr(log, "3 skipped"), "%s", log);
    const char *why[3] = {"quantization table", "quantization table", "fill bytes"};
    for (int k = 1; k <= 3; k++) {
        const char *at = strstr(log, name[k]);
        cr_assert(at, "%s not named: %s", name[k], log);
        const char *eol = strchr(at, '\n');
        char line[1024];
        snprintf(line, sizeof line, "%.*s", eol ? (int)(eol - at) : (int)strlen(at), at);
        cr_assert(strstr(line, why[k - 1]), "%s: %s", name[k], line);
    }
    free(log);
    cr_assert_eq(tu_run(&log, "%s verify %s", tu_sluice(), out), 0, "%s", log);
    cr_assert(strstr(log, "2 records") || strstr(log, "records: 2"), "%s", log);
    free(log);
    for (int k = 0; k < 5; k++)
        free(f[k]);
    free(px);
    tu_rmrf(root);
    free(root);
    free(in);
    free(cls);
    free(out);
}

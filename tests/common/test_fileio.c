/* tests/common/test_fileio.c - common/fileio.c: atomic replace in one call
 * and streamed (content, no temp left, failures clean up, the old file kept
 * until commit), write_all, the directory fsyncs, mkdir -p and path building. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/status.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_tmpdir(); }

static void teardown(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
}

TestSuite(fileio, .init = setup, .fini = teardown);

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Assert path holds exactly want[0..len). */
static void assert_content(const char *path, const void *want, size_t len)
{
    size_t got_len = 0;
    uint8_t *got = tu_read_file(path, &got_len);
    cr_assert_not_null(got, "%s: unreadable", path);
    cr_assert_eq(got_len, len, "%s: %zu bytes, want %zu", path, got_len, len);
    cr_assert(len == 0 || memcmp(got, want, len) == 0, "%s: content differs", path);
    free(got);
}

Test(fileio, write_file_atomic_writes_and_replaces)
{
    char *path = tu_join(g_dir, "a.txt"), *tmp = tu_join(g_dir, "a.txt.tmp");
    static const char one[] = "first version\n", two[] = "second\n";

    for (int sync = 0; sync < 2; sync++) {
        cr_assert_eq(sl_write_file_atomic(path, one, strlen(one), sync, "t"), SL_OK, "%s",
                     sl_errmsg());
        assert_content(path, one, strlen(one));
        cr_assert(!exists(tmp), "temp file left behind (sync %d)", sync);
        /* Replacing a longer file with a shorter one leaves no tail. */
        cr_assert_eq(sl_write_file_atomic(path, two, strlen(two), sync, "t"), SL_OK, "%s",
                     sl_errmsg());
        assert_content(path, two, strlen(two));
        cr_assert(!exists(tmp));
    }
    /* Empty content: an empty file. */
    cr_assert_eq(sl_write_file_atomic(path, "", 0, 1, "t"), SL_OK, "%s", sl_errmsg());
    assert_content(path, "", 0);

    /* A stale temp file from a killed run is overwritten, not appended to. */
    cr_assert_eq(tu_write_file(tmp, "garbage garbage garbage", 23), 0);
    cr_assert_eq(sl_write_file_atomic(path, two, strlen(two), 0, "t"), SL_OK, "%s", sl_errmsg());
    assert_content(path, two, strlen(two));
    cr_assert(!exists(tmp));

    /* Large content goes through the write loop in full. */
    size_t big = (size_t)3 << 20;
    uint8_t *data = malloc(big);
    cr_assert_not_null(data);
    uint64_t s = 7;
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)tu_rand(&s);
    cr_assert_eq(sl_write_file_atomic(path, data, big, 1, "t"), SL_OK, "%s", sl_errmsg());
    assert_content(path, data, big);
    free(data);
    free(tmp);
    free(path);
}

Test(fileio, write_file_atomic_rename_failure_cleans_up)
{
    /* The target is a directory: the temp file is written, the rename over
     * the directory fails (EISDIR), and the temp file must go. */
    char *path = tu_join(g_dir, "target"), *tmp = tu_join(g_dir, "target.tmp");
    cr_assert_eq(mkdir(path, 0755), 0);
    int rc = sl_write_file_atomic(path, "data", 4, 1, "my_fn");
    cr_assert_eq(rc, SL_EIO, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "my_fn: "), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), tmp), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "rename"), "%s", sl_errmsg());
    cr_assert(!exists(tmp), "temp file left behind after a failed rename");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert(S_ISDIR(st.st_mode), "the target was touched");
    free(tmp);
    free(path);
}

Test(fileio, write_file_atomic_create_failure)
{
    /* No such directory: nothing can be created, SL_EIO names the temp file. */
    char *path = tu_join(g_dir, "missing/a.txt");
    int rc = sl_write_file_atomic(path, "x", 1, 0, "my_fn");
    cr_assert_eq(rc, SL_EIO);
    cr_assert(strstr(sl_errmsg(), "my_fn: ") && strstr(sl_errmsg(), "missing/a.txt.tmp: create: "),
              "%s", sl_errmsg());
    free(path);
}

Test(fileio, atomic_file_streams_and_keeps_the_old_file_until_commit)
{
    char *path = tu_join(g_dir, "s.bin"), *tmp = tu_join(g_dir, "s.bin.tmp");
    cr_assert_eq(tu_write_file(path, "old", 3), 0);

    /* Pieces land in the temp file; path keeps the old content until commit. */
    sl_atomic_file af;
    cr_assert_eq(sl_atomic_open(&af, path, "t"), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_atomic_write(&af, "new ", 4), SL_OK);
    cr_assert_eq(sl_atomic_write(&af, "content", 7), SL_OK);
    cr_assert(exists(tmp));
    assert_content(path, "old", 3);
    /* Direct writes to the descriptor count as well (pipeline/trace.c). */
    cr_assert_eq(write(af.fd, "!", 1), 1);
    cr_assert_eq(sl_atomic_commit(&af, 1), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(af.fd, -1);
    cr_assert_null(af.tmp);
    assert_content(path, "new content!", 12);
    cr_assert(!exists(tmp), "temp file left behind");

    /* Abort: the temp file goes, path is untouched. */
    cr_assert_eq(sl_atomic_open(&af, path, "t"), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_atomic_write(&af, "half", 4), SL_OK);
    sl_atomic_abort(&af);
    cr_assert(!exists(tmp), "temp file left after abort");
    assert_content(path, "new content!", 12);
    sl_atomic_abort(&af); /* twice: a no-op */

    /* A failed open leaves nothing to free; abort after it is a no-op. */
    char *bad = tu_join(g_dir, "missing/x");
    cr_assert_eq(sl_atomic_open(&af, bad, "ofn"), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "ofn: ") && strstr(sl_errmsg(), "missing/x.tmp: create: "), "%s",
              sl_errmsg());
    cr_assert_eq(af.fd, -1);
    cr_assert_null(af.tmp);
    sl_atomic_abort(&af);

    /* A failed write names the temp file; abort then removes it. */
    cr_assert_eq(sl_atomic_open(&af, path, "wfn"), SL_OK);
    int fd = af.fd;
    af.fd = open(tmp, O_RDONLY); /* writes fail with EBADF */
    cr_assert_eq(sl_atomic_write(&af, "x", 1), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "wfn: ") && strstr(sl_errmsg(), "s.bin.tmp: write: "), "%s",
              sl_errmsg());
    close(fd);
    sl_atomic_abort(&af);
    cr_assert(!exists(tmp));
    assert_content(path, "new content!", 12);
    free(bad);
    free(tmp);
    free(path);
}

Test(fileio, mkdir_p_makes_parents_and_refuses_files)
{
    char *deep = tu_join(g_dir, "a/b/c/"), *file = tu_join(g_dir, "f");
    struct stat st;
    cr_assert_eq(sl_mkdir_p(deep, "t"), SL_OK, "%s", sl_errmsg());
    cr_assert(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_eq(sl_mkdir_p(deep, "t"), SL_OK, "existing directories are fine: %s", sl_errmsg());
    cr_assert_eq(tu_write_file(file, "1", 1), 0);
    cr_assert_eq(sl_mkdir_p(file, "mfn"), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "mfn: ") && strstr(sl_errmsg(), "not a directory"), "%s",
              sl_errmsg());
    char *under = tu_join(file, "x");
    cr_assert_eq(sl_mkdir_p(under, "mfn"), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "mkdir: "), "%s", sl_errmsg());
    cr_assert_eq(sl_mkdir_p("", "mfn"), SL_EINVAL);
    free(under);
    free(file);
    free(deep);
}

Test(fileio, write_all_and_its_errors)
{
    char *path = tu_join(g_dir, "w.bin");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sl_write_all(fd, "hello, ", 7, "t", path), SL_OK);
    cr_assert_eq(sl_write_all(fd, "world", 5, "t", path), SL_OK);
    cr_assert_eq(sl_write_all(fd, NULL, 0, "t", path), SL_OK);
    close(fd);
    assert_content(path, "hello, world", 12);

    /* A read-only descriptor: SL_EIO "fn: path: write: strerror". */
    fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sl_write_all(fd, "x", 1, "wfn", path), SL_EIO);
    char want[1200];
    snprintf(want, sizeof want, "wfn: %s: write: ", path);
    cr_assert(strncmp(sl_errmsg(), want, strlen(want)) == 0, "%s", sl_errmsg());
    close(fd);
    free(path);
}

Test(fileio, fsync_dir_and_parent)
{
    char *file = tu_join(g_dir, "f");
    cr_assert_eq(tu_write_file(file, "1", 1), 0);
    cr_assert_eq(sl_fsync_dir(g_dir, "t"), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_fsync_parent(file, "t"), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_fsync_parent("/", "t"), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_fsync_parent("relative-name", "t"), SL_OK, "%s", sl_errmsg()); /* "." */

    /* A directory that is not there, or a file where a directory should be. */
    char *gone = tu_join(g_dir, "gone");
    cr_assert_eq(sl_fsync_dir(gone, "dfn"), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "dfn: ") && strstr(sl_errmsg(), gone) &&
                  strstr(sl_errmsg(), "open directory"),
              "%s", sl_errmsg());
    cr_assert_eq(sl_fsync_dir(file, "dfn"), SL_EIO);
    char *under_file = tu_join(file, "x");
    cr_assert_eq(sl_fsync_parent(under_file, "dfn"), SL_EIO);
    free(under_file);
    free(gone);
    free(file);
}

Test(fileio, str_cat_and_path_join)
{
    static const struct {
        const char *a, *b, *join;
    } cases[] = {
        {"dir", "f.jpg", "dir/f.jpg"},
        {"dir/", "f.jpg", "dir/f.jpg"},
        {"/", "f", "/f"},
        {"", "f", "f"},
        {"a/b", "", "a/b/"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *j = sl_path_join(cases[i].a, cases[i].b);
        cr_assert_not_null(j);
        cr_assert_str_eq(j, cases[i].join, "case %zu", i);
        free(j);
    }
    char *c = sl_str_cat("shard.tfrecord", ".idx.tmp");
    cr_assert_str_eq(c, "shard.tfrecord.idx.tmp");
    free(c);
    c = sl_str_cat("", "");
    cr_assert_str_eq(c, "");
    free(c);
}

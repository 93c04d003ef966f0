/* tests/testutil.c - see testutil.h. */
#include "testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Under ASan: LeakSanitizer's report at a test process's exit must fail the
 * test. Criterion's child has sent its result by then and its exit code is
 * not read (23, LeakSanitizer's, went unnoticed), but a child killed by a
 * signal is reported ("crashed during its setup or teardown") and fails
 * the run: abort_on_error turns the report into SIGABRT. ASAN_OPTIONS in
 * the environment still overrides it (tools/dev's ASan step sets the same). */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "abort_on_error=1";
}

/* Criterion's own main, but the runner process (which runs none of our
 * code: each test runs in a child that BoxFort starts by exec and points at
 * the test, not at this main) leaves without LeakSanitizer's exit check.
 * The runner leaks by itself: BoxFort's timeout queue (bxfi_push_timeout's
 * 48-byte requests, for every test with .timeout) loses entries when
 * bxfi_cancel_timeout unlinks two from its list at once, which jobs=2
 * does; seen as "Direct leak of 96 byte(s) in 2 object(s) ... calloc,
 * libcriterion.so.3+0x1a332" (Criterion 2.4.1, Debian 12), now and then.
 * A suppression cannot name it (Debian's libcriterion has no symbols, and
 * `leak:libcriterion.so` would match every test's leak, whose stack runs
 * through criterion_internal_test_main). The children's check stays. */
int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    fflush(NULL);
    _exit(result);
}
#endif

char *tu_tmpdir(void)
{
    char tmpl[] = "/tmp/sluice-test-XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl), "mkdtemp failed");
    return strdup(tmpl);
}

void tu_rmrf(const char *path)
{
    if (!path || strncmp(path, "/tmp/", 5))
        return; /* never remove anything outside /tmp */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "tu_rmrf: could not remove %s\n", path);
}

char *tu_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    cr_assert_not_null(s);
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

uint8_t *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* One byte more, NUL: callers parse text files with the string functions
     * (tg_read_losses' strchr ran past an unterminated buffer and wrote a
     * NUL into the next heap chunk when it met a newline there). */
    uint8_t *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n > 0 ? n : 0] = 0;
        *len = n > 0 ? (size_t)n : 0;
    }
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fwrite(data, 1, len, f) == len ? 0 : -1;
    if (fclose(f))
        rc = -1;
    return rc;
}

int tu_run(char **out, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

char *tu_in_child(void (*fn)(void *arg, int fd), void *arg, size_t *len)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        fn(arg, fds[1]);
        _exit(close(fds[1]) == 0 ? 0 : 2);
    }
    close(fds[1]);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    ssize_t got;
    while ((got = read(fds[0], buf + n, cap - n - 1)) > 0) {
        n += (size_t)got;
        if (cap - n < 1024) {
            buf = realloc(buf, cap *= 2);
            cr_assert_not_null(buf);
        }
    }
    buf[n] = '\0';
    close(fds[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child exited with status %#x", st);
    *len = n;
    return buf;
}

uint64_t tu_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

const char *tu_sluice(void) { return SLUICE_BIN; }

const char *tu_fmnist_dir(void)
{
    static const char *dir = "/usr/share/datasets/fashion-mnist";
    struct stat st;
    return stat(dir, &st) == 0 ? dir : NULL;
}

int64_t tu_first_far(const float *got, const float *want, int64_t n, double atol, double rtol)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            return i;
    }
    return -1;
}

void tu_assert_close(const float *got, const float *want, int64_t n, double atol, double rtol,
                     const char *what)
{
    int64_t i = tu_first_far(got, want, n, atol, rtol);
    if (i >= 0)
        cr_assert_fail("%s[%lld]: got %.9g want %.9g (diff %.3g)", what, (long long)i, got[i],
                       want[i], fabs((double)got[i] - want[i]));
}

uint8_t *tu_random_file(const char *dir, const char *name, size_t size, uint64_t seed)
{
    uint8_t *b = malloc(size ? size : 1);
    cr_assert_not_null(b);
    for (size_t i = 0; i < size; i++)
        b[i] = (uint8_t)(tu_rand(&seed) >> 24);
    char *p = tu_join(dir, name);
    cr_assert_eq(tu_write_file(p, b, size), 0, "%s", p);
    free(p);
    return b;
}

char *tu_events_file(const char *logdir)
{
    char *path = NULL;
    cr_assert_eq(tu_run(&path, "ls %s/events.out.tfevents.* | head -n1", logdir), 0,
                 "no event file in %s", logdir);
    path[strcspn(path, "\n")] = 0;
    cr_assert(path[0], "no event file in %s", logdir);
    return path;
}

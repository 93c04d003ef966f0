/* tests/pipeline/test_mapguard.c - the SIGBUS guard (pipeline/mapguard.c)
 * and a shard that changes under a running pipeline: truncated (its mapped
 * pages vanish: SIGBUS without the guard), rewritten in place, read with
 * pread. Each case runs in a forked child, so that a regression to SIGBUS
 * fails the test (the child's status says how it died) instead of ending
 * the test runner. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/graph_int.h"
#include "pipeline/mapguard.h"
#include "pipeline_testdata.h"
#include "testutil.h"

/* ------------------------------------------------------------ fork helper */
/* Run fn(arg) in a child; its stdout (a message) comes back in msg. Returns
 * the raw wait status. */
static int in_child(int (*fn)(void *), void *arg, char *msg, size_t n)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        int rc = fn(arg);
        fflush(stdout);
        _exit(rc);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fds[0], msg + got, n - 1 - got)) > 0)
        got += (size_t)r;
    msg[got] = 0;
    close(fds[0]);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return st;
}

static void assert_exit0(int st, const char *msg)
{
    cr_assert(!WIFSIGNALED(st), "child killed by signal %d (%s); output: %s",
              WIFSIGNALED(st) ? WTERMSIG(st) : 0, WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "",
              msg);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit %d: %s", WEXITSTATUS(st), msg);
}

/* A 4-page file, mapped, then cut to one page: pages 1..3 fault. */
typedef struct cut_map {
    char *dir, *path;
    uint8_t *base;
    size_t len, page;
} cut_map;

static void cut_map_make(cut_map *c)
{
    c->dir = tu_tmpdir();
    c->path = tu_join(c->dir, "f");
    c->page = (size_t)sysconf(_SC_PAGESIZE);
    c->len = 4 * c->page;
    uint8_t *b = malloc(c->len);
    memset(b, 0xAB, c->len);
    cr_assert_eq(tu_write_file(c->path, b, c->len), 0);
    free(b);
    int fd = open(c->path, O_RDONLY);
    cr_assert_geq(fd, 0);
    c->base = mmap(NULL, c->len, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(c->base, MAP_FAILED);
    close(fd);
    cr_assert_eq(c->base[3 * c->page], 0xAB);
    cr_assert_eq(truncate(c->path, (off_t)c->page), 0);
}

static void cut_map_free(cut_map *c)
{
    munmap(c->base, c->len);
    tu_rmrf(c->dir);
    free(c->path);
    free(c->dir);
}

/* Sum of [from, len) under a guard over [gbase, gbase + glen): 0 when the
 * read completed, 1 after a caught fault (*fault set). */
static int guarded_sum(const uint8_t *p, size_t from, size_t len, const uint8_t *gbase,
                       size_t glen, unsigned *sum, const void **fault)
{
    sl_mapguard g;
    if (sigsetjmp(g.jb, 1) == 0) {
        sl_mapguard_enter(&g, gbase, glen);
        unsigned s = 0;
        for (size_t i = from; i < len; i++)
            s += ((const volatile uint8_t *)p)[i];
        *sum = s;
        sl_mapguard_leave(&g);
        return 0;
    }
    *fault = g.fault;
    return 1;
}

Test(pipeline_mapguard, fault_inside_the_guard_jumps_back)
{
    cut_map c;
    cut_map_make(&c);
    cr_assert_eq(sl_mapguard_install(), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_mapguard_install(), SL_OK, "idempotent");
    unsigned sum = 0;
    const void *fault = NULL;
    cr_assert_eq(guarded_sum(c.base, 0, c.page, c.base, c.len, &sum, &fault), 0);
    cr_assert_eq(sum, 0xABu * c.page, "the page still in the file reads fine");
    /* Twice: the guard is usable again after a jump (SIGBUS not left
     * blocked, the thread's guard popped). */
    for (int k = 0; k < 2; k++) {
        fault = NULL;
        cr_assert_eq(guarded_sum(c.base, c.page / 2, c.len, c.base, c.len, &sum, &fault), 1,
                     "the read past the new end faults");
        cr_assert_eq(fault, c.base + c.page, "fault address %p, page 1 at %p", fault,
                     (void *)(c.base + c.page));
    }
    cut_map_free(&c);
}

static void on_bus_prev(int sig)
{
    (void)sig;
    _exit(42);
}

/* A fault outside every guard goes to the handler installed before. */
static int child_chain(void *arg)
{
    int guarded_elsewhere = *(int *)arg;
    signal(SIGBUS, on_bus_prev);
    cut_map c;
    cut_map_make(&c);
    if (sl_mapguard_install() != SL_OK)
        return 3;
    unsigned sum = 0;
    const void *fault = NULL;
    if (guarded_elsewhere) /* guard over page 0 only; the read hits page 2 */
        guarded_sum(c.base + 2 * c.page, 0, 16, c.base, c.page, &sum, &fault);
    else
        sum = ((const volatile uint8_t *)c.base)[2 * c.page];
    printf("no fault (sum %u)", sum);
    return 4;
}

/* Without a previous handler: the default action, death by SIGBUS. */
static int child_default(void *arg)
{
    (void)arg;
    signal(SIGBUS, SIG_DFL);
    cut_map c;
    cut_map_make(&c);
    if (sl_mapguard_install() != SL_OK)
        return 3;
    printf("sum %u", ((const volatile uint8_t *)c.base)[2 * c.page]);
    return 4;
}

Test(pipeline_mapguard, fault_outside_is_chained)
{
    char msg[256];
    for (int elsewhere = 0; elsewhere < 2; elsewhere++) {
        int st = in_child(child_chain, &elsewhere, msg, sizeof msg);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 42,
                  "guard elsewhere %d: the previous handler runs (status %#x, %s)", elsewhere, st,
                  msg);
    }
    int st = in_child(child_default, NULL, msg, sizeof msg);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "default action kept (status %#x, %s)",
              st, msg);
}

/* -------------------------------------------------- a changing shard */

typedef enum { CUT_TRUNCATE, CUT_REWRITE } cut_kind;
typedef struct change_case {
    pl_dataset *d;
    cut_kind kind;
    int use_pread;
} change_case;

/* Run a pipeline over d, change every shard after the first batch, go on
 * reading: print what ended the run. Exit 0 when it ended with an error
 * (the parent checks the message), 5 when it ran to the end. */
static int child_change(void *arg)
{
    change_case *cc = arg;
    if (cc->use_pread)
        setenv("SLUICE_READ", "pread", 1);
    sl_pipeline_config c;
    pl_config(&c, cc->d);
    c.shuffle = SL_SHUFFLE_NONE;
    c.readers = 1;
    c.workers = 2;
    c.batch = 4;
    c.prefetch = 2;
    c.read_window_bytes = 4096; /* a unit or two ahead: most of the files still unread */
    sl_pipeline *p;
    if (sl_pipeline_create(&c, &p) != SL_OK) {
        printf("create: %s", sl_errmsg());
        return 6;
    }
    sl_batch *b;
    int rc = sl_pipeline_next(p, &b);
    if (rc) {
        printf("first batch: %s", sl_errmsg());
        return 7;
    }
    sl_pipeline_release(p, b);
    struct timespec ts = {0, 20 * 1000 * 1000}; /* a new mtime even on coarse clocks */
    nanosleep(&ts, NULL);
    for (unsigned s = 0; s < cc->d->shards; s++) {
        if (cc->kind == CUT_TRUNCATE) {
            if (truncate(cc->d->shard_path[s], 64) != 0)
                return 8;
        } else { /* same size, other bytes: every record's CRC breaks */
            size_t len;
            uint8_t *bytes = tu_read_file(cc->d->shard_path[s], &len);
            for (size_t i = 0; i < len; i++)
                bytes[i] ^= 0x5A;
            int fd = open(cc->d->shard_path[s], O_WRONLY);
            if (!bytes || fd < 0 || pwrite(fd, bytes, len, 0) != (ssize_t)len)
                return 8;
            close(fd);
            free(bytes);
        }
    }
    uint64_t batches = 1;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        sl_pipeline_release(p, b);
        batches++;
    }
    printf("rc %d after %llu batches: %s", rc, (unsigned long long)batches, sl_errmsg());
    sl_pipeline_destroy(p);
    return rc == SL_EOF ? 5 : 0;
}

static void check_change(cut_kind kind, int use_pread)
{
    pl_dataset d;
    pl_make_dataset(&d, 240, 2, 0, NULL);
    change_case cc = {.d = &d, .kind = kind, .use_pread = use_pread};
    char msg[2048];
    int st = in_child(child_change, &cc, msg, sizeof msg);
    assert_exit0(st, msg);
    cr_assert(strstr(msg, "rc 4 "), "SL_EIO: %s", msg); /* SL_EIO == 4 */
    if (getenv("SLUICE_TEST_VERBOSE"))
        fprintf(stderr, "%s\n", msg);
    cr_assert(strstr(msg, "file changed while the pipeline read it"), "%s", msg);
    cr_assert(strstr(msg, "train-0000"), "names the shard: %s", msg);
    cr_assert(strstr(msg, kind == CUT_TRUNCATE ? "truncated from" : "rewritten since it was opened"), "%s", msg);
    pl_dataset_free(&d);
}

Test(pipeline_mapguard, truncated_shard_is_an_error_naming_the_file)
{
    check_change(CUT_TRUNCATE, 0);
}

Test(pipeline_mapguard, truncated_shard_read_by_pread)
{
    check_change(CUT_TRUNCATE, 1);
}

Test(pipeline_mapguard, rewritten_shard_is_an_error_not_bad_records)
{
    check_change(CUT_REWRITE, 0);
}

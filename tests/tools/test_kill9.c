/* tests/tools/test_kill9.c - kill -9 anywhere (issue 16): the real sluice
 * binary is SIGKILLed at seeded random moments of a convert (40 kills), of
 * a train that writes a checkpoint every step (30) and of `sluice index`
 * (30), sometimes again during the --resume that follows. After every kill:
 * each file under a final name is whole, i.e. byte-identical to the same
 * file of an uninterrupted run (shards, index files, dataset.json,
 * checkpoints); temporary names may hold anything. Then --resume (or a
 * rerun of index) must finish with every file byte-identical to the
 * uninterrupted run's: the shards' bytes, the checkpoints' weights.
 *
 * The delay before each kill is uniform over the uninterrupted run's
 * duration (measured here), so the kills land in process start, input
 * reading, the workers, the writes, fsyncs and renames alike. A run that
 * ends before its kill does not count. KILL9_SEED overrides the seed.
 *
 * The polite stops too: Ctrl-C (SIGINT) and SIGTERM during a convert end it
 * with 128 + the signal, naming --resume, with no temp file left and no
 * dataset.json; during a train they save the step reached; the resume then
 * gives the uninterrupted run's bytes. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile_images.h"
#include "records/records.h"
#include "testutil.h"

#define MAX_ARGS 48

static uint64_t seed_state(uint64_t dflt)
{
    const char *s = getenv("KILL9_SEED");
    return s ? strtoull(s, NULL, 0) : dflt;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* argv of `sluice` + the words of fmt (split at spaces). */
typedef struct cmdline {
    char buf[4096];
    char *argv[MAX_ARGS];
} cmdline;

static void cmd_make(cmdline *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cmd_make(cmdline *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->buf, sizeof c->buf, fmt, ap);
    va_end(ap);
    int n = 0;
    c->argv[n++] = (char *)tu_sluice();
    for (char *t = strtok(c->buf, " "); t && n < MAX_ARGS - 1; t = strtok(NULL, " "))
        c->argv[n++] = t;
    c->argv[n] = NULL;
}

/* The last run's output (stdout + stderr), for failure messages. */
static char log_path[] = "/tmp/sluice-kill9-XXXXXX";
static int log_made;

static const char *last_log(void)
{
    static char buf[2048];
    FILE *f = fopen(log_path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    return buf;
}

static pid_t spawn(const cmdline *c)
{
    if (!log_made) {
        int fd = mkstemp(log_path);
        cr_assert_geq(fd, 0);
        close(fd);
        log_made = 1;
    }
    /* emptied here, not only in the child: a caller polling the log must
     * not read the previous run's lines before the child has started */
    int fd = open(log_path, O_WRONLY | O_TRUNC | O_CREAT, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int log = open(log_path, O_WRONLY | O_TRUNC | O_CREAT, 0600); /* unlinked after a series */
        dup2(log, 1);
        dup2(log, 2);
        execv(c->argv[0], c->argv);
        _exit(127);
    }
    return pid;
}

/* Run to the end; the exit status (-1 when killed by a signal). */
static int run(const cmdline *c, int64_t *ns)
{
    int64_t t0 = now_ns();
    pid_t pid = spawn(c);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (ns)
        *ns = now_ns() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Start c, SIGKILL it after delay_ns: 1 when it was killed, 0 when it had
 * ended on its own (*status then its exit status). */
static int run_and_kill(const cmdline *c, int64_t delay_ns, int *status)
{
    pid_t pid = spawn(c);
    struct timespec d = {(time_t)(delay_ns / 1000000000), (long)(delay_ns % 1000000000)};
    nanosleep(&d, NULL);
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        return 0;
    }
    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st)) { /* it ended between the check and the kill */
        *status = WEXITSTATUS(st);
        return 0;
    }
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    return 1;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *x = tu_read_file(a, &la), *y = tu_read_file(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* Every file of dir whose name is final (not *.tmp, not skip(name)) must be
 * byte-identical to ref/name: never a partial file under a final name.
 * Returns how many final files there are. */
static int check_final_names(const char *dir, const char *ref, int (*skip)(const char *),
                             const char *when)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* killed before it made the directory */
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, "..")))
            continue;
        if (ends_with(e->d_name, ".tmp") || (skip && skip(e->d_name)))
            continue;
        char *a = tu_join(dir, e->d_name), *b = tu_join(ref, e->d_name);
        struct stat st;
        cr_assert_eq(stat(b, &st), 0, "%s: %s under a final name, unknown to the uninterrupted run",
                     when, e->d_name);
        cr_assert(same_file(a, b), "%s: %s is not whole (differs from the uninterrupted run's)",
                  when, e->d_name);
        free(a);
        free(b);
        n++;
    }
    closedir(d);
    return n;
}

/* After the resume: exactly ref's files (every one identical), no temp. */
static void check_complete(const char *dir, const char *ref, int (*skip)(const char *),
                           const char *when)
{
    int n = check_final_names(dir, ref, skip, when);
    DIR *d = opendir(ref);
    cr_assert_not_null(d);
    int m = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        m += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !(skip && skip(e->d_name));
    closedir(d);
    cr_assert_eq(n, m, "%s: %d of the uninterrupted run's %d files", when, n, m);
    d = opendir(dir);
    while ((e = readdir(d)) != NULL)
        cr_assert(!ends_with(e->d_name, ".tmp"), "%s: %s left behind", when, e->d_name);
    closedir(d);
}

/* One seeded series: kills runs of `first` (then `again`, the resume)
 * until `want` kills, checking after each, then finishing with `again`.
 * prepare(dir) resets the output before each series. */
typedef struct series {
    const char *name;
    const char *out, *ref;
    const cmdline *first, *again;
    int (*skip)(const char *);
    void (*prepare)(const char *out);
    int64_t full_ns;           /* the uninterrupted run's duration */
} series;

static int run_series(const series *s, int want, uint64_t *rng)
{
    int kills = 0, finished = 0;
    char when[256];
    /* the span the delays are drawn from: the uninterrupted run's duration,
     * shortened by a quarter whenever a run ends before its kill (that one
     * was measured on a busy machine, or a resume has less left to do) and
     * grown back by an eighth, up to it, whenever a kill lands: the kills
     * keep landing, and still reach the run's last phases */
    int64_t span = s->full_ns;
    for (int round = 0; kills < want && round < 4 * want; round++) {
        s->prepare(s->out);
        /* 1 to 3 kills in a row: the resume of a killed run is killed too */
        int chain = 1 + (int)(tu_rand(rng) % 3), ended = 0;
        for (int k = 0; k < chain && kills < want; k++) {
            int64_t delay = (int64_t)(tu_rand(rng) % (uint64_t)span);
            int st;
            if (!run_and_kill(k ? s->again : s->first, delay, &st)) {
                cr_assert_eq(st, 0, "%s: a run that was not killed failed (exit %d): %s", s->name,
                             st, last_log());
                ended = 1;
                finished++;
                span = span / 4 * 3 > 1000000 ? span / 4 * 3 : 1000000;
                break;
            }
            kills++;
            span = span + span / 8 < s->full_ns ? span + span / 8 : s->full_ns;
            snprintf(when, sizeof when, "%s: kill %d (round %d, %.1f ms in)", s->name, kills,
                     round, (double)delay / 1e6);
            check_final_names(s->out, s->ref, s->skip, when);
        }
        if (!ended) {
            int st = run(s->again, NULL);
            snprintf(when, sizeof when, "%s: resume after kill %d", s->name, kills);
            cr_assert_eq(st, 0, "%s: exit %d: %s", when, st, last_log());
        }
        snprintf(when, sizeof when, "%s: round %d finished", s->name, round);
        check_complete(s->out, s->ref, s->skip, when);
    }
    cr_assert_eq(kills, want, "%s: only %d kills landed (%d runs ended first)", s->name, kills,
                 finished);
    cr_log_info("%s: %d kills, %d runs ended before their kill", s->name, kills, finished);
    unlink(log_path);
    return kills;
}

static void rm_out(const char *out)
{
    tu_rmrf(out);
}

/* ----------------------------------------------------------- convert */
static int skip_plan(const char *name)
{
    /* the plan of an unfinished run (the finished one's is .train.done,
     * compared like the rest); written atomically, its content checked by
     * the resume */
    return ends_with(name, ".plan");
}

/* A folder of n 16-bit PNGs per class in 4 classes (transcoded: work for
 * the workers). */
static void png_folder(const char *in, int n)
{
    cr_assert_eq(mkdir(in, 0755), 0);
    for (int c = 0; c < 4; c++) {
        char cls[32];
        snprintf(cls, sizeof cls, "c%d", c);
        char *cd = tu_join(in, cls);
        cr_assert_eq(mkdir(cd, 0755), 0);
        for (int i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof name, "%04d.png", i);
            size_t len;
            uint8_t *png = hi_png(24 + (i % 5), 24 + (c % 3), 0, &len);
            char *p = tu_join(cd, name);
            cr_assert_eq(tu_write_file(p, png, len), 0);
            free(p);
            free(png);
        }
        free(cd);
    }
}

Test(kill9, convert_40_kills_then_resume_gives_the_same_bytes, .timeout = 600)
{
    char *root = tu_tmpdir(), *in = tu_join(root, "in"), *ref = tu_join(root, "ref"),
         *out = tu_join(root, "out");
    png_folder(in, 60); /* 240 inputs */
    cmdline first, again, refcmd;
    const char *opts = "--name train --shards 6 --shuffle-seed 5 --threads 2 --quiet";
    cmd_make(&refcmd, "convert --from folder %s --out %s %s", in, ref, opts);
    cmd_make(&first, "convert --from folder %s --out %s %s", in, out, opts);
    cmd_make(&again, "convert --from folder %s --out %s %s --resume", in, out, opts);
    int64_t ns;
    cr_assert_eq(run(&refcmd, &ns), 0);
    series s = {.name = "convert", .out = out, .ref = ref, .first = &first, .again = &again,
                .skip = skip_plan, .prepare = rm_out, .full_ns = ns};
    uint64_t rng = seed_state(16001);
    run_series(&s, 40, &rng);
    tu_rmrf(root);
    free(root);
    free(in);
    free(ref);
    free(out);
}

/* Files of dir ending in suf. */
static int count_suffix(const char *dir, const char *suf)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += ends_with(e->d_name, suf);
    closedir(d);
    return n;
}

Test(kill9, convert_sigint_and_sigterm_stop_cleanly_then_resume_gives_the_same_bytes,
     .timeout = 300)
{
    char *root = tu_tmpdir(), *in = tu_join(root, "in"), *ref = tu_join(root, "ref"),
         *out = tu_join(root, "out");
    png_folder(in, 1000); /* 4,000 inputs: 20 shards of 200, 63 chunks of 64 */
    cmdline first, again, refcmd;
    const char *opts = "--name train --shards 20 --shuffle-seed 9 --threads 1";
    cmd_make(&refcmd, "convert --from folder %s --out %s %s --quiet", in, ref, opts);
    /* with its progress line: the line is cleared before the message */
    cmd_make(&first, "convert --from folder %s --out %s %s", in, out, opts);
    cmd_make(&again, "convert --from folder %s --out %s %s --quiet --resume", in, out, opts);
    cr_assert_eq(run(&refcmd, NULL), 0, "%s", last_log());
    const int sigs[2] = {SIGINT, SIGTERM};
    for (int t = 0; t < 2; t++) {
        rm_out(out);
        pid_t pid = spawn(&first);
        /* the signal once a shard is whole, so that it lands mid-run: 19
         * shards are still to come */
        int st, polls = 0;
        while (count_suffix(out, ".tfrecord") == 0 && polls++ < 60000) {
            cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "ended before its first shard: %s",
                         last_log());
            struct timespec d = {0, 1000000};
            nanosleep(&d, NULL);
        }
        cr_assert_eq(kill(pid, sigs[t]), 0);
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        const char *log = last_log();
        cr_assert(WIFEXITED(st), "signal %d: the handler did not run (killed): %s", sigs[t], log);
        cr_assert_eq(WEXITSTATUS(st), 128 + sigs[t], "signal %d: exit %d: %s", sigs[t],
                     WEXITSTATUS(st), log);
        cr_assert(strstr(log, "--resume"), "signal %d: no --resume hint: %s", sigs[t], log);
        cr_assert(strstr(log, sigs[t] == SIGINT ? "Ctrl-C" : "SIGTERM"), "%s", log);
        cr_assert(strstr(log, "shards whole"), "%s", log);
        char when[64];
        snprintf(when, sizeof when, "after signal %d", sigs[t]);
        int whole = check_final_names(out, ref, skip_plan, when);
        cr_assert_geq(whole, 1, "%s", when);
        cr_assert_eq(count_suffix(out, ".tmp"), 0, "%s: a temp file left behind", when);
        char *dj = tu_join(out, "dataset.json");
        struct stat sb;
        cr_assert_neq(stat(dj, &sb), 0, "%s: dataset.json written by a stopped run", when);
        free(dj);
        cr_assert_eq(run(&again, NULL), 0, "%s: resume: %s", when, last_log());
        check_complete(out, ref, skip_plan, when);
    }
    unlink(log_path);
    tu_rmrf(root);
    free(root);
    free(in);
    free(ref);
    free(out);
}

/* ------------------------------------------------------------- train */
Test(kill9, train_30_kills_then_resume_gives_the_same_weights, .timeout = 600)
{
    char *root = tu_tmpdir(), *in = tu_join(root, "in"), *data = tu_join(root, "data"),
         *ref = tu_join(root, "ref"), *out = tu_join(root, "ck");
    cr_assert_eq(mkdir(in, 0755), 0);
    for (int c = 0; c < 4; c++) {
        char cls[32];
        snprintf(cls, sizeof cls, "c%d", c);
        char *cd = tu_join(in, cls);
        cr_assert_eq(mkdir(cd, 0755), 0);
        for (int i = 0; i < 40; i++) {
            char name[32];
            snprintf(name, sizeof name, "%03d.jpg", i);
            size_t len;
            uint8_t *j = hi_jpeg_rgb(20, 20, c * 64 + i, &len);
            char *p = tu_join(cd, name);
            cr_assert_eq(tu_write_file(p, j, len), 0);
            free(p);
            free(j);
        }
        free(cd);
    }
    cmdline conv, first, again, refcmd;
    cmd_make(&conv, "convert --from folder %s --out %s --name train --shards 4 --quiet", in,
             data);
    cr_assert_eq(run(&conv, NULL), 0);
    /* a checkpoint every step: most of the run's time is spent saving */
    const char *opts = "--image-size 16 --model resnet20 --width 4 --batch 16 --max-steps 10 "
                       "--threads 1 --workers 1 --eval-split none --ckpt-every 1";
    cmd_make(&refcmd, "train --data %s %s --ckpt-dir %s", data, opts, ref);
    cmd_make(&first, "train --data %s %s --ckpt-dir %s", data, opts, out);
    cmd_make(&again, "train --data %s %s --ckpt-dir %s --resume", data, opts, out);
    int64_t ns;
    cr_assert_eq(run(&refcmd, &ns), 0);
    char *last = tu_join(ref, "ckpt-000000010.safetensors");
    struct stat st;
    cr_assert_eq(stat(last, &st), 0, "the uninterrupted run's last checkpoint");
    free(last);
    series s = {.name = "train", .out = out, .ref = ref, .first = &first, .again = &again,
                .skip = NULL, .prepare = rm_out, .full_ns = ns};
    uint64_t rng = seed_state(16002);
    run_series(&s, 30, &rng);

    /* Ctrl-C mid-run: the step reached is saved (no --ckpt-every step of
     * its own), exit 130, and --resume ends with the uninterrupted run's
     * weights. */
    const char *opts2 = "--image-size 16 --model resnet20 --width 4 --batch 16 --max-steps 400 "
                        "--threads 1 --workers 1 --eval-split none --log-every 1 "
                        "--ckpt-every 1000";
    cmd_make(&refcmd, "train --data %s %s --ckpt-dir %s", data, opts2, ref);
    cmd_make(&first, "train --data %s %s --ckpt-dir %s", data, opts2, out);
    cmd_make(&again, "train --data %s %s --ckpt-dir %s --resume", data, opts2, out);
    tu_rmrf(ref);
    rm_out(out);
    cr_assert_eq(run(&refcmd, NULL), 0, "%s", last_log());
    pid_t pid = spawn(&first);
    int polls = 0, status;
    while (!strstr(last_log(), "step 3/") && polls++ < 60000) {
        cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "ended before step 3: %s", last_log());
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    cr_assert_eq(kill(pid, SIGINT), 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    const char *log = last_log();
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 130, "exit %d (signal %d): %s",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0, log);
    const char *at = strstr(log, "stopped on request after step ");
    cr_assert_not_null(at, "%s", log);
    long long step = atoll(at + strlen("stopped on request after step "));
    cr_assert(step >= 3 && step < 400, "%s", log);
    cr_assert(strstr(log, "--resume") && strstr(log, "Ctrl-C"), "%s", log);
    char name[64];
    snprintf(name, sizeof name, "ckpt-%09lld.safetensors", step);
    char *saved = tu_join(out, name);
    cr_assert_eq(stat(saved, &st), 0, "%s not saved: %s", name, log);
    free(saved);
    cr_assert_eq(run(&again, NULL), 0, "resume: %s", last_log());
    char *a = tu_join(ref, "ckpt-000000400.safetensors"), *b = tu_join(out, "ckpt-000000400.safetensors");
    cr_assert(same_file(a, b), "resumed after Ctrl-C at step %lld: other weights", step);
    free(a);
    free(b);
    unlink(log_path);
    tu_rmrf(root);
    free(root);
    free(in);
    free(data);
    free(ref);
    free(out);
}

/* ------------------------------------------------------------- index */
static const char *index_dir;

/* The shards without their index files. */
static void drop_indexes(const char *out)
{
    (void)out;
    DIR *d = opendir(index_dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (ends_with(e->d_name, ".idx") || ends_with(e->d_name, ".tmp")) {
            char *p = tu_join(index_dir, e->d_name);
            unlink(p);
            free(p);
        }
    closedir(d);
}

static int skip_shards(const char *name)
{
    return !ends_with(name, ".idx"); /* the shards themselves are inputs here */
}

Test(kill9, index_30_kills_then_rerun_gives_the_same_files, .timeout = 600)
{
    char *root = tu_tmpdir(), *dir = tu_join(root, "data"), *ref = tu_join(root, "ref");
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(mkdir(ref, 0755), 0);
    /* 4 shards of 20,000 small records (index work: scan + 20,000 lines
     * each); the writer's own index files are the reference */
    uint8_t rec[100];
    uint64_t r = 3;
    for (unsigned s = 0; s < 4; s++) {
        char path[4096], name[64];
        snprintf(name, sizeof name, "part-%05u-of-00004.tfrecord", s);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        sl_tfrecord_writer *w;
        cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK);
        for (int i = 0; i < 20000; i++) {
            for (size_t k = 0; k < sizeof rec; k++)
                rec[k] = (uint8_t)tu_rand(&r);
            cr_assert_eq(sl_tfrecord_writer_write(w, rec, 10 + tu_rand(&r) % 90), SL_OK);
        }
        cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK);
        char idx[4200], to[4200];
        snprintf(idx, sizeof idx, "%s.idx", path);
        snprintf(to, sizeof to, "%s/%s.idx", ref, name);
        cr_assert_eq(rename(idx, to), 0);
        snprintf(to, sizeof to, "%s/%s", ref, name); /* the shard too: a final name */
        cr_assert_eq(link(path, to), 0);
    }
    index_dir = dir;
    cmdline first;
    cmd_make(&first, "index %s --quiet", dir);
    int64_t ns;
    cr_assert_eq(run(&first, &ns), 0);
    check_complete(dir, ref, NULL, "index: uninterrupted");
    series s = {.name = "index", .out = dir, .ref = ref, .first = &first, .again = &first,
                .skip = skip_shards, .prepare = drop_indexes, .full_ns = ns};
    uint64_t rng = seed_state(16003);
    run_series(&s, 30, &rng);
    tu_rmrf(root);
    free(root);
    free(dir);
    free(ref);
}

/*
 * tests/tools/test_profile.c - `sluice profile` end to end: the real binary
 * (tu_sluice()) runs the pipeline over a small dataset written here with the
 * records API (3 shards, 480 JPEGs of 40x48 with a few odd sizes).
 *
 *   json      --json parses: images_per_sec > 0, batch and sample counts,
 *             the stage list with its fields, a bottleneck that is a stage
 *   text      the table, the rate and the bottleneck line
 *   digest    same seed: equal for --workers 1 / 2 and --readers 1 / 3 (buffer
 *             and global shuffle); another seed: different; two epochs of
 *             480 records deliver 960 samples and stop at the end of data;
 *             each decode path (planar default, SLUICE_DECODE=rgb) on its own
 *   trace     --trace writes Chrome trace JSON with events
 *   cli       --help; bad values exit 2 naming the option
 *   tuning    the online tuning (pipeline/tune.c) in --json and the text:
 *             on for what was not given, off for --workers and --prefetch
 *   memory    --memory-budget: the process's peak RSS (getrusage of the
 *             child) within the budget over that of `profile --help` (the
 *             binary and its libraries: a CUDA build's initializers alone
 *             take ~220 MiB); --json's memory object; a budget too small
 *             refused at start-up, before a batch, naming each part; a
 *             --prefetch given that does not fit named
 *
 * Suite "profile" (not pipeline*): it runs the binary, which the TSan pass
 * of the pipeline tests does not build.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "records/records.h"
#include "servers.h"
#include "testutil.h"

#define NSHARDS 3
#define PER_SHARD 160
#define NREC (NSHARDS * PER_SHARD)

/* DIR/train-0000k-of-00003.tfrecord (+ .idx): record i of shard s is a
 * JPEG of smooth gradients whose phase depends on its number, label i % 10. */
static char *make_dataset(void)
{
    char *dir = tu_tmpdir();
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    sl_example_builder b;
    sl_example_builder_init(&b);
    uint64_t rs = 42;
    for (unsigned s = 0; s < NSHARDS; s++) {
        char path[4096];
        cr_assert_eq(sl_shard_path(path, sizeof path, dir, "train", s, NSHARDS), SL_OK);
        sl_tfrecord_writer *w;
        cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK, "%s",
                     sl_errmsg());
        for (unsigned k = 0; k < PER_SHARD; k++) {
            unsigned i = s * PER_SHARD + k;
            int wd = 48 + (k % 7 == 0 ? 9 : 0), ht = 40 + (k % 5 == 0 ? 13 : 0);
            uint8_t pix[57 * 53 * 3];
            unsigned r0 = (unsigned)tu_rand(&rs);
            for (int y = 0; y < ht; y++)
                for (int x = 0; x < wd; x++) {
                    uint8_t *p = pix + ((size_t)y * wd + x) * 3;
                    p[0] = (uint8_t)(x * 5 + r0);
                    p[1] = (uint8_t)(y * 6 + (r0 >> 8));
                    p[2] = (uint8_t)((x + y) * 3 + i);
                }
            unsigned char *jpg = NULL;
            unsigned long jlen = 0;
            cr_assert_eq(tjCompress2(tj, pix, wd, 0, ht, TJPF_RGB, &jpg, &jlen, TJSAMP_420, 90, 0),
                         0, "%s", tjGetErrorStr2(tj));
            sl_image_example ex = {.image = jpg, .image_len = jlen, .label = i % 10,
                                   .height = ht, .width = wd, .format = "JPEG", .format_len = 4};
            const uint8_t *rec;
            size_t len;
            cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
            cr_assert_eq(sl_example_finish(&b, &rec, &len), SL_OK);
            cr_assert_eq(sl_tfrecord_writer_write(w, rec, len), SL_OK, "%s", sl_errmsg());
            tjFree(jpg);
        }
        cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    }
    sl_example_builder_fini(&b);
    tjDestroy(tj);
    return dir;
}

/* Run `sluice profile --data DIR <args>` with stdout only into *out (stderr
 * dropped, so --json output parses); returns the exit status. */
static int profile_stdout(const char *dir, const char *args, char **out)
{
    return tu_run(out, "(%s profile --data %s --quiet %s 2>/dev/null)", tu_sluice(), dir, args);
}

static cJSON *profile_json(const char *dir, const char *args)
{
    char *out = NULL;
    int st = profile_stdout(dir, args, &out);
    cr_assert_eq(st, 0, "profile %s: exit %d:\n%s", args, st, out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "profile %s: not JSON:\n%s", args, out);
    free(out);
    return j;
}

static double jnum(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsNumber(v), "field %s missing or not a number", name);
    return v->valuedouble;
}

/* ------------------------------------------------------------ json / text */
Test(profile, json_report)
{
    char *dir = make_dataset();
    cJSON *j = profile_json(dir, "--image-size 32 --batch 16 --workers 2 --readers 2 --batches 12 "
                                 "--warmup 2 --json");
    cr_assert_gt(jnum(j, "images_per_sec"), 0);
    cr_assert_eq(jnum(j, "batches"), 12);
    cr_assert_eq(jnum(j, "samples"), 12 * 16);
    cr_assert_eq(jnum(j, "measured_batches"), 10);
    cr_assert_gt(jnum(j, "seconds"), 0);
    cr_assert_eq(jnum(j, "records_per_epoch"), NREC);
    cr_assert_eq(jnum(j, "bad_records"), 0);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    cr_assert(cJSON_IsArray(stages) && cJSON_GetArraySize(stages) > 0, "no stages");
    const cJSON *bn = cJSON_GetObjectItemCaseSensitive(j, "bottleneck");
    cr_assert(cJSON_IsString(bn), "no bottleneck");
    int bn_is_stage = 0, have_map = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, stages)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name");
        cr_assert(cJSON_IsString(name) && name->valuestring[0], "stage without a name");
        cr_assert_geq(jnum(s, "threads"), 1, "%s", name->valuestring);
        cr_assert_geq(jnum(s, "items_per_sec"), 0);
        double busy = jnum(s, "busy_pct"), wait = jnum(s, "wait_pct"), fill = jnum(s, "queue_fill");
        cr_assert(busy >= 0 && busy <= 100 && wait >= 0 && wait <= 100,
                  "%s: busy %g%% wait %g%%", name->valuestring, busy, wait);
        cr_assert(fill >= 0 && fill <= 1, "%s: queue fill %g", name->valuestring, fill);
        if (!strcmp(name->valuestring, "map")) {
            have_map = 1;
            cr_assert_eq(jnum(s, "threads"), 2, "--workers 2 gave %g map threads", jnum(s, "threads"));
            cr_assert_gt(jnum(s, "items_per_sec"), 0);
        }
        bn_is_stage |= !strcmp(name->valuestring, bn->valuestring);
    }
    cr_assert(have_map, "no map stage");
    cr_assert(bn_is_stage, "bottleneck '%s' is not a stage", bn->valuestring);
    cJSON_Delete(j);
    tu_rmrf(dir);
    free(dir);
}

/* Issue 43: --cpus bounds the workers chosen (one per core of the budget),
 * an explicit --workers wins, and --json says what ran and why. */
Test(profile, parallelism_within_cpus)
{
    char *dir = make_dataset();
    cJSON *j = profile_json(dir, "--image-size 32 --batch 16 --batches 4 --cpus 3 --json");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(j, "parallelism");
    cr_assert(cJSON_IsObject(par), "no parallelism object");
    cr_assert_eq(jnum(par, "cpus"), 3);
    cr_assert_eq(jnum(par, "workers"), 3);
    cr_assert_eq(jnum(par, "readers"), 2);
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(par, "reason");
    cr_assert(cJSON_IsString(why) && strstr(why->valuestring, "a worker per core"));
    /* where the budget came from; no start-up measurement for the pipeline alone */
    const cJSON *budget = cJSON_GetObjectItemCaseSensitive(par, "budget");
    cr_assert(cJSON_IsString(budget) && !strncmp(budget->valuestring, "--cpus 3; ", 10),
              "%s", cJSON_IsString(budget) ? budget->valuestring : "no budget");
    cr_assert_eq(jnum(par, "probe_s"), 0);
    cr_assert_eq(jnum(par, "free_cores"), 0);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
    cr_assert_eq(jnum(cfg, "workers"), 3, "the pipeline ran with the workers chosen");
    cJSON_Delete(j);
    j = profile_json(dir, "--image-size 32 --batch 16 --batches 4 --cpus 3 --workers 1 "
                          "--readers 1 --json");
    par = cJSON_GetObjectItemCaseSensitive(j, "parallelism");
    cr_assert_eq(jnum(par, "workers"), 1);
    cr_assert_eq(jnum(par, "readers"), 1);
    cJSON_Delete(j);
    tu_rmrf(dir);
    free(dir);
}

Test(profile, text_report)
{
    char *dir = make_dataset();
    char *out = NULL;
    int st = profile_stdout(dir, "--image-size 24 --batch 8 --workers 1 --batches 6", &out);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, out);
    cr_assert(strstr(out, "images/s") && strstr(out, "busy %") && strstr(out, "map"), "%s", out);
    cr_assert(strstr(out, "\nbottleneck: "), "no bottleneck line:\n%s", out);
    cr_assert(strstr(out, "measured 4 batches, 32 images"), "warmup not excluded:\n%s", out);
    cr_assert_null(strstr(out, "digest:"), "digest without --digest:\n%s", out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

/* ------------------------------------------------------------ digest */
/* Two epochs to the end of the data; returns the digest (malloc'd) and
 * checks that every record came twice. */
static char *digest_of(const char *dir, const char *args)
{
    char full[512];
    snprintf(full, sizeof full, "--image-size 24 --batch 32 --epochs 2 --digest --json %s", args);
    cJSON *j = profile_json(dir, full);
    cr_assert_eq(jnum(j, "samples"), 2 * NREC, "%s", args);
    const cJSON *eod = cJSON_GetObjectItemCaseSensitive(j, "end_of_data");
    cr_assert(cJSON_IsTrue(eod), "%s: did not stop at the end of the data", args);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "digest");
    cr_assert(cJSON_IsString(d) && strlen(d->valuestring) == 32, "%s: no 128-bit digest", args);
    char *r = strdup(d->valuestring);
    cJSON_Delete(j);
    return r;
}

Test(profile, digest_threads_and_seeds)
{
    char *dir = make_dataset();
    char *w1 = digest_of(dir, "--shuffle buffer:64 --seed 7 --workers 1 --readers 1");
    char *w2 = digest_of(dir, "--shuffle buffer:64 --seed 7 --workers 2 --readers 1");
    char *r3 = digest_of(dir, "--shuffle buffer:64 --seed 7 --workers 2 --readers 3");
    char *s8 = digest_of(dir, "--shuffle buffer:64 --seed 8 --workers 2 --readers 3");
    cr_assert_str_eq(w1, w2, "--workers 1 and 2 differ");
    cr_assert_str_eq(w1, r3, "--readers 1 and 3 differ");
    cr_assert_str_neq(w1, s8, "--seed 7 and 8 give the same batches");
    char *g1 = digest_of(dir, "--shuffle global --seed 7 --workers 1 --readers 1");
    char *g3 = digest_of(dir, "--shuffle global --seed 7 --workers 2 --readers 3");
    cr_assert_str_eq(g1, g3, "global shuffle: --readers 1 and 3 differ");
    cr_assert_str_neq(g1, w1, "global and buffer shuffles give the same batches");
    free(w1), free(w2), free(r3), free(s8), free(g1), free(g3);
    tu_rmrf(dir);
    free(dir);
}

/* Each decode path (pipeline/image/decode_yuv.c by default, SLUICE_DECODE=rgb
 * the RGB reference) is deterministic on its own: equal digests for 1 and
 * 2 workers; the two paths' bytes differ (the switch takes effect). */
Test(profile, digest_per_decode_path)
{
    char *dir = make_dataset();
    const char *args[2] = {"--shuffle buffer:64 --seed 5 --workers 1 --readers 1",
                           "--shuffle buffer:64 --seed 5 --workers 2 --readers 2"};
    char *d[2][2];
    for (int path = 0; path < 2; path++) {
        if (path)
            cr_assert_eq(setenv("SLUICE_DECODE", "rgb", 1), 0);
        for (int k = 0; k < 2; k++)
            d[path][k] = digest_of(dir, args[k]);
        unsetenv("SLUICE_DECODE");
        cr_assert_str_eq(d[path][0], d[path][1], "%s path: --workers 1 and 2 differ",
                         path ? "rgb" : "planar");
    }
    cr_assert_str_neq(d[0][0], d[1][0], "SLUICE_DECODE=rgb gives the planar path's bytes");
    for (int path = 0; path < 2; path++)
        free(d[path][0]), free(d[path][1]);
    tu_rmrf(dir);
    free(dir);
}

/* The text form prints the same digest line. */
Test(profile, digest_text)
{
    char *dir = make_dataset();
    char *a = NULL, *b = NULL;
    const char *args = "--image-size 16 --batch 16 --batches 5 --seed 3 --digest";
    cr_assert_eq(profile_stdout(dir, args, &a), 0, "%s", a);
    cr_assert_eq(profile_stdout(dir, args, &b), 0, "%s", b);
    const char *da = strstr(a, "\ndigest: "), *db = strstr(b, "\ndigest: ");
    cr_assert(da && db, "no digest line:\n%s", a);
    cr_assert_eq(strncmp(da, db, 9 + 32), 0, "two runs differ:\n%s\n%s", a, b);
    free(a);
    free(b);
    tu_rmrf(dir);
    free(dir);
}

/* ------------------------------------------------------------ trace */
Test(profile, trace_file)
{
    char *dir = make_dataset();
    char *trace = tu_join(dir, "trace.json");
    char args[4200];
    snprintf(args, sizeof args, "--image-size 24 --batch 16 --batches 6 --trace %s", trace);
    char *out = NULL;
    cr_assert_eq(profile_stdout(dir, args, &out), 0, "%s", out);
    free(out);
    size_t len;
    uint8_t *text = tu_read_file(trace, &len);
    cr_assert_not_null(text, "no trace file %s", trace);
    cJSON *j = cJSON_ParseWithLength((const char *)text, len);
    cr_assert_not_null(j, "trace is not JSON");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "traceEvents");
    cr_assert(cJSON_IsArray(ev) && cJSON_GetArraySize(ev) > 0, "traceEvents missing or empty");
    cJSON_Delete(j);
    free(text);
    free(trace);
    tu_rmrf(dir);
    free(dir);
}

/* ------------------------------------------------------------ cli */
Test(profile, help)
{
    char *out = NULL;
    int st = tu_run(&out, "%s profile --help", tu_sluice());
    cr_assert_eq(st, 0, "%s", out);
    const char *want[] = {"--data", "--workers", "--readers", "--shuffle", "--layout", "--seconds",
                          "--batches", "--warmup", "--digest", "--trace", "--json", "example"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]), "--help does not mention %s", want[i]);
    free(out);
    st = tu_run(&out, "%s --help", tu_sluice());
    cr_assert(st == 0 && strstr(out, "profile"), "profile not listed in sluice --help:\n%s", out);
    free(out);
}

Test(profile, bad_flags)
{
    static const struct {
        const char *args, *names;
    } cases[] = {
        {"--data /tmp --batch 0", "--batch"},
        {"--data /tmp --batch x", "--batch"},
        {"--data /tmp --workers -1", "--workers"},
        {"--data /tmp --shuffle sometimes", "--shuffle"},
        {"--data /tmp --shuffle buffer:0", "--shuffle"},
        {"--data /tmp --layout nchw-f16", "--layout"},
        {"--data /tmp --image-size 0", "--image-size"},
        {"--data /tmp --image-size 32x", "--image-size"},
        {"--data /tmp --seconds 0", "--seconds"},
        {"--data /tmp --seconds abc", "--seconds"},
        {"--data /tmp --batches 0", "--batches"},
        {"--data /tmp --seconds 2 --batches 3", "--batches"},
        {"--data /tmp --on-error ignore", "--on-error"},
        {"--data /tmp --rank 2 --world 2", "--rank"},
        {"--data /tmp --device -2", "--device"},
        {"--data /tmp --frobnicate", "--frobnicate"},
        {"--data /tmp --trace", "--trace"},
        {"--batches 2", "--data"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int st = tu_run(&out, "%s profile %s", tu_sluice(), cases[i].args);
        cr_assert_eq(st, 2, "'%s': exit %d, want 2:\n%s", cases[i].args, st, out);
        cr_assert(strstr(out, cases[i].names), "'%s': message does not name %s:\n%s",
                  cases[i].args, cases[i].names, out);
        free(out);
    }
    /* a missing dataset is a runtime error, also exit 2 */
    char *out = NULL;
    int st = tu_run(&out, "%s profile --data /nonexistent/sluice-profile --batches 1", tu_sluice());
    cr_assert_eq(st, 2, "missing data: exit %d:\n%s", st, out);
    free(out);
}

/* ----------------------------------------------------------------- memory */
/* Peak RSS (KiB) of the process tree of `sh -c cmd` (its output into
 * *out), measured in a forked child so that no other child counts:
 * RUSAGE_CHILDREN's ru_maxrss is the largest waited-for descendant's. */
static void run_in_child(void *arg, int fd)
{
    char *o = NULL;
    int st = tu_run(&o, "%s", (const char *)arg);
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    long v[2] = {ru.ru_maxrss, st};
    size_t len = o ? strlen(o) : 0;
    if (write(fd, v, sizeof v) != (ssize_t)sizeof v ||
        (len && write(fd, o, len) != (ssize_t)len))
        _exit(2);
}

static long peak_rss_kib(const char *cmd, char **out, int *status)
{
    size_t n;
    long v[2];
    char *got = tu_in_child(run_in_child, (void *)cmd, &n);
    cr_assert_geq(n, sizeof v, "the child wrote %zu bytes", n);
    memcpy(v, got, sizeof v);
    memmove(got, got + sizeof v, n - sizeof v + 1); /* the output, NUL included */
    *out = got;
    *status = (int)v[1];
    return v[0];
}

/* Issue 43 item 3: the run stays within --memory-budget (over the binary's
 * own start-up), and says what it chose. */
Test(profile, memory_budget_peak_rss)
{
    char *dir = make_dataset(), cmd[8192], *out;
    int st;
    snprintf(cmd, sizeof cmd, "%s profile --help", tu_sluice());
    long base = peak_rss_kib(cmd, &out, &st);
    free(out);
    cr_assert_gt(base, 0);
    /* 96 px f32 batches of 64: 7 MiB each, so the default ring (3 batches
     * for 2 workers) and read window do not fit in 28 MiB: the fit shrinks */
    const long budget_kib = 28 << 10;
    snprintf(cmd, sizeof cmd, "%s profile --data %s --quiet --image-size 96 --batch 64 --epochs 3 "
             "--batches 22 --cpus 2 --memory-budget 28M --json", tu_sluice(), dir);
    long peak = peak_rss_kib(cmd, &out, &st);
    cr_assert_eq(st, 0, "%s", out);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (a sanitizer's shadow memory and quarantine grow with every allocation) */
    cr_assert_leq(peak, base + budget_kib, "peak RSS %ld KiB, --help's %ld KiB + budget %ld KiB:\n%s",
                  peak, base, budget_kib, out);
#endif
    cr_log_info("peak RSS %ld KiB, --help's %ld KiB, budget %ld KiB", peak, base, budget_kib);
    cr_assert(strstr(out, "profile: memory: "), "no start-up line:\n%s", out);
    const char *js = strchr(out, '{');
    cr_assert_not_null(js);
    cJSON *j = cJSON_Parse(js);
    cr_assert_not_null(j, "not JSON:\n%s", out);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory");
    cr_assert(cJSON_IsObject(mem), "no memory object:\n%s", out);
    cr_assert_eq(jnum(mem, "budget"), 28 << 20);
    cr_assert_leq(jnum(mem, "total"), 28 << 20);
    /* the run's own peak, from the mark before the pipeline (start-up's
     * peak reset): within the budget */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(mem, "rss_start");
    if (cJSON_IsNumber(rs)) {
        double grew = jnum(mem, "rss_peak") - rs->valuedouble;
        cr_log_info("the run's peak RSS: %.1f MiB over its start", grew / 1048576);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        cr_assert_leq(grew, 28 << 20, "peak RSS grew %.0f bytes over the start:\n%s", grew, out);
#endif
    }
    const cJSON *shrunk = cJSON_GetObjectItemCaseSensitive(mem, "shrunk");
    cr_assert(cJSON_IsString(shrunk) && strstr(shrunk->valuestring, "prefetch 3 -> 2"),
              "%s", out);
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(mem, "parts");
    cr_assert_gt(jnum(parts, "read_window"), 0);
    cr_assert_gt(jnum(parts, "ring"), 0);
    cr_assert_gt(jnum(parts, "decode"), 0);
    cJSON_Delete(j);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

Test(profile, memory_budget_refused)
{
    char *dir = make_dataset(), *out = NULL;
    /* too small for what cannot shrink: refused before the first batch */
    int st = tu_run(&out, "%s profile --data %s --image-size 32 --batch 16 --batches 4 "
                    "--memory-budget 1M", tu_sluice(), dir);
    cr_assert_eq(st, 2, "%s", out);
    const char *want[] = {"--memory-budget 1.0 MiB", "read window", "shuffle buffer",
                          "decode workers", "prefetch ring", "what cannot shrink",
                          "Give a budget of"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]), "'%s' not in:\n%s", want[i], out);
    cr_assert(!strstr(out, "measured"), "it ran:\n%s", out);
    free(out);
    /* a --prefetch given that does not fit is named */
    st = tu_run(&out, "%s profile --data %s --image-size 64 --batch 64 --batches 4 "
                "--prefetch 400 --memory-budget 24M", tu_sluice(), dir);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "prefetch 400 as given"), "%s", out);
    free(out);
    /* bad values */
    st = tu_run(&out, "%s profile --data %s --memory-budget 12Q", tu_sluice(), dir);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "--memory-budget: bad value '12Q'"), "%s", out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

Test(profile, tuning_reported)
{
    char *dir = make_dataset();
    cJSON *j = profile_json(dir, "--image-size 32 --batch 16 --batches 30 --cpus 2 --json");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tuning");
    cr_assert(cJSON_IsObject(t), "no tuning object");
    const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(t, "knobs");
    cr_assert(cJSON_IsArray(knobs) && cJSON_GetArraySize(knobs) == 2);
    cr_assert_eq(jnum(t, "workers_max"), 2);
    cr_assert(jnum(t, "workers") >= 1 && jnum(t, "workers") <= 2);
    cr_assert_geq(jnum(t, "prefetch"), 2);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "inflight")), "local: no requests");
    cJSON_Delete(j);
    j = profile_json(dir, "--image-size 32 --batch 16 --batches 4 --workers 2 --prefetch 4 --json");
    t = cJSON_GetObjectItemCaseSensitive(j, "tuning");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "knobs")), 0);
    cr_assert_eq(jnum(t, "changes"), 0);
    cJSON_Delete(j);
    char *out = NULL;
    cr_assert_eq(profile_stdout(dir, "--image-size 32 --batch 16 --batches 4 --workers 1", &out), 0);
    cr_assert(strstr(out, "tuning: workers 1..1 of 1 (now 1, mean 1.0) as given, prefetch"), "%s",
              out);
    free(out);
    tu_rmrf(dir);
    free(dir);
}

/* Over HTTP the requests in flight are tuned too (issue 43 item 2), within
 * --io-inflight's default, and said (--json's tuning.inflight, the text);
 * given, they are not. */
Test(profile, tuning_inflight_over_http)
{
    char *dir = make_dataset();
    char *root = strdup(dir), url[512];
    char *slash = strrchr(root, '/');
    *slash = 0;
    srv ng;
    srv_nginx_start(root, &ng);
    snprintf(url, sizeof url, "'%s/%s/train-{00000..00002}-of-00003.tfrecord'", ng.url,
             slash + 1); /* a folder over HTTP is named by its shards */
    cJSON *j = profile_json(url, "--image-size 32 --batch 16 --batches 20 --cpus 2 --json");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tuning");
    const cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "knobs"), 2);
    cr_assert(cJSON_IsString(k) && !strcmp(k->valuestring, "inflight"), "no inflight knob");
    const cJSON *io = cJSON_GetObjectItemCaseSensitive(t, "inflight");
    cr_assert(cJSON_IsObject(io), "no inflight object");
    cr_assert_eq(jnum(io, "max"), 8, "--io-inflight's default: the bound");
    cr_assert(jnum(io, "limit") >= 1 && jnum(io, "limit") <= 8);
    cr_assert(jnum(io, "lo") <= jnum(io, "limit") && jnum(io, "limit") <= jnum(io, "hi"));
    cJSON_Delete(j);
    j = profile_json(url, "--image-size 32 --batch 16 --batches 4 --io-inflight 2 --json");
    t = cJSON_GetObjectItemCaseSensitive(j, "tuning");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "knobs")), 2);
    io = cJSON_GetObjectItemCaseSensitive(t, "inflight");
    cr_assert_eq(jnum(io, "limit"), 2);
    cr_assert_eq(jnum(io, "max"), 2);
    cr_assert_eq(jnum(io, "changes"), 0);
    cJSON_Delete(j);
    char *out = NULL;
    cr_assert_eq(profile_stdout(url, "--image-size 32 --batch 16 --batches 4 --workers 1 "
                                "--prefetch 3 --io-inflight 3", &out), 0, "%s", out);
    cr_assert(strstr(out, "; requests in flight 3 per reader as given"), "%s", out);
    free(out);
    srv_stop(&ng);
    free(root);
    tu_rmrf(dir);
    free(dir);
}

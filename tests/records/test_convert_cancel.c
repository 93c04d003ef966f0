/* tests/records/test_convert_cancel.c - sl_convert_config.cancel (issue 28):
 * a stop request ends a conversion with SL_ECANCELED, leaves only whole
 * shards (no temp file, no dataset.json), and a resumed run keeps them and
 * finishes with the same bytes as an uninterrupted one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/records.h"
#include "testutil.h"

#define NIN 200    /* inputs */
#define NSHARD 10  /* 20 inputs each: one chunk per shard */
#define MISSING 70 /* list line of a missing file: shard 3's skipped input */

typedef struct stopper {
    volatile int cancel;
    int skips;
} stopper;

/* The committer reports the missing input while it writes shard 3; asking
 * to stop there lets shard 3 close (its last chunk is the one being
 * committed) and stops before shard 4. */
static void on_skip(void *arg, const char *input, const char *reason)
{
    (void)input, (void)reason;
    stopper *s = arg;
    s->skips++;
    s->cancel = 1;
}

/* NIN tiny PPM images and a list file naming them (line MISSING names a
 * file that does not exist). Returns the list's path (malloc'd). */
static char *make_inputs(const char *dir)
{
    char *list = tu_join(dir, "list.txt");
    FILE *f = fopen(list, "w");
    cr_assert(f);
    for (int i = 0; i < NIN; i++) {
        char name[64];
        snprintf(name, sizeof name, "img%03d.ppm", i);
        if (i != MISSING) {
            uint8_t ppm[64 + 8 * 8 * 3];
            int h = snprintf((char *)ppm, 64, "P6\n8 8\n255\n");
            for (int k = 0; k < 8 * 8 * 3; k++)
                ppm[h + k] = (uint8_t)(i * 7 + k);
            char *p = tu_join(dir, name);
            cr_assert_eq(tu_write_file(p, ppm, (size_t)h + 8 * 8 * 3), 0);
            free(p);
        }
        fprintf(f, "%s\t%d\n", name, i % 3);
    }
    fclose(f);
    return list;
}

static void config(sl_convert_config *c, const char *list, const char *out)
{
    sl_convert_config init = SL_CONVERT_CONFIG_INIT;
    *c = init;
    c->source = SL_SOURCE_LIST;
    c->input = list;
    c->out_dir = out;
    c->name = "train";
    c->shards = NSHARD;
    c->threads = 2;
    c->shuffle = 0;
    c->fsync = 0;
}

static int exists(const char *dir, const char *name)
{
    char *p = tu_join(dir, name);
    struct stat st;
    int ok = stat(p, &st) == 0;
    free(p);
    return ok;
}

static int count_tmp(const char *dir)
{
    char *out = NULL;
    int rc = tu_run(&out, "ls -a '%s' | grep -c 'tmp' || true", dir);
    cr_assert_eq(rc, 0);
    int n = atoi(out);
    free(out);
    return n;
}

Test(convert_cancel, stops_leaving_whole_shards_and_resume_finishes)
{
    char *dir = tu_tmpdir();
    char *list = make_inputs(dir);
    char *out = tu_join(dir, "out"), *ref = tu_join(dir, "ref");
    sl_convert_config c;
    sl_convert_result res;

    stopper s = {0};
    config(&c, list, out);
    c.skipped = on_skip;
    c.skipped_arg = &s;
    c.cancel = &s.cancel;
    cr_assert_eq(sl_convert_run(&c, &res), SL_ECANCELED, "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "canceled: 4 of 10 shards whole"), "%s", sl_errmsg());
    cr_assert_eq(s.skips, 1);
    for (unsigned k = 0; k < NSHARD; k++) {
        char name[64];
        snprintf(name, sizeof name, "train-%05u-of-%05u.tfrecord", k, NSHARD);
        cr_assert_eq(exists(out, name), k < 4, "%s", name);
        strcat(name, ".idx");
        cr_assert_eq(exists(out, name), k < 4, "%s", name);
    }
    cr_assert(!exists(out, "dataset.json"));
    cr_assert_eq(count_tmp(out), 0, "no temp file is left");

    /* a stop request before anything is written: nothing is written */
    char *out0 = tu_join(dir, "out0");
    volatile int now = 1;
    config(&c, list, out0);
    c.cancel = &now;
    cr_assert_eq(sl_convert_run(&c, &res), SL_ECANCELED);
    cr_assert(!exists(out0, "train-00000-of-00010.tfrecord"));

    /* resume keeps the 4 whole shards and writes the rest */
    config(&c, list, out);
    c.resume = 1;
    cr_assert_eq(sl_convert_run(&c, &res), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(res.shards_kept, 4);
    cr_assert_eq(res.records, NIN - 1);
    cr_assert_eq(res.skipped, 1);
    cr_assert(exists(out, "dataset.json"));

    /* the same bytes as a run that was never stopped */
    config(&c, list, ref);
    cr_assert_eq(sl_convert_run(&c, &res), SL_OK, "%s", sl_errmsg());
    for (unsigned k = 0; k < NSHARD; k++) {
        char name[64];
        snprintf(name, sizeof name, "train-%05u-of-%05u.tfrecord", k, NSHARD);
        char *a = tu_join(out, name), *b = tu_join(ref, name);
        size_t la, lb;
        uint8_t *da = tu_read_file(a, &la), *db = tu_read_file(b, &lb);
        cr_assert(da && db && la == lb && !memcmp(da, db, la), "%s differs", name);
        free(da), free(db), free(a), free(b);
    }
    tu_rmrf(dir);
    free(out0), free(out), free(ref), free(list), free(dir);
}

/* A config whose size is not this library's (a caller built against other
 * headers, or one not started from SL_CONVERT_CONFIG_INIT) is refused
 * before anything is read or written. */
Test(convert_cancel, config_of_another_size_is_refused)
{
    sl_convert_config c = SL_CONVERT_CONFIG_INIT;
    cr_assert_eq(c.size, sizeof c);
    c.input = "/nonexistent/sluice-config-size";
    c.out_dir = "/nonexistent/sluice-config-size-out";
    c.size = sizeof c - 8;
    char want[256];
    snprintf(want, sizeof want, "sl_convert_run: config of %zu bytes, this library's is %zu: "
             "rebuild against this sluice's headers", c.size, sizeof c);
    sl_convert_result res;
    cr_assert_eq(sl_convert_run(&c, &res), SL_EINVAL);
    cr_assert_str_eq(sl_errmsg(), want);
}

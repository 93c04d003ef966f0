/*
 * tests/interop/test_tensorboard.c - our event files against TensorBoard
 * itself (tensorboard in the virtualenv, DESIGN.md section 7), both ways:
 *   - scalars written by sl_summary_scalars are loaded by TensorBoard's
 *     EventAccumulator (tests/interop/tb_read.py read): the file version,
 *     every tag, step and value as its scalar dashboard would show them;
 *   - events written by TensorBoard's own EventFileWriter (tb_read.py
 *     write) are read back by sl_events_read.
 *
 * SLUICE_PYTHON names the virtualenv's python (tools/dev sets it); without
 * it, or without tensorboard in it, the tests are skipped.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "train/train.h"

#define SCRIPT SLUICE_SOURCE_DIR "/tests/interop/tb_read.py"
/* Bounded by coreutils timeout rather than Criterion's .timeout (see
 * test_tf_interop.c: Criterion's timer leaks under ASan). */
#define PY_TIMEOUT "timeout 300 "

static const char *python_or_skip(void)
{
    const char *py = getenv("SLUICE_PYTHON");
    if (!py || !*py)
        cr_skip_test("SLUICE_PYTHON not set");
    if (access(py, X_OK) != 0)
        cr_skip_test("SLUICE_PYTHON=%s is not executable", py);
    return py;
}

/* Run tb_read.py MODE DIR; returns its JSON line starting with key
 * (skips the test when tensorboard is missing). */
static cJSON *run_script(const char *py, const char *mode, const char *dir, const char *key)
{
    char *out = NULL;
    int rc = tu_run(&out, PY_TIMEOUT "'%s' '%s' %s '%s'", py, SCRIPT, mode, dir);
    if (rc == 3) {
        free(out);
        cr_skip_test("tensorboard is not installed for %s", py);
    }
    cr_assert_eq(rc, 0, "tb_read.py %s failed (%d):\n%s", mode, rc, out ? out : "");
    cr_assert_not_null(out);
    const char *p = strstr(out, key);
    cr_assert_not_null(p, "no %s line in tb_read output:\n%s", key, out);
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    cJSON *j = cJSON_ParseWithLength(p, len);
    cr_assert_not_null(j, "bad JSON line: %.*s", (int)len, p);
    free(out);
    return j;
}

static float loss_at(int s) { return 2.3f / (1.0f + 0.37f * (float)s); }

/* A summary writer on DIR/run (a new temp DIR). */
static sl_summary *open_run(char **dir, char **logdir)
{
    *dir = tu_tmpdir();
    *logdir = tu_join(*dir, "run");
    sl_summary *s = NULL;
    cr_assert_eq(sl_summary_open(*logdir, &s), SL_OK, "%s", sl_errmsg());
    return s;
}

Test(interop_tensorboard, tensorboard_reads_ours)
{
    const char *py = python_or_skip();
    char *dir, *logdir;
    sl_summary *s = open_run(&dir, &logdir);
    const char *tags[] = {"train/loss", "train/lr"};
    for (int step = 0; step < 7; step++) {
        double v[2] = {loss_at(step), 0.1 * (step + 1) / 7.0};
        cr_assert_eq(sl_summary_scalars(s, step * 50, tags, v, 2, NULL), SL_OK, "%s",
                     sl_errmsg());
    }
    const char *eval[] = {"eval/top1", "eval/top5"};
    double ev[2] = {0.8125, 0.96875};
    cr_assert_eq(sl_summary_scalars(s, 300, eval, ev, 2, "{\"epoch\": 1}"), SL_OK);
    cr_assert_eq(sl_summary_close(s), SL_OK);

    cJSON *j = run_script(py, "read", logdir, "{\"tb\":");
    const cJSON *tb = cJSON_GetObjectItem(j, "tb");
    const cJSON *fv = cJSON_GetObjectItem(tb, "file_version");
    cr_assert(cJSON_IsNumber(fv) && fv->valuedouble == 2.0, "file_version not 2");
    const cJSON *sc = cJSON_GetObjectItem(tb, "scalars");
    cr_assert_eq(cJSON_GetArraySize(sc), 4, "tags: train/loss, train/lr, eval/top1, eval/top5");

    const cJSON *loss = cJSON_GetObjectItem(sc, "train/loss");
    const cJSON *lr = cJSON_GetObjectItem(sc, "train/lr");
    cr_assert_eq(cJSON_GetArraySize(loss), 7);
    cr_assert_eq(cJSON_GetArraySize(lr), 7);
    for (int i = 0; i < 7; i++) {
        const cJSON *a = cJSON_GetArrayItem(loss, i), *b = cJSON_GetArrayItem(lr, i);
        cr_assert_eq(cJSON_GetArrayItem(a, 0)->valuedouble, i * 50);
        cr_assert_eq(cJSON_GetArrayItem(b, 0)->valuedouble, i * 50);
        /* TensorBoard hands the float32 back as a double: exact. */
        cr_assert_eq(cJSON_GetArrayItem(a, 1)->valuedouble, (double)loss_at(i));
        cr_assert_eq(cJSON_GetArrayItem(b, 1)->valuedouble, (double)(float)(0.1 * (i + 1) / 7.0));
        cr_assert(cJSON_GetArrayItem(a, 2)->valuedouble > 1.5e9, "wall_time");
    }
    const cJSON *top1 = cJSON_GetArrayItem(cJSON_GetObjectItem(sc, "eval/top1"), 0);
    const cJSON *top5 = cJSON_GetArrayItem(cJSON_GetObjectItem(sc, "eval/top5"), 0);
    cr_assert_eq(cJSON_GetArrayItem(top1, 0)->valuedouble, 300);
    cr_assert_eq(cJSON_GetArrayItem(top1, 1)->valuedouble, 0.8125);
    cr_assert_eq(cJSON_GetArrayItem(top5, 1)->valuedouble, 0.96875);
    cJSON_Delete(j);
    free(logdir);
    tu_rmrf(dir);
    free(dir);
}

/* Text (sl_summary_text: train's parallelism/reason) is what TensorBoard's
 * text plugin claims, at its step, beside the scalars. */
Test(interop_tensorboard, tensorboard_reads_our_text)
{
    const char *py = python_or_skip();
    char *dir, *logdir;
    sl_summary *s = open_run(&dir, &logdir);
    const char *tags[] = {"parallelism/replicas"};
    double v = 2;
    cr_assert_eq(sl_summary_scalars(s, 0, tags, &v, 1, NULL), SL_OK);
    const char *why = "2 replicas x 1 thread on 2 cores: 16 images each; \"quoted\" \u00e9";
    cr_assert_eq(sl_summary_text(s, 0, "parallelism/reason", why), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_summary_text(s, 5, "parallelism/reason", "later"), SL_OK);
    cr_assert_eq(sl_summary_close(s), SL_OK);

    cJSON *j = run_script(py, "read", logdir, "{\"tb\":");
    const cJSON *tb = cJSON_GetObjectItem(j, "tb");
    const cJSON *sc = cJSON_GetObjectItem(tb, "scalars");
    cr_assert_eq(cJSON_GetArraySize(sc), 1, "the text is no scalar");
    const cJSON *tx = cJSON_GetObjectItem(cJSON_GetObjectItem(tb, "texts"), "parallelism/reason");
    cr_assert_eq(cJSON_GetArraySize(tx), 2, "the text plugin's tag");
    const cJSON *a = cJSON_GetArrayItem(tx, 0), *b = cJSON_GetArrayItem(tx, 1);
    cr_assert_eq(cJSON_GetArrayItem(a, 0)->valuedouble, 0);
    cr_assert_str_eq(cJSON_GetArrayItem(a, 1)->valuestring, why);
    cr_assert_eq(cJSON_GetArrayItem(b, 0)->valuedouble, 5);
    cr_assert_str_eq(cJSON_GetArrayItem(b, 1)->valuestring, "later");
    cJSON_Delete(j);
    free(logdir);
    tu_rmrf(dir);
    free(dir);
}

typedef struct got {
    int n;
    int64_t step[16];
    char tag[16][8];
    float value[16];
    double wall[16];
} got;

static int collect(void *ctx, int64_t step, double wall_time, const char *tag, float value)
{
    got *g = ctx;
    cr_assert_lt(g->n, 16);
    g->step[g->n] = step;
    snprintf(g->tag[g->n], sizeof g->tag[0], "%s", tag);
    g->value[g->n] = value;
    g->wall[g->n] = wall_time;
    g->n++;
    return 0;
}

Test(interop_tensorboard, we_read_tensorboards)
{
    const char *py = python_or_skip();
    char *dir = tu_tmpdir();
    cJSON *j = run_script(py, "write", dir, "{\"tb_written\":");
    cJSON_Delete(j);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *de;
    char *path = NULL;
    while ((de = readdir(d)))
        if (strstr(de->d_name, "tfevents"))
            path = tu_join(dir, de->d_name);
    closedir(d);
    cr_assert_not_null(path, "no event file written");

    got g = {0};
    cr_assert_eq(sl_events_read(path, collect, &g), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(g.n, 10);
    for (int s = 0; s < 5; s++) {
        cr_assert_str_eq(g.tag[2 * s], "w/a");
        cr_assert_str_eq(g.tag[2 * s + 1], "w/b");
        cr_assert_eq(g.step[2 * s], s);
        cr_assert_eq(g.value[2 * s], (float)s / 4.0f);
        cr_assert_eq(g.value[2 * s + 1], (float)-s);
        cr_assert_eq(g.wall[2 * s], 1.5e9 + s);
    }
    free(path);
    tu_rmrf(dir);
    free(dir);
}

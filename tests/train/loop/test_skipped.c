/* tests/train/loop/test_skipped.c - bad records are never dropped without a
 * word (issue 38 items 6 and 8): sl_eval_run counts every good record once
 * (a bad one is left out, not replaced by its neighbour), and fails naming
 * the first bad record when all are; sl_train_run and `sluice train` /
 * `sluice eval` count the skipped records on the progress lines, in the
 * summary, --json, metrics.jsonl and TensorBoard, and name them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_testdata.h"
#include "records/records.h"
#include "testutil.h"
#include "train/train.h"

#define N 64
/* bad records of the train split: ids 3, 17 (shard 0, records 3 and 17)
 * and 40 (shard 1, record 19); shards of 21 and 43 */
static const uint64_t bad_ids[3] = {3, 17, 40};

static void make_data(pl_dataset *d, int with_bad)
{
    uint8_t bad[N] = {0};
    if (with_bad) {
        bad[bad_ids[0]] = PL_BAD_NOT_JPEG;
        bad[bad_ids[1]] = PL_BAD_TRUNCATED;
        bad[bad_ids[2]] = PL_BAD_CRC;
    }
    pl_make_dataset(d, N, 2, 0, bad);
    cr_assert_eq(d->shard_n[0], 21);
}

static void eval_config(sl_pipeline_config *c, const char *dir)
{
    sl_pipeline_config init = SL_PIPELINE_CONFIG_INIT;
    *c = init;
    c->data = dir;
    c->split = "train";
    c->height = c->width = 16;
    c->batch = 8;
    c->workers = 2;
    c->transform = SL_TRANSFORM_EVAL;
    c->shuffle = SL_SHUFFLE_NONE;
    c->shuffle_files = 0;
    c->layout = SL_LAYOUT_NHWC_F32;
}

/* Label rank of each record of dir's train split under m (the oracle:
 * the model's own forward on the pipeline's batches, per record id). */
static void ranks_by_id(sl_model *m, sl_exec *e, const char *dir, int rank1[N])
{
    sl_pipeline_config c;
    eval_config(&c, dir);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const float *lg;
        cr_assert_eq(sl_model_forward(m, e, b->data, (int)b->n, 0, &lg), SL_OK, "%s",
                     sl_errmsg());
        for (unsigned i = 0; i < b->n; i++) {
            const float *row = lg + (size_t)i * 10;
            int l = b->labels[i], r = 0;
            for (int j = 0; j < 10; j++)
                r += row[j] > row[l] || (row[j] == row[l] && j < l);
            rank1[b->record_ids[i]] = r < 1;
        }
        sl_pipeline_release(p, b);
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    sl_pipeline_destroy(p);
}

Test(train_skipped, eval_counts_each_good_record_once)
{
    pl_dataset clean, bad;
    make_data(&clean, 0);
    make_data(&bad, 1);
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = SL_ARCH_RESNET20;
    mc.width = 4;
    mc.classes = 10;
    mc.seed = 9;
    sl_model *m;
    sl_exec *e;
    cr_assert_eq(sl_exec_create(SL_BACKEND_CPU, 1, -1, &e), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_create(&mc, 8, 16, 16, &m), SL_OK, "%s", sl_errmsg());
    int correct[N];
    ranks_by_id(m, e, clean.dir, correct);
    int64_t want = 0;
    for (uint64_t id = 0; id < N; id++)
        want += correct[id] && id != bad_ids[0] && id != bad_ids[1] && id != bad_ids[2];

    sl_pipeline_config c;
    eval_config(&c, bad.dir);
    sl_eval_result er;
    cr_assert_eq(sl_eval_run(m, e, &c, &er), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(er.images, N - 3, "images %lld: the good records", (long long)er.images);
    cr_assert_eq(er.skipped, 3);
    cr_assert(strstr(er.skipped_first, "train-0000") && strstr(er.skipped_first, "record "),
              "%s", er.skipped_first);
    cr_assert_eq(llround(er.top1 * (double)er.images), want,
                 "top1 %.6f of %lld: %lld right, the oracle says %lld", er.top1,
                 (long long)er.images, llround(er.top1 * (double)er.images), (long long)want);
    cr_assert_float_eq(er.top1, (double)want / (N - 3), 1e-12);

    /* every record bad: an error naming the first, not a top1 of 0 */
    pl_dataset all;
    uint8_t allbad[16];
    memset(allbad, PL_BAD_NOT_JPEG, sizeof allbad);
    pl_make_dataset(&all, 16, 1, 0, allbad);
    eval_config(&c, all.dir);
    c.workers = 1;
    cr_assert_eq(sl_eval_run(m, e, &c, &er), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "all 16 records are bad") &&
              strstr(sl_errmsg(), "train-00000-of-00001.tfrecord: record 0 @") &&
              strstr(sl_errmsg(), "not a JPEG"), "%s", sl_errmsg());
    sl_model_destroy(m);
    sl_exec_destroy(e);
    pl_dataset_free(&all);
    pl_dataset_free(&clean);
    pl_dataset_free(&bad);
}

/* The validation split: 16 records, ids 5 and 9 bad (not JPEGs), copied in
 * beside the train shards as TensorFlow names it. */
static void add_validation(const pl_dataset *d, pl_dataset *v)
{
    uint8_t bad[16] = {0};
    bad[5] = bad[9] = PL_BAD_NOT_JPEG;
    pl_make_dataset(v, 16, 1, 0, bad);
    cr_assert_eq(tu_run(NULL, "cp %s %s/validation-00000-of-00001.tfrecord && cp %s.idx "
                        "%s/validation-00000-of-00001.tfrecord.idx", v->shard_path[0], d->dir,
                        v->shard_path[0], d->dir), 0);
}

/* The line of text that holds key (up to its newline, static buffer). */
static const char *line_of(const char *text, const char *key)
{
    static char line[1024];
    const char *p = strstr(text, key);
    cr_assert_not_null(p, "no line with '%s' in:\n%s", key, text);
    while (p > text && p[-1] != '\n')
        p--;
    size_t n = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)n, p);
    return line;
}

static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Two epochs of resnet20 (width 4) on d at 16 x 16, batch 8, evaluating
 * the validation split after each; the permutation of --shuffle global
 * puts every record once in each epoch. Progress into the file prog. */
static void train_config(sl_train_config *t, const pl_dataset *d, const char *prog)
{
    sl_train_config_init(t);
    t->data.data = d->dir;
    t->data.split = "train";
    t->data.height = t->data.width = 16;
    t->data.batch = 8;
    t->data.workers = 2;
    t->data.shuffle = SL_SHUFFLE_GLOBAL; /* each epoch a permutation: 3 bad records each */
    t->data.seed = 4;
    t->eval_split = "validation";
    t->model.arch = SL_ARCH_RESNET20;
    t->model.width = 4;
    t->model.classes = 10;
    t->threads = 1;
    t->epochs = 2;
    t->base_lr = 0.4;
    t->progress = fopen(prog, "w");
    cr_assert_not_null(t->progress);
}

typedef struct tags {
    double train_skipped, eval_skipped;
    int n_train, n_eval;
} tags;

static int on_scalar(void *ctx, int64_t step, double wall, const char *tag, float value)
{
    (void)step, (void)wall;
    tags *t = ctx;
    if (!strcmp(tag, "train/skipped_records"))
        t->train_skipped = value, t->n_train++;
    if (!strcmp(tag, "eval/skipped_records"))
        t->eval_skipped = value, t->n_eval++;
    return 0;
}

Test(train_skipped, train_counts_and_names_them)
{
    pl_dataset d, v;
    make_data(&d, 1);
    add_validation(&d, &v);
    char *tmp = tu_tmpdir(), *log = tu_join(tmp, "log"), *prog = tu_join(tmp, "progress.txt");
    sl_train_config t;
    train_config(&t, &d, prog);
    t.logdir = log;
    t.log_every = 2;
    sl_train_result res;
    cr_assert_eq(sl_train_run(&t, &res), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    cr_assert_eq(res.steps, 16);
    cr_assert_eq(res.skipped, 6, "two epochs of 3 bad records: %lld", (long long)res.skipped);
    cr_assert(strstr(res.skipped_first, "train-0000"), "%s", res.skipped_first);
    cr_assert_eq(res.eval_skipped, 2);
    cr_assert(strstr(res.eval_skipped_first, "validation-00000-of-00001.tfrecord: record "),
              "%s", res.eval_skipped_first);

    size_t len;
    char *text = (char *)tu_read_file(prog, &len);
    cr_assert_not_null(text);
    /* named once each (the pipeline keeps the first 16), with file and record */
    cr_assert_eq(count_lines(text, "train: replica 0 skipped a bad record"), 3, "%s", text);
    cr_assert(strstr(text, "train-00000-of-00002.tfrecord: record 3 @") &&
              strstr(text, "train-00000-of-00002.tfrecord: record 17 @") &&
              strstr(text, "train-00001-of-00002.tfrecord: record 19 @"), "%s", text);
    /* counted on the progress lines: 3 by the end of epoch 1, 6 at the end */
    const char *l8 = line_of(text, "step 8/16 ");
    size_t n8 = strlen(l8);
    cr_assert(n8 > 10 && !strcmp(l8 + n8 - 10, " skipped 3"), "%s", l8);
    const char *l16 = line_of(text, "step 16/16 ");
    size_t n16 = strlen(l16);
    cr_assert(n16 > 10 && !strcmp(l16 + n16 - 10, " skipped 6"), "%s", l16);
    /* the evaluations left the 2 bad validation records out */
    cr_assert_eq(count_lines(text, "(14 images,"), 2, "%s", text);
    cr_assert_eq(count_lines(text, "; 2 bad records left out, the first: "), 2, "%s", text);
    free(text);

    /* metrics.jsonl and TensorBoard have both scalars */
    char *jl = tu_join(log, "metrics.jsonl");
    text = (char *)tu_read_file(jl, &len);
    cr_assert_not_null(text);
    cr_assert(strstr(text, "\"train/skipped_records\":6"), "%s", text);
    cr_assert(strstr(text, "\"eval/skipped_records\":2"), "%s", text);
    free(text);
    free(jl);
    char *ev = tu_events_file(log);
    tags tg = {0};
    cr_assert_eq(sl_events_read(ev, on_scalar, &tg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(tg.n_train, 8, "one per progress line");
    cr_assert_eq(tg.train_skipped, 6);
    cr_assert_eq(tg.n_eval, 2);
    cr_assert_eq(tg.eval_skipped, 2);
    free(ev);
    tu_rmrf(tmp);
    free(tmp);
    free(log);
    free(prog);
    pl_dataset_free(&v);
    pl_dataset_free(&d);
}

/* Mirrored over two replica threads (the records split between them): the
 * count is the sum over the replicas, each names what its own share met,
 * and the evaluation's shares are summed as well. */
Test(train_skipped, mirrored_sums_the_replicas)
{
    pl_dataset d, v;
    make_data(&d, 1);
    add_validation(&d, &v);
    char *tmp = tu_tmpdir(), *prog = tu_join(tmp, "progress.txt");
    sl_train_config t;
    train_config(&t, &d, prog);
    t.data.workers = 1;
    t.strategy = SL_STRATEGY_MIRRORED;
    t.replicas = 2;
    t.log_every = 4;
    sl_train_result res;
    cr_assert_eq(sl_train_run(&t, &res), SL_OK, "%s", sl_errmsg());
    fclose(t.progress);
    cr_assert_eq(res.world, 2);
    cr_assert_eq(res.skipped, 6, "%lld", (long long)res.skipped);
    cr_assert_eq(res.eval_skipped, 2);
    size_t len;
    char *text = (char *)tu_read_file(prog, &len);
    cr_assert_not_null(text);
    int named = count_lines(text, "train: replica 0 skipped a bad record") +
                count_lines(text, "train: replica 1 skipped a bad record");
    /* once by each replica that met it (the epochs' permutations deal a
     * record to either) */
    cr_assert(named >= 3 && named <= 6, "%d names:\n%s", named, text);
    cr_assert(strstr(text, "train-00000-of-00002.tfrecord: record 3 @") &&
              strstr(text, "train-00000-of-00002.tfrecord: record 17 @") &&
              strstr(text, "train-00001-of-00002.tfrecord: record 19 @"), "%s", text);
    const char *l16 = line_of(text, "step 16/16 ");
    cr_assert(strstr(l16, " skipped 6 allreduce-wait"), "%s", l16);
    cr_assert_eq(count_lines(text, "(14 images,"), 2, "%s", text);
    free(text);
    tu_rmrf(tmp);
    free(tmp);
    free(prog);
    pl_dataset_free(&v);
    pl_dataset_free(&d);
}

/* The CLI: sluice train's summary and --json, sluice eval's line and
 * --json (a clean run says nothing of skipped records but the zeros). */
Test(train_skipped, cli_train_and_eval_report_them)
{
    pl_dataset d, v;
    make_data(&d, 1);
    add_validation(&d, &v);
    char *tmp = tu_tmpdir(), *out = NULL;
    int rc = tu_run(&out, "%s train --data %s --image-size 16 --batch 8 --width 4 --classes 10 "
                    "--epochs 1 --shuffle global --threads 1 --ckpt-dir %s/ck --json 2>&1",
                    tu_sluice(), d.dir, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "train: 3 bad records skipped (the next good record took each one's "
                     "place; counted every epoch), the first: "), "%s", out);
    cr_assert(strstr(out, "train: the last evaluation left out 2 bad records of validation"),
              "%s", out);
    cr_assert(strstr(out, "\"skipped_records\": 3, \"eval_skipped_records\": 2,"), "%s", out);
    free(out);
    out = NULL;
    rc = tu_run(&out, "%s eval --data %s --split validation --checkpoint "
                "%s/ck/ckpt-000000008.safetensors --batch 8 --threads 1 --json 2>&1",
                tu_sluice(), d.dir, tmp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\"images\":14") &&
                  strstr(out, "\"skipped_records\":2,\"parallelism\":{"),
              "%s", out);
    cr_assert(strstr(out, "eval: 2 bad records left out (top1 and top5 count the 14 others), "
                     "the first: ") && strstr(out, "validation-00000-of-00001.tfrecord: record "),
              "%s", out);
    free(out);
    out = NULL;
    /* the eval of an all-bad split fails naming the first record */
    pl_dataset all;
    uint8_t allbad[8];
    memset(allbad, PL_BAD_NOT_JPEG, sizeof allbad);
    pl_make_dataset(&all, 8, 1, 0, allbad);
    rc = tu_run(&out, "%s eval --data %s --split train --checkpoint "
                "%s/ck/ckpt-000000008.safetensors --batch 8 --threads 1 2>&1", tu_sluice(),
                all.dir, tmp);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "all 8 records are bad; the first: ") && strstr(out, "record 0 @"),
              "%s", out);
    free(out);
    tu_rmrf(tmp);
    free(tmp);
    pl_dataset_free(&all);
    pl_dataset_free(&v);
    pl_dataset_free(&d);
}

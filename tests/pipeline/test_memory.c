/*
 * tests/pipeline/test_memory.c - pipeline/memory.c: the estimate of each
 * part against the stages' own sizes, the fit's order of shrinking, the
 * refusals, and a run's measured memory against the budget.
 *
 *   parts     each part from its formula (memory.c's DESIGN) on a dataset
 *             whose record sizes the test knows (pl_dataset)
 *   fit       prefetch first, then workers, then the read window; a setting
 *             given is not shrunk and is named when nothing else fits
 *   refuse    a budget below what cannot shrink: SL_EINVAL naming every
 *             part; create with such a memory_budget fails the same way
 *   measured  a run under a budget: the reader window's peak within the
 *             read window part, the process's peak RSS growth (forked
 *             child, getrusage) within the budget, and the batches
 *             byte-identical to a run without a budget (pread, not mmap)
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pipeline/graph_int.h" /* sl_pipeline_window_peak */
#include "pipeline_testdata.h"
#include "records/records.h"
#include "testutil.h"

static pl_dataset g_d;

static void setup(void)
{
    unsetenv("SLUICE_READ");
    pl_make_dataset(&g_d, 300, 3, 0, NULL);
}

static void teardown(void)
{
    pl_dataset_free(&g_d);
}

TestSuite(pipeline_memory, .init = setup, .fini = teardown, .timeout = 120);

static void config(sl_pipeline_config *c)
{
    pl_config(c, &g_d);
    c->read_window_bytes = 1 << 20;
    c->workers = 2;
    c->prefetch = 4;
    c->epochs = 2;
}

Test(pipeline_memory, parts)
{
    sl_pipeline_config c;
    config(&c);
    sl_pipeline_memory m;
    cr_assert_eq(sl_pipeline_memory_estimate(&c, &m), SL_OK, "%s", sl_errmsg());
    uint64_t sample = 20 * 24 * 3 * 4;
    cr_assert_eq(m.part[SL_MEM_RING], 4 * 16 * (sample + 16));
    cr_assert_eq(m.part[SL_MEM_INDEX], 300 * sizeof(sl_index_entry));
    cr_assert_eq(m.records, 300);
    cr_assert_eq(m.data_bytes, g_d.total_bytes);
    cr_assert_eq(m.max_record, g_d.max_unit);
    cr_assert(m.mapped && !m.remote);
    cr_assert_eq(m.part[SL_MEM_REMOTE], 0);
    uint64_t unit = 8 * g_d.max_unit, window = unit > (1u << 20) ? unit : 1u << 20;
    cr_assert_eq(m.part[SL_MEM_READ_WINDOW], window); /* mapped: no pool */
    uint64_t scratch = 3 * (4 * 20 * 24 + SL_MAX_PIXELS_DEFAULT / 64);
    cr_assert_eq(m.part[SL_MEM_DECODE], 2 * (g_d.max_unit + scratch));
    /* 100 records of the mean size, H(8) = 2.718 units each, capped by the data */
    double h8 = 1 + 1 / 2. + 1 / 3. + 1 / 4. + 1 / 5. + 1 / 6. + 1 / 7. + 1 / 8.;
    double held = h8 * 100 * (double)(g_d.total_bytes / 300);
    cr_assert_eq(m.shuffle_records, 100);
    uint64_t want = (uint64_t)held < g_d.total_bytes ? (uint64_t)held : g_d.total_bytes;
    cr_assert_eq(m.part[SL_MEM_SHUFFLE], want + 100 * 8);
    uint64_t sum = 0;
    for (int i = 0; i < SL_MEM_NPARTS; i++)
        sum += m.part[i];
    cr_assert_eq(m.total, sum);

    /* read by pread: the units own buffers, recycled through a pool */
    c.memory_budget = (uint64_t)1 << 40;
    sl_pipeline_memory p;
    cr_assert_eq(sl_pipeline_memory_estimate(&c, &p), SL_OK);
    cr_assert(!p.mapped);
    cr_assert_eq(p.part[SL_MEM_READ_WINDOW], window + (1u << 20));
    cr_assert_eq(p.part[SL_MEM_DECODE], 2 * (g_d.max_unit + unit + scratch));

    /* no shuffle buffer under NONE; global: a record a unit and a permutation */
    c.shuffle = SL_SHUFFLE_GLOBAL;
    cr_assert_eq(sl_pipeline_memory_estimate(&c, &p), SL_OK);
    cr_assert_eq(p.part[SL_MEM_SHUFFLE], 0);
    cr_assert_eq(p.part[SL_MEM_INDEX], 300 * sizeof(sl_index_entry) + 300 * 8);
    cr_assert_eq(p.shuffle_records, 1);
}

/* The fit of c in budget with fixed; what into what. */
static int fit(sl_pipeline_config *c, uint64_t budget, unsigned fixed, sl_pipeline_memory *m,
               char *what, size_t cap)
{
    sl_memory_fit f = {.budget = budget, .fixed = fixed, .cmd = "test: budget"};
    return sl_pipeline_memory_fit(c, &f, m, what, cap);
}

Test(pipeline_memory, fit)
{
    sl_pipeline_config c, t;
    config(&c);
    c.workers = 4;
    c.prefetch = 8;
    sl_pipeline_memory m;
    char what[160];
    /* what the estimate is with prefetch at its floor (and reads by pread) */
    t = c;
    t.prefetch = 2;
    t.memory_budget = 1;
    sl_pipeline_memory at2;
    cr_assert_eq(sl_pipeline_memory_estimate(&t, &at2), SL_OK);

    t = c;
    cr_assert_eq(fit(&t, at2.total, 0, &m, what, sizeof what), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(t.prefetch, 2);
    cr_assert_eq(t.workers, 4);
    cr_assert_str_eq(what, "prefetch 8 -> 2");
    cr_assert_eq(m.total, at2.total);
    cr_assert_eq(t.memory_budget, at2.total);

    /* a byte less: prefetch at its floor, then a worker goes */
    t = c;
    cr_assert_eq(fit(&t, at2.total - 1, 0, &m, what, sizeof what), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(t.prefetch, 2);
    cr_assert_eq(t.workers, 3);
    cr_assert_str_eq(what, "prefetch 8 -> 2, workers 4 -> 3");
    cr_assert_leq(m.total, at2.total - 1);

    /* prefetch given: workers go first; the estimate never passes the budget */
    t = c;
    sl_pipeline_memory full;
    t.memory_budget = 1;
    cr_assert_eq(sl_pipeline_memory_estimate(&t, &full), SL_OK);
    t = c;
    cr_assert_eq(fit(&t, full.total - 1, SL_MEM_FIXED_PREFETCH, &m, what, sizeof what), SL_OK);
    cr_assert_eq(t.prefetch, 8);
    cr_assert_eq(t.workers, 3);

    /* everything given and too small: refused, the settings named */
    t = c;
    cr_assert_eq(fit(&t, full.total - 1,
                     SL_MEM_FIXED_PREFETCH | SL_MEM_FIXED_WORKERS | SL_MEM_FIXED_READ_WINDOW,
                     &m, what, sizeof what),
                 SL_EINVAL);
    const char *e = sl_errmsg();
    cr_assert(strstr(e, "test: budget") && strstr(e, "prefetch 8 as given") &&
                  strstr(e, "4 workers as given") && strstr(e, "the read window as given"),
              "%s", e);
    cr_assert_eq(t.prefetch, 8, "a refused fit leaves the config as it was");

    /* the budget of several pipelines is shared */
    t = c;
    sl_memory_fit two = {.budget = 2 * at2.total, .pipelines = 2};
    cr_assert_eq(sl_pipeline_memory_fit(&t, &two, &m, what, sizeof what), SL_OK);
    cr_assert_eq(t.prefetch, 2);
    cr_assert_eq(t.workers, 4);
    cr_assert_eq(t.memory_budget, at2.total);

    /* an evaluation pipeline beside each (sluice train): counted as the
     * estimate less its shuffle buffer, so the same budget shrinks further */
    t = c;
    two.eval_beside = 1;
    cr_assert_eq(sl_pipeline_memory_fit(&t, &two, &m, what, sizeof what), SL_OK);
    cr_assert_eq(m.eval, m.total - m.part[SL_MEM_SHUFFLE]);
    cr_assert_leq(2 * (m.total + m.eval), two.budget);
    cr_assert(t.workers < 4, "the workers did not shrink beyond the fit without it: %s", what);
    two.eval_beside = 0;
    cr_assert_eq(sl_pipeline_memory_estimate(&c, &m), SL_OK);
    cr_assert_eq(m.eval, 0, "an estimate has no evaluation beside it");
}

Test(pipeline_memory, refuse)
{
    sl_pipeline_config c;
    config(&c);
    sl_pipeline_memory m;
    char what[160];
    cr_assert_eq(fit(&c, 64 << 10, 0, &m, what, sizeof what), SL_EINVAL);
    const char *e = sl_errmsg();
    const char *want[] = {"test: budget 64 KiB", "read window", "(100 records of",
                          "decode workers", "(1), prefetch ring", "(2 batches)", "index",
                          "what cannot shrink: the shuffle buffer of 100 records",
                          "Give a budget of"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(e, want[i]), "'%s' not in: %s", want[i], e);
    cr_assert(!strstr(e, "remote"), "local data: no remote part: %s", e);

    /* create refuses a memory_budget below its estimate, naming the parts */
    config(&c);
    c.memory_budget = 64 << 10;
    sl_pipeline *p = NULL;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_EINVAL);
    cr_assert_null(p);
    e = sl_errmsg();
    cr_assert(strstr(e, "memory_budget 64 KiB") && strstr(e, "KiB (4 batches)") &&
                  strstr(e, "shuffle buffer"),
              "%s", e);
}

/* In a child (tu_in_child): a run of c, and its own peak RSS from where
 * it starts: {growth KiB, peak KiB, the read window's peak bytes}, -1s
 * when the pipeline failed. */
static void bounded_run(void *arg, int fd)
{
    const sl_pipeline_config *c = arg;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    sl_pipeline *p;
    long v[3] = {-1, -1, -1};
    if (sl_pipeline_create(c, &p) == SL_OK) {
        sl_batch *b;
        while (sl_pipeline_next(p, &b) == SL_OK)
            sl_pipeline_release(p, b);
        v[2] = (long)sl_pipeline_window_peak(p);
        sl_pipeline_destroy(p);
        getrusage(RUSAGE_SELF, &r1);
        v[0] = r1.ru_maxrss - r0.ru_maxrss;
        v[1] = r1.ru_maxrss;
    }
    if (write(fd, v, sizeof v) != (ssize_t)sizeof v)
        _exit(2);
}

Test(pipeline_memory, measured)
{
    sl_pipeline_config c;
    config(&c);
    c.workers = 3;
    c.prefetch = 6;
    pl_run plain = {0}, bounded = {0};
    pl_run_config(&c, &plain, 0);

    /* the budget of prefetch at its floor and the workers asked */
    sl_pipeline_config t = c;
    t.prefetch = 2;
    t.memory_budget = 1;
    sl_pipeline_memory want;
    cr_assert_eq(sl_pipeline_memory_estimate(&t, &want), SL_OK);
    sl_pipeline_memory m;
    char what[160];
    cr_assert_eq(fit(&c, want.total, 0, &m, what, sizeof what), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(c.prefetch, 2, "%s", what);
    cr_assert_eq(c.workers, 3, "%s", what);

    size_t n;
    long v[3];
    char *got = tu_in_child(bounded_run, &c, &n);
    cr_assert_eq(n, sizeof v, "the child wrote %zu bytes", n);
    memcpy(v, got, sizeof v);
    free(got);
    cr_assert_geq(v[0], 0, "the run under the budget failed");
    cr_assert_leq((uint64_t)v[2], m.part[SL_MEM_READ_WINDOW], "window peak %ld > %llu", v[2],
                  (unsigned long long)m.part[SL_MEM_READ_WINDOW]);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (a sanitizer's shadow memory grows with every allocation) */
    cr_assert_leq((uint64_t)v[0] * 1024, m.total, "peak RSS grew by %ld KiB, budget %llu B",
                  v[0], (unsigned long long)m.total);
#endif

    /* the same batches, read by pread under the budget */
    pl_run_config(&c, &bounded, 0);
    cr_assert_eq(bounded.nb, plain.nb);
    cr_assert_eq(memcmp(bounded.digest, plain.digest, plain.nb * sizeof *plain.digest), 0);
    pl_run_free(&plain);
    pl_run_free(&bounded);
}

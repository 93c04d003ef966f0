/* tests/pipeline/test_split.c - SL_SPLIT_RECORDS (rank r of W keeps world
 * 1's input positions p with p % W == r under NONE and GLOBAL, range r of
 * each epoch cut in W under BUFFER) and sl_pipeline_create_at.
 *
 *   - the order alone (no data): every rank's units are world 1's records at
 *     its positions, strided units cover exactly their records; BUFFER's
 *     ranges are contiguous slices of world 1's epochs, floor or ceil of
 *     R / W records, the stride's counts at every epoch's end, and the
 *     ranks' units tile every shard's bytes once an epoch;
 *   - the union property (NONE, GLOBAL): rank batches k of batch b, taken
 *     together, are world 1's batch k of batch b x W (ids, epochs, labels,
 *     sample bytes), over epochs whose boundaries fall inside batches, with
 *     and without drop_remainder, with bad records refilled; rank r's j-th
 *     sample is world 1's j*W + r;
 *   - disjointness and coverage in every mode, the stats' shares, GLOBAL
 *     reading each record's bytes exactly once over all ranks;
 *   - create_at == the uninterrupted stream, aligned and not, every mode;
 *     the W -> W' resume mapping; a split rank's state resume;
 *   - config errors.
 * Datasets are ~100 small JPEGs; every test runs in well under a second. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/graph_int.h"
#include "pipeline_testdata.h"
#include "testutil.h"

/* ------------------------------------------------------------ the order */

/* An in-memory set of shards with counts[i] records (index entries only). */
static void fake_set(sl_source_set *s, const uint64_t *counts, size_t n)
{
    uint64_t seed = 99;
    memset(s, 0, sizeof *s);
    s->shards = calloc(n, sizeof *s->shards);
    cr_assert_not_null(s->shards);
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        sl_shard_info *sh = &s->shards[i];
        sh->nrec = counts[i];
        sh->first_id = s->total;
        sh->idx = malloc((counts[i] ? counts[i] : 1) * sizeof *sh->idx);
        cr_assert_not_null(sh->idx);
        for (uint64_t r = 0, off = 0; r < counts[i]; r++) {
            sh->idx[r].offset = off;
            sh->idx[r].size = 16 + tu_rand(&seed) % 50;
            off += sh->idx[r].size;
            sh->bytes = off;
        }
        s->total += counts[i];
    }
}

/* The records (epoch << 40 | id) of an order, as a stream; checks each
 * unit's shape on the way (stride, byte range, seq, first_pos). *bytes
 * (may be NULL) gets the units' bytes added. */
static uint64_t *order_stream_bytes(const sl_source_set *s, sl_shuffle_mode mode, uint32_t rank,
                                    uint32_t world, int64_t epochs, size_t *n, uint64_t *bytes)
{
    sl_order_config oc = {.src = s, .mode = mode, .cycle = 3, .block = 5, .shuffle_files = 1,
                          .seed = 11, .epochs = epochs, .split_rank = rank,
                          .split_world = world};
    sl_order *o;
    cr_assert_eq(sl_order_create(&oc, &o), SL_OK, "%s", sl_errmsg());
    size_t cap = (size_t)(s->total * (uint64_t)epochs + 1), m = 0;
    uint64_t *v = malloc(cap * sizeof *v), seq = 0;
    cr_assert_not_null(v);
    sl_read_unit u;
    while (sl_order_next_unit(o, &u) == SL_OK) {
        const sl_shard_info *sh = &s->shards[u.shard];
        cr_assert_eq(u.seq, seq++);
        cr_assert_eq(u.first_pos, m, "positions count this rank's records only");
        cr_assert_geq(u.nrec, 1);
        uint32_t stride = world > 1 && mode != SL_SHUFFLE_BUFFER ? world : 1; /* BUFFER cuts */
        cr_assert(u.nrec == 1 ? u.stride <= 1 : u.stride == stride,
                  "unit of %u records with stride %u", u.nrec, u.stride);
        if (bytes)
            *bytes += u.bytes;
        uint64_t last = sl_unit_rec(&u, u.nrec - 1);
        cr_assert_lt(last, sh->nrec);
        cr_assert_eq(u.offset, sh->idx[u.rec].offset);
        cr_assert_eq(u.bytes, sh->idx[last].offset + sh->idx[last].size - u.offset);
        for (uint32_t i = 0; i < u.nrec; i++) {
            cr_assert_lt(m, cap);
            v[m++] = (uint64_t)u.epoch << 40 | (sh->first_id + sl_unit_rec(&u, i));
        }
    }
    sl_order_destroy(o);
    *n = m;
    return v;
}

static uint64_t *order_stream(const sl_source_set *s, sl_shuffle_mode mode, uint32_t rank,
                              uint32_t world, int64_t epochs, size_t *n)
{
    return order_stream_bytes(s, mode, rank, world, epochs, n, NULL);
}

Test(pipeline_split, order_keeps_world1_positions)
{
    const uint64_t counts[] = {17, 0, 9, 23, 1, 12}; /* 62 records, an empty shard */
    sl_source_set s;
    fake_set(&s, counts, 6);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_NONE, SL_SHUFFLE_GLOBAL};
    for (int m = 0; m < 2; m++) {
        size_t n1;
        uint64_t *all = order_stream(&s, modes[m], 0, 1, 3, &n1);
        cr_assert_eq(n1, 3 * 62);
        for (uint32_t W = 2; W <= 7; W++)
            for (uint32_t r = 0; r < W; r++) {
                size_t n;
                uint64_t *mine = order_stream(&s, modes[m], r, W, 3, &n);
                cr_assert_eq(n, sl_split_samples(n1, r, W), "mode %d W %u r %u", m, W, r);
                for (size_t j = 0; j < n; j++)
                    cr_assert_eq(mine[j], all[j * W + r], "mode %d W %u r %u: record %zu", m, W,
                                 r, j);
                free(mine);
            }
        free(all);
    }
    /* rank >= world is refused by name */
    sl_order_config oc = {.src = &s, .mode = SL_SHUFFLE_NONE, .cycle = 2, .block = 2,
                          .split_rank = 3, .split_world = 3};
    sl_order *o = NULL;
    cr_assert_eq(sl_order_create(&oc, &o), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "rank 3 of 3"), "%s", sl_errmsg());
    sl_source_set_close(&s);
}

/* BUFFER: rank r's epoch e is one contiguous slice of world 1's epoch e,
 * the slices in rank order, each of the size the stride would give
 * (sl_split_samples(e*R + R) - sl_split_samples(e*R): floor or ceil of
 * R / W, the larger ones rotating), so that at every epoch's end each rank
 * has what the stride gives it; the ranks' units read every shard's bytes
 * exactly once an epoch (the stride: about W times). */
Test(pipeline_split, buffer_cuts_each_epoch_into_ranges)
{
    const uint64_t counts[] = {17, 0, 9, 23, 1, 12}; /* 62 records, an empty shard */
    const int64_t E = 5;
    sl_source_set s;
    fake_set(&s, counts, 6);
    size_t n1;
    uint64_t *all = order_stream(&s, SL_SHUFFLE_BUFFER, 0, 1, E, &n1);
    cr_assert_eq(n1, E * 62);
    for (uint32_t W = 2; W <= 7; W++) {
        uint64_t bytes = 0, stride_bytes = 0;
        uint64_t lo[8] = {0}; /* per epoch: where the next rank's slice starts */
        for (uint32_t r = 0; r < W; r++) {
            size_t n, ns;
            uint64_t *mine = order_stream_bytes(&s, SL_SHUFFLE_BUFFER, r, W, E, &n, &bytes);
            free(order_stream_bytes(&s, SL_SHUFFLE_NONE, r, W, E, &ns, &stride_bytes));
            cr_assert_eq(n, sl_split_samples(n1, r, W), "W %u r %u: the stride's count", W, r);
            size_t j = 0;
            for (int64_t e = 0; e < E; e++) {
                uint64_t c = sl_split_samples((uint64_t)(e + 1) * 62, r, W) -
                             sl_split_samples((uint64_t)e * 62, r, W);
                cr_assert(c == 62 / W || c == 62 / W + 1, "W %u: %llu records", W,
                          (unsigned long long)c);
                cr_assert_eq(j, sl_split_samples((uint64_t)e * 62, r, W),
                             "W %u r %u: epoch %lld starts where the stride's does", W, r,
                             (long long)e);
                for (uint64_t i = 0; i < c; i++, j++) {
                    cr_assert_lt(j, n);
                    cr_assert_eq(mine[j], all[e * 62 + lo[e] + i],
                                 "W %u r %u: epoch %lld record %llu", W, r, (long long)e,
                                 (unsigned long long)i);
                }
                lo[e] += c;
            }
            cr_assert_eq(j, n);
            free(mine);
        }
        for (int64_t e = 0; e < E; e++)
            cr_assert_eq(lo[e], 62, "W %u epoch %lld: the slices cover it", W, (long long)e);
        uint64_t once = 0;
        for (size_t i = 0; i < s.n; i++)
            once += s.shards[i].bytes;
        cr_assert_eq(bytes, E * once, "W %u: the ranks read each byte once an epoch", W);
        cr_log_info("order, 62 records, W %u: ranks read %.2fx the shards' bytes (stride: %.2fx)",
                    W, (double)bytes / (double)(E * once),
                    (double)stride_bytes / (double)(E * once));
        /* block 5: from W 5 on a strided unit holds one record */
        cr_assert(W < 5 ? stride_bytes > bytes : stride_bytes == bytes,
                  "W %u: NONE keeps the stride, which reads whole blocks while W < block", W);
    }
    free(all);
    sl_source_set_close(&s);
}

Test(pipeline_split, split_samples_arithmetic)
{
    cr_assert_eq(sl_split_samples(0, 0, 3), 0);
    cr_assert_eq(sl_split_samples(1, 0, 3), 1);
    cr_assert_eq(sl_split_samples(1, 1, 3), 0);
    cr_assert_eq(sl_split_samples(10, 0, 3), 4); /* 0 3 6 9 */
    cr_assert_eq(sl_split_samples(10, 1, 3), 3); /* 1 4 7 */
    cr_assert_eq(sl_split_samples(10, 2, 3), 3); /* 2 5 8 */
    cr_assert_eq(sl_split_samples(60, 0, 3), 20);
    cr_assert_eq(sl_split_samples(7, 0, 1), 7);
    cr_assert_eq(sl_split_samples(UINT64_MAX, 0, 1), UINT64_MAX);
    cr_assert_eq(sl_split_samples(5, 0, 0), 0);
}

/* ---------------------------------------------------------- whole runs */

static void split_config(sl_pipeline_config *c, const pl_dataset *d, sl_shuffle_mode mode,
                         unsigned rank, unsigned world, unsigned batch, int64_t epochs)
{
    pl_config(c, d);
    c->shuffle = mode;
    c->rank = rank;
    c->world = world;
    c->rank_split = SL_SPLIT_RECORDS;
    c->batch = batch;
    c->epochs = epochs;
    c->layout = SL_LAYOUT_NHWC_U8;
}

/* Run a pipeline made by create_at(k, s) (create when k == s == 0) to the
 * end, keeping every sample; batch indices must start at k. */
static void run_at(const sl_pipeline_config *c, uint64_t k, uint64_t s, pl_run *r)
{
    sl_pipeline *p;
    memset(r, 0, sizeof *r);
    cr_assert_eq(sl_pipeline_create_at(c, k, s, &p), SL_OK, "rank %u of %u at %llu/%llu: %s",
                 c->rank, c->world, (unsigned long long)k, (unsigned long long)s, sl_errmsg());
    r->nb = (size_t)k; /* pl_collect checks indices from here */
    pl_collect(p, r, SIZE_MAX, 1);
    sl_pipeline_destroy(p);
    cr_assert_eq(r->end_rc, SL_EOF, "rank %u of %u: %s", c->rank, c->world, sl_errmsg());
}

/* Sample i of run a equals sample j of run b (record, epoch, label, bytes). */
static void same_sample(const pl_run *a, size_t i, const pl_run *b, size_t j, const char *what)
{
    cr_assert_eq(a->ids[i], b->ids[j], "%s: record id %llu vs %llu", what,
                 (unsigned long long)a->ids[i], (unsigned long long)b->ids[j]);
    cr_assert_eq(a->epochs[i], b->epochs[j], "%s: epoch", what);
    cr_assert_eq(a->labels[i], b->labels[j], "%s: label", what);
    cr_assert_eq(a->sample_bytes, b->sample_bytes);
    cr_assert_eq(memcmp(a->data + i * a->sample_bytes, b->data + j * b->sample_bytes,
                        a->sample_bytes),
                 0, "%s: sample bytes of record %llu", what, (unsigned long long)a->ids[i]);
}

typedef struct member {
    const pl_run *r;
    size_t i;
} member;

static int by_epoch_id(const void *x, const void *y)
{
    const member *a = x, *b = y;
    uint64_t ka = (uint64_t)a->r->epochs[a->i] << 40 | a->r->ids[a->i];
    uint64_t kb = (uint64_t)b->r->epochs[b->i] << 40 | b->r->ids[b->i];
    return ka < kb ? -1 : ka > kb;
}

/* The union property from batch k0 on: ref (world 1, batch N) and ranks[0..W)
 * (batch N / W) all started at batch k0 (their sample arrays start there).
 * Batch by batch, the ranks' samples taken together are ref's, as sets; a
 * rank may lack the last batches. */
static void check_union(const pl_run *ref, const pl_run *ranks, unsigned W, size_t k0,
                        const char *what)
{
    size_t ref_off = 0, off[16] = {0};
    cr_assert_leq(W, 16);
    member *a = malloc(ref->ns * sizeof *a + 1), *b = malloc(ref->ns * sizeof *b + 1);
    cr_assert(a && b);
    size_t total = 0;
    for (unsigned r = 0; r < W; r++) {
        cr_assert_leq(ranks[r].nb, ref->nb, "%s: rank %u has more batches than world 1", what,
                      r);
        total += ranks[r].ns;
    }
    cr_assert_eq(total, ref->ns, "%s: samples over all ranks", what);
    for (size_t k = k0; k < ref->nb; k++) {
        size_t n = ref->bn[k], m = 0;
        for (size_t i = 0; i < n; i++)
            a[i] = (member){ref, ref_off + i};
        for (unsigned r = 0; r < W; r++) {
            if (k >= ranks[r].nb)
                continue;
            for (size_t i = 0; i < ranks[r].bn[k]; i++) {
                cr_assert_lt(m, n, "%s: batch %zu: the ranks hold more than %zu samples", what,
                             k, n);
                b[m++] = (member){&ranks[r], off[r] + i};
            }
            off[r] += ranks[r].bn[k];
        }
        cr_assert_eq(m, n, "%s: batch %zu: ranks hold %zu samples, world 1 %zu", what, k, m, n);
        qsort(a, n, sizeof *a, by_epoch_id);
        qsort(b, n, sizeof *b, by_epoch_id);
        char msg[512];
        snprintf(msg, sizeof msg, "%s: batch %zu", what, k);
        for (size_t i = 0; i < n; i++)
            same_sample(a[i].r, a[i].i, b[i].r, b[i].i, msg);
        ref_off += n;
    }
    free(a);
    free(b);
}

/* Stronger than the union: with both starting at world-1 position g0 (ref's
 * first sample) and rank r at its own sample s[r] = sl_split_samples(g0, r,
 * W), rank r's j-th sample is ref's at position (s[r] + j) * W + r. */
static void check_interleave(const pl_run *ref, uint64_t g0, const pl_run *ranks, unsigned W,
                             const char *what)
{
    for (unsigned r = 0; r < W; r++) {
        uint64_t s = sl_split_samples(g0, r, W);
        for (size_t j = 0; j < ranks[r].ns; j++) {
            uint64_t g = (s + j) * W + r;
            cr_assert_geq(g, g0);
            cr_assert_lt(g - g0, ref->ns, "%s: rank %u sample %zu beyond world 1's", what, r, j);
            char msg[512];
            snprintf(msg, sizeof msg, "%s: rank %u sample %zu (position %llu)", what, r, j,
                     (unsigned long long)g);
            same_sample(&ranks[r], j, ref, (size_t)(g - g0), msg);
        }
    }
}

/* World 1 (batch b*W) against W ranks (batch b), whole runs. */
static void union_case(const pl_dataset *d, sl_shuffle_mode mode, unsigned W, unsigned b,
                       int64_t epochs, int drop)
{
    char what[96];
    snprintf(what, sizeof what, "mode %d world %u batch %u epochs %lld drop %d", (int)mode, W, b,
             (long long)epochs, drop);
    sl_pipeline_config c;
    split_config(&c, d, mode, 0, 1, b * W, epochs);
    c.drop_remainder = drop;
    pl_run ref, ranks[8];
    run_at(&c, 0, 0, &ref);
    for (unsigned r = 0; r < W; r++) {
        split_config(&c, d, mode, r, W, b, epochs);
        c.drop_remainder = drop;
        c.readers = 1 + r % 2; /* thread counts change nothing */
        c.workers = 1 + (r + 1) % 3;
        run_at(&c, 0, 0, &ranks[r]);
        if (drop)
            cr_assert_eq(ranks[r].nb, ref.nb, "%s: rank %u: batches", what, r);
    }
    check_union(&ref, ranks, W, 0, what);
    check_interleave(&ref, 0, ranks, W, what);
    pl_run_free(&ref);
    for (unsigned r = 0; r < W; r++)
        pl_run_free(&ranks[r]);
}

Test(pipeline_split, union_equals_world1_batches)
{
    pl_dataset d;
    pl_make_dataset(&d, 101, 4, 0, NULL); /* 101: no world divides it */
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_GLOBAL, SL_SHUFFLE_NONE};
    for (int m = 0; m < 2; m++)
        for (unsigned W = 2; W <= 3; W++) {
            /* 303 positions; epoch ends at 101 and 202 fall inside batches of
             * 10 (W 2) and 15 (W 3); the last world-1 batch is partial. */
            union_case(&d, modes[m], W, 5, 3, 0);
        }
    /* drop_remainder: every rank has world 1's batch count (202 / 12 = 16) */
    union_case(&d, SL_SHUFFLE_NONE, 3, 4, 2, 1);
    union_case(&d, SL_SHUFFLE_GLOBAL, 2, 7, 2, 1);
    /* 101 = 3 x 33 + 2: world 1's last batch holds positions 99 and 100,
     * so rank 2 has 3 batches, ranks 0 and 1 have 4 */
    union_case(&d, SL_SHUFFLE_GLOBAL, 3, 11, 1, 0);
    pl_dataset_free(&d);
}

/* Bad records (skip policy) are refilled with the next record id, the
 * same one on a rank as in world 1, since ids are global. */
Test(pipeline_split, union_with_bad_records)
{
    uint8_t bad[60] = {0};
    bad[5] = PL_BAD_CRC;
    bad[30] = PL_BAD_NOT_JPEG;
    bad[31] = PL_BAD_TRUNCATED;
    bad[59] = PL_BAD_CRC; /* refilled from id 0 */
    pl_dataset d;
    pl_make_dataset(&d, 60, 3, 0, bad);
    union_case(&d, SL_SHUFFLE_NONE, 2, 4, 2, 0);
    union_case(&d, SL_SHUFFLE_GLOBAL, 3, 5, 2, 0);
    pl_dataset_free(&d);
}

/* Each (epoch, record) exactly once over all ranks; this rank's share in
 * the stats; GLOBAL and BUFFER read each record's bytes once over all
 * ranks (BUFFER with W 4 holds its epoch of 25 in the buffer of 30: the
 * epoch barrier, each rank's epoch a permutation of its range). */
Test(pipeline_split, disjoint_and_covering_every_mode)
{
    pl_dataset d;
    pl_make_dataset(&d, 100, 3, 0, NULL);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_NONE, SL_SHUFFLE_GLOBAL, SL_SHUFFLE_BUFFER};
    const unsigned worlds[] = {3, 4};
    for (int m = 0; m < 3; m++)
        for (int wi = 0; wi < 2; wi++) {
            unsigned W = worlds[wi];
            uint8_t seen[2][100] = {{0}};
            uint64_t read_bytes = 0, samples = 0;
            for (unsigned r = 0; r < W; r++) {
                sl_pipeline_config c;
                split_config(&c, &d, modes[m], r, W, 8, 2);
                c.shuffle_buffer = 30;
                sl_pipeline *p;
                cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
                pl_run run = {0};
                pl_collect(p, &run, SIZE_MAX, 0);
                cr_assert_eq(run.end_rc, SL_EOF, "%s", sl_errmsg());
                sl_pipeline_stats st;
                cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
                sl_pipeline_destroy(p);
                uint64_t share = (100 - r + W - 1) / W;
                cr_assert_eq(st.records_per_epoch, share, "mode %d W %u rank %u", m, W, r);
                cr_assert_eq(st.records_per_epoch_world, 100);
                cr_assert_eq(st.stages[SL_STAGE_READ].items, run.ns, "records read = kept");
                cr_assert_eq(run.ns, sl_split_samples(200, r, W));
                if (modes[m] != SL_SHUFFLE_NONE)
                    read_bytes += st.stages[SL_STAGE_READ].bytes;
                else
                    cr_assert_lt(st.stages[SL_STAGE_READ].bytes, 2 * d.total_bytes,
                                 "a rank reads at most its blocks' spans");
                for (size_t i = 0; i < run.ns; i++) {
                    cr_assert_lt(run.ids[i], 100);
                    cr_assert(run.epochs[i] == 0 || run.epochs[i] == 1);
                    cr_assert_eq(run.labels[i], (int32_t)(run.ids[i] % 10));
                    cr_assert_eq(seen[run.epochs[i]][run.ids[i]]++, 0,
                                 "mode %d W %u: record %llu of epoch %d twice", m, W,
                                 (unsigned long long)run.ids[i], run.epochs[i]);
                }
                samples += run.ns;
                pl_run_free(&run);
            }
            cr_assert_eq(samples, 200, "mode %d W %u: every record once per epoch", m, W);
            if (modes[m] != SL_SHUFFLE_NONE)
                cr_assert_eq(read_bytes, 2 * d.total_bytes, "mode %d W %u: reads are disjoint",
                             m, W);
        }
    pl_dataset_free(&d);
}

/* ------------------------------------------------------------ create_at */

/* create_at(k, k*B) continues ref (an uninterrupted run of c) exactly, at
 * batches that cut an epoch, the last batch and the end; an unaligned start
 * (sample s not a multiple of B) gives ref's samples from s on. */
static void create_at_cases(const sl_pipeline_config *c, const char *what)
{
    pl_run ref;
    run_at(c, 0, 0, &ref);
    /* world 1 (B 16): batch 6 holds epoch 0's end (sample 101); rank 1 of
     * 2 (B 7): batch 7 holds it (its sample 50, world 1's 101) */
    const size_t ks[] = {0, 3, 6, 7, ref.nb - 1, ref.nb};
    for (int i = 0; i < 6; i++) {
        size_t k = ks[i];
        pl_run rest;
        run_at(c, k, k * c->batch > ref.ns ? ref.ns : k * c->batch, &rest);
        cr_assert_eq(rest.nb, ref.nb, "%s: k %zu: batches", what, k);
        for (size_t b = k; b < ref.nb; b++)
            cr_assert_eq(rest.digest[b], ref.digest[b], "%s: k %zu: batch %zu", what, k, b);
        pl_run_free(&rest);
    }
    const uint64_t starts[] = {1, 37, ref.ns - 3};
    for (int i = 0; i < 3; i++) {
        uint64_t s = starts[i];
        pl_run rest;
        run_at(c, 2, s, &rest);
        cr_assert_eq(rest.ns, ref.ns - s, "%s: from sample %llu", what, (unsigned long long)s);
        for (size_t j = 0; j < rest.ns; j++)
            same_sample(&rest, j, &ref, (size_t)s + j, what);
        for (size_t b = 2; b < rest.nb; b++)
            cr_assert(rest.bn[b] == c->batch || b + 1 == rest.nb, "%s: batch %zu of %u", what, b,
                      rest.bn[b]);
        pl_run_free(&rest);
    }
    pl_run_free(&ref);
}

Test(pipeline_split, create_at_equals_uninterrupted_each_mode)
{
    pl_dataset d;
    pl_make_dataset(&d, 101, 4, 0, NULL);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_NONE, SL_SHUFFLE_BUFFER, SL_SHUFFLE_GLOBAL};
    for (int m = 0; m < 3; m++) {
        char what[64];
        sl_pipeline_config c;
        pl_config(&c, &d); /* world 1, files: 202 samples, batches of 16 */
        c.shuffle = modes[m];
        c.epochs = 2;
        c.shuffle_buffer = 30;
        c.layout = SL_LAYOUT_NHWC_U8;
        snprintf(what, sizeof what, "world 1 mode %d", m);
        create_at_cases(&c, what);
        split_config(&c, &d, modes[m], 1, 2, 7, 2); /* 101 samples, batches of 7 */
        c.shuffle_buffer = 30; /* buffered records read back in units on the way in */
        snprintf(what, sizeof what, "rank 1 of 2 mode %d", m);
        create_at_cases(&c, what);
    }
    pl_dataset_free(&d);
}

/* Issue 38 item 5 under the cut: a buffer that holds every rank's share
 * (ceil(101 / 3) = 34, shares of 34 and 33 rotating over the ranks) takes
 * an epoch at a time: each rank's samples come epoch by epoch, the ranks
 * together hold each (epoch, record) once, each rank's epochs differ in
 * order, and create_at anywhere (the barrier simulated from each rank's
 * epoch sizes) continues the uninterrupted run. */
Test(pipeline_split, buffer_holding_an_epoch_under_the_cut)
{
    pl_dataset d;
    pl_make_dataset(&d, 101, 4, 0, NULL);
    enum { W = 3, E = 3 };
    uint8_t seen[E][101] = {{0}};
    for (unsigned r = 0; r < W; r++) {
        sl_pipeline_config c;
        char what[64];
        split_config(&c, &d, SL_SHUFFLE_BUFFER, r, W, 7, E);
        c.shuffle_buffer = 10000;
        pl_run run;
        run_at(&c, 0, 0, &run);
        cr_assert_eq(run.ns, sl_split_samples(E * 101, r, W));
        uint64_t per[E] = {0};
        for (size_t i = 0; i < run.ns; i++) {
            cr_assert(i == 0 || run.epochs[i] >= run.epochs[i - 1], "rank %u sample %zu: "
                      "epoch %d after %d", r, i, run.epochs[i], run.epochs[i - 1]);
            cr_assert_eq(seen[run.epochs[i]][run.ids[i]]++, 0, "record %llu of epoch %d twice",
                         (unsigned long long)run.ids[i], run.epochs[i]);
            per[run.epochs[i]]++;
        }
        size_t same = 0;
        for (size_t i = 0; i < per[0] && i < per[1]; i++)
            same += run.ids[i] == run.ids[per[0] + i];
        cr_assert_lt(same, 10, "rank %u: epochs differ in order", r);
        for (int e = 0; e < E; e++)
            cr_assert(per[e] == 33 || per[e] == 34, "rank %u epoch %d: %llu", r, e,
                      (unsigned long long)per[e]);
        pl_run_free(&run);
        snprintf(what, sizeof what, "rank %u of %u, buffer holds an epoch", r, W);
        create_at_cases(&c, what);
    }
    for (int e = 0; e < E; e++)
        for (unsigned i = 0; i < 101; i++)
            cr_assert_eq(seen[e][i], 1, "record %u of epoch %d", i, e);
    pl_dataset_free(&d);
}

/* A saved state of a split rank resumes exactly; so does one saved by a
 * pipeline that create_at started off the batch grid. */
Test(pipeline_split, state_resume_of_a_split_rank)
{
    pl_dataset d;
    pl_make_dataset(&d, 101, 4, 0, NULL);
    sl_pipeline_config c;
    split_config(&c, &d, SL_SHUFFLE_BUFFER, 2, 3, 6, 2);
    c.shuffle_buffer = 25;
    pl_run ref;
    run_at(&c, 0, 0, &ref);
    const uint64_t at[][2] = {{0, 0}, {0, 13}}; /* (batch, sample) starts */
    for (int i = 0; i < 2; i++) {
        sl_pipeline *p;
        cr_assert_eq(sl_pipeline_create_at(&c, at[i][0], at[i][1], &p), SL_OK, "%s",
                     sl_errmsg());
        pl_run first = {0};
        pl_collect(p, &first, 5, 1);
        char state[SL_PIPELINE_STATE_MAX];
        size_t len;
        cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK);
        sl_pipeline_destroy(p);
        cr_assert_eq(sl_pipeline_create_from_state(&c, state, len, &p), SL_OK, "%s",
                     sl_errmsg());
        pl_run rest = {0};
        rest.nb = first.nb;
        pl_collect(p, &rest, SIZE_MAX, 1);
        sl_pipeline_destroy(p);
        cr_assert_eq(rest.end_rc, SL_EOF, "%s", sl_errmsg());
        cr_assert_eq(first.ns + rest.ns, ref.ns - at[i][1]);
        for (size_t j = 0; j < first.ns; j++)
            same_sample(&first, j, &ref, (size_t)at[i][1] + j, "before the save");
        for (size_t j = 0; j < rest.ns; j++)
            same_sample(&rest, j, &ref, (size_t)at[i][1] + first.ns + j, "after the resume");
        pl_run_free(&first);
        pl_run_free(&rest);
    }
    pl_run_free(&ref);
    pl_dataset_free(&d);
}

/* A run saved by world 2 at step k (global position G = k * 12) resumes on
 * world 1 (create_at(k, G)) and on world 3 (create_at(k, G / 3)): both give
 * world 1's stream from G on, batch by batch. And off the grid: world 7 with
 * batch 2 (N' = 14) from G = 60, where 7 does not divide 60. */
Test(pipeline_split, resume_on_another_world)
{
    pl_dataset d;
    pl_make_dataset(&d, 101, 4, 0, NULL);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_GLOBAL, SL_SHUFFLE_NONE};
    for (int m = 0; m < 2; m++) {
        sl_pipeline_config c;
        const uint64_t k = 5, G = k * 12;
        /* world 2, batch 6, uninterrupted, and world 1 with batch 12 */
        pl_run ref, old[2], one, three[3];
        split_config(&c, &d, modes[m], 0, 1, 12, 2);
        run_at(&c, 0, 0, &ref);
        run_at(&c, k, G, &one);
        for (size_t b = k; b < ref.nb; b++)
            cr_assert_eq(one.digest[b], ref.digest[b], "mode %d: world 1 from G: batch %zu", m,
                         b);
        for (unsigned r = 0; r < 2; r++) {
            split_config(&c, &d, modes[m], r, 2, 6, 2);
            run_at(&c, 0, 0, &old[r]);
        }
        check_union(&ref, old, 2, 0, "world 2");
        /* world 3, batch 4, from G */
        for (unsigned r = 0; r < 3; r++) {
            split_config(&c, &d, modes[m], r, 3, 4, 2);
            cr_assert_eq(sl_split_samples(G, r, 3), G / 3);
            run_at(&c, k, G / 3, &three[r]);
        }
        check_union(&one, three, 3, k, "world 3 from G");
        check_interleave(&one, G, three, 3, "world 3 from G");
        for (unsigned r = 0; r < 3; r++)
            pl_run_free(&three[r]);
        pl_run_free(&one);
        pl_run_free(&old[0]);
        pl_run_free(&old[1]);
        pl_run_free(&ref);

        /* world 7, batch 2, from G = 60: ranks start at 9 or 8 samples */
        pl_run seven[7];
        split_config(&c, &d, modes[m], 0, 1, 14, 2);
        run_at(&c, k, G, &one);
        for (unsigned r = 0; r < 7; r++) {
            split_config(&c, &d, modes[m], r, 7, 2, 2);
            run_at(&c, k, sl_split_samples(G, r, 7), &seven[r]);
        }
        check_union(&one, seven, 7, k, "world 7 from G = 60");
        check_interleave(&one, G, seven, 7, "world 7 from G = 60");
        for (unsigned r = 0; r < 7; r++)
            pl_run_free(&seven[r]);
        pl_run_free(&one);
    }
    pl_dataset_free(&d);
}

/* --------------------------------------------------------------- errors */

static void expect_einval(const sl_pipeline_config *c, const char *needle)
{
    sl_pipeline *p = (sl_pipeline *)1;
    cr_assert_eq(sl_pipeline_create(c, &p), SL_EINVAL, "%s", needle);
    cr_assert_null(p);
    cr_assert(strstr(sl_errmsg(), needle), "want \"%s\" in: %s", needle, sl_errmsg());
}

Test(pipeline_split, configs_and_errors)
{
    pl_dataset d, tiny;
    pl_make_dataset(&d, 40, 2, 0, NULL);
    pl_make_dataset(&tiny, 3, 1, 0, NULL);
    sl_pipeline_config c, f;
    sl_pipeline *p;
    sl_pipeline_stats st;

    /* world 1: SPLIT_RECORDS is the same stream as SPLIT_FILES */
    split_config(&c, &d, SL_SHUFFLE_BUFFER, 0, 1, 16, 2);
    f = c;
    f.rank_split = SL_SPLIT_FILES;
    pl_run a, b;
    pl_run_config(&c, &a, 0);
    pl_run_config(&f, &b, 0);
    cr_assert_eq(a.end_rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(a.nb, b.nb);
    cr_assert_eq(memcmp(a.digest, b.digest, a.nb * sizeof *a.digest), 0);
    pl_run_free(&a);
    pl_run_free(&b);

    /* more ranks than shards: fine by records, refused by files */
    split_config(&c, &d, SL_SHUFFLE_NONE, 2, 3, 4, 1);
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.records_per_epoch, 13);
    cr_assert_eq(st.records_per_epoch_world, 40);
    sl_pipeline_destroy(p);
    f = c;
    f.rank_split = SL_SPLIT_FILES;
    expect_einval(&f, "only 2 shards");
    cr_assert(strstr(sl_errmsg(), "SL_SPLIT_RECORDS"), "the way out: %s", sl_errmsg());
    /* files split: a rank reads its own share, counts the world's records
     * (every rank's shards), and hands out the whole dataset's record ids
     * (issue 38 item 2: they were dense over its own shards) */
    f.rank = 1;
    f.world = 2;
    cr_assert_eq(sl_pipeline_create(&f, &p), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.records_per_epoch, d.shard_n[1]);
    cr_assert_eq(st.records_per_epoch_world, 40);
    sl_pipeline_destroy(p);
    pl_run_config(&f, &a, 0);
    cr_assert_eq(a.end_rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(a.ns, d.shard_n[1]);
    uint8_t seen[40] = {0};
    for (size_t i = 0; i < a.ns; i++) {
        cr_assert(a.ids[i] >= d.shard_n[0] && a.ids[i] < 40, "id %llu is not shard 1's",
                  (unsigned long long)a.ids[i]);
        cr_assert_eq(seen[a.ids[i]]++, 0);
        cr_assert_eq(a.labels[i], (int32_t)(a.ids[i] % 10), "the id names the record");
    }
    pl_run_free(&a);

    /* rank >= world, unknown split mode, fewer records than ranks */
    split_config(&c, &d, SL_SHUFFLE_GLOBAL, 3, 3, 4, 1);
    expect_einval(&c, "rank 3, world 3: need rank < world");
    c.rank = 0;
    c.rank_split = (sl_rank_split)5;
    expect_einval(&c, "rank_split");
    split_config(&c, &tiny, SL_SHUFFLE_GLOBAL, 0, 4, 1, 1);
    expect_einval(&c, "need records >= world");
    c.world = 3; /* 3 records, 3 ranks: one each */
    c.rank = 2;
    pl_run one;
    pl_run_config(&c, &one, 0);
    cr_assert_eq(one.ns, 1);

    /* create_at: past the end, NULLs */
    split_config(&c, &d, SL_SHUFFLE_NONE, 1, 2, 4, 1); /* 20 samples */
    p = (sl_pipeline *)1;
    cr_assert_eq(sl_pipeline_create_at(&c, 0, 21, &p), SL_EINVAL);
    cr_assert_null(p);
    cr_assert(strstr(sl_errmsg(), "sample 21 is past the end of the run (20 samples)"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_pipeline_create_at(NULL, 0, 0, &p), SL_EINVAL);
    cr_assert_eq(sl_pipeline_create_at(&c, 0, 0, NULL), SL_EINVAL);
    cr_assert_eq(sl_pipeline_create_at(&c, UINT64_MAX - 2, 0, &p), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "overflow"), "%s", sl_errmsg());
    /* at the very end: SL_EOF at once, batch numbers kept */
    cr_assert_eq(sl_pipeline_create_at(&c, 9, 20, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *bt;
    cr_assert_eq(sl_pipeline_next(p, &bt), SL_EOF);
    sl_pipeline_destroy(p);

    /* the state says which split it was saved with */
    char state[SL_PIPELINE_STATE_MAX];
    size_t len;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_state_save(p, state, sizeof state, &len), SL_OK);
    sl_pipeline_destroy(p);
    f = c;
    f.rank_split = SL_SPLIT_FILES;
    f.world = 2; /* 2 shards: rank 1 of 2 by files is valid, but another stream */
    p = (sl_pipeline *)1;
    cr_assert_eq(sl_pipeline_create_from_state(&f, state, len, &p), SL_EINVAL);
    cr_assert_null(p);
    cr_assert(strstr(sl_errmsg(), "source"), "%s", sl_errmsg());

    pl_run_free(&one);
    pl_dataset_free(&tiny);
    pl_dataset_free(&d);
}

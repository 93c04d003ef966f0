/* tests/pipeline/test_order.c - read order (tf.data interleave, file-order
 * shuffle, global permutation, epochs) and the shuffle-buffer machine.
 *
 * The source sets here are built in memory (shards of given record counts
 * with synthetic index entries): sl_order reads nothing but the set.
 *
 * Speed (this 2-core machine, -O3, measured once, not asserted): for the
 * `large` test's set of 1024 shards x 1250 records (1.28M), create takes
 * microseconds, one interleaved epoch (cycle 16, block 16: 80k units)
 * ~1.5 ms, one global epoch (permutation + 1.28M units) ~100 ms; the
 * shuffle buffer (10k items) ~3.4 ns per pop + push. Opening the same
 * 1024 real shards with their index files (sl_source_set_open) ~36 ms. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_int.h"
#include "testutil.h"

/* A set of n shards with counts[i] records; record sizes vary (16 + 0..99). */
static void fake_set(sl_source_set *s, const uint64_t *counts, size_t n, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->shards = calloc(n, sizeof *s->shards);
    cr_assert_not_null(s->shards);
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        sl_shard_info *sh = &s->shards[i];
        sh->path = NULL;
        sh->nrec = counts[i];
        sh->first_id = s->total;
        sh->idx = malloc((counts[i] ? counts[i] : 1) * sizeof *sh->idx);
        cr_assert_not_null(sh->idx);
        uint64_t off = 0;
        for (uint64_t r = 0; r < counts[i]; r++) {
            sh->idx[r].offset = off;
            sh->idx[r].size = 16 + tu_rand(&seed) % 100;
            off += sh->idx[r].size;
            if (sh->idx[r].size > s->max_record)
                s->max_record = sh->idx[r].size;
        }
        sh->bytes = off;
        s->total += counts[i];
        s->total_bytes += off;
    }
}

static sl_order *make_order(const sl_source_set *src, sl_shuffle_mode mode, uint32_t cycle,
                            uint32_t block, int shuffle_files, uint64_t seed, int64_t epochs)
{
    sl_order_config cfg = {.src = src, .mode = mode, .cycle = cycle, .block = block,
                           .shuffle_files = shuffle_files, .seed = seed, .epochs = epochs};
    sl_order *o = NULL;
    cr_assert_eq(sl_order_create(&cfg, &o), SL_OK, "%s", sl_errmsg());
    return o;
}

/* Check u against the set: in range, contiguous bytes as the index says. */
static void check_unit_bytes(const sl_source_set *s, const sl_read_unit *u)
{
    cr_assert_lt(u->shard, s->n);
    const sl_shard_info *sh = &s->shards[u->shard];
    cr_assert_geq(u->nrec, 1);
    cr_assert_leq(u->rec + u->nrec, sh->nrec);
    cr_assert_eq(u->offset, sh->idx[u->rec].offset);
    uint64_t sum = 0;
    for (uint64_t r = u->rec; r < u->rec + u->nrec; r++)
        sum += sh->idx[r].size;
    cr_assert_eq(u->bytes, sum);
}

/* Reference: tf.data's InterleaveDatasetOp::GetNextInternal, one record per
 * call, transcribed literally (cycle_index_, block_index_, current_elements_,
 * end_of_input_, num_open_). Writes the epoch's records as (shard, rec) into
 * out (shard << 32 | rec); returns how many. */
static size_t ref_interleave(const uint64_t *counts, const uint32_t *order, size_t n,
                             uint32_t cycle, uint32_t block, uint64_t *out)
{
    int *open = calloc(cycle, sizeof *open);
    uint32_t *shard = calloc(cycle, sizeof *shard);
    uint64_t *pos = calloc(cycle, sizeof *pos);
    cr_assert(open && shard && pos);
    size_t cycle_index = 0, input = 0, num_open = 0, m = 0;
    uint32_t block_index = 0;
    int end_of_input = 0;
    for (;;) { /* one GetNext */
        int produced = 0;
        while (!end_of_input || num_open > 0) {
            if (open[cycle_index]) {
                if (pos[cycle_index] < counts[shard[cycle_index]]) {
                    out[m++] = (uint64_t)shard[cycle_index] << 32 | pos[cycle_index]++;
                    if (++block_index == block) { /* AdvancePosition */
                        block_index = 0;
                        cycle_index = (cycle_index + 1) % cycle;
                    }
                    produced = 1;
                    break;
                }
                open[cycle_index] = 0;
                num_open--;
                block_index = 0;
                cycle_index = (cycle_index + 1) % cycle;
            } else if (!end_of_input) {
                if (input == n) {
                    end_of_input = 1;
                } else {
                    shard[cycle_index] = order[input++];
                    pos[cycle_index] = 0;
                    open[cycle_index] = 1;
                    num_open++;
                }
            } else {
                block_index = 0;
                cycle_index = (cycle_index + 1) % cycle;
            }
        }
        if (!produced)
            break;
    }
    free(open);
    free(shard);
    free(pos);
    return m;
}

/* The shard order the docs promise for an epoch. */
static void expected_files(uint32_t *a, size_t n, int shuffle, uint64_t seed, uint64_t epoch)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (uint32_t)i;
    if (!shuffle)
        return;
    sl_rng r = sl_rng_for(seed, UINT64_MAX, epoch);
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = sl_rng_below(&r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static void free_set(sl_source_set *s)
{
    sl_source_set_close(s); /* frees idx arrays; paths are NULL */
}

/* Every epoch covers each record once, in order within a shard, units
 * within block, contiguous bytes, counters consistent, and the flattened
 * record stream equals the literal tf.data reference. */
Test(pipeline_order, interleave_matches_reference_and_covers)
{
    uint64_t st = 7;
    int combos = 0;
    for (size_t nshards = 1; nshards <= 7; nshards++) {
        for (int trial = 0; trial < 6; trial++) {
            uint64_t counts[8];
            for (size_t i = 0; i < nshards; i++) {
                uint64_t r = tu_rand(&st) % 10;
                counts[i] = r < 2 ? 0 : r < 4 ? tu_rand(&st) % 4 : tu_rand(&st) % 40;
            }
            sl_source_set s;
            fake_set(&s, counts, nshards, st);
            for (uint32_t cycle = 1; cycle <= nshards + 2; cycle++) {
                for (uint32_t block = 1; block <= 6; block += (block < 4 ? 1 : 2)) {
                    int files = (int)((cycle + block + trial) % 2);
                    uint64_t seed = 1000 + (uint64_t)trial;
                    sl_order *o = make_order(&s, trial % 2 ? SL_SHUFFLE_BUFFER : SL_SHUFFLE_NONE,
                                             cycle, block, files, seed, 3);
                    uint64_t seq = 0, pos = 0;
                    for (int32_t e = 0; e < 3; e++) {
                        uint64_t ref[8 * 40 + 1], got = 0, next_rec[8] = {0};
                        uint32_t order[8];
                        expected_files(order, nshards, files, seed, (uint64_t)e);
                        size_t m = ref_interleave(counts, order, nshards, cycle, block, ref);
                        cr_assert_eq(m, s.total);
                        while (got < s.total) {
                            sl_read_unit u;
                            cr_assert_eq(sl_order_next_unit(o, &u), SL_OK, "%s", sl_errmsg());
                            cr_assert_eq(u.epoch, e);
                            cr_assert_eq(u.seq, seq++);
                            cr_assert_eq(u.first_pos, pos);
                            pos += u.nrec;
                            cr_assert_leq(u.nrec, block);
                            check_unit_bytes(&s, &u);
                            cr_assert_eq(u.rec, next_rec[u.shard], "records out of order");
                            next_rec[u.shard] += u.nrec;
                            for (uint32_t k = 0; k < u.nrec; k++, got++) {
                                cr_assert_lt(got, m);
                                cr_assert_eq(ref[got], (uint64_t)u.shard << 32 | (u.rec + k),
                                             "shards %zu cycle %u block %u epoch %d: record %llu "
                                             "differs from tf.data's order",
                                             nshards, cycle, block, e, (unsigned long long)got);
                            }
                        }
                        for (size_t i = 0; i < nshards; i++)
                            cr_assert_eq(next_rec[i], counts[i]);
                    }
                    sl_read_unit u;
                    if (s.total > 0)
                        cr_assert_eq(pos, 3 * s.total);
                    cr_assert_eq(sl_order_next_unit(o, &u), SL_EOF);
                    cr_assert_eq(sl_order_next_unit(o, &u), SL_EOF);
                    sl_order_destroy(o);
                    combos++;
                }
            }
            free_set(&s);
        }
    }
    cr_assert_gt(combos, 500);
}

struct exp_unit {
    uint32_t shard;
    uint64_t rec;
    uint32_t nrec;
};

static void expect_units(const uint64_t *counts, size_t n, uint32_t cycle, uint32_t block,
                         const struct exp_unit *exp, size_t nexp)
{
    sl_source_set s;
    fake_set(&s, counts, n, 1);
    sl_order *o = make_order(&s, SL_SHUFFLE_NONE, cycle, block, 0, 0, 1);
    sl_read_unit u;
    for (size_t i = 0; i < nexp; i++) {
        cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
        cr_assert(u.shard == exp[i].shard && u.rec == exp[i].rec && u.nrec == exp[i].nrec,
                  "unit %zu: got (%u,%llu,%u), want (%u,%llu,%u)", i, u.shard,
                  (unsigned long long)u.rec, u.nrec, exp[i].shard,
                  (unsigned long long)exp[i].rec, exp[i].nrec);
    }
    cr_assert_eq(sl_order_next_unit(o, &u), SL_EOF);
    sl_order_destroy(o);
    free_set(&s);
}

/* Derived by hand from the rule in order.c (tf.data's): slots s0, s1.
 * s0 opens shard 0 -> (0,0,2); s1 opens shard 1 -> (1,0,2); s0 -> (0,2,2);
 * s1: shard 1 yielded a full block last time, so its end is found now: the
 * visit yields nothing and s1 empties; s0 -> (0,4,1), a short block, so s0
 * empties in this visit; s1 opens shard 2 -> (2,0,2); s0: nothing left to
 * open, skipped; s1 -> (2,2,1). */
Test(pipeline_order, interleave_by_hand_5_2_3)
{
    const uint64_t counts[] = {5, 2, 3};
    const struct exp_unit exp[] = {{0, 0, 2}, {1, 0, 2}, {0, 2, 2},
                                   {0, 4, 1}, {2, 0, 2}, {2, 2, 1}};
    expect_units(counts, 3, 2, 2, exp, sizeof exp / sizeof *exp);
}

/* With an empty shard: s0 opens shard 0 (0 records): the visit finds its end
 * at once; s1 opens shard 1 -> (1,0,2); s0 opens shard 2 -> (2,0,1) and
 * empties; s1 -> (1,2,1). */
Test(pipeline_order, interleave_by_hand_empty_shard)
{
    const uint64_t counts[] = {0, 3, 1};
    const struct exp_unit exp[] = {{1, 0, 2}, {2, 0, 1}, {1, 2, 1}};
    expect_units(counts, 3, 2, 2, exp, sizeof exp / sizeof *exp);
}

/* cycle 3 block 1 over 4, 1, 1, 2: round-robin with refills in place:
 * s0:0.0 s1:1.0 s2:2.0 s0:0.1 s1 (end of 1) s2 (end of 2) s0:0.2
 * s1 opens 3:3.0 s2 (skipped) s0:0.3 s1:3.1 s0 (end) s1 (end). */
Test(pipeline_order, interleave_by_hand_block_1)
{
    const uint64_t counts[] = {4, 1, 1, 2};
    const struct exp_unit exp[] = {{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {0, 1, 1},
                                   {0, 2, 1}, {3, 0, 1}, {0, 3, 1}, {3, 1, 1}};
    expect_units(counts, 4, 3, 1, exp, sizeof exp / sizeof *exp);
}

/* With cycle 1 and a huge block each shard is one unit, so the unit order is
 * the epoch's shard order: it must be the documented (seed, epoch) draw,
 * change between epochs and seeds, and not depend on what came before. */
Test(pipeline_order, shuffle_files_per_epoch)
{
    enum { N = 12, E = 6 };
    uint64_t counts[N];
    for (size_t i = 0; i < N; i++)
        counts[i] = 1 + i % 3;
    sl_source_set s;
    fake_set(&s, counts, N, 3);
    uint32_t seen[2][E][N];
    for (int run = 0; run < 2; run++) {
        sl_order *o = make_order(&s, SL_SHUFFLE_BUFFER, 1, 1000, 1, run ? 99 : 42, E);
        for (int e = 0; e < E; e++)
            for (size_t i = 0; i < N; i++) {
                sl_read_unit u;
                cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
                cr_assert_eq(u.epoch, e);
                cr_assert_eq(u.nrec, counts[u.shard]);
                seen[run][e][i] = u.shard;
            }
        sl_read_unit u;
        cr_assert_eq(sl_order_next_unit(o, &u), SL_EOF);
        sl_order_destroy(o);
    }
    int differ_epochs = 0;
    for (int e = 0; e < E; e++) {
        uint32_t want[N];
        expected_files(want, N, 1, 42, (uint64_t)e);
        cr_assert(memcmp(want, seen[0][e], sizeof want) == 0, "epoch %d order", e);
        if (e > 0)
            differ_epochs += memcmp(seen[0][e], seen[0][e - 1], sizeof want) != 0;
        cr_assert(memcmp(seen[0][e], seen[1][e], sizeof want) != 0, "seed did not matter");
    }
    cr_assert_eq(differ_epochs, E - 1);

    /* Same seed, one epoch more: the common epochs are identical. */
    sl_order *o = make_order(&s, SL_SHUFFLE_BUFFER, 1, 1000, 1, 42, E + 1);
    for (int e = 0; e < E; e++)
        for (size_t i = 0; i < N; i++) {
            sl_read_unit u;
            cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
            cr_assert_eq(u.shard, seen[0][e][i]);
        }
    sl_order_destroy(o);

    /* Without shuffle_files the order is the identity every epoch. */
    o = make_order(&s, SL_SHUFFLE_NONE, 1, 1000, 0, 42, 2);
    for (int e = 0; e < 2; e++)
        for (uint32_t i = 0; i < N; i++) {
            sl_read_unit u;
            cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
            cr_assert_eq(u.shard, i);
        }
    sl_order_destroy(o);
    free_set(&s);
}

Test(pipeline_order, epochs_end_and_forever)
{
    const uint64_t counts[] = {7, 0, 5, 9};
    sl_source_set s;
    fake_set(&s, counts, 4, 5);
    for (int mode = 0; mode < 2; mode++) {
        sl_shuffle_mode m = mode ? SL_SHUFFLE_GLOBAL : SL_SHUFFLE_BUFFER;
        sl_order *o = make_order(&s, m, 2, 3, 1, 8, 3);
        sl_read_unit u;
        uint64_t recs[3] = {0};
        int rc;
        while ((rc = sl_order_next_unit(o, &u)) == SL_OK) {
            cr_assert(u.epoch >= 0 && u.epoch < 3);
            recs[u.epoch] += u.nrec;
        }
        cr_assert_eq(rc, SL_EOF);
        for (int e = 0; e < 3; e++)
            cr_assert_eq(recs[e], s.total);
        sl_order_destroy(o);

        for (int64_t epochs = 0; epochs >= -1; epochs--) {
            o = make_order(&s, m, 2, 3, 1, 8, epochs);
            int32_t last = 0;
            uint64_t n = 0;
            while (n < 40 * s.total) {
                cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
                cr_assert(u.epoch == last || u.epoch == last + 1);
                last = u.epoch;
                n += u.nrec;
            }
            cr_assert_geq(last, 39);
            sl_order_destroy(o);
        }
    }
    free_set(&s);

    /* No records at all: EOF at once, even "forever" (no spinning). */
    const uint64_t none[] = {0, 0};
    fake_set(&s, none, 2, 5);
    for (int mode = 0; mode < 2; mode++) {
        sl_order *o = make_order(&s, mode ? SL_SHUFFLE_GLOBAL : SL_SHUFFLE_NONE, 2, 3, 0, 1, 0);
        sl_read_unit u;
        cr_assert_eq(sl_order_next_unit(o, &u), SL_EOF);
        sl_order_destroy(o);
    }
    free_set(&s);
}

Test(pipeline_order, bad_config)
{
    const uint64_t counts[] = {3};
    sl_source_set s;
    fake_set(&s, counts, 1, 5);
    sl_order_config cfg = {.src = &s, .mode = SL_SHUFFLE_NONE, .cycle = 0, .block = 4};
    sl_order *o = (sl_order *)&cfg;
    cr_assert_eq(sl_order_create(&cfg, &o), SL_EINVAL);
    cr_assert_null(o);
    cfg.cycle = 2;
    cfg.block = 0;
    cr_assert_eq(sl_order_create(&cfg, &o), SL_EINVAL);
    cfg.mode = SL_SHUFFLE_GLOBAL; /* cycle and block do not matter there */
    cr_assert_eq(sl_order_create(&cfg, &o), SL_OK);
    sl_order_destroy(o);
    cfg.mode = (sl_shuffle_mode)7;
    cr_assert_eq(sl_order_create(&cfg, &o), SL_EINVAL);
    cfg.src = NULL;
    cr_assert_eq(sl_order_create(&cfg, &o), SL_EINVAL);
    sl_order_destroy(NULL);
    free_set(&s);
}

/* Global: each epoch is a permutation of all ids, the documented draw,
 * different per epoch and per seed; units are single records. */
Test(pipeline_order, global_permutation)
{
    const uint64_t counts[] = {30, 0, 1, 57, 12, 0, 100};
    enum { E = 4 };
    sl_source_set s;
    fake_set(&s, counts, 7, 11);
    uint64_t total = s.total;
    uint64_t *ids[2][E];
    for (int run = 0; run < 2; run++) {
        sl_order *o = make_order(&s, SL_SHUFFLE_GLOBAL, 0, 0, 1, run ? 5 : 4, E);
        for (int e = 0; e < E; e++) {
            ids[run][e] = malloc(total * sizeof(uint64_t));
            cr_assert_not_null(ids[run][e]);
            uint8_t *hit = calloc(total, 1);
            cr_assert_not_null(hit);
            for (uint64_t i = 0; i < total; i++) {
                sl_read_unit u;
                cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
                cr_assert_eq(u.nrec, 1);
                cr_assert_eq(u.epoch, e);
                cr_assert_eq(u.first_pos, (uint64_t)e * total + i);
                cr_assert_eq(u.seq, u.first_pos);
                check_unit_bytes(&s, &u);
                uint64_t id = s.shards[u.shard].first_id + u.rec;
                cr_assert_eq(hit[id], 0, "id %llu twice", (unsigned long long)id);
                hit[id] = 1;
                ids[run][e][i] = id;
            }
            free(hit);
            /* The documented draw. */
            sl_rng r = sl_rng_for(run ? 5 : 4, UINT64_MAX - 1, (uint64_t)e);
            uint64_t *want = malloc(total * sizeof *want);
            cr_assert_not_null(want);
            for (uint64_t i = 0; i < total; i++)
                want[i] = i;
            for (uint64_t i = total; i > 1; i--) {
                uint64_t j = sl_rng_below(&r, i), t = want[i - 1];
                want[i - 1] = want[j];
                want[j] = t;
            }
            cr_assert(memcmp(want, ids[run][e], total * sizeof *want) == 0);
            free(want);
        }
        sl_read_unit u;
        cr_assert_eq(sl_order_next_unit(o, &u), SL_EOF);
        sl_order_destroy(o);
    }
    for (int e = 0; e < E; e++) {
        if (e)
            cr_assert(memcmp(ids[0][e], ids[0][e - 1], total * sizeof(uint64_t)) != 0);
        cr_assert(memcmp(ids[0][e], ids[1][e], total * sizeof(uint64_t)) != 0);
    }
    /* Same seed again: identical. */
    sl_order *o = make_order(&s, SL_SHUFFLE_GLOBAL, 0, 0, 0, 4, 1);
    for (uint64_t i = 0; i < total; i++) {
        sl_read_unit u;
        cr_assert_eq(sl_order_next_unit(o, &u), SL_OK);
        cr_assert_eq(s.shards[u.shard].first_id + u.rec, ids[0][0][i]);
    }
    sl_order_destroy(o);
    for (int run = 0; run < 2; run++)
        for (int e = 0; e < E; e++)
            free(ids[run][e]);
    free_set(&s);
}

/* ImageNet-sized: 1024 shards x 1250 records. Creating and enumerating an
 * epoch must be quick (units are computed on the fly); see the file comment
 * for times. */
Test(pipeline_order, large)
{
    enum { NS = 1024, PER = 1250 };
    uint64_t *counts = malloc(NS * sizeof *counts);
    cr_assert_not_null(counts);
    for (size_t i = 0; i < NS; i++)
        counts[i] = PER;
    sl_source_set s;
    fake_set(&s, counts, NS, 1);
    cr_assert_eq(s.total, (uint64_t)NS * PER);
    uint64_t *per = calloc(NS, sizeof *per);
    cr_assert_not_null(per);

    sl_order *o = make_order(&s, SL_SHUFFLE_BUFFER, 16, 16, 1, 3, 1);
    sl_read_unit u;
    uint64_t n = 0;
    while (sl_order_next_unit(o, &u) == SL_OK) {
        cr_assert_eq(u.rec, per[u.shard]);
        per[u.shard] += u.nrec;
        n += u.nrec;
    }
    cr_assert_eq(n, s.total);
    sl_order_destroy(o);

    memset(per, 0, NS * sizeof *per);
    o = make_order(&s, SL_SHUFFLE_GLOBAL, 0, 0, 0, 3, 1);
    n = 0;
    while (sl_order_next_unit(o, &u) == SL_OK) {
        per[u.shard]++;
        n++;
    }
    cr_assert_eq(n, s.total);
    for (size_t i = 0; i < NS; i++)
        cr_assert_eq(per[i], PER);
    sl_order_destroy(o);
    free(per);
    free(counts);
    free_set(&s);
}

/* ------------------------------------------------------------ shuffle buffer */

/* Run items 0..m-1 through a buffer of cap the way the shuffle stage does
 * (fill until full, then pop + push while input remains, then drain). */
static void run_shuffle(uint64_t cap, uint64_t seed, const uint64_t *in, size_t m, uint64_t *out)
{
    sl_shuffle sh;
    cr_assert_eq(sl_shuffle_init(&sh, cap, seed), SL_OK);
    size_t i = 0, k = 0;
    while (i < m && !sl_shuffle_full(&sh))
        sl_shuffle_push(&sh, in[i++], 0);
    while (sh.n > 0) {
        out[k++] = sl_shuffle_pop(&sh);
        if (i < m)
            sl_shuffle_push(&sh, in[i++], 0);
    }
    cr_assert_eq(k, m);
    sl_shuffle_fini(&sh);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

Test(pipeline_order, shuffle_cap1_is_identity)
{
    enum { M = 1000 };
    uint64_t in[M], out[M];
    for (size_t i = 0; i < M; i++)
        in[i] = i * 7 + 3;
    run_shuffle(1, 42, in, M, out);
    cr_assert(memcmp(in, out, sizeof in) == 0);
}

Test(pipeline_order, shuffle_buffer_semantics)
{
    enum { M = 20000 };
    uint64_t *in = malloc(M * sizeof *in), *a = malloc(M * sizeof *a), *b = malloc(M * sizeof *b);
    cr_assert(in && a && b);
    for (size_t i = 0; i < M; i++)
        in[i] = i;
    const uint64_t caps[] = {2, 10, 100, 1000, M + 5};
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
        uint64_t cap = caps[c];
        run_shuffle(cap, 1, in, M, a);
        run_shuffle(cap, 1, in, M, b);
        cr_assert(memcmp(a, b, M * sizeof *a) == 0, "cap %llu: not deterministic",
                  (unsigned long long)cap);
        run_shuffle(cap, 2, in, M, b);
        cr_assert(memcmp(a, b, M * sizeof *a) != 0, "cap %llu: seed ignored",
                  (unsigned long long)cap);
        /* Output k can only be an input that was pushed before pop k: one of
         * the first cap + k (tf.data's buffer semantics). */
        double disp = 0;
        for (size_t k = 0; k < M; k++) {
            cr_assert_lt(a[k], cap + k, "cap %llu: output %zu is input %llu",
                         (unsigned long long)cap, k, (unsigned long long)a[k]);
            disp += a[k] > k ? (double)(a[k] - k) : (double)(k - a[k]);
        }
        disp /= M;
        /* Each pop takes a uniform item, so an item stays ~Geometric(1/cap)
         * pops: mean |displacement| ~ 0.74 cap (2/e) away from the ends. */
        if (cap <= 1000)
            cr_assert(disp > 0.4 * (double)cap && disp < 1.5 * (double)cap,
                      "cap %llu: mean displacement %.1f", (unsigned long long)cap, disp);
        qsort(a, M, sizeof *a, cmp_u64);
        cr_assert(memcmp(a, in, M * sizeof *a) == 0, "cap %llu: multiset changed",
                  (unsigned long long)cap);
    }
    free(in);
    free(a);
    free(b);
}

/* Fused repeat: epochs flow through one buffer; it stays full across the
 * boundary (no drain), so items of epoch e+1 come out before the last items
 * of epoch e. Items are (epoch << 32 | index). */
Test(pipeline_order, shuffle_across_epochs)
{
    enum { CAP = 64, PER = 500, E = 3 };
    sl_shuffle sh;
    cr_assert_eq(sl_shuffle_init(&sh, CAP, 9), SL_OK);
    uint64_t out[E * PER], k = 0;
    for (uint64_t e = 0; e < E; e++)
        for (uint64_t i = 0; i < PER; i++) {
            if (sl_shuffle_full(&sh))
                out[k++] = sl_shuffle_pop(&sh);
            sl_shuffle_push(&sh, e << 32 | i, (int64_t)e);
            if (e > 0 || i >= CAP - 1)
                cr_assert_eq(sh.n, CAP, "buffer drained at epoch %llu item %llu",
                             (unsigned long long)e, (unsigned long long)i);
        }
    while (sh.n)
        out[k++] = sl_shuffle_pop(&sh);
    cr_assert_eq(k, E * PER);
    for (uint64_t e = 0; e + 1 < E; e++) {
        size_t first_next = SIZE_MAX, last_this = 0;
        for (size_t j = 0; j < k; j++) {
            if ((out[j] >> 32) == e)
                last_this = j;
            if ((out[j] >> 32) == e + 1 && first_next == SIZE_MAX)
                first_next = j;
        }
        cr_assert_lt(first_next, last_this, "epoch %llu drained before %llu began",
                     (unsigned long long)e, (unsigned long long)e + 1);
    }
    qsort(out, k, sizeof *out, cmp_u64);
    for (uint64_t e = 0, j = 0; e < E; e++)
        for (uint64_t i = 0; i < PER; i++, j++)
            cr_assert_eq(out[j], e << 32 | i);
    sl_shuffle_fini(&sh);

    sl_shuffle bad;
    cr_assert_eq(sl_shuffle_init(&bad, 0, 1), SL_EINVAL);
    sl_shuffle_fini(&bad);
}

/* Run E epochs of PER items (epoch << 32 | index) through a buffer of cap
 * with the epoch barrier the way the shuffle stage does: push while it
 * takes the next item, else pop. */
static size_t run_barrier(uint64_t cap, uint64_t seed, uint64_t E, uint64_t PER, uint64_t *out)
{
    sl_shuffle sh;
    cr_assert_eq(sl_shuffle_init(&sh, cap, seed), SL_OK);
    sh.barrier = 1;
    size_t k = 0;
    for (uint64_t e = 0; e < E; e++)
        for (uint64_t i = 0; i < PER;) {
            if (sl_shuffle_takes(&sh, (int64_t)e)) {
                sl_shuffle_push(&sh, e << 32 | i++, (int64_t)e);
                continue;
            }
            cr_assert_gt(sh.n, 0, "a buffer that takes nothing has something to pop");
            out[k++] = sl_shuffle_pop(&sh);
        }
    while (sh.n)
        out[k++] = sl_shuffle_pop(&sh);
    sl_shuffle_fini(&sh);
    return k;
}

/* Issue 38 item 5: with the barrier and a buffer of at least an epoch,
 * every epoch comes out whole before the next begins, each a permutation
 * of its items, a different one each epoch; and the draws are uniform:
 * over 6000 seeds each of the 6 orders of a 3-item epoch comes out about
 * 1000 times (binomial sd 29; 150 is over 5 sd). */
Test(pipeline_order, shuffle_epoch_barrier)
{
    enum { PER = 200, E = 3 };
    uint64_t out[E * PER];
    const uint64_t caps[] = {PER, 10000};
    for (int c = 0; c < 2; c++) {
        cr_assert_eq(run_barrier(caps[c], 5, E, PER, out), E * PER);
        for (uint64_t e = 0; e < E; e++) {
            uint64_t sorted[PER];
            size_t in_place = 0;
            for (uint64_t i = 0; i < PER; i++) {
                cr_assert_eq(out[e * PER + i] >> 32, e, "sample %llu is of epoch %llu",
                             (unsigned long long)(e * PER + i), (unsigned long long)e);
                sorted[i] = out[e * PER + i];
                in_place += (uint32_t)sorted[i] == i;
            }
            cr_assert_lt(in_place, 20, "shuffled");
            qsort(sorted, PER, sizeof *sorted, cmp_u64);
            for (uint64_t i = 0; i < PER; i++)
                cr_assert_eq(sorted[i], e << 32 | i, "epoch %llu is a permutation",
                             (unsigned long long)e);
        }
        size_t same = 0;
        for (uint64_t i = 0; i < PER; i++)
            same += (uint32_t)out[i] == (uint32_t)out[PER + i];
        cr_assert_lt(same, 20, "epochs differ in order");
    }
    /* the buffer's size beyond an epoch changes nothing */
    uint64_t a[E * PER];
    run_barrier(PER, 5, E, PER, a);
    run_barrier(10000, 5, E, PER, out);
    cr_assert_eq(memcmp(a, out, sizeof a), 0);

    unsigned count[3][3][3] = {{{0}}};
    for (uint64_t seed = 0; seed < 6000; seed++) {
        uint64_t o[3];
        run_barrier(3, seed, 1, 3, o);
        count[(uint32_t)o[0]][(uint32_t)o[1]][(uint32_t)o[2]]++;
    }
    for (int x = 0; x < 3; x++)
        for (int y = 0; y < 3; y++)
            for (int z = 0; z < 3; z++)
                if (x != y && y != z && x != z)
                    cr_assert(count[x][y][z] > 850 && count[x][y][z] < 1150,
                              "order %d%d%d drawn %u times of 6000", x, y, z, count[x][y][z]);
}

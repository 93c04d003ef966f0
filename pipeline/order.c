/*
 * pipeline/order.c - which records are read in which order, as read units,
 * and the shuffle-buffer machine that the shuffle stage runs.
 *
 * Read order. Epochs e = 0, 1, ... (cfg->epochs of them, or forever when
 * <= 0; the epoch number is an int32 in a unit, so "forever" ends after
 * INT32_MAX epochs). Within an epoch:
 *
 *   NONE / BUFFER: shard order = identity, or with shuffle_files a
 *   Fisher-Yates permutation drawn from sl_rng_for(seed, UINT64_MAX, e)
 *   (for i = n-1 down to 1: j = below(i+1), swap a[i], a[j]). The shards are
 *   then interleaved exactly as tf.data's
 *       Dataset.from_tensor_slices(shards).interleave(TFRecordDataset,
 *                                  cycle_length=cycle, block_length=block)
 *   (deterministic) produces records. That is InterleaveDatasetOp's
 *   GetNextInternal (tensorflow/core/kernels/data/interleave_dataset_op.cc),
 *   a loop over `cycle` slots with a cursor, which we run one visit per
 *   call instead of one record per call:
 *     - an empty slot takes the next shard of the epoch's order, if any,
 *       and is read in the same visit;
 *     - a visit to an open slot yields up to `block` records of its shard
 *       (one read unit), then the cursor moves on;
 *     - a shard's end is noticed when a record is asked for and there is
 *       none: if its last visit yielded fewer than `block` records that is
 *       in the same visit; if it yielded exactly `block`, it is the NEXT
 *       visit to that slot, which then yields nothing. Either way the slot
 *       is emptied and the cursor moves on, so the slot is refilled only
 *       when the round-robin comes back to it. A 0-record shard costs a
 *       visit likewise.
 *     - once the epoch's shards are all taken, empty slots are skipped.
 *       (tf.data visits them and moves on; skipping them changes nothing
 *       in the output, so we unlink them from the ring, which keeps every
 *       call O(1) amortised. For the same reason cycle > shards behaves as
 *       cycle = shards.)
 *   Example, shards of 5, 2, 3 records, cycle 2, block 2, as (shard, first
 *   record, records): (0,0,2) (1,0,2) (0,2,2) [slot 1 finds shard 1's end]
 *   (0,4,1) (2,0,2) (2,2,1).
 *   Units never span shards, and records of a shard come in file order, so
 *   a unit is one contiguous byte range [offset, offset + bytes).
 *
 *   GLOBAL: one record per unit, in the order of a permutation of all ids
 *   0..total-1 drawn per epoch from sl_rng_for(seed, UINT64_MAX - 1, e) with
 *   the same Fisher-Yates over the identity (array allocated once; uint32
 *   ids when total fits). shuffle_files does not apply.
 *
 *   Each epoch's order is a function of (seed, e) only, so resuming in the
 *   middle of epoch e needs no history. first_pos and seq count records and
 *   units from the start of the run, across epochs.
 *
 * Record split (SL_SPLIT_RECORDS, split_world W > 1, split_rank r): the
 * order above is run unchanged over every shard (world 1's order), and a
 * rank hands out only its share of the whole-stream positions g (counted
 * across epochs, all records). Two ways to deal the positions, by mode:
 *
 *   Stride (NONE, GLOBAL): the positions with g % W == r. A world-1 unit at
 *   positions [g, g + n) becomes the unit of its kept records: the first at
 *   g + ((r - g) mod W), then every W-th (stride W), or nothing when none
 *   falls in the range; GLOBAL jumps over the permutation entries of other
 *   ranks without locating them. This is what makes pipeline.h's union
 *   property hold (rank r's j-th sample is world 1's j * W + r, so the
 *   ranks' k-th batches together are world 1's k-th batch), which NONE
 *   promises and train/loop/run.c's union_split and a resume on another
 *   number of ranks rely on. GLOBAL reads one record per unit, so its reads
 *   are disjoint; NONE's strided unit is read from its first kept record
 *   to its last, the other ranks' records between included: W ranks read
 *   each byte about W x (block - W + 1) / block times while W <= block
 *   (4.5 at W 8, block 16), once from W >= block on (the price of the
 *   union property; NONE is the evaluation and debugging mode).
 *     Example, one shard of 10 records, block 4, W 3, r 1: world 1's units
 *     (shard, first record, records) (0,0,4) (0,4,4) (0,8,2) hold positions
 *     0-3, 4-7, 8-9; rank 1 keeps 1, 4, 7 and gets the units (0,1,1) and
 *     (0,4,2) with stride 3 (records 4 and 7, bytes from 4's start to 7's
 *     end); the third unit has no kept position (8 % 3 = 2, 9 % 3 = 0).
 *
 *   Cut (BUFFER): each epoch's R positions are cut into W contiguous
 *   ranges, rank 0's first, and rank r reads range r only, so the ranks
 *   read disjoint bytes (each byte of each shard once an epoch over all
 *   ranks) and a rank's units are whole byte ranges of its own: world-1
 *   units are cut at the range's edges, those outside it yield nothing
 *   (walked without reading: the interleave is pure arithmetic), and once
 *   past its range the rank's epoch is over. The range sizes are the
 *   stride split's counts: with m = e*R mod W (the stride phase at the
 *   epoch's start), range j holds the positions p of [m, m + R) with
 *   p % W == j, so range r of epoch e is [cut(r), cut(r + 1)) where cut(j)
 *   counts the p in [m, m + R) with p % W < j. Every range holds
 *   floor(R / W) or ceil(R / W) records, the R mod W larger ranges rotate
 *   over the ranks from epoch to epoch, and after any number of whole
 *   epochs each rank has read exactly as many records as under the stride
 *   (sl_split_samples(e * R, r, W)): the run's length, the drop_remainder
 *   end, the steps per epoch and where a rank's epochs begin in its batches
 *   are the stride split's. Only the records differ: the union property
 *   does not hold (it did not under BUFFER anyway: each rank shuffles its
 *   share in its own buffer).
 *     Example, R = 10 (one epoch), W 3: m = 0, ranges [0,4) [4,7) [7,10);
 *     epoch 1: m = 10 mod 3 = 1, ranges [0,3) [3,7) [7,10) (rank 1 now has
 *     the fourth record: 7 records each after two epochs, as with the
 *     stride). With one shard, block 4 and r 1, epoch 0's world-1 units
 *     (0,0,4) (0,4,4) (0,8,2) give rank 1 the unit (0,4,3): the second cut
 *     at its range's end; the first unit is walked over, the third never
 *     made.
 *
 * In both, seq and first_pos count this rank's units and records only, so
 * everything downstream (the window, the shuffle, the resume fast-forward)
 * sees an ordinary stream.
 *
 * Shuffle buffer: sl_shuffle_* as pipeline_int.h documents; its stream is
 * sl_rng_for(seed, UINT64_MAX - 2, 0) (a single stream for the whole run:
 * the buffer is fused with repeat, so it never restarts at an epoch; under
 * the epoch barrier it empties at each epoch's end and draws on from the
 * same stream).
 *
 * Cost: creating is O(shards) (GLOBAL: O(total) memory); next_unit is O(1)
 * amortised for NONE/BUFFER and O(log shards) for GLOBAL, plus the O(shards)
 * or O(total) permutation once per epoch. Under the cut, the first unit of
 * a rank's epoch walks world 1's units up to its range, O(lo / block) steps
 * of a few nanoseconds (about a millisecond at 1.28 M records, block 16;
 * the stride walks them all too, spread over the epoch), and no unit past it.
 *
 * Threading: an sl_order and an sl_shuffle are used by one thread at a time;
 * the source set they read is read-only.
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_int.h"

/* Which sl_rng_for(seed, a, epoch) stream each draw uses ("a" values far
 * from the epoch numbers the per-sample streams use). */
#define STREAM_FILES UINT64_MAX
#define STREAM_GLOBAL (UINT64_MAX - 1)
#define STREAM_SHUFFLE (UINT64_MAX - 2)

typedef struct order_slot {
    uint32_t shard; /* index into src->shards, when open */
    int open;
    uint64_t pos;   /* next record of the shard */
    uint32_t next;  /* ring link: the slot visited after this one */
} order_slot;

struct sl_order {
    sl_order_config cfg;
    const sl_source_set *src;
    int32_t epoch;           /* current epoch */
    int started, done;       /* an epoch is set up / SL_EOF reached */
    uint64_t seq, pos;       /* units and records handed out so far */
    uint32_t rank, world;    /* record split (world 1: none) */
    uint64_t all;            /* whole-stream (world 1) positions gone by, kept or not */
    int cut;                 /* the split cuts each epoch into ranges (BUFFER), else strides */
    uint64_t ep;             /* world-1 positions of this epoch gone by */
    uint64_t lo, hi;         /* cut: this rank's range of them, [lo, hi) */
    /* NONE / BUFFER */
    uint32_t *files;         /* (n) this epoch's shard order */
    size_t next_file;        /* next entry of files to open */
    order_slot *slots;       /* (k) k = min(cycle, shards) */
    uint32_t k, ring, cur, prev; /* slots, slots in the ring, cursor and its predecessor */
    /* GLOBAL */
    uint32_t *perm32;        /* (total) when total <= UINT32_MAX + 1 */
    uint64_t *perm64;        /* (total) otherwise */
    uint64_t gpos;           /* next entry of the permutation */
};

/* Fisher-Yates, descending: for i = n-1 .. 1, j = below(i + 1), swap. */
static void shuffle_u32(uint32_t *a, uint64_t n, sl_rng *r)
{
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = sl_rng_below(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static void shuffle_u64(uint64_t *a, uint64_t n, sl_rng *r)
{
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = sl_rng_below(r, i);
        uint64_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

int sl_order_create(const sl_order_config *cfg, sl_order **out)
{
    static const char fn[] = "sl_order_create";
    sl_order *o = NULL;
    int rc = SL_OK;

    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    if (!cfg || !cfg->src)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    const sl_source_set *src = cfg->src;
    if (src->n == 0 || src->n > UINT32_MAX)
        return sl_fail(SL_EINVAL, "%s: %zu shards", fn, src->n);
    if (cfg->mode != SL_SHUFFLE_NONE && cfg->mode != SL_SHUFFLE_BUFFER &&
        cfg->mode != SL_SHUFFLE_GLOBAL)
        return sl_fail(SL_EINVAL, "%s: unknown shuffle mode %d", fn, (int)cfg->mode);
    if (cfg->mode != SL_SHUFFLE_GLOBAL && (cfg->cycle == 0 || cfg->block == 0))
        return sl_fail(SL_EINVAL, "%s: cycle %u, block %u: both must be >= 1", fn, cfg->cycle,
                       cfg->block);
    if (cfg->split_world > 1 && cfg->split_rank >= cfg->split_world)
        return sl_fail(SL_EINVAL, "%s: record split: rank %u of %u: rank must be below world",
                       fn, cfg->split_rank, cfg->split_world);
    o = calloc(1, sizeof *o);
    if (!o)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    o->cfg = *cfg;
    o->src = src;
    o->world = cfg->split_world > 1 ? cfg->split_world : 1;
    o->rank = o->world > 1 ? cfg->split_rank : 0;
    o->cut = o->world > 1 && cfg->mode == SL_SHUFFLE_BUFFER;
    if (cfg->mode == SL_SHUFFLE_GLOBAL) {
        uint64_t n = src->total ? src->total : 1;
        if (n - 1 <= UINT32_MAX) {
            if (n > SIZE_MAX / sizeof *o->perm32 || !(o->perm32 = malloc(n * sizeof *o->perm32)))
                rc = sl_fail(SL_ENOMEM, "%s: permutation of %llu records: out of memory", fn,
                             (unsigned long long)n);
        } else {
            if (n > SIZE_MAX / sizeof *o->perm64 || !(o->perm64 = malloc(n * sizeof *o->perm64)))
                rc = sl_fail(SL_ENOMEM, "%s: permutation of %llu records: out of memory", fn,
                             (unsigned long long)n);
        }
    } else {
        o->k = cfg->cycle < src->n ? cfg->cycle : (uint32_t)src->n;
        o->files = malloc(src->n * sizeof *o->files);
        o->slots = malloc(o->k * sizeof *o->slots);
        if (!o->files || !o->slots)
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
    }
    if (rc) {
        sl_order_destroy(o);
        return rc;
    }
    *out = o;
    return SL_OK;
}

void sl_order_destroy(sl_order *o)
{
    if (!o)
        return;
    free(o->files);
    free(o->slots);
    free(o->perm32);
    free(o->perm64);
    free(o);
}

/* The positions p < G with p % W < j: what ranks 0 .. j-1 take of the
 * first G positions under the stride (sl_split_samples summed over them). */
static uint64_t ranks_below(uint64_t G, uint32_t j, uint32_t W)
{
    uint64_t m = G % W;
    return (uint64_t)j * (G / W) + (j < m ? j : m);
}

/* The cut (see the top of the file): rank r's range [lo, hi) of epoch e's
 * R positions. m = e*R mod W is taken mod W factor by factor (e*R may
 * not fit in 64 bits); ranks_below(m + R, j) - ranks_below(m, j) counts the
 * positions of [m, m + R) with p % W < j. */
static void cut_range(uint64_t R, int32_t e, uint32_t r, uint32_t W, uint64_t *lo, uint64_t *hi)
{
    uint64_t m = (uint64_t)e % W * (R % W) % W;
    *lo = ranks_below(m + R, r, W) - ranks_below(m, r, W);
    *hi = ranks_below(m + R, r + 1, W) - ranks_below(m, r + 1, W);
}

/* Set up epoch o->epoch: the shard order and empty slots, or the permutation. */
static void begin_epoch(sl_order *o)
{
    const sl_source_set *src = o->src;
    if (o->cfg.mode == SL_SHUFFLE_GLOBAL) {
        sl_rng r = sl_rng_for(o->cfg.seed, STREAM_GLOBAL, (uint64_t)o->epoch);
        uint64_t n = src->total;
        if (o->perm32) {
            for (uint64_t i = 0; i < n; i++)
                o->perm32[i] = (uint32_t)i;
            shuffle_u32(o->perm32, n, &r);
        } else {
            for (uint64_t i = 0; i < n; i++)
                o->perm64[i] = i;
            shuffle_u64(o->perm64, n, &r);
        }
        o->gpos = 0;
    } else {
        for (size_t i = 0; i < src->n; i++)
            o->files[i] = (uint32_t)i;
        if (o->cfg.shuffle_files) {
            sl_rng r = sl_rng_for(o->cfg.seed, STREAM_FILES, (uint64_t)o->epoch);
            shuffle_u32(o->files, src->n, &r);
        }
        o->next_file = 0;
        for (uint32_t i = 0; i < o->k; i++) {
            o->slots[i].open = 0;
            o->slots[i].next = i + 1 < o->k ? i + 1 : 0;
        }
        o->ring = o->k;
        o->cur = 0;
        o->prev = o->k - 1;
        o->ep = 0;
        if (o->cut)
            cut_range(src->total, o->epoch, o->rank, o->world, &o->lo, &o->hi);
    }
    o->started = 1;
}

/* World 1's unit of records [rec, rec + n) of shard, at whole-stream
 * positions o->all .. o->all + n - 1 (this epoch's o->ep .. o->ep + n - 1):
 * fill u with the records of it this rank keeps (all of them without a
 * split; the cut: those in [lo, hi), consecutive; the stride: every W-th).
 * 1 with *u filled, 0 when it keeps none (see the top of the file). */
static int make_unit(sl_order *o, uint32_t shard, uint64_t rec, uint32_t n, sl_read_unit *u)
{
    const sl_shard_info *sh = &o->src->shards[shard];
    uint32_t stride = 1;
    uint64_t g = o->all, e = o->ep;
    o->all += n;
    o->ep += n;
    if (o->cut) { /* [e, e + n) within [lo, hi) */
        uint64_t from = e > o->lo ? e : o->lo, to = e + n < o->hi ? e + n : o->hi;
        if (from >= to)
            return 0;
        rec += from - e;
        n = (uint32_t)(to - from);
    } else if (o->world > 1) {
        uint64_t skip = (o->rank + o->world - g % o->world) % o->world; /* to the first kept */
        if (skip >= n)
            return 0;
        rec += skip;
        n = (uint32_t)((n - 1 - skip) / o->world + 1);
        stride = n > 1 ? o->world : 1;
    }
    const sl_index_entry *last = &sh->idx[rec + (uint64_t)(n - 1) * stride];
    u->seq = o->seq++;
    u->first_pos = o->pos;
    o->pos += n;
    u->shard = shard;
    u->nrec = n;
    u->epoch = o->epoch;
    u->stride = stride;
    u->rec = rec;
    u->offset = sh->idx[rec].offset;
    u->bytes = last->offset + last->size - u->offset;
    return 1;
}

/* One interleave visit at a time until one yields records (see the top of
 * the file). 1 with *u filled, 0 when the epoch has no more units. */
static int next_interleaved(sl_order *o, sl_read_unit *u)
{
    const sl_source_set *src = o->src;
    while (o->ring > 0) {
        if (o->cut && o->ep >= o->hi) /* past this rank's range: its epoch is over */
            return 0;
        order_slot *s = &o->slots[o->cur];
        if (!s->open) {
            if (o->next_file == src->n) { /* nothing left to open: unlink it */
                if (--o->ring > 0)
                    o->slots[o->prev].next = s->next;
                o->cur = s->next;
                continue;
            }
            s->shard = o->files[o->next_file++];
            s->pos = 0;
            s->open = 1;
        }
        uint64_t left = src->shards[s->shard].nrec - s->pos;
        if (left == 0) { /* the end, noticed on this visit: it yields nothing */
            s->open = 0;
            o->prev = o->cur;
            o->cur = s->next;
            continue;
        }
        uint32_t take = left < o->cfg.block ? (uint32_t)left : o->cfg.block;
        uint64_t first = s->pos;
        s->pos += take;
        if (take < o->cfg.block) /* asking for record take+1 finds the end */
            s->open = 0;
        o->prev = o->cur;
        o->cur = s->next;
        if (make_unit(o, s->shard, first, take, u))
            return 1;
        /* a block with no record of this rank: the next visit (no I/O:
         * walking the interleave to a rank's range is arithmetic) */
    }
    return 0;
}

static int next_global(sl_order *o, sl_read_unit *u)
{
    uint64_t total = o->src->total;
    if (o->world > 1) { /* jump to this rank's next entry, or to the epoch's end */
        uint64_t skip = (o->rank + o->world - o->all % o->world) % o->world;
        if (skip > total - o->gpos)
            skip = total - o->gpos;
        o->gpos += skip;
        o->all += skip;
    }
    if (o->gpos == total)
        return 0;
    uint64_t id = o->perm32 ? o->perm32[o->gpos] : o->perm64[o->gpos];
    uint32_t shard = 0;
    uint64_t rec = 0;
    o->gpos++;
    /* id < total by construction, so locate cannot fail */
    (void)sl_source_set_locate(o->src, id, &shard, &rec);
    return make_unit(o, shard, rec, 1, u); /* kept: the jump landed on it */
}

int sl_order_next_unit(sl_order *o, sl_read_unit *u)
{
    /* No records at all: every epoch is empty, and "forever" must not spin. */
    if (o->done || o->src->total == 0)
        return SL_EOF;
    for (;;) {
        if (!o->started)
            begin_epoch(o);
        int got = o->cfg.mode == SL_SHUFFLE_GLOBAL ? next_global(o, u) : next_interleaved(o, u);
        if (got)
            return SL_OK;
        /* Epoch o->epoch is over. */
        if ((o->cfg.epochs > 0 && (int64_t)o->epoch + 1 >= o->cfg.epochs) ||
            o->epoch == INT32_MAX) {
            o->done = 1;
            return SL_EOF;
        }
        o->epoch++;
        o->started = 0;
    }
}

/* --------------------------------------------------------- shuffle buffer */

int sl_shuffle_init(sl_shuffle *s, uint64_t cap, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (cap == 0)
        return sl_fail(SL_EINVAL, "sl_shuffle_init: capacity 0 (1 means no shuffle)");
    if (cap > SIZE_MAX / sizeof *s->items || !(s->items = malloc(cap * sizeof *s->items)))
        return sl_fail(SL_ENOMEM, "sl_shuffle_init: buffer of %llu items: out of memory",
                       (unsigned long long)cap);
    s->cap = cap;
    s->rng = sl_rng_for(seed, STREAM_SHUFFLE, 0);
    return SL_OK;
}

void sl_shuffle_fini(sl_shuffle *s)
{
    if (!s)
        return;
    free(s->items);
    memset(s, 0, sizeof *s);
}

void sl_shuffle_push(sl_shuffle *s, uint64_t item, int64_t epoch)
{
    s->items[s->n++] = item;
    s->epoch = epoch;
}

uint64_t sl_shuffle_pop(sl_shuffle *s)
{
    uint64_t j = sl_rng_below(&s->rng, s->n);
    uint64_t item = s->items[j];
    s->items[j] = s->items[--s->n];
    return item;
}

/*
 * pipeline/pipeline_int.h - private contracts between the files of pipeline/.
 *
 *   rng.h       counter-derived RNG streams (determinism whatever the threads)
 *   source.c    the shards this rank reads, their index files, record ids
 *   order.c     read units in read order (interleave / global permutation,
 *               epochs, file-order shuffle) and the shuffle buffer machine
 *   map.c       one record to one sample (sl_map_record), through the
 *               image room (image/image.h: crops, decode, resample, store)
 *   load_*.c    the batch ring's host and device memory
 *   graph.c, reader.c, reader_remote.c, pipeline.c, state.c, stats.c,
 *   trace.c: the graph (graph_int.h)
 *
 * Threading: everything here is reentrant on distinct objects; objects are
 * used by one thread at a time unless said otherwise.
 */
#ifndef SL_PIPELINE_INT_H
#define SL_PIPELINE_INT_H

#include <stdint.h>

#include "pipeline/image/image.h"
#include "pipeline/pipeline.h"
#include "pipeline/rng.h"
#include "records/records.h"

/* ---------------------------------------------------------------- sources */
/* What a shard's index entries are: TFRecord records (framed, CRCs), or
 * WebDataset samples (records/wds.h: a sample's span of tar members). */
typedef enum sl_shard_kind {
    SL_SHARD_TFRECORD = 0,
    SL_SHARD_WDS,
} sl_shard_kind;

typedef struct sl_shard_info {
    char *path;
    sl_shard_kind kind;       /* SL_SHARD_WDS for a ".tar" shard (pipeline/source_wds.c) */
    uint64_t nrec;
    uint64_t first_id;        /* id of record 0 (ids are dense over this rank's shards) */
    uint64_t world_first;     /* the whole dataset's id of record 0 (first_id with world 1) */
    sl_index_entry *idx;      /* nrec entries (loaded from .idx, or built by scanning) */
    uint64_t bytes;           /* file bytes covered by the index */
} sl_shard_info;

typedef struct sl_source_set {
    sl_shard_info *shards;
    size_t n;
    uint64_t total;           /* records over all shards */
    uint64_t world_total;     /* records over every rank's shards (total with world 1) */
    uint64_t total_bytes;     /* framed bytes over all shards */
    uint64_t max_record;      /* largest framed record (16 + payload) */
    int64_t label_offset;     /* from dataset.json, 0 when absent */
    int remote;               /* the shards are remote objects (sl_dataset.remote) */
    /* What sl_source_set_open_policy left out under SL_ON_ERROR_SKIP: the
     * unreadable tail of truncated shards (records; a scanned shard's tail
     * counts as 1), and the first messages ("FILE: record N @ OFF: what"). */
    uint64_t bad;
    unsigned nbad_msgs;
    char bad_msgs[SL_PIPELINE_MAX_BAD_REPORT][256];
} sl_source_set;

/* Open the shards of `split` under data (sl_dataset_resolve: a directory's
 * split, or every file of a glob pattern or of one file), keep those with
 * shard index % world == rank (SL_SPLIT_FILES; SL_SPLIT_RECORDS opens
 * rank 0 of 1, every shard, and lets the order split), load each
 * index file (or build it by scanning when the .idx is missing). With
 * world > 1 the other ranks' shards' indexes are loaded too, to count their
 * records: world_total and each shard's world_first (the ids a batch hands
 * out are the whole dataset's, as pipeline.h promises). SL_EINVAL when this
 * rank gets no shard ("rank 3 of 8: only 2 shards", with a hint at
 * SL_SPLIT_RECORDS). */
int sl_source_set_open(const char *data, const char *split, unsigned rank, unsigned world,
                       sl_source_set *out);
/* sl_source_set_open under an error policy. SL_ON_ERROR_FAIL is
 * sl_source_set_open. SL_ON_ERROR_SKIP: a shard shorter than its index
 * keeps the records that are whole in the file, a shard without an index
 * whose scan stops at a bad record keeps the records before it; what is
 * left out is counted and named in out->bad / bad_msgs. A shard longer than
 * its index (a stale index) is an error under both. */
int sl_source_set_open_policy(const char *data, const char *split, unsigned rank, unsigned world,
                              sl_error_policy policy, sl_source_set *out);
void sl_source_set_close(sl_source_set *s);
/* The index of a WebDataset shard sh->path (pipeline/source_wds.c):
 * "<shard>.idx" in DALI's format, or a scan when there is none (not written
 * back); one entry per sample, its span. Sets kind, idx, nrec, bytes.
 * policy SL_ON_ERROR_SKIP: a scan that stops at a damaged header keeps the
 * samples before it and returns SL_OK with the message of the one bad
 * record (the rest of the file) in bad (cap bytes; "" when none). */
int sl_source_load_wds(sl_shard_info *sh, sl_error_policy policy, char *bad, size_t cap);
/* Shard and record number of a global id (binary search); SL_EINVAL if out of range. */
int sl_source_set_locate(const sl_source_set *s, uint64_t id, uint32_t *shard, uint64_t *rec);
/* ids[0..n) (this set's ids) as the whole dataset's ids, in place: the
 * same under world 1 and SL_SPLIT_RECORDS, shifted by the other ranks'
 * shards before each one under SL_SPLIT_FILES. Any thread. */
void sl_source_set_world_ids(const sl_source_set *s, uint64_t *ids, size_t n);

/* ------------------------------------------------------------------ order */
/* A read unit: nrec records of one shard, rec, rec + stride, ..., read with
 * one pread of [offset, offset + bytes) (from the first record's start to
 * the last one's end: with stride > 1 (a record split under NONE) the
 * records between belong to other ranks and are read but neither checked
 * nor decoded). */
typedef struct sl_read_unit {
    uint64_t seq;             /* unit number in read order: 0, 1, 2, ... */
    uint64_t first_pos;       /* input-stream position of its first record (this rank's
                               * stream: positions count only the records it keeps) */
    uint32_t shard;
    uint32_t nrec;
    int32_t epoch;
    uint32_t stride;          /* record step; 0 or 1: consecutive records */
    uint64_t rec;             /* first record number within the shard */
    uint64_t offset, bytes;
} sl_read_unit;

/* Record number within the shard of the unit's record i (i < nrec). */
static inline uint64_t sl_unit_rec(const sl_read_unit *u, uint32_t i)
{
    return u->rec + (uint64_t)i * (u->stride > 1 ? u->stride : 1);
}

typedef struct sl_order_config {
    const sl_source_set *src;
    sl_shuffle_mode mode;     /* NONE and BUFFER read interleaved blocks; GLOBAL reads
                               * single records in a per-epoch permutation */
    uint32_t cycle, block;    /* interleave: `cycle` shards open at once, `block` records per
                               * visit (tf.data interleave(cycle_length, block_length),
                               * deterministic) */
    int shuffle_files;        /* shard order permuted per epoch with sl_rng_for(seed, ~0, epoch) */
    uint64_t seed;
    int64_t epochs;           /* <= 0: forever */
    uint32_t split_rank, split_world; /* SL_SPLIT_RECORDS: keep only this rank's
                               * share of the whole (world 1) stream's positions p:
                               * NONE and GLOBAL those with p % split_world ==
                               * split_rank (units: stride split_world within a
                               * block), BUFFER range split_rank of each epoch cut
                               * into split_world contiguous ranges of the same
                               * sizes (order.c's top comment); first_pos counts
                               * kept records. split_world 0 or 1: keep everything */
} sl_order_config;

typedef struct sl_order sl_order;
int sl_order_create(const sl_order_config *cfg, sl_order **out);
/* The next unit in read order; SL_EOF after the last epoch. Cheap (no I/O);
 * the input stream is the concatenation of the units' records (with a
 * split: of the kept records, world 1's blocks with no kept record yield
 * no unit). */
int sl_order_next_unit(sl_order *o, sl_read_unit *u);
void sl_order_destroy(sl_order *o);

/* The shuffle buffer machine (tf.data's shuffle): fill while it takes the
 * next input (sl_shuffle_takes) or until the input ends, then each pop
 * takes slot j = below(n) and moves the last item into it; the caller
 * pushes the next inputs after each pop while it takes them. Items are
 * opaque 64-bit values (the pipeline stores record handles; the resume
 * path stores input positions), each pushed with its epoch. cap 1 = no
 * shuffle. The pop sequence depends only on (seed, barrier, the pushed
 * sequence and epochs).
 * Epoch barrier (barrier set; the pipeline sets it when the buffer holds a
 * whole epoch, issue 38 item 5): the buffer takes no item of another epoch
 * while it holds any of the current one, so it holds all of epoch e before
 * its first pop and empties before epoch e + 1's first push; the pops of
 * an epoch are then draws without replacement from all of it, a uniformly
 * random permutation (Fisher-Yates from the end), whatever the read order
 * of the units. Without it the buffer is fused with the repeat. */
typedef struct sl_shuffle {
    uint64_t *items;
    uint64_t cap, n;
    sl_rng rng;
    int barrier;   /* the epoch barrier above */
    int64_t epoch; /* the epoch of the last item pushed */
} sl_shuffle;
int sl_shuffle_init(sl_shuffle *s, uint64_t cap, uint64_t seed);
void sl_shuffle_fini(sl_shuffle *s);
static inline int sl_shuffle_full(const sl_shuffle *s) { return s->n == s->cap; }
/* Whether the buffer takes an item of epoch e now: not full, and under the
 * barrier empty or holding epoch e's items. When it does not, n > 0: pop. */
static inline int sl_shuffle_takes(const sl_shuffle *s, int64_t e)
{
    return s->n < s->cap && (!s->barrier || s->n == 0 || s->epoch == e);
}
void sl_shuffle_push(sl_shuffle *s, uint64_t item, int64_t epoch); /* requires takes(epoch) */
uint64_t sl_shuffle_pop(sl_shuffle *s);                             /* requires n > 0 */

/* ------------------------------------------------------------------- map */
/* One record's payload (a serialized image Example) into one sample of a
 * batch slot at dst, as a map worker does it (pipeline/map.c): decode the
 * Example, subtract label_offset from its label into *label, read the
 * JPEG's header with dec, take the crop (c's train random-resized-crop from
 * sl_rng_for(c->seed, epoch, id) and its flip, or the eval center crop),
 * then sl_decode_crop_sample at c->width x c->height in c->layout.
 * SL_ECORRUPT / SL_EIMAGE: a bad record (message set); other codes are
 * fatal. */
int sl_map_record(const sl_pipeline_config *c, int64_t label_offset, sl_decoder *dec,
                  const uint8_t *rec, size_t len, int32_t epoch, uint64_t id, void *dst,
                  int32_t *label);

/* ------------------------------------------------------------------- load */
/* The load stage's memory: a ring of nslots host batches (pinned with
 * cudaHostAlloc when device >= 0, plain aligned memory otherwise) and, with a
 * device, a device buffer per slot, a copy stream and an event per slot.
 * load_cuda.cu implements it with CUDA; load_nocuda.c without (device >= 0
 * is then SL_ENOTSUP). Threading: submit is called by the one thread that
 * completes batches in order; the consumer thread reads device/event. */
typedef struct sl_loader sl_loader;
int sl_loader_create(int device, size_t slot_bytes, unsigned nslots, sl_loader **out);
/* Host memory of a slot (64-byte aligned, slot_bytes). */
void *sl_loader_host(sl_loader *l, unsigned slot);
/* Start the host-to-device copy of the first `bytes` of a slot on the copy
 * stream and record the slot's event after it (no host sync). Without a
 * device: a no-op that returns SL_OK. */
int sl_loader_submit(sl_loader *l, unsigned slot, size_t bytes);
/* Device buffer and ready event (cudaEvent_t) of a slot; NULL without a device. */
void *sl_loader_device(sl_loader *l, unsigned slot);
void *sl_loader_event(sl_loader *l, unsigned slot);
/* Before the slot's host memory is written again: wait until its previous
 * copy finished (cudaEventSynchronize); a no-op without a device. */
int sl_loader_reuse(sl_loader *l, unsigned slot);
void sl_loader_destroy(sl_loader *l);

#endif /* SL_PIPELINE_INT_H */

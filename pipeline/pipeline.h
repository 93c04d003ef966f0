/*
 * pipeline/pipeline.h - the threaded input pipeline: record shards in,
 * decoded and augmented batches out (DESIGN.md section 4).
 *
 *   shards ─▶ readers (R threads, interleaved block reads or global preads)
 *          ─▶ fused shuffle-repeat (buffer of N records, or a global permutation)
 *          ─▶ fused map-batch (W workers decode + augment into batch slots)
 *          ─▶ prefetch / load (ring of P batches; with CUDA, async H2D copies)
 *          ─▶ consumer (sl_pipeline_next / sl_pipeline_release)
 *
 * Threading: one consumer thread calls next/release/stats/state_save; the
 * pipeline's own threads are created by sl_pipeline_create and joined by
 * sl_pipeline_destroy. Errors in pipeline threads are sticky: the first one
 * comes back (with its message) from the next call to sl_pipeline_next and
 * every call after it.
 *
 * Determinism: each sample's augmentation RNG is seeded by (seed, epoch,
 * record id) and batches are assembled by sequence number, so the same
 * config and data give byte-identical batches whatever the numbers of
 * reader and worker threads. A corrupt record (skip policy) does not shift
 * anything: under SL_TRANSFORM_TRAIN its slot is refilled with the next good
 * record after it in the dataset (by record id), so the batch stays full and
 * every run is identical; under SL_TRANSFORM_EVAL it is left out instead (the
 * batch has that many samples fewer, n < batch, 0 when all are bad), so an
 * evaluation counts every good record once and no record twice. Batch
 * indices, their number and the resume state are the same either way. Each
 * bad record is counted once where it is met in the input stream (once per
 * epoch), named among the first SL_PIPELINE_MAX_BAD_REPORT (stats).
 *
 * Memory: bounded by configuration: the shuffle buffer (records and bytes),
 * the reader window (bytes) and the batch ring (prefetch x batch bytes);
 * sl_pipeline_memory_estimate says each part in bytes, and cfg.memory_budget
 * (with sl_pipeline_memory_fit) bounds their sum (pipeline/memory.c).
 * Shard files are memory-mapped read-only where they can be (regular
 * files), so records are read in place from the page cache; environment
 * SLUICE_READ=pread (read at create) reads them with pread instead. As with
 * any mmap reader, a shard must not be truncated or rewritten while a
 * pipeline reads it: touching a truncated mapping raises SIGBUS.
 */
#ifndef SL_PIPELINE_H
#define SL_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

struct sl_io_opts; /* records/bytesrc.h */

#include "common/dtype.h"
#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_shuffle_mode {
    SL_SHUFFLE_NONE = 0,   /* interleaved file order, no record shuffle */
    SL_SHUFFLE_BUFFER,     /* a buffer of shuffle_buffer records (tf.data's
                            * repeat().shuffle(N): it mixes an epoch's last records
                            * with the next one's first). When the buffer holds a
                            * whole epoch of the records this rank reads (ceil(R /
                            * world) with SL_SPLIT_RECORDS), it takes one epoch at
                            * a time (all of it before the first draw), so each
                            * epoch is a uniformly random permutation, still read
                            * in blocks, and the stats' shuffle_buffer is that
                            * epoch's records (ceil(R / world)) */
    SL_SHUFFLE_GLOBAL,     /* a seeded permutation of all records per epoch, read by pread */
} sl_shuffle_mode;

typedef enum sl_transform_mode {
    SL_TRANSFORM_TRAIN = 0, /* random-resized-crop + horizontal flip + normalize */
    SL_TRANSFORM_EVAL,      /* resize shorter side to size/crop_fraction, center crop, normalize */
} sl_transform_mode;

typedef enum sl_layout {
    SL_LAYOUT_NHWC_U8 = 0,  /* (N,H,W,3) u8, no normalization (GPU-side normalize) */
    SL_LAYOUT_NHWC_F32,     /* (N,H,W,3) f32, normalized */
    SL_LAYOUT_NCHW_F32,     /* (N,3,H,W) f32, normalized */
} sl_layout;

/* How rank `rank` of `world` takes its part of the data (DESIGN.md 6).
 *
 * SL_SPLIT_FILES: rank r reads only the shards i with i % world == r; every
 *   other setting applies to that smaller dataset. W ranks see different
 *   samples than one rank would. The batches' record ids are the whole
 *   dataset's all the same (world 1's ids), and the stats'
 *   records_per_epoch_world counts every rank's shards: each rank loads
 *   every shard's index to count them. A rank needs a shard of its own
 *   (fewer shards than ranks: SL_EINVAL, pointing at SL_SPLIT_RECORDS).
 *
 * SL_SPLIT_RECORDS: every rank opens ALL shards (record ids are global, the
 *   ids of world 1), runs world 1's read order (same seed, file order,
 *   interleave, permutation) and keeps its share of the input positions p
 *   (0, 1, 2, ... over the whole run, across epochs):
 *     SL_SHUFFLE_GLOBAL  p % world == rank; only the kept records are read (one
 *                        pread or one mapped range each), so the ranks' reads
 *                        are disjoint;
 *     SL_SHUFFLE_NONE    p % world == rank; units (blocks) are read from the
 *                        first to the last kept record, and the other ranks'
 *                        records in them are dropped before decode (tf.data's
 *                        DATA auto-shard): W ranks read each byte about
 *                        W x (block - W + 1) / block times while W <= block,
 *                        the price of the union property below;
 *     SL_SHUFFLE_BUFFER  each epoch's positions are cut into world contiguous
 *                        ranges, rank r reads range r only (disjoint reads:
 *                        each shard byte once an epoch over all ranks; a
 *                        rank reads only its own records, as under PyTorch's
 *                        DistributedSampler), then shuffles them in its own
 *                        buffer.
 *                        The ranges hold as many positions as the stride
 *                        p % world == rank gives each rank in that epoch (the
 *                        R mod world larger ones rotate over the ranks), so
 *                        every count below is the same in every mode
 *                        (pipeline/order.c's top comment has the cut).
 *   Counts: a rank takes floor(R / world) or ceil(R / world) records of each
 *   epoch of R, and after e whole epochs sl_split_samples(e * R, rank,
 *   world), whatever the shuffle.
 *   Union property, NONE and GLOBAL only: with per-rank batch b, the union of
 *   the W ranks' k-th batches is exactly the k-th batch of the world-1
 *   pipeline with batch b * world (same record ids, epochs, labels and bytes,
 *   since a sample's augmentation depends only on (seed, epoch, record id));
 *   rank r's j-th sample is world 1's sample j * world + r. Epoch boundaries
 *   may fall inside a batch. With BUFFER it does NOT hold: each rank reads
 *   its own range of each epoch and shuffles it in its own buffer (the ranks
 *   still read disjoint records that cover each epoch).
 *   End of a finite run: the run ends where world 1's does (with
 *   drop_remainder, after world 1's last full batch of b * world, so every
 *   rank has the same number of batches); without drop_remainder the last
 *   world-1 batch is split too, and a rank with no position in it has one
 *   batch fewer than rank 0. 0 < records < world is refused (some rank would
 *   get nothing in an epoch). Cost: each rank loads every shard's index
 *   (GLOBAL: a permutation of all records). */
typedef enum sl_rank_split {
    SL_SPLIT_FILES = 0,    /* shard i to rank i % world (default) */
    SL_SPLIT_RECORDS,      /* every rank an equal share of the input positions (see above) */
} sl_rank_split;

/* Where JPEGs are decoded (--decode; pipeline/image/gdec_int.h has the design). */
typedef enum sl_decode_mode {
    SL_DECODE_CPU = 0,     /* the map workers, libjpeg-turbo (default) */
    SL_DECODE_GPU,         /* nvJPEG (hardware backend when the GPU has one, else its GPU
                            * hybrid backend), loaded at run time, with the crop and resize
                            * on the GPU into the device batch; what nvJPEG cannot decode
                            * (progressive for the hardware decoder, CMYK, ...) goes to the
                            * CPU path per image. Needs device >= 0 and libnvjpeg: else
                            * create fails saying which is missing. Same samples, labels,
                            * order and crops as SL_DECODE_CPU (the same seed gives the
                            * same stream); pixels not byte-identical (the GPU resizes RGB
                            * from a full-size decode). The batch is d_data: `data` holds
                            * only the samples decoded on the CPU. */
    SL_DECODE_AUTO,        /* SL_DECODE_GPU when device >= 0, a CUDA device and libnvjpeg
                            * are there, else SL_DECODE_CPU */
} sl_decode_mode;

typedef enum sl_error_policy {
    SL_ON_ERROR_SKIP = 0,   /* count and name the record; refill its slot (train transform)
                             * or leave it out (eval transform: a shorter batch) (default) */
    SL_ON_ERROR_FAIL,       /* the first bad record fails the pipeline */
} sl_error_policy;

typedef struct sl_pipeline_config {
    size_t size;               /* sizeof(sl_pipeline_config), set by SL_PIPELINE_CONFIG_INIT:
                                * the create functions and sl_eval_run refuse another (a
                                * caller built against other headers; NCCL's ncclConfig_t) */
    /* sources */
    const char *data;          /* dataset directory (dataset.json or *-of-*.tfrecord), a glob
                                * of shard files ("d/train-*.tfrecord"; sorted), or a
                                * single .tfrecord file */
    const char *split;         /* "train" */
    unsigned rank, world;      /* this rank of world: see rank_split */
    sl_rank_split rank_split;  /* SL_SPLIT_FILES (default) or SL_SPLIT_RECORDS. (Not named
                                * `split`: that is the split's name above.) */
    /* reading */
    unsigned readers;          /* reader threads; 0 = 2 */
    unsigned cycle;            /* files read at once (interleave cycle length); 0 = 4 */
    unsigned block;            /* consecutive records taken from a file per visit; 0 = 16 */
    uint64_t read_window_bytes;/* read-ahead bytes in flight; 0 = 64 MiB */
    /* shuffle and repeat */
    sl_shuffle_mode shuffle;
    uint64_t shuffle_buffer;   /* records (SL_SHUFFLE_BUFFER) */
    uint64_t shuffle_bytes;    /* byte budget of that buffer; 0 = 1 GiB. The effective
                                * buffer is min(shuffle_buffer, shuffle_bytes / mean
                                * record size from the index files) */
    int shuffle_files;         /* reshuffle the file order every epoch (train default 1) */
    int64_t epochs;            /* <= 0: forever */
    /* transform */
    sl_transform_mode transform;
    int height, width;         /* output size; 224 x 224 */
    float scale_min, scale_max;/* random-resized-crop area fraction; 0.08, 1 */
    float ratio_min, ratio_max;/* aspect ratio w/h; 3/4, 4/3 */
    int flip;                  /* random horizontal flip (train); 1 */
    float crop_fraction;       /* eval: center crop is size / crop_fraction of the resized
                                * shorter side; 0.875 */
    float mean[3], std[3];     /* normalization in 0..255 units (f32 layouts) */
    sl_layout layout;
    /* batching */
    unsigned batch;            /* 64 */
    int drop_remainder;        /* drop the last partial batch of the last epoch */
    unsigned workers;          /* map workers; 0 = one per core */
    unsigned prefetch;         /* batches in the ring; 0 = 2 * ... at least 3 */
    uint64_t seed;
    sl_error_policy on_error;
    uint64_t max_bad;          /* with SKIP: more bad records than this fails; 0 = 1000 */
    uint64_t max_pixels;       /* a JPEG whose header claims more pixels is a bad record
                                * (refused before decoding); 0 = SL_MAX_PIXELS_DEFAULT,
                                * 2^26 (records.h) */
    int64_t label_offset;      /* subtracted from stored labels; -1 = from dataset.json */
    int device;                /* CUDA device of the load stage; -1 = host batches */
    sl_decode_mode decode;     /* SL_DECODE_CPU (default), SL_DECODE_GPU or SL_DECODE_AUTO */
    /* WebDataset shards (records/wds.h): the label is the integer field
     * label_key of each sample's .json member; NULL = the .cls member.
     * Borrowed: it must stay valid until sl_pipeline_destroy. */
    const char *label_key;
    /* Remote I/O settings of this pipeline's reads (records/bytesrc.h): the
     * listing, dataset.json and the index files at create, the shards after.
     * NULL = the process-wide ones (sl_io_configure) as they are at create.
     * Read at create only (copied); another pipeline's are not touched. */
    const struct sl_io_opts *io;
    /* Bytes this pipeline may hold (sl_pipeline_memory below); 0 = no
     * budget. With one, create refuses (SL_EINVAL, before any thread starts
     * or any record is read) a config whose estimate exceeds it, naming
     * each part, and reads local shards with pread into its own buffers:
     * a mapped shard's pages stay in the process's RSS once read (the whole
     * dataset's, in time), which no budget smaller than the data holds.
     * Shrinking to fit is the caller's: sl_pipeline_memory_fit. */
    uint64_t memory_budget;
    /* SL_TUNE_WORKERS | SL_TUNE_PREFETCH: adjust how many of the workers
     * work and how many batches are decoded ahead, online, from the stage
     * figures (pipeline/tune.c), within the workers started and the ring
     * allocated (never more threads or memory); 0 = fixed (default).
     * SL_TUNE_INFLIGHT: remote shards, each reader's ranged GETs in flight,
     * within io's inflight (what the memory budget counts), from the read
     * stage's waits and bytes/s. The batches are the same bytes either way.
     * sl_pipeline_tuning_get says what it did. */
    unsigned tune;
} sl_pipeline_config;

enum { SL_TUNE_WORKERS = 1, SL_TUNE_PREFETCH = 2, SL_TUNE_INFLIGHT = 4 };

#define SL_PIPELINE_CONFIG_INIT                                                                    \
    {                                                                                              \
        .size = sizeof(sl_pipeline_config), .split = "train", .rank = 0, .world = 1, .rank_split = SL_SPLIT_FILES,                     \
        .shuffle = SL_SHUFFLE_BUFFER,                                                              \
        .shuffle_buffer = 10000, .shuffle_files = 1, .epochs = 1,                                  \
        .transform = SL_TRANSFORM_TRAIN, .height = 224, .width = 224, .scale_min = 0.08f,          \
        .scale_max = 1.0f, .ratio_min = 0.75f, .ratio_max = 4.0f / 3.0f, .flip = 1,                \
        .crop_fraction = 0.875f, .mean = {123.675f, 116.28f, 103.53f},                             \
        .std = {58.395f, 57.12f, 57.375f}, .layout = SL_LAYOUT_NCHW_F32, .batch = 64,              \
        .on_error = SL_ON_ERROR_SKIP, .label_offset = -1, .device = -1,                            \
        .label_key = NULL, .io = NULL,                                                             \
    }

/* The evaluation pipeline of a training config: train's settings over
 * (data, split), one epoch in order (transform eval, no shuffle, the last
 * partial batch kept). sluice train's replicas evaluate through it
 * (train/loop/replica.c, which sets the ranks), and the memory fit counts
 * it beside each training pipeline (memory.c). */
void sl_pipeline_eval_config(const sl_pipeline_config *train, const char *data,
                             const char *split, sl_pipeline_config *ev);

/* A batch lent by sl_pipeline_next; valid until sl_pipeline_release. */
typedef struct sl_batch {
    uint64_t index;            /* batch number since the start of the run (0, 1, ...) */
    unsigned n;                /* samples in the batch (== batch except a last partial one,
                                * and, under the eval transform, less the bad records left
                                * out: see Determinism above) */
    int height, width;
    sl_layout layout;
    void *data;                /* host: n samples in the layout (u8 or f32) */
    size_t sample_bytes;       /* bytes of one sample */
    int32_t *labels;           /* n labels (label_offset subtracted) */
    uint64_t *record_ids;      /* n global record ids (which record filled each slot) */
    int32_t *epochs;           /* n epoch numbers */
    void *d_data;              /* device copy when config.device >= 0, else NULL */
    void *ready_event;         /* cudaEvent_t recorded after the copy (device only); wait on
                                * it on the consumer's stream: cudaStreamWaitEvent */
    unsigned skipped;          /* bad records (skip policy) whose slots this batch refilled
                                * with the next good record (train transform) or left out
                                * (eval transform: n is that much smaller) */
} sl_batch;

typedef struct sl_pipeline sl_pipeline;

/* Validate cfg, open the shards (index files are loaded, or built by
 * scanning a shard that has none), start the threads. The config is copied
 * (strings too). Errors: SL_EINVAL naming the field, SL_ENOENT for missing
 * data, SL_ECORRUPT for a broken index or manifest. */
int sl_pipeline_create(const sl_pipeline_config *cfg, sl_pipeline **out);

/* The next batch in order. SL_EOF after the last batch of the last epoch.
 * Blocks until the batch is ready. *out is lent until release. At most
 * `prefetch - 1` batches may be held at once (more would deadlock: SL_EINVAL). */
int sl_pipeline_next(sl_pipeline *p, sl_batch **out);
/* sl_pipeline_next that waits at most timeout_ms milliseconds: SL_ETIMEDOUT
 * (nothing taken, the message says which batch is awaited) when the batch is
 * not ready by then; call again to go on waiting. Otherwise exactly as next.
 * For a consumer that must look up from time to time while it waits (a
 * Python binding checking for Ctrl-C, a watchdog). Same thread as next. */
int sl_pipeline_next_wait(sl_pipeline *p, unsigned timeout_ms, sl_batch **out);
/* Give a batch back (its slot is refilled). */
void sl_pipeline_release(sl_pipeline *p, sl_batch *b);
/* Stop and join the pipeline's threads (mid-epoch is fine) without freeing
 * anything: batches lent before the call stay readable (host and device
 * memory) until sl_pipeline_destroy; next and next_wait return SL_ECANCELED
 * from then on; release, stats and state_save still work. Idempotent; NULL
 * is a no-op. For a consumer whose lent batches are still referenced (a
 * Python tensor) when it stops reading. Consumer thread. */
void sl_pipeline_stop(sl_pipeline *p);

/* Which decoder runs, for logs: "cpu", or "gpu: nvJPEG 12.4 hardware
 * backend (libnvjpeg.so.12); N images on the GPU, M on the CPU (...)"
 * (SL_DECODE_AUTO resolved at create). Any thread. */
void sl_pipeline_decoder(sl_pipeline *p, char *buf, size_t cap);

/* Per-stage figures since create. */
typedef struct sl_stage_stats {
    char name[16];             /* "read", "shuffle", "map", "load" */
    unsigned threads;
    uint64_t items;            /* records read / samples shuffled / samples decoded / batches */
    uint64_t bytes;
    double busy_s, wait_in_s, wait_out_s; /* summed over the stage's threads */
    double queue_fill;         /* mean fill (0..1) of the stage's output queue */
} sl_stage_stats;

#define SL_PIPELINE_MAX_STAGES 4
#define SL_PIPELINE_MAX_BAD_REPORT 16

typedef struct sl_pipeline_stats {
    double elapsed_s;
    uint64_t batches, samples; /* handed out; samples counts positions in the run (a
                                * record left out under the eval transform too) */
    unsigned nstages;
    sl_stage_stats stages[SL_PIPELINE_MAX_STAGES];
    uint64_t bad_records;      /* skipped records (refilled under the train transform, left
                                * out under eval), each counted where the input stream meets
                                * it (once per epoch), and records left out at open (the
                                * unreadable tail of a truncated shard) */
    char bad[SL_PIPELINE_MAX_BAD_REPORT][256]; /* first few: "file: record N @ off: what" */
    uint64_t bad_records_out;  /* of bad_records, those in the batches handed out so far (the
                                * sum of their sl_batch.skipped) and those left out at open:
                                * what the consumer has skipped, without the batches the
                                * pipeline decoded ahead */
    uint64_t shuffle_buffer;   /* effective buffer (records); when an epoch fits in the
                                * configured one, the epoch's (ceil(R / world) with
                                * SL_SPLIT_RECORDS): an epoch at a time, SL_SHUFFLE_BUFFER */
    uint64_t records_per_epoch;/* this rank's share: SL_SPLIT_FILES the records of its
                                * shards; SL_SPLIT_RECORDS the positions of epoch 0 it
                                * keeps, ceil((R - rank) / world) of R (later epochs may
                                * give it one fewer or one more when world does not
                                * divide R) */
    uint64_t records_per_epoch_world; /* records per epoch over all ranks (R, world 1's
                                * records_per_epoch), in both splits (SL_SPLIT_FILES
                                * counts the other ranks' shards too). Steps per epoch
                                * that agree on every rank: ceil(R / (batch * world)) */
} sl_pipeline_stats;

int sl_pipeline_stats_get(sl_pipeline *p, sl_pipeline_stats *out);

/* ----------------------------------------------------------------- memory */
/* What a pipeline holds, in bytes, estimated from its config and the index
 * files (pipeline/memory.c says how each part is bounded). */
typedef enum sl_mem_part {
    SL_MEM_READ_WINDOW = 0, /* the reorder window's units (and, read by pread or over
                             * HTTP, the pool of recycled unit buffers) */
    SL_MEM_SHUFFLE,         /* the units a record in the shuffle buffer keeps alive */
    SL_MEM_REMOTE,          /* remote reads: per transfer in flight, curl's buffers */
    SL_MEM_DECODE,          /* decode workers: a record buffer, the unit being decoded,
                             * the decoder's scratch */
    SL_MEM_RING,            /* the prefetch ring: prefetch decoded batches */
    SL_MEM_INDEX,           /* the index entries (and shuffle global's permutation) */
    SL_MEM_NPARTS
} sl_mem_part;

typedef struct sl_pipeline_memory {
    uint64_t part[SL_MEM_NPARTS]; /* bytes of one pipeline */
    uint64_t total;               /* their sum */
    uint64_t eval;                /* the evaluation pipeline beside this one, when the fit
                                   * counts one (sl_memory_fit.eval_beside), else 0; not in
                                   * total */
    /* the settings the estimate is of (the config's zeros resolved) */
    unsigned readers, workers, prefetch, inflight; /* inflight: remote only, else 0 */
    uint64_t read_window;         /* bytes */
    uint64_t shuffle_records;     /* effective buffer (records; 1 = none) */
    uint64_t records, data_bytes; /* this rank's records and their framed bytes */
    uint64_t mean_record, max_record; /* framed bytes, from the index */
    int remote, mapped;           /* shards are URLs; read through a mapping (no pool) */
} sl_pipeline_memory;

/* "read window", "shuffle buffer", "remote in flight", "decode workers",
 * "prefetch ring", "index"; and the JSON keys "read_window", "shuffle",
 * "remote", "decode", "ring", "index". */
const char *sl_mem_part_name(sl_mem_part part);
const char *sl_mem_part_key(sl_mem_part part);

/* The estimate for cfg. Opens the index files (a shard without one is
 * scanned, as create would), reads no record. Errors: as create's. */
int sl_pipeline_memory_estimate(const sl_pipeline_config *cfg, sl_pipeline_memory *out);

/* What sl_pipeline_memory_fit may not change: the settings the user gave. */
enum {
    SL_MEM_FIXED_PREFETCH = 1,
    SL_MEM_FIXED_INFLIGHT = 2,
    SL_MEM_FIXED_WORKERS = 4,
    SL_MEM_FIXED_READ_WINDOW = 8,
};

typedef struct sl_memory_fit {
    uint64_t budget;          /* bytes for all the pipelines together (> 0) */
    unsigned pipelines;       /* pipelines of this config alive at once (replicas); 0 = 1 */
    unsigned fixed;           /* SL_MEM_FIXED_* */
    unsigned min_prefetch;    /* the fewest batches the consumer needs (holds + 1); 0 = 2 */
    const char *cmd;          /* names the budget in messages: "sluice train: --memory-
                               * budget" or "sluice.Pipeline: memory_budget"; NULL = the
                               * function's name */
    struct sl_io_opts *io;    /* storage for a shrunk inflight (remote): cfg->io is then
                               * pointed at it; NULL = inflight is not shrunk */
    int eval_beside;          /* 1: each pipeline has an evaluation pipeline beside it while
                               * it lives (sluice train's, train/loop/replica.c: cfg's
                               * settings, no shuffle buffer, the evaluated split's records),
                               * counted as its own estimate over eval_data's eval_split
                               * when both are given (opened as its pipeline opens them), else
                               * as cfg's estimate less its shuffle buffer */
    const char *eval_data;    /* the evaluated split's dataset (sl_train_eval_where) */
    const char *eval_split;
} sl_memory_fit;

/* Fit cfg in fit->budget: estimate, and while pipelines x (total + eval)
 * exceeds it, shrink what is not fixed in this order (each down to its floor before
 * the next): prefetch (to min_prefetch), remote requests in flight (to 1),
 * workers (to 1), the read window (to one read unit, at least 1 MiB). The
 * shrunk values are written into cfg (workers, prefetch, read_window_bytes,
 * cfg->io's inflight), and cfg->memory_budget = budget / pipelines. *out
 * gets the final estimate; what (e.g. "prefetch 6 -> 3, workers 4 -> 2")
 * says what was shrunk ("" for nothing). When it cannot fit: SL_EINVAL,
 * before any record is read, with a message that names every part and
 * its bytes, what could not shrink (a setting given, the shuffle buffer
 * asked for) and the budget it would need. */
int sl_pipeline_memory_fit(sl_pipeline_config *cfg, const sl_memory_fit *fit,
                           sl_pipeline_memory *out, char *what, size_t cap);

/* What the online tuning did (cfg.tune; without it the fixed settings). */
typedef struct sl_pipeline_tuning {
    unsigned knobs;                     /* cfg.tune's SL_TUNE_* (0: fixed) */
    unsigned workers_max, prefetch_max; /* started workers, ring slots */
    unsigned workers, prefetch;         /* active now, batches decoded ahead now */
    unsigned workers_lo, workers_hi;    /* the range used */
    unsigned prefetch_lo, prefetch_hi;
    double workers_mean;                /* active workers, mean over the batches handed out */
    uint64_t windows, changes;          /* decisions taken, changes made */
    char last[96];                      /* the last change and why ("" = none) */
    /* remote shards (else all 0): ranged GETs in flight per reader */
    unsigned inflight_max, inflight;    /* io's inflight (the bound), the limit now */
    unsigned inflight_lo, inflight_hi;  /* the range used */
    uint64_t inflight_windows, inflight_changes;
    char inflight_last[112];            /* the last change and why ("" = none) */
} sl_pipeline_tuning;

int sl_pipeline_tuning_get(sl_pipeline *p, sl_pipeline_tuning *out);

/* Chrome trace-event JSON: start recording spans (one per read block,
 * sample decode, batch copy) into a bounded in-memory log; write it to path
 * (atomically) with sl_pipeline_trace_write. */
int sl_pipeline_trace_start(sl_pipeline *p, size_t max_events);
int sl_pipeline_trace_write(sl_pipeline *p, const char *path);

/* Resume state: small (no data), the position after the last batch returned
 * by next. Text (JSON) so it can live in a training checkpoint. */
#define SL_PIPELINE_STATE_MAX 512
int sl_pipeline_state_save(sl_pipeline *p, char *buf, size_t cap, size_t *len);
/* Create a pipeline that continues from a saved state: its batches are
 * byte-identical to those the saving pipeline would have produced next. The
 * config must match the one the state was saved with (a hash is checked;
 * thread counts and prefetch may differ). */
int sl_pipeline_create_from_state(const sl_pipeline_config *cfg, const char *state, size_t len,
                                  sl_pipeline **out);

/* A pipeline positioned as if `batches` batches holding `samples` samples
 * had been handed out by a pipeline created from cfg: its first batch has
 * index `batches` and holds samples samples .. samples + batch - 1 of the
 * run, byte-identical to what that pipeline would give from there, in every
 * shuffle mode (the fast-forward of create_from_state, without a saved
 * state: O(samples) cheap steps plus reading at most one shuffle buffer of
 * records). samples need not be a multiple of cfg->batch: batches then
 * start there (sample samples + i * batch begins batch batches + i), and
 * the run still ends where cfg's run ends (with drop_remainder, at the end
 * of its last full batch counted from sample 0), so the last batch may be
 * partial. Errors: as sl_pipeline_create, and SL_EINVAL when samples is
 * past the end of a finite run or batches + the remaining batches would
 * overflow.
 * Use: resuming a run saved with W ranks on W' ranks (SL_SPLIT_RECORDS,
 * NONE or GLOBAL): after world-1 position G (k steps of global batch N: G =
 * k * N), rank r of W' starts at samples = sl_split_samples(G, r, W'),
 * which is G / W' when W' divides G; the union of the new ranks' batches
 * is then world 1's stream from G on (batch b' * W'). */
int sl_pipeline_create_at(const sl_pipeline_config *cfg, uint64_t batches, uint64_t samples,
                          sl_pipeline **out);

/* Samples that rank `rank` of `world` has taken under SL_SPLIT_RECORDS when
 * world 1's stream is at position `global`: the positions p < global with
 * p % world == rank, i.e. ceil((global - rank) / world), 0 when global <=
 * rank (SL_SHUFFLE_BUFFER's cut gives the same counts where global is a
 * whole number of epochs). world 0 gives 0. Pure arithmetic, any thread. */
uint64_t sl_split_samples(uint64_t global, unsigned rank, unsigned world);

/* ------------------------------------------------------- GPU normalization */
/* sl_dtype: common/dtype.h */

/* On the GPU: d_in (n, h, w, 3) u8 NHWC (a batch's d_data with layout
 * SL_LAYOUT_NHWC_U8) into d_out, normalized ((v - mean[c]) / std[c]) in
 * out_layout (SL_LAYOUT_NHWC_F32 or SL_LAYOUT_NCHW_F32 shapes) with element
 * type dtype, enqueued on stream (a cudaStream_t; NULL = default stream).
 * SL_ENOTSUP in a build without CUDA. */
int sl_cuda_normalize(const void *d_in, unsigned n, int h, int w, const float mean[3],
                      const float std[3], sl_layout out_layout, sl_dtype dtype, void *d_out,
                      void *stream);

/* Stop the threads (mid-epoch is fine), free everything. NULL is a no-op.
 * Lent batches become invalid. */
void sl_pipeline_destroy(sl_pipeline *p);

#ifdef __cplusplus
}
#endif
#endif /* SL_PIPELINE_H */

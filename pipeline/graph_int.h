/*
 * pipeline/graph_int.h - the pipeline object and the declarations shared by
 * the files of the graph only (graph.c, reader.c, reader_remote.c,
 * pipeline.c, map.c, state.c, stats.c, trace.c). pipeline.c's DESIGN comment describes the threads,
 * queues and lock; this header gives the shapes.
 *
 * Threading: every field marked "mu" is read and written with p->mu held;
 * fields marked "const" are set before the threads start and never change;
 * "own" fields belong to one thread.
 */
#ifndef SL_GRAPH_INT_H
#define SL_GRAPH_INT_H

#include <pthread.h>
#include <stdint.h>

#include "common/clock.h"
#include "pipeline/pipeline_int.h"
#include "records/bytesrc.h"

/* Stage numbers of the stats arrays (sl_pipeline_stats.stages order). */
enum { SL_STAGE_READ = 0, SL_STAGE_SHUFFLE, SL_STAGE_MAP, SL_STAGE_LOAD, SL_STAGE_COUNT };

/* A read unit in memory: nrec framed records, one pread. Lives in the live
 * table from the moment a reader claims it until the last of its records
 * has been pushed into the shuffle, popped and decoded (refs reaches 0).
 * Every field is mu except data/bad while the reader fills them (ready == 0:
 * only that reader touches them) and after (read-only for everyone). */
typedef struct sl_unit {
    sl_read_unit u;
    const uint8_t *data;/* (u.bytes) the records' framed bytes, from u.offset: in the
                         * shard's mapping, or in buf */
    uint8_t *buf;       /* own: pread target when the shard is not mapped */
    size_t cap;         /* allocated bytes of buf */
    uint8_t *bad;       /* (u.nrec) sl_frame_status per record (records.h) */
    uint32_t bad_cap;
    uint32_t id;        /* index in the live table (the high half of a record handle) */
    uint32_t pushed;    /* records pushed into the shuffle so far */
    uint32_t refs;      /* records not yet decoded (pushed or still to push) */
    int ready;          /* read and checked */
    char *err;          /* own: why the unit could not be read (remote, skip policy:
                         * its records are SL_FRAME_UNREAD), else NULL */
    struct sl_unit *next_free; /* pool link */
} sl_unit;

/* A shard file's read-only mapping (reader.c), and the file's identity when
 * it was opened (ino 0: not opened), to tell "the file changed under us"
 * from other read errors. */
typedef struct sl_shard_map {
    const uint8_t *base;
    size_t len;
    uint64_t dev, ino, size;
    int64_t mtime_ns;
} sl_shard_map;

/* A shuffle item: (live table id, record index in the unit). */
static inline uint64_t sl_handle(uint32_t id, uint32_t idx)
{
    return (uint64_t)id << 32 | idx;
}

/* One batch slot of the ring (slot r holds batches r, r + P, r + 2P, ...). */
/* ids[k] of a sample left out (map.c: a bad record under the eval
 * transform is not refilled); complete_batches compacts the slot. */
#define SL_SAMPLE_HOLE UINT64_MAX

typedef struct sl_ring_slot {
    uint64_t batch;     /* mu: the batch this slot holds or may be filled with now */
    unsigned done;      /* mu: samples of `batch` finished (holes included) */
    unsigned bad;       /* mu: of those, samples whose own record was bad (refilled, or
                         * left out: holes) */
    unsigned holes;     /* mu: of those, left out (SL_SAMPLE_HOLE); the batch lent has
                         * done - holes samples, moved to its front before submit */
    int ready;          /* mu: complete and submitted, not yet handed out */
    int lent;           /* mu: handed to the consumer, not yet released */
    int32_t *labels;    /* (B) written by workers into distinct entries */
    uint64_t *ids;      /* (B) */
    int32_t *epochs;    /* (B) */
    sl_batch view;      /* what next() lends */
} sl_ring_slot;

/* A map worker's own state. */
typedef struct sl_worker {
    struct sl_pipeline *p;
    unsigned index;     /* 0..W-1 */
    uint32_t tid;       /* trace thread id */
    sl_decoder *dec;    /* own */
    uint8_t *rec;       /* own: one framed record (max_record bytes), for refills */
} sl_worker;

typedef struct sl_reader_ctx {
    struct sl_pipeline *p;
    unsigned index;
    uint32_t tid;
} sl_reader_ctx;

/* Per-stage accumulators (mu). Times in nanoseconds. */
typedef struct sl_stage_acc {
    uint64_t items, bytes;
    uint64_t busy_ns, wait_in_ns, wait_out_ns;
    double fill_sum;    /* sum of sampled output-queue fills (0..1) */
    uint64_t fill_n;
} sl_stage_acc;

typedef struct sl_trace sl_trace;

struct sl_pipeline {
    /* const: configuration and what create derived from it */
    sl_pipeline_config cfg;     /* copy; data and split point at the copies below */
    char *data, *split;
    sl_source_set src;
    int64_t label_offset;       /* subtracted from stored labels */
    uint64_t shuffle_cap;       /* effective shuffle buffer (records) */
    size_t sample_bytes;        /* one sample in the layout */
    unsigned readers, workers, prefetch;
    uint64_t read_window;       /* bytes */
    uint64_t input_total;       /* records in the input stream: epochs x total, or UINT64_MAX */
    uint64_t sample_limit;      /* samples the run produces; UINT64_MAX forever */
    uint64_t nbatches;          /* batches the run produces; UINT64_MAX forever */
    uint64_t t0_ns;             /* create time (CLOCK_MONOTONIC) */

    pthread_mutex_t mu;
    pthread_cond_t cv_read;     /* readers: window space, stop */
    pthread_cond_t cv_unit;     /* claimers: a unit became ready, the order ended, stop */
    pthread_cond_t cv_slot;     /* workers: a ring slot was released, stop */
    pthread_cond_t cv_batch;    /* consumer: a batch was submitted, error */
    int stop;                   /* mu */
    int stop_io;                /* atomic: stop set; remote readers' fetchers watch it */
    unsigned wake;              /* mu: SL_WAKE_* to signal once mu is released */
    int err;                    /* mu: first error of a pipeline thread (sticky) */
    char errmsg[SL_ERRMSG_MAX]; /* mu */

    /* reading (mu) */
    sl_order *order;
    sl_read_unit pending;       /* the next unit to claim, taken from the order */
    int have_pending, order_done;
    uint64_t skip_seq;          /* resume: unit seq whose first skip_n records were fed */
    uint32_t skip_n;            /*   before the cut (0: none) */
    sl_unit **win;              /* ring of claimed units not yet fully fed, seq order */
    size_t win_cap, win_head, win_n;
    uint64_t win_bytes, win_peak;

    /* live units (mu) */
    sl_unit **live;             /* (live_cap) by id; NULL = free */
    uint32_t *free_ids;         /* stack of free ids */
    uint32_t live_cap, nfree;
    sl_unit *pool;              /* recycled units (buffers kept) */
    unsigned npool;
    uint64_t pool_bytes;        /* buffer bytes in the pool (at most read_window) */

    /* shuffle (mu) */
    sl_shuffle shuf;            /* items: record handles */
    uint64_t next_sample;       /* sequence number of the next sample claimed */

    /* batches (mu) */
    sl_loader *loader;          /* const pointer; slot memory per ring slot */
    sl_ring_slot *slots;        /* (prefetch) */
    uint64_t next_submit;       /* next batch to hand to the load stage */
    uint64_t next_index;        /* next batch next() returns */
    uint64_t samples_out;       /* samples in the batches next() returned */
    unsigned held;              /* batches lent */
    uint64_t base_index, base_samples; /* where this pipeline started (0, or a resume point) */
    uint64_t bad_count;         /* skipped records, met (as they are decoded) */
    uint64_t bad_out;           /* skipped records in the batches next() returned, and the
                                 * records left out at open (sl_pipeline_stats) */
    char (*bad)[256];           /* (SL_PIPELINE_MAX_BAD_REPORT) first messages */

    /* shard files: srcs[i] opened lazily, NULL until then (atomic loads/
     * stores); maps[i] set before srcs[i] is published: the whole file
     * mapped read-only (sl_bytesrc_map, unmapped by its close), or {NULL, 0}
     * (remote, not a regular file, mmap failed, or SLUICE_READ=pread): units
     * of that shard are read with sl_bytesrc_read */
    sl_bytesrc **srcs;
    sl_io_opts io;              /* const: the remote I/O settings of every read (resolved) */
    sl_shard_map *maps;
    int use_pread;              /* SLUICE_READ=pread, read at create */
    int remote;                 /* const: shards are URLs (bytesrc.h): no maps; units are
                                 * fetched by many ranged GETs at once (reader_remote.c) */
    char **unreachable;         /* (src.n) remote, skip policy: why shard i could not be
                                 * read after its retries (malloc'd; set once under mu,
                                 * published by an atomic store), else NULL: its records
                                 * are bad from then on, without a request */
    int no_populate;            /* atomic: MADV_POPULATE_READ unsupported (kernel < 5.14) */
    pthread_mutex_t fd_mu;

    /* threads */
    pthread_t *threads;         /* readers then workers */
    unsigned nthreads;          /* started */
    sl_reader_ctx *rctx;        /* (readers) */
    sl_worker *wk;              /* (workers) */

    sl_stage_acc acc[SL_STAGE_COUNT]; /* mu */

    sl_trace *trace;            /* atomic pointer; NULL when not recording */

    struct sl_gdec *gdec;       /* const: the GPU decode stage (gdec_int.h), NULL = CPU */
    struct sl_tune *tune;       /* mu: tune.c's state (cfg.tune), NULL = fixed */
    int submit_busy;            /* mu: a worker submits a batch without the lock (map.c's
                                 * complete_batches: the GPU decode, or a batch with holes
                                 * compacted); the others leave the submits to it */
};

/* Deferred wake-ups. A thread that changes state under p->mu marks which
 * condition variables to signal and signals them after unlocking
 * (sl_pipeline_unlock): signalled while the lock is held, the woken thread
 * often preempts the holder on a busy machine and then blocks on the lock
 * it holds, stalling every worker for a time slice. Before waiting on a
 * condition variable the pending marks are signalled at once
 * (sl_pipeline_wait), so no wake-up is ever lost. Invariant: p->wake == 0
 * whenever p->mu is free. */
enum { SL_WAKE_READ = 1, SL_WAKE_UNIT = 2, SL_WAKE_SLOT = 4, SL_WAKE_BATCH = 8 };

/* --------------------------------------------------------------- graph.c */
/* Release p->mu, then signal the marked wake-ups. */
void sl_pipeline_unlock(sl_pipeline *p);
/* Signal the pending marks, then wait on cv (mu held). */
void sl_pipeline_wait(sl_pipeline *p, pthread_cond_t *cv);
/* sl_pipeline_wait with a deadline (CLOCK_REALTIME, cv's clock): 0 or ETIMEDOUT. */
int sl_pipeline_timed_wait(sl_pipeline *p, pthread_cond_t *cv, const struct timespec *deadline);
/* Record the first error of a pipeline thread (mu held) and wake everyone. */
void sl_pipeline_set_error_locked(sl_pipeline *p, int rc, const char *msg);
/* Samples in batch b (B, or the remainder of the last one). */
unsigned sl_pipeline_batch_size(const sl_pipeline *p, uint64_t b);
/* Position the batch counters at batch k, sample s (resume): ring slot r
 * then waits for the first batch >= k that maps to it. */
void sl_pipeline_set_position(sl_pipeline *p, uint64_t k, uint64_t s);

/* ------------------------------------------------------------ config.c */
/* Readers and workers a pipeline may start, each (checked at create). */
#define SL_MAX_THREADS 1024u
/* The zero fields of c set to their defaults (pipeline.h; memory.c's
 * estimate resolves a config as create does). */
void sl_pipeline_config_defaults(sl_pipeline_config *c);
/* Effective shuffle buffer (records): the record budget capped by the
 * byte budget over the mean record; 1 for NONE and GLOBAL. */
uint64_t sl_effective_shuffle_cap(const sl_pipeline_config *c, const sl_source_set *s);
/* Local shards read with pread rather than mapped (SLUICE_READ=pread, or
 * cfg.memory_budget: mapped pages stay in the RSS). */
int sl_pipeline_reads_by_pread(const sl_pipeline_config *c);

/* ------------------------------------------------------------ pipeline.c */
/* Everything sl_pipeline_create does except starting the threads: the
 * pipeline stands at the start of the run. */
int sl_pipeline_build(const sl_pipeline_config *cfg, sl_pipeline **out);
/* cfg.memory_budget against memory.c's estimate of p (build, sources open):
 * SL_EINVAL naming the parts when it does not fit. */
int sl_pipeline_memory_check(const sl_pipeline *p);
/* Start the reader and worker threads (after build, and after a resume's
 * fast-forward). On error everything started is stopped again. */
int sl_pipeline_start(sl_pipeline *p);

/* ---------------------------------------------------------------- tune.c */
typedef struct sl_tune sl_tune;
/* At build (cfg.tune set; else nothing) and destroy. */
int sl_tune_create(sl_pipeline *p);
void sl_tune_destroy(sl_pipeline *p);
/* A worker, before it claims a sample: wait while it is parked. mu held. */
void sl_tune_gate_locked(sl_pipeline *p, unsigned worker);
/* Is batch b further ahead of the consumer than tuning allows now? mu held. */
int sl_tune_holds_locked(const sl_pipeline *p, uint64_t b);
/* The consumer took a batch (next): count it, decide now and then. mu held. */
void sl_tune_step_locked(sl_pipeline *p);
/* Tests: replace the policy by a schedule: after the k-th batch taken,
 * workers[k % n] active and ahead[k % n] batches ahead (clamped). */
int sl_tune_force(sl_pipeline *p, const unsigned *workers, const unsigned *ahead, size_t n);
/* The remote reader's limit on its requests in flight this round: max (io's
 * inflight, clamped by the reader) when SL_TUNE_INFLIGHT is off, else the
 * tuned limit in [1, max]; completed: units it read since its last call
 * (mu held). */
unsigned sl_tune_inflight_locked(sl_pipeline *p, unsigned max, unsigned completed);
/* Tests: the in-flight limit follows limits[units read % n] instead of the
 * policy (a remote pipeline with SL_TUNE_INFLIGHT; call before the first
 * batch is asked for to start at limits[0]). */
int sl_tune_force_inflight(sl_pipeline *p, const unsigned *limits, size_t n);

/* ----------------------------------------------------------------- map.c */
/* A map worker's thread (arg: its sl_worker). */
void *sl_worker_main(void *arg);

/* -------------------------------------------------------------- reader.c */
/* A reader thread over local shards (arg: its sl_reader_ctx); sl_pipeline_start
 * starts it, or sl_reader_main_remote for remote ones. */
void *sl_reader_main(void *arg);
/* A unit struct for u (from the pool or new), entered in the live table,
 * not ready, no data read yet (mu held). NULL when out of memory. */
sl_unit *sl_unit_claim_locked(sl_pipeline *p, const sl_read_unit *u);
/* Return a unit whose refs reached 0 to the pool or free it (mu held). */
void sl_unit_release_locked(sl_pipeline *p, sl_unit *un);
/* Make a claimed unit's bytes readable (a view into the shard's mapping,
 * its pages populated with one madvise; or one pread into un->buf) and
 * check every record's framing and CRCs into un->bad (no lock; only the
 * caller touches un). */
int sl_unit_read(sl_pipeline *p, sl_unit *un);
/* sl_unit_read's parts, for the remote reader: check the unit's size and
 * size un->bad (clears un->err); make un->buf hold the unit (un->data =
 * un->buf); every record's framing and CRCs into un->bad. No lock. */
int sl_unit_prepare(sl_pipeline *p, sl_unit *un);
int sl_unit_buffer(sl_pipeline *p, sl_unit *un);
void sl_unit_check_frames(sl_pipeline *p, sl_unit *un);
/* The next unit of the order into p->pending: 1, 0 at its end, < 0 on error
 * (set on p); append a claimed unit at the window's tail. mu held. */
int sl_take_pending_locked(sl_pipeline *p);
int sl_window_push_locked(sl_pipeline *p, sl_unit *un);

/* ------------------------------------------------------- reader_remote.c */
/* A reader thread over remote shards: many units in flight (bytesrc.h). */
void *sl_reader_main_remote(void *arg);
/* Does a remote read that failed for good with rc end the run, whatever
 * the error policy? An outage does (SL_EIO: the retry budget spent on
 * timeouts, resets, 5xx; SL_EINVAL: a refusal retries cannot mend;
 * SL_ENOMEM): a shard the server cannot serve is not a bad record. The
 * errors about the object (SL_ECORRUPT: shorter than its index;
 * SL_ENOENT: deleted; SL_EPERM) make its records bad under skip. The
 * readers (reader_remote.c) and a refill's read (map.c) decide alike. */
static inline int sl_remote_fatal(int rc)
{
    return rc == SL_ENOMEM || rc == SL_EIO || rc == SL_EINVAL;
}
/* Why shard i is unreachable (p->unreachable), or NULL. Any thread. */
static inline const char *sl_shard_unreachable(sl_pipeline *p, uint32_t shard)
{
    return p->unreachable ? __atomic_load_n(&p->unreachable[shard], __ATOMIC_ACQUIRE) : NULL;
}
/* Free every unit (live and pooled) and the tables; threads are joined. */
void sl_units_free_all(sl_pipeline *p);
/* Shard i's byte source, opened (and the file mapped, see maps) on first
 * use and shared by all threads. */
int sl_shard_src(sl_pipeline *p, uint32_t shard, sl_bytesrc **src);
void sl_shard_srcs_close(sl_pipeline *p);
/* Shard i changed since it was opened (its size or mtime through the open
 * fd, or the file now at its path is another or differs): 1 with what
 * changed in why, else 0. Any thread, no lock. */
int sl_shard_changed(sl_pipeline *p, uint32_t shard, char *why, size_t n);
/* The fatal error for a read of shard i at byte off that failed (SIGBUS on
 * its mapping, or a short read): SL_EIO "file X changed while the pipeline
 * read it" when it did, else SL_EIO naming the file and offset. */
int sl_shard_read_error(sl_pipeline *p, uint32_t shard, uint64_t off, const char *how);

/* --------------------------------------------------------------- stats.c */
/* Add a sampled queue fill (mu held). */
static inline void sl_acc_fill(sl_stage_acc *a, double fill)
{
    a->fill_sum += fill;
    a->fill_n++;
}
/* Peak bytes in the reader window since create (tests). */
uint64_t sl_pipeline_window_peak(sl_pipeline *p);

/* --------------------------------------------------------------- trace.c */
/* Trace thread ids: 0 the consumer, 1..R readers, R+1..R+W workers. */
void sl_trace_span(sl_pipeline *p, uint32_t tid, const char *name, uint64_t t_start_ns,
                   uint64_t t_end_ns, uint64_t arg);
void sl_trace_free(sl_pipeline *p);

#endif /* SL_GRAPH_INT_H */

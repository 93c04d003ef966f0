/*
 * pipeline/pipeline_int.h - private contracts between the files of pipeline/.
 *
 *   rng         counter-derived RNG streams (determinism whatever the threads)
 *   source.c    the shards this rank reads, their index files, record ids
 *   order.c     read units in read order (interleave / global permutation,
 *               epochs, file-order shuffle) and the shuffle buffer machine
 *   geometry.c  random-resized-crop and eval center-crop geometry
 *   decode.c    ROI JPEG decode (libjpeg API) of a crop, resized
 *   decode_yuv.c  the crop as raw Y/Cb/Cr planes (sl_decode_crop_sample's
 *               default path; resample_planes.c's sl_resample_planes
 *               finishes it)
 *   sample.c    flip + normalize + layout into a batch slot
 *   resample.c  resize + flip + normalize + layout in one pass (the map
 *               workers' path: decode.c's sl_decode_crop_sample) from an
 *               RGB strip; resample_planes.c the same from Y/Cb/Cr planes
 *               (resample_int.h: what the two share)
 *   reader.c, pipeline.c, state.c, stats.c, trace.c, load_*.c: the graph
 *
 * Threading: everything here is reentrant on distinct objects; objects are
 * used by one thread at a time unless said otherwise.
 */
#ifndef SL_PIPELINE_INT_H
#define SL_PIPELINE_INT_H

#include <stdint.h>

#include "pipeline/pipeline.h"
#include "records/records.h"

/* ------------------------------------------------------------------- RNG */
/* splitmix64 steps from a state derived by hashing (seed, a, b): the stream
 * for "sample record_id in epoch e" is sl_rng_for(seed, e, record_id), so a
 * sample's draws never depend on which thread runs it or when. */
typedef struct sl_rng {
    uint64_t s;
} sl_rng;

static inline uint64_t sl_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline sl_rng sl_rng_for(uint64_t seed, uint64_t a, uint64_t b)
{
    sl_rng r = {sl_mix64(sl_mix64(sl_mix64(seed) ^ (a + 0x9e3779b97f4a7c15ull)) ^
                         (b + 0x632be59bd9b4e019ull))};
    return r;
}
static inline uint64_t sl_rng_next(sl_rng *r)
{
    return sl_mix64(r->s += 0x9e3779b97f4a7c15ull);
}
/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float sl_rng_uniform(sl_rng *r)
{
    return (float)(sl_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}
/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < 2^-32
 * for n < 2^32, and deterministic, which is what matters here). */
static inline uint64_t sl_rng_below(sl_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)sl_rng_next(r) * n) >> 64);
}

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

/* ---------------------------------------------------------------- geometry */
typedef struct sl_crop {
    int x, y, w, h;           /* in source pixels; w, h >= 1, inside the image */
} sl_crop;

/* torchvision RandomResizedCrop.get_params: up to 10 tries of area
 * a = W*H*U(smin, smax), ratio r = exp(U(log rmin, log rmax)), w =
 * round(sqrt(a*r)), h = round(sqrt(a/r)); first that fits gives x = U{0..W-w},
 * y = U{0..H-h}; otherwise a center crop with the ratio clamped to
 * [rmin, rmax]. Draws come from rng. */
void sl_rrc_geometry(sl_rng *rng, int W, int H, float smin, float smax, float rmin, float rmax,
                     sl_crop *out);
/* Eval: the region that "resize shorter side to round(max(oh,ow)/crop_fraction),
 * then center crop oh x ow" takes from a W x H source. */
void sl_eval_geometry(int W, int H, int oh, int ow, float crop_fraction, sl_crop *out);

/* ------------------------------------------------------------------ decode */
/* A JPEG decoder (libjpeg API of libjpeg-turbo) with its scratch memory;
 * one per worker thread. */
typedef struct sl_decoder sl_decoder;
int sl_decoder_create(sl_decoder **out);
void sl_decoder_destroy(sl_decoder *d);
/* Refuse (SL_EIMAGE, from the header, before libjpeg allocates anything of
 * the image's size) JPEGs of more than n pixels; 0 = SL_MAX_PIXELS_DEFAULT
 * (records.h), the default of a new decoder. */
void sl_decoder_set_max_pixels(sl_decoder *d, uint64_t n);
/* Check the stream's structure and tables (sl_jpeg_scan) and read its
 * header: image size and components (1 gray, 3 color; CMYK is SL_EIMAGE);
 * *flags (may be NULL) gets sl_jpeg_scan's SL_JPEG_* bits. Every stream is
 * read by a fresh libjpeg object: nothing of an earlier image (its tables)
 * reaches it. The parsed header stays in d for the next sl_decode_* call
 * if that call gets the same jpeg pointer and len, whose bytes must not
 * change in between (the map worker's header, geometry, decode); any
 * other call reads its stream afresh. */
int sl_decoder_header(sl_decoder *d, const uint8_t *jpeg, size_t len, int *w, int *h,
                      unsigned *flags);
/* Decode region crop of the image and resize it to ow x oh RGB u8 into dst
 * (row pitch `pitch` bytes). ROI path: the smallest DCT scale M/8 (M = 1, 2,
 * 4, 8: the fast ones, see decode.c) at which the scaled crop still covers
 * ow x oh, jpeg_crop_scanline for the
 * columns, jpeg_skip_scanlines above the crop, stop after its last row
 * (jpeg_abort_decompress). Grayscale is expanded to RGB. Environment
 * SLUICE_DECODE=full forces the plain path (full-size decode, then crop and
 * resize) for tests and comparisons. Corrupt data: SL_EIMAGE with libjpeg's
 * message; warnings (corrupt entropy data) are errors too. */
int sl_decode_crop(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop, int ow,
                   int oh, uint8_t *dst, int pitch);
/* One sample: the crop resized to ow x oh, mirrored when flip, normalized
 * and laid out at dst. By default on the planar path (decode_yuv.c below:
 * Y/Cb/Cr planes, RGB at the output size; RGB-transform JPEGs take the RGB
 * path). With SLUICE_DECODE=rgb (or full) sl_decode_crop's decode finished
 * by sl_resample_sample instead of the u8 resize: what sl_store_sample
 * would write from sl_decode_crop's output (f32 values come from the
 * unrounded resize, see resample.c); the reference of the planar path. */
int sl_decode_crop_sample(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop,
                          int ow, int oh, int flip, sl_layout layout, const float mean[3],
                          const float std[3], void *dst);

/* One plane of a decoded crop strip for sl_resample_planes: pixels
 * [0, w) x [0, h) of u8 rows pitch bytes apart, and the crop's window in
 * that plane's pixel coordinates (edges, need not be whole pixels):
 * [x0, x0 + cw) x [y0, y0 + ch), inside [0, w] x [0, h]. */
typedef struct sl_plane_view {
    const uint8_t *p;
    int w, h, pitch;
    double x0, y0, cw, ch;
} sl_plane_view;
/* The planar path (decode_yuv.c): the crop's rows decoded to Y/Cb/Cr
 * planes with libjpeg's raw-data output, each plane resized at its own
 * resolution, RGB made only at the output size (sl_resample_planes).
 * Called by decode.c's sl_decode_crop_sample under its libjpeg error guard
 * with the header already read into ci (a libjpeg error longjmps out of
 * here); buf is the decoder's scratch (grows, freed by the caller).
 * SL_ENOTSUP when the file is not YCbCr or gray (the caller then takes the
 * RGB path); other codes as sl_decode_crop_sample. */
struct jpeg_decompress_struct;
/* huff.c: the planar path's entropy decoder in place of libjpeg's
 * (baseline single-scan files without restarts; see its comment).
 * sl_huff_install, after jpeg_start_decompress and before the first
 * jpeg_read_raw_data: SL_OK installed; SL_ENOTSUP (no message) not such a
 * file, libjpeg's decoder stays; SL_ENOMEM. *h is the decoder's state,
 * allocated on first use. */
typedef struct sl_huff sl_huff;
int sl_huff_install(struct jpeg_decompress_struct *ci, sl_huff **h);
void sl_huff_free(sl_huff *h);
/* Files with restart markers (huff.c, "restart intervals"): decode only
 * the intervals that hold MCU rows [row0, row1) x MCU columns [col0,
 * col1] (iMCU rows and columns, as decode_yuv.c's strip; the columns the
 * coefficient controller IDCTs), with huff.c's decoder or, libjpeg = 1,
 * around libjpeg's. base/len: the stream (the memory source's bytes);
 * rst: sl_jpeg_scan_restarts' intervals of it. After
 * jpeg_start_decompress; SL_OK: installed, and the caller must start
 * reading at iMCU row *first_row (libjpeg's row counters moved past the
 * rows before it, see decode_yuv.c); SL_ENOTSUP: not such a file (no
 * restart interval, not baseline single-scan, offsets that do not match),
 * nothing changed; SL_ENOMEM. */
typedef struct sl_huff_plan {
    const uint8_t *base;
    size_t len;
    const struct sl_jpeg_restarts *rst;
    unsigned row0, row1, col0, col1;
} sl_huff_plan;
int sl_huff_seek(struct jpeg_decompress_struct *ci, sl_huff **h, const sl_huff_plan *plan,
                 int libjpeg, unsigned *first_row);
typedef struct sl_yuv_buf {
    uint8_t *p;
    size_t cap;
    sl_huff *huff;            /* huff.c's state (NULL until first used) */
    int libjpeg_huff;         /* SLUICE_HUFF=libjpeg: keep libjpeg's entropy decoder */
    int no_seek;              /* SLUICE_SEEK=off: restart files decoded from the start, by libjpeg */
    const uint8_t *jpeg;      /* the stream being decoded and its restart intervals */
    size_t len;               /* (decode.c sets them before each call) */
    const struct sl_jpeg_restarts *rst;
} sl_yuv_buf;
int sl_decode_yuv(struct jpeg_decompress_struct *ci, sl_yuv_buf *buf, const sl_crop *crop, int ow,
                  int oh, int flip, sl_layout layout, const float mean[3], const float std[3],
                  void *dst, const char *fn);
/* Its first half: the planes of the crop's strip and the crop's window in
 * each, *np of them (3 or 1), views into buf (valid until buf is used
 * again), ready for sl_resample_planes. */
int sl_decode_yuv_planes(struct jpeg_decompress_struct *ci, sl_yuv_buf *buf, const sl_crop *crop,
                         int ow, int oh, sl_plane_view pv[3], int *np, const char *fn);
/* sl_decode_yuv_planes under sl_decoder's guard (decode.c), for benchmarks
 * and tests that time or check the two halves apart: the JPEG's structure
 * checked, its header read, the planes decoded into the decoder's scratch
 * (valid until the decoder's next call). SL_ENOTSUP: not YCbCr or gray. */
int sl_decode_crop_planes(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop,
                          int ow, int oh, sl_plane_view pv[3], int *np);

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

/* ------------------------------------------------------------------ sample */
/* Write one sample from RGB u8 (h x w, packed rows) into dst in layout,
 * mirrored left-right when flip: u8 NHWC copies; f32 layouts store
 * (v - mean[c]) / std[c]. */
void sl_store_sample(const uint8_t *rgb, int h, int w, int flip, sl_layout layout,
                     const float mean[3], const float std[3], void *dst);
/* Resize src (sh x sw RGB u8, row pitch sp bytes) to dw x dh with
 * records/resize.c's filter and store it as sl_store_sample would, in one
 * pass (pipeline/resample.c): u8 bit-identical to sl_resize_rgb_u8 then
 * sl_store_sample; f32 normalizes the unrounded resized value, so it
 * differs from that path by at most 0.5/std[c]. mean/std may be NULL for
 * u8. Invalid arguments leave dst untouched. */
void sl_resample_sample(const uint8_t *src, int sw, int sh, int sp, int dw, int dh, int flip,
                        sl_layout layout, const float mean[3], const float std[3], void *dst);
/* Resize np planes (3: Y, Cb, Cr of JFIF YCbCr; 1: gray) each over its
 * own window to dw x dh, convert to RGB at that size (clamped to 0..255),
 * mirror when flip, and store as sl_store_sample would (u8 rounded; f32
 * (v - mean[c]) / std[c] from the unrounded value). resample_planes.c's
 * DESIGN comment gives the filter. SL_EINVAL for bad arguments,
 * SL_ENOMEM when a large output's scratch cannot be had; dst is then
 * untouched. */
int sl_resample_planes(const sl_plane_view *pl, int np, int dw, int dh, int flip, sl_layout layout,
                       const float mean[3], const float std[3], void *dst);
/* Bytes of one sample in a layout. */
size_t sl_sample_bytes(int h, int w, sl_layout layout);

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

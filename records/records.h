/*
 * records/records.h - shard formats that other tools already read.
 *
 *   TFRecord framing (byte-compatible with TensorFlow), tf.train.Example
 *   encode / zero-copy decode, DALI-style index files, an LMDB store with the
 *   same payloads, WebDataset tar shards read in place (wds.h: their sample
 *   index and decoder; tar.h: the tar member parser under it), the
 *   dataset.json manifest, dataset paths (a folder, a glob, a
 *   brace pattern "train-{00000..00015}-of-00016.tfrecord", one shard, an
 *   LMDB store; local or http(s):// / s3:// URLs), image probing /
 *   transcoding for the converter, and the converter itself.
 *
 * Bytes: every read here, local or remote, goes through the byte source
 * (bytesrc.h: one handle with read, size, whole get, list and a map), so a
 * path may be a URL wherever a shard, an index or dataset.json is read, and
 * the byte source, not the caller, decides how (a dataset asks once, at
 * resolve: sl_dataset.remote; a reader asks its handle); the
 * remote I/O settings are those of the call's config (sl_convert_config.io,
 * sl_verify_options.io, the pipeline's) or else the process-wide ones.
 *
 * Threading: every handle (writer, reader, LMDB reader, convert job) is used
 * by one thread at a time; different handles may be used concurrently. An
 * sl_lmdb_env is shared by many threads, each with its own sl_lmdb_reader.
 * Pure functions (crc, example encode/decode, image probe) are reentrant.
 *
 * Errors: functions return sl_status (common/status.h); the thread's
 * sl_errmsg() says "function: file: record N @ offset: what". Corruption is
 * always SL_ECORRUPT and never a crash or wrong data accepted.
 *
 * Views: pointers handed out by readers and decoders point into the reader's
 * buffer or the caller's record; each comment says until when they stay valid.
 */
#ifndef SL_RECORDS_H
#define SL_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "resize_tap.h"

struct sl_io_opts; /* bytesrc.h */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ CRC-32C */

/* CRC-32C (Castagnoli), extending crc over buf[0..n). Start with crc = 0.
 * Uses the SSE4.2 crc32 instruction when the CPU has it (checked once), the
 * portable slicing-by-8 table otherwise. crc32c("123456789") == 0xE3069283.
 * SLUICE_CRC32C=sw in the environment forces the portable path. */
uint32_t sl_crc32c(uint32_t crc, const void *buf, size_t n);
/* The two implementations, for tests and benchmarks. _hw must only be called
 * when sl_crc32c_hw_available() is true. */
uint32_t sl_crc32c_sw(uint32_t crc, const void *buf, size_t n);
uint32_t sl_crc32c_hw(uint32_t crc, const void *buf, size_t n);
int sl_crc32c_hw_available(void);

/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t sl_crc_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t sl_crc_unmask(uint32_t masked)
{
    uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

/* -------------------------------------------------------- TFRecord framing */
/*
 * Per record, little-endian:
 *   u64 length | u32 masked_crc32c(length bytes) | data[length] | u32 masked_crc32c(data)
 */
#define SL_TFRECORD_OVERHEAD 16u
/* Largest record length a reader accepts before calling the file corrupt
 * (a flipped high bit in the length would otherwise ask for exabytes). */
#define SL_TFRECORD_MAX_LEN ((uint64_t)1 << 31)

/* Write the 12-byte header for a record of len bytes into hdr; the 4-byte
 * footer for data into ftr. Used by writers that frame in memory. */
void sl_tfrecord_frame_header(uint8_t hdr[12], uint64_t len);
void sl_tfrecord_frame_footer(uint8_t ftr[4], const void *data, size_t len);

/* Check one framed record held in memory: rec[0..size) must be exactly one
 * record (its u64 length == size - 16, both CRCs right). For readers that
 * fetch many records with one read through the index (pipeline/reader.c).
 * Returns SL_FRAME_OK or what is wrong; sl_tfrecord_frame_what names it. */
typedef enum sl_frame_status {
    SL_FRAME_OK = 0,
    SL_FRAME_SIZE,       /* size < 16 (or, for callers, past their buffer) */
    SL_FRAME_LENGTH,     /* length field != size - 16 */
    SL_FRAME_LENGTH_CRC, /* masked CRC of the length field */
    SL_FRAME_DATA_CRC,   /* masked CRC of the payload */
    SL_FRAME_UNREAD,     /* (readers) its bytes could not be fetched (remote, after retries) */
} sl_frame_status;
sl_frame_status sl_tfrecord_frame_check(const uint8_t *rec, uint64_t size);
const char *sl_tfrecord_frame_what(sl_frame_status code);

typedef struct sl_tfrecord_writer sl_tfrecord_writer;

#define SL_TFW_INDEX 1u    /* also write "<path>.idx" (DALI text format) */
#define SL_TFW_NOSYNC 2u   /* skip fsync on close (tests, scratch files) */

/* Create a writer for path. Data goes to "<path>.tmp" (and "<path>.idx.tmp");
 * nothing appears under the final names until sl_tfrecord_writer_close()
 * succeeds. Fails with SL_EIO if the temp file cannot be created. */
int sl_tfrecord_writer_open(const char *path, unsigned flags, sl_tfrecord_writer **out);
/* Append one record (len may be 0). The bytes are copied; buffered. */
int sl_tfrecord_writer_write(sl_tfrecord_writer *w, const void *data, size_t len);
/* Records written so far, and bytes written so far (framing included). */
uint64_t sl_tfrecord_writer_count(const sl_tfrecord_writer *w);
uint64_t sl_tfrecord_writer_bytes(const sl_tfrecord_writer *w);
/* Commit: flush, fsync (unless NOSYNC), rename temp files to their final
 * names (index first, then shard, so a shard never exists without its index),
 * fsync the directory, free w. On error the temp files are removed and w is
 * freed all the same. */
int sl_tfrecord_writer_close(sl_tfrecord_writer *w);
/* Drop everything written: remove temp files, free w. NULL is a no-op. */
void sl_tfrecord_writer_abort(sl_tfrecord_writer *w);

typedef struct sl_tfrecord_reader sl_tfrecord_reader;

/* Open path for buffered sequential reading. */
int sl_tfrecord_reader_open(const char *path, sl_tfrecord_reader **out);
/* Next record: *data points at len bytes inside the reader, valid until the
 * next call on r or its close. Both CRCs are checked. SL_EOF at a clean end
 * of file; SL_ECORRUPT for a bad CRC, an absurd length or a truncated record,
 * with "file: record N @ offset" in the message. */
int sl_tfrecord_reader_next(sl_tfrecord_reader *r, const uint8_t **data, size_t *len);
/* Number of the record most recently returned by next (0-based), and its byte
 * offset in the file (of its header). Before the first next: 0 and 0. */
uint64_t sl_tfrecord_reader_record(const sl_tfrecord_reader *r);
uint64_t sl_tfrecord_reader_offset(const sl_tfrecord_reader *r);
const char *sl_tfrecord_reader_path(const sl_tfrecord_reader *r);
/* NULL is a no-op. */
void sl_tfrecord_reader_close(sl_tfrecord_reader *r);

/* Read one record by position through an index entry with pread (thread-safe
 * on a shared fd): offset and size are the record's framing offset and total
 * framed size (16 + length). The payload (size - 16 bytes) goes into buf,
 * which must hold cap bytes; *len gets its length. Both CRCs and the framed
 * size are checked. path and recno only name the record in error messages. */
int sl_tfrecord_read_at(int fd, uint64_t offset, uint64_t size, uint8_t *buf, size_t cap,
                        size_t *len, const char *path, uint64_t recno);

/* ----------------------------------------------------------- index files */
/* "<shard>.idx": one "offset size" line per record, offset of the record's
 * framing and its total framed size, as DALI's tfrecord2idx writes it. */
typedef struct sl_index_entry {
    uint64_t offset;
    uint64_t size;
} sl_index_entry;

/* Parse an index file. *entries is malloc'd (caller frees), *n records.
 * Malformed lines, entries that overlap or do not follow one another are
 * SL_ECORRUPT naming the line. */
int sl_index_load(const char *idx_path, sl_index_entry **entries, size_t *n);
/* Build the index of a shard by scanning it (CRCs checked). */
int sl_index_build(const char *shard_path, sl_index_entry **entries, size_t *n);
/* sl_index_build that, when the scan stops at a bad record (SL_ECORRUPT: a
 * truncated tail, a CRC mismatch; the message names file, record and
 * offset), returns that error AND the entries of the whole records before
 * it in *entries / *n (malloc'd, possibly none), for a reader that skips
 * what it cannot read. Other errors (SL_ENOENT, SL_EIO, SL_ENOMEM) return
 * no entries. */
int sl_index_build_prefix(const char *shard_path, sl_index_entry **entries, size_t *n);
/* Write entries to idx_path atomically (temp, fsync, rename). */
int sl_index_write(const char *idx_path, const sl_index_entry *entries, size_t n);

/* ------------------------------------------------------ tf.train.Example */
/*
 * message Example  { Features features = 1; }
 * message Features { map<string, Feature> feature = 1; }
 * message Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
 *                                 Int64List int64_list = 3; } }
 * BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
 * Int64List { repeated int64 value = 1 [packed]; }
 *
 * We walk the wire format by hand instead of linking protobuf-c: the decoder
 * is on the per-sample hot path and must hand out views into the record
 * without allocating; protobuf-c unpacks into heap copies.
 */
typedef enum sl_feature_kind {
    SL_FEATURE_NONE = 0,
    SL_FEATURE_BYTES = 1,
    SL_FEATURE_FLOAT = 2,
    SL_FEATURE_INT64 = 3,
} sl_feature_kind;

/* A view of one feature inside a serialized Example. list/list_len is the
 * body of the BytesList/FloatList/Int64List message. Valid as long as the
 * record bytes it was decoded from. */
typedef struct sl_feature_view {
    const char *name;
    size_t name_len;
    sl_feature_kind kind;
    const uint8_t *list;
    size_t list_len;
} sl_feature_view;

/* Call fn once per feature in the Example, in wire order; stop early when fn
 * returns non-zero (that value is returned). Malformed protobuf: SL_ECORRUPT
 * with the byte offset inside the record in the message. Unknown fields at
 * any level are skipped. */
int sl_example_foreach(const uint8_t *rec, size_t len,
                       int (*fn)(const sl_feature_view *f, void *arg), void *arg);
/* Find a feature by name. SL_ENOENT when absent (message set). If a name
 * occurs twice the last one wins (protobuf map semantics). */
int sl_example_find(const uint8_t *rec, size_t len, const char *name, sl_feature_view *out);

/* Number of values in a feature's list (walks the list; SL_ECORRUPT if bad). */
int sl_feature_count(const sl_feature_view *f, size_t *n);
/* Values. Both packed and unpacked encodings are accepted for int64/float.
 * Index out of range: SL_ENOENT. Kind mismatch: SL_EINVAL. */
int sl_feature_int64(const sl_feature_view *f, size_t i, int64_t *out);
int sl_feature_float(const sl_feature_view *f, size_t i, float *out);
int sl_feature_bytes(const sl_feature_view *f, size_t i, const uint8_t **data, size_t *len);

/* Encoder: a growable buffer the caller owns (init/fini). Features are added
 * in order; sl_example_finish() gives the serialized Example. Allocation
 * failures are remembered and reported by finish. Lists are packed. */
typedef struct sl_example_builder {
    uint8_t *buf; /* map entries, then the finished message */
    size_t len;
    size_t cap;
    int err;
} sl_example_builder;

void sl_example_builder_init(sl_example_builder *b);
void sl_example_builder_fini(sl_example_builder *b);
/* Forget added features, keep the allocation. */
void sl_example_builder_reset(sl_example_builder *b);
int sl_example_add_bytes(sl_example_builder *b, const char *name, const void *data, size_t len);
int sl_example_add_bytes_list(sl_example_builder *b, const char *name,
                              const void *const *data, const size_t *lens, size_t n);
int sl_example_add_int64(sl_example_builder *b, const char *name, const int64_t *v, size_t n);
int sl_example_add_float(sl_example_builder *b, const char *name, const float *v, size_t n);
/* Serialized Example; *data valid until the next add/reset/fini on b. */
int sl_example_finish(sl_example_builder *b, const uint8_t **data, size_t *len);

/* The image record sluice writes and reads, with the feature names of
 * TensorFlow's ImageNet converter. Strings are views (not NUL-terminated)
 * into the record; NULL/0 when absent. */
typedef struct sl_image_example {
    const uint8_t *image; size_t image_len;     /* image/encoded (required) */
    int64_t label;                              /* image/class/label (required) */
    int64_t height, width;                      /* image/height, image/width (0 if absent) */
    const char *format; size_t format_len;      /* image/format ("JPEG") */
    const char *filename; size_t filename_len;  /* image/filename */
    const char *text; size_t text_len;          /* image/class/text (optional) */
} sl_image_example;

/* Decode in one pass; unknown features skipped. Missing image/encoded or
 * image/class/label: SL_ECORRUPT ("missing feature image/encoded"). */
int sl_image_example_decode(const uint8_t *rec, size_t len, sl_image_example *out);
/* Encode ex into b (b is reset first); fields with NULL are left out,
 * height/width written when > 0. */
int sl_image_example_encode(const sl_image_example *ex, sl_example_builder *b);

/* --------------------------------------------------------------- LMDB store */
/* Keys are zero-padded decimal record numbers ("0000000042", 10 digits) so
 * they sort in record order; values are serialized Examples. */
#define SL_LMDB_KEY_DIGITS 10

typedef struct sl_lmdb_writer sl_lmdb_writer;
/* Create an LMDB environment at dir_path: it is built in "<dir_path>.tmp"
 * and renamed into place by close (so a killed convert leaves no half store).
 * dir_path must not exist (SL_EEXIST). */
int sl_lmdb_writer_open(const char *dir_path, sl_lmdb_writer **out);
/* Append the next record (key = records so far). Commits every few thousand
 * records or MiB. */
int sl_lmdb_writer_put(sl_lmdb_writer *w, const void *data, size_t len);
uint64_t sl_lmdb_writer_count(const sl_lmdb_writer *w);
/* Commit, sync, close, rename into place, free w. */
int sl_lmdb_writer_close(sl_lmdb_writer *w);
/* Remove the temp environment, free w. NULL is a no-op. */
void sl_lmdb_writer_abort(sl_lmdb_writer *w);

/* Read side: one shared environment (MDB_RDONLY | MDB_NOTLS), one reader per
 * thread. */
typedef struct sl_lmdb_env sl_lmdb_env;
typedef struct sl_lmdb_reader sl_lmdb_reader;
int sl_lmdb_env_open(const char *dir_path, sl_lmdb_env **out);
uint64_t sl_lmdb_env_count(const sl_lmdb_env *env);
const char *sl_lmdb_env_path(const sl_lmdb_env *env);
/* NULL is a no-op; all readers must be closed first. */
void sl_lmdb_env_close(sl_lmdb_env *env);

/* A read transaction + cursor. Views returned are valid until the next call
 * on r or its close (they point into the memory map). */
int sl_lmdb_reader_open(sl_lmdb_env *env, sl_lmdb_reader **out);
/* Sequential: records in key order; SL_EOF at the end. A key that is not the
 * expected record number is SL_ECORRUPT. */
int sl_lmdb_reader_next(sl_lmdb_reader *r, const uint8_t **data, size_t *len);
/* Random access by record number; SL_ENOENT if absent. */
int sl_lmdb_reader_get(sl_lmdb_reader *r, uint64_t recno, const uint8_t **data, size_t *len);
/* Record number of the last record returned. */
uint64_t sl_lmdb_reader_record(const sl_lmdb_reader *r);
void sl_lmdb_reader_close(sl_lmdb_reader *r);

/* ------------------------------------------------------- names, manifest */
typedef enum sl_format {
    SL_FORMAT_TFRECORD = 0,
    SL_FORMAT_LMDB = 1,
    SL_FORMAT_WDS = 2,      /* WebDataset tar shards "NAME-00003-of-00016.tar" (records/wds.h) */
} sl_format;

/* "DIR/NAME-00003-of-00016.tfrecord" (5 digits, TensorFlow's pattern); the
 * LMDB store of a split is "DIR/NAME.lmdb". SL_EINVAL if cap is too small. */
int sl_shard_path(char *buf, size_t cap, const char *dir, const char *name,
                  unsigned shard, unsigned nshards);
int sl_lmdb_path(char *buf, size_t cap, const char *dir, const char *name);

#define SL_MANIFEST_FILE "dataset.json"
#define SL_MANIFEST_MAX_SPLITS 16

typedef struct sl_manifest_split {
    char name[64];       /* "train", "test", ... */
    sl_format format;
    uint64_t records;
    uint32_t shards;     /* 1 for LMDB */
    uint64_t bytes;      /* payload bytes (sum of record lengths) */
    uint64_t skipped;    /* inputs skipped as undecodable */
    char source[512];    /* how it was made: "folder /data/img", "idx ..." */
} sl_manifest_split;

typedef struct sl_manifest {
    int version;         /* 1 */
    int64_t label_offset;/* added to labels on write; readers subtract it */
    uint32_t num_classes;
    char **class_names;  /* num_classes strings, or NULL when unnamed */
    size_t nsplits;
    sl_manifest_split splits[SL_MANIFEST_MAX_SPLITS];
    char created_by[128];/* "sluice 0.1" */
} sl_manifest;

/* Zero m (version 1, no splits). */
void sl_manifest_init(sl_manifest *m);
/* Free class names. */
void sl_manifest_fini(sl_manifest *m);
/* Load DIR/dataset.json into m (init'ed by the call). SL_ENOENT if absent,
 * SL_ECORRUPT if not valid JSON or fields missing/mistyped. */
int sl_manifest_load(const char *dir, sl_manifest *m);
/* Write DIR/dataset.json atomically, every count and the label offset as
 * exact integer text (sl_manifest_load reads back what was written).
 * SL_EINVAL for a count or label offset beyond +-2^53 (JSON readers keep
 * numbers as doubles); SL_EIO / SL_ENOMEM as the write fails. */
int sl_manifest_save(const char *dir, const sl_manifest *m);
/* Find a split by name; NULL if absent. */
sl_manifest_split *sl_manifest_split_find(sl_manifest *m, const char *name);
/* Find or add; SL_ENOMEM-like SL_EINVAL when full. */
int sl_manifest_split_put(sl_manifest *m, const sl_manifest_split *s);
/* Set class names (copies). */
int sl_manifest_set_classes(sl_manifest *m, const char *const *names, uint32_t n);

/* ------------------------------------------------------------------ images */
typedef enum sl_image_type {
    SL_IMAGE_UNKNOWN = 0,
    SL_IMAGE_JPEG,
    SL_IMAGE_PNG,
    SL_IMAGE_BMP,
    SL_IMAGE_PPM,
    SL_IMAGE_WEBP,       /* RIFF "WEBP": lossy (VP8), lossless (VP8L), extended (VP8X) */
} sl_image_type;

typedef struct sl_image_info {
    sl_image_type type;
    int width, height;
    int channels;        /* 1 gray, 3 color, 4 CMYK/RGBA (a WebP with alpha: 4) */
    int jpeg_passthrough;/* JPEG that can be stored as is (baseline/progressive YCbCr or RGB, 3 ch) */
} sl_image_info;

/* Sniff the type from magic bytes and read the header (no pixel decode).
 * SL_EIMAGE with a reason when unreadable, and for what the converter
 * cannot take: an animated WebP, or any WebP in a build without libwebp
 * (SLUICE_WITH_WEBP=0), each refused by name. */
int sl_image_probe(const uint8_t *data, size_t len, sl_image_info *out);

/* Check a JPEG's marker structure without decoding it: SOI, segments whose
 * lengths fit, a frame header, at least one scan, and an EOI after the
 * entropy-coded data; every table a scan uses defined before it in the
 * stream (a stream decodes alone, never with tables an earlier image left:
 * no DQT, or a DHT missing where no standard table stands in, is refused);
 * no fill bytes before a stuffed zero (FF FF 00, on which decoders
 * disagree). Catches truncated, mangled and abbreviated files at memory
 * speed; other damage inside the entropy-coded data is not detected.
 * SL_EIMAGE with the byte offset when the structure is broken. *flags (if
 * not NULL) gets SL_JPEG_* bits on success, 0 otherwise. Reentrant. */
#define SL_JPEG_STD_HUFF 1u /* a sequential scan uses a Huffman table no DHT defines:
                             * T.81 Annex K.3's standard table (Motion-JPEG's way) */
#define SL_JPEG_RESTART 2u  /* the entropy-coded data has restart markers (RST0..7) */
int sl_jpeg_scan(const uint8_t *data, size_t len, unsigned *flags);

/* Restart markers are checked by sl_jpeg_scan too: within each scan they
 * must be numbered RST0, RST1, ..., RST7, RST0, ... and cut the scan into
 * exactly ceil(MCUs / restart interval) intervals (one more marker right
 * before the scan's end is tolerated); otherwise SL_EIMAGE naming the
 * marker's byte. sl_jpeg_scan_restarts is sl_jpeg_scan that also gives,
 * in *r, where the intervals of the first scan start: r->off[k] is the
 * byte offset of interval k's first entropy-coded byte (off[0] right
 * after the SOS segment, off[k] right after the k-th marker), n of them,
 * the first scan's restart interval (DRI, MCUs; 0 none) and the number of
 * scans. Streams over 4 GiB are checked but get n = 0. r->off grows with
 * realloc (caller-owned: start from a zeroed struct, reuse it, release
 * with sl_jpeg_restarts_free); SL_ENOMEM when it cannot grow. */
typedef struct sl_jpeg_restarts {
    uint32_t *off;
    size_t n, cap;
    unsigned interval;
    int scans;
} sl_jpeg_restarts;
int sl_jpeg_scan_restarts(const uint8_t *data, size_t len, unsigned *flags, sl_jpeg_restarts *r);
void sl_jpeg_restarts_free(sl_jpeg_restarts *r);

/* Lossless restart markers (records/restart.c): a JPEG's DCT coefficients
 * read and written again (libjpeg's jpeg_read_coefficients /
 * jpeg_write_coefficients, as `jpegtran -restart N -optimize -copy all`)
 * as one baseline Huffman scan with a restart marker every `mcus` MCUs,
 * or every `rows` MCU rows (exactly one of the two is non-zero;
 * mcus = SL_RESTART_AUTO: max(4, ceil(MCUs per row / 16)), the measured
 * default).
 * Decoded pixels are the original's; APPn and COM segments are copied;
 * Huffman tables are the source's where they can code the result (a
 * one-scan sequential file whose DC tables are complete, as the standard
 * tables are), else optimized for the image; progressive, arithmetic and
 * multi-scan files become baseline. *out points at the new file (in r,
 * valid until r's next call) with info->rewritten = 1, or at the input,
 * kept as it is, with info->why saying why: a restart interval already,
 * 12-bit data, a progressive file that libjpeg would decode with block
 * smoothing, data libjpeg warns about, or anything it cannot transcode.
 * SL_ENOMEM is the only error besides SL_EINVAL for bad arguments.
 * Threading: one restarter per thread. */
#define SL_RESTART_AUTO 0xFFFFFFFFu
typedef struct sl_jpeg_restarter sl_jpeg_restarter;
typedef struct sl_restart_info {
    int rewritten;            /* 1: *out is the rewritten file */
    const char *why;          /* rewritten 0: why not (in the restarter, valid as *out) */
    unsigned interval;        /* MCUs per interval written */
    uint64_t markers;         /* RST markers written */
    size_t bytes_in, bytes_out;
} sl_restart_info;
int sl_jpeg_restarter_create(sl_jpeg_restarter **out);
void sl_jpeg_restarter_destroy(sl_jpeg_restarter *r);
int sl_jpeg_restart(sl_jpeg_restarter *r, const uint8_t *jpeg, size_t len, unsigned mcus,
                    unsigned rows, const uint8_t **out, size_t *out_len, sl_restart_info *info);

/* A reusable transcoder (owns TurboJPEG handles and scratch buffers; one per
 * thread). */
typedef struct sl_transcoder sl_transcoder;
int sl_transcoder_create(sl_transcoder **out);
void sl_transcoder_destroy(sl_transcoder *t);
/* Refuse (SL_EIMAGE, before allocating) images of more than n decoded
 * pixels; 0 = SL_MAX_PIXELS_DEFAULT (the default of a new transcoder). */
void sl_transcoder_set_max_pixels(sl_transcoder *t, uint64_t n);
/* Decode data (JPEG any colorspace, PNG, BMP, PPM, still WebP with libwebp;
 * transparent pixels of PNG and WebP composited over white), convert to RGB, shrink so
 * the shorter side is at most resize_short (0 = keep size; never enlarges),
 * encode JPEG at quality (4:2:0). *jpeg points into t, valid until the next
 * call on t. *w, *h get the output size. SL_EIMAGE if undecodable. */
int sl_transcode_jpeg(sl_transcoder *t, const uint8_t *data, size_t len, int quality,
                      int resize_short, const uint8_t **jpeg, size_t *jpeg_len, int *w, int *h);
/* Encode packed pixels (1 = gray or 3 = RGB channels, pitch = bytes per
 * row) as an RGB JPEG (gray is expanded to 3 channels, as the pipeline and
 * TensorFlow's converter expect). Output as for sl_transcode_jpeg. */
int sl_encode_jpeg_rgb(sl_transcoder *t, const uint8_t *pixels, int w, int h, int pitch,
                       int channels, int quality, const uint8_t **jpeg, size_t *jpeg_len);

/* The filter's taps for one direction: output coordinate x of d takes
 * source pixels i0 .. i0+n-1 of s with weights w0, wmid, ..., wmid, wn
 * (n == 1: w0 only). Area averaging when s >= 2d (exact integer interval
 * edges), bilinear with half-pixel centres otherwise. Shared by
 * sl_resize_rgb_u8 and the pipeline's fused resample, whose u8 output must
 * match it bit for bit. t has d entries; t[x] is sl_resize_tap_at(s, d, x)
 * (resize_tap.h: sl_resize_tap and the formula, which the GPU kernel
 * evaluates per output pixel). */
void sl_resize_taps(sl_resize_tap *t, int s, int d);

/* Resize RGB u8 (3 channels) src (sw x sh, pitch sp) to dst (dw x dh, pitch dp):
 * area averaging when shrinking by 2 or more in a direction, bilinear
 * (half-pixel centers, as OpenCV INTER_LINEAR) otherwise. */
void sl_resize_rgb_u8(const uint8_t *src, int sw, int sh, int sp, uint8_t *dst, int dw, int dh,
                      int dp);

/* ---------------------------------------------------------------- converter */
typedef enum sl_source_kind {
    SL_SOURCE_FOLDER = 0, /* DIR/<class>/<image>, classes sorted by name -> 0..K-1 */
    SL_SOURCE_LIST,       /* FILE with lines "path<TAB>label" (relative paths to FILE's dir;
                           * http://, https:// and s3:// URLs read through bytesrc.h) */
    SL_SOURCE_IDX,        /* MNIST IDX images + labels, gzip or plain */
    SL_SOURCE_TFRECORD,   /* the Examples of one split of a dataset of TFRecord shards (input:
                           * any local PATH sl_dataset_resolve takes, TensorFlow Datasets
                           * folders included; input_split) */
} sl_source_kind;

/* The default bound on an image's pixels (width x height from its header)
 * in convert (sl_convert_config.max_pixels) and in the pipeline
 * (sl_pipeline_config.max_pixels): 2^26 = 67,108,864, e.g. 8192 x 8192.
 * A larger image is refused from its header, before any buffer of its size
 * is allocated: a 600-byte JPEG can claim 65500 x 65500 (4.3 Gpx, 12.8 GB
 * of RGB). Peak memory per convert thread is then about 12 bytes x
 * max_pixels (decoded pixels at 4 B/px for CMYK, the resized copy, the JPEG
 * encoder's worst-case buffer; a progressive JPEG's coefficients) plus the
 * input file; README.md and perf/RESULTS.md give the measured figures. */
#define SL_MAX_PIXELS_DEFAULT ((uint64_t)1 << 26)

typedef struct sl_convert_config {
    size_t size;              /* sizeof(sl_convert_config), set by SL_CONVERT_CONFIG_INIT:
                               * sl_convert_run refuses another (a caller built against other
                               * headers) */
    sl_source_kind source;
    const char *input;        /* folder DIR or list FILE */
    const char *idx_images;   /* IDX images (SL_SOURCE_IDX) */
    const char *idx_labels;   /* IDX labels (SL_SOURCE_IDX) */
    const char *input_split;  /* SL_SOURCE_TFRECORD: the split of input to read; NULL: the
                               * one named like name, else input's only split */
    const char *out_dir;
    const char *name;         /* split name: "train" */
    unsigned shards;          /* 0 = from size (about 128 MiB each) */
    sl_format format;
    unsigned threads;         /* 0 = all cores */
    int quality;              /* for re-encoded images; 95 */
    int resize_short;         /* 0 = keep */
    uint64_t max_pixels;      /* an image whose header claims more pixels is skipped (listed
                               * as undecodable); 0 = SL_MAX_PIXELS_DEFAULT */
    uint64_t shuffle_seed;
    int shuffle;              /* 1 = shuffle records across shards (default) */
    int resume;               /* keep finished shards of an earlier run */
    int strict;               /* any skipped input is an error */
    int label_offset;         /* added to labels written (TF ImageNet uses 1) */
    int fsync;                /* 1 (default); 0 for tests */
    /* Progress, called from one thread at a time, at most ~10 times a second
     * and once at the end: done/total inputs, bytes written so far. */
    void (*progress)(void *arg, uint64_t done, uint64_t total, uint64_t bytes);
    void *progress_arg;
    /* Each skipped input: path (or "images.gz[1234]") and reason. */
    void (*skipped)(void *arg, const char *input, const char *reason);
    void *skipped_arg;
    /* Optional names of labels 0..num_class_names-1 (before label_offset),
     * e.g. Fashion-MNIST's for the IDX source; they replace the source's own
     * (folder names) in image/class/text and dataset.json. A label outside
     * them is SL_EINVAL. Copied where kept; NULL = none. */
    const char *const *class_names;
    uint32_t num_class_names;
    /* Optional stop request: the calling thread reads *cancel before it
     * writes each chunk of records (64 inputs); once it is non-zero the run
     * stops there, drops the shard it was writing (its temp files; the LMDB
     * store's open transaction) and returns SL_ECANCELED without updating
     * dataset.json. The shards closed before are whole, and a run with
     * resume = 1 and the same inputs and options keeps them and finishes.
     * Set it from the progress callback (same thread), a signal handler or
     * another thread (a plain store: it is only read). NULL = never. */
    const volatile int *cancel;
    /* Restart markers (records/restart.c, sl_jpeg_restart): every JPEG
     * stored (passed through or re-encoded) that has none is re-written
     * losslessly with a restart marker every restart_mcus MCUs
     * (SL_RESTART_AUTO: the measured default) or every restart_rows MCU
     * rows, so the pipeline entropy-decodes only the intervals a crop
     * covers. 0 and 0 (default): stored as they are. Not both. */
    unsigned restart_mcus, restart_rows;
    /* Remote I/O settings of the run's reads (listed URLs; bytesrc.h), on
     * every thread of the run; NULL = the process-wide ones (sl_io_configure).
     * Borrowed for the call. */
    const struct sl_io_opts *io;
} sl_convert_config;

#define SL_CONVERT_CONFIG_INIT                                                                  \
    {                                                                                           \
        .size = sizeof(sl_convert_config), .source = SL_SOURCE_FOLDER,                          \
        .format = SL_FORMAT_TFRECORD, .quality = 95,                                            \
        .shuffle_seed = 0, .shuffle = 1, .fsync = 1,                                            \
    }

typedef struct sl_convert_result {
    uint64_t inputs;          /* inputs found */
    uint64_t records;         /* records in the output (including kept shards) */
    uint64_t skipped;         /* undecodable inputs */
    uint64_t bytes;           /* payload bytes written */
    uint64_t passthrough;     /* JPEGs stored as is */
    uint64_t reencoded;       /* images re-encoded */
    unsigned shards;          /* shards in the output */
    unsigned shards_kept;     /* shards kept by --resume */
    /* restart markers, of the JPEGs this run wrote (not kept shards'): */
    uint64_t restarted;       /* JPEGs re-written with restart markers */
    uint64_t restart_kept;    /* JPEGs kept as they were (had markers, or could not be) */
    uint64_t restart_markers; /* RST markers written */
    uint64_t restart_bytes_in, restart_bytes_out; /* the re-written JPEGs' sizes before, after */
} sl_convert_result;

/* Run a conversion (blocks; uses cfg->threads threads). Writes the shards and
 * index files (or the LMDB store) and updates DIR/dataset.json. On error (or
 * SL_ECANCELED through cfg->cancel) no partial shard is left under a final
 * name. */
int sl_convert_run(const sl_convert_config *cfg, sl_convert_result *res);

/* ------------------------------------------------- planned conversion
 *
 * A conversion too big for one machine, in three steps that any engine can
 * run (Ray, Slurm arrays, Kubernetes indexed Jobs; README.md "Converting on
 * a cluster"):
 *
 *   sl_convert_plan     lists and orders the inputs (the seeded order of
 *                       sl_convert_run), assigns them to shards and the
 *                       shards to tasks, and writes the plan: a versioned
 *                       JSON file (local or s3://) with a digest of the
 *                       inputs and options; converts nothing.
 *   sl_convert_task     writes the shards of task K of N, from the plan
 *                       alone, each with its index and a receipt (records,
 *                       bytes, CRC-32C, the inputs skipped). Idempotent:
 *                       a shard with its receipt is kept; a re-run, or two
 *                       workers racing on one task, leave one whole shard
 *                       with the same bytes; other tasks' shards are never
 *                       touched.
 *   sl_convert_finish_plan
 *                       checks every shard (present, its CRCs, its counts
 *                       against the plan and its receipt), writes the
 *                       indexes that are missing or wrong and dataset.json,
 *                       names each missing or damaged shard with the task
 *                       that writes it, and sums the skipped inputs.
 *
 * Any split into tasks, with any retries, gives the bytes of sl_convert_run
 * with the same inputs and options (TFRecord and WebDataset shards, their
 * indexes, dataset.json). LMDB is one store written by one process: a plan
 * refuses it. Output may be local or s3://BUCKET/PREFIX (records/remote_put.h:
 * PUT, multipart above a part size), and listed inputs may be URLs.
 */
typedef struct sl_convert_task_config {
    size_t size;              /* sizeof(sl_convert_task_config), set by the INIT macro */
    const char *plan;         /* the plan: a path, or an s3:// / http(s):// URL */
    unsigned task, tasks;     /* task K (0-based) of N; N must be the plan's */
    unsigned threads;         /* 0 = all cores (finish: shards checked at once) */
    int strict;               /* any skipped input is an error */
    int fsync;                /* 1 (default); 0 for tests */
    /* As in sl_convert_config (done/total count this task's inputs). */
    void (*progress)(void *arg, uint64_t done, uint64_t total, uint64_t bytes);
    void *progress_arg;
    void (*skipped)(void *arg, const char *input, const char *reason);
    void *skipped_arg;
    const volatile int *cancel;
    /* finish: each shard that is missing or damaged (what says how), with
     * the task that writes it; each skipped input of a task's receipts. */
    void (*problem)(void *arg, unsigned shard, unsigned task, const char *file, const char *what);
    void (*task_skipped)(void *arg, unsigned task, const char *input, const char *reason);
    void *report_arg;
} sl_convert_task_config;

#define SL_CONVERT_TASK_CONFIG_INIT                                                             \
    {                                                                                           \
        .size = sizeof(sl_convert_task_config), .fsync = 1,                                     \
    }

typedef struct sl_convert_plan_result {
    uint64_t inputs;          /* inputs listed */
    unsigned shards, tasks;
    uint64_t plan_bytes;      /* size of the plan file */
} sl_convert_plan_result;

/* Plan cfg's conversion into plan (a path or an s3:// URL) for tasks tasks
 * (0 = one per shard; at most the shard count: a shard is one task's).
 * cfg is what sl_convert_run takes (its threads, resume, strict, fsync and
 * callbacks are not part of a plan); cfg->out_dir may be s3://BUCKET/PREFIX.
 * Also writes OUT/.NAME.plan (the options' text, as sl_convert_run's
 * resume reads it), which tasks and finish check. SL_EINVAL for LMDB, for
 * the IDX source (its pixels are not files a task could read), and, naming
 * the difference, when OUT was planned with other inputs or options;
 * SL_EEXIST when OUT already holds the split made otherwise. */
int sl_convert_plan(const sl_convert_config *cfg, const char *plan, unsigned tasks,
                    sl_convert_plan_result *res);

/* Write task tc->task of tc->tasks (blocks; tc->threads threads). res
 * counts this task's inputs and shards (kept: whole with their receipts
 * before the run). SL_EINVAL, naming the difference, for a plan of another
 * plan format or sluice version, for tc->tasks other than the plan's, and
 * when OUT/.NAME.plan says OUT was planned with other inputs or options. */
int sl_convert_task(const sl_convert_task_config *tc, sl_convert_result *res);

typedef struct sl_convert_finish_result {
    sl_convert_result total;  /* the split's inputs, records, skipped, bytes, shards */
    unsigned missing;         /* shards absent, or without their receipt */
    unsigned damaged;         /* shards whose bytes or counts are wrong */
    unsigned indexes_written; /* indexes that were missing or wrong */
} sl_convert_finish_result;

/* Check the plan's output and finish it (see above; tc->plan, threads,
 * problem, task_skipped, report_arg, fsync are read). SL_OK and dataset.json
 * written when every shard is whole; otherwise SL_ENOENT (some missing) or
 * SL_ECORRUPT (some damaged, none missing), every problem reported through
 * tc->problem first, and dataset.json untouched. */
int sl_convert_finish_plan(const sl_convert_task_config *tc, sl_convert_finish_result *res);

/* --------------------------------------------------------- dataset walking */
/* Shards of a split: from the manifest when present, else by listing
 * "DIR/SPLIT-*-of-*" with or without ".tfrecord" (and TensorFlow Datasets'
 * "DIR/DATASET-SPLIT.tfrecord-*-of-*"). *paths is an array of
 * malloc'd strings (free with sl_paths_free). */
int sl_dataset_shards(const char *dir, const char *split, char ***paths, size_t *n);
void sl_paths_free(char **paths, size_t n);
/* Length of NAME when base (a file name, no directory) is a shard name
 * "NAME-<digits>-of-<digits>", with or without ".tfrecord"; 0 otherwise. */
size_t sl_shard_name_len(const char *base);
/* Where the split's name is in a shard name: sl_shard_name_len's NAME, or
 * in TensorFlow Datasets' "DATASET-SPLIT.tfrecord-<digits>-of-<digits>",
 * SPLIT. Returns its length (0: not a shard name) and its start in *off. */
size_t sl_shard_split_span(const char *base, size_t *off);
/* Length of NAME when base is a WebDataset shard name "NAME-<digits>.tar"
 * or "NAME_<digits>.tar" (webdataset's ShardWriter, "train-000000.tar");
 * 0 otherwise. */
size_t sl_wds_shard_name_len(const char *base);

/* -------------------------------------------------------- dataset paths */
/*
 * What a dataset PATH names, the one resolver every command (verify,
 * inspect, profile, train, eval, index) and the pipeline go through:
 *
 *   SL_DATASET_MANIFEST  a directory with dataset.json: every split it lists
 *                        (TFRecord: the shards it promises, each checked to
 *                        exist by sl_dataset_shards; LMDB: DIR/NAME.lmdb),
 *                        then named shard groups it does not list (as below;
 *                        their `listed` is NULL)
 *   SL_DATASET_DIR       a directory without one: shards named
 *                        NAME-NNNNN-of-NNNNN, with or without ".tfrecord"
 *                        (TensorFlow's build_imagenet_data.py writes
 *                        train-00000-of-01024 and validation-00000-of-00128),
 *                        or NAME-NNNNNN.tar (WebDataset's), grouped into
 *                        split NAME; other *.tfrecord and *.tar files into
 *                        split "*"; NAME.lmdb stores (folders with data.mdb).
 *                        An s3:// prefix without dataset.json is listed so.
 *   SL_DATASET_GLOB      a pattern with * ? or [ that names no existing path
 *                        ("d/train-0000[0-3]*"; on s3:// in its last part,
 *                        matched against the prefix's listing): the regular
 *                        files it matches, sorted, less index (.idx),
 *                        temporary (.tmp) and dataset.json files, as one split;
 *                        also a brace pattern (below)
 *   SL_DATASET_FILE      one file: a WebDataset shard (*.tar), or a TFRecord
 *                        shard whatever its name (its first record header is
 *                        checked)
 *   SL_DATASET_LMDB      an LMDB environment directory (it holds data.mdb)
 *
 * Compressed shards (.tar.gz, .tgz, .tar.zst, .tar.bz2, .tar.xz, and any
 * shard name ending in .gz, .zst, .bz2, .xz or .lz4) are refused by name
 * (SL_ENOTSUP): the readers seek to records by offset, which a compressed
 * stream does not allow; decompress them (their JPEGs compress by a few
 * percent only).
 *
 * A path with "{A..B}" (decimal, A <= B; the width of A is the zero padding,
 * as WebDataset's and the shell's "{000000..000099}") names each expansion,
 * in order, as one split (kind SL_DATASET_GLOB), local or remote, nothing
 * listed and nothing checked: a reader names a missing one. A URL
 * (http(s)://, s3://; sl_dataset.remote) names the same kinds through
 * bytesrc.h, less LMDB stores (a local memory map): a remote folder through
 * its dataset.json, whose shards are taken as promised (no request per
 * shard); an s3:// prefix without one is listed (ListObjectsV2); an
 * http(s):// folder without one is SL_ENOENT (HTTP lists nothing: give a
 * brace pattern). Index files are not counted remotely (unindexed 0).
 *
 * Splits named by a glob or a file are called as their shard name says
 * ("train"), or "*". For those three kinds dataset.json beside the data, when
 * there is one, still gives class names, num_classes and label_offset, but
 * its counts do not apply (counts_listed is 0).
 */
typedef enum sl_dataset_kind {
    SL_DATASET_MANIFEST = 0,
    SL_DATASET_DIR,
    SL_DATASET_GLOB,
    SL_DATASET_FILE,
    SL_DATASET_LMDB,
} sl_dataset_kind;

typedef struct sl_dataset_split {
    char name[64];                   /* "train"; "*" for files without a split name */
    sl_format format;
    char **files;                    /* shard paths in order, or the one LMDB directory */
    size_t nfiles;
    size_t unindexed;                /* local TFRecord shards without "<shard>.idx" beside
                                      * them, WebDataset tars without "X.tar.idx" or DALI's
                                      * "X.idx" (readers scan those: sluice index writes
                                      * them); 0 for remote data (a HEAD per shard) */
    const sl_manifest_split *listed; /* its dataset.json entry (in the sl_dataset's
                                      * manifest); NULL when none */
} sl_dataset_split;

typedef struct sl_dataset {
    char *path;            /* the PATH as given, without trailing slashes, a URL's userinfo
                            * and query string (bytesrc.h's sl_path_redact) */
    char *dir;             /* the folder of the data: path itself for the directory
                            * kinds, else the one holding the file or the first match */
    sl_dataset_kind kind;
    int remote;            /* path is a URL (bytesrc.h): every file is a remote object, read
                            * by requests; nothing is stat'ed, mapped or written beside it.
                            * Decided once, here, for the readers that take ds */
    int has_manifest;      /* manifest below was loaded from dir/dataset.json */
    int counts_listed;     /* SL_DATASET_MANIFEST: the manifest's counts apply */
    char *manifest_path;   /* "dir/dataset.json" when has_manifest */
    char *classes_path;    /* the file that gave manifest.num_classes and class_names:
                            * dataset.json, or (has_manifest 0) TensorFlow Datasets'
                            * dir/features.json or dir/label.labels.txt; NULL: none */
    sl_manifest manifest;  /* class names, num_classes, label_offset, splits */
    sl_dataset_split *splits;
    size_t nsplits;
    const char *label_key; /* WebDataset shards: the label is this integer field of each
                            * sample's .json member (NULL, as resolve leaves it: its .cls);
                            * the caller's string, read by the walk (inspect) */
} sl_dataset;

/* Resolve path into ds (caller-owned; release it with sl_dataset_fini, also
 * after an error). only_split, when not NULL, keeps that split of a
 * directory alone (SL_ENOENT naming the splits there when it has none); a
 * glob or a file names its files itself and keeps them whatever only_split
 * says. Errors: SL_ENOENT when path does not exist, a glob matches nothing
 * or a directory holds no shards or store ("no dataset.json, shards
 * NAME-NNNNN-of-NNNNN[.tfrecord] or LMDB store"); SL_ECORRUPT when
 * dataset.json is unreadable; SL_EINVAL for a path that is neither file nor
 * directory, a glob matching a non-file, or a file given as PATH that is no
 * shard (not .tar, and its first 12 bytes are no TFRecord record header:
 * dataset.json, an .idx, an image; the message says what was expected).
 * Remotely: SL_ENOENT for an http(s):// folder without dataset.json,
 * SL_EINVAL for a glob over http(s):// (give a brace pattern), the byte
 * source's errors (SL_EPERM refused, SL_EIO after its retries) naming the
 * URL. Messages name the path. Lists directories (or an s3:// prefix) and
 * stats files; reads dataset.json where there is one, and no shard but the
 * 12 bytes of a local PATH that is one file (a remote one is sized, HEAD).
 * The byte source's options are the calling thread's (sl_io_thread_use),
 * else the process-wide ones. Reentrant. */
int sl_dataset_resolve(const char *path, const char *only_split, sl_dataset *ds);
/* Free what ds holds and zero it. NULL and a zeroed ds are no-ops. */
void sl_dataset_fini(sl_dataset *ds);
/* The split called name, NULL when ds has none. */
const sl_dataset_split *sl_dataset_split_find(const sl_dataset *ds, const char *name);
/* The TFRecord shards a reader of split `split` takes: that split of a
 * directory; for a glob or a file its one split whatever its name; for a
 * directory without dataset.json whose files form one set (one split, as
 * a folder of WebDataset tars "shard-000000.tar" ... is), that set
 * whatever split is asked for, unless its own name is a split's (train,
 * test, validation, val, ...: a folder of validation shards is not read as
 * the training set).
 * SL_ENOENT naming the splits there when a directory has no such split;
 * SL_ENOTSUP when the split is an LMDB store. */
int sl_dataset_reader_split(const sl_dataset *ds, const char *split,
                            const sl_dataset_split **out);
/* The split to evaluate on when none is named: "test" when ds has it, else
 * "validation" (TensorFlow's ImageNet name), else NULL. */
const char *sl_dataset_eval_split(const sl_dataset *ds);
/* dataset.json's label_offset, 0 without a manifest. */
int64_t sl_dataset_label_offset(const sl_dataset *ds);
/* The split names of ds as "a, b, c" into buf (truncated to cap). */
void sl_dataset_split_names(const sl_dataset *ds, char *buf, size_t cap);

/* ------------------------------------------------------------ index files */
/* Write the DALI index "<shard>.idx" of every TFRecord shard in the split(s)
 * of ds that has none (force: of every shard), by scanning the shard (CRCs
 * checked), each written atomically (temp, fsync, rename). An index that
 * exists but does not cover its shard exactly (stale or damaged) is
 * rewritten. progress, when not NULL, is called after each shard. Counts
 * go to *written, *kept (already right); NULL for none. Stops at the first
 * error (a damaged shard is SL_ECORRUPT naming file, record and offset). */
int sl_dataset_index(const sl_dataset *ds, int force,
                     void (*progress)(void *arg, const char *shard, size_t done, size_t total,
                                      int written),
                     void *arg, size_t *written, size_t *kept);

/* --------------------------------------------------------- walking records */
/*
 * Read every record of a resolved dataset in order (split, file, record):
 * TFRecord shards through sl_tfrecord_reader (both CRCs checked), LMDB
 * stores through sl_lmdb_reader, WebDataset .tar shards sample by sample
 * (records/wds.h: a scan, every header checked, then the spans).
 * `sluice verify` / `sluice inspect` and their Python functions are built on
 * it (sl_verify_path, sl_dataset_inspect below). Single-threaded: callbacks
 * run on the calling thread.
 */
#define SL_WALK_NO_OFFSET UINT64_MAX /* sl_walk_record.offset of LMDB records */
#define SL_WALK_NO_RECORD UINT64_MAX /* .recno in file_error: the file did not open */

/* One record (or, in file_error, the place where reading failed). */
typedef struct sl_walk_record {
    const sl_dataset_split *split;
    const char *file;    /* shard path or LMDB directory */
    size_t file_index;   /* index in split->files */
    uint64_t recno;      /* 0-based record number in the file */
    uint64_t offset;     /* byte offset of the record's framing; SL_WALK_NO_OFFSET for LMDB */
    const uint8_t *data; /* payload (serialized Example), valid during the callback */
    size_t len;
    /* WebDataset (.tar) shards: a record is a sample, data its span (its
     * headers and members, records/wds.h), offset the span's start, key the
     * sample's key ("" in file_error when the damage is past the last
     * sample); NULL for the other formats. */
    const char *key;
    const char *label_key; /* WebDataset: the dataset's label_key (NULL: .cls) */
} sl_walk_record;

typedef struct sl_walk_progress {
    uint64_t records, bytes;        /* read so far */
    size_t files_done, files_total;
    double elapsed_s;
} sl_walk_progress;

/* Called once the walk has run 0.5 s, then about 8 times a second (between
 * records and after each file); a non-zero return stops the walk and becomes
 * its result (an interrupted command: SL_ECANCELED). */
typedef int (*sl_walk_progress_fn)(void *arg, const sl_walk_progress *p);

/* Callbacks; any may be NULL. A non-zero return stops the walk and becomes
 * sl_dataset_walk's result. */
typedef struct sl_walk_visitor {
    int (*file_begin)(void *arg, const sl_dataset_split *s, const char *file);
    int (*record)(void *arg, const sl_walk_record *r);
    /* The file could not be opened (at->recno is SL_WALK_NO_RECORD, no data),
     * or reading stopped at a bad record: rc and a short description ("data
     * CRC mismatch", sl_msg_detail of the reader's message). After a framing
     * error the rest of a TFRecord file cannot be found, so the walk goes on
     * with the next file when this returns 0. When NULL the walk stops with
     * rc (sl_errmsg() the reader's). */
    int (*file_error)(void *arg, const sl_walk_record *at, int rc, const char *what);
    /* After each file: records read from it, and whether it was read to its
     * end without error. */
    int (*file_end)(void *arg, const sl_dataset_split *s, const char *file, uint64_t records,
                    int clean);
    sl_walk_progress_fn progress;
    void *arg;
} sl_walk_visitor;

/* Walk every split, file and record of ds in order. 0 when all were visited,
 * else the first non-zero callback result (or the read error when
 * file_error is NULL). */
int sl_dataset_walk(const sl_dataset *ds, const sl_walk_visitor *v);

/* The description part of a library message about file: what follows the
 * last "record N @ OFFSET: " (or "record N: "), else what follows a leading
 * "sl_function: " and then "file: " (file may be NULL; its base name also
 * matches). Returns a pointer into msg, msg itself when it has none of these
 * prefixes. */
const char *sl_msg_detail(const char *msg, const char *file);

/* ------------------------------------------------------------- verifying */
/*
 * sl_verify_path reads every record of a dataset PATH (sl_dataset_resolve's
 * kinds) and checks what a training run would trip over later. Per record:
 * both TFRecord CRCs, the Example (image/encoded and image/class/label
 * present, protobuf well formed), the image (a JPEG whose marker structure
 * is whole, not CMYK, its size equal to image/height x image/width when
 * those are set), the label range. Per shard: its DALI index file, when it
 * has one, lists exactly the offsets and sizes read (shards without one are
 * counted in unindexed, not a problem). Per split: dataset.json's counts
 * match what was read. A dataset.json that does not parse is a problem too.
 */
typedef struct sl_verify_problem {
    const char *split;   /* the split's name; NULL for a problem with PATH itself */
    const char *file;    /* shard, index file, LMDB directory, dataset.json or PATH */
    uint64_t recno;      /* SL_WALK_NO_RECORD: about the file as a whole */
    uint64_t offset;     /* SL_WALK_NO_OFFSET: a record without one (LMDB) */
    int status;          /* SL_ECORRUPT, SL_EIMAGE (image/encoded), SL_ENOENT (a
                          * listed shard missing), SL_EIO (unreadable) */
    const char *what;    /* "data CRC mismatch", "bad Example: ...", "label 7 outside 0..3 ..." */
    const char *message; /* "<file>: record N @ OFFSET: <what>" ("<dir>: record N: <what>"
                          * for LMDB, "<file>: <what>" for a file) */
} sl_verify_problem;

typedef struct sl_verify_options {
    const char *split;   /* only this split of a directory; NULL: all */
    int all;             /* go on past problems (else stop at the first) */
    int label_range;     /* 1: stored labels must lie in label_lo..label_hi;
                          * 0: the range dataset.json gives (num_classes from
                          * label_offset), no check without one */
    int64_t label_lo, label_hi;
    /* Each problem, as found (views valid during the call); NULL: none. */
    void (*problem)(void *arg, const sl_verify_problem *p);
    sl_walk_progress_fn progress;
    void *arg;
    const char *label_key; /* WebDataset shards: the label is this integer field of each
                            * sample's .json member; NULL: its .cls member */
    const struct sl_io_opts *io; /* remote I/O settings of the call's reads (bytesrc.h);
                                  * NULL: the process-wide ones */
} sl_verify_options;

typedef struct sl_verify_result {
    uint64_t records, files;
    uint64_t problems;
    uint64_t unindexed;       /* TFRecord shards without an index file */
    uint64_t restart_records; /* records whose JPEG has restart markers (sluice convert
                               * --restart; the pipeline reads only the intervals a crop needs) */
    int first_status;         /* the first problem's status (SL_OK: none) */
    char first[SL_ERRMSG_MAX];/* the first problem's message ("" none) */
} sl_verify_result;

/* Verify path. Counts are added to *res (zero it before the first call), so
 * one result can cover several PATHs. Returns SL_OK when the dataset was
 * read (problems, if any, are in res and were handed to o->problem); else
 * the status why not, sl_errmsg() naming it: PATH missing or not a dataset
 * (SL_ENOENT, SL_EINVAL), out of memory, or a progress callback's result. */
int sl_verify_path(const char *path, const sl_verify_options *o, sl_verify_result *res);

/* ------------------------------------------------------------- inspecting */
/* What is in a dataset, per split and in total, from reading every record
 * once: records, shards, payload bytes, the label histogram, image
 * width/height min/mean/max (image/width and image/height, else the image
 * header), the image/format values seen. */
#define SL_INSPECT_MAX_FORMATS 8

typedef struct sl_inspect_dim {
    int64_t min, max;
    double sum;
    uint64_t n;
} sl_inspect_dim;

typedef struct sl_inspect_stats {
    uint64_t records, bytes, files;
    int64_t *labels;          /* distinct stored labels, ascending */
    uint64_t *label_counts;   /* records of each */
    size_t nlabels, label_cap;
    sl_inspect_dim width, height;
    uint64_t unknown_size;    /* records whose image size could not be read */
    uint64_t restart;         /* records whose JPEG has restart markers (SL_JPEG_RESTART) */
    struct {
        char name[24];
        uint64_t n;
    } formats[SL_INSPECT_MAX_FORMATS + 1]; /* the last collects "other" */
    size_t nformats;
} sl_inspect_stats;

typedef struct sl_inspect_result {
    sl_inspect_stats *splits; /* one per split of the sl_dataset */
    size_t nsplits;
    sl_inspect_stats total;
} sl_inspect_result;

/* Read every record of ds into *res (caller-owned; release it with
 * sl_inspect_result_fini, also after an error). A record that cannot be
 * read or decoded stops it: SL_ECORRUPT (or the reader's status) with
 * "sl_dataset_inspect: FILE: record N @ OFFSET: what"; a shard that does
 * not open: "sl_dataset_inspect: FILE: cannot open: what". progress may be
 * NULL. */
int sl_dataset_inspect(const sl_dataset *ds, sl_walk_progress_fn progress, void *arg,
                       sl_inspect_result *res);
void sl_inspect_result_fini(sl_inspect_result *res);
/* Records of ds and how many of them hold a JPEG with restart markers
 * (sl_jpeg_scan's SL_JPEG_RESTART), by reading every record once (`sluice
 * index` reports it). A record that does not decode is counted, not an
 * error; a shard that cannot be read is (named). */
int sl_dataset_count_restarts(const sl_dataset *ds, uint64_t *records, uint64_t *with_markers);
/* Where split i's counts differ from its dataset.json entry: one line each
 * ("PATH: split S: dataset.json says N records, found M\n") into buf
 * (truncated to cap); the number of differences. */
int sl_inspect_warnings(const sl_dataset *ds, size_t i, const sl_inspect_stats *s, char *buf,
                        size_t cap);
/* The whole summary as one JSON document (`sluice inspect --json`'s schema:
 * path, the total's members, num_classes, label_offset, class_names,
 * splits.NAME.{format, shards_without_index, records, shards, bytes,
 * mean_record_bytes, labels, width, height, formats, unknown_size, listed},
 * warnings). malloc'd, free() it; NULL when out of memory. */
char *sl_inspect_json(const sl_dataset *ds, const sl_inspect_result *res);

#ifdef __cplusplus
}
#endif
#endif /* SL_RECORDS_H */

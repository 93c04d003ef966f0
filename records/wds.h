/*
 * records/wds.h - WebDataset tar shards, sluice's third store (DESIGN.md 3;
 * issue 30): the sample index and the sample decoder (records/wds.c) and
 * the shard writer (records/wds_writer.c), over the tar member parser and
 * header writer of records/tar.h (included here).
 *
 * A WebDataset shard is a POSIX/ustar (or GNU) tar file; a sample is a run
 * of consecutive regular-file members sharing a key, the member name up to
 * the first dot of its basename ("d/abc.seg.png": key "d/abc", extension
 * "seg.png"): "abc.jpg" + "abc.cls" (label, decimal text) and/or
 * "abc.json". The pipeline treats a sample like a record: its index entry
 * (sl_index_entry) is the sample's span, from the end of the previous
 * sample (0 for the first) to the end of its last member's padded data, so
 * the span holds every header of the sample (GNU long names, pax headers)
 * and sl_wds_sample_decode parses it alone.
 *
 * Index file "<shard>.idx" (beside "X.tar": "X.tar.idx", what sluice
 * index writes; DALI's wds2idx writes "X.idx" by default, which is read
 * when there is no "X.tar.idx"), DALI's
 * WebDataset index (dali/operators/reader/webdataset_reader_op.cc and
 * tools/wds2idx.py), so DALI reads ours and we read DALI's:
 *     v1.2 <num_samples>
 *     <ext> <data_offset> <size> <filename> <ext> <data_offset> <size> <filename> ...
 * one line per sample, one group per member, offsets of the member's data
 * (not its header). We write v1.2 (DALI's current version; it adds the
 * filename, which gives the key back without reading the tar), or v1.1
 * (groups without the filename) when a member name holds a blank, which
 * v1.2 cannot carry; we read both.
 *
 * Threading: every function is reentrant; an sl_wds_writer belongs to one
 * thread at a time.
 */
#ifndef SL_RECORDS_WDS_H
#define SL_RECORDS_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "records.h"
#include "records/tar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------- sample index */
typedef struct sl_wds_member {
    char *ext;          /* malloc'd extension ("jpg", "seg.png"; "" when none) */
    char *name;         /* malloc'd full member name; NULL when loaded from a v1.1 index */
    uint64_t offset;    /* data offset */
    uint64_t size;      /* data bytes */
} sl_wds_member;

typedef struct sl_wds_sample {
    uint64_t span_off, span_end; /* [span_off, span_end): the sample's bytes (see above) */
    size_t first, n;             /* its members: members[first .. first + n) */
} sl_wds_sample;

/* The largest sample span an index or a scan may hold: a sample is one
 * image and its label, and the pipeline keeps a buffer of the largest
 * sample per worker, so an index that declares a 3 GiB sample is refused
 * rather than allocated. */
#define SL_WDS_SAMPLE_MAX ((uint64_t)256 << 20)

typedef struct sl_wds_index {
    sl_wds_sample *samples;
    size_t nsamples;
    sl_wds_member *members;
    size_t nmembers;
} sl_wds_index;

/* Free what ix holds and zero it; a zeroed ix is a no-op. */
void sl_wds_index_fini(sl_wds_index *ix);
/* Append a member (ext and name copied; name may be NULL) to ix: it joins
 * the last sample when same is set, else starts one (span_off: the previous
 * span's end). *mcap, *scap: the arrays' capacities, kept by the caller
 * (the scan, the writer). A sample span past SL_WDS_SAMPLE_MAX is
 * SL_ECORRUPT "sample N: ..." (the caller names the file). */
int sl_wds_index_add(sl_wds_index *ix, size_t *mcap, size_t *scap, const char *ext,
                     const char *name, uint64_t off, uint64_t size, int same);
/* Scan the tar at path (through records/bytesrc.h's sl_bytes_read) and
 * group its regular members into samples by key. SL_ECORRUPT names the
 * shard and the member (name or byte offset). */
int sl_wds_index_build(const char *path, sl_wds_index *ix);
/* sl_wds_index_build, but a damaged tar (SL_ECORRUPT, the message naming
 * the shard, the member and its byte offset) keeps in ix the samples read
 * before the damage (their members whole; the last may lack members that
 * came after the damage: sl_wds_sample_decode judges it), as
 * sl_index_build_prefix does for TFRecord; free ix with sl_wds_index_fini.
 * Other errors leave ix zeroed. */
int sl_wds_index_build_prefix(const char *path, sl_wds_index *ix);
/* Parse index text (a loaded file: what names it in messages). tar_size,
 * when not UINT64_MAX, bounds the offsets. Bad header line, a count that
 * is not the number of lines, an offset that is not a data block, that
 * does not follow the previous member or runs past tar_size, garbage:
 * SL_ECORRUPT "WHAT: line N: what". */
int sl_wds_index_parse(const char *text, size_t len, uint64_t tar_size, const char *what,
                       sl_wds_index *ix);
/* sl_wds_index_parse of the file idx_path (read through sl_bytes_get). */
int sl_wds_index_load(const char *idx_path, uint64_t tar_size, sl_wds_index *ix);
/* DALI's default index name of tar ("X.tar" -> "X.idx"), malloc'd. */
char *sl_wds_dali_idx_path(const char *tar);
/* The index beside tar: "X.tar.idx", else DALI's "X.idx"; SL_ENOENT when
 * neither exists. *which (when not NULL) gets the one loaded (malloc'd). */
int sl_wds_index_load_beside(const char *tar, uint64_t tar_size, sl_wds_index *ix,
                             char **which);
/* The index text (v1.2, or v1.1 when a name has a blank or is missing):
 * *text malloc'd. */
int sl_wds_index_format(const sl_wds_index *ix, char **text, size_t *len);
/* Write ix to idx_path atomically (temp, fsync, rename). */
int sl_wds_index_write(const char *idx_path, const sl_wds_index *ix);
/* One sl_index_entry per sample, its span: *entries malloc'd. */
int sl_wds_index_entries(const sl_wds_index *ix, sl_index_entry **entries, size_t *n);

/* ------------------------------------------------------ sample decoding */
/* Parse the members of one sample span (headers and checksums checked:
 * the span comes straight from the reader) into out, whose views point
 * into span: image = the first member with extension jpg, jpeg, png or
 * webp (any case), label from ".cls" (decimal, blanks trimmed) or, when
 * label_key is not NULL, the integer field label_key of ".json";
 * filename = the key. No image, no label or a label that is not an
 * integer: SL_ECORRUPT "sample 'KEY': what". */
int sl_wds_sample_decode(const uint8_t *span, size_t n, const char *label_key,
                         sl_image_example *out);

/* ---------------------------------------------------------- shard writer */
/* Writes "path.tmp"; close adds the end-of-archive blocks, fsyncs (unless
 * SL_TFW_NOSYNC), renames it to path and writes "path.idx" atomically. */
typedef struct sl_wds_writer sl_wds_writer;
int sl_wds_writer_open(const char *path, unsigned flags, sl_wds_writer **out);
/* Append one sample from an Example record (sl_image_example_decode):
 * members KEY.jpg (the image's own extension from its bytes), KEY.cls
 * (label), KEY.json ({"label": N, "filename": "...", "class": "..."}). */
int sl_wds_writer_write_example(sl_wds_writer *w, const char *key, const uint8_t *rec,
                                size_t len);
uint64_t sl_wds_writer_count(const sl_wds_writer *w);
int sl_wds_writer_close(sl_wds_writer *w);
/* Remove the temp file, free w. NULL is a no-op. */
void sl_wds_writer_abort(sl_wds_writer *w);

/* Length of the key of member name: up to the first dot of its basename. */
size_t sl_wds_key_len(const char *name);

/* 1 when path names a WebDataset shard (ends in ".tar"). */
int sl_wds_is_shard(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* SL_RECORDS_WDS_H */

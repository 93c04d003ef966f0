/*
 * records/records_int.h - private declarations shared by the files of
 * records/ (not installed, not for other modules).
 *
 * Threading: as records.h. The input list is built by one thread and then
 * only read; the image header parsers are pure and reentrant.
 */
#ifndef SL_RECORDS_INT_H
#define SL_RECORDS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fileio.h" /* write-all, fsync, atomic replace, paths */
#include "records.h"

/* ---------------------------------------------------- conversion inputs */
/* One input of a conversion (records/convert_inputs.c). */
typedef struct sl_input {
    char *path;     /* malloc'd file path; NULL for IDX inputs */
    uint32_t idx;   /* IDX image index (0-based); 0 for files */
    int64_t label;  /* 0-based class label (before cfg->label_offset) */
    uint64_t size;  /* file bytes (IDX: raw pixel bytes), for shard sizing */
    int url;        /* a listed URL (bytesrc.h), taken as it is: its size not asked (0) */
    int rec;        /* a record of the TFRecord shard path (SL_SOURCE_TFRECORD): at framing
                     * offset off, size its framed size, idx its number in the shard;
                     * label -1 when its Example has no usable image and label */
    uint64_t off;
} sl_input;

typedef struct sl_input_list {
    sl_input *items;
    size_t n;
    char **classes;     /* folder source: nclasses malloc'd names; else NULL */
    uint32_t nclasses;  /* folder: class folders; list/idx: max label + 1 */
    /* IDX source: n images of idx_rows x idx_cols u8 pixels, row-major,
     * image i at idx_pixels + i * idx_rows * idx_cols. NULL otherwise. */
    uint8_t *idx_pixels;
    uint32_t idx_rows, idx_cols;
} sl_input_list;

/* Enumerate the inputs cfg names (cfg->source, ->input, ->idx_images,
 * ->idx_labels), in a deterministic order:
 *   folder: DIR/<class>/<file>, and files in folders under a class folder
 *           at any depth (as torchvision's ImageFolder takes them); classes
 *           are the non-hidden subdirectories of DIR sorted by strcmp (labels
 *           0..K-1); within a class a folder's files sorted by strcmp, then
 *           its subfolders' in name order; hidden entries (".name") and
 *           anything that is not a regular file are skipped; symlinks are
 *           followed (a link back to a folder being walked is not entered
 *           again); more than 32 folders deep is SL_EINVAL. No class
 *           subfolder: SL_EINVAL.
 *   list:   lines "path<TAB>label"; relative paths are taken relative to the
 *           list file's directory; blank lines and lines starting with '#'
 *           are skipped; a bad line is SL_EINVAL naming "file:line". A listed
 *           file that cannot be stat'ed gets size 0 (the converter reports it
 *           when it fails to read it). A path that is an http://, https://
 *           or s3:// URL is kept as it is, with size 0 (records/bytesrc.h
 *           reads it).
 *   idx:    MNIST IDX images (magic 0x00000803, u8, 3 dims) + labels (magic
 *           0x00000801), gzip or plain; bad magic, count mismatch, truncation
 *           or trailing bytes are SL_ECORRUPT naming the file.
 * *out is filled on success (free with sl_inputs_free) and zeroed on error. */
int sl_inputs_load(const sl_convert_config *cfg, sl_input_list *out);
/* Append *it to l (capacity *cap, grown by doubling); SL_ENOMEM. */
int sl_inputs_push(sl_input_list *l, size_t *cap, const sl_input *it);
/* SL_SOURCE_TFRECORD (records/convert_records.c): every record of one split
 * of the dataset cfg->input (cfg->input_split, else the split named
 * cfg->name, else its only one), local TFRecord shards only; classes
 * named as the source names them. Framing errors are SL_ECORRUPT naming
 * the shard and record. */
int sl_inputs_load_records(const sl_convert_config *cfg, sl_input_list *out);
/* Free everything in l and zero it. NULL is a no-op. */
void sl_inputs_free(sl_input_list *l);
/* A folder source converted into a dataset whose other splits (named in
 * `splits`, for the message) recorded class names: each class folder's
 * records take the label of the same name among names[0..n), and l's
 * classes become those n names (folders a split lacks leave their labels
 * unused). A class folder not among them is SL_EINVAL naming it, dir and
 * the names. Without folder classes: SL_OK, nothing changed. */
int sl_inputs_name_classes(sl_input_list *l, const char *dir, char *const *names, uint32_t n,
                           const char *splits);

/* --------------------------------------------------- image header parsers */
/* Largest width or height accepted anywhere (JPEG's own limit). */
#define SL_IMAGE_MAX_DIM 65535

/* Type from the magic bytes alone (no header validation). */
sl_image_type sl_image_sniff(const uint8_t *data, size_t len);

/* Read a JPEG header with the TurboJPEG decompressor tj (a tjhandle).
 * Fills info (type, size, channels, passthrough). SL_EIMAGE with
 * "JPEG header: <TurboJPEG message>" when unreadable. */
int sl_jpeg_header(void *tj, const uint8_t *data, size_t len, sl_image_info *info);

/* BMP: BITMAPFILEHEADER + BITMAPCOREHEADER (12) or BITMAPINFOHEADER and its
 * later versions (40, 52, 56, 108, 124 bytes); uncompressed (BI_RGB) 8-bit
 * paletted, 24-bit BGR or 32-bit BGRX only. */
typedef struct sl_bmp_header {
    int width, height;     /* height > 0 */
    int bpp;               /* 8, 24 or 32 */
    int top_down;          /* rows stored top row first (negative biHeight) */
    size_t data_off;       /* first pixel row (bfOffBits) */
    size_t row_bytes;      /* stored bytes per row (padded to 4) */
    size_t palette_off;    /* 8-bit: first palette entry */
    unsigned palette_len;  /* 8-bit: entries */
    unsigned palette_entry;/* 8-bit: bytes per entry (3 core, 4 info) */
} sl_bmp_header;
/* Parse and validate the header (not the pixel rows). SL_EIMAGE with a
 * reason ("BMP: ...") when malformed or unsupported. */
int sl_bmp_parse_header(const uint8_t *data, size_t len, sl_bmp_header *h);

/* Binary Netpbm: P5 (PGM, 1 channel) or P6 (PPM, 3 channels); maxval
 * 1..65535 (two big-endian bytes per sample above 255). */
typedef struct sl_pnm_header {
    int width, height;
    int channels;       /* 1 (P5) or 3 (P6) */
    unsigned maxval;
    size_t data_off;    /* first sample */
} sl_pnm_header;
int sl_pnm_parse_header(const uint8_t *data, size_t len, sl_pnm_header *h);

/* PNG: the signature and the IHDR chunk (CRC checked). channels: 1 gray,
 * 2 gray+alpha, 3 RGB or palette, 4 RGBA. */
int sl_png_parse_header(const uint8_t *data, size_t len, sl_image_info *info);

/* WebP (image_probe.c): the RIFF header read by libwebp's WebPGetFeatures
 * (no pixel decode). channels 4 when the file has alpha, else 3. Refused
 * (SL_EIMAGE, by name): an animated file (ANIM: which frame would be the
 * sample?), a header libwebp cannot read (its VP8StatusCode named), and
 * every WebP when the build has no libwebp (SLUICE_WITH_WEBP=0). */
int sl_webp_parse_header(const uint8_t *data, size_t len, sl_image_info *info);
/* libwebp's VP8StatusCode in words ("truncated data (NOT_ENOUGH_DATA)"). */
const char *sl_webp_status_what(int status);

/* ------------------------------------------------------------ converter */
/* Shared by records/convert.c (workers, in-order commit) and
 * records/convert_plan.c (permutation, plan file, resume scan, manifest).
 * One sl_convert_state per sl_convert_run; read-only once the workers start. */
typedef struct sl_convert_state {
    const sl_convert_config *cfg;
    sl_input_list in;              /* the inputs, in source order */
    uint32_t *order;               /* order[pos] = input index at output position pos */
    unsigned nshards;              /* TFRecord shards, or 1 for the LMDB store */
    const char *const *class_names;/* names of labels 0..nclass_names-1, or NULL */
    uint32_t nclass_names;
    uint32_t num_classes;          /* named classes, else max label + 1 */
    const char *idx_base;          /* basename of cfg->idx_images (IDX source) */
    char *plan_path;               /* "DIR/.NAME.plan" */
    uint8_t *kept;                 /* kept[s]: shard s kept by --resume (or, in a task, not
                                    * this task's or already whole: records/convert_task.c) */
    unsigned nkept;
    uint64_t kept_records, kept_bytes, kept_skipped, kept_inputs;
    /* A task's hooks (records/convert_task.c); NULL for sl_convert_run.
     * write_dir: the folder the writers write into instead of cfg->out_dir.
     * on_shard: called on the committing thread after shard s is closed
     * (whole, under its final name in write_dir) with the records and
     * payload bytes it holds; an error stops the run as a writer's would. */
    const char *write_dir;
    int (*on_shard)(void *arg, unsigned shard, uint64_t records, uint64_t bytes);
    void *on_shard_arg;
} sl_convert_state;

/* Shard s holds output positions [n*s/nshards, n*(s+1)/nshards). */
static inline uint64_t sl_convert_shard_begin(uint64_t n, unsigned nshards, unsigned s)
{
    return n * s / nshards;
}
/* Load inputs, permute, size shards, check/keep existing output (--resume),
 * remove stale temp files, write the plan file. st is zeroed first; release
 * it with sl_convert_state_fini even on error. */
int sl_convert_prepare(const sl_convert_config *cfg, sl_convert_state *st);
/* rm -r of a flat folder (its files, then itself); absent is fine. */
int sl_convert_remove_dir(const char *path);
/* The first half of sl_convert_prepare: check cfg, load the inputs and the
 * class names, check the labels (and the manifest's label offset), size the
 * shards, permute; nothing is written (out_dir is not created). --plan-out's
 * start (records/convert_task.c). */
int sl_convert_prepare_inputs(const sl_convert_config *cfg, sl_convert_state *st);
/* The plan file's text ("sluice convert plan 1\ninputs ...", the top of
 * convert_plan.c): exactly the parameters that decide the bytes. */
void sl_convert_plan_text(const sl_convert_state *st, char *buf, size_t cap);
/* The same text from its parts: the options c, the input count and inputs
 * hash, the shard count, the class names (a plan file's header is checked
 * against its text with it: records/convert_planfile.c). */
void sl_convert_plan_text_of(const sl_convert_config *c, uint64_t inputs, uint64_t ihash,
                             unsigned shards, const char *const *names, uint32_t nnames,
                             char *buf, size_t cap);
/* The first line where two plan texts differ, as "shards: 4 then, 8 now". */
void sl_convert_plan_diff(const char *old, const char *now, char *out, size_t cap);
#define SL_CONVERT_PLAN_MAX 4096 /* bytes of a plan text, at most */
/* A listed URL's bytes into *buf (realloc'd: *cap its size; *len the
 * bytes), through records/bytesrc.h (retries and all). A 404/410 or a
 * 401/403 is SL_EIMAGE, an input skipped with the status as its reason
 * ("HTTP 404: not found"), but not a 403 that blames the credentials
 * (SignatureDoesNotMatch, ...: SL_EPERM); an object over max bytes is a
 * skip too; any other failure
 * after the retries is returned as it is (the run stops: a network that is
 * down must not turn into a data set of skips). records/convert_url.c. */
int sl_convert_read_url(const char *url, uint64_t max, uint8_t **buf, size_t *cap, size_t *len);
/* Run the workers over the shards not kept (st from sl_convert_prepare, or
 * a task's), committing in order (records/convert.c). Fills res; does not
 * touch dataset.json. On error no shard is left half written. */
int sl_convert_write(const sl_convert_state *st, sl_convert_result *res);
/* After every shard is committed: update DIR/dataset.json, remove the plan
 * (renamed to the done file; already done is fine: a finish run again). */
int sl_convert_finish(sl_convert_state *st, const sl_convert_result *res);
/* The dataset.json of cfg->out_dir (local or remote) with this split put
 * in, saved into save_dir (a local folder: out_dir itself, or a staging
 * folder whose file is then uploaded). */
int sl_convert_manifest_update(const sl_convert_state *st, const sl_convert_result *res,
                               const char *save_dir);
void sl_convert_state_fini(sl_convert_state *st);
/* Name of input i for messages: its path, or "images.gz[1234]" (full = 1),
 * or the path's basename (full = 0; image/filename). */
void sl_convert_input_name(const sl_convert_state *st, size_t i, int full, char *buf, size_t cap);

/* ------------------------------------------------ dataset files (dataset_files.c) */
/* Does s end with suffix? The last part of a path ("a/b.tar" -> "b.tar"). */
int sl_name_has_suffix(const char *s, const char *suffix);
const char *sl_name_base(const char *path);
/* A shard's format by its name: SL_FORMAT_WDS for ".tar", else TFRecord. */
sl_format sl_dataset_file_format(const char *path);
/* The compression path's name says it has ("gzip", "zstd", ...), or NULL;
 * and the error refusing it by name (SL_ENOTSUP: the readers seek). */
const char *sl_dataset_compressed_as(const char *path);
int sl_dataset_refuse_compressed(const char *path, const char *what);
/* Would a listing take base (a file's name) as a shard? A compressed tar
 * too, so that it is refused by name rather than passed over. */
int sl_dataset_shard_like(const char *base);
/* The split of a shard by its name ("NAME" of NAME-NNNNN-of-NNNNN[.tfrecord]
 * or WebDataset's NAME-NNNNNN.tar), else "*", into out. */
void sl_dataset_split_of(const char *path, char *out, size_t cap);
/* SL_OK when the file path (size bytes) given alone as the data opens as a
 * TFRecord shard (or is empty); else SL_EINVAL naming what it is instead
 * (dataset.json, an index, an LMDB file, an image) and what was expected. */
int sl_dataset_check_shard_file(const char *path, uint64_t size);

/* TensorFlow Datasets' metadata in dir (records/tfds.c): when features.json
 * (or label.labels.txt alone) gives the "label" ClassLabel's count, m's
 * num_classes and, from label.labels.txt, class_names, and *from the file
 * that gave the count (malloc'd). No such files: SL_OK, m untouched, *from
 * NULL. A features.json that says no count: SL_ECORRUPT naming it. */
int sl_tfds_classes(const char *dir, sl_manifest *m, char **from);
/* 1 when name is a split name with a meaning (train, test, validation...). */
int sl_dataset_split_named(const char *name);

/* ------------------------------------------------------------ index lines */
/* Longest DALI index line: two 20-digit numbers, a space and a newline. */
#define SL_INDEX_LINE_MAX 48

/* Write the DALI index line "offset size\n" (decimal, no NUL) at p, which
 * has room for SL_INDEX_LINE_MAX bytes; returns its length (records/index.c). */
/* sl_shard_path with the suffix of fmt: ".tfrecord", or ".tar" for
 * SL_FORMAT_WDS (records/names.c). */
int sl_shard_path_fmt(char *buf, size_t cap, const char *dir, const char *name, unsigned shard,
                      unsigned nshards, sl_format fmt);
size_t sl_put_index_line(char *p, uint64_t offset, uint64_t size);
/* Parse a decimal u64 at *p (at least one digit, no sign, no overflow);
 * advance *p. 0, or -1 (nothing consumed). Index files' numbers. */
int sl_parse_u64(const char **p, const char *end, uint64_t *v);

#endif /* SL_RECORDS_INT_H */

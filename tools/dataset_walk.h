/*
 * tools/dataset_walk.h - walk every record of a resolved dataset (records.h's
 * sl_dataset_resolve: a directory with or without dataset.json, a glob, one
 * shard, an LMDB store); shared by `sluice inspect` and `sluice verify`.
 *
 * Threading: single-threaded; callbacks run on the calling thread.
 */
#ifndef SL_DATASET_WALK_H
#define SL_DATASET_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "records/records.h"

/* dw_record.offset for records that have no byte offset (LMDB). */
#define DW_NO_OFFSET UINT64_MAX
/* dw_record.recno in file_error when the file itself could not be opened. */
#define DW_NO_RECORD UINT64_MAX

/* One record (or, in file_error, the place where reading failed). */
typedef struct dw_record {
    const sl_dataset_split *split;
    const char *file;    /* shard path or LMDB directory */
    size_t file_index;   /* index in split->files */
    uint64_t recno;      /* 0-based record number in the file */
    uint64_t offset;     /* byte offset of the record's framing; DW_NO_OFFSET for LMDB */
    const uint8_t *data; /* payload (serialized Example), valid during the callback */
    size_t len;
} dw_record;

/* Callbacks; any may be NULL. A non-zero return stops the walk and becomes
 * dw_walk's result. */
typedef struct dw_visitor {
    int (*file_begin)(void *arg, const sl_dataset_split *s, const char *file);
    int (*record)(void *arg, const dw_record *r);
    /* The file could not be opened (at->recno is DW_NO_RECORD, no data), or
     * reading stopped at a bad record: rc and a short description ("data CRC
     * mismatch", without the file/record prefix). After a framing error the
     * rest of a TFRecord file cannot be found, so the walk goes on with the
     * next file when this returns 0. When NULL the walk stops with rc. */
    int (*file_error)(void *arg, const dw_record *at, int rc, const char *what);
    /* After each file: records read from it, and whether it was read to its
     * end without error. */
    int (*file_end)(void *arg, const sl_dataset_split *s, const char *file, uint64_t records,
                    int clean);
    void *arg;
    /* When not NULL and stderr is a terminal: a progress line
     * "<progress>: N records, F/T files, B" redrawn a few times a second. */
    const char *progress;
} dw_visitor;

/* Walk every split, file and record of ds in order. 0 when all were visited,
 * else the first non-zero callback result (or the read error when
 * file_error is NULL, with sl_errmsg() set). */
int dw_walk(const sl_dataset *ds, const dw_visitor *v);

/* The description part of a library message about file: what follows the
 * last "record N @ OFFSET: " (or "record N: "), else what follows a leading
 * "function: " and then "file: " (file may be NULL). Returns a pointer into
 * msg, which is returned whole when it has none of these prefixes. */
const char *dw_detail(const char *msg, const char *file);

#endif

/*
 * records/convert_task.h - private to the planned conversion's files:
 * convert_planfile.c (the plan file: write, read, check), convert_out.c
 * (the output's names, its plan marker, receipts), convert_task.c
 * (sl_convert_task: one task's shards, receipts, publishing) and
 * convert_finish.c (sl_convert_finish_plan).
 *
 * Output names (OUT a local folder or s3://BUCKET/PREFIX):
 *   OUT/NAME-00003-of-00016.tfrecord (.tar)   a shard, as sl_convert_run's
 *   OUT/NAME-00003-of-00016.tfrecord.idx      its index
 *   OUT/.NAME-00003-of-00016.tfrecord.receipt JSON: the plan's digest, the
 *       shard, its task, records, payload bytes, file size, CRC-32C of the
 *       file, and the inputs skipped ([input, reason] pairs). Published
 *       last: a shard with its receipt is whole and of this plan.
 *   OUT/.NAME.plan                            the options' text
 *       (convert_plan.c), written by the plan; renamed (local) or copied
 *       (s3) to OUT/.NAME.done by the finish.
 *
 * Threading: plan handles are read-only once loaded.
 */
#ifndef SLUICE_RECORDS_CONVERT_TASK_H
#define SLUICE_RECORDS_CONVERT_TASK_H

#include "records_int.h"

#define SL_PLAN_FORMAT 1

/* A plan file's first line, parsed: what every task and the finish need. */
typedef struct sl_plan {
    char *path;                 /* the plan's path or URL */
    char made_by[64];           /* "sluice 0.1.0" */
    uint64_t digest;            /* FNV-1a 64 of text */
    char *text;                 /* the options' text (OUT/.NAME.plan's content) */
    char *out, *name, *input, *idx_labels;
    sl_source_kind source;
    sl_format format;
    int shuffle, quality, resize_short, label_offset;
    uint64_t seed, max_pixels;
    uint64_t inputs;
    unsigned shards, tasks;
    uint32_t num_classes;
    char **class_names;         /* NULL or nclass_names names */
    uint32_t nclass_names;
    int explicit_names;         /* the names were given (cfg->class_names) */
    unsigned restart_mcus, restart_rows; /* convert --restart (0 and 0: none; absent in older plans) */
    uint64_t *task_off, *task_len; /* per task: its shard lines in the body */
    uint64_t body_off;          /* the byte after the first line */
    sl_convert_config cfg;      /* the options as sl_convert_run takes them */
} sl_plan;

/* Read and check plan's first line (format, version, consistency). fn
 * names the caller in messages. */
int sl_plan_load(const char *fn, const char *path, sl_plan *p);
void sl_plan_fini(sl_plan *p);
/* The start of sl_convert_task and sl_convert_finish_plan: tc checked
 * (not NULL, its size), its plan loaded into p (zeroed first: free it with
 * sl_plan_fini even on error). */
int sl_plan_begin(const char *fn, const sl_convert_task_config *tc, sl_plan *p);
/* Task k's shards: [*first, *end). */
void sl_plan_task_shards(const sl_plan *p, unsigned k, unsigned *first, unsigned *end);
/* The task that writes shard s. */
unsigned sl_plan_shard_task(const sl_plan *p, unsigned s);
/* Fill st (zeroed first) from p for task k: st->in.n is the plan's input
 * count (the shards' bounds), st->in.items holds the inputs of task k's
 * shards only, read from the plan's body in output order, and
 * st->order[pos] indexes them (4 bytes a position of the plan, 32 + the
 * path's a position of the task); st->cfg is &p->cfg. Release it with
 * sl_plan_state_fini (even on error), never sl_convert_state_fini. */
int sl_plan_state(const char *fn, const sl_plan *p, unsigned k, sl_convert_state *st);
void sl_plan_state_fini(const sl_plan *p, unsigned k, sl_convert_state *st);
/* OUT/.NAME.plan (or .done) must say what p's text says: SL_EINVAL naming
 * the first difference, or that OUT was not planned. *done: the split was
 * finished (the done file found). */
int sl_plan_check_out(const char *fn, const sl_plan *p, int *done);

/* "OUT/name" (malloc'd; NULL when out of memory). */
char *sl_out_join(const char *out, const char *name);
/* 1 when OUT (or a file bound for it, as the plan) is an object store's
 * prefix or object: written by PUT (records/remote_put.h) through a local
 * temporary file, no folder made, none removed; 0 for a local folder or
 * file, written in place (atomic rename). The one place the converter's
 * writes ask what a path is; its reads ask the byte source's handle. */
int sl_out_remote(const char *out);
/* The shard's file name "NAME-00003-of-00016.tfrecord" into buf. */
int sl_plan_shard_name(const sl_plan *p, unsigned s, char *buf, size_t cap);
/* ".NAME-00003-of-00016.tfrecord.receipt" into buf. */
int sl_plan_receipt_name(const sl_plan *p, unsigned s, char *buf, size_t cap);

/* A shard's receipt, parsed. */
typedef struct sl_receipt {
    uint64_t digest;
    unsigned shard, task;
    uint64_t records, bytes, size;
    uint32_t crc;
    size_t nskipped;
    char **skipped_input, **skipped_reason;
} sl_receipt;
/* Load OUT's receipt of shard s: SL_ENOENT when absent; SL_ECORRUPT when it
 * does not parse or is another plan's or another shard's. */
int sl_receipt_load(const sl_plan *p, unsigned s, sl_receipt *r);
void sl_receipt_fini(sl_receipt *r);

/* Write data as OUT/name: a local file replaced atomically, or a PUT. */
int sl_out_put(const char *out, const char *name, const void *data, size_t len, int do_sync);

/* CRC-32C and size of a whole object or file, streamed through the byte
 * source. */
int sl_out_crc(const char *path, uint64_t *size, uint32_t *crc);

#endif

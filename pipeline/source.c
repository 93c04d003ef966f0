/*
 * pipeline/source.c - the shards this rank reads, their index files, and the
 * dense record ids that the rest of the pipeline talks in.
 *
 * A source set is built once at pipeline creation and is read-only after:
 *
 *   data (DIR | GLOB | FILE)
 *     └─ sl_dataset_resolve(data)              all shards of the split, sorted by name
 *         └─ "<shard>.idx" (sl_index_load), or a scan (sl_index_build)
 *             when the shard has no index file, for every shard
 *             └─ keep shard i when i % world == rank   (SL_SPLIT_FILES; the
 *                 pipeline opens rank 0 of 1, every shard, for SL_SPLIT_RECORDS)
 *
 * Record ids: shard k of this rank holds ids [first_id, first_id + nrec),
 * with first_id the prefix sum of the nrec before it, so ids 0..total-1 name
 * every record this rank reads exactly once; sl_source_set_locate maps an id
 * back with a binary search over first_id. The other ranks' shards are
 * loaded only to be counted (issue 38 item 2): world_first is a shard's
 * first id among every rank's shards, so the ids a batch hands out
 * (sl_source_set_world_ids) and the records per epoch (world_total) are the
 * whole dataset's on every rank, whatever the split: ranks that split the
 * shards count their epochs, and name their records, alike.
 *
 * Why the index must cover the shard exactly: the global-shuffle mode and
 * the block readers pread records at the index's offsets. An index left over
 * from an earlier, shorter or longer version of the shard would make them
 * read the wrong bytes (caught later by CRCs as "corrupt records", or worse,
 * silently skip the tail), so a stale index is refused here, by name.
 *
 * Threading: open/close on one thread; a set that is open is read-only, and
 * sl_source_set_locate may be called from any number of threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/pipeline_int.h"
#include "records/bytesrc.h"
#include "records/wds.h"

static const char fn_open[] = "sl_source_set_open";

/* The shard paths of data for split (records.h's sl_dataset_resolve: a
 * directory's split, a glob's matches or the one file) and the label offset
 * of dataset.json beside them (0 when there is none; a damaged one is an
 * error: it may be the only record of the offset, and guessing 0 would shift
 * every label). *paths is malloc'd (sl_paths_free). */
static int list_shards(const char *data, const char *split, char ***paths, size_t *n,
                       int64_t *label_offset, int *remote)
{
    sl_dataset ds;
    const sl_dataset_split *s = NULL;
    int rc = sl_dataset_resolve(data, NULL, &ds);
    if (!rc)
        rc = sl_dataset_reader_split(&ds, split, &s);
    if (rc) {
        rc = sl_fail(rc, "%s: %s", fn_open, sl_errmsg());
        sl_dataset_fini(&ds);
        return rc;
    }
    sl_dataset_split *mine = &ds.splits[s - ds.splits]; /* its files move to the caller */
    *paths = mine->files;
    *n = mine->nfiles;
    *label_offset = sl_dataset_label_offset(&ds);
    *remote = ds.remote;
    mine->files = NULL;
    mine->nfiles = 0;
    sl_dataset_fini(&ds);
    return SL_OK;
}

/* note_bad's lock: remote indexes load on several threads (load_all). */
static pthread_mutex_t bad_mu = PTHREAD_MUTEX_INITIALIZER;

/* Note records left out under the skip policy (count, message); set NULL:
 * another rank's shard, which that rank reports. */
static void note_bad(sl_source_set *set, uint64_t count, const char *msg)
{
    if (!set)
        return;
    pthread_mutex_lock(&bad_mu);
    set->bad += count;
    if (set->nbad_msgs < SL_PIPELINE_MAX_BAD_REPORT) { /* cut to the report's width */
        char *to = set->bad_msgs[set->nbad_msgs++];
        size_t l = strnlen(msg, sizeof set->bad_msgs[0] - 1);
        memcpy(to, msg, l);
        to[l] = 0;
    }
    pthread_mutex_unlock(&bad_mu);
}

/* Load (or build) the index of sh->path and check that it ends exactly at
 * the end of the file. Fills idx, nrec, bytes. A file shorter than its
 * index is truncated: the first record past its end is named, as verify
 * names it; with skip the whole records are kept. */
static int load_index(sl_shard_info *sh, sl_error_policy policy, sl_source_set *set)
{
    uint64_t file_size;
    char *idx_path = NULL;
    int built = 0, tail = 0, rc;
    size_t n = 0;

    if (sl_wds_is_shard(sh->path)) { /* a WebDataset tar: pipeline/source_wds.c */
        char bad[SL_ERRMSG_MAX];
        rc = sl_source_load_wds(sh, policy, bad, sizeof bad);
        if (!rc && bad[0])
            note_bad(set, 1, bad);
        return rc;
    }

    if (asprintf(&idx_path, "%s.idx", sh->path) < 0)
        return sl_fail(SL_ENOMEM, "%s: out of memory", fn_open);
    rc = sl_index_load(idx_path, &sh->idx, &n);
    if (rc == SL_ENOENT) {
        /* Shards from other tools may come without an index: scan the file
         * (CRCs checked). Not written back: the data directory may be
         * read-only or shared. */
        sl_clear_error();
        rc = policy == SL_ON_ERROR_SKIP ? sl_index_build_prefix(sh->path, &sh->idx, &n)
                                        : sl_index_build(sh->path, &sh->idx, &n);
        built = 1;
        if (rc == SL_ECORRUPT && policy == SL_ON_ERROR_SKIP) {
            /* the rest of the file cannot be framed: it is one bad record */
            char msg[SL_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s (the rest of the file is skipped)", sl_errmsg());
            note_bad(set, 1, msg);
            sl_clear_error();
            rc = SL_OK;
            tail = 1;
        }
    }
    if (rc) {
        rc = sl_fail(rc, "%s: %s", fn_open, sl_errmsg());
        goto out;
    }
    if ((rc = sl_bytes_size(sh->path, &file_size))) { /* stat, or HEAD (bytesrc.h) */
        rc = sl_fail(rc, "%s: %s", fn_open, sl_errmsg());
        goto out;
    }
    sh->nrec = n;
    sh->bytes = n ? sh->idx[n - 1].offset + sh->idx[n - 1].size : 0;
    if (tail && sh->bytes < file_size)
        goto out; /* the scan above stopped at a bad record: the prefix is what is read */
    if (!built && sh->bytes > file_size) {
        /* The file ends inside the records its index lists: truncated (the
         * index was written with the whole file). */
        size_t k = 0;
        while (k < n && sh->idx[k].offset + sh->idx[k].size <= file_size)
            k++;
        char msg[SL_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s: record %zu @ %llu: truncated record (the file ends at "
                 "byte %llu; %s lists %zu records to byte %llu)", sh->path, k,
                 (unsigned long long)sh->idx[k].offset, (unsigned long long)file_size,
                 idx_path, n, (unsigned long long)sh->bytes);
        if (policy != SL_ON_ERROR_SKIP) {
            rc = sl_fail(SL_ECORRUPT, "%s: %s", fn_open, msg);
            goto out;
        }
        note_bad(set, n - k, msg);
        sh->nrec = k;
        sh->bytes = k ? sh->idx[k - 1].offset + sh->idx[k - 1].size : 0;
        goto out;
    }
    if (sh->bytes != file_size) {
        /* sl_index_load already checked the entries follow one another from
         * offset 0, so only the end can disagree with the file. */
        rc = sl_fail(SL_ECORRUPT, "%s: %s: index covers %llu bytes, shard has %llu%s", fn_open,
                     built ? sh->path : idx_path, (unsigned long long)sh->bytes,
                     (unsigned long long)file_size,
                     built ? " (the shard changed while it was scanned)"
                           : " (stale index: rebuild it, e.g. by re-converting)");
        goto out;
    }
out:
    free(idx_path);
    return rc;
}

/* ------------------------------------------------------------ load_all
 * A local index loads in microseconds; a remote one costs two round trips
 * (the shard's size, its index), 40 ms behind 20 ms of latency, so
 * ImageNet's 1024 shards would take 41 s one after another. Remote sets
 * load on up to SL_INDEX_LOADERS threads; each keeps its shard's status and
 * message, and the caller looks at them in shard order, so what it reports
 * does not depend on the timing. */
#define SL_INDEX_LOADERS 16u

typedef struct load_job {
    sl_source_set *set;
    unsigned rank, world;    /* shard i is this rank's when i % world == rank */
    sl_error_policy policy;
    size_t n, next;          /* shards; the next to claim (atomic) */
    int *rc;                 /* (n) */
    char (*msg)[SL_ERRMSG_MAX]; /* (n) */
    const sl_io_opts *io;    /* the caller's I/O settings (bytesrc.h: sl_io_thread_use) */
} load_job;

static void *loader_main(void *arg)
{
    load_job *j = arg;
    sl_io_thread_use(j->io); /* the reads under the caller's settings (the pipeline's) */
    for (;;) {
        size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n)
            return NULL;
        j->rc[i] = load_index(&j->set->shards[i], j->policy,
                              i % j->world == j->rank ? j->set : NULL);
        if (j->rc[i])
            snprintf(j->msg[i], sizeof j->msg[i], "%s", sl_errmsg());
    }
}

/* Load the indexes of set's n shards (paths set) into rc[i] / msg[i]; what
 * the skip policy leaves out is noted for this rank's shards only. */
static int load_all(sl_source_set *set, size_t n, unsigned rank, unsigned world,
                    sl_error_policy policy, int *rc, char (*msg)[SL_ERRMSG_MAX])
{
    load_job j = {.set = set, .rank = rank, .world = world, .policy = policy, .n = n, .rc = rc,
                  .msg = msg, .io = sl_io_thread_opts()};
    pthread_t th[SL_INDEX_LOADERS];
    unsigned nt = 0, want = n < SL_INDEX_LOADERS ? (unsigned)n : SL_INDEX_LOADERS;
    if (!set->remote)
        want = 1;
    while (nt + 1 < want && pthread_create(&th[nt], NULL, loader_main, &j) == 0)
        nt++;
    loader_main(&j); /* and this thread */
    for (unsigned t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    return SL_OK;
}

int sl_source_set_open(const char *data, const char *split, unsigned rank, unsigned world,
                       sl_source_set *out)
{
    return sl_source_set_open_policy(data, split, rank, world, SL_ON_ERROR_FAIL, out);
}

int sl_source_set_open_policy(const char *data, const char *split, unsigned rank, unsigned world,
                              sl_error_policy policy, sl_source_set *out)
{
    char **paths = NULL, (*msgs)[SL_ERRMSG_MAX] = NULL;
    int *rcs = NULL;
    size_t npaths = 0, mine;
    int64_t label_offset = 0;
    int rc, remote = 0;

    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn_open);
    memset(out, 0, sizeof *out);
    if (!data || !*data)
        return sl_fail(SL_EINVAL, "%s: no data path", fn_open);
    if (world == 0)
        return sl_fail(SL_EINVAL, "%s: world is 0", fn_open);
    if (rank >= world)
        return sl_fail(SL_EINVAL, "%s: rank %u of %u: rank must be below world", fn_open, rank,
                       world);
    rc = list_shards(data, split, &paths, &npaths, &label_offset, &remote);
    if (rc)
        return rc;
    /* Shards rank, rank + world, rank + 2*world, ... */
    mine = npaths > rank ? (npaths - rank + world - 1) / world : 0;
    if (mine == 0) {
        rc = sl_fail(SL_EINVAL, "%s: %s: rank %u of %u: only %zu shard%s, and splitting by "
                     "files gives each rank whole shards of its own (split the records "
                     "instead: SL_SPLIT_RECORDS)", fn_open, data, rank, world, npaths,
                     npaths == 1 ? "" : "s");
        goto out;
    }
    if (mine > UINT32_MAX) { /* sl_read_unit.shard is 32 bits */
        rc = sl_fail(SL_EINVAL, "%s: %s: %zu shards is too many", fn_open, data, mine);
        goto out;
    }
    /* every shard, loaded; the other ranks' are dropped below */
    out->shards = calloc(npaths, sizeof *out->shards);
    if (!out->shards) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn_open);
        goto out;
    }
    out->label_offset = label_offset;
    out->remote = remote;
    for (size_t i = 0; i < npaths; i++) {
        out->shards[i].path = paths[i]; /* ownership moves to the set */
        paths[i] = NULL;
        out->n = i + 1;
    }
    if (!(rcs = calloc(npaths, sizeof *rcs)) || !(msgs = calloc(npaths, sizeof *msgs))) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn_open);
        goto out;
    }
    load_all(out, npaths, rank, world, policy, rcs, msgs);
    size_t k = 0;
    for (size_t i = 0; i < npaths; i++) {
        sl_shard_info *sh = &out->shards[i];
        int own = i % world == rank;
        rc = rcs[i];
        if (rc)
            sl_fail(rc, "%s", msgs[i]); /* the loader thread's message, on this thread */
        /* A shard whose index stays unreachable for the retry budget
         * (bytesrc.h) is an error under either policy, as in the readers
         * (reader_remote.c): leaving it out would train on another dataset. */
        if (rc)
            goto out;
        sh->world_first = out->world_total;
        out->world_total += sh->nrec;
        if (!own) { /* counted: another rank reads it */
            free(sh->path);
            free(sh->idx);
            sh->path = NULL;
            sh->idx = NULL;
            continue;
        }
        sh->first_id = out->total;
        out->total += sh->nrec;
        out->total_bytes += sh->bytes;
        for (uint64_t r = 0; r < sh->nrec; r++)
            if (sh->idx[r].size > out->max_record)
                out->max_record = sh->idx[r].size;
        if (k != i) { /* k < i: moved down (zeroed behind, so a close frees it once) */
            out->shards[k] = *sh;
            memset(sh, 0, sizeof *sh);
        }
        k++;
    }
    out->n = k;
out:
    free(rcs);
    free(msgs);
    sl_paths_free(paths, npaths); /* NULLs where moved */
    if (rc)
        sl_source_set_close(out);
    return rc;
}

void sl_source_set_close(sl_source_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->shards[i].path);
        free(s->shards[i].idx);
    }
    free(s->shards);
    memset(s, 0, sizeof *s);
}

void sl_source_set_world_ids(const sl_source_set *s, uint64_t *ids, size_t n)
{
    if (s->world_total == s->total) /* every shard is this rank's (or the others' are empty) */
        return;
    for (size_t i = 0; i < n; i++) {
        uint32_t shard = 0;
        uint64_t rec = 0;
        if (sl_source_set_locate(s, ids[i], &shard, &rec) == SL_OK)
            ids[i] = s->shards[shard].world_first + rec;
    }
}

int sl_source_set_locate(const sl_source_set *s, uint64_t id, uint32_t *shard, uint64_t *rec)
{
    if (id >= s->total)
        return sl_fail(SL_EINVAL, "sl_source_set_locate: record id %llu of %llu",
                       (unsigned long long)id, (unsigned long long)s->total);
    /* The last shard with first_id <= id. Empty shards share their
     * successor's first_id, and the last of a run of equal first_ids is the
     * non-empty one that holds id (an empty last shard has first_id ==
     * total > id), so this always lands on the shard that holds the id. */
    size_t lo = 0, hi = s->n; /* invariant: first_id[lo] <= id, first_id[hi] > id (hi = n: inf) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->shards[mid].first_id <= id)
            lo = mid;
        else
            hi = mid;
    }
    *shard = (uint32_t)lo;
    *rec = id - s->shards[lo].first_id;
    return SL_OK;
}

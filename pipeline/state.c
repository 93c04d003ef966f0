/*
 * pipeline/state.c - resume state: save the position after the last batch
 * handed out, and build a pipeline that continues from it exactly.
 *
 * The state is a small JSON object (no data):
 *   {"v":1,"config_hash":"<16 hex>",
 *    "parts":{"source":"<hex>","order":"<hex>","transform":"<hex>","batch":"<hex>"},
 *    "seed":"S","batches":"K","samples":"N"}
 * Integers are decimal strings so that every uint64 survives JSON readers
 * that hold numbers in doubles (cJSON among them). N is the position in the
 * sample stream after batch K - 1 (K x B, except after a last partial batch).
 *
 * The config hash covers everything that decides the sample stream and its
 * bytes, in four parts so that a mismatch can say what changed:
 *   source     split, rank, world, rank_split (only when not the default
 *              SL_SPLIT_FILES, so states saved before it existed still
 *              match; a buffered record split adds a mark for its cut,
 *              so a state of the stride it replaced is refused rather
 *              than resumed into other records), effective label offset,
 *              and per shard its file name (not its directory: a dataset
 *              may move between save and resume), record count and bytes;
 *   order      shuffle mode, effective shuffle buffer, a mark when the
 *              buffer takes an epoch at a time (the epoch barrier; a state
 *              saved by the fused buffer of the same size before it is
 *              refused rather than resumed into other records), cycle,
 *              block, shuffle_files, epochs, seed;
 *   transform  mode and its parameters, output size, layout, mean/std for
 *              the f32 layouts;
 *   batch      batch size, drop_remainder.
 * Threads, prefetch, read window and device do not change the stream and
 * are free to differ.
 *
 * Fast-forward (create_from_state). The stream is: input positions 0, 1,
 * 2, ... (the sl_order's records, across epochs) through the shuffle
 * machine (fill while it takes the next position or until the input ends,
 * pop one) with a known seed. Under the epoch barrier (pipeline_int.h) the
 * machine needs each position's epoch: epoch e ends at this rank's
 * position sl_split_samples((e + 1) x R, rank, world) (world 1 without a
 * record split), the count the stride and the cut both give (order.c).
 * So, without reading any data:
 *   1. run the machine on the positions themselves for N pops: this gives
 *      the buffer's content (positions) and RNG state at the cut, and
 *      `fed`, how many positions entered it;
 *   2. walk a fresh order's units from the start to map the buffered
 *      positions to (epoch, shard, record), stopping at the unit that holds
 *      position `fed`: the readers start there, and that unit's first
 *      fed - first_pos records (already fed before the cut) are not pushed
 *      again (p->skip_seq / skip_n);
 *   3. read the buffered records by pread (sorted, runs of consecutive
 *      records of a shard in one read) into units, and install the buffer:
 *      same slots, same RNG state, handles instead of positions.
 * Batch and sample numbering continue at K and N. The cost is O(N) cheap
 * steps plus reading at most one buffer of records; NONE and GLOBAL have a
 * buffer of 1, so they only skip N positions. With SL_SPLIT_RECORDS the
 * positions are this rank's (the order's kept records), and a buffered
 * record's number is u.rec + stride x its index in the unit; only BUFFER
 * buffers records, and its split cuts ranges (order.c), so step 3 groups
 * records whose numbers go up by 1, all of them this rank's: the resume
 * reads no other rank's bytes either. The walk of step 2 reads nothing,
 * so skipping to a rank's range costs no I/O; the state stays
 * (batches, samples).
 *
 * sl_pipeline_create_at runs the same fast-forward from a position given
 * by the caller (any K and N <= the run's samples; N need not be K x B).
 *
 * Threading: save is called by the consumer thread; create_from_state
 * builds the pipeline before any of its threads run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json.h"

#include "pipeline/graph_int.h"

enum { PART_SOURCE, PART_ORDER, PART_TRANSFORM, PART_BATCH, NPARTS };
static const char *const part_name[NPARTS] = {"source", "order", "transform", "batch"};
static const char *const part_what[NPARTS] = {
    "shards, split, rank/world, rank_split or label offset",
    "shuffle, shuffle buffer, cycle, block, shuffle_files, epochs or seed",
    "transform, size, layout or normalization",
    "batch or drop_remainder",
};

/* --------------------------------------------------------------- hash */

static uint64_t h_u64(uint64_t h, uint64_t v)
{
    return sl_mix64(h ^ sl_mix64(v + 0x9e3779b97f4a7c15ull));
}

static uint64_t h_f32(uint64_t h, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return h_u64(h, bits);
}

static uint64_t h_str(uint64_t h, const char *s)
{
    size_t n = strlen(s);
    h = h_u64(h, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h = h_u64(h, w);
    }
    return h;
}

static void config_parts(const sl_pipeline *p, uint64_t parts[NPARTS])
{
    const sl_pipeline_config *c = &p->cfg;
    uint64_t h = h_str(1, c->split);
    h = h_u64(h, c->rank);
    h = h_u64(h, c->world);
    if (c->rank_split != SL_SPLIT_FILES)
        h = h_u64(h, 0x5e11u + (uint64_t)c->rank_split);
    /* A buffered record split cuts ranges (order.c) where it strided
     * before: a state saved by the stride would resume into other records */
    if (c->rank_split == SL_SPLIT_RECORDS && c->world > 1 && c->shuffle == SL_SHUFFLE_BUFFER)
        h = h_u64(h, 0xc07u);
    h = h_u64(h, (uint64_t)p->label_offset);
    h = h_u64(h, p->src.n);
    for (size_t i = 0; i < p->src.n; i++) {
        const char *path = p->src.shards[i].path, *slash = strrchr(path, '/');
        h = h_str(h, slash ? slash + 1 : path);
        h = h_u64(h, p->src.shards[i].nrec);
        h = h_u64(h, p->src.shards[i].bytes);
    }
    parts[PART_SOURCE] = h;

    h = h_u64(2, (uint64_t)c->shuffle);
    h = h_u64(h, p->shuffle_cap);
    if (p->shuf.barrier)
        h = h_u64(h, 0xba771e4u);
    h = h_u64(h, c->cycle);
    h = h_u64(h, c->block);
    h = h_u64(h, (uint64_t)(c->shuffle_files != 0));
    h = h_u64(h, (uint64_t)(c->epochs > 0 ? c->epochs : 0));
    h = h_u64(h, c->seed);
    parts[PART_ORDER] = h;

    h = h_u64(3, (uint64_t)c->transform);
    h = h_u64(h, (uint64_t)c->height);
    h = h_u64(h, (uint64_t)c->width);
    h = h_u64(h, (uint64_t)c->layout);
    if (c->transform == SL_TRANSFORM_TRAIN) {
        h = h_f32(h, c->scale_min);
        h = h_f32(h, c->scale_max);
        h = h_f32(h, c->ratio_min);
        h = h_f32(h, c->ratio_max);
        h = h_u64(h, (uint64_t)(c->flip != 0));
    } else {
        h = h_f32(h, c->crop_fraction);
    }
    if (c->layout != SL_LAYOUT_NHWC_U8)
        for (int i = 0; i < 3; i++)
            h = h_f32(h_f32(h, c->mean[i]), c->std[i]);
    parts[PART_TRANSFORM] = h;

    h = h_u64(4, c->batch);
    h = h_u64(h, (uint64_t)(c->drop_remainder != 0));
    parts[PART_BATCH] = h;
}

static uint64_t config_hash(const uint64_t parts[NPARTS])
{
    uint64_t h = 0;
    for (int i = 0; i < NPARTS; i++)
        h = h_u64(h, parts[i]);
    return h;
}

/* --------------------------------------------------------------- save */

int sl_pipeline_state_save(sl_pipeline *p, char *buf, size_t cap, size_t *len)
{
    static const char fn[] = "sl_pipeline_state_save";
    if (!p || !buf)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    uint64_t parts[NPARTS];
    config_parts(p, parts);
    pthread_mutex_lock(&p->mu);
    unsigned long long k = p->next_index, n = p->samples_out;
    pthread_mutex_unlock(&p->mu);
    int w = snprintf(buf, cap,
                     "{\"v\":1,\"config_hash\":\"%016llx\",\"parts\":{\"source\":\"%016llx\","
                     "\"order\":\"%016llx\",\"transform\":\"%016llx\",\"batch\":\"%016llx\"},"
                     "\"seed\":\"%llu\",\"batches\":\"%llu\",\"samples\":\"%llu\"}",
                     (unsigned long long)config_hash(parts), (unsigned long long)parts[0],
                     (unsigned long long)parts[1], (unsigned long long)parts[2],
                     (unsigned long long)parts[3], (unsigned long long)p->cfg.seed, k, n);
    if (w < 0 || (size_t)w >= cap)
        return sl_fail(SL_EINVAL, "%s: buffer of %zu bytes, the state needs %d", fn, cap, w + 1);
    if (len)
        *len = (size_t)w;
    return SL_OK;
}

/* -------------------------------------------------------------- parse */

typedef struct saved_state {
    uint64_t hash, parts[NPARTS];
    uint64_t seed, batches, samples;
} saved_state;

static int get_u64(const cJSON *obj, const char *key, int hex, uint64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(it) || !it->valuestring[0])
        return sl_fail(SL_EINVAL, "sl_pipeline_create_from_state: state: \"%s\" missing or not "
                       "a string", key);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(it->valuestring, &end, hex ? 16 : 10);
    if (*end || errno || it->valuestring[0] == '-')
        return sl_fail(SL_EINVAL, "sl_pipeline_create_from_state: state: \"%s\": bad number "
                       "\"%s\"", key, it->valuestring);
    *out = v;
    return SL_OK;
}

static int parse_state(const char *state, size_t len, saved_state *s)
{
    static const char fn[] = "sl_pipeline_create_from_state";
    int rc = SL_OK;
    cJSON *j = cJSON_ParseWithLength(state, len);
    if (!j || !cJSON_IsObject(j)) {
        rc = sl_fail(SL_EINVAL, "%s: state is not a JSON object", fn);
        goto out;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "v");
    if (!sl_json_is_int(v, 1, 1, NULL)) { /* 1.5 is no version (valueint would say 1) */
        rc = sl_fail(SL_EINVAL, "%s: state version is not 1", fn);
        goto out;
    }
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(j, "parts");
    if (!cJSON_IsObject(parts)) {
        rc = sl_fail(SL_EINVAL, "%s: state: \"parts\" missing", fn);
        goto out;
    }
    if ((rc = get_u64(j, "config_hash", 1, &s->hash)))
        goto out;
    for (int i = 0; i < NPARTS; i++)
        if ((rc = get_u64(parts, part_name[i], 1, &s->parts[i])))
            goto out;
    if ((rc = get_u64(j, "seed", 0, &s->seed)) || (rc = get_u64(j, "batches", 0, &s->batches)) ||
        (rc = get_u64(j, "samples", 0, &s->samples)))
        goto out;
    if (config_hash(s->parts) != s->hash)
        rc = sl_fail(SL_EINVAL, "%s: state damaged: config_hash does not match its parts", fn);
out:
    cJSON_Delete(j);
    return rc;
}

/* ------------------------------------------------------- fast-forward */

typedef struct buffered {
    uint64_t pos;       /* input position */
    uint64_t slot;      /* index in the shuffle's items */
    int32_t epoch;
    uint32_t shard;
    uint64_t rec;
} buffered;

static int by_pos(const void *a, const void *b)
{
    const buffered *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int by_place(const void *a, const void *b)
{
    const buffered *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->rec < y->rec ? -1 : x->rec > y->rec;
}

/* Steps 2 and 3 of the top comment: map positions, place the readers. */
static int walk_units(sl_pipeline *p, const char *fn, buffered *b, size_t n, uint64_t fed)
{
    size_t j = 0;
    if (fed == 0)
        return SL_OK;
    if (n > 1)
        qsort(b, n, sizeof *b, by_pos);
    for (;;) {
        sl_read_unit u;
        int rc = sl_order_next_unit(p->order, &u);
        if (rc == SL_EOF) {
            if (j < n || fed < p->input_total)
                return sl_fail(SL_EINVAL, "%s: position past the end of the data", fn);
            p->order_done = 1;
            return SL_OK;
        }
        if (rc)
            return rc;
        uint64_t end = u.first_pos + u.nrec;
        for (; j < n && b[j].pos < end; j++) {
            b[j].epoch = u.epoch;
            b[j].shard = u.shard;
            b[j].rec = sl_unit_rec(&u, (uint32_t)(b[j].pos - u.first_pos));
        }
        if (fed < end) {
            p->pending = u;
            p->have_pending = 1;
            p->skip_seq = u.seq;
            p->skip_n = (uint32_t)(fed - u.first_pos);
            return SL_OK;
        }
    }
}

/* Read the buffered records into units (runs of consecutive records of a
 * shard and epoch) and point the shuffle at them. */
static int load_buffered(sl_pipeline *p, const char *fn, buffered *b, size_t n)
{
    if (n > 1)
        qsort(b, n, sizeof *b, by_place);
    for (size_t i = 0; i < n;) {
        size_t k = i + 1;
        while (k < n && b[k].epoch == b[i].epoch && b[k].shard == b[i].shard &&
               b[k].rec == b[k - 1].rec + 1 && k - i < UINT32_MAX)
            k++;
        const sl_shard_info *sh = &p->src.shards[b[i].shard];
        const sl_index_entry *first = &sh->idx[b[i].rec], *last = &sh->idx[b[k - 1].rec];
        sl_read_unit u = {.seq = UINT64_MAX, .first_pos = b[i].pos, .shard = b[i].shard,
                          .nrec = (uint32_t)(k - i), .epoch = b[i].epoch,
                          .stride = 1, .rec = b[i].rec, .offset = first->offset,
                          .bytes = last->offset + last->size - first->offset};
        sl_unit *un = sl_unit_claim_locked(p, &u);
        if (!un)
            return sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        un->pushed = u.nrec;
        int rc = sl_unit_read(p, un);
        if (rc)
            return rc;
        un->ready = 1;
        for (size_t m = i; m < k; m++)
            p->shuf.items[b[m].slot] = sl_handle(un->id, (uint32_t)(m - i));
        i = k;
    }
    return SL_OK;
}

/* This rank's input position where epoch e ends (exclusive): its records
 * of epochs 0..e (the top comment). e + 1 <= 2^31 and R < 2^32: no
 * overflow. */
static uint64_t epoch_end(const sl_pipeline *p, int64_t e)
{
    const sl_pipeline_config *c = &p->cfg;
    int split = c->rank_split == SL_SPLIT_RECORDS && c->world > 1;
    return sl_split_samples((uint64_t)(e + 1) * p->src.total, split ? c->rank : 0,
                            split ? c->world : 1);
}

static int fast_forward(sl_pipeline *p, const char *fn, uint64_t samples)
{
    sl_shuffle sim;
    buffered *b = NULL;
    int rc = sl_shuffle_init(&sim, p->shuffle_cap, p->cfg.seed);
    if (rc)
        return rc;
    sim.barrier = p->shuf.barrier;
    uint64_t fed = 0;
    int64_t e = 0; /* the epoch of position fed (only the barrier looks) */
    uint64_t e_end = sim.barrier ? epoch_end(p, 0) : UINT64_MAX;
    for (uint64_t i = 0; i < samples; i++) {
        for (; fed < p->input_total; fed++) {
            while (fed >= e_end)
                e_end = epoch_end(p, ++e);
            if (!sl_shuffle_takes(&sim, e))
                break;
            sl_shuffle_push(&sim, fed, e);
        }
        if (sim.n == 0) {
            rc = sl_fail(SL_EINVAL, "%s: position past the end of the data", fn);
            goto out;
        }
        (void)sl_shuffle_pop(&sim);
    }
    size_t n = (size_t)sim.n;
    if (n && !(b = calloc(n, sizeof *b))) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        b[i] = (buffered){.pos = sim.items[i], .slot = i};
    if ((rc = walk_units(p, fn, b, n, fed)) || (rc = load_buffered(p, fn, b, n)))
        goto out;
    p->shuf.n = sim.n;
    p->shuf.rng = sim.rng;
    p->shuf.epoch = sim.epoch;
out:
    free(b);
    sl_shuffle_fini(&sim);
    return rc;
}

/* -------------------------------------------------------------- create */

/* Place a built pipeline (threads not started) at batch k, sample n: the
 * run's batches are then k, k + 1, ... starting at samples n, n + B, ...,
 * up to the run's end (p->sample_limit, unchanged). */
static int position_at(sl_pipeline *p, const char *fn, uint64_t k, uint64_t n)
{
    if (p->sample_limit != UINT64_MAX) {
        uint64_t B = p->cfg.batch, left = p->sample_limit - n;
        uint64_t more = left / B + (left % B != 0);
        if (more > UINT64_MAX - 1 - k)
            return sl_fail(SL_EINVAL, "%s: batch %llu: batch numbers would overflow", fn,
                           (unsigned long long)k);
        p->nbatches = k + more;
    }
    int rc = fast_forward(p, fn, n);
    if (rc)
        return rc;
    sl_pipeline_set_position(p, k, n);
    return SL_OK;
}

int sl_pipeline_create_from_state(const sl_pipeline_config *cfg, const char *state, size_t len,
                                  sl_pipeline **out)
{
    static const char fn[] = "sl_pipeline_create_from_state";
    saved_state s;
    sl_pipeline *p = NULL;
    int rc;

    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    if (!cfg || !state)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if ((rc = sl_check_config_size(fn, cfg->size, sizeof *cfg)) ||
        (rc = parse_state(state, len, &s)))
        return rc;
    if ((rc = sl_pipeline_build(cfg, &p)))
        return rc;
    uint64_t parts[NPARTS];
    config_parts(p, parts);
    for (int i = 0; i < NPARTS; i++)
        if (parts[i] != s.parts[i]) {
            rc = sl_fail(SL_EINVAL, "%s: the config differs from the one the state was saved "
                         "with: %s (%s)", fn, part_name[i], part_what[i]);
            goto fail;
        }
    /* A state saved by a pipeline from sl_pipeline_create_at may have any
     * batch number and a sample count that is not batches x B. */
    if (s.samples > p->sample_limit) {
        rc = sl_fail(SL_EINVAL, "%s: state inconsistent: %llu batches, %llu samples: the run "
                     "has %llu samples", fn, (unsigned long long)s.batches,
                     (unsigned long long)s.samples, (unsigned long long)p->sample_limit);
        goto fail;
    }
    if ((rc = position_at(p, fn, s.batches, s.samples)) || (rc = sl_pipeline_start(p)))
        goto fail;
    *out = p;
    return SL_OK;
fail:
    sl_pipeline_destroy(p);
    return rc;
}

int sl_pipeline_create_at(const sl_pipeline_config *cfg, uint64_t batches, uint64_t samples,
                          sl_pipeline **out)
{
    static const char fn[] = "sl_pipeline_create_at";
    sl_pipeline *p = NULL;
    int rc;

    if (!out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    if (!cfg)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if ((rc = sl_check_config_size(fn, cfg->size, sizeof *cfg)) ||
        (rc = sl_pipeline_build(cfg, &p)))
        return rc;
    if (samples > p->sample_limit) {
        rc = sl_fail(SL_EINVAL, "%s: %s: rank %u of %u: sample %llu is past the end of the run "
                     "(%llu samples)", fn, p->cfg.data, p->cfg.rank, p->cfg.world,
                     (unsigned long long)samples, (unsigned long long)p->sample_limit);
        goto fail;
    }
    if ((rc = position_at(p, fn, batches, samples)) || (rc = sl_pipeline_start(p)))
        goto fail;
    *out = p;
    return SL_OK;
fail:
    sl_pipeline_destroy(p);
    return rc;
}

/* tests/pipeline/test_pipeline.c - the whole graph on small real datasets:
 * determinism whatever the thread counts, coverage of every record per
 * epoch, the fused epoch boundary, byte budgets, every transform path.
 * Also defines the dataset and collector helpers of pipeline_testdata.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "pipeline/graph_int.h"
#include "pipeline_testdata.h"
#include "records/records.h"
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

static void jpeg_of(tjhandle tj, uint64_t i, uint64_t *rng, unsigned char **jpeg,
                    unsigned long *len)
{
    int w = 40 + (int)(tu_rand(rng) % 81), h = 40 + (int)(tu_rand(rng) % 81);
    int gray = i % 7 == 3;
    int ch = gray ? 1 : 3;
    unsigned char *px = malloc((size_t)w * h * ch);
    cr_assert_not_null(px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++)
                px[((size_t)y * w + x) * ch + c] =
                    (unsigned char)((x * 255 / w) * (c != 1) + (y * 255 / h) * (c != 0) +
                                    (int)(i * 37 + c * 50) + (int)(tu_rand(rng) % 16));
    *jpeg = NULL;
    *len = 0;
    cr_assert_eq(tjCompress2(tj, px, w, 0, h, gray ? TJPF_GRAY : TJPF_RGB, jpeg, len,
                             gray ? TJSAMP_GRAY : TJSAMP_420, 90, 0),
                 0, "%s", tjGetErrorStr2(tj));
    free(px);
}

void pl_make_dataset(pl_dataset *d, uint64_t n, unsigned shards, int64_t label_offset,
                     const uint8_t *bad)
{
    cr_assert(shards >= 1 && shards <= 16);
    memset(d, 0, sizeof *d);
    d->dir = tu_tmpdir();
    d->n = n;
    d->shards = shards;
    /* Uneven shards: weights 1, 2, 3, ... */
    uint64_t wsum = (uint64_t)shards * (shards + 1) / 2, given = 0;
    for (unsigned s = 0; s < shards; s++) {
        d->shard_n[s] = s + 1 == shards ? n - given : n * (s + 1) / wsum;
        given += d->shard_n[s];
    }
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    sl_example_builder b;
    sl_example_builder_init(&b);
    uint64_t rng = 12345, id = 0;
    for (unsigned s = 0; s < shards; s++) {
        cr_assert_eq(sl_shard_path(d->shard_path[s], sizeof d->shard_path[s], d->dir, "train", s,
                                   shards),
                     SL_OK);
        sl_tfrecord_writer *w;
        cr_assert_eq(sl_tfrecord_writer_open(d->shard_path[s], SL_TFW_INDEX | SL_TFW_NOSYNC, &w),
                     SL_OK, "%s", sl_errmsg());
        for (uint64_t r = 0; r < d->shard_n[s]; r++, id++) {
            unsigned char *jpeg;
            unsigned long len;
            jpeg_of(tj, id, &rng, &jpeg, &len);
            int kind = bad ? bad[id] : PL_GOOD;
            static const char junk[] = "this is not an image, just some bytes";
            sl_image_example ex = {.image = jpeg, .image_len = len,
                                   .label = (int64_t)(id % 10) + label_offset,
                                   .format = "JPEG", .format_len = 4};
            if (kind == PL_BAD_TRUNCATED)
                ex.image_len = len * 6 / 10;
            if (kind == PL_BAD_NOT_JPEG) {
                ex.image = (const uint8_t *)junk;
                ex.image_len = sizeof junk;
            }
            const uint8_t *rec;
            size_t rlen;
            cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
            cr_assert_eq(sl_example_finish(&b, &rec, &rlen), SL_OK);
            cr_assert_eq(sl_tfrecord_writer_write(w, rec, rlen), SL_OK);
            d->total_bytes += rlen + 16;
            if (rlen + 16 > d->max_unit)
                d->max_unit = rlen + 16;
            tjFree(jpeg);
        }
        cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    }
    sl_example_builder_fini(&b);
    tjDestroy(tj);

    /* Flip one payload byte of each PL_BAD_CRC record in place. */
    if (bad) {
        id = 0;
        for (unsigned s = 0; s < shards; s++) {
            char idx_path[600];
            snprintf(idx_path, sizeof idx_path, "%s.idx", d->shard_path[s]);
            sl_index_entry *e;
            size_t ne;
            cr_assert_eq(sl_index_load(idx_path, &e, &ne), SL_OK);
            for (size_t r = 0; r < ne; r++, id++) {
                if (bad[id] != PL_BAD_CRC)
                    continue;
                FILE *f = fopen(d->shard_path[s], "r+b");
                cr_assert_not_null(f);
                long at = (long)(e[r].offset + 12 + (e[r].size - 16) / 2);
                fseek(f, at, SEEK_SET);
                int c = fgetc(f);
                fseek(f, at, SEEK_SET);
                fputc(c ^ 0x40, f);
                fclose(f);
            }
            free(e);
        }
    }

    sl_manifest m;
    sl_manifest_init(&m);
    m.label_offset = label_offset;
    m.num_classes = 10;
    sl_manifest_split sp = {.format = SL_FORMAT_TFRECORD, .records = n, .shards = shards};
    snprintf(sp.name, sizeof sp.name, "train");
    cr_assert_eq(sl_manifest_split_put(&m, &sp), SL_OK);
    cr_assert_eq(sl_manifest_save(d->dir, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_fini(&m);
}

void pl_dataset_free(pl_dataset *d)
{
    tu_rmrf(d->dir);
    free(d->dir);
    d->dir = NULL;
}

void pl_config(sl_pipeline_config *c, const pl_dataset *d)
{
    sl_pipeline_config init = SL_PIPELINE_CONFIG_INIT;
    *c = init;
    c->data = d->dir;
    c->height = 20;
    c->width = 24;
    c->batch = 16;
    c->readers = 2;
    c->workers = 2;
    c->block = 8;
    c->cycle = 3;
    c->shuffle_buffer = 100;
    c->seed = 7;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t pl_digest(const sl_batch *b)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &b->n, sizeof b->n);
    h = fnv(h, b->data, b->n * b->sample_bytes);
    h = fnv(h, b->labels, b->n * sizeof *b->labels);
    h = fnv(h, b->record_ids, b->n * sizeof *b->record_ids);
    return fnv(h, b->epochs, b->n * sizeof *b->epochs);
}

void pl_collect(sl_pipeline *p, pl_run *r, size_t max_batches, int keep_data)
{
    for (size_t k = 0; k < max_batches; k++) {
        sl_batch *b;
        int rc = sl_pipeline_next(p, &b);
        if (rc) {
            r->end_rc = rc;
            return;
        }
        cr_assert_eq(b->index, r->nb, "batch index %llu, expected %zu",
                     (unsigned long long)b->index, r->nb);
        r->digest = realloc(r->digest, (r->nb + 1) * sizeof *r->digest);
        r->bn = realloc(r->bn, (r->nb + 1) * sizeof *r->bn);
        /* + 1: an eval batch can be empty (its records all bad), and
         * realloc(p, 0) frees p */
        r->ids = realloc(r->ids, (r->ns + b->n + 1) * sizeof *r->ids);
        r->labels = realloc(r->labels, (r->ns + b->n + 1) * sizeof *r->labels);
        r->epochs = realloc(r->epochs, (r->ns + b->n + 1) * sizeof *r->epochs);
        cr_assert(r->digest && r->bn && r->ids && r->labels && r->epochs);
        r->digest[r->nb] = pl_digest(b);
        r->bn[r->nb] = b->n;
        memcpy(r->ids + r->ns, b->record_ids, b->n * sizeof *r->ids);
        memcpy(r->labels + r->ns, b->labels, b->n * sizeof *r->labels);
        memcpy(r->epochs + r->ns, b->epochs, b->n * sizeof *r->epochs);
        if (keep_data) {
            r->sample_bytes = b->sample_bytes;
            r->data = realloc(r->data, (r->ns + b->n + 1) * b->sample_bytes);
            cr_assert_not_null(r->data);
            memcpy(r->data + r->ns * b->sample_bytes, b->data, b->n * b->sample_bytes);
        }
        r->nb++;
        r->ns += b->n;
        sl_pipeline_release(p, b);
    }
}

void pl_run_config(const sl_pipeline_config *c, pl_run *r, int keep_data)
{
    sl_pipeline *p;
    memset(r, 0, sizeof *r);
    cr_assert_eq(sl_pipeline_create(c, &p), SL_OK, "%s", sl_errmsg());
    pl_collect(p, r, SIZE_MAX, keep_data);
    sl_pipeline_destroy(p);
}

void pl_run_free(pl_run *r)
{
    free(r->digest);
    free(r->bn);
    free(r->ids);
    free(r->labels);
    free(r->epochs);
    free(r->data);
    memset(r, 0, sizeof *r);
}

uint64_t *pl_read_order(const pl_dataset *d, const sl_pipeline_config *c, size_t *n)
{
    sl_source_set src;
    cr_assert_eq(sl_source_set_open(d->dir, "train", 0, 1, &src), SL_OK, "%s", sl_errmsg());
    sl_order_config oc = {.src = &src, .mode = SL_SHUFFLE_NONE, .cycle = c->cycle,
                          .block = c->block, .shuffle_files = 1, .seed = c->seed, .epochs = 1};
    sl_order *o;
    cr_assert_eq(sl_order_create(&oc, &o), SL_OK);
    uint64_t *ids = malloc((src.total ? src.total : 1) * sizeof *ids);
    cr_assert_not_null(ids);
    sl_read_unit u;
    size_t pos = 0;
    while (sl_order_next_unit(o, &u) == SL_OK)
        for (uint32_t i = 0; i < u.nrec; i++)
            ids[pos++] = src.shards[u.shard].first_id + u.rec + i;
    sl_order_destroy(o);
    sl_source_set_close(&src);
    *n = pos;
    return ids;
}

/* Digest of a whole run. */
static uint64_t run_digest(const pl_run *r)
{
    return fnv(0xcbf29ce484222325ull, r->digest, r->nb * sizeof *r->digest);
}

/* ------------------------------------------------------- determinism */

static const unsigned thread_sets[3][2] = {{1, 1}, {2, 3}, {4, 2}}; /* readers, workers */

Test(pipeline, determinism_across_threads_each_mode)
{
    pl_dataset d;
    pl_make_dataset(&d, 300, 5, 0, NULL);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_BUFFER, SL_SHUFFLE_GLOBAL, SL_SHUFFLE_NONE};
    uint64_t per_mode[3];
    for (int m = 0; m < 3; m++) {
        uint64_t first = 0;
        for (int t = 0; t < 3; t++) {
            sl_pipeline_config c;
            pl_config(&c, &d);
            c.shuffle = modes[m];
            c.readers = thread_sets[t][0];
            c.workers = thread_sets[t][1];
            pl_run r;
            pl_run_config(&c, &r, 0);
            cr_assert_eq(r.end_rc, SL_EOF, "mode %d threads %d: %s", m, t, sl_errmsg());
            cr_assert_eq(r.ns, 300);
            cr_assert_eq(r.nb, (300 + 15) / 16);
            uint64_t h = run_digest(&r);
            if (t == 0)
                first = h;
            else
                cr_assert_eq(h, first, "mode %d: readers %u workers %u differ from 1/1", m,
                             thread_sets[t][0], thread_sets[t][1]);
            pl_run_free(&r);
        }
        per_mode[m] = first;
    }
    cr_assert_neq(per_mode[0], per_mode[1]);
    cr_assert_neq(per_mode[0], per_mode[2]);
    cr_assert_neq(per_mode[1], per_mode[2]);
    pl_dataset_free(&d);
}

/* Shards are read through a read-only mapping by default (reader.c);
 * SLUICE_READ=pread reads them with pread. Same batches, byte for byte, in
 * every shuffle mode (GLOBAL reads single records, the others blocks). */
Test(pipeline, mapped_and_pread_reads_agree)
{
    pl_dataset d;
    pl_make_dataset(&d, 150, 3, 0, NULL);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_BUFFER, SL_SHUFFLE_GLOBAL, SL_SHUFFLE_NONE};
    for (int m = 0; m < 3; m++) {
        sl_pipeline_config c;
        pl_config(&c, &d);
        c.shuffle = modes[m];
        c.epochs = 2;
        pl_run mapped, plain;
        pl_run_config(&c, &mapped, 1);
        cr_assert_eq(setenv("SLUICE_READ", "pread", 1), 0);
        pl_run_config(&c, &plain, 1); /* the variable is read at create */
        cr_assert_eq(unsetenv("SLUICE_READ"), 0);
        cr_assert_eq(mapped.end_rc, SL_EOF, "mode %d: %s", m, sl_errmsg());
        cr_assert_eq(plain.end_rc, SL_EOF, "mode %d", m);
        cr_assert_eq(mapped.ns, 300);
        cr_assert_eq(plain.ns, 300);
        cr_assert_eq(run_digest(&mapped), run_digest(&plain), "mode %d", m);
        cr_assert_eq(memcmp(mapped.data, plain.data, mapped.ns * mapped.sample_bytes), 0);
        pl_run_free(&mapped);
        pl_run_free(&plain);
    }
    /* and the default run did map (regular files in the test's tmpdir) */
    sl_pipeline_config c;
    pl_config(&c, &d);
    sl_pipeline *p;
    sl_batch *b;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_pipeline_next(p, &b), SL_OK, "%s", sl_errmsg());
    int mapped_shards = 0;
    for (size_t i = 0; i < p->src.n; i++)
        mapped_shards += __atomic_load_n(&p->srcs[i], __ATOMIC_ACQUIRE) && p->maps[i].base;
    cr_assert_gt(mapped_shards, 0);
    sl_pipeline_release(p, b);
    sl_pipeline_destroy(p);
    pl_dataset_free(&d);
}

Test(pipeline, determinism_across_threads_each_layout_and_seed)
{
    pl_dataset d;
    pl_make_dataset(&d, 200, 4, 0, NULL);
    const sl_layout layouts[] = {SL_LAYOUT_NHWC_U8, SL_LAYOUT_NHWC_F32, SL_LAYOUT_NCHW_F32};
    for (int l = 0; l < 3; l++) {
        uint64_t first = 0;
        for (int t = 0; t < 3; t += 2) {
            sl_pipeline_config c;
            pl_config(&c, &d);
            c.layout = layouts[l];
            c.readers = thread_sets[t][0];
            c.workers = thread_sets[t][1];
            pl_run r;
            pl_run_config(&c, &r, 0);
            cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
            if (t == 0)
                first = run_digest(&r);
            else
                cr_assert_eq(run_digest(&r), first, "layout %d", l);
            pl_run_free(&r);
        }
    }
    /* Another seed: another stream. */
    sl_pipeline_config c;
    pl_run a, b;
    pl_config(&c, &d);
    pl_run_config(&c, &a, 0);
    c.seed = 8;
    pl_run_config(&c, &b, 0);
    cr_assert_neq(run_digest(&a), run_digest(&b));
    /* Same record stream but not the same order either. */
    cr_assert_neq(memcmp(a.ids, b.ids, a.ns * sizeof *a.ids), 0);
    pl_run_free(&a);
    pl_run_free(&b);
    pl_dataset_free(&d);
}

/* ----------------------------------------------------------- coverage */

Test(pipeline, none_eval_reads_every_record_once_in_order)
{
    pl_dataset d;
    pl_make_dataset(&d, 250, 5, 1, NULL); /* stored labels are id % 10 + 1 */
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.shuffle = SL_SHUFFLE_NONE;
    c.transform = SL_TRANSFORM_EVAL;
    pl_run r;
    pl_run_config(&c, &r, 0);
    cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
    cr_assert_eq(r.ns, 250);
    cr_assert_eq(r.nb, 16);
    cr_assert_eq(r.bn[15], 250 - 15 * 16, "last batch holds the remainder");

    /* Reference: the read order itself (sl_order over the same shards). */
    size_t norder;
    uint64_t *order = pl_read_order(&d, &c, &norder);
    for (size_t pos = 0; pos < norder; pos++)
        cr_assert_eq(r.ids[pos], order[pos], "sample %zu", pos);
    cr_assert_eq(norder, 250);
    free(order);

    uint8_t seen[250] = {0};
    for (size_t i = 0; i < r.ns; i++) {
        cr_assert_lt(r.ids[i], 250);
        cr_assert_eq(seen[r.ids[i]]++, 0, "id %llu twice", (unsigned long long)r.ids[i]);
        cr_assert_eq(r.labels[i], (int32_t)(r.ids[i] % 10), "label_offset from dataset.json");
        cr_assert_eq(r.epochs[i], 0);
    }
    pl_run_free(&r);

    /* An explicit label_offset wins over the manifest's. */
    c.label_offset = 0;
    pl_run_config(&c, &r, 0);
    for (size_t i = 0; i < r.ns; i++)
        cr_assert_eq(r.labels[i], (int32_t)(r.ids[i] % 10) + 1);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

/* Every id exactly once per epoch, with the right epoch tag. */
static void assert_epochs_cover(const pl_run *r, uint64_t n, int epochs)
{
    cr_assert_eq(r->ns, n * (uint64_t)epochs);
    uint8_t *seen = calloc(n * (uint64_t)epochs, 1);
    cr_assert_not_null(seen);
    for (size_t i = 0; i < r->ns; i++) {
        cr_assert_lt(r->ids[i], n);
        cr_assert(r->epochs[i] >= 0 && r->epochs[i] < epochs);
        cr_assert_eq(seen[(uint64_t)r->epochs[i] * n + r->ids[i]]++, 0, "id %llu epoch %d twice",
                     (unsigned long long)r->ids[i], r->epochs[i]);
        cr_assert_eq(r->labels[i], (int32_t)(r->ids[i] % 10));
    }
    free(seen);
}

Test(pipeline, buffer_and_global_permute_each_epoch)
{
    pl_dataset d;
    pl_make_dataset(&d, 230, 5, 0, NULL);
    const sl_shuffle_mode modes[] = {SL_SHUFFLE_BUFFER, SL_SHUFFLE_GLOBAL};
    for (int m = 0; m < 2; m++) {
        sl_pipeline_config c;
        pl_config(&c, &d);
        c.shuffle = modes[m];
        c.epochs = 2;
        c.drop_remainder = 0;
        pl_run r;
        pl_run_config(&c, &r, 0);
        cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
        assert_epochs_cover(&r, 230, 2);
        cr_assert_eq(r.nb, (460 + 15) / 16);
        /* Shuffled: not the file order within the first epoch. */
        size_t in_order = 0;
        for (size_t i = 1; i < 230; i++)
            in_order += r.ids[i] == r.ids[i - 1] + 1;
        cr_assert_lt(in_order, 115, "mode %d: %zu of 229 neighbours consecutive", m, in_order);
        pl_run_free(&r);
    }
    pl_dataset_free(&d);
}

Test(pipeline, drop_remainder)
{
    pl_dataset d;
    pl_make_dataset(&d, 100, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.batch = 16;
    c.epochs = 2;
    c.drop_remainder = 1;
    pl_run r;
    pl_run_config(&c, &r, 0);
    cr_assert_eq(r.end_rc, SL_EOF);
    cr_assert_eq(r.nb, 200 / 16);
    cr_assert_eq(r.ns, 200 / 16 * 16);
    for (size_t i = 0; i < r.nb; i++)
        cr_assert_eq(r.bn[i], 16);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

Test(pipeline, epoch_boundary_is_fused)
{
    pl_dataset d;
    pl_make_dataset(&d, 120, 3, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.shuffle_buffer = 1000; /* bigger than an epoch */
    c.epochs = 3;
    pl_run r;
    pl_run_config(&c, &r, 0);
    cr_assert_eq(r.end_rc, SL_EOF, "%s", sl_errmsg());
    assert_epochs_cover(&r, 120, 3);
    /* Issue 38 item 5: a buffer that holds a whole epoch filled from many
     * epochs at once (an "epoch" of 310 samples held 216 distinct images);
     * it takes an epoch at a time now (the epoch barrier), so positions
     * e*120 .. e*120+119 are epoch e's 120 records, in an order that is not
     * the file order and not the last epoch's. */
    for (size_t i = 0; i < r.ns; i++)
        cr_assert_eq(r.epochs[i], (int32_t)(i / 120), "sample %zu is of epoch %d", i,
                     r.epochs[i]);
    size_t in_order = 0, same = 0;
    for (size_t i = 0; i < 120; i++) {
        in_order += r.ids[i] == i;
        same += r.ids[i] == r.ids[120 + i];
    }
    cr_assert_lt(in_order, 20, "shuffled");
    cr_assert_lt(same, 20, "reshuffled each epoch");
    sl_pipeline *p;
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.shuffle_buffer, 120, "the buffer holds an epoch");
    sl_pipeline_destroy(p);
    /* the same batches whatever the threads, and whatever the buffer
     * beyond an epoch (the epoch barrier decides, not the size) */
    pl_run g;
    c.readers = 3;
    c.workers = 4;
    c.prefetch = 5;
    c.shuffle_buffer = 120;
    pl_run_config(&c, &g, 0);
    cr_assert_eq(g.nb, r.nb);
    for (size_t i = 0; i < r.nb; i++)
        cr_assert_eq(g.digest[i], r.digest[i], "batch %zu", i);
    pl_run_free(&g);
    pl_run_free(&r);

    /* A smaller buffer is fused with the repeat: it runs into the next
     * epoch before draining (tf.data's repeat().shuffle(N)). */
    c.shuffle = SL_SHUFFLE_BUFFER;
    c.shuffle_buffer = 40;
    pl_run_config(&c, &r, 0);
    assert_epochs_cover(&r, 120, 3);
    size_t first_e1 = SIZE_MAX, last_e0 = 0;
    for (size_t i = 0; i < r.ns; i++) {
        if (r.epochs[i] == 1 && first_e1 == SIZE_MAX)
            first_e1 = i;
        if (r.epochs[i] == 0)
            last_e0 = i;
    }
    cr_assert_lt(first_e1, last_e0, "epoch 1 starts (%zu) before epoch 0 ends (%zu)", first_e1,
                 last_e0);
    cr_assert_geq(first_e1, 120 - 40, "at most a buffer before the boundary");
    pl_run_free(&r);
    pl_dataset_free(&d);
}

/* ---------------------------------------------------------- budgets */

Test(pipeline, byte_budgets)
{
    pl_dataset d;
    pl_make_dataset(&d, 200, 4, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    uint64_t mean = d.total_bytes / d.n;
    c.shuffle_buffer = 150;
    c.shuffle_bytes = 20 * mean + mean / 2; /* room for 20 records */
    c.block = 4;
    c.read_window_bytes = 3 * 4 * d.max_unit; /* about 3 units */
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
    pl_run r = {0};
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_EOF);
    sl_pipeline_stats st;
    cr_assert_eq(sl_pipeline_stats_get(p, &st), SL_OK);
    cr_assert_eq(st.shuffle_buffer, 20);
    cr_assert_eq(st.records_per_epoch, 200);
    uint64_t peak = sl_pipeline_window_peak(p);
    cr_assert_gt(peak, 0);
    cr_assert_leq(peak, c.read_window_bytes, "window peak %llu > %llu", (unsigned long long)peak,
                  (unsigned long long)c.read_window_bytes);
    sl_pipeline_destroy(p);
    assert_epochs_cover(&r, 200, 1);
    pl_run_free(&r);

    /* A window smaller than one unit still makes progress (one unit at a time). */
    c.read_window_bytes = 1;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK);
    pl_collect(p, &r, SIZE_MAX, 0);
    cr_assert_eq(r.end_rc, SL_EOF);
    cr_assert_leq(sl_pipeline_window_peak(p), 4 * d.max_unit);
    sl_pipeline_destroy(p);
    assert_epochs_cover(&r, 200, 1);
    pl_run_free(&r);
    pl_dataset_free(&d);
}

/* --------------------------------------------------------- transforms */

Test(pipeline, transform_paths)
{
    pl_dataset d;
    pl_make_dataset(&d, 64, 2, 0, NULL);
    sl_pipeline_config c;
    pl_config(&c, &d);
    c.height = 17;
    c.width = 23;
    const size_t px = 17 * 23;
    for (int t = 0; t < 2; t++) {
        c.transform = t ? SL_TRANSFORM_EVAL : SL_TRANSFORM_TRAIN;
        pl_run u8, nhwc, nchw;
        c.layout = SL_LAYOUT_NHWC_U8;
        pl_run_config(&c, &u8, 1);
        c.layout = SL_LAYOUT_NHWC_F32;
        pl_run_config(&c, &nhwc, 1);
        c.layout = SL_LAYOUT_NCHW_F32;
        pl_run_config(&c, &nchw, 1);
        cr_assert_eq(u8.ns, 64);
        cr_assert_eq(u8.sample_bytes, px * 3);
        cr_assert_eq(nchw.sample_bytes, px * 3 * 4);
        cr_assert_eq(memcmp(u8.ids, nchw.ids, 64 * sizeof *u8.ids), 0);
        for (size_t s = 0; s < 64; s++) {
            const uint8_t *a = u8.data + s * px * 3;
            const float *f = (const float *)(nhwc.data + s * px * 12);
            const float *g = (const float *)(nchw.data + s * px * 12);
            for (size_t i = 0; i < px; i++)
                for (int ch = 0; ch < 3; ch++) {
                    float want = (a[i * 3 + ch] - c.mean[ch]) / c.std[ch];
                    /* The f32 layouts normalize the unrounded resized
                     * value (pipeline/image/resample.c), the u8 layout rounds it:
                     * up to half a level apart, 0.5/std after normalizing. */
                    float tol = 0.5f / c.std[ch] + 1e-4f;
                    cr_assert(fabsf(f[i * 3 + ch] - want) <= tol, "nhwc sample %zu", s);
                    cr_assert(fabsf(g[(size_t)ch * px + i] - want) <= tol, "nchw sample %zu", s);
                }
        }
        pl_run_free(&u8);
        pl_run_free(&nhwc);
        pl_run_free(&nchw);
    }

    /* Flip: with flip on, each train sample is the flip-off sample or its
     * mirror (the flip draw comes after the crop's), and both occur. */
    c.transform = SL_TRANSFORM_TRAIN;
    c.layout = SL_LAYOUT_NHWC_U8;
    pl_run on, off;
    c.flip = 1;
    pl_run_config(&c, &on, 1);
    c.flip = 0;
    pl_run_config(&c, &off, 1);
    int same = 0, mirrored = 0;
    for (size_t s = 0; s < 64; s++) {
        const uint8_t *a = on.data + s * px * 3, *b = off.data + s * px * 3;
        int eq = memcmp(a, b, px * 3) == 0, mir = 1;
        for (int y = 0; y < 17 && mir; y++)
            for (int x = 0; x < 23 && mir; x++)
                mir = memcmp(a + ((size_t)y * 23 + x) * 3, b + ((size_t)y * 23 + 22 - x) * 3,
                             3) == 0;
        cr_assert(eq || mir, "sample %zu neither equal nor mirrored", s);
        same += eq && !mir;
        mirrored += mir && !eq;
    }
    cr_assert_gt(same, 5);
    cr_assert_gt(mirrored, 5);
    pl_run_free(&on);
    pl_run_free(&off);

    /* Train and eval differ. */
    pl_run tr, ev;
    c.transform = SL_TRANSFORM_TRAIN;
    pl_run_config(&c, &tr, 1);
    c.transform = SL_TRANSFORM_EVAL;
    pl_run_config(&c, &ev, 1);
    cr_assert_neq(memcmp(tr.data, ev.data, 64 * px * 3), 0);
    pl_run_free(&tr);
    pl_run_free(&ev);
    pl_dataset_free(&d);
}

/*
 * pipeline/memory.c - what a pipeline holds, in bytes, from its config and
 * its index files; the check of cfg.memory_budget at create; and the fit
 * that shrinks the settings a caller left open (issue 43 item 3: `sluice
 * train / eval / profile --memory-budget`, sluice.Pipeline(memory_budget=)).
 *
 * DESIGN
 *   Each part is a bound computed the way the stage allocates (the files
 *   named), with the record sizes of the index (mean and largest framed
 *   record: every shard has an index, loaded or built by the scan create
 *   would make, so record sizes are always known). What the index does not
 *   know is an image's pixel size: the decoder's scratch is bounded through
 *   max_pixels instead (below).
 *
 *   unit      block records (1 under shuffle global: a record a unit) of the
 *             largest size: U = block x max_record (order.c's units).
 *   read window  (reader.c) max(read_window, U): units enter the window
 *             while it holds less than read_window bytes, or one larger
 *             unit alone. Units read by pread (memory_budget set, or
 *             SLUICE_READ=pread) or fetched over HTTP own a buffer, and
 *             their recycled buffers wait in a pool of at most read_window
 *             bytes: twice that. A mapped unit is a view of the shard's
 *             mapping (its populated pages count in RSS while mapped, and
 *             stay: why a budget turns the mapping off, pipeline.h).
 *   shuffle buffer  (pipeline.c's DESIGN, "Queues") the buffer holds record
 *             handles (8 bytes each); a record keeps its unit alive until
 *             the unit's last record is decoded. A unit's block records
 *             leave the buffer after ~cap pops each, so the units alive
 *             hold about H(block) (harmonic number: 3.4 for 16) x the
 *             buffer's records' bytes (mean record) in expectation, at most
 *             block x; and never more than this rank's data (an epoch, the
 *             epoch barrier's case, plus one window of the next). The
 *             estimate is the expectation, capped so.
 *   remote in flight  (reader_remote.c) the units in flight are in the
 *             window already; each transfer adds curl's receive buffer
 *             (CURL_MAX_WRITE_SIZE, 16 KiB) and its connection's TLS state
 *             (OpenSSL: about 40 KiB): 64 KiB a transfer, readers x
 *             inflight transfers.
 *   decode workers  (map.c, decode.c, decode_yuv.c) each worker: a record
 *             buffer (max_record, for refills), the unit its record keeps
 *             alive (U: in the window or the buffer's count only while
 *             there), and the decoder's scratch: the crop's planes at the
 *             smallest DCT scale that covers the output, < 2 x the output
 *             per side unless the crop is more than 8x the output per side,
 *             then W/8 x H/8 of the image: 3 bytes x (4 x oh x ow +
 *             max_pixels / 64) bounds both (max_pixels bounds W x H; the
 *             index has no image sizes).
 *   prefetch ring  (pipeline.c's alloc_ring, load_*.c) prefetch slots of
 *             batch samples (the layout's bytes) and their label, record id
 *             and epoch (16 bytes a sample). With a device the host slots
 *             are pinned, same size.
 *   index     (source.c, order.c) 16 bytes an index entry of every shard
 *             opened, and shuffle global's permutation, 8 bytes a record.
 *   evaluation  (sl_memory_fit.eval_beside: sluice train) each replica
 *             evaluates after an epoch through a second pipeline while its
 *             training pipeline lives (train/loop/replica.c), with the same
 *             workers, prefetch and read window and no shuffle buffer: that
 *             pipeline's own estimate over the evaluated split
 *             (sl_memory_fit.eval_data / eval_split: its record sizes and
 *             index, which may be far from the training split's), beside
 *             each pipeline; the check its create makes (memory_budget) is
 *             then one the fit has already passed, before the first step.
 *             Without the split named, the estimate less its shuffle buffer
 *             stands in.
 *   Not counted: the process itself (code, libraries, the model and its
 *   activations in train), libjpeg's per-row buffers (a few rows of the
 *   image's width), the GPU's memory.
 *
 *   The fit shrinks, in order, what costs the least speed: prefetch (a
 *   ring deeper than the workers need only smooths), remote requests in
 *   flight (latency hidden less), workers (decode slower), the read window
 *   (fewer units read ahead). The shuffle buffer, the batch and the image
 *   size change what a run computes, so they are never shrunk: they are
 *   named, with the options that change them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/graph_int.h"
#include "records/bytesrc.h"

/* Per transfer in flight: curl's receive buffer and a TLS connection. */
#define SL_MEM_PER_TRANSFER ((uint64_t)64 << 10)
/* The smallest read window the fit goes down to (one unit if larger). */
#define SL_MEM_MIN_WINDOW ((uint64_t)1 << 20)
/* Bytes per sample beside its pixels: label (4), record id (8), epoch (4). */
#define SL_MEM_PER_SAMPLE 16u

static const char *const part_names[SL_MEM_NPARTS] = {
    "read window", "shuffle buffer", "remote in flight", "decode workers", "prefetch ring",
    "index",
};
static const char *const part_keys[SL_MEM_NPARTS] = {
    "read_window", "shuffle", "remote", "decode", "ring", "index",
};

const char *sl_mem_part_name(sl_mem_part part)
{
    return (unsigned)part < SL_MEM_NPARTS ? part_names[part] : "?";
}

const char *sl_mem_part_key(sl_mem_part part)
{
    return (unsigned)part < SL_MEM_NPARTS ? part_keys[part] : "?";
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The estimate of c (zeros resolved: sl_pipeline_config_defaults) over the
 * opened sources s, reading with io (resolved); pread: units own buffers. */
static void estimate(const sl_pipeline_config *c, const sl_source_set *s, const sl_io_opts *io,
                     int pread_reads, sl_pipeline_memory *m)
{
    memset(m, 0, sizeof *m);
    int split = c->rank_split == SL_SPLIT_RECORDS && c->world > 1;
    m->remote = s->n && s->remote; /* source.c: from the dataset */
    m->mapped = !m->remote && !pread_reads;
    m->readers = c->readers;
    m->workers = c->workers;
    m->prefetch = c->prefetch;
    m->inflight = m->remote ? (io->inflight ? io->inflight : 1) : 0;
    m->records = s->total;
    m->data_bytes = s->total_bytes;
    m->mean_record = s->total ? s->total_bytes / s->total : 0;
    m->max_record = s->max_record;
    uint64_t share = sl_split_samples(s->total, 0, split ? c->world : 1);
    m->shuffle_records = sl_effective_shuffle_cap(c, s);
    if (c->shuffle == SL_SHUFFLE_BUFFER && share && m->shuffle_records > share)
        m->shuffle_records = share; /* the epoch barrier's buffer (pipeline.c) */

    uint64_t block = c->shuffle == SL_SHUFFLE_GLOBAL ? 1 : c->block;
    uint64_t unit = mul_sat(block, s->max_record);
    uint64_t window = c->read_window_bytes > unit ? c->read_window_bytes : unit;
    m->read_window = c->read_window_bytes;
    m->part[SL_MEM_READ_WINDOW] = m->mapped ? window : add_sat(window, c->read_window_bytes);

    if (m->shuffle_records > 1) {
        double h = 0;
        for (uint64_t i = 1; i <= block && i <= 1u << 20; i++)
            h += 1.0 / (double)i;
        double held = h * (double)m->shuffle_records * (double)m->mean_record;
        uint64_t data = split ? (s->total_bytes + c->world - 1) / c->world : s->total_bytes;
        uint64_t cap = add_sat(data, window);
        uint64_t bytes = held >= (double)cap ? cap : (uint64_t)held;
        m->part[SL_MEM_SHUFFLE] = add_sat(bytes, mul_sat(m->shuffle_records, 8));
    }
    m->part[SL_MEM_REMOTE] = mul_sat((uint64_t)m->readers * m->inflight, SL_MEM_PER_TRANSFER);

    uint64_t max_pixels = c->max_pixels ? c->max_pixels : SL_MAX_PIXELS_DEFAULT;
    uint64_t scratch = 3 * (4 * (uint64_t)c->height * (uint64_t)c->width + max_pixels / 64);
    uint64_t per_worker = add_sat(add_sat(s->max_record, m->mapped ? 0 : unit), scratch);
    m->part[SL_MEM_DECODE] = mul_sat(c->workers, per_worker);

    uint64_t sample = sl_sample_bytes(c->height, c->width, c->layout) + SL_MEM_PER_SAMPLE;
    m->part[SL_MEM_RING] = mul_sat(mul_sat(c->prefetch, c->batch), sample);

    uint64_t entries = 0;
    for (size_t i = 0; i < s->n; i++)
        entries += s->shards[i].nrec;
    uint64_t index = mul_sat(entries, sizeof(sl_index_entry));
    if (c->shuffle == SL_SHUFFLE_GLOBAL)
        index = add_sat(index, mul_sat(s->world_total ? s->world_total : s->total, 8));
    m->part[SL_MEM_INDEX] = index;

    for (int i = 0; i < SL_MEM_NPARTS; i++)
        m->total = add_sat(m->total, m->part[i]);
}

/* Open cfg's sources as create does (its own io settings). */
static int open_sources(const sl_pipeline_config *c, const sl_io_opts *io, sl_source_set *s)
{
    int split = c->rank_split == SL_SPLIT_RECORDS;
    const sl_io_opts *was = sl_io_thread_use(io);
    int rc = sl_source_set_open_policy(c->data, c->split, split ? 0 : c->rank,
                                       split ? 1 : c->world, c->on_error, s);
    sl_io_thread_use(was);
    return rc;
}

/* c = cfg resolved as create resolves it (budget: its memory_budget when
 * not 0), io resolved, its sources opened into s. */
static int prepare(const sl_pipeline_config *cfg, uint64_t budget, sl_pipeline_config *c,
                   sl_io_opts *io, sl_source_set *s)
{
    if (!cfg->data || !*cfg->data || !cfg->split)
        return sl_fail(SL_EINVAL, "sl_pipeline_memory: data: no dataset path");
    *c = *cfg;
    if (budget)
        c->memory_budget = budget;
    sl_pipeline_config_defaults(c);
    memset(s, 0, sizeof *s);
    int rc = sl_io_resolve(cfg->io, io);
    return rc ? rc : open_sources(c, io, s);
}

int sl_pipeline_memory_estimate(const sl_pipeline_config *cfg, sl_pipeline_memory *out)
{
    static const char fn[] = "sl_pipeline_memory_estimate";
    if (!cfg || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    int rc = sl_check_config_size(fn, cfg->size, sizeof *cfg);
    if (rc)
        return rc;
    sl_pipeline_config c;
    sl_io_opts io;
    sl_source_set s;
    if ((rc = prepare(cfg, 0, &c, &io, &s)))
        return rc;
    estimate(&c, &s, &io, sl_pipeline_reads_by_pread(&c), out);
    sl_source_set_close(&s);
    return SL_OK;
}

/* "64 MiB", "1.5 GiB", "512 KiB", "100 B". */
static const char *human(uint64_t b, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : v < 10 ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

/* "read window 64 MiB, shuffle buffer 310 MiB (10000 records), ..." */
static void describe_parts(const sl_pipeline_memory *m, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < SL_MEM_NPARTS && k < cap; i++) {
        char h[32], extra[80] = "";
        if (i == SL_MEM_REMOTE && !m->remote)
            continue;
        if (i == SL_MEM_SHUFFLE)
            snprintf(extra, sizeof extra, " (%llu records of %llu B mean)",
                     (unsigned long long)m->shuffle_records,
                     (unsigned long long)m->mean_record);
        else if (i == SL_MEM_DECODE)
            snprintf(extra, sizeof extra, " (%u)", m->workers);
        else if (i == SL_MEM_RING)
            snprintf(extra, sizeof extra, " (%u batches)", m->prefetch);
        else if (i == SL_MEM_REMOTE)
            snprintf(extra, sizeof extra, " (%u x %u requests)", m->readers, m->inflight);
        int n = snprintf(buf + k, cap - k, "%s%s %s%s", k ? ", " : "", part_names[i],
                         human(m->part[i], h, sizeof h), extra);
        k += n > 0 ? (size_t)n : 0;
    }
}

int sl_pipeline_memory_check(const sl_pipeline *p)
{
    const sl_pipeline_config *c = &p->cfg;
    if (!c->memory_budget)
        return SL_OK;
    sl_pipeline_memory m;
    estimate(c, &p->src, &p->io, 1, &m);
    if (m.total <= c->memory_budget)
        return SL_OK;
    char parts[512], h[32], t[32];
    describe_parts(&m, parts, sizeof parts);
    return sl_fail(SL_EINVAL, "sl_pipeline_create: memory_budget %s: the pipeline needs %s (%s); "
                   "sl_pipeline_memory_fit shrinks what it may", human(c->memory_budget, h,
                   sizeof h), human(m.total, t, sizeof t), parts);
}

/* One shrink step of fit, in order; 0 when nothing is left to shrink. */
static int shrink(sl_pipeline_config *c, const sl_memory_fit *f, const sl_pipeline_memory *m,
                  sl_io_opts *io, unsigned min_prefetch)
{
    if (!(f->fixed & SL_MEM_FIXED_PREFETCH) && c->prefetch > min_prefetch) {
        c->prefetch--;
        return 1;
    }
    if (m->remote && f->io && !(f->fixed & SL_MEM_FIXED_INFLIGHT) && io->inflight > 1) {
        io->inflight--;
        return 1;
    }
    if (!(f->fixed & SL_MEM_FIXED_WORKERS) && c->workers > 1) {
        c->workers--;
        return 1;
    }
    uint64_t block = c->shuffle == SL_SHUFFLE_GLOBAL ? 1 : c->block;
    uint64_t floor = mul_sat(block, m->max_record);
    if (floor < SL_MEM_MIN_WINDOW)
        floor = SL_MEM_MIN_WINDOW;
    if (!(f->fixed & SL_MEM_FIXED_READ_WINDOW) && c->read_window_bytes > floor) {
        c->read_window_bytes = c->read_window_bytes / 2 > floor ? c->read_window_bytes / 2 : floor;
        return 1;
    }
    return 0;
}

/* What could not shrink further, for the refusal. */
static void describe_fixed(const sl_pipeline_config *c, const sl_memory_fit *f,
                           const sl_pipeline_memory *m, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = '\0';
#define ADD(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(buf + k, k < cap ? cap - k : 0, __VA_ARGS__);                           \
        k += n_ > 0 ? (size_t)n_ : 0;                                                              \
    } while (0)
    if (m->shuffle_records > 1)
        ADD("the shuffle buffer of %llu records (a smaller --shuffle buffer:N, or shuffle "
            "none/global)", (unsigned long long)m->shuffle_records);
    ADD("%sthe batch of %u at %dx%d (%zu bytes a sample)", k ? ", " : "", c->batch, c->height,
        c->width, sl_sample_bytes(c->height, c->width, c->layout));
    if (f->fixed & SL_MEM_FIXED_PREFETCH)
        ADD(", prefetch %u as given", c->prefetch);
    if (f->fixed & SL_MEM_FIXED_WORKERS)
        ADD(", %u workers as given", c->workers);
    if (m->remote && (f->fixed & SL_MEM_FIXED_INFLIGHT))
        ADD(", %u requests in flight as given", m->inflight);
    if (f->fixed & SL_MEM_FIXED_READ_WINDOW)
        ADD(", the read window as given");
#undef ADD
}

/* m->eval, the evaluation pipeline beside a pipeline of c (whose estimate m
 * is): with the evaluated split opened (es not NULL), its own estimate at c's
 * shrunk settings (workers, prefetch, read window, requests in flight);
 * else c's estimate less its shuffle buffer, the training split's record
 * sizes standing in. 0 without eval_beside. Returns total + eval. */
static uint64_t fit_bytes(const sl_memory_fit *f, const sl_pipeline_config *c,
                          const sl_io_opts *io, const sl_pipeline_config *ec,
                          const sl_io_opts *eio, const sl_source_set *es, sl_pipeline_memory *m)
{
    m->eval = 0;
    if (f->eval_beside && es) {
        sl_pipeline_config e = *ec;
        sl_io_opts eo = *eio;
        sl_pipeline_memory em;
        e.workers = c->workers;
        e.prefetch = c->prefetch;
        e.read_window_bytes = c->read_window_bytes;
        eo.inflight = io->inflight;
        estimate(&e, es, &eo, 1, &em);
        m->eval = em.total;
    } else if (f->eval_beside) {
        m->eval = m->total - m->part[SL_MEM_SHUFFLE];
    }
    return add_sat(m->total, m->eval);
}

int sl_pipeline_memory_fit(sl_pipeline_config *cfg, const sl_memory_fit *fit,
                           sl_pipeline_memory *out, char *what, size_t cap)
{
    static const char fn[] = "sl_pipeline_memory_fit";
    if (!cfg || !fit || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (what && cap)
        what[0] = '\0';
    int rc = sl_check_config_size(fn, cfg->size, sizeof *cfg);
    if (rc)
        return rc;
    const char *who = fit->cmd ? fit->cmd : fn;
    if (!fit->budget)
        return sl_fail(SL_EINVAL, "%s: a budget of 0 bytes", who);
    unsigned np = fit->pipelines ? fit->pipelines : 1;
    unsigned min_prefetch = fit->min_prefetch > 2 ? fit->min_prefetch : 2;
    sl_pipeline_config c;
    sl_io_opts io;
    sl_source_set s;
    /* memory_budget: what create checks, and reads by pread */
    uint64_t each = fit->budget / np ? fit->budget / np : 1;
    if ((rc = prepare(cfg, each, &c, &io, &s)))
        return rc;
    /* the evaluated split, opened as its pipeline will open it */
    sl_pipeline_config ecfg, ec;
    sl_io_opts eio;
    sl_source_set es, *esp = NULL;
    if (fit->eval_beside && fit->eval_data && fit->eval_split) {
        sl_pipeline_eval_config(cfg, fit->eval_data, fit->eval_split, &ecfg);
        if ((rc = prepare(&ecfg, each, &ec, &eio, &es))) {
            sl_source_set_close(&s);
            return sl_fail(rc, "%s: the evaluated split '%s': %s", who, fit->eval_split,
                           sl_errmsg());
        }
        esp = &es;
    }
    unsigned w0 = c.workers, p0 = c.prefetch, i0 = io.inflight;
    uint64_t r0 = c.read_window_bytes;
    uint64_t need;
    for (;;) {
        estimate(&c, &s, &io, 1, out);
        need = mul_sat(fit_bytes(fit, &c, &io, &ec, &eio, esp, out), np);
        if (need <= fit->budget || !shrink(&c, fit, out, &io, min_prefetch))
            break;
    }
    sl_source_set_close(&s);
    uint64_t eval_max = esp ? esp->max_record : 0;
    if (esp)
        sl_source_set_close(esp);
    if (need > fit->budget) {
        char parts[512], fixed[400], h[32], t[32], e[32], m[32], per[96] = "", ev[192] = "";
        describe_parts(out, parts, sizeof parts);
        describe_fixed(&c, fit, out, fixed, sizeof fixed);
        if (np > 1)
            snprintf(per, sizeof per, " (%u pipelines of %s)", np,
                     human(add_sat(out->total, out->eval), t, sizeof t));
        if (fit->eval_beside && esp)
            snprintf(ev, sizeof ev, "; beside each, an evaluation pipeline of %s over split "
                     "'%s', records up to %s (--eval-split none leaves it out)",
                     human(out->eval, e, sizeof e), fit->eval_split,
                     human(eval_max, m, sizeof m));
        else if (fit->eval_beside)
            snprintf(ev, sizeof ev, "; beside each, an evaluation pipeline of %s (--eval-split "
                     "none leaves it out)", human(out->eval, e, sizeof e));
        return sl_fail(SL_EINVAL, "%s %s: the input pipeline needs %s%s at the least: %s%s; "
                       "what cannot shrink: %s. Give a budget of %s or more, or a smaller "
                       "shuffle buffer, batch or image", who, human(fit->budget, h, sizeof h),
                       human(need, t, sizeof t), per, parts, ev, fixed, human(need, t, sizeof t));
    }
    /* what changed, in the fit's order */
    size_t k = 0;
#define SAID(...)                                                                                  \
    do {                                                                                           \
        if (what && k < cap) {                                                                     \
            int n_ = snprintf(what + k, cap - k, "%s", k ? ", " : "");                            \
            k += n_ > 0 ? (size_t)n_ : 0;                                                          \
            n_ = k < cap ? snprintf(what + k, cap - k, __VA_ARGS__) : 0;                           \
            k += n_ > 0 ? (size_t)n_ : 0;                                                          \
        }                                                                                          \
    } while (0)
    if (c.prefetch != p0)
        SAID("prefetch %u -> %u", p0, c.prefetch);
    if (out->remote && io.inflight != i0)
        SAID("requests in flight %u -> %u", i0, io.inflight);
    if (c.workers != w0)
        SAID("workers %u -> %u", w0, c.workers);
    if (c.read_window_bytes != r0) {
        char a[32], b[32];
        SAID("read window %s -> %s", human(r0, a, sizeof a), human(c.read_window_bytes, b,
                                                                  sizeof b));
    }
#undef SAID
    /* the settings into cfg: only what was shrunk moves off its zero */
    if (c.prefetch != p0 || cfg->prefetch)
        cfg->prefetch = c.prefetch;
    if (c.workers != w0 || cfg->workers)
        cfg->workers = c.workers;
    if (c.read_window_bytes != r0)
        cfg->read_window_bytes = c.read_window_bytes;
    if (out->remote && io.inflight != i0 && fit->io) {
        *fit->io = io;
        cfg->io = fit->io;
    }
    cfg->memory_budget = c.memory_budget;
    return SL_OK;
}

/*
 * records/convert_plan.c - everything sl_convert_run decides before and after
 * the workers run: the input permutation, the shard count, the plan file
 * that makes --resume safe, the scan of existing output, and the
 * dataset.json update. The threaded part is records/convert.c.
 *
 * Plan file "DIR/.NAME.plan" (text, written atomically before any shard):
 *
 *     sluice convert plan 1
 *     inputs 10000
 *     inputs_hash 5f0c...        FNV-1a 64 of (path, idx, label, size) per input,
 *                                 with the CRC-32C of the IDX pixels mixed in
 *     shuffle 1
 *     seed 42
 *     shards 4
 *     format tfrecord
 *     quality 95
 *     resize_short 0
 *     label_offset 0
 *     max_pixels 67108864        which images are skipped as too large
 *     classes_hash 1c2d...       FNV-1a 64 of the class names (image/class/text)
 *
 * These are exactly the parameters that decide which bytes land in which
 * shard; the thread count is not among them (output is the same for any).
 * A shard found under its final name with its index is therefore the shard
 * this run would write, when the plan matches. Once dataset.json is
 * updated the plan is renamed "DIR/.NAME.done", so "a plan file exists"
 * means "a conversion of this split is unfinished", and the done file
 * still says how the finished split was made: a --resume of a run that was
 * killed after it finished (kill -9 lands anywhere, also after the last
 * rename; tests/tools/test_kill9.c) finds nothing to do and succeeds.
 *
 * Resume (cfg->resume):
 *   - plan matches: a TFRecord shard is kept when its file and its .idx
 *     exist, the index parses and ends exactly at the end of the file; its
 *     inputs are not read again, its records/bytes come from the index and
 *     its skips are (inputs in the shard - records). Any other shard file
 *     is removed and rewritten. LMDB is one store built in NAME.lmdb.tmp and
 *     renamed at the end, so a killed LMDB run has nothing whole to keep:
 *     resume rebuilds it from scratch (unless NAME.lmdb is already final).
 *   - plan differs: SL_EINVAL naming the first parameter that changed.
 *   - no plan but a done file: read as the plan (all shards kept when it
 *     matches: nothing to do; the options changed: SL_EINVAL as above).
 *   - neither, but the split exists: SL_EEXIST (made otherwise).
 * Without resume, any finished output of the split is SL_EEXIST. Temp files
 * of this split (a killed run's) are removed once the run goes ahead.
 *
 * Threading: single-threaded (runs before the workers start and after they
 * are joined).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytesrc.h"
#include "records_int.h"
#include "wds.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.1.0"
#endif

#define CV_SHARD_BYTES ((uint64_t)128 << 20) /* target shard size when cfg->shards == 0 */
#define CV_IDX_ESTIMATE 1024u                 /* bytes per IDX image record (28x28 JPEG ~ 0.7-1 KB) */
#define CV_URL_ESTIMATE (110u << 10)          /* bytes per listed URL (size unknown: ImageNet's mean) */
#define CV_MAX_SHARDS 99999u                  /* five digits in NAME-00000-of-99999 */
#define CV_PLAN_MAX SL_CONVERT_PLAN_MAX

static const char *format_name(sl_format f)
{
    return f == SL_FORMAT_LMDB ? "lmdb" : f == SL_FORMAT_WDS ? "wds" : "tfrecord";
}

/* ------------------------------------------------------------- hashing */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    return fnv(h, le, 8);
}

static uint64_t inputs_hash(const sl_input_list *in)
{
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < in->n; i++) {
        const sl_input *it = &in->items[i];
        if (it->path)
            h = fnv(h, it->path, strlen(it->path));
        h = fnv(h, "", 1);
        h = fnv_u64(h, it->idx);
        h = fnv_u64(h, (uint64_t)it->label);
        h = fnv_u64(h, it->size);
        if (it->rec) /* a record's place in its shard (other sources hash as before) */
            h = fnv_u64(h, it->off);
    }
    if (in->idx_pixels) {
        size_t px = (size_t)in->idx_rows * in->idx_cols * in->n;
        h = fnv_u64(h, in->idx_rows);
        h = fnv_u64(h, in->idx_cols);
        h = fnv_u64(h, sl_crc32c(0, in->idx_pixels, px));
    }
    return h;
}

static uint64_t classes_hash(const char *const *names, uint32_t n)
{
    uint64_t h = fnv_u64(FNV_OFFSET, n);
    for (uint32_t i = 0; names && i < n; i++)
        h = fnv(h, names[i], strlen(names[i]) + 1);
    return h;
}

/* ------------------------------------------------------- permutation */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* order[pos] = input index. Fisher-Yates driven by splitmix64(seed); the
 * bound uses Lemire's multiply-shift (no modulo), so the permutation depends
 * on (n, seed) alone. */
static void permute(uint32_t *order, size_t n, uint64_t seed, int shuffle)
{
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    if (!shuffle)
        return;
    uint64_t s = seed;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(((unsigned __int128)splitmix64(&s) * i) >> 64);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

/* ------------------------------------------------------------ files */
/* Whole small file into a NUL-terminated malloc'd buffer. SL_ENOENT if absent. */
static int read_small(const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? SL_ENOENT
                               : sl_fail(SL_EIO, "sl_convert_run: %s: %s", path, strerror(errno));
    char *buf = malloc(CV_PLAN_MAX + 1);
    if (!buf) {
        fclose(f);
        return sl_fail(SL_ENOMEM, "sl_convert_run: %s: out of memory", path);
    }
    size_t n = fread(buf, 1, CV_PLAN_MAX, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return sl_fail(SL_EIO, "sl_convert_run: %s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    return SL_OK;
}

static int unlink_if_present(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return sl_fail(SL_EIO, "sl_convert_run: remove %s: %s", path, strerror(errno));
    return SL_OK;
}

/* rm -r of a temp LMDB environment (a flat directory: data.mdb, lock.mdb),
 * or of a task's private folder (records/convert_task.c). */
int sl_convert_remove_dir(const char *path)
{
    char **names, sub[4400];
    size_t n;
    int rc = sl_bytes_list(path, &names, &n);
    if (rc) { /* gone already, or a file: unlinked (no error when absent) */
        sl_clear_error();
        return unlink_if_present(path);
    }
    for (size_t i = 0; i < n && rc == SL_OK; i++) {
        if (snprintf(sub, sizeof sub, "%s/%s", path, names[i]) >= (int)sizeof sub)
            rc = sl_fail(SL_EINVAL, "sl_convert_run: %s/%s: path too long", path, names[i]);
        else
            rc = unlink_if_present(sub);
    }
    sl_bytes_names_free(names, n);
    if (rc == SL_OK && rmdir(path) != 0 && errno != ENOENT)
        rc = sl_fail(SL_EIO, "sl_convert_run: remove %s: %s", path, strerror(errno));
    return rc;
}

/* ------------------------------------------------------ output scan */
/* Does ent read "NAME-<digits>-of-<digits><suffix>" exactly? */
static int is_shard_file(const char *ent, const char *name, const char *suffix)
{
    size_t nl = strlen(name);
    if (strncmp(ent, name, nl) || ent[nl] != '-')
        return 0;
    const char *p = ent + nl + 1;
    if (!(*p >= '0' && *p <= '9'))
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (strncmp(p, "-of-", 4))
        return 0;
    p += 4;
    if (!(*p >= '0' && *p <= '9'))
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    return !strcmp(p, suffix);
}

/* Walk DIR for this split's files: *final gets the first finished output
 * (a shard or NAME.lmdb) or "" when none; with remove_tmp, temp files left
 * by a killed run (NAME-*.tfrecord.tmp, NAME-*.tfrecord.idx.tmp,
 * NAME.lmdb.tmp/) are removed. */
static int scan_outputs(const sl_convert_config *cfg, int remove_tmp, char *final, size_t cap)
{
    final[0] = '\0';
    char **names, lmdb[512], lmdb_tmp[520], path[4400];
    size_t nn;
    int rc = sl_bytes_list(cfg->out_dir, &names, &nn);
    if (rc)
        return sl_fail(SL_EIO, "sl_convert_run: open %s", sl_errmsg());
    snprintf(lmdb, sizeof lmdb, "%s.lmdb", cfg->name);
    snprintf(lmdb_tmp, sizeof lmdb_tmp, "%s.lmdb.tmp", cfg->name);
    for (size_t i = 0; i < nn && rc == SL_OK; i++) {
        char *n = names[i];
        size_t l = strlen(n);
        if (l && n[l - 1] == '/')
            n[l - 1] = 0; /* NAME.lmdb/, NAME.lmdb.tmp/ */
        if (!final[0] && (is_shard_file(n, cfg->name, ".tfrecord") ||
                          is_shard_file(n, cfg->name, ".tar") || !strcmp(n, lmdb)))
            snprintf(final, cap, "%s", n);
        if (!remove_tmp)
            continue;
        if (snprintf(path, sizeof path, "%s/%s", cfg->out_dir, n) >= (int)sizeof path) {
            rc = sl_fail(SL_EINVAL, "sl_convert_run: %s/%s: path too long", cfg->out_dir, n);
            break;
        }
        if (is_shard_file(n, cfg->name, ".tfrecord.tmp") || is_shard_file(n, cfg->name, ".tfrecord.idx.tmp") ||
            is_shard_file(n, cfg->name, ".tar.tmp") || is_shard_file(n, cfg->name, ".tar.idx.tmp"))
            rc = unlink_if_present(path);
        else if (!strcmp(n, lmdb_tmp))
            rc = sl_convert_remove_dir(path);
    }
    sl_bytes_names_free(names, nn);
    return rc;
}

static void note_kept(sl_convert_state *st, uint64_t records, uint64_t payload, uint64_t items)
{
    st->nkept++;
    st->kept_records += records;
    st->kept_bytes += payload;
    st->kept_skipped += items - records; /* every input of a shard is a record or a skip */
    st->kept_inputs += items;
}

/* keep_shard for a WebDataset shard (records/wds.h): its index loads, and
 * its last sample ends where the writer's two end blocks begin. */
static int keep_wds_shard(sl_convert_state *st, unsigned s, const char *path, const char *idx)
{
    struct stat sb;
    sl_wds_index ix;
    uint64_t items = sl_convert_shard_begin(st->in.n, st->nshards, s + 1) -
                     sl_convert_shard_begin(st->in.n, st->nshards, s);
    int keep = stat(path, &sb) == 0 && sl_wds_index_load(idx, (uint64_t)sb.st_size, &ix) == SL_OK;
    sl_clear_error();
    if (keep) {
        uint64_t end = ix.nsamples ? ix.samples[ix.nsamples - 1].span_end : 0, payload = 0;
        for (size_t i = 0; i < ix.nmembers; i++)
            payload += ix.members[i].size;
        keep = end + 2 * SL_TAR_BLOCK == (uint64_t)sb.st_size && ix.nsamples <= items;
        if (keep) {
            st->kept[s] = 1;
            note_kept(st, ix.nsamples, payload, items);
        }
        sl_wds_index_fini(&ix);
    }
    if (keep)
        return SL_OK;
    int rc = unlink_if_present(path);
    return rc ? rc : unlink_if_present(idx);
}

/* Is shard s of a matching plan whole? Its file and index exist, the index
 * parses, and its last entry ends exactly at the end of the file. CRCs are
 * not re-read here (sluice verify does that). */
static int keep_shard(sl_convert_state *st, unsigned s)
{
    const sl_convert_config *cfg = st->cfg;
    char path[4096], idx[4200];
    int rc = sl_shard_path_fmt(path, sizeof path, cfg->out_dir, cfg->name, s, st->nshards,
                               cfg->format);
    if (rc)
        return rc;
    snprintf(idx, sizeof idx, "%s.idx", path);
    if (cfg->format == SL_FORMAT_WDS)
        return keep_wds_shard(st, s, path, idx);
    struct stat sb, ib;
    sl_index_entry *ent = NULL;
    size_t n = 0;
    int keep = stat(path, &sb) == 0 && stat(idx, &ib) == 0 && sl_index_load(idx, &ent, &n) == SL_OK;
    uint64_t end = n ? ent[n - 1].offset + ent[n - 1].size : 0, payload = 0;
    uint64_t items = sl_convert_shard_begin(st->in.n, st->nshards, s + 1) -
                     sl_convert_shard_begin(st->in.n, st->nshards, s);
    keep = keep && end == (uint64_t)sb.st_size && n <= items;
    for (size_t i = 0; keep && i < n; i++)
        payload += ent[i].size - SL_TFRECORD_OVERHEAD;
    free(ent);
    sl_clear_error();
    if (keep) {
        st->kept[s] = 1;
        st->nkept++;
        st->kept_records += n;
        st->kept_bytes += payload;
        st->kept_skipped += items - n; /* every input of a shard is a record or a skip */
        st->kept_inputs += items;
        return SL_OK;
    }
    /* Not whole: an index without its shard, or a file that does not match
     * it. Remove both so the writer starts clean. */
    rc = unlink_if_present(path);
    return rc ? rc : unlink_if_present(idx);
}

static int keep_lmdb(sl_convert_state *st)
{
    char path[4096];
    int rc = sl_lmdb_path(path, sizeof path, st->cfg->out_dir, st->cfg->name);
    if (rc)
        return rc;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return SL_OK; /* not finished: rebuilt from scratch */
    sl_lmdb_env *env = NULL;
    sl_lmdb_reader *r = NULL;
    rc = sl_lmdb_env_open(path, &env);
    if (!rc)
        rc = sl_lmdb_reader_open(env, &r);
    /* Payload bytes are not stored apart in LMDB: walk the records. */
    const uint8_t *data;
    size_t len;
    uint64_t n = 0;
    while (!rc && (rc = sl_lmdb_reader_next(r, &data, &len)) == SL_OK) {
        st->kept_bytes += len;
        n++;
    }
    sl_lmdb_reader_close(r);
    sl_lmdb_env_close(env);
    if (rc != SL_EOF)
        return sl_fail(rc, "sl_convert_run: --resume: %s: %s", path, sl_errmsg());
    if (n > st->in.n)
        return sl_fail(SL_ECORRUPT, "sl_convert_run: --resume: %s: %llu records for %zu inputs", path,
                       (unsigned long long)n, st->in.n);
    st->kept[0] = 1;
    st->nkept = 1;
    st->kept_records = n;
    st->kept_inputs = st->in.n;
    st->kept_skipped = st->in.n - n;
    return SL_OK;
}

/* ------------------------------------------------------------- plan */
void sl_convert_plan_text_of(const sl_convert_config *c, uint64_t inputs, uint64_t ihash,
                             unsigned shards, const char *const *names, uint32_t nnames,
                             char *buf, size_t cap)
{
    snprintf(buf, cap,
             "sluice convert plan 1\ninputs %llu\ninputs_hash %016llx\nshuffle %d\nseed %llu\n"
             "shards %u\nformat %s\nquality %d\nresize_short %d\nlabel_offset %d\n"
             "max_pixels %llu\nclasses_hash %016llx\n",
             (unsigned long long)inputs, (unsigned long long)ihash, c->shuffle ? 1 : 0,
             (unsigned long long)c->shuffle_seed, shards, format_name(c->format), c->quality,
             c->resize_short, c->label_offset,
             (unsigned long long)(c->max_pixels ? c->max_pixels : SL_MAX_PIXELS_DEFAULT),
             (unsigned long long)classes_hash(names, nnames));
    /* restart markers change every stored JPEG: a resume must use the same
     * (the line is left out without them, so older plans still match) */
    size_t n = strlen(buf);
    if (c->restart_rows && n < cap)
        snprintf(buf + n, cap - n, "restart rows %u\n", c->restart_rows);
    else if (c->restart_mcus == SL_RESTART_AUTO && n < cap)
        snprintf(buf + n, cap - n, "restart auto\n");
    else if (c->restart_mcus && n < cap)
        snprintf(buf + n, cap - n, "restart mcus %u\n", c->restart_mcus);
}

void sl_convert_plan_text(const sl_convert_state *st, char *buf, size_t cap)
{
    sl_convert_plan_text_of(st->cfg, st->in.n, inputs_hash(&st->in), st->nshards, st->class_names,
                            st->nclass_names, buf, cap);
}

/* First line where old and now differ, as "shards: 4 then, 8 now". */
void sl_convert_plan_diff(const char *old, const char *now, char *out, size_t cap)
{
    snprintf(out, cap, "the plan file does not parse");
    while (*old && *now) {
        size_t lo = strcspn(old, "\n"), ln = strcspn(now, "\n");
        if (lo != ln || memcmp(old, now, lo)) {
            size_t key = strcspn(now, " \n");
            const char *vo = old + strcspn(old, " \n"), *vn = now + key;
            int vol = (int)(old + lo - vo), vnl = (int)(now + ln - vn);
            snprintf(out, cap, "%.*s:%.*s then,%.*s now", (int)key, now, vol > 0 ? vol : 0, vo,
                     vnl > 0 ? vnl : 0, vn);
            return;
        }
        old += lo + (old[lo] == '\n');
        now += ln + (now[ln] == '\n');
    }
}

/* -------------------------------------------------------- prepare */
static int check_config(const sl_convert_config *cfg)
{
    const char *fn = "sl_convert_run";
    if (!cfg->out_dir || !*cfg->out_dir)
        return sl_fail(SL_EINVAL, "%s: no output directory", fn);
    if (!cfg->name || !*cfg->name || strchr(cfg->name, '/') || cfg->name[0] == '.' ||
        strlen(cfg->name) >= sizeof(((sl_manifest_split *)0)->name))
        return sl_fail(SL_EINVAL, "%s: split name '%s': want a plain name under 64 bytes (\"train\")", fn,
                       cfg->name ? cfg->name : "");
    if (cfg->quality < 1 || cfg->quality > 100)
        return sl_fail(SL_EINVAL, "%s: quality %d: want 1..100", fn, cfg->quality);
    if (cfg->resize_short < 0)
        return sl_fail(SL_EINVAL, "%s: resize_short %d: want >= 0", fn, cfg->resize_short);
    if (cfg->format != SL_FORMAT_TFRECORD && cfg->format != SL_FORMAT_LMDB &&
        cfg->format != SL_FORMAT_WDS)
        return sl_fail(SL_EINVAL, "%s: unknown format %d", fn, (int)cfg->format);
    if (cfg->format == SL_FORMAT_LMDB && cfg->shards > 1)
        return sl_fail(SL_EINVAL, "%s: LMDB keeps a split in one store: shards %u does not apply", fn,
                       cfg->shards);
    if (cfg->shards > CV_MAX_SHARDS)
        return sl_fail(SL_EINVAL, "%s: shards %u: at most %u", fn, cfg->shards, CV_MAX_SHARDS);
    if (cfg->restart_mcus && cfg->restart_rows)
        return sl_fail(SL_EINVAL, "%s: restart_mcus %u and restart_rows %u: one or the other", fn,
                       cfg->restart_mcus, cfg->restart_rows);
    if (cfg->restart_rows > 65535 ||
        (cfg->restart_mcus > 65535 && cfg->restart_mcus != SL_RESTART_AUTO))
        return sl_fail(SL_EINVAL, "%s: restart interval %u: at most 65535 (JPEG's DRI field)", fn,
                       cfg->restart_rows ? cfg->restart_rows : cfg->restart_mcus);
    if (cfg->class_names && cfg->num_class_names == 0)
        return sl_fail(SL_EINVAL, "%s: class_names given with num_class_names 0", fn);
    return SL_OK;
}

/* The output folder's dataset.json into m; SL_ENOENT, no error set, when
 * there is none yet. */
static int out_manifest(const sl_convert_config *cfg, sl_manifest *m)
{
    int rc = sl_manifest_load(cfg->out_dir, m);
    if (rc == SL_ENOENT)
        sl_clear_error();
    return rc;
}

/* A folder's classes in a dataset whose other splits recorded class names
 * (dataset.json's classes): labels by name, as those splits gave them, not
 * by the folder's own sorted order, which shifts every label after a class
 * this split lacks (a validation folder without one class). */
static int classes_of_dataset(sl_convert_state *st)
{
    const sl_convert_config *cfg = st->cfg;
    sl_manifest m;
    int rc = out_manifest(cfg, &m);
    if (rc)
        return rc == SL_ENOENT ? SL_OK : rc;
    char others[256] = "";
    size_t k = 0;
    for (size_t i = 0; i < m.nsplits && k < sizeof others; i++)
        if (strcmp(m.splits[i].name, cfg->name) != 0) {
            int w = snprintf(others + k, sizeof others - k, "%s%s", k ? ", " : "",
                             m.splits[i].name);
            k += w > 0 ? (size_t)w : 0;
        }
    if (k && m.class_names)
        rc = sl_inputs_name_classes(&st->in, cfg->input, m.class_names, m.num_classes, others);
    sl_manifest_fini(&m);
    return rc;
}

/* Labels must name the given classes, and a dataset keeps one label offset. */
static int check_labels_manifest(sl_convert_state *st)
{
    const sl_convert_config *cfg = st->cfg;
    for (size_t i = 0; i < st->in.n; i++) {
        int64_t l = st->in.items[i].label;
        if (l < 0 && st->in.items[i].rec)
            continue; /* a record without a usable label: skipped, with its reason, when read */
        if (l < 0 || (cfg->class_names && (uint64_t)l >= cfg->num_class_names)) {
            char name[4096];
            sl_convert_input_name(st, i, 1, name, sizeof name);
            return sl_fail(SL_EINVAL, "sl_convert_run: %s: label %lld outside the %u class names given",
                           name, (long long)l, cfg->num_class_names);
        }
    }
    sl_manifest m;
    int rc = out_manifest(cfg, &m);
    if (rc)
        return rc == SL_ENOENT ? SL_OK : rc;
    int others = 0;
    for (size_t i = 0; i < m.nsplits; i++)
        others |= strcmp(m.splits[i].name, cfg->name) != 0;
    if (others && m.label_offset != cfg->label_offset)
        rc = sl_fail(SL_EINVAL,
                     "sl_convert_run: %s/%s: label offset %lld for the other splits; label offset %d "
                     "would mix two conventions in one dataset",
                     cfg->out_dir, SL_MANIFEST_FILE, (long long)m.label_offset, cfg->label_offset);
    sl_manifest_fini(&m);
    return rc;
}

static unsigned shard_count(const sl_convert_state *st)
{
    const sl_convert_config *cfg = st->cfg;
    if (cfg->format == SL_FORMAT_LMDB)
        return 1;
    if (cfg->shards)
        return cfg->shards;
    uint64_t total = 0;
    for (size_t i = 0; i < st->in.n; i++)
        total += !st->in.items[i].path ? CV_IDX_ESTIMATE
                 : st->in.items[i].url ? CV_URL_ESTIMATE
                                       : st->in.items[i].size;
    uint64_t n = (total + CV_SHARD_BYTES - 1) / CV_SHARD_BYTES;
    return n < 1 ? 1 : n > CV_MAX_SHARDS ? CV_MAX_SHARDS : (unsigned)n;
}

/* "DIR/.NAME.done" (malloc'd; NULL when out of memory). */
static char *done_path(const sl_convert_state *st)
{
    size_t n = strlen(st->plan_path);
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, st->plan_path, n - 4);
        memcpy(p + n - 4, "done", 5);
    }
    return p;
}

/* Decide what is kept and write the plan (see the top of the file). */
static int plan_and_resume(sl_convert_state *st)
{
    const sl_convert_config *cfg = st->cfg;
    char now[CV_PLAN_MAX], final[256], *old = NULL;
    sl_convert_plan_text(st, now, sizeof now);
    int rc = read_small(st->plan_path, &old);
    if (rc == SL_ENOENT && cfg->resume) { /* finished, maybe killed right after */
        char *done = done_path(st);
        rc = done ? read_small(done, &old) : sl_fail(SL_ENOMEM, "sl_convert_run: out of memory");
        free(done);
    }
    if (rc && rc != SL_ENOENT)
        return rc;
    int have_plan = rc == SL_OK;
    rc = scan_outputs(cfg, 0, final, sizeof final);
    if (rc)
        goto out;
    if (!cfg->resume) {
        if (final[0])
            rc = sl_fail(SL_EEXIST,
                         "sl_convert_run: %s already holds split '%s' (%s): use --resume to finish an "
                         "interrupted conversion, or remove that split's files to convert again",
                         cfg->out_dir, cfg->name, final);
        goto out;
    }
    if (!have_plan) {
        if (final[0])
            rc = sl_fail(SL_EEXIST,
                         "sl_convert_run: --resume: %s holds split '%s' (%s) but no unfinished "
                         "conversion (no %s): it finished or was made otherwise; remove that split's "
                         "files to convert again",
                         cfg->out_dir, cfg->name, final, st->plan_path);
        goto out;
    }
    if (strcmp(old, now) != 0) {
        char diff[512];
        sl_convert_plan_diff(old, now, diff, sizeof diff);
        rc = sl_fail(SL_EINVAL, "sl_convert_run: --resume: %s was made with different inputs or options (%s)",
                     cfg->out_dir, diff);
        goto out;
    }
    if (cfg->format == SL_FORMAT_LMDB)
        rc = keep_lmdb(st);
    else
        for (unsigned s = 0; !rc && s < st->nshards; s++)
            rc = keep_shard(st, s);
out:
    free(old);
    /* Going ahead: drop temp files of a killed run, then record the plan. */
    if (!rc)
        rc = scan_outputs(cfg, 1, final, sizeof final);
    if (!rc)
        rc = sl_write_file_atomic(st->plan_path, now, strlen(now), cfg->fsync, "sl_convert_run");
    return rc;
}

int sl_convert_prepare(const sl_convert_config *cfg, sl_convert_state *st)
{
    int rc = sl_convert_prepare_inputs(cfg, st);
    if (rc)
        return rc;
    size_t pl = strlen(cfg->out_dir) + strlen(cfg->name) + 16;
    st->plan_path = malloc(pl);
    if (!st->plan_path)
        return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory");
    snprintf(st->plan_path, pl, "%s/.%s.plan", cfg->out_dir, cfg->name);
    if ((rc = sl_mkdir_p(cfg->out_dir, "sl_convert_run")) != SL_OK)
        return rc;
    return plan_and_resume(st);
}

int sl_convert_prepare_inputs(const sl_convert_config *cfg, sl_convert_state *st)
{
    memset(st, 0, sizeof *st);
    st->cfg = cfg;
    int rc = check_config(cfg);
    if (rc)
        return rc;
    rc = sl_inputs_load(cfg, &st->in);
    if (rc)
        return rc;
    if (st->in.n == 0)
        return sl_fail(SL_EINVAL, "sl_convert_run: %s: no inputs found",
                       cfg->source == SL_SOURCE_IDX ? cfg->idx_images : cfg->input);
    if (st->in.n > UINT32_MAX)
        return sl_fail(SL_EINVAL, "sl_convert_run: %zu inputs: at most %u", st->in.n, UINT32_MAX);
    if (cfg->source == SL_SOURCE_IDX) {
        const char *slash = strrchr(cfg->idx_images, '/');
        st->idx_base = slash ? slash + 1 : cfg->idx_images;
    }
    if (!cfg->class_names && st->in.classes && (rc = classes_of_dataset(st)))
        return rc;
    if (cfg->class_names) {
        st->class_names = cfg->class_names;
        st->nclass_names = cfg->num_class_names;
    } else if (st->in.classes) {
        st->class_names = (const char *const *)st->in.classes;
        st->nclass_names = st->in.nclasses;
    }
    st->num_classes = st->class_names ? st->nclass_names : st->in.nclasses;
    if ((rc = check_labels_manifest(st)) != SL_OK)
        return rc;

    st->order = malloc(st->in.n * sizeof *st->order);
    st->nshards = shard_count(st);
    st->kept = calloc(st->nshards, 1);
    if (!st->order || !st->kept)
        return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory for %zu inputs", st->in.n);
    permute(st->order, st->in.n, cfg->shuffle_seed, cfg->shuffle);
    return SL_OK;
}

/* ------------------------------------------------------------ finish */
static void source_text(const sl_convert_config *cfg, char *buf, size_t cap)
{
    if (cfg->source == SL_SOURCE_IDX)
        snprintf(buf, cap, "idx %s %s", cfg->idx_images, cfg->idx_labels);
    else if (cfg->source == SL_SOURCE_TFRECORD)
        snprintf(buf, cap, "tfrecord %s%s%s", cfg->input, cfg->input_split ? " split " : "",
                 cfg->input_split ? cfg->input_split : "");
    else
        snprintf(buf, cap, "%s %s", cfg->source == SL_SOURCE_LIST ? "list" : "folder", cfg->input);
}

int sl_convert_manifest_update(const sl_convert_state *st, const sl_convert_result *res,
                               const char *save_dir)
{
    const sl_convert_config *cfg = st->cfg;
    sl_manifest m;
    int rc = sl_manifest_load(cfg->out_dir, &m);
    if (rc == SL_ENOENT) {
        sl_clear_error();
        sl_manifest_init(&m);
    } else if (rc) {
        return rc;
    }
    sl_manifest_split sp;
    memset(&sp, 0, sizeof sp);
    snprintf(sp.name, sizeof sp.name, "%s", cfg->name);
    sp.format = cfg->format;
    sp.records = res->records;
    sp.shards = res->shards;
    sp.bytes = res->bytes;
    sp.skipped = res->skipped;
    source_text(cfg, sp.source, sizeof sp.source);
    rc = sl_manifest_split_put(&m, &sp);
    /* Explicit names always win; names found in the source only fill a
     * manifest that has none (another split may have named them already). */
    int name_them = st->class_names && (cfg->class_names || !m.class_names);
    if (!rc && name_them)
        rc = sl_manifest_set_classes(&m, st->class_names, st->nclass_names);
    if (!rc) {
        if (name_them)
            m.num_classes = st->nclass_names;
        else if (!m.class_names && st->num_classes > m.num_classes)
            m.num_classes = st->num_classes;
        m.label_offset = cfg->label_offset;
        snprintf(m.created_by, sizeof m.created_by, "sluice %s", SLUICE_VERSION);
        rc = sl_manifest_save(save_dir, &m);
    }
    sl_manifest_fini(&m);
    return rc;
}

int sl_convert_finish(sl_convert_state *st, const sl_convert_result *res)
{
    const sl_convert_config *cfg = st->cfg;
    int rc = sl_convert_manifest_update(st, res, cfg->out_dir);
    if (rc)
        return rc;
    /* The split is complete and described: the plan becomes the done file
     * (one rename: at every instant one of the two says how the split was
     * made). */
    char *done = done_path(st);
    if (!done)
        return sl_fail(SL_ENOMEM, "sl_convert_run: out of memory");
    if (rename(st->plan_path, done) != 0 && !(errno == ENOENT && access(done, F_OK) == 0))
        rc = sl_fail(SL_EIO, "sl_convert_run: %s: rename to %s: %s", st->plan_path, done,
                     strerror(errno));
    free(done);
    return !rc && cfg->fsync ? sl_fsync_dir(cfg->out_dir, "sl_convert_run") : rc;
}

void sl_convert_state_fini(sl_convert_state *st)
{
    sl_inputs_free(&st->in);
    free(st->order);
    free(st->kept);
    free(st->plan_path);
    memset(st, 0, sizeof *st);
}

void sl_convert_input_name(const sl_convert_state *st, size_t i, int full, char *buf, size_t cap)
{
    const sl_input *it = &st->in.items[i];
    if (it->rec) { /* "train-00000-of-00004.tfrecord[17]" */
        const char *slash = full ? NULL : strrchr(it->path, '/');
        snprintf(buf, cap, "%s[%u]", slash ? slash + 1 : it->path, it->idx);
        return;
    }
    if (!it->path) {
        snprintf(buf, cap, "%s[%u]", st->idx_base ? st->idx_base : "idx", it->idx);
        return;
    }
    const char *slash = full ? NULL : strrchr(it->path, '/');
    snprintf(buf, cap, "%s", slash ? slash + 1 : it->path);
}

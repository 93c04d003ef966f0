/*
 * tools/pipeline_flags.c - parsing and usage of the input-pipeline options
 * (see pipeline_flags.h). Values are checked here, with the option's name
 * in the message; sl_pipeline_create checks them again against the data.
 */
#include "pipeline_flags.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "records/records.h"

const struct option pf_long_opts[PF_NOPTS] = {
    {"data", required_argument, NULL, PF_OPT_DATA},
    {"split", required_argument, NULL, PF_OPT_SPLIT},
    {"image-size", required_argument, NULL, PF_OPT_IMAGE_SIZE},
    {"batch", required_argument, NULL, PF_OPT_BATCH},
    {"workers", required_argument, NULL, PF_OPT_WORKERS},
    {"readers", required_argument, NULL, PF_OPT_READERS},
    {"prefetch", required_argument, NULL, PF_OPT_PREFETCH},
    {"cycle", required_argument, NULL, PF_OPT_CYCLE},
    {"block", required_argument, NULL, PF_OPT_BLOCK},
    {"shuffle", required_argument, NULL, PF_OPT_SHUFFLE},
    {"seed", required_argument, NULL, PF_OPT_SEED},
    {"epochs", required_argument, NULL, PF_OPT_EPOCHS},
    {"eval", no_argument, NULL, PF_OPT_EVAL},
    {"layout", required_argument, NULL, PF_OPT_LAYOUT},
    {"drop-remainder", no_argument, NULL, PF_OPT_DROP_REMAINDER},
    {"on-error", required_argument, NULL, PF_OPT_ON_ERROR},
    {"io-retries", required_argument, NULL, PF_OPT_IO_RETRIES},
    {"io-timeout", required_argument, NULL, PF_OPT_IO_TIMEOUT},
    {"io-inflight", required_argument, NULL, PF_OPT_IO_INFLIGHT},
    {"rank", required_argument, NULL, PF_OPT_RANK},
    {"world", required_argument, NULL, PF_OPT_WORLD},
    {"device", required_argument, NULL, PF_OPT_DEVICE},
    {"label-offset", required_argument, NULL, PF_OPT_LABEL_OFFSET},
    {"max-pixels", required_argument, NULL, PF_OPT_MAX_PIXELS},
    {"decode", required_argument, NULL, PF_OPT_DECODE},
    {"label-key", required_argument, NULL, PF_OPT_LABEL_KEY},
    {"io-retry-budget", required_argument, NULL, PF_OPT_IO_RETRY_BUDGET},
    {"ca-bundle", required_argument, NULL, PF_OPT_CA_BUNDLE},
    {"cpus", required_argument, NULL, PF_OPT_CPUS},
    {"memory-budget", required_argument, NULL, PF_OPT_MEMORY_BUDGET},
};

/* The redacted paths handed out, kept reachable for the process's life
 * (a command holds a few). */
typedef struct kept_path {
    struct kept_path *next;
    char *path;
} kept_path;
static kept_path *g_kept;

const char *pf_redacted(const char *cmd, const char *path)
{
    kept_path *k = calloc(1, sizeof *k);
    if (!k || sl_path_redact(path, &k->path)) {
        free(k);
        cli_error(cmd, "out of memory");
        return NULL;
    }
    k->next = g_kept;
    g_kept = k;
    return k->path;
}

void pf_init(pf_flags *f, const char *cmd)
{
    sl_pipeline_config init = SL_PIPELINE_CONFIG_INIT;
    memset(f, 0, sizeof *f);
    f->cfg = init;
    f->cmd = cmd;
}

int pf_getopt(pf_flags *f, int argc, char **argv, const struct option *own)
{
    static struct option opts[PF_NOPTS + PF_MAX_OWN_OPTS];
    size_t n = 0;
    while (own[n].name)
        n++;
    if (n + 1 > PF_MAX_OWN_OPTS) {
        cli_error(f->cmd, "internal: %zu options, room for %d", n, PF_MAX_OWN_OPTS - 1);
        return PF_GETOPT_ERROR;
    }
    memcpy(opts, pf_long_opts, sizeof pf_long_opts);
    memcpy(opts + PF_NOPTS, own, (n + 1) * sizeof *own);
    if (!f->getopt_started) {
        opterr = 0;
        optind = 1;
        f->getopt_started = 1;
    }
    for (;;) {
        int c = getopt_long(argc, argv, ":h", opts, NULL);
        if (c >= PF_OPT_FIRST && c <= PF_OPT_LAST) {
            if (pf_parse(f, c, optarg))
                return PF_GETOPT_ERROR;
            continue;
        }
        if (c == ':') {
            cli_error(f->cmd, "%s: needs a value (see sluice %s --help)", argv[optind - 1], f->cmd);
            return PF_GETOPT_ERROR;
        }
        if (c == '?') {
            cli_error(f->cmd, "unknown option '%s' (see sluice %s --help)", argv[optind - 1],
                      f->cmd);
            return PF_GETOPT_ERROR;
        }
        return c;
    }
}

static const struct {
    const char *name;
    sl_layout layout;
} layouts[] = {
    {"nchw-f32", SL_LAYOUT_NCHW_F32},
    {"nhwc-f32", SL_LAYOUT_NHWC_F32},
    {"nhwc-u8", SL_LAYOUT_NHWC_U8},
};

const char *pf_layout_name(sl_layout l)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].layout == l)
            return layouts[i].name;
    return "?";
}

const char *pf_decode_name(sl_decode_mode m)
{
    return m == SL_DECODE_GPU ? "gpu" : m == SL_DECODE_AUTO ? "auto" : "cpu";
}

const char *pf_shuffle_name(const sl_pipeline_config *cfg, char *buf, size_t cap)
{
    switch (cfg->shuffle) {
    case SL_SHUFFLE_NONE: return "none";
    case SL_SHUFFLE_GLOBAL: return "global";
    case SL_SHUFFLE_BUFFER: break;
    }
    snprintf(buf, cap, "buffer:%llu", (unsigned long long)cfg->shuffle_buffer);
    return buf;
}

/* "224" or "HxW" (e.g. "192x256"), each side 1..16384. */
static int parse_size(const char *s, int *h, int *w)
{
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 1 || a > 16384)
        return -1;
    if (*end == 'x') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t || b < 1 || b > 16384)
            return -1;
    }
    if (*end)
        return -1;
    *h = (int)a;
    *w = (int)b;
    return 0;
}

static int bad(pf_flags *f, const char *opt, const char *arg, const char *want)
{
    cli_error(f->cmd, "%s: bad value '%s' (want %s)", opt, arg ? arg : "", want);
    return -1;
}

/* An unsigned option value in lo..hi. */
static int parse_uint(pf_flags *f, const char *opt, const char *arg, uint64_t lo, uint64_t hi,
                      uint64_t *out)
{
    char *end;
    if (!arg || !*arg || *arg == '-' || *arg == '+')
        goto fail;
    unsigned long long v = strtoull(arg, &end, 10);
    if (*end || v < lo || v > hi)
        goto fail;
    *out = v;
    return 0;
fail:;
    char want[96];
    snprintf(want, sizeof want, "an integer in %llu..%llu", (unsigned long long)lo,
             (unsigned long long)hi);
    return bad(f, opt, arg, want);
}

int pf_parse(pf_flags *f, int code, const char *arg)
{
    sl_pipeline_config *c = &f->cfg;
    uint64_t u;
    int v;
    switch (code) {
    case PF_OPT_DATA:
        if (!arg || !(c->data = pf_redacted(f->cmd, arg))) /* where the path enters */
            return -1;
        return 0;
    case PF_OPT_SPLIT:
        if (!arg || !*arg)
            return bad(f, "--split", arg, "a split name such as train");
        c->split = arg;
        f->split_given = 1;
        return 0;
    case PF_OPT_IMAGE_SIZE:
        if (parse_size(arg, &c->height, &c->width))
            return bad(f, "--image-size", arg, "S or HxW, sides 1..16384");
        return 0;
    case PF_OPT_BATCH:
        if (parse_uint(f, "--batch", arg, 1, 1u << 20, &u))
            return -1;
        c->batch = (unsigned)u;
        return 0;
    case PF_OPT_WORKERS:
        if (parse_uint(f, "--workers", arg, 0, 1024, &u))
            return -1;
        c->workers = (unsigned)u;
        return 0;
    case PF_OPT_READERS:
        if (parse_uint(f, "--readers", arg, 1, 1024, &u))
            return -1;
        c->readers = (unsigned)u;
        return 0;
    case PF_OPT_CPUS:
        if (parse_uint(f, "--cpus", arg, 1, 4096, &u))
            return -1;
        f->cpus = (int)u;
        return 0;
    case PF_OPT_MEMORY_BUDGET:
        if (pf_parse_bytes(arg, &f->memory_budget))
            return bad(f, "--memory-budget", arg, "bytes > 0, with K, M, G or T: 512M, 4G");
        return 0;
    case PF_OPT_PREFETCH:
        if (parse_uint(f, "--prefetch", arg, 0, 4096, &u))
            return -1;
        c->prefetch = (unsigned)u;
        return 0;
    case PF_OPT_CYCLE:
        if (parse_uint(f, "--cycle", arg, 1, 1u << 20, &u))
            return -1;
        c->cycle = (unsigned)u;
        return 0;
    case PF_OPT_BLOCK:
        if (parse_uint(f, "--block", arg, 1, 1u << 20, &u))
            return -1;
        c->block = (unsigned)u;
        return 0;
    case PF_OPT_SHUFFLE:
        f->shuffle_given = 1;
        if (arg && !strcmp(arg, "none")) {
            c->shuffle = SL_SHUFFLE_NONE;
        } else if (arg && !strcmp(arg, "global")) {
            c->shuffle = SL_SHUFFLE_GLOBAL;
        } else if (arg && !strcmp(arg, "buffer")) {
            c->shuffle = SL_SHUFFLE_BUFFER; /* the default size */
        } else if (arg && !strncmp(arg, "buffer:", 7)) {
            char *end;
            const char *n = arg + 7;
            unsigned long long b = *n >= '0' && *n <= '9' ? strtoull(n, &end, 10) : 0;
            if (!b || *end)
                return bad(f, "--shuffle", arg, "none, buffer:N (N >= 1 records) or global");
            c->shuffle = SL_SHUFFLE_BUFFER;
            c->shuffle_buffer = b;
        } else {
            return bad(f, "--shuffle", arg, "none, buffer:N (N >= 1 records) or global");
        }
        return 0;
    case PF_OPT_SEED:
        if (parse_uint(f, "--seed", arg, 0, UINT64_MAX, &u))
            return -1;
        c->seed = u;
        return 0;
    case PF_OPT_EPOCHS:
        if (parse_uint(f, "--epochs", arg, 0, INT64_MAX, &u))
            return -1;
        c->epochs = (int64_t)u;
        return 0;
    case PF_OPT_EVAL: c->transform = SL_TRANSFORM_EVAL; return 0;
    case PF_OPT_LAYOUT:
        for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
            if (arg && !strcmp(arg, layouts[i].name)) {
                c->layout = layouts[i].layout;
                return 0;
            }
        return bad(f, "--layout", arg, "nchw-f32, nhwc-f32 or nhwc-u8");
    case PF_OPT_DROP_REMAINDER: c->drop_remainder = 1; return 0;
    case PF_OPT_ON_ERROR:
        if (arg && !strcmp(arg, "skip"))
            c->on_error = SL_ON_ERROR_SKIP;
        else if (arg && !strcmp(arg, "fail"))
            c->on_error = SL_ON_ERROR_FAIL;
        else
            return bad(f, "--on-error", arg, "skip or fail");
        return 0;
    case PF_OPT_MAX_PIXELS:
        if (cli_parse_u64(f->cmd, "--max-pixels", arg, &u))
            return -1;
        if (u == 0)
            return bad(f, "--max-pixels", arg, "a pixel count >= 1");
        c->max_pixels = u;
        return 0;
    case PF_OPT_RANK:
        if (parse_uint(f, "--rank", arg, 0, 1u << 20, &u))
            return -1;
        c->rank = (unsigned)u;
        return 0;
    case PF_OPT_WORLD:
        if (parse_uint(f, "--world", arg, 1, 1u << 20, &u))
            return -1;
        c->world = (unsigned)u;
        return 0;
    case PF_OPT_DEVICE:
        if (cli_parse_int(f->cmd, "--device", arg, -1, 1023, &v))
            return -1;
        c->device = v;
        return 0;
    case PF_OPT_LABEL_OFFSET:
        if (cli_parse_int(f->cmd, "--label-offset", arg, 0, 1 << 30, &v))
            return -1;
        c->label_offset = v;
        return 0;
    case PF_OPT_IO_RETRIES:
        if (parse_uint(f, "--io-retries", arg, 0, 100, &u))
            return -1;
        f->io.retries = u ? (unsigned)u : SL_IO_NO_RETRY;
        return 0;
    case PF_OPT_IO_RETRY_BUDGET:
        if (parse_uint(f, "--io-retry-budget", arg, 1, 86400, &u))
            return -1;
        f->io.retry_ms = (unsigned)u * 1000u;
        return 0;
    case PF_OPT_CA_BUNDLE:
        if (!arg || !*arg)
            return bad(f, "--ca-bundle", arg, "a PEM file of CA certificates");
        f->io.ca_bundle = arg; /* copied by sl_io_configure */
        return 0;
    case PF_OPT_IO_TIMEOUT:
        if (parse_uint(f, "--io-timeout", arg, 1, 3600, &u))
            return -1;
        f->io.timeout_ms = (unsigned)u * 1000u;
        return 0;
    case PF_OPT_IO_INFLIGHT:
        if (parse_uint(f, "--io-inflight", arg, 1, 64, &u))
            return -1;
        f->io.inflight = (unsigned)u;
        return 0;
    case PF_OPT_LABEL_KEY:
        if (!arg || !*arg)
            return bad(f, "--label-key", arg, "a JSON field name");
        c->label_key = arg; /* argv outlives the pipeline */
        return 0;
    case PF_OPT_DECODE:
        if (arg && !strcmp(arg, "cpu"))
            c->decode = SL_DECODE_CPU;
        else if (arg && !strcmp(arg, "gpu"))
            c->decode = SL_DECODE_GPU;
        else if (arg && !strcmp(arg, "auto"))
            c->decode = SL_DECODE_AUTO;
        else
            return bad(f, "--decode", arg, "cpu, gpu or auto");
        return 0;
    }
    cli_error(f->cmd, "internal: option code %d is not a pipeline option", code);
    return -1;
}

int pf_finish(pf_flags *f)
{
    sl_pipeline_config *c = &f->cfg;
    if (!c->data) {
        cli_error(f->cmd, "--data DIR is required (a dataset directory or one .tfrecord file)");
        return -1;
    }
    if (c->rank >= c->world) {
        cli_error(f->cmd, "--rank %u: must be below --world %u", c->rank, c->world);
        return -1;
    }
    if (c->transform == SL_TRANSFORM_EVAL && !f->shuffle_given) {
        c->shuffle = SL_SHUFFLE_NONE;
        c->shuffle_files = 0;
    }
    if (sl_io_configure(&f->io)) { /* process-wide: every remote read of this command */
        cli_error(f->cmd, "out of memory");
        return -1;
    }
    return 0;
}

int pf_parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !(*s >= '0' && *s <= '9'))
        return -1;
    double v = strtod(s, &end);
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, *end) : NULL;
    double mult = 1;
    if (u) {
        for (const char *k = units; k <= u; k++)
            mult *= 1024;
        end++;
        if (*end == 'i')
            end++;
    }
    if (*end == 'B')
        end++;
    v *= mult;
    if (*end || !(v >= 1) || v >= 18446744073709551615.0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* A "Name:  N kB" line of /proc/self/status, in bytes; 0 when absent. */
static uint64_t proc_status_bytes(const char *name)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    size_t n = strlen(name);
    while (fp && fgets(line, sizeof line, fp))
        if (!strncmp(line, name, n) && sscanf(line + n, "%llu", &kb) == 1)
            break;
    if (fp)
        fclose(fp);
    return (uint64_t)kb * 1024;
}

void pf_rss_mark(pf_flags *f)
{
    FILE *fp = fopen("/proc/self/clear_refs", "w");
    int ok = fp && fputs("5", fp) >= 0;
    if (fp && fclose(fp))
        ok = 0;
    f->rss_start = ok ? proc_status_bytes("VmRSS:") : 0;
}

void pf_memory_json(const pf_flags *f, char *buf, size_t cap)
{
    if (!f->memory_budget) {
        snprintf(buf, cap, "null");
        return;
    }
    size_t k = 0;
    unsigned np = f->mem_pipelines ? f->mem_pipelines : 1;
    int n = snprintf(buf, cap, "{\"budget\": %llu, \"pipelines\": %u, \"total\": %llu, "
                     "\"eval\": %llu, \"parts\": {", (unsigned long long)f->memory_budget, np,
                     (unsigned long long)((f->mem.total + f->mem.eval) * np),
                     (unsigned long long)f->mem.eval);
    k = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < SL_MEM_NPARTS && k < cap; i++) {
        n = snprintf(buf + k, cap - k, "%s\"%s\": %llu", i ? ", " : "",
                     sl_mem_part_key((sl_mem_part)i), (unsigned long long)f->mem.part[i]);
        k += n > 0 ? (size_t)n : 0;
    }
    char rss[80] = "null, \"rss_peak\": null";
    uint64_t peak = proc_status_bytes("VmHWM:");
    if (f->rss_start && peak)
        snprintf(rss, sizeof rss, "%llu, \"rss_peak\": %llu", (unsigned long long)f->rss_start,
                 (unsigned long long)peak);
    if (k < cap)
        snprintf(buf + k, cap - k, "}, \"workers\": %u, \"prefetch\": %u, \"read_window\": "
                 "%llu, \"shrunk\": \"%s\", \"rss_start\": %s}", f->mem.workers,
                 f->mem.prefetch, (unsigned long long)f->mem.read_window, f->mem_shrunk, rss);
}

/* "; requests in flight ..." of remote reads ("" for local shards). */
static void inflight_text(const sl_pipeline_tuning *t, char *buf, size_t cap)
{
    if (!t->inflight_max)
        snprintf(buf, cap, "%s", "");
    else if (!(t->knobs & SL_TUNE_INFLIGHT))
        snprintf(buf, cap, "; requests in flight %u per reader as given", t->inflight);
    else
        snprintf(buf, cap, "; requests in flight %u..%u of %u per reader (now %u), %llu "
                 "change%s in %llu window%s%s%s", t->inflight_lo, t->inflight_hi,
                 t->inflight_max, t->inflight, (unsigned long long)t->inflight_changes,
                 t->inflight_changes == 1 ? "" : "s", (unsigned long long)t->inflight_windows,
                 t->inflight_windows == 1 ? "" : "s", t->inflight_last[0] ? "; the last: " : "",
                 t->inflight_last);
}

void pf_tuning_text(const sl_pipeline_tuning *t, char *buf, size_t cap)
{
    char io[256];
    inflight_text(t, io, sizeof io);
    if (!(t->knobs & (SL_TUNE_WORKERS | SL_TUNE_PREFETCH))) {
        snprintf(buf, cap, "off (%u workers, prefetch %u: --workers and --prefetch given)%s",
                 t->workers, t->prefetch, io);
        return;
    }
    snprintf(buf, cap, "workers %u..%u of %u (now %u, mean %.1f)%s, prefetch %u..%u of %u "
             "(now %u)%s; %llu change%s in %llu window%s%s%s%s", t->workers_lo, t->workers_hi,
             t->workers_max, t->workers, t->workers_mean,
             t->knobs & SL_TUNE_WORKERS ? "" : " as given", t->prefetch_lo, t->prefetch_hi,
             t->prefetch_max, t->prefetch, t->knobs & SL_TUNE_PREFETCH ? "" : " as given",
             (unsigned long long)t->changes, t->changes == 1 ? "" : "s",
             (unsigned long long)t->windows, t->windows == 1 ? "" : "s",
             t->last[0] ? "; the last: " : "", t->last, io);
}

void pf_tuning_json(const sl_pipeline_tuning *t, char *buf, size_t cap)
{
    char knobs[64] = "";
    static const char *const name[] = {"workers", "prefetch", "inflight"};
    for (unsigned i = 0, k = 0; i < 3; i++)
        if (t->knobs & (1u << i))
            k += (unsigned)snprintf(knobs + k, sizeof knobs - k, "%s\"%s\"", k ? ", " : "",
                                    name[i]);
    char io[320] = "null";
    if (t->inflight_max)
        snprintf(io, sizeof io, "{\"limit\": %u, \"max\": %u, \"lo\": %u, \"hi\": %u, "
                 "\"windows\": %llu, \"changes\": %llu, \"last\": \"%s\"}", t->inflight,
                 t->inflight_max, t->inflight_lo, t->inflight_hi,
                 (unsigned long long)t->inflight_windows,
                 (unsigned long long)t->inflight_changes, t->inflight_last);
    snprintf(buf, cap, "{\"knobs\": [%s], \"workers\": %u, \"workers_max\": %u, "
             "\"workers_lo\": %u, \"workers_hi\": %u, \"workers_mean\": %.3f, "
             "\"prefetch\": %u, \"prefetch_max\": %u, \"prefetch_lo\": %u, "
             "\"prefetch_hi\": %u, \"windows\": %llu, \"changes\": %llu, \"last\": \"%s\", "
             "\"inflight\": %s}", knobs, t->workers, t->workers_max,
             t->workers_lo, t->workers_hi, t->workers_mean, t->prefetch, t->prefetch_max,
             t->prefetch_lo, t->prefetch_hi, (unsigned long long)t->windows,
             (unsigned long long)t->changes, t->last, io);
}

static void pf_note_unindexed(FILE *out, const char *who, const sl_dataset_split *s)
{
    if (s->unindexed)
        fprintf(out, "%s: note: %zu of %zu shards of %s have no index file (.idx): each is "
                "scanned when opened; sluice index DIR writes them\n", who, s->unindexed,
                s->nfiles, s->name);
}

int pf_check_data(pf_flags *f)
{
    sl_dataset ds;
    const sl_dataset_split *s = NULL;
    char who[64];
    int rc = sl_dataset_resolve(f->cfg.data, NULL, &ds);
    if (!rc)
        rc = sl_dataset_reader_split(&ds, f->cfg.split, &s);
    if (rc) {
        cli_fail(f->cmd, rc);
        sl_dataset_fini(&ds);
        return -1;
    }
    snprintf(who, sizeof who, "sluice %s", f->cmd);
    pf_note_unindexed(stderr, who, s);
    sl_dataset_fini(&ds);
    return 0;
}

void pf_usage(FILE *out)
{
    fputs("input pipeline:\n"
          "  --data DIR            dataset directory (dataset.json, or shards NAME-NNNNN-of-NNNNN\n"
          "                        with or without .tfrecord, as TensorFlow's ImageNet converter\n"
          "                        writes them), a quoted glob of shards ('d/train-0000[0-3]-*'),\n"
          "                        or one shard; or the same remote: https://host/dir,\n"
          "                        http://..., s3://bucket/prefix (AWS_ACCESS_KEY_ID,\n"
          "                        AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL), a\n"
          "                        presigned shard URL; a folder of WebDataset tars NAME-NNNNNN.tar\n"
          "                        needs no --split: the folder's one set of shards is taken\n"
          "                        (a password or signature in the URL is never printed) (required)\n"
          "  --split NAME          split to read                                    (default train)\n"
          "  --image-size S|HxW    output size                                      (default 224)\n"
          "  --batch B             samples per batch                                (default 64)\n"
          "  --cpus N              cores this run may use: the compute threads, decode workers\n"
          "                        and readers share them; what --replicas, --threads,\n"
          "                        --workers, --readers and --prefetch do not give is chosen\n"
          "                        within it (the start-up line and --json say what and why)\n"
          "                        (default: the cores this process may use: its affinity mask\n"
          "                        and cgroup CPU quota)\n"
          "  --memory-budget BYTES bytes the input pipelines may hold (512M, 4G): the read\n"
          "                        window, the shuffle buffer, remote requests in flight, the\n"
          "                        decode workers and the prefetch ring (pipeline/memory.c);\n"
          "                        prefetch, requests in flight, workers and the read window are\n"
          "                        shrunk to fit unless given; what cannot fit (the shuffle\n"
          "                        buffer, an option given) is refused at start-up, each part\n"
          "                        named. Local shards are then read with pread, not mapped.\n"
          "                        Not counted: the process and the model (default: no budget)\n"
          "  --workers W           decode/augment threads of each pipeline; 0 = chosen within\n"
          "                        --cpus (profile: one per core; train: the cores the compute\n"
          "                        leaves, at least one)                            (default 0)\n"
          "  --readers R           reader threads                                   (default 2)\n"
          "  --prefetch P          batches in the ring; 0 = automatic (at least 3)  (default 0)\n"
          "  --cycle N             shards read at once (interleave)                 (default 4)\n"
          "  --block N             records taken from a shard per visit             (default 16)\n"
          "  --shuffle MODE        none, buffer:N (N records, tf.data style; 'buffer' alone is\n"
          "                        10000) or global (a permutation of all records)  (default buffer:10000)\n"
          "  --seed S              seed of shuffles and augmentation                (default 0)\n"
          "  --epochs E            passes over the data; 0 = forever\n"
          "  --eval                eval transform: resize, center crop, no flip; reads in order\n"
          "                        unless --shuffle is given             (default: train transform,\n"
          "                        random-resized-crop + flip)\n"
          "  --layout L            nchw-f32, nhwc-f32 (normalized) or nhwc-u8 (raw pixels, for\n"
          "                        normalization on the GPU)                        (default nchw-f32)\n"
          "  --drop-remainder      drop the last partial batch\n"
          "  --on-error MODE       skip (refill the slot, count and list the record) or fail\n"
          "                                                                         (default skip)\n"
          "  --max-pixels N        a JPEG whose header claims more than N pixels is a bad record\n"
          "                        (--on-error), refused before decoding   (default 67108864 = 2^26)\n"
          "  --io-retry-budget S   remote reads: a timeout, stall, reset, 5xx or 503 SlowDown is\n"
          "                        retried (capped exponential backoff) for S seconds from the\n"
          "                        request's first try; then the run ends naming the shard, under\n"
          "                        either --on-error               (default 60: rides out a restart)\n"
          "  --io-retries N        remote reads: at most N tries after the first (0: none)\n"
          "                                                   (default: as many as the budget allows)\n"
          "  --io-timeout S        remote reads: seconds to connect, and a transfer below 1 KiB/s\n"
          "                        for S seconds is a stall (cut, retried)         (default 30)\n"
          "  --io-inflight N       remote reads: ranged GETs in flight per reader; not given,\n"
          "                        tuned online up to 8 (fewer while the readers wait on\n"
          "                        the workers)                                    (default 8)\n"
          "  --ca-bundle FILE      https: trust the CAs in FILE (PEM) instead of the system's\n"
          "                        (default: AWS_CA_BUNDLE for s3://, CURL_CA_BUNDLE or\n"
          "                        SSL_CERT_FILE, and SSL_CERT_DIR, when set)\n"
          "  --label-offset N      subtracted from stored labels (TensorFlow's ImageNet shards\n"
          "                        count from 1: --label-offset 1)  (default: dataset.json's, else 0)\n"
          "  --label-key NAME      WebDataset (.tar) shards: the label is the integer field NAME\n"
          "                        of each sample's .json member            (default: its .cls)\n"
          "  --rank R --world N    read the shards i with i % N == R                (default 0 1)\n"
          "  --device D            CUDA device for pinned batches and copies; -1 = host only\n"
          "                        (default -1; with --backend cuda: the GPU, default 0)\n"
          "  --decode MODE         cpu (libjpeg-turbo in the workers), gpu (nvJPEG: the hardware\n"
          "                        decoder when the GPU has one, else its hybrid backend; crop and\n"
          "                        resize on the GPU into the --device batch; progressive and\n"
          "                        other JPEGs nvJPEG cannot decode go to the CPU path per image;\n"
          "                        libnvjpeg.so.13/.12 loaded at run time, SLUICE_NVJPEG=PATH\n"
          "                        overrides) or auto (gpu when --device, a GPU and libnvjpeg are\n"
          "                        there, else cpu)                                 (default cpu)\n",
          out);
}

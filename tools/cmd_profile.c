/*
 * tools/cmd_profile.c - `sluice profile`: run the input pipeline with a free
 * consumer and report what it delivers and where it is limited.
 *
 * The consumer takes each batch, touches it (or hashes it with --digest)
 * and releases it at once, so the figures are the pipeline's ceiling:
 * images/s and payload MB/s over the measured window (after --warmup
 * batches, which pay for thread start, first reads and cold caches), and
 * per stage items/s, busy %, wait % and queue fill (sl_pipeline_stats, the
 * difference between the end of the warmup and the end of the run). The
 * bottleneck is the stage whose threads are busiest on average: adding
 * threads to any other stage would not raise the rate.
 *
 * --digest hashes every batch's bytes, labels, record ids and epochs in
 * order (digest.c: a 128-bit hash built from xxHash64's lane round), so
 * two runs can be compared byte for byte: the same seed must give the same
 * digest for any --workers and --readers (pipeline.h, Determinism).
 *
 * Exit status: 0 done, 2 usage or runtime error (a pipeline error is
 * printed with its message).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "common/clock.h"
#include "digest.h"
#include "par_plan.h"
#include "pipeline/pipeline.h"
#include "pipeline_flags.h"

#define CMD "profile"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice profile --data DIR [pipeline options] [--seconds T | --batches N] [options]\n"
            "\n"
            "Run the input pipeline with a consumer that takes each batch and gives it straight back,\n"
            "and report the throughput it sustains (images/s, MB/s of records read), each stage's\n"
            "items/s, busy %%, wait %% and queue fill, skipped bad records, and the bottleneck: the\n"
            "stage whose threads are the busiest, with what to change.\n"
            "\n");
    pf_usage(f);
    fprintf(f,
            "                        (profile runs --epochs 0, forever, until --seconds or --batches)\n"
            "\n"
            "profile:\n"
            "  --seconds T           measure for T seconds after the warmup           (default 10)\n"
            "  --batches N           stop after N batches in all (warmup included) instead of a time\n"
            "  --warmup N            batches taken before measuring                  (default 2)\n"
            "  --json                print one JSON object instead of the table\n"
            "  --digest              print a 128-bit hash of every batch's data, labels, record ids\n"
            "                        and epochs, in order (\"digest: <hex>\"): equal digests mean\n"
            "                        byte-identical batches\n"
            "  --trace FILE          record a Chrome trace (chrome://tracing, ui.perfetto.dev) of\n"
            "                        reads, decodes and copies into FILE\n"
            "  --quiet               no progress line\n"
            "  -h, --help            this text\n"
            "\n"
            "The run also stops at the end of the data when --epochs is given; Ctrl-C (or SIGTERM)\n"
            "stops it early, within 0.1 s even while a remote read stalls, and still prints the\n"
            "report; a second Ctrl-C ends it at once. Exit: 0 done, 2 usage or runtime error.\n"
            "\n"
            "examples:\n"
            "  sluice profile --data data/imagenet --workers 8 --seconds 20\n"
            "  sluice profile --data data/fmnist --split test --image-size 28 --epochs 1 --digest\n"
            "  sluice profile --data data/imagenet --layout nhwc-u8 --device 0 --json --trace t.json\n");
}

/* ------------------------------------------------------------ options */
enum {
    OPT_SECONDS = 256, OPT_BATCHES, OPT_WARMUP, OPT_JSON, OPT_DIGEST, OPT_TRACE, OPT_QUIET,
};

typedef struct profile_opts {
    pf_flags pf;
    double seconds;       /* 0: no time limit (--batches) */
    uint64_t batches;     /* 0: no batch limit */
    uint64_t warmup;
    int json, digest, quiet;
    sl_par_plan par; /* workers and readers as chosen within --cpus (par_plan.c) */
    const char *trace;
} profile_opts;

static const struct option own_opts[] = {
    {"seconds", required_argument, NULL, OPT_SECONDS},
    {"batches", required_argument, NULL, OPT_BATCHES},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"json", no_argument, NULL, OPT_JSON},
    {"digest", no_argument, NULL, OPT_DIGEST},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* 0 ok, 2 usage error (printed), -1 --help printed. */
static int parse(int argc, char **argv, profile_opts *o)
{
    int seconds_given = 0;
    for (int c; (c = pf_getopt(&o->pf, argc, argv, own_opts)) != -1;) {
        switch (c) {
        case PF_GETOPT_ERROR: return 2;
        case 'h': usage(stdout); return -1;
        case OPT_SECONDS: {
            char *end;
            double t = strtod(optarg, &end);
            if (end == optarg || *end || !(t > 0) || !isfinite(t)) {
                cli_error(CMD, "--seconds: bad value '%s' (want a positive number)", optarg);
                return 2;
            }
            o->seconds = t;
            seconds_given = 1;
            break;
        }
        case OPT_BATCHES:
            if (cli_parse_u64(CMD, "--batches", optarg, &o->batches))
                return 2;
            if (!o->batches) {
                cli_error(CMD, "--batches: bad value '0' (want at least 1)");
                return 2;
            }
            break;
        case OPT_WARMUP:
            if (cli_parse_u64(CMD, "--warmup", optarg, &o->warmup))
                return 2;
            break;
        case OPT_JSON: o->json = 1; break;
        case OPT_DIGEST: o->digest = 1; break;
        case OPT_TRACE: o->trace = optarg; break;
        case OPT_QUIET: o->quiet = 1; break;
        }
    }
    if (optind < argc) {
        cli_error(CMD, "unexpected argument '%s' (the dataset goes after --data)", argv[optind]);
        return 2;
    }
    if (seconds_given && o->batches) {
        cli_error(CMD, "--seconds and --batches: give one of them");
        return 2;
    }
    if (o->batches)
        o->seconds = 0;
    if (o->trace && !*o->trace) {
        cli_error(CMD, "--trace: bad value '' (want a file name)");
        return 2;
    }
    return pf_finish(&o->pf) ? 2 : 0;
}

/* ------------------------------------------------------------ run */
/* Ctrl-C / SIGTERM (tools/signals.c): the first sets this flag, which the
 * loop below sees within STOP_POLL_MS even while a batch is awaited (a
 * remote read may stall for the whole retry budget); the second has the
 * signal's default action: the process ends at once. */
static const volatile int *g_stop;
#define STOP_POLL_MS 100

typedef struct run_result {
    uint64_t batches, samples;       /* all batches taken */
    uint64_t m_batches, m_samples;   /* in the measured window */
    double seconds;                  /* the measured window */
    double next_s;                   /* consumer time blocked in next, in the window */
    uint64_t warmup;                 /* warmup batches actually excluded (0 if the run was
                                      * shorter than --warmup: then all is measured) */
    int eof, interrupted;
    sl_pipeline_stats s0, s1;        /* at the window's start and at the end */
    sl_pipeline_tuning tune;         /* at the end (pipeline/tune.c) */
    sl_io_stats io0, io1;            /* remote I/O (bytesrc.h), the same two moments */
    char digest[33];
    char decoder[256];               /* sl_pipeline_decoder at the end */
} run_result;

/* A progress line on a terminal, at most every half second. */
static void progress(const profile_opts *o, const run_result *r, double t, double *last)
{
    if (t - *last < 0.5)
        return;
    *last = t;
    double rate = r->seconds > 0 ? (double)r->m_samples / r->seconds : 0;
    fprintf(stderr, "\r  %.1f s  %llu batches  %.0f images/s%s\033[K", t,
            (unsigned long long)r->batches, rate,
            r->batches < o->warmup ? "  (warming up)" : "");
    fflush(stderr);
}

static int run(const profile_opts *o, sl_pipeline *p, double t_create, run_result *r)
{
    digest dg;
    digest_init(&dg);
    int draw = !o->quiet && !o->json && cli_stderr_tty(), drew = 0, rc = SL_OK;
    int warmed = o->warmup == 0;
    uint64_t w_batches = 0, w_samples = 0;    /* taken before the window */
    double t_start = t_create, last = 0, next_s = 0; /* window start: create, or warmup end */
    volatile uint8_t sink = 0;
    memset(&r->s0, 0, sizeof r->s0); /* r->io0: taken before create (its readers start there) */
    for (;;) {
        double t = sl_now_s();
        if (*g_stop) {
            r->interrupted = 1;
            break;
        }
        if (o->batches && r->batches >= o->batches)
            break;
        if (o->seconds > 0 && warmed && t - t_start >= o->seconds)
            break;
        sl_batch *b;
        rc = sl_pipeline_next_wait(p, STOP_POLL_MS, &b);
        if (rc == SL_ETIMEDOUT) { /* not ready yet: look at the stop flag, wait on */
            sl_clear_error();
            rc = SL_OK;
            next_s += sl_now_s() - t;
            continue;
        }
        double t1 = sl_now_s();
        if (rc == SL_EOF) {
            r->eof = 1;
            rc = SL_OK;
            break;
        }
        if (rc)
            break;
        next_s += t1 - t;
        if (o->digest)
            digest_batch(&dg, b);
        else if (b->n) /* the free consumer: one byte of data and one label */
            sink ^= ((const uint8_t *)b->data)[0] ^ (uint8_t)b->labels[b->n - 1];
        r->batches++;
        r->samples += b->n;
        sl_pipeline_release(p, b);
        if (!warmed && r->batches == o->warmup) {
            /* the window starts now: what came before is the warmup's */
            if ((rc = sl_pipeline_stats_get(p, &r->s0)))
                break;
            sl_io_stats_get(&r->io0);
            warmed = 1;
            t_start = sl_now_s();
            next_s = 0;
            w_batches = r->batches;
            w_samples = r->samples;
        }
        r->m_batches = r->batches - w_batches;
        r->m_samples = r->samples - w_samples;
        r->seconds = sl_now_s() - t_start;
        if (draw) {
            progress(o, r, sl_now_s() - t_create, &last);
            drew = 1;
        }
    }
    (void)sink;
    if (drew)
        fputs("\r\033[K", stderr);
    if (rc)
        return rc;
    /* a run shorter than the warmup is measured whole, from create */
    r->warmup = warmed ? o->warmup : 0;
    r->seconds = sl_now_s() - t_start;
    r->next_s = next_s;
    if ((rc = sl_pipeline_tuning_get(p, &r->tune)) || (rc = sl_pipeline_stats_get(p, &r->s1)))
        return rc;
    sl_io_stats_get(&r->io1);
    sl_pipeline_decoder(p, r->decoder, sizeof r->decoder);
    if (o->digest)
        digest_final(&dg, r->digest);
    return SL_OK;
}

/* ------------------------------------------------------------ report */

/* Remote I/O over the measured window (zero requests: local data). */
typedef struct io_fig {
    uint64_t requests, retries, failures;
    double mb_per_sec;
    uint32_t inflight_peak;
    double busy_pct; /* wall time with a request in flight */
} io_fig;

static int io_figures(const run_result *r, io_fig *f)
{
    const sl_io_stats *a = &r->io0, *b = &r->io1;
    memset(f, 0, sizeof *f);
    f->requests = b->requests - a->requests;
    if (f->requests == 0)
        return 0;
    f->retries = b->retries - a->retries;
    f->failures = b->failures - a->failures;
    f->mb_per_sec = r->seconds > 0 ? (double)(b->bytes - a->bytes) / 1e6 / r->seconds : 0;
    f->inflight_peak = b->inflight_peak;
    f->busy_pct = r->seconds > 0 ? 100.0 * (double)(b->busy_ns - a->busy_ns) * 1e-9 / r->seconds
                                 : 0;
    return 1;
}

typedef struct stage_fig {
    const char *name;
    unsigned threads;
    uint64_t items;
    double items_per_sec, mb_per_sec, busy_pct, wait_pct, queue_fill;
} stage_fig;

static double pct(double part, double whole)
{
    double v = whole > 0 ? 100.0 * part / whole : 0.0;
    return v < 0 ? 0 : v > 100 ? 100 : v;
}

/* Per-stage figures over the window: differences of s1 and s0 (the mean
 * queue fill is the pipeline's own, since create). Busy and wait are per
 * thread and clamped to 0..100 %: threads add an interval to the totals
 * when it ends (pipeline/stats.c), so one that began before the window can
 * push a short window's sum past its length, and the shuffle's one
 * "thread" is run by whichever workers hold the lock, whose waits overlap.
 * Returns the stage count. */
static unsigned stage_figures(const run_result *r, stage_fig *f)
{
    double dt = r->s1.elapsed_s - r->s0.elapsed_s;
    if (!(dt > 0))
        dt = r->seconds > 0 ? r->seconds : 1e-9;
    unsigned n = r->s1.nstages <= SL_PIPELINE_MAX_STAGES ? r->s1.nstages : SL_PIPELINE_MAX_STAGES;
    for (unsigned i = 0; i < n; i++) {
        const sl_stage_stats *a = &r->s0.stages[i], *b = &r->s1.stages[i];
        double thr = b->threads ? (double)b->threads : 1.0;
        f[i].name = b->name;
        f[i].threads = b->threads;
        f[i].items = b->items - a->items;
        f[i].items_per_sec = (double)f[i].items / dt;
        f[i].mb_per_sec = (double)(b->bytes - a->bytes) / dt * 1e-6;
        f[i].busy_pct = pct(b->busy_s - a->busy_s, thr * dt);
        f[i].wait_pct = pct(b->wait_in_s - a->wait_in_s + b->wait_out_s - a->wait_out_s, thr * dt);
        f[i].queue_fill = b->queue_fill;
    }
    return n;
}

/* The stage whose threads are busiest on average, and a one-line reason
 * (what to change) into buf. -1 when there are no stages. */
static int bottleneck(const stage_fig *f, unsigned n, int gpu_decode, char *buf, size_t cap)
{
    int best = -1;
    for (unsigned i = 0; i < n; i++)
        if (best < 0 || f[i].busy_pct > f[best].busy_pct)
            best = (int)i;
    if (best < 0) {
        snprintf(buf, cap, "no stage figures");
        return -1;
    }
    const stage_fig *s = &f[best];
    double busy = s->busy_pct;
    if (!strcmp(s->name, "read"))
        snprintf(buf, cap, "read: readers %.0f%% busy - add --readers or --cycle, or read from "
                           "faster storage", busy);
    else if (!strcmp(s->name, "shuffle"))
        snprintf(buf, cap, "shuffle: %.0f%% busy - use a smaller --shuffle buffer:N or --shuffle "
                           "global", busy);
    else if (!strcmp(s->name, "map"))
        snprintf(buf, cap, "map: workers %.0f%% busy - add --workers or reduce --image-size", busy);
    else if (!strcmp(s->name, "load") && gpu_decode)
        snprintf(buf, cap, "load: the GPU decode's submits (nvJPEG, crop-resize kernel, copies) "
                           "%.0f%% busy - the GPU's JPEG decoder, or a smaller --image-size", busy);
    else if (!strcmp(s->name, "load"))
        snprintf(buf, cap, "load: copies %.0f%% busy - host-to-device bandwidth; --layout nhwc-u8 "
                           "moves 4x fewer bytes", busy);
    else
        snprintf(buf, cap, "%s: %.0f%% busy", s->name, busy);
    if (busy < 50) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, " (no stage is over 50%% busy: the threads mostly wait - "
                                       "see wait %% and queue fill)");
    }
    return best;
}

static double images_per_sec(const run_result *r)
{
    return r->seconds > 0 ? (double)r->m_samples / r->seconds : 0;
}

/* MB/s of records read: the "read" stage's bytes (the first stage if none
 * is named so). */
static double read_mb_per_sec(const stage_fig *f, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(f[i].name, "read"))
            return f[i].mb_per_sec;
    return n ? f[0].mb_per_sec : 0;
}

static void print_text(const profile_opts *o, const run_result *r)
{
    const sl_pipeline_config *c = &o->pf.cfg;
    stage_fig f[SL_PIPELINE_MAX_STAGES];
    unsigned n = stage_figures(r, f);
    char why[256], sh[48];
    int bn = bottleneck(f, n, !strncmp(r->decoder, "gpu", 3), why, sizeof why);
    printf("data: %s (split %s): %llu records per epoch, batch %u, %dx%d %s, %s, shuffle %s",
           c->data, c->split, (unsigned long long)r->s1.records_per_epoch, c->batch, c->height,
           c->width, pf_layout_name(c->layout), c->transform == SL_TRANSFORM_EVAL ? "eval" : "train",
           pf_shuffle_name(c, sh, sizeof sh));
    /* an epoch fits: the buffer is then rank 0's share (the largest) */
    uint64_t share = c->rank_split == SL_SPLIT_RECORDS
                         ? sl_split_samples(r->s1.records_per_epoch_world, 0, c->world)
                         : r->s1.records_per_epoch;
    if (c->shuffle == SL_SHUFFLE_BUFFER && share > 0 && r->s1.shuffle_buffer == share)
        printf(" (an epoch fits: %llu records, each epoch a permutation)",
               (unsigned long long)r->s1.shuffle_buffer);
    else if (c->shuffle == SL_SHUFFLE_BUFFER)
        printf(" (effective %llu records)", (unsigned long long)r->s1.shuffle_buffer);
    printf(", seed %llu, device %d\n", (unsigned long long)c->seed, c->device);
    printf("decode: %s\n", r->decoder);
    char tuning[768];
    pf_tuning_text(&r->tune, tuning, sizeof tuning);
    printf("tuning: %s\n", tuning);
    printf("parallelism: %u workers, %u readers on %d cores (%s; %s)\n", c->workers, c->readers,
           o->par.cpus, o->par.reason, o->par.budget);
    printf("measured %llu batches, %llu images in %.2f s", (unsigned long long)r->m_batches,
           (unsigned long long)r->m_samples, r->seconds);
    if (r->warmup)
        printf(" after %llu warmup batches", (unsigned long long)r->warmup);
    else if (o->warmup)
        printf(" (fewer than --warmup %llu batches: measured from the start)",
               (unsigned long long)o->warmup);
    printf("%s\n", r->eof ? "; end of data" : r->interrupted ? "; interrupted" : "");
    printf("  images/s   %.1f\n", images_per_sec(r));
    printf("  MB/s       %.2f (records read)\n", read_mb_per_sec(f, n));
    printf("  consumer   waited %.1f%% of the time in sl_pipeline_next\n", pct(r->next_s, r->seconds));
    io_fig io;
    if (io_figures(r, &io))
        printf("  remote     %.2f MB/s in %llu requests, up to %u in flight, in flight %.0f%% of "
               "the time, %llu retries, %llu failed\n", io.mb_per_sec,
               (unsigned long long)io.requests, io.inflight_peak, io.busy_pct,
               (unsigned long long)io.retries, (unsigned long long)io.failures);
    printf("\n  %-8s %7s %12s %8s %8s %11s\n", "stage", "threads", "items/s", "busy %", "wait %",
           "queue fill");
    for (unsigned i = 0; i < n; i++)
        printf("  %-8s %7u %12.1f %8.1f %8.1f %11.2f\n", f[i].name, f[i].threads,
               f[i].items_per_sec, f[i].busy_pct, f[i].wait_pct, f[i].queue_fill);
    printf("\nbad records: %llu\n", (unsigned long long)r->s1.bad_records);
    uint64_t listed = r->s1.bad_records < SL_PIPELINE_MAX_BAD_REPORT ? r->s1.bad_records
                                                                      : SL_PIPELINE_MAX_BAD_REPORT;
    for (uint64_t i = 0; i < listed; i++)
        printf("  %s\n", r->s1.bad[i]);
    if (listed < r->s1.bad_records)
        printf("  ... and %llu more\n", (unsigned long long)(r->s1.bad_records - listed));
    printf("bottleneck: %s\n", bn >= 0 ? why : "unknown (the pipeline reported no stages)");
    if (o->digest)
        printf("digest: %s\n", r->digest);
    if (o->trace)
        printf("trace: %s (open in chrome://tracing or ui.perfetto.dev)\n", o->trace);
}

/* Every cJSON_Add* result goes through here: NULL means out of memory. */
static int json_ok = 1;
static void *jchk(void *p)
{
    if (!p)
        json_ok = 0;
    return p;
}

static int print_json(const profile_opts *o, const run_result *r)
{
    const sl_pipeline_config *c = &o->pf.cfg;
    stage_fig f[SL_PIPELINE_MAX_STAGES];
    unsigned n = stage_figures(r, f);
    char why[256], sh[48];
    int bn = bottleneck(f, n, !strncmp(r->decoder, "gpu", 3), why, sizeof why);
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto oom;
    json_ok = 1;
    jchk(cJSON_AddNumberToObject(root, "images_per_sec", images_per_sec(r)));
    jchk(cJSON_AddNumberToObject(root, "mb_per_sec", read_mb_per_sec(f, n)));
    jchk(cJSON_AddNumberToObject(root, "batches", (double)r->batches));
    jchk(cJSON_AddNumberToObject(root, "samples", (double)r->samples));
    jchk(cJSON_AddNumberToObject(root, "measured_batches", (double)r->m_batches));
    jchk(cJSON_AddNumberToObject(root, "measured_samples", (double)r->m_samples));
    jchk(cJSON_AddNumberToObject(root, "seconds", r->seconds));
    jchk(cJSON_AddNumberToObject(root, "warmup", (double)r->warmup));
    jchk(cJSON_AddNumberToObject(root, "consumer_wait_pct", pct(r->next_s, r->seconds)));
    jchk(cJSON_AddBoolToObject(root, "end_of_data", r->eof));
    jchk(cJSON_AddBoolToObject(root, "interrupted", r->interrupted));
    jchk(cJSON_AddNumberToObject(root, "records_per_epoch", (double)r->s1.records_per_epoch));
    jchk(cJSON_AddNumberToObject(root, "shuffle_buffer", (double)r->s1.shuffle_buffer));
    jchk(cJSON_AddNumberToObject(root, "bad_records", (double)r->s1.bad_records));
    cJSON *bad = jchk(cJSON_AddArrayToObject(root, "bad"));
    for (uint64_t i = 0; bad && i < r->s1.bad_records && i < SL_PIPELINE_MAX_BAD_REPORT; i++) {
        cJSON *str = cJSON_CreateString(r->s1.bad[i]);
        if (!str || !cJSON_AddItemToArray(bad, str)) {
            cJSON_Delete(str);
            json_ok = 0;
        }
    }
    cJSON *stages = jchk(cJSON_AddArrayToObject(root, "stages"));
    for (unsigned i = 0; stages && i < n; i++) {
        cJSON *s = jchk(cJSON_CreateObject());
        if (!s || !cJSON_AddItemToArray(stages, s)) {
            cJSON_Delete(s);
            json_ok = 0;
            break;
        }
        jchk(cJSON_AddStringToObject(s, "name", f[i].name));
        jchk(cJSON_AddNumberToObject(s, "threads", f[i].threads));
        jchk(cJSON_AddNumberToObject(s, "items", (double)f[i].items));
        jchk(cJSON_AddNumberToObject(s, "items_per_sec", f[i].items_per_sec));
        jchk(cJSON_AddNumberToObject(s, "mb_per_sec", f[i].mb_per_sec));
        jchk(cJSON_AddNumberToObject(s, "busy_pct", f[i].busy_pct));
        jchk(cJSON_AddNumberToObject(s, "wait_pct", f[i].wait_pct));
        jchk(cJSON_AddNumberToObject(s, "queue_fill", f[i].queue_fill));
    }
    io_fig io;
    if (io_figures(r, &io)) {
        cJSON *j = jchk(cJSON_AddObjectToObject(root, "remote"));
        if (j) {
            jchk(cJSON_AddNumberToObject(j, "mb_per_sec", io.mb_per_sec));
            jchk(cJSON_AddNumberToObject(j, "requests", (double)io.requests));
            jchk(cJSON_AddNumberToObject(j, "inflight_peak", io.inflight_peak));
            jchk(cJSON_AddNumberToObject(j, "inflight_pct", io.busy_pct));
            jchk(cJSON_AddNumberToObject(j, "retries", (double)io.retries));
            jchk(cJSON_AddNumberToObject(j, "failures", (double)io.failures));
        }
    } else {
        jchk(cJSON_AddNullToObject(root, "remote"));
    }
    if (bn >= 0)
        jchk(cJSON_AddStringToObject(root, "bottleneck", f[bn].name));
    else
        jchk(cJSON_AddNullToObject(root, "bottleneck"));
    jchk(cJSON_AddStringToObject(root, "bottleneck_reason", why));
    if (o->digest)
        jchk(cJSON_AddStringToObject(root, "digest", r->digest));
    if (o->trace)
        jchk(cJSON_AddStringToObject(root, "trace", o->trace));
    char par[1024];
    sl_par_json(&o->par, par, sizeof par);
    jchk(cJSON_AddRawToObject(root, "parallelism", par));
    pf_memory_json(&o->pf, par, sizeof par);
    jchk(cJSON_AddRawToObject(root, "memory", par));
    pf_tuning_json(&r->tune, par, sizeof par);
    jchk(cJSON_AddRawToObject(root, "tuning", par));
    cJSON *cfg = jchk(cJSON_AddObjectToObject(root, "config"));
    if (cfg) {
        jchk(cJSON_AddStringToObject(cfg, "data", c->data));
        jchk(cJSON_AddStringToObject(cfg, "split", c->split));
        jchk(cJSON_AddNumberToObject(cfg, "batch", c->batch));
        jchk(cJSON_AddNumberToObject(cfg, "height", c->height));
        jchk(cJSON_AddNumberToObject(cfg, "width", c->width));
        jchk(cJSON_AddStringToObject(cfg, "layout", pf_layout_name(c->layout)));
        jchk(cJSON_AddStringToObject(cfg, "transform",
                                     c->transform == SL_TRANSFORM_EVAL ? "eval" : "train"));
        jchk(cJSON_AddStringToObject(cfg, "shuffle", pf_shuffle_name(c, sh, sizeof sh)));
        jchk(cJSON_AddNumberToObject(cfg, "seed", (double)c->seed));
        jchk(cJSON_AddNumberToObject(cfg, "epochs", (double)c->epochs));
        jchk(cJSON_AddNumberToObject(cfg, "workers", c->workers));
        jchk(cJSON_AddNumberToObject(cfg, "readers", c->readers));
        jchk(cJSON_AddNumberToObject(cfg, "prefetch", c->prefetch));
        jchk(cJSON_AddNumberToObject(cfg, "device", c->device));
        jchk(cJSON_AddStringToObject(cfg, "decode", pf_decode_name(c->decode)));
        jchk(cJSON_AddStringToObject(cfg, "decoder", r->decoder));
    }
    char *text = json_ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        goto oom;
    puts(text);
    cJSON_free(text);
    return 0;
oom:
    cli_error(CMD, "--json: out of memory");
    return 2;
}

/* ------------------------------------------------------------ command */
int cmd_profile(int argc, char **argv)
{
    profile_opts o = {.seconds = 10, .warmup = 2};
    pf_init(&o.pf, CMD);
    o.pf.cfg.epochs = 0; /* forever: --seconds or --batches ends the run */
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* Ctrl-C from here on: the data check below may wait on a server too */
    cli_stop stop;
    g_stop = cli_stop_catch(&stop);
    if (pf_check_data(&o.pf)) {
        cli_stop_restore(&stop);
        return 2;
    }
    sl_par_request q = SL_PAR_REQUEST_INIT;
    q.job = SL_PAR_PIPELINE;
    if (par_plan_apply(CMD, &o.pf, &q, &o.par, stderr)) {
        cli_stop_restore(&stop);
        return 2;
    }

    run_result r;
    memset(&r, 0, sizeof r);
    sl_pipeline *p = NULL;
    double t_create = sl_now_s();
    sl_io_stats_get(&r.io0);
    if ((rc = sl_pipeline_create(&o.pf.cfg, &p))) {
        rc = cli_fail(CMD, rc);
        goto restore;
    }
    if (o.trace && (rc = sl_pipeline_trace_start(p, (size_t)1 << 20))) {
        rc = cli_fail(CMD, rc);
        goto destroy;
    }
    if ((rc = run(&o, p, t_create, &r))) {
        rc = cli_fail(CMD, rc);
        goto destroy;
    }
    if (o.trace && (rc = sl_pipeline_trace_write(p, o.trace))) {
        rc = cli_fail(CMD, rc);
        goto destroy;
    }
    if (o.json) {
        rc = print_json(&o, &r);
    } else {
        print_text(&o, &r);
        rc = 0;
    }
    if (fflush(stdout)) {
        cli_error(CMD, "writing the report: %s", strerror(errno));
        rc = 2;
    }
destroy:
    sl_pipeline_destroy(p);
restore:
    cli_stop_restore(&stop);
    return rc;
}

/*
 * tools/pipeline_flags.h - the input-pipeline options shared by the
 * commands that run a pipeline (`sluice profile`, `sluice train`): one
 * option table, one parser into an sl_pipeline_config, one usage block, so
 * every command spells and documents them the same way.
 *
 * pf_getopt walks argv over these options and the command's own: it
 * applies the pipeline options itself (pf_parse) and hands back the rest.
 * After the loop, pf_finish checks what needs all the options (--data
 * given, --eval defaults).
 *
 *     pf_flags pf;
 *     pf_init(&pf, CMD);
 *     pf.cfg.epochs = 0;                      // a command's own default
 *     for (int c; (c = pf_getopt(&pf, argc, argv, own_opts)) != -1;)
 *         switch (c) { case PF_GETOPT_ERROR: return 2; case 'h': ...; case OPT_X: ... }
 *     if (pf_finish(&pf)) return 2;
 *     sl_pipeline_create(&pf.cfg, &p);
 *
 * Strings in cfg point into argv (valid for the command's run), but for
 * cfg.data: its redacted copy (bytesrc.h's sl_path_redact: a password or a
 * presigned URL's signature never reaches a message or a report), which
 * pf_redacted also gives for the path arguments of the other commands.
 * Threading: none (CLI thread only).
 */
#ifndef SL_PIPELINE_FLAGS_H
#define SL_PIPELINE_FLAGS_H

#include <getopt.h>
#include <stdio.h>

#include "pipeline/pipeline.h"
#include "records/bytesrc.h"

enum {
    PF_OPT_FIRST = 0x1000,
    PF_OPT_DATA = PF_OPT_FIRST,
    PF_OPT_SPLIT,
    PF_OPT_IMAGE_SIZE,
    PF_OPT_BATCH,
    PF_OPT_WORKERS,
    PF_OPT_READERS,
    PF_OPT_PREFETCH,
    PF_OPT_CYCLE,
    PF_OPT_BLOCK,
    PF_OPT_SHUFFLE,
    PF_OPT_SEED,
    PF_OPT_EPOCHS,
    PF_OPT_EVAL,
    PF_OPT_LAYOUT,
    PF_OPT_DROP_REMAINDER,
    PF_OPT_ON_ERROR,
    PF_OPT_RANK,
    PF_OPT_WORLD,
    PF_OPT_DEVICE,
    PF_OPT_LABEL_OFFSET,
    PF_OPT_MAX_PIXELS,
    PF_OPT_DECODE,
    PF_OPT_IO_RETRIES,
    PF_OPT_IO_TIMEOUT,
    PF_OPT_IO_INFLIGHT,
    PF_OPT_LABEL_KEY,
    PF_OPT_IO_RETRY_BUDGET,
    PF_OPT_CA_BUNDLE,
    PF_OPT_CPUS,
    PF_OPT_MEMORY_BUDGET,
    PF_OPT_LAST = PF_OPT_MEMORY_BUDGET,
};

#define PF_NOPTS (PF_OPT_LAST - PF_OPT_FIRST + 1)

/* getopt_long entries for the options above (PF_NOPTS of them, no
 * terminator). */
extern const struct option pf_long_opts[PF_NOPTS];

typedef struct pf_flags {
    sl_pipeline_config cfg;
    const char *cmd;          /* for messages: "sluice <cmd>: --batch: ..." */
    int shuffle_given;        /* --shuffle was on the command line */
    int split_given;          /* --split was on the command line */
    int getopt_started;       /* pf_getopt has reset getopt's state */
    sl_io_opts io;            /* --io-*: remote reads (records/bytesrc.h), set by pf_finish */
    int cpus;                 /* --cpus: the budget (tools/par_plan.c); 0 = the usable cores */
    uint64_t memory_budget;   /* --memory-budget: bytes (par_plan.c fits the pipelines in
                               * them: pipeline/memory.c); 0 = none */
    /* par_plan_apply's fit, with a budget: the estimate of each pipeline, how
     * many there are, what was shrunk ("" = nothing), and the storage of a
     * shrunk requests-in-flight (cfg.io points at it then) */
    sl_pipeline_memory mem;
    unsigned mem_pipelines;
    int mem_eval;             /* set before par_plan_apply: each pipeline has an evaluation
                               * pipeline beside it (train with an eval split), which the
                               * fit counts (sl_memory_fit.eval_beside) */
    char mem_eval_data[4096]; /* where it reads ("": not known, the training split's
                               * sizes stand in) */
    char mem_eval_split[64];
    char mem_shrunk[160];
    sl_io_opts mem_io;
    uint64_t rss_start;       /* VmRSS (bytes) when pf_rss_mark ran; 0 = not marked */
} pf_flags;

/* The name of a path argument from now on: sl_path_redact's copy, kept
 * for the process's life (the secrets go to bytesrc's table); NULL, with
 * the error printed for cmd, when out of memory. */
const char *pf_redacted(const char *cmd, const char *path);

/* cfg = SL_PIPELINE_CONFIG_INIT; cmd names the command in messages. */
void pf_init(pf_flags *f, const char *cmd);
/* Apply option code (PF_OPT_*) with its value (NULL for flags). 0 on
 * success; -1 after printing "sluice <cmd>: --opt: bad value 'x' (...)". */
int pf_parse(pf_flags *f, int code, const char *arg);
/* The next option of argv that is not a pipeline option: its code from
 * own (a getopt_long table with its {NULL} terminator, at most
 * PF_MAX_OWN_OPTS entries) or 'h' for -h; -1 at the end (optind is then the
 * first operand). Pipeline options are applied with pf_parse. A bad
 * pipeline value, a missing value or an unknown option prints
 * "sluice <cmd>: ..." and gives PF_GETOPT_ERROR. optarg is the value. */
#define PF_GETOPT_ERROR (-2)
#define PF_MAX_OWN_OPTS 64
int pf_getopt(pf_flags *f, int argc, char **argv, const struct option *own);
/* After all options: --data is required; --eval without --shuffle reads in
 * order (shuffle none, fixed file order). 0 or -1 (message printed). */
int pf_finish(pf_flags *f);
/* Resolve --data (records.h's sl_dataset_resolve) and check that it has the
 * split to read, before any thread starts; say once on stderr when shards
 * of it have no index file (the pipeline scans those). 0 or -1 (message
 * printed). */
int pf_check_data(pf_flags *f);
/* "SIZE[K|M|G|T]" (binary multiples, an optional "iB" or "B" after them:
 * 512M, 4G, 1.5GiB, 1048576) into *out, > 0. 0 or -1. */
int pf_parse_bytes(const char *s, uint64_t *out);
/* Before the pipelines start (par_plan_apply, with a budget): note the
 * process's RSS and reset its peak (/proc/self/clear_refs "5", Linux 4.0),
 * so that the peak read later is the run's, not the start-up's (a CUDA
 * build's initializers take ~220 MiB and give most of it back). */
void pf_rss_mark(pf_flags *f);
/* The memory object of --json: {"budget": B, "pipelines": N, "total": T
 * (all pipelines), "parts": {"read_window": .., ...} (one pipeline's),
 * "workers", "prefetch", "read_window", "shrunk": "..", "rss_start": the
 * RSS at the mark, "rss_peak": the peak since (bytes; null when the peak
 * could not be reset)}, or null without --memory-budget. */
void pf_memory_json(const pf_flags *f, char *buf, size_t cap);
/* What the online tuning did (pipeline/tune.c), for the reports: "workers
 * 1..4 of 4 (now 2, mean 2.6), prefetch 3..6 of 6 (now 4); 7 changes in 40
 * windows, the last: ..." or "off (--workers and --prefetch given)"; and as
 * JSON {"knobs": [...], "workers": .., "workers_max": .., "workers_lo":..,
 * "workers_hi": .., "workers_mean": .., "prefetch": .., "prefetch_max": ..,
 * "prefetch_lo": .., "prefetch_hi": .., "windows": .., "changes": ..,
 * "last": ".."}. */
void pf_tuning_text(const sl_pipeline_tuning *t, char *buf, size_t cap);
void pf_tuning_json(const sl_pipeline_tuning *t, char *buf, size_t cap);
/* The options block of a usage text, with defaults. */
void pf_usage(FILE *out);
/* Names for printing: "nchw-f32", "buffer:10000", ... (buf for the latter). */
const char *pf_layout_name(sl_layout l);
const char *pf_decode_name(sl_decode_mode m); /* "cpu", "gpu", "auto" */
const char *pf_shuffle_name(const sl_pipeline_config *cfg, char *buf, size_t cap);

#endif /* SL_PIPELINE_FLAGS_H */

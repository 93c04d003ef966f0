/*
 * tools/cmd_convert_task.c - the planned conversion of `sluice convert`, a
 * thin client of records.h's sl_convert_plan / sl_convert_task /
 * sl_convert_finish_plan:
 *
 *   sluice convert --from ... --out OUT --name NAME [options] --plan-out PLAN [--tasks N]
 *   sluice convert --plan PLAN --task K --tasks N [--threads T] [--strict] [--no-fsync] [--quiet]
 *   sluice convert --plan PLAN --finish [--threads T] [--no-fsync] [--quiet]
 *
 * A task's options come from the plan; an option that would change the
 * bytes (--quality, --shards, ...) is refused with --plan, naming it.
 *
 * Exit status: task: 0 done, 1 an input was undecodable under --strict,
 * 2 usage or runtime error (a plan refused, an output that cannot be
 * written), 128 + the signal when one stopped it. finish: 0 complete and
 * dataset.json written, 1 shards missing or damaged (each named, with its
 * task), 2 usage or runtime error.
 */
#include "cmd_convert_task.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "convert_progress.h"

#define CMD "convert"

int convert_is_planned(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan") || !strncmp(argv[i], "--plan=", 7))
            return 1;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice convert --plan PLAN --task K --tasks N [--threads T] [--strict] [--no-fsync] [--quiet]\n"
            "       sluice convert --plan PLAN --finish [--threads T] [--no-fsync] [--quiet]\n"
            "\n"
            "The steps of a conversion on many machines. First, on one machine:\n"
            "  sluice convert --from list|folder IN --out OUT --name NAME [options] --plan-out PLAN [--tasks N]\n"
            "lists and orders the inputs, assigns them to shards and the shards to N tasks (default:\n"
            "one per shard), and writes PLAN (JSON; a path or an s3:// URL). OUT may be s3://BUCKET/PREFIX.\n"
            "Then each task, anywhere that reads PLAN and the inputs and writes OUT (a Slurm array\n"
            "index, a Kubernetes completion index, a Ray task):\n"
            "  --plan PLAN           the plan (path or URL)\n"
            "  --task K              which task, 0..N-1\n"
            "  --tasks N             the task count the plan was cut for (checked)\n"
            "  --threads T           worker threads; 0 = one per core              (default 0)\n"
            "  --strict              stop at the first undecodable input (exit 1)\n"
            "  --no-fsync            do not fsync shards (scratch output)\n"
            "  --quiet               no progress line\n"
            "A task writes only its own shards, each with its index and a receipt; a shard whose\n"
            "receipt is there is kept, so a task run again (or by two workers at once) finishes with\n"
            "one whole copy of each shard, the same bytes. Last, once:\n"
            "  --finish              check every shard (present, CRCs, counts against the plan), write\n"
            "                        the indexes that are missing and dataset.json, and list the\n"
            "                        inputs each task skipped; exit 1 naming each missing or damaged\n"
            "                        shard and the task to run again\n"
            "The output is the bytes of a one-machine `sluice convert` of the same inputs and options,\n"
            "for any N and any retries (TFRecord and WebDataset; LMDB is one-machine only).\n"
            "Exit: task 0 done, 1 undecodable input under --strict, 2 error; finish 0 complete,\n"
            "1 incomplete, 2 error.\n");
}

/* ------------------------------------------------------- --plan-out */
int convert_plan_out(const sl_convert_config *cfg, const convert_plan_opts *po)
{
    sl_convert_plan_result r;
    int rc = sl_convert_plan(cfg, po->plan_out, po->tasks, &r);
    if (rc)
        return cli_fail(CMD, rc);
    char b[32];
    printf("planned %llu inputs -> %u shards in %u task%s: %s (%s); then sluice convert --plan %s "
           "--task K --tasks %u for K in 0..%u, and --finish\n",
           (unsigned long long)r.inputs, r.shards, r.tasks, r.tasks == 1 ? "" : "s", po->plan_out,
           cli_bytes(b, sizeof b, r.plan_bytes), po->plan_out, r.tasks, r.tasks - 1);
    return 0;
}

/* ------------------------------------------------------- finish reports */
typedef struct report {
    progress *p;
    unsigned *per_task;    /* skipped inputs per task */
    unsigned ntasks;
} report;

static void on_problem(void *arg, unsigned shard, unsigned task, const char *file, const char *what)
{
    report *r = arg;
    clear_line(r->p);
    fprintf(stderr, "shard %u (%s, task %u): %s\n", shard, file, task, what);
}

static void on_task_skipped(void *arg, unsigned task, const char *input, const char *reason)
{
    report *r = arg;
    if (task >= r->ntasks) {
        unsigned *n = realloc(r->per_task, (task + 1) * sizeof *n);
        if (!n)
            return;
        memset(n + r->ntasks, 0, (task + 1 - r->ntasks) * sizeof *n);
        r->per_task = n;
        r->ntasks = task + 1;
    }
    r->per_task[task]++;
    fprintf(stderr, "skipped (task %u): %s: %s\n", task, input, reason);
}

/* ------------------------------------------------------- --plan */
enum { OPT_PLAN = 256, OPT_TASK, OPT_TASKS, OPT_FINISH, OPT_THREADS, OPT_STRICT, OPT_NO_FSYNC, OPT_QUIET };

static const struct option long_opts[] = {
    {"plan", required_argument, NULL, OPT_PLAN},
    {"task", required_argument, NULL, OPT_TASK},
    {"tasks", required_argument, NULL, OPT_TASKS},
    {"finish", no_argument, NULL, OPT_FINISH},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"strict", no_argument, NULL, OPT_STRICT},
    {"no-fsync", no_argument, NULL, OPT_NO_FSYNC},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int run_finish(sl_convert_task_config *tc, progress *p)
{
    report r = {.p = p};
    sl_convert_finish_result res;
    tc->problem = on_problem;
    tc->task_skipped = on_task_skipped;
    tc->report_arg = &r;
    int rc = sl_convert_finish_plan(tc, &res);
    clear_line(p);
    unsigned total = 0;
    for (unsigned k = 0; k < r.ntasks; k++)
        total += r.per_task[k];
    if (total) {
        fprintf(stderr, "skipped inputs per task:");
        for (unsigned k = 0; k < r.ntasks; k++)
            if (r.per_task[k])
                fprintf(stderr, " task %u: %u;", k, r.per_task[k]);
        fprintf(stderr, " %u in all\n", total);
    }
    free(r.per_task);
    if (rc == SL_ENOENT || rc == SL_ECORRUPT) {
        if (res.missing || res.damaged) {
            cli_fail(CMD, rc);
            return 1;
        }
        return cli_fail(CMD, rc);
    }
    if (rc)
        return cli_fail(CMD, rc);
    char b[32];
    printf("finished: %llu inputs -> %llu records in %u shards (%s); %llu skipped; %u index%s "
           "written; checked in %.1f s\n",
           (unsigned long long)res.total.inputs, (unsigned long long)res.total.records,
           res.total.shards, cli_bytes(b, sizeof b, res.total.bytes),
           (unsigned long long)res.total.skipped, res.indexes_written,
           res.indexes_written == 1 ? "" : "es", sl_now_s() - p->t0);
    return 0;
}

static int run_task(sl_convert_task_config *tc, progress *p)
{
    sl_convert_result res;
    cli_stop stop;
    tc->progress = on_progress;
    tc->progress_arg = p;
    tc->skipped = on_skipped;
    tc->skipped_arg = p;
    tc->cancel = cli_stop_catch(&stop);
    int rc = sl_convert_task(tc, &res);
    int sig = cli_stop_restore(&stop);
    clear_line(p);
    if (rc == SL_ECANCELED && sig) {
        cli_fail(CMD, rc);
        cli_error(CMD, "stopped by %s: run the same task again to finish it", cli_stop_name(sig));
        return 128 + sig;
    }
    if (rc) {
        cli_fail(CMD, rc);
        return rc == SL_EIMAGE && tc->strict ? 1 : 2;
    }
    char b[32];
    printf("task %u of %u: %llu inputs -> %llu records in %u shard%s (%s) in %.1f s; %llu skipped",
           tc->task, tc->tasks, (unsigned long long)res.inputs, (unsigned long long)res.records,
           res.shards, res.shards == 1 ? "" : "s", cli_bytes(b, sizeof b, res.bytes),
           sl_now_s() - p->t0, (unsigned long long)res.skipped);
    if (res.shards_kept)
        printf("; %u whole before this run, kept", res.shards_kept);
    printf("\n");
    return 0;
}

int cmd_convert_planned(int argc, char **argv)
{
    sl_convert_task_config tc = SL_CONVERT_TASK_CONFIG_INIT;
    int have_task = 0, have_tasks = 0, finish = 0, quiet = 0, v;
    opterr = 0;
    optind = 1;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", long_opts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_PLAN: tc.plan = optarg; break;
        case OPT_TASK:
            if (cli_parse_int(CMD, "--task", optarg, 0, 99998, &v))
                return 2;
            tc.task = (unsigned)v;
            have_task = 1;
            break;
        case OPT_TASKS:
            if (cli_parse_int(CMD, "--tasks", optarg, 1, 99999, &v))
                return 2;
            tc.tasks = (unsigned)v;
            have_tasks = 1;
            break;
        case OPT_FINISH: finish = 1; break;
        case OPT_THREADS:
            if (cli_parse_int(CMD, "--threads", optarg, 0, 256, &v))
                return 2;
            tc.threads = (unsigned)v;
            break;
        case OPT_STRICT: tc.strict = 1; break;
        case OPT_NO_FSYNC: tc.fsync = 0; break;
        case OPT_QUIET: quiet = 1; break;
        case ':':
            cli_error(CMD, "%s: needs a value (see sluice convert --plan PLAN --help)", argv[optind - 1]);
            return 2;
        default:
            cli_error(CMD, "%s does not go with --plan: the plan fixes the inputs and the options "
                      "(cut a new plan with --plan-out to change them; see sluice convert --plan "
                      "PLAN --help)", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        cli_error(CMD, "unexpected argument '%s' with --plan (the plan names the inputs)", argv[optind]);
        return 2;
    }
    if (finish && (have_task || have_tasks || tc.strict)) {
        cli_error(CMD, "--finish checks every task's shards: leave --task, --tasks and --strict out");
        return 2;
    }
    if (!finish && (!have_task || !have_tasks)) {
        cli_error(CMD, "--plan needs --task K --tasks N (write task K's shards) or --finish");
        return 2;
    }
    progress p;
    progress_init(&p, quiet);
    return finish ? run_finish(&tc, &p) : run_task(&tc, &p);
}

/*
 * tools/sluice.c - the sluice command: dispatches to one file per subcommand.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common/cuda_probe.h"
#include "records/records.h"
#include "train/train.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"convert", cmd_convert, "convert images (folder, list, IDX) into TFRecord or LMDB shards"},
    {"inspect", cmd_inspect, "show records, shards, labels and image sizes of a dataset"},
    {"verify", cmd_verify, "check every CRC, Example and JPEG header; exit 1 on a problem"},
    {"index", cmd_index, "write the .idx index files of shards that have none (TensorFlow's)"},
    {"profile", cmd_profile, "run the input pipeline alone: images/s, per-stage figures, bottleneck"},
    {"train", cmd_train, "train a ResNet from shards: progress, TensorBoard logs, checkpoints"},
    {"eval", cmd_eval, "top-1 and top-5 of a checkpoint on a split"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice <command> [options]   (sluice <command> --help for details)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n  --version   version and build features\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        int gpus = sl_cuda_device_count();
        printf("sluice %s\ncuda: %s", SLUICE_VERSION, sl_cuda_built() ? "built" : "not built");
        if (sl_cuda_built())
            printf(" (%d device%s usable)", gpus < 0 ? 0 : gpus, gpus == 1 ? "" : "s");
        printf("\ncrc32c: %s\n", sl_crc32c_hw_available() ? "sse4.2" : "portable");
        printf("cpu convolutions: %s\n", sl_train_cpu_conv());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sluice %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_fail(const char *cmd, int rc)
{
    const char *m = sl_errmsg();
    cli_error(cmd, "%s", m[0] ? m : sl_strerror(rc));
    return 2;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        goto bad;
    *out = v;
    return 0;
bad:
    cli_error(cmd, "%s: bad value '%s' (want a non-negative integer)", opt, s ? s : "");
    return -1;
}

int cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s: bad value '%s' (want an integer in %d..%d)", opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

const char *cli_opt_value(int argc, char **argv, int *i, const char *opt, int *missing)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int cli_stderr_tty(void) { return isatty(STDERR_FILENO); }

const char *cli_bytes(char *buf, size_t cap, uint64_t b)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1000 && i < 4) {
        v /= 1000;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", v, u[i]);
    return buf;
}

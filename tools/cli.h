/*
 * tools/cli.h - shared pieces of the sluice CLI: one file per subcommand,
 * each exporting "int cmd_<name>(int argc, char **argv)" (argv[0] is the
 * subcommand name) that returns the process exit status: 0 ok, 1 the data
 * has a problem (verify), 2 usage or runtime error.
 *
 * Threading: the CLI is single-threaded except where a library call runs
 * workers; these helpers are not thread-safe.
 */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <signal.h>
#include <stdint.h>

int cmd_convert(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_index(int argc, char **argv);

/* Print "sluice <cmd>: <formatted>\n" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "sluice <cmd>: <sl_errmsg() or sl_strerror(rc)>\n" to stderr; returns 2. */
int cli_fail(const char *cmd, int rc);
/* Parse an unsigned/signed integer option value; on error prints
 * "sluice <cmd>: --opt: bad value 'x'" and returns -1. */
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
int cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);
/* "--opt VALUE" or "--opt=VALUE" at argv[*i]: the value (*i moved past it),
 * or NULL when argv[*i] is not opt, or when its value is missing (then
 * *missing = 1). For the commands that parse argv by hand. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *opt, int *missing);
/* 1 if stderr is a terminal (progress lines are drawn only then). */
int cli_stderr_tty(void);
/* Ctrl-C and SIGTERM as a stop request (signals.c): catch returns the
 * flag the first of them sets to its number, for a library's stop field;
 * restore puts the previous handlers back and returns the signal that came
 * (0: none); a command stopped by one exits with 128 + it. */
typedef struct cli_stop {
    struct sigaction old_int, old_term;
} cli_stop;
const volatile int *cli_stop_catch(cli_stop *s);
int cli_stop_restore(const cli_stop *s);
const char *cli_stop_name(int sig); /* "Ctrl-C (SIGINT)", "SIGTERM" */
/* "1.23 GB" style byte count into buf. */
const char *cli_bytes(char *buf, size_t cap, uint64_t bytes);

#endif
